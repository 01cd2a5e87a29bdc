"""Transaction records: what each version says produced it (docs/FORMAT.md §6), one typed value per operation.

A manifest keeps its record as the JSON object it stores (``Manifest.transaction``);
``decode_record`` is the one place that reads that object back, so a commit replaying
itself over another (``lamina.transaction``) works on typed values, and a malformed record
is a ``CorruptFile`` naming the version instead of a ``KeyError`` deep inside a rebase.
``to_json`` writes exactly the fields docs/FORMAT.md lists, so the bytes on storage are the
format's.

    stored "transaction" object ──decode_record──► AppendRecord / DeleteRecord / RewriteRecord / ...
    Transaction.apply ──► XxxRecord(...).to_json() ──► the next manifest's "transaction"
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypedDict, TypeGuard

import numpy as np
import pyarrow as pa

from lamina.errors import CorruptFile

#: The run columns of a mapping file (``AddressMapping.to_bytes``), in the order of a stored run.
MAPPING_COLUMNS = ("old_fragment", "old_start", "output", "new_start", "length")
#: A rewrite group's mapping with more runs than this is stored in a mapping file under
#: ``_transactions/`` rather than in the manifest (a clustering rewrite moves rows one by one).
MAPPING_INLINE_RUNS = 1024
#: Where mapping files live: ``lamina.manifest.paths.MAPPING_DIR`` (that package imports this module).
MAPPING_DIR = "_transactions/"


@dataclass(frozen=True, eq=False)
class AddressMapping:
    """Old row → new row of a rewrite, as runs: rows ``old_start..+length`` of fragment
    ``old_fragment`` became rows ``new_start..+length`` of output ``output`` (an index into
    the rewrite's outputs). A shift is one run. Stored as ``[old_fragment, old_start, output,
    new_start, length]`` lists (docs/FORMAT.md §6)."""

    old_fragment: np.ndarray
    old_start: np.ndarray
    output: np.ndarray
    new_start: np.ndarray
    length: np.ndarray

    @classmethod
    def from_runs(cls, runs: Iterable[tuple[int, int, int, int, int]] | np.ndarray) -> AddressMapping:
        """From runs, or an ``(n, 5)`` integer array of them (a clustering rewrite's one run per row)."""
        arr = (runs if isinstance(runs, np.ndarray) else np.array(list(runs))).astype(np.int64).reshape(-1, 5)
        return cls(*(arr[:, i].copy() for i in range(5)))

    def __len__(self) -> int:
        return len(self.length)

    def to_bytes(self) -> bytes:
        """The mapping file of a large mapping (docs/FORMAT.md §6): an Arrow IPC stream, zstd-compressed,
        of the five run columns."""
        table = pa.table({name: getattr(self, name) for name in MAPPING_COLUMNS})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, table.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
            writer.write_table(table)
        return bytes(sink.getvalue().to_pybytes())

    @classmethod
    def from_bytes(cls, data: bytes, where: str) -> AddressMapping:
        """The mapping held by a mapping file's bytes; ``CorruptFile`` naming ``where`` if they are not one."""
        try:
            table = pa.ipc.open_stream(pa.py_buffer(data)).read_all()
            arrays = [table.column(name).to_numpy().astype(np.int64) for name in MAPPING_COLUMNS]
        except (pa.ArrowException, KeyError, ValueError) as e:
            raise CorruptFile(f"mapping file {where} is not a Lamina rewrite mapping ({type(e).__name__}: {e})") from None
        if any((a < 0).any() for a in (arrays[1], arrays[3], arrays[4])):
            raise CorruptFile(f"mapping file {where} has a negative offset or length")
        return cls(*arrays)

    def runs(self) -> list[list[int]]:
        runs: list[list[int]] = np.stack(
            [self.old_fragment, self.old_start, self.output, self.new_start, self.length], axis=1
        ).tolist()
        return runs

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AddressMapping) and self.runs() == other.runs()

    def __hash__(self) -> int:
        return hash(tuple(map(tuple, self.runs())))

    def map(self, fragment_id: int, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(outputs, new offsets) for the offsets of ``fragment_id`` that survived the rewrite."""
        sel = self.old_fragment == fragment_id
        starts, outs, news, lens = self.old_start[sel], self.output[sel], self.new_start[sel], self.length[sel]
        order = np.argsort(starts)
        starts, outs, news, lens = starts[order], outs[order], news[order], lens[order]
        offsets = np.asarray(offsets, dtype=np.int64)
        run = np.searchsorted(starts, offsets, side="right") - 1
        ok = run >= 0
        ok[ok] &= offsets[ok] < starts[run[ok]] + lens[run[ok]]
        run, offs = run[ok], offsets[ok]
        return outs[run], news[run] + (offs - starts[run])

    def source_rows(self, fragment_id: int) -> int:
        """Rows of old fragment ``fragment_id`` the mapping reaches (past its last surviving row)."""
        sel = self.old_fragment == fragment_id
        ends = self.old_start[sel] + self.length[sel]
        return int(ends.max()) if len(ends) else 0


# -- records -------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TransactionRecord:
    """The fields every record has; ``operation`` is fixed by the record's type."""

    operation: str = ""
    #: The request's id: a writer recognises its own commit by it ("" in creates written before it was recorded).
    uuid: str = ""
    #: The version the operation read.
    read_version: int = 0
    #: When it was applied (ms since the epoch).
    timestamp_ms: int = 0
    #: A large record's sidecar object under ``_transactions/`` (reserved; kept by cleanup).
    sidecar: str | None = None

    @property
    def files(self) -> tuple[str, ...]:
        """The objects under ``_transactions/`` this record needs (kept by cleanup while its version is)."""
        return (self.sidecar,) if self.sidecar else ()

    def to_json(self) -> dict[str, Any]:
        """The stored object (docs/FORMAT.md §6)."""
        out: dict[str, Any] = {
            "uuid": self.uuid,
            "operation": self.operation,
            "read_version": self.read_version,
            "timestamp_ms": self.timestamp_ms,
        }
        if self.sidecar is not None:
            out["sidecar"] = self.sidecar
        out.update(self._details())
        return out

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        """The operation's own fields, read from a stored record."""
        return {}

    def _details(self) -> dict[str, Any]:
        return {}


@dataclass(frozen=True, kw_only=True)
class CreateRecord(TransactionRecord):
    """``create``: version 1 of a new table."""

    operation: str = field(default="create", init=False)


@dataclass(frozen=True, kw_only=True)
class _NewFragments(TransactionRecord):
    """The fields of an operation that adds fragments: their ids and rows."""

    fragment_ids: tuple[int, ...] = ()
    rows: int = 0

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        return {"fragment_ids": f.id_run("fragment_ids"), "rows": f.number("rows")}

    def _details(self) -> dict[str, Any]:
        return {"fragment_ids": _id_run(self.fragment_ids), "rows": self.rows}


#: A run of new ids longer than this is stored as ``{"first": a, "count": n}`` (a bulk append of
#: 100,000 files would otherwise list 100,000 ids in the root of its version).
ID_RUN_LIST_MAX = 16


def _id_run(ids: tuple[int, ...]) -> Any:
    if len(ids) > ID_RUN_LIST_MAX and ids[-1] - ids[0] == len(ids) - 1 and all(b == a + 1 for a, b in zip(ids, ids[1:])):
        return {"first": ids[0], "count": len(ids)}
    return list(ids)


@dataclass(frozen=True, kw_only=True)
class AppendRecord(_NewFragments):
    """``append``: new fragments after the existing ones."""

    operation: str = field(default="append", init=False)


@dataclass(frozen=True, kw_only=True)
class OverwriteRecord(_NewFragments):
    """``overwrite``: these fragments replaced every other one."""

    operation: str = field(default="overwrite", init=False)


@dataclass(frozen=True, kw_only=True)
class DeleteRecord(TransactionRecord):
    """``delete``: new deletion files on ``fragment_ids``, ``removed_fragment_ids`` gone entirely."""

    operation: str = field(default="delete", init=False)
    predicate: str = ""
    fragment_ids: tuple[int, ...] = ()
    removed_fragment_ids: tuple[int, ...] = ()
    #: Rows newly deleted (not counting rows deleted before).
    rows: int = 0

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        return {
            "predicate": f.text("predicate"),
            "fragment_ids": f.numbers("fragment_ids"),
            "removed_fragment_ids": f.numbers("removed_fragment_ids"),
            "rows": f.number("rows"),
        }

    def _details(self) -> dict[str, Any]:
        return {
            "predicate": self.predicate,
            "fragment_ids": list(self.fragment_ids),
            "removed_fragment_ids": list(self.removed_fragment_ids),
            "rows": self.rows,
        }


@dataclass(frozen=True)
class RewrittenGroup:
    """One group of a ``rewrite``: ``old_fragment_ids`` replaced by ``new_fragment_ids`` (``-1``:
    an output every row of which was deleted meanwhile, not committed), rows moving per ``mapping``
    (whose ``output`` indexes ``new_fragment_ids``)."""

    old_fragment_ids: tuple[int, ...]
    new_fragment_ids: tuple[int, ...]
    #: The runs; None when they are in ``mapping_file`` (read by ``DeletionFiles.read_mapping``).
    mapping: AddressMapping | None
    #: A mapping too large for the manifest (more than ``MAPPING_INLINE_RUNS`` runs): its file under ``_transactions/``.
    mapping_file: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "old_fragment_ids": list(self.old_fragment_ids),
            "new_fragment_ids": list(self.new_fragment_ids),
            "mapping": {"file": self.mapping_file}
            if self.mapping_file is not None
            else self.mapping.runs()
            if self.mapping
            else [],
        }


