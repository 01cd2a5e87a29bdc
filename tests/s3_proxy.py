"""A fault-injecting HTTP proxy on loopback, in front of the moto S3 server.

Each request is forwarded to moto as is. A rule chosen by the test either drops the
response after moto has executed the request (the connection is reset, so the client
cannot tell whether the request landed and retries it), or answers the request itself
without forwarding it (to stand in for an S3 answer moto does not give).

    proxy = FaultProxy(moto_endpoint)
    proxy.drop_response("PUT", r"/_versions/")      # the next matching PUT lands, its answer is lost
    store = S3Store(uri, {"endpoint_url": proxy.url, ...})

Loopback only, one daemon thread per connection, every upstream call bounded by a timeout.
"""

from __future__ import annotations

import http.client
import re
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlsplit

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "te", "trailer", "upgrade", "expect",
               "proxy-connection", "content-length"}


@dataclass
class Rule:
    """Matches ``method`` and a regex searched in the request target (path and query)."""

    method: str
    target: str
    times: int
    reply: tuple[int, str, bytes] | None = None  # answer instead of forwarding: (status, S3 error code, body)
    hits: int = 0

    def matches(self, method: str, target: str) -> bool:
        return self.hits < self.times and method == self.method and re.search(self.target, target) is not None


@dataclass
class Seen:
    method: str
    target: str
    status: int | None  # what moto answered; None if the proxy answered or nothing was forwarded
    dropped: bool


class FaultProxy:
    def __init__(self, upstream: str, timeout: float = 30.0):
        parts = urlsplit(upstream)
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.timeout = timeout
        self.rules: list[Rule] = []
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def drop_response(self, method: str, target: str, times: int = 1) -> Rule:
        """The next ``times`` matching requests reach moto; their responses are lost (connection reset)."""
        rule = Rule(method, target, times)
        with self._lock:
            self.rules.append(rule)
        return rule

    def answer(self, method: str, target: str, status: int, code: str, times: int = 1) -> Rule:
        """The next ``times`` matching requests are answered with an S3 error ``code`` and not forwarded."""
        body = (f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code>'
                f"<Message>injected by the test proxy</Message></Error>").encode()
        rule = Rule(method, target, times, reply=(status, code, body))
        with self._lock:
            self.rules.append(rule)
        return rule

    def requests(self, method: str, target: str = "") -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.method == method and re.search(target, s.target)]

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=self.timeout)

    def _take(self, method: str, target: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, target):
                    rule.hits += 1
                    return rule
        return None

    def _record(self, seen: Seen) -> None:
        with self._lock:
            self.seen.append(seen)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _body(self) -> bytes:
                if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                    out = bytearray()
                    while True:
                        size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                        if size == 0:
                            while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                                pass  # trailers
                            return bytes(out)
                        out += self.rfile.read(size)
                        self.rfile.readline()
                return self.rfile.read(int(self.headers.get("Content-Length") or 0))

            def _handle(self) -> None:
                body = self._body()
                rule = proxy._take(self.command, self.path)
                if rule is not None and rule.reply is not None:
                    status, _, payload = rule.reply
                    proxy._record(Seen(self.command, self.path, None, False))
                    self.send_response(status)
                    self.send_header("Content-Type", "application/xml")
                    self.send_header("Content-Length", str(len(payload)))
                    self.end_headers()
                    self.wfile.write(payload)
                    return
                headers = {k: v for k, v in self.headers.items() if k.lower() not in _HOP_BY_HOP}
                headers["Content-Length"] = str(len(body))
                upstream = http.client.HTTPConnection(proxy.upstream_host, proxy.upstream_port, timeout=proxy.timeout)
                try:
                    upstream.request(self.command, self.path, body=body, headers=headers)
                    resp = upstream.getresponse()
                    payload = resp.read()
                    resp_headers = [(k, v) for k, v in resp.getheaders() if k.lower() not in _HOP_BY_HOP]
                finally:
                    upstream.close()
                proxy._record(Seen(self.command, self.path, resp.status, rule is not None))
                if rule is not None:
                    # The request landed; reset the connection so the client never sees the answer.
                    self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                    self.close_connection = True
                    self.connection.close()
                    return
                self.send_response(resp.status)
                for k, v in resp_headers:
                    self.send_header(k, v)
                # A HEAD answer carries the object's length, not its own (empty) body's.
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler
