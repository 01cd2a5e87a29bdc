"""lamina.testing: moto keeps S3's promise that one conditional put of a key wins; the fault proxy injects,
counts and bounds S3's errors by a seeded schedule, and Lamina survives them; moto_s3, local Ray, the table
factory and the pytest plugin work as documented."""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import boto3
import pyarrow as pa
import pytest
import tomllib
from botocore.exceptions import ClientError

import lamina
from lamina.errors import InvalidArgument
from lamina.ingest import ShardApplier
from lamina.store import open_store
from lamina.testing import FAULTS, KINDS, FaultProxy, fault_kind, make_table, moto_s3, moto_server
from lamina.wal import WalWriter

REPO = Path(__file__).resolve().parents[3]
MIB = 2**20
MULTIPART = {"multipart_threshold": 5 * MIB, "multipart_chunk_size": 5 * MIB}


def _racing_puts(endpoint: str, rounds: int, writers: int) -> list[int]:
    s3 = boto3.client(
        "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
    )
    bucket = f"race-{uuid.uuid4().hex[:8]}"
    s3.create_bucket(Bucket=bucket)
    winners = []
    for r in range(rounds):
        won = []
        barrier = threading.Barrier(writers)

        def put(i: int, r: int, won: list[int], barrier: threading.Barrier) -> None:
            client = boto3.client(
                "s3", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing", aws_secret_access_key="testing"
            )
            barrier.wait()
            try:
                client.put_object(Bucket=bucket, Key=f"v/{r}", Body=str(i).encode(), IfNoneMatch="*")
                won.append(i)
            except ClientError as e:
                assert e.response["Error"]["Code"] == "PreconditionFailed"

        threads = [threading.Thread(target=put, args=(i, r, won, barrier)) for i in range(writers)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert s3.get_object(Bucket=bucket, Key=f"v/{r}")["Body"].read() == str(won[0]).encode()
        winners.append(len(won))
    return winners


def test_exactly_one_of_many_racing_conditional_puts_wins():
    with moto_server() as endpoint:
        assert _racing_puts(endpoint, rounds=20, writers=8) == [1] * 20


# -- the fault proxy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "method, target, headers, kind",
    [
        ("GET", "/b/t/a.parquet", {}, "get"),
        ("GET", "/b/t/a.parquet", {"Range": "bytes=0-9"}, "ranged_get"),
        ("HEAD", "/b/t/a.parquet", {}, "head"),
        ("PUT", "/b/t/a.parquet", {}, "put"),
        ("PUT", "/b/t/_versions/2.manifest", {"If-None-Match": "*"}, "conditional_put"),
        ("PUT", "/b/t/x", {"if-match": '"etag"'}, "conditional_put"),
        ("POST", "/b/t/big?uploads", {}, "multipart"),
        ("PUT", "/b/t/big?partNumber=1&uploadId=u1", {}, "multipart"),
        ("POST", "/b/t/big?uploadId=u1", {}, "multipart"),
        ("POST", "/b/t/big?uploadId=u1", {"If-None-Match": "*"}, "conditional_put"),
        ("DELETE", "/b/t/big?uploadId=u1", {}, "multipart"),
        ("GET", "/b?list-type=2&prefix=t%2F", {}, "list"),
        ("GET", "/b/?list-type=2", {}, "list"),
        ("DELETE", "/b/t/a.parquet", {}, "delete"),
        ("POST", "/b?delete", {}, "delete"),
        ("PUT", "/b", {}, "other"),
        ("HEAD", "/b", {}, "other"),
    ],
)
def test_requests_are_classified_by_method_query_and_headers(method, target, headers, kind):
    assert fault_kind(method, target, headers) == kind


# moto answers anonymous reads 403 and checks no signature: any signed-looking request is "testing"'s.
_AUTH = "AWS4-HMAC-SHA256 Credential=testing/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, Signature=00"


