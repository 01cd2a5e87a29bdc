"""Compaction throughput against the physical limit and against peers, peak RSS, and worker scaling.

    .venv/bin/python -m benchmarks.compaction [--quick]

(a) 40 fragments with row groups of at least 4 MiB: binary copy vs full rewrite vs `cat` + fsync.
(b) 2,000,000 rows in 400 fragments of 5,000 rows: full rewrite (worker, and the whole Ray job)
    vs pylance compact_files (reencode, binary copy) and deltalake optimize.compact, if installed.
(c) peak RSS of a compaction task for groups of 100 and 400 fragments (bounded by config, not size).
(d) the Ray job with 1 vs 2 workers.
Every ratio is against a baseline measured in the same run.
"""

from __future__ import annotations

import argparse
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
from jobs.demo import sample_rows
from planner import CompactionOptions, plan_compaction
from workers.compaction import GroupCompactor, GroupTask, tasks_for

MiB = 1 << 20


def timed(fn):
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

    opts = CompactionOptions(target_rows_per_fragment=fragments * rows + 1, target_bytes_per_fragment=64 * 1024 * MiB,
                             min_row_group_bytes=4 * MiB)
    results = {}
    cat_s = min(timed(cat)[0] for _ in range(3))
    for mode, o in (("binary_copy", opts), ("full_rewrite", opts.with_overrides(enable_binary_copy=False))):
        best = None
        for _ in range(3 if mode == "binary_copy" else 1):
            task = one_group_task(t, o)
            s, r = timed(lambda: GroupCompactor().run(task))
            assert r.ok and r.mode == mode, (r.mode, r.error)
            os.remove(local_file(t, r.fragment.path))
            best = s if best is None else min(best, s)
        results[mode] = best
    return {"fragments": fragments, "bytes": total, "min_row_group_bytes": min_rg, "cat_fsync_s": cat_s, **{f"{k}_s": v for k, v in results.items()}}


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
                out[f"pylance_{mode}_s"], _ = timed(lambda: ds.optimize.compact_files(**kwargs))
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
    print(json.dumps({"fragments": fragments, "input_bytes": sum(f.file_bytes for f in frags), "bound_mib": bound / MiB,
                      "output_bytes": r.bytes_out, "rss_before_mib": base / 1024, "peak_growth_mib": (peak - base) / 1024}))


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
        p = subprocess.run([sys.executable, "-m", "benchmarks.compaction", "--rss-child", uri, str(n)],
                           capture_output=True, text=True, check=True)
        out.append(json.loads(p.stdout.strip().splitlines()[-1]))
    return out


def bench_d(root: str, uri: str) -> dict:
    from lamina.compaction import compact
    from workers import runtime

    out = {}
    runtime.connect(num_cpus=2)
    try:
        for workers in (1, 2):
            copy = os.path.join(root, f"d{workers}")
            shutil.copytree(uri, copy)
            opts = CompactionOptions(target_rows_per_fragment=500_000, max_concurrency=workers)
            s, (_, summary) = timed(lambda: compact(copy, opts))
            assert summary.failed_groups == 0
            out[f"job_{workers}_workers_s"] = s
            out["groups"] = len(summary.groups)
    finally:
        runtime.shutdown()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a smaller run for a smoke test")
    ap.add_argument("--rss-child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.rss_child:
        rss_child(args.rss_child[0], int(args.rss_child[1]))
        return
    root = tempfile.mkdtemp(prefix="lamina-bench-compact-")
    try:
        fa, ra = (8, 110_000) if args.quick else (40, 110_000)
        fb, rb = (40, 5000) if args.quick else (400, 5000)
        a = bench_a(root, fa, ra)
        mb = a["bytes"] / MiB
        print(f"(a) {a['fragments']} fragments, {mb:.0f} MiB, smallest row group {a['min_row_group_bytes'] / MiB:.1f} MiB")
        print(f"    cat + fsync        {a['cat_fsync_s']:7.3f} s  {mb / a['cat_fsync_s']:7.0f} MiB/s")
        print(f"    binary copy        {a['binary_copy_s']:7.3f} s  {mb / a['binary_copy_s']:7.0f} MiB/s  "
              f"= {a['cat_fsync_s'] / a['binary_copy_s']:.2f}x cat throughput")
        print(f"    full rewrite       {a['full_rewrite_s']:7.3f} s  {mb / a['full_rewrite_s']:7.0f} MiB/s  "
              f"binary copy is {a['full_rewrite_s'] / a['binary_copy_s']:.1f}x faster")

        uri, data = build_b(root, fb, rb)
        b = bench_b(root, uri, data, fb, rb)
        base = b["lamina_full_rewrite_worker_s"]
        print(f"\n(b) {fb * rb:,} rows in {fb} fragments of {rb:,} rows")
        for k, v in b.items():
            ratio = f"  lamina full rewrite is {v / base:.2f}x faster" if isinstance(v, float) and k != "lamina_full_rewrite_worker_s" else ""
            print(f"    {k:32s} {v if isinstance(v, str) else f'{v:7.3f} s'}{ratio}")

        print("\n(c) peak RSS growth of one compaction task (full rewrite), by group size")
        for c in bench_c(uri) if not args.quick else []:
            print(f"    {c['fragments']:4d} fragments, {c['input_bytes'] / MiB:6.1f} MiB in: peak +{c['peak_growth_mib']:.0f} MiB, "
                  f"bound {c['bound_mib']:.0f} MiB ({c['peak_growth_mib'] / c['bound_mib']:.2f} of it)")

        d = bench_d(root, uri)
        print(f"\n(d) the Ray job over {d['groups']} groups: 1 worker {d['job_1_workers_s']:.2f} s, 2 workers "
              f"{d['job_2_workers_s']:.2f} s = {d['job_1_workers_s'] / d['job_2_workers_s']:.2f}x")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
