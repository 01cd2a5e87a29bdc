"""Bad input gets a clear error from lamina.errors, naming the object, with nothing written."""

from __future__ import annotations

import dataclasses
import os

import pyarrow as pa
import pytest

import lamina
from lamina.errors import (
    BucketNotFound,
    CorruptFile,
    InvalidConfig,
    InvalidFilter,
    MissingCredentials,
    SchemaMismatch,
    TableExists,
    TableNotFound,
    UnsupportedURI,
)
from lamina.manifest import manifest_path
from tests.lamina.helpers import SCHEMA, rows


def _files(t):
    return sorted(o.path for o in t.store.list(""))


@pytest.fixture
def table(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 100))
    return t


def test_wrong_schema_on_append_writes_nothing(table):
    before = _files(table)
    with pytest.raises(SchemaMismatch, match=r"column 'id' is string, the table has int64"):
        table.append(rows(0, 5).set_column(0, "id", pa.array([str(i) for i in range(5)])))
    with pytest.raises(SchemaMismatch, match=r"missing column\(s\) \['meta'\]"):
        table.append(rows(0, 5).drop_columns(["meta"]))
    with pytest.raises(SchemaMismatch, match=r"unexpected column\(s\) \['extra'\]"):
        table.append(rows(0, 5).append_column("extra", pa.array([1] * 5)))
    assert _files(table) == before and table.version == 2


def test_nulls_in_non_nullable_column_are_refused_midstream(local_table_uri):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False)])
    t = lamina.create_table(local_table_uri, schema)
    good = pa.record_batch([pa.array([1, 2])], schema=schema)
    bad = pa.record_batch([pa.array([3, None])], names=["id"])
    reader = pa.RecordBatchReader.from_batches(pa.schema([("id", pa.int64())]), [good.cast(pa.schema([("id", pa.int64())])), bad])
    with pytest.raises(SchemaMismatch, match="'id' is not nullable"):
        t.append(reader, max_rows_per_file=2)
    assert list(t.store.list("data/")) == [], "files written before the bad batch are removed"


def test_filter_errors_name_the_problem(table):
    with pytest.raises(InvalidFilter, match=r"column 'nope', which the table does not have; columns: id, category"):
        table.to_arrow(filter="nope = 1")
    with pytest.raises(InvalidFilter, match="unknown_col|No match"):
        table.delete(pa.compute.field("unknown_col") == 1)
    with pytest.raises(InvalidFilter, match="cannot parse"):
        table.count_rows("id = = 1")
    with pytest.raises(InvalidFilter, match="cannot be compared"):
        table.count_rows("id = 'abc'")
    assert table.version == 2


def test_missing_table_and_existing_table(local_table_uri):
    with pytest.raises(TableNotFound, match="no Lamina table at"):
        lamina.open_table(local_table_uri)
    lamina.create_table(local_table_uri, SCHEMA)
    with pytest.raises(TableExists):
        lamina.create_table(local_table_uri, SCHEMA)


def test_truncated_and_tampered_manifests(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    path = os.path.join(local_table_uri, manifest_path(2))
    data = open(path, "rb").read()
    open(path, "wb").write(data[: len(data) // 2])
    with pytest.raises(CorruptFile, match=r"manifest .*00000000000000000002.manifest is corrupt: not valid JSON"):
        lamina.open_table(local_table_uri)
    open(path, "wb").write(data.replace(b'"rows": 10', b'"rows": 11', 1))
    with pytest.raises(CorruptFile, match="checksum mismatch"):
        lamina.open_table(local_table_uri)
    assert lamina.open_table(local_table_uri, version=1).count_rows() == 0  # earlier versions stay readable


def test_manifest_entry_outside_root_is_refused(local_table_uri):
    import json

    from lamina.manifest import decode_manifest, encode_manifest, load_manifest

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    m = load_manifest(t.store, 2)
    evil = m.replace(fragments=(dataclasses.replace(m.fragments[0], path="data/../../etc/passwd"),))
    with pytest.raises(CorruptFile, match="points outside the table root"):
        decode_manifest(encode_manifest(evil), "test")
    evil2 = m.replace(fragments=(dataclasses.replace(m.fragments[0], path="s3://other/x.parquet"),))
    with pytest.raises(CorruptFile, match="outside the table root"):
        decode_manifest(encode_manifest(evil2), "test")
    assert json.loads(encode_manifest(m))["fragments"][0]["path"].startswith("data/")


def test_truncated_and_corrupt_data_files(table):
    frag = table.fragments()[0]
    good = table.store.get(frag.path)
    table.store.put(frag.path, good[: len(good) - 100])
    with pytest.raises(CorruptFile, match=rf"{frag.path}.*fragment {frag.id}"):
        table.to_arrow()
    table.store.put(frag.path, b"\0" * len(good))
    with pytest.raises(CorruptFile, match=rf"{frag.path}.*fragment {frag.id}"):
        table.to_arrow()
    with pytest.raises(CorruptFile):
        table.delete("id < 5")
    assert table.version == 2
    table.store.delete([frag.path])
    with pytest.raises(lamina.errors.ObjectNotFound, match="missing"):
        table.to_arrow()


def test_corrupt_deletion_file(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    t.delete("id < 10")
    path = t.fragments()[0].deletion_path
    t2 = lamina.open_table(local_table_uri)
    t.store.put(path, b"garbage")
    from lamina.deletion import _CACHE

    _CACHE.clear()
    with pytest.raises(CorruptFile, match=path):
        t2.to_arrow()


def test_unknown_scheme_and_bad_options(tmp_path):
    with pytest.raises(UnsupportedURI, match="'gs'.*use a local path, file:///path, or s3://"):
        lamina.create_table("gs://bucket/t", SCHEMA)
    with pytest.raises(InvalidConfig, match="takes none"):
        lamina.create_table(str(tmp_path / "t"), SCHEMA, storage_options={"region": "x"})
    with pytest.raises(InvalidConfig, match=r"unknown storage option\(s\) \['regoin'\]"):
        lamina.open_table("s3://b/t", storage_options={"regoin": "us-east-1"})
    with pytest.raises(InvalidConfig, match="max_rows_per_file=0"):
        lamina.create_table(str(tmp_path / "t"), SCHEMA, max_rows_per_file=0)
    # file:// works
    t = lamina.create_table("file://" + str(tmp_path / "f"), SCHEMA)
    assert t.uri == str(tmp_path / "f")


def test_missing_bucket(s3_options):
    with pytest.raises(BucketNotFound, match="bucket 'no-such-bucket' does not exist"):
        lamina.create_table("s3://no-such-bucket/t", SCHEMA, storage_options=s3_options)


def test_missing_credentials(monkeypatch, tmp_path, moto_server):
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(MissingCredentials, match="set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"):
        lamina.open_table("s3://bucket/t", storage_options={"endpoint_url": moto_server})
