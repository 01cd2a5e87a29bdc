"""How S3 requests travel: TLS, proxies, timeouts and connection pools, decided once per store and taken by both
ways a request is sent, and what a failed request is.

Reads (GET, HEAD, ListObjectsV2) are signed by :mod:`lamina.store.s3.credentials` and sent through botocore's
own HTTP session (``URLLib3Session``, the one its clients send through), without a client: a client's request
pipeline (events, endpoint rules, response parsing) costs CPU on every GET, and making one loads botocore's S3
service model. Writes, deletes and multipart uploads go through a boto3 client. Both are built here from the
same :class:`TLS`, proxies, timeouts and pool size, and neither retries: every request is retried by the store
with Lamina's backoff, whichever way it went, so both see the same attempts and the same errors.
"""

from __future__ import annotations

import functools
import os
import re
import ssl
import threading
from typing import Any, NamedTuple

from lamina.errors import InvalidConfig
from lamina.store.s3.credentials import CREDENTIAL_ENV, StaticCredentials, session_for

#: Seconds to connect, and to wait for each read of an answer; the client's and the direct session's.
CONNECT_TIMEOUT, READ_TIMEOUT = 10, 60

#: S3 error codes (and HTTP statuses) a retry may cure.
RETRY_CODES = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequests",
    "RequestThrottled",
    "InternalError",
    "ServiceUnavailable",
    "RequestTimeout",
    "RequestTimeTooSkewed",
    "ConditionalRequestConflict",
    "OperationAborted",
    "500",
    "502",
    "503",
    "504",
}
RETRY_STATUSES = {"500", "502", "503", "504", "429"}
MISSING_CODES = {"NoSuchKey", "404", "NotFound"}

_LOCK = threading.Lock()


# -- TLS and proxies ---------------------------------------------------------------------------------


class TLS(NamedTuple):
    """How requests to S3 check the endpoint's certificate: against ``ca_bundle`` (a PEM file), or not at all
    (``verify`` false). Decided once per store by :func:`tls_settings`; the client and the direct session both
    take it, so reads and writes trust the same endpoints."""

    verify: bool
    ca_bundle: str
    #: Where ``ca_bundle`` came from (a storage option, a variable, the config file, certifi), for errors.
    source: str

    @property
    def botocore_verify(self) -> str | bool:
        """``verify`` as botocore's clients and HTTP session take it."""
        return self.ca_bundle if self.verify else False


@functools.lru_cache(maxsize=16)
def _configured_ca_bundle(profile: str | None, config_file: str, env_profile: str | None) -> str | None:
    """``ca_bundle`` of ``profile`` (else ``AWS_PROFILE``'s, else the default's) in the AWS config file, read by
    botocore once per process and profile."""
    import botocore.session

    bundle: str | None = botocore.session.Session(profile=profile).get_config_variable("ca_bundle")
    return bundle


def tls_settings(o: dict[str, Any], uri: str) -> TLS:
    """The TLS settings of the store at ``uri`` with options ``o``, in botocore's order of precedence:
    ``verify=false`` (only when asked), else the CA bundle of the ``ca_bundle`` option, ``AWS_CA_BUNDLE``,
    ``ca_bundle`` in the AWS config file (of ``profile``), ``REQUESTS_CA_BUNDLE``, else certifi's."""
    raw = o.get("verify", True)
    flag = str(raw).strip().lower()
    if flag not in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        raise InvalidConfig(
            f"storage option verify={raw!r} for {uri} is not a boolean: give true or false "
            "(a CA bundle goes in the ca_bundle option)"
        )
    verify = flag in ("true", "1", "yes", "on")
    found: tuple[Any, str] | None = None
    if o.get("ca_bundle") not in (None, ""):
        found = o["ca_bundle"], "storage option ca_bundle"
    elif os.environ.get("AWS_CA_BUNDLE"):
        found = os.environ["AWS_CA_BUNDLE"], "AWS_CA_BUNDLE"
    else:
        config_file = os.path.expanduser(os.environ.get("AWS_CONFIG_FILE") or "~/.aws/config")
        if os.path.isfile(config_file):  # botocore is imported only when there is a file to read
            configured = _configured_ca_bundle(o.get("profile"), config_file, os.environ.get("AWS_PROFILE"))
            if configured:
                found = configured, f"ca_bundle in {config_file}"
        if found is None and os.environ.get("REQUESTS_CA_BUNDLE"):
            found = os.environ["REQUESTS_CA_BUNDLE"], "REQUESTS_CA_BUNDLE"
    if found is None:
        import certifi

        return TLS(verify, certifi.where(), "certifi")
    path, source = os.path.expanduser(str(found[0])), found[1]
    if verify and not os.path.isfile(path):
        raise InvalidConfig(
            f"the CA bundle {path!r} ({source}) for {uri} is not a file: give the PEM file of the "
            "CA certificates that sign the endpoint's certificate"
        )
    return TLS(verify, path, source)


