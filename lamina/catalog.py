"""A catalog of namespaces and tables, kept as a Lamina table under ``<root>/_catalog``.

    lamina.connect(root) ─► Catalog
    reads:     the latest catalog version (one listing checks for a newer one) ─► filtered reads
               through its indices: btree on object_id (lookups by name), bitmap on object_type
               (listings), full text on metadata (search)
    mutations: copy-on-write: read every row of the latest version, transform them, write one new
               data file and the three index segments over it, commit a strict overwrite (put-if-absent
               of the next version); a lost race redoes the whole rewrite on the new latest version

The catalog holds one row per namespace or table (docs/FORMAT.md §12). A table the catalog
creates lives under the root at a path made from its name and a unique suffix, so a name dropped
and created again never shares files; ``register_table`` adds a table that lives elsewhere.
Catalogs written with an earlier schema version are read as they are and migrated by their
first mutation.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import re
import threading
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Callable, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import commit
from lamina.datafile import WriteOptions, write_fragment
from lamina.errors import (
    CommitConflict,
    IndexNotFound,
    InvalidArgument,
    NamespaceExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    TableExists,
    TableNotFound,
)
from lamina.cache import MiB, cache
from lamina.index.options import IndexOptions
from lamina.index.segments import build_local, segment_path, write_segment
from lamina.filter import parse_filter
from lamina.keys import key_array
from lamina.manifest import IndexEntry, IndexSegment, Manifest, manifest_path, try_load_manifest
from lamina.retry import Backoff
from lamina.store import ObjectStore, check_relative, open_store
from lamina.store.local import LocalStore
from lamina.table import Table, create_table, open_table
from lamina.transaction import Create, Overwrite

#: Where the catalog table lives under the root (names cannot start with "_", so no entry can collide).
CATALOG_DIR = "_catalog"
#: The schema version this Lamina writes, kept in the catalog table's config.
SCHEMA_VERSION = 2
CONFIG_KEY = "catalog_schema_version"

NAMESPACE, TABLE = "namespace", "table"

#: Version 2 (current): one row per namespace or table.
SCHEMA = pa.schema([
    pa.field("object_id", pa.string(), nullable=False),  # dotted path: "sales.eu.orders"
    pa.field("object_type", pa.string(), nullable=False),  # "namespace" | "table"
    pa.field("parent", pa.string(), nullable=False),  # the enclosing namespace ("" at the top)
    pa.field("location", pa.string()),  # tables: relative to the root, or a full URI when registered
    pa.field("registered", pa.bool_()),  # tables: added by register_table (lives outside the root's layout)
    pa.field("metadata", pa.string(), nullable=False),  # properties, a JSON object
    pa.field("created_ms", pa.int64(), nullable=False),
    pa.field("updated_ms", pa.int64(), nullable=False),
    pa.field("table_version", pa.int64()),  # tables: last known version, rows, data bytes
    pa.field("table_rows", pa.int64()),
    pa.field("table_bytes", pa.int64()),
    pa.field("maintenance", pa.string()),  # tables: the last maintenance report, a JSON object
])

#: Version 1: properties in a column named ``properties``; no table statistics, no maintenance.
SCHEMA_V1 = pa.schema([
    pa.field("object_id", pa.string(), nullable=False),
    pa.field("object_type", pa.string(), nullable=False),
    pa.field("parent", pa.string(), nullable=False),
    pa.field("location", pa.string()),
    pa.field("properties", pa.string()),
    pa.field("created_ms", pa.int64(), nullable=False),
    pa.field("updated_ms", pa.int64(), nullable=False),
])

#: The indices every catalog version carries, built inline by each rewrite.
INDICES = (("object_id_btree", "object_id", "btree"), ("object_type_bitmap", "object_type", "bitmap"),
           ("metadata_fts", "metadata", "fts"))

_LEVEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
MAX_DEPTH = 8

#: A catalog whose data file is at most this is read whole once per version and answered from memory
#: (one GET instead of index and data reads); a larger one is read through its indices.
WHOLE_READ_BYTES = 8 << 20
#: Decoded catalog versions (immutable, with their lookups by name and by parent), bounded like every cache.
_ROWS = cache("catalog", "LAMINA_CATALOG_CACHE_BYTES", 64 * MiB)

#: A lost race redoes the rewrite after a jittered wait scaled to how long the rewrite took (attempt k waits
#: uniform(0, min(cap, took * 2**k))): at least ``base_seconds``, many writers may contend.
REWRITE_BACKOFF = Backoff(base_seconds=0.002, cap_seconds=0.5, max_attempts=200)

#: Local catalogs only: writers on one host take turns through an advisory ``flock`` on this file under the
#: catalog table's directory, so that none of them wastes a rewrite on a race it would lose. An optimisation
#: only: put-if-absent of the next version decides every commit, a writer that cannot open or take the lock
#: in ``LOCK_WAIT_SECONDS`` goes ahead without it, and S3 never uses it.
LOCK_FILE = "_writer.lock"
LOCK_WAIT_SECONDS = 10.0

#: A warm read checks for a newer catalog version with one existence check of the next version. That the
#: version held is still on storage (not removed by cleanup after newer ones appeared) is checked again when
#: it was last seen longer ago than this: cleanup only removes versions that stopped being the latest more
#: than its retention ago (at least an hour, lamina.cleanup.MIN_RETENTION), so a version seen as the latest
#: less than this long ago cannot have had its successors removed yet.
CONFIRM_SECONDS = 60.0
#: New versions read one by one before a listing finds the latest instead.
FORWARD_READS = 16


def check_name(name: Any, what: str = "name") -> tuple[str, ...]:
    """The levels of a dotted name; InvalidArgument saying what is wrong."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{what} must be a non-empty string like 'sales.eu.orders', not {name!r}")
    levels = tuple(name.split("."))
    if len(levels) > MAX_DEPTH:
        raise InvalidArgument(f"{what} {name!r} has {len(levels)} levels; at most {MAX_DEPTH}")
    for level in levels:
        if not _LEVEL.match(level):
            raise InvalidArgument(
                f"{what} {name!r}: level {level!r} must be 1-64 letters, digits, '_' or '-', starting with a letter or "
                f"digit (no '..', '/', '\\\\', spaces or leading '_')")
    return levels