def _raw(url: str, method: str, path: str, body: bytes = b"", headers: dict | None = None) -> tuple[int | str, bytes]:
    """One request on a fresh connection: (status, body), or ("reset", b"") / ("cut", partial body)."""
    host, port = url.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=30)
    try:
        conn.request(
            method, path, body=body, headers={"Content-Length": str(len(body)), "Authorization": _AUTH, **(headers or {})}
        )
        resp = conn.getresponse()
        try:
            return resp.status, resp.read()
        except http.client.IncompleteRead as e:
            return "cut", e.partial
    except (ConnectionError, http.client.RemoteDisconnected):
        return "reset", b""
    finally:
        conn.close()


@pytest.fixture
def bucket(lamina_s3):
    return lamina_s3


def test_error_faults_answer_s3_errors_without_forwarding(lamina_moto, bucket):
    for fault, status, code, method, headers in [
        ("500", 500, b"InternalError", "PUT", {}),
        ("503", 503, b"SlowDown", "PUT", {}),
        ("409", 409, b"ConditionalRequestConflict", "PUT", {"If-None-Match": "*"}),
    ]:
        with FaultProxy(lamina_moto.endpoint, rate=1.0, faults=[fault], max_faults=1) as proxy:
            before = bucket.requests().get("PUT", 0)
            got = _raw(proxy.url, method, f"/{bucket.bucket}/k{fault}", b"data", headers)
            assert got[0] == status and b"<Code>" + code + b"</Code>" in got[1]
            assert bucket.requests().get("PUT", 0) == before, "not forwarded"
            assert sum(proxy.faults().values()) == 1 and proxy.fault_types() == {fault: 1}
    assert bucket.client().list_objects_v2(Bucket=bucket.bucket).get("KeyCount") == 0


def test_drop_cuts_a_read_mid_body_and_loses_a_writes_answer_after_it_landed(lamina_moto, bucket):
    payload = os.urandom(10_000)
    bucket.client().put_object(Bucket=bucket.bucket, Key="obj", Body=payload)
    with FaultProxy(lamina_moto.endpoint, rate=1.0, faults=["drop"], max_faults=2) as proxy:
        status, partial = _raw(proxy.url, "GET", f"/{bucket.bucket}/obj")
        assert status == "cut" and 0 < len(partial) < len(payload) and payload.startswith(partial)
        assert _raw(proxy.url, "PUT", f"/{bucket.bucket}/landed", b"written")[0] == "reset"
        assert proxy.faults() == {"get": 1, "put": 1} and proxy.fault_types() == {"drop": 2}
    assert bucket.client().get_object(Bucket=bucket.bucket, Key="landed")["Body"].read() == b"written"


def test_delay_forwards_the_request(lamina_moto, bucket):
    with FaultProxy(lamina_moto.endpoint, rate=1.0, faults=["delay"], delay_seconds=0.01, max_faults=1) as proxy:
        assert _raw(proxy.url, "PUT", f"/{bucket.bucket}/late", b"late")[0] == 200
        assert proxy.faults() == {"put": 1} and proxy.fault_types() == {"delay": 1}
    assert bucket.client().get_object(Bucket=bucket.bucket, Key="late")["Body"].read() == b"late"


_CASES = [(k, f) for k in KINDS for f in FAULTS if f != "409" or k == "conditional_put"]


@pytest.mark.parametrize("kind, fault", _CASES)
def test_every_fault_of_every_kind_is_injected_counted_and_survived_by_the_store(lamina_moto, bucket, tmp_path, kind, fault):
    direct = open_store(bucket.uri("t"), bucket.direct_options)
    payload = os.urandom(5 * MIB + 17 if kind == "multipart" else 3000)
    direct.put("obj", payload)
    with FaultProxy(lamina_moto.endpoint, rate=1.0, kinds=[kind], faults=[fault], max_faults=1, delay_seconds=0.01) as proxy:
        store = open_store(bucket.uri("t"), {**bucket.storage_options, "endpoint_url": proxy.url, **MULTIPART})
        if kind == "get":
            assert store.get("obj") == payload
        elif kind == "ranged_get":
            assert store.get_range("obj", 100, 1000) == payload[100:1100]
        elif kind == "head":
            assert store.size("obj") == len(payload)
        elif kind == "list":
            assert [o.path for o in store.list("")] == ["obj"]
        elif kind == "put":
            store.put("new", b"new")
            assert direct.get("new") == b"new"
        elif kind == "conditional_put":
            assert store.put_if_absent("new", b"mine") is True
            assert direct.get("new") == b"mine"
        elif kind == "multipart":
            src = tmp_path / "big"
            src.write_bytes(payload)
            store.put_file("big", str(src))
            assert direct.get("big") == payload
        elif kind == "delete":
            store.delete(["obj"])
            assert not direct.exists("obj")
        assert proxy.faults() == {kind: 1} and proxy.fault_types() == {fault: 1}
        assert [(e.kind, e.fault) for e in proxy.events] == [(kind, fault)]


