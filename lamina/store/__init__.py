"""Object stores: where a table's bytes live. ``open_store`` picks one from the URI."""

from __future__ import annotations

from typing import Any

from lamina.errors import InvalidConfig, UnsupportedURI
from lamina.store.base import ObjectInfo, ObjectStore, RangeReader, StagedInput, check_relative
from lamina.store.local import LocalStore

__all__ = ["ObjectInfo", "ObjectStore", "RangeReader", "StagedInput", "LocalStore", "open_store", "check_relative"]


def open_store(uri: str, storage_options: dict[str, Any] | None = None) -> ObjectStore:
    """A store for ``uri``: a local path, ``file://``, or ``s3://bucket/prefix``."""
    if not isinstance(uri, str) or not uri:
        raise InvalidConfig(f"table URI must be a non-empty string, got {uri!r}")
    if uri.startswith("s3://"):
        from lamina.store.s3 import S3Store

        return S3Store(uri, storage_options)
    if "://" in uri:
        scheme = uri.split("://", 1)[0]
        if scheme != "file":
            raise UnsupportedURI(
                f"unsupported URI scheme {scheme!r} in {uri!r}: use a local path, file:///path, or s3://bucket/prefix"
            )
        uri = uri[len("file://") :]
    if storage_options:
        raise InvalidConfig(f"storage_options {sorted(storage_options)} were given for the local table {uri!r}, which takes none")
    return LocalStore(uri)
