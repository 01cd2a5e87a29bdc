"""Row filters: a small SQL-like grammar, or a pyarrow compute Expression.

Grammar (keywords case-insensitive)::

    expr      := or
    or        := and ("OR" and)*
    and       := not ("AND" not)*
    not       := "NOT" not | predicate
    predicate := "(" expr ")"
               | operand cmp operand                 cmp: = == != <> < <= > >=
               | operand ["NOT"] "IN" "(" literal ("," literal)* ")"
               | operand ["NOT"] "BETWEEN" literal "AND" literal
               | operand ["NOT"] "LIKE" string       % and _ wildcards
               | operand "IS" ["NOT"] "NULL"
               | "TRUE" | "FALSE"
    operand   := column | literal
    column    := name ("." name)*  |  "quoted name"  |  `quoted name`
    literal   := integer | decimal | 'string' ('' escapes a quote) | TRUE | FALSE | NULL
               | TIMESTAMP 'iso-8601' | DATE 'yyyy-mm-dd'

Literals compared with a column are cast to the column's type, so
``ts >= '2024-01-01'`` works on a timestamp column. Columns whose values are
integers compare by value: on an integer column a number the type cannot hold
exactly is compared as that number (``i > 5.5`` is ``i >= 6``, ``i = 5.5`` matches
nothing, ``i < 1e30`` every non-null row), and so is a literal finer than a temporal
column's unit, never truncated to it: on a ``timestamp('s')`` column
``ts >= TIMESTAMP '2026-01-01T00:00:00.5'`` is ``ts >= '2026-01-01T00:00:01'`` and
``ts = TIMESTAMP '2026-01-01T00:00:00.5'`` matches nothing; a date column compares
with a timestamp as its midnight (``d < TIMESTAMP '2026-01-01T12:00'`` holds for
2026-01-01), and a timestamp column with a date as its midnight; a time-of-day column
(``time32``, ``time64``) takes a string ``'hh:mm[:ss[.fraction]]'`` as that time, to any
precision (on ``time32('s')``, ``t >= '12:00:00.5'`` is ``t >= '12:00:01'``); a number
against a duration, timestamp, date or time column counts the column's unit
(``dur = 1.5`` on ``duration('s')`` matches nothing).

Comparisons follow IEEE 754 and SQL's three-valued logic: a comparison with NULL
is NULL, and rows where the filter is NULL are not returned; NaN equals nothing and
orders with nothing (``x > 'NaN'`` matches no row, ``x != 'NaN'`` every non-null
row); -0.0 equals 0.0. ``x IN (a, b)`` is ``x = a OR x = b`` in three-valued logic
(NaN in the list matches nothing, 0.0 matches -0.0), as SQL (and DuckDB) has it:
NULL where ``x`` is NULL, so ``x NOT IN (1, 2)`` returns no null row, as
``NOT (x = 1 OR x = 2)`` does not; a NULL in the list makes IN NULL where it would
be FALSE, so ``x IN (1, NULL)`` returns the rows where ``x = 1`` and
``x NOT IN (1, NULL)`` returns none.
Every filter gives the same rows with and without indices (``lamina.index.query``).

A filter is parsed once, into the bound tree of ``lamina.expr``; the scan's expression, the
index conjuncts and pruning (``lamina.prune``) are read from that tree. A pyarrow Expression
filter is evaluated as given, and read into the same tree (``from_expression``) for pruning and
indices: the same filter as text or as an Expression prunes the same.

Limits: a filter string has at most ``MAX_FILTER_LENGTH`` (10,000,000) characters,
``MAX_FILTER_TERMS`` (100,000) predicates (an IN list is one, whatever its length)
and ``MAX_FILTER_DEPTH`` (100) levels of nested parentheses; past one of them
``InvalidFilter`` says which. Any filter string either evaluates or raises
``InvalidFilter``. Long filters stay cheap: an IN list is one set lookup (100,000
literals parse in well under a second), ``=`` terms ORed on one column are folded
into one, and long AND/OR chains become balanced trees in which no AND (OR) is the
direct operand of another, because Arrow flattens such chains before evaluating
and recurses once per operand (a crash at about 10,000 ORed terms).

Value expressions (``parse_value``: ``Table.update``'s ``expressions``) compute one value per row
from the same operands::

    value     := term (("+" | "-") term)*
    term      := factor (("*" | "/") factor)*
    factor    := "-" factor | "(" value ")" | column | literal

evaluated with pyarrow's checked arithmetic (``lamina.expr.evaluate``): NULL in, NULL out; an
overflow or a division by zero is an error, not a wrapped value; ``/`` on two integers is integer
division (truncating toward zero), as in SQL. At most ``MAX_VALUE_TERMS`` (1,000) operands and
``MAX_FILTER_DEPTH`` levels of parentheses; anything that does not parse, or does not apply to the
table's columns (``'a' * 2``), is ``InvalidFilter``.
"""

from __future__ import annotations

import datetime as dt
import functools
import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, TypeAlias

import pyarrow as pa
import pyarrow.compute as pc

from lamina import arrays
from lamina.errors import InvalidFilter
from lamina.expr import (
    And,
    Arith,
    ArrowCall,
    ArrowField,
    ArrowLiteral,
    Between,
    Column,
    Compare,
    Conjunct,
    Const,
    In,
    IsNull,
    Like,
    Literal,
    Negate,
    Node,
    Not,
    Opaque,
    Or,
    Relation,
    Value,
    conjuncts,
    evaluate,
    fields_of,
    read_arrow,
    to_arrow,
)

