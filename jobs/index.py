"""Index job: build a btree, bitmap or full-text index on Ray and commit it.

    python -m lamina.jobs.index URI --column C --kind btree|bitmap|fts [--name N] [--update] [--json]
                             [--stem] [--task-rows N] [--segment-rows N] [--max-concurrency N]
                             [--storage-option k=v ...]

Parses the request, shows progress and prints; the work is ``lamina.index.build.build_index``
(its pipeline: docs/ARCHITECTURE.md, "Data flow").

``--update`` indexes only the fragments the index does not cover (appended or
compacted since). Exit status: 0 on success, 1 on a failed build or commit, 2 for
bad arguments (unknown column or kind, unsupported type, existing name).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from lamina.errors import InvalidArgument, LaminaError
from lamina.index import KINDS, IndexOptions
from lamina.index.build import IndexBuild, build_index
from lamina.jobs.cli import Progress, failed, log_to_stderr, storage_options


def run(
    uri: str,
    column: str | None,
    kind: str | None,
    *,
    name: str | None = None,
    update: bool = False,
    options: IndexOptions | None = None,
    storage_options: dict[str, Any] | None = None,
    max_concurrency: int | None = None,
    runtime_env: dict[str, Any] | None = None,
    progress: bool = False,
) -> IndexBuild:
    """``lamina.index.build.build_index`` on Ray with the job's progress display."""
    return build_index(
        uri,
        column,
        kind,
        name=name,
        update=update,
        options=options,
        storage_options=storage_options,
        ray=True,
        max_concurrency=max_concurrency,
        runtime_env=runtime_env,
        progress=Progress(f"index {name or column}", "build tasks", enabled=progress),
    )


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.index") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="Build or update an index of a Lamina table on Ray.")
    ap.add_argument("uri", help="table location: a local path or s3://bucket/prefix")
    ap.add_argument("--column", help="column to index")
    ap.add_argument("--kind", choices=KINDS, help="btree (equality, IN, ranges), bitmap (low cardinality), fts (text)")
    ap.add_argument("--name", help="index name (default <column>_<kind>)")
    ap.add_argument("--update", action="store_true", help="index only the fragments the index does not cover yet")
    ap.add_argument("--stem", action="store_true", help="fts: English stemming")
    ap.add_argument("--task-rows", type=int, help=f"rows per build task (default {IndexOptions.task_rows})")
    ap.add_argument("--segment-rows", type=int, help=f"rows per merged segment (default {IndexOptions.segment_rows})")
    ap.add_argument("--max-concurrency", type=int, help="build tasks at once (default: cluster CPUs)")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help="S3 storage option")
    ap.add_argument("--json", action="store_true", help="print a machine-readable summary on stdout")
    args = ap.parse_args(argv)
    log_to_stderr()
    started = time.perf_counter()
    try:
        if not args.update and (args.column is None or args.kind is None):
            raise InvalidArgument("--column and --kind are required (or --update with --name or --column)")
        if args.update and args.name is None and args.column is None:
            raise InvalidArgument("--update needs --name or --column")
        sizes = {k: v for k, v in (("task_rows", args.task_rows), ("segment_rows", args.segment_rows)) if v is not None}
        options = IndexOptions(stem=args.stem, **sizes)
        result = run(
            args.uri,
            args.column,
            args.kind,
            name=args.name,
            update=args.update,
            options=options,
            storage_options=storage_options(args.storage_option),
            max_concurrency=args.max_concurrency,
            progress=not args.json,
        )
    except LaminaError as e:
        return failed(e)
    seconds = time.perf_counter() - started
    if args.json:
        print(json.dumps({**result.to_dict(), "seconds": round(seconds, 3)}, indent=2))
    elif result.action == "none":
        print(f"{args.uri}: index {result.name!r} already covers every fragment (version {result.version})")
    else:
        print(
            f"{args.uri}: {result.action}d index {result.name!r} ({result.kind} on {result.column}) at version "
            f"{result.version}: {result.segments} segment(s), {result.fragments} fragments, {result.rows:,} rows indexed, "
            f"{result.bytes:,} bytes; {result.uncovered_after} fragments uncovered; {seconds:.1f} s"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
