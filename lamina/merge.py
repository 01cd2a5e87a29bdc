"""Merge by key and update by filter: each one commit of new fragments and deletions (``transaction.Merge``).

::

    Table.merge(source, on=keys)        a MergeBuilder: the clauses (a plain value), no I/O yet
      .when_matched_update(columns) | .when_matched_delete()
      .when_not_matched_insert()    | .when_not_matched_by_source_delete(filter)
      .execute()
        │  the source conformed to the table's columns (SchemaMismatch before anything is written)
        ▼  in chunks of chunk_rows rows
    chunk keys ──► target rows holding them: the key columns scanned (an IN lookup where a btree or
                   bitmap index serves a key column and the keys are few against the table's rows, else
                   the chunk's key range, which zone maps and Parquet statistics prune), hash-joined with
                   the chunk's keys (Arrow's join)
               ──► updated rows (the source's values; with ``columns``, the target row read by its address
                   and those columns from the source) and inserted rows, written as fragments
        ▼  after the last chunk
    a key twice in the source (across chunks) ──► DuplicateKey: the fragments removed, nothing committed
    not matched by source: the target's key columns streamed through an anti join with every source key
        ▼
    Merge(new fragments, deletions) ──► lamina.commit: one version ──► MergeResult

    Table.update(filter, values=, expressions=)
        matching rows streamed, columns replaced, written ──► Merge(kind="update") ──► lamina.commit

Keys follow SQL: a key holding a NULL (in any of its columns) matches nothing; such source rows are
inserted by ``when_not_matched_insert``, and such target rows are "not matched by source".

Memory: one chunk of the source (``chunk_rows`` rows) and the target rows it matches, the writers of
``lamina.datafile.write_fragments``, and the key columns of every source row seen so far, which stay
until the commit (duplicates across chunks, not-matched-by-source and the commit's conflict check need
them). A source of any length merges in bounded memory as long as its keys fit. Without an index on a
key column, the target's key columns are read once per chunk (pruned to the chunk's key range).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from lamina.arrays import from_numpy, sorted_distinct
from lamina.datafile import ROWADDR, chunk_batches, write_fragments
from lamina.errors import DuplicateKey, InvalidArgument, InvalidFilter, SchemaMismatch
from lamina.expr import And, Column, Compare, In, Node, conjuncts, to_arrow
from lamina.filter import Filter, ValueExpression, parse_filter, parse_value
from lamina.keys import key_type
from lamina.manifest import ADDRESS_SHIFT, Fragment, Manifest
from lamina.records import MergeRecord
from lamina.scan import Scanner
from lamina.schema import DataLike, conform
from lamina.transaction import Merge

if TYPE_CHECKING:
    from lamina.table import Table

#: Source rows matched and written per step of a merge, unless ``Table.merge(chunk_rows=...)`` says otherwise.
DEFAULT_CHUNK_ROWS = 1 << 20
#: A chunk's row number, carried through the joins.
_SRC = "_src"
#: A chunk's keys are looked up in an index while they are at most this share of the table's live rows
#: (``index_lookup_keys``): a btree lookup reads about one index page per key, so once the keys outnumber
#: the pages it reads the whole index (16 bytes a row) and the key column's pages besides; a scan reads
#: the key column alone. Measured on 10,000,000 integer keys in 10 fragments, cold: the two cost about the
#: same at 10,000 keys (docs/BENCHMARKS_HISTORY.md, merge and update).
INDEX_KEYS_PER_ROW = 1 / 1024
#: ... and at least this many keys, whatever the table's size (a few thousand lookups cost little).
INDEX_KEYS_ALWAYS = 4096


@dataclass(frozen=True)
class MergeResult:
    """What a merge did: rows inserted, updated and deleted, and the version it committed (the table's
    version as it was when there was nothing to do: no commit)."""

    inserted: int
    updated: int
    deleted: int
    version: int


@dataclass(frozen=True)
class MergeClauses:
    """A merge's clauses, as ``MergeBuilder`` collects them."""

    #: What a matched target row becomes: "update", "delete", or None (left as it is).
    matched: str | None = None
    #: With "update": the columns that take the source's values (None: every column).
    update_columns: tuple[str, ...] | None = None
    #: Source rows that match no target row are inserted.
    insert: bool = False
    #: Target rows whose key is in no source row are deleted (only those matching ``by_source_filter``, if given).
    by_source_delete: bool = False
    by_source_filter: str | pc.Expression | None = None


