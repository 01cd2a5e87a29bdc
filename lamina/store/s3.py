"""A table under ``s3://bucket/prefix`` through boto3.

Credentials come from the standard chain (env, profile, instance role) unless
``storage_options`` gives them. Every call retries throttling, 5xx, dropped
connections and S3's 409 ``ConditionalRequestConflict`` with the shared
backoff; put-if-absent is ``PutObject`` (or ``CompleteMultipartUpload``) with
``If-None-Match: *``.

A retried conditional write can meet its own object: S3 executed the first attempt
but the response was lost. Every conditional or multipart write therefore carries a
writer token in its user metadata (``x-amz-meta-lamina-token``), fresh per call; a
retry that meets 412 (or, for multipart, an upload that is gone) reads the object's
token back and reports success only if it is this call's. A 412 on the first attempt
is a genuine loss and costs no extra request; two writers of byte-identical content
are told apart by the token, so exactly one wins.
"""

from __future__ import annotations

import functools
import hashlib
import hmac
import io
import os
import re
import ssl
import threading
import time
import uuid
from typing import Any, Callable, Iterable, Iterator, NamedTuple, TypeVar
from urllib.parse import urlsplit

import pyarrow as pa

from lamina.errors import (
    BucketNotFound,
    CorruptFile,
    InvalidConfig,
    MissingCredentials,
    ObjectNotFound,
    StorageError,
)
from lamina.retry import Backoff
from lamina.store.base import ObjectInfo, ObjectStore, RangeReader
from lamina.store.scheduler import SCAN, count, scheduler_for

T = TypeVar("T")

#: storage_options keys the S3 store understands.
S3_OPTIONS = {
    "endpoint_url": "S3 endpoint, e.g. http://127.0.0.1:5000 for moto/MinIO (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS)",
    "region": "AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / profile, else us-east-1)",
    "aws_access_key_id": "access key (default: the standard credential chain)",
    "aws_secret_access_key": "secret key",
    "aws_session_token": "session token for temporary credentials",
    "profile": "a profile from ~/.aws/config",
    "max_attempts": "attempts per request before giving up (default 8)",
    "multipart_threshold": "objects at least this many bytes are uploaded in parts (default 64 MiB)",
    "multipart_chunk_size": "part size for multipart uploads (default 16 MiB, at least 5 MiB)",
    "max_pool_connections": "HTTP connections per process (default 32)",
    "direct_reads": "GETs signed and sent without botocore's request pipeline, ~5x less CPU per GET (default true)",
    "ca_bundle": "PEM file of the CA certificates the endpoint's TLS certificate must chain to (default: AWS_CA_BUNDLE, "
                 "then ca_bundle in the AWS config file, then REQUESTS_CA_BUNDLE, then certifi's bundle)",
    "verify": "false: do not check the endpoint's TLS certificate, for a test endpoint only (default true)",
}

_RETRY_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequests",
    "RequestThrottled", "InternalError", "ServiceUnavailable", "RequestTimeout", "RequestTimeTooSkewed",
    "ConditionalRequestConflict", "OperationAborted", "500", "502", "503", "504",
}
_MISSING_CODES = {"NoSuchKey", "404", "NotFound"}
_MIB = 1024 * 1024

#: User-metadata key of the writer token (sent as ``x-amz-meta-lamina-token``).
TOKEN_KEY = "lamina-token"

