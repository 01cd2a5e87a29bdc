"""Filtered reads through btree and bitmap indices, and ``explain``.

A filter's top-level AND terms of the shapes ``col = v``, ``col IN (…)``,
``col <op> v`` and ``col BETWEEN a AND b`` are answered by a btree or bitmap index
on ``col``. The terms on one column are intersected in the key domain into one
range, or a set of points when some term is an IN list (``_column_ranges``); a NaN
or NULL bound, or bounds that cross, leave nothing (no comparison with NaN or NULL
is true), and a term that is not a range or a set of points is left to the
re-check. For every fragment an index covers, the index gives candidate offsets
(a superset of the matches); deleted offsets are dropped, the rows are read and
the **whole** filter is applied to them, so results equal a scan exactly. Only
when the filter is exactly the AND of terms the indices answered in full
(``Plan.exact``) are the candidates the answer without the re-check. Fragments
no index covers, and fragments where candidates exceed ``TAKE_FRACTION`` of the
rows, are scanned. Results keep table order (fragment, then offset).

A broken index (missing or corrupt segment) is logged as a warning and the
fragments it serves are scanned; set ``LAMINA_INDEX_ON_ERROR=raise`` to get the
error instead.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa

from lamina import arrays, prune
from lamina.datafile import open_parquet
from lamina.deletion import among, read_deleted
from lamina.errors import CorruptFile, LaminaError, ObjectNotFound
from lamina.expr import Conjunct
from lamina.filter import Filter
from lamina.index.segments import fetch_blocks, on_broken, open_segment
from lamina.keys import key_array, key_value
from lamina.manifest import ADDRESS_SHIFT, Fragment, FragmentList, IndexEntry, Manifest, ManifestSegment
from lamina.store import ObjectStore

log = logging.getLogger("lamina.index")

#: Above this fraction of a fragment's rows, candidates are not fetched one by one: the fragment is scanned.
TAKE_FRACTION = 0.25
_MASK = np.uint64(0xFFFFFFFF)
_SHIFT = np.uint64(ADDRESS_SHIFT)


# -- planning ------------------------------------------------------------------
@dataclass
class Part:
    """One column's conjuncts, answered by one index."""

    column: str
    texts: list[str]
    ranges: list[tuple[Any, bool, Any, bool]]  # key-domain bounds
    index: IndexEntry
    coverage: dict[int, int] = field(default_factory=dict)  # fragment id -> segment position


@dataclass
class Plan:
    parts: list[Part]
    #: The version's fragments, in table order (a ``FragmentList`` streams them: iterate, don't index).
    fragments: Sequence[Fragment]
    #: The filter is exactly the AND of what the parts answer: on fragments every part covers,
    #: the candidates are the answer and the filter need not be re-applied.
    exact: bool = False

    def served(self, fid: int) -> list[Part]:
        return [p for p in self.parts if fid in p.coverage]


def _keys(scalars: Sequence[pa.Scalar]) -> list[Any]:
    """Filter literals (of the column's type) as keys, in one conversion; None for nulls."""
    if not scalars:
        return []
    try:
        keys = key_array(arrays.array_of_scalars(scalars, scalars[0].type)).to_pylist()
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        return [key_value(s) for s in scalars]
    return [k.encode() if isinstance(k, str) else k for k in keys]


def _point_keys(points: pa.Array) -> np.ndarray:
    """An IN list's values (an array of the column's type) as points: distinct, sorted keys, NULL and NaN
    dropped (they equal nothing). Numeric keys stay one numpy array, so a list of many keys (a merge's
    source keys) costs no Python step per key; bytes keys go through Python values."""
    try:
        keys = key_array(points.drop_null())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
        return _points([key_value(s) for s in points])
    if pa.types.is_int64(keys.type) or pa.types.is_uint64(keys.type) or pa.types.is_float64(keys.type):
        values = arrays.to_numpy(keys)
        if values.dtype.kind == "f":
            values = values[~np.isnan(values)]
        return np.unique(values)  # -0.0 and 0.0 are one key
    return _points([k.encode() if isinstance(k, str) else k for k in keys.to_pylist()])


def _points(keys: list[Any]) -> np.ndarray:
    """Keys (Python values of one kind) as points: distinct and sorted, None and NaN dropped."""
    kept = [k for k in keys if k is not None and not (isinstance(k, float) and math.isnan(k))]
    if kept and isinstance(kept[0], bytes):
        values = np.empty(len(kept), dtype=object)  # not np.array(kept): that would make fixed-width bytes
        values[:] = kept
        return np.unique(values)
    return np.unique(np.array(kept))


def _is_point(r: tuple[Any, bool, Any, bool]) -> bool:
    return r[0] is not None and r[1] and r[3] and (r[0] is r[2] or r[0] == r[2])


