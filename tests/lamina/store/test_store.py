"""Object stores: the operations every table call stands on, locally and on S3 (moto server)."""

from __future__ import annotations

import os

import pytest
from botocore.exceptions import ClientError

from lamina.errors import CorruptFile, InvalidArgument, InvalidConfig, ObjectNotFound, StorageError
from lamina.store import open_store
from lamina.store.s3 import S3Store
from tests.lamina.helpers import HookedStore


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


def _flaky(client, method, code, status, n) -> HookedStore:
    """A boto3 client whose first ``n`` calls of ``method`` fail with ``code`` (every call counted)."""
    return HookedStore(client).on(
        method,
        times=n,
        fail=lambda _: ClientError(
            {"Error": {"Code": code, "Message": "injected"}, "ResponseMetadata": {"HTTPStatusCode": status}}, method
        ),
    )


@pytest.mark.parametrize("code,status", [("SlowDown", 503), ("InternalError", 500), ("ConditionalRequestConflict", 409)])
def test_s3_retries_throttling_5xx_and_conditional_conflicts(s3_table_uri, s3_options, code, status):
    store = S3Store(s3_table_uri, {**s3_options, "max_attempts": 4})
    flaky = _flaky(store.client(), "put_object", code, status, n=3)
    store._shared_client = flaky
    assert store.put_if_absent("_versions/x", b"data") is True
    assert flaky.count("put_object") == 4
    assert store.get("_versions/x") == b"data"


def test_s3_store_honours_aws_endpoint_url(monkeypatch, s3_table_uri, moto_server):
    monkeypatch.setenv("AWS_ENDPOINT_URL", moto_server)
    store = open_store(s3_table_uri)
    store.put("k", b"v")
    assert store.get("k") == b"v"


def test_stores_pickle(store):
    import pickle

    store.put("k", b"v")
    assert pickle.loads(pickle.dumps(store)).get("k") == b"v"


# -- staging: a local file to read an object, a local file that becomes one ---------------------


def _files(directory) -> list[str]:
    return sorted(str(p.relative_to(directory)) for p in directory.rglob("*") if p.is_file())


