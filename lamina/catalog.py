"""A catalog of namespaces and tables, kept as a Lamina table under ``<root>/_catalog``.

    lamina.connect(root) ─► Catalog
    reads:     the latest catalog version (one listing checks for a newer one) ─► filtered reads
               through its indices: btree on object_id (lookups by name), bitmap on object_type
               (listings), full text on metadata (search)
    mutations: copy-on-write: read every row of the latest version, transform them, write one new
               data file and the three index segments over it, commit a strict overwrite (put-if-absent
               of the next version); a lost race redoes the whole rewrite on the new latest version.
               Locally, writers of one host take turns, and the one whose turn it is applies the
               requests the others queued meanwhile in the same rewrite (group commit, ``_Queue``)

The catalog holds one row per namespace or table (docs/FORMAT.md §12). A table the catalog
creates lives under the root at a path made from its name and a unique suffix, so a name dropped
and created again never shares files; ``register_table`` adds a table that lives elsewhere.
Catalogs written with an earlier schema version are read as they are and migrated by their
first mutation.
"""

from __future__ import annotations

import bisect
import functools
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
from typing import Any, Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.commit import commit
from lamina.drop import purge as purge_table
from lamina.datafile import WriteOptions, take_many, write_fragment
from lamina import errors as lamina_errors
from lamina.errors import (
    CommitConflict,
    CommitStateUnknown,
    IndexNotFound,
    InvalidArgument,
    NamespaceExists,
    NamespaceNotEmpty,
    NamespaceNotFound,
    StorageError,
    TableExists,
    TableNotFound,
    TableReplaced,
)
from lamina.cache import MiB, cache
from lamina.index.options import IndexOptions
from lamina.index.segments import build_local, segment_path, write_segment
from lamina.filter import parse_filter
from lamina.keys import key_array
from lamina.manifest import IndexEntry, IndexSegment, Manifest, forget_superseded, manifest_path, try_load_manifest
from lamina.retry import Backoff
from lamina.store import ObjectStore, check_relative, open_store
from lamina.store.base import remove_quietly
from lamina.store.local import LocalStore
from lamina.table import Table, create_table, open_table, open_with_hint
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

#: A name is 1 to ``MAX_DEPTH`` levels joined by ".", each 1 to ``MAX_LEVEL_CHARS`` letters, digits, "_" or "-"
#: starting with a letter or digit: so at most ``MAX_NAME_CHARS`` characters (docs/FORMAT.md §12).
MAX_DEPTH = 8
MAX_LEVEL_CHARS = 64
MAX_NAME_CHARS = MAX_DEPTH * (MAX_LEVEL_CHARS + 1) - 1
#: Matched against a whole level (``fullmatch``: a "$" would also match before a final newline).
_LEVEL = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_LEVEL_CHARS - 1}}}")
_NAME_RULE = (f"a name is at most {MAX_DEPTH} levels of 1-{MAX_LEVEL_CHARS} characters [A-Za-z0-9_-] joined by '.' "
              f"({MAX_NAME_CHARS} characters at most)")

#: A catalog whose data file is at most this is read whole once per version and answered from memory
#: (one GET instead of index and data reads); a larger one is read through its indices.
WHOLE_READ_BYTES = 8 << 20
#: Decoded catalog versions (immutable, with their lookups by name and by parent), bounded like every cache.
_ROWS = cache("catalog", "LAMINA_CATALOG_CACHE_BYTES", 64 * MiB)

#: A lost race redoes the rewrite after a jittered wait scaled to how long the rewrite took (attempt k waits
#: uniform(0, min(cap, took * 2**k))): at least ``base_seconds``, many writers may contend.
REWRITE_BACKOFF = Backoff(base_seconds=0.002, cap_seconds=0.5, max_attempts=200)
#: Reads of the catalog that find out whether a create whose commit failed was committed after all.
READ_BACK = Backoff(base_seconds=0.05, cap_seconds=1.0, max_attempts=6)

#: Local catalogs only: writers on one host take turns through an advisory ``flock`` on this file under the
#: catalog table's directory, so that none of them wastes a rewrite on a race it would lose. An optimisation
#: only: put-if-absent of the next version decides every commit, a writer that cannot open or take the lock
#: in ``LOCK_WAIT_SECONDS`` goes ahead without it, and S3 never uses it.
LOCK_FILE = "_writer.lock"
LOCK_WAIT_SECONDS = 10.0
#: Local catalogs only: where writers waiting for their turn queue their requests (``_Queue``), and how many
#: queued requests one rewrite applies at most.
QUEUE_DIR = "_queue"
MAX_BATCH = 256
#: Outcomes of queued requests whose writer never collected them (it stopped) are removed after this long.
UNCOLLECTED_SECONDS = 3600.0

#: A warm read checks for a newer catalog version with one existence check of the next version. That the
#: version held is still on storage (not removed by cleanup after newer ones appeared) is checked again when
#: it was last seen longer ago than this: cleanup only removes versions that stopped being the latest more
#: than its retention ago (at least an hour, lamina.cleanup.MIN_RETENTION), so a version seen as the latest
#: less than this long ago cannot have had its successors removed yet.
CONFIRM_SECONDS = 60.0
#: New versions read one by one before a listing finds the latest instead.
FORWARD_READS = 16
#: Handles of described tables a catalog handle keeps (their latest version is then checked with one request).
DESCRIBED_HANDLES = 256


