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
@pytest.mark.parametrize(
    "flt", ["id < 700", "id IN (3, 999, 1500, 1999) OR category = 'b'", "score > 0.5 AND id >= 1000", pc.field("score") < 0.25]
)
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


def test_a_write_to_a_dropped_tables_uri_creates_the_table_after_its_tombstone(ray_cluster, local_table_uri):
    import lamina.ray

    old = lamina.ray.write_table(_dataset(rows(0, 50), 2), local_table_uri)
    tomb = lamina.drop_table(local_table_uri).version
    t = lamina.ray.write_table(_dataset(rows(100, 30), 2), local_table_uri)
    assert t.manifest.table_uuid != old.manifest.table_uuid and t.version == tomb + 2  # create, then append
    assert sorted(t.to_arrow().column("id").to_pylist()) == list(range(100, 130))


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


def test_data_file_names_take_a_prefix_and_still_commit(table_location):
    """A write's files can be named with its prefix (how a Ray write finds all of its files); the names stay
    what the manifest expects of data files, so they commit and read back like any other."""
    import re

    from lamina.commit import commit
    from lamina.datafile import WriteOptions, data_file_path, write_fragment, write_fragments
    from lamina.transaction import Append

    uri, options = table_location
    store = open_store(uri, options)
    t = lamina.create_table(uri, SCHEMA, storage_options=options)
    prefix = "0123456789abcdef"
    # 10-row files: on a local disk both the one-file and the many-files-per-native-call paths.
    written = write_fragments(store, SCHEMA, rows(0, 200).to_batches(), WriteOptions(max_rows_per_file=10), name_prefix=prefix)
    written.append(write_fragment(store, SCHEMA, rows(200, 10).to_batches(), WriteOptions(), name_prefix="a1"))
    written += write_fragments(store, SCHEMA, rows(210, 10).to_batches(), WriteOptions())  # no prefix, as before
    names = [f.path for f in written]
    assert len(names) == len(set(names)) == 22
    assert all(re.fullmatch(r"data/[0-9a-f]{32}\.parquet", n) for n in names)
    assert all(n.startswith(f"{DATA_DIR}{prefix}") for n in names[:20]) and names[20].startswith(f"{DATA_DIR}a1")
    assert not names[21].startswith((f"{DATA_DIR}{prefix}", f"{DATA_DIR}a1"))
    assert sorted(o.path for o in store.list(f"{DATA_DIR}{prefix}")) == sorted(names[:20])
    commit(store, Append(t.version, written), t.manifest)
    reopened = lamina.open_table(uri, storage_options=options)  # the manifest read back and validated
    assert sorted(f.path for f in reopened.manifest.fragments) == sorted(names)
    assert _by_id(reopened.to_arrow()).equals(pa.concat_tables([rows(0, 200), rows(200, 10), rows(210, 10)]))

    assert re.fullmatch(r"data/[0-9a-f]{32}\.parquet", data_file_path())
    for bad in ("ABCDEF", "0123456789abcdef0", "xyz", "../a", "a/b", "0x1"):
        with pytest.raises(InvalidArgument, match="name_prefix"):
            write_fragments(store, SCHEMA, rows(0, 10).to_batches(), WriteOptions(), name_prefix=bad)
    assert _data_files(uri, options) == sorted(names)


def _cancelled_after_writing(real_write_fragments):
    """``write_fragments`` as a task cancelled right after it wrote its files, before it reported them,
    sees it: the files are on storage, and Ray's KeyboardInterrupt is raised instead of returning them."""

    def write_fragments(*args, **kwargs):
        real_write_fragments(*args, **kwargs)
        raise KeyboardInterrupt("cancelled by Ray after write_fragments wrote its files")

    return write_fragments


