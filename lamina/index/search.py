"""Full-text search: BM25 over the fts index's segments, fragments it does not cover analyzed on the fly.

Statistics (documents, average length, document frequencies) are summed over every source
first, then each source ranks its top k under those global statistics, so scores do not
depend on how the table is split into fragments or segments. The hits' rows are then read
by one native call (``hit_rows``), spread over the cores.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence

import numpy as np
import pyarrow as pa

from lamina import _native, evolution
from lamina.datafile import take_many
from lamina.deletion import read_deleted
from lamina.errors import CorruptFile, IndexNotFound, InvalidArgument, ObjectNotFound
from lamina.index.options import IndexOptions, check_indexable
from lamina.index.segments import CACHE, fetch_blocks, on_broken, open_segment, read_key_column
from lamina.io_pool import pool_size
from lamina.manifest import ADDRESS_SHIFT, Fragment, Manifest, find_fragments
from lamina.store import ObjectStore

log = logging.getLogger("lamina.index")


class _TextSource:
    """One segment (stored, or built in memory over an unindexed fragment) as search reads it."""

    def __init__(self, reader: _native.IndexSegment, fids: np.ndarray, serves: set[int], fetch):
        self.reader, self.fids, self.serves, self.fetch = reader, fids, serves, fetch


def _memory_source(store: ObjectStore, frag: Fragment, field: pa.Field, options: IndexOptions) -> _TextSource:
    """A segment built in memory over ``frag``'s text column (today's ``field``, read through the
    schema the file was written in)."""
    values = read_key_column(store, frag, field.name, "fts", field)
    built = _native.build_index_segment("fts", [(0, values)], None, **options.native())
    data: bytes = built["data"]
    off, length = _native.index_directory_range(data, len(data), f"(scan of fragment {frag.id})")
    reader = _native.IndexSegment(
        data[-_native.INDEX_FOOTER_LEN :], data[off : off + length], len(data), f"(scan of fragment {frag.id})"
    )
    return _TextSource(
        reader, np.array([frag.id], dtype=np.int64), {frag.id}, lambda blocks: [(b, data[o : o + n]) for b, o, n in blocks]
    )


def search(
    store: ObjectStore, manifest: Manifest, text: str, column: str | None, k: int, where: str, map_fn=None
) -> tuple[np.ndarray, np.ndarray, str]:
    """Top-k row addresses and BM25 scores for ``text``; also the column searched.

    Statistics (N, average length, document frequencies) are over the live, non-null
    values of the column at this version, so scores do not depend on how the table
    is split into fragments or segments.
    """
    if not isinstance(text, str):
        raise InvalidArgument(f"search text must be a string, not {type(text).__name__}")
    if not isinstance(k, int) or isinstance(k, bool) or k < 1:
        raise InvalidArgument(f"k must be a positive integer, got {k!r}")
    fts = [ix for ix in manifest.indices if ix.kind == "fts" and (column is None or ix.column == column)]
    if column is None:
        if len(fts) != 1:
            names = ", ".join(f"{ix.name} on {ix.column}" for ix in fts) or "none"
            raise IndexNotFound(f"pass column=: table {where} has {len(fts)} full-text indices ({names})")
        column = fts[0].column
    check_indexable(manifest.schema, column, "fts", where)
    field = evolution.with_ids(manifest.schema).field(column)
    index = fts[0] if fts else None
    options = IndexOptions.from_details(index.details) if index else IndexOptions()
    if index is None:
        log.warning(
            "no full-text index on column %r of %s: search analyzes every fragment; create one with create_index(%r, 'fts')",
            column,
            where,
            column,
        )
    terms = _native.analyze_text(text, stem=options.stem, max_token_len=options.max_token_len)
    if not terms:
        return np.zeros(0, np.uint64), np.zeros(0, np.float64), column

    live = manifest.fragment_map()
    coverage = index.coverage(live) if index else {}
    by_segment: dict[int, set[int]] = {}
    for fid, si in coverage.items():
        by_segment.setdefault(si, set()).add(fid)
    scan = [f for f in manifest.fragments if f.id not in coverage]
    mapper = map_fn or (lambda f, xs: [f(x) for x in xs])

    # Phase 1, per segment: its documents (cached) and the query terms' postings, with its share of the statistics.
    def stored(item: tuple[int, set[int]]) -> tuple[_native.TextDocs, _native.TextQuery] | Exception:
        si, fids = item
        assert index is not None  # only segments of the index are looked at
        seg = index.segments[si]
        # the documents depend on the served fragments and their deletion files (immutable, unique paths) only
        key = ("fts-docs", store.uri, seg.path, tuple(sorted((f, d.path if (d := live[f].deletion) else "") for f in fids)))
        docs = CACHE.get(key)
        deleted = None if docs is not None else {f: read_deleted(store, live[f]) for f in fids}  # outside: no index error
        try:
            src = _TextSource(
                open_segment(store, seg, index.name),
                np.asarray(seg.fragment_ids, dtype=np.int64),
                fids,
                lambda blocks: fetch_blocks(store, seg, index.name, blocks),
            )
            docs, query = _text_query(src, terms, docs, deleted)
        except (CorruptFile, ObjectNotFound) as e:
            return e
        CACHE.put(key, docs, docs.size + 256)
        return docs, query

    queries: list[tuple[_native.TextDocs, _native.TextQuery]] = []
    for (_si, fids), got in zip(by_segment.items(), mapper(stored, list(by_segment.items()))):
        if isinstance(got, Exception):
            assert index is not None  # (as above)
            on_broken(index, got, "search")
            scan.extend(live[f] for f in fids)
        else:
            queries.append(got)
    queries += mapper(
        lambda f: _text_query(_memory_source(store, f, field, options), terms, None, {f.id: read_deleted(store, f)}),
        sorted(scan, key=lambda f: f.id),
    )

    docs = sum(d.docs for d, _ in queries)
    dfs = [sum(col) for col in zip(*(q.dfs for _, q in queries))]
    if docs == 0 or not any(dfs):
        return np.zeros(0, np.uint64), np.zeros(0, np.float64), column
    avgdl = sum(d.total_len for d, _ in queries) / docs
    # Phase 2, per segment: its top k under the global statistics; then the top k of those.
    tops = mapper(lambda q: q.top_k(docs, avgdl, dfs, k), [q for _, q in queries if any(q.dfs)])
    addrs = np.concatenate([a.to_numpy(zero_copy_only=False) for a, _ in tops])
    scores = np.concatenate([s.to_numpy(zero_copy_only=False) for _, s in tops])
    if len(tops) > 1:
        order = np.lexsort((addrs, -scores))[:k]  # score descending, then address
        addrs, scores = addrs[order], scores[order]
    return addrs, scores, column


def _text_query(
    src: _TextSource, terms: list[str], docs: _native.TextDocs | None, deleted: dict[int, np.ndarray] | None
) -> tuple[_native.TextDocs, _native.TextQuery]:
    """Phase 1 of a search on one source: its documents (``docs``, or built from the length blocks of the
    fragments it serves and their ``deleted`` offsets) and the query terms' postings over them."""
    term_blocks = [(bid, off, n) for _, bid, off, n in src.reader.term_blocks(terms)]
    if docs is not None:
        return docs, src.reader.text_query(terms, src.fetch(term_blocks), docs)
    assert deleted is not None  # given whenever docs are not
    served = []
    for o, _, _, _, bid, off, n in src.reader.fragment_stats():
        fid = int(src.fids[o]) if o < len(src.fids) else -1
        if fid in src.serves:
            served.append((o, fid, bid, off, n))
    fetched = src.fetch([(bid, off, n) for _, _, bid, off, n in served] + term_blocks)
    docs = src.reader.text_docs(
        [
            (o, fid, bid, data, pa.array(deleted[fid], pa.uint32()) if len(deleted[fid]) else None)
            for (o, fid, bid, _, _), (_, data) in zip(served, fetched)
        ]
    )
    return docs, src.reader.text_query(terms, fetched[len(served) :], docs)