def _parent(name: str) -> str:
    return name.rpartition(".")[0]


def _properties(properties: Any, what: str) -> str:
    if properties is None:
        return "{}"
    if not isinstance(properties, dict) or not all(isinstance(k, str) for k in properties):
        raise InvalidArgument(f"properties of {what} must be a dict with string keys, not {type(properties).__name__}")
    try:
        return json.dumps(properties, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"properties of {what} must be JSON values: {e}") from None


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True)
class NamespaceDescription:
    name: str
    properties: dict[str, Any]
    created_ms: int
    updated_ms: int


@dataclass(frozen=True)
class TableDescription:
    """A table as the catalog knows it, with its live state read from the table."""

    name: str
    location: str  # full URI
    registered: bool
    properties: dict[str, Any]
    created_ms: int
    updated_ms: int
    version: int
    rows: int
    fragments: int
    indices: list[str]
    maintenance: dict[str, Any] | None


def _as_current(rows: pa.Table) -> pa.Table:
    """Rows of any schema version in the current schema (version 1: properties → metadata)."""
    if rows.schema.equals(SCHEMA):
        return rows
    if "properties" in rows.schema.names and "metadata" not in rows.schema.names:
        props = pc.fill_null(rows.column("properties"), "{}")
        rows = rows.drop_columns(["properties"]).append_column("metadata", props)
    n = rows.num_rows
    columns = []
    for field in SCHEMA:
        if field.name in rows.schema.names:
            columns.append(rows.column(field.name).cast(field.type))
        elif field.name == "registered":
            columns.append(pa.array([False] * n, pa.bool_()))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=SCHEMA)


