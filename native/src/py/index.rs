//! Binding for `index`: build and merge segments, and a reader that names the
//! blocks a query needs and decodes the blocks the caller fetched.

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{make_array, Array, ArrayData, Float64Array, UInt32Array, UInt64Array};
use arrow::pyarrow::PyArrowType;
use pyo3::prelude::*;
use pyo3::pybacked::PyBackedBytes;
use pyo3::types::{PyBytes, PyDict};

use super::run;
use crate::error::{Error, Work};
use crate::index::fts::{Analyzer, DocLengths, SegmentQuery, ServedFragment};
use crate::index::keys::KeyType;
use crate::index::{self, BuildOptions, Built, Footer, KeyColumn, KeyRange, Kind, SegmentReader, Scalar};

fn options(page_entries: usize, max_bitmap_values: usize, stem: bool, max_token_len: usize) -> BuildOptions {
    BuildOptions { page_entries, max_bitmap_values, analyzer: Analyzer { stem, max_token_len } }
}

fn built_dict<'py>(py: Python<'py>, built: &Built, checksum: &str, data: bool) -> PyResult<Bound<'py, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("rows", built.rows)?;
    out.set_item("ordinals", built.ordinals)?;
    out.set_item("bytes", built.bytes.len())?;
    out.set_item("checksum", checksum)?;
    if data {
        out.set_item("data", PyBytes::new(py, &built.bytes))?;
    }
    Ok(out)
}

/// Builds one segment from `(ordinal, values)` pairs; writes it to `path` (never
/// replacing a file, fsynced) or, without a path, returns its bytes as "data".
#[pyfunction]
#[pyo3(signature = (kind, inputs, path=None, *, page_entries=4096, max_bitmap_values=65536, stem=false, max_token_len=64))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn build_index_segment<'py>(
    py: Python<'py>,
    kind: &str,
    inputs: Vec<(u32, PyArrowType<ArrayData>)>,
    path: Option<PathBuf>,
    page_entries: usize,
    max_bitmap_values: usize,
    stem: bool,
    max_token_len: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = Kind::parse(kind)?;
    let opts = options(page_entries, max_bitmap_values, stem, max_token_len);
    let columns: Vec<(u32, KeyColumn)> =
        inputs.into_iter().map(|(o, a)| Ok((o, KeyColumn::new(make_array(a.0))?))).collect::<Result<_, Error>>()?;
    let shown = path.as_ref().map_or_else(|| format!("a {} index segment", kind.name()), |p| p.display().to_string());
    let (built, checksum) = run(py, Work::Makes(&shown), || index::build_segment(kind, columns, path.as_deref(), &opts))?;
    built_dict(py, &built, &checksum, path.is_none())
}

/// Merges local segment files (disjoint ordinals) into `output`.
#[pyfunction]
#[pyo3(signature = (kind, inputs, output, *, page_entries=4096, max_bitmap_values=65536, stem=false, max_token_len=64))]
#[allow(clippy::too_many_arguments)]
pub(crate) fn merge_index_segments<'py>(
    py: Python<'py>,
    kind: &str,
    inputs: Vec<(PathBuf, String)>,
    output: PathBuf,
    page_entries: usize,
    max_bitmap_values: usize,
    stem: bool,
    max_token_len: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let kind = Kind::parse(kind)?;
    let opts = options(page_entries, max_bitmap_values, stem, max_token_len);
    let names: Vec<&str> = inputs.iter().map(|(_, name)| name.as_str()).collect();
    let object = format!("a segment merged into {} ({})", output.display(), names.join(", "));
    let (built, checksum) = run(py, Work::Reads(&object), || index::merge_files(kind, &inputs, &output, &opts))?;
    built_dict(py, &built, &checksum, false)
}

/// `(dir_offset, dir_len)` from the last bytes of a segment of `file_len` bytes.
#[pyfunction]
pub(crate) fn index_directory_range(py: Python<'_>, tail: &[u8], file_len: u64, object: &str) -> PyResult<(u64, u64)> {
    let f = run(py, Work::Reads(object), || index::parse_footer(tail, file_len, object))?;
    Ok((f.dir_offset, f.dir_len))
}

/// Query terms of `text` under an analyzer (distinct, in order).
#[pyfunction]
#[pyo3(signature = (text, *, stem=false, max_token_len=64))]
pub(crate) fn analyze_text(py: Python<'_>, text: &str, stem: bool, max_token_len: usize) -> PyResult<Vec<String>> {
    run(py, Work::Makes("text analysis"), || Ok(Analyzer { stem, max_token_len }.query_terms(text)))
}

/// Every token of `text` (repeats kept): what the index counts.
#[pyfunction]
#[pyo3(signature = (text, *, stem=false, max_token_len=64))]
pub(crate) fn tokenize_text(py: Python<'_>, text: &str, stem: bool, max_token_len: usize) -> PyResult<Vec<String>> {
    run(py, Work::Makes("text analysis"), || Ok(Analyzer { stem, max_token_len }.tokenize(text)))
}

