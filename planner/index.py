"""Planning an index build: a manifest and a request in, a serializable plan out. Pure: no I/O.

A create or update names the index and the fragments to cover (all of them, or those the index
does not cover yet), cut in table order into segments of ≤ ``segment_rows`` rows and those into
parts of ≤ ``task_rows`` rows, one build task each (a segment of one part is written as itself).

Bad requests (unknown column or kind, a type the kind cannot index, a taken or invalid name,
an unknown index to update) are refused here, before any work.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina.errors import IndexNotFound, InvalidArgument
from lamina.evolution import with_ids
from lamina.index.options import IndexOptions, check_indexable, check_name, default_name
from lamina.manifest import Fragment, Manifest

CREATE, UPDATE, NOTHING = "create", "update", "none"


@dataclass(frozen=True)
class PartPlan:
    """One build task: these fragments (with their ordinal in the segment) into one part."""

    segment_uuid: str
    part: int
    fragments: tuple[tuple[int, Fragment], ...]

    @property
    def rows(self) -> int:
        return sum(f.rows for _, f in self.fragments)


@dataclass(frozen=True)
class SegmentPlan:
    """One segment: its fragments, cut into parts built by separate tasks and merged."""

    uuid: str
    fragments: tuple[Fragment, ...]
    parts: tuple[PartPlan, ...]

    @property
    def fragment_ids(self) -> tuple[int, ...]:
        return tuple(f.id for f in self.fragments)


@dataclass(frozen=True)
class IndexPlan:
    """What an index build will do at ``read_version``."""

    table: str
    read_version: int
    name: str
    column: str
    kind: str
    action: str  # CREATE, UPDATE, or NOTHING (an update with every fragment covered)
    options: IndexOptions
    #: The index updated (its uuid at ``read_version``); None when creating.
    index_uuid: str | None
    segments: tuple[SegmentPlan, ...]
    #: The column's field today (with its field id: fragments written in an earlier schema are read through it).
    field: pa.Field | None = None

    @property
    def fragments(self) -> int:
        return sum(len(s.fragments) for s in self.segments)

    @property
    def rows(self) -> int:
        return sum(f.rows for s in self.segments for f in s.fragments)

    @property
    def parts(self) -> list[PartPlan]:
        return [p for s in self.segments for p in s.parts]

    def describe(self) -> str:
        lines = [
            f"{self.action} index {self.name!r} ({self.kind} on {self.column}) of {self.table} at version "
            f"{self.read_version}: {self.fragments} fragments, {self.rows:,} rows in {len(self.segments)} segment(s), "
            f"{len(self.parts)} build task(s)"
        ]
        for s in self.segments:
            ids = s.fragment_ids
            span = f"{ids[0]}..{ids[-1]}" if len(ids) > 3 else ",".join(map(str, ids))
            lines.append(f"  segment {s.uuid[:8]}: fragments [{span}] ({len(ids)}), {len(s.parts)} part(s)")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "read_version": self.read_version,
            "name": self.name,
            "column": self.column,
            "kind": self.kind,
            "action": self.action,
            "options": self.options.details(),
            "segments": [
                {"uuid": s.uuid, "fragment_ids": list(s.fragment_ids), "parts": [[f.id for _, f in p.fragments] for p in s.parts]}
                for s in self.segments
            ],
        }


def plan_index(
    manifest: Manifest,
    column: str | None,
    kind: str | None,
    *,
    name: str | None = None,
    update: bool = False,
    options: IndexOptions | None = None,
    table: str = "",
) -> IndexPlan:
    """The plan to create index ``name`` (default ``<column>_<kind>``) on ``column``, or with
    ``update`` to index the fragments it does not cover yet (found by ``name``, or by its column)."""
    existing = None
    if update:
        if name is None:
            matches = [ix for ix in manifest.indices if ix.column == column and (kind is None or ix.kind == kind)]
            if len(matches) != 1:
                raise IndexNotFound(
                    f"cannot tell which index to update on {table}: {len(matches)} indices on column {column!r}; pass the name"
                )
            existing = matches[0]
        else:
            existing = next((ix for ix in manifest.indices if ix.name == name), None)
            if existing is None:
                raise IndexNotFound(
                    f"table {table} has no index named {name!r}; "
                    f"indices: {', '.join(ix.name for ix in manifest.indices) or 'none'}"
                )
        column, kind, name = existing.column, existing.kind, existing.name
        options = IndexOptions.from_details(
            existing.details,
            task_rows=options.task_rows if options else None,
            segment_rows=options.segment_rows if options else None,
        )
    else:
        if column is None or kind is None:
            raise InvalidArgument("create_index needs a column and a kind (btree, bitmap or fts)")
        options = options or IndexOptions()
        name = check_name(name if name is not None else default_name(column, kind))
        if any(ix.name == name for ix in manifest.indices):
            raise InvalidArgument(
                f"table {table} already has an index named {name!r}; drop it first, pick another name, or update it"
            )
    check_indexable(manifest.schema, column, kind, table)
    if existing is not None:
        covered = existing.coverage(manifest.fragment_map())
        todo = [f for f in manifest.fragments if f.id not in covered]
    else:
        todo = list(manifest.fragments)
    action = NOTHING if existing is not None and not todo else (UPDATE if existing is not None else CREATE)
    return IndexPlan(
        table,
        manifest.version,
        name,
        column,
        kind,
        action,
        options,
        existing.uuid if existing is not None else None,
        _segments(todo, options),
        with_ids(manifest.schema).field(column),
    )


def _segments(fragments: list[Fragment], options: IndexOptions) -> tuple[SegmentPlan, ...]:
    """``fragments`` (in table order) cut into segments of ≤ segment_rows and parts of ≤ task_rows rows."""
    cut: list[list[Fragment]] = []
    for frag in fragments:
        if not cut or (cut[-1] and sum(f.rows for f in cut[-1]) + frag.rows > options.segment_rows):
            cut.append([])
        cut[-1].append(frag)
    out = []
    for frags in cut:
        seg_uuid = uuid.uuid4().hex
        groups: list[list[tuple[int, Fragment]]] = []
        rows = 0
        for ordinal, frag in enumerate(frags):
            if not groups or (groups[-1] and rows + frag.rows > options.task_rows):
                groups.append([])
                rows = 0
            groups[-1].append((ordinal, frag))
            rows += frag.rows
        out.append(SegmentPlan(seg_uuid, tuple(frags), tuple(PartPlan(seg_uuid, i, tuple(g)) for i, g in enumerate(groups))))
    return tuple(out)
