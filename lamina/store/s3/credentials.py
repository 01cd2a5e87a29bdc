"""Who an S3 request is from: the store's credentials, resolved once, and botocore's SigV4 signer over them.

Signing is botocore's (``S3SigV4Auth`` over an ``AWSRequest``, credentials frozen per request, so a
refreshable set is refreshed by botocore before it expires); Lamina only decides which credentials and
region. Keys given in ``storage_options``, or else in the environment, with a region known, are what
botocore's chain would return first (explicit keys, then its ``EnvProvider``): they are taken as they are,
without a boto3 session, whose import and credential chain would dominate a new process's first read.
Everything else (a profile, a region only in ``~/.aws/config``, expiring keys, instance and container roles,
SSO) comes from the boto3 session that the write client is made from, so reads and writes sign with one
credentials object.
"""

from __future__ import annotations

import os
import threading
from typing import Any, NamedTuple

from lamina.errors import MissingCredentials

#: The environment that shapes botocore's credential chain: a changed environment gets a new session.
CREDENTIAL_ENV = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_SECURITY_TOKEN",
    "AWS_CREDENTIAL_EXPIRATION",
    "AWS_PROFILE",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_SHARED_CREDENTIALS_FILE",
    "AWS_CONFIG_FILE",
)

#: One boto3 session per process, options and credential environment (see ``session_for``).
_SESSIONS: dict[tuple[Any, ...], Any] = {}
_LOCK = threading.Lock()


class StaticCredentials(NamedTuple):
    """Keys given in ``storage_options`` or the environment, shaped like botocore's frozen credentials (what
    its signer reads); they never expire, so freezing them is the identity."""

    access_key: str
    secret_key: str
    token: str | None

    def get_frozen_credentials(self) -> StaticCredentials:
        return self


def _region(o: dict[str, Any]) -> str | None:
    return o.get("region") or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")


def session_for(o: dict[str, Any], uri: str, keys: StaticCredentials | None = None) -> Any:
    """The process's boto3 session for options ``o`` (``MissingCredentials``, naming ``uri``, if the chain finds
    none); made from ``keys`` when they were resolved without botocore, so its client signs with the same."""
    key = (tuple(sorted((k, str(v)) for k, v in o.items())), tuple(os.environ.get(k) for k in CREDENTIAL_ENV), keys)
    session = _SESSIONS.get(key)
    if session is not None:
        return session
    with _LOCK:
        session = _SESSIONS.get(key)
        if session is None:
            import boto3

            if keys is not None:
                session = boto3.session.Session(
                    aws_access_key_id=keys.access_key,
                    aws_secret_access_key=keys.secret_key,
                    aws_session_token=keys.token,
                    region_name=_region(o),
                )
            else:
                session = boto3.session.Session(
                    aws_access_key_id=o.get("aws_access_key_id"),
                    aws_secret_access_key=o.get("aws_secret_access_key"),
                    aws_session_token=o.get("aws_session_token"),
                    profile_name=o.get("profile"),
                    region_name=_region(o),
                )
            if session.get_credentials() is None:
                raise MissingCredentials(
                    f"no AWS credentials found for {uri}: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY "
                    "(or AWS_PROFILE), or pass storage_options={'aws_access_key_id': ..., 'aws_secret_access_key': ...}"
                )
            _SESSIONS[key] = session
        return session


def resolve(o: dict[str, Any], uri: str) -> tuple[Any, str]:
    """(credentials, region) of the store at ``uri`` with options ``o``: ``StaticCredentials`` for keys and a
    region given in the options or else the environment (the sources botocore's chain tries first, in its
    order), else the credentials of :func:`session_for`'s session (refreshable ones included) and its region."""
    region = _region(o)
    if region and not o.get("profile"):
        key, secret = o.get("aws_access_key_id"), o.get("aws_secret_access_key")
        if key and secret:
            return StaticCredentials(str(key), str(secret), o.get("aws_session_token") or None), str(region)
        env_key, env_secret = os.environ.get("AWS_ACCESS_KEY_ID"), os.environ.get("AWS_SECRET_ACCESS_KEY")
        # Expiring environment credentials (AWS_CREDENTIAL_EXPIRATION) are botocore's to refresh.
        if (
            not key
            and not secret
            and not o.get("aws_session_token")
            and env_key
            and env_secret
            and not os.environ.get("AWS_CREDENTIAL_EXPIRATION")
        ):
            # botocore's EnvProvider takes the first of these that is set, in this order.
            token = os.environ.get("AWS_SECURITY_TOKEN") or os.environ.get("AWS_SESSION_TOKEN") or None
            return StaticCredentials(env_key, env_secret, token), str(region)
    session = session_for(o, uri)
    return session.get_credentials(), session.region_name or "us-east-1"


class Signer:
    """Signs S3 requests in ``region`` with ``credentials`` by botocore's ``S3SigV4Auth``: every header sent is
    signed, the (empty) body's SHA-256 included, credentials frozen per request."""

    def __init__(self, credentials: Any, region: str):
        self.credentials = credentials
        self.region = region

    def sign(self, request: Any) -> None:
        """Adds ``X-Amz-Date``, ``X-Amz-Content-SHA256``, the session token if any, and ``Authorization`` to
        ``request`` (a ``botocore.awsrequest.AWSRequest``)."""
        from botocore.auth import S3SigV4Auth

        S3SigV4Auth(self.credentials.get_frozen_credentials(), "s3", self.region).add_auth(request)


def forget() -> None:
    """Drops the process's sessions (a forked child must not share its parent's)."""
    _SESSIONS.clear()
