//! Compaction's byte work: build one output data file from row groups of source files.
//!
//! A plan is a list of [`Action`]s in output order. `Copy` splices a source row
//! group's encoded column chunks byte-for-byte (footer and page index rebuilt
//! with shifted offsets); it is refused for a row group holding a deleted row, not
//! for a source whose deleted rows all lie in other row groups. `Encode` decodes a source row group (skipping deleted
//! rows) and re-encodes them into row groups of `row_group_rows` cut across source
//! boundaries. Binary copy is all `Copy`, full rewrite all `Encode`, hybrid a mix; row
//! order is always the order of the actions.
//!
//! ```text
//!  actions ─► units (pure, cut as they are written): Copy | Encode([pieces: live rows of source row groups]) — one output row group each
//!  calling thread: submits Encode units ahead to the rewrite pool, appends finished ones in order, copies
//!  pool (min(4, CPUs) threads): per unit, its pieces decoded in parallel, then its fields encoded in parallel
//! ```
//!
//! Every output row group is known before anything is decoded (the live rows of every source row
//! group follow from the footers and the deleted offsets), so each one is an independent job that
//! decodes exactly the rows it holds: decode and encode of different row groups overlap on every
//! core, no decoded batch is concatenated, and no thread is spawned per row group or column.
//!
//! Memory: at most `min(4, CPUs) + 2` output row groups in flight, each holding its decoded rows
//! (`row_group_rows` at most) while it encodes and its encoded chunks until appended, plus the I/O
//! buffers of a splice; never a whole file.

use std::collections::VecDeque;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::{Arc, OnceLock};

use arrow::array::RecordBatch;
use arrow::datatypes::SchemaRef;
use rayon::prelude::*;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::writer::SerializedFileWriter;

use parquet::arrow::ProjectionMask;
use parquet::schema::types::ColumnDescPtr;

use crate::error::{guard, Error, Result, Work};
use crate::file::writer::{WriteOptions, WrittenFile};
use crate::file::{FILE_VERSION, FILE_VERSION_KEY};
use crate::io::{OutputFile, PosFile};

/// One source data file and the physical offsets deleted from it (sorted, unique).
#[derive(Debug, Clone)]
pub struct Source {
    pub path: PathBuf,
    pub deleted: Vec<u32>,
}

/// What to do with one source row group, in output order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Splice the row group's column chunks as they are (none of its rows may be deleted; other
    /// row groups of the same source may hold deleted rows).
    Copy { source: usize, row_group: usize },
    /// Decode the row group's live rows and re-encode them.
    Encode { source: usize, row_group: usize },
}

impl Action {
    /// The action named `kind` ("copy" or "encode") on row group `row_group` of source `source`.
    pub fn parse(kind: &str, source: usize, row_group: usize) -> Result<Action> {
        match kind {
            "copy" => Ok(Action::Copy { source, row_group }),
            "encode" => Ok(Action::Encode { source, row_group }),
            other => Err(Error::InvalidArgument(format!("unknown action {other:?}: use \"copy\" or \"encode\""))),
        }
    }
}

mod pages;

/// A run of one source row group's live rows: the `take` live rows after its first `skip` live rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Piece {
    source: usize,
    row_group: usize,
    skip: u64,
    take: u64,
}

/// One row group of the output, in output order.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Unit {
    Copy { source: usize, row_group: usize },
    /// Re-encoded from these pieces, in order: `row_group_rows` rows, fewer only before a copy or at the end.
    Encode(Vec<Piece>),
}

/// Cuts the actions into output row groups, one at a time as they are written. `live[i]` is the
/// live row count of `actions[i]`'s row group; `whole[i]` says whether some leaf of it could be
/// spliced whole (see `pages`). A row group that would straddle the end of an output row group
/// already at least half full starts the next one instead when that keeps something spliceable: it
/// is whole itself, or every row group before it in the current one is (cutting it would force them
/// all to be re-encoded). The row counts come from source footers, so the plan holds no more than
/// the unit being cut: a footer's count of billions of rows is found out by decoding the first
/// units, not by allocating all of them first.
struct Plan<'a> {
    actions: &'a [Action],
    live: &'a [u64],
    whole: &'a [bool],
    row_group_rows: u64,
    /// The action being cut, and how many of its live rows are already in units (`None`: not started).
    at: usize,
    skip: Option<u64>,
    current: Vec<Piece>,
    /// Every piece of `current` is a whole spliceable row group.
    current_whole: bool,
    filled: u64,
    ready: VecDeque<Unit>,
    done: bool,
}

