"""Filters as one frozen tree, built once and read by visitors.

::

    "id < 5 AND ..."  ──► lamina.filter (parser) ──┐                 ┌──► to_arrow     what a scan evaluates
                                                   ├──► bound tree ──┼──► conjuncts    what an index answers (lamina.index.query)
    pc.field("id") < 5 ──► read_arrow ──► bind ────┘     (Node)      └──► lamina.prune  what zone maps and row-group
                                                                                        statistics rule out

The tree is bound as it is built: a ``Column`` carries its type in the table's schema, and a
``Compare`` holds its literal as the exact value of the column's type the comparison means (or
"never" / "always" where no value of the type equals the literal: ``i = 5.5``), decided once by
``lamina.filter`` (the by-value rules live there). The parser binds while it reads, not in a pass
after it: every reader wants the bound form, and a second walk over an IN list of 100,000
literals would cost as much as reading them. Nothing downstream parses text again.

A pyarrow expression is read through Arrow's own serialization of it (the bytes pickling writes:
an IPC file whose schema metadata lists the expression's calls, field references and literals in
order, the literals and function options in its columns), never through ``str(expr)``; the
schema metadata is read in order through the Arrow C data interface (``Schema.metadata`` is a dict,
and a call repeats keys). (``to_substrait`` is the other way in, but reading its protobuf needs
Substrait's generated classes, a dependency for this alone.) ``lamina.filter`` binds what it
reads; a call it does not know, or knows but cannot bind exactly (a literal of a type Arrow would
not compare exactly with the column, a set lookup with other null matching), stays an ``Opaque``
node: it evaluates, and reads as "any outcome", so it never prunes a row it would return. An
Expression filter is still evaluated as given; its tree serves pruning and the indices, whose
candidates are then re-checked with it.
"""

from __future__ import annotations

import ctypes
import struct
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

from lamina import arrays

# -- nodes ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Column:
    """A column (``path`` of one name, or a path into structs) and its type in the table's schema."""

    path: tuple[str, ...]
    type: pa.DataType

    @property
    def name(self) -> str:
        return ".".join(self.path)


@dataclass(frozen=True, slots=True)
class Literal:
    """A value not bound to a column by a comparison (``Relation``, ``IsNull``): a ``pa.Scalar`` put
    into the other operand's type, or a Python value."""

    value: Any


@dataclass(frozen=True, slots=True)
class Compare:
    """``column op value``: op one of = != < <= > >=, ``value`` a scalar of the column's type (NULL for
    a NULL literal); or op "never" / "always" (``value`` None): FALSE / TRUE on every non-null row."""

    column: Column
    op: str
    value: pa.Scalar | None
    text: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class In:
    """``column IN values`` in three-valued logic: ``values`` of the column's type, with no null and no
    NaN, 0.0 and -0.0 both or neither; ``null``: the list held NULL (a miss is NULL, not FALSE)."""

    column: Column
    values: pa.Array
    null: bool = False
    text: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Between:
    """``column BETWEEN lo AND hi``: ``low`` is ``column >= lo``, ``high`` is ``column <= hi``."""

    low: Compare
    high: Compare
    text: str = field(default="", compare=False)


@dataclass(frozen=True, slots=True)
class Like:
    column: Column
    pattern: str


@dataclass(frozen=True, slots=True)
class IsNull:
    """``operand IS NULL`` (``negate``: IS NOT NULL)."""

    operand: Column | Literal
    negate: bool = False


@dataclass(frozen=True, slots=True)
class Relation:
    """Any other comparison (column with column, literal with literal): evaluated, never pruned."""

    op: str
    left: Column | Literal
    right: Column | Literal


@dataclass(frozen=True, slots=True)
class Const:
    value: bool


@dataclass(frozen=True, slots=True)
class And:
    kids: tuple


@dataclass(frozen=True, slots=True)
class Or:
    kids: tuple


@dataclass(frozen=True, slots=True)
class Not:
    kid: Any


