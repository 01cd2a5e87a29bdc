"""Table.merge: every clause combination against a model (a dict of rows by key), with and without an index on
the key, composite and NULL keys, a source read in chunks, the errors that stop a merge before it commits, time
travel, indices after a merge, and merges racing deletes, appends, compactions, WAL flushes and other merges."""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.commit import commit
from lamina.compaction import CompactionSummary, commit_results
from lamina.datafile import write_fragments
from lamina.errors import CommitConflict, DuplicateKey, InvalidArgument, InvalidFilter, SchemaMismatch
from lamina.manifest import list_versions, load_manifest
from lamina.merge import MergeResult
from lamina.planner import CompactionOptions, plan_compaction
from lamina.records import MergeRecord, RewriteRecord
from lamina.transaction import WalFlush

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("region", pa.string()),
        ("qty", pa.int32()),
        ("price", pa.float64()),
        ("note", pa.string()),
    ]
)
REGIONS = ("eu", "us", "ap", None)
#: Rows of the target deleted before any merge: a source row with one of these keys matches nothing.
DELETED = (17, 34, 51)


def target_rows(start: int, n: int) -> list[dict]:
    return [
        {"id": i, "region": REGIONS[i % 4], "qty": i % 50, "price": i * 0.5, "note": None if i % 3 else f"t{i}"}
        for i in range(start, start + n)
    ]


def source_rows() -> list[dict]:
    """Keys 10..29 (17 among them deleted in the target), new keys 1000..1004, and two rows with a NULL key."""
    out = [{"id": i, "region": "src", "qty": 1000 + i, "price": -float(i), "note": f"s{i}"} for i in range(10, 30)]
    out += [{"id": i, "region": "new", "qty": i, "price": 1.5, "note": None} for i in range(1000, 1005)]
    out += [{"id": None, "region": "null", "qty": k, "price": 0.0, "note": "nullkey"} for k in (1, 2)]
    return out


def make_target(uri: str, opts=None, index: str | None = None, primary_key: str | None = None) -> tuple[lamina.Table, list[dict]]:
    """200 rows in 4 fragments, 1 row with a NULL id, a few rows deleted; ``index``: on ``id``."""
    t = lamina.create_table(uri, SCHEMA, storage_options=opts, primary_key=primary_key)
    rows = target_rows(0, 200) + [{"id": None, "region": "eu", "qty": 7, "price": 1.0, "note": "null target"}]
    for i in range(0, 200, 50):
        t.append(pa.Table.from_pylist(rows[i : i + 50], schema=SCHEMA))
    t.append(pa.Table.from_pylist(rows[200:], schema=SCHEMA))
    t.delete(f"id IN ({', '.join(map(str, DELETED))})")
    if index is not None:
        t.create_index("id", index)
    return t, [r for r in rows if r["id"] not in DELETED]


def model(target: list[dict], source: list[dict], on: tuple[str, ...], clauses: dict) -> tuple[list[dict], MergeResult]:
    """What the merge must leave, by the definition: keys with a NULL match nothing."""

    def key(r):
        k = tuple(r[c] for c in on)
        return None if any(v is None for v in k) else k

    by_key = {key(s): s for s in source if key(s) is not None}
    matched_keys = {key(r) for r in target if key(r) in by_key}
    out, inserted, updated, deleted = [], 0, 0, 0
    for r in target:
        s = by_key.get(key(r)) if key(r) is not None else None
        if s is not None:
            if clauses["matched"] == "update":
                cols = clauses.get("columns")
                out.append(dict(s) if cols is None else {**r, **{c: s[c] for c in cols}})
                updated += 1
            elif clauses["matched"] == "delete":
                deleted += 1
            else:
                out.append(r)
        elif clauses["by_source"] is not None and (clauses["by_source"] == "all" or r["region"] == "eu"):
            deleted += 1
        else:
            out.append(r)
    if clauses["insert"]:
        for s in source:
            if key(s) is None or key(s) not in matched_keys:
                out.append(s)
                inserted += 1
    return out, MergeResult(inserted, updated, deleted, -1)


def canon(rows: list[dict]) -> list[tuple]:
    return sorted(tuple((v is None, v if v is not None else 0) for v in r.values()) for r in rows)


def table_rows(t: lamina.Table) -> list[tuple]:
    return canon(t.to_arrow().to_pylist())


