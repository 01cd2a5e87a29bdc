"""The compaction worker without Ray: modes, byte-identical copies, S3 staging, failures as results."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq

import lamina
from lamina.compaction import CompactionSummary, commit_results
from lamina.filter import parse_filter
from lamina.planner import plan_compaction
from lamina.workers.compaction import GroupCompactor
from lamina.workers.compaction import tasks_for as group_tasks
from tests.compaction_helpers import (
    DELETION_AWARE_COPIES,
    DELETION_AWARE_OPTIONS,
    MIXED_MODES,
    MIXED_OPTIONS,
    deletion_aware_table,
    mixed_table,
)


def tasks_for(t, options=MIXED_OPTIONS, storage_options=None):
    plan = plan_compaction(t.manifest, options, t.uri)
    return plan, group_tasks(plan, t.manifest, t.uri, storage_options, t.write_options, options.read_batch_bytes)


def chunk(store, path, rg, col):
    raw = store.get(path)
    c = pq.ParquetFile(pa.py_buffer(raw)).metadata.row_group(rg).column(col)
    start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
    return raw[start : start + c.total_compressed_size]


def test_every_mode_writes_the_live_rows_in_order(table_location):
    uri, opts = table_location
    t = mixed_table(uri, opts)
    plan, tasks = tasks_for(t, storage_options=opts)
    assert [(g.mode, g.reason) for g in plan.groups] == MIXED_MODES
    for task in tasks:
        r = GroupCompactor().run(task)
        assert r.ok, r.error
        got = pq.read_table(pa.BufferReader(t.store.get(r.fragments[0].path))).column("id").to_pylist()
        first, last = task.group.fragment_ids[0], task.group.fragment_ids[-1]
        want = t.to_arrow(columns=["id"], filter=f"id >= {first * 4000} AND id < {(last + 1) * 4000}")
        assert got == want.column("id").to_pylist()
        assert r.rows_out == len(got) == sum(f.live_rows for f in task.fragments)
        assert sum(run[4] for run in r.mapping) == r.rows_out
        if opts:  # S3: sources staged with ranged GETs of at most read_batch_bytes
            assert r.get_requests == len(task.fragments)


def test_binary_copy_chunks_are_byte_identical(local_table_uri):
    t = mixed_table(local_table_uri)
    _, tasks = tasks_for(t)
    r = GroupCompactor().run(tasks[0])
    assert (r.mode, r.row_groups_copied, r.row_groups_encoded) == ("binary_copy", 2, 0)
    src = tasks[0].fragments
    for col in range(len(t.schema)):
        assert chunk(t.store, r.fragments[0].path, 0, col) == chunk(t.store, src[0].path, 0, col)
        assert chunk(t.store, r.fragments[0].path, 1, col) == chunk(t.store, src[1].path, 0, col)
    hybrid = GroupCompactor().run(tasks[1])
    assert (hybrid.mode, hybrid.row_groups_copied, hybrid.row_groups_encoded) == ("hybrid", 1, 1)


def test_unknown_metadata_falls_back_to_full_rewrite(local_table_uri):
    t = lamina.create_table(local_table_uri, mixed_table(local_table_uri + "-src").schema)
    from tests.compaction_helpers import append_foreign_file
    from tests.lamina.helpers import rows

    t.append(rows(0, 4000), row_group_rows=4000)
    append_foreign_file(t, rows(4000, 4000).replace_schema_metadata({"pandas": "{}"}))
    frags = list(t.manifest.fragments)
    t._manifest = t.manifest.replace(fragments=(frags[0], dataclasses.replace(frags[1], file_version="1")))
    _, tasks = tasks_for(t)
    r = GroupCompactor().run(tasks[0])
    assert r.ok, r.error
    assert r.mode == "full_rewrite" and r.reason.startswith("fallback:")


def test_corrupt_source_fails_the_group_naming_the_file(local_table_uri):
    t = mixed_table(local_table_uri)
    _, tasks = tasks_for(t)
    victim = tasks[0].fragments[1]
    data = t.store.get(victim.path)
    t.store.put(victim.path, data[: len(data) // 3])
    r = GroupCompactor().run(tasks[0])
    assert not r.ok and victim.path in r.error and "CorruptFile" in r.error
    assert list(o.path for o in t.store.list("data/")) == sorted(f.path for f in t.manifest.fragments), "no output left behind"


def test_clean_row_groups_of_fragments_with_deletions_are_copied(table_location):
    uri, opts = table_location
    t = deletion_aware_table(uri, opts)
    t.create_index("id", "btree")
    before = t.to_arrow()
    plan, tasks = tasks_for(t, DELETION_AWARE_OPTIONS, storage_options=opts)
    (g,) = plan.groups
    assert (g.mode, g.reason) == ("hybrid", "some_row_groups_small_or_deleted")
    assert [a.action for a in g.actions] == ["copy"] * 3 + ["copy_if_clean"] * 3 + ["encode"] * 6 + ["copy_if_clean"] * 3
    text = plan.describe()
    assert "row groups: 3 copied, 6 copied if clean, 6 re-encoded (2:0-1, 3:0-3)" in text
    assert "fragment 1: rg 0-2 copy_if_clean: maybe_deleted (the fragment has 6 deleted rows" in text

    r = GroupCompactor().run(tasks[0])
    assert r.ok, r.error
    assert r.resolved == [
        (1, 0, "copy", "clean (none of the fragment's 6 deleted rows)"),
        (1, 1, "encode", "deleted (6 rows)"),
        (1, 2, "copy", "clean (none of the fragment's 6 deleted rows)"),
        (4, 0, "copy", "clean (none of the fragment's 3 deleted rows)"),
        (4, 1, "copy", "clean (none of the fragment's 3 deleted rows)"),
        (4, 2, "encode", "deleted (3 rows)"),
    ]
    assert (r.mode, r.row_groups_copied) == ("hybrid", len(DELETION_AWARE_COPIES))
    # Output row groups: A0 A1 A2 B0 [B1] B2 [C+D] E0 E1 [E2]: copied ones are byte-identical to their source.
    copied_at = [0, 1, 2, 3, 5, 7, 8]
    assert [rg.rows for rg in r.fragments[0].row_groups] == [4000, 4000, 4000, 4000, 3994, 4000, 2997, 4000, 4000, 3997]
    leaves = pq.ParquetFile(pa.BufferReader(t.store.get(r.fragments[0].path))).metadata.num_columns
    for out_rg, (src, src_rg) in zip(copied_at, DELETION_AWARE_COPIES):
        for col in range(leaves):
            assert chunk(t.store, r.fragments[0].path, out_rg, col) == chunk(t.store, tasks[0].fragments[src].path, src_rg, col)
    assert sum(run[4] for run in r.mapping) == r.rows_out == before.num_rows

    summary = CompactionSummary.for_plan(plan)
    summary.record(r)
    assert summary.groups[0]["resolved"][1] == "fragment 1 rg 1: encode (deleted (6 rows))"
    commit_results(t, t.manifest, [r], summary)
    after = lamina.open_table(uri, storage_options=opts)
    assert [f.deleted_rows for f in after.fragments()] == [0] and len(after.fragments()) == 1
    assert after.to_arrow().equals(before), "every column of every live row, in order"
    assert after.count_rows("id IN (16000, 16005, 24001, 24500, 24999, 35000, 38998, 38999)") == 0
    (info,) = after.list_indices()
    assert info.uncovered_fragments == 0
    everything = after.to_arrow(with_row_address=True)
    for flt in [
        "id = 16006",
        "id IN (0, 15999, 16000, 16006, 24002, 26999, 38997, 38999)",
        "id >= 15990 AND id < 16010",
        "id >= 34990 AND id < 35010",
        "id > 38990",
    ]:
        assert "scan for 0 fragment(s)" in after.explain(flt)
        got = after.to_arrow(filter=flt, with_row_address=True)
        assert got.equals(everything.filter(parse_filter(flt, after.schema).expression)), flt


def test_full_rewrite_splices_the_pages_of_numeric_columns(table_location):
    """Issue 14 item 1: a full rewrite of small fragments carries the pages of fixed-width columns
    as they are (the output chunk is the sources' chunks one after the other), re-encodes the
    strings, and every reader gets every value back (pyarrow here, statistics and page index too)."""
    from lamina.jobs.demo import SCHEMA, sample_rows
    from lamina.planner import CompactionOptions

    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    data = sample_rows(0, 8 * 3000)
    for i in range(8):
        t.append(data.slice(i * 3000, 3000))
    options = CompactionOptions(target_rows_per_fragment=10**6)
    plan, tasks = tasks_for(t, options, storage_options=opts)
    assert [g.mode for g in plan.groups] == ["full_rewrite"]
    r = GroupCompactor().run(tasks[0])
    assert r.ok and r.rows_out == 24_000, r.error
    raw = t.store.get(r.fragments[0].path)
    f = pq.ParquetFile(pa.py_buffer(raw))
    assert f.read().equals(data)
    src = tasks[0].fragments
    leaves = [f.metadata.schema.column(i).path for i in range(f.metadata.num_columns)]
    for col, path in enumerate(leaves):
        spliced = chunk(t.store, r.fragments[0].path, 0, col) == b"".join(chunk(t.store, s.path, 0, col) for s in src)
        # id, ts, value, embedding.list.item, attrs.code: fixed-width, spliced; host, attrs.region: dictionary strings.
        assert spliced == (path not in ("host", "attrs.region")), path
    ids = f.metadata.row_group(0).column(0).statistics
    assert (ids.min, ids.max, ids.null_count) == (0, 23_999, 0)
    assert f.metadata.row_group(0).column(0).has_offset_index and f.metadata.row_group(0).column(0).has_column_index
    filtered = pq.read_table(pa.BufferReader(raw), filters=[("id", ">=", 10_000), ("id", "<", 10_005)])
    assert filtered.column("id").to_pylist() == list(range(10_000, 10_005))
