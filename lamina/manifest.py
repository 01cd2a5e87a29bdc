"""The manifest: one immutable JSON object per table version.

``_versions/{version:020d}.manifest`` lists the schema, the fragments (data
file + optional deletion file), indices, WAL watermarks and the transaction
that produced the version (typed by ``lamina.records``: ``Manifest.record``). It
carries a sha256 of its own canonical body so a truncated or altered manifest is
refused instead of half-read. Field by field in docs/FORMAT.md.
"""

from __future__ import annotations

import base64
import dataclasses
import functools
import hashlib
import json
import logging
import re
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lamina.cache import MiB, cache
from lamina.errors import CorruptFile, LaminaError, ObjectNotFound, TableReplaced, VersionNotFound
from lamina.records import TransactionRecord, decode_record
from lamina.store import ObjectStore, check_relative

log = logging.getLogger("lamina.manifest")

FORMAT = "lamina.manifest"
FORMAT_VERSION = 1
VERSIONS_DIR = "_versions/"
DATA_DIR = "data/"
DELETIONS_DIR = "_deletions/"
INDICES_DIR = "_indices/"
WAL_DIR = "_wal/"
TRANSACTIONS_DIR = "_transactions/"
MANIFEST_SUFFIX = ".manifest"
#: Files are checksummed with CRC32C (docs/FORMAT.md, "Checksums").
CHECKSUM_PREFIX = "crc32c:"

#: Row address of a row: ``(fragment_id << 32) | offset``.
ADDRESS_SHIFT = 32


def manifest_path(version: int) -> str:
    return f"{VERSIONS_DIR}{version:020d}{MANIFEST_SUFFIX}"


@dataclass(frozen=True)
class RowGroup:
    rows: int
    bytes: int


@dataclass(frozen=True)
class DeletionFile:
    """Roaring bitmap of deleted row offsets of one fragment."""

    path: str
    deleted_rows: int
    #: ``crc32c:<hex>`` of the file's bytes (None in manifests written before checksums).
    checksum: str | None = None


@dataclass(frozen=True)
class Fragment:
    """One data file and what is deleted from it. ``id`` is -1 until a commit assigns it."""

    id: int
    path: str
    rows: int  # physical rows in the data file
    file_bytes: int
    row_groups: tuple[RowGroup, ...]
    file_version: str
    deletion: DeletionFile | None = None
    #: Stable row ids of the physical rows, as ``[start, end)`` ranges in offset order.
    row_ids: tuple[tuple[int, int], ...] | None = None
    #: ``crc32c:<hex>`` of the data file's bytes, computed while writing (None in older manifests).
    checksum: str | None = None
    #: The schema the data file was written with; known only for fragments not yet committed,
    #: so a commit can refuse a fragment whose schema is not the table's. Never stored.
    schema: pa.Schema | None = field(default=None, compare=False, repr=False)
    #: When writing its data file began (seconds since the epoch); known only before commit, so
    #: a commit can tell a long write whose files cleanup may have removed. Never stored.
    written_at: float | None = field(default=None, compare=False, repr=False)

    @property
    def deleted_rows(self) -> int:
        return self.deletion.deleted_rows if self.deletion else 0

    @property
    def live_rows(self) -> int:
        return self.rows - self.deleted_rows


@dataclass(frozen=True)
class IndexSegment:
    """One immutable index file and the fragments it indexes.

    Inside the file rows are named ``(ordinal << 32) | offset``; ``fragment_ids[ordinal]``
    is the fragment (``-1``: a fragment that was never committed). A fragment id that is
    no longer in the manifest simply stops being covered (ids are never reused).
    """

    uuid: str
    path: str
    bytes: int
    rows: int
    fragment_ids: tuple[int, ...]
    #: ``crc32c:<hex>`` of the segment file (None in older manifests).
    checksum: str | None = None


