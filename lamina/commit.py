"""Committing a transaction: put-if-absent of the next version, rebase and retry on a lost race.

All commit retries live here, for every operation (a create is version 1 on the empty
table, version 0). A lost race is normal under concurrency: the loser reads every version
committed since its base, replays itself on top through the conflict matrix
(``Transaction.rebase``, which returns the replayed transaction) and tries the next
number. The deletion files a replay reads or writes come from here
(``lamina.deletion.StoredDeletionFiles``). Only an incompatible operation
(``CommitConflict``) or an exhausted retry budget ends the loop; a write whose outcome is
unknown is resolved by reading the version back and looking for this transaction's uuid.
"""

from __future__ import annotations

import logging
import time

from lamina.deletion import StoredDeletionFiles
from lamina.errors import (
    CommitConflict,
    CommitStateUnknown,
    CorruptFile,
    LaminaError,
    ObjectNotFound,
    SchemaMismatch,
    StorageError,
    TableReplaced,
)
from lamina.manifest import (
    Manifest,
    belongs_to,
    encode_manifest,
    latest_version,
    lay_out,
    manifest_path,
    remember_manifest,
    try_load_manifest,
    versions_from,
    write_latest_hint,
    write_segments,
)
from lamina.retry import Backoff
from lamina.store import ObjectStore
from lamina.transaction import DeletionFiles, Transaction, table_dropped

log = logging.getLogger("lamina.commit")

#: A transaction older than this checks that the files it wrote are still there before each put:
#: a write that outlived cleanup's retention may have had them removed (docs/FORMAT.md, cleanup).
VERIFY_FILES_AFTER_SECONDS = 15 * 60

#: Lost races are resolved by replaying, so the waits are short; many writers may contend.
COMMIT_BACKOFF = Backoff(base_seconds=0.01, cap_seconds=1.0, max_attempts=100)


def commit(
    store: ObjectStore, txn: Transaction, base: Manifest, *, backoff: Backoff = COMMIT_BACKOFF, abandon_on_conflict: bool = True
) -> Manifest:
    """Commits ``txn`` read at ``base``; returns the manifest it became.

    ``abandon_on_conflict=False`` keeps the written files after a CommitConflict, for a
    caller that will commit them again in another transaction.

    On CommitConflict, which guarantees nothing was committed, the files the transaction
    wrote are removed. After any other failure the outcome may be unknown, so they are
    left for ``Table.cleanup`` (which only removes files no version references).

    ``txn`` itself is never replayed (each rebase and prepare makes a new transaction); it
    only learns the outcome: ``txn.attempts``, and in ``txn.written`` the deletion files
    written while committing.
    """
    files = StoredDeletionFiles(store, on_write=txn.written.append)
    try:
        return _commit(store, txn, base, backoff, files)
    except CommitConflict:
        if abandon_on_conflict:
            _abandon(store, txn)
        raise
    except SchemaMismatch as e:  # nothing was committed, and these files can never be
        _abandon(store, txn)
        raise SchemaMismatch(f"{txn.operation} on table {store.uri}: {e}") from None


def _commit(store: ObjectStore, txn: Transaction, base: Manifest, backoff: Backoff, files: DeletionFiles) -> Manifest:
    checked = False
    current = txn  # txn as replayed onto the newest base
    for attempt in range(backoff.max_attempts):
        txn.attempts = attempt + 1
        try:
            base, current = catch_up(store, current, base, files)
            current = current.prepare(base, files)
        except ObjectNotFound as e:  # before any put: nothing was committed
            raise CommitConflict(
                f"{txn.operation} on table {store.uri} (read at version {txn.read_version}) needs a file that is gone "
                f"({e}); cleanup probably removed it with the versions it belonged to. Nothing was committed; "
                f"re-run the {txn.operation} on the latest version"
            ) from e
        new, segments = lay_out(current.apply(base))
        if not checked and time.time() - txn.started > VERIFY_FILES_AFTER_SECONDS:
            _check_written(store, txn, new)
            checked = True
        if segments:  # the manifest segments this version changed, before the root that names them
            txn.written.extend(p for p, _ in segments)
            write_segments(store, segments)
        path = manifest_path(new.version)
        try:
            won = store.put_if_absent(path, encode_manifest(new, laid_out=True))
        except StorageError as e:
            won = _resolve_unknown(store, txn, new.version, _incarnation(base, current), e)
        if won:
            if base.version and not current.creates and not store.exists(manifest_path(base.version)):
                _check_not_dropped(store, txn, new, [p for p, _ in segments])
            remember_manifest(store, new, [p for p, _ in segments])
            write_latest_hint(store, new.version)
            if attempt:
                log.debug("%s committed version %d of %s after %d lost races", txn.operation, new.version, store.uri, attempt)
            return new
        theirs = try_load_manifest(store, new.version, _incarnation(base, current))
        if theirs is not None and theirs.record.uuid == txn.uuid:
            return theirs  # an earlier attempt of this very request had landed
        if segments:  # another's version: nothing can name this attempt's segments (fresh uuids)
            _discard(store, txn, [p for p, _ in segments])
        backoff.sleep(attempt)
    raise CommitConflict(
        f"{txn.operation} on table {store.uri} lost the race for the next version {backoff.max_attempts} times "
        f"(read at version {txn.read_version}); nothing was committed: retry later or with fewer concurrent writers"
    )