@dataclass(frozen=True, kw_only=True)
class RewriteRecord(TransactionRecord):
    """``rewrite`` (compaction): groups of fragments replaced by rewritten ones."""

    operation: str = field(default="rewrite", init=False)
    groups: tuple[RewrittenGroup, ...] = ()

    @property
    def old_fragment_ids(self) -> set[int]:
        return {i for g in self.groups for i in g.old_fragment_ids}

    @property
    def files(self) -> tuple[str, ...]:
        return super().files + tuple(g.mapping_file for g in self.groups if g.mapping_file is not None)

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        groups = []
        for g in f.objects("groups"):
            new_ids = g.numbers("new_fragment_ids")
            stored = g._get("mapping", _MISSING)
            if isinstance(stored, dict):
                path = stored.get("file")
                if not isinstance(path, str) or not path.startswith(MAPPING_DIR) or ".." in path:
                    raise _Malformed(f"{g.where}mapping names no mapping file under {MAPPING_DIR}")
                groups.append(RewrittenGroup(g.numbers("old_fragment_ids"), new_ids, None, path))
                continue
            groups.append(RewrittenGroup(g.numbers("old_fragment_ids"), new_ids, _mapping(g, len(new_ids))))
        return {"groups": tuple(groups)}

    def _details(self) -> dict[str, Any]:
        return {"groups": [g.to_json() for g in self.groups]}


