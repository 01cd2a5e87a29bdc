"""Schema evolution as metadata (lamina.evolution, docs/FORMAT.md §2.4) against a model of the rows in
plain Python: every change is one commit writing no data file, and reads, filters (zone maps, row-group
statistics, manifest-segment zone maps), ``take``, indices, time travel, restore and tags see today's
schema on files written in earlier ones; a name dropped (or renamed away) and used again never shows the
old column's values. The suite's small manifest layout (tests/conftest.py) puts the fragments here in
manifest segments of 4."""

from __future__ import annotations

import datetime as dt
import json

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina import evolution
from lamina.cache import clear_caches
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.manifest import manifest_path
from lamina.manifest.codec import EVOLVED_FORMAT_VERSION
from tests.lamina.helpers import as_format_1

BASE = pa.schema(
    [
        ("id", pa.int64()),
        ("x", pa.int32()),
        ("name", pa.string()),
        ("w", pa.int8()),
        ("d", pa.date32()),
        ("st", pa.struct([("a", pa.int8()), ("b", pa.string())])),
        ("doc", pa.string()),
    ]
)
WORDS = "alpha beta gamma delta epsilon zeta eta theta".split()
EPOCH = dt.date(1970, 1, 1)


def _base_row(i: int) -> dict:
    return {
        "id": i,
        "x": None if i % 11 == 0 else i % 13,
        "name": f"n{i % 5}",
        "w": (i % 200) - 100,
        "d": EPOCH + dt.timedelta(days=i),
        "st": None if i % 9 == 0 else {"a": i % 7, "b": None if i % 4 == 0 else f"b{i % 3}"},
        "doc": " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 2 + i % 4)),
    }


def _arrow(rows: list[dict], schema: pa.Schema) -> pa.Table:
    """``rows`` in ``schema`` (ids and defaults left out: the data a user appends)."""
    plain = pa.schema([pa.field(f.name, _plain(f.type), f.nullable) for f in schema])
    return pa.Table.from_pylist(rows, schema=plain)


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _plain(f.type), f.nullable) for f in t])
    return t


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: r["id"])


def _read(table: pa.Table) -> list[dict]:
    return _sorted(table.to_pylist())


def _objects(t: lamina.Table) -> set[str]:
    """Every object under the table's data, deletion and index directories."""
    return {o.path for d in ("data/", "_deletions/", "_indices/") for o in t.store.list(d)}


def _change(t: lamina.Table, do) -> int:
    """Runs the schema change ``do(t)``: one new version, recorded as alter_schema, no data, deletion or
    index file written. Returns the version before it."""
    before, files = t.version, _objects(t)
    assert do(t) == before + 1 == t.version
    assert t.manifest.record.operation == "alter_schema"
    assert _objects(t) == files, "a schema change wrote a file"
    return before


