"""Table.update: values and expressions (arithmetic over the row as it was), the errors raised before anything
is written or committed, time travel and indices after an update, and updates racing deletes, appends and updates."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import CommitConflict, InvalidArgument, InvalidFilter, SchemaMismatch
from lamina.records import MergeRecord
from tests.lamina.test_merge import SCHEMA, assert_no_stray_data_files, canon, make_target, table_rows


def updated(target: list[dict], match, change) -> list[dict]:
    return [change(dict(r)) if match(r) else r for r in target]


def test_values_and_expressions(table_location):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    before = t.version
    n = t.update(
        "id >= 10 AND id < 30",
        values={"note": "set", "region": None},
        expressions={"qty": "qty * 2 + 1", "price": "-(price - 0.5) / 2"},
    )
    match = lambda r: r["id"] is not None and 10 <= r["id"] < 30  # noqa: E731

    def change(r):
        return {**r, "note": "set", "region": None, "qty": r["qty"] * 2 + 1, "price": -(r["price"] - 0.5) / 2}

    assert n == sum(map(match, target)) == 19  # 17 was deleted
    assert t.version == before + 1
    assert table_rows(t) == canon(updated(target, match, change))
    record = t.manifest.record
    assert isinstance(record, MergeRecord) and record.kind == "update" and record.predicate == "id >= 10 AND id < 30"
    assert (record.updated, record.inserted, record.deleted, record.on) == (19, 0, 0, ())
    assert table_rows(t.checkout(before)) == canon(target)  # time travel: the rows before the update


def test_every_expression_reads_the_row_as_it_was(local_table_uri):
    t, target = make_target(local_table_uri)
    t.update("id = 12", expressions={"qty": "qty + 100", "price": "qty * 2"})
    assert t.to_arrow(filter="id = 12").select(["qty", "price"]).to_pylist() == [{"qty": 112, "price": 24.0}]


def test_integer_arithmetic_and_literals(local_table_uri):
    t, _ = make_target(local_table_uri)
    t.update("id IN (7, 8)", expressions={"qty": "(id - 1) / 2", "note": "'n'", "price": "7 / 2"})
    got = t.to_arrow(filter="id IN (7, 8)").select(["qty", "note", "price"]).to_pylist()
    assert got == [{"qty": 3, "note": "n", "price": 3.0}, {"qty": 3, "note": "n", "price": 3.0}]  # integer division


def test_no_matching_row_commits_nothing(table_location):
    uri, opts = table_location
    t, _ = make_target(uri, opts)
    version, files = t.version, {o.path for o in t.store.list("")}
    assert t.update("id > 10000", values={"qty": 1}) == 0
    assert t.update("id = 17", values={"qty": 1}) == 0  # a deleted row
    assert lamina.open_table(uri, storage_options=opts).version == version
    assert {o.path for o in t.store.list("")} == files


@pytest.mark.parametrize(
    "expression,message",
    [
        ("qty +", "expected a value at the end"),
        ("qty * region", "does not apply to this table"),
        ("nope + 1", "names column 'nope'"),
        ("", "empty expression"),
        ("(qty + 1", r"expected \)"),
        ("qty = 1", "unexpected '='"),
        ("region", "gives string values, which column 'qty' \\(int32\\) cannot hold"),
        ("*qty", "expected a column or a value"),
        ("(" * 101 + "qty" + ")" * 101, "nests more than 100 deep"),
        (" + ".join(["qty"] * 1001), "more than 1,000 operands"),
    ],
)
def test_a_bad_expression_is_refused_before_anything_is_written(local_table_uri, expression, message):
    t, _ = make_target(local_table_uri)
    version, files = t.version, {o.path for o in t.store.list("")}
    with pytest.raises(InvalidFilter, match=message):
        t.update("id < 50", expressions={"qty": expression})
    assert t.version == version and {o.path for o in t.store.list("")} == files


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({}, InvalidArgument, "pass values"),
        ({"values": {"nope": 1}}, InvalidArgument, r"unknown column\(s\) \['nope'\]"),
        ({"values": {"qty": 1}, "expressions": {"qty": "qty"}}, InvalidArgument, "both a value and an expression"),
        ({"values": {"qty": "abc"}}, InvalidArgument, "value 'abc' does not fit column 'qty'"),
        ({"values": {"qty": 2**40}}, InvalidArgument, "does not fit column 'qty'"),
        ({"expressions": {"qty": "qty * 100000000"}}, InvalidArgument, "for column 'qty' \\(int32\\) fails on a matching row"),
        ({"expressions": {"qty": "qty * 1.5"}}, InvalidArgument, "fails on a matching row"),
        ({"expressions": {"price": "price / 0"}}, InvalidArgument, "divide by zero"),
    ],
)
def test_values_that_do_not_fit_commit_nothing(table_location, kwargs, error, message):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    version = t.version
    with pytest.raises(error, match=message):
        t.update("id >= 1 AND id < 150", **kwargs)
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.version == version and table_rows(latest) == canon(target)
    assert_no_stray_data_files(latest)


def test_null_into_a_column_that_is_not_nullable(local_table_uri):
    schema = pa.schema([pa.field("id", pa.int64(), nullable=False), ("qty", pa.int32())])
    t = lamina.create_table(local_table_uri, schema)
    t.append(pa.table({"id": [1, 2], "qty": [1, None]}, schema=schema))
    with pytest.raises(SchemaMismatch, match="'id' is not nullable"):
        t.update("id = 1", values={"id": None})
    with pytest.raises(SchemaMismatch, match="gives NULL for column 'id'"):
        t.update("id = 2", expressions={"id": "qty + 1"})
    assert t.update("id = 1", expressions={"id": "qty + 10"}) == 1
    assert sorted(t.to_arrow(columns=["id"]).column("id").to_pylist()) == [2, 11]


def test_indices_are_exact_after_an_update(local_table_uri):
    t, _ = make_target(local_table_uri, index="btree")
    t.create_index("region", "bitmap")
    t.update("id >= 100 AND id < 120", expressions={"id": "id + 1000"}, values={"region": "moved"})
    for flt in ("id = 105", "id = 1105", "id >= 1100", "region = 'moved'", "region = 'eu'", "id IN (3, 1110, 150)"):
        assert canon(t.to_arrow(filter=flt).to_pylist()) == canon(t.to_arrow(filter=flt, use_index=False).to_pylist()), flt
    assert t.count_rows("id >= 1100 AND id < 1120") == 20 and t.count_rows("id >= 100 AND id < 120") == 0


def test_an_update_over_a_delete_of_a_row_it_updates_conflicts(table_location):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    stale = t.checkout(t.version)
    t.delete("id = 12")
    with pytest.raises(CommitConflict, match=r"merge .* conflicts with the delete .*deleted a row this update updates"):
        stale.checkout(stale.version).update("id >= 10 AND id < 15", values={"qty": 0})
    latest = lamina.open_table(uri, storage_options=opts)
    assert table_rows(latest) == canon([r for r in target if r["id"] != 12])
    assert_no_stray_data_files(latest)
    assert stale.update("id >= 20 AND id < 25", values={"qty": 0}) == 5  # rows the delete did not touch: rebased
    assert lamina.open_table(uri, storage_options=opts).count_rows("id >= 20 AND id < 25 AND qty = 0") == 5


def test_two_updates_of_one_row_conflict(local_table_uri):
    t, _ = make_target(local_table_uri)
    stale = t.checkout(t.version)
    t.update("id = 12", values={"note": "first"})
    with pytest.raises(CommitConflict, match="deleted a row this update updates"):
        stale.update("id IN (12, 13)", values={"note": "second"})
    got = lamina.open_table(local_table_uri).to_arrow(filter="id IN (12, 13)").to_pylist()
    assert {r["id"]: r["note"] for r in got} == {12: "first", 13: None}


def test_an_update_over_an_append_leaves_the_new_rows_as_they_are(local_table_uri):
    t, _ = make_target(local_table_uri)
    stale = t.checkout(t.version)
    t.append(pa.table({"id": [5000], "region": ["eu"], "qty": [1], "price": [1.0], "note": [None]}, schema=SCHEMA))
    assert stale.update("region = 'eu'", values={"note": "eu"}) == 51  # evaluated on the version it read
    latest = lamina.open_table(local_table_uri)
    assert latest.to_arrow(filter="id = 5000").column("note").to_pylist() == [None]
    assert latest.count_rows("note = 'eu'") == 51
