"""Keeping every table of a catalog healthy in one scheduled run: the driver behind ``lamina maintain``.

Each table in turn is planned by ``lamina.planner.maintenance.plan_table`` from its properties and
listings, and its actions run through the library that already does each one (``compact``,
``build_index(update=True)``, ``remove_applied_segments``, ``Table.cleanup``); then the catalog
is cleaned up and one catalog commit records every report. The flow: docs/ARCHITECTURE.md ("Data flow").

A table's failure (any error, including a bad ``maintenance.*`` property) is recorded in its
report and the run goes on with the next table; after a failed action the table's other actions
are not run (old versions are kept: they may be what a repair needs). ``max_tables`` caps how
many tables get actions in one run; tables that need nothing do not count. Rows never change:
every action keeps the table's rows as they are.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lamina.errors import InvalidArgument
from lamina.manifest import MANIFEST_SUFFIX, VERSIONS_DIR, WAL_DIR, Manifest
from lamina.planner.maintenance import (
    CLEANUP,
    COMPACT,
    RETIRE_WAL,
    UPDATE_INDEX,
    MaintenancePolicy,
    TablePlan,
    WalSegment,
    plan_table,
)
from lamina.store.scheduler import io_stats, stats_delta
from lamina.wal import SEALED, read_sealed

if TYPE_CHECKING:
    from lamina.catalog import Catalog
    from lamina.table import Table

log = logging.getLogger("lamina.maintain")

#: A table report's ``status``: every action done (or none needed), an error, not reached (``max_tables``), dry run.
OK, FAILED, SKIPPED, PLANNED = "ok", "failed", "skipped", "planned"


@dataclass
class TableReport:
    """What maintenance found and did for one table (``to_dict`` is one entry of ``--json``)."""

    name: str
    location: str | None = None
    status: str = OK
    #: One entry per planned action: action, target, reason, status (done/failed/planned/skipped/not run), seconds, detail.
    actions: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    error: str | None = None
    version_before: int | None = None
    version_after: int | None = None
    rows_before: int | None = None
    rows_after: int | None = None
    fragments_before: int | None = None
    fragments_after: int | None = None
    bytes_before: int | None = None
    bytes_after: int | None = None
    seconds: float = 0.0
    #: Object-store requests and bytes spent on this table (this process and its Ray tasks), by store.
    io: dict[str, dict[str, int]] = field(default_factory=dict)
    #: The plan as data (dry runs only: what each action would do in detail).
    plan: dict[str, Any] | None = None

    @property
    def ok(self) -> bool:
        return self.status != FAILED

    def done(self) -> list[str]:
        """The actions that ran to the end."""
        return [_label(a) for a in self.actions if a["status"] == "done"]

    def note_state(self, manifest: Manifest, when: str) -> None:
        setattr(self, f"version_{when}", manifest.version)
        setattr(self, f"rows_{when}", manifest.rows)
        setattr(self, f"fragments_{when}", len(manifest.fragments))
        setattr(self, f"bytes_{when}", sum(f.file_bytes for f in manifest.fragments))

    def record(self, at_ms: int) -> dict[str, Any]:
        """What the catalog keeps as the table's last maintenance (``version``/``rows``/``bytes`` also
        refresh the catalog's last known state of the table)."""
        out: dict[str, Any] = {
            "at_ms": at_ms,
            "status": self.status,
            "actions": self.done(),
            "error": self.error,
            "seconds": self.seconds,
        }
        version = self.version_after if self.version_after is not None else self.version_before
        if version is not None:
            after = self.version_after is not None
            out.update(
                version=version,
                rows=self.rows_after if after else self.rows_before,
                bytes=self.bytes_after if after else self.bytes_before,
                fragments=self.fragments_after if after else self.fragments_before,
            )
        failed = [a for a in self.actions if a["status"] == "failed"]
        if failed:
            out["failed_action"] = _label(failed[0])
        return out

    def describe(self) -> str:
        head = f"{self.name}: {self.status}" + ("" if self.actions or self.error else ", nothing to do")
        if self.version_before is not None:
            head += f", version {self.version_before}"
            if self.version_after is not None and self.version_after != self.version_before:
                head += f" -> {self.version_after}"
            head += f", fragments {self.fragments_before}"
            if self.fragments_after is not None and self.fragments_after != self.fragments_before:
                head += f" -> {self.fragments_after}"
            head += f", rows {self.rows_before:,}"
        head += f", {self.seconds:.2f} s"
        lines = [head]
        for a in self.actions:
            lines.append(f"  {_label(a)} [{a['status']}]: {a['reason']}" + (f" -- {a['error']}" if a.get("error") else ""))
        for n in self.notes:
            lines.append(f"  ({n})")
        if self.error and not any(a.get("error") for a in self.actions):
            lines.append(f"  error: {self.error}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        if d["plan"] is None:
            d.pop("plan")
        return d


@dataclass
class MaintenanceReport:
    """A maintenance run: one report per table, the catalog table's, and whether the outcome was recorded."""

    root: str
    dry_run: bool
    policy: dict[str, Any]
    tables: list[TableReport] = field(default_factory=list)
    #: The catalog table's own maintenance (None without a catalog).
    catalog: TableReport | None = None
    #: Why recording the outcome in the catalog failed (None: recorded, or nothing to record).
    record_error: str | None = None
    started_ms: int = 0
    seconds: float = 0.0
    #: Object-store requests and bytes of the whole run (this process and its Ray tasks), by store.
    io: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        """Names of the tables that failed (and ``_catalog`` when the catalog's own maintenance or the
        record of this run failed)."""
        out = [t.name for t in self.tables if not t.ok]
        if (self.catalog is not None and not self.catalog.ok) or self.record_error:
            out.append(self.catalog.name if self.catalog is not None else "_catalog")
        return out

    @property
    def ok(self) -> bool:
        return not self.failed

    def counts(self) -> dict[str, int]:
        out = {OK: 0, FAILED: 0, SKIPPED: 0, PLANNED: 0, "with_actions": 0}
        for t in self.tables:
            out[t.status] += 1
            out["with_actions"] += bool(t.actions) and t.status in (OK, FAILED, PLANNED)
        return out

    def describe(self) -> str:
        lines = [t.describe() for t in self.tables]
        if self.catalog is not None:
            lines.append(self.catalog.describe())
        c = self.counts()
        what = "would get actions" if self.dry_run else "got actions"
        lines.append(
            f"\n{self.root}: {len(self.tables)} tables, {c['with_actions']} {what}, {c[FAILED]} failed, "
            f"{c[SKIPPED]} skipped; {self.seconds:.1f} s"
        )
        if self.record_error:
            lines.append(f"recording the outcome in the catalog failed: {self.record_error}")
        if self.failed:
            lines.append(f"failed: {', '.join(self.failed)}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "root": self.root,
            "dry_run": self.dry_run,
            "ok": self.ok,
            "failed": self.failed,
            "counts": self.counts(),
            "seconds": self.seconds,
            "started_ms": self.started_ms,
            "record_error": self.record_error,
            "policy": self.policy,
            "io": self.io,
            "tables": [t.to_dict() for t in self.tables],
            "catalog": self.catalog.to_dict() if self.catalog is not None else None,
        }


def _label(action: dict[str, Any]) -> str:
    return f"{action['action']} {action['target']}" if action.get("target") else action["action"]


def _error_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


# -- inputs: what the planner needs, from listings ------------------------------------------------
def table_inputs(table: Table, retention_seconds: float, now: float) -> tuple[list[tuple[int, float]], list[WalSegment]]:
    """The table's versions on storage as ``(version, committed at)`` and its WAL segments, from
    one listing of ``_versions/`` and one of ``_wal/`` (plus one read per sealed segment old enough
    to retire). A manifest object's time is never earlier than the commit time cleanup goes by, so
    a cleanup planned from it always has versions to expire."""
    store = table.store
    versions = []
    for obj in store.list(VERSIONS_DIR):
        name = obj.path[len(VERSIONS_DIR) :]
        if name.endswith(MANIFEST_SUFFIX) and name[: -len(MANIFEST_SUFFIX)].isdigit():
            versions.append((int(name[: -len(MANIFEST_SUFFIX)]), obj.modified))
    versions.sort()
    segments: dict[tuple[int, int], float | None] = {}
    for obj in store.list(WAL_DIR):
        parts = obj.path[len(WAL_DIR) :].split("/")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        key = (int(parts[0]), int(parts[1]))
        if parts[2] == SEALED:
            segments[key] = obj.modified
        else:
            segments.setdefault(key, None)
    wal = []
    for (shard, segment), sealed_at in sorted(segments.items()):
        count = None
        if sealed_at is not None and now - sealed_at >= retention_seconds:
            count = read_sealed(store, shard, segment)
        wal.append(WalSegment(shard, segment, sealed_at if count is not None else None, count))
    return versions, wal


# -- actions ----------------------------------------------------------------------------------
def _compact(table: Table, plan: TablePlan, budget: int | None) -> dict[str, Any]:
    from lamina.compaction import compact

    options = plan.policy.compaction
    if budget is not None:
        options = options.with_overrides(max_concurrency=min(budget, options.max_concurrency or budget))
    _, summary = compact(table.uri, options, storage_options=table.storage_options)
    detail = {
        "groups": len(summary.groups),
        "committed_versions": summary.committed_versions,
        "fragments": [summary.fragments_before, summary.fragments_after],
        "failed_groups": summary.failed_groups,
        "retries": summary.retries,
    }
    if summary.failed_groups:
        errors = [
            f"group {i} (fragments {g['fragment_ids']}): {g['error']}"
            for i, g in enumerate(summary.groups)
            if g["status"] in ("failed", "conflict")
        ]
        others = len(summary.groups) - summary.failed_groups
        raise _ActionFailed(
            f"{summary.failed_groups} of {len(summary.groups)} compaction group(s) failed"
            + (f" (the other {others} were committed)" if others else "")
            + f": {'; '.join(errors)}",
            detail,
        )
    return detail


def _update_index(table: Table, name: str, budget: int | None) -> dict[str, Any]:
    from lamina.index.build import build_index

    table.reload()
    if not any(ix.name == name for ix in table.manifest.indices):
        return {"action": "none", "why": f"index {name!r} was dropped meanwhile"}
    return build_index(
        table, name=name, update=True, ray=True, max_concurrency=budget, storage_options=table.storage_options
    ).to_dict()


def _retire_wal(table: Table, plan: TablePlan) -> dict[str, Any]:
    from lamina.ingest import remove_applied_segments

    watermarks = table.reload().manifest.wal_watermarks
    by_shard: dict[int, list[int]] = {}
    for shard, segment in plan.wal_segments:
        by_shard.setdefault(shard, []).append(segment)
    removed = {
        str(shard): remove_applied_segments(table.store, shard, watermarks, plan.policy.retention_seconds, segments=segments)
        for shard, segments in sorted(by_shard.items())
    }
    return {"removed": removed}


def _cleanup(table: Table, plan: TablePlan) -> dict[str, Any]:
    stats = table.cleanup(older_than=plan.policy.retention_seconds, enforce_retention=plan.policy.enforce_retention)
    return dict(stats.__dict__)


class _ActionFailed(Exception):
    """An action that did part of its work (``detail``) and failed the rest."""

    def __init__(self, message: str, detail: dict[str, Any]):
        super().__init__(message)
        self.detail = detail


def run_actions(table: Table, plan: TablePlan, report: TableReport, *, max_concurrency: int | None = None) -> None:
    """Runs ``plan``'s actions on ``table`` in order, noting each in ``report``; stops at the first
    failure (the rest are ``not run``) and marks the table failed."""
    for entry, action in zip(report.actions, plan.actions):
        started = time.perf_counter()
        try:
            if action.kind == COMPACT:
                entry["detail"] = _compact(table, plan, max_concurrency)
            elif action.kind == UPDATE_INDEX:
                entry["detail"] = _update_index(table, action.target or "", max_concurrency)
            elif action.kind == RETIRE_WAL:
                entry["detail"] = _retire_wal(table, plan)
            elif action.kind == CLEANUP:
                entry["detail"] = _cleanup(table, plan)
            entry["status"] = "done"
        except Exception as e:  # one table's failure never stops the run
            entry.update(status="failed", error=str(e) if isinstance(e, _ActionFailed) else _error_text(e))
            if isinstance(e, _ActionFailed):
                entry["detail"] = e.detail
            report.status, report.error = FAILED, f"{_label(entry)}: {entry['error']}"
            log.error("%s: %s failed: %s", report.name, _label(entry), entry["error"])
        finally:
            entry["seconds"] = round(time.perf_counter() - started, 3)
        if report.status == FAILED:
            for rest in report.actions:
                if rest["status"] == PLANNED:
                    rest["status"] = "not run"
            return
        log.info("%s: %s done in %.2f s", report.name, _label(entry), entry["seconds"])


# -- the run ----------------------------------------------------------------------------------
@dataclass
class _Budget:
    max_tables: int | None
    used: int = 0

    def take(self) -> bool:
        if self.max_tables is not None and self.used >= self.max_tables:
            return False
        self.used += 1
        return True


def _maintain_one(
    name: str,
    open_table: Callable[[str], Table],
    properties: Callable[[str], dict[str, Any]],
    policy: MaintenancePolicy,
    budget: _Budget,
    max_concurrency: int | None,
    dry_run: bool,
) -> TableReport:
    report = TableReport(name)
    started = time.perf_counter()
    io_before = io_stats()
    try:
        table_policy = policy.with_properties(properties(name), name)
        table = open_table(name)
        report.location = table.uri
        report.note_state(table.manifest, "before")
        now = time.time()
        versions, wal = table_inputs(table, table_policy.retention_seconds, now)
        plan = plan_table(name, table.manifest, versions, wal, table_policy, now)
    except Exception as e:  # the table fails alone, before any change
        report.status, report.error = FAILED, _error_text(e)
        report.seconds = round(time.perf_counter() - started, 3)
        report.io = stats_delta(io_before)
        log.error("%s: %s", name, report.error)
        return report
    report.actions = [{**a.to_dict(), "status": PLANNED, "seconds": 0.0} for a in plan.actions]
    report.notes = list(plan.notes)
    if plan.actions and not budget.take():
        report.status = SKIPPED
        report.error = f"not reached: max_tables={budget.max_tables} tables get actions in one run"
        for a in report.actions:
            a["status"] = SKIPPED
    elif dry_run:
        report.status, report.plan = (PLANNED if plan.actions else OK), plan.to_dict()
    elif not plan.actions:
        report.note_state(table.manifest, "after")  # nothing to do: as it was
    else:
        log.info("%s: %s", name, ", ".join(plan.action_labels()))
        run_actions(table, plan, report, max_concurrency=max_concurrency)
        try:
            report.note_state(table.reload().manifest, "after")
        except Exception as e:
            if report.status != FAILED:
                report.status, report.error = FAILED, f"reading the table after maintenance: {_error_text(e)}"
    report.seconds = round(time.perf_counter() - started, 3)
    report.io = stats_delta(io_before)
    return report


def _check_limits(max_tables: int | None, max_concurrency: int | None) -> None:
    for what, value in (("max_tables", max_tables), ("max_concurrency", max_concurrency)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise InvalidArgument(f"{what} must be a positive integer, got {value!r}")


def _run(
    names: Sequence[str],
    open_table: Callable[[str], Table],
    properties: Callable[[str], dict[str, Any]],
    policy: MaintenancePolicy,
    report: MaintenanceReport,
    max_tables: int | None,
    max_concurrency: int | None,
    dry_run: bool,
    progress: Callable[[int, int], None] | None,
) -> None:
    budget = _Budget(max_tables)
    for n, name in enumerate(names, 1):
        report.tables.append(_maintain_one(name, open_table, properties, policy, budget, max_concurrency, dry_run))
        if progress is not None:
            progress(n, len(names))


def maintain_tables(
    uris: Iterable[str],
    policy: MaintenancePolicy | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    max_tables: int | None = None,
    max_concurrency: int | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> MaintenanceReport:
    """``maintain`` for tables outside any catalog, named by URI: the policy as given (no property
    overrides), and nothing recorded."""
    from lamina.table import open_table

    _check_limits(max_tables, max_concurrency)
    policy = policy if policy is not None else MaintenancePolicy()
    uris = list(uris)
    started = time.time()
    io_before = io_stats()
    report = MaintenanceReport(", ".join(uris), dry_run, policy.to_dict(), started_ms=int(started * 1000))
    _run(
        uris,
        lambda uri: open_table(uri, storage_options=storage_options),
        lambda _uri: {},
        policy,
        report,
        max_tables,
        max_concurrency,
        dry_run,
        progress,
    )
    report.seconds = round(time.time() - started, 3)
    report.io = stats_delta(io_before)
    return report


def open_catalog(root: str, storage_options: dict[str, Any] | None = None) -> Catalog:
    """The catalog under ``root``; ``InvalidArgument`` if there is none (maintenance never creates one)."""
    from lamina.catalog import connect

    return connect(root, storage_options=storage_options, create=False)


def maintain(
    root: str,
    policy: MaintenancePolicy | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    namespace: str | None = None,
    names: Sequence[str] | None = None,
    max_tables: int | None = None,
    max_concurrency: int | None = None,
    dry_run: bool = False,
    progress: Callable[[int, int], None] | None = None,
) -> MaintenanceReport:
    """Maintains the tables of the catalog at ``root`` (those of ``namespace`` and the namespaces in
    it, or the tables ``names``): compaction, index updates, WAL retirement and cleanup, each table
    as ``policy`` overridden by its ``maintenance.*`` properties says; then cleans up the catalog
    table itself and records every table's outcome in the catalog (one commit).

    At most ``max_tables`` tables get actions (the others that need some are reported skipped),
    compactions and index builds run at most ``max_concurrency`` Ray tasks at once. ``dry_run``
    plans and changes nothing. One table's failure is in its report and never stops the others.

    >>> report = maintain("s3://lake/warehouse", MaintenancePolicy(), max_tables=200)
    >>> report.ok, report.failed, [t.done() for t in report.tables][:2]
    (True, [], [['compact', 'cleanup'], []])
    """
    _check_limits(max_tables, max_concurrency)
    policy = policy if policy is not None else MaintenancePolicy()
    started = time.time()
    io_before = io_stats()
    catalog = open_catalog(root, storage_options)
    report = MaintenanceReport(catalog.root, dry_run, policy.to_dict(), started_ms=int(started * 1000))
    if names is not None:
        names = list(dict.fromkeys(names))
    else:
        try:
            names = catalog.list_tables(namespace, recursive=True)
        except LookupError as e:  # NamespaceNotFound: a bad argument
            raise InvalidArgument(str(e)) from None
    _run(names, catalog.open_table, catalog.effective_properties, policy, report, max_tables, max_concurrency, dry_run, progress)

    own = MaintenancePolicy(
        compaction=policy.compaction,
        compact=False,
        update_indices=False,
        retire_wal=False,
        cleanup=policy.cleanup,
        retention_seconds=policy.retention_seconds,
        enforce_retention=policy.enforce_retention,
    )
    report.catalog = _maintain_one("_catalog", lambda _name: catalog.table, lambda _name: {}, own, _Budget(None), None, dry_run)
    report.catalog.notes = []  # rewritten whole with its indices by every change: cleanup is all it needs
    if not dry_run:
        recorded = {t.name: t.record(report.started_ms) for t in report.tables if t.status != SKIPPED}
        try:
            catalog.record_maintenance(recorded)
        except Exception as e:
            report.record_error = _error_text(e)
            log.error("recording the maintenance of %d tables in %s failed: %s", len(recorded), catalog.root, report.record_error)
    report.seconds = round(time.time() - started, 3)
    report.io = stats_delta(io_before)
    return report


__all__ = [
    "maintain",
    "maintain_tables",
    "open_catalog",
    "run_actions",
    "table_inputs",
    "MaintenanceReport",
    "TableReport",
    "OK",
    "FAILED",
    "SKIPPED",
    "PLANNED",
]
