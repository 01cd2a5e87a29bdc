"""Streaming reads of one version: ``Table.scanner(...)`` → ``Scanner``.

::

    Table.scanner(columns, filter, limit, ...)   a pinned manifest and the options; no I/O yet
        │
        ▼  lamina.index.query.plan_reads: per fragment, in table order, what to do with it
    skip   (zone maps, a manifest segment's zone maps, or no index candidate rule it out: unopened)
    take   (few index candidates: the rows are fetched; consecutive fragments in one native call)
    scan   (its row groups, pruned by Parquet statistics, a unit of <= batch_size rows or one row group)
        │
        ▼  units read on the I/O pool (``lamina.io_pool``), at most ``readahead`` in flight, in order
    batches of <= batch_size rows: deletions applied, the filter applied, projected; reading stops
    once ``offset + limit`` rows are out (without a filter, the manifest's live-row counts say which
    fragments hold them, so no other file is opened)

Memory: at most ``readahead`` units are decoded at once, each the rows of at most
``max(batch_size, one row group)`` rows of the projected columns (row groups are bounded by the
table's ``row_group_rows`` / ``row_group_bytes``), plus the batch the consumer holds. It does not
grow with the table. On top of the decoded rows, Arrow's allocator keeps freed memory for reuse on
each I/O thread: streaming every column of the 2,000,000-row table of ``benchmarks.engines`` peaked
at +130 MiB of RSS against 34 MiB of decoded pieces (``to_arrow``: +215 MiB; ``readahead=1``: +40 MiB).
A streaming consumer (``to_reader``, ``to_batches``, the Arrow stream) starts
with one unit in flight and doubles that after each unit up to ``readahead``, so a query that stops
early (``LIMIT``) opens as few files as it can; ``to_table`` and ``count_rows`` start at ``readahead``.

Every read is of this version: files a later compaction replaces stay readable for the table's
retention (cleanup keeps them), so a scanner opened on a version keeps returning that version.
"""

from __future__ import annotations

import collections
import dataclasses
import threading
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.datafile import ROWADDR, output_schema, read_fragment, read_rows_many
from lamina.errors import InvalidArgument
from lamina.filter import Filter, parse_filter
from lamina.index.query import Read, ReadCounts, explain, plan_reads
from lamina.io_pool import io_pool, map_fragments, pool_size
from lamina.manifest import ADDRESS_SHIFT, Fragment, Manifest
from lamina.schema import check_column_names
from lamina.store import ObjectStore

#: Rows per batch a scanner yields unless told otherwise.
DEFAULT_BATCH_SIZE = 65_536


@dataclass(frozen=True)
class _Scan:
    """Scan ``groups`` of ``fragment`` (None: all of them); ``drop``: rows of ``offset`` still to skip
    when it starts (the fragments before it were skipped by their live-row counts; no filter only);
    ``final``: every live row matches the filter (its zone maps show it), which is then not applied."""

    fragment: Fragment
    groups: tuple[int, ...] | None
    drop: int = 0
    final: bool = False


@dataclass(frozen=True)
class _Take:
    """Fetch the rows of index candidates of consecutive fragments, in one call."""

    reads: tuple[Read, ...]


_Unit = _Scan | _Take


@dataclass(frozen=True)
class ScanStats:
    """What a finished (or stopped) scan did."""

    fragments_scanned: int
    fragments_indexed: int
    fragments_pruned: int
    units_read: int
    rows: int


