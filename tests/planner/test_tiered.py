"""The tiered policy on simulated tables: random appends, deletes and passes applied to a manifest in memory (no I/O)."""

from __future__ import annotations

import json
import math
import pickle
import random

import numpy as np
import pyarrow as pa
import pytest

from lamina import _native
from lamina.errors import InvalidConfig
from lamina.manifest import DeletionFile, Fragment, Manifest, RowGroup
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.eligibility import FULL_REWRITE, HAS_DELETIONS
from lamina.planner.maintenance import MaintenancePolicy
from lamina.planner.options import parse_assignment
from lamina.planner.tiered import AT_TARGET, BOTTOM_TIER, DELETIONS, MAX_FRAGMENTS, MERGE, SETTLED, SIZE, TOP, WAIT

MiB = 1 << 20
T = 4096  # rows target of the simulations
OPTS = CompactionOptions(policy="tiered", target_rows_per_fragment=T, target_bytes_per_fragment=MiB)


def opts(**kw) -> CompactionOptions:
    return OPTS.with_overrides(**kw)


def frag(fid, rows, bytes_per_row=64, deleted=0):
    return Fragment(
        fid,
        f"data/{fid}.parquet",
        rows,
        rows * bytes_per_row,
        (RowGroup(rows, rows * bytes_per_row),),
        _native.FILE_VERSION,
        DeletionFile(f"_deletions/{fid}.bin", deleted) if deleted else None,
    )


def manifest(*frags):
    return Manifest(7, 0, pa.schema([("id", pa.int64())]), tuple(frags), next_fragment_id=10_000, next_row_id=0)


class Table:
    """A table in memory: fragments with their row ids, deletes and compaction passes applied as a commit would."""

    def __init__(self, options: CompactionOptions, rng: random.Random):
        self.o, self.rng = options, rng
        self.frags: list[Fragment] = []
        self.ids: dict[int, np.ndarray] = {}  # fragment id -> row ids, in offset order
        self.dead: dict[int, np.ndarray] = {}  # fragment id -> deleted mask
        self.next_fid = self.next_row = 0
        #: Per row id: size-driven rewrites, and the smallest share of the target of any fragment it was in.
        self.rewrites = np.zeros(0, np.int64)
        self.smallest = np.zeros(0)
        self.written = self.appended = 0

    def share(self, f: Fragment) -> float:
        live_bytes = f.file_bytes * f.live_rows / f.rows if f.rows else 0.0
        return max(f.live_rows / self.o.target_rows_per_fragment, live_bytes / self.o.target_bytes_per_fragment)

    def _add(self, ids: np.ndarray, file_bytes: int, pos: int | None = None) -> Fragment:
        f = Fragment(
            self.next_fid,
            f"data/{self.next_fid}.parquet",
            len(ids),
            file_bytes,
            (RowGroup(len(ids), file_bytes),),
            _native.FILE_VERSION,
        )
        self.next_fid += 1
        self.ids[f.id], self.dead[f.id] = ids, np.zeros(len(ids), bool)
        self.smallest[ids] = np.minimum(self.smallest[ids], self.share(f))
        if pos is None:
            self.frags.append(f)
        else:
            self.frags.insert(pos, f)
        return f

    def append(self, rows: int, bytes_per_row: int | None = None) -> None:
        ids = np.arange(self.next_row, self.next_row + rows)
        self.next_row += rows
        self.rewrites = np.concatenate([self.rewrites, np.zeros(rows, np.int64)])
        self.smallest = np.concatenate([self.smallest, np.full(rows, np.inf)])
        b = rows * (bytes_per_row or self.rng.choice((64, 128, 256, 512)))
        self._add(ids, b)
        self.appended += b

    def delete(self, share: float) -> None:
        pos = self.rng.randrange(len(self.frags))
        f = self.frags[pos]
        live = np.flatnonzero(~self.dead[f.id])
        if len(live) == 0:
            return
        gone = self.rng.sample(live.tolist(), max(1, int(len(live) * share)))
        self.dead[f.id][gone] = True
        n = int(self.dead[f.id].sum())
        self.frags[pos] = Fragment(
            f.id, f.path, f.rows, f.file_bytes, f.row_groups, f.file_version, DeletionFile(f"_deletions/{f.id}-{n}.bin", n)
        )

    def manifest(self) -> Manifest:
        return manifest(*self.frags)

    def live_ids(self) -> np.ndarray:
        return np.concatenate([self.ids[f.id][~self.dead[f.id]] for f in self.frags] or [np.zeros(0, np.int64)])

    def apply(self, plan) -> None:
        """Each group's fragments replaced, in place, by one fragment of their live rows."""
        triggers = {d.fragment_id: d.trigger for d in plan.tiers.decisions}
        for g in reversed(plan.groups):
            pos = [i for i, f in enumerate(self.frags) if f.id in g.fragment_ids]
            assert pos == list(range(pos[0], pos[0] + len(g.fragment_ids))), "a group is a run of adjacent fragments"
            members = self.frags[pos[0] : pos[-1] + 1]
            assert tuple(f.id for f in members) == g.fragment_ids, "in table order"
            ids = np.concatenate([self.ids[f.id][~self.dead[f.id]] for f in members])
            out_bytes = round(sum(f.file_bytes * f.live_rows / f.rows for f in members if f.rows))
            for f in members:
                if triggers[f.id] in (SIZE, TOP):
                    self.rewrites[self.ids[f.id][~self.dead[f.id]]] += 1
            del self.frags[pos[0] : pos[-1] + 1]
            self.written += out_bytes
            self._add(ids, out_bytes, pos[0])

    def compact(self):
        before = self.live_ids()
        plan = plan_compaction(self.manifest(), self.o, "sim")
        self.apply(plan)
        assert np.array_equal(self.live_ids(), before), "every live row kept, in order"
        return plan