def proxies_for(o: dict[str, Any], url: str) -> tuple[tuple[str, str], ...]:
    """The proxies of requests to ``url`` as ``((scheme, proxy URL), ...)``: the ``proxy_url`` option for both
    schemes, else botocore's reading of the environment (``HTTPS_PROXY`` / ``HTTP_PROXY`` by the URL's scheme,
    none for a host in ``NO_PROXY``), which a client would otherwise make on its own. Given explicitly to the
    client and to the direct session alike."""
    given = o.get("proxy_url")
    if given:
        if not re.match(r"^https?://[^/]", str(given)):
            raise InvalidConfig(f"storage option proxy_url={given!r} is not an http:// or https:// URL")
        return (("http", str(given)), ("https", str(given)))
    if not any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy")):
        return ()  # nothing to read, no import
    from botocore.utils import get_environ_proxies

    return tuple(sorted(get_environ_proxies(url).items()))


def static_endpoint(endpoint_url: str | None, region: str) -> str | None:
    """The base URL of S3 requests sent directly, when it follows from the options alone: the endpoint given,
    or AWS's regional endpoint in the standard partition. None: ask a client (FIPS, dual-stack, China,
    GovCloud and other partitions, whose rules botocore knows)."""
    if endpoint_url:
        return endpoint_url.rstrip("/")
    if any(os.environ.get(v, "").lower() == "true" for v in ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT")):
        return None
    if not re.fullmatch(
        r"(us|eu|ap|ca|sa|me|af|il|mx)-"
        r"(north|south|east|west|central|northeast|northwest|southeast|southwest)-\d",
        region,
    ):
        return None
    return f"https://s3.{region}.amazonaws.com"


# -- failures ---------------------------------------------------------------------------------------


class DirectError(Exception):
    """An S3 error answer to a request sent directly; ``response`` is shaped as botocore's ``ClientError``'s, so
    retries and translation treat both alike."""

    def __init__(self, operation: str, code: str, message: str, status: int):
        super().__init__(f"An error occurred ({code}) when calling the {operation} operation: {message}")
        self.response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


class DirectConnectionError(Exception):
    """A request sent directly got no whole answer: its body ended before its ``Content-Length``."""


def _untrusted_certificate(e: BaseException) -> bool:
    """Whether ``e`` (or an error it was raised from) is a TLS certificate the client refused: no retry helps."""
    seen: set[int] = set()
    stack: list[Any] = [e]
    while stack:
        err = stack.pop()
        if not isinstance(err, BaseException) or id(err) in seen:
            continue
        seen.add(id(err))
        if isinstance(err, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(err):
            return True
        stack.extend((err.__cause__, err.__context__, *err.args))
    return False


def failure(e: BaseException) -> str | None:
    """What kind of failure ``e`` is: "answer" (S3 answered with an error), "connection" (no whole answer:
    retried), "untrusted" (the endpoint's TLS certificate was refused), "credentials", or None (not a request
    failure: raised as it is). botocore is imported only when one of its exceptions is in hand."""
    if isinstance(e, DirectError):
        return "answer"
    if isinstance(e, DirectConnectionError):
        return "connection"
    if type(e).__module__.startswith("botocore"):
        from botocore.exceptions import ClientError, HTTPClientError, NoCredentialsError
        from botocore.exceptions import ConnectionError as BotoConnectionError

        if isinstance(e, ClientError):
            return "answer"
        if isinstance(e, NoCredentialsError):
            return "credentials"
        if isinstance(e, (BotoConnectionError, HTTPClientError)):
            return "untrusted" if _untrusted_certificate(e) else "connection"
    return None


def error_code(e: Any) -> str:
    """The S3 error code of an answer (``DirectError`` or botocore's ``ClientError``)."""
    return str(e.response.get("Error", {}).get("Code", ""))


def error_status(e: Any) -> str:
    return str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))


def retryable(code: str, status: str) -> bool:
    """Whether an answer with this code and HTTP status is worth another attempt (throttling, 5xx, S3's 409
    ``ConditionalRequestConflict``)."""
    return code in RETRY_CODES or status in RETRY_STATUSES or (status == "409" and code == "ConditionalRequestConflict")


