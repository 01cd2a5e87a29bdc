"""The WAL without Ray: codec round trips through writer, applier and Parquet (local and S3),
torn tails, producer crashes, restarts and racing appliers, retention."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

import lamina
from lamina import _native
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.ingest import IngestOptions, ShardApplier
from lamina.wal import DATA_FILE, INDEX_FILE, WalWriter, list_segments, segment_prefix

REPO = Path(__file__).resolve().parents[2]

TYPES = pa.schema(
    [
        ("b", pa.bool_()),
        ("i8", pa.int8()),
        ("i16", pa.int16()),
        ("i32", pa.int32()),
        ("i64", pa.int64()),
        ("u8", pa.uint8()),
        ("u64", pa.uint64()),
        ("f32", pa.float32()),
        ("f64", pa.float64()),
        ("d", pa.date32()),
        ("ts", pa.timestamp("ns", tz="UTC")),
        ("t", pa.time64("us")),
        ("dur", pa.duration("ms")),
        ("s", pa.string()),
        ("ls", pa.large_string()),
        ("bin", pa.binary()),
        ("fsb", pa.binary(4)),
    ]
)


def every_type_rows(n: int, seed: int) -> pa.Table:
    rng = np.random.default_rng(seed)
    null = lambda: rng.random(n) < 0.2  # noqa: E731
    big = "λ" * 70_000
    strings = [None if rng.random() < 0.2 else ("" if i % 7 == 0 else (big if i % 97 == 5 else f"s{i}é")) for i in range(n)]
    return pa.table(
        {
            "b": pa.array(rng.random(n) < 0.5, mask=null()),
            "i8": pa.array(rng.integers(-128, 128, n).astype(np.int8), mask=null()),
            "i16": pa.array(rng.integers(-(2**15), 2**15, n).astype(np.int16), mask=null()),
            "i32": pa.array(rng.integers(-(2**31), 2**31, n).astype(np.int32), mask=null()),
            "i64": pa.array(rng.integers(-(2**63), 2**63 - 1, n, dtype=np.int64), mask=null()),
            "u8": pa.array(rng.integers(0, 256, n).astype(np.uint8), mask=null()),
            "u64": pa.array(rng.integers(0, 2**64 - 1, n, dtype=np.uint64), mask=null()),
            "f32": pa.array(rng.random(n).astype(np.float32), mask=null()),
            "f64": pa.array(rng.standard_normal(n), mask=null()),
            "d": pa.array(rng.integers(-1000, 30000, n).astype(np.int32), mask=null()).cast(pa.date32()),
            "ts": pa.array(rng.integers(0, 2**62, n), mask=null()).cast(pa.timestamp("ns", tz="UTC")),
            "t": pa.array(rng.integers(0, 86_400_000_000, n), mask=null()).cast(pa.time64("us")),
            "dur": pa.array(rng.integers(-(10**9), 10**9, n), mask=null()).cast(pa.duration("ms")),
            "s": pa.array(strings, type=pa.string()),
            "ls": pa.array(strings, type=pa.large_string()),
            "bin": pa.array([None if s is None else s.encode()[:50] for s in strings], type=pa.binary()),
            "fsb": pa.array([None if i % 5 == 0 else bytes([i % 256] * 4) for i in range(n)], type=pa.binary(4)),
        },
        schema=TYPES,
    )


def test_native_codec_round_trips_every_type():
    data = every_type_rows(500, 1)
    for batch in data.to_batches():
        raw, ends = _native.wal_encode(batch)
        assert len(ends) == batch.num_rows and ends[-1].as_py() == len(raw)
        back, deletes = _native.wal_decode(raw, TYPES, "mem")
        assert back.equals(batch) and deletes.to_pylist() == [0] * batch.num_rows


def test_writer_applier_round_trip(table_location):
    uri, opts = table_location
    lamina.create_table(uri, TYPES, storage_options=opts)
    data = every_type_rows(1200, 2)
    with WalWriter(uri, 0, storage_options=opts) as w:
        w.put_batch(data.slice(0, 500))
        assert w.commit() == 0
        w.put_many(data.slice(500, 300).to_pylist())
        w.put(data.slice(800, 1).to_pylist()[0])
        assert w.commit() == 1
        w.put_batch(data.slice(801))
    applier = ShardApplier(uri, 0, opts)
    assert applier.poll() == 1200
    version = applier.flush()
    t = lamina.open_table(uri, storage_options=opts)
    assert t.version == version and t.to_arrow().equals(data)
    assert t.manifest.wal_watermarks == {"0/0000000000": 3}


def test_bad_rows_are_refused_at_put(local_table_uri):
    lamina.create_table(local_table_uri, pa.schema([("id", pa.int64()), ("name", pa.string(), False)]))
    w = WalWriter(local_table_uri, 0)
    with pytest.raises(SchemaMismatch, match=r"unknown column\(s\) \['nme'\]"):
        w.put({"id": 1, "nme": "x"})
    with pytest.raises(SchemaMismatch, match="int64"):
        w.put({"id": "one", "name": "x"})
    with pytest.raises(SchemaMismatch, match="'name' is not nullable"):
        w.put({"id": 1})
    with pytest.raises(InvalidArgument, match="delete\\(pk\\) needs a table with a primary key"):
        w.delete(1)
    with pytest.raises(InvalidArgument, match="shard"):
        WalWriter(local_table_uri, -1)
    assert w.commit() is None and list_segments(w.store, 0) == []
    nested = local_table_uri + "-nested"
    lamina.create_table(nested, pa.schema([("v", pa.list_(pa.int32()))]))
    with pytest.raises(InvalidArgument, match='WAL: column "v" of type List'):
        WalWriter(nested, 0)


def _writer(uri: str, shard: int, n: int, start: int) -> None:
    w = WalWriter(uri, shard)
    for k in range(n):
        w.put_many([{"id": start + 10 * k + j, "name": f"n{j}"} for j in range(10)])
        w.commit()
    w.close()


SIMPLE = pa.schema([("id", pa.int64()), ("name", pa.string())])


def test_torn_tails_are_ignored_and_reported(local_table_uri, caplog):
    lamina.create_table(local_table_uri, SIMPLE)
    _writer(local_table_uri, 0, 5, 0)
    t = lamina.open_table(local_table_uri)
    seg = segment_prefix(0, 0)
    index = t.store.local_path(seg + INDEX_FILE)
    data = t.store.local_path(seg + DATA_FILE)
    # the last transaction's rows are torn (its entry points past the data) ...
    size = os.path.getsize(data)
    with open(data, "r+b") as f:
        f.truncate(size - 3)
    # ... and a partial entry follows
    with open(index, "ab") as f:
        f.write(b"\x01\x02\x03")
    applier = ShardApplier(local_table_uri, 0)
    assert applier.poll() == 40
    applier.flush()
    assert sorted(lamina.open_table(local_table_uri).to_arrow().column("id").to_pylist()) == list(range(40))
    assert "points past the data" in applier.stats.torn[0] and "torn WAL tail" in caplog.text


def test_a_flipped_byte_stops_at_that_transaction(table_location):
    uri, opts = table_location
    lamina.create_table(uri, SIMPLE, storage_options=opts)
    w = WalWriter(uri, 3, storage_options=opts)
    for k in range(3):
        w.put_many([{"id": k * 10 + j} for j in range(10)])
        w.commit()
    store = w.store
    local = store.local_path(segment_prefix(3, 0) + DATA_FILE)
    if local is not None:
        with open(local, "r+b") as f:
            f.seek(250)
            b = f.read(1)
            f.seek(250)
            f.write(bytes([b[0] ^ 0xFF]))  # inside transaction 1 (each holds 200 bytes)
    else:
        name = segment_prefix(3, 0) + "0000000001.t"
        raw = bytearray(store.get(name))
        raw[5] ^= 0xFF
        store.delete([name])
        store.put(name, bytes(raw))
    applier = ShardApplier(uri, 3, opts)
    assert applier.poll() == 10, "only the transactions before the damaged one"
    assert "checksum" in applier.stats.torn[0]


def test_producer_killed_before_commit_loses_only_uncommitted_rows(local_table_uri):
    lamina.create_table(local_table_uri, SIMPLE)
    script = textwrap.dedent(f"""
        import os, signal
        from lamina.wal import WalWriter
        w = WalWriter({local_table_uri!r}, 0)
        for k in range(20):
            w.put_many([{{"id": k * 100 + j}} for j in range(100)])
            w.commit()
        w.put_many([{{"id": 10**6 + j}} for j in range(100)])   # never committed
        os.kill(os.getpid(), signal.SIGKILL)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})
    assert proc.returncode == -signal.SIGKILL
    applier = ShardApplier(local_table_uri, 0)
    applier.poll()
    applier.flush()
    ids = lamina.open_table(local_table_uri).to_arrow().column("id").to_pylist()
    assert sorted(ids) == list(range(2000))


