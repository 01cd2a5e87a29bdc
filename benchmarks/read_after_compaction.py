"""Read after compaction (issue 14 item 4): how the outputs of binary copy, hybrid and full rewrite read.

    .venv/bin/python -m benchmarks.read_after_compaction [--quick] [--only local|s3] [--fragments N] [--rounds N] [--json]

The question of ../shared/seeds/003_1f3261702f8c4de5.txt: binary copy keeps the small row groups and
pages of the small files it merges; how do its outputs read, on local disk and on object storage,
next to a hybrid or a full rewrite of the same rows and next to the uncompacted table?

One table of the demo schema (``lamina.jobs.demo.sample_rows``), ``--fragments`` appends (default 400; --quick
100) of 2,000 or 8,000 rows (half each, seeded order: 5,000 on average, 2M rows at full size), is copied
four times and three copies are compacted, each mode forced through ``CompactionOptions`` (the summary
must say every group got it):

  uncompacted   the source
  binary_copy   min_row_group_bytes=0: every row group copied as it is
  hybrid        min_row_group_bytes between the two row-group sizes: the 8,000-row groups copied, the runs
                of 2,000-row groups between them re-encoded
  full_rewrite  the default options: every row group is below 1 MiB, so the planner re-encodes them all

Then the same 2% of rows (seeded ids) are deleted from all four (a deletion file before compaction
makes the planner rewrite the whole group, so no other mode could be forced). Each table is read
on local disk and on a moto S3 server (the local tables uploaded, one bucket each):

  scan    to_arrow(): every column, every live row
  column  to_arrow(columns=["value"])
  take    take() of 1,000 random live rows' addresses, every column, one call
  take1   100 single-row take() calls in a loop (other random rows)

Each (store, table, operation) runs in its own new spawned process: ``cold`` = open the table + the
first call, ``warm`` = the mean of the second and third calls on the same handle. Tables are measured
in a rotating order, ``--rounds`` times (default 3; --quick 1), and medians are reported. Requests and
bytes are ``lamina.io_stats()`` deltas in the reading process; on S3 the server's own per-bucket
count (``MotoServer.requests``) is the cross-check. Local reads hit the OS page cache (not dropped).
The data files' layout (row groups, pages: their counts and sizes, from the Parquet footers and page
headers) is printed per table.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import shutil
import statistics
import tempfile
import time
from typing import Any

import numpy as np
import pyarrow.compute as pc
import pyarrow.parquet as pq

KiB, MiB = 1 << 10, 1 << 20
SMALL_ROWS, LARGE_ROWS = 2_000, 8_000
TABLES = ("uncompacted", "binary_copy", "hybrid", "full_rewrite")
OPS = ("scan", "column", "take", "take1")
DELETED_SHARE = 0.02
DUMMY = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


def lamina_options(endpoint: str) -> dict[str, str]:
    return {"endpoint_url": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region": "us-east-1"}


# -- building the four tables ------------------------------------------------------------------------------
def fragment_sizes(fragments: int) -> list[int]:
    """Rows of each append: half SMALL_ROWS, half LARGE_ROWS, in a seeded order."""
    sizes = [SMALL_ROWS] * (fragments // 2) + [LARGE_ROWS] * (fragments - fragments // 2)
    np.random.default_rng(14).shuffle(sizes)
    return sizes


def build_source(uri: str, fragments: int) -> int:
    """The uncompacted table: one append (one fragment, one row group) per size; its row count."""
    import lamina
    from lamina.jobs.demo import SCHEMA, sample_rows

    t = lamina.create_table(uri, SCHEMA)
    start = 0
    for n in fragment_sizes(fragments):
        t.append(sample_rows(start, n))
        start += n
    assert len(t.manifest.fragments) == fragments
    return start


def mode_options(mode: str, source_uri: str):
    """The CompactionOptions that force ``mode`` on the source table."""
    import lamina
    from lamina.planner import CompactionOptions

    if mode == "binary_copy":
        return CompactionOptions(min_row_group_bytes=0)
    if mode == "hybrid":
        t = lamina.open_table(source_uri)
        small = [g.bytes for f in t.manifest.fragments if f.rows == SMALL_ROWS for g in f.row_groups]
        large = [g.bytes for f in t.manifest.fragments if f.rows == LARGE_ROWS for g in f.row_groups]
        assert max(small) < min(large), "the two fragment sizes must not overlap in bytes"
        return CompactionOptions(min_row_group_bytes=(max(small) + min(large)) // 2)
    return CompactionOptions()  # full rewrite: the planner's own choice for row groups all below 1 MiB


def compact_copies(root: str, source: str) -> dict[str, dict[str, Any]]:
    """The three compacted copies of ``source``; per mode what the summary said."""
    from lamina.compaction import compact
    from lamina.workers import runtime

    out = {}
    runtime.connect(num_cpus=2)
    try:
        for mode in TABLES[1:]:
            uri = os.path.join(root, mode)
            shutil.copytree(source, uri)
            options = mode_options(mode, source)
            t0 = time.perf_counter()
            _, summary = compact(uri, options)
            seconds = time.perf_counter() - t0
            modes = sorted({g["mode"] for g in summary.groups})
            reasons = sorted({g["reason"] for g in summary.groups})
            assert summary.failed_groups == 0, summary.groups
            assert modes == [mode], f"{mode}: the summary says {modes} ({reasons})"
            copied = sum(g.get("row_groups_copied", 0) for g in summary.groups)
            encoded = sum(g.get("row_groups_encoded", 0) for g in summary.groups)
            out[mode] = {
                "modes": modes,
                "reasons": reasons,
                "groups": len(summary.groups),
                "fragments_after": summary.fragments_after,
                "row_groups_copied": copied,
                "row_groups_encoded": encoded,
                "min_row_group_bytes": options.min_row_group_bytes,
                "seconds": seconds,
            }
            print(
                f"  {mode:13s} summary: modes {modes} reasons {reasons}, {len(summary.groups)} groups -> "
                f"{summary.fragments_after} fragments, row groups {copied} copied / {encoded} re-encoded "
                f"(min_row_group_bytes={options.min_row_group_bytes:,}) in {seconds:.2f} s",
                flush=True,
            )
    finally:
        runtime.shutdown()
    return out


def delete_some(uri: str, rows: int) -> int:
    """Deletes the same seeded DELETED_SHARE of ids from the table at ``uri``; how many."""
    import lamina

    ids = np.sort(np.random.default_rng(7).choice(rows, int(rows * DELETED_SHARE), replace=False))
    return lamina.open_table(uri).delete("id IN (" + ",".join(map(str, ids.tolist())) + ")")


def upload(local: str, client: Any, bucket: str, prefix: str = "t") -> int:
    """Every file of the local table at ``local`` put under ``s3://bucket/prefix`` (paths are relative)."""
    n = 0
    for dirpath, _, files in os.walk(local):
        for name in files:
            path = os.path.join(dirpath, name)
            key = f"{prefix}/{os.path.relpath(path, local)}"
            with open(path, "rb") as f:
                client.put_object(Bucket=bucket, Key=key, Body=f.read())
            n += 1
    return n


