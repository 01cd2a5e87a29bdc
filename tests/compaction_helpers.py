"""Tables laid out to exercise every compaction mode, and the checks of a clustered table."""

from __future__ import annotations

import uuid

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

import lamina
from lamina.clustering import Clustering
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


# -- clustering ------------------------------------------------------------------------------------

#: Arrow's equality says NaN != NaN: ``canon`` compares NaN as this value instead.
NAN_STANDIN = -12345.678


def canon(rows: pa.Table) -> pa.Table:
    """Rows sorted by id, NaN replaced by a stand-in so that equal tables compare equal."""
    rows = rows.sort_by("id")
    for i, field in enumerate(rows.schema):
        if pa.types.is_floating(field.type):
            col = rows.column(i)
            rows = rows.set_column(i, field, pc.if_else(pc.is_nan(col), pa.scalar(NAN_STANDIN, field.type), col))
    return rows


def data_of(t: lamina.Table, f: Fragment) -> pa.Table:
    """Every physical row of a fragment's data file, deleted or not."""
    return pq.read_table(pa.BufferReader(t.store.get(f.path)))


def key_values(col: pa.ChunkedArray) -> tuple[list, int, int]:
    """(the non-null, non-NaN values in the zone maps' key domain, nulls, NaN rows), computed here
    (timestamps in ns, strings as UTF-8 bytes)."""
    if pa.types.is_timestamp(col.type):
        ns = {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[col.type.unit]
        return [v * ns for v in col.cast(pa.int64()).to_pylist() if v is not None], col.null_count, 0
    values = col.to_pylist()
    nans = sum(1 for v in values if isinstance(v, float) and v != v)
    keep = [v for v in values if v is not None and not (isinstance(v, float) and v != v)]
    return [v.encode() if isinstance(v, str) else v for v in keep], col.null_count, nans


def assert_zones_bound_rows(t: lamina.Table) -> None:
    """Each fragment's zone maps bound every row of its data file."""
    for f in t.manifest.fragments:
        data = data_of(t, f)
        assert f.zones, f"fragment {f.id} has no zone maps"
        for z in f.zones:
            values, nulls, nans = key_values(data.column(z.column))
            assert nulls <= z.nulls and nans <= z.nans, (f.id, z)
            if values:
                assert z.lo is not None and z.lo <= min(values), (f.id, z.column, z.lo, min(values))
                if z.hi is not None:
                    top = max(values)
                    assert top <= z.hi if z.hi_inclusive else top < z.hi, (f.id, z.column, z.hi, top)


def assert_sorted_along_the_curve(t: lamina.Table) -> dict[str, list[tuple[int, int]]]:
    """Every clustered fragment's rows are in curve order from its ``cluster.lo`` to its ``cluster.hi``, and
    the fragments of a run, in table order, have ascending ranges that meet at most at an end. Returns
    each run's ranges."""
    clustering = Clustering.from_config(t.manifest.config)
    assert clustering is not None
    runs: dict[str, list[tuple[int, int]]] = {}
    for f in t.manifest.fragments:
        if not clustering.clustered(f):
            continue
        order, positions = clustering.sort_order(data_of(t, f))
        assert np.array_equal(order, np.arange(f.rows)), f"fragment {f.id}: rows not in curve order"
        assert (int(positions[0]), int(positions[-1])) == (f.cluster.lo, f.cluster.hi), f.cluster
        runs.setdefault(f.cluster.run, []).append((f.cluster.lo, f.cluster.hi))
    for name, ranges in runs.items():
        for (_, hi), (lo, _) in zip(ranges, ranges[1:]):
            assert hi <= lo, f"run {name}: overlapping ranges {ranges}"
    return runs


# -- schema versions ---------------------------------------------------------------------------------
#: binpack at 8,000 rows: groups [0, 1] (schema v0, large row groups: binary copy in v0) and [2, 3, 4]
#: (v2, v5 and v5's small row groups: hybrid, v2's rows re-encoded into v5); fragment 5 (v5) is at the target.
EVOLVED_OPTIONS = CompactionOptions(target_rows_per_fragment=8000, min_row_group_bytes=8 * 1024, max_concurrency=2)
#: Today's columns of ``evolved_table``, in order.
EVOLVED_COLUMNS = ["id", "a", "key", "x", "d", "b"]


def _evolved_rows(ids: range, schema: pa.Schema, era: str) -> pa.Table:
    """Rows of ``ids`` in ``schema`` (the table's at the time): ``b`` holds ``{era}-b<id>``, ``k``/``key``
    ``k<id % 97>``, ``a`` ``id * 3`` (plus 2**40 once it is an int64), ``x`` a float, ``d`` ``id % 5``."""
    values = {
        "id": pa.array(ids, pa.int64()),
        "a": pa.array([i * 3 + (2**40 if schema.field("a").type == pa.int64() else 0) for i in ids], schema.field("a").type),
        "b": pa.array([f"{era}-b{i}" for i in ids]),
        "k": pa.array([f"k{i % 97}" for i in ids]),
        "key": pa.array([f"k{i % 97}" for i in ids]),
        "x": pa.array([i / 7 for i in ids]),
        "d": pa.array([i % 5 for i in ids], pa.int64()),
    }
    return pa.table({n: values[n] for n in schema.names}).cast(pa.schema([(f.name, f.type) for f in schema]))


def evolved_table(uri: str, opts=None, *, index: bool = True) -> tuple[lamina.Table, dict[int, dict]]:
    """A table whose fragments are written in three of its six schemas, and the model of its rows
    (id -> today's columns, computed here from what each change means):

        v0 (id, a: int32, b, k, x)  fragments 0, 1 (4,000 rows, one row group each); btree on k
        v1 add d (default 7)   v2 rename k -> key
        v2                          fragment 2 (3,000 rows, one row group; 30 rows deleted)
        v3 drop b   v4 a: int32 -> int64   v5 add b (another column: old values never come back)
        v5                          fragments 3 (3,000 rows, one row group), 4 (2,000 rows, row groups of
                                    500; 20 deleted), 5 (8,000 rows: at the target)
    """
    v0 = pa.schema([("id", pa.int64()), ("a", pa.int32()), ("b", pa.string()), ("k", pa.string()), ("x", pa.float64())])
    t = lamina.create_table(uri, v0, storage_options=opts)
    model: dict[int, dict] = {}

    def append(ids: range, era: str, row_group_rows: int) -> None:
        data = _evolved_rows(ids, t.schema, era)
        t.append(data, row_group_rows=row_group_rows)
        for r in data.to_pylist():
            model[r["id"]] = r

    append(range(0, 4000), "v0", 4000)
    append(range(4000, 8000), "v0", 4000)
    if index:
        t.create_index("k", "btree")
    t.add_columns(pa.field("d", pa.int64()), defaults={"d": 7})
    t.rename_column("k", "key")
    for r in model.values():
        r["d"] = 7
        r["key"] = r.pop("k")
    append(range(8000, 11000), "v2", 3000)
    t.delete("id >= 8000 AND id < 8030")
    t.drop_columns("b")
    t.alter_column("a", pa.int64())
    t.add_columns(pa.field("b", pa.string()))
    for i in range(8000, 8030):
        del model[i]
    for r in model.values():
        r["b"] = None  # the re-added b: never the old values
    append(range(11000, 14000), "v5", 3000)
    append(range(14000, 16000), "v5", 500)
    t.delete("id >= 14100 AND id < 14120")
    for i in range(14100, 14120):
        del model[i]
    append(range(16000, 24000), "v5", 4000)
    assert [f.schema_id for f in t.manifest.fragments] == [0, 0, 2, 5, 5, 5], [f.schema_id for f in t.manifest.fragments]
    return t, model


def assert_rows_are_the_model(t: lamina.Table, model: dict[int, dict]) -> None:
    """Every live row, every column, is the model's; no value written in the dropped ``b`` shows."""
    got = t.to_arrow().sort_by("id")
    assert got.column_names == EVOLVED_COLUMNS
    assert got.schema.field("a").type == pa.int64()
    assert got.to_pylist() == [{c: model[i][c] for c in EVOLVED_COLUMNS} for i in sorted(model)]
    assert not any(v.startswith(("v0-", "v2-")) for v in got.column("b").drop_null().to_pylist())
