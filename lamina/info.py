"""The records the Table API reports: fragments, versions, table statistics, indices."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass


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


__all__ = ["FragmentInfo", "VersionInfo", "TableStats", "IndexInfo"]
