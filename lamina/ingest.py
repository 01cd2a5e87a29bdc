"""Applying a WAL shard to its table: memtable, point lookups, exactly-once flushes.

A poll splits the shard's new WAL transactions natively (key + row bytes) into the skiplist
memtable (newest version per key); a flush decodes it to one Parquet fragment and commits that, the
deletions of older versions of its keys and the shard's watermarks as one ``wal_flush`` transaction.

Exactly once: a WAL transaction is in the table iff the manifest's watermark of its
segment is past it, and the watermark moves in the same commit as the rows. A restarted
applier rebuilds its memtable from the watermarks; a second applier of the same shard
cannot commit the same transactions (the conflict matrix's ``watermarks`` rule).

Bounded: a poll applies WAL only while the memtable is under flush_rows / flush_bytes, so it
holds at most that plus one transaction whatever the backlog, and nothing more is applied
while flushes fail. Schema changes: an applier reads WAL rows in the table's schema as of its
start, follows a change in which those rows decode the same (``wal_schema_change``) and
otherwise stops its shard (``ShardStopped``), keeping the unflushed rows in the WAL. A dropped
table (a tombstone, its location emptied, another table created there) stops the shard too, with
``TableDropped``: nothing is committed, nothing is written to the location, and the rows read but
not flushed are reported as not applied (they went with the table).

``ShardApplier`` is plain Python (tests drive it directly); ``lamina.workers.ingest`` wraps it
in a Ray actor and ``lamina.jobs.ingest`` runs one per shard.
"""

from __future__ import annotations

import base64
import json
import logging
import threading
import time
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina import _native, evolution
from lamina.datafile import write_fragments
from lamina.errors import (
    CommitConflict,
    CorruptFile,
    InvalidArgument,
    LaminaError,
    ObjectNotFound,
    SchemaMismatch,
    ShardStopped,
    TableDropped,
    TableNotFound,
    TableReplaced,
)
from lamina.faults import maybe_die
from lamina.filter import Conjunct, Filter
from lamina.keys import primary_key_domain
from lamina.manifest import VERSIONS_DIR
from lamina.scan import Scanner
from lamina.store import ObjectStore
from lamina.transaction import WalFlush
from lamina.wal import (
    CLAIM,
    SEALED,
    SegmentState,
    WalTxn,
    latest_of,
    list_segments,
    parse_watermark_key,
    read_claim,
    read_sealed,
    read_segment,
    segment_prefix,
    shard_prefix,
    watermark_key,
)

log = logging.getLogger("lamina.ingest")

#: Test-only: the applier SIGKILLs itself after writing a flush's fragment, before committing.
FAULT_KILL_IN_FLUSH = "LAMINA_FAULT_KILL_APPLIER_IN_FLUSH"


