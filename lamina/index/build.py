"""Building an index from plan to commit: the driver behind ``Table.create_index`` and ``lamina index``.

This module's step: the built parts of each segment are merged as soon as they are all in
(``merge_parts``), and the segments become one typed index transaction (``index_transaction``).
Tasks run on Ray (every driver's default), or on threads here with ``ray=False`` (``Table.create_index``);
the pipeline is drawn in
docs/ARCHITECTURE.md ("Data flow").

On any error the files already written are removed and nothing is committed.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from lamina.errors import LaminaError
from lamina.index.options import IndexOptions
from lamina.index.segments import BuiltPart, merge_parts
from lamina.manifest import IndexEntry, IndexSegment, Manifest
from lamina.store import ObjectStore
from lamina.store.scheduler import io_stats, stats_delta

if TYPE_CHECKING:
    from lamina.planner.index import IndexPlan
    from lamina.table import Table


@dataclass
class IndexBuild:
    """What a create or update did (``to_dict`` is the job's ``--json`` output)."""

    name: str
    column: str
    kind: str
    action: str  # create | update | none
    version: int
    segments: int = 0
    fragments: int = 0
    rows: int = 0
    bytes: int = 0
    uncovered_after: int = 0
    #: Object-store requests and bytes of the build (this process and its Ray tasks), by store.
    io: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def merge_segments(
    store: ObjectStore,
    plan: IndexPlan,
    built: Iterable[tuple[Any, BuiltPart]],
    progress: Callable[[int, int], None] | None = None,
) -> list[IndexSegment]:
    """Collects the built parts (in any order), merges each segment as soon as its parts are in;
    on any error removes every file written and re-raises."""
    segments = {s.uuid: s for s in plan.segments}
    parts: dict[str, list[BuiltPart]] = {u: [] for u in segments}
    done: dict[str, IndexSegment] = {}
    written: list[str] = []
    total = len(plan.parts)
    try:
        for n, (_, part) in enumerate(built, 1):
            if not isinstance(part, BuiltPart):  # a task Ray could not run (lamina.workers.runtime.TaskFailed)
                raise LaminaError(
                    f"building index {plan.name!r} of {plan.table}: {getattr(part, 'error', part)}; "
                    f"nothing was committed, run the build again"
                )
            written.append(part.path)
            got = parts[part.segment_uuid]
            got.append(part)
            seg = segments[part.segment_uuid]
            if len(got) == len(seg.parts):
                done[seg.uuid] = merge_parts(
                    store, seg.uuid, seg.fragment_ids, plan.kind, plan.options, sorted(got, key=lambda p: p.part)
                )
                written.append(done[seg.uuid].path)
            if progress is not None:
                progress(n, total)
    except BaseException:
        store.delete(sorted(set(written)))
        raise
    return [done[s.uuid] for s in plan.segments]


def new_entry(name: str, column: str, kind: str, options: IndexOptions, segments: Iterable[IndexSegment]) -> IndexEntry:
    return IndexEntry(name, column, kind, uuid.uuid4().hex, tuple(segments), options.details())


def index_transaction(plan: IndexPlan, base: Manifest, segments: list[IndexSegment], started: float):
    """The one transaction a build commits: a new index, or new segments for the one updated."""
    from lamina.transaction import ChangeIndex

    if plan.index_uuid is not None:
        existing = next(ix for ix in base.indices if ix.uuid == plan.index_uuid)
        entry = dataclasses.replace(existing, segments=tuple(segments))
        return ChangeIndex(base.version, entry, "update", started=started)
    return ChangeIndex(
        base.version, new_entry(plan.name, plan.column, plan.kind, plan.options, segments), "create", started=started
    )


def uncovered(manifest: Manifest, index: IndexEntry) -> list:
    """Live fragments no segment of ``index`` serves, in table order."""
    cov = index.coverage(manifest.fragment_map())
    return [f for f in manifest.fragments if f.id not in cov]


def build_index(
    table: Table | str,
    column: str | None = None,
    kind: str | None = None,
    *,
    name: str | None = None,
    update: bool = False,
    options: IndexOptions | None = None,
    storage_options: dict[str, Any] | None = None,
    ray: bool = True,
    max_concurrency: int | None = None,
    runtime_env: dict[str, Any] | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> IndexBuild:
    """Creates index ``name`` (default ``<column>_<kind>``) on ``column``, or with ``update`` indexes
    the fragments it does not cover yet; commits, and moves ``table`` (a Table) to the new version.

    ``table`` is a Table or a URI (opened with ``storage_options``). The parts are built as Ray tasks
    on the cluster of this process (``RAY_ADDRESS``) or a local Ray it starts, like every driver's work
    (docs/ARCHITECTURE.md, "Drivers"); ``runtime_env`` goes to those tasks. ``ray=False`` builds them on
    threads of this process instead.

    >>> build_index("s3://lake/events", "user_id", "btree").to_dict()
    {'name': 'user_id_btree', 'action': 'create', 'version': 42, 'segments': 3, ...}
    """
    from lamina.planner.index import NOTHING, plan_index
    from lamina.table import Table, open_table
    from lamina.workers.index import build_part, tasks_for
    from lamina.workers.runtime import run_local, run_tasks

    if not isinstance(table, Table):
        table = open_table(table, storage_options=storage_options)
    base = table.manifest
    plan = plan_index(base, column, kind, name=name, update=update, options=options, table=table.uri)
    result = IndexBuild(plan.name, plan.column, plan.kind, plan.action, base.version)
    if plan.action == NOTHING:
        return result
    started = time.time()
    io_before = io_stats()
    tasks = tasks_for(plan, table.uri, table.storage_options)
    if ray:
        built = run_tasks(build_part, tasks, concurrency=max_concurrency, runtime_env=runtime_env)
    else:
        built = run_local(build_part, tasks, concurrency=max_concurrency)
    segments = merge_segments(table.store, plan, built, progress)
    new = table.commit_transaction(index_transaction(plan, base, segments, started))
    ix = next(i for i in new.indices if i.name == plan.name)
    result.version = new.version
    result.segments = len(segments)
    result.fragments = plan.fragments
    result.rows = sum(s.rows for s in segments)
    result.bytes = sum(s.bytes for s in segments)
    result.uncovered_after = len(uncovered(new, ix))
    result.io = stats_delta(io_before)
    return result