def _check(t: lamina.Table, model: list[dict], filters: dict[str, object]) -> None:
    """Every read of ``t`` against ``model`` (the live rows, today's columns): the whole table, streaming
    batches, ``take``, pandas, and each filter (with and without indices, counted) against its Python
    predicate."""
    expected = _sorted(model)
    assert t.schema.names == list(expected[0]) if expected else True
    assert _read(t.to_arrow()) == expected
    assert t.count_rows() == len(expected)
    batches = list(t.scanner(batch_size=7).to_batches())
    assert _read(pa.Table.from_batches(batches, schema=t.scanner().schema)) == expected
    assert max(b.num_rows for b in batches) <= 7
    frame = t.to_pandas()
    assert sorted(frame["id"].tolist()) == [r["id"] for r in expected]
    addressed = t.to_arrow(with_row_address=True)
    addrs = addressed.column("_rowaddr").to_numpy()
    order = np.random.default_rng(len(model)).permutation(len(addrs))[: max(1, len(addrs) // 3)]
    taken = t.take(addrs[order])
    assert taken.to_pylist() == addressed.drop_columns(["_rowaddr"]).take(pa.array(order)).to_pylist()
    last = t.schema.names[-1]
    assert t.take(addrs[order], columns=[last]).column(last).to_pylist() == taken.column(last).to_pylist()
    for text, keep in filters.items():
        want = [r for r in expected if keep(r)]
        assert _read(t.to_arrow(filter=text)) == want, text
        assert _read(t.to_arrow(filter=text, use_index=False)) == want, f"{text} (use_index=False)"
        assert t.count_rows(text) == len(want), text
        assert t.explain(text)  # planning over every schema's fragments, statistics included


def _eq(col: str, v) -> object:
    return lambda r: r[col] is not None and r[col] == v


def _null(col: str) -> object:
    return lambda r: r[col] is None


@pytest.fixture
def grown(local_table_uri):
    """A table of 12 fragments of 10 rows in BASE (4 manifest segments), a few rows deleted, and its model."""
    t = lamina.create_table(local_table_uri, BASE, primary_key="id")
    model = [_base_row(i) for i in range(120)]
    for k in range(12):
        t.append(_arrow(model[10 * k : 10 * k + 10], BASE))
    t.delete("id IN (3, 47, 118)")
    model = [r for r in model if r["id"] not in (3, 47, 118)]
    assert t.manifest.segments, "the table keeps its fragments in manifest segments"
    return t, model


# -- the changes, one at a time ------------------------------------------------------------------
def test_each_change_is_one_version_writing_no_file_and_reads_as_the_model(grown):
    t, model = grown
    _check(t, model, {"x = 5": _eq("x", 5), "x IS NULL": _null("x")})

    # rename, then the old name used again by a new column
    _change(t, lambda t: t.rename_column("name", "label"))
    model = [{**{k if k != "name" else "label": v for k, v in r.items()}} for r in model]
    _change(t, lambda t: t.add_columns(pa.field("name", pa.string())))
    model = [{**r, "name": None} for r in model]
    t.append(_arrow([{**_base_row(i), "label": f"n{i % 5}", "name": f"new{i % 2}"} for i in range(200, 210)], t.schema))
    model += [
        {**{k if k != "name" else "label": v for k, v in _base_row(i).items()}, "name": f"new{i % 2}"} for i in range(200, 210)
    ]
    _check(
        t,
        model,
        {
            "label = 'n2'": _eq("label", "n2"),
            "name IS NULL": _null("name"),
            "name = 'n2'": _eq("name", "n2"),  # the old column's values under that name: never
            "name = 'new1'": _eq("name", "new1"),
            "name IS NOT NULL AND label = 'n1'": lambda r: r["name"] is not None and r["label"] == "n1",
        },
    )

    # a column dropped and added again under its name: another column
    _change(t, lambda t: t.drop_columns("x"))
    model = [{k: v for k, v in r.items() if k != "x"} for r in model]
    _change(t, lambda t: t.add_columns(pa.field("x", pa.int32())))
    model = [{**r, "x": None} for r in model]
    fresh = [{**r, "id": r["id"] + 1000, "x": 1000 + r["id"] % 3} for r in model[:15]]
    t.append(_arrow(fresh, t.schema))
    model += fresh
    _check(
        t,
        model,
        {
            "x IS NULL": _null("x"),
            "x = 5": _eq("x", 5),  # an old value: no row
            "x < 13": lambda r: r["x"] is not None and r["x"] < 13,
            "x = 1001": _eq("x", 1001),
            "x IS NULL OR x = 1002": lambda r: r["x"] is None or r["x"] == 1002,
            "NOT (x IS NOT NULL)": _null("x"),
        },
    )

    # widenings: int8 -> int16 -> int64, date32 -> timestamp
    _change(t, lambda t: t.alter_column("w", pa.int16()))
    t.append(_arrow([{**model[0], "id": 5000, "w": 3000}], t.schema))
    model.append({**model[0], "id": 5000, "w": 3000})
    _change(t, lambda t: t.alter_column("w", pa.int64()))
    _change(t, lambda t: t.alter_column("d", pa.timestamp("ms")))
    model = [{**r, "d": dt.datetime.combine(r["d"], dt.time())} for r in model]
    _check(
        t,
        model,
        {
            "w = -90": _eq("w", -90),
            "w >= 3000": lambda r: r["w"] >= 3000,
            "w < -95 OR w = 3000": lambda r: r["w"] < -95 or r["w"] == 3000,
            "d >= TIMESTAMP '1970-03-01T00:00:00'": lambda r: r["d"] >= dt.datetime(1970, 3, 1),
            "d = TIMESTAMP '1970-01-11T00:00:00'": lambda r: r["d"] == dt.datetime(1970, 1, 11),
        },
    )

    # nested fields by dotted path
    _change(t, lambda t: t.rename_column("st.a", "aa"))
    _change(t, lambda t: t.alter_column("st.aa", pa.int32()))
    _change(t, lambda t: t.drop_columns("st.b"))
    model = [{**r, "st": None if r["st"] is None else {"aa": r["st"]["a"]}} for r in model]
    assert t.schema.field("st").type == pa.struct([("aa", pa.int32())])
    _check(t, model, {"st.aa = 3": lambda r: r["st"] is not None and r["st"]["aa"] == 3, "st IS NULL": _null("st")})

    # defaults: rows written before read them; a non-nullable column needs one
    _change(t, lambda t: t.add_columns([pa.field("score", pa.float64()), pa.field("tag", pa.string())], defaults={"score": 1.5}))
    _change(t, lambda t: t.add_columns(pa.field("flag", pa.bool_(), nullable=False), defaults={"flag": True}))
    model = [{**r, "score": 1.5, "tag": None, "flag": True} for r in model]
    late = {**model[1], "id": 7000, "score": None, "tag": "t", "flag": False}
    t.append(_arrow([late], t.schema))
    model.append(late)
    assert not t.schema.field("flag").nullable
    _check(
        t,
        model,
        {
            "score = 1.5": _eq("score", 1.5),
            "score IS NULL": _null("score"),
            "flag = FALSE": _eq("flag", False),
            "flag = TRUE AND x IS NULL": lambda r: r["flag"] is True and r["x"] is None,
            "tag IS NULL": _null("tag"),
        },
    )
    t.delete("score = 1.5 AND id < 20")  # deletes through the mapping
    model = [r for r in model if not (r["score"] == 1.5 and r["id"] < 20)]
    _check(t, model, {"id < 30": lambda r: r["id"] < 30})
    # every read above went through files of several schemas and manifest segments of them
    assert len({f.schema_id for f in t.manifest.fragments}) > 3


def test_a_dropped_columns_name_reused_holds_no_old_values_even_where_pruning_would_show(local_table_uri):
    """Old fragments' zone maps (in their manifest entries and their segments') and Parquet statistics
    keep the old column under the name: ``x IS NULL`` must not be pruned by them, nor ``x = <old>`` kept."""
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("x", pa.int64())]))
    for k in range(16):  # x never null, 0..159: every old fragment's stats say "no nulls"
        t.append(
            pa.table(
                {"id": pa.array(range(10 * k, 10 * k + 10), pa.int64()), "x": pa.array(range(10 * k, 10 * k + 10), pa.int64())}
            )
        )
    assert len(t.manifest.segments) >= 3
    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int64()))
    t.append(pa.table({"id": pa.array([500, 501], pa.int64()), "x": pa.array([7, None], pa.int64())}))
    nulls = t.to_arrow(filter="x IS NULL")
    assert sorted(nulls.column("id").to_pylist()) == list(range(160)) + [501]
    assert t.to_arrow(filter="x = 7").column("id").to_pylist() == [500]
    assert t.to_arrow(filter="x = 8").num_rows == 0  # 8 is an old value
    assert t.count_rows("x > 100") == 0 and t.count_rows("x IS NOT NULL") == 1
    # the new column's own zone maps still prune: fragments of the old column can't answer x = 7 ...
    scan = t.scanner(filter="x = 7")
    assert scan.to_table().num_rows == 1
    # ... but the new fragment's zone maps rule out x > 100 without opening it
    s = t.scanner(filter="x > 100")
    s.to_table()
    assert s.stats.fragments_pruned >= 1
    # an index on the new column agrees
    t.create_index("x", "btree")
    assert sorted(t.to_arrow(filter="x IS NULL").column("id").to_pylist()) == list(range(160)) + [501]
    assert t.to_arrow(filter="x = 8").num_rows == 0 and t.to_arrow(filter="x = 7").column("id").to_pylist() == [500]


