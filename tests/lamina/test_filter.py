"""The filter grammar gives the same rows as the equivalent pyarrow compute expression."""

from __future__ import annotations

import collections
import datetime as dt
import math
import re
from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import InvalidFilter
from lamina.filter import parse_filter
from tests.lamina.helpers import SCHEMA, rows

DATA = rows(0, 500)
TS = lambda s: pa.scalar(np.datetime64(s, "us"))  # noqa: E731

CASES = [
    ("id < 100", pc.field("id") < 100),
    ("id <= 100 AND category = 'a'", (pc.field("id") <= 100) & (pc.field("category") == "a")),
    ("id > 450 OR category == 'b'", (pc.field("id") > 450) | (pc.field("category") == "b")),
    ("NOT (id >= 10)", ~(pc.field("id") >= 10)),
    ("id != 3 and id <> 4 and id < 6", (pc.field("id") != 3) & (pc.field("id") != 4) & (pc.field("id") < 6)),
    ("id IN (1, 2, 3, 999)", pc.field("id").isin([1, 2, 3, 999])),
    ("id NOT IN (1, 2)", ~pc.field("id").isin([1, 2])),
    ("id BETWEEN 10 AND 20", (pc.field("id") >= 10) & (pc.field("id") <= 20)),
    ("id NOT BETWEEN 10 AND 490", ~((pc.field("id") >= 10) & (pc.field("id") <= 490))),
    ("category IS NULL", pc.field("category").is_null()),
    ("category IS NOT NULL AND score > 0.5", pc.field("category").is_valid() & (pc.field("score") > 0.5)),
    ("meta.a = 5", pc.field(("meta", "a")) == 5),
    ("meta.b LIKE 'b1%'", pc.match_like(pc.field(("meta", "b")), "b1%")),
    ("ts >= '2024-01-01 00:05:00'", pc.field("ts") >= TS("2024-01-01T00:05:00")),
    ("ts < TIMESTAMP '2024-01-01T00:00:10'", pc.field("ts") < TS("2024-01-01T00:00:10")),
    ('"id" = 7', pc.field("id") == 7),
    ("`category` = 'it''s'", pc.field("category") == "it's"),
    ("5 > id", pc.field("id") < 5),
    ("score >= 1e-1 AND id < -1 OR id = 0", ((pc.field("score") >= 0.1) & (pc.field("id") < -1)) | (pc.field("id") == 0)),
    ("TRUE", pc.scalar(True)),
]


@pytest.mark.parametrize("text,expr", CASES, ids=[c[0] for c in CASES])
def test_grammar_matches_pyarrow(text, expr):
    flt = parse_filter(text, SCHEMA)
    assert DATA.filter(flt.expression).equals(DATA.filter(expr))


def test_columns_are_reported():
    assert parse_filter("id < 3 AND meta.a = 1", SCHEMA).columns == frozenset({"id", "meta"})
    # an expression's columns are read from it too (a scan reads only those besides its projection)
    assert parse_filter(pc.field("id") < 3, SCHEMA).columns == frozenset({"id"})
    assert parse_filter((pc.field("meta", "a") == 1) | pc.field("score").is_null(), SCHEMA).columns == frozenset(
        {"meta", "score"}
    )
    assert parse_filter(pc.scalar(True), SCHEMA).columns == frozenset()


@pytest.mark.parametrize(
    "text,message",
    [
        ("", "empty filter"),
        ("id <", "unexpected end"),
        ("id = 1 AND", "unexpected end"),
        ("(id = 1", r"expected \)"),
        ("id ~ 1", "cannot parse"),
        ("nope = 1", "column 'nope'"),
        ("meta.zz = 1", "'meta.zz' is not a field"),
        ("id = 'x'", "cannot be compared"),
        ("ts > TIMESTAMP 'yesterday'", "not an ISO-8601"),
        ("id LIKE 5", "LIKE needs a string"),
        ("1 IN (1)", "left side of IN must be a column"),
    ],
)
def test_bad_filters(text, message):
    with pytest.raises(InvalidFilter, match=message):
        parse_filter(text, SCHEMA)


def test_non_filter_type():
    with pytest.raises(InvalidFilter, match="not int"):
        parse_filter(5, SCHEMA)


# -- indexed filters equal the scan (issue 16, defect 2 and section D) ---------------------
NAN, INF = math.nan, math.inf
EDGE_X = [NAN, INF, -INF, -0.0, 0.0, None, 0.5, -0.5]


def _edge_rows(start: int, n: int) -> pa.Table:
    """Rows ``start..start+n``: float ``x`` with NaN, ±inf, ±0.0 and nulls among plain values, int
    ``i`` with nulls, string ``cat`` with nulls."""
    ids = range(start, start + n)
    return pa.table(
        {
            "x": pa.array([EDGE_X[k % 16] if k % 16 < len(EDGE_X) else float(k) for k in ids], pa.float64()),
            "i": pa.array([None if k % 13 == 0 else k for k in ids], pa.int64()),
            "cat": pa.array([None if k % 11 == 0 else f"c{k % 5}" for k in ids], pa.string()),
        }
    )