@dataclass(frozen=True, kw_only=True)
class IndexChangeRecord(TransactionRecord):
    """``create_index``: index ``index`` created, given more segments (``update``) or dropped;
    the stored operation is ``create_index`` for all three (docs/FORMAT.md §6)."""

    operation: str = field(default="create_index", init=False)
    index: str = ""
    action: str = "create"  # create | update | drop
    #: uuids of the segments it added (a drop lists the dropped index's).
    segments: tuple[str, ...] = ()

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        # The first index records (before update and drop existed) held only the name.
        action = f.text("action", "create")
        if action not in INDEX_ACTIONS:
            raise _Malformed(f"action is {action!r}, not one of {', '.join(INDEX_ACTIONS)}")
        return {"index": f.text("index"), "action": action, "segments": f.texts("segments", ())}

    def _details(self) -> dict[str, Any]:
        return {"index": self.index, "action": self.action, "segments": list(self.segments)}


@dataclass(frozen=True, kw_only=True)
class WalFlushRecord(TransactionRecord):
    """``wal_flush``: a WAL applier's new fragments, deletions of older versions of their keys, and
    the WAL watermarks it moved."""

    operation: str = field(default="wal_flush", init=False)
    fragment_ids: tuple[int, ...] = ()
    rows: int = 0
    deleted_fragment_ids: tuple[int, ...] = ()
    removed_fragment_ids: tuple[int, ...] = ()
    rows_deleted: int = 0
    #: ``"shard/segment"`` → position, for the segments it moved.
    watermarks: dict[str, int] = field(default_factory=dict)

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        return {
            "fragment_ids": f.numbers("fragment_ids"),
            "rows": f.number("rows"),
            "deleted_fragment_ids": f.numbers("deleted_fragment_ids"),
            "removed_fragment_ids": f.numbers("removed_fragment_ids"),
            "rows_deleted": f.number("rows_deleted"),
            "watermarks": f.positions("watermarks"),
        }

    def _details(self) -> dict[str, Any]:
        return {
            "fragment_ids": list(self.fragment_ids),
            "rows": self.rows,
            "deleted_fragment_ids": list(self.deleted_fragment_ids),
            "removed_fragment_ids": list(self.removed_fragment_ids),
            "rows_deleted": self.rows_deleted,
            "watermarks": dict(self.watermarks),
        }