def build(t: lamina.Table, source, on, clauses: dict, chunk_rows: int | None = None):
    b = t.merge(source, on=on, chunk_rows=chunk_rows)
    if clauses["matched"] == "update":
        b = b.when_matched_update(clauses.get("columns"))
    elif clauses["matched"] == "delete":
        b = b.when_matched_delete()
    if clauses["insert"]:
        b = b.when_not_matched_insert()
    if clauses["by_source"] == "all":
        b = b.when_not_matched_by_source_delete()
    elif clauses["by_source"] == "filter":
        b = b.when_not_matched_by_source_delete("region = 'eu'")
    return b


def assert_no_stray_data_files(t: lamina.Table) -> None:
    referenced = set()
    for v in list_versions(t.store):
        referenced |= load_manifest(t.store, v).referenced_paths()
    on_disk = {o.path for o in t.store.list("data/")}
    assert on_disk == {p for p in referenced if p.startswith("data/")}


MATCHED = [None, "update", "update_columns", "delete"]
CLAUSES = [
    (m, i, b)
    for m, i, b in itertools.product(MATCHED, [False, True], [None, "all", "filter"])
    if (m, i, b) != (None, False, None)
]


def clauses_of(m, i, b) -> dict:
    return {
        "matched": "update" if m == "update_columns" else m,
        "columns": ["qty", "note"] if m == "update_columns" else None,
        "insert": i,
        "by_source": b,
    }


@pytest.mark.parametrize("index", [None, "btree"])
@pytest.mark.parametrize("m,insert,by_source", CLAUSES, ids=["-".join(str(x) for x in c) for c in CLAUSES])
def test_every_clause_combination_matches_the_model(table_location, index, m, insert, by_source):
    uri, opts = table_location
    t, target = make_target(uri, opts, index)
    clauses = clauses_of(m, insert, by_source)
    source = source_rows()
    want, counts = model(target, source, ("id",), clauses)
    before = t.version
    result = build(t, pa.Table.from_pylist(source, schema=SCHEMA), "id", clauses).execute()
    assert (result.inserted, result.updated, result.deleted) == (counts.inserted, counts.updated, counts.deleted)
    assert result.version == t.version == before + 1
    assert table_rows(t) == canon(want)
    record = t.manifest.record
    assert isinstance(record, MergeRecord) and record.kind == "merge" and record.on == ("id",)
    assert (record.inserted, record.updated, record.deleted) == (counts.inserted, counts.updated, counts.deleted)
    assert table_rows(lamina.open_table(uri, storage_options=opts)) == canon(want)


def test_the_btree_index_answers_the_key_lookup(local_table_uri, monkeypatch):
    t, target = make_target(local_table_uri, index="btree")
    import lamina.merge as merge_module

    seen = []
    real = merge_module._lookup_filter

    def spy(manifest, keys, on, use_index):
        assert use_index
        flt = real(manifest, keys, on, use_index)
        seen.append(lamina.open_table(local_table_uri).explain(flt))
        return flt

    monkeypatch.setattr(merge_module, "_lookup_filter", spy)
    t.merge(pa.Table.from_pylist(source_rows(), schema=SCHEMA), on="id").when_matched_update().execute()
    assert seen and "id_btree" in seen[0], seen


def test_a_key_without_an_index_is_bounded_by_its_range_and_scans_only_what_may_hold_it(local_table_uri):
    t, target = make_target(local_table_uri)
    from lamina.merge import _lookup_filter

    keys = pa.table({"id": pa.array([120, 130], pa.int64())})
    flt = _lookup_filter(t.manifest, keys, ("id",))
    scan = t.scanner(["id"], flt)
    assert sorted(scan.to_table().column("id").to_pylist()) == list(range(120, 131))
    assert scan.stats.fragments_pruned == 4  # zone maps: only the fragment of ids 100..149 is read


