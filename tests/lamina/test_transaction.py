"""Transactions as committed: the record each operation leaves (docs/FORMAT.md §6), fresh stable row ids,
indices across overwrites and compactions, operations that cannot be replayed over another, deletions a
compaction carries, and deletes and index changes that lose the race for the next version.

Each case pins a behaviour that once survived mutation testing (docs/RELIABILITY.md, "Mutation testing").
"""

from __future__ import annotations

import pytest

import lamina
from lamina.commit import commit
from lamina.datafile import write_fragments
from lamina.errors import CommitConflict
from lamina.manifest import encode_manifest, load_manifest, manifest_path
from lamina.transaction import WalFlush
from tests.lamina.helpers import SCHEMA, BeatenOnce, ids_of, rows

_COMMON = {"uuid", "operation", "read_version", "timestamp_ms"}


def _record(t, version):
    rec = dict(load_manifest(t.store, version).transaction)
    assert _COMMON <= set(rec) and rec["read_version"] == version - 1
    return {k: v for k, v in rec.items() if k not in _COMMON} | {"operation": rec["operation"]}


def _flush(t, start, n, deltas, key):
    frags = write_fragments(t.store, t.schema, iter(rows(start, n).to_batches()), t.write_options)
    return commit(t.store, WalFlush(t.version, frags, deltas, {key: 7}, {}), t.manifest).version


def test_every_operation_records_what_it_did_as_docs_format_says(local_table_uri):
    """docs/FORMAT.md §6: the ``transaction`` of each manifest, read by other tools and by people."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    t.append(rows(100, 10))
    assert _record(t, 2) == {"operation": "append", "fragment_ids": [0], "rows": 100}
    t.delete("id < 5 OR id >= 100")  # fragment 1 disappears entirely
    assert _record(t, 4) == {
        "operation": "delete",
        "predicate": "id < 5 OR id >= 100",
        "fragment_ids": [0],
        "removed_fragment_ids": [1],
        "rows": 15,
    }
    t.reload()
    v = _flush(t, 1000, 10, {0: [5, 6]}, "0/0000000001")
    assert _record(t, v) == {
        "operation": "wal_flush",
        "fragment_ids": [2],
        "rows": 10,
        "deleted_fragment_ids": [0],
        "removed_fragment_ids": [],
        "rows_deleted": 2,
        "watermarks": {"0/0000000001": 7},
    }
    t.reload().overwrite(rows(500, 5))
    assert _record(t, v + 1) == {"operation": "overwrite", "fragment_ids": [3], "rows": 5}


def test_overwrite_and_flush_hand_out_fresh_stable_row_ids(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA, stable_row_ids=True)
    t.append(rows(0, 10))  # row ids 0..9
    t.overwrite(rows(100, 10))  # 10..19
    _flush(t.reload(), 200, 10, {}, "0/0000000001")  # 20..29
    t.reload().append(rows(300, 10))  # 30..39
    got = lamina.open_table(local_table_uri).to_arrow(columns=["id"], with_row_id=True)
    row_ids = got.column(got.num_columns - 1).to_pylist()
    assert sorted(row_ids) == list(range(10, 40)), "a stable row id was handed out twice"


def test_overwrite_drops_the_indices_of_the_replaced_rows(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    t.create_index("id", "btree", name="ix")
    t.overwrite(rows(500, 5))
    latest = lamina.open_table(local_table_uri)
    assert latest.list_indices() == [] and latest.manifest.indices == ()
    assert latest.to_arrow(filter="id = 502").column("id").to_pylist() == [502]


def _put_next_with_operation(t, operation):
    m = t.manifest
    nxt = m.replace(version=m.version + 1, transaction={**m.transaction, "uuid": "f" * 32, "operation": operation})
    assert t.store.put_if_absent(manifest_path(nxt.version), encode_manifest(nxt))


@pytest.mark.parametrize("operation", ["compact_v2", "create"])
def test_operation_this_version_cannot_replay_over_is_a_conflict(local_table_uri, operation):
    """A version written by a newer Lamina (unknown operation), or a second ``create``, is never rebased over."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    stale = t.checkout(t.version)
    _put_next_with_operation(t, operation)
    why = "the table was created again" if operation == "create" else f"append cannot be replayed over {operation}"
    with pytest.raises(
        CommitConflict,
        match=(
            rf"append on table {t.store.uri} \(read at version 2\) conflicts with the {operation} committed as version 3: "
            rf"{why}\. Nothing was committed; re-run the append on the latest version"
        ),
    ):
        stale.append(rows(100, 10))
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))


