"""Write-ahead log: producers write rows row-first, appliers (``lamina.ingest``) turn them into fragments.

Layout (docs/FORMAT.md §11)::

    _wal/<shard>/<segment:010d>/claim            the writer that owns the segment (put-if-absent)
    _wal/<shard>/<segment:010d>/segment.d        local: row data, appended, fsynced per commit
    _wal/<shard>/<segment:010d>/segment.i        local: one 32-byte entry per committed transaction
    _wal/<shard>/<segment:010d>/<txn:010d>.t     S3: one immutable object per committed transaction
    _wal/<shard>/<segment:010d>/sealed           the final transaction count, once the writer is done

A transaction entry is ``start u64 | end u64 | rows u32 | crc32 u32 | txn u64`` (little
endian): its rows are bytes ``[start, end)`` of the segment (of the object on S3) and the
crc32 covers them. The entry is written only after the rows are durable, so an entry that
is partial, points past the data or fails its crc is a torn tail: never applied, reported.
``segment_log`` picks the layout from the store (``LocalSegmentLog`` where objects are local
files and can be appended to, ``ObjectSegmentLog`` elsewhere); nothing else here depends on it.

One ``WalWriter`` owns one segment at a time (a fresh one per writer, never shared), so any
number of producers may write one shard; each transaction is durable when ``commit`` returns.
A writer never writes into a dropped table's location once it can tell (``WalWriter``: it checks
the table at each claim and seal, and its claim after each transaction).
"""

from __future__ import annotations

import abc
import base64
import contextlib
import io
import json
import logging
import os
import re
import struct
import threading
import uuid
import zlib
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, BinaryIO, NoReturn

import numpy as np
import pyarrow as pa

from lamina import _native, evolution
from lamina.errors import (
    CorruptFile,
    InvalidArgument,
    ObjectNotFound,
    SchemaMismatch,
    StorageError,
    TableDropped,
    WalError,
)
from lamina.manifest import WAL_DIR, Manifest, latest_version, try_load_manifest
from lamina.store import ObjectStore

log = logging.getLogger("lamina.wal")

ENTRY = struct.Struct("<QQIIQ")
assert ENTRY.size == 32
DATA_FILE, INDEX_FILE, CLAIM, SEALED = "segment.d", "segment.i", "claim", "sealed"


def shard_prefix(shard: int) -> str:
    return f"{WAL_DIR}{int(shard)}/"


def segment_prefix(shard: int, segment: int) -> str:
    return f"{shard_prefix(shard)}{segment:010d}/"


def watermark_key(shard: int, segment: int) -> str:
    """The manifest's ``wal_watermarks`` key of a segment: transactions applied and committed."""
    return f"{int(shard)}/{segment:010d}"


def parse_watermark_key(key: str) -> tuple[int, int]:
    shard, _, segment = key.partition("/")
    return int(shard), int(segment)


def txn_id(segment: int, txn: int) -> int:
    """A transaction's id within its shard: ``(segment << 32) | txn``; ids increase with time per writer."""
    return (segment << 32) | txn


def list_segments(store: ObjectStore, shard: int) -> list[int]:
    """Segment numbers of a shard, ascending."""
    segs = set()
    prefix = shard_prefix(shard)
    for o in store.list(prefix):
        head = o.path[len(prefix) :].split("/", 1)[0]
        if head.isdigit():
            segs.add(int(head))
    return sorted(segs)


def encode_schema(schema: pa.Schema) -> str:
    return base64.b64encode(schema.serialize().to_pybytes()).decode("ascii")


def _show(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def read_claim(store: ObjectStore, shard: int, segment: int) -> tuple[pa.Schema, str | None] | None:
    """(schema, primary key) the segment's writer encoded its rows in; None for a claim written
    before claims recorded it (its rows are in the table's schema of the time)."""
    path = segment_prefix(shard, segment) + CLAIM
    try:
        record = json.loads(store.get(path))
    except ObjectNotFound:
        return None
    except (ValueError, RecursionError):
        raise CorruptFile(f"WAL segment claim {store.describe(path)} is not JSON") from None
    if not isinstance(record, dict) or "schema" not in record:
        return None
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(record["schema"])))
        pk = record.get("primary_key") or []
        return schema, (str(pk[0]) if pk else None)
    except (ValueError, TypeError, KeyError, OSError, pa.ArrowException) as e:  # OSError: an undecodable schema message
        raise CorruptFile(f"WAL segment claim {store.describe(path)} has an unreadable schema ({e})") from None


