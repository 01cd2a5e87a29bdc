"""Type stub of the native module built from native/ (Rust, pyo3).

Every function releases the GIL for its work and never raises a pyo3 ``PanicException``:
failures are ``lamina.errors`` exceptions naming the object involved — ``CorruptFile`` when
stored bytes are damaged (even if a dependency panicked on them), ``InvalidArgument``,
``StorageError`` (local I/O) or ``LaminaError`` (encoder or internal failures).
"""

import pyarrow as pa

__version__: str
FILE_VERSION: str

def write_data_file(
    path: str,
    schema: pa.Schema,
    batches: list[pa.RecordBatch],
    *,
    row_group_rows: int,
    row_group_bytes: int | None = None,
    zstd_level: int = 3,
    metadata: list[tuple[str, str]] = [],
) -> dict:
    """Writes one Parquet data file (never replacing one) and fsyncs it; releases the GIL.

    Returns ``{"rows", "file_bytes", "row_groups": [(rows, bytes)], "file_version", "checksum"}``;
    ``checksum`` is ``"crc32c:%08x"`` of the whole file, computed while writing (no second pass).
    Raises InvalidArgument, StorageError (I/O) or LaminaError (encoder).
    """

def checksum(data: bytes) -> str:
    """``"crc32c:%08x"`` (CRC-32C, hardware accelerated) of ``data``; releases the GIL."""

def file_checksum(path: str) -> str:
    """``"crc32c:%08x"`` of the local file at ``path``, streamed; releases the GIL. StorageError if unreadable."""

def encode_deletions(offsets: pa.Array) -> bytes:
    """uint32 offsets → portable roaring bitmap bytes."""

def decode_deletions(data: bytes, object: str, rows: int | None = None) -> pa.UInt32Array:
    """Portable roaring bitmap bytes → sorted uint32 offsets; CorruptFile naming ``object`` if undecodable
    or, with ``rows`` (the fragment's row count), if an offset is ``>= rows`` (checked before the offsets
    are materialized)."""

def take_local_rows(path: str, size: int, offsets: pa.UInt32Array, columns: list[str]) -> pa.RecordBatch:
    """Rows at sorted, distinct ``offsets`` of a local data file of ``size`` bytes (the manifest's size;
    CorruptFile if the file differs), reading only the pages that hold them."""

def wal_check_schema(schema: pa.Schema) -> None:
    """InvalidArgument naming the first column the WAL cannot carry."""

def wal_encode(batch: pa.RecordBatch, deletes: pa.BooleanArray | None = None, key_columns: list[int] = []) -> tuple[bytes, pa.UInt64Array]:
    """Rows of ``batch`` in the row-first WAL layout, and each row's end offset."""

def wal_decode(rows: bytes, schema: pa.Schema, object: str) -> tuple[pa.RecordBatch, pa.UInt8Array]:
    """WAL rows → (batch of ``schema``, deletes as uint8); CorruptFile naming ``object``."""

def wal_decode_values(values: pa.Array, schema: pa.Schema, object: str) -> pa.RecordBatch:
    """Decodes the non-null values of a binary array, one encoded row each."""

def wal_split(rows: bytes, schema: pa.Schema, key_column: int, object: str) -> tuple[pa.Array, pa.BinaryArray, pa.UInt8Array]:
    """WAL rows → (keys, one encoded row per value, deletes as uint8), for the memtable."""

def rewrite_data_file(
    sources: list[tuple[str, pa.Array]],
    actions: list[tuple[str, int, int]],
    schema: pa.Schema,
    output: str,
    *,
    row_group_rows: int,
    row_group_bytes: int | None = None,
    zstd_level: int = 3,
) -> dict:
    """Builds one data file from source row groups: ("copy", src, rg) splices chunks byte-for-byte,
    ("encode", src, rg) re-encodes the live rows (``sources`` give each file's deleted offsets).
    Checks the output's rows and schema before returning; releases the GIL. Returns ``{"rows", "file_bytes",
    "row_groups", "file_version", "checksum", "row_groups_copied", "row_groups_encoded", "bytes_copied",
    "rows_encoded"}``; ``checksum`` as for ``write_data_file`` (copied chunks included). CorruptFile naming the
    source when one is damaged (its chunks and pages are checked to lie inside it before any is read).
    """