#: What a ``merge`` record's ``kind`` may say: a merge by key (``Table.merge``) or an update by filter (``Table.update``).
MERGE_KINDS = ("merge", "update")


@dataclass(frozen=True, kw_only=True)
class MergeRecord(TransactionRecord):
    """``merge``: rows rewritten by key (``Table.merge``) or by filter (``Table.update``): new fragments with
    the updated and inserted rows, deletions of the rows' old versions and of the rows deleted."""

    operation: str = field(default="merge", init=False)
    kind: str = "merge"  # merge | update
    #: The key columns of a merge (empty for an update).
    on: tuple[str, ...] = ()
    #: An update's filter; a merge's not-matched-by-source filter ("" for none).
    predicate: str = ""
    fragment_ids: tuple[int, ...] = ()
    rows: int = 0
    deleted_fragment_ids: tuple[int, ...] = ()
    removed_fragment_ids: tuple[int, ...] = ()
    #: Fragments some of whose rows it updated (their old versions deleted): a concurrent delete checks them.
    updated_fragment_ids: tuple[int, ...] = ()
    rows_deleted: int = 0
    inserted: int = 0
    updated: int = 0
    deleted: int = 0

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        kind = f.text("kind")
        if kind not in MERGE_KINDS:
            raise _Malformed(f"kind is {kind!r}, not one of {', '.join(MERGE_KINDS)}")
        return {
            "kind": kind,
            "on": f.texts("on"),
            "predicate": f.text("predicate"),
            "fragment_ids": f.id_run("fragment_ids"),
            "rows": f.number("rows"),
            "deleted_fragment_ids": f.numbers("deleted_fragment_ids"),
            "removed_fragment_ids": f.numbers("removed_fragment_ids"),
            "updated_fragment_ids": f.numbers("updated_fragment_ids"),
            "rows_deleted": f.number("rows_deleted"),
            "inserted": f.number("inserted"),
            "updated": f.number("updated"),
            "deleted": f.number("deleted"),
        }

    def _details(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "on": list(self.on),
            "predicate": self.predicate,
            "fragment_ids": _id_run(self.fragment_ids),
            "rows": self.rows,
            "deleted_fragment_ids": list(self.deleted_fragment_ids),
            "removed_fragment_ids": list(self.removed_fragment_ids),
            "updated_fragment_ids": list(self.updated_fragment_ids),
            "rows_deleted": self.rows_deleted,
            "inserted": self.inserted,
            "updated": self.updated,
            "deleted": self.deleted,
        }


@dataclass(frozen=True, kw_only=True)
class ConfigureRecord(TransactionRecord):
    """``configure``: entries of the table's ``config`` set (a value) or removed (null), e.g. its
    clustering keys (docs/FORMAT.md §2)."""

    operation: str = field(default="configure", init=False)
    changes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        changes = f._get("changes", _MISSING)
        if not isinstance(changes, dict) or not all(isinstance(k, str) for k in changes):
            raise _Malformed(f"{f.where}changes is not an object")
        return {"changes": dict(changes)}

    def _details(self) -> dict[str, Any]:
        return {"changes": dict(self.changes)}