class Catalog:
    """The namespaces and tables under one root (a local directory or an ``s3://`` prefix)."""

    def __init__(self, root: str, table: Table, storage_options: dict[str, Any] | None, seen_at: float | None = None):
        self._root_store: ObjectStore = open_store(root, storage_options)
        self.root = self._root_store.uri
        self.storage_options = storage_options
        self._table = table
        #: When (time.monotonic) the version held was last known to be the latest; None: not known.
        self._seen_at = seen_at

    def __repr__(self) -> str:
        return f"Catalog({self.root!r}, version={self._table.version})"

    # -- the catalog table ----------------------------------------------------------------------
    @property
    def table(self) -> Table:
        """The catalog table itself, at the latest version."""
        return self._fresh()

    @property
    def schema_version(self) -> int:
        return int(self._fresh().manifest.config.get(CONFIG_KEY, 1))

    def _fresh(self) -> Table:
        """The latest catalog version. Versions are written in order, so when the version held was the
        latest less than ``CONFIRM_SECONDS`` ago, the versions after it are read one by one until the next
        is absent: one request (a stat or a GET) when nothing changed, one per new version otherwise (a
        listing when many are new). Otherwise it is the latest when the next is absent and it is still
        there (two existence checks, then a listing if not)."""
        t = self._table
        now = time.monotonic()
        if self._seen_at is not None and now - self._seen_at <= CONFIRM_SECONDS:
            m = t.manifest
            for _ in range(FORWARD_READS):
                nxt = try_load_manifest(t.store, m.version + 1, m.table_uuid)
                if nxt is None:
                    if m is not t.manifest:
                        t._move_to(m)
                    self._seen_at = now
                    return t
                m = nxt
        elif not t.store.exists(manifest_path(t.version + 1)) and t.store.exists(manifest_path(t.version)):
            self._seen_at = now
            return t
        t.reload()
        self._seen_at = now
        return t

    def _read(self, fresh: bool = True) -> "_Version":
        """One version to answer a call from (the latest; with ``fresh=False`` the one held): decoded whole and
        cached when small, else read through its indices. The rows of the version held, when not in memory
        yet, are read while checking for a newer version (one round trip instead of two, when it is the latest)."""
        t = self._table
        if not fresh:
            return _Version(t, _snapshot(t))
        held = t.manifest
        early = None
        # On object storage the rows are read while the next version is looked for (one round trip);
        # locally both are a few file reads, and starting a thread would cost more than it saves.
        if _ROWS.get(_key(t.uri, held)) is None and _small(held) and not t.store.is_local:
            early = _pool().submit(_snapshot, t.checkout(held.version))
        t = self._fresh()
        if early is not None and t.manifest.version == held.version:
            return _Version(t, early.result())
        return _Version(t, _snapshot(t))

    def _rows(self, flt: str | None = None) -> pa.Table:
        return self._read().select(flt)

    def _entry(self, name: str, v: "_Version | None" = None) -> dict[str, Any] | None:
        v = v or self._read()
        if v.snap is not None:
            return v.snap.entry(name)
        found = v.select(f"object_id = {_quote(name)}").to_pylist()
        return found[0] if found else None

    def _namespace(self, name: str, v: "_Version | None" = None) -> dict[str, Any]:
        entry = self._entry(name, v)
        if entry is None or entry["object_type"] != NAMESPACE:
            raise NamespaceNotFound(f"catalog {self.root} has no namespace {name!r}"
                                    + (f" ({name!r} is a table)" if entry else "") + "; create it with create_namespace")
        return entry

    def _table_entry(self, name: str, v: "_Version | None" = None) -> dict[str, Any]:
        check_name(name, "table name")
        entry = self._entry(name, v)
        if entry is None or entry["object_type"] != TABLE:
            raise TableNotFound(f"catalog {self.root} has no table {name!r}"
                                + (f" ({name!r} is a namespace)" if entry else "") + "; list them with list_tables")
        return entry

    def _location(self, entry: dict[str, Any]) -> str:
        """A table's full URI: a registered table's own, else under the root (never outside it)."""
        if entry["registered"]:
            return entry["location"]
        relative = check_relative(entry["location"], what=f"location of table {entry['object_id']!r} in catalog {self.root}")
        return f"{self.root.rstrip('/')}/{relative}"

    # -- mutations: copy-on-write rewrites ------------------------------------------------------
    def _mutate(self, change: Callable[[pa.Table], pa.Table], before_commit: Callable[[], Any] | None = None) -> None:
        """Rewrites the catalog with ``change`` applied to every row of the latest version; redoes
        the whole rewrite over a version committed meanwhile. ``change`` raises to refuse (nothing
        is written then); ``before_commit`` (if any) runs once the new files are written, before the
        commit, and raises to abandon them.

        On a local catalog, the writers of one host take turns (``LOCK_FILE``), so a rewrite normally
        starts on the version it will commit over; the lock only saves wasted rewrites."""
        store = self._table.store
        for attempt in range(REWRITE_BACKOFF.max_attempts):
            started = time.monotonic()
            with _host_turn(store):
                v = self._read()
                t, base = v.table, v.table.manifest
                rows = _sorted(change(v.snap.rows if v.snap is not None else _as_current(t.to_arrow())))
                txn = _rewrite(t.store, base, rows)
                if before_commit is not None:
                    try:
                        before_commit()
                    except BaseException:
                        t.store.delete(txn.written)
                        raise
                seen_at = time.monotonic()
                try:
                    new = commit(t.store, txn, base, backoff=Backoff(0, 0, 1))  # removes its files on a conflict
                    lost = False
                except CommitConflict:
                    lost = True
            if lost:
                took = max(REWRITE_BACKOFF.base_seconds, time.monotonic() - started)
                time.sleep(random.uniform(0, min(REWRITE_BACKOFF.cap_seconds, took * 2 ** min(attempt, 8))))
                continue
            t._move_to(new)
            self._seen_at = seen_at
            if rows.num_rows and _small(new):
                snap = _Snapshot(rows)
                _ROWS.put(_key(t.uri, new), snap, snap.nbytes)
            return
        raise CommitConflict(f"catalog {self.root}: {REWRITE_BACKOFF.max_attempts} rewrites in a row lost the race to "
                             f"other writers; nothing was changed, retry later")

    def create_namespace(self, name: str, properties: dict[str, Any] | None = None) -> None:
        """Creates namespace ``name`` (its parent must exist)."""
        check_name(name, "namespace name")
        metadata = _properties(properties, f"namespace {name!r}")

        def change(rows: pa.Table) -> pa.Table:
            self._check_free(rows, name)
            self._check_parent(rows, name)
            now = _now_ms()
            return _append(rows, dict(object_id=name, object_type=NAMESPACE, parent=_parent(name), location=None,
                                      registered=None, metadata=metadata, created_ms=now, updated_ms=now))

        self._mutate(change)

    def list_namespaces(self, parent: str | None = None) -> list[str]:
        """The namespaces directly inside ``parent`` (None: the top level), sorted."""
        if parent is not None:
            check_name(parent, "namespace name")
        v = self._read()
        if parent is not None:
            self._namespace(parent, v)
        if v.snap is not None:
            return list(v.snap.children.get((NAMESPACE, parent or ""), ()))
        rows = v.select(f"object_type = 'namespace' AND parent = {_quote(parent or '')}")
        return sorted(rows.column("object_id").to_pylist())

    def describe_namespace(self, name: str) -> NamespaceDescription:
        check_name(name, "namespace name")
        e = self._namespace(name)
        return NamespaceDescription(name, json.loads(e["metadata"]), e["created_ms"], e["updated_ms"])

    def drop_namespace(self, name: str, cascade: bool = False, purge: bool = False) -> None:
        """Drops namespace ``name``; one that is not empty only with ``cascade`` (which drops what it
        holds; ``purge`` also removes the data of the tables it drops)."""
        check_name(name, "namespace name")
        dropped: list[dict[str, Any]] = []

        def change(rows: pa.Table) -> pa.Table:
            ids = rows.column("object_id").to_pylist()
            types = rows.column("object_type").to_pylist()
            if not any(i == name and t == NAMESPACE for i, t in zip(ids, types)):
                raise NamespaceNotFound(f"catalog {self.root} has no namespace {name!r}")
            inside = [i for i in ids if i.startswith(name + ".")]
            if inside and not cascade:
                raise NamespaceNotEmpty(f"namespace {name!r} of catalog {self.root} holds {len(inside)} entries "
                                        f"(e.g. {sorted(inside)[0]!r}); drop them first or pass cascade=True")
            gone = pc.or_(pc.equal(rows.column("object_id"), name), pc.starts_with(rows.column("object_id"), name + "."))
            dropped[:] = [r for r in rows.filter(gone).to_pylist() if r["object_type"] == TABLE]
            return rows.filter(pc.invert(gone))

        self._mutate(change)
        if purge:
            for entry in dropped:
                self._purge(entry)

    def create_table(self, name: str, schema: pa.Schema, *, properties: dict[str, Any] | None = None,
                     **table_options: Any) -> Table:
        """Creates an empty table ``name`` under the root (``table_options`` as for ``lamina.create_table``)."""
        levels = check_name(name, "table name")
        metadata = _properties(properties, f"table {name!r}")
        self._check_before_create(name)
        relative = "/".join(levels[:-1] + (f"{levels[-1]}-{uuid.uuid4().hex[:12]}",))
        # The new table is created (its own Create commit) while the catalog's rewrite is prepared; the
        # catalog commits only once it exists. A created table is at version 1 (lamina.create_table).
        creating = _pool().submit(create_table, f"{self.root.rstrip('/')}/{relative}", schema,
                                  storage_options=self.storage_options, **table_options)

        def change(rows: pa.Table) -> pa.Table:
            self._check_free(rows, name)
            self._check_parent(rows, name)
            now = _now_ms()
            return _append(rows, dict(object_id=name, object_type=TABLE, parent=_parent(name), location=relative,
                                      registered=False, metadata=metadata, created_ms=now, updated_ms=now,
                                      table_version=1, table_rows=0, table_bytes=0))

        try:
            self._mutate(change, before_commit=creating.result)
        except BaseException:
            if creating.exception() is None:
                _remove_table_files(creating.result().store)  # ours alone: a fresh, unique location
            raise
        return creating.result()

    def register_table(self, name: str, uri: str, *, properties: dict[str, Any] | None = None) -> Table:
        """Adds the existing Lamina table at ``uri`` (anywhere) to the catalog as ``name``."""
        check_name(name, "table name")
        metadata = _properties(properties, f"table {name!r}")
        self._check_before_create(name)
        table = open_table(uri, storage_options=self.storage_options)
        m = table.manifest

        def change(rows: pa.Table) -> pa.Table:
            self._check_free(rows, name)
            self._check_parent(rows, name)
            now = _now_ms()
            return _append(rows, dict(object_id=name, object_type=TABLE, parent=_parent(name), location=table.uri,
                                      registered=True, metadata=metadata, created_ms=now, updated_ms=now,
                                      table_version=m.version, table_rows=m.rows,
                                      table_bytes=sum(f.file_bytes for f in m.fragments)))

        self._mutate(change)
        return table

    def list_tables(self, namespace: str | None = None, *, recursive: bool = False) -> list[str]:
        """The tables in ``namespace`` (None: the top level), with ``recursive`` also those of the
        namespaces inside it; full dotted names, sorted."""
        if namespace is not None:
            check_name(namespace, "namespace name")
        v = self._read()
        if namespace is not None:
            self._namespace(namespace, v)
        if v.snap is not None and not recursive:
            return list(v.snap.children.get((TABLE, namespace or ""), ()))
        if recursive:
            rows = v.select("object_type = 'table'")
            ids = rows.column("object_id").to_pylist()
            return sorted(i for i in ids if namespace is None or i.startswith(namespace + "."))
        rows = v.select(f"object_type = 'table' AND parent = {_quote(namespace or '')}")
        return sorted(rows.column("object_id").to_pylist())

    def describe_table(self, name: str) -> TableDescription:
        """Where table ``name`` lives, its properties and its live state (version, rows, fragments, indices)."""
        check_name(name, "table name")
        # The table named by the version held is opened while the catalog is checked for a newer version;
        # if there is one, the entry is looked up again there and the table opened again.
        held_version = self._table.version
        e = self._entry(name, self._read(fresh=False))
        early = None
        if e is not None and e["object_type"] == TABLE:
            early = _pool().submit(lambda: open_table(self._location(e), storage_options=self.storage_options))
        latest = self._read()
        if early is not None and latest.table.version == held_version:
            t = early.result()
        else:
            e = self._table_entry(name, latest)
            t = open_table(self._location(e), storage_options=self.storage_options)
        m = t.manifest
        return TableDescription(name, t.uri, bool(e["registered"]), json.loads(e["metadata"]), e["created_ms"],
                                e["updated_ms"], m.version, m.rows, len(m.fragments), [ix.name for ix in m.indices],
                                json.loads(e["maintenance"]) if e["maintenance"] else None)

    def open_table(self, name: str, *, version: int | None = None) -> Table:
        """Table ``name`` (its latest version, or ``version``)."""
        e = self._table_entry(name)
        return open_table(self._location(e), version=version, storage_options=self.storage_options)

    def rename_table(self, name: str, new_name: str) -> None:
        """Renames table ``name`` to ``new_name`` (its namespace must exist); its files stay where they are."""
        check_name(name, "table name")
        check_name(new_name, "new table name")

        def change(rows: pa.Table) -> pa.Table:
            ids = rows.column("object_id").to_pylist()
            types = rows.column("object_type").to_pylist()
            if not any(i == name and t == TABLE for i, t in zip(ids, types)):
                raise TableNotFound(f"catalog {self.root} has no table {name!r}")
            self._check_free(rows, new_name)
            self._check_parent(rows, new_name)
            pos = ids.index(name)
            ids[pos] = new_name
            parents = rows.column("parent").to_pylist()
            parents[pos] = _parent(new_name)
            updated = rows.column("updated_ms").to_pylist()
            updated[pos] = _now_ms()
            return (rows.set_column(0, "object_id", pa.array(ids, pa.string()))
                    .set_column(2, "parent", pa.array(parents, pa.string()))
                    .set_column(rows.schema.get_field_index("updated_ms"), "updated_ms", pa.array(updated, pa.int64())))

        self._mutate(change)

    def drop_table(self, name: str, purge: bool = False) -> None:
        """Removes table ``name`` from the catalog; ``purge`` also removes its data (only its own files)."""
        check_name(name, "table name")
        dropped: list[dict[str, Any]] = []

        def change(rows: pa.Table) -> pa.Table:
            hit = pc.and_(pc.equal(rows.column("object_id"), name), pc.equal(rows.column("object_type"), TABLE))
            found = rows.filter(hit).to_pylist()
            if not found:
                raise TableNotFound(f"catalog {self.root} has no table {name!r}")
            dropped[:] = found
            return rows.filter(pc.invert(hit))

        self._mutate(change)
        if purge:
            self._purge(dropped[0])

    def _purge(self, entry: dict[str, Any]) -> None:
        """Removes a dropped table's files: its own layout only, never another catalog table's."""
        location = self._location(entry)
        others = [self._location(e) for e in self._rows("object_type = 'table'").to_pylist()]
        inside = [o for o in others if o.rstrip("/").startswith(location.rstrip("/") + "/") or o.rstrip("/") == location.rstrip("/")]
        if inside:
            raise InvalidArgument(f"not purging {location}: table(s) of catalog {self.root} live there ({inside[0]}); "
                                  f"the entry {entry['object_id']!r} was dropped, its files were kept")
        _remove_table_files(open_store(location, self.storage_options))

    def search(self, text: str, k: int = 10) -> list[str]:
        """Names of the namespaces and tables whose properties best match ``text`` (BM25), best first."""
        t = self._fresh()
        if not t.manifest.indices:
            return []
        try:
            hits = t.search(text, "metadata", k=k, columns=["object_id"])
        except IndexNotFound:
            return []
        return hits.column("object_id").to_pylist()

    # -- what the maintenance job needs ---------------------------------------------------------
    def effective_properties(self, name: str) -> dict[str, Any]:
        """The table's properties over those of its namespaces (outermost first, the table's own last)."""
        levels = check_name(name, "table name")
        names = [".".join(levels[:i]) for i in range(1, len(levels) + 1)]
        rows = {r["object_id"]: r for r in self._rows(f"object_id IN ({', '.join(map(_quote, names))})").to_pylist()}
        if rows.get(name, {}).get("object_type") != TABLE:
            raise TableNotFound(f"catalog {self.root} has no table {name!r}")
        merged: dict[str, Any] = {}
        for n in names:
            if n in rows:
                merged.update(json.loads(rows[n]["metadata"]))
        return merged

    def record_maintenance(self, reports: dict[str, dict[str, Any]]) -> None:
        """Records each table's last maintenance report (and its ``version``/``rows``/``bytes``) in one rewrite;
        names no longer in the catalog are skipped."""
        if not reports:
            return
        encoded = {n: json.dumps(r, sort_keys=True, default=str) for n, r in reports.items()}

        def change(rows: pa.Table) -> pa.Table:
            ids = rows.column("object_id").to_pylist()
            cols = {c: rows.column(c).to_pylist() for c in ("maintenance", "table_version", "table_rows", "table_bytes")}
            for i, name in enumerate(ids):
                if name in reports:
                    cols["maintenance"][i] = encoded[name]
                    for key, col in (("version", "table_version"), ("rows", "table_rows"), ("bytes", "table_bytes")):
                        if isinstance(reports[name].get(key), int):
                            cols[col][i] = reports[name][key]
            for c, values in cols.items():
                rows = rows.set_column(rows.schema.get_field_index(c), c, pa.array(values, SCHEMA.field(c).type))
            return rows

        self._mutate(change)

    # -- checks inside a rewrite ----------------------------------------------------------------
    def _check_before_create(self, name: str) -> None:
        """The cheap checks before any file is written, on the version held (no request: the rewrite checks
        again on the latest version, the one it changes)."""
        v = self._read(fresh=False)
        entry = self._entry(name, v)
        if entry is not None:
            raise (TableExists if entry["object_type"] == TABLE else NamespaceExists)(
                f"catalog {self.root} already has a {entry['object_type']} named {name!r}")
        if _parent(name):
            self._namespace(_parent(name), v)

    def _check_free(self, rows: pa.Table, name: str) -> None:
        hit = rows.filter(pc.equal(rows.column("object_id"), name))
        if hit.num_rows:
            kind = hit.column("object_type")[0].as_py()
            raise (TableExists if kind == TABLE else NamespaceExists)(f"catalog {self.root} already has a {kind} named {name!r}")

    def _check_parent(self, rows: pa.Table, name: str) -> None:
        parent = _parent(name)
        if not parent:
            return
        hit = rows.filter(pc.and_(pc.equal(rows.column("object_id"), parent), pc.equal(rows.column("object_type"), NAMESPACE)))
        if not hit.num_rows:
            raise NamespaceNotFound(f"catalog {self.root} has no namespace {parent!r} to hold {name!r}; create it first")


