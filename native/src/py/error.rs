//! The single mapping of native errors onto `lamina.errors`.
//!
//! The Python classes are registered with pyo3 (imported once, typed), so a
//! new [`Error`] variant does not compile until it is mapped here.

use pyo3::prelude::*;

use crate::error::Error;

pyo3::import_exception!(lamina.errors, LaminaError);
pyo3::import_exception!(lamina.errors, CorruptFile);
pyo3::import_exception!(lamina.errors, InvalidArgument);
pyo3::import_exception!(lamina.errors, StorageError);

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        let message = err.to_string();
        match err {
            Error::Corrupt { .. } => CorruptFile::new_err(message),
            Error::InvalidArgument(_) => InvalidArgument::new_err(message),
            Error::Io { .. } => StorageError::new_err(message),
            Error::Parquet { .. } | Error::Internal { .. } => LaminaError::new_err(message),
        }
    }
}
