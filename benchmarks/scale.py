"""A table of many small fragments, against pylance at the same counts in the same run (issue 18 item 5).

    .venv/bin/python -m benchmarks.scale [--sizes 1000,10000,100000] [--quick] [--appends 20] [--json]
                                         [--profile append,delete,...] [--no-lance]
    .venv/bin/python -m benchmarks.scale --synthetic 1000,1000000      (= python -m benchmarks.scale_million)

For each size N (default 1,000, 10,000 and 100,000 fragments; --quick: 1,000 and 10,000), a local table of
N fragments of 10 rows each (``id`` int64 clustered by insertion order: fragment i holds ids [10i, 10i+10),
and a short string ``s``) is written once by Lamina and once by pylance, then on each:

  write       bulk write of the N files: Lamina ``create_table`` + one ``append(data, max_rows_per_file=10)``;
              pylance one ``lance.write_dataset(data, uri, max_rows_per_file=10)`` (mode create, one data
              file per fragment).
  manifest    what a reader must fetch to know the version: Lamina the root under ``_versions/`` plus every
              manifest segment and segment list it names (docs/FORMAT.md §2.3); pylance its manifest file.
  open        open the latest version with a new handle (``lamina.open_table`` / ``lance.dataset``):
              cold = in a new process (spawned; imports not timed), p50 of --cold processes;
              warm = a new handle in a process that opened it before, p50 of 10.
  count_rows  ``count_rows()`` right after that open (cold and warm as above).
  plan        compaction plan on a new handle, default options: Lamina ``lamina.planner.plan_compaction`` (what
              ``lamina.compaction.compact`` calls after opening the table); pylance
              ``lance.optimize.Compaction.plan``. p50 of 3.
  append      --appends (20) one-row appends on the open handle (Lamina ``Table.append``; pylance
              ``LanceDataset.insert``, which commits on the handle): p50 and p95, and the bytes of the
              metadata objects each commit wrote (new or rewritten files: Lamina under ``_versions/`` and
              ``_segments/``; pylance under ``_versions/`` and ``_transactions/``, its manifest alone in the
              JSON as ``lance_manifest_bytes``). Lamina's ``io_stats()`` PUT bytes per commit are in the JSON
              (``io_put_bytes``: on the local store the data file is written in place and not counted).
  delete      ``delete("id = K")`` of one key without an index, K in the middle of the table; 3 keys
              (1 at 100,000 fragments and more), p50.

Both systems run in this process except the cold opens, one after the other per operation (who goes first
alternates by size); the OS page cache is warm for both. Ratios are Lamina / pylance in the same run.
Targets (issue 18): 1-row append p50 at 100k <= 20 ms and flat from 1k; bytes per commit independent of the
table's size; delete of one key at 10k and 100k <= 0.1x pylance; bulk write of 10k files <= 1.0x pylance;
open latest and count_rows at 100k <= pylance. ``--profile append,delete,write,open,plan`` runs each named
Lamina operation once more under cProfile (not timed) and prints its top functions by cumulative time.
pylance is optional (``pip install pylance``): without it, or with --no-lance, Lamina's figures print alone.
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import cProfile
import io
import json
import multiprocessing as mp
import os
import platform
import pstats
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

ROWS_PER_FRAGMENT = 10
SCHEMA = pa.schema([("id", pa.int64()), ("s", pa.string())])
SYSTEMS = ("lamina", "lance")
PROFILE_OPS = ("write", "open", "plan", "append", "delete")


def rows(lo: int, hi: int) -> pa.Table:
    ids = np.arange(lo, hi, dtype=np.int64)
    return pa.table({"id": ids, "s": pa.array([f"row-{i}" for i in range(lo, hi)])}, schema=SCHEMA)


def lance_version() -> str | None:
    """pylance's version, or None when it is not installed (an optional benchmark extra)."""
    try:
        from importlib.metadata import version

        import lance  # noqa: F401

        return version("pylance")
    except ImportError:
        return None


