"""Transaction records (docs/FORMAT.md §6): each stored record reads back as its typed value, and a
malformed one stops a commit with an error naming the table and the version."""

from __future__ import annotations

import json

import pytest

import lamina
from lamina.datafile import write_fragments
from lamina.errors import CorruptFile
from lamina.manifest import load_manifest
from lamina.records import (
    AddressMapping,
    AppendRecord,
    CreateRecord,
    DeleteRecord,
    IndexChangeRecord,
    OverwriteRecord,
    RestoreRecord,
    RewriteRecord,
    UnknownRecord,
    WalFlushRecord,
    decode_record,
)
from lamina.rewrite import full_rewrite
from lamina.transaction import Rewrite, WalFlush
from tests.lamina.helpers import SCHEMA, ids_of, put_next_version, rows


def _history(uri):
    """A table whose versions 1..10 are one of each operation."""
    t = lamina.create_table(uri, SCHEMA)  # 1
    t.append(rows(0, 100))  # 2
    t.append(rows(100, 100))  # 3
    t.delete("id < 5")  # 4
    group = full_rewrite(t.store, t.manifest, [0, 1], t.write_options)
    t.commit_transaction(Rewrite(t.version, [group]))  # 5
    t.create_index("id", "btree", name="ix")  # 6
    frags = write_fragments(t.store, t.schema, iter(rows(500, 10).to_batches()), t.write_options)
    t.commit_transaction(WalFlush(t.version, frags, {2: [0, 1]}, {"0/0000000000": 3}, {}))  # 7
    t.overwrite(rows(900, 5))  # 8
    t.restore(3)  # 9
    t.create_tag("two")
    t.restore("two")  # 10: by a tag
    return t


def test_every_stored_record_reads_back_as_its_type_and_writes_back_the_same_object(local_table_uri):
    t = _history(local_table_uri)
    types = [
        CreateRecord,
        AppendRecord,
        AppendRecord,
        DeleteRecord,
        RewriteRecord,
        IndexChangeRecord,
        WalFlushRecord,
        OverwriteRecord,
        RestoreRecord,
        RestoreRecord,
    ]
    for version, cls in enumerate(types, start=1):
        m = load_manifest(t.store, version)
        rec = m.record
        assert type(rec) is cls and rec.operation == m.transaction["operation"]
        assert rec.read_version == version - 1 and rec.uuid == m.transaction["uuid"]
        assert rec.to_json() == m.transaction, f"version {version}: the typed record does not write back the stored object"
        assert decode_record(json.loads(json.dumps(rec.to_json())), "x") == rec
    rewrite = load_manifest(t.store, 5).record
    assert [(g.old_fragment_ids, g.new_fragment_ids) for g in rewrite.groups] == [((0, 1), (2,))]
    assert rewrite.groups[0].mapping == AddressMapping.from_runs([[0, 5, 0, 0, 95], [1, 0, 0, 95, 100]])
    delete = load_manifest(t.store, 4).record
    assert delete == DeleteRecord(
        uuid=delete.uuid,
        read_version=3,
        timestamp_ms=delete.timestamp_ms,
        predicate="id < 5",
        fragment_ids=(0,),
        removed_fragment_ids=(),
        rows=5,
    )
    assert (load_manifest(t.store, 9).record.version, load_manifest(t.store, 9).record.tag) == (3, None)
    assert (load_manifest(t.store, 10).record.version, load_manifest(t.store, 10).record.tag) == (9, "two")
    flush = load_manifest(t.store, 7).record
    assert flush.watermarks == {"0/0000000000": 3} and flush.rows_deleted == 2 and flush.deleted_fragment_ids == (2,)


def test_records_written_by_earlier_versions_of_lamina_still_read():
    """A create without a uuid (before creates recorded one); an index record holding only the name."""
    assert decode_record({"operation": "create", "read_version": 0, "timestamp_ms": 1}, "version 1") == CreateRecord(
        uuid="", read_version=0, timestamp_ms=1
    )
    old_index = decode_record(
        {"uuid": "u", "operation": "create_index", "read_version": 2, "timestamp_ms": 1, "index": "ix"}, "version 3"
    )
    assert old_index == IndexChangeRecord(uuid="u", read_version=2, timestamp_ms=1, index="ix", action="create", segments=())


