"""The eligibility rules: which fragments are compaction candidates, and how a group is rewritten.

Every decision carries a machine-readable reason (the constants below), shown by
``jobs.compact --dry-run`` and in the JSON summary.
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

from lamina import _native
from lamina.manifest import Fragment
from planner.options import CompactionOptions

# Modes
BINARY_COPY = "binary_copy"
HYBRID = "hybrid"
FULL_REWRITE = "full_rewrite"

# What happens to one source row group
COPY = "copy"  # its encoded column chunks are copied as they are
ENCODE = "encode"  # its rows are decoded and re-encoded (deletions dropped)

# Why a fragment is a candidate
SMALL = "small"  # below the row and byte targets
DELETIONS = "deletions"  # deleted share at or above materialize_deletions_threshold

# Why a group got its mode
ELIGIBLE = "all_row_groups_large"
SOME_SMALL_ROW_GROUPS = "some_row_groups_small"
ALL_SMALL_ROW_GROUPS = "all_row_groups_small"
HAS_DELETIONS = "has_deletions"
BINARY_COPY_DISABLED = "binary_copy_disabled"
FILE_VERSION_MISMATCH = "file_version_mismatch"


def candidate_reason(fragment: Fragment, options: CompactionOptions) -> str | None:
    """Why ``fragment`` should be compacted, or None if it should be left alone."""
    if fragment.deleted_rows and fragment.deleted_rows / fragment.rows >= options.materialize_deletions_threshold:
        return DELETIONS
    if fragment.live_rows < options.target_rows_per_fragment and fragment.file_bytes < options.target_bytes_per_fragment:
        return SMALL
    return None


def choose_mode(fragments: Sequence[Fragment], options: CompactionOptions) -> tuple[str, str]:
    """(mode, reason) for rewriting ``fragments`` together."""
    if any(f.deletion is not None for f in fragments):
        return FULL_REWRITE, HAS_DELETIONS
    if not options.enable_binary_copy:
        return FULL_REWRITE, BINARY_COPY_DISABLED
    if {f.file_version for f in fragments} != {_native.FILE_VERSION}:
        return FULL_REWRITE, FILE_VERSION_MISMATCH
    sizes = [rg.bytes for f in fragments for rg in f.row_groups]
    small = sum(1 for b in sizes if b < options.min_row_group_bytes)
    if small == 0:
        return BINARY_COPY, ELIGIBLE
    if small == len(sizes):
        return FULL_REWRITE, ALL_SMALL_ROW_GROUPS
    return HYBRID, SOME_SMALL_ROW_GROUPS


class RowGroupAction(NamedTuple):
    """What a worker does with one source row group (the native rewrite takes these as tuples)."""

    action: str  # COPY or ENCODE
    source: int  # position of the fragment in its group
    row_group: int  # row group index in that fragment's data file


def actions(fragments: Sequence[Fragment], mode: str, options: CompactionOptions) -> list[RowGroupAction]:
    """Per source row group, in order: copy it as it is or re-encode it."""
    out = []
    for si, f in enumerate(fragments):
        for ri, rg in enumerate(f.row_groups):
            copy = mode == BINARY_COPY or (mode == HYBRID and rg.bytes >= options.min_row_group_bytes)
            out.append(RowGroupAction(COPY if copy else ENCODE, si, ri))
    return out


def encode_all(actions: Sequence[RowGroupAction]) -> tuple[RowGroupAction, ...]:
    """The same row groups, every one re-encoded: the full rewrite a copy falls back to."""
    return tuple(RowGroupAction(ENCODE, a.source, a.row_group) for a in actions)
