"""The house rules of docs/ARCHITECTURE.md, checked on the source so they cannot quietly erode."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("lamina", "workers", "jobs", "planner")
# The folders planner/, workers/ and jobs/ are installed as lamina.planner, lamina.workers and
# lamina.jobs (pyproject.toml): `lamina` is the only import root.
MAPPED = ("planner", "workers", "jobs")


def _modules(folders=PACKAGES):
    for package in folders:
        for path in sorted((ROOT / package).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), ast.parse(path.read_text(), str(path))


def _imports(tree: ast.AST) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def test_planner_workers_and_jobs_are_imported_only_under_lamina():
    """`import planner` works only from the repository's root (the current directory on sys.path),
    never from an installed Lamina, and Ray would pickle a task by that path: nothing may use it."""
    module_path = re.compile(rf"({'|'.join(MAPPED)})(\.\w*)+(:\w+)?")  # "jobs." of f"jobs.{name}" too
    run_module = re.compile(rf"-m\s+({'|'.join(MAPPED)})\.")
    bad = []
    for name, tree in _modules(PACKAGES + ("tests", "benchmarks")):
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                bad += [f"{name}:{node.lineno}: import {a.name}" for a in node.names if a.name.split(".")[0] in MAPPED]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module.split(".")[0] in MAPPED:
                bad.append(f"{name}:{node.lineno}: from {node.module} import ...")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and (module_path.fullmatch(node.value) or run_module.search(node.value))
            ):
                bad.append(f"{name}:{node.lineno}: {node.value!r}")  # "jobs.cli:main", "python -m jobs.x"
    assert bad == [], "use lamina.planner / lamina.workers / lamina.jobs:\n" + "\n".join(bad)


def test_only_the_runtime_module_talks_to_ray():
    users = [name for name, tree in _modules() if any(m == "ray" or m.startswith("ray.") for m in _imports(tree))]
    # lamina/ray.py is the Ray Data adapter: a Datasource/Datasink must subclass Ray's classes.
    # It is imported only on demand (lamina.ray, Table.to_ray), never by `import lamina`.
    # lamina/testing/cluster.py starts a local Ray for users' tests (lamina.testing.local_ray, the
    # lamina_ray fixture) with its own temp dir and worker env, which runtime.connect does not take.
    assert users == ["lamina/ray.py", "lamina/testing/cluster.py", "workers/runtime.py"]


def test_import_lamina_does_not_import_ray():
    import subprocess
    import sys

    code = "import sys, lamina, lamina.table; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "False"


def test_the_planner_does_no_io_and_needs_no_workers():
    for name, tree in _modules():
        if name.startswith("planner/"):
            bad = {
                m
                for m in _imports(tree)
                if m.split(".")[0] in ("boto3", "ray")
                or m.startswith(("lamina.workers", "lamina.jobs"))
                or m in ("lamina.store", "lamina.datafile", "lamina.commit", "lamina.table")
            }
            assert not bad, f"{name} imports {sorted(bad)}"


def test_only_table_py_sets_a_tables_manifest():
    writers = [
        f"{name}:{node.lineno}"
        for name, tree in _modules()
        for node in ast.walk(tree)
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Attribute) and target.attr == "_manifest"
    ]
    assert writers and all(w.startswith("lamina/table.py:") for w in writers), writers


def test_jobs_only_parse_show_progress_and_print():
    """A job module calls the library: it never builds transactions, commits or plans groups itself."""
    for name, tree in _modules():
        if name.startswith("jobs/"):
            bad = {
                m
                for m in _imports(tree)
                if m in ("lamina.commit", "lamina.transaction", "lamina.store")
                or m.startswith("lamina.workers.")
                and m != "lamina.workers.runtime"
            }
            assert not bad, f"{name} imports {sorted(bad)}"


def test_every_error_class_lives_in_lamina_errors():
    import lamina.errors

    defined = []
    for name, tree in _modules():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and any(
                isinstance(b, ast.Name)
                and (b.id.endswith("Error") or b.id in dir(lamina.errors))
                and isinstance(getattr(lamina.errors, b.id, None), type)
                and issubclass(getattr(lamina.errors, b.id), Exception)
                for b in node.bases
            ):
                defined.append(f"{name}:{node.name}")
    assert all(d.startswith("lamina/errors.py:") for d in defined), defined


# Layers, lowest first; a module imports its own layer and those below only. The drivers run a job
# from plan to commit (docs/ARCHITECTURE.md); lamina.testing serves users' tests, like a job.
DRIVERS = ("lamina/compaction.py", "lamina/index/build.py", "lamina/maintenance.py", "lamina/ingestion.py", "lamina/ray.py")
LAYERS = ("format core", "planner", "workers", "drivers", "jobs")
# Conveniences that import upward lazily, inside the function (Table.to_ray, Table.create_index).
LAZY_CONVENIENCES = {("lamina/table.py", "lamina.ray"), ("lamina/table.py", "lamina.index.build")}


def _layer_of_file(name: str) -> int:
    if name.startswith(("jobs/", "lamina/testing/")):
        return 4
    if name in DRIVERS:
        return 3
    return 2 if name.startswith("workers/") else 1 if name.startswith("planner/") else 0


def _file_of_module(module: str) -> str | None:
    """lamina.planner.plan -> planner/plan.py; None for a module outside Lamina."""
    parts = module.split(".")
    if parts[0] != "lamina":
        return None
    if len(parts) > 1 and parts[1] in MAPPED:
        parts = parts[1:]
    path = Path(*parts)
    return (path.with_suffix(".py") if (ROOT / path.with_suffix(".py")).exists() else path / "__init__.py").as_posix()


def _module_of_file(path: str) -> str:
    """planner/plan.py -> lamina.planner.plan, lamina/index/__init__.py -> lamina.index."""
    parts = Path(path).with_suffix("").parts
    parts = parts[:-1] if parts[-1] == "__init__" else parts
    return ".".join(parts if parts[0] == "lamina" else ("lamina", *parts))


def test_layers_point_one_way():
    upward = []
    for name, tree in _modules():
        in_functions = {
            id(n) for f in ast.walk(tree) if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(f)
        }
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                modules = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                modules = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            else:
                continue
            for target in {f for f in map(_file_of_module, modules) if f and (ROOT / f).exists()}:
                if _layer_of_file(target) <= _layer_of_file(name):
                    continue
                key = (name, _module_of_file(target))
                if key in LAZY_CONVENIENCES and id(node) in in_functions:
                    continue
                upward.append(
                    f"{name}:{node.lineno} ({LAYERS[_layer_of_file(name)]}) imports {key[1]} ({LAYERS[_layer_of_file(target)]})"
                )
    assert upward == [], "\n".join(upward)


def test_no_module_uses_another_modules_private_names():
    """A private name (``_x``) is used only in the module that defines it: what another module needs is an
    operation with a public name (``Table.commit_transaction`` returns the new manifest and the table moves
    itself). ``lamina._native`` is the extension module's name, not a private one."""
    bad = []
    for name, tree in _modules():
        defined = set()
        for n in ast.walk(tree):
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                defined.add(n.name)
            elif isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store) or isinstance(n, ast.arg):
                defined.add(n.id if isinstance(n, ast.Name) else n.arg)
            elif isinstance(n, ast.Attribute) and isinstance(n.ctx, ast.Store):
                defined.add(n.attr)
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and n.level == 0 and (n.module or "").startswith("lamina"):
                bad += [
                    f"{name}:{n.lineno}: from {n.module} import {a.name}"
                    for a in n.names
                    if a.name.startswith("_") and not a.name.startswith("__") and a.name != "_native"
                ]
            elif (
                isinstance(n, ast.Attribute) and n.attr.startswith("_") and not n.attr.startswith("__") and n.attr not in defined
            ):
                bad.append(f"{name}:{n.lineno}: {ast.unparse(n)}")
    assert bad == [], "\n".join(bad)
