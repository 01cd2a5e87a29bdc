"""Stored index segments: where they live, building and merging their files, reading them through the cache.

    build_local(kind, [(ordinal, keys)], path)   native build of one segment file (or part)
    write_segment(store, rel, make)              make(local path) through ObjectStore.staged_output
    merge_parts(store, segment, parts)           native merge of a segment's parts into segment.lidx
    open_segment / fetch_blocks                  a segment's directory, then only the blocks a query needs

Reads go through one byte-bounded cache (``lamina.cache``, ``LAMINA_INDEX_CACHE_BYTES``,
default 256 MiB per process) holding directories, blocks and full-text document tables;
segments are immutable, so nothing is ever invalidated. Formats: docs/FORMAT.md §10.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import uuid
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from lamina import _native, evolution
from lamina.cache import MiB, cache
from lamina.datafile import reading
from lamina.errors import CorruptFile, ObjectNotFound
from lamina.index.options import IndexOptions
from lamina.keys import key_array
from lamina.manifest import INDICES_DIR, Fragment, IndexEntry, IndexSegment
from lamina.store import ObjectStore
from lamina.store.scheduler import POINT, fetch_ranges

log = logging.getLogger("lamina.index")

SEGMENT_FILE = "segment.lidx"

#: Directories, blocks and full-text documents of index segments.
CACHE = cache("index", "LAMINA_INDEX_CACHE_BYTES", 256 * MiB)


def clear_caches() -> None:
    """Drops every cached index directory and block of this process."""
    CACHE.clear()


def segment_path(segment_uuid: str, name: str = SEGMENT_FILE) -> str:
    return f"{INDICES_DIR}{segment_uuid}/{name}"


def part_path(segment_uuid: str, part: int) -> str:
    """Where build task ``part`` of a segment of several parts writes (removed after the merge)."""
    return segment_path(segment_uuid, f"part-{part:05d}.lidx")


def on_error() -> str:
    """``LAMINA_INDEX_ON_ERROR``: ``scan`` (default) reads around a broken index, ``raise`` fails."""
    return os.environ.get("LAMINA_INDEX_ON_ERROR", "scan")


def on_broken(index: IndexEntry, e: Exception, what: str) -> None:
    """A segment of ``index`` cannot be read: logged, and its fragments are scanned (or ``e`` is raised)."""
    if on_error() == "raise":
        raise e
    log.warning("%s; %s scans the fragments it covers instead", e, what)


def _fail(store: ObjectStore, seg: IndexSegment, index: str, e: Exception) -> Exception:
    where = store.describe(seg.path)
    if isinstance(e, ObjectNotFound):
        return ObjectNotFound(
            f"index {index!r}: segment file {where} is missing; "
            "drop and re-create the index (or run lamina.jobs.index --update after dropping)"
        )
    return CorruptFile(f"index {index!r}: segment file {where} is unreadable: {e}. Drop and re-create the index")


def open_segment(store: ObjectStore, seg: IndexSegment, index: str) -> _native.IndexSegment:
    """The parsed directory of a stored segment (cached; segments are immutable)."""
    key = ("dir", store.uri, seg.path)
    hit = CACHE.get(key)
    if hit is not None:
        return hit
    try:
        tail_len = min(seg.bytes, 64 * 1024)
        tail = store.get_range(seg.path, seg.bytes - tail_len, tail_len)
        off, length = _native.index_directory_range(tail, seg.bytes, store.describe(seg.path))
        tail_start = seg.bytes - tail_len
        directory = (
            tail[off - tail_start : off - tail_start + length] if off >= tail_start else store.get_range(seg.path, off, length)
        )
        reader = _native.IndexSegment(tail[-_native.INDEX_FOOTER_LEN :], directory, seg.bytes, store.describe(seg.path))
    except (CorruptFile, ObjectNotFound) as e:
        raise _fail(store, seg, index, e) from None
    CACHE.put(key, reader, len(directory) + 256)
    return reader


def fetch_blocks(
    store: ObjectStore, seg: IndexSegment, index: str, blocks: Sequence[tuple[int, int, int]]
) -> list[tuple[int, bytes]]:
    """``[(id, bytes)]`` of ``blocks`` (id, offset, length): cached, the others fetched together."""
    out: dict[int, bytes] = {}
    missing = []
    for bid, off, length in blocks:
        hit = CACHE.get(("blk", store.uri, seg.path, bid))
        if hit is not None:
            out[bid] = hit
        else:
            missing.append((bid, off, length))
    try:  # every missing block at once through the I/O scheduler, nearby ones coalesced into one GET
        datas = fetch_ranges(store, [(seg.path, off, length) for _, off, length in missing], POINT)
    except (CorruptFile, ObjectNotFound) as e:
        raise _fail(store, seg, index, e) from None
    for (bid, _, length), data in zip(missing, datas):
        out[bid] = data
        CACHE.put(("blk", store.uri, seg.path, bid), data, length + 128)
    return [(bid, out[bid]) for bid, _, _ in blocks]


def read_key_column(store: ObjectStore, fragment: Fragment, column: str, kind: str, field: pa.Field | None = None) -> pa.Array:
    """Every physical row of ``column`` in ``fragment`` (deleted rows too: reads filter them). ``field``:
    the column's field today, when the fragment may be written in an earlier schema (``lamina.evolution``)."""
    with reading(store, fragment, "cannot be decoded"):
        values = _column_values(
            lambda dictionary: pq.ParquetFile(store.open_input(fragment.path, fragment.file_bytes), read_dictionary=dictionary),
            fragment.rows,
            column,
            kind,
            field,
            fragment.schema,
        )
    if len(values) != fragment.rows:
        raise CorruptFile(
            f"data file {store.describe(fragment.path)} of fragment {fragment.id} has {len(values)} rows, "
            f"the manifest says {fragment.rows}"
        )
    return key_array(values)


