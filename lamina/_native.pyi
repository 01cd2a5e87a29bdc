"""Type stub of ``lamina._native``, the native core built from native/ (Rust, pyo3).

Every export is listed here; tests/lamina/test_native_surface.py checks this stub against the
built module in both directions. Every long call releases the GIL (``MemTable.get`` and
``MemTable.put``, per-key hot paths, keep it unless they must wait for the writer lock).
Nothing raises a pyo3 ``PanicException``: failures are ``lamina.errors`` exceptions naming the
object involved — ``CorruptFile`` when stored bytes are damaged (even if a dependency panicked
on them), ``InvalidArgument``, ``StorageError`` (local I/O) or ``LaminaError`` (encoder or
internal failures).
"""

import os
from collections.abc import Sequence

import pyarrow as pa

__version__: str
"""Version of the native crate (native/Cargo.toml)."""

FILE_VERSION: str
"""Data-file format version written into every data file's metadata and recorded in the manifest."""

INDEX_FOOTER_LEN: int
"""Bytes at the end of an index segment that locate its directory (``index_directory_range``)."""

# -- data files -------------------------------------------------------------------------------

def write_data_file(
    path: str | os.PathLike[str],
    schema: pa.Schema,
    batches: list[pa.RecordBatch],
    *,
    row_group_rows: int,
    row_group_bytes: int | None = None,
    zstd_level: int = 3,
    metadata: list[tuple[str, str]] = [],
    sync: bool = True,
) -> dict:
    """Writes one Parquet data file (never replacing one), fsynced (``sync=False``: not; the caller
    makes it durable before committing it, as ``write_fragments`` does for a batch of files).

    Returns ``{"rows", "file_bytes", "row_groups": [(rows, bytes)], "file_version", "checksum"}``;
    ``checksum`` is ``"crc32c:%08x"`` of the whole file, computed while writing (no second pass).
    """

def write_data_files(
    files: Sequence[tuple[str | os.PathLike[str], list[pa.RecordBatch]]],
    schema: pa.Schema,
    *,
    row_group_rows: int,
    row_group_bytes: int | None = None,
    zstd_level: int = 3,
    sync: bool = True,
) -> list[dict]:
    """``write_data_file`` for each ``(path, batches)``, in one call (the GIL released once, one set of
    writer properties): a bulk write of many small files. Returns their dicts in order; on an error the
    files it wrote are removed and the error names the file that failed."""

def take_rows_many(
    files: Sequence[tuple[str, str | os.PathLike[str] | None, bytes | None, int, int]],
    offsets: bytes,
    columns: list[str],
    threads: int,
) -> pa.RecordBatch:
    """Rows of many data files in one call, decoded on up to ``threads`` threads (GIL released).

    ``files[i]`` = (object location for errors and the footer cache, local path or None, the whole
    object's bytes or None, size the manifest records, how many of ``offsets`` are this file's); ``offsets``
    are little-endian uint32s as bytes (``np.asarray(o, "<u4").tobytes()``), each file's sorted and distinct.
    Only the pages holding the rows are read. CorruptFile (naming the object) if a file differs from its
    recorded size or cannot be decoded.
    """

def native_cache_stats() -> dict[str, tuple[int, int, int, int, int]]:
    """``{"footers": ..., "chunks": ...}``: (entries, bytes, budget, hits, misses) of the parsed-footer cache
    (``LAMINA_POINT_FOOTER_CACHE_BYTES``) and the decoded column-chunk cache (``LAMINA_CHUNK_CACHE_BYTES``;
    it keeps chunks of at most ``LAMINA_CHUNK_CACHE_MAX_CHUNK_BYTES`` decoded, default 32 MiB, and never
    more than a quarter of its budget)."""

def clear_native_caches(footer_budget: int | None = None, chunk_budget: int | None = None) -> None:
    """Empties the native read caches; a budget given (bytes) replaces that cache's budget."""

def checksum(data: bytes) -> str:
    """``"crc32c:%08x"`` (CRC-32C, hardware accelerated) of ``data``."""

def file_checksum(path: str | os.PathLike[str]) -> str:
    """``"crc32c:%08x"`` of the local file at ``path``, streamed; StorageError if unreadable."""

