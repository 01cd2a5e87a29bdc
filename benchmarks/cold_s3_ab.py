"""Cold S3 reads of two checkouts side by side: the catalog's cold calls and the scattered lookups' cold calls.

    .venv/bin/python -m benchmarks.cold_s3_ab BEFORE_ROOT AFTER_ROOT [--catalog-calls 30] [--rounds 5]
        [--fragments 3500] [--lookups 5000]

For a change to the S3 read path, where the peers of ``benchmarks.catalog`` and ``benchmarks.scattered`` add
nothing but time: one moto server (lamina.testing's) in this process, one catalog of 1,000 entries and one
table of ``--fragments`` fragments written once (by this checkout), then every cold call of both benchmarks,
the two checkouts alternating call by call (who goes first alternates too), each call in a new interpreter
started in its checkout's root (so ``import lamina`` is that checkout's):

  catalog:   ``python -m benchmarks.catalog --cold-child``: connect() + one of its four reads, imports not timed
             (the benchmark's own cold method), ``--catalog-calls`` per read and checkout.
  scattered: open the table + the first ``take`` / ``id IN (...)`` of ``--lookups`` random ids, imports not
             timed (the benchmark's own cold phase), ``--rounds`` per operation and checkout, GETs counted.

Medians (and p95 for the catalog) per checkout, and after / before. Nothing is written outside the moto server.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SCATTER_CHILD = r"""
import json, sys, time
import numpy as np
import lamina
uri, options, frag_ids, ids, op = json.loads(sys.argv[1])
ids_arr = np.asarray(ids, dtype=np.int64)
flt = "id IN (" + ", ".join(str(i) for i in ids) + ")"
t0 = time.perf_counter()
t = lamina.open_table(uri, storage_options=options)
if op == "take":
    fids = np.asarray(frag_ids, dtype=np.uint64)[ids_arr // 1000]
    out = t.take((fids << np.uint64(32)) | (ids_arr % 1000).astype(np.uint64), ["url"])
else:
    out = t.to_arrow(columns=["url"], filter=flt)
print(json.dumps([time.perf_counter() - t0, out.num_rows]))
"""


def child(root: str, args: list[str]) -> str:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
    p = subprocess.run([sys.executable, *args], cwd=root, env=env, capture_output=True, text=True)
    if p.returncode:
        raise RuntimeError(f"{root}: {args[:3]} failed:\n{p.stderr[-3000:]}")
    return p.stdout.strip().splitlines()[-1]


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(xs, q))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("before")
    ap.add_argument("after")
    ap.add_argument("--catalog-calls", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--fragments", type=int, default=3500)
    ap.add_argument("--lookups", type=int, default=5000)
    ap.add_argument("--skip", choices=("catalog", "scattered"))
    args = ap.parse_args()
    import tempfile

    from benchmarks import catalog as cat
    from benchmarks import scattered as sc
    from lamina.testing import MotoServer

    for k, v in cat.DUMMY_AWS_ENV.items():
        os.environ.setdefault(k, v)
    sides = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.after)}
    server = MotoServer().start()
    print(f"cold S3 reads, before {sides['before']} / after {sides['after']}; load average {os.getloadavg()[0]:.1f}", flush=True)
    try:
        if args.skip != "catalog":
            backend, _ = cat.backends("s3", tempfile.gettempdir(), server.endpoint)
            top, inner, tables = cat.catalog_names(1000)
            cat.seed_worker(
                "lamina", backend, [("create_namespace", n) for n in top + inner] + [("create_table", n) for n in tables]
            )
            run = cat.Run(False, ("lamina",))
            lat: dict[str, dict[str, list[float]]] = {}
            for op, calls in run.read_plan(args.catalog_calls, random.Random(11)):
                for i, a in enumerate(calls):
                    for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
                        total, _, _ = json.loads(
                            child(
                                sides[side], ["-m", "benchmarks.catalog", "--cold-child", json.dumps(["lamina", backend, op, a])]
                            )
                        )
                        lat.setdefault(op, {}).setdefault(side, []).append(total)
                b, a = lat[op]["before"], lat[op]["after"]
                print(
                    f"catalog cold {op:26s} p50 before {pct(b, 50) * 1e3:6.1f} ms, after {pct(a, 50) * 1e3:6.1f} ms "
                    f"({pct(a, 50) / pct(b, 50):.2f}x); p95 {pct(b, 95) * 1e3:6.1f} / {pct(a, 95) * 1e3:6.1f} ms "
                    f"({pct(a, 95) / pct(b, 95):.2f}x)",
                    flush=True,
                )
        if args.skip != "scattered":
            import boto3

            import lamina

            boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1").create_bucket(Bucket="lamina-scatter")
            uri, opts = "s3://lamina-scatter/t", sc.lamina_options(server.endpoint)
            t = lamina.create_table(uri, sc.make_rows(0, 1).schema, storage_options=opts)
            for start in range(0, args.fragments, 100):
                n = min(100, args.fragments - start)
                t.append(sc.make_rows(start * 1000, (start + n) * 1000), max_rows_per_file=1000)
            t.create_index("id", "btree")
            frag_ids = [f.id for f in lamina.open_table(uri, storage_options=opts).manifest.fragments]
            ids = np.random.default_rng(12).choice(args.fragments * 1000, args.lookups, replace=False).tolist()
            for op in ("take", "index"):
                secs: dict[str, list[float]] = {"before": [], "after": []}
                gets: dict[str, list[int]] = {"before": [], "after": []}
                for r in range(args.rounds):
                    for side in ("before", "after") if r % 2 == 0 else ("after", "before"):
                        was = server.requests("lamina-scatter")
                        elapsed, rows = json.loads(
                            child(sides[side], ["-c", SCATTER_CHILD, json.dumps([uri, opts, frag_ids, ids, op])])
                        )
                        now = server.requests("lamina-scatter")
                        assert rows == args.lookups, (side, op, rows)
                        secs[side].append(elapsed)
                        gets[side].append(now.get("GET", 0) - was.get("GET", 0))
                b, a = secs["before"], secs["after"]
                print(
                    f"scattered cold {op:5s} median before {np.median(b):.2f} s {sorted(round(x, 2) for x in b)}, "
                    f"after {np.median(a):.2f} s {sorted(round(x, 2) for x in a)} ({np.median(a) / np.median(b):.2f}x); "
                    f"GETs {gets['before'][0]} / {gets['after'][0]}",
                    flush=True,
                )
    finally:
        server.stop()


if __name__ == "__main__":
    main()