/// All the units of a [`Plan`] at once.
#[cfg(test)]
fn plan_units(actions: &[Action], live: &[u64], whole: &[bool], row_group_rows: u64) -> Vec<Unit> {
    Plan::new(actions, live, whole, row_group_rows).collect()
}

impl<'a> Plan<'a> {
    fn new(actions: &'a [Action], live: &'a [u64], whole: &'a [bool], row_group_rows: u64) -> Self {
        Plan { actions, live, whole, row_group_rows, at: 0, skip: None, current: Vec::new(), current_whole: true, filled: 0, ready: VecDeque::new(), done: false }
    }

    fn close(&mut self) {
        if !self.current.is_empty() {
            self.ready.push_back(Unit::Encode(std::mem::take(&mut self.current)));
        }
        self.current_whole = true;
        self.filled = 0;
    }

    /// One action started or finished, or one piece cut.
    fn step(&mut self) {
        let (Some(action), Some(&live), Some(&whole)) = (self.actions.get(self.at), self.live.get(self.at), self.whole.get(self.at)) else {
            self.close();
            self.done = true;
            return;
        };
        match *action {
            Action::Copy { source, row_group } => {
                self.close();
                self.ready.push_back(Unit::Copy { source, row_group });
                self.at += 1;
            }
            Action::Encode { source, row_group } => {
                let skip = match self.skip {
                    Some(skip) => skip,
                    None => {
                        let straddles = self.filled + live > self.row_group_rows && 2 * self.filled >= self.row_group_rows;
                        if live > 0 && straddles && (whole || self.current_whole) {
                            self.close();
                        }
                        0
                    }
                };
                if skip < live {
                    let take = (live - skip).min(self.row_group_rows - self.filled);
                    self.current.push(Piece { source, row_group, skip, take });
                    self.current_whole &= whole && take == live;
                    self.filled += take;
                    if self.filled == self.row_group_rows {
                        self.close();
                    }
                    self.skip = Some(skip + take);
                } else {
                    self.skip = None;
                    self.at += 1;
                }
            }
        }
    }
}

impl Iterator for Plan<'_> {
    type Item = Unit;

    fn next(&mut self) -> Option<Unit> {
        loop {
            if let Some(unit) = self.ready.pop_front() {
                return Some(unit);
            }
            if self.done {
                return None;
            }
            self.step();
        }
    }
}

/// The pool that decodes and encodes row groups: `min(4, CPUs)` threads for the process, so the
/// rewrite's memory follows the CPU count the documented bound names, whatever the call count.
fn pool() -> Result<&'static rayon::ThreadPool> {
    static POOL: OnceLock<std::result::Result<rayon::ThreadPool, String>> = OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(parallelism())
            .thread_name(|i| format!("lamina-rewrite-{i}"))
            .build()
            .map_err(|e| e.to_string())
    })
    .as_ref()
    .map_err(|e| Error::Internal { object: "the rewrite thread pool".into(), reason: format!("cannot start its threads ({e})") })
}

/// Threads of the rewrite pool: min(4, CPUs).
fn parallelism() -> usize {
    std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(1, 4)
}

/// Decodes one piece, cast to the table's types, in batches of at most 64Ki rows (fewer for wide
/// fixed-size values: `file::batch_rows`); with `leaves`,
/// only those leaf columns, as they are stored (the source then has exactly the table's schema).
fn decode_piece(src: &Opened, source: &Source, piece: &Piece, schema: &SchemaRef, leaves: Option<&[usize]>) -> Result<Vec<RecordBatch>> {
    let row_group = piece.row_group;
    let corrupt = |e: &dyn std::fmt::Display| Error::Corrupt {
        object: src.path.clone(),
        reason: format!("row group {row_group} cannot be decoded ({e})"),
    };
    // parquet's page decoders can still panic on hostile page bytes: that is this file's corruption.
    guard(Work::Reads(&src.path), || -> Result<Vec<RecordBatch>> {
        let (first, rows) = src.span(row_group);
        // A positional reader of its own: other pieces of this file may be decoded or copied meanwhile.
        let all = 0..src.meta().file_metadata().schema_descr().num_columns();
        let want = usize::try_from(piece.take).unwrap_or(usize::MAX).min(65_536);
        let batch_rows = match leaves {
            Some(leaves) => crate::file::batch_rows(src.meta(), leaves.iter().copied(), want),
            None => crate::file::batch_rows(src.meta(), all, want),
        };
        let meta = match (leaves, &src.dict_meta) {
            (Some(leaves), Some(dict)) if all_dictionary_encoded(src.meta(), row_group, leaves) => dict.clone(),
            _ => src.reader_meta.clone(),
        };
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(src.file.clone(), meta)
            .with_row_groups(vec![row_group])
            .with_batch_size(batch_rows);
        if let Some(sel) = piece_selection(&source.deleted, first, rows, piece.skip, piece.take) {
            builder = builder.with_row_selection(sel);
        }
        if let Some(leaves) = leaves {
            let mask = ProjectionMask::leaves(src.meta().file_metadata().schema_descr(), leaves.iter().copied());
            builder = builder.with_projection(mask);
        }
        let mut out = Vec::new();
        let mut decoded = 0u64;
        for batch in builder.build().map_err(|e| corrupt(&e))? {
            let batch = batch.map_err(|e| corrupt(&e))?;
            decoded += batch.num_rows() as u64;
            if leaves.is_some() {
                out.push(batch);
                continue;
            }
            let columns = batch
                .columns()
                .iter()
                .zip(schema.fields())
                .map(|(c, f)| {
                    if c.data_type() == f.data_type() {
                        Ok(Arc::clone(c))
                    } else {
                        arrow::compute::cast(c, f.data_type()).map_err(|e| corrupt(&e))
                    }
                })
                .collect::<Result<Vec<_>>>()?;
            out.push(RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| corrupt(&e))?);
        }
        if decoded != piece.take {
            return Err(corrupt(&format!("{decoded} rows decoded, its footer promises {}", piece.take)));
        }
        Ok(out)
    })
}

