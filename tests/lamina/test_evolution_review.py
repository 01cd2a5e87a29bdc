"""Review of schema evolution (issue 34): reproducers of the problems found, each a minimal table.

The suite's small manifest layout (tests/conftest.py) keeps the fragments here in manifest segments of 4.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json

import pyarrow as pa
import pytest

import lamina
from lamina import evolution
from lamina.cache import clear_caches
from lamina.commit import commit
from lamina.datafile import WriteOptions, write_fragments
from lamina.errors import CorruptFile
from lamina.manifest import manifest_path
from lamina.manifest.codec import _canonical, decode_manifest
from lamina.store.scheduler import io_stats
from lamina.transaction import Append

IDX = pa.schema([("id", pa.int64()), ("x", pa.int32())])


def _rows(lo: int, hi: int) -> pa.Table:
    return pa.table({"id": pa.array(range(lo, hi), pa.int64()), "x": pa.array(range(lo, hi), pa.int32())})


# -- alter_column to a finer time unit: not every old value is a new one ----------------------------
@pytest.mark.parametrize(
    "old_type, value",
    [(pa.date32(), dt.date(3000, 1, 1)), (pa.timestamp("s"), dt.datetime(3000, 1, 1))],
    ids=["date32", "timestamp_s"],
)
def test_a_widening_to_nanoseconds_keeps_the_table_readable(local_table_uri, old_type, value):
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("d", old_type)]))
    t.append(pa.table({"id": pa.array([1], pa.int64()), "d": pa.array([value], old_type)}))
    version = t.version
    for unit in ("us", "ns"):  # their ranges cannot hold every old value: refused, nothing committed
        with pytest.raises(lamina.errors.SchemaMismatch, match="narrower range"):
            t.alter_column("d", pa.timestamp(unit))
    assert t.version == version and t.to_arrow().column("d").to_pylist() == [value]
    if old_type == pa.date32():  # seconds and milliseconds hold every date32: allowed, exact
        t.alter_column("d", pa.timestamp("ms"))
        assert t.to_arrow().column("d").to_pylist() == [dt.datetime(3000, 1, 1)]


# -- an overwrite racing a schema change ------------------------------------------------------------
def test_an_overwrite_racing_a_change_right_after_the_create_rebases(local_table_uri):
    """The matrix says overwrite rebases over alter_schema; it does when the change followed a write (the
    old schema stays registered), but a change right after the create or another change does not register
    the schema the overwrite's files are written in, and an overwrite never adopts it: SchemaMismatch."""
    t = lamina.create_table(local_table_uri, IDX)
    stale = lamina.open_table(t.uri)
    t.add_columns(pa.field("z", pa.int8()))
    stale.overwrite(_rows(0, 3))
    now = lamina.open_table(t.uri)
    assert now.schema.names == ["id", "x", "z"]
    assert now.to_arrow().to_pylist() == [{"id": i, "x": i, "z": None} for i in range(3)]


def test_an_overwrite_racing_two_changes_rebases(local_table_uri):
    t = lamina.create_table(local_table_uri, IDX)
    t.append(_rows(0, 3))
    t.add_columns(pa.field("z", pa.int8()))
    stale = lamina.open_table(t.uri)
    t.rename_column("x", "y")  # a change after a change: the schema stale writes in is not registered
    written = pa.table({"id": pa.array([7], pa.int64()), "x": pa.array([70], pa.int32()), "z": pa.array([1], pa.int8())})
    stale.overwrite(written)
    assert lamina.open_table(t.uri).to_arrow().to_pylist() == [{"id": 7, "y": 70, "z": 1}]


def test_an_overwrite_racing_an_overwrite_that_reset_field_ids_is_still_refused(local_table_uri):
    """Adopting the stale overwrite's schema is safe only while field ids are the table's: here another
    overwrite started them afresh (positional ids for a new schema), and a change numbered from there."""
    t = lamina.create_table(local_table_uri, IDX)
    t.append(_rows(0, 3))
    t.add_columns(pa.field("c", pa.int16()))  # ids: id 0, x 1, c 2
    stale = lamina.open_table(t.uri)
    other = pa.schema([("id", pa.int64()), ("q", pa.string())])
    t.overwrite(pa.table({"id": pa.array([1], pa.int64()), "q": ["a"]}), schema=other)
    t.add_columns(pa.field("r", pa.int16()))  # ids: id 0, q 1, r 2
    old = pa.table({"id": pa.array([5], pa.int64()), "x": pa.array([50], pa.int32()), "c": pa.array([9], pa.int16())})
    with pytest.raises(lamina.errors.SchemaMismatch):
        stale.overwrite(old)  # adopted, x would read as q and c as r


# -- O(fragments) added to commits that touch a few ------------------------------------------------
def _many_fragments(uri: str, n: int) -> lamina.Table:
    t = lamina.create_table(uri, IDX)
    one_row_files = WriteOptions(max_rows_per_file=1)
    frags = write_fragments(t.store, t.schema, iter(_rows(0, n).to_batches(max_chunksize=1)), one_row_files)
    commit(t.store, Append(t.version, frags), t.manifest)
    t.reload()
    return t


