"""The README's main job on the embedded default: a local directory table and a local Ray.

    python -m jobs.demo [--uri DIR] [--fragments N] [--rows-per-fragment N]

Ray tasks append small fragments concurrently (each a real commit racing the
others), then the driver deletes some rows and prints the table's summary and
checks every row is there exactly once. The compaction issue turns this into a
compaction run over those small fragments.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time

import numpy as np
import pyarrow as pa

import lamina

SCHEMA = pa.schema([
    ("id", pa.int64()),
    ("ts", pa.timestamp("us", tz="UTC")),
    ("host", pa.string()),
    ("value", pa.float64()),
    ("embedding", pa.list_(pa.float32(), 8)),
    ("attrs", pa.struct([("region", pa.string()), ("code", pa.int32())])),
])


def sample_rows(start: int, n: int) -> pa.Table:
    """``n`` rows with ids from ``start``: ints, timestamps, strings, a float vector, a struct with nulls."""
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n, dtype=np.int64)
    attrs = [None if i % 11 == 0 else {"region": ("eu", "us", "ap")[i % 3], "code": None if i % 5 == 0 else i % 1000}
             for i in ids.tolist()]
    return pa.table({
        "id": ids,
        "ts": pa.array(np.datetime64("2026-01-01T00:00:00", "us") + ids.astype("timedelta64[ms]"), pa.timestamp("us", tz="UTC")),
        "host": pa.array([f"host-{i % 50:02d}" for i in ids.tolist()]),
        "value": rng.normal(size=n),
        "embedding": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8),
        "attrs": pa.array(attrs, SCHEMA.field("attrs").type),
    }, schema=SCHEMA)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m jobs.demo", description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default="demo_table", help="table location (default: ./demo_table, recreated)")
    ap.add_argument("--fragments", type=int, default=400)
    ap.add_argument("--rows-per-fragment", type=int, default=5000)
    ap.add_argument("--tasks", type=int, default=8, help="concurrent Ray writer tasks")
    args = ap.parse_args(argv)

    import ray

    if os.path.isdir(args.uri):
        shutil.rmtree(args.uri)
    uri = os.path.abspath(args.uri)
    table = lamina.create_table(uri, SCHEMA)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=2, include_dashboard=False, configure_logging=False, log_to_driver=False)

    @ray.remote
    def writer(task: int) -> list[int]:
        t = lamina.open_table(uri)
        versions = []
        for frag in range(task, args.fragments, args.tasks):
            versions.append(t.append(sample_rows(frag * args.rows_per_fragment, args.rows_per_fragment)))
        return versions

    start = time.perf_counter()
    pending = [writer.remote(i) for i in range(args.tasks)]
    done = 0
    while pending:
        ready, pending = ray.wait(pending, timeout=2.0)
        done += len(ready)
        latest = table.reload()
        print(f"  writing: {len(latest.fragments())}/{args.fragments} fragments committed, version {latest.version}", flush=True)
    ray.shutdown()
    table.reload()
    elapsed = time.perf_counter() - start
    total = args.fragments * args.rows_per_fragment
    deleted = table.delete("attrs.region = 'ap' AND id < 100000")

    stats = table.stats()
    print(f"\nTable {stats.uri}")
    print(f"  version {stats.version} ({stats.versions} versions), {stats.fragments} fragments, {stats.row_groups} row groups")
    print(f"  {stats.rows:,} live rows, {stats.deleted_rows:,} deleted, {stats.data_bytes / 2**20:.1f} MiB of Parquet")
    print(f"  mean {stats.mean_rows_per_fragment:,.0f} rows per fragment: a compaction candidate")
    print(f"  wrote {total:,} rows in {elapsed:.1f} s from {args.tasks} Ray tasks racing to commit")

    ids = table.to_arrow(columns=["id"]).column("id").to_numpy()
    expected = np.setdiff1d(np.arange(total), [i for i in range(min(total, 100000)) if i % 11 and i % 3 == 2])
    ok = len(ids) == len(np.unique(ids)) and np.array_equal(np.sort(ids), expected) and deleted == total - len(expected)
    print(f"  check: every row present exactly once: {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