class MergeBuilder:
    """``Table.merge``'s clauses: each call returns a new builder; ``execute`` runs the merge as one commit.

    >>> t.merge(changes, on="id").when_matched_update().when_not_matched_insert().execute()
    MergeResult(inserted=3, updated=12, deleted=0, version=8)
    """

    def __init__(
        self,
        table: Table,
        source: DataLike,
        on: str | Sequence[str] | None,
        chunk_rows: int | None = None,
        clauses: MergeClauses = MergeClauses(),
    ):
        self._table = table
        self._source = source
        self._on = merge_keys(table.schema, table.primary_key, on, table.uri)
        rows = DEFAULT_CHUNK_ROWS if chunk_rows is None else chunk_rows
        if isinstance(rows, bool) or not isinstance(rows, (int, np.integer)) or rows < 1:
            raise InvalidArgument(f"chunk_rows must be a positive integer, not {chunk_rows!r}")
        self._chunk_rows = int(rows)
        self._clauses = clauses

    def __repr__(self) -> str:
        return f"MergeBuilder({self._table.uri!r}, on={list(self._on)}, {self._clauses})"

    @property
    def on(self) -> tuple[str, ...]:
        return self._on

    @property
    def clauses(self) -> MergeClauses:
        return self._clauses

    def _with(self, **changes: Any) -> MergeBuilder:
        new = MergeBuilder.__new__(MergeBuilder)
        new.__dict__.update(self.__dict__)
        new._clauses = dataclasses.replace(self._clauses, **changes)
        return new

    def _matched(self, what: str) -> None:
        if self._clauses.matched not in (None, what):
            raise InvalidArgument(
                f"merge into {self._table.uri}: a matched row is either updated or deleted; this merge already has "
                f"when_matched_{self._clauses.matched}()"
            )

    def when_matched_update(self, columns: Sequence[str] | None = None) -> MergeBuilder:
        """Target rows whose key is in the source take the source row's values: every column (``None``), or only
        ``columns`` (the others keep the target's values; the source then needs only the keys and these)."""
        self._matched("update")
        cols = None
        if columns is not None:
            if isinstance(columns, str):
                raise InvalidArgument(f"columns must be a list of names, e.g. [{columns!r}]")
            cols = tuple(columns)
            unknown = [c for c in cols if c not in self._table.schema.names]
            if unknown or not cols:
                raise InvalidArgument(
                    f"when_matched_update(columns={list(cols)}): "
                    + (f"unknown column(s) {unknown} in table {self._table.uri}" if unknown else "no column given")
                    + f"; columns: {', '.join(self._table.schema.names)}"
                )
        return self._with(matched="update", update_columns=cols)

    def when_matched_delete(self) -> MergeBuilder:
        """Target rows whose key is in the source are deleted."""
        self._matched("delete")
        return self._with(matched="delete", update_columns=None)

    def when_not_matched_insert(self) -> MergeBuilder:
        """Source rows whose key is in no target row (or holds a NULL) are inserted."""
        return self._with(insert=True)

    def when_not_matched_by_source_delete(self, filter: str | pc.Expression | None = None) -> MergeBuilder:
        """Target rows whose key is in no source row (or holds a NULL) are deleted; with ``filter``, only those
        it matches (evaluated on the version the merge reads)."""
        if filter is not None:
            parse_filter(filter, self._table.schema)  # InvalidFilter now, not after the source was read
        return self._with(by_source_delete=True, by_source_filter=filter)

    def execute(self) -> MergeResult:
        """Runs the merge on the table's version (the view moves to the version it commits)."""
        return run_merge(self._table, self._source, self._on, self._clauses, self._chunk_rows)


def merge_keys(schema: pa.Schema, primary_key: Sequence[str], on: str | Sequence[str] | None, uri: str) -> tuple[str, ...]:
    """The key columns of a merge: ``on`` (default: the table's primary key), each a column whose values
    compare exactly (integers, booleans, dates and times, strings, binary; not floats)."""
    if on is None:
        if not primary_key:
            raise InvalidArgument(f"merge into {uri}: pass the key columns (on=...); the table has no primary key")
        names = tuple(primary_key)
    else:
        names = (on,) if isinstance(on, str) else tuple(on)
    if not names or len(set(names)) != len(names):
        raise InvalidArgument(f"merge into {uri}: on={list(names)} must name one or more distinct columns")
    for name in names:
        if name not in schema.names:
            raise InvalidArgument(f"merge into {uri}: key column {name!r} is not a column ({', '.join(schema.names)})")
        t = schema.field(name).type
        k = key_type(t)
        if k is None or pa.types.is_floating(t) or pa.types.is_dictionary(t):
            raise InvalidArgument(
                f"merge into {uri}: key column {name!r} has type {t}; merge keys must be integers, booleans, "
                f"dates/times/timestamps/durations, strings or binary"
            )
    return names


