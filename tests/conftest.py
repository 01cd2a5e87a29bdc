"""Shared fixtures: real stores (local directory, a moto S3 server on loopback), a real Ray cluster.

The moto server runs in this process but is reached over TCP, so subprocesses and
Ray workers see the same buckets. Credentials are dummies exported to the
environment, which child processes inherit.
"""

from __future__ import annotations

import os
import uuid

import pytest

DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def moto_server():
    """The endpoint URL of a moto S3 server on 127.0.0.1, with S3's atomic conditional writes
    (``lamina.testing``: moto alone checks a condition and writes without a lock)."""
    from lamina.testing import moto_server as serve

    for k, v in DUMMY_AWS_ENV.items():
        os.environ.setdefault(k, v)
    with serve() as endpoint:
        yield endpoint


@pytest.fixture
def s3_options(moto_server):
    return {"endpoint_url": moto_server, "aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region": "us-east-1"}


@pytest.fixture
def s3_bucket(moto_server):
    import boto3

    name = f"lamina-{uuid.uuid4().hex[:12]}"
    boto3.client("s3", endpoint_url=moto_server, region_name="us-east-1", **_keys()).create_bucket(Bucket=name)
    return name


def _keys():
    return {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}


@pytest.fixture
def local_table_uri(tmp_path):
    return str(tmp_path / "table")


@pytest.fixture
def s3_table_uri(s3_bucket):
    return f"s3://{s3_bucket}/warehouse/table"


@pytest.fixture(params=["local", "s3"])
def table_location(request, tmp_path):
    """(uri, storage_options) for a fresh table location, on a local directory and on S3."""
    if request.param == "local":
        return str(tmp_path / "table"), None
    endpoint = request.getfixturevalue("moto_server")
    bucket = request.getfixturevalue("s3_bucket")
    return f"s3://{bucket}/warehouse/table", {
        "endpoint_url": endpoint, "aws_access_key_id": "testing", "aws_secret_access_key": "testing", "region": "us-east-1",
    }


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory, moto_server):
    """A small local Ray cluster (2 CPUs) whose workers can reach the moto server."""
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    temp_dir = tmp_path_factory.mktemp("ray")
    env = {**DUMMY_AWS_ENV, "RAY_AUTH_MODE": "disabled"}
    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(temp_dir), log_to_driver=False,
             runtime_env={"env_vars": env}, configure_logging=False)
    yield ray
    ray.shutdown()
