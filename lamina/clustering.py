"""A table's clustering: the key columns and curve its compaction sorts rows by, stored in the manifest.

``Table.set_clustering(columns, curve)`` records a ``Clustering`` under ``config["clustering"]``
(docs/FORMAT.md §2): the columns, the curve (``hilbert``, ``zorder`` for 2–4 keys, ``linear`` for one),
and per column the cut points of its cells, sampled quantiles of the data (``lamina.curve``), so a skewed
key still spreads over every cell. Compaction (``lamina.planner.clustering``) sorts rows along the
curve and writes fragments with disjoint curve ranges (``Fragment.cluster``); fragments written under
other boundaries (or never clustered) are "level 0" to it.

    set_clustering ──► config["clustering"] = {columns, curve, boundaries, key}
    compaction ──► sorted runs of fragments, each with its ClusterRange(key, run, lo, hi)
    zone maps (every fragment) ──► cell extents per key ──► overlap depth, expected share skipped

The metric (``clustering_stats``) reads only the manifest: a fragment's zone map on a key, mapped to
cells, covers a share of that key's distribution (cells are quantiles); the sum of those shares is the
average number of fragments a point filter on the key reads (its overlap depth).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina import curve, evolution
from lamina.errors import CorruptFile, InvalidArgument
from lamina.manifest import Fragment, Manifest
from lamina.zones import Zone, key_kind

#: The manifest ``config`` entry holding a table's clustering.
CONFIG_KEY = "clustering"
#: Boundaries are sampled again when at least this share of the live rows lies in fragments whose
#: zone maps fall outside them on some key (the data drifted past the sampled range).
DRIFT_SHARE = 0.25


@dataclass(frozen=True)
class Clustering:
    """Clustering keys of a table and the cut points of their cells."""

    columns: tuple[str, ...]
    curve: str
    #: Per column, ascending cut points in the column's key domain (``lamina.zones.key_kind``).
    boundaries: tuple[tuple[Any, ...], ...]

    def __post_init__(self) -> None:
        if self.curve not in curve.CURVES:
            raise InvalidArgument(f"clustering curve {self.curve!r} is not one of {', '.join(curve.CURVES)}")
        if not 1 <= len(self.columns) <= curve.MAX_KEYS:
            raise InvalidArgument(f"clustering needs 1 to {curve.MAX_KEYS} key columns, not {len(self.columns)}")
        if self.curve == "linear" and len(self.columns) != 1:
            raise InvalidArgument(f"curve 'linear' sorts by one column; {len(self.columns)} columns need 'hilbert' or 'zorder'")
        if self.curve != "linear" and len(self.columns) < 2:
            raise InvalidArgument(f"curve {self.curve!r} interleaves 2 to {curve.MAX_KEYS} columns; one column needs 'linear'")
        if len(set(self.columns)) != len(self.columns):
            raise InvalidArgument(f"clustering columns {list(self.columns)} name a column twice")
        if len(self.boundaries) != len(self.columns):
            raise InvalidArgument("clustering needs one list of boundaries per column")

    @functools.cached_property
    def key(self) -> str:
        """A short fingerprint of columns, curve and boundaries: fragments clustered under another
        key are level 0 to compaction (their ranges mean nothing under these cells)."""
        text = json.dumps(self.to_config(with_key=False), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    def to_config(self, *, with_key: bool = True) -> dict[str, Any]:
        out: dict[str, Any] = {
            "columns": list(self.columns),
            "curve": self.curve,
            "boundaries": [curve.boundaries_to_json(list(b)) for b in self.boundaries],
        }
        if with_key:
            out["key"] = self.key
        return out

    @classmethod
    def from_config(cls, config: dict[str, Any], where: str = "") -> Clustering | None:
        """The clustering a manifest's ``config`` records (None: none); ``CorruptFile`` naming ``where`` if malformed."""
        raw = config.get(CONFIG_KEY)
        if raw is None:
            return None

        def what() -> str:
            return f"the clustering entry of {where or 'the manifest'}"

        try:
            columns, name, bounds = raw["columns"], raw["curve"], raw["boundaries"]
            if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns) or not isinstance(bounds, list):
                raise TypeError("columns and boundaries must be lists")
            return cls(tuple(columns), str(name), tuple(tuple(curve.boundaries_from_json(b, what)) for b in bounds))
        except (KeyError, TypeError, ValueError, InvalidArgument) as e:
            raise CorruptFile(f"{what()} is malformed ({type(e).__name__}: {e}): {str(raw)[:120]}") from None

    def sort_order(self, table: pa.Table) -> tuple[Any, Any]:
        """(order, positions): the permutation sorting ``table``'s rows along the curve and their curve positions."""
        return curve.sort_order(table, self.columns, self.curve, [list(b) for b in self.boundaries])

    def extents(self, fragment: Fragment, schema: pa.Schema | None = None) -> list[tuple[int, int]]:
        """Per key, the share of the grid the fragment's zone map allows, as ``(first, last)`` grid
        cells: to the end of the last cell's block (a key with k cut points has k + 1 cells spread
        over the grid), the whole grid when it has no zone map. ``schema``: today's (a fragment written
        in an earlier one has its zone maps read through it)."""
        grid = 2**curve.CELL_BITS
        zones = _zones(fragment, schema)
        out = []
        for column, bounds in zip(self.columns, self.boundaries):
            z = zones.get(column)
            if z is None or (z.lo is None and z.nulls == 0 and z.nans == 0):
                out.append((0, grid - 1))
                continue
            first, last = curve.cell_range(z.lo, z.hi, list(bounds), has_nulls=z.nulls > 0, has_nans=z.nans > 0)
            cells = len(bounds) + 1
            block = -(-last * cells // grid)  # the cell whose block starts at grid cell ``last``
            out.append((first, (block + 1) * grid // cells - 1))
        return out

    def clustered(self, fragment: Fragment) -> bool:
        """Whether a clustering rewrite under these keys and cells wrote ``fragment``."""
        return fragment.cluster is not None and fragment.cluster.key == self.key


def choose(schema: pa.Schema, columns: Sequence[str], curve_name: str, sample: pa.Table | None) -> Clustering:
    """A clustering of ``columns`` by ``curve_name``, cells cut at the quantiles of ``sample`` (its rows of
    those columns; None or empty: no boundaries yet, sampled by the first compaction). Bad columns or curve:
    ``InvalidArgument`` naming what is allowed."""
    if isinstance(columns, str):
        columns = [columns]
    for c in columns:
        if c not in schema.names:
            raise InvalidArgument(f"clustering column {c!r} is not in the table's schema ({', '.join(schema.names)})")
        t = schema.field(c).type
        if key_kind(t) in (None, "bool"):
            raise InvalidArgument(
                f"clustering column {c!r} has type {t}: clustering keys must be integers, floats, strings, binary, "
                f"dates or timestamps"
            )
    boundaries: list[tuple[Any, ...]] = []
    for c in columns:
        if sample is None or sample.num_rows == 0:
            boundaries.append(())
        else:
            boundaries.append(tuple(curve.sample_boundaries(sample.column(c))))
    return Clustering(tuple(columns), curve_name, tuple(boundaries))


def _zones(fragment: Fragment, schema: pa.Schema | None) -> dict[str, Zone]:
    """A fragment's zone maps by today's column names (``schema``; None: as stored)."""
    zones = fragment.zones or ()
    if zones and schema is not None and fragment.schema is not None and fragment.schema is not schema:
        zones = evolution.layout(fragment.schema, schema).zones(zones)
    return {z.column: z for z in zones}


def drifted(clustering: Clustering, fragments: Iterable[Fragment], schema: pa.Schema | None = None) -> str | None:
    """Why the boundaries should be sampled again (None: they still fit): none were sampled (the table was
    empty) and it now has rows, a key that had no cut points (one value, or none, when sampled) now holds
    several values, or ``DRIFT_SHARE`` of its live rows lie in fragments whose zone maps are outside the
    sampled range on some key. A key whose rows still all hold one value has no cut points to gain: it
    never asks for a new sample (each would change the clustering's key, and every run would be
    clustered again)."""
    live = outside = 0
    #: Per key without cut points: the values its fragments hold, one each; None once one holds several (or may).
    held: list[set[Any] | None] = [set() for _ in clustering.columns]
    for f in fragments:
        live += f.live_rows
        zones = _zones(f, schema)
        out = False
        for i, (column, bounds) in enumerate(zip(clustering.columns, clustering.boundaries)):
            z = zones.get(column)
            if bounds:
                out |= z is not None and z.lo is not None and z.hi is not None and (z.lo > bounds[-1] or z.hi < bounds[0])
            elif f.live_rows and (one := held[i]) is not None:
                if z is not None and z.lo is not None and z.hi_inclusive and z.lo == z.hi:
                    one.add(z.lo)
                elif z is None or z.lo is not None:  # (a zone of only nulls and NaN holds no value)
                    held[i] = None
        outside += f.live_rows if out else 0
    if live == 0:
        return None
    spread = [
        c
        for c, b, values in zip(clustering.columns, clustering.boundaries, held)
        if not b and (values is None or len(values) > 1)
    ]
    if spread and not any(clustering.boundaries):
        return "no boundaries were sampled yet (the table was empty when its clustering was set)"
    if spread:
        return f"{', '.join(spread)} had no cut points (one value when sampled) and now holds several values"
    if outside < DRIFT_SHARE * live:
        return None
    return f"{outside / live:.0%} of the live rows lie outside the sampled boundaries (resampled from {DRIFT_SHARE:.0%})"


@dataclass(frozen=True)
class KeyOverlap:
    """How well one clustering key is clustered: the average number of fragments a point filter on it
    reads (``depth``) and the expected share of fragments it skips (``skipped``)."""

    column: str
    depth: float
    skipped: float


@dataclass(frozen=True)
class ClusteringStats:
    """``Table.stats().clustering``: the keys, how many fragments are clustered, and per key the overlap."""

    columns: tuple[str, ...]
    curve: str
    fragments: int
    clustered_fragments: int
    #: Sorted runs (the fragments one clustering rewrite wrote) plus unclustered fragments.
    runs: int
    keys: tuple[KeyOverlap, ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "curve": self.curve,
            "fragments": self.fragments,
            "clustered_fragments": self.clustered_fragments,
            "runs": self.runs,
            "keys": {k.column: {"depth": round(k.depth, 3), "skipped": round(k.skipped, 3)} for k in self.keys},
        }

    def describe(self) -> str:
        per = ", ".join(f"{k.column}: depth {k.depth:.2f}, {k.skipped:.0%} skipped" for k in self.keys)
        return (
            f"clustering {self.curve} on {', '.join(self.columns)}: {self.clustered_fragments}/{self.fragments} fragments "
            f"clustered in {self.runs} runs; point filters {per}"
        )


def overlap(clustering: Clustering, fragments: Iterable[Fragment], schema: pa.Schema | None = None) -> ClusteringStats:
    """The clustering metric over ``fragments`` (from their zone maps and cluster ranges; no I/O)."""
    extents: list[list[tuple[int, int]]] = []
    clustered = 0
    runs: set[str] = set()
    key = clustering.key
    for f in fragments:
        if f.cluster is not None and f.cluster.key == key:
            clustered += 1
            runs.add(f.cluster.run)
        else:
            runs.add(f"fragment {f.id}")
        extents.append(clustering.extents(f, schema))
    return overlap_of(clustering, extents, clustered, len(runs))


def overlap_of(
    clustering: Clustering, extents: Sequence[Sequence[tuple[int, int]]], clustered: int, runs: int
) -> ClusteringStats:
    """The metric from each fragment's ``Clustering.extents`` (one per fragment, in any order), how many
    fragments are clustered and how many runs there are: what ``overlap`` and the planner (which
    collects the same while it plans) both report."""
    keys = []
    for k, column in enumerate(clustering.columns):
        depth, skipped = curve.overlap_stats([e[k] for e in extents])
        keys.append(KeyOverlap(column, depth, skipped))
    return ClusteringStats(clustering.columns, clustering.curve, len(extents), clustered, runs, tuple(keys))


def clustering_stats(manifest: Manifest) -> ClusteringStats | None:
    """The clustering metric of a version (None: the table has no clustering keys)."""
    clustering = Clustering.from_config(manifest.config, f"version {manifest.version}")
    return None if clustering is None else overlap(clustering, manifest.fragments, manifest.schema)


__all__ = [
    "CONFIG_KEY",
    "Clustering",
    "ClusteringStats",
    "KeyOverlap",
    "choose",
    "clustering_stats",
    "drifted",
    "overlap",
    "overlap_of",
]
