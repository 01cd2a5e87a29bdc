"""Compaction racing deletes and WAL flushes: no deleted row comes back, no key is live twice.

The rewrite reads its sources at one version and commits later; everything deleted
in between (by a delete or by a WAL flush's merge-on-write) must be carried onto its
outputs (conflict matrix: rewrite over delete / wal_flush = carry deletions), and a
flush committed over a rewrite must move its deletions to the rewritten fragments
(wal_flush over rewrite = remap deletions).
"""

from __future__ import annotations

import pyarrow as pa

import lamina
from lamina.commit import commit
from lamina.ingest import ShardApplier
from lamina.manifest import load_manifest
from lamina.rewrite import full_rewrite
from lamina.transaction import Rewrite
from lamina.wal import WalWriter
from tests.lamina.helpers import SCHEMA, BeatenOnce, ids_of, rows

BASE = set(range(300))  # three fragments of 100 rows: ids 0-99, 100-199, 200-299
KEYED = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])


def _no_duplicates(ids):
    assert len(ids) == len(set(ids)), f"rows live twice: {sorted({i for i in ids if ids.count(i) > 1})[:10]}"


def test_rewrite_losing_to_a_second_delete_does_not_reuse_its_carried_deletions(local_table_uri):
    """transaction.py Rewrite.prepare: the carried-deletions file written for delete A is stale once
    delete B is carried too; reusing it would bring B's rows back."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in (0, 100, 200):
        t.append(rows(start, 100))
    stale = t.checkout(t.version)  # version 4: the rewrite reads here
    group = full_rewrite(stale.store, stale.manifest, [0, 1], stale.write_options)
    assert t.delete("id = 5") == 1  # delete A, version 5: carried on the first attempt

    def delete_b():  # committed between the rewrite's first prepare and its put (version 6)
        assert lamina.open_table(local_table_uri).delete("id IN (7, 150)") == 2

    store = BeatenOnce(stale.store, delete_b)
    txn = Rewrite(stale.version, [group])
    new = commit(store, txn, stale.manifest)
    assert store.fired == 1 and txn.attempts == 2, "the rewrite must lose the race to delete B once"
    assert new.version == 7 and load_manifest(t.store, 6).transaction["operation"] == "delete"
    latest = lamina.open_table(local_table_uri)
    got = ids_of(latest)
    _no_duplicates(got)
    assert set(got) == BASE - {5, 7, 150}, "a row deleted while the rewrite ran came back"
    [out] = [f for f in latest.fragments() if f.id not in (0, 1, 2)]
    assert (out.rows, out.deleted_rows) == (200, 3)
    assert latest.count_rows() == len(got) == 297


def _keyed_table(uri):
    """Keys 0-99 and 100-199 flushed by the applier as two fragments; returns (writer, applier)."""
    lamina.create_table(uri, KEYED, primary_key="id")
    writer = WalWriter(uri, 0)
    applier = ShardApplier(uri, 0)
    for start in (0, 100):
        writer.put_many([{"id": i, "name": "old", "v": float(i)} for i in range(start, start + 100)])
        writer.commit()
        applier.poll()
        assert applier.flush() is not None
    assert [f.rows for f in lamina.open_table(uri).fragments()] == [100, 100]
    return writer, applier


def _upsert_and_delete(writer, applier):
    """Upserts keys 5 and 150, deletes key 20, through the WAL; applied, not flushed."""
    writer.put({"id": 5, "name": "new", "v": -5.0})
    writer.put({"id": 150, "name": "new", "v": -150.0})
    writer.delete(20)
    writer.commit()
    applier.poll()


def _check_keys(uri):
    t = lamina.open_table(uri)
    got = t.to_arrow().to_pylist()
    keys = [r["id"] for r in got]
    _no_duplicates(keys)
    assert set(keys) == set(range(200)) - {20}
    by_key = {r["id"]: r for r in got}
    assert by_key[5] == {"id": 5, "name": "new", "v": -5.0}
    assert by_key[150] == {"id": 150, "name": "new", "v": -150.0}
    assert {r["name"] for k, r in by_key.items() if k not in (5, 150)} == {"old"}
    assert t.count_rows() == 199
    return t


def test_rewrite_racing_a_wal_flush_carries_its_merge_on_write_deletions(local_table_uri):
    """transaction.py MATRIX[rewrite, wal_flush] = carry deletions: the flush deleted the older
    versions of the keys it upserted (and key 20) in the fragments the rewrite is replacing."""
    writer, applier = _keyed_table(local_table_uri)
    t = lamina.open_table(local_table_uri)
    ids = [f.id for f in t.fragments()]
    group = full_rewrite(t.store, t.manifest, ids, t.write_options)  # compaction reads version 3
    _upsert_and_delete(writer, applier)
    flushed = applier.flush()  # version 4: new rows + deletions in the fragments being rewritten
    assert flushed == 4 and load_manifest(t.store, 4).transaction["rows_deleted"] == 3
    new = commit(t.store, Rewrite(t.version, [group]), t.manifest)
    assert new.version == 5
    latest = _check_keys(local_table_uri)
    assert not set(ids) & {f.id for f in latest.fragments()}, "the rewrite replaced its sources"
    writer.close()


def test_wal_flush_racing_a_rewrite_remaps_its_merge_on_write_deletions(local_table_uri):
    """transaction.py MATRIX[wal_flush, rewrite] = remap deletions: the flush computed its deletions
    on fragments a compaction replaced before the flush's put."""
    writer, applier = _keyed_table(local_table_uri)
    _upsert_and_delete(writer, applier)
    rewrote = []

    def compact():  # committed between the flush's read of the table and its put
        t = lamina.open_table(local_table_uri)
        ids = [f.id for f in t.fragments()]
        rewrote.append(
            commit(t.store, Rewrite(t.version, [full_rewrite(t.store, t.manifest, ids, t.write_options)]), t.manifest).version
        )

    applier.store = BeatenOnce(applier.store, compact)
    assert applier.flush() == 5
    assert rewrote == [4] and applier.store.fired == 1
    latest = _check_keys(local_table_uri)
    assert len(latest.fragments()) == 2  # the compacted fragment (with the remapped deletions) + the flush's rows
    writer.close()
