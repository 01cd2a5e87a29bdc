"""A WAL applier whose table changes schema under it (issue 16, defect 3): it converts what
decodes the same in both schemas, or stops its shard with an error naming the table, the
shard and both schemas; the table stays readable and no committed row is lost."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import SchemaMismatch, ShardStopped
from lamina.ingest import ShardApplier
from lamina.wal import WalWriter, read_segment
from lamina.workers.ingest import WalApplier

KEYED = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])


def _rows(start: int, n: int, tag: str) -> list[dict]:
    return [{"id": i, "name": f"{tag}{i}", "v": float(i)} for i in range(start, start + n)]


def _setup(uri: str, opts=None) -> tuple[WalWriter, ShardApplier]:
    lamina.create_table(uri, KEYED, primary_key="id", storage_options=opts)
    w = WalWriter(uri, 0, storage_options=opts)
    applier = ShardApplier(uri, 0, opts)
    w.put_many(_rows(0, 10, "a"))
    w.commit()
    applier.poll()
    assert applier.flush() is not None  # rows 0..9 committed to the table
    w.put_many(_rows(10, 10, "b"))
    w.commit()
    assert applier.poll() == 10  # rows 10..19 applied, not flushed
    return w, applier


def test_applier_stops_its_shard_when_the_table_schema_changes_incompatibly(table_location):
    uri, opts = table_location
    w, applier = _setup(uri, opts)
    new = pa.schema([("id", pa.int64()), ("v", pa.string())])  # "name" dropped, "v" retyped
    t = lamina.open_table(uri, storage_options=opts)
    t.overwrite(pa.table({"id": [100], "v": ["x"]}, schema=new), schema=new)
    version = t.version

    with pytest.raises(ShardStopped) as stopped:
        applier.flush()  # the flush that would have committed rows 10..19 in the old schema
    msg = str(stopped.value)
    assert isinstance(stopped.value, SchemaMismatch)
    assert uri.rstrip("/") in msg and "shard 0" in msg
    assert "name: string" in msg and "v: double" in msg, "the applier's schema"
    assert "v: string" in msg, "the table's schema"
    # stopped for good: no busy loop that applies, flushes or fails differently
    with pytest.raises(ShardStopped):
        applier.step()
    with pytest.raises(ShardStopped):
        applier.flush()
    with pytest.raises(ShardStopped):
        applier.get(12)
    assert applier.snapshot().error == msg
    # a restarted applier (Ray restarts a dead actor) stays stopped instead of reading old rows in the new schema
    restarted = ShardApplier(uri, 0, opts)
    with pytest.raises(ShardStopped, match="shard 0"):
        restarted.step()
    # the actor body ends its loop on a stopped shard (no retry with backoff) and reports why
    actor = WalApplier(uri, 0, opts)
    actor._thread.join(timeout=60)
    assert not actor._thread.is_alive() and actor._errors == 0
    assert "v: string" in actor.stats()["error"]
    with pytest.raises(ShardStopped):
        actor.flush()

    # the table is readable and holds what was committed; nothing was added
    after = lamina.open_table(uri, storage_options=opts)
    assert after.version == version
    assert after.to_arrow().to_pylist() == [{"id": 100, "v": "x"}]
    # the WAL still holds the unflushed transaction (nothing lost), and retention keeps it
    assert applier.remove_applied_segments(now=2e10) == []
    w.close()
    assert applier.remove_applied_segments(now=2e10) == []
    txns, _ = read_segment(after.store, 0, 0, after.manifest.wal_watermarks["0/0000000000"])
    assert [t.rows for t in txns] == [10]


def test_applier_converts_rows_when_the_table_only_gained_nullable_columns(table_location):
    uri, opts = table_location
    w, applier = _setup(uri, opts)
    wider = KEYED.append(pa.field("extra", pa.int32()))
    t = lamina.open_table(uri, storage_options=opts)
    old = t.to_arrow()
    t.overwrite(old.append_column("extra", pa.nulls(old.num_rows, pa.int32())), schema=wider)
    # a producer that opened the table after the change writes the new column
    w2 = WalWriter(uri, 0, storage_options=opts)
    w2.put_many([{"id": 50, "name": "c50", "v": 5.0, "extra": 7}])
    w2.commit()
    # and the old producer keeps writing in the schema it opened
    w.put_many(_rows(5, 1, "upd"))
    w.commit()

    applier.step()
    version = applier.flush()
    assert version is not None
    after = lamina.open_table(uri, storage_options=opts)
    assert after.schema.equals(wider)
    got = {r["id"]: r for r in after.to_arrow().to_pylist()}
    expected = {i: {"id": i, "name": f"a{i}", "v": float(i), "extra": None} for i in range(10)}
    expected |= {i: {"id": i, "name": f"b{i}", "v": float(i), "extra": None} for i in range(10, 20)}
    expected[5] = {"id": 5, "name": "upd5", "v": 5.0, "extra": None}
    expected[50] = {"id": 50, "name": "c50", "v": 5.0, "extra": 7}
    assert got == expected
    assert applier.get(50) == expected[50] and applier.get(12) == expected[12]


def test_applier_stops_when_the_commit_refuses_its_fragment_schema(local_table_uri, monkeypatch):
    """The commit path's own check (a fragment in another schema than the table's) stops the
    shard too: no retry loop, the written file removed, the WAL kept."""
    import lamina.table

    w, applier = _setup(local_table_uri)

    def refuse(*_a, **_k):
        raise SchemaMismatch("data file x was written with schema (a) but the table has schema (b)")

    monkeypatch.setattr(lamina.table, "commit", refuse)  # the flush commits through Table.commit_transaction
    with pytest.raises(ShardStopped, match="shard 0"):
        applier.flush()
    with pytest.raises(ShardStopped):
        applier.step()
    monkeypatch.undo()
    t = lamina.open_table(local_table_uri)
    referenced = t.manifest.referenced_paths()
    assert {o.path for o in t.store.list("data/")} == referenced, "the refused flush's data file is removed"
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(10))
    restarted = ShardApplier(local_table_uri, 0)  # the schema did not actually change: a new applier goes on
    assert restarted.poll() == 10 and restarted.flush() is not None
    assert sorted(lamina.open_table(local_table_uri).to_arrow().column("id").to_pylist()) == list(range(20))


def test_applier_started_after_a_schema_change_reads_each_segment_in_its_writers_schema(local_table_uri):
    """Rows written before an incompatible change are never decoded in the new schema, even by an
    applier that never saw the old one; a compatible change reads them with nulls in new columns."""
    lamina.create_table(local_table_uri, KEYED, primary_key="id")
    w = WalWriter(local_table_uri, 0)
    w.put_many(_rows(0, 5, "a"))
    w.commit()  # in the WAL, never applied
    same_layout = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.int64())])  # float64 -> int64: same width
    t = lamina.open_table(local_table_uri)
    t.overwrite(pa.table({"id": [100], "name": ["z"], "v": [7]}, schema=same_layout), schema=same_layout)
    fresh = ShardApplier(local_table_uri, 0)  # started after the change: its schema is the new one
    with pytest.raises(ShardStopped, match="segment 0 was written in"):
        fresh.poll()
    assert lamina.open_table(local_table_uri).to_arrow().to_pylist() == [{"id": 100, "name": "z", "v": 7}]


def test_applier_started_after_a_compatible_change_reads_old_segments(local_table_uri):
    lamina.create_table(local_table_uri, KEYED, primary_key="id")
    w = WalWriter(local_table_uri, 0)
    w.put_many(_rows(0, 3, "a"))
    w.commit()
    wider = pa.schema(list(KEYED) + [pa.field("extra", pa.string())])
    t = lamina.open_table(local_table_uri)
    t.overwrite(pa.table({"id": [100], "name": ["z"], "v": [1.0], "extra": ["e"]}, schema=wider), schema=wider)
    fresh = ShardApplier(local_table_uri, 0)
    assert fresh.poll() == 3
    fresh.flush()
    got = lamina.open_table(local_table_uri).to_arrow().sort_by("id").to_pylist()
    assert got == [{"id": i, "name": f"a{i}", "v": float(i), "extra": None} for i in range(3)] + [
        {"id": 100, "name": "z", "v": 1.0, "extra": "e"}
    ]


def test_writer_stops_at_its_next_segment_once_the_table_schema_changed(local_table_uri):
    lamina.create_table(local_table_uri, KEYED, primary_key="id")
    w = WalWriter(local_table_uri, 0, max_segment_rows=2)
    w.put_many(_rows(0, 2, "a"))
    w.commit()  # segment 0 is full: the next commit rolls to a new segment
    new = pa.schema([("id", pa.int64()), ("v", pa.string())])
    lamina.open_table(local_table_uri).overwrite(pa.table({"id": [1], "v": ["x"]}, schema=new), schema=new)
    w.put_many(_rows(2, 1, "b"))
    with pytest.raises(SchemaMismatch, match="changed since this WAL writer"):
        w.commit()


def test_fully_flushed_shard_follows_any_schema_migration(local_table_uri):
    """A migration the old rows could not survive is fine once they are all in the table:
    the running applier and a restarted one go on with producers of the new schema."""
    lamina.create_table(local_table_uri, KEYED, primary_key="id")
    w = WalWriter(local_table_uri, 0)
    applier = ShardApplier(local_table_uri, 0)
    w.put_many(_rows(0, 5, "a"))
    w.commit()
    w.close()
    applier.poll()
    applier.flush()  # nothing unflushed
    new = pa.schema([("id", pa.int64()), ("v", pa.string())])
    t = lamina.open_table(local_table_uri)
    t.overwrite(pa.table({"id": [100], "v": ["x"]}, schema=new), schema=new)
    w2 = WalWriter(local_table_uri, 0)
    w2.put_many([{"id": 200, "v": "y"}, {"id": 201, "v": "z"}])
    w2.commit()
    assert applier.poll() == 2 and applier.flush() is not None
    restarted = ShardApplier(local_table_uri, 0)  # e.g. Ray restarted the actor
    w2.put({"id": 202, "v": "w"})
    w2.commit()
    assert restarted.poll() == 1 and restarted.flush() is not None
    got = lamina.open_table(local_table_uri).to_arrow().sort_by("id").to_pylist()
    assert got == [{"id": 100, "v": "x"}, {"id": 200, "v": "y"}, {"id": 201, "v": "z"}, {"id": 202, "v": "w"}]


# -- schema evolution (Table.add_columns and the like, docs/FORMAT.md §2.4) ------------------------------
def test_an_applier_follows_add_columns_and_its_upserts_read_old_files_in_the_new_schema(table_location):
    uri, opts = table_location
    w, applier = _setup(uri, opts)  # rows 0..9 in the table, 10..19 in the memtable
    small = WalWriter(uri, 0, storage_options=opts, max_segment_rows=2)  # rolls to a new segment every 2 rows
    t = lamina.open_table(uri, storage_options=opts)
    t.add_columns(pa.field("extra", pa.int32()))
    w.put_many(_rows(20, 2, "c"))  # the old producer goes on writing its segment in the old schema
    w.commit()
    w2 = WalWriter(uri, 0, storage_options=opts)  # a producer opened now writes the new column
    w2.put_many([{"id": 5, "name": "upd5", "v": 5.5, "extra": 7}, {"id": 30, "name": "new30", "v": 3.0, "extra": 8}])
    w2.commit()
    applier.step()
    assert applier.flush() is not None and applier.stopped is None
    after = lamina.open_table(uri, storage_options=opts)
    got = {r["id"]: r for r in after.to_arrow().to_pylist()}
    expected = {i: {"id": i, "name": f"a{i}", "v": float(i), "extra": None} for i in range(10)}
    expected |= {i: {"id": i, "name": f"b{i}", "v": float(i), "extra": None} for i in range(10, 20)}
    expected |= {i: {"id": i, "name": f"c{i}", "v": float(i), "extra": None} for i in range(20, 22)}
    expected[5] = {"id": 5, "name": "upd5", "v": 5.5, "extra": 7}  # the row in a file of the old schema replaced
    expected[30] = {"id": 30, "name": "new30", "v": 3.0, "extra": 8}
    assert got == expected and after.count_rows() == len(expected)
    assert applier.get(3) == expected[3] and applier.get(5) == expected[5]
    # an old producer stops at its next segment, naming what to do
    small.put_many(_rows(100, 2, "d"))
    small.commit()  # fills its segment (in the old schema)
    small.put_many(_rows(102, 1, "d"))
    with pytest.raises(SchemaMismatch, match="changed since this WAL writer"):
        small.commit()


@pytest.mark.parametrize(
    "change, why",
    [
        (lambda t: (t.drop_columns("v"), t.add_columns(pa.field("v", pa.float64()))), "['v'] were dropped and added again"),
        (lambda t: t.add_columns(pa.field("extra", pa.int32()), defaults={"extra": 1}), "['extra'] have a default"),
        (lambda t: t.drop_columns("name"), "['name'] were dropped"),
    ],
)
def test_an_applier_holding_rows_the_new_schema_would_misread_stops_and_loses_nothing(local_table_uri, change, why):
    """The WAL's rows name columns by position: a column dropped and added again in its place would show
    the old column's values in the new one, a default would read as null; such changes stop the shard."""
    w, applier = _setup(local_table_uri)
    t = lamina.open_table(local_table_uri)
    change(t)
    version = t.version
    with pytest.raises(ShardStopped, match="shard 0") as stopped:
        applier.flush()
    assert why in str(stopped.value)
    assert lamina.open_table(local_table_uri).version == version  # nothing committed
    txns, _ = read_segment(t.store, 0, 0, lamina.open_table(local_table_uri).manifest.wal_watermarks["0/0000000000"])
    assert [x.rows for x in txns] == [10], "the unflushed rows stay in the WAL"
    # a fresh applier refuses the old producer's segment just the same (it never decodes it in the new schema)
    fresh = ShardApplier(local_table_uri, 0)
    with pytest.raises(ShardStopped):
        fresh.poll()


def test_an_applier_follows_a_rename_and_a_string_widening(local_table_uri):
    w, applier = _setup(local_table_uri)
    t = lamina.open_table(local_table_uri)
    t.rename_column("name", "label")
    t.alter_column("label", pa.large_string())
    w.put_many(_rows(40, 1, "e"))  # the old producer's segment, in the old schema
    w.commit()
    applier.step()
    assert applier.flush() is not None
    got = {r["id"]: r for r in lamina.open_table(local_table_uri).to_arrow().to_pylist()}
    assert got[12] == {"id": 12, "label": "b12", "v": 12.0} and got[40] == {"id": 40, "label": "e40", "v": 40.0}
    assert got[3] == {"id": 3, "label": "a3", "v": 3.0} and len(got) == 21
