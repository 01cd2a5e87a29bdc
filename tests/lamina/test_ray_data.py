"""lamina.ray on a real local Ray cluster: reads and writes through Ray Data, local and on a moto S3 server."""

from __future__ import annotations

import os

import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina.errors import (
    InvalidArgument,
    InvalidFilter,
    LaminaError,
    ObjectNotFound,
    SchemaMismatch,
    TableNotFound,
    UnsupportedURI,
)
from lamina.manifest import DATA_DIR, Fragment
from lamina.store import open_store
from tests.lamina.helpers import SCHEMA, rows


def _arrow(ds) -> pa.Table:
    """Every block of a Ray Dataset as one pyarrow Table (no pandas round trip)."""
    import ray

    tables = [t for t in ray.get(ds.to_arrow_refs())]
    return pa.concat_tables(tables) if tables else None


def _by_id(t: pa.Table) -> pa.Table:
    return t.sort_by("id")


def _data_files(uri: str, options) -> list[str]:
    return sorted(o.path for o in open_store(uri, options).list(DATA_DIR))


def _table(uri: str, options, batches: int = 5, n: int = 400) -> lamina.Table:
    t = lamina.create_table(uri, SCHEMA, storage_options=options)
    for i in range(batches):
        t.append(rows(i * n, n))
    return t


