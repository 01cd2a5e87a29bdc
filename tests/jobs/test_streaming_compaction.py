"""The tiered policy end to end on real Ray: a WAL applier flushing while compaction passes run."""

from __future__ import annotations

import datetime as dt
import time
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pyarrow as pa

import lamina
from lamina.compaction import compact
from lamina.ingest import IngestOptions
from lamina.ingestion import Ingestion
from lamina.planner import CompactionOptions
from lamina.wal import WalWriter

SCHEMA = pa.schema(
    [("id", pa.int64()), ("host", pa.string()), ("v", pa.float64()), ("ts", pa.timestamp("us", tz="UTC")), ("note", pa.string())]
)
PASSES, ROWS_PER_PASS = 30, 240
#: Small targets so that 30 passes climb several tiers: flushes of ~80 rows are tier 4 of 4,000.
OPTIONS = CompactionOptions(policy="tiered", target_rows_per_fragment=4000, max_concurrency=2)


def wait_for(predicate, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def row(i: int) -> dict:
    return {
        "id": i,
        "host": f"h{i % 7}",
        "v": i * 0.5,
        "ts": dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc) + dt.timedelta(milliseconds=i),
        "note": None if i % 5 == 0 else "x" * (i % 13),
    }


def test_thirty_passes_while_a_wal_applier_flushes_keep_every_row_once_and_every_value(ray_cluster, tmp_path):
    uri = str(tmp_path / "events")
    lamina.create_table(uri, SCHEMA, primary_key="id", stable_row_ids=True)
    ing = Ingestion.start(uri, 1, options=IngestOptions(flush_rows=80, flush_seconds=0.05, poll_seconds=0.02))
    summaries = []
    stopped = False
    try:
        writer = WalWriter(uri, 0)

        def produce(p: int) -> None:  # three WAL transactions of a pass; the applier flushes as they come
            for part in range(3):
                start = p * ROWS_PER_PASS + part * ROWS_PER_PASS // 3
                writer.put_many([row(i) for i in range(start, start + ROWS_PER_PASS // 3)])
                writer.commit()

        for p in range(PASSES):
            # The previous pass's rows are in the table (so each pass has flushed fragments to compact);
            # this pass's rows are written, applied and flushed while the compaction runs.
            wait_for(lambda p=p: lamina.open_table(uri).count_rows() >= p * ROWS_PER_PASS)
            with ThreadPoolExecutor(1) as producer:
                produced = producer.submit(produce, p)
                _, summary = compact(uri, OPTIONS)
                produced.result()
            assert summary.failed_groups == 0, summary.to_dict()
            summaries.append(summary)
        writer.close()
        stopped = True
        assert ing.stop() == {}, "the applier flushed everything"
    finally:
        if not stopped:
            ing.stop(flush=False)
    _, last = compact(uri, OPTIONS)
    summaries.append(last)

    t = lamina.open_table(uri)
    got = t.to_arrow()
    n = PASSES * ROWS_PER_PASS
    expected = pa.Table.from_pylist([row(i) for i in range(n)], SCHEMA)
    assert got.num_rows == n
    ids = got.column("id").to_numpy()
    assert len(np.unique(ids)) == n, "every row present exactly once"
    assert got.sort_by("id").equals(expected), "every column equal to what was written"
    assert np.array_equal(ids, np.arange(n)), "flush order kept through every compaction"

    committed = [g for s in summaries for g in s.groups if g["status"] == "committed"]
    assert len(committed) >= 10, "the passes compacted while the applier flushed"
    assert sum(s.bytes_written for s in summaries) > 0
    assert all(s.bytes_written == sum(g["bytes_out"] for g in s.groups if g["status"] != "failed") for s in summaries)
    # Between passes the table holds no more than the tiered bound (planner/tiered.py): 2n + (w-1)(K-1) + (r-1)//2
    # with n = 7,200 / 4,000 and K = 6 for the smallest flush (1 row: tier 6 of 4,000 at ratio 4), plus what was
    # flushed after the last pass (none: the final pass ran after the applier stopped).
    assert len(t.manifest.fragments) <= 4 + 3 * 5 + 1
    plan = compact(uri, OPTIONS, dry_run=True)[0]
    assert plan.groups == (), plan.describe()
    ranges = sorted(r for f in t.manifest.fragments for r in f.row_ids)
    assert ranges[0][0] == 0 and all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])) and ranges[-1][1] == n, (
        "stable row ids: each row keeps one id, none lost or doubled"
    )