# -- merge --------------------------------------------------------------------------------------
def run_merge(table: Table, source: DataLike, on: tuple[str, ...], clauses: MergeClauses, chunk_rows: int) -> MergeResult:
    """``MergeBuilder.execute``: the module doc's flow."""
    uri = table.uri
    if clauses.matched is None and not clauses.insert and not clauses.by_source_delete:
        raise InvalidArgument(
            f"merge into {uri} has no clause: add when_matched_update(), when_matched_delete(), when_not_matched_insert() "
            f"or when_not_matched_by_source_delete()"
        )
    base = table.manifest
    schema = base.schema
    by_source = parse_filter(clauses.by_source_filter, schema) if clauses.by_source_filter is not None else None
    src_schema = _source_schema(source, schema, on, clauses, uri)
    batches = conform(source, src_schema)  # SchemaMismatch here, before anything is read or written
    view = _view(table, base)
    fragments: list[Fragment] = []
    replaced: list[np.ndarray] = []
    deleted: list[np.ndarray] = []
    seen_keys: list[pa.Table] = []
    inserted = 0
    try:
        for chunk in chunk_batches(batches, chunk_rows):
            src = pa.Table.from_batches(chunk, src_schema)
            keys = _chunk_keys(src, on)
            _check_unique(keys.select(list(on)), uri)
            seen_keys.append(keys.select(list(on)))
            wanted = clauses.matched is not None or clauses.insert
            matched = _match(view.store, base, keys, on) if wanted and keys.num_rows else None
            out: list[pa.Table] = []
            if matched is not None and matched.num_rows:
                addrs = matched.column(ROWADDR).to_numpy()
                if clauses.matched == "update":
                    out.append(_updated_rows(view, src, matched, clauses.update_columns, schema))
                    replaced.append(addrs)
                elif clauses.matched == "delete":
                    deleted.append(addrs)
            if clauses.insert:
                new = _not_matched(src, matched)
                inserted += new.num_rows
                out.append(new)
            rows = [b for t in out for b in t.to_batches()]
            if rows:
                fragments += write_fragments(view.store, schema, iter(rows), view.write_options)
        all_keys = pa.concat_tables(seen_keys) if seen_keys else _empty(schema, on)
        if len(seen_keys) > 1:
            _check_unique(all_keys, uri)
        if clauses.by_source_delete:
            deleted.append(_not_matched_by_source(view.store, base, all_keys, on, by_source))
        updated = by_fragment(np.concatenate(replaced)) if replaced else {}
        deltas = by_fragment(np.concatenate(replaced + deleted)) if deleted else updated
        if not fragments and not deltas:
            return MergeResult(0, 0, 0, table.version)
        txn = Merge(
            base.version,
            fragments,
            deltas,
            updated,
            kind="merge",
            on=on,
            keys=all_keys,
            predicate=by_source.text if by_source is not None else "",
            inserted=inserted,
        )
    except BaseException:
        view.store.delete([f.path for f in fragments])  # nothing was committed
        raise
    record = table.commit_transaction(txn).record
    assert isinstance(record, MergeRecord)
    return MergeResult(record.inserted, record.updated, record.deleted, table.version)


def _view(table: Table, base: Manifest) -> Table:
    """A view of ``table`` pinned at ``base``: what the merge reads while ``table`` may move."""
    from lamina.table import Table

    return Table(table.store, base, table.storage_options)


def _source_names(source: DataLike) -> list[str] | None:
    """The source's column names, where it says them (None: let ``conform`` judge it)."""
    if isinstance(source, (pa.Table, pa.RecordBatch, pa.RecordBatchReader)):
        return list(source.schema.names)
    if isinstance(source, list) and all(isinstance(row, dict) for row in source):
        return list(dict.fromkeys(str(k) for row in source for k in row))
    if type(source).__name__ == "DataFrame" and hasattr(source, "columns"):
        return [str(c) for c in source.columns]
    return None


