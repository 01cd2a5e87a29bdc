"""The maintenance planner: which actions a table gets and why, the policy, its overrides (no files, no Ray)."""

from __future__ import annotations

import json

import pyarrow as pa
import pytest

from lamina import _native
from lamina.errors import InvalidConfig
from lamina.manifest import DeletionFile, Fragment, IndexEntry, IndexSegment, Manifest, RowGroup
from lamina.planner import CompactionOptions
from lamina.planner.maintenance import (
    CLEANUP,
    COMPACT,
    RETIRE_WAL,
    UPDATE_INDEX,
    MaintenancePolicy,
    WalSegment,
    expired_versions,
    plan_table,
)

MiB = 1 << 20
NOW = 1_700_000_000.0
DAY = 86_400.0
WEEK = 7 * DAY


def frag(fid, rows=2000, deleted=0):
    return Fragment(
        fid,
        f"data/{fid}.parquet",
        rows,
        4 * MiB,
        (RowGroup(rows, 4 * MiB),),
        _native.FILE_VERSION,
        DeletionFile(f"_deletions/{fid}.bin", deleted) if deleted else None,
    )


def index(name, *covered):
    segs = tuple(IndexSegment(f"s{i}", f"_indices/s{i}/index.idx", 10, 10, tuple(ids)) for i, ids in enumerate(covered))
    return IndexEntry(name, "id", "btree", f"u-{name}", segs)


def manifest(frags, indices=(), watermarks=None, version=9):
    return Manifest(
        version,
        0,
        pa.schema([("id", pa.int64())]),
        tuple(frags),
        next_fragment_id=100,
        next_row_id=0,
        indices=tuple(indices),
        wal_watermarks=dict(watermarks or {}),
    )


#: Compaction targets the hand-made fragments are measured against: 2,000-row fragments are "large".
POLICY = MaintenancePolicy(compaction=CompactionOptions(target_rows_per_fragment=1000, min_row_group_bytes=MiB))
HEALTHY = manifest([frag(0), frag(1), frag(2)], [index("id_btree", (0, 1, 2))])
#: Committed two days ago and last week: only version 1 was superseded longer ago than a day.
RECENT_VERSIONS = [(8, NOW - 2 * DAY), (9, NOW - 3600)]


def kinds(plan):
    return [a.label for a in plan.actions]


