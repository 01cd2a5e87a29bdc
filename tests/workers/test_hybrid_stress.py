"""Hybrid compaction under stress: copy and decode of the same source at once must never mix up bytes.

A hybrid rewrite copies some row groups of a source byte-for-byte on one thread while
another thread decodes other row groups of the same source. Both once read through one
shared file offset (issue 16, defect 0): compactions failed with CorruptFile on healthy
files, or silently wrote wrong values. Here a table keeps growing through appends, deletes
and compactions, and after every pass its whole content, every column, is compared with
what was written.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

import lamina
from lamina.compaction import CompactionSummary, commit_results
from lamina.planner import CompactionOptions, plan_compaction
from lamina.planner.eligibility import HYBRID
from lamina.workers.compaction import GroupCompactor, tasks_for
from tests.lamina.helpers import SCHEMA, rows

#: Row groups of 3,000 rows are "large" (copied), smaller ones are re-encoded. Every fragment
#: appended ends in a short row group, and chains of fragments are compacted together until they
#: hold 40,000 rows, so every output alternates large and short row groups and is the source of
#: the next pass: one file some of whose row groups are copied while others are decoded.
OPTIONS = CompactionOptions(target_rows_per_fragment=40_000, min_row_group_bytes=48 * 1024, max_concurrency=1)
PASSES = 24


def compact_once(t: lamina.Table) -> list:
    plan = plan_compaction(t.manifest, OPTIONS, t.uri)
    results = []
    for task in tasks_for(plan, t.manifest, t.uri, None, t.write_options, OPTIONS.read_batch_bytes):
        g = task.group
        r = GroupCompactor().run(task)
        assert r.ok, f"pass compaction of group {g.index} ({g.mode}) failed: {r.error}"
        results.append(r)
    summary = CompactionSummary(
        table=t.uri, read_version=plan.read_version, fragments_before=plan.fragments_before, rows_before=plan.rows_before
    )
    summary.groups = [g.to_dict() for g in plan.groups]
    commit_results(t, t.manifest, results, summary)
    assert summary.failed_groups == 0
    t.reload()
    return results


def grow(t: lamina.Table, rng: np.random.Generator, written: list[pa.Table], next_id: int, p: int) -> int:
    """Appends three fragments, each in large row groups and a short last one; returns the next id."""
    for _ in range(3):
        n = 3000 + int(rng.integers(100, 900))
        data = rows(next_id, n, seed=p)
        t.append(data, row_group_rows=3000)
        written.append(data)
        next_id += n
    return next_id


def assert_every_value(t: lamina.Table, written: list[pa.Table], deleted: set[int], p: int) -> None:
    """Every column of every live row equals what was written; nothing deleted is left."""
    expected = pa.concat_tables(written)
    expected = expected.filter(pc.invert(pc.is_in(expected["id"], pa.array(sorted(deleted), pa.int64()))))
    got = t.to_arrow().sort_by("id")
    assert got.num_rows == expected.num_rows, f"pass {p}: {got.num_rows} rows, expected {expected.num_rows}"
    for name in SCHEMA.names:
        assert got[name].combine_chunks().equals(expected[name].combine_chunks()), f"pass {p}: column {name!r} differs"


def test_hybrid_compactions_keep_every_value_of_every_column(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA, row_group_rows=3000)
    rng = np.random.default_rng(16)
    written: list[pa.Table] = []
    deleted: set[int] = set()
    next_id = 0
    hybrid_same_source = 0
    for p in range(PASSES):
        next_id = grow(t, rng, written, next_id, p)
        # A few deletions, mostly in older fragments, so that most groups stay hybrid.
        if p % 3 == 2:
            victims = rng.choice(next_id, size=5, replace=False).tolist()
            assert t.delete(f"id IN ({', '.join(map(str, victims))})") == len(set(victims) - deleted)
            deleted.update(victims)
        for r in compact_once(t):
            if r.mode == HYBRID and r.row_groups_copied and r.row_groups_encoded:
                hybrid_same_source += 1

        assert_every_value(t, written, deleted, p)
    assert hybrid_same_source >= PASSES // 2, f"only {hybrid_same_source} hybrid groups copied and re-encoded row groups"


def test_clean_row_groups_of_sources_with_deletions_are_copied_pass_after_pass(local_table_uri):
    """The same growing table with deletions every pass, aimed at single row groups of earlier
    outputs: their other row groups are copied (copy_if_clean resolved to copy), the deleted ones
    re-encoded, and every column of every live row, and an id index, stay exact."""
    t = lamina.create_table(local_table_uri, SCHEMA, row_group_rows=3000)
    rng = np.random.default_rng(14)
    written: list[pa.Table] = []
    deleted: set[int] = set()
    next_id = 0
    copied_from_dirty = 0
    for p in range(PASSES // 2):
        next_id = grow(t, rng, written, next_id, p)
        if p == 1:
            t.create_index("id", "btree")
        # Deleted rows clustered in one 3,000-row stretch: most row groups of their fragment stay clean.
        start = int(rng.integers(0, max(1, next_id - 3000)))
        victims = sorted(set(rng.integers(start, start + 3000, size=4).tolist()))
        assert t.delete(f"id IN ({', '.join(map(str, victims))})") == len(set(victims) - deleted)
        deleted.update(victims)
        for r in compact_once(t):
            copied_from_dirty += sum(1 for _, _, action, _ in r.resolved if action == "copy")
            assert sum(run[4] for run in r.mapping) == r.rows_out

        assert_every_value(t, written, deleted, p)
        probe = sorted(set(rng.integers(0, next_id, size=20).tolist()) | set(victims))
        flt = f"id IN ({', '.join(map(str, probe))})"
        want = sorted(set(probe) - deleted)
        assert t.to_arrow(columns=["id"], filter=flt).column("id").to_pylist() == want, f"pass {p}: index lookup"
    assert copied_from_dirty >= PASSES // 2, f"only {copied_from_dirty} clean row groups of sources with deletions were copied"
