"""Row-group pruning: which row groups of a data file can hold rows a filter matches, decided
from the Parquet statistics the writer stored (min, max and null count per column chunk), so
that scans read only those.

The decision is conservative: a row group is skipped only when no row of it can make the
filter TRUE, whatever its values within the statistics. The filter is evaluated over *sets of
possible outcomes* (TRUE, FALSE, NULL) per row group, in SQL's three-valued logic, so NOT,
OR and ``!=`` are exact: ``NOT (x < 5)`` keeps a group of ``x`` in [1, 3] when that group may
hold NaN (``NaN < 5`` is FALSE, so ``NOT`` makes it TRUE). Anything not understood keeps the
row group:

- terms pruned: ``=``, ``!=``, ``<``, ``<=``, ``>``, ``>=`` against a literal, ``BETWEEN``,
  ``IN`` (NULL in the list included), ``IS [NOT] NULL``, ``TRUE``/``FALSE``, and any
  AND / OR / NOT of them, on top-level columns of integer, float32/64, boolean, string, binary,
  timestamp and date types, read from the filter's bound tree (``lamina.expr``), whether it was
  parsed from text or read from a pyarrow Expression; a term of any other shape (LIKE, column
  against column, nested fields, other types, an opaque Arrow expression) is "anything" and keeps
  the group unless the rest of the filter rules it out;
- float columns may hold NaN whatever their statistics say (writers leave NaN out of min/max);
- string and binary maxima may be truncated by the writer: a maximum ``m`` is read as "below
  the next string after every string starting with ``m``";
- a missing statistic, a minimum above the maximum, a NaN bound, a null count above the row
  count, or a column whose Parquet type does not match the table's type means "unknown".

Page-level pruning (the column index) is not done: pyarrow neither exposes the column index nor
reads row ranges within a row group. Float columns of files the native writer wrote are not
pruned by value either: it marks their column order IEEE 754 total order (parquet-rs 60), which
pyarrow does not know, so pyarrow reports no min/max for them (null counts still prune).

Zone maps (``Fragment.zones``, in the manifest; made and stored by ``lamina.zones``) answer the same
question for a whole fragment without opening its file: a filtered read skips fragments whose zones
rule the filter out (``prune_fragments``), and manifest segments whose merged zones do
(``segments_ruled_out``), before any task starts. Column types and keys are ``lamina.zones``'s key
domain; a zone map of another key domain (the column's type changed) is "unknown".

Decoded footers are cached per data file (paths are never reused), in the ``footers`` cache of
``lamina.cache``, bounded by ``LAMINA_FOOTER_CACHE_BYTES`` (default 128 MiB).
"""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamina import evolution
from lamina import expr as E
from lamina.cache import MiB, cache
from lamina.filter import Filter, int_bounds
from lamina.manifest import Fragment
from lamina.store import ObjectStore
from lamina.zones import UNIT_NS, Zone, key_kind, scalar_key, successor

# -- possible outcomes of a predicate on the rows of a row group (a bit set) ------------------
T, F, N = 1, 2, 4
ANY = T | F | N


def _not(a: int) -> int:
    return (a & N) | (T if a & F else 0) | (F if a & T else 0)


def _and(a: int, b: int) -> int:
    out = T if (a & T and b & T) else 0
    out |= F if (a & F or b & F) else 0
    if (a & N and b & (N | T)) or (b & N and a & (N | T)):
        out |= N
    return out


def _or(a: int, b: int) -> int:
    out = T if (a & T or b & T) else 0
    out |= F if (a & F and b & F) else 0
    if (a & N and b & (N | F)) or (b & N and a & (N | F)):
        out |= N
    return out


# -- what one column chunk's statistics say --------------------------------------------------
@dataclass(frozen=True)
class Chunk:
    """One column chunk's values as far as its statistics tell: non-null values within
    [lo, hi] (``hi`` inclusive or exclusive; None bounds unknown), whether nulls and non-null
    values may occur, and whether non-null values may be NaN."""

    lo: Any = None
    hi: Any = None
    hi_inclusive: bool = True
    known: bool = False  # lo/hi are bounds (else any value)
    nulls: bool = True
    values: bool = True
    nan: bool = False


UNKNOWN = Chunk()


# -- terms: the filter's tree (lamina.expr) with literals as keys of the statistics' domain ------
@dataclass(frozen=True)
class Const:
    outcomes: int


@dataclass(frozen=True)
class Cmp:
    column: str
    op: str  # = != < <= > >=, or never / always (TRUE / FALSE on every non-null value)
    key: Any  # the literal in the column's key domain; None: a NULL literal


