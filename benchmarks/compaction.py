"""Compaction throughput against the physical limit and against peers, peak RSS, and worker scaling.

    .venv/bin/python -m benchmarks.compaction [--quick]

(a) 40 fragments with row groups of at least 4 MiB: binary copy vs full rewrite vs `cat` + fsync.
(b) 2,000,000 rows in 400 fragments of 5,000 rows: full rewrite (worker, and the whole Ray job)
    vs pylance compact_files (reencode, binary copy) and deltalake optimize.compact, if installed.
(c) peak RSS of a compaction task for groups of 100 and 400 fragments (bounded by config, not size).
(d) the Ray job with 1 vs 2 workers.
(e) a mixed table (large clean fragments, large ones with a few deleted rows in one row group each,
    runs of small fragments): hybrid with the clean row groups copied vs full rewrite of the same rows.
(s3) (a)'s table on a moto S3 server in this process: binary copy, its GET count, against GETting
    every file and PUTting their concatenation (reported, no target).
(f) read after compaction: benchmarks.read_after_compaction on local disk, one round (its own command
    adds moto S3 and three rounds); --no-read-after skips it.
Every ratio is against a baseline measured in the same run.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np
import pyarrow as pa

import lamina
from lamina.jobs.demo import sample_rows
from lamina.planner import CompactionOptions, plan_compaction
from lamina.workers.compaction import GroupCompactor, GroupTask, tasks_for

MiB = 1 << 20


def timed(fn):
    """Seconds ``fn`` takes, and its result. The garbage of earlier parts is collected first (same for
    every contender): a full collection set off by a contender's first allocations would otherwise
    time the benchmark's leftovers (measured: ~197,000 boto3/moto objects after the S3 part)."""
    gc.collect()
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def one_group_task(table: lamina.Table, options: CompactionOptions, manifest=None) -> GroupTask:
    """The task of the one group a plan of ``manifest`` (default: the table's) makes."""
    manifest = manifest or table.manifest
    plan = plan_compaction(manifest, options, table.uri)
    assert len(plan.groups) == 1, plan.describe()
    [task] = tasks_for(plan, manifest, table.uri, None, table.write_options, options.read_batch_bytes)
    return task


def local_file(table: lamina.Table, path: str) -> str:
    """Where a file of a local table is (the benchmarks run on local directories)."""
    return os.path.join(table.uri, path)


def wide_rows(start: int, n: int) -> pa.Table:
    rng = np.random.default_rng(start)
    cols = {"id": np.arange(start, start + n, dtype=np.int64)}
    for c in range(5):
        cols[f"f{c}"] = rng.random(n)
    return pa.table(cols)


def bench_a(root: str, fragments: int, rows: int) -> dict:
    uri = os.path.join(root, "a")
    t = lamina.create_table(uri, wide_rows(0, 1).schema, row_group_rows=rows)
    for i in range(fragments):
        t.append(wide_rows(i * rows, rows))
    files = [local_file(t, f.path) for f in t.manifest.fragments]
    total = sum(os.path.getsize(f) for f in files)
    min_rg = min(g.bytes for f in t.manifest.fragments for g in f.row_groups)

    def cat():
        out = os.path.join(root, "cat.out")
        subprocess.run(f"cat {' '.join(files)} > {out} && sync {out}", shell=True, check=True)
        os.remove(out)

    opts = CompactionOptions(
        target_rows_per_fragment=fragments * rows + 1, target_bytes_per_fragment=64 * 1024 * MiB, min_row_group_bytes=4 * MiB
    )
    results = {}
    cat_s = min(timed(cat)[0] for _ in range(3))
    for mode, o in (("binary_copy", opts), ("full_rewrite", opts.with_overrides(enable_binary_copy=False))):
        best = None
        for _ in range(3 if mode == "binary_copy" else 1):
            task = one_group_task(t, o)
            s, r = timed(lambda task=task: GroupCompactor().run(task))
            assert r.ok and r.mode == mode, (r.mode, r.error)
            os.remove(local_file(t, r.fragment.path))
            best = s if best is None else min(best, s)
        results[mode] = best
    return {
        "fragments": fragments,
        "bytes": total,
        "min_row_group_bytes": min_rg,
        "cat_fsync_s": cat_s,
        "uri": uri,
        **{f"{k}_s": v for k, v in results.items()},
    }


