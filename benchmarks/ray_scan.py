"""Full scan of a demo-schema table through Ray Data: ``lamina.ray.read_table`` against ``ray.data.read_parquet``.

    .venv/bin/python -m benchmarks.ray_scan [--quick] [--rounds 5] [--profile] [--fragments 60] [--rows-per-fragment 100000]

Both read the same data files (the table's ``data/*.parquet``; no deletions, so the rows are
the same) into Ray's object store (``.materialize()``) on one local Ray with ``num_cpus=2``,
in interleaved rounds (the order alternates each round) after one untimed warm-up each.
Printed: each round's times, the medians, and ``ratio = read_parquet / lamina`` (>= 1.0:
Lamina at least as fast).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import tempfile
import time

import lamina
from lamina.jobs.demo import sample_rows


def build(uri: str, fragments: int, rows: int) -> lamina.Table:
    """The demo schema (ints, timestamps, strings, a float vector, a struct), one fragment per append."""
    t = lamina.create_table(uri, sample_rows(0, 1).schema)
    for i in range(fragments):
        t.append(sample_rows(i * rows, rows))
    return t


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.ray_scan", description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="8 fragments of 50,000 rows, 3 rounds")
    ap.add_argument("--fragments", type=int, default=60)
    ap.add_argument("--rows-per-fragment", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true", help="print Ray Data's per-operator stats of one more run of each")
    ap.add_argument("--dir", help="where to build the table (default: a temp dir, removed after)")
    args = ap.parse_args(argv)
    if args.quick:
        args.fragments, args.rows_per_fragment, args.rounds = 8, 50_000, 3

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    import ray

    import lamina.ray

    root = args.dir or tempfile.mkdtemp(prefix="lamina-ray-scan-")
    uri = os.path.join(root, "demo")
    try:
        t0 = time.perf_counter()
        if os.path.isdir(os.path.join(uri, "_versions")):
            t = lamina.open_table(uri)
        else:
            t = build(uri, args.fragments, args.rows_per_fragment)
        files = [os.path.join(uri, f.path) for f in t.manifest.fragments]
        size = sum(f.file_bytes for f in t.manifest.fragments)
        print(
            f"table: {t.count_rows():,} rows in {len(files)} fragments, {size / 2**20:.0f} MiB on disk "
            f"(built/opened in {time.perf_counter() - t0:.1f} s)"
        )

        ray.init(
            num_cpus=2,
            include_dashboard=False,
            log_to_driver=False,
            configure_logging=False,
            _temp_dir=os.path.join(tempfile.gettempdir(), "lamina-ray-scan-ray"),
        )
        ray.data.DataContext.get_current().enable_progress_bars = False

        def lamina_scan() -> int:
            return lamina.ray.read_table(uri).materialize().count()

        def parquet_scan() -> int:
            return ray.data.read_parquet(files).materialize().count()

        engines = {"lamina.ray.read_table": lamina_scan, "ray.data.read_parquet": parquet_scan}
        for name, fn in engines.items():  # warm-up: workers started, files in the page cache
            assert fn() == t.count_rows(), name
        times: dict[str, list[float]] = {name: [] for name in engines}
        for r in range(args.rounds):
            order = list(engines) if r % 2 == 0 else list(reversed(engines))
            for name in order:
                start = time.perf_counter()
                n = engines[name]()
                times[name].append(time.perf_counter() - start)
                assert n == t.count_rows(), name
            print(f"round {r + 1}: " + ", ".join(f"{n} {times[n][-1]:.3f} s" for n in engines))
        med = {n: statistics.median(v) for n, v in times.items()}
        for n in engines:
            print(f"{n}: median {med[n]:.3f} s, {size / 2**20 / med[n]:.0f} MiB/s of files")
        ratio = med["ray.data.read_parquet"] / med["lamina.ray.read_table"]
        print(f"ratio read_parquet / lamina = {ratio:.2f} (target >= 1.0: {'met' if ratio >= 1.0 else 'missed'})")
        if args.profile:  # where each spends its time: Ray Data's own per-operator stats of one more run
            for name, ds in (
                ("lamina.ray.read_table", lamina.ray.read_table(uri)),
                ("ray.data.read_parquet", ray.data.read_parquet(files)),
            ):
                print(f"\n{name}, per operator:")
                for line in ds.materialize().stats().splitlines():
                    if line.startswith("Operator") or "Remote wall time" in line or "Remote cpu time" in line:
                        print("  " + line.strip())
        ray.shutdown()
    finally:
        if not args.dir:
            shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