def bound(share: float, r: int) -> int:
    """⌈log_r(target / smallest)⌉ (0 at the target)."""
    if share >= 1:
        return 0
    return math.ceil(math.log(1 / share, r) - 1e-9)


# -- tiers ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "rows,bytes_per_row,tier,decision",
    [
        (4096, 64, 0, AT_TARGET),
        (5000, 64, 0, AT_TARGET),
        (4095, 64, 1, SETTLED),
        (2048, 64, 1, SETTLED),  # exactly half the target
        (2047, 64, 1, WAIT),
        (1024, 64, 1, WAIT),  # exactly 1/4: the bottom of tier 1
        (1023, 64, 2, WAIT),
        (256, 64, 2, WAIT),
        (255, 64, 3, WAIT),
        (1, 64, 6, WAIT),  # 4096 = 4^6
        (100, 4096, 1, WAIT),  # 0.39 of the byte target, 0.02 of the rows target: the larger share counts
        (100, 8192, 1, SETTLED),  # 0.78 of the byte target: settled although 100 rows
        (300, 1024, 1, WAIT),  # 0.29 of the byte target
    ],
)
def test_tier_of_a_lone_fragment(rows, bytes_per_row, tier, decision):
    plan = plan_compaction(manifest(frag(0, rows, bytes_per_row)), OPTS)
    [d] = plan.tiers.decisions
    assert (d.tier, d.decision) == (tier, decision)
    assert plan.groups == ()


def test_an_empty_fragment_is_in_the_bottom_tier():
    f = frag(0, 10, deleted=10)
    [d] = plan_compaction(manifest(frag(1, 4096), f), OPTS).tiers.decisions[1:]
    assert d.tier == BOTTOM_TIER and d.decision == MERGE and d.trigger == DELETIONS


@pytest.mark.parametrize("r,rows,tier", [(2, 2047, 2), (2, 2048, 1), (8, 512, 1), (8, 511, 2), (8, 63, 3), (16, 255, 2)])
def test_tier_boundaries_follow_the_ratio(r, rows, tier):
    [d] = plan_compaction(manifest(frag(0, rows)), opts(tier_ratio=r, min_merge_width=r)).tiers.decisions
    assert d.tier == tier


# -- triggers ------------------------------------------------------------------------------------


def test_min_merge_width_peers_of_one_tier_merge_and_fewer_wait():
    three = plan_compaction(manifest(*[frag(i, 100) for i in range(3)]), OPTS)
    assert three.groups == () and {d.decision for d in three.tiers.decisions} == {WAIT}
    assert [d.peers for d in three.tiers.decisions] == [3, 3, 3]
    four = plan_compaction(manifest(*[frag(i, 100) for i in range(4)]), OPTS)
    assert [g.fragment_ids for g in four.groups] == [(0, 1, 2, 3)]
    assert {d.trigger for d in four.tiers.decisions} == {SIZE}


