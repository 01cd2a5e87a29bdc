"""Type stub of the native module built from native/ (Rust, pyo3)."""

import pyarrow as pa

__version__: str
FILE_VERSION: str
FILE_VERSION_KEY: str

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

    Returns ``{"rows", "file_bytes", "row_groups": [(rows, bytes)], "file_version"}``.
    Raises InvalidArgument, StorageError (I/O) or LaminaError (encoder).
    """

def encode_deletions(offsets: pa.Array) -> bytes:
    """uint32 offsets → portable roaring bitmap bytes."""

def decode_deletions(data: bytes, object: str) -> pa.UInt32Array:
    """Portable roaring bitmap bytes → sorted uint32 offsets; CorruptFile naming ``object`` if undecodable."""

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
    Checks the output's rows and schema before returning; releases the GIL.
    """