def _sequence(proxy: FaultProxy, bucket: str) -> list:
    """A fixed sequence of requests of every kind, one at a time: what each got back."""
    out = []
    for i in range(40):
        key = f"/{bucket}/k{i % 5}"
        out.append(_raw(proxy.url, "PUT", key, f"v{i}".encode())[0])
        out.append(_raw(proxy.url, "PUT", f"/{bucket}/c{i}", b"c", {"If-None-Match": "*"})[0])
        out.append(_raw(proxy.url, "GET", key)[0])
        out.append(_raw(proxy.url, "GET", key, headers={"Range": "bytes=0-1"})[0])
        out.append(_raw(proxy.url, "HEAD", key)[0])
        out.append(_raw(proxy.url, "GET", f"/{bucket}?list-type=2")[0])
        out.append(_raw(proxy.url, "DELETE", f"/{bucket}/c{i}")[0])
    return out


def test_the_schedule_is_determined_by_the_seed_and_the_request_order(lamina_moto):
    runs = []
    for seed in (7, 7, 8):
        with moto_s3(server=lamina_moto) as s3, FaultProxy(lamina_moto.endpoint, rate=0.3, seed=seed, delay_seconds=0.0) as proxy:
            statuses = _sequence(proxy, s3.bucket)
            events = [(e.kind, e.fault, e.method, e.target.replace(s3.bucket, "B")) for e in proxy.events]
            runs.append((statuses, events, proxy.faults()))
    assert runs[0] == runs[1], "same seed, same requests: same faults"
    assert runs[0][1] != runs[2][1], "another seed: other faults"
    assert set(runs[0][2]) == set(KINDS) - {"multipart"}, "every kind the sequence makes was faulted"


def test_bounds_stop_injection(lamina_moto, bucket):
    path = f"/{bucket.bucket}/obj"
    bucket.client().put_object(Bucket=bucket.bucket, Key="obj", Body=b"x" * 100)
    with FaultProxy(lamina_moto.endpoint, rate=1.0, faults=["503"], max_faults=3, max_consecutive=100) as proxy:
        assert [_raw(proxy.url, "GET", path)[0] for _ in range(6)] == [503, 503, 503, 200, 200, 200]
        assert proxy.faults() == {"get": 3}
    with FaultProxy(lamina_moto.endpoint, rate=1.0, faults=["503"], max_seconds=0) as proxy:
        assert [_raw(proxy.url, "GET", path)[0] for _ in range(3)] == [200, 200, 200], "lifetime over: no faults"
        assert proxy.faults() == {}
    with FaultProxy(lamina_moto.endpoint, rate=1.0, faults=["500"], max_consecutive=2) as proxy:
        got = [_raw(proxy.url, "GET", path)[0] for _ in range(6)]
        assert got == [500, 500, 200, 500, 500, 200], "a request retried gets through after max_consecutive faults"
        other = _raw(proxy.url, "GET", path, headers={"Range": "bytes=0-9"})[0]
        assert other == 500, "the streak is per request"


def test_the_proxy_refuses_unknown_kinds_faults_and_rates(lamina_moto):
    for kwargs in ({"kinds": ["get", "post"]}, {"faults": ["404"]}, {"rate": {"gets": 0.1}}, {"rate": 1.5}):
        with pytest.raises(InvalidArgument):
            FaultProxy(lamina_moto.endpoint, **kwargs)


# -- Lamina over faults ---------------------------------------------------------------------------

SCHEMA = pa.schema([("id", pa.int64()), ("name", pa.string())])