_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>-?\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
      | (?P<str>'(?:[^']|'')*')
      | (?P<dq>"(?:[^"]|"")*")
      | (?P<bq>`[^`]*`)
      | (?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,|\.)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
#: The tokens of a value expression: a filter's, with arithmetic and no sign glued to numbers (``a-1`` is ``a - 1``).
_VALUE_TOKEN = re.compile(
    r"""\s*(?:
        (?P<num>\d+(?:\.\d*)?(?:[eE][+-]?\d+)?)
      | (?P<str>'(?:[^']|'')*')
      | (?P<dq>"(?:[^"]|"")*")
      | (?P<bq>`[^`]*`)
      | (?P<op><=|>=|<>|!=|==|=|<|>|\(|\)|,|\.|\+|-|\*|/)
      | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
    )""",
    re.VERBOSE,
)
#: Limits on a filter string (module doc); each far above what a hand-written filter needs.
MAX_FILTER_LENGTH = 10_000_000
MAX_FILTER_TERMS = 100_000
MAX_FILTER_DEPTH = 100
#: Operands of one value expression (evaluated by recursion over its tree).
MAX_VALUE_TERMS = 1_000
#: Parsed filters up to this length are cached (repeated point lookups); longer ones are not kept.
_CACHED_TEXT = 65_536

_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "BETWEEN", "LIKE", "TIMESTAMP", "DATE"}


__all__ = ["Conjunct", "Filter", "ValueExpression", "parse_filter", "parse_value", "from_expression"]


@dataclass(frozen=True, eq=False)
class Filter:
    """A parsed filter: the expression, the top-level columns it reads (None: unknown), and
    the conjuncts an index may answer (the expression is always re-applied to their rows)."""

    expression: pc.Expression
    columns: frozenset[str] | None
    text: str
    conjuncts: tuple[Conjunct, ...] = ()
    #: The expression is exactly the AND of ``conjuncts`` (an index answering all of them is exact).
    pure: bool = False
    #: The bound tree (``lamina.expr``) every reader of the filter starts from; None: not known.
    tree: Node | None = None
    _derived: dict = field(default_factory=dict, compare=False, repr=False)

    def derived(self, key: Any, make: Any) -> Any:
        """``make()``, computed once per ``key`` for this filter (what a reader derives from the tree, such
        as ``lamina.prune``'s terms): a filter is immutable, and a pickled one carries what was derived."""
        found = self._derived.get(key)
        if found is None:
            found = self._derived[key] = make()
        return found


class _Tok:
    __slots__ = ("kind", "value", "pos")

    def __init__(self, kind: str, value: str, pos: int):
        self.kind, self.value, self.pos = kind, value, pos


class _Ints:
    """The values of an ``ints`` token: plain integers, parsed on demand."""

    __slots__ = ("text",)

    def __init__(self, text: str):
        self.text = text

    def ints(self) -> list[int]:
        return [int(v) for v in self.text.split(",")]  # int() ignores the spaces around each


@dataclass
class _Lit:
    value: Any
    explicit_type: pa.DataType | None = None


_OPS = {"=": "=", "==": "=", "!=": "!=", "<>": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}
_FLIP = {"=": "=", "!=": "!=", "<": ">", "<=": ">=", ">": "<", ">=": "<="}


def _is_nan(s: pa.Scalar) -> bool:
    v = s.as_py()
    return isinstance(v, float) and math.isnan(v)


def _plain(t: pa.DataType) -> bool:
    """Types every comparison and IN with a literal of the same type binds to."""
    return (
        pa.types.is_integer(t)
        or (pa.types.is_floating(t) and t != pa.float16())
        or pa.types.is_boolean(t)
        or pa.types.is_string(t)
        or pa.types.is_large_string(t)
        or pa.types.is_binary(t)
        or pa.types.is_large_binary(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
    )


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


Number: TypeAlias = "int | float | Fraction"
_UNIT_NS = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
_EPOCH = dt.datetime(1970, 1, 1)
_EPOCH_UTC = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)


def _counted(t: pa.DataType) -> bool:
    """Types whose values are integers (temporal ones: a count of their unit), compared by value."""
    return (
        pa.types.is_integer(t)
        or pa.types.is_timestamp(t)
        or pa.types.is_date(t)
        or pa.types.is_duration(t)
        or pa.types.is_time(t)
    )


def _unit_ns(t: pa.DataType) -> int:
    """Nanoseconds in one unit of a temporal type."""
    if pa.types.is_date32(t):
        return 86_400 * 10**9
    if pa.types.is_date64(t):
        return 10**6
    return _UNIT_NS[t.unit]


def _integral(v: Number) -> bool:
    if isinstance(v, Fraction):
        return v.denominator == 1
    return isinstance(v, int) or v.is_integer()


def int_bounds(t: pa.DataType) -> tuple[int, int]:
    """The least and greatest integer a value of ``t`` (``_counted``) is stored as: ``t.bit_width`` bits,
    signed but for unsigned integers (temporal counts are signed: date32 and time32 in 32 bits)."""
    if pa.types.is_unsigned_integer(t):
        return 0, (1 << t.bit_width) - 1
    return -(1 << (t.bit_width - 1)), (1 << (t.bit_width - 1)) - 1


def _exact_int(v: Number, t: pa.DataType) -> int | None:
    """``v`` as the integer a value of type ``t`` (``_counted``) is stored as, or None when no value of
    ``t`` equals it."""
    if not _integral(v):  # also NaN and ±inf
        return None
    v = int(v)
    lo, hi = int_bounds(t)
    return v if lo <= v <= hi else None


def _units(v: Any, t: pa.DataType) -> Number | None:
    """A literal's exact value counted in the unit of type ``t`` (``_counted``), or None when it is not
    one the type compares by value (it is cast instead). A number is such a count already; a date, a
    datetime or a timestamp string is an instant, counted from the epoch and kept whole: on a
    ``timestamp('s')`` column 00:00:00.5 is half a unit, on a date column 12:00 half a day; on a time
    column a string is a time of day, counted from midnight (12:00:00.5 is 43200.5 units of
    ``time32('s')``). Casting it would truncate it to the unit, and a comparison with the truncated
    value is wrong."""
    if _is_number(v):
        return v
    if pa.types.is_time(t):
        ns: int | Fraction | None = _time_of_day_ns(v) if isinstance(v, str) else None
        if ns is None:
            return None
    elif not (pa.types.is_timestamp(t) or pa.types.is_date(t)):
        return None
    elif isinstance(v, str):
        ns = _instant_ns(v, t.tz if pa.types.is_timestamp(t) else None)
        if ns is None:
            return None
    elif isinstance(v, dt.date):  # a datetime is one too; naive ones are UTC, as pyarrow takes them
        if not isinstance(v, dt.datetime):
            v = dt.datetime.combine(v, dt.time())
        ns = (v - (_EPOCH if v.tzinfo is None else _EPOCH_UTC)) // dt.timedelta(microseconds=1) * 1000
    else:
        return None
    q = Fraction(ns, _unit_ns(t))
    return q.numerator if q.denominator == 1 else q


_TIME_OF_DAY = re.compile(r"\s*(\d{1,2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?\s*", re.ASCII)


def _time_of_day_ns(text: str) -> int | Fraction | None:
    """A time of day ``hh:mm[:ss[.fraction]]`` (any number of fractional digits) as exact nanoseconds
    past midnight, or None when it is not one. (Arrow casts no string to a time type.)"""
    m = _TIME_OF_DAY.fullmatch(text)
    if m is None:
        return None
    h, mi, sec, frac = int(m[1]), int(m[2]), int(m[3] or 0), (m[4] or "").rstrip("0")
    if h > 23 or mi > 59 or sec > 59:
        return None
    try:
        ns = ((h * 60 + mi) * 60 + sec) * 10**9 + Fraction(int(frac or 0) * 10**9, 10 ** len(frac))
    except ValueError:  # more digits than int() reads
        return None
    return ns.numerator if ns.denominator == 1 else ns


def _instant_ns(text: str, tz: str | None) -> int | None:
    """A timestamp string as nanoseconds from the epoch (pyarrow's parsing, at the finest unit that
    holds it), or None when it is not one."""
    for unit in ("ns", "us"):  # past 2262 nanoseconds overflow: microseconds reach the year 294,000
        try:
            return arrays.scalar(text, pa.string()).cast(pa.timestamp(unit, tz)).value * _UNIT_NS[unit]
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, pa.ArrowTypeError, OverflowError, ValueError):
            continue
    return None