def catch_up(store: ObjectStore, txn: Transaction, base: Manifest, files: DeletionFiles) -> tuple[Manifest, Transaction]:
    """Replays ``txn`` over every version committed after ``base``; returns the newest version
    and ``txn`` replayed onto it.

    A missing next version normally means ``base`` is the head, which one read confirms: ``base``
    itself must still be there, and be this table's (not a table created again at the URI that
    reached the same number). If it is gone, or a later version exists without
    the next one, ``cleanup`` removed history this operation read (or the table was dropped):
    writing the next number would put a manifest into history that is gone.

    The empty base of a create (version 0, or a dropped table's tombstone) is the head only while no
    version follows it.
    A tombstone (a dropped table, ``Manifest.dropped``) is never a base: meeting one, as ``base`` or
    after it, or as the latest version once the history before it was removed (a purge in progress),
    is ``TableDropped``.
    """
    while True:
        if base.dropped:
            raise table_dropped(txn, store.uri, base.version)
        theirs = try_load_manifest(store, base.version + 1, _incarnation(base, txn))
        if theirs is None and txn.creates:
            # A table is there if any version follows (its first ones may have been cleaned up).
            listed = versions_from(store, base.version + 1, 1)
            if not listed:
                return base, txn
            theirs = try_load_manifest(store, listed[0])
            if theirs is None:
                continue  # removed meanwhile: look again
        elif theirs is None and base.table_uuid and belongs_to(store, base.version, base.table_uuid):
            # ``base`` is still there and this table's, so nothing after it was cleaned up (cleanup
            # removes the oldest versions first): the head. One GET instead of a listing and a GET.
            return base, txn
        elif theirs is None:
            listed = versions_from(store, base.version, 2)
            if listed == [base.version]:
                # The head, if it is still this table's: a table dropped and created again may
                # have reached the same version number.
                if belongs_to(store, base.version, base.table_uuid):
                    return base, txn
                listed = []
            if not listed:
                raise TableReplaced(
                    f"{txn.operation} on table {store.uri} read version {txn.read_version}, but the table has no versions "
                    f"from {base.version} on any more, or they belong to a table created again at this URI: it was dropped. "
                    f"Nothing was committed; open the table again (lamina.open_table), or create it (lamina.create_table)"
                )
            # Versions are written in order (N+2 only by someone who read N+1), so a later version
            # with N+1 still missing on a second look means N+1 was removed, not that it is being written.
            theirs = try_load_manifest(store, base.version + 1, base.table_uuid)
            if theirs is None:
                dropped_at = _dropped_at(store, base.table_uuid)
                if dropped_at is not None:  # a purge removing the versions before its tombstone
                    raise table_dropped(txn, store.uri, dropped_at)
                first_removed = base.version + 1 if listed[0] == base.version else base.version
                first_kept = next(v for v in listed if v > base.version)
                kept = try_load_manifest(store, first_kept)
                gone = _ended_by(txn, store.uri, kept, base.table_uuid) if kept is not None else None
                if gone is not None:
                    raise gone
                raise CommitConflict(
                    f"{txn.operation} on table {store.uri} read version {txn.read_version}, but versions from "
                    f"{first_removed} up to {first_kept - 1} were cleaned up since; nothing was committed: reload the table "
                    f"and re-run the {txn.operation} (or run cleanup with an older_than longer than your longest write)"
                )
        try:
            _ = theirs.record  # decoded once, here, so that a malformed one names the table
        except CorruptFile as e:
            raise CorruptFile(f"{txn.operation} on table {store.uri}: {e}. Nothing was committed") from None
        txn = txn.rebase(theirs, files)
        base = theirs


def _dropped_at(store: ObjectStore, table_uuid: str) -> int | None:
    """The version of table ``table_uuid``'s tombstone, if its latest version is one."""
    latest = latest_version(store)
    head = try_load_manifest(store, latest) if latest is not None else None
    return head.version if head is not None and head.dropped and head.table_uuid == table_uuid else None


