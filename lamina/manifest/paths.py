"""Where a table's objects live under its root (docs/FORMAT.md §1), and the check every path read
from a manifest passes before anything is read at it."""

from __future__ import annotations

import re
from typing import Any

from lamina.errors import CorruptFile
from lamina.store import check_relative

VERSIONS_DIR = "_versions/"
SEGMENTS_DIR = "_segments/"
DATA_DIR = "data/"
DELETIONS_DIR = "_deletions/"
INDICES_DIR = "_indices/"
WAL_DIR = "_wal/"
TRANSACTIONS_DIR = "_transactions/"
TAGS_DIR = "_tags/"
MANIFEST_SUFFIX = ".manifest"
#: Every directory of a table's layout (docs/FORMAT.md §1), in the order a purge empties them
#: (``lamina.drop``: versions last). Cleanup walks the same list (``lamina.cleanup``), so a directory
#: the format adds is either swept or purged, never forgotten by one of them.
TABLE_DIRS = (DATA_DIR, SEGMENTS_DIR, DELETIONS_DIR, INDICES_DIR, WAL_DIR, TRANSACTIONS_DIR, TAGS_DIR, VERSIONS_DIR)


def manifest_path(version: int) -> str:
    return f"{VERSIONS_DIR}{version:020d}{MANIFEST_SUFFIX}"


#: Every path Lamina records is made of these (hex uuids, ids, fixed names): anything else (percent
#: escapes, control characters, spaces, backslashes) is refused before the object is read.
_PATH_CHARS = re.compile(r"[A-Za-z0-9._/-]+")


def stored_path(value: Any, what: str) -> str:
    """A path read from a manifest: relative, inside the table root, in the characters Lamina writes."""
    path = check_relative(value, what=what)
    if not _PATH_CHARS.fullmatch(path):
        raise CorruptFile(
            f"{what}: path {path!r} has characters Lamina never writes; the manifest is corrupt or was not written by Lamina"
        )
    return path
