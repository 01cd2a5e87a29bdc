"""Dropping a table: a tombstone version committed like any write, then every other object of the table.

    purge(store)
      1. commit Drop: put-if-absent of version D over the latest  (the same race every writer runs,
                      so each commit lands before D or meets it)
      2. remove every other object of the layout (``TABLE_DIRS``): data, manifest segments, deletion
         files, indices, WAL, transaction sidecars, tags, temp files (but a live writer's), the latest-version
         hint, then the versions before D, oldest first; listed again until a listing finds nothing,
         each round only while D is still the latest version
      the tombstone D stays: the location's one object

While step 2 runs, and after it, every commit meets the tombstone (``TableDropped``). The tombstone is
what closes the last window: a commit whose check ran before D was committed and whose put lands after
the purge removed that version number lands below D, finds its base gone, sees the tombstone above it,
removes its version and raises ``TableDropped`` (``lamina.commit``); had D been removed too, its version
would stand alone at the location and its writer would go on extending it. A table created at the URI
afterwards continues the numbering after D (``free_after``: version numbers are never reused at a URI).
A purge that stopped after step 1 is finished by running it again (the latest version is then the
tombstone).
"""

from __future__ import annotations

import dataclasses
import logging
import time
from dataclasses import dataclass

from lamina.commit import commit
from lamina.errors import TableExists, TableReplaced
from lamina.manifest import (
    LATEST_HINT,
    TABLE_DIRS,
    VERSIONS_DIR,
    Manifest,
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
    """What a purge did: the tombstone's version, and the objects it removed (the tombstone stays)."""

    uri: str
    version: int
    objects_removed: int
    bytes_removed: int


def purge(store: ObjectStore, *, keep_tombstone: bool = True) -> DropStats | None:
    """Drops the table at ``store`` and removes every object of its layout but the tombstone; None if
    there is no table (no version, or a dropped one whose purge finished).

    ``keep_tombstone=False`` removes the tombstone too, last: only for a table no other process can know of
    (a catalog's create that failed before any entry named its location), where no writer can race the drop.

    Safe to run again after a purge that stopped: a table whose latest version is a tombstone is not
    dropped again, only emptied. Objects outside the layout (a deeper table's) are never touched.
    """
    latest = latest_version(store)
    if latest is None:
        return None
    head = load_manifest(store, latest)
    listed = leftovers(store, head) if head.dropped else None
    if listed == []:
        return None
    tomb = head if head.dropped else _commit_drop(store, head)
    if tomb is None:
        return None
    stats = _remove(store, tomb, listed)
    if not keep_tombstone and not store.exists(manifest_path(tomb.version + 1)):
        store.delete([manifest_path(tomb.version)])
        stats = dataclasses.replace(stats, objects_removed=stats.objects_removed + 1)
    return stats


def free_after(store: ObjectStore) -> int:
    """The version a table created at ``store`` follows: 0 on an empty location, a dropped table's
    tombstone once its drop finished. ``TableExists`` while a table is there or its drop has not finished."""
    latest = latest_version(store)
    if latest is None:
        return 0
    head = load_manifest(store, latest)
    if not head.dropped:
        raise TableExists(f"a Lamina table already exists at {store.uri}; open it with lamina.open_table")
    left = leftovers(store, head)
    if left:  # never removes anything itself: a purge may be running
        raise TableExists(
            f"the table at {store.uri} is being dropped (its version {latest} is a tombstone) and {len(left)} of its "
            f"objects are not removed yet (e.g. {left[0].path}): run lamina.drop_table({store.uri!r}) to finish the "
            f"drop (safe while another drop runs), then create the table"
        )
    return head.version


def leftovers(store: ObjectStore, tomb: Manifest) -> list[ObjectInfo]:
    """What a drop at ``tomb`` has still to remove: every object of the layout but the tombstone and the
    temp files live writers may still hold."""
    tomb_path = manifest_path(tomb.version)
    fresh = time.time() - FRESH_TEMP_SECONDS
    return [
        o
        for prefix in TABLE_DIRS
        for o in store.list(prefix)
        if o.path != tomb_path and not (o.path.rsplit("/", 1)[-1].startswith(".tmp-") and o.modified > fresh)
    ]


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


def _remove(store: ObjectStore, tomb: Manifest, listed: list[ObjectInfo] | None = None) -> DropStats:
    """Step 2 of the drop at ``tomb``; ``listed``: its leftovers, if the caller listed them just now."""
    removed = size = 0
    for _ in range(PURGE_ROUNDS):
        doomed = leftovers(store, tomb) if listed is None else listed
        listed = None
        if not doomed:
            break
        # Listed while the tombstone was the latest version, so nothing listed can be a table created here
        # since (a create writes no file before its version, which follows the tombstone).
        if store.exists(manifest_path(tomb.version + 1)):
            log.info("drop of %s: a table was created there meanwhile; %d objects removed here", store.uri, removed)
            return DropStats(store.uri, tomb.version, removed, size)
        ordered = sorted((_order(o.path), o.path) for o in doomed)
        store.delete(path for (kind, _, _), path in ordered if kind < VERSION)
        for path in [path for (kind, _, _), path in ordered if kind == VERSION]:
            store.delete([path])  # one at a time, oldest first: a request removing many keys promises no order
        removed += len(doomed)
        size += sum(o.size for o in doomed)
    else:
        left = len(leftovers(store, tomb))
        if left:
            log.warning(
                "drop of %s: %d objects written while it ran are left (unreferenced: run lamina.drop_table again to remove them)",
                store.uri,
                left,
            )
    forget_table(store, tomb.table_uuid)
    log.info(
        "dropped %s at version %d: removed %d objects (%d bytes); the tombstone stays", store.uri, tomb.version, removed, size
    )
    return DropStats(store.uri, tomb.version, removed, size)


VERSION = 2  # the first element of ``_order`` for a version's manifest


def _order(path: str) -> tuple[int, int, str]:
    """Files first, then the latest-version hint (a hint surviving a gap in the versions would have a
    reader stop short of the tombstone), then the versions oldest first: a writer whose put lands after
    its version number was removed then always finds its base gone (``lamina.commit``)."""
    if not path.startswith(VERSIONS_DIR):
        return (0, 0, path)
    if path == LATEST_HINT:
        return (1, 0, path)
    name = path[len(VERSIONS_DIR) :]
    number = name[: -len(".manifest")] if name.endswith(".manifest") else ""
    return (VERSION, int(number), path) if number.isdigit() else (1, 1, path)
