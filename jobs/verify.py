"""Verify job: read every file a table version needs and check it against the manifest.

    python -m lamina.jobs.verify URI [--version N] [--threads N] [--json] [--storage-option k=v ...]

Prints one line per damaged object (manifest root, segment list, segment, data, deletion or index
file) and a summary: every damage it can find, then the exit status: 0 when everything checks out,
1 when an object is missing, truncated or corrupt (or the table cannot be reached), 2 for bad
arguments. Nothing is changed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time

from lamina.errors import InvalidArgument, LaminaError, TableNotFound
from lamina.jobs.cli import failed, log_to_stderr, storage_options
from lamina.manifest import latest_version
from lamina.table import open_store
from lamina.verify import verify_version

log = logging.getLogger("lamina.verify")


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.verify") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="Check every file of a Lamina table version.")
    ap.add_argument("uri", help="table location: a local path or s3://bucket/prefix")
    ap.add_argument("--version", type=int, help="the version to check (default: the latest)")
    ap.add_argument("--threads", type=int, default=4, help="files checked at once (default 4)")
    ap.add_argument("--json", action="store_true", help="print a machine-readable report on stdout")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help="S3 storage option")
    args = ap.parse_args(argv)
    log_to_stderr()
    started = time.perf_counter()
    last = [started]

    def progress(done: int, total: int) -> None:
        now = time.perf_counter()
        if now - last[0] >= 10 or done == total:
            last[0] = now
            log.info("verified %d/%d files, %.1f s", done, total, now - started)

    try:
        if args.threads < 1:
            raise InvalidArgument(f"--threads must be at least 1, got {args.threads}")
        store = open_store(args.uri, storage_options(args.storage_option))
        version = args.version if args.version is not None else latest_version(store)
        if version is None:
            raise TableNotFound(f"no Lamina table at {store.uri} (no manifests under _versions/): check the URI")
        report = verify_version(store, version, threads=args.threads, progress=progress)
    except LaminaError as e:
        return failed(e)
    if args.json:
        print(json.dumps({**report.to_dict(), "seconds": round(time.perf_counter() - started, 3)}, indent=2))
    else:
        for problem in report.problems:
            print(problem)
        state = "OK" if report.ok else f"{len(report.problems)} problem(s)"
        print(
            f"{report.uri} version {report.version}: {state}; {report.files_checked} files, {report.bytes_checked:,} bytes "
            f"checked ({report.without_checksum} without a recorded checksum); {time.perf_counter() - started:.1f} s"
        )
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
