"""The records the Table API reports: fragments, versions, table statistics, indices."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from lamina.clustering import ClusteringStats


@dataclass(frozen=True)
class FragmentInfo:
    """One fragment as ``Table.fragments()`` reports it."""

    id: int
    path: str
    rows: int
    deleted_rows: int
    live_rows: int
    bytes: int
    row_groups: tuple[tuple[int, int], ...]  # (rows, compressed bytes)
    file_version: str
    deletion_path: str | None


@dataclass(frozen=True)
class LiveFile:
    """One data file of a version and which of its rows the version holds, as ``Table.live_files()``
    reports it: what an engine without a Lamina integration reads to see the table's rows.

    ``deleted`` holds the deleted rows' 0-based offsets in the file's row order (DuckDB's
    ``file_row_number``), sorted; ``keep`` the same as sorted, merged half-open ranges
    ``[start, end)`` of the rows to read (empty when every row is deleted).
    """

    id: int  # the fragment id
    path: str  # relative to the table root
    uri: str  # where another engine reads it: an absolute local path or s3://bucket/prefix/data/...
    rows: int  # physical rows in the file
    live_rows: int
    file_bytes: int
    deleted: tuple[int, ...]
    keep: tuple[tuple[int, int], ...]
    #: None: the file's columns are the table's. A file written before a schema change (docs/FORMAT.md
    #: §2.4): each of today's columns → the file's column holding it (None: not in the file, so null or
    #: the column's default), to be renamed and cast to today's type.
    columns: dict[str, str | None] | None = None

    def to_dict(self) -> dict:
        """A JSON-ready dict: the fields, with ``deleted`` and ``keep`` as lists (``columns`` only when set)."""
        return {
            "id": self.id,
            "path": self.path,
            "uri": self.uri,
            "rows": self.rows,
            "live_rows": self.live_rows,
            "file_bytes": self.file_bytes,
            "deleted": list(self.deleted),
            "keep": [list(r) for r in self.keep],
            **({} if self.columns is None else {"columns": dict(self.columns)}),
        }


@dataclass(frozen=True)
class VersionInfo:
    version: int
    timestamp: dt.datetime
    operation: str
    rows: int
    fragments: int


@dataclass(frozen=True)
class TableStats:
    uri: str
    version: int
    rows: int
    deleted_rows: int
    fragments: int
    data_bytes: int
    row_groups: int
    fragments_with_deletions: int
    mean_rows_per_fragment: float
    versions: int
    indices: int
    #: How clustered the table is on its clustering keys (None: it has none): ``Table.set_clustering``.
    clustering: ClusteringStats | None = None


@dataclass(frozen=True)
class IndexInfo:
    """One index as ``Table.list_indices()`` reports it."""

    name: str
    column: str
    kind: str
    segments: int
    covered_fragments: int
    uncovered_fragments: int
    covered_rows: int
    bytes: int
    details: dict


__all__ = ["FragmentInfo", "LiveFile", "VersionInfo", "TableStats", "IndexInfo"]
