//! One error type for the crate, and the guard that turns a panic into one;
//! `py/error.rs` maps each variant onto the Python tree in `lamina/errors.py`.

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

    /// Native code failed in a way it should have reported as an error (a caught panic) while
    /// working on `object`; not about stored bytes.
    #[error("internal error on {object}: {reason}")]
    Internal { object: String, reason: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<String>, source: io::Error) -> Self {
        Error::Io { path: path.into(), source }
    }
}

/// What a native call works on, for an error if it fails unexpectedly: a panic while
/// reading stored bytes means they are damaged (CorruptFile naming the object); any other
/// panic is an internal error naming what was being done.
#[derive(Clone, Copy, Debug)]
pub enum Work<'a> {
    /// Reads (decodes, copies) the stored object(s) named.
    Reads(&'a str),
    /// Builds or writes something from in-memory input.
    Makes(&'a str),
}

/// Runs `f`; a panic inside it (parquet and arrow internals may still panic on hostile
/// bytes) becomes an error naming the object instead of unwinding into the caller.
pub fn guard<T>(work: Work<'_>, f: impl FnOnce() -> Result<T>) -> Result<T> {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(result) => result,
        Err(payload) => {
            let message = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            Err(match work {
                Work::Reads(object) => Error::Corrupt {
                    object: object.to_string(),
                    reason: format!("its bytes made the native reader fail ({message}); the file is damaged or not what the manifest says"),
                },
                Work::Makes(object) => Error::Internal {
                    object: object.to_string(),
                    reason: format!("native code failed ({message}); please report this as a Lamina bug"),
                },
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_turns_a_panic_into_an_error_naming_the_object() {
        let _quiet = crate::testkit::exclusive();
        let err = guard(Work::Reads("data/a.parquet"), || -> Result<()> { panic!("index 9 out of range") }).unwrap_err();
        assert!(matches!(&err, Error::Corrupt { object, reason } if object == "data/a.parquet" && reason.contains("index 9 out of range")), "{err}");
        let err = guard(Work::Makes("memtable"), || -> Result<()> { panic!("{}", String::from("oops")) }).unwrap_err();
        assert!(matches!(&err, Error::Internal { object, reason } if object == "memtable" && reason.contains("oops")), "{err}");
        assert_eq!(guard(Work::Reads("x"), || Ok(7)).unwrap(), 7);
    }
}