fn u32_array(a: ArrayData, what: &str) -> Result<UInt32Array, Error> {
    if a.data_type() != &arrow::datatypes::DataType::UInt32 || a.null_count() > 0 {
        return Err(Error::InvalidArgument(format!("{what} must be uint32 without nulls")));
    }
    Ok(UInt32Array::from(a))
}

fn top_arrays(top: &[(u64, f64)]) -> (PyArrowType<ArrayData>, PyArrowType<ArrayData>) {
    let addrs: UInt64Array = top.iter().map(|(a, _)| *a).collect::<Vec<_>>().into();
    let scores: Float64Array = top.iter().map(|(_, s)| *s).collect::<Vec<_>>().into();
    (PyArrowType(addrs.into_data()), PyArrowType(scores.into_data()))
}

/// A served fragment from Python: (ordinal, fragment id, length block id, block bytes, deleted offsets uint32 or None).
type PyServed = (u32, u64, u32, PyBackedBytes, Option<PyArrowType<ArrayData>>);

/// The documents a full-text segment serves in a query (from
/// [`IndexSegment::text_docs`]): lengths of the served fragments' rows, deleted
/// rows dropped, and their BM25 statistics. Reusable by every query while the
/// served fragments and their deletions stay the same.
#[pyclass(frozen, module = "lamina._native")]
pub(crate) struct TextDocs {
    docs: Arc<DocLengths>,
}

#[pymethods]
impl TextDocs {
    /// Live documents (non-null, not deleted) of the served fragments.
    #[getter]
    fn docs(&self) -> u64 {
        self.docs.docs
    }

    /// Total tokens of those documents.
    #[getter]
    fn total_len(&self) -> u64 {
        self.docs.total_len
    }

    /// Bytes held.
    #[getter]
    fn size(&self) -> usize {
        self.docs.size()
    }
}

/// One segment's side of a BM25 query (from [`IndexSegment::text_query`]): the
/// checked posting blocks of the query terms and their live document
/// frequencies; [`TextQuery::top_k`] scores them with the global statistics.
#[pyclass(frozen, module = "lamina._native")]
pub(crate) struct TextQuery {
    query: SegmentQuery<PyBackedBytes>,
}

#[pymethods]
impl TextQuery {
    /// Live document frequency of each query term here, in query-term order.
    #[getter]
    fn dfs(&self) -> Vec<u64> {
        self.query.dfs()
    }

    /// The best `k` here by BM25 under the global `docs`, `avgdl` and per-term `dfs`:
    /// (row addresses uint64, scores float64), best first, ties by smaller address.
    fn top_k(&self, py: Python<'_>, docs: u64, avgdl: f64, dfs: Vec<u64>, k: usize) -> PyResult<(PyArrowType<ArrayData>, PyArrowType<ArrayData>)> {
        let top = run(py, Work::Reads(self.query.object()), || self.query.top_k(docs, avgdl, &dfs, k))?;
        Ok(top_arrays(&top))
    }
}

/// A key range from Python: (lo, lo_inclusive, hi, hi_inclusive), None bounds open.
type PyRange<'py> = (Option<Bound<'py, PyAny>>, bool, Option<Bound<'py, PyAny>>, bool);
/// (ordinal, rows, docs, total_len, block id, offset, length).
type FragmentStatsRow = (u32, u32, u32, u64, u32, u64, u32);

/// The directory of one stored segment.
#[pyclass(frozen, module = "lamina._native")]
pub(crate) struct IndexSegment {
    reader: SegmentReader,
}

impl IndexSegment {
    /// A Python bound as the value it compares with under the segment's key type.
    fn value(&self, v: &Bound<'_, PyAny>) -> Result<Scalar, Error> {
        let bad = |e: PyErr| Error::InvalidArgument(format!("{v} cannot be a key of {}: {e}", self.reader.object));
        Ok(match self.reader.key_type() {
            Some(KeyType::I64) => Scalar::I64(v.extract::<i64>().map_err(bad)?),
            Some(KeyType::U64) => Scalar::U64(v.extract::<u64>().map_err(bad)?),
            Some(KeyType::F64) => Scalar::F64(v.extract::<f64>().map_err(bad)?),
            Some(KeyType::Bytes) => Scalar::Bytes(match v.extract::<String>() {
                Ok(s) => s.into_bytes(),
                Err(_) => v.extract::<Vec<u8>>().map_err(bad)?,
            }),
            None => return Err(Error::InvalidArgument(format!("{} is a full-text segment; it has no keys", self.reader.object))),
        })
    }

    /// Python ranges → key ranges; a range that matches nothing (a NaN bound) is dropped.
    fn ranges(&self, ranges: Vec<PyRange<'_>>) -> Result<Vec<KeyRange>, Error> {
        let mut out = Vec::with_capacity(ranges.len());
        for (lo, lo_incl, hi, hi_incl) in ranges {
            let lo = lo.map(|v| Ok::<_, Error>((self.value(&v)?, lo_incl))).transpose()?;
            let hi = hi.map(|v| Ok::<_, Error>((self.value(&v)?, hi_incl))).transpose()?;
            out.extend(KeyRange::between(lo, hi));
        }
        Ok(out)
    }

