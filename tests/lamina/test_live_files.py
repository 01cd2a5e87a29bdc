"""Table.live_files: the files of a version and the rows of each it holds, enough for DuckDB to read the table."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import lamina
from lamina.deletion import kept_ranges, read_deleted
from tests.lamina.helpers import SCHEMA, HookedStore, compacted_table, in_table_types, rows


def local_files(t: lamina.Table, files: list[lamina.LiveFile], tmp_path) -> dict[str, str]:
    """Each file's uri → a local path DuckDB can read (the uri itself for a local table)."""
    if t.store.is_local:
        return {f.uri: f.uri for f in files}
    out = {}
    for f in files:
        local = tmp_path / f"{f.id}.parquet"
        local.write_bytes(t.store.get(f.path))
        out[f.uri] = str(local)
    return out


def read_with_duckdb(files: list[lamina.LiveFile], where: dict[str, str]) -> pa.Table:
    """The rows of ``files`` as DuckDB reads them: every file at once, joined with its ``keep`` ranges,
    in file order then row order."""
    keep = ", ".join(f"({i}, '{where[f.uri]}', {s}, {e})" for i, f in enumerate(files) for s, e in f.keep)
    paths = ", ".join(f"'{where[f.uri]}'" for f in files if f.keep)
    sql = f"""
        WITH keep(file, filename, start_row, end_row) AS (VALUES {keep})
        SELECT t.* EXCLUDE (filename, file_row_number)
        FROM read_parquet([{paths}], filename = true, file_row_number = true) AS t
        JOIN keep ON t.filename = keep.filename AND t.file_row_number >= keep.start_row AND t.file_row_number < keep.end_row
        ORDER BY keep.file, t.file_row_number
    """
    out = duckdb.sql(sql).arrow()
    return out.read_all() if isinstance(out, pa.RecordBatchReader) else out


def test_live_files_are_the_manifests_files_and_deletions(table_location):
    uri, opts = table_location
    t, _ = compacted_table(uri, opts)
    files = t.live_files()

    assert [(f.id, f.path, f.rows, f.live_rows, f.file_bytes) for f in files] == [
        (g.id, g.path, g.rows, g.live_rows, g.bytes) for g in t.fragments()
    ]
    assert sum(f.live_rows for f in files) == t.count_rows() == 1500 - 175 - 12 - 200 - 4
    for f, frag in zip(files, t.manifest.fragments):
        assert f.uri == f"{t.uri}/{f.path}"
        assert f.deleted == tuple(read_deleted(t.store, frag).tolist())
        kept = [i for s, e in f.keep for i in range(s, e)]
        assert kept == sorted(set(range(f.rows)) - set(f.deleted)), "keep is the complement of deleted"
        assert all(e1 < s2 for (_, e1), (s2, _) in zip(f.keep, f.keep[1:])), "ranges sorted, merged"
    by_rows = {f.rows: f for f in files}
    assert 200 not in by_rows, "a fragment whose rows are all deleted leaves the version; its file stays under data/"
    assert by_rows[500].keep == ((0, 200), (211, 499))
    rewritten = by_rows[800 - 175]
    assert rewritten.deleted[:3] == (0, 1, 2) and rewritten.keep[0][0] == 3 and rewritten.keep[-1][1] == rewritten.rows - 1

    on_storage = {o.path for o in t.store.list("data/")}
    assert {f.path for f in files} < on_storage, "the replaced files are still under data/, and not listed"


def test_duckdb_reads_the_table_from_live_files(table_location, tmp_path):
    uri, opts = table_location
    t, _ = compacted_table(uri, opts)
    files = t.live_files()
    got = in_table_types(read_with_duckdb(files, local_files(t, files, tmp_path)))
    assert got.equals(t.to_arrow())


def test_every_row_of_the_raw_files_is_more_than_the_table(table_location, tmp_path):
    """What the README no longer claims: reading data/*.parquet as is gives deleted and replaced rows."""
    uri, opts = table_location
    t, _ = compacted_table(uri, opts)
    raw = sum(pq.read_metadata(pa.BufferReader(t.store.get(o.path))).num_rows for o in t.store.list("data/"))
    assert raw == 1500 + 800 - 175 > t.count_rows()


def test_live_files_at_an_older_version(table_location, tmp_path):
    uri, opts = table_location
    t, before = compacted_table(uri, opts)
    old = t.checkout(before)
    files = old.live_files()
    assert [f.path for f in files] == [f.path for f in old.fragments()] != [f.path for f in t.fragments()]
    got = in_table_types(read_with_duckdb(files, local_files(old, files, tmp_path)))
    assert got.equals(old.to_arrow())
    assert got.num_rows == 1500 - 175 - 12 - 200


def test_live_files_list_no_directory_and_read_no_data_file(table_location):
    uri, opts = table_location
    t, _ = compacted_table(uri, opts)
    store = HookedStore(t.store)
    files = lamina.Table(store, t.manifest, opts).live_files()
    assert files == t.live_files()
    assert store.count("list") == 0, "the version's files come from its manifest, not a listing"
    assert not [p for m, p in store.calls if m != "location" and isinstance(p, str) and p.startswith("data/")]


def test_local_uris_are_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    t = lamina.create_table("relative/table", SCHEMA)
    t.append(rows(0, 10))
    [f] = t.live_files()
    assert f.uri == str(tmp_path / "relative" / "table" / f.path)
    assert (f.deleted, f.keep) == ((), ((0, 10),))
    assert f.to_dict() == {
        "id": f.id,
        "path": f.path,
        "uri": f.uri,
        "rows": 10,
        "live_rows": 10,
        "file_bytes": f.file_bytes,
        "deleted": [],
        "keep": [[0, 10]],
    }


def test_an_empty_table_has_no_live_files(tmp_path):
    assert lamina.create_table(str(tmp_path / "t"), SCHEMA).live_files() == []


@pytest.mark.parametrize(
    ("deleted", "rows", "keep"),
    [
        ([], 5, ((0, 5),)),
        ([0, 1, 2, 3, 4], 5, ()),
        ([0, 3, 4], 8, ((1, 3), (5, 8))),
        ([7], 8, ((0, 7),)),
        ([2, 5], 8, ((0, 2), (3, 5), (6, 8))),
    ],
)
def test_kept_ranges(deleted, rows, keep):
    assert kept_ranges(np.array(deleted, dtype=np.uint32), rows) == keep
