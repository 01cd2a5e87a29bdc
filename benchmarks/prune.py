"""Filtered scans with and without row-group pruning by Parquet statistics (``lamina.prune``).

    .venv/bin/python -m benchmarks.prune [--fragments 20] [--rows 100000] [--group-rows 10000] [--rounds 5]

One local table: ``--fragments`` fragments of ``--rows`` rows, ``id`` sorted across the table,
a ~45-byte ``url`` string and a random float ``x``, in row groups of ``--group-rows``. Each
filter is timed (best of ``--rounds``, interleaved, footers cached) with pruning and, as the baseline in the
same run, with pruning switched off (every row group read, as before issue 12): a selective
range on the sorted ``id``, a filter no row matches, and two filters statistics cannot prune
(a random float column, LIKE) whose ratio shows pruning's overhead.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from unittest import mock

import numpy as np
import pyarrow as pa

import lamina
from lamina import prune


def best_of(n: int, fn) -> tuple[float, object]:
    times, out = [], None
    for _ in range(n):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fragments", type=int, default=20)
    ap.add_argument("--rows", type=int, default=100_000)
    ap.add_argument("--group-rows", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as root:
        t = lamina.create_table(root, pa.schema([("id", pa.int64()), ("url", pa.string()), ("x", pa.float64())]))
        for f in range(args.fragments):
            ids = np.arange(f * args.rows, (f + 1) * args.rows)
            t.append(
                pa.table(
                    {
                        "id": ids,
                        "url": [f"https://example.com/item/{i:09d}/path" for i in ids],
                        "x": np.random.default_rng(f).random(len(ids)),
                    }
                ),
                row_group_rows=args.group_rows,
            )
        mid = args.fragments * args.rows // 2 + args.group_rows // 3
        filters = [f"id BETWEEN {mid} AND {mid + 1000}", "id < 0", "x < 0.001", "url LIKE '%0001%'"]
        print(f"{args.fragments} fragments x {args.rows:,} rows, row groups of {args.group_rows:,}; best of {args.rounds}")
        print(f"{'filter':34} {'rows':>8} {'pruned ms':>10} {'unpruned ms':>12} {'ratio':>7}  explain")
        for text in filters:
            t.to_arrow(filter=text)  # footers cached, as in a warm process
            on = off = float("inf")
            for r in range(args.rounds):  # interleaved, alternating which goes first: a busy machine slows both alike
                for pruning in (True, False) if r % 2 else (False, True):
                    with mock.patch.object(prune, "plan_fragment", prune.plan_fragment if pruning else (lambda *a, **k: None)):
                        took, n = best_of(1, lambda text=text: t.to_arrow(filter=text).num_rows)
                    if pruning:
                        on, rows = min(on, took), n
                    else:
                        off, rows_off = min(off, took), n
            assert rows == rows_off, (text, rows, rows_off)
            stats = t.explain(text).splitlines()[-1].removeprefix("statistics: ")
            print(f"{text:34} {rows:>8,} {on * 1e3:>10.1f} {off * 1e3:>12.1f} {on / off:>7.2f}  {stats[:70]}")


if __name__ == "__main__":
    main()
