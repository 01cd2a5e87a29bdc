"""Clustering a table: set_clustering's checks, rows and zone maps kept by a clustering rewrite on every key
type and curve, indices, deletes and appends racing it (through the mapping file), cleanup of mapping files,
the overlap metric, and boundaries sampled again when the data drifts."""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.clustering import Clustering, choose
from lamina.compaction import CompactionSummary, commit_results, compact, resample_if_drifted
from lamina.errors import CorruptFile, InvalidArgument, InvalidConfig
from lamina.manifest import load_manifest
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.clustering import CLUSTER
from lamina.records import MAPPING_INLINE_RUNS, AddressMapping, RewriteRecord
from lamina.workers.compaction import GroupCompactor, tasks_for
from tests.compaction_helpers import assert_sorted_along_the_curve, assert_zones_bound_rows, canon, data_of

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("x", pa.float64()),  # normal, with nulls and NaN
        ("y", pa.int64()),  # uniform 0..999
        ("z", pa.int64()),  # Zipf: most rows 1 or 2
        ("c", pa.int64()),  # one value
        ("s", pa.string()),  # 40 words, nulls, and long strings sharing a 70-byte prefix
        ("ts", pa.timestamp("us")),
        ("tags", pa.list_(pa.int32())),
        ("flag", pa.bool_()),
    ]
)
BATCH, BATCHES = 125, 16  # 125 rows: tier 3 of ratio 4; 16 of them cascade into one sorted run
OPTIONS = CompactionOptions(target_rows_per_fragment=250, max_concurrency=2, cluster_tier_ratio=4, cluster_merge_width=4)
#: Rows spread over several sources, and every row of the first source (it leaves the version).
DOOMED = "id IN (3, 130, 777, 1500, 1999) OR s = 'w5' OR id < 125"


def batch(start: int, n: int = BATCH, seed: int = 0) -> pa.Table:
    rng = np.random.default_rng(seed * 100_003 + start)
    x = rng.normal(size=n)
    x[rng.random(n) < 0.05] = np.nan
    words = np.array([f"w{i}" for i in range(40)] + ["p" * 70 + str(i) for i in range(3)], dtype=object)
    s = words[rng.integers(0, len(words), n)]
    ts = np.datetime64("2024-01-01T00:00:00", "us") + rng.integers(0, 10**12, n).astype("timedelta64[us]")
    return pa.table(
        {
            "id": np.arange(start, start + n, dtype=np.int64),
            "x": pa.array(x, mask=rng.random(n) < 0.05),
            "y": rng.integers(0, 1000, n),
            "z": np.minimum(rng.zipf(1.6, n), 10**6),
            "c": np.full(n, 7, dtype=np.int64),
            "s": pa.array(s, mask=rng.random(n) < 0.05, type=pa.string()),
            "ts": pa.array(ts, mask=rng.random(n) < 0.05),
            "tags": pa.array([None if i % 11 == 0 else list(range(i % 4)) for i in range(n)], pa.list_(pa.int32())),
            "flag": rng.random(n) < 0.5,
        },
        schema=SCHEMA,
    )


def survivors(rows: pa.Table) -> pa.Table:
    """The rows ``DOOMED`` does not delete."""
    ids, s = rows.column("id"), rows.column("s")
    doomed = pc.or_kleene(pc.or_kleene(pc.is_in(ids, pa.array([3, 130, 777, 1500, 1999])), pc.equal(s, "w5")), pc.less(ids, 125))
    return rows.filter(pc.invert(pc.fill_null(doomed, False)))


def grown(uri: str, opts=None, batches: int = BATCHES) -> lamina.Table:
    """``batches`` appends of ``BATCH`` rows (ids in order), then a delete of about 3% of them."""
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for i in range(batches):
        t.append(batch(i * BATCH))
    t.delete("y < 30")
    return t


