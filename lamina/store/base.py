"""The object-store interface every table operation goes through.

Paths are relative to the table root and always use ``/``. A store is a plain
value that pickles (Ray ships it to workers) and reconnects on the other side.

Code that needs a real file (the native readers and writers) asks the store to stage
one, and never asks where the store keeps its bytes::

    with store.staged_input(path) as staged:    # local: the object itself; S3: ranged GETs to a temp file
        read(staged.path)
    with store.staged_output(path) as local:    # local: a temp beside the target, renamed; S3: uploaded
        write(local)
"""

from __future__ import annotations

import abc
import builtins
import contextlib
import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from lamina.cache import cache
from lamina.errors import CorruptFile, InvalidArgument, StorageError
from lamina.store.scheduler import POINT, env_int, fetch_ranges

#: Small objects fetched whole for point reads, by (store URI, path, size): paths are never reused
#: (docs/FORMAT.md), so an entry never goes stale (``LAMINA_OBJECT_CACHE_BYTES``, default 128 MiB).
OBJECTS = cache("objects", "LAMINA_OBJECT_CACHE_BYTES", 128 * 1024 * 1024)


def point_object_bytes() -> int:
    """Objects up to this size are fetched whole for a point read, one GET each, instead of footer + pages
    (``LAMINA_POINT_OBJECT_BYTES``, default 1 MiB)."""
    return env_int("LAMINA_POINT_OBJECT_BYTES", 1024 * 1024, 0, 1 << 34)


#: Default GET size of ``staged_input`` (also the memory it holds).
STAGE_BATCH_BYTES = 64 * 1024 * 1024


@dataclass(frozen=True)
class ObjectInfo:
    """One object under the table root."""

    path: str
    size: int
    modified: float  # seconds since the epoch


@dataclass(frozen=True)
class StagedInput:
    """A local file holding an object while a ``staged_input`` block runs."""

    path: str  # the local file
    requests: int  # GET requests staging took (0 when the object already is a local file)


def scratch_dir(directory: str | None = None) -> str | None:
    """Where temp files go: ``directory``, else ``$LAMINA_TMPDIR``, else the system default (None)."""
    return directory or os.environ.get("LAMINA_TMPDIR") or None


def check_relative(path: str, *, what: str) -> str:
    """Returns ``path`` normalized, or raises if it would leave the table root."""
    if not isinstance(path, str) or not path:
        raise CorruptFile(f"{what}: empty or non-string path {path!r}")
    norm = posixpath.normpath(path)
    if path.startswith("/") or "\\" in path or "://" in path or norm.startswith("..") or norm != path or norm == ".":
        raise CorruptFile(
            f"{what}: path {path!r} points outside the table root; the manifest is corrupt or was not written by Lamina"
        )
    return norm