def bench_s3(root: str, uri: str, fragments: int, rows: int) -> dict:
    """(a)'s table uploaded to a moto S3 bucket: binary copy of it vs GET every file + PUT the concatenation."""
    import boto3

    from benchmarks.read_after_compaction import DUMMY, lamina_options, upload
    from lamina.testing import MotoServer

    os.environ.update(DUMMY)
    server = MotoServer().start()
    client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
    client.create_bucket(Bucket="bench-a")
    upload(uri, client, "bench-a")
    options = lamina_options(server.endpoint)
    t = lamina.open_table("s3://bench-a/t", storage_options=options)
    keys = [f"t/{f.path}" for f in t.manifest.fragments]
    total = sum(f.file_bytes for f in t.manifest.fragments)

    def get_put():
        out = os.path.join(root, "s3cat.out")
        with open(out, "wb") as w:
            for k in keys:
                client.download_fileobj("bench-a", k, w)
        client.upload_file(out, "bench-a", "cat.out")
        os.remove(out)

    base_s = min(timed(get_put)[0] for _ in range(2))
    opts = CompactionOptions(
        target_rows_per_fragment=fragments * rows + 1, target_bytes_per_fragment=64 * 1024 * MiB, min_row_group_bytes=4 * MiB
    )
    best, gets = None, None
    for _ in range(2):
        plan = plan_compaction(t.manifest, opts, t.uri)
        [task] = tasks_for(plan, t.manifest, t.uri, options, t.write_options, opts.read_batch_bytes)
        before = server.requests("bench-a")
        s, r = timed(lambda task=task: GroupCompactor().run(task))
        assert r.ok and r.mode == "binary_copy", (r.mode, r.error)
        after = server.requests("bench-a")
        t.store.delete(r.fragment.path)
        if best is None or s < best:
            best, gets = s, {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) != before.get(k, 0)}
            worker_gets = r.get_requests
    return {
        "bytes": total,
        "files": len(keys),
        "get_put_s": base_s,
        "binary_copy_s": best,
        "server_requests": gets,
        "worker_get_requests": worker_gets,
        "read_batch_bytes": opts.read_batch_bytes,
    }


def bench_e(root: str, quick: bool) -> dict:
    """(e) One group mixing large clean fragments, large ones with deleted rows in one row group, and small ones."""
    uri = os.path.join(root, "e")
    t = lamina.create_table(uri, sample_rows(0, 1).schema, row_group_rows=55_000)  # the demo schema
    n_large = 4 if quick else 8
    start = 0
    for i in range(n_large):
        t.append(sample_rows(start, 110_000))  # two row groups of 55,000 rows
        start += 110_000
        if i % 2:  # a few deleted rows in the second row group of every other one
            t.delete(f"id IN ({start - 1000}, {start - 999}, {start - 7})")
        for _ in range(10):  # a run of small fragments after each
            t.append(sample_rows(start, 2000))
            start += 2000
    opts = CompactionOptions(
        target_rows_per_fragment=start + 1, target_bytes_per_fragment=64 * 1024 * MiB, min_row_group_bytes=MiB
    )
    out: dict = {"rows": t.count_rows(), "fragments": len(t.manifest.fragments)}
    for mode, o in (("hybrid", opts), ("full_rewrite", opts.with_overrides(enable_binary_copy=False))):
        task = one_group_task(t, o)
        s, r = timed(lambda task=task: GroupCompactor().run(task))
        assert r.ok and r.mode == mode, (r.mode, r.reason, r.error)
        assert r.rows_out == out["rows"]
        os.remove(local_file(t, r.fragment.path))
        out[f"{mode}_s"] = s
        out[f"{mode}_copied"], out[f"{mode}_encoded"] = r.row_groups_copied, r.row_groups_encoded
        if mode == "hybrid":
            out["reason"] = r.reason
            out["resolved_copy"] = sum(1 for x in r.resolved if x[2] == "copy")
            out["resolved_encode"] = sum(1 for x in r.resolved if x[2] == "encode")
    return out


def build_b(root: str, fragments: int, rows: int) -> tuple[str, pa.Table]:
    uri = os.path.join(root, "b")
    t = lamina.create_table(uri, sample_rows(0, 1).schema)
    data = sample_rows(0, fragments * rows)
    for i in range(fragments):
        t.append(data.slice(i * rows, rows))
    return uri, data


