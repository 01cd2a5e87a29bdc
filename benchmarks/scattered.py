"""Scattered lookups across thousands of small fragments, against pylance on the same data (issue 12).

    .venv/bin/python -m benchmarks.scattered [--quick] [--only local|s3] [--fragments N] [--lookups N] [--json]

The workload of ../shared/seeds/002_cf65ff6001a678e6.txt: a table of ``--fragments`` fragments (default
3,500; --quick 350) of 1,000 rows each — ``id`` int64, ``url`` (~60 bytes), ``score`` float64, ``cat``
int32, ``ts`` timestamp — written once by Lamina and once by pylance (one fragment per 1,000 rows, a BTREE
index on ``id`` each), then ``--lookups`` random ids (default 5,000; seeded) fetched, ``url`` only:

  take:  Lamina ``Table.take`` of the rows' addresses; pylance ``dataset.take`` of their row positions.
  index: ``id IN (...)`` through each one's btree index (Lamina ``to_arrow(columns=["url"], filter=...)``,
         pylance ``to_table(columns=["url"], filter=...)``); both results checked against each other.

Each (system, store, operation) runs in its own new process (spawned: nothing of the parent's state),
imports not counted: ``cold`` = open the table + the first call, ``warm`` = the mean of the second and
third calls on the same handle. Local disk (the OS page cache is warm for both) and a moto S3 server in
this process, reached over TCP; on S3 the requests each call made are counted by the server, per bucket.
Targets: warm and cold, local and S3, Lamina <= 0.25x pylance's time, and fewer GETs than pylance on S3.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow as pa

ROWS_PER_FRAGMENT = 1000
DUMMY = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def make_rows(lo: int, hi: int) -> pa.Table:
    ids = np.arange(lo, hi, dtype=np.int64)
    url = pa.array([f"https://example.com/item/{i:012d}/{'p' * (10 + i % 23)}" for i in range(lo, hi)])
    return pa.table(
        {
            "id": ids,
            "url": url,
            "score": (ids % 1000) / 7.0,
            "cat": (ids % 11).astype(np.int32),
            "ts": pa.array(ids * 1_000_000, pa.timestamp("us")),
        }
    )


def lance_options(endpoint: str) -> dict[str, str]:
    return {
        "aws_endpoint": endpoint,
        "aws_access_key_id": "testing",
        "aws_secret_access_key": "testing",
        "aws_region": "us-east-1",
        "allow_http": "true",
        "aws_virtual_hosted_style_request": "false",
    }


def lamina_options(endpoint: str) -> dict[str, str]:
    return {"endpoint_url": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region": "us-east-1"}


def build(where: str, endpoint: str | None, fragments: int) -> dict[str, Any]:
    """Writes the same rows as a Lamina table and a Lance dataset, each with a btree on ``id``."""
    import lance

    import lamina

    if endpoint:
        lamina_uri, lance_uri = "s3://lamina-scatter/t", "s3://lance-scatter/t"
        lo, la = lamina_options(endpoint), lance_options(endpoint)
    else:
        lamina_uri, lance_uri = os.path.join(where, "lamina"), os.path.join(where, "lance")
        lo, la = None, None
    t = lamina.create_table(lamina_uri, make_rows(0, 1).schema, storage_options=lo)
    writer = None
    chunk = 100
    for start in range(0, fragments, chunk):
        n = min(chunk, fragments - start)
        data = make_rows(start * ROWS_PER_FRAGMENT, (start + n) * ROWS_PER_FRAGMENT)
        t.append(data, max_rows_per_file=ROWS_PER_FRAGMENT)
        writer = lance.write_dataset(
            data, lance_uri, mode="append" if writer else "create", max_rows_per_file=ROWS_PER_FRAGMENT, storage_options=la
        )
    t.create_index("id", "btree")
    ds = lance.dataset(lance_uri, storage_options=la)
    ds.create_scalar_index("id", index_type="BTREE")
    assert len(t.manifest.fragments) == fragments == len(ds.get_fragments()), (len(t.manifest.fragments), len(ds.get_fragments()))
    # fragment i holds ids [i*1000, (i+1)*1000) in order, in both
    return {"lamina": (lamina_uri, lo, [f.id for f in t.manifest.fragments]), "lance": (lance_uri, la)}


def _worker(conn, system: str, spec: Any, op: str, ids: list[int]) -> None:
    """One system, one operation, in a fresh process: 'open', then 'run' calls, each timed."""
    import lance

    import lamina  # imports are not timed

    ids_arr = np.asarray(ids, dtype=np.int64)
    handle: Any = None
    flt = "id IN (" + ", ".join(str(i) for i in ids) + ")"
    while True:
        cmd = conn.recv()
        if cmd == "stop":
            return
        t0 = time.perf_counter()
        if handle is None:
            if system == "lamina":
                uri, options, frag_ids = spec
                handle = lamina.open_table(uri, storage_options=options)
                fids = np.asarray(frag_ids, dtype=np.uint64)[ids_arr // ROWS_PER_FRAGMENT]
                addrs = (fids << np.uint64(32)) | (ids_arr % ROWS_PER_FRAGMENT).astype(np.uint64)
            else:
                uri, options = spec
                handle = lance.dataset(uri, storage_options=options)
        if system == "lamina":
            out = handle.take(addrs, ["url"]) if op == "take" else handle.to_arrow(columns=["url"], filter=flt)
        else:
            out = handle.take(ids_arr, columns=["url"]) if op == "take" else handle.to_table(columns=["url"], filter=flt)
        elapsed = time.perf_counter() - t0
        conn.send((elapsed, sorted(out.column("url").to_pylist())))


def measure(system: str, spec: Any, op: str, ids: list[int], server: Any, bucket: str | None) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(child, system, spec, op, ids))
    proc.start()
    results = []
    try:
        for _ in range(3):
            before = server.requests(bucket) if server else {}
            parent.send("run")
            elapsed, urls = parent.recv()
            after = server.requests(bucket) if server else {}
            reqs = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}
            results.append((elapsed, urls, reqs))
        parent.send("stop")
    finally:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
    return {
        "cold": results[0][0],
        "warm": (results[1][0] + results[2][0]) / 2,
        "urls": results[0][1],
        "cold_requests": results[0][2],
        "warm_requests": results[1][2],
    }


def run(store: str, fragments: int, lookups: int, rounds: int) -> list[dict[str, Any]]:
    from lamina.testing import MotoServer

    where = tempfile.mkdtemp(prefix="lamina-scatter-")
    server = None
    try:
        endpoint = None
        if store == "s3":
            os.environ.update(DUMMY)
            server = MotoServer().start()
            endpoint = server.endpoint
            import boto3

            client = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
            for b in ("lamina-scatter", "lance-scatter"):
                client.create_bucket(Bucket=b)
        t0 = time.perf_counter()
        specs = build(where, endpoint, fragments)
        print(
            f"[{store}] wrote {fragments} fragments x {ROWS_PER_FRAGMENT} rows twice in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        ids = np.random.default_rng(12).choice(fragments * ROWS_PER_FRAGMENT, lookups, replace=False).tolist()
        rows = []
        for op in ("take", "index"):
            per: dict[str, list[dict[str, Any]]] = {"lamina": [], "lance": []}
            for r in range(rounds):
                for system in ("lamina", "lance") if r % 2 == 0 else ("lance", "lamina"):
                    bucket = f"{system}-scatter" if server else None
                    per[system].append(measure(system, specs[system], op, ids, server, bucket))
            a, b = per["lamina"], per["lance"]
            assert a[0]["urls"] == b[0]["urls"], f"{op}: Lamina and pylance returned different rows"
            row = {"store": store, "op": op, "fragments": fragments, "lookups": lookups}
            for phase in ("cold", "warm"):
                la = float(np.median([m[phase] for m in a]))
                lb = float(np.median([m[phase] for m in b]))
                row[phase] = {
                    "lamina_s": la,
                    "lance_s": lb,
                    "ratio": la / lb,
                    "lamina_requests": a[0][f"{phase}_requests"],
                    "lance_requests": b[0][f"{phase}_requests"],
                }
            rows.append(row)
            report(row)
        return rows
    finally:
        if server:
            server.stop()
        shutil.rmtree(where, ignore_errors=True)


def report(row: dict[str, Any]) -> None:
    for phase in ("cold", "warm"):
        r = row[phase]
        met = "met" if r["ratio"] <= 0.25 else "MISSED"
        line = (
            f"[{row['store']}] {row['op']:5s} {phase}: Lamina {r['lamina_s'] * 1000:8.1f} ms  pylance "
            f"{r['lance_s'] * 1000:8.1f} ms  ratio {r['ratio']:.2f}x (<= 0.25x: {met})"
        )
        if row["store"] == "s3":
            gets_a, gets_b = r["lamina_requests"].get("GET", 0), r["lance_requests"].get("GET", 0)
            line += f"  requests Lamina {r['lamina_requests']} pylance {r['lance_requests']}"
            line += f"  fewer GETs: {'met' if gets_a < gets_b else 'MISSED'}"
        print(line, flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="350 fragments, 1,000 lookups, 1 round")
    ap.add_argument("--only", choices=("local", "s3"))
    ap.add_argument("--fragments", type=int)
    ap.add_argument("--lookups", type=int)
    ap.add_argument("--rounds", type=int, help="fresh processes per (system, operation); medians are reported (default 3)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import importlib.util

    if importlib.util.find_spec("lance") is None:
        raise SystemExit("pylance is not installed: pip install pylance (an optional benchmark extra)")
    fragments = args.fragments or (350 if args.quick else 3500)
    lookups = args.lookups or (1000 if args.quick else 5000)
    rounds = args.rounds or (1 if args.quick else 3)
    rows = []
    for store in [args.only] if args.only else ["local", "s3"]:
        rows += run(store, fragments, lookups, rounds)
    if args.json:
        print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