def test_restart_and_racing_appliers_apply_each_transaction_once(table_location):
    uri, opts = table_location
    lamina.create_table(uri, SIMPLE, storage_options=opts)
    _writer_opts = dict(storage_options=opts)
    w = WalWriter(uri, 0, **_writer_opts)
    a = ShardApplier(uri, 0, opts)
    b = ShardApplier(uri, 0, opts)  # a zombie: the same shard applied twice
    expected = []
    for k in range(6):
        rows = [{"id": k * 10 + j} for j in range(10)]
        expected += [r["id"] for r in rows]
        w.put_many(rows)
        w.commit()
        a.poll()
        b.poll()
        if k % 2 == 0:
            a.flush()
        else:
            b.flush()  # loses the race where a already flushed these transactions, then resumes
    a.poll(), a.flush(), b.poll(), b.flush()
    restarted = ShardApplier(uri, 0, opts)  # after a crash: memtable gone, watermarks committed
    assert restarted.poll() == 0 and restarted.flush() is None
    ids = lamina.open_table(uri, storage_options=opts).to_arrow().column("id").to_pylist()
    assert sorted(ids) == sorted(expected), "every committed row exactly once"
    assert a.stats.conflicts + b.stats.conflicts >= 1


def test_multiple_producers_and_rollover(local_table_uri):
    lamina.create_table(local_table_uri, SIMPLE)
    code = "from tests.lamina.test_wal import _writer; _writer({!r}, 0, 30, {})"
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", code.format(local_table_uri, p * 100000)],
            cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)},
        )
        for p in range(3)
    ]
    w = WalWriter(local_table_uri, 0, max_segment_rows=25)
    for k in range(6):
        w.put_many([{"id": 10**6 + k * 10 + j} for j in range(10)])
        w.commit()
    w.close()
    applier = ShardApplier(local_table_uri, 0)
    while any(p.poll() is None for p in procs):
        applier.poll()
        applier.flush()
    assert all(p.returncode == 0 for p in procs)
    applier.poll()
    applier.flush()
    ids = lamina.open_table(local_table_uri).to_arrow().column("id").to_pylist()
    expected = [p * 100000 + i for p in range(3) for i in range(300)] + [10**6 + i for i in range(60)]
    assert sorted(ids) == sorted(expected)
    assert len(list_segments(applier.store, 0)) == 3 + 2, "one segment per producer; the rolling one (25 rows) used two"