def test_staged_output_becomes_the_object_when_the_block_ends(store, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with store.staged_output("data/out.parquet", directory=str(scratch)) as local:
        assert not os.path.exists(local), "nothing is at the staged path yet (native writers refuse to replace)"
        with open(local, "wb") as f:
            f.write(b"written bytes")
        assert not store.exists("data/out.parquet"), "the object appears only when the block ends"
    assert store.get("data/out.parquet") == b"written bytes"
    assert [o.path for o in store.list("")] == ["data/out.parquet"], "no temp file beside the object"
    assert _files(scratch) == []
    with store.staged_output("data/out.parquet", directory=str(scratch)) as local:  # a retried writer
        with open(local, "wb") as f:
            f.write(b"second attempt")
    assert store.get("data/out.parquet") == b"second attempt"


def test_staged_output_leaves_nothing_when_the_block_raises(store, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(RuntimeError, match="writer failed"):
        with store.staged_output("data/out.parquet", directory=str(scratch)) as local:
            with open(local, "wb") as f:
                f.write(b"partial")
            raise RuntimeError("writer failed")
    assert not store.exists("data/out.parquet")
    assert list(store.list("")) == [], "no partial object and no temp file in the table"
    assert _files(scratch) == [], "no temp file left in the scratch directory"


def test_staged_output_refuses_a_block_that_wrote_nothing(store, tmp_path):
    with pytest.raises(InvalidArgument, match="nothing was written"):
        with store.staged_output("data/out.parquet", directory=str(tmp_path)):
            pass
    assert list(store.list("")) == []


def test_s3_staged_output_uploads_large_files_in_parts(s3_table_uri, s3_options, tmp_path, monkeypatch):
    monkeypatch.setenv("LAMINA_TMPDIR", str(tmp_path))
    store = S3Store(s3_table_uri, {**s3_options, "multipart_threshold": 5 * 2**20, "multipart_chunk_size": 5 * 2**20})
    counting = store._shared_client = HookedStore(store.client())  # counts the requests, per method
    payload = os.urandom(11 * 2**20)
    with store.staged_output("data/big.parquet") as local:
        assert local.startswith(str(tmp_path)), "temp files go to $LAMINA_TMPDIR"
        with open(local, "wb") as f:
            f.write(payload)
    assert counting.count("upload_part") == 3 and counting.count("put_object") == 0
    assert store.get("data/big.parquet") == payload
    assert _files(tmp_path) == []


def test_local_staged_input_is_the_object_itself(local_table_uri, tmp_path):
    store = open_store(local_table_uri)
    store.put("data/x.parquet", b"0123456789")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with store.staged_input("data/x.parquet", batch_bytes=3, directory=str(scratch)) as staged:
        assert staged.requests == 0
        assert os.path.samefile(staged.path, os.path.join(local_table_uri, "data", "x.parquet"))
    assert store.get("data/x.parquet") == b"0123456789", "the object stays"
    assert [o.path for o in store.list("")] == ["data/x.parquet"] and _files(scratch) == [], "no copy was made"


def test_s3_staged_input_fetches_in_ranged_gets_and_removes_its_copy(s3_table_uri, s3_options, tmp_path):
    from lamina.store.scheduler import io_stats, stats_delta

    store = S3Store(s3_table_uri, s3_options)
    store.put("data/x.parquet", b"0123456789")
    before = io_stats()
    with store.staged_input("data/x.parquet", batch_bytes=4, directory=str(tmp_path)) as staged:
        with open(staged.path, "rb") as f:
            assert f.read() == b"0123456789"
        assert os.path.dirname(staged.path) == str(tmp_path)
        requests = stats_delta(before)[store.io_domain]
        assert staged.requests == 3 == requests["GET"], "10 bytes in GETs of 4"
        assert requests["HEAD"] == 1, "the size is asked for when not given"
    assert _files(tmp_path) == []
    before = io_stats()
    with store.staged_input("data/x.parquet", 10, batch_bytes=64, directory=str(tmp_path)) as staged:
        requests = stats_delta(before)[store.io_domain]
        assert staged.requests == 1 and requests["GET"] == 1 and requests["HEAD"] == 0, "a known size costs no HEAD"
    with pytest.raises(RuntimeError, match="reader failed"):
        with store.staged_input("data/x.parquet", directory=str(tmp_path)) as staged:
            raise RuntimeError("reader failed")
    assert not os.path.exists(staged.path) and _files(tmp_path) == []


def test_staged_input_of_a_missing_object(store, tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with pytest.raises(ObjectNotFound, match="data/nope.parquet does not exist"):
        with store.staged_input("data/nope.parquet", directory=str(scratch)):
            pass
    assert _files(scratch) == []


def test_append_grows_local_objects_and_cuts_what_a_failed_attempt_left(local_table_uri, s3_table_uri, s3_options):
    store = open_store(local_table_uri)
    assert store.is_local
    store.append("_wal/0/seg.d", b"abc")
    store.append("_wal/0/seg.d", b"leftover", at=3)
    store.append("_wal/0/seg.d", b"def", at=3)  # the retry of a write that left bytes behind
    assert store.get("_wal/0/seg.d") == b"abcdef"
    s3 = open_store(s3_table_uri, s3_options)
    assert not s3.is_local
    with pytest.raises(StorageError, match="written whole"):
        s3.append("_wal/0/seg.d", b"abc")


def test_stores_with_the_same_options_share_one_s3_client(s3_bucket, s3_options):
    from lamina.store import open_store

    a = open_store(f"s3://{s3_bucket}/a", s3_options)
    b = open_store(f"s3://{s3_bucket}/b", s3_options)
    c = open_store(f"s3://{s3_bucket}/c", {**s3_options, "max_pool_connections": 4})
    assert a.client() is b.client(), "one client per process and configuration (creating one costs ~300 ms)"
    assert c.client() is not a.client(), "another configuration gets its own client"


@pytest.mark.parametrize("direct_reads", [True, False], ids=["direct", "client"])
@pytest.mark.parametrize("fault", ["503", "500", "drop"])
def test_reads_retry_5xx_and_dropped_connections_the_same_either_way(s3_table_uri, s3_options, proxy, direct_reads, fault):
    """Reads sent directly and through the boto3 client get the same retries: Lamina's, with its backoff."""
    S3Store(s3_table_uri, s3_options).put("blob", b"0123456789")
    store = S3Store(s3_table_uri, {**s3_options, "endpoint_url": proxy.url, "max_attempts": 4, "direct_reads": direct_reads})
    assert store.direct_reads is direct_reads
    if fault == "drop":
        proxy.drop_response("GET", "blob", times=2)
    else:
        proxy.answer("GET", "blob", int(fault), "SlowDown" if fault == "503" else "InternalError", times=2)
    assert store.get_range("blob", 2, 5) == b"23456"
    assert len(proxy.requests("GET", "blob")) == 3


@pytest.mark.parametrize("direct_reads", [True, False], ids=["direct", "client"])
def test_a_read_cut_off_mid_body_is_retried_not_returned(s3_table_uri, s3_options, moto_server, direct_reads):
    from lamina.testing import FaultProxy

    blob = bytes(range(256)) * 64
    S3Store(s3_table_uri, s3_options).put("blob", blob)
    with FaultProxy(moto_server, rate={"get": 1.0, "ranged_get": 1.0}, faults=["drop"], max_faults=1) as cutting:
        store = S3Store(s3_table_uri, {**s3_options, "endpoint_url": cutting.url, "direct_reads": direct_reads})
        assert store.get("blob") == blob
        assert cutting.fault_types() == {"drop": 1} and len(cutting.requests("GET", "blob")) == 2


@pytest.mark.parametrize("direct_reads", [True, False], ids=["direct", "client"])
@pytest.mark.parametrize(
    "status,code,error,match",
    [
        (404, "NoSuchKey", ObjectNotFound, "does not exist"),
        (403, "AccessDenied", StorageError, "access denied"),
        (416, "InvalidRange", CorruptFile, "shorter than the manifest says"),
    ],
)
def test_reads_translate_errors_without_retrying_them(s3_table_uri, s3_options, proxy, direct_reads, status, code, error, match):
    store = S3Store(s3_table_uri, {**s3_options, "endpoint_url": proxy.url, "max_attempts": 4, "direct_reads": direct_reads})
    proxy.answer("GET", "/x$", status, code, times=4)
    with pytest.raises(error, match=match):
        store.get("x")
    assert len(proxy.requests("GET", "/x$")) == 1


@pytest.mark.parametrize("direct_reads", [True, False], ids=["direct", "client"])
def test_reads_give_up_after_max_attempts(s3_table_uri, s3_options, proxy, direct_reads):
    store = S3Store(s3_table_uri, {**s3_options, "endpoint_url": proxy.url, "max_attempts": 2, "direct_reads": direct_reads})
    proxy.answer("GET", "anything", 503, "SlowDown", times=5)
    with pytest.raises(StorageError, match="failed after 2 attempts: SlowDown"):
        store.get("anything")
    assert len(proxy.requests("GET", "anything")) == 2


def test_direct_and_boto3_reads_agree(s3_table_uri, s3_options):
    direct = S3Store(s3_table_uri, s3_options)
    plain = S3Store(s3_table_uri, {**s3_options, "direct_reads": "false"})
    assert direct.direct_reads and not plain.direct_reads
    blob = bytes(range(256)) * 100
    direct.put("dir/a b+c%.bin", blob)  # a key that needs quoting
    for store in (direct, plain):
        assert store.get("dir/a b+c%.bin") == blob
        assert store.get_range("dir/a b+c%.bin", 1000, 77) == blob[1000:1077]
        with pytest.raises(ObjectNotFound):
            store.get("dir/missing")


def test_direct_and_boto3_listings_agree_across_pages(s3_table_uri, s3_options):
    """Listings sent directly (no boto3 client) give what the client's give: keys needing quoting and XML
    escaping, sizes, times, StartAfter, and pages past S3's 1,000 keys."""
    direct = S3Store(s3_table_uri, s3_options)
    plain = S3Store(s3_table_uri, {**s3_options, "direct_reads": "false"})
    client = plain.client()
    names = [f"p/{i:04d}.bin" for i in range(1003)] + ["p/a b+c%&<x>é.bin", "q/other.bin"]
    for n in names:
        client.put_object(Bucket=plain.bucket, Key=plain.key(n), Body=n.encode())

    def listing(store, *args):
        return [(o.path, o.size, o.modified) for o in store.list(*args)]

    full = listing(plain, "p/")
    assert len(full) == 1004 and full[-1][0] == "p/a b+c%&<x>é.bin"
    assert listing(direct, "p/") == full
    assert listing(direct, "p/", "p/0999.bin") == listing(plain, "p/", "p/0999.bin") == full[1000:]
    assert listing(direct, "") == listing(plain, "")
    assert listing(direct, "nothing/") == []


READ_ONLY = """
import json, sys, lamina
from lamina.store import s3
from lamina.store.s3 import transport
t = lamina.open_table(sys.argv[1], storage_options=json.loads(sys.argv[2]))
rows = t.to_arrow().num_rows
names = lamina.connect(sys.argv[3], storage_options=json.loads(sys.argv[2])).list_namespaces()
store = s3.S3Store(sys.argv[1], json.loads(sys.argv[2]))
heads = [store.exists("_versions/_latest"), store.exists("no/such/object"), store.size("_versions/_latest") > 0]
print(json.dumps({"rows": rows, "names": names, "heads": heads, "clients": len(transport._CLIENTS),
                  "loaded": sorted(m for m in ("boto3", "botocore.client", "botocore.session", "botocore.auth")
                                   if m in sys.modules)}))
"""


def test_a_process_that_only_reads_s3_never_makes_a_boto3_client(s3_bucket, s3_options):
    """Making the client costs ~0.1 s (botocore's S3 service model): reads (GETs, HEADs and listings) are signed by
    botocore's signer and sent without a client, so a cold read of a table or a catalog does without it; with keys
    and a region in the options, neither boto3 nor botocore's sessions and clients are imported, only its signer."""
    import json
    import subprocess
    import sys

    import pyarrow as pa

    import lamina

    uri, root = f"s3://{s3_bucket}/t", f"s3://{s3_bucket}/cat"
    lamina.create_table(uri, pa.schema([("id", pa.int64())]), storage_options=s3_options).append(pa.table({"id": [1, 2]}))
    lamina.connect(root, storage_options=s3_options).create_namespace("ns")
    out = subprocess.run(
        [sys.executable, "-X", "faulthandler", "-c", READ_ONLY, uri, json.dumps(s3_options), root],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert json.loads(out.stdout) == {
        "rows": 2,
        "names": ["ns"],
        "heads": [True, False, True],
        "clients": 0,
        "loaded": ["botocore.auth"],
    }


def test_a_direct_listing_sends_the_query_it_signs(s3_table_uri, s3_options, monkeypatch):
    """SigV4 signs the canonical form of the query (a space is %20, never "+"); real S3 (not moto) rejects a
    request whose query differs from what was signed, so the query sent must already be canonical."""
    from urllib.parse import urlsplit

    from botocore.auth import S3SigV4Auth

    store = S3Store(s3_table_uri, s3_options)
    sent = []

    class Reply:
        data = b"<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>"

    monkeypatch.setattr(store._transport, "send", lambda operation, method, url, headers=None: sent.append(url) or Reply())
    assert store._direct_list({"prefix": "p/a b+c%&=é", "start-after": "p/a b"}) == {
        "Contents": [],
        "IsTruncated": False,
        "NextContinuationToken": None,
    }
    query = urlsplit(sent[0]).query
    signer = S3SigV4Auth(store.credentials.get_frozen_credentials(), "s3", store.region)
    assert "+" not in query and query == signer._canonical_query_string_url(urlsplit(sent[0]))


def test_keys_in_options_or_the_environment_need_no_boto3(monkeypatch):
    """Keys and a region from the options, else from the environment, are used as they are (botocore's chain
    looks there first too); a profile, or no region, goes through botocore's chain."""
    from lamina.store.s3 import credentials as s3mod

    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_REGION",
        "AWS_DEFAULT_REGION",
        "AWS_PROFILE",
        "AWS_CREDENTIAL_EXPIRATION",
    ):
        monkeypatch.delenv(name, raising=False)
    asked = []
    monkeypatch.setattr(
        s3mod, "session_for", lambda o, uri, keys=None: asked.append(o) or pytest.fail("botocore's chain was asked")
    )
    given = {"aws_access_key_id": "A", "aws_secret_access_key": "S", "aws_session_token": "T", "region": "eu-west-3"}
    assert s3mod.resolve(given, "s3://b/t") == (s3mod.StaticCredentials("A", "S", "T"), "eu-west-3")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "EA")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "ES")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "ap-south-1")
    assert s3mod.resolve({"aws_access_key_id": "A", "aws_secret_access_key": "S"}, "s3://b/t") == (
        s3mod.StaticCredentials("A", "S", None),
        "ap-south-1",
    ), "the options' keys win over the environment's"
    assert s3mod.resolve({}, "s3://b/t") == (s3mod.StaticCredentials("EA", "ES", None), "ap-south-1")
    monkeypatch.setenv("AWS_SESSION_TOKEN", "ET")
    assert s3mod.resolve({}, "s3://b/t")[0].token == "ET"
    monkeypatch.setenv("AWS_SECURITY_TOKEN", "LEGACY")
    assert s3mod.resolve({}, "s3://b/t")[0].token == "LEGACY", "botocore's EnvProvider order"

    class Session:
        region_name = "eu-north-1"

        def get_credentials(self):
            return "botocore's"

    monkeypatch.setattr(s3mod, "session_for", lambda o, uri, keys=None: asked.append(o) or Session())
    assert s3mod.resolve({"profile": "dev"}, "s3://b/t") == ("botocore's", "eu-north-1")
    assert s3mod.resolve({"aws_access_key_id": "A"}, "s3://b/t") == ("botocore's", "eu-north-1"), (
        "half a key pair is botocore's to refuse"
    )
    assert s3mod.resolve({"aws_session_token": "T"}, "s3://b/t") == ("botocore's", "eu-north-1"), (
        "a token without its keys is botocore's to judge, not paired with the environment's keys"
    )
    monkeypatch.setenv("AWS_CREDENTIAL_EXPIRATION", "2026-11-27T00:00:00Z")
    assert s3mod.resolve({}, "s3://b/t") == ("botocore's", "eu-north-1"), "expiring keys refresh"
    monkeypatch.delenv("AWS_CREDENTIAL_EXPIRATION")
    monkeypatch.delenv("AWS_DEFAULT_REGION")
    assert s3mod.resolve({}, "s3://b/t") == ("botocore's", "eu-north-1"), "a region from a profile"
    assert len(asked) == 5


