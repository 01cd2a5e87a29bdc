"""Checking every file one table version needs against its manifest.

    verify(store, manifest) ─► per file (threads): present, size, CRC32C, and for data files the
                               Parquet footer's rows; for deletion files the bitmap's count
                             ─► VerifyReport (problems named by file; nothing is changed)

Reads bypass every cache, so what is checked is what is on storage. S3 objects are staged to a
temporary file by ranged GETs of ``batch_bytes``: memory held is ``threads × batch_bytes``,
temporary disk ``threads ×`` the largest file.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Callable

import pyarrow as pa
import pyarrow.parquet as pq

from lamina import _native
from lamina.checksum import of_bytes, of_file
from lamina.errors import LaminaError, ObjectNotFound
from lamina.manifest import Fragment, Manifest
from lamina.store import ObjectStore


@dataclass(frozen=True)
class VerifyReport:
    """What ``Table.verify()`` found; ``ok`` when no problem was found."""

    uri: str
    version: int
    files_checked: int
    bytes_checked: int
    #: Files written before checksums were recorded: checked for presence, size and structure only.
    without_checksum: int
    problems: tuple[str, ...] = field(default_factory=tuple)

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {"uri": self.uri, "version": self.version, "ok": self.ok, "files_checked": self.files_checked,
                "bytes_checked": self.bytes_checked, "without_checksum": self.without_checksum,
                "problems": list(self.problems)}


@dataclass(frozen=True)
class _Item:
    kind: str  # "data", "deletion", "index"
    path: str
    size: int | None
    checksum: str | None
    fragment: Fragment | None = None


def _items(m: Manifest) -> list[_Item]:
    out = []
    for f in m.fragments:
        out.append(_Item("data", f.path, f.file_bytes, f.checksum, f))
        if f.deletion:
            out.append(_Item("deletion", f.deletion.path, None, f.deletion.checksum, f))
    for ix in m.indices:
        for seg in ix.segments:
            out.append(_Item("index", seg.path, seg.bytes, seg.checksum))
    return out


def _check(store: ObjectStore, item: _Item, batch_bytes: int) -> tuple[int, list[str]]:
    """(bytes read, problems) for one file."""
    where = store.describe(item.path)
    what = {"data": "data file", "deletion": "deletion file", "index": "index segment"}[item.kind]
    if item.fragment is not None:
        what += f" of fragment {item.fragment.id}"
    try:
        if item.kind == "deletion":
            data = store.get(item.path)
            problems = _compare(item, of_bytes(data), what, where)
            frag = item.fragment
            offsets = _native.decode_deletions(data, where, frag.rows if frag else None).to_numpy(zero_copy_only=False)
            if frag is not None and (len(offsets) != frag.deleted_rows or (len(offsets) and offsets[-1] >= frag.rows)):
                problems.append(f"{what} {where} holds {len(offsets)} offsets, the manifest says {frag.deleted_rows} of {frag.rows} rows")
            return len(data), problems
        size = store.size(item.path)
        if item.size is not None and size != item.size:
            return 0, [f"{what} {where} is {size} bytes, the manifest says {item.size}: truncated or replaced"]
        with store.staged_input(item.path, size, batch_bytes=batch_bytes) as staged:
            problems = _compare(item, of_file(staged.path), what, where)
            if item.kind == "data" and not problems and item.fragment is not None:
                rows = pq.read_metadata(staged.path).num_rows
                if rows != item.fragment.rows:
                    problems.append(f"{what} {where} has {rows} rows, the manifest says {item.fragment.rows}")
        return size, problems
    except ObjectNotFound:
        return 0, [f"{what} {where} is missing"]
    except (LaminaError, pa.ArrowException, OSError) as e:
        return 0, [f"{what} {where} cannot be read: {e}"]


def _compare(item: _Item, actual: str, what: str, where: str) -> list[str]:
    if item.checksum is not None and actual != item.checksum:
        return [f"{what} {where} is corrupt: checksum {actual}, the manifest recorded {item.checksum}"]
    return []


def verify(store: ObjectStore, manifest: Manifest, *, threads: int = 4, batch_bytes: int = 8 << 20,
           progress: Callable[[int, int], None] | None = None) -> VerifyReport:
    """Checks every file ``manifest`` references; returns what it found (raises nothing for
    damaged files). ``progress(done, total)`` is called after each file."""
    items = _items(manifest)
    problems: list[str] = []
    read = done = 0
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="lamina-verify") as pool:
        for nbytes, found in pool.map(lambda it: _check(store, it, batch_bytes), items):
            read += nbytes
            problems.extend(found)
            done += 1
            if progress is not None:
                progress(done, len(items))
    return VerifyReport(store.uri, manifest.version, len(items), read,
                        sum(1 for it in items if it.checksum is None), tuple(problems))
