"""Transactions: what one operation changes, as a value, and how it replays over newer versions.

    operation ──► Transaction(read_version, changes)        Create, Append, Delete, WalFlush, Rewrite,
                     │                                       ChangeIndex, Overwrite, Configure, Restore, Drop
                     │  rebase(theirs, files) → Transaction  for every version committed since the read
                     │  prepare(base, files) → Transaction   writes the files that depend on the base (deletion merges)
                     ▼  apply(base) → Manifest               pure: the next version, carrying this operation's typed record
                  lamina.commit.commit()                     put-if-absent of version base+1, retry on a lost race

Rebase and prepare return new transactions, so the one a caller built is never replayed.
Replaying reads the other transaction from its typed record (``Manifest.record``,
``lamina.records``); whatever a rebase or prepare must read or write on storage (deletion
files) comes through the ``DeletionFiles`` the commit passes in, so this module does no I/O.

``MATRIX`` is the conflict matrix of docs/FORMAT.md §8 as data: for my operation
(row) over theirs (column, committed first), the rule that makes replaying
mine on top of theirs correct, or ``CONFLICT``.
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import time
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, TypeVar

import numpy as np
import pyarrow as pa

from lamina import evolution
from lamina.arrays import sorted_distinct
from lamina.errors import CommitConflict, SchemaMismatch, TableDropped, TableExists
from lamina.io_pool import map_fragments
from lamina.manifest import (
    DeletionFile,
    Fragment,
    FragmentList,
    IndexEntry,
    IndexSegment,
    Manifest,
    appended,
    edited,
    find_fragments,
    now_ms,
)
from lamina.records import (
    INDEX_ACTIONS,
    AddressMapping,
    AlterSchemaRecord,
    AppendRecord,
    ConfigureRecord,
    CreateRecord,
    DeleteRecord,
    DropRecord,
    IndexChangeRecord,
    MergeRecord,
    OverwriteRecord,
    RestoreRecord,
    RewriteRecord,
    RewrittenGroup,
    TransactionRecord,
    WalFlushRecord,
)

# Rules of the conflict matrix.
REBASE = "rebase"  # independent: replay as is
MERGE_DELETIONS = "merge deletions"  # union my new deletions with theirs
REMAP_DELETIONS = "remap deletions"  # map my deletions through their rewrite mapping
CARRY_DELETIONS = "carry deletions"  # carry their new deletions onto my outputs through my mapping
DISJOINT = "disjoint fragments"  # conflict only if we rewrote the same fragments
UNCOVER = "uncover"  # their rewritten fragments drop out of my index coverage
DISTINCT_NAMES = "distinct names"  # conflict only if the same index name
WATERMARKS = "watermarks"  # conflict only if they flushed WAL transactions I hold; else merge deletions
KEYS = "keys"  # conflict if their new rows hold a key I write (or they deleted a row I update); else merge deletions
LIVE_ROWS = "live rows"  # conflict if they deleted a row I update (it would come back); else merge deletions
UPDATED_ROWS = "updated rows"  # conflict if I delete a row they updated (its new version would stay); else merge deletions
COLUMNS = "columns"  # conflict if they dropped, renamed or altered the column my index is on
DROPPED = "dropped"  # they dropped the table: TableDropped, nothing is committed
CONFLICT = "conflict"

#: ``RewriteGroup.source_deletions`` marker: a concurrent delete removed the whole source fragment.
REMOVED = "<removed>"

OPERATIONS = (
    "append",
    "delete",
    "rewrite",
    "create_index",
    "overwrite",
    "wal_flush",
    "configure",
    "restore",
    "drop",
    "merge",
    "alter_schema",
)

MATRIX: dict[tuple[str, str], str] = {
    ("append", "append"): REBASE,
    ("append", "delete"): REBASE,
    ("append", "rewrite"): REBASE,
    ("append", "create_index"): REBASE,
    ("append", "overwrite"): CONFLICT,
    ("delete", "append"): REBASE,
    ("delete", "delete"): MERGE_DELETIONS,
    ("delete", "rewrite"): REMAP_DELETIONS,
    ("delete", "create_index"): REBASE,
    ("delete", "overwrite"): CONFLICT,
    ("rewrite", "append"): REBASE,
    ("rewrite", "delete"): CARRY_DELETIONS,
    ("rewrite", "rewrite"): DISJOINT,
    ("rewrite", "create_index"): REBASE,
    ("rewrite", "overwrite"): CONFLICT,
    ("create_index", "append"): REBASE,
    ("create_index", "delete"): REBASE,
    ("create_index", "rewrite"): UNCOVER,
    ("create_index", "create_index"): DISTINCT_NAMES,
    ("create_index", "overwrite"): CONFLICT,
    # An overwrite states the whole table: serializing it after anything is valid.
    ("overwrite", "append"): REBASE,
    ("overwrite", "delete"): REBASE,
    ("overwrite", "rewrite"): REBASE,
    ("overwrite", "create_index"): REBASE,
    ("overwrite", "overwrite"): REBASE,
    ("overwrite", "wal_flush"): REBASE,
    # A WAL flush is an append (new rows) plus a delete (older versions of upserted keys) that
    # also moves WAL watermarks; others treat it as both.
    ("append", "wal_flush"): REBASE,
    ("delete", "wal_flush"): MERGE_DELETIONS,
    ("rewrite", "wal_flush"): CARRY_DELETIONS,
    ("create_index", "wal_flush"): REBASE,
    ("wal_flush", "append"): REBASE,
    ("wal_flush", "delete"): MERGE_DELETIONS,
    ("wal_flush", "rewrite"): REMAP_DELETIONS,
    ("wal_flush", "create_index"): REBASE,
    ("wal_flush", "overwrite"): CONFLICT,
    ("wal_flush", "wal_flush"): WATERMARKS,
    # A restore states the whole table as an overwrite does (an earlier version's fragments, indices and
    # settings): it replays over anything, and over it replays what replays over an overwrite.
    **{("restore", op): REBASE for op in OPERATIONS if op not in ("configure", "drop")},
    ("append", "restore"): CONFLICT,
    ("delete", "restore"): CONFLICT,
    ("rewrite", "restore"): CONFLICT,
    ("create_index", "restore"): CONFLICT,
    ("overwrite", "restore"): REBASE,
    ("wal_flush", "restore"): CONFLICT,
    # A merge (Table.merge, Table.update) is new fragments plus deletions like a WAL flush, without watermarks;
    # its new rows replace rows it deletes, and a merge's rows are keyed (docs/FORMAT.md §8 says why each cell).
    ("merge", "append"): KEYS,
    ("merge", "delete"): LIVE_ROWS,
    ("merge", "rewrite"): REMAP_DELETIONS,
    ("merge", "create_index"): REBASE,
    ("merge", "overwrite"): CONFLICT,
    ("merge", "wal_flush"): KEYS,
    ("merge", "merge"): KEYS,
    ("append", "merge"): REBASE,
    ("delete", "merge"): UPDATED_ROWS,
    ("rewrite", "merge"): CARRY_DELETIONS,
    ("create_index", "merge"): REBASE,
    ("overwrite", "merge"): REBASE,
    ("wal_flush", "merge"): KEYS,
    ("merge", "restore"): CONFLICT,  # as over an overwrite: the rows it matched may be gone
    # A configure changes table settings only (e.g. clustering keys): independent of every data change,
    # and two configures apply in commit order, each setting only its own entries.
    **{("configure", op): REBASE for op in OPERATIONS if op not in ("drop", "alter_schema")},
    **{(op, "configure"): REBASE for op in OPERATIONS if op != "drop"},
    # A schema change writes no data: data files written in the schema before it are read through that
    # schema (docs/FORMAT.md §2.4), so writes replay over it; it replays over anything that keeps the
    # schema (and over another schema change: applied to the schema it finds). An index built on a column
    # changed meanwhile, a configure (clustering keys by name) or an overwrite / restore (another schema) conflict.
    **{("alter_schema", op): REBASE for op in OPERATIONS if op not in ("overwrite", "restore", "drop")},
    ("alter_schema", "overwrite"): CONFLICT,
    ("alter_schema", "restore"): CONFLICT,
    **{(op, "alter_schema"): REBASE for op in ("append", "delete", "rewrite", "overwrite", "wal_flush", "restore", "merge")},
    ("create_index", "alter_schema"): COLUMNS,
    ("configure", "alter_schema"): CONFLICT,
    # A drop ends the table: it replays over anything (the drop wins), and nothing replays over it.
    **{("drop", op): REBASE for op in OPERATIONS if op != "drop"},
    **{(op, "drop"): DROPPED for op in OPERATIONS},
}


class DeletionFiles(Protocol):
    """A table's deletion files (docs/FORMAT.md §5) as a commit lends them to its transaction: all
    that a rebase or prepare reads or writes on storage goes through this
    (``lamina.deletion.StoredDeletionFiles`` is the one on a store)."""

    @property
    def uri(self) -> str:
        """The table they belong to (named in errors)."""
        ...

    def read(self, fragment: Fragment) -> np.ndarray:
        """Sorted uint32 offsets deleted from ``fragment``, checked against the manifest."""
        ...

    def read_file(self, path: str | None) -> np.ndarray:
        """Sorted uint32 offsets held by the deletion file at ``path`` (empty for None)."""
        ...

    def write(self, fragment_id: int, offsets: np.ndarray) -> DeletionFile:
        """Writes a new deletion file holding ``offsets`` (sorted, unique uint32)."""
        ...

    def read_mapping(self, path: str) -> AddressMapping:
        """The rewrite mapping held by the mapping file at ``path`` (docs/FORMAT.md §6)."""
        ...

    def read_columns(self, fragment: Fragment, schema: pa.Schema, columns: list[str]) -> pa.Table:
        """``columns`` of the live rows of ``fragment`` (a merge reads a concurrent writer's new keys)."""
        ...


def _conflict(mine: Transaction, theirs: Manifest, table: str, why: str) -> CommitConflict:
    op = theirs.record.operation
    return CommitConflict(
        f"{mine.operation} on table {table} (read at version {mine.read_version}) conflicts with the {op} "
        f"committed as version {theirs.version}: {why}. Nothing was committed; re-run the {mine.operation} on the latest version"
    )


def table_dropped(mine: Transaction, table: str, drop_version: int) -> TableDropped:
    """The error of ``mine`` meeting the tombstone committed as ``drop_version``."""
    return TableDropped(
        f"{mine.operation} on table {table} (read at version {mine.read_version}) cannot commit: the table was dropped at "
        f"version {drop_version} and its files are removed (or being removed). Nothing was committed; create the table again "
        f"(lamina.create_table), or open the one created at this URI since (lamina.open_table)"
    )


T = TypeVar("T", bound="Transaction")
_D = TypeVar("_D", bound="Delete")


class Transaction(abc.ABC):
    """One operation's changes, replayable on top of newer versions.

    A transaction is a value: ``rebase`` and ``prepare`` return a new transaction and leave
    this one as it was, ``apply`` is pure. What ``lamina.commit.commit`` records on the
    transaction it was given is only its outcome: ``attempts``, and in ``written`` the files
    its prepares wrote (so a caller can report retries, and an abandoned commit its files).
    """

    operation: ClassVar[str]
    #: A create: its base is the empty table, not a stored version (``Create``).
    creates: ClassVar[bool] = False

    def __init__(self, read_version: int, started: float | None = None):
        self.uuid = uuid.uuid4().hex
        self.read_version = read_version
        #: Files written for this transaction (the commit adds those its prepares write); removed if it is abandoned.
        self.written: list[str] = []
        #: Put attempts the commit took (1 when it won the first race).
        self.attempts = 0
        #: When its first file was written (epoch seconds): pass it if files were written before the
        #: transaction was built and are not new fragments (e.g. index segments).
        self._started = time.time() if started is None else started

    def new_fragments(self) -> list[Fragment]:
        """The fragments this transaction adds (empty for most)."""
        return []

    @property
    def started(self) -> float:
        """When writing its oldest file began: a long write re-checks its files before committing."""
        return min([self._started] + [f.written_at for f in self.new_fragments() if f.written_at is not None])

    def rebase(self, theirs: Manifest, files: DeletionFiles) -> Transaction:
        """This transaction replayed on top of ``theirs`` (the version committed after its base),
        by the conflict matrix; CommitConflict if it cannot be."""
        if theirs.dropped:  # the root says it, whatever its record (a newer writer's operation included)
            raise table_dropped(self, files.uri, theirs.version)
        their_op = theirs.record.operation
        if their_op == "create":
            raise _conflict(self, theirs, files.uri, "the table was created again")
        rule = MATRIX.get((self.operation, their_op), CONFLICT)
        if rule == DROPPED:
            raise table_dropped(self, files.uri, theirs.version)
        if rule == CONFLICT:
            raise _conflict(self, theirs, files.uri, f"{self.operation} cannot be replayed over {their_op}")
        return self._rebase(rule, theirs, files)

    def _rebase(self, rule: str, theirs: Manifest, files: DeletionFiles) -> Transaction:
        """Applies a non-conflicting rule; the default, REBASE, changes nothing."""
        return self

    def prepare(self, base: Manifest, files: DeletionFiles) -> Transaction:
        """This transaction with the files that depend on ``base`` written (before every attempt)."""
        return self

    @abc.abstractmethod
    def apply(self, base: Manifest) -> Manifest:
        """The next version: pure, no I/O."""

    def _replace(self: T, **changes: Any) -> T:
        """A copy with ``changes``: how rebase and prepare return new values."""
        new = copy.copy(self)
        new.__dict__.update(changes)
        return new

    def _header(self) -> dict[str, Any]:
        """The fields every record of this transaction starts with (docs/FORMAT.md §6)."""
        return {"uuid": self.uuid, "read_version": self.read_version, "timestamp_ms": now_ms()}

    def _next(
        self, base: Manifest, record: TransactionRecord, *, removes: bool = True, forgets: bool = True, **changes: Any
    ) -> Manifest:
        """The next version, produced by ``record``; index segments that no longer serve a live fragment
        are dropped (not looked for when the transaction ``removes`` no fragment: that costs a pass over
        every fragment, the largest cost of a small append to a large table), and so are earlier schemas
        no fragment is written in any more (looked for only when ``forgets``: it may have removed the
        last fragment of an earlier schema; a delete that removes none reads no more manifest segments
        on a table whose schema changed than on one whose schema never did)."""
        nxt = base.replace(version=base.version + 1, timestamp_ms=now_ms(), transaction=record.to_json(), **changes)
        if not removes or not (nxt.indices or (nxt.schemas and forgets)):
            return nxt
        live: dict[int, int] = {f.id: f.schema_id for f in nxt.fragments}
        if nxt.schemas:  # earlier schemas no fragment is written in any more are forgotten
            used = set(live.values())
            if not used.issuperset(nxt.schemas):
                nxt = nxt.replace(schemas={k: v for k, v in nxt.schemas.items() if k in used})
        return nxt.replace(indices=tuple(ix.prune(live) for ix in nxt.indices))


def check_schema(f: Fragment, base: Manifest, schemas: dict[int, pa.Schema], *, adopt: bool = True) -> Fragment:
    """``f`` naming the schema its data file was written in, one of ``schemas`` (the table's by id:
    ``Manifest.schema_registry``); refuses a fragment written in a schema the table does not have.

    A commit is the last place a fragment can be stopped before it makes the table unreadable:
    whatever path wrote it (append, WAL flush, compaction), its schema must be one of the table's,
    today's or an earlier one read through field ids (``lamina.evolution``). ``adopt``: a schema the table
    had when the write read it but no fragment used since (so a commit forgot it) is taken back into
    ``schemas`` under a new id. Its field ids are the table's: a write never replays over an overwrite or
    restore (the conflict matrix), the only commits that start field ids afresh.
    """
    if f.schema is None:
        raise SchemaMismatch(
            f"new fragment {f.path} does not say which schema its data file was written in; "
            "fragments must come from lamina.datafile.write_fragment or carry their schema"
        )
    # Today's first, then the newest: should two ids hold one physical schema, new files are today's, so
    # that compaction (which copies chunks only within one schema id and converges old ids) sees them so.
    order = sorted(schemas, key=lambda sid: (sid == base.schema_id, sid), reverse=True)
    for sid in order:
        schema = schemas[sid]
        if evolution.same(f.schema, schema):
            return dataclasses.replace(f, schema_id=sid, schema=schema)
    today, version = base.schema, base.version
    if adopt and base.next_field_id is not None and evolution.next_field_id(f.schema) <= base.next_field_id:
        sid = max(schemas) + 1
        schemas[sid] = f.schema
        return dataclasses.replace(f, schema_id=sid)

    def show(s: Any) -> str:
        return ", ".join(f"{x.name}: {x.type}" for x in s)

    raise SchemaMismatch(
        f"data file {f.path} was written with schema ({show(f.schema)}) but the table has schema ({show(today)}) "
        f"at version {version}: the table's schema changed since the data was written. Nothing was committed; "
        f"read the table again and write the data in its current schema"
    )


def _registered(base: Manifest, registry: dict[int, pa.Schema]) -> dict[str, Any]:
    """The ``schemas`` change of a commit whose fragments brought earlier schemas back (``check_schema``)."""
    if len(registry) == len(base.schemas) + 1:
        return {}
    return {"schemas": {k: v for k, v in registry.items() if k != base.schema_id}}


def assign_ids(
    base: Manifest, fragments: Iterable[Fragment], registry: dict[int, pa.Schema], *, adopt: bool = True
) -> tuple[list[Fragment], int, int]:
    """Gives new fragments ids (and stable row ids when the table keeps them), after checking each
    against the schemas the table will have, ``registry`` (``check_schema`` may add to it)."""
    next_id, next_row = base.next_fragment_id, base.next_row_id
    out = []
    for f in fragments:
        f = check_schema(f, base, registry, adopt=adopt)
        row_ids = f.row_ids
        if base.stable_row_ids and row_ids is None:
            row_ids = ((next_row, next_row + f.rows),)
            next_row += f.rows
        out.append(dataclasses.replace(f, id=next_id, row_ids=row_ids if base.stable_row_ids else None))
        next_id += 1
    return out, next_id, next_row


class Create(Transaction):
    """A new table without rows, committed on the empty table ``base``: version 1 on an empty location;
    after a dropped table's tombstone (``after``, its version), the version after it (docs/FORMAT.md §9.1:
    version numbers are never reused at a URI, so no writer of the dropped table can land a version in
    the new table's history).

    A create is never replayed: any version where it would commit means a table is there.
    """

    operation = "create"
    creates = True

    def __init__(
        self,
        schema: Any,
        *,
        primary_key: Iterable[str] = (),
        stable_row_ids: bool = False,
        config: dict[str, Any] | None = None,
        after: int = 0,
    ):
        super().__init__(after)
        #: The table before it existed (version ``after``), with this create's settings and a new table uuid.
        self.base = Manifest(
            version=after,
            timestamp_ms=0,
            schema=schema,
            fragments=(),
            next_fragment_id=0,
            next_row_id=0,
            primary_key=tuple(primary_key),
            stable_row_ids=bool(stable_row_ids),
            config=dict(config or {}),
            table_uuid=uuid.uuid4().hex,
        )

    def rebase(self, theirs: Manifest, files: DeletionFiles) -> Create:
        raise TableExists(f"a Lamina table was created at {files.uri} concurrently; open it with lamina.open_table")

    def apply(self, base: Manifest) -> Manifest:
        if base.version != self.read_version:
            raise CommitConflict(
                f"a create commits on the empty table (version {self.read_version}), not on version {base.version}"
            )
        return self._next(base, CreateRecord(**self._header()))


class Append(Transaction):
    """New fragments added after the existing ones."""

    operation = "append"

    def __init__(self, read_version: int, fragments: list[Fragment]):
        super().__init__(read_version)
        self.fragments = fragments
        self.written = [f.path for f in fragments]

    def new_fragments(self) -> list[Fragment]:
        return self.fragments

    def apply(self, base: Manifest) -> Manifest:
        registry = base.schema_registry()
        new, next_id, next_row = assign_ids(base, self.fragments, registry)
        return self._next(
            base,
            AppendRecord(**self._header(), fragment_ids=tuple(f.id for f in new), rows=sum(f.rows for f in new)),
            removes=False,
            fragments=appended(base.fragments, new, next_id, next_row),
            next_fragment_id=next_id,
            next_row_id=next_row,
            **_registered(base, registry),
        )


def remap_offsets(deltas: dict[int, np.ndarray], record: RewriteRecord, files: DeletionFiles) -> dict[int, np.ndarray]:
    """``deltas`` (fragment id -> offsets) with the offsets in fragments ``record`` rewrote moved through its
    mapping onto its new fragments (offsets of rows the rewrite dropped, and of outputs never committed, go)."""
    deltas = dict(deltas)
    moved: dict[int, list[np.ndarray]] = {}
    for group in record.groups:
        new_ids = group.new_fragment_ids
        if not deltas.keys() & set(group.old_fragment_ids):
            continue
        mapping = group.mapping if group.mapping is not None else files.read_mapping(str(group.mapping_file))
        for old in group.old_fragment_ids:
            if old in deltas:
                outs, offs = mapping.map(old, deltas.pop(old))
                for out in np.unique(outs).tolist():
                    if new_ids[out] < 0:
                        continue  # that output was never committed: all its rows were deleted
                    moved.setdefault(new_ids[out], []).append(offs[outs == out].astype(np.uint32))
    for fid, parts in moved.items():
        merged = np.concatenate([deltas.get(fid, np.zeros(0, np.uint32))] + parts)
        deltas[fid] = np.unique(merged.astype(np.uint32))
    return deltas


class Delete(Transaction):
    """New deleted offsets per fragment, merged into the fragments' deletion files.

    The rows it deleted are in its record once committed (``DeleteRecord.rows``).
    """

    operation = "delete"

    def __init__(self, read_version: int, deltas: dict[int, np.ndarray], predicate: str = ""):
        super().__init__(read_version)
        self.deltas: dict[int, np.ndarray] = {
            fid: sorted_distinct(np.asarray(o, dtype=np.uint32)) for fid, o in deltas.items() if len(o)
        }
        self.predicate = predicate
        # Set by prepare, carried from attempt to attempt: fid -> (deletion path it was merged with, file written).
        self._files: dict[int, tuple[str | None, DeletionFile]] = {}
        self._rows_deleted = 0

    def _rebase(self: _D, rule: str, theirs: Manifest, files: DeletionFiles) -> _D:
        deltas = dict(self.deltas)
        if rule == UPDATED_ROWS:
            self._check_not_updated(theirs, files)
        elif rule == REMAP_DELETIONS:
            record = theirs.record
            assert isinstance(record, RewriteRecord)
            deltas = remap_offsets(deltas, record, files)
        # Fragments gone from theirs (fully deleted) need nothing more from me.
        live = find_fragments(theirs.fragments, deltas)
        return self._replace(deltas={fid: d for fid, d in deltas.items() if fid in live})

    def _check_not_updated(self, theirs: Manifest, files: DeletionFiles) -> None:
        """CommitConflict if a row I delete was deleted by their merge in a fragment where it updated rows:
        their new version of it would stay (conservative: the merge may have deleted it, not updated it)."""
        record = theirs.record
        assert isinstance(record, MergeRecord)
        shared = sorted(set(record.updated_fragment_ids) & self.deltas.keys())
        frags = find_fragments(theirs.fragments, shared)
        for fid in shared:
            mine, frag = self.deltas[fid], frags.get(fid)
            hit = mine if frag is None else mine[np.isin(mine, files.read(frag))]
            if len(hit):
                raise _conflict(
                    self,
                    theirs,
                    files.uri,
                    f"its {record.kind} updated rows of fragment {fid}, the row at offset {int(hit[0])} this deletes among "
                    f"them perhaps (its new version would stay)",
                )

    def prepare(self, base: Manifest, files: DeletionFiles) -> Delete:
        frags = find_fragments(base.fragments, self.deltas)
        prepared = dict(self._files)
        rows_deleted = 0
        writes: list[tuple[int, str | None, np.ndarray]] = []  # (fragment, its deletion file now, offsets)
        for fid, delta in self.deltas.items():
            frag = frags.get(fid)
            if frag is None:
                continue
            current = frag.deletion.path if frag.deletion else None
            existing = files.read(frag)
            merged = sorted_distinct(np.concatenate([existing, delta]).astype(np.uint32))
            rows_deleted += len(merged) - len(existing)
            cached = prepared.get(fid)
            if cached is not None and cached[0] == current:
                continue
            if len(merged) == len(existing):
                prepared.pop(fid, None)  # everything I delete is already deleted
                continue
            if len(merged) >= frag.rows:
                prepared[fid] = (current, DeletionFile("", len(merged)))  # fragment disappears
                continue
            writes.append((fid, current, merged))
        # Side by side: on a local disk each file is a put with its own fsyncs, which overlap.
        written = map_fragments(lambda w: files.write(w[0], w[2]), writes)
        for (fid, current, _), file in zip(writes, written):
            prepared[fid] = (current, file)
        return self._replace(_files=prepared, _rows_deleted=rows_deleted)

    def _deleted(self, base: Manifest, next_fragment_id: int, next_row_id: int) -> tuple[Any, list[int], list[int], bool]:
        """(fragments with my deletion files, ids removed entirely, ids touched, whether a fragment removed
        was written in an earlier schema: only then may a schema be left without fragments)."""
        removed: list[int] = []
        touched: list[int] = []
        earlier: list[int] = []

        def edit(f: Fragment) -> Fragment | None:
            entry = self._files.get(f.id)
            if entry is None or f.id not in self.deltas:
                return f
            if entry[1].path == "":
                removed.append(f.id)
                if f.schema_id != base.schema_id:
                    earlier.append(f.id)
                return None
            touched.append(f.id)
            return dataclasses.replace(f, deletion=entry[1])

        fragments = edited(base.fragments, edit, next_fragment_id, next_row_id, touches=self._files)
        return fragments, removed, touched, bool(earlier)

    def apply(self, base: Manifest) -> Manifest:
        fragments, removed, touched, forgets = self._deleted(base, base.next_fragment_id, base.next_row_id)
        return self._next(
            base,
            DeleteRecord(
                **self._header(),
                predicate=self.predicate,
                fragment_ids=tuple(touched),
                removed_fragment_ids=tuple(removed),
                rows=self._rows_deleted,
            ),
            fragments=fragments,
            forgets=forgets,
        )


class WalFlush(Delete):
    """A WAL applier's flush: new fragments, deletions of the older versions of the keys they
    upsert or delete (merge-on-write), and the WAL watermarks they move, in one commit.

    ``starts`` are the watermarks the applier started from; a concurrent flush that moved any
    of them (another applier flushed the same WAL transactions) is a conflict, so no WAL
    transaction is ever committed twice. ``keys``: the primary keys it upserts or deletes; a
    concurrent merge whose new rows hold one of them is a conflict (both would keep a version).
    """

    operation = "wal_flush"

    def __init__(
        self,
        read_version: int,
        fragments: list[Fragment],
        deltas: dict[int, np.ndarray],
        watermarks: dict[str, int],
        starts: dict[str, int],
        keys: pa.Array | None = None,
    ):
        super().__init__(read_version, deltas, predicate="")
        self.fragments = fragments
        self.watermarks = dict(watermarks)
        self.starts = dict(starts)
        self.keys = keys
        self.written += [f.path for f in fragments]

    def new_fragments(self) -> list[Fragment]:
        return self.fragments

    def _rebase(self, rule: str, theirs: Manifest, files: DeletionFiles) -> WalFlush:
        if rule == WATERMARKS:
            moved = sorted(k for k in self.watermarks if theirs.wal_watermarks.get(k, 0) > self.starts.get(k, 0))
            if moved:
                raise _conflict(self, theirs, files.uri, f"WAL segments {moved} were flushed by another applier")
            rule = MERGE_DELETIONS
        elif rule == KEYS:
            self._check_keys(theirs, files)
            rule = MERGE_DELETIONS
        return super()._rebase(rule, theirs, files)

    def _check_keys(self, theirs: Manifest, files: DeletionFiles) -> None:
        """CommitConflict if their merge's new rows hold a key this flush upserts or deletes."""
        pk = theirs.primary_key
        if self.keys is None or len(pk) != 1:
            if self.deltas:  # keys it supersedes, but not which: nothing to tell a collision by
                raise _conflict(self, theirs, files.uri, "this flush replaces rows but does not say their keys")
            return
        try:
            keys = pa.table({pk[0]: self.keys.cast(theirs.schema.field(pk[0]).type)})
        except (pa.ArrowException, KeyError) as e:
            raise _conflict(self, theirs, files.uri, f"its keys cannot be compared with this flush's ({e})") from None
        shared = shared_key(theirs, files, new_fragment_ids(theirs.record), keys)
        if shared is not None:
            raise _conflict(self, theirs, files.uri, f"its new rows hold key {shared}, which this flush writes too")

    def apply(self, base: Manifest) -> Manifest:
        behind = sorted(k for k in self.watermarks if base.wal_watermarks.get(k, 0) != self.starts.get(k, 0))
        if behind:
            raise CommitConflict(f"WAL segments {behind} moved since this flush read them; nothing was committed")
        registry = base.schema_registry()
        new, next_id, next_row = assign_ids(base, self.fragments, registry)
        fragments, removed, touched, forgets = self._deleted(base, next_id, next_row)
        record = WalFlushRecord(
            **self._header(),
            fragment_ids=tuple(f.id for f in new),
            rows=sum(f.rows for f in new),
            deleted_fragment_ids=tuple(touched),
            removed_fragment_ids=tuple(removed),
            rows_deleted=self._rows_deleted,
            watermarks=dict(self.watermarks),
        )
        return self._next(
            base,
            record,
            fragments=appended(fragments, new, next_id, next_row),
            next_fragment_id=next_id,
            next_row_id=next_row,
            wal_watermarks={**base.wal_watermarks, **self.watermarks},
            forgets=forgets,
            **_registered(base, registry),
        )


def new_fragment_ids(record: TransactionRecord) -> tuple[int, ...]:
    """The fragments a committed transaction added (appends, WAL flushes, merges)."""
    if isinstance(record, (AppendRecord, WalFlushRecord, MergeRecord)):
        return record.fragment_ids
    return ()


def deleted_fragment_ids(record: TransactionRecord) -> set[int]:
    """The fragments a committed transaction deleted rows of (given a new deletion file, or removed)."""
    if isinstance(record, DeleteRecord):
        return set(record.fragment_ids) | set(record.removed_fragment_ids)
    if isinstance(record, (WalFlushRecord, MergeRecord)):
        return set(record.deleted_fragment_ids) | set(record.removed_fragment_ids)
    return set()


def shared_key(theirs: Manifest, files: DeletionFiles, fragment_ids: Iterable[int], keys: pa.Table) -> dict[str, Any] | None:
    """A key of ``keys`` (a table of key columns) held by a live row of one of ``theirs``' fragments
    ``fragment_ids``, or None; their key columns are read one fragment at a time."""
    frags = find_fragments(theirs.fragments, fragment_ids)
    names = keys.column_names
    for fid in sorted(frags):
        rows = files.read_columns(frags[fid], theirs.schema, names)
        if rows.num_rows:
            hit = rows.cast(keys.schema).join(keys, names, join_type="left semi")
            if hit.num_rows:
                found: dict[str, Any] = hit.slice(0, 1).to_pylist()[0]
                return found
    return None


class Merge(Delete):
    """Rows rewritten by key (``Table.merge``, ``kind="merge"``) or by filter (``Table.update``, ``kind="update"``):
    new fragments holding the updated and inserted rows, and the deletion of the rows' old versions
    (``replaced``, fragment id -> offsets) and of the rows deleted, in one commit. A WAL flush without
    watermarks, whose rows are keyed by ``keys`` (a merge's source keys, a table of the ``on`` columns;
    None for an update).

    Replayed over a concurrent commit (docs/FORMAT.md §8): new rows of theirs holding one of ``keys``
    conflict (the table would hold the key twice), and so does a row of ``replaced`` they deleted (the
    update would bring it back); the rest of their deletions merge with mine.
    """

    operation = "merge"

    def __init__(
        self,
        read_version: int,
        fragments: list[Fragment],
        deltas: dict[int, np.ndarray],
        replaced: dict[int, np.ndarray],
        *,
        kind: str = "merge",
        on: Sequence[str] = (),
        keys: pa.Table | None = None,
        predicate: str = "",
        inserted: int = 0,
    ):
        super().__init__(read_version, deltas, predicate=predicate)
        self.fragments = list(fragments)
        self.replaced: dict[int, np.ndarray] = {
            fid: sorted_distinct(np.asarray(o, dtype=np.uint32)) for fid, o in replaced.items() if len(o)
        }
        assert all(fid in self.deltas for fid in self.replaced), "a row a merge replaces is one it deletes"
        self.kind = kind
        self.on = tuple(on)
        self.keys = keys
        self.inserted = inserted
        self.written += [f.path for f in self.fragments]

    def new_fragments(self) -> list[Fragment]:
        return self.fragments

    @property
    def updated(self) -> int:
        """Rows it updates: each replaced row has its new version in the new fragments."""
        return sum(len(o) for o in self.replaced.values())

    def _rebase(self, rule: str, theirs: Manifest, files: DeletionFiles) -> Merge:
        if rule in (KEYS, LIVE_ROWS):
            if rule == KEYS:
                self._check_keys(theirs, files)
            self._check_live(theirs, files)
            rule = MERGE_DELETIONS
        replaced = self.replaced
        if rule == REMAP_DELETIONS:
            record = theirs.record
            assert isinstance(record, RewriteRecord)
            replaced = remap_offsets(replaced, record, files)
            if sum(len(o) for o in replaced.values()) != self.updated:
                raise _conflict(self, theirs, files.uri, f"rows this {self.kind} updates are gone from the rewritten fragments")
        new = super()._rebase(rule, theirs, files)
        return new._replace(replaced={fid: o for fid, o in replaced.items() if fid in new.deltas})

    def _check_keys(self, theirs: Manifest, files: DeletionFiles) -> None:
        if self.keys is None or not self.keys.num_rows:
            return
        shared = shared_key(theirs, files, new_fragment_ids(theirs.record), self.keys)
        if shared is not None:
            raise _conflict(self, theirs, files.uri, f"its new rows hold key {shared}, which this merge writes too")

    def _check_live(self, theirs: Manifest, files: DeletionFiles) -> None:
        shared = sorted(deleted_fragment_ids(theirs.record) & self.replaced.keys())
        frags = find_fragments(theirs.fragments, shared)
        for fid in shared:
            mine, frag = self.replaced[fid], frags.get(fid)
            hit = mine if frag is None else mine[np.isin(mine, files.read(frag))]
            if len(hit):
                where = f"fragment {fid}, offset {int(hit[0])}"
                raise _conflict(
                    self,
                    theirs,
                    files.uri,
                    f"it deleted a row this {self.kind} updates ({where}): the update would bring it back",
                )

    def apply(self, base: Manifest) -> Manifest:
        registry = base.schema_registry()
        new, next_id, next_row = assign_ids(base, self.fragments, registry)
        fragments, removed, touched, forgets = self._deleted(base, next_id, next_row)
        record = MergeRecord(
            **self._header(),
            kind=self.kind,
            on=self.on,
            predicate=self.predicate,
            fragment_ids=tuple(f.id for f in new),
            rows=sum(f.rows for f in new),
            deleted_fragment_ids=tuple(touched),
            removed_fragment_ids=tuple(removed),
            updated_fragment_ids=tuple(sorted(self.replaced)),
            rows_deleted=self._rows_deleted,
            inserted=self.inserted,
            updated=self.updated,
            # rows deleted outright: newly deleted rows that are not old versions of updated rows
            deleted=max(0, self._rows_deleted - self.updated),
        )
        return self._next(
            base,
            record,
            fragments=appended(fragments, new, next_id, next_row),
            next_fragment_id=next_id,
            next_row_id=next_row,
            forgets=forgets,
            **_registered(base, registry),
        )


@dataclass(frozen=True)
class RewriteGroup:
    """Fragments ``old_fragment_ids`` replaced by ``new_fragments``, rows moving per ``mapping``
    (whose ``output`` is an index into ``new_fragments``)."""

    old_fragment_ids: tuple[int, ...]
    new_fragments: list[Fragment]
    mapping: AddressMapping
    #: For each old fragment, the deletion file the rewrite read (deletions it materialized).
    source_deletions: dict[int, str | None] = field(default_factory=dict)
    #: Deletions committed by others after the read, carried onto outputs: output -> offsets.
    carried: dict[int, np.ndarray] = field(default_factory=dict)
    #: Index segments built over ``new_fragments`` (ordinal = output position), by index
    #: name: (index uuid, segment). Attached in the same commit if that index still exists.
    index_segments: dict[str, tuple[str, IndexSegment]] = field(default_factory=dict)
    #: ``mapping`` written to a mapping file (more than ``MAPPING_INLINE_RUNS`` runs): the record names it.
    mapping_file: str | None = None

    def carry(self, theirs: Manifest, files: DeletionFiles) -> RewriteGroup:
        """This group with the deletions committed on its sources since it read them (by ``theirs``)
        mapped onto its outputs."""
        frags = find_fragments(theirs.fragments, set(self.source_deletions) | set(self.old_fragment_ids))
        sources, carried = dict(self.source_deletions), dict(self.carried)
        for old in self.old_fragment_ids:
            now = frags.get(old)
            now_path = (now.deletion.path if now.deletion else None) if now else REMOVED
            if now_path == sources.get(old):
                continue
            before_set = files.read_file(sources.get(old))
            if now is None:  # their delete removed every row of the fragment
                now_set = np.arange(self.mapping.source_rows(old), dtype=np.uint32)
            else:
                now_set = files.read(now)
            new = np.setdiff1d(now_set, before_set)
            outs, offs = self.mapping.map(old, new)
            for out in np.unique(outs).tolist():
                prev = carried.get(out, np.zeros(0, np.uint32))
                carried[out] = np.union1d(prev, offs[outs == out]).astype(np.uint32)
            sources[old] = now_path
        return dataclasses.replace(self, source_deletions=sources, carried=carried)


@dataclass
class GroupResult:
    """What a compaction worker returns for one planned group; ``rewrite_transaction`` turns the
    results into the one ``Rewrite`` they become (``ok=False``: ``error`` says why, nothing to commit)."""

    index: int
    fragment_ids: tuple[int, ...]
    mode: str
    reason: str
    ok: bool
    error: str | None = None
    #: The new fragments, in the order their rows take in the table (clustering writes several).
    fragments: list[Fragment] = field(default_factory=list)
    #: Old → new rows as runs ``(old fragment, old offset, output, new offset, length)`` (a list, or an
    #: ``(n, 5)`` array when rows move one by one).
    mapping: list[tuple[int, int, int, int, int]] | np.ndarray = field(default_factory=list)
    #: The mapping's file under ``_transactions/`` when it has more than ``MAPPING_INLINE_RUNS`` runs.
    mapping_file: str | None = None
    #: Deletion file of each source when it was read (None: none): a concurrent delete is carried over.
    source_deletions: dict[int, str | None] = field(default_factory=dict)
    rows_in: int = 0
    rows_out: int = 0
    bytes_in: int = 0
    bytes_out: int = 0
    row_groups_copied: int = 0
    row_groups_encoded: int = 0
    get_requests: int = 0
    #: How the worker resolved each planned ``copy_if_clean`` row group from the deletion file:
    #: ``(fragment id, row group, "copy" | "encode", why)``, e.g. ``(12, 3, "encode", "deleted (12 rows)")``.
    resolved: list[tuple[int, int, str, str]] = field(default_factory=list)
    seconds: float = 0.0
    #: Index name -> (index uuid, segment over the output); fragment ids are set at commit.
    index_segments: dict[str, tuple[str, IndexSegment]] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


def _outputs(r: GroupResult) -> list[Fragment]:
    assert r.ok and r.fragments, "only finished groups (ok=True) are committed"
    return list(r.fragments)


def rewrite_transaction(read_version: int, results: Sequence[GroupResult]) -> Rewrite:
    """The one transaction that replaces each result's source fragments with its outputs."""
    return Rewrite(
        read_version,
        [
            RewriteGroup(
                r.fragment_ids,
                _outputs(r),
                AddressMapping.from_runs(r.mapping),
                dict(r.source_deletions),
                index_segments=dict(r.index_segments),
                mapping_file=r.mapping_file,
            )
            for r in results
        ],
    )


class Rewrite(Transaction):
    """Groups of fragments replaced by rewritten ones (compaction), in place in the fragment order."""

    operation = "rewrite"

    def __init__(self, read_version: int, groups: Iterable[RewriteGroup]):
        super().__init__(read_version)
        self.groups: tuple[RewriteGroup, ...] = tuple(groups)
        self.written = [f.path for g in self.groups for f in g.new_fragments]
        self.written += [seg.path for g in self.groups for _, seg in g.index_segments.values()]
        self.written += [g.mapping_file for g in self.groups if g.mapping_file is not None]
        # Set by prepare, carried from attempt to attempt: (group, output) -> (offsets, deletion file written).
        self._carried_files: dict[tuple[int, int], tuple[int, DeletionFile]] = {}

    def new_fragments(self) -> list[Fragment]:
        return [f for g in self.groups for f in g.new_fragments]

    @property
    def old_ids(self) -> set[int]:
        return {i for g in self.groups for i in g.old_fragment_ids}

    def _rebase(self, rule: str, theirs: Manifest, files: DeletionFiles) -> Rewrite:
        if rule == DISJOINT:
            record = theirs.record
            assert isinstance(record, RewriteRecord)
            overlap = sorted(self.old_ids & record.old_fragment_ids)
            if overlap:
                raise _conflict(self, theirs, files.uri, f"both rewrote fragments {overlap}")
        elif rule == CARRY_DELETIONS:
            return self._replace(groups=tuple(group.carry(theirs, files) for group in self.groups))
        return self

    def prepare(self, base: Manifest, files: DeletionFiles) -> Rewrite:
        prepared = dict(self._carried_files)
        for gi, group in enumerate(self.groups):
            for out, offsets in group.carried.items():
                key = (gi, out)
                if key in prepared and prepared[key][0] == len(offsets):
                    continue
                prepared[key] = (len(offsets), files.write(-1, offsets))
        return self._replace(_carried_files=prepared)

    def apply(self, base: Manifest) -> Manifest:
        next_id, next_row = base.next_fragment_id, base.next_row_id
        outputs: list[list[Fragment]] = []
        groups_record: list[RewrittenGroup] = []
        segments: dict[str, list[IndexSegment]] = {}
        registry = base.schema_registry()
        for gi, group in enumerate(self.groups):
            new_frags, new_ids = [], []
            for out, f in enumerate(group.new_fragments):
                f = check_schema(f, base, registry)
                deletion = self._carried_files.get((gi, out), (0, None))[1]
                if deletion is not None and deletion.deleted_rows >= f.rows:
                    new_ids.append(-1)  # every row of this output was deleted meanwhile: not committed
                    continue
                new_frags.append(
                    dataclasses.replace(f, id=next_id, deletion=deletion, row_ids=f.row_ids if base.stable_row_ids else None)
                )
                new_ids.append(next_id)
                next_id += 1
            outputs.append(new_frags)
            for name, (index_uuid, seg) in group.index_segments.items():
                if any(ix.name == name and ix.uuid == index_uuid for ix in base.indices):
                    segments.setdefault(name, []).append(dataclasses.replace(seg, fragment_ids=tuple(new_ids)))
            groups_record.append(
                RewrittenGroup(
                    tuple(group.old_fragment_ids),
                    tuple(new_ids),
                    None if group.mapping_file is not None else group.mapping,
                    group.mapping_file,
                )
            )

        # One pass: a group's outputs take the place of its first source still there, its other
        # sources are dropped.
        group_of = {i: gi for gi, group in enumerate(self.groups) for i in group.old_fragment_ids}
        seen: set[int] = set()
        placed: set[int] = set()

        def edit(f: Fragment) -> Fragment | tuple[Fragment, ...] | None:
            gi = group_of.get(f.id)
            if gi is None:
                return f
            seen.add(f.id)
            if gi in placed:
                return None
            placed.add(gi)
            return tuple(outputs[gi])

        fragments = edited(base.fragments, edit, next_id, next_row, touches=group_of)
        for group in self.groups:
            # A source may only vanish because a delete removed all its rows (rebase carried them).
            unexplained = [i for i in group.old_fragment_ids if i not in seen and group.source_deletions.get(i) != REMOVED]
            if unexplained:
                raise CommitConflict(
                    f"rewrite of fragments {list(group.old_fragment_ids)} cannot commit on version "
                    f"{base.version}: fragments {unexplained} no longer exist"
                )
        indices = tuple(dataclasses.replace(ix, segments=ix.segments + tuple(segments.get(ix.name, ()))) for ix in base.indices)
        return self._next(
            base,
            RewriteRecord(**self._header(), groups=tuple(groups_record)),
            fragments=fragments,
            next_fragment_id=next_id,
            next_row_id=next_row,
            indices=indices,
            **_registered(base, registry),
        )


class ChangeIndex(Transaction):
    """Creates an index, adds segments to one (``update``), or drops one.

    All three are stored as operation ``create_index`` (docs/FORMAT.md §6, with ``action``
    telling which; the name predates update and drop and stays, so existing tables read and
    rebase), and are that row and column of the conflict matrix: they conflict with each
    other only on the same index name. Coverage needs no rebase: a segment serves
    only fragments still in the manifest, so fragments a concurrent rewrite
    replaced drop out of coverage by themselves (and are scanned).
    """

    operation = "create_index"

    def __init__(self, read_version: int, index: IndexEntry, action: str = "create", started: float | None = None):
        super().__init__(read_version, started)
        if action not in INDEX_ACTIONS:
            raise ValueError(f"unknown index action {action!r}")
        self.index = index
        self.action = action
        self.written = list(index.files) if action != "drop" else []

    def _rebase(self, rule: str, theirs: Manifest, files: DeletionFiles) -> ChangeIndex:
        record = theirs.record
        if rule == DISTINCT_NAMES and isinstance(record, IndexChangeRecord) and record.index == self.index.name:
            raise _conflict(self, theirs, files.uri, f"both changed index {self.index.name!r} ({record.action} committed first)")
        if (
            rule == COLUMNS
            and isinstance(record, AlterSchemaRecord)
            and self.index.column in evolution.changed_columns(record.change)
        ):
            raise _conflict(self, theirs, files.uri, f"column {self.index.column!r} of index {self.index.name!r} was changed")
        return self

    def apply(self, base: Manifest) -> Manifest:
        current = next((ix for ix in base.indices if ix.name == self.index.name), None)
        if self.action == "create":
            if current is not None:
                raise CommitConflict(
                    f"table already has an index named {self.index.name!r} at version {base.version}; "
                    "drop it first or choose another name"
                )
            indices = base.indices + (self.index,)
        elif current is None or current.uuid != self.index.uuid:
            raise CommitConflict(
                f"index {self.index.name!r} was dropped or re-created at version {base.version}; nothing to {self.action}"
            )
        elif self.action == "update":
            indices = tuple(
                dataclasses.replace(ix, segments=ix.segments + self.index.segments) if ix is current else ix
                for ix in base.indices
            )
        else:
            indices = tuple(ix for ix in base.indices if ix is not current)
        record = IndexChangeRecord(
            **self._header(), index=self.index.name, action=self.action, segments=tuple(s.uuid for s in self.index.segments)
        )
        return self._next(base, record, indices=indices)


class Overwrite(Transaction):
    """Replaces every fragment (and the schema); indices are dropped unless replacements come with it.

    ``indices`` are the replacement indices, their segments naming the new fragments by position
    in ``fragments`` (the commit gives them their ids). A ``strict`` overwrite never replays over a
    version committed after its read: it stops with ``CommitConflict`` so its writer can redo the
    whole rewrite on the latest version (the catalog's copy-on-write commits, docs/FORMAT.md §12).
    ``config`` entries are merged into the table's config (e.g. a catalog's schema version).
    """

    operation = "overwrite"

    def __init__(
        self,
        read_version: int,
        fragments: list[Fragment],
        schema: Any = None,
        *,
        indices: tuple[IndexEntry, ...] = (),
        strict: bool = False,
        config: dict[str, Any] | None = None,
    ):
        super().__init__(read_version)
        self.fragments = fragments
        self.schema = schema
        self.indices = tuple(indices)
        self.strict = strict
        self.config = dict(config or {})
        self.written = [f.path for f in fragments] + [p for ix in self.indices for p in ix.files]

    def new_fragments(self) -> list[Fragment]:
        return self.fragments

    def rebase(self, theirs: Manifest, files: DeletionFiles) -> Transaction:
        if self.strict and not theirs.dropped:
            raise _conflict(self, theirs, files.uri, "a strict overwrite is redone on the latest version, never replayed")
        out = super().rebase(theirs, files)
        if theirs.record.operation in ("overwrite", "restore"):
            # field ids may have started afresh since the read: its files' schema is no longer known by them
            self._ids_reset = True
        return out

    #: Whether an overwrite or restore was committed since the read (``rebase``): the field ids of the
    #: schema the files were written in may then name other fields, so that schema is never adopted.
    _ids_reset = False

    def apply(self, base: Manifest) -> Manifest:
        schema, schema_id, next_field, registry = base.schema, base.schema_id, base.next_field_id, base.schema_registry()
        adopt = not self._ids_reset
        if self.schema is not None and not evolution.same(self.schema, base.schema):
            # another schema: its own id (fragments of every earlier one are gone), field ids from its own
            schema, schema_id, next_field = self.schema, _next_schema_id(base), None
            registry = {schema_id: schema}
            adopt = False
        # (without a schema, data written before a concurrent schema change stays in the schema it was written
        # in: registered, or adopted again if a change after a create or another change left it out)
        new, next_id, next_row = assign_ids(base, self.fragments, registry, adopt=adopt)
        used = {f.schema_id for f in new}
        indices = tuple(
            dataclasses.replace(
                ix,
                segments=tuple(
                    dataclasses.replace(seg, fragment_ids=tuple(new[p].id for p in seg.fragment_ids)) for seg in ix.segments
                ),
            )
            for ix in self.indices
        )
        return self._next(
            base,
            OverwriteRecord(**self._header(), fragment_ids=tuple(f.id for f in new), rows=sum(f.rows for f in new)),
            fragments=tuple(new),
            next_fragment_id=next_id,
            next_row_id=next_row,
            indices=indices,
            schema=schema,
            schema_id=schema_id,
            schemas={k: v for k, v in registry.items() if k in used and k != schema_id},
            next_field_id=next_field,
            config={**base.config, **self.config} if self.config else base.config,
        )


class Configure(Transaction):
    """Sets (a value) or removes (None) entries of the table's ``config``: ``Table.set_clustering``.

    Changes no data: it replays over anything and anything replays over it (the conflict matrix),
    each configure setting only its own entries, so two racing ones apply in commit order.
    """

    operation = "configure"

    def __init__(self, read_version: int, changes: dict[str, Any]):
        super().__init__(read_version)
        self.changes = dict(changes)

    def apply(self, base: Manifest) -> Manifest:
        config = {k: v for k, v in {**base.config, **self.changes}.items() if v is not None}
        return self._next(base, ConfigureRecord(**self._header(), changes=dict(self.changes)), removes=False, config=config)


class Restore(Transaction):
    """An earlier version of the table made the latest again (``Table.restore``): that version's schema,
    fragments (with their deletion files), indices, primary key and config, committed as a new version;
    the versions in between stay as they are (time travel reads them).

    Two things never go back. The WAL watermarks stay the current ones: WAL transactions flushed after
    the restored version were committed and are undone by the restore, on purpose; moving their
    watermarks back would have an applier flush them again (undoing the restore in part, and only for the
    segments not yet retired). And ``next_fragment_id`` / ``next_row_id``: ids are never reused. The
    restored fragments keep their ids: they are the very fragments of that version, and every id given
    since went to fragments the restored version does not hold.

    The fragments' files are already on storage (``lamina.restore`` checks that cleanup left every one),
    so a restore writes nothing but the root: the old version's manifest segments are named as they are.
    """

    operation = "restore"

    def __init__(self, read_version: int, target: Manifest, tag: str | None = None):
        super().__init__(read_version)
        #: The version restored (its manifest, as read).
        self.target = target
        #: The tag it was named by, recorded (None: by number).
        self.tag = tag

    def apply(self, base: Manifest) -> Manifest:
        t = self.target
        if t.dropped or t.table_uuid != base.table_uuid:
            raise CommitConflict(
                f"version {t.version} restored on version {base.version} is not a live version of the same table"
            )
        next_id, next_row = max(base.next_fragment_id, t.next_fragment_id), max(base.next_row_id, t.next_row_id)
        fragments = t.fragments
        if isinstance(fragments, FragmentList):  # the same segments, checked against this version's id bounds
            fragments = FragmentList(fragments.parts, f"version {base.version + 1}", next_id, next_row)
        return self._next(
            base,
            RestoreRecord(**self._header(), version=t.version, tag=self.tag),
            removes=False,  # the restored indices serve the restored fragments as they did
            schema=t.schema,
            schema_id=t.schema_id,
            schemas=t.schemas,
            next_field_id=_restored_next_field_id(base, t),
            fragments=fragments,
            segments=t.segments,
            segment_lists=t.segment_lists,
            indices=t.indices,
            primary_key=t.primary_key,
            config=dict(t.config),
            next_fragment_id=next_id,
            next_row_id=next_row,
        )


def _next_schema_id(base: Manifest) -> int:
    return max([base.schema_id, *base.schemas]) + 1


def _restored_next_field_id(base: Manifest, target: Manifest) -> int | None:
    """Field ids are never given twice along a table's history: a restore keeps the greater next id."""
    if base.next_field_id is None and target.next_field_id is None:
        return None
    mine = base.next_field_id if base.next_field_id is not None else evolution.next_field_id(base.schema)
    theirs = target.next_field_id if target.next_field_id is not None else evolution.next_field_id(target.schema)
    return max(mine, theirs)


class AlterSchema(Transaction):
    """A schema change that writes no data file (``Table.add_columns``, ``drop_columns``, ``rename_column``,
    ``alter_column``; docs/FORMAT.md §2.4): today's schema becomes one of the table's earlier schemas (its
    fragments keep being read through it), the new one gets the next schema id, and index entries follow
    their column (renamed; dropped with it).

    ``change`` is ``(kind, arguments)``, applied to whatever schema the base has, so it replays over
    anything that keeps the schema, and over another schema change (each applies in commit order; one
    that no longer makes sense, e.g. a column renamed twice, fails then with the error it would have had).
    """

    operation = "alter_schema"

    def __init__(self, read_version: int, kind: str, **arguments: Any):
        super().__init__(read_version)
        self.kind = kind
        self.arguments = arguments

    def apply(self, base: Manifest) -> Manifest:
        change = evolution.change(base.schema, base.next_field_id, self.kind, self.arguments, _protected(base))
        schemas = dict(base.schemas)
        if base.record.operation not in ("alter_schema", "create"):
            # today's schema becomes an earlier one fragments may be written in; after a create or another
            # change none can be yet (nothing was committed in it), so it is left out (a write racing this
            # change that used it is committed in it again: ``check_schema`` adopts it), and a run of changes
            # does not grow the root by a schema each
            schemas[base.schema_id] = base.schema
        gone = {c for c in (ix.column for ix in base.indices) if c not in change.schema.names and c not in change.renamed}
        gone |= change.unindexed  # its keys are no longer the column's: created again by the user
        indices = tuple(
            dataclasses.replace(ix, column=change.renamed.get(ix.column, ix.column))
            for ix in base.indices
            if ix.column not in gone
        )
        record = AlterSchemaRecord(**self._header(), change=change.describe, columns=change.field_ids)
        return self._next(
            base,
            record,
            removes=False,
            schema=change.schema,
            schema_id=_next_schema_id(base),
            schemas=schemas,
            next_field_id=change.next_field_id,
            indices=indices,
        )


def _protected(base: Manifest) -> dict[str, str]:
    """Columns a schema change may not drop, rename or alter, and why."""
    out = {c: "it is the table's primary key (the WAL and merges find rows by it)" for c in base.primary_key}
    for c in (base.config.get("clustering") or {}).get("columns", ()):
        out.setdefault(c, "it is a clustering key: remove the clustering first (set_clustering(None))")
    return out


class Drop(Transaction):
    """Drops the table: the next version is a tombstone (``dropped``, no fragments, no indices, the same
    table uuid). Committed by the same put-if-absent as every write, so it is ordered with them: a
    commit that replays over it stops with ``TableDropped``; a drop replays over anything (it wins).
    ``lamina.drop`` commits it before removing any object of the table.
    """

    operation = "drop"

    def apply(self, base: Manifest) -> Manifest:
        return self._next(
            base,
            DropRecord(**self._header()),
            removes=False,
            fragments=(),
            indices=(),
            wal_watermarks={},
            segments=(),
            segment_lists=(),
            dropped=True,
        )
