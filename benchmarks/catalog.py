"""The catalog (lamina.connect) against Lance's directory namespace: reads cold and warm, writes at 1/4/8 processes.

    .venv/bin/python -m benchmarks.catalog [--quick] [--only local|s3] [--no-profile] [--json] [--cold-forkserver]

Shaped like the seed's benchmark (../shared/seeds/000_05d22ec4e4534844.txt), on a local temp directory and
on a moto S3 server on 127.0.0.1 (lamina.testing's, with S3's atomic conditional writes; started in this
process, reached over TCP by the worker processes; Lamina and Lance each get their own bucket). Every
client call runs in a worker process, never in this one (the moto server's threads would share its GIL).

Catalog: 1,000 entries (--quick: 100): a third namespaces (1/9 of them at the top level, the rest one level
  below, round-robin), two thirds tables spread round-robin over the inner namespaces. Seeded through the API,
  one call at a time (a write throughput figure at concurrency 1). Lamina: ``create_table(name, schema)``
  creates an empty table; Lance's ``create_table`` refuses an empty stream, so it gets one row (it writes one
  small data file more than Lamina does).
Reads, on the same names for both: ``list_namespaces(top namespace)`` (8 children), ``list_namespaces()`` (the
  top level), ``list_tables(inner namespace)``, ``describe_table(name)`` (Lance: ``load_detailed_metadata=True``,
  which opens the table for its version and schema, as Lamina's describe_table does; Lance's name-only lookup is
  also timed, for information).
  cold: every operation in a new Python interpreter that has imported only the measured library (``lamina``,
        or ``lance_namespace``) and touched no storage: the time is connect() + the operation, from a clean start
        (import time not counted). 30 per operation (--quick: 5), Lamina and Lance alternating.
        ``--cold-forkserver`` forks them instead from one forkserver that preloaded both libraries (the method of
        the rounds before 2026-11-27: its children inherit a large heap and the collector's counters, so a full
        garbage collection, slowed by copy-on-write faults, lands in whichever call allocates enough).
  warm: one process, one handle each, 5 warm-up calls then 200 per operation (--quick: 20), interleaved call by
        call (who goes first alternates); every result is checked against the other library's.
Writes: ``create_namespace`` (top level) and ``create_table`` (in one namespace) at 1, 4 and 8 concurrent
  processes, each with its own handle, released together by a barrier; 64 calls per level (--quick: 16) split
  evenly. Throughput = calls / (last finish - first start). Then a fresh handle lists: every name created
  must be listed exactly once (and no call may fail).
Maintenance (if lamina.maintenance exists): ``maintain(root)`` over a catalog of 50 healthy tables (--quick: 10;
  one fragment each, nothing to do), in a fresh process, twice: ms per table (target < 50).
Targets (issue 11): every read <= 0.5x Lance's latency (p50 and p95), writes >= Lance's throughput at every
concurrency with nothing lost, maintenance < 50 ms per table. For each missed Lamina read, a cProfile of the
operation (warm: 50 calls on one handle; cold: connect() + the call in one fresh process) prints its top 10
functions by cumulative time.
Nothing is written outside the temp directories and the moto server.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import cProfile
import io
import json
import logging
import multiprocessing as mp
import os
import platform
import pstats
import random
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from typing import Any

import pyarrow as pa

SYSTEMS = ("lamina", "lance")
SCHEMA = pa.schema([("id", pa.int64()), ("value", pa.string())])
READ_OPS = ("list_namespaces(parent)", "list_namespaces(top)", "list_tables", "describe_table")
#: Lance only, for information: its describe_table without opening the table (a name lookup in its manifest).
LANCE_NAME_ONLY = "describe_table (name only)"
WRITE_OPS = ("create_namespace", "create_table")
LEVELS = (1, 4, 8)
DUMMY_AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


# -- the two catalogs behind one call shape --------------------------------------------------------------------
def lance_available() -> str | None:
    """The pylance / lance-namespace versions, or None when they are not installed."""
    try:
        import importlib
        from importlib.metadata import version

        importlib.import_module("lance.namespace")  # the directory namespace
        importlib.import_module("lance_namespace")
        return f"pylance {version('pylance')}, lance-namespace {version('lance-namespace')}"
    except ImportError:
        return None


def handle(system: str, backend: dict[str, Any]) -> Any:
    """A new catalog handle: ``lamina.connect`` or Lance's DirectoryNamespace."""
    if system == "lamina":
        import lamina

        return lamina.connect(backend["lamina_root"], storage_options=backend["lamina_options"])
    import lance_namespace

    return lance_namespace.connect("dir", backend["lance_props"])


