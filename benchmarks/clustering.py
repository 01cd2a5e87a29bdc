"""Clustering compaction against delta-rs z_order: files skipped by min/max, write amplification, time, selective reads.

    .venv/bin/python -m benchmarks.clustering [--scene small|many] [--skew] [--payload-bytes 0] [--target-mib 1]
                                              [--contenders unclustered,linear,zorder,hilbert,delta-zorder,delta-compact]
                                              [--runner ray|local] [--runs 20] [--json]

The scene (issue 33): ``--scene small`` 40 appends of 25,000 rows (default), ``--scene many`` 400 of 2,500
(``--passes``/``--rows`` override either). Rows: ``id`` int64 (sequential), ``x`` and ``y`` int64 uniform in
[0, 1,000,000) (``--skew``: ``x`` Zipf(1.3) - 1, clipped to 999,999), and with ``--payload-bytes N`` a binary
``payload`` of N random bytes. Every contender gets the same rows (``--seed``), one append then one
compaction per pass, all contenders in step pass by pass (a busy spell of the shared machine slows all alike):

  unclustered    Lamina ``compact(uri, CompactionOptions(target_bytes_per_fragment=T, policy="tiered"))``
  linear         the same after ``set_clustering(["x"], curve="linear")`` (called after the first append)
  zorder         ... ``set_clustering(["x", "y"], curve="zorder")``
  hilbert        ... ``set_clustering(["x", "y"], curve="hilbert")``
  delta-zorder   deltalake ``write_deltalake(mode="append")`` then ``optimize.z_order(["x", "y"], target_size=T)``
  delta-compact  deltalake ``optimize.compact(target_size=T)``: delta's unclustered baseline

Delta writes every file (appends and optimize) with Lamina's codec, zstd level 3, so that write
amplification divides bytes of one codec (deltalake's defaults: snappy appends, zstd optimize).

T is ``--target-mib`` (default 1 MiB). Lamina's compaction runs as the job does, on a local Ray of 2 CPUs in
this run's temp dir; before the first pass both workers import Lamina and a scratch table is compacted once,
so that no contender pays for the warm-up (``--runner local``: plan -> GroupCompactor -> commit_results in
this process).

Figures per contender:
- files skipped: the share of (filter value, live file) pairs whose [min, max] of the column excludes the
  filter, read from each format's own metadata (Lamina: the manifest's zone maps ``Fragment.zones``;
  delta: ``get_add_actions(flatten=True)``'s ``min.*``/``max.*``). Filters: ``x = c`` and ``y = c`` for
  ``--values`` (200) values of c drawn from the x (y) values of the whole run, and ``x BETWEEN a AND a +
  10,000`` (1 % of the domain) for as many a drawn from the x values. After the last pass, and the mean
  over the last 10 passes (then some values are not written yet: the same for every contender).
- write amplification: data bytes compaction wrote over the run / data bytes appended (Lamina:
  ``summary.bytes_written`` / the new fragments' ``file_bytes``; delta: optimize's ``filesAdded.totalSize``
  / the sizes of the add actions each append made).
- compaction time: wall time of the compaction calls over the run (delta's includes opening the table, as
  Lamina's job does), and its ratio to delta-zorder's (contender / delta-zorder).
- selective reads on the final tables: the median of ``--runs`` (20) runs, each with its own value, after
  one warm-up, contenders interleaved: ``count_rows(filter="x = c")`` and
  ``to_arrow(filter="x BETWEEN a AND a + 1000")``; delta through ``to_pyarrow_dataset()`` with the same
  filter (for reference). Speed-up = unclustered's median / the contender's. Every answer is checked
  against a count from the generated rows.
- live files at the end.

Targets (issue 33, for Lamina's clustered compaction; printed for each clustered contender in the run):
skipped >= 0.85 on both keys (>= 0.75 with ``--skew``), write amplification <= 3x, compaction time <= 0.5x
delta z_order's, point query >= 5x faster than unclustered. Ratios are against baselines of the same run.
"""

from __future__ import annotations

import abc
import argparse
import contextlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

import lamina
from lamina.planner import CompactionOptions
from lamina.planner.options import parse_assignment

