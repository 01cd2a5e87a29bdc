"""Deletion files (lamina/deletion.py): immutable, so a process reads each at most once while it fits the
cache, and the cache of decoded offsets stays within its bound; a file that disagrees with the manifest, or
deletes an offset past the fragment's last row, is CorruptFile naming it.

Each case pins a behaviour that once survived mutation testing (docs/RELIABILITY.md, "Mutation testing").
"""

from __future__ import annotations

import numpy as np
import pytest

import lamina
import lamina.deletion
from lamina.cache import ByteLRU
from lamina.table import Table
from tests.lamina.helpers import SCHEMA, HookedStore, ids_of, rows


@pytest.fixture
def fresh_cache(monkeypatch):
    monkeypatch.setattr(lamina.deletion, "_CACHE", ByteLRU("deletion", 64 << 20))


def _table_with_deletions(uri):
    t = lamina.create_table(uri, SCHEMA)
    for start in (0, 100):
        t.append(rows(start, 100))
    t.delete("id IN (3, 13, 57, 103, 150, 199)")
    return t


def test_each_deletion_file_is_read_once_per_process(local_table_uri, fresh_cache):
    t = _table_with_deletions(local_table_uri)
    lamina.deletion._CACHE.clear()  # as if another process had deleted
    store = HookedStore(t.store)
    reader = Table(store, t.manifest)
    expected = [i for i in range(200) if i not in (3, 13, 57, 103, 150, 199)]
    assert ids_of(reader) == expected
    assert ids_of(reader) == expected
    assert reader.count_rows() == len(expected)
    deletion_gets = store.paths("get", "_deletions/")
    assert sorted(deletion_gets) == sorted({f.deletion.path for f in t.manifest.fragments}), deletion_gets


def test_deletion_files_written_here_are_not_read_back(local_table_uri, fresh_cache):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    store = HookedStore(t.store)
    writer = Table(store, t.manifest)
    writer.delete("id < 10")
    assert ids_of(writer) == list(range(10, 100))
    assert store.paths("get", "_deletions/") == []


def _offsets(n):
    return np.arange(n, dtype=np.uint32)


class _OffsetCache:
    """The deletion cache's LRU (``lamina.cache.ByteLRU``) with each file costing its offset count."""

    def __init__(self, max_offsets=16_000_000):
        self.lru = ByteLRU("deletion-test", max_offsets)

    def put(self, key, offsets):
        self.lru.put(key, offsets, len(offsets))

    def get(self, key):
        return self.lru.get(key)


def test_cache_holds_exactly_its_bound():
    cache = _OffsetCache(max_offsets=10)
    cache.put(("t", "a"), _offsets(6))
    cache.put(("t", "b"), _offsets(4))
    assert cache.get(("t", "a")) is not None and cache.get(("t", "b")) is not None
    cache.put(("t", "c"), _offsets(1))  # 11 > 10: the least recently used (a) goes
    assert cache.get(("t", "a")) is None
    assert cache.get(("t", "b")) is not None and cache.get(("t", "c")) is not None


def test_cache_stays_within_its_bound_after_evicting():
    cache = _OffsetCache(max_offsets=10)
    cache.put(("t", "a"), _offsets(6))
    cache.put(("t", "b"), _offsets(4))
    cache.put(("t", "c"), _offsets(1))  # a goes: 5 held
    cache.put(("t", "d"), _offsets(5))  # 10 held: nothing more goes
    assert cache.get(("t", "a")) is None
    assert all(cache.get(("t", k)) is not None for k in "bcd")


def test_cache_evicts_the_least_recently_used():
    cache = _OffsetCache(max_offsets=10)
    cache.put(("t", "a"), _offsets(4))
    cache.put(("t", "b"), _offsets(4))
    assert len(cache.get(("t", "a"))) == 4  # a is now the most recently used
    cache.put(("t", "c"), _offsets(4))
    assert cache.get(("t", "b")) is None
    assert cache.get(("t", "a")) is not None and cache.get(("t", "c")) is not None


def test_cache_counts_a_file_put_twice_once():
    cache = _OffsetCache(max_offsets=10)
    for _ in range(3):
        cache.put(("t", "a"), _offsets(4))
    cache.put(("t", "b"), _offsets(6))
    assert cache.get(("t", "a")) is not None and cache.get(("t", "b")) is not None


def test_cache_never_holds_a_file_larger_than_its_bound():
    # The bound is a promise about memory: a file that alone exceeds it is read but not kept,
    # and keeping it out evicts nothing.
    cache = _OffsetCache(max_offsets=10)
    cache.put(("t", "a"), _offsets(4))
    cache.put(("t", "big"), _offsets(50))
    assert cache.get(("t", "big")) is None
    assert len(cache.get(("t", "a"))) == 4


def test_cache_keys_are_per_table():
    cache = _OffsetCache()
    cache.put(("t1", "_deletions/0.bin"), _offsets(3))
    assert cache.get(("t2", "_deletions/0.bin")) is None


@pytest.mark.parametrize(
    "offsets,claimed,shown",
    [
        ([], 3, "0 offsets (max -)"),  # an empty file where the manifest says 3 rows are deleted
        ([3, 7, 100], 3, "3 offsets (max 100)"),  # one offset past the last row
    ],
)
def test_deletion_file_that_disagrees_with_the_manifest_is_corrupt_naming_it(local_table_uri, offsets, claimed, shown):
    import dataclasses
    import re

    from lamina.deletion import read_deleted, write_deleted
    from lamina.errors import CorruptFile

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    [frag] = t.manifest.fragments
    written = write_deleted(t.store, frag.id, np.asarray(offsets, dtype=np.uint32))
    bad = dataclasses.replace(frag, deletion=dataclasses.replace(written, deleted_rows=claimed))
    with pytest.raises(
        CorruptFile,
        match=(
            rf"deletion file {re.escape(t.store.describe(written.path))} of fragment {frag.id} holds {re.escape(shown)}, "
            rf"the manifest says {claimed} of 100 rows"
        ),
    ):
        read_deleted(t.store, bad)


def test_deletion_file_read_from_storage_with_an_offset_past_the_last_row_is_corrupt(local_table_uri, fresh_cache):
    """Checked by the decoder against the row count, before the offsets are materialized."""
    import dataclasses
    import re

    from lamina.deletion import read_deleted, write_deleted
    from lamina.errors import CorruptFile

    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(rows(0, 100))
    [frag] = t.manifest.fragments
    written = write_deleted(t.store, frag.id, np.asarray([3, 7, 100], dtype=np.uint32))
    lamina.deletion._CACHE.clear()  # read by another process
    bad = dataclasses.replace(frag, deletion=written)
    with pytest.raises(
        CorruptFile, match=(rf"{re.escape(t.store.describe(written.path))}: deletes offset 100 of a fragment of 100 rows")
    ):
        read_deleted(t.store, bad)
