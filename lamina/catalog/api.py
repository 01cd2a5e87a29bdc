"""The catalog's API: ``lamina.connect(root)`` and ``Catalog`` (namespaces and tables: create, list,
describe, open, rename, drop, search, what maintenance needs), reading the latest catalog version cheaply
and running every mutation as a copy-on-write rewrite, redone on a lost race."""

from __future__ import annotations

import json
import os
import random
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina.catalog import group_commit, locations, mutations, snapshots
from lamina.catalog.schema import CATALOG_DIR, CONFIG_KEY, NAMESPACE, SCHEMA, SCHEMA_VERSION, TABLE, check_name, parent_of
from lamina.commit import commit
from lamina.datafile import WriteOptions
from lamina.drop import purge as purge_table
from lamina.errors import (
    CommitConflict,
    CommitStateUnknown,
    IndexNotFound,
    InvalidArgument,
    NamespaceExists,
    NamespaceNotFound,
    StorageError,
    TableExists,
    TableNotFound,
    TableReplaced,
)
from lamina.manifest import forget_superseded, manifest_path
from lamina.retry import Backoff
from lamina.store import ObjectStore, check_relative, open_store
from lamina.table import Table, create_table, open_table, open_with_hint
from lamina.transaction import Create

#: A lost race redoes the rewrite after a jittered wait scaled to how long the rewrite took (attempt k waits
#: uniform(0, min(cap, took * 2**k))): at least ``base_seconds``, many writers may contend.
REWRITE_BACKOFF = Backoff(base_seconds=0.002, cap_seconds=0.5, max_attempts=200)
#: Reads of the catalog that find out whether a create whose commit failed was committed after all.
READ_BACK = Backoff(base_seconds=0.05, cap_seconds=1.0, max_attempts=6)


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