def _rows(ids) -> pa.Table:
    ids = list(ids)
    return pa.table({"id": ids, "name": [f"n{i}" for i in ids]}, schema=SCHEMA)


def _workload(s3) -> dict:
    """create, append, delete, index, take, filtered and full reads, a WAL commit applied: what each returned."""
    uri, opts = s3.uri("t"), s3.storage_options
    out: dict = {}
    t = lamina.create_table(uri, SCHEMA, primary_key="id", storage_options=opts)
    out["appends"] = [t.append(_rows(range(k * 100, k * 100 + 100))) for k in range(3)]
    out["deleted"] = t.delete("id < 40 OR id = 250")
    out["index_version"] = t.create_index("id", "btree")
    rows = t.to_arrow(with_row_address=True).sort_by("id")
    addrs = rows.column("_rowaddr").to_pylist()[::17]
    out["taken"] = t.take(addrs).to_pylist()
    out["filtered"] = t.to_arrow(filter="id >= 120 AND id < 140").sort_by("id").to_pylist()
    out["count"] = t.count_rows("id > 150")
    with WalWriter(uri, 0, storage_options=opts) as w:
        w.put_many([{"id": 1000 + i, "name": "w"} for i in range(30)])
        out["wal_txn"] = w.commit()
    applier = ShardApplier(uri, 0, opts)
    out["applied"] = applier.poll()
    applier.flush()
    final = lamina.open_table(uri, storage_options=opts)
    out["rows"] = final.to_arrow().sort_by("id").to_pylist()
    out["versions"] = [v.version for v in final.versions()]
    return out


def test_lamina_operations_over_ten_percent_faults_give_the_results_of_a_run_without(lamina_moto):
    with moto_s3(server=lamina_moto) as clean:
        expected = _workload(clean)
    with moto_s3(server=lamina_moto, fault_rate=0.1, seed=3, delay_seconds=0.02) as faulty:
        got = _workload(faulty)
        faults = faulty.faults()
    assert got == expected
    assert sum(faults.values()) >= 5 and len(faults) >= 3, f"the run met faults of several kinds: {faults}"
    assert len(expected["rows"]) == 300 - 41 + 30


def test_compaction_on_ray_over_faults_keeps_every_row(ray_cluster, lamina_moto):
    from lamina.compaction import compact
    from lamina.planner import CompactionOptions

    with moto_s3(server=lamina_moto, fault_rate=0.1, seed=5, delay_seconds=0.02) as s3:
        t = make_table(s3.uri("t"), SCHEMA, _rows(range(10)), storage_options=s3.storage_options)
        for k in range(1, 8):
            t.append(_rows(range(k * 10, k * 10 + 10)))
        _, summary = compact(s3.uri("t"), CompactionOptions(target_rows_per_fragment=1000), storage_options=s3.storage_options)
        assert summary.failed_groups == 0
        after = lamina.open_table(s3.uri("t"), storage_options=s3.direct_options)
        assert len(after.fragments()) < 8
        assert after.to_arrow().sort_by("id").column("id").to_pylist() == list(range(80))
        assert sum(s3.faults().values()) > 0


# -- moto_s3, the table factory, subprocesses and the plugin ---------------------------------------


def test_moto_s3_yields_a_bucket_reachable_with_its_options_and_counts_its_requests():
    with moto_s3() as s3:
        assert s3.endpoint.startswith("http://127.0.0.1:") and s3.faults() == {}
        t = make_table(s3.uri("events"), SCHEMA, _rows(range(5)), storage_options=s3.storage_options)
        assert t.uri == f"s3://{s3.bucket}/events" and t.count_rows() == 5
        assert s3.requests()["PUT"] >= 2 and s3.requests()["GET"] >= 1
    with moto_s3(fault_rate={"get": 1.0}, faults=["503"], max_faults=1) as s3:
        assert s3.endpoint != s3.server.endpoint
        make_table(s3.uri("t"), SCHEMA, _rows(range(5)), storage_options=s3.storage_options)
        assert lamina.open_table(s3.uri("t"), storage_options=s3.storage_options).count_rows() == 5
        assert s3.faults() == {"get": 1}