def p(values: list[float], q: float) -> float:
    return float(np.percentile(values, q)) if values else float("nan")


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def profiled(label: str, fn: Callable[[], Any], top: int = 14) -> None:
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    fn()
    prof.disable()
    took = time.perf_counter() - t0
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(top)
    body = out.getvalue()
    start = body.find("   ncalls")
    print(f"--- cProfile: {label} ({took * 1e3:.1f} ms under the profiler), top {top} by cumulative time", flush=True)
    print(body[start:].rstrip() if start >= 0 else body.rstrip(), flush=True)


# -- files on disk -------------------------------------------------------------------------------------------
def snapshot(root: str, dirs: tuple[str, ...]) -> dict[str, tuple[int, int]]:
    """``{relative path: (size, mtime_ns)}`` of the files directly under ``dirs`` of ``root``."""
    out: dict[str, tuple[int, int]] = {}
    for d in dirs:
        try:
            entries = os.scandir(os.path.join(root, d))
        except FileNotFoundError:
            continue
        with entries:
            for e in entries:
                if e.is_file() and not e.name.startswith(".tmp-"):
                    st = e.stat()
                    out[f"{d}/{e.name}"] = (st.st_size, st.st_mtime_ns)
    return out


def written(before: dict[str, tuple[int, int]], after: dict[str, tuple[int, int]], under: str | None = None) -> int:
    """Bytes of the files new or rewritten between two snapshots (only those under ``under`` if given)."""
    return sum(
        size for path, (size, mt) in after.items() if before.get(path) != (size, mt) and (under is None or path.startswith(under))
    )


LAMINA_META = ("_versions", "_segments")
LANCE_META = ("_versions", "_transactions")


# -- the two systems behind one call shape ----------------------------------------------------------------------
class LaminaSide:
    name = "lamina"

    def __init__(self, uri: str):
        import lamina

        self.lamina = lamina
        self.uri = uri
        self.t: Any = None

    def write(self, data: pa.Table) -> None:
        self.t = self.lamina.create_table(self.uri, SCHEMA)
        self.t.append(data, max_rows_per_file=ROWS_PER_FRAGMENT)

    def fragments(self) -> int:
        return len(self.t.manifest.fragments)

    def open(self) -> Any:
        return self.lamina.open_table(self.uri)

    @staticmethod
    def count(h: Any) -> int:
        return h.count_rows()

    def plan(self) -> int:
        from lamina.planner import CompactionOptions, plan_compaction

        h = self.open()
        return len(plan_compaction(h.manifest, CompactionOptions(), h.uri).groups)

    def append(self, data: pa.Table) -> None:
        self.t.append(data)

    def delete(self, key: int) -> int:
        return self.t.delete(f"id = {key}")

    def manifest_bytes(self) -> dict[str, int]:
        m = self.t.manifest
        root = os.path.getsize(os.path.join(self.uri, "_versions", f"{m.version:020d}.manifest"))
        segs = list(getattr(m, "segments", ())) + list(getattr(m, "segment_lists", ()))
        return {"bytes": root + sum(s.bytes for s in segs), "root_bytes": root, "segment_objects": len(segs)}

    def io_put_bytes(self) -> int:
        return sum(v.get("bytes_written", 0) for v in self.lamina.io_stats().values())


