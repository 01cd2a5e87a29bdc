"""The stub ``lamina/_native.pyi`` is the native module's honest surface: it lists every export, nothing else."""

from __future__ import annotations

import ast
import inspect
import types
from pathlib import Path

import pyarrow as pa
import pytest

from lamina import _native, errors

STUB = Path(_native.__file__).with_name("_native.pyi")

#: What every extension module has, not exported by Lamina.
MODULE_DUNDERS = {"__name__", "__doc__", "__file__", "__loader__", "__package__", "__spec__", "__all__", "__builtins__"}
#: What every class has, not a member Lamina defines.
CLASS_DUNDERS = {"__doc__", "__module__", "__dict__", "__weakref__", "__text_signature__", "__qualname__"}


def runtime_exports(module: types.ModuleType) -> set[str]:
    return set(vars(module)) - MODULE_DUNDERS


def runtime_members(cls: type) -> dict[str, object]:
    """A class's members as the stub names them: pyo3's ``__new__`` is the stub's ``__init__``."""
    return {("__init__" if name == "__new__" else name): value for name, value in vars(cls).items() if name not in CLASS_DUNDERS}


def parse_stub(path: Path) -> ast.Module:
    return ast.parse(path.read_text(), filename=str(path))


def stub_names(tree: ast.Module) -> dict[str, ast.stmt]:
    out: dict[str, ast.stmt] = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            out[node.target.id] = node
    return out


def is_property(node: ast.FunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)


def stub_members(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    members = {}
    for node in cls.body:
        assert isinstance(node, (ast.FunctionDef, ast.Expr)), (
            f"{cls.name}: declare members as methods or @property ({ast.dump(node)[:60]})"
        )
        if isinstance(node, ast.FunctionDef):
            members[node.name] = node
    return members


def surface_problems(module: types.ModuleType, tree: ast.Module) -> list[str]:
    """Every difference between the module and the stub (names, class members, member kinds, parameters)."""
    problems = []
    stubbed = stub_names(tree)
    exported = runtime_exports(module)
    problems += [f"{name} is exported by lamina._native but missing from the stub" for name in sorted(exported - set(stubbed))]
    problems += [f"{name} is in the stub but not exported by lamina._native" for name in sorted(set(stubbed) - exported)]
    for name in sorted(exported & set(stubbed)):
        node, value = stubbed[name], getattr(module, name)
        if isinstance(node, ast.ClassDef):
            if not isinstance(value, type):
                problems.append(f"{name} is a class in the stub, not in the module")
                continue
            members, runtime = stub_members(node), runtime_members(value)
            problems += [f"{name}.{m} exists but is missing from the stub" for m in sorted(set(runtime) - set(members))]
            problems += [f"{name}.{m} is in the stub but does not exist" for m in sorted(set(members) - set(runtime))]
            for m in sorted(set(members) & set(runtime)):
                getter = isinstance(runtime[m], types.GetSetDescriptorType)
                if getter != is_property(members[m]):
                    problems.append(f"{name}.{m}: a {'getter' if getter else 'method'} in the module, not in the stub")
                elif not getter:
                    target = value if m == "__init__" else runtime[m]
                    problems += parameter_problems(f"{name}.{m}", members[m], target, method=True)
        elif isinstance(node, ast.FunctionDef):
            problems += parameter_problems(name, node, value, method=False)
    return problems


def parameter_problems(name: str, node: ast.FunctionDef, value: object, method: bool) -> list[str]:
    """The stub's parameters against the runtime signature: names, kinds and which have defaults."""
    try:
        sig = inspect.signature(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return []  # slot wrappers like __len__ take only self
    runtime = [p for p in sig.parameters.values() if p.name != "self"]
    a = node.args
    stub = [(arg.arg, "positional") for arg in a.posonlyargs + a.args] + [(arg.arg, "keyword") for arg in a.kwonlyargs]
    if method and stub and stub[0][0] == "self":
        stub = stub[1:]
    defaults = {arg.arg for arg in (a.posonlyargs + a.args)[len(a.posonlyargs + a.args) - len(a.defaults) :]}
    defaults |= {arg.arg for arg, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None}
    want = [(p.name, "keyword" if p.kind is p.KEYWORD_ONLY else "positional", p.default is not p.empty) for p in runtime]
    got = [(n, kind, n in defaults) for n, kind in stub]
    return [] if want == got else [f"{name}: the stub has parameters {got}, the module {want}"]


def undocumented(tree: ast.Module) -> list[str]:
    """Stub entries without types or a docstring (module constants take the string that follows them)."""
    problems = []
    body = tree.body
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign):
            following = body[i + 1] if i + 1 < len(body) else None
            if not (
                isinstance(following, ast.Expr)
                and isinstance(following.value, ast.Constant)
                and isinstance(following.value.value, str)
            ):
                problems.append(f"{ast.unparse(node.target)} has no docstring")
        elif isinstance(node, ast.FunctionDef):
            problems += function_problems(node.name, node)
        elif isinstance(node, ast.ClassDef):
            if not ast.get_docstring(node):
                problems.append(f"{node.name} has no docstring")
            for m in stub_members(node).values():
                problems += function_problems(f"{node.name}.{m.name}", m)
    return problems


def function_problems(name: str, node: ast.FunctionDef) -> list[str]:
    problems = []
    if not (ast.get_docstring(node) or "").strip():
        problems.append(f"{name} has no docstring")
    if node.returns is None:
        problems.append(f"{name} has no return type")
    a = node.args
    for arg in a.posonlyargs + a.args + a.kwonlyargs:
        if arg.arg != "self" and arg.annotation is None:
            problems.append(f"{name}({arg.arg}) has no type")
    return problems


def test_the_stub_lists_every_export_and_nothing_else() -> None:
    assert surface_problems(_native, parse_stub(STUB)) == []


def test_every_stub_entry_is_typed_and_documented() -> None:
    assert undocumented(parse_stub(STUB)) == []


def test_a_missing_or_extra_entry_is_caught() -> None:
    """The check itself can fail: an export without a stub entry, a stale entry, a stale member."""
    source = STUB.read_text()
    tree = ast.parse(source)
    tree.body = [n for n in tree.body if not (isinstance(n, ast.FunctionDef) and n.name == "wal_split")]
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "MemTable":
            node.body = [m for m in node.body if not (isinstance(m, ast.FunctionDef) and m.name == "get_many")]
    tree.body += ast.parse("def bm25_top_k(k: int) -> None:\n    '''Gone.'''\n").body
    problems = surface_problems(_native, tree)
    assert "wal_split is exported by lamina._native but missing from the stub" in problems
    assert "MemTable.get_many exists but is missing from the stub" in problems
    assert "bm25_top_k is in the stub but not exported by lamina._native" in problems
    wrong = ast.parse(source.replace("def checksum(data: bytes)", "def checksum(data: bytes, *, fast: bool = False)"))
    assert any(p.startswith("checksum: the stub has parameters") for p in surface_problems(_native, wrong))


def test_native_errors_are_the_lamina_errors_classes(tmp_path: Path) -> None:
    with pytest.raises(errors.CorruptFile, match="_deletions/d.bin"):
        _native.decode_deletions(b"\x00garbage", "_deletions/d.bin")
    with pytest.raises(errors.InvalidArgument, match="uint32"):
        _native.encode_deletions(pa.array([1, 2], pa.int64()))
    with pytest.raises(errors.StorageError, match="missing.parquet"):
        _native.file_checksum(tmp_path / "missing.parquet")
    with pytest.raises(errors.InvalidArgument, match="int64, uint64 or bytes"):
        _native.MemTable("float64")