# Outcomes of one conditional request, resolved outside its retry loop: _TAKEN is a retry's
# 412 (an object is there, perhaps ours), _UNSURE a retry that cannot tell whether ours landed.
_WON, _LOST, _TAKEN, _UNSURE, _RESTART = "won", "lost", "taken", "unsure", "restart"


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` → ``("bucket", "a/b")``."""
    rest = uri[len("s3://"):]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise InvalidConfig(f"S3 URI {uri!r} has no bucket: use s3://bucket/path/to/table")
    if any(part in (".", "..") for part in prefix.split("/")):
        # HTTP clients resolve dot segments before sending, so a request would name another key than the one
        # signed (or written by boto3): refused before anything is read or written.
        raise InvalidConfig(f"S3 URI {uri!r} has a '.' or '..' path segment: S3 keys are literal; write the path without it")
    return bucket, prefix.strip("/")


#: One boto3 client per process and configuration: creating one is slow (botocore parses its
#: service model), and clients are thread-safe. Keyed by everything that shapes the client,
#: including the credential environment, so a changed environment gets a new client.
_CLIENTS: dict[tuple, Any] = {}
_SESSIONS: dict[tuple, Any] = {}
_CLIENTS_LOCK = threading.Lock()
_CREDENTIAL_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN",
                   "AWS_CREDENTIAL_EXPIRATION", "AWS_PROFILE", "AWS_REGION", "AWS_DEFAULT_REGION",
                   "AWS_SHARED_CREDENTIALS_FILE", "AWS_CONFIG_FILE")


def _session_for(o: dict[str, Any], uri: str) -> Any:
    """The process's boto3 session for these options (MissingCredentials, naming ``uri``, if there are none):
    credentials and region, without the S3 client (whose service model is slow to load)."""
    key = (tuple(sorted((k, str(v)) for k, v in o.items())), tuple(os.environ.get(k) for k in _CREDENTIAL_ENV))
    session = _SESSIONS.get(key)
    if session is not None:
        return session
    with _CLIENTS_LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            import boto3

            session = boto3.session.Session(
                aws_access_key_id=o.get("aws_access_key_id"),
                aws_secret_access_key=o.get("aws_secret_access_key"),
                aws_session_token=o.get("aws_session_token"),
                profile_name=o.get("profile"),
                region_name=o.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION"),
            )
            if session.get_credentials() is None:
                raise MissingCredentials(
                    f"no AWS credentials found for {uri}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                    "(or AWS_PROFILE), or pass storage_options={'aws_access_key_id': ..., 'aws_secret_access_key': ...}"
                )
            _SESSIONS[key] = session
        return session


class StaticCredentials(NamedTuple):
    """Keys given in ``storage_options`` or the environment, shaped like botocore's frozen credentials."""

    access_key: str
    secret_key: str
    token: str | None

    def get_frozen_credentials(self) -> "StaticCredentials":
        return self


def _credentials_and_region(o: dict[str, Any], uri: str) -> tuple[Any, str]:
    """(credentials, region) for direct requests. Keys and a region given in the options, or else in the
    environment, are used as they are, without importing boto3 (an import that would dominate a new process's first S3 call); that is
    where botocore's chain looks first too (explicit keys, then ``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``).
    Anything else (a profile, a region only in ~/.aws/config, an instance role, SSO) goes through botocore's
    chain, as it always did."""
    region = o.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and not o.get("profile"):
        key, secret = o.get("aws_access_key_id"), o.get("aws_secret_access_key")
        if key and secret:
            return StaticCredentials(str(key), str(secret), o.get("aws_session_token") or None), str(region)
        env_key, env_secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        # Expiring environment credentials (AWS_CREDENTIAL_EXPIRATION) are botocore's to refresh.
        if (not key and not secret and not o.get("aws_session_token") and env_key and env_secret
                and not os.environ.get("AWS_CREDENTIAL_EXPIRATION")):
            # botocore's EnvProvider takes the first of these that is set, in this order.
            token = os.environ.get("AWS_SECURITY_TOKEN") or os.environ.get("AWS_SESSION_TOKEN") or None
            return StaticCredentials(env_key, env_secret, token), str(region)
    session = _session_for(o, uri)
    return session.get_credentials(), session.region_name or "us-east-1"


_EMPTY_SHA256 = hashlib.sha256(b"").hexdigest()
_DEFAULT_PORTS = {"http": 80, "https": 443}
#: SigV4 signing keys by (secret, day, region): four HMACs saved per request.
_SIGNING_KEYS: dict[tuple[str, str, str], bytes] = {}


def sign_v4(method: str, url: str, credentials: Any, region: str, headers: dict[str, str] | None = None,
            now: float | None = None) -> dict[str, str]:
    """The headers of an S3 request with no body (GET, HEAD, LIST), signed with AWS Signature Version 4: the
    ``headers`` given, ``Host``, ``x-amz-date``, ``x-amz-content-sha256`` (of the empty body), the session token if
    any, and ``Authorization``. Every header sent is signed. ``url`` is already percent-encoded (S3's canonical
    URI is the path as sent; the query's pairs are sorted as they are)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # IPv6
        host = f"[{host}]"
    if parts.port is not None and parts.port != _DEFAULT_PORTS.get(parts.scheme):
        host = f"{host}:{parts.port}"
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    day = amz_date[:8]
    signed = {"host": host, "x-amz-content-sha256": _EMPTY_SHA256, "x-amz-date": amz_date}
    if credentials.token:
        signed["x-amz-security-token"] = credentials.token
    for name, value in (headers or {}).items():
        signed[name.lower()] = " ".join(str(value).split())
    names = sorted(signed)
    query = "&".join(f"{k}={v}" for k, _, v in sorted(p.partition("=") for p in parts.query.split("&"))) if parts.query else ""
    canonical = "\n".join((method, parts.path or "/", query, "".join(f"{n}:{signed[n]}\n" for n in names),
                           ";".join(names), _EMPTY_SHA256))
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = f"AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{hashlib.sha256(canonical.encode()).hexdigest()}"
    cache_key = (credentials.secret_key, day, region)
    key = _SIGNING_KEYS.get(cache_key)
    if key is None:
        key = f"AWS4{credentials.secret_key}".encode()
        for part in (day, region, "s3", "aws4_request"):
            key = hmac.new(key, part.encode(), hashlib.sha256).digest()
        if len(_SIGNING_KEYS) > 64:
            _SIGNING_KEYS.clear()
        _SIGNING_KEYS[cache_key] = key
    signature = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    signed["authorization"] = (f"AWS4-HMAC-SHA256 Credential={credentials.access_key}/{scope}, "
                               f"SignedHeaders={';'.join(names)}, Signature={signature}")
    return signed


class DirectError(Exception):
    """An S3 error answer to a request sent directly; ``response`` is shaped as botocore's ``ClientError``'s, so
    retries and translation treat both alike."""

    def __init__(self, operation: str, code: str, message: str, status: int):
        super().__init__(f"An error occurred ({code}) when calling the {operation} operation: {message}")
        self.response = {"Error": {"Code": code, "Message": message}, "ResponseMetadata": {"HTTPStatusCode": status}}


class DirectConnectionError(Exception):
    """A request sent directly never got an answer (refused, reset, timed out)."""


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


def _failure(e: BaseException) -> str | None:
    """What kind of failure ``e`` is for ``S3Store._call``: "answer" (S3 answered with an error), "connection",
    "untrusted" (the endpoint's TLS certificate was refused), "credentials", or None (not a request failure:
    raised as it is). botocore is imported only when one of its exceptions is in hand."""
    if isinstance(e, DirectError):
        return "answer"
    if isinstance(e, DirectConnectionError):
        return "untrusted" if _untrusted_certificate(e) else "connection"
    if type(e).__module__.startswith("botocore"):
        from botocore.exceptions import ClientError, ConnectionError as BotoConnectionError, HTTPClientError, NoCredentialsError

        if isinstance(e, ClientError):
            return "answer"
        if isinstance(e, NoCredentialsError):
            return "credentials"
        if isinstance(e, (BotoConnectionError, HTTPClientError)):
            return "untrusted" if _untrusted_certificate(e) else "connection"
    return None


class TLS(NamedTuple):
    """How requests to S3 check the endpoint's certificate: against ``ca_bundle`` (a PEM file), or not at all
    (``verify`` false). Decided once per store by :func:`tls_settings`; boto3's client and the direct
    transport both take it, so reads and writes trust the same endpoints."""

    verify: bool
    ca_bundle: str
    #: Where ``ca_bundle`` came from (a storage option, a variable, the config file, certifi), for errors.
    source: str


@functools.lru_cache(maxsize=16)
def _configured_ca_bundle(profile: str | None, config_file: str, env_profile: str | None) -> str | None:
    """``ca_bundle`` of ``profile`` (else ``AWS_PROFILE``'s, else the default's) in the AWS config file, read by
    botocore once per process and profile."""
    import botocore.session

    return botocore.session.Session(profile=profile).get_config_variable("ca_bundle")


def tls_settings(o: dict[str, Any], uri: str) -> TLS:
    """The TLS settings of the store at ``uri`` with options ``o``, in botocore's order of precedence:
    ``verify=false`` (only when asked), else the CA bundle of the ``ca_bundle`` option, ``AWS_CA_BUNDLE``,
    ``ca_bundle`` in the AWS config file (of ``profile``), ``REQUESTS_CA_BUNDLE``, else certifi's."""
    raw = o.get("verify", True)
    flag = str(raw).strip().lower()
    if flag not in ("true", "1", "yes", "on", "false", "0", "no", "off"):
        raise InvalidConfig(f"storage option verify={raw!r} for {uri} is not a boolean: give true or false "
                            "(a CA bundle goes in the ca_bundle option)")
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
        raise InvalidConfig(f"the CA bundle {path!r} ({source}) for {uri} is not a file: give the PEM file of the "
                            "CA certificates that sign the endpoint's certificate")
    return TLS(verify, path, source)


def _client_for(o: dict[str, Any], endpoint_url: str | None, pool: int, uri: str, tls: TLS) -> Any:
    """The process's boto3 client for these options (MissingCredentials, naming ``uri``, if there are none)."""
    key = (tuple(sorted((k, str(v)) for k, v in o.items())), endpoint_url, pool, tls,
           tuple(os.environ.get(k) for k in _CREDENTIAL_ENV))
    client = _CLIENTS.get(key)
    if client is not None:
        return client
    session = _session_for(o, uri)
    with _CLIENTS_LOCK:
        client = _CLIENTS.get(key)
        if client is None:
            from botocore.config import Config

            config = Config(
                retries={"total_max_attempts": 1, "mode": "standard"},  # Lamina retries, with its own backoff
                max_pool_connections=pool,
                connect_timeout=10,
                read_timeout=60,
                s3={"addressing_style": "path"} if endpoint_url else None,
            )
            client = _CLIENTS[key] = session.client("s3", endpoint_url=endpoint_url,
                                                    region_name=session.region_name or "us-east-1", config=config,
                                                    verify=tls.ca_bundle if tls.verify else False)
        return client


def _static_endpoint(endpoint_url: str | None, region: str) -> str | None:
    """The base URL of S3 requests sent directly, when it follows from the options alone: the endpoint given,
    or AWS's regional endpoint in the standard partition. None: ask a client (FIPS, dual-stack, China,
    GovCloud and other partitions, whose rules botocore knows)."""
    if endpoint_url:
        return endpoint_url.rstrip("/")
    if any(os.environ.get(v, "").lower() == "true" for v in ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT")):
        return None
    if not re.fullmatch(r"(us|eu|ap|ca|sa|me|af|il|mx)-(north|south|east|west|central|northeast|northwest|southeast|southwest)-\d", region):
        return None
    return f"https://s3.{region}.amazonaws.com"


#: One urllib3 pool manager per process and TLS setting for direct GETs (see ``S3Store._direct_get``).
_POOLS: dict[tuple[int, TLS], Any] = {}


def _pool_manager(size: int, tls: TLS) -> Any:
    found = _POOLS.get((size, tls))
    if found is None:
        with _CLIENTS_LOCK:
            found = _POOLS.get((size, tls))
            if found is None:
                import urllib3

                checks = {"cert_reqs": "CERT_REQUIRED", "ca_certs": tls.ca_bundle} if tls.verify else {
                    "cert_reqs": "CERT_NONE", "assert_hostname": False}
                found = _POOLS[(size, tls)] = urllib3.PoolManager(
                    num_pools=64, maxsize=size, block=False, timeout=urllib3.Timeout(connect=10, read=60), retries=False,
                    **checks)
    return found


def _forget_clients() -> None:  # a forked child must not share its parent's connections
    _CLIENTS.clear()
    _SESSIONS.clear()
    _POOLS.clear()


os.register_at_fork(after_in_child=_forget_clients)


class S3Store(ObjectStore):
    """Objects are keys below ``s3://bucket/prefix/``."""

    def __init__(self, uri: str, storage_options: dict[str, Any] | None = None):
        options = dict(storage_options or {})
        unknown = sorted(set(options) - set(S3_OPTIONS))
        if unknown:
            known = ", ".join(sorted(S3_OPTIONS))
            raise InvalidConfig(f"unknown storage option(s) {unknown} for {uri}; S3 understands: {known}")
        self.uri = uri.rstrip("/")
        self.bucket, self.prefix = parse_s3_uri(uri)
        self.storage_options = options
        self.backoff = Backoff(max_attempts=_int_option(options, "max_attempts", 8, 1, 100))
        self.multipart_threshold = _int_option(options, "multipart_threshold", 64 * _MIB, 5 * _MIB, 5 * 1024**4)
        self.multipart_chunk_size = _int_option(options, "multipart_chunk_size", 16 * _MIB, 5 * _MIB, 5 * 1024**3)
        self._pool = _int_option(options, "max_pool_connections", 32, 1, 1024)
        self.endpoint_url = options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        self.tls = tls_settings(options, self.uri)
        self._shared_client: Any = None
        # What direct requests need, taken once: credentials (MissingCredentials now, before any work), region
        # and endpoint. The boto3 client is made on first use (writes, deletes): a process that only reads
        # never loads it, nor (with keys and region in the options or the environment) imports boto3 at all.
        self._credentials, self._region = _credentials_and_region(options, self.uri)
        base = _static_endpoint(self.endpoint_url, self._region)
        self._base_url = base if base is not None else self._client().meta.endpoint_url.rstrip("/")
        self.direct_reads = str(options.get("direct_reads", "true")).lower() not in ("false", "0", "no", "off") \
            and not any(os.environ.get(v) for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"))

    def __reduce__(self):
        return (S3Store, (self.uri, self.storage_options))

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r}, endpoint={self.endpoint_url!r})"

    # -- connection ---------------------------------------------------------
    def _client(self) -> Any:
        if self._shared_client is None:
            self._shared_client = _client_for(self.storage_options, self.endpoint_url, self._pool, self.uri, self.tls)
        return self._shared_client

    def _key(self, path: str) -> str:
        return f"{self.prefix}/{path}" if self.prefix else path

    @property
    def io_domain(self) -> str:
        """The scheduler and ``lamina.io_stats()`` key of this store: its bucket."""
        return f"s3://{self.bucket}"

    def _call(self, what: str, path: str, fn: Callable[[], T], *, missing_ok: bool = False, kind: str = "GET",
              nbytes: int = 0) -> T:
        """Runs one request (of ``kind``, moving ``nbytes`` when known) with retries, each attempt through the
        process's I/O scheduler for this bucket and counted there; maps failures onto lamina.errors."""
        delays = self.backoff.delays()
        sched = scheduler_for(self.io_domain)
        while True:
            try:
                count(self.io_domain, kind, 1, nbytes)
                return sched.run(fn, SCAN)
            except Exception as e:
                failure = _failure(e)
                if failure is None:
                    raise
                if failure == "credentials":
                    raise MissingCredentials(
                        f"no AWS credentials for {self.uri}: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, or pass them in storage_options"
                    ) from e
                if failure == "untrusted":
                    raise StorageError(
                        f"{what} {self.describe(path)}: the TLS certificate of {self.endpoint_url or self._base_url} is not "
                        f"trusted (checked against {self.tls.ca_bundle}, from {self.tls.source}): give the PEM file of the CA "
                        "that signs it as storage_options={'ca_bundle': path} or in AWS_CA_BUNDLE, or verify=false for a "
                        f"test endpoint ({e})") from e
                if failure == "connection":
                    delay = next(delays, None)
                    if delay is not None:
                        time.sleep(delay)
                        continue
                    raise StorageError(f"{what} {self.describe(path)}: cannot reach {self.endpoint_url or 'S3'} after {self.backoff.max_attempts} attempts ({e})") from e
                code = _error_code(e)
                status = str(e.response.get("ResponseMetadata", {}).get("HTTPStatusCode", ""))  # type: ignore[attr-defined]
                if code in _RETRY_CODES or status in {"500", "502", "503", "504", "429"} or (status == "409" and code == "ConditionalRequestConflict"):
                    delay = next(delays, None)
                    if delay is not None:
                        time.sleep(delay)
                        continue
                    raise StorageError(f"{what} {self.describe(path)} failed after {self.backoff.max_attempts} attempts: {code or status} ({e})") from e
                raise self._translate(e, code, status, what, path) from e

    def _translate(self, e: Exception, code: str, status: str, what: str, path: str) -> Exception:
        if code == "NoSuchBucket":
            return BucketNotFound(f"bucket {self.bucket!r} does not exist at {self.endpoint_url or 'AWS S3'}: create it, or fix the URI {self.uri}")
        if code in _MISSING_CODES:
            return ObjectNotFound(f"{self.describe(path)} does not exist")
        if code in {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}:
            return MissingCredentials(f"{what} {self.describe(path)}: credentials rejected ({code}); check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile")
        if code in {"AccessDenied", "403"}:
            return StorageError(f"{what} {self.describe(path)}: access denied; the credentials need s3:GetObject/PutObject/ListBucket/DeleteObject on {self.uri}")
        if code == "InvalidRange":
            return CorruptFile(f"{self.describe(path)} is shorter than the manifest says: truncated")
        return StorageError(f"{what} {self.describe(path)} failed: {code or status} ({e})")

    # -- operations ---------------------------------------------------------
    def _object_url(self, key: str = "") -> str:
        """The URL of ``key`` (of the bucket when empty): path style under an endpoint (moto, MinIO),
        virtual-hosted on AWS."""
        from urllib.parse import quote

        base = self._base_url
        if self.endpoint_url or "." in self.bucket:
            return f"{base}/{self.bucket}/{quote(key, safe='/~')}"
        scheme, _, host = base.partition("://")
        return f"{scheme}://{self.bucket}.{host}/{quote(key, safe='/~')}"

    def _direct(self, operation: str, url: str, headers: dict[str, str] | None = None, method: str = "GET") -> Any:
        """One GET, HEAD or LIST signed by :func:`sign_v4` and sent by urllib3, without botocore's request pipeline
        (its events, endpoint rules and response parsing cost CPU on every GET, which bounded reads of many small
        objects), its client (slow to make) or its import. Failures are raised as
        :class:`DirectError` / :class:`DirectConnectionError`, which ``_call`` retries and translates exactly as
        the client's own."""
        import urllib3

        if self._credentials is None:
            raise MissingCredentials(f"no AWS credentials for {self.uri}")
        signed = sign_v4(method, url, self._credentials.get_frozen_credentials(), self._region, headers)
        try:
            response = _pool_manager(self._pool, self.tls).request(method, url, headers=signed, preload_content=True)
        except (urllib3.exceptions.HTTPError, OSError) as e:
            raise DirectConnectionError(f"{method} {url}: {type(e).__name__}: {e}") from e
        if response.status in (200, 206):
            return response
        code, message = _xml_error(response.data)
        raise DirectError(operation, code or str(response.status), message, response.status)

    def _direct_get(self, key: str, rng: str | None) -> bytes:
        return self._direct("GetObject", self._object_url(key), {"Range": rng} if rng else None).data

    def _direct_list(self, params: dict[str, str]) -> dict[str, Any]:
        """One ListObjectsV2 page sent directly, as the client's answer would have it (Contents with Key,
        Size, LastModified; IsTruncated; NextContinuationToken)."""
        import xml.etree.ElementTree as ET
        from datetime import datetime
        from urllib.parse import quote

        # Every value percent-encoded as SigV4 canonicalizes it (a space as %20, never "+"), so the query sent is
        # the one signed.
        url = self._object_url() + "?" + "&".join(
            f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted({"list-type": "2", **params}.items()))
        root = ET.fromstring(self._direct("ListObjectsV2", url).data)
        ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        contents = [{"Key": c.findtext(f"{ns}Key", ""), "Size": int(c.findtext(f"{ns}Size", "0")),
                     "LastModified": datetime.fromisoformat(c.findtext(f"{ns}LastModified", "").replace("Z", "+00:00"))}
                    for c in root.iter(f"{ns}Contents")]
        return {"Contents": contents, "IsTruncated": root.findtext(f"{ns}IsTruncated", "false").lower() == "true",
                "NextContinuationToken": root.findtext(f"{ns}NextContinuationToken")}

    def _fetch(self, key: str, rng: str | None = None) -> bytes:
        if self.direct_reads:
            return self._direct_get(key, rng)
        kwargs = {"Range": rng} if rng else {}
        return self._client().get_object(Bucket=self.bucket, Key=key, **kwargs)["Body"].read()

    def get(self, path: str) -> bytes:
        key = self._key(path)
        data = self._call("reading", path, lambda: self._fetch(key))
        count(self.io_domain, "GET", 0, len(data))
        return data

    def get_range(self, path: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        key = self._key(path)
        rng = f"bytes={start}-{start + length - 1}"
        data = self._call("reading", path, lambda: self._fetch(key, rng))
        count(self.io_domain, "GET", 0, len(data))
        if len(data) != length:
            raise CorruptFile(f"{self.describe(path)} is shorter than expected (wanted bytes {start}..{start + length}, got {len(data)}): truncated")
        return data

    def put(self, path: str, data: bytes) -> None:
        key = self._key(path)
        self._call("writing", path, lambda: self._client().put_object(Bucket=self.bucket, Key=key, Body=data), kind="PUT", nbytes=len(data))

    def put_if_absent(self, path: str, data: bytes) -> bool:
        from botocore.exceptions import ClientError

        if len(data) >= self.multipart_threshold:
            return self._upload(path, lambda: io.BytesIO(data), conditional=True)
        key = self._key(path)
        token = uuid.uuid4().hex
        attempts = 0

        def put() -> str:
            nonlocal attempts
            attempts += 1
            try:
                self._client().put_object(Bucket=self.bucket, Key=key, Body=data, IfNoneMatch="*", Metadata={TOKEN_KEY: token})
                return _WON
            except ClientError as e:
                if _error_code(e) != "PreconditionFailed":
                    raise
                # On the first attempt the object was there before us. A retry may meet the
                # object its own earlier attempt wrote before that attempt's response was lost.
                return _TAKEN if attempts > 1 else _LOST

        outcome = self._call("writing", path, put, kind="PUT", nbytes=len(data))
        if outcome == _TAKEN:
            ours = self._holds_token(path, token)
            if ours is None:
                raise self._vanished(path)
            return ours
        return outcome == _WON

    def put_file(self, path: str, local_path: str) -> None:
        size = os.path.getsize(local_path)
        if size < self.multipart_threshold:
            with open(local_path, "rb") as f:
                data = f.read()
            self.put(path, data)
            return
        self._upload(path, lambda: open(local_path, "rb"), conditional=False)

    def _holds_token(self, path: str, token: str) -> bool | None:
        """Whether the object at ``path`` was written by the call that made ``token``; None if none is there."""
        key = self._key(path)
        try:
            head = self._call("checking", path, lambda: self._client().head_object(Bucket=self.bucket, Key=key), kind="HEAD")
        except ObjectNotFound:
            return None
        return head.get("Metadata", {}).get(TOKEN_KEY) == token

    def _vanished(self, path: str) -> StorageError:
        return StorageError(
            f"writing {self.describe(path)}: a retry found an object there, which was removed before it could be "
            "checked; whether this write landed is unknown: read the location back before retrying"
        )

    def _upload(self, path: str, open_source: Callable[[], Any], *, conditional: bool) -> bool:
        """A multipart upload of what ``open_source()`` reads; with ``conditional``, only if ``path`` is free.

        True once the object is this call's; False (conditional only) if another writer's
        object is at ``path``. S3 may forget a completed upload and answer a repeated
        completion with NoSuchUpload, and asks for a new upload after a 409 conflict: both
        start the upload again under the same token, so whichever of this call's completions
        landed is recognised as its own.
        """
        key = self._key(path)
        client = self._client()
        token = uuid.uuid4().hex
        restarts = self.backoff.delays()
        retried = False  # whether a request of this call may already have written the object
        while True:
            upload_id = self._call(
                "starting upload of", path,
                lambda: client.create_multipart_upload(Bucket=self.bucket, Key=key, Metadata={TOKEN_KEY: token})["UploadId"],
                kind="PUT",
            )
            outcome = _RESTART
            try:
                parts = self._upload_parts(path, key, upload_id, open_source)
                outcome, attempts = self._complete(path, key, upload_id, parts, conditional, first=not retried)
                retried = retried or attempts > 1
                if outcome in (_TAKEN, _UNSURE):
                    ours = self._holds_token(path, token)
                    if ours is None and outcome == _TAKEN:
                        raise self._vanished(path)
                    # Nothing there: nothing of ours landed (nor a conflicting write): start again.
                    # Another's object: a loss for put-if-absent; a plain upload must still write its own.
                    outcome = _WON if ours else (_LOST if ours is False and conditional else _RESTART)
            finally:
                if outcome != _WON:
                    try:
                        client.abort_multipart_upload(Bucket=self.bucket, Key=key, UploadId=upload_id)
                    except Exception:  # the outcome matters more; the bucket's lifecycle rule reaps the rest
                        pass
            if outcome != _RESTART:
                return outcome == _WON
            retried = True
            delay = next(restarts, None)
            if delay is None:
                raise StorageError(
                    f"uploading {self.describe(path)} failed: S3 dropped or refused the upload "
                    f"{self.backoff.max_attempts} times; retry later"
                )
            time.sleep(delay)

    def _upload_parts(self, path: str, key: str, upload_id: str, open_source: Callable[[], Any]) -> list[dict[str, Any]]:
        client = self._client()
        parts: list[dict[str, Any]] = []
        with open_source() as f:
            number = 1
            while True:
                chunk = f.read(self.multipart_chunk_size)
                if not chunk:
                    return parts
                n = number
                etag = self._call(
                    f"uploading part {n} of", path,
                    lambda: client.upload_part(Bucket=self.bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=chunk)["ETag"],
                    kind="PUT", nbytes=len(chunk),
                )
                parts.append({"ETag": etag, "PartNumber": n})
                number += 1

    def _complete(self, path: str, key: str, upload_id: str, parts: list[dict[str, Any]], conditional: bool,
                  *, first: bool) -> tuple[str, int]:
        """Completes one upload; returns (outcome, attempts made)."""
        from botocore.exceptions import ClientError

        client = self._client()
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": key, "UploadId": upload_id, "MultipartUpload": {"Parts": parts}}
        if conditional:
            kwargs["IfNoneMatch"] = "*"
        attempts = 0

        def complete() -> str:
            nonlocal attempts
            attempts += 1
            try:
                client.complete_multipart_upload(**kwargs)
                return _WON
            except ClientError as e:
                code = _error_code(e)
                if code == "PreconditionFailed" and conditional:
                    return _LOST if first and attempts == 1 else _TAKEN
                if code == "NoSuchUpload" and attempts > 1:
                    return _UNSURE  # completed by an attempt whose response was lost, or aborted
                if code == "ConditionalRequestConflict":  # S3 asks for a new upload
                    return _RESTART if first and attempts == 1 else _UNSURE
                raise

        return self._call("completing upload of", path, complete, kind="PUT"), attempts

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        full_prefix = self._key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix}
            if start_after is not None:
                kwargs["StartAfter"] = self._key(start_after)
            if token:
                kwargs["ContinuationToken"] = token
            if self.direct_reads:
                params = {"prefix": full_prefix, **({"start-after": kwargs["StartAfter"]} if "StartAfter" in kwargs else {}),
                          **({"continuation-token": token} if token else {})}
                page = self._call("listing", prefix, lambda: self._direct_list(params), kind="LIST")
            else:
                page = self._call("listing", prefix, lambda: self._client().list_objects_v2(**kwargs), kind="LIST")
            for obj in page.get("Contents", []):
                yield ObjectInfo(obj["Key"][strip:], int(obj["Size"]), obj["LastModified"].timestamp())
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def delete(self, paths: Iterable[str]) -> None:
        client = self._client()
        batch: list[str] = []

        def flush() -> None:
            objs = [{"Key": self._key(p)} for p in batch]
            result = self._call("deleting", batch[0], lambda: client.delete_objects(Bucket=self.bucket, Delete={"Objects": objs, "Quiet": True}),
                                kind="DELETE")
            errors = [e for e in result.get("Errors", []) if e.get("Code") != "NoSuchKey"]
            if errors:
                raise StorageError(f"deleting from {self.uri} failed for {len(errors)} object(s), first: {errors[0]}")
            batch.clear()

        for p in paths:
            batch.append(p)
            if len(batch) == 1000:
                flush()
        if batch:
            flush()

    def size(self, path: str) -> int:
        key = self._key(path)
        if self.direct_reads:  # no client needed (a HEAD answers a 404 faster than a GET on S3 and moto)
            head = self._call("inspecting", path, lambda: self._direct("HeadObject", self._object_url(key), method="HEAD"), kind="HEAD")
            return int(head.headers.get("Content-Length", "0"))
        return int(self._call("inspecting", path, lambda: self._client().head_object(Bucket=self.bucket, Key=key), kind="HEAD")["ContentLength"])

    def exists(self, path: str) -> bool:
        try:
            self.size(path)
            return True
        except ObjectNotFound:
            return False

    def open_input(self, path: str, size: int | None = None) -> Any:
        if size is None:
            size = self.size(path)
        return pa.PythonFile(RangeReader(self, path, size), mode="r")


def _xml_error(body: bytes) -> tuple[str, str]:
    """(code, message) of an S3 XML error body; empty strings when there is none (e.g. a HEAD)."""
    import re

    text = body[:4096].decode("utf-8", "replace")
    code = re.search(r"<Code>([^<]*)</Code>", text)
    message = re.search(r"<Message>([^<]*)</Message>", text)
    return (code.group(1) if code else ""), (message.group(1) if message else "")


def _error_code(e: Any) -> str:
    return str(e.response.get("Error", {}).get("Code", ""))


def _int_option(options: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(name, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidConfig(f"storage option {name}={raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise InvalidConfig(f"storage option {name}={value} is out of bounds [{lo}, {hi}]")
    return value