/// Counters of one rewrite, for the job's metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewriteStats {
    pub row_groups_copied: u64,
    pub row_groups_encoded: u64,
    pub bytes_copied: u64,
    pub rows_encoded: u64,
    /// Column chunks of encoded row groups made of source pages as they were (`pages`).
    pub chunks_spliced: u64,
}

struct Opened {
    path: String,
    /// Read positionally only: decode and copy read one source from two threads at once.
    file: PosFile,
    reader_meta: ArrowReaderMetadata,
    /// The same footer read with string leaves (top level or in structs) as dictionary arrays, if
    /// it has any: their dictionary-encoded chunks then decode to keys, not to every string.
    dict_meta: Option<ArrowReaderMetadata>,
    /// First row of each row group, and the total row count last (checked, from the footer).
    starts: Vec<u64>,
}

impl Opened {
    fn meta(&self) -> &ParquetMetaData {
        self.reader_meta.metadata()
    }

    /// (first row, rows) of a row group.
    fn span(&self, row_group: usize) -> (u64, u64) {
        (self.starts[row_group], self.starts[row_group + 1] - self.starts[row_group])
    }

    fn corrupt(&self, reason: impl Into<String>) -> Error {
        Error::Corrupt { object: self.path.clone(), reason: reason.into() }
    }
}

/// `meta` read with its string and binary leaves (at the top or in structs) as `Dictionary(Int32, _)`
/// arrays; None when it has none, or the reader does not take the hint.
fn dictionary_reading(meta: &ArrowReaderMetadata) -> Option<ArrowReaderMetadata> {
    use arrow::datatypes::{DataType, Field, Schema};
    fn hint(dt: &DataType) -> Option<DataType> {
        match dt {
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => {
                Some(DataType::Dictionary(Box::new(DataType::Int32), Box::new(dt.clone())))
            }
            DataType::Struct(fields) => {
                let mapped: Vec<Option<DataType>> = fields.iter().map(|f| hint(f.data_type())).collect();
                mapped.iter().any(Option::is_some).then(|| {
                    DataType::Struct(
                        fields
                            .iter()
                            .zip(mapped)
                            .map(|(f, m)| Arc::new(Field::clone(f).with_data_type(m.unwrap_or_else(|| f.data_type().clone()))))
                            .collect(),
                    )
                })
            }
            _ => None,
        }
    }
    let schema = meta.schema();
    let mapped: Vec<Option<DataType>> = schema.fields().iter().map(|f| hint(f.data_type())).collect();
    if mapped.iter().all(Option::is_none) {
        return None;
    }
    let fields: Vec<Field> =
        schema.fields().iter().zip(mapped).map(|(f, m)| Field::clone(f).with_data_type(m.unwrap_or_else(|| f.data_type().clone()))).collect();
    let hinted = Arc::new(Schema::new_with_metadata(fields, schema.metadata().clone()));
    let options = ArrowReaderOptions::new().with_schema(hinted).with_page_index_policy(PageIndexPolicy::Optional);
    ArrowReaderMetadata::try_new(Arc::clone(meta.metadata()), options).ok()
}