def rewrite_data_file(
    sources: Sequence[tuple[str | os.PathLike[str], pa.UInt32Array]],
    actions: list[tuple[str, int, int]],
    schema: pa.Schema,
    output: str | os.PathLike[str],
    *,
    row_group_rows: int,
    row_group_bytes: int | None = None,
    zstd_level: int = 3,
) -> dict:
    """Builds one data file from source row groups: ``("copy"|"encode", source, row_group)`` in output order.

    ``sources`` give each file's deleted offsets; "copy" splices a row group's chunks byte for byte,
    "encode" re-encodes its live rows (a fixed-width leaf of whole, clean source row groups has its
    pages spliced as they are). Returns ``write_data_file``'s dict plus ``"row_groups_copied"``,
    ``"row_groups_encoded"``, ``"bytes_copied"``, ``"rows_encoded"`` and ``"chunks_spliced"``.
    CorruptFile names a damaged source.
    """

# -- deletion files ---------------------------------------------------------------------------

def encode_deletions(offsets: pa.UInt32Array) -> bytes:
    """uint32 row offsets (no nulls) → portable roaring bitmap bytes."""

def decode_deletions(data: bytes, object: str, rows: int | None = None) -> pa.UInt32Array:
    """Portable roaring bitmap bytes → sorted uint32 offsets; CorruptFile naming ``object`` if undecodable.

    With ``rows`` (the fragment's row count), an offset ``>= rows`` is CorruptFile too.
    """

# -- write-ahead log --------------------------------------------------------------------------

def wal_check_schema(schema: pa.Schema) -> None:
    """InvalidArgument naming the first column of ``schema`` the WAL cannot carry."""

def wal_encode(
    batch: pa.RecordBatch, deletes: pa.BooleanArray | None = None, key_columns: list[int] = []
) -> tuple[bytes, pa.UInt64Array]:
    """Rows of ``batch`` in the row-first WAL layout, and each row's end offset (delete rows keep only ``key_columns``)."""

def wal_decode(rows: bytes, schema: pa.Schema, object: str) -> tuple[pa.RecordBatch, pa.UInt8Array]:
    """WAL rows → (batch of ``schema``, deletes as uint8); CorruptFile naming ``object``."""

def wal_decode_values(values: pa.Array, schema: pa.Schema, object: str) -> pa.RecordBatch:
    """The non-null values of a (large) binary array, one encoded row each, as a batch of ``schema``."""

def wal_split(rows: bytes, schema: pa.Schema, key_column: int, object: str) -> tuple[pa.Array, pa.BinaryArray, pa.UInt8Array]:
    """WAL rows → (keys, one encoded row per value, deletes as uint8), for the memtable."""

class MemTable:
    """Versioned rows keyed by a primary key, in key order: one writer, lock-free readers."""

    def __init__(self, key_type: str) -> None:
        """An empty memtable of "int64", "uint64" or "bytes" keys."""
    def put(self, key: int | bytes | str, value: bytes) -> int:
        """Puts one value; returns its sequence number."""
    def put_many(self, keys: pa.Array, values: pa.Array) -> int:
        """Puts ``values[i]`` under ``keys[i]`` in order (a null value deletes); returns the last sequence.

        Every key and value is checked first: an invalid one applies nothing.
        """
    def get(self, key: int | bytes | str) -> bytes | None:
        """The newest value of ``key``, or None if it is absent or deleted."""
    def get_many(self, keys: pa.Array) -> tuple[pa.UInt8Array, pa.Array]:
        """(states, values) for an array of keys: state 0 absent, 1 live, 2 deleted; values null unless live."""
    def newest(self) -> tuple[pa.Array, pa.Array]:
        """(keys, values) of the newest entry of every key, in key order; values null for deleted keys."""
    def __len__(self) -> int:
        """Entries (every put and delete, all versions)."""
    def __repr__(self) -> str:
        """Key type, entries, distinct keys and arena bytes."""
    @property
    def arena_bytes(self) -> int:
        """Bytes of memory held (the arena, allocated in 1 MiB chunks): when to flush."""

# -- index segments ---------------------------------------------------------------------------

