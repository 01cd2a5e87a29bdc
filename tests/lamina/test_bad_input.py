"""Bad input gets a clear error before anything is changed: tampered manifests, stray keys,
odd column names, fragments of another schema."""

from __future__ import annotations

import dataclasses

import pyarrow as pa
import pytest

import lamina
from lamina.errors import CorruptFile, SchemaMismatch
from lamina.manifest import decode_manifest, encode_manifest, manifest_path
from tests.lamina.helpers import SCHEMA, HookedStore, ids_of, rows


def _rewrite_latest(t, change):
    """Re-encodes the latest manifest after ``change`` (valid checksum: only the content lies)."""
    m = t.manifest
    t.store.delete([manifest_path(m.version)])
    t.store.put(manifest_path(m.version), encode_manifest(change(m)))


@pytest.mark.parametrize("row_ids", [((0, 5),), ((0, 5), (7, 2)), ((-3, 7),), ((0, 10), (10, 400))])
def test_tampered_stable_row_ids_are_corrupt_not_index_errors(local_table_uri, row_ids):
    t = lamina.create_table(local_table_uri, SCHEMA, stable_row_ids=True)
    t.append(rows(0, 10))
    _rewrite_latest(t, lambda m: m.replace(fragments=(dataclasses.replace(m.fragments[0], row_ids=row_ids),)))
    with pytest.raises(CorruptFile, match="row ids"):
        lamina.open_table(local_table_uri).to_arrow(with_row_id=True)


def test_append_of_dicts_with_keys_that_are_not_columns_names_them(local_table_uri):
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("name", pa.string())]))
    with pytest.raises(SchemaMismatch, match=r"\['nmae', 'zz'\]"):
        t.append([{"id": 1, "name": "a"}, {"id": 2, "nmae": "typo", "zz": 0}])
    assert t.version == 1 and lamina.open_table(local_table_uri).count_rows() == 0
    t.append([{"id": 1, "name": "a"}, {"id": 2}])  # a missing key is a null, as in pyarrow
    assert lamina.open_table(local_table_uri).to_arrow().to_pylist() == [{"id": 1, "name": "a"}, {"id": 2, "name": None}]


@pytest.mark.parametrize("column", ["größe", "名前", "a b/c", ".hidden", "x" * 80])
def test_default_index_names_of_any_column_name_are_valid(local_table_uri, column):
    t = lamina.create_table(local_table_uri, pa.schema([(column, pa.int64())]))
    t.append(pa.table({column: list(range(100))}))
    t.create_index(column, "btree")
    (info,) = t.list_indices()
    assert info.column == column
    assert t.to_arrow(filter=pa.compute.field(column) == 42).num_rows == 1
    t.drop_index(info.name)


def test_two_odd_columns_get_distinct_default_index_names(local_table_uri):
    t = lamina.create_table(local_table_uri, pa.schema([("é", pa.int64()), ("è", pa.int64())]))
    t.append(pa.table({"é": [1, 2], "è": [3, 4]}))
    t.create_index("é", "btree")
    t.create_index("è", "btree")
    assert len({i.name for i in t.list_indices()}) == 2


def test_commit_refuses_a_fragment_written_in_an_older_schema(local_table_uri):
    from lamina.datafile import write_fragments
    from lamina.transaction import Append

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    writer = lamina.open_table(local_table_uri)
    frags = write_fragments(writer.store, writer.schema, rows(10, 5).to_batches(), writer.write_options)
    new_schema = pa.schema([("id", pa.int64()), ("note", pa.string())])
    t.overwrite(pa.table({"id": [1, 2], "note": ["x", "y"]}, schema=new_schema), schema=new_schema)
    writer.reload()  # like a WAL applier: it reloads the manifest on conflict, its data keeps the old schema
    with pytest.raises(SchemaMismatch, match="schema changed since the data was written"):
        writer.commit_transaction(Append(writer.version, frags))
    assert not writer.store.exists(frags[0].path), "the refused files are removed"
    latest = lamina.open_table(local_table_uri)
    assert latest.version == 3 and latest.to_arrow().to_pylist() == [{"id": 1, "note": "x"}, {"id": 2, "note": "y"}]


def test_decoded_manifest_round_trips_checksums_and_table_uuid(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    m = decode_manifest(t.store.get(manifest_path(t.version)), "test")
    assert m.table_uuid == t.manifest.table_uuid and len(m.table_uuid) == 32
    assert ids_of(t) == list(range(10))


@pytest.mark.parametrize("lands", [True, False])
def test_create_table_whose_answer_was_lost_knows_whether_it_created_the_table(local_table_uri, monkeypatch, lands):
    import lamina.table
    from lamina.errors import StorageError
    from lamina.store import open_store

    real_open = lamina.table.open_store

    def answer_lost(uri, opts=None):  # every put_if_absent fails, after landing or not
        return HookedStore(real_open(uri, opts)).on(
            "put_if_absent", lands=lands, fail=lambda path: StorageError(f"writing {path} failed: connection reset")
        )

    monkeypatch.setattr(lamina.table, "open_store", answer_lost)
    if lands:
        t = lamina.create_table(local_table_uri, SCHEMA)
        assert t.version == 1
    else:
        with pytest.raises(StorageError):
            lamina.create_table(local_table_uri, SCHEMA)
    monkeypatch.setattr(lamina.table, "open_store", real_open)
    if lands:
        assert lamina.open_table(local_table_uri).version == 1
    else:
        assert not open_store(local_table_uri).exists("_versions/00000000000000000001.manifest")