def _compact_locally(t, fragment_ids):
    """What lamina.jobs.compact does for one group, without Ray: GroupCompactor then one Rewrite commit."""
    from lamina.compaction import rewrite_transaction
    from lamina.planner import CompactionOptions
    from lamina.planner.eligibility import actions
    from lamina.planner.plan import CompactionGroup, CompactionPlan
    from lamina.workers.compaction import GroupCompactor, tasks_for

    base = t.manifest
    frags = base.fragment_map()
    members = [frags[i] for i in fragment_ids]
    group = CompactionGroup(
        0,
        tuple(fragment_ids),
        "full_rewrite",
        "test",
        sum(f.live_rows for f in members),
        sum(f.file_bytes for f in members),
        sum(len(f.row_groups) for f in members),
        ("small",) * len(members),
        tuple(actions(members, "full_rewrite", CompactionOptions())),
    )
    plan = CompactionPlan(t.uri, base.version, CompactionOptions(), (group,), len(base.fragments), base.rows)
    [task] = tasks_for(plan, base, t.uri, None, t.write_options, CompactionOptions().read_batch_bytes)
    r = GroupCompactor().run(task)
    assert r.ok, r.error
    return commit(t.store, rewrite_transaction(base.version, [r]), base)


def test_compaction_keeps_its_output_covered_by_every_index(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in (0, 100, 200):
        t.append(rows(start, 100))
    t.create_index("id", "btree", name="by_id")
    t.create_index("category", "bitmap", name="by_cat")
    new = _compact_locally(t, [0, 1])
    latest = lamina.open_table(local_table_uri)
    assert latest.version == new.version and [f.id for f in latest.fragments()] == [3, 2]
    live = {f.id for f in latest.fragments()}
    for ix in latest.manifest.indices:
        assert set(ix.coverage(live)) == {2, 3}, f"index {ix.name} does not cover the compacted fragment"
        assert ix.segments[-1].fragment_ids == (3,)
    for flt in ("id >= 50 AND id < 150", "category = 'b'", "id IN (3, 199, 250)"):
        assert latest.to_arrow(filter=flt).equals(latest.to_arrow(filter=flt, use_index=False)), flt
    rec = dict(latest.manifest.transaction)
    assert rec["read_version"] == new.version - 1
    assert rec["operation"] == "rewrite"
    assert [(g["old_fragment_ids"], g["new_fragment_ids"]) for g in rec["groups"]] == [([0, 1], [3])]
    assert rec["groups"][0]["mapping"] == [[0, 0, 0, 0, 100], [1, 0, 0, 100, 100]]
    latest.append(rows(300, 10))
    assert [f.id for f in lamina.open_table(local_table_uri).fragments()] == [3, 2, 4], "fragment ids are handed out in order"


def test_compaction_output_takes_the_place_of_its_first_source(local_table_uri):
    """Scan order is table order: the output of a group goes where its first source was."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in (0, 100, 200):
        t.append(rows(start, 10))
    _compact_locally(t, [0])  # fragment 3 now stands first: ids 3, 1, 2
    t.reload()
    _compact_locally(t, [3, 2])  # sources at positions 0 and 2
    latest = lamina.open_table(local_table_uri)
    assert [f.id for f in latest.fragments()] == [4, 1]
    assert latest.to_arrow(columns=["id"]).column("id").to_pylist() == list(range(10)) + list(range(200, 210)) + list(
        range(100, 110)
    )


def test_same_index_changed_twice_names_what_was_committed_first(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    t.create_index("id", "btree", name="ix")
    stale = t.checkout(t.version)
    t.drop_index("ix")
    with pytest.raises(CommitConflict, match=r"both changed index 'ix' \(drop committed first\)"):
        stale.drop_index("ix")


def _stale_rewrite(t, fragment_ids):
    from lamina.rewrite import full_rewrite
    from lamina.transaction import Rewrite

    base = t.manifest
    return base, Rewrite(base.version, [full_rewrite(t.store, base, fragment_ids, t.write_options)])


def test_compaction_carries_a_concurrent_delete_that_touched_only_its_second_source(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in (0, 100):
        t.append(rows(start, 100))
    base, txn = _stale_rewrite(t, [0, 1])
    t.delete("id = 150")  # committed while the compaction ran; fragment 0 untouched
    commit(t.store, txn, base)
    assert ids_of(lamina.open_table(local_table_uri)) == [i for i in range(200) if i != 150]


def test_compaction_carries_a_concurrent_delete_of_a_whole_source_of_any_size(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    t.append(rows(100, 10))
    base, txn = _stale_rewrite(t, [0, 1])
    t.delete("id < 100")  # fragment 0 (the larger one) disappears while the compaction runs
    commit(t.store, txn, base)
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(100, 110))


def _deletion_files(t):
    return {o.path for o in t.store.list("_deletions/")}


@pytest.mark.parametrize(
    "theirs,expected_gone",
    [
        ("id >= 5 AND id < 15", set(range(15))),  # the same fragment: my file must be merged again
        ("id >= 150 AND id < 160", set(range(10)) | set(range(150, 160))),  # another fragment: my file is reused
    ],
)
def test_delete_that_loses_the_put_to_another_delete_keeps_both_and_writes_no_stray_file(local_table_uri, theirs, expected_gone):
    from lamina.table import Table

    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in (0, 100):
        t.append(rows(start, 100))
    store = BeatenOnce(t.store, lambda: lamina.open_table(local_table_uri).delete(theirs))
    mine = Table(store, t.manifest)
    assert mine.delete("id < 10") == (5 if theirs.startswith("id >= 5") else 10)
    assert store.fired == 1
    latest = lamina.open_table(local_table_uri)
    assert set(ids_of(latest)) == set(range(200)) - expected_gone, "a delete's rows came back"
    if theirs.startswith("id >= 150"):  # my first file is still right on the new base: no second one
        referenced = {f.deletion.path for v in (4, 5) for f in load_manifest(t.store, v).fragments if f.deletion}
        assert _deletion_files(latest) == referenced, "the deletion file was written again"


def test_index_changes_record_name_action_and_segments(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    t.create_index("id", "btree", name="ix")
    seg = [s.uuid for s in t.manifest.indices[0].segments]
    assert _record(t, 3) == {"operation": "create_index", "index": "ix", "action": "create", "segments": seg}
    t.drop_index("ix")
    assert _record(t, 4) == {"operation": "create_index", "index": "ix", "action": "drop", "segments": seg}


def test_index_change_that_loses_a_race_removes_only_its_own_files(local_table_uri):
    """A losing create removes its new segments; a losing drop removes nothing (the files are the index's)."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    stale = t.checkout(t.version)
    t.create_index("id", "btree", name="ix")
    theirs = set(t.manifest.indices[0].files)
    with pytest.raises(CommitConflict, match="both changed index 'ix'"):
        stale.create_index("score", "btree", name="ix")
    assert {o.path for o in t.store.list("_indices/")} == theirs, "the losing create left its segments behind"

    a, b = t.checkout(t.version), t.checkout(t.version)
    a.drop_index("ix")
    with pytest.raises(CommitConflict, match=r"both changed index 'ix' \(drop committed first\)"):
        b.drop_index("ix")
    assert {o.path for o in t.store.list("_indices/")} == theirs, "a losing drop removed files older versions use"
    old = t.checkout(3)
    assert old.to_arrow(filter="id = 42").equals(old.to_arrow(filter="id = 42", use_index=False))