def _dataset(data: pa.Table, blocks: int):
    import ray

    step = -(-data.num_rows // blocks)
    return ray.data.from_arrow([data.slice(i, step) for i in range(0, data.num_rows, step)])


# -- round trips ---------------------------------------------------------------
def test_write_then_read_round_trip_every_column(ray_cluster, table_location):
    import lamina.ray

    uri, options = table_location
    data = rows(0, 3000)
    t = lamina.ray.write_table(_dataset(data, 4), uri, storage_options=options)
    assert t.schema.equals(SCHEMA)
    assert t.version == 2  # create, then the one append
    assert t.manifest.record.operation == "append"
    assert _by_id(t.to_arrow()).equals(data)  # every column as written, with nulls, vectors, structs
    reopened = lamina.open_table(uri, storage_options=options)
    assert reopened.version == 2 and reopened.count_rows() == 3000

    ds = lamina.ray.read_table(uri, storage_options=options)
    got = _arrow(ds)
    assert got.schema.equals(SCHEMA)
    assert _by_id(got).equals(data)
    assert _by_id(_arrow(t.to_ray())).equals(data)


def test_schema_and_row_count_are_known_without_reading_data(ray_cluster, local_table_uri):
    import lamina.ray

    t = _table(local_table_uri, None)
    ds = lamina.ray.read_table(local_table_uri, columns=["score", "id"])
    for f in t.manifest.fragments:  # nothing is read to answer schema() and count()
        os.remove(os.path.join(local_table_uri, f.path))
    assert ds.schema().base_schema.equals(pa.schema([SCHEMA.field("score"), SCHEMA.field("id")]))
    assert ds.count() == 2000
    with pytest.raises(ObjectNotFound, match=r"data file .*t.*\.parquet of fragment"):
        ds.materialize()


def test_an_empty_table_reads_as_an_empty_dataset_with_its_schema(ray_cluster, local_table_uri):
    import lamina.ray

    lamina.create_table(local_table_uri, SCHEMA)
    ds = lamina.ray.read_table(local_table_uri, columns=["id", "meta"])
    assert ds.schema().base_schema.equals(pa.schema([SCHEMA.field("id"), SCHEMA.field("meta")]))
    assert ds.count() == 0
    assert lamina.ray.read_table(local_table_uri, filter="id > 3").count() == 0


# -- pushdown, deletions, versions -----------------------------------------------
@pytest.mark.parametrize("flt", ["id < 700", "id IN (3, 999, 1500, 1999) OR category = 'b'", "score > 0.5 AND id >= 1000",
                                 pc.field("score") < 0.25])
def test_filter_and_column_pushdown_equal_to_arrow(ray_cluster, local_table_uri, flt):
    import lamina.ray

    t = _table(local_table_uri, None)
    t.create_index("id", "btree")
    t.delete("id BETWEEN 100 AND 150")
    expected = t.to_arrow(columns=["id", "score"], filter=flt)
    ds = lamina.ray.read_table(local_table_uri, columns=["id", "score"], filter=flt)
    assert ds.schema().names == ["id", "score"]
    got = _arrow(ds)
    assert got.schema.names == ["id", "score"]
    assert _by_id(got).equals(_by_id(expected))
    assert _by_id(_arrow(t.to_ray(columns=["id", "score"], filter=flt))).equals(_by_id(expected))


def test_read_tasks_read_only_the_asked_columns_and_rows(local_table_uri):
    """The pushdown happens in the read tasks themselves (called here without Ray)."""
    from lamina.ray import LaminaDatasource

    t = _table(local_table_uri, None)
    source = LaminaDatasource(t, ["category", "id"], "id >= 1900")
    tasks = source.get_read_tasks(2)
    assert len(tasks) == 2
    blocks = [b for task in tasks for b in task()]
    assert all(b.schema.names == ["category", "id"] for b in blocks)
    assert sorted(pa.concat_tables(blocks).column("id").to_pylist()) == list(range(1900, 2000))


def test_ray_projection_pushdown_keeps_the_asked_order(ray_cluster, local_table_uri):
    import lamina.ray

    t = _table(local_table_uri, None)
    got = _arrow(lamina.ray.read_table(local_table_uri).select_columns(["score", "id"]))
    assert got.schema.names == ["score", "id"]
    assert _by_id(got).equals(_by_id(t.to_arrow(columns=["score", "id"])))


def test_deletions_are_applied(ray_cluster, table_location):
    import lamina.ray

    uri, options = table_location
    t = _table(uri, options)
    assert t.delete("category = 'a' OR id < 10") > 0
    got = _arrow(lamina.ray.read_table(uri, storage_options=options))
    assert got.num_rows == t.count_rows()
    assert _by_id(got).equals(_by_id(t.to_arrow()))
    assert not set(got.column("category").to_pylist()) & {"a"}


def test_version_is_pinned_when_the_dataset_is_made(ray_cluster, local_table_uri):
    import lamina.ray

    t = _table(local_table_uri, None, batches=2)
    ds = lamina.ray.read_table(local_table_uri)
    at_plan = t.to_arrow()
    t.append(rows(10_000, 500))  # commits after planning: not read
    t.delete("id < 100")
    assert _by_id(_arrow(ds)).equals(_by_id(at_plan))
    assert ds.count() == at_plan.num_rows
    old = lamina.ray.read_table(local_table_uri, version=2)
    assert _by_id(_arrow(old)).equals(rows(0, 400))
    assert _arrow(lamina.ray.read_table(local_table_uri)).num_rows == t.count_rows()


def test_fragments_are_grouped_up_to_the_parallelism(local_table_uri):
    from lamina.ray import LaminaDatasource, group_fragments

    def frag(i: int, size: int) -> Fragment:
        return Fragment(i, f"data/{i}.parquet", 10, size, (), "1")

    frags = [frag(i, s) for i, s in enumerate([100, 1, 1, 1, 1, 100, 1, 1, 100, 1])]
    for n in (1, 2, 3, 4, 7, 10, 50):
        groups = group_fragments(frags, n)
        assert len(groups) == min(n, len(frags))
        assert [f.id for g in groups for f in g] == list(range(10))  # contiguous, in table order, each once
        assert all(groups)
    assert [[f.id for f in g] for g in group_fragments(frags, 3)] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]  # 103, 102, 102 bytes
    assert group_fragments([], 4) == []

    t = _table(local_table_uri, None, batches=10, n=100)
    source = LaminaDatasource(t)
    for parallelism in (1, 3, 10, 200):
        tasks = source.get_read_tasks(parallelism)
        assert len(tasks) == min(parallelism, 10)
        assert sum(task.metadata.num_rows for task in tasks) == 1000
        assert all(task.schema.equals(SCHEMA) for task in tasks)


