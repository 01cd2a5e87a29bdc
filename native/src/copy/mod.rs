//! Compaction's byte work: build one output data file from row groups of source files.
//!
//! A plan is a list of [`Action`]s in output order. `Copy` splices a source row
//! group's encoded column chunks byte-for-byte (footer and page index rebuilt
//! with shifted offsets); it is refused for a row group holding a deleted row, not
//! for a source whose deleted rows all lie in other row groups. `Encode` decodes a source row group (skipping deleted
//! rows) and feeds it to an encoder that cuts full-size row groups across
//! source boundaries. Binary copy is all `Copy`, full rewrite all `Encode`,
//! hybrid a mix; row order is always the order of the actions.
//!
//! Memory: up to `min(4, CPUs) + 1` output row groups of decoded rows (`row_group_rows`
//! each) plus their encoded pages, a few decoded batches queued ahead, and the I/O buffers
//! of a splice; never a whole file.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::mpsc::SyncSender;
use std::sync::Arc;

use arrow::array::RecordBatch;
use arrow::compute::concat_batches;
use arrow::datatypes::SchemaRef;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReaderBuilder, RowSelection};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnChunk, ArrowColumnWriter, ArrowLeafColumn, ArrowRowGroupWriterFactory};
use parquet::arrow::ArrowWriter;
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaData};
use parquet::file::writer::SerializedFileWriter;

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

/// What the decoding thread hands the encoder, in action order.
enum Item {
    Batch(RecordBatch),
    Copy { source: usize, row_group: usize },
}

/// Decodes the live rows of one row group into `tx`, cast to the table's types.
/// Returns false once the receiver is gone; errors are sent, then decoding stops.
fn decode(src: &Opened, source: &Source, row_group: usize, schema: &SchemaRef, batch_rows: usize, tx: &SyncSender<Result<Item>>) -> bool {
    let corrupt = |e: &dyn std::fmt::Display| Error::Corrupt {
        object: src.path.clone(),
        reason: format!("row group {row_group} cannot be decoded ({e})"),
    };
    // parquet's page decoders can still panic on hostile page bytes: that is this file's corruption.
    let result = guard(Work::Reads(&src.path), || -> Result<()> {
        let (first, rows) = src.span(row_group);
        // A positional reader of its own: the encoder thread may be copying chunks of this file meanwhile.
        let mut builder = ParquetRecordBatchReaderBuilder::new_with_metadata(src.file.clone(), src.reader_meta.clone())
            .with_row_groups(vec![row_group])
            .with_batch_size(batch_rows);
        if let Some(sel) = selection(&source.deleted, first, rows) {
            builder = builder.with_row_selection(sel);
        }
        for batch in builder.build().map_err(|e| corrupt(&e))? {
            let batch = batch.map_err(|e| corrupt(&e))?;
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
            let batch = RecordBatch::try_new(Arc::clone(schema), columns).map_err(|e| corrupt(&e))?;
            if tx.send(Ok(Item::Batch(batch))).is_err() {
                return Ok(());
            }
        }
        Ok(())
    });
    match result {
        Ok(()) => true,
        Err(e) => {
            let _ = tx.send(Err(e));
            false
        }
    }
}

/// Counters of one rewrite, for the job's metrics.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RewriteStats {
    pub row_groups_copied: u64,
    pub row_groups_encoded: u64,
    pub bytes_copied: u64,
    pub rows_encoded: u64,
}

struct Opened {
    path: String,
    /// Read positionally only: decode and copy read one source from two threads at once.
    file: PosFile,
    reader_meta: ArrowReaderMetadata,
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
    // Chunk and page ranges inside the file: parquet trusts them (its offset arithmetic overflows).
    crate::file::check_layout(reader_meta.metadata(), file.len(), &path)?;
    let total = reader_meta.metadata().file_metadata().num_rows();
    if u64::try_from(total).ok() != Some(rows) {
        return Err(corrupt(format!("the footer says {total} rows, its row groups hold {rows}")));
    }
    if source.deleted.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::InvalidArgument(format!("deleted offsets of {path} must be sorted and distinct")));
    }
    if let Some(&last) = source.deleted.last() {
        if u64::from(last) >= rows {
            return Err(Error::InvalidArgument(format!("deleted offset {last} is beyond the {rows} rows of {path}")));
        }
    }
    Ok(Opened { path, file, reader_meta, starts })
}