def test_past_the_index_threshold_the_key_column_is_scanned_with_the_same_result(tmp_path, monkeypatch):
    """At ``index_lookup_keys`` keys the btree answers the key lookup; one key more and the key column is scanned
    instead: the same rows and counts either way."""
    import lamina.merge as merge_module

    source = source_rows()
    keys = sum(1 for r in source if r["id"] is not None)
    clauses = {"matched": "update", "columns": None, "insert": True, "by_source": None}
    monkeypatch.setattr(merge_module, "INDEX_KEYS_PER_ROW", 0.0)
    real = merge_module.Scanner
    used: list[bool] = []

    def spy(*args, **kwargs):
        used.append(kwargs["use_index"])
        return real(*args, **kwargs)

    monkeypatch.setattr(merge_module, "Scanner", spy)
    for always, indexed in ((keys, True), (keys - 1, False)):
        monkeypatch.setattr(merge_module, "INDEX_KEYS_ALWAYS", always)
        t, target = make_target(str(tmp_path / f"at-{always}"), index="btree")
        want, counts = model(target, source, ("id",), clauses)
        used.clear()
        result = build(t, pa.Table.from_pylist(source, schema=SCHEMA), "id", clauses).execute()
        assert used == [indexed]
        assert (result.inserted, result.updated, result.deleted) == (counts.inserted, counts.updated, counts.deleted)
        assert table_rows(t) == canon(want)


def test_composite_keys_with_nulls(table_location):
    uri, opts = table_location
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    rows = [{"id": i, "region": r, "qty": i, "price": 1.0, "note": None} for i in range(20) for r in ("eu", "us")] + [
        {"id": None, "region": "eu", "qty": 0, "price": 0.0, "note": None},
        {"id": 5, "region": None, "qty": 0, "price": 0.0, "note": None},
    ]
    t.append(pa.Table.from_pylist(rows, schema=SCHEMA))
    source = [
        {"id": i, "region": "eu", "qty": 100 + i, "price": 2.0, "note": "upd"}
        for i in range(5, 10)  # only the eu rows
    ] + [
        {"id": 50, "region": "us", "qty": 1, "price": 2.0, "note": "ins"},
        {"id": 5, "region": None, "qty": 9, "price": 2.0, "note": "null region"},  # matches nothing: inserted
        {"id": None, "region": "eu", "qty": 9, "price": 2.0, "note": "null id"},
        {"id": 3, "region": "ap", "qty": 9, "price": 2.0, "note": "new pair"},
    ]
    clauses = {"matched": "update", "columns": ["qty", "note"], "insert": True, "by_source": "filter"}
    want, counts = model(rows, source, ("region", "id"), clauses)
    result = build(t, pa.Table.from_pylist(source, schema=SCHEMA), ["region", "id"], clauses).execute()
    assert (result.inserted, result.updated, result.deleted) == (counts.inserted, counts.updated, counts.deleted) == (4, 5, 16)
    assert table_rows(t) == canon(want)


def test_null_keys_never_match(local_table_uri):
    t, target = make_target(local_table_uri)
    nulls = [r for r in source_rows() if r["id"] is None]
    result = (
        t.merge(pa.Table.from_pylist(nulls, schema=SCHEMA), on="id").when_matched_delete().when_not_matched_insert().execute()
    )
    assert (result.inserted, result.updated, result.deleted) == (2, 0, 0)
    assert t.count_rows("id IS NULL") == 3  # the target's row with a NULL key was not deleted, the two were inserted


def test_a_key_twice_in_the_source_is_refused_and_nothing_is_committed(table_location):
    uri, opts = table_location
    t, _ = make_target(uri, opts)
    version = t.version
    source = source_rows() + [{"id": 12, "region": "again", "qty": 1, "price": 1.0, "note": None}]
    with pytest.raises(DuplicateKey, match=r"holds key \{'id': 12\} 2 times"):
        t.merge(pa.Table.from_pylist(source, schema=SCHEMA), on="id").when_matched_update().execute()
    assert lamina.open_table(uri, storage_options=opts).version == version
    assert_no_stray_data_files(t)


def test_a_key_repeated_in_a_later_chunk_is_refused_after_its_fragments_are_removed(local_table_uri):
    t, _ = make_target(local_table_uri)
    version = t.version
    source = pa.Table.from_pylist(
        source_rows() + [{"id": 1000, "region": "x", "qty": 1, "price": 1.0, "note": None}], schema=SCHEMA
    )
    with pytest.raises(DuplicateKey, match=r"\{'id': 1000\} 2 times"):
        t.merge(source, on="id", chunk_rows=5).when_matched_update().when_not_matched_insert().execute()
    assert lamina.open_table(local_table_uri).version == version
    assert_no_stray_data_files(t)