@pytest.mark.parametrize("existing", [True, False])
def test_a_failed_write_removes_the_files_of_a_task_cancelled_before_it_reported_them(
    ray_cluster, table_location, existing, monkeypatch
):
    """The race that left a file after a failed write on a loaded host, made deterministic: one task is
    cancelled between writing its file and telling the registry, another task reported its file."""
    import lamina.ray
    from lamina.ray import LaminaDatasink

    uri, options = table_location
    if existing:
        _table(uri, options, batches=1)
    files_before = _data_files(uri, options)
    sink = LaminaDatasink(uri, "append", schema=None if existing else SCHEMA, storage_options=options)
    try:
        reported = sink.write([rows(0, 100)], None)
        with monkeypatch.context() as m:
            m.setattr(lamina.ray, "write_fragments", _cancelled_after_writing(lamina.ray.write_fragments))
            with pytest.raises(KeyboardInterrupt):
                sink.write([rows(100, 100)], None)
        import ray

        assert ray.get(sink._files.paths.remote()) == [f.path for f in reported]  # the cancelled task's is not
        assert len(_data_files(uri, options)) == len(files_before) + 2
        sink.on_write_failed(RuntimeError("another task failed"))
        assert _data_files(uri, options) == files_before
    finally:
        sink.close()
    if existing:
        assert lamina.open_table(uri, storage_options=options).version == 2
    else:
        with pytest.raises(TableNotFound):
            lamina.open_table(uri, storage_options=options)


def _killed_after_writing(sink, block):
    """A write task whose process dies right after ``write_fragments`` wrote its file (never reports it, never ends)."""
    import lamina.ray

    real = lamina.ray.write_fragments

    def write_then_die(*args, **kwargs):
        real(*args, **kwargs)
        os._exit(1)  # this worker process only: it is gone with the patch

    lamina.ray.write_fragments = write_then_die
    return sink.write([block], None)


def test_a_failed_write_removes_the_files_of_a_task_killed_before_it_reported_them(ray_cluster, table_location, monkeypatch):
    import ray

    import lamina.ray
    from lamina.ray import LaminaDatasink

    uri, options = table_location
    _table(uri, options, batches=1)
    files_before = _data_files(uri, options)
    monkeypatch.setattr(lamina.ray, "TASK_WAIT_SECONDS", 120.0)  # a hang would be the bug, not a wait
    sink = LaminaDatasink(uri, "append", storage_options=options)
    try:
        task = ray.remote(num_cpus=0, max_retries=0)(_killed_after_writing).remote(sink, rows(0, 100))
        with pytest.raises(ray.exceptions.RayError):
            ray.get(task)
        assert ray.get(sink._files.paths.remote()) == []
        left = [p for p in _data_files(uri, options) if p not in files_before]
        assert len(left) == 1 and left[0].startswith(f"{DATA_DIR}{sink.write_id}")
        sink.on_write_failed(RuntimeError("the task's worker died"))  # waits until it sees the process is gone
        assert _data_files(uri, options) == files_before
    finally:
        sink.close()
    assert lamina.open_table(uri, storage_options=options).version == 2


def test_a_commit_removes_the_files_of_an_attempt_killed_before_it_reported_them(ray_cluster, table_location):
    """A task whose first attempt died after writing (its retry succeeded): the write commits the retry's
    files and removes the first attempt's, found by the write's prefix; files of other writes stay."""
    from ray.data.datasource.datasink import WriteResult

    from lamina.datafile import write_fragments
    from lamina.ray import LaminaDatasink

    uri, options = table_location
    _table(uri, options, batches=1)
    files_before = _data_files(uri, options)
    sink = LaminaDatasink(uri, "append", storage_options=options)
    store = open_store(uri, options)
    try:
        lost = write_fragments(store, SCHEMA, rows(0, 100).to_batches(), sink.options, name_prefix=sink.write_id)
        stranger = write_fragments(store, SCHEMA, rows(0, 100).to_batches(), sink.options)  # another writer's
        kept = sink.write([rows(0, 100)], None)
        sink.on_write_complete(WriteResult(100, 0, [kept]))
    finally:
        sink.close()
    t = lamina.open_table(uri, storage_options=options)
    assert t.version == 3 and t.count_rows() == 500
    assert _data_files(uri, options) == sorted(files_before + [f.path for f in kept + stranger])
    assert not {f.path for f in lost} & set(_data_files(uri, options))


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