def latest_of(store: ObjectStore, table_uuid: str) -> tuple[Manifest | None, str | None]:
    """The latest version of table ``table_uuid`` at ``store``, or (None, what happened to the table) if
    it was dropped: its latest version is a tombstone, the location holds no version any more, or
    it holds another table created there since (docs/FORMAT.md §9.1)."""
    for _ in range(3):
        latest = latest_version(store)
        if latest is None:
            return None, "the table was dropped (its location holds no version any more)"
        m = try_load_manifest(store, latest)
        if m is None:
            continue  # removed since it was listed (only a purge removes the latest version): look again
        if table_uuid and m.table_uuid != table_uuid:
            return None, f"the table was dropped and another created at its location since (table {m.table_uuid})"
        if m.dropped:
            return None, f"the table was dropped at version {m.version}"
        return m, None
    return None, "the table was dropped (its versions are being removed)"


def _check_row_schema(schema: pa.Schema, primary_key: Sequence[str]) -> None:
    try:
        _native.wal_check_schema(schema)
    except InvalidArgument as e:
        raise InvalidArgument(
            f"this table cannot be written through the WAL: {str(e).removeprefix('invalid argument: ')}"
        ) from None
    if len(primary_key) > 1:
        raise InvalidArgument(f"the WAL supports single-column primary keys; this table's key is {list(primary_key)}")


