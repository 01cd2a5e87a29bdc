"""Secondary indices: what can be indexed, how segments are built, stored, merged and read.

    create / update ──► plan: fragments → segments (≤ segment_rows) → tasks (≤ task_rows)
                    ──► build_task (thread or Ray task): read the column, native build,
                        upload ``_indices/<segment>/part-NNNNN.lidx`` (or ``segment.lidx``)
                    ──► finish_segment: native merge of the parts, upload ``segment.lidx``
                    ──► commit a ``create_index`` transaction naming segments and fragments

Reading goes through ``open_segment`` (directory, cached) and ``fetch_blocks``
(only the blocks a query needs, cached, adjacent ranges coalesced). Both caches
share one byte budget, ``LAMINA_INDEX_CACHE_BYTES`` (default 256 MiB) per process.
Formats are in docs/FORMAT.md §10; queries in ``lamina.index_query``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import re
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Sequence

import pyarrow as pa
import pyarrow.parquet as pq

from lamina import _native
from lamina.datafile import reading
from lamina.faults import maybe_die
from lamina.errors import CorruptFile, IndexNotFound, InvalidArgument, ObjectNotFound
from lamina.manifest import INDICES_DIR, Fragment, IndexEntry, IndexSegment, Manifest
from lamina.store import ObjectStore, open_store

log = logging.getLogger("lamina.index")

KINDS = ("btree", "bitmap", "fts")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")
SEGMENT_FILE = "segment.lidx"

#: Build defaults (see IndexOptions). One task per segment by default: a merge costs about
#: as much as the build (read, re-sort, write and fsync the segment again), so split a
#: segment over several tasks only to spread a large one over more workers.
DEFAULT_SEGMENT_ROWS = 1 << 22
DEFAULT_TASK_ROWS = DEFAULT_SEGMENT_ROWS


@dataclass(frozen=True)
class IndexOptions:
    """How an index is built. Memory of a build task: about ``task_rows`` rows of the column
    plus 16 bytes per row (btree); of a merge: about 3 × the segment file (≤ ``segment_rows`` rows)."""

    task_rows: int = DEFAULT_TASK_ROWS
    segment_rows: int = DEFAULT_SEGMENT_ROWS
    page_entries: int = 4096
    max_bitmap_values: int = 65_536
    stem: bool = False
    max_token_len: int = 64

    def __post_init__(self) -> None:
        bounds = {"task_rows": (1, 1 << 31), "segment_rows": (1, 1 << 34), "page_entries": (1, 1 << 20),
                  "max_bitmap_values": (1, 1 << 24), "max_token_len": (1, 1 << 16)}
        for name, (lo, hi) in bounds.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise InvalidArgument(f"index option {name} must be an integer in [{lo}, {hi}], got {v!r}")
        if self.segment_rows < self.task_rows:
            raise InvalidArgument(f"index option segment_rows ({self.segment_rows}) must be at least task_rows ({self.task_rows})")

    def native(self) -> dict[str, Any]:
        return dict(page_entries=self.page_entries, max_bitmap_values=self.max_bitmap_values,
                    stem=self.stem, max_token_len=self.max_token_len)

    @classmethod
    def from_details(cls, details: dict[str, Any], **overrides: Any) -> "IndexOptions":
        """The options an index was created with (kept in its details), with build-size overrides."""
        keep = {k: details[k] for k in ("page_entries", "max_bitmap_values", "stem", "max_token_len") if k in details}
        return cls(**{**keep, **{k: v for k, v in overrides.items() if v is not None}})

    def details(self) -> dict[str, Any]:
        return self.native()


# -- what can be indexed -------------------------------------------------------
def _is_temporal(t: pa.DataType) -> bool:
    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_time(t) or pa.types.is_duration(t)


def key_type_of(t: pa.DataType) -> str | None:
    """The key domain of a column type (int64, uint64, float64, bytes), or None if not indexable."""
    if pa.types.is_dictionary(t):
        return key_type_of(t.value_type)
    if pa.types.is_boolean(t) or pa.types.is_signed_integer(t) or _is_temporal(t):
        return "int64"
    if pa.types.is_unsigned_integer(t):
        return "uint64" if t.bit_width == 64 else "int64"
    if pa.types.is_floating(t):
        return "float64"
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t)
            or pa.types.is_large_binary(t) or pa.types.is_fixed_size_binary(t)):
        return "bytes"
    return None


def check_indexable(schema: pa.Schema, column: str, kind: str, where: str) -> pa.DataType:
    """The column's type; InvalidArgument if the column is missing or the kind cannot index it."""
    if kind not in KINDS:
        raise InvalidArgument(f"unknown index kind {kind!r}; kinds: {', '.join(KINDS)}")
    if not isinstance(column, str) or column not in schema.names:
        raise InvalidArgument(f"cannot index column {column!r}: table {where} has no such column; columns: {', '.join(schema.names)}")
    t = schema.field(column).type
    if kind == "fts":
        vt = t.value_type if pa.types.is_dictionary(t) else t
        if not (pa.types.is_string(vt) or pa.types.is_large_string(vt)):
            raise InvalidArgument(f"a full-text (fts) index needs a string column; {column!r} of {where} is {t}")
    elif key_type_of(t) is None:
        raise InvalidArgument(f"cannot build a {kind} index on column {column!r} of {where}: type {t} is not supported "
                              "(integers, floats, booleans, dates/times/timestamps/durations, strings and binary are)")
    return t