@dataclass(frozen=True)
class IngestOptions:
    """When an applier flushes, and how long applied WAL segments are kept."""

    flush_rows: int = 500_000
    flush_bytes: int = 128 << 20
    flush_seconds: float = 30.0
    poll_seconds: float = 0.1
    retention_seconds: float = 3600.0

    def __post_init__(self) -> None:
        for name in ("flush_rows", "flush_bytes"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise InvalidArgument(f"ingest option {name} must be a positive integer, got {v!r}")
        for name in ("flush_seconds", "poll_seconds", "retention_seconds"):
            v = getattr(self, name)
            if not isinstance(v, (int, float)) or v < 0:
                raise InvalidArgument(f"ingest option {name} must be a non-negative number of seconds, got {v!r}")


def shard_for(key: Any, shards: int) -> int:
    """The shard a producer should write ``key`` to (and where ``get`` looks for it)."""
    raw = key if isinstance(key, bytes) else str(key).encode()
    return zlib.crc32(raw) % shards


def memtable_key_type(t: pa.DataType) -> str:
    """The memtable's key domain for a primary-key column (``lamina.keys``)."""
    return primary_key_domain(t, "a WAL primary key")


def remove_applied_segments(
    store: ObjectStore,
    shard: int,
    watermarks: Mapping[str, int],
    retention_seconds: float,
    *,
    now: float | None = None,
    segments: Iterable[int] | None = None,
) -> list[int]:
    """Deletes the sealed segments of ``shard`` whose every transaction is committed to the table,
    once their seal is older than ``retention_seconds``; returns the segments this call removed.

    ``watermarks`` are the table's committed ones (``Manifest.wal_watermarks`` of a version read
    before the call: they only grow, so an older version only keeps more). "Committed" is the
    table's watermark, not an applier's position: a segment applied but not flushed must survive,
    to be replayed after a restart. Appliers and ``lamina maintain`` may run this at once on one
    shard: a segment another caller removed meanwhile is simply done. ``segments`` limits the
    call to those segments (default: every segment of the shard).
    """
    now = time.time() if now is None else now
    removed = []
    for segment in sorted(segments) if segments is not None else list_segments(store, shard):
        prefix = segment_prefix(shard, segment)
        objects = list(store.list(prefix))
        seal = next((o for o in objects if o.path == prefix + SEALED), None)
        if seal is None or now - seal.modified < retention_seconds:
            continue
        sealed_at = read_sealed(store, shard, segment)
        if sealed_at is None:
            continue  # removed meanwhile (another caller): done
        if watermarks.get(watermark_key(shard, segment), 0) < sealed_at:
            continue
        # The seal goes last (a segment without one is never removed); the claim stays, so
        # the segment number is never claimed again while its watermark says "applied".
        store.delete([o.path for o in objects if o.path not in (seal.path, prefix + CLAIM)])
        store.delete([seal.path])
        removed.append(segment)
    return removed


@dataclass
class ApplierStats:
    shard: int
    applied_rows: int = 0
    flushed_rows: int = 0
    flushes: int = 0
    memtable_rows: int = 0
    #: Size of the unflushed rows now (memtable arena, or row bytes without a key) and the
    #: most it reached after any applied transaction; stays within flush_bytes + one transaction.
    memtable_bytes: int = 0
    peak_memtable_bytes: int = 0
    conflicts: int = 0
    #: Flushes that failed (storage errors); the memtable is kept and no more WAL is applied
    #: while it is full, so a storage outage holds the applier back instead of growing it.
    flush_failures: int = 0
    torn: dict[int, str] = field(default_factory=dict)
    watermarks: dict[str, int] = field(default_factory=dict)
    version: int = 0
    #: Why the shard is stopped (``ShardStopped``, ``TableDropped``), None while it runs.
    error: str | None = None


#: ``_wal/<shard>/stopped``: a stopped shard's record (JSON: table, shard, the schema its WAL
#: rows were read in, the error), so a restarted applier stays stopped instead of decoding
#: those rows in the new schema. Removed by the applier once the table's schema fits again.
STOPPED = "stopped"

#: Pairs of column types in which every WAL value decodes to the same value.
_SAME_ENCODING = {
    (pa.string(), pa.large_string()),
    (pa.binary(), pa.large_binary()),
    (pa.string(), pa.binary()),
    (pa.string(), pa.large_binary()),
    (pa.large_string(), pa.large_binary()),
}


def show_schema(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema)


def wal_schema_change(old: pa.Schema, new: pa.Schema, old_key: str | None, new_key: str | None) -> str | None:
    """None if WAL rows written in ``old`` decode in ``new`` to the same values (so rows from
    producers of either schema can be read in ``new``); else why not.

    The row codec names columns by position and lays values out by type (docs/FORMAT.md
    §11.2), so that holds when ``new`` keeps ``old``'s columns in place with their value layouts
    and nullability (or relaxes it), adds only nullable columns after them, with no default (rows
    written before would decode it as null), and keeps the primary key. A column keeps its name, or
    is renamed (the same field id: docs/FORMAT.md §2.4); a name dropped and added again in place is
    another column, whose values the old rows must not give.
    """
    if old_key != new_key:
        return f"the primary key changed from {old_key!r} to {new_key!r}"
    # Field ids say what a column is once the table's schema changed by add_columns and the like; a
    # schema without stored ids (never changed, or replaced by an overwrite) is matched by name.
    by_id = evolution.has_ids(new)
    old_ids, new_ids = evolution.with_ids(old), evolution.with_ids(new)
    kept = {evolution.field_id(f) for f in new_ids} if by_id else set(new.names)
    dropped = [f.name for f in old_ids if (evolution.field_id(f) if by_id else f.name) not in kept]
    again = [n for n in dropped if n in new.names]
    if again:
        return (
            f"column(s) {again} were dropped and added again: rows written before hold the old columns' values, "
            f"which the new ones must not show"
        )
    if dropped:
        return f"column(s) {dropped} were dropped"
    for i, f in enumerate(old):
        g = new.field(i)
        if g.name != f.name and not (by_id and evolution.field_id(old_ids.field(i)) == evolution.field_id(new_ids.field(i))):
            return f"column {i} is {g.name!r}, was {f.name!r} (columns moved)"
        if by_id and not evolution.same_shape(old_ids.field(i), new_ids.field(i)):
            return (
                f"a field of column {g.name!r} was dropped, added or renamed: rows written before are laid out as its fields were"
            )
        if not (f.type.equals(g.type) or (f.type, g.type) in _SAME_ENCODING):
            return f"column {f.name!r} changed type from {f.type} to {g.type}"
        if f.nullable and not g.nullable:
            return f"column {f.name!r} is no longer nullable"
    added = list(new)[len(old) :]
    required = [g.name for g in added if not g.nullable]
    if required:
        return f"new column(s) {required} are not nullable, and rows written before have no value for them"
    defaulted = [g.name for g in added if evolution.default_of(g) is not None]
    if defaulted:
        return f"new column(s) {defaulted} have a default, which rows written before must read, and WAL rows decode them as null"
    try:
        _native.wal_check_schema(new)
    except InvalidArgument as e:
        return str(e)
    return None


class _PutWatch:
    """The store, noting whether a commit tried to put a manifest (after which the outcome of a
    failed commit is unknown and its files must stay for ``cleanup``)."""

    def __init__(self, store: ObjectStore):
        self._store = store
        self.manifest_put = False

    def put_if_absent(self, path: str, data: bytes) -> bool:
        if path.startswith(VERSIONS_DIR):
            self.manifest_put = True
        return self._store.put_if_absent(path, data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


class ShardApplier:
    """Applies one shard of a table's WAL. Thread-safe (one lock); see the module docstring."""

    def __init__(self, uri: str, shard: int, storage_options: dict[str, Any] | None = None, options: IngestOptions | None = None):
        import lamina

        self.uri, self.shard, self.options = uri, int(shard), options or IngestOptions()
        self.table = lamina.open_table(uri, storage_options=storage_options)
        self.store = self.table.store
        self.stats = ApplierStats(self.shard)
        #: Why the shard stopped for good: ``ShardStopped`` (a schema change), ``TableDropped``.
        self._stopped: LaminaError | None = None
        #: The schema WAL rows are decoded in: the table's, or a stopped shard's recorded one.
        self.schema = self.table.schema
        self.pk = self._table_key()
        recorded = self._read_stop_record()
        if recorded is not None:
            self.schema, self.pk = recorded
        self._use_schema(self.schema)
        self._lock = threading.RLock()
        self._last_expiry = time.monotonic()
        self._reset()
        if recorded is not None and self._stopped is None:
            self.store.delete([shard_prefix(self.shard) + STOPPED])
            log.warning("shard %d of %s: the table's schema fits its WAL again; the shard goes on", self.shard, self.uri)

    def _table_key(self) -> str | None:
        pk = self.table.primary_key
        if len(pk) > 1:
            raise InvalidArgument(f"the WAL supports single-column primary keys; {self.uri} has {list(pk)}")
        return pk[0] if pk else None

    def _use_schema(self, schema: pa.Schema) -> None:
        self.schema = schema
        #: Segments whose writer's schema was checked against ``schema``.
        self._readable_segments: set[int] = set()
        self.key_index = schema.names.index(self.pk) if self.pk else None
        self.key_type = memtable_key_type(schema.field(self.pk).type) if self.pk else None

    # -- schema changes --------------------------------------------------------------
    def _reload(self):
        """The table at its latest version, with the applier following a schema change (or stopping)."""
        self._reload_table()
        self._follow_schema()
        return self.table

    def _reload_table(self):
        """``table.reload()``; a table that is gone stops the shard (``TableDropped``)."""
        if isinstance(self._stopped, TableDropped):
            raise self._stopped  # no table to read any more (a schema stop still reads it: retention)
        try:
            return self.table.reload()
        except (TableNotFound, TableReplaced) as e:
            self._dropped(e)

    def _dropped(self, cause: Exception) -> None:
        """Stops the shard for good: its table was dropped (``cause`` is how the applier met it).
        Writes nothing to the location (no stop record: the purge would have to find it), so a
        restarted applier finds no table to open."""
        _, why = latest_of(self.store, self.table.manifest.table_uuid)
        why = why or f"the table was dropped ({cause})"
        starts, positions = getattr(self, "starts", {}), getattr(self, "positions", {})  # none yet when opening
        unflushed = getattr(self, "unflushed_rows", 0)
        if unflushed:
            where = ", ".join(
                f"segment {watermark_key(self.shard, s)} transactions {starts.get(s, 0)} to {n - 1}"
                for s, n in sorted(positions.items())
                if n != starts.get(s, 0)
            )
            lost = (
                f"{unflushed} rows read from its WAL ({where}) were not applied and will not be: they were for the dropped table"
            )
        else:
            lost = "no rows were waiting to be flushed"
        message = (
            f"WAL shard {self.shard} of table {self.uri} stopped: {why}; nothing was committed after the drop, "
            f"{lost}. Stop the table's producers (their WalWriters raise TableDropped too); to ingest into a table "
            f"created at this URI since, start a new applier on it"
        )
        self._stopped = TableDropped(message)
        self.stats.error = message
        log.error("%s", message)
        raise self._stopped from cause

    def _follow_schema(self) -> None:
        new = self.table.schema
        if self._stopped is not None or evolution.same(new, self.schema):
            return
        old, old_key = self.schema, self.pk
        new_key = self._table_key()
        why = wal_schema_change(old, new, old_key, new_key)
        if why is not None and not self.unflushed_rows:
            # Nothing read in the old schema is held: follow the table. Rows not read yet are
            # checked segment by segment against the schema their writer recorded.
            why = None
        if why is None:
            log.warning(
                "shard %d of %s: the table's schema changed to (%s); WAL rows are read in it from now on",
                self.shard,
                self.uri,
                show_schema(new),
            )
            self.pk = new_key
            self._use_schema(new)
            return
        self._stop(
            f"WAL shard {self.shard} of table {self.uri} stopped: the table's schema changed from "
            f"({show_schema(old)}) to ({show_schema(new)}), and the shard's WAL rows, written in the "
            f"old schema, cannot be read in the new one: {why}. Nothing was lost: the rows flushed before "
            f"are in the table and the rest stays in the WAL (watermarks "
            f"{ {watermark_key(self.shard, s): n for s, n in sorted(self.starts.items())} }). To apply them, "
            f"change the table back to the old schema (or one that only adds nullable columns to it) and "
            f"start the applier again; to give them up, remove the shard's WAL segments and "
            f"{shard_prefix(self.shard)}{STOPPED} by hand"
        )

    def _schema_changed(self) -> bool:
        """Reloads the table; True if the applier now reads WAL rows in another schema (raises if stopped)."""
        old = self.schema
        self._reload()
        self._check_running()
        return not evolution.same(self.schema, old)

    def _stop(self, message: str) -> None:
        self._stopped = ShardStopped(message)
        self.stats.error = message
        log.error("%s", message)
        record = {
            "table": self.uri,
            "shard": self.shard,
            "error": message,
            "primary_key": self.pk,
            "schema": base64.b64encode(self.schema.serialize().to_pybytes()).decode(),
        }
        try:
            self.store.put(shard_prefix(self.shard) + STOPPED, json.dumps(record).encode())
        except Exception as e:  # the in-memory stop still holds; a restart re-checks the schema
            log.warning("shard %d of %s: could not record the stop (%s)", self.shard, self.uri, e)
        raise self._stopped

    def _read_stop_record(self) -> tuple[pa.Schema, str | None] | None:
        """(the schema the WAL was read in, its key) if the shard was stopped, else None."""
        path = shard_prefix(self.shard) + STOPPED
        try:
            record = json.loads(self.store.get(path))
            return pa.ipc.read_schema(pa.py_buffer(base64.b64decode(record["schema"]))), record["primary_key"]
        except ObjectNotFound:
            return None
        except (ValueError, KeyError, TypeError, pa.ArrowException):
            raise CorruptFile(
                f"the stop record {self.store.describe(path)} of WAL shard {self.shard} is unreadable; "
                f"check the table's schema against the WAL and remove it by hand"
            ) from None

    def _check_running(self) -> None:
        if self._stopped is not None:
            raise self._stopped

    @property
    def stopped(self) -> LaminaError | None:
        """Why the shard stopped for good (``ShardStopped``, ``TableDropped``), None while it runs."""
        return self._stopped

    # -- state ------------------------------------------------------------------
    def _reset(self) -> None:
        """Memtable emptied, positions back to the committed watermarks (restart, or a lost flush race)."""
        self._reload_table()
        self.starts: dict[int, int] = {}
        for key, n in self.table.manifest.wal_watermarks.items():
            shard, segment = parse_watermark_key(key)
            if shard == self.shard:
                self.starts[segment] = int(n)
        self.positions = dict(self.starts)
        self._finished: set[int] = set()
        self._clear_memtable()
        try:
            self._follow_schema()
        except ShardStopped:
            pass  # recorded; every entry point raises it

    def _clear_memtable(self) -> None:
        self.memtable = _native.MemTable(self.key_type) if self.key_type is not None else None  # set iff a key
        self.buffered: list[bytes] = []  # tables without a key: transactions in order
        self.buffered_bytes = 0
        self.unflushed_rows = 0
        self.first_unflushed = 0.0

    @property
    def memtable_bytes(self) -> int:
        """Size of the unflushed rows: the memtable's arena (row bytes and skiplist nodes), or the
        buffered transactions' bytes for a table without a key."""
        return self.memtable.arena_bytes if self.memtable is not None else self.buffered_bytes

    def full(self) -> bool:
        """Whether the unflushed rows reached flush_rows or flush_bytes: no more WAL is applied until a
        flush. Never with nothing unflushed (the arena starts at one 1 MiB chunk), so a poll always
        makes progress."""
        o = self.options
        return self.unflushed_rows > 0 and (self.unflushed_rows >= o.flush_rows or self.memtable_bytes >= o.flush_bytes)

    # -- applying -----------------------------------------------------------------
    def poll(self) -> int:
        """Applies committed WAL transactions not applied yet, until the memtable is full (see
        ``full``); returns the rows applied. So the memtable never holds more than flush_rows /
        flush_bytes plus one transaction, whatever the backlog; ``step`` flushes and goes on."""
        with self._lock:
            self._check_running()
            applied = 0
            for segment in list_segments(self.store, self.shard):
                if segment in self._finished:
                    continue
                if self.full():
                    break
                applied += self._poll_segment(segment)
            return applied

    def _check_segment_schema(self, segment: int) -> None:
        """Refuses to read a segment whose writer encoded rows in a schema they do not decode in
        (a producer opened before a schema change, or an applier started after one)."""
        if segment in self._readable_segments:
            return
        claim = read_claim(self.store, self.shard, segment)
        if claim is not None and not evolution.same(claim[0], self.schema):
            why = wal_schema_change(claim[0], self.schema, claim[1], self.pk)
            if why is not None and self._schema_changed():  # the table may have moved on: read it again
                why = wal_schema_change(claim[0], self.schema, claim[1], self.pk)
            if why is not None:
                self._stop(
                    f"WAL shard {self.shard} of table {self.uri} stopped: segment {segment} was written in "
                    f"({show_schema(claim[0])}) and its rows cannot be read in the schema the applier reads "
                    f"({show_schema(self.schema)}): {why}. Nothing was lost: the segment's rows stay in the WAL. "
                    f"To apply them, change the table to a schema they decode in and start the applier again; "
                    f"to give them up, remove the segment {segment_prefix(self.shard, segment)} and "
                    f"{shard_prefix(self.shard)}{STOPPED} by hand"
                )
        self._readable_segments.add(segment)

    def _poll_segment(self, segment: int) -> int:
        applied = 0
        while True:
            room = max(1, self.options.flush_bytes - self.memtable_bytes)
            txns, state = read_segment(self.store, self.shard, segment, self.positions.get(segment, 0), max_bytes=room)
            if state.torn and self.stats.torn.get(segment) != state.torn:
                log.warning("shard %d: torn WAL tail not applied: %s", self.shard, state.torn)
                self.stats.torn[segment] = state.torn
            if txns:  # only a segment with rows still to read must decode in the applier's schema
                self._check_segment_schema(segment)
            for t in txns:
                if self.full():
                    return applied
                try:
                    self._apply(t)
                except CorruptFile:
                    # Rows a producer wrote in a schema the table changed to since this applier
                    # read it name columns it does not know: follow the change (or stop), else corrupt.
                    if not self._schema_changed():
                        raise
                    self._apply(t)
                self.positions[t.segment] = t.txn + 1
                if not self.unflushed_rows:
                    self.first_unflushed = time.monotonic()
                self.unflushed_rows += t.rows
                self.stats.applied_rows += t.rows
                self.stats.peak_memtable_bytes = max(self.stats.peak_memtable_bytes, self.memtable_bytes)
                applied += t.rows
            if state.gone is not None:
                self._segment_gone(state)
                return applied
            if state.sealed is not None and self.positions.get(segment, 0) >= state.sealed:
                self._finished.add(segment)  # sealed and applied: never read again
            if not state.more:
                return applied

    def _segment_gone(self, state: SegmentState) -> None:
        """A sealed segment's data vanished before this applier read all of it: fine if its
        transactions are committed (another applier flushed them and retention removed them),
        else reported like a torn tail."""
        committed = self._reload_table().manifest.wal_watermarks.get(watermark_key(self.shard, state.segment), 0)
        if committed >= (state.sealed or 0):
            self._finished.add(state.segment)  # this applier's copy is stale; its flush will lose the race
            return
        why = f"{state.gone}, but only {committed} of its {state.sealed} transactions are committed to the table"
        if self.stats.torn.get(state.segment) != why:
            log.warning("shard %d: WAL segment removed before it was applied: %s", self.shard, why)
            self.stats.torn[state.segment] = why

    def _apply(self, t: WalTxn) -> None:
        where = f"{self.store.describe(segment_prefix(self.shard, t.segment))} transaction {t.txn}"
        if self.memtable is None:
            self.buffered.append(t.data)
            self.buffered_bytes += len(t.data)
            return
        assert self.key_index is not None  # a memtable: the table has a key
        keys, values, deletes = _native.wal_split(t.data, self.schema, self.key_index, where)
        keys = pa.array(keys) if not isinstance(keys, pa.Array) else keys
        if self.key_type == "int64" and keys.type != pa.int64():
            keys = keys.cast(pa.int64())
        values = pc.if_else(pc.equal(deletes, 1), pa.scalar(None, pa.binary()), values)
        self.memtable.put_many(keys, values)

    def should_flush(self) -> bool:
        if not self.unflushed_rows:
            return False
        return self.full() or time.monotonic() - self.first_unflushed >= self.options.flush_seconds

    # -- flushing -------------------------------------------------------------------
    def flush(self) -> int | None:
        """Writes the memtable as one fragment and commits it with the watermarks; returns the
        version (None if there was nothing to flush or another applier won the race).

        A flush that fails leaves the memtable as it was (``poll`` applies no more while it is
        full). Its data file is removed when nothing was committed for sure; when the outcome
        is unknown (the manifest put failed) it stays for ``cleanup``, which removes it if no
        version references it.
        """
        with self._lock:
            self._check_running()
            moved = {s: n for s, n in self.positions.items() if n != self.starts.get(s, 0)}
            if not moved:
                return None
            base = self._reload().manifest  # follows a schema change before decoding, or stops
            self._check_running()
            where = f"WAL shard {self.shard} of {self.uri}"
            fragments: list = []
            try:
                changed_keys = None
                if self.memtable is not None:
                    keys, values = self.memtable.newest()
                    live = values.filter(values.is_valid())
                    batch = _native.wal_decode_values(live, self.schema, where)
                    changed_keys = keys
                    batches = batch.to_batches() if isinstance(batch, pa.Table) else [batch]
                else:
                    batches = [_native.wal_decode(b, self.schema, where)[0] for b in self.buffered]
                fragments = write_fragments(self.store, self.schema, iter(batches), self.table.write_options)
                deltas = self._older_versions(base, changed_keys) if changed_keys is not None and len(changed_keys) else {}
                maybe_die(FAULT_KILL_IN_FLUSH)
                txn = WalFlush(
                    base.version,
                    fragments,
                    deltas,
                    {watermark_key(self.shard, s): n for s, n in moved.items()},
                    {watermark_key(self.shard, s): self.starts.get(s, 0) for s in moved},
                    keys=changed_keys,
                )
            except Exception:
                self.stats.flush_failures += 1
                self._remove_files(fragments)  # nothing was committed
                raise
            watch = _PutWatch(self.store)
            try:
                self.table.commit_transaction(txn, store=cast(ObjectStore, watch))  # forwards the rest to the store
            except (TableReplaced, TableNotFound) as e:  # dropped: nothing committed; commit() removed the files
                self._dropped(e)
            except CommitConflict as e:  # nothing committed; commit() removed the files
                log.warning("shard %d: flush not committed (%s); reloading from the committed watermarks", self.shard, e)
                self.stats.conflicts += 1
                self._reset()
                return None
            except SchemaMismatch as e:  # the commit path refused the fragment: nothing committed
                self._remove_files(fragments)
                self._stop(
                    f"WAL shard {self.shard} of table {self.uri} stopped: its flush was refused ({e}). "
                    f"The applier read its WAL rows in ({show_schema(self.schema)}); the table has "
                    f"({show_schema(self._reload_table().schema)}). Nothing was lost: the unflushed rows stay in "
                    f"the WAL; start the applier again once the table's schema fits them"
                )
            except Exception as e:
                self.stats.flush_failures += 1
                if not watch.manifest_put:
                    self._remove_files(fragments)  # failed before any manifest put: nothing committed
                else:
                    log.warning(
                        "shard %d: flush failed with an unknown outcome (%s); its data files stay for cleanup", self.shard, e
                    )
                raise
            self.stats.flushes += 1
            self.stats.flushed_rows += self.unflushed_rows
            self.starts = dict(self.positions)
            self._clear_memtable()
            return self.table.version

    def _remove_files(self, fragments: list) -> None:
        if not fragments:
            return
        try:
            self.store.delete([f.path for f in fragments])
        except Exception as e:  # cleanup() removes them later (no version references them)
            log.warning(
                "shard %d: could not remove the %d data files of a failed flush (%s); cleanup will", self.shard, len(fragments), e
            )

    def drain(self) -> int | None:
        """Applies and flushes what is committed to the WAL now, flush_bytes at a time; returns
        the last version committed (None if nothing was). With nothing to flush it still reads the
        table, so a caller learns that it was dropped (``TableDropped``)."""
        version = None
        while True:
            with self._lock:
                self.poll()
                more = self.full()
                v = self.flush()
                if v is None and version is None:
                    self._reload_table()
            version = v if v is not None else version
            if not more or v is None:
                return version

    def _older_versions(self, base, keys: pa.Array) -> dict[int, np.ndarray]:
        """Offsets of the live rows in the table holding any of ``keys`` (merge-on-write)."""
        return Scanner(self.store, base, [], self._keys_filter(keys)).matching_offsets()

    def _keys_filter(self, keys: pa.Array) -> Filter:
        """``pk IN keys`` as a parsed filter an index on the key answers exactly (no string to parse)."""
        pk = self.pk
        assert pk is not None  # only a table with a key looks keys up
        col = self.schema.field(pk).type
        keys = keys.cast(col) if keys.type != col else keys
        conj = Conjunct(pk, tuple((k, True, k, True) for k in keys), f"{pk} IN (<{len(keys)} keys>)", False)
        return Filter(pc.field(pk).isin(keys), frozenset([pk]), conj.text, (conj,), pure=True)

    # -- reads ---------------------------------------------------------------------
    def get(self, pk: Any) -> dict | None:
        """The row with primary key ``pk``: unflushed rows first, then the table; None if absent or deleted."""
        return self.get_many([pk])[0]

    def get_many(self, pks: Sequence[Any]) -> list[dict | None]:
        self._check_running()
        if self.memtable is None:
            raise InvalidArgument(f"point lookups need a primary key; {self.uri} has none")
        col = self.schema.field(self.pk).type
        try:
            keys = pa.array(list(pks), type=col)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            raise InvalidArgument(f"keys must be values of {self.pk!r} ({col})") from None
        with self._lock:
            self._check_running()
            probe = keys.cast(pa.int64()) if self.key_type == "int64" else keys
            states, values = self.memtable.get_many(probe)
            states = states.to_numpy(zero_copy_only=False)
            out: list[dict | None] = [None] * len(keys)
            live = np.nonzero(states == 1)[0]
            if len(live):
                rows = _native.wal_decode_values(values.take(pa.array(live)), self.schema, "memtable").to_pylist()
                for i, row in zip(live.tolist(), rows):
                    out[i] = row
            missing = np.nonzero(states == 0)[0]
            if len(missing):
                table = self._reload()
                self._check_running()
                flt = self._keys_filter(keys.take(pa.array(missing)))
                found = Scanner(self.store, table.manifest, None, flt).to_table()
                by_key = {r[self.pk]: r for r in found.to_pylist()}
                for i in missing.tolist():
                    out[i] = by_key.get(keys[i].as_py())
            return out

    # -- housekeeping ------------------------------------------------------------------
    def remove_applied_segments(self, now: float | None = None) -> list[int]:
        """Deletes this shard's sealed segments whose every transaction is committed to the table,
        once their seal is older than the retention; returns the segments this call removed
        (the module's ``remove_applied_segments`` with the table's latest watermarks)."""
        with self._lock:
            committed = self._reload_table().manifest.wal_watermarks
            return remove_applied_segments(self.store, self.shard, committed, self.options.retention_seconds, now=now)

    def step(self) -> None:
        """One round of the applier loop: apply (up to the memtable's bounds), flush if due, expire
        old segments (at most once a minute). While flushes fail, the memtable stays full and
        nothing more is applied. A stopped shard raises ``ShardStopped``, or ``TableDropped``: an
        applier learns of a drop when it reads the table (each flush, the expiry round, a lookup
        of a key not in its memtable, ``drain``); until then it may read rows producers write."""
        self._check_running()
        self.poll()
        if self.should_flush():
            self.flush()
        now = time.monotonic()
        if now - self._last_expiry >= min(60.0, self.options.retention_seconds):
            self._last_expiry = now
            self.remove_applied_segments()

    def snapshot(self) -> ApplierStats:
        with self._lock:
            self.stats.memtable_rows = self.unflushed_rows
            self.stats.memtable_bytes = self.memtable_bytes
            self.stats.watermarks = {watermark_key(self.shard, s): n for s, n in self.starts.items()}
            self.stats.version = self.table.version
            return self.stats