def test_a_larger_fragment_breaks_a_run_and_smaller_ones_ride_along():
    # tier 3, tier 2 (300 rows), tier 3, tier 3: the tier-2 fragment breaks the run of tier-3 ones
    plan = plan_compaction(manifest(frag(0, 100), frag(1, 300), frag(2, 100), frag(3, 100)), OPTS)
    assert plan.groups == ()
    # tier 2 (300), tier 4 (40), tier 2 x 3: the small one rides along with its larger peers
    plan = plan_compaction(manifest(frag(0, 300), frag(1, 40), frag(2, 300), frag(3, 300), frag(4, 300)), OPTS)
    assert [g.fragment_ids for g in plan.groups] == [(0, 1, 2, 3, 4)]
    assert "1 smaller between them" in plan.tiers.group_triggers[0]


def test_merges_cascade_within_one_pass():
    # 3 tier-2 fragments, then 4 tier-3 ones: their output is the 4th tier-2 fragment, so all 7 merge now.
    frags = [frag(i, 300) for i in range(3)] + [frag(3 + i, 100) for i in range(4)]
    plan = plan_compaction(manifest(*frags), OPTS)
    assert [g.fragment_ids for g in plan.groups] == [tuple(range(7))]
    assert plan.tiers.group_triggers[0] == (
        "4 adjacent tier-3 fragments (min_merge_width 4); then 4 adjacent tier-2 fragments (min_merge_width 4)"
    )


def test_top_tier_merges_once_it_reaches_half_the_target_and_the_output_is_settled():
    waits = plan_compaction(manifest(frag(0, 1100), frag(1, 900)), OPTS)  # 900 is tier 2, 1100 tier 1
    assert waits.groups == ()
    merges = plan_compaction(manifest(frag(0, 1100), frag(1, 1100)), OPTS)
    assert [g.fragment_ids for g in merges.groups] == [(0, 1)]
    assert {d.trigger for d in merges.tiers.decisions} == {TOP}
    # packed up to the target: 3 x 1500 rows make one settled output of 3000 and leave one waiting
    three = plan_compaction(manifest(frag(0, 1500), frag(1, 1500), frag(2, 1500)), OPTS)
    assert [g.fragment_ids for g in three.groups] == [(0, 1)]
    assert three.tiers.decisions[2].decision == WAIT


def test_settled_and_full_fragments_never_move_by_size():
    frags = [frag(0, 2500), frag(1, 4096)] + [frag(2 + i, 100) for i in range(4)]
    plan = plan_compaction(manifest(*frags), OPTS)
    assert [g.fragment_ids for g in plan.groups] == [(2, 3, 4, 5)]
    assert [d.decision for d in plan.tiers.decisions[:2]] == [SETTLED, AT_TARGET]


def test_deletions_over_the_threshold_are_materialized_alone_whatever_the_tier():
    frags = [frag(0, 5000, deleted=600), frag(1, 2500, deleted=100), frag(2, 3000, deleted=300), frag(3, 100, deleted=20)]
    plan = plan_compaction(manifest(*frags), OPTS)
    assert [(g.fragment_ids, g.mode, g.reason) for g in plan.groups] == [
        ((0,), FULL_REWRITE, HAS_DELETIONS),
        ((2,), FULL_REWRITE, HAS_DELETIONS),
        ((3,), FULL_REWRITE, HAS_DELETIONS),
    ]
    assert [d.trigger for d in plan.tiers.decisions] == [DELETIONS, None, DELETIONS, DELETIONS]
    assert [g.candidates for g in plan.groups] == [("deletions",)] * 3


def test_a_fragment_with_deletions_in_a_tier_run_merges_with_its_peers():
    frags = [frag(0, 100), frag(1, 100, deleted=50), frag(2, 100), frag(3, 100)]
    plan = plan_compaction(manifest(*frags), OPTS)
    # 50 live rows is tier 4: it rides along between its tier-3 neighbours... which are only 3: no size merge
    assert [g.fragment_ids for g in plan.groups] == [(1,)]
    frags.append(frag(4, 100))
    plan = plan_compaction(manifest(*frags), OPTS)
    assert [g.fragment_ids for g in plan.groups] == [(0, 1, 2, 3, 4)]