# -- writes racing other writers and their own tasks --------------------------------
class _Events:
    """Named one-shot events shared by a test and its Ray tasks (an asyncio actor: waits do not block sets)."""

    def __init__(self) -> None:
        self._events: dict = {}

    def _event(self, name: str):
        import asyncio

        return self._events.setdefault(name, asyncio.Event())

    async def set(self, name: str) -> None:
        self._event(name).set()

    async def wait(self, name: str) -> None:
        await self._event(name).wait()


def _events():
    import ray

    return ray.remote(num_cpus=0)(_Events).remote()


def _hold(events, name: str) -> None:
    """Waits for ``name``, through cancellation: like a task busy in native code, it does not stop when Ray cancels it."""
    import ray

    while True:
        try:
            ray.get(events.wait.remote(name))
            return
        except (KeyboardInterrupt, ray.exceptions.TaskCancelledError):
            continue


def _creating_the_table(uri: str, options, schema: pa.Schema, theirs: pa.Table):
    """A pipeline step that has another writer create the table, with rows of its own, while the write runs
    (after the write found no table, before it commits: the write commits only after every task ended)."""
    from lamina.errors import TableExists

    def step(batch):
        try:
            other = lamina.create_table(uri, schema, storage_options=options)
        except TableExists:
            return batch
        other.append(theirs)
        return batch

    return step


@pytest.mark.parametrize("their_schema", ["same", "other"])
@pytest.mark.parametrize("mode", ["append", "overwrite"])
def test_a_table_created_during_the_write_is_written_as_the_mode_says(ray_cluster, table_location, mode, their_schema):
    import lamina.ray

    uri, options = table_location
    schema = SCHEMA if their_schema == "same" else pa.schema([("id", pa.int64()), ("name", pa.string())])
    theirs = rows(10_000, 300) if their_schema == "same" else pa.table({"id": [1, 2], "name": ["x", "y"]}, schema=schema)
    ours = rows(0, 1000)
    ds = _dataset(ours, 2).map_batches(_creating_the_table(uri, options, schema, theirs), batch_size=None, batch_format="pyarrow")
    if mode == "append" and their_schema == "other":  # an append keeps the table it found: ours cannot join it
        with pytest.raises(SchemaMismatch, match=f"table {uri} was created by another writer during this append"):
            lamina.ray.write_table(ds, uri, mode=mode, schema=SCHEMA, storage_options=options)
        t = lamina.open_table(uri, storage_options=options)
        assert [v.operation for v in t.versions()] == ["create", "append"]
        assert t.to_arrow().equals(theirs)
        assert _data_files(uri, options) == sorted(f.path for f in t.manifest.fragments)  # nothing of ours left
        return
    t = lamina.ray.write_table(ds, uri, mode=mode, schema=SCHEMA, storage_options=options)
    assert [v.operation for v in t.versions()] == ["create", "append", mode]
    assert t.manifest.record.operation == mode and t.schema.equals(SCHEMA)
    expected = ours if mode == "overwrite" else pa.concat_tables([theirs, ours])  # overwrite: exactly our rows
    assert _by_id(t.to_arrow()).equals(_by_id(expected))
    assert _by_id(lamina.open_table(uri, storage_options=options).to_arrow()).equals(_by_id(expected))


def test_two_overwrites_of_a_new_table_at_once_leave_exactly_one_of_them(ray_cluster, table_location):
    """Both jobs find no table before either commits (each waits in its pipeline for the other to have started);
    the loser of the create overwrites the winner's table, so each version holds one job's rows, never both."""
    from concurrent.futures import ThreadPoolExecutor

    import ray

    import lamina.ray

    uri, options = table_location
    events = _events()
    data = {"a": rows(0, 300), "b": rows(5000, 200)}

    def job(me: str, other: str) -> lamina.Table:
        def meet(batch):  # runs after write_table looked for the table: the sink is made before the pipeline runs
            ray.get(events.set.remote(me))
            ray.get(events.wait.remote(other))
            return batch

        ds = _dataset(data[me], 1).map_batches(meet, batch_size=None, batch_format="pyarrow", num_cpus=0.5)
        return lamina.ray.write_table(
            ds, uri, mode="overwrite", schema=SCHEMA, storage_options=options, ray_remote_args={"num_cpus": 0.5}
        )

    with ThreadPoolExecutor(2) as pool:
        done = [f.result() for f in [pool.submit(job, "a", "b"), pool.submit(job, "b", "a")]]
    t = lamina.open_table(uri, storage_options=options)
    assert [v.operation for v in t.versions()] == ["create", "overwrite", "overwrite"]
    second, third = (_by_id(t.checkout(v).to_arrow()) for v in (2, 3))
    assert {second.num_rows, third.num_rows} == {300, 200}
    assert any(second.equals(d) for d in data.values()) and any(third.equals(d) for d in data.values())
    assert _by_id(t.to_arrow()).equals(third)
    assert sorted(r.version for r in done) == [2, 3]


