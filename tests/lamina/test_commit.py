"""Commits: every cell of the conflict matrix, and writes whose outcome is unknown.

Each cell is a real race: "mine" reads version 3, "theirs" commits version 4
first, then mine commits and must rebase onto 4 or fail with CommitConflict.
"""

from __future__ import annotations

import itertools

import pyarrow as pa
import pytest

import lamina
from lamina.commit import commit
from lamina.datafile import write_fragments
from lamina.errors import CommitConflict, StorageError, TableDropped, TableNotFound
from lamina.manifest import list_versions, load_manifest
from lamina.rewrite import full_rewrite
from lamina.transaction import MATRIX, OPERATIONS, Drop, Rewrite, WalFlush
from tests.lamina.helpers import SCHEMA, HookedStore, ids_of, rows

BASE = set(range(300))  # three fragments of 100 rows: ids 0-99, 100-199, 200-299


def make_base(uri, opts=None):
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for start in (0, 100, 200):
        t.append(rows(start, 100))
    assert t.version == 4
    return t


# Each operation, as "mine" or "theirs": what it does to a table view, and to the set of ids.
def do(op, who, table, *, overlap_rewrite=True, index_name=None):
    frag_ids = [f.id for f in table.fragments()]
    if op == "append":
        table.append(rows(1000 if who == "mine" else 2000, 10))
    elif op == "delete":
        table.delete("id < 10" if who == "mine" else "id >= 5 AND id < 15")
    elif op == "rewrite":
        ids = frag_ids[:2] if who == "mine" else (frag_ids[1:] if overlap_rewrite else frag_ids[2:])
        group = full_rewrite(table.store, table.manifest, ids, table.write_options)
        commit(table.store, Rewrite(table.version, [group]), table.manifest)
    elif op == "create_index":
        name = index_name or ("ix_mine" if who == "mine" else "ix_theirs")
        table.create_index("id", "btree", name=name)
    elif op == "overwrite":
        table.overwrite(rows(5000 if who == "mine" else 6000, 5))
    elif op == "wal_flush":  # what an applier commits: rows + a watermark, on the version it read
        frags = write_fragments(
            table.store, table.schema, iter(rows(3000 if who == "mine" else 4000, 10).to_batches()), table.write_options
        )
        key = "0/0000000000" if who == "mine" else "1/0000000000"
        commit(table.store, WalFlush(table.version, frags, {}, {key: 1}, {key: 0}), table.manifest)
    elif op == "configure":  # table settings only: clustering keys
        table.set_clustering(["id"] if who == "mine" else ["category"], curve="linear")
    elif op == "restore":  # version 2: the first fragment alone (ids 0-99)
        table.restore(2)
    elif op == "drop":  # what lamina.drop_table commits before it removes anything
        commit(table.store, Drop(table.version), table.manifest)
    elif op == "merge":  # updates 5 rows of a fragment (mine: the one theirs rewrites) and inserts 5 new keys
        start, new = (220, 1100) if who == "mine" else (130, 1200)
        source = pa.concat_tables([rows(start, 5, seed=1), rows(new, 5)])
        table.merge(source, on="id").when_matched_update().when_not_matched_insert().execute()
    elif op == "alter_schema":  # no data written: mine adds a column, theirs renames one
        if who == "mine":
            table.add_columns(pa.field("note", pa.string()))
        else:
            table.rename_column("category", "kind")


def model(op, who, ids):
    if op == "append":
        return ids | set(range(1000, 1010) if who == "mine" else range(2000, 2010))
    if op == "delete":
        return {i for i in ids if not (i < 10 if who == "mine" else 5 <= i < 15)}
    if op == "overwrite":
        return set(range(5000, 5005) if who == "mine" else range(6000, 6005))
    if op == "wal_flush":
        return ids | set(range(3000, 3010) if who == "mine" else range(4000, 4010))
    if op == "restore":
        return set(range(100))
    if op == "merge":
        return ids | set(range(1100, 1105) if who == "mine" else range(1200, 1205))
    return ids


CELLS = list(itertools.product(OPERATIONS, OPERATIONS))


def test_matrix_has_every_cell():
    assert set(MATRIX) == set(CELLS)


