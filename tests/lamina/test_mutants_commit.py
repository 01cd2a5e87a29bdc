"""Commit behaviours that survived mutation testing (docs/RELIABILITY.md, "Mutation testing")."""

from __future__ import annotations

import pytest

import lamina
from lamina.errors import CommitConflict, CommitStateUnknown, StorageError
from lamina.manifest import list_versions
from lamina.table import Table
from tests.lamina.helpers import SCHEMA, ids_of, rows


class _Wrapped:
    """A store that passes everything through except the hooks a test sets."""

    def __init__(self, inner):
        self._inner = inner
        self.exists_calls: list[str] = []
        self.fail_manifest_put = False
        self.put_failed = False  # then reads of manifests fail too

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def exists(self, path):
        self.exists_calls.append(path)
        return self._inner.exists(path)

    def put_if_absent(self, path, data):
        if self.fail_manifest_put and path.startswith("_versions/"):
            self.put_failed = True
            raise StorageError(f"connection reset while writing {path}")
        return self._inner.put_if_absent(path, data)

    def get(self, path, *args, **kwargs):
        if self.put_failed and path.startswith("_versions/"):
            raise StorageError(f"connection reset while reading {path}")
        return self._inner.get(path, *args, **kwargs)


def _table(uri):
    t = lamina.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    return t


def test_short_write_commits_without_checking_its_files_again(local_table_uri):
    """Only writes older than VERIFY_FILES_AFTER_SECONDS look for their files (one HEAD each on S3)."""
    t = _table(local_table_uri)
    store = _Wrapped(t.store)
    assert Table(store, t.manifest).append(rows(10, 10)) == 3
    assert not [p for p in store.exists_calls if p.startswith("data/")]


def test_long_write_whose_files_are_gone_says_how_long_it_ran(local_table_uri, monkeypatch):
    import lamina.commit
    import lamina.datafile

    t = _table(local_table_uri)
    monkeypatch.setattr(lamina.commit, "VERIFY_FILES_AFTER_SECONDS", -1)  # every write counts as long
    real_write = lamina.datafile.write_fragment

    def write_then_lose(store, schema, batches, options):
        frag = real_write(store, schema, batches, options)
        store.delete([frag.path])
        return frag

    monkeypatch.setattr(lamina.datafile, "write_fragment", write_then_lose)
    with pytest.raises(CommitConflict, match=r"ran for \d s and 1 of the files it wrote are gone \(e\.g\. data/"):
        t.append(rows(10, 10))


def test_failed_put_that_cannot_be_read_back_is_reported_as_unknown(local_table_uri):
    """Neither success nor a plain failure: the caller is told which version to check for which transaction."""
    t = _table(local_table_uri)
    store = _Wrapped(t.store)
    store.fail_manifest_put = True
    mine = Table(store, t.manifest)
    with pytest.raises(CommitStateUnknown, match=(
        rf"append on table {t.store.uri}: writing version 3 failed \(connection reset while writing _versions/.*\) "
        r"and it cannot be read back \(connection reset while reading _versions/.*\); reload the table and check "
        r"whether version 3 holds transaction [0-9a-f]{32} before retrying"
    )):
        mine.append(rows(10, 10))
    assert list_versions(t.store) == [1, 2]
    assert ids_of(lamina.open_table(local_table_uri)) == list(range(10))