class Scanner:
    """A streaming read of one version of a table (``Table.scanner``): projection, filter, limit and
    offset, deletions applied. Every method starts a new read; a scanner may be read many times."""

    def __init__(
        self,
        store: ObjectStore,
        manifest: Manifest,
        columns: Sequence[str] | None = None,
        filter: str | pc.Expression | Filter | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        limit: int | None = None,
        offset: int | None = None,
        with_row_address: bool = False,
        with_row_id: bool = False,
        fragments: Iterable[Any] | None = None,
        use_index: bool = True,
        readahead: int | None = None,
    ):
        schema = manifest.schema
        self._store = store
        self._pinned = manifest
        self._columns = check_column_names(schema, columns, store.uri)
        self._filter = parse_filter(filter, schema) if filter is not None else None
        self._batch_size = _positive("batch_size", batch_size)
        self._limit = None if limit is None else _at_least("limit", limit, 0)
        self._offset = 0 if offset is None else _at_least("offset", offset, 0)
        if with_row_id and not manifest.stable_row_ids:
            raise InvalidArgument(f"table {store.uri} does not keep stable row ids; create it with stable_row_ids=True")
        self._with_row_address = bool(with_row_address)
        self._with_row_id = bool(with_row_id)
        self._only = None if fragments is None else _fragment_ids(fragments, manifest, store.uri)
        self._use_index = bool(use_index)
        self._readahead = pool_size(1 << 30) if readahead is None else _positive("readahead", readahead)
        self._stats: ScanStats | None = None

    def __repr__(self) -> str:
        return (
            f"Scanner({self._store.uri!r}, version={self._pinned.version}, columns={self._columns}, "
            f"filter={self._filter.text if self._filter else None!r}, limit={self._limit}, offset={self._offset})"
        )

    # -- what it returns -------------------------------------------------------------------------
    @property
    def schema(self) -> pa.Schema:
        """The schema of the batches: the columns asked for (all by default), then ``_rowaddr`` / ``_rowid``."""
        return output_schema(self._pinned.schema, self._columns, self._with_row_address, self._with_row_id)

    @property
    def version(self) -> int:
        return self._pinned.version

    @property
    def stats(self) -> ScanStats | None:
        """What the last read through this scanner did (None before one)."""
        return self._stats

    def to_batches(self) -> Iterator[pa.RecordBatch]:
        """The rows as record batches of at most ``batch_size`` rows, read as they are consumed."""
        for table in self._tables(self._columns, streaming=True):
            yield from table.to_batches(max_chunksize=self._batch_size)

    def to_reader(self) -> pa.RecordBatchReader:
        """A ``pyarrow.RecordBatchReader`` over ``to_batches()``."""
        return pa.RecordBatchReader.from_batches(self.schema, self.to_batches())

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream interface: ``pa.table(scanner)``, ``pl.from_arrow``, DuckDB read it."""
        return self.to_reader().__arrow_c_stream__(requested_schema)

    def to_table(self) -> pa.Table:
        """Every row at once (``readahead`` units read side by side)."""
        tables = list(self._tables(self._columns, streaming=False))
        return _concat(tables) if tables else self.schema.empty_table()

    def matching_offsets(self) -> dict[int, np.ndarray]:
        """Fragment id -> the physical offsets (sorted) of its rows this scan returns, for the fragments
        that have some: what a delete marks. Reads no column but the filter's."""
        addresses = Scanner(
            self._store,
            self._pinned,
            [],
            self._filter,
            limit=self._limit,
            offset=self._offset,
            with_row_address=True,
            fragments=self._only,
            use_index=self._use_index,
            readahead=self._readahead,
        ).to_table()
        addrs = addresses.column(ROWADDR).to_numpy().astype(np.uint64, copy=False)
        fids = addrs >> np.uint64(ADDRESS_SHIFT)
        cuts = np.flatnonzero(fids[1:] != fids[:-1]) + 1  # addresses come in table order: fragment by fragment
        return {
            int(part[0] >> np.uint64(ADDRESS_SHIFT)): (part & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            for part in np.split(addrs, cuts)
            if len(part)
        }

    def count_rows(self) -> int:
        """How many rows a read returns; without a filter from the manifest alone (no file opened)."""
        only = self._only
        if self._filter is None and only is None:
            live = self._pinned.rows
        elif self._filter is None and only is not None:
            live = sum(f.live_rows for f in self._pinned.fragments if f.id in only)
        else:
            live = sum(t.num_rows for t in self._tables([], streaming=False))
            return live  # offset and limit applied while reading
        live = max(0, live - self._offset)
        return live if self._limit is None else min(live, self._limit)

    def explain(self) -> str:
        """How this scan would run: the index and pruning decisions for the filter, then the scan's shape."""
        m = self._pinned
        lines = []
        if self._filter is not None:
            lines.append(explain(m, self._filter, self._store.uri, self._store, map_fragments))
            if not self._use_index:
                lines.append("use_index=False: no index is used; every fragment the zone maps keep is scanned")
        else:
            lines.append(f"table: {self._store.uri} version {m.version}, {len(m.fragments)} fragments, {m.rows} rows")
            lines.append("no filter: every live row")
        cols = ", ".join(self.schema.names) or "(none: counting)"
        lines.append(
            f"scan: columns {cols}; batches of <= {self._batch_size} rows, <= {self._readahead} units in flight"
            + (f"; only fragments {sorted(self._only)[:20]}" if self._only is not None else "")
            + (f"; offset {self._offset}" if self._offset else "")
            + (f"; stops after {self._limit} rows" if self._limit is not None else "")
        )
        return "\n".join(lines)

    # -- reading ---------------------------------------------------------------------------------
    def _units(self, counts: ReadCounts, streaming: bool) -> Iterator[_Unit]:
        """What to read, in table order. Without a filter, fragments wholly before ``offset`` or after
        ``offset + limit`` by their live-row counts are left out. ``streaming``: a large fragment is read
        a few row groups at a time (else whole: one request, checked against its checksum)."""
        skip = self._offset if self._filter is None else 0
        need = None if self._limit is None or self._filter is not None else self._offset + self._limit
        seen = 0  # live rows of the fragments before this one (no filter only)
        takes: list[Read] = []
        taken_rows = 0
        for read in plan_reads(
            self._store, self._pinned, self._filter, use_index=self._use_index, only=self._only, counts=counts
        ):
            frag = read.fragment
            if read.offsets is not None:
                takes.append(read)
                taken_rows += len(read.offsets)
                if taken_rows >= self._batch_size:
                    yield _Take(tuple(takes))
                    takes, taken_rows = [], 0
                continue
            if takes:
                yield _Take(tuple(takes))
                takes, taken_rows = [], 0
            if need is not None and seen >= need:
                return
            before, seen = seen, seen + frag.live_rows
            if seen <= skip or frag.live_rows == 0:
                continue
            drop = max(0, skip - before)
            for i, piece in enumerate(self._pieces(frag) if streaming else [_Scan(frag, None)]):
                yield dataclasses.replace(piece, drop=drop if i == 0 else 0, final=read.final)
        if takes:
            yield _Take(tuple(takes))

    def _pieces(self, frag: Fragment) -> Iterator[_Scan]:
        """``frag``'s row groups in runs of at most ``batch_size`` rows (a larger row group alone)."""
        groups = frag.row_groups
        if len(groups) <= 1 or frag.rows <= self._batch_size:
            yield _Scan(frag, None)
            return
        run: list[int] = []
        rows = 0
        for i, g in enumerate(groups):
            if run and rows + g.rows > self._batch_size:
                yield _Scan(frag, tuple(run))
                run, rows = [], 0
            run.append(i)
            rows += g.rows
        yield _Scan(frag, tuple(run))

    def _read(self, unit: _Unit, columns: list[str] | None) -> pa.Table:
        store, schema, flt = self._store, self._pinned.schema, self._filter
        kwargs = dict(with_row_address=self._with_row_address, with_row_id=self._with_row_id)
        if isinstance(unit, _Take):
            items = [(r.fragment, r.offsets, r.final) for r in unit.reads]
            return _concat(read_rows_many(store, schema, items, columns, flt, **kwargs))  # type: ignore[arg-type]
        flt = None if unit.final else flt
        return read_fragment(store, unit.fragment, schema, columns, flt, row_groups=unit.groups, **kwargs)

    def _tables(self, columns: list[str] | None, *, streaming: bool) -> Iterator[pa.Table]:
        """Each unit's rows, in order, with ``offset`` and ``limit`` applied; units are read ahead on the
        I/O pool. A step taken on one of the pool's own threads (a stream handed to a task) never waits
        on a unit still queued to that pool: it takes the unit back and reads it itself."""
        counts = ReadCounts()
        read = rows = 0
        if self._limit == 0:
            self._stats = ScanStats(0, 0, 0, 0, 0)
            return
        units = self._units(counts, streaming)
        window = 1 if streaming else self._readahead
        pending: collections.deque[tuple[_Unit, Future[pa.Table]]] = collections.deque()
        skip = self._offset if self._filter is not None else 0  # without a filter, the units say what to drop
        remaining = self._limit
        exhausted = False
        try:
            while True:
                inline = threading.current_thread().name.startswith("lamina-io")
                while not inline and not exhausted and len(pending) < window:
                    unit = next(units, None)
                    if unit is None:
                        exhausted = True
                        break
                    pending.append((unit, io_pool().submit(self._read, unit, columns)))
                if pending:
                    unit, future = pending.popleft()
                    # on a pool thread, a unit not yet started is read here (waiting for it could deadlock)
                    table = self._read(unit, columns) if inline and future.cancel() else future.result()
                elif not exhausted and (unit := next(units, None)) is not None:
                    table = self._read(unit, columns)
                else:
                    break
                read += 1
                window = min(self._readahead, window * 2)
                if isinstance(unit, _Scan):
                    skip += unit.drop
                if skip:
                    dropped = min(skip, table.num_rows)
                    table, skip = _slice(table, dropped, table.num_rows - dropped), skip - dropped
                if remaining is not None:
                    table = _slice(table, 0, min(remaining, table.num_rows))
                    remaining -= table.num_rows
                if table.num_rows:
                    rows += table.num_rows
                    yield table
                if remaining == 0:
                    break
        finally:
            for _, f in pending:
                f.cancel()
            self._stats = ScanStats(counts.scanned_fragments, counts.index_fragments, counts.zone_pruned_fragments, read, rows)


def _slice(table: pa.Table, start: int, length: int) -> pa.Table:
    """``table.slice(start, length)``; also for a table without columns (whose slices keep every row)."""
    if table.num_columns:
        return table.slice(start, length)
    return _rows_only(length)


def _concat(tables: list[pa.Table]) -> pa.Table:
    """``pa.concat_tables(tables)`` (at least one); tables without columns (counting) keep their rows."""
    if len(tables) == 1:
        return tables[0]
    if not tables[0].num_columns:  # concatenating tables without columns loses their rows
        return _rows_only(sum(t.num_rows for t in tables))
    return pa.concat_tables(tables)


def _rows_only(rows: int) -> pa.Table:
    """A table of ``rows`` rows and no columns."""
    return pa.table({"_": pa.nulls(rows)}).drop_columns(["_"])


def _positive(name: str, value: Any) -> int:
    return _at_least(name, value, 1)


def _at_least(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise InvalidArgument(f"{name} must be an integer >= {low}, not {value!r}")
    return int(value)


def _fragment_ids(fragments: Iterable[Any], manifest: Manifest, uri: str) -> frozenset[int]:
    """Fragment ids from ids or ``FragmentInfo``s; each must be a fragment of this version."""
    ids = set()
    if isinstance(fragments, (str, bytes)) or not isinstance(fragments, Iterable):
        raise InvalidArgument(f"fragments must be a list of fragment ids or FragmentInfo objects of {uri}, not {fragments!r}")
    for f in fragments:
        fid = getattr(f, "id", f)
        if isinstance(fid, bool) or not isinstance(fid, (int, np.integer)):
            raise InvalidArgument(f"fragments must be fragment ids or FragmentInfo objects, not {f!r}")
        ids.add(int(fid))
    known = {f.id for f in manifest.fragments}
    missing = sorted(ids - known)
    if missing:
        raise InvalidArgument(
            f"version {manifest.version} of {uri} has no fragment {missing[0]}"
            + (f" (nor {len(missing) - 1} more)" if len(missing) > 1 else "")
            + "; see Table.fragments()"
        )
    return frozenset(ids)
