"""Transactions are values: replaying one makes a new one, and everything it reads or writes on
storage comes through the deletion files the commit lends it (lamina/transaction.py does no I/O)."""

from __future__ import annotations

import ast
import pathlib

import numpy as np
import pytest

import lamina
import lamina.transaction
from lamina.commit import commit
from lamina.deletion import StoredDeletionFiles, read_deleted
from lamina.manifest import SEGMENTS_DIR, DeletionFile
from lamina.rewrite import full_rewrite
from lamina.transaction import Delete, Rewrite
from tests.lamina.helpers import SCHEMA, BeatenOnce, ids_of, rows


class MemoryDeletionFiles:
    """Deletion files held in memory: what a rebase or prepare asked for, with no storage behind it."""

    uri = "memory://t"

    def __init__(self, by_path=None):
        self.by_path = dict(by_path or {})
        self.reads: list[str] = []
        self.writes: list[tuple[int, list[int]]] = []

    def read(self, fragment):
        self.reads.append(fragment.deletion.path if fragment.deletion else "")
        return self.by_path.get(fragment.deletion.path if fragment.deletion else None, np.zeros(0, np.uint32))

    def read_file(self, path):
        self.reads.append(path or "")
        return self.by_path.get(path, np.zeros(0, np.uint32))

    def write(self, fragment_id, offsets):
        self.writes.append((fragment_id, list(map(int, offsets))))
        path = f"_deletions/{fragment_id}-mem{len(self.writes)}.bin"
        self.by_path[path] = offsets
        return DeletionFile(path, len(offsets))