def test_a_name_renamed_away_and_reused_is_the_new_column(local_table_uri):
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("s", pa.string())]))
    for k in range(10):
        t.append(pa.table({"id": pa.array(range(10 * k, 10 * k + 10), pa.int64()), "s": [f"v{k}"] * 10}))
    t.rename_column("s", "old")
    t.add_columns(pa.field("s", pa.string()))
    t.append(pa.table({"id": pa.array([100], pa.int64()), "old": ["w"], "s": ["v3"]}))
    assert t.to_arrow(filter="s = 'v3'").column("id").to_pylist() == [100]
    assert t.count_rows("s IS NULL") == 100
    assert sorted(t.to_arrow(filter="old = 'v3'").column("id").to_pylist()) == list(range(30, 40))
    # a swap of two names through a third
    t.rename_column("s", "tmp")
    t.rename_column("old", "s")
    t.rename_column("tmp", "old")
    assert sorted(t.to_arrow(filter="s = 'v3'").column("id").to_pylist()) == list(range(30, 40))
    assert t.to_arrow(filter="old = 'v3'").column("id").to_pylist() == [100]
    assert t.count_rows("old IS NULL") == 100


def test_a_column_added_with_a_default_reads_it_on_old_rows_only(local_table_uri):
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64())]))
    for k in range(6):
        t.append(pa.table({"id": pa.array(range(10 * k, 10 * k + 10), pa.int64())}))
    t.add_columns(
        [pa.field("n", pa.int32(), nullable=False), pa.field("s", pa.string()), pa.field("day", pa.date32())],
        defaults={"n": -1, "s": "none", "day": dt.date(2020, 1, 2)},
    )
    t.append(
        pa.table(
            {
                "id": pa.array([100], pa.int64()),
                "n": pa.array([5], pa.int32()),
                "s": pa.array([None], pa.string()),
                "day": pa.array([None], pa.date32()),
            }
        )
    )
    assert t.count_rows("n = -1") == 60 and t.count_rows("s = 'none'") == 60 and t.count_rows("s IS NULL") == 1
    assert t.count_rows("day = DATE '2020-01-02'") == 60
    assert t.take([t.to_arrow(with_row_address=True).column("_rowaddr")[0].as_py()], columns=["n", "s"]).to_pylist() == [
        {"n": -1, "s": "none"}
    ]
    assert t.schema.field("n").type == pa.int32() and evolution.default_of(t.schema.field("n")).as_py() == -1


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "do, error, words",
    [
        (lambda t: t.drop_columns("nope"), InvalidArgument, ["no column 'nope'", "columns: id, x, name"]),
        (lambda t: t.rename_column("nope", "y"), InvalidArgument, ["no column 'nope'"]),
        (lambda t: t.alter_column("st.zz", pa.int64()), InvalidArgument, ["no column 'zz'", "in 'st'"]),
        (lambda t: t.rename_column("name.a", "b"), InvalidArgument, ["'name' is a string, not a struct"]),
        (lambda t: t.alter_column("x", pa.int16()), SchemaMismatch, ["from int32 to int16", "widenings"]),
        (lambda t: t.alter_column("name", pa.int64()), SchemaMismatch, ["from string to int64"]),
        (lambda t: t.alter_column("d", pa.timestamp("us", tz="UTC")), SchemaMismatch, ["date32[day] to timestamp"]),
        (lambda t: t.alter_column("x", "int64"), InvalidArgument, ["pyarrow DataType"]),
        (lambda t: t.drop_columns("id"), InvalidArgument, ["'id' cannot be dropped", "primary key"]),
        (lambda t: t.rename_column("id", "key"), InvalidArgument, ["'id' cannot be renamed", "primary key"]),
        (lambda t: t.alter_column("id", pa.float64()), InvalidArgument, ["'id' cannot be altered", "primary key"]),
        (lambda t: t.drop_columns("w"), InvalidArgument, ["'w' cannot be dropped", "clustering key", "set_clustering(None)"]),
        (lambda t: t.rename_column("w", "ww"), InvalidArgument, ["'w' cannot be renamed", "clustering key"]),
        (lambda t: t.add_columns(pa.field("x", pa.int64())), InvalidArgument, ["'x'", "already"]),
        (lambda t: t.add_columns([pa.field("y", pa.int8()), pa.field("y", pa.int8())]), InvalidArgument, ["'y'"]),
        (lambda t: t.rename_column("x", "name"), InvalidArgument, ["'name'", "already"]),
        (lambda t: t.rename_column("st.a", "b"), InvalidArgument, ["duplicate field names", "'st'"]),
        (lambda t: t.rename_column("x", "a.b"), InvalidArgument, ["without dots"]),
        (
            lambda t: t.add_columns(pa.field("y", pa.int64()), defaults={"y": "seven"}),
            InvalidArgument,
            ["'seven'", "'y'", "int64"],
        ),
        (lambda t: t.add_columns(pa.field("y", pa.int64()), defaults={"z": 1}), InvalidArgument, ["['z']", "not being added"]),
        (lambda t: t.add_columns(pa.field("y", pa.int64(), nullable=False)), InvalidArgument, ["not nullable", "defaults="]),
        (lambda t: t.add_columns(pa.field("y", pa.int8(), False), defaults={"y": None}), InvalidArgument, ["may not be None"]),
        (lambda t: t.add_columns(["y"]), InvalidArgument, ["pyarrow fields"]),
    ],
)
def test_a_change_that_cannot_be_is_refused_naming_the_table_and_commits_nothing(local_table_uri, do, error, words):
    t = lamina.create_table(local_table_uri, BASE, primary_key="id")
    t.append(_arrow([_base_row(i) for i in range(20)], BASE))
    t.set_clustering(["w"], "linear")
    version = t.version
    with pytest.raises(error) as e:
        do(t)
    for w in words:
        assert w in str(e.value), (w, str(e.value))
    assert local_table_uri in str(e.value)
    assert lamina.open_table(local_table_uri).version == version == t.version