@pytest.fixture
def edge_tables(tmp_path):
    """Two tables of the same rows, the first with a btree on x and i and a bitmap on cat (its
    last append is not indexed, so reads mix index lookups and scans)."""
    tables = []
    for name, indexed in (("indexed", True), ("plain", False)):
        t = lamina.create_table(str(tmp_path / name), _edge_rows(0, 0).schema)
        t.append(_edge_rows(0, 600))
        t.append(_edge_rows(600, 600))
        if indexed:
            t.create_index("x", "btree")
            t.create_index("i", "btree")
            t.create_index("cat", "bitmap")
        t.append(_edge_rows(1200, 200))
        tables.append(t)
    return tables


def _canon(rows: list[dict]) -> list[tuple]:
    """Rows comparable with ==: floats by repr, so NaN equals NaN and -0.0 differs from 0.0."""
    return [tuple(repr(v) if isinstance(v, float) else v for v in r.values()) for r in rows]


def _eq(a, b):  # IEEE equality on Python values, NULL never equal
    return a is not None and b is not None and a == b


EDGE_CASES = [
    # a NaN bound matches nothing, whatever it is combined with
    ("x > 900 AND x > 'NaN'", lambda r: False),
    ("x > 'NaN' AND x > 900", lambda r: False),
    ("x < 'NaN' OR x = 'NaN'", lambda r: False),
    ("x BETWEEN 'NaN' AND 1000 AND x > 3", lambda r: False),
    ("x >= 5 AND x <= 'NaN'", lambda r: False),
    ("x != 'NaN' AND x > 1390", lambda r: r["x"] is not None and r["x"] > 1390),
    ("x IN ('NaN', 17)", lambda r: _eq(r["x"], 17)),
    # ±inf and ±0.0
    ("x >= 'inf'", lambda r: _eq(r["x"], INF)),
    ("x > -0.0 AND x < 'inf' AND x < 40", lambda r: r["x"] is not None and 0 < r["x"] < 40),
    ("x >= 0.0 AND x <= -0.0", lambda r: _eq(r["x"], 0.0)),
    ("x IN (-0.0)", lambda r: _eq(r["x"], 0.0)),
    ("x IN (0.0, 18) AND x < 1", lambda r: _eq(r["x"], 0.0)),
    ("x = 0 AND i < 100", lambda r: _eq(r["x"], 0.0) and r["i"] is not None and r["i"] < 100),
    ("x < '-inf' OR x > 'inf'", lambda r: False),
    # mixed int/float literals: an integer column compares by value
    ("i > 5.5 AND i < 8", lambda r: r["i"] in (6, 7)),
    ("i = 5.5", lambda r: False),
    ("i IN (5.5, 6.0, 1e30, -1e300)", lambda r: r["i"] == 6),
    ("i BETWEEN 1.5 AND 3.5", lambda r: r["i"] in (2, 3)),
    ("i < 1e30 AND i > 1390", lambda r: r["i"] is not None and r["i"] > 1390),
    ("i > -1e30 AND i < 3", lambda r: r["i"] is not None and r["i"] < 3),
    ("i >= 99999999999999999999", lambda r: False),
    ("x > 1395 AND x < 1397.0", lambda r: _eq(r["x"], 1396.0)),
    # the shapes of section D: several bounds on one column, NULL in IN lists, mixed terms
    ("i IN (7, NULL)", lambda r: r["i"] == 7),
    ("i NOT IN (7, 8)", lambda r: r["i"] is not None and r["i"] not in (7, 8)),
    ("i NOT IN (7, NULL)", lambda r: False),
    ("i = 7 AND cat IS NULL", lambda r: False),
    ("i = 22 AND cat IS NULL", lambda r: r["i"] == 22),
    ("i < 50 AND cat LIKE 'c1%'", lambda r: r["i"] is not None and r["i"] < 50 and r["cat"] == "c1"),
    ("i < 100 AND i > 5 AND i > 10", lambda r: r["i"] is not None and 10 < r["i"] < 100),
    ("i IN (1,2,3) AND i IN (2,3,4)", lambda r: r["i"] in (2, 3)),
    ("i IN (1,2,3) AND i IN (4,5)", lambda r: False),
    ("i IN (1,2,3,40) AND i > 2 AND i <= 40", lambda r: r["i"] in (3, 40)),
    ("i > 10 AND i < 10", lambda r: False),
    ("i >= 10 AND i <= 10", lambda r: r["i"] == 10),
    ("i >= 10 AND i < 10", lambda r: False),
    ("i > 20 AND i >= 20 AND i < 24", lambda r: r["i"] in (21, 22, 23)),
    ("i >= 20 AND i > 20 AND i < 24", lambda r: r["i"] in (21, 22, 23)),
    ("i < 24 AND i <= 24 AND i > 20", lambda r: r["i"] in (21, 22, 23)),
    ("i <= 24 AND i < 24 AND i > 20", lambda r: r["i"] in (21, 22, 23)),
    ("x > 20 AND x >= 20 AND x <= 21", lambda r: _eq(r["x"], 21.0)),
    ("x >= -0.0 AND x > 0.0 AND x < 18", lambda r: r["x"] is not None and 0 < r["x"] < 18),
    ("i = NULL", lambda r: False),
    ("i < NULL AND i > 3", lambda r: False),
    ("cat IN ('c1', 'c2') AND cat >= 'c2' AND i < 60", lambda r: r["cat"] == "c2" and r["i"] is not None and r["i"] < 60),
    ("cat = 'c3' AND x > 100 AND x < 130", lambda r: r["cat"] == "c3" and r["x"] is not None and 100 < r["x"] < 130),
]


