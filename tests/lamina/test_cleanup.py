"""cleanup(): removes expired versions and unreferenced files, never what the latest version needs."""

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


def _age_files(uri, seconds):
    """Backdates every data and deletion file of a local table, as if written ``seconds`` ago."""
    then = time.time() - seconds
    for sub in ("data", "_deletions"):
        d = os.path.join(uri, sub)
        for name in os.listdir(d) if os.path.isdir(d) else []:
            os.utime(os.path.join(d, name), (then, then))


def test_version_that_was_latest_moments_ago_keeps_its_files(local_table_uri, monkeypatch):
    import lamina.transaction

    eight_days_ms = 8 * 86400 * 1000
    real_now = lamina.transaction.now_ms
    monkeypatch.setattr(lamina.transaction, "now_ms", lambda: real_now() - eight_days_ms)
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 50))  # version 2, committed "eight days ago"
    reader = lamina.open_table(local_table_uri)  # a reader that opened the latest version
    monkeypatch.setattr(lamina.transaction, "now_ms", real_now)
    _age_files(local_table_uri, 8 * 86400)
    t.overwrite(rows(100, 10))  # version 3, now: version 2 stopped being the latest just now
    stats = t.cleanup(older_than=dt.timedelta(days=7))
    assert stats.versions_removed == 1, "only version 1 (superseded eight days ago) has expired"
    assert [v.version for v in t.versions()] == [2, 3]
    assert ids_of(reader) == list(range(50)), "the reader of version 2 still reads all its rows"
    assert ids_of(t.checkout(2)) == list(range(50))


def test_short_retention_is_refused_unless_the_caller_owns_the_risk(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    for short in (0, 59 * 60, dt.timedelta(minutes=5)):
        with pytest.raises(InvalidArgument, match="safety floor"):
            t.cleanup(older_than=short)
    assert [v.version for v in t.versions()] == [1, 2]
    with pytest.raises(InvalidArgument):
        t.cleanup(older_than=dt.datetime.now(dt.timezone.utc) + dt.timedelta(hours=1), enforce_retention=False)
    assert t.cleanup(older_than=0, enforce_retention=False).versions_removed == 1


def test_compaction_whose_base_lost_a_deletion_file_conflicts_cleanly(local_table_uri):
    import lamina.deletion
    from lamina.commit import commit
    from lamina.datafile import WriteOptions
    from lamina.errors import CommitConflict
    from lamina.rewrite import full_rewrite
    from lamina.transaction import Rewrite

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 20))
    t.append(rows(20, 20))
    t.delete("id < 5")
    base = t.manifest
    read_deletions = [f.deletion.path for f in base.fragments if f.deletion]
    group = full_rewrite(t.store, base, [f.id for f in base.fragments], WriteOptions())
    t.delete("id < 10")  # a concurrent delete the rewrite must carry onto its output...
    t.store.delete(read_deletions)  # ...but cleanup removed the deletion file the rewrite read
    lamina.deletion._CACHE.clear()  # the committing process never read it
    with pytest.raises(CommitConflict, match="needs a file that is gone"):
        commit(t.store, Rewrite(base.version, [group]), base)
    assert not any(t.store.exists(f.path) for f in group.new_fragments), "the abandoned outputs are removed"
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10, 40))


def test_long_write_whose_files_were_cleaned_up_does_not_commit(local_table_uri, monkeypatch):
    import lamina.commit
    from lamina.errors import CommitConflict

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    monkeypatch.setattr(lamina.commit, "VERIFY_FILES_AFTER_SECONDS", -1)  # every write counts as long
    removed = []
    # The check runs before the put: simulate cleanup removing the file between write and commit.
    import lamina.datafile

    real_write = lamina.datafile.write_fragment

    def write_then_lose(store, schema, batches, options, **kwargs):
        frag = real_write(store, schema, batches, options, **kwargs)
        store.delete([frag.path])
        removed.append(frag.path)
        return frag

    monkeypatch.setattr(lamina.datafile, "write_fragment", write_then_lose)
    with pytest.raises(CommitConflict, match="files it wrote are gone"):
        t.append(rows(10, 10))
    assert removed and lamina.open_table(local_table_uri).version == 2
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))


def _commit_during_cleanup(inner, commit_now) -> HookedStore:
    """A store through which cleanup runs; right after cleanup first lists the versions, another
    writer commits (files written long ago, e.g. a slow compaction's outputs)."""

    def listed_then_commit(real, prefix, start_after=None):
        listed = list(real(prefix, start_after))
        commit_now()
        return iter(listed)

    return HookedStore(inner).on("list", path="_versions/", times=1, instead=listed_then_commit)


