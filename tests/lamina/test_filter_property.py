"""Random filters (a seeded generator) give the same rows through indices, through a scan, and by
a brute-force evaluation in Python; ``delete()`` removes the same rows with and without indices.

The table has an int column ``id`` (btree and bitmap), a float column ``x`` (btree) holding NaN,
±inf, ±0.0 and nulls, a string column ``cat`` (btree and bitmap) and a small int column ``k``
(bitmap), all with nulls, in fragments an index covers (some with deletions) and one it does not.
Filters mix several bounds on one column, IN lists with NULL, NaN and fractional literals,
indexable terms with LIKE / IS NULL / OR / NOT, literals on either side, and ±0.0 / ±inf bounds.

A failure prints the seed and the filter; ``LAMINA_FILTER_SEEDS=a-b`` runs other seeds.
"""

from __future__ import annotations

import datetime as dt
import math
import os
import re
from dataclasses import dataclass
from fractions import Fraction

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina

NAN, INF = math.nan, math.inf
ROWS = 240  # per fragment: 4 fragments, selective filters take candidates, broad ones scan

X_SPECIAL = [NAN, INF, -INF, -0.0, 0.0, 1e300]
CAT_POOL = ["a", "b", "c", "c1", "c10", "c2", "", "d%", "e_", "bb"]

SCHEMA = pa.schema([("id", pa.int64()), ("x", pa.float64()), ("cat", pa.string()), ("k", pa.int64())])
INDICES = [("id", "btree"), ("id", "bitmap"), ("x", "btree"), ("cat", "btree"), ("cat", "bitmap"), ("k", "bitmap")]

#: The shapes issue 16 (section D) names, and the NaN bound of defect 2, always checked.
FIXED = [
    "id IN (7, NULL)",
    "id = 7 AND cat IS NULL",
    "id < 50 AND cat LIKE 'c1%'",
    "id < 100 AND id > 5 AND id > 10",
    "id IN (1,2,3) AND id IN (2,3,4)",
    "x > 2 AND x > 'NaN'",
    "x > 'NaN' AND x < 100",
    "x IN ('NaN', 0.0) AND x <= 0",
    "x >= -0.0 AND x <= 0.0 AND id < 30",
    "id > 5.5 AND id < 9.0 AND k IN (1, 2.5, NULL)",
    "id IN (3, 4, 5) AND id BETWEEN 4 AND 40 AND x < 'inf'",
    # shapes row-group pruning (lamina.prune) decides on: negations, NaN, NULL in lists
    "NOT (x < 5) AND id < 30",
    "x != 1 AND NOT (id BETWEEN 0 AND 50)",
    "id NOT IN (1, 2, NULL) OR x = 'NaN'",
    "NOT (cat >= 'c' AND cat < 'c2') AND k IS NOT NULL",
    "id = 5.5 OR id != 5.5 AND x IS NULL",
]


