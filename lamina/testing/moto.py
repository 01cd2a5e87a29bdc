"""A moto S3 server whose conditional writes are atomic, and ``moto_s3``: a bucket on it, behind the fault proxy on request.

moto checks ``If-None-Match`` / ``If-Match`` and then writes without a lock, so two concurrent
conditional puts of one key can both succeed there, which real S3 never allows. Lamina's
commits rely on that guarantee (docs/FORMAT.md §7): against a plain ``ThreadedMotoServer``
two writers racing for a version can both "win" and one commit is silently lost. This server
runs moto's own application and serializes conditional requests only, so it behaves as S3
does while everything else stays concurrent::

    from lamina.testing import moto_s3
    with moto_s3() as s3:                      # a server on 127.0.0.1 and a fresh bucket
        lamina.create_table(s3.uri("t"), schema, storage_options=s3.storage_options)
    with moto_s3(fault_rate=0.05, seed=1) as s3:   # the same behind lamina.testing.proxy's faults
        ...; s3.faults()                       # {"get": 3, "conditional_put": 1, ...}

It is reached over TCP, so subprocesses and Ray workers share its buckets.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from lamina.errors import InvalidArgument
from lamina.testing.proxy import FaultProxy

#: Credentials and region moto accepts; what ``MotoS3.storage_options`` and ``MotoS3.env`` carry.
DUMMY_AWS_ENV = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


def request_kind(method: str, path: str) -> str:
    """The S3 request kind of a path-style request: GET, PUT, HEAD, DELETE, POST, or LIST (a GET of a bucket)."""
    if method == "GET" and "/" not in path.strip("/"):
        return "LIST"
    return method


class _AtomicConditionalWrites:
    """WSGI middleware: requests carrying a write condition run one at a time, start to end; every
    request is counted by bucket and kind (``MotoServer.requests``)."""

    def __init__(self, app: Callable[..., Iterable[bytes]]):
        self.app = app
        self.lock = threading.Lock()
        self.counts: dict[tuple[str, str], int] = {}
        self._count_lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        key = (path.strip("/").split("/", 1)[0], request_kind(environ.get("REQUEST_METHOD", ""), path))
        with self._count_lock:
            self.counts[key] = self.counts.get(key, 0) + 1
        if not (environ.get("HTTP_IF_NONE_MATCH") or environ.get("HTTP_IF_MATCH")):
            return self.app(environ, start_response)
        with self.lock:
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


class MotoServer:
    """A moto S3 server on ``ip``:``port`` (0: any free port) in a thread of this process; over TLS with
    ``ssl_context`` (a server context, e.g. ``lamina.testing.tls.TestCA.server_context()``)."""

    def __init__(self, ip: str = "127.0.0.1", port: int = 0, ssl_context: Any = None):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        app = self._app = _AtomicConditionalWrites(DomainDispatcherApplication(create_backend_app))
        self._scheme = "https" if ssl_context is not None else "http"
        self._server = make_server(ip, port, app, threaded=True, request_handler=MotoRequestHandler, ssl_context=ssl_context)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-s3", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET address
        return f"{self._scheme}://{host}:{port}"

    def requests(self, bucket: str | None = None) -> dict[str, int]:
        """Requests this server has answered so far, by kind (GET, PUT, HEAD, DELETE, POST, LIST), for one
        bucket or all (path-style addressing, as Lamina and lance use against an endpoint)."""
        out: dict[str, int] = {}
        with self._app._count_lock:
            for (b, kind), n in self._app.counts.items():
                if bucket is None or b == bucket:
                    out[kind] = out.get(kind, 0) + n
        return out

    def start(self) -> MotoServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._thread.join()


@contextlib.contextmanager
def moto_server(ip: str = "127.0.0.1", port: int = 0) -> Iterator[str]:
    """A running moto S3 server with S3's atomic conditional writes; yields its endpoint URL."""
    server = MotoServer(ip, port).start()
    try:
        yield server.endpoint
    finally:
        server.stop()