@dataclass(frozen=True, slots=True, eq=False)
class Opaque:
    """An Arrow expression the tree does not read into: it evaluates, and may be anything."""

    expression: pc.Expression


Node = Column | Compare | In | Between | Like | IsNull | Relation | Const | And | Or | Not | Opaque


@dataclass(frozen=True, slots=True)
class Arith:
    """``left op right``, op one of + - * /: a value computed from a row (``Table.update``'s expressions),
    not a condition. Checked arithmetic: an overflow or a division by zero is an error, never a wrapped value."""

    op: str
    left: Value
    right: Value


@dataclass(frozen=True, slots=True)
class Negate:
    """``-operand``."""

    operand: Value


#: A value expression (``lamina.filter.parse_value``): a column, a literal, or arithmetic over them.
Value = Column | Literal | Arith | Negate


# -- to Arrow -------------------------------------------------------------------------------------
#: The comparisons of the filter language, as calls on pyarrow expressions (``lamina.polars`` maps Polars' to them).
COMPARE = {
    "=": lambda a, b: a == b,
    "!=": lambda a, b: a != b,
    "<": lambda a, b: a < b,
    "<=": lambda a, b: a <= b,
    ">": lambda a, b: a > b,
    ">=": lambda a, b: a >= b,
}


def ref(col: Column) -> pc.Expression:
    return pc.field(col.path[0]) if len(col.path) == 1 else pc.field(col.path)


def in_set(column: pc.Expression, values: pa.Array, null: bool) -> pc.Expression:
    """``column IN values`` (``values`` without nulls; ``null``: the list also held NULL) in three-valued
    logic: TRUE where ``column`` is one of ``values``, else NULL where it is NULL or the list held NULL,
    else FALSE. (Arrow's ``is_in`` is never NULL: a null row matches a NULL in the set.)"""
    found = pc.is_in(column, value_set=values)  # FALSE on null rows: the set holds no null
    if null:
        return pc.if_else(found, arrays.scalar(True, pa.bool_()), arrays.scalar(None, pa.bool_()))
    return pc.if_else(pc.is_null(column), arrays.scalar(None, pa.bool_()), found)


def _const(column: pc.Expression, value: bool) -> pc.Expression:
    """TRUE or FALSE on the non-null rows of ``column``, NULL on its null rows (as a comparison is)."""
    return pc.if_else(pc.is_null(column), arrays.scalar(None, pa.bool_()), arrays.scalar(value, pa.bool_()))


def _join(op: str, exprs: list[tuple[pc.Expression, str]]) -> tuple[pc.Expression, str]:
    """``exprs`` (expression, root) joined by ``op`` ("and" / "or") as a balanced tree where no
    ``op`` node is the direct operand of another: where one would be, the node is written by De
    Morgan (``a AND b`` as ``NOT (NOT a OR NOT b)``, equal in three-valued logic). Arrow flattens
    directly nested AND (OR) calls into one chain and recurses once per operand, which overflows
    the stack on long chains."""
    level = exprs
    while len(level) > 1:
        nxt = []
        for i in range(0, len(level) - 1, 2):
            (a, ra), (b, rb) = level[i], level[i + 1]
            if ra != op and rb != op:
                nxt.append(((a & b) if op == "and" else (a | b), op))
            else:
                nxt.append((~((~a) | (~b)) if op == "and" else ~((~a) & (~b)), "not"))
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


def _operand(o: Column | Literal) -> pc.Expression:
    return ref(o) if isinstance(o, Column) else pc.scalar(o.value)


#: The arithmetic of value expressions, as checked pyarrow compute calls (an overflow raises).
ARITH = {"+": pc.add_checked, "-": pc.subtract_checked, "*": pc.multiply_checked, "/": pc.divide_checked}


def _compare(node: Compare) -> tuple[pc.Expression, str]:
    r = ref(node.column)
    if node.value is None:
        return _const(r, node.op == "always"), ""
    return COMPARE[node.op](r, pc.scalar(node.value)), ""


