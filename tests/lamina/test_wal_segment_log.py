"""The WAL's segment layouts behind one interface: the bytes each puts on storage (FORMAT §11.1)
and how each reads back, retries and seals."""

from __future__ import annotations

import json
import zlib

import pytest

from lamina.errors import WalError
from lamina.store import open_store
from lamina.wal import DATA_FILE, ENTRY, INDEX_FILE, SEALED, LocalSegmentLog, ObjectSegmentLog, segment_log, segment_prefix

FIRST, SECOND = b"rows of the first transaction", b"second"


@pytest.fixture
def store(table_location):
    uri, opts = table_location
    return open_store(uri, opts)


def entry(start: int, data: bytes, rows: int, txn: int) -> bytes:
    return ENTRY.pack(start, start + len(data), rows, zlib.crc32(data), txn)


def test_the_store_picks_the_layout_and_the_bytes_are_the_format(store):
    log = segment_log(store, 2, 7)
    assert type(log) is (LocalSegmentLog if store.is_local else ObjectSegmentLog)
    log.append(0, 0, FIRST, 3)
    log.append(1, len(FIRST), SECOND, 1)
    log.seal(2)
    seg = segment_prefix(2, 7)
    assert seg == "_wal/2/0000000007/"
    if store.is_local:
        assert store.get(seg + DATA_FILE) == FIRST + SECOND
        assert store.get(seg + INDEX_FILE) == entry(0, FIRST, 3, 0) + entry(len(FIRST), SECOND, 1, 1)
        written = [seg + DATA_FILE, seg + INDEX_FILE]
    else:
        assert store.get(seg + "0000000000.t") == FIRST + entry(0, FIRST, 3, 0)
        assert store.get(seg + "0000000001.t") == SECOND + entry(0, SECOND, 1, 1)
        written = [seg + "0000000000.t", seg + "0000000001.t"]
    assert json.loads(store.get(seg + SEALED)) == {"transactions": 2}
    assert sorted(o.path for o in store.list(seg)) == sorted(written + [seg + SEALED])
    txns, state = log.read(0)
    assert [(t.shard, t.segment, t.txn, t.rows, t.data) for t in txns] == [(2, 7, 0, 3, FIRST), (2, 7, 1, 1, SECOND)]
    assert (state.committed, state.sealed, state.torn, state.gone, state.more) == (2, 2, None, None, False)
    txns, state = log.read(1)
    assert [t.data for t in txns] == [SECOND] and state.committed == 2
    txns, state = log.read(0, max_bytes=1)
    assert [t.data for t in txns] == [FIRST] and state.more and state.committed == 1


def test_a_retried_append_is_one_transaction(store):
    log = segment_log(store, 0, 0)
    seg = segment_prefix(0, 0)
    if store.is_local:
        store.append(seg + DATA_FILE, b"bytes of an attempt that failed before its entry")
    else:
        log.append(0, 0, FIRST, 3)  # landed, its answer lost
    log.append(0, 0, FIRST, 3)
    log.append(1, len(FIRST), SECOND, 1)
    txns, state = log.read(0)
    assert [(t.txn, t.data) for t in txns] == [(0, FIRST), (1, SECOND)]
    assert state.torn is None and state.sealed is None


def test_an_object_segment_written_by_another_writer_is_refused(s3_table_uri, s3_options):
    store = open_store(s3_table_uri, s3_options)
    segment_log(store, 0, 0).append(0, 0, b"someone else's rows", 1)
    with pytest.raises(WalError, match="another writer uses segment 0"):
        segment_log(store, 0, 0).append(0, 0, FIRST, 3)


def test_a_sealed_segment_whose_data_is_gone_is_not_a_torn_tail(store):
    log = segment_log(store, 0, 0)
    log.append(0, 0, FIRST, 3)
    log.seal(1)
    seg = segment_prefix(0, 0)
    store.delete([o.path for o in store.list(seg) if not o.path.endswith(SEALED)])
    txns, state = log.read(0)
    assert txns == [] and state.gone and state.torn is None and state.sealed == 1
