"""Zone maps: per fragment and top-level column, bounds of its values (min, max, null and NaN
counts) kept in the manifest, so a filter rules out a fragment, or a whole manifest segment, before
any file is opened (``lamina.prune.fragments_ruled_out`` decides; this module makes and stores them).

- the key domain: which column types have zones and how a value becomes a comparable key
  (timestamps in ns, dates as integers, strings as UTF-8 bytes), shared with row-group pruning;
- computing: the writer takes every column's zone from the batches it writes (``zones_of``, or
  ``zones_of_many`` for many small files in one aggregation); long strings keep a prefix;
- merging: a segment's entry and a compaction output bound every row of what they hold
  (``merge_zones``: bounds of a superset of the rows, so still bounds);
- storing: ``zones_json`` in a fragment's manifest entry (docs/FORMAT.md §2), decoded only when a
  filter first reads ``Fragment.zones`` (``ZoneText``, ``LazyZones``).

A zone map is only bounds: rows deleted later or merged by compaction make them looser, never wrong;
a missing one, or one of another key domain (the column's type changed), is "unknown".
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import CorruptFile

# -- the key domain ------------------------------------------------------------------------------
#: Nanoseconds per unit of a timestamp type (and of Parquet's time units).
UNIT_NS = {
    "s": 10**9,
    "ms": 10**6,
    "us": 10**3,
    "ns": 1,
    "seconds": 10**9,
    "milliseconds": 10**6,
    "microseconds": 10**3,
    "nanoseconds": 1,
}


def key_kind(t: pa.DataType) -> str | None:
    """The key domain of a column type pruning handles, or None."""
    if pa.types.is_integer(t):
        return "int"
    if t in (pa.float32(), pa.float64()):
        return "float"
    if pa.types.is_boolean(t):
        return "bool"
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or pa.types.is_large_binary(t):
        return "bytes"
    if pa.types.is_timestamp(t):
        return "ts"
    if t == pa.date32():
        return "date32"
    if t == pa.date64():
        return "date64"
    return None


def scalar_key(kind: str, t: pa.DataType, s: pa.Scalar) -> Any:
    """A non-null scalar of the column's type as a key (timestamps in ns, date64 in ms)."""
    if kind == "ts":
        return s.value * UNIT_NS[t.unit]
    if kind in ("date32", "date64"):
        return s.value
    v = s.as_py()
    if kind == "bytes":
        return v.encode("utf-8") if isinstance(v, str) else bytes(v)
    return v


def successor(b: bytes) -> bytes | None:
    """The least byte string above every string starting with ``b`` (None: there is none)."""
    b = b.rstrip(b"\xff")
    return b[:-1] + bytes([b[-1] + 1]) if b else None


# -- the zone model: as held by a fragment, decoded on first use ---------------------------------
class Zone(NamedTuple):
    """What a fragment's data file holds in one top-level column (its zone map), in the column's
    key domain (``key_kind``: timestamps in ns, strings as UTF-8 bytes). Bounds, not exact
    values: rows deleted later or merged by compaction only make them looser, never wrong.

    A named tuple, not a frozen dataclass: a manifest holds several per fragment, and named tuples
    are markedly cheaper to make when its segments are decoded."""

    column: str
    kind: str  # the key domain (``key_kind`` of the column's type when it was written)
    lo: Any  # least non-null, non-NaN value; None: there is none
    hi: Any  # greatest such value (or an exclusive bound, below); None: unknown / none
    hi_inclusive: bool
    nulls: int  # an upper bound of the null rows: 0 means none
    nans: int  # an upper bound of the NaN rows: 0 means none


class ZoneText(NamedTuple):
    """A fragment's zone maps as stored (``zones_json``, docs/FORMAT.md §2): decoded the first time
    ``Fragment.zones`` is read, and written back as they are by a commit that never read them."""

    text: str
    manifest: str  # the manifest and fragment, for an error
    fragment: Any

    @property
    def where(self) -> str:
        return f"manifest {self.manifest} fragment {self.fragment}"

    def decode(self) -> tuple[Zone, ...]:
        def what() -> str:
            return self.where

        try:
            raw = json.loads(self.text)
            if not isinstance(raw, list):
                raise TypeError("not a list")
            return zones_from_json(raw, what)
        except CorruptFile:
            raise
        except (TypeError, ValueError, RecursionError) as e:
            raise CorruptFile(f"{self.where}: malformed zone maps ({type(e).__name__}: {str(e)[:120]})") from None


class LazyZones:
    """``Fragment.zones``: a tuple of zones, None, or a ``ZoneText`` decoded on first read. Most
    reads never look at zone maps (a ``take``, an index lookup, a commit that keeps a fragment), and
    decoding them was over half of the cost of reading a manifest segment."""

    def __get__(self, obj: Any, owner: Any = None) -> tuple[Zone, ...] | None:
        if obj is None:
            return None  # the field's default
        value = obj.__dict__["_zones"]
        if type(value) is ZoneText:
            value = value.decode()
            obj.__dict__["_zones"] = value
        return value

    def __set__(self, obj: Any, value: tuple[Zone, ...] | ZoneText | None) -> None:
        obj.__dict__["_zones"] = value  # only a dataclass __init__ gets here: Fragment is frozen


