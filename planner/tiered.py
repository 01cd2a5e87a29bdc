"""The tiered compaction policy: a fragment merges only with peers of its own size, so a table fed
forever by small appends rewrites each row O(log n) times, not once per pass. Pure: no I/O.

    size s of a fragment or unit = max(live rows / target rows, live bytes / target bytes)
      at the target   (eligibility: not "small")    never moves by size
      settled         s >= 1/2                      never moves by size
      tier k >= 1     1/r^k <= s < 1/r^(k-1)        r = tier_ratio; small appends and WAL flushes land in high tiers
    units: each fragment, or the output of the group it is in (a fragment at the deletion threshold, or
    written in an earlier schema under converge_schemas, is a group of its own: its live rows, re-encoded);
    repeated until nothing fires, smallest tiers first, so merges cascade:
      size    >= w (min_merge_width) adjacent units of one tier k >= 2 (smaller units between them ride
              along) merge w at a time, fewer when the target would overflow: each output is a tier up
      top     adjacent unsettled tier-1 units (smaller ones between them riding along) packed up to the
              target; a pack that reaches half the target merges, and its output is settled
      max_fragments   more unsettled units than this: the smallest merges with its smaller neighbour
                      (if they fit the target) until no more than max_fragments are left
    ──► groups of adjacent fragments, in table order + a Decision per fragment (tier, peers, trigger)

Guarantees (docs/ARCHITECTURE.md, "Compaction policies"):

* Write amplification. A size or top merge puts every member into a unit at least one tier up
  (w >= r members of tier k hold >= w/r^k >= 1/r^(k-1) of the target; smaller riders move further),
  and a top merge's output is settled, which size merges never touch. A row first written in a
  fragment of size s0 (in tier k0 = ⌈log_r(1/s0)⌉ = ⌈log_r(target / s0)⌉) is therefore rewritten at most
  k0 - 1 times to reach tier 1 and once more to settle: at most ⌈log_r(target / smallest)⌉ times by
  size-driven compaction. The max_fragments valve only makes units larger, so it never adds to that
  count (its own rewrites are not counted); a delete that shrinks a fragment moves it down a tier, and
  the count starts again from there. Deletion materialization is independent of tiers (its threshold).
* Fragments. After a pass nothing fires, so for a table fed by a steady stream of appends (no deletes,
  each append no larger than the fragments before it, smallest in tier K) the fragments between passes
  are at most ⌈2n⌉ settled or at the target (each holds at least half the target; n = the table's size
  in targets), plus w - 1 per tier 2..K, plus ⌊(r - 1) / 2⌋ unsettled in tier 1 (they hold less than
  half the target together), plus the appends since the last pass:
      F <= ⌈2n⌉ + (w - 1)(K - 1) + ⌊(r - 1) / 2⌋ + appends since the last pass.
  In any other layout the max_fragments valve keeps the unsettled fragments at or below max_fragments
  after every pass, except a fragment alone between settled ones it does not fit with.
"""

from __future__ import annotations

import dataclasses
import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from lamina.manifest import Fragment
from lamina.planner.bin_packing import pack_adjacent
from lamina.planner.eligibility import DELETIONS, SCHEMA, candidate_reason
from lamina.planner.options import CompactionOptions

#: Why a unit was formed (the trigger of a merge).
SIZE = "size"  # >= min_merge_width adjacent peers of one tier
TOP = "top"  # adjacent unsettled tier-1 fragments reaching half the target
MAX_FRAGMENTS = "max_fragments"  # the valve: too many unsettled fragments
# DELETIONS (lamina.planner.eligibility): a deleted share at or over the threshold, rewritten alone
# SCHEMA (lamina.planner.eligibility): written in an earlier schema under converge_schemas, rewritten alone

#: What happens to a fragment on this pass.
MERGE = "merge"
WAIT = "wait"
SETTLED = "settled"
AT_TARGET = "at_target"

#: The tier of an empty fragment (no live rows): below every other.
BOTTOM_TIER = 64


