"""Compaction from plan to commit: the driver behind ``python -m lamina.jobs.compact`` and ``lamina.compaction.compact``.

This module's step: the groups' results (new fragment, old→new row mapping, index segments)
become one typed ``Rewrite`` transaction (``rewrite_transaction``), committed by ``lamina.commit``.
The whole pipeline, plan to commit, is drawn once in docs/ARCHITECTURE.md ("Data flow").

A failed group is reported and skipped; the others still commit. With
``partial_commit_every`` groups land in batches as they finish; a batch that conflicts is
committed group by group so one conflicting group does not hold back the others.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lamina.clustering import Clustering, clustering_stats, drifted
from lamina.commit import commit
from lamina.errors import CommitConflict
from lamina.faults import FAULT_KILL_DRIVER_BEFORE_COMMIT, maybe_kill_driver
from lamina.manifest import Manifest
from lamina.store.scheduler import io_stats, stats_delta
from lamina.transaction import GroupResult, rewrite_transaction

if TYPE_CHECKING:
    from lamina.planner import CompactionOptions, CompactionPlan
    from lamina.table import Table

log = logging.getLogger("lamina.compact")

__all__ = [
    "GroupResult",
    "CompactionSummary",
    "rewrite_transaction",
    "commit_results",
    "compact",
    "FAULT_KILL_DRIVER_BEFORE_COMMIT",
]


@dataclass
class CompactionSummary:
    """What a compaction did, group by group (``to_dict`` is the job's ``--json`` output)."""

    table: str
    read_version: int
    committed_versions: list[int] = field(default_factory=list)
    groups: list[dict[str, Any]] = field(default_factory=list)
    fragments_before: int = 0
    fragments_after: int = 0
    rows_before: int = 0
    rows_after: int = 0
    retries: int = 0
    failed_groups: int = 0
    seconds: float = 0.0
    #: Data file bytes this pass read and wrote, over every group written (committed or not): the
    #: measure of write amplification (bytes written by compaction / bytes appended).
    bytes_read: int = 0
    bytes_written: int = 0
    #: Object-store requests and bytes of the whole pass (this process and its Ray tasks), by store
    #: (``lamina.io_stats`` shape).
    io: dict[str, dict[str, int]] = field(default_factory=dict)
    #: Why the clustering boundaries were sampled again before planning (None: they were not).
    resampled: str | None = None
    #: The clustering metric after the pass (``ClusteringStats.to_dict``; None: no clustering keys).
    clustering: dict[str, Any] | None = None

    @classmethod
    def for_plan(cls, plan: CompactionPlan) -> CompactionSummary:
        """A summary with every group of ``plan`` ``planned``."""
        summary = cls(
            table=plan.table, read_version=plan.read_version, fragments_before=plan.fragments_before, rows_before=plan.rows_before
        )
        summary.groups = [
            {
                **g.to_dict(),
                "bytes_in": g.bytes,
                "bytes_out": 0,
                "seconds": 0.0,
                "status": "planned",
                "error": None,
                "committed_version": None,
            }
            for g in plan.groups
        ]
        return summary

    def record(self, result: GroupResult) -> None:
        """Notes a group's result (``written`` or ``failed``)."""
        self.groups[result.index].update(
            mode=result.mode,
            reason=result.reason,
            bytes_out=result.bytes_out,
            seconds=round(result.seconds, 3),
            status="written" if result.ok else "failed",
            error=result.error,
            row_groups_copied=result.row_groups_copied,
            row_groups_encoded=result.row_groups_encoded,
            get_requests=result.get_requests,
            index_segments=sorted(result.index_segments),
            resolved=[f"fragment {fid} rg {rg}: {action} ({why})" for fid, rg, action, why in result.resolved],
        )
        if not result.ok:
            self.failed_groups += 1
        else:
            self.bytes_read += result.bytes_in
            self.bytes_written += result.bytes_out

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def commit_results(table: Table, base: Manifest, results: Sequence[GroupResult], summary: CompactionSummary) -> None:
    """Commits finished groups as one rewrite read at ``base``; on conflict, group by group so the
    others still land. Each group's ``status`` in ``summary`` becomes ``committed`` or ``conflict``."""
    if not results:
        return
    maybe_kill_driver()

    def note(batch: Sequence[GroupResult], status: str, error: str | None, version: int | None) -> None:
        for r in batch:
            summary.groups[r.index].update(status=status, error=error, committed_version=version)

    txn = rewrite_transaction(base.version, results)
    single = len(results) == 1
    try:
        # A batch keeps its outputs on conflict: its groups are retried one by one below.
        new = commit(table.store, txn, base, abandon_on_conflict=single)
        summary.retries += txn.attempts - 1
        summary.committed_versions.append(new.version)
        note(results, "committed", None, new.version)
        return
    except CommitConflict as e:
        summary.retries += txn.attempts - 1
        if single:
            note(results, "conflict", str(e), None)
            summary.failed_groups += 1
            return
        log.warning("batch of %d groups conflicted (%s); committing them one by one", len(results), e)
    for r in results:
        commit_results(table, base, [r], summary)


def resample_if_drifted(table: Table) -> str | None:
    """Samples the clustering boundaries again (a ``configure`` commit) when the data drifted past them
    (``lamina.clustering.drifted``); returns why, or None when they still fit (or there are no keys)."""
    clustering = Clustering.from_config(table.manifest.config, f"version {table.version}")
    if clustering is None:
        return None
    why = drifted(clustering, table.manifest.fragments, table.schema)
    if why is not None:
        log.info("resampling the clustering boundaries of %s: %s", table.uri, why)
        table.set_clustering(list(clustering.columns), clustering.curve)
    return why


def compact(
    uri: str,
    options: CompactionOptions | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
    runtime_env: dict[str, Any] | None = None,
) -> tuple[CompactionPlan, CompactionSummary]:
    """Plans and runs a compaction of the table at ``uri`` on Ray; returns the plan and the summary.

    Joins the running Ray cluster (``RAY_ADDRESS``) or starts a local one. ``progress(done, total)``
    is called as groups finish; ``runtime_env`` is passed to the Ray tasks (e.g.
    ``{"env_vars": {"AWS_PROFILE": ...}}``).

    >>> plan, summary = compact("/data/events", CompactionOptions(target_rows_per_fragment=1_000_000))
    >>> summary.fragments_before, summary.fragments_after, summary.failed_groups
    (412, 9, 0)
    """
    from lamina.planner import CompactionOptions, plan_compaction
    from lamina.table import open_table
    from lamina.workers.compaction import compact_group, tasks_for
    from lamina.workers.runtime import TaskFailed, run_tasks

    options = options if options is not None else CompactionOptions()
    started = time.perf_counter()
    io_before = io_stats()
    table = open_table(uri, storage_options=storage_options)
    resampled = None if dry_run or not options.cluster else resample_if_drifted(table)
    base = table.manifest
    plan = plan_compaction(base, options, table.uri)
    summary = CompactionSummary.for_plan(plan)
    summary.resampled = resampled
    finished: list[GroupResult] = []
    if not dry_run and plan.groups:
        tasks = tasks_for(plan, base, uri, storage_options, table.write_options, options.read_batch_bytes)
        for task, result in run_tasks(
            compact_group,
            tasks,
            concurrency=options.max_concurrency,
            max_retries=options.max_task_retries,
            runtime_env=runtime_env,
            progress=progress,
        ):
            if isinstance(result, TaskFailed):
                g = task.group
                result = GroupResult(g.index, g.fragment_ids, g.mode, g.reason, ok=False, error=result.error)
            summary.record(result)
            for w in result.warnings:
                log.warning("group %d: %s", result.index, w)
            if not result.ok:
                log.error("group %d (fragments %s) failed: %s", result.index, list(result.fragment_ids), result.error)
                continue
            finished.append(result)
            if options.partial_commit_every and len(finished) >= options.partial_commit_every:
                commit_results(table, base, finished, summary)
                finished = []
        commit_results(table, base, finished, summary)
    latest = table.reload()
    summary.fragments_after, summary.rows_after = len(latest.manifest.fragments), latest.manifest.rows
    stats = clustering_stats(latest.manifest)
    summary.clustering = None if stats is None else stats.to_dict()
    summary.seconds = round(time.perf_counter() - started, 3)
    summary.io = stats_delta(io_before)
    return plan, summary