def test_the_last_column_cannot_be_dropped(local_table_uri):
    t = lamina.create_table(local_table_uri, pa.schema([("a", pa.int64()), ("b", pa.int64())]))
    with pytest.raises(InvalidArgument, match="at least one column"):
        t.drop_columns(["a", "b"])
    t.drop_columns("a")
    with pytest.raises(InvalidArgument, match="at least one column"):
        t.drop_columns("b")
    assert t.schema.names == ["b"]
    t.add_columns(pa.field("st", pa.struct([("p", pa.int8()), ("q", pa.int8())])))
    t.drop_columns("st.p")
    with pytest.raises(InvalidArgument, match="without fields: drop 'st' instead"):
        t.drop_columns("st.q")
    assert t.schema.field("st").type == pa.struct([("q", pa.int8())])


def test_an_index_on_a_dropped_column_goes_with_it_and_a_clustering_key_is_released_by_set_clustering_none(grown):
    t, _ = grown
    t.create_index("x", "btree")
    t.create_index("name", "bitmap")
    t.drop_columns("x")
    assert [ix.column for ix in t.list_indices()] == ["name"]
    t.set_clustering(["w"], "linear")
    t.set_clustering(None)
    t.drop_columns("w")
    assert "w" not in t.schema.names


# -- time travel, restore, tags ---------------------------------------------------------------------
def test_time_travel_restore_and_tags_across_schema_changes(grown):
    t, model = grown
    v0 = t.version
    t.create_tag("before")
    t.rename_column("name", "label")
    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int32()), defaults={"x": -7})
    t.append(_arrow([{**{k if k != "name" else "label": v for k, v in _base_row(300).items()}, "x": 1}], t.schema))
    t.create_tag("after")
    v_after = t.version
    after_rows = _read(t.to_arrow())

    old = t.checkout(v0)
    assert old.schema.names == BASE.names and not evolution.has_ids(old.schema)
    assert _read(old.to_arrow()) == _sorted(model)
    assert _read(t.checkout(v0 + 1).to_arrow()) == [
        {("label" if k == "name" else k): v for k, v in r.items()} for r in _sorted(model)
    ]
    assert _read(t.checkout("before").to_arrow()) == _sorted(model)
    assert t.checkout("before").count_rows("x = 5") == sum(r["x"] == 5 for r in model)

    restored = t.restore("before")  # the old schema back: x is the old column again, name is name
    assert t.version == restored and t.schema.names == BASE.names
    assert _read(t.to_arrow()) == _sorted(model)
    assert t.count_rows("x = 5") == sum(r["x"] == 5 for r in model)
    # the history after it stays readable, and a change after the restore never reuses a field id
    assert _read(t.checkout("after").to_arrow()) == after_rows
    t.add_columns(pa.field("later", pa.int8()))
    ids = [evolution.field_id(f) for f in t.schema]
    after_ids = [evolution.field_id(f) for f in lamina.open_table(t.uri, version=v_after).schema]
    assert evolution.field_id(t.schema.field("later")) not in after_ids and len(set(ids)) == len(ids)
    assert _read(t.checkout("after").to_arrow()) == after_rows
    t.restore(v_after)
    assert _read(t.to_arrow()) == after_rows and t.count_rows("x = -7") == len(model)


