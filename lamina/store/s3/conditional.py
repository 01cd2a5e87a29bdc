"""Writes whose outcome must be known: put-if-absent and multipart uploads on S3, under a writer token.

Put-if-absent is ``PutObject`` (or ``CompleteMultipartUpload``) with ``If-None-Match: *``. A retried
conditional write can meet its own object: S3 executed the first attempt but the response was lost. Every
conditional or multipart write therefore carries a writer token in its user metadata
(``x-amz-meta-lamina-token``), fresh per call; a retry that meets 412 (or, for multipart, an upload that is
gone) reads the object's token back and reports success only if it is this call's. A 412 on the first attempt
is a genuine loss and costs no extra request; two writers of byte-identical content are told apart by the
token, so exactly one wins.

The requests themselves go through the store (``S3Store.call``: retries, the I/O scheduler, errors); this
module only decides what to send and what an answer means.
"""

from __future__ import annotations

import io
import time
import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from lamina.errors import ObjectNotFound, StorageError
from lamina.store.s3.transport import error_code

if TYPE_CHECKING:
    from lamina.store.s3.store import S3Store

#: User-metadata key of the writer token (sent as ``x-amz-meta-lamina-token``).
TOKEN_KEY = "lamina-token"

# Outcomes of one conditional request, resolved outside its retry loop: _TAKEN is a retry's
# 412 (an object is there, perhaps ours), _UNSURE a retry that cannot tell whether ours landed.
_WON, _LOST, _TAKEN, _UNSURE, _RESTART = "won", "lost", "taken", "unsure", "restart"


def put_if_absent(store: S3Store, path: str, data: bytes) -> bool:
    """Writes ``data`` at ``path`` unless an object is there; True if this call's object is there now."""
    from botocore.exceptions import ClientError

    if len(data) >= store.multipart_threshold:
        return upload(store, path, lambda: io.BytesIO(data), conditional=True)
    key = store.key(path)
    token = uuid.uuid4().hex
    attempts = 0

    def put() -> str:
        nonlocal attempts
        attempts += 1
        try:
            store.client().put_object(Bucket=store.bucket, Key=key, Body=data, IfNoneMatch="*", Metadata={TOKEN_KEY: token})
            return _WON
        except ClientError as e:
            if error_code(e) != "PreconditionFailed":
                raise
            # On the first attempt the object was there before us. A retry may meet the
            # object its own earlier attempt wrote before that attempt's response was lost.
            return _TAKEN if attempts > 1 else _LOST

    outcome = store.call("writing", path, put, kind="PUT", nbytes=len(data))
    if outcome == _TAKEN:
        ours = _holds_token(store, path, token)
        if ours is None:
            raise _vanished(store, path)
        return ours
    return outcome == _WON


def _holds_token(store: S3Store, path: str, token: str) -> bool | None:
    """Whether the object at ``path`` was written by the call that made ``token``; None if none is there."""
    key = store.key(path)
    try:
        head: dict[str, Any] = store.call(
            "checking", path, lambda: store.client().head_object(Bucket=store.bucket, Key=key), kind="HEAD"
        )
    except ObjectNotFound:
        return None
    metadata: dict[str, str] = head.get("Metadata", {})
    return metadata.get(TOKEN_KEY) == token


def _vanished(store: S3Store, path: str) -> StorageError:
    return StorageError(
        f"writing {store.describe(path)}: a retry found an object there, which was removed before it could be "
        "checked; whether this write landed is unknown: read the location back before retrying"
    )


def upload(store: S3Store, path: str, open_source: Callable[[], Any], *, conditional: bool) -> bool:
    """A multipart upload of what ``open_source()`` reads; with ``conditional``, only if ``path`` is free.

    True once the object is this call's; False (conditional only) if another writer's
    object is at ``path``. S3 may forget a completed upload and answer a repeated
    completion with NoSuchUpload, and asks for a new upload after a 409 conflict: both
    start the upload again under the same token, so whichever of this call's completions
    landed is recognised as its own.
    """
    key = store.key(path)
    client = store.client()
    token = uuid.uuid4().hex
    restarts = store.backoff.delays()
    retried = False  # whether a request of this call may already have written the object
    while True:
        upload_id = store.call(
            "starting upload of",
            path,
            lambda: client.create_multipart_upload(Bucket=store.bucket, Key=key, Metadata={TOKEN_KEY: token})["UploadId"],
            kind="PUT",
        )
        outcome = _RESTART
        try:
            parts = _upload_parts(store, path, key, upload_id, open_source)
            outcome, attempts = _complete(store, path, key, upload_id, parts, conditional, first=not retried)
            retried = retried or attempts > 1
            if outcome in (_TAKEN, _UNSURE):
                ours = _holds_token(store, path, token)
                if ours is None and outcome == _TAKEN:
                    raise _vanished(store, path)
                # Nothing there: nothing of ours landed (nor a conflicting write): start again.
                # Another's object: a loss for put-if-absent; a plain upload must still write its own.
                outcome = _WON if ours else (_LOST if ours is False and conditional else _RESTART)
        finally:
            if outcome != _WON:
                try:
                    client.abort_multipart_upload(Bucket=store.bucket, Key=key, UploadId=upload_id)
                except Exception:  # the outcome matters more; the bucket's lifecycle rule reaps the rest
                    pass
        if outcome != _RESTART:
            return outcome == _WON
        retried = True
        delay = next(restarts, None)
        if delay is None:
            raise StorageError(
                f"uploading {store.describe(path)} failed: S3 dropped or refused the upload "
                f"{store.backoff.max_attempts} times; retry later"
            )
        time.sleep(delay)


def _upload_parts(store: S3Store, path: str, key: str, upload_id: str, open_source: Callable[[], Any]) -> list[dict[str, Any]]:
    client = store.client()
    parts: list[dict[str, Any]] = []
    with open_source() as f:
        number = 1
        while True:
            chunk = f.read(store.multipart_chunk_size)
            if not chunk:
                return parts
            n = number

            def put_part(n: int = n, chunk: bytes = chunk) -> Any:
                return client.upload_part(Bucket=store.bucket, Key=key, UploadId=upload_id, PartNumber=n, Body=chunk)["ETag"]

            etag = store.call(f"uploading part {n} of", path, put_part, kind="PUT", nbytes=len(chunk))
            parts.append({"ETag": etag, "PartNumber": n})
            number += 1


def _complete(
    store: S3Store, path: str, key: str, upload_id: str, parts: list[dict[str, Any]], conditional: bool, *, first: bool
) -> tuple[str, int]:
    """Completes one upload; returns (outcome, attempts made)."""
    from botocore.exceptions import ClientError

    client = store.client()
    kwargs: dict[str, Any] = {"Bucket": store.bucket, "Key": key, "UploadId": upload_id, "MultipartUpload": {"Parts": parts}}
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
            code = error_code(e)
            if code == "PreconditionFailed" and conditional:
                return _LOST if first and attempts == 1 else _TAKEN
            if code == "NoSuchUpload" and attempts > 1:
                return _UNSURE  # completed by an attempt whose response was lost, or aborted
            if code == "ConditionalRequestConflict":  # S3 asks for a new upload
                return _RESTART if first and attempts == 1 else _UNSURE
            raise

    return store.call("completing upload of", path, complete, kind="PUT"), attempts