@pytest.mark.parametrize("mine,theirs", CELLS, ids=[f"{m}-over-{t}" for m, t in CELLS])
def test_conflict_matrix_cell(local_table_uri, mine, theirs):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    do(theirs, "theirs", t, overlap_rewrite=False)  # commits version 5
    if MATRIX[(mine, theirs)] == "dropped":
        with pytest.raises(TableDropped, match=rf"{mine} on table {t.uri} \(read at version 4\).*dropped at version 5"):
            do(mine, "mine", stale)
        assert list_versions(t.store)[-1] == 5 and load_manifest(t.store, 5).dropped
        _assert_no_stray_data_files(t)
        return
    if mine == "drop":  # the drop wins over anything: version 6 is its tombstone
        do(mine, "mine", stale)
        with pytest.raises(TableNotFound, match="dropped at version 6"):
            lamina.open_table(local_table_uri)
        assert load_manifest(t.store, 6).dropped and not load_manifest(t.store, 5).dropped
        _assert_no_stray_data_files(t)
        return
    expect_conflict = MATRIX[(mine, theirs)] == "conflict"
    if expect_conflict:
        with pytest.raises(CommitConflict, match=rf"{mine}.*conflicts with the {theirs} committed as version 5"):
            do(mine, "mine", stale)
        latest = lamina.open_table(local_table_uri)
        assert latest.version == 5
        _assert_no_stray_data_files(latest)
        return
    do(mine, "mine", stale)
    latest = lamina.open_table(local_table_uri)
    assert latest.version == 6
    assert set(ids_of(latest)) == model(mine, "mine", model(theirs, "theirs", BASE))
    assert latest.count_rows() == len(ids_of(latest))
    _assert_no_stray_data_files(latest)
    _check_indices(latest, mine, theirs)


def _check_indices(t, mine, theirs):
    live = {f.id for f in t.fragments()}
    for ix in t.manifest.indices:
        assert len(set(ix.coverage(live).values())) == len(ix.segments), f"index {ix.name} keeps segments serving nothing"
        for flt in ("id >= 100 AND id < 200", "id IN (3, 12, 150, 1005, 2003, 5001)"):
            assert t.to_arrow(filter=flt).equals(t.to_arrow(filter=flt, use_index=False)), (ix.name, flt)
    if "create_index" in (mine, theirs) and not {"overwrite", "restore"} & {mine, theirs}:
        names = {ix.name for ix in t.manifest.indices}
        assert names == {f"ix_{who}" for who, op in (("mine", mine), ("theirs", theirs)) if op == "create_index"}
    if mine == "create_index" and theirs == "append":
        [ix] = t.manifest.indices
        assert t.fragments()[-1].id not in ix.coverage(live)  # the concurrent append stays uncovered


def _assert_no_stray_data_files(t):
    referenced = set()
    for v in list_versions(t.store):
        referenced |= load_manifest(t.store, v).referenced_paths()
    on_disk = {o.path for o in t.store.list("data/")}
    assert on_disk == {p for p in referenced if p.startswith("data/")}


def test_overlapping_rewrites_conflict(local_table_uri):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    do("rewrite", "theirs", t, overlap_rewrite=True)
    with pytest.raises(CommitConflict, match=r"both rewrote fragments \[1\]"):
        do("rewrite", "mine", stale)
    assert ids_of(lamina.open_table(local_table_uri)) == sorted(BASE)


def test_same_index_name_conflicts(local_table_uri):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    do("create_index", "theirs", t, index_name="ix")
    with pytest.raises(CommitConflict, match="both changed index 'ix'"):
        do("create_index", "mine", stale, index_name="ix")


def test_two_flushes_of_the_same_wal_segment_conflict(local_table_uri):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    for who, table in (("theirs", t), ("mine", stale)):
        frags = write_fragments(table.store, table.schema, iter(rows(7000, 10).to_batches()), table.write_options)
        txn = WalFlush(table.version, frags, {}, {"0/0000000003": 5}, {"0/0000000003": 0})
        if who == "theirs":
            commit(table.store, txn, table.manifest)
        else:
            with pytest.raises(CommitConflict, match=r"WAL segments \['0/0000000003'\] were flushed by another applier"):
                commit(table.store, txn, table.manifest)
    latest = lamina.open_table(local_table_uri)
    assert latest.count_rows("id >= 7000") == 10 and latest.manifest.wal_watermarks == {"0/0000000003": 5}
    _assert_no_stray_data_files(latest)


def test_delete_over_delete_counts_only_new_rows(local_table_uri):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    t.delete("id >= 5 AND id < 15")
    assert stale.delete("id < 10") == 5  # rows 5..9 were already deleted by theirs
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(15, 300))


