"""Object stores: the operations every table call stands on, locally and on S3 (moto server)."""

from __future__ import annotations

import os

import pytest
from botocore.exceptions import ClientError

from lamina.errors import CorruptFile, ObjectNotFound, StorageError
from lamina.store import open_store
from lamina.store.s3 import S3Store


@pytest.fixture
def store(table_location):
    uri, opts = table_location
    return open_store(uri, opts)


def test_put_get_range_size_list_delete(store):
    store.put("a/x.bin", b"0123456789")
    store.put("a/y.bin", b"abc")
    store.put("b/z.bin", b"")
    assert store.get("a/x.bin") == b"0123456789"
    assert store.get_range("a/x.bin", 2, 3) == b"234"
    assert store.size("a/x.bin") == 10 and store.exists("a/y.bin") and not store.exists("a/nope")
    assert [(o.path, o.size) for o in store.list("a/")] == [("a/x.bin", 10), ("a/y.bin", 3)]
    assert [o.path for o in store.list("")] == ["a/x.bin", "a/y.bin", "b/z.bin"]
    assert [o.path for o in store.list("a/", start_after="a/x.bin")] == ["a/y.bin"]
    assert [o.path for o in store.list("", start_after="a/y.bin")] == ["b/z.bin"]
    with pytest.raises(CorruptFile, match="shorter than expected"):
        store.get_range("a/x.bin", 8, 5)
    store.delete(["a/x.bin", "a/missing.bin"])
    with pytest.raises(ObjectNotFound, match="a/x.bin does not exist"):
        store.get("a/x.bin")


def test_put_if_absent_refuses_to_replace(store):
    assert store.put_if_absent("_versions/1", b"first") is True
    assert store.put_if_absent("_versions/1", b"second") is False
    assert store.get("_versions/1") == b"first"


def test_put_file_multipart(s3_table_uri, s3_options, tmp_path):
    store = open_store(s3_table_uri, {**s3_options, "multipart_threshold": 5 * 2**20, "multipart_chunk_size": 5 * 2**20})
    src = tmp_path / "big.bin"
    payload = os.urandom(12 * 2**20 + 123)
    src.write_bytes(payload)
    store.put_file("data/big.bin", str(src))
    assert store.size("data/big.bin") == len(payload)
    assert store.get("data/big.bin") == payload


def test_local_put_file_streams(local_table_uri, tmp_path):
    store = open_store(local_table_uri)
    src = tmp_path / "f.bin"
    src.write_bytes(b"x" * 1000)
    store.put_file("data/f.bin", str(src))
    assert store.get("data/f.bin") == b"x" * 1000


class _Flaky:
    """A boto3 client stand-in that fails the first ``n`` calls of one method with ``code``."""

    def __init__(self, client, method, code, status, n):
        self._client, self._method, self._code, self._status, self.left = client, method, code, status, n
        self.calls = 0

    def __getattr__(self, name):
        real = getattr(self._client, name)
        if name != self._method:
            return real

        def call(**kwargs):
            self.calls += 1
            if self.left > 0:
                self.left -= 1
                raise ClientError({"Error": {"Code": self._code, "Message": "injected"},
                                   "ResponseMetadata": {"HTTPStatusCode": self._status}}, name)
            return real(**kwargs)

        return call


@pytest.mark.parametrize("code,status", [("SlowDown", 503), ("InternalError", 500), ("ConditionalRequestConflict", 409)])
def test_s3_retries_throttling_5xx_and_conditional_conflicts(s3_table_uri, s3_options, code, status):
    store = S3Store(s3_table_uri, {**s3_options, "max_attempts": 4})
    flaky = _Flaky(store._client(), "put_object", code, status, n=3)
    store._shared_client = flaky
    assert store.put_if_absent("_versions/x", b"data") is True
    assert flaky.calls == 4
    assert store.get("_versions/x") == b"data"


def test_s3_gives_up_after_max_attempts(s3_table_uri, s3_options):
    store = S3Store(s3_table_uri, {**s3_options, "max_attempts": 2})
    store._shared_client = _Flaky(store._client(), "get_object", "SlowDown", 503, n=5)
    with pytest.raises(StorageError, match="failed after 2 attempts: SlowDown"):
        store.get("anything")


def test_s3_does_not_retry_client_errors(s3_table_uri, s3_options):
    store = S3Store(s3_table_uri, s3_options)
    flaky = _Flaky(store._client(), "get_object", "AccessDenied", 403, n=5)
    store._shared_client = flaky
    with pytest.raises(StorageError, match="access denied"):
        store.get("x")
    assert flaky.calls == 1


def test_s3_store_honours_aws_endpoint_url(monkeypatch, s3_table_uri, moto_server):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    store = open_store(s3_table_uri)
    store.put("k", b"v")
    assert store.get("k") == b"v"


def test_stores_pickle(store):
    import pickle

    store.put("k", b"v")
    assert pickle.loads(pickle.dumps(store)).get("k") == b"v"