@pytest.mark.parametrize("text,expected", EDGE_CASES, ids=[c[0] for c in EDGE_CASES])
def test_indexed_filter_equals_scan_and_brute_force(edge_tables, text, expected):
    indexed, _ = edge_tables
    everything = indexed.to_arrow().to_pylist()
    want = _canon([r for r in everything if expected(r)])
    assert _canon(indexed.to_arrow(filter=text, use_index=False).to_pylist()) == want
    assert _canon(indexed.to_arrow(filter=text, use_index=True).to_pylist()) == want


@pytest.mark.parametrize(
    "text,expected",
    [c for c in EDGE_CASES if "NaN" in c[0] or "IN" in c[0]],
    ids=[c[0] for c in EDGE_CASES if "NaN" in c[0] or "IN" in c[0]],
)
def test_indexed_delete_removes_only_matching_rows(edge_tables, text, expected):
    indexed, plain = edge_tables
    keep = _canon([r for r in plain.to_arrow().to_pylist() if not expected(r)])
    n_indexed, n_plain = indexed.delete(text), plain.delete(text)
    assert n_indexed == n_plain
    assert _canon(indexed.to_arrow().to_pylist()) == keep
    assert _canon(plain.to_arrow().to_pylist()) == keep


# -- large and deep filters (issue 16, defect 5) ---------------------------------------------
_BIG_OR = r"""
import sys, numpy as np, pyarrow as pa, lamina
t = lamina.create_table(sys.argv[1], pa.schema([("id", pa.int64()), ("x", pa.float64())]))
t.append(pa.table({"id": np.arange(60000), "x": np.arange(60000) / 2}))
t.create_index("id", "btree")
ids = " OR ".join(f"id = {3 * i}" for i in range(10000))  # one column: folded into a set lookup
mixed = " OR ".join(f"id = {3 * i}" if i % 2 else f"x = {3 * i}.5" for i in range(10000))  # kept as 10,000 terms
ands = " AND ".join(f"id <> {i}" for i in range(10000))
for text in (ids, mixed, ands):
    for use_index in (True, False):
        print(t.to_arrow(filter=text, use_index=use_index).num_rows, flush=True)
"""