def test_delete_over_rewrite_lands_on_the_new_fragment(local_table_uri):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    do("rewrite", "theirs", t, overlap_rewrite=True)  # fragments 1, 2 -> one new fragment
    stale.delete("id >= 150 AND id < 160")
    latest = lamina.open_table(local_table_uri)
    rewritten = [f for f in latest.fragments() if f.id not in (0, 1, 2)]
    assert len(rewritten) == 1 and rewritten[0].deleted_rows == 10
    assert set(ids_of(latest)) == BASE - set(range(150, 160))


def test_rewrite_over_delete_does_not_resurrect_rows(local_table_uri):
    t = make_base(local_table_uri)
    t.delete("id = 1")  # materialized by the rewrite
    stale = t.checkout(t.version)
    t.delete("id >= 50 AND id < 150")  # committed while the rewrite ran
    group = full_rewrite(stale.store, stale.manifest, [0, 1], stale.write_options)
    commit(stale.store, Rewrite(stale.version, [group]), stale.manifest)
    latest = lamina.open_table(local_table_uri)
    assert set(ids_of(latest)) == BASE - {1} - set(range(50, 150))
    new = [f for f in latest.fragments() if f.id not in (0, 1, 2)]
    assert [(f.rows, f.deleted_rows) for f in new] == [(199, 100)]


def _flaky_put(inner, *, lands: bool) -> HookedStore:
    """``inner`` whose first manifest put fails, after or before writing."""
    return HookedStore(inner).on(
        "put_if_absent",
        prefix="_versions/",
        times=1,
        lands=lands,
        fail=lambda path: StorageError(f"connection reset while writing {path}"),
    )


def test_unknown_outcome_that_landed_is_recognised(local_table_uri):
    t = make_base(local_table_uri)
    flaky = _flaky_put(t.store, lands=True)
    group = full_rewrite(t.store, t.manifest, [0, 1], t.write_options)
    new = commit(flaky, Rewrite(t.version, [group]), t.manifest)
    assert new.version == 5 and list_versions(t.store)[-1] == 5  # committed once, not twice
    assert ids_of(lamina.open_table(local_table_uri)) == sorted(BASE)


def test_unknown_outcome_that_did_not_land_raises_and_commits_nothing(local_table_uri):
    t = make_base(local_table_uri)
    flaky = _flaky_put(t.store, lands=False)
    group = full_rewrite(t.store, t.manifest, [0, 1], t.write_options)
    with pytest.raises(StorageError, match="connection reset"):
        commit(flaky, Rewrite(t.version, [group]), t.manifest)
    assert list_versions(t.store)[-1] == 4


def test_conflict_cells_on_s3(s3_table_uri, s3_options):
    """A rebase (append over delete) and a conflict (delete over overwrite) against the moto server."""
    t = make_base(s3_table_uri, s3_options)
    stale = t.checkout(t.version)
    t.delete("id < 50")
    stale.append(rows(1000, 10))
    latest = lamina.open_table(s3_table_uri, storage_options=s3_options)
    assert set(ids_of(latest)) == (BASE - set(range(50))) | set(range(1000, 1010))
    stale2 = lamina.open_table(s3_table_uri, storage_options=s3_options)
    t.reload().overwrite(rows(6000, 5))
    with pytest.raises(CommitConflict):
        stale2.delete("id < 100")


def test_rewrite_over_delete_that_removed_a_whole_source_fragment(local_table_uri):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    t.delete("id >= 100 AND id < 200")  # fragment 1 disappears while the rewrite of 0 and 1 runs
    t.delete("id = 3")
    group = full_rewrite(stale.store, stale.manifest, [0, 1], stale.write_options)
    commit(stale.store, Rewrite(stale.version, [group]), stale.manifest)
    latest = lamina.open_table(local_table_uri)
    assert set(ids_of(latest)) == BASE - set(range(100, 200)) - {3}
    assert [f.id for f in latest.fragments()][-1] == 2 and len(latest.fragments()) == 2


def test_rewrite_whose_sources_were_all_deleted_commits_nothing_for_them(local_table_uri):
    t = make_base(local_table_uri)
    stale = t.checkout(t.version)
    t.delete("id < 200")
    group = full_rewrite(stale.store, stale.manifest, [0, 1], stale.write_options)
    commit(stale.store, Rewrite(stale.version, [group]), stale.manifest)
    latest = lamina.open_table(local_table_uri)
    assert ids_of(latest) == list(range(200, 300)) and [f.id for f in latest.fragments()] == [2]
