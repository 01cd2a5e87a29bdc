"""cleanup() behaviours that survived mutation testing (docs/RELIABILITY.md, "Mutation testing")."""

from __future__ import annotations

import datetime as dt
import math
import os
import time

import pytest

import lamina
from lamina.cleanup import CleanupStats, cleanup
from lamina.errors import InvalidArgument, VersionNotFound
from lamina.store import open_store
from tests.lamina.helpers import SCHEMA, HookedStore, ids_of, rows


def _backdate(uri, rel, seconds):
    then = time.time() - seconds
    os.utime(os.path.join(uri, rel), (then, then))


def _table_with_stale_and_fresh_orphans(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    t.store.put("data/three-hours.parquet", b"x" * 30)
    t.store.put("_deletions/four-hours.bin", b"z" * 7)
    t.store.put("data/one-hour.parquet", b"y" * 10)
    _backdate(uri, "data/three-hours.parquet", 3 * 3600)
    _backdate(uri, "_deletions/four-hours.bin", 4 * 3600)
    _backdate(uri, "data/one-hour.parquet", 3600)
    return t


@pytest.mark.parametrize("older_than", [
    dt.timedelta(hours=2),
    7200,
    7200.0,
    dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2),
    dt.datetime.now(dt.timezone(dt.timedelta(hours=9))) - dt.timedelta(hours=2),
], ids=["timedelta", "int", "float", "utc-datetime", "tz-datetime"])
def test_every_form_of_older_than_means_the_same_cutoff(local_table_uri, older_than):
    t = _table_with_stale_and_fresh_orphans(local_table_uri)
    stats = t.cleanup(older_than=older_than)
    assert stats == CleanupStats(versions_removed=0, files_removed=2, bytes_removed=37, kept_versions=2)
    assert not t.store.exists("data/three-hours.parquet") and not t.store.exists("_deletions/four-hours.bin")
    assert t.store.exists("data/one-hour.parquet")


def test_naive_datetime_is_utc(local_table_uri, monkeypatch):
    t = _table_with_stale_and_fresh_orphans(local_table_uri)
    monkeypatch.setenv("TZ", "Asia/Tokyo")  # +9 h: read as local time, the cutoff would be 9 h earlier
    time.tzset()
    try:
        naive = dt.datetime.now(dt.timezone.utc).replace(tzinfo=None) - dt.timedelta(hours=2)
        assert t.cleanup(older_than=naive).files_removed == 2
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert not t.store.exists("data/three-hours.parquet") and t.store.exists("data/one-hour.parquet")


@pytest.mark.parametrize("older_than,message", [
    (True, "older_than must be a timedelta, a datetime or seconds, not bool"),
    ("7d", "older_than must be a timedelta, a datetime or seconds, not str"),
    (math.nan, r"older_than must not be negative or in the future \(nan s\)"),
    (-5, r"older_than must not be negative or in the future \(-5.0 s\)"),
])
def test_meaningless_retentions_are_refused_before_anything_is_removed(local_table_uri, older_than, message):
    t = _table_with_stale_and_fresh_orphans(local_table_uri)
    with pytest.raises(InvalidArgument, match=message):
        t.cleanup(older_than=older_than, enforce_retention=False)
    assert t.store.exists("data/three-hours.parquet")


def test_short_retention_error_names_the_table_the_retention_and_the_floor(local_table_uri):
    t = _table_with_stale_and_fresh_orphans(local_table_uri)
    with pytest.raises(InvalidArgument, match=(
        rf"cleanup of {t.store.uri} with older_than=300 s is below the 1:00:00 safety floor: a write in progress "
        r"or a reader of a recent version could lose its files\. Use a retention longer than your longest write, or "
        r"pass enforce_retention=False if nothing reads or writes the table meanwhile"
    )):
        t.cleanup(older_than=300)


def test_cleanup_reports_what_it_removed_and_kept(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 50))
    t.overwrite(rows(100, 10))  # the data file of version 2 is unreferenced from now on
    old = [o for o in t.store.list("data/") if o.path not in t.manifest.referenced_paths()]
    assert len(old) == 1
    stats = t.cleanup(older_than=0, enforce_retention=False)
    assert stats == CleanupStats(versions_removed=2, files_removed=1, bytes_removed=old[0].size, kept_versions=1)


def test_stale_temp_files_of_interrupted_manifest_writes_are_removed(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    for name, size in ((".tmp-stale", 16), (".tmp-stale-2", 5), (".tmp-fresh", 3), ("notes-stale.txt", 8)):
        t.store.put(f"_versions/{name}", b"m" * size)
    for name in (".tmp-stale", ".tmp-stale-2", "notes-stale.txt"):
        _backdate(local_table_uri, f"_versions/{name}", 3 * 3600)
    stats = t.cleanup(older_than=dt.timedelta(hours=2))
    assert stats.files_removed == 2 and stats.bytes_removed == 21
    assert not t.store.exists("_versions/.tmp-stale") and not t.store.exists("_versions/.tmp-stale-2")
    assert t.store.exists("_versions/.tmp-fresh") and t.store.exists("_versions/notes-stale.txt")
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))


def test_removed_versions_are_gone_for_this_process_too(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    t.append(rows(10, 10))
    assert ids_of(t.checkout(2)) == list(range(10))  # version 2 is now in this process's cache
    t.cleanup(older_than=0, enforce_retention=False)
    with pytest.raises(VersionNotFound):
        t.checkout(2)
    assert [v.version for v in t.versions()] == [3]


def test_cleanup_of_a_location_without_versions_does_nothing(tmp_path):
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "stray.parquet").write_bytes(b"not a table's")
    store = open_store(str(tmp_path))
    assert cleanup(store, 0, enforce_retention=False) == CleanupStats(0, 0, 0, 0)
    assert (tmp_path / "data" / "stray.parquet").exists()


def test_cleanup_called_directly_refuses_short_retentions_too(local_table_uri):
    t = _table_with_stale_and_fresh_orphans(local_table_uri)
    with pytest.raises(InvalidArgument, match="safety floor"):
        cleanup(t.store, 0)
    assert t.store.exists("data/three-hours.parquet")


def test_cleanup_reads_only_the_latest_manifest_when_this_process_has_the_others(local_table_uri):
    """One GET per cleanup, not one per version (history can be thousands of versions on S3)."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in range(0, 40, 10):
        t.append(rows(start, 10))  # versions 1..5, each cached by the process that wrote it
    store = HookedStore(t.store)
    stats = cleanup(store, dt.timedelta(hours=2))
    assert stats.versions_removed == 0 and stats.kept_versions == 5
    assert store.paths("get", "_versions/") == ["_versions/00000000000000000005.manifest"]
