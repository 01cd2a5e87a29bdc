"""Issue 12: reads at scale — one I/O scheduler per process, request accounting, bounded caches,
and ``Table.take`` over many fragments in one pass (local and on the moto S3 server)."""

from __future__ import annotations

import os
import threading
import time

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina import _native
from lamina.cache import caches, clear_caches
from lamina.errors import CorruptFile, RowNotFound
from lamina.store import open_store
from lamina.store.scheduler import POINT, SCAN, Scheduler, coalesce, fetch_ranges, io_stats, stats_delta

SCHEMA = pa.schema([("id", pa.int64()), ("url", pa.string()), ("score", pa.float64())])


def rows(lo: int, hi: int) -> pa.Table:
    ids = np.arange(lo, hi, dtype=np.int64)
    return pa.table(
        {"id": ids, "url": [f"https://example.com/{i}/{'x' * (i % 13)}" for i in range(lo, hi)], "score": ids * 0.5},
        schema=SCHEMA,
    )


def many_fragments(uri, options, fragments=40, per=50):
    t = lamina.create_table(uri, SCHEMA, storage_options=options)
    t.append(rows(0, fragments * per), max_rows_per_file=per, row_group_rows=20)
    assert len(t.manifest.fragments) == fragments
    return t


def addresses(t: lamina.Table) -> pa.Table:
    return t.to_arrow(with_row_address=True)


def test_take_across_many_fragments_matches_a_scan(table_location):
    uri, options = table_location
    t = many_fragments(uri, options)
    t.delete("id IN (" + ", ".join(str(i) for i in range(3, 2000, 7)) + ")")
    full = addresses(t)
    rng = np.random.default_rng(5)
    pick = rng.choice(full.num_rows, 300, replace=True)  # repeats, any order, many fragments
    got = t.take(full.column("_rowaddr").to_numpy()[pick], ["url", "id", "score"])
    assert got.column("id").to_pylist() == full.column("id").to_numpy()[pick].tolist()
    assert got.column("url").to_pylist() == [full.column("url")[int(i)].as_py() for i in pick]
    assert got.column("score").to_pylist() == full.column("score").to_numpy()[pick].tolist()
    # a deleted row is refused, naming it
    deleted = t.checkout(2).to_arrow(filter="id = 17", with_row_address=True).column("_rowaddr")[0].as_py()
    with pytest.raises(RowNotFound, match=f"row address {deleted}"):
        t.take([int(full.column("_rowaddr")[0].as_py()), deleted], ["id"])


def test_large_objects_on_s3_are_read_by_row_group_and_agree(s3_table_uri, s3_options, monkeypatch):
    t = many_fragments(s3_table_uri, s3_options, fragments=6, per=100)
    full = addresses(t)
    pick = np.array([599, 0, 250, 250, 101, 42])
    expect = full.column("url").take(pa.array(pick)).to_pylist()
    monkeypatch.setenv("LAMINA_POINT_OBJECT_BYTES", "0")  # no object is "small": footer + row groups
    clear_caches()
    assert t.take(full.column("_rowaddr").to_numpy()[pick], ["url"]).column("url").to_pylist() == expect
    monkeypatch.setenv("LAMINA_POINT_OBJECT_BYTES", str(1 << 20))
    clear_caches()
    assert t.take(full.column("_rowaddr").to_numpy()[pick], ["url"]).column("url").to_pylist() == expect


def test_take_costs_one_get_per_fragment_cold_and_none_warm_on_s3(s3_table_uri, s3_options):
    t = many_fragments(s3_table_uri, s3_options, fragments=30, per=40)
    full = addresses(t)
    frag_of = full.column("_rowaddr").to_numpy() >> np.uint64(32)
    pick = np.flatnonzero(frag_of % 3 == 0)[::7]  # rows of 10 fragments
    wanted = full.column("_rowaddr").to_numpy()[pick]
    distinct = len(np.unique(frag_of[pick]))
    clear_caches()
    before = io_stats()
    t.take(wanted, ["url"])
    cold = stats_delta(before)[t.store.io_domain]
    assert cold["GET"] == distinct and cold["HEAD"] == 0 and cold["LIST"] == 0
    assert cold["bytes_read"] == sum(f.file_bytes for f in t.manifest.fragments if f.id in set(frag_of[pick].tolist()))
    before = io_stats()
    again = t.take(wanted, ["url"])
    assert t.store.io_domain not in stats_delta(before)  # warm: served from the bounded object cache
    assert again.column("url").to_pylist() == full.column("url").take(pa.array(pick)).to_pylist()


