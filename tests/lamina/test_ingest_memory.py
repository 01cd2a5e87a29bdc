"""An applier's memory is bounded by flush_rows / flush_bytes whatever the WAL backlog, and
failing flushes hold it back instead of growing it or littering the table (issue 16, defect 6)."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import StorageError
from lamina.ingest import IngestOptions, ShardApplier
from lamina.manifest import VERSIONS_DIR, list_versions, load_manifest
from lamina.wal import WalWriter
from tests.lamina.helpers import HookedStore

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string()), ("v", pa.float64())])
#: The memtable's arena grows in 1 MiB chunks: a bound of a few chunks is what real memory looks like.
FLUSH_BYTES = 2 << 20
TXN_ROWS = 100
NAME_BYTES = 1000


def _backlog(uri: str, times: int) -> list[int]:
    """Committed WAL transactions holding about ``times`` x FLUSH_BYTES of row data, in several segments."""
    w = WalWriter(uri, 0, max_segment_bytes=FLUSH_BYTES * 3)
    ids, written, i = [], 0, 0
    while written < times * FLUSH_BYTES:
        batch = pa.table(
            {
                "id": pa.array(range(i, i + TXN_ROWS), pa.int64()),
                "name": [f"{k:08d}" + "n" * NAME_BYTES for k in range(i, i + TXN_ROWS)],
                "v": pa.array([float(k) for k in range(TXN_ROWS)]),
            },
            schema=SCHEMA,
        )
        w.put_batch(batch)
        w.commit()
        ids += list(range(i, i + TXN_ROWS))
        written += TXN_ROWS * (NAME_BYTES + 8)
        i += TXN_ROWS
    w.close()
    return ids


def _memtable_bytes(applier: ShardApplier) -> int:
    if applier.memtable is not None:
        return applier.memtable.arena_bytes
    return sum(len(b) for b in applier.buffered)


def _measure_every_apply(applier: ShardApplier, monkeypatch) -> list[tuple[int, int]]:
    """(memtable bytes before, after) for every transaction the applier applies."""
    sizes: list[tuple[int, int]] = []
    apply = applier._apply

    def measured(t):
        before = _memtable_bytes(applier)
        apply(t)
        sizes.append((before, _memtable_bytes(applier)))

    monkeypatch.setattr(applier, "_apply", measured)
    return sizes


@pytest.mark.parametrize("primary_key", ["id", None])
def test_applier_memtable_stays_within_flush_bytes_on_a_backlog_20x_larger(local_table_uri, monkeypatch, primary_key):
    lamina.create_table(local_table_uri, SCHEMA, primary_key=primary_key)
    ids = _backlog(local_table_uri, 20)
    applier = ShardApplier(local_table_uri, 0, options=IngestOptions(flush_bytes=FLUSH_BYTES, flush_seconds=3600))
    sizes = _measure_every_apply(applier, monkeypatch)
    for _ in range(1000):  # the actor's loop
        applier.step()
        if applier.stats.applied_rows == len(ids):
            break
    applier.flush()
    assert applier.stats.applied_rows == len(ids) and applier.unflushed_rows == 0
    one_txn = max(after - before for before, after in sizes)
    peak = max(after for _, after in sizes)
    assert peak <= FLUSH_BYTES + one_txn, f"memtable reached {peak} bytes with flush_bytes {FLUSH_BYTES}"
    assert applier.snapshot().peak_memtable_bytes == peak
    assert applier.stats.flushes >= 20
    t = lamina.open_table(local_table_uri)
    assert sorted(t.to_arrow(columns=["id"]).column("id").to_pylist()) == sorted(ids), "every row exactly once"


def _unreferenced_data_files(t) -> set[str]:
    referenced: set[str] = set()
    for v in list_versions(t.store):
        referenced |= load_manifest(t.store, v).referenced_paths()
    return {o.path for o in t.store.list("data/")} - referenced


@pytest.mark.parametrize("mode", ["put", "read"])
def test_failing_flushes_hold_the_applier_back_and_leave_only_what_cleanup_removes(local_table_uri, monkeypatch, mode):
    """``put``: the manifest put fails, so the outcome is unknown and the flush's data file
    stays, unreferenced, for cleanup. ``read``: the commit fails before any put (known not
    committed), so the flush removes its data file."""
    created = lamina.create_table(local_table_uri, SCHEMA, primary_key="id").version
    ids = _backlog(local_table_uri, 3)
    applier = ShardApplier(local_table_uri, 0, options=IngestOptions(flush_bytes=FLUSH_BYTES, flush_seconds=3600))
    sizes = _measure_every_apply(applier, monkeypatch)
    # manifest writes ("put") or manifest reads ("read") fail until the hook is removed
    method, verb = ("put_if_absent", "put") if mode == "put" else ("get", "get")
    faulty = HookedStore(applier.store).on(
        method, prefix=VERSIONS_DIR, fail=lambda path: StorageError(f"injected: {verb} of {path} failed")
    )
    applier.store = faulty
    applied, failures = [], 0
    for _ in range(10):  # the actor's loop while storage is down
        try:
            applier.step()
        except StorageError:
            failures += 1
        applied.append(applier.stats.applied_rows)
    assert failures == 10
    assert len(set(applied)) == 1, "no WAL is applied while the memtable is full and flushes fail"
    assert 0 < applied[0] < len(ids)
    one_txn = max(after - before for before, after in sizes)
    assert max(after for _, after in sizes) <= FLUSH_BYTES + one_txn
    t = lamina.open_table(local_table_uri)
    assert t.version == created and t.count_rows() == 0
    orphans = _unreferenced_data_files(t)
    if mode == "put":
        assert len(orphans) == 10, "an unknown outcome keeps its file, for cleanup"
    else:
        assert orphans == set(), "a flush known not to be committed removes its file"
    assert applier.stats.flush_failures == 10

    faulty.hooks.clear()  # storage is back: the backlog goes in, each row once
    applier.drain()
    t = lamina.open_table(local_table_uri)
    assert sorted(t.to_arrow(columns=["id"]).column("id").to_pylist()) == sorted(ids)
    assert _unreferenced_data_files(t) == orphans
    t.cleanup(older_than=0, enforce_retention=False)
    assert {o.path for o in t.store.list("data/")} == t.manifest.referenced_paths() - {
        p for p in t.manifest.referenced_paths() if not p.startswith("data/")
    }
    assert sorted(lamina.open_table(local_table_uri).to_arrow(columns=["id"]).column("id").to_pylist()) == sorted(ids)
