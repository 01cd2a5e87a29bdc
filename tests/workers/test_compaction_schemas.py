"""The compaction worker on a table whose fragments are written in three of its schemas (added, renamed, dropped,
widened and dropped-then-added-again columns), without Ray: the rows come out as the model says in every column,
chunks are copied among fragments of one schema only, the rest is re-encoded into today's schema, indices keep
answering as a scan does, and converging leaves every fragment in today's schema."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pyarrow.parquet as pq

import lamina
from lamina.compaction import CompactionSummary, commit_results
from lamina.planner import plan_compaction
from lamina.planner.eligibility import COPY, RowGroupAction
from lamina.rewrite import full_rewrite
from lamina.transaction import Rewrite
from lamina.workers.compaction import GroupCompactor, tasks_for
from tests.compaction_helpers import (
    EVOLVED_OPTIONS,
    assert_rows_are_the_model,
    assert_sorted_along_the_curve,
    evolved_table,
)


def run(t: lamina.Table, options=EVOLVED_OPTIONS):
    """Plans, runs every group here and commits; returns the plan and the results."""
    plan = plan_compaction(t.manifest, options, t.uri)
    tasks = tasks_for(plan, t.manifest, t.uri, t.storage_options, t.write_options, options.read_batch_bytes)
    results = [GroupCompactor().run(task) for task in tasks]
    assert all(r.ok for r in results), [r.error for r in results]
    commit_results(t, t.manifest, results, CompactionSummary.for_plan(plan))
    t.reload()
    return plan, results


def chunks(t: lamina.Table, path: str, rg: int) -> list[bytes]:
    raw = t.store.get(path)
    meta = pq.ParquetFile(pa.py_buffer(raw)).metadata.row_group(rg)
    out = []
    for i in range(meta.num_columns):
        c = meta.column(i)
        start = c.dictionary_page_offset if c.has_dictionary_page else c.data_page_offset
        out.append(raw[start : start + c.total_compressed_size])
    return out


def assert_index_answers_as_a_scan(t: lamina.Table) -> None:
    (ix,) = t.list_indices()
    assert ix.column == "key"
    for value in ("k5", "k96", "k0"):
        flt = f"key = '{value}'"
        assert t.to_arrow(filter=flt).sort_by("id").equals(t.to_arrow(filter=flt, use_index=False).sort_by("id"))
    assert "index 'k_btree'" in t.explain("key = 'k5'")


def test_old_schemas_are_copied_among_themselves_or_re_encoded_into_todays(table_location):
    uri, opts = table_location
    t, model = evolved_table(uri, opts)
    sources = {f.id: f for f in t.manifest.fragments}
    plan, results = run(t)
    assert [(g.fragment_ids, g.mode, g.reason, g.schema_id) for g in plan.groups] == [
        ((0, 1), "binary_copy", "all_row_groups_large", 0),
        ((2, 3, 4), "hybrid", "schema v2 vs v5", 5),
    ]
    copy, hybrid = results
    assert (copy.row_groups_copied, copy.row_groups_encoded) == (2, 0)
    assert hybrid.row_groups_copied == 1  # fragment 3's (today's schema); fragment 2's rows re-encoded
    assert sorted(copy.index_segments) == sorted(hybrid.index_segments) == ["k_btree"]

    # the copy keeps its sources' schema, and their chunks byte for byte
    assert [f.schema_id for f in t.manifest.fragments] == [0, 5, 5]
    assert sorted(t.manifest.schemas) == [0], "schemas no fragment is written in any more are forgotten"
    out = t.manifest.fragments[0]
    assert chunks(t, out.path, 0) == chunks(t, sources[0].path, 0) and chunks(t, out.path, 1) == chunks(t, sources[1].path, 0)
    assert pq.read_schema(pa.BufferReader(t.store.get(t.manifest.fragments[1].path))).names == t.schema.names

    assert_rows_are_the_model(t, model)
    assert_index_answers_as_a_scan(t)
    assert t.to_arrow(filter="b IS NULL").num_rows == sum(1 for r in model.values() if r["b"] is None)
    assert t.to_arrow(filter="d = 7").num_rows == 8000  # the default the old rows read

    # converging: every fragment in today's schema, the registry empty, rows and indices unchanged
    plan, results = run(t, EVOLVED_OPTIONS.with_overrides(converge_schemas=True))
    assert [(g.fragment_ids, g.mode, g.reason) for g in plan.groups] == [((6,), "full_rewrite", "schema v0 vs v5")]
    assert {f.schema_id for f in t.manifest.fragments} == {5} and t.manifest.schemas == {}
    assert_rows_are_the_model(t, model)
    assert_index_answers_as_a_scan(t)
    for f in t.manifest.fragments:  # the dropped b's values are gone from the files themselves
        physical = pq.read_table(pa.BufferReader(t.store.get(f.path)))
        assert physical.column_names == t.schema.names
        assert not any(v.startswith(("v0-", "v2-")) for v in physical.column("b").drop_null().to_pylist())
    assert plan_compaction(t.manifest, EVOLVED_OPTIONS.with_overrides(converge_schemas=True)).groups == ()


def test_a_plan_copying_across_schemas_is_refused_before_anything_is_written(local_table_uri):
    t, _ = evolved_table(local_table_uri, index=False)
    plan = plan_compaction(t.manifest, EVOLVED_OPTIONS, t.uri)
    good = plan.groups[1]  # fragments 2 (v2), 3, 4 into v5
    forged = dataclasses.replace(
        good, actions=tuple(RowGroupAction(COPY, a.source, a.row_group, "large") if a.source == 0 else a for a in good.actions)
    )
    (task,) = tasks_for(dataclasses.replace(plan, groups=(forged,)), t.manifest, t.uri, None, t.write_options, 1 << 26)
    files = sorted(o.path for o in t.store.list("data/"))
    r = GroupCompactor().run(task)
    assert not r.ok and r.error.startswith("SchemaMismatch: group 1: the plan copies row group 0 of fragment 2")
    assert "column chunks are copied only into a file of their own schema" in r.error
    assert sorted(o.path for o in t.store.list("data/")) == files


def test_clustering_an_evolved_table(local_table_uri):
    t, model = evolved_table(local_table_uri)
    t.set_clustering(["id"], "linear")
    options = EVOLVED_OPTIONS.with_overrides(cluster_tier_ratio=2, cluster_merge_width=2, converge_schemas=True)
    plan, results = run(t, options)
    assert {g.mode for g in plan.groups} == {"cluster"} and any("schema v0, v2 vs v5" in g.reason for g in plan.groups)
    assert all(sorted(r.index_segments) == ["k_btree"] for r in results)
    assert {f.schema_id for f in t.manifest.fragments} == {5} and t.manifest.schemas == {}
    assert_rows_are_the_model(t, model)
    assert_sorted_along_the_curve(t)
    assert_index_answers_as_a_scan(t)


def test_the_reference_rewrite_reads_old_schemas_as_todays(local_table_uri):
    t, model = evolved_table(local_table_uri, index=False)
    ids = [f.id for f in t.manifest.fragments]
    t.commit_transaction(Rewrite(t.version, [full_rewrite(t.store, t.manifest, ids, t.write_options)]))
    assert {f.schema_id for f in t.manifest.fragments} == {5} and t.manifest.schemas == {}
    assert_rows_are_the_model(t, model)


def test_a_damaged_source_in_an_earlier_schema_fails_its_group_naming_the_file(local_table_uri):
    t, _ = evolved_table(local_table_uri, index=False)
    plan = plan_compaction(t.manifest, EVOLVED_OPTIONS, t.uri)
    task = tasks_for(plan, t.manifest, t.uri, None, t.write_options, 1 << 26)[1]
    victim = task.fragments[0]  # written in v2: its rows are re-encoded
    data = bytearray(t.store.get(victim.path))
    data[len(data) // 3] ^= 0xFF  # same size, another checksum
    t.store.put(victim.path, bytes(data))
    r = GroupCompactor().run(task)
    assert not r.ok and victim.path in r.error and "CorruptFile" in r.error
    assert sorted(o.path for o in t.store.list("data/")) == sorted(f.path for f in t.manifest.fragments)


def test_the_native_rewrite_is_never_given_a_file_in_another_schema(local_table_uri, monkeypatch):
    """The last check before the native call: even if the worker took an old file for one in the output's
    schema (here: a layout that says every file is today's), the call is refused, nothing written."""
    from lamina import evolution

    t, _ = evolved_table(local_table_uri, index=False)
    plan = plan_compaction(t.manifest, EVOLVED_OPTIONS, t.uri)
    task = tasks_for(plan, t.manifest, t.uri, None, t.write_options, 1 << 26)[1]
    monkeypatch.setattr(evolution, "layout", lambda physical, today: evolution.Layout(today, today, True, {}))
    files = sorted(o.path for o in t.store.list("data/"))
    r = GroupCompactor().run(task)
    assert not r.ok and r.error.startswith("SchemaMismatch: group 1: fragment 2 (")
    assert "schema v2) is written in another schema than the output's (v5)" in r.error
    assert sorted(o.path for o in t.store.list("data/")) == files


def test_converging_ends_after_a_change_that_left_the_files_as_they_were(local_table_uri):
    """A column added and dropped again makes a schema id whose files are those of the one before: new
    files take today's id, so converging re-encodes the old ones once, then has nothing more to do."""
    t, model = evolved_table(local_table_uri, index=False)
    t.add_columns(pa.field("tmp", pa.int8()))
    t.drop_columns(["tmp"])  # today's schema: the columns of the one before the add, under a new id
    t.append(t.to_arrow(filter="id < 3").cast(t.schema).set_column(0, "id", pa.array([30_000, 30_001, 30_002])))
    for r in [dict(model[i], id=30_000 + i) for i in range(3)]:
        model[r["id"]] = r
    assert t.manifest.fragments[-1].schema_id == t.manifest.schema_id == 7
    converge = EVOLVED_OPTIONS.with_overrides(converge_schemas=True)
    run(t, converge)
    assert {f.schema_id for f in t.manifest.fragments} == {7} and t.manifest.schemas == {}
    assert plan_compaction(t.manifest, converge).groups == ()
    assert_rows_are_the_model(t, model)
