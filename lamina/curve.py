"""Space-filling curves: the math that clusters a table's rows on one to four key columns, so that rows
near each other in key space share files and zone maps (``lamina.zones``) let a filter skip the rest.

    column ──sample_boundaries──▶ boundaries (quantiles, kept in the manifest as JSON)
    column + boundaries ──cells──▶ a cell per row and key, on a grid of 2**CELL_BITS per key
    cells of 1-4 keys ──curve_index──▶ a position on the curve ──sort_order──▶ the rows' order
    a fragment's zone + boundaries ──cell_range──▶ its extent ──overlap_stats──▶ how well a key clusters

Cells are quantiles, not equal ranges of values: a skewed key still spreads its rows over the whole
grid, and a curve over cells gives every key the same weight whatever its units. Values are compared
in the key domain of ``lamina.zones`` (timestamps in ns, dates as integers, strings as UTF-8 bytes), so
a fragment's zone map maps onto the same cells as its rows. Nulls take the first cell and NaN the last
(NaN sorts above every number, as in Polars). Pure: numpy and pyarrow, no I/O.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidArgument
from lamina.zones import UNIT_NS, ZONE_BYTES, key_kind, zone_value, zone_value_from_json

CURVES = ("hilbert", "zorder", "linear")
#: Cells per key: 2**CELL_BITS, whatever the number of boundaries.
CELL_BITS = 8
MAX_KEYS = 4

_INT64_MAX = 2**63 - 1


# -- the key domain ------------------------------------------------------------------------------
class _Keys(NamedTuple):
    """A column in its key domain. ``values`` is numpy (int64, float64, or Python ints in an object
    array when they overflow int64) or, for strings and binaries, an Arrow binary array: Arrow compares
    bytes vectorised, numpy only one Python object at a time. Values at null and NaN rows are arbitrary."""

    kind: str
    type: pa.DataType
    values: Any
    nulls: np.ndarray
    nans: np.ndarray


def _keys(column: pa.Array | pa.ChunkedArray, name: str | None = None) -> _Keys:
    t = column.type
    kind = key_kind(t)
    if kind is None:
        of = f"column {name!r} of type {t}" if name is not None else f"a column of type {t}"
        raise InvalidArgument(
            f"cannot cluster on {of}: clustering keys are integers, floats, booleans, strings, binaries, timestamps or dates"
        )
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    n = len(arr)
    nulls = arr.is_null().to_numpy(zero_copy_only=False) if arr.null_count else np.zeros(n, dtype=bool)
    nans = np.zeros(n, dtype=bool)
    values: Any
    if kind == "bytes":
        binary = pa.large_binary() if pa.types.is_large_string(t) or pa.types.is_large_binary(t) else pa.binary()
        values = pc.fill_null(arr.cast(binary), pa.scalar(b"", binary))
    elif kind == "float":
        values = pc.fill_null(arr.cast(pa.float64()), 0.0).to_numpy(zero_copy_only=False)
        nans = np.isnan(values)
    else:
        values = _int_keys(kind, t, arr)
    return _Keys(kind, t, values, nulls, nans)


def _int_keys(kind: str, t: pa.DataType, arr: pa.Array) -> np.ndarray:
    """Integer keys as int64, or as Python ints when they do not fit (uint64 above 2**63, timestamps
    in seconds far from 1970 once in ns)."""
    if kind == "date32":
        arr = arr.cast(pa.int32())
    elif kind != "int" or t != pa.uint64():
        arr = arr.cast(pa.int64())  # bool, date64, timestamps: their integers
    scale = UNIT_NS[t.unit] if kind == "ts" else 1
    lo, hi = (pc.min_max(arr)[k].as_py() for k in ("min", "max"))
    if lo is not None and (hi * scale > _INT64_MAX or lo * scale < -_INT64_MAX - 1):
        return np.array([0 if v is None else v * scale for v in arr.to_pylist()], dtype=object)
    ints = pc.fill_null(arr.cast(pa.int64()), 0).to_numpy(zero_copy_only=False)
    return ints * scale if scale != 1 else ints


def key_values(column: pa.Array | pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(keys, null_mask, nan_mask)``: the column in its key domain (int64; float64; bytes in an object
    array; Python ints in an object array when they overflow int64) and its null and NaN rows, at which
    the keys are arbitrary.

    >>> key_values(pa.array([2.5, None, float("nan")]))[1:]
    (array([False,  True, False]), array([False, False,  True]))
    """
    keys = _keys(column)
    values = keys.values.to_numpy(zero_copy_only=False) if keys.kind == "bytes" else keys.values
    return values, keys.nulls, keys.nans