def _source_schema(source: DataLike, schema: pa.Schema, on: tuple[str, ...], clauses: MergeClauses, uri: str) -> pa.Schema:
    """The table's columns the source must hold, in the table's types: every column, unless it only updates some
    (``when_matched_update(columns=...)`` without insert), when the keys and those columns are enough."""
    names = _source_names(source)
    if names is None or set(schema.names) <= set(names):
        return schema
    unknown = [n for n in names if n not in schema.names]
    if unknown:
        raise SchemaMismatch(
            f"merge into {uri}: the source has column(s) {unknown} that the table does not ({', '.join(schema.names)})"
        )
    needed = list(on)
    why = "the keys"
    if clauses.insert or (clauses.matched == "update" and clauses.update_columns is None):
        needed, why = list(schema.names), "inserting rows" if clauses.insert else "when_matched_update() of every column"
    elif clauses.update_columns is not None:
        needed += list(clauses.update_columns)
        why = f"the keys and when_matched_update(columns={list(clauses.update_columns)})"
    missing = [n for n in schema.names if n in needed and n not in names]
    if missing:
        raise SchemaMismatch(f"merge into {uri}: the source lacks column(s) {missing}, which {why} needs. Nothing was written")
    return pa.schema([schema.field(n) for n in schema.names if n in names])


def _empty(schema: pa.Schema, on: tuple[str, ...]) -> pa.Table:
    return pa.schema([schema.field(n) for n in on]).empty_table()


def _chunk_keys(src: pa.Table, on: tuple[str, ...]) -> pa.Table:
    """The key columns of a chunk's rows whose key holds no NULL, and each one's row number (``_SRC``)."""
    keys = src.select(list(on)).append_column(_SRC, pa.array(np.arange(src.num_rows, dtype=np.int64)))
    if not any(keys.column(n).null_count for n in on):
        return keys
    valid = pc.is_valid(keys.column(on[0]))
    for name in on[1:]:
        valid = pc.and_(valid, pc.is_valid(keys.column(name)))
    return keys.filter(valid)


def _check_unique(keys: pa.Table, uri: str) -> None:
    """DuplicateKey naming a key that ``keys`` (the key columns of source rows) holds more than once."""
    if keys.num_rows < 2:
        return
    names = keys.column_names
    counts = keys.group_by(names, use_threads=False).aggregate([([], "count_all")])
    dups = counts.filter(pc.greater(counts.column("count_all"), 1))
    if dups.num_rows:
        first = dups.slice(0, 1).to_pylist()[0]
        n = first.pop("count_all")
        raise DuplicateKey(
            f"merge into {uri}: the source holds key {first} {n} times ({dups.num_rows} key(s) repeat); a target row "
            f"can take only one source row. Remove the duplicates (e.g. keep the newest row of each key) and run the "
            f"merge again. Nothing was committed"
        )


def index_lookup_keys(rows: int) -> int:
    """The most keys of a chunk that a merge looks up in a btree or bitmap index of a table of ``rows`` live rows;
    more keys and it scans the key columns instead (``INDEX_KEYS_PER_ROW``, ``INDEX_KEYS_ALWAYS``)."""
    return max(INDEX_KEYS_ALWAYS, int(rows * INDEX_KEYS_PER_ROW))


def _lookup_filter(manifest: Manifest, keys: pa.Table, on: tuple[str, ...], use_index: bool = True) -> Filter:
    """The target rows that may hold one of ``keys``: ``col IN (...)`` on each key column a btree or bitmap index
    serves (the index answers it), the keys' range on the others (zone maps and statistics prune it). A superset:
    the join with the keys decides. Not ``use_index``: every column bounded by its range."""
    schema = manifest.schema
    indexed = {ix.column for ix in manifest.indices if ix.kind in ("btree", "bitmap")} if use_index else set()
    nodes: list[Node] = []
    for name in on:
        col = Column((name,), schema.field(name).type)
        values = keys.column(name)
        if name in indexed:
            nodes.append(In(col, pc.unique(values), False, f"{name} IN (<{len(values)} keys>)"))
        else:
            bounds = pc.min_max(values)
            nodes.append(Compare(col, ">=", bounds["min"], f"{name} >= <least key>"))
            nodes.append(Compare(col, "<=", bounds["max"], f"{name} <= <greatest key>"))
    tree = nodes[0] if len(nodes) == 1 else And(tuple(nodes))
    found, pure = conjuncts(tree)
    return Filter(to_arrow(tree), frozenset(on), f"merge keys ({', '.join(on)})", found, pure, tree)


