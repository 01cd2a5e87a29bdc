"""A WAL commit whose S3 put failed without an answer can be retried: it recognises its own
transaction if it landed, and nothing is applied twice or lost."""

from __future__ import annotations

import pyarrow as pa
import pytest

import lamina
from lamina.errors import StorageError
from lamina.ingest import ShardApplier
from lamina.wal import WalWriter

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


class _AnswerLost:
    """Wraps a store: the next transaction put lands (or not), then fails as if its answer was lost."""

    def __init__(self, inner, lands: bool):
        self._inner, self.lands, self.armed = inner, lands, True

    def __getattr__(self, name):
        return getattr(self._inner, name)

    def put_if_absent(self, path, data):
        if self.armed and path.endswith(".t"):
            self.armed = False
            if self.lands:
                self._inner.put_if_absent(path, data)
            raise StorageError(f"writing {path} failed: connection reset")
        return self._inner.put_if_absent(path, data)


@pytest.mark.parametrize("lands", [True, False])
def test_wal_commit_retried_after_a_lost_answer_applies_once(s3_table_uri, s3_options, lands):
    lamina.create_table(s3_table_uri, SCHEMA, storage_options=s3_options)
    w = WalWriter(s3_table_uri, 0, storage_options=s3_options)
    w.put_many([{"id": i, "name": f"n{i}"} for i in range(5)])
    assert w.commit() == 0
    w.store = _AnswerLost(w.store, lands)
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
