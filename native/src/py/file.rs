//! Binding for `file` (the data-file writer and point reads) and `io`'s checksums.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::datatypes::Schema;
use arrow::pyarrow::PyArrowType;
use arrow::record_batch::RecordBatch;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::PyDict;

use super::run;
use crate::error::Work;
use crate::file::writer::{write_file, write_files, WriteOptions, WrittenFile};

/// Writes one Parquet data file; returns {rows, file_bytes, row_groups: [(rows, bytes)], file_version,
/// checksum} (checksum: "crc32c:%08x" of the whole file, computed while writing). `sync=False` skips the
/// file's fsync: the caller makes it durable before committing it.
#[pyfunction]
#[pyo3(signature = (path, schema, batches, *, row_group_rows, row_group_bytes=None, zstd_level=3, metadata=vec![], sync=true))]
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
    sync: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let options = WriteOptions { row_group_rows, row_group_bytes, zstd_level, extra_metadata: metadata, sync };
    let schema = Arc::new(schema.0);
    let batches = batches.0;
    let shown = path.display().to_string();
    let written = run(py, Work::Makes(&shown), || write_file(&path, schema, &batches, &options))?;
    written_dict(py, &written)
}

/// Writes one Parquet data file per `(path, batches)` in one call (the GIL released once, one set of
/// writer properties), as `write_data_file` would each; returns their dicts in order. On an error the
/// files written by this call are removed and the error names the file that failed.
#[pyfunction]
#[pyo3(signature = (files, schema, *, row_group_rows, row_group_bytes=None, zstd_level=3, sync=true))]
pub(crate) fn write_data_files<'py>(
    py: Python<'py>,
    files: Vec<(PathBuf, PyArrowType<Vec<RecordBatch>>)>,
    schema: PyArrowType<Schema>,
    row_group_rows: usize,
    row_group_bytes: Option<usize>,
    zstd_level: i32,
    sync: bool,
) -> PyResult<Vec<Bound<'py, PyDict>>> {
    let options = WriteOptions { row_group_rows, row_group_bytes, zstd_level, extra_metadata: vec![], sync };
    let schema = Arc::new(schema.0);
    let files: Vec<(PathBuf, Vec<RecordBatch>)> = files.into_iter().map(|(p, b)| (p, b.0)).collect();
    let shown = match (files.first(), files.last()) {
        (Some((a, _)), Some((b, _))) if files.len() > 1 => format!("{} .. {} ({} files)", a.display(), b.display(), files.len()),
        (Some((a, _)), _) => a.display().to_string(),
        _ => String::from("(no files)"),
    };
    let written = run(py, Work::Makes(&shown), || write_files(&files, schema, &options))?;
    written.iter().map(|w| written_dict(py, w)).collect()
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

/// One file of a `take_rows_many` call: (object location, local path or None, the object's bytes or None,
/// size the manifest records, how many of the offsets are this file's).
type WantedFile = (String, Option<PathBuf>, Option<PyBackedBytes>, u64, usize);

/// Rows of many data files in one call: `files[i]` takes the next `count` of the concatenated, per-file
/// sorted and distinct `offsets` (little-endian u32s, as bytes: an Arrow array would be exported through
/// pyarrow's default memory pool, whose first allocation in a process can stall for milliseconds on a
/// transparent huge page); the result is every file's rows in the order of `files`, decoded on up to
/// `threads` threads with the GIL released.
#[pyfunction]
pub(crate) fn take_rows_many(
    py: Python<'_>,
    files: Vec<WantedFile>,
    offsets: PyBackedBytes,
    columns: Vec<String>,
    threads: usize,
) -> PyResult<PyArrowType<RecordBatch>> {
    use crate::file::take::{take_many, Source, Wanted};
    use crate::error::Error;
    if !offsets.len().is_multiple_of(4) {
        return Err(Error::InvalidArgument(format!("offsets must be little-endian u32s: {} bytes given", offsets.len())).into());
    }
    let values: Vec<u32> = offsets.chunks_exact(4).map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect();
    let mut objects = Vec::with_capacity(files.len());
    let mut parts = Vec::with_capacity(files.len());
    let mut at = 0usize;
    for (object, path, data, size, count) in files {
        let end = at.checked_add(count).filter(|e| *e <= values.len()).ok_or_else(|| {
            Error::InvalidArgument(format!("the counts ask for more than the {} offsets given", values.len()))
        })?;
        let source = match (path, data) {
            (Some(p), None) => Source::File(p),
            (None, Some(d)) => Source::Bytes(bytes::Bytes::from_owner(d)),
            _ => return Err(Error::InvalidArgument(format!("{object}: give either a local path or the object's bytes")).into()),
        };
        objects.push(object);
        parts.push((source, size, at, end));
        at = end;
    }
    if at != values.len() {
        return Err(Error::InvalidArgument(format!("the counts cover {at} of the {} offsets given", values.len())).into());
    }
    let wanted: Vec<Wanted<'_>> = objects
        .iter()
        .zip(parts)
        .map(|(object, (source, size, start, end))| Wanted { object, source, size, offsets: &values[start..end] })
        .collect();
    let shown = objects.first().map(String::as_str).unwrap_or("no files");
    let batch = run(py, Work::Reads(shown), || take_many(&wanted, &columns, threads))?;
    Ok(PyArrowType(batch))
}

/// {"footers": (entries, bytes, budget, hits, misses), "chunks": (...)} of the native read caches.
#[pyfunction]
pub(crate) fn native_cache_stats(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let (footers, chunks) = crate::file::take::cache_stats();
    let out = PyDict::new(py);
    out.set_item("footers", footers)?;
    out.set_item("chunks", chunks)?;
    Ok(out)
}

/// Empties the native read caches; a budget given (bytes) replaces that cache's budget.
#[pyfunction]
#[pyo3(signature = (footer_budget=None, chunk_budget=None))]
pub(crate) fn clear_native_caches(footer_budget: Option<usize>, chunk_budget: Option<usize>) {
    crate::file::take::clear_caches(footer_budget, chunk_budget)
}