def test_ten_thousand_ored_terms_evaluate(tmp_path):
    """10,000 ORed (ANDed) terms used to end in SIGSEGV (Arrow flattened the OR chain and
    recursed once per term): run in a subprocess so that a crash fails this test only."""
    import subprocess
    import sys

    run = subprocess.run([sys.executable, "-c", _BIG_OR, str(tmp_path / "t")], capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, f"exit {run.returncode}: {run.stderr[-2000:]}"
    # ids 0, 3, ..., 29997; mixed: odd i give id 3i, even i give x = 3i + 0.5, i.e. id = 6i + 1 < 60000
    assert run.stdout.split() == ["10000"] * 2 + ["10000"] * 2 + ["50000"] * 2


@pytest.mark.parametrize("depth", [101, 1000, 100_000])
def test_nesting_beyond_the_limit_is_invalid_filter(depth):
    from lamina.filter import MAX_FILTER_DEPTH

    assert depth > MAX_FILTER_DEPTH
    with pytest.raises(InvalidFilter, match=f"nests parentheses more than {MAX_FILTER_DEPTH} deep"):
        parse_filter("(" * depth + "id = 1" + ")" * depth, SCHEMA)


def test_nesting_up_to_the_limit_and_long_not_chains_evaluate():
    from lamina.filter import MAX_FILTER_DEPTH

    deep = "(" * (MAX_FILTER_DEPTH - 1) + "id < 3 OR (id = 7" + ")" * MAX_FILTER_DEPTH
    assert DATA.filter(parse_filter(deep, SCHEMA).expression)["id"].to_pylist() == [0, 1, 2, 7]
    nots = "NOT " * 20_001 + "id >= 2"  # a RecursionError before: NOT chains are not nesting
    assert DATA.filter(parse_filter(nots, SCHEMA).expression)["id"].to_pylist() == [0, 1]


def test_overly_long_filters_and_too_many_terms_are_invalid_filter(monkeypatch):
    from lamina import filter as filter_module

    with pytest.raises(InvalidFilter, match="longer than 10,000,000 characters"):
        parse_filter("id IN (" + "1, " * 3_400_000 + "1)", SCHEMA)
    monkeypatch.setattr(filter_module, "MAX_FILTER_TERMS", 40)
    parse_filter(" OR ".join(f"id = {i} AND score > 0.5" for i in range(20)), SCHEMA)  # 40 terms
    with pytest.raises(InvalidFilter, match="more than 40 terms"):
        parse_filter(" OR ".join(f"id = {i} AND score > 0.5" for i in range(20)) + " OR TRUE", SCHEMA)
    parse_filter("id IN (" + ", ".join(map(str, range(1000))) + ")", SCHEMA)  # an IN list is one term


@pytest.mark.parametrize("indexed", [True, False])
def test_in_list_of_100k_literals(tmp_path, indexed):
    t = lamina.create_table(str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("name", pa.string())]))
    t.append(pa.table({"id": np.arange(300_000), "name": [f"n{i}" for i in range(300_000)]}))
    if indexed:
        t.create_index("id", "btree")
    wanted = np.random.default_rng(5).choice(400_000, 100_000, replace=False)  # a quarter beyond the table
    text = "id IN (" + ", ".join(map(str, wanted)) + ")"
    assert ("index 'id_btree'" in t.explain(text)) == indexed
    got = t.to_arrow(filter=text)["id"].to_numpy()
    assert np.array_equal(got, np.sort(wanted[wanted < 300_000]))
    names = "name IN (" + ", ".join(f"'n{i}'" for i in wanted) + ")"
    assert t.count_rows(names) == int((wanted < 300_000).sum())


_FUZZ_TOKENS = [
    "(",
    ")",
    "NOT",
    "AND",
    "OR",
    "id",
    "score",
    "category",
    "meta.a",
    "ts",
    "=",
    "<",
    ">=",
    "!=",
    "IN",
    "BETWEEN",
    "LIKE",
    "IS",
    "NULL",
    "TRUE",
    "FALSE",
    "1",
    "2.5",
    "-3",
    "1e999",
    "'a'",
    "'NaN'",
    "'%'",
    ",",
    "TIMESTAMP",
    "DATE",
    "'2024-01-01'",
    "@",
    '"',
    "''",
    "`x`",
    ".",
    "vec",
    "meta",
]


_FUZZ_ATOMS = [
    "id = 1",
    "score < 'NaN'",
    "category LIKE '%'",
    "1 < 'a'",
    "meta.a IN (1, NULL)",
    "ts >= '2024-01-01'",
    "vec = 1",
    "meta = 1",
    "id BETWEEN 'a' AND 2",
    "id LIKE 'a'",
    "'a' = 'a'",
    "score = id",
    "category = id",
    "TRUE",
    "NULL",
    "id IS NULL",
    "1 = 1.5",
    "meta.b > 3",
    "DATE '2024-01-01' < ts",
    "id IN (1e999, 2)",
    "score IN ('x')",
    "category IN (1, 2)",
    "ts = 5",
    "id = TRUE",
    "NULL = NULL",
    "id > 2.5 AND id < 1e999",
]


def test_any_filter_string_evaluates_or_raises_invalid_filter():
    """Seeded random filters (atoms of every kind joined at random, then sometimes a token
    dropped or added): each parses into a filter that evaluates, or raises InvalidFilter."""
    rng = np.random.default_rng(16)
    valid = 0
    for _ in range(3000):
        parts = [str(rng.choice(_FUZZ_ATOMS)) for _ in range(int(rng.integers(1, 4)))]
        joined = parts[0]
        for p in parts[1:]:
            joined = f"{joined} {rng.choice(['AND', 'OR', 'AND NOT', 'OR NOT'])} " + (f"({p})" if rng.random() < 0.5 else p)
        tokens = joined.split()
        if rng.random() < 0.4:
            tokens.insert(int(rng.integers(0, len(tokens) + 1)), str(rng.choice(_FUZZ_TOKENS)))
        if rng.random() < 0.2 and len(tokens) > 1:
            del tokens[int(rng.integers(0, len(tokens)))]
        text = " ".join(tokens)
        try:
            flt = parse_filter(text, SCHEMA)
        except InvalidFilter:
            continue
        DATA.filter(flt.expression)
        valid += 1
    assert valid > 200  # many of them parse