def default_name(column: str, kind: str) -> str:
    """``<column>_<kind>``, with every character an index name cannot hold (non-ASCII, spaces,
    '/', …) replaced by '_' and a short hash of the column appended when anything was replaced,
    so two such columns never share a default name."""
    base = f"{column}_{kind}"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", base).lstrip(".-") or "index"
    if safe == base and len(safe) <= 64:
        return base
    digest = hashlib.sha256(column.encode()).hexdigest()[:8]
    return f"{safe[:64 - 9]}_{digest}"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgument(f"index name {name!r} must be 1-64 characters of letters, digits, '_', '.', '-' (not starting with '.' or '-')")
    return name


def key_array(values: "pa.Array | pa.ChunkedArray") -> pa.Array:
    """``values`` in the key domain the native builder takes (int64, uint64, float64, binary, dictionary)."""
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks() if values.num_chunks != 1 else values.chunk(0)
    t = values.type
    if pa.types.is_dictionary(t):
        vt = t.value_type
        if pa.types.is_string(vt) or pa.types.is_large_string(vt) or pa.types.is_binary(vt) or pa.types.is_large_binary(vt):
            return values if t.index_type == pa.int32() else values.cast(pa.dictionary(pa.int32(), vt))
        return key_array(values.dictionary_decode())
    if _is_temporal(t):
        storage = pa.int32() if t.bit_width == 32 else pa.int64()
        return values.view(storage).cast(pa.int64())
    if pa.types.is_fixed_size_binary(t):
        return values.cast(pa.binary())
    if pa.types.is_floating(t):
        return values.cast(pa.float64())
    if pa.types.is_unsigned_integer(t) and t.bit_width == 64:
        return values
    if pa.types.is_boolean(t) or pa.types.is_integer(t):
        return values.cast(pa.int64())
    return values


def key_value(scalar: pa.Scalar) -> Any:
    """A filter literal (already of the column's type) as a key: int, float or bytes; None for null."""
    if not scalar.is_valid:
        return None
    v = key_array(pa.array([scalar.as_py()], type=scalar.type))[0].as_py()
    return v.encode() if isinstance(v, str) else v


# -- storage -------------------------------------------------------------------
def segment_path(segment_uuid: str, name: str = SEGMENT_FILE) -> str:
    return f"{INDICES_DIR}{segment_uuid}/{name}"


class _ByteLRU:
    """A thread-safe LRU of values with a byte size, bounded by a byte budget."""

    def __init__(self, budget: int):
        self.budget = budget
        self._items: OrderedDict[Any, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key: Any) -> Any:
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                return None
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: Any, value: Any, size: int) -> None:
        if size > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.budget and self._items:
                _, (_, s) = self._items.popitem(last=False)
                self._bytes -= s

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0


_CACHE = _ByteLRU(int(os.environ.get("LAMINA_INDEX_CACHE_BYTES", str(256 << 20))))


def clear_caches() -> None:
    """Drops every cached index directory and block of this process."""
    _CACHE.clear()


def _fail(store: ObjectStore, seg: IndexSegment, index: str, e: Exception) -> Exception:
    where = store.describe(seg.path)
    if isinstance(e, ObjectNotFound):
        return ObjectNotFound(f"index {index!r}: segment file {where} is missing; drop and re-create the index (or run jobs.index --update after dropping)")
    return CorruptFile(f"index {index!r}: segment file {where} is unreadable: {e}. Drop and re-create the index")


