"""The planner: eligibility rules (every reason), adjacent packing, lone fragments, options; and what a user of
``lamina.jobs.compact`` sees: which fragments are grouped at the exact targets, the mode at the exact row-group
threshold, the ``--set`` spellings accepted and refused, option bounds, and the plan as printed by ``--dry-run``
and written to the JSON summary."""

from __future__ import annotations

import json

import pytest

from lamina import _native
from lamina.errors import InvalidConfig
from lamina.manifest import DeletionFile, Fragment, Manifest, RowGroup
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.bin_packing import pack_adjacent
from lamina.planner.eligibility import (
    ALL_SMALL_ROW_GROUPS,
    BINARY_COPY,
    BINARY_COPY_DISABLED,
    DELETIONS,
    ELIGIBLE,
    FILE_VERSION_MISMATCH,
    FULL_REWRITE,
    HAS_DELETIONS,
    HYBRID,
    SMALL,
    SOME_ROW_GROUPS_DELETED,
    SOME_SMALL_OR_DELETED,
    SOME_SMALL_ROW_GROUPS,
    actions,
    candidate_reason,
    choose_mode,
)
from lamina.planner.options import parse_assignment

MiB = 1 << 20


def frag(fid, rows=100, rg_bytes=(2 * MiB,), deleted=0, version=None):
    groups = tuple(RowGroup(rows // len(rg_bytes), b) for b in rg_bytes)
    rows = sum(g.rows for g in groups)
    return Fragment(
        fid,
        f"data/{fid}.parquet",
        rows,
        sum(rg_bytes),
        groups,
        version or _native.FILE_VERSION,
        DeletionFile(f"_deletions/{fid}.bin", deleted) if deleted else None,
    )


def manifest(*frags):
    import pyarrow as pa

    return Manifest(7, 0, pa.schema([("id", pa.int64())]), tuple(frags), next_fragment_id=1000, next_row_id=0)


OPTS = CompactionOptions(target_rows_per_fragment=1000, target_bytes_per_fragment=64 * MiB, min_row_group_bytes=MiB)


@pytest.mark.parametrize(
    "fragment,reason",
    [
        (frag(0, rows=100), SMALL),
        (frag(0, rows=1000), None),  # at the target
        (frag(0, rows=100, rg_bytes=(65 * MiB,)), None),  # few rows but above the byte target
        (frag(0, rows=2000, deleted=200), DELETIONS),  # large, 10% deleted
        (frag(0, rows=2000, deleted=100), None),  # large, 5% deleted
        (frag(0, rows=100, deleted=5), SMALL),
    ],
)
def test_candidate_reason(fragment, reason):
    assert candidate_reason(fragment, OPTS) == reason


@pytest.mark.parametrize(
    "fragments,options,mode,reason",
    [
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
    ],
)
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
    import pickle

    frags = [frag(i, rows=300) for i in range(6)]
    plan = plan_compaction(manifest(*frags), OPTS, "t")
    assert plan.fragments_after == 2 and plan.read_version == 7
    assert json.loads(json.dumps(plan.to_dict()))["groups"][0]["mode"] == BINARY_COPY
    assert pickle.loads(pickle.dumps(plan)) == plan
    assert "group    0: binary_copy" in plan.describe()


def test_pack_adjacent_keeps_order_and_isolates_heavy_items():
    assert pack_adjacent([5, 5, 5, 20, 1], lambda x: (x,), (10,)) == [[5, 5], [5], [20], [1]]


@pytest.mark.parametrize(
    "values,message",
    [
        ({"target_rows_per_fragment": 0}, "target_rows_per_fragment=0"),
        ({"materialize_deletions_threshold": 1.5}, "materialize_deletions_threshold"),
        ({"enable_binary_copy": "yes"}, "enable_binary_copy"),
        ({"read_batch_bytes": 10}, "read_batch_bytes"),
        ({"nope": 1}, r"unknown compaction option\(s\) \['nope'\]"),
    ],
)
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
    assert [a[:3] for a in got] == [
        ("copy_if_clean", 0, 0),
        ("copy_if_clean", 0, 1),
        ("copy_if_clean", 0, 2),
        ("encode", 1, 0),
        ("encode", 1, 1),
        ("encode", 1, 2),
        ("copy_if_clean", 2, 0),
        ("copy_if_clean", 2, 1),
        ("encode", 2, 2),
    ]
    assert got[3].why == "deleted (at least 1 of the fragment's 201 deleted rows)"
    assert got[8].why.startswith("small")
    assert choose_mode([many], OPTS) == (FULL_REWRITE, HAS_DELETIONS)
    assert {a.action for a in actions([few], FULL_REWRITE, OPTS)} == {"encode"}


def test_resolve_copies_exactly_the_row_groups_without_deleted_rows():
    f = frag(0, rows=300, rg_bytes=(2 * MiB,) * 3, deleted=2)
    g = plan_compaction(manifest(f, frag(1, rows=100, rg_bytes=(MiB // 2,))), OPTS).groups[0]
    assert (g.mode, g.reason) == (HYBRID, SOME_SMALL_OR_DELETED)
    # row 100 is the first of row group 1, row 299 the last of row group 2
    for deleted, want in [
        ([100, 299], ["copy", "encode", "encode"]),
        ([99, 100], ["encode", "encode", "copy"]),
        ([0, 1], ["encode", "copy", "copy"]),
    ]:
        resolved = g.resolve([f, frag(1, rows=100)], [deleted, []])
        assert [a.action for a in resolved.actions] == want + ["encode"], deleted
        assert all(
            a.why.startswith("clean" if a.action == "copy" else ("deleted" if a.source == 0 else "small"))
            for a in resolved.actions
        )
        assert resolved.mode == g.mode and resolved.fragment_ids == g.fragment_ids
    assert g.resolve([f, frag(1, rows=100)], [[100, 299], []]).actions[1].why == "deleted (1 row)"
    assert all(a.action == "encode" for a in g.as_full_rewrite("refused").actions)


def test_dry_run_shows_each_row_group_to_copy_if_clean_and_why():
    frags = [
        frag(0, rows=300, rg_bytes=(2 * MiB,) * 3),
        frag(1, rows=300, rg_bytes=(2 * MiB,) * 3, deleted=4),
        frag(2, rows=100, rg_bytes=(MiB // 2,)),
    ]
    plan = plan_compaction(manifest(*frags), OPTS, "t")
    lines = plan.describe().splitlines()
    assert lines[1].split()[2:4] == ["hybrid", "reason=some_row_groups_small_or_deleted"]
    assert lines[2:] == [
        "              row groups: 3 copied, 3 copied if clean, 1 re-encoded (2:0)",
        "                fragment 1: rg 0-2 copy_if_clean: maybe_deleted (the fragment has 4 deleted rows: "
        "copied if none is in this row group)",
    ]
    assert plan.to_dict()["groups"][0]["row_group_plan"] == [lines[3].strip()]


# -- exact thresholds ---------------------------------------------------------------------------


def test_group_started_after_a_full_one_can_fill_the_whole_target():
    assert pack_adjacent([6, 4, 6, 4], lambda x: (x,), (10,)) == [[6, 4], [6, 4]]


def test_fragment_exactly_at_the_byte_target_is_not_a_candidate():
    assert candidate_reason(frag(0, rows=100, rg_bytes=(64 * MiB,)), OPTS) is None
    assert candidate_reason(frag(0, rows=100, rg_bytes=(64 * MiB - 1,)), OPTS) == "small"


def test_row_groups_exactly_at_min_row_group_bytes_are_copied_not_reencoded():
    frags = [frag(0, rg_bytes=(MiB,)), frag(1, rg_bytes=(MiB,))]
    assert choose_mode(frags, OPTS) == (BINARY_COPY, ELIGIBLE)
    mixed = [frag(0, rows=200, rg_bytes=(MiB, MiB - 1))]
    assert [a[:3] for a in actions(mixed, HYBRID, OPTS)] == [("copy", 0, 0), ("encode", 0, 1)]
    assert [a.why for a in actions(mixed, HYBRID, OPTS)] == ["large", "small (< 1,048,576 bytes)"]


def test_groups_are_cut_at_the_byte_target_too():
    # 100 rows each (far below the row target) but 30 MiB each: two fit in 64 MiB, three do not.
    frags = [frag(i, rows=100, rg_bytes=(30 * MiB,)) for i in range(3)]
    plan = plan_compaction(manifest(*frags), OPTS)
    assert [g.fragment_ids for g in plan.groups] == [(0, 1)]
    assert plan.skipped == ((2, "alone: no adjacent fragment has room for it"),)


def test_deleted_rows_do_not_count_towards_the_byte_target():
    # Two 40 MiB files, half deleted: 20 + 20 live MiB fit one 64 MiB output.
    opts = OPTS.with_overrides(target_rows_per_fragment=10_000)
    frags = [frag(i, rows=2000, rg_bytes=(40 * MiB,), deleted=1000) for i in range(2)]
    plan = plan_compaction(manifest(*frags), opts)
    assert [g.fragment_ids for g in plan.groups] == [(0, 1)]


def test_manifest_with_an_empty_fragment_plans_without_error():
    frags = [frag(0, rows=0, rg_bytes=(100,)), frag(1, rows=300), frag(2, rows=300)]
    plan = plan_compaction(manifest(*frags), OPTS)
    assert [g.fragment_ids for g in plan.groups] == [(0, 1, 2)]


# -- options --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw,value",
    [
        ("true", True),
        ("TRUE", True),
        ("1", True),
        ("yes", True),
        ("Yes", True),
        ("false", False),
        ("False", False),
        ("0", False),
        ("no", False),
        ("NO", False),
    ],
)
def test_set_enable_binary_copy_accepts_every_documented_spelling(raw, value):
    assert parse_assignment(f"enable_binary_copy={raw}") == ("enable_binary_copy", value)


@pytest.mark.parametrize("raw", ["", "none", "None", "null", "NULL"])
def test_set_max_concurrency_to_none_means_the_cluster_cpus(raw):
    assert parse_assignment(f"max_concurrency={raw}") == ("max_concurrency", None)


@pytest.mark.parametrize(
    "text,message",
    [
        ("enable_binary_copy=maybe", "'maybe' is not a valid value for enable_binary_copy"),
        ("max_task_retries=none", "'none' is not a valid value for max_task_retries"),
        ("target_rows_per_fragment=", "'' is not a valid value for target_rows_per_fragment"),
        ("max_task_retries=1=2", "'1=2' is not a valid value for max_task_retries"),
        ("target_rows_per_fragment", "expected key=value"),
        ("nope=1", "expected key=value"),
    ],
)
def test_set_rejects_bad_assignments_naming_the_problem(text, message):
    with pytest.raises(InvalidConfig, match=message):
        parse_assignment(text)


def test_unknown_option_errors_list_the_known_ones():
    with pytest.raises(
        InvalidConfig,
        match="key one of cluster, cluster_depth_trigger, cluster_max_bytes, cluster_merge_width, ",
    ):
        parse_assignment("nope=1")
    with pytest.raises(InvalidConfig, match="known: cluster, cluster_depth_trigger, cluster_max_bytes, cluster_merge_width, "):
        CompactionOptions.from_mapping({"nope": 1})


@pytest.mark.parametrize(
    "values",
    [
        {"max_task_retries": 101},  # an option after the optional max_concurrency is still checked
        {"partial_commit_every": -1},
        {"target_rows_per_fragment": None},  # only max_concurrency may be None
        {"target_rows_per_fragment": 1.5},  # integer options refuse floats
        {"max_task_retries": True},  # booleans are not numbers here
        {"max_task_retries": "3"},
        {"min_row_group_bytes": -1},
    ],
)
def test_out_of_range_or_mistyped_options_are_refused(values):
    with pytest.raises(InvalidConfig, match=next(iter(values))):
        CompactionOptions(**values)


def test_bounds_are_inclusive():
    o = CompactionOptions(max_task_retries=100, materialize_deletions_threshold=1.0, max_concurrency=10_000)
    assert (o.max_task_retries, o.materialize_deletions_threshold, o.max_concurrency) == (100, 1.0, 10_000)


def test_with_overrides_changes_only_what_it_names_and_validates_it():
    o = OPTS.with_overrides(max_task_retries=7)
    assert o.max_task_retries == 7
    assert o.to_dict() == {**OPTS.to_dict(), "max_task_retries": 7}
    with pytest.raises(InvalidConfig, match="max_task_retries"):
        OPTS.with_overrides(max_task_retries=-1)


# -- the plan as users read it ------------------------------------------------------------------


def _mixed_plan(table="tbl"):
    frags = (
        [frag(i, rows=200) for i in range(4)]
        + [frag(4, rows=5000)]
        + [frag(i, rows=300) for i in (5, 6, 7)]
        + [frag(8, rows=5000)]
        + [frag(9, rows=300), frag(10, rows=300, rg_bytes=(MiB // 2, 2 * MiB))]
        + [frag(11, rows=5000)]
        + [frag(12, rows=900), frag(13, rows=5000), frag(14, rows=2000, deleted=1000)]
    )
    return plan_compaction(manifest(*frags), OPTS, table)


def test_dry_run_describes_every_group_and_skipped_fragment():
    assert _mixed_plan().describe() == "\n".join(
        [
            "plan for tbl at version 7: 4 groups (2 binary_copy, 1 full_rewrite, 1 hybrid), 15 -> 9 fragments",
            "  group    0: binary_copy  reason=all_row_groups_large     fragments [0..3] (4) rows=800 bytes=8,388,608",
            "              row groups: 4 copied, 0 re-encoded",
            "  group    1: binary_copy  reason=all_row_groups_large     fragments [5,6,7] (3) rows=900 bytes=6,291,456",
            "              row groups: 3 copied, 0 re-encoded",
            "  group    2: hybrid       reason=some_row_groups_small    fragments [9,10] (2) rows=600 bytes=4,718,592",
            "              row groups: 2 copied, 1 re-encoded (10:0)",
            "                fragment 10: rg 0 encode: small (< 1,048,576 bytes); rg 1 copy: large",
            "  group    3: full_rewrite reason=has_deletions            fragments [14] (1) rows=1,000 bytes=2,097,152",
            "              row groups: 0 copied, 1 re-encoded",
            "                fragment 14: rg 0 encode: deleted (at least 1,000 of the fragment's 1,000 deleted rows)",
            "  skipped fragment 12: alone: no adjacent fragment has room for it",
        ]
    )


def test_dry_run_of_a_compact_table_says_nothing_to_do():
    plan = plan_compaction(manifest(frag(0, rows=5000)), OPTS)
    assert plan.describe() == "plan for  at version 7: 0 groups (nothing to do), 1 -> 1 fragments"


def test_plan_summary_json_has_every_field():
    plan = _mixed_plan()
    d = json.loads(json.dumps(plan.to_dict()))
    assert d == {
        "table": "tbl",
        "read_version": 7,
        "options": OPTS.to_dict(),
        "fragments_before": 15,
        "fragments_after": 9,
        "rows_before": 24200,
        "groups": [
            {
                "index": 0,
                "fragment_ids": [0, 1, 2, 3],
                "mode": "binary_copy",
                "reason": "all_row_groups_large",
                "rows": 800,
                "bytes": 8 * MiB,
                "row_groups": 4,
                "candidates": ["small"] * 4,
                "actions": [["copy", 0, 0], ["copy", 1, 0], ["copy", 2, 0], ["copy", 3, 0]],
                "row_group_plan": [],
                "schema_id": 0,
            },
            {
                "index": 1,
                "fragment_ids": [5, 6, 7],
                "mode": "binary_copy",
                "reason": "all_row_groups_large",
                "rows": 900,
                "bytes": 6 * MiB,
                "row_groups": 3,
                "candidates": ["small"] * 3,
                "actions": [["copy", 5, 0], ["copy", 6, 0], ["copy", 7, 0]],
                "row_group_plan": [],
                "schema_id": 0,
            },
            {
                "index": 2,
                "fragment_ids": [9, 10],
                "mode": "hybrid",
                "reason": "some_row_groups_small",
                "rows": 600,
                "bytes": 4 * MiB + MiB // 2,
                "row_groups": 3,
                "candidates": ["small"] * 2,
                "actions": [["copy", 9, 0], ["encode", 10, 0], ["copy", 10, 1]],
                "row_group_plan": ["fragment 10: rg 0 encode: small (< 1,048,576 bytes); rg 1 copy: large"],
                "schema_id": 0,
            },
            {
                "index": 3,
                "fragment_ids": [14],
                "mode": "full_rewrite",
                "reason": "has_deletions",
                "rows": 1000,
                "bytes": 2 * MiB,
                "row_groups": 1,
                "candidates": ["deletions"],
                "actions": [["encode", 14, 0]],
                "row_group_plan": ["fragment 14: rg 0 encode: deleted (at least 1,000 of the fragment's 1,000 deleted rows)"],
                "schema_id": 0,
            },
        ],
        "skipped": [[12, "alone: no adjacent fragment has room for it"]],
        "limited": False,
        "schema_id": 0,
        "earlier_schemas": [],
    }


def test_plan_without_a_table_name_has_an_empty_one():
    plan = plan_compaction(manifest(frag(0, rows=5000)), OPTS)
    assert plan.table == "" and plan.to_dict()["table"] == ""