def _join(
    left: pa.RecordBatchReader, right: pa.Table, on: tuple[str, ...], how: str, left_out: list[str], right_out: list[str]
) -> pa.Table:
    """Arrow's hash join of a stream (probed batch by batch) with a table (the hash side): ``how`` is
    "inner" or "left anti"; NULL keys match nothing."""
    from pyarrow import acero  # loads pyarrow.dataset: only when a merge runs

    probe = acero.Declaration("record_batch_reader_source", acero.RecordBatchReaderSourceNodeOptions(left))
    build = acero.Declaration("table_source", acero.TableSourceNodeOptions(right))
    opts = acero.HashJoinNodeOptions(how, list(on), list(on), left_output=left_out, right_output=right_out)
    return acero.Declaration("hashjoin", opts, inputs=[probe, build]).to_table()


def _match(store: Any, manifest: Manifest, keys: pa.Table, on: tuple[str, ...]) -> pa.Table:
    """The live target rows whose key is one of ``keys``: their address (``_rowaddr``, ascending) and the
    chunk row holding it (``_src``). Past ``index_lookup_keys`` keys no index is used: the lookups would read
    nearly every index page and still decode the pages of the key column that hold the rows found, which a
    scan of that column decodes once."""
    use_index = keys.num_rows <= index_lookup_keys(manifest.rows)
    flt = _lookup_filter(manifest, keys, on, use_index)
    scan = Scanner(store, manifest, list(on), flt, with_row_address=True, use_index=use_index)
    return _join(scan.to_reader(), keys, on, "inner", [ROWADDR], [_SRC]).sort_by(ROWADDR)


def _updated_rows(view: Table, src: pa.Table, matched: pa.Table, columns: tuple[str, ...] | None, schema: pa.Schema) -> pa.Table:
    """The new versions of the matched target rows, in their order: the source rows (``columns`` None), or
    the target rows with ``columns`` taken from the source."""
    from_source = src.take(matched.column(_SRC))
    if columns is None:
        return from_source.select(schema.names)
    rows = view.take(matched.column(ROWADDR))
    for name in columns:
        rows = rows.set_column(schema.get_field_index(name), schema.field(name), from_source.column(name))
    return rows


def _not_matched(src: pa.Table, matched: pa.Table | None) -> pa.Table:
    """The chunk's rows no target row matched (NULL keys included)."""
    if matched is None or not matched.num_rows:
        return src
    keep = np.ones(src.num_rows, dtype=bool)
    keep[matched.column(_SRC).to_numpy()] = False
    return src.filter(from_numpy(keep, pa.bool_()))


def _not_matched_by_source(store: Any, manifest: Manifest, keys: pa.Table, on: tuple[str, ...], flt: Filter | None) -> np.ndarray:
    """Addresses of the live target rows (matching ``flt``) whose key is in no source row: the key columns
    streamed through an anti join with every source key."""
    scan = Scanner(store, manifest, list(on), flt, with_row_address=True)
    gone = _join(scan.to_reader(), keys, on, "left anti", [ROWADDR], [])
    return gone.column(ROWADDR).to_numpy().astype(np.uint64, copy=False)


def by_fragment(addresses: np.ndarray) -> dict[int, np.ndarray]:
    """Row addresses as fragment id -> sorted distinct offsets."""
    addrs = sorted_distinct(np.asarray(addresses, dtype=np.uint64))
    if not len(addrs):
        return {}
    fids = addrs >> np.uint64(ADDRESS_SHIFT)
    cuts = np.flatnonzero(fids[1:] != fids[:-1]) + 1
    return {
        int(part[0] >> np.uint64(ADDRESS_SHIFT)): (part & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        for part in np.split(addrs, cuts)
    }


# -- update -------------------------------------------------------------------------------------
def _castable(source: pa.DataType, target: pa.DataType) -> bool:
    """Whether values of ``source`` may go into a column of ``target`` (each value is then cast safely)."""

    def family(t: pa.DataType) -> str:
        for name, test in (
            ("number", lambda t: pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)),
            ("text", lambda t: pa.types.is_string(t) or pa.types.is_large_string(t)),
            ("binary", lambda t: pa.types.is_binary(t) or pa.types.is_large_binary(t)),
            ("timestamp", pa.types.is_timestamp),
            ("date", pa.types.is_date),
            ("duration", pa.types.is_duration),
        ):
            if test(t):
                return name
        return str(t)

    return source == target or pa.types.is_null(source) or family(source) == family(target)