def test_read_errors_are_lamina_errors_naming_the_table(ray_cluster, local_table_uri):
    import lamina.ray

    with pytest.raises(TableNotFound, match="no Lamina table"):
        lamina.ray.read_table(local_table_uri)
    _table(local_table_uri, None)
    with pytest.raises(InvalidArgument, match="unknown column"):
        lamina.ray.read_table(local_table_uri, columns=["nope"])
    with pytest.raises(InvalidFilter):
        lamina.ray.read_table(local_table_uri, filter="nope > 1")
    with pytest.raises(LaminaError, match="version 99"):
        lamina.ray.read_table(local_table_uri, version=99)


# -- writes ----------------------------------------------------------------------
def test_append_and_overwrite_modes(ray_cluster, table_location):
    import lamina.ray

    uri, options = table_location
    t = _table(uri, options, batches=1)
    before = t.version
    t = lamina.ray.write_table(_dataset(rows(1000, 600), 3), uri, mode="append", storage_options=options)
    assert t.version == before + 1 and t.manifest.record.operation == "append"
    assert _by_id(t.to_arrow()).equals(pa.concat_tables([rows(0, 400), rows(1000, 600)]))

    t = lamina.ray.write_table(_dataset(rows(5000, 300), 2), uri, mode="overwrite", storage_options=options)
    assert t.manifest.record.operation == "overwrite"
    assert _by_id(t.to_arrow()).equals(rows(5000, 300))

    narrow = pa.schema([("id", pa.int64()), ("name", pa.string())])
    new = pa.table({"id": [1, 2], "name": ["x", None]}, schema=narrow)
    t = lamina.ray.write_table(_dataset(new, 1), uri, mode="overwrite", schema=narrow, storage_options=options)
    assert t.schema.equals(narrow) and t.to_arrow().equals(new)
    assert lamina.open_table(uri, storage_options=options).version == t.version


def test_writing_a_lazy_pipeline_creates_the_table_from_its_schema(ray_cluster, local_table_uri):
    import ray

    import lamina.ray

    ds = ray.data.range(1000, override_num_blocks=4).map_batches(lambda b: {"id": b["id"], "half": b["id"] / 2})
    t = lamina.ray.write_table(ds, local_table_uri, max_rows_per_file=100)
    assert t.schema.equals(pa.schema([("id", pa.int64()), ("half", pa.float64())]))
    got = _by_id(t.to_arrow())
    assert got.column("id").to_pylist() == list(range(1000))
    assert got.column("half").to_pylist() == [i / 2 for i in range(1000)]
    assert all(f.rows <= 100 for f in t.manifest.fragments)


def test_types_ray_changed_are_cast_back_and_lossy_ones_refused(ray_cluster, local_table_uri):
    """map_batches in numpy format turns the fixed-size list into a tensor and the struct's int32 into int64."""
    import lamina.ray

    data = rows(0, 500)
    t = lamina.ray.write_table(_dataset(data, 2).map_batches(lambda b: b), local_table_uri, schema=SCHEMA)
    assert _by_id(t.to_arrow()).equals(data)

    too_big = pa.table({"id": pa.array([1], pa.int64()), "small": pa.array([2**40], pa.int64())})
    lamina.create_table(local_table_uri + "2", pa.schema([("id", pa.int64()), ("small", pa.int32())]))
    with pytest.raises(SchemaMismatch, match="column 'small' is int64, the table has int32"):
        lamina.ray.write_table(_dataset(too_big, 1), local_table_uri + "2")


def _failing(batch):
    if 3000 in batch["id"].to_pylist():
        raise RuntimeError("injected failure in one block")
    return batch


