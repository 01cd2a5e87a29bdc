//! Point reads from data files: only the pages holding the wanted rows are read
//! and decoded (row selection + offset index), instead of whole row groups.
//! [`take_many`] serves one call's rows from any number of files at once, on
//! several threads, with the GIL released: a lookup of 5,000 rows spread over
//! 3,500 fragments costs one native call, not 3,500.
//!
//! A file is a local path (read with `pread`) or the whole object's bytes
//! (fetched by the caller from an object store). Two caches bounded by bytes
//! keep what was decoded, keyed by the object's full location and size: data
//! files are immutable and their paths are never reused (docs/FORMAT.md), so an
//! entry never goes stale. Parsed footers + offset indexes
//! (`LAMINA_POINT_FOOTER_CACHE_BYTES`, default 64 MiB), and column chunks of at
//! most [`cacheable_chunk_bytes`] uncompressed (`LAMINA_CHUNK_CACHE_MAX_CHUNK_BYTES`,
//! default 32 MiB, never more than a quarter of the cache) decoded whole
//! (`LAMINA_CHUNK_CACHE_BYTES`, default 256 MiB): the second lookup in a
//! fragment decodes nothing. Larger chunks are read page by page, uncached.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use arrow::array::{ArrayRef, UInt32Array};
use arrow::record_batch::RecordBatch;
use bytes::Bytes;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, RowSelection, RowSelector};
use parquet::arrow::{parquet_to_arrow_field_levels, ProjectionMask};
use parquet::file::metadata::PageIndexPolicy;
use parquet::file::reader::ChunkReader;

use super::pages::ChunkGroups;
use crate::error::{guard, Error, Result, Work};
use crate::io::PosFile;
use crate::lru::{ByteLru, LruStats};

/// Default byte budget of the point-read footer cache (`LAMINA_POINT_FOOTER_CACHE_BYTES` overrides it).
pub const DEFAULT_FOOTER_CACHE_BYTES: usize = 64 * 1024 * 1024;

/// Where one file's bytes are.
pub enum Source {
    /// A local file, read with positional reads.
    File(PathBuf),
    /// The whole object, already in memory.
    Bytes(Bytes),
}

/// Rows wanted from one file: `offsets` sorted and distinct.
pub struct Wanted<'a> {
    /// The object's full location (cache key and the name in errors).
    pub object: &'a str,
    pub source: Source,
    /// The size the manifest records.
    pub size: u64,
    pub offsets: &'a [u32],
}

/// Cache key of a file: its full location and size.
type FileKey = (String, u64);
/// Cache key of a decoded column chunk: the file, the row group, the top-level column.
type ChunkKey = (String, u64, usize, usize);

/// Default byte budget of the decoded column-chunk cache (`LAMINA_CHUNK_CACHE_BYTES` overrides it).
pub const DEFAULT_CHUNK_CACHE_BYTES: usize = 256 * 1024 * 1024;
/// Default of the largest column chunk (uncompressed bytes) decoded whole and kept
/// (`LAMINA_CHUNK_CACHE_MAX_CHUNK_BYTES` overrides it). 32 MiB admits a row group's long-string column
/// (a 131,072-row group of ~80-byte documents is ~10 MB), so hits of a search or lookup in a hot
/// fragment decode nothing, instead of decompressing a whole data page per row.
pub const DEFAULT_CACHEABLE_CHUNK_BYTES: usize = 32 * 1024 * 1024;

/// Column chunks up to this many uncompressed bytes are decoded whole and kept; larger ones are read
/// page by page (only the pages holding the rows) and not kept. At most a quarter of the cache's
/// `budget`, so one chunk never pushes out most of what the cache holds.
pub fn cacheable_chunk_bytes(budget: usize) -> usize {
    static MAX: OnceLock<usize> = OnceLock::new();
    let max = *MAX.get_or_init(|| self::budget("LAMINA_CHUNK_CACHE_MAX_CHUNK_BYTES", DEFAULT_CACHEABLE_CHUNK_BYTES));
    max.min(budget / 4)
}

