//! Lamina data files: plain Parquet with fixed writer properties and a
//! Lamina file version in the key-value metadata (docs/FORMAT.md, "Data files").

pub mod take;
pub mod writer;

/// Key-value metadata key holding the Lamina file version of a data file.
pub const FILE_VERSION_KEY: &str = "lamina.file_version";
/// The file version this build writes. Bump it only with a FORMAT.md change.
pub const FILE_VERSION: &str = "1";
/// Key-value metadata key naming the writer (informational).
pub const WRITER_KEY: &str = "lamina.writer";