class WalWriter:
    """Writes rows to one shard of a table's WAL. Not thread-safe: one writer per thread.

    ``put``/``put_many``/``put_batch``/``delete`` buffer rows (checked against the table
    schema on the way in); ``commit`` makes them durable as one transaction and returns its id.
    Rows not committed are lost if the process dies, and only those.

    A dropped table (``lamina.drop_table``; or its location emptied, or another table created
    there) stops the writer with ``TableDropped``, and every later ``put``/``commit`` raises it
    again. The writer reads the table's latest version before and after each segment claim and
    before each seal, and its own claim after each transaction (one small GET: a purge removes
    claims, nothing else does). So after a drop a producer writes at most the transaction in flight
    when the purge removed its claim; what it writes after the purge's last listing it removes
    itself (a claim, a seal, its transaction's object or the segment's recreated files), and the
    purge removes what lands before (it lists the layout again until a listing is empty). Left
    behind can only be the writes of a producer that died between its write and its check
    (unreferenced, under ``_wal/``, which cleanup does not sweep: a later ``lamina.drop_table`` of
    a table created there removes them). Not covered: a producer idle across the whole drop and the
    creation of a new table at the URI, whose own producer claimed the same segment number, writes
    its next transaction into that segment before its check stops it (the claim does not name the
    table; locally the append can cut the other writer's rows). Stop producers before a drop.
    """

    def __init__(
        self,
        table_uri: str,
        shard: int,
        *,
        storage_options: dict[str, Any] | None = None,
        max_segment_rows: int = 1_000_000,
        max_segment_bytes: int = 256 << 20,
    ):
        import lamina

        if not isinstance(shard, int) or isinstance(shard, bool) or shard < 0:
            raise InvalidArgument(f"shard must be a non-negative integer, got {shard!r}")
        if max_segment_rows < 1 or max_segment_bytes < 1:
            raise InvalidArgument("max_segment_rows and max_segment_bytes must be positive")
        table = lamina.open_table(table_uri, storage_options=storage_options)
        self.table_uuid = table.manifest.table_uuid
        self.schema = table.schema
        self.primary_key = table.primary_key
        _check_row_schema(self.schema, self.primary_key)
        self.store: ObjectStore = table.store
        self.shard = shard
        self.max_segment_rows, self.max_segment_bytes = max_segment_rows, max_segment_bytes
        self._key_index = [self.schema.names.index(k) for k in self.primary_key]
        self._pending: list[pa.RecordBatch] = []
        self._pending_deletes: list[pa.RecordBatch] = []
        self._segment: int | None = None
        self._txn = 0
        self._offset = 0
        self._segment_rows = 0
        self._closed = False
        self._claimed = b""  # this writer's claim of its segment, as stored
        #: Why this writer stopped for good: the table was dropped.
        self._dropped: TableDropped | None = None
        self._lock = threading.Lock()

    # -- buffering ------------------------------------------------------------
    def put(self, row: dict) -> None:
        """Buffers one row (a dict of column -> value; missing columns are null)."""
        self.put_many([row])

    def put_many(self, rows: Iterable[dict]) -> None:
        rows = list(rows)
        for i, r in enumerate(rows):
            if not isinstance(r, dict):
                raise InvalidArgument(f"row {i} is a {type(r).__name__}; rows are dicts of column -> value")
            unknown = [k for k in r if k not in self.schema.names]
            if unknown:
                raise SchemaMismatch(f"row {i} has unknown column(s) {unknown}; the table has {', '.join(self.schema.names)}")
        if not rows:
            return
        try:
            batch = pa.RecordBatch.from_pylist(rows, schema=self.schema)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError) as e:
            raise SchemaMismatch(
                f"rows do not match the table schema ({e}); columns: " + ", ".join(f"{f.name}: {f.type}" for f in self.schema)
            ) from None
        self.put_batch(batch)

    def put_batch(self, batch: pa.RecordBatch | pa.Table) -> None:
        """Buffers an Arrow batch (or table) in the table's schema."""
        self._check_open()
        if isinstance(batch, pa.Table):
            for b in batch.to_batches():
                self.put_batch(b)
            return
        if not isinstance(batch, pa.RecordBatch):
            raise InvalidArgument(f"put_batch takes a pyarrow RecordBatch or Table, not {type(batch).__name__}")
        if batch.schema.names != self.schema.names:
            raise SchemaMismatch(f"batch columns {batch.schema.names} differ from the table's {self.schema.names}")
        try:
            batch = batch.cast(self.schema) if not batch.schema.equals(self.schema) else batch
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError) as e:
            raise SchemaMismatch(f"batch cannot be cast to the table schema: {e}") from None
        for name in self.primary_key:
            if batch.column(name).null_count:
                raise SchemaMismatch(f"primary key column {name!r} has nulls; every row needs a key")
        for f in self.schema:
            if not f.nullable and batch.column(f.name).null_count:
                raise SchemaMismatch(f"column {f.name!r} is not nullable but has {batch.column(f.name).null_count} nulls")
        if batch.num_rows:
            self._pending.append(batch)

    def delete(self, pk: Any) -> None:
        """Buffers the deletion of the row with primary key ``pk`` (primary-key tables only)."""
        self._check_open()
        if not self.primary_key:
            raise InvalidArgument("delete(pk) needs a table with a primary key; create it with primary_key=...")
        name = self.primary_key[0]
        try:
            keys = pa.array([pk], type=self.schema.field(name).type)
        except (pa.ArrowInvalid, pa.ArrowTypeError, TypeError, ValueError, OverflowError):
            raise SchemaMismatch(f"key {pk!r} is not a valid {self.schema.field(name).type} for column {name!r}") from None
        if keys.null_count:
            raise SchemaMismatch("cannot delete a null key")
        cols = [keys if f.name == name else pa.nulls(1, f.type) for f in self.schema]
        self._pending_deletes.append(pa.RecordBatch.from_arrays(cols, schema=self.schema.with_metadata(None)))
        self._pending.append(None)  # keeps the order of puts and deletes

    @property
    def pending_rows(self) -> int:
        return sum(b.num_rows for b in self._pending if b is not None) + len(self._pending_deletes)

    # -- committing -------------------------------------------------------------
    def commit(self) -> int | None:
        """Makes every buffered row durable as one transaction; returns its id (None if nothing was buffered)."""
        self._check_open()
        if not self._pending:
            return None
        chunks = []
        rows = 0
        deletes = iter(self._pending_deletes)
        for b in self._pending:
            if b is None:
                d = next(deletes)
                data, _ = _native.wal_encode(d, pa.array([True]), self._key_index)
                rows += 1
            else:
                data, _ = _native.wal_encode(b, None, self._key_index)
                rows += b.num_rows
            chunks.append(data)
        data = b"".join(chunks)
        with self._lock:
            if self._segment is None or self._segment_rows >= self.max_segment_rows or self._offset >= self.max_segment_bytes:
                self._roll()
            tid = self._append(data, rows)
        self._pending.clear()
        self._pending_deletes.clear()
        return tid

    def _claim(self) -> int:
        self._latest()
        existing = list_segments(self.store, self.shard)
        nxt = (existing[-1] + 1) if existing else 0
        # The claim records the schema the writer encodes rows in, so an applier reads each
        # segment in the schema it was written in (or refuses it), whatever the table has now.
        me = json.dumps(
            {
                "writer": uuid.uuid4().hex,
                "pid": os.getpid(),
                "schema": encode_schema(self.schema),
                "primary_key": list(self.primary_key),
            }
        ).encode()
        while not self.store.put_if_absent(segment_prefix(self.shard, nxt) + CLAIM, me):
            nxt += 1
        # A purge whose last listing ran before this claim landed cannot see it: look once more.
        _, gone = latest_of(self.store, self.table_uuid)
        if gone is not None:
            self.store.delete([segment_prefix(self.shard, nxt) + CLAIM])
            self._stop(gone)
        self._claimed = me
        return nxt

    def _roll(self) -> None:
        if self._segment is not None:
            latest = self._seal()  # sealed first: a writer stopped below leaves no segment retention cannot remove
            self._check_table_schema(latest)
        self._segment = self._claim()
        self._txn = self._offset = self._segment_rows = 0

    def _log(self) -> SegmentLog:
        assert self._segment is not None  # claimed by _roll before anything is written
        return segment_log(self.store, self.shard, self._segment)

    def _append(self, data: bytes, rows: int) -> int:
        self._log().append(self._txn, self._offset, data, rows)
        if not self._still_claimed():  # a purge removed the segment: nothing of this transaction may stay
            self._stop(self._why_unclaimed(), remove=self._log().written_paths(self._txn))
        self._offset += len(data)
        assert self._segment is not None  # _log() has checked it
        tid = txn_id(self._segment, self._txn)
        self._txn += 1
        self._segment_rows += rows
        return tid

    def _check_table_schema(self, latest: Manifest) -> None:
        """At each segment roll: a writer whose table changed schema since it opened stops writing."""
        schema = latest.schema
        if not evolution.same(schema, self.schema):  # a name dropped and added again is another column
            raise SchemaMismatch(
                f"the schema of table {self.store.uri} changed since this WAL writer for shard {self.shard} opened "
                f"(it writes ({_show(self.schema)}), the table now has ({_show(schema)})); the rows committed so far "
                f"are in the WAL. Open a new WalWriter and write the uncommitted rows in the new schema"
            )

    def _seal(self) -> Manifest:
        """Seals the segment, unless the table was dropped; the table's latest version, read before."""
        latest = self._latest()
        self._log().seal(self._txn)
        if not self._still_claimed():
            self._stop(self._why_unclaimed(), remove=[self._log().prefix + SEALED])
        return latest

    # -- a dropped table ---------------------------------------------------------
    def _latest(self) -> Manifest:
        """The table's latest version; stops the writer if the table was dropped."""
        latest, gone = latest_of(self.store, self.table_uuid)
        if gone is not None:
            self._stop(gone)
        assert latest is not None  # latest_of gives the version or what happened to the table
        return latest

    def _still_claimed(self) -> bool:
        """Whether this writer's claim of its segment is still there (only a purge removes claims)."""
        try:
            return self.store.get(self._log().prefix + CLAIM) == self._claimed
        except ObjectNotFound:
            return False

    def _why_unclaimed(self) -> str:
        _, gone = latest_of(self.store, self.table_uuid)
        return gone or f"the table was dropped (the claim of WAL segment {self._segment} is gone)"

    def _stop(self, why: str, remove: Sequence[str] = ()) -> NoReturn:
        """Stops this writer for good: ``why`` the table is gone. Removes ``remove`` (what it has just
        written, into a location the purge may have listed for the last time already)."""
        if remove and self.store.exists(self._log().prefix + CLAIM):
            remove = ()  # the segment number was claimed again (a table created here since): not ours to remove
        self.store.delete(remove)
        self._dropped = TableDropped(
            f"WAL writer for shard {self.shard} of table {self.store.uri} stopped: {why}. The rows of this commit, "
            f"and any buffered, were not written; those committed before went to the dropped table's WAL and are gone "
            f"with it. Stop this producer, or open a WalWriter on the table created at this URI since"
        )
        log.error("%s", self._dropped)
        raise self._dropped

    def close(self) -> None:
        """Seals this writer's segment (uncommitted rows are dropped: commit first). Writes nothing
        into a dropped table's location."""
        if self._closed:
            return
        if self._pending:
            log.warning("WalWriter for shard %d closed with %d uncommitted rows; they are dropped", self.shard, self.pending_rows)
        with self._lock:
            if self._segment is not None and self._dropped is None:
                try:
                    self._seal()
                except TableDropped:
                    pass  # logged; nothing left to seal
        self._closed = True

    def __enter__(self) -> WalWriter:
        return self

    def __exit__(self, exc_type, *_: Any) -> None:
        try:
            if exc_type is None:
                self.commit()
        finally:
            self.close()

    def _check_open(self) -> None:
        if self._closed:
            raise InvalidArgument("this WalWriter is closed")
        if self._dropped is not None:
            raise self._dropped


