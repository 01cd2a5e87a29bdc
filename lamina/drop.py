"""Dropping a table: a tombstone version committed like any write, then every object of the table, the tombstone last.

    purge(store)
      1. commit Drop: put-if-absent of version D over the latest  (the same race every writer runs,
                      so each commit lands before D or meets it)
      2. remove every other object of the layout (``TABLE_DIRS``): data, manifest segments, deletion
         files, indices, WAL, transaction sidecars, temp files (but a live writer's), the latest-version
         hint, then the versions before D, oldest first; listed again until a listing finds nothing
      3. remove the tombstone D

While step 2 runs every commit meets the tombstone (``TableDropped``); after step 3 a writer's base is
gone with nothing after it (``TableReplaced``), and the location is empty: a table created there is a
new one (version 1, another table uuid). A purge that stopped after step 1 is finished by running it
again (the latest version is then the tombstone). The one commit this cannot stop is one whose check
ran before D was committed and whose put lands after the purge removed that version number
(docs/FORMAT.md §9): a pause spanning the whole purge.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from lamina.commit import commit
from lamina.errors import TableReplaced
from lamina.manifest import (
    LATEST_HINT,
    TABLE_DIRS,
    VERSIONS_DIR,
    Manifest,
    belongs_to,
    forget_table,
    latest_version,
    load_manifest,
    manifest_path,
)
from lamina.store import ObjectInfo, ObjectStore
from lamina.transaction import Drop

log = logging.getLogger("lamina.drop")

#: Listings of the layout before the tombstone goes: objects a racing writer put while the previous
#: round was deleting (its commit then fails, but it may have stopped before removing its files).
PURGE_ROUNDS = 4
#: A local temp file (``.tmp-*``, a write on its way to its name) younger than this may be a live
#: writer's: it is left to that writer, which removes it whether its rename or link fails or not (removing
#: it under the writer would fail that write with a storage error instead of ``TableDropped``).
FRESH_TEMP_SECONDS = 60.0


@dataclass(frozen=True)
class DropStats:
    """What a purge did: the tombstone's version, and the objects it removed (the tombstone included)."""

    uri: str
    version: int
    objects_removed: int
    bytes_removed: int


def purge(store: ObjectStore) -> DropStats | None:
    """Drops the table at ``store`` and removes every object of its layout; None if there is no table.

    Safe to run again after a purge that stopped: a table whose latest version is a tombstone is not
    dropped again, only emptied. Objects outside the layout (a deeper table's) are never touched.
    """
    latest = latest_version(store)
    if latest is None:
        return None
    head = load_manifest(store, latest)
    tomb = head if head.dropped else _commit_drop(store, head)
    if tomb is None:
        return None
    return _remove(store, tomb)


def _commit_drop(store: ObjectStore, head: Manifest) -> Manifest | None:
    """The tombstone of ``head``'s table: ours, or another purge's if one committed first (None if that
    purge finished meanwhile: nothing of this table is left)."""
    try:
        return commit(store, Drop(head.version), head)
    except TableReplaced:  # dropped meanwhile (TableDropped), or already removed
        latest = latest_version(store)
        found = load_manifest(store, latest) if latest is not None else None
        if found is not None and found.dropped and found.table_uuid == head.table_uuid:
            return found
        return None


def _remove(store: ObjectStore, tomb: Manifest) -> DropStats:
    tomb_path = manifest_path(tomb.version)
    removed = size = 0
    for _ in range(PURGE_ROUNDS):
        doomed = _listed(store, tomb_path)
        if not doomed:
            break
        # Listed while the tombstone stood, so nothing listed can be a table created here since; if it
        # is gone, another purge of this drop finished first and the location is no longer ours.
        if not belongs_to(store, tomb.version, tomb.table_uuid):
            log.info("drop of %s: finished by another purge; %d objects removed here", store.uri, removed)
            return DropStats(store.uri, tomb.version, removed, size)
        store.delete(o.path for o in sorted(doomed, key=_order))
        removed += len(doomed)
        size += sum(o.size for o in doomed)
    else:
        left = len(_listed(store, tomb_path))
        if left:
            log.warning("drop of %s: %d objects written while it ran are left (unreferenced: a table created here "
                        "removes them at its cleanup)", store.uri, left)
    store.delete([tomb_path])
    forget_table(store, tomb.table_uuid)
    log.info("dropped %s at version %d: removed %d objects (%d bytes)", store.uri, tomb.version, removed + 1, size)
    return DropStats(store.uri, tomb.version, removed + 1, size)


def _listed(store: ObjectStore, tomb_path: str) -> list[ObjectInfo]:
    """Every object of the layout but the tombstone and the temp files live writers may still hold."""
    fresh = time.time() - FRESH_TEMP_SECONDS
    return [o for prefix in TABLE_DIRS for o in store.list(prefix)
            if o.path != tomb_path and not (o.path.rsplit("/", 1)[-1].startswith(".tmp-") and o.modified > fresh)]


def _order(o: ObjectInfo) -> tuple[int, int, str]:
    """Files first, then the latest-version hint (a hint surviving a gap in the versions would have a
    reader stop short of the tombstone), then the versions oldest first."""
    if not o.path.startswith(VERSIONS_DIR):
        return (0, 0, o.path)
    if o.path == LATEST_HINT:
        return (1, 0, o.path)
    name = o.path[len(VERSIONS_DIR):]
    number = name[: -len(".manifest")] if name.endswith(".manifest") else ""
    return (2, int(number), o.path) if number.isdigit() else (1, 1, o.path)
