"""The WAL of a dropped table: an applier stops its shard with an error naming the table and the rows it did
not apply (no retry, no reload loop, nothing committed after the drop); a writer refuses to write on; once
producers and appliers stopped, nothing of the table is left at its location."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pytest

import lamina
import lamina.ingest as ingest
from lamina.commit import commit
from lamina.errors import TableDropped
from lamina.ingest import ShardApplier
from lamina.manifest import latest_version, load_manifest
from lamina.store import open_store
from lamina.transaction import Drop
from lamina.wal import WalWriter, list_segments
from lamina.workers.ingest import WalApplier
from tests.lamina.helpers import left_after_drop

REPO = Path(__file__).resolve().parents[2]
KEYED = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _rows(start: int, n: int) -> list[dict]:
    return [{"id": i, "name": f"n{i}"} for i in range(start, start + n)]


def _started(uri, opts, key="id"):
    """A table with 10 rows flushed from shard 0 and 10 more applied but not flushed."""
    lamina.create_table(uri, KEYED, primary_key=key, storage_options=opts)
    w = WalWriter(uri, 0, storage_options=opts)
    applier = ShardApplier(uri, 0, opts)
    w.put_many(_rows(0, 10))
    w.commit()
    applier.poll()
    assert applier.flush() is not None
    w.put_many(_rows(10, 10))
    w.commit()
    assert applier.poll() == 10
    return w, applier


def _drop_committed(uri, opts) -> int:
    """Step 1 of a drop alone (a purge that stopped after its tombstone): the tombstone's version."""
    store = open_store(uri, opts)
    return commit(store, Drop(latest_version(store)), load_manifest(store, latest_version(store))).version


@pytest.mark.parametrize("key", ["id", None])
def test_applier_stops_its_shard_when_the_table_is_purged(table_location, key):
    uri, opts = table_location
    w, applier = _started(uri, opts, key)
    lamina.drop_table(uri, storage_options=opts)

    with pytest.raises(TableDropped) as stopped:
        applier.flush()  # would have committed rows 10..19 into a dropped table
    msg = str(stopped.value)
    assert uri.rstrip("/") in msg and "shard 0" in msg and "dropped" in msg
    assert "10 rows" in msg and "not applied" in msg, "the unflushed rows are reported, not silently lost"
    assert applier.snapshot().error == msg and applier.snapshot().flushed_rows == 10
    for call in (applier.step, applier.flush, applier.poll, applier.drain, lambda: applier.get(12)):
        with pytest.raises(TableDropped) as again:  # stopped for good: the same error, no reload, no retry
            call()
        assert again.value is stopped.value
    assert left_after_drop(uri, opts) == [], "nothing written into the dropped location (no stop record, no data file)"
    w.close()


def test_applier_meeting_a_tombstone_commits_nothing_after_it(table_location):
    uri, opts = table_location
    _, applier = _started(uri, opts)
    dropped_at = _drop_committed(uri, opts)
    with pytest.raises(TableDropped, match=f"dropped at version {dropped_at}"):
        applier.flush()
    store = open_store(uri, opts)
    assert latest_version(store) == dropped_at, "no version after the tombstone"
    assert len(list(store.list("data/"))) == 1, "only the first flush's fragment: the refused flush kept no file"
    with pytest.raises(TableDropped):
        applier.flush()
    lamina.drop_table(uri, storage_options=opts)  # finishing the drop leaves nothing
    assert left_after_drop(uri, opts) == []


def test_applier_whose_flush_meets_the_drop_stops_instead_of_reloading(local_table_uri, monkeypatch):
    """The drop lands between the flush's reload and its commit: the commit's TableDropped stops the shard
    (before, it was taken for a lost flush race: reset, reload, TableNotFound, retried by the actor)."""
    _, applier = _started(local_table_uri, None)
    written = ingest.write_fragments

    def write_then_drop(*args, **kwargs):
        fragments = written(*args, **kwargs)
        _drop_committed(local_table_uri, None)
        return fragments

    monkeypatch.setattr(ingest, "write_fragments", write_then_drop)
    with pytest.raises(TableDropped, match="shard 0") as stopped:
        applier.flush()
    assert "10 rows" in str(stopped.value) and applier.stats.conflicts == 0
    store = open_store(local_table_uri)
    assert load_manifest(store, latest_version(store)).dropped
    assert len(list(store.list("data/"))) == 1, "the flush's data file was removed"