# -- indices ----------------------------------------------------------------------------------------
def test_indices_on_renamed_widened_and_re_added_columns_answer_as_scans(grown):
    t, model = grown
    t.create_index("name", "bitmap")
    t.create_index("w", "btree")
    t.create_index("doc", "fts")
    t.create_index("d", "btree")
    before_search = t.search("gamma delta", k=15, columns=["id"])
    t.rename_column("name", "label")
    t.rename_column("doc", "body")
    t.alter_column("w", pa.int32())
    assert {ix.column for ix in t.list_indices()} == {"label", "w", "body", "d"}  # entries follow their column
    t.alter_column("d", pa.timestamp("ms"))  # another key domain: its index is dropped (create it again)
    assert {ix.column for ix in t.list_indices()} == {"label", "w", "body"}
    assert t.search("gamma delta", k=15, columns=["id"]).equals(before_search)
    assert t.search("gamma delta", column="body", k=15, columns=["id"]).equals(before_search)

    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int16()))
    rows = [{**_base_row(i), "x": i % 4} for i in range(400, 430)]
    new = [
        {
            "id": r["id"],
            "label": r["name"],
            "w": r["w"],
            "d": dt.datetime.combine(r["d"], dt.time()),
            "st": r["st"],
            "body": r["doc"],
            "x": r["x"],
        }
        for r in rows
    ]
    t.append(_arrow(new, t.schema), max_rows_per_file=10)
    # indices built now over files of every schema: on a renamed, widened, re-added, re-typed column
    t.create_index("x", "btree")
    t.create_index("d", "btree")
    t.create_index("label", "btree", name="label_btree")
    t.update_index("w_btree")
    filters = {  # filter: the index that answers it
        "label = 'n3'": "name_bitmap",
        "label IN ('n0', 'n4') AND w > 0": "w_btree",
        "w = -90": "w_btree",
        "w BETWEEN -10 AND 10": "w_btree",
        "x = 2": "x_btree",
        "x = 5": "x_btree",
        "d >= TIMESTAMP '1970-01-05T00:00:00' AND d < TIMESTAMP '1970-01-09T00:00:00'": "d_btree",
        "d = TIMESTAMP '1970-01-11T00:00:00'": "d_btree",
    }
    for f, index in filters.items():
        with_index = t.to_arrow(filter=f)
        assert _read(with_index) == _read(t.to_arrow(filter=f, use_index=False)), f
        assert f"index {index!r}" in t.explain(f), f
        assert with_index.num_rows > 0 or f == "x = 5", f
    assert t.count_rows("x = 2") == sum(1 for r in new if r["x"] == 2)
    assert t.count_rows("x IS NULL") == len(model)
    assert t.count_rows("label = 'n3'") == sum(1 for r in model if r["name"] == "n3") + sum(1 for r in new if r["label"] == "n3")
    # a full-text index built now (over files where the column was called doc) gives the same hits
    t.drop_index("doc_fts")
    unindexed = t.search("gamma delta", column="body", k=20, columns=["id"])
    t.create_index("body", "fts")
    assert t.search("gamma delta", k=20, columns=["id"]).equals(unindexed)