@dataclass(frozen=True)
class In:
    column: str
    keys: tuple  # sorted, non-null, no NaN
    null: bool  # NULL is in the list: a value not among the keys gives NULL, not FALSE


@dataclass(frozen=True)
class IsNull:
    column: str
    negate: bool


@dataclass(frozen=True)
class And:
    kids: tuple


@dataclass(frozen=True)
class Or:
    kids: tuple


@dataclass(frozen=True)
class Not:
    kid: Any


#: A term pruning does not understand: any outcome.
OPAQUE = Const(ANY)


def _eval(node: Any, chunk: Callable[[str], Chunk]) -> int:
    """The possible outcomes of ``node`` on the rows of one row group."""
    if isinstance(node, Const):
        return node.outcomes
    if isinstance(node, And):
        out = T
        for kid in node.kids:
            out = _and(out, _eval(kid, chunk))
            if out == F:
                break
        return out
    if isinstance(node, Or):
        out = F
        for kid in node.kids:
            out = _or(out, _eval(kid, chunk))
            if out == T:
                break
        return out
    if isinstance(node, Not):
        return _not(_eval(node.kid, chunk))
    c = chunk(node.column)
    if isinstance(node, IsNull):
        out = (T if c.nulls else 0) | (F if c.values else 0)
        return _not(out) if node.negate else out
    if isinstance(node, In):  # NULL on null rows; a miss is NULL when the list holds NULL
        found = _in_values(node.keys, c) if c.values else 0
        miss = (N if node.null else F) if found & F else 0
        return (N if c.nulls else 0) | (found & T) | miss
    if node.key is None:  # comparing with NULL: NULL on every row
        return N if (c.nulls or c.values) else 0
    return (N if c.nulls else 0) | (_cmp_values(node.op, node.key, c) if c.values else 0)


def _cmp_values(op: str, v: Any, c: Chunk) -> int:
    """Outcomes of ``value op v`` over the non-null values of ``c``."""
    if op in ("never", "always"):
        return F if op == "never" else T
    if isinstance(v, float) and math.isnan(v):
        return T if op == "!=" else F
    out = (T if op == "!=" else F) if c.nan else 0  # NaN compares false with everything
    if not c.known:
        return out | T | F
    try:
        lt = c.lo < v
        le = c.lo <= v
        gt = c.hi is None or c.hi > v
        ge = c.hi is None or (c.hi >= v if c.hi_inclusive else c.hi > v)
        eq = le and ge
        all_eq = c.hi_inclusive and c.hi is not None and c.lo == v and c.hi == v
    except TypeError:
        return out | T | F
    t, f = {"<": (lt, ge), "<=": (le, gt), ">": (gt, le), ">=": (ge, lt), "=": (eq, not all_eq), "!=": (not all_eq, eq)}[op]
    return out | (T if t else 0) | (F if f else 0)


def _in_values(keys: tuple, c: Chunk) -> int:
    """Outcomes of ``value IN keys`` over the non-null values of ``c`` (NaN is in no list)."""
    out = F if c.nan else 0
    if not keys:
        return out | F
    if not c.known:
        return out | T | F
    try:
        i = bisect.bisect_left(keys, c.lo)
        hit = i < len(keys) and (c.hi is None or (keys[i] <= c.hi if c.hi_inclusive else keys[i] < c.hi))
        only = c.hi_inclusive and c.lo == c.hi and hit and keys[i] == c.lo
    except TypeError:
        return out | T | F
    return out | (T if hit else 0) | (0 if only else F)


# -- column types: how statistics map into the key domain (lamina.zones) -------------------------
_DAY_MS = 86_400_000


def _array_keys(kind: str, t: pa.DataType, arr: pa.Array) -> list:
    """The non-null values of ``arr`` (of the column's type) as keys."""
    arr = arr.drop_null()
    if kind == "ts":
        scale = UNIT_NS[t.unit]
        return [v * scale for v in arr.cast(pa.int64()).to_pylist()]
    if kind == "date32":
        return arr.cast(pa.int32()).to_pylist()
    if kind == "date64":
        return arr.cast(pa.int64()).to_pylist()
    if kind == "bytes":
        return [v.encode("utf-8") if isinstance(v, str) else bytes(v) for v in arr.to_pylist()]
    if kind == "float":
        return [v for v in arr.to_pylist() if not math.isnan(v)]
    return arr.to_pylist()


