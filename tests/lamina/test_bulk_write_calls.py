"""What a bulk write of many small files costs per file besides the file itself (issue 18: 10,000 files of
ten rows in one append): no directory creation, stat or unlink per file, and not one task per file."""

import os

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina import _native, datafile
from lamina.errors import StorageError

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(start, start + n), pa.int64()), "name": [f"n{i}" for i in range(start, start + n)]}, schema=SCHEMA
    )


def test_a_bulk_write_makes_its_directory_once_and_checks_or_unlinks_no_published_file(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    data_dir = os.path.join(uri, "data")
    calls: dict[str, list[str]] = {"makedirs": [], "remove": [], "isfile": []}
    for module, name in ((os, "makedirs"), (os, "remove"), (os.path, "isfile")):
        real = getattr(module, name)

        def spy(path, *args, _real=real, _name=name, **kwargs):
            if str(path).startswith(data_dir):
                calls[_name].append(str(path))
            return _real(path, *args, **kwargs)

        monkeypatch.setattr(module, name, spy)
    t.append(rows(0, 400), max_rows_per_file=10)
    monkeypatch.undo()
    assert len(t.manifest.fragments) == 40
    assert calls["makedirs"] == [data_dir]  # once for the whole write, not once per file
    assert calls["remove"] == [] and calls["isfile"] == []  # a renamed temp file is neither stat'ed nor unlinked
    assert sorted(os.listdir(data_dir)) == sorted(f.path.split("/")[-1] for f in t.manifest.fragments)
    assert lamina.open_table(uri).to_arrow().sort_by("id").equals(rows(0, 400))


def test_local_data_files_are_written_in_place_without_a_rename(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    written: list[str] = []
    renamed: list[str] = []
    real_write, real_write_many, real_replace = _native.write_data_file, _native.write_data_files, os.replace

    def spy_write(path, *args, **kwargs):
        written.append(str(path))
        return real_write(path, *args, **kwargs)

    def spy_write_many(files, *args, **kwargs):
        written.extend(str(path) for path, _ in files)
        return real_write_many(files, *args, **kwargs)

    def spy_replace(src, dst, *args, **kwargs):
        if str(dst).startswith(os.path.join(uri, "data")):
            renamed.append(str(dst))
        return real_replace(src, dst, *args, **kwargs)

    monkeypatch.setattr(_native, "write_data_file", spy_write)
    monkeypatch.setattr(_native, "write_data_files", spy_write_many)
    monkeypatch.setattr(os, "replace", spy_replace)
    t.append(rows(0, 200), max_rows_per_file=10)  # a bulk write: synced together
    t.append(rows(200, 3))  # one file: synced on its own
    assert renamed == []
    assert sorted(written) == sorted(os.path.join(uri, *f.path.split("/")) for f in t.manifest.fragments)

    def failing_write(path, *args, **kwargs):  # the writer fails after creating its file
        open(path, "wb").close()
        raise StorageError("disk full")

    def failing_write_many(files, *args, **kwargs):  # fails after creating its files, leaving them
        for path, _ in files:
            open(path, "wb").close()
        raise StorageError("disk full")

    monkeypatch.setattr(_native, "write_data_file", failing_write)
    monkeypatch.setattr(_native, "write_data_files", failing_write_many)
    before = set(os.listdir(os.path.join(uri, "data")))
    with pytest.raises(StorageError, match="disk full"):
        t.append(rows(203, 50), max_rows_per_file=10)
    assert set(os.listdir(os.path.join(uri, "data"))) == before
    monkeypatch.undo()
    assert lamina.open_table(uri).to_arrow().sort_by("id").equals(rows(0, 203))


def test_small_files_are_written_many_per_task_in_order_and_a_failure_removes_them_all(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    submitted: list[int] = []
    real_submit = datafile.ThreadPoolExecutor.submit

    def counting_submit(self, fn, *args, **kwargs):
        if getattr(fn, "__module__", None) == "lamina.datafile":  # the write's tasks, not other pools'
            submitted.append(1)
        return real_submit(self, fn, *args, **kwargs)

    monkeypatch.setattr(datafile.ThreadPoolExecutor, "submit", counting_submit)
    t.append(rows(0, 10_000), max_rows_per_file=10)
    fragments = t.manifest.fragments
    assert len(fragments) == 1000
    assert len(submitted) <= 25  # groups of up to 64 files (growing 1, 2, 4, ...), not 1,000 tasks
    assert [f.zones[0].lo for f in fragments] == list(range(0, 10_000, 10))  # ids assigned in stream order
    assert lamina.open_table(uri).to_arrow().sort_by("id").equals(rows(0, 10_000))

    data_dir = os.path.join(uri, "data")
    kept = set(os.listdir(data_dir))
    seen = []
    real_write, real_write_many = _native.write_data_file, _native.write_data_files

    def failing_write(*args, **kwargs):
        seen.append(1)
        if len(seen) == 300:  # in the middle of a group, with other groups written and in flight
            raise StorageError("disk full")
        return real_write(*args, **kwargs)

    def failing_write_many(files, *args, **kwargs):
        if len(seen) < 300 <= len(seen) + len(files):  # the group holding the 300th file: its first ones written
            real_write_many(files[: 300 - len(seen) - 1], *args, **kwargs)
            seen.extend([1] * len(files))
            raise StorageError("disk full")
        seen.extend([1] * len(files))
        return real_write_many(files, *args, **kwargs)

    monkeypatch.setattr(_native, "write_data_file", failing_write)
    monkeypatch.setattr(_native, "write_data_files", failing_write_many)
    with pytest.raises(StorageError, match="disk full"):
        t.append(rows(10_000, 10_000), max_rows_per_file=10)
    assert set(os.listdir(data_dir)) == kept  # neither data files nor temp files are left
    assert lamina.open_table(uri).count_rows() == 10_000


@pytest.mark.parametrize(
    "files, rows_per_file, expected",
    [
        (1, 10, [1]),
        (10, 10, [1, 2, 4, 3]),
        (200, 10, [1, 2, 4, 8, 16, 32, 64, 64, 9]),
        (20, 1000, [1, 2, 4, 4, 4, 4, 1]),  # 4 files of 1,000 rows make GROUP_ROWS
        (5, 10_000, [1, 1, 1, 1, 1]),  # large files: one per task, as before
    ],
)
def test_groups_grow_to_a_bound_of_files_and_rows(files, rows_per_file, expected):
    chunks = iter([[pa.record_batch([pa.array([i])], names=["x"])] for i in range(files)])
    groups = list(datafile._grouped(chunks, rows_per_file))
    assert [len(g) for g in groups] == expected
    assert [c[0].column(0)[0].as_py() for g in groups for c in g] == list(range(files))


ZONED_TYPES = [
    pa.int8(),
    pa.uint64(),
    pa.float32(),
    pa.float64(),
    pa.bool_(),
    pa.string(),
    pa.large_string(),
    pa.binary(),
    pa.large_binary(),
    pa.timestamp("ms", tz="UTC"),
    pa.timestamp("s"),
    pa.date32(),
    pa.date64(),
    pa.list_(pa.int32()),
]


def _values(rng, t: pa.DataType, n: int) -> pa.Array:
    """``n`` values of ``t`` with nulls, and for floats NaN, ±inf and -0.0; strings around the zone's prefix length."""
    if pa.types.is_floating(t):
        pool = [float("nan"), float("inf"), -float("inf"), -0.0, 0.0, 1.5, -2.25, None]
        vals = [pool[i] for i in rng.integers(0, len(pool), n)]
    elif pa.types.is_boolean(t):
        vals = [[True, False, None][i] for i in rng.integers(0, 3, n)]
    elif pa.types.is_string(t) or pa.types.is_large_string(t):
        vals = [None if rng.random() < 0.2 else "ÿ" * int(rng.integers(0, 70)) + str(int(rng.integers(0, 9))) for _ in range(n)]
    elif pa.types.is_binary(t) or pa.types.is_large_binary(t):
        vals = [
            None if rng.random() < 0.2 else b"\xff" * int(rng.integers(60, 70)) + bytes([int(rng.integers(0, 256))])
            for _ in range(n)
        ]
    elif pa.types.is_list(t):
        vals = [[1, 2]] * n
    elif pa.types.is_unsigned_integer(t):
        vals = [None if rng.random() < 0.2 else int(rng.integers(0, 2**63)) * 2 for _ in range(n)]
    else:
        vals = [None if rng.random() < 0.2 else int(rng.integers(-100, 100)) for _ in range(n)]
        if pa.types.is_timestamp(t) or pa.types.is_date(t):
            return pa.array(vals, pa.int64() if t.bit_width == 64 else pa.int32()).cast(t)
    return pa.array(vals, t)


@pytest.mark.parametrize("seed", range(12))
def test_zones_of_many_files_equal_zones_of_each(seed):
    from lamina import zones

    rng = np.random.default_rng(seed)
    schema = pa.schema([(f"c{i}", t) for i, t in enumerate(ZONED_TYPES)])
    chunks = []
    for _ in range(int(rng.integers(2, 20))):
        sizes = [int(rng.integers(1, 12)) for _ in range(int(rng.integers(1, 3)))]
        if rng.random() < 0.1:
            sizes = [1]
        chunks.append([pa.record_batch([_values(rng, t, n) for t in ZONED_TYPES], schema=schema) for n in sizes])
    expected = [zones.zones_of(c, schema) for c in chunks]
    assert zones.zones_of_many(chunks, schema) == expected
    assert zones.zones_of_many(chunks[:1], schema) == expected[:1]
    empty = pa.record_batch([pa.array([], t) for t in ZONED_TYPES], schema=schema)
    assert zones.zones_of_many(chunks[:2] + [[empty]], schema) == expected[:2] + [zones.zones_of([empty], schema)]


def test_zones_of_many_falls_back_to_one_file_at_a_time_where_grouped_kernels_are_missing(monkeypatch):
    from lamina import zones

    schema = pa.schema([("id", pa.int64()), ("x", pa.float64())])
    chunks = [[pa.record_batch([pa.array([i, i + 1]), pa.array([float("nan"), i / 2])], schema=schema)] for i in range(5)]

    def missing(self, aggregations):
        raise pa.ArrowNotImplementedError("no grouped kernel")

    monkeypatch.setattr(pa.TableGroupBy, "aggregate", missing)
    assert zones.zones_of_many(chunks, schema) == [zones.zones_of(c, schema) for c in chunks]


def test_a_group_of_small_local_files_is_one_native_call(tmp_path, monkeypatch):
    calls: list[int] = []
    real_one, real_many = _native.write_data_file, _native.write_data_files
    monkeypatch.setattr(_native, "write_data_file", lambda *a, **k: (calls.append(1), real_one(*a, **k))[1])
    monkeypatch.setattr(
        _native, "write_data_files", lambda files, *a, **k: (calls.append(len(files)), real_many(files, *a, **k))[1]
    )
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 2000), max_rows_per_file=10)
    assert sum(calls) == 200 and len(calls) <= 12, calls  # groups of up to 64 files (1, 2, 4, ... first)
    assert lamina.open_table(str(tmp_path / "t")).to_arrow().sort_by("id").equals(rows(0, 2000))
