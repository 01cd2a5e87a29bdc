"""WAL apply rate and end-to-end ingestion, on rows shaped like TSBS cpu-only.

    .venv/bin/python -m benchmarks.wal [--quick]

(a) One core, one shard's transactions already in memory: the applier's apply step (native
    split of row-first bytes + memtable insert) and the flush-side decode (row-first bytes to
    Arrow columns), against reading the same rows from Arrow IPC batches. Target: apply
    >= 2M rows/s per core.
(b) End to end: 2 producer processes writing 2 shards through WalWriter (local disk, fsync per
    commit), 2 applier actors on local Ray, until every row is committed to the table.
Rows: an int64 key, a timestamp, 10 tag strings and 10 float columns (22 columns), as TSBS
cpu-only generates them (hostname, region, datacenter, …, usage_user, usage_system, …).
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
from lamina import _native

TAGS = ["hostname", "region", "datacenter", "rack", "os", "arch", "team", "service", "service_version", "service_environment"]
FIELDS = [
    "usage_user",
    "usage_system",
    "usage_idle",
    "usage_nice",
    "usage_iowait",
    "usage_irq",
    "usage_softirq",
    "usage_steal",
    "usage_guest",
    "usage_guest_nice",
]
SCHEMA = pa.schema(
    [("id", pa.int64()), ("ts", pa.timestamp("ns"))] + [(t, pa.string()) for t in TAGS] + [(f, pa.float64()) for f in FIELDS]
)


def cpu_rows(start: int, n: int) -> pa.Table:
    rng = np.random.default_rng(start)
    hosts = rng.integers(0, 4000, n)
    cols = {
        "id": np.arange(start, start + n, dtype=np.int64),
        "ts": pa.array(np.datetime64("2016-01-01", "ns") + (np.arange(n) * 10**10).astype("timedelta64[ns]")),
    }
    choices = {
        "hostname": [f"host_{i}" for i in range(4000)],
        "region": ["us-east-1", "us-west-1", "eu-central-1", "ap-south-1"],
        "datacenter": [f"dc{i}" for i in range(12)],
        "rack": [str(i) for i in range(100)],
        "os": ["Ubuntu16.04LTS", "Ubuntu15.10"],
        "arch": ["x64", "x86"],
        "team": ["SF", "NYC", "LON", "CHI"],
        "service": [str(i) for i in range(20)],
        "service_version": ["0", "1"],
        "service_environment": ["production", "staging", "test"],
    }
    for t in TAGS:
        vals = choices[t]
        idx = hosts % len(vals) if t != "hostname" else hosts
        cols[t] = pa.array(np.array(vals, dtype=object)[idx], type=pa.string())
    for f in FIELDS:
        cols[f] = rng.random(n) * 100
    return pa.table(cols, schema=SCHEMA)


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def bench_apply(rows: int, txn_rows: int) -> dict:
    data = cpu_rows(0, rows)
    batches = data.to_batches(max_chunksize=txn_rows)
    encoded = [_native.wal_encode(b, None, [0])[0] for b in batches]
    raw_bytes = sum(len(e) for e in encoded)
    ipc = []
    for b in batches:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, SCHEMA) as w:
            w.write_batch(b)
        ipc.append(sink.getvalue())

    def apply():
        mt = _native.MemTable("int64")
        for e in encoded:
            keys, values, _ = _native.wal_split(e, SCHEMA, 0, "bench")
            mt.put_many(keys, values)

    def split_only():
        for e in encoded:
            _native.wal_split(e, SCHEMA, 0, "bench")

    def decode():
        for e in encoded:
            _native.wal_decode(e, SCHEMA, "bench")

    def ipc_read():
        for buf in ipc:
            pa.ipc.open_stream(buf).read_all()

    def ipc_apply():  # the same memtable insert, fed from IPC batches (row bytes taken as the value)
        mt = _native.MemTable("int64")
        for buf, e in zip(ipc, encoded):
            t = pa.ipc.open_stream(buf).read_all()
            keys, values, _ = _native.wal_split(e, SCHEMA, 0, "bench")
            mt.put_many(t.column("id").combine_chunks(), values)

    out = {
        "rows": rows,
        "txn_rows": txn_rows,
        "row_first_bytes_per_row": round(raw_bytes / rows, 1),
        "ipc_bytes_per_row": round(sum(b.size for b in ipc) / rows, 1),
    }
    for name, fn in (
        ("apply_split_insert", apply),
        ("split_only", split_only),
        ("decode_to_arrow", decode),
        ("ipc_read", ipc_read),
        ("ipc_fed_insert", ipc_apply),
    ):
        s = best(fn, 3)
        out[name] = {"seconds": round(s, 4), "rows_per_s": round(rows / s)}
    out["apply_target_met"] = out["apply_split_insert"]["rows_per_s"] >= 2_000_000
    return out


PRODUCER = """
import sys, time
sys.path.insert(0, {repo!r})
from benchmarks.wal import cpu_rows
from lamina.wal import WalWriter
uri, shard, rows, txn = {uri!r}, {shard}, {rows}, {txn}
data = cpu_rows(shard * 10**9, rows)
w = WalWriter(uri, shard)
for b in data.to_batches(max_chunksize=txn):
    w.put_batch(b)
    w.commit()
