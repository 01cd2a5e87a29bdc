//! Binding for `wal`: the row-first codec.

use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayData, BooleanArray, UInt64Array, UInt8Array};
use arrow::datatypes::{DataType, Schema};
use arrow::pyarrow::PyArrowType;
use arrow::record_batch::RecordBatch;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::run;
use crate::error::{Error, Work};
use crate::wal;

/// InvalidArgument naming the first column the WAL cannot carry.
#[pyfunction]
pub(crate) fn wal_check_schema(py: Python<'_>, schema: PyArrowType<Schema>) -> PyResult<()> {
    run(py, Work::Makes("a WAL schema check"), || wal::check_schema(&schema.0))
}

/// Encodes a batch row-first: (bytes, end offset of each row). `deletes` marks key-only delete rows.
#[pyfunction]
#[pyo3(signature = (batch, deletes=None, key_columns=vec![]))]
pub(crate) fn wal_encode<'py>(
    py: Python<'py>,
    batch: PyArrowType<RecordBatch>,
    deletes: Option<PyArrowType<ArrayData>>,
    key_columns: Vec<usize>,
) -> PyResult<(Bound<'py, PyBytes>, PyArrowType<ArrayData>)> {
    let deletes = match deletes {
        Some(d) if d.0.data_type() == &DataType::Boolean => Some(BooleanArray::from(d.0)),
        Some(d) => return Err(Error::InvalidArgument(format!("deletes must be boolean, got {}", d.0.data_type())).into()),
        None => None,
    };
    let batch = batch.0;
    let (bytes, ends) = run(py, Work::Makes("WAL rows"), || wal::encode(&batch, deletes.as_ref(), &key_columns))?;
    Ok((PyBytes::new(py, &bytes), PyArrowType(UInt64Array::from(ends).into_data())))
}

/// Decodes rows into a batch of `schema`: (batch, deletes as uint8).
#[pyfunction]
pub(crate) fn wal_decode(
    py: Python<'_>,
    rows: &[u8],
    schema: PyArrowType<Schema>,
    object: &str,
) -> PyResult<(PyArrowType<RecordBatch>, PyArrowType<ArrayData>)> {
    let schema = Arc::new(schema.0);
    let decoded = run(py, Work::Reads(object), || wal::decode(rows, schema, object))?;
    let deletes: UInt8Array = decoded.deletes.iter().map(|d| *d as u8).collect::<Vec<_>>().into();
    Ok((PyArrowType(decoded.batch), PyArrowType(deletes.into_data())))
}

/// Decodes the non-null values of a binary array (one encoded row each, e.g. a memtable's newest entries).
#[pyfunction]
pub(crate) fn wal_decode_values(
    py: Python<'_>,
    values: PyArrowType<ArrayData>,
    schema: PyArrowType<Schema>,
    object: &str,
) -> PyResult<PyArrowType<RecordBatch>> {
    let values = make_array(values.0);
    let schema = Arc::new(schema.0);
    let batch = run(py, Work::Reads(object), || wal::decode_values(&values, schema, object))?;
    Ok(PyArrowType(batch))
}

/// Splits rows for a memtable: (keys, one encoded row per value, deletes as uint8).
#[pyfunction]
pub(crate) fn wal_split(
    py: Python<'_>,
    rows: &[u8],
    schema: PyArrowType<Schema>,
    key_column: usize,
    object: &str,
) -> PyResult<(PyArrowType<ArrayData>, PyArrowType<ArrayData>, PyArrowType<ArrayData>)> {
    let schema = Arc::new(schema.0);
    let (keys, values, deletes) = run(py, Work::Reads(object), || wal::split(rows, schema, key_column, object))?;
    Ok((PyArrowType(keys.to_data()), PyArrowType(values.into_data()), PyArrowType(deletes.into_data())))
}
