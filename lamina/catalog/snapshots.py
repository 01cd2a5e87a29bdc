"""Reading catalog versions: a small one decoded whole once per version and answered from memory (a
``Snapshot`` with lookups by name and listings by parent, in a byte-bounded cache), a large one read
through its indices (``Version.select``); and the catalog's thread pool."""

from __future__ import annotations

import bisect
import os
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pyarrow as pa

from lamina.cache import MiB, cache
from lamina.catalog.schema import SCHEMA, as_current
from lamina.datafile import take_many
from lamina.filter import parse_filter
from lamina.manifest import Manifest
from lamina.table import Table

#: A catalog whose data file is at most this is read whole once per version and answered from memory
#: (one GET instead of index and data reads); a larger one is read through its indices.
WHOLE_READ_BYTES = 8 << 20
#: Decoded catalog versions (immutable, with their lookups by name and by parent), bounded like every cache.
CACHE = cache("catalog", "LAMINA_CATALOG_CACHE_BYTES", 64 * MiB)


def cache_key(uri: str, m: Manifest) -> tuple[str, str | None, int]:
    return (uri, m.table_uuid, m.version)


def is_small(m: Manifest) -> bool:
    return sum(f.file_bytes for f in m.fragments) <= WHOLE_READ_BYTES


def snapshot(t: Table) -> Snapshot | None:
    """The decoded rows of ``t``'s version (cached), or None for a catalog too large to hold (read through its indices)."""
    key = cache_key(t.uri, t.manifest)
    snap = CACHE.get(key)
    if snap is None and is_small(t.manifest):
        snap = Snapshot(rows_of(t))
        CACHE.put(key, snap, snap.nbytes)
    return snap


def rows_of(t: Table) -> pa.Table:
    """Every row of catalog version ``t``. A rewrite writes one data file and no deletion file: it is decoded
    by one native call (``datafile.take_many``, as a ``take`` of every row), since pyarrow's first Parquet read
    in a process pays a one-time set-up that would dominate a cold catalog read. Another layout (none is written
    today) is read as any table is."""
    frags = t.manifest.fragments
    if len(frags) == 1 and frags[0].deletion is None and frags[0].rows:
        f = frags[0]
        return as_current(take_many(t.store, t.schema, [f], np.arange(f.rows, dtype=np.uint32), [f.rows], t.schema.names))
    return as_current(t.to_arrow())


#: The memory pool of the rows a mutation builds: the C allocator's, not Arrow's default (mimalloc). mimalloc asks
#: for transparent huge pages on its arenas, and each 2 MiB page it grows into is zeroed on first touch: stalls
#: longer than a whole small mutation, every few calls of a writer making many of them (perf: ``clear_page_erms`` under
#: ``do_huge_pmd_anonymous_page`` from ``mi_manage_os_memory_ex2``).
SYSTEM_POOL = pa.system_memory_pool()


class Snapshot:
    """One catalog version decoded in memory: its rows (sorted by object id, as every rewrite writes them),
    with lookups by name and listings by (object type, parent) built once per version."""

    def __init__(self, rows: pa.Table):
        # No pyarrow.compute here: its first call in a process sets up its kernel registry, a one-time cost
        # a cold read would pay for nothing. Rows are written sorted; listings sort anyway.
        self.rows = rows if rows.schema.equals(SCHEMA) else pa.Table.from_arrays(rows.columns, schema=SCHEMA)
        if self.rows.column("object_id").num_chunks > 1:
            self.rows = self.rows.combine_chunks(memory_pool=SYSTEM_POOL)
        self.nbytes = 3 * self.rows.get_total_buffer_size() + 1024  # the rows and the Python lookups built over them
        self._children: dict[tuple[str, str], tuple[str, ...]] = {}
        self._entries: dict[int, dict[str, Any]] = {}

    @cached_property
    def _ids(self) -> list[str]:
        return self.rows.column("object_id").to_pylist()

    @cached_property
    def _position(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self._ids)}

    @cached_property
    def _types(self) -> list[str]:
        return self.rows.column("object_type").to_pylist()

    @cached_property
    def _ids_sorted(self) -> bool:
        ids = self._ids
        return all(a < b for a, b in zip(ids, ids[1:]))

    def children(self, kind: str, parent: str) -> tuple[str, ...]:
        """The object ids of type ``kind`` directly inside ``parent``, sorted; computed once per key. A parent
        is its children's id prefix, so they are one range of the sorted ids (the top level: the ids without a
        dot), and only their types are looked at: a cold call costs no pass over every row."""
        key = (kind, parent)
        found = self._children.get(key)
        if found is None:
            ids = self._ids
            if parent:
                prefix = parent + "."
                if self._ids_sorted:
                    lo, hi = bisect.bisect_left(ids, prefix), bisect.bisect_left(ids, parent + "/")
                else:
                    lo, hi = 0, len(ids)
                inside = [i for i in range(lo, hi) if ids[i].startswith(prefix) and "." not in ids[i][len(prefix) :]]
            else:
                inside = [i for i, name in enumerate(ids) if "." not in name]
            if len(inside) > 64:  # many: every type at once
                types = self._types
                found = tuple(sorted(ids[i] for i in inside if types[i] == kind))
            else:
                column = self.rows.column("object_type")
                found = tuple(sorted(ids[i] for i in inside if column[i].as_py() == kind))
            self._children[key] = found
        return found

    def entry(self, name: str) -> dict[str, Any] | None:
        i = self._position.get(name)
        if i is None:
            return None
        found = self._entries.get(i)
        if found is None:
            found = self._entries[i] = self.rows.slice(i, 1).to_pylist()[0]
        return dict(found)


@dataclass(frozen=True)
class Version:
    """One catalog version a call reads: its rows in memory (``snap``), or its table and indices."""

    table: Table
    snap: Snapshot | None

    def select(self, flt: str | None) -> pa.Table:
        if self.snap is not None:
            return self.snap.rows if flt is None else self.snap.rows.filter(parse_filter(flt, SCHEMA).expression)
        return as_current(self.table.to_arrow(filter=flt))


def quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


_POOL: tuple[int, ThreadPoolExecutor] | None = None
_POOL_LOCK = threading.Lock()


def pool() -> ThreadPoolExecutor:
    """The threads of the catalog's concurrent work (a rewrite's data file and index segments, whose native
    writers release the GIL; a table created or opened, rows read, while the catalog is checked), one pool
    per process (a forked child makes its own). No task waits on another task of the pool."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL[0] != os.getpid():
            _POOL = (os.getpid(), ThreadPoolExecutor(6, thread_name_prefix="lamina-catalog"))
        return _POOL[1]