# -- boundaries: quantiles of a sample, kept in the manifest ------------------------------------
def sample_boundaries(
    column: pa.Array | pa.ChunkedArray, cells: int = 2**CELL_BITS, sample_rows: int = 200_000, seed: int = 0
) -> list[Any]:
    """Ascending distinct cut points (at most ``cells - 1``) at the quantiles of the column's non-null,
    non-NaN values (of a deterministic sample of ``sample_rows`` of them when there are more), as key
    domain values. A value many rows share is one cut point, so a skewed key gets fewer cells, never an
    empty one; the least value is never one (it shares the first cell with the nulls): an all-equal or
    all-null column gives ``[]``. A string cut point is the shortest prefix of its quantile above every
    sampled value below it, at most ``zones.ZONE_BYTES`` long (the manifest stays small): strings that
    share their first ``ZONE_BYTES`` bytes share a cell, as zone maps cannot tell them apart either.

    >>> sample_boundaries(pa.array(range(100)), cells=4)
    [25, 50, 75]
    """
    if cells < 1 or sample_rows < 1:
        raise InvalidArgument(f"sample_boundaries needs cells >= 1 and sample_rows >= 1, not {cells} and {sample_rows}")
    keys = _keys(column)
    valid = np.flatnonzero(~(keys.nulls | keys.nans))
    if len(valid) > sample_rows:
        rng = np.random.default_rng(seed)
        valid = np.sort(rng.choice(valid, size=sample_rows, replace=False))
    if len(valid) == 0:
        return []
    at = np.arange(1, cells, dtype=np.int64) * len(valid) // cells
    if keys.kind == "bytes":
        sample = keys.values.take(pa.array(valid))
        ordered = sample.take(pc.sort_indices(sample))
        least = ordered[0].as_py()
        quantiles = ordered.take(pa.array(at)).to_pylist()
    else:
        ordered = np.sort(keys.values[valid])
        least = ordered[0]
        quantiles = ordered[at].tolist()
    distinct: list[Any] = []
    for v in quantiles:  # ascending: a value many rows share is one cut point
        if v > (distinct[-1] if distinct else least):
            distinct.append(v)
    if keys.kind != "bytes":
        return distinct
    # A string cuts the sample at the same place with its shortest prefix above the sampled value just below it.
    cuts: list[bytes] = []
    for v in distinct:
        below = ordered[bisect.bisect_left(ordered, v, key=lambda s: s.as_py()) - 1].as_py()
        cut = _separator(below, v)
        if cut > (cuts[-1] if cuts else least):  # not so when two strings differ only past ZONE_BYTES
            cuts.append(cut)
    return cuts


def _separator(below: bytes, v: bytes) -> bytes:
    """The shortest prefix of ``v`` above ``below`` (< ``v``), cut at ``ZONE_BYTES``."""
    common = 0
    while common < min(len(below), len(v), ZONE_BYTES) and below[common] == v[common]:
        common += 1
    return v[: min(common + 1, ZONE_BYTES)]


def boundaries_to_json(boundaries: Sequence[Any]) -> list[Any]:
    """Boundaries as JSON values (``zones.zone_value``: bytes as ``{"b": hex}``, ±inf as ``{"f": "inf"}``)."""
    return [zone_value(v) for v in boundaries]


def boundaries_from_json(raw: Sequence[Any], what: Callable[[], str]) -> list[Any]:
    """``boundaries_to_json``'s inverse; ``what`` names where they were read, for ``CorruptFile``."""
    return [zone_value_from_json(v, what) for v in raw]


