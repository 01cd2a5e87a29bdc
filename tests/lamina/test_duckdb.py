"""DuckDB over a Lamina table: ``Table.to_duckdb`` (a pyarrow Dataset DuckDB pushes projections and filters
into) and the Arrow stream (``from t``) give exactly the live rows DuckDB gives over the same rows in
memory, for random SQL, at the latest and an older version; pushed filters narrow what is read."""

from __future__ import annotations

import collections
import random

import duckdb
import pyarrow as pa
import pytest

import lamina
import lamina.errors
from lamina.dataset import LaminaDataset
from lamina.errors import InvalidArgument, InvalidFilter
from tests.lamina.helpers import SCHEMA, bytes_read, compacted_table, rows
from tests.lamina.test_scan import brute

WHERE = [
    "id < {a}",
    "id BETWEEN {a} AND {b}",
    "id = {a}",
    "id IN ({a}, {b}, 3, 799)",
    "id NOT IN ({a}, {b})",
    "category NOT IN ('a', 'b')",
    "NOT (category IN ('c') OR id < {a})",
    "category = 'b'",
    "category IN ('a', 'c') OR id > {b}",
    "category IS NULL",
    "category IS NOT NULL AND score < 0.5",
    "NOT (id < {a}) AND category <> 'c'",
    "score > 0.25 AND score <= 0.75",
    "meta.a = {m}",
    "ts < TIMESTAMP '2024-01-01 00:10:00'",
    "id % 7 = 0",
    "category LIKE 'a%'",
    "id >= {a} AND id < {b} AND category = 'a'",
]
SELECT = ["*", "id", "id, category", "category, score, meta", "count(*)", "sum(id), count(category), min(ts)"]


