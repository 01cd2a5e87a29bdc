"""The one thread pool per process that reads fragments in parallel (``LAMINA_IO_THREADS``, default 8).

Starting threads for every read was a cost every query paid, so the pool lives as long as
the process; a forked child starts its own.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any


def pool_size(n: int) -> int:
    return max(1, min(n, int(os.environ.get("LAMINA_IO_THREADS", "8"))))


_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def io_pool() -> ThreadPoolExecutor:
    """One long-lived pool per process (starting threads per read was a cost every query paid)."""
    global _POOL
    with _POOL_LOCK:
        if _POOL is None:
            _POOL = ThreadPoolExecutor(pool_size(1 << 30), thread_name_prefix="lamina-io")
        return _POOL


def _forget_pool() -> None:  # a forked child must not use the parent's threads
    global _POOL
    _POOL = None


os.register_at_fork(after_in_child=_forget_pool)


def map_fragments(fn, items: Sequence[Any]) -> list[Any]:
    """``[fn(x) for x in items]`` with up to ``LAMINA_IO_THREADS`` at once. Called from one of the
    pool's own threads it runs inline (waiting on the pool from inside it could deadlock)."""
    if len(items) <= 1 or threading.current_thread().name.startswith("lamina-io"):
        return [fn(x) for x in items]
    return list(io_pool().map(fn, items))