def _write_read_list(store) -> None:
    store.put("d/k", b"v")
    assert store.get("d/k") == b"v" and [o.path for o in store.list("d/k")] == ["d/k"] and store.size("d/k") == 1


@pytest.mark.parametrize("source", ["profile", "expiring environment keys"])
def test_reads_and_writes_sign_with_one_credentials_object_from_botocores_chain(
    s3_table_uri, s3_options, tmp_path, monkeypatch, source
):
    """Credentials botocore's chain finds (a profile; environment keys with an expiry, which it refreshes) are
    resolved once: the direct reads' signer and the boto3 client hold the same object, frozen per request."""
    from botocore.credentials import RefreshableCredentials

    for name in (
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "AWS_PROFILE",
        "AWS_CREDENTIAL_EXPIRATION",
    ):
        monkeypatch.delenv(name, raising=False)
    opts = {k: v for k, v in s3_options.items() if k not in ("aws_access_key_id", "aws_secret_access_key")}
    if source == "profile":
        shared = tmp_path / "credentials"
        shared.write_text("[dev]\naws_access_key_id = testing\naws_secret_access_key = testing\n")
        monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(shared))
        opts["profile"] = "dev"
    else:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
        monkeypatch.setenv("AWS_CREDENTIAL_EXPIRATION", "2999-01-01T00:00:00Z")
    store = S3Store(s3_table_uri, opts)
    assert store.credentials.get_frozen_credentials().access_key == "testing"
    if source != "profile":
        assert isinstance(store.credentials, RefreshableCredentials)
    _write_read_list(store)
    assert store.client()._request_signer._credentials is store.credentials