class LanceSide:
    name = "lance"

    def __init__(self, uri: str):
        import lance

        self.lance = lance
        self.uri = uri
        self.ds: Any = None

    def write(self, data: pa.Table) -> None:
        self.ds = self.lance.write_dataset(data, self.uri, max_rows_per_file=ROWS_PER_FRAGMENT)

    def fragments(self) -> int:
        return len(self.ds.get_fragments())

    def open(self) -> Any:
        return self.lance.dataset(self.uri)

    @staticmethod
    def count(h: Any) -> int:
        return h.count_rows()

    def plan(self) -> int:
        from lance.optimize import Compaction

        return Compaction.plan(self.open(), {}).num_tasks()

    def append(self, data: pa.Table) -> None:
        self.ds.insert(data)

    def delete(self, key: int) -> int:
        before = self.ds.count_rows()
        self.ds.delete(f"id = {key}")
        return before - self.ds.count_rows()

    def manifest_bytes(self) -> dict[str, int]:
        return {"bytes": self._manifest_size(self.ds.version)}

    def _manifest_size(self, version: int) -> int:
        # v2 manifest paths name version v (2^64 - 1 - v) zero-padded; older ones name it v.
        for name in (f"{(1 << 64) - 1 - version:020d}.manifest", f"{version}.manifest"):
            path = os.path.join(self.uri, "_versions", name)
            if os.path.exists(path):
                return os.path.getsize(path)
        raise FileNotFoundError(f"no manifest of version {version} under {self.uri}/_versions")


def _cold_open(system: str, uri: str, warm: int) -> dict[str, Any]:
    """In a new process: open + count_rows once (cold), then ``warm`` more new handles; seconds each."""
    side = LaminaSide(uri) if system == "lamina" else LanceSide(uri)  # imports, not timed
    out: dict[str, Any] = {"open": [], "count": []}
    for _ in range(1 + warm):
        t_open, h = timed(side.open)
        t_count, n = timed(lambda h=h: side.count(h))
        out["open"].append(t_open)
        out["count"].append(t_count)
        out["rows"] = n
    return out


def open_figures(system: str, uri: str, processes: int, warm: int) -> dict[str, float]:
    cold_open, cold_count, warm_open, warm_count = [], [], [], []
    ctx = mp.get_context("spawn")
    rows_seen = set()
    for i in range(processes):
        with cf.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as ex:
            got = ex.submit(_cold_open, system, uri, warm if i == 0 else 0).result()
        cold_open.append(got["open"][0])
        cold_count.append(got["count"][0])
        warm_open += got["open"][1:]
        warm_count += got["count"][1:]
        rows_seen.add(got["rows"])
    return {
        "open_cold_s": p(cold_open, 50),
        "count_cold_s": p(cold_count, 50),
        "open_warm_s": p(warm_open, 50),
        "count_warm_s": p(warm_count, 50),
        "rows": rows_seen.pop(),
    }


