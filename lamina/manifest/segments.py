"""A version's fragments as runs: manifest segments (immutable objects under ``_segments/``, shared
by every version that did not change them, read only when needed) and fragments held, streamed a
window of segments at a time (``FragmentList``), and the edits a commit makes to them part by part
(``appended``, ``edited``, ``find_fragments``) so a segment none of whose fragments changed stays
that segment."""

from __future__ import annotations

import bisect
import collections.abc
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeAlias, overload

from lamina.errors import CorruptFile

if TYPE_CHECKING:
    from lamina.manifest.model import Fragment
    from lamina.manifest.versions import SegmentReader
    from lamina.zones import Zone


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
    ids: tuple[int, int] | None = field(default=None, compare=False)
    #: Zone maps bounding every fragment a segment holds (merged), so a filter can rule out a whole
    #: segment without reading it; None when a fragment it holds has none (or in older entries and lists).
    zones: tuple[Zone, ...] | None = field(default=None, compare=False, repr=False)
    #: What it holds (fragments, or for a list its segments' entries), or an ``Unread`` that reads
    #: them on first use (``items``); not part of its entry (equal entries name the same object).
    held: Any = field(default=(), compare=False, repr=False)

    def __eq__(self, other: object) -> bool:
        # Entries name immutable objects by random, never reused paths: the same path (and
        # checksum) is the same entry. Cheaper than comparing every field, as laying out compares
        # runs of entries element by element.
        return self is other or (
            isinstance(other, ManifestSegment)
            and self.path == other.path
            and self.checksum == other.checksum
            and self.count == other.count
        )

    def __hash__(self) -> int:
        return hash(self.path)

    def holds_any(self, wanted: Sequence[int]) -> bool:
        """Whether it may hold a fragment whose id is in ``wanted`` (sorted)."""
        if self.ids is None:
            return True
        at = bisect.bisect_left(wanted, self.ids[0])
        return at < len(wanted) and wanted[at] <= self.ids[1]

    @property
    def items(self) -> tuple[Any, ...]:
        if isinstance(self.held, Unread):
            self.held.reader.read([self], self.held.table_uuid)
        items: tuple[Any, ...] = self.held  # read: filled in by the reader
        return items

    @property
    def fragments(self) -> tuple[Fragment, ...]:
        return self.items

    @property
    def read(self) -> bool:
        return not isinstance(self.held, Unread)

    def fill(self, items: tuple[Any, ...]) -> None:
        """The one mutation of this value: its items, read once from the immutable object it names
        (by the reader, ``lamina.manifest.versions``)."""
        object.__setattr__(self, "held", items)

    def __getstate__(self) -> dict[str, Any]:  # pickled (e.g. to Ray tasks) with its items, never its reader
        return {**self.__dict__, "held": self.items}


class Unread:
    """The items of a segment not read yet: the reader that reads them, the table they belong to, and
    the schemas its fragments' data files may be written in (by id)."""

    __slots__ = ("reader", "table_uuid", "schemas")

    def __init__(self, reader: SegmentReader, table_uuid: str, schemas: dict[int, Any] | None = None):
        self.reader, self.table_uuid, self.schemas = reader, table_uuid, schemas


#: A run of a ``FragmentList``: a segment's entry (its fragments, read when needed) or fragments held.
Part: TypeAlias = "ManifestSegment | tuple[Fragment, ...]"


