"""Schema evolution as metadata (docs/FORMAT.md §2.4): stable field ids, and how a data file written
in one of a table's earlier schemas is read in today's.

Every field of a table schema, nested ones too, has an id (``lamina:field_id`` in its Arrow metadata).
A table whose schema never changed has none stored: its ids are the fields' positions, numbered
depth-first (``with_ids``), so old tables read as they always did and upgrade on their first change.
A data file is read through its fragment's schema (the one it was written in, ``Fragment.schema``):

    today's field ──id──▶ the file's field (its physical name and type) ──▶ read, renamed, widened
                 └─ no field with that id in the file ──▶ nulls, or the default the column was added with

So a rename never touches a file, a dropped column is simply not read, and a name dropped and added
again is another id: the old values stay invisible. ``Layout`` is that mapping for one (file schema,
today's schema) pair, computed once and cached; readers (``lamina.datafile``, ``lamina.prune``) use
it for columns, zone maps and row-group statistics.

    add_columns ─┐
    drop_columns ├─▶ evolve(schema, next_field_id) ─▶ a new schema (ids kept) ─▶ AlterSchema commit
    rename_column│    checks names, types, widenings                              (no data file)
    alter_column ┘
"""

from __future__ import annotations

import base64
import threading
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.zones import Zone, key_kind

#: Field metadata key holding a field's id.
FIELD_ID = b"lamina:field_id"
#: Field metadata key holding the value rows written before the column was added read as
#: (base64 of an Arrow IPC stream of one row); absent: null.
DEFAULT = b"lamina:default"


# -- ids ------------------------------------------------------------------------------------------
def field_id(f: pa.Field) -> int | None:
    raw = (f.metadata or {}).get(FIELD_ID)
    return None if raw is None else int(raw)


def _children(t: pa.DataType) -> list[pa.Field]:
    if pa.types.is_struct(t):
        return [t.field(i) for i in range(t.num_fields)]
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return [t.value_field]
    if pa.types.is_map(t):
        return [t.key_field, t.item_field]
    return []


def _with_children(t: pa.DataType, kids: list[pa.Field]) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct(kids)
    if pa.types.is_list(t):
        return pa.list_(kids[0])
    if pa.types.is_large_list(t):
        return pa.large_list(kids[0])
    if pa.types.is_fixed_size_list(t):
        return pa.list_(kids[0], t.list_size)
    if pa.types.is_map(t):
        return pa.map_(kids[0], kids[1], keys_sorted=t.keys_sorted)
    return t


def _walk(fields: Iterable[pa.Field], prefix: str = "") -> Iterator[tuple[str, pa.Field]]:
    """Every field depth-first, with its dotted path."""
    for f in fields:
        path = prefix + f.name
        yield path, f
        yield from _walk(_children(f.type), path + ".")


def _numbered(fields: Sequence[pa.Field], counter: list[int]) -> list[pa.Field]:
    out = []
    for f in fields:
        fid = field_id(f)
        if fid is None:
            fid = counter[0]
            counter[0] += 1
        kids = _children(f.type)
        typ = _with_children(f.type, _numbered(kids, counter)) if kids else f.type
        out.append(f.with_type(typ).with_metadata({**(f.metadata or {}), FIELD_ID: str(fid).encode()}))
    return out