def _has_zero(values: pa.Array) -> bool:
    """Whether a float array holds 0.0 or -0.0 (compared as floats, without a Python literal)."""
    return bool(pc.any(pc.equal(values, arrays.scalar(0.0, pa.float64()))).as_py())


def _signed_zeros(t: pa.DataType) -> pa.Array:
    """0.0 and -0.0 as an array of float type ``t``: IN with either holds both, as ``=`` does."""
    return arrays.array([0.0, -0.0], pa.float64()).cast(t)


def _by_value(t: pa.DataType, op: str, v: Number) -> tuple[str, int | None]:
    """``op v`` on type ``t`` (``_counted``) where no value of ``t`` equals ``v`` (a fraction of the
    unit, NaN, ±inf, or out of range), as a comparison with a value of ``t``: ``i > 5.5`` is ``i >= 6``,
    ``i < 5.5`` is ``i <= 5``; ("never", None) / ("always", None) where it is FALSE / TRUE on every
    non-null value (``i = 5.5``, ``i < 1e30``)."""
    if op in ("=", "!="):
        return ("never" if op == "=" else "always"), None
    if isinstance(v, float) and math.isnan(v):
        return "never", None
    lo, hi = int_bounds(t)
    if op in ("<", "<="):  # i <= m
        if v == math.inf or v == -math.inf:
            return ("always" if v > 0 else "never"), None
        m = math.floor(v) if op == "<=" or not _integral(v) else int(v) - 1
        if m < lo or m >= hi:
            return ("always" if m >= hi else "never"), None
        return "<=", m
    if v == math.inf or v == -math.inf:  # i >= m
        return ("always" if v < 0 else "never"), None
    m = math.ceil(v) if op == ">=" or not _integral(v) else int(v) + 1
    if m > hi or m <= lo:
        return ("always" if m <= lo else "never"), None
    return ">=", m


#: A run of at least 16 plain integers closing an IN list: one token (``ints``) instead of two per value, parsed in
#: one go (a token and a literal object per value set off young collections and, with a large manifest in memory,
#: a full collection every few calls). Anything else in the list (a decimal, a string, an
#: expression) leaves it to the ordinary tokens.
_INTS = re.compile(r"\s*(-?\d+(?:\s*,\s*-?\d+){15,})(?=\s*\))")


def _tokenize(text: str, token: re.Pattern[str] = _TOKEN) -> list[_Tok]:
    toks: list[_Tok] = []
    pos, end = 0, len(text.rstrip())
    match = token.match
    while pos < end:
        if len(toks) >= 2 and toks[-1].value == "(" and toks[-2].value == "IN" and toks[-1].kind == "op":
            run = _INTS.match(text, pos)
            if run:
                toks.append(_Tok("ints", run.group(1), run.start(1)))
                pos = run.end()
                continue
        m = match(text, pos)
        if not m or m.end() == pos:
            pos = len(text) - len(text[pos:].lstrip())  # the first character that is not a space
            raise InvalidFilter(f"cannot parse filter {_short(text)} at position {pos}: unexpected {text[pos : pos + 10]!r}")
        kind = m.lastgroup or ""
        value, start = m.group(kind), m.start(kind)
        if kind == "word" and value.upper() in _KEYWORDS:
            kind, value = "kw", value.upper()
        toks.append(_Tok(kind, value, start))
        pos = m.end()
    return toks


def _short(text: str) -> str:
    """``text`` quoted for an error message, cut to its start when long."""
    return repr(text) if len(text) <= 200 else f"{text[:160]!r}... ({len(text):,} characters)"


