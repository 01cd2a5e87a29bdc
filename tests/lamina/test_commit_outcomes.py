"""Puts of the next manifest whose answer does not match what happened (docs/FORMAT.md §7, steps 4-5).

A store can report "already exists" for an object this very writer wrote (a lost
response, retried), or fail a put after another writer took the version. The
commit loop must commit each transaction exactly once and never report a version
it did not write: rows must neither appear twice nor go missing.
"""

from __future__ import annotations

import lamina
from lamina.errors import StorageError
from lamina.manifest import list_versions, load_manifest
from lamina.table import Table
from tests.lamina.helpers import SCHEMA, HookedStore, ids_of, rows

BASE = set(range(300))  # three fragments of 100 rows: ids 0-99, 100-199, 200-299
MINE = set(range(1000, 1010))
THEIRS = set(range(2000, 2010))


def _base(uri, opts):
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for start in (0, 100, 200):
        t.append(rows(start, 100))
    assert t.version == 4
    return t


def _first_manifest_put(inner, first_put) -> HookedStore:
    """``inner`` whose first put_if_absent of a manifest goes through ``first_put(inner, path, data)``."""
    return HookedStore(inner).on(
        "put_if_absent", prefix="_versions/", times=1, instead=lambda real, path, data: first_put(inner, path, data)
    )


def _check_ids(uri, opts, expected):
    latest = lamina.open_table(uri, storage_options=opts)
    got = ids_of(latest)
    assert len(got) == len(set(got)), f"rows committed twice: {sorted({i for i in got if got.count(i) > 1})[:10]}"
    assert set(got) == expected
    assert latest.count_rows() == len(got)
    return latest


def test_put_that_landed_but_answered_already_exists_commits_once(table_location):
    """commit.py: after a lost put, a version holding our own uuid is our commit (not a race to replay over)."""
    uri, opts = table_location
    t = _base(uri, opts)

    def lands_then_says_exists(inner, path, data):
        assert inner.put_if_absent(path, data)  # our manifest is written...
        return False  # ...but the answer we get is "something was already there"

    store = _first_manifest_put(t.store, lands_then_says_exists)
    mine = Table(store, t.manifest, opts)
    assert mine.append(rows(1000, 10)) == 5
    assert store.fired == 1
    assert list_versions(t.store) == [1, 2, 3, 4, 5], "the transaction was committed a second time"
    _check_ids(uri, opts, BASE | MINE)


def test_failed_put_while_another_writer_took_the_version_is_not_success(table_location):
    """commit.py _resolve_unknown: a failed put whose version holds another uuid is a lost race, not our commit."""
    uri, opts = table_location
    t = _base(uri, opts)

    def other_wins_then_fails(inner, path, data):
        assert lamina.open_table(uri, storage_options=opts).append(rows(2000, 10)) == 5  # takes version 5
        raise StorageError(f"connection reset while writing {path}")

    store = _first_manifest_put(t.store, other_wins_then_fails)
    mine = Table(store, t.manifest, opts)
    version = mine.append(rows(1000, 10))
    assert store.fired == 1
    assert version == 6, "reported a version this writer did not write"
    assert list_versions(t.store) == [1, 2, 3, 4, 5, 6]
    v5, v6 = load_manifest(t.store, 5), load_manifest(t.store, 6)
    assert v5.transaction["operation"] == v6.transaction["operation"] == "append"
    assert v5.transaction["uuid"] != v6.transaction["uuid"]
    assert mine.version == 6 and mine.manifest.transaction["uuid"] == v6.transaction["uuid"]
    _check_ids(uri, opts, BASE | MINE | THEIRS)


def test_failed_put_that_landed_is_success_exactly_once(table_location):
    """commit.py _resolve_unknown: a failed put whose version holds our uuid is our commit, once."""
    uri, opts = table_location
    t = _base(uri, opts)

    def lands_then_fails(inner, path, data):
        assert inner.put_if_absent(path, data)
        raise StorageError(f"connection reset while writing {path}")

    store = _first_manifest_put(t.store, lands_then_fails)
    mine = Table(store, t.manifest, opts)
    assert mine.append(rows(1000, 10)) == 5
    assert store.fired == 1
    assert list_versions(t.store) == [1, 2, 3, 4, 5], "the transaction was committed a second time"
    _check_ids(uri, opts, BASE | MINE)