@dataclass(frozen=True)
class IndexEntry:
    """A secondary index: segments under ``_indices/<segment uuid>/`` (docs/FORMAT.md §10)."""

    name: str
    column: str
    kind: str
    uuid: str
    segments: tuple[IndexSegment, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    @property
    def files(self) -> tuple[str, ...]:
        return tuple(s.path for s in self.segments)

    def coverage(self, live: "set[int] | dict[int, Any]") -> dict[int, int]:
        """Live fragment id → position of the segment that serves it (the newest one covering it)."""
        out: dict[int, int] = {}
        for si in range(len(self.segments) - 1, -1, -1):
            for fid in self.segments[si].fragment_ids:
                if fid >= 0 and fid in live and fid not in out:
                    out[fid] = si
        return out

    def prune(self, live: "set[int] | dict[int, Any]") -> "IndexEntry":
        """This entry without the segments that serve no live fragment."""
        used = set(self.coverage(live).values())
        if len(used) == len(self.segments):
            return self
        return dataclasses.replace(self, segments=tuple(s for i, s in enumerate(self.segments) if i in used))


@dataclass(frozen=True)
class Manifest:
    version: int
    timestamp_ms: int
    schema: pa.Schema
    fragments: tuple[Fragment, ...]
    next_fragment_id: int
    next_row_id: int
    primary_key: tuple[str, ...] = ()
    stable_row_ids: bool = False
    config: dict[str, Any] = field(default_factory=dict)
    indices: tuple[IndexEntry, ...] = ()
    wal_watermarks: dict[str, int] = field(default_factory=dict)
    #: Record of the transaction that produced this version, as stored (docs/FORMAT.md §6);
    #: ``record`` is the typed form.
    transaction: dict[str, Any] = field(default_factory=dict)
    #: Identifies this incarnation of the table: set at create time, carried by every version.
    #: A table dropped and created again at the same URI has another one ("" before it existed).
    table_uuid: str = ""

    @property
    def rows(self) -> int:
        return sum(f.live_rows for f in self.fragments)

    @functools.cached_property
    def record(self) -> TransactionRecord:
        """The transaction that produced this version, typed (``lamina.records``); decoded on first
        use, ``CorruptFile`` naming the version if it is malformed."""
        return decode_record(self.transaction, f"version {self.version}")

    def fragment(self, fragment_id: int) -> Fragment | None:
        for f in self.fragments:
            if f.id == fragment_id:
                return f
        return None

    def fragment_map(self) -> dict[int, Fragment]:
        return {f.id: f for f in self.fragments}

    def referenced_paths(self) -> set[str]:
        """Every object this version needs (data, deletion and index files)."""
        paths: set[str] = set()
        for f in self.fragments:
            paths.add(f.path)
            if f.deletion:
                paths.add(f.deletion.path)
        for ix in self.indices:
            paths.update(ix.files)
        if self.record.sidecar:
            paths.add(self.record.sidecar)
        return paths

    def replace(self, **changes: Any) -> "Manifest":
        return dataclasses.replace(self, **changes)


# -- encoding ----------------------------------------------------------------
def _schema_to_json(schema: pa.Schema) -> dict[str, Any]:
    return {
        "ipc": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        "fields": [f"{f.name}: {f.type}{'' if f.nullable else ' not null'}" for f in schema],
    }


def _fragment_to_json(f: Fragment) -> dict[str, Any]:
    return {
        "id": f.id,
        "path": f.path,
        "rows": f.rows,
        "file_bytes": f.file_bytes,
        "file_version": f.file_version,
        "row_groups": [[g.rows, g.bytes] for g in f.row_groups],
        "deletion": None if f.deletion is None else {"path": f.deletion.path, "deleted_rows": f.deletion.deleted_rows,
                                                     "checksum": f.deletion.checksum},
        "row_ids": None if f.row_ids is None else [list(r) for r in f.row_ids],
        "checksum": f.checksum,
    }


def _body(m: Manifest) -> dict[str, Any]:
    return {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "version": m.version,
        "table_uuid": m.table_uuid,
        "timestamp_ms": m.timestamp_ms,
        "schema": _schema_to_json(m.schema),
        "primary_key": list(m.primary_key),
        "stable_row_ids": m.stable_row_ids,
        "config": m.config,
        "next_fragment_id": m.next_fragment_id,
        "next_row_id": m.next_row_id,
        "fragments": [_fragment_to_json(f) for f in m.fragments],
        "indices": [
            {"name": i.name, "column": i.column, "kind": i.kind, "uuid": i.uuid, "details": i.details,
             "segments": [{"uuid": s.uuid, "path": s.path, "bytes": s.bytes, "rows": s.rows,
                           "fragment_ids": list(s.fragment_ids), "checksum": s.checksum} for s in i.segments]}
            for i in m.indices
        ],
        "wal_watermarks": m.wal_watermarks,
        "transaction": m.transaction,
    }


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def encode_manifest(m: Manifest) -> bytes:
    body = _body(m)
    body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    return json.dumps(body, sort_keys=True, indent=1).encode()


def decode_manifest(data: bytes, where: str) -> Manifest:
    """Parses and validates a manifest; ``where`` names it in errors."""
    def corrupt(reason: str) -> CorruptFile:
        return CorruptFile(f"manifest {where} is corrupt: {reason}. Open an earlier version with open_table(uri, version=N), or restore this object")

    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: hostile nesting
        raise corrupt(f"not valid JSON, probably truncated ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise corrupt("not a Lamina manifest")
    if body.get("format_version") != FORMAT_VERSION:
        raise LaminaError(f"manifest {where} has format version {body.get('format_version')}; this Lamina reads {FORMAT_VERSION}: upgrade Lamina")
    checksum = body.pop("checksum", None)
    if checksum != "sha256:" + hashlib.sha256(_canonical(body)).hexdigest():
        raise corrupt("checksum mismatch")
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(body["schema"]["ipc"])))
        fragments = tuple(_fragment_from_json(f, where) for f in body["fragments"])
        indices = tuple(_index_from_json(i, where) for i in body["indices"])
        m = Manifest(
            version=int(body["version"]),
            timestamp_ms=int(body["timestamp_ms"]),
            schema=schema,
            fragments=fragments,
            next_fragment_id=int(body["next_fragment_id"]),
            next_row_id=int(body["next_row_id"]),
            primary_key=tuple(body["primary_key"]),
            stable_row_ids=bool(body["stable_row_ids"]),
            config=dict(body["config"]),
            indices=indices,
            wal_watermarks={str(k): int(v) for k, v in body["wal_watermarks"].items()},
            transaction=dict(body["transaction"]),
            table_uuid=str(body.get("table_uuid", "")),
        )
    except CorruptFile:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, OSError, pa.ArrowException) as e:
        # AttributeError: a list where an object belongs; OverflowError: Infinity where an int
        # belongs; OSError: pyarrow's error for an undecodable schema message.
        raise corrupt(f"missing or malformed field ({type(e).__name__}: {str(e)[:200]})") from None
    ids = [f.id for f in m.fragments]
    if len(set(ids)) != len(ids) or any(i < 0 or i >= m.next_fragment_id for i in ids):
        raise corrupt("fragment ids are duplicated or out of range")
    if any(e > m.next_row_id for f in m.fragments if f.row_ids for _, e in f.row_ids):
        raise corrupt(f"stable row ids reach beyond next_row_id {m.next_row_id}")
    return m