def test_a_racing_index_build_on_a_changed_column_conflicts(grown):
    from lamina.errors import CommitConflict

    t, _ = grown
    stale = lamina.open_table(t.uri)
    t.rename_column("name", "label")
    with pytest.raises(CommitConflict, match="column 'name' of index"):
        stale.create_index("name", "bitmap")
    stale = lamina.open_table(t.uri)
    t.add_columns(pa.field("z", pa.int8()))
    stale.create_index("label", "bitmap")  # another column: it rebases
    assert [ix.column for ix in lamina.open_table(t.uri).list_indices()] == ["label"]


# -- racing writes ------------------------------------------------------------------------------------
def test_an_append_racing_a_schema_change_lands_in_the_schema_it_was_written_in(grown):
    t, model = grown
    stale = lamina.open_table(t.uri)
    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int32()))
    t.rename_column("name", "label")
    stale.append(_arrow([_base_row(900)], BASE))  # written in BASE: rebased over the three changes
    now = lamina.open_table(t.uri)
    assert now.version == stale.version
    row = now.to_arrow(filter="id = 900").to_pylist()
    assert row == [{**{k if k != "name" else "label": v for k, v in _base_row(900).items() if k != "x"}, "x": None}]
    assert now.count_rows("x IS NULL") == len(model) + 1
    assert now.count_rows("label = 'n0'") == sum(r["name"] == "n0" for r in model) + 1
    ids = {f.schema_id for f in now.manifest.fragments}
    assert 0 in ids and now.manifest.schema_id not in ids


# -- old tables --------------------------------------------------------------------------------------
def _root(t: lamina.Table, version: int | None = None) -> dict:
    return json.loads(t.store.get(manifest_path(t.version if version is None else version)))


@pytest.mark.parametrize("old_format", [1, 2])
def test_an_old_table_reads_as_before_and_upgrades_on_its_first_change(local_table_uri, old_format):
    """A table that never changed schema stores no field ids (format 1 or 2); its first change gives every
    field its depth-first position as id and writes format 3 (schema_id, earlier schemas, next_field_id)."""
    t = lamina.create_table(local_table_uri, BASE, primary_key="id")
    model = [_base_row(i) for i in range(60)]
    for k in range(6):
        t.append(_arrow(model[10 * k : 10 * k + 10], BASE))
    t.create_index("x", "btree")
    if old_format == 1:
        t.store.put(manifest_path(t.version), as_format_1(t.manifest))  # as Lamina wrote before segments
        clear_caches()
    root = _root(t)
    assert root["format_version"] == old_format and "schema_id" not in root and "next_field_id" not in root
    assert all("schema_id" not in f for f in root["fragments"])
    old = lamina.open_table(local_table_uri)
    assert not evolution.has_ids(old.schema) and old.manifest.schema_id == 0 and old.manifest.next_field_id is None
    assert _read(old.to_arrow()) == model and old.count_rows("x = 3") == sum(r["x"] == 3 for r in model)
    assert [evolution.field_id(f) for _, f in evolution._walk(evolution.with_ids(old.schema))] == list(range(9))

    before = old.version
    old.rename_column("st.b", "bb")
    root = _root(old)
    assert root["format_version"] == EVOLVED_FORMAT_VERSION == 3
    assert root["schema_id"] == 1 and [s["id"] for s in root["schemas"]] == [0] and root["next_field_id"] == 9
    clear_caches()
    new = lamina.open_table(local_table_uri)
    ids = [(p, evolution.field_id(f)) for p, f in evolution._walk(new.schema)]
    assert ids == [("id", 0), ("x", 1), ("name", 2), ("w", 3), ("d", 4), ("st", 5), ("st.a", 6), ("st.bb", 7), ("doc", 8)]
    renamed = [{**r, "st": None if r["st"] is None else {"a": r["st"]["a"], "bb": r["st"]["b"]}} for r in model]
    assert _read(new.to_arrow()) == renamed
    assert new.count_rows("x = 3") == sum(r["x"] == 3 for r in model) and new.list_indices()[0].column == "x"
    assert _read(new.checkout(before).to_arrow()) == model
    assert _root(new, before)["format_version"] == old_format  # the old versions stay as they were
    # data written before the change still commits (in the schema it was written in), and new ids go on from 9
    new.add_columns(pa.field("extra", pa.int8()))
    assert evolution.field_id(new.schema.field("extra")) == 9