def test_idle_applier_notices_the_drop_and_the_actor_loop_ends(local_table_uri):
    _, applier = _started(local_table_uri, None)
    applier.flush()
    lamina.drop_table(local_table_uri)
    with pytest.raises(TableDropped, match="no rows were waiting to be flushed"):
        applier.drain()  # nothing to flush: still tells the caller the table is gone
    # the actor body on a dropped table: its loop ends (no retry with backoff) and stats say why
    lamina.create_table(local_table_uri, KEYED, primary_key="id")
    actor = WalApplier(local_table_uri, 0)
    lamina.drop_table(local_table_uri)
    with pytest.raises(TableDropped):
        actor.flush()
    actor._thread.join(timeout=120)
    assert not actor._thread.is_alive() and actor._errors == 0
    assert "dropped" in actor.stats()["error"]
    assert left_after_drop(local_table_uri, None) == []


def test_writer_refuses_to_write_after_the_drop(table_location):
    uri, opts = table_location
    lamina.create_table(uri, KEYED, primary_key="id", storage_options=opts)
    w = WalWriter(uri, 0, storage_options=opts)
    w.put_many(_rows(0, 3))
    w.commit()  # segment 0 claimed
    idle = WalWriter(uri, 1, storage_options=opts)  # opened, never claimed a segment
    lamina.drop_table(uri, storage_options=opts)

    w.put_many(_rows(3, 3))
    with pytest.raises(TableDropped, match="WAL writer for shard 0") as stopped:
        w.commit()
    assert uri.rstrip("/") in str(stopped.value) and "dropped" in str(stopped.value)
    idle.put_many(_rows(0, 1))
    with pytest.raises(TableDropped, match="shard 1"):
        idle.commit()
    with pytest.raises(TableDropped):
        w.commit()  # stays refused
    w.close(), idle.close()  # no seal written into the dropped location
    assert left_after_drop(uri, opts) == []


def test_writer_stops_at_its_next_segment_on_a_tombstone(local_table_uri):
    lamina.create_table(local_table_uri, KEYED, primary_key="id")
    w = WalWriter(local_table_uri, 0, max_segment_rows=2)
    w.put_many(_rows(0, 2))
    w.commit()
    dropped_at = _drop_committed(local_table_uri, None)
    w.put_many(_rows(2, 1))
    with pytest.raises(TableDropped, match=f"dropped at version {dropped_at}"):
        w.commit()
    assert list_segments(open_store(local_table_uri), 0) == [0], "no segment claimed in the dropped table"
    w.close()
    lamina.drop_table(local_table_uri)
    assert left_after_drop(local_table_uri, None) == []


PRODUCER = r"""
import json, sys
from lamina.wal import WalWriter

uri, opts, start = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3])
w = WalWriter(uri, 0, storage_options=opts, max_segment_rows=25)
k = 0
while True:
    w.put_many([{"id": start + 10 * k + j, "name": "p"} for j in range(10)])
    try:
        w.commit()
    except Exception as e:
        print("error", json.dumps([type(e).__name__, str(e)]), flush=True)
        break
    k += 1
    print("ok", k, flush=True)
w.close()
"""


@pytest.mark.timeout(300)
def test_drop_while_producers_and_an_applier_run_leaves_nothing(table_location):
    uri, opts = table_location
    lamina.create_table(uri, KEYED, primary_key="id", storage_options=opts)
    applier = ShardApplier(uri, 0, opts)
    producers = [
        subprocess.Popen(
            [sys.executable, "-c", PRODUCER, uri, json.dumps(opts), str(p * 10**6)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for p in range(2)
    ]
    try:
        for p in producers:  # both are committing
            for _ in range(4):
                line = p.stdout.readline()
                assert line.startswith("ok "), (line, p.stderr.read() if not line else "")
        applier.poll()
        applier.flush()
        applier.poll()
        lamina.drop_table(uri, storage_options=opts)
        with pytest.raises(TableDropped):
            applier.drain()
        for p in producers:  # each stops at its first commit the drop makes impossible
            last = ""
            for line in p.stdout:
                last = line
                if not line.startswith("ok "):
                    break
            assert p.wait(timeout=120) == 0, p.stderr.read()
            assert last.startswith("error "), (last, p.stderr.read())
            name, message = json.loads(last[len("error ") :])
            assert name == "TableDropped" and uri.rstrip("/") in message, message
    finally:
        for p in producers:
            if p.poll() is None:
                p.kill()
    assert left_after_drop(uri, opts) == [], "producers or the applier left objects in the dropped location"