def test_schema_mismatch_is_raised_before_anything_is_written(table_location):
    uri, opts = table_location
    t, _ = make_target(uri, opts)
    files = {o.path for o in t.store.list("")}
    wrong = pa.Table.from_pylist(source_rows(), schema=SCHEMA).cast(SCHEMA.set(2, pa.field("qty", pa.int64())))
    with pytest.raises(SchemaMismatch, match="column 'qty' is int64, the table has int32"):
        t.merge(wrong, on="id").when_matched_update().execute()
    partial = pa.Table.from_pylist(source_rows(), schema=SCHEMA).select(["id", "qty"])
    with pytest.raises(SchemaMismatch, match=r"lacks column\(s\) \['region', 'price', 'note'\], which inserting rows needs"):
        t.merge(partial, on="id").when_matched_update(["qty"]).when_not_matched_insert().execute()
    with pytest.raises(SchemaMismatch, match=r"has column\(s\) \['extra'\]"):
        t.merge(partial.append_column("extra", pa.array([1] * partial.num_rows)), on="id").when_matched_delete().execute()
    assert {o.path for o in t.store.list("")} == files


def test_a_partial_source_updates_its_columns(local_table_uri):
    t, target = make_target(local_table_uri)
    source = pa.Table.from_pylist(source_rows(), schema=SCHEMA).select(["qty", "id"])
    result = t.merge(source, on="id").when_matched_update(["qty"]).execute()
    clauses = {"matched": "update", "columns": ["qty"], "insert": False, "by_source": None}
    want, counts = model(target, source_rows(), ("id",), clauses)
    assert result.updated == counts.updated == 19
    assert table_rows(t) == canon(want)


@pytest.mark.parametrize(
    "kind,source,on,message",
    [
        ("clause", None, "id", "has no clause"),
        ("key", None, "price", "key column 'price' has type double"),
        ("key", None, "nope", "key column 'nope' is not a column"),
        ("key", None, ["id", "id"], "distinct columns"),
        ("chunk", None, "id", "chunk_rows must be a positive integer"),
    ],
)
def test_bad_merges_are_refused(local_table_uri, kind, source, on, message):
    t, _ = make_target(local_table_uri)
    src = pa.Table.from_pylist(source_rows(), schema=SCHEMA)
    with pytest.raises(InvalidArgument, match=message):
        if kind == "chunk":
            t.merge(src, on=on, chunk_rows=0)
        else:
            t.merge(src, on=on).execute()


def test_bad_clauses_are_refused(local_table_uri):
    t, _ = make_target(local_table_uri)
    b = t.merge(pa.Table.from_pylist(source_rows(), schema=SCHEMA), on="id")
    with pytest.raises(InvalidArgument, match="either updated or deleted"):
        b.when_matched_update().when_matched_delete()
    with pytest.raises(InvalidArgument, match=r"unknown column\(s\) \['nope'\]"):
        b.when_matched_update(["nope"])
    with pytest.raises(InvalidFilter):
        b.when_not_matched_by_source_delete("nope = 1")
    with pytest.raises(InvalidArgument, match="no primary key"):
        t.merge(pa.Table.from_pylist(source_rows(), schema=SCHEMA))


def test_the_primary_key_is_the_default_key(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA, primary_key="id")
    t.append(pa.Table.from_pylist(target_rows(0, 10), schema=SCHEMA))
    result = t.merge(pa.Table.from_pylist(source_rows()[:3], schema=SCHEMA)).when_matched_update().execute()
    assert result.updated == 0  # keys 10..12 are not in the table
    result = t.merge(pa.Table.from_pylist(target_rows(5, 3), schema=SCHEMA)).when_matched_delete().execute()
    assert result.deleted == 3 and t.count_rows() == 7


@pytest.mark.parametrize("index", [None, "btree"])
def test_a_reader_source_larger_than_a_chunk(table_location, index):
    uri, opts = table_location
    t, target = make_target(uri, opts, index)
    source = [{"id": i, "region": "rd", "qty": i, "price": 1.0, "note": None} for i in range(100, 400)]
    source += source_rows()
    clauses = {"matched": "update", "columns": None, "insert": True, "by_source": "filter"}
    want, counts = model(target, source, ("id",), clauses)
    table = pa.Table.from_pylist(source, schema=SCHEMA)
    reader = pa.RecordBatchReader.from_batches(SCHEMA, table.to_batches(max_chunksize=37))
    fragments_before = len(t.fragments())
    result = build(t, reader, "id", clauses, chunk_rows=64).execute()
    assert (result.inserted, result.updated, result.deleted) == (counts.inserted, counts.updated, counts.deleted)
    assert table_rows(t) == canon(want)
    record = t.manifest.record
    assert len(record.fragment_ids) >= len(source) // 64  # each chunk's rows were written before the next
    assert len(t.fragments()) >= fragments_before
    assert_no_stray_data_files(t)