#: Every path Lamina records is made of these (hex uuids, ids, fixed names): anything else (percent
#: escapes, control characters, spaces, backslashes) is refused before the object is read.
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/-]+")


def _stored_path(value: Any, what: str) -> str:
    """A path read from a manifest: relative, inside the table root, in the characters Lamina writes."""
    path = check_relative(value, what=what)
    if not _PATH_CHARS.fullmatch(path):
        raise CorruptFile(f"{what}: path {path!r} has characters Lamina never writes; the manifest is corrupt or was not written by Lamina")
    return path


def _fragment_from_json(f: dict[str, Any], where: str) -> Fragment:
    what = f"manifest {where} fragment {f.get('id')}"
    path = _stored_path(f["path"], what)
    if not path.startswith(DATA_DIR):
        raise CorruptFile(f"{what}: data file {path!r} is not under {DATA_DIR}")
    deletion = None
    if f["deletion"] is not None:
        dpath = _stored_path(f["deletion"]["path"], what)
        if not dpath.startswith(DELETIONS_DIR):
            raise CorruptFile(f"{what}: deletion file {dpath!r} is not under {DELETIONS_DIR}")
        deletion = DeletionFile(dpath, int(f["deletion"]["deleted_rows"]), _checksum(f["deletion"].get("checksum"), what))
    frag = Fragment(
        id=int(f["id"]),
        path=path,
        rows=int(f["rows"]),
        file_bytes=int(f["file_bytes"]),
        row_groups=tuple(RowGroup(int(r), int(b)) for r, b in f["row_groups"]),
        file_version=str(f["file_version"]),
        deletion=deletion,
        row_ids=None if f["row_ids"] is None else tuple((int(s), int(e)) for s, e in f["row_ids"]),
        checksum=_checksum(f.get("checksum"), what),
    )
    if not 0 <= frag.deleted_rows <= frag.rows or sum(g.rows for g in frag.row_groups) != frag.rows:
        raise CorruptFile(f"{what}: row counts are inconsistent (rows={frag.rows}, deleted={frag.deleted_rows})")
    if frag.row_ids is not None and (
        any(not 0 <= s <= e for s, e in frag.row_ids) or sum(e - s for s, e in frag.row_ids) != frag.rows
    ):
        raise CorruptFile(f"{what}: stable row ids {list(frag.row_ids)[:4]}... do not cover its {frag.rows} rows")
    return frag