def test_transaction_module_imports_no_storage():
    tree = ast.parse(pathlib.Path(lamina.transaction.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in imported if m and (m.startswith("lamina.store") or m == "lamina.deletion")}, imported


def _three_fragments(uri):
    t = lamina.create_table(uri, SCHEMA)
    for start in (0, 100, 200):
        t.append(rows(start, 100))
    return t


def test_delete_replayed_over_a_rewrite_is_a_new_value_mapped_through_its_record(local_table_uri):
    t = _three_fragments(local_table_uri)
    mine = Delete(t.version, {0: [3, 4], 1: [7], 2: [9]}, predicate="p")
    group = full_rewrite(t.store, t.manifest, [0, 1], t.write_options)
    theirs = commit(t.store, Rewrite(t.version, [group]), t.manifest)  # fragments 0, 1 -> 3
    files = MemoryDeletionFiles()
    replayed = mine.rebase(theirs, files)
    assert files.reads == [] and files.writes == [], "remapping deletions needs no file"
    assert {f: d.tolist() for f, d in replayed.deltas.items()} == {3: [3, 4, 107], 2: [9]}
    assert {f: d.tolist() for f, d in mine.deltas.items()} == {0: [3, 4], 1: [7], 2: [9]}, "rebase changed the original"
    assert replayed.uuid == mine.uuid and replayed is not mine


def test_prepare_writes_through_the_files_it_is_given_and_returns_a_new_value(local_table_uri):
    t = _three_fragments(local_table_uri)
    mine = Delete(t.version, {1: [5, 6]})
    files = MemoryDeletionFiles()
    prepared = mine.prepare(t.manifest, files)
    assert files.writes == [(1, [5, 6])]
    prepared.prepare(t.manifest, files)
    assert files.writes == [(1, [5, 6])], "a file still right for the base is written again"
    new = prepared.apply(t.manifest)
    assert new.fragment(1).deletion.path == "_deletions/1-mem1.bin" and new.record.rows == 2
    assert mine.apply(t.manifest).fragment(1).deletion is None, "prepare changed the original"


def test_rewrite_carries_a_concurrent_delete_read_through_the_files_it_is_given(local_table_uri):
    t = _three_fragments(local_table_uri)
    group = full_rewrite(t.store, t.manifest, [0, 1], t.write_options)
    mine = Rewrite(t.version, [group])
    t.delete("id = 150 OR id = 250")  # fragment 1 (a source) and 2 (not one)
    theirs = t.manifest
    path = theirs.fragment(1).deletion.path
    files = MemoryDeletionFiles({path: np.array([50], np.uint32)})
    replayed = mine.rebase(theirs, files)
    assert files.reads == ["", path], "the deletion file the rewrite read (none), then theirs"
    assert {o: c.tolist() for o, c in replayed.groups[0].carried.items()} == {0: [150]}
    assert mine.groups[0].carried == {} and mine.groups[0].source_deletions == {0: None, 1: None}
    assert replayed.groups[0].source_deletions == {0: None, 1: path}


def test_commit_reports_attempts_and_every_file_written_on_the_transaction_it_was_given(local_table_uri):
    t = _three_fragments(local_table_uri)
    stale = t.checkout(t.version)
    t.delete("id < 10")
    txn = Delete(stale.version, {0: [20, 21]})
    new = commit(stale.store, txn, stale.manifest)
    assert txn.attempts == 1 and new.record.rows == 2
    segments = [p for p in txn.written if p.startswith(SEGMENTS_DIR)]
    assert {seg.path for seg in new.segments} >= set(segments), "the manifest segments it wrote are its version's"
    assert [p for p in txn.written if p not in segments] == [new.fragment(0).deletion.path], (
        "the merged deletion file is the transaction's"
    )
    assert sorted(read_deleted(t.store, new.fragment(0)).tolist()) == list(range(10)) + [20, 21]
    assert ids_of(lamina.open_table(local_table_uri)) == [i for i in range(300) if i >= 10 and i not in (20, 21)]


def test_stored_deletion_files_tell_of_every_file_they_write(local_table_uri):
    t = _three_fragments(local_table_uri)
    heard: list[str] = []
    files = StoredDeletionFiles(t.store, on_write=heard.append)
    written = files.write(2, np.array([1, 5], np.uint32))
    assert heard == [written.path] and t.store.exists(written.path) and files.uri == t.uri
    assert files.read_file(written.path).tolist() == [1, 5] and files.read_file(None).tolist() == []


# -- create commits through commit ------------------------------------------------------------
def test_create_commits_version_one_recording_its_request_and_remembers_it(local_table_uri):
    from lamina.manifest import load_manifest
    from lamina.records import CreateRecord

    t = lamina.create_table(local_table_uri, SCHEMA, primary_key="id", stable_row_ids=True, max_rows_per_file=1000)
    rec = t.manifest.record
    assert t.version == 1 and isinstance(rec, CreateRecord) and rec.read_version == 0 and len(rec.uuid) == 32
    assert t.manifest.primary_key == ("id",) and t.manifest.stable_row_ids and t.write_options.max_rows_per_file == 1000
    reopened = lamina.open_table(local_table_uri)
    assert reopened.manifest.transaction == t.manifest.transaction and reopened.manifest.table_uuid == t.manifest.table_uuid
    t.store.delete(["_versions/00000000000000000001.manifest"])
    assert load_manifest(t.store, 1, t.manifest.table_uuid) == t.manifest, "the new version was not cached"


def test_create_that_loses_the_race_to_another_create_is_table_exists(local_table_uri):
    from lamina.errors import TableExists
    from lamina.store import open_store
    from lamina.transaction import Create

    store = BeatenOnce(open_store(local_table_uri), lambda: lamina.create_table(local_table_uri, SCHEMA).append(rows(0, 3)))
    txn = Create(SCHEMA)
    with pytest.raises(
        TableExists, match=rf"a Lamina table was created at {store.uri} concurrently; open it with lamina.open_table"
    ):
        commit(store, txn, txn.base)
    winner = lamina.open_table(local_table_uri)
    assert store.fired == 1 and winner.version == 2 and winner.manifest.table_uuid != txn.base.table_uuid
    assert ids_of(winner) == [0, 1, 2]


def test_create_where_a_table_with_cleaned_up_first_versions_stands_is_table_exists(local_table_uri):
    from lamina.errors import TableExists
    from lamina.transaction import Create

    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in (0, 10, 20):
        t.append(rows(start, 10))
    t.store.delete([f"_versions/{v:020d}.manifest" for v in (1, 2)])  # what cleanup leaves: versions 3, 4
    txn = Create(SCHEMA)
    with pytest.raises(TableExists, match="concurrently"):
        commit(t.store, txn, txn.base)
    assert not t.store.exists("_versions/00000000000000000001.manifest"), "a create wrote into an existing table"
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(30))
