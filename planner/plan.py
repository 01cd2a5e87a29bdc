"""Planning a compaction: a manifest and options in, a serializable plan out. Pure: no I/O.

The candidates (``eligibility.candidate_reason``) are grouped by the policy (``binpack``: runs of
adjacent candidates packed up to the targets, lone fragments without deletions skipped; ``tiered``:
``lamina.planner.tiered``), then each group gets a mode and reason (``eligibility.choose_mode``) and each
source row group an action with its reason (``eligibility.actions``): a ``CompactionPlan`` in table
order. The steps after planning are drawn in docs/ARCHITECTURE.md ("Data flow").

Each group also names the schema its output is written in (``eligibility.output_schema``): today's,
or the one earlier schema its sources share when it copies their chunks. Rows of a fragment written in
another schema are re-encoded into it (the group's reason says ``schema v3 vs v5``); fragments of
earlier schemas that no group takes stay as they are, read through their schema, unless
``converge_schemas`` makes every one of them a candidate.

Workers execute a group's actions as planned. They decide two things only, both by a fixed
rule: each ``copy_if_clean`` row group (a large row group of a fragment with a deletion file:
the manifest records how many rows are deleted, not where) becomes a copy when the deletion
file puts no deleted row in it, else a re-encode (``CompactionGroup.resolve``); and when a
source turns out not to be copyable, every row group is re-encoded
(``CompactionGroup.as_full_rewrite``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from lamina.clustering import Clustering
from lamina.manifest import Fragment, Manifest, find_fragments
from lamina.planner.bin_packing import pack_adjacent
from lamina.planner.clustering import CLUSTER, ClusterReport, plan_clustering
from lamina.planner.eligibility import (
    COPY,
    COPY_IF_CLEAN,
    ENCODE,
    FULL_REWRITE,
    WHY_LARGE,
    WHY_SMALL,
    Offsets,
    RowGroupAction,
    actions,
    candidate_reason,
    choose_mode,
    encode_all,
    output_schema,
    resolve,
    row_group_actions,
    schema_text,
)
from lamina.planner.options import TIERED, CompactionOptions
from lamina.planner.tiered import TierReport, plan_tiers


@dataclass(frozen=True)
class CompactionGroup:
    """Adjacent fragments rewritten into one new fragment."""

    index: int
    fragment_ids: tuple[int, ...]
    mode: str
    reason: str
    rows: int  # live rows
    bytes: int  # data file bytes read
    row_groups: int
    candidates: tuple[str, ...]  # why each fragment was picked ("small", "deletions")
    #: Every source row group in output order: copied as it is or re-encoded (none for a ``cluster`` group).
    actions: tuple[RowGroupAction, ...] = ()
    #: Fragments it writes (a ``cluster`` group cuts its sorted rows into several at the targets).
    outputs: int = 1
    #: A ``cluster`` group that rewrites one fragment of a sorted run: the run its output stays in.
    cluster_run: str | None = None
    #: The schema its output is written in (``Manifest.schema_registry``): today's, or the one earlier
    #: schema every source shares when the group copies their chunks (``eligibility.output_schema``).
    schema_id: int = 0

    def as_full_rewrite(self, why: str) -> CompactionGroup:
        """This group with every row group re-encoded: what a worker runs when a copy is refused."""
        return dataclasses.replace(self, mode=FULL_REWRITE, reason=f"fallback: {why}", actions=encode_all(self.actions))

    def resolve(self, fragments: Sequence[Fragment], deleted: Sequence[Offsets]) -> CompactionGroup:
        """This group with each ``copy_if_clean`` row group made a copy or a re-encode, from the
        sorted deleted offsets of each of its ``fragments`` (eligibility.resolve)."""
        return dataclasses.replace(self, actions=resolve(self.actions, fragments, deleted))

    def describe_actions(self) -> str:
        """``4 copied, 1 re-encoded (10:0)``: counts (and row groups to copy if clean), and which row
        groups (fragment:row groups) are re-encoded in a group that also copies."""
        copied = sum(1 for a in self.actions if a.action == COPY)
        maybe = sum(1 for a in self.actions if a.action == COPY_IF_CLEAN)
        encoded = len(self.actions) - copied - maybe
        text = f"{copied} copied, " + (f"{maybe} copied if clean, " if maybe else "") + f"{encoded} re-encoded"
        if (copied or maybe) and encoded:
            runs: list[list[int]] = []  # [source, first, last]
            for a in self.actions:
                if a.action != ENCODE:
                    continue
                if runs and runs[-1][0] == a.source and runs[-1][2] == a.row_group - 1:
                    runs[-1][2] = a.row_group
                else:
                    runs.append([a.source, a.row_group, a.row_group])
            shown = [f"{self.fragment_ids[s]}:{a}" + (f"-{b}" if b != a else "") for s, a, b in runs]
            text += f" ({', '.join(shown[:20])}{', ...' if len(shown) > 20 else ''})"
        return text

    def row_group_lines(self, limit: int | None = None) -> list[str]:
        """Per fragment whose row groups do not all get the same plain action (copied because large,
        re-encoded because small), its row groups in runs of one action and reason:
        ``fragment 12: rg 0-2 copy: large; rg 3 encode: deleted (12 rows)``; at most ``limit`` lines."""
        per: dict[int, list[list[Any]]] = {}  # source -> [[first, last, action, why]]
        for a in self.actions:
            runs = per.setdefault(a.source, [])
            if runs and runs[-1][1] == a.row_group - 1 and runs[-1][2:] == [a.action, a.why]:
                runs[-1][1] = a.row_group
            else:
                runs.append([a.row_group, a.row_group, a.action, a.why])
        plain = {(COPY, WHY_LARGE), (ENCODE, WHY_SMALL)}
        notable = {s: runs for s, runs in per.items() if len(runs) > 1 or (runs[0][2], runs[0][3].split(" ")[0]) not in plain}
        lines: list[str] = []
        for source, runs in notable.items():
            if limit is not None and len(lines) == limit:
                lines.append(f"... ({len(notable) - limit} more fragments)")
                break
            parts = [f"rg {a}{f'-{b}' if b != a else ''} {action}" + (f": {why}" if why else "") for a, b, action, why in runs]
            lines.append(f"fragment {self.fragment_ids[source]}: " + "; ".join(parts))
        return lines

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["fragment_ids"] = list(self.fragment_ids)
        d["candidates"] = list(self.candidates)
        d["actions"] = [[a.action, self.fragment_ids[a.source], a.row_group] for a in self.actions]
        if self.mode == CLUSTER:
            d.pop("actions")
        else:  # the clustering policy's fields
            d.pop("outputs")
            d.pop("cluster_run")
        d["row_group_plan"] = self.row_group_lines()
        return d


@dataclass(frozen=True)
class CompactionPlan:
    table: str
    read_version: int
    options: CompactionOptions
    groups: tuple[CompactionGroup, ...]
    fragments_before: int
    rows_before: int
    #: Candidates left alone, with why: [(fragment id, reason)].
    skipped: tuple[tuple[int, str], ...] = field(default_factory=tuple)
    #: The tiered policy's reasons, fragment by fragment (None under binpack).
    tiers: TierReport | None = None
    #: The groups reached ``options.max_plan_fragments``: more candidates wait for the next run.
    limited: bool = False
    #: The clustering policy's view (a table with clustering keys), else None.
    clustering: ClusterReport | None = None
    #: Today's schema (``Manifest.schema_id``).
    schema_id: int = 0
    #: Fragments written in earlier schemas, per schema: (schema id, fragments the plan read, of them
    #: re-encoded into today's schema by its groups). Empty for a table whose schema never changed.
    earlier: tuple[tuple[int, int, int], ...] = ()

    @property
    def fragments_after(self) -> int:
        return self.fragments_before - sum(len(g.fragment_ids) for g in self.groups) + sum(g.outputs for g in self.groups)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "options": self.options.to_dict(),
            "fragments_before": self.fragments_before,
            "fragments_after": self.fragments_after,
            "rows_before": self.rows_before,
            "groups": [g.to_dict() for g in self.groups],
            "skipped": [list(s) for s in self.skipped],
            "limited": self.limited,
            "schema_id": self.schema_id,
            "earlier_schemas": [{"schema_id": s, "fragments": n, "reencoded": r} for s, n, r in self.earlier],
            **({"tiers": self.tiers.to_dict()} if self.tiers is not None else {}),
            **({"clustering": self.clustering.to_dict()} if self.clustering is not None else {}),
        }

    def describe(self) -> str:
        """The plan as ``--dry-run`` prints it: per group its mode and reason, and per fragment
        whose row groups are not all plainly copied or re-encoded, what each gets and why."""
        modes: dict[str, int] = {}
        for g in self.groups:
            modes[g.mode] = modes.get(g.mode, 0) + 1
        lines = [
            f"plan for {self.table} at version {self.read_version}: {len(self.groups)} groups "
            f"({', '.join(f'{n} {m}' for m, n in sorted(modes.items())) or 'nothing to do'}), "
            f"{self.fragments_before} -> {self.fragments_after} fragments",
        ]
        for g in self.groups:
            ids = g.fragment_ids
            span = f"{ids[0]}..{ids[-1]}" if len(ids) > 3 else ",".join(map(str, ids))
            lines.append(
                f"  group {g.index:4d}: {g.mode:12s} reason={g.reason:24s} fragments [{span}] ({len(ids)}) "
                f"rows={g.rows:,} bytes={g.bytes:,}"
            )
            if g.mode == CLUSTER:
                lines.append(f"{'':14s}sorts its rows along the curve into ~{g.outputs} fragments")
                continue
            if g.schema_id != self.schema_id:
                lines.append(
                    f"{'':14s}written in schema v{g.schema_id}, its sources' (chunks are copied only into their own "
                    f"schema; today's is v{self.schema_id})"
                )
            lines.append(f"{'':14s}row groups: {g.describe_actions()}")
            lines.extend(f"{'':16s}{line}" for line in g.row_group_lines(20))
            if self.tiers is not None:
                lines.append(f"{'':14s}trigger: {self.tiers.group_triggers[g.index]}")
        for fid, why in self.skipped:
            lines.append(f"  skipped fragment {fid}: {why}")
        if self.limited:
            lines.append(
                f"  plan limited to {self.options.max_plan_fragments:,} fragments (max_plan_fragments): "
                f"the fragments after group {len(self.groups) - 1} wait for the next run"
            )
        if self.earlier:
            lines.append(self._describe_earlier())
        if self.tiers is not None:
            lines.extend(self.tiers.describe_lines())
        if self.clustering is not None:
            lines.extend(self.clustering.describe_lines())
        return "\n".join(lines)

    def _describe_earlier(self) -> str:
        total = sum(n for _, n, _ in self.earlier)
        done = sum(r for _, _, r in self.earlier)
        per = ", ".join(f"v{s}: {n}" for s, n, _ in self.earlier)
        text = (
            f"  schemas: today's is v{self.schema_id}; {'at least ' if self.limited else ''}{total} "
            f"fragment{'' if total == 1 else 's'} written in earlier ones ({per}), read through them; "
            f"this run re-encodes {done} into v{self.schema_id}"
        )
        if self.options.converge_schemas:
            return text + " (converge_schemas: all of them, over as many runs as the targets take)"
        return text + " (those it compacts anyway; converge_schemas=true re-encodes every one)"


def _weights(f: Fragment) -> tuple[float, float]:
    live_share = f.live_rows / f.rows if f.rows else 0.0
    return float(f.live_rows), f.file_bytes * live_share


def _binpack(
    fragments: Iterable[Fragment], options: CompactionOptions, schema_id: int = 0
) -> tuple[list[list[tuple[Fragment, str]]], list[tuple[int, str]], bool]:
    """Groups (each member with why it is a candidate), skipped lone candidates, and whether the
    groups reached ``max_plan_fragments``, under the binpack policy: one pass over ``fragments``
    keeping only the run of candidates it is in (a version's fragments stream by, and those the plan
    does not take are not held), stopping once the groups hold ``max_plan_fragments``."""
    targets = (float(options.target_rows_per_fragment), float(options.target_bytes_per_fragment))
    groups: list[list[tuple[Fragment, str]]] = []
    skipped: list[tuple[int, str]] = []
    run: list[tuple[Fragment, str]] = []
    taken = 0

    def close_run() -> None:
        # Greedy left-to-right packing only starts a new group when the next fragment does not fit,
        # so a lone candidate could not have joined either neighbour's group: nothing is stranded
        # that a neighbour could take. Alone and without deletions, rewriting it gains nothing, unless
        # it is to be re-encoded into today's schema.
        nonlocal taken
        for g in pack_adjacent(run, lambda m: _weights(m[0]), targets):
            alone = g[0][0]
            if len(g) > 1 or alone.deletion is not None or (options.converge_schemas and alone.schema_id != schema_id):
                groups.append(g)
                taken += len(g)
            else:
                skipped.append((g[0][0].id, "alone: no adjacent fragment has room for it"))
        run.clear()

    for f in fragments:
        why = candidate_reason(f, options, schema_id)
        if why is not None:
            run.append((f, why))
            if len(run) < options.max_plan_fragments - taken:
                continue
        if run:
            close_run()
        if taken >= options.max_plan_fragments:
            kept, _ = _within(groups, options.max_plan_fragments)
            return kept, skipped, True
    close_run()
    kept, limited = _within(groups, options.max_plan_fragments)
    return kept, skipped, limited


def _within(groups: list[list[Any]], limit: int) -> tuple[list[list[Any]], bool]:
    """The first groups holding at most ``limit`` fragments (at least the first), and whether any was left out."""
    kept: list[list[Any]] = []
    held = 0
    for g in groups:
        if kept and held + len(g) > limit:
            return kept, True
        kept.append(g)
        held += len(g)
    return kept, False


def plan_compaction(manifest: Manifest, options: CompactionOptions, table: str = "") -> CompactionPlan:
    """The plan for ``manifest`` under ``options`` (``options.policy`` chooses binpack or tiered).
    Binpack streams over the version's fragments, holding the candidates it groups; tiered weighs
    every fragment against its neighbours, so it keeps a small unit per fragment (not the fragment)
    and then reads the fragments of its groups."""
    tiers: TierReport | None = None
    today = manifest.schema_id
    earlier = _Earlier(today, bool(manifest.schemas))
    clustering = Clustering.from_config(manifest.config, f"version {manifest.version}") if options.cluster else None
    if clustering is not None:
        return _plan_clustering(manifest, clustering, options, table, earlier)
    if options.policy == TIERED:
        all_groups, tiers = plan_tiers(earlier.count(manifest.fragments), options, today)
        id_groups, limited = _within(all_groups, options.max_plan_fragments)
        if limited:
            tiers = tiers.limited_to(len(id_groups), options.max_plan_fragments)
        found = find_fragments(manifest.fragments, (i for g in id_groups for i in g))
        groups = [[(found[i], candidate_reason(found[i], options, today) or "") for i in g] for g in id_groups]
        skipped: list[tuple[int, str]] = []
    else:
        groups, skipped, limited = _binpack(earlier.count(manifest.fragments), options, today)

    out = []
    for i, g in enumerate(groups):
        members = [f for f, _ in g]
        schema_id = output_schema(members, options, today)
        planned = row_group_actions(members, options, schema_id)
        mode, reason = choose_mode(members, options, planned, schema_id)
        earlier.reencoded(members, schema_id)
        out.append(
            CompactionGroup(
                index=i,
                fragment_ids=tuple(f.id for f in members),
                mode=mode,
                reason=reason,
                rows=sum(f.live_rows for f in members),
                bytes=sum(f.file_bytes for f in members),
                row_groups=sum(len(f.row_groups) for f in members),
                candidates=tuple(why for _, why in g),
                actions=tuple(actions(members, mode, options, planned, schema_id)),
                schema_id=schema_id,
            )
        )
    return _plan(manifest, options, table, out, earlier, skipped=tuple(skipped), tiers=tiers, limited=limited)


class _Earlier:
    """Counts the fragments of earlier schemas as the policy's one pass streams them by, and those
    the groups re-encode into today's schema (``CompactionPlan.earlier``)."""

    def __init__(self, schema_id: int, evolved: bool):
        self.schema_id, self.evolved = schema_id, evolved
        self.seen: dict[int, int] = {}
        self.done: dict[int, int] = {}

    def count(self, fragments: Iterable[Fragment]) -> Iterable[Fragment]:
        return self._counted(fragments) if self.evolved else fragments

    def _counted(self, fragments: Iterable[Fragment]) -> Iterator[Fragment]:
        for f in fragments:
            if f.schema_id != self.schema_id:
                self.seen[f.schema_id] = self.seen.get(f.schema_id, 0) + 1
            yield f

    def reencoded(self, members: Sequence[Fragment], output: int) -> None:
        if output == self.schema_id:
            for f in members:
                if f.schema_id != output:
                    self.done[f.schema_id] = self.done.get(f.schema_id, 0) + 1

    def report(self) -> tuple[tuple[int, int, int], ...]:
        return tuple((s, n, self.done.get(s, 0)) for s, n in sorted(self.seen.items()))