/// Whether every chunk of `leaves` in `row_group` that holds strings or binary is dictionary-encoded
/// throughout (then reading them as dictionary arrays decodes keys only; a chunk that fell back to
/// plain pages would be re-hashed into a dictionary instead).
fn all_dictionary_encoded(meta: &ParquetMetaData, row_group: usize, leaves: &[usize]) -> bool {
    use parquet::basic::Encoding;
    let rg = meta.row_group(row_group);
    leaves.iter().all(|&leaf| {
        let Some(c) = rg.columns().get(leaf) else { return false };
        c.column_type() != parquet::basic::Type::BYTE_ARRAY
            || (c.dictionary_page_offset().is_some()
                && c.page_encoding_stats_mask().is_some_and(|m| m.is_only(Encoding::RLE_DICTIONARY) || m.is_only(Encoding::PLAIN_DICTIONARY)))
    })
}

fn open(source: &Source) -> Result<Opened> {
    let path = source.path.display().to_string();
    let file = PosFile::open(&source.path)?;
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Optional);
    let reader_meta = guard(Work::Reads(&path), || {
        ArrowReaderMetadata::load(&file, options)
            .map_err(|e| Error::Corrupt { object: path.clone(), reason: format!("cannot read the Parquet footer ({e})") })
    })?;
    let corrupt = |reason: String| Error::Corrupt { object: path.clone(), reason };
    let mut starts = Vec::with_capacity(reader_meta.metadata().num_row_groups() + 1);
    let mut rows = 0u64;
    starts.push(0);
    for (i, rg) in reader_meta.metadata().row_groups().iter().enumerate() {
        rows = u64::try_from(rg.num_rows())
            .ok()
            .and_then(|n| rows.checked_add(n))
            .ok_or_else(|| corrupt(format!("row group {i} has {} rows", rg.num_rows())))?;
        starts.push(rows);
    }
    // Chunk and page ranges inside the file, row counts that agree: parquet trusts them.
    crate::file::check_layout(reader_meta.metadata(), file.len(), &path)?;
    if source.deleted.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::InvalidArgument(format!("deleted offsets of {path} must be sorted and distinct")));
    }
    if let Some(&last) = source.deleted.last() {
        if u64::from(last) >= rows {
            return Err(Error::InvalidArgument(format!("deleted offset {last} is beyond the {rows} rows of {path}")));
        }
    }
    let dict_meta = dictionary_reading(&reader_meta);
    Ok(Opened { path, file, reader_meta, dict_meta, starts })
}

/// One column chunk of an encoded row group: freshly encoded, or spliced from source pages.
enum Chunk {
    Encoded(ArrowColumnChunk),
    Spliced(bytes::Bytes, ColumnCloseResult),
}

/// The column chunks of one row group (in leaf order) and its row count, as a pool job hands them back.
type Encoded = Result<(Vec<Chunk>, usize)>;

/// What the rewrite's jobs share: the sources and the table's schema.
struct Inputs<'a> {
    opened: &'a [Opened],
    sources: &'a [Source],
    schema: &'a SchemaRef,
    path: &'a str,
    /// Leaf columns of each top-level field, in schema order.
    leaves: Vec<usize>,
    /// The output's leaf column descriptors.
    descrs: Vec<ColumnDescPtr>,
    /// Per source: whether its chunks may be spliced at all (`check_copy`).
    copyable: Vec<bool>,
}