def _checksum(value: Any, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or not value.startswith(CHECKSUM_PREFIX) or len(value) != len(CHECKSUM_PREFIX) + 8:
        raise CorruptFile(f"{what}: malformed checksum {value!r}")
    return value


def _index_from_json(i: dict[str, Any], where: str) -> IndexEntry:
    what = f"manifest {where} index {i.get('name')!r}"
    segments = []
    for s in i["segments"]:
        path = _stored_path(s["path"], what)
        if not path.startswith(INDICES_DIR):
            raise CorruptFile(f"{what}: segment {path!r} is not under {INDICES_DIR}")
        segments.append(IndexSegment(str(s["uuid"]), path, int(s["bytes"]), int(s["rows"]),
                                     tuple(int(f) for f in s["fragment_ids"]), _checksum(s.get("checksum"), what)))
    return IndexEntry(str(i["name"]), str(i["column"]), str(i["kind"]), str(i["uuid"]), tuple(segments), dict(i["details"]))


# -- reading -----------------------------------------------------------------
#: Manifests are immutable once written, so caching by (table, incarnation, version) is safe. The
#: table uuid is part of the key: a table created again at the same URI has another uuid, so its
#: versions never meet the old table's cached ones.
_CACHE = cache("manifest", "LAMINA_MANIFEST_CACHE_BYTES", 64 * MiB)


def _held_bytes(m: Manifest, encoded: int | None = None) -> int:
    """What a decoded manifest holds, about: its JSON size when known, else from its entries."""
    if encoded is not None:
        return 2 * encoded
    return 1024 + 400 * len(m.fragments) + 200 * sum(len(ix.segments) for ix in m.indices)


def forget_manifest(store: ObjectStore, version: int) -> None:
    """Drops a removed version from this process's cache."""
    _CACHE.discard(lambda key: key[0] == store.uri and key[2] == version)


def remember_manifest(store: ObjectStore, m: Manifest) -> None:
    """Caches a manifest this process just wrote."""
    _CACHE.put((store.uri, m.table_uuid, m.version), m, _held_bytes(m))


def load_manifest(store: ObjectStore, version: int, table_uuid: str | None = None) -> Manifest:
    """The manifest of ``version``; ``VersionNotFound`` if there is none.

    ``table_uuid`` is the incarnation the caller holds: the manifest may then come from the
    cache, and one of another incarnation raises ``TableReplaced``. Without it (opening a
    table, finding its latest version) the manifest is always read from storage.
    """
    if table_uuid is not None:
        cached = _CACHE.get((store.uri, table_uuid, version))
        if cached is not None:
            return cached
    path = manifest_path(version)
    try:
        data = store.get(path)
    except ObjectNotFound:
        raise VersionNotFound(f"table {store.uri} has no version {version} (never committed, or removed by cleanup)") from None
    m = decode_manifest(data, store.describe(path))
    if m.version != version:
        raise CorruptFile(f"manifest {store.describe(path)} says it is version {m.version}")
    _CACHE.put((store.uri, m.table_uuid, m.version), m, _held_bytes(m, len(data)))
    if table_uuid is not None and m.table_uuid != table_uuid:
        raise TableReplaced(
            f"table {store.uri} was dropped and created again: version {version} belongs to table {m.table_uuid or '(unnamed)'}, "
            f"not to table {table_uuid or '(unnamed)'} read before. Nothing was changed; open the table again with open_table"
        )
    return m


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


def list_versions(store: ObjectStore) -> list[int]:
    versions = []
    for obj in store.list(VERSIONS_DIR):
        name = obj.path[len(VERSIONS_DIR):]
        if name.endswith(MANIFEST_SUFFIX) and name[: -len(MANIFEST_SUFFIX)].isdigit():
            versions.append(int(name[: -len(MANIFEST_SUFFIX)]))
    return sorted(versions)


def versions_from(store: ObjectStore, version: int, limit: int) -> list[int]:
    """Up to ``limit`` versions from ``version`` on still on storage, ascending (one short listing)."""
    found: list[int] = []
    for obj in store.list(VERSIONS_DIR, start_after=manifest_path(version - 1)):
        name = obj.path[len(VERSIONS_DIR):]
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
        log.warning("could not refresh the latest-version hint of %s (%s): readers list more versions until the next one", store.uri, e)


def _hinted_version(store: ObjectStore) -> int | None:
    try:
        text = store.get(LATEST_HINT).decode("ascii", "replace").strip()
    except ObjectNotFound:
        return None
    return int(text) if text.isdigit() and 0 < len(text) <= 19 else None


def latest_version(store: ObjectStore) -> int | None:
    """The newest version on storage, or None. Lists from the latest-version hint when there is one
    (a few versions, whatever the length of the history), else every version."""
    hint = _hinted_version(store)
    if hint is not None:
        after = versions_from(store, hint, 1 << 62)
        if after:
            return after[-1]
        # Nothing from the hint on: an old hint of a table dropped and created again at the URI, or
        # no table: the whole listing decides.
    versions = list_versions(store)
    return versions[-1] if versions else None


def now_ms() -> int:
    return int(time.time() * 1000)