def _properties(properties: Any, what: str) -> str:
    if properties is None:
        return "{}"
    if not isinstance(properties, dict) or not all(isinstance(k, str) for k in properties):
        raise InvalidArgument(f"properties of {what} must be a dict with string keys, not {type(properties).__name__}")
    try:
        return json.dumps(properties, sort_keys=True)
    except (TypeError, ValueError) as e:
        raise InvalidArgument(f"properties of {what} must be JSON values: {e}") from None


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

    def _read(self, fresh: bool = True) -> snapshots.Version:
        """One version to answer a call from (the latest; with ``fresh=False`` the one held): decoded whole and
        cached when small, else read through its indices. The rows of the version held, when not in memory
        yet, are read while checking for a newer version (one round trip instead of two, when it is the latest)."""
        t = self._table
        if not fresh:
            return snapshots.Version(t, snapshots.snapshot(t))
        held = t.manifest
        early = None
        # On object storage the rows are read while the next version is looked for (one round trip);
        # locally both are a few file reads, and starting a thread would cost more than it saves.
        if snapshots.CACHE.get(snapshots.cache_key(t.uri, held)) is None and snapshots.is_small(held) and not t.store.is_local:
            early = snapshots.pool().submit(snapshots.snapshot, t.checkout(held.version))
        t = self._fresh()
        if early is not None and t.manifest.version == held.version:
            return snapshots.Version(t, early.result())
        return snapshots.Version(t, snapshots.snapshot(t))

    def _rows(self, flt: str | None = None) -> pa.Table:
        return self._read().select(flt)

    def _entry(self, name: str, v: snapshots.Version | None = None) -> dict[str, Any] | None:
        v = v or self._read()
        if v.snap is not None:
            return v.snap.entry(name)
        found = v.select(f"object_id = {snapshots.quote(name)}").to_pylist()
        return found[0] if found else None

    def _namespace(self, name: str, v: snapshots.Version | None = None) -> dict[str, Any]:
        entry = self._entry(name, v)
        if entry is None or entry["object_type"] != NAMESPACE:
            raise NamespaceNotFound(
                f"catalog {self.root} has no namespace {name!r}"
                + (f" ({name!r} is a table)" if entry else "")
                + "; create it with create_namespace"
            )
        return entry

    def _table_entry(self, name: str, v: snapshots.Version | None = None) -> dict[str, Any]:
        check_name(name, "table name")
        entry = self._entry(name, v)
        if entry is None or entry["object_type"] != TABLE:
            raise TableNotFound(
                f"catalog {self.root} has no table {name!r}"
                + (f" ({name!r} is a namespace)" if entry else "")
                + "; list them with list_tables"
            )
        return entry

    def _location(self, entry: dict[str, Any]) -> str:
        """A table's full URI: a registered table's own, else under the root (never outside it)."""
        if entry["registered"]:
            return entry["location"]
        relative = check_relative(entry["location"], what=f"location of table {entry['object_id']!r} in catalog {self.root}")
        return f"{self.root.rstrip('/')}/{relative}"

    # -- mutations: copy-on-write rewrites ------------------------------------------------------
    def _mutate(self, request: dict[str, Any], before_commit: Callable[[], Any] | None = None) -> Any:
        """Applies ``request`` (a mutation as data, see ``mutations.apply``) in a copy-on-write rewrite of the latest
        version and returns what it returns; raises what refuses it (nothing is written then). ``before_commit``
        (if any) must have run before a rewrite applying the request commits; it raises to abandon it.

        On a local catalog the writers of one host take turns (``group_commit.LOCK_FILE``), and the writer
        whose turn it is applies, in the same rewrite, the requests the writers waiting for it queued meanwhile
        (``group_commit.Queue``: group commit). A writer that cannot have the turn within
        ``group_commit.LOCK_WAIT_SECONDS`` withdraws its request and
        goes ahead alone: put-if-absent of the next version decides every commit either way."""
        store = self._table.store
        fd, state = group_commit.try_turn(store)
        if state != "busy":
            try:
                return self._commit_batch(group_commit.Queue(store) if fd is not None else None, request, before_commit)
            finally:
                if fd is not None:
                    os.close(fd)  # releases the lock
        # Another writer of this host is at work: queue the request for whoever has the turn next.
        assert fd is not None  # "busy": a descriptor to wait on
        if before_commit is not None:
            try:
                before_commit()  # e.g. the new table exists before any writer can commit its entry
            except BaseException:
                os.close(fd)
                raise
        queue = group_commit.Queue(store)
        rid = queue.post(request)
        if not group_commit.wait_turn(fd):
            out = None if queue.withdraw(rid) else queue.await_outcome(rid, group_commit.LOCK_WAIT_SECONDS, self.root)
            if out is None:
                return self._commit_batch(None, request, None)  # withdrawn: alone, without the turn
            return mutations.result(out)
        try:
            queue.recover(store, self._table.manifest.table_uuid)
            out = queue.collect(rid)
            if out is not None:
                return mutations.result(out)  # applied or refused by a writer that had the turn before us
            return self._commit_batch(queue, None, None, own=rid)
        finally:
            os.close(fd)

    def _commit_batch(
        self,
        queue: group_commit.Queue | None,
        request: dict[str, Any] | None,
        before_commit: Callable[[], Any] | None,
        own: str | None = None,
    ) -> Any:
        """One rewrite applying the queued requests (if ``queue``: this writer has the turn) and ``request``
        (this writer's own, unless it is queued as ``own``); redone over a version committed meanwhile.
        Returns, or raises, this writer's own outcome."""
        queued: list[tuple[str, dict[str, Any]]] = []
        claimed: dict[str, dict[str, Any]] = {}
        if queue is not None:
            queue.recover(self._table.store, self._table.manifest.table_uuid)
            queued = queue.take(group_commit.MAX_BATCH, include=own)
        try:
            for attempt in range(REWRITE_BACKOFF.max_attempts):
                started = time.monotonic()
                v = self._read()
                t, base = v.table, v.table.manifest
                rows = v.snap.rows if v.snap is not None else snapshots.rows_of(t)
                outcomes: dict[str | None, dict[str, Any]] = {}
                for rid, body in queued + ([(None, request)] if request is not None else []):
                    try:
                        rows, result = mutations.apply(self.root, rows, body)
                        outcomes[rid] = {"result": result}
                    except Exception as e:  # a refusal, for its writer to raise; the other requests go on
                        outcomes[rid] = {"error": [type(e).__name__, str(e)]}
                mine = outcomes.get(own) if own is not None else outcomes.pop(None)
                if mine is None:  # this writer's queued request vanished: nothing here can say what became of it
                    raise CommitStateUnknown(
                        f"catalog {self.root}: request {own} left the queue without an outcome; "
                        f"list or describe the catalog to find out whether it was applied"
                    )
                if queue is not None and not any("result" in o for o in outcomes.values()) and "error" in mine:
                    queue.hand_out({rid: outcomes[rid] for rid, _ in queued})  # all refused: nothing to write
                    queued = []
                    if own is not None:
                        queue.collect(own)
                    return mutations.result(mine)
                if queue is None and "error" in mine:
                    return mutations.result(mine)
                rows = mutations.sort_rows(rows)
                txn = mutations.rewrite(t.store, base, rows)
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
                snapshots.CACHE.pop(snapshots.cache_key(t.uri, base))  # superseded: readers go to the latest version
                forget_superseded(t.store, base)
                if rows.num_rows and snapshots.is_small(new):
                    snap = snapshots.Snapshot(rows)
                    snapshots.CACHE.put(snapshots.cache_key(t.uri, new), snap, snap.nbytes)
                return mutations.result(mine)
            if queue is not None and claimed:
                queue.unclaim(claimed)  # none of those transactions committed
                queued = []
            raise CommitConflict(
                f"catalog {self.root}: {REWRITE_BACKOFF.max_attempts} rewrites in a row lost the race "
                f"to other writers; nothing was changed, retry later"
            )
        finally:
            if queue is not None and queued and not claimed:
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
        rows = v.select(f"object_type = 'namespace' AND parent = {snapshots.quote(parent or '')}")
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

    def create_table(
        self, name: str, schema: pa.Schema, *, properties: dict[str, Any] | None = None, **table_options: Any
    ) -> Table:
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
        creating = snapshots.pool().submit(create_table, location, schema, storage_options=self.storage_options, **table_options)

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
        keep = (
            f"its files at {table.uri} were kept: check describe_table({name!r}); if the catalog lists it there, "
            f"the table was created; if not, nothing names them and register_table({name!r}, {table.uri!r}) then "
            f"drop_table({name!r}, purge=True) removes them"
        )
        if not isinstance(failure, Exception):  # interrupted: no reads now
            _add_note(failure, f"catalog {self.root}: whether table {name!r} was created is unknown; {keep}")
            raise failure
        try:
            settled = self._withdraw_queued(relative)
            named = self._read_back_location(relative) if settled else None
        except Exception as e:  # the catalog cannot be read: the outcome stays unknown
            settled, named = False, None
            _add_note(failure, f"reading catalog {self.root} back failed too: {e}")
        if named is not None:
            return table  # committed (under ``named``: renamed since, if it is not ``name``)
        if not settled:
            raise CommitStateUnknown(
                f"catalog {self.root}: whether table {name!r} was created is unknown ({failure}); {keep}"
            ) from failure
        _remove_table_files(table.store)  # no entry names them, and none can any more
        if isinstance(failure, CommitStateUnknown):
            raise StorageError(
                f"catalog {self.root}: creating table {name!r} failed ({failure}); the catalog read back "
                f"shows nothing was committed, and its files at {table.uri} were removed: retry "
                f"create_table"
            ) from failure
        raise failure

    def _withdraw_queued(self, relative: str) -> bool:
        """Whether no request creating a table at ``relative`` can still be applied. Local catalogs: with this
        host's writer turn, the claims of a writer that stopped are settled and a queued request naming
        ``relative`` is withdrawn; False when the turn cannot be had (a writer holding it may still commit it)."""
        store = self._table.store
        fd, state = group_commit.try_turn(store)
        if state == "none":
            return True  # no queue (S3, or no flock: no writer queues)
        assert fd is not None  # "held" or "busy": a descriptor
        if state == "busy" and not group_commit.wait_turn(fd):
            return False
        try:
            queue = group_commit.Queue(store)
            queue.recover(store, self._table.manifest.table_uuid)
            queue.withdraw_matching(
                lambda body: body.get("op") == "create_table" and (body.get("row") or {}).get("location") == relative
            )
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
        files. Locations are compared normalized (``locations.location_key``)."""
        check_name(name, "table name")
        metadata = _properties(properties, f"table {name!r}")
        self._check_before_create(name, uri)
        table = open_table(uri, storage_options=self.storage_options)
        m = table.manifest

        row = dict(
            location=table.uri,
            registered=True,
            metadata=metadata,
            table_version=m.version,
            table_rows=m.rows,
            table_bytes=sum(f.file_bytes for f in m.fragments),
        )
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
        rows = v.select(f"object_type = 'table' AND parent = {snapshots.quote(namespace or '')}")
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
            early = snapshots.pool().submit(self._latest_of, self._location(e), e["table_version"])
        latest = self._read()
        if early is not None and latest.table.version == held_version:
            t = early.result()
        else:
            e = self._table_entry(name, latest)
            t = self._latest_of(self._location(e), e["table_version"])
        assert e is not None  # the entry read early, or just now
        m = t.manifest
        return TableDescription(
            name,
            t.uri,
            bool(e["registered"]),
            json.loads(e["metadata"]),
            e["created_ms"],
            e["updated_ms"],
            m.version,
            m.rows,
            len(m.fragments),
            [ix.name for ix in m.indices],
            json.loads(e["maintenance"]) if e["maintenance"] else None,
        )

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
        key = locations.location_key(location)
        catalog = f"{self.root.rstrip('/')}/{CATALOG_DIR}"
        if locations.overlap(key, locations.location_key(catalog)) is not None:  # an entry an older catalog accepted
            raise InvalidArgument(
                f"not purging {location}: it overlaps catalog {self.root}'s own location {catalog}; "
                f"the entry {entry['object_id']!r} was dropped, its files were kept"
            )
        others = [self._location(e) for e in self._rows("object_type = 'table'").to_pylist()]
        inside = [o for o in others if locations.overlap(locations.location_key(o), key) in ("is", "lies inside")]
        if inside:
            raise InvalidArgument(
                f"not purging {location}: table(s) of catalog {self.root} live there ({inside[0]}); "
                f"the entry {entry['object_id']!r} was dropped, its files were kept"
            )
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
        rows = {r["object_id"]: r for r in self._rows(f"object_id IN ({', '.join(map(snapshots.quote, names))})").to_pylist()}
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
        recorded = {
            n: {
                "report": json.dumps(r, sort_keys=True, default=str),
                **{k: r[k] for k in ("version", "rows", "bytes") if isinstance(r.get(k), int)},
            }
            for n, r in reports.items()
        }
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
            parent = self._entry(parent_of(name), v) if parent_of(name) else {"object_type": NAMESPACE}
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
                f"catalog {self.root} already has a {entry['object_type']} named {name!r}"
            )
        raise NamespaceNotFound(f"catalog {self.root} has no namespace {parent_of(name)!r} to hold {name!r}; create it first")

    def _check_location_before(self, name: str, location: str, v: snapshots.Version) -> None:
        """``locations.check_location`` on catalog version ``v``, before anything is written."""
        rows = _table_rows(v)
        locations.check_location(self.root, rows, rows.column("object_id").to_pylist(), name, location)


def _table_rows(v: snapshots.Version) -> pa.Table:
    """The rows of catalog version ``v`` that may name a location (every row when it is in memory)."""
    return v.snap.rows if v.snap is not None else v.select("object_type = 'table'")


def _add_note(e: BaseException, note: str) -> None:
    """``e.add_note(note)``; Python 3.10 has no ``add_note``: the note goes where 3.11 keeps it."""
    if sys.version_info >= (3, 11):
        e.add_note(note)
    else:
        e.__notes__ = [*getattr(e, "__notes__", []), note]  # type: ignore[attr-defined]  # not in 3.10's stubs


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
            raise InvalidArgument(  # noqa: B904 (the chained TableNotFound says where it looked)
                f"no Lamina catalog at {root} (nothing under {CATALOG_DIR}/): point at a catalog "
                f"root, or create one with lamina.connect({root!r})"
            )
        txn = Create(SCHEMA, config={**WriteOptions().to_config(), CONFIG_KEY: SCHEMA_VERSION})
        try:
            commit(store, txn, txn.base)
        except TableExists:
            pass  # another process created it first
    seen_at = time.monotonic()
    table = open_table(store.uri, storage_options=storage_options)
    return Catalog(root, table, storage_options, seen_at)