def _open_local(path: str, read_dictionary: list[str] | None) -> pq.ParquetFile:
    return pq.ParquetFile(path, read_dictionary=read_dictionary)


def _column_values(
    open_file: Callable[[list[str] | None], pq.ParquetFile],
    rows: int,
    column: str,
    kind: str,
    field: pa.Field | None,
    physical: pa.Schema | None,
) -> pa.Array | pa.ChunkedArray:
    """Every row of ``column`` of a data file of ``rows`` rows written in ``physical``: with today's
    ``field``, read by its field id (``lamina.evolution.source_of``), its default or nulls when the file
    does not have it; ``open_file(read_dictionary)`` opens the file (a bitmap reads strings as a dictionary)."""
    source, conform = evolution.source_of(physical, field) if field is not None else (column, None)
    if source is None:  # added after the file was written
        assert field is not None
        return evolution.missing(field, rows)
    values = open_file([source] if kind == "bitmap" else None).read(columns=[source], use_threads=True).column(0)
    return values if conform is None else conform(values)


def build_local(kind: str, inputs: list[tuple[int, pa.Array]], path: str | None, options: IndexOptions) -> dict[str, Any]:
    """Native build of one segment from (ordinal, key array) inputs, to ``path`` or in memory."""
    return _native.build_index_segment(kind, inputs, path, **options.native())


def write_segment(store: ObjectStore, rel: str, make: Callable[[str], dict[str, Any]]) -> dict[str, Any]:
    """Runs ``make(local_path)`` to write a segment file and puts it at ``rel`` (a retried task may rewrite it)."""
    with store.staged_output(rel) as local:
        return make(local)


class BuiltPart(NamedTuple):
    """A segment file (or part of one) a build task wrote."""

    segment_uuid: str
    part: int
    path: str
    bytes: int
    rows: int
    checksum: str | None


