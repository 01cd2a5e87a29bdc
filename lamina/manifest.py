"""The manifest: one small immutable root object per table version, plus shared segments.

``_versions/{version:020d}.manifest`` (the root) holds the schema, indices, WAL
watermarks, the transaction that produced the version (typed by ``lamina.records``:
``Manifest.record``), the newest few fragments inline, and the list of *manifest
segments* holding the others: immutable objects under ``_segments/`` of up to
``SEGMENT_FRAGMENTS`` fragments each, shared by every version that did not change
them. A commit writes only the segments it changes, then the root (``lay_out``), so
the bytes written per commit do not grow with the table. The root carries a sha256
of its own canonical body and each segment's CRC32C, so a truncated or altered
object is refused instead of half-read. Field by field in docs/FORMAT.md §2;
version-1 manifests (every fragment in the root) are still read.
"""

from __future__ import annotations

import base64
import bisect
import collections.abc
import contextlib
import dataclasses
import functools
import gc
import hashlib
import itertools
import json
import logging
import math
import os
import re
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, NamedTuple, Sequence

import pyarrow as pa

from lamina import checksum
from lamina.cache import MiB, cache
from lamina.errors import CorruptFile, LaminaError, ObjectNotFound, TableReplaced, VersionNotFound
from lamina.io_pool import map_fragments
from lamina.records import TransactionRecord, decode_record
from lamina.store import ObjectStore, check_relative

log = logging.getLogger("lamina.manifest")

FORMAT = "lamina.manifest"
FORMAT_VERSION = 2
#: Manifest format versions this Lamina reads (1: every fragment in the root; 2: segments).
READABLE_FORMAT_VERSIONS = (1, 2)
VERSIONS_DIR = "_versions/"
SEGMENTS_DIR = "_segments/"
DATA_DIR = "data/"
DELETIONS_DIR = "_deletions/"
INDICES_DIR = "_indices/"
WAL_DIR = "_wal/"
TRANSACTIONS_DIR = "_transactions/"
MANIFEST_SUFFIX = ".manifest"
#: Every directory of a table's layout (docs/FORMAT.md §1), in the order a purge empties them
#: (``lamina.drop``: versions last). Cleanup walks the same list (``lamina.cleanup``), so a directory
#: the format adds is either swept or purged, never forgotten by one of them.
TABLE_DIRS = (DATA_DIR, SEGMENTS_DIR, DELETIONS_DIR, INDICES_DIR, WAL_DIR, TRANSACTIONS_DIR, VERSIONS_DIR)
#: Files are checksummed with CRC32C (docs/FORMAT.md, "Checksums").
CHECKSUM_PREFIX = "crc32c:"

#: Row address of a row: ``(fragment_id << 32) | offset``.
ADDRESS_SHIFT = 32
SEGMENT_FORMAT = "lamina.manifest_segment"
SEGMENT_LIST_FORMAT = "lamina.manifest_segment_list"
#: The newest fragments stay in the root (up to this many after the last segment): a small append
#: rewrites only the root. A longer tail becomes a segment. ``LAMINA_MANIFEST_INLINE_FRAGMENTS``.
INLINE_FRAGMENTS = 64
#: A segment holds at most this many fragments, so a commit that changes one fragment rewrites at
#: most this many (and the root). ``LAMINA_MANIFEST_SEGMENT_FRAGMENTS``.
SEGMENT_FRAGMENTS = 1024
#: The same two bounds one level up: the root names the newest segments itself (up to this many)
#: and the older ones through segment lists of up to ``LIST_SEGMENTS`` entries, so a root stays
#: small however many segments a table has. ``LAMINA_MANIFEST_INLINE_SEGMENTS`` / ``_LIST_SEGMENTS``.
INLINE_SEGMENTS = 16
LIST_SEGMENTS = 256


def _layout_limits() -> tuple[tuple[int, int], tuple[int, int]]:
    """((inline fragments, fragments per segment), (inline segments, segments per list)), read at each
    commit so tests and tools can change them."""
    def pair(inline_env: str, inline: int, per_env: str, per: int) -> tuple[int, int]:
        got = int(os.environ.get(inline_env, inline)), int(os.environ.get(per_env, per))
        if got[0] < 0 or got[1] < 1:
            raise LaminaError(f"{inline_env} must be >= 0 and {per_env} >= 1 (got {got[0]} and {got[1]})")
        return got
    return (pair("LAMINA_MANIFEST_INLINE_FRAGMENTS", INLINE_FRAGMENTS, "LAMINA_MANIFEST_SEGMENT_FRAGMENTS", SEGMENT_FRAGMENTS),
            pair("LAMINA_MANIFEST_INLINE_SEGMENTS", INLINE_SEGMENTS, "LAMINA_MANIFEST_LIST_SEGMENTS", LIST_SEGMENTS))


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


class Zone(NamedTuple):
    """What a fragment's data file holds in one top-level column (its zone map), in the column's
    key domain (``lamina.prune``: timestamps in ns, strings as UTF-8 bytes). Bounds, not exact
    values: rows deleted later or merged by compaction only make them looser, never wrong.

    A named tuple, not a frozen dataclass: a manifest holds several per fragment, and named tuples
    are markedly cheaper to make when its segments are decoded."""

    column: str
    kind: str  # the key domain (``lamina.prune._kind`` of the column's type when it was written)
    lo: Any  # least non-null, non-NaN value; None: there is none
    hi: Any  # greatest such value (or an exclusive bound, below); None: unknown / none
    hi_inclusive: bool
    nulls: int  # an upper bound of the null rows: 0 means none
    nans: int  # an upper bound of the NaN rows: 0 means none


class ZoneText(NamedTuple):
    """A fragment's zone maps as stored (``zones_json``, docs/FORMAT.md §2): decoded the first time
    ``Fragment.zones`` is read, and written back as they are by a commit that never read them."""

    text: str
    manifest: str  # the manifest and fragment, for an error
    fragment: Any

    @property
    def where(self) -> str:
        return f"manifest {self.manifest} fragment {self.fragment}"

    def decode(self) -> "tuple[Zone, ...]":
        def what() -> str:
            return self.where
        try:
            raw = json.loads(self.text)
            if not isinstance(raw, list):
                raise TypeError("not a list")
            return _zones_from_json(raw, what)
        except CorruptFile:
            raise
        except (TypeError, ValueError, RecursionError) as e:
            raise CorruptFile(f"{self.where}: malformed zone maps ({type(e).__name__}: {str(e)[:120]})") from None


