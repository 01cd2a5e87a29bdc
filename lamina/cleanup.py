"""Removing old versions and unreferenced files.

Order matters for safety: manifests of expired versions go first (oldest first),
then files that no remaining version references and that are older than the
cutoff. Newer unreferenced files may belong to a writer still committing, so
they stay; the latest version and everything it needs always stays.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass

from lamina.errors import InvalidArgument
from lamina.manifest import (
    DATA_DIR,
    DELETIONS_DIR,
    INDICES_DIR,
    TRANSACTIONS_DIR,
    VERSIONS_DIR,
    forget_manifest,
    list_versions,
    load_manifest,
    manifest_path,
)
from lamina.store import ObjectStore

log = logging.getLogger("lamina.cleanup")

#: Directories whose files are owned by manifests (``_wal/`` is owned by the WAL appliers).
_OWNED_DIRS = (DATA_DIR, DELETIONS_DIR, INDICES_DIR, TRANSACTIONS_DIR)


@dataclass(frozen=True)
class CleanupStats:
    versions_removed: int
    files_removed: int
    bytes_removed: int
    kept_versions: int


def _cutoff(older_than: "dt.timedelta | dt.datetime | float | int") -> float:
    if isinstance(older_than, dt.timedelta):
        seconds = older_than.total_seconds()
    elif isinstance(older_than, dt.datetime):
        ts = older_than if older_than.tzinfo else older_than.replace(tzinfo=dt.timezone.utc)
        return ts.timestamp()
    elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
        seconds = float(older_than)
    else:
        raise InvalidArgument(f"older_than must be a timedelta, a datetime or seconds, not {type(older_than).__name__}")
    if seconds < 0:
        raise InvalidArgument(f"older_than must not be negative ({seconds} s)")
    return time.time() - seconds


def cleanup(store: ObjectStore, older_than: "dt.timedelta | dt.datetime | float | int") -> CleanupStats:
    cutoff = _cutoff(older_than)
    versions = list_versions(store)
    if not versions:
        return CleanupStats(0, 0, 0, 0)
    latest = versions[-1]
    expired = [v for v in versions[:-1] if load_manifest(store, v).timestamp_ms / 1000 < cutoff]
    expired_set = set(expired)
    for v in expired:  # oldest first: a crash leaves a contiguous suffix of versions
        store.delete([manifest_path(v)])
        forget_manifest(store, v)
    # Versions committed while we worked are kept and their files protected.
    kept = [v for v in list_versions(store) if v not in expired_set]
    referenced: set[str] = set()
    for v in kept:
        referenced |= load_manifest(store, v).referenced_paths()
    doomed, doomed_bytes = [], 0
    for prefix in _OWNED_DIRS:
        for obj in store.list(prefix):
            if obj.path not in referenced and obj.modified < cutoff:
                doomed.append(obj.path)
                doomed_bytes += obj.size
    # Stale temp files of interrupted local manifest writes.
    for obj in store.list(VERSIONS_DIR):
        if obj.path.rsplit("/", 1)[-1].startswith(".tmp-") and obj.modified < cutoff:
            doomed.append(obj.path)
            doomed_bytes += obj.size
    store.delete(doomed)
    log.info("cleanup of %s: removed %d versions and %d files (%d bytes); latest version %d kept",
             store.uri, len(expired), len(doomed), doomed_bytes, latest)
    return CleanupStats(len(expired), len(doomed), doomed_bytes, len(kept))
