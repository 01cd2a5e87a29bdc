"""Mutations as data, and the copy-on-write rewrite that commits them: a request (``op``, ``name``, its
arguments: plain JSON, so the writer that has the turn can apply one another process queued) applied to
every row of the latest version (``apply``), then one data file and the three index segments written
over the result, committed as a strict overwrite (``rewrite``)."""

from __future__ import annotations

import bisect
import time
import uuid
from concurrent.futures import Future
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina import errors as lamina_errors
from lamina.catalog import locations
from lamina.catalog.schema import CONFIG_KEY, INDICES, NAMESPACE, SCHEMA, SCHEMA_VERSION, TABLE, parent_of
from lamina.catalog.snapshots import SYSTEM_POOL, pool
from lamina.datafile import WriteOptions, write_fragment
from lamina.errors import InvalidArgument, NamespaceExists, NamespaceNotEmpty, NamespaceNotFound, TableExists, TableNotFound
from lamina.index.options import IndexOptions
from lamina.index.segments import build_local, segment_path, write_segment
from lamina.keys import key_array
from lamina.manifest import IndexEntry, IndexSegment, Manifest
from lamina.store import ObjectStore
from lamina.transaction import Overwrite


def _now_ms() -> int:
    return int(time.time() * 1000)


def sort_rows(rows: pa.Table) -> pa.Table:
    """``rows`` in the current schema, sorted by object id (the order every version is written in)."""
    ids = rows.column("object_id").to_pylist()  # not pyarrow.compute: see _check_free
    if any(a >= b for a, b in zip(ids, ids[1:])):
        rows = rows.sort_by("object_id")
    return rows if rows.schema.equals(SCHEMA) else pa.Table.from_arrays(rows.columns, schema=SCHEMA)


def _append(rows: pa.Table, ids: list[str], row: dict[str, Any]) -> pa.Table:
    """``rows`` (object ids ``ids``) with ``row`` added where its object id sorts (rows sorted by object id stay
    so; others are sorted before they are written)."""
    at = bisect.bisect_left(ids, row["object_id"])
    # One chunk: a table held across many appends would otherwise keep one chunk per append.
    return pa.concat_tables([rows.slice(0, at), pa.Table.from_pylist([row], schema=SCHEMA), rows.slice(at)]).combine_chunks(
        memory_pool=SYSTEM_POOL
    )


def index_entry(store: ObjectStore, name: str, column: str, kind: str, rows: pa.Table) -> IndexEntry:
    opts = IndexOptions()
    seg_uuid = uuid.uuid4().hex
    rel = segment_path(seg_uuid)
    keys = key_array(rows.column(column))
    meta = write_segment(store, rel, lambda local: build_local(kind, [(0, keys)], local, opts))
    seg = IndexSegment(seg_uuid, rel, int(meta["bytes"]), int(meta["rows"]), (0,), meta.get("checksum"))
    return IndexEntry(name, column, kind, uuid.uuid4().hex, (seg,), opts.details())


def rewrite(store: ObjectStore, base: Manifest, rows: pa.Table) -> Overwrite:
    """The strict overwrite replacing the catalog with ``rows`` (sorted by object id, so the file is laid
    out the way lookups and listings read it): one data file and its three index segments, written at once
    by four threads."""
    fragments: list[Future] = []
    indices: list[Future] = []
    if rows.num_rows:
        threads = pool()
        # Uncompressed (docs/FORMAT.md §12): the file is small, and a zstd context per column chunk was a large share
        # of each rewrite. No zone maps (an empty set: nothing bounded): a catalog version is one fragment, read
        # whole or through its indices, never pruned, so computing them would be work no reader uses.
        options = WriteOptions.from_config(base.config, zstd_level=0)
        fragments = [threads.submit(write_fragment, store, SCHEMA, rows.to_batches(), options, ())]
        indices = [threads.submit(index_entry, store, name, column, kind, rows) for name, column, kind in INDICES]
    errors = [f.exception() for f in fragments + indices]
    if any(errors):
        store.delete(
            [f.result().path for f in fragments if f.exception() is None]
            + [p for f in indices if f.exception() is None for p in f.result().files]
        )
        raise next(e for e in errors if e is not None)
    migrate = not base.schema.equals(SCHEMA)
    return Overwrite(
        base.version,
        [f.result() for f in fragments],
        SCHEMA if migrate else None,
        indices=tuple(f.result() for f in indices),
        strict=True,
        config={CONFIG_KEY: SCHEMA_VERSION},
    )


