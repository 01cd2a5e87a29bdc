"""What the catalog table holds: its row schema (one row per namespace or table, docs/FORMAT.md §12), the
indices every version carries, the rule names follow, and the migration of rows written with an earlier
schema version (read as they are, rewritten in the current schema by the next mutation)."""

from __future__ import annotations

import re
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from lamina.errors import InvalidArgument

CATALOG_DIR = "_catalog"
#: The schema version this Lamina writes, kept in the catalog table's config.
SCHEMA_VERSION = 2
CONFIG_KEY = "catalog_schema_version"

NAMESPACE, TABLE = "namespace", "table"

#: Version 2 (current): one row per namespace or table.
SCHEMA = pa.schema(
    [
        pa.field("object_id", pa.string(), nullable=False),  # dotted path: "sales.eu.orders"
        pa.field("object_type", pa.string(), nullable=False),  # "namespace" | "table"
        pa.field("parent", pa.string(), nullable=False),  # the enclosing namespace ("" at the top)
        pa.field("location", pa.string()),  # tables: relative to the root, or a full URI when registered
        pa.field("registered", pa.bool_()),  # tables: added by register_table (lives outside the root's layout)
        pa.field("metadata", pa.string(), nullable=False),  # properties, a JSON object
        pa.field("created_ms", pa.int64(), nullable=False),
        pa.field("updated_ms", pa.int64(), nullable=False),
        pa.field("table_version", pa.int64()),  # tables: last known version, rows, data bytes
        pa.field("table_rows", pa.int64()),
        pa.field("table_bytes", pa.int64()),
        pa.field("maintenance", pa.string()),  # tables: the last maintenance report, a JSON object
    ]
)

#: Version 1: properties in a column named ``properties``; no table statistics, no maintenance.
SCHEMA_V1 = pa.schema(
    [
        pa.field("object_id", pa.string(), nullable=False),
        pa.field("object_type", pa.string(), nullable=False),
        pa.field("parent", pa.string(), nullable=False),
        pa.field("location", pa.string()),
        pa.field("properties", pa.string()),
        pa.field("created_ms", pa.int64(), nullable=False),
        pa.field("updated_ms", pa.int64(), nullable=False),
    ]
)

#: The indices every catalog version carries, built inline by each rewrite.
INDICES = (
    ("object_id_btree", "object_id", "btree"),
    ("object_type_bitmap", "object_type", "bitmap"),
    ("metadata_fts", "metadata", "fts"),
)

#: A name is 1 to ``MAX_DEPTH`` levels joined by ".", each 1 to ``MAX_LEVEL_CHARS`` letters, digits, "_" or "-"
#: starting with a letter or digit: so at most ``MAX_NAME_CHARS`` characters (docs/FORMAT.md §12).
MAX_DEPTH = 8
MAX_LEVEL_CHARS = 64
MAX_NAME_CHARS = MAX_DEPTH * (MAX_LEVEL_CHARS + 1) - 1
#: Matched against a whole level (``fullmatch``: a "$" would also match before a final newline).
_LEVEL = re.compile(rf"[A-Za-z0-9][A-Za-z0-9_-]{{0,{MAX_LEVEL_CHARS - 1}}}")
_NAME_RULE = (
    f"a name is at most {MAX_DEPTH} levels of 1-{MAX_LEVEL_CHARS} characters [A-Za-z0-9_-] joined by '.' "
    f"({MAX_NAME_CHARS} characters at most)"
)


def check_name(name: Any, what: str = "name") -> tuple[str, ...]:
    """The levels of a dotted name like ``sales.eu.orders``; InvalidArgument saying what is wrong.

    A name is 1 to ``MAX_DEPTH`` (8) levels of 1 to ``MAX_LEVEL_CHARS`` (64) ASCII letters, digits, ``_`` or
    ``-``, each starting with a letter or digit, so at most ``MAX_NAME_CHARS`` (519) characters. Every character
    is checked: no control characters (a trailing newline included), ``/``, ``\\``, spaces, empty levels
    (``a..b``, ``.a``, ``a.``) or ``.``/``..`` levels, so a name can never leave its namespace's directory."""
    if not isinstance(name, str) or not name:
        raise InvalidArgument(f"{what} must be a non-empty string like 'sales.eu.orders', not {name!r}")
    if len(name) > MAX_NAME_CHARS:
        raise InvalidArgument(f"{what} {name[:MAX_NAME_CHARS]!r}... has {len(name)} characters; {_NAME_RULE}")
    levels = tuple(name.split("."))
    if len(levels) > MAX_DEPTH:
        raise InvalidArgument(f"{what} {name!r} has {len(levels)} levels; {_NAME_RULE}")
    for level in levels:
        if _LEVEL.fullmatch(level) is None:
            control = next((c for c in level if ord(c) < 32 or 127 <= ord(c) < 160), None)
            why = (
                f"level {level!r} holds the control character {control!r}"
                if control is not None
                else f"level {level!r} must be 1-{MAX_LEVEL_CHARS} letters, digits, '_' or '-', starting with a "
                f"letter or digit" + (" (a leading, trailing or doubled '.' makes an empty level)" if not level else "")
            )
            raise InvalidArgument(f"{what} {name!r}: {why}; {_NAME_RULE}")
    return levels


def parent_of(name: str) -> str:
    return name.rpartition(".")[0]


def as_current(rows: pa.Table) -> pa.Table:
    """Rows of any schema version in the current schema (version 1: properties → metadata)."""
    if rows.schema.equals(SCHEMA):
        return rows
    if "properties" in rows.schema.names and "metadata" not in rows.schema.names:
        props = pc.fill_null(rows.column("properties"), "{}")
        rows = rows.drop_columns(["properties"]).append_column("metadata", props)
    n = rows.num_rows
    columns = []
    for field in SCHEMA:
        if field.name in rows.schema.names:
            columns.append(rows.column(field.name).cast(field.type))
        elif field.name == "registered":
            columns.append(pa.array([False] * n, pa.bool_()))
        else:
            columns.append(pa.nulls(n, field.type))
    return pa.Table.from_arrays(columns, schema=SCHEMA)