MiB = 1 << 20
DOMAIN = 1_000_000
RANGE_SKIP = DOMAIN // 100  # the skipping filter's width: 1 % of the domain
RANGE_QUERY = 1000  # the timed range query's width
LAST = 10  # passes averaged for the "last 10" figure
SCENES = {"small": (40, 25_000), "many": (400, 2_500)}
LAMINA = {"unclustered": None, "linear": (["x"], "linear"), "zorder": (["x", "y"], "zorder"), "hilbert": (["x", "y"], "hilbert")}
DELTA = {"delta-zorder": "z_order", "delta-compact": "compact"}
CONTENDERS = (*LAMINA, *DELTA)
CLUSTERED = ("linear", "zorder", "hilbert")
FILTERS = ("x=", "y=", "x range")


# -- data ------------------------------------------------------------------------------------------------
class Scene:
    """The rows of every pass, the same for every contender; x and y of the whole run are kept (16 bytes a
    row) to draw filter values and check answers; a payload is made when its pass is."""

    def __init__(self, passes: int, rows: int, skew: bool, payload_bytes: int, seed: int):
        self.passes, self.rows, self.skew, self.payload_bytes, self.seed = passes, rows, skew, payload_bytes, seed
        rng = np.random.default_rng(seed)
        n = passes * rows
        self.x = np.minimum(rng.zipf(1.3, n) - 1, DOMAIN - 1).astype(np.int64) if skew else rng.integers(0, DOMAIN, n)
        self.y = rng.integers(0, DOMAIN, n)
        fields = [("id", pa.int64()), ("x", pa.int64()), ("y", pa.int64())]
        self.schema = pa.schema(fields + ([("payload", pa.binary())] if payload_bytes else []))

    def batch(self, i: int) -> pa.Table:
        lo, hi = i * self.rows, (i + 1) * self.rows
        cols = [pa.array(np.arange(lo, hi, dtype=np.int64)), pa.array(self.x[lo:hi]), pa.array(self.y[lo:hi])]
        if self.payload_bytes:
            data = np.random.default_rng([self.seed, i]).bytes(self.rows * self.payload_bytes)
            offsets = np.arange(0, self.rows * self.payload_bytes + 1, self.payload_bytes, dtype=np.int32)
            cols.append(pa.Array.from_buffers(pa.binary(), self.rows, [None, pa.py_buffer(offsets), pa.py_buffer(data)]))
        return pa.Table.from_arrays(cols, schema=self.schema)


def filter_values(scene: Scene, n: int) -> dict[str, np.ndarray]:
    """``n`` values of x, of y and range starts, drawn from the values the run writes."""
    rng = np.random.default_rng([scene.seed, 33])
    return {"x=": rng.choice(scene.x, n), "y=": rng.choice(scene.y, n), "x range": rng.choice(scene.x, n)}


def skipped(lo: np.ndarray, hi: np.ndarray, known: np.ndarray, values: np.ndarray, width: int = 0) -> float:
    """Share of (value, file) pairs where a file's inclusive [lo, hi] excludes [value, value + width];
    a file without bounds is never skipped."""
    if not len(lo):
        return 0.0
    v = values.astype(np.int64)[:, None]
    return float((known & ((v + width < lo) | (v > hi))).mean())


