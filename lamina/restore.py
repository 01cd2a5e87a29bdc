"""Restoring an earlier version: checked, committed as a new version, checked again (docs/FORMAT.md §9.2).

    version (a number or a tag) ─► its manifest (``_versions/`` or the tag's copy of the root)
        ─► every object it references still on storage?   no: VersionNotFound, nothing committed
        ─► commit ``Restore`` (a root naming the old version's segments, fragments and index files)
        ─► the object it was read from still there?        no: a cleanup raced it, the files are checked again

Why the second check: cleanup removes expired versions' roots, then lists the versions it keeps, then the
tags, then removes the files none of them needs. A root under ``_versions/`` still there after the restore
committed was removed, if ever, after that: every cleanup that removes it lists the kept versions later,
restore's included, and keeps the files. A tag still there after the commit is listed by every cleanup
but one that listed the versions before the commit and the tags after a ``delete_tag`` of that very tag:
the one window left (restore from a tag while deleting it and cleaning up).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from lamina.errors import CorruptFile, TagNotFound, VersionNotFound
from lamina.io_pool import map_fragments
from lamina.manifest import Manifest, forget_manifest, manifest_path
from lamina.store import ObjectStore
from lamina.tags import load_version
from lamina.transaction import Restore, Transaction

log = logging.getLogger("lamina.restore")

#: Up to this many objects are checked one HEAD each (in parallel); more, by listing their directories.
HEAD_AT_MOST = 1000


def restore(store: ObjectStore, base: Manifest, version: int | str, commit: Callable[[Transaction], Manifest]) -> Manifest:
    """Commits (through ``commit``, read at ``base``) a version equal to ``version`` (a number or a tag's
    name) of ``base``'s table; returns the new version's manifest.

    ``VersionNotFound`` (``TagNotFound`` for a tag), and nothing committed, if the version or an object it
    references is gone: cleanup removed it. Tagged versions keep their files.
    """
    if not isinstance(version, str):
        version = int(version)
        if not store.exists(manifest_path(version)):
            forget_manifest(store, version)  # this process may hold a root cleanup removed: a tag may still have it
    try:
        target, source, tag = load_version(store, version, base.table_uuid)
    except TagNotFound:
        raise
    except VersionNotFound:
        raise VersionNotFound(
            f"cannot restore table {store.uri} to version {version}: it is not on storage (never committed, or removed "
            f"by cleanup once it expired) and no tag names it. Nothing was committed; restore a tagged version (cleanup "
            f"keeps them: Table.tags()) or a newer one (Table.versions())"
        ) from None
    what = f"version {target.version}" + (f" (tag {tag!r})" if tag is not None else "")
    try:
        needed, missing = _missing(store, target)
    except CorruptFile as e:  # one of its manifest segments is unreadable
        raise VersionNotFound(
            f"cannot restore table {store.uri} to {what}: its manifest cannot be read ({e}). Nothing was committed; "
            f"restore a tagged version (cleanup keeps them: Table.tags()) or a newer one (Table.versions())"
        ) from None
    if missing:
        raise VersionNotFound(
            f"cannot restore table {store.uri} to {what}: {len(missing)} of the {len(needed)} objects it references "
            f"are gone (e.g. {missing[0]}), removed by cleanup since the version expired. Nothing was committed; "
            f"restore a tagged version (cleanup keeps them and their files: Table.tags(), Table.create_tag) or a "
            f"newer one (Table.versions())"
        )
    new = commit(Restore(base.version, target, tag))
    if not store.exists(source):
        gone = _absent(store, needed)
        if gone:
            raise CorruptFile(
                f"table {store.uri}: version {new.version}, the restore of {what}, lost {len(gone)} of its files "
                f"(e.g. {gone[0]}) to a cleanup that removed {what} while it was restored. Restore another version "
                f"(e.g. {new.version - 1}, the latest before it) with Table.restore"
            )
        log.warning(
            "%s of %s was removed by a cleanup while version %d restored it; its files were all there after the commit, "
            "but a cleanup that listed the versions before version %d may still remove some: run Table.verify() once "
            "it finished",
            what,
            store.uri,
            new.version,
            new.version,
        )
    return new


def _missing(store: ObjectStore, m: Manifest) -> tuple[list[str], list[str]]:
    """(the objects a restore of ``m`` needs, those of them not on storage). Its own record's files (a
    rewrite's mapping) are not needed: the restore's version has a record of its own."""
    segments = sorted({seg.path for seg in m.segments} | {lst.path for lst in m.segment_lists})
    gone = _absent(store, segments)
    if gone:  # its fragments cannot be listed without them
        return segments, gone
    needed = sorted(m.referenced_paths() - set(m.record.files))
    return needed, _absent(store, needed)


def _absent(store: ObjectStore, paths: list[str]) -> list[str]:
    """Those of ``paths`` not on storage."""
    if len(paths) <= HEAD_AT_MOST:
        return [p for p, there in zip(paths, map_fragments(store.exists, paths)) if not there]
    present = {o.path for d in sorted({p.split("/", 1)[0] + "/" for p in paths}) for o in store.list(d)}
    return [p for p in paths if p not in present]
