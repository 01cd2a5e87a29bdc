"""The compaction worker: executes one planned group and returns the new fragment, mapping and metrics.

A task stages its sources (checksums computed beside the rewrite and checked before the output
is published), resolves each ``copy_if_clean`` row group from the deletion file it just read, runs
the native copy/encode of the planned actions and writes one index segment per table index over
the output. Where this sits in the pipeline: docs/ARCHITECTURE.md ("Data flow").

Two decisions are the worker's, both by a fixed rule and both reported in the result: a
``copy_if_clean`` row group is copied when it holds no deleted row, else re-encoded
(``CompactionGroup.resolve``); and a source that turns out not to be copyable makes the group
take its own fallback, every row group re-encoded.

Schema versions: a task writes its output in the group's schema (``CompactionGroup.schema_id``; the
task's ``schema``). The native rewrite only ever sees files in that schema: a row group of a source
written in another (an earlier schema of the table) is first read in the output's schema (renamed,
widened, added columns materialized, dropped ones left out: ``lamina.datafile.read_staged``), its
live rows written to a scratch file of its own, and that file's row groups re-encoded into the
output. A plan that would copy such a row group, or a native call given a file in another schema,
is refused (``SchemaMismatch``) before anything is written.

``GroupCompactor`` is plain Python (unit-testable without Ray); ``compact_group`` is the
task body that ``lamina.workers.runtime.run_tasks`` ships to Ray. A worker that dies is retried by
Ray; an error in a group (a corrupt source, say) is returned as a failed result so other
groups go on. Memory per task: ``read_batch_bytes`` of I/O buffer plus one output row group
(decoded rows + encoded pages), whatever the group's size; with indices, also the indexed
column of the output and its segment (~16 bytes a row for a btree); with sources in an earlier
schema, also one of their row groups decoded (twice: as read and in the output's schema), and on
local disk the scratch files of their live rows (about their share of the output's bytes).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import tempfile
import time
import traceback
import uuid
from dataclasses import dataclass
from types import SimpleNamespace
from typing import Any, NamedTuple

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from lamina import _native, evolution
from lamina.checksum import check, of_file
from lamina.clustering import Clustering
from lamina.datafile import WriteOptions, read_staged, reading, write_fragment
from lamina.deletion import read_deleted
from lamina.errors import InvalidArgument, LaminaError, SchemaMismatch
from lamina.faults import maybe_die
from lamina.index.options import IndexOptions
from lamina.index.segments import segment_for_outputs, segment_over
from lamina.io_pool import io_pool
from lamina.manifest import DATA_DIR, TRANSACTIONS_DIR, ClusterRange, Fragment, Manifest, RowGroup, find_fragments
from lamina.planner.clustering import CLUSTER
from lamina.planner.eligibility import COPY_IF_CLEAN, ENCODE, FULL_REWRITE, RowGroupAction
from lamina.planner.plan import CompactionGroup, CompactionPlan
from lamina.records import MAPPING_INLINE_RUNS, AddressMapping
from lamina.rewrite import id_ranges, live_offsets, mapping_runs
from lamina.store import ObjectStore, open_store
from lamina.store.base import scratch_dir
from lamina.transaction import GroupResult
from lamina.zones import Zone, merge_zones


class IndexToExtend(NamedTuple):
    """An index of the table that the output gets a segment of, in the same commit."""

    name: str
    uuid: str
    column: str
    kind: str
    details: dict
    #: The column's field today (with its field id): an output written in an earlier schema holds it
    #: under its physical name, or not at all (``lamina.evolution.source_of``). None: by ``column``.
    field: pa.Field | None = None


@dataclass(frozen=True)
class GroupTask:
    """Everything a worker needs for one group: a plain value Ray ships as it is."""

    uri: str
    storage_options: dict[str, Any] | None
    group: CompactionGroup
    fragments: tuple[Fragment, ...]
    #: The schema the output is written in (the group's ``schema_id``): today's, or the earlier schema
    #: every source shares when the group copies their chunks. Each source's own is ``Fragment.schema``.
    schema: pa.Schema
    write: WriteOptions
    read_batch_bytes: int
    stable_row_ids: bool
    indices: tuple[IndexToExtend, ...] = ()
    #: The table's clustering keys, for a ``cluster`` group.
    clustering: Clustering | None = None


def tasks_for(
    plan: CompactionPlan,
    manifest: Manifest,
    uri: str,
    storage_options: dict[str, Any] | None,
    write: WriteOptions,
    read_batch_bytes: int,
) -> list[GroupTask]:
    """One task per group of ``plan`` (made from ``manifest``, the version it was planned on)."""
    frags = find_fragments(manifest.fragments, (i for g in plan.groups for i in g.fragment_ids))
    today = evolution.with_ids(manifest.schema)
    indices = tuple(
        IndexToExtend(
            ix.name, ix.uuid, ix.column, ix.kind, dict(ix.details), today.field(ix.column) if ix.column in today.names else None
        )
        for ix in manifest.indices
    )
    registry = manifest.schema_registry()
    for g in plan.groups:
        if g.schema_id not in registry:
            raise SchemaMismatch(
                f"group {g.index} of the plan is written in schema v{g.schema_id}, which version {manifest.version} of "
                f"{uri} does not have (schemas {sorted(registry)}): the plan was made from another version; plan again"
            )
    clustering = Clustering.from_config(manifest.config, f"version {manifest.version}") if plan.clustering else None
    # A sorted run's row groups each hold a slice of the curve: smaller ones let statistics skip inside a fragment.
    sorted_run = dataclasses.replace(write, row_group_rows=min(write.row_group_rows, plan.options.cluster_row_group_rows))
    return [
        GroupTask(
            uri,
            storage_options,
            g,
            tuple(frags[i] for i in g.fragment_ids),
            registry[g.schema_id],
            sorted_run if g.mode == CLUSTER else write,
            read_batch_bytes,
            manifest.stable_row_ids,
            indices,
            clustering,
        )
        for g in plan.groups
    ]


class GroupCompactor:
    """Runs one group; the plain-Python core of the Ray task."""

    def run(self, task: GroupTask) -> GroupResult:
        started = time.perf_counter()
        g = task.group
        result = GroupResult(g.index, g.fragment_ids, g.mode, g.reason, ok=False, rows_in=g.rows, bytes_in=g.bytes)
        try:
            self._run(task, result)
            result.ok = True
        except LaminaError as e:
            result.error = f"{type(e).__name__}: {e}"
        except Exception as e:  # a bug must fail this group, not the job
            result.error = f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=5)}"
        result.seconds = time.perf_counter() - started
        return result

    def _run(self, task: GroupTask, result: GroupResult) -> None:
        if task.group.mode == CLUSTER:
            ClusterRewrite(task, result).run()
            return
        written_at = time.time()
        store = open_store(task.uri, task.storage_options)
        out_rel = f"{DATA_DIR}{uuid.uuid4().hex}.parquet"
        with contextlib.ExitStack() as staged:
            local = []
            deleted = []
            to_check: list[tuple[Fragment, str]] = []
            for frag in task.fragments:
                source = staged.enter_context(store.staged_input(frag.path, frag.file_bytes, batch_bytes=task.read_batch_bytes))
                if frag.checksum is not None:
                    to_check.append((frag, source.path))
                result.get_requests += source.requests
                deleted.append(read_deleted(store, frag))
                local.append(source.path)
            planned = task.group
            group = planned.resolve(task.fragments, deleted)
            result.resolved = [
                (planned.fragment_ids[p.source], p.row_group, r.action, r.why)
                for p, r in zip(planned.actions, group.actions)
                if p.action == COPY_IF_CLEAN
            ]
            kwargs = dict(
                row_group_rows=task.write.row_group_rows,
                row_group_bytes=task.write.row_group_bytes,
                zstd_level=task.write.zstd_level,
            )
            # A damaged source must never be copied into an output under a fresh, valid checksum. The
            # sources' checksums are computed beside the native rewrite (both release the GIL) and
            # checked before the output is published: a mismatch raises inside staged_output, which
            # then removes the output.
            checked = io_pool().submit(_check_sources, store, to_check)
            sources = _Sources(task, store, local, deleted, staged)
            with store.staged_output(out_rel) as out_local:
                try:
                    native = sources.actions(group)  # refuses a copy across schemas before anything is written
                    try:
                        meta = sources.rewrite(native, out_local, **kwargs)
                    except InvalidArgument as e:
                        if group.mode == FULL_REWRITE:
                            raise
                        group = group.as_full_rewrite(str(e))
                        result.mode, result.reason = group.mode, group.reason
                        meta = sources.rewrite(sources.actions(group), out_local, **kwargs)
                except Exception:
                    checked.result()  # a checksum mismatch explains a failed decode better than the decoder
                    raise
                checked.result()
                self._index(task, store, out_local, int(meta["rows"]), result)
        maybe_die()

        runs: list[tuple[int, int, int, int, int]] = []
        ids: list[np.ndarray] = []
        position = 0
        for frag in task.fragments:
            live = live_offsets(store, frag)
            runs.extend(mapping_runs(frag.id, live, position, 2**31))
            position += len(live)
            if task.stable_row_ids and frag.row_ids is not None:
                all_ids = np.concatenate([np.arange(s, e, dtype=np.int64) for s, e in frag.row_ids])
                ids.append(all_ids[live])
        if position != int(meta["rows"]):
            raise LaminaError(f"group {task.group.index}: wrote {meta['rows']} rows, the sources hold {position} live rows")
        result.fragments = [
            Fragment(
                id=-1,
                path=out_rel,
                rows=int(meta["rows"]),
                file_bytes=int(meta["file_bytes"]),
                row_groups=tuple(RowGroup(int(r), int(b)) for r, b in meta["row_groups"]),
                file_version=str(meta["file_version"]),
                row_ids=id_ranges(np.concatenate(ids)) if task.stable_row_ids and ids else None,
                checksum=meta.get("checksum"),
                zones=merge_zones([_zones_as(f, task.schema) for f in task.fragments]),
                schema=task.schema,
                written_at=written_at,
            )
        ]
        result.mapping = runs
        result.source_deletions = {f.id: (f.deletion.path if f.deletion else None) for f in task.fragments}
        result.rows_out = int(meta["rows"])
        result.bytes_out = int(meta["file_bytes"])
        result.row_groups_copied = int(meta["row_groups_copied"])
        result.row_groups_encoded = int(meta["row_groups_encoded"])

    @staticmethod
    def _index(task: GroupTask, store: ObjectStore, output: str, rows: int, result: GroupResult) -> None:
        """One segment per index over the output, so the rewrite commit keeps indices covering it.
        A failure leaves the output uncovered (scanned by reads, indexed by the next update)."""
        for ix in task.indices:
            try:
                options = IndexOptions.from_details(ix.details)
                outputs = [(output, rows)]
                seg = segment_for_outputs(store, ix.column, ix.kind, options, outputs, field=ix.field, physical=task.schema)
            except (LaminaError, OSError, pa.ArrowException) as e:
                result.warnings.append(f"index {ix.name!r} not extended over the output: {type(e).__name__}: {e}")
                continue
            result.index_segments[ix.name] = (ix.uuid, seg)


class _Sources:
    """A group's staged sources as the native rewrite takes them: the file of each source written in the
    output's schema as it is, and each row group of a source written in another schema re-encoded first,
    on first use, into a scratch file of its own in the output's schema (its live rows, read through
    ``lamina.evolution``), whose row groups the output then re-encodes. The native rewrite never sees a
    file in another schema than the output's: it would copy or decode its columns by name."""

    def __init__(self, task: GroupTask, store: ObjectStore, local: list[str], deleted: list[Any], scope: contextlib.ExitStack):
        self.task, self.store, self.local, self.deleted, self.scope = task, store, local, deleted, scope
        self.same = [evolution.layout(f.schema, task.schema).same for f in task.fragments]
        #: The native rewrite's sources (local file, deleted offsets), and for each the schema it is
        #: written in and what it holds (for errors).
        self.files: list[tuple[str, pa.Array]] = []
        self.schemas: list[pa.Schema] = []
        self.holds: list[str] = []
        #: Fragment position -> its file's place in ``files`` (sources in the output's schema).
        self.place: dict[int, int] = {}
        #: (fragment position, row group) -> the (place in ``files``, row group) holding its rows re-encoded.
        self.converted: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self.scratch: str | None = None
        self.opened: dict[int, pq.ParquetFile] = {}
        for pos, (same, f) in enumerate(zip(self.same, task.fragments)):
            if same:
                self.place[pos] = len(self.files)
                self.files.append((local[pos], pa.array(deleted[pos], type=pa.uint32())))
                self.schemas.append(task.schema if f.schema is None else f.schema)
                self.holds.append(f"fragment {f.id} ({f.path}, schema v{f.schema_id})")

    def actions(self, group: CompactionGroup) -> list[tuple[str, int, int]]:
        """The native actions of ``group``'s: a row group of a source in another schema becomes the
        row groups of its scratch file, re-encoded; a copy of one is refused."""
        out: list[tuple[str, int, int]] = []
        for a in group.actions:
            if self.same[a.source]:
                out.append((a.action, self.place[a.source], a.row_group))
                continue
            if a.action != ENCODE:
                f = self.task.fragments[a.source]
                raise SchemaMismatch(
                    f"group {group.index}: the plan copies row group {a.row_group} of fragment {f.id} ({f.path}), written "
                    f"in schema v{f.schema_id}, into an output written in schema v{group.schema_id}: column chunks are "
                    f"copied only into a file of their own schema. Nothing was written; plan the compaction again"
                )
            out.extend(("encode", place, rg) for place, rg in self._convert(a))
        return out

    def rewrite(self, actions: list[tuple[str, int, int]], output: str, **kwargs: Any) -> dict[str, Any]:
        """The native rewrite of ``actions`` into ``output``, in the task's schema; refused if one of its
        files is written in another (a last check: ``actions`` converts every such source first)."""
        for schema, holds in zip(self.schemas, self.holds):
            if not evolution.same(schema, self.task.schema):
                raise SchemaMismatch(
                    f"group {self.task.group.index}: {holds} is written in another schema than the output's "
                    f"(v{self.task.group.schema_id}): the native rewrite would read its columns by name. Nothing was written"
                )
        return _native.rewrite_data_file(self.files, actions, self.task.schema, output, **kwargs)

    def _convert(self, a: RowGroupAction) -> list[tuple[int, int]]:
        key = (a.source, a.row_group)
        if key in self.converted:
            return self.converted[key]
        task, frag = self.task, self.task.fragments[a.source]
        first = sum(g.rows for g in frag.row_groups[: a.row_group])
        rows = frag.row_groups[a.row_group].rows
        deleted = np.asarray(self.deleted[a.source], dtype=np.int64)
        lo, hi = np.searchsorted(deleted, [first, first + rows])
        with reading(self.store, frag, "cannot be decoded"):
            if a.source not in self.opened:  # its footer parsed once for all its row groups
                self.opened[a.source] = pq.ParquetFile(self.local[a.source])
            table = read_staged(self.opened[a.source], frag, task.schema, [a.row_group])
        if hi > lo:
            keep = np.ones(rows, dtype=bool)
            keep[deleted[lo:hi] - first] = False
            table = table.filter(pa.array(keep))
        out: list[tuple[int, int]] = []
        if table.num_rows:
            if self.scratch is None:
                self.scratch = self.scope.enter_context(tempfile.TemporaryDirectory(prefix="lamina-conform-", dir=scratch_dir()))
            path = os.path.join(self.scratch, f"{a.source}-{a.row_group}.parquet")
            meta = _native.write_data_file(
                path,
                task.schema,
                table.to_batches(),
                row_group_rows=task.write.row_group_rows,
                row_group_bytes=task.write.row_group_bytes,
                zstd_level=1,  # read once, right away: the output is encoded at the table's level
                sync=False,
            )
            place = len(self.files)
            self.files.append((path, pa.array([], type=pa.uint32())))
            self.schemas.append(task.schema)
            self.holds.append(f"row group {a.row_group} of fragment {frag.id} re-encoded in v{task.group.schema_id}")
            out = [(place, rg) for rg in range(len(meta["row_groups"]))]
        self.converted[key] = out
        return out