    fn block_list(&self, blocks: Vec<(u32, index::BlockRef)>) -> Vec<(u32, u64, u32)> {
        blocks.into_iter().map(|(id, b)| (id, b.offset, b.len)).collect()
    }
}

#[pymethods]
impl IndexSegment {
    /// `footer` is the segment's last 32 bytes, `directory` the range they name.
    #[new]
    fn new(py: Python<'_>, footer: &[u8], directory: &[u8], file_len: u64, object: String) -> PyResult<Self> {
        let reader = run(py, Work::Reads(&object), || {
            let f: Footer = index::parse_footer(footer, file_len, &object)?;
            SegmentReader::open(&f, directory, &object)
        })?;
        Ok(IndexSegment { reader })
    }

    /// (id, offset, length) of the blocks a range query reads; ranges are (lo, lo_inclusive, hi, hi_inclusive).
    fn blocks_for_ranges(&self, py: Python<'_>, ranges: Vec<PyRange<'_>>) -> PyResult<Vec<(u32, u64, u32)>> {
        let ranges = self.ranges(ranges)?;
        let blocks = run(py, Work::Reads(&self.reader.object), || self.reader.blocks_for_ranges(&ranges))?;
        Ok(self.block_list(blocks))
    }

    /// Sorted local addresses matching any range, from the fetched blocks [(id, bytes)].
    fn lookup(
        &self,
        py: Python<'_>,
        ranges: Vec<PyRange<'_>>,
        blocks: Vec<(u32, pyo3::pybacked::PyBackedBytes)>,
    ) -> PyResult<PyArrowType<ArrayData>> {
        let ranges = self.ranges(ranges)?;
        let addrs = run(py, Work::Reads(&self.reader.object), || {
            let refs: Vec<(u32, &[u8])> = blocks.iter().map(|(i, b)| (*i, b.as_ref())).collect();
            self.reader.lookup(&ranges, &refs)
        })?;
        Ok(PyArrowType(UInt64Array::from(addrs).into_data()))
    }

    /// (term, id, offset, length) of the posting blocks of the terms this segment has.
    fn term_blocks(&self, py: Python<'_>, terms: Vec<String>) -> PyResult<Vec<(String, u32, u64, u32)>> {
        run(py, Work::Reads(&self.reader.object), || {
            let found = self.reader.fts()?.term_blocks(terms);
            Ok(found.into_iter().map(|(t, id, b)| (t, id, b.offset, b.len)).collect())
        })
    }

    /// (ordinal, rows, docs, total_len, id, offset, length) per fragment of a full-text segment.
    fn fragment_stats(&self) -> PyResult<Vec<FragmentStatsRow>> {
        let dir = self.reader.fts()?;
        Ok(dir.length_blocks().map(|(id, f)| (f.ordinal, f.rows, f.docs, f.total_len, id, f.block.offset, f.block.len)).collect())
    }

    /// The documents this full-text segment serves in a query: `fragments` are
    /// (ordinal, fragment id, length block id, block bytes, deleted offsets as
    /// uint32 or None); row addresses are `fragment id << 32 | offset`.
    fn text_docs(&self, py: Python<'_>, fragments: Vec<PyServed>) -> PyResult<TextDocs> {
        let deleted: Vec<Option<UInt32Array>> = fragments
            .iter()
            .map(|f| f.4.as_ref().map(|a| u32_array(a.0.clone(), "deleted offsets")).transpose())
            .collect::<Result<_, Error>>()?;
        let docs = run(py, Work::Reads(&self.reader.object), || {
            let served: Vec<ServedFragment<'_>> = fragments
                .iter()
                .zip(&deleted)
                .map(|((ordinal, fid, block, bytes, _), del)| ServedFragment {
                    ordinal: *ordinal,
                    fragment_id: *fid,
                    block: *block,
                    lengths: &bytes[..],
                    deleted: del.as_ref().map_or(&[][..], |d| d.values()),
                })
                .collect();
            DocLengths::new(&self.reader, &served)
        })?;
        Ok(TextDocs { docs: Arc::new(docs) })
    }

    /// Phase 1 of a BM25 query: `terms` are the query terms (distinct, in order),
    /// `postings` the fetched posting blocks [(id, bytes)] of the terms
    /// [`Self::term_blocks`] named (checked against their checksums), `docs` this
    /// segment's [`Self::text_docs`].
    fn text_query(&self, py: Python<'_>, terms: Vec<String>, postings: Vec<(u32, PyBackedBytes)>, docs: &Bound<'_, TextDocs>) -> PyResult<TextQuery> {
        let docs = docs.get().docs.clone();
        let query = run(py, Work::Reads(&self.reader.object), || SegmentQuery::prepare(&self.reader, docs, &terms, postings))?;
        Ok(TextQuery { query })
    }
}