@dataclass(frozen=True)
class Decision:
    """What the tiered policy does with one fragment on this pass, and why (``--dry-run`` prints ``why``)."""

    fragment_id: int
    tier: int  # 0: at the target; k >= 1: 1/r^k <= size < 1/r^(k-1) of the target
    share: float  # its live size as a share of the target (the larger of rows and bytes)
    #: Adjacent fragments of its tier, itself included (smaller ones between them do not break the run):
    #: before this pass's merges for a fragment that merges, after them for one that waits.
    peers: int
    decision: str  # MERGE, WAIT, SETTLED or AT_TARGET
    group: int | None  # the plan's group it merges in
    trigger: str | None  # SIZE, TOP, DELETIONS, SCHEMA or MAX_FRAGMENTS when it merges
    why: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "fragment_id": self.fragment_id,
            "tier": self.tier,
            "share": round(self.share, 6),
            "peers": self.peers,
            "decision": self.decision,
            "group": self.group,
            "trigger": self.trigger,
            "why": self.why,
        }


@dataclass(frozen=True)
class TierReport:
    """The tiered policy's reasons: one decision per fragment (table order), one trigger per group."""

    tier_ratio: int
    min_merge_width: int
    max_fragments: int
    decisions: tuple[Decision, ...]
    group_triggers: tuple[str, ...]
    #: Unsettled fragments before and after this pass (the valve's measure).
    unsettled_before: int = 0
    unsettled_after: int = 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "tier_ratio": self.tier_ratio,
            "min_merge_width": self.min_merge_width,
            "max_fragments": self.max_fragments,
            "unsettled_before": self.unsettled_before,
            "unsettled_after": self.unsettled_after,
            "group_triggers": list(self.group_triggers),
            "fragments": [d.to_dict() for d in self.decisions],
        }

    def limited_to(self, groups: int, limit: int) -> TierReport:
        """This report for a plan that keeps its first ``groups`` groups (``max_plan_fragments``): the
        fragments of the others wait for the next run."""
        why = f"waits: the plan reached max_plan_fragments ({limit:,}); merges in a later run"
        decisions = tuple(
            dataclasses.replace(d, decision=WAIT, group=None, trigger=None, why=why)
            if d.group is not None and d.group >= groups
            else d
            for d in self.decisions
        )
        return dataclasses.replace(self, decisions=decisions, group_triggers=self.group_triggers[:groups])

    def describe_lines(self) -> list[str]:
        """Fragment by fragment (runs with the same reason shown once): what ``--dry-run`` adds."""
        lines = [
            f"  tiered: tier k holds fragments of 1/{self.tier_ratio}^k to 1/{self.tier_ratio}^(k-1) of the target; "
            f"{self.min_merge_width} adjacent peers merge; settled from 1/2; "
            f"{self.unsettled_before} -> {self.unsettled_after} unsettled (max_fragments {self.max_fragments})"
        ]
        runs: list[tuple[list[int], str]] = []  # adjacent fragments with the same reason
        for d in self.decisions:
            text = f"tier {d.tier}, {d.why}" if d.decision in (MERGE, WAIT) else d.why
            if runs and runs[-1][1] == text:
                runs[-1][0].append(d.fragment_id)
            else:
                runs.append(([d.fragment_id], text))
        for ids, text in runs:
            which = f"fragment {ids[0]}" if len(ids) == 1 else f"fragments {_span(ids)}"
            lines.append(f"  {which}: {text}")
        return lines


@dataclass(slots=True)
class _Unit:
    """A run of adjacent fragments that ends this pass as one fragment (itself, or a group's output)."""

    first: int  # position of its first fragment
    last: int  # position of its last fragment
    rows: int
    bytes: float  # live bytes
    at_target: bool
    trigger: str | None = None  # None: a fragment left as it is
    texts: list[str] = field(default_factory=list)  # the triggers that formed it, in order
    tier: int | None = None  # computed once (_Sizes.tier): a unit's rows and bytes never change