# -- cells ---------------------------------------------------------------------------------------
def _scaled(cell: Any, k: int) -> Any:
    """Cells 0..k onto the grid: every key spans it, whatever its number of boundaries ``k``."""
    return cell * 2**CELL_BITS // (k + 1)


def _check_boundaries(keys: _Keys, boundaries: Sequence[Any]) -> None:
    if keys.kind == "bytes":
        fits = all(isinstance(b, bytes) for b in boundaries)
    elif keys.kind == "float":
        fits = all(isinstance(b, (int, float, np.integer, np.floating)) for b in boundaries)
    else:
        fits = all(isinstance(b, (int, np.integer)) for b in boundaries)
    if not fits:
        raise InvalidArgument(
            f"boundaries {list(boundaries)[:3]}... are not keys of a column of type {keys.type}: "
            "sample them again from the column (sample_boundaries)"
        )
    if any(not a < b for a, b in zip(boundaries, boundaries[1:])):
        raise InvalidArgument(f"boundaries must be strictly ascending, got {list(boundaries)[:8]}...")


def _cells(keys: _Keys, boundaries: Sequence[Any]) -> np.ndarray:
    """Unscaled cells: the number of boundaries <= each key (nulls 0, NaN the last)."""
    _check_boundaries(keys, boundaries)
    k = len(boundaries)
    if keys.kind == "bytes":
        raw = _count_le_bytes(keys.values, boundaries)
    else:
        values = keys.values
        if keys.kind == "float":
            bounds = np.array(boundaries, dtype=np.float64)
        elif values.dtype == object or not all(-_INT64_MAX - 1 <= b <= _INT64_MAX for b in boundaries):
            bounds, values = np.array(boundaries, dtype=object), values.astype(object)
        else:
            bounds = np.array(boundaries, dtype=np.int64)
        raw = np.searchsorted(bounds, values, side="right").astype(np.int64)
    raw[keys.nulls] = 0
    raw[keys.nans] = k
    return raw


def _count_le_bytes(values: pa.Array, boundaries: Sequence[bytes]) -> np.ndarray:
    """``searchsorted(boundaries, values, side="right")`` for byte strings: a binary search run on every
    row at once, one Arrow comparison per step."""
    bounds = pa.array(boundaries, type=values.type)
    k = len(bounds)
    lo = np.zeros(len(values), dtype=np.int64)
    hi = np.full(len(values), k, dtype=np.int64)
    for _ in range(k.bit_length()):
        mid = (lo + hi) >> 1
        below = pc.less_equal(bounds.take(pa.array(np.minimum(mid, k - 1))), values).to_numpy(zero_copy_only=False)
        searching = lo < hi
        lo = np.where(searching & below, mid + 1, lo)
        hi = np.where(searching & ~below, mid, hi)
    return lo


def cells(column: pa.Array | pa.ChunkedArray, boundaries: list[Any]) -> np.ndarray:
    """The cell of each row (uint32): the number of boundaries <= its key, scaled onto the grid
    (``cell * 2**CELL_BITS // (len(boundaries) + 1)``); null rows take the first cell, NaN rows the last.

    >>> cells(pa.array([1, 5, None, 9]), [5]).tolist()
    [0, 128, 0, 128]
    """
    return _scaled(_cells(_keys(column), boundaries), len(boundaries)).astype(np.uint32)


