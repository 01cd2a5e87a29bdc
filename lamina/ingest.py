"""Applying a WAL shard to its table: memtable, point lookups, exactly-once flushes.

    WAL shard ──poll──► native split (key + row bytes) ──► native skiplist memtable (newest per key)
              ──flush─► native decode to Arrow ──► Parquet fragment
                        + deletions of older versions of the keys (merge-on-write)
                        + the shard's segment watermarks ──► one ``wal_flush`` commit

Exactly once: a WAL transaction is in the table iff the manifest's watermark of its
segment is past it, and the watermark moves in the same commit as the rows. A restarted
applier rebuilds its memtable from the watermarks; a second applier of the same shard
cannot commit the same transactions (the conflict matrix's ``watermarks`` rule).

``ShardApplier`` is plain Python (tests drive it directly); ``workers.ingest`` wraps it
in a Ray actor and ``jobs.ingest`` runs one per shard.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import zlib
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina import _native
from lamina.commit import commit
from lamina.datafile import write_fragments
from lamina.errors import CommitConflict, InvalidArgument
from lamina.faults import maybe_die
from lamina.filter import Conjunct, Filter
from lamina.index_query import select
from lamina.transaction import WalFlush
from lamina.wal import (
    CLAIM,
    SEALED,
    WalTxn,
    iter_shard,
    list_segments,
    parse_watermark_key,
    segment_prefix,
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
    if pa.types.is_unsigned_integer(t) and t.bit_width == 64:
        return "uint64"
    if pa.types.is_integer(t):
        return "int64"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t) \
            or pa.types.is_fixed_size_binary(t):
        return "bytes"
    raise InvalidArgument(f"a WAL primary key must be an integer, string or binary column, not {t}")


@dataclass
class ApplierStats:
    shard: int
    applied_rows: int = 0
    flushed_rows: int = 0
    flushes: int = 0
    memtable_rows: int = 0
    conflicts: int = 0
    torn: dict[int, str] = field(default_factory=dict)
    watermarks: dict[str, int] = field(default_factory=dict)
    version: int = 0


class ShardApplier:
    """Applies one shard of a table's WAL. Thread-safe (one lock); see the module docstring."""

    def __init__(self, uri: str, shard: int, storage_options: dict[str, Any] | None = None,
                 options: IngestOptions | None = None):
        import lamina

        self.uri, self.shard, self.options = uri, int(shard), options or IngestOptions()
        self.table = lamina.open_table(uri, storage_options=storage_options)
        self.store = self.table.store
        self.schema = self.table.schema
        pk = self.table.primary_key
        if len(pk) > 1:
            raise InvalidArgument(f"the WAL supports single-column primary keys; {uri} has {list(pk)}")
        self.pk = pk[0] if pk else None
        self.key_index = self.schema.names.index(self.pk) if self.pk else None
        self.key_type = memtable_key_type(self.schema.field(self.pk).type) if self.pk else None
        self.stats = ApplierStats(self.shard)
        self._lock = threading.RLock()
        self._last_expiry = time.monotonic()
        self._reset()

    # -- state ------------------------------------------------------------------
    def _reset(self) -> None:
        """Memtable emptied, positions back to the committed watermarks (restart, or a lost flush race)."""
        self.table.reload()
        self.starts: dict[int, int] = {}
        for key, n in self.table.manifest.wal_watermarks.items():
            shard, segment = parse_watermark_key(key)
            if shard == self.shard:
                self.starts[segment] = int(n)
        self.positions = dict(self.starts)
        self._finished: set[int] = set()
        self.memtable = _native.MemTable(self.key_type) if self.pk else None
        self.buffered: list[bytes] = []  # tables without a key: transactions in order
        self.unflushed_rows = 0
        self.first_unflushed = 0.0

    # -- applying -----------------------------------------------------------------
    def poll(self) -> int:
        """Applies every committed WAL transaction not applied yet; returns the rows applied."""
        with self._lock:
            applied = 0
            for txns, state in iter_shard(self.store, self.shard, self.positions, self._finished):
                if state.torn and self.stats.torn.get(state.segment) != state.torn:
                    log.warning("shard %d: torn WAL tail not applied: %s", self.shard, state.torn)
                    self.stats.torn[state.segment] = state.torn
                for t in txns:
                    self._apply(t)
                    self.positions[t.segment] = t.txn + 1
                    applied += t.rows
                if state.sealed is not None and self.positions.get(state.segment, 0) >= state.sealed:
                    self._finished.add(state.segment)  # sealed and applied: never read again
            if applied:
                if not self.unflushed_rows:
                    self.first_unflushed = time.monotonic()
                self.unflushed_rows += applied
                self.stats.applied_rows += applied
            return applied

    def _apply(self, t: WalTxn) -> None:
        where = f"{self.store.describe(segment_prefix(self.shard, t.segment))} transaction {t.txn}"
        if self.memtable is None:
            self.buffered.append(t.data)
            return
        keys, values, deletes = _native.wal_split(t.data, self.schema, self.key_index, where)
        keys = pa.array(keys) if not isinstance(keys, pa.Array) else keys
        if self.key_type == "int64" and keys.type != pa.int64():
            keys = keys.cast(pa.int64())
        values = pc.if_else(pc.equal(deletes, 1), pa.scalar(None, pa.binary()), values)
        self.memtable.put_many(keys, values)

    def should_flush(self) -> bool:
        if not self.unflushed_rows:
            return False
        o = self.options
        mem = self.memtable.arena_bytes if self.memtable is not None else sum(len(b) for b in self.buffered)
        return (self.unflushed_rows >= o.flush_rows or mem >= o.flush_bytes
                or time.monotonic() - self.first_unflushed >= o.flush_seconds)

    # -- flushing -------------------------------------------------------------------
    def flush(self) -> int | None:
        """Writes the memtable as one fragment and commits it with the watermarks; returns the
        version (None if there was nothing to flush or another applier won the race)."""
        with self._lock:
            moved = {s: n for s, n in self.positions.items() if n != self.starts.get(s, 0)}
            if not moved:
                return None
            where = f"WAL shard {self.shard} of {self.uri}"
            changed_keys = None
            if self.memtable is not None:
                keys, values = self.memtable.newest()
                live = values.filter(values.is_valid())
                batch = _native.wal_decode_values(live, self.schema, where)
                changed_keys = keys
            else:
                batches = [_native.wal_decode(b, self.schema, where)[0] for b in self.buffered]
                batch = pa.Table.from_batches(batches, schema=self.schema) if batches else self.schema.empty_table()
            base = self.table.reload().manifest
            fragments = write_fragments(self.store, self.schema, iter(batch.to_batches() if isinstance(batch, pa.Table) else [batch]),
                                        self.table.write_options)
            deltas = self._older_versions(base, changed_keys) if changed_keys is not None and len(changed_keys) else {}
            maybe_die(FAULT_KILL_IN_FLUSH)
            txn = WalFlush(base.version, fragments,
                           deltas, {watermark_key(self.shard, s): n for s, n in moved.items()},
                           {watermark_key(self.shard, s): self.starts.get(s, 0) for s in moved})
            try:
                self.table._manifest = commit(self.store, txn, base)
            except CommitConflict as e:
                log.warning("shard %d: flush not committed (%s); reloading from the committed watermarks", self.shard, e)
                self.stats.conflicts += 1
                self._reset()
                return None
            self.stats.flushes += 1
            self.stats.flushed_rows += self.unflushed_rows
            self.starts = dict(self.positions)
            self.memtable = _native.MemTable(self.key_type) if self.pk else None
            self.buffered = []
            self.unflushed_rows = 0
            return self.table.version

    def _older_versions(self, base, keys: pa.Array) -> dict[int, np.ndarray]:
        """Offsets of the live rows in the table holding any of ``keys`` (merge-on-write)."""
        sel = select(self.store, base, self._keys_filter(keys), [], with_offsets=True)
        return {f.id: t.column("_offset").to_numpy() for f, t in zip(base.fragments, sel.tables) if t.num_rows}

    def _keys_filter(self, keys: pa.Array) -> Filter:
        """``pk IN keys`` as a parsed filter an index on the key answers exactly (no string to parse)."""
        col = self.schema.field(self.pk).type
        keys = keys.cast(col) if keys.type != col else keys
        conj = Conjunct(self.pk, tuple((k, True, k, True) for k in keys), f"{self.pk} IN (<{len(keys)} keys>)", False)
        return Filter(pc.field(self.pk).isin(keys), frozenset([self.pk]), conj.text, (conj,), pure=True)

    # -- reads ---------------------------------------------------------------------
    def get(self, pk: Any) -> dict | None:
        """The row with primary key ``pk``: unflushed rows first, then the table; None if absent or deleted."""
        return self.get_many([pk])[0]

    def get_many(self, pks: Sequence[Any]) -> list[dict | None]:
        if self.memtable is None:
            raise InvalidArgument(f"point lookups need a primary key; {self.uri} has none")
        col = self.schema.field(self.pk).type
        try:
            keys = pa.array(list(pks), type=col)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            raise InvalidArgument(f"keys must be values of {self.pk!r} ({col})") from None
        with self._lock:
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
                table = self.table.reload()
                flt = self._keys_filter(keys.take(pa.array(missing)))
                found = pa.concat_tables(select(self.store, table.manifest, flt, None).tables or [self.schema.empty_table()])
                by_key = {r[self.pk]: r for r in found.to_pylist()}
                for i in missing.tolist():
                    out[i] = by_key.get(keys[i].as_py())
            return out

    # -- housekeeping ------------------------------------------------------------------
    def remove_applied_segments(self, now: float | None = None) -> list[int]:
        """Deletes sealed segments whose every transaction is committed, once older than the retention."""
        now = time.time() if now is None else now
        removed = []
        with self._lock:
            for segment in list_segments(self.store, self.shard):
                prefix = segment_prefix(self.shard, segment)
                objects = list(self.store.list(prefix))
                seal = next((o for o in objects if o.path == prefix + SEALED), None)
                if seal is None or now - seal.modified < self.options.retention_seconds:
                    continue
                sealed_at = int(json.loads(self.store.get(seal.path))["transactions"])
                if self.starts.get(segment, 0) < sealed_at:
                    continue
                # The seal goes last (a segment without one is never removed); the claim stays, so
                # the segment number is never claimed again while its watermark says "applied".
                self.store.delete([o.path for o in objects if o.path not in (seal.path, prefix + CLAIM)])
                self.store.delete([seal.path])
                removed.append(segment)
        return removed

    def step(self) -> None:
        """One round of the applier loop: apply, flush if due, expire old segments (at most once a minute)."""
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
            self.stats.watermarks = {watermark_key(self.shard, s): n for s, n in self.starts.items()}
            self.stats.version = self.table.version
            return self.stats