def _rows(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    def nulls(values: list, p: float = 0.08) -> list:
        return [None if rng.random() < p else v for v in values]

    return pa.table(
        {
            "id": nulls([int(v) for v in rng.integers(-5, 60, n)]),
            "x": nulls([X_SPECIAL[int(j) % 6] if j < 0 else j / 2 for j in rng.integers(-16, 40, n)]),  # 30% special
            "cat": nulls([CAT_POOL[j] for j in rng.integers(0, len(CAT_POOL), n)]),
            "k": nulls([int(v) for v in rng.integers(0, 5, n)]),
        },
        schema=SCHEMA,
    )


def _make_table(path: str, indexed: bool, seed: int = 0) -> lamina.Table:
    """Three fragments, rows deleted from them, indices (if ``indexed``), a fourth fragment the
    indices do not cover, and more rows deleted; the same rows whether indexed or not."""
    rng = np.random.default_rng(seed)
    t = lamina.create_table(path, SCHEMA)
    for f in range(3):
        t.append(_rows(rng, f * ROWS, ROWS))
    t.delete("k = 4 AND id < 20")
    if indexed:
        for column, kind in INDICES:
            t.create_index(column, kind)
    t.append(_rows(rng, 3 * ROWS, ROWS))
    t.delete("cat = 'bb' AND x > 1")
    return t


# -- filters as trees: rendered to text, evaluated in Python ---------------------------------
@dataclass
class Lit:
    value: object  # None, int, float, str

    def render(self) -> str:
        v = self.value
        if v is None:
            return "NULL"
        if isinstance(v, str):
            return "'" + v.replace("'", "''") + "'"
        if isinstance(v, float) and math.isnan(v):
            return "'NaN'"  # a string literal cast to the float column
        if isinstance(v, float) and math.isinf(v):
            return "'inf'" if v > 0 else "'-inf'"
        return repr(v)


@dataclass
class Node:
    kind: str  # cmp, in, between, like, isnull, and, or, not, const
    column: str = ""
    op: str = ""
    lits: tuple = ()
    negate: bool = False
    left_literal: bool = False
    kids: tuple = ()

    def render(self) -> str:
        if self.kind == "const":
            return self.op
        if self.kind in ("and", "or"):
            return f" {self.kind.upper()} ".join(f"({k.render()})" if k.kind in ("and", "or") else k.render() for k in self.kids)
        if self.kind == "not":
            return f"NOT ({self.kids[0].render()})"
        neg = "NOT " if self.negate else ""
        if self.kind == "cmp":
            lit = self.lits[0].render()
            return f"{lit} {self.op} {self.column}" if self.left_literal else f"{self.column} {self.op} {lit}"
        if self.kind == "in":
            return f"{self.column} {neg}IN ({', '.join(x.render() for x in self.lits)})"
        if self.kind == "between":
            return f"{self.column} {neg}BETWEEN {self.lits[0].render()} AND {self.lits[1].render()}"
        if self.kind == "like":
            return f"{self.column} {neg}LIKE {self.lits[0].render()}"
        return f"{self.column} IS {'NOT ' if self.negate else ''}NULL"


_FLIP = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "==": "==", "!=": "!=", "<>": "<>"}


def _cmp(a, op: str, b) -> bool | None:
    """``a op b`` with SQL NULLs and IEEE floats (Python compares int and float exactly)."""
    if a is None or b is None:
        return None
    if op in ("=", "=="):
        return a == b
    if op in ("!=", "<>"):
        return a != b
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]


def _and(a, b):
    if a is False or b is False:
        return False
    return None if a is None or b is None else True


def _or(a, b):
    if a is True or b is True:
        return True
    return None if a is None or b is None else False


def _or_all(values) -> bool | None:
    out: bool | None = False
    for v in values:
        out = _or(out, v)
    return out


def _like(pattern: str) -> re.Pattern:
    """LIKE as a regex: ``%`` any run, ``_`` one character, a backslash escapes the next one."""
    out, chars = [], iter(pattern)
    for c in chars:
        if c == "\\":
            out.append(re.escape(next(chars, "\\")))
        else:
            out.append(".*" if c == "%" else "." if c == "_" else re.escape(c))
    return re.compile("".join(out), re.S)


def evaluate(node: Node, row: dict) -> bool | None:
    """The filter on one row, in three-valued logic."""
    k = node.kind
    if k == "const":
        return node.op == "TRUE"
    if k == "and":
        out: bool | None = True
        for kid in node.kids:
            out = _and(out, evaluate(kid, row))
        return out
    if k == "or":
        out = False
        for kid in node.kids:
            out = _or(out, evaluate(kid, row))
        return out
    if k == "not":
        v = evaluate(node.kids[0], row)
        return None if v is None else not v
    v = row[node.column]
    if k == "cmp":
        lit = node.lits[0].value
        return _cmp(lit, node.op, v) if node.left_literal else _cmp(v, node.op, lit)
    if k == "in":  # the OR of ``=``: NULL where v is NULL, or where it misses and the list holds NULL
        values = [x.value for x in node.lits]
        found = _or_all(_cmp(v, "=", x) for x in values)
        return found if not node.negate or found is None else not found
    if k == "between":
        out = _and(_cmp(v, ">=", node.lits[0].value), _cmp(v, "<=", node.lits[1].value))
        return out if not node.negate or out is None else not out
    if k == "like":
        if v is None:
            return None
        return bool(_like(node.lits[0].value).fullmatch(v)) != node.negate
    return (v is None) != node.negate  # isnull


