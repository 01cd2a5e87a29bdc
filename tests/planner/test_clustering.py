"""The clustering policy on synthetic fragments: sorted runs merged by size tier, deletions, caps, and a
simulated table fed by appends whose rows are each rewritten O(log) times (pure, no I/O)."""

from __future__ import annotations

import math
import pickle
import random

import numpy as np
import pyarrow as pa
import pytest

from lamina import _native
from lamina.clustering import Clustering, overlap
from lamina.manifest import ClusterRange, DeletionFile, Fragment, Manifest, RowGroup
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.clustering import CLUSTER
from lamina.zones import Zone

MiB = 1 << 20
SCHEMA = pa.schema([("x", pa.int64()), ("y", pa.int64()), ("id", pa.int64())])
KEYS = Clustering(("x", "y"), "hilbert", ((10, 20, 30), (100, 200, 300)))
KEY = KEYS.key
OPTS = CompactionOptions(
    target_rows_per_fragment=1000, target_bytes_per_fragment=MiB, cluster_tier_ratio=4, cluster_merge_width=4
)


def opts(**kw) -> CompactionOptions:
    return OPTS.with_overrides(**kw)


def frag(fid, rows, *, run=None, key=KEY, lo=0, hi=0, deleted=0, bytes_per_row=64, zones=None) -> Fragment:
    return Fragment(
        fid,
        f"data/{fid}.parquet",
        rows,
        rows * bytes_per_row,
        (RowGroup(rows, rows * bytes_per_row),),
        _native.FILE_VERSION,
        DeletionFile(f"_deletions/{fid}.bin", deleted) if deleted else None,
        zones=zones,
        cluster=ClusterRange(key, run, lo, hi) if run is not None else None,
    )


def sorted_run(first_id, name, parts, rows_each, **kw) -> list[Fragment]:
    """``parts`` fragments of one sorted run, their curve ranges disjoint and ascending."""
    return [frag(first_id + i, rows_each, run=name, lo=100 * i, hi=100 * i + 99, **kw) for i in range(parts)]


def manifest(*frags, clustering=KEYS) -> Manifest:
    return Manifest(
        7, 0, SCHEMA, tuple(frags), next_fragment_id=10_000, next_row_id=0, config={"clustering": clustering.to_config()}
    )


def plan(*frags, options=OPTS, clustering=KEYS):
    return plan_compaction(manifest(*frags, clustering=clustering), options, "tbl")


def groups(p) -> list[tuple[int, ...]]:
    return [g.fragment_ids for g in p.groups]


def exact_tier(rows: int, r: int) -> int:
    """⌊log_r(rows)⌋ in integers (0 for no rows)."""
    t, size = 0, r
    while size <= rows:
        t, size = t + 1, size * r
    return t


# -- merges by size tier -------------------------------------------------------------------------


def test_w_units_of_one_tier_merge_into_one_sorted_run():
    p = plan(*[frag(i, 100) for i in range(4)])  # 100 rows: tier 3 of ratio 4
    assert groups(p) == [(0, 1, 2, 3)]
    [g] = p.groups
    assert g.mode == CLUSTER and g.cluster_run is None and g.rows == 400 and g.outputs == 1
    assert "4 unclustered fragments of tier 3" in g.reason and "into one sorted run (hilbert)" in g.reason
    assert p.clustering is not None and (p.clustering.runs_before, p.clustering.runs_after) == (4, 1)
    assert p.clustering.level0_fragments == 4 and p.fragments_after == 1


def test_fewer_than_w_units_of_a_tier_wait():
    p = plan(*[frag(i, 100) for i in range(3)])
    assert p.groups == ()
    assert p.clustering.waiting == ("tier 3: 3 of 4 units wait for more of their size",)
    # Units of different tiers do not add up: three of tier 3 and one of tier 2 (300 rows).
    assert plan(*[frag(i, 100) for i in range(3)], frag(3, 300)).groups == ()


def test_units_of_a_tier_need_not_be_adjacent_and_merge_w_at_a_time():
    frags = [frag(i, 100 if i % 2 == 0 else 1100) for i in range(16)]  # tiers 3 and 5 interleaved
    p = plan(*frags)
    # 8 of tier 3 -> 2 runs of 400 (tier 4); 8 of tier 5 -> 2 runs of 4400 (tier 6): nothing more fires.
    assert groups(p) == [(0, 2, 4, 6), (1, 3, 5, 7), (8, 10, 12, 14), (9, 11, 13, 15)]
    assert [g.outputs for g in p.groups] == [1, 5, 1, 5]  # 4400 rows over a target of 1000