class _LazyZones:
    """``Fragment.zones``: a tuple of zones, None, or a ``ZoneText`` decoded on first read. Most
    reads never look at zone maps (a ``take``, an index lookup, a commit that keeps a fragment), and
    decoding them was over half of the cost of reading a manifest segment."""

    def __get__(self, obj: Any, owner: Any = None) -> "tuple[Zone, ...] | None":
        if obj is None:
            return None  # the field's default
        value = obj.__dict__["_zones"]
        if type(value) is ZoneText:
            value = value.decode()
            obj.__dict__["_zones"] = value
        return value

    def __set__(self, obj: Any, value: "tuple[Zone, ...] | ZoneText | None") -> None:
        obj.__dict__["_zones"] = value  # only a dataclass __init__ gets here: Fragment is frozen


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
    zones: tuple[Zone, ...] | None = _LazyZones()  # type: ignore[assignment]
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
class ManifestSegment:
    """An immutable object under ``_segments/``, shared by every version that did not change it: a
    *segment* of ``count`` fragments, or a *segment list* of ``count`` segment entries."""

    path: str
    count: int
    bytes: int
    checksum: str
    #: Live rows of the fragments it holds (a list: of every segment it names), so a version's row
    #: count needs no segment read.
    rows: int = 0
    #: Least and greatest fragment id a segment holds, so a commit that edits a few fragments reads
    #: only the segments that can hold them; None in older entries and in segment lists.
    ids: "tuple[int, int] | None" = field(default=None, compare=False)
    #: Zone maps bounding every fragment a segment holds (merged), so a filter can rule out a whole
    #: segment without reading it; None when a fragment it holds has none (or in older entries and lists).
    zones: "tuple[Zone, ...] | None" = field(default=None, compare=False, repr=False)
    #: What it holds (fragments, or for a list its segments' entries), or an ``_Unread`` that reads
    #: them on first use (``items``); not part of its entry (equal entries name the same object).
    held: Any = field(default=(), compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        # Entries name immutable objects by random, never reused paths: the same path (and
        # checksum) is the same entry. Cheaper than comparing every field, as laying out compares
        # runs of entries element by element.
        return self is other or (isinstance(other, ManifestSegment) and self.path == other.path
                                 and self.checksum == other.checksum and self.count == other.count)

    def __hash__(self) -> int:
        return hash(self.path)

    def holds_any(self, wanted: "Sequence[int]") -> bool:
        """Whether it may hold a fragment whose id is in ``wanted`` (sorted)."""
        if self.ids is None:
            return True
        at = bisect.bisect_left(wanted, self.ids[0])
        return at < len(wanted) and wanted[at] <= self.ids[1]

    @property
    def items(self) -> tuple[Any, ...]:
        if isinstance(self.held, _Unread):
            self.held.reader.read([self], self.held.table_uuid)
        return self.held

    @property
    def fragments(self) -> "tuple[Fragment, ...]":
        return self.items

    @property
    def read(self) -> bool:
        return not isinstance(self.held, _Unread)

    def _fill(self, items: tuple[Any, ...]) -> None:
        # The one mutation of this value: its items, read once from the immutable object it names.
        object.__setattr__(self, "held", items)

    def __getstate__(self) -> dict[str, Any]:  # pickled (e.g. to Ray tasks) with its items, never its reader
        return {**self.__dict__, "held": self.items}


class _Unread:
    """The items of a segment not read yet: the reader that reads them, and the table they belong to."""

    __slots__ = ("reader", "table_uuid")

    def __init__(self, reader: "_SegmentReader", table_uuid: str):
        self.reader, self.table_uuid = reader, table_uuid


#: A run of a ``FragmentList``: a segment's entry (its fragments, read when needed) or fragments held.
Part = "ManifestSegment | tuple[Fragment, ...]"


class FragmentList(collections.abc.Sequence):
    """A version's fragments as runs (*parts*): manifest segments, read only when needed, and
    fragments held (a version's inline tail, or what a commit changed). Its length and live rows
    come from the segment entries. Iterating streams: segments are read a window at a time (in
    parallel, through the segment cache) and their fragments yielded without the list keeping them,
    so a million-fragment version costs a window of segments plus the cache's bound, and the checks
    (ids unique and in range, row ids in range) run as they pass. A commit edits a version part by
    part (``appended``, ``edited``): a segment none of whose fragments changed stays a segment, so
    ``lay_out`` keeps it without reading it. Looking a fragment up by position, or using the list as
    a tuple (``+``, ``==``, ``in``, pickling), reads every segment not read yet, checks the whole and
    keeps it."""

    #: Segments read at once while streaming (fetched in parallel, then decoded one by one).
    WINDOW = 16

    def __init__(self, parts: "Sequence[Part]", where: str, next_fragment_id: int, next_row_id: int):
        merged: list[Any] = []
        for part in parts:  # adjacent held runs joined, empty ones dropped
            if isinstance(part, ManifestSegment):
                merged.append(part)
            elif part:
                if merged and not isinstance(merged[-1], ManifestSegment):
                    merged[-1] = merged[-1] + tuple(part)
                else:
                    merged.append(tuple(part))
        self._parts: "tuple[Part, ...]" = tuple(merged)
        self._where = where
        self._next_ids = (next_fragment_id, next_row_id)
        self._count = sum(p.count if isinstance(p, ManifestSegment) else len(p) for p in self._parts)
        self._all: "tuple[Fragment, ...] | None" = None
        self._lock = threading.Lock()

    @property
    def _inline(self) -> "tuple[Fragment, ...]":
        """The held run at the end (a version's inline tail once laid out), or ()."""
        return self._parts[-1] if self._parts and not isinstance(self._parts[-1], ManifestSegment) else ()

    def _get(self) -> "tuple[Fragment, ...]":
        if self._all is None:
            with self._lock:
                if self._all is None:
                    unread = [p for p in self._parts if isinstance(p, ManifestSegment) and not p.read]
                    if unread:
                        held = unread[0].held
                        held.reader.read(unread, held.table_uuid)
                    frags = tuple(itertools.chain.from_iterable(
                        p.items if isinstance(p, ManifestSegment) else p for p in self._parts))
                    _check_fragments(frags, self._where, *self._next_ids)
                    self._all = frags
        return self._all

    def runs(self, skip: "Callable[[ManifestSegment], bool] | None" = None
             ) -> "Iterator[tuple[Part, tuple[Fragment, ...] | None]]":
        """Each part with its fragments, in order, segments read a window at a time (not kept); a
        segment ``skip`` says is of no interest comes with None, unread."""
        check = _StreamCheck(self._where, *self._next_ids)
        parts = self._parts
        for start in range(0, len(parts), self.WINDOW):
            window = parts[start:start + self.WINDOW]
            wanted = [not (skip is not None and isinstance(p, ManifestSegment) and skip(p)) for p in window]
            unread = [p for p, w in zip(window, wanted) if w and isinstance(p, ManifestSegment) and not p.read]
            got = dict(zip((seg.path for seg in unread),
                           unread[0].held.reader.read(unread, unread[0].held.table_uuid, fill=False))) if unread else {}
            for part, w in zip(window, wanted):
                if not w:
                    yield part, None
                    continue
                if isinstance(part, ManifestSegment):
                    items = part.held if part.read else got[part.path]
                    check.within(items, part)
                else:
                    items = part
                check.add(items)
                yield part, items

    def _stream(self) -> Iterator[Fragment]:
        for _, items in self.runs():
            yield from items

    def extended(self, new: "Sequence[Fragment]", next_fragment_id: int, next_row_id: int) -> "FragmentList":
        """These fragments and ``new`` after them, without reading a segment (``lay_out`` then writes
        only what the tail outgrows)."""
        parts = self._parts
        if new:
            parts = parts[:-1] + (parts[-1] + tuple(new),) if self._inline else parts + (tuple(new),)
        out = FragmentList._of(parts, self._count + len(new), self._where, next_fragment_id, next_row_id)
        if self._all is not None:
            out._all = self._all + tuple(new)
        return out

    @classmethod
    def _of(cls, parts: "tuple[Part, ...]", count: int, where: str, next_fragment_id: int, next_row_id: int) -> "FragmentList":
        """A list of ``parts`` already joined (no two held runs adjacent, none empty) holding ``count``."""
        out = cls.__new__(cls)
        out._parts, out._count = parts, count
        out._where, out._next_ids = where, (next_fragment_id, next_row_id)
        out._all, out._lock = None, threading.Lock()
        return out

    @classmethod
    def _laid(cls, segments: "tuple[ManifestSegment, ...]", tail: "tuple[Fragment, ...]", where: str,
              next_fragment_id: int, next_row_id: int) -> "FragmentList":
        """A version's fragments as ``lay_out`` leaves them: its segments, then its inline tail."""
        return cls._of(segments + ((tail,) if tail else ()), sum(seg.count for seg in segments) + len(tail), where,
                       next_fragment_id, next_row_id)

    def _laid_on(self, segments: "tuple[ManifestSegment, ...]") -> bool:
        """Whether these are ``segments``' fragments (the very entries, in order) plus an inline tail."""
        parts = self._parts[:-1] if self._inline else self._parts
        return len(segments) == len(parts) and all(a is b for a, b in zip(segments, parts))

    @property
    def live_rows(self) -> int:
        if self._all is not None:
            return sum(f.live_rows for f in self._all)
        return sum(p.rows if isinstance(p, ManifestSegment) else sum(f.live_rows for f in p) for p in self._parts)

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i):  # type: ignore[override]
        return self._get()[i]

    def __iter__(self) -> Iterator[Fragment]:
        return iter(self._all) if self._all is not None else self._stream()

    def __contains__(self, f: object) -> bool:
        return f in self._get()

    def __add__(self, other: Any) -> "tuple[Fragment, ...]":
        return self._get() + tuple(other)

    def __radd__(self, other: Any) -> "tuple[Fragment, ...]":
        return tuple(other) + self._get()

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FragmentList):
            other = other._get()
        return isinstance(other, tuple) and self._get() == other

    def __hash__(self) -> int:
        return hash(self._get())

    def __reduce__(self) -> Any:
        return (tuple, (self._get(),))

    def __repr__(self) -> str:
        return f"FragmentList({self._count} fragments, {'read' if self._all is not None else 'not read yet'})"