@dataclass
class MotoS3:
    """A bucket on a moto server, reached directly or through a ``FaultProxy`` (``moto_s3`` yields one)."""

    server: MotoServer
    bucket: str
    proxy: FaultProxy | None = None
    region: str = "us-east-1"
    #: The CA certificate (PEM) that signs a TLS server's certificate; None for plain HTTP.
    ca_file: str | None = None

    @property
    def endpoint(self) -> str:
        """The endpoint clients use: the fault proxy's when there is one, else the server's."""
        return self.proxy.url if self.proxy is not None else self.server.endpoint

    @property
    def storage_options(self) -> dict[str, str]:
        """Lamina ``storage_options`` reaching the bucket (through the faults, if any); plain strings,
        so they pickle to Ray workers and serialize to subprocesses (JSON)."""
        return self._options(self.endpoint)

    @property
    def direct_options(self) -> dict[str, str]:
        """``storage_options`` that reach the server directly, past any fault: to check results."""
        return self._options(self.server.endpoint)

    @property
    def env(self) -> dict[str, str]:
        """Environment variables for a child process: dummy credentials, region and the endpoint
        (``AWS_ENDPOINT_URL_S3``, which Lamina and boto3 read when no endpoint is given)."""
        return {**DUMMY_AWS_ENV, "AWS_DEFAULT_REGION": self.region, "AWS_ENDPOINT_URL_S3": self.endpoint}

    def uri(self, name: str = "table") -> str:
        """``s3://<bucket>/<name>``."""
        return f"s3://{self.bucket}/{name.strip('/')}"

    def requests(self) -> dict[str, int]:
        """Requests the server answered for this bucket so far, by kind (GET, PUT, HEAD, DELETE, POST, LIST)."""
        return self.server.requests(self.bucket)

    def faults(self) -> dict[str, int]:
        """Faults injected so far, by request kind (``lamina.testing.proxy.KINDS``); empty without faults."""
        return self.proxy.faults() if self.proxy is not None else {}

    def client(self) -> Any:
        """A boto3 S3 client reaching the server directly (trusting ``ca_file``, when the server has TLS)."""
        import boto3

        return boto3.client(
            "s3",
            endpoint_url=self.server.endpoint,
            region_name=self.region,
            aws_access_key_id=DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
            aws_secret_access_key=DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            verify=self.ca_file or None,
        )

    def _options(self, endpoint: str) -> dict[str, str]:
        return {
            "endpoint_url": endpoint,
            "aws_access_key_id": DUMMY_AWS_ENV["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": DUMMY_AWS_ENV["AWS_SECRET_ACCESS_KEY"],
            "region": self.region,
        }


@contextlib.contextmanager
def moto_s3(
    *,
    fault_rate: float | dict[str, float] = 0.0,
    seed: int = 0,
    kinds: Iterable[str] | None = None,
    faults: Iterable[str] | None = None,
    max_faults: int = 10_000,
    max_seconds: float = 600.0,
    delay_seconds: float = 0.2,
    server: MotoServer | None = None,
    bucket: str | None = None,
    tls: Any = None,
) -> Iterator[MotoS3]:
    """A fresh bucket on a moto server on 127.0.0.1 (``server``, else one started here and stopped at the end).

    With ``tls`` (a ``lamina.testing.tls.TestCA``) the server started here speaks HTTPS with a certificate
    that CA signs; ``storage_options`` do not trust it (give ``MotoS3.ca_file`` as a client would).

    With ``fault_rate > 0`` clients reach it through a ``FaultProxy`` that faults that share of
    the requests of each of ``kinds`` (default: all) by a schedule drawn from ``seed``, with
    ``faults`` (default: all that apply), at most ``max_faults`` times and for ``max_seconds``
    at most (see ``lamina.testing.proxy``). The bucket is created directly, past the faults.
    """
    own = server is None
    srv = server if server is not None else MotoServer(ssl_context=tls.server_context() if tls is not None else None).start()
    proxy = None
    try:
        if (max(fault_rate.values(), default=0.0) if isinstance(fault_rate, dict) else fault_rate) > 0:
            if tls is not None:
                raise InvalidArgument("moto_s3(tls=..., fault_rate=...): the fault proxy speaks plain HTTP; use one or the other")
            proxy = FaultProxy(
                srv.endpoint,
                rate=fault_rate,
                seed=seed,
                kinds=kinds,
                faults=faults,
                max_faults=max_faults,
                max_seconds=max_seconds,
                delay_seconds=delay_seconds,
            )
        s3 = MotoS3(srv, bucket or f"lamina-{uuid.uuid4().hex[:12]}", proxy, ca_file=tls.ca_file if tls is not None else None)
        s3.client().create_bucket(Bucket=s3.bucket)
        yield s3
    finally:
        if proxy is not None:
            proxy.close()
        if own:
            srv.stop()


__all__ = ["DUMMY_AWS_ENV", "MotoS3", "MotoServer", "moto_s3", "moto_server", "request_kind"]