def test_applied_sealed_segments_are_removed_after_retention(local_table_uri):
    lamina.create_table(local_table_uri, SIMPLE)
    _writer(local_table_uri, 0, 2, 0)
    w = WalWriter(local_table_uri, 0)  # an open (unsealed) segment is never removed
    w.put({"id": 99})
    w.commit()
    applier = ShardApplier(local_table_uri, 0, options=IngestOptions(retention_seconds=3600))
    applier.poll()
    assert applier.remove_applied_segments() == [], "not flushed yet"
    applier.flush()
    assert applier.remove_applied_segments() == [], "younger than the retention"
    assert applier.remove_applied_segments(now=time.time() + 7200) == [0]
    assert [o.path.rsplit("/", 1)[1] for o in applier.store.list(segment_prefix(0, 0))] == ["claim"]
    assert ShardApplier(local_table_uri, 0).poll() == 0, "nothing is applied twice after the removal"
    with WalWriter(local_table_uri, 0) as again:  # a new writer never reuses a removed segment's number
        again.put({"id": 100})
    assert list_segments(applier.store, 0) == [0, 1, 2]
    assert ShardApplier(local_table_uri, 0).poll() == 1
    assert lamina.open_table(local_table_uri).count_rows() == 21


KEYED = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])


def keyed_model_check(uri: str, applier: ShardApplier, model: dict, opts=None) -> None:
    """get/get_many and a scan agree with the model: key -> row (absent = deleted or never written)."""
    absent = 10**9 if all(isinstance(k, int) for k in model) else "absent"
    keys = sorted(model) + [absent]
    got = applier.get_many(keys)
    for k, row in zip(keys, got):
        assert row == model.get(k), k
    assert applier.get(keys[0]) == model.get(keys[0])
    t = lamina.open_table(uri, storage_options=opts)
    flushed = {r["id"]: r for r in t.to_arrow().to_pylist()}
    assert len(flushed) == t.count_rows(), "merge-on-write: never two live rows for a key"


