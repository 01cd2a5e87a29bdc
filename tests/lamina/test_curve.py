"""Space-filling curves (lamina.curve): the Hilbert curve visits every cell once through neighbours,
Z-order is the bit interleave, boundaries are quantiles that survive skew and the manifest's JSON,
a fragment's zone map covers the cells of its rows, and sorting a table is a stable permutation."""

from __future__ import annotations

import datetime as dt
import itertools
import json

import numpy as np
import pyarrow as pa
import pytest

from lamina import curve, zones
from lamina.curve import CELL_BITS
from lamina.errors import CorruptFile, InvalidArgument

GRID = 2**CELL_BITS


def _grid(d: int, bits: int) -> np.ndarray:
    return np.array(list(itertools.product(range(2**bits), repeat=d)), dtype=np.uint32)


def _scaled_cells(k: int) -> list[int]:
    """Every cell a key with ``k`` boundaries can take, on the grid."""
    return [i * GRID // (k + 1) for i in range(k + 1)]


def _roundtrip(boundaries: list) -> list:
    text = json.dumps(curve.boundaries_to_json(boundaries))
    return curve.boundaries_from_json(json.loads(text), lambda: "test manifest")


# -- curves --------------------------------------------------------------------------------------
@pytest.mark.parametrize("d, bits", [(2, 1), (2, 3), (2, 4), (3, 2), (3, 3), (4, 2)])
def test_hilbert_visits_every_cell_once_each_a_neighbour_of_the_last(d: int, bits: int) -> None:
    points = _grid(d, bits)
    index = curve.curve_index(points, "hilbert", bits)
    assert sorted(index.tolist()) == list(range(2 ** (d * bits)))
    path = points[np.argsort(index)].astype(np.int64)
    assert np.abs(np.diff(path, axis=0)).sum(axis=1).tolist() == [1] * (len(path) - 1)


def test_hilbert_of_one_key_and_linear_are_the_cell_itself() -> None:
    cells = np.arange(GRID).reshape(-1, 1)
    assert curve.curve_index(cells, "hilbert").tolist() == list(range(GRID))
    assert curve.curve_index(cells, "linear").tolist() == list(range(GRID))


@pytest.mark.parametrize("d, bits", [(1, 8), (2, 8), (3, 8), (4, 8), (2, 32), (3, 21), (4, 5)])
def test_zorder_is_the_bit_interleave(d: int, bits: int) -> None:
    rng = np.random.default_rng(d * 100 + bits)
    points = rng.integers(0, 2**bits, size=(500, d), dtype=np.uint64)
    expected = []
    for p in points.tolist():
        z = 0
        for level in reversed(range(bits)):  # the first key's bit is the most significant of each level
            for x in p:
                z = (z << 1) | (x >> level) & 1
        expected.append(z)
    assert curve.curve_index(points, "zorder", bits).tolist() == expected


@pytest.mark.parametrize(
    "cells, kind, bits, message",
    [
        (np.zeros((3, 2), dtype=np.uint32), "peano", CELL_BITS, "unknown curve 'peano': use one of hilbert, zorder, linear"),
        (np.zeros((3, 0), dtype=np.uint32), "zorder", CELL_BITS, "1 to 4 key columns, not 0"),
        (np.zeros((3, 5), dtype=np.uint32), "hilbert", CELL_BITS, "1 to 4 key columns, not 5"),
        (np.zeros((3, 2), dtype=np.uint32), "linear", CELL_BITS, "linear curve sorts by one key column, not 2"),
        (np.full((3, 2), 256), "hilbert", CELL_BITS, r"cells must be integers in \[0, 2\*\*8\)"),
        (np.zeros((3, 3), dtype=np.uint32), "zorder", 22, "use 1 to 21 bits"),
    ],
)
def test_curve_index_says_what_is_allowed(cells: np.ndarray, kind: str, bits: int, message: str) -> None:
    with pytest.raises(InvalidArgument, match=message):
        curve.curve_index(cells, kind, bits)


# -- the key domain ------------------------------------------------------------------------------
def test_key_values_are_the_zone_key_domain() -> None:
    keys, nulls, nans = curve.key_values(pa.array([3, None, -1], type=pa.int8()))
    assert keys.dtype == np.int64 and keys[[0, 2]].tolist() == [3, -1] and nulls.tolist() == [False, True, False]
    keys, nulls, nans = curve.key_values(pa.chunked_array([[1.5, float("nan")], [None]], type=pa.float32()))
    assert keys.dtype == np.float64 and keys[0] == 1.5 and nans.tolist() == [False, True, False] and nulls.tolist()[2]
    keys, _, _ = curve.key_values(pa.array(["b", "é"]))
    assert keys.tolist() == [b"b", "é".encode()]
    assert curve.key_values(pa.array([True, False]))[0].tolist() == [1, 0]
    ts = pa.array([dt.datetime(2024, 1, 2, tzinfo=dt.timezone.utc)], type=pa.timestamp("ms", tz="Europe/Paris"))
    assert curve.key_values(ts)[0].tolist() == [zones.scalar_key("ts", ts.type, ts[0])]
    assert curve.key_values(pa.array([dt.date(1970, 1, 3)], type=pa.date32()))[0].tolist() == [2]
    # beyond int64: Python ints, still exact
    assert curve.key_values(pa.array([2**64 - 1, 0], type=pa.uint64()))[0].tolist() == [2**64 - 1, 0]
    far = pa.array([10**11], type=pa.timestamp("s"))
    assert curve.key_values(far)[0].tolist() == [10**20]


def test_a_column_type_without_keys_is_named() -> None:
    with pytest.raises(InvalidArgument, match=r"type list<item: int64>"):
        curve.key_values(pa.array([[1]]))
    with pytest.raises(InvalidArgument, match="column 'tags' of type list"):
        curve.sort_order(pa.table({"tags": [[1]]}), ["tags"], "linear", [[]])


# -- boundaries ----------------------------------------------------------------------------------
def test_uniform_boundaries_split_rows_into_equal_cells() -> None:
    values = pa.array(np.random.default_rng(0).integers(0, 10**9, 400_000))
    boundaries = curve.sample_boundaries(values)
    assert len(boundaries) == GRID - 1 and boundaries == sorted(set(boundaries))
    assert all(type(b) is int for b in boundaries)
    counts = np.bincount(curve.cells(values, boundaries), minlength=GRID)
    assert counts.min() > 0.8 * len(values) / GRID and counts.max() < 1.2 * len(values) / GRID


def test_skewed_boundaries_collapse_and_leave_no_cell_empty() -> None:
    values = pa.array(np.random.default_rng(0).zipf(1.5, 100_000))
    boundaries = curve.sample_boundaries(values)
    assert 0 < len(boundaries) < GRID - 1 and boundaries == sorted(set(boundaries))
    got = curve.cells(values, boundaries)
    assert sorted(set(got.tolist())) == _scaled_cells(len(boundaries))


def test_sampling_is_deterministic_and_bounded() -> None:
    values = pa.array(np.random.default_rng(0).normal(size=50_000))
    a = curve.sample_boundaries(values, cells=16, sample_rows=1000)
    assert a == curve.sample_boundaries(values, cells=16, sample_rows=1000) and len(a) == 15
    assert a != curve.sample_boundaries(values, cells=16, sample_rows=1000, seed=1)
    assert curve.sample_boundaries(values, cells=1) == []


@pytest.mark.parametrize(
    "column",
    [
        pa.array([7] * 1000),
        pa.array([None] * 1000, type=pa.int64()),
        pa.array([], type=pa.string()),
        pa.array([float("nan"), None, 2.0]),
    ],
    ids=["all-equal", "all-null", "empty", "one-value"],
)
def test_a_column_of_at_most_one_value_has_no_boundaries(column: pa.Array) -> None:
    assert curve.sample_boundaries(column) == []
    assert set(curve.cells(column, []).tolist()) <= {0}


def test_float_boundaries_skip_nan_and_keep_infinities() -> None:
    rng = np.random.default_rng(0)
    raw = np.concatenate([np.full(300, -np.inf), np.full(300, np.inf), rng.normal(size=400), np.full(100, np.nan)])
    shuffled = rng.permutation(raw)
    column = pa.array(list(shuffled) + [None] * 50, type=pa.float64())
    boundaries = curve.sample_boundaries(column, cells=16)
    assert all(type(b) is float for b in boundaries) and boundaries == sorted(set(boundaries))
    assert boundaries[-1] == float("inf") and float("-inf") not in boundaries
    assert _roundtrip(boundaries) == boundaries
    got = curve.cells(column, boundaries)
    k = len(boundaries)
    assert got[-50:].tolist() == [0] * 50
    assert set(got[:-50][np.isnan(shuffled) | (shuffled == np.inf)].tolist()) == {_scaled_cells(k)[-1]}


@pytest.mark.parametrize("string_type", [pa.string(), pa.large_string(), pa.binary()])
def test_string_boundaries_are_short_prefixes(string_type: pa.DataType) -> None:
    rng = np.random.default_rng(0)
    words = [f"{v:05d}é" + ("x" * 100 if i % 3 == 0 else "") for i, v in enumerate(rng.integers(0, 10**5, 5000))]
    column = pa.array([w if string_type != pa.binary() else w.encode() for w in words], type=string_type)
    boundaries = curve.sample_boundaries(column, cells=64)
    assert len(boundaries) == 63 and boundaries == sorted(set(boundaries))
    assert all(type(b) is bytes for b in boundaries) and max(len(b) for b in boundaries) < 20
    assert _roundtrip(boundaries) == boundaries
    got = curve.cells(column, boundaries)
    by_value = np.argsort(np.array([w.encode() for w in words], dtype=object), kind="stable")
    assert np.all(np.diff(got[by_value].astype(np.int64)) >= 0)
    counts = np.bincount(got, minlength=GRID)[_scaled_cells(63)]
    assert counts.min() > 0.5 * len(words) / 64 and counts.max() < 1.5 * len(words) / 64


def test_strings_zone_maps_cannot_tell_apart_share_a_cell() -> None:
    shared = "p" * zones.ZONE_BYTES
    column = pa.array([shared + str(i) for i in range(1000)] + [f"q{i:04d}" for i in range(1000)])
    boundaries = curve.sample_boundaries(column, cells=8)
    assert boundaries[0] == b"q" and all(b.startswith(b"q") for b in boundaries)
    assert set(curve.cells(column.slice(0, 1000), boundaries).tolist()) == {0}


@pytest.mark.parametrize(
    "column",
    [
        pa.array(
            [dt.datetime(2024, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(minutes=7 * i) for i in range(3000)],
            pa.timestamp("us", tz="UTC"),
        ),
        pa.array([dt.date(2000, 1, 1) + dt.timedelta(days=i) for i in range(3000)], pa.date32()),
        pa.array([dt.date(1960, 1, 1) + dt.timedelta(days=i) for i in range(3000)], pa.date64()),
    ],
    ids=["timestamp-tz", "date32", "date64"],
)
def test_temporal_boundaries_are_the_zone_integers(column: pa.Array) -> None:
    boundaries = curve.sample_boundaries(column, cells=10)
    kind = zones.key_kind(column.type)
    assert kind is not None
    expected = [zones.scalar_key(kind, column.type, column[i * 3000 // 10]) for i in range(1, 10)]
    assert boundaries == expected and all(type(b) is int for b in boundaries)
    assert _roundtrip(boundaries) == boundaries
    assert curve.cells(column, boundaries).tolist() == [_scaled_cells(9)[i * 10 // 3000] for i in range(3000)]


def test_malformed_boundaries_are_refused() -> None:
    with pytest.raises(CorruptFile, match="test manifest: malformed zone bound"):
        curve.boundaries_from_json([1, {"f": "nan"}], lambda: "test manifest")
    with pytest.raises(InvalidArgument, match="strictly ascending"):
        curve.cells(pa.array([1, 2]), [3, 3])
    with pytest.raises(InvalidArgument, match="not keys of a column of type string: sample them again"):
        curve.cells(pa.array(["a"]), [1, 2])
    with pytest.raises(InvalidArgument, match="not keys of a column of type int64"):
        curve.cells(pa.array([1]), [1.5])


# -- cells ---------------------------------------------------------------------------------------
def test_cells_are_monotone_with_nulls_first_and_nan_last() -> None:
    rng = np.random.default_rng(0)
    values = rng.normal(size=2000)
    column = pa.array(list(values) + [None, float("nan")])
    boundaries = curve.sample_boundaries(column, cells=20)
    got = curve.cells(column, boundaries)
    assert got.dtype == np.uint32 and got[-2] == 0 and got[-1] == _scaled_cells(len(boundaries))[-1]
    assert np.all(np.diff(got[np.argsort(values)].astype(np.int64)) >= 0)
    # a value equal to a boundary opens that boundary's cell
    assert curve.cells(pa.array([0.5, 1.0, 1.5, 2.0]), [1.0, 2.0]).tolist() == [0, 85, 85, 170]


def _table(rng: np.random.Generator, n: int) -> pa.Table:
    floats = rng.normal(size=n)
    floats[rng.random(n) < 0.05] = np.nan
    floats[rng.random(n) < 0.02] = np.inf
    words = [("p" * 80 if v % 4 == 0 else "") + str(v) for v in rng.integers(0, 1000, n)]
    mask = rng.random(n) < 0.05
    return pa.table(
        {
            "i": pa.array(rng.zipf(1.3, n), mask=mask),
            "f": pa.array(floats, mask=rng.random(n) < 0.05),
            "s": pa.array(words, mask=mask),
            "t": pa.array(rng.integers(0, 10**6, n), pa.timestamp("s", tz="UTC")),
        }
    )


def test_a_fragments_cell_range_covers_the_cells_of_its_rows() -> None:
    rng = np.random.default_rng(7)
    table = _table(rng, 3000)
    boundaries = {c: curve.sample_boundaries(table[c], cells=32) for c in table.column_names}
    for _ in range(200):
        rows = np.sort(rng.choice(len(table), size=int(rng.integers(1, 60)), replace=False))
        fragment = table.take(rows)
        for zone in zones.zones_of(fragment.to_batches(), fragment.schema):
            b = boundaries[zone.column]
            first, last = curve.cell_range(zone.lo, zone.hi, b, has_nulls=zone.nulls > 0, has_nans=zone.nans > 0)
            got = curve.cells(fragment[zone.column], b)
            assert first <= got.min() and got.max() <= last, (zone, b)


def test_cell_range_of_what_a_zone_cannot_say() -> None:
    b = [10, 20, 30]
    assert curve.cell_range(None, None, b, has_nulls=True) == (0, 0)
    assert curve.cell_range(None, None, b, has_nans=True) == (192, 192)
    assert curve.cell_range(15, None, b) == (64, 192)  # unbounded above
    assert curve.cell_range(None, None, b) == (0, 192)  # nothing known: anywhere
    assert curve.cell_range(20, 20, b, has_nulls=True) == (0, 128)


# -- sort order ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kind, columns", [("hilbert", ["i", "f"]), ("zorder", ["s", "t", "f"]), ("hilbert", ["i", "f", "s", "t"])]
)
def test_sort_order_is_a_stable_permutation_along_the_curve(kind: str, columns: list[str]) -> None:
    table = _table(np.random.default_rng(1), 5000)
    boundaries = [curve.sample_boundaries(table[c]) for c in columns]
    order, positions = curve.sort_order(table, columns, kind, boundaries)
    assert order.dtype == np.int64 and positions.dtype == np.uint64
    assert sorted(order.tolist()) == list(range(len(table)))
    cells = np.stack([curve.cells(table[c], b) for c, b in zip(columns, boundaries)], axis=1)
    index = curve.curve_index(cells, kind)
    assert positions.tolist() == index[order].tolist() and np.all(np.diff(positions.astype(np.int64)) >= 0)
    ties = np.flatnonzero(np.diff(positions.astype(np.int64)) == 0)
    assert np.all(order[ties] < order[ties + 1])  # rows of one position keep their input order
    again, _ = curve.sort_order(table, columns, kind, boundaries)
    assert again.tolist() == order.tolist()


def test_linear_sorts_by_value_nulls_first_nan_last() -> None:
    values = [2.5, None, float("nan"), -1.0, 2.5, None, float("inf"), float("nan"), 0.0]
    table = pa.table({"x": pa.array(values, type=pa.float64())})
    boundaries = curve.sample_boundaries(table["x"], cells=4)
    order, positions = curve.sort_order(table, ["x"], "linear", [boundaries])
    assert order.tolist() == [1, 5, 3, 8, 0, 4, 6, 2, 7]
    assert positions.tolist() == curve.cells(table["x"], boundaries)[order].tolist()
    assert np.all(np.diff(positions.astype(np.int64)) >= 0)


def test_linear_keeps_value_order_inside_a_cell() -> None:
    table = pa.table({"s": ["d", "b", "c", "a", "b"]})
    order, positions = curve.sort_order(table, ["s"], "linear", [[]])
    assert order.tolist() == [3, 1, 4, 2, 0] and positions.tolist() == [0] * 5


@pytest.mark.parametrize("kind", curve.CURVES)
def test_rows_with_equal_keys_keep_their_input_order(kind: str) -> None:
    table = pa.table({"a": [5] * 100})
    order, positions = curve.sort_order(table, ["a"], kind, [curve.sample_boundaries(table["a"])])
    assert order.tolist() == list(range(100)) and positions.tolist() == [0] * 100


def test_sort_order_names_what_is_wrong() -> None:
    table = pa.table({"a": [1, 2]})
    with pytest.raises(InvalidArgument, match=r"no column 'b' to cluster on: the table has \['a'\]"):
        curve.sort_order(table, ["b"], "hilbert", [[]])
    with pytest.raises(InvalidArgument, match="one list of boundaries per key column: 1 columns, 2 lists"):
        curve.sort_order(table, ["a"], "hilbert", [[], []])
    with pytest.raises(InvalidArgument, match="use hilbert or zorder"):
        curve.sort_order(table, ["a", "a"], "linear", [[], []])
    assert curve.sort_order(table.slice(0, 0), ["a", "a"], "zorder", [[], []])[0].tolist() == []


# -- overlap -------------------------------------------------------------------------------------
@pytest.mark.parametrize("n", [1, 2, 4, 256])
def test_fragments_tiling_the_grid_overlap_once(n: int) -> None:
    extents = [(i * GRID // n, (i + 1) * GRID // n - 1) for i in range(n)]
    assert curve.overlap_stats(extents) == (1.0, 1 - 1 / n)


def test_fragments_spanning_the_grid_are_never_skipped() -> None:
    assert curve.overlap_stats([(0, GRID - 1)] * 5) == (5.0, 0.0)
    assert curve.overlap_stats([(0, 0), (0, 3)], bits=2) == (1.25, 1 - 1.25 / 2)
    assert curve.overlap_stats([]) == (0.0, 0.0)
    with pytest.raises(InvalidArgument, match=r"first <= last in \[0, 256\), got \(3, 2\)"):
        curve.overlap_stats([(3, 2)])


def test_zone_encoding_roundtrips_every_kind_of_boundary() -> None:
    boundaries = [-(2**70), -1, 0, 2**64 - 1]
    assert _roundtrip(boundaries) == boundaries
    assert _roundtrip([float("-inf"), -0.5, 1e300, float("inf")]) == [float("-inf"), -0.5, 1e300, float("inf")]
    assert _roundtrip([b"", b"\x00\xff", "é".encode()]) == [b"", b"\x00\xff", "é".encode()]
    assert [zones.zone_value_from_json(zones.zone_value(v), lambda: "") for v in boundaries] == boundaries