def moto_get_ms(client: Any, bucket: str, key: str, size: int, n: int = 20) -> float:
    """Mean time of a 64 KiB ranged GET of ``key`` on the moto server (moto copies the whole object
    per ranged GET, so the cost grows with the object's size: a property of moto, not of S3)."""
    span = min(64 * KiB, size)
    client.get_object(Bucket=bucket, Key=key, Range=f"bytes=0-{span - 1}")["Body"].read()
    t0 = time.perf_counter()
    for i in range(n):
        at = (i * 7919 * KiB) % max(1, size - span)
        client.get_object(Bucket=bucket, Key=key, Range=f"bytes={at}-{at + span - 1}")["Body"].read()
    return (time.perf_counter() - t0) / n * 1000


def addresses(uri: str, storage_options: dict[str, str] | None, ids: np.ndarray) -> list[int]:
    """The row addresses of ``ids`` in the table at ``uri``."""
    import lamina

    t = lamina.open_table(uri, storage_options=storage_options).to_arrow(columns=["id"], with_row_address=True)
    where = dict(zip(t.column("id").to_numpy().tolist(), t.column("_rowaddr").to_numpy().tolist()))
    return [where[i] for i in ids.tolist()]


# -- layout ---------------------------------------------------------------------------------------------
def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    shift = out = 0
    while True:
        b = buf[pos]
        pos += 1
        out |= (b & 0x7F) << shift
        if not b & 0x80:
            return out, pos
        shift += 7