# -- computing zones from the batches being written ---------------------------------------------
#: Strings and binaries longer than this keep a prefix as their lower bound and the successor of
#: the maximum's prefix as an exclusive upper bound (the manifest stays small).
ZONE_BYTES = 64


def _bound_key(kind: str, t: pa.DataType, s: pa.Scalar) -> Any:
    if not s.is_valid:
        return None
    key = scalar_key(kind, t, s)
    return None if isinstance(key, float) and math.isnan(key) else key


def zones_of(batches: Sequence[pa.RecordBatch], schema: pa.Schema) -> tuple[Zone, ...]:
    """Zone maps of every top-level column of a prunable type, from the batches being written
    (one vectorised pass per column; no I/O)."""
    zones = []
    for i, fld in enumerate(schema):
        kind = key_kind(fld.type)
        if kind is None:
            continue
        col = pa.chunked_array([b.column(i) for b in batches], type=fld.type)
        nulls = col.null_count
        nans = int(pc.sum(pc.is_nan(col)).as_py() or 0) if kind == "float" else 0
        lo = hi = None
        if nulls + nans < len(col):
            mm = pc.min_max(col)
            lo, hi = _bound_key(kind, fld.type, mm["min"]), _bound_key(kind, fld.type, mm["max"])
        zones.append(_zone(fld.name, kind, len(col), nulls, nans, lo, hi))
    return tuple(zones)


def _zone(column: str, kind: str, rows: int, nulls: int, nans: int, lo: Any, hi: Any) -> Zone:
    """A column's zone from its counts and its least and greatest keys (None: NaN or not known)."""
    inclusive = True
    if nulls + nans >= rows:
        lo = hi = None
    elif lo is None or hi is None:
        lo = hi = None
        nans = max(nans, 1)  # cannot tell: treat like a NaN, which matches nothing and keeps "values"
    elif kind == "bytes" and (len(lo) > ZONE_BYTES or len(hi) > ZONE_BYTES):
        lo = lo[:ZONE_BYTES]
        if len(hi) > ZONE_BYTES:
            hi, inclusive = successor(hi[:ZONE_BYTES]), False
    return Zone(column, kind, lo, hi, inclusive, nulls, nans)


def _value_key(kind: str, t: pa.DataType, v: Any) -> Any:
    """``_bound_key`` of a Python value from ``zones_of_many``'s aggregation (temporal columns are
    aggregated as their integers)."""
    if v is None:
        return None
    if kind == "ts":
        return v * UNIT_NS[t.unit]
    if kind == "bytes":
        return v.encode("utf-8") if isinstance(v, str) else bytes(v)
    return None if isinstance(v, float) and math.isnan(v) else v


def zones_of_many(chunks: Sequence[Sequence[pa.RecordBatch]], schema: pa.Schema) -> list[tuple[Zone, ...]]:
    """``zones_of`` of each of many files' batches, in one grouped aggregation over all of them: for a
    tiny file ``zones_of``'s fixed cost (two compute calls per column, under the GIL) outweighs its rows,
    and a bulk append may write thousands of such files."""
    rows = [sum(b.num_rows for b in c) for c in chunks]
    if len(chunks) < 2 or not all(rows):  # the aggregation has no group for an empty file
        return [zones_of(c, schema) for c in chunks]
    columns: dict[str, Any] = {"_g": pa.array(np.repeat(np.arange(len(chunks), dtype=np.int64), rows))}
    aggregations: list[tuple] = []
    wanted: list[tuple[pa.Field, str, str]] = []
    for i, fld in enumerate(schema):
        kind = key_kind(fld.type)
        if kind is None:
            continue
        # one contiguous array: the aggregation costs many times more over one chunk per file
        col = pa.chunked_array([b.column(i) for c in chunks for b in c], type=fld.type).combine_chunks()
        if kind in ("ts", "date64"):
            col = col.cast(pa.int64())  # keys are the integers (scalar_key's ``.value``)
        elif kind == "date32":
            col = col.cast(pa.int32())
        name = f"c{i}"
        columns[name] = col
        aggregations += [(name, "min_max"), (name, "count", pc.CountOptions(mode="only_null"))]
        if kind == "float":
            columns[f"n{i}"] = pc.is_nan(col)
            aggregations.append((f"n{i}", "sum"))
        wanted.append((fld, kind, name))
    if not wanted:
        return [() for _ in chunks]
    try:
        out = pa.table(columns).group_by("_g", use_threads=False).aggregate(aggregations)
    except pa.ArrowNotImplementedError:  # a type the grouped kernels lack in this pyarrow: one file at a time
        return [zones_of(c, schema) for c in chunks]
    at = {g: j for j, g in enumerate(out.column("_g").to_pylist())}
    per_column = []
    for fld, kind, name in wanted:
        mm = out.column(f"{name}_min_max").combine_chunks()
        nans = out.column(f"n{name[1:]}_sum").to_pylist() if kind == "float" else None
        per_column.append(
            (fld, kind, mm.field("min").to_pylist(), mm.field("max").to_pylist(), out.column(f"{name}_count").to_pylist(), nans)
        )
    zones = []
    for g, n in enumerate(rows):
        j = at[g]
        zones.append(
            tuple(
                _zone(
                    fld.name,
                    kind,
                    n,
                    nulls[j],
                    int(nans[j] or 0) if nans is not None else 0,
                    _value_key(kind, fld.type, lo[j]),
                    _value_key(kind, fld.type, hi[j]),
                )
                for fld, kind, lo, hi, nulls, nans in per_column
            )
        )
    return zones


