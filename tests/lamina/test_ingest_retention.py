"""WAL retention: only sealed segments whose every transaction is committed to the table go
(issue 16, section D), and two appliers of one shard expiring or reading the same segments
never fail each other (issue 16, defect 10). Interleavings are forced through a store hook."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa

import lamina
from lamina.ingest import IngestOptions, ShardApplier
from lamina.wal import WalWriter, list_segments, segment_prefix
from tests.lamina.helpers import HookedStore

SIMPLE = pa.schema([("id", pa.int64()), ("name", pa.string())])
LATER = 2e10  # a "now" far past every seal's retention


def _on_first_get(store, matches: Callable[[str], bool], hook: Callable[[str], None], after: bool = False) -> HookedStore:
    """The store, calling ``hook(path)`` once, before (or ``after``) the first ``get`` whose path ``matches``."""

    def get(real, path, *args, **kwargs):
        if not after:
            hook(path)
        data = real(path, *args, **kwargs)
        if after:
            hook(path)
        return data

    return HookedStore(store).on("get", when=matches, times=1, instead=get)


def _write(uri: str, ids: list[int], opts=None, close: bool = True, per_txn: int = 5, shard: int = 0) -> WalWriter:
    w = WalWriter(uri, shard, storage_options=opts)
    for k in range(0, len(ids), per_txn):
        w.put_many([{"id": i, "name": f"n{i}"} for i in ids[k : k + per_txn]])
        w.commit()
    if close:
        w.close()
    return w


def _ids(uri: str, opts=None) -> list[int]:
    return sorted(lamina.open_table(uri, storage_options=opts).to_arrow(columns=["id"]).column("id").to_pylist())


def _leftover(store, segment: int, shard: int = 0) -> list[str]:
    return [o.path.rsplit("/", 1)[1] for o in store.list(segment_prefix(shard, segment))]


def test_two_appliers_expiring_the_same_segments_both_succeed(table_location):
    uri, opts = table_location
    lamina.create_table(uri, SIMPLE, storage_options=opts)
    _write(uri, list(range(10)), opts)
    _write(uri, list(range(10, 20)), opts)
    a = ShardApplier(uri, 0, opts)
    a.poll()
    a.flush()
    b = ShardApplier(uri, 0, opts)  # a zombie of the same shard
    removed_by_b: list[int] = []
    # a has listed segment 0 and its seal; before a reads the seal, b removes every applied segment
    a.store = _on_first_get(
        a.store,
        lambda p: p == segment_prefix(0, 0) + "sealed",
        lambda _p: removed_by_b.extend(b.remove_applied_segments(now=LATER)),
    )
    assert a.remove_applied_segments(now=LATER) == [], "b did the work; a finds it done"
    assert a.store.fired and removed_by_b == [0, 1]
    assert _leftover(a.store, 0) == ["claim"] and _leftover(a.store, 1) == ["claim"]
    for applier in (a, b):
        applier.step()
        assert applier.poll() == 0 and applier.flush() is None and applier.stats.torn == {}
    assert _ids(uri, opts) == list(range(20))


def test_an_applier_reading_a_segment_another_applier_removed_goes_on(table_location):
    uri, opts = table_location
    lamina.create_table(uri, SIMPLE, storage_options=opts)
    _write(uri, list(range(10)), opts)
    a = ShardApplier(uri, 0, opts)  # started before b flushed the segment
    b = ShardApplier(uri, 0, opts)

    def b_applies_flushes_and_removes(_path: str) -> None:
        b.poll()
        b.flush()
        assert b.remove_applied_segments(now=LATER) == [0]

    seg = segment_prefix(0, 0)
    local = a.store.local_path(seg) is not None
    # mid-read: locally right after a read the seal, on S3 after it listed the transaction objects
    a.store = _on_first_get(
        a.store,
        (lambda p: p == seg + "sealed") if local else (lambda p: p.endswith(".t")),
        b_applies_flushes_and_removes,
        after=local,
    )
    a.step()  # must not fail, nor report a torn tail: b committed what a could not read
    assert a.store.fired
    assert a.stats.torn == {} and a.stats.applied_rows == 0
    assert a.flush() is None and a.poll() == 0
    assert _ids(uri, opts) == list(range(10))


def test_a_sealed_segment_applied_but_not_flushed_survives_retention_and_is_replayed(local_table_uri):
    """Retention removes a segment only when it is sealed, its seal is older than the retention
    and the table's watermark covers every transaction: each condition is checked here on a
    segment that passes all the others (shard 2, so shards are not mixed up)."""
    uri, s = local_table_uri, 2
    lamina.create_table(uri, SIMPLE)
    a = ShardApplier(uri, s, options=IngestOptions(retention_seconds=3600))
    _write(uri, list(range(0, 10)), shard=s)  # segment 0: committed below
    w1 = _write(uri, list(range(10, 15)), close=False, shard=s)  # segment 1: 1 transaction committed below, 1 more after
    _write(uri, list(range(20, 30)), shard=s)  # segment 2: committed below
    w3 = _write(uri, list(range(30, 35)), close=False, shard=s)  # segment 3: committed below, never sealed
    a.poll()
    a.flush()
    w1.put_many([{"id": i, "name": f"n{i}"} for i in range(15, 20)])
    w1.commit()
    w1.close()  # segment 1: sealed at 2, watermark 1
    _write(uri, list(range(40, 45)), shard=s)  # segment 4: sealed at 1, applied below, not flushed
    a.poll()
    assert a.positions == {0: 2, 1: 2, 2: 2, 3: 1, 4: 1} and a.starts == {0: 2, 1: 1, 2: 2, 3: 1}

    assert a.remove_applied_segments() == [], "every seal is younger than the retention"
    assert a.remove_applied_segments(now=LATER) == [0, 2]
    for kept in (1, 3, 4):
        assert len(_leftover(a.store, kept, s)) > 1, f"segment {kept} must survive retention"

    restarted = ShardApplier(uri, s)  # the memtable of a is lost: segments 1 and 4 are replayed
    assert restarted.poll() == 10
    restarted.flush()
    expected = list(range(0, 35)) + list(range(40, 45))
    assert _ids(uri) == expected, "every row exactly once"
    assert restarted.remove_applied_segments(now=LATER) == [1, 4]
    w3.close()
    assert restarted.remove_applied_segments(now=LATER) == [3]
    assert list_segments(restarted.store, s) == [0, 1, 2, 3, 4]
    assert all(_leftover(restarted.store, g, s) == ["claim"] for g in range(5))
    assert ShardApplier(uri, s).poll() == 0 and _ids(uri) == expected
