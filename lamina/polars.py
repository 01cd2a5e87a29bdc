"""Polars reads a Lamina table lazily: an IO plugin that pushes projections, filters and limits into the scan.

::

    scan_table(uri) ──► LazyFrame ── collect() ──► Polars' optimizer ──► source(with_columns, predicate, n_rows, batch_size)
                                                                          │
        to_arrow_filter(predicate) ──► a pyarrow filter keeping a SUPERSET of the predicate's rows (or None)
                                                                          │
        table.scanner(columns, filter, limit, batch_size) of the pinned version ──► batches
                                                                          │
        pl.from_arrow(batch).filter(predicate).select(with_columns) ──► DataFrames, at most n_rows rows

Polars trusts an IO source to return exactly the rows its predicate keeps, so the predicate itself is
applied to every batch: the pushed filter only prunes, and Polars' semantics (NaN above every number and
equal to itself, nulls in ``is_in``) stay exact whatever the pushed filter could or could not say.

The predicate is read from its JSON serialization (``Expr.meta.serialize(format="json")``), the form
Polars hands plugins; a shape this module does not know is not pushed, which costs reads, never rows.
Polars is optional: only this module imports it.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.ipc as ipc

try:
    import polars as pl
    from polars.io.plugins import register_io_source
except ImportError as e:  # pragma: no cover - exercised only where Polars is missing
    raise ImportError("lamina.polars needs Polars: pip install polars") from e

from lamina.errors import InvalidArgument
from lamina.expr import COMPARE
from lamina.scan import DEFAULT_BATCH_SIZE
from lamina.table import Table, open_table

__all__ = ["scan_table", "to_arrow_filter"]


def scan_table(
    uri_or_table: str | Table,
    version: int | None = None,
    storage_options: dict[str, Any] | None = None,
) -> pl.LazyFrame:
    """A table's live rows as a Polars ``LazyFrame``, pinned to one version: the latest when the table is
    opened here (or ``version``), or the version a given ``Table`` holds now; every ``collect`` reads that
    version. Projections, filters (``to_arrow_filter``) and ``head`` are pushed into the scan.

    >>> import polars as pl
    >>> lf = scan_table("/tmp/t")  # doctest: +SKIP
    >>> lf.filter(pl.col("id") == 5).select("id", "category").collect()  # doctest: +SKIP
    """
    if isinstance(uri_or_table, Table):
        if storage_options is not None:
            raise InvalidArgument(
                f"scan_table({uri_or_table.uri!r}): storage_options go with a URI; this Table already has its store"
            )
        t = uri_or_table
        # A copy at the version it holds now: the caller's object moves on with its own commits, this scan does not.
        table = t.checkout(version) if version is not None else Table(t.store, t.manifest, t.storage_options)
    else:
        table = open_table(uri_or_table, version=version, storage_options=storage_options)
    schema = table.schema

    def source(
        with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
    ) -> Iterator[pl.DataFrame]:
        return _frames(table, with_columns, predicate, n_rows, batch_size)

    options: dict[str, Any] = {}
    if "explain_name" in inspect.signature(register_io_source).parameters:  # Polars >= 2
        options = {"explain_name": "lamina", "explain_detail": f"{table.uri} at version {table.version}"}
    return register_io_source(source, schema=polars_schema(schema), validate_schema=True, is_pure=True, **options)


def polars_schema(schema: pa.Schema) -> pl.Schema:
    """The Polars schema of the frames ``pl.from_arrow`` makes from batches of ``schema``."""
    frame = pl.from_arrow(schema.empty_table())
    assert isinstance(frame, pl.DataFrame)
    return frame.schema


def _frames(
    table: Table, with_columns: list[str] | None, predicate: pl.Expr | None, n_rows: int | None, batch_size: int | None
) -> Iterator[pl.DataFrame]:
    """What the plugin returns: the rows ``predicate`` keeps, projected to ``with_columns``, at most ``n_rows``."""
    schema = table.schema
    out = list(with_columns) if with_columns is not None else schema.names
    if n_rows is not None and n_rows <= 0:
        return
    needed = set(out)
    pushed = None
    if predicate is not None:
        needed |= set(predicate.meta.root_names())
        pushed = to_arrow_filter(predicate, schema)
    read = [name for name in schema.names if name in needed]
    left = n_rows
    batches = _batches(table, read, pushed, batch_size, n_rows if predicate is None else None)
    try:
        for batch in batches:
            frame = pl.from_arrow(batch)
            assert isinstance(frame, pl.DataFrame)
            if predicate is not None:
                frame = frame.filter(predicate)
            frame = frame.select(out)
            if left is not None:
                frame = frame.head(left)
                left -= frame.height
            if frame.height:
                yield frame
            if left == 0:
                return
    finally:
        close = getattr(batches, "close", None)
        if close is not None:
            close()  # the scan's reads ahead stop here, not when the generator is collected


def _batches(
    table: Table, columns: list[str], filter: pc.Expression | None, batch_size: int | None, limit: int | None
) -> Iterator[pa.RecordBatch]:
    """The one place the plugin reads the table: ``columns`` of the rows ``filter`` keeps, at most ``limit``,
    streamed (reading stops when the consumer does)."""
    return table.scanner(columns, filter, limit=limit, batch_size=batch_size or DEFAULT_BATCH_SIZE).to_batches()


# -- Polars predicate → pyarrow filter ------------------------------------------------------------------
#: Comparisons: the pyarrow call, the operator with the operands swapped, and the one meaning NOT (on the
#: non-null rows, in Polars' total order of floats, where NaN is above every number and equal to itself).
_COMPARE: dict[str, Callable[[pc.Expression, pc.Expression], pc.Expression]] = {
    name: COMPARE[op] for name, op in {"Eq": "=", "NotEq": "!=", "Lt": "<", "LtEq": "<=", "Gt": ">", "GtEq": ">="}.items()
}
_SWAPPED = {"Eq": "Eq", "NotEq": "NotEq", "Lt": "Gt", "LtEq": "GtEq", "Gt": "Lt", "GtEq": "LtEq"}
_NEGATED = {"Eq": "NotEq", "NotEq": "Eq", "Lt": "GtEq", "LtEq": "Gt", "Gt": "LtEq", "GtEq": "Lt"}
_VALIDITY = {"EqValidity": "Eq", "NotEqValidity": "NotEq"}  # eq_missing / ne_missing: never NULL
_AND = ("And", "LogicalAnd")
_OR = ("Or", "LogicalOr")
#: Polars' literal dtypes (``{"Scalar": {"Int64": 5}}``) as Arrow types.
_LITERAL_TYPES = {
    **{f"Int{n}": getattr(pa, f"int{n}")() for n in (8, 16, 32, 64)},
    **{f"UInt{n}": getattr(pa, f"uint{n}")() for n in (8, 16, 32, 64)},
    "Float32": pa.float32(),
    "Float64": pa.float64(),
    "String": pa.string(),
    "Boolean": pa.bool_(),
    "Date": pa.date32(),
}
_DYNAMIC = {"Int": pa.int64(), "Float": pa.float64(), "Str": pa.string()}
_UNITS = {"Nanoseconds": "ns", "Microseconds": "us", "Milliseconds": "ms"}


def to_arrow_filter(expr: pl.Expr, schema: pa.Schema) -> pc.Expression | None:
    """A pyarrow filter over ``schema`` that keeps every row the Polars predicate ``expr`` keeps (maybe more),
    or None when nothing narrower than "every row" can be said.

    Pushed: a column compared with a literal (``== != < <= > >=``, either side, ``eq_missing`` /
    ``ne_missing``), ``&``, ``|``, ``~``, ``is_null`` / ``is_not_null``, ``is_nan`` / ``is_not_nan``,
    ``is_in`` and ``is_between``, on integer, float, string, boolean, date and timestamp columns; a boolean
    column on its own. An AND pushes the terms that convert, an OR only when every side does. On a float
    column Polars orders NaN above every number, so ``x > 5`` is pushed as ``(x > 5) | is_nan(x)``. A NaN
    or infinite literal is not pushed (Polars' JSON writes them as null).

    >>> import polars as pl, pyarrow as pa
    >>> to_arrow_filter((pl.col("id") > 5) & (pl.col("id") * 2 < 40), pa.schema([("id", pa.int64())]))
    <pyarrow.compute.Expression (id > 5)>
    """
    try:
        tree = json.loads(expr.meta.serialize(format="json"))
        pushed = _rows(tree, True, schema)
        if pushed is not None:
            schema.empty_table().filter(pushed)  # it binds to the table's types, or it is not pushed
    except (LookupError, TypeError, ValueError, ArithmeticError, RecursionError, pa.ArrowException, pl.exceptions.PolarsError):
        return None  # a shape not read here: the plugin's own filter keeps the answer exact
    return pushed


def _rows(node: Any, truth: bool, schema: pa.Schema) -> pc.Expression | None:
    """A pyarrow expression TRUE on every row where the Polars expression ``node`` (its JSON) is ``truth``
    (TRUE, or FALSE: never NULL); None: no restriction known. Asking for FALSE is how ``~`` is pushed: NOT x
    holds exactly where x is FALSE, so a superset of x's TRUE rows would not do."""
    if not isinstance(node, dict) or len(node) != 1:
        return None
    ((kind, body),) = node.items()
    if kind == "BinaryExpr":
        return _binary(body, truth, schema)
    if kind == "Function":
        return _function(body, truth, schema)
    if kind == "Column" and _column_type(body, schema) == pa.bool_():
        return pc.field(body) if truth else ~pc.field(body)
    return None


def _binary(body: dict, truth: bool, schema: pa.Schema) -> pc.Expression | None:
    op = body["op"]
    if op in _AND or op in _OR:
        left, right = _rows(body["left"], truth, schema), _rows(body["right"], truth, schema)
        if (op in _AND) == truth:  # TRUE of an AND, FALSE of an OR (Kleene): both sides hold
            return left if right is None else right if left is None else left & right
        return None if left is None or right is None else left | right
    if op not in _COMPARE and op not in _VALIDITY:
        return None
    left, right = body["left"], body["right"]
    if isinstance(left, dict) and "Literal" in left:
        left, right, op = right, left, _SWAPPED.get(op, op)
    name = left.get("Column") if isinstance(left, dict) else None
    column_type = _column_type(name, schema)
    value = _scalar(right.get("Literal"), column_type) if isinstance(right, dict) and column_type is not None else None
    if value is None:
        return None
    assert isinstance(name, str)
    if op in _VALIDITY:  # never NULL: a null row is FALSE for eq_missing, TRUE for ne_missing
        equal = (op == "EqValidity") == truth
        return (
            _compare(name, column_type, "Eq", value)
            if equal
            else _compare(name, column_type, "NotEq", value) | pc.field(name).is_null()
        )
    return _compare(name, column_type, op if truth else _NEGATED[op], value)


def _compare(name: str, column_type: Any, op: str, value: pa.Scalar) -> pc.Expression:
    """Rows where Polars holds ``name op value`` (``value`` not NaN): Arrow's comparison, with the NaN rows
    added where Polars puts NaN above the value (NaN != value is already TRUE in Arrow)."""
    found = _COMPARE[op](pc.field(name), pc.scalar(value))
    if pa.types.is_floating(column_type) and op in ("Gt", "GtEq"):
        found = found | pc.is_nan(pc.field(name))
    return found


def _function(body: dict, truth: bool, schema: pa.Schema) -> pc.Expression | None:
    inputs, function = body["input"], body["function"]
    if not isinstance(function, dict) or "Boolean" not in function:
        return None
    fn = function["Boolean"]
    if fn == "Not" and len(inputs) == 1:
        return _rows(inputs[0], not truth, schema)
    name = inputs[0].get("Column") if inputs and isinstance(inputs[0], dict) else None
    column_type = _column_type(name, schema)
    if column_type is None:
        return None
    assert isinstance(name, str)
    field = pc.field(name)
    if fn in ("IsNull", "IsNotNull") and len(inputs) == 1:
        return field.is_null() if (fn == "IsNull") == truth else field.is_valid()
    if fn in ("IsNan", "IsNotNan") and len(inputs) == 1 and pa.types.is_floating(column_type):
        return pc.is_nan(field) if (fn == "IsNan") == truth else ~pc.is_nan(field)
    if isinstance(fn, dict) and "IsIn" in fn and len(inputs) == 2:
        return _is_in(name, column_type, inputs[1], bool((fn["IsIn"] or {}).get("nulls_equal")), truth)
    if isinstance(fn, dict) and "IsBetween" in fn and len(inputs) == 3:
        closed = fn["IsBetween"]["closed"]
        low = {"BinaryExpr": {"left": inputs[0], "op": "GtEq" if closed in ("Both", "Left") else "Gt", "right": inputs[1]}}
        high = {"BinaryExpr": {"left": inputs[0], "op": "LtEq" if closed in ("Both", "Right") else "Lt", "right": inputs[2]}}
        return _rows({"BinaryExpr": {"left": low, "op": "And", "right": high}}, truth, schema)
    return None


def _is_in(name: str, column_type: Any, literal: Any, nulls_equal: bool, truth: bool) -> pc.Expression | None:
    """``is_in``: TRUE where the value is in the list (NaN matching NaN, -0.0 matching 0.0), NULL on a null row
    unless ``nulls_equal`` (then TRUE where the list holds null, else FALSE), FALSE elsewhere."""
    values = _values(literal, column_type)
    if values is None:
        return None
    field = pc.field(name)
    listed = values.drop_null()
    if pa.types.is_floating(column_type) and len(listed):
        zeros = pa.array([0.0, -0.0], column_type)
        if pc.any(pc.equal(listed, zeros[0])).as_py():  # Arrow's set lookup tells -0.0 from 0.0; Polars does not
            listed = pa.concat_arrays([listed, zeros])
    found = field.isin(listed)  # FALSE on a null row: the set holds no null
    if not truth:
        return ~found  # TRUE on null rows too: a superset whatever nulls_equal says
    if pa.types.is_floating(column_type) and len(listed) and pc.any(pc.is_nan(listed)).as_py():
        found = found | pc.is_nan(field)
    if nulls_equal and values.null_count:
        found = found | field.is_null()
    return found


def _column_type(name: Any, schema: pa.Schema) -> pa.DataType | None:
    """The type of column ``name`` where its values mean the same in Polars and Arrow, else None."""
    if not isinstance(name, str) or schema.get_field_index(name) < 0:
        return None
    t = schema.field(name).type
    if _family(t) is None:
        return None
    return t


def _family(t: pa.DataType) -> str | None:
    if pa.types.is_integer(t) or t in (pa.float32(), pa.float64()):
        return "number"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):  # Polars' lists: views
        return "string"
    if pa.types.is_boolean(t):
        return "bool"
    if t == pa.date32():
        return "date"
    if pa.types.is_timestamp(t):
        return "timestamp"
    return None


