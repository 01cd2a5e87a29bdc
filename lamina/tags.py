"""Tags: names for versions that cleanup keeps, readable after their versions expired (docs/FORMAT.md §9.2).

    create_tag ──► _tags/<name>.json, put-if-absent: {format, table_uuid, version, created_ms, manifest}
                   (``manifest``: a copy of the version's root), then one HEAD: the version's root is still there
    cleanup    ──► removes expired roots from _versions/ (tagged ones too), lists the kept versions, then the
                   tags, and keeps every file a kept version or a tag's root references
    checkout / open_table / restore with a tag name, or with the number of a tagged version whose root
               cleanup removed ──► the tag's root

Why a tag carries its version's root instead of keeping ``_versions/N``: the versions under ``_versions/``
are contiguous from the oldest kept to the latest, and writers and readers rely on it (a writer holding a
version whose successor is missing takes it for the head, ``lamina.commit.catch_up``; a reader walks
forward from the latest-version hint). An old root kept with a gap after it would break both; a copy in
the tag breaks nothing, and the tag alone tells cleanup which files to keep.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import re
from dataclasses import dataclass, field
from typing import Any

from lamina.errors import CorruptFile, InvalidArgument, ObjectNotFound, TableReplaced, TagExists, TagNotFound, VersionNotFound
from lamina.io_pool import map_fragments
from lamina.manifest import (
    TAGS_DIR,
    Manifest,
    belongs_to,
    decode_manifest,
    latest_version,
    load_manifest,
    manifest_path,
    now_ms,
)
from lamina.manifest.versions import SegmentReader
from lamina.store import ObjectStore

log = logging.getLogger("lamina.tags")

TAG_FORMAT = "lamina.tag"
TAG_SUFFIX = ".json"
#: 1 to 128 of ``[A-Za-z0-9_.-]``, not starting with ``.`` (no hidden names, no ``.``/``..``, no temp files).
_NAME = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}")


def check_name(name: Any) -> str:
    """``name`` if it can name a tag, else ``InvalidArgument`` saying what a name may be."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidArgument(
            f"tag name {name!r} is not valid: 1 to 128 characters of letters, digits, '_', '.' and '-', not starting with '.'"
        )
    return name


def tag_path(name: str) -> str:
    return f"{TAGS_DIR}{check_name(name)}{TAG_SUFFIX}"