/// Buffers decoded rows and writes them as row groups of `row_group_rows`.
struct Encoder {
    schema: SchemaRef,
    row_group_rows: usize,
    pending: Vec<RecordBatch>,
    pending_rows: usize,
}

impl Encoder {
    fn push(&mut self, batch: RecordBatch, out: &mut Output) -> Result<()> {
        self.pending_rows += batch.num_rows();
        self.pending.push(batch);
        while self.pending_rows >= self.row_group_rows {
            let all = self.take_all()?;
            let head = all.slice(0, self.row_group_rows);
            let rest = all.slice(self.row_group_rows, all.num_rows() - self.row_group_rows);
            out.encode_row_group(&head)?;
            if rest.num_rows() > 0 {
                self.pending_rows = rest.num_rows();
                self.pending.push(rest);
            }
        }
        Ok(())
    }

    /// Writes whatever is pending as one (possibly short) row group: before a copy, or at the end.
    fn flush(&mut self, out: &mut Output) -> Result<()> {
        if self.pending_rows > 0 {
            let all = self.take_all()?;
            out.encode_row_group(&all)?;
        }
        Ok(())
    }

    fn take_all(&mut self) -> Result<RecordBatch> {
        let batches = std::mem::take(&mut self.pending);
        self.pending_rows = 0;
        concat_batches(&self.schema, &batches).map_err(|e| Error::InvalidArgument(format!("cannot combine batches: {e}")))
    }
}

/// A row group being encoded on its own thread: its column chunks and row count.
type Encoding = std::thread::JoinHandle<Result<(Vec<ArrowColumnChunk>, usize)>>;

struct Output {
    path: String,
    writer: SerializedFileWriter<OutputFile>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    stats: RewriteStats,
    /// Row groups being encoded, oldest first; appended to the file strictly in this order.
    in_flight: std::collections::VecDeque<Encoding>,
    max_in_flight: usize,
}

impl Output {
    fn perr(&self) -> impl Fn(parquet::errors::ParquetError) -> Error + '_ {
        move |source| Error::Parquet { path: self.path.clone(), source }
    }

    /// Starts encoding one row group on its own thread (its columns on threads of their own),
    /// so up to `max_in_flight` row groups encode at once; the GIL is already released.
    fn encode_row_group(&mut self, batch: &RecordBatch) -> Result<()> {
        let index = self.writer.flushed_row_groups().len() + self.in_flight.len();
        let writers = self.factory.create_column_writers(index).map_err(self.perr())?;
        // Group the leaf writers by top-level field, so each thread owns whole fields.
        let mut by_field: Vec<(Vec<ArrowColumnWriter>, Vec<ArrowLeafColumn>)> = Vec::new();
        let mut writers = writers.into_iter();
        for (field, column) in self.schema.fields().iter().zip(batch.columns()) {
            let leaves = compute_leaves(field, column).map_err(self.perr())?;
            let mine: Vec<ArrowColumnWriter> = writers.by_ref().take(leaves.len()).collect();
            by_field.push((mine, leaves));
        }
        let path = self.path.clone();
        let rows = batch.num_rows();
        self.in_flight.push_back(std::thread::spawn(move || {
            let closed: Vec<Result<Vec<ArrowColumnChunk>>> = std::thread::scope(|scope| {
                let handles: Vec<_> = by_field
                    .into_iter()
                    .map(|(mut ws, leaves)| {
                        let path = path.clone();
                        scope.spawn(move || -> Result<Vec<_>> {
                            let perr = |source| Error::Parquet { path: path.clone(), source };
                            for (w, leaf) in ws.iter_mut().zip(leaves.iter()) {
                                w.write(leaf).map_err(perr)?;
                            }
                            ws.into_iter().map(|w| w.close().map_err(perr)).collect()
                        })
                    })
                    .collect();
                handles
                    .into_iter()
                    .map(|h| h.join().unwrap_or_else(|_| Err(Error::InvalidArgument("a column encoder thread panicked".into()))))
                    .collect()
            });
            let mut chunks = Vec::new();
            for c in closed {
                chunks.extend(c?);
            }
            Ok((chunks, rows))
        }));
        while self.in_flight.len() > self.max_in_flight {
            self.append_oldest()?;
        }
        Ok(())
    }

    /// Waits for the oldest row group in flight and appends it to the file.
    fn append_oldest(&mut self) -> Result<()> {
        let Some(handle) = self.in_flight.pop_front() else { return Ok(()) };
        let (chunks, rows) = handle
            .join()
            .unwrap_or_else(|_| Err(Error::InvalidArgument("a row group encoder thread panicked".into())))?;
        let path = self.path.clone();
        let perr = |source| Error::Parquet { path: path.clone(), source };
        let mut rg = self.writer.next_row_group().map_err(perr)?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut rg).map_err(perr)?;
        }
        rg.close().map_err(perr)?;
        self.stats.row_groups_encoded += 1;
        self.stats.rows_encoded += rows as u64;
        Ok(())
    }

    /// Appends every row group still in flight (before a copy, and before the footer).
    fn drain(&mut self) -> Result<()> {
        while !self.in_flight.is_empty() {
            self.append_oldest()?;
        }
        Ok(())
    }

    fn copy_row_group(&mut self, src: &Opened, row_group: usize) -> Result<()> {
        self.drain()?;
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
        Ok(())
    }
}

