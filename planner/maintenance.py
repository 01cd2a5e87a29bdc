"""Planning a table's maintenance: what it needs (compaction, index updates, cleanup, WAL retirement) and why. Pure: no I/O.

From the policy (configs/maintenance.yaml, then the catalog's ``maintenance.*`` properties) and
what the driver listed (manifest, versions, sealed WAL segments), a ``TablePlan`` of actions in the
order they run, each with its reason: ``compact`` (when ``plan_compaction`` finds groups; the plan
is carried), ``update_index`` (an index with live fragments no segment covers and no group
rewrites: a rewritten group's output is indexed by the compaction itself), ``retire_wal`` (sealed
segments whose every transaction is committed, sealed longer ago than the retention) and
``cleanup`` (versions superseded longer ago than the retention).

The driver (``lamina.maintenance``) executes a plan's actions through the existing library calls,
which plan their own work again from the latest version: a plan made here is what ``--dry-run``
prints, and what a run does when nothing commits in between.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from lamina.cleanup import MIN_RETENTION
from lamina.clustering import ClusteringStats, clustering_stats
from lamina.errors import InvalidConfig
from lamina.manifest import Manifest
from lamina.planner.options import FALSE_WORDS, TRUE_WORDS, CompactionOptions, typed_value
from lamina.planner.plan import CompactionPlan, plan_compaction
from lamina.wal import watermark_key

#: The actions, in the order a plan runs them: rewrites first (their outputs are indexed by the
#: compaction), cleanup last (it removes what the other actions left behind, after the retention).
COMPACT, UPDATE_INDEX, RETIRE_WAL, CLEANUP = "compact", "update_index", "retire_wal", "cleanup"
ACTIONS = (COMPACT, UPDATE_INDEX, RETIRE_WAL, CLEANUP)

#: Catalog properties (of a namespace or a table) that override the policy start with this.
PROPERTY_PREFIX = "maintenance."

_DAY = 86_400.0


def _seconds(s: float) -> str:
    """``7d``, ``36h``, ``90m``, ``42s``: a duration as a reason prints it."""
    for unit, n in (("d", _DAY), ("h", 3600.0), ("m", 60.0)):
        if s >= n and s % n == 0:
            return f"{int(s // n)}{unit}"
    return f"{s:g}s"


def _span(ids: Sequence[int]) -> str:
    ids = list(ids)
    return f"{ids[0]}..{ids[-1]}" if len(ids) > 3 else ",".join(map(str, ids))


@dataclass(frozen=True)
class MaintenancePolicy:
    """What maintenance may do to a table, and with which targets (every key of configs/maintenance.yaml)."""

    #: Compaction options (the ``compaction:`` keys of configs/compaction.yaml).
    compaction: CompactionOptions = field(default_factory=CompactionOptions)
    #: Off switches, one per action.
    compact: bool = True
    cleanup: bool = True
    retire_wal: bool = True
    #: Which indices are updated: True (all), False (none), or a tuple of index names.
    update_indices: bool | tuple[str, ...] = True
    #: Versions superseded longer ago than this are removed (with files no version needs), and
    #: applied WAL segments sealed longer ago than this are retired.
    retention_seconds: float = 7 * _DAY
    #: A retention under one hour is refused unless this is false (nothing reads or writes the table meanwhile).
    enforce_retention: bool = True

    def __post_init__(self) -> None:
        if not isinstance(self.compaction, CompactionOptions):
            raise InvalidConfig(f"maintenance option compaction must be a mapping of compaction options, got {self.compaction!r}")
        for name in ("compact", "cleanup", "retire_wal", "enforce_retention"):
            if not isinstance(getattr(self, name), bool):
                raise InvalidConfig(f"maintenance option {name}={getattr(self, name)!r} must be true or false")
        ui = self.update_indices
        if isinstance(ui, list):
            object.__setattr__(self, "update_indices", ui := tuple(ui))
        if not isinstance(ui, bool) and not (isinstance(ui, tuple) and all(isinstance(n, str) and n for n in ui)):
            raise InvalidConfig(f"maintenance option update_indices={ui!r} must be true, false or a list of index names")
        r = self.retention_seconds
        if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < float("inf"):
            raise InvalidConfig(f"maintenance option retention_seconds={r!r} must be a number of seconds >= 0")
        if self.enforce_retention and r < MIN_RETENTION.total_seconds():
            raise InvalidConfig(
                f"maintenance option retention_seconds={r!r} is below the {MIN_RETENTION} safety floor of cleanup: a write "
                f"in progress or a reader of a recent version could lose its files. Use a longer retention, or set "
                f"enforce_retention to false where nothing reads or writes the tables meanwhile"
            )

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> MaintenancePolicy:
        """A policy from configs/maintenance.yaml's keys (missing keys keep their defaults)."""
        if not isinstance(values, Mapping):
            raise InvalidConfig(f"a maintenance policy is a mapping of options, got {type(values).__name__}")
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise InvalidConfig(f"unknown maintenance option(s) {unknown}; known: {', '.join(sorted(names))}")
        values = dict(values)
        if "compaction" in values:
            comp = values["compaction"]
            if comp is None:
                comp = {}
            if not isinstance(comp, Mapping):
                raise InvalidConfig(f"maintenance option compaction must be a mapping of compaction options, got {comp!r}")
            values["compaction"] = CompactionOptions.from_mapping(dict(comp))
        return cls(**values)

    def with_properties(self, properties: Mapping[str, Any], table: str = "") -> MaintenancePolicy:
        """This policy overridden by catalog properties ``maintenance.<key>`` (and
        ``maintenance.compaction.<key>``); other properties are ignored. Values may be strings
        (``"false"``, ``"3600"``, ``"a,b"``). A bad key or value raises ``InvalidConfig`` naming
        ``table`` and the property."""
        where = f"table {table}" if table else "the table"
        changes: dict[str, Any] = {}
        compaction: dict[str, Any] = {}
        for key in sorted(properties):
            if not key.startswith(PROPERTY_PREFIX):
                continue
            name, raw = key[len(PROPERTY_PREFIX) :], properties[key]

            def bad(expected: str, key: str = key, raw: Any = raw) -> InvalidConfig:
                return InvalidConfig(
                    f"{where}: property {key}={raw!r} must be {expected}; fix the property on the table or its namespace"
                )

            if name.startswith("compaction."):
                option = name[len("compaction.") :]
                known = {f.name: f for f in fields(CompactionOptions)}
                if option not in known:
                    raise InvalidConfig(f"{where}: property {key} names no compaction option; known: {', '.join(sorted(known))}")
                compaction[option] = typed_value(
                    raw,
                    getattr(self.compaction, option) if option != "max_concurrency" else 1,
                    bad,
                    nullable=option == "max_concurrency",
                )
            elif name in ("compact", "cleanup", "retire_wal", "enforce_retention"):
                changes[name] = typed_value(raw, True, bad)
            elif name == "retention_seconds":
                changes[name] = typed_value(raw, 1.0, bad)
            elif name == "update_indices":
                if isinstance(raw, (bool, list, tuple)):
                    changes[name] = tuple(raw) if isinstance(raw, list) else raw
                elif isinstance(raw, str) and raw.strip().lower() in TRUE_WORDS + FALSE_WORDS:
                    changes[name] = raw.strip().lower() in TRUE_WORDS
                elif isinstance(raw, str) and raw.strip():
                    changes[name] = tuple(n.strip() for n in raw.split(",") if n.strip())
                else:
                    raise bad("true, false or a comma-separated list of index names")
            else:
                raise InvalidConfig(
                    f"{where}: property {key} names no maintenance option; known: "
                    f"{', '.join(PROPERTY_PREFIX + f.name for f in fields(self))}, "
                    f"{PROPERTY_PREFIX}compaction.<option>"
                )
        try:
            if compaction:
                changes["compaction"] = self.compaction.with_overrides(**compaction)
            return dataclasses.replace(self, **changes) if changes else self
        except InvalidConfig as e:
            raise InvalidConfig(f"{where}: the maintenance.* properties give an invalid policy: {e}") from None

    def indices_to_update(self, names: Sequence[str]) -> list[str]:
        """Which of the table's indices ``names`` this policy updates."""
        if self.update_indices is True:
            return list(names)
        if self.update_indices is False:
            return []
        return [n for n in names if n in self.update_indices]

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["compaction"] = self.compaction.to_dict()
        if isinstance(self.update_indices, tuple):
            d["update_indices"] = list(self.update_indices)
        return d