def test_a_conjunct_of_several_ranges_is_rechecked(edge_tables):
    """A conjunct of several ranges that are not points (none the parser makes; a caller may build
    one) is left to the re-check: the index must not answer the filter as if it were exact."""
    from lamina.filter import Conjunct, Filter

    indexed, _ = edge_tables
    i = indexed.schema.field("i").type
    expr = pc.field("i").isin([3, 4, 5, 40]) & (pc.field("i") < 41)
    ranges = ((pa.scalar(3, i), True, pa.scalar(5, i), True), (pa.scalar(40, i), True, pa.scalar(40, i), True))
    conjuncts = (
        Conjunct("i", ranges, "i in [3, 5] or i = 40", True),
        Conjunct("i", ((None, False, pa.scalar(41, i), False),), "i < 41", True),
    )
    flt = Filter(expr, frozenset(["i"]), "i in [3, 5] or i = 40 and i < 41", conjuncts, pure=True)
    want = indexed.to_arrow(filter=expr, use_index=False)["i"].to_pylist()
    assert indexed.to_arrow(filter=flt, use_index=True)["i"].to_pylist() == want == [3, 4, 5, 40]


@pytest.mark.parametrize("type_", [pa.int8(), pa.int64(), pa.uint64(), pa.float64(), pa.int32()])
def test_a_long_integer_in_list_is_one_token_and_means_what_its_values_mean(type_, monkeypatch):
    """An IN list of 16+ plain integers is tokenized as one run and parsed in one go: the same rows, the same
    indexable terms and the same pruning tree as value by value (out-of-range values dropped, -0/0 for floats)."""
    import re

    import lamina.filter as F
    from lamina.prune import compile_filter

    values = [0, -1, 5, 127, 128, -129, 300, 2**63 - 1, 2**63, 2**64 - 1, -(2**63)] + list(range(7, 19))
    if not pa.types.is_integer(type_):  # a double cannot hold the largest exactly: refused either way (below)
        huge = "x IN (" + ", ".join(map(str, values)) + ")"
        with pytest.raises(InvalidFilter, match="cannot be compared"):
            F._parse_uncached(huge, pa.schema([("x", type_)]))
        values = [v for v in values if abs(v) <= 2**53]
    text = "x IN (" + " ,".join(f" {v}" for v in values) + " )"
    assert [t.kind for t in F._tokenize(text)] == ["word", "kw", "op", "ints", "op"]
    lo, hi = F.int_bounds(type_) if pa.types.is_integer(type_) else (-(2**53), 2**53)
    col = [v for v in values if lo <= v <= hi][:12] + [None, 1, 2, 3]
    schema = pa.schema([("x", type_)])
    table = pa.table({"x": pa.array(col, type=type_)})
    fast = F._parse_uncached(text, schema)
    tree = compile_filter(fast, schema).tree
    monkeypatch.setattr(F, "_INTS", re.compile(r"(?!)"))
    assert "ints" not in [t.kind for t in F._tokenize(text)]
    slow = F._parse_uncached(text, schema)
    assert table.filter(fast.expression).equals(table.filter(slow.expression))
    assert table.filter(fast.expression).num_rows == sum(1 for v in col if v in values)
    assert fast.conjuncts == slow.conjuncts and fast.pure == slow.pure
    assert fast.tree == slow.tree and compile_filter(slow, schema).tree == tree
    assert tree != compile_filter(F._parse_uncached("x IN (1, 2)", schema), schema).tree


def test_a_long_in_list_that_is_not_all_integers_is_parsed_value_by_value():
    import lamina.filter as F

    schema = pa.schema([("x", pa.float64()), ("s", pa.string())])
    mixed = "x IN (" + ", ".join(str(v) for v in range(20)) + ", 2.5)"
    assert "ints" not in [t.kind for t in F._tokenize(mixed)]
    kept = pa.table({"x": [2.5, 3.0, 99.0]}).filter(F._parse_uncached(mixed, schema).expression)
    assert kept.column("x").to_pylist() == [2.5, 3.0]
    with pytest.raises(InvalidFilter):  # integers against a string column: refused as value by value
        F._parse_uncached("s IN (" + ", ".join(str(v) for v in range(20)) + ")", schema)


# -- temporal literals finer than the column's unit ----------------------------------------------
T0 = dt.datetime(2026, 1, 1)


#: Time-of-day columns: name, type, units in a second. Row ``k`` holds NOON + k units.
TIMES = (
    ("t_s", pa.time32("s"), 1),
    ("t_ms", pa.time32("ms"), 10**3),
    ("t_us", pa.time64("us"), 10**6),
    ("t_ns", pa.time64("ns"), 10**9),
)
NOON = 12 * 3600


