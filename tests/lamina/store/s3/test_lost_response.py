"""Conditional S3 writes whose response is lost after S3 executed them (issue 16, defect 7).

A proxy in front of moto forwards a request, lets it land, then resets the connection, so
the store retries a write that already happened. The retry meets 412 (or, for multipart,
an upload that is gone) for the caller's own object: it must be reported as written, and
only the caller whose writer token is on the object may claim it.
"""

from __future__ import annotations

import os
import threading

import boto3
import pyarrow as pa
import pytest

import lamina
from lamina.ingest import ShardApplier
from lamina.manifest import list_versions
from lamina.store import open_store
from lamina.wal import WalWriter, list_segments

SIMPLE = pa.schema([("id", pa.int64())])
MIB = 2**20
MULTIPART = {"multipart_threshold": 5 * MIB, "multipart_chunk_size": 5 * MIB}
COMPLETE = r"\?uploadId="  # CompleteMultipartUpload is POST <key>?uploadId=...


@pytest.fixture
def proxied(proxy, s3_options):
    """storage_options that reach moto through the fault proxy."""
    return {**s3_options, "endpoint_url": proxy.url}


def _pending_uploads(s3_options, bucket):
    client = boto3.client(
        "s3",
        endpoint_url=s3_options["endpoint_url"],
        region_name="us-east-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )
    return client.list_multipart_uploads(Bucket=bucket).get("Uploads", [])


def test_create_table_whose_manifest_response_is_lost_creates_the_table(proxy, proxied, s3_table_uri, s3_options):
    lost = proxy.drop_response("PUT", r"/_versions/")
    table = lamina.create_table(s3_table_uri, SIMPLE, storage_options=proxied)
    assert lost.hits == 1 and table.version == 1
    reopened = lamina.open_table(s3_table_uri, storage_options=s3_options)
    assert reopened.version == 1 and reopened.schema.equals(SIMPLE)


def test_append_whose_manifest_response_is_lost_commits_once(proxy, proxied, s3_table_uri, s3_options):
    lamina.create_table(s3_table_uri, SIMPLE, storage_options=s3_options)
    table = lamina.open_table(s3_table_uri, storage_options=proxied)
    lost = proxy.drop_response("PUT", r"/_versions/0+2\.manifest")
    table.append(pa.table({"id": list(range(10))}, schema=SIMPLE))
    assert lost.hits == 1
    reopened = lamina.open_table(s3_table_uri, storage_options=s3_options)
    assert list_versions(reopened.store) == [1, 2]
    assert sorted(reopened.to_arrow().column("id").to_pylist()) == list(range(10)), "rows once, not twice"


def test_wal_writer_whose_claim_and_commit_responses_are_lost_goes_on(proxy, proxied, s3_table_uri, s3_options):
    lamina.create_table(s3_table_uri, SIMPLE, primary_key="id", storage_options=s3_options)
    lost_claim = proxy.drop_response("PUT", r"/_wal/0/0000000000/claim$")
    lost_txn = proxy.drop_response("PUT", r"/_wal/0/0000000000/0000000001\.t$")
    expected = []
    with WalWriter(s3_table_uri, 0, storage_options=proxied) as w:
        for k in range(3):
            rows = [{"id": k * 10 + j} for j in range(10)]
            expected += [r["id"] for r in rows]
            w.put_many(rows)
            assert w.commit() == k, "each transaction in the segment the writer claimed"
    assert lost_claim.hits == 1 and lost_txn.hits == 1
    applier = ShardApplier(s3_table_uri, 0, s3_options)
    assert applier.poll() == 30
    applier.flush()
    assert list_segments(applier.store, 0) == [0], "no segment claimed twice over"
    ids = lamina.open_table(s3_table_uri, storage_options=s3_options).to_arrow().column("id").to_pylist()
    assert sorted(ids) == sorted(expected), "every committed row exactly once"


@pytest.mark.parametrize("retry_meets", ["moto", "PreconditionFailed", "NoSuchUpload", "ConditionalRequestConflict"])
def test_multipart_put_if_absent_whose_completion_response_is_lost_succeeds(
    proxy, proxied, s3_table_uri, s3_options, s3_bucket, retry_meets
):
    # moto answers a repeated completion as done; S3 may answer 412 or NoSuchUpload instead.
    store = open_store(s3_table_uri, {**proxied, **MULTIPART})
    payload = os.urandom(5 * MIB + 17)
    lost = proxy.drop_response("POST", COMPLETE)
    if retry_meets == "PreconditionFailed":
        proxy.answer("POST", COMPLETE, 412, "PreconditionFailed")
    elif retry_meets == "NoSuchUpload":
        proxy.answer("POST", COMPLETE, 404, "NoSuchUpload")
    elif retry_meets == "ConditionalRequestConflict":
        proxy.answer("POST", COMPLETE, 409, "ConditionalRequestConflict")
    assert store.put_if_absent("_wal/0/big.t", payload) is True
    assert lost.hits == 1
    assert open_store(s3_table_uri, s3_options).get("_wal/0/big.t") == payload
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_multipart_put_if_absent_refused_with_a_conflict_starts_a_new_upload(proxy, proxied, s3_table_uri, s3_options, s3_bucket):
    # S3's 409 on completion asks for a new upload; the refused one must not be retried or left behind.
    store = open_store(s3_table_uri, {**proxied, **MULTIPART})
    payload = os.urandom(5 * MIB + 17)
    proxy.answer("POST", COMPLETE, 409, "ConditionalRequestConflict")
    assert store.put_if_absent("_wal/0/big.t", payload) is True
    assert len(proxy.requests("POST", r"\?uploads")) == 2, "a second upload was started"
    assert open_store(s3_table_uri, s3_options).get("_wal/0/big.t") == payload
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_put_file_whose_completion_response_is_lost_succeeds(proxy, proxied, s3_table_uri, s3_options, tmp_path):
    store = open_store(s3_table_uri, {**proxied, **MULTIPART})
    src = tmp_path / "big.bin"
    payload = os.urandom(5 * MIB + 17)
    src.write_bytes(payload)
    lost = proxy.drop_response("POST", COMPLETE)
    proxy.answer("POST", COMPLETE, 404, "NoSuchUpload")  # S3 forgets a completed upload
    store.put_file("data/big.parquet", str(src))
    assert lost.hits == 1
    assert open_store(s3_table_uri, s3_options).get("data/big.parquet") == payload


def test_put_if_absent_retried_after_a_conditional_conflict_finds_its_own_object(proxy, proxied, s3_table_uri, s3_options):
    store = open_store(s3_table_uri, proxied)
    lost = proxy.drop_response("PUT", r"/_versions/x$")
    proxy.answer("PUT", r"/_versions/x$", 409, "ConditionalRequestConflict")
    assert store.put_if_absent("_versions/x", b"mine") is True
    assert lost.hits == 1
    assert open_store(s3_table_uri, s3_options).get("_versions/x") == b"mine"


# -- the losers still lose -------------------------------------------------------------------


def test_a_writer_whose_first_put_meets_an_object_loses_without_checking(proxy, proxied, s3_table_uri, s3_options):
    open_store(s3_table_uri, s3_options).put_if_absent("_versions/x", b"same")
    assert open_store(s3_table_uri, proxied).put_if_absent("_versions/x", b"same") is False
    assert proxy.requests("HEAD") == [], "a 412 on the first attempt is a genuine loss"


def test_a_loser_with_identical_content_and_a_lost_response_still_loses(proxy, proxied, s3_table_uri, s3_options):
    assert open_store(s3_table_uri, s3_options).put_if_absent("_versions/x", b"same") is True
    lost = proxy.drop_response("PUT", r"/_versions/x$")
    assert open_store(s3_table_uri, proxied).put_if_absent("_versions/x", b"same") is False
    assert lost.hits == 1


def test_multipart_loser_with_a_lost_response_loses_and_leaves_no_upload(proxy, proxied, s3_table_uri, s3_options, s3_bucket):
    payload = os.urandom(5 * MIB + 17)
    assert open_store(s3_table_uri, s3_options).put_if_absent("_wal/0/big.t", b"theirs") is True
    lost = proxy.drop_response("POST", COMPLETE)
    assert open_store(s3_table_uri, {**proxied, **MULTIPART}).put_if_absent("_wal/0/big.t", payload) is False
    assert lost.hits == 1
    assert open_store(s3_table_uri, s3_options).get("_wal/0/big.t") == b"theirs"
    assert _pending_uploads(s3_options, s3_bucket) == []


def test_racing_writers_with_lost_responses_have_exactly_one_winner(proxy, proxied, s3_table_uri, s3_options):
    writers = 4
    proxy.drop_response("PUT", r"/_versions/race$", times=writers)  # every first attempt lands unanswered
    results: list[bool] = []
    errors: list[BaseException] = []

    def write() -> None:
        try:
            results.append(open_store(s3_table_uri, proxied).put_if_absent("_versions/race", b"identical bytes"))
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=write) for _ in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(results) == writers
    assert results.count(True) == 1, f"exactly one writer wins, got {results}"
