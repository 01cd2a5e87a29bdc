"""Removing old versions and unreferenced files.

Order matters for safety: manifests of expired versions go first (oldest first),
then files that no remaining version references and that are older than the
cutoff. A version expires by the time it stopped being the latest (its
successor's commit time). Newer unreferenced files may belong to a writer still
committing, so they stay; the latest version and everything it needs always stays,
and so does everything a tagged version needs (``lamina.tags``).
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from dataclasses import dataclass

from lamina.errors import CorruptFile, InvalidArgument, TableReplaced
from lamina.manifest import (
    TABLE_DIRS,
    TAGS_DIR,
    VERSIONS_DIR,
    WAL_DIR,
    forget_manifest,
    list_versions,
    load_manifest,
    manifest_path,
)
from lamina.store import ObjectStore
from lamina.tags import list_tags

log = logging.getLogger("lamina.cleanup")

#: The layout's directories whose objects manifests own (manifest segments included): every one of
#: ``TABLE_DIRS`` but the versions (expired above, only their temp files swept), the WAL (retired
#: by its appliers, ``lamina.ingest``) and the tags (removed by ``delete_tag`` only; temp files swept).
_OWNED_DIRS = tuple(d for d in TABLE_DIRS if d not in (VERSIONS_DIR, WAL_DIR, TAGS_DIR))


@dataclass(frozen=True)
class CleanupStats:
    versions_removed: int
    files_removed: int
    bytes_removed: int
    kept_versions: int
    #: Tagged versions whose files were kept for their tags (their roots under ``_versions/`` may be gone).
    tagged_versions: int = 0


#: Retentions shorter than this are refused unless the caller owns the risk (``enforce_retention=False``):
#: a writer between "data file written" and "manifest put", or a reader of a version that was the
#: latest until moments ago, would lose files.
MIN_RETENTION = dt.timedelta(hours=1)


def _retention_seconds(older_than: dt.timedelta | dt.datetime | float | int) -> float:
    if isinstance(older_than, dt.timedelta):
        seconds = older_than.total_seconds()
    elif isinstance(older_than, dt.datetime):
        ts = older_than if older_than.tzinfo else older_than.replace(tzinfo=dt.timezone.utc)
        seconds = time.time() - ts.timestamp()
    elif isinstance(older_than, (int, float)) and not isinstance(older_than, bool):
        seconds = float(older_than)
    else:
        raise InvalidArgument(f"older_than must be a timedelta, a datetime or seconds, not {type(older_than).__name__}")
    if not seconds >= 0:  # also refuses NaN
        raise InvalidArgument(f"older_than must not be negative or in the future ({seconds} s)")
    return seconds


def cleanup(
    store: ObjectStore, older_than: dt.timedelta | dt.datetime | float | int, *, enforce_retention: bool = True
) -> CleanupStats:
    """Removes versions that stopped being the latest more than ``older_than`` ago, then the files
    that no remaining version references and that are older than ``older_than``.

    A version's age is the time since its successor was committed (not its own commit time), so
    a version that was the latest a second ago is never expired, and readers that opened it keep
    their files for the whole retention. ``older_than`` below ``MIN_RETENTION`` raises unless
    ``enforce_retention=False`` says no writer or reader can be running.
    """
    seconds = _retention_seconds(older_than)
    if enforce_retention and seconds < MIN_RETENTION.total_seconds():
        raise InvalidArgument(
            f"cleanup of {store.uri} with older_than={seconds:g} s is below the {MIN_RETENTION} safety floor: a write "
            f"in progress or a reader of a recent version could lose its files. Use a retention longer than your "
            f"longest write, or pass enforce_retention=False if nothing reads or writes the table meanwhile"
        )
    cutoff = time.time() - seconds
    versions = list_versions(store)
    if not versions:
        return CleanupStats(0, 0, 0, 0)
    latest = versions[-1]
    table_uuid = load_manifest(store, latest).table_uuid
    # A version expires once its successor is older than the cutoff. Only a prefix of the history
    # goes (stop at the first version kept), so what is left is always contiguous.
    expired: list[int] = []
    for v, successor in zip(versions, versions[1:]):
        try:
            if load_manifest(store, successor, table_uuid).timestamp_ms / 1000 >= cutoff:
                break
        except TableReplaced:  # a table dropped here before this one was created (docs/FORMAT.md §9.1)
            pass
        expired.append(v)
    expired_set = set(expired)
    for v in expired:  # oldest first: a crash leaves a contiguous suffix of versions
        store.delete([manifest_path(v)])
        forget_manifest(store, v)
    # Versions committed while we worked are kept and their files protected.
    kept = [v for v in list_versions(store) if v not in expired_set]
    referenced: set[str] = set()
    for v in kept:
        try:
            referenced |= load_manifest(store, v, table_uuid).referenced_paths()
        except TableReplaced:  # a version of the table dropped here before (its tombstone): nothing of it is kept
            pass
    # Tagged versions keep their files; their roots live in the tags (``lamina.tags``), so theirs under
    # _versions/ expire like any other and the history there stays contiguous. Listed after the kept
    # versions: a tag whose version's root was still there once the tag was written (``create_tag``
    # checks it) is then always seen by a cleanup that does not see that root.
    try:
        tags = list_tags(store, table_uuid)
        for tag in tags:
            referenced |= tag.manifest(store).referenced_paths()
    except CorruptFile as e:
        raise CorruptFile(
            f"cleanup of {store.uri} removed {len(expired)} expired versions and stopped before removing any file: {e}"
        ) from None
    doomed, doomed_bytes = [], 0
    for prefix in _OWNED_DIRS:
        for obj in store.list(prefix):
            if obj.path not in referenced and obj.modified < cutoff:
                doomed.append(obj.path)
                doomed_bytes += obj.size
    # Stale temp files of interrupted local manifest and tag writes.
    for obj in (o for d in (VERSIONS_DIR, TAGS_DIR) for o in store.list(d)):
        if obj.path.rsplit("/", 1)[-1].startswith(".tmp-") and obj.modified < cutoff:
            doomed.append(obj.path)
            doomed_bytes += obj.size
    store.delete(doomed)
    tagged = len({t.version for t in tags})
    log.info(
        "cleanup of %s: removed %d versions and %d files (%d bytes); latest version %d kept, and the files of %d tagged versions",
        store.uri,
        len(expired),
        len(doomed),
        doomed_bytes,
        latest,
        tagged,
    )
    return CleanupStats(len(expired), len(doomed), doomed_bytes, len(kept), tagged)