def test_a_merge_cascades_into_the_next_tier_within_one_pass():
    # Three runs of 300 rows (tier 4) and four unclustered fragments of 100 rows (tier 3): those merge
    # into a fourth run of tier 4, which completes w units of tier 4, so everything merges now.
    frags = sorted_run(0, "a", 2, 150) + sorted_run(2, "b", 3, 100) + sorted_run(5, "c", 1, 300)
    frags += [frag(6 + i, 100) for i in range(4)]
    p = plan(*frags)
    assert groups(p) == [tuple(range(10))]
    assert p.groups[0].reason == (
        "merges 4 unclustered fragments of tier 3 (~4^3 rows each; cluster_merge_width 4); then 4 sorted runs of tier 4 "
        "(~4^4 rows each; cluster_merge_width 4) into one sorted run (hilbert)"
    )
    assert p.clustering.runs_before == 7 and p.clustering.runs_after == 1


@pytest.mark.parametrize(
    "r,w,run_rows",
    [
        (4, 4, 4**5),
        (4, 8, 5000),
        (2, 4, 2**10),
        (3, 3, 3**5),  # 3^5 rows is tier 5, whatever log() rounds math.log(243, 3) to
        (10, 10, 10**3),
        (10, 10, 10**6),
    ],
)
def test_a_sorted_run_is_rewritten_only_when_w_units_of_its_tier_exist(r, w, run_rows):
    o = opts(cluster_tier_ratio=r, cluster_merge_width=w, target_rows_per_fragment=max(1, run_rows // 4))
    big = [
        frag(i, len(part), run="big", lo=100 * i, hi=100 * i + 99) for i, part in enumerate(np.array_split(range(run_rows), 4))
    ]
    small = run_rows // r  # one tier below the run
    # w - 1 small appends: they wait, and the run is left alone whatever their count adds up to.
    appends = [frag(10 + i, small) for i in range(w - 1)]
    assert plan(*big, *appends, options=o).groups == ()
    # The w-th small append completes its tier: only the small ones merge; their run sits in the big
    # run's tier now, which holds 2 < w units: the big run is untouched.
    appends.append(frag(10 + w - 1, small))
    p = plan(*big, *appends, options=o)
    assert groups(p) == [tuple(f.id for f in appends)]
    assert not {f.id for f in big} & {i for g in p.groups for i in g.fragment_ids}


def test_fragments_clustered_under_other_keys_count_as_level_0():
    # One run of 400 rows under the table's key: tier 4 alone, nothing to do.
    assert plan(*sorted_run(0, "r", 4, 100)).groups == ()
    # The same fragments written under other keys (or other cells): four unclustered fragments of tier 3.
    other_cells = Clustering(("x", "y"), "hilbert", ((10, 20, 31), (100, 200, 300)))
    other_columns = Clustering(("x",), "linear", ((10, 20, 30),))
    for old in (other_cells, other_columns, Clustering(("x", "y"), "zorder", KEYS.boundaries)):
        assert old.key != KEY
        p = plan(*sorted_run(0, "r", 4, 100, key=old.key))
        assert groups(p) == [(0, 1, 2, 3)] and p.clustering.level0_fragments == 4
        assert "4 unclustered fragments of tier 3" in p.groups[0].reason
    # Read under the old keys, the same fragments are one run again.
    assert plan(*sorted_run(0, "r", 4, 100, key=other_cells.key), clustering=other_cells).groups == ()


def test_cluster_max_bytes_caps_a_group_and_full_runs_never_merge():
    cap = 1 * MiB
    o = opts(cluster_max_bytes=cap)
    # Four units of tier 3, 300 KiB each: all four would pass the cap, the three smallest fit under it.
    frags = [frag(i, 100, bytes_per_row=3072 + i) for i in range(4)]
    p = plan(*frags, options=o)
    assert groups(p) == [(0, 1, 2)]
    assert all(g.bytes <= cap for g in p.groups)
    # A run holding cap bytes or more is full: with three more units of its tier it still does not merge.
    full = sorted_run(0, "full", 4, 64, bytes_per_row=4096)  # 256 rows (tier 4), 1 MiB
    peers = [frag(10 + i, 256) for i in range(3)]
    p = plan(*full, *peers, options=o)
    assert p.groups == () and p.clustering.full_runs == 1
    assert "  1 runs hold cluster_max_bytes or more: they no longer merge" in p.describe().splitlines()
    # The same run under a larger cap merges with them.
    assert groups(plan(*full, *peers, options=opts(cluster_max_bytes=4 * MiB))) == [(0, 1, 2, 3, 10, 11, 12)]


def test_cluster_depth_trigger_suppresses_merges_but_not_deletions():
    # No zone maps: each fragment spans the whole grid on both keys, so the overlap depth is 5.
    frags = [frag(i, 100) for i in range(4)] + sorted_run(4, "r", 1, 100, deleted=50)
    quiet = plan(*frags, options=opts(cluster_depth_trigger=5.0))
    assert quiet.clustering.depth_before == (5.0, 5.0)
    assert "overlap depth 5.00 is within cluster_depth_trigger 5: no runs merge" in quiet.clustering.waiting
    assert groups(quiet) == [(4,)], "a run's fragment at the deletion threshold is still rewritten"
    assert groups(plan(*frags, options=opts(cluster_depth_trigger=4.9))) == [(0, 1, 2, 3), (4,)]
    assert groups(plan(*frags)) == [(0, 1, 2, 3), (4,)]  # 0: whenever the tier rules fire


def test_a_runs_fragment_at_the_deletion_threshold_is_rewritten_alone_keeping_its_run():
    run = sorted_run(0, "r", 4, 250)
    run[2] = frag(2, 250, run="r", lo=200, hi=299, deleted=60)  # 24% deleted
    run[3] = frag(3, 250, run="r", lo=300, hi=399, deleted=10)  # 4%: below the threshold
    p = plan(*run)
    assert groups(p) == [(2,)]
    [g] = p.groups
    assert g.mode == CLUSTER and g.cluster_run == "r" and g.candidates == ("deletions",) and g.rows == 190
    assert "24% of its rows deleted" in g.reason and "its run's order kept" in g.reason
    # An unclustered fragment with deletions has no run to keep: it is sorted into a run of its own (else a
    # large fragment without peers of its tier would keep its deleted rows for ever).
    [alone] = plan(frag(0, 250, deleted=60)).groups
    assert alone.fragment_ids == (0,) and alone.cluster_run is None and "sorted into a run of its own" in alone.reason


def test_a_fragment_merged_by_size_is_not_also_rewritten_for_its_deletions():
    frags = sorted_run(0, "r", 1, 110, deleted=20) + [frag(1 + i, 100) for i in range(3)]  # 90 live: tier 3
    p = plan(*frags)
    assert groups(p) == [(0, 1, 2, 3)] and p.groups[0].cluster_run is None


def test_the_plan_measures_the_same_overlap_as_table_stats():
    frags = [frag(i, 400, zones=(Zone("x", "int", 5 * i, 5 * i + 4, True, 0, 0),)) for i in range(6)]
    frags += sorted_run(6, "r", 3, 300)
    p = plan(*frags)
    assert p.clustering is not None and p.clustering.now == overlap(KEYS, frags)
    assert p.clustering.runs_before == 7 and p.clustering.now.clustered_fragments == 3


def test_plan_prints_and_serializes_the_clustering_view():
    frags = [frag(i, 400, zones=(Zone("x", "int", 5 * i, 5 * i + 4, True, 0, 0),)) for i in range(8)]
    p = plan(*frags, options=opts(target_rows_per_fragment=500))
    assert groups(p) == [tuple(range(4)), tuple(range(4, 8))]
    text = p.describe()
    assert "sorts its rows along the curve into ~4 fragments" in text
    assert "  clustering hilbert on x, y: 8 runs (8 unclustered fragments) -> 2 runs; rewrites 204,800 bytes" in text
    assert "  overlap depth (fragments a point filter reads), now -> predicted after this run: x " in text
    d = p.to_dict()
    c = d["clustering"]
    assert c["columns"] == ["x", "y"] and c["curve"] == "hilbert" and c["bytes_rewritten"] == 204_800
    assert c["depth_before"]["y"] == 8.0 and c["depth_after_predicted"]["y"] < c["depth_before"]["y"]
    assert all("actions" not in g and g["mode"] == CLUSTER for g in d["groups"])
    assert pickle.loads(pickle.dumps(p)) == p
    # Without clustering (cluster=False) the same table is planned by the table's policy.
    plain = plan(*frags, options=opts(cluster=False))
    assert plain.clustering is None and "clustering" not in plain.to_dict()
    assert all(g.mode != CLUSTER for g in plain.groups)


# -- a table fed by appends ----------------------------------------------------------------------


class Sim:
    """A table with clustering keys in memory: appends, and each plan's groups applied as the real run
    would (one new sorted run per group, cut into ``outputs`` fragments, placed at its first source)."""

    def __init__(self, options: CompactionOptions):
        self.o = options
        self.frags: list[Fragment] = []
        self.ids: dict[int, np.ndarray] = {}  # fragment id -> its row ids
        self.next_fid = self.next_row = self.runs = 0
        self.first_unit = np.zeros(0, np.int64)  # per row: the rows of the append it came in
        self.rewrites = np.zeros(0, np.int64)

    def _frag(self, ids: np.ndarray, run: str | None = None, part: int = 0) -> Fragment:
        f = frag(self.next_fid, len(ids), run=run, lo=1000 * part, hi=1000 * part + 999)
        self.next_fid += 1
        self.ids[f.id] = ids
        return f

    def append(self, n: int) -> None:
        ids = np.arange(self.next_row, self.next_row + n)
        self.next_row += n
        self.first_unit = np.concatenate([self.first_unit, np.full(n, n)])
        self.rewrites = np.concatenate([self.rewrites, np.zeros(n, np.int64)])
        self.frags.append(self._frag(ids))

    def compact(self):
        p = plan_compaction(Manifest(1, 0, SCHEMA, tuple(self.frags), self.next_fid, 0, config=CONFIG), self.o)
        taken = [i for g in p.groups for i in g.fragment_ids]
        assert len(taken) == len(set(taken)), "a fragment in two groups"
        before = np.sort(np.concatenate([self.ids[f.id] for f in self.frags]))
        for g in p.groups:
            pos = [i for i, f in enumerate(self.frags) if f.id in g.fragment_ids]
            ids = np.concatenate([self.ids[self.frags[i].id] for i in pos])
            assert len(ids) == g.rows
            self.rewrites[ids] += 1
            self.runs += 1
            assert g.outputs == math.ceil(len(ids) / self.o.target_rows_per_fragment)
            outs = [self._frag(part, f"run{self.runs}", k) for k, part in enumerate(np.array_split(ids, g.outputs))]
            for i in reversed(pos[1:]):
                del self.frags[i]
            self.frags[pos[0] : pos[0] + 1] = outs
        after = np.sort(np.concatenate([self.ids[f.id] for f in self.frags]))
        assert np.array_equal(before, after), "every row kept"
        return p

    def units(self) -> dict[str, int]:
        """Rows per sorted run (unclustered fragments on their own)."""
        out: dict[str, int] = {}
        for f in self.frags:
            name = f.cluster.run if f.cluster is not None else f"f{f.id}"
            out[name] = out.get(name, 0) + f.live_rows
        return out


CONFIG = {"clustering": KEYS.to_config()}


def levels(s0: int, n: int, r: int) -> int:
    """⌈log_r(n / s0)⌉ in integers: the least k with s0 · r^k >= n."""
    k = 0
    while s0 * r**k < n:
        k += 1
    return k


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("r,w", [(4, 4), (2, 2), (3, 3), (4, 8), (10, 10)])
def test_every_row_is_rewritten_at_most_log_r_times_over_400_passes_of_appends(seed, r, w):
    rng = random.Random(seed * 1000 + r * 10 + w)
    sim = Sim(opts(cluster_tier_ratio=r, cluster_merge_width=w, target_rows_per_fragment=2000))
    sizes = [r**2, r**3, 3 * r, 40, 150]  # exact powers of r too: the edges of the tiers
    merged = 0
    for _ in range(400):
        sim.append(rng.choice(sizes) if rng.random() < 0.5 else rng.randrange(5, 300))
        merged += len(sim.compact().groups)
        per_tier: dict[int, int] = {}
        for rows in sim.units().values():
            per_tier[exact_tier(rows, r)] = per_tier.get(exact_tier(rows, r), 0) + 1
        assert max(per_tier.values()) < w, f"a tier holds w units after a pass: {sorted(per_tier.items())}"
    n = sim.next_row
    bound = np.array([levels(int(s0), n, r) for s0 in sim.first_unit])
    # Each merge lifts a row at least one tier (w >= r units of >= r^t rows hold >= r^(t+1)); the brief's
    # +1 for materialized deletions is not needed: this table has none.
    over = np.flatnonzero(sim.rewrites > bound)
    assert len(over) == 0, [(int(i), int(sim.rewrites[i]), int(sim.first_unit[i]), int(bound[i])) for i in over[:5]]
    assert (sim.rewrites <= bound + 1).all()
    assert merged > 0 and sim.rewrites.max() >= 2
