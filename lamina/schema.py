"""What a table's schema may hold, and how incoming data is conformed to it before anything is written."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa

from lamina.datafile import ROWADDR, ROWID
from lamina.errors import InvalidArgument, SchemaMismatch
from lamina.evolution import without_ids
from lamina.keys import primary_key_domain

#: Columns the reads add (row address, stable row id, offset): a schema may not use these names.
RESERVED_COLUMNS = (ROWADDR, ROWID, "_offset")

DataLike = Any  # pa.Table | pa.RecordBatch | pa.RecordBatchReader | pandas.DataFrame | list[dict]


def validate_schema(schema: Any) -> pa.Schema:
    """``schema`` as a table schema: a pyarrow.Schema with unique, non-reserved names, metadata dropped
    (Lamina's field ids and defaults too: a table numbers its own fields, docs/FORMAT.md §2.4)."""
    if not isinstance(schema, pa.Schema):
        raise InvalidArgument(f"schema must be a pyarrow.Schema, not {type(schema).__name__}")
    names = schema.names
    if len(set(names)) != len(names):
        raise InvalidArgument(f"schema has duplicate column names: {sorted(n for n in set(names) if names.count(n) > 1)}")
    bad = [n for n in names if not n or n in RESERVED_COLUMNS]
    if bad:
        raise InvalidArgument(f"column names {bad} are empty or reserved ({', '.join(RESERVED_COLUMNS)})")
    return without_ids(schema.remove_metadata())


def check_column_names(schema: pa.Schema, columns: Sequence[str] | None, table: str) -> list[str] | None:
    """``columns`` as a list, each a column of ``schema`` (``table`` names it in the error); None for all."""
    if columns is None:
        return None
    if isinstance(columns, str):
        raise InvalidArgument(f"columns must be a list of names, e.g. [{columns!r}]")
    unknown = [c for c in columns if c not in schema.names]
    if unknown:
        raise InvalidArgument(f"unknown column(s) {unknown} in table {table}; columns: {', '.join(schema.names)}")
    return list(columns)


def check_primary_key(schema: pa.Schema, primary_key: str | Sequence[str] | None) -> tuple[str, ...]:
    """The primary-key columns, each in ``schema`` and of a type that can be a key (``lamina.keys``)."""
    if primary_key is None:
        return ()
    pk = (primary_key,) if isinstance(primary_key, str) else tuple(primary_key)
    for name in pk:
        if name not in schema.names:
            raise InvalidArgument(f"primary key column {name!r} is not in the schema ({', '.join(schema.names)})")
        primary_key_domain(schema.field(name).type, f"primary key column {name!r}")
    return pk


def conform(data: DataLike, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
    """Batches of ``data`` in the table's schema; SchemaMismatch before anything is yielded if it can't be."""
    if isinstance(data, pa.RecordBatchReader):
        source_schema, batches = data.schema, iter(data)
    elif isinstance(data, pa.Table):
        source_schema, batches = data.schema, iter(data.to_batches())
    elif isinstance(data, pa.RecordBatch):
        source_schema, batches = data.schema, iter([data])
    elif isinstance(data, list):
        if not all(isinstance(row, dict) for row in data):
            raise InvalidArgument("a list to append must hold one dict per row")
        names = set(schema.names)
        extra = sorted({str(k) for row in data for k in row if k not in names})
        if extra:
            raise SchemaMismatch(
                f"rows have keys {extra} that are not columns of the table ({', '.join(schema.names)}); "
                "remove them or add the columns with overwrite(..., schema=...)"
            )
        try:
            table = pa.Table.from_pylist(data, schema=schema)
        except (pa.ArrowException, TypeError, ValueError, KeyError) as e:
            raise SchemaMismatch(f"rows do not match the table schema ({e}); schema: {schema}") from None
        source_schema, batches = table.schema, iter(table.to_batches())
    elif type(data).__name__ == "DataFrame" and hasattr(data, "columns"):
        missing = [n for n in schema.names if n not in data.columns]
        extra = [str(c) for c in data.columns if c not in schema.names]
        if missing or extra:
            raise SchemaMismatch(f"DataFrame columns differ from the table: missing {missing}, unexpected {extra}")
        try:
            table = pa.Table.from_pandas(data, schema=schema, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError) as e:
            raise SchemaMismatch(f"DataFrame does not convert to the table schema ({e}); schema: {schema}") from None
        source_schema, batches = table.schema, iter(table.to_batches())
    else:
        raise InvalidArgument(
            f"cannot append {type(data).__name__}: "
            "pass a pyarrow Table, RecordBatch, RecordBatchReader, pandas DataFrame or list of dicts"
        )
    order = check_columns(source_schema, schema)

    def gen() -> Iterator[pa.RecordBatch]:
        for batch in batches:
            if batch.num_rows == 0:
                continue
            arrays = [batch.column(i) for i in order]
            for field, arr in zip(schema, arrays):
                if not field.nullable and arr.null_count:
                    raise SchemaMismatch(f"column {field.name!r} is not nullable but the data has {arr.null_count} null(s)")
            yield pa.RecordBatch.from_arrays(arrays, schema=schema)

    return gen()


def check_columns(source: pa.Schema, target: pa.Schema) -> list[int]:
    """Column positions of ``target``'s fields in ``source``; SchemaMismatch listing every difference."""
    problems = []
    missing = [n for n in target.names if n not in source.names]
    extra = [n for n in source.names if n not in target.names]
    if missing:
        problems.append(f"missing column(s) {missing}")
    if extra:
        problems.append(f"unexpected column(s) {extra}")
    for field in target:
        if field.name in source.names and not source.field(field.name).type.equals(field.type):
            problems.append(f"column {field.name!r} is {source.field(field.name).type}, the table has {field.type}")
    if problems:
        raise SchemaMismatch(
            "data does not match the table schema: " + "; ".join(problems) + ". Cast the data (e.g. table.cast(schema)) and retry"
        )
    return [source.names.index(n) for n in target.names]
