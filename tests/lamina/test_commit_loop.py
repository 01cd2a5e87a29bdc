"""The commit loop at its edges: which writes look for their files again before the put, a failed put
that cannot be read back, a version that lands while a writer catches up, a table recreated under a stale
writer, a writer several versions behind or behind cleaned history, and one that keeps losing the race.

Each case pins a behaviour that once survived mutation testing (docs/RELIABILITY.md, "Mutation testing").
"""

from __future__ import annotations

import pytest

import lamina
from lamina.errors import CommitConflict, CommitStateUnknown, ObjectNotFound, StorageError, TableReplaced
from lamina.manifest import forget_manifest, list_versions, manifest_path
from lamina.table import Table
from tests.lamina.helpers import SCHEMA, HookedStore, ids_of, rows


def _table(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    return t


def test_short_write_commits_without_checking_its_files_again(local_table_uri):
    """Only writes older than VERIFY_FILES_AFTER_SECONDS look for their files (one HEAD each on S3)."""
    t = _table(local_table_uri)
    store = HookedStore(t.store)
    assert Table(store, t.manifest).append(rows(10, 10)) == 3
    assert not store.paths("exists", "data/")


def test_long_write_whose_files_are_gone_says_how_long_it_ran(local_table_uri, monkeypatch):
    import lamina.commit
    import lamina.datafile

    t = _table(local_table_uri)
    monkeypatch.setattr(lamina.commit, "VERIFY_FILES_AFTER_SECONDS", -1)  # every write counts as long
    real_write = lamina.datafile.write_fragment

    def write_then_lose(store, schema, batches, options, **kwargs):
        frag = real_write(store, schema, batches, options, **kwargs)
        store.delete([frag.path])
        return frag

    monkeypatch.setattr(lamina.datafile, "write_fragment", write_then_lose)
    with pytest.raises(CommitConflict, match=r"ran for \d s and 1 of the files it wrote are gone \(e\.g\. data/"):
        t.append(rows(10, 10))


def test_failed_put_that_cannot_be_read_back_is_reported_as_unknown(local_table_uri):
    """Neither success nor a plain failure: the caller is told which version to check for which transaction."""
    t = _table(local_table_uri)
    failed: list[str] = []  # once the put failed, reads of manifests fail too
    store = (
        HookedStore(t.store)
        .on(
            "put_if_absent",
            prefix="_versions/",
            before=lambda: failed.append("put"),
            fail=lambda path: StorageError(f"connection reset while writing {path}"),
        )
        .on(
            "get",
            prefix="_versions/",
            when=lambda path: bool(failed),
            fail=lambda path: StorageError(f"connection reset while reading {path}"),
        )
    )
    mine = Table(store, t.manifest)
    with pytest.raises(
        CommitStateUnknown,
        match=(
            rf"append on table {t.store.uri}: writing version 3 failed \(connection reset while writing _versions/.*\) "
            r"and it cannot be read back \(connection reset while reading _versions/.*\); reload the table and check "
            r"whether version 3 holds transaction [0-9a-f]{32} before retrying"
        ),
    ):
        mine.append(rows(10, 10))
    assert list_versions(t.store) == [1, 2]
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))


def test_version_that_lands_while_catching_up_is_replayed_not_taken_for_cleaned_history(local_table_uri):
    t = _table(local_table_uri)  # versions 1 (create) and 2
    # Version 3 is still being written when this reader first asks for it (not found), and is there by the
    # time it lists the versions.
    stale = Table(
        HookedStore(t.store).on(
            "get", path=manifest_path(3), times=1, fail=lambda path: ObjectNotFound(f"{path} (not written yet)")
        ),
        t.manifest,
    )
    lamina.open_table(local_table_uri).append(rows(100, 10))  # version 3, by another process:
    forget_manifest(t.store, 3)  # ...so not in this process's cache
    assert stale.append(rows(200, 10)) == 4
    assert stale.store.fired == 1
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10)) + list(range(100, 110)) + list(range(200, 210))


def test_stale_writer_never_commits_into_a_table_recreated_at_its_uri(local_table_uri):
    """Even when the new table's next version only shows up on the second look."""
    import shutil

    t = _table(local_table_uri)
    # Version 3 is still being written when this reader first asks for it (not found), and is there by the
    # time it lists the versions.
    stale = Table(
        HookedStore(t.store).on(
            "get", path=manifest_path(3), times=1, fail=lambda path: ObjectNotFound(f"{path} (not written yet)")
        ),
        t.manifest,
    )
    shutil.rmtree(local_table_uri)
    new = lamina.create_table(local_table_uri, SCHEMA)
    for start in (1000, 2000):
        new.append(rows(start, 5))  # versions 1..3 of another table
    forget_manifest(t.store, 3)
    with pytest.raises(TableReplaced):
        stale.append(rows(200, 10))
    latest = lamina.open_table(local_table_uri)
    assert latest.version == 3 and ids_of(latest) == list(range(1000, 1005)) + list(range(2000, 2005))


def test_writer_two_versions_behind_is_checked_against_each_of_them(local_table_uri):
    t = _table(local_table_uri)
    stale = t.checkout(t.version)
    t.overwrite(rows(500, 5))  # version 3: an append cannot be replayed over it...
    t.append(rows(600, 5))  # ...and version 4 hides it from a writer that only looks at the newest
    with pytest.raises(CommitConflict, match="conflicts with the overwrite committed as version 3"):
        stale.append(rows(200, 10))
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(500, 505)) + list(range(600, 605))


def test_writer_that_keeps_losing_the_race_gives_up_with_a_conflict(local_table_uri):
    """Every put of the next version is beaten by another writer; after max_attempts the commit stops."""
    from lamina.commit import commit
    from lamina.datafile import WriteOptions, write_fragments
    from lamina.retry import Backoff
    from lamina.transaction import Append

    t = _table(local_table_uri)

    def beaten():  # every manifest put loses to another writer's append
        lamina.open_table(local_table_uri).append(rows(1000 + 10 * store.fired, 10))

    store = HookedStore(t.store).on("put_if_absent", prefix="_versions/", before=beaten)
    frags = write_fragments(t.store, t.schema, iter(rows(200, 10).to_batches()), WriteOptions())
    with pytest.raises(
        CommitConflict,
        match=(
            rf"append on table {t.store.uri} lost the race for the next version 3 times \(read at version 2\); "
            r"nothing was committed: retry later or with fewer concurrent writers"
        ),
    ):
        commit(store, Append(t.version, frags), t.manifest, backoff=Backoff(0.0, 0.0, 3))
    assert store.fired == 3
    latest = lamina.open_table(local_table_uri)
    assert latest.version == 5 and not set(range(200, 210)) & set(ids_of(latest))
    assert not any(t.store.exists(f.path) for f in frags), "the abandoned data file is removed"


def test_writer_behind_cleaned_history_is_told_which_versions_are_gone(local_table_uri):
    t = _table(local_table_uri)
    slow = t.checkout(t.version)  # read version 2
    for start in range(10, 50, 10):
        t.append(rows(start, 10))  # versions 3..6
    t.cleanup(older_than=0, enforce_retention=False)  # keeps 6 only
    with pytest.raises(
        CommitConflict,
        match=(
            rf"append on table {t.store.uri} read version 2, but versions from 2 up to 5 were cleaned up since; nothing "
            r"was committed: reload the table and re-run the append \(or run cleanup with an older_than longer than your "
            r"longest write\)"
        ),
    ):
        slow.append(rows(1000, 10))