def test_keys_given_sign_reads_and_writes_alike(s3_table_uri, s3_options):
    """Keys given (or in the environment) are taken without a boto3 session; the write client is made with them."""
    from lamina.store.s3 import StaticCredentials

    store = S3Store(s3_table_uri, {**s3_options, "aws_session_token": "tok"})
    assert store.credentials == StaticCredentials("testing", "testing", "tok")
    _write_read_list(store)
    frozen = store.client()._request_signer._credentials.get_frozen_credentials()
    assert (frozen.access_key, frozen.secret_key, frozen.token) == tuple(store.credentials)


@pytest.mark.parametrize("how", ["HTTP_PROXY", "proxy_url"])
def test_reads_and_writes_go_through_the_same_proxy(s3_table_uri, s3_options, moto_server, proxy, monkeypatch, how):
    """A proxy from the environment (botocore's reading of it, NO_PROXY honoured) or from the storage option
    carries every request, the direct reads' and the client's alike."""
    for name in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "NO_PROXY", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
    opts = dict(s3_options)
    if how == "HTTP_PROXY":
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
    else:
        opts["proxy_url"] = proxy.url
    store = S3Store(s3_table_uri, opts)
    assert store.direct_reads, "a proxy no longer turns direct reads off"
    _write_read_list(store)
    assert store.put_if_absent("d/once", b"1") is True
    # Through a forward proxy the request target is the absolute URL of the endpoint.
    for method in ("PUT", "GET", "HEAD"):
        assert [r.target for r in proxy.requests(method)] and all(
            r.target.startswith(moto_server) for r in proxy.requests(method)
        ), method
    if how == "HTTP_PROXY":
        seen = len(proxy.seen)
        monkeypatch.setenv("NO_PROXY", "127.0.0.1")
        _write_read_list(S3Store(s3_table_uri, opts))
        assert len(proxy.seen) == seen, "NO_PROXY bypasses the proxy for reads and writes"


