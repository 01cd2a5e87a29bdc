"""Tables laid out to exercise every compaction mode."""

from __future__ import annotations

import uuid

import pyarrow.parquet as pq

import lamina
from lamina.commit import commit
from lamina.manifest import Fragment, RowGroup
from lamina.transaction import Append
from planner import CompactionOptions
from tests.lamina.helpers import SCHEMA, rows

#: Groups of two adjacent 4,000-row fragments; row groups of 4,000 rows are "large", of 500 "small".
MIXED_OPTIONS = CompactionOptions(target_rows_per_fragment=8000, min_row_group_bytes=64 * 1024, max_concurrency=2)
MIXED_MODES = [("binary_copy", "all_row_groups_large"), ("hybrid", "some_row_groups_small"),
               ("full_rewrite", "has_deletions"), ("full_rewrite", "file_version_mismatch")]


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
    t.append(rows(0, 4000), row_group_rows=4000)       # group 0: binary copy
    t.append(rows(4000, 4000), row_group_rows=4000)
    t.append(rows(8000, 4000), row_group_rows=4000)    # group 1: hybrid
    t.append(rows(12000, 4000), row_group_rows=500)
    t.append(rows(16000, 4000), row_group_rows=4000)   # group 2: full rewrite, deletions
    t.append(rows(20000, 4000), row_group_rows=4000)
    t.delete("id >= 16000 AND id < 16100")
    append_foreign_file(t, rows(24000, 4000))          # group 3: full rewrite, other file version
    t.append(rows(28000, 4000), row_group_rows=4000)
    return t