def _xml_error(body: bytes) -> tuple[str, str]:
    """(code, message) of an S3 XML error body; empty strings when there is none (e.g. a HEAD)."""
    text = body[:4096].decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else ""), (message.group(1) if message else "")


# -- the two ways of sending ------------------------------------------------------------------------


class Reply(NamedTuple):
    """A successful answer to a request sent directly."""

    status: int
    headers: Any  # case-insensitive
    data: bytes


#: One botocore HTTP session per process, TLS setting, proxies and pool size.
_HTTP: dict[tuple[Any, ...], Any] = {}
#: One boto3 client per process and configuration: creating one is slow (botocore parses its service model),
#: and clients are thread-safe. Keyed by everything that shapes the client, including the credential
#: environment, so a changed environment gets a new client.
_CLIENTS: dict[tuple[Any, ...], Any] = {}


def http_session(tls: TLS, proxies: tuple[tuple[str, str], ...], pool: int) -> Any:
    """The process's botocore ``URLLib3Session`` for these settings, configured as a client's would be."""
    key = (tls, proxies, pool)
    found = _HTTP.get(key)
    if found is None:
        with _LOCK:
            found = _HTTP.get(key)
            if found is None:
                from botocore.httpsession import URLLib3Session

                found = _HTTP[key] = URLLib3Session(
                    verify=tls.botocore_verify,
                    proxies=dict(proxies),
                    timeout=(CONNECT_TIMEOUT, READ_TIMEOUT),
                    max_pool_connections=pool,
                )
    return found


class Transport:
    """Sends one signed request without a client: ``sign`` (the store's :class:`~lamina.store.s3.credentials.Signer`)
    adds the signature, botocore's HTTP session sends it; an error answer is raised as :class:`DirectError`, a
    dropped or cut-off one as botocore's connection errors or :class:`DirectConnectionError`."""

    def __init__(self, sign: Any, tls: TLS, proxies: tuple[tuple[str, str], ...], pool: int):
        self._sign, self.tls, self.proxies, self.pool = sign, tls, proxies, pool

    def send(self, operation: str, method: str, url: str, headers: dict[str, str] | None = None) -> Reply:
        """``url`` is already percent-encoded, its query in SigV4's canonical form (sent as signed)."""
        from botocore.awsrequest import AWSRequest

        request = AWSRequest(method=method, url=url, headers=headers or {})
        self._sign(request)
        response = http_session(self.tls, self.proxies, self.pool).send(request.prepare())
        data = response.content
        if response.status_code in (200, 206):
            expected = response.headers.get("Content-Length")
            # botocore's session reads an answer without checking its length (its clients check it later):
            # a body cut short is a dropped connection, never data.
            if method != "HEAD" and expected is not None and int(expected) != len(data):
                raise DirectConnectionError(f"{method} {url}: the answer ended after {len(data)} of {expected} bytes")
            return Reply(response.status_code, response.headers, data)
        code, message = _xml_error(data)
        raise DirectError(operation, code or str(response.status_code), message, response.status_code)


def client_for(
    o: dict[str, Any], endpoint_url: str | None, pool: int, uri: str, tls: TLS, proxies: tuple[tuple[str, str], ...], keys: Any
) -> Any:
    """The process's boto3 client for these options, from the session of :func:`~lamina.store.s3.credentials.session_for`
    (``keys``: the store's credentials when they were resolved without a session). It never retries."""
    static = keys if isinstance(keys, StaticCredentials) else None
    key = (
        tuple(sorted((k, str(v)) for k, v in o.items())),
        endpoint_url,
        pool,
        tls,
        proxies,
        static,
        tuple(os.environ.get(k) for k in CREDENTIAL_ENV),
    )
    client = _CLIENTS.get(key)
    if client is not None:
        return client
    session = session_for(o, uri, static)
    with _LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            from botocore.config import Config

            config = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},  # Lamina retries, with its own backoff
                max_pool_connections=pool,
                connect_timeout=CONNECT_TIMEOUT,
                read_timeout=READ_TIMEOUT,
                proxies=dict(proxies),  # explicit, so the client does not read the environment on its own
                s3={"addressing_style": "path"} if endpoint_url else None,
            )
            client = _CLIENTS[key] = session.client(
                "s3",
                endpoint_url=endpoint_url,
                region_name=session.region_name or "us-east-1",
                config=config,
                verify=tls.botocore_verify,
            )
        return client


def forget() -> None:
    """Drops the process's clients and HTTP sessions (a forked child must not share its parent's connections)."""
    _CLIENTS.clear()
    _HTTP.clear()