class _StreamCheck:
    """``_check_fragments`` over a version's fragments as they stream by, holding none of them: a
    bitmap of the ids seen (one bit per id below ``next_fragment_id``: 128 KB for a million; a set
    of the ids past 2^27)."""

    def __init__(self, where: str, next_fragment_id: int, next_row_id: int):
        self.where, self.next_fragment_id, self.next_row_id = where, next_fragment_id, next_row_id
        self.seen = bytearray((max(next_fragment_id, 0) + 7) // 8) if next_fragment_id <= 1 << 27 else None
        self.seen_set: set[int] = set()

    def within(self, fragments: "Sequence[Fragment]", seg: "ManifestSegment") -> None:
        """A segment's fragments hold the ids its entry says (what ``holds_any`` relies on)."""
        if seg.ids is not None and fragments and (min(f.id for f in fragments) < seg.ids[0]
                                                  or max(f.id for f in fragments) > seg.ids[1]):
            raise _bad_summary(self.where, seg)

    def add(self, fragments: "Sequence[Fragment]") -> None:
        seen, end = self.seen, self.next_fragment_id
        for f in fragments:
            i = f.id
            if not 0 <= i < end:
                raise _bad_ids(self.where)
            if seen is None:
                if i in self.seen_set:
                    raise _bad_ids(self.where)
                self.seen_set.add(i)
            elif seen[i >> 3] & (1 << (i & 7)):
                raise _bad_ids(self.where)
            else:
                seen[i >> 3] |= 1 << (i & 7)
            if f.row_ids and any(e > self.next_row_id for _, e in f.row_ids):
                raise _bad_row_ids(self.where, self.next_row_id)


def _bad_summary(where: str, seg: "ManifestSegment") -> CorruptFile:
    return CorruptFile(f"manifest {where} is corrupt: manifest segment {seg.path} holds fragment ids outside the range "
                       f"{list(seg.ids or ())} its entry records. Open an earlier version with open_table(uri, version=N), "
                       f"or restore this object")


def _bad_ids(where: str) -> CorruptFile:
    return CorruptFile(f"manifest {where} is corrupt: fragment ids are duplicated or out of range. Open an earlier "
                       f"version with open_table(uri, version=N), or restore this object")


def _bad_row_ids(where: str, next_row_id: int) -> CorruptFile:
    return CorruptFile(f"manifest {where} is corrupt: stable row ids reach beyond next_row_id {next_row_id}. Open an "
                       f"earlier version with open_table(uri, version=N), or restore this object")


def _check_fragments(fragments: "Sequence[Fragment]", where: str, next_fragment_id: int, next_row_id: int) -> None:
    ids = [f.id for f in fragments]
    if len(set(ids)) != len(ids) or any(i < 0 or i >= next_fragment_id for i in ids):
        raise _bad_ids(where)
    if any(e > next_row_id for f in fragments if f.row_ids for _, e in f.row_ids):
        raise _bad_row_ids(where, next_row_id)


def appended(fragments: "tuple[Fragment, ...] | FragmentList", new: "Sequence[Fragment]", next_fragment_id: int,
             next_row_id: int) -> "tuple[Fragment, ...] | FragmentList":
    """``fragments`` and ``new`` after them. A version's ``FragmentList`` stays one, its segments unread:
    an append to a table of a million fragments does not look at them."""
    if isinstance(fragments, FragmentList):
        return fragments.extended(new, next_fragment_id, next_row_id)
    return fragments + tuple(new)


def find_fragments(fragments: "Sequence[Fragment]", ids: "Iterable[int]") -> dict[int, Fragment]:
    """The fragments of ``fragments`` whose ids are in ``ids``, by id; reads only the segments whose
    id range can hold one of them."""
    wanted = sorted(set(ids))
    if not wanted:
        return {}
    want = set(wanted)
    if not isinstance(fragments, FragmentList):
        return {f.id: f for f in fragments if f.id in want}
    out: dict[int, Fragment] = {}
    for _, items in fragments.runs(skip=lambda seg: not seg.holds_any(wanted)):
        for f in items or ():
            if f.id in want:
                out[f.id] = f
    return out


def edited(fragments: "tuple[Fragment, ...] | FragmentList",
           edit: "Callable[[Fragment], Fragment | tuple[Fragment, ...] | None]", next_fragment_id: int,
           next_row_id: int, touches: "Iterable[int] | None" = None) -> "tuple[Fragment, ...] | FragmentList":
    """``fragments`` with each ``f`` replaced by ``edit(f)``: ``f`` itself (unchanged), another
    fragment, a tuple of fragments (in its place), or None (removed). One streaming pass: a segment
    none of whose fragments changed stays that segment, unread by ``lay_out``, so a commit that
    changes a few fragments of a large table holds only the segments it changed. ``touches``: the
    ids ``edit`` may change (any other it returns as it is), so segments whose id range holds none
    of them are not even read."""
    def run(items: "Sequence[Fragment]") -> "tuple[list[Fragment], bool]":
        out: list[Fragment] = []
        changed = False
        for f in items:
            got = edit(f)
            if got is f:
                out.append(f)
                continue
            changed = True
            if isinstance(got, tuple):
                out.extend(got)
            elif got is not None:
                out.append(got)
        return out, changed

    if not isinstance(fragments, FragmentList):
        return tuple(run(fragments)[0])
    wanted = None if touches is None else sorted(set(touches))
    skip = None if wanted is None else (lambda seg: not seg.holds_any(wanted))
    parts: list[Any] = []
    for part, items in fragments.runs(skip):
        if items is None:
            parts.append(part)
            continue
        out, changed = run(items)
        parts.append(part if isinstance(part, ManifestSegment) and not changed else tuple(out))
    return FragmentList(parts, fragments._where, next_fragment_id, next_row_id)


@dataclass(frozen=True)
class Manifest:
    version: int
    timestamp_ms: int
    schema: pa.Schema
    #: In table order: a tuple, or as read from storage a ``FragmentList`` reading its segments on first use.
    fragments: "tuple[Fragment, ...] | FragmentList"
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
        **_zones_field(f),
    }


