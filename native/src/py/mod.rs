//! The `lamina._native` module: argument conversion only, no logic.
//!
//! Every entry point runs its work through [`run`] (the one place the GIL is
//! released) or, for per-key hot paths that keep the GIL, [`crate::error::guard`]
//! directly: both turn a panic into an error naming the object (CorruptFile when
//! stored bytes were being read), so Python never sees a `PanicException`.

use pyo3::prelude::*;

use crate::error::{guard, Work};

mod copy;
mod deletion;
mod error;
mod file;
mod index;
mod memtable;
mod wal;

/// Runs `f` with the GIL released (native work must never hold it), a panic in it
/// becoming an error naming what `work` names.
pub(crate) fn run<T: Send, F: Send + FnOnce() -> crate::Result<T>>(py: Python<'_>, work: Work<'_>, f: F) -> PyResult<T> {
    Ok(py.detach(|| guard(work, f))?)
}

/// Lamina's native core: data files, deletion bitmaps, the WAL row codec, the memtable
/// and index segments. Typed in lamina/_native.pyi.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add("FILE_VERSION", crate::file::FILE_VERSION)?;
    m.add_function(wrap_pyfunction!(file::write_data_file, m)?)?;
    m.add_function(wrap_pyfunction!(file::write_data_files, m)?)?;
    m.add_function(wrap_pyfunction!(file::take_rows_many, m)?)?;
    m.add_function(wrap_pyfunction!(file::native_cache_stats, m)?)?;
    m.add_function(wrap_pyfunction!(file::clear_native_caches, m)?)?;
    m.add_function(wrap_pyfunction!(file::checksum, m)?)?;
    m.add_function(wrap_pyfunction!(file::file_checksum, m)?)?;
    m.add_function(wrap_pyfunction!(copy::rewrite_data_file, m)?)?;
    m.add_function(wrap_pyfunction!(deletion::encode_deletions, m)?)?;
    m.add_function(wrap_pyfunction!(deletion::decode_deletions, m)?)?;
    m.add_function(wrap_pyfunction!(index::build_index_segment, m)?)?;
    m.add_function(wrap_pyfunction!(index::merge_index_segments, m)?)?;
    m.add_function(wrap_pyfunction!(index::index_directory_range, m)?)?;
    m.add_function(wrap_pyfunction!(index::analyze_text, m)?)?;
    m.add_function(wrap_pyfunction!(index::tokenize_text, m)?)?;
    m.add_class::<index::IndexSegment>()?;
    m.add_class::<index::TextDocs>()?;
    m.add_class::<index::TextQuery>()?;
    m.add_class::<memtable::MemTable>()?;
    m.add("INDEX_FOOTER_LEN", crate::index::FOOTER_LEN)?;
    m.add_function(wrap_pyfunction!(wal::wal_check_schema, m)?)?;
    m.add_function(wrap_pyfunction!(wal::wal_encode, m)?)?;
    m.add_function(wrap_pyfunction!(wal::wal_decode, m)?)?;
    m.add_function(wrap_pyfunction!(wal::wal_decode_values, m)?)?;
    m.add_function(wrap_pyfunction!(wal::wal_split, m)?)?;
    Ok(())
}
