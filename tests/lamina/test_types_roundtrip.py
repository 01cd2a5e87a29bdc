"""Every Arrow type a table accepts reads back as that type, through every read path.

Parquet has no logical type for timestamp[s], date64, time32[s] or duration: the writer stores their
integers, and pyarrow read them back as plain integers (found while adding row-group pruning, issue 12),
so ``to_arrow`` returned int64 where the table said timestamp[s] and filters on such columns failed.
"""

from __future__ import annotations

import datetime as dt

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.cache import clear_caches

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts_s", pa.timestamp("s")),
        ("ts_s_utc", pa.timestamp("s", tz="UTC")),
        ("ts_ms", pa.timestamp("ms")),
        ("d64", pa.date64()),
        ("d32", pa.date32()),
        ("t32", pa.time32("s")),
        ("t64", pa.time64("us")),
        ("dur", pa.duration("s")),
        ("u32", pa.uint32()),
        ("big", pa.large_string()),
        ("dict", pa.dictionary(pa.int32(), pa.string())),
    ]
)


def data(n: int = 30) -> pa.Table:
    ids = np.arange(n, dtype=np.int64)
    return pa.table(
        {
            "id": ids,
            "ts_s": pa.array(ids * 3600, pa.timestamp("s")),
            "ts_s_utc": pa.array(ids * 60, pa.timestamp("s", tz="UTC")),
            "ts_ms": pa.array(ids * 1000, pa.timestamp("ms")),
            "d64": pa.array(ids * 86_400_000, pa.date64()),
            "d32": pa.array(ids.astype(np.int32), pa.date32()),
            "t32": pa.array(ids.astype(np.int32), pa.time32("s")),
            "t64": pa.array(ids, pa.time64("us")),
            "dur": pa.array(ids, pa.duration("s")),
            "u32": pa.array(ids.astype(np.uint32)),
            "big": pa.array([f"v{i}" for i in ids], pa.large_string()),
            "dict": pa.array([f"c{i % 3}" for i in ids]).dictionary_encode(),
        },
        schema=SCHEMA,
    )


def same(got: pa.Table, expect: pa.Table) -> bool:
    """Same types and values (dictionary chunks may carry different dictionaries)."""
    return got.schema.remove_metadata() == expect.schema.remove_metadata() and got.to_pylist() == expect.to_pylist()


def test_every_read_path_returns_the_table_types(table_location, monkeypatch):
    uri, options = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=options)
    t.append(data(), max_rows_per_file=10, row_group_rows=5)
    expect = data()
    assert same(t.to_arrow(), expect)
    assert t.to_arrow(columns=["ts_s", "d64"]).schema == pa.schema([SCHEMA.field("ts_s"), SCHEMA.field("d64")])
    since = dt.datetime(1970, 1, 1, 10)
    got = t.to_arrow(filter=pa.compute.field("ts_s") >= pa.scalar(since, pa.timestamp("s")))
    assert same(got, expect.filter(pa.compute.field("ts_s") >= pa.scalar(since, pa.timestamp("s"))))
    assert same(t.to_arrow(filter="id >= 25"), expect.slice(25))
    addrs = t.to_arrow(with_row_address=True).column("_rowaddr").to_numpy()
    pick = [29, 0, 14, 14]
    assert same(t.take(addrs[pick]), expect.take(pick))
    if options:  # large objects on S3 are read by row group, through pyarrow
        monkeypatch.setenv("LAMINA_POINT_OBJECT_BYTES", "0")
        clear_caches()
        assert same(t.take(addrs[pick]), expect.take(pick))


@pytest.mark.parametrize("kind", ["btree"])
def test_an_index_on_a_seconds_timestamp_answers_like_a_scan(tmp_path, kind):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(data(), max_rows_per_file=10)
    t.create_index("ts_s", kind)
    flt = "ts_s >= TIMESTAMP '1970-01-01 20:00:00'"
    assert same(t.to_arrow(filter=flt), t.to_arrow(filter=flt, use_index=False))
    assert t.to_arrow(filter=flt).column("id").to_pylist() == list(range(20, 30))