class ObjectStore(abc.ABC):
    """Object-store operations Lamina needs, with retries inside each call."""

    #: The table root URI this store serves (``/abs/path`` or ``s3://bucket/prefix``).
    uri: str

    #: Whether objects are files on this machine (a local or mounted directory): ``staged_input``
    #: then costs nothing and ``append`` grows an object in place. False for object stores (S3),
    #: whose objects are written whole.
    is_local: bool = False

    @property
    def io_domain(self) -> str:
        """Which I/O scheduler and ``lamina.io_stats()`` entry this store's requests go to."""
        return "local"

    @abc.abstractmethod
    def get(self, path: str) -> bytes:
        """The whole object; ``ObjectNotFound`` if missing."""

    @abc.abstractmethod
    def get_range(self, path: str, start: int, length: int) -> bytes:
        """``length`` bytes from ``start``; ``CorruptFile`` if the object is shorter."""

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """The bytes of each ``(start, length)`` of one object, in order (``get_range`` each)."""
        return [self.get_range(path, start, length) for start, length in ranges]

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

    def point_sources(self, items: Sequence[tuple[str, int]], priority: int = POINT) -> builtins.list[str | bytes]:
        """For point reads of the ``(path, size)`` objects: a local file name each (local stores, nothing
        read) or the whole object's bytes (object stores: every GET issued at once through the I/O
        scheduler, answered from the ``objects`` cache when there). Callers only ask for small objects
        (``point_object_bytes()``)."""
        out: builtins.list[str | bytes | None] = [OBJECTS.get((self.uri, p, n)) for p, n in items]
        missing = [i for i, d in enumerate(out) if d is None]
        if missing:
            datas = fetch_ranges(self, [(items[i][0], 0, items[i][1]) for i in missing], priority)
            for i, data in zip(missing, datas):
                out[i] = data
                OBJECTS.put((self.uri, items[i][0], items[i][1]), data, len(data))
        return out  # type: ignore[return-value]  # every None was filled in above

    def local_path(self, path: str) -> str | None:
        """A local filesystem path for ``path`` if this store is a local directory, else None.

        Inside ``lamina.store`` only: elsewhere use ``staged_input``/``staged_output``/``is_local``."""
        return None

    def append(self, path: str, data: bytes, *, at: int | None = None) -> None:
        """Appends ``data`` to the object at ``path`` (created if missing) and makes it durable
        before returning; with ``at``, first cuts the object to ``at`` bytes (what a failed
        earlier append left behind). Only where ``is_local``: other stores write objects whole."""
        raise StorageError(f"{self.uri} cannot append to {path}: its objects are written whole (use put)")

    @contextlib.contextmanager
    def staged_input(
        self, path: str, size: int | None = None, *, batch_bytes: int = STAGE_BATCH_BYTES, directory: str | None = None
    ) -> Iterator[StagedInput]:
        """A local file holding the object for the duration of the block.

        Here (object stores): a temp file in ``directory`` (default ``$LAMINA_TMPDIR``, else the
        system's) filled by ranged GETs of ``batch_bytes`` (the memory held: one batch), removed
        on exit. ``size`` saves a HEAD when the caller knows it. ``ObjectNotFound`` if missing::

            with store.staged_input("data/x.parquet", batch_bytes=8 << 20) as staged:
                pq.read_metadata(staged.path); staged.requests  # GETs it took
        """
        if not isinstance(batch_bytes, int) or batch_bytes < 1:
            raise InvalidArgument(f"batch_bytes must be a positive integer, got {batch_bytes!r}")
        if size is None:
            size = self.size(path)
        fd, tmp = tempfile.mkstemp(prefix="lamina-in-", suffix=f"-{posixpath.basename(path)}", dir=scratch_dir(directory))
        try:
            requests = 0
            with os.fdopen(fd, "wb") as f:
                for start in range(0, size, batch_bytes):
                    f.write(self.get_range(path, start, min(batch_bytes, size - start)))
                    requests += 1
            yield StagedInput(tmp, requests)
        finally:
            remove_quietly(tmp)

    @contextlib.contextmanager
    def staged_output(self, path: str, directory: str | None = None) -> Iterator[str]:
        """A local path (nothing there yet) whose file becomes the object at ``path`` when the
        block ends normally; if the block raises, nothing is written and the file is removed.

        Here (object stores): a path in a temp directory under ``directory`` (default
        ``$LAMINA_TMPDIR``, else the system's), uploaded with ``put_file`` (multipart when large)::

            with store.staged_output("data/x.parquet") as local:
                write_parquet(local)          # the object exists once the block is left
        """
        scratch = tempfile.mkdtemp(prefix="lamina-out-", dir=scratch_dir(directory))
        try:
            local = os.path.join(scratch, posixpath.basename(path) or "object")
            yield local
            self.put_file(path, staged_file(local, self.describe(path)))
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    @contextlib.contextmanager
    def staged_new_output(self, path: str) -> Iterator[str]:
        """``staged_output`` for a new object at a fresh, unique name that nothing refers to yet (a
        data file before its commit): a store may have it written in place, since no reader looks at
        such an object before a commit names it, and the commit comes after it is complete and durable
        (docs/FORMAT.md §7). Here: ``staged_output``."""
        with self.staged_output(path) as local:
            yield local

    def describe(self, path: str) -> str:
        """A full location for messages: the URI joined with ``path``."""
        return f"{self.uri.rstrip('/')}/{path}"

    def location(self, path: str) -> str:
        """Where a reader outside Lamina (DuckDB, Spark, Trino) finds the object at ``path``: the URI joined
        with it, ``s3://bucket/prefix/data/x.parquet``; a local store gives an absolute file path."""
        return f"{self.uri.rstrip('/')}/{path}"


def staged_file(local: str, where: str) -> str:
    """``local``, once the block that was to write it has: a missing file is the caller's bug."""
    if not os.path.isfile(local):
        raise InvalidArgument(f"nothing was written at {local}, the staged file for {where}: write it inside the block")
    return local


def remove_quietly(path: str) -> None:
    """Removes a local file; one already gone is fine."""
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


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

    def __enter__(self) -> RangeReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