@dataclass
class WalTxn:
    shard: int
    segment: int
    txn: int
    rows: int
    data: bytes


@dataclass
class SegmentState:
    segment: int
    committed: int  # transactions readable (``start`` + those returned)
    sealed: int | None  # final count once sealed
    torn: str | None  # why the tail is unreadable, if it is
    more: bool = False  # stopped at ``max_bytes``: transactions after ``committed`` were not read
    gone: str | None = None  # a sealed segment whose data vanished while or before it was read (retention)


def read_sealed(store: ObjectStore, shard: int, segment: int) -> int | None:
    """A segment's final transaction count, or None if it is not sealed (or its seal was removed)."""
    path = segment_prefix(shard, segment) + SEALED
    try:
        raw = store.get(path)
    except ObjectNotFound:
        return None
    try:
        return int(json.loads(raw)["transactions"])
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        raise CorruptFile(f"WAL seal marker {store.describe(path)} is unreadable") from None


def read_segment(
    store: ObjectStore, shard: int, segment: int, start: int, max_bytes: int | None = None
) -> tuple[list[WalTxn], SegmentState]:
    """Committed transactions ``start…`` of a segment, and its state (see ``SegmentLog.read``)."""
    return segment_log(store, shard, segment).read(start, max_bytes)


def segment_log(store: ObjectStore, shard: int, segment: int) -> SegmentLog:
    """The segment's log in the layout its store takes (FORMAT §11.1): appended files where
    objects are local files, one object per transaction elsewhere."""
    return (LocalSegmentLog if store.is_local else ObjectSegmentLog)(store, shard, segment)