def test_pandas_and_dict_sources(local_table_uri):
    t, target = make_target(local_table_uri)
    rows = source_rows()[:5]
    t.merge(pa.Table.from_pylist(rows, schema=SCHEMA).to_pandas(), on="id").when_matched_update(["qty"]).execute()
    t.merge([{"id": 11, "note": "from a dict"}], on="id").when_matched_update(["note"]).execute()
    got = {r["id"]: r for r in t.to_arrow(filter="id IN (10, 11, 12)").to_pylist()}
    assert got[10]["qty"] == 1010 and got[11]["note"] == "from a dict" and got[11]["qty"] == 1011


def test_nothing_to_do_commits_nothing(local_table_uri):
    t, _ = make_target(local_table_uri)
    version = t.version
    result = t.merge(pa.Table.from_pylist(source_rows()[20:25], schema=SCHEMA), on="id").when_matched_update().execute()
    assert result == MergeResult(0, 0, 0, version) and lamina.open_table(local_table_uri).version == version


def test_time_travel_reads_the_rows_before_the_merge(table_location):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    before = t.version
    build(t, pa.Table.from_pylist(source_rows(), schema=SCHEMA), "id", clauses_of("update", True, "all")).execute()
    assert table_rows(t.checkout(before)) == canon(target)
    assert table_rows(lamina.open_table(uri, version=before, storage_options=opts)) == canon(target)


def test_indices_are_exact_after_a_merge(local_table_uri):
    t, _ = make_target(local_table_uri, index="btree")
    t.create_index("region", "bitmap")
    build(t, pa.Table.from_pylist(source_rows(), schema=SCHEMA), "id", clauses_of("update", True, "filter")).execute()
    for flt in ("id IN (10, 12, 17, 28, 1003, 150)", "id >= 20 AND id < 40", "region = 'src'", "region = 'eu'", "id = 12"):
        assert canon(t.to_arrow(filter=flt).to_pylist()) == canon(t.to_arrow(filter=flt, use_index=False).to_pylist()), flt
    assert t.to_arrow(filter="id = 12").to_pylist() == [{"id": 12, "region": "src", "qty": 1012, "price": -12.0, "note": "s12"}]


# -- races ------------------------------------------------------------------------------------------
def _merge_update(t, ids, *, insert=False, qty=500):
    rows = [{"id": i, "region": "m", "qty": qty + i, "price": 1.0, "note": None} for i in ids]
    b = t.merge(pa.Table.from_pylist(rows, schema=SCHEMA), on="id").when_matched_update()
    return (b.when_not_matched_insert() if insert else b).execute()


def test_merge_over_a_delete_of_a_row_it_updates_conflicts(table_location):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    stale = t.checkout(t.version)
    t.delete("id = 12")
    with pytest.raises(CommitConflict, match=r"merge .* conflicts with the delete .*deleted a row this merge updates"):
        _merge_update(stale, [11, 12, 13, 2000], insert=True)
    latest = lamina.open_table(uri, storage_options=opts)
    assert table_rows(latest) == canon([r for r in target if r["id"] != 12])  # nothing lost, nothing back
    assert_no_stray_data_files(latest)


def test_merge_over_a_delete_of_other_rows_and_of_a_row_it_deletes_rebases(local_table_uri):
    t, target = make_target(local_table_uri)
    stale = t.checkout(t.version)
    t.delete("id IN (40, 41)")
    rows = [{"id": i, "region": "m", "qty": 1, "price": 1.0, "note": None} for i in (41, 42)]
    result = stale.merge(pa.Table.from_pylist(rows, schema=SCHEMA), on="id").when_matched_delete().execute()
    assert result.deleted == 1  # 41 was deleted by theirs already
    assert table_rows(lamina.open_table(local_table_uri)) == canon([r for r in target if r["id"] not in (40, 41, 42)])


def test_merge_over_an_append_of_other_keys_rebases(table_location):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    stale = t.checkout(t.version)
    appended = target_rows(5000, 3)
    t.append(pa.Table.from_pylist(appended, schema=SCHEMA))
    result = _merge_update(stale, [10, 3000], insert=True)
    assert (result.inserted, result.updated) == (1, 1)
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.version == result.version and latest.count_rows("id >= 5000") == 3
    assert latest.to_arrow(filter="id IN (10, 3000)").column("qty").to_pylist() == [510, 3500]