w.close()
"""


def bench_end_to_end(root: str, rows_per_producer: int, txn_rows: int) -> dict:
    from lamina.ingest import IngestOptions
    from lamina.ingestion import Ingestion

    uri = os.path.join(root, "e2e")
    lamina.create_table(uri, SCHEMA, primary_key="id")
    from lamina.workers import runtime

    runtime.connect(num_cpus=2)
    try:
        ing = Ingestion.start(uri, 2, options=IngestOptions(flush_rows=200_000, flush_seconds=1.0))
        repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        t0 = time.perf_counter()
        procs = [
            subprocess.Popen(
                [sys.executable, "-c", PRODUCER.format(repo=repo, uri=uri, shard=s, rows=rows_per_producer, txn=txn_rows)]
            )
            for s in range(2)
        ]
        for p in procs:
            p.wait()
        produced = time.perf_counter() - t0
        total = 2 * rows_per_producer
        while lamina.open_table(uri).count_rows() < total:
            time.sleep(0.05)
        done = time.perf_counter() - t0
        ing.stop(flush=False)
    finally:
        runtime.shutdown()
    return {
        "producers": 2,
        "shards": 2,
        "rows": total,
        "txn_rows": txn_rows,
        "produce_seconds": round(produced, 3),
        "producer_rows_per_s": round(total / produced),
        "end_to_end_seconds": round(done, 3),
        "end_to_end_rows_per_s": round(total / done),
    }


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    scale = 10 if args.quick else 1
    root = tempfile.mkdtemp(prefix="lamina-bench-wal-")
    try:
        a = bench_apply(1_000_000 // scale, 10_000)
        print(json.dumps({"a_apply": a}, indent=2), flush=True)
        b = bench_end_to_end(root, 1_000_000 // scale, 10_000)
        print(json.dumps({"b_end_to_end": b}, indent=2), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    print("\nsummary")
    print(
        f"  apply (split + memtable insert), 1 core: {a['apply_split_insert']['rows_per_s']:,} rows/s "
        f"(target >= 2,000,000: {'met' if a['apply_target_met'] else 'missed'})"
    )
    print(
        f"  row-first decode to Arrow: {a['decode_to_arrow']['rows_per_s']:,} rows/s; Arrow IPC read: "
        f"{a['ipc_read']['rows_per_s']:,} rows/s ({a['decode_to_arrow']['rows_per_s'] / a['ipc_read']['rows_per_s']:.2f}x)"
    )
    print(f"  memtable insert fed from IPC batches: {a['ipc_fed_insert']['rows_per_s']:,} rows/s")
    print(
        f"  end to end, 2 producers / 2 shards: {b['end_to_end_rows_per_s']:,} rows/s "
        f"(producers alone {b['producer_rows_per_s']:,} rows/s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
