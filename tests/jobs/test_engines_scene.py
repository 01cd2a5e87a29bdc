"""The scene as users run it: a table that keeps growing, compacted on Ray and cleaned between passes,
queried after every pass through the scanner, DuckDB (both readers) and Polars, every column checked
against a model of what was written; a reader opened early keeps its version through all of it."""

from __future__ import annotations

import datetime as dt
import random

import duckdb
import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina.compaction import compact
from lamina.planner import CompactionOptions

pl = pytest.importorskip("polars")
import lamina.polars  # noqa: E402  (needs Polars)

SCHEMA = pa.schema([("id", pa.int64()), ("qty", pa.int64()), ("price", pa.float64()), ("flag", pa.string())])


def _batch(rng: np.random.Generator, start: int, n: int) -> pa.Table:
    return pa.table(
        {
            "id": np.arange(start, start + n, dtype=np.int64),
            "qty": rng.integers(1, 50, n),
            "price": np.round(rng.random(n) * 1000, 2),
            "flag": pa.array(rng.choice(["A", "N", "R"], n)),
        },
        schema=SCHEMA,
    )


def _sorted(rows: pa.Table) -> pa.Table:
    return rows.sort_by("id")


@pytest.mark.parametrize("passes", [8])
def test_reads_stay_exact_across_growing_passes_of_compaction_and_cleanup(ray_cluster, table_location, passes):
    uri, opts = table_location
    rng = np.random.default_rng(33)
    pick = random.Random(33)
    t = lamina.create_table(uri, SCHEMA, storage_options=opts)
    model = SCHEMA.empty_table()
    early = None  # a reader opened at the third pass, read to the end at the last one
    early_rows = None
    options = CompactionOptions(policy="tiered", target_rows_per_fragment=2_000, min_row_group_bytes=0)
    next_id = merged = 0
    for p in range(passes):
        for _ in range(pick.randint(1, 3)):
            n = pick.randint(50, 600)
            b = _batch(rng, next_id, n)
            next_id += n
            t.append(b)
            model = pa.concat_tables([model, b])
        cut = pick.randint(1, 48)
        t.delete(f"qty = {cut}")
        model = model.filter(pa.compute.not_equal(model["qty"], cut))
        _, summary = compact(uri, options, storage_options=opts)
        merged += summary.fragments_before - summary.fragments_after
        t = t.reload()
        t.cleanup(older_than=dt.timedelta(hours=1))  # within retention: what an early reader needs stays
        if p == 2:
            early = t.scanner(["id", "qty"], batch_size=64, readahead=1).to_batches()
            first = next(early)
            early_rows = (first, _sorted(model.select(["id", "qty"])))

        want = _sorted(model)
        assert _sorted(t.to_arrow()).equals(want), f"pass {p}"
        assert _sorted(pa.Table.from_batches(list(t.scanner(batch_size=100).to_batches()), schema=SCHEMA)).equals(want)
        lo = pick.randint(0, next_id)
        sel = model.filter(pa.compute.greater_equal(model["id"], lo))
        assert t.count_rows(f"id >= {lo}") == sel.num_rows
        con = duckdb.connect()
        t.to_duckdb("lam", con)
        if not uri.startswith("s3://"):
            t.to_duckdb("files", con, reader="duckdb")
        con.register("mem", model)
        for sql in (
            "SELECT flag, count(*), sum(qty), round(sum(price), 4) FROM {} GROUP BY flag ORDER BY flag",
            f"SELECT * FROM {{}} WHERE id >= {lo} AND flag <> 'N' ORDER BY id",
        ):
            expected = con.sql(sql.format("mem")).fetchall()
            assert con.sql(sql.format("lam")).fetchall() == expected, (p, sql)
            if not uri.startswith("s3://"):
                assert con.sql(sql.format("files")).fetchall() == expected, (p, sql)
        got = lamina.polars.scan_table(t).filter(pl.col("id") >= lo).sort("id").collect()
        assert got.equals(pl.from_arrow(_sorted(sel))), f"pass {p}"

    assert early is not None and early_rows is not None
    first, then = early_rows
    rest = pa.Table.from_batches([first, *early])
    assert _sorted(rest).equals(then)  # the version of pass 3, after five more compactions and cleanups
    assert merged > 0  # the compactions did rewrite fragments under the readers
