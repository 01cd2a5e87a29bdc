"""The compaction worker without Ray: modes, byte-identical copies, S3 staging, failures as results."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

import lamina
from planner import plan_compaction
from tests.compaction_helpers import MIXED_MODES, MIXED_OPTIONS, mixed_table
from workers.compaction import GroupCompactor, tasks_for as group_tasks


def tasks_for(t, options=MIXED_OPTIONS, storage_options=None):
    plan = plan_compaction(t.manifest, options, t.uri)
    return plan, group_tasks(plan, t.manifest, t.uri, storage_options, t.write_options, options.read_batch_bytes)


def chunk(store, path, rg, col):
    raw = store.get(path)
    c = pq.ParquetFile(pa.py_buffer(raw)).metadata.row_group(rg).column(col)
    start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
    return raw[start:start + c.total_compressed_size]


def test_every_mode_writes_the_live_rows_in_order(table_location):
    uri, opts = table_location
    t = mixed_table(uri, opts)
    plan, tasks = tasks_for(t, storage_options=opts)
    assert [(g.mode, g.reason) for g in plan.groups] == MIXED_MODES
    for task in tasks:
        r = GroupCompactor().run(task)
        assert r.ok, r.error
        got = pq.read_table(pa.BufferReader(t.store.get(r.fragment.path))).column("id").to_pylist()
        want = t.to_arrow(columns=["id"], filter=f"id >= {task.group.fragment_ids[0] * 4000} AND id < {(task.group.fragment_ids[-1] + 1) * 4000}")
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
        assert chunk(t.store, r.fragment.path, 0, col) == chunk(t.store, src[0].path, 0, col)
        assert chunk(t.store, r.fragment.path, 1, col) == chunk(t.store, src[1].path, 0, col)
    hybrid = GroupCompactor().run(tasks[1])
    assert (hybrid.mode, hybrid.row_groups_copied, hybrid.row_groups_encoded) == ("hybrid", 1, 1)


def test_unknown_metadata_falls_back_to_full_rewrite(local_table_uri):
    t = lamina.create_table(local_table_uri, mixed_table(local_table_uri + "-src").schema)
    from tests.lamina.helpers import rows
    from tests.compaction_helpers import append_foreign_file

    t.append(rows(0, 4000), row_group_rows=4000)
    append_foreign_file(t, rows(4000, 4000).replace_schema_metadata({"pandas": "{}"}))
    frags = list(t.manifest.fragments)
    t._manifest = t.manifest.replace(fragments=(frags[0], frags[1].__class__(**{**frags[1].__dict__, "file_version": "1"})))
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