def _zones_field(f: Fragment) -> dict[str, str]:
    """``zones_json``: the zone maps as a JSON text, read only when a filter needs them (as read, if
    this process never decoded them)."""
    zones = f.__dict__["_zones"]
    if zones is None:
        return {}
    if type(zones) is ZoneText:
        return {"zones_json": zones.text}
    return {"zones_json": json.dumps(_zones_json(zones), separators=(",", ":"), ensure_ascii=True)}


def _zone_value(v: Any) -> Any:
    """A zone bound as JSON: bytes as ``{"b": hex}``, infinities as ``{"f": "inf"}``."""
    if isinstance(v, bytes):
        return {"b": v.hex()}
    if isinstance(v, float) and math.isinf(v):
        return {"f": "inf" if v > 0 else "-inf"}
    return v


_PLAIN_BOUND = (int, bool, type(None))


def _zone_value_from_json(v: Any, what: Callable[[], str]) -> Any:
    if type(v) in _PLAIN_BOUND:
        return v
    if isinstance(v, dict):
        if len(v) == 1 and type(v.get("b")) is str:
            try:
                return bytes.fromhex(v["b"])
            except ValueError:
                pass
        elif v == {"f": "inf"} or v == {"f": "-inf"}:
            return float(v["f"])
        raise CorruptFile(f"{what()}: malformed zone bound {str(v)[:80]}")
    if isinstance(v, float) and math.isfinite(v):
        return v
    raise CorruptFile(f"{what()}: malformed zone bound {str(v)[:80]}")


def _zones_from_json(raw: Any, what: Callable[[], str]) -> tuple[Zone, ...]:
    zones = []
    for column, kind, lo, hi, hi_inclusive, nulls, nans in raw:
        if type(column) is not str or type(kind) is not str or type(hi_inclusive) is not bool:
            raise CorruptFile(f"{what()}: malformed zone map of column {str(column)[:80]}")
        if type(lo) not in _PLAIN_BOUND:
            lo = _zone_value_from_json(lo, what)
        if type(hi) not in _PLAIN_BOUND:
            hi = _zone_value_from_json(hi, what)
        if type(nulls) is not int or type(nans) is not int:
            nulls, nans = int(nulls), int(nans)
        zones.append(Zone(column, kind, lo, hi, hi_inclusive, nulls, nans))
    return tuple(zones)