def _idle_cores() -> int:
    """Cores this process may use that the rest of the machine is not using (at least one): the cores
    it may run on less the other runnable work (the 1-minute load average, this process counted once)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    try:
        others = max(0.0, os.getloadavg()[0] - 1.0)
    except OSError:
        others = 0.0
    return max(1, min(cores, int(cores - others + 0.5)))


def hit_rows(store: ObjectStore, manifest: Manifest, schema: pa.Schema, addrs: np.ndarray, columns: Sequence[str]) -> pa.Table:
    """The rows at a search's hit addresses (distinct and live at this version), in the order given,
    ``columns`` only.

    One ``take_many`` reads every hit. A hit costs about one decompressed data page, so the sorted
    addresses are cut into one run per idle core (between row groups where possible: a row group's
    dictionary page is then decoded once), each run its own entry of the native call, which decodes
    the entries in parallel. On a busy machine the threads would only queue behind others (measured:
    half the time with a core idle, ~10 % more with both busy), hence idle cores, not all cores.
    """
    n = len(addrs)
    if not columns or n == 0:  # no data columns asked: nothing to read
        return pa.table({"_": pa.nulls(n)}).drop_columns(["_"]) if n else schema.empty_table().select(list(columns))
    order = np.argsort(addrs, kind="stable")
    ordered = np.asarray(addrs, dtype=np.uint64)[order]
    fids = (ordered >> np.uint64(ADDRESS_SHIFT)).astype(np.int64)
    offsets = (ordered & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    frags = find_fragments(manifest.fragments, np.unique(fids).tolist())
    cuts = np.flatnonzero(fids[1:] != fids[:-1]) + 1
    runs = list(zip([0] + cuts.tolist(), cuts.tolist() + [n]))  # one per fragment
    workers = pool_size(min(n, _idle_cores()))
    if len(runs) < workers:
        # a cut at i is free of duplicate dictionary pages if hits i-1 and i lie in different row groups
        group = np.empty(n, dtype=np.int64)
        for a, b in runs:
            ends = np.cumsum([g.rows for g in frags[int(fids[a])].row_groups])
            group[a:b] = np.searchsorted(ends, offsets[a:b], side="right")
        clean = np.concatenate([[False], group[1:] != group[:-1]])
        while len(runs) < workers:  # halve the longest run
            i = max(range(len(runs)), key=lambda j: runs[j][1] - runs[j][0])
            a, b = runs[i]
            if b - a < 2:
                break
            mid = (a + b) // 2
            between = np.flatnonzero(clean[a + 1 : b]) + a + 1
            cut = int(between[np.argmin(np.abs(between - mid))]) if len(between) else mid
            runs[i : i + 1] = [(a, cut), (cut, b)]
    rows = take_many(store, schema, [frags[int(fids[a])] for a, _ in runs], offsets, [b - a for a, b in runs], columns)
    return rows.take(pa.array(np.argsort(order), type=pa.int64()))  # back into the order of ``addrs``