@pytest.mark.parametrize("key", [3000, 10], ids=["a-key-it-inserts", "a-key-it-updates"])
def test_merge_over_an_append_of_one_of_its_keys_conflicts(table_location, key):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    stale = t.checkout(t.version)
    t.append(pa.Table.from_pylist(target_rows(key, 1), schema=SCHEMA))
    with pytest.raises(CommitConflict, match=rf"conflicts with the append .*its new rows hold key \{{'id': {key}\}}"):
        _merge_update(stale, [10, 3000], insert=True)
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.count_rows(f"id = {key}") == (2 if key == 10 else 1)  # theirs only; the merge left nothing
    assert_no_stray_data_files(latest)


@pytest.mark.parametrize("mapping", ["inline", "file"])
def test_merge_over_a_compaction_lands_on_the_rewritten_rows(table_location, monkeypatch, mapping):
    from lamina.workers.compaction import GroupCompactor, tasks_for

    uri, opts = table_location
    t, target = make_target(uri, opts, index="btree")
    if mapping == "file":  # a clustering rewrite moves rows one by one; every mapping goes to a file
        monkeypatch.setattr("lamina.workers.compaction.MAPPING_INLINE_RUNS", 0)
        t.set_clustering(["qty"], curve="linear")
    stale = t.checkout(t.version)
    options = CompactionOptions(target_rows_per_fragment=1000)
    plan = plan_compaction(t.manifest, options, t.uri)
    tasks = tasks_for(plan, t.manifest, t.uri, t.storage_options, t.write_options, options.read_batch_bytes)
    results = [GroupCompactor().run(task) for task in tasks]
    assert results and all(r.ok for r in results)
    commit_results(t, t.manifest, results, CompactionSummary.for_plan(plan))
    record = t.reload().manifest.record
    assert isinstance(record, RewriteRecord)
    assert all((g.mapping_file is not None) == (mapping == "file") for g in record.groups)
    clauses = clauses_of("update", True, "filter")
    want, counts = model(target, source_rows(), ("id",), clauses)
    read_at = stale.version
    result = build(stale, pa.Table.from_pylist(source_rows(), schema=SCHEMA), "id", clauses).execute()
    assert (result.inserted, result.updated, result.deleted) == (counts.inserted, counts.updated, counts.deleted)
    latest = lamina.open_table(uri, storage_options=opts)
    assert latest.manifest.record.read_version == read_at and latest.version == read_at + 2
    assert table_rows(latest) == canon(want)
    for flt in ("id IN (10, 12, 28, 1003, 150)", "id < 40"):
        assert canon(latest.to_arrow(filter=flt).to_pylist()) == canon(latest.to_arrow(filter=flt, use_index=False).to_pylist())


def test_a_delete_over_a_merge_that_updated_its_row_conflicts(table_location):
    uri, opts = table_location
    t, target = make_target(uri, opts)
    stale = t.checkout(t.version)
    _merge_update(t, [12, 13])
    with pytest.raises(CommitConflict, match=r"delete .* conflicts with the merge .*updated rows of fragment 0"):
        stale.delete("id = 12")
    assert lamina.open_table(uri, storage_options=opts).to_arrow(filter="id = 12").column("qty").to_pylist() == [512]
    assert stale.delete("id = 150") == 1  # rows the merge did not touch: rebased


def test_two_merges_of_one_key_conflict_and_of_different_keys_both_commit(local_table_uri):
    t, _ = make_target(local_table_uri)
    stale = t.checkout(t.version)
    _merge_update(t, [10, 11], qty=600)
    with pytest.raises(CommitConflict, match=r"merge .* conflicts with the merge"):
        _merge_update(stale.checkout(stale.version), [11, 12], qty=700)
    _merge_update(stale, [20, 3000], insert=True, qty=700)
    latest = lamina.open_table(local_table_uri)
    got = {r["id"]: r["qty"] for r in latest.to_arrow(filter="id IN (10, 11, 12, 20, 3000)").to_pylist()}
    assert got == {10: 610, 11: 611, 12: 12, 20: 720, 3000: 3700}