impl Inputs<'_> {
    /// Whether `piece` is a whole source row group whose chunks may be spliced.
    fn whole(&self, piece: &Piece) -> bool {
        self.copyable[piece.source] && piece.skip == 0 && piece.take == self.opened[piece.source].span(piece.row_group).1
    }

    /// Builds one output row group: leaves every piece can splice are spliced (`pages`); the others
    /// are decoded (pieces in parallel) and encoded (fields in parallel) with their `writers`, the
    /// leaf column writers of that row group in schema order.
    fn encode_unit(&self, pieces: &[Piece], writers: Vec<ArrowColumnWriter>) -> Encoded {
        let n = self.descrs.len();
        let all_whole = pieces.iter().all(|p| self.whole(p));
        let spliced: Vec<bool> = (0..n)
            .map(|leaf| all_whole && pieces.iter().all(|p| pages::spliceable(self.opened[p.source].meta(), p.row_group, leaf)))
            .collect();
        let encode: Vec<usize> = (0..n).filter(|&l| !spliced[l]).collect();
        let rows: usize = pieces.iter().map(|p| p.take as usize).sum();
        // Projected decoding when some leaves are spliced (every source then has the table's exact schema).
        let projection = (encode.len() < n).then_some(encode.as_slice());
        let decoded: Vec<Vec<RecordBatch>> = if encode.is_empty() {
            Vec::new()
        } else {
            pieces
                .par_iter()
                .map(|p| decode_piece(&self.opened[p.source], &self.sources[p.source], p, self.schema, projection))
                .collect::<Result<_>>()?
        };
        let batches: Vec<RecordBatch> = decoded.into_iter().flatten().collect();
        if batches.iter().map(|b| b.num_rows()).sum::<usize>() != if encode.is_empty() { 0 } else { rows } {
            return Err(Error::Internal { object: self.path.to_string(), reason: "decoded rows differ from the planned rows".into() });
        }
        // Work items: one per top-level field with leaves to encode (its column in the decoded
        // batches, its writers), one per spliced leaf.
        enum Job {
            Field { column: usize, field: usize, writers: Vec<(usize, ArrowColumnWriter)> },
            Splice(usize),
        }
        let mut jobs = Vec::new();
        let mut writers = writers.into_iter().enumerate();
        let mut column = 0;
        for (field, &count) in self.leaves.iter().enumerate() {
            let mine: Vec<(usize, ArrowColumnWriter)> = writers.by_ref().take(count).filter(|(leaf, _)| !spliced[*leaf]).collect();
            let first_leaf = self.leaves[..field].iter().sum::<usize>();
            jobs.extend((first_leaf..first_leaf + count).filter(|&l| spliced[l]).map(Job::Splice));
            if !mine.is_empty() {
                jobs.push(Job::Field { column, field, writers: mine });
                column += 1;
            }
        }
        let done: Vec<Vec<(usize, Chunk)>> = jobs
            .into_par_iter()
            .map(|job| {
                guard(Work::Makes(self.path), || -> Result<Vec<(usize, Chunk)>> {
                    let perr = |source| Error::Parquet { path: self.path.to_string(), source };
                    match job {
                        Job::Splice(leaf) => {
                            let parts: Vec<pages::Part<'_>> =
                                pieces.iter().map(|p| pages::Part { src: &self.opened[p.source], row_group: p.row_group }).collect();
                            let (bytes, close) = pages::splice(Arc::clone(&self.descrs[leaf]), &parts, leaf)?;
                            Ok(vec![(leaf, Chunk::Spliced(bytes, close))])
                        }
                        Job::Field { column, field, mut writers } => {
                            for batch in &batches {
                                // Projected batches carry their own (possibly narrower) field; whole ones the table's.
                                let schema = batch.schema();
                                let f = if projection.is_some() { schema.field(column) } else { self.schema.field(field) };
                                let array = batch.column(if projection.is_some() { column } else { field });
                                let leaves = compute_leaves(f, array).map_err(perr)?;
                                if leaves.len() != writers.len() {
                                    return Err(Error::Internal { object: self.path.to_string(), reason: "decoded leaves differ from the writers".into() });
                                }
                                for ((_, w), leaf) in writers.iter_mut().zip(leaves.iter()) {
                                    w.write(leaf).map_err(perr)?;
                                }
                            }
                            writers.into_iter().map(|(leaf, w)| Ok((leaf, Chunk::Encoded(w.close().map_err(perr)?)))).collect()
                        }
                    }
                })
            })
            .collect::<Result<_>>()?;
        let mut chunks: Vec<(usize, Chunk)> = done.into_iter().flatten().collect();
        chunks.sort_by_key(|(leaf, _)| *leaf);
        Ok((chunks.into_iter().map(|(_, c)| c).collect(), rows))
    }
}

struct Output {
    path: String,
    writer: SerializedFileWriter<OutputFile>,
    factory: ArrowRowGroupWriterFactory,
    stats: RewriteStats,
}

impl Output {
    /// Appends one encoded row group to the file.
    fn append_encoded(&mut self, chunks: Vec<Chunk>, rows: usize) -> Result<()> {
        let path = self.path.clone();
        let perr = |source| Error::Parquet { path: path.clone(), source };
        let mut rg = self.writer.next_row_group().map_err(perr)?;
        for chunk in chunks {
            match chunk {
                Chunk::Encoded(chunk) => chunk.append_to_row_group(&mut rg).map_err(perr)?,
                Chunk::Spliced(bytes, close) => {
                    rg.append_column(&bytes, close).map_err(perr)?;
                    self.stats.chunks_spliced += 1;
                }
            }
        }
        rg.close().map_err(perr)?;
        self.stats.row_groups_encoded += 1;
        self.stats.rows_encoded += rows as u64;
        start_writeback(self.writer.inner().file());
        Ok(())
    }