def cell_range(lo: Any, hi: Any, boundaries: list[Any], *, has_nulls: bool = False, has_nans: bool = False) -> tuple[int, int]:
    """``(first, last)``: the cells (scaled as ``cells`` does) a fragment can hold whose zone map bounds
    its values by ``[lo, hi]`` (key domain; ``None, None``: it has no non-null, non-NaN value), widened to
    the first cell when it has nulls and to the last when it has NaN. An exclusive ``hi`` (a long string's
    zone) only widens the range; ``hi`` None with ``lo`` set is unbounded above; knowing nothing (no
    bounds, no nulls, no NaN) is the whole grid.

    >>> cell_range(2, 6, [5]), cell_range(None, None, [5], has_nulls=True)
    ((0, 128), (0, 0))
    """
    k = len(boundaries)
    last = _scaled(k, k)

    def cell_of(v: Any) -> int:
        if isinstance(v, float) and math.isnan(v):
            return last
        try:
            return _scaled(bisect.bisect_right(boundaries, v), k)
        except TypeError:
            raise InvalidArgument(f"zone bound {v!r} is not comparable with boundaries {boundaries[:3]}...") from None

    ends = []
    if lo is not None or hi is not None:
        ends += [0 if lo is None else cell_of(lo), last if hi is None else cell_of(hi)]
    if has_nulls:
        ends.append(0)
    if has_nans:
        ends.append(last)
    return (min(ends), max(ends)) if ends else (0, last)


# -- curves --------------------------------------------------------------------------------------
def _check_curve(curve: str, d: int) -> None:
    if curve not in CURVES:
        raise InvalidArgument(f"unknown curve {curve!r}: use one of {', '.join(CURVES)}")
    if not 1 <= d <= MAX_KEYS:
        raise InvalidArgument(f"a curve clusters on 1 to {MAX_KEYS} key columns, not {d}")
    if curve == "linear" and d != 1:
        raise InvalidArgument(f"the linear curve sorts by one key column, not {d}: use hilbert or zorder for several")


def _spread_table(d: int) -> np.ndarray:
    """Each byte with its bits spread ``d`` apart (bit b at b * d): interleaving by table look-up."""
    byte = np.arange(256, dtype=np.uint64)
    out = np.zeros(256, dtype=np.uint64)
    for b in range(8):
        out |= ((byte >> np.uint64(b)) & np.uint64(1)) << np.uint64(b * d)
    return out


def _interleave(axes: list[np.ndarray], bits: int) -> np.ndarray:
    """The bits of ``axes`` interleaved, most significant level first and the first axis first within
    a level: Morton's order, and the Hilbert index from Skilling's transpose."""
    d = len(axes)
    spread = _spread_table(d)
    out = np.zeros(len(axes[0]), dtype=np.uint64)
    for chunk in range(0, bits, 8):
        for j, x in enumerate(axes):
            byte = (x >> np.uint64(chunk)) & np.uint64(0xFF)
            out |= spread[byte] << np.uint64(chunk * d + d - 1 - j)
    return out


def _hilbert_transpose(axes: list[np.ndarray], bits: int) -> None:
    """Skilling's AxesToTranspose ("Programming the Hilbert curve", 2004), in place and on every row at
    once: its branches on a bit become masks of all ones or zeros."""
    d = len(axes)
    one, zero = np.uint64(1), np.uint64(0)
    x0 = axes[0]
    for level in range(bits - 1, 0, -1):  # undo excess work, from the top bit down to bit 1
        low = np.uint64((1 << level) - 1)
        for i in range(d):
            flip = zero - ((axes[i] >> np.uint64(level)) & one)  # all ones where bit `level` of axis i is set
            if i == 0:
                x0 ^= low & flip
            else:
                swap = (x0 ^ axes[i]) & low & ~flip
                x0 ^= (low & flip) | swap
                axes[i] ^= swap
    for i in range(1, d):  # Gray encode
        axes[i] ^= axes[i - 1]
    t = np.zeros_like(x0)
    for level in range(bits - 1, 0, -1):
        t ^= np.uint64((1 << level) - 1) & (zero - ((axes[d - 1] >> np.uint64(level)) & one))
    for i in range(d):
        axes[i] ^= t


