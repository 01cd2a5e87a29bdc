"""The index-build worker: one task per planned part (a fragment range of one segment).

A task reads the indexed column of its part's fragments, builds the part natively and writes it
through ``ObjectStore.staged_output``; the pipeline it belongs to is drawn in docs/ARCHITECTURE.md.

``PartBuilder`` is plain Python; ``build_part`` is the task body that ``lamina.workers.runtime``
runs on Ray (``run_tasks``) or on threads in this process (``run_local``). A task whose
worker dies is retried by Ray (its part is rewritten under the same name); an error in a
task fails the build, and the driver removes the parts already written.
Memory per task: the column of ``task_rows`` rows plus its segment.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina.faults import maybe_die
from lamina.index import segments
from lamina.index.options import IndexOptions
from lamina.manifest import Fragment
from lamina.planner.index import IndexPlan
from lamina.store import open_store


@dataclass(frozen=True)
class BuildTask:
    """Build part ``part`` of segment ``segment_uuid`` from ``fragments`` (ordinal, fragment)."""

    uri: str
    storage_options: dict[str, Any] | None
    column: str
    kind: str
    options: IndexOptions
    segment_uuid: str
    part: int
    only_part: bool  # the segment's only part: written as segment.lidx directly
    fragments: tuple[tuple[int, Fragment], ...]
    #: The column's field today (None: the fragments' own column of that name).
    field: pa.Field | None = None


def tasks_for(plan: IndexPlan, uri: str, storage_options: dict[str, Any] | None) -> list[BuildTask]:
    """One task per planned part, segments in table order."""
    return [
        BuildTask(
            uri,
            storage_options,
            plan.column,
            plan.kind,
            plan.options,
            p.segment_uuid,
            p.part,
            len(s.parts) == 1,
            p.fragments,
            plan.field,
        )
        for s in plan.segments
        for p in s.parts
    ]


class PartBuilder:
    """Builds one part; the plain-Python core of the task."""

    def run(self, task: BuildTask) -> segments.BuiltPart:
        store = open_store(task.uri, task.storage_options)
        built = segments.build_part(
            store, task.segment_uuid, task.part, task.only_part, task.column, task.kind, task.options, task.fragments, task.field
        )
        maybe_die()  # test-only fault injection (lamina.faults)
        return built


def build_part(task: BuildTask) -> segments.BuiltPart:
    """The task body ``lamina.workers.runtime`` runs."""
    return PartBuilder().run(task)
