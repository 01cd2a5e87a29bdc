"""One I/O scheduler per process: every object-store request goes through it and is counted.

Per-fragment overhead, not bytes, dominated scattered lookups (a request at a time,
fragment after fragment). Here the requests of one call are handed over together:

- **bounded concurrency per store**: one worker pool per object-store endpoint and bucket
  (``LAMINA_S3_CONCURRENCY``, default 32, the HTTP connection pool's size); a request made
  from inside a worker runs inline, so nested reads never wait on themselves, and a request
  waited for runs on the caller's thread when nothing is queued and a slot is free;
- **priorities**: ``POINT`` (lookups, ``take``) before ``SCAN`` before ``BACKGROUND``
  (compaction, cleanup), so a point lookup is not queued behind a scan's GETs;
- **coalescing**: byte ranges of one object closer than ``LAMINA_COALESCE_GAP`` (64 KiB) are
  fetched by one GET of at most ``LAMINA_COALESCE_BYTES`` (8 MiB), then split again;
- **accounting**: every request (each retry too) is counted by store and kind — GET, PUT,
  LIST, HEAD, DELETE and bytes — in ``lamina.io_stats()``.

Local directories are counted the same way (GET = a read of a file's bytes) but not queued:
their reads are ``pread`` calls, cheaper than a thread hop.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import os
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any, TypeVar

from lamina.errors import InvalidConfig

T = TypeVar("T")

POINT, SCAN, BACKGROUND = 0, 1, 2

#: The request kinds counted, and the byte counters.
KINDS = ("GET", "PUT", "LIST", "HEAD", "DELETE", "bytes_read", "bytes_written")


def env_int(name: str, default: int, lo: int, hi: int) -> int:
    raw = os.environ.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise InvalidConfig(f"{name}={raw!r} must be an integer in [{lo}, {hi}]") from None
    if not lo <= value <= hi:
        raise InvalidConfig(f"{name}={raw!r} must be an integer in [{lo}, {hi}]")
    return value


# -- accounting -----------------------------------------------------------------------------------------
_STATS: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(KINDS, 0))
_STATS_LOCK = threading.Lock()


def count(domain: str, kind: str, requests: int = 1, nbytes: int = 0) -> None:
    """Records ``requests`` requests of ``kind`` (and ``nbytes`` moved) against ``domain``."""
    with _STATS_LOCK:
        entry = _STATS[domain]
        entry[kind] += requests
        if nbytes:
            entry["bytes_written" if kind == "PUT" else "bytes_read"] += nbytes


def add_remote(part: dict[str, dict[str, int]]) -> None:
    """Adds the requests a Ray task made in its worker process (``lamina.workers.runtime.run_tasks`` does, as
    each result arrives), so this process's ``io_stats()`` cover the work it ran elsewhere."""
    with _STATS_LOCK:
        for domain, entry in part.items():
            target = _STATS[domain]
            for k, v in entry.items():
                target[k] = target.get(k, 0) + v


def io_stats(reset: bool = False) -> dict[str, dict[str, int]]:
    """Requests and bytes of this process — and of the Ray tasks it ran, added as their results
    arrive — since it started (or the last reset), by store:
    ``{"s3://endpoint/bucket": {"GET": n, "PUT": n, "LIST": n, "HEAD": n, "DELETE": n,
    "bytes_read": n, "bytes_written": n}, "local": {...}}``. Retries count as requests."""
    with _STATS_LOCK:
        out = {domain: dict(entry) for domain, entry in _STATS.items()}
        if reset:
            _STATS.clear()
    return out


def stats_delta(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]] | None = None) -> dict[str, dict[str, int]]:
    """What happened between two ``io_stats()`` snapshots (``after`` defaults to now); empty stores left out."""
    after = io_stats() if after is None else after
    out = {}
    for domain, entry in after.items():
        base = before.get(domain, {})
        diff = {k: v - base.get(k, 0) for k, v in entry.items()}
        if any(diff.values()):
            out[domain] = diff
    return out