def curve_index(cell_matrix: np.ndarray, curve: str, bits: int = CELL_BITS) -> np.ndarray:
    """The position on the curve (uint64) of each row of ``cell_matrix`` (shape ``(n, d)``, 1 <= d <= 4,
    values below ``2**bits``, ``d * bits <= 64``): "zorder" interleaves the bits (Morton), "hilbert" is the
    d-dimensional Hilbert index (consecutive positions are neighbouring cells), "linear" (d = 1) the cell.

    >>> curve_index(np.array([[0, 0], [0, 1], [1, 1], [1, 0]]), "hilbert", bits=1).tolist()
    [0, 1, 2, 3]
    """
    m = np.asarray(cell_matrix)
    if m.ndim != 2:
        raise InvalidArgument(f"curve_index takes a matrix of cells of shape (rows, keys), not of shape {m.shape}")
    d = m.shape[1]
    _check_curve(curve, d)
    if bits < 1 or d * bits > 64:
        raise InvalidArgument(f"{d} keys of {bits} bits do not fit a 64-bit curve position: use 1 to {64 // d} bits")
    if m.size and (not np.issubdtype(m.dtype, np.integer) or m.min() < 0 or m.max() >= 2**bits):
        raise InvalidArgument(f"cells must be integers in [0, 2**{bits}), got {m.dtype} in [{m.min()}, {m.max()}]")
    axes = [m[:, j].astype(np.uint64) for j in range(d)]
    if curve == "linear" or d == 1:  # a one-dimensional Hilbert curve is the line itself
        return axes[0]
    if curve == "hilbert":
        _hilbert_transpose(axes, bits)
    return _interleave(axes, bits)


# -- ordering a table ------------------------------------------------------------------------------
def sort_order(
    table: pa.Table, columns: Sequence[str], curve: str, boundaries: Sequence[list[Any]]
) -> tuple[np.ndarray, np.ndarray]:
    """``(order, positions)``: the stable permutation (int64 row indices) that sorts ``table`` along the
    curve over ``columns``' cells, and the curve position of each row in that order (uint64, ascending).
    "linear" sorts by the column's value itself (nulls first, NaN last; positions are the cells), so rows
    of one cell keep their value order; on the other curves rows of one position keep their input order.
    """
    _check_curve(curve, len(columns))
    if len(boundaries) != len(columns):
        raise InvalidArgument(
            f"sort_order needs one list of boundaries per key column: {len(columns)} columns, {len(boundaries)} lists"
        )
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise InvalidArgument(f"no column {missing[0]!r} to cluster on: the table has {table.column_names}")
    keys = [_keys(table.column(c), c) for c in columns]
    cell_matrix = np.stack([_scaled(_cells(k, b), len(b)) for k, b in zip(keys, boundaries)], axis=1)
    if curve != "linear":
        index = curve_index(cell_matrix, curve)
        order = np.argsort(index, kind="stable")
        return order.astype(np.int64), index[order]
    key = keys[0]
    by = {"value": table.column(columns[0])}
    if key.nulls.any() or key.nans.any():  # nulls, then values, then NaN: whatever Arrow does with NaN
        by = {"rank": np.where(key.nulls, 0, np.where(key.nans, 2, 1)).astype(np.int8), **by}
    order = pc.sort_indices(pa.table(by), sort_keys=[(name, "ascending") for name in by]).to_numpy().astype(np.int64)
    return order, cell_matrix[order, 0].astype(np.uint64)


# -- how well a key clusters ---------------------------------------------------------------------
def overlap_stats(extents: Sequence[tuple[int, int]], bits: int = CELL_BITS) -> tuple[float, float]:
    """``(depth, skipped)`` for one key, from each fragment's ``(first cell, last cell)``: ``depth`` is the
    number of fragments a point of the key's distribution falls into, on average (cells are quantiles, so
    uniform over cells is the data's distribution); ``skipped`` the expected fraction of the fragments a
    point filter on the key skips (0.0 when there are none).

    >>> overlap_stats([(0, 127), (128, 255)])
    (1.0, 0.5)
    """
    if not extents:
        return 0.0, 0.0
    grid = 2**bits
    bad = next(((lo, hi) for lo, hi in extents if not 0 <= lo <= hi < grid), None)
    if bad is not None:
        raise InvalidArgument(f"a fragment's extent must be cells first <= last in [0, {grid}), got {bad}")
    depth = sum(hi - lo + 1 for lo, hi in extents) / grid
    return depth, 1.0 - depth / len(extents)