def _temporal_rows(ks: range) -> pa.Table:
    """Row ``k``: ``tss`` T0 + k s, ``tms`` T0 + k ms, ``d`` T0's date + k days, ``dur`` k s, and
    12:00:00 + k of the unit of each time column (``TIMES``) (all NULL where k % 7 == 3)."""

    def col(values: list, type_: pa.DataType) -> pa.Array:
        return pa.array([None if k % 7 == 3 else v for k, v in zip(ks, values)], type_)

    return pa.table(
        {
            "k": pa.array(list(ks), pa.int64()),
            "tss": col([T0 + dt.timedelta(seconds=k) for k in ks], pa.timestamp("s")),
            "tms": col([T0 + dt.timedelta(milliseconds=k) for k in ks], pa.timestamp("ms")),
            "d": col([T0.date() + dt.timedelta(days=k) for k in ks], pa.date32()),
            "dur": col([dt.timedelta(seconds=k) for k in ks], pa.duration("s")),
            **{name: col([NOON * per_second + k for k in ks], type_) for name, type_, per_second in TIMES},
        }
    )


@pytest.fixture
def temporal_tables(tmp_path):
    """Two tables of the same rows: the first indexed (btree on tss, tms, dur, t_s, t_ms and t_us, bitmap
    on d and t_ns) but for its last fragment; fragments of one row (k = 0) and one null, so zone maps
    decide alone on them."""
    tables = []
    for name, indexed in (("indexed", True), ("plain", False)):
        t = lamina.create_table(str(tmp_path / name), _temporal_rows(range(0)).schema)
        for ks in (range(0, 1), range(1, 10), range(3, 4), range(10, 20)):
            t.append(_temporal_rows(ks))
        if indexed:
            for column, kind in (
                ("tss", "btree"),
                ("tms", "btree"),
                ("dur", "btree"),
                ("d", "bitmap"),
                ("t_s", "btree"),
                ("t_ms", "btree"),
                ("t_us", "btree"),
                ("t_ns", "bitmap"),
            ):
                t.create_index(column, kind)
        t.append(_temporal_rows(range(20, 30)))
        tables.append(t)
    return tables


def _ks(*ks: int) -> Callable[[int], bool]:
    return lambda k: k in ks


TEMPORAL_CASES = [
    # timestamp('s'): a literal between two seconds is compared exactly
    ("tss >= TIMESTAMP '2026-01-01T00:00:00.5'", lambda k: k >= 1),
    ("tss < TIMESTAMP '2026-01-01T00:00:00.5'", _ks(0)),
    ("tss > TIMESTAMP '2026-01-01T00:00:00.5'", lambda k: k >= 1),
    ("tss <= TIMESTAMP '2026-01-01T00:00:00.5'", _ks(0)),
    ("tss = TIMESTAMP '2026-01-01T00:00:00.5'", _ks()),
    ("tss != TIMESTAMP '2026-01-01T00:00:00.5'", lambda k: True),
    ("TIMESTAMP '2026-01-01T00:00:00.5' > tss", _ks(0)),
    ("tss > '2026-01-01T00:00:02.000000001'", lambda k: k >= 3),
    ("tss <= '2026-01-01 00:00:02.999999999'", lambda k: k <= 2),
    ("tss BETWEEN TIMESTAMP '2026-01-01T00:00:01.5' AND TIMESTAMP '2026-01-01T00:00:05.5'", _ks(2, 4, 5)),
    ("tss IN (TIMESTAMP '2026-01-01T00:00:01.5', TIMESTAMP '2026-01-01T00:00:04')", _ks(4)),
    ("tss >= TIMESTAMP '2026-01-01T00:00:04' AND tss < TIMESTAMP '2026-01-01T00:00:05.000001'", _ks(4, 5)),
    ("tss < DATE '2026-01-02'", lambda k: True),  # a date is its midnight
    # timestamp('ms') against microseconds and nanoseconds
    ("tms >= TIMESTAMP '2026-01-01T00:00:00.001500'", lambda k: k >= 2),
    ("tms < TIMESTAMP '2026-01-01T00:00:00.001500'", lambda k: k <= 1),
    ("tms = TIMESTAMP '2026-01-01T00:00:00.0015'", _ks()),
    ("tms = TIMESTAMP '2026-01-01T00:00:00.002'", _ks(2)),
    ("tms > '2026-01-01T00:00:00.004000001'", lambda k: k >= 5),
    # date32 against timestamps
    ("d >= TIMESTAMP '2026-01-01T12:00'", lambda k: k >= 1),
    ("d < TIMESTAMP '2026-01-01T12:00'", _ks(0)),
    ("d = TIMESTAMP '2026-01-01T12:00'", _ks()),
    ("d = TIMESTAMP '2026-01-02T00:00'", _ks(1)),
    ("d <= TIMESTAMP '2026-01-03T00:00:00.000001'", lambda k: k <= 2),
    ("d IN (TIMESTAMP '2026-01-05T00:00', TIMESTAMP '2026-01-06T00:00:01', DATE '2026-01-07')", _ks(4, 6)),
    # duration('s') against fractional numbers (counted in the column's unit)
    ("dur = 1.5", _ks()),
    ("dur > 1.5", lambda k: k >= 2),
    ("dur <= 1.5", lambda k: k <= 1),
    ("dur >= 1.5 AND dur < 4.5", _ks(2, 4)),
    ("dur IN (1.5, 5, 6.0)", _ks(5, 6)),
    ("dur < 1e30", lambda k: True),
    # time32('s'): a time of day between two seconds is compared exactly
    ("t_s >= '12:00:00.5'", lambda k: k >= 1),
    ("t_s < '12:00:00.5'", _ks(0)),
    ("t_s > '12:00:00.5'", lambda k: k >= 1),
    ("t_s <= '12:00:00.5'", _ks(0)),
    ("t_s = '12:00:00.5'", _ks()),
    ("t_s != '12:00:00.5'", lambda k: True),
    ("'12:00:00.5' > t_s", _ks(0)),
    ("t_s = '12:00:02'", _ks(2)),
    ("t_s < '12:00'", _ks()),
    ("t_s >= '11:59:59.999999999'", lambda k: True),
    ("t_s BETWEEN '12:00:01.5' AND '12:00:05.5'", _ks(2, 4, 5)),
    ("t_s IN ('12:00:01.5', '12:00:04')", _ks(4)),
    ("t_s >= '12:00:04' AND t_s < '12:00:05.000001'", _ks(4, 5)),
    ("t_s >= 43201.5", lambda k: k >= 2),  # a number counts the column's unit (seconds past midnight)
    ("t_s = 43201.5", _ks()),
    # time32('ms'), time64('us') and time64('ns') against finer literals
    ("t_ms >= '12:00:00.0015'", lambda k: k >= 2),
    ("t_ms < '12:00:00.001500'", lambda k: k <= 1),
    ("t_ms = '12:00:00.0015'", _ks()),
    ("t_ms = '12:00:00.002'", _ks(2)),
    ("t_ms > '12:00:00.004000001'", lambda k: k >= 5),
    ("t_us >= '12:00:00.0000015'", lambda k: k >= 2),
    ("t_us <= '12:00:00.000004999'", lambda k: k <= 4),
    ("t_us IN ('12:00:00.000005', '12:00:00.0000065', '12:00:00.000007')", _ks(5, 7)),
    ("t_ns = '12:00:00.000000002'", _ks(2)),
    ("t_ns > '12:00:00.0000000025'", lambda k: k >= 3),
    ("t_ns = '12:00:00.0000000025'", _ks()),
    ("t_ns IN ('12:00:00.000000005', '12:00:00.0000000065', '12:00:00.000000006')", _ks(5, 6)),
]


