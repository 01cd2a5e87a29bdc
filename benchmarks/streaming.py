"""A table fed forever by small appends and compacted after each: write amplification, fragments, reads and time per policy.

    .venv/bin/python -m benchmarks.streaming [--quick] [--cases 40x25000,400x2500] [--runner ray|local]

For each case (N passes of "append k rows of the demo schema, then run the compaction job with
defaults") and each engine in the same run: Lamina with ``policy=binpack``, Lamina with
``policy=tiered``, and pylance ``compact_files()`` (if installed). Every 10 passes it prints:
cumulative write amplification (data bytes written by compaction / data bytes appended), fragment
count (and the most after any pass), full-scan time and a point lookup against the same rows fully
compacted (a table written in one append: fragments at the target), storage before cleanup, and
compaction time so far. Lamina's compaction runs through ``lamina.compaction.compact`` on a local
Ray (``--runner ray``, the job's path), or plan -> GroupCompactor -> commit_results in this process
(``--runner local``); the output says which.
"""

from __future__ import annotations

import abc
import argparse
import math
import os
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

import lamina
from benchmarks.write_read import best_of
from lamina.compaction import CompactionSummary, commit_results
from lamina.jobs.demo import SCHEMA, sample_rows
from lamina.planner import CompactionOptions, plan_compaction
from lamina.workers.compaction import GroupCompactor, tasks_for

MiB = 1 << 20
LOOKUPS = 3


def dir_bytes(path: str) -> int:
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(path) for f in files)


def data_files(path: str) -> dict[str, int]:
    """Data files of a Lamina (data/*.parquet) or Lance (data/*.lance) table, with their sizes."""
    d = os.path.join(path, "data")
    return {f: os.path.getsize(os.path.join(d, f)) for f in os.listdir(d)} if os.path.isdir(d) else {}


