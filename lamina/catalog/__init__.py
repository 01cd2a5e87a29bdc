"""A catalog of namespaces and tables, kept as a Lamina table under ``<root>/_catalog``.

    lamina.connect(root) ─► Catalog
    reads:     the latest catalog version (one listing checks for a newer one) ─► filtered reads
               through its indices: btree on object_id (lookups by name), bitmap on object_type
               (listings), full text on metadata (search)
    mutations: copy-on-write: read every row of the latest version, transform them, write one new
               data file and the three index segments over it, commit a strict overwrite (put-if-absent
               of the next version); a lost race redoes the whole rewrite on the new latest version.
               Locally, writers of one host take turns, and the one whose turn it is applies the
               requests the others queued meanwhile in the same rewrite (group commit)

The catalog holds one row per namespace or table (docs/FORMAT.md §12). A table the catalog
creates lives under the root at a path made from its name and a unique suffix, so a name dropped
and created again never shares files; ``register_table`` adds a table that lives elsewhere.
Catalogs written with an earlier schema version are read as they are and migrated by their
first mutation.

One module per concept, lowest first; this package re-exports the public names:

- ``schema``        the row schema, its indices, names, and migrating rows of an earlier schema version
- ``snapshots``     reading a version: decoded whole (cached) or through its indices
- ``locations``     where tables live, and the rule that no two overlap
- ``mutations``     mutations as data (``apply``) and the copy-on-write rewrite (``rewrite``)
- ``group_commit``  local writers' turns (``flock``) and the queue the writer with the turn applies
- ``api``           ``Catalog`` and ``connect``
"""

from __future__ import annotations

from lamina.catalog.api import (
    CONFIRM_SECONDS,
    DESCRIBED_HANDLES,
    FORWARD_READS,
    READ_BACK,
    REWRITE_BACKOFF,
    Catalog,
    NamespaceDescription,
    TableDescription,
    connect,
)
from lamina.catalog.group_commit import LOCK_FILE, LOCK_WAIT_SECONDS, MAX_BATCH, QUEUE_DIR, UNCOLLECTED_SECONDS
from lamina.catalog.schema import (
    CATALOG_DIR,
    CONFIG_KEY,
    INDICES,
    MAX_DEPTH,
    MAX_LEVEL_CHARS,
    MAX_NAME_CHARS,
    NAMESPACE,
    SCHEMA,
    SCHEMA_V1,
    SCHEMA_VERSION,
    TABLE,
    check_name,
)
from lamina.catalog.snapshots import WHOLE_READ_BYTES

__all__ = [
    "Catalog",
    "NamespaceDescription",
    "TableDescription",
    "connect",
    "check_name",
    "SCHEMA",
    "SCHEMA_VERSION",
    # the constants, for code that reads them from lamina.catalog
    "CATALOG_DIR",
    "CONFIG_KEY",
    "CONFIRM_SECONDS",
    "DESCRIBED_HANDLES",
    "FORWARD_READS",
    "INDICES",
    "LOCK_FILE",
    "LOCK_WAIT_SECONDS",
    "MAX_BATCH",
    "MAX_DEPTH",
    "MAX_LEVEL_CHARS",
    "MAX_NAME_CHARS",
    "NAMESPACE",
    "QUEUE_DIR",
    "READ_BACK",
    "REWRITE_BACKOFF",
    "SCHEMA_V1",
    "TABLE",
    "UNCOLLECTED_SECONDS",
    "WHOLE_READ_BYTES",
]
