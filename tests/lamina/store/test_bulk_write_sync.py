"""A bulk write to a local disk makes its files durable once, at the end, before anything is committed
(issue 18 item 3: one fsync per small file was most of a 10,000-file append); S3 writes are unchanged."""

import os

import pyarrow as pa
import pytest

import lamina
from lamina import _native
from lamina.errors import StorageError
from lamina.store import LocalStore
from lamina.store import local as local_store

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def rows(start: int, n: int) -> pa.Table:
    return pa.table(
        {"id": pa.array(range(start, start + n), pa.int64()), "name": [f"n{i}" for i in range(start, start + n)]}, schema=SCHEMA
    )


@pytest.fixture
def native_writes(monkeypatch):
    """The ``sync`` argument of every native data-file write (one per file, several files in one call too)."""
    seen: list[bool] = []
    real, real_many = _native.write_data_file, _native.write_data_files

    def spy(*args, **kwargs):
        seen.append(kwargs.get("sync", True))
        return real(*args, **kwargs)

    def spy_many(files, *args, **kwargs):
        seen.extend([kwargs.get("sync", True)] * len(files))
        return real_many(files, *args, **kwargs)

    monkeypatch.setattr(_native, "write_data_file", spy)
    monkeypatch.setattr(_native, "write_data_files", spy_many)
    return seen


def test_a_bulk_write_syncs_its_files_once_before_the_commit(tmp_path, monkeypatch, native_writes):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    before = t.version
    calls: list[list[str]] = []
    real = LocalStore.sync_objects

    def sync_objects(self, paths):
        assert all(os.path.isfile(os.path.join(uri, p)) for p in paths)  # written, at their final names
        assert lamina.open_table(uri).version == before  # nothing committed refers to them yet
        calls.append(list(paths))
        real(self, paths)

    monkeypatch.setattr(LocalStore, "sync_objects", sync_objects)
    t.append(rows(0, 300), max_rows_per_file=10)
    assert len(calls) == 1 and sorted(calls[0]) == sorted(f.path for f in t.manifest.fragments)
    assert len(calls[0]) == 30 and native_writes == [False] * 30  # no file synced on its own
    assert lamina.open_table(uri).to_arrow().sort_by("id").equals(rows(0, 300))


def test_a_failed_sync_commits_nothing_and_removes_the_files(tmp_path, monkeypatch):
    uri = str(tmp_path / "t")
    t = lamina.create_table(uri, SCHEMA)
    t.append(rows(0, 5))
    kept = set(os.listdir(os.path.join(uri, "data")))

    def failing(self, paths):
        raise StorageError("disk gone")

    monkeypatch.setattr(LocalStore, "sync_objects", failing)
    with pytest.raises(StorageError, match="disk gone"):
        t.append(rows(5, 100), max_rows_per_file=10)
    assert set(os.listdir(os.path.join(uri, "data"))) == kept
    assert lamina.open_table(uri).count_rows() == 5


def test_sync_objects_uses_one_syncfs_for_many_files_and_an_fsync_each_for_few(tmp_path, monkeypatch):
    store = LocalStore(str(tmp_path))
    os.makedirs(tmp_path / "data")
    paths = [f"data/{i}.parquet" for i in range(local_store.SYNCFS_MIN_FILES)]
    for p in paths:
        (tmp_path / p).write_bytes(b"x")
    fsynced: list[str] = []
    syncfs: list[str] = []
    real_fsync, real_syncfs = local_store._fsync_file, local_store._syncfs
    monkeypatch.setattr(local_store, "_fsync_file", lambda path, where: (fsynced.append(path), real_fsync(path, where)))

    def counting_syncfs(directory):
        syncfs.append(directory)
        return real_syncfs(directory)

    monkeypatch.setattr(local_store, "_syncfs", counting_syncfs)
    store.sync_objects(paths[:3])
    assert (len(fsynced), syncfs) == (3, [])
    fsynced.clear()
    store.sync_objects(paths)
    assert syncfs == [str(tmp_path)]
    assert len(fsynced) == (0 if real_syncfs(str(tmp_path)) else len(paths))
    fsynced.clear()
    monkeypatch.setattr(local_store, "_syncfs", lambda directory: False)  # unavailable or failed: an fsync each
    store.sync_objects(paths)
    assert len(fsynced) == len(paths)
    fsynced.clear()
    store.sync_objects(["data/gone.parquet"])  # removed by a cleanup racing the write: nothing to sync
    assert fsynced == [str(tmp_path / "data" / "gone.parquet")]
    monkeypatch.setattr(local_store.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError(5, "I/O error")))
    with pytest.raises(StorageError, match="data/0.parquet"):
        store.sync_objects(paths[:1])


def test_s3_and_single_file_writes_sync_each_file(s3_table_uri, s3_options, tmp_path, monkeypatch, native_writes):
    monkeypatch.setattr(LocalStore, "sync_objects", lambda self, paths: pytest.fail("S3 writes never batch"))
    t = lamina.create_table(s3_table_uri, SCHEMA, storage_options=s3_options)
    t.append(rows(0, 50), max_rows_per_file=10)
    assert native_writes == [True] * 5
    from lamina.datafile import WriteOptions, write_fragment

    native_writes.clear()
    write_fragment(LocalStore(str(tmp_path)), SCHEMA, rows(0, 3).to_batches(), WriteOptions())
    assert native_writes == [True]


def test_every_new_local_file_has_its_directory_entry_synced_before_a_commit_names_it(tmp_path, monkeypatch):
    """A file fsynced in a directory that is not can vanish at a power loss while the version naming it
    survives: whatever writes a local file (a one-file append, a bulk write of a few or many files, a
    compaction output or index segment renamed into place), its directory is fsynced before it returns."""
    dirs: list[str] = []
    real = local_store._fsync_dir
    monkeypatch.setattr(local_store, "_fsync_dir", lambda d: (dirs.append(os.path.relpath(d, tmp_path)), real(d)))
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    for n in (1, 3, local_store.SYNCFS_MIN_FILES + 2):  # one file, a few, many
        dirs.clear()
        t.append(rows(0, n), max_rows_per_file=1)
        data_syncs = dirs.count(os.path.join("t", "data"))
        assert data_syncs >= 1 and dirs.index(os.path.join("t", "data")) < dirs.index(os.path.join("t", "_versions")), dirs
    store = LocalStore(str(tmp_path / "t"))
    dirs.clear()
    with store.staged_output("data/renamed.parquet") as local:
        with open(local, "wb") as f:
            f.write(b"x")
    assert dirs == [os.path.join("t", "data")]
    dirs.clear()
    with store.deferring_sync().staged_new_output("data/deferred.parquet") as local:
        with open(local, "wb") as f:
            f.write(b"x")
    assert dirs == []  # its writer syncs the files and their directories together (sync_objects)
