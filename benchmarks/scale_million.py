"""A table of a million fragments, its manifest written without its data files (issue 18, items 4 and 5: the 1M size).

    .venv/bin/python -m benchmarks.scale_million [--sizes 1000,1000000] [--appends 20] [--json]
    (or: .venv/bin/python -m benchmarks.scale --synthetic 1000,1000000)

Writing a million real files takes this host tens of minutes (``benchmarks.scale`` writes 1k-100k), so each
size here is a local table with one real fragment (10 rows, ids 0-9) followed by N - 1 fragments whose data
files do not exist: each a copy of the real one's metadata under a new path, with its own zone map (fragment
i holds ids [10i, 10i + 10)), committed by ordinary appends of 100,000 fragments. Nothing below opens a data
file but the real one's, so the figures are the manifest's cost. Each operation runs in a new process
(spawned; imports not timed) that reports its time and its peak RSS (VmHWM, reset after imports) above the
RSS it had after imports:

  open        ``lamina.open_table`` of the latest version, then ``count_rows()``.
  iterate     ``Table.iter_fragments()`` over every fragment (streams the manifest segments).
  plan        ``lamina.planner.plan_compaction`` with default options (binpack) on a new handle: every synthetic
              fragment is small, so the plan takes them all (it holds what it groups).
  append      --appends one-row appends on one handle: p50, p95, bytes written under ``_versions/`` and
              ``_segments/`` per commit (p50).
  delete      ``delete("id = 5")`` (a key of the real fragment): the other fragments are ruled out by their
              zone maps, streamed from the segments without opening a file.

Sizes run in the same invocation (default 1,000 and 1,000,000) so the large one is read against the small.
Targets (issue 18): 1-row append p50 <= 20 ms and flat from 1k to 1M; bytes per commit independent of size;
opening a version does not build a Python object per fragment, and iterating holds at most the segment cache
(``LAMINA_SEGMENT_CACHE_BYTES``, 256 MiB by default) and a window of segments, not the ~1.2 KB per fragment a
whole version costs as Python objects.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import dataclasses
import multiprocessing as mp
import os
import platform
import shutil
import tempfile
import time
import uuid
from typing import Any

import numpy as np

from benchmarks.compaction import _status_kib
from benchmarks.scale import LAMINA_META, SCHEMA, finish, p, rows, snapshot, written

CHUNK = 100_000


def build(uri: str, n: int) -> float:
    """The table of ``n`` fragments at ``uri``; seconds taken."""
    import lamina
    from lamina.commit import commit
    from lamina.transaction import Append

    t0 = time.perf_counter()
    t = lamina.create_table(uri, SCHEMA)
    t.append(rows(0, 10))
    real = t.manifest.fragments[0]
    base = t.manifest
    for start in range(1, n, CHUNK):
        frags = []
        for i in range(start, min(n, start + CHUNK)):
            zones = tuple(dataclasses.replace(z, lo=10 * i, hi=10 * i + 9) if z.column == "id" else z for z in real.zones or ())
            frags.append(
                dataclasses.replace(real, id=-1, path=f"data/{uuid.uuid4().hex}.parquet", zones=zones, schema=base.schema)
            )
        base = commit(t.store, Append(base.version, frags), base)
        del frags
    return time.perf_counter() - t0


def _reset_peak_rss() -> int:
    """Resets this process's peak RSS (VmHWM) to its RSS now, and returns that RSS (KiB)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return _status_kib("VmRSS")


def _measure(op: str, uri: str, appends: int) -> dict[str, Any]:
    """One operation in this (new) process: seconds, and peak RSS above the RSS after imports (KiB)."""
    import lamina
    from lamina.planner import CompactionOptions, plan_compaction

    base_rss = _reset_peak_rss()
    out: dict[str, Any] = {}
    t0 = time.perf_counter()
    t = lamina.open_table(uri)
    out["open_s"] = time.perf_counter() - t0
    if op == "open":
        t0 = time.perf_counter()
        out["rows"] = t.count_rows()
        out["count_s"] = time.perf_counter() - t0
    elif op == "iterate":
        t0 = time.perf_counter()
        out["fragments"] = sum(1 for _ in t.iter_fragments())
        out["iterate_s"] = time.perf_counter() - t0
    elif op == "plan":
        t0 = time.perf_counter()
        plan = plan_compaction(t.manifest, CompactionOptions(), t.uri)
        out["plan_s"] = time.perf_counter() - t0
        out["groups"] = len(plan.groups)
    elif op == "append":
        times, sizes = [], []
        for k in range(appends):
            before = snapshot(uri, LAMINA_META)
            t0 = time.perf_counter()
            t.append(rows(10**12 + k, 10**12 + k + 1))
            times.append(time.perf_counter() - t0)
            sizes.append(written(before, snapshot(uri, LAMINA_META)))
        out.update(append_p50_s=p(times, 50), append_p95_s=p(times, 95), commit_bytes_p50=p(sizes, 50))
    elif op == "delete":
        t0 = time.perf_counter()
        out["deleted"] = t.delete("id = 5")
        out["delete_s"] = time.perf_counter() - t0
    out["rss_above_imports_mib"] = max(0, _status_kib("VmHWM") - base_rss) / 1024
    return out