_ONE_ROW: bytes | None = None


def _one_row_ipc() -> bytes:
    global _ONE_ROW
    if _ONE_ROW is None:
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, SCHEMA) as w:
            w.write_table(pa.table({"id": [1], "value": ["x"]}, schema=SCHEMA))
        _ONE_ROW = sink.getvalue().to_pybytes()
    return _ONE_ROW


def run_op(system: str, h: Any, op: str, arg: str | None) -> Any:
    """One catalog call; returns what it lists (last name levels, sorted) or describes (the table's version)."""
    if system == "lamina":
        if op.startswith("list_namespaces"):
            return sorted(n.rpartition(".")[2] for n in h.list_namespaces(arg))
        if op == "list_tables":
            return sorted(n.rpartition(".")[2] for n in h.list_tables(arg))
        if op == "describe_table":
            return h.describe_table(arg).version
        if op == "create_namespace":
            return h.create_namespace(arg)
        if op == "create_table":
            return h.create_table(arg, SCHEMA).version
        raise ValueError(op)
    import lance_namespace as ln

    ident = arg.split(".") if arg else []
    if op.startswith("list_namespaces"):
        r = h.list_namespaces(ln.ListNamespacesRequest(id=ident))
        assert r.page_token is None, "Lance paginated a listing: the benchmark would need to follow page tokens"
        return sorted(r.namespaces)
    if op == "list_tables":
        r = h.list_tables(ln.ListTablesRequest(id=ident))
        assert r.page_token is None, "Lance paginated a listing: the benchmark would need to follow page tokens"
        return sorted(r.tables)
    if op == "describe_table":
        return h.describe_table(ln.DescribeTableRequest(id=ident, load_detailed_metadata=True)).version
    if op == LANCE_NAME_ONLY:
        return h.describe_table(ln.DescribeTableRequest(id=ident)).location is not None
    if op == "create_namespace":
        return h.create_namespace(ln.CreateNamespaceRequest(id=ident))
    if op == "create_table":
        return h.create_table(ln.CreateTableRequest(id=ident), _one_row_ipc()).version
    raise ValueError(op)


