"""pytest fixtures for pipelines built on Lamina (registered by installing Lamina, entry point ``pytest11``).

lamina_moto    (session)  the moto server, a ``MotoServer``; dummy AWS credentials exported
lamina_s3      (test)     a fresh bucket on it, a ``MotoS3``: ``.storage_options``, ``.uri(name)``,
                          ``.requests()``, ``.faults()``; ``@pytest.mark.lamina_s3(fault_rate=0.05,
                          seed=1, ...)`` puts it behind the fault proxy (``moto_s3``'s arguments)
lamina_ray     (session)  a local Ray, 2 CPUs, its own temp dir (``local_ray``); yields ``ray``
lamina_table   (test)     ``lamina_table(schema, rows=None, *, on="local"|"s3", name="table",
                          **create_options)`` creates a table under the test's tmp_path or in
                          ``lamina_s3``'s bucket and returns it

def test_my_pipeline(lamina_table):
    t = lamina_table(pa.schema([("id", pa.int64())]), [{"id": 1}], on="s3")
    my_pipeline(t.uri, t.storage_options)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from lamina.errors import InvalidArgument
from lamina.testing.cluster import local_ray
from lamina.testing.moto import DUMMY_AWS_ENV, MotoS3, MotoServer, moto_s3
from lamina.testing.tables import make_table


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "lamina_s3(fault_rate=0.0, seed=0, kinds=None, ...): the lamina_s3 fixture's bucket is "
        "reached through lamina.testing's fault proxy with these moto_s3 arguments",
    )


@pytest.fixture(scope="session")
def lamina_moto() -> Iterator[MotoServer]:
    """A moto S3 server on 127.0.0.1 for the session (atomic conditional writes); the dummy AWS
    credentials are exported (where unset) so subprocesses and Ray workers inherit them."""
    for k, v in DUMMY_AWS_ENV.items():
        os.environ.setdefault(k, v)
    server = MotoServer().start()
    yield server
    server.stop()


@pytest.fixture
def lamina_s3(request: pytest.FixtureRequest, lamina_moto: MotoServer) -> Iterator[MotoS3]:
    """A fresh bucket on the session's moto server (behind the fault proxy with ``@pytest.mark.lamina_s3(...)``)."""
    marker = request.node.get_closest_marker("lamina_s3")
    with moto_s3(server=lamina_moto, **(marker.kwargs if marker else {})) as s3:
        yield s3


@pytest.fixture(scope="session")
def lamina_ray(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A local Ray for the session (2 CPUs, temp dir under pytest's); yields the ``ray`` module."""
    with local_ray(num_cpus=2, temp_dir=str(tmp_path_factory.mktemp("ray"))) as ray:
        yield ray


@pytest.fixture
def lamina_table(request: pytest.FixtureRequest, tmp_path) -> Callable[..., Any]:
    """A factory: ``lamina_table(schema, rows=None, *, on="local", name="table", **create_options)``."""

    def create(schema, rows=None, *, on: str = "local", name: str = "table", **create_options: Any):
        if on == "local":
            return make_table(str(tmp_path / name), schema, rows, **create_options)
        if on == "s3":
            s3: MotoS3 = request.getfixturevalue("lamina_s3")
            return make_table(s3.uri(name), schema, rows, storage_options=s3.storage_options, **create_options)
        raise InvalidArgument(f"lamina_table(on={on!r}): use on='local' or on='s3'")

    return create