def _key(uri: str, m: Manifest) -> tuple[str, str | None, int]:
    return (uri, m.table_uuid, m.version)


def _small(m: Manifest) -> bool:
    return sum(f.file_bytes for f in m.fragments) <= WHOLE_READ_BYTES


def _snapshot(t: Table) -> "_Snapshot | None":
    """The decoded rows of ``t``'s version (cached), or None for a catalog too large to hold (read through its indices)."""
    key = _key(t.uri, t.manifest)
    snap = _ROWS.get(key)
    if snap is None and _small(t.manifest):
        snap = _Snapshot(_as_current(t.to_arrow()))
        _ROWS.put(key, snap, snap.nbytes)
    return snap


class _Snapshot:
    """One catalog version decoded in memory: its rows sorted by object id, with lookups by name and
    listings by (object type, parent) built once per version."""

    def __init__(self, rows: pa.Table):
        self.rows = _sorted(rows)
        if self.rows.column("object_id").num_chunks > 1:
            self.rows = self.rows.combine_chunks()
        self.nbytes = 3 * self.rows.get_total_buffer_size() + 1024  # the rows and the Python lookups built over them

    @cached_property
    def _ids(self) -> list[str]:
        return self.rows.column("object_id").to_pylist()

    @cached_property
    def _position(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self._ids)}

    @cached_property
    def children(self) -> dict[tuple[str, str], tuple[str, ...]]:
        """(object type, parent) -> the object ids, sorted."""
        out: dict[tuple[str, str], list[str]] = {}
        for name, kind, parent in zip(self._ids, self.rows.column("object_type").to_pylist(),
                                      self.rows.column("parent").to_pylist()):
            out.setdefault((kind, parent), []).append(name)
        return {k: tuple(v) for k, v in out.items()}

    def entry(self, name: str) -> dict[str, Any] | None:
        i = self._position.get(name)
        return None if i is None else self.rows.slice(i, 1).to_pylist()[0]