# -- one size ----------------------------------------------------------------------------------------------------
def run_size(n: int, systems: tuple[str, ...], args: argparse.Namespace, where: str) -> dict[str, Any]:
    data = rows(0, n * ROWS_PER_FRAGMENT)
    order = systems if (len(str(n)) % 2 == 0 or len(systems) == 1) else tuple(reversed(systems))
    sides = {s: (LaminaSide if s == "lamina" else LanceSide)(os.path.join(where, f"{s}-{n}")) for s in systems}
    res: dict[str, dict[str, Any]] = {s: {} for s in systems}
    profile = set(args.profile)

    def each(op: str, fn: Callable[[Any], None]) -> None:
        for s in order:
            fn(sides[s])
        print(f"  [{n:,}] {op}: " + "  ".join(f"{s} {_fmt_op(res[s], op)}" for s in order), flush=True)

    def write(side: Any) -> None:
        took, _ = timed(lambda: side.write(data))
        res[side.name]["write_s"] = took
        assert side.fragments() == n, (side.name, side.fragments(), n)
        res[side.name].update({"manifest_" + k: v for k, v in side.manifest_bytes().items()})

    each("write", write)
    if "write" in profile and "lamina" in sides:
        profiled(f"Lamina bulk write of {n:,} files", lambda: LaminaSide(os.path.join(where, f"lamina-{n}-profile")).write(data))
        shutil.rmtree(os.path.join(where, f"lamina-{n}-profile"), ignore_errors=True)

    def opens(side: Any) -> None:
        res[side.name].update(open_figures(side.name, side.uri, args.cold, 10))
        assert res[side.name]["rows"] == n * ROWS_PER_FRAGMENT, (side.name, res[side.name]["rows"])

    each("open", opens)
    if "open" in profile and "lamina" in sides:
        profiled(f"Lamina open_table + count_rows at {n:,} fragments (warm process)", lambda: sides["lamina"].open().count_rows())

    def plan(side: Any) -> None:
        times = []
        for _ in range(3):
            took, groups = timed(side.plan)
            times.append(took)
        res[side.name].update({"plan_s": p(times, 50), "plan_groups": groups})

    each("plan", plan)
    if "plan" in profile and "lamina" in sides:
        profiled(f"Lamina open + plan_compaction at {n:,} fragments", sides["lamina"].plan)

    next_id = n * ROWS_PER_FRAGMENT

    def appends(side: Any) -> None:
        nonlocal next_id
        meta = LAMINA_META if side.name == "lamina" else LANCE_META
        times, sizes, manifest_only, io_puts = [], [], [], []
        for _ in range(args.appends):
            one = rows(next_id, next_id + 1)
            next_id += 1
            before, io_before = snapshot(side.uri, meta), side.io_put_bytes() if side.name == "lamina" else 0
            took, _ = timed(lambda one=one: side.append(one))
            after = snapshot(side.uri, meta)
            times.append(took)
            sizes.append(written(before, after))
            if side.name == "lamina":
                io_puts.append(side.io_put_bytes() - io_before)
            else:
                manifest_only.append(written(before, after, "_versions/"))
        r = res[side.name]
        r.update(
            {
                "append_p50_s": p(times, 50),
                "append_p95_s": p(times, 95),
                "append_times_s": times,
                "commit_bytes_p50": p(sizes, 50),
                "commit_bytes_max": max(sizes),
                "commit_bytes": sizes,
            }
        )
        if io_puts:
            r["io_put_bytes"] = io_puts
        if manifest_only:
            r["lance_manifest_bytes"] = manifest_only

    each("append", appends)
    if "append" in profile and "lamina" in sides:
        one = rows(next_id, next_id + 1)
        next_id += 1
        profiled(f"Lamina 1-row append at {n:,} fragments", lambda: sides["lamina"].append(one))

    keys = [n * ROWS_PER_FRAGMENT // 2 + 7 + j * (n * ROWS_PER_FRAGMENT // 8) for j in range(1 if n >= 100_000 else 3)]

    def delete(side: Any) -> None:
        times = []
        for k in keys:
            took, deleted = timed(lambda k=k: side.delete(k))
            assert deleted == 1, (side.name, k, deleted)
            times.append(took)
        res[side.name].update({"delete_s": p(times, 50), "delete_times_s": times})

    each("delete", delete)
    if "delete" in profile and "lamina" in sides:
        profiled(f"Lamina delete of one key at {n:,} fragments", lambda: sides["lamina"].delete(keys[0] + 3))

    for side in sides.values():
        shutil.rmtree(side.uri, ignore_errors=True)
    return {"fragments": n, "rows_per_fragment": ROWS_PER_FRAGMENT, "order": list(order), **res}


def _fmt_op(r: dict[str, Any], op: str) -> str:
    if op == "write":
        return f"{r['write_s']:.2f} s"
    if op == "open":
        return f"{r['open_cold_s'] * 1e3:.1f} ms cold / {r['open_warm_s'] * 1e3:.1f} ms warm"
    if op == "plan":
        return f"{r['plan_s'] * 1e3:.1f} ms"
    if op == "append":
        return f"p50 {r['append_p50_s'] * 1e3:.1f} ms ({r['commit_bytes_p50'] / 1024:.1f} KiB)"
    return f"{r['delete_s']:.3f} s"


# -- report -------------------------------------------------------------------------------------------------------
ROWS = [
    # label, key, unit scale, unit
    ("bulk write of N files", "write_s", 1, "s"),
    ("manifest size", "manifest_bytes", 1 / 1024, "KiB"),
    ("open latest, new process (p50)", "open_cold_s", 1e3, "ms"),
    ("count_rows after it", "count_cold_s", 1e3, "ms"),
    ("open latest, warm process (p50)", "open_warm_s", 1e3, "ms"),
    ("count_rows after it", "count_warm_s", 1e3, "ms"),
    ("compaction plan (p50)", "plan_s", 1e3, "ms"),
    ("1-row append commit p50", "append_p50_s", 1e3, "ms"),
    ("1-row append commit p95", "append_p95_s", 1e3, "ms"),
    ("metadata bytes per commit (p50)", "commit_bytes_p50", 1 / 1024, "KiB"),
    ("metadata bytes per commit (max)", "commit_bytes_max", 1 / 1024, "KiB"),
    ("delete of one key, no index (p50)", "delete_s", 1, "s"),
]


def report(size: dict[str, Any]) -> None:
    has_lance = "lance" in size
    print(f"\n{size['fragments']:,} fragments of {size['rows_per_fragment']} rows (first: {size['order'][0]})")
    print(f"{'':36} {'Lamina':>14} {'pylance' if has_lance else '':>14} {'ratio' if has_lance else '':>8}")
    for label, key, scale, unit in ROWS:
        a = size["lamina"].get(key)
        b = size["lance"].get(key) if has_lance else None

        def cell(v: float | None, scale: float = scale, unit: str = unit) -> str:
            return "-" if v is None else f"{v * scale:,.{3 if unit == 's' else 2 if v * scale < 10 else 1}f} {unit}"

        ratio = f"{a / b:.2f}x" if (a is not None and b) else ""
        print(f"{label:36} {cell(a):>14} {cell(b) if has_lance else '':>14} {ratio:>8}")
    extra = [
        f"Lamina segments+lists {size['lamina'].get('manifest_segment_objects', 0)} "
        f"(root {size['lamina'].get('manifest_root_bytes', 0):,} B)",
        f"plan groups Lamina {size['lamina']['plan_groups']}"
        + (f" / pylance tasks {size['lance']['plan_groups']}" if has_lance else ""),
    ]
    print("  " + "; ".join(extra), flush=True)


def targets(sizes: list[dict[str, Any]]) -> list[str]:
    """The issue's targets, each met or missed with its figure (only those the sizes run allow)."""
    by = {s["fragments"]: s for s in sizes}
    out = []
    small = min(by)
    big = max(by)
    a_big = by[big]["lamina"]["append_p50_s"]
    a_small = by[small]["lamina"]["append_p50_s"]
    out.append(
        f"1-row append p50 at {big:,}: {a_big * 1e3:.1f} ms (<= 20 ms: {'met' if a_big <= 0.020 else 'MISSED'}); "
        f"at {small:,}: {a_small * 1e3:.1f} ms (flat: {'met' if a_big <= 1.5 * a_small + 0.002 else 'MISSED'})"
    )
    cb = [by[k]["lamina"]["commit_bytes_p50"] for k in sorted(by)]
    # Growth with the table's size shows between the smallest and the largest; sizes in between differ by
    # where the root's layout stands when the appends start (0-64 inline fragments, 0-16 segment entries).
    flat = cb[-1] <= 1.25 * cb[0] + 512
    out.append(
        "bytes per commit p50 by size: "
        + ", ".join(f"{k:,}: {v / 1024:.1f} KiB" for k, v in zip(sorted(by), cb))
        + f" (largest size within 1.25x + 512 B of the smallest, independent of size: {'met' if flat else 'MISSED'})"
    )
    if "lance" not in by[big]:
        return out
    for k in (10_000, 100_000):
        if k in by:
            r = by[k]["lamina"]["delete_s"] / by[k]["lance"]["delete_s"]
            out.append(f"delete of one key at {k:,}: {r:.3f}x pylance (<= 0.1x: {'met' if r <= 0.1 else 'MISSED'})")
    if 10_000 in by:
        r = by[10_000]["lamina"]["write_s"] / by[10_000]["lance"]["write_s"]
        out.append(f"bulk write of 10,000 files: {r:.2f}x pylance (<= 1.0x: {'met' if r <= 1.0 else 'MISSED'})")
    if 100_000 in by:
        for key, label in (
            ("open_cold_s", "open latest (new process)"),
            ("count_cold_s", "count_rows (new process)"),
            ("open_warm_s", "open latest (warm process)"),
            ("count_warm_s", "count_rows (warm process)"),
        ):
            a, b = by[100_000]["lamina"][key], by[100_000]["lance"][key]
            out.append(
                f"{label} at 100,000: {a * 1e3:.2f} ms vs {b * 1e3:.2f} ms, {a / b:.2f}x "
                f"(<= 1.0x: {'met' if a <= b else 'MISSED'})"
            )
    return out


def main(argv: list[str] | None = None) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", help="fragment counts, comma-separated (default 1000,10000,100000)")
    ap.add_argument("--quick", action="store_true", help="sizes 1000,10000")
    ap.add_argument("--appends", type=int, default=20, help="one-row appends timed per size (default 20)")
    ap.add_argument("--cold", type=int, default=3, help="new processes per open-latest figure (default 3)")
    ap.add_argument("--profile", default="", help=f"Lamina operations to profile once more: {','.join(PROFILE_OPS)}")
    ap.add_argument("--no-lance", action="store_true", help="Lamina only")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    ap.add_argument(
        "--synthetic",
        metavar="SIZES",
        help="instead: tables of a million fragments whose manifests are "
        "written without data files (benchmarks.scale_million), e.g. 1000,1000000",
    )
    args = ap.parse_args(argv)
    if args.synthetic:
        from benchmarks import scale_million

        return scale_million.main(["--sizes", args.synthetic, "--appends", str(args.appends)] + (["--json"] if args.json else []))
    sizes = (
        [int(s.replace("_", "")) for s in args.sizes.split(",")]
        if args.sizes
        else ([1000, 10_000] if args.quick else [1000, 10_000, 100_000])
    )
    args.profile = [op for op in args.profile.split(",") if op]
    bad = set(args.profile) - set(PROFILE_OPS)
    if bad:
        ap.error(f"--profile takes {', '.join(PROFILE_OPS)} (got {', '.join(sorted(bad))})")
    lv = None if args.no_lance else lance_version()
    systems = ("lamina", "lance") if lv else ("lamina",)
    if not lv and not args.no_lance:
        print("pylance is not installed (pip install pylance, an optional benchmark extra): Lamina only")
    load = os.getloadavg()
    print(
        f"benchmarks.scale: sizes {sizes}, {ROWS_PER_FRAGMENT} rows per fragment, {args.appends} appends; "
        f"pylance {lv or '-'}; {os.cpu_count()} CPUs, load {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"Python {platform.python_version()}",
        flush=True,
    )
    out = []
    where = tempfile.mkdtemp(prefix="lamina-scale-")
    try:
        for n in sizes:
            t0 = time.perf_counter()
            size = run_size(n, systems, args, where)
            size["wall_s"] = time.perf_counter() - t0
            out.append(size)
            report(size)
    finally:
        shutil.rmtree(where, ignore_errors=True)
    finish("scale", targets(out), out, args.json, pylance=lv)
    return out


def finish(benchmark: str, lines: list[str], sizes: list[dict[str, Any]], as_json: bool, **extra: Any) -> None:
    """The targets met or missed, the load at the end and (``--json``) every figure as one line."""
    print("\ntargets (issue 18):")
    for line in lines:
        print("  " + line)
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    if as_json:
        print(json.dumps({"benchmark": benchmark, **extra, "load_end": load, "sizes": sizes}))


if __name__ == "__main__":
    main()
