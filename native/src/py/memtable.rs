//! Binding for `memtable`: the WAL applier's in-memory table of newest rows.
//!
//! `get` is a per-call hot path: it borrows the Python int, bytes or str
//! directly, keeps the GIL (releasing it costs more than the lookup) and copies
//! the value once, into the returned `bytes`. Batch calls take and return Arrow
//! arrays and release the GIL. Writes take the memtable's writer lock; if
//! another thread holds it (a `put_many` running without the GIL), the waiting
//! call releases the GIL too.

use arrow::array::{make_array, ArrayData};
use arrow::pyarrow::PyArrowType;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::run;
use crate::error::{guard, Error, Result, Work};
use crate::memtable::{self, Key, KeyKind};

/// What a memtable call works on, for an error if it fails unexpectedly.
const MEMTABLE: Work<'static> = Work::Makes("memtable");

/// Versioned rows keyed by a primary key: one writer, lock-free readers.
#[pyclass(frozen, module = "lamina._native")]
pub(crate) struct MemTable {
    inner: memtable::MemTable,
}

impl MemTable {
    /// Borrows a Python key: an int for integer keys, bytes or str (UTF-8) for byte keys.
    #[inline]
    fn key<'a>(&self, key: &'a Bound<'_, PyAny>) -> Result<Key<'a>> {
        let kind = self.inner.kind();
        let key = match kind {
            KeyKind::Int64 => key.extract::<i64>().ok().map(Key::I64),
            KeyKind::UInt64 => key.extract::<u64>().ok().map(Key::U64),
            KeyKind::Bytes => match key.cast::<PyBytes>() {
                Ok(b) => Some(Key::Bytes(b.as_bytes())),
                Err(_) => key.cast::<PyString>().ok().and_then(|s| s.to_str().ok()).map(|s| Key::Bytes(s.as_bytes())),
            },
        };
        key.ok_or_else(|| {
            let what = if kind == KeyKind::Bytes { "bytes or str" } else { kind.name() };
            Error::InvalidArgument(format!("memtable key must be {what}"))
        })
    }
}

#[pymethods]
impl MemTable {
    /// `key_type` is "int64", "uint64" or "bytes".
    #[new]
    fn new(key_type: &str) -> PyResult<Self> {
        Ok(MemTable { inner: memtable::MemTable::new(KeyKind::parse(key_type)?) })
    }

    /// Puts one value; returns its sequence number. Takes the writer lock, waiting for
    /// it without the GIL if another thread holds it.
    fn put(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &[u8]) -> PyResult<u64> {
        let key = self.key(key)?;
        match self.inner.try_writer() {
            Some(mut w) => Ok(guard(MEMTABLE, || w.put(key, value))?),
            None => run(py, MEMTABLE, || self.inner.put(key, value)),
        }
    }

    /// Puts `values[i]` under `keys[i]` in order (a null value deletes); returns the last sequence.
    /// Every key and value is checked first: an invalid one applies nothing.
    fn put_many(&self, py: Python<'_>, keys: PyArrowType<ArrayData>, values: PyArrowType<ArrayData>) -> PyResult<u64> {
        let (keys, values) = (make_array(keys.0), make_array(values.0));
        run(py, MEMTABLE, || self.inner.put_arrays(&keys, &values))
    }

    /// The newest value of `key`, or None if it is absent or deleted.
    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = self.key(key)?;
        Ok(guard(MEMTABLE, || self.inner.get(key))?.value().map(|v| PyBytes::new(py, v)))
    }

    /// (states uint8, values binary) for an array of keys: state 0 absent, 1 live, 2 deleted;
    /// values null unless live.
    fn get_many(&self, py: Python<'_>, keys: PyArrowType<ArrayData>) -> PyResult<(PyArrowType<ArrayData>, PyArrowType<ArrayData>)> {
        let keys = make_array(keys.0);
        let (states, values) = run(py, MEMTABLE, || self.inner.get_arrays(&keys))?;
        Ok((PyArrowType(states), PyArrowType(values)))
    }

    /// (keys, values) of the newest entry of every key, in key order, as of this call;
    /// values are null for deleted keys. Keys are int64, uint64 or binary.
    fn newest(&self, py: Python<'_>) -> PyResult<(PyArrowType<ArrayData>, PyArrowType<ArrayData>)> {
        let (keys, values) = run(py, MEMTABLE, || Ok(self.inner.newest_arrays()))?;
        Ok((PyArrowType(keys), PyArrowType(values)))
    }

    /// Entries (every put and delete, all versions).
    fn __len__(&self) -> usize {
        self.inner.len() as usize
    }

    /// Bytes of memory the memtable holds (its arena, allocated in 1 MiB chunks).
    #[getter]
    fn arena_bytes(&self) -> usize {
        self.inner.arena_bytes()
    }

    fn __repr__(&self) -> String {
        format!(
            "MemTable(key_type={:?}, entries={}, keys={}, arena_bytes={})",
            self.inner.kind().name(),
            self.inner.len(),
            self.inner.distinct_keys(),
            self.inner.arena_bytes()
        )
    }
}