@dataclass(frozen=True)
class Tag:
    """One tag as stored: the version it names, of which table, since when, and that version's root."""

    name: str
    version: int
    table_uuid: str
    created_ms: int
    #: The version's manifest root (docs/FORMAT.md §2), as a JSON object.
    root: dict[str, Any] = field(repr=False, compare=False)

    @property
    def created(self) -> dt.datetime:
        return dt.datetime.fromtimestamp(self.created_ms / 1000, dt.timezone.utc)

    def manifest(self, store: ObjectStore) -> Manifest:
        """The tagged version, read from the tag's copy of its root (its segments from the store)."""
        where = f"tag {self.name!r} ({store.describe(tag_path(self.name))})"
        m = decode_manifest(json.dumps(self.root).encode(), where, SegmentReader(store))
        if m.version != self.version or m.table_uuid != self.table_uuid or m.dropped:
            raise CorruptFile(
                f"{where} names version {self.version} of table {self.table_uuid or '(unnamed)'} but holds the root of "
                f"version {m.version} of table {m.table_uuid or '(unnamed)'}{' (a tombstone)' if m.dropped else ''}: "
                f"delete it with Table.delete_tag({self.name!r})"
            )
        return m

    def to_bytes(self) -> bytes:
        body = {
            "format": TAG_FORMAT,
            "table_uuid": self.table_uuid,
            "version": self.version,
            "created_ms": self.created_ms,
            "manifest": self.root,
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def _decode(data: bytes, name: str, where: str) -> Tag:
    try:
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != TAG_FORMAT:
            raise ValueError("not a Lamina tag")
        version, created, table_uuid, root = body["version"], body["created_ms"], body["table_uuid"], body["manifest"]
        if type(version) is not int or version < 1 or type(created) is not int or not isinstance(table_uuid, str):
            raise ValueError("a field has the wrong type")
        if not isinstance(root, dict):
            raise ValueError("manifest is not an object")
    except (ValueError, KeyError, UnicodeDecodeError, RecursionError) as e:
        raise CorruptFile(
            f"tag {where} is corrupt ({type(e).__name__}: {str(e)[:200]}): delete it with Table.delete_tag({name!r})"
        ) from None
    return Tag(name, version, table_uuid, created, root)


def _other_table(store: ObjectStore, tag: Tag, table_uuid: str) -> str:
    return (
        f"tag {tag.name!r} at {store.uri} belongs to table {tag.table_uuid or '(unnamed)'}, not to this one "
        f"({table_uuid or '(unnamed)'}): a table dropped at this URI before this one was created left it"
    )


def read_tag(store: ObjectStore, name: str, table_uuid: str | None) -> Tag:
    """Tag ``name`` of table ``table_uuid`` (None: of whichever table); ``TagNotFound`` if there is none."""
    path = tag_path(name)
    try:
        data = store.get(path)
    except ObjectNotFound:
        known = ", ".join(repr(t.name) for t in list_tags(store, table_uuid)) if table_uuid is not None else ""
        raise TagNotFound(f"table {store.uri} has no tag {name!r} (tags: {known or 'none'})") from None
    tag = _decode(data, name, store.describe(path))
    if table_uuid is not None and tag.table_uuid != table_uuid:
        raise TagNotFound(f"{_other_table(store, tag, table_uuid)}; delete it with Table.delete_tag({name!r})")
    return tag


def list_tags(store: ObjectStore, table_uuid: str) -> list[Tag]:
    """The tags of table ``table_uuid``, by name (read in parallel); those of a table dropped at this URI
    before it are left out. A corrupt tag is ``CorruptFile``."""
    names = []
    for obj in store.list(TAGS_DIR):
        name = obj.path[len(TAGS_DIR) :]
        if name.endswith(TAG_SUFFIX) and _NAME.fullmatch(name[: -len(TAG_SUFFIX)]):
            names.append(name[: -len(TAG_SUFFIX)])

    def read(name: str) -> Tag | None:
        try:
            return _decode(store.get(tag_path(name)), name, store.describe(tag_path(name)))
        except ObjectNotFound:  # deleted since the listing
            return None

    out = []
    for tag in map_fragments(read, names):
        if tag is None:
            continue
        if tag.table_uuid != table_uuid:
            log.warning("%s; it is ignored", _other_table(store, tag, table_uuid))
            continue
        out.append(tag)
    return sorted(out, key=lambda t: t.name)


def load_version(store: ObjectStore, version: int | str, table_uuid: str) -> tuple[Manifest, str, str | None]:
    """Version ``version`` of table ``table_uuid``: a number, or a tag's name. Returns its manifest, the
    object it was read from (its root under ``_versions/``, or the tag), and the tag's name (or None).

    A number whose root cleanup removed is still found through a tag on it; otherwise ``VersionNotFound``
    (``TagNotFound`` for a name)."""
    if isinstance(version, str):
        tag = read_tag(store, version, table_uuid)
        return tag.manifest(store), tag_path(tag.name), tag.name
    number = int(version)
    try:
        return load_manifest(store, number, table_uuid), manifest_path(number), None
    except VersionNotFound as e:
        on_it = next((t for t in list_tags(store, table_uuid) if t.version == number), None)
        if on_it is None:
            raise VersionNotFound(f"{e}; tagged versions stay readable by their tag (Table.tags())") from None
        return on_it.manifest(store), tag_path(on_it.name), on_it.name


def create_tag(store: ObjectStore, name: str, version: int, table_uuid: str) -> Tag:
    """Tags version ``version`` of table ``table_uuid`` as ``name``; ``TagExists`` if the name is taken
    (tags never move), ``VersionNotFound`` if the version is not there.

    Safe against a cleanup running meanwhile: the tag copies the version's root read from ``_versions/``
    (or from another tag on it, once cleanup removed that root), and after the tag is written the source
    must still be there; if it is gone, a cleanup may have listed the tags before this one was written and
    be removing the version's files, so the tag is removed again and ``VersionNotFound`` raised."""
    check_name(name)
    data, source = _root_of(store, version, table_uuid)
    m = decode_manifest(data, store.describe(source), SegmentReader(store))
    if m.version != version or m.table_uuid != table_uuid or m.dropped:
        raise VersionNotFound(
            f"table {store.uri} has no version {version} of table {table_uuid or '(unnamed)'} to tag"
            f"{' (it is the tombstone of a drop)' if m.dropped else ''}"
        )
    tag = Tag(name, version, table_uuid, now_ms(), json.loads(data))
    if not store.put_if_absent(tag_path(name), tag.to_bytes()):
        try:
            existing = read_tag(store, name, None)
        except TagNotFound:  # deleted meanwhile
            raise TagExists(f"table {store.uri} had a tag {name!r} when this one was written; try again") from None
        if existing.table_uuid != table_uuid:
            raise TagExists(f"{_other_table(store, existing, table_uuid)}; delete it with Table.delete_tag({name!r}) first")
        raise TagExists(
            f"table {store.uri} already has a tag {name!r}, on version {existing.version} (created "
            f"{existing.created:%Y-%m-%d %H:%M:%S} UTC): tags never move; delete it with Table.delete_tag({name!r}) "
            f"first, or choose another name"
        )
    if not store.exists(source):
        store.delete([tag_path(name)])
        raise VersionNotFound(
            f"version {version} of table {store.uri} was removed by a cleanup running while tag {name!r} was created, "
            f"and its files may be going: the tag was not created. Tag a version cleanup keeps (a newer one)"
        )
    return tag


def _root_of(store: ObjectStore, version: int, table_uuid: str) -> tuple[bytes, str]:
    """The stored root of ``version`` and the object holding it: ``_versions/``, else a tag on it."""
    path = manifest_path(version)
    try:
        return store.get(path), path
    except ObjectNotFound:
        tag = next((t for t in list_tags(store, table_uuid) if t.version == version), None)
        if tag is None:
            raise VersionNotFound(
                f"table {store.uri} has no version {version} (never committed, or removed by cleanup) and no tag on it"
            ) from None
        return json.dumps(tag.root).encode(), tag_path(tag.name)


def delete_tag(store: ObjectStore, name: str, table_uuid: str) -> Tag:
    """Removes tag ``name`` (its version's files go at the next cleanup, unless a version or another tag
    keeps them); returns it. ``TagNotFound`` if there is none. A tag of a table dropped at this URI before
    table ``table_uuid`` was created is removed too, but only while ``table_uuid`` is the table there."""
    tag = read_tag(store, name, None)
    if tag.table_uuid != table_uuid:
        latest = latest_version(store)
        if latest is None or not belongs_to(store, latest, table_uuid):
            raise TableReplaced(
                f"tag {name!r} at {store.uri} belongs to table {tag.table_uuid or '(unnamed)'}, and this view's table "
                f"({table_uuid or '(unnamed)'}) is no longer the one there: open the table again with open_table"
            )
    store.delete([tag_path(name)])
    return tag