@pytest.mark.parametrize("text,expected", TEMPORAL_CASES, ids=[c[0] for c in TEMPORAL_CASES])
def test_temporal_literals_compare_by_value(temporal_tables, text, expected):
    """A literal finer than a temporal column's unit is compared exactly (``>=`` rounds up, ``<`` stays
    strict, ``=`` matches nothing), through indices, zone maps and scans; ``delete`` removes those rows."""
    indexed, plain = temporal_tables
    everything = plain.to_arrow().to_pylist()
    times = [name for name, _, _ in TIMES]
    column = next(c for c in ("tss", "tms", "dur", *times, "d") if c in text)
    want = sorted(r["k"] for r in everything if r[column] is not None and expected(r["k"]))
    # DuckDB reads t_s, t_ms and t_us as TIME (microseconds), t_ns as TIME_NS, and truncates a string finer
    # than that to it: a second opinion on the other string literals
    digits = [len(f) for f in re.findall(r"\.(\d+)'", text)]
    if column in times and "'" in text and max(digits, default=0) <= (9 if column == "t_ns" else 6):
        assert sorted(r[0] for r in _duckdb_rows(plain.to_arrow(columns=["k", column]), text).elements()) == want
    for t in (indexed, plain):
        for use_index in (True, False):
            assert sorted(t.to_arrow(filter=text, use_index=use_index)["k"].to_pylist()) == want, (t.uri, use_index)
    assert indexed.delete(text) == plain.delete(text) == len(want)
    kept = sorted(r["k"] for r in everything if not (r[column] is not None and expected(r["k"])))
    for t in (indexed, plain):
        assert sorted(t.to_arrow()["k"].to_pylist()) == kept, t.uri


