"""A version of a Lamina table as a ``pyarrow.dataset.Dataset``, which DuckDB scans with pushdown.

DuckDB's Python client reads a ``pyarrow.dataset.Dataset`` it finds in a query (``from ds``, or a
view ``to_duckdb`` registers) by calling ``ds.scanner(columns=[...], filter=<pyarrow expression>)``
and then ``.to_reader()``: the projection and the filters DuckDB can push arrive here as arguments,
and DuckDB does not filter those rows again. So ``scanner`` returns a ``lamina.scan.Scanner``, which
evaluates the pyarrow expression exactly as given (Arrow's semantics) after using it to choose
fragments, row groups and index candidates, and never returns a deleted row. This is how Lance's
``LanceDataset`` meets DuckDB (docs/ARCHITECTURE.md, "Engines").

The class subclasses pyarrow's ``FileSystemDataset`` so DuckDB recognizes it and so pyarrow's own
functions that reach for the C++ dataset (``Scanner.from_dataset``, ``UnionDataset``) find one: a
single placeholder fragment on a filesystem that refuses every call with an error saying to read
through ``scanner()``. Nothing reads the table's rows that way, so nothing can read them without
their deletions. The Python methods below are the dataset's surface.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from lamina import evolution
from lamina.errors import InvalidArgument, InvalidConfig, Unsupported
from lamina.scan import DEFAULT_BATCH_SIZE, Scanner

if TYPE_CHECKING:
    from lamina.table import Table


class _Refused(pafs.FileSystemHandler):
    """The placeholder fragment's filesystem: every call fails, naming the table and what to do."""

    def __init__(self, uri: str):
        self.uri = uri

    def _refuse(self, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(
            f"the Lamina table {self.uri} cannot be read through pyarrow's dataset machinery (its files hold deleted "
            f"rows and rows of other versions): read it through LaminaDataset.scanner() / to_table() / to_batches()"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Refused) and other.uri == self.uri

    def get_type_name(self) -> str:
        return "lamina-refused"

    normalize_path = get_file_info = get_file_info_selector = create_dir = delete_dir = _refuse
    delete_dir_contents = delete_root_dir_contents = delete_file = move = copy_file = _refuse
    open_input_stream = open_input_file = open_output_stream = open_append_stream = _refuse


class LaminaDataset(pads.FileSystemDataset):
    """One version of a table (``Table.dataset()``): the pyarrow ``Dataset`` surface DuckDB and other
    Arrow consumers call (``schema``, ``scanner``, ``to_table``, ``to_batches``, ``head``, ``count_rows``)."""

    def __init__(self, table: Table):
        fs = pafs.PyFileSystem(_Refused(table.uri))
        fmt = pads.ParquetFileFormat()
        super().__init__([fmt.make_fragment("lamina-placeholder", filesystem=fs)], table.schema, fmt, fs)
        self._table = table

    def __repr__(self) -> str:
        return f"LaminaDataset({self._table.uri!r}, version={self._table.version})"

    def __reduce__(self):
        return (LaminaDataset, (self._table,))

    @property
    def table(self) -> Table:
        return self._table

    @property
    def version(self) -> int:
        return self._table.version

    @property
    def schema(self) -> pa.Schema:
        return self._table.schema

    @property
    def partition_expression(self) -> pc.Expression:
        return pc.scalar(True)

    def scanner(
        self,
        columns: Sequence[str] | dict | None = None,
        filter: pc.Expression | str | None = None,
        batch_size: int | None = None,
        **kwargs: Any,
    ) -> Scanner:
        """A scanner of this version; pyarrow's other options (``use_threads``, ``batch_readahead``,
        ``fragment_readahead``, ``memory_pool``, ...) are accepted and have no effect."""
        if isinstance(columns, dict):
            raise Unsupported(
                f"a Lamina dataset ({self._table.uri}) projects columns by name; computed columns are not supported: "
                f"compute them on the result"
            )
        return self._table.scanner(columns, filter, batch_size=DEFAULT_BATCH_SIZE if batch_size is None else batch_size)

    def to_table(self, columns=None, filter=None, **kwargs: Any) -> pa.Table:
        return self.scanner(columns, filter, **kwargs).to_table()

    def to_batches(self, columns=None, filter=None, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        return self.scanner(columns, filter, **kwargs).to_batches()

    def head(self, num_rows: int, columns=None, filter=None, **kwargs: Any) -> pa.Table:
        return self._table.scanner(columns, filter, limit=num_rows).to_table()

    def count_rows(self, filter=None, **kwargs: Any) -> int:
        return self._table.count_rows(filter)

    def take(self, indices, columns=None, **kwargs: Any) -> pa.Table:
        raise Unsupported(
            f"take by position is not supported on the Lamina dataset of {self._table.uri}; use Table.take with _rowaddr "
            f"values (scanner(with_row_address=True))"
        )

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)

    def to_duckdb(self, name: str | None = None, connection: Any = None, *, reader: str = "lamina") -> Any:
        """A DuckDB relation over this version; with ``name``, registered as a view on ``connection``
        (default: ``duckdb``'s default connection). ``reader``: "lamina" (this dataset: DuckDB pushes
        projections and filters into ``scanner``, which uses the indices) or "duckdb" (a view over the
        version's files read by DuckDB's own Parquet reader, deletions removed by an anti join on the
        deleted positions: ``duckdb_files_view``; needs ``name``)."""
        try:
            import duckdb
        except ImportError:
            raise ImportError("Table.to_duckdb needs DuckDB: pip install duckdb") from None
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidArgument(f"to_duckdb: the view name must be a non-empty string, not {name!r}")
        if reader not in READERS:
            raise InvalidArgument(f"to_duckdb: reader={reader!r} must be one of {', '.join(READERS)}")
        con = connection if connection is not None else duckdb.default_connection()
        if reader == "duckdb":
            if name is None:
                raise InvalidArgument('to_duckdb(reader="duckdb") makes a view: give it a name')
            duckdb_files_view(self._table, name, con)
        elif name is None:
            return con.from_arrow(self)
        else:
            con.register(name, self)
        return con.table(name)


#: How ``to_duckdb`` reads: Lamina's scanner through this dataset, or DuckDB's Parquet reader over the live files.
READERS = ("lamina", "duckdb")


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _text(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def has_file_index(con: Any, uri: str) -> bool:
    """Whether this DuckDB's ``read_parquet`` has the ``file_index`` virtual column (recent versions)."""
    try:
        con.execute(f"select file_index from read_parquet([{_text(uri)}]) limit 0")
        return True
    except Exception:
        return False


def duckdb_files_view(table: Table, name: str, con: Any) -> None:
    """View ``name`` on DuckDB connection ``con``: the rows of ``table``'s version, read by DuckDB's own
    Parquet reader from the files ``Table.live_files`` lists (so pinned to the version), without the
    deleted positions: an anti join with a temp table ``<name>__lamina_deleted`` of one BIGINT key per
    deleted row, ``file_index << 32 | file_row_number`` (DuckDB's virtual columns; with a DuckDB that
    has no ``file_index``, the file's name and the row number), and no join when nothing is deleted.
    DuckDB pushes filters into its reader; Lamina's indices are not used. An S3 table needs DuckDB's
    httpfs extension and an S3 secret.

    DuckDB finds a file's columns by name, so the files of each schema the table had (docs/FORMAT.md
    §2.4) are read apart, their columns selected as today's (``lamina.evolution``): renamed, cast where
    widened, and a column added since read from a temp table ``<name>__lamina_added`` of its default or
    null; the reads are joined by ``union all``. A struct whose fields changed since a file was written
    (renamed, dropped, added) is refused: reader="lamina" reads it."""
    schema = table.schema
    files = table.live_files()
    if not files:  # read_parquet refuses an empty list
        con.register(name, schema.empty_table())
        return
    if any(f.uri.startswith("s3://") for f in files):
        try:
            con.execute("LOAD httpfs")
        except Exception as e:
            raise InvalidConfig(
                f'to_duckdb(reader="duckdb") reads {table.uri} with DuckDB\'s httpfs extension, which did not load ({e}); '
                f'run INSTALL httpfs and CREATE SECRET (TYPE s3, ...) on the connection, or use reader="lamina"'
            ) from None
    groups = _by_schema(table, files)
    if {"file_row_number", "file_index", "__lamina_file"} & {
        n for lay, _ in groups for n in [*schema.names, *lay.physical.names]
    }:
        raise InvalidArgument(
            f'to_duckdb(reader="duckdb"): table {table.uri} has a column named file_row_number, file_index or '
            f'__lamina_file, names the view needs for a row\'s place in its file; use reader="lamina"'
        )
    deleted, added = _ident(f"{name}__lamina_deleted"), _ident(f"{name}__lamina_added")
    values: dict[str, pa.Array] = {}  # the added columns' values, one row (the view's temp table ``added``)
    columns = [_projection(table, lay, con, values) for lay, _ in groups]  # (select list, reads ``a``)
    by_file_index = any(f.deleted for f in files) and has_file_index(con, files[0].uri)
    sources = [_source(group, g, deleted, by_file_index) for g, (_, group) in enumerate(groups)]
    _temp_table(con, deleted, _deleted_positions(groups, by_file_index))
    _temp_table(con, added, pa.table(values) if values else None)
    selects = [
        f"select {cols} from {src}" + (f" cross join {added} a" if uses else "") for (cols, uses), src in zip(columns, sources)
    ]
    con.execute(f"create or replace temp view {_ident(name)} as {' union all '.join(selects)}")


def _by_schema(table: Table, files: list[Any]) -> list[tuple[evolution.Layout, list[Any]]]:
    """``files`` (``LiveFile``) grouped by the schema they were written in, each with its ``Layout``."""
    m = table.manifest
    registry = m.schema_registry()
    written_in = {f.id: f.schema_id for f in m.fragments}
    groups: dict[int, list[Any]] = {}
    for f in files:
        groups.setdefault(written_in[f.id], []).append(f)
    return [(evolution.layout(registry[sid], m.schema), group) for sid, group in groups.items()]


def _projection(table: Table, lay: evolution.Layout, con: Any, values: dict[str, pa.Array]) -> tuple[str, bool]:
    """The select list reading today's columns from files of ``lay`` (``p``), and whether it reads ``a``,
    the one-row table of the values of columns added since (``values`` gets theirs)."""
    if lay.same:
        return ", ".join(f"p.{_ident(c)}" for c in lay.today.names), False
    out, uses = [], False
    for dst in evolution.with_ids(lay.today):
        src = lay.sources[dst.name]
        if src is None:  # added since: its default or null
            key = f"c{len(values)}"
            values[key] = evolution.missing(dst, 1)
            out.append(f"a.{key} as {_ident(dst.name)}")
            uses = True
        elif not evolution.same_shape(src, dst):
            raise Unsupported(
                f'to_duckdb(reader="duckdb"): column {dst.name!r} of table {table.uri} (version {table.version}) is '
                f"{dst.type} where files written before it changed hold {src.type} (a struct's fields renamed, dropped "
                f'or added): DuckDB\'s Parquet reader cannot map them. Use reader="lamina" (the default), or compact '
                f"the table so those files are rewritten in today's schema"
            )
        elif src.type.equals(dst.type):
            out.append(f"p.{_ident(src.name)} as {_ident(dst.name)}")
        else:  # widened: the same values in a wider type
            duck = con.from_arrow(pa.schema([dst]).empty_table()).types[0]
            out.append(f"cast(p.{_ident(src.name)} as {duck}) as {_ident(dst.name)}")
    return ", ".join(out), uses


def _source(files: list[Any], group: int, deleted: str, by_file_index: bool) -> str:
    """The rows of ``files`` (one schema's) as relation ``p``, their deleted positions anti-joined."""
    paths = f"[{', '.join(_text(f.uri) for f in files)}]"
    if not any(f.deleted for f in files):
        return f"read_parquet({paths}) p"
    if by_file_index:
        return (
            f"read_parquet({paths}, file_row_number = true) p anti join (select k from {deleted} where g = {group}) d "
            f"on ((p.file_index::BIGINT << 32) | p.file_row_number) = d.k"
        )
    return (
        f"read_parquet({paths}, filename = '__lamina_file', file_row_number = true) p "
        f"anti join {deleted} d using (__lamina_file, file_row_number)"
    )


def _deleted_positions(groups: list[tuple[evolution.Layout, list[Any]]], by_file_index: bool) -> pa.Table | None:
    """The deleted rows: (group, ``file_index << 32 | file_row_number``), or (file, row number)."""
    files = [(g, i, f) for g, (_, group) in enumerate(groups) for i, f in enumerate(group) if f.deleted]
    if not files:
        return None
    if by_file_index:
        keys = np.concatenate([(np.int64(i) << 32) | np.asarray(f.deleted, np.int64) for _, i, f in files])
        group = np.concatenate([np.full(len(f.deleted), g, np.int32) for g, _, f in files])
        return pa.table({"g": group, "k": keys})
    return pa.table(
        {
            "__lamina_file": pa.array([f.uri for _, _, f in files for _ in f.deleted], pa.string()),
            "file_row_number": pa.array([r for _, _, f in files for r in f.deleted], pa.int64()),
        }
    )


def _temp_table(con: Any, name: str, rows: pa.Table | None) -> None:
    """Temp table ``name`` on ``con`` holding ``rows`` (None: dropped)."""
    if rows is None:
        con.execute(f"drop table if exists {name}")
        return
    staging = f"__lamina_staging_{abs(hash(name))}"
    con.register(staging, rows)
    try:
        con.execute(f"create or replace temp table {name} as select * from {_ident(staging)}")
    finally:
        con.unregister(staging)


def _unsupported(name: str):
    def method(self: LaminaDataset, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(
            f"LaminaDataset.{name} is not supported ({self.table.uri}): read through scanner() or to_table() and use the result"
        )

    method.__name__ = name
    return method


for _name in ("filter", "get_fragments", "join", "join_asof", "replace_schema", "sort_by", "_get_fragments"):
    setattr(LaminaDataset, _name, _unsupported(_name))