class SegmentLog(abc.ABC):
    """One WAL segment's transactions on a store: how one is made durable, how they are read back.

    A plain value (store, shard, segment), made per call: the writer keeps the position.
    """

    def __init__(self, store: ObjectStore, shard: int, segment: int):
        self.store, self.shard, self.segment = store, shard, segment
        self.prefix = segment_prefix(shard, segment)

    @abc.abstractmethod
    def append(self, txn: int, offset: int, data: bytes, rows: int) -> None:
        """Makes transaction ``txn`` durable: ``rows`` rows encoded in ``data``, which starts at
        byte ``offset`` of the segment's rows. Raises if it may not have landed: calling again
        with the same arguments is then safe."""

    @abc.abstractmethod
    def written_paths(self, txn: int) -> list[str]:
        """The objects ``append`` of transaction ``txn`` writes (what a writer removes when it learns
        it wrote into a dropped table's location)."""

    def seal(self, transactions: int) -> None:
        """Records that the writer is done: the segment holds ``transactions`` transactions."""
        self.store.put(self.prefix + SEALED, json.dumps({"transactions": transactions}).encode())

    def read(self, start: int, max_bytes: int | None = None) -> tuple[list[WalTxn], SegmentState]:
        """Committed transactions ``start…``, and the segment's state; a torn tail is reported, not applied.

        With ``max_bytes``, stops after the transaction that reaches that many bytes of row data
        (at least one is read) and says so (``state.more``). A sealed segment whose files are
        missing was removed by retention (perhaps by another applier while this one read it):
        that is ``state.gone``, not a torn tail; whether its transactions were committed is for
        the caller to check against the watermarks.
        """
        sealed = read_sealed(self.store, self.shard, self.segment)
        out, torn, gone, more = self._scan(start, sealed, max_bytes)
        committed = start + len(out)
        if gone is not None:
            torn = None  # retention's work, not a torn tail: the caller checks the watermarks
        elif sealed is not None and torn is None and not more and committed < sealed and start <= sealed:
            torn = (
                f"segment {self.store.describe(self.prefix)} is sealed at {sealed} transactions but only {committed} are readable"
            )
        return out, SegmentState(self.segment, committed, sealed, torn, more, gone)

    @abc.abstractmethod
    def _scan(self, start: int, sealed: int | None, max_bytes: int | None) -> tuple[list[WalTxn], str | None, str | None, bool]:
        """(transactions from ``start``, torn, gone, more), as ``read`` describes them."""

    def _txn(self, i: int, rows: int, data: bytes) -> WalTxn:
        return WalTxn(self.shard, self.segment, i, rows, data)