class _Sizes:
    """Shares of the target, tiers and limits under one set of options."""

    def __init__(self, options: CompactionOptions):
        self.rows, self.bytes = options.target_rows_per_fragment, options.target_bytes_per_fragment
        self.r = options.tier_ratio

    def share(self, u: _Unit) -> float:
        return max(u.rows / self.rows, u.bytes / self.bytes)

    def settled(self, u: _Unit) -> bool:
        return u.at_target or 2 * u.rows >= self.rows or 2 * u.bytes >= self.bytes

    def tier(self, u: _Unit) -> int:
        """0 at the target, else the k >= 1 with 1/r^k <= share < 1/r^(k-1) (integer test on rows)."""
        if u.tier is None:
            k = 0 if u.at_target else 1
            while 0 < k < BOTTOM_TIER and u.rows * self.r**k < self.rows and u.bytes * self.r**k < self.bytes:
                k += 1
            u.tier = k
        return u.tier

    def fits(self, *units: _Unit) -> bool:
        return sum(u.rows for u in units) <= self.rows and sum(u.bytes for u in units) <= self.bytes


def _span(ids: list[int]) -> str:
    return f"{ids[0]}..{ids[-1]} ({len(ids)})" if len(ids) > 3 else ",".join(map(str, ids))


def _live_bytes(f: Fragment) -> float:
    return f.file_bytes * (f.live_rows / f.rows) if f.rows else 0.0


def _merge(units: list[_Unit], trigger: str, text: str) -> _Unit:
    return _Unit(
        units[0].first,
        units[-1].last,
        sum(u.rows for u in units),
        sum(u.bytes for u in units),
        False,
        trigger,
        [t for u in units for t in u.texts] + [text],
    )