def _plain(value):
    """A fixed-size list comes back as a tuple from Arrow (DuckDB's ARRAY) and as a list from Parquet (LIST)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _rows(con: duckdb.DuckDBPyConnection, sql: str) -> collections.Counter:
    return collections.Counter(repr(_plain(r)) for r in con.sql(sql).fetchall())  # structs come back as dicts


def _check(t: lamina.Table, rng: random.Random, cases: int) -> None:
    con = duckdb.connect()
    t.to_duckdb("lam", con)
    want = brute(t).drop_columns(["_rowaddr"])
    con.register("mem", want)
    con.register("stream", t)  # the Arrow PyCapsule stream: no pushdown
    native = t.uri.startswith("/")  # reader="duckdb" on S3 needs DuckDB's httpfs extension
    if native:
        t.to_duckdb("files", con, reader="duckdb")  # DuckDB's Parquet reader, deleted positions anti-joined
    for _ in range(cases):
        a, b, m = sorted([rng.randrange(0, 1500), rng.randrange(0, 1600)]) + [rng.randrange(0, 100)]
        where = rng.choice(WHERE).format(a=a, b=b, m=m)
        select = rng.choice(SELECT)
        sql = f"SELECT {select} FROM {{}} WHERE {where}"
        expected = _rows(con, sql.format("mem"))
        assert _rows(con, sql.format("lam")) == expected, sql
        if rng.random() < 0.3:
            assert _rows(con, sql.format("stream")) == expected, sql
        if native:
            assert _rows(con, sql.format("files")) == expected, sql
    deleted = set(range(0, 1500)) - set(want.column("id").to_pylist())
    assert deleted and not deleted & {r[0] for r in con.sql("SELECT id FROM lam").fetchall()}
    limited = con.sql("SELECT id FROM lam LIMIT 10").fetchall()
    assert len(limited) == min(10, want.num_rows) and {r[0] for r in limited} <= set(want.column("id").to_pylist())


def test_random_sql_equals_duckdb_over_the_rows_in_memory(table_location):
    uri, opts = table_location
    t, before = compacted_table(uri, opts)
    t.create_index("id", "btree")
    rng = random.Random(32)
    _check(t, rng, 50)
    _check(t.checkout(before), rng, 20)


def test_the_duckdb_reader_without_file_index(tmp_path, monkeypatch):
    """An older DuckDB has no file_index column: the deleted positions are joined by file name."""
    import lamina.dataset

    monkeypatch.setattr(lamina.dataset, "has_file_index", lambda con, uri: False)
    t, before = compacted_table(str(tmp_path / "t"), None)
    _check(t, random.Random(5), 25)


def test_the_arrow_stream_works_without_glue(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 500))
    t.delete("id < 100")
    assert duckdb.sql("SELECT count(*), min(id) FROM t").fetchall() == [(400, 100)]
    assert pa.table(t).equals(t.to_arrow())
    assert pa.table(t.scanner(["id"], "id >= 490")).column("id").to_pylist() == list(range(490, 500))
    pl = pytest.importorskip("polars")
    assert pl.from_arrow(pa.table(t)).height == 400


def test_duckdb_pushes_filters_and_projections_into_the_scanner(tmp_path, monkeypatch):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for i in range(10):
        t.append(rows(i * 1000, 1000))
    t.delete("category = 'b'")
    t.create_index("id", "btree")
    seen = []
    real = LaminaDataset.scanner

    def spy(self, columns=None, filter=None, batch_size=None, **kwargs):
        s = real(self, columns, filter, batch_size, **kwargs)
        seen.append((columns, filter, s))
        return s

    monkeypatch.setattr(LaminaDataset, "scanner", spy)
    con = duckdb.connect()
    t.to_duckdb("lam", con)
    assert con.sql("SELECT category FROM lam WHERE id = 4242").fetchall() == [("c",)]
    columns, flt, scanner = seen[-1]
    assert set(columns) <= {"category", "id"} and flt is not None
    assert scanner.stats.fragments_indexed >= 1 and scanner.stats.fragments_scanned == 0  # the btree answered
    assert scanner.stats.units_read == 1 and scanner.stats.rows == 1
    assert con.sql("SELECT count(*) FROM lam WHERE id = 4241").fetchall() == [(0,)]  # deleted (category 'b')
    # DuckDB pushes IN as if_else(is_valid(id), is_in(id, ...), null): read as IN, so the btree serves it
    assert sorted(con.sql("SELECT id FROM lam WHERE id IN (4242, 16, 4241)").fetchall()) == [(16,), (4242,)]
    assert seen[-1][2].stats.fragments_scanned == 0 and seen[-1][2].stats.rows == 2


def test_a_selective_filter_reads_fewer_bytes(lamina_s3):
    """On S3, where ``io_stats`` counts every byte fetched (local files are read by pyarrow directly)."""
    uri, opts = lamina_s3.uri("warehouse/selective"), lamina_s3.storage_options
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for i in range(20):
        t.append(rows(i * 1000, 1000))
    con = duckdb.connect()
    t.to_duckdb("lam", con)

    full = bytes_read(t.store, con.sql("SELECT sum(score) FROM lam").fetchall)
    selective = bytes_read(t.store, con.sql("SELECT sum(score) FROM lam WHERE id BETWEEN 5000 AND 5100").fetchall)
    assert full > 0 and selective * 5 < full


def test_an_engine_filter_the_table_cannot_apply_is_an_invalid_filter(tmp_path):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 10))
    ds = t.dataset()
    with pytest.raises(InvalidFilter):
        ds.scanner(columns=["id"], filter=pa.compute.field("missing") == 1)
    with pytest.raises(NotImplementedError):
        ds.get_fragments()
    assert ds.count_rows() == 10 and ds.head(3).num_rows == 3 and ds.schema == SCHEMA


def test_pyarrow_cannot_read_the_dataset_around_its_scanner(tmp_path):
    """pyarrow functions that go to the C++ dataset get a clear error, never the raw files' rows (or a crash)."""
    import pyarrow.dataset as pads

    from lamina.errors import Unsupported

    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 100))
    t.delete("id < 10")
    ds = t.dataset()
    for read in (
        lambda: pads.Scanner.from_dataset(ds).to_table(),
        lambda: pads.Scanner.from_dataset(ds, columns=["id"]).to_table(),
        lambda: pads.UnionDataset(ds.schema, [ds]).to_table(),
        lambda: ds.get_fragments(),
        lambda: ds.take([0]),
        lambda: ds.scanner(columns={"x": pa.compute.field("id")}),
    ):
        with pytest.raises(Unsupported, match=str(tmp_path)):
            read()
    assert ds.to_table().num_rows == 90 and ds.partition_expression.equals(pa.compute.scalar(True))
    with pytest.raises(InvalidArgument):
        ds.scanner(batch_size=0)