def _zones_json(zones: "tuple[Zone, ...]") -> list[list[Any]]:
    return [[z.column, z.kind, _zone_value(z.lo), _zone_value(z.hi), z.hi_inclusive, z.nulls, z.nans] for z in zones]


def _entry_json(seg: ManifestSegment) -> dict[str, Any]:
    return {"path": seg.path, "count": seg.count, "bytes": seg.bytes, "checksum": seg.checksum, "rows": seg.rows,
            **({} if seg.ids is None else {"ids": list(seg.ids)}),
            **({} if seg.zones is None else {"zones": _zones_json(seg.zones)})}


def _body(m: Manifest, inline_segments: tuple[ManifestSegment, ...], inline: tuple[Fragment, ...]) -> dict[str, Any]:
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
        "fragment_count": len(m.fragments),
        "segment_count": len(m.segments),
        "segment_lists": [_entry_json(lst) for lst in m.segment_lists],
        "segments": [_entry_json(seg) for seg in inline_segments],
        "fragments": [_fragment_to_json(f) for f in inline],
        "indices": [
            {"name": i.name, "column": i.column, "kind": i.kind, "uuid": i.uuid, "details": i.details,
             "segments": [{"uuid": s.uuid, "path": s.path, "bytes": s.bytes, "rows": s.rows,
                           "fragment_ids": list(s.fragment_ids), "checksum": s.checksum} for s in i.segments]}
            for i in m.indices
        ],
        "wal_watermarks": m.wal_watermarks,
        "transaction": m.transaction,
        **({"dropped": True} if m.dropped else {}),  # only in tombstones: other roots keep their bytes
    }


def _canonical(body: dict[str, Any]) -> bytes:
    return json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


# -- layout: which segments a version's fragments live in ----------------------
# The same algorithm at both levels: fragments in segments, segments in segment lists.
class _Unit:
    """A run while laying out: an existing object kept as it is, or items to write into new ones."""

    __slots__ = ("node", "_items")

    def __init__(self, items: "list[Any]", node: ManifestSegment | None = None):
        self.node, self._items = node, items

    @property
    def items(self) -> "Sequence[Any]":
        """What it holds: a kept object's items are read only if it merges with a run being written."""
        return self._items if self.node is None else self.node.items

    def __len__(self) -> int:
        return len(self._items) if self.node is None else self.node.count


def _same_run(items: "tuple[Any, ...]", at: int, node: ManifestSegment) -> bool:
    run = items[at:at + node.count]
    # Tuple equality compares element identity first, in C: a run of the very same objects is cheap.
    return len(run) == node.count and run == node.items


def _units(items: "tuple[Any, ...]", known: "tuple[ManifestSegment, ...]", key: Callable[[Any], Any]) -> list[_Unit]:
    """``items`` as runs: every known object whose items are still there, in order and unchanged,
    is kept; everything else becomes runs to write."""
    by_first = {key(node.items[0]): node for node in known if node.items}
    units: list[_Unit] = []
    pending: list[Any] = []
    i = 0
    while i < len(items):
        node = by_first.get(key(items[i]))
        if node is not None and _same_run(items, i, node):
            if pending:
                units.append(_Unit(pending))
                pending = []
            units.append(_Unit([], node))
            i += node.count
        else:
            pending.append(items[i])
            i += 1
    if pending:
        units.append(_Unit(pending))
    return units


def _settle(units: list[_Unit], per_node: int) -> list[_Unit]:
    """Runs to write are cut to ``per_node`` and merged with a neighbour no larger than themselves
    while the two fit one object (a binary counter over appends: each item is rewritten about
    log2(per_node / inline) times in all). Kept objects only merge with a run that is being written
    anyway, so a layout that did not change stays as it is."""
    cut: list[_Unit] = []
    for u in units:
        if u.node is None and len(u) > per_node:
            cut.extend(_Unit(u.items[k:k + per_node]) for k in range(0, len(u), per_node))
        else:
            cut.append(u)
    stack: list[_Unit] = []
    for u in cut:
        stack.append(u)
        while len(stack) >= 2:
            a, b = stack[-2], stack[-1]
            if (a.node is not None and b.node is not None) or len(a) > len(b) or len(a) + len(b) > per_node:
                break
            stack[-2:] = [_Unit(list(a.items) + list(b.items))]
    return stack


def _lay(items: "Sequence[Any]", known: "tuple[ManifestSegment, ...]", limits: tuple[int, int],
         key: Callable[[Any], Any], rows: Callable[[Any], int], encode: Callable[["tuple[Any, ...]"], bytes],
         writes: list[tuple[str, bytes]]) -> tuple[ManifestSegment, ...]:
    """The objects holding ``items`` but the inline tail; new ones are appended to ``writes``."""
    return _lay_units(_units(items, known, key), limits, rows, encode, writes)[0]


def _lay_units(units: list[_Unit], limits: tuple[int, int], rows: Callable[[Any], int],
               encode: Callable[["tuple[Any, ...]"], bytes], writes: list[tuple[str, bytes]]
               ) -> "tuple[tuple[ManifestSegment, ...], tuple[Any, ...]]":
    """The objects holding ``units`` but the inline tail, and that tail."""
    inline, per_node = limits
    tail: tuple[Any, ...] = ()
    if units and units[-1].node is None and len(units[-1]) <= inline:
        tail = tuple(units.pop().items)  # the inline tail
    nodes: list[ManifestSegment] = []
    for u in _settle(units, per_node):
        if u.node is not None:
            nodes.append(u.node)
            continue
        held = tuple(u.items)
        data = encode(held)
        path = f"{SEGMENTS_DIR}{uuid.uuid4().hex}.json"
        # Summaries for segments only: what skips reading is a segment's entry; lists are read at open.
        fragments = isinstance(held[0], Fragment)
        nodes.append(ManifestSegment(path, len(held), len(data), checksum.of_bytes(data), sum(rows(x) for x in held),
                                     ids=_id_range(held) if fragments else None,
                                     zones=merge_zones(held) if fragments else None, held=held))
        writes.append((path, data))
    return tuple(nodes), tail


