"""The planner on tables whose fragments are written in several schemas (pure, no I/O): chunks are copied only
among fragments of one schema, other rows are re-encoded into today's with the reason ``schema v3 vs v5``, and
``converge_schemas`` (an option, a ``--set``, a catalog property) makes every old fragment a candidate under
each policy."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lamina import _native
from lamina.clustering import Clustering
from lamina.errors import InvalidConfig
from lamina.manifest import DeletionFile, Fragment, Manifest, RowGroup
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.eligibility import (
    ALL_SMALL_ROW_GROUPS,
    BINARY_COPY,
    BINARY_COPY_DISABLED,
    ELIGIBLE,
    FULL_REWRITE,
    HYBRID,
    SCHEMA,
    SMALL,
    SOME_SMALL_ROW_GROUPS,
    candidate_reason,
    choose_mode,
    output_schema,
    row_group_actions,
)
from lamina.planner.maintenance import COMPACT, MaintenancePolicy, plan_table
from lamina.planner.options import parse_assignment
from lamina.planner.tiered import AT_TARGET, MERGE, SETTLED

MiB = 1 << 20
TODAY = 5
OPTS = CompactionOptions(target_rows_per_fragment=1000, target_bytes_per_fragment=64 * MiB, min_row_group_bytes=MiB)
CONVERGE = OPTS.with_overrides(converge_schemas=True)


def frag(fid, schema_id=TODAY, rows=100, rg_bytes=(2 * MiB,), deleted=0):
    groups = tuple(RowGroup(rows // len(rg_bytes), b) for b in rg_bytes)
    return Fragment(
        fid,
        f"data/{fid}.parquet",
        sum(g.rows for g in groups),
        sum(rg_bytes),
        groups,
        _native.FILE_VERSION,
        DeletionFile(f"_deletions/{fid}.bin", deleted) if deleted else None,
        schema_id=schema_id,
    )


def manifest(*frags, config=None):
    schema = pa.schema([("id", pa.int64()), ("x", pa.int64()), ("y", pa.int64())])
    return Manifest(
        7,
        0,
        schema,
        tuple(frags),
        next_fragment_id=1000,
        next_row_id=0,
        schema_id=TODAY,
        schemas={1: schema, 3: schema},
        config=config or {},
    )


def decide(fragments, options=OPTS):
    """(output schema, mode, reason) of one group, as plan_compaction decides them."""
    out = output_schema(fragments, options, TODAY)
    planned = row_group_actions(fragments, options, out)
    return (out, *choose_mode(fragments, options, planned, out))


@pytest.mark.parametrize(
    "fragments,options,decision",
    [
        # today's schema: as ever
        ([frag(0), frag(1)], OPTS, (TODAY, BINARY_COPY, ELIGIBLE)),
        # one earlier schema, chunks copied: the output stays in it
        ([frag(0, 3), frag(1, 3)], OPTS, (3, BINARY_COPY, ELIGIBLE)),
        ([frag(0, 3), frag(1, 3, rows=200, rg_bytes=(2 * MiB, MiB // 2))], OPTS, (3, HYBRID, SOME_SMALL_ROW_GROUPS)),
        # one earlier schema, nothing copied: re-encoded into today's
        ([frag(0, 3, rg_bytes=(MiB // 2,)), frag(1, 3, rg_bytes=(MiB // 2,))], OPTS, (TODAY, FULL_REWRITE, "schema v3 vs v5")),
        # converge_schemas: never kept in an earlier schema
        ([frag(0, 3), frag(1, 3)], CONVERGE, (TODAY, FULL_REWRITE, "schema v3 vs v5")),
        # mixed: today's chunks copied, the earlier schemas' rows re-encoded
        ([frag(0, 3), frag(1)], OPTS, (TODAY, HYBRID, "schema v3 vs v5")),
        ([frag(0, 1), frag(1, 3), frag(2, 1)], OPTS, (TODAY, FULL_REWRITE, "schema v1, v3 vs v5")),
        ([frag(0, 3), frag(1, rg_bytes=(MiB // 2,))], OPTS, (TODAY, FULL_REWRITE, "schema v3 vs v5")),
        # binary copy off: re-encoded into today's, for that reason
        ([frag(0, 3), frag(1, 3)], OPTS.with_overrides(enable_binary_copy=False), (TODAY, FULL_REWRITE, BINARY_COPY_DISABLED)),
        # today's small row groups alone: the old reason
        ([frag(0, rg_bytes=(MiB // 2,))], OPTS, (TODAY, FULL_REWRITE, ALL_SMALL_ROW_GROUPS)),
    ],
)
def test_chunks_are_copied_only_within_one_schema(fragments, options, decision):
    assert decide(fragments, options) == decision


def test_rows_of_another_schema_are_always_re_encoded_with_the_reason():
    frags = [frag(0, 3, rows=200, rg_bytes=(2 * MiB, 2 * MiB)), frag(1, rows=200, rg_bytes=(2 * MiB, MiB // 2))]
    got = [(a.action, a.source, a.row_group, a.why) for a in row_group_actions(frags, OPTS, TODAY)]
    assert got == [
        ("encode", 0, 0, "schema v3 vs v5"),
        ("encode", 0, 1, "schema v3 vs v5"),
        ("copy", 1, 0, "large"),
        ("encode", 1, 1, "small (< 1,048,576 bytes)"),
    ]


@pytest.mark.parametrize(
    "fragment,options,reason",
    [
        (frag(0, 3, rows=5000), OPTS, None),  # at the target, earlier schema: left alone by default
        (frag(0, 3, rows=5000), CONVERGE, SCHEMA),
        (frag(0, 3, rows=100), CONVERGE, SMALL),  # small first: it merges like any small fragment
        (frag(0, TODAY, rows=5000), CONVERGE, None),
    ],
)
def test_converge_schemas_makes_every_old_fragment_a_candidate(fragment, options, reason):
    assert candidate_reason(fragment, options, TODAY) == reason


def test_binpack_plan_and_dry_run_name_the_schemas():
    m = manifest(
        frag(0, 3),
        frag(1, 3),  # [0, 1]: copied, written in v3
        frag(2, 3, rows=5000),  # at the target, v3: waits for converge_schemas
        frag(3, 1, rows=300),
        frag(4, rows=300),  # [3, 4]: hybrid, v1 re-encoded
        frag(5, rows=5000),
    )
    plan = plan_compaction(m, OPTS, "tbl")
    assert [(g.fragment_ids, g.mode, g.reason, g.schema_id) for g in plan.groups] == [
        ((0, 1), BINARY_COPY, ELIGIBLE, 3),
        ((3, 4), HYBRID, "schema v1 vs v5", TODAY),
    ]
    text = plan.describe()
    assert "reason=schema v1 vs v5" in text
    assert "fragment 3: rg 0 encode: schema v1 vs v5" in text
    assert "written in schema v3, its sources' (chunks are copied only into their own schema; today's is v5)" in text
    assert (
        "schemas: today's is v5; 4 fragments written in earlier ones (v1: 1, v3: 3), read through them; "
        "this run re-encodes 1 into v5 (those it compacts anyway; converge_schemas=true re-encodes every one)"
    ) in text
    d = json.loads(json.dumps(plan.to_dict()))
    assert d["schema_id"] == TODAY and [g["schema_id"] for g in d["groups"]] == [3, TODAY]
    assert d["earlier_schemas"] == [
        {"schema_id": 1, "fragments": 1, "reencoded": 1},
        {"schema_id": 3, "fragments": 3, "reencoded": 0},
    ]

    converged = plan_compaction(m, CONVERGE, "tbl")
    assert [(g.fragment_ids, g.mode, g.reason, g.schema_id) for g in converged.groups] == [
        ((0, 1), FULL_REWRITE, "schema v3 vs v5", TODAY),
        ((2,), FULL_REWRITE, "schema v3 vs v5", TODAY),  # alone, but into today's schema
        ((3, 4), HYBRID, "schema v1 vs v5", TODAY),
    ]
    assert converged.to_dict()["earlier_schemas"] == [
        {"schema_id": 1, "fragments": 1, "reencoded": 1},
        {"schema_id": 3, "fragments": 3, "reencoded": 3},
    ]
    assert "converge_schemas: all of them" in converged.describe()


def test_converging_stays_within_the_targets_and_max_plan_fragments():
    frags = [frag(i, 3, rows=400) for i in range(10)]
    plan = plan_compaction(manifest(*frags), CONVERGE.with_overrides(max_plan_fragments=6))
    assert [g.fragment_ids for g in plan.groups] == [(0, 1), (2, 3), (4, 5)]
    assert plan.limited and all(g.rows <= 1000 for g in plan.groups)


def test_a_table_whose_schema_never_changed_plans_as_before():
    m = Manifest(7, 0, pa.schema([("id", pa.int64())]), (frag(0, 0), frag(1, 0)), next_fragment_id=9, next_row_id=0)
    plan = plan_compaction(m, CONVERGE)
    assert [(g.mode, g.schema_id) for g in plan.groups] == [(BINARY_COPY, 0)]
    assert plan.earlier == () and "schemas:" not in plan.describe()


def test_tiered_converges_old_fragments_at_the_target_alone():
    tiered = CONVERGE.with_overrides(policy="tiered")
    m = manifest(frag(0, 3, rows=5000), frag(1, rows=5000), frag(2, 1, rows=600))
    plan = plan_compaction(m, tiered)
    assert [(g.fragment_ids, g.reason, g.schema_id) for g in plan.groups] == [
        ((0,), "schema v3 vs v5", TODAY),
        ((2,), "schema v1 vs v5", TODAY),
    ]
    decisions = {d.fragment_id: d for d in plan.tiers.decisions}
    assert decisions[0].decision == MERGE and decisions[0].trigger == "schema"
    assert "written in schema v3, today's is v5 (converge_schemas)" in decisions[0].why
    assert decisions[1].decision != MERGE
    assert decisions[2].decision == MERGE and decisions[2].trigger == "schema"
    without = plan_compaction(m, tiered.with_overrides(converge_schemas=False))
    assert without.groups == () and {d.decision for d in without.tiers.decisions} <= {SETTLED, AT_TARGET}


def test_clustering_rewrites_old_fragments_alone_and_says_when_a_merge_re_encodes_them():
    keys = Clustering(("x",), "linear", ((10, 20, 30),))
    config = {"clustering": keys.to_config()}
    clustered = CONVERGE.with_overrides(cluster_tier_ratio=4, cluster_merge_width=4)
    # four small level-0 fragments of one tier merge; a lone old one at the target is rewritten alone
    small = [frag(i, 3 if i == 1 else TODAY, rows=20) for i in range(4)]
    m = manifest(*small, frag(4, 1, rows=5000), config=config)
    plan = plan_compaction(m, clustered)
    merge, alone = plan.groups
    assert merge.fragment_ids == (0, 1, 2, 3) and merge.reason.endswith("; schema v3 vs v5")
    assert alone.fragment_ids == (4,) and alone.reason.startswith("schema v1 vs v5 (converge_schemas)")
    assert {g.schema_id for g in plan.groups} == {TODAY}
    default = plan_compaction(m, clustered.with_overrides(converge_schemas=False))
    assert [g.fragment_ids for g in default.groups] == [(0, 1, 2, 3)]


def test_converge_schemas_from_a_flag_a_config_and_a_catalog_property():
    assert parse_assignment("converge_schemas=true") == ("converge_schemas", True)
    assert CompactionOptions.from_mapping({"converge_schemas": True}).converge_schemas
    with pytest.raises(InvalidConfig, match="converge_schemas='yes please' must be true or false"):
        CompactionOptions(converge_schemas="yes please")  # type: ignore[arg-type]
    base = MaintenancePolicy(compaction=OPTS)
    policy = base.with_properties({"maintenance.compaction.converge_schemas": "true"}, "sales.orders")
    assert policy.compaction.converge_schemas is True
    with pytest.raises(InvalidConfig, match="maintenance.compaction.converge_schemas='sometimes' must be true or false"):
        base.with_properties({"maintenance.compaction.converge_schemas": "sometimes"}, "sales.orders")
    m = manifest(frag(0, 3, rows=5000), frag(1, rows=5000))
    assert not plan_table("sales.orders", m, [(7, 0.0)], [], base, now=1.0).needs_work
    plan = plan_table("sales.orders", m, [(7, 0.0)], [], policy, now=1.0)
    assert plan.action_labels() == [COMPACT] and plan.actions[0].reason == "1 group(s): 2 -> 2 fragments (1 schema)"
    assert "reason=schema v3 vs v5" in plan.describe()