def _flush(table, ids, keys):
    """What a WAL applier commits: rows for ``ids`` and the deletion of their live older versions."""
    rows = pa.Table.from_pylist([{"id": i, "region": "wal", "qty": 9, "price": 9.0, "note": None} for i in ids], schema=SCHEMA)
    frags = write_fragments(table.store, table.schema, iter(rows.to_batches()), table.write_options)
    old = table.scanner([], f"id IN ({', '.join(map(str, ids))})").matching_offsets()
    txn = WalFlush(table.version, frags, old, {"0/0000000000": 1}, {"0/0000000000": 0}, keys=keys)
    return commit(table.store, txn, table.manifest)


def test_a_wal_flush_over_a_merge_of_one_of_its_keys_conflicts(local_table_uri):
    t, _ = make_target(local_table_uri, primary_key="id")
    stale = t.checkout(t.version)
    _merge_update(t, [10], insert=False)
    with pytest.raises(
        CommitConflict, match=r"wal_flush .* conflicts with the merge .*key \{'id': 10\}, which this flush writes"
    ):
        _flush(stale, [10, 11], pa.array([10, 11], pa.int64()))
    other = t.checkout(t.version)
    _merge_update(t, [20])
    _flush(other, [30, 31], pa.array([30, 31], pa.int64()))  # other keys: rebased
    latest = lamina.open_table(local_table_uri)
    assert latest.manifest.record.operation == "wal_flush" and latest.manifest.record.read_version == t.version - 1
    assert latest.count_rows("id IN (10, 20, 30, 31)") == 4 and latest.count_rows("region = 'wal'") == 2
    assert latest.to_arrow(filter="id IN (10, 20)").column("qty").to_pylist() == [510, 520]


def test_a_merge_over_a_wal_flush_of_one_of_its_keys_conflicts(local_table_uri):
    t, _ = make_target(local_table_uri, primary_key="id")
    stale = t.checkout(t.version)
    _flush(t.checkout(t.version), [10], pa.array([10], pa.int64()))
    with pytest.raises(CommitConflict, match=r"merge .* conflicts with the wal_flush .*key \{'id': 10\}"):
        _merge_update(stale, [10, 11])
    t.reload()
    assert t.to_arrow(filter="id = 10").column("region").to_pylist() == ["wal"]


def test_the_merge_record_round_trips(local_table_uri):
    t, _ = make_target(local_table_uri)
    build(t, pa.Table.from_pylist(source_rows(), schema=SCHEMA), "id", clauses_of("update", True, "filter")).execute()
    stored = t.manifest.transaction
    assert stored["operation"] == "merge" and stored["kind"] == "merge" and stored["on"] == ["id"]
    assert stored["predicate"] == "region = 'eu'"
    reread = load_manifest(t.store, t.version).record
    assert isinstance(reread, MergeRecord) and reread.to_json() == stored
    assert reread.updated_fragment_ids == (0,) and np.all(np.asarray(reread.fragment_ids) >= 5)


def test_a_merge_into_an_empty_table_inserts_every_row(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    source = source_rows()
    result = (
        t.merge(pa.Table.from_pylist(source, schema=SCHEMA), on="id").when_matched_delete().when_not_matched_insert().execute()
    )
    assert (result.inserted, result.updated, result.deleted) == (len(source), 0, 0)
    assert table_rows(t) == canon(source)


def test_a_wal_applier_that_loses_to_a_merge_of_its_key_flushes_again_with_one_row_per_key(local_table_uri):
    from lamina.ingest import ShardApplier
    from lamina.wal import WalWriter
    from tests.lamina.helpers import BeatenOnce

    uri = local_table_uri
    lamina.create_table(uri, pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())]), primary_key="id")
    writer, applier = WalWriter(uri, 0), ShardApplier(uri, 0)
    writer.put_many([{"id": i, "name": "old", "v": float(i)} for i in range(10)])
    writer.commit()
    applier.poll()
    applier.flush()
    writer.put({"id": 5, "name": "wal", "v": -5.0})
    writer.commit()
    applier.poll()

    def merge():  # committed between the flush's read of the table and its put
        source = [{"id": 5, "name": "merged", "v": 0.0}, {"id": 7, "name": "merged", "v": 0.0}]
        lamina.open_table(uri).merge(source, on="id").when_matched_update().execute()

    applier.store = BeatenOnce(applier.store, merge)
    assert applier.flush() is None and applier.store.fired == 1  # the conflict: reloaded from the watermarks
    applier.poll()
    assert applier.flush() is not None
    got = lamina.open_table(uri).to_arrow().to_pylist()
    assert sorted(r["id"] for r in got) == list(range(10)), "a key is live twice, or lost"
    by_key = {r["id"]: r["name"] for r in got}
    assert by_key[5] == "wal" and by_key[7] == "merged"  # the flush committed after the merge: its row is the newest
    writer.close()


