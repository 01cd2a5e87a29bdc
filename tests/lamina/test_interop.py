"""Data files are plain Parquet: pyarrow and DuckDB read the same rows as Table.to_arrow()."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

import lamina
from lamina.deletion import read_deleted
from tests.lamina.helpers import SCHEMA, rows


def _local_copy(t, frag, tmp_path):
    path = tmp_path / f"{frag.id}.parquet"
    path.write_bytes(t.store.get(frag.path))
    return path


def _comparable(table: pa.Table) -> dict:
    return {name: table.column(name).to_pylist() for name in SCHEMA.names}


def test_pyarrow_and_duckdb_agree_with_lamina(table_location, tmp_path):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts, row_group_rows=300)
    t.append(rows(0, 1000), max_rows_per_file=400)
    t.append(rows(1000, 500))
    t.delete("category = 'a' AND id < 700")
    t.delete("id BETWEEN 1200 AND 1210")
    expected = t.to_arrow()

    pa_parts, duck_parts = [], []
    for frag in t.manifest.fragments:
        path = _local_copy(t, frag, tmp_path)
        keep = np.ones(frag.rows, dtype=bool)
        keep[read_deleted(t.store, frag)] = False
        pf = pq.ParquetFile(path)
        assert pf.metadata.metadata[b"lamina.file_version"] == lamina._native.FILE_VERSION.encode()
        assert pf.schema_arrow.equals(SCHEMA)
        pa_parts.append(pf.read().filter(pa.array(keep)))
        duck = duckdb.sql(
            f"SELECT * EXCLUDE (file_row_number) FROM read_parquet('{path}', file_row_number=true) ORDER BY file_row_number"
        ).arrow()
        if isinstance(duck, pa.RecordBatchReader):
            duck = duck.read_all()
        duck_parts.append(duck.filter(pa.array(keep)))

    from_pyarrow = pa.concat_tables(pa_parts)
    assert from_pyarrow.equals(expected)
    from_duckdb = pa.concat_tables(duck_parts)
    assert from_duckdb.num_rows == expected.num_rows
    got = {n: from_duckdb.column(n).to_pylist() for n in SCHEMA.names}
    want = _comparable(expected)
    assert got["id"] == want["id"] and got["category"] == want["category"] and got["score"] == want["score"]
    assert got["ts"] == want["ts"] and got["meta"] == want["meta"]
    assert [list(v) for v in got["vec"]] == [list(v) for v in want["vec"]]
