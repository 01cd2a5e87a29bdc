"""The README's main job on the embedded default: a local directory table and a local Ray.

    python -m lamina.jobs.demo [--uri DIR] [--fragments N] [--rows-per-fragment N]

Ray tasks append about 400 small fragments concurrently (each a real commit
racing the others), the driver deletes some rows, then ``lamina.jobs.compact`` compacts
the table on the same local Ray with a progress bar; the job prints the
before/after summary and checks that the rows are unchanged, in order.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lamina
from lamina.compaction import compact
from lamina.index.build import build_index
from lamina.jobs.cli import Progress
from lamina.planner import CompactionOptions
from lamina.workers import runtime

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("ts", pa.timestamp("us", tz="UTC")),
        ("host", pa.string()),
        ("value", pa.float64()),
        ("embedding", pa.list_(pa.float32(), 8)),
        ("attrs", pa.struct([("region", pa.string()), ("code", pa.int32())])),
    ]
)


def sample_rows(start: int, n: int) -> pa.Table:
    """``n`` rows with ids from ``start``: ints, timestamps, strings, a float vector, a struct with nulls."""
    rng = np.random.default_rng(start)
    ids = np.arange(start, start + n, dtype=np.int64)
    attrs = [
        None if i % 11 == 0 else {"region": ("eu", "us", "ap")[i % 3], "code": None if i % 5 == 0 else i % 1000}
        for i in ids.tolist()
    ]
    return pa.table(
        {
            "id": ids,
            "ts": pa.array(
                np.datetime64("2026-01-01T00:00:00", "us") + ids.astype("timedelta64[ms]"), pa.timestamp("us", tz="UTC")
            ),
            "host": pa.array([f"host-{i % 50:02d}" for i in ids.tolist()]),
            "value": rng.normal(size=n),
            "embedding": pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 8, dtype=np.float32)), 8),
            "attrs": pa.array(attrs, SCHEMA.field("attrs").type),
        },
        schema=SCHEMA,
    )


@dataclass(frozen=True)
class WriterTask:
    """One demo writer: appends fragments ``first, first + step, ...`` below ``fragments``, one commit each."""

    uri: str
    first: int
    step: int
    fragments: int
    rows_per_fragment: int


def write_fragments(task: WriterTask) -> list[int]:
    """The demo's Ray task: appends its fragments (each a commit racing the other writers); the versions."""
    t = lamina.open_table(task.uri)
    return [
        t.append(sample_rows(f * task.rows_per_fragment, task.rows_per_fragment))
        for f in range(task.first, task.fragments, task.step)
    ]


def main(argv: list[str] | None = None, prog: str = "python -m lamina.jobs.demo") -> int:
    ap = argparse.ArgumentParser(prog=prog, description=__doc__.splitlines()[0])
    ap.add_argument("--uri", default="demo_table", help="table location (default: ./demo_table, recreated)")
    ap.add_argument("--fragments", type=int, default=400)
    ap.add_argument("--rows-per-fragment", type=int, default=5000)
    ap.add_argument("--tasks", type=int, default=8, help="concurrent Ray writer tasks")
    args = ap.parse_args(argv)

    if os.path.isdir(args.uri):
        shutil.rmtree(args.uri)
    uri = os.path.abspath(args.uri)
    table = lamina.create_table(uri, SCHEMA)
    runtime.connect(num_cpus=2)

    def show_writes(done: int, total: int) -> None:
        latest = table.reload()
        print(f"  writing: {len(latest.fragments())}/{args.fragments} fragments committed, version {latest.version}", flush=True)

    start = time.perf_counter()
    tasks = [WriterTask(uri, i, args.tasks, args.fragments, args.rows_per_fragment) for i in range(args.tasks)]
    for _, result in runtime.run_tasks(write_fragments, tasks, concurrency=args.tasks, progress=show_writes):
        if isinstance(result, runtime.TaskFailed):
            print(f"  a writer task failed: {result.error}", file=sys.stderr)
            return 1
    table.reload()
    elapsed = time.perf_counter() - start
    total = args.fragments * args.rows_per_fragment
    deleted = table.delete("attrs.region = 'ap' AND id < 100000")

    print(f"  wrote {total:,} rows in {elapsed:.1f} s from {args.tasks} Ray tasks racing to commit; deleted {deleted:,}")
    before_stats = table.stats()
    before = table.to_arrow()
    ids = before.column("id").to_numpy()
    expected = np.setdiff1d(np.arange(total), [i for i in range(min(total, 100000)) if i % 11 and i % 3 == 2])
    written_ok = len(ids) == len(np.unique(ids)) and np.array_equal(np.sort(ids), expected) and deleted == total - len(expected)

    print("\nIndexing id (lamina index --column id --kind btree) ...", flush=True)
    built = build_index(uri, "id", "btree", ray=True, progress=Progress("indexing id", "build tasks"))
    print(f"  {built.segments} segment(s), {built.rows:,} rows, {built.bytes / 2**20:.1f} MiB")

    print("\nCompacting (lamina compact) ...", flush=True)
    plan, summary = compact(uri, CompactionOptions(), progress=Progress("compacting", "groups"))
    runtime.shutdown()
    modes: dict[str, int] = {}
    for g in summary.groups:
        modes[f"{g['mode']} ({g['reason']})"] = modes.get(f"{g['mode']} ({g['reason']})", 0) + 1
    after_stats = lamina.open_table(uri).stats()
    after = lamina.open_table(uri).to_arrow()

    print(f"\nTable {uri}")
    print(f"  {'':22}{'before':>14}{'after':>14}")
    print(f"  {'version':22}{before_stats.version:>14}{after_stats.version:>14}")
    print(f"  {'fragments':22}{before_stats.fragments:>14,}{after_stats.fragments:>14,}")
    print(f"  {'row groups':22}{before_stats.row_groups:>14,}{after_stats.row_groups:>14,}")
    print(f"  {'live rows':22}{before_stats.rows:>14,}{after_stats.rows:>14,}")
    print(f"  {'deleted rows':22}{before_stats.deleted_rows:>14,}{after_stats.deleted_rows:>14,}")
    print(f"  {'MiB of Parquet':22}{before_stats.data_bytes / 2**20:>14.1f}{after_stats.data_bytes / 2**20:>14.1f}")
    print(f"  groups: {', '.join(f'{n} {m}' for m, n in modes.items())}; {summary.failed_groups} failed; {summary.seconds:.1f} s")
    same = after.equals(before)
    final = lamina.open_table(uri)
    [index] = final.list_indices()
    probes = [int(x) for x in np.random.default_rng(1).choice(ids, 20)] + [total + 5]
    lookups_ok = index.uncovered_fragments == 0 and all(
        final.to_arrow(filter=f"id = {i}").equals(after.filter(pc.equal(after.column("id"), i))) for i in probes
    )
    print(
        f"  index {index.name}: {index.covered_fragments} fragments covered, "
        f"{index.uncovered_fragments} uncovered after compaction"
    )
    print(f"  check: rows written exactly once: {'OK' if written_ok else 'FAILED'}")
    print(f"  check: rows unchanged by compaction, in order: {'OK' if same else 'FAILED'}")
    print(f"  check: index covers the compacted table, lookups equal a scan: {'OK' if lookups_ok else 'FAILED'}")
    return 0 if written_ok and same and lookups_ok and not summary.failed_groups else 1


if __name__ == "__main__":
    sys.exit(main())