def _changes(
    schema: pa.Schema, values: dict[str, Any] | None, expressions: dict[str, str] | None, uri: str
) -> dict[str, pa.Scalar | ValueExpression]:
    """Column -> its new value (a scalar of its type) or expression (parsed, its type checked)."""
    values, expressions = dict(values or {}), dict(expressions or {})
    if not values and not expressions:
        raise InvalidArgument(f"update of {uri}: pass values={{column: value}} or expressions={{column: 'text'}}")
    unknown = [c for c in [*values, *expressions] if c not in schema.names]
    if unknown:
        raise InvalidArgument(f"update of {uri}: unknown column(s) {unknown}; columns: {', '.join(schema.names)}")
    both = sorted(values.keys() & expressions.keys())
    if both:
        raise InvalidArgument(f"update of {uri}: column(s) {both} are given both a value and an expression")
    out: dict[str, pa.Scalar | ValueExpression] = {}
    for name, value in values.items():
        field = schema.field(name)
        try:
            scalar = value.cast(field.type) if isinstance(value, pa.Scalar) else pa.scalar(value, type=field.type)
        except (pa.ArrowException, TypeError, ValueError, OverflowError) as e:
            raise InvalidArgument(f"update of {uri}: value {value!r} does not fit column {name!r} ({field.type}): {e}") from None
        if not scalar.is_valid and not field.nullable:
            raise SchemaMismatch(f"update of {uri}: column {name!r} is not nullable; it cannot be set to NULL")
        out[name] = scalar
    for name, text in expressions.items():
        field = schema.field(name)
        try:
            parsed = parse_value(text, schema)
        except InvalidFilter as e:
            raise InvalidFilter(f"update of {uri}, column {name!r}: {e}") from None
        if not _castable(parsed.type, field.type):
            raise InvalidFilter(
                f"update of {uri}: expression {text!r} gives {parsed.type} values, which column {name!r} ({field.type}) "
                f"cannot hold; cast in the expression's terms or pick another column"
            )
        out[name] = parsed
    return out


def _updated(table: pa.Table, changes: dict[str, pa.Scalar | ValueExpression], schema: pa.Schema, uri: str) -> pa.Table:
    """``table`` (rows of the table's schema) with the changed columns: every expression reads the rows as they were."""
    new: dict[str, pa.Array | pa.ChunkedArray] = {}
    for name, change in changes.items():
        field = schema.field(name)
        if isinstance(change, pa.Scalar):
            new[name] = pa.repeat(change, table.num_rows)
            continue
        try:
            new[name] = change.evaluate(table).cast(field.type, safe=True)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise InvalidArgument(
                f"update of {uri}: expression {change.text!r} for column {name!r} ({field.type}) fails on a matching row "
                f"({e}). Nothing was committed"
            ) from None
        if not field.nullable and new[name].null_count:
            raise SchemaMismatch(
                f"update of {uri}: expression {change.text!r} gives NULL for column {name!r}, which is not nullable. "
                f"Nothing was committed"
            )
    for name, arr in new.items():
        table = table.set_column(schema.get_field_index(name), schema.field(name), arr)
    return table


def update(
    table: Table, filter: str | pc.Expression, *, values: dict[str, Any] | None = None, expressions: dict[str, str] | None = None
) -> int:
    """``Table.update``: the rows matching ``filter`` rewritten with the new values, their old versions
    deleted, one commit; returns the rows updated (0: no commit)."""
    base = table.manifest
    schema = base.schema
    flt = parse_filter(filter, schema)
    changes = _changes(schema, values, expressions, table.uri)
    view = _view(table, base)
    addresses: list[np.ndarray] = []

    def rows() -> Iterator[pa.RecordBatch]:
        for batch in Scanner(view.store, base, None, flt, with_row_address=True).to_batches():
            addresses.append(batch.column(ROWADDR).to_numpy())
            yield from _updated(pa.Table.from_batches([batch]).drop_columns([ROWADDR]), changes, schema, table.uri).to_batches()

    fragments = write_fragments(view.store, schema, rows(), view.write_options)
    if not fragments:
        return 0
    try:
        replaced = by_fragment(np.concatenate(addresses))
        txn = Merge(base.version, fragments, replaced, replaced, kind="update", predicate=flt.text)
    except BaseException:
        view.store.delete([f.path for f in fragments])
        raise
    record = table.commit_transaction(txn).record
    assert isinstance(record, MergeRecord)
    return record.updated
