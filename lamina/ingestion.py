"""The client of a table's WAL ingestion: one applier actor per shard, started or attached by name.

    producers ──► lamina.wal.WalWriter(uri, shard)         (route a key: lamina.ingest.shard_for(key, shards))
    Ingestion.start(uri, shards) ──► lamina.workers.ingest.applier_actor(uri, shard) per shard
                                     (named, detached, restarted when its process dies)
    get / get_many                   point reads of rows applied but not yet flushed, and older ones
    flush / flush_each / stop        apply and flush what is committed now; stop removes the actors

``python -m lamina.jobs.ingest`` runs the same with progress on stderr.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lamina.errors import InvalidArgument
from lamina.ingest import IngestOptions, shard_for


class Ingestion:
    """Handles to the applier actors of one table, one per shard."""

    def __init__(self, uri: str, handles: list):
        self.uri, self.handles = uri, handles

    @classmethod
    def start(
        cls,
        uri: str,
        shards: int,
        *,
        storage_options: dict[str, Any] | None = None,
        options: IngestOptions | None = None,
        runtime_env: dict[str, Any] | None = None,
        actor_cpus: float = 0.25,
    ) -> Ingestion:
        """Starts the appliers of shards ``0..shards-1`` (or attaches to those already running) on the
        Ray cluster of this process (``RAY_ADDRESS``), or on a local Ray it starts."""
        from lamina.workers.ingest import applier_actor
        from lamina.workers.runtime import wait_ready

        if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
            raise InvalidArgument(f"shards must be a positive integer, got {shards!r}")
        handles = [applier_actor(uri, s, storage_options, options, runtime_env, actor_cpus) for s in range(shards)]
        wait_ready(handles)
        return cls(uri, handles)

    def get(self, pk: Any) -> dict | None:
        """The newest row of key ``pk`` (None: no such row)."""
        from lamina.workers.runtime import get

        return get(self.handles[shard_for(pk, len(self.handles))].get.remote(pk))

    def get_many(self, pks: Sequence[Any]) -> list[dict | None]:
        """``get`` for many keys, one call per shard."""
        from lamina.workers.runtime import get

        by_shard: dict[int, list[int]] = {}
        for i, pk in enumerate(pks):
            by_shard.setdefault(shard_for(pk, len(self.handles)), []).append(i)
        refs = {s: self.handles[s].get_many.remote([pks[i] for i in idx]) for s, idx in by_shard.items()}
        out: list[dict | None] = [None] * len(pks)
        for s, idx in by_shard.items():
            for i, row in zip(idx, get(refs[s])):
                out[i] = row
        return out

    def flush(self) -> list[int | None]:
        """Applies and flushes what is committed now, in every shard; the version each flush made.
        Raises a stopped shard's error: ``ShardStopped`` (a schema change), ``TableDropped`` (the table
        was dropped: its producers' writers raise it too)."""
        from lamina.workers.runtime import get

        return get([h.flush.remote() for h in self.handles])

    def stats(self) -> list[dict[str, Any]]:
        """Each shard's counters (``lamina.ingest.ApplierStats`` as a dict)."""
        from lamina.workers.runtime import get

        return get([h.stats.remote() for h in self.handles])

    def flush_each(self) -> dict[int, str]:
        """Flushes every running shard; returns the error of each shard that is stopped or could
        not flush (its unflushed rows stay in the WAL for the next run), by shard."""
        from lamina.workers.runtime import get

        errors: dict[int, str] = {}
        flushes = {}
        for h, s in zip(self.handles, self.stats()):
            if s.get("error"):
                errors[s["shard"]] = s["error"]
            else:
                flushes[s["shard"]] = h.flush.remote()
        for shard, ref in flushes.items():
            try:
                get(ref)
            except Exception as e:
                errors[shard] = f"could not flush: {e}"
        return errors

    def stop(self, flush: bool = True) -> dict[int, str]:
        """Flushes (by default) and removes the actors, whatever a shard's state; returns the
        errors ``flush_each`` found."""
        from lamina.workers.runtime import get, kill

        errors: dict[int, str] = {}
        try:
            if flush:
                errors = self.flush_each()
            get([h.stop.remote() for h in self.handles])
        finally:
            for h in self.handles:
                kill(h)
        return errors


__all__ = ["Ingestion", "IngestOptions", "shard_for"]