def _zones_as(fragment: Fragment, schema: pa.Schema) -> Any:
    """``fragment`` with its zone maps as columns of ``schema`` (the output's), for ``merge_zones``:
    renamed, those of columns the output does not have left out (so the merged zone of such a column,
    e.g. one added since, is unknown)."""
    lay = evolution.layout(fragment.schema, schema)
    if lay.same:
        return fragment
    zones: tuple[Zone, ...] | None = fragment.zones
    return SimpleNamespace(zones=None if zones is None else lay.zones(zones))


class ClusterRewrite:
    """A ``cluster`` group: the live rows of its sources sorted along the table's curve and cut into
    fragments of the targets with disjoint curve ranges (one sorted run), every row's move in the mapping.

    Memory: about three times the group's live rows decoded (as read, as sorted, and the output being
    encoded); the planner keeps a group's source bytes under ``cluster_max_bytes``."""

    def __init__(self, task: GroupTask, result: GroupResult):
        assert task.clustering is not None, "a cluster group is planned only for a table with clustering keys"
        self.task, self.result, self.clustering = task, result, task.clustering
        self.store = open_store(task.uri, task.storage_options)

    def run(self) -> None:
        task, result, store = self.task, self.result, self.store
        if task.stable_row_ids:
            raise InvalidArgument("clustering reorders rows; a table with stable row ids cannot be clustered")
        rows, source_of, offsets = self._read()
        order, positions = self.clustering.sort_order(rows)
        ordered = rows.take(pa.array(order))
        old_fragment, old_offset = source_of[order], offsets[order]
        cuts = self._cuts(ordered, positions)
        run = task.group.cluster_run or uuid.uuid4().hex[:16]
        key = self.clustering.key
        outputs: list[Fragment] = []
        try:
            for start, end in cuts:
                chunk = ordered.slice(start, end - start)
                frag = write_fragment(store, task.schema, chunk.to_batches(), task.write)
                outputs.append(
                    dataclasses.replace(frag, cluster=ClusterRange(key, run, int(positions[start]), int(positions[end - 1])))
                )
            maybe_die()
            result.mapping = _moves(old_fragment, old_offset, cuts)
            if len(result.mapping) > MAPPING_INLINE_RUNS:
                result.mapping_file = f"{TRANSACTIONS_DIR}{uuid.uuid4().hex}.mapping.arrow"
                store.put(result.mapping_file, AddressMapping.from_runs(result.mapping).to_bytes())
            self._index(ordered, cuts)
        except BaseException:
            store.delete([f.path for f in outputs] + ([result.mapping_file] if result.mapping_file else []))
            raise
        result.fragments = outputs
        result.rows_out = sum(f.rows for f in outputs)
        result.bytes_out = sum(f.file_bytes for f in outputs)
        result.row_groups_encoded = sum(len(f.row_groups) for f in outputs)
        if result.rows_out != ordered.num_rows:
            raise LaminaError(
                f"group {task.group.index}: wrote {result.rows_out} rows, the sources hold {ordered.num_rows} live rows"
            )

    def _read(self) -> tuple[pa.Table, np.ndarray, np.ndarray]:
        """The live rows of every source (table order) in today's schema, and each row's source fragment id
        and offset. Each source is staged and its checksum checked before anything is written."""
        task, result, store = self.task, self.result, self.store
        tables, sources, offsets = [], [], []
        with contextlib.ExitStack() as staged:
            to_check = []
            for frag in task.fragments:
                source = staged.enter_context(store.staged_input(frag.path, frag.file_bytes, batch_bytes=task.read_batch_bytes))
                result.get_requests += source.requests
                if frag.checksum is not None:
                    to_check.append((frag, source.path))
                result.source_deletions[frag.id] = frag.deletion.path if frag.deletion else None
                live = live_offsets(store, frag)
                with reading(store, frag, "cannot be decoded"):  # in today's schema, whichever it was written in
                    table = read_staged(source.path, frag, task.schema)
                tables.append(table if len(live) == frag.rows else table.take(pa.array(live)))
                sources.append(np.full(len(live), frag.id, dtype=np.int64))
                offsets.append(live.astype(np.int64))
            _check_sources(store, to_check)
        rows = pa.concat_tables(tables) if tables else task.schema.empty_table()
        return rows, np.concatenate(sources or [np.zeros(0, np.int64)]), np.concatenate(offsets or [np.zeros(0, np.int64)])

    def _cuts(self, ordered: pa.Table, positions: np.ndarray) -> list[tuple[int, int]]:
        """Row ranges of the outputs: the planned number of outputs (``CompactionGroup.outputs``: the
        live rows and bytes over the compaction's targets) of equal rows, each end moved forward past
        equal curve positions so that the outputs' ranges do not overlap (unless that would double an
        output: many rows at one position, e.g. an all-equal key, are cut where the target falls)."""
        n = ordered.num_rows
        step = max(1, -(-n // max(1, self.task.group.outputs)))
        cuts, start = [], 0
        while start < n:
            end = min(n, start + step)
            if end < n and positions[end] == positions[end - 1]:
                run_end = int(np.searchsorted(positions, positions[end - 1], side="right"))
                end = run_end if run_end - start <= 2 * step else end
            cuts.append((start, end))
            start = end
        return cuts

    def _index(self, ordered: pa.Table, cuts: list[tuple[int, int]]) -> None:
        """One segment per index over the outputs, from the sorted rows in memory (a failure leaves them uncovered)."""
        for ix in self.task.indices:  # the rows are in today's schema: the column by its name today
            try:
                values = [ordered.column(ix.column).slice(a, b - a) for a, b in cuts]
                seg = segment_over(self.store, ix.kind, IndexOptions.from_details(ix.details), values)
            except (LaminaError, OSError, pa.ArrowException, KeyError) as e:
                self.result.warnings.append(f"index {ix.name!r} not extended over the outputs: {type(e).__name__}: {e}")
                continue
            self.result.index_segments[ix.name] = (ix.uuid, seg)


def _moves(old_fragment: np.ndarray, old_offset: np.ndarray, cuts: list[tuple[int, int]]) -> np.ndarray:
    """The mapping runs ``(old fragment, old offset, output, new offset, length)`` of rows laid out in
    sorted order (row i of the sorted rows came from ``old_fragment[i]`` at ``old_offset[i]``), cut into
    outputs at ``cuts``; consecutive rows that stay consecutive make one run."""
    n = len(old_offset)
    if n == 0:
        return np.zeros((0, 5), dtype=np.int64)
    output = np.zeros(n, dtype=np.int64)
    new_offset = np.arange(n, dtype=np.int64)
    for j, (a, b) in enumerate(cuts):
        output[a:b] = j
        new_offset[a:b] -= a
    same = (np.diff(old_fragment) == 0) & (np.diff(old_offset) == 1) & (np.diff(output) == 0)
    starts = np.concatenate([[0], np.flatnonzero(~same) + 1])
    lengths = np.diff(np.concatenate([starts, [n]]))
    return np.stack([old_fragment[starts], old_offset[starts], output[starts], new_offset[starts], lengths], axis=1)


def _check_sources(store: ObjectStore, staged: list[tuple[Fragment, str]]) -> None:
    """Raises ``CorruptFile`` for the first staged source whose checksum is not the manifest's."""
    for frag, path in staged:
        check(frag.checksum, of_file(path), f"data file {store.describe(frag.path)} of fragment {frag.id}")


def compact_group(task: GroupTask) -> GroupResult:
    """The task body ``lamina.workers.runtime.run_tasks`` runs on Ray."""
    return GroupCompactor().run(task)