@pytest.mark.parametrize("key_type", [pa.int64(), pa.string()])
def test_upserts_and_deletes_across_memtable_flushes_and_compaction(table_location, key_type):
    from lamina.commit import commit
    from lamina.rewrite import full_rewrite
    from lamina.transaction import Rewrite

    uri, opts = table_location
    schema = pa.schema([("id", key_type), ("name", pa.string()), ("v", pa.float64())])
    lamina.create_table(uri, schema, primary_key="id", storage_options=opts)
    key = (lambda i: i) if key_type == pa.int64() else (lambda i: f"k{i:05d}")
    w = WalWriter(uri, 0, storage_options=opts)
    applier = ShardApplier(uri, 0, opts)
    model: dict = {}
    rng = np.random.default_rng(7)
    for step in range(12):
        for _ in range(40):
            i = int(rng.integers(0, 60))
            if rng.random() < 0.2:
                w.delete(key(i))
                model.pop(key(i), None)
            else:
                row = {"id": key(i), "name": f"s{step}", "v": float(rng.random())}
                w.put(row)
                model[key(i)] = row
        w.commit()
        applier.poll()
        keyed_model_check(uri, applier, model, opts)  # memtable over flushed rows
        if step % 3 == 2:
            applier.flush()
            keyed_model_check(uri, applier, model, opts)
        if step == 7:  # compaction rewrites flushed fragments under the applier
            t = lamina.open_table(uri, storage_options=opts)
            ids = [f.id for f in t.fragments()]
            commit(t.store, Rewrite(t.version, [full_rewrite(t.store, t.manifest, ids, t.write_options)]), t.manifest)
    applier.poll()
    applier.flush()
    t = lamina.open_table(uri, storage_options=opts)
    assert {r["id"]: r for r in t.to_arrow().to_pylist()} == model
    assert sum(f.deleted_rows for f in t.fragments()) > 0, "older versions were deleted on write"
    keyed_model_check(uri, ShardApplier(uri, 0, opts), model, opts)  # a restarted applier: table only


def test_primary_key_lookups_use_the_btree_index(local_table_uri):
    lamina.create_table(local_table_uri, KEYED, primary_key="id")
    with WalWriter(local_table_uri, 0) as w:
        w.put_many([{"id": i, "name": "x", "v": 1.0} for i in range(1000)])
    applier = ShardApplier(local_table_uri, 0)
    applier.poll()
    applier.flush()
    lamina.open_table(local_table_uri).create_index("id", "btree")
    with WalWriter(local_table_uri, 0) as w:
        w.put({"id": 5, "name": "new", "v": 2.0})
        w.delete(6)
    applier.poll()
    assert applier.get(5)["name"] == "new" and applier.get(6) is None and applier.get(7)["name"] == "x"
    applier.flush()
    t = lamina.open_table(local_table_uri)
    assert "index 'id_btree'" in t.explain("id = 7")
    got = {r["id"]: r["name"] for r in t.to_arrow(filter="id IN (5, 6, 7)").to_pylist()}
    assert got == {5: "new", 7: "x"}
    assert ShardApplier(local_table_uri, 0).get(5)["name"] == "new"