def build_part(
    store: ObjectStore,
    segment_uuid: str,
    part: int,
    only_part: bool,
    column: str,
    kind: str,
    options: IndexOptions,
    fragments: Sequence[tuple[int, Fragment]],
    field: pa.Field | None = None,
) -> BuiltPart:
    """Reads ``column`` of ``fragments`` (ordinal, fragment) and writes their part of a segment;
    the only part of a segment is written as the segment itself."""
    inputs = [(ordinal, read_key_column(store, frag, column, kind, field)) for ordinal, frag in fragments]
    rel = segment_path(segment_uuid) if only_part else part_path(segment_uuid, part)
    meta = write_segment(store, rel, lambda local: build_local(kind, inputs, local, options))
    return BuiltPart(segment_uuid, part, rel, int(meta["bytes"]), int(meta["rows"]), meta.get("checksum"))


def merge_parts(
    store: ObjectStore,
    segment_uuid: str,
    fragment_ids: Sequence[int],
    kind: str,
    options: IndexOptions,
    parts: Sequence[BuiltPart],
) -> IndexSegment:
    """The segment of ``parts`` (in part order): a lone part is the segment already; several are
    merged natively into ``segment.lidx`` and removed."""
    fids = tuple(fragment_ids)
    if len(parts) == 1 and parts[0].path == segment_path(segment_uuid):
        p = parts[0]
        return IndexSegment(segment_uuid, p.path, p.bytes, p.rows, fids, p.checksum)
    with contextlib.ExitStack() as staged:
        inputs = [(staged.enter_context(store.staged_input(p.path, p.bytes)).path, store.describe(p.path)) for p in parts]
        rel = segment_path(segment_uuid)
        meta = write_segment(store, rel, lambda out: _native.merge_index_segments(kind, inputs, out, **options.native()))
    store.delete([p.path for p in parts])
    return IndexSegment(segment_uuid, rel, int(meta["bytes"]), int(meta["rows"]), fids, meta.get("checksum"))


def segment_for_outputs(
    store: ObjectStore,
    column: str,
    kind: str,
    options: IndexOptions,
    outputs: list[tuple[str, int]],
    *,
    field: pa.Field | None = None,
    physical: pa.Schema | None = None,
) -> IndexSegment:
    """Builds one segment over freshly written data files (local paths, rows), ordinal = position;
    used by compaction before the outputs have fragment ids (the commit fills them in). ``field``: the
    column's field today, and ``physical``: the schema the outputs are written in when it may be an
    earlier one (a binary copy keeps its sources' schema): the column is then read by its field id
    (``lamina.evolution.source_of``), as ``read_key_column`` reads a fragment."""
    columns: list[pa.Array | pa.ChunkedArray] = []
    for local, rows in outputs:
        values = _column_values(functools.partial(_open_local, local), rows, column, kind, field, physical)
        if len(values) != rows:
            raise CorruptFile(f"compaction output {local} has {len(values)} rows, expected {rows}")
        columns.append(values)
    return segment_over(store, kind, options, columns)


def _as_read(kind: str, values: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """Values as ``segment_for_outputs`` reads them from a file: a bitmap's strings dictionary-encoded."""
    t = values.type
    if (
        kind == "bitmap"
        and not pa.types.is_dictionary(t)
        and (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t))
    ):
        return values.dictionary_encode()
    return values


def segment_over(
    store: ObjectStore, kind: str, options: IndexOptions, outputs: Sequence[pa.Array | pa.ChunkedArray]
) -> IndexSegment:
    """One segment over the indexed column of each output (ordinal = position), from the values in memory:
    a clustering rewrite holds its outputs' rows when it writes them."""
    inputs = [(ordinal, key_array(_as_read(kind, values))) for ordinal, values in enumerate(outputs)]
    seg_uuid = uuid.uuid4().hex
    rel = segment_path(seg_uuid)
    meta = write_segment(store, rel, lambda local: build_local(kind, inputs, local, options))
    return IndexSegment(seg_uuid, rel, int(meta["bytes"]), int(meta["rows"]), tuple(-1 for _ in outputs), meta.get("checksum"))