fn budget(var: &str, default: usize) -> usize {
    std::env::var(var).ok().and_then(|v| v.trim().parse::<usize>().ok()).unwrap_or(default)
}

fn lock<T>(m: &'static Mutex<T>) -> std::sync::MutexGuard<'static, T> {
    // A panic elsewhere while the lock was held leaves a cache consistent: ignore the poison.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

fn footers() -> std::sync::MutexGuard<'static, ByteLru<FileKey, ArrowReaderMetadata>> {
    static CACHE: OnceLock<Mutex<ByteLru<FileKey, ArrowReaderMetadata>>> = OnceLock::new();
    lock(CACHE.get_or_init(|| Mutex::new(ByteLru::new(budget("LAMINA_POINT_FOOTER_CACHE_BYTES", DEFAULT_FOOTER_CACHE_BYTES)))))
}

fn chunks() -> std::sync::MutexGuard<'static, ByteLru<ChunkKey, ArrayRef>> {
    static CACHE: OnceLock<Mutex<ByteLru<ChunkKey, ArrayRef>>> = OnceLock::new();
    lock(CACHE.get_or_init(|| Mutex::new(ByteLru::new(budget("LAMINA_CHUNK_CACHE_BYTES", DEFAULT_CHUNK_CACHE_BYTES)))))
}

/// (entries, bytes, budget, hits, misses) of the footer cache and of the decoded column-chunk cache.
pub fn cache_stats() -> (LruStats, LruStats) {
    let f = footers().stats();
    (f, chunks().stats())
}

/// Empties both caches; a budget given (bytes) replaces that cache's budget.
pub fn clear_caches(footer_budget: Option<usize>, chunk_budget: Option<usize>) {
    let mut f = footers();
    let b = footer_budget.unwrap_or(f.budget());
    *f = ByteLru::new(b);
    drop(f);
    let mut c = chunks();
    let b = chunk_budget.unwrap_or(c.budget());
    *c = ByteLru::new(b);
}

fn corrupt(object: &str, e: impl std::fmt::Display) -> Error {
    Error::Corrupt { object: object.to_string(), reason: format!("cannot read Parquet ({e})") }
}

/// A file opened on first use: a lookup answered from the caches never opens it.
struct Opener<'a, R> {
    cell: std::cell::OnceCell<R>,
    open: Box<dyn Fn() -> Result<R> + 'a>,
}

impl<'a, R> Opener<'a, R> {
    fn new(open: impl Fn() -> Result<R> + 'a) -> Self {
        Opener { cell: std::cell::OnceCell::new(), open: Box::new(open) }
    }

    fn get(&self) -> Result<&R> {
        if let Some(r) = self.cell.get() {
            return Ok(r);
        }
        let r = (self.open)()?;
        Ok(self.cell.get_or_init(|| r))
    }
}

fn metadata<R: ChunkReader>(object: &str, file: &Opener<'_, R>, size: u64) -> Result<ArrowReaderMetadata> {
    let key = (object.to_string(), size);
    if let Some(m) = footers().get(&key) {
        return Ok(m);
    }
    let options = ArrowReaderOptions::new()
        .with_offset_index_policy(PageIndexPolicy::Optional)
        .with_column_index_policy(PageIndexPolicy::Skip);
    let m = ArrowReaderMetadata::load(file.get()?, options).map_err(|e| corrupt(object, e))?;
    super::check_layout(m.metadata(), size, object)?;
    let bytes = m.metadata().memory_size() + key.0.len() + 64;
    footers().put(key, m.clone(), bytes);
    Ok(m)
}

/// Rows at sorted, distinct `offsets` of the local file at `path` (`size` bytes), top-level `columns` only.
pub fn take(path: &Path, size: u64, offsets: &[u32], columns: &[String]) -> Result<RecordBatch> {
    let object = path.display().to_string();
    let wanted = Wanted { object: &object, source: Source::File(path.to_path_buf()), size, offsets };
    take_one(&wanted, columns)
}