class _Planner:
    def __init__(self, fragments: Iterable[Fragment], options: CompactionOptions, schema_id: int = 0):
        self.o, self.sz = options, _Sizes(options)
        self.schema_id = schema_id
        # One pass over the fragments (they may stream from the manifest segments): what the policy
        # needs of each is its id, its unit and, at the deletion threshold, its deleted share.
        self.ids: list[int] = []
        self.units: list[_Unit] = []
        #: Position -> deleted share, for the fragments at the deletion threshold.
        self.deleted_share: dict[int, float] = {}
        #: Position -> schema id, for the fragments converge_schemas re-encodes into today's schema.
        self.earlier_schema: dict[int, int] = {}
        for p, f in enumerate(fragments):
            self.ids.append(f.id)
            self.units.append(_Unit(p, p, f.live_rows, _live_bytes(f), not _small(f, options)))
            why = candidate_reason(f, options, schema_id)
            if why == DELETIONS:
                self.deleted_share[p] = f.deleted_rows / f.rows
            if options.converge_schemas and f.schema_id != schema_id:
                self.earlier_schema[p] = f.schema_id
        #: Per position: the first trigger text that pulled the fragment into a merge.
        self.first_text: dict[int, tuple[str, str]] = {}

    # -- the size and top triggers, to a fixpoint ---------------------------------------------------
    def _unsettled_tier(self, u: _Unit) -> int | None:
        return None if self.sz.settled(u) else self.sz.tier(u)

    def _runs(self, k: int) -> list[tuple[int, int]]:
        """Index ranges [i, j] of the units: maximal runs of unsettled units of tier >= k, trimmed to
        begin and end with a unit of tier exactly k."""
        out = []
        i, n = 0, len(self.units)
        while i < n:
            t = self._unsettled_tier(self.units[i])
            if t is None or t < k:
                i += 1
                continue
            j = i
            while j + 1 < n and (t2 := self._unsettled_tier(self.units[j + 1])) is not None and t2 >= k:
                j += 1
            tiers = [self._unsettled_tier(self.units[x]) for x in range(i, j + 1)]
            exact = [i + x for x, t in enumerate(tiers) if t == k]
            if exact:
                out.append((exact[0], exact[-1]))
            i = j + 1
        return out

    def _fits(self, units: list[_Unit], more: _Unit) -> bool:
        return self.sz.fits(*units, more)

    def _size_chunks(self, run: list[_Unit], k: int) -> list[tuple[list[_Unit], str | None]]:
        """A tier-k run (k >= 2) cut left to right into chunks of w tier-k units (smaller ones between
        them ride along) or fewer when the next would overflow the target; the text of each chunk that
        merges, None for the rest (fewer than w peers: they wait)."""
        w = self.o.min_merge_width
        out: list[tuple[list[_Unit], str | None]] = []
        chunk: list[_Unit] = []

        def close(full: bool) -> None:
            peers = sum(1 for u in chunk if self.sz.tier(u) == k)
            riders = len(chunk) - peers
            text = None
            if len(chunk) > 1 and (full or peers >= w):
                text = (
                    f"{peers} adjacent tier-{k} fragments "
                    + ("fill the target" if full else f"(min_merge_width {w})")
                    + (f", {riders} smaller between them" if riders else "")
                )
            out.append((list(chunk), text))
            chunk.clear()

        for u in run:
            if chunk and not self._fits(chunk, u):
                close(True)  # over the target: holds more than 1 - 1/r^(k-1) >= 1/r^(k-1) of it, so a tier up
            chunk.append(u)
            if sum(1 for x in chunk if self.sz.tier(x) == k) == w:
                close(False)
        if chunk:
            close(False)
        return out

    def _top_chunks(self, run: list[_Unit]) -> list[tuple[list[_Unit], str | None]]:
        """A run of unsettled units packed up to the target; a pack reaching half of it merges (settled)."""
        packs = pack_adjacent(run, lambda u: (float(u.rows), u.bytes), (float(self.sz.rows), float(self.sz.bytes)))
        out: list[tuple[list[_Unit], str | None]] = []
        for chunk in packs:
            rows, size = sum(u.rows for u in chunk), sum(u.bytes for u in chunk)
            settles = len(chunk) > 1 and (2 * rows >= self.sz.rows or 2 * size >= self.sz.bytes)
            total = max(rows / self.sz.rows, size / self.sz.bytes)
            out.append(
                (
                    chunk,
                    f"{len(chunk)} adjacent tier-1 fragments hold {total:.2f} of the target (settled from 0.50)"
                    if settles
                    else None,
                )
            )
        return out

    def _merge_runs(self, k: int) -> bool:
        """Merges every run of tier k that fires; True if any did."""
        fired = False
        for i, j in reversed(self._runs(k)):  # from the right, so earlier index ranges stay valid
            run = self.units[i : j + 1]
            if k >= 2 and sum(1 for u in run if self.sz.tier(u) == k) < self.o.min_merge_width:
                continue
            trigger = SIZE if k >= 2 else TOP
            new: list[_Unit] = []
            for chunk, text in self._size_chunks(run, k) if k >= 2 else self._top_chunks(run):
                if text is None:
                    new.extend(chunk)
                    continue
                for u in chunk:
                    for p in range(u.first, u.last + 1):
                        self.first_text.setdefault(p, (trigger, text))
                new.append(_merge(chunk, trigger, text))
                fired = True
            self.units[i : j + 1] = new
        return fired

    def _fixpoint(self) -> None:
        while True:
            fired = False
            tiers = {t for u in self.units if (t := self._unsettled_tier(u)) is not None and t >= 2}
            for k in sorted(tiers, reverse=True):  # the smallest fragments first: their outputs join the next tier
                fired |= self._merge_runs(k)
            fired |= self._merge_runs(1)
            if not fired:
                return

    # -- deletions and the valve ---------------------------------------------------------------------
    def _deletions(self) -> None:
        """Fragments at the deletion threshold, and (converge_schemas) fragments written in an earlier
        schema, become units of their own (their output: the live rows, in today's schema), whatever
        their tier; size merges may then take them along."""
        t = self.o.materialize_deletions_threshold
        for i, u in enumerate(self.units):
            share = self.deleted_share.get(u.first)
            earlier = self.earlier_schema.get(u.first)
            if share is not None:
                trigger, text = DELETIONS, f"{share:.0%} of its rows deleted (materialize_deletions_threshold {t:g})"
            elif earlier is not None:
                trigger, text = SCHEMA, f"written in schema v{earlier}, today's is v{self.schema_id} (converge_schemas)"
            else:
                continue
            self.units[i] = _Unit(
                u.first, u.last, u.rows, u.bytes, u.rows >= self.sz.rows or u.bytes >= self.sz.bytes, trigger, [text]
            )
            self.first_text[u.first] = (trigger, text)

    def _unsettled(self) -> int:
        return sum(1 for u in self.units if not self.sz.settled(u))

    def _valve(self) -> bool:
        """Merges the smallest unsettled units with their smaller neighbours while more than
        max_fragments are unsettled; True if it merged any."""
        limit = self.o.max_fragments
        count = self._unsettled()
        if count <= limit:
            return False
        merged_any = False
        text = f"{count} fragments below half the target, more than max_fragments {limit}: merged with its smaller neighbour"
        # A doubly linked list over the units, and a heap of the unsettled ones by size.
        units = self.units
        prev = list(range(-1, len(units) - 1))
        nxt = list(range(1, len(units) + 1))
        nxt[-1] = -1
        alive = [True] * len(units)
        heap = [(self.sz.share(u), i) for i, u in enumerate(units) if not self.sz.settled(u)]
        heapq.heapify(heap)
        while count > limit and heap:
            _, i = heapq.heappop(heap)
            if not alive[i] or self.sz.settled(units[i]):
                continue
            options = [j for j in (prev[i], nxt[i]) if j != -1 and not units[j].at_target and self.sz.fits(units[i], units[j])]
            if not options:
                continue  # alone between fragments it does not fit with: it waits
            j = min(options, key=lambda j: (self.sz.share(units[j]), j))
            a, b = (j, i) if j == prev[i] else (i, j)  # left, right (indices are not positions: merged units are appended)
            was = int(not self.sz.settled(units[a])) + int(not self.sz.settled(units[b]))
            merged = _merge([units[a], units[b]], MAX_FRAGMENTS, text)
            merged_any = True
            for p in range(merged.first, merged.last + 1):
                self.first_text.setdefault(p, (MAX_FRAGMENTS, text))
            units.append(merged)
            m = len(units) - 1
            alive[a] = alive[b] = False
            alive.append(True)
            prev.append(prev[a])
            nxt.append(nxt[b])
            if prev[a] != -1:
                nxt[prev[a]] = m
            if nxt[b] != -1:
                prev[nxt[b]] = m
            count -= was - int(not self.sz.settled(merged))
            if not self.sz.settled(merged):
                heapq.heappush(heap, (self.sz.share(merged), m))
        self.units = sorted((u for u, ok in zip(units, alive) if ok), key=lambda u: u.first)
        return merged_any

    # -- the outcome -------------------------------------------------------------------------------
    def plan(self) -> tuple[list[list[int]], TierReport]:
        before = self._unsettled()
        original = list(self.units)
        self._deletions()
        while True:  # until nothing fires: a valve merge can complete a run of peers
            self._fixpoint()
            if not self._valve():
                break
        groups: list[list[int]] = []
        triggers: list[str] = []
        group_of: dict[int, int] = {}
        for u in self.units:
            if u.trigger is None:
                continue
            for p in range(u.first, u.last + 1):
                group_of[p] = len(groups)
            groups.append(list(range(u.first, u.last + 1)))
            triggers.append("; then ".join(dict.fromkeys(u.texts)))
        self.after = self._unsettled()
        self.peers, _ = self._original_runs(original)
        # What a waiting fragment waits with: its run after this pass's merges.
        after_peers, after_held = self._original_runs(self.units)
        self.waiting = {u.first: (after_peers[i], after_held[i]) for i, u in enumerate(self.units) if u.trigger is None}
        decisions = tuple(self._decision(p, original, group_of) for p in range(len(self.ids)))
        report = TierReport(
            self.o.tier_ratio, self.o.min_merge_width, self.o.max_fragments, decisions, tuple(triggers), before, self.after
        )
        return groups, report

    def _original_runs(self, original: list[_Unit]) -> tuple[list[int], list[float]]:
        """Per unit: the units of its tier in its run (smaller ones between them do not break it), and
        for a tier-1 unit the share of the target its run of tier-1 units holds."""
        tiers = [self._unsettled_tier(u) for u in original]
        n = len(original)
        peers, held = [0] * n, [0.0] * n
        for k in sorted({t for t in tiers if t is not None}):
            i = 0
            while i < n:
                if tiers[i] is None or tiers[i] < k:  # type: ignore[operator]
                    i += 1
                    continue
                j = i
                while j + 1 < n and tiers[j + 1] is not None and tiers[j + 1] >= k:  # type: ignore[operator]
                    j += 1
                members = [x for x in range(i, j + 1) if tiers[x] == k]
                for x in members:
                    peers[x] = len(members)
                if k == 1 and members:
                    total = sum(self.sz.share(original[x]) for x in range(members[0], members[-1] + 1))
                    for x in members:
                        held[x] = total
                i = j + 1
        return peers, held

    def _decision(self, p: int, original: list[_Unit], group_of: dict[int, int]) -> Decision:
        fid, u = self.ids[p], original[p]
        tier, share, peers = self.sz.tier(u), self.sz.share(u), self.peers[p]
        w = self.o.min_merge_width
        if p in group_of:
            trigger, text = self.first_text[p]
            return Decision(fid, tier, share, peers, MERGE, group_of[p], trigger, f"merges in group {group_of[p]}: {text}")
        if u.at_target:
            return Decision(fid, 0, share, 0, AT_TARGET, None, None, "at the target: moves only to drop deleted rows")
        if self.sz.settled(u):
            return Decision(
                fid, tier, share, 0, SETTLED, None, None, "settled (at least half the target): moves only to drop deleted rows"
            )
        peers, held = self.waiting[p]
        if tier >= 2:
            why = (
                f"waits: {peers} of {w} adjacent tier-{tier} fragments; {max(1, w - peers)} more next to it "
                f"(appended, or made by merges of smaller ones) merge them into tier {tier - 1}"
            )
        else:
            why = (
                f"waits: adjacent tier-1 fragments hold {held:.2f} of the target; they merge when they reach 0.50 "
                f"(more tier-1 fragments next to it)"
            )
        if self.after > self.o.max_fragments:
            why += "; more than max_fragments are unsettled, but no neighbour fits the target with it"
        return Decision(fid, tier, share, peers, WAIT, None, None, why)


def _small(f: Fragment, options: CompactionOptions) -> bool:
    return f.live_rows < options.target_rows_per_fragment and f.file_bytes < options.target_bytes_per_fragment


def plan_tiers(
    fragments: Iterable[Fragment], options: CompactionOptions, schema_id: int = 0
) -> tuple[list[list[int]], TierReport]:
    """The groups (ids of adjacent fragments, table order) the tiered policy merges this pass, and its
    reasons fragment by fragment (``schema_id``: today's schema). One pass over ``fragments``: it keeps
    a unit per fragment, not the fragments."""
    planner = _Planner(fragments, options, schema_id)
    groups, report = planner.plan()
    return [[planner.ids[p] for p in g] for g in groups], report


__all__ = [
    "plan_tiers",
    "Decision",
    "TierReport",
    "SIZE",
    "TOP",
    "MAX_FRAGMENTS",
    "MERGE",
    "WAIT",
    "SETTLED",
    "AT_TARGET",
    "BOTTOM_TIER",
]