def _is_null(node: IsNull) -> tuple[pc.Expression, str]:
    e = _operand(node.operand)
    return (e.is_valid() if node.negate else e.is_null()), ""


#: Each node's Arrow expression and its root ("and" / "or" / "not" when it is that call), by node type.
_TO_ARROW = {
    Compare: _compare,
    In: lambda n: (in_set(ref(n.column), n.values, n.null), ""),
    And: lambda n: _join("and", [_arrow(k) for k in n.kids]),
    Or: lambda n: _join("or", [_arrow(k) for k in n.kids]),
    Not: lambda n: (~_arrow(n.kid)[0], "not"),
    Between: lambda n: (_arrow(n.low)[0] & _arrow(n.high)[0], "and"),
    IsNull: _is_null,
    Like: lambda n: (pc.match_like(ref(n.column), n.pattern), ""),
    Relation: lambda n: (COMPARE[n.op](_operand(n.left), _operand(n.right)), ""),
    Const: lambda n: (pc.scalar(arrays.scalar(n.value, pa.bool_())), ""),
    Opaque: lambda n: (n.expression, ""),
    Column: lambda n: (ref(n), ""),
    Literal: lambda n: (_operand(n), ""),
    Arith: lambda n: (ARITH[n.op](_arrow(n.left)[0], _arrow(n.right)[0]), ""),
    Negate: lambda n: (pc.negate_checked(_arrow(n.operand)[0]), ""),
}


def _arrow(node: Node | Value) -> tuple[pc.Expression, str]:
    convert = _TO_ARROW.get(type(node))
    if convert is None:
        raise TypeError(f"not a filter node: {node!r}")
    return convert(node)


def to_arrow(node: Node | Value) -> pc.Expression:
    """The pyarrow compute expression a scan evaluates for ``node`` (a filter, or a value expression)."""
    return _arrow(node)[0]


def evaluate(node: Value, table: pa.Table) -> pa.ChunkedArray | pa.Array | pa.Scalar:
    """A value expression's value for every row of ``table``: a scalar when it reads no column. Checked
    arithmetic (``ARITH``): an overflow or a division by zero raises ``ArrowInvalid``."""
    if isinstance(node, Column):
        out: Any = table.column(node.path[0])
        for part in node.path[1:]:
            out = pc.struct_field(out, part)
        return out
    if isinstance(node, Literal):
        return node.value if isinstance(node.value, pa.Scalar) else pa.scalar(node.value)
    if isinstance(node, Arith):
        return ARITH[node.op](evaluate(node.left, table), evaluate(node.right, table))
    if isinstance(node, Negate):
        return pc.negate_checked(evaluate(node.operand, table))
    raise TypeError(f"not a value expression: {node!r}")


# -- index conjuncts ------------------------------------------------------------------------------
@dataclass(frozen=True)
class Conjunct:
    """A top-level AND term an index can answer: ``column`` within any of ``ranges``
    ((lo, lo_inclusive, hi, hi_inclusive), bounds of the column's type, None = open), or, for an IN
    list, equal to one of ``points`` (an array of the column's type; ``ranges`` is then empty: a long
    list stays one array instead of a scalar per value)."""

    column: str
    ranges: tuple[tuple[Any, bool, Any, bool], ...]
    text: str
    is_range: bool  # False: equality / IN (every range is a point)
    points: pa.Array | None = None


def _range(c: Compare) -> tuple[Any, bool, Any, bool] | None:
    """The key range ``c`` selects; None for ``!=``, a NULL literal, and "never" / "always"."""
    s = c.value
    if s is None or not s.is_valid or c.op == "!=":
        return None
    return {
        "=": (s, True, s, True),
        "<": (None, False, s, False),
        "<=": (None, False, s, True),
        ">": (s, False, None, False),
        ">=": (s, True, None, False),
    }[c.op]