INDEX_FOOTER_LEN: int

def build_index_segment(
    kind: str,
    inputs: list[tuple[int, pa.Array]],
    path: str | None = None,
    *,
    page_entries: int = 4096,
    max_bitmap_values: int = 65536,
    stem: bool = False,
    max_token_len: int = 64,
) -> dict:
    """Builds one index segment ("btree", "bitmap" or "fts") from (ordinal, values) pairs; values are
    int64, uint64, float64, (large) string/binary or dictionary<int32, string>. Writes ``path``
    (never replacing a file, fsynced) or returns the bytes as ``"data"``. Returns
    ``{"rows", "ordinals", "bytes", "checksum"}`` (``"crc32c:%08x"`` of the segment's bytes). Releases the GIL."""

def merge_index_segments(
    kind: str,
    inputs: list[tuple[str, str]],
    output: str,
    *,
    page_entries: int = 4096,
    max_bitmap_values: int = 65536,
    stem: bool = False,
    max_token_len: int = 64,
) -> dict:
    """Merges local segment files [(path, name for errors)] covering disjoint ordinals into ``output``;
    returns ``{"rows", "ordinals", "bytes", "checksum"}``."""

def index_directory_range(tail: bytes, file_len: int, object: str) -> tuple[int, int]:
    """(offset, length) of a segment's directory, from at least its last INDEX_FOOTER_LEN bytes."""

def analyze_text(text: str, *, stem: bool = False, max_token_len: int = 64) -> list[str]:
    """Distinct query terms of ``text`` under the fts analyzer, in order."""

def tokenize_text(text: str, *, stem: bool = False, max_token_len: int = 64) -> list[str]:
    """Every token of ``text`` (repeats kept), as the fts index counts them."""

class IndexSegment:
    """The directory of one stored segment: names the blocks a query needs and decodes them."""

    def __init__(self, footer: bytes, directory: bytes, file_len: int, object: str) -> None: ...
    def blocks_for_ranges(self, ranges: list[tuple[object, bool, object, bool]]) -> list[tuple[int, int, int]]: ...
    def lookup(self, ranges: list[tuple[object, bool, object, bool]], blocks: list[tuple[int, bytes]]) -> pa.UInt64Array: ...
    def term_blocks(self, terms: list[str]) -> list[tuple[str, int, int, int]]: ...
    def fragment_stats(self) -> list[tuple[int, int, int, int, int, int, int]]: ...
    def text_docs(self, fragments: list[tuple[int, int, int, bytes, pa.UInt32Array | None]]) -> TextDocs:
        """The documents a full-text segment serves in a query: ``fragments`` are (ordinal, fragment id, length
        block id, block bytes, deleted offsets or None). Reusable while those fragments and deletions stay."""
    def text_query(self, terms: list[str], postings: list[tuple[int, bytes]], docs: TextDocs) -> TextQuery:
        """Phase 1 of a BM25 query: ``terms`` distinct, in order; ``postings`` the fetched posting blocks
        [(id, bytes)] of the terms ``term_blocks`` named (checked against their checksums)."""

class TextDocs:
    """Lengths of the rows one segment serves (deleted rows dropped), from ``IndexSegment.text_docs``;
    not importable by name."""

    docs: int  # live documents (non-null, not deleted)
    total_len: int  # their tokens
    size: int  # bytes held

class TextQuery:
    """One segment's side of a BM25 query, from ``IndexSegment.text_query``; not importable by name."""

    dfs: list[int]  # live document frequency per query term, in query-term order
    def top_k(self, docs: int, avgdl: float, dfs: list[int], k: int) -> tuple[pa.UInt64Array, pa.DoubleArray]:
        """Phase 2: the best ``k`` here under the global statistics (``dfs`` per query term): (row addresses
        ``fragment_id << 32 | offset``, scores), best first, ties by smaller address."""