def _skip(buf: bytes, pos: int, ftype: int) -> int:
    """Past one Thrift compact-protocol value of type ``ftype``."""
    if ftype in (1, 2):  # bool in the field header
        return pos
    if ftype == 3:
        return pos + 1
    if ftype in (4, 5, 6):
        return _varint(buf, pos)[1]
    if ftype == 7:
        return pos + 8
    if ftype == 8:
        n, pos = _varint(buf, pos)
        return pos + n
    if ftype in (9, 10):
        head = buf[pos]
        pos += 1
        n, etype = head >> 4, head & 0x0F
        if n == 15:
            n, pos = _varint(buf, pos)
        for _ in range(n):
            pos = pos + 1 if etype in (1, 2) else _skip(buf, pos, etype)
        return pos
    if ftype == 11:
        n, pos = _varint(buf, pos)
        if n:
            types = buf[pos]
            pos += 1
            for _ in range(n):
                pos = _skip(buf, pos, types >> 4)
                pos = _skip(buf, pos, types & 0x0F)
        return pos
    if ftype == 12:
        return _struct(buf, pos, {})[1]
    raise ValueError(f"thrift type {ftype}")


def _struct(buf: bytes, pos: int, want: dict[int, int]) -> tuple[dict[int, int], int]:
    """Reads a compact-protocol struct; the i32 fields whose ids are in ``want``."""
    got: dict[int, int] = {}
    fid = 0
    while True:
        head = buf[pos]
        pos += 1
        if head == 0:
            return got, pos
        delta, ftype = head >> 4, head & 0x0F
        if delta:
            fid += delta
        else:
            z, pos = _varint(buf, pos)
            fid = (z >> 1) ^ -(z & 1)
        if fid in want and ftype == 5:
            z, pos = _varint(buf, pos)
            got[fid] = (z >> 1) ^ -(z & 1)
        else:
            pos = _skip(buf, pos, ftype)


def chunk_pages(data: bytes) -> list[tuple[int, int]]:
    """(page type, compressed page bytes with header) of every page of one column chunk's bytes."""
    pages, pos = [], 0
    while pos < len(data):
        got, body = _struct(data, pos, {1: 0, 3: 0})
        size = body - pos + got[3]
        pages.append((got[1], size))
        pos += size
    return pages


def layout(uri: str) -> dict[str, Any]:
    """Files, row groups and pages of the local table at ``uri`` (data pages only in the page figures)."""
    import lamina

    t = lamina.open_table(uri)
    rg_rows, rg_bytes, chunks, data_pages, value_pages, dict_pages = [], [], 0, [], [], 0
    for frag in t.manifest.fragments:
        path = os.path.join(uri, frag.path)
        meta = pq.ParquetFile(path).metadata
        with open(path, "rb") as f:
            raw = f.read()
        for r in range(meta.num_row_groups):
            rg = meta.row_group(r)
            rg_rows.append(rg.num_rows)
            rg_bytes.append(sum(rg.column(c).total_compressed_size for c in range(rg.num_columns)))
            for c in range(rg.num_columns):
                col = rg.column(c)
                chunks += 1
                dictionary = col.has_dictionary_page and col.dictionary_page_offset
                start = col.dictionary_page_offset if dictionary else col.data_page_offset
                for ptype, size in chunk_pages(raw[start : start + col.total_compressed_size]):
                    if ptype == 2:
                        dict_pages += 1
                        continue
                    data_pages.append(size)
                    if col.path_in_schema == "value":
                        value_pages.append(size)
    return {
        "files": len(t.manifest.fragments),
        "row_groups": len(rg_rows),
        "row_group_rows_median": statistics.median(rg_rows),
        "row_group_bytes_median": statistics.median(rg_bytes),
        "row_group_bytes_min": min(rg_bytes),
        "row_group_bytes_max": max(rg_bytes),
        "column_chunks": chunks,
        "data_pages": len(data_pages),
        "dictionary_pages": dict_pages,
        "data_page_bytes_median": statistics.median(data_pages),
        "value_pages": len(value_pages),
        "value_page_bytes_median": statistics.median(value_pages),
    }


