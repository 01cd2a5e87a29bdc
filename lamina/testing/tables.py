"""A table factory for tests: a Lamina table with a schema and optional rows, local or on S3, in one call."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

import lamina
from lamina.schema import DataLike


def make_table(
    uri: str,
    schema: pa.Schema,
    rows: DataLike | None = None,
    *,
    storage_options: dict[str, Any] | None = None,
    **create_options: Any,
) -> lamina.Table:
    """Creates a table at ``uri`` (a local path or ``s3://...``) with ``schema`` and ``create_options``
    (``primary_key``, ``stable_row_ids``, ...), appends ``rows`` (anything ``Table.append`` takes) if
    given, and returns it."""
    table = lamina.create_table(uri, schema, storage_options=storage_options, **create_options)
    if rows is not None:
        table.append(rows)
    return table


__all__ = ["make_table"]