def _late_writer(sink, events, files_before: int):
    """A write task that has a data file on storage and is still running when the write fails."""
    import ray

    def blocks():
        yield rows(0, 100)  # one file's rows: written while the next block is awaited
        store = open_store(sink.uri, sink.storage_options)
        while len(list(store.list(DATA_DIR))) <= files_before:  # until that first file is on storage
            pass
        ray.get(events.set.remote("written"))
        _hold(events, "release")
        yield rows(100, 100)

    return sink.write(blocks(), None)


class _ReleaseOnLog:
    """A logging handler that sets an event when the Ray writer says it waits for tasks still running."""

    def __init__(self, events, name: str):
        import logging

        self.events, self.name = events, name
        self.handler = logging.Handler()
        self.handler.emit = self._emit

    def _emit(self, record) -> None:
        import ray

        if "still running" in record.getMessage():
            ray.get(self.events.set.remote(self.name))


@pytest.mark.parametrize("existing", [True, False])
def test_a_failed_write_returns_only_after_its_running_tasks_removed_their_files(ray_cluster, table_location, existing):
    """The failure protocol driven by hand, as Ray Data drives it: a task still writing when the write fails
    (one that outlives Ray's cancellation) has ended and its files are gone when the failure is handled."""
    import logging

    import ray

    from lamina.ray import LaminaDatasink

    uri, options = table_location
    if existing:
        _table(uri, options, batches=1)
    files_before = _data_files(uri, options)
    sink = LaminaDatasink(uri, "append", schema=None if existing else SCHEMA, storage_options=options, max_rows_per_file=100)
    events = _events()
    logger = logging.getLogger("lamina.ray")
    release = _ReleaseOnLog(events, "release")
    level = logger.level
    task = ray.remote(num_cpus=0, max_retries=0)(_late_writer).remote(sink, events, len(files_before))
    try:
        written = events.wait.remote("written")
        ray.wait([written, task], num_returns=1)
        assert ray.wait([written], timeout=0)[0], ray.get(task)  # else the task ended early: say why
        assert len(_data_files(uri, options)) == len(files_before) + 1
        logger.addHandler(release.handler)
        logger.setLevel(logging.INFO)
        sink.on_write_failed(RuntimeError("another task failed"))
        assert _data_files(uri, options) == files_before
        with pytest.raises(LaminaError, match=f"writing to table {uri}: the write was abandoned"):
            ray.get(task)
        assert _data_files(uri, options) == files_before
    finally:
        logger.removeHandler(release.handler)
        logger.setLevel(level)
        ray.get(events.set.remote("release"))
        sink.close()
    if existing:
        assert lamina.open_table(uri, storage_options=options).version == 2
    else:
        with pytest.raises(TableNotFound):
            lamina.open_table(uri, storage_options=options)


# -- evolved tables (docs/FORMAT.md §2.4) -------------------------------------------------------------
def _evolved_table(uri: str, options) -> lamina.Table:
    """Files of three schemas: ``category`` renamed to ``kind`` and its name used again, ``meta.a`` widened,
    ``score`` dropped and added again with a default."""
    t = _table(uri, options, batches=3, n=100)
    t.delete("id < 10")
    t.rename_column("category", "kind")
    t.add_columns(pa.field("category", pa.string()))
    t.alter_column("meta.a", pa.int64())
    t.drop_columns("score")
    t.add_columns(pa.field("score", pa.float64()), defaults={"score": -1.0})
    t.append(_in(t.schema, rows(1000, 50), category="new"))
    return t