# -- reading --------------------------------------------------------------------------------------------
def _worker(conn, uri: str, options: dict[str, str] | None, op: str, addrs: list[int]) -> None:
    """One table, one operation, in a fresh process: the first call opens the table; each call timed."""
    import lamina
    from lamina.store.scheduler import io_stats, stats_delta

    handle = None
    while True:
        if conn.recv() == "stop":
            return
        before = io_stats()
        t0 = time.perf_counter()
        if handle is None:
            handle = lamina.open_table(uri, storage_options=options)
        if op == "scan":
            out = handle.to_arrow()
            check: Any = (out.num_rows, int(pc.sum(out.column("id")).as_py()))
        elif op == "column":
            out = handle.to_arrow(columns=["value"])
            check = (out.num_rows, pc.sum(out.column("value")).as_py())
        elif op == "take":
            check = handle.take(addrs).column("id").to_pylist()
        else:
            check = [handle.take([a]).column("id")[0].as_py() for a in addrs]
        elapsed = time.perf_counter() - t0
        delta = stats_delta(before)
        io = {k: sum(e.get(k, 0) for e in delta.values()) for k in ("GET", "LIST", "HEAD", "bytes_read")}
        conn.send((elapsed, check, io))


def measure(
    uri: str, options: dict[str, str] | None, op: str, addrs: list[int], server: Any, bucket: str | None
) -> dict[str, Any]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_worker, args=(child, uri, options, op, addrs))
    proc.start()
    calls = []
    try:
        for _ in range(3):
            before = server.requests(bucket) if server else {}
            parent.send("run")
            elapsed, check, io = parent.recv()
            after = server.requests(bucket) if server else {}
            io["server"] = {k: after.get(k, 0) - before.get(k, 0) for k in after if after.get(k, 0) - before.get(k, 0)}
            calls.append((elapsed, check, io))
        parent.send("stop")
    finally:
        proc.join(60)
        if proc.is_alive():
            proc.kill()
    return {
        "cold": calls[0][0],
        "warm": (calls[1][0] + calls[2][0]) / 2,
        "check": calls[0][1],
        "cold_io": calls[0][2],
        "warm_io": calls[1][2],
    }


def run_store(
    store: str,
    specs: dict[str, tuple[str, dict[str, str] | None, str | None]],
    points: dict[str, dict[str, list[int]]],
    expected: dict[str, Any],
    rounds: int,
    server: Any,
) -> list[dict[str, Any]]:
    """Every (table, operation) on one store, ``rounds`` rotating rounds; medians per (table, operation)."""
    rows = []
    for op in OPS:
        per: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
        for r in range(rounds):
            order = TABLES[r % len(TABLES) :] + TABLES[: r % len(TABLES)]
            for name in order:
                uri, options, bucket = specs[name]
                key = "take1" if op == "take1" else "take"
                m = measure(uri, options, op, points[name][key], server, bucket)
                want = expected[op] if op in ("scan", "column") else expected[key]
                if op == "column":
                    same = m["check"][0] == want[0] and abs(m["check"][1] - want[1]) < 1e-6
                else:
                    same = m["check"] == want
                assert same, f"[{store}] {name} {op}: result differs from the expected rows"
                per[name].append(m)
        base = {ph: float(np.median([m[ph] for m in per["uncompacted"]])) for ph in ("cold", "warm")}
        for name in TABLES:
            row: dict[str, Any] = {"store": store, "op": op, "table": name}
            for ph in ("cold", "warm"):
                s = float(np.median([m[ph] for m in per[name]]))
                io = per[name][0][f"{ph}_io"]
                row[ph] = {
                    "s": s,
                    "vs_uncompacted": s / base[ph],
                    "io": io,
                    "spread": [min(m[ph] for m in per[name]), max(m[ph] for m in per[name])],
                }
            rows.append(row)
            report(row)
    return rows