class Gen:
    """Random filters over SCHEMA from one seed."""

    def __init__(self, seed: int):
        self.r = np.random.default_rng(seed)
        self.narrow: list[Lit] | None = None  # when set, literals come from these (equal bounds meet)

    def pick(self, xs):
        return xs[int(self.r.integers(0, len(xs)))]

    def chance(self, p: float) -> bool:
        return bool(self.r.random() < p)

    def lit(self, column: str) -> Lit:
        if self.narrow is not None:
            return self.pick(self.narrow)
        if self.chance(0.06):
            return Lit(None)
        if column == "cat":
            return Lit(self.pick(CAT_POOL + ["c0", "z", "B"]))
        if column == "k":
            return Lit(self.pick([0, 1, 2, 3, 4, 5, -1, 2.5, 3.0]))
        if column == "id":
            if self.chance(0.8):
                return Lit(int(self.r.integers(-8, 64)))
            return Lit(self.pick([5.5, -0.5, 7.0, 0.0, -0.0, 1e30, -1e30, 99999999999999999999, 59.999]))
        if self.chance(0.12):
            return Lit(NAN)
        if self.chance(0.2):
            return Lit(self.pick([INF, -INF, -0.0, 0.0]))
        if self.chance(0.6):
            return Lit(int(self.r.integers(-2, 44)) / 2)
        return Lit(self.pick([int(self.r.integers(-3, 22)), 0.25, 2.0000001, 1e300, -1e300, 1e308]))

    def term(self, column: str | None = None, indexable: bool = False) -> Node:
        """One predicate; ``indexable``: one an index answers exactly (mostly)."""
        column = column or self.pick(["id", "id", "x", "x", "cat", "k"])
        if indexable:
            kind = self.pick(["cmp", "cmp", "cmp", "in", "between"])
        else:
            kind = self.pick(["cmp", "cmp", "cmp", "in", "between", "isnull"] + (["like", "like"] if column == "cat" else []))
        if kind == "cmp":
            ops = ["=", "==", "<", "<=", ">", ">="] + ([] if indexable else ["!=", "<>"])
            return Node("cmp", column, self.pick(ops), (self.lit(column),), left_literal=self.chance(0.2))
        if kind == "in":
            return Node(
                "in", column, lits=tuple(self.lit(column) for _ in range(int(self.r.integers(1, 6)))), negate=self.chance(0.15)
            )
        if kind == "between":
            return Node("between", column, lits=(self.lit(column), self.lit(column)), negate=self.chance(0.15))
        if kind == "like":
            return Node(
                "like",
                column,
                lits=(Lit(self.pick(["c%", "c1%", "%", "_", "c_", "%0", "a", "", "d%", "e\\_"])),),
                negate=self.chance(0.2),
            )
        return Node("isnull", column, negate=self.chance(0.5))

    def tree(self, depth: int) -> Node:
        roll = self.r.random()
        if depth == 0 or roll < 0.55:
            return self.term() if not self.chance(0.03) else Node("const", op=self.pick(["TRUE", "FALSE"]))
        if roll < 0.75:
            return Node("and", kids=tuple(self.tree(depth - 1) for _ in range(int(self.r.integers(2, 4)))))
        if roll < 0.92:
            return Node("or", kids=tuple(self.tree(depth - 1) for _ in range(int(self.r.integers(2, 4)))))
        return Node("not", kids=(self.tree(depth - 1),))

    def equalities(self) -> Node:
        """``c = a OR c = b OR ...`` (which the parser folds into one set lookup), maybe negated
        and maybe with another term ORed in."""
        column = self.pick(["id", "x", "cat", "k"])
        kids = [
            Node("cmp", column, self.pick(["=", "=="]), (self.lit(column),), left_literal=self.chance(0.2))
            for _ in range(int(self.r.integers(2, 6)))
        ]
        if self.chance(0.3):
            kids.insert(int(self.r.integers(0, len(kids))), self.term())
        node = Node("or", kids=tuple(kids))
        return Node("not", kids=(node,)) if self.chance(0.4) else node

    def filter(self) -> Node:
        """Mostly what an index serves (several bounds on one column; top-level ANDs, sometimes
        with a term no index answers); otherwise any tree."""
        if self.chance(0.1):
            return self.equalities() if self.chance(0.5) else Node("and", kids=(self.term(indexable=True), self.equalities()))
        if self.chance(0.3):  # several bounds on one column, from few values half of the time
            column = self.pick(["id", "x", "x", "cat", "k"])
            if self.chance(0.5):
                self.narrow = [self.lit(column) for _ in range(3)]
            node = Node("and", kids=tuple(self.term(column, indexable=True) for _ in range(int(self.r.integers(2, 5)))))
            self.narrow = None
            return node
        if self.chance(0.5):
            column = self.pick(["id", "x", "x", "cat", "k"])
            kids = [
                self.term(column if self.chance(0.7) else None, indexable=self.chance(0.85))
                for _ in range(int(self.r.integers(1, 5)))
            ]
            if self.chance(0.25):
                kids.append(self.tree(2))
            return kids[0] if len(kids) == 1 else Node("and", kids=tuple(kids))
        return self.tree(3)


