"""A table under ``s3://bucket/prefix``: the store's operations as S3 requests, each retried and scheduled here.

The seams (docs/ARCHITECTURE.md, "S3"): who a request is from and its signature
(:mod:`~lamina.store.s3.credentials`, botocore's signer), how it travels and what a failure is
(:mod:`~lamina.store.s3.transport`: TLS, proxies, pools, the client), and the writes whose outcome must be known
(:mod:`~lamina.store.s3.conditional`). This module decides which requests make each operation; every request
runs through :meth:`S3Store.call`, which retries throttling, 5xx, dropped connections and S3's 409
``ConditionalRequestConflict`` with the shared backoff, whichever way it was sent.
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar

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
from lamina.store.s3 import conditional, credentials, transport
from lamina.store.scheduler import SCAN, count, scheduler_for

T = TypeVar("T")

#: storage_options keys the S3 store understands.
S3_OPTIONS = {
    "endpoint_url": (
        "S3 endpoint, e.g. http://127.0.0.1:5000 for moto/MinIO (default: AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS)"
    ),
    "region": "AWS region (default: AWS_REGION / AWS_DEFAULT_REGION / profile, else us-east-1)",
    "aws_access_key_id": "access key (default: the standard credential chain)",
    "aws_secret_access_key": "secret key",
    "aws_session_token": "session token for temporary credentials",
    "profile": "a profile from ~/.aws/config",
    "max_attempts": "attempts per request before giving up (default 8)",
    "multipart_threshold": "objects at least this many bytes are uploaded in parts (default 64 MiB)",
    "multipart_chunk_size": "part size for multipart uploads (default 16 MiB, at least 5 MiB)",
    "max_pool_connections": "HTTP connections per process (default 32)",
    "direct_reads": "GETs, HEADs and listings sent without a boto3 client (signed by botocore's signer, sent by its "
    "HTTP session), ~5x less CPU per GET (default true)",
    "ca_bundle": "PEM file of the CA certificates the endpoint's TLS certificate must chain to (default: AWS_CA_BUNDLE, "
    "then ca_bundle in the AWS config file, then REQUESTS_CA_BUNDLE, then certifi's bundle)",
    "verify": "false: do not check the endpoint's TLS certificate, for a test endpoint only (default true)",
    "proxy_url": "HTTP(S) proxy of every request, e.g. http://proxy:3128 (default: HTTPS_PROXY / HTTP_PROXY by the "
    "endpoint's scheme, none for a host in NO_PROXY)",
}

_MIB = 1024 * 1024


def parse_s3_uri(uri: str) -> tuple[str, str]:
    """``s3://bucket/a/b/`` → ``("bucket", "a/b")``."""
    rest = uri[len("s3://") :]
    bucket, _, prefix = rest.partition("/")
    if not bucket:
        raise InvalidConfig(f"S3 URI {uri!r} has no bucket: use s3://bucket/path/to/table")
    if any(part in (".", "..") for part in prefix.split("/")):
        # HTTP clients resolve dot segments before sending, so a request would name another key than the one
        # signed (or written by boto3): refused before anything is read or written.
        raise InvalidConfig(f"S3 URI {uri!r} has a '.' or '..' path segment: S3 keys are literal; write the path without it")
    return bucket, prefix.strip("/")


