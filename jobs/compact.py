"""Compaction job: plan, rewrite groups on Ray workers, commit with rebase and retry.

    python -m jobs.compact URI [--config FILE] [--set key=value ...] [--dry-run] [--json]
                               [--max-concurrency N] [--partial-commit-every N] [--storage-option k=v ...]

    driver ─► planner.plan_compaction (pure) ─► Ray tasks (workers.compaction) ─► results
    driver ─► lamina.commit: one Rewrite transaction per batch of finished groups; it rebases
              over concurrent appends and carries concurrent deletions onto the new fragments.

A failed group is reported and skipped; the others still commit. Exit status: 0 when
every group committed, 1 when some failed, 2 for bad configuration.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import lamina
from lamina.commit import commit
from lamina.errors import CommitConflict, InvalidConfig, LaminaError
from lamina.transaction import AddressMapping, Rewrite, RewriteGroup
from planner import CompactionOptions, CompactionPlan, plan_compaction
from jobs.cli import failed, log_to_stderr, storage_options
from planner.options import parse_assignment
from workers.compaction import GroupResult, GroupTask, remote_compact_group

log = logging.getLogger("lamina.compact")

#: Test-only fault injection: the driver SIGKILLs itself after the outputs are written, before committing.
FAULT_KILL_BEFORE_COMMIT = "LAMINA_FAULT_KILL_DRIVER_BEFORE_COMMIT"


@dataclass
class CompactionSummary:
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

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def load_options(config: str | None, assignments: list[str], **flags: Any) -> CompactionOptions:
    """Options from a YAML file (``compaction:`` section or top level), then --set, then flags."""
    values: dict[str, Any] = {}
    if config:
        import yaml

        try:
            with open(config) as f:
                doc = yaml.safe_load(f) or {}
        except OSError as e:
            raise InvalidConfig(f"cannot read config {config}: {e}") from None
        except yaml.YAMLError as e:
            raise InvalidConfig(f"config {config} is not valid YAML: {e}") from None
        values.update(doc.get("compaction", doc) if isinstance(doc, dict) else {})
    for a in assignments:
        k, v = parse_assignment(a)
        values[k] = v
    values.update({k: v for k, v in flags.items() if v is not None})
    return CompactionOptions.from_mapping(values)


class _Progress:
    """A bar on a terminal, a log line every ``interval`` seconds otherwise."""

    def __init__(self, total: int, enabled: bool, interval: float = 10.0):
        self.total, self.done, self.failed = total, 0, 0
        self.tty = enabled and sys.stderr.isatty()
        self.enabled, self.interval = enabled, interval
        self.started = self.last = time.perf_counter()

    def update(self, result: GroupResult | None = None) -> None:
        if result is not None:
            self.done += 1
            self.failed += 0 if result.ok else 1
        if not self.enabled:
            return
        now = time.perf_counter()
        elapsed = now - self.started
        if self.tty:
            width = 30
            filled = int(width * self.done / max(1, self.total))
            sys.stderr.write(f"\rcompacting [{'#' * filled}{'.' * (width - filled)}] {self.done}/{self.total} groups"
                             f"{f', {self.failed} failed' if self.failed else ''} {elapsed:5.1f}s")
            sys.stderr.flush()
            if self.done == self.total:
                sys.stderr.write("\n")
        elif now - self.last >= self.interval or self.done == self.total:
            self.last = now
            log.info("compaction progress: %d/%d groups done (%d failed), %.1f s", self.done, self.total, self.failed, elapsed)


def _commit_batch(table: lamina.Table, plan: CompactionPlan, base, batch: list[GroupResult], summary: CompactionSummary) -> None:
    """Commits finished groups as one rewrite; on conflict, group by group so the others still land."""
    if not batch:
        return
    if os.environ.get(FAULT_KILL_BEFORE_COMMIT):
        os.kill(os.getpid(), signal.SIGKILL)

    def txn_for(results: list[GroupResult]) -> Rewrite:
        return Rewrite(plan.read_version, [
            RewriteGroup(r.fragment_ids, [r.fragment], AddressMapping.from_runs(r.mapping), dict(r.source_deletions),
                         index_segments=dict(r.index_segments))
            for r in results
        ])

    def record(results: list[GroupResult], status: str, error: str | None, version: int | None) -> None:
        for r in results:
            entry = summary.groups[r.index]
            entry.update(status=status, error=error, committed_version=version)

    txn = txn_for(batch)
    single = len(batch) == 1
    try:
        # A batch keeps its outputs on conflict: its groups are retried one by one below.
        new = commit(table.store, txn, base, abandon_on_conflict=single)
        summary.retries += txn.attempts - 1
        summary.committed_versions.append(new.version)
        record(batch, "committed", None, new.version)
        return
    except CommitConflict as e:
        summary.retries += txn.attempts - 1
        if single:
            record(batch, "conflict", str(e), None)
            summary.failed_groups += 1
            return
        log.warning("batch of %d groups conflicted (%s); committing them one by one", len(batch), e)
    for r in batch:
        _commit_batch(table, plan, base, [r], summary)


def compact(uri: str, options: CompactionOptions, *, storage_options: dict[str, Any] | None = None,
            dry_run: bool = False, progress: bool = False,
            runtime_env: dict[str, Any] | None = None) -> tuple[CompactionPlan, CompactionSummary]:
    """Plans and runs a compaction of the table at ``uri``; returns the plan and the summary.

    ``runtime_env`` is passed to the Ray tasks (e.g. ``{"env_vars": {"AWS_PROFILE": ...}}``).
    """
    started = time.perf_counter()
    table = lamina.open_table(uri, storage_options=storage_options)
    base = table.manifest
    plan = plan_compaction(base, options, table.uri)
    summary = CompactionSummary(table=table.uri, read_version=plan.read_version,
                                fragments_before=plan.fragments_before, rows_before=plan.rows_before)
    summary.groups = [{**g.to_dict(), "bytes_in": g.bytes, "bytes_out": 0, "seconds": 0.0, "status": "planned",
                       "error": None, "committed_version": None} for g in plan.groups]
    if dry_run or not plan.groups:
        latest = table.reload()
        summary.fragments_after, summary.rows_after = len(latest.manifest.fragments), latest.manifest.rows
        summary.seconds = time.perf_counter() - started
        return plan, summary

    import ray

    if not ray.is_initialized():
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False)
    task_fn = remote_compact_group(options, runtime_env)
    limit = options.max_concurrency or max(1, int(ray.cluster_resources().get("CPU", 1)))
    frags = base.fragment_map()
    indices = tuple((ix.name, ix.uuid, ix.column, ix.kind, dict(ix.details)) for ix in base.indices)
    tasks = [GroupTask(uri, storage_options, g, tuple(frags[i] for i in g.fragment_ids), base.schema,
                       table.write_options, options, base.stable_row_ids, indices) for g in plan.groups]
    bar = _Progress(len(tasks), progress)
    queue = list(tasks)
    pending: dict[Any, GroupTask] = {}
    finished: list[GroupResult] = []
    while queue or pending:
        while queue and len(pending) < limit:
            t = queue.pop(0)
            pending[task_fn.remote(t)] = t
        ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
        bar.update()
        for ref in ready:
            t = pending.pop(ref)
            try:
                result = ray.get(ref)
            except Exception as e:  # the worker died more often than max_task_retries
                result = GroupResult(t.group.index, t.group.fragment_ids, t.group.mode, t.group.reason, ok=False,
                                     error=f"task failed after {options.max_task_retries} retries: {type(e).__name__}: {e}")
            entry = summary.groups[result.index]
            entry.update(mode=result.mode, reason=result.reason, bytes_out=result.bytes_out, seconds=round(result.seconds, 3),
                         status="written" if result.ok else "failed", error=result.error,
                         row_groups_copied=result.row_groups_copied, row_groups_encoded=result.row_groups_encoded,
                         get_requests=result.get_requests, index_segments=sorted(result.index_segments))
            for w in result.warnings:
                log.warning("group %d: %s", result.index, w)
            bar.update(result)
            if not result.ok:
                summary.failed_groups += 1
                log.error("group %d (fragments %s) failed: %s", result.index, list(result.fragment_ids), result.error)
                continue
            finished.append(result)
            if options.partial_commit_every and len(finished) >= options.partial_commit_every:
                _commit_batch(table, plan, base, finished, summary)
                finished = []
    _commit_batch(table, plan, base, finished, summary)
    latest = table.reload()
    summary.fragments_after, summary.rows_after = len(latest.manifest.fragments), latest.manifest.rows
    summary.seconds = round(time.perf_counter() - started, 3)
    return plan, summary


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.compact", description="Compact a Lamina table on Ray.")
    ap.add_argument("uri", help="table location: a local path or s3://bucket/prefix")
    ap.add_argument("--config", help="YAML options file (see configs/compaction.yaml)")
    ap.add_argument("--set", dest="assignments", action="append", default=[], metavar="KEY=VALUE", help="override one option")
    ap.add_argument("--dry-run", action="store_true", help="print the plan (groups, modes, reasons) and write nothing")
    ap.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")
    ap.add_argument("--max-concurrency", type=int, help="groups executed at once")
    ap.add_argument("--partial-commit-every", type=int, help="commit every N finished groups")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help="S3 storage option")
    args = ap.parse_args(argv)
    log_to_stderr()
    try:
        options = load_options(args.config, args.assignments, max_concurrency=args.max_concurrency,
                               partial_commit_every=args.partial_commit_every)
        plan, summary = compact(args.uri, options, storage_options=storage_options(args.storage_option),
                                dry_run=args.dry_run, progress=not args.json)
    except LaminaError as e:
        return failed(e)
    if args.json:
        out = summary.to_dict()
        if args.dry_run:
            out["plan"] = plan.to_dict()
        print(json.dumps(out, indent=2, default=str))
    else:
        print(plan.describe())
        if not args.dry_run:
            print(f"\n{summary.table}: version {summary.read_version} -> {summary.committed_versions or 'no commit'}; "
                  f"fragments {summary.fragments_before} -> {summary.fragments_after}; rows {summary.rows_before:,} -> "
                  f"{summary.rows_after:,}; {summary.failed_groups} failed groups; {summary.retries} commit retries; "
                  f"{summary.seconds:.1f} s")
    return 1 if summary.failed_groups else 0


if __name__ == "__main__":
    sys.exit(main())