def _seeds() -> range:
    spec = os.environ.get("LAMINA_FILTER_SEEDS", "0-4")
    lo, _, hi = spec.partition("-")
    return range(int(lo), int(hi or lo) + 1)


def _canon(table: pa.Table) -> list[tuple]:
    """Rows comparable with ==: floats by repr (NaN equals NaN, -0.0 differs from 0.0)."""
    return [tuple(repr(v) if isinstance(v, float) else v for v in r.values()) for r in table.to_pylist()]


def _brute(rows: list[dict], node: Node, keep: bool) -> list[tuple]:
    picked = [r for r in rows if (evaluate(node, r) is True) == keep]
    return _canon(pa.Table.from_pylist(picked, schema=SCHEMA))


@pytest.fixture(scope="module")
def indexed_table(tmp_path_factory) -> lamina.Table:
    return _make_table(str(tmp_path_factory.mktemp("prop") / "indexed"), indexed=True)


def test_fixed_shapes_equal_scan(indexed_table):
    """Section D's shapes: through indices == without."""
    for text in FIXED:
        a = _canon(indexed_table.to_arrow(filter=text, use_index=True))
        b = _canon(indexed_table.to_arrow(filter=text, use_index=False))
        assert a == b, f"{text!r}: {len(a)} rows through indices, {len(b)} by a scan"


#: pyarrow expressions, read into the filter tree: indices answer their top-level terms as they answer text.
EXPRESSIONS = [
    (pc.field("id") == 7) & pc.field("cat").is_null(),
    pc.field("id").isin([3, 5, 9, 40]) & (pc.field("x") > 0),
    (pc.field("id") >= 10) & (pc.field("id") < 20) & ~(pc.field("k") == 1),
    pc.field("cat").isin(["c1", None]) & (pc.field("k") <= 2),
    ~pc.field("id").isin([1, 2]) & (pc.field("k") == 3),
    (pc.field("x") == 0.0) & (pc.field("id") > 5),
]


@pytest.mark.parametrize("expression", EXPRESSIONS, ids=str)
def test_pyarrow_expressions_use_indices_and_read_what_arrow_evaluates(indexed_table, expression):
    want = _canon(indexed_table.to_arrow().filter(expression))
    assert _canon(indexed_table.to_arrow(filter=expression, use_index=True)) == want
    assert _canon(indexed_table.to_arrow(filter=expression, use_index=False)) == want
    assert "index lookups for 0 fragment" not in indexed_table.explain(expression)


@pytest.mark.parametrize("seed", _seeds())
def test_random_filters_read_the_same_rows_with_and_without_indices(indexed_table, seed):
    t = indexed_table
    everything = t.to_arrow().to_pylist()
    gen = Gen(seed)
    for n in range(100):
        node = gen.filter()
        text = node.render()
        want = _brute(everything, node, keep=True)
        scanned = _canon(t.to_arrow(filter=text, use_index=False))
        assert scanned == want, f"seed {seed} #{n} {text!r}: scan {len(scanned)} rows, brute force {len(want)}"
        through = _canon(t.to_arrow(filter=text, use_index=True))
        assert through == want, f"seed {seed} #{n} {text!r}: indices {len(through)} rows, brute force {len(want)}"


