"""WAL ingestion on a real Ray cluster: applier actors, SIGKILL mid-flush, the job's CLI,
compaction of flushed fragments, local and S3."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pytest

import lamina
from lamina.compaction import compact
from lamina.errors import TableDropped
from lamina.ingest import FAULT_KILL_IN_FLUSH, IngestOptions
from lamina.ingestion import Ingestion
from lamina.jobs.ingest import main
from lamina.planner import CompactionOptions
from lamina.wal import WalWriter
from tests.lamina.helpers import left_after_drop

REPO = Path(__file__).resolve().parents[2]
SCHEMA = pa.schema([("id", pa.int64()), ("host", pa.string()), ("v", pa.float64())])


def produce(uri: str, shard: int, start: int, txns: int, rows: int, opts=None) -> list[int]:
    w = WalWriter(uri, shard, storage_options=opts)
    ids = []
    for k in range(txns):
        batch = [{"id": start + k * rows + j, "host": f"h{j % 7}", "v": float(j)} for j in range(rows)]
        w.put_many(batch)
        w.commit()
        ids += [r["id"] for r in batch]
    w.close()
    return ids


def wait_for(predicate, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError("timed out")


def test_appliers_keep_the_table_up_to_date_local_and_s3(ray_cluster, table_location):
    uri, opts = table_location
    lamina.create_table(uri, SCHEMA, storage_options=opts)
    ing = Ingestion.start(uri, 2, storage_options=opts, options=IngestOptions(flush_rows=500, flush_seconds=0.5))
    try:
        expected = produce(uri, 0, 0, 10, 100, opts) + produce(uri, 1, 10**6, 10, 100, opts)
        wait_for(lambda: lamina.open_table(uri, storage_options=opts).count_rows() == len(expected))
        stats = ing.stats()
        assert sum(s["applied_rows"] for s in stats) == len(expected)
    finally:
        ing.stop()
    t = lamina.open_table(uri, storage_options=opts)
    assert sorted(t.to_arrow(columns=["id"]).column("id").to_pylist()) == sorted(expected)
    assert set(t.manifest.wal_watermarks) == {"0/0000000000", "1/0000000000"}


def test_applier_killed_mid_flush_is_restarted_and_applies_exactly_once(ray_cluster, table_location, tmp_path):
    uri, opts = table_location
    lamina.create_table(uri, SCHEMA, storage_options=opts)
    marker = tmp_path / "killed-in-flush"
    ing = Ingestion.start(
        uri,
        1,
        storage_options=opts,
        options=IngestOptions(flush_rows=300, flush_seconds=0.3),
        runtime_env={"env_vars": {FAULT_KILL_IN_FLUSH: str(marker)}},
    )
    try:
        expected = produce(uri, 0, 0, 20, 50, opts)
        wait_for(lambda: marker.exists())
        wait_for(lambda: lamina.open_table(uri, storage_options=opts).count_rows() == len(expected))
        time.sleep(1.0)  # any duplicate flush would land by now
    finally:
        ing.stop()
    ids = lamina.open_table(uri, storage_options=opts).to_arrow(columns=["id"]).column("id").to_pylist()
    assert sorted(ids) == sorted(expected), "every committed WAL row exactly once"


def test_job_until_idle_then_compaction_merges_flushed_fragments(ray_cluster, local_table_uri, capsys):
    lamina.create_table(local_table_uri, SCHEMA)
    env = {**os.environ, "PYTHONPATH": str(REPO), "RAY_ADDRESS": ray_cluster.get_runtime_context().gcs_address}
    expected = []
    for round_ in range(2):  # the second run's actors resume from the first run's watermarks
        batch = produce(local_table_uri, 0, round_ * 1000, 4, 100) + produce(local_table_uri, 1, 5000 + round_ * 1000, 4, 100)
        expected += batch
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "lamina.jobs.ingest",
                local_table_uri,
                "--shards",
                "2",
                "--flush-rows",
                "100",
                "--until-idle",
                "2",
                "--json",
            ],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-3000:]
        stats = json.loads(proc.stdout)
        assert sum(s["applied_rows"] for s in stats) == len(batch)
        assert all(s["io"]["local"]["PUT"] >= 1 and s["io"]["local"]["GET"] >= 1 for s in stats), (
            "each shard reports its requests"
        )
    t = lamina.open_table(local_table_uri)
    assert t.count_rows() == len(expected) and len(t.fragments()) >= 4
    before = t.to_arrow()
    _, summary = compact(local_table_uri, CompactionOptions(target_rows_per_fragment=10_000))
    after = lamina.open_table(local_table_uri)
    assert summary.failed_groups == 0 and len(after.fragments()) < len(t.fragments())
    assert after.to_arrow().equals(before)
    assert after.manifest.wal_watermarks == t.manifest.wal_watermarks, "compaction keeps the watermarks"
    assert main([local_table_uri, "--shards", "0"]) == 2


def test_applier_actor_stops_its_shard_when_the_table_is_dropped(ray_cluster, table_location):
    """A drop under running appliers: the actor's flush raises TableDropped naming the rows it did not
    apply, its loop ends (no retry, no reload loop), and the location ends empty."""
    uri, opts = table_location
    lamina.create_table(uri, SCHEMA, storage_options=opts)
    ing = Ingestion.start(uri, 1, storage_options=opts, options=IngestOptions(flush_rows=10**6, flush_seconds=3600))
    errors: dict = {}
    try:
        produce(uri, 0, 0, 3, 10, opts)
        wait_for(lambda: ing.stats()[0]["applied_rows"] == 30)
        lamina.drop_table(uri, storage_options=opts)
        with pytest.raises(TableDropped, match="30 rows read from its WAL .* were not applied"):
            ing.flush()
        wait_for(lambda: not ing.stats()[0]["running"])
        stats = ing.stats()[0]
        assert "dropped" in stats["error"] and stats["flushes"] == 0 and stats["flush_failures"] == 0
    finally:
        errors = ing.stop()
    assert "dropped" in errors[0]
    assert left_after_drop(uri, opts) == [], "the appliers wrote nothing into the dropped location"


def test_applier_actor_follows_add_columns_and_stops_on_a_name_dropped_and_added_again(ray_cluster, local_table_uri):
    """A keyed table's schema changes under a running applier actor (docs/FORMAT.md §2.4, §11.3): a nullable
    column added is followed (the rows read before flush with it null, upserts replace rows of older files);
    a column dropped and added again while the actor holds rows written before stops the shard, nothing lost."""
    from lamina.errors import ShardStopped

    uri = local_table_uri
    lamina.create_table(uri, SCHEMA, primary_key="id")
    ing = Ingestion.start(uri, 1, options=IngestOptions(flush_rows=10**6, flush_seconds=3600))
    try:
        produce(uri, 0, 0, 2, 10)  # ids 0..19
        wait_for(lambda: ing.stats()[0]["applied_rows"] == 20)
        assert ing.flush() is not None
        old = WalWriter(uri, 0)
        old.put_many([{"id": 5, "host": "old", "v": -5.0}])
        old.commit()
        wait_for(lambda: ing.stats()[0]["applied_rows"] == 21)
        lamina.open_table(uri).add_columns(pa.field("extra", pa.int32()))
        new = WalWriter(uri, 0)
        new.put_many([{"id": 6, "host": "new", "v": -6.0, "extra": 6}, {"id": 100, "host": "new", "v": 1.0, "extra": 1}])
        new.commit()
        wait_for(lambda: ing.stats()[0]["applied_rows"] == 23)
        assert ing.flush() is not None
        rows = {r["id"]: r for r in lamina.open_table(uri).to_arrow().to_pylist()}
        assert len(rows) == 21 and rows[5] == {"id": 5, "host": "old", "v": -5.0, "extra": None}
        assert rows[6] == {"id": 6, "host": "new", "v": -6.0, "extra": 6} and rows[7]["extra"] is None
        # rows written before a drop of "extra" and its new column of that name, still unflushed: a stop
        new.put_many([{"id": 7, "host": "again", "v": 7.0, "extra": 777}])
        new.commit()
        wait_for(lambda: ing.stats()[0]["applied_rows"] == 24)
        t = lamina.open_table(uri)
        t.drop_columns("extra")
        t.add_columns(pa.field("extra", pa.int32()))
        with pytest.raises(ShardStopped, match=r"\['extra'\] were dropped and added again"):
            ing.flush()
        wait_for(lambda: not ing.stats()[0]["running"])
        assert lamina.open_table(uri).count_rows("extra = 777") == 0 and lamina.open_table(uri).version == t.version
    finally:
        errors = ing.stop()
    assert "dropped and added again" in errors[0]
