//! Point reads from a local data file: only the pages holding the wanted rows
//! are read and decoded (row selection + offset index), instead of whole row
//! groups. This is what makes an index lookup cheap.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::record_batch::RecordBatch;
use parquet::arrow::arrow_reader::{
    ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection, RowSelector,
};
use parquet::arrow::ProjectionMask;
use parquet::file::metadata::PageIndexPolicy;

use crate::error::{guard, Error, Result, Work};
use crate::io::PosFile;

/// Parsed footers + offset indexes of recently read files (files are immutable: path and size identify one).
const CACHED_FILES: usize = 256;

type Key = (PathBuf, u64);
/// Entries and their insertion order (oldest out first).
type Cache = Mutex<(HashMap<Key, ArrowReaderMetadata>, VecDeque<Key>)>;

fn cache() -> &'static Cache {
    static CACHE: OnceLock<Cache> = OnceLock::new();
    CACHE.get_or_init(|| Mutex::new((HashMap::new(), VecDeque::new())))
}

fn corrupt(path: &Path, e: impl std::fmt::Display) -> Error {
    Error::Corrupt { object: path.display().to_string(), reason: format!("cannot read Parquet ({e})") }
}

fn metadata(path: &Path, file: &PosFile, size: u64) -> Result<ArrowReaderMetadata> {
    let key = (path.to_path_buf(), size);
    // A panic elsewhere while the lock was held leaves the cache consistent: ignore the poison.
    let lock = || cache().lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some(m) = lock().0.get(&key).cloned() {
        return Ok(m);
    }
    let options = ArrowReaderOptions::new()
        .with_offset_index_policy(PageIndexPolicy::Optional)
        .with_column_index_policy(PageIndexPolicy::Skip);
    let m = ArrowReaderMetadata::load(file, options).map_err(|e| corrupt(path, e))?;
    super::check_layout(m.metadata(), file.len(), &path.display().to_string())?;
    let mut c = lock();
    if c.0.insert(key.clone(), m.clone()).is_none() {
        c.1.push_back(key);
        while c.1.len() > CACHED_FILES {
            if let Some(old) = c.1.pop_front() {
                c.0.remove(&old);
            }
        }
    }
    Ok(m)
}

/// Rows at sorted, distinct `offsets` of the file at `path` (`size` bytes), top-level `columns` only.
pub fn take(path: &Path, size: u64, offsets: &[u32], columns: &[String]) -> Result<RecordBatch> {
    if offsets.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::InvalidArgument("offsets must be sorted and distinct".into()));
    }
    // parquet's decoders can still panic on hostile footer or page bytes: that is this file's corruption.
    guard(Work::Reads(&path.display().to_string()), || read_rows(path, size, offsets, columns))
}

fn read_rows(path: &Path, size: u64, offsets: &[u32], columns: &[String]) -> Result<RecordBatch> {
    let file = PosFile::open(path)?;
    if file.len() != size {
        return Err(corrupt(path, format!("the file has {} bytes, the manifest records {size}", file.len())));
    }
    let meta = metadata(path, &file, size)?;
    let schema = Arc::clone(meta.schema());
    let mut roots = Vec::with_capacity(columns.len());
    for c in columns {
        roots.push(schema.index_of(c).map_err(|_| Error::InvalidArgument(format!("{} has no column {c:?}", path.display())))?);
    }
    let md = meta.metadata();
    let mut ends = Vec::with_capacity(md.num_row_groups());
    let mut total = 0u64;
    for (i, g) in md.row_groups().iter().enumerate() {
        total = u64::try_from(g.num_rows())
            .ok()
            .and_then(|n| total.checked_add(n))
            .ok_or_else(|| corrupt(path, format!("row group {i} has {} rows", g.num_rows())))?;
        ends.push(total);
    }
    if let Some(last) = offsets.last() {
        if *last as u64 >= total {
            return Err(corrupt(path, format!("offset {last} is beyond its {total} rows")));
        }
    }
    // Row groups holding offsets, and a selection relative to those row groups.
    let mut groups = Vec::new();
    let mut selectors = Vec::new();
    let mut start = 0u64;
    let mut i = 0;
    for (gi, &end) in ends.iter().enumerate() {
        let mut cursor = start;
        let first = i;
        while i < offsets.len() && (offsets[i] as u64) < end {
            let o = offsets[i] as u64;
            if o > cursor {
                selectors.push(RowSelector::skip((o - cursor) as usize));
            }
            selectors.push(RowSelector::select(1));
            cursor = o + 1;
            i += 1;
        }
        if i > first {
            if end > cursor {
                selectors.push(RowSelector::skip((end - cursor) as usize));
            }
            groups.push(gi);
        }
        start = end;
    }
    // The reader returns columns in file order; read them sorted, hand them back in the order asked.
    let mut sorted = roots.clone();
    sorted.sort_unstable();
    sorted.dedup();
    let order: Vec<usize> = roots.iter().map(|r| sorted.binary_search(r).unwrap_or(0)).collect();
    let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), sorted.iter().copied());
    let reader = ParquetRecordBatchReaderBuilder::new_with_metadata(file, meta.clone())
        .with_row_groups(groups)
        .with_projection(mask)
        .with_row_selection(RowSelection::from(selectors))
        .with_batch_size(offsets.len().max(1))
        .build()
        .map_err(|e| corrupt(path, e))?;
    let projected = Arc::new(schema.project(&sorted).map_err(|e| corrupt(path, e))?);
    let batches: Vec<RecordBatch> = reader.collect::<std::result::Result<_, _>>().map_err(|e| corrupt(path, e))?;
    let out = arrow::compute::concat_batches(&projected, &batches).map_err(|e| corrupt(path, e))?;
    if out.num_rows() != offsets.len() {
        return Err(corrupt(path, format!("decoded {} of {} requested rows", out.num_rows(), offsets.len())));
    }
    out.project(&order).map_err(|e| corrupt(path, e))
}