def _forget_clients() -> None:  # a forked child must not share its parent's connections
    transport.forget()
    credentials.forget()


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
        self.endpoint_url = (
            options.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
        )
        self.tls = transport.tls_settings(options, self.uri)
        self._shared_client: Any = None
        # Taken once: credentials (MissingCredentials now, before any work), region, endpoint and proxies. The
        # boto3 client is made on first use (writes, deletes): a process that only reads never makes one, nor
        # (with keys and a region in the options or the environment) imports boto3 at all.
        self.credentials, self.region = credentials.resolve(options, self.uri)
        base = transport.static_endpoint(self.endpoint_url, self.region)
        self.proxies = transport.proxies_for(options, base or self.endpoint_url or f"https://s3.{self.region}.amazonaws.com")
        self._base_url = base if base is not None else self.client().meta.endpoint_url.rstrip("/")
        self.direct_reads = str(options.get("direct_reads", "true")).lower() not in ("false", "0", "no", "off")
        self._transport = transport.Transport(
            credentials.Signer(self.credentials, self.region).sign, self.tls, self.proxies, self._pool
        )

    def __reduce__(self) -> tuple[type[S3Store], tuple[str, dict[str, Any]]]:
        return (S3Store, (self.uri, self.storage_options))

    def __repr__(self) -> str:
        return f"S3Store({self.uri!r}, endpoint={self.endpoint_url!r})"

    # -- requests -----------------------------------------------------------
    def client(self) -> Any:
        """The process's boto3 client for this store's options (writes, deletes, multipart uploads)."""
        if self._shared_client is None:
            self._shared_client = transport.client_for(
                self.storage_options, self.endpoint_url, self._pool, self.uri, self.tls, self.proxies, self.credentials
            )
        return self._shared_client

    def key(self, path: str) -> str:
        """The S3 key of ``path``."""
        return f"{self.prefix}/{path}" if self.prefix else path

    @property
    def io_domain(self) -> str:
        """The scheduler and ``lamina.io_stats()`` key of this store: its bucket."""
        return f"s3://{self.bucket}"

    def call(self, what: str, path: str, fn: Callable[[], T], *, kind: str = "GET", nbytes: int = 0) -> T:
        """Runs one request ``fn`` (of ``kind``, moving ``nbytes`` when known) with retries, each attempt through the
        process's I/O scheduler for this bucket and counted there; maps failures onto lamina.errors."""
        delays = self.backoff.delays()
        sched = scheduler_for(self.io_domain)
        while True:
            try:
                count(self.io_domain, kind, 1, nbytes)
                return sched.run(fn, SCAN)
            except Exception as e:
                failure = transport.failure(e)
                if failure is None:
                    raise
                if failure == "credentials":
                    raise MissingCredentials(
                        f"no AWS credentials for {self.uri}: set AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or AWS_PROFILE, "
                        "or pass them in storage_options"
                    ) from e
                if failure == "untrusted":
                    raise StorageError(
                        f"{what} {self.describe(path)}: the TLS certificate of {self.endpoint_url or self._base_url} is not "
                        f"trusted (checked against {self.tls.ca_bundle}, from {self.tls.source}): give the PEM file of the CA "
                        "that signs it as storage_options={'ca_bundle': path} or in AWS_CA_BUNDLE, or verify=false for a "
                        f"test endpoint ({e})"
                    ) from e
                if failure == "connection":
                    delay = next(delays, None)
                    if delay is not None:
                        time.sleep(delay)
                        continue
                    raise StorageError(
                        f"{what} {self.describe(path)}: cannot reach {self.endpoint_url or 'S3'} "
                        f"after {self.backoff.max_attempts} attempts ({e})"
                    ) from e
                code, status = transport.error_code(e), transport.error_status(e)
                if transport.retryable(code, status):
                    delay = next(delays, None)
                    if delay is not None:
                        time.sleep(delay)
                        continue
                    raise StorageError(
                        f"{what} {self.describe(path)} failed after {self.backoff.max_attempts} attempts: {code or status} ({e})"
                    ) from e
                raise self._translate(e, code, status, what, path) from e

    def _translate(self, e: Exception, code: str, status: str, what: str, path: str) -> Exception:
        if code == "NoSuchBucket":
            return BucketNotFound(
                f"bucket {self.bucket!r} does not exist at {self.endpoint_url or 'AWS S3'}: create it, or fix the URI {self.uri}"
            )
        if code in transport.MISSING_CODES:
            return ObjectNotFound(f"{self.describe(path)} does not exist")
        if code in {"InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}:
            return MissingCredentials(
                f"{what} {self.describe(path)}: credentials rejected ({code}); "
                "check AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY or the profile"
            )
        if code in {"AccessDenied", "403"}:
            return StorageError(
                f"{what} {self.describe(path)}: access denied; "
                f"the credentials need s3:GetObject/PutObject/ListBucket/DeleteObject on {self.uri}"
            )
        if code == "InvalidRange":
            return CorruptFile(f"{self.describe(path)} is shorter than the manifest says: truncated")
        return StorageError(f"{what} {self.describe(path)} failed: {code or status} ({e})")

    # -- reads sent without a client ------------------------------------------
    def _object_url(self, key: str = "") -> str:
        """The URL of ``key`` (of the bucket when empty): path style under an endpoint (moto, MinIO),
        virtual-hosted on AWS."""
        from urllib.parse import quote

        base = self._base_url
        if self.endpoint_url or "." in self.bucket:
            return f"{base}/{self.bucket}/{quote(key, safe='/~')}"
        scheme, _, host = base.partition("://")
        return f"{scheme}://{self.bucket}.{host}/{quote(key, safe='/~')}"

    def _direct_list(self, params: dict[str, str]) -> dict[str, Any]:
        """One ListObjectsV2 page sent directly, as the client's answer would have it (Contents with Key,
        Size, LastModified; IsTruncated; NextContinuationToken)."""
        import xml.etree.ElementTree as ET
        from datetime import datetime
        from urllib.parse import quote

        # Every value percent-encoded as SigV4 canonicalizes it (a space as %20, never "+"), so the query sent is
        # the one signed.
        url = (
            self._object_url()
            + "?"
            + "&".join(
                f"{quote(k, safe='-_.~')}={quote(v, safe='-_.~')}" for k, v in sorted({"list-type": "2", **params}.items())
            )
        )
        root = ET.fromstring(self._transport.send("ListObjectsV2", "GET", url).data)
        ns = root.tag[: root.tag.index("}") + 1] if root.tag.startswith("{") else ""
        contents = [
            {
                "Key": c.findtext(f"{ns}Key", ""),
                "Size": int(c.findtext(f"{ns}Size", "0")),
                "LastModified": datetime.fromisoformat(c.findtext(f"{ns}LastModified", "").replace("Z", "+00:00")),
            }
            for c in root.iter(f"{ns}Contents")
        ]
        return {
            "Contents": contents,
            "IsTruncated": root.findtext(f"{ns}IsTruncated", "false").lower() == "true",
            "NextContinuationToken": root.findtext(f"{ns}NextContinuationToken"),
        }

    # -- operations ---------------------------------------------------------
    def _fetch(self, key: str, rng: str | None = None) -> bytes:
        if self.direct_reads:
            return self._transport.send("GetObject", "GET", self._object_url(key), {"Range": rng} if rng else None).data
        kwargs = {"Range": rng} if rng else {}
        data: bytes = self.client().get_object(Bucket=self.bucket, Key=key, **kwargs)["Body"].read()
        return data

    def get(self, path: str) -> bytes:
        key = self.key(path)
        data = self.call("reading", path, lambda: self._fetch(key))
        count(self.io_domain, "GET", 0, len(data))
        return data

    def get_range(self, path: str, start: int, length: int) -> bytes:
        if length <= 0:
            return b""
        key = self.key(path)
        rng = f"bytes={start}-{start + length - 1}"
        data = self.call("reading", path, lambda: self._fetch(key, rng))
        count(self.io_domain, "GET", 0, len(data))
        if len(data) != length:
            raise CorruptFile(
                f"{self.describe(path)} is shorter than expected "
                f"(wanted bytes {start}..{start + length}, got {len(data)}): truncated"
            )
        return data

    def put(self, path: str, data: bytes) -> None:
        key = self.key(path)
        self.call(
            "writing",
            path,
            lambda: self.client().put_object(Bucket=self.bucket, Key=key, Body=data),
            kind="PUT",
            nbytes=len(data),
        )

    def put_if_absent(self, path: str, data: bytes) -> bool:
        return conditional.put_if_absent(self, path, data)

    def put_file(self, path: str, local_path: str) -> None:
        size = os.path.getsize(local_path)
        if size < self.multipart_threshold:
            with open(local_path, "rb") as f:
                data = f.read()
            self.put(path, data)
            return
        conditional.upload(self, path, lambda: open(local_path, "rb"), conditional=False)

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        full_prefix = self.key(prefix)
        strip = len(self.prefix) + 1 if self.prefix else 0
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Prefix": full_prefix}
            if start_after is not None:
                kwargs["StartAfter"] = self.key(start_after)
            if token:
                kwargs["ContinuationToken"] = token
            if self.direct_reads:
                params = {
                    "prefix": full_prefix,
                    **({"start-after": kwargs["StartAfter"]} if "StartAfter" in kwargs else {}),
                    **({"continuation-token": token} if token else {}),
                }
                page = self.call("listing", prefix, functools.partial(self._direct_list, params), kind="LIST")
            else:

                def list_page(kwargs: dict[str, Any] = kwargs) -> Any:
                    return self.client().list_objects_v2(**kwargs)

                page = self.call("listing", prefix, list_page, kind="LIST")
            for obj in page.get("Contents", []):
                yield ObjectInfo(obj["Key"][strip:], int(obj["Size"]), obj["LastModified"].timestamp())
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def delete(self, paths: Iterable[str]) -> None:
        client = self.client()
        batch: list[str] = []

        def flush() -> None:
            objs = [{"Key": self.key(p)} for p in batch]
            result = self.call(
                "deleting",
                batch[0],
                lambda: client.delete_objects(Bucket=self.bucket, Delete={"Objects": objs, "Quiet": True}),
                kind="DELETE",
            )
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
        key = self.key(path)
        if self.direct_reads:  # no client needed (a HEAD answers a 404 faster than a GET on S3 and moto)
            head = self.call(
                "inspecting", path, lambda: self._transport.send("HeadObject", "HEAD", self._object_url(key)), kind="HEAD"
            )
            return int(head.headers.get("Content-Length", "0"))
        head = self.call("inspecting", path, lambda: self.client().head_object(Bucket=self.bucket, Key=key), kind="HEAD")
        return int(head["ContentLength"])

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


def _int_option(options: dict[str, Any], name: str, default: int, lo: int, hi: int) -> int:
    raw = options.get(name, default)
    try:
        value = int(raw)
    except (TypeError, ValueError):
        raise InvalidConfig(f"storage option {name}={raw!r} is not an integer") from None
    if not lo <= value <= hi:
        raise InvalidConfig(f"storage option {name}={value} is out of bounds [{lo}, {hi}]")
    return value
