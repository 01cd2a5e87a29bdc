"""A fault-injecting HTTP proxy on loopback in front of an S3 endpoint (moto), for tests of code that must survive S3's errors.

Every request is forwarded to the upstream as is, unless a fault is injected. Two ways to inject:

* **A seeded schedule**: ``FaultProxy(upstream, rate=0.05, seed=7)`` faults about 5% of the
  requests of each kind (``KINDS``; ``rate`` may also be a ``{kind: rate}`` dict). A faulted
  request gets one of the faults (``FAULTS``) its kind allows:

  ========== ===========================================================================
  ``500``    answered ``500 InternalError``, not forwarded
  ``503``    answered ``503 SlowDown``, not forwarded
  ``409``    answered ``409 ConditionalRequestConflict``, not forwarded (conditional writes only)
  ``drop``   reads (GET, ranged GET, LIST): forwarded, then the answer is cut off mid-body;
             everything else: forwarded, then the connection is reset, so the client cannot
             tell whether the request landed
  ``delay``  held for ``delay_seconds``, then forwarded
  ========== ===========================================================================

  The decision for the n-th request of a kind depends only on ``seed``, the kind and n, so a
  run is reproducible given the seed and the order of requests. The schedule is bounded: at
  most ``max_faults`` injections, none after ``max_seconds`` from the proxy's start, and never
  more than ``max_consecutive`` faults in a row on one request (method, target and range), so
  a client that retries ``max_consecutive + 1`` times always gets through. ``faults()``
  counts the injections by kind, ``fault_types()`` by fault, ``events`` lists them in order.

* **Hand-driven rules**, checked before the schedule: ``drop_response(method, regex)`` lets
  the next matching request land and resets the connection; ``answer(method, regex, status,
  code)`` answers it with an S3 error without forwarding it.

Loopback only, one daemon thread per connection, every upstream call bounded by ``timeout``.
"""

from __future__ import annotations

import http.client
import random
import re
import socket
import struct
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

from lamina.errors import InvalidArgument

#: Request kinds the schedule can fault (``other``: bucket operations, never faulted).
KINDS = ("get", "ranged_get", "head", "put", "conditional_put", "multipart", "list", "delete")
#: Faults the schedule injects.
FAULTS = ("500", "503", "409", "drop", "delay")

_HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "expect",
    "proxy-connection",
    "content-length",
}
_READS = {"get", "ranged_get", "list"}
_ERRORS = {"500": (500, "InternalError"), "503": (503, "SlowDown"), "409": (409, "ConditionalRequestConflict")}


def fault_kind(method: str, target: str, headers: Mapping[str, str]) -> str:
    """The kind (one of ``KINDS``, else ``other``) of a path-style S3 request: from its method, its
    path and query string, and its ``Range`` / ``If-None-Match`` / ``If-Match`` headers."""
    parts = urlsplit(target)
    query = parse_qs(parts.query, keep_blank_values=True)
    has_key = "/" in parts.path.strip("/")
    lower = {k.lower(): v for k, v in headers.items()}
    conditional = "if-none-match" in lower or "if-match" in lower
    if "uploadId" in query or "uploads" in query or "partNumber" in query:
        return "conditional_put" if method == "POST" and conditional else "multipart"
    if not has_key:
        if method == "GET":
            return "list"
        return "delete" if method == "POST" and "delete" in query else "other"
    if method == "GET":
        return "ranged_get" if "range" in lower else "get"
    if method == "HEAD":
        return "head"
    if method == "PUT":
        return "conditional_put" if conditional else "put"
    if method == "DELETE":
        return "delete"
    return "other"


def _allowed(kind: str) -> tuple[str, ...]:
    return tuple(f for f in FAULTS if f != "409" or kind == "conditional_put")


def _error_body(code: str) -> bytes:
    return (
        f'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>{code}</Code><Message>injected by the test proxy</Message></Error>'
    ).encode()


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
    """One request the proxy received."""

    method: str
    target: str
    status: int | None  # what the upstream answered; None if the proxy answered or nothing was forwarded
    dropped: bool


