"""`pip install lamina` puts one package on the path: `lamina`, with planner/, workers/ and jobs/ in it.

The wheel is built from this checkout with Cargo's dev profile, so it reuses the native build that
`make setup` left in CARGO_TARGET_DIR (a release wheel holds the same files, optimized further), and
is installed into a new virtualenv. That virtualenv borrows the running one's site-packages for
pyarrow, Ray and the rest, after its own, so every `lamina` module comes from the wheel.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Source folder -> the package it is installed as.
FOLDERS = {"lamina": "lamina", "planner": "lamina/planner", "workers": "lamina/workers", "jobs": "lamina/jobs"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    # setuptools' build tree and metadata go to the temp dir, not the checkout: a stale build/ there
    # would leak deleted modules into the wheel.
    (tmp / "build.cfg").write_text(f"[build]\nbuild_base = {tmp / 'build'}\n[egg_info]\negg_base = {tmp}\n")
    env = {**os.environ, "DIST_EXTRA_CONFIG": str(tmp / "build.cfg"), "SETUPTOOLS_RUST_CARGO_PROFILE": "dev"}
    env.setdefault("CARGO_TARGET_DIR", str(Path.home() / ".cache" / "lamina" / "target"))  # the Makefile's
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "--no-build-isolation",
            "--wheel-dir",
            str(tmp / "dist"),
            str(ROOT),
        ],
        env=env,
        check=True,
        cwd=tmp,
    )
    (built,) = (tmp / "dist").glob("lamina-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A new virtualenv with the wheel installed by pip; returns its python."""
    path = tmp_path_factory.mktemp("venv")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    python = path / "bin" / "python"
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "-q", "--no-deps", str(wheel)], check=True, cwd=path
    )
    return python


def _site_packages(python: Path) -> Path:
    out = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
        capture_output=True,
        text=True,
        check=True,
        cwd=python.parent,
    )
    return Path(out.stdout.strip())


def _record(site: Path) -> list[str]:
    (dist_info,) = site.glob("lamina-*.dist-info")
    with open(dist_info / "RECORD", newline="") as f:
        return [row[0] for row in csv.reader(f)]


def test_the_wheel_installs_only_the_lamina_package(venv):
    site = _site_packages(venv)
    record = _record(site)
    dist_info = {p.split("/")[0] for p in record if ".dist-info/" in p}
    top_level = {p.split("/")[0] for p in record if not p.startswith("..")} - dist_info
    assert top_level == {"lamina"}, record
    (dist_info,) = site.glob("lamina-*.dist-info")
    assert (dist_info / "top_level.txt").read_text().split() == ["lamina"]
    # Every module of the checkout is in it, under its installed name, with the extension, stub and marker.
    expected = {
        f"{FOLDERS[p.parts[0]]}/{Path(*p.parts[1:]).as_posix()}"
        for folder in FOLDERS
        for p in (q.relative_to(ROOT) for q in (ROOT / folder).rglob("*.py"))
    }
    assert expected - set(record) == set()
    assert {"lamina/py.typed", "lamina/_native.pyi"} <= set(record)
    assert any(p.startswith("lamina/_native.") and p.endswith(".so") for p in record), record


def test_the_installed_package_imports_from_the_wheel_alone(venv, tmp_path):
    # Dependencies (pyarrow, Ray, ...) come from the running environment, after the wheel's site-packages;
    # a .pth line adds a directory without running the editable install's finder that lives there.
    (_site_packages(venv) / "deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    modules = sorted(
        ".".join(Path(FOLDERS[p.parts[0]], *p.parts[1:]).with_suffix("").parts).removesuffix(".__init__")
        for folder in FOLDERS
        for p in (q.relative_to(ROOT) for q in (ROOT / folder).rglob("*.py"))
    )
    code = f"""
import importlib, importlib.util, sys
for name in {modules!r}:
    module = importlib.import_module(name)
    assert "site-packages" in module.__file__ and {str(ROOT)!r} not in module.__file__, module.__file__
import lamina._native
for name in ("planner", "workers", "jobs"):
    assert importlib.util.find_spec(name) is None, name
print(len({modules!r}))
"""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    out = subprocess.run([str(venv), "-c", code], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(modules)
    # The console script runs the jobs package under its installed name.
    script = subprocess.run([str(venv.parent / "lamina"), "--help"], capture_output=True, text=True, cwd=tmp_path, env=env)
    assert script.returncode == 0 and "compact" in script.stdout, script.stdout + script.stderr