@dataclass(frozen=True, kw_only=True)
class AlterSchemaRecord(TransactionRecord):
    """``alter_schema``: the table's schema changed without a data file written (docs/FORMAT.md §2.1):
    ``change`` says how (``add_columns``, ``drop_columns``, ``rename_column``, ``alter_column``) with its
    arguments, ``columns`` the fields it touched by id (a concurrent index build over one of them conflicts)."""

    operation: str = field(default="alter_schema", init=False)
    change: dict[str, Any] = field(default_factory=dict)
    #: Field ids of the columns added, dropped, renamed or altered.
    columns: tuple[int, ...] = ()

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        change = f._get("change", _MISSING)
        if not isinstance(change, dict) or not isinstance(change.get("kind"), str):
            raise _Malformed(f"{f.where}change is not an object with a kind")
        return {"change": dict(change), "columns": f.numbers("columns")}

    def _details(self) -> dict[str, Any]:
        return {"change": dict(self.change), "columns": list(self.columns)}


@dataclass(frozen=True, kw_only=True)
class RestoreRecord(TransactionRecord):
    """``restore``: the table as it was at ``version`` (schema, fragments, indices, settings), named by
    ``tag`` when the restore asked for one; the WAL watermarks stay as they were (docs/FORMAT.md §6)."""

    operation: str = field(default="restore", init=False)
    #: The version restored from.
    version: int = 0
    #: The tag it was restored by (None: by number).
    tag: str | None = None

    @classmethod
    def _fields_from(cls, f: _Fields) -> dict[str, Any]:
        return {"version": f.number("version"), "tag": f.optional_text("tag")}

    def _details(self) -> dict[str, Any]:
        return {"version": self.version} if self.tag is None else {"version": self.version, "tag": self.tag}


@dataclass(frozen=True, kw_only=True)
class DropRecord(TransactionRecord):
    """``drop``: the table's end; its version is a tombstone (``dropped``, no fragments or indices)."""

    operation: str = field(default="drop", init=False)


@dataclass(frozen=True, kw_only=True)
class UnknownRecord(TransactionRecord):
    """An operation this Lamina does not know (a newer one wrote it): readable, never replayed over."""


#: The record type of each stored operation.
RECORD_TYPES: dict[str, type[TransactionRecord]] = {
    cls.operation: cls
    for cls in (
        CreateRecord,
        AppendRecord,
        OverwriteRecord,
        DeleteRecord,
        RewriteRecord,
        IndexChangeRecord,
        WalFlushRecord,
        ConfigureRecord,
        RestoreRecord,
        DropRecord,
        MergeRecord,
        AlterSchemaRecord,
    )
}

INDEX_ACTIONS = ("create", "update", "drop")


# -- decoding ------------------------------------------------------------------------------
class _Malformed(Exception):
    pass


_MISSING: Any = object()