def bench_b(root: str, uri: str, data: pa.Table, fragments: int, rows: int) -> dict:
    out: dict = {}
    t = lamina.open_table(uri)
    opts = CompactionOptions(target_rows_per_fragment=fragments * rows + 1, target_bytes_per_fragment=64 * 1024 * MiB)
    task = one_group_task(t, opts)
    out["lamina_full_rewrite_worker_s"], r = timed(lambda: GroupCompactor().run(task))
    assert r.ok and r.mode == "full_rewrite", r.error
    os.remove(local_file(t, r.fragment.path))
    try:
        import lance

        for mode in ("reencode", "binary_copy"):
            path = os.path.join(root, f"lance-{mode}")
            for i in range(fragments):
                lance.write_dataset(data.slice(i * rows, rows), path, mode="append" if i else "create")
            ds = lance.dataset(path)
            kwargs = {"target_rows_per_fragment": fragments * rows + 1}
            if mode == "binary_copy":
                kwargs["compaction_mode"] = "try_binary_copy"
            try:
                out[f"pylance_{mode}_s"], _ = timed(lambda ds=ds, kwargs=kwargs: ds.optimize.compact_files(**kwargs))
            except (TypeError, ValueError) as e:
                out[f"pylance_{mode}_s"] = f"unsupported: {e}"
    except ImportError:
        out["pylance"] = "not installed"
    try:
        from deltalake import DeltaTable, write_deltalake

        path = os.path.join(root, "delta")
        for i in range(fragments):
            write_deltalake(path, data.slice(i * rows, rows), mode="append")
        out["deltalake_optimize_s"], _ = timed(lambda: DeltaTable(path).optimize.compact())
    except ImportError:
        out["deltalake"] = "not installed"
    return out


def rss_child(uri: str, fragments: int) -> None:
    """(c) In a fresh process: run one group of the first ``fragments`` fragments, print peak RSS growth."""
    t = lamina.open_table(uri)
    frags = t.manifest.fragments[:fragments]
    opts = CompactionOptions(target_rows_per_fragment=10**9, target_bytes_per_fragment=64 * 1024 * MiB)
    task = one_group_task(t, opts, t.manifest.replace(fragments=frags))
    with open("/proc/self/clear_refs", "w") as f:  # resets VmHWM, the peak RSS, to the current RSS
        f.write("5")
    base = _status_kib("VmRSS")
    r = GroupCompactor().run(task)
    assert r.ok, r.error
    os.remove(local_file(t, r.fragment.path))
    peak = _status_kib("VmHWM")
    width = t.checkout(t.version).to_arrow().slice(0, 10_000).nbytes / 10_000
    bound = memory_bound(t.write_options.row_group_rows, width, len(frags))
    print(
        json.dumps(
            {
                "fragments": fragments,
                "input_bytes": sum(f.file_bytes for f in frags),
                "bound_mib": bound / MiB,
                "output_bytes": r.bytes_out,
                "rss_before_mib": base / 1024,
                "peak_growth_mib": (peak - base) / 1024,
            }
        )
    )


def memory_bound(row_group_rows: int, row_bytes: float, fragments: int) -> float:
    """The documented bound of a compaction task's memory above its baseline (docs/OPERATIONS.md)."""
    in_flight = min(4, os.cpu_count() or 1)  # row groups encoded at once (native/src/copy)
    return 64 * MiB + (4 + 2 * in_flight) * row_group_rows * row_bytes + 100 * 1024 * fragments


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def bench_c(uri: str) -> list[dict]:
    out = []
    for n in (100, 400):
        p = subprocess.run(
            [sys.executable, "-m", "benchmarks.compaction", "--rss-child", uri, str(n)],
            capture_output=True,
            text=True,
            check=True,
        )
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return out