# -- S3 -------------------------------------------------------------------------------------------------
def test_changes_and_reads_on_s3(lamina_s3):
    uri, opts = lamina_s3.uri("warehouse/evolved"), lamina_s3.storage_options
    t = lamina.create_table(uri, BASE, primary_key="id", storage_options=opts)
    model = [_base_row(i) for i in range(50)]
    for k in range(5):
        t.append(_arrow(model[10 * k : 10 * k + 10], BASE))
    t.create_index("name", "bitmap")
    t.rename_column("name", "label")
    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int32()), defaults={"x": 0})
    t.alter_column("w", pa.int64())
    t.append(_arrow([{**{k if k != "name" else "label": v for k, v in _base_row(77).items()}, "id": 777, "x": 9}], t.schema))
    clear_caches()
    s3 = lamina.open_table(uri, storage_options=opts)
    assert _root(s3)["format_version"] == 3
    assert s3.count_rows("x = 0") == 50 and s3.count_rows("x = 9") == 1 and s3.count_rows("x IS NULL") == 0
    assert s3.count_rows("label = 'n2'") == sum(r["name"] == "n2" for r in model) + (77 % 5 == 2)
    assert s3.to_arrow(filter="w = -90", columns=["id"]).column("id").to_pylist() == [r["id"] for r in model if r["w"] == -90]
    assert _read(s3.checkout(7).to_arrow()) == model


def test_streamed_reads_of_old_files_prune_row_groups_only_by_columns_they_still_hold(local_table_uri):
    """Fragments of 20 row groups read a few at a time: row-group statistics prune by a column the file keeps
    under its name and type, never by one renamed away, re-added or widened since."""
    s = pa.schema([("id", pa.int64()), ("x", pa.int32()), ("s", pa.string())])
    t = lamina.create_table(local_table_uri, s, row_group_rows=100)
    for k in range(3):
        ids = np.arange(2000 * k, 2000 * (k + 1))
        t.append(pa.table({"id": ids, "x": (ids % 50).astype(np.int32), "s": [f"s{i % 7}" for i in ids.tolist()]}, schema=s))
    t.rename_column("s", "label")
    t.drop_columns("x")
    t.add_columns([pa.field("x", pa.int32()), pa.field("s", pa.string())], defaults={"x": 3})
    every = t.to_arrow()
    for text, keep in {
        "id >= 1500 AND id < 1720": lambda r: 1500 <= r["id"] < 1720,
        "x = 3 AND id < 300": lambda r: r["id"] < 300,
        "x = 4": lambda r: False,
        "label = 's3' AND id BETWEEN 100 AND 400": lambda r: r["label"] == "s3" and 100 <= r["id"] <= 400,
        "s IS NULL AND id > 5900": lambda r: r["id"] > 5900,
        "s = 's3'": lambda r: False,
    }.items():
        scan = t.scanner(filter=text, batch_size=64)
        got = pa.Table.from_batches(list(scan.to_batches()), schema=scan.schema)
        assert _read(got) == [r for r in _read(every) if keep(r)], text
    scan = t.scanner(filter="id >= 1500 AND id < 1720", batch_size=64)
    scan.to_table()
    assert scan.stats.fragments_pruned == 2 and "17 pruned by min/max" in t.explain("id >= 1500 AND id < 1720")