class _Fields:
    """Typed access to one JSON object; a wrong or missing field raises ``_Malformed`` naming it."""

    def __init__(self, raw: Any, where: str):
        if not isinstance(raw, dict):
            raise _Malformed(f"{where or 'the record'} is {type(raw).__name__}, not an object")
        self.raw, self.where = raw, where

    def _get(self, name: str, default: Any) -> Any:
        if name in self.raw:
            return self.raw[name]
        if default is _MISSING:
            raise _Malformed(f"{self.where}{name} is missing")
        return default

    def number(self, name: str, default: Any = _MISSING) -> int:
        v = self._get(name, default)
        if not _is_int(v):
            raise _Malformed(f"{self.where}{name} is {v!r}, not an integer")
        return v

    def text(self, name: str, default: Any = _MISSING) -> str:
        v = self._get(name, default)
        if not isinstance(v, str):
            raise _Malformed(f"{self.where}{name} is {v!r}, not a string")
        return v

    def optional_text(self, name: str) -> str | None:
        v = self._get(name, None)
        return None if v is None else self.text(name)

    def numbers(self, name: str, default: Any = _MISSING) -> tuple[int, ...]:
        v = self._get(name, default)
        if not isinstance(v, (list, tuple)) or not all(_is_int(x) for x in v):
            raise _Malformed(f"{self.where}{name} is not a list of integers")
        return tuple(v)

    def id_run(self, name: str) -> tuple[int, ...]:
        """A list of integers, or a run ``{"first": a, "count": n}`` of consecutive ones."""
        v = self._get(name, _MISSING)
        if isinstance(v, dict):
            first, count = v.get("first"), v.get("count")
            if set(v) != {"first", "count"} or not _is_int(first) or not _is_int(count) or not 0 <= count <= 1 << 32:
                raise _Malformed(f"{self.where}{name} is not a run of integers")
            return tuple(range(first, first + count))
        return self.numbers(name)

    def texts(self, name: str, default: Any = _MISSING) -> tuple[str, ...]:
        v = self._get(name, default)
        if not isinstance(v, (list, tuple)) or not all(isinstance(x, str) for x in v):
            raise _Malformed(f"{self.where}{name} is not a list of strings")
        return tuple(v)

    def positions(self, name: str) -> dict[str, int]:
        v = self._get(name, _MISSING)
        if not isinstance(v, dict) or not all(isinstance(k, str) and _is_int(x) for k, x in v.items()):
            raise _Malformed(f"{self.where}{name} is not an object of integer positions")
        return dict(v)

    def objects(self, name: str) -> list[_Fields]:
        v = self._get(name, _MISSING)
        if not isinstance(v, list):
            raise _Malformed(f"{self.where}{name} is not a list")
        return [_Fields(x, f"{self.where}{name}[{i}].") for i, x in enumerate(v)]


def _is_int(v: Any) -> TypeGuard[int]:
    return isinstance(v, int) and not isinstance(v, bool)


def _mapping(g: _Fields, outputs: int) -> AddressMapping:
    runs = g._get("mapping", _MISSING)
    if not isinstance(runs, list):
        raise _Malformed(f"{g.where}mapping is not a list of runs")
    if not runs:
        return AddressMapping.from_runs([])
    try:
        arr = np.asarray(runs)
    except (ValueError, TypeError, OverflowError):
        arr = None
    if arr is None or arr.dtype.kind not in "iu" or arr.ndim != 2 or arr.shape[1] != 5:
        raise _Malformed(
            f"{g.where}mapping is not a list of [old_fragment_id, old_start, output, new_start, length] integer runs"
        )
    arr = arr.astype(np.int64)
    if (arr[:, [1, 3, 4]] < 0).any():
        raise _Malformed(f"{g.where}mapping has a negative offset or length")
    bad = arr[(arr[:, 2] < 0) | (arr[:, 2] >= outputs), 2]
    if len(bad):
        raise _Malformed(f"{g.where}mapping names output {int(bad[0])}, but the group has {outputs} new fragment ids")
    return AddressMapping(*(arr[:, i].copy() for i in range(5)))


class _Header(TypedDict):
    uuid: str
    read_version: int
    timestamp_ms: int
    sidecar: str | None


def _decode(raw: Any) -> TransactionRecord:
    f = _Fields(raw, "")
    header = _Header(
        uuid=f.text("uuid", ""),
        read_version=f.number("read_version"),
        timestamp_ms=f.number("timestamp_ms"),
        sidecar=f.optional_text("sidecar"),
    )
    operation = f.text("operation")
    cls = RECORD_TYPES.get(operation)
    if cls is None:
        return UnknownRecord(operation=operation, **header)
    return cls(**header, **cls._fields_from(f))


def decode_record(raw: Any, where: str) -> TransactionRecord:
    """The typed record of a stored ``transaction`` object; ``where`` names its version in errors.

    An operation this Lamina does not know decodes to ``UnknownRecord``; a known one with a
    missing or mistyped field is ``CorruptFile``.
    """
    try:
        return _decode(raw)
    except _Malformed as e:
        raise CorruptFile(
            f"the transaction record of {where} is malformed ({e}): Lamina cannot replay a commit over it. "
            f"Restore that manifest from a backup, or find the tool that wrote it"
        ) from None