@dataclass(frozen=True)
class _Version:
    """One catalog version a call reads: its rows in memory (``snap``), or its table and indices."""

    table: Table
    snap: _Snapshot | None

    def select(self, flt: str | None) -> pa.Table:
        if self.snap is not None:
            return self.snap.rows if flt is None else self.snap.rows.filter(parse_filter(flt, SCHEMA).expression)
        return _as_current(self.table.to_arrow(filter=flt))


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _sorted(rows: pa.Table) -> pa.Table:
    """``rows`` in the current schema, sorted by object id (the order every version is written in)."""
    ids = rows.column("object_id")
    if rows.num_rows > 1 and not pc.all(pc.less(ids.slice(0, rows.num_rows - 1), ids.slice(1))).as_py():
        rows = rows.sort_by("object_id")
    return rows if rows.schema.equals(SCHEMA) else pa.Table.from_arrays(rows.columns, schema=SCHEMA)


def _append(rows: pa.Table, row: dict[str, Any]) -> pa.Table:
    """``rows`` with ``row`` added where its object id sorts (rows sorted by object id stay so)."""
    ids = rows.column("object_id")
    at = (pc.sum(pc.less(ids, row["object_id"])).as_py() or 0) if rows.num_rows else 0
    # One chunk: a table held across many appends would otherwise keep one chunk per append.
    return pa.concat_tables([rows.slice(0, at), pa.Table.from_pylist([row], schema=SCHEMA), rows.slice(at)]).combine_chunks()