    fn copy_row_group(&mut self, src: &Opened, row_group: usize) -> Result<()> {
        let meta = src.meta();
        let rg_meta = meta.row_group(row_group);
        let page_index = meta.page_index_for_row_group(row_group);
        let (_, rows) = src.span(row_group);
        let path = self.path.clone();
        let perr = |source| Error::Parquet { path: path.clone(), source };
        let mut rg = self.writer.next_row_group().map_err(perr)?;
        for (i, column) in rg_meta.columns().iter().enumerate() {
            let close = ColumnCloseResult {
                bytes_written: column.compressed_size() as u64,
                rows_written: rows,
                metadata: column.clone(),
                bloom_filter: None,
                column_index: page_index.column_index(i).cloned(),
                offset_index: page_index.offset_index(i).cloned(),
            };
            rg.append_column(&src.file, close).map_err(|e| Error::Corrupt {
                object: src.path.clone(),
                reason: format!("column chunk {i} of row group {row_group} cannot be copied ({e})"),
            })?;
            self.stats.bytes_copied += column.compressed_size() as u64;
        }
        rg.close().map_err(perr)?;
        self.stats.row_groups_copied += 1;
        start_writeback(self.writer.inner().file());
        Ok(())
    }
}

/// Asks the kernel to start writing the output's dirty pages back now (not waiting for them), so
/// the closing fsync waits for the last row groups only, not for the whole file (Linux; a hint:
/// failures are ignored, the fsync still decides).
fn start_writeback(file: &File) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: a plain syscall on an fd this function borrows; it reads no memory of ours.
        unsafe {
            libc::sync_file_range(file.as_raw_fd(), 0, 0, libc::SYNC_FILE_RANGE_WRITE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = file;
}

/// The rows of one row group (`rows` rows from file row `first`) that hold its live rows
/// `[skip, skip + take)`, or None when that is every row.
fn piece_selection(deleted: &[u32], first_row: u64, rows: u64, skip: u64, take: u64) -> Option<RowSelection> {
    let lo = deleted.partition_point(|&d| u64::from(d) < first_row);
    let hi = deleted.partition_point(|&d| u64::from(d) < first_row + rows);
    if lo == hi && skip == 0 && take == rows {
        return None;
    }
    let (want_lo, want_hi) = (skip, skip + take);
    let mut ranges = Vec::new();
    let mut next = 0u64; // first physical row of the current run of live rows
    let mut seen = 0u64; // live rows before it
    let ends = deleted[lo..hi].iter().map(|&d| u64::from(d) - first_row).chain(std::iter::once(rows));
    for end in ends {
        // Physical rows [next, end) are live rows [seen, seen + end - next).
        let (a, b) = (want_lo.max(seen), want_hi.min(seen + (end - next)));
        if a < b {
            ranges.push((next + a - seen) as usize..(next + b - seen) as usize);
        }
        seen += end - next;
        next = end + 1;
        if seen >= want_hi {
            break;
        }
    }
    Some(RowSelection::from_consecutive_ranges(ranges.into_iter(), rows as usize))
}

/// Builds `output` from `sources` following `actions`; checks the result before returning.
///
/// `schema` is the table's Arrow schema: every source must decode to it, and the output has it.
pub fn rewrite(
    sources: &[Source],
    actions: &[Action],
    schema: SchemaRef,
    output: &Path,
    options: &WriteOptions,
) -> Result<(WrittenFile, RewriteStats)> {
    options.validate()?;
    // Footers and page indexes of many small sources: read on the pool, in parallel.
    let opened: Vec<Opened> = pool()?.install(|| sources.par_iter().map(open).collect::<Result<_>>())?;
    for src in &opened {
        let theirs = src.reader_meta.schema();
        let names = |s: &arrow::datatypes::Schema| s.fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>();
        let castable = theirs.fields().len() == schema.fields().len()
            && theirs.fields().iter().zip(schema.fields()).all(|(a, b)| {
                a.name() == b.name() && arrow::compute::can_cast_types(a.data_type(), b.data_type())
            });
        if !castable {
            return Err(Error::InvalidArgument(format!(
                "{} has columns {:?} of types {:?}, the table has {:?}: it cannot be rewritten into this table",
                src.path,
                names(theirs),
                theirs.fields().iter().map(|f| f.data_type().to_string()).collect::<Vec<_>>(),
                names(&schema)
            )));
        }
    }
    let mut expected_rows = 0u64;
    let mut live_rows = Vec::with_capacity(actions.len());
    let mut whole = Vec::with_capacity(actions.len());
    for action in actions {
        let (source, row_group) = match *action {
            Action::Copy { source, row_group } | Action::Encode { source, row_group } => (source, row_group),
        };
        let src = opened
            .get(source)
            .ok_or_else(|| Error::InvalidArgument(format!("action names source {source}, there are {}", opened.len())))?;
        if row_group >= src.meta().num_row_groups() {
            // The plan comes from the manifest's row groups: a file with fewer is not the file it records.
            return Err(src.corrupt(format!("has {} row groups, the plan names row group {row_group}", src.meta().num_row_groups())));
        }
        let (first, rows) = src.span(row_group);
        let live = match action {
            Action::Copy { .. } => {
                check_copy(src, &schema)?;
                let deleted = deleted_in(&sources[source].deleted, first, rows);
                if deleted > 0 {
                    // A copy keeps every row: the plan (or the worker resolving it) must encode this one.
                    return Err(Error::InvalidArgument(format!(
                        "row group {row_group} of {} holds {deleted} deleted rows: it cannot be copied as it is, only re-encoded",
                        src.path
                    )));
                }
                rows
            }
            // Offsets are sorted, distinct and below the file's rows (checked by open): at most `rows` fall here.
            Action::Encode { .. } => rows - deleted_in(&sources[source].deleted, first, rows),
        };
        expected_rows = expected_rows.checked_add(live).ok_or_else(|| src.corrupt("row counts overflow"))?;
        live_rows.push(live);
        // Aligning output row groups on this one only pays if some leaf of it would be spliced.
        let spliceable = |rg| (0..src.meta().row_group(rg).num_columns()).any(|leaf| pages::spliceable(src.meta(), rg, leaf));
        whole.push(live == rows && check_copy(src, &schema).is_ok() && spliceable(row_group));
    }
    let units = Plan::new(actions, &live_rows, &whole, options.row_group_rows as u64);

    let display = output.display().to_string();
    let file = File::create_new(output).map_err(|e| Error::io(&display, e))?;
    let result = write_output(file, &display, &opened, sources, units, schema, options, expected_rows);
    if result.is_err() {
        let _ = std::fs::remove_file(output);
    }
    result
}

/// How many of the sorted `deleted` offsets fall in rows `[first, first + rows)`.
fn deleted_in(deleted: &[u32], first: u64, rows: u64) -> u64 {
    let lo = deleted.partition_point(|&d| u64::from(d) < first);
    let hi = deleted.partition_point(|&d| u64::from(d) < first + rows);
    (hi - lo) as u64
}

/// Whether `src`'s chunks may be spliced into an output of `schema` (deleted rows are checked per row group).
fn check_copy(src: &Opened, schema: &SchemaRef) -> Result<()> {
    if src.reader_meta.schema().fields() != schema.fields() {
        return Err(Error::InvalidArgument(format!("{} does not have exactly the table's schema: its chunks cannot be copied", src.path)));
    }
    let version = src
        .meta()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|e| e.key == FILE_VERSION_KEY))
        .and_then(|e| e.value.clone());
    if let Some(kv) = src.meta().file_metadata().key_value_metadata() {
        if let Some(unknown) = kv.iter().find(|e| e.key != "ARROW:schema" && !e.key.starts_with("lamina.")) {
            return Err(Error::InvalidArgument(format!(
                "{} carries key-value metadata {:?} this writer does not understand: it cannot be copied as is",
                src.path, unknown.key
            )));
        }
    }
    if version.as_deref() != Some(FILE_VERSION) {
        return Err(Error::InvalidArgument(format!(
            "{} has Lamina file version {:?}; only version {FILE_VERSION} chunks can be copied",
            src.path, version
        )));
    }
    Ok(())
}

