"""Indices against brute force: random data, every kind, through appends, deletes and rewrites,
on a local directory and on S3 (moto server); bad input; broken index files."""

from __future__ import annotations

import logging
import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

import lamina
from lamina import _native
from lamina.commit import commit
from lamina.errors import CorruptFile, IndexNotFound, InvalidArgument, ObjectNotFound
from lamina.index import IndexOptions, clear_caches
from lamina.rewrite import full_rewrite
from lamina.transaction import Rewrite

WORDS = (
    "alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu nu xi omicron pi rho sigma tau "
    "upsilon phi chi psi omega Running runs ran café naïve"
).split()

SCHEMA = pa.schema(
    [
        ("id", pa.int64()),
        ("u", pa.uint64()),
        ("f", pa.float32()),
        ("ts", pa.timestamp("ms")),
        ("cat", pa.string()),
        ("flag", pa.bool_()),
        ("doc", pa.string()),
        ("blob", pa.list_(pa.int32())),
    ]
)


def random_rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    ids = rng.integers(-500, 500, n)
    f = rng.integers(-20, 20, n).astype(np.float32) / 4
    f[rng.random(n) < 0.02] = np.nan
    docs = [None if rng.random() < 0.05 else " ".join(rng.choice(WORDS, rng.integers(0, 9))) for _ in range(n)]
    return pa.table(
        {
            "id": pa.array(ids, mask=rng.random(n) < 0.03),
            "u": pa.array(
                rng.integers(0, 2**63, n, dtype=np.uint64) * np.uint64(2) + np.uint64(rng.integers(0, 2)), type=pa.uint64()
            ),
            "f": pa.array(f),
            "ts": pa.array(np.datetime64("2024-01-01", "ms") + rng.integers(0, 100, n).astype("timedelta64[s]")),
            "cat": pa.array([None if x == 5 else f"c{x}" for x in rng.integers(0, 6, n)]),
            "flag": pa.array(rng.random(n) < 0.3),
            "doc": pa.array(docs, type=pa.string()),
            "blob": pa.array([[int(x)] for x in rng.integers(0, 9, n)], type=pa.list_(pa.int32())),
        },
        schema=SCHEMA,
    )


FILTERS = [
    "id = 7",
    "id IN (-3, 0, 17, 499, 1000)",
    "id >= 100 AND id < 140",
    "id BETWEEN -10 AND 10 AND cat = 'c2'",
    "400 < id AND cat IN ('c1', 'c3')",
    "cat = 'c4'",
    "cat > 'c3'",
    "f = 0.0",
    "f >= 2.5 AND f <= 3.0",
    "ts >= TIMESTAMP '2024-01-01T00:01:00' AND ts < TIMESTAMP '2024-01-01T00:01:05'",
    "flag = TRUE AND id < -400",
    "id IN (-3, 0, 17, 499, 1000) AND id > 10",  # points within a range
    "id IN (1, 2, 3, 17, 40) AND id IN (3, 17, 40, 41)",  # two lists: their intersection
    "f IN (0.0, -0.0, 2.5, 3.25, 100.0)",  # -0.0 and 0.0 one key
    "cat IN ('c1', 'c3', 'c9') AND cat >= 'c2'",
    "ts IN (TIMESTAMP '2024-01-01T00:01:00', TIMESTAMP '2024-01-01T00:00:07')",
    "id = 5 OR cat = 'c0'",  # OR: no index, scan
    "id > 0 AND id < 0",  # empty
]

INDEX_SPECS = [("id", "btree"), ("cat", "bitmap"), ("f", "btree"), ("ts", "btree"), ("flag", "bitmap"), ("u", "btree")]


def brute(t: lamina.Table, flt: str) -> pa.Table:
    """The filter evaluated by pyarrow over every live row (no Lamina filtering at all)."""
    from lamina.filter import parse_filter

    everything = t.to_arrow(with_row_address=True)
    return everything.filter(parse_filter(flt, t.schema).expression)


def same(a: pa.Table, b: pa.Table) -> bool:
    """Equal tables, NaN equal to NaN (float32 column ``f`` holds NaNs)."""
    if a.schema != b.schema or a.num_rows != b.num_rows:
        return False
    fa, fb = (x.column("f").to_numpy(zero_copy_only=False) for x in (a, b))
    return a.drop_columns(["f"]).equals(b.drop_columns(["f"])) and np.array_equal(fa, fb, equal_nan=True)


def check_filters(t: lamina.Table) -> None:
    for flt in FILTERS:
        got = t.to_arrow(filter=flt, with_row_address=True)
        want = brute(t, flt)
        assert same(got, want), f"{flt}: {got.num_rows} rows vs {want.num_rows} by brute force"
        assert t.count_rows(flt) == want.num_rows
    u = t.to_arrow(columns=["u"]).column("u").to_pylist()
    for v in u[:3]:
        assert same(t.to_arrow(filter=f"u = {v}", with_row_address=True), brute(t, f"u = {v}"))


