"""Finding and reading a table's versions: listing them, the latest one (through the latest-version
hint), loading a version's root and its segments through this process's caches (one manifest cache
keyed by table, incarnation and version; one segment cache keyed by path), and whether a version on
storage belongs to a given incarnation of the table."""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import itertools
import json
import logging
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from lamina.cache import MiB, cache
from lamina.errors import CorruptFile, LaminaError, ObjectNotFound, TableReplaced, VersionNotFound
from lamina.io_pool import map_fragments
from lamina.manifest.codec import decode_manifest, decode_segment
from lamina.manifest.model import Manifest
from lamina.manifest.paths import MANIFEST_SUFFIX, VERSIONS_DIR, manifest_path
from lamina.manifest.segments import ManifestSegment, Unread
from lamina.store import ObjectStore

log = logging.getLogger("lamina.manifest")

#: Manifests are immutable once written, so caching by (table, incarnation, version) is safe. The
#: table uuid is part of the key: a table created again at the same URI has another uuid, so its
#: versions never meet the old table's cached ones.
_CACHE = cache("manifest", "LAMINA_MANIFEST_CACHE_BYTES", 64 * MiB)
#: Manifest segments by path (immutable, never reused): versions share them, so a reader of the next
#: version fetches only the segments that changed.
_SEGMENTS = cache("manifest segment", "LAMINA_SEGMENT_CACHE_BYTES", 256 * MiB)


def _held_bytes(m: Manifest, encoded: int | None = None) -> int:
    """What a decoded manifest holds beyond its segments (cached on their own), about."""
    inline = len(m.fragments) - sum(seg.count for seg in m.segments)
    return 1024 + 400 * inline + 8 * len(m.fragments) + 200 * sum(len(ix.segments) for ix in m.indices)


def _segment_held_bytes(seg: ManifestSegment) -> int:
    """Memory a decoded segment holds: measured 1.2 KB per fragment for ~200 bytes of JSON (two
    columns' zone maps), so six times its size, plus the tuple."""
    return 6 * seg.bytes + 64 * seg.count


def forget_manifest(store: ObjectStore, version: int) -> None:
    """Drops a removed version from this process's cache."""
    _CACHE.discard(lambda key: key[0] == store.uri and key[2] == version)


def forget_table(store: ObjectStore, table_uuid: str) -> None:
    """Drops every version of table ``table_uuid`` at ``store`` from this process's cache (a purged table)."""
    _CACHE.discard(lambda key: key[0] == store.uri and key[1] == table_uuid)


def forget_superseded(store: ObjectStore, m: Manifest) -> None:
    """Drops version ``m`` from this process's cache when its writer knows nothing will read it again (the catalog's
    previous version, once its rewrite committed): a writer of many small commits otherwise keeps every version it
    wrote until the byte budget fills, and the garbage collector walks them all."""
    _CACHE.pop((store.uri, m.table_uuid, m.version))


def remember_manifest(store: ObjectStore, m: Manifest, written: Sequence[str]) -> None:
    """Caches a manifest this process just wrote, and the segments and lists it wrote (``written``);
    the others are its base's, cached when they were read."""
    _CACHE.put((store.uri, m.table_uuid, m.version), m, _held_bytes(m))
    if not written:
        return
    new = set(written)
    for seg in itertools.chain(m.segments, m.segment_lists):
        if seg.path in new and seg.read:
            _SEGMENTS.put((store.uri, seg.path), seg, _segment_held_bytes(seg))


def write_segments(store: ObjectStore, writes: list[tuple[str, bytes]]) -> None:
    """Puts the new segments and segment lists of a version (before its root), all at once."""
    map_fragments(lambda w: store.put(w[0], w[1]), writes)


