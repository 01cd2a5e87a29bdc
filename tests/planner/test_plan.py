"""The planner: eligibility rules (every reason), adjacent packing, lone fragments, options."""

from __future__ import annotations

import pytest

from lamina import _native
from lamina.errors import InvalidConfig
from lamina.manifest import DeletionFile, Fragment, Manifest, RowGroup
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.bin_packing import pack_adjacent
from lamina.planner.eligibility import (
    ALL_SMALL_ROW_GROUPS, BINARY_COPY, BINARY_COPY_DISABLED, DELETIONS, ELIGIBLE, FILE_VERSION_MISMATCH, FULL_REWRITE,
    HAS_DELETIONS, HYBRID, SMALL, SOME_ROW_GROUPS_DELETED, SOME_SMALL_OR_DELETED, SOME_SMALL_ROW_GROUPS, actions, candidate_reason, choose_mode,
)
from lamina.planner.options import parse_assignment

MiB = 1 << 20


def frag(fid, rows=100, rg_bytes=(2 * MiB,), deleted=0, version=None):
    groups = tuple(RowGroup(rows // len(rg_bytes), b) for b in rg_bytes)
    rows = sum(g.rows for g in groups)
    return Fragment(fid, f"data/{fid}.parquet", rows, sum(rg_bytes), groups, version or _native.FILE_VERSION,
                    DeletionFile(f"_deletions/{fid}.bin", deleted) if deleted else None)


def manifest(*frags):
    import pyarrow as pa

    return Manifest(7, 0, pa.schema([("id", pa.int64())]), tuple(frags), next_fragment_id=1000, next_row_id=0)


OPTS = CompactionOptions(target_rows_per_fragment=1000, target_bytes_per_fragment=64 * MiB, min_row_group_bytes=MiB)


@pytest.mark.parametrize("fragment,reason", [
    (frag(0, rows=100), SMALL),
    (frag(0, rows=1000), None),  # at the target
    (frag(0, rows=100, rg_bytes=(65 * MiB,)), None),  # few rows but above the byte target
    (frag(0, rows=2000, deleted=200), DELETIONS),  # large, 10% deleted
    (frag(0, rows=2000, deleted=100), None),  # large, 5% deleted
    (frag(0, rows=100, deleted=5), SMALL),
])
def test_candidate_reason(fragment, reason):
    assert candidate_reason(fragment, OPTS) == reason


@pytest.mark.parametrize("fragments,options,mode,reason", [
    ([frag(0), frag(1)], OPTS, BINARY_COPY, ELIGIBLE),
    ([frag(0), frag(1, rg_bytes=(MiB // 2,))], OPTS, HYBRID, SOME_SMALL_ROW_GROUPS),
    ([frag(0, rg_bytes=(MiB // 2,)), frag(1, rg_bytes=(MiB // 4,))], OPTS, FULL_REWRITE, ALL_SMALL_ROW_GROUPS),
    # one row group each: the one with deletions must hold them, the other is copied
    ([frag(0), frag(1, deleted=3)], OPTS, HYBRID, SOME_ROW_GROUPS_DELETED),
    ([frag(0, deleted=1), frag(1, deleted=3)], OPTS, FULL_REWRITE, HAS_DELETIONS),
    ([frag(0, rg_bytes=(MiB // 2,)), frag(1, deleted=3)], OPTS, FULL_REWRITE, HAS_DELETIONS),
    # 2 of 200 rows deleted in two row groups: each is copied if clean
    ([frag(0, rows=200, rg_bytes=(2 * MiB, 2 * MiB), deleted=2)], OPTS, HYBRID, SOME_ROW_GROUPS_DELETED),
    ([frag(0, rows=200, rg_bytes=(2 * MiB, MiB // 2), deleted=2)], OPTS, HYBRID, SOME_SMALL_OR_DELETED),
    ([frag(0, deleted=3)], OPTS.with_overrides(enable_binary_copy=False), FULL_REWRITE, BINARY_COPY_DISABLED),
    ([frag(0), frag(1, version="0")], OPTS, FULL_REWRITE, FILE_VERSION_MISMATCH),
    ([frag(0), frag(1)], OPTS.with_overrides(enable_binary_copy=False), FULL_REWRITE, BINARY_COPY_DISABLED),
])
def test_choose_mode(fragments, options, mode, reason):
    assert choose_mode(fragments, options) == (mode, reason)


def test_hybrid_actions_copy_large_and_encode_small():
    frags = [frag(0, rows=200, rg_bytes=(2 * MiB, MiB // 2)), frag(1, rows=100, rg_bytes=(MiB // 3,))]
    assert [a[:3] for a in actions(frags, HYBRID, OPTS)] == [("copy", 0, 0), ("encode", 0, 1), ("encode", 1, 0)]
    assert {a[0] for a in actions(frags, FULL_REWRITE, OPTS)} == {"encode"}


def test_runs_of_adjacent_candidates_are_packed_to_the_target():
    frags = [frag(i, rows=300) for i in range(7)] + [frag(7, rows=5000)] + [frag(8, rows=300), frag(9, rows=300)]
    plan = plan_compaction(manifest(*frags), OPTS)
    ids = [g.fragment_ids for g in plan.groups]
    assert ids[:2] == [(0, 1, 2), (3, 4, 5)]
    assert all(7 not in g for g in ids), "a fragment at the target is never a candidate"
    assert (8, 9) in ids
    assert all(sum(300 for _ in g) <= 1000 for g in ids)


@pytest.mark.parametrize("rows", [[900, 50, 960], [500, 400, 300, 800], [300, 800, 300], [100] * 25])
def test_no_lone_fragment_could_have_joined_a_neighbour(rows):
    frags = [frag(i, rows=r) for i, r in enumerate(rows)]
    plan = plan_compaction(manifest(*frags), OPTS)
    grouped = {i for g in plan.groups for i in g.fragment_ids}
    assert grouped | {fid for fid, _ in plan.skipped} == {i for i, r in enumerate(rows) if r < 1000}
    for g in plan.groups:
        assert sum(rows[i] for i in g.fragment_ids) <= 1000
    for fid, _ in plan.skipped:
        for g in plan.groups:
            if fid - 1 in g.fragment_ids or fid + 1 in g.fragment_ids:
                assert rows[fid] + sum(rows[i] for i in g.fragment_ids) > 1000, "a neighbour group had room"
        for n in (fid - 1, fid + 1):
            if 0 <= n < len(rows) and n not in grouped:
                assert rows[fid] + rows[n] > 1000, "a lone neighbour had room"


def test_lone_fragment_without_deletions_is_not_rewritten():
    frags = [frag(0, rows=5000), frag(1, rows=900), frag(2, rows=5000)]
    plan = plan_compaction(manifest(*frags), OPTS)
    assert plan.groups == ()
    assert plan.skipped == ((1, "alone: no adjacent fragment has room for it"),)


def test_lone_fragment_with_deletions_is_rewritten():
    plan = plan_compaction(manifest(frag(0, rows=5000, deleted=1000)), OPTS)
    assert [(g.fragment_ids, g.mode, g.reason) for g in plan.groups] == [((0,), FULL_REWRITE, HAS_DELETIONS)]


def test_plan_is_serializable_and_counts_fragments():
    import json
    import pickle

    frags = [frag(i, rows=300) for i in range(6)]
    plan = plan_compaction(manifest(*frags), OPTS, "t")
    assert plan.fragments_after == 2 and plan.read_version == 7
    assert json.loads(json.dumps(plan.to_dict()))["groups"][0]["mode"] == BINARY_COPY
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert "group    0: binary_copy" in plan.describe()


def test_pack_adjacent_keeps_order_and_isolates_heavy_items():
    assert pack_adjacent([5, 5, 5, 20, 1], lambda x: (x,), (10,)) == [[5, 5], [5], [20], [1]]


@pytest.mark.parametrize("values,message", [
    ({"target_rows_per_fragment": 0}, "target_rows_per_fragment=0"),
    ({"materialize_deletions_threshold": 1.5}, "materialize_deletions_threshold"),
    ({"enable_binary_copy": "yes"}, "enable_binary_copy"),
    ({"read_batch_bytes": 10}, "read_batch_bytes"),
    ({"nope": 1}, r"unknown compaction option\(s\) \['nope'\]"),
])
def test_options_are_validated(values, message):
    with pytest.raises(InvalidConfig, match=message):
        CompactionOptions.from_mapping(values)


def test_parse_assignment_types_values():
    assert parse_assignment("target_rows_per_fragment=1_000") == ("target_rows_per_fragment", 1000)
    assert parse_assignment("enable_binary_copy=false") == ("enable_binary_copy", False)
    assert parse_assignment("materialize_deletions_threshold=0.25") == ("materialize_deletions_threshold", 0.25)
    assert parse_assignment("max_concurrency=none") == ("max_concurrency", None)
    with pytest.raises(InvalidConfig, match="not a valid value"):
        parse_assignment("max_task_retries=many")
    with pytest.raises(InvalidConfig, match="expected key=value"):
        parse_assignment("bogus")


def test_row_groups_of_a_fragment_with_deletions_are_copied_if_clean_unless_they_must_hold_some():
    # 3 row groups of 100 rows: 150 deleted rows cannot all lie outside any one of them... only if > 200
    few = frag(0, rows=300, rg_bytes=(2 * MiB,) * 3, deleted=150)
    many = frag(1, rows=300, rg_bytes=(2 * MiB,) * 3, deleted=201)
    small = frag(2, rows=300, rg_bytes=(2 * MiB, 2 * MiB, MiB // 2), deleted=5)
    got = actions([few, many, small], HYBRID, OPTS)
    assert [a[:3] for a in got] == [("copy_if_clean", 0, 0), ("copy_if_clean", 0, 1), ("copy_if_clean", 0, 2),
                                    ("encode", 1, 0), ("encode", 1, 1), ("encode", 1, 2),
                                    ("copy_if_clean", 2, 0), ("copy_if_clean", 2, 1), ("encode", 2, 2)]
    assert got[3].why == "deleted (at least 1 of the fragment's 201 deleted rows)"
    assert got[8].why.startswith("small")
    assert choose_mode([many], OPTS) == (FULL_REWRITE, HAS_DELETIONS)
    assert {a.action for a in actions([few], FULL_REWRITE, OPTS)} == {"encode"}


def test_resolve_copies_exactly_the_row_groups_without_deleted_rows():
    f = frag(0, rows=300, rg_bytes=(2 * MiB,) * 3, deleted=2)
    g = plan_compaction(manifest(f, frag(1, rows=100, rg_bytes=(MiB // 2,))), OPTS).groups[0]
    assert (g.mode, g.reason) == (HYBRID, SOME_SMALL_OR_DELETED)
    # row 100 is the first of row group 1, row 299 the last of row group 2
    for deleted, want in [([100, 299], ["copy", "encode", "encode"]), ([99, 100], ["encode", "encode", "copy"]),
                          ([0, 1], ["encode", "copy", "copy"])]:
        resolved = g.resolve([f, frag(1, rows=100)], [deleted, []])
        assert [a.action for a in resolved.actions] == want + ["encode"], deleted
        assert all(a.why.startswith("clean" if a.action == "copy" else ("deleted" if a.source == 0 else "small"))
                   for a in resolved.actions)
        assert resolved.mode == g.mode and resolved.fragment_ids == g.fragment_ids
    assert g.resolve([f, frag(1, rows=100)], [[100, 299], []]).actions[1].why == "deleted (1 row)"
    assert all(a.action == "encode" for a in g.as_full_rewrite("refused").actions)


def test_dry_run_shows_each_row_group_to_copy_if_clean_and_why():
    frags = [frag(0, rows=300, rg_bytes=(2 * MiB,) * 3), frag(1, rows=300, rg_bytes=(2 * MiB,) * 3, deleted=4),
             frag(2, rows=100, rg_bytes=(MiB // 2,))]
    plan = plan_compaction(manifest(*frags), OPTS, "t")
    lines = plan.describe().splitlines()
    assert lines[1].split()[2:4] == ["hybrid", "reason=some_row_groups_small_or_deleted"]
    assert lines[2:] == [
        "              row groups: 3 copied, 3 copied if clean, 1 re-encoded (2:0)",
        "                fragment 1: rg 0-2 copy_if_clean: maybe_deleted (the fragment has 4 deleted rows: "
        "copied if none is in this row group)",
    ]
    assert plan.to_dict()["groups"][0]["row_group_plan"] == [lines[3].strip()]
