"""Compaction options: every knob, its default and its bounds, validated before any work."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any

from lamina.errors import InvalidConfig

MiB = 1024 * 1024

#: Compaction policies (``CompactionOptions.policy``): which fragments are merged with which.
BINPACK = "binpack"  # every fragment below the target, packed with its neighbours up to it (lamina.planner.plan)
TIERED = "tiered"  # fragments merge with peers of their own size tier (lamina.planner.tiered)
POLICIES = (BINPACK, TIERED)


@dataclass(frozen=True)
class CompactionOptions:
    #: A fragment with fewer rows than this (and fewer bytes than the next) is a candidate.
    target_rows_per_fragment: int = 1_048_576
    #: Byte target of an output fragment (file size, compressed).
    target_bytes_per_fragment: int = 512 * MiB
    #: A fragment whose deleted share is at least this is rewritten to drop the deleted rows.
    materialize_deletions_threshold: float = 0.1
    #: Copy encoded column chunks without decoding when the eligibility rules allow it.
    enable_binary_copy: bool = True
    #: Row groups smaller than this are re-encoded (hybrid) rather than copied as they are.
    min_row_group_bytes: int = 1 * MiB
    #: Re-encode every fragment written in an earlier schema (``Table.add_columns``, ``drop_columns``,
    #: ``rename_column``, ``alter_column``) into today's, packed up to the targets like small ones, so the
    #: table converges over passes and reads no longer map old files. False: only fragments compacted
    #: anyway (small ones, deletions) are; larger ones stay in their schema, read through it.
    converge_schemas: bool = False
    #: Ranged reads of a source object on S3 are coalesced up to this many bytes per GET.
    read_batch_bytes: int = 64 * MiB
    #: Groups executed at once (None: the cluster's CPUs).
    max_concurrency: int | None = None
    #: Commit every N finished groups (0: one commit at the end).
    partial_commit_every: int = 0
    #: Ray retries of a group whose worker died.
    max_task_retries: int = 3
    #: Which fragments merge: "binpack" (every one below the target, packed up to it on every pass)
    #: or "tiered" (peers of one size tier; each row rewritten O(log) times: planner/tiered.py).
    policy: str = BINPACK
    #: tiered: a tier spans sizes within this factor of each other (tier k: 1/ratio^k to 1/ratio^(k-1) of the target).
    tier_ratio: int = 4
    #: tiered: adjacent fragments of one tier needed before they merge (at least tier_ratio, so the output moves up a tier).
    min_merge_width: int = 4
    #: tiered: when more fragments than this are below half the target, the smallest merge with a neighbour until not.
    max_fragments: int = 64
    #: A plan takes groups (in table order) until they hold this many fragments; the rest wait for the
    #: next run. Bounds a plan's memory (~1.2 KB a fragment) and a run's length on huge tables.
    max_plan_fragments: int = 100_000
    #: A table with clustering keys (``Table.set_clustering``) is compacted by the clustering policy
    #: (lamina.planner.clustering) whatever ``policy`` says; false: by ``policy``, unclustered.
    cluster: bool = True
    #: clustering: a sorted run of n live rows is in tier ⌊log_cluster_tier_ratio(n)⌋; cluster_merge_width runs of one
    #: tier merge (each row rewritten about log_ratio(table rows / rows appended at once) times). Lower than the tiered
    #: policy's 4: every run is one more place a point filter looks (3: 0.86 of files skipped at 2.0x written,
    #: 4: 0.83 at 1.6x; docs/BENCHMARKS.md, "Clustering").
    cluster_tier_ratio: int = 3
    cluster_merge_width: int = 3
    #: clustering: a group's source bytes stay under this (its task sorts the rows in memory: about 3x
    #: the decoded rows, which are 1-5x these bytes); a sorted run this large merges no more.
    cluster_max_bytes: int = 512 * MiB
    #: clustering: merge sorted runs only while some key's overlap depth (fragments a point filter reads on
    #: average, ``Table.stats().clustering``) is above this; 0: whenever the tier rules fire.
    cluster_depth_trigger: float = 0.0
    #: clustering: rows per row group of a sorted run's fragments. Each row group holds a slice of the
    #: curve, so its statistics skip it for a filter on a key even inside a fragment that is read.
    cluster_row_group_rows: int = 16_384

    BOUNDS = {
        "target_rows_per_fragment": (1, 2**31 - 1),
        "target_bytes_per_fragment": (1 * MiB, 64 * 1024 * MiB),
        "materialize_deletions_threshold": (0.0, 1.0),
        "min_row_group_bytes": (0, 1024 * MiB),
        "read_batch_bytes": (1 * MiB, 1024 * MiB),
        "max_concurrency": (1, 10_000),
        "partial_commit_every": (0, 1_000_000),
        "max_task_retries": (0, 100),
        "tier_ratio": (2, 64),
        "min_merge_width": (2, 1024),
        "max_fragments": (1, 1_000_000),
        "max_plan_fragments": (2, 100_000_000),
        "cluster_max_bytes": (1 * MiB, 64 * 1024 * MiB),
        "cluster_tier_ratio": (2, 64),
        "cluster_merge_width": (2, 1024),
        "cluster_depth_trigger": (0.0, 1e9),
        "cluster_row_group_rows": (1024, 2**31 - 1),
    }

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("enable_binary_copy", "cluster", "converge_schemas"):
                if not isinstance(value, bool):
                    raise InvalidConfig(f"{f.name}={value!r} must be true or false")
                continue
            if f.name == "max_concurrency" and value is None:
                continue
            if f.name == "policy":
                if value not in POLICIES:
                    raise InvalidConfig(f"compaction option policy={value!r} must be one of {', '.join(POLICIES)}")
                continue
            lo, hi = self.BOUNDS[f.name]
            numeric = (int, float) if isinstance(lo, float) else (int,)
            if isinstance(value, bool) or not isinstance(value, numeric) or not lo <= value <= hi:
                raise InvalidConfig(f"compaction option {f.name}={value!r} must be a number in [{lo}, {hi}]")
        if self.cluster_merge_width < self.cluster_tier_ratio:
            raise InvalidConfig(
                f"compaction option cluster_merge_width={self.cluster_merge_width} must be at least "
                f"cluster_tier_ratio={self.cluster_tier_ratio}: fewer runs of one tier may not add up to the next tier"
            )
        if self.min_merge_width < self.tier_ratio:
            raise InvalidConfig(
                f"compaction option min_merge_width={self.min_merge_width} must be at least tier_ratio={self.tier_ratio}: "
                f"fewer peers of one tier may not add up to the next tier, and their rows could be rewritten again "
                f"without moving up. Raise min_merge_width or lower tier_ratio"
            )

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> CompactionOptions:
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - names)
        if unknown:
            raise InvalidConfig(f"unknown compaction option(s) {unknown}; known: {', '.join(sorted(names))}")
        return cls(**values)

    def with_overrides(self, **values: Any) -> CompactionOptions:
        return dataclasses.replace(self, **values)

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def parse_assignment(text: str) -> tuple[str, Any]:
    """``key=value`` from the command line, with the value typed like the option's default."""
    key, sep, raw = text.partition("=")
    key = key.strip()
    names = {f.name: f for f in fields(CompactionOptions)}
    if not sep or key not in names:
        raise InvalidConfig(f"--set {text!r}: expected key=value with key one of {', '.join(sorted(names))}")
    default = getattr(CompactionOptions(), key)
    raw = raw.strip()
    if key == "policy" and raw.lower() not in POLICIES:
        raise InvalidConfig(f"--set {text!r}: policy must be one of {', '.join(POLICIES)}")

    def bad(expected: str) -> InvalidConfig:
        return InvalidConfig(f"--set {text!r}: {raw!r} is not a valid value for {key} ({expected})")

    return key, typed_value(raw, default if key != "max_concurrency" else 1, bad, nullable=key == "max_concurrency")