/// The rows of every `wanted` file, concatenated in the order given, decoded on up to `threads` threads.
/// The first failure (in that order) is returned, naming its object.
pub fn take_many(wanted: &[Wanted<'_>], columns: &[String], threads: usize) -> Result<RecordBatch> {
    if wanted.is_empty() {
        return Err(Error::InvalidArgument("take_many needs at least one file".into()));
    }
    let next = AtomicUsize::new(0);
    let slots: Vec<Mutex<Option<Result<RecordBatch>>>> = wanted.iter().map(|_| Mutex::new(None)).collect();
    let work = || loop {
        let i = next.fetch_add(1, Ordering::Relaxed);
        let Some(w) = wanted.get(i) else { break };
        let result = take_one(w, columns);
        *slots[i].lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(result);
    };
    let threads = threads.clamp(1, wanted.len());
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    let mut batches: Vec<RecordBatch> = Vec::with_capacity(wanted.len());
    for (slot, w) in slots.into_iter().zip(wanted) {
        match slot.into_inner().unwrap_or_else(std::sync::PoisonError::into_inner) {
            Some(result) => batches.push(result?),
            None => return Err(Error::Internal { object: w.object.to_string(), reason: "a read was not done".into() }),
        }
    }
    // Files of one table may name nested children differently (a list's "item" or "element"):
    // such columns are cast to the first file's types, then the caller casts to the table's.
    let schema = batches[0].schema();
    for (batch, w) in batches.iter_mut().zip(wanted).skip(1) {
        if batch.schema().fields().iter().zip(schema.fields()).any(|(a, b)| a.data_type() != b.data_type()) {
            let mut columns = Vec::with_capacity(batch.num_columns());
            for (column, field) in batch.columns().iter().zip(schema.fields()) {
                columns.push(if column.data_type() == field.data_type() {
                    Arc::clone(column)
                } else {
                    arrow::compute::cast(column, field.data_type()).map_err(|e| Error::Corrupt {
                        object: w.object.to_string(),
                        reason: format!("column {} does not have the type of the table's other files ({e})", field.name()),
                    })?
                });
            }
            *batch = RecordBatch::try_new(Arc::clone(&schema), columns).map_err(|e| corrupt(w.object, e))?;
        }
    }
    arrow::compute::concat_batches(&schema, &batches)
        .map_err(|e| Error::Corrupt { object: wanted[0].object.to_string(), reason: format!("files of one table disagree on the columns' types ({e})") })
}

fn take_one(w: &Wanted<'_>, columns: &[String]) -> Result<RecordBatch> {
    if w.offsets.windows(2).any(|p| p[0] >= p[1]) {
        return Err(Error::InvalidArgument("offsets must be sorted and distinct".into()));
    }
    // parquet's decoders can still panic on hostile footer or page bytes: that is this file's corruption.
    guard(Work::Reads(w.object), || match &w.source {
        Source::File(path) => {
            let file = Opener::new(|| {
                let file = PosFile::open(path)?;
                if file.len() != w.size {
                    return Err(corrupt(w.object, format!("the file has {} bytes, the manifest records {}", file.len(), w.size)));
                }
                Ok(file)
            });
            read_rows(w.object, &file, w.size, w.offsets, columns)
        }
        Source::Bytes(bytes) => {
            if bytes.len() as u64 != w.size {
                return Err(corrupt(w.object, format!("the object has {} bytes, the manifest records {}", bytes.len(), w.size)));
            }
            read_rows(w.object, &Opener::new(|| Ok(bytes.clone())), w.size, w.offsets, columns)
        }
    })
}

fn read_rows<R: ChunkReader + Clone + 'static>(object: &str, file: &Opener<'_, R>, size: u64, offsets: &[u32], columns: &[String]) -> Result<RecordBatch> {
    let meta = metadata(object, file, size)?;
    let schema = Arc::clone(meta.schema());
    let mut roots = Vec::with_capacity(columns.len());
    for c in columns {
        roots.push(schema.index_of(c).map_err(|_| Error::InvalidArgument(format!("{object} has no column {c:?}")))?);
    }
    let md = meta.metadata();
    let mut ends = Vec::with_capacity(md.num_row_groups());
    let mut total = 0u64;
    for (i, g) in md.row_groups().iter().enumerate() {
        total = u64::try_from(g.num_rows())
            .ok()
            .and_then(|n| total.checked_add(n))
            .ok_or_else(|| corrupt(object, format!("row group {i} has {} rows", g.num_rows())))?;
        ends.push(total);
    }
    if let Some(last) = offsets.last() {
        if *last as u64 >= total {
            return Err(corrupt(object, format!("offset {last} is beyond its {total} rows")));
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
    let limit = cacheable_chunk_bytes(chunks().budget());
    if limit > 0 && small_chunks(md, &groups, &sorted, limit) {
        let starts: Vec<u64> = groups.iter().map(|&g| if g == 0 { 0 } else { ends[g - 1] }).collect();
        let out = read_by_chunks(object, file, size, &meta, &groups, &starts, &ends, &sorted, offsets)?;
        return out.project(&order).map_err(|e| corrupt(object, e));
    }
    let mask = ProjectionMask::roots(md.file_metadata().schema_descr(), sorted.iter().copied());
    let batch = super::batch_rows(md, leaves_of(md, &sorted), offsets.len());
    let reader = batches_of(object, file.get()?, &meta, groups, mask, batch, Some(RowSelection::from(selectors)))?;
    let projected = Arc::new(schema.project(&sorted).map_err(|e| corrupt(object, e))?);
    let batches: Vec<RecordBatch> = reader.collect::<std::result::Result<_, _>>().map_err(|e| corrupt(object, e))?;
    let out = arrow::compute::concat_batches(&projected, &batches).map_err(|e| corrupt(object, e))?;
    if out.num_rows() != offsets.len() {
        return Err(corrupt(object, format!("decoded {} of {} requested rows", out.num_rows(), offsets.len())));
    }
    out.project(&order).map_err(|e| corrupt(object, e))
}

/// A reader of the `mask` columns of row groups `groups` (the rows `selection` picks, or all), in batches of
/// up to `batch` rows: arrow-rs's decoders, fed by [`super::pages`] (zstd pages decompressed with this
/// thread's reused context instead of a new codec per column chunk).
fn batches_of<R: ChunkReader + Clone + 'static>(
    object: &str,
    file: &R,
    meta: &ArrowReaderMetadata,
    groups: Vec<usize>,
    mask: ProjectionMask,
    batch: usize,
    selection: Option<RowSelection>,
) -> Result<ParquetRecordBatchReader> {
    let md = meta.metadata();
    let levels = parquet_to_arrow_field_levels(md.file_metadata().schema_descr(), mask, Some(meta.schema().fields()))
        .map_err(|e| corrupt(object, e))?;
    let groups = ChunkGroups { reader: Arc::new(file.clone()), metadata: Arc::clone(md), row_groups: groups };
    ParquetRecordBatchReader::try_new_with_row_groups(&levels, &groups, batch.max(1), selection).map_err(|e| corrupt(object, e))
}

/// The leaves under the top-level columns `roots`.
fn leaves_of(md: &parquet::file::metadata::ParquetMetaData, roots: &[usize]) -> Vec<usize> {
    let descr = md.file_metadata().schema_descr();
    (0..descr.num_columns()).filter(|&l| roots.contains(&descr.get_column_root_idx(l))).collect()
}

/// Whether every chunk of the `roots` in `groups` is at most `limit` uncompressed bytes: small enough
/// to decode whole and keep.
fn small_chunks(md: &parquet::file::metadata::ParquetMetaData, groups: &[usize], roots: &[usize], limit: usize) -> bool {
    let limit = i64::try_from(limit).unwrap_or(i64::MAX);
    let descr = md.file_metadata().schema_descr();
    groups.iter().all(|&g| {
        let mut per_root = vec![0i64; descr.root_schema().get_fields().len()];
        for (leaf, column) in md.row_group(g).columns().iter().enumerate() {
            let root = descr.get_column_root_idx(leaf);
            if let Some(total) = per_root.get_mut(root) {
                *total = total.saturating_add(column.uncompressed_size().max(0));
            }
        }
        roots.iter().all(|&r| per_root.get(r).is_some_and(|&n| n <= limit))
    })
}

/// The rows at `offsets` from whole decoded column chunks: taken from the cache, or decoded (one row
/// group at a time, only the columns missing) and kept.
#[allow(clippy::too_many_arguments)]
fn read_by_chunks<R: ChunkReader + Clone + 'static>(
    object: &str,
    file: &Opener<'_, R>,
    size: u64,
    meta: &ArrowReaderMetadata,
    groups: &[usize],
    starts: &[u64],
    ends: &[u64],
    roots: &[usize],
    offsets: &[u32],
) -> Result<RecordBatch> {
    let schema = meta.schema();
    let descr = meta.metadata().file_metadata().schema_descr_ptr();
    let mut pieces: Vec<Vec<ArrayRef>> = vec![Vec::with_capacity(groups.len()); roots.len()];
    let mut at = 0usize;
    for (i, &g) in groups.iter().enumerate() {
        let mut arrays: Vec<Option<ArrayRef>> = {
            let mut cache = chunks();
            roots.iter().map(|&r| cache.get(&(object.to_string(), size, g, r))).collect()
        };
        let missing: Vec<usize> = (0..roots.len()).filter(|&k| arrays[k].is_none()).collect();
        if !missing.is_empty() {
            let rows = usize::try_from(ends[g] - starts[i]).map_err(|e| corrupt(object, e))?;
            let wanted_roots: Vec<usize> = missing.iter().map(|&k| roots[k]).collect();
            let mask = ProjectionMask::roots(&descr, wanted_roots.iter().copied());
            // A whole chunk in one batch when its row count allows it: the count is the footer's, so
            // the capacity reserved for it is bounded by `batch_rows`, not by the count.
            let batch = super::batch_rows(meta.metadata(), leaves_of(meta.metadata(), &wanted_roots), rows);
            let reader = batches_of(object, file.get()?, meta, vec![g], mask, batch, None)?;
            let projected = Arc::new(schema.project(&wanted_roots).map_err(|e| corrupt(object, e))?);
            let batches: Vec<RecordBatch> = reader.collect::<std::result::Result<_, _>>().map_err(|e| corrupt(object, e))?;
            let whole = arrow::compute::concat_batches(&projected, &batches).map_err(|e| corrupt(object, e))?;
            if whole.num_rows() != rows {
                return Err(corrupt(object, format!("row group {g} decoded {} rows, its footer says {rows}", whole.num_rows())));
            }
            let mut cache = chunks();
            for (j, &k) in missing.iter().enumerate() {
                let array = Arc::clone(whole.column(j));
                cache.put((object.to_string(), size, g, roots[k]), Arc::clone(&array), array.get_array_memory_size() + object.len() + 64);
                arrays[k] = Some(array);
            }
        }
        let mut local = Vec::new();
        while at < offsets.len() && u64::from(offsets[at]) < ends[g] {
            local.push(u32::try_from(u64::from(offsets[at]) - starts[i]).map_err(|e| corrupt(object, e))?);
            at += 1;
        }
        let indices = UInt32Array::from(local);
        for (k, array) in arrays.into_iter().enumerate() {
            let array = array.ok_or_else(|| Error::Internal { object: object.to_string(), reason: "a column chunk was not decoded".into() })?;
            pieces[k].push(arrow::compute::take(array.as_ref(), &indices, None).map_err(|e| corrupt(object, e))?);
        }
    }
    let projected = Arc::new(schema.project(roots).map_err(|e| corrupt(object, e))?);
    let mut columns = Vec::with_capacity(roots.len());
    for parts in &pieces {
        let refs: Vec<&dyn arrow::array::Array> = parts.iter().map(|a| a.as_ref()).collect();
        columns.push(arrow::compute::concat(&refs).map_err(|e| corrupt(object, e))?);
    }
    let out = RecordBatch::try_new(projected, columns).map_err(|e| corrupt(object, e))?;
    if out.num_rows() != offsets.len() {
        return Err(corrupt(object, format!("decoded {} of {} requested rows", out.num_rows(), offsets.len())));
    }
    Ok(out)
}
