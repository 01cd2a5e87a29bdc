"""The scene as users run it with clustering keys: a table that keeps growing and losing rows, compacted on
Ray after every batch so that sorted runs form and merge, read after every pass (every column of every row,
counts, point filters on the keys) against a model of what was written; a reader opened early keeps its
version through all of it."""

from __future__ import annotations

import datetime as dt
import random

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lamina
from lamina.compaction import compact
from lamina.planner import CompactionOptions
from lamina.planner.clustering import CLUSTER
from tests.compaction_helpers import assert_sorted_along_the_curve, assert_zones_bound_rows, canon

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("y", pa.int64()),
        ("s", pa.string()),
        ("x", pa.float64()),
        ("qty", pa.int64()),
        ("note", pa.string()),
    ]
)
WORDS = [f"w{i:03d}" for i in range(200)]
# Batches of 64-255 rows are tier 3 of ratio 4: four of them make a sorted run of tier 4, four of those one
# of tier 5. A run's fragment with 5% of its rows deleted is rewritten in its run.
OPTIONS = CompactionOptions(
    target_rows_per_fragment=400,
    min_row_group_bytes=0,
    materialize_deletions_threshold=0.05,
    max_concurrency=2,
    cluster_tier_ratio=4,
    cluster_merge_width=4,
)


def _batch(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": np.arange(start, start + n, dtype=np.int64),
            "y": rng.integers(0, 10_000, n),
            "s": pa.array(rng.choice(WORDS, n)),
            "x": pa.array(rng.normal(size=n), mask=rng.random(n) < 0.1),
            "qty": rng.integers(1, 25, n),
            "note": pa.array([f"row {start + i}" if i % 5 else None for i in range(n)], pa.string()),
        },
        schema=SCHEMA,
    )


def test_a_growing_clustered_table_reads_exactly_after_every_pass(ray_cluster, table_location):
    uri, opts = table_location
    rng, pick = np.random.default_rng(7), random.Random(7)
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    first = _batch(rng, 0, 400)
    t.append(first)
    t.set_clustering(["y", "s"], curve="hilbert")
    model, next_id = first, 400
    early = early_rows = None
    clustered_groups = deletion_groups = 0
    for p in range(12):
        for _ in range(pick.randint(1, 4)):
            b = _batch(rng, next_id, pick.randint(64, 255))
            next_id += b.num_rows
            t.append(b)
            model = pa.concat_tables([model, b])
        if p % 3 == 1:
            qty, one = pick.randint(1, 24), pick.randrange(next_id)
            doomed = pc.or_(pc.equal(model["qty"], qty), pc.equal(model["id"], one))
            assert t.delete(f"qty = {qty} OR id = {one}") == pc.sum(doomed).as_py()
            model = model.filter(pc.invert(doomed))

        plan, summary = compact(uri, OPTIONS, storage_options=opts)
        assert summary.failed_groups == 0 and summary.resampled is None, (p, summary.groups, summary.resampled)
        assert all(g.mode == CLUSTER for g in plan.groups)
        clustered_groups += sum(1 for g in plan.groups if g.cluster_run is None)
        deletion_groups += sum(1 for g in plan.groups if g.cluster_run is not None)
        t = t.reload()
        t.cleanup(older_than=dt.timedelta(hours=1))  # within retention: what the early reader needs stays
        if p == 2:
            early, early_rows = t.checkout(t.version), canon(model)

        want = canon(model)
        assert canon(t.to_arrow()).equals(want), f"pass {p}: rows differ from the model"
        assert t.count_rows() == want.num_rows
        y, s = int(pick.choice(want["y"].to_pylist())), pick.choice(WORDS)
        for flt, mask in (
            (f"y = {y}", pc.equal(want["y"], y)),
            (f"s = '{s}'", pc.equal(want["s"], s)),
            (
                f"y >= {y} AND y < {y + 50} AND s >= '{s}'",
                pc.and_(pc.and_(pc.greater_equal(want["y"], y), pc.less(want["y"], y + 50)), pc.greater_equal(want["s"], s)),
            ),
        ):
            expected = want.filter(mask)
            assert canon(t.to_arrow(filter=flt)).equals(expected), (p, flt)
            assert t.count_rows(flt) == expected.num_rows, (p, flt)
        assert summary.clustering is not None and summary.clustering["fragments"] == len(t.fragments())

    assert early is not None and early_rows is not None
    assert canon(early.to_arrow()).equals(early_rows), "the version of pass 3 changed under its reader"
    assert clustered_groups >= 5 and deletion_groups >= 1, (clustered_groups, deletion_groups)
    stats = t.stats().clustering
    assert stats.clustered_fragments > stats.fragments // 2, stats.describe()
    assert stats.runs < stats.fragments, stats.describe()
    assert_sorted_along_the_curve(t)
    assert_zones_bound_rows(t)