def add_stats(total: dict[str, dict[str, int]], part: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """``total`` plus ``part`` (e.g. a worker's requests added to the driver's), as a new dict."""
    out = {d: dict(e) for d, e in total.items()}
    for domain, entry in part.items():
        target = out.setdefault(domain, dict.fromkeys(KINDS, 0))
        for k, v in entry.items():
            target[k] = target.get(k, 0) + v
    return out


# -- scheduling -----------------------------------------------------------------------------------------
class Scheduler:
    """A pool of at most ``concurrency`` threads taking requests by priority, then arrival."""

    def __init__(self, domain: str, concurrency: int):
        self.domain = domain
        self.concurrency = concurrency
        self._heap: list[tuple[int, int, Callable[[], Any], Future[Any]]] = []
        self._seq = itertools.count()
        self._cond = threading.Condition()
        self._threads = 0
        self._idle = 0
        self._running = 0  # requests being run, by the workers and inline
        self._local = threading.local()

    def submit(self, fn: Callable[[], T], priority: int = SCAN) -> Future[T]:
        """Runs ``fn`` on a worker; inline (already done) when called from one of this scheduler's workers."""
        future: Future[T] = Future()
        if getattr(self._local, "worker", False):
            _run_into(future, fn)
            return future
        with self._cond:
            heapq.heappush(self._heap, (priority, next(self._seq), fn, future))
            if self._idle:
                self._cond.notify()
            elif self._threads < self.concurrency:
                self._threads += 1
                threading.Thread(target=self._work, name=f"lamina-io-{self.domain}", daemon=True).start()
        return future

    def run(self, fn: Callable[[], T], priority: int = SCAN) -> T:
        """``fn()`` through the scheduler, waiting for it. When nothing is queued and a request slot is free
        it runs on the calling thread (a thread hop less, a visible share of a warm catalog read's one request)."""
        if getattr(self._local, "worker", False):
            return fn()
        with self._cond:
            inline = not self._heap and self._running < self.concurrency
            if inline:
                self._running += 1
        if not inline:
            return self.submit(fn, priority).result()
        self._local.worker = True  # a request it makes in turn runs inline too, as in a worker
        try:
            return fn()
        finally:
            self._local.worker = False
            self._done()

    def _done(self) -> None:
        with self._cond:
            self._running -= 1
            if self._heap and self._idle:
                self._cond.notify()

    def _work(self) -> None:
        self._local.worker = True
        while True:
            with self._cond:
                while not self._heap or self._running >= self.concurrency:
                    self._idle += 1
                    self._cond.wait()
                    self._idle -= 1
                _, _, fn, future = heapq.heappop(self._heap)
                self._running += 1
            try:
                if future.set_running_or_notify_cancel():
                    _run_into(future, fn)
            finally:
                self._done()


def _run_into(future: Future[Any], fn: Callable[[], Any]) -> None:
    try:
        future.set_result(fn())
    except BaseException as e:  # handed to the waiting caller
        future.set_exception(e)


_SCHEDULERS: dict[str, Scheduler] = {}
_SCHEDULERS_LOCK = threading.Lock()


def scheduler_for(domain: str) -> Scheduler:
    """The process's scheduler for one store domain (created on first use)."""
    found = _SCHEDULERS.get(domain)
    if found is None:
        with _SCHEDULERS_LOCK:
            found = _SCHEDULERS.get(domain)
            if found is None:
                found = _SCHEDULERS[domain] = Scheduler(domain, concurrency())
    return found


def concurrency() -> int:
    """Requests in flight per object store (``LAMINA_S3_CONCURRENCY``, default 32)."""
    return env_int("LAMINA_S3_CONCURRENCY", 32, 1, 4096)


def _forget_after_fork() -> None:  # a forked child has none of its parent's threads
    _SCHEDULERS.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


# -- coalescing -----------------------------------------------------------------------------------------
def coalesce(ranges: Sequence[tuple[int, int]], gap: int, limit: int) -> list[tuple[int, int, list[int]]]:
    """Merges ``(start, length)`` ranges of one object: ranges closer than ``gap`` bytes share one read
    of at most ``limit`` bytes (a single larger range stays whole). Returns ``(start, length,
    [indices of the ranges it serves])`` in offset order."""
    order = sorted(range(len(ranges)), key=lambda i: ranges[i][0])
    out: list[tuple[int, int, list[int]]] = []
    for i in order:
        start, length = ranges[i]
        end = start + length
        if out:
            s, n, members = out[-1]
            if start - (s + n) <= gap and max(end, s + n) - s <= limit:
                out[-1] = (s, max(end, s + n) - s, members + [i])
                continue
        out.append((start, length, [i]))
    return out


def coalesce_gap() -> int:
    return env_int("LAMINA_COALESCE_GAP", 64 * 1024, 0, 1 << 30)


def coalesce_bytes() -> int:
    return env_int("LAMINA_COALESCE_BYTES", 8 * 1024 * 1024, 1, 1 << 34)


def fetch_ranges(store: Any, requests: Sequence[tuple[str, int, int]], priority: int = POINT) -> list[bytes]:
    """The bytes of every ``(path, start, length)``, in the order given: nearby ranges of one object are
    coalesced, and every GET is issued at once through the store's scheduler (inline for local stores)."""
    by_path: dict[str, list[int]] = defaultdict(list)
    for i, (path, _, _) in enumerate(requests):
        by_path[path].append(i)
    out: list[bytes] = [b""] * len(requests)
    if getattr(store, "is_local", False):  # a pread costs no request: each range into its own bytes, no copy
        for path, members in by_path.items():
            for i, data in zip(members, store.get_ranges(path, [requests[i][1:] for i in members])):
                out[i] = data
        return out
    gap, limit = coalesce_gap(), coalesce_bytes()
    reads: list[tuple[str, int, int, list[int]]] = []
    for path, members in by_path.items():
        for start, length, served in coalesce([requests[i][1:] for i in members], gap, limit):
            reads.append((path, start, length, [members[j] for j in served]))
    if len(reads) == 1:
        datas = [store.get_range(p, s, n) for p, s, n, _ in reads]
    else:
        sched = scheduler_for(store.io_domain)
        futures = [sched.submit(functools.partial(store.get_range, p, s, n), priority) for p, s, n, _ in reads]
        datas = [f.result() for f in futures]
    for (_, start, _, served), data in zip(reads, datas):
        view = memoryview(data)
        for i in served:
            _, s, n = requests[i]
            out[i] = data if (s == start and n == len(data)) else bytes(view[s - start : s - start + n])
    return out
