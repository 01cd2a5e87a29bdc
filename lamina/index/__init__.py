"""Secondary indices: btree (equality, IN, ranges), bitmap (low cardinality), fts (BM25 text search).

    options.py    kinds, IndexOptions, names, which columns a kind can index
    segments.py   stored segment files: build, merge, read through the byte-bounded cache
    build.py      the build driver, plan to commit
    query.py      filtered reads through btree/bitmap indices, and explain
    search.py     full-text search (BM25)

Key types and their encodings are shared with primary keys and the memtable: ``lamina.keys``.

The build driver (``lamina.index.build``: ``build_index``, ``IndexBuild``) is a layer above this package's
format code and is imported from its module, never re-exported here (tests/test_layout.py).
"""

from lamina.index.options import KINDS, IndexOptions
from lamina.index.segments import clear_caches

__all__ = ["IndexOptions", "KINDS", "clear_caches"]
