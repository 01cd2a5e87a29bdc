"""Upgrade job: convert a table's latest version to the current manifest format.

    python -m lamina.jobs.upgrade URI [--dry-run] [--json] [--storage-option k=v ...]

A table written by an older Lamina (manifest format 1: every fragment in each version's root)
gets one new version that changes no row, its fragments laid out in manifest segments
(docs/FORMAT.md §2.3). Any commit converts a table too; this does it now, e.g. before a table
grows large. Older versions stay as they were (time travel reads both formats). Exit status: 0
when the table is in the current format afterwards (or would be converted, with --dry-run), 1
when it cannot be read or committed, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import lamina
from lamina.errors import LaminaError
from lamina.jobs.cli import failed, log_to_stderr, storage_options


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.upgrade") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="Convert a Lamina table to the current manifest format.")
    ap.add_argument("uri", help="table location: a local path or s3://bucket/prefix")
    ap.add_argument("--dry-run", action="store_true", help="say which format the table is in; change nothing")
    ap.add_argument("--json", action="store_true", help="print a machine-readable report on stdout")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help="S3 storage option")
    args = ap.parse_args(argv)
    log_to_stderr()
    started = time.perf_counter()
    try:
        done = lamina.upgrade_table(args.uri, storage_options=storage_options(args.storage_option), dry_run=args.dry_run)
    except LaminaError as e:
        return failed(e)
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({**dataclasses.asdict(done), "dry_run": args.dry_run, "seconds": round(seconds, 3)}, indent=2))
    elif done.upgraded:
        print(
            f"{done.uri}: manifest format {done.from_format} -> {done.to_format}, committed as version {done.version} "
            f"(no row changed); {seconds:.1f} s"
        )
    elif done.from_format >= done.to_format:
        print(f"{done.uri}: already in manifest format {done.from_format} at version {done.version}; nothing to do")
    else:
        print(
            f"{done.uri}: version {done.version} is in manifest format {done.from_format}; "
            f"without --dry-run it would be converted to format {done.to_format}"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
