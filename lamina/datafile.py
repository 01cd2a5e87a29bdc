"""Reading and writing fragments' data files (Parquet, through the native writer).

Writes stream: at most ``max_rows_per_file`` rows (for smaller files, one task's group of them: at most
``GROUP_ROWS``) are held per writer thread before they are written, so memory is bounded by that setting,
not by the input's size.
"""

from __future__ import annotations

import itertools
import os
import secrets
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamina import _native, evolution, prune
from lamina.arrays import from_numpy, to_numpy
from lamina.checksum import check, of_bytes
from lamina.deletion import live_mask, read_deleted
from lamina.errors import CorruptFile, InvalidArgument, InvalidConfig, LaminaError, ObjectNotFound
from lamina.filter import Filter
from lamina.io_pool import map_fragments, pool_size
from lamina.manifest import ADDRESS_SHIFT, DATA_DIR, Fragment, RowGroup
from lamina.store import LocalStore, ObjectStore
from lamina.store.base import point_object_bytes
from lamina.zones import Zone, zones_of, zones_of_many

ROWADDR = "_rowaddr"
ROWID = "_rowid"
#: A row's physical offset, carried through a filter (``_finish``); never a column of a table.
_OFFSET = "_lamina_offset"


@dataclass(frozen=True)
class WriteOptions:
    """How appends lay out data files (stored in the manifest's ``config``)."""

    max_rows_per_file: int = 1_048_576
    row_group_rows: int = 131_072
    row_group_bytes: int = 128 * 1024 * 1024
    zstd_level: int = 3

    BOUNDS = {
        "max_rows_per_file": (1, 2**31 - 1),  # offsets are 32-bit
        "row_group_rows": (1, 2**31 - 1),
        "row_group_bytes": (1024, 2**40),
        "zstd_level": (0, 22),  # 0: uncompressed pages
    }

    @classmethod
    def from_config(cls, config: dict[str, Any], **overrides: Any) -> WriteOptions:
        values = {k: config[k] for k in cls.BOUNDS if k in config}
        values.update({k: v for k, v in overrides.items() if v is not None})
        for key, value in values.items():
            lo, hi = cls.BOUNDS[key]
            if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
                raise InvalidConfig(f"{key}={value!r} must be an integer in [{lo}, {hi}]")
        return cls(**values)

    def to_config(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in self.BOUNDS}


def chunk_batches(batches: Iterable[pa.RecordBatch], rows: int) -> Iterator[list[pa.RecordBatch]]:
    """Regroups a stream of batches into lists of exactly ``rows`` rows (the last may be shorter)."""
    pending: list[pa.RecordBatch] = []
    held = 0
    for batch in batches:
        while batch.num_rows:
            take = min(rows - held, batch.num_rows)
            pending.append(batch.slice(0, take))
            held += take
            batch = batch.slice(take)
            if held == rows:
                yield pending
                pending, held = [], 0
    if held:
        yield pending


#: At most this many of a data file name's 32 hex digits may be a caller's prefix (``name_prefix``):
#: the rest, at least 64 random bits, keeps the names of one prefix apart.
MAX_NAME_PREFIX = 16
_NAME_PREFIX_CHARS = frozenset("0123456789abcdef")


def check_name_prefix(name_prefix: str) -> str:
    """``name_prefix`` if it can start data file names: lowercase hex, at most ``MAX_NAME_PREFIX`` digits."""
    if not isinstance(name_prefix, str) or len(name_prefix) > MAX_NAME_PREFIX or not _NAME_PREFIX_CHARS.issuperset(name_prefix):
        raise InvalidArgument(
            f"name_prefix={name_prefix!r}: data file names take a prefix of at most {MAX_NAME_PREFIX} lowercase hex digits"
        )
    return name_prefix


def data_file_path(name_prefix: str = "") -> str:
    """A fresh data file path, ``data/<32 hex>.parquet``: a random uuid, or ``name_prefix`` (checked by
    ``check_name_prefix``) followed by random hex digits, so that ``store.list(DATA_DIR + name_prefix)``
    finds every file written with that prefix (a Ray write's way to find the files of tasks that died)."""
    if not name_prefix:
        return f"{DATA_DIR}{uuid.uuid4().hex}.parquet"
    return f"{DATA_DIR}{name_prefix}{secrets.token_hex(16)[len(name_prefix) :]}.parquet"