def cluster_now(t: lamina.Table, options: CompactionOptions = OPTIONS):
    """One clustering pass without Ray: plan, run each group, commit; returns (plan, results, summary)."""
    plan, results = run_groups(t, options)
    summary = CompactionSummary.for_plan(plan)
    commit_results(t, t.manifest, results, summary)
    t.reload()
    return plan, results, summary


def run_groups(t: lamina.Table, options: CompactionOptions = OPTIONS):
    """The plan of ``t``'s version and each group's result (written, not committed)."""
    plan = plan_compaction(t.manifest, options, t.uri)
    tasks = tasks_for(plan, t.manifest, t.uri, t.storage_options, t.write_options, options.read_batch_bytes)
    results = [GroupCompactor().run(task) for task in tasks]
    assert all(r.ok for r in results), [r.error for r in results]
    return plan, results


def versions_rows(t: lamina.Table) -> dict[int, pa.Table]:
    return {v.version: canon(t.checkout(v.version).to_arrow()) for v in t.versions()}


# -- set_clustering --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "columns,curve,message",
    [
        (["nope", "y"], "hilbert", "clustering column 'nope' is not in the table's schema"),
        (["flag", "y"], "hilbert", "clustering column 'flag' has type bool: clustering keys must be"),
        ("tags", "linear", "clustering column 'tags' has type list<item: int32>"),
        (["x", "y"], "peano", "clustering curve 'peano' is not one of hilbert, zorder, linear"),
        (["x", "y"], "linear", "curve 'linear' sorts by one column; 2 columns need 'hilbert' or 'zorder'"),
        (["x"], "hilbert", "curve 'hilbert' interleaves 2 to 4 columns; one column needs 'linear'"),
        (["x", "y", "z", "c", "s"], "zorder", "clustering needs 1 to 4 key columns, not 5"),
        ([], "hilbert", "clustering needs 1 to 4 key columns, not 0"),
        (["x", "x"], "zorder", "clustering columns ['x', 'x'] name a column twice"),
    ],
)
def test_set_clustering_refuses_bad_keys_before_committing(local_table_uri, columns, curve, message):
    t = grown(local_table_uri, batches=2)
    before = t.version
    with pytest.raises(InvalidArgument, match=re.escape(message)):
        t.set_clustering(columns, curve)
    latest = lamina.open_table(local_table_uri)
    assert latest.version == t.version == before and "clustering" not in latest.manifest.config
    assert latest.stats().clustering is None


def test_set_clustering_refuses_a_table_with_stable_row_ids(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA, stable_row_ids=True)
    t.append(batch(0))
    with pytest.raises(InvalidConfig, match=f"table {local_table_uri} keeps stable row ids.*not supported"):
        t.set_clustering(["x", "y"])
    assert lamina.open_table(local_table_uri).version == t.version == 2


def test_the_clustering_round_trips_through_the_manifest_and_none_removes_it(local_table_uri):
    t = grown(local_table_uri, batches=4)
    v = t.set_clustering(["s", "ts", "x"], curve="zorder")
    assert v == t.version and load_manifest(t.store, v).transaction["operation"] == "configure"
    stored = lamina.open_table(local_table_uri).manifest.config["clustering"]
    read = Clustering.from_config(lamina.open_table(local_table_uri).manifest.config)
    assert read == choose(SCHEMA, ["s", "ts", "x"], "zorder", t.sample(["s", "ts", "x"]))
    assert (read.columns, read.curve, stored["key"]) == (("s", "ts", "x"), "zorder", read.key)
    s, ts, x = read.boundaries
    assert len(s) > 20 and all(isinstance(b, bytes) for b in s)
    assert len(ts) > 200 and all(isinstance(b, int) for b in ts)  # nanoseconds
    assert len(x) > 200 and all(isinstance(b, float) and b == b for b in x)
    assert t.stats().clustering.describe().startswith("clustering zorder on s, ts, x: 0/4 fragments clustered in 4 runs")
    t.set_clustering(None)
    latest = lamina.open_table(local_table_uri)
    assert "clustering" not in latest.manifest.config and latest.stats().clustering is None
    assert latest.version == v + 1
    assert plan_compaction(latest.manifest, OPTIONS).clustering is None