def open_segment(store: ObjectStore, seg: IndexSegment, index: str) -> "_native.IndexSegment":
    """The parsed directory of a stored segment (cached; segments are immutable)."""
    key = ("dir", store.uri, seg.path)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    try:
        tail_len = min(seg.bytes, 64 * 1024)
        tail = store.get_range(seg.path, seg.bytes - tail_len, tail_len)
        off, length = _native.index_directory_range(tail, seg.bytes, store.describe(seg.path))
        tail_start = seg.bytes - tail_len
        directory = tail[off - tail_start: off - tail_start + length] if off >= tail_start else store.get_range(seg.path, off, length)
        reader = _native.IndexSegment(tail[-_native.INDEX_FOOTER_LEN:], directory, seg.bytes, store.describe(seg.path))
    except (CorruptFile, ObjectNotFound) as e:
        raise _fail(store, seg, index, e) from None
    _CACHE.put(key, reader, len(directory) + 256)
    return reader


def fetch_blocks(store: ObjectStore, seg: IndexSegment, index: str, blocks: Sequence[tuple[int, int, int]]) -> list[tuple[int, bytes]]:
    """``[(id, bytes)]`` of ``blocks`` (id, offset, length): cached, adjacent ones read in one GET."""
    out: dict[int, bytes] = {}
    missing = []
    for bid, off, length in blocks:
        hit = _CACHE.get(("blk", store.uri, seg.path, bid))
        if hit is not None:
            out[bid] = hit
        else:
            missing.append((bid, off, length))
    missing.sort(key=lambda b: b[1])
    i = 0
    try:
        while i < len(missing):
            j = i + 1
            while j < len(missing) and missing[j][1] == missing[j - 1][1] + missing[j - 1][2] \
                    and missing[j][1] + missing[j][2] - missing[i][1] <= 8 << 20:
                j += 1
            start = missing[i][1]
            data = store.get_range(seg.path, start, missing[j - 1][1] + missing[j - 1][2] - start)
            for bid, off, length in missing[i:j]:
                out[bid] = data[off - start: off - start + length]
                _CACHE.put(("blk", store.uri, seg.path, bid), out[bid], length + 128)
            i = j
    except (CorruptFile, ObjectNotFound) as e:
        raise _fail(store, seg, index, e) from None
    return [(bid, out[bid]) for bid, _, _ in blocks]


# -- building ------------------------------------------------------------------
@dataclass(frozen=True)
class BuildTask:
    """Build part ``part`` of segment ``segment_uuid`` from ``fragments`` (ordinal, fragment)."""

    uri: str
    storage_options: dict[str, Any] | None
    column: str
    kind: str
    options: IndexOptions
    segment_uuid: str
    part: int
    final: bool  # the only part: write segment.lidx directly
    fragments: tuple[tuple[int, Fragment], ...]


@dataclass
class SegmentPlan:
    uuid: str
    fragments: list[Fragment]
    tasks: list[BuildTask] = field(default_factory=list)


def read_key_column(store: ObjectStore, fragment: Fragment, column: str, kind: str) -> pa.Array:
    """Every physical row of ``column`` in ``fragment`` (deleted rows too: reads filter them)."""
    dictionary = [column] if kind == "bitmap" else None
    with reading(store, fragment, "cannot be decoded"):
        pf = pq.ParquetFile(store.open_input(fragment.path, fragment.file_bytes), read_dictionary=dictionary)
        values = pf.read(columns=[column], use_threads=True).column(0)
    if len(values) != fragment.rows:
        raise CorruptFile(f"data file {store.describe(fragment.path)} of fragment {fragment.id} has {len(values)} rows, the manifest says {fragment.rows}")
    return key_array(values)


def build_local(kind: str, inputs: list[tuple[int, pa.Array]], path: str | None, options: IndexOptions) -> dict[str, Any]:
    """Native build of one segment from (ordinal, key array) inputs, to ``path`` or in memory."""
    return _native.build_index_segment(kind, inputs, path, **options.native())