def build_index_segment(
    kind: str,
    inputs: list[tuple[int, pa.Array]],
    path: str | os.PathLike[str] | None = None,
    *,
    page_entries: int = 4096,
    max_bitmap_values: int = 65536,
    stem: bool = False,
    max_token_len: int = 64,
) -> dict:
    """Builds one "btree", "bitmap" or "fts" segment from (ordinal, values) pairs.

    Values are int64, uint64, float64, (large) string/binary or dictionary<int32, string>. Writes
    ``path`` (never replacing a file, fsynced) or returns the bytes as ``"data"``. Returns
    ``{"rows", "ordinals", "bytes", "checksum"}`` (``"crc32c:%08x"`` of the segment).
    """

def merge_index_segments(
    kind: str,
    inputs: Sequence[tuple[str | os.PathLike[str], str]],
    output: str | os.PathLike[str],
    *,
    page_entries: int = 4096,
    max_bitmap_values: int = 65536,
    stem: bool = False,
    max_token_len: int = 64,
) -> dict:
    """Merges local segment files ``[(path, name for errors)]`` of disjoint ordinals into ``output``.

    Returns ``{"rows", "ordinals", "bytes", "checksum"}``.
    """

def index_directory_range(tail: bytes, file_len: int, object: str) -> tuple[int, int]:
    """(offset, length) of a segment's directory, from at least its last ``INDEX_FOOTER_LEN`` bytes."""

def analyze_text(text: str, *, stem: bool = False, max_token_len: int = 64) -> list[str]:
    """Distinct query terms of ``text`` under the fts analyzer, in order."""

def tokenize_text(text: str, *, stem: bool = False, max_token_len: int = 64) -> list[str]:
    """Every token of ``text`` (repeats kept), as the fts index counts them."""

class TextDocs:
    """Lengths of the rows one full-text segment serves (deleted rows dropped), from ``IndexSegment.text_docs``."""

    @property
    def docs(self) -> int:
        """Live documents (non-null, not deleted)."""
    @property
    def total_len(self) -> int:
        """Tokens of those documents."""
    @property
    def size(self) -> int:
        """Bytes held."""

class TextQuery:
    """One segment's side of a BM25 query, from ``IndexSegment.text_query``."""

    @property
    def dfs(self) -> list[int]:
        """Live document frequency of each query term here, in query-term order."""
    def top_k(self, docs: int, avgdl: float, dfs: list[int], k: int) -> tuple[pa.UInt64Array, pa.DoubleArray]:
        """Phase 2: the best ``k`` here under the global statistics (``dfs`` per query term), best first.

        Row addresses are ``fragment_id << 32 | offset``; ties go to the smaller address.
        """

class IndexSegment:
    """The directory of one stored segment: names the blocks a query needs and decodes them."""

    def __init__(self, footer: bytes, directory: bytes, file_len: int, object: str) -> None:
        """Opens a segment from its last ``INDEX_FOOTER_LEN`` bytes and the directory they locate."""
    def blocks_for_ranges(self, ranges: list[tuple[object, bool, object, bool]]) -> list[tuple[int, int, int]]:
        """(id, offset, length) of the blocks a range query reads; ranges are (lo, lo_inclusive, hi, hi_inclusive)."""
    def lookup(self, ranges: list[tuple[object, bool, object, bool]], blocks: list[tuple[int, bytes]]) -> pa.UInt64Array:
        """Sorted local addresses matching any range, from the fetched blocks [(id, bytes)]."""
    def term_blocks(self, terms: list[str]) -> list[tuple[str, int, int, int]]:
        """(term, id, offset, length) of the posting blocks of the terms this full-text segment has."""
    def fragment_stats(self) -> list[tuple[int, int, int, int, int, int, int]]:
        """(ordinal, rows, docs, total_len, length block id, offset, length) per fragment of a full-text segment."""
    def text_docs(self, fragments: list[tuple[int, int, int, bytes, pa.UInt32Array | None]]) -> TextDocs:
        """The documents this full-text segment serves in a query.

        ``fragments`` are (ordinal, fragment id, length block id, block bytes, deleted offsets or None).
        Reusable while those fragments and deletions stay.
        """
    def text_query(self, terms: list[str], postings: list[tuple[int, bytes]], docs: TextDocs) -> TextQuery:
        """Phase 1 of a BM25 query: the posting blocks [(id, bytes)] ``term_blocks`` named, checked.

        ``terms`` are the query terms, distinct, in order.
        """