def _full(max_bytes: int | None, taken: int, i: int, last: int) -> bool:
    """Whether ``max_bytes`` is reached after transaction ``i`` of ``last`` (and more remain)."""
    return max_bytes is not None and taken >= max_bytes and i + 1 < last


class LocalSegmentLog(SegmentLog):
    """Rows appended to ``segment.d``, entries to ``segment.i``: group commit, two fsyncs a transaction."""

    def append(self, txn: int, offset: int, data: bytes, rows: int) -> None:
        # The rows, fsynced, then the entry that makes them visible, fsynced.
        self.store.append(self.prefix + DATA_FILE, data, at=offset)
        self.store.append(self.prefix + INDEX_FILE, ENTRY.pack(offset, offset + len(data), rows, zlib.crc32(data), txn))

    def written_paths(self, txn: int) -> list[str]:
        return [self.prefix + DATA_FILE, self.prefix + INDEX_FILE]  # recreated by the append if a purge removed them

    def _scan(self, start: int, sealed: int | None, max_bytes: int | None) -> tuple[list[WalTxn], str | None, str | None, bool]:
        store, index_path, data_path = self.store, self.prefix + INDEX_FILE, self.prefix + DATA_FILE
        out: list[WalTxn] = []
        torn = gone = None
        more = False
        try:
            index = store.get(index_path)
        except ObjectNotFound:
            index = b""
            if sealed is not None and sealed > start:
                gone = f"{store.describe(index_path)} is gone"
        whole = len(index) // ENTRY.size
        if len(index) % ENTRY.size:
            torn = f"{len(index) % ENTRY.size} bytes of a partial transaction entry at the end of {store.describe(index_path)}"
        if whole <= start:
            return out, torn, gone, more
        with contextlib.ExitStack() as files:
            try:
                staged = files.enter_context(store.staged_input(data_path))
                f: BinaryIO = files.enter_context(open(staged.path, "rb"))
            except (ObjectNotFound, FileNotFoundError):
                f = io.BytesIO()
                if sealed is not None:
                    gone = f"{store.describe(data_path)} is gone"
            size = f.seek(0, io.SEEK_END)
            taken = 0
            for i in range(start, whole):
                if gone:
                    break
                s, e, rows, crc, txn = ENTRY.unpack_from(index, i * ENTRY.size)
                if txn != i or e > size or s > e:
                    torn = f"transaction {i} of {store.describe(data_path)} points past the data ({e} > {size} bytes)"
                    break
                f.seek(s)
                data = f.read(e - s)
                if zlib.crc32(data) != crc:
                    torn = f"transaction {i} of {store.describe(data_path)} fails its checksum"
                    break
                out.append(self._txn(i, rows, data))
                taken += len(data)
                if _full(max_bytes, taken, i, whole):
                    more = True
                    break
        return out, torn, gone, more