def brute_bm25(t: lamina.Table, text: str, k: int, stem: bool = False) -> list[tuple[int, float]]:
    data = t.to_arrow(columns=["doc"], with_row_address=True)
    docs = data.column("doc").to_pylist()
    addrs = data.column("_rowaddr").to_pylist()
    toks = [None if d is None else _native.tokenize_text(d, stem=stem) for d in docs]
    live = [(a, tk) for a, tk in zip(addrs, toks) if tk is not None]
    n = len(live)
    avgdl = sum(len(tk) for _, tk in live) / n
    scores: dict[int, float] = {}
    for term in _native.analyze_text(text, stem=stem):
        having = [(a, tk.count(term), len(tk)) for a, tk in live if term in tk]
        idf = math.log(1 + (n - len(having) + 0.5) / (len(having) + 0.5))
        for a, tf, dl in having:
            scores[a] = scores.get(a, 0.0) + idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * dl / avgdl))
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))[:k]


def check_search(t: lamina.Table, stem: bool = False) -> None:
    for text in ("alpha", "beta gamma", "omega alpha alpha", "café", "RUNNING", "nothing-here", ""):
        got = t.search(text, "doc", k=7, with_row_address=True)
        want = brute_bm25(t, text, 7, stem)
        assert got.num_rows == len(want), text
        scores = got.column("_score").to_pylist()
        assert scores == pytest.approx([s for _, s in want], rel=1e-9), text
        # the same rows up to ties at equal score
        got_addrs = got.column("_rowaddr").to_pylist()
        for (a, s), ga, gs in zip(want, got_addrs, scores):
            assert a == ga or math.isclose(s, gs, rel_tol=1e-9), text
        if got.num_rows:
            row = t.take([got_addrs[0]], ["doc"]).column("doc")[0].as_py()
            assert got.column("doc")[0].as_py() == row


def make(uri: str, opts=None) -> lamina.Table:
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    for seed in range(3):
        t.append(random_rows(2500, seed), max_rows_per_file=1000)
    return t


def create_all(t: lamina.Table, **kw) -> None:
    small = IndexOptions(task_rows=1500, segment_rows=3000, page_entries=64)
    for column, kind in INDEX_SPECS:
        t.create_index(column, kind, options=small)
    t.create_index("doc", "fts", options=small, **kw)


def test_every_kind_exact_through_appends_deletes_and_rewrites(table_location):
    uri, opts = table_location
    t = make(uri, opts)
    create_all(t)
    assert {ix.name for ix in t.list_indices()} == {f"{c}_{k}" for c, k in INDEX_SPECS} | {"doc_fts"}
    assert all(ix.uncovered_fragments == 0 and ix.segments == 3 for ix in t.list_indices())  # 9 fragments, 3 per segment
    check_filters(t)
    check_search(t)

    t.append(random_rows(1200, 10), max_rows_per_file=700)  # uncovered fragments are scanned
    assert "scan for 2 fragment(s)" in t.explain("id = 7")
    t.delete("id >= -50 AND id < 60")  # deleted rows never come back
    t.delete("cat = 'c1' AND flag = TRUE")
    check_filters(t)
    check_search(t)

    ids = [f.id for f in t.fragments()]
    commit(t.store, Rewrite(t.version, [full_rewrite(t.store, t.manifest, ids[2:6], t.write_options)]), t.manifest)
    t.reload()  # rewritten rows: uncovered, scanned
    check_filters(t)
    check_search(t)
    version = t.update_index("id_btree")
    assert version == t.version
    [info] = [ix for ix in t.list_indices() if ix.name == "id_btree"]
    assert info.uncovered_fragments == 0
    assert "scan for 0 fragment(s)" in t.explain("id = 7")
    check_filters(t)
    # stale segments are dropped once they serve no fragment
    for ix in t.manifest.indices:
        assert len(set(ix.coverage(t.manifest.fragment_map()).values())) == len(ix.segments)


def test_reopened_table_and_time_travel_use_their_own_indices(local_table_uri):
    t = make(local_table_uri)
    before = t.version
    t.create_index("id", "btree")
    again = lamina.open_table(local_table_uri)
    assert [ix.name for ix in again.list_indices()] == ["id_btree"]
    old = again.checkout(before)
    assert old.list_indices() == [] and "no btree/bitmap index" in old.explain("id = 7")
    assert same(old.to_arrow(filter="id = 7"), again.to_arrow(filter="id = 7"))
    again.drop_index("id_btree")
    assert again.list_indices() == [] and lamina.open_table(local_table_uri).list_indices() == []
    with pytest.raises(IndexNotFound, match="no index named 'id_btree'"):
        again.drop_index("id_btree")