/// Live-row selection of one row group, or None when nothing in it is deleted.
fn selection(deleted: &[u32], first_row: u64, rows: u64) -> Option<RowSelection> {
    let lo = deleted.partition_point(|&d| u64::from(d) < first_row);
    let hi = deleted.partition_point(|&d| u64::from(d) < first_row + rows);
    if lo == hi {
        return None;
    }
    let mut ranges = Vec::new();
    let mut next = 0usize;
    for &d in &deleted[lo..hi] {
        let local = (u64::from(d) - first_row) as usize;
        if local > next {
            ranges.push(next..local);
        }
        next = local + 1;
    }
    if (next as u64) < rows {
        ranges.push(next..rows as usize);
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
    let opened: Vec<Opened> = sources.iter().map(open).collect::<Result<_>>()?;
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
    }

    let display = output.display().to_string();
    let file = File::create_new(output).map_err(|e| Error::io(&display, e))?;
    let result = write_output(file, &display, &opened, sources, actions, schema, options, expected_rows);
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

#[allow(clippy::too_many_arguments)]
fn write_output(
    file: File,
    display: &str,
    opened: &[Opened],
    sources: &[Source],
    actions: &[Action],
    schema: SchemaRef,
    options: &WriteOptions,
    expected_rows: u64,
) -> Result<(WrittenFile, RewriteStats)> {
    let perr = |source| Error::Parquet { path: display.to_string(), source };
    // Copied chunks and encoded row groups alike go through the hashing writer: the checksum costs no extra pass.
    let writer = ArrowWriter::try_new(OutputFile::new_file(file), Arc::clone(&schema), Some(options.properties(&schema)?)).map_err(perr)?;
    let (writer, factory) = writer.into_serialized_writer().map_err(perr)?;
    let max_in_flight = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2).clamp(1, 4);
    let mut out = Output {
        path: display.to_string(),
        writer,
        factory,
        schema: Arc::clone(&schema),
        stats: RewriteStats::default(),
        in_flight: Default::default(),
        max_in_flight,
    };
    let mut encoder = Encoder { schema: Arc::clone(&schema), row_group_rows: options.row_group_rows, pending: vec![], pending_rows: 0 };

    // Decoding runs on its own thread, a few batches ahead of the encoder (bounded channel),
    // so decode and encode overlap; items arrive in action order, so row order is kept.
    let batch_rows = options.row_group_rows.clamp(1024, 65_536);
    std::thread::scope(|scope| -> Result<()> {
        let (tx, rx) = std::sync::mpsc::sync_channel::<Result<Item>>(4);
        let schema_ref = &schema;
        scope.spawn(move || {
            for action in actions {
                let sent = match *action {
                    Action::Copy { source, row_group } => tx.send(Ok(Item::Copy { source, row_group })).is_ok(),
                    Action::Encode { source, row_group } => {
                        decode(&opened[source], &sources[source], row_group, schema_ref, batch_rows, &tx)
                    }
                };
                if !sent {
                    return; // the encoder stopped (an error): stop decoding
                }
            }
        });
        for item in rx {
            match item? {
                Item::Batch(batch) => encoder.push(batch, &mut out)?,
                Item::Copy { source, row_group } => {
                    encoder.flush(&mut out)?;
                    out.copy_row_group(&opened[source], row_group)?;
                }
            }
        }
        Ok(())
    })?;
    encoder.flush(&mut out)?;
    out.drain()?;
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