def _is_nan(k: Any) -> bool:
    return isinstance(k, float) and math.isnan(k)


class _KeySet:
    """The AND of one column's conjuncts as keys: within one range, and (when some conjunct is
    a list of points) among a set of points. A NaN or null bound, or an empty intersection,
    leaves nothing: every comparison with NaN or NULL is false, so the terms match no row.
    Points are a sorted numpy array (``_point_keys``): intersected and bounded without a Python
    step per key."""

    def __init__(self) -> None:
        self.lo: Any = None
        self.lo_inc = False
        self.hi: Any = None
        self.hi_inc = False
        self.points: np.ndarray | None = None
        self.empty = False

    def add_range(self, lo: Any, lo_inc: bool, hi: Any, hi_inc: bool) -> None:
        if _is_nan(lo) or _is_nan(hi):
            self.empty = True
            return
        if lo is not None and (self.lo is None or lo > self.lo or (lo == self.lo and not lo_inc)):
            self.lo, self.lo_inc = lo, lo_inc
        if hi is not None and (self.hi is None or hi < self.hi or (hi == self.hi and not hi_inc)):
            self.hi, self.hi_inc = hi, hi_inc
        if self.lo is not None and self.hi is not None:
            if self.lo > self.hi or (self.lo == self.hi and not (self.lo_inc and self.hi_inc)):
                self.empty = True

    def add_points(self, points: np.ndarray) -> None:
        """``points``: distinct and sorted (``_point_keys`` / ``_points``)."""
        self.points = points if self.points is None else np.intersect1d(self.points, points, assume_unique=True)

    def _within(self, keys: np.ndarray) -> np.ndarray:
        keep = np.ones(len(keys), dtype=bool)
        if self.lo is not None:
            keep &= (keys >= self.lo) if self.lo_inc else (keys > self.lo)
        if self.hi is not None:
            keep &= (keys <= self.hi) if self.hi_inc else (keys < self.hi)
        return keep

    def ranges(self) -> list[tuple[Any, bool, Any, bool]]:
        if self.empty:
            return []
        if self.points is None:
            return [(self.lo, self.lo_inc, self.hi, self.hi_inc)]
        points = self.points
        if len(points) and (self.lo is not None or self.hi is not None):
            points = points[self._within(points)]
        return [(k, True, k, True) for k in points.tolist()]


def _column_ranges(conjs: Sequence[Conjunct]) -> tuple[list[tuple[Any, bool, Any, bool]], list[Conjunct]]:
    """Key ranges whose union is exactly the AND of ``conjs`` (all on one column), and the
    conjuncts they account for (a conjunct of several ranges that are not all points is left out:
    its rows are then re-checked)."""
    acc, used = _KeySet(), []
    for c in conjs:
        if c.points is not None:
            acc.add_points(_point_keys(c.points))
        elif len(c.ranges) == 1:
            lo, lo_inc, hi, hi_inc = c.ranges[0]
            lo_k, hi_k = _keys([lo])[0] if lo is not None else None, _keys([hi])[0] if hi is not None else None
            if (lo is not None and lo_k is None) or (hi is not None and hi_k is None):
                acc.empty = True  # a NULL bound: the comparison is never true
            else:
                acc.add_range(lo_k, lo_inc, hi_k, hi_inc)
        elif all(_is_point(r) for r in c.ranges):
            acc.add_points(_points(_keys([r[0] for r in c.ranges])))
        else:
            continue
        used.append(c)
    return acc.ranges(), used


def _pick_index(manifest: Manifest, column: str, is_range: bool) -> IndexEntry | None:
    candidates = [ix for ix in manifest.indices if ix.column == column and ix.kind in ("btree", "bitmap")]
    if not candidates:
        return None
    prefer = "btree" if is_range else "bitmap"
    return sorted(candidates, key=lambda ix: (ix.kind != prefer, ix.name))[0]


def plan_filter(manifest: Manifest, flt: Filter) -> Plan:
    """Which index answers which conjunct, over which fragments."""
    by_column: dict[str, list[Conjunct]] = {}
    for c in flt.conjuncts:
        by_column.setdefault(c.column, []).append(c)
    live: set[int] | None = None  # the version's fragment ids, collected only when an index serves
    parts = []
    exact = flt.pure
    for column, conjs in by_column.items():
        is_range = any(c.is_range for c in conjs)
        index = _pick_index(manifest, column, is_range)
        if index is None:
            exact = False
            continue
        key_ranges, chosen = _column_ranges(conjs)
        exact = exact and len(chosen) == len(conjs)
        if live is None:
            live = {f.id for f in manifest.fragments}
        parts.append(Part(column, [c.text for c in chosen], key_ranges, index, index.coverage(live)))
    return Plan(parts, manifest.fragments, exact and bool(parts))


