//! Lamina's native core: the byte work of the table format.
//!
//! Python orchestrates and decides I/O policy; this crate encodes and decodes
//! what is stored, one module per thing on storage or in memory: data files
//! (`file`: the one Parquet writer, point reads), compaction's row-group copies
//! (`copy`), deletion bitmaps (`deletion`), index segments (`index`), the WAL row
//! codec (`wal`), the ingestion memtable (`memtable`), and what they share: key
//! encodings (`keys`), positional file reads and checksums (`io`), one error type
//! (`error`). The pyo3 binding lives in `py/` (feature `python`) and holds no
//! logic, so `cargo test` runs without a Python interpreter.

pub mod copy;
pub mod deletion;
pub mod error;
pub mod file;
pub mod index;
pub mod io;
pub mod keys;
pub mod lru;
pub mod memtable;
pub mod wal;

#[cfg(feature = "python")]
mod py;

#[cfg(test)]
mod corrupt_tests;
#[cfg(test)]
mod hostile_tests;
#[cfg(test)]
pub(crate) mod testkit;

pub use error::{Error, Result};
