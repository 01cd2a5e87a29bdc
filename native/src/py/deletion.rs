//! Binding for `deletion`.

use arrow::array::{Array, ArrayData, UInt32Array};
use arrow::datatypes::DataType;
use arrow::pyarrow::PyArrowType;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::run;
use crate::deletion::{decode_offsets, encode};
use crate::error::{Error, Work};

/// Encodes a pyarrow uint32 array of row offsets as a portable roaring bitmap.
#[pyfunction]
pub(crate) fn encode_deletions<'py>(py: Python<'py>, offsets: PyArrowType<ArrayData>) -> PyResult<Bound<'py, PyBytes>> {
    if offsets.0.data_type() != &DataType::UInt32 {
        return Err(Error::InvalidArgument(format!("deletion offsets must be uint32, got {}", offsets.0.data_type())).into());
    }
    let array = UInt32Array::from(offsets.0);
    if array.null_count() > 0 {
        return Err(Error::InvalidArgument("deletion offsets must not contain nulls".into()).into());
    }
    let bytes = run(py, Work::Makes("deletion offsets"), || Ok(encode(array.values().iter().copied())))?;
    Ok(PyBytes::new(py, &bytes))
}

/// Decodes a deletion file into a sorted pyarrow uint32 array; `object` names it in errors.
/// With `rows` (the fragment's row count), an offset at or beyond it is CorruptFile.
#[pyfunction]
#[pyo3(signature = (data, object, rows=None))]
pub(crate) fn decode_deletions(py: Python<'_>, data: &[u8], object: &str, rows: Option<u64>) -> PyResult<PyArrowType<ArrayData>> {
    let offsets = run(py, Work::Reads(object), || decode_offsets(data, object, rows))?;
    Ok(PyArrowType(UInt32Array::from(offsets).into_data()))
}