@dataclass(frozen=True)
class WalSegment:
    """A WAL segment as the driver listed it: sealed (its seal's time and transaction count) or not."""

    shard: int
    segment: int
    #: When the seal was written (seconds since the epoch); None: not sealed (or already retired).
    sealed_at: float | None = None
    #: The seal's transaction count; None when the driver did not read it.
    transactions: int | None = None


@dataclass(frozen=True)
class Action:
    """One thing maintenance does to a table, and why."""

    kind: str  # one of ACTIONS
    reason: str
    #: The index of an ``update_index``.
    target: str | None = None

    @property
    def label(self) -> str:
        return f"{self.kind} {self.target}" if self.target else self.kind

    def to_dict(self) -> dict[str, Any]:
        return {"action": self.kind, "target": self.target, "reason": self.reason}


@dataclass(frozen=True)
class TablePlan:
    """What maintenance will do to one table at ``version``, action by action."""

    table: str
    version: int
    actions: tuple[Action, ...]
    policy: MaintenancePolicy
    #: The compaction a ``compact`` action runs (None without one).
    compaction: CompactionPlan | None = None
    #: Versions a ``cleanup`` expires.
    expired_versions: tuple[int, ...] = ()
    #: (shard, segment) of every WAL segment a ``retire_wal`` removes.
    wal_segments: tuple[tuple[int, int], ...] = ()
    #: Things a policy switch turned off, or found with nothing to do, with why.
    notes: tuple[str, ...] = ()
    #: How clustered the table is on its clustering keys (None: it has none).
    clustering: ClusteringStats | None = None

    @property
    def needs_work(self) -> bool:
        return bool(self.actions)

    def action_labels(self) -> list[str]:
        return [a.label for a in self.actions]

    def describe(self) -> str:
        """What ``--dry-run`` prints for the table: each action and its reason."""
        head = f"{self.table} at version {self.version}: " + (", ".join(self.action_labels()) or "nothing to do")
        lines = [head]
        for a in self.actions:
            lines.append(f"  {a.label}: {a.reason}")
            if a.kind == COMPACT and self.compaction is not None:
                # the compaction plan itself: groups, row-group actions, and (tiered) each fragment's tier and trigger
                lines.extend(f"    {line}" for line in self.compaction.describe().splitlines()[1:])
        for n in self.notes:
            lines.append(f"  ({n})")
        if self.clustering is not None:
            lines.append(f"  {self.clustering.describe()}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "version": self.version,
            "actions": [a.to_dict() for a in self.actions],
            "compaction": self.compaction.to_dict() if self.compaction is not None else None,
            "expired_versions": list(self.expired_versions),
            "wal_segments": [list(s) for s in self.wal_segments],
            "notes": list(self.notes),
            "policy": self.policy.to_dict(),
            "clustering": self.clustering.to_dict() if self.clustering is not None else None,
        }