OPS = ("open", "iterate", "append", "delete", "plan")


def run_size(n: int, where: str, appends: int) -> dict[str, Any]:
    uri = os.path.join(where, f"t{n}")
    took = build(uri, n)
    os.sync()  # the build's writes reach the disk now, not during the fsyncs of the commits measured
    size: dict[str, Any] = {"fragments": n, "build_s": took}
    ctx = mp.get_context("spawn")
    for op in OPS:
        with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as ex:
            size[op] = ex.submit(_measure, op, uri, appends).result()
    shutil.rmtree(uri, ignore_errors=True)
    return size


def report(s: dict[str, Any]) -> None:
    n = s["fragments"]
    o, it, pl, ap, de = (s[k] for k in OPS[:2] + ("plan", "append", "delete"))
    print(f"\n{n:,} fragments (built in {s['build_s']:.1f} s)")
    print(
        f"  open latest      {o['open_s'] * 1e3:9.2f} ms   count_rows {o['count_s'] * 1e3:.3f} ms ({o['rows']:,} rows)"
        f"   peak RSS +{o['rss_above_imports_mib']:.1f} MiB"
    )
    print(
        f"  iterate          {it['iterate_s']:9.2f} s    {it['fragments']:,} fragments   "
        f"peak RSS +{it['rss_above_imports_mib']:.1f} MiB"
    )
    print(
        f"  1-row append     p50 {ap['append_p50_s'] * 1e3:.2f} ms, p95 {ap['append_p95_s'] * 1e3:.2f} ms, "
        f"{ap['commit_bytes_p50'] / 1024:.1f} KiB per commit   peak RSS +{ap['rss_above_imports_mib']:.1f} MiB"
    )
    print(
        f"  delete one key   {de['delete_s']:9.2f} s    ({de['deleted']} row)   peak RSS +{de['rss_above_imports_mib']:.1f} MiB"
    )
    print(f"  compaction plan  {pl['plan_s']:9.2f} s    {pl['groups']} groups   peak RSS +{pl['rss_above_imports_mib']:.1f} MiB")


def targets(sizes: list[dict[str, Any]]) -> list[str]:
    by = {s["fragments"]: s for s in sizes}
    small, big = min(by), max(by)
    a_small, a_big = by[small]["append"]["append_p50_s"], by[big]["append"]["append_p50_s"]
    b_small, b_big = by[small]["append"]["commit_bytes_p50"], by[big]["append"]["commit_bytes_p50"]
    per_fragment_mib = 1.2 * big / 1024  # a materialized version: ~1.2 KB per fragment
    out = [
        f"1-row append p50 at {big:,}: {a_big * 1e3:.1f} ms (<= 20 ms: {'met' if a_big <= 0.020 else 'MISSED'}); at {small:,}: "
        f"{a_small * 1e3:.1f} ms ({a_big / a_small:.2f}x; flat: {'met' if a_big <= 1.5 * a_small + 0.002 else 'MISSED'})",
        f"bytes per commit p50: {b_small / 1024:.1f} KiB at {small:,}, {b_big / 1024:.1f} KiB at {big:,} "
        f"(independent of size: {'met' if b_big <= 1.25 * b_small + 512 else 'MISSED'})",
    ]
    from lamina.manifest.versions import _SEGMENTS

    bound = _SEGMENTS.budget / 2**20 + 64  # the segment cache's budget, plus a window of segments and slack
    for op in ("open", "iterate", "append"):
        rss = by[big][op]["rss_above_imports_mib"]
        out.append(
            f"peak RSS of {op} at {big:,}: +{rss:.0f} MiB (the version as Python objects: ~{per_fragment_mib:.0f} MiB; "
            f"within the segment cache's {_SEGMENTS.budget / 2**20:.0f} MiB + 64: {'met' if rss <= bound else 'MISSED'})"
        )
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,1000000", help="fragment counts, comma-separated (default 1000,1000000)")
    ap.add_argument("--appends", type=int, default=20, help="one-row appends timed per size (default 20)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    args = ap.parse_args(argv)
    sizes = [int(s.replace("_", "")) for s in args.sizes.split(",")]
    if len(sizes) < 2 or min(sizes) < 2:
        ap.error("--sizes takes at least two counts of 2 or more (the smallest is the baseline)")
    load = os.getloadavg()
    print(
        f"benchmarks.scale_million: sizes {sizes}, {args.appends} appends; {os.cpu_count()} CPUs, "
        f"load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; Python {platform.python_version()}, numpy {np.__version__}",
        flush=True,
    )
    where = tempfile.mkdtemp(prefix="lamina-scale-million-")
    out = []
    try:
        for n in sizes:
            out.append(run_size(n, where, args.appends))
            report(out[-1])
    finally:
        shutil.rmtree(where, ignore_errors=True)
    finish("scale_million", targets(out), out, args.json)
    return out


if __name__ == "__main__":
    main()