class _Decoder:
    """Turns one Parquet column's statistics into a ``Chunk`` in the column's key domain (None
    when the Parquet column is not the type pruning expects for the table's column)."""

    def __init__(self, kind: str, t: pa.DataType, physical: str, logical: dict):
        self.kind, self.type, self.scale = kind, t, 1
        ltype = logical.get("Type")
        if kind == "int":
            width = t.bit_width
            signed = pa.types.is_signed_integer(t)
            self.ok = physical == ("INT64" if width == 64 else "INT32") and (
                signed or (ltype == "Int" and logical.get("isSigned") is False)
            )
            self.bounds = int_bounds(t)
        elif kind == "float":
            self.ok = physical == ("FLOAT" if t == pa.float32() else "DOUBLE")
        elif kind == "bool":
            self.ok = physical == "BOOLEAN"
        elif kind == "bytes":
            self.ok = physical == "BYTE_ARRAY"
        elif kind == "ts":
            if ltype == "Timestamp":
                unit = logical.get("timeUnit")
            else:
                unit = "s" if ltype in (None, "None") and t.unit == "s" else None
            self.ok = physical == "INT64" and unit in UNIT_NS
            self.scale = UNIT_NS.get(unit or "", 1)
        elif kind == "date32":
            self.ok = physical == "INT32" and ltype == "Date"
        else:  # date64: milliseconds, or days where the writer coerced it to a Parquet DATE
            self.ok = (physical == "INT64" and ltype in (None, "None")) or (physical == "INT32" and ltype == "Date")
            self.scale = _DAY_MS if physical == "INT32" else 1

    def chunk(self, col: pq.ColumnChunkMetaData, rows: int) -> Chunk:
        st = col.statistics if col.is_stats_set else None
        nan = self.kind == "float"
        if st is None or col.num_values != rows:
            return Chunk(nan=nan)
        nulls, values = True, True
        if st.has_null_count and 0 <= st.null_count <= rows:
            nulls, values = st.null_count > 0, st.null_count < rows
        if not values:
            return Chunk(nulls=nulls, values=False)
        bounds = self.bounds_of(st) if st.has_min_max else None
        if bounds is None:
            return Chunk(nulls=nulls, nan=nan)
        lo, hi, hi_inc = bounds
        return Chunk(lo, hi, hi_inc, True, nulls, True, nan)

    def bounds_of(self, st: pq.Statistics) -> tuple[Any, Any, bool] | None:
        try:
            if self.kind == "bytes":
                lo, hi = st.min_raw, st.max_raw
                lo = lo.encode("utf-8") if isinstance(lo, str) else bytes(lo)
                hi = hi.encode("utf-8") if isinstance(hi, str) else bytes(hi)
                if lo > hi:
                    return None
                return lo, successor(hi), False  # the maximum may be a truncated prefix
            if self.kind in ("ts", "date32", "date64"):
                lo, hi = st.min_raw, st.max_raw
                if not isinstance(lo, int) or not isinstance(hi, int):
                    return None
                lo, hi = lo * self.scale, hi * self.scale
            else:
                lo, hi = st.min, st.max
            if self.kind == "int" and not (
                isinstance(lo, int) and isinstance(hi, int) and self.bounds[0] <= lo <= hi <= self.bounds[1]
            ):
                return None
            if self.kind == "float" and (
                not isinstance(lo, float) or not isinstance(hi, float) or math.isnan(lo) or math.isnan(hi)
            ):
                return None
            if self.kind == "bool" and not (isinstance(lo, bool) and isinstance(hi, bool)):
                return None
            return (lo, hi, True) if lo <= hi else None
        except (TypeError, ValueError, OverflowError, UnicodeError, pa.ArrowException):
            return None


# -- from the filter's tree to terms over statistics ------------------------------------------
def _cmp(name: str, kind: str, c: E.Compare) -> Cmp:
    """A bound comparison in the key domain (``lamina.filter`` made its literal exact)."""
    if c.value is None:  # TRUE / FALSE on every non-null value (``i = 5.5``, ``i < 1e30``)
        return Cmp(name, c.op, 0)
    return Cmp(name, c.op, scalar_key(kind, c.column.type, c.value) if c.value.is_valid else None)


def _column(node: Any) -> E.Column | None:
    if isinstance(node, (E.Compare, E.In)):
        return node.column
    if isinstance(node, E.Between):
        return node.low.column
    if isinstance(node, E.IsNull) and isinstance(node.operand, E.Column):
        return node.operand
    return None


