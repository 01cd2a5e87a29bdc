"""Test helpers for pipelines built on Lamina: moto S3 (atomic conditional writes, optional fault injection), local Ray, tables.

    from lamina.testing import moto_s3, local_ray, make_table
    with moto_s3(fault_rate=0.05, seed=1) as s3, local_ray():
        t = make_table(s3.uri("events"), schema, rows, storage_options=s3.storage_options)
        ...                                    # run the pipeline; s3.faults() says what was injected

The same as pytest fixtures (``lamina_s3``, ``lamina_ray``, ``lamina_table``): installing Lamina
registers ``lamina.testing.pytest_plugin`` (README, "Testing your pipelines").

    moto.py           MotoServer / moto_server (the server), moto_s3 / MotoS3 (a bucket on it)
    proxy.py          FaultProxy: S3 faults by a seeded schedule or by hand-driven rules
    cluster.py        local_ray: a local Ray with its own temp dir
    tables.py         make_table
    tls.py            TestCA: a private CA and a certificate it signs for 127.0.0.1 (moto_s3(tls=...))
    pytest_plugin.py  the fixtures
"""

from lamina.testing.cluster import local_ray
from lamina.testing.moto import DUMMY_AWS_ENV, MotoS3, MotoServer, moto_s3, moto_server, request_kind
from lamina.testing.proxy import FAULTS, KINDS, FaultProxy, Injection, Rule, Seen, fault_kind
from lamina.testing.tables import make_table
from lamina.testing.tls import TestCA

__all__ = [
    "DUMMY_AWS_ENV",
    "FAULTS",
    "KINDS",
    "FaultProxy",
    "Injection",
    "MotoS3",
    "MotoServer",
    "Rule",
    "Seen",
    "TestCA",
    "fault_kind",
    "local_ray",
    "make_table",
    "moto_s3",
    "moto_server",
    "request_kind",
]
