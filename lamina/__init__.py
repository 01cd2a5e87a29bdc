"""Lamina: a columnar table format on Parquet files.

import lamina, pyarrow as pa
t = lamina.create_table("/tmp/t", pa.schema([("id", pa.int64())]))
t.append(pa.table({"id": [1, 2, 3]}))
t.delete("id = 2")
t.to_arrow()          # id: [1, 3]
lamina.drop_table("/tmp/t")                   # a tombstone version, then every object: the URI is free

cat = lamina.connect("/tmp/warehouse")        # a catalog of namespaces and tables
cat.create_namespace("sales"); cat.create_table("sales.orders", schema)

lamina.io_stats()     # requests and bytes by store since the process started
"""

from lamina import errors
from lamina.catalog import Catalog, connect
from lamina.info import LiveFile
from lamina.store.scheduler import io_stats
from lamina.table import (
    FragmentInfo,
    IndexInfo,
    Table,
    TableStats,
    VersionInfo,
    create_table,
    drop_table,
    open_table,
    upgrade_table,
)

__version__ = "0.1.0"
__all__ = [
    "errors",
    "io_stats",
    "connect",
    "Catalog",
    "create_table",
    "drop_table",
    "open_table",
    "upgrade_table",
    "Table",
    "FragmentInfo",
    "LiveFile",
    "IndexInfo",
    "TableStats",
    "VersionInfo",
    "__version__",
]