@pytest.mark.parametrize("seed", _seeds())
def test_random_deletes_remove_the_same_rows_with_and_without_indices(tmp_path, seed):
    """Two tables of the same rows, one indexed: each deletes the same random filters in turn and
    keeps exactly the rows brute force keeps."""
    indexed = _make_table(str(tmp_path / "indexed"), indexed=True, seed=seed)
    plain = _make_table(str(tmp_path / "plain"), indexed=False, seed=seed)
    gen = Gen(1000 + seed)
    texts = list(FIXED) if seed == _seeds()[0] else []
    steps = [(text, None) for text in texts] + [(None, gen.filter()) for _ in range(8)]
    for n, (text, node) in enumerate(steps):
        want = None  # a fixed text is checked against the plain table only
        if node is not None:
            text = node.render()
            want = _brute(plain.to_arrow().to_pylist(), node, keep=False)
        deleted_indexed, deleted_plain = indexed.delete(text), plain.delete(text)
        left_indexed, left_plain = _canon(indexed.to_arrow()), _canon(plain.to_arrow())
        assert left_indexed == left_plain, (
            f"seed {seed} #{n} {text!r}: the indexed table kept {len(left_indexed)} rows, the plain one {len(left_plain)}"
        )
        assert deleted_indexed == deleted_plain
        if want is not None:
            assert left_plain == want, f"seed {seed} #{n} {text!r}: {len(left_plain)} rows left, brute force {len(want)}"


