"""Planner behaviours that survived mutation testing (docs/RELIABILITY.md, "Mutation testing").

Each test pins something a user of ``lamina.jobs.compact`` sees: which fragments are grouped at the exact
targets, the mode at the exact row-group threshold, the ``--set`` spellings accepted and refused,
option bounds, and the plan as printed by ``--dry-run`` and written to the JSON summary.
"""

from __future__ import annotations

import json

import pytest

from lamina.errors import InvalidConfig
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.bin_packing import pack_adjacent
from lamina.planner.eligibility import BINARY_COPY, HYBRID, actions, candidate_reason, choose_mode, ELIGIBLE
from lamina.planner.options import parse_assignment
from tests.planner.test_plan import MiB, OPTS, frag, manifest

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


@pytest.mark.parametrize("raw,value", [
    ("true", True), ("TRUE", True), ("1", True), ("yes", True), ("Yes", True),
    ("false", False), ("False", False), ("0", False), ("no", False), ("NO", False),
])
def test_set_enable_binary_copy_accepts_every_documented_spelling(raw, value):
    assert parse_assignment(f"enable_binary_copy={raw}") == ("enable_binary_copy", value)


@pytest.mark.parametrize("raw", ["", "none", "None", "null", "NULL"])
def test_set_max_concurrency_to_none_means_the_cluster_cpus(raw):
    assert parse_assignment(f"max_concurrency={raw}") == ("max_concurrency", None)


@pytest.mark.parametrize("text,message", [
    ("enable_binary_copy=maybe", "'maybe' is not a valid value for enable_binary_copy"),
    ("max_task_retries=none", "'none' is not a valid value for max_task_retries"),
    ("target_rows_per_fragment=", "'' is not a valid value for target_rows_per_fragment"),
    ("max_task_retries=1=2", "'1=2' is not a valid value for max_task_retries"),
    ("target_rows_per_fragment", "expected key=value"),
    ("nope=1", "expected key=value"),
])
def test_set_rejects_bad_assignments_naming_the_problem(text, message):
    with pytest.raises(InvalidConfig, match=message):
        parse_assignment(text)


def test_unknown_option_errors_list_the_known_ones():
    with pytest.raises(InvalidConfig, match="key one of enable_binary_copy, materialize_deletions_threshold, "):
        parse_assignment("nope=1")
    with pytest.raises(InvalidConfig, match="known: enable_binary_copy, materialize_deletions_threshold, "):
        CompactionOptions.from_mapping({"nope": 1})


@pytest.mark.parametrize("values", [
    {"max_task_retries": 101},  # an option after the optional max_concurrency is still checked
    {"partial_commit_every": -1},
    {"target_rows_per_fragment": None},  # only max_concurrency may be None
    {"target_rows_per_fragment": 1.5},  # integer options refuse floats
    {"max_task_retries": True},  # booleans are not numbers here
    {"max_task_retries": "3"},
    {"min_row_group_bytes": -1},
])
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
        [frag(i, rows=200) for i in range(4)] + [frag(4, rows=5000)]
        + [frag(i, rows=300) for i in (5, 6, 7)] + [frag(8, rows=5000)]
        + [frag(9, rows=300), frag(10, rows=300, rg_bytes=(MiB // 2, 2 * MiB))] + [frag(11, rows=5000)]
        + [frag(12, rows=900), frag(13, rows=5000), frag(14, rows=2000, deleted=1000)]
    )
    return plan_compaction(manifest(*frags), OPTS, table)


def test_dry_run_describes_every_group_and_skipped_fragment():
    assert _mixed_plan().describe() == "\n".join([
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
    ])


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
            {"index": 0, "fragment_ids": [0, 1, 2, 3], "mode": "binary_copy", "reason": "all_row_groups_large",
             "rows": 800, "bytes": 8 * MiB, "row_groups": 4, "candidates": ["small"] * 4,
             "actions": [["copy", 0, 0], ["copy", 1, 0], ["copy", 2, 0], ["copy", 3, 0]], "row_group_plan": []},
            {"index": 1, "fragment_ids": [5, 6, 7], "mode": "binary_copy", "reason": "all_row_groups_large",
             "rows": 900, "bytes": 6 * MiB, "row_groups": 3, "candidates": ["small"] * 3,
             "actions": [["copy", 5, 0], ["copy", 6, 0], ["copy", 7, 0]], "row_group_plan": []},
            {"index": 2, "fragment_ids": [9, 10], "mode": "hybrid", "reason": "some_row_groups_small",
             "rows": 600, "bytes": 4 * MiB + MiB // 2, "row_groups": 3, "candidates": ["small"] * 2,
             "actions": [["copy", 9, 0], ["encode", 10, 0], ["copy", 10, 1]],
             "row_group_plan": ["fragment 10: rg 0 encode: small (< 1,048,576 bytes); rg 1 copy: large"]},
            {"index": 3, "fragment_ids": [14], "mode": "full_rewrite", "reason": "has_deletions",
             "rows": 1000, "bytes": 2 * MiB, "row_groups": 1, "candidates": ["deletions"],
             "actions": [["encode", 14, 0]],
             "row_group_plan": ["fragment 14: rg 0 encode: deleted (at least 1,000 of the fragment's 1,000 deleted rows)"]},
        ],
        "skipped": [[12, "alone: no adjacent fragment has room for it"]],
        "limited": False,
    }


def test_plan_without_a_table_name_has_an_empty_one():
    plan = plan_compaction(manifest(frag(0, rows=5000)), OPTS)
    assert plan.table == "" and plan.to_dict()["table"] == ""
