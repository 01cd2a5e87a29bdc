"""A WAL commit whose S3 put failed without an answer can be retried: it recognises its own
transaction if it landed, and nothing is applied twice or lost."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import StorageError
from lamina.ingest import ShardApplier
from lamina.wal import WalWriter
from tests.lamina.helpers import HookedStore

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


@pytest.mark.parametrize("lands", [True, False])
def test_wal_commit_retried_after_a_lost_answer_applies_once(s3_table_uri, s3_options, lands):
    lamina.create_table(s3_table_uri, SCHEMA, storage_options=s3_options)
    w = WalWriter(s3_table_uri, 0, storage_options=s3_options)
    w.put_many([{"id": i, "name": f"n{i}"} for i in range(5)])
    assert w.commit() == 0
    w.store = HookedStore(w.store).on(
        "put_if_absent",
        when=lambda path: path.endswith(".t"),
        times=1,
        lands=lands,
        fail=lambda path: StorageError(f"writing {path} failed: connection reset"),
    )
    w.put_many([{"id": i, "name": f"n{i}"} for i in range(5, 10)])
    if lands:
        assert w.commit() == 1, "a put that landed is recognised as this transaction's"
    else:
        with pytest.raises(StorageError):
            w.commit()  # nothing landed: the error says so, and the rows stay buffered
        assert w.commit() == 1, "the retried commit is the same transaction"
    w.put({"id": 10, "name": "n10"})
    assert w.commit() == 2
    w.close()
    applier = ShardApplier(s3_table_uri, 0, s3_options)
    applier.poll()
    applier.flush()
    got = lamina.open_table(s3_table_uri, storage_options=s3_options).to_arrow().sort_by("id")
    assert got.column("id").to_pylist() == list(range(11))