def _terms(node: Any, schema: pa.Schema) -> Any:
    """The filter's bound tree (``lamina.expr``) with its literals as keys of the statistics' domain, once
    per filter (an IN list's keys sorted for bisection): what ``_eval`` reads per row group. A node this
    cannot put into the key domain (LIKE, column against column, a nested field, a type statistics are
    not kept for, an opaque Arrow expression) is ``OPAQUE``."""
    if isinstance(node, E.Const):
        return Const(T if node.value else F)
    if isinstance(node, E.And):
        return And(tuple(_terms(k, schema) for k in node.kids))
    if isinstance(node, E.Or):
        return Or(tuple(_terms(k, schema) for k in node.kids))
    if isinstance(node, E.Not):
        return Not(_terms(node.kid, schema))
    col = _column(node)
    if col is None or len(col.path) != 1:
        return OPAQUE
    name = col.path[0]
    idx = schema.get_field_index(name)
    kind = key_kind(col.type)
    if kind is None or idx < 0 or schema.field(idx).type != col.type:  # bound to another type: unknown
        return OPAQUE
    try:
        if isinstance(node, E.IsNull):
            return IsNull(name, node.negate)
        if isinstance(node, E.In):
            return In(name, tuple(sorted(set(_array_keys(kind, col.type, node.values)))), node.null)
        if isinstance(node, E.Between):
            return And((_cmp(name, kind, node.low), _cmp(name, kind, node.high)))
        return _cmp(name, kind, node)
    except (pa.ArrowException, TypeError, ValueError, OverflowError, AttributeError, KeyError):
        return OPAQUE


@dataclass(frozen=True)
class Pruner:
    """A filter compiled for pruning: its tree and the columns whose statistics it reads."""

    tree: Any
    columns: frozenset[str]

    @property
    def useful(self) -> bool:
        """Whether statistics can prune anything (else every row group is kept unread)."""
        return bool(self.columns) or not _eval(self.tree, lambda c: UNKNOWN) & T


def _columns(node: Any) -> set[str]:
    if isinstance(node, (And, Or)):
        return set().union(*(_columns(k) for k in node.kids))
    if isinstance(node, Not):
        return _columns(node.kid)
    return {node.column} if hasattr(node, "column") else set()


def _compile(tree: Any, schema: pa.Schema) -> Pruner:
    terms = OPAQUE if tree is None else _terms(tree, schema)
    return Pruner(terms, frozenset(_columns(terms)))


def compile_filter(flt: Filter, schema: pa.Schema) -> Pruner:
    """``flt``'s tree as terms over statistics (once per filter and schema)."""
    return flt.derived(("prune", schema), lambda: _compile(flt.tree, schema))


# -- deciding for one file ---------------------------------------------------------------------
def _decoders(metadata: pq.FileMetaData, schema: pa.Schema, columns: frozenset[str]) -> dict[str, tuple[int, _Decoder]]:
    """Leaf index and decoder of each top-level column in ``columns`` the file holds as one
    non-repeated leaf of the expected Parquet type."""
    pschema = metadata.schema
    leaves: dict[str, list[int]] = {}
    for j in range(len(pschema)):
        leaves.setdefault(pschema.column(j).path, []).append(j)
    out = {}
    for name in columns:
        idx = schema.get_field_index(name)
        found = leaves.get(name, [])
        if idx < 0 or len(found) != 1:
            continue
        desc = pschema.column(found[0])
        kind = key_kind(schema.field(idx).type)
        if kind is None or desc.max_repetition_level != 0 or desc.max_definition_level > 1:
            continue
        try:
            logical = json.loads(desc.logical_type.to_json())
        except (ValueError, AttributeError):
            logical = {}
        dec = _Decoder(kind, schema.field(idx).type, desc.physical_type, logical)
        if dec.ok:
            out[name] = (found[0], dec)
    return out


def row_groups(metadata: pq.FileMetaData, schema: pa.Schema, flt: Filter) -> list[int]:
    """The row groups of a file (by its ``metadata``) that may hold rows matching ``flt``."""
    pruner = compile_filter(flt, schema)
    n = metadata.num_row_groups
    if not pruner.useful:
        return list(range(n))
    decoders = _decoders(metadata, schema, pruner.columns)
    kept = []
    for g in range(n):
        rg = metadata.row_group(g)
        rows = rg.num_rows
        seen: dict[str, Chunk] = {}

        def chunk(column: str, seen: dict[str, Chunk] = seen, rg: pq.RowGroupMetaData = rg, rows: int = rows) -> Chunk:
            c = seen.get(column)
            if c is None:
                found = decoders.get(column)
                c = seen[column] = UNKNOWN if found is None else found[1].chunk(rg.column(found[0]), rows)
            return c

        if rows and _eval(pruner.tree, chunk) & T:
            kept.append(g)
    return kept