# -- the catalog's shape -----------------------------------------------------------------------------------------
def catalog_names(entries: int) -> tuple[list[str], list[str], list[str]]:
    """(top namespaces, inner namespaces, tables): a third namespaces (1/9 of them at the top), the rest tables."""
    n_ns = entries // 3
    n_top = max(1, n_ns // 9)
    top = [f"ns{i:03d}" for i in range(n_top)]
    inner = [f"{top[k % n_top]}.sub{k // n_top:02d}" for k in range(n_ns - n_top)]
    tables = [f"{inner[k % len(inner)]}.t{k:04d}" for k in range(entries - n_ns)]
    return top, inner, tables


# -- worker processes (each started from the forkserver) ---------------------------------------------------------
def seed_worker(system: str, backend: dict[str, Any], names: list[tuple[str, str]]) -> dict[str, Any]:
    """Creates every (op, name) in order through one handle; the time of each call."""
    h = handle(system, backend)
    lat: dict[str, list[float]] = {op: [] for op in WRITE_OPS}
    t0 = time.perf_counter()
    for op, name in names:
        s = time.perf_counter()
        run_op(system, h, op, name)
        lat[op].append(time.perf_counter() - s)
    return {"seconds": time.perf_counter() - t0, "lat": lat}


def cold_worker(system: str, backend: dict[str, Any], op: str, arg: str | None) -> tuple[float, float, Any]:
    """connect() + one call from a clean start: (total seconds, connect seconds, result)."""
    t0 = time.perf_counter()
    h = handle(system, backend)
    t1 = time.perf_counter()
    out = run_op(system, h, op, arg)
    return time.perf_counter() - t0, t1 - t0, out


#: What a cold child imports before its clock starts: the measured library only, as a user's process would.
COLD_IMPORTS = {"lamina": ("lamina", "lamina.catalog"), "lance": ("lance_namespace", "lance.namespace")}


def cold_child(request: str) -> None:
    """``--cold-child``: imports the measured library, runs :func:`cold_worker` once and prints its result as JSON."""
    import importlib

    system, backend, op, arg = json.loads(request)
    for module in COLD_IMPORTS[system]:
        importlib.import_module(module)
    print(json.dumps(cold_worker(system, backend, op, arg)))


def warm_worker(backend: dict[str, Any], systems: tuple[str, ...], plan: list[tuple[str, list]], warmup: int) -> dict[str, Any]:
    """One handle per system, the calls of ``plan`` interleaved call by call; results compared across systems."""
    hs = {s: handle(s, backend) for s in systems}
    for op, args in plan:
        for s in systems:
            if op != LANCE_NAME_ONLY or s == "lance":
                for a in args[:warmup]:
                    run_op(s, hs[s], op, a)
    lat: dict[str, list[float]] = {}
    mismatches: list[str] = []
    for op, args in plan:
        order = [s for s in systems if op != LANCE_NAME_ONLY or s == "lance"]
        for i, a in enumerate(args):
            got = {}
            for s in order if i % 2 == 0 else order[::-1]:
                t0 = time.perf_counter()
                got[s] = run_op(s, hs[s], op, a)
                lat.setdefault(f"{s}/{op}", []).append(time.perf_counter() - t0)
            if len(got) == 2 and op.startswith("list") and got["lamina"] != got["lance"]:
                mismatches.append(f"{op}({a!r}): lamina {got['lamina'][:5]}... != lance {got['lance'][:5]}...")
    return {"lat": lat, "mismatches": mismatches}


def write_worker(system: str, backend: dict[str, Any], op: str, names: list[str], barrier: Any, queue: Any) -> None:
    """One of the concurrent writers: its own handle, released by ``barrier``; reports its calls on ``queue``."""
    try:
        h = handle(system, backend)
        barrier.wait(timeout=600)
        start = time.time()
        lat, failed = [], []
        for n in names:
            t0 = time.perf_counter()
            try:
                run_op(system, h, op, n)
                lat.append(time.perf_counter() - t0)
            except Exception as e:  # a failed call is reported, and counts as not done
                failed.append(f"{n}: {type(e).__name__}: {str(e)[:200]}")
        queue.put({"start": start, "end": time.time(), "lat": lat, "failed": failed})
    except Exception:
        queue.put({"error": traceback.format_exc()})


def verify_worker(
    system: str, backend: dict[str, Any], op: str, parent: str | None, prefix: str, expected: list[str]
) -> dict[str, Any]:
    """A fresh handle lists what the writers created: missing, duplicated and unexpected names."""
    h = handle(system, backend)
    listed = run_op(system, h, "list_tables" if op == "create_table" else "list_namespaces(top)", parent)
    listed = [n for n in listed if n.startswith(prefix)]
    want = sorted(n.rpartition(".")[2] for n in expected)
    return {
        "listed": len(listed),
        "missing": sorted(set(want) - set(listed)),
        "duplicated": sorted({n for n in listed if listed.count(n) > 1}),
        "unexpected": sorted(set(listed) - set(want)),
    }


def maintenance_worker(root: str, options: dict[str, Any] | None, tables: int) -> dict[str, Any]:
    """A catalog of ``tables`` healthy tables (one fragment each), then ``maintain(root)`` twice, timed."""
    import lamina
    from lamina.maintenance import maintain

    cat = lamina.connect(root, storage_options=options)
    for i in range(5):
        cat.create_namespace(f"m{i}")
    for k in range(tables):
        t = cat.create_table(f"m{k % 5}.t{k:03d}", SCHEMA)
        t.append(pa.table({"id": list(range(100)), "value": [f"v{j}" for j in range(100)]}, schema=SCHEMA))
    runs = []
    for _ in range(2):
        t0 = time.perf_counter()
        report = maintain(root, storage_options=options)
        seconds = time.perf_counter() - t0
        actions = sorted({a for t in report.tables for a in t.done()})
        runs.append(
            {"seconds": seconds, "tables": len(report.tables), "ok": report.ok, "actions": actions, "failed": list(report.failed)}
        )
    return {"runs": runs}


def profile_worker(backend: dict[str, Any], op: str, arg: str | None, cold: bool, calls: int) -> str:
    """cProfile of Lamina's ``op``: ``calls`` warm calls on one handle, or connect() + the call once (cold)."""
    prof = cProfile.Profile()
    if cold:
        prof.enable()
        h = handle("lamina", backend)
        run_op("lamina", h, op, arg)
        prof.disable()
    else:
        h = handle("lamina", backend)
        for _ in range(5):
            run_op("lamina", h, op, arg)
        prof.enable()
        for _ in range(calls):
            run_op("lamina", h, op, arg)
        prof.disable()
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("cumulative").print_stats(10)
    lines = [ln for ln in out.getvalue().splitlines() if ln.strip()]
    start = next((i for i, ln in enumerate(lines) if ln.lstrip().startswith("ncalls")), 0)
    return "\n".join(lines[start : start + 11])


# -- the driver ------------------------------------------------------------------------------------------------
def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, max(0, round(q / 100 * (len(xs) - 1))))]