# -- merging -------------------------------------------------------------------------------------
def merge_zones(items: Sequence[Any]) -> tuple[Zone, ...] | None:
    """Zones bounding every row of ``items`` (fragments, or segment entries; e.g. a compaction
    output's, from its sources'); a column some item has no zone for is left out."""
    if not items or any(x.zones is None for x in items):
        return None
    per = [{z.column: z for z in x.zones} for x in items]
    out = []
    for name, first in per[0].items():
        zs = [p.get(name) for p in per]
        if any(z is None or z.kind != first.kind for z in zs):
            continue
        lo = hi = None
        inclusive = True
        unbounded = False
        for z in zs:
            assert z is not None
            if z.lo is None:
                continue
            lo = z.lo if lo is None or z.lo < lo else lo
            if z.hi is None:
                unbounded = True
            elif hi is None or z.hi > hi or (z.hi == hi and z.hi_inclusive):
                hi, inclusive = z.hi, z.hi_inclusive
        if unbounded:
            hi, inclusive = None, False
        out.append(Zone(name, first.kind, lo, hi, inclusive, sum(z.nulls for z in zs), sum(z.nans for z in zs)))  # type: ignore[union-attr]
    return tuple(out)


# -- storing: zones_json in a fragment's entry, bounds in a segment's entry ------------------------
def zones_field(f: Any) -> dict[str, str]:
    """``zones_json``: the zone maps as a JSON text, read only when a filter needs them (as read, if
    this process never decoded them)."""
    zones = f.__dict__["_zones"]
    if zones is None:
        return {}
    if type(zones) is ZoneText:
        return {"zones_json": zones.text}
    return {"zones_json": json.dumps(zones_to_json(zones), separators=(",", ":"), ensure_ascii=True)}


def zone_value(v: Any) -> Any:
    """A zone bound as JSON: bytes as ``{"b": hex}``, infinities as ``{"f": "inf"}``."""
    if isinstance(v, bytes):
        return {"b": v.hex()}
    if isinstance(v, float) and math.isinf(v):
        return {"f": "inf" if v > 0 else "-inf"}
    return v


_PLAIN_BOUND = (int, bool, type(None))


def zone_value_from_json(v: Any, what: Callable[[], str]) -> Any:
    """``zone_value``'s inverse; ``what`` names where the value was read, for ``CorruptFile``."""
    if type(v) in _PLAIN_BOUND:
        return v
    if isinstance(v, dict):
        if len(v) == 1 and type(v.get("b")) is str:
            try:
                return bytes.fromhex(v["b"])
            except ValueError:
                pass
        elif v == {"f": "inf"} or v == {"f": "-inf"}:
            return float(v["f"])
        raise CorruptFile(f"{what()}: malformed zone bound {str(v)[:80]}")
    if isinstance(v, float) and math.isfinite(v):
        return v
    raise CorruptFile(f"{what()}: malformed zone bound {str(v)[:80]}")


def zones_from_json(raw: Any, what: Callable[[], str]) -> tuple[Zone, ...]:
    zones = []
    for column, kind, lo, hi, hi_inclusive, nulls, nans in raw:
        if type(column) is not str or type(kind) is not str or type(hi_inclusive) is not bool:
            raise CorruptFile(f"{what()}: malformed zone map of column {str(column)[:80]}")
        if type(lo) not in _PLAIN_BOUND:
            lo = zone_value_from_json(lo, what)
        if type(hi) not in _PLAIN_BOUND:
            hi = zone_value_from_json(hi, what)
        if type(nulls) is not int or type(nans) is not int:
            nulls, nans = int(nulls), int(nans)
        zones.append(Zone(column, kind, lo, hi, hi_inclusive, nulls, nans))
    return tuple(zones)


def zones_to_json(zones: tuple[Zone, ...]) -> list[list[Any]]:
    return [[z.column, z.kind, zone_value(z.lo), zone_value(z.hi), z.hi_inclusive, z.nulls, z.nans] for z in zones]