def _id_range(held: "Sequence[Fragment]") -> "tuple[int, int]":
    """The least and greatest fragment id of a segment's fragments."""
    return min(f.id for f in held), max(f.id for f in held)


def merge_zones(items: "Sequence[Any]") -> "tuple[Zone, ...] | None":
    """Zones bounding every row of ``items`` (fragments, or segment entries; e.g. a compaction
    output's, from its sources'); a column some item has no zone for is left out."""
    if not items or any(x.zones is None for x in items):
        return None
    per = [{z.column: z for z in x.zones} for x in items]
    out = []
    for name, first in per[0].items():
        zs = [p.get(name) for p in per]
        if any(z is None or z.kind != first.kind for z in zs):
            continue
        lo = hi = None
        inclusive = True
        unbounded = False
        for z in zs:
            assert z is not None
            if z.lo is None:
                continue
            lo = z.lo if lo is None or z.lo < lo else lo
            if z.hi is None:
                unbounded = True
            elif hi is None or z.hi > hi or (z.hi == hi and z.hi_inclusive):
                hi, inclusive = z.hi, z.hi_inclusive
        if unbounded:
            hi, inclusive = None, False
        out.append(Zone(name, first.kind, lo, hi, inclusive, sum(z.nulls for z in zs), sum(z.nans for z in zs)))  # type: ignore[union-attr]
    return tuple(out)


def _same_nodes(a: "tuple[ManifestSegment, ...]", b: "tuple[ManifestSegment, ...]") -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b))


def _lay_parts(parts: "tuple[Part, ...]", limits: tuple[int, int], encode: Callable[["tuple[Any, ...]"], bytes],
               writes: list[tuple[str, bytes]]) -> "tuple[tuple[ManifestSegment, ...], tuple[Fragment, ...]]":
    """``_lay_units`` over a ``FragmentList``'s parts, looking only at the parts from a little before
    the first held run: the segments before it are kept as they are unless a run being written
    merges that far back (a binary counter reaches back a few segments at most), which is checked:
    the first segment looked at must come out untouched, else the look starts further back."""
    first_held = next((i for i, p in enumerate(parts) if not isinstance(p, ManifestSegment)), len(parts))
    back = 16
    while True:
        start = max(0, first_held - back)
        units = [_Unit([], p) if isinstance(p, ManifestSegment) else _Unit(list(p)) for p in parts[start:]]
        mine: list[tuple[str, bytes]] = []
        segments, tail = _lay_units(units, limits, lambda f: f.live_rows, encode, mine)
        if start == 0 or (segments and segments[0] is parts[start]):
            writes.extend(mine)
            return tuple(parts[:start]) + segments, tail
        back *= 4


def _encode_object(kind: str, table_uuid: str, field_name: str, items: list[Any]) -> bytes:
    return json.dumps({"format": kind, "table_uuid": table_uuid, field_name: items}, sort_keys=True, separators=(",", ":")).encode()


def lay_out(m: Manifest) -> tuple[Manifest, list[tuple[str, bytes]]]:
    """``m`` with its fragments laid out in segments and its segments in segment lists, and the new
    objects to write before its root.

    Pure: objects of ``m`` (its base's) whose contents are unchanged are reused, the newest few
    fragments and segments stay in the root, the rest is written anew. A one-file append therefore
    writes nothing but the root most of the time, and any commit writes about what it changed.
    """
    fragment_limits, segment_limits = _layout_limits()
    writes: list[tuple[str, bytes]] = []
    frags = m.fragments

    def encode(held: "tuple[Fragment, ...]") -> bytes:
        return _encode_object(SEGMENT_FORMAT, m.table_uuid, "fragments", [_fragment_to_json(f) for f in held])

    if isinstance(frags, FragmentList):
        # Parts: segments no fragment of which changed are kept without being read (only those a
        # run being written merges with are); the held runs between them are written.
        segments, tail = _lay_parts(frags._parts, fragment_limits, encode, writes)
        if not frags._laid_on(segments) or tail != frags._inline:
            frags = FragmentList._laid(segments, tail, frags._where, m.next_fragment_id, m.next_row_id)
    else:
        held = tuple(frags)
        segments = _lay(held, m.segments, fragment_limits, lambda f: f.id, lambda f: f.live_rows, encode, writes)
        if segments:  # from now on edited part by part, as a version read from storage is
            frags = FragmentList._laid(segments, held[sum(seg.count for seg in segments):], f"version {m.version}",
                                       m.next_fragment_id, m.next_row_id)
    lists = _lay(segments, m.segment_lists, segment_limits, lambda seg: seg.path, lambda seg: seg.rows,
                 lambda segs: _encode_object(SEGMENT_LIST_FORMAT, m.table_uuid, "segments", [_entry_json(seg) for seg in segs]),
                 writes)
    if not writes and _same_nodes(segments, m.segments) and _same_nodes(lists, m.segment_lists):
        return m, writes  # every object matched its run in place: the layout holds
    return m.replace(segments=segments, segment_lists=lists, fragments=frags), writes


def _starts(nodes: "tuple[ManifestSegment, ...]") -> "Iterator[int]":
    return itertools.accumulate((n.count for n in nodes), initial=0)


def _holds(m: Manifest) -> bool:
    """Whether ``m``'s segments hold its fragments but the inline tail, and its lists its segments."""
    return (all(_same_run(m.fragments, at, seg) for at, seg in zip(_starts(m.segments), m.segments))
            and all(_same_run(m.segments, at, lst) for at, lst in zip(_starts(m.segment_lists), m.segment_lists)))


def encode_manifest(m: Manifest, *, laid_out: bool = False) -> bytes:
    """The root of ``m``. Its segments must be laid out (``lay_out``, which says ``laid_out``) and
    written; a manifest whose fragments all fit the root needs no segment."""
    if not laid_out and not _holds(m):
        m, writes = lay_out(m)
        if writes:
            raise ValueError(f"version {m.version} needs {len(writes)} manifest segments written first: use lay_out()")
    frags = m.fragments
    inline = frags._inline if isinstance(frags, FragmentList) and frags._laid_on(m.segments) else frags[sum(seg.count for seg in m.segments):]
    body = _body(m, m.segments[sum(lst.count for lst in m.segment_lists):], tuple(inline))
    body["checksum"] = "sha256:" + hashlib.sha256(_canonical(body)).hexdigest()
    # One line, with ": " after keys as version 1 wrote them (``belongs_to`` looks for the table uuid).
    return json.dumps(body, sort_keys=True, separators=(",", ": ")).encode()