@dataclass(frozen=True)
class Injection:
    """One fault the schedule injected."""

    kind: str
    fault: str
    method: str
    target: str


class _QuietServer(ThreadingHTTPServer):
    """A client that goes away mid-request (a killed process, a dropped connection: what the proxy
    is for) is not an error worth a traceback on stderr."""

    def handle_error(self, request, client_address) -> None:  # unannotated: socketserver's signature
        import sys

        if not isinstance(sys.exc_info()[1], (ConnectionError, TimeoutError, OSError)):
            super().handle_error(request, client_address)


class FaultProxy:
    """An HTTP proxy on 127.0.0.1 in front of ``upstream`` that injects S3 faults (see the module)."""

    def __init__(
        self,
        upstream: str,
        *,
        rate: float | Mapping[str, float] = 0.0,
        seed: int = 0,
        kinds: Iterable[str] | None = None,
        faults: Iterable[str] | None = None,
        max_faults: int = 10_000,
        max_seconds: float = 600.0,
        max_consecutive: int = 3,
        delay_seconds: float = 0.2,
        timeout: float = 30.0,
    ):
        parts = urlsplit(upstream)
        if parts.hostname is None:
            raise InvalidArgument(f"the fault proxy's upstream is a URL such as http://127.0.0.1:5000, got {upstream!r}")
        self.upstream_host, self.upstream_port = parts.hostname, parts.port
        self.timeout = timeout
        chosen = set(KINDS if kinds is None else kinds)
        unknown = sorted(
            (chosen - set(KINDS))
            | (set(faults or ()) - set(FAULTS))
            | (set(rate) - set(KINDS) if isinstance(rate, Mapping) else set())
        )
        if unknown:
            raise InvalidArgument(f"unknown request kind(s) or fault(s) {unknown}: kinds are {KINDS}, faults {FAULTS}")
        rates = dict(rate) if isinstance(rate, Mapping) else {k: float(rate) for k in KINDS}
        self.rates = {k: float(rates.get(k, 0.0)) for k in KINDS if k in chosen}
        if any(not 0.0 <= r <= 1.0 for r in self.rates.values()):
            raise InvalidArgument(f"fault rates must be within [0, 1], got {self.rates}")
        self.seed = seed
        self.fault_choices = tuple(FAULTS if faults is None else (f for f in FAULTS if f in set(faults)))
        self.max_faults, self.max_seconds, self.max_consecutive = max_faults, max_seconds, max_consecutive
        self.delay_seconds = delay_seconds
        self.rules: list[Rule] = []
        self.seen: deque[Seen] = deque(maxlen=200_000)
        self.events: list[Injection] = []
        self._per_kind: dict[str, int] = {}
        self._streak: dict[tuple[str, str, str], int] = {}
        self._lock = threading.Lock()
        self._started = time.monotonic()
        self._server = _QuietServer(("127.0.0.1", 0), self._handler_class())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="s3-fault-proxy", daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        assert isinstance(host, str)  # an AF_INET address
        return f"http://{host}:{port}"

    # -- hand-driven rules ------------------------------------------------------------------
    def drop_response(self, method: str, target: str, times: int = 1) -> Rule:
        """The next ``times`` matching requests reach the upstream; their responses are lost (connection reset)."""
        rule = Rule(method, target, times)
        with self._lock:
            self.rules.append(rule)
        return rule

    def answer(self, method: str, target: str, status: int, code: str, times: int = 1) -> Rule:
        """The next ``times`` matching requests are answered with an S3 error ``code`` and not forwarded."""
        rule = Rule(method, target, times, reply=(status, code, _error_body(code)))
        with self._lock:
            self.rules.append(rule)
        return rule

    # -- what happened ----------------------------------------------------------------------
    def requests(self, method: str, target: str = "") -> list[Seen]:
        """Requests received with ``method`` whose target matches the regex ``target``."""
        with self._lock:
            return [s for s in self.seen if s.method == method and re.search(target, s.target)]

    def faults(self) -> dict[str, int]:
        """Faults the schedule injected so far, by request kind."""
        return self._count(lambda e: e.kind)

    def fault_types(self) -> dict[str, int]:
        """Faults the schedule injected so far, by fault (``500``, ``503``, ``409``, ``drop``, ``delay``)."""
        return self._count(lambda e: e.fault)

    def _count(self, key) -> dict[str, int]:
        out: dict[str, int] = {}
        with self._lock:
            for e in self.events:
                out[key(e)] = out.get(key(e), 0) + 1
        return out

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=self.timeout)

    def __enter__(self) -> FaultProxy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- decisions --------------------------------------------------------------------------
    def _take(self, method: str, target: str) -> Rule | None:
        with self._lock:
            for rule in self.rules:
                if rule.matches(method, target):
                    rule.hits += 1
                    return rule
        return None

    def _schedule(self, kind: str, method: str, target: str, byte_range: str) -> str | None:
        """The fault for this request, if the schedule injects one."""
        rate = self.rates.get(kind, 0.0)
        if rate <= 0.0:
            return None
        with self._lock:
            n = self._per_kind.get(kind, 0)
            self._per_kind[kind] = n + 1
            rng = random.Random(f"{self.seed}:{kind}:{n}")
            hit = rng.random() < rate
            allowed = [f for f in self.fault_choices if f in _allowed(kind)]
            key = (method, target, byte_range)
            if (
                not hit
                or not allowed
                or len(self.events) >= self.max_faults
                or time.monotonic() - self._started >= self.max_seconds
                or self._streak.get(key, 0) >= self.max_consecutive
            ):
                self._streak.pop(key, None)
                return None
            fault = allowed[rng.randrange(len(allowed))]
            self._streak[key] = self._streak.get(key, 0) + 1
            self.events.append(Injection(kind, fault, method, target))
            return fault

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

            def _reply(self, status: int, payload: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/xml")
                self.send_header("Content-Length", "0" if self.command == "HEAD" else str(len(payload)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(payload)

            def _reset(self) -> None:
                """Resets the connection: the client never sees an answer."""
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True
                self.connection.close()

            def _handle(self) -> None:
                body = self._body()
                rule = proxy._take(self.command, self.path)
                fault = None
                kind = fault_kind(self.command, self.path, dict(self.headers.items()))
                if rule is None:
                    fault = proxy._schedule(kind, self.command, self.path, self.headers.get("Range", ""))
                if rule is not None and rule.reply is not None:
                    proxy._record(Seen(self.command, self.path, None, False))
                    self._reply(rule.reply[0], rule.reply[2])
                    return
                if fault in _ERRORS:
                    status, code = _ERRORS[fault]
                    proxy._record(Seen(self.command, self.path, None, False))
                    self._reply(status, _error_body(code))
                    return
                if fault == "delay":
                    time.sleep(proxy.delay_seconds)
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
                dropped = rule is not None or fault == "drop"
                proxy._record(Seen(self.command, self.path, resp.status, dropped))
                if dropped and not (fault == "drop" and kind in _READS and len(payload) > 1):
                    self._reset()  # the request landed; its answer is lost
                    return
                self.send_response(resp.status)
                for k, v in resp_headers:
                    self.send_header(k, v)
                # A HEAD answer carries the object's length, not its own (empty) body's.
                length = resp.getheader("Content-Length") if self.command == "HEAD" else None
                self.send_header("Content-Length", length or str(len(payload)))
                self.end_headers()
                if self.command == "HEAD":
                    return
                if fault == "drop":  # half the body, then the connection closes
                    self.wfile.write(payload[: len(payload) // 2])
                    self.close_connection = True
                    return
                self.wfile.write(payload)

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        return Handler


__all__ = ["FAULTS", "KINDS", "FaultProxy", "Injection", "Rule", "Seen", "fault_kind"]