def test_changing_the_keys_makes_clustered_fragments_unclustered(local_table_uri):
    t = grown(local_table_uri)
    t.set_clustering(["x", "y"])
    cluster_now(t)
    stats = t.stats().clustering
    assert stats.clustered_fragments == stats.fragments == 8 and stats.runs == 1
    t.set_clustering(["y"], curve="linear")
    stats = t.stats().clustering
    assert (stats.clustered_fragments, stats.runs, stats.fragments) == (0, 8, 8)
    plan = plan_compaction(t.manifest, OPTIONS)
    assert plan.clustering.level0_fragments == 8
    # Eight unclustered fragments of 240-odd rows (tier 3): two groups of four, each a new run sorted by y.
    assert [len(g.fragment_ids) for g in plan.groups] == [4, 4]


# -- rows, zone maps and order after clustering ----------------------------------------------------


def _check_clustering_keeps_rows(t: lamina.Table, columns, curve) -> None:
    t.set_clustering(columns, curve)
    before = versions_rows(t)
    latest_before = t.version
    plan, results, summary = cluster_now(t)
    assert [g.mode for g in plan.groups] == [CLUSTER] and len(plan.groups[0].fragment_ids) == BATCHES
    assert summary.groups[0]["status"] == "committed" and t.version == latest_before + 1
    assert canon(t.to_arrow()).equals(before[latest_before]), "rows changed by clustering"
    assert t.count_rows() == before[latest_before].num_rows
    for v, rows in before.items():  # every version before it still reads its rows
        assert canon(t.checkout(v).to_arrow()).equals(rows), f"version {v}"
    assert [f.deleted_rows for f in t.fragments()] == [0] * len(t.fragments()), "deletions materialized"
    assert_zones_bound_rows(t)
    runs = assert_sorted_along_the_curve(t)
    [ranges] = runs.values()
    assert len(ranges) == len(t.fragments()) and 2 <= len(ranges) <= plan.groups[0].outputs
    assert results[0].rows_out == t.count_rows()
    assert plan_compaction(t.manifest, OPTIONS).groups == (), "a second pass finds nothing to do"


def test_clustering_keeps_every_row_on_local_and_s3(table_location):
    uri, opts = table_location
    _check_clustering_keeps_rows(grown(uri, opts), ["x", "y"], "hilbert")


@pytest.mark.parametrize(
    "columns,curve",
    [
        (["s", "ts"], "zorder"),  # strings (long ones keep a prefix) and timestamps, both with nulls
        (["x"], "linear"),  # nulls first, NaN last
        (["s"], "linear"),
        (["ts"], "linear"),
        (["z", "y"], "hilbert"),  # Zipf: a skewed key
        (["c", "y"], "hilbert"),  # one value in every row
        (["c"], "linear"),
        (["x", "y", "s", "ts"], "zorder"),
        (["z", "ts", "s"], "hilbert"),
    ],
)
def test_clustering_keeps_every_row_on_every_key_type_and_curve(local_table_uri, columns, curve):
    _check_clustering_keeps_rows(grown(local_table_uri), columns, curve)


def test_indices_stay_exact_and_cover_the_outputs(local_table_uri):
    t = grown(local_table_uri)
    t.create_index("id", "btree")
    t.create_index("s", "bitmap")
    t.set_clustering(["x", "y"])
    old = t.checkout(t.version)
    cluster_now(t)
    assert {ix.name: ix.uncovered_fragments for ix in t.list_indices()} == {"id_btree": 0, "s_bitmap": 0}
    assert all(ix.covered_fragments == len(t.fragments()) for ix in t.list_indices())
    for flt in (
        "id = 777",
        "id >= 300 AND id < 420",
        "id IN (1, 500, 1999, 2500)",
        "s = 'w3'",
        "s IN ('w1', 'w7')",
        "s = 'w3' AND id > 1000",
        "s IS NULL",
        f"s = '{'p' * 70}1'",
    ):
        want = canon(old.to_arrow(filter=flt, use_index=False))
        assert want.num_rows > 0, flt
        assert canon(t.to_arrow(filter=flt)).equals(want), flt
        assert canon(t.to_arrow(filter=flt, use_index=False)).equals(want), flt
        assert t.count_rows(flt) == want.num_rows


# -- races -------------------------------------------------------------------------------------------


def test_a_delete_and_an_append_committed_while_clustering_runs_are_carried(table_location):
    uri, opts = table_location
    t = grown(uri, opts)
    t.set_clustering(["x", "y"])
    base = t.manifest
    model = canon(t.to_arrow())
    plan, results = run_groups(t)  # read at `base`
    other = lamina.open_table(uri, storage_options=opts)
    assert other.delete(DOOMED) > BATCH
    other.append(batch(10_000, 50))
    summary = CompactionSummary.for_plan(plan)
    commit_results(t, base, results, summary)
    assert summary.groups[0]["status"] == "committed", summary.groups[0]["error"]
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.manifest.record.operation == "rewrite"
    want = canon(pa.concat_tables([survivors(model), batch(10_000, 50)]))
    assert canon(latest.to_arrow()).equals(want), "a deleted row came back or a row was lost"
    assert latest.count_rows() == want.num_rows
    outputs = [f for f in latest.fragments() if f.id not in set(plan.groups[0].fragment_ids)]
    assert sum(f.deleted_rows for f in outputs) > 0, "the delete was carried onto the outputs as deletions"


def test_a_delete_read_before_clustering_committed_is_rebased_through_the_mapping_file(table_location):
    uri, opts = table_location
    t = grown(uri, opts)
    t.set_clustering(["x", "y"])
    stale = t.checkout(t.version)  # a writer that read the table before the rewrite committed
    model = canon(t.to_arrow())
    cluster_now(t)
    record = t.manifest.record
    assert isinstance(record, RewriteRecord) and len(record.groups) == 1
    [group] = record.groups
    assert group.mapping is None and group.mapping_file is not None and group.mapping_file.startswith("_transactions/")
    assert group.mapping_file.endswith(".mapping.arrow") and t.store.exists(group.mapping_file)
    assert t.manifest.transaction["groups"][0]["mapping"] == {"file": group.mapping_file}
    mapping = AddressMapping.from_bytes(t.store.get(group.mapping_file), group.mapping_file)
    assert len(mapping) > MAPPING_INLINE_RUNS and int(mapping.length.sum()) == model.num_rows
    lamina.open_table(uri, storage_options=opts).append(batch(10_000, 50))  # and an append after it

    read_at = stale.version
    deleted = stale.delete(DOOMED)
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.manifest.record.operation == "delete" and latest.manifest.record.read_version == read_at
    assert deleted == model.num_rows - survivors(model).num_rows
    want = canon(pa.concat_tables([survivors(model), batch(10_000, 50)]))
    assert canon(latest.to_arrow()).equals(want), "a deleted row came back or a row was lost"
    assert latest.count_rows() == want.num_rows


def test_an_output_whose_rows_were_all_deleted_meanwhile_is_not_committed(local_table_uri):
    t = grown(local_table_uri)
    t.create_index("id", "btree")
    t.set_clustering(["x", "y"])
    base, model = t.manifest, canon(t.to_arrow())
    plan, results = run_groups(t)
    first = data_of(t, results[0].fragments[0]).column("id").to_pylist()  # every row of the first output
    doomed = f"id IN ({', '.join(map(str, first))})"
    assert lamina.open_table(local_table_uri).delete(doomed) == len(first)
    summary = CompactionSummary.for_plan(plan)
    commit_results(t, base, results, summary)
    assert summary.groups[0]["status"] == "committed", summary.groups[0]["error"]
    t.reload()
    [group] = t.manifest.record.groups
    assert group.new_fragment_ids[0] == -1 and all(i >= 0 for i in group.new_fragment_ids[1:])
    assert len(t.fragments()) == len(results[0].fragments) - 1
    assert results[0].fragments[0].path not in {f.path for f in t.fragments()}
    want = model.filter(pc.invert(pc.is_in(model.column("id"), pa.array(first, pa.int64()))))
    assert canon(t.to_arrow()).equals(canon(want))
    for flt in (f"id = {first[0]}", "id >= 0"):
        assert canon(t.to_arrow(filter=flt)).equals(canon(t.to_arrow(filter=flt, use_index=False))), flt
    assert_sorted_along_the_curve(t)