#: The spellings of true and false an option given as text may use.
TRUE_WORDS, FALSE_WORDS = ("true", "1", "yes", "on"), ("false", "0", "no", "off")


def typed_value(raw: Any, like: Any, bad, nullable: bool = False) -> Any:
    """``raw`` (a property value, often a string) as a value of ``like``'s type, or ``bad(...)``."""
    if nullable and (raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none", "null"))):
        return None
    if isinstance(like, str):  # a choice, e.g. compaction.policy; the options check which words are known
        if not isinstance(raw, str) or not raw.strip():
            raise bad('text, e.g. "tiered"')
        return raw.strip().lower()
    if isinstance(like, bool):
        if isinstance(raw, bool):
            return raw
        if isinstance(raw, str) and raw.strip().lower() in TRUE_WORDS + FALSE_WORDS:
            return raw.strip().lower() in TRUE_WORDS
        raise bad("true or false")
    if isinstance(raw, bool):
        raise bad("a number")
    try:
        if isinstance(like, float):
            value = float(raw.strip().replace("_", "") if isinstance(raw, str) else raw)
            if value != value:  # NaN
                raise ValueError(raw)
            return value
        if isinstance(raw, float):
            if not raw.is_integer():
                raise ValueError(raw)
            return int(raw)
        return int(raw.strip().replace("_", "") if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise bad("a number" if isinstance(like, float) else "an integer") from None
