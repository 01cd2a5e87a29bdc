"""The one cache of Lamina: a thread-safe LRU bounded by bytes, keyed by immutable objects.

Everything Lamina caches is immutable once written (manifests by version, deletion files,
index directories and blocks by path), so a cache never needs invalidating, only bounding.
Each cache has its own budget, set by an environment variable and shown by ``caches()``:

    LAMINA_MANIFEST_CACHE_BYTES   decoded manifests              (default  64 MiB)
    LAMINA_SEGMENT_CACHE_BYTES    decoded manifest segments      (default 256 MiB)
    LAMINA_DELETION_CACHE_BYTES   decoded deletion files         (default  64 MiB)
    LAMINA_INDEX_CACHE_BYTES      index directories and blocks   (default 256 MiB)
    LAMINA_CATALOG_CACHE_BYTES    decoded catalog versions       (default  64 MiB)
    LAMINA_FOOTER_CACHE_BYTES     footers read for pruning       (default 128 MiB)
    LAMINA_OBJECT_CACHE_BYTES     small objects fetched whole    (default 128 MiB)

so a process holds at most their sum, whatever the size of the tables it reads (docs/OPERATIONS.md
lists the native reader's two caches as well).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

MiB = 1 << 20

_REGISTRY: dict[str, ByteLRU] = {}
_REGISTRY_LOCK = threading.Lock()


class ByteLRU:
    """Values with a byte size, least recently used evicted first once their sum passes ``budget``.

    A value larger than the whole budget is not kept (the caller still has it).
    """

    def __init__(self, name: str, budget: int):
        self.name = name
        self.budget = int(budget)
        self._items: OrderedDict[Hashable, tuple[Any, int]] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: Hashable) -> Any:
        """The cached value, or None."""
        with self._lock:
            hit = self._items.get(key)
            if hit is None:
                self.misses += 1
                return None
            self.hits += 1
            self._items.move_to_end(key)
            return hit[0]

    def put(self, key: Hashable, value: Any, size: int) -> None:
        """Caches ``value`` (``size`` bytes) under ``key``, evicting the least recently used."""
        if size > self.budget:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, size)
            self._bytes += size
            while self._bytes > self.budget and self._items:
                _, (_, s) = self._items.popitem(last=False)
                self._bytes -= s

    def get_or_load(self, key: Hashable, load: Callable[[], Any], size: Callable[[Any], int]) -> Any:
        """The cached value, or ``load()`` cached with ``size(value)`` bytes (two threads missing
        together may both load; the values are equal, as everything cached is immutable)."""
        value = self.get(key)
        if value is None:
            value = load()
            self.put(key, value, size(value))
        return value

    def pop(self, key: Hashable) -> None:
        """Drops ``key``'s entry, if any (a value its owner knows no one will ask for again)."""
        with self._lock:
            hit = self._items.pop(key, None)
            if hit is not None:
                self._bytes -= hit[1]

    def discard(self, match: Callable[[Any], bool]) -> None:
        """Drops every entry whose key matches (e.g. the versions cleanup removed)."""
        with self._lock:
            for key in [k for k in self._items if match(k)]:
                self._bytes -= self._items.pop(key)[1]

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
            self._bytes = 0

    @property
    def bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._items)

    def __repr__(self) -> str:
        return f"ByteLRU({self.name!r}, {len(self)} entries, {self._bytes:,}/{self.budget:,} bytes)"


def cache(name: str, env: str, default_bytes: int) -> ByteLRU:
    """The process's cache ``name``, created on first use with the budget from ``env`` (bytes)."""
    with _REGISTRY_LOCK:
        found = _REGISTRY.get(name)
        if found is None:
            raw = os.environ.get(env)
            try:
                budget = int(raw) if raw else default_bytes
            except ValueError:
                from lamina.errors import InvalidConfig

                raise InvalidConfig(f"{env}={raw!r} must be a number of bytes") from None
            found = _REGISTRY[name] = ByteLRU(name, budget)
        return found


def caches() -> dict[str, ByteLRU]:
    """Every cache of this process, by name."""
    with _REGISTRY_LOCK:
        return dict(_REGISTRY)


def clear_caches() -> None:
    """Empties every cache of this process (tests; after files were changed behind Lamina's back)."""
    for c in caches().values():
        c.clear()
    from lamina import _native  # parsed footers and decoded column chunks live in the native reader

    _native.clear_native_caches()


def _forget_after_fork() -> None:  # a forked child starts with its parent's entries; locks must be fresh
    for c in _REGISTRY.values():
        c._lock = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)