def test_a_proxy_url_must_be_a_url(s3_table_uri, s3_options):
    with pytest.raises(InvalidConfig, match="proxy_url='proxy:3128' is not an http:// or https:// URL"):
        S3Store(s3_table_uri, {**s3_options, "proxy_url": "proxy:3128"})


@pytest.mark.parametrize("write", ["put", "put_if_absent", "local_path", "append"])
@pytest.mark.parametrize("made_by", ["this write", "another writer"])
def test_a_new_local_directory_is_made_durable_in_its_parent(tmp_path, monkeypatch, write, made_by):
    """A file's fsync and its directory's make its name durable, not a directory's own name in its parent: the
    first write into a directory fsyncs every directory from its parent up to the table's parent, top down,
    before it returns — also when another writer just made it (and may not have fsynced its parent yet)."""
    from lamina.store import local as local_mod

    root = tmp_path / "table"
    root.mkdir()
    if made_by == "another writer":
        (root / "a" / "b" / "c").mkdir(parents=True)
    store = open_store(str(root))
    synced: list[str] = []
    real = local_mod._fsync_dir
    monkeypatch.setattr(local_mod, "_fsync_dir", lambda d: synced.append(os.path.relpath(d, root)) or real(d))

    def do(path: str) -> None:
        if write == "local_path":
            with open(store.local_path(path), "wb") as f:
                f.write(b"x")
        elif write == "append":
            store.append(path, b"x")
        else:
            getattr(store, write)(path, b"x")

    do("a/b/c/x.bin")
    chain = ["..", ".", "a", os.path.join("a", "b")]  # the entries of table, a, a/b and a/b/c, in that order
    assert synced[:4] == chain
    synced.clear()
    do("a/b/c/y.bin")
    assert not set(synced) & set(chain), "the second write into a directory costs no fsync of its parents"
    assert (root / "a" / "b" / "c" / "y.bin").read_bytes() == b"x"


