"""A table on a local (or network-mounted POSIX) directory.

put-if-absent is ``link(2)`` of a fully written, fsynced temp file: atomic and
refuses to replace, on every POSIX filesystem Lamina supports. Staging costs nothing:
an input is the object's own file, an output a temp file beside its target, renamed (a new
data file, invisible until a commit names it: its own file, written in place).
"""

from __future__ import annotations

import builtins
import contextlib
import ctypes
import errno
import functools
import logging
import os
import shutil
import threading
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence

from lamina.errors import CorruptFile, ObjectNotFound, StorageError
from lamina.store.base import STAGE_BATCH_BYTES, ObjectInfo, ObjectStore, StagedInput, remove_quietly, staged_file
from lamina.store.scheduler import count

log = logging.getLogger(__name__)

#: The ``lamina.io_stats()`` key of every local directory.
LOCAL = "local"

#: From this many files on, ``LocalStore.sync_objects`` makes them durable with one ``syncfs(2)`` (and an
#: fsync of their directories) instead of an fsync each.
SYNCFS_MIN_FILES = 16


class LocalStore(ObjectStore):
    """Objects are files below ``root``."""

    is_local = True
    io_domain = LOCAL
    #: Whether ``write_fragment`` fsyncs each data file it writes here; off only in the view
    #: ``deferring_sync`` returns, whose user calls ``sync_objects`` before committing the files.
    sync_each_write = True
    #: Guards ``_made_dirs``; set with it, only in a ``deferring_sync`` view.
    _made_lock: threading.Lock

    def __init__(self, root: str):
        self.root = os.path.abspath(os.path.expanduser(root))
        self.uri = self.root
        #: Directories known to exist (only in a ``deferring_sync`` view, which lives for one bulk write).
        self._made_dirs: set[str] | None = None

    def __reduce__(self) -> tuple[type[LocalStore], tuple[str]]:
        return (LocalStore, (self.root,))

    def __repr__(self) -> str:
        return f"LocalStore({self.root!r})"

    def _full(self, path: str) -> str:
        return os.path.join(self.root, *path.split("/"))

    def location(self, path: str) -> str:
        return self._full(path)

    def local_path(self, path: str) -> str:
        full = self._full(path)
        make_dirs(os.path.dirname(full), self.root)
        return full

    def append(self, path: str, data: bytes, *, at: int | None = None) -> None:
        with open(self.local_path(path), "ab") as f:
            if at is not None and f.tell() != at:
                f.truncate(at)  # a failed earlier attempt left bytes behind
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    @contextlib.contextmanager
    def staged_input(
        self, path: str, size: int | None = None, *, batch_bytes: int = STAGE_BATCH_BYTES, directory: str | None = None
    ) -> Iterator[StagedInput]:
        """The object's own file, no copy, no request (``ObjectNotFound`` if missing)."""
        full = self._full(path)
        if not os.path.exists(full):
            raise ObjectNotFound(f"{self.describe(path)} does not exist")
        yield StagedInput(full, 0)

    @contextlib.contextmanager
    def staged_output(self, path: str, directory: str | None = None) -> Iterator[str]:
        """A temp file beside the target, renamed onto it when the block ends normally (readers
        never see a partial object; a retried writer may replace an earlier attempt's), else
        removed. ``directory`` is not used: the rename must stay on one filesystem.

        One system call besides the writer's own when the directory is known (the ``deferring_sync``
        view remembers the directories it made): the rename; a stat and an unlink only on failure. A
        bulk write of many small files used to pay a failing ``mkdir``, two stats and a failing ``unlink``
        for each."""
        parent, name = self._split(path)
        self._make_dir(parent)
        full = os.path.join(parent, name)
        tmp = os.path.join(parent, f".tmp-{uuid.uuid4().hex}-{name}")
        published = False
        try:
            yield tmp
            try:
                os.replace(tmp, full)
            except FileNotFoundError:
                staged_file(tmp, self.describe(path))  # nothing written: the caller's bug, said plainly
                raise
            published = True
            if self.sync_each_write:  # the renamed entry is durable before anything can name it
                _fsync_dir(parent)
        finally:
            if not published:
                remove_quietly(tmp)

    @contextlib.contextmanager
    def staged_new_output(self, path: str) -> Iterator[str]:
        """The object's own file, written in place: no temp file, no rename (per file, a system call
        less and one hold of the directory's lock less, which other threads creating files wait on).
        Only for a fresh, unique name nothing refers to yet (``ObjectStore.staged_new_output``): the
        file is invisible until a commit names it, the caller makes it durable first, and a partial
        file left by a crash is unreferenced, so cleanup removes it like any other. Removed if the
        block raises."""
        parent, name = self._split(path)
        self._make_dir(parent)
        full = os.path.join(parent, name)
        done = False
        try:
            yield full
            done = True
            if self.sync_each_write:  # the new entry is durable before anything can name it
                _fsync_dir(parent)
        finally:
            if not done:
                remove_quietly(full)

    def new_files(self, paths: Sequence[str]) -> list[str]:
        """The local paths of new objects a writer creates in place itself (fresh, unique names, as
        ``staged_new_output`` gives one at a time), their directories made (once per ``deferring_sync``
        view). The writer removes what it wrote if it fails; nothing refers to them until a commit."""
        out = []
        for path in paths:
            parent, name = self._split(path)
            self._make_dir(parent)
            out.append(os.path.join(parent, name))
        return out

    def _split(self, path: str) -> tuple[str, str]:
        """(local directory, file name) of an object."""
        parent, _, name = path.rpartition("/")
        return (os.path.join(self.root, *parent.split("/")) if parent else self.root), name

    def _make_dir(self, directory: str) -> None:
        """Creates ``directory`` if missing; a ``deferring_sync`` view (one bulk write) does it once per
        directory, a long-lived store every time (the table may have been dropped and made again)."""
        made = self._made_dirs
        if made is None:
            make_dirs(directory, self.root)
            return
        if directory not in made:
            with self._made_lock:  # the view's writer threads: one makes it, the others wait for it
                if directory not in made:
                    make_dirs(directory, self.root)
                    made.add(directory)

    def get(self, path: str) -> bytes:
        try:
            with open(self._full(path), "rb") as f:
                data = f.read()
            count(LOCAL, "GET", 1, len(data))
            return data
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.describe(path)} does not exist") from None
        except OSError as e:
            raise StorageError(f"reading {self.describe(path)} failed: {e}") from e

    def get_range(self, path: str, start: int, length: int) -> bytes:
        return self.get_ranges(path, [(start, length)])[0]

    def get_ranges(self, path: str, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """One open file and a ``pread`` per range: each range is read into its own bytes, none
        read into a larger buffer and copied out of it."""
        try:
            fd = os.open(self._full(path), os.O_RDONLY)
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.describe(path)} does not exist") from None
        except OSError as e:
            raise StorageError(f"reading {self.describe(path)} failed: {e}") from e
        try:
            out = []
            for start, length in ranges:
                try:
                    data = os.pread(fd, length, start)
                except OSError as e:
                    raise StorageError(f"reading {self.describe(path)} failed: {e}") from e
                if len(data) != length:
                    raise CorruptFile(
                        f"{self.describe(path)} is shorter than expected "
                        f"(wanted bytes {start}..{start + length}, got {len(data)}): truncated"
                    )
                out.append(data)
        finally:
            os.close(fd)
        count(LOCAL, "GET", len(out), sum(map(len, out)))
        return out

    def _write_temp(self, path: str, data: bytes | None = None, source: str | None = None) -> str:
        full = self._full(path)
        directory = os.path.dirname(full)
        make_dirs(directory, self.root)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                if source is not None:
                    with open(source, "rb") as src:
                        shutil.copyfileobj(src, f, 8 << 20)
                else:
                    f.write(data or b"")
                f.flush()
                os.fsync(f.fileno())
        except BaseException:
            remove_quietly(tmp)
            raise
        return tmp

    def put(self, path: str, data: bytes) -> None:
        count(LOCAL, "PUT", 1, len(data))
        tmp = self._write_temp(path, data)
        os.replace(tmp, self._full(path))
        _fsync_dir(os.path.dirname(self._full(path)))

    def put_file(self, path: str, local_path: str) -> None:
        if os.path.abspath(local_path) == self._full(path):
            return
        count(LOCAL, "PUT", 1, os.path.getsize(local_path))
        tmp = self._write_temp(path, source=local_path)
        os.replace(tmp, self._full(path))
        _fsync_dir(os.path.dirname(self._full(path)))

    def put_if_absent(self, path: str, data: bytes) -> bool:
        count(LOCAL, "PUT", 1, len(data))
        tmp = self._write_temp(path, data)
        try:
            os.link(tmp, self._full(path))
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno == errno.EEXIST:
                return False
            raise StorageError(f"writing {self.describe(path)} failed: {e}") from e
        finally:
            remove_quietly(tmp)
        try:
            _fsync_dir(os.path.dirname(self._full(path)))
        except StorageError as e:
            # The object is in place and every reader sees it: failing now would have a caller retry a
            # commit that landed (an append twice). Said loudly instead; the disk needs attention.
            log.error("%s was written, but %s", self.describe(path), e)
        return True

    def list(self, prefix: str, start_after: str | None = None) -> Iterator[ObjectInfo]:
        # Walk from the deepest directory the prefix names, then filter by the prefix.
        count(LOCAL, "LIST")
        base_dir = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        top = self._full(base_dir) if base_dir else self.root
        found: list[ObjectInfo] = []
        for dirpath, _dirs, files in os.walk(top):
            rel_dir = os.path.relpath(dirpath, self.root).replace(os.sep, "/")
            for name in files:
                rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                if not rel.startswith(prefix) or (start_after is not None and rel <= start_after):
                    continue
                try:
                    st = os.stat(os.path.join(dirpath, name))
                except FileNotFoundError:
                    continue  # removed while listing
                found.append(ObjectInfo(rel, st.st_size, st.st_mtime))
        found.sort(key=lambda o: o.path)
        return iter(found)

    def delete(self, paths: Iterable[str]) -> None:
        for path in paths:
            count(LOCAL, "DELETE")
            remove_quietly(self._full(path))

    def size(self, path: str) -> int:
        count(LOCAL, "HEAD")
        try:
            return os.stat(self._full(path)).st_size
        except FileNotFoundError:
            raise ObjectNotFound(f"{self.describe(path)} does not exist") from None

    def exists(self, path: str) -> bool:
        count(LOCAL, "HEAD")
        return os.path.exists(self._full(path))

    def point_sources(self, items: Sequence[tuple[str, int]], priority: int = 0) -> builtins.list[str | bytes]:
        """The objects' own files (the native reader opens them; nothing is read here)."""
        count(LOCAL, "GET", len(items))
        return [self._full(p) for p, _ in items]

    def open_input(self, path: str, size: int | None = None) -> str:
        full = self._full(path)
        if not os.path.exists(full):
            raise ObjectNotFound(f"{self.describe(path)} does not exist")
        return full

    def deferring_sync(self) -> LocalStore:
        """This store, for a writer that makes its files durable together (``sync_objects``) instead of
        one by one: ``write_fragment`` through it does not fsync each file. A separate object, so other
        writers sharing this store keep syncing their own files (and a pickled copy syncs again)."""
        view = LocalStore(self.root)
        view.sync_each_write = False
        view._made_dirs = set()
        view._made_lock = threading.Lock()
        return view

    def sync_objects(self, paths: Sequence[str]) -> None:
        """Makes objects written without their own fsync (``write_data_file(sync=False)`` inside
        ``staged_output``) durable, before anything refers to them. A few files: an fsync each, as a
        synced write would have done. Many (``SYNCFS_MIN_FILES``): one ``syncfs(2)`` of the table's
        filesystem (fsyncs one by one dominate a bulk write of many small files); an fsync each where
        syncfs is unavailable or fails. Either way then an fsync of each directory holding them, so
        their entries are durable too. ``StorageError`` naming the file if one cannot be synced; a
        file already gone (a cleanup raced a long write) has nothing to sync: the commit's check of
        old files reports it."""
        full = [self._full(p) for p in paths]
        if len(full) < SYNCFS_MIN_FILES or not _syncfs(self.root):
            for f, p in zip(full, paths):
                _fsync_file(f, self.describe(p))
        for directory in sorted({os.path.dirname(f) for f in full}):  # and their entries
            _fsync_dir(directory)


