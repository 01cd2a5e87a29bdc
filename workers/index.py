"""The index-build worker: one Ray task per ``BuildTask`` (a fragment range of one segment).

Each task reads the indexed column of its fragments, builds a partial segment
natively and uploads it; the driver merges a segment's parts. A task whose worker
dies is retried by Ray (its part is rewritten under the same name); an error in a
task fails the build, and the driver removes the parts already written.
Memory per task: the column of ``task_rows`` rows plus its segment.
"""

from __future__ import annotations

from typing import Any, Iterator

from lamina.indexing import BuildTask, Runner, run_build_task


def ray_runner(max_concurrency: int, runtime_env: dict[str, Any] | None = None, max_retries: int = 3) -> Runner:
    """A runner for ``lamina.indexing.build_segments`` that executes tasks on Ray."""
    import ray

    extra = {"runtime_env": runtime_env} if runtime_env else {}
    remote = ray.remote(num_cpus=1, max_retries=max_retries, retry_exceptions=False, **extra)(run_build_task)

    def run(tasks: list[BuildTask]) -> Iterator[tuple[BuildTask, tuple[str, int, int]]]:
        queue = list(tasks)
        pending: dict[Any, BuildTask] = {}
        try:
            while queue or pending:
                while queue and len(pending) < max_concurrency:
                    t = queue.pop(0)
                    pending[remote.remote(t)] = t
                ready, _ = ray.wait(list(pending), num_returns=1)
                for ref in ready:
                    task = pending.pop(ref)
                    yield task, ray.get(ref)
        finally:
            for ref in pending:
                ray.cancel(ref, force=True)

    return run