@pytest.mark.parametrize(
    "case,m,versions,wal,policy,expected",
    [
        ("healthy", HEALTHY, RECENT_VERSIONS, [], POLICY, []),
        (
            "small fragments",
            manifest([frag(0), frag(1, rows=10), frag(2, rows=10), frag(3, rows=10)], [index("id_btree", (0, 1, 2, 3))]),
            RECENT_VERSIONS,
            [],
            POLICY,
            [COMPACT],
        ),
        ("heavy deletions", manifest([frag(0, deleted=900), frag(1)]), RECENT_VERSIONS, [], POLICY, [COMPACT]),
        (
            "uncovered fragments",
            manifest([frag(0), frag(1), frag(2)], [index("id_btree", (0,)), index("b", (0, 1, 2))]),
            RECENT_VERSIONS,
            [],
            POLICY,
            [f"{UPDATE_INDEX} id_btree"],
        ),
        (
            "uncovered but compacted",
            manifest([frag(0), frag(1, rows=10), frag(2, rows=10)], [index("id_btree", (0,))]),
            RECENT_VERSIONS,
            [],
            POLICY,
            [COMPACT],
        ),
        (
            "uncovered, some compacted",
            manifest([frag(0, rows=10), frag(1, rows=10), frag(2)], [index("id_btree", ())]),
            RECENT_VERSIONS,
            [],
            POLICY,
            [COMPACT, f"{UPDATE_INDEX} id_btree"],
        ),
        (
            "old versions",
            HEALTHY,
            [(5, NOW - 30 * DAY), (6, NOW - 20 * DAY), (7, NOW - 10 * DAY), (8, NOW - DAY), (9, NOW)],
            [],
            POLICY,
            [CLEANUP],
        ),
        ("one old version only", HEALTHY, [(9, NOW - 300 * DAY)], [], POLICY, []),
        (
            "short retention",
            HEALTHY,
            RECENT_VERSIONS,
            [],
            MaintenancePolicy(retention_seconds=0, enforce_retention=False, compaction=POLICY.compaction),
            [CLEANUP],
        ),
        (
            "applied WAL",
            manifest([frag(0)], watermarks={"0/0000000000": 3}),
            RECENT_VERSIONS,
            [WalSegment(0, 0, NOW - 8 * DAY, 3)],
            POLICY,
            [RETIRE_WAL],
        ),
        (
            "WAL not fully applied",
            manifest([frag(0)], watermarks={"0/0000000000": 2}),
            RECENT_VERSIONS,
            [WalSegment(0, 0, NOW - 8 * DAY, 3)],
            POLICY,
            [],
        ),
        (
            "WAL sealed recently",
            manifest([frag(0)], watermarks={"0/0000000000": 3}),
            RECENT_VERSIONS,
            [WalSegment(0, 0, NOW - DAY, 3)],
            POLICY,
            [],
        ),
        ("WAL not sealed", manifest([frag(0)], watermarks={"0/0000000000": 3}), RECENT_VERSIONS, [WalSegment(0, 0)], POLICY, []),
        (
            "WAL of another shard's watermark",
            manifest([frag(0)], watermarks={"0/0000000000": 3}),
            RECENT_VERSIONS,
            [WalSegment(1, 0, NOW - 8 * DAY, 3)],
            POLICY,
            [],
        ),
        (
            "everything",
            manifest([frag(0, rows=10), frag(1, rows=10), frag(2)], [index("id_btree", (0, 1))], watermarks={"2/0000000004": 1}),
            [(1, NOW - 30 * DAY), (9, NOW - 10 * DAY)],
            [WalSegment(2, 4, NOW - 10 * DAY, 1)],
            POLICY,
            [COMPACT, f"{UPDATE_INDEX} id_btree", RETIRE_WAL, CLEANUP],
        ),
        (
            "everything off",
            manifest([frag(0, rows=10), frag(1, rows=10), frag(2)], [index("id_btree", (0, 1))], watermarks={"2/0000000004": 1}),
            [(1, NOW - 30 * DAY), (9, NOW - 10 * DAY)],
            [WalSegment(2, 4, NOW - 10 * DAY, 1)],
            MaintenancePolicy(compact=False, update_indices=False, retire_wal=False, cleanup=False),
            [],
        ),
        (
            "only some indices",
            manifest([frag(0), frag(1)], [index("a", (0,)), index("b", (0,))]),
            RECENT_VERSIONS,
            [],
            MaintenancePolicy(update_indices=("b",), compaction=POLICY.compaction),
            [f"{UPDATE_INDEX} b"],
        ),
        ("empty table", manifest([]), [(1, NOW - 30 * DAY)], [], POLICY, []),
    ],
)
def test_plan_table(case, m, versions, wal, policy, expected):
    plan = plan_table("db.t", m, versions, wal, policy, NOW)
    assert kinds(plan) == expected, case
    assert plan.needs_work == bool(expected)
    assert all(a.reason for a in plan.actions)
    assert (plan.compaction is not None) == (COMPACT in expected)
    text = plan.describe()
    assert text.startswith(f"db.t at version {m.version}: ")
    for a in plan.actions:
        assert f"{a.label}: {a.reason}" in text
    json.dumps(plan.to_dict())  # serializable as the job's --json output


