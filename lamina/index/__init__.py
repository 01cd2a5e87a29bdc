"""Secondary indices: btree (equality, IN, ranges), bitmap (low cardinality), fts (BM25 text search).

    options.py    kinds, IndexOptions, names, which columns a kind can index
    segments.py   stored segment files: build, merge, read through the byte-bounded cache
    build.py      the build driver, plan to commit
    query.py      filtered reads through btree/bitmap indices, and explain
    search.py     full-text search (BM25)

Key types and their encodings are shared with primary keys and the memtable: ``lamina.keys``.
"""

from lamina.index.build import IndexBuild, build_index
from lamina.index.options import KINDS, IndexOptions
from lamina.index.segments import clear_caches

__all__ = ["IndexBuild", "IndexOptions", "KINDS", "build_index", "clear_caches"]