# -- contenders ------------------------------------------------------------------------------------------
class Contender(abc.ABC):
    """One table under one way of compacting, and what that cost so far."""

    def __init__(self, name: str, path: str):
        self.name, self.path = name, path
        self.appended = self.written = 0
        self.compaction_s = 0.0
        self.skips: list[dict[str, float]] = []  # one per measured pass

    @abc.abstractmethod
    def append(self, data: pa.Table) -> int:
        """Appends the rows; returns the data bytes written."""

    @abc.abstractmethod
    def compact(self) -> int:
        """One compaction pass; returns the data bytes written."""

    @abc.abstractmethod
    def bounds(self, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Inclusive (lo, hi) of ``column`` per live file, and whether they are known."""

    @abc.abstractmethod
    def files(self) -> int:
        """Live data files."""

    @abc.abstractmethod
    def reader(self) -> tuple[Callable[[int], int], Callable[[int, int], int]]:
        """On the final table: ``point(c)`` counts the rows with x = c, ``between(a, b)`` reads (to Arrow)
        those with a <= x <= b and returns how many."""

    def step(self, data: pa.Table) -> None:
        self.appended += self.append(data)
        t0 = time.perf_counter()
        written = self.compact()
        self.compaction_s += time.perf_counter() - t0
        self.written += written

    def measure_skips(self, values: dict[str, np.ndarray]) -> None:
        x, y = self.bounds("x"), self.bounds("y")
        self.skips.append(
            {
                "x=": skipped(*x, values["x="]),
                "y=": skipped(*y, values["y="]),
                "x range": skipped(*x, values["x range"], RANGE_SKIP),
            }
        )

    def extra(self) -> dict[str, Any]:
        """Anything the format reports about itself, for the JSON."""
        return {}


class LaminaContender(Contender):
    def __init__(self, name: str, path: str, scene: Scene, options: CompactionOptions, runner: str):
        super().__init__(name, path)
        self.options, self.runner, self.clustering = options, runner, LAMINA[name]
        self.table = lamina.create_table(path, scene.schema)
        self.set_clustering_s: float | None = None

    def append(self, data: pa.Table) -> int:
        before = {f.id for f in self.table.manifest.fragments}
        self.table.append(data)
        new = sum(f.file_bytes for f in self.table.manifest.fragments if f.id not in before)
        if self.clustering and self.set_clustering_s is None:  # after the first append: boundaries from data
            keys, curve = self.clustering
            t0 = time.perf_counter()
            self.table.set_clustering(keys, curve=curve)
            self.set_clustering_s = time.perf_counter() - t0
        return new

    def compact(self) -> int:
        if self.runner == "ray":
            from lamina.compaction import compact

            _, summary = compact(self.path, self.options)
        else:
            from benchmarks.streaming import compact_in_process

            summary = compact_in_process(self.path, self.options)
        if summary.failed_groups:
            raise RuntimeError(
                f"{self.name}: compaction of {self.path} failed: {json.dumps(summary.to_dict(), default=str)[:2000]}"
            )
        self.table.reload()
        return summary.bytes_written

    def bounds(self, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lo, hi, known = [], [], []
        for f in self.table.manifest.fragments:
            z = next((z for z in f.zones or () if z.column == column), None)
            ok = z is not None and z.lo is not None and z.hi is not None
            lo.append(z.lo if ok else 0)
            hi.append((z.hi if z.hi_inclusive else z.hi - 1) if ok else 0)  # integer keys: an exclusive bound less one
            known.append(ok)
        return np.array(lo, np.int64), np.array(hi, np.int64), np.array(known, bool)

    def files(self) -> int:
        return len(self.table.manifest.fragments)

    def reader(self):
        t = lamina.open_table(self.path)
        return (
            lambda c: t.count_rows(filter=f"x = {c}"),
            lambda a, b: t.to_arrow(filter=f"x BETWEEN {a} AND {b}").num_rows,
        )

    def extra(self) -> dict[str, Any]:
        stats = lamina.open_table(self.path).stats()
        clustering = getattr(stats, "clustering", None)  # Lamina's own figure, where it reports one
        return {
            "set_clustering_s": self.set_clustering_s,
            "data_bytes": stats.data_bytes,
            "lamina_stats_clustering": None if clustering is None else repr(clustering),
        }


class DeltaContender(Contender):
    def __init__(self, name: str, path: str, target_bytes: int):
        super().__init__(name, path)
        import deltalake

        self.deltalake, self.target = deltalake, target_bytes
        self.how = DELTA[name]
        # Lamina's codec (zstd level 3) for appends and optimize alike: delta's appends default to snappy and its
        # optimize to zstd, and bytes of two codecs would make write amplification a ratio of codecs.
        self.props = deltalake.WriterProperties(compression="ZSTD", compression_level=3)
        self.live: dict[str, int] = {}

    def actions(self) -> pa.Table:
        return pa.table(self.deltalake.DeltaTable(self.path).get_add_actions(flatten=True))

    def append(self, data: pa.Table) -> int:
        self.deltalake.write_deltalake(self.path, data, mode="append", writer_properties=self.props)
        a = self.actions()
        now = dict(zip(a["path"].to_pylist(), a["size_bytes"].to_pylist()))
        new = sum(size for p, size in now.items() if p not in self.live)
        self.live = now
        return new

    def compact(self) -> int:
        opt = self.deltalake.DeltaTable(self.path).optimize
        if self.how == "z_order":
            metrics = opt.z_order(["x", "y"], target_size=self.target, writer_properties=self.props)
        else:
            metrics = opt.compact(target_size=self.target, writer_properties=self.props)
        added = metrics["filesAdded"]  # deltalake 1.6.6: a JSON string {"totalSize": ..., ...}
        added = json.loads(added) if isinstance(added, str) else added
        a = self.actions()
        self.live = dict(zip(a["path"].to_pylist(), a["size_bytes"].to_pylist()))
        return int(added["totalSize"])

    def bounds(self, column: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        a = self.actions()
        if f"min.{column}" not in a.column_names:
            n = a.num_rows
            return np.zeros(n, np.int64), np.zeros(n, np.int64), np.zeros(n, bool)
        lo, hi = a[f"min.{column}"], a[f"max.{column}"]
        known = np.asarray(lo.is_valid()) & np.asarray(hi.is_valid())
        return (lo.fill_null(0).to_numpy().astype(np.int64), hi.fill_null(0).to_numpy().astype(np.int64), known)

    def files(self) -> int:
        return len(self.live)

    def reader(self):
        import pyarrow.compute as pc

        ds = self.deltalake.DeltaTable(self.path).to_pyarrow_dataset()
        x = pc.field("x")
        return (
            lambda c: ds.count_rows(filter=x == c),
            lambda a, b: ds.to_table(filter=(x >= a) & (x <= b)).num_rows,
        )

    def extra(self) -> dict[str, Any]:
        return {"deltalake": self.deltalake.__version__}


# -- the run ---------------------------------------------------------------------------------------------
def time_reads(contenders: list[Contender], scene: Scene, values: dict[str, np.ndarray], runs: int) -> dict[str, dict]:
    """Median of ``runs`` point counts and range reads per contender on its final table, each run with its own
    value (the same values for all), after one warm-up; contenders interleaved, the order rotating."""
    readers = {c.name: c.reader() for c in contenders}
    xs = np.sort(scene.x)
    points = [int(v) for v in values["x="][:runs]]
    starts = [int(v) for v in values["x range"][:runs]]
    want_point = [int(np.searchsorted(xs, c, "right") - np.searchsorted(xs, c, "left")) for c in points]
    want_range = [int(np.searchsorted(xs, a + RANGE_QUERY, "right") - np.searchsorted(xs, a, "left")) for a in starts]
    out: dict[str, dict[str, list[float]]] = {c.name: {"point": [], "range": []} for c in contenders}
    names = [c.name for c in contenders]
    for kind, args, want in (("point", points, want_point), ("range", starts, want_range)):
        for r in range(-1, runs):
            arg = args[max(r, 0)]
            for name in names[r % len(names) :] + names[: r % len(names)]:
                fn = readers[name][0] if kind == "point" else readers[name][1]
                t0 = time.perf_counter()
                got = fn(arg) if kind == "point" else fn(arg, arg + RANGE_QUERY)
                took = time.perf_counter() - t0
                if got != want[max(r, 0)]:
                    raise AssertionError(
                        f"{name}: {kind} query at {arg} gave {got} rows, the generated data has {want[max(r, 0)]}"
                    )
                if r >= 0:
                    out[name][kind].append(took)
    return {n: {k: statistics.median(v) for k, v in d.items()} for n, d in out.items()}


def run(args: argparse.Namespace, root: str, names: list[str]) -> dict[str, Any]:
    passes, rows = SCENES[args.scene]
    passes, rows = args.passes or passes, args.rows or rows
    scene = Scene(passes, rows, args.skew, args.payload_bytes, args.seed)
    values = filter_values(scene, args.values)
    target = int(args.target_mib * MiB)
    options = CompactionOptions(target_bytes_per_fragment=target, policy="tiered").with_overrides(
        **dict(parse_assignment(a) for a in args.set)
    )
    contenders: list[Contender] = [
        LaminaContender(n, os.path.join(root, n), scene, options, args.runner)
        if n in LAMINA
        else DeltaContender(n, os.path.join(root, n), int((args.delta_target_mib or args.target_mib) * MiB))
        for n in names
    ]
    if any(isinstance(c, LaminaContender) for c in contenders):
        # One merge on a scratch table first: the driver's first compaction (imports, Ray's function export)
        # costs what the first Lamina contender would pay and the ones after it would not.
        warm = LaminaContender("unclustered", os.path.join(root, "warm-up"), scene, options, args.runner)
        for _ in range(options.min_merge_width):
            warm.step(scene.batch(0).slice(0, 100))
        assert warm.written, "the warm-up table was not compacted"
        shutil.rmtree(warm.path, ignore_errors=True)
    every = max(1, passes // 4)
    for i in range(passes):
        data = scene.batch(i)
        for c in contenders:
            c.step(data)
        if i >= passes - LAST:
            for c in contenders:
                c.measure_skips(values)
        if (i + 1) % every == 0 or i + 1 == passes:
            print(
                f"  pass {i + 1:4d}/{passes}: "
                + " | ".join(f"{c.name} {c.files()} files {c.compaction_s:.1f} s" for c in contenders),
                flush=True,
            )
    reads = time_reads(contenders, scene, values, args.runs)
    return {
        "scene": {
            "name": args.scene,
            "passes": passes,
            "rows_per_pass": rows,
            "skew": args.skew,
            "payload_bytes": args.payload_bytes,
            "seed": args.seed,
            "target_bytes": target,
            "runner": args.runner,
            "filter_values": args.values,
            "query_runs": args.runs,
        },
        "contenders": {
            c.name: {
                "files": c.files(),
                "skipped": c.skips[-1],
                "skipped_last_10": {k: statistics.mean(s[k] for s in c.skips) for k in FILTERS},
                "appended_bytes": c.appended,
                "compaction_written_bytes": c.written,
                "write_amplification": c.written / c.appended,
                "compaction_s": c.compaction_s,
                "point_s": reads[c.name]["point"],
                "range_s": reads[c.name]["range"],
                **c.extra(),
            }
            for c in contenders
        },
    }


def ratios(result: dict[str, Any]) -> None:
    """Adds each contender's ratios to the same run's baselines (None where the baseline did not run)."""
    cs = result["contenders"]
    dz, base = cs.get("delta-zorder"), cs.get("unclustered")
    for c in cs.values():
        c["compaction_vs_delta_zorder"] = c["compaction_s"] / dz["compaction_s"] if dz else None
        c["point_speedup_vs_unclustered"] = base["point_s"] / c["point_s"] if base else None
        c["range_speedup_vs_unclustered"] = base["range_s"] / c["range_s"] if base else None


def targets(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The issue's targets for each clustered Lamina contender in the run."""
    skew = result["scene"]["skew"]
    need = 0.75 if skew else 0.85
    out = []
    for name in CLUSTERED:
        c = result["contenders"].get(name)
        if c is None:
            continue
        both = min(c["skipped"]["x="], c["skipped"]["y="])
        rows = [
            (f"skipped by min/max, both keys (min of x=, y=) >= {need}", both, both >= need),
            ("write amplification <= 3x", c["write_amplification"], c["write_amplification"] <= 3),
            ("compaction time <= 0.5x delta z_order's", c["compaction_vs_delta_zorder"], None),
            ("point query >= 5x faster than unclustered", c["point_speedup_vs_unclustered"], None),
        ]
        for label, fig, ok in rows:
            if ok is None and fig is not None:
                ok = fig <= 0.5 if label.startswith("compaction") else fig >= 5
            out.append({"contender": name, "target": label, "figure": fig, "met": ok})
    return out


def report(result: dict[str, Any]) -> None:
    def f(x: float | None, fmt: str) -> str:
        return "n/a" if x is None else format(x, fmt)

    s = result["scene"]
    shape = (
        s["name"] + (", x Zipf(1.3)" if s["skew"] else "") + (f", payload {s['payload_bytes']} B" if s["payload_bytes"] else "")
    )
    print(
        f"\n{s['passes']} passes x {s['rows_per_pass']:,} rows ({shape}), target {s['target_bytes'] / MiB:g} MiB, "
        f"Lamina via {'compact() on a local Ray' if s['runner'] == 'ray' else 'plan -> GroupCompactor in process'}; "
        f"skipped over {s['filter_values']} values per filter; reads: median of {s['query_runs']}"
    )
    head = (
        f"{'contender':14} {'files':>5}  {'skipped x= / y= / x range':>25}  {'(last 10 mean)':>20}  {'WA':>6}  "
        f"{'compact s':>9} {'/dz':>5}  {'point ms':>8} {'speedup':>7}  {'range ms':>8} {'speedup':>7}"
    )
    print(head)
    for name, c in result["contenders"].items():
        sk, sl = c["skipped"], c["skipped_last_10"]
        print(
            f"{name:14} {c['files']:5d}  {' / '.join(f'{sk[k]:.2f}' for k in FILTERS):>25}  "
            f"{' / '.join(f'{sl[k]:.2f}' for k in FILTERS):>20}  {c['write_amplification']:5.2f}x  "
            f"{c['compaction_s']:9.2f} {f(c['compaction_vs_delta_zorder'], '5.2f'):>5}  "
            f"{c['point_s'] * 1e3:8.2f} {f(c['point_speedup_vs_unclustered'], '6.2f'):>6}x  "
            f"{c['range_s'] * 1e3:8.2f} {f(c['range_speedup_vs_unclustered'], '6.2f'):>6}x"
        )
    print(
        "(/dz: compaction time / delta-zorder's; speedup: unclustered's median / the contender's; "
        "WA: bytes compaction wrote / bytes appended)"
    )
    for name, c in result["contenders"].items():
        if c.get("lamina_stats_clustering"):
            print(f"{name}: Lamina's stats().clustering = {c['lamina_stats_clustering']}")
    print("\ntargets (issue 33)" + ("" if result["targets"] else ": no clustered Lamina contender in this run"))
    for t in result["targets"]:
        verdict = "n/a (baseline not in this run)" if t["met"] is None else ("met" if t["met"] else "MISSED")
        print(f"  {t['contender']:8} {t['target']:56} {f(t['figure'], '.2f'):>6}  {verdict}")


def _import_worker() -> int:
    import lamina.workers.compaction  # noqa: F401

    time.sleep(0.3)  # held, so that the next task goes to another worker
    return os.getpid()


def warm_workers(ray: Any, n: int) -> None:
    """Has ``n`` Ray workers import Lamina's compaction before the run: otherwise the first contender to
    compact pays for it and the ones after it in the same pass do not."""
    task = ray.remote(num_cpus=1)(_import_worker)
    seen: set[int] = set()
    for _ in range(5):
        seen.update(ray.get([task.remote() for _ in range(n)]))
        if len(seen) >= n:
            return


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scene", choices=tuple(SCENES), default="small", help="small: 40 x 25,000 rows; many: 400 x 2,500")
    ap.add_argument("--passes", type=int, help="appends (overrides the scene's)")
    ap.add_argument("--rows", type=int, help="rows per append (overrides the scene's)")
    ap.add_argument("--skew", action="store_true", help="x Zipf(1.3)-distributed instead of uniform")
    ap.add_argument("--payload-bytes", type=int, default=0, help="width of a random binary payload column (0: none)")
    ap.add_argument("--target-mib", type=float, default=1.0, help="target file size of every contender")
    ap.add_argument(
        "--delta-target-mib",
        type=float,
        help="delta-rs's target_size instead of --target-mib (its files come out near a third of it: "
        "compare at equal file sizes with ~3x Lamina's)",
    )
    ap.add_argument("--contenders", default=",".join(CONTENDERS), help=f"comma-separated subset of {','.join(CONTENDERS)}")
    ap.add_argument("--runner", choices=("ray", "local"), default="ray", help="how Lamina's compaction runs")
    ap.add_argument("--values", type=int, default=200, help="filter values per filter for the skipped figure")
    ap.add_argument("--runs", type=int, default=20, help="timed runs per selective query")
    ap.add_argument("--seed", type=int, default=33)
    ap.add_argument("--json", action="store_true", help="print the figures as JSON (after the table)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a Lamina compaction option (repeatable)")
    args = ap.parse_args(argv)

    names = [n.strip() for n in args.contenders.split(",") if n.strip()]
    unknown = [n for n in names if n not in CONTENDERS]
    if unknown or not names:
        ap.error(f"--contenders: unknown {unknown}; choose from {', '.join(CONTENDERS)}")
    if args.runs > args.values:
        ap.error("--runs must not exceed --values (each run takes one of the filter values)")
    if any(n in DELTA for n in names):
        try:
            import deltalake  # noqa: F401
        except ImportError:
            ap.error("the delta contenders need deltalake (pip install .[bench]); or leave them out of --contenders")

    started = time.perf_counter()
    root = tempfile.mkdtemp(prefix="lamina-clb-")
    try:
        with contextlib.ExitStack() as stack:
            if args.runner == "ray" and any(n in LAMINA for n in names):
                from lamina.testing.cluster import local_ray

                warm_workers(stack.enter_context(local_ray(num_cpus=2, temp_dir=os.path.join(root, "ray"))), 2)
            result = run(args, root, names)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    ratios(result)
    result["targets"] = targets(result)
    result["versions"] = {
        "python": sys.version.split()[0],
        "pyarrow": pa.__version__,
        **({"deltalake": __import__("deltalake").__version__} if "deltalake" in sys.modules else {}),
    }
    result["total_s"] = time.perf_counter() - started
    report(result)
    print(f"\n(total {result['total_s']:.0f} s)")
    if args.json:
        print(json.dumps(result, indent=2, default=str))


if __name__ == "__main__":
    main()