_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def _pool() -> ThreadPoolExecutor:
    """The threads of the catalog's concurrent work (a rewrite's data file and index segments, whose native
    writers release the GIL; a table created or opened, rows read, while the catalog is checked), one pool
    per process (a forked child makes its own). No task waits on another task of the pool."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(6, thread_name_prefix="lamina-catalog"))
        return _POOL[1]


def _index_entry(store: ObjectStore, name: str, column: str, kind: str, rows: pa.Table) -> IndexEntry:
    opts = IndexOptions()
    seg_uuid = uuid.uuid4().hex
    rel = segment_path(seg_uuid)
    keys = key_array(rows.column(column))
    meta = write_segment(store, rel, lambda local: build_local(kind, [(0, keys)], local, opts))
    seg = IndexSegment(seg_uuid, rel, int(meta["bytes"]), int(meta["rows"]), (0,), meta.get("checksum"))
    return IndexEntry(name, column, kind, uuid.uuid4().hex, (seg,), opts.details())


def _rewrite(store: ObjectStore, base: Manifest, rows: pa.Table) -> Overwrite:
    """The strict overwrite replacing the catalog with ``rows`` (sorted by object id, so the file is laid
    out the way lookups and listings read it): one data file and its three index segments, written at once
    by four threads."""
    fragments: list[Future] = []
    indices: list[Future] = []
    if rows.num_rows:
        pool = _pool()
        fragments = [pool.submit(write_fragment, store, SCHEMA, rows.to_batches(), WriteOptions.from_config(base.config))]
        indices = [pool.submit(_index_entry, store, name, column, kind, rows) for name, column, kind in INDICES]
    errors = [f.exception() for f in fragments + indices]
    if any(errors):
        store.delete([f.result().path for f in fragments if f.exception() is None]
                     + [p for f in indices if f.exception() is None for p in f.result().files])
        raise next(e for e in errors if e is not None)
    migrate = not base.schema.equals(SCHEMA)
    return Overwrite(base.version, [f.result() for f in fragments], SCHEMA if migrate else None,
                     indices=tuple(f.result() for f in indices), strict=True, config={CONFIG_KEY: SCHEMA_VERSION})


@contextlib.contextmanager
def _host_turn(store: ObjectStore) -> Iterator[None]:
    """On a local catalog, this host's writers one at a time (``LOCK_FILE``); elsewhere, or when the lock
    cannot be had in ``LOCK_WAIT_SECONDS``, nothing: the commit's put-if-absent decides either way."""
    fd = _take_turn(os.path.join(store.root, LOCK_FILE)) if isinstance(store, LocalStore) else None
    try:
        yield
    finally:
        if fd is not None:
            os.close(fd)  # releases the lock


