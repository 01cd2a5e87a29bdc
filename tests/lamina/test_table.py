"""The Table API on a local directory and on S3 (moto server)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import InvalidArgument, RowNotFound, VersionNotFound
from tests.lamina.helpers import SCHEMA, ids_of, rows


def test_create_append_read_round_trip(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    assert t.version == 1 and t.count_rows() == 0
    assert t.to_arrow().schema == SCHEMA
    data = rows(0, 2500)
    v = t.append(data, max_rows_per_file=1000)
    assert v == 2 == t.version
    assert [f.rows for f in t.fragments()] == [1000, 1000, 500]
    reopened = lamina.open_table(uri, storage_options=opts)
    assert reopened.version == 2
    assert reopened.to_arrow().equals(data)


@pytest.mark.parametrize("kind", ["table", "batch", "reader", "pandas", "pylist"])
def test_append_accepts_every_input_kind(local_table_uri, kind):
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("name", pa.string())]))
    data = pa.table({"id": [1, 2, 3], "name": ["a", None, "c"]})
    src = {
        "table": data,
        "batch": data.to_batches()[0],
        "reader": pa.RecordBatchReader.from_batches(data.schema, data.to_batches()),
        "pandas": data.to_pandas(),
        "pylist": data.to_pylist(),
    }[kind]
    t.append(src)
    assert t.to_arrow().equals(data)


def test_append_reorders_columns_by_name(local_table_uri):
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("name", pa.string())]))
    t.append(pa.table({"name": ["x"], "id": [7]}))
    assert t.to_arrow().to_pylist() == [{"id": 7, "name": "x"}]


def test_empty_append_commits_nothing(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    assert t.append(SCHEMA.empty_table()) == 1
    assert [v.version for v in t.versions()] == [1]


def test_delete_with_string_and_expression(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 3000), max_rows_per_file=1000)
    assert t.delete("id < 100 AND category = 'a'") == 25
    assert t.delete(pc.field("id") >= 2990) == 10
    assert t.delete("id < 0") == 0  # nothing matched: no commit
    assert t.version == 4
    expected = [i for i in range(3000) if not (i < 100 and i % 4 == 0) and i < 2990]
    assert ids_of(t) == expected
    assert t.count_rows() == len(expected)
    assert lamina.open_table(uri, storage_options=opts).count_rows() == len(expected)


def test_delete_whole_fragment_removes_it(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 200), max_rows_per_file=100)
    t.delete("id < 100")
    assert [f.rows for f in t.fragments()] == [100]
    assert ids_of(t) == list(range(100, 200))


def test_to_arrow_columns_filter_and_row_address(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    data = rows(0, 1000)
    t.append(data, max_rows_per_file=300)
    t.delete("id IN (1, 3, 5, 301)")
    out = t.to_arrow(
        columns=["id", "score"], filter="ts >= '2024-01-01 00:05:00' AND category IS NOT NULL", with_row_address=True
    )
    assert out.column_names == ["id", "score", "_rowaddr"]
    ts_cut = pa.scalar(np.datetime64("2024-01-01T00:05:00", "us"))
    expected = data.filter((pc.field("ts") >= ts_cut) & pc.field("category").is_valid() & (pc.field("id") != 301))
    assert out.column("id").to_pylist() == expected.column("id").to_pylist()
    addr = out.column("_rowaddr").to_numpy()
    frag_ids = [f.id for f in t.fragments()]
    for a, i in zip(addr[:5], out.column("id").to_pylist()[:5]):
        assert (int(a) >> 32) == frag_ids[i // 300] and (int(a) & 0xFFFFFFFF) == i % 300
    # to_pandas and count_rows agree
    assert len(t.to_pandas(filter="category = 'b'")) == t.count_rows("category = 'b'") == 250 - 3  # ids 1, 5, 301 deleted


def test_take_returns_rows_in_requested_order(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 1000), max_rows_per_file=400)
    t.delete("id = 5")
    addrs = t.to_arrow(columns=["id"], with_row_address=True)
    by_id = dict(zip(addrs.column("id").to_pylist(), addrs.column("_rowaddr").to_pylist()))
    want = [999, 0, 401, 0, 777]
    got = t.take([by_id[i] for i in want], columns=["id", "category"])
    assert got.column("id").to_pylist() == want
    assert got.column_names == ["id", "category"]
    assert t.take(np.array([by_id[3]], dtype=np.uint64)).num_rows == 1
    with pytest.raises(RowNotFound, match="deleted or out of range"):
        t.take([(t.fragments()[0].id << 32) | 5])
    with pytest.raises(RowNotFound, match="fragment 99"):
        t.take([99 << 32])


def test_versions_checkout_and_time_travel(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 10))
    t.append(rows(10, 10))
    t.delete("id < 5")
    assert [(v.version, v.operation, v.rows) for v in t.versions()] == [
        (1, "create", 0),
        (2, "append", 10),
        (3, "append", 20),
        (4, "delete", 15),
    ]
    old = t.checkout(2)
    assert ids_of(old) == list(range(10)) and t.version == 4
    assert ids_of(lamina.open_table(uri, version=3, storage_options=opts)) == list(range(20))
    with pytest.raises(VersionNotFound, match="no version 9"):
        t.checkout(9)


def test_fragments_and_stats_report_layout(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts, row_group_rows=100)
    t.append(rows(0, 250))
    t.delete("id < 10")
    [f] = t.fragments()
    assert (f.rows, f.deleted_rows, f.live_rows) == (250, 10, 240)
    assert [rg[0] for rg in f.row_groups] == [100, 100, 50] and all(rg[1] > 0 for rg in f.row_groups)
    assert f.file_version == lamina._native.FILE_VERSION and f.deletion_path.startswith("_deletions/")
    s = t.stats()
    assert (s.rows, s.deleted_rows, s.fragments, s.row_groups, s.versions) == (240, 10, 1, 3, 3)
    assert s.data_bytes == f.bytes


def test_stable_row_ids_survive_rewrite(table_location):
    from lamina.commit import commit
    from lamina.rewrite import full_rewrite
    from lamina.transaction import Rewrite

    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, stable_row_ids=True, storage_options=opts)
    t.append(rows(0, 50))
    t.append(rows(50, 50))
    t.delete("id IN (0, 10, 20, 30, 40, 50, 60, 70, 80, 90)")
    before = t.to_arrow(columns=["id"], with_row_id=True)
    assert before.column("_rowid").to_pylist() == before.column("id").to_pylist()
    group = full_rewrite(t.store, t.manifest, [f.id for f in t.fragments()], t.write_options)
    commit(t.store, Rewrite(t.version, [group]), t.manifest)
    after = t.reload().to_arrow(columns=["id"], with_row_id=True)
    assert len(t.fragments()) == 1
    assert after.equals(before)
    with pytest.raises(InvalidArgument, match="stable row ids"):
        lamina.create_table(uri + "2", SCHEMA, storage_options=opts).to_arrow(with_row_id=True)


def test_overwrite_replaces_rows_and_schema(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 10))
    new_schema = pa.schema([("x", pa.int32())])
    t.overwrite(pa.table({"x": pa.array([1, 2], pa.int32())}), schema=new_schema)
    assert t.schema == new_schema and t.to_arrow().column("x").to_pylist() == [1, 2]
    assert t.checkout(2).count_rows() == 10


def test_primary_key_is_validated_and_recorded(local_table_uri):
    assert lamina.create_table(local_table_uri, SCHEMA, primary_key="id").primary_key == ("id",)
    assert lamina.open_table(local_table_uri).primary_key == ("id",)
    with pytest.raises(InvalidArgument, match="not in the schema"):
        lamina.create_table(local_table_uri + "2", SCHEMA, primary_key="nope")
    with pytest.raises(InvalidArgument, match="keys must be"):
        lamina.create_table(local_table_uri + "3", SCHEMA, primary_key="score")


def test_table_pickles_for_ray(table_location):
    import pickle

    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 5))
    t2 = pickle.loads(pickle.dumps(t))
    assert t2.version == t.version and ids_of(t2) == list(range(5))


def test_pandas_round_trip(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, pa.schema([("id", pa.int64()), ("v", pa.float64())]), storage_options=opts)
    df = pd.DataFrame({"id": [1, 2], "v": [0.5, None]})
    t.append(df)
    pd.testing.assert_frame_equal(t.to_pandas(), df)
