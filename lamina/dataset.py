"""A version of a Lamina table as a ``pyarrow.dataset.Dataset``, which DuckDB scans with pushdown.

DuckDB's Python client reads a ``pyarrow.dataset.Dataset`` it finds in a query (``from ds``, or a
view ``to_duckdb`` registers) by calling ``ds.scanner(columns=[...], filter=<pyarrow expression>)``
and then ``.to_reader()``: the projection and the filters DuckDB can push arrive here as arguments,
and DuckDB does not filter those rows again. So ``scanner`` returns a ``lamina.scan.Scanner``, which
evaluates the pyarrow expression exactly as given (Arrow's semantics) after using it to choose
fragments, row groups and index candidates, and never returns a deleted row. This is how Lance's
``LanceDataset`` meets DuckDB (docs/ARCHITECTURE.md, "Engines").

The class subclasses pyarrow's only so DuckDB recognizes it; it holds no Arrow C++ dataset, so every
inherited method is overridden here (the ones that need one raise ``NotImplementedError``).
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.dataset as pads

from lamina.scan import DEFAULT_BATCH_SIZE, Scanner

if TYPE_CHECKING:
    from lamina.table import Table


class LaminaDataset(pads.Dataset):
    """One version of a table (``Table.dataset()``): the pyarrow ``Dataset`` surface DuckDB and other
    Arrow consumers call (``schema``, ``scanner``, ``to_table``, ``to_batches``, ``head``, ``count_rows``)."""

    def __init__(self, table: Table):
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
            raise NotImplementedError("a Lamina dataset projects columns by name; computed columns are not supported")
        return self._table.scanner(columns, filter, batch_size=batch_size or DEFAULT_BATCH_SIZE)

    def to_table(self, columns=None, filter=None, **kwargs: Any) -> pa.Table:
        return self.scanner(columns, filter, **kwargs).to_table()

    def to_batches(self, columns=None, filter=None, **kwargs: Any) -> Iterator[pa.RecordBatch]:
        return self.scanner(columns, filter, **kwargs).to_batches()

    def head(self, num_rows: int, columns=None, filter=None, **kwargs: Any) -> pa.Table:
        return self._table.scanner(columns, filter, limit=num_rows).to_table()

    def count_rows(self, filter=None, **kwargs: Any) -> int:
        return self._table.count_rows(filter)

    def take(self, indices, columns=None, **kwargs: Any) -> pa.Table:
        raise NotImplementedError("take by position is not supported; use Table.take with _rowaddr values")

    def __arrow_c_stream__(self, requested_schema: object | None = None) -> object:
        return self._table.__arrow_c_stream__(requested_schema)

    def to_duckdb(self, name: str | None = None, connection: Any = None) -> Any:
        """A DuckDB relation over this dataset; with ``name``, registered as a view on ``connection``
        (default: ``duckdb``'s default connection)."""
        try:
            import duckdb
        except ImportError:
            raise ImportError("Table.to_duckdb needs DuckDB: pip install duckdb") from None
        con = connection if connection is not None else duckdb.default_connection()
        if name is None:
            return con.from_arrow(self)
        con.register(name, self)
        return con.table(name)


def _unsupported(name: str):
    def method(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"LaminaDataset.{name} is not supported: read through scanner() or to_table()")

    method.__name__ = name
    return method


for _name in ("filter", "get_fragments", "join", "join_asof", "partition_expression", "replace_schema", "sort_by"):
    setattr(LaminaDataset, _name, _unsupported(_name))
for _name in ("_get_fragments", "_scan_options", "_scanner_options"):
    setattr(LaminaDataset, _name, _unsupported(_name))