# -- footers, cached ---------------------------------------------------------------------------
def _footers():
    return cache("footers", "LAMINA_FOOTER_CACHE_BYTES", 128 * MiB)


#: Memory a decoded footer (``pyarrow.parquet.FileMetaData``) takes, as a multiple of its
#: serialized size: measured 8.4x (9 columns, 10 row groups); counted as 10x plus 4 KiB.
FOOTER_MEMORY_FACTOR = 10


def footer(store: ObjectStore, fragment: Fragment, load: Callable[[], pq.FileMetaData]) -> pq.FileMetaData:
    """A data file's Parquet metadata: cached (paths are never reused), else ``load()``."""
    return _footers().get_or_load(
        ("parquet", store.uri, fragment.path), load, lambda md: FOOTER_MEMORY_FACTOR * md.serialized_size + 4096
    )


# -- fragments and manifest segments, by their zone maps (lamina.zones) ------------------------
def _zone_chunk(z: Zone, schema: pa.Schema) -> Chunk:
    idx = schema.get_field_index(z.column)
    if idx < 0 or key_kind(schema.field(idx).type) != z.kind:
        return UNKNOWN
    return Chunk(z.lo, z.hi, z.hi_inclusive, z.lo is not None, z.nulls > 0, z.lo is not None or z.nans > 0, z.nans > 0)


def _zones_allow(pruner: Any, zones: tuple[Zone, ...], schema: pa.Schema) -> bool:
    """Whether rows bounded by ``zones`` may match the compiled filter."""
    return bool(_zone_outcomes(pruner, zones, schema) & T)


def _zone_outcomes(pruner: Any, zones: tuple[Zone, ...], schema: pa.Schema) -> int:
    """The possible outcomes of the compiled filter on rows bounded by ``zones``."""
    seen: dict[str, Chunk] = {}

    def chunk(column: str) -> Chunk:
        c = seen.get(column)
        if c is None:
            z = next((z for z in zones if z.column == column), None)
            c = seen[column] = UNKNOWN if z is None else _zone_chunk(z, schema)
        return c

    return _eval(pruner.tree, chunk)


def prune_fragments(fragments: Iterable[Fragment], schema: pa.Schema, flt: Filter) -> tuple[list[Fragment], int]:
    """The fragments whose zone maps allow a row matching ``flt``, and how many were ruled out
    (without opening any file). One pass: ``fragments`` may stream."""
    ruled_out = fragments_ruled_out(schema, flt)
    if ruled_out is None:
        return list(fragments), 0
    kept = []
    seen_count = 0
    for frag in fragments:
        seen_count += 1
        if not ruled_out(frag):
            kept.append(frag)
    return kept, seen_count - len(kept)


def fragments_ruled_out(schema: pa.Schema, flt: Filter) -> Callable[[Fragment], bool] | None:
    """A test of a fragment: True when its zone maps rule out every row matching ``flt`` (its file
    need not be opened); None when the filter can prune nothing."""
    pruner = compile_filter(flt, schema)
    if not pruner.useful:
        return None

    def ruled_out(frag: Fragment) -> bool:
        zones = _fragment_zones(frag, schema)
        if zones is None:
            return False
        return not (frag.rows and _zones_allow(pruner, zones, schema))

    return ruled_out


def fragments_all_match(schema: pa.Schema, flt: Filter) -> Callable[[Fragment], bool] | None:
    """A test of a fragment: True when its zone maps show that every row matches ``flt`` (none can make it
    false or NULL), so a scan returns its rows without evaluating the filter on them; None when no term of
    the filter reads statistics. A merge's key range over fragments wholly inside it is such a filter."""
    pruner = compile_filter(flt, schema)
    if not pruner.columns:
        return None

    def all_match(frag: Fragment) -> bool:
        zones = _fragment_zones(frag, schema)
        return zones is not None and frag.rows > 0 and _zone_outcomes(pruner, zones, schema) == T

    return all_match


def _fragment_zones(frag: Fragment, schema: pa.Schema) -> tuple[Zone, ...] | None:
    """``frag``'s zone maps under today's column names (None: written before zone maps)."""
    zones = frag.zones
    if zones is not None and frag.schema is not None and frag.schema is not schema:  # an earlier schema: renamed
        zones = evolution.layout(frag.schema, schema).zones(zones)
    return zones