class FragmentList(collections.abc.Sequence["Fragment"]):
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

    def __init__(self, parts: Sequence[Part], where: str, next_fragment_id: int, next_row_id: int):
        merged: list[Any] = []
        for part in parts:  # adjacent held runs joined, empty ones dropped
            if isinstance(part, ManifestSegment):
                merged.append(part)
            elif part:
                if merged and not isinstance(merged[-1], ManifestSegment):
                    merged[-1] = merged[-1] + tuple(part)
                else:
                    merged.append(tuple(part))
        self._parts: tuple[Part, ...] = tuple(merged)
        self._where = where
        self._next_ids = (next_fragment_id, next_row_id)
        self._count = sum(p.count if isinstance(p, ManifestSegment) else len(p) for p in self._parts)
        self._all: tuple[Fragment, ...] | None = None
        self._lock = threading.Lock()

    @property
    def parts(self) -> tuple[Part, ...]:
        """Its runs, in order: segment entries and held fragments (no two held runs adjacent)."""
        return self._parts

    @property
    def where(self) -> str:
        """The version it belongs to, for errors."""
        return self._where

    @property
    def inline(self) -> tuple[Fragment, ...]:
        """The held run at the end (a version's inline tail once laid out), or ()."""
        return self._parts[-1] if self._parts and not isinstance(self._parts[-1], ManifestSegment) else ()

    def _get(self) -> tuple[Fragment, ...]:
        if self._all is None:
            with self._lock:
                if self._all is None:
                    unread = [p for p in self._parts if isinstance(p, ManifestSegment) and not p.read]
                    if unread:
                        held = unread[0].held
                        held.reader.read(unread, held.table_uuid)
                    frags = tuple(
                        itertools.chain.from_iterable(p.items if isinstance(p, ManifestSegment) else p for p in self._parts)
                    )
                    check_fragments(frags, self._where, *self._next_ids)
                    self._all = frags
        return self._all

    def runs(self, skip: Callable[[ManifestSegment], bool] | None = None) -> Iterator[tuple[Part, tuple[Fragment, ...] | None]]:
        """Each part with its fragments, in order, segments read a window at a time (not kept); a
        segment ``skip`` says is of no interest comes with None, unread."""
        check = _StreamCheck(self._where, *self._next_ids)
        parts = self._parts
        for start in range(0, len(parts), self.WINDOW):
            window = parts[start : start + self.WINDOW]
            wanted = [not (skip is not None and isinstance(p, ManifestSegment) and skip(p)) for p in window]
            unread = [p for p, w in zip(window, wanted) if w and isinstance(p, ManifestSegment) and not p.read]
            got = (
                dict(zip((seg.path for seg in unread), unread[0].held.reader.read(unread, unread[0].held.table_uuid, fill=False)))
                if unread
                else {}
            )
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
            yield from items or ()  # never None: nothing is skipped

    def extended(self, new: Sequence[Fragment], next_fragment_id: int, next_row_id: int) -> FragmentList:
        """These fragments and ``new`` after them, without reading a segment (``lay_out`` then writes
        only what the tail outgrows)."""
        parts, inline = self._parts, self.inline
        if new:
            parts = parts[:-1] + (inline + tuple(new),) if inline else parts + (tuple(new),)
        out = FragmentList._of(parts, self._count + len(new), self._where, next_fragment_id, next_row_id)
        if self._all is not None:
            out._all = self._all + tuple(new)
        return out

    @classmethod
    def _of(cls, parts: tuple[Part, ...], count: int, where: str, next_fragment_id: int, next_row_id: int) -> FragmentList:
        """A list of ``parts`` already joined (no two held runs adjacent, none empty) holding ``count``."""
        out = cls.__new__(cls)
        out._parts, out._count = parts, count
        out._where, out._next_ids = where, (next_fragment_id, next_row_id)
        out._all, out._lock = None, threading.Lock()
        return out

    @classmethod
    def laid(
        cls,
        segments: tuple[ManifestSegment, ...],
        tail: tuple[Fragment, ...],
        where: str,
        next_fragment_id: int,
        next_row_id: int,
    ) -> FragmentList:
        """A version's fragments as ``lay_out`` leaves them: its segments, then its inline tail."""
        return cls._of(
            segments + ((tail,) if tail else ()),
            sum(seg.count for seg in segments) + len(tail),
            where,
            next_fragment_id,
            next_row_id,
        )

    def laid_on(self, segments: tuple[ManifestSegment, ...]) -> bool:
        """Whether these are ``segments``' fragments (the very entries, in order) plus an inline tail."""
        parts = self._parts[:-1] if self.inline else self._parts
        return len(segments) == len(parts) and all(a is b for a, b in zip(segments, parts))

    @property
    def live_rows(self) -> int:
        if self._all is not None:
            return sum(f.live_rows for f in self._all)
        return sum(p.rows if isinstance(p, ManifestSegment) else sum(f.live_rows for f in p) for p in self._parts)

    def __len__(self) -> int:
        return self._count

    @overload
    def __getitem__(self, i: int) -> Fragment: ...
    @overload
    def __getitem__(self, i: slice) -> tuple[Fragment, ...]: ...
    def __getitem__(self, i: int | slice) -> Fragment | tuple[Fragment, ...]:
        return self._get()[i]

    def __iter__(self) -> Iterator[Fragment]:
        return iter(self._all) if self._all is not None else self._stream()

    def __contains__(self, f: object) -> bool:
        return f in self._get()

    def __add__(self, other: Any) -> tuple[Fragment, ...]:
        return self._get() + tuple(other)

    def __radd__(self, other: Any) -> tuple[Fragment, ...]:
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
    """``check_fragments`` over a version's fragments as they stream by, holding none of them: a
    bitmap of the ids seen (one bit per id below ``next_fragment_id``: 128 KB for a million; a set
    of the ids past 2^27)."""

    def __init__(self, where: str, next_fragment_id: int, next_row_id: int):
        self.where, self.next_fragment_id, self.next_row_id = where, next_fragment_id, next_row_id
        self.seen = bytearray((max(next_fragment_id, 0) + 7) // 8) if next_fragment_id <= 1 << 27 else None
        self.seen_set: set[int] = set()

    def within(self, fragments: Sequence[Fragment], seg: ManifestSegment) -> None:
        """A segment's fragments hold the ids its entry says (what ``holds_any`` relies on)."""
        if (
            seg.ids is not None
            and fragments
            and (min(f.id for f in fragments) < seg.ids[0] or max(f.id for f in fragments) > seg.ids[1])
        ):
            raise _bad_summary(self.where, seg)

    def add(self, fragments: Sequence[Fragment]) -> None:
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


def _bad_summary(where: str, seg: ManifestSegment) -> CorruptFile:
    return CorruptFile(
        f"manifest {where} is corrupt: manifest segment {seg.path} holds fragment ids outside the range "
        f"{list(seg.ids or ())} its entry records. Open an earlier version with open_table(uri, version=N), "
        f"or restore this object"
    )


def _bad_ids(where: str) -> CorruptFile:
    return CorruptFile(
        f"manifest {where} is corrupt: fragment ids are duplicated or out of range. Open an earlier "
        f"version with open_table(uri, version=N), or restore this object"
    )


def _bad_row_ids(where: str, next_row_id: int) -> CorruptFile:
    return CorruptFile(
        f"manifest {where} is corrupt: stable row ids reach beyond next_row_id {next_row_id}. Open an "
        f"earlier version with open_table(uri, version=N), or restore this object"
    )


def check_fragments(fragments: Sequence[Fragment], where: str, next_fragment_id: int, next_row_id: int) -> None:
    ids = [f.id for f in fragments]
    if len(set(ids)) != len(ids) or any(i < 0 or i >= next_fragment_id for i in ids):
        raise _bad_ids(where)
    if any(e > next_row_id for f in fragments if f.row_ids for _, e in f.row_ids):
        raise _bad_row_ids(where, next_row_id)


def appended(
    fragments: tuple[Fragment, ...] | FragmentList, new: Sequence[Fragment], next_fragment_id: int, next_row_id: int
) -> tuple[Fragment, ...] | FragmentList:
    """``fragments`` and ``new`` after them. A version's ``FragmentList`` stays one, its segments unread:
    an append to a table of a million fragments does not look at them."""
    if isinstance(fragments, FragmentList):
        return fragments.extended(new, next_fragment_id, next_row_id)
    return fragments + tuple(new)


def find_fragments(fragments: Sequence[Fragment], ids: Iterable[int]) -> dict[int, Fragment]:
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


def edited(
    fragments: tuple[Fragment, ...] | FragmentList,
    edit: Callable[[Fragment], Fragment | tuple[Fragment, ...] | None],
    next_fragment_id: int,
    next_row_id: int,
    touches: Iterable[int] | None = None,
) -> tuple[Fragment, ...] | FragmentList:
    """``fragments`` with each ``f`` replaced by ``edit(f)``: ``f`` itself (unchanged), another
    fragment, a tuple of fragments (in its place), or None (removed). One streaming pass: a segment
    none of whose fragments changed stays that segment, unread by ``lay_out``, so a commit that
    changes a few fragments of a large table holds only the segments it changed. ``touches``: the
    ids ``edit`` may change (any other it returns as it is), so segments whose id range holds none
    of them are not even read."""

    def run(items: Sequence[Fragment]) -> tuple[list[Fragment], bool]:
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
    return FragmentList(parts, fragments.where, next_fragment_id, next_row_id)