def new_bytes(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(size for name, size in after.items() if name not in before)


@dataclass
class Engine(abc.ABC):
    """One table under one compaction policy, and what it cost so far."""

    name: str
    path: str
    appended: int = 0
    written: int = 0
    compaction_s: float = 0.0
    max_fragments: int = 0
    rows: int = 0

    @abc.abstractmethod
    def append(self, data: pa.Table) -> None:
        """Appends the rows."""

    @abc.abstractmethod
    def compact(self) -> None:
        """Runs one compaction pass."""

    @abc.abstractmethod
    def fragments(self) -> int:
        """Fragments the table holds now."""

    @abc.abstractmethod
    def scan(self) -> Callable[[], object]:
        """A full scan, as a call to time."""

    @abc.abstractmethod
    def lookup(self, key: int) -> Callable[[], object]:
        """A point lookup of ``key``, as a call to time."""

    def step(self, data: pa.Table) -> None:
        before = data_files(self.path)
        self.append(data)
        after = data_files(self.path)
        self.appended += new_bytes(before, after)
        self.rows += data.num_rows
        t0 = time.perf_counter()
        self.compact()
        self.compaction_s += time.perf_counter() - t0
        self.written += new_bytes(after, data_files(self.path))
        self.max_fragments = max(self.max_fragments, self.fragments())


class LaminaEngine(Engine):
    def __init__(self, name: str, path: str, options: CompactionOptions, runner: str):
        super().__init__(name, path)
        self.options, self.runner = options, runner
        self.table = lamina.create_table(path, SCHEMA)
        #: bytes_written as the compaction summaries report them (checked against the files written).
        self.summary_written = 0

    def append(self, data: pa.Table) -> None:
        self.table.append(data)

    def compact(self) -> None:
        if self.runner == "ray":
            from lamina.compaction import compact

            _, summary = compact(self.path, self.options)
        else:
            summary = compact_in_process(self.path, self.options)
        assert summary.failed_groups == 0, summary.to_dict()
        self.summary_written += summary.bytes_written
        self.table.reload()

    def fragments(self) -> int:
        return len(self.table.manifest.fragments)

    def scan(self):
        t = lamina.open_table(self.path)
        return lambda: t.to_arrow()

    def lookup(self, key: int):
        t = lamina.open_table(self.path)
        return lambda: _one(t.to_arrow(filter=f"id = {key}"), key)


class LanceEngine(Engine):
    def __init__(self, name: str, path: str):
        super().__init__(name, path)
        import lance

        self.lance = lance
        self.ds = None

    def append(self, data: pa.Table) -> None:
        self.ds = self.lance.write_dataset(data, self.path, mode="append" if self.ds is not None else "create")

    def compact(self) -> None:
        self.ds = self.lance.dataset(self.path)
        self.ds.optimize.compact_files()
        self.ds = self.lance.dataset(self.path)

    def fragments(self) -> int:
        return len(self.ds.get_fragments())

    def scan(self):
        ds = self.lance.dataset(self.path)
        return lambda: ds.to_table()

    def lookup(self, key: int):
        ds = self.lance.dataset(self.path)
        return lambda: _one(ds.to_table(filter=f"id = {key}"), key)


def _one(t: pa.Table, key: int) -> None:
    assert t.num_rows == 1 and t.column("id")[0].as_py() == key, (t.num_rows, key)


def compact_in_process(uri: str, options: CompactionOptions) -> CompactionSummary:
    """The job's path without Ray: plan -> GroupCompactor per group -> commit_results."""
    t = lamina.open_table(uri)
    base = t.manifest
    plan = plan_compaction(base, options, t.uri)
    summary = CompactionSummary.for_plan(plan)
    results = []
    for task in tasks_for(plan, base, uri, None, t.write_options, options.read_batch_bytes):
        r = GroupCompactor().run(task)
        summary.record(r)
        results.append(r)
    commit_results(t, base, [r for r in results if r.ok], summary)
    return summary


@dataclass
class Reference:
    """The same rows fully compacted: written in one append (Lamina) / one write (Lance)."""

    lamina_path: str
    lance_path: str | None


def reference(root: str, rows: int, with_lance: bool) -> Reference:
    ref = os.path.join(root, "ref")
    shutil.rmtree(ref, ignore_errors=True)
    os.makedirs(ref)
    data = sample_rows(0, rows)
    lamina.create_table(os.path.join(ref, "lamina"), SCHEMA).append(data)
    lance_path = None
    if with_lance:
        import lance

        lance_path = os.path.join(ref, "lance")
        lance.write_dataset(data, lance_path)
    return Reference(os.path.join(ref, "lamina"), lance_path)


def read_times(engine: Engine, ref_path: str, keys: list[int], rounds: int = 7) -> dict[str, float]:
    """Full scan and point lookups of the engine's table and of its reference, alternated so that a
    noisy neighbour slows both alike: the best of ``rounds`` scans, the median over keys of the best of
    ``rounds`` lookups."""
    ref = Engine.__new__(type(engine))
    ref.__dict__.update(engine.__dict__, path=ref_path)
    scans = (engine.scan(), ref.scan())
    best = [math.inf, math.inf]
    for _ in range(rounds):
        for i, fn in enumerate(scans):
            best[i] = min(best[i], best_of(1, fn))
    looks: list[list[float]] = [[], []]
    for k in keys:
        fns = (engine.lookup(k), ref.lookup(k))
        kbest = [math.inf, math.inf]
        for _ in range(rounds):
            for i, fn in enumerate(fns):
                kbest[i] = min(kbest[i], best_of(1, fn))
        looks[0].append(kbest[0])
        looks[1].append(kbest[1])
    return {
        "scan": best[0],
        "ref_scan": best[1],
        "lookup": statistics.median(looks[0]),
        "ref_lookup": statistics.median(looks[1]),
    }


def fragment_bound(options: CompactionOptions, table_share: float, append_share: float) -> int:
    """planner/tiered.py's bound on fragments after a pass of a steady stream."""
    r, w = options.tier_ratio, options.min_merge_width
    k = max(1, math.ceil(math.log(1 / append_share, r) - 1e-9)) if append_share < 1 else 0
    return math.ceil(2 * table_share - 1e-9) + (w - 1) * max(0, k - 1) + (r - 1) // 2


def run_case(root: str, passes: int, rows: int, runner: str, every: int) -> dict:
    case = os.path.join(root, f"{passes}x{rows}")
    os.makedirs(case)
    engines: list[Engine] = [
        LaminaEngine("binpack", os.path.join(case, "binpack"), CompactionOptions(policy="binpack"), runner),
        LaminaEngine("tiered", os.path.join(case, "tiered"), CompactionOptions(policy="tiered"), runner),
    ]
    try:
        engines.append(LanceEngine("pylance", os.path.join(case, "lance")))
        lance_version = engines[-1].lance.__version__
    except ImportError:
        lance_version = None
    via = "lamina.compaction.compact on a local Ray" if runner == "ray" else "plan -> GroupCompactor -> commit_results in process"
    print(
        f"\n{passes} passes x {rows:,} rows (demo schema; Lamina compaction via "
        f"{via}"
        f"; pylance {lance_version or 'not installed'} compact_files())"
    )
    print(
        f"{'pass':>5} {'engine':8} {'WA':>6} {'frags':>5} {'max':>4} {'scan ms':>8} {'vs ref':>6} {'lookup ms':>9} "
        f"{'vs ref':>6} {'storage MiB':>11} {'compact s':>9}"
    )
    rng = np.random.default_rng(passes * rows)
    checkpoints = []
    for i in range(passes):
        data = sample_rows(i * rows, rows)
        for e in engines:
            e.step(data)
        if (i + 1) % every == 0 or i + 1 == passes:
            total = (i + 1) * rows
            ref = reference(case, total, lance_version is not None)
            keys = sorted(int(k) for k in rng.integers(0, total, LOOKUPS))
            for e in engines:
                t = read_times(e, ref.lance_path if isinstance(e, LanceEngine) else ref.lamina_path, keys)
                line = {
                    "pass": i + 1,
                    "engine": e.name,
                    "wa": e.written / e.appended,
                    "fragments": e.fragments(),
                    "max_fragments": e.max_fragments,
                    **t,
                    "storage": dir_bytes(e.path),
                    "compaction_s": e.compaction_s,
                }
                checkpoints.append(line)
                print(
                    f"{i + 1:5d} {e.name:8} {line['wa']:6.2f} {line['fragments']:5d} {e.max_fragments:4d} "
                    f"{t['scan'] * 1e3:8.1f} {t['scan'] / t['ref_scan']:6.2f} {t['lookup'] * 1e3:9.2f} "
                    f"{t['lookup'] / t['ref_lookup']:6.2f} {line['storage'] / MiB:11.1f} {e.compaction_s:9.2f}"
                )
    for e in engines:
        if isinstance(e, LaminaEngine):  # the JSON summary's bytes_written is what was written
            assert e.summary_written == e.written, (e.name, e.summary_written, e.written)
    tiered = engines[1]
    t_opts = tiered.options
    append_share = max(rows / t_opts.target_rows_per_fragment, (tiered.appended / passes) / t_opts.target_bytes_per_fragment)
    table_share = max(tiered.rows / t_opts.target_rows_per_fragment, tiered.appended / t_opts.target_bytes_per_fragment)
    return {
        "passes": passes,
        "rows": rows,
        "engines": engines,
        "checkpoints": checkpoints,
        "bound": fragment_bound(t_opts, table_share, append_share),
    }


def verdict(case: dict) -> list[str]:
    """The issue's targets, met or missed, with the measured figure."""
    by = {e.name: e for e in case["engines"]}
    last = {c["engine"]: c for c in case["checkpoints"] if c["pass"] == case["passes"]}
    cps = [c for c in case["checkpoints"] if c["engine"] == "tiered"]
    t, b = by["tiered"], by["binpack"]
    wa_target = 3.0 if case["rows"] >= 25_000 else 4.0  # the issue: 40 x 25,000 <= 3x, 400 x 2,500 <= 4x

    def reads(kind: str) -> str:
        ratios = [(c[kind] / c[f"ref_{kind}"], c["pass"]) for c in cps]
        worst, at = max(ratios)
        over = [p for r, p in ratios if r > 1.25]
        return (
            f"{ratios[-1][0]:.2f}x of the fully compacted table at the end, worst {worst:.2f}x (pass {at}, "
            f"{at * case['rows']:,} rows) (target <= 1.25x): "
            + (
                "met at every checkpoint"
                if not over
                else f"{'met' if ratios[-1][0] <= 1.25 else 'MISSED'} at the end, MISSED at {len(over)} of {len(ratios)} "
                f"checkpoints (passes {', '.join(map(str, over))})"
            )
        )

    lines = [
        f"write amplification {t.written / t.appended:.2f}x (target <= {wa_target:g}x): "
        f"{'met' if t.written / t.appended <= wa_target else 'MISSED'}; binpack {b.written / b.appended:.2f}x"
        + (f", pylance {by['pylance'].written / by['pylance'].appended:.2f}x" if "pylance" in by else ""),
        f"fragments after any pass {t.max_fragments} (documented bound {case['bound']}, issue: <= 20): "
        f"{'met' if t.max_fragments <= min(case['bound'], 20) else 'MISSED'}; at the end {last['tiered']['fragments']}",
        f"full scan {reads('scan')}",
        f"point lookup {reads('lookup')}",
        f"compaction time {t.compaction_s:.1f} s = {t.compaction_s / b.compaction_s:.2f}x of binpack's {b.compaction_s:.1f} s "
        f"(target <= 0.3x): {'met' if t.compaction_s <= 0.3 * b.compaction_s else 'MISSED'}"
        + (f"; pylance {by['pylance'].compaction_s:.1f} s" if "pylance" in by else ""),
    ]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a small run for a smoke test")
    ap.add_argument("--cases", help="PASSESxROWS,... (default 40x25000,400x2500; --quick 10x5000,30x500)")
    ap.add_argument("--runner", choices=("ray", "local"), default="ray", help="how Lamina's compaction job runs")
    ap.add_argument("--every", type=int, default=10, help="print every N passes")
    args = ap.parse_args()
    cases = args.cases or ("10x5000,30x500" if args.quick else "40x25000,400x2500")
    if args.runner == "ray":
        from lamina.workers import runtime

        runtime.connect(num_cpus=2)
    root = tempfile.mkdtemp(prefix="lamina-bench-streaming-")
    started = time.perf_counter()
    try:
        results = []
        for spec in cases.split(","):
            passes, rows = (int(x.replace("_", "")) for x in spec.lower().split("x"))
            results.append(run_case(root, passes, rows, args.runner, args.every))
            shutil.rmtree(os.path.join(root, f"{passes}x{rows}"), ignore_errors=True)
        print()
        for case in results:
            print(f"{case['passes']} x {case['rows']:,} rows, tiered against the issue's targets:")
            for line in verdict(case):
                print(f"  {line}")
        print(f"\n(total {time.perf_counter() - started:.0f} s)")
    finally:
        shutil.rmtree(root, ignore_errors=True)
        if args.runner == "ray":
            from lamina.workers import runtime

            runtime.shutdown()


if __name__ == "__main__":
    main()