def test_a_corrupt_small_object_on_s3_is_named(s3_table_uri, s3_options):
    import boto3

    t = many_fragments(s3_table_uri, s3_options, fragments=3, per=30)
    frag = t.manifest.fragments[1]
    client = boto3.client(
        "s3",
        endpoint_url=s3_options["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    bucket, prefix = s3_table_uri[5:].split("/", 1)
    key = f"{prefix}/{frag.path}"
    raw = bytearray(client.get_object(Bucket=bucket, Key=key)["Body"].read())
    raw[len(raw) // 2] ^= 0xFF
    client.put_object(Bucket=bucket, Key=key, Body=bytes(raw))
    clear_caches()
    with pytest.raises(CorruptFile, match=frag.path):
        t.take([(frag.id << 32) | 3], ["url"])


def test_io_stats_count_requests_by_store(tmp_path, s3_table_uri, s3_options):
    before = io_stats()
    t = lamina.create_table(s3_table_uri, SCHEMA, storage_options=s3_options)
    t.append(rows(0, 10))
    lamina.open_table(s3_table_uri, storage_options=s3_options).to_arrow()
    s3 = stats_delta(before)[f"s3://{s3_table_uri[5:].split('/')[0]}"]
    assert s3["PUT"] >= 3 and s3["GET"] >= 2 and s3["bytes_written"] > 0 and s3["bytes_read"] > 0
    before = io_stats()
    local = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    local.append(rows(0, 10))
    assert stats_delta(before)["local"]["PUT"] >= 2


def test_native_caches_stay_within_their_budgets(tmp_path):
    t = many_fragments(str(tmp_path / "t"), None, fragments=30, per=20)
    wanted = addresses(t).column("_rowaddr").to_numpy()
    expect = t.to_arrow(columns=["url"]).column("url").to_pylist()
    try:
        _native.clear_native_caches(1, 1)
        assert t.take(wanted[:5], ["id"]).num_rows == 5
        stats = _native.native_cache_stats()
        assert stats["footers"][:3] == (0, 0, 1) and stats["chunks"][:3] == (0, 0, 1)  # larger than the budget: never kept
        _native.clear_native_caches(64 << 20, 64 << 20)
        t.take(wanted[:1], ["url"])
        one_footer, one_chunk = _native.native_cache_stats()["footers"][1], _native.native_cache_stats()["chunks"][1]
        _native.clear_native_caches(one_footer * 5, one_chunk * 7)
        assert t.take(wanted, ["url"]).column("url").to_pylist() == expect  # all 30 fragments
        stats = _native.native_cache_stats()
        assert stats["footers"][2] == one_footer * 5 and 0 < stats["footers"][1] <= one_footer * 5 and stats["footers"][4] == 30
        assert stats["chunks"][2] == one_chunk * 7 and 0 < stats["chunks"][1] <= one_chunk * 7 * 1.5
        assert t.take(wanted[::-1], ["url"]).column("url").to_pylist() == expect[::-1]  # evicted or not: same rows
    finally:
        _native.clear_native_caches(64 << 20, 256 << 20)


def test_a_second_lookup_decodes_nothing(tmp_path):
    t = many_fragments(str(tmp_path / "t"), None, fragments=10, per=100)
    wanted = addresses(t).column("_rowaddr").to_numpy()[::9]
    clear_caches()
    first = t.take(wanted, ["url", "score"])
    misses = _native.native_cache_stats()["chunks"][4]
    assert misses == 10 * 5 * 2  # 10 fragments x 5 row groups (of 20 rows) x 2 columns, each decoded once
    again = t.take(wanted, ["score", "url"])
    assert _native.native_cache_stats()["chunks"][4] == misses
    assert again.select(["url", "score"]).equals(first)


def test_object_cache_is_bounded_and_listed(s3_table_uri, s3_options, monkeypatch):
    objects = caches()["objects"]
    t = many_fragments(s3_table_uri, s3_options, fragments=8, per=40)
    wanted = addresses(t).column("_rowaddr").to_numpy()
    clear_caches()
    t.take(wanted, ["id"])
    assert len(objects) == 8 and objects.bytes <= objects.budget
    largest = max(f.file_bytes for f in t.manifest.fragments)
    monkeypatch.setattr(objects, "budget", 3 * largest)
    clear_caches()
    got = t.take(wanted, ["id"])
    assert 0 < len(objects) <= 3 and objects.bytes <= 3 * largest
    assert got.column("id").to_pylist() == list(range(320))


def test_coalesce_merges_nearby_ranges_up_to_a_limit():
    assert coalesce([(0, 10), (15, 5), (100, 10)], gap=5, limit=1000) == [(0, 20, [0, 1]), (100, 10, [2])]
    assert coalesce([(100, 10), (0, 10)], gap=1000, limit=50) == [(0, 10, [1]), (100, 10, [0])]
    assert coalesce([(0, 500)], gap=0, limit=10) == [(0, 500, [0])]  # one large range stays whole
    assert coalesce([(0, 10), (5, 10)], gap=0, limit=100) == [(0, 15, [0, 1])]  # overlaps


def test_fetch_ranges_coalesces_gets_and_returns_each_range(s3_table_uri, s3_options):
    store = open_store(s3_table_uri, s3_options)
    blob = bytes(range(256)) * 64
    store.put("blob", blob)
    before = io_stats()
    got = fetch_ranges(store, [("blob", 10, 5), ("blob", 20, 30), ("blob", 9000, 4), ("blob", 0, 16384)])
    assert got == [blob[10:15], blob[20:50], blob[9000:9004], blob]
    assert stats_delta(before)[store.io_domain]["GET"] == 1  # all within the gap: one request


def test_fetch_ranges_on_a_local_disk_reads_each_range_into_its_own_bytes(tmp_path, monkeypatch):
    """One open file and a pread per range, none read into a larger buffer and copied out (a cold index
    lookup read 56 MB of blocks twice); truncation and a missing file are still said."""
    from lamina.errors import CorruptFile, ObjectNotFound

    store = open_store(str(tmp_path / "t"))
    blob = bytes(range(256)) * 64
    store.put("blob", blob)
    store.put("other", b"xyz")
    opened = []
    real_open = os.open
    monkeypatch.setattr(os, "open", lambda p, *a, **k: opened.append(p) or real_open(p, *a, **k))
    before = io_stats()
    requests = [("blob", 10, 5), ("other", 1, 2), ("blob", 20, 30), ("blob", 9000, 4), ("blob", 0, 16384), ("blob", 12, 0)]
    got = fetch_ranges(store, requests)
    assert got == [blob[10:15], b"yz", blob[20:50], blob[9000:9004], blob, b""]
    assert all(type(b) is bytes for b in got)
    assert len(opened) == 2 and stats_delta(before)[store.io_domain]["GET"] == len(requests)
    with pytest.raises(CorruptFile, match="blob is shorter than expected.*truncated"):
        fetch_ranges(store, [("blob", 16380, 10)])
    with pytest.raises(ObjectNotFound, match="gone"):
        fetch_ranges(store, [("gone", 0, 1)])


def test_point_requests_are_served_before_queued_scans():
    sched = Scheduler("test", concurrency=1)
    gate = threading.Event()
    order: list[str] = []
    first = sched.submit(gate.wait, SCAN)  # occupies the only worker
    scans = [sched.submit(lambda i=i: order.append(f"scan{i}"), SCAN) for i in range(3)]
    point = sched.submit(lambda: order.append("point"), POINT)
    gate.set()
    for f in [first, point, *scans]:
        f.result(timeout=10)
    assert order == ["point", "scan0", "scan1", "scan2"]


def test_a_request_made_inside_a_worker_runs_inline():
    sched = Scheduler("nested", concurrency=1)
    assert sched.run(lambda: sched.run(lambda: 42)) == 42  # would wait forever if queued


def test_a_waited_request_runs_on_the_calling_thread_when_a_slot_is_free_and_still_counts_against_the_bound():
    sched = Scheduler("inline", concurrency=1)
    assert sched.run(threading.get_ident) == threading.get_ident()  # nothing queued, a slot free: no thread hop
    gate, inside = threading.Event(), threading.Event()
    order: list[str] = []

    def hold() -> str:
        inside.set()
        gate.wait(10)
        order.append("inline")
        return "done"

    holder = threading.Thread(target=lambda: order.append(sched.run(hold)))
    holder.start()
    assert inside.wait(10)
    queued = sched.submit(lambda: order.append("queued"), SCAN)  # the only slot is taken: it waits
    time.sleep(0.05)
    assert not queued.done()
    gate.set()
    queued.result(timeout=10)
    holder.join(10)
    assert order.index("inline") < order.index("queued")


def test_job_reports_count_the_requests_of_their_ray_tasks(ray_cluster, s3_table_uri, s3_options):
    """The jobs' --json summaries carry io: the requests of the driver and of every Ray task it ran."""
    from lamina.compaction import compact
    from lamina.index.build import build_index
    from lamina.planner import CompactionOptions

    t = many_fragments(s3_table_uri, s3_options, fragments=12, per=30)
    bucket = t.store.io_domain
    built = build_index(s3_table_uri, "id", "btree", storage_options=s3_options, ray=True)
    assert built.io[bucket]["GET"] >= 12 and built.io[bucket]["PUT"] >= 2  # workers read every data file
    _, summary = compact(s3_table_uri, CompactionOptions(target_rows_per_fragment=1000), storage_options=s3_options)
    io = summary.to_dict()["io"][bucket]
    assert summary.bytes_read > 0 and io["bytes_read"] >= summary.bytes_read and io["bytes_written"] >= summary.bytes_written
    assert io["GET"] >= 12 and io["PUT"] >= 2


def test_large_objects_on_s3_read_their_footer_once(s3_table_uri, s3_options, monkeypatch):
    rng = np.random.default_rng(3)
    schema = pa.schema([("id", pa.int64()), ("blob", pa.binary())])
    t = lamina.create_table(s3_table_uri, schema, storage_options=s3_options)
    t.append(
        pa.table({"id": np.arange(4000), "blob": [rng.bytes(200) for _ in range(4000)]}, schema=schema),
        max_rows_per_file=1000,
        row_group_rows=250,
    )  # files of ~200 KiB: larger than a footer read
    wanted = t.to_arrow(with_row_address=True).column("_rowaddr").to_numpy()[[5, 1500, 3900]]  # 3 fragments
    monkeypatch.setenv("LAMINA_POINT_OBJECT_BYTES", "0")  # every object "large": footer + row groups
    clear_caches()
    before = io_stats()
    first = t.take(wanted, ["id"])
    cold = stats_delta(before)[t.store.io_domain]["GET"]
    before = io_stats()
    again = t.take(wanted, ["id"])
    warm = stats_delta(before)[t.store.io_domain]["GET"]
    assert again.equals(first) and first.column("id").to_pylist() == [5, 1500, 3900]
    # the footers come from the footer cache (a chunk inside the footer read costs one GET either way)
    assert 3 <= warm < cold, (cold, warm)


def test_among_agrees_with_isin():
    from lamina.deletion import among

    rng = np.random.default_rng(9)
    for _ in range(200):
        deleted = np.unique(rng.integers(0, 500, rng.integers(0, 60))).astype(np.uint32)
        offsets = rng.integers(0, 520, rng.integers(0, 40)).astype(np.uint32)
        assert (among(offsets, deleted) == np.isin(offsets, deleted)).all()


def test_writing_many_files_costs_linear_bookkeeping(tmp_path, monkeypatch):
    """Issue 18, item 3: write_fragments looked at every earlier future for each new file (quadratic)."""
    from concurrent.futures import Future

    calls = {"done": 0}
    real_done = Future.done

    def counting_done(self):
        calls["done"] += 1
        return real_done(self)

    monkeypatch.setattr(Future, "done", counting_done)
    t = lamina.create_table(str(tmp_path / "t"), SCHEMA)
    t.append(rows(0, 3000), max_rows_per_file=10)  # 300 files
    assert len(t.manifest.fragments) == 300 and t.count_rows() == 3000
    assert calls["done"] < 10 * 300, calls  # the quadratic loop made ~45,000


COLD_READS = """
import sys, numpy as np, lamina
t = lamina.open_table(sys.argv[1])
f = t.manifest.fragments[0]
rows = t.take(np.array([f.id << 32 | 2, f.id << 32 | 0], dtype=np.uint64), ["s"]).column("s").to_pylist()
addrs = t.to_arrow(with_row_address=True).num_rows
cat = lamina.connect(sys.argv[2])
found = [sorted(t.to_arrow(columns=["s"], filter=flt).column("s").to_pylist()) for flt in sys.argv[3:]]
print(rows, addrs, cat.list_namespaces(), cat.describe_table("ns.t").rows, found, "pandas" in sys.modules)
"""

#: Filters an index answers whole: their literals and key ranges are built without pa.scalar / pa.array.
INDEXED_FILTERS = [
    "id = 2",
    "id IN (0, 1, 3, 7)",
    "id > 1 AND id <= 3",
    "id BETWEEN 0 AND 2",
    "name = 'n3'",
    "name IN ('n0', 'n2')",
    "x IN (0.0, 2.5)",
    "x >= 999.0",
]


def test_a_cold_lookup_and_catalog_read_never_import_pandas(tmp_path):
    """pyarrow's pa.array, pa.scalar and Array.to_numpy import pandas on their first call in a process
    (~150-180 ms when pandas is installed): a cold take, a read with row addresses (over deletions), a
    catalog read and filtered reads an index answers build their arrays and literals without it."""
    import subprocess
    import sys

    uri, root = str(tmp_path / "t"), str(tmp_path / "cat")
    t = lamina.create_table(uri, pa.schema([("id", pa.int64()), ("s", pa.string()), ("name", pa.string()), ("x", pa.float64())]))
    n = 2000  # fragments of 1,000 rows: a handful of candidates is an index lookup, not a scan
    t.append(
        pa.table(
            {
                "id": list(range(n)),
                "s": ["a", "b", "c", "d"] + [f"s{i}" for i in range(4, n)],
                "name": [f"n{i}" for i in range(n)],
                "x": [i * 0.5 for i in range(n)],
            }
        ),
        max_rows_per_file=1000,
    )
    t.delete("id = 1")
    for column in ("id", "name", "x"):
        t.create_index(column, "btree")
    cat = lamina.connect(root)
    cat.create_namespace("ns")
    cat.create_table("ns.t", pa.schema([("id", pa.int64())]))
    out = subprocess.run(
        [sys.executable, "-c", COLD_READS, uri, root, *INDEXED_FILTERS], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    expected = [sorted(t.to_arrow(columns=["s"], filter=flt).column("s").to_pylist()) for flt in INDEXED_FILTERS]
    assert expected == [["c"], ["a", "d", "s7"], ["c", "d"], ["a", "c"], ["d"], ["a", "c"], ["a", "s5"], ["s1998", "s1999"]]
    assert out.stdout.strip() == f"['c', 'a'] 1999 ['ns'] 0 {expected} False"
    for flt in INDEXED_FILTERS:  # answered by an index, not by a scan (which imports pyarrow.dataset, and pandas)
        assert "; scan for 0 fragment(s)" in t.explain(flt), (flt, t.explain(flt))


COLD_CATALOG = """
import sys, pyarrow as pa, lamina
cat = lamina.connect(sys.argv[1])
found = (cat.list_namespaces(), cat.list_namespaces("ns"), cat.list_tables("ns"), cat.describe_table("ns.t").rows)
print(found, pa.default_memory_pool().num_allocations())
"""


def test_cold_catalog_reads_never_touch_pyarrows_default_memory_pool(tmp_path):
    """pyarrow's default pool (mimalloc) maps its arena with transparent huge pages: the first allocation of a
    process stalled ~4 ms in about one process of eight on this machine (a 2 MiB page found and zeroed). A catalog
    read in a new process, a CLI's whole life, allocates nothing there (the native reader's row offsets used to be
    exported to it as an Arrow array)."""
    import subprocess
    import sys

    root = str(tmp_path / "cat")
    cat = lamina.connect(root)
    cat.create_namespace("ns")
    cat.create_namespace("ns.inner")
    cat.create_table("ns.t", pa.schema([("id", pa.int64())]))
    out = subprocess.run([sys.executable, "-c", COLD_CATALOG, root], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "(['ns'], ['ns.inner'], ['ns.t'], 0) 0"