def _entries(raw: Any, what: str) -> list[ManifestSegment]:
    out = []
    for e in raw:
        path = _stored_path(e["path"], what)
        if not path.startswith(SEGMENTS_DIR):
            raise CorruptFile(f"{what}: manifest segment {path!r} is not under {SEGMENTS_DIR}")
        count, size, rows = int(e["count"]), int(e["bytes"]), int(e["rows"])
        crc = _checksum(e["checksum"], f"{what} segment {path}")
        if crc is None or count < 1 or size < 0 or rows < 0:
            raise CorruptFile(f"{what}: manifest segment {path!r} has no checksum or a bad count")
        ids = e.get("ids")
        if ids is not None:
            lo, hi = ids
            if type(lo) is not int or type(hi) is not int or not 0 <= lo <= hi:
                raise CorruptFile(f"{what}: manifest segment {path!r} has a malformed id range {str(ids)[:80]}")
            ids = (lo, hi)
        zones = e.get("zones")
        out.append(ManifestSegment(path, count, size, crc, rows, ids=ids,
                                   zones=None if zones is None else _zones_from_json(zones, lambda: f"{what} segment {path}")))
    return out


def decode_manifest(data: bytes, where: str, reader: "_SegmentReader | None" = None) -> Manifest:
    """Parses and validates a manifest root; ``where`` names it in errors. A root with segments needs
    a ``reader`` of the table's store (``load_manifest`` passes one): its segment lists are read at
    once, its segments when a fragment is first looked at (``FragmentList``)."""
    def corrupt(reason: str) -> CorruptFile:
        return CorruptFile(f"manifest {where} is corrupt: {reason}. Open an earlier version with open_table(uri, version=N), or restore this object")

    try:
        body = json.loads(data)
    except (ValueError, UnicodeDecodeError, RecursionError) as e:  # RecursionError: hostile nesting
        raise corrupt(f"not valid JSON, probably truncated ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        raise corrupt("not a Lamina manifest")
    if body.get("format_version") not in READABLE_FORMAT_VERSIONS:
        raise LaminaError(f"manifest {where} has format version {body.get('format_version')}; this Lamina reads versions "
                          f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}: upgrade Lamina")
    stored_checksum = body.pop("checksum", None)
    if stored_checksum != "sha256:" + hashlib.sha256(_canonical(body)).hexdigest():
        raise corrupt("checksum mismatch")
    try:
        schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(body["schema"]["ipc"])))
        table_uuid = str(body.get("table_uuid", ""))
        list_entries = _entries(body.get("segment_lists", ()), f"manifest {where}")
        inline_entries = _entries(body.get("segments", ()), f"manifest {where}")
        if (list_entries or inline_entries) and reader is None:
            raise LaminaError(f"manifest {where} keeps its fragments in manifest segments: read it with load_manifest")
        lists = tuple(reader.read_now(list_entries, table_uuid)) if list_entries and reader else ()
        entries = [e for lst in lists for e in lst.items] + inline_entries
        segments = tuple(reader.unread(e, table_uuid) for e in entries) if reader else ()
        inline = tuple(_fragment_from_json(f, where) for f in body["fragments"])
        next_fragment_id, next_row_id = int(body["next_fragment_id"]), int(body["next_row_id"])
        fragments: "tuple[Fragment, ...] | FragmentList" = (
            FragmentList(segments + (inline,), where, next_fragment_id, next_row_id) if segments else inline)
        if int(body.get("fragment_count", len(fragments))) != len(fragments) or int(body.get("segment_count", len(segments))) != len(segments):
            raise corrupt(f"it counts {body.get('fragment_count')} fragments in {body.get('segment_count')} segments, "
                          f"its segments and root hold {len(fragments)} in {len(segments)}")
        indices = tuple(_index_from_json(i, where) for i in body["indices"])
        dropped = body.get("dropped", False)
        if not isinstance(dropped, bool) or dropped and (fragments or indices):
            raise corrupt(f"dropped is {dropped!r}, or a dropped table's version still has fragments or indices")
        m = Manifest(
            version=int(body["version"]),
            timestamp_ms=int(body["timestamp_ms"]),
            schema=schema,
            fragments=fragments,
            next_fragment_id=next_fragment_id,
            next_row_id=next_row_id,
            primary_key=tuple(body["primary_key"]),
            stable_row_ids=bool(body["stable_row_ids"]),
            config=dict(body["config"]),
            indices=indices,
            wal_watermarks={str(k): int(v) for k, v in body["wal_watermarks"].items()},
            transaction=dict(body["transaction"]),
            table_uuid=table_uuid,
            dropped=dropped,
            segments=segments,
            segment_lists=lists,
        )
    except (CorruptFile, LaminaError):
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, OSError, pa.ArrowException) as e:
        # AttributeError: a list where an object belongs; OverflowError: Infinity where an int
        # belongs; OSError: pyarrow's error for an undecodable schema message.
        raise corrupt(f"missing or malformed field ({type(e).__name__}: {str(e)[:200]})") from None
    if not isinstance(m.fragments, FragmentList):  # else checked when its segments are read
        _check_fragments(m.fragments, where, m.next_fragment_id, m.next_row_id)
    return m


def decode_segment(data: bytes, entry: ManifestSegment, table_uuid: str, where: str, *, is_list: bool = False) -> ManifestSegment:
    """One manifest segment (or segment list), checked against its entry in the root or list."""
    kind = "manifest segment list" if is_list else "manifest segment"
    what = f"{kind} {where} (of table {table_uuid or '(unnamed)'})"
    try:
        checksum.check(entry.checksum, checksum.of_bytes(data), what)
        body = json.loads(data)
        if not isinstance(body, dict) or body.get("format") != (SEGMENT_LIST_FORMAT if is_list else SEGMENT_FORMAT):
            raise CorruptFile(f"{what} is not a Lamina {kind}")
        if body.get("table_uuid") != table_uuid:
            raise CorruptFile(f"{what} belongs to table {body.get('table_uuid')!r}")
        items: tuple[Any, ...] = (tuple(_entries(body["segments"], what)) if is_list
                                  else tuple(_fragment_from_json(f, where) for f in body["fragments"]))
    except CorruptFile:
        raise
    except (KeyError, TypeError, ValueError, AttributeError, OverflowError, RecursionError, UnicodeDecodeError) as e:
        raise CorruptFile(f"{what} is corrupt: missing or malformed field ({type(e).__name__}: {str(e)[:200]})") from None
    if len(items) != entry.count:
        raise CorruptFile(f"{what} holds {len(items)} entries, the manifest naming it says {entry.count}")
    return dataclasses.replace(entry, bytes=len(data), held=items)