class _Parser:
    """The grammar, building the bound tree of ``lamina.expr``: columns are looked up in the schema and
    literals put into the type of the column they are compared with as they are read."""

    def __init__(self, text: str, schema: pa.Schema, toks: list[_Tok] | None = None):
        self.text, self.schema = text, schema
        if len(text) > MAX_FILTER_LENGTH:
            raise InvalidFilter(
                f"filter {_short(text)} is longer than {MAX_FILTER_LENGTH:,} characters; split it into "
                "several calls, or pass an Expression such as pyarrow.compute.field('id').isin(values)"
            )
        self.toks = _tokenize(text) if toks is None else toks
        self.i = 0
        self.columns: set[str] = set()
        self.depth = 0
        self.terms = 0
        #: Some term may not bind (column against column, a literal alone, LIKE on a non-string, an
        #: unusual type): the expression is checked against the schema once parsed.
        self.unchecked = False

    # -- helpers
    def peek(self, offset: int = 0) -> _Tok | None:
        j = self.i + offset
        return self.toks[j] if j < len(self.toks) else None

    def accept(self, kind: str, value: str | None = None) -> _Tok | None:
        t = self.peek()
        if t and t.kind == kind and (value is None or t.value == value):
            self.i += 1
            return t
        return None

    def expect(self, kind: str, value: str | None = None) -> _Tok:
        t = self.accept(kind, value)
        if t is None:
            got = self.peek()
            where = f"at position {got.pos} ({got.value!r})" if got else "at the end"
            raise InvalidFilter(f"cannot parse filter {_short(self.text)}: expected {value or kind} {where}")
        return t

    # -- grammar
    def parse(self) -> Node:
        if not self.toks:
            raise InvalidFilter('empty filter: pass a condition such as "id < 100"')
        e = self.or_()
        t = self.peek()
        if t is not None:
            raise InvalidFilter(f"cannot parse filter {_short(self.text)}: unexpected {t.value!r} at position {t.pos}")
        return e

    def or_(self) -> Node:
        parts = [self.and_()]
        while self.accept("kw", "OR"):
            parts.append(self.and_())
        if len(parts) == 1:
            return parts[0]
        parts = _fold_equalities(parts)
        return parts[0] if len(parts) == 1 else Or(tuple(parts))  # one part: all folded into one set lookup

    def and_(self) -> Node:
        parts = [self.not_()]
        while self.accept("kw", "AND"):
            parts.append(self.not_())
        return parts[0] if len(parts) == 1 else And(tuple(parts))

    def not_(self) -> Node:
        n = 0
        while self.accept("kw", "NOT"):  # a loop, not recursion: NOT NOT ... is not nesting
            n += 1
        node = self.predicate()
        return Not(node) if n % 2 else node

    def _span(self, start: int) -> str:
        end_tok = self.toks[self.i - 1]
        return self.text[self.toks[start].pos : end_tok.pos + len(end_tok.value)]

    def predicate(self) -> Node:
        t = self.peek()
        start = self.i
        if t and t.kind == "op" and t.value == "(":
            self.i += 1
            self.depth += 1
            if self.depth > MAX_FILTER_DEPTH:
                raise InvalidFilter(
                    f"filter {_short(self.text)} nests parentheses more than {MAX_FILTER_DEPTH} deep "
                    f"(at position {t.pos}); write it with fewer levels"
                )
            e = self.or_()
            self.expect("op", ")")
            self.depth -= 1
            return e
        self.terms += 1
        if self.terms > MAX_FILTER_TERMS:
            raise InvalidFilter(
                f"filter {_short(self.text)} has more than {MAX_FILTER_TERMS:,} terms (at position "
                f"{t.pos if t else len(self.text)}); write long lists of values as one IN (...)"
            )
        if t and t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            nxt = self.peek(1)
            if nxt is None or (nxt.kind == "kw" and nxt.value in ("AND", "OR")) or (nxt.kind == "op" and nxt.value == ")"):
                self.i += 1
                return Const(t.value == "TRUE")
        node: Node
        left = self.operand()
        negate = bool(self.accept("kw", "NOT"))
        if self.accept("kw", "IN"):
            self.expect("op", "(")
            run = self.peek()
            values: list[_Lit] | _Ints
            if run is not None and run.kind == "ints":
                self.i += 1
                values = _Ints(run.value)
            else:
                values = [self.literal()]
                while self.accept("op", ","):
                    values.append(self.literal())
            self.expect("op", ")")
            col = self.need_column(left, "IN")
            arr, null = self.value_set(col, values)
            node = In(col, arr, null, self._span(start))
        elif self.accept("kw", "BETWEEN"):
            lo = self.literal()
            self.expect("kw", "AND")
            hi = self.literal()
            col = self.need_column(left, "BETWEEN")
            node = Between(self.compare(col, ">=", lo), self.compare(col, "<=", hi), self._span(start))
        elif self.accept("kw", "LIKE"):
            pattern = self.literal()
            col = self.need_column(left, "LIKE")
            self.unchecked |= not (pa.types.is_string(col.type) or pa.types.is_large_string(col.type))
            if not isinstance(pattern.value, str):
                raise InvalidFilter(f"LIKE needs a string pattern in {_short(self.text)}")
            node = Like(col, pattern.value)
        elif not negate and self.accept("kw", "IS"):
            is_not = bool(self.accept("kw", "NOT"))
            self.expect("kw", "NULL")
            return IsNull(self.value(left, None), is_not)
        else:
            if negate:
                raise InvalidFilter(f"cannot parse filter {_short(self.text)}: NOT must precede IN, BETWEEN or LIKE here")
            op = self.expect("op")
            if op.value not in _OPS:
                raise InvalidFilter(
                    f"cannot parse filter {_short(self.text)}: {op.value!r} at position {op.pos} is not a comparison"
                )
            cmp = _OPS[op.value]
            right = self.operand()
            if isinstance(left, _Lit) and isinstance(right, Column):
                left, cmp, right = right, _FLIP[cmp], left
            if isinstance(left, Column) and isinstance(right, _Lit):
                node = self.compare(left, cmp, right, self._span(start))
            else:
                self.unchecked = True
                ltype = left.type if isinstance(left, Column) else None
                rtype = right.type if isinstance(right, Column) else None
                node = Relation(cmp, self.value(left, rtype), self.value(right, ltype))
        return Not(node) if negate else node

    def compare(self, col: Column, op: str, lit: _Lit, text: str = "") -> Compare:
        """``col op lit`` (op one of = != < <= > >=), bound (``comparison``)."""
        self.unchecked |= not _plain(col.type)
        op, s = self.comparison(col, op, lit)
        return Compare(col, op, s, text)

    def comparison(self, col: Column, op: str, lit: _Lit) -> tuple[str, pa.Scalar | None]:
        """``col op lit`` as the exact comparison every reader of the filter applies (the scan's
        expression, index key ranges and pruning all start here): (op, a scalar of the column's type,
        NULL for a NULL literal), or ("never" | "always", None) where it is FALSE / TRUE on every
        non-null row. A literal no value of a ``_counted`` type equals is compared by value
        (``_by_value``), never cast (a cast truncates ``00:00:00.5`` to a ``timestamp('s')``)."""
        t = col.type
        v = _units(lit.value, t) if _counted(t) else None
        if v is None:
            return op, self.cast(lit, t)
        x = _exact_int(v, t)
        if x is None:
            op, x = _by_value(t, op, v)
            if x is None:
                return op, None
        return op, self.cast(_Lit(x), t)

    def value_set(self, col: Column, values: list[_Lit] | _Ints) -> tuple[pa.Array, bool]:
        """The values of an IN list that rows of ``col`` can equal, as one array of its type, so
        that IN means what ORed ``=`` would: a NaN equals nothing and is left out, 0.0 and -0.0
        are both in when either is, a literal no value of the column equals (``_by_value``: 5.5 on an
        integer column, 00:00:00.5 on a ``timestamp('s')`` one) is left out. And whether the list
        holds NULL, which is left out of the array too (``_in``: it makes IN NULL, never TRUE)."""
        t = col.type
        self.unchecked |= not _plain(t)
        counted, floating = _counted(t), pa.types.is_floating(t)
        if isinstance(values, _Ints):
            if counted:  # what _exact_int does to each value, for the whole run
                lo, hi = int_bounds(t)
                return arrays.array([v for v in values.ints() if lo <= v <= hi], t), False
            values = [_Lit(v) for v in values.ints()]
        text = pa.types.is_string(t) or pa.types.is_large_string(t)
        kept: list[Any] = []
        scalars = False  # some literal needed a cast: kept holds pa.Scalars too
        null = False
        for lit in values:  # plain Python values where the type allows (fast for long lists)
            v = lit.value
            if v is None:
                null = True
                continue
            u = _units(v, t) if counted else None
            if u is not None:
                x = _exact_int(u, t)
                if x is not None:
                    kept.append(x)
            elif (floating and _is_number(v)) or (text and isinstance(v, str)):
                kept.append(v)
            else:
                kept.append(self.cast(lit, t))
                scalars = True
        try:
            if scalars:
                arr = pa.array([x if isinstance(x, pa.Scalar) else pa.scalar(x, t) for x in kept], type=t)
            else:
                arr = arrays.array(kept, t)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
            for lit in values:
                self.cast(lit, t)  # raises naming the literal that does not fit
            raise InvalidFilter(f"filter {_short(self.text)}: the IN list does not fit a column of type {t}") from None
        if floating and len(arr):
            arr = arr.filter(pc.invert(pc.fill_null(pc.is_nan(arr), arrays.scalar(False, pa.bool_()))))
            if _has_zero(arr):
                arr = pa.concat_arrays([arr, _signed_zeros(t)])
        return arr, null

    def operand(self) -> Column | _Lit:
        t = self.peek()
        if t is None:
            raise InvalidFilter(f"cannot parse filter {_short(self.text)}: unexpected end")
        if t.kind in ("word", "dq", "bq"):
            return self.column()
        return self.literal()

    def column(self) -> Column:
        names = [self.name()]
        while self.accept("op", "."):
            names.append(self.name())
        field_type: pa.DataType
        idx = self.schema.get_field_index(names[0])
        if idx < 0:
            raise InvalidFilter(
                f"filter {_short(self.text)} names column {names[0]!r}, which the table does not have; "
                f"columns: {', '.join(self.schema.names)}"
            )
        field_type = self.schema.field(idx).type
        for part in names[1:]:
            if not pa.types.is_struct(field_type) or field_type.get_field_index(part) < 0:
                raise InvalidFilter(f"filter {_short(self.text)}: {'.'.join(names)!r} is not a field of the table")
            field_type = field_type.field(field_type.get_field_index(part)).type
        self.columns.add(names[0])
        return Column(tuple(names), field_type)

    def name(self) -> str:
        t = self.peek()
        if t is None or t.kind not in ("word", "dq", "bq"):
            raise InvalidFilter(f"cannot parse filter {_short(self.text)}: expected a column name")
        self.i += 1
        if t.kind == "dq":
            return t.value[1:-1].replace('""', '"')
        if t.kind == "bq":
            return t.value[1:-1]
        return t.value

    def literal(self) -> _Lit:
        t = self.peek()
        if t is None:
            raise InvalidFilter(f"cannot parse filter {_short(self.text)}: expected a value at the end")
        self.i += 1
        if t.kind == "num":
            v = t.value
            return _Lit(float(v) if "." in v or "e" in v or "E" in v else int(v))
        if t.kind == "str":
            return _Lit(t.value[1:-1].replace("''", "'"))
        if t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            return _Lit(t.value == "TRUE")
        if t.kind == "kw" and t.value == "NULL":
            return _Lit(None)
        if t.kind == "kw" and t.value in ("TIMESTAMP", "DATE"):
            s = self.expect("str").value[1:-1]
            try:
                if t.value == "DATE":
                    return _Lit(dt.date.fromisoformat(s), pa.date32())
                return _Lit(dt.datetime.fromisoformat(s), None)
            except ValueError:
                raise InvalidFilter(f"filter {_short(self.text)}: {s!r} is not an ISO-8601 {t.value.lower()}") from None
        raise InvalidFilter(f"cannot parse filter {_short(self.text)}: expected a value at position {t.pos}, got {t.value!r}")

    def need_column(self, operand: Column | _Lit, what: str) -> Column:
        if not isinstance(operand, Column):
            raise InvalidFilter(f"filter {_short(self.text)}: the left side of {what} must be a column")
        return operand

    def cast(self, lit: _Lit, target: pa.DataType) -> pa.Scalar:
        if lit.value is None:
            return arrays.scalar(None, target)
        try:
            if isinstance(lit.value, str) and not (pa.types.is_string(target) or pa.types.is_large_string(target)):
                return arrays.scalar(lit.value, pa.string()).cast(target)
            return arrays.scalar(lit.value, target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
            raise InvalidFilter(
                f"filter {_short(self.text)}: value {lit.value!r} cannot be compared with a column of type {target}"
            ) from None

    def value(self, operand: Column | _Lit, other_type: pa.DataType | None) -> Column | Literal:
        """An operand of a comparison that does not bind to one column (``Relation``, ``IsNull``): a
        literal is put into the other operand's type, if that is a column."""
        if isinstance(operand, Column):
            return operand
        if other_type is not None:
            return Literal(self.cast(operand, other_type))
        return Literal(operand.value)


class _ValueParser(_Parser):
    """The value grammar (module doc) over the filter's operands: columns looked up in the schema, literals as
    Python values (arithmetic puts them into the other operand's type)."""

    def __init__(self, text: str, schema: pa.Schema):
        super().__init__(text, schema, _tokenize(text, _VALUE_TOKEN))
        self.operands = 0

    def parse_value(self) -> Value:
        if not self.toks:
            raise InvalidFilter('empty expression: pass a value such as "price * 1.1"')
        value = self.sum_()
        t = self.peek()
        if t is not None:
            raise InvalidFilter(f"cannot parse expression {_short(self.text)}: unexpected {t.value!r} at position {t.pos}")
        return value

    def _op(self, *ops: str) -> str | None:
        t = self.peek()
        if t is not None and t.kind == "op" and t.value in ops:
            self.i += 1
            return t.value
        return None

    def sum_(self) -> Value:
        value = self.product()
        while (op := self._op("+", "-")) is not None:
            value = Arith(op, value, self.product())
        return value

    def product(self) -> Value:
        value = self.factor()
        while (op := self._op("*", "/")) is not None:
            value = Arith(op, value, self.factor())
        return value

    def _deeper(self, at: int) -> None:
        self.depth += 1
        if self.depth > MAX_FILTER_DEPTH:
            raise InvalidFilter(
                f"expression {_short(self.text)} nests more than {MAX_FILTER_DEPTH} deep (at position {at}); write it flatter"
            )

    def factor(self) -> Value:
        t = self.peek()
        if t is None:
            raise InvalidFilter(f"cannot parse expression {_short(self.text)}: expected a value at the end")
        if self._op("-") is not None:
            self._deeper(t.pos)
            inner = self.factor()
            self.depth -= 1
            if isinstance(inner, Literal) and _is_number(inner.value):
                return Literal(-inner.value)
            return Negate(inner)
        if self._op("(") is not None:
            self._deeper(t.pos)
            value = self.sum_()
            self.expect("op", ")")
            self.depth -= 1
            return value
        self.operands += 1
        if self.operands > MAX_VALUE_TERMS:
            raise InvalidFilter(
                f"expression {_short(self.text)} has more than {MAX_VALUE_TERMS:,} operands (at position {t.pos})"
            )
        if t.kind == "op":
            raise InvalidFilter(
                f"cannot parse expression {_short(self.text)}: expected a column or a value at position {t.pos}, got {t.value!r}"
            )
        operand = self.operand()
        return operand if isinstance(operand, Column) else Literal(operand.value)


@dataclass(frozen=True, eq=False)
class ValueExpression:
    """A parsed value expression (``parse_value``): one value per row, e.g. ``price * 1.1``."""

    text: str
    tree: Value
    #: The top-level columns it reads.
    columns: frozenset[str]
    #: The type of its values over the table's schema.
    type: pa.DataType

    @property
    def expression(self) -> pc.Expression:
        """The same computation as a pyarrow expression (for a dataset scan's projection)."""
        return to_arrow(self.tree)

    def evaluate(self, table: pa.Table) -> pa.ChunkedArray:
        """Its value for every row of ``table`` (which holds ``columns``); pyarrow's error on an overflow or a
        division by zero (``ArrowInvalid``)."""
        out = evaluate(self.tree, table)
        if isinstance(out, pa.Scalar):  # reads no column: the same value on every row
            return pa.chunked_array([pa.repeat(out, table.num_rows)], out.type)
        return out if isinstance(out, pa.ChunkedArray) else pa.chunked_array([out], out.type)


def parse_value(text: str, schema: pa.Schema) -> ValueExpression:
    """Parses a value expression (module doc) over ``schema``'s columns; ``InvalidFilter`` if it does not
    parse or does not apply to their types (checked on no rows, so before anything is read)."""
    if not isinstance(text, str):
        raise InvalidFilter(f'an expression is a string such as "price * 1.1", not {type(text).__name__}')
    if len(text) > MAX_FILTER_LENGTH:
        raise InvalidFilter(f"expression {_short(text)} is longer than {MAX_FILTER_LENGTH:,} characters")
    p = _ValueParser(text, schema)
    tree = p.parse_value()
    try:
        out = evaluate(tree, schema.empty_table())
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
        raise InvalidFilter(f"expression {_short(text)} does not apply to this table: {e}") from None
    return ValueExpression(text, tree, frozenset(p.columns), out.type)


def _equality(node: Node) -> tuple[Column, pa.Scalar] | None:
    """``node`` as ``column = value`` when it is exactly that (not NULL, not NaN, no NULL in the list)."""
    if isinstance(node, Compare):
        s = node.value
        if node.op == "=" and s is not None and s.is_valid and not _is_nan(s):
            return node.column, s
    elif isinstance(node, In) and not node.null and len(node.values) == 1:
        return node.column, node.values[0]
    return None


def _fold_equalities(parts: list[Node]) -> list[Node]:
    """ORed ``column = literal`` terms on one column as one set lookup (NULL on null rows, as the
    comparisons give); the other terms as they are."""
    eqs = [_equality(p) for p in parts]
    groups: dict[tuple[str, ...], list[tuple[Column, pa.Scalar]]] = {}
    for eq in eqs:
        if eq is not None:
            groups.setdefault(eq[0].path, []).append(eq)
    folded = {path: g for path, g in groups.items() if len(g) > 1}
    if not folded:
        return parts
    out = [p for p, eq in zip(parts, eqs) if eq is None or eq[0].path not in folded]
    for group in folded.values():
        col = group[0][0]
        values = arrays.array_of_scalars([v for _, v in group], col.type)
        if pa.types.is_floating(col.type) and _has_zero(values):
            values = pa.concat_arrays([values, _signed_zeros(col.type)])
        out.append(In(col, values, False))
    return out


def _parse_text(text: str, schema: pa.Schema) -> Filter:
    return _parse_cached(text, schema) if len(text) <= _CACHED_TEXT else _parse_uncached(text, schema)


def _parse_uncached(text: str, schema: pa.Schema) -> Filter:
    p = _Parser(text, schema)
    tree = p.parse()
    expression = to_arrow(tree)
    if p.unchecked:
        try:  # binds every function to its argument types: a type error is the filter's, not the read's
            pa.Table.from_batches([], schema=schema).filter(expression)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise InvalidFilter(f"filter {_short(text)} does not apply to this table: {e}") from None
    found, pure = conjuncts(tree)
    return Filter(expression, frozenset(p.columns), text, found, pure, tree)


#: Parsed filters are immutable, and repeated queries are common (point lookups): cache them.
_parse_cached = functools.lru_cache(maxsize=512)(_parse_uncached)


# -- from a pyarrow expression ----------------------------------------------------------------------
_ARROW_CMP = {"equal": "=", "not_equal": "!=", "less": "<", "less_equal": "<=", "greater": ">", "greater_equal": ">="}
_TEXT_TYPES = (pa.string(), pa.large_string())
_BINARY_TYPES = (pa.binary(), pa.large_binary())


def _resolve(path: tuple[str, ...], schema: pa.Schema) -> Column | None:
    idx = schema.get_field_index(path[0])
    if idx < 0:
        return None
    t = schema.field(idx).type
    for part in path[1:]:
        if not pa.types.is_struct(t) or t.get_field_index(part) < 0:
            return None
        t = t.field(t.get_field_index(part)).type
    return Column(path, t)


def _arrow_value(t: pa.DataType, s: pa.Scalar) -> pa.Scalar | None:
    """The value of type ``t`` that Arrow's comparison of a ``t`` column with literal ``s`` compares exactly
    with (Arrow compares in a common type; where that type holds both sides exactly, comparing in ``t``
    with ``s`` put into it is the same), or None where that is not certain (the term stays opaque)."""
    st = s.type
    if st == t:
        return s
    if not s.is_valid:
        return arrays.scalar(None, t) if st == pa.null() else None
    if pa.types.is_integer(t) and pa.types.is_integer(st):
        t_signed, s_signed = pa.types.is_signed_integer(t), pa.types.is_signed_integer(st)
        if t_signed != s_signed and not (s_signed and st.bit_width > t.bit_width):
            return None  # no common integer type holds both exactly
        x = _exact_int(s.as_py(), t)
        return None if x is None else arrays.scalar(x, t)
    if t in (pa.float32(), pa.float64()) and pa.types.is_integer(st):
        v = s.as_py()
        if abs(v) > 2**53:
            return None
        try:
            c = arrays.scalar(float(v), pa.float64()).cast(t)
        except pa.ArrowException:
            return None
        return c if c.as_py() == v else None
    if (t in _TEXT_TYPES and st in _TEXT_TYPES) or (t in _BINARY_TYPES and st in _BINARY_TYPES):
        return s.cast(t)
    if pa.types.is_timestamp(t) and pa.types.is_timestamp(st) and t.tz == st.tz:
        try:
            c = s.cast(t)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
        return c if c.value * _UNIT_NS[t.unit] == s.value * _UNIT_NS[st.unit] else None
    return None


def _arrow_values(t: pa.DataType, values: pa.Array) -> pa.Array | None:
    """An ``is_in`` value set as Arrow matches it against a ``t`` column (it casts the set to the column's
    type), or None where that is not certain."""
    if values.type == t:
        return values
    integers = pa.types.is_integer(t) and pa.types.is_integer(values.type)
    if integers or (t in _TEXT_TYPES and values.type in _TEXT_TYPES) or (t in _BINARY_TYPES and values.type in _BINARY_TYPES):
        try:
            return values.cast(t)  # a checked cast: a value out of the type's range fails it
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
            return None
    return None


def _flatten(call: ArrowCall) -> list:
    """The operands of a chain of one associative call (``a & b & c`` nests ``and_kleene``), without recursion."""
    out, stack = [], [call]
    while stack:
        n = stack.pop()
        if isinstance(n, ArrowCall) and n.function == call.function:
            stack.extend(reversed(n.args))
        else:
            out.append(n)
    return out


def _bind_arrow(raw: ArrowCall | ArrowField | ArrowLiteral, schema: pa.Schema) -> Node:
    if isinstance(raw, ArrowLiteral):
        s = raw.value
        return Const(s.as_py()) if s.type == pa.bool_() and s.is_valid else Opaque(pc.scalar(s))
    if isinstance(raw, ArrowField):
        return Opaque(pc.field(raw.path[0]) if len(raw.path) == 1 else pc.field(raw.path))
    fn, args, opts = raw.function, raw.args, raw.options or {}
    if fn in ("and_kleene", "or_kleene"):
        kids = tuple(_bind_arrow(k, schema) for k in _flatten(raw))
        return And(kids) if fn == "and_kleene" else Or(kids)
    if fn == "invert" and len(args) == 1:
        n, inner = 1, args[0]
        while isinstance(inner, ArrowCall) and inner.function == "invert" and len(inner.args) == 1:
            n, inner = n + 1, inner.args[0]
        node = _bind_arrow(inner, schema)
        return Not(node) if n % 2 else node
    if fn == "if_else" and len(args) == 3:
        found = _sql_in(args, schema)
        if found is not None:
            return found
    col = _resolve(args[0].path, schema) if args and isinstance(args[0], ArrowField) else None
    if fn in _ARROW_CMP and len(args) == 2:
        op, (a, b) = _ARROW_CMP[fn], args
        if isinstance(a, ArrowLiteral) and isinstance(b, ArrowField):
            a, b, op = b, a, _FLIP[op]
            col = _resolve(a.path, schema)
        if col is not None and isinstance(b, ArrowLiteral):
            value = _arrow_value(col.type, b.value)
            if value is not None:
                return Compare(col, op, value)
    elif col is not None and len(args) == 1:
        if fn in ("is_null", "is_valid") and not (opts.get("nan_is_null") is not None and opts["nan_is_null"].as_py()):
            return IsNull(col, fn == "is_valid")
        if fn == "match_like" and "pattern" in opts and not opts["ignore_case"].as_py():
            return Like(col, opts["pattern"].as_py())
        if fn == "is_in" and "value_set" in opts:
            found = _arrow_in(col, opts)
            if found is not None:
                return found
    return Opaque(raw.expression())


def _arrow_in(col: Column, opts: dict) -> Node | None:
    """Arrow's ``is_in`` (never NULL: a null row is TRUE when the set holds null, else FALSE) as three-valued
    ``In`` and ``IS NULL`` terms; None when its options ask for another null behaviour."""
    nulls = opts.get("null_matching_behavior")
    skip = opts.get("skip_nulls")
    if (nulls is not None and nulls.as_py() != 0) or (skip is not None and skip.as_py()):
        return None  # only MATCH, the default
    values = _arrow_values(col.type, opts["value_set"].values)
    if values is None:
        return None
    null = values.null_count > 0
    values = values.drop_null()
    if pa.types.is_floating(col.type) and len(values) and (_has_zero(values) or pc.any(pc.is_nan(values)).as_py()):
        return None  # Arrow's set lookup tells NaN from NaN and -0.0 from 0.0; comparisons do not
    found = In(col, values, False)
    return Or((found, IsNull(col))) if null else And((found, IsNull(col, True)))


def _sql_in(args: tuple, schema: pa.Schema) -> Node | None:
    """SQL's ``x IN (...)`` as DuckDB pushes it into a pyarrow scan, ``if_else(is_valid(x), is_in(x, set), null)``
    (NULL where ``x`` is NULL): the three-valued ``In`` when the set holds no NULL (else None: left opaque)."""
    cond, then, other = args
    if not (
        isinstance(cond, ArrowCall)
        and cond.function == "is_valid"
        and len(cond.args) == 1
        and isinstance(cond.args[0], ArrowField)
        and isinstance(then, ArrowCall)
        and then.function == "is_in"
        and len(then.args) == 1
        and then.args[0] == cond.args[0]
        and isinstance(other, ArrowLiteral)
        and not other.value.is_valid
    ):
        return None
    col = _resolve(cond.args[0].path, schema)
    found = _arrow_in(col, then.options or {}) if col is not None and "value_set" in (then.options or {}) else None
    # _arrow_in gives ``In AND IS NOT NULL`` for a set without NULL: under if_else a NULL row is NULL, not FALSE
    if isinstance(found, And) and len(found.kids) == 2 and isinstance(found.kids[0], In):
        return found.kids[0]
    return None


def from_expression(expression: pc.Expression, schema: pa.Schema) -> Node:
    """A pyarrow expression as the bound tree of ``lamina.expr``: each call read where its meaning in Arrow
    is exactly a node's (comparisons of a column with a literal Arrow compares exactly, ``is_in`` with its
    default null matching, ``is_null`` / ``is_valid``, ``match_like``, ``&``, ``|``, ``~``); anything else is
    an ``Opaque`` node, which prunes nothing."""
    return _read_expression(expression, schema)[0]


def _read_expression(expression: pc.Expression, schema: pa.Schema) -> tuple[Node, frozenset[str] | None]:
    """``from_expression``, and the top-level columns the expression reads (None: not known)."""
    try:
        raw = read_arrow(expression)
    except Exception:  # what cannot be read evaluates as given, and prunes nothing
        return Opaque(expression), None
    names = fields_of(raw)
    columns = names if names <= set(schema.names) else None
    try:
        return _bind_arrow(raw, schema), columns
    except Exception:
        return Opaque(expression), columns


def parse_filter(flt: str | pc.Expression | Filter, schema: pa.Schema) -> Filter:
    """Parses a string filter, or checks an Expression against ``schema`` (and reads it into the tree)."""
    if isinstance(flt, Filter):
        return flt
    if isinstance(flt, str):
        return _parse_text(flt, schema)
    if isinstance(flt, pc.Expression):
        try:
            pa.Table.from_batches([], schema=schema).filter(flt)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise InvalidFilter(f"filter {flt} does not apply to this table ({e}); columns: {', '.join(schema.names)}") from None
        tree, columns = _read_expression(flt, schema)
        found, _ = conjuncts(tree)  # evaluated as given: index candidates are always re-checked
        return Filter(flt, columns, str(flt), found, False, tree)
    raise InvalidFilter(f'a filter is a string such as "id < 100" or a pyarrow.compute.Expression, not {type(flt).__name__}')
