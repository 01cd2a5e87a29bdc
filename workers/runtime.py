"""The one module that talks to Ray: connecting, running tasks with bounded concurrency, named actors.

    connect()                          RAY_ADDRESS / `ray job submit` / a running ray.init, else a local Ray
    run_tasks(fn, tasks, ...)          at most ``concurrency`` tasks in flight; yields (task, result) as
                                       each finishes; a task whose worker died more than ``max_retries``
                                       times yields ``TaskFailed`` instead of ending the loop
    run_local(fn, tasks, ...)          the same on threads of this process (no Ray)
    named_actor(cls, name, args, ...)  a detached, named, get-or-create actor (restarted when it dies)

Every job submits through here, so the runtime_env, retries, progress and cancellation on
an early exit behave the same in compaction, index builds and ingestion. Ray is imported
lazily: planning, dry runs and the library never need it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from lamina.store.scheduler import add_remote, io_stats, stats_delta

log = logging.getLogger("lamina.runtime")

T = TypeVar("T")

#: ``progress(done, total)``: called after each finished task and about once a second while waiting.
Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class TaskFailed:
    """A task Ray could not run to the end: its worker died more often than allowed, or Ray failed it."""

    error: str


def connect(num_cpus: int | None = None) -> None:
    """Joins the Ray cluster of this process (``RAY_ADDRESS``, set by ``ray job submit``, or an
    earlier ``ray.init``); without one, starts a local Ray with ``num_cpus`` (default: the machine's)."""
    import ray

    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    local: dict[str, Any] = {"num_cpus": num_cpus} if num_cpus and not os.environ.get("RAY_ADDRESS") else {}
    ray.init(include_dashboard=False, configure_logging=False, log_to_driver=False, **local)


def shutdown() -> None:
    """Disconnects from Ray (stopping the local Ray ``connect`` started, if any)."""
    import ray

    ray.shutdown()


def cluster_cpus() -> int:
    """CPUs of the connected cluster (at least 1): the default number of tasks in flight."""
    import ray

    return max(1, int(ray.cluster_resources().get("CPU", 1)))


def _remote_options(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    return {"runtime_env": runtime_env} if runtime_env else {}


def _counted(fn: Callable[[T], Any], task: T) -> tuple[Any, dict[str, dict[str, int]]]:
    """``fn(task)`` and the object-store requests it made in this worker process."""
    before = io_stats()
    return fn(task), stats_delta(before)


def run_tasks(
    fn: Callable[[T], Any],
    tasks: Sequence[T],
    *,
    concurrency: int | None = None,
    max_retries: int = 3,
    runtime_env: dict[str, Any] | None = None,
    num_cpus: float = 1,
    progress: Progress | None = None,
) -> Iterator[tuple[T, Any]]:
    """Runs ``fn(task)`` on Ray for every task, at most ``concurrency`` at once (default: the
    cluster's CPUs), in order of submission; yields ``(task, result)`` in order of completion.

    The object-store requests each task made in its worker process are added to this process's
    ``lamina.io_stats()`` as its result arrives, so a job's report covers its tasks too.

    A worker that dies is retried ``max_retries`` times by Ray, then yields ``TaskFailed``; an
    exception raised by ``fn`` is not retried and is raised here as itself (tasks that must not
    stop the others return their errors as values). Closing the iterator early cancels the
    tasks still running.
    """
    import ray

    connect()
    limit = concurrency or cluster_cpus()
    remote: Any = ray.remote(num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False, **_remote_options(runtime_env))(
        _counted
    )
    queue = list(tasks)
    queue.reverse()
    pending: dict[Any, T] = {}
    done, total, last_tick = 0, len(queue), time.monotonic()
    try:
        while queue or pending:
            while queue and len(pending) < limit:
                task = queue.pop()
                pending[remote.remote(fn, task)] = task
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=1.0)
            for ref in ready:
                task = pending.pop(ref)
                try:
                    result, requests = ray.get(ref)
                    add_remote(requests)
                except ray.exceptions.RayTaskError as e:  # fn raised: its own error, as its own class
                    raise e.as_instanceof_cause() from None
                except Exception as e:  # the worker died more often than max_retries, or Ray gave up
                    result = TaskFailed(f"task failed after {max_retries} retries: {type(e).__name__}: {e}")
                done += 1
                yield task, result
            if progress is not None and (ready or time.monotonic() - last_tick >= 1.0):
                last_tick = time.monotonic()
                progress(done, total)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def run_local(
    fn: Callable[[T], Any], tasks: Sequence[T], *, concurrency: int | None = None, progress: Progress | None = None
) -> Iterator[tuple[T, Any]]:
    """``run_tasks`` on a thread pool of this process (``concurrency`` threads, default the CPUs):
    for work whose native part releases the GIL. An exception raised by ``fn`` is raised here."""
    from concurrent.futures import ThreadPoolExecutor, as_completed

    threads = concurrency or max(1, min(len(tasks), os.cpu_count() or 1))
    with ThreadPoolExecutor(threads, thread_name_prefix="lamina-task") as pool:
        futures = {pool.submit(fn, t): t for t in tasks}
        try:
            for done, fut in enumerate(as_completed(futures), 1):
                yield futures[fut], fut.result()
                if progress is not None:
                    progress(done, len(tasks))
        finally:
            for fut in futures:
                fut.cancel()


def named_actor(
    cls: type,
    name: str,
    args: Iterable[Any] = (),
    *,
    namespace: str = "lamina",
    runtime_env: dict[str, Any] | None = None,
    num_cpus: float = 0.25,
    max_concurrency: int = 4,
) -> Any:
    """The detached actor ``name`` (created from ``cls(*args)`` if it does not exist): it outlives the
    caller, is restarted by Ray whenever its process dies, and its calls are retried 3 times."""
    import ray

    connect()
    # ray's overloads of remote() list the options of a task only: max_concurrency is an actor's.
    remote_cls = ray.remote(
        num_cpus=num_cpus,
        max_restarts=-1,
        max_task_retries=3,  # type: ignore[call-overload]
        max_concurrency=max_concurrency,
        **_remote_options(runtime_env),
    )(cls)
    return remote_cls.options(name=name, namespace=namespace, get_if_exists=True, lifetime="detached").remote(*args)


def wait_ready(handles: Sequence[Any], timeout: float = 120.0) -> None:
    """Waits until every actor answers ``ready()``."""
    import ray

    ray.get([h.ready.remote() for h in handles], timeout=timeout)


def get(refs: Any, timeout: float | None = None) -> Any:
    """``ray.get``: the results of actor calls made through handles from ``named_actor``."""
    import ray

    return ray.get(refs, timeout=timeout)


def kill(handle: Any) -> None:
    """Removes an actor for good (no restart)."""
    import ray

    ray.kill(handle, no_restart=True)
