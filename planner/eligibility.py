"""The eligibility rules: which fragments are compaction candidates, and how a group is rewritten.

Every decision carries a machine-readable reason (the constants below), shown by
``lamina.jobs.compact --dry-run`` and in the JSON summary.

Schema versions (``lamina.evolution``): a data file's column chunks are copied only into a file of
the schema it was written in (``Fragment.schema_id``). A group's output is written in today's schema,
except when every source shares one earlier schema and the group copies chunks of them (binary copy
or hybrid, ``converge_schemas`` off): then in that schema (``output_schema``). Every row group in
another schema than the output's is re-encoded, its rows read in the output's schema (renamed,
widened, added columns materialized, dropped ones left out), with the reason ``schema v3 vs v5``.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, NamedTuple, TypeAlias

from lamina import _native
from lamina.manifest import Fragment
from lamina.planner.options import CompactionOptions

if TYPE_CHECKING:
    import numpy as np

# Modes
BINARY_COPY = "binary_copy"
HYBRID = "hybrid"
FULL_REWRITE = "full_rewrite"

# What happens to one source row group
COPY = "copy"  # its encoded column chunks are copied as they are
ENCODE = "encode"  # its rows are decoded and re-encoded (deletions dropped)
#: Copied unless the fragment's deletion file puts a deleted row in it (then re-encoded): the
#: manifest records only a fragment's deleted count, so the worker, which reads the deletion
#: file anyway, resolves this to COPY or ENCODE (``resolve``) before anything is written.
COPY_IF_CLEAN = "copy_if_clean"

# Why a fragment is a candidate
SMALL = "small"  # below the row and byte targets
DELETIONS = "deletions"  # deleted share at or above materialize_deletions_threshold
SCHEMA = "schema"  # written in an earlier schema than today's, and converge_schemas asks for today's

# Why a group got its mode
ELIGIBLE = "all_row_groups_large"
SOME_SMALL_ROW_GROUPS = "some_row_groups_small"
ALL_SMALL_ROW_GROUPS = "all_row_groups_small"
HAS_DELETIONS = "has_deletions"  # every row group is small or holds deleted rows, some of them deleted
SOME_ROW_GROUPS_DELETED = "some_row_groups_deleted"  # copies except where rows are (or may be) deleted
SOME_SMALL_OR_DELETED = "some_row_groups_small_or_deleted"
BINARY_COPY_DISABLED = "binary_copy_disabled"
FILE_VERSION_MISMATCH = "file_version_mismatch"


def candidate_reason(fragment: Fragment, options: CompactionOptions, schema_id: int = 0) -> str | None:
    """Why ``fragment`` should be compacted, or None if it should be left alone (``schema_id``: today's
    schema, ``Manifest.schema_id``; 0 in a table whose schema never changed)."""
    if fragment.deleted_rows and fragment.deleted_rows / fragment.rows >= options.materialize_deletions_threshold:
        return DELETIONS
    if fragment.live_rows < options.target_rows_per_fragment and fragment.file_bytes < options.target_bytes_per_fragment:
        return SMALL
    if options.converge_schemas and fragment.schema_id != schema_id:
        return SCHEMA
    return None


def schema_text(earlier: Iterable[int], schema_id: int) -> str:
    """``schema v3 vs v5``: rows written in the schemas ``earlier`` re-encoded into ``schema_id``."""
    return f"schema {', '.join(f'v{i}' for i in sorted(set(earlier)))} vs v{schema_id}"


def output_schema(fragments: Sequence[Fragment], options: CompactionOptions, schema_id: int) -> int:
    """The schema a group of ``fragments`` is written in, given today's ``schema_id``: the one earlier
    schema all of them share when the group copies chunks of them as they are (chunks are copied only
    into a file of their own schema) and ``converge_schemas`` is off; else today's, every row of an
    earlier schema re-encoded into it."""
    ids = {f.schema_id for f in fragments}
    if len(ids) != 1 or schema_id in ids or options.converge_schemas:
        return schema_id
    (theirs,) = ids
    mode, _ = choose_mode(fragments, options, row_group_actions(fragments, options, theirs), theirs)
    return schema_id if mode == FULL_REWRITE else theirs


# Why one row group gets its action (RowGroupAction.why; the first word is the kind)
WHY_LARGE = "large"
WHY_SMALL = "small"
WHY_DELETED = "deleted"
WHY_MAYBE_DELETED = "maybe_deleted"
WHY_CLEAN = "clean"
WHY_SCHEMA = "schema"  # written in another schema than the group's output: re-encoded into it


class RowGroupAction(NamedTuple):
    """What a worker does with one source row group; the native rewrite takes ``native()``."""

    action: str  # COPY, ENCODE or COPY_IF_CLEAN
    source: int  # position of the fragment in its group
    row_group: int  # row group index in that fragment's data file
    why: str = ""  # e.g. "small (< 1,048,576 bytes)", "deleted (12 rows)": the first word is a WHY_* kind

    def native(self) -> tuple[str, int, int]:
        """The ``(action, source, row_group)`` the native rewrite takes (COPY or ENCODE only)."""
        return (self.action, self.source, self.row_group)


def row_group_actions(fragments: Sequence[Fragment], options: CompactionOptions, schema_id: int = 0) -> list[RowGroupAction]:
    """Per row group, what it gets when chunks may be copied at all into an output written in schema
    ``schema_id`` (``output_schema``): one of a fragment written in another schema is re-encoded, so
    are small ones and ones that must hold a deleted row (the fragment has more deleted rows than
    rows outside them); other row groups of a fragment with deletions are copied if clean.
    ``choose_mode`` and ``actions`` take it, so a plan computes it once per group."""
    out = []
    small = f"{WHY_SMALL} (< {options.min_row_group_bytes:,} bytes)"
    for si, f in enumerate(fragments):
        other = f"{WHY_SCHEMA} v{f.schema_id} vs v{schema_id}" if f.schema_id != schema_id else None
        for ri, rg in enumerate(f.row_groups):
            if other is not None:
                out.append(RowGroupAction(ENCODE, si, ri, other))
            elif rg.bytes < options.min_row_group_bytes:
                out.append(RowGroupAction(ENCODE, si, ri, small))
            elif f.deleted_rows and f.deleted_rows > f.rows - rg.rows:
                out.append(
                    RowGroupAction(
                        ENCODE,
                        si,
                        ri,
                        f"{WHY_DELETED} (at least {f.deleted_rows - (f.rows - rg.rows):,} "
                        f"of the fragment's {f.deleted_rows:,} deleted rows)",
                    )
                )
            elif f.deleted_rows:
                out.append(
                    RowGroupAction(
                        COPY_IF_CLEAN,
                        si,
                        ri,
                        f"{WHY_MAYBE_DELETED} (the fragment has {f.deleted_rows:,} "
                        "deleted rows: copied if none is in this row group)",
                    )
                )
            else:
                out.append(RowGroupAction(COPY, si, ri, WHY_LARGE))
    return out


def choose_mode(
    fragments: Sequence[Fragment],
    options: CompactionOptions,
    planned: Sequence[RowGroupAction] | None = None,
    schema_id: int = 0,
) -> tuple[str, str]:
    """(mode, reason) for rewriting ``fragments`` together into an output of schema ``schema_id``
    (``planned``: their ``row_group_actions`` for it when the caller has them)."""
    if not options.enable_binary_copy:
        return FULL_REWRITE, BINARY_COPY_DISABLED
    if {f.file_version for f in fragments} != {_native.FILE_VERSION}:
        return FULL_REWRITE, FILE_VERSION_MISMATCH
    if planned is None:
        planned = row_group_actions(fragments, options, schema_id)
    kinds = {a.why.split()[0] for a in planned}
    copies = WHY_LARGE in kinds or WHY_MAYBE_DELETED in kinds
    if WHY_SCHEMA in kinds:  # the rows of an earlier schema are re-encoded; today's chunks copied where they may be
        reason = schema_text((f.schema_id for f in fragments if f.schema_id != schema_id), schema_id)
        return (HYBRID if copies else FULL_REWRITE), reason
    deleted = any(f.deletion is not None for f in fragments)
    small = WHY_SMALL in kinds
    if kinds == {WHY_LARGE}:
        return BINARY_COPY, ELIGIBLE
    if not copies:
        return FULL_REWRITE, HAS_DELETIONS if deleted else ALL_SMALL_ROW_GROUPS
    if small and deleted:
        return HYBRID, SOME_SMALL_OR_DELETED
    return HYBRID, SOME_SMALL_ROW_GROUPS if small else SOME_ROW_GROUPS_DELETED


def actions(
    fragments: Sequence[Fragment],
    mode: str,
    options: CompactionOptions,
    planned: Sequence[RowGroupAction] | None = None,
    schema_id: int = 0,
) -> list[RowGroupAction]:
    """Per source row group, in order: copy it, copy it if clean, or re-encode it, and why, into an
    output of schema ``schema_id`` (``planned``: the fragments' ``row_group_actions`` for it when the
    caller has them)."""
    if planned is None:
        planned = row_group_actions(fragments, options, schema_id)
    if mode == FULL_REWRITE:
        return [a if a.action == ENCODE else RowGroupAction(ENCODE, a.source, a.row_group, "full_rewrite") for a in planned]
    return list(planned)


#: A fragment's deleted offsets, sorted: a sequence, or the array ``lamina.deletion.read_deleted`` returns.
Offsets: TypeAlias = "Sequence[int] | np.ndarray"


def resolve(
    actions: Sequence[RowGroupAction], fragments: Sequence[Fragment], deleted: Sequence[Offsets]
) -> tuple[RowGroupAction, ...]:
    """``actions`` with each COPY_IF_CLEAN made COPY or ENCODE from the deleted offsets of each
    fragment (sorted, as its deletion file holds them), row groups bounded by the manifest's row
    counts: the worker's only decision, a function of the plan and the deletion files it names."""
    out = []
    for a in actions:
        if a.action != COPY_IF_CLEAN:
            out.append(a)
            continue
        f = fragments[a.source]
        first = sum(rg.rows for rg in f.row_groups[: a.row_group])
        offsets = deleted[a.source]
        n = bisect.bisect_left(offsets, first + f.row_groups[a.row_group].rows) - bisect.bisect_left(offsets, first)
        out.append(
            RowGroupAction(ENCODE, a.source, a.row_group, f"{WHY_DELETED} ({n:,} row{'s' if n > 1 else ''})")
            if n
            else RowGroupAction(
                COPY, a.source, a.row_group, f"{WHY_CLEAN} (none of the fragment's {len(offsets):,} deleted rows)"
            )
        )
    return tuple(out)


def encode_all(actions: Sequence[RowGroupAction]) -> tuple[RowGroupAction, ...]:
    """The same row groups, every one re-encoded: the full rewrite a copy falls back to."""
    return tuple(RowGroupAction(ENCODE, a.source, a.row_group, a.why if a.action == ENCODE else "fallback") for a in actions)