def write_fragment(
    store: ObjectStore,
    schema: pa.Schema,
    batches: list[pa.RecordBatch],
    options: WriteOptions,
    zones: tuple[Zone, ...] | None = None,
    *,
    name_prefix: str = "",
) -> Fragment:
    """Writes one data file from ``batches``; returns its fragment (id -1 until committed).

    The file is fsynced, unless ``store`` is a local store's ``deferring_sync()`` view: then the caller
    makes it durable (``sync_objects``) before committing it, as ``write_fragments`` does. ``zones``:
    ``zones_of(batches, schema)`` when the caller computed it already (for many files at once).
    ``name_prefix``: the file's name starts with these hex digits (``data_file_path``)."""
    sync = getattr(store, "sync_each_write", True)
    started = time.time()
    batches = in_schema(batches, schema)
    path = data_file_path(check_name_prefix(name_prefix))
    with store.staged_new_output(path) as local:  # a fresh name: in place on a local disk
        meta = _native.write_data_file(local, schema, batches, **_native_options(options), sync=sync)
    return _written(path, meta, zones_of(batches, schema) if zones is None else zones, schema, started)


def in_schema(batches: list[pa.RecordBatch], schema: pa.Schema) -> list[pa.RecordBatch]:
    """``batches`` labelled with ``schema`` itself, field metadata (field ids) included: rows read, cast or
    computed carry the types without it, and the native writer takes a batch only in the file's exact
    schema. A relabelling, no copy; a batch of other types still fails there."""
    return [
        b if b.schema.equals(schema, check_metadata=True) else pa.RecordBatch.from_arrays(b.columns, schema=schema)
        for b in batches
    ]


def _native_options(options: WriteOptions) -> dict[str, Any]:
    return dict(row_group_rows=options.row_group_rows, row_group_bytes=options.row_group_bytes, zstd_level=options.zstd_level)


def _written(path: str, meta: dict[str, Any], zones: tuple[Zone, ...], schema: pa.Schema, started: float) -> Fragment:
    """The fragment (id -1 until committed) of a data file the native writer wrote at ``path``."""
    return Fragment(
        id=-1,
        path=path,
        rows=int(meta["rows"]),
        file_bytes=int(meta["file_bytes"]),
        row_groups=tuple(RowGroup(int(r), int(b)) for r, b in meta["row_groups"]),
        file_version=str(meta["file_version"]),
        checksum=meta.get("checksum"),
        zones=zones,
        schema=schema,
        written_at=started,
    )


def write_threads() -> int:
    """Files encoded at once by one append (``LAMINA_WRITE_THREADS``, default: CPUs, at most 4)."""
    raw = os.environ.get("LAMINA_WRITE_THREADS")
    if raw is not None:
        if not raw.isdigit() or int(raw) < 1:
            raise InvalidConfig(f"LAMINA_WRITE_THREADS={raw!r} must be a positive integer")
        return int(raw)
    return max(1, min(4, os.cpu_count() or 1))


#: Small files are written a group at a time: one task writes up to this many consecutive files of
#: together at most ``GROUP_ROWS`` rows, so that a file of ten rows does not pay its own future, wake-up
#: of the submitting thread and GIL hand-off (a bulk append may write thousands of such files).
GROUP_FILES = 64
GROUP_ROWS = 4096


def _write_group(
    store: ObjectStore, schema: pa.Schema, chunks: list[list[pa.RecordBatch]], options: WriteOptions, name_prefix: str = ""
) -> list[Fragment]:
    """Writes consecutive files, in order; on error removes the ones it wrote and raises. Into a local
    store that syncs them together later (``deferring_sync``), several files are one native call."""
    chunks = [in_schema(chunk, schema) for chunk in chunks]
    zones = zones_of_many(chunks, schema)
    if len(chunks) > 1 and isinstance(store, LocalStore) and not store.sync_each_write:
        started = time.time()
        paths = [data_file_path(name_prefix) for _ in chunks]
        try:
            metas = _native.write_data_files(
                list(zip(store.new_files(paths), chunks)), schema, **_native_options(options), sync=False
            )
        except BaseException:
            store.delete(paths)  # the native call removes what it wrote; this is for anything it could not
            raise
        return [_written(path, meta, z, schema, started) for path, meta, z in zip(paths, metas, zones)]
    out: list[Fragment] = []
    try:
        for chunk, z in zip(chunks, zones):
            out.append(write_fragment(store, schema, chunk, options, zones=z, name_prefix=name_prefix))
    except BaseException:
        store.delete([f.path for f in out])
        raise
    return out


