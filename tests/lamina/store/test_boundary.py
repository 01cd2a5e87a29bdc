"""Only the store knows where objects live: no code outside lamina/store/ asks for a local path."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
PACKAGES = ("lamina", "workers", "jobs", "planner")


def test_no_local_path_outside_the_store():
    leaks = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()}"
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if (ROOT / "lamina" / "store") not in path.parents
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if "local_path(" in line
    ]
    assert leaks == [], "use store.staged_input / staged_output / is_local instead of local_path():\n" + "\n".join(leaks)