def test_the_duckdb_reader_view(tmp_path, lamina_s3):
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    con = duckdb.connect()
    t.to_duckdb("v", con, reader="duckdb")  # no files yet: an empty view of the table's columns
    assert con.sql("SELECT count(*) FROM v").fetchall() == [(0,)] and con.sql("SELECT * FROM v").columns == SCHEMA.names
    t.append(rows(0, 300))
    t.to_duckdb("v", con, reader="duckdb")  # nothing deleted: no join
    assert con.sql("SELECT count(*), sum(id) FROM v").fetchall() == [(300, sum(range(300)))]
    old = t.version
    t.delete("id < 100")
    t.to_duckdb("v", con, reader="duckdb")
    t.checkout(old).to_duckdb("before", con, reader="duckdb")  # pinned: each view its version
    assert con.sql("SELECT count(*), min(id) FROM v").fetchall() == [(200, 100)]
    assert con.sql("SELECT count(*), min(id) FROM before").fetchall() == [(300, 0)]
    with pytest.raises(InvalidArgument, match="give it a name"):
        t.to_duckdb(reader="duckdb")
    with pytest.raises(InvalidArgument, match="reader"):
        t.to_duckdb("x", con, reader="spark")
    s3 = lamina.create_table(lamina_s3.uri("warehouse/duckdb-reader"), SCHEMA, storage_options=lamina_s3.storage_options)
    s3.append(rows(0, 10))
    try:
        con.execute("LOAD httpfs")
    except duckdb.Error:
        with pytest.raises(lamina.errors.InvalidConfig, match="httpfs"):
            s3.to_duckdb("remote", con, reader="duckdb")


# -- an evolved table (docs/FORMAT.md §2.4): files of several schemas --------------------------------------
def _evolved(uri: str) -> lamina.Table:
    """Files written in five schemas: a column renamed and its name reused, one dropped and added again
    with a default, one widened, a date made a timestamp, a struct's field widened; deletions in several."""
    s = pa.schema(
        [("id", pa.int64()), ("x", pa.int32()), ("name", pa.string()), ("d", pa.date32()), ("st", pa.struct([("a", pa.int8())]))]
    )
    t = lamina.create_table(uri, s)

    for k in range(4):
        lo = 100 * k
        t.append(
            pa.table(
                {
                    "id": pa.array(range(lo, lo + 100), pa.int64()),
                    "x": pa.array([i % 7 for i in range(lo, lo + 100)], pa.int32()),
                    "name": [f"n{i % 3}" for i in range(lo, lo + 100)],
                    "d": pa.array(list(range(lo, lo + 100)), pa.date32()),
                    "st": pa.array([{"a": i % 5} for i in range(lo, lo + 100)], s.field("st").type),
                },
                schema=s,
            )
        )
    t.delete(f"id IN ({', '.join(str(i) for i in range(3, 400, 10))})")
    t.rename_column("name", "label")
    t.add_columns(pa.field("name", pa.string()))
    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int32()), defaults={"x": -1})
    t.alter_column("d", pa.timestamp("ms"))
    t.alter_column("st.a", pa.int32())
    today = pa.schema([(f.name, f.type) for f in t.schema])
    lo = 1000
    t.append(
        pa.table(
            {
                "id": pa.array(range(lo, lo + 50), pa.int64()),
                "label": [f"n{i % 3}" for i in range(lo, lo + 50)],
                "d": pa.array([i * 86_400_000 for i in range(lo, lo + 50)], pa.timestamp("ms")),
                "st": pa.array([{"a": 1000 + i} for i in range(lo, lo + 50)], today.field("st").type),
                "name": [f"new{i % 2}" for i in range(lo, lo + 50)],
                "x": pa.array([i % 4 for i in range(lo, lo + 50)], pa.int32()),
            },
            schema=today,
        )
    )
    t.delete("id IN (1001, 1049, 7)")
    return t