def test_stemming_and_empty_table(local_table_uri):
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.create_index("doc", "fts", stem=True)
    t.create_index("id", "btree")
    assert t.search("anything").num_rows == 0
    assert t.to_arrow(filter="id = 1").num_rows == 0
    t.append(random_rows(800, 3))
    check_search(t, stem=True)
    got = t.search("run", k=50)
    assert got.num_rows > 0 and all(any(w in d for w in ("Running", "runs", "ran", "run")) for d in got.column("doc").to_pylist())


def test_search_without_an_index_scans_and_warns(local_table_uri, caplog):
    t = make(local_table_uri)
    with caplog.at_level(logging.WARNING, logger="lamina.index"):
        check_search(t)
    assert "no full-text index on column 'doc'" in caplog.text


def test_bad_input_is_refused_before_anything_is_written(local_table_uri):
    t = make(local_table_uri)
    files = sorted(o.path for o in t.store.list(""))
    with pytest.raises(InvalidArgument, match="no such column"):
        t.create_index("nope", "btree")
    with pytest.raises(InvalidArgument, match="type list<item: int32> is not supported"):
        t.create_index("blob", "btree")
    with pytest.raises(InvalidArgument, match="needs a string column"):
        t.create_index("id", "fts")
    with pytest.raises(InvalidArgument, match="unknown index kind 'hash'"):
        t.create_index("id", "hash")
    with pytest.raises(InvalidArgument, match="index name"):
        t.create_index("id", "btree", name="../x")
    with pytest.raises(InvalidArgument, match="segment_rows"):
        IndexOptions(task_rows=10, segment_rows=5)
    assert sorted(o.path for o in t.store.list("")) == files and t.version == 4
    with pytest.raises(InvalidArgument, match="use a btree index"):
        t.create_index("u", "bitmap", options=IndexOptions(max_bitmap_values=100))
    assert [o.path for o in t.store.list("_indices/")] == [], "a failed build removes its files"
    t.create_index("id", "btree")
    with pytest.raises(InvalidArgument, match="already has an index named 'id_btree'"):
        t.create_index("id", "btree")
    with pytest.raises(IndexNotFound, match="pass column="):
        t.search("alpha")


@pytest.mark.parametrize("damage", ["truncate", "flip", "delete"])
def test_broken_index_file_falls_back_to_scan_or_raises(local_table_uri, damage, caplog, monkeypatch):
    t = make(local_table_uri)
    t.create_index("id", "btree")
    t.create_index("doc", "fts")
    clear_caches()
    for ix in t.manifest.indices:
        path = t.store.local_path(ix.segments[0].path)
        data = open(path, "rb").read()
        if damage == "delete":
            import os

            os.remove(path)
        else:
            bad = data[: len(data) // 2] if damage == "truncate" else data[:-40] + bytes([data[-40] ^ 0xFF]) + data[-39:]
            open(path, "wb").write(bad)
    with caplog.at_level(logging.WARNING, logger="lamina.index"):
        assert same(t.to_arrow(filter="id = 7"), t.to_arrow(filter="id = 7", use_index=False))
        check_search(t)
    seg = t.manifest.indices[0].segments[0].path
    assert seg in caplog.text and "scans the fragments" in caplog.text
    monkeypatch.setenv("LAMINA_INDEX_ON_ERROR", "raise")
    expected = ObjectNotFound if damage == "delete" else CorruptFile
    with pytest.raises(expected, match=rf"index 'id_btree': segment file .*{seg}"):
        t.to_arrow(filter="id = 7")


def test_segment_blocks_are_checked(local_table_uri):
    """A flipped byte inside a page (not the directory) is caught by the block checksum."""
    t = lamina.create_table(local_table_uri, SCHEMA)
    t.append(random_rows(3000, 1))
    t.create_index("id", "btree", options=IndexOptions(page_entries=64))
    clear_caches()
    seg = t.manifest.indices[0].segments[0]
    path = t.store.local_path(seg.path)
    data = bytearray(open(path, "rb").read())
    data[100] ^= 0xFF  # first page
    open(path, "wb").write(bytes(data))
    low = pc.min(t.to_arrow(columns=["id"]).column("id")).as_py()
    import os

    os.environ["LAMINA_INDEX_ON_ERROR"] = "raise"
    try:
        with pytest.raises(CorruptFile, match="fails its checksum"):
            t.to_arrow(filter=f"id = {low}")
    finally:
        del os.environ["LAMINA_INDEX_ON_ERROR"]