def render(node: Node) -> str:
    """A short text for a node (in ``explain``) when it did not come from filter text."""
    if isinstance(node, Compare):
        return f"{node.column.name} {node.op} {node.value}"
    if isinstance(node, In):
        return f"{node.column.name} IN ({len(node.values)} values)"
    if isinstance(node, Between):
        return f"{node.low.column.name} BETWEEN {node.low.value} AND {node.high.value}"
    return type(node).__name__


def _conjunct(node: Node) -> Conjunct | None:
    if isinstance(node, Compare):
        r = _range(node)
        if r is None or len(node.column.path) != 1:
            return None
        return Conjunct(node.column.path[0], (r,), node.text or render(node), node.op != "=")
    if isinstance(node, In):
        if len(node.column.path) != 1:
            return None
        return Conjunct(node.column.path[0], (), node.text or render(node), False, node.values)
    if isinstance(node, Between):
        lo, hi = _range(node.low), _range(node.high)
        if lo is None or hi is None or len(node.low.column.path) != 1:
            return None
        return Conjunct(node.low.column.path[0], ((lo[0], lo[1], hi[2], hi[3]),), node.text or render(node), True)
    return None


def conjuncts(node: Node) -> tuple[tuple[Conjunct, ...], bool]:
    """The top-level AND terms of ``node`` an index can answer, and whether ``node`` is exactly their AND."""
    terms: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if isinstance(n, And):
            stack.extend(reversed(n.kids))
        else:
            terms.append(n)
    found = [_conjunct(t) for t in terms]
    kept = tuple(c for c in found if c is not None)
    return kept, bool(kept) and len(kept) == len(found)


# -- reading a pyarrow expression -----------------------------------------------------------------
@dataclass(frozen=True)
class ArrowCall:
    """A call in a pyarrow expression as Arrow serializes it: function name, arguments, options (a dict
    of the options' fields, None for none) and the expression itself (``expression()``)."""

    function: str
    args: tuple
    options: dict | None
    source: _Serialized
    span: tuple[int, int]

    def expression(self) -> pc.Expression:
        return self.source.expression(self.span)


@dataclass(frozen=True)
class ArrowField:
    path: tuple[str, ...]


@dataclass(frozen=True)
class ArrowLiteral:
    value: pa.Scalar


class _ArrowSchemaC(ctypes.Structure):
    """``struct ArrowSchema`` of the Arrow C data interface."""

    _fields_ = [
        ("format", ctypes.c_char_p),
        ("name", ctypes.c_char_p),
        ("metadata", ctypes.c_void_p),
        ("flags", ctypes.c_int64),
        ("n_children", ctypes.c_int64),
        ("children", ctypes.c_void_p),
        ("dictionary", ctypes.c_void_p),
        ("release", ctypes.c_void_p),
        ("private_data", ctypes.c_void_p),
    ]


_capsule_pointer = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_pointer.restype = ctypes.c_void_p
_capsule_pointer.argtypes = [ctypes.py_object, ctypes.c_char_p]


def _metadata_pairs(schema: pa.Schema) -> list[tuple[bytes, bytes]]:
    """A schema's metadata as its ordered list of (key, value) pairs, repeated keys included
    (``Schema.metadata`` is a dict). Read through the C data interface, whose encoding of metadata
    is specified: an int32 count, then for each pair an int32 length and bytes, twice."""
    capsule = schema.__arrow_c_schema__()  # released when the capsule goes
    c = _ArrowSchemaC.from_address(_capsule_pointer(capsule, b"arrow_schema"))
    if not c.metadata:
        return []
    base = c.metadata
    (n,) = struct.unpack("=i", ctypes.string_at(base, 4))
    end = 4
    for _ in range(2 * n):  # find the encoding's length, then read it in one go
        end += 4 + ctypes.c_int32.from_address(base + end).value
    blob = ctypes.string_at(base, end)
    at, pairs = 4, []
    for _ in range(n):
        (k,) = struct.unpack_from("=i", blob, at)
        key = blob[at + 4 : at + 4 + k]
        at += 4 + k
        (v,) = struct.unpack_from("=i", blob, at)
        pairs.append((key, blob[at + 4 : at + 4 + v]))
        at += 4 + v
    return pairs