EVOLVED_SQL = [
    "SELECT * FROM {}",
    "SELECT id, x FROM {} WHERE x IS NULL",
    "SELECT id FROM {} WHERE x = -1",
    "SELECT id FROM {} WHERE x = 3",
    "SELECT count(*), count(name), count(label) FROM {}",
    "SELECT id, name FROM {} WHERE name IS NULL OR name = 'n1'",
    "SELECT label, count(*) FROM {} GROUP BY label",
    "SELECT id, d FROM {} WHERE d >= TIMESTAMP '1970-03-01'",
    "SELECT id, st.a FROM {} WHERE st.a >= 3",
]


@pytest.mark.parametrize("file_index", [True, False])
def test_both_readers_read_an_evolved_table_in_todays_schema(tmp_path, monkeypatch, file_index):
    import lamina.dataset

    if not file_index:  # an older DuckDB: the deleted positions joined by file name
        monkeypatch.setattr(lamina.dataset, "has_file_index", lambda con, uri: False)
    t = _evolved(str(tmp_path / "t"))
    con = duckdb.connect()
    con.register("mem", t.to_arrow())
    t.to_duckdb("lam", con)
    t.to_duckdb("files", con, reader="duckdb")
    assert con.sql("SELECT * FROM files").columns == t.schema.names
    for sql in EVOLVED_SQL:
        expected = _rows(con, sql.format("mem"))
        assert _rows(con, sql.format("lam")) == expected, sql
        assert _rows(con, sql.format("files")) == expected, sql
    # what a reader by name would get wrong: the old x's values and the renamed column's under its old name
    assert con.sql("SELECT count(*) FROM files WHERE x BETWEEN 0 AND 6 AND id < 1000").fetchall() == [(0,)]
    assert con.sql("SELECT count(*) FROM files WHERE name IS NOT NULL AND id < 1000").fetchall() == [(0,)]
    # and the dataset the default reader scans: pushed columns and filters, today's schema
    ds = t.dataset()
    assert ds.schema.names == t.schema.names
    assert ds.to_table(columns=["id", "x"], filter=pa.compute.field("x") == -1).num_rows == t.count_rows("x = -1") == 360 - 1
    assert ds.count_rows(filter="name = 'new1'") == 23


def test_the_duckdb_reader_refuses_a_struct_whose_fields_changed_and_names_the_way_out(tmp_path):
    t = lamina.create_table(
        str(tmp_path / "t"), pa.schema([("id", pa.int64()), ("st", pa.struct([("a", pa.int8()), ("b", pa.int8())]))])
    )
    t.append(pa.table({"id": pa.array([1], pa.int64()), "st": pa.array([{"a": 1, "b": 2}], t.schema.field("st").type)}))
    t.rename_column("st.a", "aa")
    with pytest.raises(lamina.errors.Unsupported, match=r"column 'st' of table .* reader=\"lamina\" \(the default\)"):
        t.to_duckdb("v", duckdb.connect(), reader="duckdb")
    assert t.to_duckdb().fetchall() == [(1, {"aa": 1, "b": 2})]
