//! Binding for `copy::rewrite`.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayData, UInt32Array};
use arrow::datatypes::{DataType, Schema};
use arrow::pyarrow::PyArrowType;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::run;
use crate::copy::{rewrite, Action, Source};
use crate::error::{Error, Work};
use crate::file::writer::WriteOptions;

/// Builds one output file from source row groups.
///
/// ``sources``: [(path, deleted uint32 offsets)]; ``actions``: [("copy"|"encode", source, row_group)].
/// Returns {rows, file_bytes, row_groups, file_version, checksum, row_groups_copied,
/// row_groups_encoded, bytes_copied, rows_encoded, chunks_spliced}; checksum is "crc32c:%08x" of the output.
#[pyfunction]
#[pyo3(signature = (sources, actions, schema, output, *, row_group_rows, row_group_bytes=None, zstd_level=3))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn rewrite_data_file<'py>(
    py: Python<'py>,
    sources: Vec<(PathBuf, PyArrowType<ArrayData>)>,
    actions: Vec<(String, usize, usize)>,
    schema: PyArrowType<Schema>,
    output: PathBuf,
    row_group_rows: usize,
    row_group_bytes: Option<usize>,
    zstd_level: i32,
) -> PyResult<Bound<'py, PyDict>> {
    let mut srcs = Vec::with_capacity(sources.len());
    for (path, deleted) in sources {
        if deleted.0.data_type() != &DataType::UInt32 {
            return Err(Error::InvalidArgument(format!("deleted offsets of {} must be uint32", path.display())).into());
        }
        let deleted = UInt32Array::from(deleted.0);
        srcs.push(Source { path, deleted: deleted.values().to_vec() });
    }
    let actions = actions
        .into_iter()
        .map(|(kind, source, row_group)| Action::parse(&kind, source, row_group))
        .collect::<Result<Vec<_>, _>>()?;
    let options = WriteOptions { row_group_rows, row_group_bytes, zstd_level, extra_metadata: vec![], sync: true };
    let schema = Arc::new(schema.0);
    let names: Vec<String> = srcs.iter().map(|s| s.path.display().to_string()).collect();
    let object = format!("a source of {} ({})", output.display(), names.join(", "));
    let (written, stats) = run(py, Work::Reads(&object), || rewrite(&srcs, &actions, schema, &output, &options))?;
    let out = super::file::written_dict(py, &written)?;
    out.set_item("row_groups_copied", stats.row_groups_copied)?;
    out.set_item("row_groups_encoded", stats.row_groups_encoded)?;
    out.set_item("bytes_copied", stats.bytes_copied)?;
    out.set_item("rows_encoded", stats.rows_encoded)?;
    out.set_item("chunks_spliced", stats.chunks_spliced)?;
    Ok(out)
}
