"""A plan takes groups until they hold ``max_plan_fragments`` fragments (its memory and a run's length
are bounded by configuration on tables of millions of small fragments); the rest wait for the next run."""

from __future__ import annotations

from lamina.planner import plan_compaction
from lamina.planner.options import TIERED
from lamina.planner.plan import _binpack
from lamina.planner.tiered import WAIT
from tests.planner.test_plan import OPTS, frag, manifest


def _small(n: int):
    return [frag(i, rows=100) for i in range(n)]


def _adjacent(plan, ids) -> bool:
    pos = {i: p for p, i in enumerate(ids)}
    return all(
        pos[g.fragment_ids[k + 1]] == pos[g.fragment_ids[k]] + 1 for g in plan.groups for k in range(len(g.fragment_ids) - 1)
    )


def test_a_binpack_plan_stops_at_max_plan_fragments_and_reads_no_further():
    frags = _small(1000)
    opts = OPTS.with_overrides(target_rows_per_fragment=1000, max_plan_fragments=95)  # groups of 10
    plan = plan_compaction(manifest(*frags), opts)
    held = sum(len(g.fragment_ids) for g in plan.groups)
    assert plan.limited and 0 < held <= 95 and plan.to_dict()["limited"]
    assert [g.fragment_ids[0] for g in plan.groups] == list(range(0, held, 10)) and _adjacent(plan, list(range(1000)))
    assert "plan limited to 95 fragments (max_plan_fragments)" in plan.describe()
    seen = []

    def stream():
        for f in frags:
            seen.append(f.id)
            yield f

    _binpack(stream(), opts)
    assert len(seen) <= 100, "the plan kept reading fragments after reaching its limit"
    unlimited = plan_compaction(manifest(*frags), opts.with_overrides(max_plan_fragments=10_000))
    assert not unlimited.limited and sum(len(g.fragment_ids) for g in unlimited.groups) == 1000


def test_a_tiered_plan_keeps_its_first_groups_and_says_the_others_wait():
    frags = _small(400)
    opts = OPTS.with_overrides(policy=TIERED, target_rows_per_fragment=1600, max_plan_fragments=40)
    full = plan_compaction(manifest(*frags), opts.with_overrides(max_plan_fragments=100_000))
    plan = plan_compaction(manifest(*frags), opts)
    assert len(full.groups) > len(plan.groups) > 0 and plan.limited and not full.limited
    assert [g.fragment_ids for g in plan.groups] == [g.fragment_ids for g in full.groups[: len(plan.groups)]]
    assert sum(len(g.fragment_ids) for g in plan.groups) <= 40
    kept = {i for g in plan.groups for i in g.fragment_ids}
    for d in plan.tiers.decisions:
        if d.fragment_id not in kept and any(d.fragment_id in g.fragment_ids for g in full.groups):
            assert d.decision == WAIT and "max_plan_fragments" in d.why and d.group is None
    assert len(plan.tiers.group_triggers) == len(plan.groups)