_CHILD = """
import json, os, sys, lamina
opts = json.loads(sys.argv[2]) if len(sys.argv) > 2 else None
print(lamina.open_table(sys.argv[1], storage_options=opts).count_rows())
"""


def test_a_subprocess_reaches_moto_s3_by_its_storage_options_or_its_env(lamina_s3):
    make_table(lamina_s3.uri("t"), SCHEMA, _rows(range(7)), storage_options=lamina_s3.storage_options)
    bare = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    by_options = subprocess.run(
        [sys.executable, "-c", _CHILD, lamina_s3.uri("t"), json.dumps(lamina_s3.storage_options)],
        env=bare,
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert by_options.stdout.strip() == "7", by_options.stderr
    by_env = subprocess.run(
        [sys.executable, "-c", _CHILD, lamina_s3.uri("t")],
        env={**bare, **lamina_s3.env},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert by_env.stdout.strip() == "7", by_env.stderr


def test_lamina_table_factory_makes_local_and_s3_tables(lamina_table, lamina_s3, tmp_path):
    local = lamina_table(SCHEMA, _rows(range(3)), name="loc", primary_key="id")
    assert local.uri == str(tmp_path / "loc") and local.count_rows() == 3 and local.primary_key == ("id",)
    remote = lamina_table(SCHEMA, on="s3", name="rem")
    assert remote.uri == lamina_s3.uri("rem") and remote.count_rows() == 0
    with pytest.raises(InvalidArgument):
        lamina_table(SCHEMA, on="gcs")


@pytest.mark.lamina_s3(fault_rate=1.0, kinds=["list"], faults=["503"], max_faults=2)
def test_the_lamina_s3_marker_puts_the_bucket_behind_faults(lamina_s3):
    make_table(lamina_s3.uri("t"), SCHEMA, _rows(range(4)), storage_options=lamina_s3.storage_options)
    assert lamina_s3.faults() == {"list": 2}


def test_lamina_ray_workers_read_a_table_on_moto(ray_cluster, lamina_ray, lamina_s3):
    assert ray_cluster is lamina_ray
    make_table(lamina_s3.uri("t"), SCHEMA, _rows(range(9)), storage_options=lamina_s3.storage_options)

    @lamina_ray.remote
    def count(uri: str, opts: dict) -> int:
        import lamina as lam

        return lam.open_table(uri, storage_options=opts).count_rows()

    assert lamina_ray.get(count.remote(lamina_s3.uri("t"), lamina_s3.storage_options), timeout=120) == 9


_USER_TEST = """
import pyarrow as pa
import lamina

def test_my_pipeline(lamina_table, lamina_s3):
    t = lamina_table(pa.schema([("id", pa.int64())]), [{"id": 1}, {"id": 2}], on="s3")
    t.delete("id = 1")
    assert lamina.open_table(t.uri, storage_options=lamina_s3.storage_options).to_arrow().column("id").to_pylist() == [2]
"""


def test_the_pyproject_entry_point_gives_a_users_tests_the_fixtures(tmp_path):
    """A user's test gets the fixtures from the installed entry point alone, and from the entry point
    plus a conftest naming the plugin (as ours does) without loading it twice."""
    entry = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["entry-points"]["pytest11"]
    assert entry == {"lamina.testing.pytest_plugin": "lamina.testing.pytest_plugin"}
    site = tmp_path / "site" / "lamina_entry-0.dist-info"
    site.mkdir(parents=True)
    (site / "METADATA").write_text("Metadata-Version: 2.1\nName: lamina-entry\nVersion: 0\n")
    (site / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in entry.items()))
    for conftest in ("", 'pytest_plugins = ["lamina.testing.pytest_plugin"]\n'):
        project = tmp_path / f"user{len(conftest)}"
        project.mkdir()
        (project / "test_user.py").write_text(_USER_TEST)
        (project / "conftest.py").write_text(conftest)
        env = {**os.environ, "PYTHONPATH": f"{tmp_path / 'site'}{os.pathsep}{REPO}"}
        run = subprocess.run(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_user.py"],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert run.returncode == 0 and "1 passed" in run.stdout, run.stdout + run.stderr
