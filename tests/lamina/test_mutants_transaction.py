"""Transaction behaviours that survived mutation testing (docs/RELIABILITY.md, "Mutation testing")."""

from __future__ import annotations

import pytest

import lamina
from lamina.commit import commit
from lamina.datafile import write_fragments
from lamina.errors import CommitConflict
from lamina.manifest import encode_manifest, load_manifest, manifest_path
from lamina.transaction import WalFlush
from tests.lamina.helpers import SCHEMA, ids_of, rows

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
    assert _record(t, 4) == {"operation": "delete", "predicate": "id < 5 OR id >= 100", "fragment_ids": [0],
                             "removed_fragment_ids": [1], "rows": 15}
    t.reload()
    v = _flush(t, 1000, 10, {0: [5, 6]}, "0/0000000001")
    assert _record(t, v) == {"operation": "wal_flush", "fragment_ids": [2], "rows": 10, "deleted_fragment_ids": [0],
                             "removed_fragment_ids": [], "rows_deleted": 2, "watermarks": {"0/0000000001": 7}}
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
    with pytest.raises(CommitConflict, match=(
        rf"append on table {t.store.uri} \(read at version 2\) conflicts with the {operation} committed as version 3: "
        rf"{why}\. Nothing was committed; re-run the append on the latest version"
    )):
        stale.append(rows(100, 10))
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))