def test_reasons_name_what_was_found():
    m = manifest(
        [frag(0, rows=10), frag(1, rows=10), frag(2)],
        [index("id_btree", (0, 1))],
        watermarks={"2/0000000004": 1, "2/0000000005": 7},
    )
    wal = [WalSegment(2, 4, NOW - 10 * DAY, 1), WalSegment(2, 5, NOW - 10 * DAY, 7), WalSegment(2, 6, NOW - 10 * DAY, 7)]
    plan = plan_table("db.t", m, [(1, NOW - 30 * DAY), (2, NOW - 20 * DAY), (9, NOW - 10 * DAY)], wal, POLICY, NOW)
    reasons = {a.kind: a.reason for a in plan.actions}
    assert reasons[COMPACT] == "1 group(s): 3 -> 2 fragments (2 small)"
    assert reasons[UPDATE_INDEX] == "1 of 3 live fragment(s) not covered (fragments [2])"
    assert reasons[RETIRE_WAL] == "2 sealed WAL segment(s) fully committed and sealed more than 7d ago (shard 2: 4,5)"
    assert reasons[CLEANUP] == "2 of 3 version(s) superseded more than 7d ago (versions [1,2])"
    assert plan.expired_versions == (1, 2) and plan.wal_segments == ((2, 4), (2, 5))
    assert plan.compaction.groups[0].fragment_ids == (0, 1)


@pytest.mark.parametrize(
    "versions,cutoff,expired",
    [
        ([], NOW, []),
        ([(1, 0.0)], NOW, []),
        ([(1, 0.0), (2, 10.0), (3, 20.0)], 15.0, [1]),
        ([(1, 0.0), (2, 10.0), (3, 20.0)], 25.0, [1, 2]),
        ([(1, 0.0), (2, 10.0), (3, 20.0)], 10.0, []),  # superseded exactly at the cutoff: kept, as cleanup does
        ([(3, 20.0), (1, 0.0), (2, 10.0)], 25.0, [1, 2]),  # any order in
        ([(1, 0.0), (2, 30.0), (3, 20.0)], 25.0, []),  # a prefix only: stops at the first kept version
    ],
)
def test_expired_versions_match_cleanup(versions, cutoff, expired):
    assert expired_versions(versions, cutoff) == expired


def test_policy_defaults_and_mapping():
    p = MaintenancePolicy.from_mapping({})
    assert (p.compact, p.cleanup, p.retire_wal, p.update_indices, p.retention_seconds, p.enforce_retention) == (
        True,
        True,
        True,
        True,
        WEEK,
        True,
    )
    assert p.compaction == CompactionOptions()
    p = MaintenancePolicy.from_mapping(
        {"compaction": {"target_rows_per_fragment": 5}, "update_indices": ["a", "b"], "retention_seconds": 3600}
    )
    assert p.compaction.target_rows_per_fragment == 5 and p.update_indices == ("a", "b")
    assert MaintenancePolicy.from_mapping(p.to_dict()) == p
    json.dumps(p.to_dict())


@pytest.mark.parametrize(
    "values,message",
    [
        ({"nope": 1}, "unknown maintenance option(s) ['nope']"),
        ({"retention_seconds": 60}, "below the 1:00:00 safety floor"),
        ({"retention_seconds": -1, "enforce_retention": False}, "must be a number of seconds >= 0"),
        ({"retention_seconds": "7d"}, "must be a number of seconds"),
        ({"compact": "yes"}, "compact='yes' must be true or false"),
        ({"update_indices": 3}, "update_indices=3 must be true, false or a list of index names"),
        ({"compaction": {"target_rows_per_fragment": 0}}, "target_rows_per_fragment=0"),
        ({"compaction": {"bogus": 1}}, "unknown compaction option(s) ['bogus']"),
        ({"compaction": 5}, "must be a mapping"),
    ],
)
def test_bad_policy_is_refused(values, message):
    with pytest.raises(InvalidConfig, match=None) as e:
        MaintenancePolicy.from_mapping(values)
    assert message in str(e.value)


def test_short_retention_is_allowed_when_not_enforced():
    assert MaintenancePolicy(retention_seconds=0, enforce_retention=False).retention_seconds == 0