def test_an_overwrite_keeps_todays_schema_or_starts_over_with_its_own(grown):
    t, model = grown
    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int32()))
    ids = [evolution.field_id(f) for f in t.schema]
    rows = _arrow([{**{k: v for k, v in _base_row(i).items() if k != "x"}, "x": 1} for i in range(5)], t.schema)
    t.overwrite(rows)
    assert [evolution.field_id(f) for f in t.schema] == ids and not t.manifest.schemas  # no file of an earlier one left
    assert t.count_rows("x = 1") == 5 and _root(t)["format_version"] == 3
    stale = lamina.open_table(t.uri)
    t.rename_column("name", "label")
    stale.overwrite(rows)  # written in the schema before the rename: rebased, read through it
    now = lamina.open_table(t.uri)
    assert (
        now.schema.names[1] == "label"
        and now.count_rows("label = 'n1'") == 1
        and set(now.manifest.schemas) == {now.manifest.schema_id - 1}
    )
    plain = pa.schema([("a", pa.int64())])
    now.overwrite(pa.table({"a": pa.array([1, 2], pa.int64())}), schema=plain)  # another schema: ids start over
    assert now.schema.equals(plain) and not evolution.has_ids(now.schema) and not now.manifest.schemas
    now.add_columns(pa.field("b", pa.int8()))
    assert [evolution.field_id(f) for f in now.schema] == [0, 1] and now.count_rows("b IS NULL") == 2


def test_the_root_keeps_only_schemas_some_fragment_may_be_written_in(local_table_uri):
    """A run of changes with no write between them registers no schema (none can hold a file); a schema
    fragments were written in is kept until the commit that removes its last fragment."""
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("v", pa.int32())]))
    for k in range(30):  # a run of changes right after the create
        t.add_columns(pa.field(f"c{k}", pa.int8()))
        t.drop_columns([f"c{k}"])
    assert t.manifest.schemas == {}
    t.append(pa.table({"id": pa.array([1, 2], pa.int64()), "v": pa.array([5, 6], pa.int32())}))
    written_in = t.manifest.schema_id
    for k in range(30):
        t.add_columns(pa.field(f"d{k}", pa.int8()))
        t.drop_columns([f"d{k}"])
    assert list(t.manifest.schemas) == [written_in]  # only the schema the append's file is in
    t.delete("id = 1")  # the file stays (one row of it is live): so does its schema
    assert list(t.manifest.schemas) == [written_in]
    t.delete("id = 2")  # its last row: the fragment goes, and its schema with it
    assert t.manifest.schemas == {} and t.count_rows() == 0


def test_clustering_reads_old_fragments_zone_maps_by_field_id(local_table_uri):
    """A clustering key on a name dropped and added again: the old fragments' zone maps (of the old
    column) must not place them on the curve; the metric counts them as spanning every cell."""
    from lamina.clustering import Clustering, clustering_stats

    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("x", pa.int64())]))
    for k in range(4):  # old x: narrow ranges, as if clustered
        t.append(pa.table({"id": pa.array(range(10 * k, 10 * k + 10), pa.int64()), "x": pa.array([k] * 10, pa.int64())}))
    t.drop_columns("x")
    t.add_columns(pa.field("x", pa.int64()))
    t.append(pa.table({"id": pa.array(range(100, 140), pa.int64()), "x": pa.array(range(40), pa.int64())}))
    t.set_clustering("x", curve="linear")
    clustering = Clustering.from_config(t.manifest.config, "test")
    grid = [(0, 2**8 - 1)]
    for f in t.manifest.fragments[:4]:  # the old column's zone maps are not the new x's
        assert clustering.extents(f, t.schema) == grid
        assert clustering.extents(f) != grid  # (read by name, they would place it)
    stats = clustering_stats(t.manifest)
    assert stats is not None and stats.fragments == 5


def test_a_schema_read_from_a_changed_table_starts_a_new_table_with_ids_of_its_own(local_table_uri, tmp_path):
    """Results carry their fields' ids and defaults (as pyiceberg's do); a table created, or overwritten,
    with such a schema numbers its fields itself and gives old rows no default."""
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("s", pa.struct([("a", pa.int8())]))]))
    t.append([{"id": 1, "s": {"a": 1}}])
    t.drop_columns("id")
    t.add_columns(pa.field("n", pa.int32()), defaults={"n": 7})
    read = t.to_arrow()
    assert read.to_pylist() == [{"s": {"a": 1}, "n": 7}]
    copy = lamina.create_table(str(tmp_path / "copy"), read.schema)
    assert not evolution.has_ids(copy.schema) and evolution.default_of(copy.schema.field("n")) is None
    copy.append(read)
    copy.add_columns(pa.field("m", pa.int8()))
    assert copy.to_arrow().to_pylist() == [{"s": {"a": 1}, "n": 7, "m": None}]
    t.overwrite(read, schema=t.schema)  # the table's own schema given back: a schema of its own again
    assert t.to_arrow().to_pylist() == [{"s": {"a": 1}, "n": 7}] and t.manifest.schemas == {}
