//! Binding for `memtable`: the WAL applier's in-memory table of newest rows.
//!
//! `get` and `probe` are per-call hot paths: they borrow the Python int, bytes
//! or str directly and copy the value once, into the returned `bytes`. Batch
//! calls take and return Arrow arrays and release the GIL. Writes take the
//! memtable's writer lock; if another thread holds it (a `put_many` running
//! without the GIL), the waiting call releases the GIL too.

use arrow::array::{
    make_array, Array, ArrayData, ArrayRef, AsArray, GenericBinaryBuilder, Int64Array, OffsetSizeTrait, UInt64Array,
    UInt8Array,
};
use arrow::datatypes::{DataType, Int64Type, UInt64Type};
use arrow::pyarrow::PyArrowType;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyString};

use super::run;
use crate::error::{guard, Error, Result, Work};
use crate::memtable::{self, Key, KeyKind, Lookup};

/// What a memtable call works on, for an error if it fails unexpectedly.
const MEMTABLE: Work<'static> = Work::Makes("memtable");

/// Probe states, as `probe` and `get_many` report them.
const ABSENT: u8 = 0;
const LIVE: u8 = 1;
const DELETED: u8 = 2;

fn state(l: &Lookup<'_>) -> u8 {
    match l {
        Lookup::Absent => ABSENT,
        Lookup::Live(_) => LIVE,
        Lookup::Deleted => DELETED,
    }
}

/// A key column of an Arrow array, checked against the memtable's key type.
enum KeyColumn {
    I64(Int64Array),
    U64(UInt64Array),
    Bytes(ArrayRef),
}

impl KeyColumn {
    fn new(kind: KeyKind, data: ArrayData) -> Result<KeyColumn> {
        let array = make_array(data);
        if array.null_count() > 0 {
            return Err(Error::InvalidArgument("memtable keys must not be null".into()));
        }
        let numeric = matches!(kind, KeyKind::Int64 | KeyKind::UInt64);
        match array.data_type() {
            DataType::Int64 if numeric => Ok(KeyColumn::I64(array.as_primitive::<Int64Type>().clone())),
            DataType::UInt64 if numeric => Ok(KeyColumn::U64(array.as_primitive::<UInt64Type>().clone())),
            DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
                if kind == KeyKind::Bytes =>
            {
                Ok(KeyColumn::Bytes(array))
            }
            t => Err(Error::InvalidArgument(format!("memtable keys are {}; got an array of {t}", kind.name()))),
        }
    }

    fn len(&self) -> usize {
        match self {
            KeyColumn::I64(a) => a.len(),
            KeyColumn::U64(a) => a.len(),
            KeyColumn::Bytes(a) => a.len(),
        }
    }

    /// Key `i` as the memtable of `kind` takes it; integers out of its range are errors.
    fn key(&self, kind: KeyKind, i: usize) -> Result<Key<'_>> {
        let out_of_range =
            |v: &dyn std::fmt::Display| Error::InvalidArgument(format!("key {v} is out of range for {} keys", kind.name()));
        Ok(match self {
            KeyColumn::I64(a) => {
                let v = a.value(i);
                match kind {
                    KeyKind::UInt64 => Key::U64(u64::try_from(v).map_err(|_| out_of_range(&v))?),
                    _ => Key::I64(v),
                }
            }
            KeyColumn::U64(a) => {
                let v = a.value(i);
                match kind {
                    KeyKind::Int64 => Key::I64(i64::try_from(v).map_err(|_| out_of_range(&v))?),
                    _ => Key::U64(v),
                }
            }
            KeyColumn::Bytes(a) => Key::Bytes(bytes_at(a, i)),
        })
    }
}

/// Value `i` of a (large/view) binary or string array; the type was checked.
fn bytes_at(a: &ArrayRef, i: usize) -> &[u8] {
    match a.data_type() {
        DataType::Binary => a.as_binary::<i32>().value(i),
        DataType::LargeBinary => a.as_binary::<i64>().value(i),
        DataType::BinaryView => a.as_binary_view().value(i),
        DataType::Utf8 => a.as_string::<i32>().value(i).as_bytes(),
        DataType::LargeUtf8 => a.as_string::<i64>().value(i).as_bytes(),
        _ => a.as_string_view().value(i).as_bytes(),
    }
}

/// A value column: binary or large binary, nulls meaning deletes.
fn value_column(data: ArrayData, rows: usize) -> Result<ArrayRef> {
    let array = make_array(data);
    if !matches!(array.data_type(), DataType::Binary | DataType::LargeBinary | DataType::BinaryView) {
        return Err(Error::InvalidArgument(format!("memtable values must be binary, large_binary or binary_view, not {}", array.data_type())));
    }
    if array.len() != rows {
        return Err(Error::InvalidArgument(format!("{rows} keys but {} values", array.len())));
    }
    Ok(array)
}