#: Every path Lamina records is made of these (hex uuids, ids, fixed names): anything else (percent
#: escapes, control characters, spaces, backslashes) is refused before the object is read.
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/-]+")


def _stored_path(value: Any, what: str) -> str:
    """A path read from a manifest: relative, inside the table root, in the characters Lamina writes."""
    path = check_relative(value, what=what)
    if not _PATH_CHARS.fullmatch(path):
        raise CorruptFile(f"{what}: path {path!r} has characters Lamina never writes; the manifest is corrupt or was not written by Lamina")
    return path


#: The data file names Lamina writes: such a path needs no further checking.
_DATA_PATH = re.compile(r"data/[0-9a-f]{32}\.parquet")


def _fragment_from_json(f: dict[str, Any], where: str) -> Fragment:
    def what() -> str:  # built only for an error: decoding runs once per fragment of every segment read
        return f"manifest {where} fragment {f.get('id')}"

    path = f["path"]
    if not isinstance(path, str) or not _DATA_PATH.fullmatch(path):
        path = _stored_path(path, what())
        if not path.startswith(DATA_DIR):
            raise CorruptFile(f"{what()}: data file {path!r} is not under {DATA_DIR}")
    deletion = None
    if f["deletion"] is not None:
        dpath = _stored_path(f["deletion"]["path"], what())
        if not dpath.startswith(DELETIONS_DIR):
            raise CorruptFile(f"{what()}: deletion file {dpath!r} is not under {DELETIONS_DIR}")
        deletion = DeletionFile(dpath, int(f["deletion"]["deleted_rows"]), _checksum(f["deletion"].get("checksum"), what()))
    crc = f.get("checksum")
    zones = f.get("zones_json")
    if zones is not None:
        if type(zones) is not str or not zones.startswith("["):
            raise CorruptFile(f"{what()}: malformed zone maps {str(zones)[:80]}")
        zones = ZoneText(zones, where, f.get("id"))
    elif (listed := f.get("zones")) is not None:  # written before zones_json: decoded now
        zones = _zones_from_json(listed, what)
    frag = Fragment(
        id=int(f["id"]),
        path=path,
        rows=int(f["rows"]),
        file_bytes=int(f["file_bytes"]),
        row_groups=tuple([RowGroup(int(r), int(b)) for r, b in f["row_groups"]]),
        file_version=str(f["file_version"]),
        deletion=deletion,
        row_ids=None if f["row_ids"] is None else tuple([(int(s), int(e)) for s, e in f["row_ids"]]),
        checksum=None if crc is None else (crc if type(crc) is str and len(crc) == _CHECKSUM_LEN
                                           and crc.startswith(CHECKSUM_PREFIX) else _checksum(crc, what())),
        zones=zones,
    )
    if not 0 <= frag.deleted_rows <= frag.rows or sum(g.rows for g in frag.row_groups) != frag.rows:
        raise CorruptFile(f"{what()}: row counts are inconsistent (rows={frag.rows}, deleted={frag.deleted_rows})")
    if frag.row_ids is not None and (
        any(not 0 <= s <= e for s, e in frag.row_ids) or sum(e - s for s, e in frag.row_ids) != frag.rows
    ):
        raise CorruptFile(f"{what()}: stable row ids {list(frag.row_ids)[:4]}... do not cover its {frag.rows} rows")
    return frag


_CHECKSUM_LEN = len(CHECKSUM_PREFIX) + 8


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


class _SegmentReader:
    """Reads a table's segments and segment lists: from the cache, the others from the store in parallel."""

    def __init__(self, store: ObjectStore):
        self.store = store

    def unread(self, entry: ManifestSegment, table_uuid: str) -> ManifestSegment:
        """The segment ``entry`` names: the cached one, or one read on first use."""
        seg = _SEGMENTS.get((self.store.uri, entry.path))
        if seg is not None and seg == entry:
            return seg
        return dataclasses.replace(entry, held=_Unread(self, table_uuid))

    def read_now(self, entries: "list[ManifestSegment]", table_uuid: str) -> "list[ManifestSegment]":
        """Segment lists, read now."""
        out = [self.unread(e, table_uuid) for e in entries]
        self.read([seg for seg in out if not seg.read], table_uuid, is_list=True)
        return out

    def read(self, segments: "list[ManifestSegment]", table_uuid: str, *, is_list: bool = False,
             fill: bool = True) -> "list[tuple[Any, ...]]":
        """The items of ``segments``: from the cache, the others read from the store (all at once)
        and cached. ``fill``: each segment keeps its items (else they live only in the cache, and a
        streaming reader holds them while it needs them)."""
        store = self.store
        found: "list[tuple[Any, ...] | None]" = []
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
        out: "list[tuple[Any, ...]]" = []
        with _collector_paused():
            for seg, items in zip(segments, found):
                if items is None:
                    done = decode_segment(next(datas), seg, table_uuid, store.describe(seg.path), is_list=is_list)
                    _SEGMENTS.put((store.uri, seg.path), done, _segment_held_bytes(done))
                    items = done.items
                if fill:
                    seg._fill(items)
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
        cached = _CACHE.get((store.uri, table_uuid, version))
        if cached is not None:
            return cached
    path = manifest_path(version)
    try:
        data = store.get(path)
    except ObjectNotFound:
        raise VersionNotFound(f"table {store.uri} has no version {version} (never committed, or removed by cleanup)") from None
    where = store.describe(path)
    m = decode_manifest(data, where, _SegmentReader(store))
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
        raise CorruptFile(f"manifest {store.describe(path)} is corrupt: no format version ({type(e).__name__}). Open an "
                          f"earlier version with open_table(uri, version=N), or restore this object") from None


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


def now_ms() -> int:
    return int(time.time() * 1000)