def check_name(name: Any, what: str = "name") -> tuple[str, ...]:
    """The levels of a dotted name like ``sales.eu.orders``; InvalidArgument saying what is wrong.

    A name is 1 to ``MAX_DEPTH`` (8) levels of 1 to ``MAX_LEVEL_CHARS`` (64) ASCII letters, digits, ``_`` or
    ``-``, each starting with a letter or digit, so at most ``MAX_NAME_CHARS`` (519) characters. Every character
    is checked: no control characters (a trailing newline included), ``/``, ``\\``, spaces, empty levels
    (``a..b``, ``.a``, ``a.``) or ``.``/``..`` levels, so a name can never leave its namespace's directory."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{what} must be a non-empty string like 'sales.eu.orders', not {name!r}")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{what} {name[:MAX_NAME_CHARS]!r}... has {len(name)} characters; {_NAME_RULE}")
    levels = tuple(name.split("."))
    if len(levels) > MAX_DEPTH:
        raise InvalidArgument(f"{what} {name!r} has {len(levels)} levels; {_NAME_RULE}")
    for level in levels:
        if _LEVEL.fullmatch(level) is None:
            control = next((c for c in level if ord(c) < 32 or 127 <= ord(c) < 160), None)
            why = (f"level {level!r} holds the control character {control!r}" if control is not None
                   else f"level {level!r} must be 1-{MAX_LEVEL_CHARS} letters, digits, '_' or '-', starting with a "
                        f"letter or digit" + (" (a leading, trailing or doubled '.' makes an empty level)" if not level else ""))
            raise InvalidArgument(f"{what} {name!r}: {why}; {_NAME_RULE}")
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
        #: Tables described before: location -> (handle, when its version was last known to be the latest).
        self._described: dict[str, tuple[Table, float]] = {}

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
            if t.catch_up(FORWARD_READS):
                self._seen_at = now
                return t
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
    def _mutate(self, request: dict[str, Any], before_commit: Callable[[], Any] | None = None) -> Any:
        """Applies ``request`` (a mutation as data, see ``_apply``) in a copy-on-write rewrite of the latest
        version and returns what it returns; raises what refuses it (nothing is written then). ``before_commit``
        (if any) must have run before a rewrite applying the request commits; it raises to abandon it.

        On a local catalog the writers of one host take turns (``LOCK_FILE``), and the writer whose turn it is
        applies, in the same rewrite, the requests the writers waiting for it queued meanwhile (``_Queue``:
        group commit). A writer that cannot have the turn within ``LOCK_WAIT_SECONDS`` withdraws its request and
        goes ahead alone: put-if-absent of the next version decides every commit either way."""
        store = self._table.store
        fd, state = _try_turn(store)
        if state != "busy":
            try:
                return self._commit_batch(_Queue(store) if fd is not None else None, request, before_commit)
            finally:
                if fd is not None:
                    os.close(fd)  # releases the lock
        # Another writer of this host is at work: queue the request for whoever has the turn next.
        if before_commit is not None:
            try:
                before_commit()  # e.g. the new table exists before any writer can commit its entry
            except BaseException:
                os.close(fd)
                raise
        queue = _Queue(store)
        rid = queue.post(request)
        if not _wait_turn(fd):
            out = None if queue.withdraw(rid) else queue.await_outcome(rid, LOCK_WAIT_SECONDS, self.root)
            if out is None:
                return self._commit_batch(None, request, None)  # withdrawn: alone, without the turn
            return _result(out)
        try:
            queue.recover(store, self._table.manifest.table_uuid)
            out = queue.collect(rid)
            if out is not None:
                return _result(out)  # applied or refused by a writer that had the turn before us
            return self._commit_batch(queue, None, None, own=rid)
        finally:
            os.close(fd)

    def _commit_batch(self, queue: "_Queue | None", request: dict[str, Any] | None,
                      before_commit: Callable[[], Any] | None, own: str | None = None) -> Any:
        """One rewrite applying the queued requests (if ``queue``: this writer has the turn) and ``request``
        (this writer's own, unless it is queued as ``own``); redone over a version committed meanwhile.
        Returns, or raises, this writer's own outcome."""
        queued: list[tuple[str, dict[str, Any]]] = []
        claimed: dict[str, dict[str, Any]] = {}
        if queue is not None:
            queue.recover(self._table.store, self._table.manifest.table_uuid)
            queued = queue.take(MAX_BATCH, include=own)
        try:
            for attempt in range(REWRITE_BACKOFF.max_attempts):
                started = time.monotonic()
                v = self._read()
                t, base = v.table, v.table.manifest
                rows = v.snap.rows if v.snap is not None else _rows_of(t)
                outcomes: dict[str | None, dict[str, Any]] = {}
                for rid, body in queued + ([(None, request)] if request is not None else []):
                    try:
                        rows, result = _apply(self.root, rows, body)
                        outcomes[rid] = {"result": result}
                    except Exception as e:  # a refusal, for its writer to raise; the other requests go on
                        outcomes[rid] = {"error": [type(e).__name__, str(e)]}
                mine = outcomes.get(own) if own is not None else outcomes.pop(None)
                if mine is None:  # this writer's queued request vanished: nothing here can say what became of it
                    raise CommitStateUnknown(f"catalog {self.root}: request {own} left the queue without an outcome; "
                                             f"list or describe the catalog to find out whether it was applied")
                if queue is not None and not any("result" in o for o in outcomes.values()) and "error" in mine:
                    queue.hand_out({rid: outcomes[rid] for rid, _ in queued})  # all refused: nothing to write
                    queued = []
                    if own is not None:
                        queue.collect(own)
                    return _result(mine)
                if queue is None and "error" in mine:
                    return _result(mine)
                rows = _sorted(rows)
                txn = _rewrite(t.store, base, rows)
                if before_commit is not None and "result" in mine:
                    try:
                        before_commit()
                    except BaseException:
                        t.store.delete(txn.written)
                        raise
                if queue is not None:
                    claimed = {rid: {**outcomes[rid], "request": body} for rid, body in queued}
                    queue.claim(claimed, txn.uuid, base.version + 1)  # (again, on a retry: the new transaction)
                seen_at = time.monotonic()
                try:
                    new = t.commit_transaction(txn, backoff=Backoff(0, 0, 1))  # removes its files on a conflict
                except CommitConflict:
                    took = max(REWRITE_BACKOFF.base_seconds, time.monotonic() - started)
                    time.sleep(random.uniform(0, min(REWRITE_BACKOFF.cap_seconds, took * 2 ** min(attempt, 8))))
                    continue
                if queue is not None:
                    queue.hand_out(claimed, from_claims=True)
                    queued, claimed = [], {}
                    if own is not None:
                        queue.collect(own)
                self._seen_at = seen_at
                _ROWS.pop(_key(t.uri, base))  # superseded: readers go to the latest version
                forget_superseded(t.store, base)
                if rows.num_rows and _small(new):
                    snap = _Snapshot(rows)
                    _ROWS.put(_key(t.uri, new), snap, snap.nbytes)
                return _result(mine)
            if claimed:
                queue.unclaim(claimed)  # none of those transactions committed
                queued = []
            raise CommitConflict(f"catalog {self.root}: {REWRITE_BACKOFF.max_attempts} rewrites in a row lost the race "
                                 f"to other writers; nothing was changed, retry later")
        finally:
            if queued and not claimed:
                queue.give_back([rid for rid, _ in queued])  # taken but never claimed: queued again
            # Claims left behind (a commit whose outcome is unknown) are settled by the next writer with the turn.

    def create_namespace(self, name: str, properties: dict[str, Any] | None = None) -> None:
        """Creates namespace ``name`` (its parent must exist)."""
        check_name(name, "namespace name")
        metadata = _properties(properties, f"namespace {name!r}")
        self._mutate({"op": "create_namespace", "name": name, "row": {"metadata": metadata}})

    def list_namespaces(self, parent: str | None = None) -> list[str]:
        """The namespaces directly inside ``parent`` (None: the top level), sorted."""
        if parent is not None:
            check_name(parent, "namespace name")
        v = self._read()
        if parent is not None:
            self._namespace(parent, v)
        if v.snap is not None:
            return list(v.snap.children(NAMESPACE, parent or ""))
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
        dropped = self._mutate({"op": "drop_namespace", "name": name, "cascade": bool(cascade)})
        if purge:
            for entry in dropped:
                self._purge(entry)

    def create_table(self, name: str, schema: pa.Schema, *, properties: dict[str, Any] | None = None,
                     **table_options: Any) -> Table:
        """Creates an empty table ``name`` under the root (``table_options`` as for ``lamina.create_table``), at
        ``<root>/<namespace path>/<name>-<12 hex>``: refused (InvalidArgument) if that lies inside another
        table's location (a registered one there, or a table created under a namespace named like its directory).

        When the catalog commit fails, the catalog is read back before anything is removed: the table is
        returned if an entry names its location (the commit landed), its files are removed only when none does
        and none can any more, and when that cannot be told they are kept and CommitStateUnknown says what to do."""
        levels = check_name(name, "table name")
        metadata = _properties(properties, f"table {name!r}")
        relative = "/".join(levels[:-1] + (f"{levels[-1]}-{uuid.uuid4().hex[:12]}",))
        location = f"{self.root.rstrip('/')}/{relative}"
        self._check_before_create(name, location)
        # The new table is created (its own Create commit) while the catalog's rewrite is prepared; the
        # catalog commits only once it exists. A created table is at version 1 (lamina.create_table).
        creating = _pool().submit(create_table, location, schema, storage_options=self.storage_options, **table_options)

        row = dict(location=relative, registered=False, metadata=metadata, table_version=1, table_rows=0, table_bytes=0)
        try:
            self._mutate({"op": "create_table", "name": name, "row": row}, before_commit=creating.result)
        except BaseException as failure:
            if creating.exception() is not None:
                raise  # no table was created, so no entry can name one (nothing commits before it exists)
            return self._settle_create(name, relative, creating.result(), failure)
        return creating.result()

    def _settle_create(self, name: str, relative: str, table: Table, failure: BaseException) -> Table:
        """After ``create_table``'s catalog mutation raised ``failure``: ``table`` if an entry names its location
        (the commit landed after all). Else, once no request for it can be applied any more, its files are removed
        and ``failure`` raised (for an unknown outcome, now known: StorageError saying nothing was committed).
        When that cannot be told, the files are kept and CommitStateUnknown says what to do."""
        keep = (f"its files at {table.uri} were kept: check describe_table({name!r}); if the catalog lists it there, "
                f"the table was created; if not, nothing names them and register_table({name!r}, {table.uri!r}) then "
                f"drop_table({name!r}, purge=True) removes them")
        if not isinstance(failure, Exception):  # interrupted: no reads now
            failure.add_note(f"catalog {self.root}: whether table {name!r} was created is unknown; {keep}")
            raise failure
        try:
            settled = self._withdraw_queued(relative)
            named = self._read_back_location(relative) if settled else None
        except Exception as e:  # the catalog cannot be read: the outcome stays unknown
            settled, named = False, None
            failure.add_note(f"reading catalog {self.root} back failed too: {e}")
        if named is not None:
            return table  # committed (under ``named``: renamed since, if it is not ``name``)
        if not settled:
            raise CommitStateUnknown(f"catalog {self.root}: whether table {name!r} was created is unknown ({failure}); "
                                     f"{keep}") from failure
        _remove_table_files(table.store)  # no entry names them, and none can any more
        if isinstance(failure, CommitStateUnknown):
            raise StorageError(f"catalog {self.root}: creating table {name!r} failed ({failure}); the catalog read back "
                               f"shows nothing was committed, and its files at {table.uri} were removed: retry "
                               f"create_table") from failure
        raise failure

    def _withdraw_queued(self, relative: str) -> bool:
        """Whether no request creating a table at ``relative`` can still be applied. Local catalogs: with this
        host's writer turn, the claims of a writer that stopped are settled and a queued request naming
        ``relative`` is withdrawn; False when the turn cannot be had (a writer holding it may still commit it)."""
        store = self._table.store
        fd, state = _try_turn(store)
        if state == "none":
            return True  # no queue (S3, or no flock: no writer queues)
        if state == "busy" and not _wait_turn(fd):
            return False
        try:
            queue = _Queue(store)
            queue.recover(store, self._table.manifest.table_uuid)
            for rid in [n[:-len(".req")] for n in queue._names() if n.endswith(".req")]:
                body = queue._read(rid, "req") or {}
                if body.get("op") == "create_table" and (body.get("row") or {}).get("location") == relative:
                    queue.withdraw(rid)
            return True
        finally:
            os.close(fd)

    def _read_back_location(self, relative: str) -> str | None:
        """The name of the entry of the latest catalog version whose table is at ``relative`` under the root, or
        None; reads retried (``READ_BACK``), the last failure raised."""
        for attempt in range(READ_BACK.max_attempts):
            try:
                rows = _table_rows(self._read())
                break
            except (StorageError, CommitStateUnknown):
                if attempt == READ_BACK.max_attempts - 1:
                    raise
                READ_BACK.sleep(attempt)
        for name, location, registered in zip(*(rows.column(c).to_pylist() for c in ("object_id", "location", "registered"))):
            if location == relative and not registered:
                return name
        return None

    def register_table(self, name: str, uri: str, *, properties: dict[str, Any] | None = None) -> Table:
        """Adds the existing Lamina table at ``uri`` (anywhere) to the catalog as ``name``. Refused
        (InvalidArgument) when ``uri`` is, holds or lies inside the catalog's own location (``<root>/_catalog``) or
        another table's location in the catalog (created or registered): purging one would remove the other's
        files. Locations are compared normalized (``_location_key``)."""
        check_name(name, "table name")
        metadata = _properties(properties, f"table {name!r}")
        self._check_before_create(name, uri)
        table = open_table(uri, storage_options=self.storage_options)
        m = table.manifest

        row = dict(location=table.uri, registered=True, metadata=metadata, table_version=m.version, table_rows=m.rows,
                   table_bytes=sum(f.file_bytes for f in m.fragments))
        self._mutate({"op": "register_table", "name": name, "row": row})
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
            return list(v.snap.children(TABLE, namespace or ""))
        if recursive:
            rows = v.select("object_type = 'table'")
            ids = rows.column("object_id").to_pylist()
            return sorted(i for i in ids if namespace is None or i.startswith(namespace + "."))
        rows = v.select(f"object_type = 'table' AND parent = {_quote(namespace or '')}")
        return sorted(rows.column("object_id").to_pylist())

    def describe_table(self, name: str) -> TableDescription:
        """Where table ``name`` lives, its properties and its live state (version, rows, fragments, indices)."""
        check_name(name, "table name")
        # On S3 the table named by the version held is opened while the catalog is checked for a newer version;
        # if there is one, the entry is looked up again there and the table opened again. Locally both are a few
        # stats and small reads, cheaper one after the other than with a thread hop.
        held_version = self._table.version
        e = None if self._table.store.is_local else self._entry(name, self._read(fresh=False))
        early = None
        if e is not None and e["object_type"] == TABLE:
            early = _pool().submit(self._latest_of, self._location(e), e["table_version"])
        latest = self._read()
        if early is not None and latest.table.version == held_version:
            t = early.result()
        else:
            e = self._table_entry(name, latest)
            t = self._latest_of(self._location(e), e["table_version"])
        m = t.manifest
        return TableDescription(name, t.uri, bool(e["registered"]), json.loads(e["metadata"]), e["created_ms"],
                                e["updated_ms"], m.version, m.rows, len(m.fragments), [ix.name for ix in m.indices],
                                json.loads(e["maintenance"]) if e["maintenance"] else None)

    def _latest_of(self, location: str, known: int | None) -> Table:
        """The table at ``location`` at its latest version. A handle kept from an earlier ``describe_table`` is
        checked as the catalog itself is (``_fresh``): when its version was the latest less than
        ``CONFIRM_SECONDS`` ago, reading the next versions until one is missing (one request when nothing
        changed) proves it; otherwise, or if the table there was replaced, it is opened again, from ``known``
        (the entry's last known version: one round trip when it is still the latest)."""
        kept = self._described.get(location)
        now = time.monotonic()
        if kept is not None and now - kept[1] <= CONFIRM_SECONDS:
            t = kept[0]
            try:
                if t.catch_up(FORWARD_READS):
                    self._described[location] = (t, now)
                    return t
            except TableReplaced:
                pass
        t = open_with_hint(location, None, self.storage_options, known)
        if len(self._described) >= DESCRIBED_HANDLES and location not in self._described:
            self._described.pop(next(iter(self._described)))  # the oldest kept
        self._described[location] = (t, now)
        return t

    def open_table(self, name: str, *, version: int | None = None) -> Table:
        """Table ``name`` (its latest version, or ``version``)."""
        e = self._table_entry(name)
        return open_with_hint(self._location(e), version, self.storage_options, e["table_version"])

    def rename_table(self, name: str, new_name: str) -> None:
        """Renames table ``name`` to ``new_name`` (its namespace must exist). Only the entry's name changes: its
        location stays what it was (files are never moved), so no rename can make two tables' locations overlap."""
        check_name(name, "table name")
        check_name(new_name, "new table name")

        self._mutate({"op": "rename_table", "name": name, "new_name": new_name})

    def drop_table(self, name: str, purge: bool = False) -> None:
        """Removes table ``name`` from the catalog; ``purge`` also removes its data (only its own files)."""
        check_name(name, "table name")
        dropped = self._mutate({"op": "drop_table", "name": name})
        if purge:
            self._purge(dropped[0])

    def _purge(self, entry: dict[str, Any]) -> None:
        """Drops a table the catalog no longer lists and removes its files (``lamina.drop.purge``: a tombstone
        version first, so a writer still holding it stops): its own layout only, never another catalog table's."""
        location = self._location(entry)
        key = _location_key(location)
        catalog = f"{self.root.rstrip('/')}/{CATALOG_DIR}"
        if _overlap(key, _location_key(catalog)) is not None:  # an entry an older catalog accepted
            raise InvalidArgument(f"not purging {location}: it overlaps catalog {self.root}'s own location {catalog}; "
                                  f"the entry {entry['object_id']!r} was dropped, its files were kept")
        others = [self._location(e) for e in self._rows("object_type = 'table'").to_pylist()]
        inside = [o for o in others if _overlap(_location_key(o), key) in ("is", "lies inside")]
        if inside:
            raise InvalidArgument(f"not purging {location}: table(s) of catalog {self.root} live there ({inside[0]}); "
                                  f"the entry {entry['object_id']!r} was dropped, its files were kept")
        purge_table(open_store(location, self.storage_options))  # the tombstone stays: writers may hold the table

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
        recorded = {n: {"report": json.dumps(r, sort_keys=True, default=str),
                        **{k: r[k] for k in ("version", "rows", "bytes") if isinstance(r.get(k), int)}}
                    for n, r in reports.items()}
        self._mutate({"op": "record_maintenance", "name": "", "reports": recorded})

    # -- checks inside a rewrite ----------------------------------------------------------------
    def _check_before_create(self, name: str, location: str | None = None) -> None:
        """The cheap checks before any file is written, on the version held (no request; the rewrite checks
        again on the latest version, the one it changes): ``name`` is free, its parent a namespace, and a table's
        ``location`` overlaps neither the catalog's nor another table's (``_check_location_before``). A refusal is
        confirmed on the latest version first: the version held may predate the parent's creation or the name's
        drop by another writer."""
        for fresh in (False, True):
            v = self._read(fresh=fresh)
            entry = self._entry(name, v)
            parent = self._entry(_parent(name), v) if _parent(name) else {"object_type": NAMESPACE}
            if entry is None and parent is not None and parent["object_type"] == NAMESPACE:
                if location is None:
                    return
                try:
                    self._check_location_before(name, location, v)
                    return
                except InvalidArgument:
                    if fresh:
                        raise
        if entry is not None:
            raise (TableExists if entry["object_type"] == TABLE else NamespaceExists)(
                f"catalog {self.root} already has a {entry['object_type']} named {name!r}")
        raise NamespaceNotFound(f"catalog {self.root} has no namespace {_parent(name)!r} to hold {name!r}; create it first")

    def _check_location_before(self, name: str, location: str, v: "_Version") -> None:
        """``_check_location`` on catalog version ``v``, before anything is written."""
        rows = _table_rows(v)
        _check_location(self.root, rows, rows.column("object_id").to_pylist(), name, location)


def _table_rows(v: "_Version") -> pa.Table:
    """The rows of catalog version ``v`` that may name a location (every row when it is in memory)."""
    return v.snap.rows if v.snap is not None else v.select("object_type = 'table'")


def _location_key(uri: str) -> str:
    """A table location as compared for overlap: a local path made absolute, its ``.``/``..`` segments,
    symbolic links, doubled and trailing slashes resolved; an ``s3://`` URI without empty segments (doubled or
    trailing slashes; other segments are literal key text)."""
    if uri.startswith("s3://"):
        return "s3://" + "/".join(part for part in uri[len("s3://"):].split("/") if part)
    path = uri[len("file://"):] if uri.startswith("file://") else uri
    return os.path.realpath(os.path.expanduser(path))


@functools.lru_cache(maxsize=4096)
def _listed_key(uri: str) -> str:
    """``_location_key`` of the root, the catalog's location or a registered table's location as the catalog
    lists it, remembered: every create's rewrite compares its location with each of them (a link changed after
    its table was registered is seen by the next process)."""
    return _location_key(uri)


def _overlap(a: str, b: str) -> str | None:
    """How location key ``a`` relates to ``b``: "is", "lies inside", "holds", or None (disjoint)."""
    if a == b:
        return "is"
    if a.startswith(b.rstrip("/") + "/"):
        return "lies inside"
    if b.startswith(a.rstrip("/") + "/"):
        return "holds"
    return None


def _check_location(root: str, rows: pa.Table, ids: list[str], name: str, location: str) -> None:
    """Refuses (InvalidArgument) table ``name`` at ``location`` (a full URI) when it is, holds or lies inside the
    catalog's own location or the location of another table in ``rows`` (object ids ``ids``), created or
    registered: tables never share files, so a purge removes only its own table's. Runs in every create's
    rewrite: created tables' locations (relative to the root, as the catalog wrote them) are compared as
    text, without a call per row."""
    key = _location_key(location)
    catalog = f"{root.rstrip('/')}/{CATALOG_DIR}"
    how = _overlap(key, _listed_key(catalog))
    if how is not None:
        raise InvalidArgument(f"catalog {root}: table {name!r} cannot live at {location}: it {how} the catalog's own "
                              f"location {catalog}; choose a location outside the catalog and every table it lists")
    base = _listed_key(root).rstrip("/") + "/"
    locations, registered = rows.column("location").to_pylist(), rows.column("registered").to_pylist()
    hits = [i for i, r in enumerate(registered) if r and locations[i] is not None
            and _overlap(key, _listed_key(locations[i])) is not None] if True in registered else []
    if key.startswith(base):  # (one holding the root holds the catalog: refused above)
        relative = key[len(base):]
        parts = relative.split("/")
        it_or_parents = {"/".join(parts[:n]) for n in range(1, len(parts) + 1)}
        below = relative + "/"
        # One substring search per candidate over every location, then a scan only when one may match.
        text = "\n" + "\n".join(filter(None, locations)) + "\n"
        if f"\n{below}" in text or any(f"\n{p}\n" in text for p in it_or_parents):
            hits += [i for i, (loc, r) in enumerate(zip(locations, registered))
                     if not r and loc is not None and (loc in it_or_parents or loc.startswith(below))]
    if hits:
        i = min(hits)
        where = locations[i] if registered[i] else f"{root.rstrip('/')}/{locations[i]}"
        how = _overlap(key, _listed_key(where) if registered[i] else base + locations[i])
        raise InvalidArgument(f"catalog {root}: table {name!r} cannot live at {location}: it {how} the location "
                              f"{where} of table {ids[i]!r}; tables never share files (a purge of one would remove "
                              f"the other's): choose a location outside every table the catalog lists")


def _key(uri: str, m: Manifest) -> tuple[str, str | None, int]:
    return (uri, m.table_uuid, m.version)


def _small(m: Manifest) -> bool:
    return sum(f.file_bytes for f in m.fragments) <= WHOLE_READ_BYTES


def _snapshot(t: Table) -> "_Snapshot | None":
    """The decoded rows of ``t``'s version (cached), or None for a catalog too large to hold (read through its indices)."""
    key = _key(t.uri, t.manifest)
    snap = _ROWS.get(key)
    if snap is None and _small(t.manifest):
        snap = _Snapshot(_rows_of(t))
        _ROWS.put(key, snap, snap.nbytes)
    return snap


def _rows_of(t: Table) -> pa.Table:
    """Every row of catalog version ``t``. A rewrite writes one data file and no deletion file: it is decoded
    by one native call (``datafile.take_many``, as a ``take`` of every row), since pyarrow's first Parquet read
    in a process pays a one-time set-up that would dominate a cold catalog read. Another layout (none is written
    today) is read as any table is."""
    frags = t.manifest.fragments
    if len(frags) == 1 and frags[0].deletion is None and frags[0].rows:
        f = frags[0]
        return _as_current(take_many(t.store, t.schema, [f], np.arange(f.rows, dtype=np.uint32), [f.rows], t.schema.names))
    return _as_current(t.to_arrow())


#: The memory pool of the rows a mutation builds: the C allocator's, not Arrow's default (mimalloc). mimalloc asks
#: for transparent huge pages on its arenas, and each 2 MiB page it grows into is zeroed on first touch: stalls
#: longer than a whole small mutation, every few calls of a writer making many of them (perf: ``clear_page_erms`` under
#: ``do_huge_pmd_anonymous_page`` from ``mi_manage_os_memory_ex2``).
_SYSTEM_POOL = pa.system_memory_pool()


class _Snapshot:
    """One catalog version decoded in memory: its rows (sorted by object id, as every rewrite writes them),
    with lookups by name and listings by (object type, parent) built once per version."""

    def __init__(self, rows: pa.Table):
        # No pyarrow.compute here: its first call in a process sets up its kernel registry, a one-time cost
        # a cold read would pay for nothing. Rows are written sorted; listings sort anyway.
        self.rows = rows if rows.schema.equals(SCHEMA) else pa.Table.from_arrays(rows.columns, schema=SCHEMA)
        if self.rows.column("object_id").num_chunks > 1:
            self.rows = self.rows.combine_chunks(memory_pool=_SYSTEM_POOL)
        self.nbytes = 3 * self.rows.get_total_buffer_size() + 1024  # the rows and the Python lookups built over them
        self._children: dict[tuple[str, str], tuple[str, ...]] = {}
        self._entries: dict[int, dict[str, Any]] = {}

    @cached_property
    def _ids(self) -> list[str]:
        return self.rows.column("object_id").to_pylist()

    @cached_property
    def _position(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self._ids)}

    @cached_property
    def _types(self) -> list[str]:
        return self.rows.column("object_type").to_pylist()

    @cached_property
    def _ids_sorted(self) -> bool:
        ids = self._ids
        return all(a < b for a, b in zip(ids, ids[1:]))

    def children(self, kind: str, parent: str) -> tuple[str, ...]:
        """The object ids of type ``kind`` directly inside ``parent``, sorted; computed once per key. A parent
        is its children's id prefix, so they are one range of the sorted ids (the top level: the ids without a
        dot), and only their types are looked at: a cold call costs no pass over every row."""
        key = (kind, parent)
        found = self._children.get(key)
        if found is None:
            ids = self._ids
            if parent:
                prefix = parent + "."
                lo, hi = (bisect.bisect_left(ids, prefix), bisect.bisect_left(ids, parent + "/")) if self._ids_sorted else (0, len(ids))
                inside = [i for i in range(lo, hi) if ids[i].startswith(prefix) and "." not in ids[i][len(prefix):]]
            else:
                inside = [i for i, name in enumerate(ids) if "." not in name]
            if len(inside) > 64:  # many: every type at once
                types = self._types
                found = tuple(sorted(ids[i] for i in inside if types[i] == kind))
            else:
                column = self.rows.column("object_type")
                found = tuple(sorted(ids[i] for i in inside if column[i].as_py() == kind))
            self._children[key] = found
        return found

    def entry(self, name: str) -> dict[str, Any] | None:
        i = self._position.get(name)
        if i is None:
            return None
        found = self._entries.get(i)
        if found is None:
            found = self._entries[i] = self.rows.slice(i, 1).to_pylist()[0]
        return dict(found)


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
        memory_pool=_SYSTEM_POOL)


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
        # Uncompressed (docs/FORMAT.md §12): the file is small, and a zstd context per column chunk was a large share
        # of each rewrite. No zone maps (an empty set: nothing bounded): a catalog version is one fragment, read
        # whole or through its indices, never pruned, so computing them would be work no reader uses.
        options = WriteOptions.from_config(base.config, zstd_level=0)
        fragments = [pool.submit(write_fragment, store, SCHEMA, rows.to_batches(), options, ())]
        indices = [pool.submit(_index_entry, store, name, column, kind, rows) for name, column, kind in INDICES]
    errors = [f.exception() for f in fragments + indices]
    if any(errors):
        store.delete([f.result().path for f in fragments if f.exception() is None]
                     + [p for f in indices if f.exception() is None for p in f.result().files])
        raise next(e for e in errors if e is not None)
    migrate = not base.schema.equals(SCHEMA)
    return Overwrite(base.version, [f.result() for f in fragments], SCHEMA if migrate else None,
                     indices=tuple(f.result() for f in indices), strict=True, config={CONFIG_KEY: SCHEMA_VERSION})