@functools.lru_cache(maxsize=1)
def _libc_syncfs() -> Callable[[int], int] | None:
    try:
        syncfs: Callable[[int], int] = ctypes.CDLL(None, use_errno=True).syncfs  # Linux (glibc, musl)
        return syncfs
    except (OSError, AttributeError):
        return None


def _syncfs(directory: str) -> bool:
    """``syncfs(2)`` of the filesystem holding ``directory`` (the GIL released while it runs): whether
    it ran and succeeded (since Linux 5.8 it reports write-back errors)."""
    syncfs = _libc_syncfs()
    if syncfs is None:
        return False
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return False
    try:
        return syncfs(fd) == 0
    finally:
        os.close(fd)


def _fsync_file(path: str, where: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    except FileNotFoundError:
        return
    except OSError as e:
        raise StorageError(f"making {where} durable failed: {e}") from e


#: Directories whose names this process has made durable (bounded: cleared past 100,000).
_DURABLE_DIRS: set[str] = set()


def make_dirs(directory: str, root: str) -> None:
    """``os.makedirs``, then, the first time this process writes into ``directory``, an fsync of each directory
    from its parent up to ``root``'s parent, top down. A file's fsync and its directory's make the file's name
    durable, not the directory's own name in its parent: without this a crash soon after a table's first commit
    could lose the new ``_versions/`` or ``data/`` with everything in it. Done on the first sighting, not only
    when this call made the directory, so a writer that finds it just made by another (who may not have
    fsynced its parent yet) does not report its own file durable before the name is."""
    if directory in _DURABLE_DIRS and os.path.isdir(directory):
        return
    os.makedirs(directory, exist_ok=True)
    chain = []
    d = directory
    while True:
        parent = os.path.dirname(d)
        if not parent or parent == d:
            break
        chain.append(parent)
        if d == root or not d.startswith(root):
            break
        d = parent
    for parent in reversed(chain):
        _fsync_dir(parent)
    if len(_DURABLE_DIRS) > 100_000:
        _DURABLE_DIRS.clear()
    _DURABLE_DIRS.add(directory)


#: fsync errors of a filesystem that cannot sync a directory at all (some network and FUSE ones):
#: there is nothing more to do there. Any other error (EIO, ENOSPC, EROFS, ...) is the disk's.
_NO_DIRECTORY_SYNC = frozenset({errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP})


def _fsync_dir(directory: str) -> None:
    """Makes the names just made in ``directory`` durable. ``StorageError`` if the disk fails the
    fsync: what was written there may not survive a crash, so the write that needed it fails before
    anything can refer to it. A directory gone (cleanup), one this process may not open (a parent
    above the table) or a filesystem that cannot sync directories has nothing to sync."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except (FileNotFoundError, PermissionError):
        return
    except OSError as e:
        raise StorageError(
            f"making the entries of directory {directory} durable failed (open: {e}); "
            f"what was just written there may not survive a crash: check the disk"
        ) from e
    try:
        os.fsync(fd)
    except OSError as e:
        if e.errno not in _NO_DIRECTORY_SYNC:
            raise StorageError(
                f"making the entries of directory {directory} durable failed (fsync: {e}); "
                f"what was just written there may not survive a crash: check the disk"
            ) from e
    finally:
        os.close(fd)
