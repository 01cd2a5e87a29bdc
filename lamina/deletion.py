"""Deletion files: which physical rows of a fragment are deleted (roaring, portable)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from lamina import _native
from lamina.arrays import from_numpy, to_numpy
from lamina.cache import MiB, cache
from lamina.checksum import check, of_bytes
from lamina.errors import CorruptFile
from lamina.manifest import DELETIONS_DIR, DeletionFile, Fragment
from lamina.records import AddressMapping
from lamina.store import ObjectStore

_EMPTY = np.zeros(0, dtype=np.uint32)


#: Decoded deletion files by (table, path): paths are unique and never rewritten.
_CACHE = cache("deletion", "LAMINA_DELETION_CACHE_BYTES", 64 * MiB)


def _remember(store: ObjectStore, path: str, offsets: np.ndarray) -> None:
    _CACHE.put((store.uri, path), offsets, offsets.nbytes + 64)


def read_offsets(store: ObjectStore, path: str | None, checksum: str | None = None, rows: int | None = None) -> np.ndarray:
    """Sorted uint32 offsets held by the deletion file at ``path`` (empty for None), checked
    against its recorded ``checksum`` when read from storage; an offset not below ``rows`` (the
    fragment's row count, when known) is ``CorruptFile`` before anything is materialized."""
    if path is None:
        return _EMPTY
    key = (store.uri, path)
    cached = _CACHE.get(key)
    if cached is not None:
        return cached
    data = store.get(path)
    check(checksum, of_bytes(data), f"deletion file {store.describe(path)}")
    offsets = to_numpy(_native.decode_deletions(data, store.describe(path), rows))
    _remember(store, path, offsets)
    return offsets


def among(offsets: np.ndarray, deleted: np.ndarray) -> np.ndarray:
    """Which of ``offsets`` are in the sorted ``deleted``: a binary search each, O(k log n), where
    ``np.isin`` sorts both (a point lookup in a fragment with many deletions paid for the sort)."""
    if len(deleted) == 0 or len(offsets) == 0:
        return np.zeros(len(offsets), dtype=bool)
    pos = np.searchsorted(deleted, offsets)
    return deleted[np.minimum(pos, len(deleted) - 1)] == offsets


def read_deleted(store: ObjectStore, fragment: Fragment) -> np.ndarray:
    """Sorted uint32 offsets deleted from ``fragment``, checked against the manifest."""
    if fragment.deletion is None:
        return _EMPTY
    offsets = read_offsets(store, fragment.deletion.path, fragment.deletion.checksum, fragment.rows)
    if len(offsets) != fragment.deletion.deleted_rows or (len(offsets) and offsets[-1] >= fragment.rows):
        from lamina.errors import CorruptFile

        raise CorruptFile(
            f"deletion file {store.describe(fragment.deletion.path)} of fragment {fragment.id} holds {len(offsets)} offsets "
            f"(max {offsets[-1] if len(offsets) else '-'}), "
            f"the manifest says {fragment.deletion.deleted_rows} of {fragment.rows} rows"
        )
    return offsets


def kept_ranges(deleted: np.ndarray, rows: int) -> tuple[tuple[int, int], ...]:
    """The rows of a ``rows``-row fragment not in the sorted, unique ``deleted``, as merged half-open
    ``[start, end)`` ranges in offset order (what a reader outside Lamina filters a file by).

    >>> kept_ranges(np.array([0, 3, 4], dtype=np.uint32), 8)
    ((1, 3), (5, 8))
    """
    d = deleted.astype(np.int64)
    starts = np.concatenate([[0], d + 1])
    ends = np.concatenate([d, [rows]])
    runs = starts < ends
    return tuple(zip(starts[runs].tolist(), ends[runs].tolist()))


def write_deleted(store: ObjectStore, fragment_id: int, offsets: np.ndarray) -> DeletionFile:
    """Writes a new deletion file holding ``offsets`` (sorted, unique uint32)."""
    path = f"{DELETIONS_DIR}{fragment_id}-{uuid.uuid4().hex}.bin"
    data = _native.encode_deletions(from_numpy(offsets, pa.uint32()))
    store.put(path, data)
    _remember(store, path, offsets)
    return DeletionFile(path, int(len(offsets)), of_bytes(data))


def _ignore(path: str) -> None:
    pass


@dataclass(frozen=True)
class StoredDeletionFiles:
    """The deletion files of the table in ``store``, as a commit lends them to its transaction
    (``lamina.transaction.DeletionFiles``); ``on_write`` hears of every file written."""

    store: ObjectStore
    on_write: Callable[[str], None] = _ignore

    @property
    def uri(self) -> str:
        return self.store.uri

    def read(self, fragment: Fragment) -> np.ndarray:
        return read_deleted(self.store, fragment)

    def read_file(self, path: str | None) -> np.ndarray:
        return read_offsets(self.store, path)

    def write(self, fragment_id: int, offsets: np.ndarray) -> DeletionFile:
        written = write_deleted(self.store, fragment_id, offsets)
        self.on_write(written.path)
        return written

    def read_mapping(self, path: str) -> AddressMapping:
        try:
            data = self.store.get(path)
        except FileNotFoundError:
            raise CorruptFile(
                f"mapping file {self.store.describe(path)} of a rewrite is missing: a delete cannot be replayed over that "
                f"rewrite. Restore the file from a backup, or re-run the delete on the latest version"
            ) from None
        return AddressMapping.from_bytes(data, self.store.describe(path))

    def read_columns(self, fragment: Fragment, schema: pa.Schema, columns: list[str]) -> pa.Table:
        from lamina.datafile import read_fragment  # datafile reads deletion files: imported when first needed

        return read_fragment(self.store, fragment, schema, columns)


def live_mask(fragment: Fragment, deleted: np.ndarray) -> np.ndarray | None:
    """Boolean mask of live physical rows, or None when nothing is deleted."""
    if len(deleted) == 0:
        return None
    mask = np.ones(fragment.rows, dtype=bool)
    mask[deleted] = False
    return mask
