"""Which objects hold a version's fragments: ``lay_out`` puts the newest few fragments in the root,
the others in manifest segments of up to ``SEGMENT_FRAGMENTS``, and the oldest segments' entries in
segment lists, reusing every object of the base whose contents did not change, so a commit writes
about what it changed (docs/ARCHITECTURE.md, "Manifests that cost what changes"; FORMAT.md §2.3)."""

from __future__ import annotations

import itertools
import os
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any, cast

from lamina import checksum
from lamina.errors import LaminaError
from lamina.manifest.codec import SEGMENT_FORMAT, SEGMENT_LIST_FORMAT, encode_object, encode_root, entry_json, fragment_to_json
from lamina.manifest.model import Fragment, Manifest
from lamina.manifest.paths import SEGMENTS_DIR
from lamina.manifest.segments import FragmentList, ManifestSegment, Part
from lamina.zones import merge_zones

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

    return (
        pair("LAMINA_MANIFEST_INLINE_FRAGMENTS", INLINE_FRAGMENTS, "LAMINA_MANIFEST_SEGMENT_FRAGMENTS", SEGMENT_FRAGMENTS),
        pair("LAMINA_MANIFEST_INLINE_SEGMENTS", INLINE_SEGMENTS, "LAMINA_MANIFEST_LIST_SEGMENTS", LIST_SEGMENTS),
    )


# The same algorithm at both levels: fragments in segments, segments in segment lists.
class _Unit:
    """A run while laying out: an existing object kept as it is, or items to write into new ones."""

    __slots__ = ("node", "_items")

    def __init__(self, items: Sequence[Any], node: ManifestSegment | None = None):
        self.node, self._items = node, items

    @property
    def items(self) -> Sequence[Any]:
        """What it holds: a kept object's items are read only if it merges with a run being written."""
        return self._items if self.node is None else self.node.items

    def __len__(self) -> int:
        return len(self._items) if self.node is None else self.node.count


def _same_run(items: Sequence[Any], at: int, node: ManifestSegment) -> bool:
    run = items[at : at + node.count]
    # Tuple equality compares element identity first, in C: a run of the very same objects is cheap.
    return len(run) == node.count and run == node.items


def _units(items: Sequence[Any], known: tuple[ManifestSegment, ...], key: Callable[[Any], Any]) -> list[_Unit]:
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
            cut.extend(_Unit(u.items[k : k + per_node]) for k in range(0, len(u), per_node))
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


def _lay(
    items: Sequence[Any],
    known: tuple[ManifestSegment, ...],
    limits: tuple[int, int],
    key: Callable[[Any], Any],
    rows: Callable[[Any], int],
    encode: Callable[[tuple[Any, ...]], bytes],
    writes: list[tuple[str, bytes]],
) -> tuple[ManifestSegment, ...]:
    """The objects holding ``items`` but the inline tail; new ones are appended to ``writes``."""
    return _lay_units(_units(items, known, key), limits, rows, encode, writes)[0]


def _lay_units(
    units: list[_Unit],
    limits: tuple[int, int],
    rows: Callable[[Any], int],
    encode: Callable[[tuple[Any, ...]], bytes],
    writes: list[tuple[str, bytes]],
) -> tuple[tuple[ManifestSegment, ...], tuple[Any, ...]]:
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
        nodes.append(
            ManifestSegment(
                path,
                len(held),
                len(data),
                checksum.of_bytes(data),
                sum(rows(x) for x in held),
                ids=_id_range(held) if fragments else None,
                zones=merge_zones(held) if fragments else None,
                held=held,
            )
        )
        writes.append((path, data))
    return tuple(nodes), tail


def _id_range(held: Sequence[Fragment]) -> tuple[int, int]:
    """The least and greatest fragment id of a segment's fragments."""
    return min(f.id for f in held), max(f.id for f in held)


def _same_nodes(a: tuple[ManifestSegment, ...], b: tuple[ManifestSegment, ...]) -> bool:
    return len(a) == len(b) and all(x is y or x == y for x, y in zip(a, b))


def _lay_parts(
    parts: tuple[Part, ...], limits: tuple[int, int], encode: Callable[[tuple[Any, ...]], bytes], writes: list[tuple[str, bytes]]
) -> tuple[tuple[ManifestSegment, ...], tuple[Fragment, ...]]:
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
            kept = cast("tuple[ManifestSegment, ...]", parts[:start])  # all segments: start <= first_held
            return kept + segments, tail
        back *= 4


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

    def encode(held: tuple[Fragment, ...]) -> bytes:
        return encode_object(SEGMENT_FORMAT, m.table_uuid, "fragments", [fragment_to_json(f) for f in held])

    if isinstance(frags, FragmentList):
        # Parts: segments no fragment of which changed are kept without being read (only those a
        # run being written merges with are); the held runs between them are written.
        segments, tail = _lay_parts(frags.parts, fragment_limits, encode, writes)
        if not frags.laid_on(segments) or tail != frags.inline:
            frags = FragmentList.laid(segments, tail, frags.where, m.next_fragment_id, m.next_row_id)
    else:
        held = tuple(frags)
        segments = _lay(held, m.segments, fragment_limits, lambda f: f.id, lambda f: f.live_rows, encode, writes)
        if segments:  # from now on edited part by part, as a version read from storage is
            frags = FragmentList.laid(
                segments, held[sum(seg.count for seg in segments) :], f"version {m.version}", m.next_fragment_id, m.next_row_id
            )
    lists = _lay(
        segments,
        m.segment_lists,
        segment_limits,
        lambda seg: seg.path,
        lambda seg: seg.rows,
        lambda segs: encode_object(SEGMENT_LIST_FORMAT, m.table_uuid, "segments", [entry_json(seg) for seg in segs]),
        writes,
    )
    if not writes and _same_nodes(segments, m.segments) and _same_nodes(lists, m.segment_lists):
        return m, writes  # every object matched its run in place: the layout holds
    return m.replace(segments=segments, segment_lists=lists, fragments=frags), writes


def _starts(nodes: tuple[ManifestSegment, ...]) -> Iterator[int]:
    return itertools.accumulate((n.count for n in nodes), initial=0)


def _holds(m: Manifest) -> bool:
    """Whether ``m``'s segments hold its fragments but the inline tail, and its lists its segments."""
    return all(_same_run(m.fragments, at, seg) for at, seg in zip(_starts(m.segments), m.segments)) and all(
        _same_run(m.segments, at, lst) for at, lst in zip(_starts(m.segment_lists), m.segment_lists)
    )


def encode_manifest(m: Manifest, *, laid_out: bool = False) -> bytes:
    """The root of ``m``. Its segments must be laid out (``lay_out``, which says ``laid_out``) and
    written; a manifest whose fragments all fit the root needs no segment."""
    if not laid_out and not _holds(m):
        m, writes = lay_out(m)
        if writes:
            raise ValueError(f"version {m.version} needs {len(writes)} manifest segments written first: use lay_out()")
    frags = m.fragments
    if isinstance(frags, FragmentList) and frags.laid_on(m.segments):
        inline = frags.inline
    else:
        inline = frags[sum(seg.count for seg in m.segments) :]
    return encode_root(m, m.segments[sum(lst.count for lst in m.segment_lists) :], tuple(inline))