def _incarnation(base: Manifest, txn: Transaction) -> str | None:
    """The table uuid the versions after ``base`` must carry; none for the empty base of a create,
    whose table does not exist yet (whatever is stored there is read as it is)."""
    return None if txn.creates or not base.version else base.table_uuid


def _check_not_dropped(store: ObjectStore, txn: Transaction, new: Manifest, segments: list[str]) -> None:
    """After ``new`` landed though its base is gone: returns if cleanup removed the base (ours is the
    table's latest version, or one of its versions follows); raises ``TableDropped`` (or
    ``TableReplaced``) after removing ``new`` if the put landed below a drop's tombstone.

    That is a put whose check ran before the drop committed and which landed after the purge had removed
    that version number (docs/FORMAT.md §9.1). The tombstone stays, so ``new`` is below it: no reader
    sees it and no writer reads it, and removing it makes "nothing was committed" true; left there, its
    writer would go on extending it up to the tombstone.
    """
    latest = latest_version(store)
    head = try_load_manifest(store, latest) if latest is not None else None
    gone = _ended_by(txn, store.uri, head, new.table_uuid) if head is not None and head.version > new.version else None
    if gone is None:
        return
    log.warning("%s on %s landed version %d after a drop removed its base; removing it", txn.operation, store.uri, new.version)
    _discard(store, txn, [manifest_path(new.version), *segments])
    raise gone


def _ended_by(txn: Transaction, uri: str, m: Manifest, table_uuid: str) -> TableReplaced | None:
    """The error for ``txn`` if version ``m`` ends table ``table_uuid`` (its tombstone: ``TableDropped``; a
    version of a table created at the URI since: ``TableReplaced``); None if ``m`` is one of its live versions."""
    if m.table_uuid != table_uuid:
        return TableReplaced(
            f"{txn.operation} on table {uri} (read at version {txn.read_version}) cannot commit: the table was dropped "
            f"and created again at this URI (version {m.version} belongs to another table). Nothing was committed; "
            f"open the table again (lamina.open_table)"
        )
    return table_dropped(txn, uri, m.version) if m.dropped else None


def _resolve_unknown(store: ObjectStore, txn: Transaction, version: int, table_uuid: str | None, error: StorageError) -> bool:
    """After a failed put of ``version``: True if ours landed, False if another did."""
    try:
        theirs = try_load_manifest(store, version, table_uuid)
    except CommitConflict:
        raise
    except LaminaError as e:
        raise CommitStateUnknown(
            f"{txn.operation} on table {store.uri}: writing version {version} failed ({error}) and it cannot be read back ({e}); "
            f"reload the table and check whether version {version} holds transaction {txn.uuid} before retrying"
        ) from error
    if theirs is None:
        try:
            dropped_at = _dropped_at(store, table_uuid) if table_uuid is not None else None
        except LaminaError:
            dropped_at = None  # the store is failing: its own error says more
        if dropped_at is not None:  # a purge removed what this put needed (a temp file, the version's number)
            raise table_dropped(txn, store.uri, dropped_at) from error
        raise error  # nothing landed: a plain failure, the operation can be retried as a whole
    return theirs.record.uuid == txn.uuid


def _check_written(store: ObjectStore, txn: Transaction, new: Manifest) -> None:
    needed = new.referenced_paths()
    gone = [p for p in txn.written if p in needed and not store.exists(p)]
    if gone:
        raise CommitConflict(
            f"{txn.operation} on table {store.uri} (read at version {txn.read_version}) ran for "
            f"{time.time() - txn.started:.0f} s and {len(gone)} of the files it wrote are gone (e.g. {gone[0]}): "
            f"cleanup with a retention shorter than this write removed them. Nothing was committed; re-run the "
            f"{txn.operation} and keep cleanup's older_than longer than your longest write"
        )


def _discard(store: ObjectStore, txn: Transaction, paths: list[str]) -> None:
    """Removes files of a lost attempt that no version can name; best effort (cleanup removes the rest)."""
    try:
        store.delete(paths)
    except Exception as e:
        log.debug("could not remove %d files of a lost attempt on %s: %s", len(paths), store.uri, e)
        return
    gone = set(paths)
    txn.written[:] = [p for p in txn.written if p not in gone]


def _abandon(store: ObjectStore, txn: Transaction) -> None:
    if not txn.written:
        return
    try:
        store.delete(txn.written)
    except Exception as e:  # cleanup() removes them later; the original error matters more
        log.warning("could not remove %d files of the abandoned %s on %s: %s", len(txn.written), txn.operation, store.uri, e)