def test_max_fragments_merges_the_smallest_with_its_smaller_neighbour():
    # Tiers interleaved so that nothing fires by size: 3 of tier 2, 3 of tier 4 between them, one of tier 5.
    frags = [frag(i, 300 if i % 2 == 0 else 40) for i in range(6)] + [frag(6, 5)]
    assert plan_compaction(manifest(*frags), OPTS).groups == ()
    plan = plan_compaction(manifest(*frags), opts(max_fragments=5))
    assert plan.tiers.unsettled_before == 7 and plan.tiers.unsettled_after == 5
    assert [g.fragment_ids for g in plan.groups] == [(0, 1), (5, 6)]
    assert {d.trigger for d in plan.tiers.decisions if d.group is not None} == {MAX_FRAGMENTS}


def test_one_shot_compaction_of_many_small_fragments_cascades_to_settled_outputs():
    # 400 x 50 rows (tier 4) -> 100 x 200 (tier 3) -> 25 x 800 (tier 2) -> 6 x 3200 (settled) + 1 x 800 waiting,
    # all in one pass; binpack fills the target instead (5 fragments).
    frags = [frag(i, 50) for i in range(400)]
    tiered = plan_compaction(manifest(*frags), OPTS)
    binpack = plan_compaction(manifest(*frags), OPTS.with_overrides(policy="binpack"))
    assert [len(g.fragment_ids) for g in tiered.groups] == [64] * 6 + [16]
    assert (tiered.fragments_after, binpack.fragments_after) == (7, 5)
    assert tiered.tiers is not None and binpack.tiers is None


# -- properties over random histories ------------------------------------------------------------

SEEDS = range(24)
SHAPES = [(4, 4), (8, 8), (4, 8), (2, 2)]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("r,w", SHAPES)
def test_write_amplification_bound_holds_for_every_row(seed, r, w):
    rng = random.Random(seed * 100 + r * 10 + w)
    t = Table(opts(tier_ratio=r, min_merge_width=w), rng)
    for _ in range(rng.randrange(60, 160)):
        t.append(rng.choice((1, 7, 30, 100, 250, 600, 1500)) if rng.random() < 0.3 else rng.randrange(20, 90))
        if rng.random() < 0.8:
            t.compact()
    bounds = np.array([bound(s, r) for s in t.smallest])
    assert (t.rewrites <= bounds).all(), [(i, t.rewrites[i], t.smallest[i]) for i in np.flatnonzero(t.rewrites > bounds)][:5]
    assert t.rewrites.max() > 0


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("r,w", SHAPES)
def test_fragment_bound_holds_after_every_pass_of_a_steady_stream(seed, r, w):
    rng = random.Random(seed)
    o = opts(tier_ratio=r, min_merge_width=w)
    t = Table(o, rng)
    k, bpr = rng.choice((3, 20, 64, 150, 400)), rng.choice((64, 256))
    top = math.ceil(math.log(1 / max(k / T, k * bpr / MiB), r) - 1e-9)  # K: the tier of the appends
    for _ in range(rng.randrange(80, 300)):
        for _ in range(rng.choice((1, 1, 1, 2, 3))):
            t.append(k, bpr)
        t.compact()
        n = sum(t.share(f) for f in t.frags)
        limit = math.ceil(2 * n - 1e-9) + (w - 1) * (top - 1) + (r - 1) // 2
        assert len(t.frags) <= limit, (len(t.frags), limit, [round(t.share(f), 3) for f in t.frags])
    assert t.written <= t.appended * bound(min(k / T, k * bpr / MiB) if k * bpr < MiB else 1, r)


@pytest.mark.parametrize("seed", SEEDS)
def test_after_a_pass_nothing_fires_and_deletions_are_materialized(seed):
    rng = random.Random(seed)
    o = opts(max_fragments=rng.choice((3, 8, 64)), materialize_deletions_threshold=rng.choice((0.1, 0.3)))
    t = Table(o, rng)
    for _ in range(120):
        op = rng.random()
        if op < 0.6 or not t.frags:
            t.append(rng.choice((5, 60, 200, 900, 2500)))
        elif op < 0.8:
            t.delete(rng.choice((0.02, 0.2, 0.6, 1.0)))
        else:
            over = {f.id for f in t.frags if f.deleted_rows and f.deleted_rows / f.rows >= o.materialize_deletions_threshold}
            plan = t.compact()
            grouped = {i for g in plan.groups for i in g.fragment_ids}
            assert over <= grouped, "every fragment at the deletion threshold is rewritten"
            assert all(len(g.fragment_ids) > 1 or g.candidates == ("deletions",) for g in plan.groups)
            again = plan_compaction(t.manifest(), o)
            assert again.groups == (), again.describe()
            unsettled = [i for i, f in enumerate(t.frags) if 2 * f.live_rows < T and 2 * f.file_bytes < MiB]
            if len(unsettled) > o.max_fragments:
                for i in unsettled:  # the valve stopped: no unsettled fragment fits the target with a neighbour
                    for j in (i - 1, i + 1):
                        if 0 <= j < len(t.frags) and t.frags[j].live_rows < T and t.frags[j].file_bytes < MiB:
                            a, b = t.frags[i], t.frags[j]
                            assert a.live_rows + b.live_rows > T or a.file_bytes + b.file_bytes > MiB


