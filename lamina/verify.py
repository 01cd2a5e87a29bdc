"""Checking every object one table version needs against its manifest.

    verify_version(store, version) ─► the root (a root or segment list that cannot be read: its problem)
    verify(store, manifest) ─► per manifest segment and segment list (threads): present, CRC32C, decodes
                            ─► per file of every fragment listed (threads): present, size, CRC32C, and for
                               data files the Parquet footer's rows; for deletion files the bitmap's count
                            ─► VerifyReport (problems named by object; nothing is changed)

A damaged object is a problem in the report, never an exception: a missing manifest segment hides
the files of its fragments, not the rest of the version. Reads bypass every cache, so what is
checked is what is on storage. S3 objects are staged to a temporary file by ranged GETs of
``batch_bytes``: memory held is ``threads × batch_bytes``, temporary disk ``threads ×`` the largest file.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import cast

import pyarrow as pa
import pyarrow.parquet as pq

from lamina import _native
from lamina.checksum import of_bytes, of_file
from lamina.errors import CorruptFile, LaminaError, ObjectNotFound
from lamina.manifest import Fragment, FragmentList, Manifest, ManifestSegment, decode_segment, load_manifest
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
    #: Manifest segments and segment lists checked (not counted in ``files_checked``).
    manifest_objects_checked: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict:
        return {
            "uri": self.uri,
            "version": self.version,
            "ok": self.ok,
            "files_checked": self.files_checked,
            "bytes_checked": self.bytes_checked,
            "without_checksum": self.without_checksum,
            "manifest_objects_checked": self.manifest_objects_checked,
            "problems": list(self.problems),
        }


@dataclass(frozen=True)
class _Item:
    kind: str  # "data", "deletion", "index"
    path: str
    size: int | None
    checksum: str | None
    fragment: Fragment | None = None


def _items(m: Manifest, fragments: list[Fragment]) -> list[_Item]:
    out = []
    for f in fragments:
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
                problems.append(
                    f"{what} {where} holds {len(offsets)} offsets, the manifest says {frag.deleted_rows} of {frag.rows} rows"
                )
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


def _read_segment(store: ObjectStore, entry: ManifestSegment, m: Manifest, is_list: bool) -> tuple[int, tuple | None, str | None]:
    """(bytes read, the items it holds or None, its problem or None) for one manifest segment or segment list,
    read from storage (not from the segment cache) and checked against its entry."""
    what = "manifest segment list" if is_list else "manifest segment"
    where = store.describe(entry.path)
    lost = f"the {entry.count} {'segments' if is_list else 'fragments'} it lists cannot be checked"
    try:
        data = store.get(entry.path)
        segment = decode_segment(data, entry, m.table_uuid, where, is_list=is_list, schemas=m.schema_registry())
        return len(data), segment.items, None
    except ObjectNotFound:
        return 0, None, f"{what} {where} is missing: {lost}; restore it, or open another version with open_table(uri, version=N)"
    except (CorruptFile, LaminaError) as e:
        return 0, None, f"{what} {where} cannot be read ({e}): {lost}"


def _fragments(store: ObjectStore, m: Manifest, pool: ThreadPoolExecutor) -> tuple[list[Fragment], int, int, list[str]]:
    """(the fragments that can be listed, manifest objects checked, bytes read, problems): every segment
    list and segment of ``m`` read on its own, so one damaged object costs only what it lists."""
    objects = [(e, True) for e in m.segment_lists] + [(e, False) for e in m.segments]
    got = list(pool.map(lambda o: _read_segment(store, o[0], m, o[1]), objects))
    problems = [p for _, _, p in got if p is not None]
    read = sum(n for n, _, _ in got)
    by_path = {e.path: items for (e, is_list), (_, items, _) in zip(objects, got) if not is_list}
    if not isinstance(m.fragments, FragmentList):
        return list(m.fragments), len(objects), read, problems
    out: list[Fragment] = []
    for part, held in m.fragments.runs(skip=lambda seg: True):  # segments unread here: read above, from storage
        # held is None only for a segment (the skipped ones): its fragments were read above
        out.extend(held if held is not None else by_path.get(cast(ManifestSegment, part).path) or ())
    if not problems:
        try:  # the version as a whole: fragment ids unique and in range, each segment within its entry's range
            for _ in m.fragments:
                pass
        except CorruptFile as e:
            problems.append(str(e))
    return out, len(objects), read, problems


def verify_version(
    store: ObjectStore,
    version: int,
    *,
    threads: int = 4,
    batch_bytes: int = 8 << 20,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """``verify`` of ``version`` of the table in ``store``, read from storage; a root (or a segment list it
    names) that cannot be read is the report's problem, not an exception (``VersionNotFound`` still is)."""
    try:
        manifest = load_manifest(store, version)
    except CorruptFile as e:
        return VerifyReport(
            store.uri, version, 0, 0, 0, (f"{e} (nothing it names could be listed, so nothing more was checked)",)
        )
    return verify(store, manifest, threads=threads, batch_bytes=batch_bytes, progress=progress)


def verify(
    store: ObjectStore,
    manifest: Manifest,
    *,
    threads: int = 4,
    batch_bytes: int = 8 << 20,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """Checks every manifest segment, segment list and file ``manifest`` references; returns what it found
    (raises nothing for damaged objects). ``progress(done, total)`` is called after each file."""
    with ThreadPoolExecutor(max(1, threads), thread_name_prefix="lamina-verify") as pool:
        fragments, manifest_objects, read, problems = _fragments(store, manifest, pool)
        items = _items(manifest, fragments)
        done = 0
        for nbytes, found in pool.map(lambda it: _check(store, it, batch_bytes), items):
            read += nbytes
            problems.extend(found)
            done += 1
            if progress is not None:
                progress(done, len(items))
    return VerifyReport(
        store.uri,
        manifest.version,
        len(items),
        read,
        sum(1 for it in items if it.checksum is None),
        tuple(problems),
        manifest_objects,
    )