def test_an_operation_from_a_newer_lamina_reads_as_unknown():
    rec = decode_record({"uuid": "u", "operation": "compact_v2", "read_version": 2, "timestamp_ms": 1, "x": [1]}, "version 3")
    assert isinstance(rec, UnknownRecord) and rec.operation == "compact_v2"


@pytest.mark.parametrize(
    "change,reason",
    [
        (
            {"groups": [{"old_fragment_ids": [0], "new_fragment_ids": [9], "mapping": [[0, 0, 1, 0, 10]]}]},
            r"groups\[0\]\.mapping names output 1, but the group has 1 new fragment ids",
        ),
        (
            {"groups": [{"old_fragment_ids": [0], "new_fragment_ids": [9], "mapping": [[0, 0, 0, 10]]}]},
            r"groups\[0\]\.mapping is not a list of \[old_fragment_id, old_start, output, new_start, length\] integer runs",
        ),
        (
            {"groups": [{"old_fragment_ids": [0], "new_fragment_ids": [9], "mapping": [[0, 0.5, 0, 0, 10]]}]},
            r"groups\[0\]\.mapping is not a list of \[old_fragment_id",
        ),
        (
            {"groups": [{"old_fragment_ids": "0", "new_fragment_ids": [9], "mapping": []}]},
            r"groups\[0\]\.old_fragment_ids is not a list of integers",
        ),
        ({"groups": None}, r"groups is not a list"),
    ],
)
def test_a_malformed_record_stops_a_commit_that_must_replay_over_it(local_table_uri, change, reason):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    stale = t.checkout(t.version)
    record = {"uuid": "e" * 32, "operation": "rewrite", "read_version": 2, "timestamp_ms": 1, **change}
    put_next_version(t, transaction=record)
    with pytest.raises(
        CorruptFile,
        match=(
            rf"delete on table {t.store.uri}: the transaction record of version 3 is malformed \({reason}.*\): "
            r"Lamina cannot replay a commit over it\. .*Nothing was committed"
        ),
    ):
        stale.delete("id < 3")
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))


@pytest.mark.parametrize(
    "record,reason",
    [
        ({"operation": "append", "read_version": 1, "timestamp_ms": 1, "fragment_ids": [0]}, "rows is missing"),
        (
            {"operation": "append", "read_version": True, "timestamp_ms": 1, "fragment_ids": [0], "rows": 1},
            "read_version is True, not an integer",
        ),
        ({"operation": 7, "read_version": 1, "timestamp_ms": 1}, "operation is 7, not a string"),
        (
            {"operation": "create_index", "read_version": 1, "timestamp_ms": 1, "index": "ix", "action": "rebuild"},
            "action is 'rebuild', not one of create, update, drop",
        ),
        (
            {
                "operation": "wal_flush",
                "read_version": 1,
                "timestamp_ms": 1,
                "fragment_ids": [],
                "rows": 0,
                "deleted_fragment_ids": [],
                "removed_fragment_ids": [],
                "rows_deleted": 0,
                "watermarks": {"0/1": "3"},
            },
            "watermarks is not an object of integer positions",
        ),
        ({"operation": "restore", "read_version": 1, "timestamp_ms": 1}, "version is missing"),
        ({"operation": "restore", "read_version": 1, "timestamp_ms": 1, "version": 2, "tag": 3}, "tag is 3, not a string"),
        (["append"], "the record is list, not an object"),
    ],
)
def test_malformed_records_name_the_field_and_the_version(record, reason):
    with pytest.raises(CorruptFile, match=rf"the transaction record of version 7 is malformed \({reason}\)"):
        decode_record(record, "version 7")


def test_a_bulk_append_records_its_ids_as_a_run_and_small_ones_as_a_list(tmp_path):
    import pyarrow as pa

    from lamina.manifest import manifest_path

    schema = pa.schema([("id", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": list(range(40))}, schema=schema), max_rows_per_file=2)
    assert t.manifest.transaction["fragment_ids"] == {"first": 0, "count": 20}
    assert t.manifest.record.fragment_ids == tuple(range(20))
    assert json.loads(t.store.get(manifest_path(t.version)))["transaction"]["fragment_ids"] == {"first": 0, "count": 20}
    t.append(pa.table({"id": [1, 2]}, schema=schema))
    assert t.manifest.transaction["fragment_ids"] == [20]
    reopened = lamina.open_table(t.uri, version=2)
    assert reopened.manifest.record.fragment_ids == tuple(range(20))
