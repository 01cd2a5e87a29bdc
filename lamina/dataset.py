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
    httpfs extension and an S3 secret."""
    schema = table.schema
    if {"file_row_number", "file_index", "__lamina_file"} & set(schema.names):
        raise InvalidArgument(
            f'to_duckdb(reader="duckdb"): table {table.uri} has a column named file_row_number, file_index or '
            f'__lamina_file, names the view needs for a row\'s place in its file; use reader="lamina"'
        )
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
    columns = ", ".join(f"p.{_ident(c)}" for c in schema.names)
    paths = f"[{', '.join(_text(f.uri) for f in files)}]"
    deleted = _ident(f"{name}__lamina_deleted")
    if not any(f.deleted for f in files):
        con.execute(f"drop table if exists {deleted}")
        con.execute(f"create or replace temp view {_ident(name)} as select {columns} from read_parquet({paths}) p")
        return
    if has_file_index(con, files[0].uri):
        keys = np.concatenate([(np.int64(i) << 32) | np.asarray(f.deleted, np.int64) for i, f in enumerate(files) if f.deleted])
        positions = pa.table({"k": keys})
        source = (
            f"read_parquet({paths}, file_row_number = true) p anti join {deleted} d "
            f"on ((p.file_index::BIGINT << 32) | p.file_row_number) = d.k"
        )
    else:
        positions = pa.table(
            {
                "__lamina_file": pa.array([f.uri for f in files for _ in f.deleted], pa.string()),
                "file_row_number": pa.array([r for f in files for r in f.deleted], pa.int64()),
            }
        )
        source = (
            f"read_parquet({paths}, filename = '__lamina_file', file_row_number = true) p "
            f"anti join {deleted} d using (__lamina_file, file_row_number)"
        )
    staging = f"__lamina_positions_{abs(hash(name))}"
    con.register(staging, positions)
    try:
        con.execute(f"create or replace temp table {deleted} as select * from {_ident(staging)}")
    finally:
        con.unregister(staging)
    con.execute(f"create or replace temp view {_ident(name)} as select {columns} from {source}")


def _unsupported(name: str):
    def method(self: LaminaDataset, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(
            f"LaminaDataset.{name} is not supported ({self.table.uri}): read through scanner() or to_table() and use the result"
        )

    method.__name__ = name
    return method


for _name in ("filter", "get_fragments", "join", "join_asof", "replace_schema", "sort_by", "_get_fragments"):
    setattr(LaminaDataset, _name, _unsupported(_name))