class _Serialized:
    """An expression as Arrow serializes it (``Expression.__reduce__``): the metadata pairs in order and
    the batch of literals and options; any contiguous run of pairs that is one expression deserializes
    back into that expression."""

    def __init__(self, expression: pc.Expression):
        self.load, (buffer,) = expression.__reduce__()
        reader = ipc.open_file(buffer)
        self.batch = reader.get_batch(0) if reader.num_record_batches else pa.RecordBatch.from_arrays([], schema=reader.schema)
        self.pairs = [(k.decode(), v.decode()) for k, v in _metadata_pairs(reader.schema)]

    def scalar(self, column: str) -> pa.Scalar:
        return self.batch.column(int(column))[0]

    def expression(self, span: tuple[int, int]) -> pc.Expression:
        schema = self.batch.schema.with_metadata(pa.KeyValueMetadata(self.pairs[span[0] : span[1]]))
        sink = pa.BufferOutputStream()
        with ipc.new_file(sink, schema) as w:
            w.write_batch(pa.RecordBatch.from_arrays(self.batch.columns, schema=schema))
        return self.load(sink.getvalue())


def read_arrow(expression: pc.Expression) -> ArrowCall | ArrowField | ArrowLiteral:
    """The structure of a pyarrow expression (calls, field references, literals), read from Arrow's
    serialization of it without recursion (long AND / OR chains nest deeply). Raises on what Arrow does
    not serialize (a field referenced by position)."""
    s = _Serialized(expression)
    pairs = s.pairs
    stack: list[tuple[str, list, int]] = []  # the open calls: function, arguments so far, first pair
    i = 0
    while True:
        if i >= len(pairs):
            raise ValueError("unterminated serialized expression")
        key, value = pairs[i]
        start = i
        i += 1
        item: Any
        if key == "literal":
            item = ArrowLiteral(s.scalar(value))
        elif key == "field_ref":
            item = ArrowField((value,))
        elif key == "nested_field_ref":
            n = int(value)
            names = pairs[i : i + n]
            if len(names) != n or any(k != "field_ref" for k, _ in names):
                raise ValueError("malformed nested field reference")
            item = ArrowField(tuple(v for _, v in names))
            i += n
        elif key == "call":
            stack.append((value, [], start))
            item = None
        else:
            raise ValueError(f"unexpected {key!r} in a serialized expression")
        while True:  # hand the finished item to its call; close the calls that end here
            if item is not None:
                if not stack:
                    if i != len(pairs):
                        raise ValueError("trailing items in a serialized expression")
                    return item
                stack[-1][1].append(item)
            if not stack or i >= len(pairs) or pairs[i][0] not in ("end", "options"):
                break
            function, args, begin = stack.pop()
            options = None
            if pairs[i][0] == "options":
                opt = s.scalar(pairs[i][1])
                if opt.is_valid:
                    options = {opt.type.field(j).name: opt[j] for j in range(opt.type.num_fields)}
                i += 1
            if i >= len(pairs) or pairs[i][0] != "end":
                raise ValueError("unterminated call in a serialized expression")
            i += 1
            item = ArrowCall(function, tuple(args), options, s, (begin, i))


def fields_of(raw: ArrowCall | ArrowField | ArrowLiteral) -> frozenset[str]:
    """The top-level columns a read pyarrow expression (``read_arrow``) refers to."""
    out: set[str] = set()
    stack: list[Any] = [raw]
    while stack:
        node = stack.pop()
        if isinstance(node, ArrowField):
            out.add(node.path[0])
        elif isinstance(node, ArrowCall):
            stack.extend(node.args)
    return frozenset(out)