@pytest.mark.parametrize("seed", SEEDS)
def test_nothing_is_stranded_in_a_steady_stream(seed):
    rng = random.Random(seed)
    t = Table(opts(), rng)
    k = rng.choice((7, 40, 130))
    for _ in range(rng.randrange(10, 200)):
        t.append(k, 64)
        if rng.random() < 0.7:
            t.compact()
    t.compact()
    waiting = {f.id for f in t.frags if 2 * f.live_rows < T}
    appended = 0
    while appended < 2 * T:  # every tier below settled fills up within this many rows
        t.append(k, 64)
        appended += k
        t.compact()
    assert not waiting & {f.id for f in t.frags}, "every unsettled fragment merged once peers came"


# -- what users read -----------------------------------------------------------------------------


def _stream_plan():
    frags = (
        [frag(0, 5000), frag(1, 2600), frag(2, 1200)]
        + [frag(3 + i, 300) for i in range(3)]
        + [frag(6 + i, 100) for i in range(4)]
        + [frag(10, 20)]
    )
    return plan_compaction(manifest(*frags), OPTS, "tbl")


DRY_RUN = [
    "plan for tbl at version 7: 1 groups (1 full_rewrite), 11 -> 4 fragments",
    "  group    0: full_rewrite reason=all_row_groups_small     fragments [2..9] (8) rows=2,500 bytes=160,000",
    "              row groups: 0 copied, 8 re-encoded",
    "              trigger: 4 adjacent tier-3 fragments (min_merge_width 4); then 4 adjacent tier-2 fragments "
    "(min_merge_width 4); then 2 adjacent tier-1 fragments hold 0.61 of the target (settled from 0.50)",
    "  tiered: tier k holds fragments of 1/4^k to 1/4^(k-1) of the target; 4 adjacent peers merge; settled from 1/2; "
    "9 -> 1 unsettled (max_fragments 64)",
    "  fragment 0: at the target: moves only to drop deleted rows",
    "  fragment 1: settled (at least half the target): moves only to drop deleted rows",
    "  fragment 2: tier 1, merges in group 0: 2 adjacent tier-1 fragments hold 0.61 of the target (settled from 0.50)",
    "  fragments 3,4,5: tier 2, merges in group 0: 4 adjacent tier-2 fragments (min_merge_width 4)",
    "  fragments 6..9 (4): tier 3, merges in group 0: 4 adjacent tier-3 fragments (min_merge_width 4)",
    "  fragment 10: tier 4, waits: 1 of 4 adjacent tier-4 fragments; 3 more next to it (appended, or made by merges "
    "of smaller ones) merge them into tier 3",
]


def test_dry_run_says_why_each_fragment_waits_or_merges():
    assert _stream_plan().describe() == "\n".join(DRY_RUN)


