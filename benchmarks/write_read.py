"""Append and full-scan throughput against plain pyarrow Parquet, and commit latency under contention.

    .venv/bin/python -m benchmarks.write_read [--rows 2000000] [--files 8] [--commits 40]

Baselines, measured in the same run on the same data and disk:
  write: pyarrow.parquet.write_table with the same compression (zstd) and row-group size, same file count;
  scan:  pyarrow.parquet.read_table of those plain files.
Commit latency: N processes each committing small appends to one table at once (local directory).
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

import lamina
from lamina.jobs.demo import SCHEMA, sample_rows


def best_of(n: int, fn) -> float:
    times = []
    for _ in range(n):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def _committer(args) -> tuple[list[float], float]:
    uri, worker, commits, barrier_at = args
    t = lamina.open_table(uri)
    batch = sample_rows(worker * 1_000_000, 10)
    while time.time() < barrier_at:
        time.sleep(0.001)
    lat = []
    for _ in range(commits):
        t0 = time.perf_counter()
        t.append(batch)
        lat.append(time.perf_counter() - t0)
    return lat, time.time()


def commit_latency(root: str, writers: int, commits: int) -> dict[str, float]:
    uri = os.path.join(root, f"commits-{writers}")
    lamina.create_table(uri, SCHEMA)
    ctx = mp.get_context("spawn")
    with ctx.Pool(writers) as pool:
        start_at = time.time() + 5.0  # every process imported and ready before the race starts
        results = pool.map(_committer, [(uri, w, commits, start_at) for w in range(writers)])
    wall = max(end for _, end in results) - start_at
    flat = sorted(x for lat, _ in results for x in lat)
    total = lamina.open_table(uri)
    assert total.version == 1 + writers * commits, "a commit was lost"
    return {
        "p50_ms": 1000 * statistics.median(flat),
        "p95_ms": 1000 * flat[int(0.95 * (len(flat) - 1))],
        "commits_per_s": len(flat) / wall,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--files", type=int, default=8)
    ap.add_argument("--commits", type=int, default=40, help="commits per writer in the latency test")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dir", default=None, help="scratch directory (default: a temp dir)")
    args = ap.parse_args()

    root = tempfile.mkdtemp(prefix="lamina-bench-", dir=args.dir)
    try:
        data = sample_rows(0, args.rows)
        per_file = -(-args.rows // args.files)
        mib = data.nbytes / 2**20
        print(f"data: {args.rows:,} rows, {mib:.0f} MiB in Arrow, {args.files} files of {per_file:,} rows; best of {args.repeat}")

        plain_dir = os.path.join(root, "plain")

        def write_plain():
            shutil.rmtree(plain_dir, ignore_errors=True)
            os.makedirs(plain_dir)
            for i in range(args.files):
                pq.write_table(
                    data.slice(i * per_file, per_file),
                    os.path.join(plain_dir, f"{i}.parquet"),
                    compression="zstd",
                    compression_level=3,
                    row_group_size=131_072,
                    write_page_index=True,
                )

        counter = iter(range(10**6))

        def write_lamina():
            uri = os.path.join(root, f"lamina-{next(counter)}")
            t = lamina.create_table(uri, SCHEMA)
            t.append(data, max_rows_per_file=per_file)
            write_lamina.last = uri

        w_plain = best_of(args.repeat, write_plain)
        w_lamina = best_of(args.repeat, write_lamina)
        table = lamina.open_table(write_lamina.last)
        lamina_bytes = table.stats().data_bytes
        plain_bytes = sum(os.path.getsize(os.path.join(plain_dir, f)) for f in os.listdir(plain_dir))

        files = [os.path.join(plain_dir, f"{i}.parquet") for i in range(args.files)]
        s_plain = best_of(args.repeat, lambda: pa.concat_tables([pq.read_table(f) for f in files]))
        s_lamina = best_of(args.repeat, lambda: table.to_arrow())
        assert table.to_arrow().num_rows == args.rows

        print("\nthroughput (MiB of Arrow data per second)")
        print(f"  {'':18}{'lamina':>10}{'pyarrow':>10}{'ratio':>8}")
        print(f"  {'append / write':18}{mib / w_lamina:10.0f}{mib / w_plain:10.0f}{w_plain / w_lamina:8.2f}x")
        print(f"  {'full scan / read':18}{mib / s_lamina:10.0f}{mib / s_plain:10.0f}{s_plain / s_lamina:8.2f}x")
        print(f"  file bytes: lamina {lamina_bytes / 2**20:.1f} MiB, pyarrow {plain_bytes / 2**20:.1f} MiB")

        print("\ncommit latency, small appends racing on one local table")
        print(f"  {'writers':>8}{'p50 ms':>10}{'p95 ms':>10}{'commits/s':>12}")
        for writers in (1, 4, 8):
            r = commit_latency(root, writers, args.commits)
            print(f"  {writers:>8}{r['p50_ms']:10.1f}{r['p95_ms']:10.1f}{r['commits_per_s']:12.1f}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