def test_version_committed_while_cleanup_runs_keeps_its_files(local_table_uri):
    from lamina.cleanup import cleanup
    from lamina.datafile import write_fragments
    from lamina.transaction import Append

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    t.append(rows(10, 10))
    slow = lamina.open_table(local_table_uri)
    frags = write_fragments(t.store, SCHEMA, rows(100, 10).to_batches(), t.write_options)
    _age_files(local_table_uri, 7200)  # the slow writer's file is two hours old when it commits
    store = _commit_during_cleanup(t.store, lambda: slow.commit_transaction(Append(slow.version, frags)))
    cleanup(store, dt.timedelta(hours=1))
    assert store.fired
    latest = lamina.open_table(local_table_uri)
    assert latest.version == 4 and t.store.exists(frags[0].path)
    assert ids_of(latest) == list(range(20)) + list(range(100, 110))


def _crash_after_first_manifest_removal(real, paths):
    paths = list(paths)
    if any(p.startswith("_versions/") for p in paths):
        real(paths[:1])
        raise KeyboardInterrupt("cleanup killed")
    real(paths)


def test_crash_mid_cleanup_leaves_contiguous_history(local_table_uri):
    from lamina.cleanup import cleanup

    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in range(0, 50, 10):
        t.append(rows(start, 10))  # versions 1..6
    with pytest.raises(KeyboardInterrupt):
        cleanup(HookedStore(t.store).on("delete", instead=_crash_after_first_manifest_removal), 0, enforce_retention=False)
    versions = [v.version for v in lamina.open_table(local_table_uri).versions()]
    assert versions == list(range(versions[0], 7)) and versions[0] == 2, versions
    for v in versions:
        assert ids_of(lamina.open_table(local_table_uri, version=v)) == list(range(10 * (v - 1)))


def test_write_that_began_long_before_its_transaction_was_built_rechecks_its_files(local_table_uri):
    """The age that matters is the oldest file's, not the transaction object's: a compaction job
    builds its Rewrite only at commit time, after hours of writing."""
    import dataclasses

    from lamina.datafile import write_fragments
    from lamina.errors import CommitConflict
    from lamina.transaction import Append

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 10))
    frags = write_fragments(t.store, SCHEMA, rows(10, 10).to_batches(), t.write_options)
    assert frags[0].written_at is not None and frags[0].written_at <= time.time()
    an_hour_ago = [dataclasses.replace(f, written_at=time.time() - 3600) for f in frags]
    t.store.delete([frags[0].path])  # cleanup with a retention shorter than this write removed it
    with pytest.raises(CommitConflict, match="files it wrote are gone"):
        t.commit_transaction(Append(t.version, an_hour_ago))
    assert lamina.open_table(local_table_uri).version == 2


def test_compaction_outputs_carry_when_their_writing_began(local_table_uri):
    from lamina.datafile import WriteOptions
    from lamina.planner import CompactionOptions, plan_compaction
    from lamina.workers.compaction import GroupCompactor, GroupTask

    t = lamina.create_table(local_table_uri, SCHEMA)
    for start in range(0, 200, 100):
        t.append(rows(start, 100))
    options = CompactionOptions(target_rows_per_fragment=1000)
    g = plan_compaction(t.manifest, options, t.uri).groups[0]
    frags = t.manifest.fragment_map()
    before = time.time()
    result = GroupCompactor().run(
        GroupTask(local_table_uri, None, g, tuple(frags[i] for i in g.fragment_ids), t.schema, WriteOptions(), options, False, ())
    )
    assert result.ok and before <= result.fragments[0].written_at <= time.time()


# -- retention arguments, what cleanup reports, stale temp files -----------------------------------


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


@pytest.mark.parametrize(
    "older_than",
    [
        dt.timedelta(hours=2),
        7200,
        7200.0,
        dt.datetime.now(dt.timezone.utc) - dt.timedelta(hours=2),
        dt.datetime.now(dt.timezone(dt.timedelta(hours=9))) - dt.timedelta(hours=2),
    ],
    ids=["timedelta", "int", "float", "utc-datetime", "tz-datetime"],
)
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


@pytest.mark.parametrize(
    "older_than,message",
    [
        (True, "older_than must be a timedelta, a datetime or seconds, not bool"),
        ("7d", "older_than must be a timedelta, a datetime or seconds, not str"),
        (math.nan, r"older_than must not be negative or in the future \(nan s\)"),
        (-5, r"older_than must not be negative or in the future \(-5.0 s\)"),
    ],
)
def test_meaningless_retentions_are_refused_before_anything_is_removed(local_table_uri, older_than, message):
    t = _table_with_stale_and_fresh_orphans(local_table_uri)
    with pytest.raises(InvalidArgument, match=message):
        t.cleanup(older_than=older_than, enforce_retention=False)
    assert t.store.exists("data/three-hours.parquet")


def test_short_retention_error_names_the_table_the_retention_and_the_floor(local_table_uri):
    t = _table_with_stale_and_fresh_orphans(local_table_uri)
    with pytest.raises(
        InvalidArgument,
        match=(
            rf"cleanup of {t.store.uri} with older_than=300 s is below the 1:00:00 safety floor: a write in progress "
            r"or a reader of a recent version could lose its files\. Use a retention longer than your longest write, or "
            r"pass enforce_retention=False if nothing reads or writes the table meanwhile"
        ),
    ):
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
