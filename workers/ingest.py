"""The WAL applier actor: one named, get-or-create Ray actor per (table, shard).

``WalApplier`` is the plain class; ``applier_actor`` is the thin Ray wrapper (through
``lamina.workers.runtime.named_actor``); ``lamina.ingestion.Ingestion`` is the client.

The actor runs ``ShardApplier.step`` in a background thread every ``poll_seconds`` and
serves ``get``/``get_many``/``flush``/``stats`` concurrently (the applier has a lock).
Ray restarts it when its process dies (``max_restarts=-1``); the new instance resumes
from the watermarks in the manifest, so a kill at any point loses and duplicates nothing.
A shard stopped by a schema change (``ShardStopped``) or by its table's drop (``TableDropped``)
ends the loop for good: the actor stays up, ``stats()["error"]`` says why, ``flush``/``get``
raise it. A restarted actor of a dropped table fails to start (``TableNotFound``).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from typing import Any

from lamina.ingest import IngestOptions, ShardApplier
from lamina.store.scheduler import io_stats

log = logging.getLogger("lamina.ingest")


def actor_name(uri: str, shard: int) -> str:
    return f"lamina-wal-{hashlib.sha1(uri.encode()).hexdigest()[:12]}-{int(shard)}"


class WalApplier:
    """Ray actor body (plain class: tests may run it without Ray)."""

    def __init__(self, uri: str, shard: int, storage_options: dict[str, Any] | None = None, options: IngestOptions | None = None):
        self.applier = ShardApplier(uri, shard, storage_options, options)
        self._stop = threading.Event()
        self._errors = 0
        self._thread = threading.Thread(target=self._loop, name=f"wal-applier-{shard}", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.applier.step()
                self._errors = 0
            except Exception:  # keep applying; the error is logged and retried with backoff
                if self.applier.stopped is not None:
                    return  # logged by the applier; retrying cannot help (schema change, or the table dropped)
                self._errors += 1
                log.exception("shard %d: applier step failed (%d in a row)", self.applier.shard, self._errors)
                self._stop.wait(min(30.0, 0.5 * 2 ** min(self._errors, 6)))
                continue
            self._stop.wait(self.applier.options.poll_seconds)

    def get(self, pk: Any) -> dict | None:
        return self.applier.get(pk)

    def get_many(self, pks: list[Any]) -> list[dict | None]:
        return self.applier.get_many(pks)

    def flush(self) -> int | None:
        """Applies what is committed now and flushes it, flush_bytes at a time; returns the last
        version (None: nothing to flush)."""
        return self.applier.drain()

    def remove_applied_segments(self) -> list[int]:
        return self.applier.remove_applied_segments()

    def stats(self) -> dict[str, Any]:
        """The applier's figures, ``io``: the object-store requests of this actor's process since it
        started (``lamina.io_stats`` shape; the job's ``--json`` prints them per shard), and ``running``:
        whether its loop still runs (it ends when the shard stops, ``error``)."""
        return {**self.applier.snapshot().__dict__, "io": io_stats(), "running": self._thread.is_alive()}

    def ready(self) -> bool:
        return True

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)


def applier_actor(
    uri: str,
    shard: int,
    storage_options: dict[str, Any] | None = None,
    options: IngestOptions | None = None,
    runtime_env: dict[str, Any] | None = None,
    actor_cpus: float = 0.25,
) -> Any:
    """The applier actor of (uri, shard), created if it does not exist (detached: it outlives the caller)."""
    from lamina.workers.runtime import named_actor

    return named_actor(
        WalApplier,
        actor_name(uri, shard),
        (uri, shard, storage_options, options),
        runtime_env=runtime_env,
        num_cpus=actor_cpus,
        max_concurrency=4,
    )