def test_a_clustering_rewrite_planned_under_keys_changed_meanwhile_still_commits(local_table_uri):
    t = grown(local_table_uri)
    t.set_clustering(["x", "y"])
    base, model = t.manifest, canon(t.to_arrow())
    plan, results = run_groups(t)
    lamina.open_table(local_table_uri).set_clustering(["s"], curve="linear")
    summary = CompactionSummary.for_plan(plan)
    commit_results(t, base, results, summary)
    assert summary.groups[0]["status"] == "committed", summary.groups[0]["error"]
    t.reload()
    assert Clustering.from_config(t.manifest.config).columns == ("s",)
    assert canon(t.to_arrow()).equals(model)
    stats = t.stats().clustering
    assert stats.clustered_fragments == 0 and stats.runs == stats.fragments == len(t.fragments())


def test_a_runs_fragment_with_many_deletions_is_rewritten_in_its_run(local_table_uri):
    t = grown(local_table_uri)
    t.set_clustering(["x", "y"])
    cluster_now(t)
    [run] = assert_sorted_along_the_curve(t)
    victim = t.manifest.fragments[3]
    ids = data_of(t, victim).column("id").to_pylist()
    t.delete(f"id IN ({', '.join(map(str, ids[::3]))})")  # a third of its rows
    model = canon(t.to_arrow())
    plan, _, summary = cluster_now(t)
    [g] = plan.groups
    assert g.fragment_ids == (victim.id,) and g.cluster_run == run and summary.groups[0]["status"] == "committed"
    assert canon(t.to_arrow()).equals(model)
    assert [f.deleted_rows for f in t.fragments()] == [0] * len(t.fragments())
    runs = assert_sorted_along_the_curve(t)
    assert list(runs) == [run], "the rewritten fragment stays in its run, in its place"
    assert t.manifest.fragments[3].cluster.lo >= victim.cluster.lo and t.manifest.fragments[3].cluster.hi <= victim.cluster.hi
    assert_zones_bound_rows(t)


def test_a_delete_over_a_rewrite_whose_mapping_file_is_gone_commits_nothing(local_table_uri):
    t = grown(local_table_uri)
    t.set_clustering(["x", "y"])
    stale = t.checkout(t.version)
    cluster_now(t)
    [group] = t.manifest.record.groups
    t.store.delete([group.mapping_file])
    with pytest.raises(CorruptFile, match=r"mapping file .*\.mapping\.arrow of a rewrite is missing"):
        stale.delete("id = 5")
    assert lamina.open_table(local_table_uri).version == t.version


# -- cleanup, metric, drift ----------------------------------------------------------------------------


def test_cleanup_keeps_a_mapping_file_while_its_version_is_kept(local_table_uri):
    t = grown(local_table_uri)
    t.set_clustering(["x", "y"])
    cluster_now(t)
    [group] = t.manifest.record.groups
    rewrite_version = t.version
    t.cleanup(older_than=0, enforce_retention=False)  # every version before the rewrite goes; it is the latest
    assert [v.version for v in t.versions()] == [rewrite_version]
    assert t.store.exists(group.mapping_file), "the mapping file of a kept version was removed"
    t.append(batch(10_000, 10))
    t.cleanup(older_than=0, enforce_retention=False)
    assert [v.version for v in t.versions()] == [rewrite_version + 1]
    assert not t.store.exists(group.mapping_file), "the mapping file of an expired version stayed"
    assert [o.path for o in t.store.list("_transactions/")] == []
    assert t.count_rows() == canon(t.to_arrow()).num_rows > 0