@pytest.mark.parametrize("existing", [True, False])
def test_a_failed_block_commits_nothing_and_leaves_no_files(ray_cluster, table_location, existing):
    import lamina.ray

    uri, options = table_location
    if existing:
        t = _table(uri, options, batches=1)
        files_before, version_before = _data_files(uri, options), t.version
    ds = _dataset(rows(0, 4000), 8).map_batches(_failing, batch_size=None, batch_format="pyarrow")
    with pytest.raises(Exception, match="injected failure in one block"):
        lamina.ray.write_table(ds, uri, storage_options=options, schema=None if existing else SCHEMA)
    if existing:
        after = lamina.open_table(uri, storage_options=options)
        assert after.version == version_before
        assert _data_files(uri, options) == files_before
    else:
        with pytest.raises(TableNotFound):
            lamina.open_table(uri, storage_options=options)
        assert _data_files(uri, options) == []


def test_the_failure_protocol_removes_finished_and_late_tasks_files(ray_cluster, local_table_uri):
    """Driven by hand: two tasks finish, the write fails, a third task finishes late."""
    from lamina.ray import LaminaDatasink

    lamina.create_table(local_table_uri, SCHEMA)
    sink = LaminaDatasink(local_table_uri, "append")
    try:
        first = sink.write([rows(0, 100)], None)
        second = sink.write([rows(100, 100)], None)
        assert len(_data_files(local_table_uri, None)) == 2 == len(first) + len(second)
        sink.on_write_failed(RuntimeError("a third task failed"))
        assert _data_files(local_table_uri, None) == []
        with pytest.raises(LaminaError, match="abandoned"):
            sink.write([rows(200, 100)], None)
        assert _data_files(local_table_uri, None) == []
        assert lamina.open_table(local_table_uri).version == 1
    finally:
        sink.close()


def test_a_retried_tasks_first_files_are_removed_at_commit(ray_cluster, local_table_uri):
    from ray.data.datasource.datasink import WriteResult

    from lamina.ray import LaminaDatasink

    lamina.create_table(local_table_uri, SCHEMA)
    sink = LaminaDatasink(local_table_uri, "append")
    try:
        lost = sink.write([rows(0, 100)], None)  # an attempt whose result never reached the driver
        kept = sink.write([rows(0, 100)], None)
        sink.on_write_complete(WriteResult(100, 0, [kept]))
    finally:
        sink.close()
    t = lamina.open_table(local_table_uri)
    assert t.version == 2 and t.count_rows() == 100
    assert _data_files(local_table_uri, None) == [f.path for f in kept] != [f.path for f in lost]


def test_a_mismatched_dataset_is_refused_naming_the_table_and_leaves_nothing(ray_cluster, local_table_uri):
    import ray

    import lamina.ray

    _table(local_table_uri, None, batches=1)
    files = _data_files(local_table_uri, None)
    ds = ray.data.from_arrow(pa.table({"id": pa.array([1, 2], pa.int32())}))
    with pytest.raises(SchemaMismatch, match=f"table {local_table_uri}.*missing column"):
        lamina.ray.write_table(ds, local_table_uri)
    assert _data_files(local_table_uri, None) == files
    assert lamina.open_table(local_table_uri).version == 2


def test_bad_arguments_are_refused_before_anything_is_written(ray_cluster, tmp_path):
    import ray

    import lamina.ray

    ds = ray.data.from_arrow(rows(0, 10))
    uri = str(tmp_path / "t")
    with pytest.raises(InvalidArgument, match="mode='upsert'.*append, overwrite"):
        lamina.ray.write_table(ds, uri, mode="upsert")
    with pytest.raises(UnsupportedURI, match="gs"):
        lamina.ray.write_table(ds, "gs://bucket/t")
    with pytest.raises(InvalidArgument, match="ray.data.Dataset"):
        lamina.ray.write_table(rows(0, 10), uri)
    with pytest.raises(InvalidArgument, match="schema must be a pyarrow.Schema"):
        lamina.ray.write_table(ds, uri, schema="id int")
    assert not os.path.exists(uri)
    lamina.create_table(uri, SCHEMA)
    with pytest.raises(InvalidArgument, match="an append keeps the table's schema"):
        lamina.ray.write_table(ds, uri, schema=pa.schema([("id", pa.int64())]))
    assert _data_files(uri, None) == [] and lamina.open_table(uri).version == 1
