//! One error type for the crate; `py/error.rs` maps each variant onto the
//! Python tree in `lamina/errors.py`.

use std::io;

/// Everything that can go wrong in native code.
#[non_exhaustive]
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A local file could not be created, written, synced or read.
    #[error("I/O error on {path}: {source}")]
    Io { path: String, source: io::Error },

    /// Stored bytes are not what the format promises (truncated, bad magic, undecodable).
    #[error("corrupt {object}: {reason}")]
    Corrupt { object: String, reason: String },

    /// The caller passed something the operation cannot accept (bad option, schema mismatch).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),

    /// The Parquet encoder failed while writing `path`.
    #[error("Parquet error writing {path}: {source}")]
    Parquet { path: String, source: parquet::errors::ParquetError },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<String>, source: io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}
