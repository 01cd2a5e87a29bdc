//! The single mapping of native errors onto `lamina.errors`.

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;

use crate::error::Error;

impl From<Error> for PyErr {
    fn from(err: Error) -> PyErr {
        let class = match &err {
            Error::Corrupt { .. } => "CorruptFile",
            Error::InvalidArgument(_) => "InvalidArgument",
            Error::Io { .. } => "StorageError",
            Error::Parquet { .. } | Error::Internal { .. } => "LaminaError",
        };
        let message = err.to_string();
        Python::attach(|py| {
            match py.import("lamina.errors").and_then(|m| m.getattr(class)) {
                Ok(cls) => match cls.call1((message.clone(),)) {
                    Ok(instance) => PyErr::from_value(instance),
                    Err(e) => e,
                },
                // lamina.errors is always importable next to lamina._native; fall back loudly anyway.
                Err(_) => PyRuntimeError::new_err(message),
            }
        })
    }
}
