"""cleanup(): removes expired versions and unreferenced files, never what the latest version needs."""

from __future__ import annotations

import datetime as dt
import os
import time

import pytest

import lamina
from lamina.errors import InvalidArgument, VersionNotFound
from tests.lamina.helpers import SCHEMA, ids_of, rows


def _referenced(t):
    return t.manifest.referenced_paths()


def test_cleanup_removes_expired_versions_and_their_files(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 100))
    t.append(rows(100, 100))
    t.delete("id < 10")
    t.overwrite(rows(500, 50))  # everything before is now unreferenced by the latest version
    t.delete("id = 500")
    old_files = {o.path for o in t.store.list("data/")} - _referenced(t)
    assert len(old_files) == 2
    t.store.put("data/orphan-from-a-crashed-writer.parquet", b"partial")
    stats = t.cleanup(older_than=0, enforce_retention=False)
    assert stats.versions_removed == 5 and stats.kept_versions == 1
    assert [v.version for v in t.versions()] == [6]
    remaining = {o.path for o in t.store.list("data/")} | {o.path for o in t.store.list("_deletions/")}
    assert remaining == _referenced(t)
    assert ids_of(lamina.open_table(uri, storage_options=opts)) == list(range(501, 550))
    with pytest.raises(VersionNotFound):
        lamina.open_table(uri, version=2, storage_options=opts)


def test_recent_unreferenced_files_are_kept(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    t.store.put("data/in-flight.parquet", b"a writer has not committed yet")
    t.store.put("data/stale.parquet", b"left by a writer that died long ago")
    two_hours_ago = time.time() - 7200
    os.utime(os.path.join(local_table_uri, "data", "stale.parquet"), (two_hours_ago, two_hours_ago))
    stats = t.cleanup(older_than=dt.timedelta(hours=1))
    assert stats.versions_removed == 0 and stats.files_removed == 1
    assert t.store.exists("data/in-flight.parquet") and not t.store.exists("data/stale.parquet")
    assert [v.version for v in t.versions()] == [1, 2]


def test_cleanup_keeps_latest_even_if_old(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    t.cleanup(older_than=0, enforce_retention=False)
    t.cleanup(older_than=0, enforce_retention=False)
    assert [v.version for v in t.versions()] == [2]
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))
    t.append(rows(10, 5))  # the table keeps working after cleanup
    assert lamina.open_table(local_table_uri).count_rows() == 15


def test_bad_cutoff(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    with pytest.raises(InvalidArgument):
        t.cleanup(older_than="yesterday")
    with pytest.raises(InvalidArgument):
        t.cleanup(older_than=-1)


def test_writer_older_than_cleaned_history_gets_a_conflict_not_a_stale_commit(local_table_uri):
    from lamina.errors import CommitConflict

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    slow = t.checkout(t.version)  # a writer that read version 2 and is still working
    for start in range(10, 50, 10):
        t.append(rows(start, 10))  # versions 3..6
    t.cleanup(older_than=0, enforce_retention=False)  # removes versions 1..5, keeps 6
    with pytest.raises(CommitConflict, match="cleaned up"):
        slow.append(rows(1000, 10))
    assert [v.version for v in t.versions()] == [6], "no manifest was written into the removed history"
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(50))