# -- temporal columns, against literals of every unit ----------------------------------------------
#: ``ts`` timestamp('s'), ``tm`` timestamp('ms'), ``d`` date32, ``dur`` duration('s'), each 0-11 units past
#: BASE, and times of day ``t_s`` time32('s'), ``t_ms`` time32('ms'), ``t_us`` time64('us'), ``t_ns``
#: time64('ns'), each 0-11 units past noon (sorted within a fragment, so zone maps and row-group statistics
#: decide near the literals), and a row number ``n``. Literals: TIMESTAMP '...' to the microsecond, strings
#: to the nanosecond (times of day to a tenth of one), DATE '...', numbers with fractions against the
#: duration and the times of day; brute force compares exact nanoseconds.
BASE = dt.datetime(2026, 1, 1)
BASE_NS = (BASE - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1) * 1000
DAY_NS = 86_400 * 10**9
NOON_NS = 12 * 3600 * 10**9
TIMES = {"t_s": pa.time32("s"), "t_ms": pa.time32("ms"), "t_us": pa.time64("us"), "t_ns": pa.time64("ns")}
UNIT_NS = {"ts": 10**9, "tm": 10**6, "d": DAY_NS, "dur": 10**9, "t_s": 10**9, "t_ms": 10**6, "t_us": 10**3, "t_ns": 1}
TEMPORAL = pa.schema(
    [
        ("n", pa.int64()),
        ("ts", pa.timestamp("s")),
        ("tm", pa.timestamp("ms")),
        ("d", pa.date32()),
        ("dur", pa.duration("s")),
        *TIMES.items(),
    ]
)
TEMPORAL_COLUMNS = ["ts", "tm", "d", "dur", *TIMES]
TEMPORAL_INDICES = [
    ("ts", "btree"),
    ("ts", "bitmap"),
    ("tm", "btree"),
    ("d", "bitmap"),
    ("d", "btree"),
    ("dur", "btree"),
    ("t_s", "btree"),
    ("t_ms", "bitmap"),
    ("t_us", "btree"),
    ("t_ns", "btree"),
    ("t_ns", "bitmap"),
]
#: Offsets of a literal from a whole unit, in nanoseconds: exact, a nanosecond, a microsecond, half a unit.
_NUDGES = {
    "ts": [0, 0, 1, -1, 1000, -1000, 500_000_000],
    "tm": [0, 0, 1, -1, 1000, -1000, 500_000],
    "d": [0, 0, 1, -1, 1000, 10**9, DAY_NS // 2],
    "dur": [0, 0, 500_000_000, -500_000_000, 250_000_000],
    "t_s": [0, 0, 1, -1, 1000, -1000, 500_000_000],
    "t_ms": [0, 0, 1, -1, 1000, -1000, 500_000],
    "t_us": [0, 0, 1, -1, 500],
    "t_ns": [0, 0, Fraction(1, 2), Fraction(-1, 2), Fraction(1, 10)],
}


def _temporal_rows(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    def values(column: str) -> list:
        units = sorted(int(v) for v in rng.integers(0, 12, n))
        return [None if rng.random() < 0.08 else u for u in units]

    ts, tm, d, dur = values("ts"), values("tm"), values("d"), values("dur")
    times = {c: [None if v is None else NOON_NS // UNIT_NS[c] + v for v in values(c)] for c in TIMES}
    return pa.table(
        {
            "n": pa.array(range(start, start + n), pa.int64()),
            "ts": pa.array([None if v is None else BASE + dt.timedelta(seconds=v) for v in ts], pa.timestamp("s")),
            "tm": pa.array([None if v is None else BASE + dt.timedelta(milliseconds=v) for v in tm], pa.timestamp("ms")),
            "d": pa.array([None if v is None else BASE.date() + dt.timedelta(days=v) for v in d], pa.date32()),
            "dur": pa.array([None if v is None else dt.timedelta(seconds=v) for v in dur], pa.duration("s")),
            **{c: pa.array(times[c], type_) for c, type_ in TIMES.items()},
        },
        schema=TEMPORAL,
    )


def _make_temporal_table(path: str, indexed: bool, seed: int = 0) -> lamina.Table:
    rng = np.random.default_rng(seed)
    t = lamina.create_table(path, TEMPORAL)
    for f in range(3):
        t.append(_temporal_rows(rng, f * ROWS, ROWS), row_group_rows=40)
    t.delete("n < 20")
    if indexed:
        for column, kind in TEMPORAL_INDICES:
            t.create_index(column, kind)
    t.append(_temporal_rows(rng, 3 * ROWS, ROWS), row_group_rows=40)
    t.delete("n >= 700 AND n < 710")
    return t


def _pylist(table: pa.Table) -> list[dict]:
    """A table's rows, times of day as their integers (``datetime.time`` has no nanoseconds)."""
    ints = {32: pa.int32(), 64: pa.int64()}
    return table.cast(
        pa.schema([pa.field(f.name, ints[f.type.bit_width]) if f.name in TIMES else f for f in table.schema])
    ).to_pylist()


def _as_ns(row: dict) -> dict:
    """A row's temporal values as exact nanoseconds (``dur`` from zero, times of day from midnight, the
    others from the epoch)."""
    out = {"n": row["n"]}
    for column in TIMES:
        out[column] = None if row[column] is None else row[column] * UNIT_NS[column]
    for column in ("ts", "tm", "d"):
        v = row[column]
        if isinstance(v, dt.date) and not isinstance(v, dt.datetime):
            v = dt.datetime.combine(v, dt.time())
        out[column] = None if v is None else (v - dt.datetime(1970, 1, 1)) // dt.timedelta(microseconds=1) * 1000
    out["dur"] = None if row["dur"] is None else row["dur"] // dt.timedelta(microseconds=1) * 1000
    return out


@dataclass
class TLit:
    """A temporal literal: its exact value in nanoseconds (None: NULL) and its text."""

    value: object
    text: str

    def render(self) -> str:
        return self.text


def _instant(ns: int) -> TLit:
    """An instant as DATE '...', TIMESTAMP '...' (to the microsecond) or a string (to the nanosecond)."""
    whole = dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=ns // 1000)
    if ns % DAY_NS == 0 and ns % 3 == 0:
        return TLit(ns, f"DATE '{whole.date().isoformat()}'")
    if ns % 1000 == 0 and ns % 7 != 0:
        return TLit(ns, f"TIMESTAMP '{whole.isoformat()}'")
    return TLit(ns, f"'{whole:%Y-%m-%d %H:%M:%S}.{ns % 10**9:09d}'")


def _time_of_day(ns: Fraction | int) -> TLit:
    """A time of day (nanoseconds past midnight, maybe a fraction of one) as a string, its fraction of a second
    written out exactly."""
    ns = Fraction(ns)
    seconds = ns.numerator // (ns.denominator * 10**9)
    digits, frac = 0, (ns - seconds * 10**9) / 10**9
    while (frac * 10**digits).denominator != 1:
        digits += 1
    text = f"{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    if frac:
        text += "." + f"{int(frac * 10**digits):0{digits}d}".rstrip("0")
    return TLit(ns, f"'{text}'")


class TemporalGen(Gen):
    """Random filters over TEMPORAL's columns (the grammar of ``Gen``, other columns and literals)."""

    def lit(self, column: str) -> TLit:
        if self.narrow is not None:
            return self.pick(self.narrow)
        if self.chance(0.05):
            return TLit(None, "NULL")
        units = int(self.r.integers(-1, 14))
        if column == "dur":
            if self.chance(0.05):
                big = self.pick([1e30, -1e30])
                return TLit(Fraction(big) * 10**9, repr(big))
            number = units + self.pick([0, 0, 0.5, -0.5, 0.25])
            return TLit(Fraction(number) * 10**9, repr(number))
        if column in TIMES:
            if self.chance(0.15):  # a number counts the column's unit past midnight
                number = NOON_NS // UNIT_NS[column] + units + self.pick([0, 0.5, -0.5, 0.25])
                return TLit(Fraction(number) * UNIT_NS[column], repr(number))
            if self.chance(0.05):
                return _time_of_day(self.pick([0, DAY_NS - 1, Fraction(DAY_NS * 10 - 1, 10)]))
            return _time_of_day(NOON_NS + units * UNIT_NS[column] + self.pick(_NUDGES[column]))
        return _instant(BASE_NS + units * UNIT_NS[column] + self.pick(_NUDGES[column]))

    def term(self, column: str | None = None, indexable: bool = False) -> Node:
        node = super().term(column or self.pick(TEMPORAL_COLUMNS), indexable)
        return node if node.kind != "like" else Node("isnull", node.column, negate=node.negate)

    def filter(self) -> Node:
        if self.chance(0.4):  # several bounds on one column, from few values half of the time
            column = self.pick(TEMPORAL_COLUMNS)
            if self.chance(0.5):
                self.narrow = [self.lit(column) for _ in range(3)]
            node = Node("and", kids=tuple(self.term(column, indexable=True) for _ in range(int(self.r.integers(1, 4)))))
            self.narrow = None
            return node
        return self.tree(3)


def _numbers(rows: list[dict], node: Node, keep: bool) -> list[int]:
    return sorted(r["n"] for r in rows if (evaluate(node, _as_ns(r)) is True) == keep)


@pytest.fixture(scope="module")
def temporal_table(tmp_path_factory) -> lamina.Table:
    return _make_temporal_table(str(tmp_path_factory.mktemp("prop") / "temporal"), indexed=True)


@pytest.mark.parametrize("seed", _seeds())
def test_random_temporal_filters_compare_literals_of_every_unit_exactly(temporal_table, seed):
    """A literal finer than a column's unit is compared exactly, through a scan (zone maps, row-group
    statistics) and through indices: the rows brute force on exact nanoseconds picks."""
    t = temporal_table
    everything = _pylist(t.to_arrow())
    gen = TemporalGen(seed)
    for n in range(100):
        node = gen.filter()
        text = node.render()
        want = _numbers(everything, node, keep=True)
        scanned = sorted(t.to_arrow(filter=text, use_index=False)["n"].to_pylist())
        assert scanned == want, f"seed {seed} #{n} {text!r}: scan {len(scanned)} rows, brute force {len(want)}"
        through = sorted(t.to_arrow(filter=text, use_index=True)["n"].to_pylist())
        assert through == want, f"seed {seed} #{n} {text!r}: indices {len(through)} rows, brute force {len(want)}"


@pytest.mark.parametrize("seed", _seeds())
def test_random_temporal_deletes_remove_the_rows_brute_force_picks(tmp_path, seed):
    indexed = _make_temporal_table(str(tmp_path / "indexed"), indexed=True, seed=seed)
    plain = _make_temporal_table(str(tmp_path / "plain"), indexed=False, seed=seed)
    gen = TemporalGen(2000 + seed)
    for n in range(8):
        node = gen.filter()
        text = node.render()
        want = _numbers(_pylist(plain.to_arrow()), node, keep=False)
        assert indexed.delete(text) == plain.delete(text), f"seed {seed} #{n} {text!r}"
        for t in (indexed, plain):
            left = sorted(t.to_arrow()["n"].to_pylist())
            assert left == want, f"seed {seed} #{n} {text!r}: {t.uri} kept {len(left)} rows, brute force {len(want)}"