# -- mutations as data: a writer's own, or one queued by a writer of this host waiting for its turn --
def _apply(root: str, rows: pa.Table, req: dict[str, Any]) -> tuple[pa.Table, Any]:
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
            _check_location(root, rows, ids, name, where if req["row"]["registered"] else f"{root.rstrip('/')}/{where}")
        now = _now_ms()
        kind = NAMESPACE if op == "create_namespace" else TABLE
        row = dict(req["row"], object_id=name, object_type=kind, parent=_parent(name), created_ms=now, updated_ms=now)
        return _append(rows, ids, row), None
    ids = rows.column("object_id")
    types = rows.column("object_type")
    if op == "drop_namespace":
        if not pc.any(pc.and_(pc.equal(ids, name), pc.equal(types, NAMESPACE))).as_py():
            raise NamespaceNotFound(f"catalog {root} has no namespace {name!r}")
        inside = pc.starts_with(ids, name + ".")
        if pc.any(inside).as_py() and not req["cascade"]:
            first = rows.filter(inside).column("object_id")[0].as_py()
            raise NamespaceNotEmpty(f"namespace {name!r} of catalog {root} holds {pc.sum(inside).as_py()} entries "
                                    f"(e.g. {first!r}); drop them first or pass cascade=True")
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
        parents[pos] = _parent(new_name)
        updated = rows.column("updated_ms").to_pylist()
        updated[pos] = _now_ms()
        for column, values in (("object_id", names), ("parent", parents), ("updated_ms", updated)):
            rows = rows.set_column(SCHEMA.get_field_index(column), SCHEMA.field(column), pa.array(values, SCHEMA.field(column).type))
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


