"""Pruning by Parquet statistics (``lamina.prune``): never drops a row group that could match,
and actually skips the ones that cannot.

- decisions on files pyarrow writes (whose float statistics pyarrow reads back; the native
  writer's it does not) against brute force per row group, for random and fixed filters;
- decisions on hand-made statistics (truncated string maxima, NaN, nulls, IN with NULL);
- seeded property tests on Lamina tables with many small row groups per fragment, sorted and
  random columns: ``to_arrow`` / ``count_rows`` / ``delete`` against brute force in Python and
  against pyarrow compute over every row;
- scans read fewer row groups (a hook on pyarrow's reader), fetch no whole object when only
  some row groups survive, and ``explain`` says what was pruned.

``LAMINA_FILTER_SEEDS=a-b`` runs other seeds.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import lamina
from lamina import datafile, prune, zones
from lamina.filter import parse_filter
from lamina.prune import ANY, Chunk, F, N, T
from tests.lamina.test_filter_property import CAT_POOL, SCHEMA, X_SPECIAL, Gen, _seeds, evaluate

NAN, INF = math.nan, math.inf
LONG = ["c" * 70, "c1" + "z" * 90, "c" * 64 + "\xff" * 3, "é" * 40]  # past the writer's 64-byte statistics


# -- decisions on pyarrow-written files --------------------------------------------------------------
def _metadata(table: pa.Table, group_rows: int, **kwargs) -> pq.FileMetaData:
    buf = io.BytesIO()
    pq.write_table(table, buf, row_group_size=group_rows, **kwargs)
    return pq.read_metadata(pa.BufferReader(buf.getvalue()))


def _kept(table: pa.Table, text: str, group_rows: int, **kwargs) -> list[int]:
    md = _metadata(table, group_rows, **kwargs)
    return prune.row_groups(md, table.schema, parse_filter(text, table.schema))


def _matching(table: pa.Table, text: str, group_rows: int) -> list[int]:
    """Row groups holding a row the filter matches (brute force: pyarrow compute per group)."""
    expr = parse_filter(text, table.schema).expression
    return [
        g for g in range(math.ceil(table.num_rows / group_rows)) if table.slice(g * group_rows, group_rows).filter(expr).num_rows
    ]


def _sorted_rows(rng: np.random.Generator, n: int) -> pa.Table:
    """SCHEMA's columns, ``id`` and ``cat`` sorted, ``x`` sorted with NaN/±inf/±0 and nulls sprinkled."""

    def nulls(values: list, p: float = 0.05) -> list:
        return [None if rng.random() < p else v for v in values]

    x = sorted(float(v) / 2 for v in rng.integers(-16, 40, n))
    for i in rng.integers(0, n, n // 10):
        x[int(i)] = X_SPECIAL[int(rng.integers(0, len(X_SPECIAL)))]
    cats = sorted(CAT_POOL[int(j)] for j in rng.integers(0, len(CAT_POOL), n))
    return pa.table(
        {
            "id": nulls(sorted(int(v) for v in rng.integers(-5, 60, n))),
            "x": nulls(x),
            "cat": nulls(cats),
            "k": nulls([int(v) for v in rng.integers(0, 5, n)]),
        },
        schema=SCHEMA,
    )


def test_pyarrow_files_random_filters_keep_every_matching_group():
    """Random filters (the filter property test's generator) on pyarrow-written files, whose float
    statistics leave NaN out: every row group holding a match is kept, and some are pruned."""
    pruned = 0
    for seed in _seeds():
        rng = np.random.default_rng(seed)
        table = _sorted_rows(rng, 400)
        md = _metadata(table, 20)
        gen = Gen(500 + seed)
        for n in range(150):
            text = gen.filter().render()
            kept = prune.row_groups(md, SCHEMA, parse_filter(text, SCHEMA))
            need = _matching(table, text, 20)
            assert set(need) <= set(kept), (
                f"seed {seed} #{n} {text!r}: groups {sorted(set(need) - set(kept))} match but were pruned"
            )
            pruned += md.num_row_groups - len(kept)
    assert pruned > 0


@pytest.mark.parametrize(
    "text, expected",
    [
        ("id < 20", [0, 1]),
        ("id >= 80", [8, 9]),
        ("id = 55", [5]),
        ("id != 55", list(range(10))),
        ("NOT (id < 90)", [9]),
        ("id BETWEEN 31 AND 42", [3, 4]),
        ("id NOT BETWEEN 10 AND 89", [0, 9]),
        ("id IN (5, 77, 1000)", [0, 7]),
        ("id IN (NULL)", []),  # no nulls in id
        ("id NOT IN (NULL)", []),  # NULL on every row
        ("id NOT IN (5, NULL)", []),
        ("id IN (5, 77, NULL)", [0, 7]),
        ("id = NULL", []),
        ("id != NULL", []),
        ("id > 5.5 AND id < 9.0", [0]),  # compared by value
        ("id = 5.5", []),
        ("id < 1e30", list(range(10))),
        ("id < 10 OR id >= 95", [0, 9]),
        ("id < 10 AND id >= 95", []),
        ("NOT (id >= 10 AND id < 90)", [0, 9]),
        ("FALSE", []),
        ("TRUE", list(range(10))),
        ("n IS NULL", [0]),  # only group 0 has nulls in n
        ("n IS NOT NULL", list(range(1, 10))),  # group 0 is all null
        ("n = 1", [1]),
        ("s = 'k055'", [5]),
        ("s >= 'k090'", [9]),
        ("s < 'k010'", [0]),
        ("s = ''", []),
        ("u > 18446744073709551600", [8, 9]),
        ("ts >= TIMESTAMP '2024-01-01T00:01:30'", [9]),
        ("d < DATE '2024-01-02'", [0]),
        ("d <= '2024-01-02'", [0, 1]),
        ("b = TRUE", [1, 3, 5, 7, 9]),
        ("s LIKE 'k05%'", list(range(10))),  # LIKE is not pruned
        ("s LIKE 'k05%' AND id < 10", [0]),
    ],
)
def test_decisions_on_sorted_columns(text, expected):
    ids = np.arange(100)
    table = pa.table(
        {
            "id": ids,
            "n": pa.array([None] * 10 + (ids[10:] // 10).tolist(), pa.int64()),
            "s": [f"k{i:03d}" for i in ids],
            "u": pa.array([2**64 - 100 + i for i in ids.tolist()], pa.uint64()),
            "ts": pa.array(np.datetime64("2024-01-01T00:00:00", "ms") + ids.astype("timedelta64[s]")),
            "d": pa.array(np.datetime64("2024-01-01", "D") + (ids // 10).astype("timedelta64[D]")),
            "b": (ids // 10) % 2 == 1,
        }
    )
    kept = _kept(table, text, 10)
    assert set(_matching(table, text, 10)) <= set(kept)
    assert kept == expected


@pytest.mark.parametrize(
    "text",
    [
        "x > 2",
        "x < 2",
        "x = 1",
        "x != 1",
        "NOT (x < 5)",
        "NOT (x >= 0)",
        "x IN (1.0, 3.0)",
        "x NOT IN (1.0)",
        "x = 'NaN'",
        "x != 'NaN'",
        "x > 'inf'",
        "x >= 'inf'",
        "x < '-inf'",
        "x = -0.0",
        "x = 0",
        "x > -0.0",
        "x IS NULL",
        "x IS NOT NULL",
        "NOT (x BETWEEN 0 AND 10)",
        "x < 1.5 OR x > 2.5",
    ],
)
def test_float_groups_with_nan_keep_what_nan_matches(text):
    """pyarrow leaves NaN out of min/max: ``NOT (x < 5)`` and ``x != 1`` match the NaN rows of a
    group whose statistics say [1, 1], so it is kept; ``x > 2`` is not."""
    table = pa.table(
        {"x": [1.0, NAN, 1.0, 1.0, NAN, NAN, NAN, NAN, -0.0, 0.0, -0.0, 0.0, INF, 2.0, None, 3.0, -INF, -INF, -INF, -INF]}
    )
    kept = _kept(table, text, 4)
    need = _matching(table, text, 4)
    assert set(need) <= set(kept), f"{text!r}: groups {need} match, kept {kept}"


def test_float_pruning_is_precise_where_stats_allow():
    table = pa.table({"x": [1.0, NAN, 1.0, 1.0, -0.0, 0.0, -0.0, 0.0, INF, 2.0, None, 3.0]})
    assert _kept(table, "x > 2", 4) == [2]
    assert _kept(table, "x = 0", 4) == [1]
    assert _kept(table, "x = -0.0", 4) == [1]
    assert _kept(table, "x != 0", 4) == [0, 1, 2]  # any float group may hold NaN
    assert _kept(table, "x >= 'inf'", 4) == [2]
    assert _kept(table, "x < 0", 4) == []
    assert _kept(table, "x = 'NaN'", 4) == []
    assert _kept(table, "NOT (x < 5)", 4) == [0, 1, 2]


def test_mixed_int_float_literals():
    table = pa.table({"i": pa.array(np.arange(40), pa.int32()), "f": pa.array(np.arange(40) / 2, pa.float32())})
    assert _kept(table, "i > 9.5", 10) == [1, 2, 3]
    assert _kept(table, "i >= 10.0 AND i <= 19.9", 10) == [1]
    assert _kept(table, "i IN (2.5, 35)", 10) == [3]
    assert _kept(table, "i < -1e300", 10) == []
    assert _kept(table, "i > 3000000000", 10) == []  # beyond int32: compared by value
    assert _kept(table, "i <= 3000000000", 10) == [0, 1, 2, 3]
    assert _kept(table, "f >= 15", 10) == [3]
    assert _kept(table, "f < 5", 10) == [0]
    assert _kept(table, "f = 100.1", 10) == []
    assert _kept(table, "f > 4.75", 10) == [1, 2, 3]  # group 0 ends at 4.5


def test_missing_or_mismatched_statistics_keep_everything():
    table = pa.table({"id": np.arange(40)})
    assert _kept(table, "id < 5", 10, write_statistics=False) == [0, 1, 2, 3]
    # the table says int64, the file holds int32: the statistics are not used
    md = _metadata(pa.table({"id": pa.array(np.arange(40), pa.int32())}), 10)
    schema = pa.schema([("id", pa.int64())])
    assert prune.row_groups(md, schema, parse_filter("id < 5", schema)) == [0, 1, 2, 3]
    # an Expression filter prunes as its text does
    assert prune.row_groups(_metadata(table, 10), table.schema, parse_filter(pc.field("id") < 5, table.schema)) == [0]
    # nested fields are not pruned (but never wrongly)
    nested = pa.table({"s": pa.array([{"a": i} for i in range(40)])})
    assert _kept(nested, "s.a < 5", 10) == [0, 1, 2, 3]


# -- decisions on hand-made statistics ---------------------------------------------------------------
def _eval(text: str, schema: pa.Schema, chunks: dict[str, Chunk]) -> int:
    tree = prune.compile_filter(parse_filter(text, schema), schema).tree
    return prune._eval(tree, lambda c: chunks.get(c, prune.UNKNOWN))


def test_outcome_sets_in_three_valued_logic():
    schema = pa.schema([("i", pa.int64()), ("s", pa.string())])
    ints = Chunk(1, 3, True, True, nulls=True, values=True)
    assert _eval("i < 5", schema, {"i": ints}) == T | N
    assert _eval("NOT (i < 5)", schema, {"i": ints}) == F | N
    assert _eval("i IN (2, NULL)", schema, {"i": ints}) == T | N  # a miss is NULL, so are null rows
    assert _eval("i NOT IN (7)", schema, {"i": ints}) == T | N
    assert _eval("i NOT IN (7)", schema, {"i": Chunk(1, 3, True, True, nulls=False)}) == T
    assert _eval("i NOT IN (7, NULL)", schema, {"i": ints}) == N  # never TRUE
    assert _eval("i NOT IN (2, NULL)", schema, {"i": Chunk(1, 3, True, True, nulls=False)}) == F | N
    assert _eval("i IS NULL", schema, {"i": Chunk(nulls=False)}) == F
    assert _eval("i = 2", schema, {"i": Chunk(nulls=True, values=False)}) == N
    assert _eval("i = 2 OR i IS NULL", schema, {"i": Chunk(nulls=True, values=False)}) == T
    assert _eval("i = 2", schema, {"i": Chunk(2, 2, True, True, nulls=False)}) == T
    assert _eval("i != 2", schema, {"i": Chunk(2, 2, True, True, nulls=False)}) == F
    assert _eval("s LIKE 'a%'", schema, {}) == ANY
    assert _eval("i < i", schema, {}) == ANY


def test_temporal_literals_finer_than_the_unit_prune_by_value():
    """A row group whose only value is 2026-01-01 00:00:00 (or the day 2026-01-01) holds no row
    ``>= 00:00:00.5`` and only rows ``< 00:00:00.5``: the literal is not truncated to the unit."""
    schema = pa.schema([("tss", pa.timestamp("s")), ("tms", pa.timestamp("ms")), ("d", pa.date32())])
    second = int(dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc).timestamp()) * 10**9  # keys are nanoseconds
    day = (dt.date(2026, 1, 1) - dt.date(1970, 1, 1)).days
    at = {
        "tss": Chunk(second, second, True, True, nulls=False),
        "tms": Chunk(second, second, True, True, nulls=False),
        "d": Chunk(day, day, True, True, nulls=False),
    }
    assert _eval("tss >= TIMESTAMP '2026-01-01T00:00:00.5'", schema, at) == F
    assert _eval("tss < TIMESTAMP '2026-01-01T00:00:00.5'", schema, at) == T
    assert _eval("tss = TIMESTAMP '2026-01-01T00:00:00.5'", schema, at) == F
    assert _eval("tss IN (TIMESTAMP '2026-01-01T00:00:00.5')", schema, at) == F
    assert _eval("tms > '2026-01-01T00:00:00.000999'", schema, at) == F
    assert _eval("tms <= '2026-01-01T00:00:00.000999'", schema, at) == T
    assert _eval("d >= TIMESTAMP '2026-01-01T12:00'", schema, at) == F
    assert _eval("d < TIMESTAMP '2026-01-01T12:00'", schema, at) == T
    assert _eval("d BETWEEN TIMESTAMP '2025-12-31T12:00' AND TIMESTAMP '2026-01-01T11:00'", schema, at) == T


def test_truncated_string_maxima_are_upper_bounds_of_their_prefix():
    """A maximum may be a prefix of the true one: 'abc' stands for anything below 'abd'."""
    schema = pa.schema([("s", pa.string())])
    decoder = prune._Decoder("bytes", pa.string(), "BYTE_ARRAY", {"Type": "String"})

    class Stats:
        min_raw, max_raw = b"ab", b"abc"

    lo, hi, inclusive = decoder.bounds_of(Stats)
    assert (lo, hi, inclusive) == (b"ab", b"abd", False)
    c = Chunk(lo, hi, inclusive, True, nulls=False)
    assert _eval("s = 'abcz'", schema, {"s": c}) & T
    assert _eval("s > 'abc'", schema, {"s": c}) & T
    assert not _eval("s >= 'abd'", schema, {"s": c}) & T
    assert not _eval("s < 'ab'", schema, {"s": c}) & T
    assert zones.successor(b"a\xff\xff") == b"b" and zones.successor(b"\xff") is None
    unbounded = Chunk(b"\xff", None, False, True, nulls=False)
    assert _eval("s > 'zzz'", schema, {"s": unbounded}) & T


def test_untrustworthy_bounds_are_unknown():
    dec = prune._Decoder("float", pa.float64(), "DOUBLE", {})

    class NanStats:
        min, max = NAN, 1.0

    class Crossed:
        min, max = 3.0, 1.0

    assert dec.bounds_of(NanStats) is None and dec.bounds_of(Crossed) is None
    assert not prune._Decoder("int", pa.uint64(), "INT64", {"Type": "None"}).ok  # unsigned needs its logical type
    assert not prune._Decoder("ts", pa.timestamp("us"), "INT96", {}).ok


# -- Lamina tables: many small row groups, against brute force ---------------------------------------
GROUP_ROWS = 16
ROWS = 160


def _lamina_rows(rng: np.random.Generator, n: int, start: int) -> pa.Table:
    t = _sorted_rows(rng, n)
    cats = t.column("cat").to_pylist()
    for i in rng.integers(0, n, n // 8):  # long strings: the writer truncates their statistics
        cats[int(i)] = LONG[int(rng.integers(0, len(LONG)))]
    ts = np.datetime64("2024-01-01T00:00:00", "ms") + (start + np.arange(n)).astype("timedelta64[s]")
    return pa.table(
        {"id": t.column("id"), "x": t.column("x"), "cat": pa.array(cats, pa.string()), "k": t.column("k"), "ts": pa.array(ts)},
        schema=WIDE,
    )


WIDE = SCHEMA.append(pa.field("ts", pa.timestamp("ms")))

FIXED = [
    "id < 3",
    "id >= 58",
    "id = 20",
    "id != 20",
    "NOT (id < 55)",
    "id IN (0, 59, NULL)",
    "id NOT IN (1, 2)",
    "id IS NULL",
    "id IS NOT NULL AND id < 0",
    "id > 5.5 AND id < 9.0",
    "id < 1e30",
    "k > 2.5",
    "k = 2.5",
    "k != 2.5",
    "x > 10",
    "x != 1",
    "NOT (x < 5)",
    "x = 'NaN'",
    "x >= 'inf'",
    "x = -0.0",
    "x IS NULL",
    "cat = ''",
    "cat >= 'e'",
    "cat < 'b'",
    f"cat = '{LONG[0]}'",
    f"cat > '{LONG[0][:64]}'",
    f"cat = '{LONG[2]}'",
    f"cat = '{LONG[3]}'",
    "cat IN ('', 'bb', NULL)",
    "cat LIKE 'c1%' AND id < 10",
    "ts < TIMESTAMP '2024-01-01T00:00:20'",
    "ts >= '2024-01-01T00:07:50'",
    "ts BETWEEN '2024-01-01T00:02:00' AND '2024-01-01T00:02:10'",
    "(id < 2 OR id > 57) AND NOT (cat = 'a')",
    "FALSE",
    "TRUE",
    "NOT (id >= 3 AND id <= 56) OR k = 9",
]


def _make(path: str, seed: int) -> lamina.Table:
    rng = np.random.default_rng(seed)
    t = lamina.create_table(path, WIDE)
    for f in range(3):
        t.append(_lamina_rows(rng, ROWS, f * ROWS), row_group_rows=GROUP_ROWS)
    t.delete("k = 4 AND id < 20")
    t.append(_lamina_rows(rng, ROWS, 3 * ROWS), row_group_rows=GROUP_ROWS)
    t.delete("cat = 'bb' AND x > 1")
    return t


def _canon(table: pa.Table) -> list[tuple]:
    return [tuple(repr(v) if isinstance(v, float) else v for v in r.values()) for r in table.to_pylist()]


@pytest.fixture(scope="module")
def wide_table(tmp_path_factory) -> lamina.Table:
    return _make(str(tmp_path_factory.mktemp("prune") / "t"), 0)


def test_the_table_has_many_row_groups_per_fragment(wide_table):
    assert all(len(f.row_groups) == ROWS // GROUP_ROWS for f in wide_table._manifest.fragments)


def test_fixed_filters_equal_pyarrow_compute_over_every_row(wide_table):
    everything = wide_table.to_arrow(with_row_address=True)
    pruned_somewhere = 0
    for text in FIXED:
        want = everything.filter(parse_filter(text, WIDE).expression)
        got = wide_table.to_arrow(filter=text, with_row_address=True)
        assert _canon(got) == _canon(want), f"{text!r}: {got.num_rows} rows read, {want.num_rows} by pyarrow compute"
        assert wide_table.count_rows(text) == want.num_rows, text
        m = re.search(r"\((\d+) pruned by", wide_table.explain(text))
        pruned_somewhere += bool(m and int(m.group(1)))
    assert pruned_somewhere > len(FIXED) // 2


def assert_random_filters_equal_brute_force(table: lamina.Table, gen_seed: int, count: int) -> list[str]:
    """``count`` random filters read through ``table`` (pruning included) against brute force over its
    rows and against pyarrow compute; returns the filters' texts."""
    everything = table.to_arrow(with_row_address=True)
    rows = everything.to_pylist()
    gen = Gen(gen_seed)
    texts = []
    for n in range(count):
        node = gen.filter()
        text = node.render()
        got = table.to_arrow(filter=text, with_row_address=True)
        want = [r for r in rows if evaluate(node, r) is True]
        assert _canon(got) == _canon(pa.Table.from_pylist(want, schema=everything.schema)), (
            f"seed {gen_seed} #{n} {text!r}: {got.num_rows} rows read, brute force {len(want)}"
        )
        assert got.num_rows == everything.filter(parse_filter(text, WIDE).expression).num_rows
        assert table.count_rows(text) == len(want), f"seed {gen_seed} #{n} {text!r}"
        texts.append(text)
    return texts


@pytest.mark.parametrize("seed", _seeds())
def test_random_filters_equal_brute_force(wide_table, seed):
    assert_random_filters_equal_brute_force(wide_table, 2000 + seed, 80)


@pytest.mark.parametrize("seed", _seeds()[:2])
def test_random_deletes_equal_brute_force(tmp_path, seed):
    t = _make(str(tmp_path / "t"), seed)
    gen = Gen(3000 + seed)
    steps = [gen.filter() for _ in range(6)]
    texts = ["id >= 58", "NOT (x < 5)", f"cat = '{LONG[1]}'", "ts < '2024-01-01T00:00:40'"]
    for n, item in enumerate(texts + steps):
        before = t.to_arrow(with_row_address=True)
        if isinstance(item, str):
            text = item
            hit = set(before.filter(parse_filter(text, WIDE).expression).column("_rowaddr").to_pylist())
            keep = pa.Table.from_pylist([r for r in before.to_pylist() if r["_rowaddr"] not in hit], schema=before.schema)
        else:
            text = item.render()
            keep = pa.Table.from_pylist([r for r in before.to_pylist() if evaluate(item, r) is not True], schema=before.schema)
        deleted = t.delete(text)
        after = t.to_arrow(with_row_address=True)
        assert _canon(after) == _canon(keep), (
            f"seed {seed} #{n} {text!r}: {after.num_rows} rows left, brute force {keep.num_rows}"
        )
        assert deleted == before.num_rows - keep.num_rows


def test_same_rows_on_s3_and_local(table_location):
    uri, options = table_location
    t = lamina.create_table(uri, WIDE, storage_options=options)
    rng = np.random.default_rng(7)
    t.append(_lamina_rows(rng, ROWS, 0), row_group_rows=GROUP_ROWS)
    t.delete("id = 30")
    everything = t.to_arrow(with_row_address=True)
    for text in FIXED:
        want = everything.filter(parse_filter(text, WIDE).expression)
        assert _canon(t.to_arrow(filter=text, with_row_address=True)) == _canon(want), text


# -- pruning happens ---------------------------------------------------------------------------------
@pytest.fixture
def sorted_table(tmp_path) -> lamina.Table:
    t = lamina.create_table(str(tmp_path / "sorted"), pa.schema([("id", pa.int64()), ("v", pa.string())]))
    for f in range(3):
        ids = np.arange(f * 1000, (f + 1) * 1000)
        t.append(pa.table({"id": ids, "v": [f"v{i}" for i in ids]}), row_group_rows=100)
    t.delete("id = 1005")
    return t


@pytest.fixture
def reads(monkeypatch) -> dict[str, int]:
    """Counts row groups decoded by pyarrow and data files opened whole."""
    seen = {"groups": 0, "whole": 0, "opens": 0}
    read, read_groups, open_parquet = pq.ParquetFile.read, pq.ParquetFile.read_row_groups, datafile.open_parquet

    def counted_read(self, *args, **kwargs):
        seen["groups"] += self.num_row_groups
        return read(self, *args, **kwargs)

    def counted_groups(self, row_groups, *args, **kwargs):
        seen["groups"] += len(row_groups)
        return read_groups(self, row_groups, *args, **kwargs)

    def counted_open(store, fragment, whole=False, *args, **kwargs):
        seen["opens"] += 1
        seen["whole"] += bool(whole)
        return open_parquet(store, fragment, whole, *args, **kwargs)

    monkeypatch.setattr(pq.ParquetFile, "read", counted_read)
    monkeypatch.setattr(pq.ParquetFile, "read_row_groups", counted_groups)
    monkeypatch.setattr(datafile, "open_parquet", counted_open)
    return seen


def test_a_scan_reads_only_the_row_groups_that_can_match(sorted_table, reads):
    got = sorted_table.to_arrow(filter="id >= 1000 AND id < 1150", with_row_address=True)
    assert got.column("id").to_pylist() == [i for i in range(1000, 1150) if i != 1005]
    assert got.column("_rowaddr").to_pylist() == [(1 << 32) | (i - 1000) for i in range(1000, 1150) if i != 1005]
    assert reads["groups"] == 2  # of 30
    assert reads["whole"] == 0  # ranged reads of the two groups, not the whole object


def test_pruned_fragments_are_not_opened_once_footers_are_cached(sorted_table, reads):
    assert sorted_table.count_rows("id BETWEEN 2500 AND 2599") == 100
    reads.update(groups=0, opens=0)
    assert sorted_table.count_rows("id BETWEEN 2500 AND 2599") == 100
    assert reads == {"groups": 1, "opens": 1, "whole": 0}
    assert sorted_table.count_rows("id < 0 OR id > 5000") == 0
    assert reads["groups"] == 1 and reads["opens"] == 1


def test_delete_through_pruned_scan_keeps_offsets_right(sorted_table):
    assert sorted_table.delete("id >= 1990 AND id < 2010") == 20
    left = sorted_table.to_arrow(filter="id >= 1980 AND id < 2020", with_row_address=True)
    assert left.column("id").to_pylist() == list(range(1980, 1990)) + list(range(2010, 2020))
    assert left.column("_rowaddr").to_pylist() == [(1 << 32) | (i - 1000) for i in range(1980, 1990)] + [
        (2 << 32) | (i - 2000) for i in range(2010, 2020)
    ]


def test_explain_shows_what_statistics_prune(sorted_table):
    text = sorted_table.explain("id >= 1000 AND id < 1150")
    assert "zone maps: 2 of the 3 fragment(s) to scan pruned without opening their files" in text
    assert (
        "statistics: the scan reads 2/10 row groups (8 pruned by min/max/null count) of 1 fragment(s); "
        "0 fragment(s) pruned entirely" in text
    )
    assert "no term of this filter can prune" in sorted_table.explain("v LIKE 'v1%'")
    sorted_table.create_index("id", "btree")
    text = sorted_table.explain("id = 5")
    assert "scan for 0 fragment(s)" in text and "of 0 fragment(s)" in text


def test_timestamps_and_dates_prune(tmp_path, reads):
    schema = pa.schema([("ts", pa.timestamp("ms")), ("tz", pa.timestamp("ns", tz="UTC")), ("d", pa.date32())])
    t = lamina.create_table(str(tmp_path / "ts"), schema)
    base = dt.datetime(2024, 1, 1)
    ts = [base + dt.timedelta(hours=i) for i in range(100)]
    t.append(
        pa.table({"ts": ts, "tz": [x.replace(tzinfo=dt.timezone.utc) for x in ts], "d": [x.date() for x in ts]}, schema=schema),
        row_group_rows=24,
    )
    for text, rows, groups in [
        ("ts >= TIMESTAMP '2024-01-05T00:00:00'", 4, 1),
        ("tz < TIMESTAMP '2024-01-01T05:00:00+00:00'", 5, 1),
        ("d = DATE '2024-01-02'", 24, 1),
        ("d > '2024-01-04'", 4, 1),
    ]:
        reads["groups"] = 0
        assert t.count_rows(text) == rows, text
        assert reads["groups"] == groups, text


# -- the same filter as text and as a pyarrow expression -------------------------------------------
def _ts(text: str) -> pa.Scalar:
    return pa.scalar(dt.datetime.fromisoformat(text), pa.timestamp("ms"))


#: Filters as text and as the pyarrow expression meaning the same on WIDE.
SAME = [
    ("id < 3", pc.field("id") < 3),
    ("id >= 58 OR id IS NULL", (pc.field("id") >= 58) | pc.field("id").is_null()),
    ("NOT (id < 55)", ~(pc.field("id") < 55)),
    ("id != 20 AND k = 2", (pc.field("id") != 20) & (pc.field("k") == 2)),
    ("id IS NOT NULL AND id < 0", pc.field("id").is_valid() & (pc.field("id") < 0)),
    ("id IN (0, 59)", pc.field("id").isin([0, 59])),
    ("x > 10", pc.field("x") > 10),
    ("NOT (x < 5)", ~(pc.field("x") < 5.0)),
    ("x = 'NaN'", pc.field("x") == math.nan),
    ("cat >= 'e'", pc.field("cat") >= "e"),
    ("cat IN ('', 'bb')", pc.field("cat").isin(["", "bb"])),
    ("ts < TIMESTAMP '2024-01-01T00:00:20'", pc.field("ts") < _ts("2024-01-01T00:00:20")),
    (
        "ts BETWEEN '2024-01-01T00:02:00' AND '2024-01-01T00:02:10'",
        (pc.field("ts") >= _ts("2024-01-01T00:02:00")) & (pc.field("ts") <= _ts("2024-01-01T00:02:10")),
    ),
    ("(id < 2 OR id > 57) AND NOT (cat = 'a')", ((pc.field("id") < 2) | (pc.field("id") > 57)) & ~(pc.field("cat") == "a")),
    ("cat LIKE 'c1%' AND id < 10", pc.match_like(pc.field("cat"), "c1%") & (pc.field("id") < 10)),
    ("FALSE", pc.scalar(False)),
]


def _decisions(t: lamina.Table, flt) -> tuple[list[int], dict[int, list[int] | None]]:
    """The fragments zone maps rule out, and the row groups statistics keep of every other fragment."""
    frags = list(t._manifest.fragments)
    kept, _ = prune.prune_fragments(frags, WIDE, flt)
    groups = {
        f.id: (lambda p: None if p is None else p.groups)(
            prune.plan_fragment(t._store, f, WIDE, flt, lambda f=f: datafile.open_parquet(t._store, f))
        )
        for f in kept
    }
    return sorted(f.id for f in frags if f not in kept), groups


@pytest.mark.parametrize("text,expression", SAME, ids=[s[0] for s in SAME])
def test_a_filter_as_text_and_as_a_pyarrow_expression_prunes_the_same(wide_table, text, expression):
    as_text, as_expression = parse_filter(text, WIDE), parse_filter(expression, WIDE)
    decided = _decisions(wide_table, as_text)
    assert _decisions(wide_table, as_expression) == decided
    everything = wide_table.to_arrow(with_row_address=True)
    want = _canon(everything.filter(expression))
    assert _canon(wide_table.to_arrow(filter=expression, with_row_address=True)) == want
    assert _canon(wide_table.to_arrow(filter=text, with_row_address=True)) == want


def test_the_pairs_prune_something(wide_table):
    """The decisions compared above are not all "keep everything"."""
    pruning = 0
    for text, _ in SAME:
        ruled_out, groups = _decisions(wide_table, parse_filter(text, WIDE))
        pruning += bool(ruled_out) or any(g is not None and len(g) < ROWS // GROUP_ROWS for g in groups.values())
    assert pruning > len(SAME) // 2


#: Expressions whose Arrow meaning the tree cannot state exactly: evaluated as given, they prune nothing
#: of what they would return (Arrow's set lookup is never NULL, a cast column, float literals on an
#: integer column compared in double, a plain (non-Kleene) AND).
OPAQUE_EXPRESSIONS = [
    ~pc.field("id").isin([1, 2]),
    pc.field("id").isin([1, None]),
    ~pc.field("x").isin([0.0, math.nan]),
    pc.field("id").cast(pa.float64()) < 3.5,
    pc.field("id") < 2.5,
    pc.field("k") == pc.field("id"),
    pc.Expression._call("and", [pc.field("id") < 3, pc.field("k") > 1]),
    ~pc.field("x").is_nan() & (pc.field("x") < 0),
]


@pytest.mark.parametrize("expression", OPAQUE_EXPRESSIONS, ids=str)
def test_expressions_read_where_exact_and_evaluated_as_given(wide_table, expression):
    everything = wide_table.to_arrow(with_row_address=True)
    want = _canon(everything.filter(expression))
    assert _canon(wide_table.to_arrow(filter=expression, with_row_address=True)) == want
    assert wide_table.count_rows(expression) == len(want)
