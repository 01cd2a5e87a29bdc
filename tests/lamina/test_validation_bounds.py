"""Boundary validation of what is read from storage: exactly one past the last valid value is corrupt.

The manifests here are well formed with a valid checksum (re-encoded, not hand-edited),
so only the range checks can catch them: a fragment id equal to ``next_fragment_id``
(ids are handed out below it), a deletion offset equal to the fragment's row count
(offsets are 0..rows-1). One below each bound is valid and must be accepted.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import lamina
from lamina.deletion import read_deleted, write_deleted
from lamina.errors import CorruptFile
from lamina.manifest import load_manifest
from tests.lamina.helpers import SCHEMA, ids_of, put_next_version, rows

# Fragments held in the root and fragments in manifest segments are checked by different code: both.
pytestmark = pytest.mark.usefixtures("manifest_layout")


def _table(uri):
    t = lamina.create_table(uri, SCHEMA)
    for start in (0, 100, 200):
        t.append(rows(start, 100))
    assert [f.id for f in t.fragments()] == [0, 1, 2] and t.manifest.next_fragment_id == 3
    return t


def test_fragment_id_equal_to_next_fragment_id_is_corrupt(local_table_uri):
    t = _table(local_table_uri)
    version = put_next_version(t, next_fragment_id=2)  # fragment 2 claims an id not handed out yet
    # Found by the open, or (fragments in manifest segments are read on first use) by the first read.
    with pytest.raises(CorruptFile, match="fragment ids are duplicated or out of range"):
        lamina.open_table(local_table_uri).to_arrow()
    with pytest.raises(CorruptFile):
        list(load_manifest(t.store, version).fragments)
    assert lamina.open_table(local_table_uri, version=version - 1).count_rows() == 300  # history still readable


def test_highest_fragment_id_just_below_next_fragment_id_is_valid(local_table_uri):
    t = _table(local_table_uri)
    version = put_next_version(t, fragments=t.manifest.fragments[:2], next_fragment_id=2)  # ids 0, 1 < 2
    latest = lamina.open_table(local_table_uri)
    assert latest.version == version and ids_of(latest) == list(range(200))


def _with_deletion(t, offsets):
    """The next version with ``offsets`` as fragment 1's deletion file; returns (version, fragment)."""
    m = t.manifest
    frag = m.fragment(1)
    written = write_deleted(t.store, frag.id, np.asarray(offsets, dtype=np.uint32))
    bad = dataclasses.replace(frag, deletion=written)
    version = put_next_version(t, fragments=tuple(bad if f.id == 1 else f for f in m.fragments))
    return version, bad


def test_deletion_offset_equal_to_row_count_is_corrupt(local_table_uri):
    t = _table(local_table_uri)
    version, frag = _with_deletion(t, [3, 100])  # fragment 1 has rows 0..99
    assert frag.rows == 100 and frag.deletion.deleted_rows == 2
    with pytest.raises(CorruptFile, match=r"fragment 1 holds 2 offsets \(max 100\).* of 100 rows"):
        read_deleted(t.store, frag)
    latest = lamina.open_table(local_table_uri)  # the manifest itself is fine
    assert latest.version == version
    with pytest.raises(CorruptFile, match="fragment 1"):
        latest.to_arrow()
    with pytest.raises(CorruptFile, match="fragment 1"):
        latest.delete("id = 150")


def test_deletion_offset_of_the_last_row_is_valid(local_table_uri):
    t = _table(local_table_uri)
    _, frag = _with_deletion(t, [3, 99])
    assert read_deleted(t.store, frag).tolist() == [3, 99]
    latest = lamina.open_table(local_table_uri)
    assert ids_of(latest) == sorted(set(range(300)) - {103, 199})
    assert latest.count_rows() == 298