def _in(schema: pa.Schema, data: pa.Table, **constants) -> pa.Table:
    """``data`` (helpers.SCHEMA's rows) as rows of the evolved table's ``schema``."""
    cols = {
        "id": data.column("id"),
        "kind": data.column("category"),
        "ts": data.column("ts"),
        "vec": data.column("vec"),
        "meta": data.column("meta").cast(pa.struct([("a", pa.int64()), ("b", pa.string())])),
        "category": pa.array([constants.get("category")] * data.num_rows, pa.string()),
        "score": data.column("score"),
    }
    return pa.table({f.name: cols[f.name] for f in schema})


def test_reads_of_an_evolved_table_see_todays_schema(ray_cluster, table_location):
    import lamina.ray

    uri, options = table_location
    t = _evolved_table(uri, options)
    assert _by_id(_arrow(lamina.ray.read_table(uri, storage_options=options))).equals(_by_id(t.to_arrow()))
    for flt in ["category IS NULL", "category = 'a'", "kind = 'a' AND score = -1.0", "meta.a > 50", "score > 0"]:
        got = _arrow(lamina.ray.read_table(uri, columns=["id", "category", "score"], filter=flt, storage_options=options))
        want = t.to_arrow(columns=["id", "category", "score"], filter=flt)
        assert (got is None and want.num_rows == 0) or _by_id(got).equals(_by_id(want)), flt
    assert t.count_rows("category = 'a'") == 0 and t.count_rows("score = -1.0") == 290


def test_writes_to_an_evolved_table_are_in_todays_schema(ray_cluster, local_table_uri):
    import lamina.ray

    t = _evolved_table(local_table_uri, None)
    new = _in(t.schema, rows(2000, 40), category="ray")
    done = lamina.ray.write_table(_dataset(new, 2), local_table_uri, mode="append")
    assert done.count_rows("category = 'ray'") == 40 and done.count_rows() == 290 + 50 + 40
    assert {f.schema_id for f in done.manifest.fragments if f.rows == 20} == {done.manifest.schema_id}
    # schema= naming today's columns and types is today's schema, field ids and all
    plain = pa.schema([(f.name, f.type) for f in t.schema])
    done = lamina.ray.write_table(_dataset(new.cast(plain), 1), local_table_uri, mode="append", schema=plain)
    assert done.count_rows("category = 'ray'") == 80
    with pytest.raises(SchemaMismatch, match="missing column"):  # rows in an earlier schema: refused, nothing written
        lamina.ray.write_table(_dataset(rows(3000, 10), 1), local_table_uri, mode="append")
    assert lamina.open_table(local_table_uri).version == done.version


def test_an_append_racing_a_schema_change_lands_in_the_schema_it_was_written_in(ray_cluster, table_location):
    """The write reads the table's schema when it starts; a column added while its tasks run does not stop
    it: its files are read through the schema they were written in (the new column null on its rows)."""
    import lamina.ray

    uri, options = table_location
    t = _table(uri, options, batches=2, n=100)

    def step(batch):
        other = lamina.open_table(uri, storage_options=options)
        if "extra" not in other.schema.names:
            other.add_columns(pa.field("extra", pa.int32()))
        return batch

    ds = _dataset(rows(1000, 60), 1).map_batches(step, batch_size=None, batch_format="pyarrow")
    done = lamina.ray.write_table(ds, uri, mode="append", storage_options=options)
    assert done.schema.names == [*SCHEMA.names, "extra"] and done.manifest.record.operation == "append"
    got = done.to_arrow(filter="id >= 1000")
    assert _by_id(got.drop_columns(["extra"])).equals(rows(1000, 60)) and got.column("extra").null_count == 60
    assert {f.schema_id for f in done.manifest.fragments} == {0}, "every file in the schema it was written in"
    assert done.count_rows() == 260 and t.reload().count_rows("extra IS NULL") == 260
