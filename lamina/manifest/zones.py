"""Zone maps: a fragment's bounds per column, as held in the manifest (lazily decoded), as stored
(``zones_json``, docs/FORMAT.md §2), and merged over many fragments (a segment's entry, a compaction
output)."""

from __future__ import annotations

import json
import math
from typing import Any, Callable, NamedTuple, Sequence

from lamina.errors import CorruptFile

class Zone(NamedTuple):
    """What a fragment's data file holds in one top-level column (its zone map), in the column's
    key domain (``lamina.prune``: timestamps in ns, strings as UTF-8 bytes). Bounds, not exact
    values: rows deleted later or merged by compaction only make them looser, never wrong.

    A named tuple, not a frozen dataclass: a manifest holds several per fragment, and named tuples
    are markedly cheaper to make when its segments are decoded."""

    column: str
    kind: str  # the key domain (``lamina.prune._kind`` of the column's type when it was written)
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

    def decode(self) -> "tuple[Zone, ...]":
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

    def __get__(self, obj: Any, owner: Any = None) -> "tuple[Zone, ...] | None":
        if obj is None:
            return None  # the field's default
        value = obj.__dict__["_zones"]
        if type(value) is ZoneText:
            value = value.decode()
            obj.__dict__["_zones"] = value
        return value

    def __set__(self, obj: Any, value: "tuple[Zone, ...] | ZoneText | None") -> None:
        obj.__dict__["_zones"] = value  # only a dataclass __init__ gets here: Fragment is frozen


def zones_field(f: Any) -> dict[str, str]:
    """``zones_json``: the zone maps as a JSON text, read only when a filter needs them (as read, if
    this process never decoded them)."""
    zones = f.__dict__["_zones"]
    if zones is None:
        return {}
    if type(zones) is ZoneText:
        return {"zones_json": zones.text}
    return {"zones_json": json.dumps(zones_to_json(zones), separators=(",", ":"), ensure_ascii=True)}


def _zone_value(v: Any) -> Any:
    """A zone bound as JSON: bytes as ``{"b": hex}``, infinities as ``{"f": "inf"}``."""
    if isinstance(v, bytes):
        return {"b": v.hex()}
    if isinstance(v, float) and math.isinf(v):
        return {"f": "inf" if v > 0 else "-inf"}
    return v


_PLAIN_BOUND = (int, bool, type(None))


def _zone_value_from_json(v: Any, what: Callable[[], str]) -> Any:
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
            lo = _zone_value_from_json(lo, what)
        if type(hi) not in _PLAIN_BOUND:
            hi = _zone_value_from_json(hi, what)
        if type(nulls) is not int or type(nans) is not int:
            nulls, nans = int(nulls), int(nans)
        zones.append(Zone(column, kind, lo, hi, hi_inclusive, nulls, nans))
    return tuple(zones)


def zones_to_json(zones: "tuple[Zone, ...]") -> list[list[Any]]:
    return [[z.column, z.kind, _zone_value(z.lo), _zone_value(z.hi), z.hi_inclusive, z.nulls, z.nans] for z in zones]


def merge_zones(items: "Sequence[Any]") -> "tuple[Zone, ...] | None":
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