def report(row: dict[str, Any]) -> None:
    parts = []
    for ph in ("cold", "warm"):
        r = row[ph]
        io = r["io"]
        text = f"{ph} {r['s'] * 1000:8.1f} ms ({r['vs_uncompacted']:5.2f}x) GET {io['GET']:5d} {io['bytes_read'] / MiB:7.1f} MiB"
        if row["store"] == "s3":
            text += f" [server GET {io['server'].get('GET', 0)}]"
        parts.append(text)
    print(f"[{row['store']:5s}] {row['op']:6s} {row['table']:13s} " + "  |  ".join(parts), flush=True)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="100 fragments, 1 round")
    ap.add_argument("--only", choices=("local", "s3"))
    ap.add_argument("--fragments", type=int)
    ap.add_argument("--rounds", type=int, help="fresh processes per (store, table, operation); medians (default 3)")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    fragments = args.fragments or (100 if args.quick else 400)
    rounds = args.rounds or (1 if args.quick else 3)
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import lamina

    root = tempfile.mkdtemp(prefix="lamina-read-after-")
    server = None
    result: dict[str, Any] = {"fragments": fragments, "rounds": rounds}
    try:
        source = os.path.join(root, "uncompacted")
        t0 = time.perf_counter()
        rows = build_source(source, fragments)
        print(
            f"source: {fragments} fragments of {SMALL_ROWS:,} or {LARGE_ROWS:,} rows, {rows:,} rows, "
            f"built in {time.perf_counter() - t0:.1f} s",
            flush=True,
        )
        result["compaction"] = compact_copies(root, source)
        local = {name: os.path.join(root, name) for name in TABLES}
        deleted = {name: delete_some(uri, rows) for name, uri in local.items()}
        assert len(set(deleted.values())) == 1, deleted
        print(f"deleted {deleted['uncompacted']:,} rows (the same ids) from each table", flush=True)

        result["layout"] = {name: layout(uri) for name, uri in local.items()}
        for name, lay in result["layout"].items():
            print(
                f"  layout {name:13s} files {lay['files']:4d}  row groups {lay['row_groups']:4d} (median "
                f"{lay['row_group_rows_median']:,.0f} rows, {lay['row_group_bytes_median'] / KiB:,.0f} KiB; "
                f"{lay['row_group_bytes_min'] / KiB:,.0f}-{lay['row_group_bytes_max'] / KiB:,.0f} KiB)  "
                f"data pages {lay['data_pages']:6d} (median {lay['data_page_bytes_median'] / KiB:,.1f} KiB)  "
                f"'value' pages {lay['value_pages']:5d} (median {lay['value_page_bytes_median'] / KiB:,.1f} KiB)",
                flush=True,
            )

        gone = np.random.default_rng(7).choice(rows, int(rows * DELETED_SHARE), replace=False)
        live = np.setdiff1d(np.arange(rows), np.sort(gone))
        rng = np.random.default_rng(1000)
        picked = rng.choice(live, 1100, replace=False)
        ids = {"take": picked[:1000], "take1": picked[1000:]}
        scan_ids = int(live.sum())
        expected: dict[str, Any] = {"scan": (len(live), scan_ids), "take": ids["take"].tolist(), "take1": ids["take1"].tolist()}

        stores = [args.only] if args.only else ["local", "s3"]
        specs: dict[str, dict[str, tuple[str, dict[str, str] | None, str | None]]] = {}
        if "local" in stores:
            specs["local"] = {name: (uri, None, None) for name, uri in local.items()}
        if "s3" in stores:
            os.environ.update(DUMMY)
            import boto3

            from lamina.testing import MotoServer

            server = MotoServer().start()
            client = boto3.client("s3", endpoint_url=server.endpoint, region_name="us-east-1")
            specs["s3"] = {}
            for name, uri in local.items():
                bucket = f"rac-{name.replace('_', '-')}"
                client.create_bucket(Bucket=bucket)
                upload(uri, client, bucket)
                specs["s3"][name] = (f"s3://{bucket}/t", lamina_options(server.endpoint), bucket)
            calib = {}
            for name in ("uncompacted", "full_rewrite"):
                frag = lamina.open_table(local[name]).manifest.fragments[0]
                bucket = specs["s3"][name][2]
                calib[name] = (frag.file_bytes, moto_get_ms(client, bucket, f"t/{frag.path}", frag.file_bytes))
            result["moto_get_ms"] = calib
            print(
                "moto: a 64 KiB ranged GET takes "
                + ", ".join(f"{ms:.1f} ms on a {size / MiB:.1f} MiB object" for size, ms in calib.values()),
                flush=True,
            )
        result["reads"] = []
        for store in stores:
            points = {
                name: {k: addresses(uri, options, v) for k, v in ids.items()} for name, (uri, options, _) in specs[store].items()
            }
            # the one-column scan's expected sum, from the uncompacted table in this process
            uri, options, _ = specs[store]["uncompacted"]
            col = lamina.open_table(uri, storage_options=options).to_arrow(columns=["value"])
            expected["column"] = (col.num_rows, pc.sum(col.column("value")).as_py())
            result["reads"] += run_store(store, specs[store], points, expected, rounds, server)
        if args.json:
            print(json.dumps(result, indent=2, default=str))
    finally:
        if server:
            server.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
