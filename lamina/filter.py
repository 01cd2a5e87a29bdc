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
``ts >= '2024-01-01'`` works on a timestamp column.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidFilter

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
_KEYWORDS = {"AND", "OR", "NOT", "IN", "IS", "NULL", "TRUE", "FALSE", "BETWEEN", "LIKE", "TIMESTAMP", "DATE"}


Bound = "tuple[pa.Scalar | None, bool, pa.Scalar | None, bool]"


@dataclass(frozen=True)
class Conjunct:
    """A top-level AND term an index can answer: ``column`` within any of ``ranges``
    ((lo, lo_inclusive, hi, hi_inclusive), bounds of the column's type, None = open)."""

    column: str
    ranges: tuple[tuple[Any, bool, Any, bool], ...]
    text: str
    is_range: bool  # False: equality / IN (every range is a point)


@dataclass(frozen=True)
class Filter:
    """A parsed filter: the expression, the top-level columns it reads (None: unknown), and
    the conjuncts an index may answer (the expression is always re-applied to their rows)."""

    expression: pc.Expression
    columns: frozenset[str] | None
    text: str
    conjuncts: tuple[Conjunct, ...] = ()
    #: The expression is exactly the AND of ``conjuncts`` (an index answering all of them is exact).
    pure: bool = False


@dataclass
class _Tok:
    kind: str
    value: str
    pos: int


@dataclass
class _Col:
    path: tuple[str, ...]
    type: pa.DataType


@dataclass
class _Lit:
    value: Any
    explicit_type: pa.DataType | None = None


def _tokenize(text: str) -> list[_Tok]:
    toks, pos = [], 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if not m or m.end() == pos:
            raise InvalidFilter(f"cannot parse filter {text!r} at position {pos}: unexpected {text[pos:pos + 10]!r}")
        group = m.lastgroup or ""
        kind, value, start = group, m.group(group), m.start(group)
        if kind == "word" and value.upper() in _KEYWORDS:
            kind, value = "kw", value.upper()
        toks.append(_Tok(kind, value, start))
        pos = m.end()
    return toks


