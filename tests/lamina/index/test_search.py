"""What a full-text search reads back: only the columns asked (none for ``columns=[]``), and the hits'
rows in score order however they are spread over fragments, row groups and the native call's runs."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.index import search as search_module

WORDS = "alpha beta gamma delta epsilon zeta eta theta iota kappa".split()


def docs(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    text = [" ".join(rng.choice(WORDS, rng.integers(1, 8))) for _ in range(n)]
    return pa.table({"id": pa.array(np.arange(n, dtype=np.int64) + seed * 100_000), "doc": pa.array(text)})


@pytest.fixture
def text_table(local_table_uri) -> lamina.Table:
    t = lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("doc", pa.string())]), row_group_rows=100)
    t.append(docs(1500, 1))  # one fragment of 15 row groups
    t.append(docs(700, 2), max_rows_per_file=300)  # three more fragments
    t.create_index("doc", "fts")
    t.append(docs(250, 3))  # not covered by the index: analyzed on the fly
    t.delete("(id >= 100 AND id < 180) OR (id >= 100290 AND id < 100320)")  # deleted rows never come back
    return t


def test_columns_choose_what_a_search_returns(text_table):
    full = text_table.search("alpha beta", k=25, with_row_address=True)
    bare = text_table.search("alpha beta", k=25, columns=[], with_row_address=True)
    assert bare.column_names == ["_rowaddr", "_score"]
    assert bare.column("_rowaddr").equals(full.column("_rowaddr")) and bare.column("_score").equals(full.column("_score"))
    assert text_table.search("alpha beta", k=25, columns=[]).column_names == ["_score"]
    ids = text_table.search("alpha beta", k=25, columns=["id"])
    assert ids.column_names == ["id", "_score"] and ids.column("id").equals(full.column("id"))
    assert text_table.search("nothing", columns=[]).column_names == ["_score"]
    assert text_table.search("nothing", columns=["doc"]).schema.names == ["doc", "_score"]


def matching(t: lamina.Table, text: str) -> int:
    return sum(bool(set(text.split()) & set(d.split())) for d in t.to_arrow(columns=["doc"]).column("doc").to_pylist())


@pytest.mark.parametrize("cores", [1, 2, 5])
def test_hits_come_back_in_score_order_however_the_read_is_split(text_table, monkeypatch, cores):
    monkeypatch.setattr(search_module, "_idle_cores", lambda: cores)
    for text, k in (("gamma", 3), ("alpha theta", 40), ("kappa eta zeta", 400), ("delta", 5000)):
        got = text_table.search(text, k=k, with_row_address=True)
        assert got.num_rows == min(k, matching(text_table, text)), text
        scores = got.column("_score").to_numpy()
        assert (np.diff(scores) <= 0).all()
        want = text_table.take(got.column("_rowaddr"), ["id", "doc"])
        assert got.select(["id", "doc"]).equals(want), text
        assert all(set(text.split()) & set(d.split()) for d in got.column("doc").to_pylist())
        assert not set(got.column("id").to_pylist()) & (set(range(100, 180)) | set(range(100290, 100320)))