# -- IN and NOT IN in three-valued logic, as DuckDB answers -------------------------------------
IN_CASES = [
    "i IN (1, 2, 27)",
    "i NOT IN (1, 2, 27)",
    "i IN (7, NULL)",
    "i NOT IN (7, NULL)",
    "i IN (NULL)",
    "i NOT IN (NULL)",
    "NOT (i IN (7, 8))",
    "NOT (i NOT IN (7, NULL))",
    "i NOT IN (7, 8) OR cat = 'c1'",
    "i IN (7, NULL) OR cat IS NULL",
    "i NOT IN (7, NULL) OR cat IS NULL",
    "cat NOT IN ('c1', 'c2')",
    "cat IN ('c1', NULL)",
    "cat NOT IN ('c1', NULL) OR i = 5",
    "x NOT IN (0.5, 17)",
    "x IN (0.5, NULL) AND i < 100",
    "i NOT IN (5.5, 6) AND i < 20",
    "NOT (i = 1 OR i = 2) AND i < 9",
    "i NOT IN (3, 4) AND i BETWEEN 0 AND 10",
    "i IN (3, 4, NULL) AND i IN (4, 5)",
    "NOT (i IN (7, NULL) OR i = 8)",
    "NOT (i IN (7) OR i = 8 OR i IN (9, NULL))",
]


def _duckdb_rows(table: pa.Table, where: str) -> collections.Counter:
    """The rows DuckDB returns for ``SELECT * FROM table WHERE where``, canonical, counted."""
    import duckdb

    con = duckdb.connect()
    con.register("t", table)
    got = con.execute(f"SELECT {', '.join(table.column_names)} FROM t WHERE {where}").fetchall()
    return collections.Counter(_canon([dict(zip(table.column_names, r)) for r in got]))


@pytest.mark.parametrize("text", IN_CASES)
def test_in_and_not_in_follow_three_valued_logic_as_duckdb(edge_tables, text):
    """``x NOT IN (1, 2)`` is NULL (not returned) where x is NULL, and a NULL in the list makes IN
    NULL where it would be FALSE: the rows DuckDB returns for the same SQL, with and without indices,
    zone maps and row-group statistics; ``delete`` removes exactly those rows."""
    indexed, plain = edge_tables
    everything = plain.to_arrow()
    want = _duckdb_rows(everything, text)
    for t in (indexed, plain):
        for use_index in (True, False):
            got = collections.Counter(_canon(t.to_arrow(filter=text, use_index=use_index).to_pylist()))
            assert got == want, (t.uri, use_index)
    assert indexed.delete(text) == plain.delete(text) == sum(want.values())
    kept = _duckdb_rows(everything, f"({text}) IS NOT TRUE")
    for t in (indexed, plain):
        assert collections.Counter(_canon(t.to_arrow().to_pylist())) == kept, t.uri


# -- pyarrow expressions read into the filter tree ------------------------------------------------
ARROW_EXPRESSIONS = [
    pc.field("id") < 100,
    (pc.field("id") > 450) | (pc.field("category") == "b"),
    ~((pc.field("id") >= 10) & (pc.field("id") <= 490)),
    pc.field("category").isin(["a", None]),
    ~pc.field("category").isin(["a", "b"]),
    pc.field("category").is_null() | pc.field(("meta", "a")).is_valid(),
    pc.match_like(pc.field(("meta", "b")), "b1%"),
    pc.field("ts") >= TS("2024-01-01T00:05:00"),
    pc.field(("meta", "a")) == 5,
    pc.field("score") > 0,
    pc.field("id") < 2.5,  # compared in double by Arrow: left opaque
    pc.field("id").cast(pa.float64()) < pc.field("score") * 300,
    pc.scalar(True),
    pc.Expression._call("and", [pc.field("id") < 300, ~pc.field("category").isin(["a"])]),
]


@pytest.mark.parametrize("expression", ARROW_EXPRESSIONS, ids=str)
def test_a_pyarrow_expression_read_into_the_tree_means_what_arrow_does(expression):
    """The tree read from an expression converts back to an expression that selects the same rows, opaque
    parts included (Arrow's set lookup is never NULL: ``~isin`` keeps null rows, unlike SQL's NOT IN)."""
    from lamina.expr import to_arrow
    from lamina.filter import from_expression

    tree = from_expression(expression, SCHEMA)
    assert DATA.filter(to_arrow(tree)).equals(DATA.filter(expression))


def test_what_a_pyarrow_expression_is_read_as():
    from lamina.expr import And, Compare, In, IsNull, Opaque, Or
    from lamina.filter import from_expression

    tree = from_expression((pc.field("id") < 5) & pc.field("category").isin(["a", None]), SCHEMA)
    assert isinstance(tree, And) and isinstance(tree.kids[0], Compare) and isinstance(tree.kids[1], Or)
    assert isinstance(tree.kids[1].kids[0], In) and isinstance(tree.kids[1].kids[1], IsNull)
    assert isinstance(from_expression(pc.field("id") < 2.5, SCHEMA), Opaque)
    assert isinstance(from_expression(pc.field(("meta", "a")) == 5, SCHEMA), Compare)  # int64 literal, int32 field
    chain = pc.field("id") == 0
    for i in range(1, 2000):  # nested 2,000 deep: read without recursion
        chain = chain | (pc.field("id") == i)
    assert isinstance(from_expression(chain, SCHEMA), Or) and len(from_expression(chain, SCHEMA).kids) == 2000