# -- lookups -------------------------------------------------------------------
def _global(seg_fids: np.ndarray, local: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(fragment ids, offsets) of local addresses; fragment -1 where the ordinal is unknown."""
    ordinals = (local >> _SHIFT).astype(np.int64)
    ok = ordinals < len(seg_fids)
    fids = np.full(len(local), -1, dtype=np.int64)
    fids[ok] = seg_fids[ordinals[ok]]
    return fids, (local & _MASK).astype(np.uint32)


def lookup_part(store: ObjectStore, part: Part) -> tuple[dict[int, np.ndarray], set[int]]:
    """Candidate offsets per served fragment, and the fragments whose segment is broken."""
    out: dict[int, np.ndarray] = {}
    broken: set[int] = set()
    by_segment: dict[int, list[int]] = {}
    for fid, si in part.coverage.items():
        by_segment.setdefault(si, []).append(fid)
    for si, fids in by_segment.items():
        seg = part.index.segments[si]
        try:
            reader = open_segment(store, seg, part.index.name)
            blocks = fetch_blocks(store, seg, part.index.name, reader.blocks_for_ranges(part.ranges))
            local = arrays.to_numpy(reader.lookup(part.ranges, blocks))
        except (CorruptFile, ObjectNotFound) as e:
            on_broken(part.index, e, f"index {part.index.name!r}")
            broken.update(fids)
            continue
        gf, offs = _global(np.asarray(seg.fragment_ids, dtype=np.int64), local)
        empty = np.zeros(0, dtype=np.uint32)
        wanted = set(fids)
        for fid in fids:
            out[fid] = empty
        order = np.argsort(gf, kind="stable")  # one pass: group the offsets by fragment
        gf, offs = gf[order], offs[order]
        cuts = np.flatnonzero(np.concatenate([[True], gf[1:] != gf[:-1]])) if len(gf) else np.zeros(0, np.int64)
        for at, end in zip(cuts.tolist(), np.concatenate([cuts[1:], [len(gf)]]).tolist()):
            fid = int(gf[at])
            if fid in wanted:
                out[fid] = offs[at:end]
    return out, broken


@dataclass
class ReadCounts:
    """What ``plan_reads`` decided so far, counted as it goes."""

    index_fragments: int = 0
    scanned_fragments: int = 0
    candidate_rows: int = 0
    #: Fragments their zone maps ruled out: no file opened.
    zone_pruned_fragments: int = 0


@dataclass(frozen=True)
class Read:
    """What a read does with one fragment of the version: ``offsets`` None, scan it (its row groups
    pruned by statistics); else take those rows, the index's live candidates (sorted). ``final``: those
    rows (scanning: every live row, as its zone maps show) are exactly the matches, so the filter is not
    applied to them. ``position``: the fragment's place in the table."""

    fragment: Fragment
    position: int
    offsets: np.ndarray | None = None
    final: bool = False


def plan_reads(
    store: ObjectStore,
    manifest: Manifest,
    flt: Filter | None,
    *,
    use_index: bool = True,
    only: frozenset[int] | None = None,
    counts: ReadCounts | None = None,
) -> Iterator[Read]:
    """The fragments a read of ``flt`` (None: every row) must touch, one ``Read`` each, in table order
    (``lamina.scan.Scanner`` reads them): fragments the indices answer with no candidate, or their zone
    maps (or their manifest segment's) rule out, are left out unopened. One streaming pass over the version's fragments (the index
    lookups come first); ``only``: just these fragment ids. ``counts`` is filled in as it goes."""
    schema = manifest.schema
    sel = counts if counts is not None else ReadCounts()
    plan = plan_filter(manifest, flt) if (use_index and flt is not None) else Plan([], manifest.fragments)
    candidates: dict[int, np.ndarray] = {}
    answered: dict[int, int] = {}  # fragment -> parts that answered for it
    for part in plan.parts:
        found, broken = lookup_part(store, part)
        for fid, offs in found.items():
            if fid in broken:
                continue
            candidates[fid] = offs if fid not in candidates else np.intersect1d(candidates[fid], offs, assume_unique=True)
            answered[fid] = answered.get(fid, 0) + 1
    final_all = plan.exact and len(plan.parts) > 0
    frags = plan.fragments
    skip = (
        prune.segments_ruled_out(schema, flt, manifest.schemas.values())
        if flt is not None and isinstance(frags, FragmentList)
        else None
    )
    ruled_out = prune.fragments_ruled_out(schema, flt) if flt is not None else None
    all_match = prune.fragments_all_match(schema, flt) if flt is not None else None

    def runs() -> Iterator[tuple[int, Sequence[Fragment]]]:
        """(position of the first fragment, fragments) runs in table order; a manifest segment whose
        zone maps rule the filter out is skipped unread."""
        if skip is None or not isinstance(frags, FragmentList):
            yield 0, frags
            return
        at = 0
        for part, items in frags.runs(skip):
            if items is None:
                assert isinstance(part, ManifestSegment)  # only segments are skipped
                sel.zone_pruned_fragments += part.count
                at += part.count
                continue
            yield at, items
            at += len(items)

    for first, items in runs():
        for at, frag in enumerate(items, first):
            if only is not None and frag.id not in only:
                continue
            if frag.id in answered:
                sel.index_fragments += 1
                offs = candidates[frag.id]
                if len(offs) and frag.deletion is not None:
                    offs = offs[~among(offs, read_deleted(store, frag))]
                if len(offs) <= TAKE_FRACTION * frag.rows:
                    if len(offs):
                        sel.candidate_rows += len(offs)
                        yield Read(frag, at, np.sort(offs), final_all and answered[frag.id] == len(plan.parts))
                    continue
                sel.index_fragments -= 1  # too many candidates: scanned instead
            if ruled_out is not None and ruled_out(frag):
                sel.zone_pruned_fragments += 1  # its zone maps rule it out: no file opened
                continue
            sel.scanned_fragments += 1
            yield Read(frag, at, final=all_match is not None and all_match(frag))


def explain(manifest: Manifest, flt: Filter, where: str, store: ObjectStore | None = None, map_fn=None) -> str:
    """How ``flt`` would be answered at this version, one line per decision; with ``store``, also
    what Parquet statistics prune of the scanned fragments (their footers are read, and cached)."""
    plan = plan_filter(manifest, flt)
    n = len(plan.fragments)
    lines = [f"filter: {flt.text}", f"table: {where} version {manifest.version}, {n} fragments, {manifest.rows} rows"]
    if not flt.conjuncts:
        lines.append("no index can serve this filter (only top-level AND of =, IN, <, <=, >, >=, BETWEEN on a column can be)")
    indexed_cols = {p.column for p in plan.parts}
    for c in flt.conjuncts:
        if c.column not in indexed_cols:
            lines.append(f"  {c.text}: no btree/bitmap index on column {c.column!r}")
    served = set()
    for p in plan.parts:
        served |= set(p.coverage)
        segs = len(set(p.coverage.values()))
        lines.append(
            f"  {' AND '.join(p.texts)}: index {p.index.name!r} ({p.index.kind}), {len(p.coverage)}/{n} fragments "
            f"in {segs} segment(s)"
        )
    scanned = [f.id for f in plan.fragments if f.id not in served]
    lines.append(
        f"index lookups for {len(served)} fragment(s); scan for {len(scanned)} fragment(s)"
        + (f" {scanned[:20]}{' …' if len(scanned) > 20 else ''}" if scanned else "")
    )
    if served:
        how = (
            "the filter is exactly these index terms: on fragments every index covers, candidates are the answer"
            if plan.exact
            else "the whole filter is re-applied to candidate rows"
        )
        lines.append(f"{how}; fragments where candidates exceed {TAKE_FRACTION:.0%} of the rows are scanned instead")
    unserved = [f for f in plan.fragments if f.id not in served]
    kept, zoned = prune.prune_fragments(unserved, manifest.schema, flt)
    if unserved:
        lines.append(
            f"zone maps: {zoned} of the {len(unserved)} fragment(s) to scan pruned without opening their files"
            + ("" if any(f.zones is not None for f in unserved) else " (no fragment has zone maps: written before them)")
        )
    if store is not None:
        lines.append(_pruning(store, manifest, flt, kept, map_fn))
    return "\n".join(lines)


def _pruning(store: ObjectStore, manifest: Manifest, flt: Filter, scanned: list[Fragment], map_fn) -> str:
    """One line: the row groups and fragments of a scan that Parquet statistics prune."""
    try:
        s = prune.summarize(store, scanned, manifest.schema, flt, lambda f: open_parquet(store, f), map_fn)
    except LaminaError as e:
        return f"statistics: footers not read ({e})"
    if s is None:
        return (
            "statistics: no term of this filter can prune row groups (these can: =, !=, <, <=, >, >=, BETWEEN, IN, "
            "IS [NOT] NULL, TRUE/FALSE and AND/OR/NOT of them, on integer, float, boolean, string, binary, timestamp "
            "and date columns)"
        )
    ids = s.pruned_ids or []
    shown = f" {ids[:20]}{' …' if len(ids) > 20 else ''}" if ids else ""
    return (
        f"statistics: the scan reads {s.row_groups - s.row_groups_pruned}/{s.row_groups} row groups "
        f"({s.row_groups_pruned} pruned by min/max/null count) of {s.fragments} fragment(s); "
        f"{s.fragments_pruned} fragment(s) pruned entirely{shown}"
    )