def expired_versions(versions: Sequence[tuple[int, float]], cutoff: float) -> list[int]:
    """The versions ``lamina.cleanup`` expires at ``cutoff``: a prefix of the history, each one
    superseded (its successor committed) before ``cutoff``; never the latest."""
    ordered = sorted(versions)
    out = []
    for (v, _), (_, successor_at) in zip(ordered, ordered[1:]):
        if successor_at >= cutoff:
            break
        out.append(v)
    return out


def plan_table(
    name: str,
    manifest: Manifest,
    versions: Sequence[tuple[int, float]],
    wal: Sequence[WalSegment],
    policy: MaintenancePolicy,
    now: float,
) -> TablePlan:
    """What ``name`` needs, decided from its latest ``manifest``, its ``versions`` on storage as
    ``(version, commit time in seconds)``, its WAL segments and ``policy``, at time ``now``."""
    actions: list[Action] = []
    notes: list[str] = []
    compaction: CompactionPlan | None = None
    rewritten: set[int] = set()
    #: The clustering metric: the clustering plan measures it while planning (no second pass over the
    #: fragments); without one (compaction off, or the table has no keys: no pass) it is measured below.
    clustering: ClusteringStats | None = None

    if policy.compact:
        compaction = plan_compaction(manifest, policy.compaction, name)
        clustering = compaction.clustering.now if compaction.clustering is not None else None
        if compaction.groups:
            why: dict[str, int] = {}
            for g in compaction.groups:
                for c in g.candidates:
                    why[c] = why.get(c, 0) + 1
                rewritten.update(g.fragment_ids)
            actions.append(
                Action(
                    COMPACT,
                    f"{len(compaction.groups)} group(s): {compaction.fragments_before} -> "
                    f"{compaction.fragments_after} fragments "
                    f"({', '.join(f'{n} {c}' for c, n in sorted(why.items()))})",
                )
            )
        else:
            compaction = None
    elif manifest.fragments:
        notes.append("compact: off by policy")

    names = [ix.name for ix in manifest.indices]
    chosen = policy.indices_to_update(names)
    live = manifest.fragment_map()
    for ix in manifest.indices:
        if ix.name not in chosen:
            notes.append(f"update_index {ix.name}: off by policy")
            continue
        covered = ix.coverage(live)
        missing = [f.id for f in manifest.fragments if f.id not in covered]
        left = [fid for fid in missing if fid not in rewritten]
        if left:
            actions.append(
                Action(
                    UPDATE_INDEX,
                    f"{len(left)} of {len(live)} live fragment(s) not covered (fragments [{_span(left)}])",
                    target=ix.name,
                )
            )
        elif missing:
            notes.append(
                f"update_index {ix.name}: the {len(missing)} uncovered fragment(s) are compacted, and the "
                f"compaction indexes its outputs"
            )

    retiring: list[tuple[int, int]] = []
    if policy.retire_wal:
        for s in sorted(wal, key=lambda s: (s.shard, s.segment)):
            if s.sealed_at is None or s.transactions is None or now - s.sealed_at < policy.retention_seconds:
                continue
            if manifest.wal_watermarks.get(watermark_key(s.shard, s.segment), 0) >= s.transactions:
                retiring.append((s.shard, s.segment))
        if retiring:
            by_shard: dict[int, list[int]] = {}
            for shard, seg in retiring:
                by_shard.setdefault(shard, []).append(seg)
            shown = "; ".join(f"shard {sh}: {_span(segs)}" for sh, segs in sorted(by_shard.items()))
            actions.append(
                Action(
                    RETIRE_WAL,
                    f"{len(retiring)} sealed WAL segment(s) fully committed and sealed more "
                    f"than {_seconds(policy.retention_seconds)} ago ({shown})",
                )
            )

    expired: list[int] = []
    if policy.cleanup:
        expired = expired_versions(versions, now - policy.retention_seconds)
        if expired:
            actions.append(
                Action(
                    CLEANUP,
                    f"{len(expired)} of {len(versions)} version(s) superseded more than "
                    f"{_seconds(policy.retention_seconds)} ago (versions [{_span(expired)}])",
                )
            )
    elif len(versions) > 1:
        notes.append("cleanup: off by policy")

    return TablePlan(
        name,
        manifest.version,
        tuple(actions),
        policy,
        compaction,
        tuple(expired),
        tuple(retiring),
        tuple(notes),
        clustering if clustering is not None else clustering_stats(manifest),
    )


__all__ = [
    "MaintenancePolicy",
    "WalSegment",
    "Action",
    "TablePlan",
    "plan_table",
    "expired_versions",
    "ACTIONS",
    "COMPACT",
    "UPDATE_INDEX",
    "RETIRE_WAL",
    "CLEANUP",
    "PROPERTY_PREFIX",
]