def _result(outcome: dict[str, Any]) -> Any:
    """What a request's writer gets: its result, or the error that refused it raised again."""
    if "error" in outcome:
        kind, message = outcome["error"]
        cls = getattr(lamina_errors, kind, None)
        raise (cls if isinstance(cls, type) and issubclass(cls, lamina_errors.LaminaError) else lamina_errors.LaminaError)(message)
    return outcome["result"]


def _check_free(root: str, rows: pa.Table, ids: list[str], name: str) -> None:
    """``ids``: the object ids of ``rows``, in row order (a list scan: no pyarrow.compute, whose first call in a
    process pays a one-time set-up, on the path of every create)."""
    if name in ids:
        kind = rows.column("object_type")[ids.index(name)].as_py()
        raise (TableExists if kind == TABLE else NamespaceExists)(f"catalog {root} already has a {kind} named {name!r}")


def _check_parent(root: str, rows: pa.Table, ids: list[str], name: str) -> None:
    parent = _parent(name)
    if not parent:
        return
    if parent not in ids or rows.column("object_type")[ids.index(parent)].as_py() != NAMESPACE:
        raise NamespaceNotFound(f"catalog {root} has no namespace {parent!r} to hold {name!r}; create it first")


class _Queue:
    """Local catalogs: requests of this host's writers waiting for their turn, applied by the writer that has
    it in its own rewrite (group commit: one rewrite and one commit for every writer waiting). Files under
    ``<root>/_catalog/_queue/`` (docs/FORMAT.md §12), each written whole (temp file, rename):

    ``<id>.req``      a request (``_apply``'s data), ``<id>`` = its time in ns and a random suffix (FIFO order)
    ``<id>.taken``    taken (renamed) by the writer with the turn: its writer can no longer withdraw it
    ``<id>.claimed``  taken into a rewrite: the request, its outcome, the rewrite's transaction uuid and version
    ``<id>.out``      its outcome once that rewrite committed (or refused it), for its writer to collect

    Only the writer holding the turn claims. A claim left by a writer that stopped before finishing is settled
    by the next one (``recover``): handed out if that version carries the claim's transaction, else queued
    again. Nothing here is fsynced: a request is not acknowledged before the version applying it is durable,
    and after a crash of the host its writer is gone too."""

    def __init__(self, store: ObjectStore):
        self.dir = os.path.join(store.root, QUEUE_DIR)

    def _path(self, rid: str, kind: str) -> str:
        return os.path.join(self.dir, f"{rid}.{kind}")

    def _write(self, rid: str, kind: str, doc: dict[str, Any]) -> None:
        os.makedirs(self.dir, exist_ok=True)
        tmp = os.path.join(self.dir, f".tmp-{uuid.uuid4().hex}")
        with open(tmp, "w") as f:
            json.dump(doc, f)
        os.replace(tmp, self._path(rid, kind))

    def _read(self, rid: str, kind: str) -> dict[str, Any] | None:
        try:
            with open(self._path(rid, kind)) as f:
                return json.load(f)
        except FileNotFoundError:
            return None

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self.dir))
        except FileNotFoundError:
            return []

    def post(self, request: dict[str, Any]) -> str:
        rid = f"{time.time_ns():020d}-{uuid.uuid4().hex[:12]}"
        self._write(rid, "req", request)
        return rid

    def withdraw(self, rid: str) -> bool:
        """Takes a request back; False when a rewrite claimed it (or it was already handed out)."""
        try:
            os.unlink(self._path(rid, "req"))
            return True
        except FileNotFoundError:
            return False

    def collect(self, rid: str) -> dict[str, Any] | None:
        """The outcome of request ``rid``, once handed out (then removed), else None."""
        out = self._read(rid, "out")
        if out is not None:
            remove_quietly(self._path(rid, "out"))
        return out

    def await_outcome(self, rid: str, seconds: float, root: str) -> dict[str, Any] | None:
        """The outcome of a request claimed by the writer that has the turn, waited for up to ``seconds``;
        None if the claim was given back (its rewrite lost a race) and the request withdrawn."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            out = self.collect(rid)
            if out is not None:
                return out
            if self.withdraw(rid):
                return None
            time.sleep(0.005)
        raise CommitStateUnknown(f"catalog {root}: request {rid} was taken into a rewrite by another writer of this "
                                 f"host that has not finished within {seconds:.0f} s; whether it was applied is "
                                 f"unknown: list or describe the catalog to find out")

    def take(self, limit: int, include: str | None = None) -> list[tuple[str, dict[str, Any]]]:
        """Up to ``limit`` queued requests, oldest first (and ``include``'s, wherever it is), each taken by an
        atomic rename to ``<id>.taken``: a request its writer withdrew meanwhile is not taken."""
        rids = [n[:-4] for n in self._names() if n.endswith(".req")]
        taken = []
        for rid in rids[:limit] + ([include] if include is not None and include in rids[limit:] else []):
            try:
                os.rename(self._path(rid, "req"), self._path(rid, "taken"))
            except FileNotFoundError:
                continue
            body = self._read(rid, "taken")
            if body is not None:
                taken.append((rid, body))
        return taken

    def give_back(self, rids: list[str]) -> None:
        for rid in rids:
            try:
                os.rename(self._path(rid, "taken"), self._path(rid, "req"))
            except FileNotFoundError:
                pass

    def claim(self, claims: dict[str, dict[str, Any]], txn_uuid: str, version: int) -> None:
        """Records, before the commit, what committing ``txn_uuid`` as ``version`` does to each request."""
        for rid, doc in claims.items():
            self._write(rid, "claimed", {**doc, "txn": txn_uuid, "version": version})
            remove_quietly(self._path(rid, "taken"))

    def unclaim(self, claims: dict[str, dict[str, Any]]) -> None:
        """Back to the queue: the rewrite that claimed them did not commit."""
        for rid, doc in claims.items():
            self._write(rid, "req", doc["request"])
            remove_quietly(self._path(rid, "claimed"))

    def hand_out(self, outcomes: dict[str, dict[str, Any]], from_claims: bool = False) -> None:
        """Makes outcomes collectable: the claims of a committed rewrite, or refusals nothing was written for."""
        for rid, doc in outcomes.items():
            if from_claims:
                try:
                    os.replace(self._path(rid, "claimed"), self._path(rid, "out"))
                except FileNotFoundError:  # never expected; the commit stands either way
                    self._write(rid, "out", doc)
            else:
                self._write(rid, "out", doc)
                remove_quietly(self._path(rid, "taken"))

    def recover(self, store: ObjectStore, table_uuid: str | None) -> None:
        """Settles the claims of a writer that stopped between claiming and handing out (this writer has the
        turn, so no other is at work), and removes outcomes nobody collected for ``UNCOLLECTED_SECONDS``."""
        now = time.time()
        names = self._names()
        claims = {n[: -len(".claimed")] for n in names if n.endswith(".claimed")}
        for name in names:
            rid, _, kind = name.rpartition(".")
            if kind == "claimed":
                doc = self._read(rid, "claimed")
                if doc is None:
                    continue
                m = try_load_manifest(store, int(doc["version"]), table_uuid)
                if m is not None and m.record.uuid == doc["txn"]:
                    os.replace(self._path(rid, "claimed"), self._path(rid, "out"))
                else:
                    self.unclaim({rid: doc})
            elif kind == "taken":  # taken by a writer that stopped before claiming: queued again
                if rid in claims:
                    remove_quietly(self._path(rid, "taken"))
                else:
                    self.give_back([rid])
            elif kind == "out" or name.startswith(".tmp-"):
                try:
                    if now - os.stat(os.path.join(self.dir, name)).st_mtime > UNCOLLECTED_SECONDS:
                        remove_quietly(os.path.join(self.dir, name))
                except FileNotFoundError:
                    pass


def _try_turn(store: ObjectStore) -> tuple[int | None, str]:
    """This host's writer turn on a local catalog, if free now: (descriptor holding the ``flock``, "held"),
    (an open descriptor to wait on, "busy"), or (None, "none": not local, or no locking here)."""
    import fcntl

    if not isinstance(store, LocalStore):
        return None, "none"
    try:
        fd = os.open(os.path.join(store.root, LOCK_FILE), os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        return None, "none"
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return fd, "held"
    except BlockingIOError:
        return fd, "busy"
    except OSError:  # no flock on this filesystem
        os.close(fd)
        return None, "none"


def _wait_turn(fd: int) -> bool:
    """Waits up to ``LOCK_WAIT_SECONDS`` for the ``flock`` on ``fd``: True once held. False: not had in time (or
    lost), and ``fd`` is no longer the caller's: a waiting thread closes it once it gets the lock, so that a
    holder stuck for longer never holds anyone up."""
    import fcntl

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
            return state["held"]
        state["abandoned"] = True
    return False


def _remove_table_files(store: ObjectStore) -> None:
    """Drops the Lamina table at ``store``'s root, which a failed create made and no entry ever named, and
    removes every object of its layout (not deeper tables' files), its tombstone included: no other process
    can know of the location, so no writer can race the drop (``lamina.drop.purge``, the one purge)."""
    purge_table(store, keep_tombstone=False)


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