def segments_ruled_out(schema: pa.Schema, flt: Filter, earlier: Iterable[pa.Schema] = ()) -> Callable[[Any], bool] | None:
    """A test of a manifest segment entry: True when its merged zone maps rule out every row
    matching ``flt`` (none of its fragments can match, so it is not even read); None when the filter
    can prune nothing. ``earlier``: the table's earlier schemas fragments are still written in (their
    zone maps are merged by name, so only columns every schema names alike are used)."""
    pruner = compile_filter(flt, schema)
    if not pruner.useful:
        return None
    earlier = list(earlier)
    if earlier:
        stable = evolution.stable_names(earlier, schema)
        if not pruner.columns <= stable:
            return lambda seg: (
                seg.zones is not None and not _zones_allow(pruner, tuple(z for z in seg.zones if z.column in stable), schema)
            )
    return lambda seg: seg.zones is not None and not _zones_allow(pruner, seg.zones, schema)


@dataclass
class FragmentPlan:
    """The row groups of one fragment a filtered scan reads."""

    groups: list[int]  # kept row groups, in file order
    group_rows: list[int]  # rows of every row group of the file
    file: pq.ParquetFile | None = None  # opened while reading the footer (reuse it)

    @property
    def everything(self) -> bool:
        return len(self.groups) == len(self.group_rows)

    def offsets(self) -> np.ndarray:
        """Physical row positions (within the fragment) of the kept row groups' rows."""
        bounds = np.cumsum([0] + self.group_rows)
        if not self.groups:
            return np.zeros(0, dtype=np.uint32)
        return np.concatenate([np.arange(bounds[g], bounds[g + 1], dtype=np.uint32) for g in self.groups])


def plan_fragment(
    store: ObjectStore, fragment: Fragment, schema: pa.Schema, flt: Filter, open_file: Callable[[], pq.ParquetFile]
) -> FragmentPlan | None:
    """Which row groups of ``fragment`` a scan for ``flt`` reads; None: all of them, decided
    without reading the footer (the filter has nothing statistics can prune)."""
    pruner = compile_filter(flt, schema)
    if not pruner.useful:
        return None
    if not pruner.columns:  # FALSE whatever the values: nothing to read, not even the footer
        return FragmentPlan([], [g.rows for g in fragment.row_groups] or [fragment.rows])
    if fragment.schema is not None and fragment.schema is not schema:
        lay = evolution.layout(fragment.schema, schema)
        if not all(lay.stable(c) for c in pruner.columns):  # the file keeps these under other names or types
            return None
    opened: list[pq.ParquetFile] = []

    def load() -> pq.FileMetaData:
        opened.append(open_file())
        return opened[0].metadata

    md = footer(store, fragment, load)
    rows = [md.row_group(g).num_rows for g in range(md.num_row_groups)]
    return FragmentPlan(row_groups(md, schema, flt), rows, opened[0] if opened else None)


@dataclass
class PruneSummary:
    """What statistics prune of a scan: fragments and row groups, read and skipped."""

    fragments: int = 0
    fragments_pruned: int = 0
    row_groups: int = 0
    row_groups_pruned: int = 0
    pruned_ids: list[int] | None = None


def summarize(
    store: ObjectStore,
    fragments: Sequence[Fragment],
    schema: pa.Schema,
    flt: Filter,
    open_file: Callable[[Fragment], pq.ParquetFile],
    map_fn=None,
) -> PruneSummary | None:
    """Row groups a scan of ``fragments`` would read and skip (reads footers, cached); None when
    the filter has nothing statistics can prune."""
    if not compile_filter(flt, schema).useful:
        return None
    mapper = map_fn or (lambda fn, xs: [fn(x) for x in xs])
    plans = mapper(lambda f: plan_fragment(store, f, schema, flt, lambda: open_file(f)), list(fragments))
    pruned_ids: list[int] = []
    out = PruneSummary(pruned_ids=pruned_ids)
    for frag, plan in zip(fragments, plans):
        if plan is None:  # statistics say nothing here (a file written in another schema): every row group is read
            plan = FragmentPlan(list(range(len(frag.row_groups))), [g.rows for g in frag.row_groups])
        out.fragments += 1
        out.row_groups += len(plan.group_rows)
        out.row_groups_pruned += len(plan.group_rows) - len(plan.groups)
        if not plan.groups:
            out.fragments_pruned += 1
            pruned_ids.append(frag.id)
    return out