# -- an evolved target (docs/FORMAT.md §2.4): its older files read through the schema they were written in --
def _evolve(t: lamina.Table) -> None:
    """``price`` renamed ``cost``, ``qty`` widened to int64, ``note`` dropped and added again with a default,
    ``extra`` added: the target's files are all in the old schema."""
    t.rename_column("price", "cost")
    t.alter_column("qty", pa.int64())
    t.drop_columns("note")
    t.add_columns(pa.field("note", pa.string()), defaults={"note": "n/a"})
    t.add_columns(pa.field("extra", pa.int8()))


def _today(r: dict, note: str | None = "n/a", extra: int | None = None) -> dict:
    """A row of SCHEMA as the evolved table has it (its columns in the table's order)."""
    return {"id": r["id"], "region": r["region"], "qty": r["qty"], "cost": r["price"], "note": note, "extra": extra}


@pytest.mark.parametrize("index", [None, "btree"])
@pytest.mark.parametrize(
    "m,insert,by_source", [("update", True, "filter"), ("update_columns", False, None), ("delete", True, "all")]
)
def test_a_merge_into_an_evolved_table_matches_the_model(local_table_uri, index, m, insert, by_source):
    t, target = make_target(local_table_uri, index=index)
    _evolve(t)
    t = t.reload()
    target = [_today(r) for r in target]
    source = [_today(s, note=s["note"], extra=7) for s in source_rows()]
    clauses = {**clauses_of(m, insert, by_source), "columns": ["qty", "extra"] if m == "update_columns" else None}
    expected, counts = model(target, source, ("id",), clauses)
    plain = pa.schema([(f.name, f.type) for f in t.schema])
    result = build(t, pa.Table.from_pylist(source, schema=plain), "id", clauses).execute()
    assert (result.inserted, result.updated, result.deleted) == (counts.inserted, counts.updated, counts.deleted)
    assert table_rows(t) == canon(expected)
    # a partial update kept the target's other columns as the old files read today: the default note, the cost
    if m == "update_columns":
        assert t.to_arrow(filter="id = 12").to_pylist() == [
            {"id": 12, "region": "eu", "qty": 1012, "cost": 6.0, "note": "n/a", "extra": 7}
        ]
    assert_no_stray_data_files(t)


def test_an_update_of_an_evolved_table_reads_old_rows_in_todays_schema(local_table_uri):
    t, target = make_target(local_table_uri, index="btree")
    _evolve(t)
    t = t.reload()
    n = t.update("cost >= 90 AND note = 'n/a' AND region = 'us'", values={"extra": 1}, expressions={"qty": "qty * 2"})
    want = [r for r in target if r["id"] is not None and r["price"] >= 90 and r["region"] == "us"]
    assert n == len(want) > 0
    got = {r["id"]: r for r in t.to_arrow().to_pylist()}
    for r in want:
        assert got[r["id"]] == _today({**r, "qty": 2 * r["qty"]}, extra=1)
    assert t.count_rows("extra IS NULL") == len(target) - len(want) and t.count_rows("note = 'n/a'") == len(target)


def test_a_merge_racing_a_schema_change_lands_in_the_schema_it_read(local_table_uri):
    """The merge wrote its rows in the schema it read; the change commits first; the merge rebases over it
    and its files are read through that schema: ``note`` (dropped and added again meanwhile) reads the new
    column's default on them, never the source's values for the old one."""
    t, target = make_target(local_table_uri, index="btree")
    stale = t.checkout(t.version)
    _evolve(t)
    clauses = clauses_of("update", True, None)
    expected, counts = model(target, source_rows(), ("id",), clauses)
    result = build(stale, pa.Table.from_pylist(source_rows(), schema=SCHEMA), "id", clauses).execute()
    assert (result.inserted, result.updated, result.deleted) == (counts.inserted, counts.updated, counts.deleted)
    latest = lamina.open_table(local_table_uri)
    assert latest.manifest.record.operation == "merge" and latest.schema.names[-2:] == ["note", "extra"]
    assert table_rows(latest) == canon([_today(r) for r in expected])
    assert latest.count_rows("note = 'n/a'") == len(expected)
