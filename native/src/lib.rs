//! Lamina's native core: the byte work of the table format.
//!
//! Python orchestrates and decides I/O policy; this crate does the encoding.
//! Today it holds the single Parquet data-file writer every write path uses
//! (`file::writer`) and the deletion-bitmap codec (`deletion`). The pyo3
//! binding lives in `py/` (feature `python`) and holds no logic, so
//! `cargo test` runs without a Python interpreter.

pub mod copy;
pub mod deletion;
pub mod error;
pub mod file;
pub mod index;
pub mod io;
pub mod keys;
pub mod memtable;
pub mod wal;

#[cfg(feature = "python")]
mod py;

#[cfg(test)]
mod corrupt_tests;
#[cfg(test)]
pub(crate) mod testkit;

pub use error::{Error, Result};