def _failing_directory_fsync(monkeypatch, err: int) -> list[str]:
    """os.fsync fails with ``err`` on directories (files still sync); the directories it failed on."""
    import errno as errno_mod
    import stat

    failed: list[str] = []
    real = os.fsync

    def fsync(fd: int) -> None:
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            failed.append(os.readlink(f"/proc/self/fd/{fd}"))
            raise OSError(err, os.strerror(err))
        real(fd)

    assert err in (errno_mod.EIO, errno_mod.EINVAL)
    monkeypatch.setattr(os, "fsync", fsync)
    return failed


def test_a_disk_error_making_a_directory_durable_fails_the_write_and_commits_nothing(tmp_path, monkeypatch, caplog):
    """An fsync of a directory failing with EIO was ignored: a write reported durable what a crash could lose.
    Now the write fails with StorageError naming the directory, before a commit names its files; an
    append commits nothing. A filesystem that cannot sync directories (EINVAL) is not an error."""
    import errno as errno_mod
    import logging

    import pyarrow as pa

    import lamina

    schema = pa.schema([("id", pa.int64())])
    t = lamina.create_table(str(tmp_path / "t"), schema)
    t.append(pa.table({"id": [1, 2]}, schema=schema))
    store = open_store(str(tmp_path / "t"))
    store.put("x/a.bin", b"a")  # x and its parents made durable
    with monkeypatch.context() as m:
        failed = _failing_directory_fsync(m, errno_mod.EIO)
        with pytest.raises(StorageError, match=r"durable failed \(fsync: .*Input/output error.*check the disk"):
            t.append(pa.table({"id": [3]}, schema=schema))
        assert failed
        with pytest.raises(StorageError, match="directory .*/t/x durable failed"):
            store.put("x/y.bin", b"data")
        # put-if-absent: the object is in place and seen by every reader; failing would have its caller
        # retry a commit that landed, so it says so and reports the write
        with caplog.at_level(logging.ERROR, logger="lamina.store.local"):
            assert store.put_if_absent("x/z.bin", b"z") is True
        assert "x/z.bin was written, but making the entries of directory" in caplog.text
    again = lamina.open_table(str(tmp_path / "t"))
    assert again.version == t.version and sorted(again.to_arrow().column("id").to_pylist()) == [1, 2]
    with monkeypatch.context() as m:
        failed = _failing_directory_fsync(m, errno_mod.EINVAL)
        again.append(pa.table({"id": [3]}, schema=schema))
        assert failed
    assert sorted(lamina.open_table(str(tmp_path / "t")).to_arrow().column("id").to_pylist()) == [1, 2, 3]


@pytest.mark.parametrize("uri", ["s3://bkt/./t", "s3://bkt/a/../t", "s3://bkt/..", "s3:///t"])
def test_an_s3_uri_with_dot_segments_or_no_bucket_is_refused(uri):
    """HTTP clients resolve '.' and '..' before sending, so such a path would read or sign another key than the
    one named: refused with InvalidConfig, before any request."""
    from lamina.errors import InvalidConfig

    with pytest.raises(InvalidConfig, match="path segment|no bucket"):
        S3Store(uri, {"aws_access_key_id": "a", "aws_secret_access_key": "s", "region": "us-east-1"})