@pytest.mark.parametrize(
    "props,check",
    [
        ({}, lambda p: p == MaintenancePolicy()),
        ({"owner": "sales", "maintenance": "x"}, lambda p: p == MaintenancePolicy()),  # not maintenance.* keys
        ({"maintenance.compact": "false"}, lambda p: p.compact is False),
        ({"maintenance.compact": "TRUE", "maintenance.cleanup": "0"}, lambda p: p.compact is True and p.cleanup is False),
        ({"maintenance.retire_wal": False}, lambda p: p.retire_wal is False),
        ({"maintenance.retention_seconds": "3600"}, lambda p: p.retention_seconds == 3600.0),
        (
            {"maintenance.retention_seconds": "0", "maintenance.enforce_retention": "false"},
            lambda p: p.retention_seconds == 0 and not p.enforce_retention,
        ),
        ({"maintenance.update_indices": "false"}, lambda p: p.update_indices is False),
        ({"maintenance.update_indices": "a, b"}, lambda p: p.update_indices == ("a", "b")),
        (
            {"maintenance.compaction.target_rows_per_fragment": "100_000"},
            lambda p: p.compaction.target_rows_per_fragment == 100_000,
        ),
        (
            {"maintenance.compaction.materialize_deletions_threshold": "0.5"},
            lambda p: p.compaction.materialize_deletions_threshold == 0.5,
        ),
        ({"maintenance.compaction.enable_binary_copy": "no"}, lambda p: p.compaction.enable_binary_copy is False),
        ({"maintenance.compaction.max_concurrency": "null"}, lambda p: p.compaction.max_concurrency is None),
        ({"maintenance.compaction.max_concurrency": 4}, lambda p: p.compaction.max_concurrency == 4),
    ],
)
def test_properties_override_the_policy(props, check):
    assert check(MaintenancePolicy().with_properties(props, "db.t"))


def test_override_order_is_the_callers():
    """``Catalog.effective_properties`` merges namespaces then the table; the policy takes the merged dict."""
    base = MaintenancePolicy.from_mapping({"retention_seconds": 7200})
    p = base.with_properties({"maintenance.retention_seconds": "3600", "maintenance.compact": "false"})
    assert (p.retention_seconds, p.compact, p.cleanup) == (3600.0, False, True)
    assert base.retention_seconds == 7200, "the policy is a value: with_properties returns a new one"


@pytest.mark.parametrize(
    "props,message",
    [
        ({"maintenance.compact": "maybe"}, "table db.t: property maintenance.compact='maybe' must be true or false"),
        (
            {"maintenance.retention_seconds": "a week"},
            "table db.t: property maintenance.retention_seconds='a week' must be a number",
        ),
        ({"maintenance.retention_seconds": "60"}, "table db.t: the maintenance.* properties give an invalid policy"),
        (
            {"maintenance.compaction.target_rows_per_fragment": "1.5"},
            "maintenance.compaction.target_rows_per_fragment='1.5' must be an integer",
        ),
        ({"maintenance.compaction.target_rows_per_fragment": "-3"}, "target_rows_per_fragment=-3"),
        ({"maintenance.compaction.nope": "1"}, "table db.t: property maintenance.compaction.nope names no compaction option"),
        (
            {"maintenance.retension_seconds": "3600"},
            "table db.t: property maintenance.retension_seconds names no maintenance option",
        ),
        ({"maintenance.update_indices": ""}, "must be true, false or a comma-separated list of index names"),
    ],
)
def test_bad_properties_name_the_table_and_the_key(props, message):
    with pytest.raises(InvalidConfig) as e:
        MaintenancePolicy().with_properties(props, "db.t")
    assert message in str(e.value)


def test_dry_run_text_shows_the_compaction_plan_under_its_action():
    m = manifest([frag(i, rows=100) for i in range(6)])
    plan = plan_table("db.t", m, [(m.version, NOW)], [], POLICY, NOW)
    text = plan.describe()
    assert COMPACT in kinds(plan)
    assert "    group    0:" in text and "row groups:" in text, text