def _write_segment(store: ObjectStore, rel: str, make: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Runs ``make(local_path)`` to write a segment file and puts it at ``rel`` (a retried task may rewrite it)."""
    with store.staged_output(rel) as local:
        return make(local)


def run_build_task(task: BuildTask) -> tuple[str, int, int, str | None]:
    """Builds one part (a thread or a Ray task); returns (path, bytes, rows, checksum)."""
    store = open_store(task.uri, task.storage_options)
    inputs = [(ordinal, read_key_column(store, frag, task.column, task.kind)) for ordinal, frag in task.fragments]
    rel = segment_path(task.segment_uuid, SEGMENT_FILE if task.final else f"part-{task.part:05d}.lidx")
    meta = _write_segment(store, rel, lambda local: build_local(task.kind, inputs, local, task.options))
    maybe_die()  # test-only fault injection (lamina.faults)
    return rel, int(meta["bytes"]), int(meta["rows"]), meta.get("checksum")


def plan_segments(uri: str, storage_options: dict[str, Any] | None, column: str, kind: str,
                  fragments: Sequence[Fragment], options: IndexOptions) -> list[SegmentPlan]:
    """Cuts ``fragments`` (in table order) into segments of ≤ segment_rows and tasks of ≤ task_rows rows."""
    segments: list[SegmentPlan] = []
    for frag in fragments:
        if not segments or (segments[-1].fragments and sum(f.rows for f in segments[-1].fragments) + frag.rows > options.segment_rows):
            segments.append(SegmentPlan(uuid.uuid4().hex, []))
        segments[-1].fragments.append(frag)
    for seg in segments:
        groups: list[list[tuple[int, Fragment]]] = []
        rows = 0
        for ordinal, frag in enumerate(seg.fragments):
            if not groups or (groups[-1] and rows + frag.rows > options.task_rows):
                groups.append([])
                rows = 0
            groups[-1].append((ordinal, frag))
            rows += frag.rows
        seg.tasks = [BuildTask(uri, storage_options, column, kind, options, seg.uuid, i, len(groups) == 1, tuple(g))
                     for i, g in enumerate(groups)]
    return segments


def finish_segment(store: ObjectStore, plan: SegmentPlan, kind: str, options: IndexOptions,
                   parts: list[tuple[str, int, int, str | None]]) -> IndexSegment:
    """Merges a segment's parts (natively) into ``segment.lidx``; deletes the parts."""
    fids = tuple(f.id for f in plan.fragments)
    if len(parts) == 1 and parts[0][0] == segment_path(plan.uuid):
        path, size, rows, checksum = parts[0]
        return IndexSegment(plan.uuid, path, size, rows, fids, checksum)
    with contextlib.ExitStack() as staged:
        inputs = [(staged.enter_context(store.staged_input(part, size)).path, store.describe(part)) for part, size, *_ in parts]
        rel = segment_path(plan.uuid)
        meta = _write_segment(store, rel, lambda out: _native.merge_index_segments(kind, inputs, out, **options.native()))
    store.delete([p[0] for p in parts])
    return IndexSegment(plan.uuid, rel, int(meta["bytes"]), int(meta["rows"]), fids, meta.get("checksum"))


Runner = Callable[[list[BuildTask]], Iterable[tuple[BuildTask, tuple[str, int, int]]]]


def thread_runner(threads: int | None = None) -> Runner:
    """Runs build tasks on a thread pool in this process (the native build releases the GIL)."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    def run(tasks: list[BuildTask]):
        n = threads or max(1, min(len(tasks), os.cpu_count() or 1))
        with ThreadPoolExecutor(n, thread_name_prefix="lamina-index") as pool:
            futures = {pool.submit(run_build_task, t): t for t in tasks}
            for fut in as_completed(futures):
                yield futures[fut], fut.result()
    return run


def build_segments(store: ObjectStore, plans: list[SegmentPlan], kind: str, options: IndexOptions, runner: Runner,
                   progress: Callable[[int, int], None] | None = None) -> list[IndexSegment]:
    """Runs every task, merges each segment as soon as its parts are in; on error removes what was written."""
    tasks = [t for p in plans for t in p.tasks]
    by_segment: dict[str, list[tuple[BuildTask, tuple[str, int, int]]]] = {p.uuid: [] for p in plans}
    done: dict[str, IndexSegment] = {}
    written: list[str] = []
    try:
        for n, (task, part) in enumerate(runner(tasks), 1):
            written.append(part[0])
            by_segment[task.segment_uuid].append((task, part))
            plan = next(p for p in plans if p.uuid == task.segment_uuid)
            if len(by_segment[plan.uuid]) == len(plan.tasks):
                parts = [pt for _, pt in sorted(by_segment[plan.uuid], key=lambda x: x[0].part)]
                done[plan.uuid] = finish_segment(store, plan, kind, options, parts)
                written.append(done[plan.uuid].path)
            if progress:
                progress(n, len(tasks))
    except BaseException:
        store.delete(sorted(set(written)))
        raise
    return [done[p.uuid] for p in plans]


def uncovered(manifest: Manifest, index: IndexEntry) -> list[Fragment]:
    """Live fragments no segment of ``index`` serves, in table order."""
    cov = index.coverage(manifest.fragment_map())
    return [f for f in manifest.fragments if f.id not in cov]


def segment_for_outputs(store: ObjectStore, column: str, kind: str, options: IndexOptions,
                        outputs: list[tuple[str, int]]) -> IndexSegment:
    """Builds one segment over freshly written data files (local paths, rows), ordinal = position;
    used by compaction before the outputs have fragment ids (the commit fills them in)."""
    inputs = []
    for ordinal, (local, rows) in enumerate(outputs):
        pf = pq.ParquetFile(local, read_dictionary=[column] if kind == "bitmap" else None)
        values = pf.read(columns=[column], use_threads=True).column(0)
        if len(values) != rows:
            raise CorruptFile(f"compaction output {local} has {len(values)} rows, expected {rows}")
        inputs.append((ordinal, key_array(values)))
    seg_uuid = uuid.uuid4().hex
    rel = segment_path(seg_uuid)
    meta = _write_segment(store, rel, lambda local: build_local(kind, inputs, local, options))
    return IndexSegment(seg_uuid, rel, int(meta["bytes"]), int(meta["rows"]), tuple(-1 for _ in outputs), meta.get("checksum"))


def new_entry(name: str, column: str, kind: str, options: IndexOptions, segments: Iterable[IndexSegment]) -> IndexEntry:
    return IndexEntry(name, column, kind, uuid.uuid4().hex, tuple(segments), options.details())


@dataclass
class IndexBuild:
    """What a create or update did."""

    name: str
    column: str
    kind: str
    action: str  # create | update | none
    version: int
    segments: int = 0
    fragments: int = 0
    rows: int = 0
    bytes: int = 0
    uncovered_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def build_index(table: Any, column: str | None, kind: str | None, *, name: str | None = None, update: bool = False,
                options: IndexOptions | None = None, runner: Runner | None = None,
                progress: Callable[[int, int], None] | None = None) -> IndexBuild:
    """Creates index ``name`` (default ``<column>_<kind>``) or, with ``update``, indexes the
    fragments it does not cover yet; commits and moves ``table`` to the new version."""
    from lamina.commit import commit
    from lamina.transaction import CreateIndex

    base: Manifest = table.manifest
    where = table.uri
    existing = None
    if update:
        if name is None:
            matches = [ix for ix in base.indices if ix.column == column and (kind is None or ix.kind == kind)]
            if len(matches) != 1:
                raise IndexNotFound(f"cannot tell which index to update on {where}: {len(matches)} indices on column {column!r}; pass the name")
            existing = matches[0]
        else:
            existing = next((ix for ix in base.indices if ix.name == name), None)
            if existing is None:
                raise IndexNotFound(f"table {where} has no index named {name!r}; indices: {', '.join(ix.name for ix in base.indices) or 'none'}")
        column, kind, name = existing.column, existing.kind, existing.name
        options = IndexOptions.from_details(existing.details, task_rows=options.task_rows if options else None,
                                            segment_rows=options.segment_rows if options else None)
    else:
        if column is None or kind is None:
            raise InvalidArgument("create_index needs a column and a kind (btree, bitmap or fts)")
        options = options or IndexOptions()
        name = check_name(name if name is not None else default_name(column, kind))
        if any(ix.name == name for ix in base.indices):
            raise InvalidArgument(f"table {where} already has an index named {name!r}; drop it first, pick another name, or update it")
    check_indexable(base.schema, column, kind, where)
    todo = uncovered(base, existing) if existing else list(base.fragments)
    result = IndexBuild(name, column, kind, "update" if existing else "create", base.version)
    if existing is not None and not todo:
        result.action = "none"
        return result
    started = time.time()
    plans = plan_segments(table.uri, table.storage_options, column, kind, todo, options)
    segments = build_segments(table.store, plans, kind, options, runner or thread_runner(), progress)
    entry = dataclasses.replace(existing, segments=tuple(segments)) if existing else new_entry(name, column, kind, options, segments)
    txn = CreateIndex(base.version, entry, "update" if existing else "create", started=started)
    table._manifest = commit(table.store, txn, base)
    m = table.manifest
    ix = next(i for i in m.indices if i.name == name)
    result.version = m.version
    result.segments = len(segments)
    result.fragments = sum(len(p.fragments) for p in plans)
    result.rows = sum(s.rows for s in segments)
    result.bytes = sum(s.bytes for s in segments)
    result.uncovered_after = len(uncovered(m, ix))
    return result