def ms(x: float) -> str:
    return f"{x * 1e3:8.1f}" if x < 10 else f"{x * 1e3:8.0f}"


class Run:
    def __init__(self, quick: bool, systems: tuple[str, ...], cold_forkserver: bool = False):
        self.quick = quick
        self.cold_forkserver = cold_forkserver
        self.systems = systems
        self.entries = 100 if quick else 1000
        self.cold_n = 5 if quick else 30
        self.warm_n = 20 if quick else 200
        self.write_calls = 16 if quick else 64
        self.maint_tables = 10 if quick else 50
        self.ctx = mp.get_context("forkserver")
        self.ctx.set_forkserver_preload(
            ["pyarrow", "lamina", "lamina.catalog", "boto3"]
            + (["lance", "lance_namespace", "lance.namespace"] if "lance" in systems else [])
        )

    def one(self, fn, *args) -> Any:
        """``fn(*args)`` in a new process (forked from the preloaded forkserver)."""
        with cf.ProcessPoolExecutor(1, mp_context=self.ctx, max_tasks_per_child=1) as ex:
            return ex.submit(fn, *args).result()

    def fresh_cold(self, system: str, backend: dict[str, Any], op: str, arg: str | None) -> tuple[float, float, Any]:
        """:func:`cold_worker` in a new interpreter (``python -m benchmarks.catalog --cold-child``)."""
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (root, os.environ.get("PYTHONPATH"))))}
        p = subprocess.run(
            [sys.executable, "-m", "benchmarks.catalog", "--cold-child", json.dumps([system, backend, op, arg])],
            cwd=root,
            env=env,
            capture_output=True,
            text=True,
        )
        if p.returncode:
            raise RuntimeError(f"cold {system} {op}({arg!r}) failed in its own process:\n{p.stderr[-3000:]}")
        total, connect, out = json.loads(p.stdout.strip().splitlines()[-1])
        return total, connect, out

    def seed(self, backend: dict[str, Any]) -> dict[str, Any]:
        top, inner, tables = catalog_names(self.entries)
        plan = [("create_namespace", n) for n in top + inner] + [("create_table", n) for n in tables]
        return {s: self.one(seed_worker, s, backend, plan) for s in self.systems}

    def read_plan(self, n: int, rng: random.Random) -> list[tuple[str, list]]:
        top, inner, tables = catalog_names(self.entries)
        with_tables = sorted({t.rpartition(".")[0] for t in tables})
        plan = [
            ("list_namespaces(parent)", [rng.choice(top) for _ in range(n)]),
            ("list_namespaces(top)", [None] * n),
            ("list_tables", [rng.choice(with_tables) for _ in range(n)]),
            ("describe_table", [rng.choice(tables) for _ in range(n)]),
        ]
        if "lance" in self.systems:
            plan.append((LANCE_NAME_ONLY, list(plan[-1][1])))
        return plan

    def cold(self, backend: dict[str, Any]) -> dict[str, Any]:
        lat: dict[str, list[float]] = {}
        conn: dict[str, list[float]] = {}
        results: dict[str, list] = {}
        for op, args in self.read_plan(self.cold_n, random.Random(11)):
            order = [s for s in self.systems if op != LANCE_NAME_ONLY or s == "lance"]
            for i, a in enumerate(args):
                for s in order if i % 2 == 0 else order[::-1]:
                    total, c, out = (
                        self.one(cold_worker, s, backend, op, a) if self.cold_forkserver else self.fresh_cold(s, backend, op, a)
                    )
                    lat.setdefault(f"{s}/{op}", []).append(total)
                    conn.setdefault(f"{s}/{op}", []).append(c)
                    results.setdefault(f"{op}/{i}", []).append(out)
        mismatches = [k for k, v in results.items() if k.startswith("list") and len(v) == 2 and v[0] != v[1]]
        return {"lat": lat, "connect": conn, "mismatches": mismatches}

    def warm(self, backend: dict[str, Any]) -> dict[str, Any]:
        return self.one(warm_worker, backend, self.systems, self.read_plan(self.warm_n, random.Random(12)), 5)

    def writes_at(self, backend: dict[str, Any], system: str, op: str, level: int) -> dict[str, Any]:
        if op == "create_namespace":
            parent, prefix = None, f"w{level}-"
            names = [f"w{level}-{p}-{i:03d}" for p in range(level) for i in range(self.write_calls // level)]
        else:
            parent, prefix = f"wtab{level}", "t"
            self.one(seed_worker, system, backend, [("create_namespace", parent)])
            names = [f"{parent}.t{p}-{i:03d}" for p in range(level) for i in range(self.write_calls // level)]
        per = self.write_calls // level
        barrier, queue = self.ctx.Barrier(level), self.ctx.Queue()
        procs = [
            self.ctx.Process(target=write_worker, args=(system, backend, op, names[p * per : (p + 1) * per], barrier, queue))
            for p in range(level)
        ]
        for p in procs:
            p.start()
        got = [queue.get(timeout=1800) for _ in procs]
        for p in procs:
            p.join(timeout=60)
        errors = [g["error"] for g in got if "error" in g]
        if errors:
            raise RuntimeError(f"{system} {op} x{level}: a writer died:\n{errors[0]}")
        lat = [x for g in got for x in g["lat"]]
        failed = [x for g in got for x in g["failed"]]
        span = max(g["end"] for g in got) - min(g["start"] for g in got)
        check = self.one(verify_worker, system, backend, op, parent, prefix, names)
        return {
            "ops": len(lat),
            "seconds": span,
            "throughput": len(lat) / span if span > 0 else 0.0,
            "lat": lat,
            "failed": failed,
            **check,
        }

    def writes(self, backend: dict[str, Any]) -> dict[str, Any]:
        out = {}
        for op in WRITE_OPS:
            for level in LEVELS:
                for s in self.systems:
                    out[f"{s}/{op}/{level}"] = self.writes_at(backend, s, op, level)
        return out


def start_moto() -> tuple[Any, str]:
    """moto with S3's atomic conditional writes (lamina.testing, as tests/conftest.py uses): plain moto checks
    If-None-Match and then writes without a lock, so two racing commits could both win there."""
    from lamina.testing import MotoServer

    server = MotoServer("127.0.0.1", 0).start()
    # moto answers 500 to a listing that races a deletion in the same bucket (its key dict changes during the
    # iteration); both clients retry those. Its werkzeug logger would print each traceback.
    logging.getLogger("werkzeug").setLevel(logging.CRITICAL)
    return server, server.endpoint


def make_buckets(endpoint: str, *names: str) -> None:
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint, region_name="us-east-1")
    for n in names:
        s3.create_bucket(Bucket=n)


def backends(kind: str, tmp: str, endpoint: str | None) -> tuple[dict[str, Any], tuple[str, dict | None]]:
    """(the catalog backend for both systems, (maintenance root, its storage options))."""
    if kind == "local":
        return (
            {
                "name": "local",
                "lamina_root": os.path.join(tmp, "lamina"),
                "lamina_options": None,
                "lance_props": {"root": os.path.join(tmp, "lance")},
            },
            (os.path.join(tmp, "maint"), None),
        )
    make_buckets(endpoint, "lamina-catalog-bench", "lance-catalog-bench", "lamina-maint-bench")
    opts = {"endpoint_url": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region": "us-east-1"}
    lance_props = {
        "root": "s3://lance-catalog-bench/warehouse",
        "storage.endpoint": endpoint,
        "storage.allow_http": "true",
        "storage.aws_access_key_id": "testing",
        "storage.aws_secret_access_key": "testing",
        "storage.region": "us-east-1",
    }
    return (
        {"name": "s3", "lamina_root": "s3://lamina-catalog-bench/warehouse", "lamina_options": opts, "lance_props": lance_props},
        ("s3://lamina-maint-bench/warehouse", opts),
    )


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:6.2f}x" if a and b else "     -"


def report_backend(
    run: Run, name: str, seed: dict, cold: dict, warm: dict, writes: dict, maint: dict | None, lance_note: str
) -> list[dict[str, Any]]:
    """Prints the backend's tables; returns its target checks."""
    checks: list[dict[str, Any]] = []
    has_lance = "lance" in run.systems
    print(
        f"\n== {name} ==  catalog of {run.entries:,} entries "
        f"({len(catalog_names(run.entries)[0]) + len(catalog_names(run.entries)[1])} namespaces + "
        f"{len(catalog_names(run.entries)[2])} tables)"
    )

    print("\nSeeding through the API, one call at a time (concurrency 1):")
    print(
        f"  {'':18s} {'lamina ops/s':>13s} {'p50 ms':>8s} {'p95 ms':>8s}   "
        f"{'lance ops/s':>12s} {'p50 ms':>8s} {'p95 ms':>8s}   lamina/lance ops/s"
    )
    for op in WRITE_OPS:
        row = {}
        for s in run.systems:
            lat = seed[s]["lat"][op]
            row[s] = (len(lat) / sum(lat), pct(lat, 50), pct(lat, 95))
        la = row["lamina"]
        lc = row.get("lance")
        print(
            f"  {op:18s} {la[0]:13.1f} {ms(la[1])} {ms(la[2])}   "
            + (f"{lc[0]:12.1f} {ms(lc[1])} {ms(lc[2])}   {ratio(la[0], lc[0])}" if lc else f"{lance_note:>30s}")
        )
    for s in run.systems:
        print(f"  {s}: {run.entries:,} calls in {seed[s]['seconds']:.1f} s = {run.entries / seed[s]['seconds']:.1f} ops/s")

    for kind, res in (("cold", cold), ("warm", warm)):
        how = (
            (
                "new process per call (forked from a forkserver preloading both libraries; connect() + the call timed)"
                if run.cold_forkserver
                else "new interpreter per call, the measured library imported; connect() + the call timed"
            )
            if kind == "cold"
            else "one handle, repeated calls, interleaved"
        )
        n = run.cold_n if kind == "cold" else run.warm_n
        print(f"\nReads, {kind}: {how}; {n} calls each")
        print(
            f"  {'operation':28s} {'lamina p50':>10s} {'p95':>8s} {'ops/s':>7s}   {'lance p50':>9s} {'p95':>8s} {'ops/s':>7s}"
            f"   {'lamina/lance p50':>16s} {'p95':>7s}   target <= 0.5x"
        )
        for op in READ_OPS + ((LANCE_NAME_ONLY,) if has_lance else ()):
            la = res["lat"].get(f"lamina/{op}")
            lc = res["lat"].get(f"lance/{op}")
            cols = f"{ms(pct(la, 50))}  {ms(pct(la, 95))} {len(la) / sum(la):7.1f}" if la else f"{'-':>10s} {'':8s} {'':7s}"
            lcols = f"{ms(pct(lc, 50))}  {ms(pct(lc, 95))} {len(lc) / sum(lc):7.1f}" if lc else f"{lance_note:>26s}"
            verdict = ""
            if la and lc:
                r50, r95 = pct(la, 50) / pct(lc, 50), pct(la, 95) / pct(lc, 95)
                met = r50 <= 0.5 and r95 <= 0.5
                verdict = "met" if met else "MISSED"
                checks.append(
                    {
                        "backend": name,
                        "what": f"{kind} {op}",
                        "ratio_p50": r50,
                        "ratio_p95": r95,
                        "met": met,
                        "op": op,
                        "kind": kind,
                    }
                )
            rr = f"{ratio(pct(la, 50), pct(lc, 50))}  {ratio(pct(la, 95), pct(lc, 95))}" if la and lc else ""
            print(f"  {op:28s} {cols}   {lcols}   {rr:>25s}   {verdict}")
        if kind == "cold":
            for s in run.systems:
                c = [x for k, v in res["connect"].items() if k.startswith(s + "/") for x in v]
                print(f"  ({s} connect() alone, all cold calls: p50 {pct(c, 50) * 1e3:.1f} ms, p95 {pct(c, 95) * 1e3:.1f} ms)")
        if res["mismatches"]:
            print(f"  RESULTS DIFFER between lamina and lance: {res['mismatches'][:3]}")
        elif has_lance:
            print("  every listing returned the same names in both")

    print(
        f"\nWrites: {run.write_calls} calls per level, split over N processes with a handle each; then a fresh handle lists them"
    )
    print(
        f"  {'operation':18s} {'N':>2s}  {'lamina ops/s':>12s} {'p50 ms':>8s} {'p95 ms':>8s} {'lost':>5s}"
        f"   {'lance ops/s':>11s} {'p50 ms':>8s} {'p95 ms':>8s} {'lost':>5s}   lamina/lance ops/s   target >= 1x, 0 lost"
    )
    for op in WRITE_OPS:
        for level in LEVELS:
            cells = {}
            for s in run.systems:
                w = writes[f"{s}/{op}/{level}"]
                lost = len(w["missing"]) + len(w["duplicated"]) + len(w["unexpected"]) + len(w["failed"])
                cells[s] = (w, lost)
            w, lost = cells["lamina"]
            line = (
                f"  {op:18s} {level:2d}  {w['throughput']:12.1f} {ms(pct(w['lat'], 50)) if w['lat'] else '-':>8s} "
                f"{ms(pct(w['lat'], 95)) if w['lat'] else '-':>8s} {lost:5d}"
            )
            if "lance" in cells:
                lw, llost = cells["lance"]
                r = w["throughput"] / lw["throughput"] if lw["throughput"] else float("inf")
                met = r >= 1 and lost == 0
                checks.append(
                    {"backend": name, "what": f"write {op} x{level}", "ratio": r, "met": met, "lost": lost, "lance_lost": llost}
                )
                line += (
                    f"   {lw['throughput']:11.1f} {ms(pct(lw['lat'], 50)) if lw['lat'] else '-':>8s} "
                    f"{ms(pct(lw['lat'], 95)) if lw['lat'] else '-':>8s} {llost:5d}   {r:17.2f}x   "
                    f"{'met' if met else 'MISSED'}"
                )
            else:
                line += f"   {lance_note}"
            print(line)
    for key, w in writes.items():
        for what in ("missing", "duplicated", "unexpected", "failed"):
            if w[what]:
                print(f"  {key}: {len(w[what])} {what}, e.g. {w[what][:2]}")

    if maint is not None:
        print(f"\nMaintenance overhead: maintain(root) over {run.maint_tables} healthy tables (one fragment each), fresh process")
        for i, r in enumerate(maint["runs"], 1):
            per = r["seconds"] / max(1, r["tables"]) * 1e3
            print(
                f"  run {i}: {r['seconds']:.2f} s for {r['tables']} tables = {per:.1f} ms/table; "
                f"actions {r['actions'] or 'none'}; "
                f"ok={r['ok']}{'; failed ' + str(r['failed']) if r['failed'] else ''}   target < 50 ms/table: "
                f"{'met' if per < 50 else 'MISSED'}"
            )
        per = max(r["seconds"] / max(1, r["tables"]) for r in maint["runs"]) * 1e3
        checks.append({"backend": name, "what": "maintenance", "ms_per_table": per, "met": per < 50})
    return checks


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="100 entries and fewer calls, for a smoke run")
    ap.add_argument("--only", choices=("local", "s3"), help="one backend only")
    ap.add_argument("--no-profile", action="store_true", help="skip the cProfile of missed reads")
    ap.add_argument("--no-maintenance", action="store_true", help="skip the maintenance overhead")
    ap.add_argument("--json", action="store_true", help="also print every figure as one JSON object at the end")
    ap.add_argument(
        "--cold-forkserver",
        action="store_true",
        help="cold calls in processes forked from a preloaded forkserver (the earlier rounds' method)",
    )
    ap.add_argument("--cold-child", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.cold_child:
        cold_child(args.cold_child)
        return
    for k, v in DUMMY_AWS_ENV.items():
        os.environ.setdefault(k, v)
    # The forkserver (started with this environment) imports lance but never calls it, so no Lance runtime
    # thread exists when it forks the workers (only pyarrow's, which is fork-aware); lance warns at every fork.
    os.environ["PYTHONWARNINGS"] = "ignore:lance is not fork-safe"

    lance_version = lance_available()
    systems = SYSTEMS if lance_version else ("lamina",)
    lance_note = "" if lance_version else "lance: not installed"
    import lamina

    print(
        f"Catalog benchmark: Lamina {lamina.__version__} vs {lance_version or 'Lance: not installed'}; "
        f"pyarrow {pa.__version__}, "
        f"Python {platform.python_version()}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}"
    )
    run = Run(args.quick, systems, args.cold_forkserver)
    tmp = tempfile.mkdtemp(prefix="lamina-bench-catalog-")
    server, endpoint = (None, None)
    everything: dict[str, Any] = {}
    checks: list[dict[str, Any]] = []
    profiles: list[tuple[str, str]] = []
    try:
        kinds = [args.only] if args.only else ["local", "s3"]
        if "s3" in kinds:
            server, endpoint = start_moto()
        for kind in kinds:
            backend, (maint_root, maint_opts) = backends(kind, tmp, endpoint)
            t0 = time.perf_counter()
            seed = run.seed(backend)
            cold = run.cold(backend)
            warm = run.warm(backend)
            writes = run.writes(backend)
            maint = None if args.no_maintenance else run.one(maintenance_worker, maint_root, maint_opts, run.maint_tables)
            name = "local (temp directory)" if kind == "local" else f"S3 (moto server on {endpoint})"
            checks += report_backend(run, name, seed, cold, warm, writes, maint, lance_note)
            print(f"  ({kind}: {time.perf_counter() - t0:.0f} s in all)")
            everything[kind] = {
                "seed": seed,
                "cold": cold,
                "warm": {"lat": warm["lat"], "mismatches": warm["mismatches"]},
                "writes": writes,
                "maintenance": maint,
            }
            if not args.no_profile:
                plan = dict(run.read_plan(1, random.Random(13)))
                for c in checks:
                    if c["backend"] == name and c["met"] is False and "op" in c:
                        calls = 1 if c["kind"] == "cold" else 50
                        text = run.one(profile_worker, backend, c["op"], plan[c["op"]][0], c["kind"] == "cold", calls)
                        how = "connect() + 1 call, fresh process" if c["kind"] == "cold" else f"{calls} warm calls"
                        profiles.append((f"{kind}: {c['kind']} {c['op']} (Lamina, {how})", text))
    finally:
        if server is not None:
            server.stop()
        shutil.rmtree(tmp, ignore_errors=True)

    print("\n== Targets (issue 11) ==")
    for c in checks:
        if c["met"] is None:
            print(f"  {c['backend']:40s} {c['what']:40s} not measured")
        elif "ratio_p50" in c:
            print(
                f"  {c['backend']:40s} {c['what']:40s} lamina/lance p50 {c['ratio_p50']:.2f}x, p95 {c['ratio_p95']:.2f}x "
                f"(<= 0.5x): {'met' if c['met'] else 'MISSED'}"
            )
        elif "ratio" in c:
            print(
                f"  {c['backend']:40s} {c['what']:40s} lamina/lance throughput {c['ratio']:.2f}x (>= 1x), lost {c['lost']}"
                f" (lance lost {c['lance_lost']}): {'met' if c['met'] else 'MISSED'}"
            )
        else:
            print(
                f"  {c['backend']:40s} {c['what']:40s} {c['ms_per_table']:.1f} ms/table (< 50): {'met' if c['met'] else 'MISSED'}"
            )
    if not lance_version:
        print("  lance: not installed: the Lamina/Lance targets could not be checked")
    for title, text in profiles:
        print(f"\nProfile, {title}: top functions by cumulative time\n{text}")
    if args.json:
        print(json.dumps(everything, default=str))


if __name__ == "__main__":
    main()