@contextlib.contextmanager
def _collector_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector while many objects are made at once: decoding segments
    creates only acyclic objects (fragments, tuples), yet each young-generation pass walks them all
    and the full passes it triggers walk every object of the process, which made opening a large
    table several times slower with the collector running than paused."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class SegmentReader:
    """Reads a table's segments and segment lists: from the cache, the others from the store in parallel."""

    def __init__(self, store: ObjectStore):
        self.store = store

    def unread(self, entry: ManifestSegment, table_uuid: str, schemas: dict[int, pa.Schema] | None = None) -> ManifestSegment:
        """The segment ``entry`` names: the cached one, or one read on first use (its fragments' schemas
        looked up in ``schemas``, the root's ``Manifest.schema_registry``)."""
        seg: ManifestSegment | None = _SEGMENTS.get((self.store.uri, entry.path))
        if seg is not None and seg == entry:
            return seg
        return dataclasses.replace(entry, held=Unread(self, table_uuid, schemas))

    def read_now(self, entries: list[ManifestSegment], table_uuid: str) -> list[ManifestSegment]:
        """Segment lists, read now."""
        out = [self.unread(e, table_uuid) for e in entries]
        self.read([seg for seg in out if not seg.read], table_uuid, is_list=True)
        return out

    def read(
        self, segments: list[ManifestSegment], table_uuid: str, *, is_list: bool = False, fill: bool = True
    ) -> list[tuple[Any, ...]]:
        """The items of ``segments``: from the cache, the others read from the store (all at once)
        and cached. ``fill``: each segment keeps its items (else they live only in the cache, and a
        streaming reader holds them while it needs them)."""
        store = self.store
        found: list[tuple[Any, ...] | None] = []
        for seg in segments:
            cached = _SEGMENTS.get((store.uri, seg.path))
            found.append(cached.held if cached is not None and cached == seg and cached.read else None)
        missing = [seg for seg, items in zip(segments, found) if items is None]

        def fetch(seg: ManifestSegment) -> bytes:
            try:
                return store.get(seg.path)
            except ObjectNotFound:
                raise CorruptFile(
                    f"manifest segment {store.describe(seg.path)} is missing: the version naming it cannot be read. "
                    f"Open an earlier or later version with open_table(uri, version=N), or restore the object"
                ) from None

        # Fetched in parallel, decoded here: decoding is Python, threads would only contend for the GIL.
        datas = iter(map_fragments(fetch, missing))
        out: list[tuple[Any, ...]] = []
        with _collector_paused():
            for seg, items in zip(segments, found):
                if items is None:
                    done = decode_segment(
                        next(datas), seg, table_uuid, store.describe(seg.path), is_list=is_list, schemas=seg.held.schemas
                    )
                    _SEGMENTS.put((store.uri, seg.path), done, _segment_held_bytes(done))
                    items = done.items
                if fill:
                    seg.fill(items)
                out.append(items)
        return out


def load_manifest(store: ObjectStore, version: int, table_uuid: str | None = None) -> Manifest:
    """The manifest of ``version``; ``VersionNotFound`` if there is none.

    ``table_uuid`` is the incarnation the caller holds: the manifest may then come from the
    cache, and one of another incarnation raises ``TableReplaced``. Without it (opening a
    table, finding its latest version) the root is always read from storage (its segments may
    come from the cache: their paths are never reused).
    """
    if table_uuid is not None:
        cached: Manifest | None = _CACHE.get((store.uri, table_uuid, version))
        if cached is not None:
            return cached
    path = manifest_path(version)
    try:
        data = store.get(path)
    except ObjectNotFound:
        raise VersionNotFound(f"table {store.uri} has no version {version} (never committed, or removed by cleanup)") from None
    where = store.describe(path)
    m = decode_manifest(data, where, SegmentReader(store))
    if m.version != version:
        raise CorruptFile(f"manifest {where} says it is version {m.version}")
    _CACHE.put((store.uri, m.table_uuid, m.version), m, _held_bytes(m))
    if table_uuid is not None and m.table_uuid != table_uuid:
        raise TableReplaced(
            f"table {store.uri} was dropped and created again: version {version} belongs to table {m.table_uuid or '(unnamed)'}, "
            f"not to table {table_uuid or '(unnamed)'} read before. Nothing was changed; open the table again with open_table"
        )
    return m


def stored_format_version(store: ObjectStore, version: int) -> int:
    """The format version the root of ``version`` was written in (1: every fragment in the root)."""
    path = manifest_path(version)
    try:
        body = json.loads(store.get(path))
        return int(body["format_version"])
    except ObjectNotFound:
        raise VersionNotFound(f"table {store.uri} has no version {version}") from None
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as e:
        raise CorruptFile(
            f"manifest {store.describe(path)} is corrupt: no format version ({type(e).__name__}). Open an "
            f"earlier version with open_table(uri, version=N), or restore this object"
        ) from None


def belongs_to(store: ObjectStore, version: int, table_uuid: str) -> bool:
    """Whether the manifest of ``version`` on storage (not in any cache) is one of table
    ``table_uuid``'s; False if it is missing. One GET, no decoding: the uuid is 32 random hex
    digits, so its ``"table_uuid"`` entry can only be found in that table's manifests."""
    if not table_uuid:
        return True  # a table from before table uuids: nothing to tell incarnations apart
    try:
        data = store.get(manifest_path(version))
    except ObjectNotFound:
        return False
    return f'"table_uuid": "{table_uuid}"'.encode() in data


