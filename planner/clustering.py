"""The clustering compaction policy: sorted runs merged by size tier, so a table fed by appends ends up
sorted along its clustering curve while each row is rewritten O(log) times. Pure: no I/O.

A table with clustering keys (``lamina.clustering``) is compacted by this policy instead of binpack or
tiered. Its units are *sorted runs*: the fragments one clustering rewrite wrote (``Fragment.cluster``
under the table's current key; their curve ranges are disjoint), and every other fragment on its own
(level 0: appended, flushed by the WAL, or clustered under older keys or boundaries).

    size of a unit   its live rows;  tier t = ⌊log_r(rows)⌋   (r = cluster_tier_ratio)
    size             >= w (cluster_merge_width) units of one tier merge, w at a time, into one sorted run:
                     its rows sorted along the curve, cut into fragments of the targets, disjoint ranges
    cascade          the output sits at least a tier up (w >= r units of >= r^t rows hold >= r^(t+1)),
                     where it may complete another set of w: merged in the same group
    deletions        a fragment at materialize_deletions_threshold is rewritten alone (in its run; an
                     unclustered one sorted into a run of its own) unless a merge takes it this pass;
                     so is one written in an earlier schema when converge_schemas asks for today's
                     (every clustering task writes today's schema: merged sources converge anyway)
    full             a unit holding cluster_max_bytes or more never merges again: a group's task
                     sorts its rows in memory, so this bounds a task's memory
    ──► groups of fragment ids (table order; members need not be adjacent: a group's outputs
        take the place of its first source), mode ``cluster``, a reason each

Write amplification: a row merged at tier t lands at tier >= t + 1, so a row first written in a unit of
``s0`` rows is rewritten at most ⌈log_r(N / s0)⌉ times before its run holds the table's N rows (or
reaches cluster_max_bytes), plus once more for each materialization of deletions.

Overlap: between passes there are at most w - 1 units per tier, so a point filter on a key reads
from at most (w - 1) · tiers runs, and from each run only the fragments whose curve range reaches the
key's value (for a run of m fragments on d keys, about m^(1-1/d) of them; m for a linear key's
other columns).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lamina.clustering import Clustering, ClusteringStats, overlap_of
from lamina.curve import CELL_BITS
from lamina.manifest import Fragment
from lamina.planner.eligibility import DELETIONS, candidate_reason
from lamina.planner.options import CompactionOptions

#: The compaction mode of a clustering group (``CompactionGroup.mode``).
CLUSTER = "cluster"


@dataclass
class _Unit:
    """A sorted run (or one unclustered fragment): what merges as a whole."""

    run: str | None  # the run's id; None for a level-0 fragment
    positions: list[int]  # positions of its fragments in table order
    rows: int
    bytes: int
    texts: list[str] = field(default_factory=list)
    merged: bool = False

    def tier(self, r: int) -> int:
        """⌊log_r(rows)⌋, in integers: ``math.log(243, 3)`` is 4.999…, which would put a run of 3^5
        rows a tier low, where it merges again with smaller units."""
        t, size = 0, r
        while size <= self.rows:
            t, size = t + 1, size * r
        return t


@dataclass(frozen=True)
class ClusterGroup:
    """One clustering task: the fragments whose rows it sorts together, and why."""

    fragment_ids: tuple[int, ...]
    reason: str
    #: The sorted run the outputs continue (a deletion rewrite of one run's fragment), else None: a new run.
    run: str | None = None


@dataclass(frozen=True)
class ClusterReport:
    """What the clustering policy saw and predicts: ``--dry-run`` prints ``describe_lines``."""

    columns: tuple[str, ...]
    curve: str
    #: The clustering metric of the version planned (``Table.stats().clustering``): runs, depth per key now.
    now: ClusteringStats
    level0_fragments: int
    runs_after: int
    full_runs: int
    #: Per key: overlap depth predicted after this pass (fragments a point filter reads on average).
    depth_after: tuple[float, ...]
    bytes_rewritten: int
    waiting: tuple[str, ...] = ()

    @property
    def runs_before(self) -> int:
        return self.now.runs

    @property
    def depth_before(self) -> tuple[float, ...]:
        return tuple(k.depth for k in self.now.keys)

    def to_dict(self) -> dict[str, Any]:
        return {
            "columns": list(self.columns),
            "curve": self.curve,
            "runs_before": self.runs_before,
            "level0_fragments": self.level0_fragments,
            "runs_after": self.runs_after,
            "full_runs": self.full_runs,
            "depth_before": {c: round(d, 3) for c, d in zip(self.columns, self.depth_before)},
            "depth_after_predicted": {c: round(d, 3) for c, d in zip(self.columns, self.depth_after)},
            "bytes_rewritten": self.bytes_rewritten,
            "waiting": list(self.waiting),
        }

    def describe_lines(self) -> list[str]:
        depth = ", ".join(f"{c} {a:.2f} -> {b:.2f}" for c, a, b in zip(self.columns, self.depth_before, self.depth_after))
        lines = [
            f"  clustering {self.curve} on {', '.join(self.columns)}: {self.runs_before} runs "
            f"({self.level0_fragments} unclustered fragments) -> {self.runs_after} runs; "
            f"rewrites {self.bytes_rewritten:,} bytes",
            f"  overlap depth (fragments a point filter reads), now -> predicted after this run: {depth}",
        ]
        if self.full_runs:
            lines.append(f"  {self.full_runs} runs hold cluster_max_bytes or more: they no longer merge")
        lines.extend(f"  {w}" for w in self.waiting)
        return lines


def _describe(units: list[_Unit]) -> str:
    level0 = sum(1 for u in units if u.run is None)
    runs = len(units) - level0
    parts = ([f"{runs} sorted runs"] if runs else []) + ([f"{level0} unclustered fragments"] if level0 else [])
    return " and ".join(parts)


def plan_clustering(
    fragments: Iterable[Fragment],
    clustering: Clustering,
    options: CompactionOptions,
    schema_id: int = 0,
    schema: pa.Schema | None = None,
) -> tuple[list[ClusterGroup], ClusterReport]:
    """The clustering groups of this pass and the report (``schema_id``, ``schema``: today's schema, through
    which zone maps of files in an earlier one are read). One pass over ``fragments``, keeping per fragment
    its id, size, run and zone-map cell extents."""
    r, w = options.cluster_tier_ratio, options.cluster_merge_width
    key = clustering.key
    ids: list[int] = []
    sizes: list[tuple[int, int]] = []
    extents: list[list[tuple[int, int]]] = []
    runs: dict[str, _Unit] = {}
    units: list[_Unit] = []
    deletion_units: list[ClusterGroup] = []
    for p, f in enumerate(fragments):
        ids.append(f.id)
        live_bytes = int(f.file_bytes * (f.live_rows / f.rows)) if f.rows else 0
        sizes.append((f.live_rows, live_bytes))
        extents.append(clustering.extents(f, schema))
        run = f.cluster.run if f.cluster is not None and f.cluster.key == key else None
        if run is None:
            units.append(_Unit(None, [p], f.live_rows, live_bytes))
        elif run in runs:
            u = runs[run]
            u.positions.append(p)
            u.rows += f.live_rows
            u.bytes += live_bytes
        else:
            runs[run] = _Unit(run, [p], f.live_rows, live_bytes)
            units.append(runs[run])
        why = candidate_reason(f, options, schema_id)
        if why == DELETIONS:  # rewritten alone unless a merge takes it this pass
            why = (
                f"{f.deleted_rows / f.rows:.0%} of its rows deleted "
                f"(materialize_deletions_threshold {options.materialize_deletions_threshold:g})"
            )
        elif options.converge_schemas and f.schema_id != schema_id:
            why = f"schema v{f.schema_id} vs v{schema_id} (converge_schemas)"
        else:
            why = None
        if why is not None:
            deletion_units.append(
                ClusterGroup(
                    (f.id,), why + "; " + ("its run's order kept" if run is not None else "sorted into a run of its own"), run
                )
            )
    level0 = sum(1 for u in units if u.run is None)
    cap = options.cluster_max_bytes
    full = [u for u in units if u.bytes >= cap]
    open_units = [u for u in units if u.bytes < cap]

    grid = 2**CELL_BITS
    d = len(clustering.columns)
    now = overlap_of(clustering, extents, sum(len(u.positions) for u in units if u.run is not None), len(units))
    before = [k.depth for k in now.keys]
    trigger = options.cluster_depth_trigger
    quiet = trigger > 0 and max(before, default=0.0) <= trigger
    # Merge w units of one tier at a time, smallest tiers first, until no tier holds w (a tier whose
    # chunks all exceed cluster_max_bytes is "stuck": it stays as it is). Each round rebuilds the list
    # once, so a plan over n units costs O(n) per tier, not per merge.
    stuck: set[int] = set()
    while not quiet:
        by_tier: dict[int, list[_Unit]] = {}
        for u in open_units:
            by_tier.setdefault(u.tier(r), []).append(u)
        ready = sorted(t for t, us in by_tier.items() if len(us) >= w and t not in stuck)
        if not ready:
            break
        t = ready[0]
        peers = sorted(by_tier[t], key=lambda u: u.positions[0])
        gone: set[int] = set()
        made: list[_Unit] = []
        for i in range(0, len(peers) - w + 1, w):
            chunk = peers[i : i + w]
            if sum(u.bytes for u in chunk) > cap:
                chunk = _fitting(chunk, cap)
                if len(chunk) < 2:
                    continue
            text = f"{_describe(chunk)} of tier {t} (~{r}^{t} rows each; cluster_merge_width {w})"
            made.append(
                _Unit(
                    f"new-{t}-{i}",
                    sorted(p for u in chunk for p in u.positions),
                    sum(u.rows for u in chunk),
                    sum(u.bytes for u in chunk),
                    [x for u in chunk for x in u.texts] + [text],
                    merged=True,
                )
            )
            gone.update(id(u) for u in chunk)
        if not made:
            stuck.add(t)  # every chunk of this tier exceeds the cap on its own: nothing of it can merge
            continue
        open_units = [u for u in open_units if id(u) not in gone]
        for unit in made:
            (full if unit.bytes >= cap else open_units).append(unit)
    groups: list[ClusterGroup] = []
    merged_positions: set[int] = set()
    for u in sorted((u for u in open_units + full if u.merged), key=lambda u: u.positions[0]):
        merged_positions.update(u.positions)
        groups.append(
            ClusterGroup(
                tuple(ids[p] for p in u.positions),
                "merges " + "; then ".join(dict.fromkeys(u.texts)) + f" into one sorted run ({clustering.curve})",
            )
        )
    where = {fid: p for p, fid in enumerate(ids)}
    groups.extend(g for g in deletion_units if where[g.fragment_ids[0]] not in merged_positions)
    groups.sort(key=lambda g: where[g.fragment_ids[0]])

    # The report: depth now, and predicted after the pass (a merged run of m fragments over d keys
    # spreads over about m^(1-1/d) fragments per key value; one key of a linear curve: 1).
    after = list(before)
    rewritten = 0
    for g in groups:
        positions = [where[fid] for fid in g.fragment_ids]
        rows = sum(sizes[p][0] for p in positions)
        size = sum(sizes[p][1] for p in positions)
        rewritten += sum(sizes[p][1] for p in positions)
        m = max(1, math.ceil(max(rows / options.target_rows_per_fragment, size / options.target_bytes_per_fragment)))
        for k in range(d):
            after[k] -= sum((extents[p][k][1] - extents[p][k][0] + 1) / grid for p in positions)
            after[k] += 1.0 if clustering.curve == "linear" else m ** (1 - 1 / d)
    waiting = [f"overlap depth {max(before):.2f} is within cluster_depth_trigger {trigger:g}: no runs merge"] if quiet else []
    tiers: dict[int, int] = {}
    for u in open_units:
        if not u.merged:
            tiers[u.tier(r)] = tiers.get(u.tier(r), 0) + 1
    for t, n in sorted(tiers.items()):
        waiting.append(f"tier {t}: {n} of {w} units wait for more of their size")
    report = ClusterReport(
        clustering.columns,
        clustering.curve,
        now,
        level0,
        len(open_units) + len(full),
        len(full),
        tuple(max(0.0, a) for a in after),
        rewritten,
        tuple(waiting),
    )
    return groups, report


def _fitting(chunk: list[_Unit], cap: int) -> list[_Unit]:
    """The first units of ``chunk`` (smallest first) whose bytes stay under ``cap``."""
    out: list[_Unit] = []
    total = 0
    for u in sorted(chunk, key=lambda u: u.bytes):
        if total + u.bytes > cap:
            break
        out.append(u)
        total += u.bytes
    return sorted(out, key=lambda u: u.positions[0])


__all__ = ["CLUSTER", "ClusterGroup", "ClusterReport", "plan_clustering"]