def test_the_overlap_metric_improves_after_clustering(local_table_uri):
    t = grown(local_table_uri)
    t.set_clustering(["x", "y"])
    before = t.stats().clustering
    assert (before.fragments, before.clustered_fragments, before.runs) == (16, 0, 16)
    assert all(k.depth > 14 and k.skipped < 0.1 for k in before.keys), before
    cluster_now(t, OPTIONS.with_overrides(target_rows_per_fragment=125))  # one run of 16 outputs
    after = t.stats().clustering
    assert (after.fragments, after.clustered_fragments, after.runs) == (16, 16, 1)
    for b, a in zip(before.keys, after.keys):
        assert a.depth < b.depth / 2 and a.skipped > b.skipped + 0.4, (b, a)
    # A point filter on a key reads fewer fragments now: zone maps rule out the rest.
    assert "16/16 fragments clustered in 1 runs" in t.stats().clustering.describe()


def test_boundaries_of_a_key_with_one_value_are_not_sampled_again_and_again(local_table_uri):
    t = grown(local_table_uri)
    t.set_clustering(["c", "y"])
    version = t.version
    assert Clustering.from_config(t.manifest.config).boundaries[0] == ()  # one value: no cut point
    assert resample_if_drifted(t) is None, "sampling again cannot cut a key that holds one value"
    assert t.version == version
    cluster_now(t)
    t.append(batch(50_000))
    assert resample_if_drifted(t) is None and t.stats().clustering.clustered_fragments == 8
    # Once the key holds a second value, a sample can cut it.
    t.append(batch(60_000).set_column(4, "c", pa.array(np.full(BATCH, 8, dtype=np.int64))))
    assert resample_if_drifted(t) == "c had no cut points (one value when sampled) and now holds several values"
    assert Clustering.from_config(t.manifest.config).boundaries[0] == (8,)


def test_boundaries_drift_and_are_sampled_again(local_table_uri):
    t = grown(local_table_uri, batches=4)
    t.set_clustering(["y"], curve="linear")
    assert resample_if_drifted(t) is None
    shifted = batch(1000, 2000)
    shifted = shifted.set_column(2, "y", pc.add(shifted.column("y"), 5000))  # every y above the sampled range
    t.append(shifted)
    key = Clustering.from_config(t.manifest.config).key
    why = resample_if_drifted(t)
    assert why == "80% of the live rows lie outside the sampled boundaries (resampled from 25%)"
    resampled = Clustering.from_config(t.manifest.config)
    assert resampled.key != key and max(resampled.boundaries[0]) > 5000
    assert resample_if_drifted(t) is None


def test_clustering_set_on_an_empty_table_is_sampled_by_the_first_compaction(ray_cluster, local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.set_clustering(["x", "y"])
    assert Clustering.from_config(t.manifest.config).boundaries == ((), ())
    for i in range(BATCHES):
        t.append(batch(i * BATCH))
    model = canon(t.to_arrow())
    plan, summary = compact(local_table_uri, OPTIONS)
    assert summary.resampled == "no boundaries were sampled yet (the table was empty when its clustering was set)"
    assert [g.mode for g in plan.groups] == [CLUSTER] and summary.failed_groups == 0
    t = lamina.open_table(local_table_uri)
    clustering = Clustering.from_config(t.manifest.config)
    assert all(len(b) > 100 for b in clustering.boundaries)
    assert t.stats().clustering.clustered_fragments == len(t.fragments()) == 8
    assert summary.clustering["clustered_fragments"] == 8 and summary.clustering["runs"] == 1
    assert canon(t.to_arrow()).equals(model)
    assert_sorted_along_the_curve(t)
    plan, summary = compact(local_table_uri, OPTIONS)
    assert summary.resampled is None and plan.groups == () and summary.committed_versions == []