/// A binary array of `values` (nulls for `None`), large if the bytes do not fit in 2 GiB offsets.
fn binary_array<'a>(values: impl ExactSizeIterator<Item = Option<&'a [u8]>> + Clone) -> ArrayData {
    let bytes: usize = values.clone().map(|v| v.map_or(0, <[u8]>::len)).sum();
    fn build<'a, O: OffsetSizeTrait>(values: impl ExactSizeIterator<Item = Option<&'a [u8]>>, bytes: usize) -> ArrayData {
        let mut b = GenericBinaryBuilder::<O>::with_capacity(values.len(), bytes);
        for v in values {
            b.append_option(v);
        }
        b.finish().into_data()
    }
    if bytes <= i32::MAX as usize {
        build::<i32>(values, bytes)
    } else {
        build::<i64>(values, bytes)
    }
}

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

    /// One write under the writer lock, waiting for it without the GIL if it is taken.
    fn write_one(&self, py: Python<'_>, key: Key<'_>, value: Option<&[u8]>) -> PyResult<u64> {
        match self.inner.try_writer() {
            Some(mut w) => Ok(guard(MEMTABLE, || w.apply(key, value))?),
            None => run(py, MEMTABLE, || self.inner.writer().apply(key, value)),
        }
    }
}

#[pymethods]
impl MemTable {
    /// `key_type` is "int64", "uint64" or "bytes".
    #[new]
    fn new(key_type: &str) -> PyResult<Self> {
        Ok(MemTable { inner: memtable::MemTable::new(KeyKind::parse(key_type)?) })
    }

    /// Puts one value; returns its sequence number.
    fn put(&self, py: Python<'_>, key: &Bound<'_, PyAny>, value: &[u8]) -> PyResult<u64> {
        self.write_one(py, self.key(key)?, Some(value))
    }

    /// Puts `values[i]` under `keys[i]` in order (a null value deletes); returns the last sequence.
    /// Every key and value is checked first: an invalid one applies nothing.
    fn put_many(&self, py: Python<'_>, keys: PyArrowType<ArrayData>, values: PyArrowType<ArrayData>) -> PyResult<u64> {
        let kind = self.inner.kind();
        let keys = KeyColumn::new(kind, keys.0)?;
        let values = value_column(values.0, keys.len())?;
        let seq = run(py, MEMTABLE, || -> Result<u64> {
            let rows = (0..keys.len())
                .map(|i| Ok((keys.key(kind, i)?, (!values.is_null(i)).then(|| bytes_at(&values, i)))))
                .collect::<Result<Vec<_>>>()?;
            // Checks every row before applying any.
            self.inner.writer().apply_batch(&rows)
        })?;
        Ok(seq)
    }

    /// The newest value of `key`, or None if it is absent or deleted.
    fn get<'py>(&self, py: Python<'py>, key: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyBytes>>> {
        let key = self.key(key)?;
        Ok(guard(MEMTABLE, || self.inner.get(key))?.value().map(|v| PyBytes::new(py, v)))
    }

    /// (states uint8, values binary) for an array of keys; states as in `probe`, values null unless live.
    fn get_many(&self, py: Python<'_>, keys: PyArrowType<ArrayData>) -> PyResult<(PyArrowType<ArrayData>, PyArrowType<ArrayData>)> {
        let kind = self.inner.kind();
        let keys = KeyColumn::new(kind, keys.0)?;
        let (states, values) = run(py, MEMTABLE, || -> Result<_> {
            let found = (0..keys.len()).map(|i| self.inner.get(keys.key(kind, i)?)).collect::<Result<Vec<Lookup<'_>>>>()?;
            let states = UInt8Array::from(found.iter().map(state).collect::<Vec<u8>>()).into_data();
            Ok((states, binary_array(found.iter().map(|l| l.value()))))
        })?;
        Ok((PyArrowType(states), PyArrowType(values)))
    }

    /// (keys, values) of the newest entry of every key, in key order, as of this call;
    /// values are null for deleted keys. Keys are int64, uint64 or binary.
    fn newest(&self, py: Python<'_>) -> PyResult<(PyArrowType<ArrayData>, PyArrowType<ArrayData>)> {
        let (keys, values) = run(py, MEMTABLE, || {
            let entries: Vec<memtable::Entry<'_>> = self.inner.newest().collect();
            let keys = match self.inner.kind() {
                KeyKind::Int64 => {
                    let v: Vec<i64> = entries.iter().map(|e| if let Key::I64(k) = e.key { k } else { 0 }).collect();
                    Int64Array::from(v).into_data()
                }
                KeyKind::UInt64 => {
                    let v: Vec<u64> = entries.iter().map(|e| if let Key::U64(k) = e.key { k } else { 0 }).collect();
                    UInt64Array::from(v).into_data()
                }
                KeyKind::Bytes => binary_array(entries.iter().map(|e| if let Key::Bytes(b) = e.key { Some(b) } else { None })),
            };
            Ok((keys, binary_array(entries.iter().map(|e| e.value))))
        })?;
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
