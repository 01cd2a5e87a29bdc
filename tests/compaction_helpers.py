"""Tables laid out to exercise every compaction mode."""

from __future__ import annotations

import uuid

import pyarrow.parquet as pq

import lamina
from lamina.commit import commit
from lamina.manifest import Fragment, RowGroup
from lamina.planner import CompactionOptions
from lamina.transaction import Append
from tests.lamina.helpers import SCHEMA, rows

#: Groups of two adjacent 4,000-row fragments; row groups of 4,000 rows are "large", of 500 "small".
MIXED_OPTIONS = CompactionOptions(target_rows_per_fragment=8000, min_row_group_bytes=64 * 1024, max_concurrency=2)
MIXED_MODES = [
    ("binary_copy", "all_row_groups_large"),
    ("hybrid", "some_row_groups_small"),
    ("full_rewrite", "has_deletions"),
    ("full_rewrite", "file_version_mismatch"),
]


def append_foreign_file(t: lamina.Table, data) -> None:
    """A fragment whose file was written by plain pyarrow (no Lamina file version): another file version."""
    path = f"data/{uuid.uuid4().hex}.parquet"
    local = t.store.local_path(path)
    target = local or f"/tmp/{uuid.uuid4().hex}.parquet"
    pq.write_table(data, target, row_group_size=4000, compression="zstd")
    if local is None:
        t.store.put_file(path, target)
    meta = pq.read_metadata(target)
    groups = tuple(RowGroup(meta.row_group(i).num_rows, meta.row_group(i).total_byte_size) for i in range(meta.num_row_groups))
    frag = Fragment(-1, path, meta.num_rows, t.store.size(path), groups, "0", schema=data.schema)
    commit(t.store, Append(t.version, [frag]), t.manifest)
    t.reload()


def mixed_table(uri: str, opts=None) -> lamina.Table:
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 4000), row_group_rows=4000)  # group 0: binary copy
    t.append(rows(4000, 4000), row_group_rows=4000)
    t.append(rows(8000, 4000), row_group_rows=4000)  # group 1: hybrid
    t.append(rows(12000, 4000), row_group_rows=500)
    t.append(rows(16000, 4000), row_group_rows=4000)  # group 2: full rewrite, deletions
    t.append(rows(20000, 4000), row_group_rows=4000)
    # Both single-row-group fragments hold deleted rows: nothing of group 2 can be copied.
    t.delete("(id >= 16000 AND id < 16100) OR (id >= 20000 AND id < 20010)")
    append_foreign_file(t, rows(24000, 4000))  # group 3: full rewrite, other file version
    t.append(rows(28000, 4000), row_group_rows=4000)
    return t


#: One group of everything below: 4,000-row row groups are large, 500-row ones small.
DELETION_AWARE_OPTIONS = CompactionOptions(target_rows_per_fragment=60_000, min_row_group_bytes=64 * 1024, max_concurrency=2)
#: Source (fragment position, row group) of each copied output row group, in output order.
DELETION_AWARE_COPIES = [(0, 0), (0, 1), (0, 2), (1, 0), (1, 2), (4, 0), (4, 1)]


def deletion_aware_table(uri: str, opts=None) -> lamina.Table:
    """Large clean row groups next to small fragments and large fragments with a few deleted rows
    in some of their row groups: one hybrid group whose clean row groups are all copied."""
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    t.append(rows(0, 12000), row_group_rows=4000)  # 0: clean, copied
    t.append(rows(12000, 12000), row_group_rows=4000)  # 1: deletions in row group 1 only
    t.append(rows(24000, 1000), row_group_rows=500)  # 2: small, a few deletions
    t.append(rows(25000, 2000), row_group_rows=500)  # 3: small
    t.append(rows(27000, 12000), row_group_rows=4000)  # 4: deletions in row group 2 only (its last row too)
    t.delete("(id >= 16000 AND id < 16006) OR id IN (24001, 24500, 24999, 35000, 38998, 38999)")
    return t