def _plan(
    manifest: Manifest, options: CompactionOptions, table: str, groups: list[CompactionGroup], earlier: _Earlier, **policy: Any
) -> CompactionPlan:
    """The plan of ``groups`` over ``manifest``, with the policy's own fields (``skipped``, ``tiers``, ...)."""
    return CompactionPlan(
        table=table or "",
        read_version=manifest.version,
        options=options,
        groups=tuple(groups),
        fragments_before=len(manifest.fragments),
        rows_before=manifest.rows,
        schema_id=manifest.schema_id,
        earlier=earlier.report(),
        **policy,
    )


def _plan_clustering(
    manifest: Manifest, clustering: Clustering, options: CompactionOptions, table: str, earlier: _Earlier
) -> CompactionPlan:
    """The plan of a table with clustering keys: the clustering policy's groups (lamina.planner.clustering).
    A clustering task re-encodes every row, so its output is in today's schema whatever its sources'."""
    today = manifest.schema_id
    planned, report = plan_clustering(earlier.count(manifest.fragments), clustering, options, today, manifest.schema)
    id_groups, limited = _within([list(g.fragment_ids) for g in planned], options.max_plan_fragments)
    found = find_fragments(manifest.fragments, (i for g in id_groups for i in g))
    out = []
    for i, g in enumerate(planned[: len(id_groups)]):
        members = [found[f] for f in g.fragment_ids]
        rows = sum(f.live_rows for f in members)
        live_bytes = sum(f.file_bytes * (f.live_rows / f.rows) if f.rows else 0 for f in members)
        outputs = max(1, -(-rows // options.target_rows_per_fragment), int(-(-live_bytes // options.target_bytes_per_fragment)))
        old = [f.schema_id for f in members if f.schema_id != today]
        earlier.reencoded(members, today)
        out.append(
            CompactionGroup(
                index=i,
                fragment_ids=g.fragment_ids,
                mode=CLUSTER,
                reason=g.reason if not old or g.reason.startswith("schema") else f"{g.reason}; {schema_text(old, today)}",
                rows=rows,
                bytes=sum(f.file_bytes for f in members),
                row_groups=sum(len(f.row_groups) for f in members),
                candidates=tuple(candidate_reason(f, options, today) or CLUSTER for f in members),
                outputs=outputs,
                cluster_run=g.run,
                schema_id=today,
            )
        )
    return _plan(manifest, options, table, out, earlier, limited=limited, clustering=report)
