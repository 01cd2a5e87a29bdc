"""How an index is built and what it may be: kinds, options, names, indexable columns."""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from lamina.errors import InvalidArgument
from lamina.keys import key_domain

KINDS = ("btree", "bitmap", "fts")
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,63}$")

#: Build defaults (see IndexOptions). One task per segment by default: a merge costs about
#: as much as the build (read, re-sort, write and fsync the segment again), so split a
#: segment over several tasks only to spread a large one over more workers.
DEFAULT_SEGMENT_ROWS = 1 << 22
DEFAULT_TASK_ROWS = DEFAULT_SEGMENT_ROWS


@dataclass(frozen=True)
class IndexOptions:
    """How an index is built. Memory of a build task: about ``task_rows`` rows of the column
    plus 16 bytes per row (btree); of a merge: about 3 × the segment file (≤ ``segment_rows`` rows)."""

    task_rows: int = DEFAULT_TASK_ROWS
    segment_rows: int = DEFAULT_SEGMENT_ROWS
    page_entries: int = 4096
    max_bitmap_values: int = 65_536
    stem: bool = False
    max_token_len: int = 64

    def __post_init__(self) -> None:
        bounds = {
            "task_rows": (1, 1 << 31),
            "segment_rows": (1, 1 << 34),
            "page_entries": (1, 1 << 20),
            "max_bitmap_values": (1, 1 << 24),
            "max_token_len": (1, 1 << 16),
        }
        for name, (lo, hi) in bounds.items():
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise InvalidArgument(f"index option {name} must be an integer in [{lo}, {hi}], got {v!r}")
        if self.segment_rows < self.task_rows:
            raise InvalidArgument(
                f"index option segment_rows ({self.segment_rows}) must be at least task_rows ({self.task_rows})"
            )

    def native(self) -> dict[str, Any]:
        return dict(
            page_entries=self.page_entries,
            max_bitmap_values=self.max_bitmap_values,
            stem=self.stem,
            max_token_len=self.max_token_len,
        )

    @classmethod
    def from_details(cls, details: dict[str, Any], **overrides: Any) -> IndexOptions:
        """The options an index was created with (kept in its details), with build-size overrides."""
        names = ("page_entries", "max_bitmap_values", "stem", "max_token_len")
        keep: dict[str, Any] = {k: details[k] for k in names if k in details}
        options: dict[str, Any] = {**keep, **{k: v for k, v in overrides.items() if v is not None}}
        return cls(**options)

    def details(self) -> dict[str, Any]:
        return self.native()


def check_indexable(schema: pa.Schema, column: str, kind: str, where: str) -> pa.DataType:
    """The column's type; InvalidArgument if the column is missing or the kind cannot index it."""
    if kind not in KINDS:
        raise InvalidArgument(f"unknown index kind {kind!r}; kinds: {', '.join(KINDS)}")
    if not isinstance(column, str) or column not in schema.names:
        raise InvalidArgument(
            f"cannot index column {column!r}: table {where} has no such column; columns: {', '.join(schema.names)}"
        )
    t = schema.field(column).type
    if kind == "fts":
        vt = t.value_type if pa.types.is_dictionary(t) else t
        if not (pa.types.is_string(vt) or pa.types.is_large_string(vt)):
            raise InvalidArgument(f"a full-text (fts) index needs a string column; {column!r} of {where} is {t}")
    elif key_domain(t) is None:
        raise InvalidArgument(
            f"cannot build a {kind} index on column {column!r} of {where}: type {t} is not supported "
            "(integers, floats, booleans, dates/times/timestamps/durations, strings and binary are)"
        )
    return t


def default_name(column: str, kind: str) -> str:
    """``<column>_<kind>``, with every character an index name cannot hold (non-ASCII, spaces,
    '/', …) replaced by '_' and a short hash of the column appended when anything was replaced,
    so two such columns never share a default name."""
    base = f"{column}_{kind}"
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", base).lstrip(".-") or "index"
    if safe == base and len(safe) <= 64:
        return base
    digest = hashlib.sha256(column.encode()).hexdigest()[:8]
    return f"{safe[: 64 - 9]}_{digest}"


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise InvalidArgument(
            f"index name {name!r} must be 1-64 characters of letters, digits, '_', '.', '-' (not starting with '.' or '-')"
        )
    return name