_TXN_NAME = re.compile(r"[0-9]{10}\.t")


class ObjectSegmentLog(SegmentLog):
    """One immutable object per transaction, ``<txn:010d>.t``: its rows, then its entry (start 0)."""

    def append(self, txn: int, offset: int, data: bytes, rows: int) -> None:
        """Writes the transaction's object with put-if-absent. A put whose outcome is unknown (the
        request may have landed, its answer lost) and is then retried by a later ``commit()`` meets
        its own object: the segment is claimed by this writer alone, so identical bytes there are
        this transaction."""
        path = f"{self.prefix}{txn:010d}.t"
        obj = data + ENTRY.pack(0, len(data), rows, zlib.crc32(data), txn)
        try:
            if self.store.put_if_absent(path, obj):
                return
        except StorageError:
            if not self._is_mine(path, obj):
                raise  # nothing landed: commit() can be called again
            return
        if not self._is_mine(path, obj):
            raise WalError(
                f"WAL transaction {self.store.describe(path)} holds other bytes: another writer uses segment {self.segment}"
            )

    def written_paths(self, txn: int) -> list[str]:
        return [f"{self.prefix}{txn:010d}.t"]

    def _is_mine(self, path: str, obj: bytes) -> bool:
        try:
            return self.store.get(path) == obj
        except ObjectNotFound:
            return False

    def _scan(self, start: int, sealed: int | None, max_bytes: int | None) -> tuple[list[WalTxn], str | None, str | None, bool]:
        store, seg = self.store, self.prefix
        out: list[WalTxn] = []
        torn = gone = None
        more = False
        taken = 0
        # Only `<txn:010d>.t` objects are transactions: a stray key is not read (nor a reason to fail).
        names = sorted(o.path for o in store.list(seg) if _TXN_NAME.fullmatch(o.path[len(seg) :]))
        for i, name in enumerate(names):
            if int(name[len(seg) : -2]) != i:
                if sealed is not None:
                    gone = f"WAL transaction objects of {store.describe(seg)} skip number {i}"
                else:
                    torn = f"WAL transaction objects of {store.describe(seg)} skip number {i}"
                break
            if i < start:
                continue
            try:
                obj = store.get(name)
            except ObjectNotFound:
                if sealed is None:
                    torn = f"{store.describe(name)} was listed but is missing"
                else:
                    gone = f"{store.describe(name)} is gone"
                break
            if len(obj) < ENTRY.size:
                torn = f"{store.describe(name)} is truncated"
                break
            s, e, rows, crc, txn = ENTRY.unpack_from(obj, len(obj) - ENTRY.size)
            data = obj[: -ENTRY.size]
            if txn != i or s != 0 or e != len(data) or zlib.crc32(data) != crc:
                torn = f"{store.describe(name)} fails its checksum"
                break
            out.append(self._txn(i, rows, data))
            taken += len(data)
            if _full(max_bytes, taken, i, len(names)):
                more = True
                break
        if sealed is not None and torn is None and gone is None and not more and start + len(out) < sealed:
            gone = f"{store.describe(seg)} holds {len(names)} of its {sealed} transaction objects"
        return out, torn, gone, more


def decode_rows(data: bytes, schema: pa.Schema, where: str) -> tuple[pa.RecordBatch, np.ndarray]:
    """Rows of a transaction as an Arrow batch, and which rows are deletes."""
    batch, deletes = _native.wal_decode(data, schema, where)
    return batch, deletes.to_numpy(zero_copy_only=False).astype(bool)


def iter_shard(
    store: ObjectStore, shard: int, positions: dict[int, int], skip: set[int] | frozenset[int] = frozenset()
) -> Iterator[tuple[list[WalTxn], SegmentState]]:
    """For each segment of ``shard`` not in ``skip``: its transactions after ``positions[segment]`` (default 0)."""
    for segment in list_segments(store, shard):
        if segment not in skip:
            yield read_segment(store, shard, segment, positions.get(segment, 0))