def _grouped(chunks: Iterator[list[pa.RecordBatch]], rows_per_file: int) -> Iterator[list[list[pa.RecordBatch]]]:
    """The files' chunks in groups of consecutive files (``GROUP_FILES``, ``GROUP_ROWS``); groups grow
    1, 2, 4, ... files first, so that a write of a few dozen small files still spreads over the threads."""
    most = max(1, min(GROUP_FILES, GROUP_ROWS // max(1, rows_per_file)))
    size = 1
    while True:
        group = list(itertools.islice(chunks, size))
        if not group:
            return
        yield group
        size = min(most, size * 2)


def write_fragments(
    store: ObjectStore, schema: pa.Schema, batches: Iterable[pa.RecordBatch], options: WriteOptions, *, name_prefix: str = ""
) -> list[Fragment]:
    """Writes the stream into files of at most ``max_rows_per_file`` rows, in order.

    ``name_prefix`` (at most ``MAX_NAME_PREFIX`` lowercase hex digits): every file's name starts with it,
    so that the writer can find the files by listing ``DATA_DIR + name_prefix`` even if this call never
    returns (a Ray write task cancelled or killed inside it: ``lamina.ray``). Names stay 32 hex digits.

    Up to ``write_threads()`` groups of files are encoded at once (the native writer releases the
    GIL); a group is one file, or consecutive small files of together at most ``GROUP_ROWS`` rows
    (``_grouped``). So at most that many groups plus one are held: memory is bounded by
    ``(write_threads() + 1) * max(max_rows_per_file, GROUP_ROWS)`` rows. On error, removes what it wrote.

    Every file is durable when it returns. On a local disk the files are written without their own
    fsync and made durable together at the end (``LocalStore.sync_objects``: one ``syncfs`` for many
    small files instead of an fsync each); elsewhere each file is synced as it is written.
    """
    check_name_prefix(name_prefix)
    view = store.deferring_sync() if isinstance(store, LocalStore) else None  # files synced together at the end
    target = store if view is None else view
    threads = write_threads()
    futures: list[Future[list[Fragment]]] = []
    in_flight: set[Future[list[Fragment]]] = set()  # at most ``threads``: O(1) per group, whatever the count
    with ThreadPoolExecutor(threads, thread_name_prefix="lamina-write") as pool:
        try:
            for group in _grouped(chunk_batches(batches, options.max_rows_per_file), options.max_rows_per_file):
                if len(in_flight) >= threads:
                    _, in_flight = wait(in_flight, return_when=FIRST_COMPLETED)
                future = pool.submit(_write_group, target, schema, group, options, name_prefix)
                futures.append(future)
                in_flight.add(future)
            fragments = [fragment for f in futures for fragment in f.result()]
            if view is not None:
                view.sync_objects([f.path for f in fragments])
            return fragments
        except BaseException:
            wait(futures)
            store.delete([frag.path for f in futures if not f.cancelled() and f.exception() is None for frag in f.result()])
            raise


@contextmanager
def reading(store: ObjectStore, fragment: Fragment, action: str) -> Iterator[None]:
    """Turns failures while reading a data file into errors naming the file and fragment."""
    where = store.describe(fragment.path)
    try:
        yield
    except ObjectNotFound:
        raise ObjectNotFound(
            f"data file {where} of fragment {fragment.id} is missing: the table is damaged; "
            "check out an earlier version or restore the file"
        ) from None
    except CorruptFile as e:
        raise CorruptFile(f"data file {where} of fragment {fragment.id}: {e}") from None
    except LaminaError:
        raise  # storage failures after retries: not corruption
    except (pa.ArrowException, OSError) as e:
        raise CorruptFile(f"data file {where} of fragment {fragment.id} {action} ({e}): truncated or corrupt") from None


def open_parquet(store: ObjectStore, fragment: Fragment, whole: bool = False) -> pq.ParquetFile:
    """Opens a fragment's data file, checking it against the manifest.

    ``whole``: the caller reads (nearly) every byte anyway, so the object is fetched in one
    piece and checked against its recorded checksum before anything is decoded.
    """
    where = store.describe(fragment.path)
    source: Any = None
    if whole and fragment.checksum is not None:
        with reading(store, fragment, "cannot be read"):
            data = store.get(fragment.path)
        check(fragment.checksum, of_bytes(data), f"data file {where} of fragment {fragment.id}")
        source = pa.BufferReader(data)
    if source is not None:
        with reading(store, fragment, "is not readable Parquet"):
            pf = pq.ParquetFile(source)
    else:  # ranged reads: the footer comes from the footer cache when there (one GET less on S3)
        opened: dict[str, pq.ParquetFile] = {}

        def load() -> pq.FileMetaData:
            with reading(store, fragment, "is not readable Parquet"):
                opened["pf"] = pq.ParquetFile(store.open_input(fragment.path, fragment.file_bytes))
            return opened["pf"].metadata

        metadata = prune.footer(store, fragment, load)
        if "pf" in opened:
            pf = opened["pf"]
        else:
            with reading(store, fragment, "is not readable Parquet"):
                pf = pq.ParquetFile(store.open_input(fragment.path, fragment.file_bytes), metadata=metadata)
    if pf.metadata.num_rows != fragment.rows:
        raise CorruptFile(
            f"data file {where} of fragment {fragment.id} has {pf.metadata.num_rows} rows, the manifest says {fragment.rows}"
        )
    return pf


def _row_ids(fragment: Fragment) -> np.ndarray:
    if fragment.row_ids is None:
        raise InvalidConfig("this table does not keep stable row ids; create it with stable_row_ids=True")
    if not fragment.row_ids:
        return np.zeros(0, np.uint64)
    return np.concatenate([np.arange(s, e, dtype=np.uint64) for s, e in fragment.row_ids])


def _needed(schema: pa.Schema, columns: Sequence[str] | None, flt: Filter | None) -> tuple[list[str], list[str]]:
    """(output columns, columns to read): the filter's columns are read too."""
    out_cols = list(schema.names) if columns is None else list(columns)
    if flt is not None and flt.columns is None:
        return out_cols, list(schema.names)
    extra = sorted(((flt.columns if flt else None) or frozenset()) - set(out_cols))
    return out_cols, out_cols + [c for c in extra if c not in out_cols]


def output_schema(
    schema: pa.Schema,
    columns: Sequence[str] | None,
    with_row_address: bool = False,
    with_row_id: bool = False,
) -> pa.Schema:
    """The schema ``read_fragment`` / ``read_rows_many`` return for these arguments."""
    names = list(schema.names) if columns is None else list(columns)
    fields = [schema.field(n) for n in names]
    for flag, name, typ in (
        (with_row_address, ROWADDR, pa.uint64()),
        (with_row_id, ROWID, pa.uint64()),
    ):
        if flag:
            fields.append(pa.field(name, typ))
    return pa.schema(fields)


def _finish(
    table: pa.Table,
    fragment: Fragment,
    offsets: np.ndarray,
    flt: Filter | None,
    out_cols: list[str],
    with_row_address: bool,
    with_row_id: bool,
) -> pa.Table:
    """Adds the requested special columns for the physical ``offsets`` of ``table``'s rows, filters, projects.
    With a filter, the offsets ride through it (4 bytes a row) and the special columns are made for the rows
    it keeps only: a selective scan of a large fragment does not build and filter an address per row."""
    if flt is not None and (with_row_address or with_row_id):
        kept = table.append_column(_OFFSET, from_numpy(offsets.astype(np.uint32, copy=False), pa.uint32()))
        kept = kept.filter(flt.expression)
        offsets = to_numpy(kept.column(_OFFSET).combine_chunks())
        return _finish(kept.drop_columns([_OFFSET]), fragment, offsets, None, out_cols, with_row_address, with_row_id)
    special: dict[str, pa.Array] = {}
    if with_row_address:
        base = np.uint64(fragment.id) << np.uint64(ADDRESS_SHIFT)
        # every row (offsets distinct and sorted, so 0..rows-1): one pass instead of a cast and an OR
        whole = len(offsets) == fragment.rows
        addrs = np.arange(base, base + np.uint64(len(offsets)), dtype=np.uint64) if whole else base | offsets.astype(np.uint64)
        special[ROWADDR] = from_numpy(addrs, pa.uint64())
    if with_row_id:
        special[ROWID] = from_numpy(_row_ids(fragment)[offsets], pa.uint64())
    for name, arr in special.items():
        table = table.append_column(name, arr)
    if flt is not None:
        table = table.filter(flt.expression)
    return table.select(out_cols + list(special))


def as_table_types(table: pa.Table, schema: pa.Schema) -> pa.Table:
    """``table`` with the table schema's types. Parquet has no logical type for some Arrow types
    (timestamp[s], date64, time32[s], duration, ...): the writer stores their integers and pyarrow
    reads those back as plain integers, so a read restores the types the manifest records."""
    fields = [schema.field(n) if n in schema.names else table.schema.field(n) for n in table.column_names]
    if all(f.type == t for f, t in zip(fields, table.schema.types)):
        return table
    return table.cast(pa.schema(fields, metadata=table.schema.metadata))


#: A data file at most this big is decoded on the calling thread: handing its few column chunks to
#: pyarrow's thread pool costs more than decoding them (and a process's first read would start the pool).
#: Reads of many fragments run side by side anyway (``io_pool.map_fragments``).
INLINE_DECODE_BYTES = 1 << 20


def _decode_threads(fragment: Fragment) -> bool:
    return fragment.file_bytes > INLINE_DECODE_BYTES


def read_fragment(
    store: ObjectStore,
    fragment: Fragment,
    schema: pa.Schema,
    columns: Sequence[str] | None = None,
    flt: Filter | None = None,
    with_row_address: bool = False,
    with_row_id: bool = False,
    row_groups: Sequence[int] | None = None,
) -> pa.Table:
    """Live rows of one fragment: projected, filtered, optionally with ``_rowaddr``/``_rowid``.

    With a filter, only the row groups whose statistics allow a match are read (``lamina.prune``).
    ``row_groups``: only these row groups (ascending; the manifest's ``Fragment.row_groups`` number
    them), as a streaming scan reads a large fragment a piece at a time.
    """
    out_cols, needed = _needed(schema, columns, flt)
    lay = evolution.layout(fragment.schema, schema)  # the file's columns as today's (docs/FORMAT.md §2.4)
    physical = lay.read_columns(needed)
    plan = prune.plan_fragment(store, fragment, schema, flt, lambda: open_parquet(store, fragment)) if flt is not None else None
    if row_groups is not None and len(row_groups) < len(fragment.row_groups):
        wanted = set(row_groups)
        if plan is None:
            plan = prune.FragmentPlan(sorted(wanted), [g.rows for g in fragment.row_groups])
        else:
            plan = prune.FragmentPlan([g for g in plan.groups if g in wanted], plan.group_rows, plan.file)
    if plan is None or plan.everything:
        pf = open_parquet(store, fragment, whole=len(physical) == len(lay.physical))
        with reading(store, fragment, "cannot be decoded"):
            table = _read_columns(pf, physical, fragment, None)
        offsets = np.arange(fragment.rows, dtype=np.uint32)
    else:  # only some row groups: ranged reads of those, not the whole object
        offsets = plan.offsets()
        table = lay.physical.empty_table().select(physical)
        if plan.groups:
            pf = plan.file or open_parquet(store, fragment)
            with reading(store, fragment, "cannot be decoded"):
                table = _read_columns(pf, physical, fragment, plan.groups)
    if table.num_rows != len(offsets):
        raise CorruptFile(
            f"data file {store.describe(fragment.path)} of fragment {fragment.id} decoded {table.num_rows} rows, "
            f"the manifest and footer say {len(offsets)}"
        )
    table = lay.conform(as_table_types(table, lay.physical), needed)
    mask = live_mask(fragment, read_deleted(store, fragment)) if len(offsets) else None
    if mask is not None:
        mask = mask if len(offsets) == fragment.rows else mask[offsets]
        table = table.filter(from_numpy(mask, pa.bool_()))
        offsets = offsets[mask]
    return _finish(table, fragment, offsets, flt, out_cols, with_row_address, with_row_id)


def _read_columns(pf: pq.ParquetFile, columns: list[str], fragment: Fragment, groups: list[int] | None) -> pa.Table:
    """``columns`` of the file (of row ``groups``, None: all); without columns, a table of its rows only."""
    if not columns:  # every column asked for was added after the file was written
        rows = fragment.rows if groups is None else sum(fragment.row_groups[g].rows for g in groups)
        return pa.table({"_": pa.nulls(rows)}).drop_columns(["_"])
    threads = _decode_threads(fragment)
    if groups is None:
        return pf.read(columns=columns, use_threads=threads)
    return pf.read_row_groups(groups, columns=columns, use_threads=threads)


def read_staged(
    local: str | pq.ParquetFile, fragment: Fragment, schema: pa.Schema, row_groups: Sequence[int] | None = None
) -> pa.Table:
    """Every row of ``fragment``'s data file staged at ``local`` (``ObjectStore.staged_input``; or that
    file opened), deleted ones too, or of its ``row_groups``, as ``schema``'s columns: a file written in
    an earlier schema is read through it (renamed, widened, added columns filled in: ``lamina.evolution``).
    ``CorruptFile`` if the file holds another number of rows than the manifest says; called inside
    ``reading``, which names the file and fragment."""
    lay = evolution.layout(fragment.schema, schema)
    groups = None if row_groups is None else list(row_groups)
    pf = local if isinstance(local, pq.ParquetFile) else pq.ParquetFile(local)
    table = _read_columns(pf, lay.read_columns(schema.names), fragment, groups)
    rows = fragment.rows if groups is None else sum(fragment.row_groups[g].rows for g in groups)
    if table.num_rows != rows:
        where = "" if groups is None else f" (row groups {groups})"
        raise CorruptFile(f"decoded {table.num_rows} rows{where}, the manifest says {rows}")
    return lay.conform(as_table_types(table, lay.physical), schema.names)


def read_rows_many(
    store: ObjectStore,
    schema: pa.Schema,
    items: Sequence[tuple[Fragment, np.ndarray, bool]],
    columns: Sequence[str] | None = None,
    flt: Filter | None = None,
    with_row_address: bool = False,
    with_row_id: bool = False,
) -> list[pa.Table]:
    """Like ``read_fragment``, for the live rows at sorted offsets only (rows an index found), of many
    fragments in one pass (``take_many``): ``items`` are (fragment, sorted live offsets, final); ``final``
    means the offsets are exactly the matches, so ``flt`` is not re-checked there."""
    recheck = any(not final for _, _, final in items)
    out_cols, needed = _needed(schema, columns, flt if recheck else None)
    counts = [len(offs) for _, offs, _ in items]
    offsets = np.concatenate([offs for _, offs, _ in items]).astype(np.uint32) if items else np.zeros(0, np.uint32)
    if needed:
        table = take_many(store, schema, [f for f, _, _ in items], offsets, counts, needed)
    else:  # counting: rows without columns
        table = pa.table({"_": pa.nulls(len(offsets))}).drop_columns(["_"])
    out, at = [], 0
    for (frag, offs, final), n in zip(items, counts):
        out.append(
            _finish(
                table.slice(at, n),
                frag,
                np.asarray(offs, dtype=np.uint32),
                None if final else flt,
                out_cols,
                with_row_address,
                with_row_id,
            )
        )
        at += n
    return out


def take_many(
    store: ObjectStore,
    schema: pa.Schema,
    fragments: Sequence[Fragment],
    offsets: np.ndarray,
    counts: Sequence[int] | np.ndarray,
    columns: Sequence[str],
) -> pa.Table:
    """Rows of many fragments in one pass (``_take_many``); fragments written in an earlier schema are
    read a schema at a time, through it (``lamina.evolution``), and their rows given today's columns."""
    layouts = [evolution.layout(f.schema, schema) for f in fragments]
    if all(lay.same for lay in layouts) or not columns:
        return _take_many(store, schema, fragments, offsets, counts, columns)
    counts = [int(c) for c in counts]
    offsets = np.asarray(offsets, dtype=np.uint32)
    starts = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    by_schema: dict[int, list[int]] = {}
    for i, lay in enumerate(layouts):
        by_schema.setdefault(-1 if lay.same else id(lay.physical), []).append(i)
    pieces: list[tuple[list[int], pa.Table]] = []
    for idx in by_schema.values():
        lay = layouts[idx[0]]
        sel = np.concatenate([offsets[starts[i] : starts[i + 1]] for i in idx])
        physical = lay.read_columns(columns)
        if physical:
            got = _take_many(store, lay.physical, [fragments[i] for i in idx], sel, [counts[i] for i in idx], physical)
        else:
            got = pa.table({"_": pa.nulls(len(sel))}).drop_columns(["_"])
        pieces.append((idx, lay.conform(got, list(columns))))
    return _in_order(pieces, starts, len(fragments))


def _in_order(pieces: list[tuple[list[int], pa.Table]], starts: np.ndarray, n: int) -> pa.Table:
    """The rows of ``pieces`` (fragment positions, their rows in that order) back in fragment order."""
    if len(pieces) == 1 and len(pieces[0][0]) == n:
        return pieces[0][1]
    order = np.concatenate([np.arange(starts[i], starts[i + 1]) for idx, _ in pieces for i in idx])
    table = pa.concat_tables([t for _, t in pieces])
    return table.take(from_numpy(np.argsort(order, kind="stable"), pa.int64()))


def _take_many(
    store: ObjectStore,
    schema: pa.Schema,
    fragments: Sequence[Fragment],
    offsets: np.ndarray,
    counts: Sequence[int] | np.ndarray,
    columns: Sequence[str],
) -> pa.Table:
    """Rows of many fragments in one pass: ``fragments[i]`` gives the next ``counts[i]`` of ``offsets``
    (physical, already checked live, sorted and distinct within each fragment); the rows come back in
    that order.

    Local files and small objects (``point_object_bytes()``; fetched whole, every GET at once through
    the I/O scheduler, checked against their checksums) are decoded by one native call on
    ``LAMINA_IO_THREADS`` threads, reading only the pages that hold the rows; larger objects on an
    object store are read by row group, in parallel.
    """
    counts = [int(c) for c in counts]
    offsets = np.asarray(offsets, dtype=np.uint32)
    cols = list(columns)
    if not cols or not fragments:  # rows without columns (counting)
        return pa.table({"_": pa.nulls(len(offsets))}).drop_columns(["_"])
    limit = point_object_bytes()
    whole = [i for i, f in enumerate(fragments) if store.is_local or f.file_bytes <= limit]
    starts = np.concatenate([[0], np.cumsum(counts)])
    pieces: list[tuple[list[int], pa.Table]] = []
    if whole:
        picked = [fragments[i] for i in whole]
        sources = store.point_sources([(f.path, f.file_bytes) for f in picked])
        files = []  # (object, local path | None, bytes | None, size, how many offsets)
        for i, f, src in zip(whole, picked, sources):
            local, data = (src, None) if isinstance(src, str) else (None, src)
            if data is not None and f.checksum is not None:
                check(f.checksum, of_bytes(data), f"data file {store.describe(f.path)} of fragment {f.id}")
            files.append((store.describe(f.path), local, data, f.file_bytes, counts[i]))
        sel = offsets if len(whole) == len(fragments) else np.concatenate([offsets[starts[i] : starts[i + 1]] for i in whole])
        try:
            batch = _native.take_rows_many(files, np.asarray(sel, dtype="<u4").tobytes(), cols, pool_size(len(files)))
        except ObjectNotFound as e:
            raise ObjectNotFound(
                f"a data file is missing: the table is damaged; check out an earlier version or restore it ({e})"
            ) from None
        pieces.append((whole, as_table_types(pa.Table.from_batches([batch]), schema)))
    chosen = set(whole)
    rest = [i for i in range(len(fragments)) if i not in chosen]
    if rest:
        tables = map_fragments(
            lambda i: _take_by_row_groups(store, schema, fragments[i], offsets[starts[i] : starts[i + 1]], cols), rest
        )
        pieces.append((rest, pa.concat_tables(tables)))
    return _in_order(pieces, starts, len(fragments))


def _take_by_row_groups(
    store: ObjectStore, schema: pa.Schema, fragment: Fragment, offsets: np.ndarray, columns: Sequence[str]
) -> pa.Table:
    """Rows at sorted ``offsets`` of a large object on an object store: the row groups holding them."""
    pf = open_parquet(store, fragment)
    bounds = np.cumsum([0] + [g.rows for g in fragment.row_groups])
    groups = np.unique(np.searchsorted(bounds, offsets, side="right") - 1)
    with reading(store, fragment, "cannot be decoded"):
        table = as_table_types(pf.read_row_groups(groups.tolist(), columns=list(columns), use_threads=True), schema)
    # position of each offset within the concatenation of the selected row groups
    starts = bounds[groups]
    sizes = bounds[groups + 1] - starts
    local_base = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    gi = np.searchsorted(starts, offsets, side="right") - 1
    local = local_base[gi] + (offsets - starts[gi])
    return table.take(from_numpy(local, pa.int64()))
