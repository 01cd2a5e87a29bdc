"""The object-store interface every table operation goes through.

Paths are relative to the table root and always use ``/``. A store is a plain
value that pickles (Ray ships it to workers) and reconnects on the other side.
"""

from __future__ import annotations

import abc
import os
import posixpath
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from lamina.errors import CorruptFile


@dataclass(frozen=True)
class ObjectInfo:
    """One object under the table root."""

    path: str
    size: int
    modified: float  # seconds since the epoch


def check_relative(path: str, *, what: str) -> str:
    """Returns ``path`` normalized, or raises if it would leave the table root."""
    if not isinstance(path, str) or not path:
        raise CorruptFile(f"{what}: empty or non-string path {path!r}")
    norm = posixpath.normpath(path)
    if (
        path.startswith("/")
        or "\\" in path
        or "://" in path
        or norm.startswith("..")
        or norm != path
        or norm == "."
    ):
        raise CorruptFile(f"{what}: path {path!r} points outside the table root; the manifest is corrupt or was not written by Lamina")
    return norm


class ObjectStore(abc.ABC):
    """Object-store operations Lamina needs, with retries inside each call."""

    #: The table root URI this store serves (``/abs/path`` or ``s3://bucket/prefix``).
    uri: str

    @abc.abstractmethod
    def get(self, path: str) -> bytes:
        """The whole object; ``ObjectNotFound`` if missing."""

    @abc.abstractmethod
    def get_range(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``; ``CorruptFile`` if the object is shorter."""

    @abc.abstractmethod
    def put(self, path: str, data: bytes) -> None:
        """Writes (or replaces) an object atomically: readers see all of it or none."""

    @abc.abstractmethod
    def put_file(self, path: str, local_path: str) -> None:
        """Uploads a local file, streaming it (multipart for large objects on S3)."""

    @abc.abstractmethod
    def put_if_absent(self, path: str, data: bytes) -> bool:
        """Writes the object only if nothing is at ``path``; False if something was.

        True also when a retry of this call finds the object an earlier attempt of this
        same call wrote (its response lost); never for an object another call wrote,
        even with identical bytes."""

    @abc.abstractmethod
    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        """Every object whose path starts with ``prefix`` (recursive), in path order,
        only those after ``start_after`` when given."""

    @abc.abstractmethod
    def delete(self, paths: Iterable[str]) -> None:
        """Removes objects; a missing one is not an error."""

    @abc.abstractmethod
    def size(self, path: str) -> int:
        """Object size in bytes; ``ObjectNotFound`` if missing."""

    @abc.abstractmethod
    def exists(self, path: str) -> bool:
        """Whether an object is at ``path``."""

    @abc.abstractmethod
    def open_input(self, path: str, size: int | None = None) -> Any:
        """Something ``pyarrow.parquet.ParquetFile`` reads: a local path or a seekable file."""

    def local_path(self, path: str) -> str | None:
        """A local filesystem path for ``path`` if this store is a local directory, else None."""
        return None

    def stage(self, path: str, size: int, directory: str, batch_bytes: int) -> tuple[str, int]:
        """A local file holding the object (its own path on a local store, else a copy in
        ``directory`` fetched by ranged GETs of ``batch_bytes``), and the GET requests it took.
        Memory held: one batch."""
        local = self.local_path(path)
        if local is not None:
            return local, 0
        dest = os.path.join(directory, posixpath.basename(path) or "object")
        requests = 0
        with open(dest, "wb") as f:
            for start in range(0, size, batch_bytes):
                f.write(self.get_range(path, start, min(batch_bytes, size - start)))
                requests += 1
        return dest, requests

    def describe(self, path: str) -> str:
        """A full location for messages: the URI joined with ``path``."""
        return f"{self.uri.rstrip('/')}/{path}"


class RangeReader:
    """A read-only seekable file over ranged GETs, caching the footer region.

    Parquet readers seek to the end first (footer), then read column chunks:
    the first read near the end fetches the last ``tail_bytes`` once.
    """

    def __init__(self, store: ObjectStore, path: str, size: int, tail_bytes: int = 64 * 1024):
        self._store, self._path, self._size = store, path, size
        self._pos = 0
        self._tail_start = max(0, size - tail_bytes)
        self._tail: bytes | None = None
        self._closed = False

    # pyarrow.PythonFile uses these
    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def writable(self) -> bool:
        return False

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self._pos, 2: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def size(self) -> int:
        return self._size

    def read(self, n: int = -1) -> bytes:
        if n is None or n < 0:
            n = self._size - self._pos
        n = max(0, min(n, self._size - self._pos))
        if n == 0:
            return b""
        start = self._pos
        if start >= self._tail_start:
            if self._tail is None:
                self._tail = self._store.get_range(self._path, self._tail_start, self._size - self._tail_start)
            data = self._tail[start - self._tail_start : start - self._tail_start + n]
        else:
            data = self._store.get_range(self._path, start, n)
        self._pos += len(data)
        return data

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        self._closed = True

    def __enter__(self) -> "RangeReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