# -- mutations as data: a writer's own, or one queued by a writer of this host waiting for its turn --
def apply(root: str, rows: pa.Table, req: dict[str, Any]) -> tuple[pa.Table, Any]:
    """``rows`` (sorted by object id) with the mutation ``req`` applied, and what its caller gets back; raises
    to refuse it. ``req`` is plain JSON data (``op``, ``name`` and the op's arguments), so that the writer
    that has the turn can apply a request another process queued."""
    op, name = req["op"], req["name"]
    if op in ("create_namespace", "create_table", "register_table"):
        ids = rows.column("object_id").to_pylist()
        _check_free(root, rows, ids, name)
        _check_parent(root, rows, ids, name)
        if op != "create_namespace":  # again on the latest version: two racing registrations cannot both land
            where = req["row"]["location"]
            locations.check_location(root, rows, ids, name, where if req["row"]["registered"] else f"{root.rstrip('/')}/{where}")
        now = _now_ms()
        kind = NAMESPACE if op == "create_namespace" else TABLE
        row = dict(req["row"], object_id=name, object_type=kind, parent=parent_of(name), created_ms=now, updated_ms=now)
        return _append(rows, ids, row), None
    ids = rows.column("object_id")
    types = rows.column("object_type")
    if op == "drop_namespace":
        if not pc.any(pc.and_(pc.equal(ids, name), pc.equal(types, NAMESPACE))).as_py():
            raise NamespaceNotFound(f"catalog {root} has no namespace {name!r}")
        inside = pc.starts_with(ids, name + ".")
        if pc.any(inside).as_py() and not req["cascade"]:
            first = rows.filter(inside).column("object_id")[0].as_py()
            raise NamespaceNotEmpty(
                f"namespace {name!r} of catalog {root} holds {pc.sum(inside).as_py()} entries "
                f"(e.g. {first!r}); drop them first or pass cascade=True"
            )
        gone = pc.or_(pc.equal(ids, name), inside)
        return rows.filter(pc.invert(gone)), [r for r in rows.filter(gone).to_pylist() if r["object_type"] == TABLE]
    if op == "drop_table":
        hit = pc.and_(pc.equal(ids, name), pc.equal(types, TABLE))
        found = rows.filter(hit).to_pylist()
        if not found:
            raise TableNotFound(f"catalog {root} has no table {name!r}")
        return rows.filter(pc.invert(hit)), found
    if op == "rename_table":
        new_name = req["new_name"]
        names, kinds = ids.to_pylist(), types.to_pylist()
        if not any(i == name and k == TABLE for i, k in zip(names, kinds)):
            raise TableNotFound(f"catalog {root} has no table {name!r}")
        _check_free(root, rows, names, new_name)
        _check_parent(root, rows, names, new_name)
        pos = names.index(name)
        names[pos] = new_name
        parents = rows.column("parent").to_pylist()
        parents[pos] = parent_of(new_name)
        updated = rows.column("updated_ms").to_pylist()
        updated[pos] = _now_ms()
        for column, values in (("object_id", names), ("parent", parents), ("updated_ms", updated)):
            field = SCHEMA.field(column)
            rows = rows.set_column(SCHEMA.get_field_index(column), field, pa.array(values, field.type))
        return rows, None
    if op == "record_maintenance":
        reports = req["reports"]
        cols = {c: rows.column(c).to_pylist() for c in ("maintenance", "table_version", "table_rows", "table_bytes")}
        for i, n in enumerate(ids.to_pylist()):  # names no longer in the catalog are skipped
            if n in reports:
                cols["maintenance"][i] = reports[n]["report"]
                for key, col in (("version", "table_version"), ("rows", "table_rows"), ("bytes", "table_bytes")):
                    if key in reports[n]:
                        cols[col][i] = reports[n][key]
        for c, values in cols.items():
            rows = rows.set_column(SCHEMA.get_field_index(c), SCHEMA.field(c), pa.array(values, SCHEMA.field(c).type))
        return rows, None
    raise InvalidArgument(f"catalog {root}: unknown request {op!r} (queued by a newer Lamina?)")


def result(outcome: dict[str, Any]) -> Any:
    """What a request's writer gets: its result, or the error that refused it raised again."""
    if "error" in outcome:
        kind, message = outcome["error"]
        cls = getattr(lamina_errors, kind, None)
        if not (isinstance(cls, type) and issubclass(cls, lamina_errors.LaminaError)):
            cls = lamina_errors.LaminaError
        raise cls(message)
    return outcome["result"]


def _check_free(root: str, rows: pa.Table, ids: list[str], name: str) -> None:
    """``ids``: the object ids of ``rows``, in row order (a list scan: no pyarrow.compute, whose first call in a
    process pays a one-time set-up, on the path of every create)."""
    if name in ids:
        kind = rows.column("object_type")[ids.index(name)].as_py()
        raise (TableExists if kind == TABLE else NamespaceExists)(f"catalog {root} already has a {kind} named {name!r}")


def _check_parent(root: str, rows: pa.Table, ids: list[str], name: str) -> None:
    parent = parent_of(name)
    if not parent:
        return
    if parent not in ids or rows.column("object_type")[ids.index(parent)].as_py() != NAMESPACE:
        raise NamespaceNotFound(f"catalog {root} has no namespace {parent!r} to hold {name!r}; create it first")