def test_a_delete_on_a_changed_table_reads_no_more_manifest_segments(local_table_uri):
    """A delete reads the manifest segments its filter needs; on a table whose schema changed (an earlier
    schema registered) its commit walked every fragment, looking for schemas to forget, although it removed
    no fragment of an earlier schema: every manifest segment read (O(fragments) per delete, WAL flush and
    merge; a table with indices pays that pass anyway)."""
    t = _many_fragments(local_table_uri, 200)
    t.add_columns(pa.field("z", pa.int8()))
    z = pa.array([None, None], pa.int8())
    t.append(pa.table({"id": pa.array([1000, 1001], pa.int64()), "x": pa.array([0, 0], pa.int32()), "z": z}))
    t.append(pa.table({"id": pa.array([2000], pa.int64()), "x": pa.array([0], pa.int32()), "z": z[:1]}))
    assert t.manifest.schemas and len(t.manifest.segments) > 20
    for where in ("id = 1000", "id = 2000"):  # a row of a fragment; a whole fragment, in today's schema
        clear_caches()
        t = lamina.open_table(t.uri)
        io_stats(reset=True)
        assert t.delete(where) == 1
        assert io_stats()["local"]["GET"] < 10, where
    t.delete("id < 199")  # every fragment of the earlier schema but one: it stays registered
    assert t.manifest.schemas
    t.delete("id = 199")  # its last: forgotten
    assert t.manifest.schemas == {} and t.to_arrow().to_pylist() == [{"id": 1001, "x": 0, "z": None}]


# -- a root's schema registry, as decoded ---------------------------------------------------------
def _evolved_root(uri: str) -> tuple[lamina.Table, dict]:
    t = lamina.create_table(uri, IDX)
    t.append(_rows(0, 1))
    t.rename_column("x", "y")  # schema 1 today, 0 earlier (the first fragment's), next field id 2
    root = json.loads(t.store.get(manifest_path(t.version)))
    assert root["schema_id"] == 1 and [s["id"] for s in root["schemas"]] == [0] and root["next_field_id"] == 2
    return t, root


def _decode(root: dict, edit) -> None:
    body = copy.deepcopy(root)
    body.pop("checksum")
    edit(body)
    body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    decode_manifest(json.dumps(body).encode(), "v")


def _negative(b: dict) -> None:
    b["schemas"][0]["id"] = -3
    b["fragments"][0]["schema_id"] = -3


@pytest.mark.parametrize(
    "edit",
    [
        _negative,
        lambda b: b["schemas"].append(dict(b["schemas"][0])),  # one id listed twice
        lambda b: b.update(schema_id="1"),
        lambda b: b.update(schema_id=1.5),
        # a column added next would get id 1, y's: it would read y's values
        lambda b: b.update(next_field_id=1),
    ],
    ids=["negative", "twice", "text", "float", "next_field_id_in_use"],
)
def test_a_malformed_schema_registry_is_corrupt(local_table_uri, edit):
    _, root = _evolved_root(local_table_uri)
    _decode(root, lambda b: None)  # as written: fine
    with pytest.raises(CorruptFile):
        _decode(root, edit)


def test_a_column_added_with_a_type_copied_from_a_schema_gets_new_ids_at_every_depth(local_table_uri):
    """A struct type taken from the table's schema (or another table's) carries its fields' ids; add_columns
    kept them: one id given twice (``s2.a`` = ``s.a``), or one above ``next_field_id`` (given again later)."""
    st = pa.struct([("a", pa.int8())])
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("s", st)]))
    t.append(pa.table({"id": pa.array([1], pa.int64()), "s": pa.array([{"a": 1}], st)}))
    t.add_columns(pa.field("s2", t.schema.field("s").type))
    foreign = pa.struct([pa.field("b", pa.int8(), metadata={b"lamina:field_id": b"50"})])
    t.add_columns(pa.field("s3", foreign))
    ids = [evolution.field_id(f) for _, f in evolution._walk(t.schema)]
    assert len(set(ids)) == len(ids) and max(ids) < t.manifest.next_field_id
    t.append(pa.table({"id": pa.array([2], pa.int64()), "s": pa.array([{"a": 2}], st), "s2": pa.array([{"a": 3}], st),
                       "s3": pa.array([{"b": 4}], pa.struct([("b", pa.int8())]))}))  # fmt: skip
    assert lamina.open_table(t.uri).to_arrow().to_pylist() == [
        {"id": 1, "s": {"a": 1}, "s2": None, "s3": None},
        {"id": 2, "s": {"a": 2}, "s2": {"a": 3}, "s3": {"b": 4}},
    ]


def test_counting_rows_of_old_files_that_every_row_matches(local_table_uri):
    """A count reads no column; an old file whose zone maps prove the filter for every row is counted
    without the filter: its rows must still be counted (a table built from no column had none)."""
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("w", pa.int8())]))
    t.append(pa.table({"id": pa.array([1, 2], pa.int64()), "w": pa.array([1, 2], pa.int8())}))
    t.alter_column("w", pa.int16())
    t.append(pa.table({"id": pa.array([3], pa.int64()), "w": pa.array([3000], pa.int16())}))
    t.alter_column("w", pa.int64())
    assert t.count_rows("w >= 3000") == 1 and t.count_rows("w >= 1") == 3
    assert t.scanner(columns=[], filter="w < 3").count_rows() == 2
