//! Binding for `file` (the data-file writer and point reads) and `io`'s checksums.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayData, UInt32Array};
use arrow::datatypes::{DataType, Schema};
use arrow::pyarrow::PyArrowType;
use arrow::record_batch::RecordBatch;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::run;
use crate::error::Work;
use crate::file::writer::{write_file, WriteOptions, WrittenFile};

/// Writes one Parquet data file; returns {rows, file_bytes, row_groups: [(rows, bytes)], file_version,
/// checksum} (checksum: "crc32c:%08x" of the whole file, computed while writing).
#[pyfunction]
#[pyo3(signature = (path, schema, batches, *, row_group_rows, row_group_bytes=None, zstd_level=3, metadata=vec![]))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn write_data_file<'py>(
    py: Python<'py>,
    path: PathBuf,
    schema: PyArrowType<Schema>,
    batches: PyArrowType<Vec<RecordBatch>>,
    row_group_rows: usize,
    row_group_bytes: Option<usize>,
    zstd_level: i32,
    metadata: Vec<(String, String)>,
) -> PyResult<Bound<'py, PyDict>> {
    let options = WriteOptions { row_group_rows, row_group_bytes, zstd_level, extra_metadata: metadata };
    let schema = Arc::new(schema.0);
    let batches = batches.0;
    let shown = path.display().to_string();
    let written = run(py, Work::Makes(&shown), || write_file(&path, schema, &batches, &options))?;
    written_dict(py, &written)
}

/// {rows, file_bytes, row_groups: [(rows, bytes)], file_version, checksum} of a written file.
pub(crate) fn written_dict<'py>(py: Python<'py>, written: &WrittenFile) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("rows", written.rows)?;
    out.set_item("file_bytes", written.file_bytes)?;
    let groups: Vec<(u64, u64)> = written.row_groups.iter().map(|g| (g.rows, g.bytes)).collect();
    out.set_item("row_groups", groups)?;
    out.set_item("file_version", written.file_version)?;
    out.set_item("checksum", &written.checksum)?;
    Ok(out)
}

/// "crc32c:%08x" of `data`.
#[pyfunction]
pub(crate) fn checksum(py: Python<'_>, data: &[u8]) -> PyResult<String> {
    run(py, Work::Makes("a checksum"), || Ok(crate::io::checksum(data)))
}

/// "crc32c:%08x" of the file at `path`, read in pieces.
#[pyfunction]
pub(crate) fn file_checksum(py: Python<'_>, path: PathBuf) -> PyResult<String> {
    let shown = path.display().to_string();
    run(py, Work::Reads(&shown), || crate::io::file_checksum(&path))
}

/// Rows at sorted, distinct `offsets` of a local data file, reading only the pages that hold them.
#[pyfunction]
pub(crate) fn take_local_rows(
    py: Python<'_>,
    path: PathBuf,
    size: u64,
    offsets: PyArrowType<ArrayData>,
    columns: Vec<String>,
) -> PyResult<PyArrowType<RecordBatch>> {
    if offsets.0.data_type() != &DataType::UInt32 || offsets.0.null_count() > 0 {
        return Err(crate::error::Error::InvalidArgument("offsets must be uint32 without nulls".into()).into());
    }
    let offsets = UInt32Array::from(offsets.0);
    let shown = path.display().to_string();
    let batch = run(py, Work::Reads(&shown), || crate::file::take::take(&path, size, offsets.values(), &columns))?;
    Ok(PyArrowType(batch))
}