@pytest.mark.parametrize(
    "frags,max_fragments,lines",
    [
        (
            [frag(0, 1100), frag(1, 300), frag(2, 300)],
            64,
            [
                "  fragment 0: tier 1, waits: adjacent tier-1 fragments hold 0.27 of the target; they merge when they reach 0.50 "
                "(more tier-1 fragments next to it)",
                "  fragments 1,2: tier 2, waits: 2 of 4 adjacent tier-2 fragments; 2 more next to it (appended, or made by "
                "merges of smaller ones) merge them into tier 1",
            ],
        ),
        (
            [frag(i, 100) for i in range(11)],
            64,
            [  # merged 4 at a time; the 3 left wait for a 4th
                "  fragments 0..3 (4): tier 3, merges in group 0: 4 adjacent tier-3 fragments (min_merge_width 4)",
                "  fragments 4..7 (4): tier 3, merges in group 1: 4 adjacent tier-3 fragments (min_merge_width 4)",
                "  fragments 8,9,10: tier 3, waits: 3 of 4 adjacent tier-3 fragments; 1 more next to it (appended, or made by "
                "merges of smaller ones) merge them into tier 2",
            ],
        ),
        (
            [frag(0, 100, deleted=30), frag(1, 4096)],
            64,
            [
                "  fragment 0: tier 3, merges in group 0: 30% of its rows deleted (materialize_deletions_threshold 0.1)",
                "  fragment 1: at the target: moves only to drop deleted rows",
            ],
        ),
        (
            [frag(i, 300 if i % 2 == 0 else 40) for i in range(4)],
            3,
            [
                "  fragment 0: tier 2, merges in group 0: 4 fragments below half the target, more than max_fragments 3: "
                "merged with its smaller neighbour",
                "  fragment 1: tier 4, merges in group 0: 4 fragments below half the target, more than max_fragments 3: "
                "merged with its smaller neighbour",
                "  fragment 2: tier 2, waits: 2 of 4 adjacent tier-2 fragments; 2 more next to it (appended, or made by merges "
                "of smaller ones) merge them into tier 1",
                "  fragment 3: tier 4, waits: 1 of 4 adjacent tier-4 fragments; 3 more next to it (appended, or made by merges "
                "of smaller ones) merge them into tier 3",
            ],
        ),
    ],
)
def test_dry_run_fragment_lines(frags, max_fragments, lines):
    o = opts(max_fragments=max_fragments)
    text = plan_compaction(manifest(*frags), o).describe().splitlines()
    assert [ln for ln in text if ln.startswith("  fragment")] == lines


def test_plan_json_carries_the_tier_decisions():
    plan = _stream_plan()
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["options"]["policy"] == "tiered"
    assert d["tiers"]["group_triggers"] == [plan.tiers.group_triggers[0]]
    assert d["tiers"]["fragments"][10] == {
        "fragment_id": 10,
        "tier": 4,
        "share": round(20 / T, 6),
        "peers": 1,
        "decision": "wait",
        "group": None,
        "trigger": None,
        "why": DRY_RUN[-1].split("tier 4, ", 1)[1],
    }
    assert [f["decision"] for f in d["tiers"]["fragments"]] == ["at_target", "settled"] + ["merge"] * 8 + ["wait"]
    assert pickle.loads(pickle.dumps(plan)) == plan
    binpack = plan_compaction(manifest(frag(0, 100), frag(1, 100)), OPTS.with_overrides(policy="binpack")).to_dict()
    assert "tiers" not in binpack


# -- options -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,value",
    [
        ("policy=tiered", "tiered"),
        ("policy=BinPack", "binpack"),
        ("policy= tiered ", "tiered"),
        ("tier_ratio=8", 8),
        ("min_merge_width=6", 6),
        ("max_fragments=1_000", 1000),
    ],
)
def test_set_policy_and_tier_options(text, value):
    assert parse_assignment(text)[1] == value


def test_bad_policy_options_are_refused_naming_the_fix():
    with pytest.raises(InvalidConfig, match="policy must be one of binpack, tiered"):
        parse_assignment("policy=lsm")
    with pytest.raises(InvalidConfig, match="policy='lsm' must be one of binpack, tiered"):
        CompactionOptions.from_mapping({"policy": "lsm"})
    with pytest.raises(InvalidConfig, match="min_merge_width=4 must be at least tier_ratio=8.*Raise min_merge_width"):
        CompactionOptions(tier_ratio=8)
    for key, value in (("tier_ratio", 1), ("min_merge_width", 1), ("max_fragments", 0), ("tier_ratio", 4.0)):
        with pytest.raises(InvalidConfig, match=key):
            CompactionOptions(**{key: value})


def test_default_policy_and_catalog_property_override():
    assert CompactionOptions().policy == "binpack"
    policy = MaintenancePolicy().with_properties(
        {
            "maintenance.compaction.policy": "Tiered",
            "maintenance.compaction.tier_ratio": "8",
            "maintenance.compaction.min_merge_width": "8",
        },
        "ns.events",
    )
    assert (policy.compaction.policy, policy.compaction.tier_ratio, policy.compaction.min_merge_width) == ("tiered", 8, 8)
    with pytest.raises(InvalidConfig, match="table ns.events: .*policy='lsm' must be one of binpack, tiered"):
        MaintenancePolicy().with_properties({"maintenance.compaction.policy": "lsm"}, "ns.events")
    with pytest.raises(InvalidConfig, match="table ns.events: property maintenance.compaction.policy=3"):
        MaintenancePolicy().with_properties({"maintenance.compaction.policy": 3}, "ns.events")