def _take_turn(path: str) -> int | None:
    """A descriptor holding an exclusive ``flock`` on ``path``, or None (not had in time, or no locking here)."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd
    except BlockingIOError:
        pass
    except OSError:  # no flock on this filesystem
        os.close(fd)
        return None
    # Busy: wait in a thread, so that a holder stuck for longer than LOCK_WAIT_SECONDS never holds us up.
    done, state = threading.Event(), {"abandoned": False, "held": False}
    guard = threading.Lock()

    def wait() -> None:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            held = True
        except OSError:
            held = False
        with guard:
            state["held"] = held
            if state["abandoned"] or not held:
                os.close(fd)
            done.set()

    threading.Thread(target=wait, name="lamina-catalog-lock", daemon=True).start()
    done.wait(LOCK_WAIT_SECONDS)
    with guard:
        if done.is_set():
            return fd if state["held"] else None
        state["abandoned"] = True  # the waiter closes the descriptor (and so the lock) once it gets it
    return None


def _remove_table_files(store: ObjectStore) -> None:
    """Every object of a Lamina table's layout under ``store``'s root (not deeper tables' files)."""
    from lamina.manifest import DATA_DIR, DELETIONS_DIR, INDICES_DIR, VERSIONS_DIR, WAL_DIR

    for prefix in (DATA_DIR, DELETIONS_DIR, INDICES_DIR, WAL_DIR, "_transactions/", VERSIONS_DIR):
        store.delete([o.path for o in store.list(prefix)])


def connect(root: str, *, storage_options: dict[str, Any] | None = None, create: bool = True) -> Catalog:
    """The catalog under ``root`` (a local directory or ``s3://bucket/prefix``), created if there is
    none, unless ``create=False`` (then ``InvalidArgument`` says there is none)."""
    store = open_store(f"{root.rstrip('/')}/{CATALOG_DIR}", storage_options)
    seen_at = time.monotonic()  # open_table finds the latest version
    try:
        return Catalog(root, open_table(store.uri, storage_options=storage_options), storage_options, seen_at)
    except TableNotFound:
        if not create:
            raise InvalidArgument(f"no Lamina catalog at {root} (nothing under {CATALOG_DIR}/): point at a catalog "
                                  f"root, or create one with lamina.connect({root!r})")
        txn = Create(SCHEMA, config={**WriteOptions().to_config(), CONFIG_KEY: SCHEMA_VERSION})
        try:
            commit(store, txn, txn.base)
        except TableExists:
            pass  # another process created it first
    seen_at = time.monotonic()
    table = open_table(store.uri, storage_options=storage_options)
    return Catalog(root, table, storage_options, seen_at)


__all__ = ["Catalog", "NamespaceDescription", "TableDescription", "connect", "check_name", "SCHEMA", "SCHEMA_VERSION"]