def without_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` without field ids and defaults at any depth: a schema given by a user (e.g. one read from
    another table, whose results carry them) starts a table of its own, whose ids this table gives."""
    if not any(FIELD_ID in (f.metadata or {}) or DEFAULT in (f.metadata or {}) for _, f in _walk(schema)):
        return schema

    def clean(fields: Sequence[pa.Field]) -> list[pa.Field]:
        out = []
        for f in fields:
            kids = _children(f.type)
            typ = _with_children(f.type, clean(kids)) if kids else f.type
            meta = {k: v for k, v in (f.metadata or {}).items() if k not in (FIELD_ID, DEFAULT)}
            out.append(f.with_type(typ).with_metadata(meta))
        return out

    return pa.schema(clean(list(schema)), metadata=schema.metadata)


def has_ids(schema: pa.Schema) -> bool:
    return any(field_id(f) is not None for f in schema)


_IDS: dict[int, tuple[pa.Schema, pa.Schema]] = {}
_IDS_LOCK = threading.Lock()


def with_ids(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field's id: its stored ones, or for a schema that never had any (a table
    whose schema never changed) the fields' depth-first positions from 0."""
    hit = _IDS.get(id(schema))
    if hit is not None and hit[0] is schema:
        return hit[1]
    if has_ids(schema):
        out = schema
    else:
        out = pa.schema(_numbered(list(schema), [0]), metadata=schema.metadata)
    with _IDS_LOCK:
        if len(_IDS) > 256:
            _IDS.clear()
        _IDS[id(schema)] = (schema, out)
    return out


def same_shape(a: pa.Field, b: pa.Field) -> bool:
    """Whether fields ``a`` and ``b`` (with their ids: ``with_ids``) are one field holding the same nested
    fields, by name and id, at every level: so a value of ``a`` is one of ``b`` by a cast of its leaves,
    wherever the two may differ in name or leaf types."""

    def shape(f: pa.Field) -> list[tuple[str, int | None]]:
        return [(p, field_id(x)) for p, x in _walk(_children(f.type))]

    return field_id(a) == field_id(b) and shape(a) == shape(b)


def next_field_id(schema: pa.Schema) -> int:
    """One more than the greatest id in ``schema`` (its ids as ``with_ids`` gives them)."""
    return 1 + max((field_id(f) or 0 for _, f in _walk(with_ids(schema))), default=-1)


def same(a: pa.Schema, b: pa.Schema) -> bool:
    """Whether data files written in ``a`` and ``b`` have the same columns: names, types and ids (the
    fields' metadata; the schema's own, e.g. pandas' or a foreign writer's, says nothing of the columns)."""
    if a is b:
        return True
    a, b = with_ids(a), with_ids(b)
    return len(a) == len(b) and all(x.equals(y, check_metadata=True) for x, y in zip(a, b))


# -- defaults -------------------------------------------------------------------------------------
def default_of(f: pa.Field) -> pa.Scalar | None:
    """The value rows written before ``f`` was added read as (None: null)."""
    raw = (f.metadata or {}).get(DEFAULT)
    if raw is None:
        return None
    with pa.ipc.open_stream(base64.b64decode(raw)) as r:
        return r.read_all().column(0)[0]


def _encode_default(f: pa.Field, value: Any) -> bytes:
    try:
        arr = pa.array([value], type=f.type)
    except (pa.ArrowException, TypeError, ValueError) as e:
        raise InvalidArgument(f"default {value!r} for column {f.name!r} is not a {f.type} ({e})") from None
    sink = pa.BufferOutputStream()
    batch = pa.record_batch([arr], names=["v"])
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return base64.b64encode(sink.getvalue().to_pybytes())


# -- reading a file written in another schema -----------------------------------------------------
def _by_id(fields: Iterable[pa.Field]) -> dict[int, pa.Field]:
    return {fid: f for f in fields if (fid := field_id(f)) is not None}


def _conform(arr: pa.Array, src: pa.Field, dst: pa.Field) -> pa.Array:
    """One column of a file (``src``) as today's field ``dst`` (the same id): children matched by id."""
    if src.type.equals(dst.type, check_metadata=True):
        return arr
    if pa.types.is_struct(dst.type) and pa.types.is_struct(src.type):
        have = {field_id(src.type.field(i)): i for i in range(src.type.num_fields)}
        kids = []
        for i in range(dst.type.num_fields):
            d = dst.type.field(i)
            j = have.get(field_id(d))
            kids.append(missing(d, len(arr)) if j is None else _conform(arr.field(j), src.type.field(j), d))
        mask = arr.is_null() if arr.null_count else None
        return pa.StructArray.from_arrays(kids, fields=list(dst.type), mask=mask)
    if (pa.types.is_list(dst.type) or pa.types.is_large_list(dst.type)) and (
        pa.types.is_list(src.type) or pa.types.is_large_list(src.type)
    ):
        values = _conform(arr.flatten(), src.type.value_field, dst.type.value_field)
        offsets = pc.subtract(arr.offsets, arr.offsets[0])  # a slice's offsets, relative to its flattened values
        cls = pa.LargeListArray if pa.types.is_large_list(dst.type) else pa.ListArray
        mask = arr.is_null() if arr.null_count else None
        return cls.from_arrays(
            offsets.cast(pa.int64() if cls is pa.LargeListArray else pa.int32()), values, type=dst.type, mask=mask
        )
    return arr.cast(dst.type)


def source_of(physical: pa.Schema | None, field: pa.Field) -> tuple[str | None, Any]:
    """The column of a file written in ``physical`` holding today's ``field`` (None: the file has none),
    and how its values become the field's (None: as they are)."""
    if physical is None:
        return field.name, None
    fid = field_id(field)
    src = next((f for f in with_ids(physical) if field_id(f) == fid), None)
    if src is None:
        return None, None
    if src.type.equals(field.type, check_metadata=True):
        return src.name, None
    return src.name, lambda values: pa.chunked_array([_conform(c, src, field) for c in values.chunks], type=field.type)


def missing(f: pa.Field, rows: int) -> pa.Array:
    """A column the file does not have: its default, else nulls."""
    d = default_of(f)
    if d is None:
        return pa.nulls(rows, f.type)
    return pa.repeat(d, rows).cast(f.type)


@dataclass(frozen=True)
class Layout:
    """How a data file written in ``physical`` is read as ``today``'s columns."""

    physical: pa.Schema
    today: pa.Schema
    #: Whether the file's columns are today's (names, types, ids): nothing to map.
    same: bool
    #: Today's top-level name → the file's field with its id (None: the file has no such column).
    sources: dict[str, pa.Field | None]

    def read_columns(self, names: Sequence[str]) -> list[str]:
        """The file's columns to read for today's ``names`` (those it has)."""
        if self.same:
            return list(names)
        return [src.name for n in names if (src := self.sources[n]) is not None]

    def conform(self, table: pa.Table, names: Sequence[str]) -> pa.Table:
        """``table`` (the file's ``read_columns(names)``) as today's ``names``: renamed, widened, with
        added columns filled in."""
        if self.same or not names:  # (no columns: a count of rows, which a table built from none would lose)
            return table.select([]) if not names else table
        cols, fields = [], []
        for n in names:
            dst = self.today.field(n)
            src = self.sources[n]
            if src is None:
                cols.append(missing(dst, table.num_rows))
            else:
                col = table.column(src.name)
                cols.append(pa.chunked_array([_conform(c, src, dst) for c in col.chunks], type=dst.type))
            fields.append(dst)
        return pa.Table.from_arrays(cols, schema=pa.schema(fields))

    def stable(self, name: str) -> bool:
        """Whether today's column ``name`` is the file's column of that name, with the same type:
        statistics the file keeps under that name are the column's."""
        src = self.sources.get(name)
        return self.same or (src is not None and src.name == name and src.type.equals(self.today.field(name).type))

    def zones(self, zones: tuple[Zone, ...]) -> tuple[Zone, ...]:
        """Zone maps of the file's columns as today's: renamed; those of columns dropped or changed to
        another kind of key left out (their rows then count as unknown)."""
        if self.same:
            return zones
        names = {src.name: n for n, src in self.sources.items() if src is not None}
        out = []
        for z in zones:
            n = names.get(z.column)
            if n is not None and key_kind(self.today.field(n).type) == z.kind:
                out.append(z if n == z.column else Zone(n, *z[1:]))
        return tuple(out)


_LAYOUTS: dict[tuple[int, int], tuple[pa.Schema, pa.Schema, Layout]] = {}


def layout(physical: pa.Schema | None, today: pa.Schema) -> Layout:
    """The ``Layout`` of a file written in ``physical`` (None: today's) read as ``today``; cached."""
    if physical is None or physical is today:
        return Layout(today, today, True, {})
    key = (id(physical), id(today))
    hit = _LAYOUTS.get(key)
    if hit is not None and hit[0] is physical and hit[1] is today:
        return hit[2]
    if same(physical, today):
        out = Layout(physical, today, True, {})
    else:
        have = _by_id(with_ids(physical))
        out = Layout(physical, today, False, {f.name: have.get(field_id(f)) for f in with_ids(today)})  # type: ignore[arg-type]
    with _IDS_LOCK:
        if len(_LAYOUTS) > 256:
            _LAYOUTS.clear()
        _LAYOUTS[key] = (physical, today, out)
    return out


def stable_names(schemas: Iterable[pa.Schema], today: pa.Schema) -> frozenset[str]:
    """Today's columns that every schema in ``schemas`` (a table's schemas still read) either lacks or
    holds under the same name with the same id and kind of key: statistics merged by name over files
    of all those schemas (a manifest segment's zone maps) are that column's."""
    ids = with_ids(today)
    out = set()
    for f in ids:
        ok = True
        for s in schemas:
            s = with_ids(s)
            i = s.get_field_index(f.name)
            if i >= 0 and (field_id(s.field(i)) != field_id(f) or key_kind(s.field(i).type) != key_kind(f.type)):
                ok = False
                break
        if ok:
            out.add(f.name)
    return frozenset(out)


# -- changing a schema ----------------------------------------------------------------------------
#: Widenings ``alter_column`` allows: every value of the old type is exactly a value of the new one.
_INTS = [pa.int8(), pa.int16(), pa.int32(), pa.int64()]
_UINTS = [pa.uint8(), pa.uint16(), pa.uint32(), pa.uint64()]


def widens(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether every value of ``old`` is exactly a value of ``new`` (the widenings ``alter_column`` allows)."""
    if old.equals(new):
        return True
    for chain in (_INTS, _UINTS):
        if old in chain and new in chain:
            return chain.index(new) > chain.index(old)
    if old in _UINTS and new in _INTS:
        return _INTS.index(new) > _UINTS.index(old)
    if old in (pa.float16(), pa.float32()) and new == pa.float64():
        return True
    if old in (pa.int8(), pa.int16(), pa.int32(), pa.uint8(), pa.uint16(), pa.uint32()) and new == pa.float64():
        return True
    if (old, new) in ((pa.string(), pa.large_string()), (pa.binary(), pa.large_binary())):
        return True
    if old == pa.date32() and pa.types.is_timestamp(new) and new.tz is None:
        # midnight of the day; only seconds and milliseconds hold every date32 (±5.8 million years):
        # microseconds reach ±292,000 years, nanoseconds 1677-2262. A finer timestamp unit is no widening
        # either (its range is a thousandth), so neither is allowed: an old value outside would make every
        # read of the column fail.
        return new.unit in ("s", "ms")
    return False


def _split(path: str) -> list[str]:
    if not isinstance(path, str) or not path:
        raise InvalidArgument(f"a column is named by a non-empty string (dotted for a nested field), not {path!r}")
    return path.split(".")


def _find(fields: list[pa.Field], parts: list[str], schema: pa.Schema, path: str) -> int:
    names = [f.name for f in fields]
    if parts[0] not in names:
        where = "" if len(parts) == len(_split(path)) else f" in {path.rsplit('.', len(parts))[0]!r}"
        raise InvalidArgument(f"no column {parts[0]!r}{where}; columns: {', '.join(names)}")
    return names.index(parts[0])


def _edit(fields: list[pa.Field], parts: list[str], path: str, schema: pa.Schema, change: Any) -> list[pa.Field]:
    """``fields`` with the field at ``parts`` replaced by ``change(field)`` (a field, or None: removed)."""
    i = _find(fields, parts, schema, path)
    f = fields[i]
    if len(parts) == 1:
        new = change(f)
    else:
        if not pa.types.is_struct(f.type):
            raise InvalidArgument(
                f"{path!r}: {f.name!r} is a {f.type}, not a struct: only struct fields are named by a dotted path"
            )
        kids = _edit(list(f.type), parts[1:], path, schema, change)
        if not kids:
            raise InvalidArgument(f"dropping {path!r} would leave struct {f.name!r} without fields: drop {f.name!r} instead")
        new = f.with_type(pa.struct(kids))
    return fields[:i] + ([] if new is None else [new]) + fields[i + 1 :]


def _check_names(schema: pa.Schema) -> None:
    from lamina.schema import validate_schema

    names = schema.names
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise InvalidArgument(f"the table would have two columns named {', '.join(map(repr, twice))}: a name already in use")
    validate_schema(schema)
    for path, f in _walk(schema):
        if pa.types.is_struct(f.type):
            kids = [k.name for k in f.type]
            if len(set(kids)) != len(kids):
                raise InvalidArgument(f"struct {path!r} would have duplicate field names {kids}")


def _without_ids(f: pa.Field) -> pa.Field:
    """``f`` with no field id at any depth: a type copied from a table's schema (or another table's) carries
    its fields' ids, which an added column must not take over (``_numbered`` gives it new ones)."""
    kids = _children(f.type)
    typ = _with_children(f.type, [_without_ids(k) for k in kids]) if kids else f.type
    meta = {k: v for k, v in (f.metadata or {}).items() if k != FIELD_ID}
    return f.with_type(typ).with_metadata(meta or None)


def add_columns(schema: pa.Schema, next_id: int, fields: Sequence[pa.Field], defaults: dict[str, Any]) -> tuple[pa.Schema, int]:
    """``schema`` with ``fields`` appended (new ids from ``next_id``); the new next id."""
    base = with_ids(schema)
    for f in fields:
        if not isinstance(f, pa.Field):
            raise InvalidArgument(f"add_columns takes pyarrow fields (pa.field(name, type)), not {type(f).__name__}")
    unknown = sorted(set(defaults) - {f.name for f in fields})
    if unknown:
        raise InvalidArgument(f"defaults name columns {unknown} that are not being added")
    new = []
    for f in fields:
        if not f.nullable and f.name not in defaults:
            raise InvalidArgument(
                f"column {f.name!r} is not nullable: the rows already written need a value; "
                f"give it in defaults={{{f.name!r}: ...}}"
            )
        meta = {k: v for k, v in (f.metadata or {}).items() if k not in (FIELD_ID, DEFAULT)}
        if f.name in defaults and defaults[f.name] is not None:
            meta[DEFAULT] = _encode_default(f, defaults[f.name])
        elif not f.nullable:
            raise InvalidArgument(f"column {f.name!r} is not nullable, its default may not be None")
        new.append(_without_ids(f).with_metadata(meta))
    counter = [next_id]
    out = pa.schema(list(base) + _numbered(new, counter))
    _check_names(out)
    return out, counter[0]


def drop_columns(schema: pa.Schema, names: Sequence[str], protected: dict[str, str]) -> pa.Schema:
    """``schema`` without ``names`` (dotted paths name nested fields); ``protected`` maps a column that
    may not be dropped to why."""
    if isinstance(names, str):
        names = [names]
    fields = list(with_ids(schema))
    for path in names:
        top = _split(path)[0]
        if top in protected and path == top:
            raise InvalidArgument(f"column {path!r} cannot be dropped: {protected[top]}")
        fields = _edit(fields, _split(path), path, schema, lambda f: None)
    if not fields:
        raise InvalidArgument("a table keeps at least one column: drop the table instead")
    return pa.schema(fields)


def rename_column(schema: pa.Schema, old: str, new: str) -> pa.Schema:
    """``schema`` with the field at path ``old`` named ``new`` (a name, not a path)."""
    if not isinstance(new, str) or not new or "." in new:
        raise InvalidArgument(f"new name {new!r}: a non-empty name without dots (the field stays where it is)")
    out = pa.schema(_edit(list(with_ids(schema)), _split(old), old, schema, lambda f: f.with_name(new)))
    _check_names(out)
    return out


def alter_column(schema: pa.Schema, path: str, new_type: pa.DataType) -> pa.Schema:
    """``schema`` with the field at ``path`` of ``new_type``, a widening of its type (``widens``)."""
    if not isinstance(new_type, pa.DataType):
        raise InvalidArgument(f"new type must be a pyarrow DataType, not {type(new_type).__name__}")

    def change(f: pa.Field) -> pa.Field:
        if f.type.equals(new_type):
            raise InvalidArgument(f"column {path!r} is already of type {new_type}: nothing to change")
        if not widens(f.type, new_type):
            raise SchemaMismatch(
                f"column {path!r} cannot change from {f.type} to {new_type} without rewriting data: only widenings "
                f"where every old value is exactly a new one are metadata changes (int8→int16→int32→int64, "
                f"float32→float64, string→large_string, date32→timestamp[s or ms], ...; a finer time unit holds a "
                f"narrower range). Rewrite the column with overwrite()"
            )
        return f.with_type(new_type)

    return pa.schema(_edit(list(with_ids(schema)), _split(path), path, schema, change))


@dataclass(frozen=True)
class Change:
    """A schema change applied to a schema: what ``AlterSchema`` commits."""

    schema: pa.Schema
    next_field_id: int
    #: Top-level columns renamed, old name → new (index entries follow them).
    renamed: dict[str, str]
    #: Ids of the fields added, dropped, renamed or altered.
    field_ids: tuple[int, ...]
    #: Top-level columns whose index entries no longer hold their keys (altered to another key domain,
    #: e.g. date32 → timestamp, seconds → milliseconds): dropped, to be created again.
    unindexed: frozenset[str]
    #: The change as recorded (kind and arguments, JSON).
    describe: dict[str, Any]


def _ids_at(schema: pa.Schema, paths: Sequence[str]) -> tuple[int, ...]:
    walked = dict(_walk(with_ids(schema)))
    return tuple(field_id(walked[p]) or 0 for p in paths if p in walked)


def change(schema: pa.Schema, next_id: int | None, kind: str, arguments: dict[str, Any], protected: dict[str, str]) -> Change:
    """``schema`` changed by ``kind`` (``add_columns``, ``drop_columns``, ``rename_column``, ``alter_column``)
    with ``arguments``; ``next_id``: the table's next field id (None: never stored); ``protected``: columns
    that may not be dropped, renamed or altered, and why. InvalidArgument / SchemaMismatch if it can't be."""
    nxt = next_field_id(schema) if next_id is None else next_id

    def guard(path: str, what: str) -> None:
        top = _split(path)[0]
        if top in protected and (path == top or what != "dropped"):
            raise InvalidArgument(f"column {path!r} cannot be {what}: {protected[top]}")

    if kind == "add_columns":
        fields, defaults = arguments["fields"], arguments.get("defaults") or {}
        out, nxt2 = add_columns(schema, nxt, fields, defaults)
        added = [f.name for f in fields]
        described = {"kind": kind, "columns": added, "defaults": sorted(defaults)}
        return Change(out, nxt2, {}, _ids_at(out, added), frozenset(), described)
    if kind == "drop_columns":
        names = list(arguments["names"])
        for n in names:
            guard(n, "dropped")
        out = drop_columns(schema, names, protected)
        return Change(out, nxt, {}, _ids_at(schema, names), frozenset(), {"kind": kind, "columns": names})
    if kind == "rename_column":
        old, new = arguments["old"], arguments["new"]
        guard(old, "renamed")
        out = rename_column(schema, old, new)
        renamed = {old: new} if "." not in old else {}
        return Change(out, nxt, renamed, _ids_at(schema, [old]), frozenset(), {"kind": kind, "old": old, "new": new})
    if kind == "alter_column":
        path, new_type = arguments["name"], arguments["type"]
        guard(path, "altered")
        out = alter_column(schema, path, new_type)
        old_type = dict(_walk(schema))[path].type
        unindexed = frozenset() if "." in path or _same_keys(old_type, new_type) else frozenset([path])
        described = {"kind": kind, "column": path, "type": str(new_type)}
        return Change(out, nxt, {}, _ids_at(schema, [path]), unindexed, described)
    raise InvalidArgument(f"unknown schema change {kind!r}")


def _same_keys(old: pa.DataType, new: pa.DataType) -> bool:
    """Whether an index's keys of ``old`` values are the keys of the same values as ``new``
    (``lamina.keys.key_array``: integers as int64, floats as float64, strings and binaries as bytes)."""
    for test in (pa.types.is_integer, pa.types.is_floating):
        if test(old) and test(new):
            return True
    text = (pa.string(), pa.large_string())
    raw = (pa.binary(), pa.large_binary())
    return (old in text and new in text) or (old in raw and new in raw)


def changed_columns(described: dict[str, Any]) -> set[str]:
    """The top-level columns a recorded change (``Change.describe``) dropped, renamed or altered."""
    paths = described.get("columns", ()) if described.get("kind") == "drop_columns" else ()
    paths = [*paths, *(described[k] for k in ("old", "column") if isinstance(described.get(k), str))]
    return {p.split(".")[0] for p in paths if isinstance(p, str)}
