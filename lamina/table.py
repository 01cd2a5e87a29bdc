"""The Table API: create, open, append, delete, read, take, time-travel, clean up, drop.

A ``Table`` is a view of one version. Writes (create included) commit a
transaction (see ``lamina.commit``) and move the view to the version they created
(``Table.commit_transaction``; ``Table._move_to`` is the one place a view's manifest changes); reads never change
it. Everything a user can get wrong is checked before data is written.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa

from lamina.arrays import from_numpy
from lamina.clustering import clustering_stats
from lamina.commit import COMMIT_BACKOFF, commit
from lamina.datafile import ROWADDR, WriteOptions, take_many, write_fragments
from lamina.deletion import among, kept_ranges, read_deleted
from lamina.errors import (
    IndexNotFound,
    InvalidArgument,
    InvalidConfig,
    RowNotFound,
    TableNotFound,
    TableReplaced,
    VersionNotFound,
)
from lamina.filter import parse_filter
from lamina.info import FragmentInfo, IndexInfo, LiveFile, TableStats, VersionInfo
from lamina.io_pool import map_fragments
from lamina.manifest import (
    ADDRESS_SHIFT,
    Fragment,
    Manifest,
    belongs_to,
    find_fragments,
    latest_version,
    list_versions,
    load_manifest,
    manifest_path,
    try_load_manifest,
)
from lamina.records import DeleteRecord
from lamina.restore import restore
from lamina.retry import Backoff
from lamina.scan import DEFAULT_BATCH_SIZE, Scanner
from lamina.schema import DataLike, check_column_names, check_primary_key, conform, validate_schema
from lamina.store import ObjectStore, open_store
from lamina.tags import create_tag, delete_tag, list_tags, load_version
from lamina.transaction import AlterSchema, Append, ChangeIndex, Configure, Create, Delete, Overwrite, Transaction

if TYPE_CHECKING:
    from lamina.dataset import LaminaDataset
    from lamina.drop import DropStats
    from lamina.index import IndexOptions
    from lamina.merge import MergeBuilder
    from lamina.verify import VerifyReport


class Table:
    """One version of a Lamina table."""

    def __init__(self, store: ObjectStore, manifest: Manifest, storage_options: dict[str, Any] | None = None):
        self._store = store
        self._manifest = manifest
        self._storage_options = storage_options

    def __reduce__(self):
        return (_reopen, (self.uri, self.version, self._storage_options, self._manifest.table_uuid))

    def __repr__(self) -> str:
        return (
            f"Table({self.uri!r}, version={self.version}, rows={self._manifest.rows}, fragments={len(self._manifest.fragments)})"
        )

    # -- properties ---------------------------------------------------------
    @property
    def uri(self) -> str:
        return self._store.uri

    @property
    def store(self) -> ObjectStore:
        return self._store

    @property
    def manifest(self) -> Manifest:
        return self._manifest

    @property
    def version(self) -> int:
        return self._manifest.version

    @property
    def schema(self) -> pa.Schema:
        return self._manifest.schema

    @property
    def primary_key(self) -> tuple[str, ...]:
        return self._manifest.primary_key

    @property
    def storage_options(self) -> dict[str, Any] | None:
        return self._storage_options

    @property
    def write_options(self) -> WriteOptions:
        return WriteOptions.from_config(self._manifest.config)

    # -- versions -----------------------------------------------------------
    def versions(self) -> list[VersionInfo]:
        """Every version of this table still on storage, oldest first (not those of a table dropped at
        this URI before it was created, which may precede them)."""
        out = []
        for v in list_versions(self._store):
            try:
                m = load_manifest(self._store, v, self._manifest.table_uuid)
            except TableReplaced:
                continue
            out.append(
                VersionInfo(
                    v,
                    dt.datetime.fromtimestamp(m.timestamp_ms / 1000, dt.timezone.utc),
                    m.record.operation,
                    m.rows,
                    len(m.fragments),
                )
            )
        return out

    def checkout(self, version: int | str) -> Table:
        """The table as of ``version``: a version number, or a tag's name (this object is unchanged). A tagged
        version stays readable after cleanup removed it from ``versions()``, by its tag or its number."""
        m, _, _ = load_version(self._store, version, self._manifest.table_uuid)
        return Table(self._store, _live(self._store, m), self._storage_options)

    def restore(self, version: int | str) -> int:
        """Commits a new version equal to an earlier one (a version number or a tag's name): its schema,
        rows (fragments with their deletions), indices, primary key and settings; returns the new version
        and moves this view to it. Nothing is deleted: the versions in between stay readable (``checkout``).

        The WAL watermarks stay the current ones: WAL transactions flushed after that version are undone by
        the restore and never applied again. ``VersionNotFound`` (nothing committed) if cleanup removed the
        version or any file it needs; cleanup keeps tagged versions (``create_tag``). Concurrent commits
        follow the conflict matrix as for an overwrite: an append, delete, compaction, index build or WAL
        flush that read an older version stops with ``CommitConflict``.

        >>> t.create_tag("before-backfill")
        >>> t.append(bad_rows)
        >>> t.restore("before-backfill")
        """
        return restore(self._store, self._manifest, version, self.commit_transaction).version

    # -- tags ---------------------------------------------------------------
    def tags(self) -> dict[str, int]:
        """Every tag of this table and the version it names, by name (docs/FORMAT.md §9.2)."""
        return {t.name: t.version for t in list_tags(self._store, self._manifest.table_uuid)}

    def create_tag(self, name: str, version: int | None = None) -> int:
        """Names ``version`` (default: this view's) ``name``; returns the version. Cleanup keeps a tagged version
        and every file it needs for as long as the tag exists; ``checkout(name)``, ``open_table(uri,
        version=name)`` and ``restore(name)`` read it. Names: 1 to 128 of ``[A-Za-z0-9_.-]``, not starting
        with ``.``; a taken name is ``TagExists`` (tags never move: delete it first)."""
        return create_tag(self._store, name, self.version if version is None else int(version), self._manifest.table_uuid).version

    def delete_tag(self, name: str) -> int:
        """Removes tag ``name``; returns the version it named. Its version's files go at the next cleanup
        unless a kept version or another tag needs them. ``TagNotFound`` if there is no such tag."""
        return delete_tag(self._store, name, self._manifest.table_uuid).version

    def reload(self) -> Table:
        """Moves this view to the latest version; returns self.

        Raises ``TableReplaced`` if the table was dropped and created again at this URI (the
        old table's versions are never mixed with the new one's), ``TableNotFound`` if it is gone
        or being dropped.
        """
        latest = latest_version(self._store)
        if latest is None:
            raise TableNotFound(f"the table at {self.uri} was dropped (no versions left); nothing to reload")
        if latest == self.version and not belongs_to(self._store, latest, self._manifest.table_uuid):
            m = load_manifest(self._store, latest)  # the same number, another table
            raise TableReplaced(
                f"the table at {self.uri} was dropped and created again (now table {m.table_uuid or '(unnamed)'} at version "
                f"{latest}; this view holds table {self._manifest.table_uuid or '(unnamed)'}): open it again with open_table"
            )
        if latest != self.version:
            m = load_manifest(self._store, latest)
            if m.table_uuid != self._manifest.table_uuid or latest < self.version:
                raise TableReplaced(
                    f"the table at {self.uri} was dropped and created again (now table {m.table_uuid or '(unnamed)'} at version "
                    f"{latest}; this view holds table {self._manifest.table_uuid or '(unnamed)'} at version {self.version}): "
                    f"open it again with open_table"
                )
            self._move_to(m)
        return self

    # -- writes -------------------------------------------------------------
    def _move_to(self, manifest: Manifest) -> None:
        """Moves this view to ``manifest``, a newer version of this same table (e.g. one a commit
        made); the only way a table's manifest changes outside ``reload``. Never to a tombstone:
        ``TableNotFound``, the table was dropped."""
        _live(self._store, manifest)
        if manifest.table_uuid != self._manifest.table_uuid or manifest.version < self._manifest.version:
            raise TableReplaced(
                f"cannot move the view of {self.uri} (table {self._manifest.table_uuid or '(unnamed)'} at version "
                f"{self.version}) to version {manifest.version} of table {manifest.table_uuid or '(unnamed)'}: "
                f"not a newer version of the same table; open it again with open_table"
            )
        self._manifest = manifest

    def commit_transaction(
        self, txn: Transaction, *, store: ObjectStore | None = None, backoff: Backoff = COMMIT_BACKOFF
    ) -> Manifest:
        """Commits ``txn``, read at this view's version, and moves the view to the version it made; returns
        that manifest. ``store``: a view of this table's store to commit through (e.g. one that records
        its requests); ``backoff``: how lost races are retried (``lamina.commit``)."""
        self._move_to(commit(self._store if store is None else store, txn, self._manifest, backoff=backoff))
        return self._manifest

    def catch_up(self, max_reads: int) -> bool:
        """Moves this view forward over the versions committed after it, read one by one (versions are
        written in order): one existence check when none is new. False, and the view unmoved, when more
        than ``max_reads`` are new (``reload`` lists them instead)."""
        m = self._manifest
        if not self._store.exists(manifest_path(m.version + 1)):
            return True
        for _ in range(max_reads):
            nxt = try_load_manifest(self._store, m.version + 1, m.table_uuid)
            if nxt is None:
                self._move_to(m)
                return True
            m = nxt
        return False

    def append(self, data: DataLike, *, max_rows_per_file: int | None = None, row_group_rows: int | None = None) -> int:
        """Appends rows; returns the new version (the current one if ``data`` is empty).

        ``data`` is a pyarrow Table, RecordBatch or RecordBatchReader, a pandas
        DataFrame, or a list of dicts. Memory held: ``max_rows_per_file`` rows.
        """
        options = WriteOptions.from_config(
            self._manifest.config, max_rows_per_file=max_rows_per_file, row_group_rows=row_group_rows
        )
        fragments = write_fragments(self._store, self.schema, conform(data, self.schema), options)
        if not fragments:
            return self.version
        return self.commit_transaction(Append(self.version, fragments)).version

    def overwrite(self, data: DataLike, *, schema: pa.Schema | None = None) -> int:
        """Replaces every row (optionally with a new schema); returns the new version."""
        target = validate_schema(schema) if schema is not None else self.schema
        options = self.write_options
        fragments = write_fragments(self._store, target, conform(data, target), options)
        return self.commit_transaction(Overwrite(self.version, fragments, target if schema is not None else None)).version

    def delete(self, filter: str | pa.compute.Expression) -> int:
        """Deletes the rows matching ``filter``; returns how many were deleted (0: no commit).

        The filter is evaluated on this version; a concurrent commit is rebased over
        (see docs/FORMAT.md, conflict matrix).
        """
        flt = parse_filter(filter, self.schema)
        base = self._manifest

        deltas = Scanner(self._store, base, [], flt).matching_offsets()
        if not deltas:
            return 0
        record = self.commit_transaction(Delete(base.version, deltas, predicate=flt.text)).record
        assert isinstance(record, DeleteRecord)
        return record.rows

    def merge(self, source: DataLike, on: str | Sequence[str] | None = None, *, chunk_rows: int | None = None) -> MergeBuilder:
        """A merge of ``source`` into this table by the key columns ``on`` (default: the primary key): add clauses,
        then ``execute()`` commits it as one version (``lamina.merge``; docs/OPERATIONS.md, "Merge and update").

        ``source``: anything ``append`` takes. A key holding a NULL matches nothing (SQL); the source may hold
        each key once (``DuplicateKey``). It is read ``chunk_rows`` rows at a time (default 1,048,576), each
        chunk's updated and inserted rows written before the next: memory is a chunk plus the source's keys.

        >>> t.merge(changes, on="id").when_matched_update().when_not_matched_insert().execute()
        MergeResult(inserted=3, updated=12, deleted=0, version=8)
        >>> t.merge(snapshot, on=["region", "id"]).when_matched_update(["qty"]).when_not_matched_by_source_delete().execute()
        """
        from lamina.merge import MergeBuilder

        return MergeBuilder(self, source, on, chunk_rows)

    def update(
        self,
        filter: str | pa.compute.Expression,
        *,
        values: dict[str, Any] | None = None,
        expressions: dict[str, str] | None = None,
    ) -> int:
        """Sets columns of the rows matching ``filter``: ``values`` maps a column to a value, ``expressions`` to
        an expression over the row as it was (``"price * 1.1"``: ``+ - * /``, parentheses, columns, literals;
        ``lamina.filter.parse_value``), its result cast to the column's type (an error if a value does not fit).
        The rows are rewritten as new fragments and their old versions deleted, in one commit; returns how
        many were updated (0: no commit).

        >>> t.update("qty < 0", values={"qty": 0})
        >>> t.update("region = 'eu'", expressions={"price": "price * 1.1"})
        """
        from lamina.merge import update

        return update(self, filter, values=values, expressions=expressions)

    def set_clustering(self, columns: str | Sequence[str] | None, curve: str = "hilbert", *, sample_fragments: int = 64) -> int:
        """Sets the table's clustering keys (None: removes them); returns the new version. Writes no data:
        compaction then sorts rows along the curve (``lamina.planner.clustering``), a sorted run at a time.

        ``curve``: ``"hilbert"`` or ``"zorder"`` for 2 to 4 columns, ``"linear"`` for one. Each key's cells
        are cut at quantiles sampled from up to ``sample_fragments`` fragments (spread over the table), so
        a skewed key still spreads rows over every cell; compaction samples again when the data drifts
        past them. Changing the keys (or their cells) makes every fragment unclustered to compaction:
        the table is clustered again, a run at a time.

        >>> table.set_clustering(["x", "y"], curve="hilbert")
        >>> table.stats().clustering.describe()
        'clustering hilbert on x, y: 0/40 fragments clustered in 40 runs; point filters x: depth 40.00, 0% skipped, ...'
        """
        from lamina.clustering import CONFIG_KEY, choose

        if columns is None:
            return self.commit_transaction(Configure(self.version, {CONFIG_KEY: None})).version
        names = [columns] if isinstance(columns, str) else list(columns)
        if self._manifest.stable_row_ids:
            raise InvalidConfig(
                f"table {self.uri} keeps stable row ids, and clustering reorders rows (each would need its own id "
                f"range in the manifest): clustering is not supported on such tables"
            )
        clustering = choose(self.schema, names, curve, None)  # checks columns and curve before reading anything
        clustering = choose(self.schema, names, curve, self.sample(names, sample_fragments))
        return self.commit_transaction(Configure(self.version, {CONFIG_KEY: clustering.to_config()})).version

    # -- schema evolution (docs/FORMAT.md §2.4): one commit each, no data file written ----------------
    def add_columns(self, fields: pa.Field | Sequence[pa.Field] | pa.Schema, *, defaults: dict[str, Any] | None = None) -> int:
        """Adds columns at the end of the schema; returns the new version. Rows written before read a
        column as null, or as its value in ``defaults`` (required for a non-nullable column). Writes no
        data file: old files are read through the schema they were written in (``lamina.evolution``).

        >>> table.add_columns([pa.field("score", pa.float64())], defaults={"score": 0.0})
        """
        listed = [fields] if isinstance(fields, pa.Field) else list(fields)
        return self._alter("add_columns", fields=listed, defaults=dict(defaults or {}))

    def drop_columns(self, names: str | Sequence[str]) -> int:
        """Drops columns (a dotted path drops a struct's field); returns the new version. Their data stays
        in the files already written, unread, until compaction rewrites them; a column added later under
        the same name is another column (it reads null on those rows, never the old values). Index entries
        on a dropped column are dropped with it."""
        listed = [names] if isinstance(names, str) else list(names)
        return self._alter("drop_columns", names=listed)

    def rename_column(self, old: str, new: str) -> int:
        """Renames a column (``"a.b"``: field ``b`` of struct ``a``) to ``new``; returns the new version.
        Index entries follow the column."""
        return self._alter("rename_column", old=old, new=new)

    def alter_column(self, name: str, new_type: pa.DataType) -> int:
        """Widens a column's type (``"a.b"`` for a struct's field); returns the new version. Only changes
        where every old value is exactly a new one are allowed (int8→int16→int32→int64, unsigned to wider,
        float32→float64, small ints→float64, string→large_string, binary→large_binary, date32→timestamp in
        seconds or milliseconds: a finer unit's range cannot hold every date); old files are cast as read."""
        return self._alter("alter_column", name=name, type=new_type)

    def _alter(self, kind: str, **arguments: Any) -> int:
        try:
            return self.commit_transaction(AlterSchema(self.version, kind, **arguments)).version
        except InvalidArgument as e:  # the change cannot be made (checked at commit, on the latest schema)
            if self.uri in str(e):
                raise
            raise type(e)(f"{kind} on table {self.uri} (version {self.version}): {e}. Nothing was committed") from None

    def sample(self, columns: Sequence[str], fragments: int = 64) -> pa.Table:
        """The live rows of ``columns`` in up to ``fragments`` fragments spread evenly over the table (all
        of them in a smaller table): a sample of the data for boundaries and statistics."""
        ids = [f.id for f in self._manifest.fragments]
        if len(ids) > fragments:
            ids = [ids[round(i * (len(ids) - 1) / (fragments - 1))] for i in range(fragments)] if fragments > 1 else ids[:1]
        return self.scanner(list(columns), fragments=ids).to_table()

    # -- reads --------------------------------------------------------------
    def scanner(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pa.compute.Expression | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        limit: int | None = None,
        offset: int | None = None,
        with_row_address: bool = False,
        with_row_id: bool = False,
        fragments: Iterable[int | FragmentInfo] | None = None,
        use_index: bool = True,
        readahead: int | None = None,
    ) -> Scanner:
        """A streaming read of this version's live rows (``lamina.scan``): ``to_reader()``, ``to_batches()``,
        ``to_table()``, ``count_rows()``, ``explain()``, and the Arrow stream (``pa.table(scanner)``).

        ``filter`` (a string or a pyarrow expression) is answered through btree/bitmap indices where its
        shape allows and prunes fragments and row groups by zone maps and statistics; ``limit`` /
        ``offset`` count output rows, and reading stops once the limit is met; ``fragments``: only these
        (ids or ``FragmentInfo``). Memory: at most ``readahead`` (default ``LAMINA_IO_THREADS``, 8) pieces
        of at most ``max(batch_size, one row group)`` rows are decoded at once.

        >>> for batch in table.scanner(["id", "qty"], "qty < 6", batch_size=8192).to_batches():
        ...     ...
        """
        return Scanner(
            self._store,
            self._manifest,
            columns,
            filter,
            batch_size=batch_size,
            limit=limit,
            offset=offset,
            with_row_address=with_row_address,
            with_row_id=with_row_id,
            fragments=fragments,
            use_index=use_index,
            readahead=readahead,
        )

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        """The Arrow PyCapsule stream of every live row: ``pa.table(t)``, ``pl.from_arrow(t)`` and
        ``duckdb.sql("from t")`` read the table with no glue (streamed; no pushdown: for DuckDB's
        projection and filter pushdown use ``to_duckdb`` / ``dataset``)."""
        return self.scanner().__arrow_c_stream__(requested_schema)

    def dataset(self) -> LaminaDataset:
        """This version as a ``pyarrow.dataset.Dataset`` (``lamina.dataset``): DuckDB scans it natively,
        pushing projections and filters into ``scanner``; deletions applied, pinned to this version.
        (Imported on first use: ``pyarrow.dataset`` loads pandas, which a point lookup never needs.)"""
        from lamina.dataset import LaminaDataset

        return LaminaDataset(self)

    def to_duckdb(self, name: str | None = None, connection: Any = None, *, reader: str = "lamina") -> Any:
        """This version as a DuckDB relation; with ``name``, also a view of that name on ``connection``
        (default: DuckDB's default connection). ``reader="lamina"`` (default): DuckDB pushes projections
        and filters into the scanner (indices, zone maps, statistics). ``reader="duckdb"``: DuckDB's own
        Parquet reader over the version's files minus their deleted rows, faster on large scans, no
        Lamina index (docs/OPERATIONS.md, "Reading").

        >>> t.to_duckdb("orders")
        >>> duckdb.sql("select flag, sum(qty) from orders where day < 100 group by flag")
        """
        return self.dataset().to_duckdb(name, connection, reader=reader)

    def to_arrow(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pa.compute.Expression | None = None,
        with_row_address: bool = False,
        with_row_id: bool = False,
        use_index: bool = True,
    ) -> pa.Table:
        """Live rows as a pyarrow Table, in fragment order (``_rowaddr`` / ``_rowid`` on request):
        ``scanner(...).to_table()``.

        A filter is answered through btree/bitmap indices where its shape allows
        (see ``explain``); the result is the same with ``use_index=False``.
        """
        return self.scanner(
            columns, filter, with_row_address=with_row_address, with_row_id=with_row_id, use_index=use_index
        ).to_table()

    def to_pandas(
        self,
        columns: Sequence[str] | None = None,
        filter: str | pa.compute.Expression | None = None,
        with_row_address: bool = False,
        with_row_id: bool = False,
    ):
        """``to_arrow(...).to_pandas()``."""
        return self.to_arrow(columns, filter, with_row_address, with_row_id).to_pandas()

    def to_ray(self, columns: Sequence[str] | None = None, filter: str | pa.compute.Expression | None = None):
        """This version's live rows as a ``ray.data.Dataset`` (``lamina.ray.read_table`` on this view)."""
        from lamina.ray import from_table

        return from_table(self, columns=columns, filter=filter)

    def count_rows(self, filter: str | pa.compute.Expression | None = None) -> int:
        """Live rows, optionally only those matching ``filter`` (no data read without one)."""
        return self.scanner([], filter).count_rows()

    def take(self, row_addresses: Iterable[int] | np.ndarray | pa.Array, columns: Sequence[str] | None = None) -> pa.Table:
        """Rows at ``row_addresses`` (as returned in ``_rowaddr``), in the order asked; repeats allowed."""
        cols = check_column_names(self.schema, columns, self.uri) or list(self.schema.names)
        if isinstance(row_addresses, (pa.Array, pa.ChunkedArray)):
            row_addresses = row_addresses.to_numpy(zero_copy_only=False)
        try:
            addrs = np.asarray(list(row_addresses) if not isinstance(row_addresses, np.ndarray) else row_addresses).astype(
                np.uint64
            )
        except (TypeError, ValueError, OverflowError):
            raise InvalidArgument("row_addresses must be integers (values of the _rowaddr column)") from None
        if len(addrs) == 0:
            return self.schema.empty_table().select(cols)
        # One pass: distinct addresses sorted by (fragment, offset), and where each asked address is among them.
        uniq, inverse = np.unique(addrs, return_inverse=True)
        fids = (uniq >> np.uint64(ADDRESS_SHIFT)).astype(np.int64)
        offs = (uniq & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        starts = np.flatnonzero(np.concatenate([[True], fids[1:] != fids[:-1]]))
        counts = np.diff(np.concatenate([starts, [len(uniq)]]))
        frags = find_fragments(self._manifest.fragments, fids[starts].tolist())
        chosen = []
        for fid, at, n in zip(fids[starts].tolist(), starts.tolist(), counts.tolist()):
            frag = frags.get(fid)
            if frag is None:
                raise RowNotFound(
                    f"row address {int(uniq[at])} names fragment {fid}, which version {self.version} of {self.uri} does not have"
                )
            o = offs[at : at + n]
            bad = o[o >= frag.rows]
            if len(bad) == 0 and frag.deletion is not None:
                bad = o[among(o, read_deleted(self._store, frag))]
            if len(bad):
                raise RowNotFound(
                    f"row address {(fid << ADDRESS_SHIFT) | int(bad[0])} (fragment {fid}, offset {int(bad[0])}) "
                    f"is deleted or out of range at version {self.version} of {self.uri}"
                )
            chosen.append(frag)
        rows = take_many(self._store, self.schema, chosen, offs, counts, cols)
        return rows.take(from_numpy(inverse.ravel(), pa.int64()))

    # -- indices ------------------------------------------------------------
    def create_index(
        self, column: str, kind: str, *, name: str | None = None, stem: bool = False, options: IndexOptions | None = None
    ) -> int:
        """Builds a ``btree``, ``bitmap`` or ``fts`` index on ``column`` in this process (threads)
        and commits it; returns the new version. For a cluster build use ``python -m lamina.jobs.index``.

        ``name`` defaults to ``<column>_<kind>``; ``stem`` turns on English stemming (fts).
        """
        from lamina.index import IndexOptions
        from lamina.index.build import build_index

        if options is None:
            options = IndexOptions(stem=bool(stem))
        elif stem:
            options = dataclasses.replace(options, stem=True)
        return build_index(self, column, kind, name=name, options=options, ray=False).version

    def update_index(self, name: str) -> int:
        """Indexes the fragments ``name`` does not cover yet (appended or compacted since); returns the version."""
        from lamina.index.build import build_index

        return build_index(self, None, None, name=name, update=True, ray=False).version

    def list_indices(self) -> list[IndexInfo]:
        """Every index with its coverage at this version."""
        live = self._manifest.fragment_map()
        out = []
        for ix in self._manifest.indices:
            cov = ix.coverage(live)
            out.append(
                IndexInfo(
                    ix.name,
                    ix.column,
                    ix.kind,
                    len(set(cov.values())),
                    len(cov),
                    len(live) - len(cov),
                    sum(live[f].live_rows for f in cov),
                    sum(s.bytes for s in ix.segments),
                    dict(ix.details),
                )
            )
        return out

    def drop_index(self, name: str) -> int:
        """Removes index ``name`` (its files go at the next cleanup); returns the new version."""
        ix = next((i for i in self._manifest.indices if i.name == name), None)
        if ix is None:
            raise IndexNotFound(
                f"table {self.uri} has no index named {name!r} at version {self.version}; "
                f"indices: {', '.join(i.name for i in self._manifest.indices) or 'none'}"
            )
        return self.commit_transaction(ChangeIndex(self.version, ix, "drop")).version

    def explain(self, filter: str | pa.compute.Expression) -> str:
        """Which index serves which part of ``filter``, which fragments are scanned, and which of
        their row groups Parquet statistics prune (footers are read, and cached)."""
        from lamina.index.query import explain

        return explain(self._manifest, parse_filter(filter, self.schema), self.uri, self._store, map_fragments)

    def search(
        self,
        text: str,
        column: str | None = None,
        k: int = 10,
        *,
        columns: Sequence[str] | None = None,
        with_row_address: bool = False,
    ) -> pa.Table:
        """The ``k`` rows best matching ``text`` by BM25, best first, with a ``_score`` column.

        ``column`` may be omitted when the table has one full-text index. Fragments the
        index does not cover are analyzed on the fly, so results are always complete.
        ``columns=[]`` reads no data: only the scores (and ``_rowaddr`` on request).
        """
        from lamina.index.search import hit_rows, search

        cols = check_column_names(self.schema, columns, self.uri)
        cols = list(self.schema.names) if cols is None else cols
        addrs, scores, _ = search(self._store, self._manifest, text, column, k, self.uri, map_fn=map_fragments)
        out = hit_rows(self._store, self._manifest, self.schema, addrs, cols)
        if with_row_address:
            out = out.append_column(ROWADDR, pa.array(addrs, type=pa.uint64()))
        return out.append_column("_score", pa.array(scores, type=pa.float64()))

    # -- inspection ---------------------------------------------------------
    def fragments(self) -> list[FragmentInfo]:
        """Every fragment of this version, in table order (a list: ``iter_fragments`` streams them)."""
        return list(self.iter_fragments())

    def iter_fragments(self) -> Iterator[FragmentInfo]:
        """The fragments of this version one by one, reading its manifest segments a few at a time:
        a table of a million fragments is walked without holding a million objects."""
        for f in self._manifest.fragments:
            yield FragmentInfo(
                f.id,
                f.path,
                f.rows,
                f.deleted_rows,
                f.live_rows,
                f.file_bytes,
                tuple((g.rows, g.bytes) for g in f.row_groups),
                f.file_version,
                f.deletion.path if f.deletion else None,
            )

    def live_files(self) -> list[LiveFile]:
        """The data files of this version and the rows of each it holds: the table's rows, for an engine
        with no Lamina integration (Spark, Trino, a hand-written DuckDB query).

        The files are plain Parquet, but the table is not "every file under ``data/``": a version holds
        only the files its manifest lists (after a compaction, until cleanup, the replaced files are
        still there), and of each only the rows not deleted (``_deletions/*.bin``). Read each
        ``LiveFile.uri`` keeping the rows whose 0-based position in the file falls in ``keep`` (or is
        not in ``deleted``); in DuckDB, ``read_parquet(uri, file_row_number=true)`` numbers them::

            for f in table.live_files():
                ranges = " OR ".join(f"file_row_number BETWEEN {s} AND {e - 1}" for s, e in f.keep) or "false"
                duckdb.sql(f"SELECT * EXCLUDE (file_row_number) FROM read_parquet('{f.uri}', "
                           f"file_row_number=true) WHERE {ranges}")

        Files listed in version order, rows in file order, give the rows of ``to_arrow()`` in its
        order. A file written before a schema change (``add_columns``, ``rename_column``, ...) keeps its
        columns as they were: its ``columns`` maps each of today's columns to the file's (None: read null or
        the column's default); ``to_duckdb(reader="duckdb")`` reads them so. The deletion files are read in
        parallel, the fragments stream from the manifest (no directory is listed). ``lamina files URI
        --json`` prints the same (``LiveFile.to_dict``).

        >>> [(f.path, f.rows, f.live_rows, f.keep) for f in table.live_files()]
        [('data/3f…e1.parquet', 400, 397, ((1, 3), (4, 399))), ('data/9a…07.parquet', 100, 100, ((0, 100),))]
        """
        from lamina.evolution import layout

        store, schema = self._store, self.schema

        def live_file(f: Fragment) -> LiveFile:
            deleted = read_deleted(store, f)
            keep = kept_ranges(deleted, f.rows)
            lay = layout(f.schema, schema)
            columns = None if lay.same else {n: None if src is None else src.name for n, src in lay.sources.items()}
            return LiveFile(
                f.id, f.path, store.location(f.path), f.rows, f.live_rows, f.file_bytes, tuple(deleted.tolist()), keep, columns
            )

        out: list[LiveFile] = []
        fragments = iter(self._manifest.fragments)
        while batch := list(itertools.islice(fragments, 256)):  # a window of deletion files read at once
            out.extend(map_fragments(live_file, batch))
        return out

    def stats(self) -> TableStats:
        m = self._manifest
        n = len(m.fragments)
        deleted = data_bytes = row_groups = with_deletions = 0
        for f in m.fragments:  # one pass: the fragments stream from the manifest segments
            deleted += f.deleted_rows
            data_bytes += f.file_bytes
            row_groups += len(f.row_groups)
            with_deletions += f.deletion is not None
        return TableStats(
            uri=self.uri,
            version=m.version,
            rows=m.rows,
            deleted_rows=deleted,
            fragments=n,
            data_bytes=data_bytes,
            row_groups=row_groups,
            fragments_with_deletions=with_deletions,
            mean_rows_per_fragment=(m.rows / n) if n else 0.0,
            versions=len(list_versions(self._store)),
            indices=len(m.indices),
            clustering=clustering_stats(m),
        )

    def verify(self, *, threads: int = 4, progress=None) -> VerifyReport:
        """Reads every file this version needs and checks it against the manifest (presence, size,
        CRC32C checksum, Parquet row count, deletion counts); returns a report naming each damaged
        file. Changes nothing. ``python -m lamina.jobs.verify URI`` runs it from the command line.

        >>> report = table.verify()
        >>> report.ok, report.files_checked, report.problems
        """
        from lamina.verify import verify

        return verify(self._store, self._manifest, threads=threads, progress=progress)

    def cleanup(self, older_than: dt.timedelta | dt.datetime | float = dt.timedelta(days=7), *, enforce_retention: bool = True):
        """Removes versions that stopped being the latest before the cutoff, and every file no
        remaining version needs.

        Files newer than the cutoff are kept even if unreferenced: they may belong to a
        writer that has not committed yet. The latest version is always kept. A retention
        under one hour is refused unless ``enforce_retention=False`` (nothing else is
        reading or writing the table).
        """
        from lamina.cleanup import cleanup

        return cleanup(self._store, older_than, enforce_retention=enforce_retention)


def create_table(
    uri: str,
    schema: pa.Schema,
    *,
    primary_key: str | Sequence[str] | None = None,
    stable_row_ids: bool = False,
    storage_options: dict[str, Any] | None = None,
    max_rows_per_file: int | None = None,
    row_group_rows: int | None = None,
) -> Table:
    """Creates an empty table at ``uri`` (a local path or ``s3://bucket/prefix``): version 1, or at a URI
    where a table was dropped, the version after the drop's tombstone (docs/FORMAT.md §9.1)."""
    from lamina.drop import free_after

    schema = validate_schema(schema)
    pk = check_primary_key(schema, primary_key)
    options = WriteOptions.from_config({}, max_rows_per_file=max_rows_per_file, row_group_rows=row_group_rows)
    store = open_store(uri, storage_options)
    txn = Create(schema, primary_key=pk, stable_row_ids=stable_row_ids, config=options.to_config(), after=free_after(store))
    return Table(store, commit(store, txn, txn.base), storage_options)


def open_table(uri: str, *, version: int | str | None = None, storage_options: dict[str, Any] | None = None) -> Table:
    """Opens the table at ``uri``: its latest version, or ``version`` (a number, or a tag's name)."""
    return open_with_hint(uri, version, storage_options)


def open_with_hint(
    uri: str, version: int | str | None, storage_options: dict[str, Any] | None, known_latest: int | None = None
) -> Table:
    """``open_table``; ``known_latest``, a version that was once the latest (a catalog's record), is tried
    first (``load_latest_from``: one round trip when it still is)."""
    store = open_store(uri, storage_options)
    if version is None and known_latest is not None:
        from lamina.manifest import load_latest_from

        m = load_latest_from(store, known_latest)
        if m is not None:
            return Table(store, _live(store, m), storage_options)
    if not (version is None or isinstance(version, str)):
        try:
            return Table(store, _live(store, load_manifest(store, int(version))), storage_options)
        except VersionNotFound:  # removed by cleanup: a tag on it may still hold it
            if latest_version(store) is None:
                raise
    latest = latest_version(store)
    if latest is None:
        raise TableNotFound(
            f"no Lamina table at {store.uri} (no manifests under _versions/); create one with lamina.create_table"
        )
    head = _live(store, load_manifest(store, latest))
    if version is None:
        return Table(store, head, storage_options)
    # A tag's name, or the number of a version cleanup removed: through the tags of the table there now.
    return Table(store, _live(store, load_version(store, version, head.table_uuid)[0]), storage_options)


def _live(store: ObjectStore, m: Manifest) -> Manifest:
    """``m``, unless it is a tombstone: then the table was dropped (``TableNotFound``)."""
    if m.dropped:
        raise TableNotFound(
            f"no Lamina table at {store.uri}: the table there was dropped at version {m.version}; create one with "
            f"lamina.create_table (if the drop stopped before it finished, run lamina.drop_table({store.uri!r}) first)"
        )
    return m


def drop_table(uri: str, *, storage_options: dict[str, Any] | None = None) -> DropStats:
    """Drops the table at ``uri`` and removes every object of it but one, the drop's tombstone (a small
    manifest); the URI is then free for a new table, whose versions follow the tombstone.

    The drop is a commit (a tombstone version): a writer racing it stops with ``TableDropped`` and commits
    nothing. Run it again to finish a drop that stopped midway. ``TableNotFound`` if there is no table.

    >>> lamina.drop_table("/tmp/t")
    DropStats(uri='/tmp/t', version=4, objects_removed=8, bytes_removed=4521)
    """
    from lamina.drop import purge

    store = open_store(uri, storage_options)
    done = purge(store)
    if done is None:
        raise TableNotFound(
            f"no Lamina table at {store.uri} to drop (no manifests under _versions/, or its latest "
            f"version is the tombstone of a drop that finished)"
        )
    return done


@dataclasses.dataclass(frozen=True)
class Upgrade:
    """What ``upgrade_table`` did: the format the latest version was in, and the version now latest."""

    uri: str
    from_format: int
    to_format: int
    version: int
    upgraded: bool


def upgrade_table(uri: str, *, storage_options: dict[str, Any] | None = None, dry_run: bool = False) -> Upgrade:
    """Converts the latest version of the table at ``uri`` to the current manifest format: a table
    whose latest version is in manifest format 1 (every fragment in the root) gets a new version
    that changes no row, laid out in manifest segments (docs/FORMAT.md §2.3; recorded as an append
    of no fragments, so it conflicts with no concurrent writer). Any commit converts a table as
    well; this does it now. A table already in the current format is left as it is."""
    from lamina.commit import commit
    from lamina.manifest import FORMAT_VERSION, stored_format_version
    from lamina.transaction import Append

    table = open_table(uri, storage_options=storage_options)
    found = stored_format_version(table.store, table.version)
    if found >= FORMAT_VERSION or dry_run:
        return Upgrade(table.uri, found, FORMAT_VERSION, table.version, False)
    done = commit(table.store, Append(table.version, []), table.manifest)
    return Upgrade(table.uri, found, FORMAT_VERSION, done.version, True)


def _reopen(uri: str, version: int, storage_options: dict[str, Any] | None, table_uuid: str | None = None) -> Table:
    store = open_store(uri, storage_options)
    return Table(store, _live(store, load_manifest(store, int(version), table_uuid)), storage_options)


__all__ = [
    "Table",
    "create_table",
    "open_table",
    "drop_table",
    "upgrade_table",
    "Upgrade",
    "FragmentInfo",
    "VersionInfo",
    "TableStats",
    "IndexInfo",
]