class _Parser:
    def __init__(self, text: str, schema: pa.Schema):
        self.text, self.schema = text, schema
        self.toks = _tokenize(text)
        self.i = 0
        self.columns: set[str] = set()

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
            raise InvalidFilter(f"cannot parse filter {self.text!r}: expected {value or kind} {where}")
        return t

    # -- grammar
    # Each rule returns (expression, conjuncts): the indexable terms whose AND the
    # expression implies (an OR or NOT implies none of its parts); a None entry marks a
    # term that is not one of them, so "no None" means the expression IS their AND.
    def parse(self) -> tuple[pc.Expression, list[Conjunct]]:
        if not self.toks:
            raise InvalidFilter("empty filter: pass a condition such as \"id < 100\"")
        e = self.or_()
        if self.peek() is not None:
            t = self.peek()
            raise InvalidFilter(f"cannot parse filter {self.text!r}: unexpected {t.value!r} at position {t.pos}")
        return e

    def or_(self) -> tuple[pc.Expression, list[Conjunct]]:
        e, conj = self.and_()
        while self.accept("kw", "OR"):
            e, conj = e | self.and_()[0], [None]
        return e, conj

    def and_(self) -> tuple[pc.Expression, list[Conjunct]]:
        e, conj = self.not_()
        while self.accept("kw", "AND"):
            e2, c2 = self.not_()
            e, conj = e & e2, conj + c2
        return e, conj

    def not_(self) -> tuple[pc.Expression, list[Conjunct]]:
        if self.accept("kw", "NOT"):
            return ~self.not_()[0], [None]
        return self.predicate()

    def _span(self, start: int) -> str:
        end_tok = self.toks[self.i - 1]
        return self.text[self.toks[start].pos:end_tok.pos + len(end_tok.value)]

    def predicate(self) -> tuple[pc.Expression, list[Conjunct]]:
        t = self.peek()
        start = self.i
        if t and t.kind == "op" and t.value == "(":
            self.i += 1
            e = self.or_()
            self.expect("op", ")")
            return e
        if t and t.kind == "kw" and t.value in ("TRUE", "FALSE"):
            nxt = self.peek(1)
            if nxt is None or (nxt.kind == "kw" and nxt.value in ("AND", "OR")) or (nxt.kind == "op" and nxt.value == ")"):
                self.i += 1
                return pc.scalar(t.value == "TRUE"), [None]
        ranges: list[tuple[Any, bool, Any, bool]] = []
        point = True
        left = self.operand()
        indexed = left
        negate = bool(self.accept("kw", "NOT"))
        if self.accept("kw", "IN"):
            self.expect("op", "(")
            values = [self.literal()]
            while self.accept("op", ","):
                values.append(self.literal())
            self.expect("op", ")")
            col = self.need_column(left, "IN")
            scalars = [self.cast(v, col.type) for v in values]
            arr = pa.array([v.as_py() for v in scalars], type=col.type)
            e = pc.is_in(self.ref(col), value_set=arr)
            ranges = [(v, True, v, True) for v in scalars if v.is_valid]
            if len(ranges) < len(scalars):  # NULL in the list matches null rows: not a key lookup
                ranges = []
        elif self.accept("kw", "BETWEEN"):
            lo = self.literal()
            self.expect("kw", "AND")
            hi = self.literal()
            col = self.need_column(left, "BETWEEN")
            lo_s, hi_s = self.cast(lo, col.type), self.cast(hi, col.type)
            e = (self.ref(col) >= lo_s) & (self.ref(col) <= hi_s)
            if lo_s.is_valid and hi_s.is_valid:
                ranges, point = [(lo_s, True, hi_s, True)], False
        elif self.accept("kw", "LIKE"):
            pattern = self.literal()
            col = self.need_column(left, "LIKE")
            if not isinstance(pattern.value, str):
                raise InvalidFilter(f"LIKE needs a string pattern in {self.text!r}")
            e = pc.match_like(self.ref(col), pattern.value)
        elif not negate and self.accept("kw", "IS"):
            is_not = bool(self.accept("kw", "NOT"))
            self.expect("kw", "NULL")
            e = self.value(left, None).is_valid() if is_not else self.value(left, None).is_null()
            return e, [None]
        else:
            if negate:
                raise InvalidFilter(f"cannot parse filter {self.text!r}: NOT must precede IN, BETWEEN or LIKE here")
            op = self.expect("op")
            if op.value not in ("=", "==", "!=", "<>", "<", "<=", ">", ">="):
                raise InvalidFilter(f"cannot parse filter {self.text!r}: {op.value!r} at position {op.pos} is not a comparison")
            right = self.operand()
            ltype = left.type if isinstance(left, _Col) else None
            rtype = right.type if isinstance(right, _Col) else None
            a, b = self.value(left, rtype), self.value(right, ltype)
            e = {"=": a == b, "==": a == b, "!=": a != b, "<>": a != b, "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op.value]
            ranges, point, indexed = self.comparison_range(left, op.value, right)
        if negate or not ranges or not isinstance(indexed, _Col) or len(indexed.path) != 1:
            return (~e if negate else e), [None]
        return e, [Conjunct(indexed.path[0], tuple(ranges), self._span(start), not point)]

    def comparison_range(self, left: _Col | _Lit, op: str, right: _Col | _Lit) -> tuple[list, bool, _Col | _Lit]:
        """``column op literal`` (either side) as a key range; nothing for other shapes."""
        flip = {"<": ">", "<=": ">=", ">": "<", ">=": "<=", "=": "=", "==": "=="}
        if isinstance(left, _Lit) and isinstance(right, _Col):
            if op not in flip:
                return [], True, left
            left, op, right = right, flip[op], left
        if not (isinstance(left, _Col) and isinstance(right, _Lit)) or len(left.path) != 1:
            return [], True, left
        v = self.cast(right, left.type)
        if not v.is_valid:
            return [], True, left
        bound = {"=": (v, True, v, True), "==": (v, True, v, True), "<": (None, False, v, False),
                 "<=": (None, False, v, True), ">": (v, False, None, False), ">=": (v, True, None, False)}.get(op)
        return ([bound] if bound else []), op in ("=", "=="), left

    def operand(self) -> _Col | _Lit:
        t = self.peek()
        if t is None:
            raise InvalidFilter(f"cannot parse filter {self.text!r}: unexpected end")
        if t.kind in ("word", "dq", "bq"):
            return self.column()
        return self.literal()

    def column(self) -> _Col:
        names = [self.name()]
        while self.accept("op", "."):
            names.append(self.name())
        field_type: pa.DataType
        idx = self.schema.get_field_index(names[0])
        if idx < 0:
            raise InvalidFilter(f"filter {self.text!r} names column {names[0]!r}, which the table does not have; columns: {', '.join(self.schema.names)}")
        field_type = self.schema.field(idx).type
        for part in names[1:]:
            if not pa.types.is_struct(field_type) or field_type.get_field_index(part) < 0:
                raise InvalidFilter(f"filter {self.text!r}: {'.'.join(names)!r} is not a field of the table")
            field_type = field_type.field(field_type.get_field_index(part)).type
        self.columns.add(names[0])
        return _Col(tuple(names), field_type)

    def name(self) -> str:
        t = self.peek()
        if t is None or t.kind not in ("word", "dq", "bq"):
            raise InvalidFilter(f"cannot parse filter {self.text!r}: expected a column name")
        self.i += 1
        if t.kind == "dq":
            return t.value[1:-1].replace('""', '"')
        if t.kind == "bq":
            return t.value[1:-1]
        return t.value

    def literal(self) -> _Lit:
        t = self.peek()
        if t is None:
            raise InvalidFilter(f"cannot parse filter {self.text!r}: expected a value at the end")
        self.i += 1
        if t.kind == "num":
            v = t.value
            return _Lit(int(v) if re.fullmatch(r"-?\d+", v) else float(v))
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
                raise InvalidFilter(f"filter {self.text!r}: {s!r} is not an ISO-8601 {t.value.lower()}") from None
        raise InvalidFilter(f"cannot parse filter {self.text!r}: expected a value at position {t.pos}, got {t.value!r}")

    def need_column(self, operand: _Col | _Lit, what: str) -> _Col:
        if not isinstance(operand, _Col):
            raise InvalidFilter(f"filter {self.text!r}: the left side of {what} must be a column")
        return operand

    def ref(self, col: _Col) -> pc.Expression:
        return pc.field(col.path[0]) if len(col.path) == 1 else pc.field(col.path)

    def cast(self, lit: _Lit, target: pa.DataType) -> pa.Scalar:
        if lit.value is None:
            return pa.scalar(None, type=target)
        try:
            if isinstance(lit.value, str) and not (pa.types.is_string(target) or pa.types.is_large_string(target)):
                return pa.scalar(lit.value).cast(target)
            return pa.scalar(lit.value, type=target)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, ValueError, OverflowError):
            raise InvalidFilter(f"filter {self.text!r}: value {lit.value!r} cannot be compared with a column of type {target}") from None

    def value(self, operand: _Col | _Lit, other_type: pa.DataType | None) -> pc.Expression:
        if isinstance(operand, _Col):
            return self.ref(operand)
        if other_type is not None:
            return pc.scalar(self.cast(operand, other_type))
        return pc.scalar(operand.value)


@functools.lru_cache(maxsize=512)
def _parse_text(text: str, schema: pa.Schema) -> Filter:
    """Parsed filters are immutable, and repeated queries are common (point lookups): cache them."""
    p = _Parser(text, schema)
    expression, conjuncts = p.parse()
    found = tuple(c for c in conjuncts if c is not None)
    return Filter(expression, frozenset(p.columns), text, found, pure=bool(found) and None not in conjuncts)


def parse_filter(flt: "str | pc.Expression | Filter", schema: pa.Schema) -> Filter:
    """Parses a string filter, or checks an Expression against ``schema``."""
    if isinstance(flt, Filter):
        return flt
    if isinstance(flt, str):
        return _parse_text(flt, schema)
    if isinstance(flt, pc.Expression):
        try:
            pa.Table.from_batches([], schema=schema).filter(flt)
        except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError) as e:
            raise InvalidFilter(f"filter {flt} does not apply to this table ({e}); columns: {', '.join(schema.names)}") from None
        return Filter(flt, None, str(flt))
    raise InvalidFilter(f"a filter is a string such as \"id < 100\" or a pyarrow.compute.Expression, not {type(flt).__name__}")
