"""Ingestion job: one WAL applier actor per shard, kept running; progress on stderr.

    python -m lamina.jobs.ingest URI --shards N [--flush-rows N] [--flush-seconds S] [--retention-seconds S]
                              [--until-idle S] [--json] [--storage-option k=v ...]

Producers write with ``lamina.wal.WalWriter(URI, shard)`` (route a key with
``lamina.ingest.shard_for(key, N)``). The actors are named and detached: running the job
again attaches to them. ``--until-idle S`` flushes and stops once no new rows arrived for S
seconds (batch use, tests); otherwise the job runs until interrupted, then flushes and stops.
From Python: ``lamina.ingestion.Ingestion.start(uri, shards)`` gives the same with ``get``/``get_many``.

Exit status: 0 done, 1 a failure (a shard stopped: its error is logged), 2 bad arguments.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from lamina.errors import LaminaError
from lamina.ingest import IngestOptions
from lamina.ingestion import Ingestion
from lamina.jobs.cli import failed, log_to_stderr, storage_options

log = logging.getLogger("lamina.ingest")


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.ingest") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="Apply a Lamina table's WAL with Ray actors.")
    ap.add_argument("uri")
    ap.add_argument("--shards", type=int, required=True)
    ap.add_argument("--flush-rows", type=int, default=IngestOptions.flush_rows)
    ap.add_argument("--flush-bytes", type=int, default=IngestOptions.flush_bytes)
    ap.add_argument("--flush-seconds", type=float, default=IngestOptions.flush_seconds)
    ap.add_argument("--retention-seconds", type=float, default=IngestOptions.retention_seconds)
    ap.add_argument("--until-idle", type=float, help="flush and stop after this many seconds without new rows")
    ap.add_argument("--json", action="store_true", help="print the final per-shard stats as JSON")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE")
    args = ap.parse_args(argv)
    log_to_stderr()
    try:
        options = IngestOptions(
            flush_rows=args.flush_rows,
            flush_bytes=args.flush_bytes,
            flush_seconds=args.flush_seconds,
            retention_seconds=args.retention_seconds,
        )
        ingestion = Ingestion.start(args.uri, args.shards, storage_options=storage_options(args.storage_option), options=options)
    except LaminaError as e:
        return failed(e)
    last_applied, idle_since = -1, time.monotonic()
    reported: set[int] = set()
    try:
        while True:
            time.sleep(1.0)
            stats = ingestion.stats()
            for s in stats:
                if s.get("error") and s["shard"] not in reported:
                    reported.add(s["shard"])
                    log.error("ingest: %s", s["error"])
            applied = sum(s["applied_rows"] for s in stats)
            log.info(
                "ingest: %s",
                "; ".join(
                    f"shard {s['shard']}: applied {s['applied_rows']:,}, flushed {s['flushed_rows']:,}, "
                    f"in memtable {s['memtable_rows']:,}, version {s['version']}"
                    for s in stats
                ),
            )
            if applied != last_applied:
                last_applied, idle_since = applied, time.monotonic()
            elif args.until_idle is not None and time.monotonic() - idle_since >= args.until_idle:
                break
    except KeyboardInterrupt:
        log.info("interrupted: flushing")
    try:
        errors = ingestion.flush_each()
        stats = ingestion.stats()
    finally:
        ingestion.stop(flush=False)
    for shard, error in sorted(errors.items()):
        if shard not in reported:  # a stopped shard (or a failed flush): its unflushed rows stay in the WAL
            log.error("ingest: shard %d: %s", shard, error)
    if args.json:
        print(json.dumps(stats, indent=2, default=str))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
