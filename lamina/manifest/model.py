"""What a version is made of, as values: its fragments (data file, deletion file, row ids, zone
maps), its index entries, and the ``Manifest`` holding them with the schema and the transaction
that produced it. Decoded by ``lamina.manifest.codec``, laid out by ``lamina.manifest.layout``."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from lamina.manifest.segments import FragmentList, ManifestSegment, find_fragments
from lamina.records import TransactionRecord, decode_record
from lamina.zones import LazyZones

#: Row address of a row: ``(fragment_id << 32) | offset``.
ADDRESS_SHIFT = 32


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
class ClusterRange:
    """Where a clustering rewrite put a fragment (docs/FORMAT.md §2): the clustering it followed
    (``key``, ``lamina.clustering.Clustering.key``), the sorted run it is part of (the fragments one
    rewrite wrote, their ranges disjoint), and the curve positions of its first and last rows."""

    key: str
    run: str
    lo: int
    hi: int


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
    #: Zone maps of its top-level primitive columns (None: not known, e.g. older manifests).
    #: Read from a manifest, decoded on first use (``ZoneText``).
    #: A descriptor: read as ``tuple[Zone, ...] | None``, set (by __init__) to that or a ``ZoneText``.
    zones: LazyZones = LazyZones()
    #: Set by a clustering rewrite: the fragment's sorted run and curve range (None: not clustered).
    cluster: ClusterRange | None = None
    #: Which of the table's schemas its data file was written in (``Manifest.schema_id`` /
    #: ``Manifest.schemas``; 0 in a table whose schema never changed). Set by the commit.
    schema_id: int = 0
    #: The schema the data file was written in (its columns' physical names, types and field ids;
    #: ``lamina.evolution`` maps them to today's). Set by the writer, and from ``schema_id`` when a
    #: manifest is read; stored as ``schema_id`` only.
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

    def coverage(self, live: set[int] | dict[int, Any]) -> dict[int, int]:
        """Live fragment id → position of the segment that serves it (the newest one covering it)."""
        out: dict[int, int] = {}
        for si in range(len(self.segments) - 1, -1, -1):
            for fid in self.segments[si].fragment_ids:
                if fid >= 0 and fid in live and fid not in out:
                    out[fid] = si
        return out

    def prune(self, live: set[int] | dict[int, Any]) -> IndexEntry:
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
    #: In table order: a tuple, or as read from storage a ``FragmentList`` reading its segments on first use.
    fragments: tuple[Fragment, ...] | FragmentList
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
    #: A tombstone: the table was dropped at this version (no fragments, no indices); every later commit
    #: stops here (``TableDropped``) and readers treat the table as gone (docs/FORMAT.md §2).
    dropped: bool = False
    #: Which schema ``schema`` is (fragments name theirs by id: ``Fragment.schema_id``).
    schema_id: int = 0
    #: The table's earlier schemas that fragments still hold data files in, by id (docs/FORMAT.md §2.1).
    schemas: dict[int, pa.Schema] = field(default_factory=dict)
    #: The id the next field added gets (None: ids never stored: ``lamina.evolution.with_ids``).
    next_field_id: int | None = None
    #: The manifest segments on storage holding ``fragments`` (all but the inline tail) once laid out
    #: (``lay_out``), with their fragments; after a transaction's ``apply`` they are still its base's,
    #: which ``lay_out`` reuses wherever their fragments did not change.
    segments: tuple[ManifestSegment, ...] = field(default=(), compare=False, repr=False)
    #: The segment lists naming ``segments`` (all but the newest few, which the root names itself).
    segment_lists: tuple[ManifestSegment, ...] = field(default=(), compare=False, repr=False)

    @functools.cached_property
    def rows(self) -> int:
        """Live rows (from the segment entries while the segments are not read)."""
        f = self.fragments
        return f.live_rows if isinstance(f, FragmentList) else sum(x.live_rows for x in f)

    @functools.cached_property
    def record(self) -> TransactionRecord:
        """The transaction that produced this version, typed (``lamina.records``); decoded on first
        use, ``CorruptFile`` naming the version if it is malformed."""
        return decode_record(self.transaction, f"version {self.version}")

    def schema_registry(self) -> dict[int, pa.Schema]:
        """Every schema a fragment of this version may be written in, by id (today's included)."""
        return {**self.schemas, self.schema_id: self.schema}

    def fragment(self, fragment_id: int) -> Fragment | None:
        return find_fragments(self.fragments, (fragment_id,)).get(fragment_id)

    def fragment_map(self) -> dict[int, Fragment]:
        return {f.id: f for f in self.fragments}

    def referenced_paths(self) -> set[str]:
        """Every object this version needs (manifest segments, data, deletion and index files)."""
        paths: set[str] = {seg.path for seg in self.segments} | {lst.path for lst in self.segment_lists}
        for f in self.fragments:
            paths.add(f.path)
            if f.deletion:
                paths.add(f.deletion.path)
        for ix in self.indices:
            paths.update(ix.files)
        paths.update(self.record.files)
        return paths

    def replace(self, **changes: Any) -> Manifest:
        return dataclasses.replace(self, **changes)


def now_ms() -> int:
    return int(time.time() * 1000)
