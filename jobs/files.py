"""Files job: the data files of a table version and the rows of each it holds, for engines that read Parquet themselves.

    python -m lamina.jobs.files URI [--version N] [--json] [--storage-option k=v ...]

A version's rows are the files it lists minus their deleted rows, not every file under data/
(``Table.live_files``). Prints one line per file (location, rows, live rows, deleted rows), or with
``--json`` one document: ``{"uri", "version", "live_rows", "files": [LiveFile.to_dict(), ...]}``,
whose ``keep`` ranges an engine filters each file's row numbers by (docs/OPERATIONS.md, "Reading the
files with another engine"). Exit status: 0, 1 when the table or version cannot be read, 2 for bad
arguments. Nothing is changed.
"""

from __future__ import annotations

import argparse
import json
import sys

import lamina
from lamina.errors import LaminaError
from lamina.jobs.cli import failed, storage_options


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.files") -> int:
    ap = argparse.ArgumentParser(prog=prog, description="List the data files of a Lamina table version and their live rows.")
    ap.add_argument("uri", help="table location: a local path or s3://bucket/prefix")
    ap.add_argument("--version", type=int, help="the version to list (default: the latest)")
    ap.add_argument("--json", action="store_true", help="print one JSON document with every file's deleted rows and keep ranges")
    ap.add_argument("--storage-option", action="append", default=[], metavar="KEY=VALUE", help="S3 storage option")
    args = ap.parse_args(argv)
    try:
        table = lamina.open_table(args.uri, version=args.version, storage_options=storage_options(args.storage_option))
        files = table.live_files()
    except LaminaError as e:
        return failed(e)
    live = sum(f.live_rows for f in files)
    if args.json:
        doc = {"uri": table.uri, "version": table.version, "live_rows": live, "files": [f.to_dict() for f in files]}
        print(json.dumps(doc, indent=2))
        return 0
    for f in files:
        print(f"{f.uri}  rows {f.rows}  live {f.live_rows}  deleted {len(f.deleted)}")
    print(
        f"{table.uri} version {table.version}: {len(files)} files, {live:,} live rows of {sum(f.rows for f in files):,}; "
        "read each file minus its deleted rows (--json lists them)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
