"""One racing process for test_evolution_races: merges, deletes, compactions, WAL flushes or schema
changes against one table, each op on the latest version it reads; a lost race (``CommitConflict``)
is recorded and the next op goes on.

    python -m tests.lamina.changing_writer URI ROLE WORKER OPS SEED

Prints one JSON line per committed op: ``{"op", "read", "version", ...}`` (what the model replays).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pyarrow as pa

import lamina
from lamina.commit import commit
from lamina.compaction import CompactionSummary, commit_results
from lamina.datafile import write_fragments
from lamina.errors import CommitConflict
from lamina.planner import CompactionOptions, plan_compaction
from lamina.transaction import WalFlush
from lamina.workers.compaction import GroupCompactor, tasks_for

SHARED_KEYS = 300  # keys 0..299 are seeded; merges update and deletes remove them


def source(t: lamina.Table, keys: list[int], vals: list[int]) -> pa.Table:
    """Rows of ``keys`` in the table's schema as ``t`` reads it: ``val`` given, other columns null."""
    cols = {}
    for f in t.schema:
        if f.name == "key":
            cols[f.name] = pa.array(keys, f.type)
        elif f.name == "val":
            cols[f.name] = pa.array(vals, f.type)
        else:
            cols[f.name] = pa.nulls(len(keys), f.type)
    return pa.table(cols, schema=t.schema)


def main() -> None:
    uri, role, worker, ops, seed = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
    rng = np.random.default_rng(seed)
    t = lamina.open_table(uri)
    mine = 10_000 * (worker + 1)  # keys only this process inserts
    for step in range(ops):
        t.reload()
        read = t.version
        out: dict = {"op": role, "worker": worker, "read": read}
        try:
            if role == "merge":
                shared = sorted({int(k) for k in rng.integers(0, SHARED_KEYS, 4)})
                keys = shared + [mine + step * 10 + j for j in range(3)]
                vals = [worker * 1_000_000 + step * 100 + j for j in range(len(keys))]
                t.merge(source(t, keys, vals), on="key").when_matched_update().when_not_matched_insert().execute()
                out.update(keys=keys, vals=vals)
            elif role == "delete":
                lo = int(rng.integers(0, SHARED_KEYS))
                t.delete(f"key >= {lo} AND key < {lo + 6}")
                out.update(lo=lo, hi=lo + 6)
            elif role == "wal":
                keys = [mine + step * 10 + j for j in range(4)]
                vals = [worker * 1_000_000 + step * 100 + j for j in range(4)]
                frags = write_fragments(t.store, t.schema, iter(source(t, keys, vals).to_batches()), t.write_options)
                shard = f"{worker}/0000000000"
                done = commit(t.store, WalFlush(read, frags, {}, {shard: step + 1}, {shard: step}), t.manifest)
                out.update(keys=keys, vals=vals, version=done.version)
            elif role == "compact":
                options = CompactionOptions(target_rows_per_fragment=200)
                plan = plan_compaction(t.manifest, options, t.uri)
                tasks = tasks_for(plan, t.manifest, t.uri, None, t.write_options, options.read_batch_bytes)
                results = [GroupCompactor().run(task) for task in tasks]
                assert all(r.ok for r in results), [r.error for r in results]
                summary = CompactionSummary.for_plan(plan)
                commit_results(t, t.manifest, results, summary)
                out.update(groups=len(plan.groups), committed=summary.committed_versions)
                for v in summary.committed_versions:
                    print(json.dumps({"op": "compact", "worker": worker, "read": read, "version": v}), flush=True)
                continue
            elif role == "alter":
                name = f"w{worker}s{step}"
                if step % 3 == 0:
                    t.add_columns(pa.field(name, pa.int32()))
                elif step % 3 == 1:
                    t.rename_column(f"w{worker}s{step - 1}", name)
                else:
                    t.drop_columns([f"w{worker}s{step - 1}"])
            out.setdefault("version", t.version)
            print(json.dumps(out), flush=True)
        except CommitConflict as e:
            print(json.dumps({"op": role, "worker": worker, "read": read, "conflict": str(e)[:200]}), flush=True)
            if role == "alter":  # the next steps rename or drop the column this one added: start again
                return


if __name__ == "__main__":
    main()
