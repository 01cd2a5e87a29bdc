"""Shared fixtures: real stores (local directory, a moto S3 server on loopback), a real Ray cluster.

They are the ``lamina.testing`` pytest plugin's (one implementation), under the names our
tests use. The moto server runs in this process but is reached over TCP, so subprocesses
and Ray workers see the same buckets; dummy credentials are exported to the environment,
which child processes inherit.
"""

from __future__ import annotations

import os

import pytest

# Every test table keeps its fragments in many small manifest segments (docs/FORMAT.md §2), so the
# whole suite (concurrency matrix, racing processes, cleanup, time travel) runs on segments, not only
# on roots that hold every fragment. Ray workers and subprocesses inherit the environment. The checks
# of fragments held in the root (the production layout for small tables) run only at the defaults:
# tests of manifest validation take ``manifest_layout`` and run at both.
SMALL_LAYOUT = {
    "LAMINA_MANIFEST_INLINE_FRAGMENTS": "2",
    "LAMINA_MANIFEST_SEGMENT_FRAGMENTS": "4",
    "LAMINA_MANIFEST_INLINE_SEGMENTS": "2",
    "LAMINA_MANIFEST_LIST_SEGMENTS": "4",
}
for _name, _value in SMALL_LAYOUT.items():
    os.environ.setdefault(_name, _value)


@pytest.fixture(params=["default_layout", "small_layout"])
def manifest_layout(request, monkeypatch):
    """Runs a test twice: at the production manifest layout (the variables unset: up to 64 fragments in
    the root) and at the suite's small one (fragments in manifest segments of 4)."""
    for name, value in SMALL_LAYOUT.items():
        if request.param == "default_layout":
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    return request.param


# Installing Lamina registers the plugin (entry point pytest11, named after the module, so this
# line and the entry point load it once); the line keeps an older install working.
pytest_plugins = ["lamina.testing.pytest_plugin"]


@pytest.fixture(scope="session")
def moto_server(lamina_moto):
    """The endpoint URL of the session's moto S3 server on 127.0.0.1 (atomic conditional writes)."""
    return lamina_moto.endpoint


@pytest.fixture
def s3_options(lamina_s3):
    return lamina_s3.storage_options


@pytest.fixture
def s3_bucket(lamina_s3):
    return lamina_s3.bucket


@pytest.fixture
def local_table_uri(tmp_path):
    return str(tmp_path / "table")


@pytest.fixture
def s3_table_uri(lamina_s3):
    return lamina_s3.uri("warehouse/table")


@pytest.fixture(params=["local", "s3"])
def table_location(request, tmp_path):
    """(uri, storage_options) for a fresh table location, on a local directory and on S3."""
    if request.param == "local":
        return str(tmp_path / "table"), None
    s3 = request.getfixturevalue("lamina_s3")
    return s3.uri("warehouse/table"), s3.storage_options


@pytest.fixture
def proxy(moto_server):
    """A fault-injecting proxy in front of the session's moto server (hand-driven rules; no random faults)."""
    from lamina.testing import FaultProxy

    p = FaultProxy(moto_server)
    yield p
    p.close()


@pytest.fixture(scope="session")
def ray_cluster(moto_server, lamina_ray):
    """A small local Ray cluster (2 CPUs) whose workers can reach the moto server."""
    return lamina_ray