def _scalar(literal: Any, column_type: pa.DataType) -> pa.Scalar | None:
    """A Polars literal as the same value in ``column_type``; None where it is null, NaN or infinite (all
    written as null), of another kind, or not exactly a value of that type."""
    if not isinstance(literal, dict) or len(literal) != 1:
        return None
    ((kind, body),) = literal.items()
    if kind not in ("Scalar", "Dyn") or not isinstance(body, dict) or len(body) != 1:
        return None
    ((dtype, value),) = body.items()
    if kind == "Dyn":
        t = _DYNAMIC.get(dtype)
    elif dtype == "Datetime":
        value, unit, zone = value
        t = pa.timestamp(_UNITS[unit], zone.get("inner") if isinstance(zone, dict) else zone)
    else:
        t = _LITERAL_TYPES.get(dtype)
    if t is None or value is None:
        return None
    cast = _exactly(pa.array([value], t), column_type, kind == "Dyn")
    return None if cast is None else cast[0]


def _values(literal: Any, column_type: pa.DataType) -> pa.Array | None:
    """The values of an ``is_in`` list literal (a Series as Arrow IPC stream bytes) in ``column_type``."""
    if not isinstance(literal, dict) or "Literal" not in literal:
        return None
    scalar = literal["Literal"].get("Scalar") if isinstance(literal["Literal"], dict) else None
    raw = scalar.get("List") if isinstance(scalar, dict) else None
    if not isinstance(raw, list):
        return None
    table = ipc.open_stream(bytes(raw)).read_all()
    if table.num_columns != 1:
        return None
    return _exactly(table.column(0).combine_chunks(), column_type)


def _exactly(values: pa.Array, column_type: pa.DataType, dynamic: bool = False) -> pa.Array | None:
    """``values`` cast to ``column_type`` where Polars compares them with the column as those same values;
    else None. A ``dynamic`` literal (``pl.col("x") > 5``) takes the column's type in Polars."""
    if values.type == column_type:
        return values
    if values.type != pa.null() and _family(values.type) != _family(column_type):
        return None
    if pa.types.is_timestamp(column_type):
        return None  # another unit or zone: Polars may cast the column, not the literal
    if pa.types.is_integer(column_type) and pa.types.is_floating(values.type):
        return None  # Polars compares as floats: i = 2.0**53 holds for i = 2**53 + 1
    if not dynamic and pa.types.is_integer(values.type) and pa.uint64() in (values.type, column_type):
        if pa.types.is_signed_integer(values.type) or pa.types.is_signed_integer(column_type):
            return None  # no integer type holds both: Polars may compare as floats
    cast = values.cast(column_type)  # safe: raises on overflow
    if _family(values.type) == "number" and not cast.cast(values.type).equals(values):
        return None  # 1.1 as float32 is not 1.1, 2**53 + 1 as float64 is not 2**53 + 1
    return cast
