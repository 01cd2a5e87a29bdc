"""Test helpers for pipelines built on Lamina: a moto S3 server whose conditional writes are atomic.

moto checks ``If-None-Match`` / ``If-Match`` and then writes without a lock, so two concurrent
conditional puts of one key can both succeed there, which real S3 never allows. Lamina's
commits rely on that guarantee (docs/FORMAT.md §7): against a plain ``ThreadedMotoServer``
two writers racing for a version can both "win" and one commit is silently lost. This server
runs moto's own application and serializes conditional requests only, so it behaves as S3
does while everything else stays concurrent::

    from lamina.testing import moto_server
    with moto_server() as endpoint:            # "http://127.0.0.1:<port>"
        lamina.create_table("s3://bucket/t", schema, storage_options={"endpoint_url": endpoint, ...})

It is reached over TCP, so subprocesses and Ray workers share its buckets.
"""

from __future__ import annotations

import contextlib
import logging
import threading
from typing import Any, Callable, Iterable, Iterator


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
    """A moto S3 server on ``ip``:``port`` (0: any free port) in a thread of this process."""

    def __init__(self, ip: str = "127.0.0.1", port: int = 0):
        from moto.moto_server.werkzeug_app import DomainDispatcherApplication, MotoRequestHandler, create_backend_app
        from werkzeug.serving import make_server

        logging.getLogger("werkzeug").setLevel(logging.ERROR)
        app = self._app = _AtomicConditionalWrites(DomainDispatcherApplication(create_backend_app))
        self._server = make_server(ip, port, app, threaded=True, request_handler=MotoRequestHandler)
        self._thread = threading.Thread(target=self._server.serve_forever, name="moto-s3", daemon=True)

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def requests(self, bucket: str | None = None) -> dict[str, int]:
        """Requests this server has answered so far, by kind (GET, PUT, HEAD, DELETE, POST, LIST), for one
        bucket or all (path-style addressing, as Lamina and lance use against an endpoint)."""
        out: dict[str, int] = {}
        with self._app._count_lock:
            for (b, kind), n in self._app.counts.items():
                if bucket is None or b == bucket:
                    out[kind] = out.get(kind, 0) + n
        return out

    def start(self) -> "MotoServer":
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


__all__ = ["MotoServer", "moto_server"]