def bench_d(root: str, uri: str) -> dict:
    from lamina.compaction import compact
    from lamina.workers import runtime

    out = {}
    runtime.connect(num_cpus=2)
    try:
        for workers in (1, 2):
            copy = os.path.join(root, f"d{workers}")
            shutil.copytree(uri, copy)
            opts = CompactionOptions(target_rows_per_fragment=500_000, max_concurrency=workers)
            s, (_, summary) = timed(lambda copy=copy, opts=opts: compact(copy, opts))
            assert summary.failed_groups == 0
            out[f"job_{workers}_workers_s"] = s
            out["groups"] = len(summary.groups)
    finally:
        runtime.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller run for a smoke test")
    ap.add_argument("--no-s3", action="store_true", help="skip the moto S3 variant of (a)")
    ap.add_argument("--only", choices=["a", "e"], help="run (a) [with s3] or (e) only")
    ap.add_argument(
        "--no-read-after",
        action="store_true",
        help="skip (f), how the outputs read (benchmarks.read_after_compaction on local disk, one round)",
    )
    ap.add_argument("--rss-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child[0], int(args.rss_child[1]))
        return
    root = tempfile.mkdtemp(prefix="lamina-bench-compact-")
    try:
        fa, ra = (8, 110_000) if args.quick else (40, 110_000)
        fb, rb = (40, 5000) if args.quick else (400, 5000)
        if args.only in (None, "a"):
            a = bench_a(root, fa, ra)
            mb = a["bytes"] / MiB
            print(f"(a) {a['fragments']} fragments, {mb:.0f} MiB, smallest row group {a['min_row_group_bytes'] / MiB:.1f} MiB")
            print(f"    cat + fsync        {a['cat_fsync_s']:7.3f} s  {mb / a['cat_fsync_s']:7.0f} MiB/s")
            print(
                f"    binary copy        {a['binary_copy_s']:7.3f} s  {mb / a['binary_copy_s']:7.0f} MiB/s  "
                f"= {a['cat_fsync_s'] / a['binary_copy_s']:.2f}x cat throughput"
            )
            print(
                f"    full rewrite       {a['full_rewrite_s']:7.3f} s  {mb / a['full_rewrite_s']:7.0f} MiB/s  "
                f"binary copy is {a['full_rewrite_s'] / a['binary_copy_s']:.1f}x faster"
            )

            if not args.no_s3:
                s3 = bench_s3(root, a["uri"], fa, ra)
                mb3 = s3["bytes"] / MiB
                print(
                    f"(s3) the same {s3['files']} files on a moto S3 server (in this process), reads of up to "
                    f"{s3['read_batch_bytes'] / MiB:.0f} MiB"
                )
                print(f"    GET each + PUT cat {s3['get_put_s']:7.3f} s  {mb3 / s3['get_put_s']:7.0f} MiB/s")
                print(
                    f"    binary copy        {s3['binary_copy_s']:7.3f} s  {mb3 / s3['binary_copy_s']:7.0f} MiB/s  "
                    f"= {s3['get_put_s'] / s3['binary_copy_s']:.2f}x; worker GETs {s3['worker_get_requests']}, "
                    f"server requests {s3['server_requests']}"
                )

        if args.only in (None, "e"):
            e = bench_e(root, args.quick)
            print(f"\n(e) mixed table: {e['rows']:,} rows in {e['fragments']} fragments, one group ({e['reason']})")
            print(
                f"    hybrid             {e['hybrid_s']:7.3f} s  {e['hybrid_copied']} row groups copied "
                f"({e['resolved_copy']} of them copy_if_clean), {e['hybrid_encoded']} written re-encoded "
                f"({e['resolved_encode']} copy_if_clean held deleted rows)"
            )
            print(
                f"    full rewrite       {e['full_rewrite_s']:7.3f} s  {e['full_rewrite_encoded']} row groups written: "
                f"hybrid is {e['full_rewrite_s'] / e['hybrid_s']:.2f}x faster"
            )

        if args.only is None:
            uri, data = build_b(root, fb, rb)
            b = bench_b(root, uri, data, fb, rb)
            base = b["lamina_full_rewrite_worker_s"]
            print(f"\n(b) {fb * rb:,} rows in {fb} fragments of {rb:,} rows")
            for k, v in b.items():
                faster = isinstance(v, float) and k != "lamina_full_rewrite_worker_s"
                ratio = f"  lamina full rewrite is {v / base:.2f}x faster" if faster else ""
                print(f"    {k:32s} {v if isinstance(v, str) else f'{v:7.3f} s'}{ratio}")

            print("\n(c) peak RSS growth of one compaction task (full rewrite), by group size")
            for c in bench_c(uri) if not args.quick else []:
                print(
                    f"    {c['fragments']:4d} fragments, {c['input_bytes'] / MiB:6.1f} MiB in: "
                    f"peak +{c['peak_growth_mib']:.0f} MiB, "
                    f"bound {c['bound_mib']:.0f} MiB ({c['peak_growth_mib'] / c['bound_mib']:.2f} of it)"
                )

            d = bench_d(root, uri)
            print(
                f"\n(d) the Ray job over {d['groups']} groups: 1 worker {d['job_1_workers_s']:.2f} s, 2 workers "
                f"{d['job_2_workers_s']:.2f} s = {d['job_1_workers_s'] / d['job_2_workers_s']:.2f}x"
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if not args.only and not args.no_read_after:
        from benchmarks import read_after_compaction

        print(
            "\n(f) read after compaction: the same rows uncompacted, binary-copied, hybrid and fully rewritten, read back "
            "(benchmarks.read_after_compaction --only local --rounds 1; its own command adds S3 and rounds)",
            flush=True,
        )
        read_after_compaction.main(["--only", "local", "--rounds", "1"] + (["--quick"] if args.quick else []))


if __name__ == "__main__":
    main()