/// Top-level columns the output writes without a dictionary: those the first source has written so
/// (its writer found them mostly distinct, `file::writer::mostly_distinct`), decided without reading
/// a value. Encoded row groups then match copied ones.
fn plain_in_sources(opened: &[Opened], schema: &SchemaRef) -> Vec<usize> {
    let Some(group) = opened.first().and_then(|src| src.meta().row_groups().first()) else { return vec![] };
    (0..schema.fields().len())
        .filter(|&i| {
            let name = schema.field(i).name();
            group
                .columns()
                .iter()
                .find(|c| c.column_path().parts().len() == 1 && c.column_path().parts()[0] == *name)
                .is_some_and(|c| c.dictionary_page_offset().is_none() && c.column_type() == parquet::basic::Type::BYTE_ARRAY)
        })
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn write_output(
    file: File,
    display: &str,
    opened: &[Opened],
    sources: &[Source],
    mut units: impl Iterator<Item = Unit>,
    schema: SchemaRef,
    options: &WriteOptions,
    expected_rows: u64,
) -> Result<(WrittenFile, RewriteStats)> {
    let perr = |source| Error::Parquet { path: display.to_string(), source };
    // Copied chunks and encoded row groups alike go through the hashing writer: the checksum costs no extra pass.
    let properties = options.properties(&schema, &plain_in_sources(opened, &schema))?;
    let writer = ArrowWriter::try_new(OutputFile::new_file(file), Arc::clone(&schema), Some(properties)).map_err(perr)?;
    let (writer, factory) = writer.into_serialized_writer().map_err(perr)?;
    let mut out = Output { path: display.to_string(), writer, factory, stats: RewriteStats::default() };
    // Leaves per field: the root schema's top-level nodes map one to one onto the Arrow fields.
    let root = out.writer.schema_descr().root_schema();
    let leaves: Vec<usize> = root.get_fields().iter().map(|f| count_leaves(f)).collect();
    if leaves.len() != schema.fields().len() {
        return Err(Error::Internal { object: display.to_string(), reason: "Parquet schema does not match the Arrow schema".into() });
    }
    let descrs = out.writer.schema_descr().columns().to_vec();
    let copyable = opened.iter().map(|src| check_copy(src, &schema).is_ok()).collect();
    let inputs = Inputs { opened, sources, schema: &schema, path: display, leaves, descrs, copyable };
    // Row groups submitted ahead of the one being appended: enough to keep every pool thread busy
    // while finished ones wait their turn. Each holds at most its decoded rows and its encoded
    // chunks, so `P + 2` of them stay within the documented `(4 + 2P) × row_group_rows` rows.
    let window = parallelism() + 2;
    let stop = AtomicBool::new(false);

    enum Slot {
        Copy(usize, usize),
        Encoding(Receiver<Encoded>),
    }
    pool()?.in_place_scope(|scope| -> Result<()> {
        let result = (|| -> Result<()> {
            let mut queue: VecDeque<Slot> = VecDeque::new();
            let mut submitted = 0usize; // units queued so far; a unit's index is its output row group
            let mut encoding = 0usize; // encode units queued and not yet appended
            loop {
                while encoding < window {
                    let Some(unit) = units.next() else { break };
                    match unit {
                        Unit::Copy { source, row_group } => queue.push_back(Slot::Copy(source, row_group)),
                        Unit::Encode(pieces) => {
                            let writers = out.factory.create_column_writers(submitted).map_err(perr)?;
                            let (tx, rx) = sync_channel::<Encoded>(1);
                            let (inputs, stop) = (&inputs, &stop);
                            scope.spawn(move |_| {
                                // After a failure, queued jobs only report that they did not run.
                                let done = if stop.load(Ordering::Relaxed) {
                                    Err(Error::InvalidArgument("stopped after an earlier error".into()))
                                } else {
                                    guard(Work::Makes(inputs.path), || inputs.encode_unit(&pieces, writers))
                                };
                                let _ = tx.send(done);
                            });
                            queue.push_back(Slot::Encoding(rx));
                            encoding += 1;
                        }
                    }
                    submitted += 1;
                }
                match queue.pop_front() {
                    None => return Ok(()),
                    Some(Slot::Copy(source, row_group)) => out.copy_row_group(&opened[source], row_group)?,
                    Some(Slot::Encoding(rx)) => {
                        let (chunks, rows) = rx.recv().map_err(|_| Error::Internal {
                            object: display.to_string(),
                            reason: "a row group encoder stopped without an answer; please report this as a Lamina bug".into(),
                        })??;
                        out.append_encoded(chunks, rows)?;
                        encoding -= 1;
                    }
                }
            }
        })();
        if result.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        result
    })?;
    let stats = out.stats.clone();
    let metadata = out.writer.finish().map_err(perr)?;
    let written = WrittenFile::synced(out.writer.inner(), display, &metadata)?;
    let rows = written.rows;
    if rows != expected_rows {
        return Err(Error::Corrupt { object: display.to_string(), reason: format!("output has {rows} rows, expected {expected_rows}") });
    }
    verify(display, &schema, rows)?;
    Ok((written, stats))
}

/// Leaf columns under one Parquet schema node.
fn count_leaves(node: &parquet::schema::types::Type) -> usize {
    if node.is_group() {
        node.get_fields().iter().map(|f| count_leaves(f)).sum()
    } else {
        1
    }
}

/// Re-reads the written footer: the row count and the Arrow schema must be what was promised.
fn verify(path: &str, schema: &SchemaRef, rows: u64) -> Result<()> {
    let file = PosFile::open(Path::new(path))?;
    let meta = ArrowReaderMetadata::load(&file, ArrowReaderOptions::new())
        .map_err(|e| Error::Corrupt { object: path.to_string(), reason: format!("written file does not read back ({e})") })?;
    if meta.metadata().file_metadata().num_rows() as u64 != rows || meta.schema().fields() != schema.fields() {
        return Err(Error::Corrupt { object: path.to_string(), reason: "written file does not match the promised rows and schema".into() });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
