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

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads
import pyarrow.fs as pafs

from lamina.errors import InvalidArgument, Unsupported
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

    def to_duckdb(self, name: str | None = None, connection: Any = None) -> Any:
        """A DuckDB relation over this dataset; with ``name``, registered as a view on ``connection``
        (default: ``duckdb``'s default connection)."""
        try:
            import duckdb
        except ImportError:
            raise ImportError("Table.to_duckdb needs DuckDB: pip install duckdb") from None
        if name is not None and (not isinstance(name, str) or not name):
            raise InvalidArgument(f"to_duckdb: the view name must be a non-empty string, not {name!r}")
        con = connection if connection is not None else duckdb.default_connection()
        if name is None:
            return con.from_arrow(self)
        con.register(name, self)
        return con.table(name)


def _unsupported(name: str):
    def method(self: LaminaDataset, *args: Any, **kwargs: Any) -> Any:
        raise Unsupported(
            f"LaminaDataset.{name} is not supported ({self.table.uri}): read through scanner() or to_table() and use the result"
        )

    method.__name__ = name
    return method


for _name in ("filter", "get_fragments", "join", "join_asof", "replace_schema", "sort_by", "_get_fragments"):
    setattr(LaminaDataset, _name, _unsupported(_name))