def try_load_manifest(store: ObjectStore, version: int, table_uuid: str | None = None) -> Manifest | None:
    try:
        return load_manifest(store, version, table_uuid)
    except VersionNotFound:
        return None


def load_latest_from(store: ObjectStore, known: int) -> Manifest | None:
    """The latest manifest, when ``known`` was once the latest version (a catalog's record of its tables):
    versions are contiguous from any version still there, so ``known`` is still the latest if it is there
    and the next is not — its manifest and the next one's existence, read together, instead of the hint, a
    listing and the manifest. None when that does not hold (the caller finds the latest as usual)."""
    # Locally two stats, cheaper than a thread hop; never wait on the I/O pool from one of its own threads.
    if store.is_local or threading.current_thread().name.startswith("lamina-io"):
        return None if store.exists(manifest_path(known + 1)) else try_load_manifest(store, known)
    from lamina.io_pool import io_pool

    following = io_pool().submit(store.exists, manifest_path(known + 1))
    m = try_load_manifest(store, known)
    return None if following.result() else m


def list_versions(store: ObjectStore) -> list[int]:
    versions = []
    for obj in store.list(VERSIONS_DIR):
        name = obj.path[len(VERSIONS_DIR) :]
        if name.endswith(MANIFEST_SUFFIX) and name[: -len(MANIFEST_SUFFIX)].isdigit():
            versions.append(int(name[: -len(MANIFEST_SUFFIX)]))
    return sorted(versions)


def versions_from(store: ObjectStore, version: int, limit: int) -> list[int]:
    """Up to ``limit`` versions from ``version`` on still on storage, ascending (one short listing)."""
    found: list[int] = []
    for obj in store.list(VERSIONS_DIR, start_after=manifest_path(version - 1)):
        name = obj.path[len(VERSIONS_DIR) :]
        if name.endswith(MANIFEST_SUFFIX) and name[: -len(MANIFEST_SUFFIX)].isdigit():
            found.append(int(name[: -len(MANIFEST_SUFFIX)]))
            if len(found) == limit:
                break
    return found


#: An advisory object naming a recent version (docs/FORMAT.md §2, "Latest-version hint"): readers list
#: the versions from it on instead of the whole history. Never trusted alone: a hint may be old, and
#: one of a dropped table may be ahead of the table there now.
LATEST_HINT = f"{VERSIONS_DIR}_latest"
#: Committers refresh the hint every this many versions (and at version 1), so a reader lists at most
#: about this many versions past it.
HINT_EVERY = 16


def write_latest_hint(store: ObjectStore, version: int) -> None:
    """Records ``version`` in the latest-version hint when it is due; best effort (a failure only makes
    the next reader list a little more)."""
    if version != 1 and version % HINT_EVERY:
        return
    try:
        store.put(LATEST_HINT, str(version).encode())
    except LaminaError as e:
        log.warning(
            "could not refresh the latest-version hint of %s (%s): readers list more versions until the next one", store.uri, e
        )


def _hinted_version(store: ObjectStore) -> int | None:
    try:
        text = store.get(LATEST_HINT).decode("ascii", "replace").strip()
    except ObjectNotFound:
        return None
    return int(text) if text.isdigit() and 0 < len(text) <= 19 else None


def latest_version(store: ObjectStore) -> int | None:
    """The newest version on storage, or None. Lists from the latest-version hint when there is one
    (a few versions, whatever the length of the history; locally, looks them up one by one), else every
    version."""
    hint = _hinted_version(store)
    if hint is not None and store.is_local:
        # Versions are contiguous from any version still there (each is put only after the one before it,
        # and cleanup removes the oldest first): a few stats from the hint instead of reading the whole
        # directory's listing, whose cost grows with the versions kept and is paid by every cold open.
        if store.exists(manifest_path(hint)):
            version = hint
            while store.exists(manifest_path(version + 1)):
                version += 1
            return version
    elif hint is not None:
        after = versions_from(store, hint, 1 << 62)
        if after:
            return after[-1]
        # Nothing from the hint on: an old hint of a table dropped and created again at the URI, or
        # no table: the whole listing decides.
    versions = list_versions(store)
    return versions[-1] if versions else None
