//! The one Parquet writer behind every Lamina write path.
//!
//! Properties are fixed so every data file is alike (which is what lets the
//! compaction job copy column chunks between files byte-for-byte): zstd,
//! page-level statistics (so the column and offset indexes are written),
//! bounded row groups, and the Lamina file version in the key-value metadata
//! next to the `ARROW:schema` entry arrow-rs writes. The one choice made per
//! file is whether a string or binary column gets a dictionary
//! ([`mostly_distinct`]); chunks of either kind copy alike.

use std::fs::File;
use std::path::{Path, PathBuf};

use arrow::array::AsArray;
use arrow::datatypes::{DataType, SchemaRef};
use arrow::record_batch::RecordBatch;
use parquet::arrow::ArrowWriter;
use parquet::arrow::ArrowSchemaConverter;
use parquet::basic::{Compression, Type as PhysicalType, ZstdLevel};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};

use super::{FILE_VERSION, FILE_VERSION_KEY, WRITER_KEY};
use crate::error::{Error, Result};
use crate::io::{format_checksum, OutputFile};

/// Row limit of a data page (enforced at batch granularity by the encoder).
pub const DATA_PAGE_ROWS: usize = 8192;
/// Size at which a column chunk's dictionary stops growing and its pages fall back to plain.
pub const DICTIONARY_PAGE_BYTES: usize = 128 * 1024;

/// How to lay out one data file.
#[derive(Debug, Clone)]
pub struct WriteOptions {
    /// Rows per row group at most.
    pub row_group_rows: usize,
    /// Encoded bytes per row group at most (arrow-rs estimate), if bounded.
    pub row_group_bytes: Option<usize>,
    /// zstd level, 1..=22; 0 writes uncompressed pages (small files rewritten often, such as a
    /// catalog's: a zstd context per column chunk costs more than the bytes it saves there).
    pub zstd_level: i32,
    /// Extra key-value metadata; keys starting with `lamina.` are reserved.
    pub extra_metadata: Vec<(String, String)>,
    /// Fsync the file before returning (the default). Off only for a caller that makes a whole
    /// batch of files durable at once before anything refers to them (`write_fragments` on a local
    /// disk: one sync for thousands of small files instead of one each).
    pub sync: bool,
}

impl Default for WriteOptions {
    fn default() -> Self {
        Self { row_group_rows: 131_072, row_group_bytes: None, zstd_level: 3, extra_metadata: vec![], sync: true }
    }
}

/// One row group of a written file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RowGroupInfo {
    pub rows: u64,
    /// Compressed bytes of its column chunks.
    pub bytes: u64,
}

/// What was written: enough for the manifest's fragment entry.
#[derive(Debug, Clone)]
pub struct WrittenFile {
    pub rows: u64,
    /// Size of the whole file on disk, footer included.
    pub file_bytes: u64,
    pub row_groups: Vec<RowGroupInfo>,
    pub file_version: &'static str,
    /// CRC32C of the whole file, computed while writing: `crc32c:` and 8 hex digits.
    pub checksum: String,
}

impl WriteOptions {
    pub(crate) fn validate(&self) -> Result<()> {
        if self.row_group_rows == 0 {
            return Err(Error::InvalidArgument("row_group_rows must be at least 1".into()));
        }
        if self.row_group_bytes == Some(0) {
            return Err(Error::InvalidArgument("row_group_bytes must be at least 1 when set".into()));
        }
        if let Some((key, _)) = self.extra_metadata.iter().find(|(k, _)| k.starts_with("lamina.")) {
            return Err(Error::InvalidArgument(format!("metadata key {key:?} is reserved for Lamina")));
        }
        Ok(())
    }

    /// Writer properties for files of `schema`.
    ///
    /// Dictionary encoding stays on for strings, binary and booleans but is off for
    /// fixed-width numeric leaves: arrow-rs hashes every value of a column chunk until the
    /// dictionary page fills, which made high-cardinality numeric columns (ids, timestamps,
    /// measurements, vectors) ~3x slower to encode, while zstd already captures the
    /// repetition of low-cardinality ones.
    ///
    /// `plain`: top-level string or binary columns to write without a dictionary ([`mostly_distinct`]).
    pub(crate) fn properties(&self, schema: &arrow::datatypes::Schema, plain: &[usize]) -> Result<WriterProperties> {
        // Every write path comes through here: arrow-rs asserts (panics) on zero sizes.
        self.validate()?;
        let compression = if self.zstd_level == 0 {
            Compression::UNCOMPRESSED
        } else {
            Compression::ZSTD(
                ZstdLevel::try_new(self.zstd_level)
                    .map_err(|e| Error::InvalidArgument(format!("zstd_level {}: {e}", self.zstd_level)))?,
            )
        };
        let mut metadata = vec![
            KeyValue::new(FILE_VERSION_KEY.to_string(), FILE_VERSION.to_string()),
            KeyValue::new(WRITER_KEY.to_string(), format!("lamina-native {}", env!("CARGO_PKG_VERSION"))),
        ];
        metadata.extend(self.extra_metadata.iter().map(|(k, v)| KeyValue::new(k.clone(), v.clone())));
        let mut builder = WriterProperties::builder()
            .set_compression(compression)
            .set_statistics_enabled(EnabledStatistics::Page)
            // Pages of at most ~8K rows: a point read (index lookup, take) decodes one page, not 20K rows.
            .set_data_page_row_count_limit(DATA_PAGE_ROWS)
            // High-cardinality columns fall back to plain pages early: a point read decodes the
            // column chunk's dictionary page, so it must stay small.
            .set_dictionary_page_size_limit(DICTIONARY_PAGE_BYTES)
            .set_max_row_group_row_count(Some(self.row_group_rows))
            .set_max_row_group_bytes(self.row_group_bytes)
            .set_key_value_metadata(Some(metadata));
        let parquet_schema = ArrowSchemaConverter::new()
            .convert(schema)
            .map_err(|e| Error::InvalidArgument(format!("schema cannot be stored as Parquet: {e}")))?;
        for column in parquet_schema.columns() {
            let numeric = matches!(
                column.physical_type(),
                PhysicalType::INT32 | PhysicalType::INT64 | PhysicalType::INT96 | PhysicalType::FLOAT | PhysicalType::DOUBLE
            );
            if numeric {
                builder = builder.set_column_dictionary_enabled(column.path().clone(), false);
            }
        }
        for &i in plain {
            let name = schema.fields().get(i).map(|f| f.name().clone());
            if let Some(name) = name.filter(|_| is_flat_bytes(schema.field(i).data_type())) {
                builder = builder.set_column_dictionary_enabled(parquet::schema::types::ColumnPath::new(vec![name]), false);
            }
        }
        Ok(builder.build())
    }
}

/// Values of a column looked at to tell whether a dictionary would pay (a few µs per file).
const DICTIONARY_SAMPLE: usize = 256;

fn is_flat_bytes(t: &DataType) -> bool {
    matches!(t, DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary)
}

/// The top-level string and binary columns of `batches` whose first values (up to 256 non-null)
/// are more than half distinct: written as plain pages, without a dictionary. A dictionary of mostly
/// distinct values (urls, ids, texts) saves nothing (zstd already takes the repeats), and it costs every
/// read: a lookup of one row decodes the chunk's whole dictionary, then copies the row out of it, a large share of a cold
/// `take` over many small files.
pub(crate) fn mostly_distinct(batches: &[RecordBatch]) -> Vec<usize> {
    let Some(first) = batches.first() else { return vec![] };
    (0..first.num_columns())
        .filter(|&i| is_flat_bytes(first.schema().field(i).data_type()))
        .filter(|&i| {
            let rows: usize = batches.iter().map(RecordBatch::num_rows).sum();
            let mut seen = std::collections::HashSet::with_capacity(DICTIONARY_SAMPLE.min(rows));
            let mut sampled = 0usize;
            for batch in batches {
                let column = batch.column(i);
                let values: Box<dyn Iterator<Item = Option<&[u8]>>> = match column.data_type() {
                    DataType::Utf8 => Box::new(column.as_string::<i32>().iter().map(|v| v.map(str::as_bytes))),
                    DataType::LargeUtf8 => Box::new(column.as_string::<i64>().iter().map(|v| v.map(str::as_bytes))),
                    DataType::Binary => Box::new(column.as_binary::<i32>().iter()),
                    DataType::LargeBinary => Box::new(column.as_binary::<i64>().iter()),
                    _ => return false,
                };
                for v in values.flatten() {
                    seen.insert(v);
                    sampled += 1;
                    if sampled == DICTIONARY_SAMPLE {
                        break;
                    }
                }
                if sampled == DICTIONARY_SAMPLE {
                    break;
                }
            }
            // Too few values to tell (a tiny file): the dictionary costs nothing there either way.
            sampled >= 16 && seen.len() * 2 > sampled
        })
        .collect()
}

/// Writes `batches` (all of `schema`) to a new Parquet file at `path` and syncs it (unless
/// `options.sync` is off: then the caller must make it durable before it is committed).
///
/// On any error the partial file is removed, so a failed write leaves nothing behind.
pub fn write_file(path: &Path, schema: SchemaRef, batches: &[RecordBatch], options: &WriteOptions) -> Result<WrittenFile> {
    let properties = options.properties(&schema, &mostly_distinct(batches))?;
    write_with(path, schema, batches, properties, options)
}

/// Writes one file per `(path, batches)`, in order, with one set of writer properties: what a bulk
/// write of many small files does in one call (the per-file cost that is left is the file's own). On
/// an error, the files this call wrote are removed too, and the error names the file that failed.
pub fn write_files(files: &[(PathBuf, Vec<RecordBatch>)], schema: SchemaRef, options: &WriteOptions) -> Result<Vec<WrittenFile>> {
    // Files of one call are usually alike: properties are built again only when the columns to
    // write without a dictionary change from one file to the next.
    let mut plain = files.first().map(|(_, b)| mostly_distinct(b)).unwrap_or_default();
    let mut properties = options.properties(&schema, &plain)?;
    let mut written = Vec::with_capacity(files.len());
    for (k, (path, batches)) in files.iter().enumerate() {
        if k > 0 {
            let now = mostly_distinct(batches);
            if now != plain {
                properties = options.properties(&schema, &now)?;
                plain = now;
            }
        }
        match write_with(path, schema.clone(), batches, properties.clone(), options) {
            Ok(w) => written.push(w),
            Err(e) => {
                for (done, _) in &files[..written.len()] {
                    let _ = std::fs::remove_file(done);
                }
                return Err(e);
            }
        }
    }
    Ok(written)
}

fn write_with(path: &Path, schema: SchemaRef, batches: &[RecordBatch], properties: WriterProperties, options: &WriteOptions) -> Result<WrittenFile> {
    if let Some(bad) = batches.iter().find(|b| b.schema().fields() != schema.fields()) {
        return Err(Error::InvalidArgument(format!(
            "batch schema {:?} differs from the file schema {:?}",
            bad.schema(),
            schema
        )));
    }
    let display = path.display().to_string();
    // Never replaces a file; only a file created here is removed on failure.
    let file = File::create_new(path).map_err(|e| Error::io(&display, e))?;
    let result = write_into(file, &display, schema, batches, properties, options.sync);
    if result.is_err() {
        let _ = std::fs::remove_file(path);
    }
    result
}

fn write_into(file: File, display: &str, schema: SchemaRef, batches: &[RecordBatch], properties: WriterProperties, sync: bool) -> Result<WrittenFile> {
    let parquet_err = |source| Error::Parquet { path: display.to_string(), source };
    let mut writer = ArrowWriter::try_new(OutputFile::new_file(file), schema, Some(properties)).map_err(parquet_err)?;
    for batch in batches {
        writer.write(batch).map_err(parquet_err)?;
    }
    // finish() writes the footer and flushes every byte through the hashing writer.
    let metadata = writer.finish().map_err(parquet_err)?;
    if sync {
        WrittenFile::synced(writer.inner(), display, &metadata)
    } else {
        WrittenFile::unsynced(writer.inner(), display, &metadata)
    }
}

impl WrittenFile {
    /// Fsyncs a just-finished file and describes it from the footer the writer returned.
    pub(crate) fn synced(out: &OutputFile, display: &str, metadata: &parquet::file::metadata::ParquetMetaData) -> Result<Self> {
        out.file().sync_all().map_err(|e| Error::io(display, e))?;
        Self::unsynced(out, display, metadata)
    }

    /// Describes a just-finished file without syncing it: its bytes may still be only in the OS's
    /// page cache, so the caller syncs it before anything refers to it.
    pub(crate) fn unsynced(out: &OutputFile, display: &str, metadata: &parquet::file::metadata::ParquetMetaData) -> Result<Self> {
        let file = out.file();
        let file_bytes = file.metadata().map_err(|e| Error::io(display, e))?.len();
        if file_bytes != out.len() {
            return Err(Error::Corrupt {
                object: display.to_string(),
                reason: format!("{file_bytes} bytes on disk, {} written", out.len()),
            });
        }
        let row_groups: Vec<RowGroupInfo> = metadata
            .row_groups()
            .iter()
            .map(|rg| RowGroupInfo { rows: rg.num_rows() as u64, bytes: rg.compressed_size() as u64 })
            .collect();
        Ok(WrittenFile {
            rows: row_groups.iter().map(|rg| rg.rows).sum(),
            file_bytes,
            row_groups,
            file_version: FILE_VERSION,
            checksum: format_checksum(out.crc()),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{Int64Array, StringArray};
    use arrow::datatypes::{DataType, Field, Schema};
    use parquet::file::reader::{FileReader, SerializedFileReader};

    use super::*;

    fn batch(start: i64, n: usize) -> RecordBatch {
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Int64, false),
            Field::new("name", DataType::Utf8, true),
        ]));
        let ids = Int64Array::from_iter_values(start..start + n as i64);
        let names = StringArray::from_iter((0..n).map(|i| if i % 3 == 0 { None } else { Some(format!("n{i}")) }));
        RecordBatch::try_new(schema, vec![Arc::new(ids), Arc::new(names)]).unwrap()
    }

    #[test]
    fn many_files_in_one_call_are_the_files_one_call_each_writes_and_a_failure_leaves_none() {
        let dir = tempfile::tempdir().unwrap();
        let schema = batch(0, 1).schema();
        let files: Vec<(PathBuf, Vec<RecordBatch>)> =
            (0..5).map(|i| (dir.path().join(format!("m{i}.parquet")), vec![batch(10 * i, 10)])).collect();
        let opts = WriteOptions { sync: false, ..Default::default() };
        let many = write_files(&files, schema.clone(), &opts).unwrap();
        for (i, ((path, batches), w)) in files.iter().zip(&many).enumerate() {
            let one = dir.path().join(format!("one{i}.parquet"));
            let single = write_file(&one, schema.clone(), batches, &opts).unwrap();
            assert_eq!((w.rows, w.file_bytes, &w.checksum), (single.rows, single.file_bytes, &single.checksum));
            assert_eq!(std::fs::read(path).unwrap(), std::fs::read(&one).unwrap());
        }
        // the fourth file's directory does not exist: the call fails naming it, and removes the three it wrote
        let mut bad: Vec<(PathBuf, Vec<RecordBatch>)> =
            (0..5).map(|i| (dir.path().join(format!("f{i}.parquet")), vec![batch(0, 10)])).collect();
        bad[3].0 = dir.path().join("missing").join("f3.parquet");
        let err = write_files(&bad, schema, &opts).unwrap_err().to_string();
        assert!(err.contains("f3.parquet"), "{err}");
        for (path, _) in &bad {
            assert!(!path.exists(), "{} left behind", path.display());
        }
    }

    #[test]
    fn mostly_distinct_strings_are_written_without_a_dictionary_and_read_back_alike() {
        let dir = tempfile::tempdir().unwrap();
        let schema = Arc::new(Schema::new(vec![
            Field::new("url", DataType::Utf8, true),
            Field::new("tag", DataType::Utf8, true),
            Field::new("blob", DataType::LargeBinary, true),
            Field::new("few", DataType::Utf8, true),
        ]));
        let n = 3000;
        let url = StringArray::from_iter((0..n).map(|i| if i % 7 == 0 { None } else { Some(format!("https://example.com/{i}")) }));
        let tag = StringArray::from_iter((0..n).map(|i| Some(format!("tag{}", i % 10))));
        let blob = arrow::array::LargeBinaryArray::from_iter((0..n).map(|i| Some(format!("b{}", i / 2).into_bytes())));
        let few = StringArray::from_iter((0..n).map(|i| if i < 10 { Some(format!("{i}")) } else { None }));
        let data = RecordBatch::try_new(schema.clone(), vec![Arc::new(url), Arc::new(tag), Arc::new(blob), Arc::new(few)]).unwrap();
        // half distinct exactly is not "more than half"; fewer than 16 values tell nothing
        assert_eq!(mostly_distinct(std::slice::from_ref(&data)), vec![0]);
        let halves = vec![data.slice(0, 1500), data.slice(1500, 1500)];
        let path = dir.path().join("a.parquet");
        write_file(&path, schema.clone(), &halves, &WriteOptions::default()).unwrap();
        let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let group = reader.metadata().row_group(0);
        let dictionary: Vec<bool> = group.columns().iter().map(|c| c.dictionary_page_offset().is_some()).collect();
        assert_eq!(dictionary, vec![false, true, true, true]);
        let back: Vec<RecordBatch> = parquet::arrow::arrow_reader::ParquetRecordBatchReader::try_new(File::open(&path).unwrap(), 10_000)
            .unwrap()
            .collect::<std::result::Result<_, _>>()
            .unwrap();
        assert_eq!(arrow::compute::concat_batches(&schema, &back).unwrap(), data);
        // many files in one call: each decides for itself
        let files = vec![
            (dir.path().join("m0.parquet"), vec![data.slice(0, 100)]),
            (dir.path().join("m1.parquet"), vec![data.slice(0, 10)]),
            (dir.path().join("m2.parquet"), vec![data.slice(0, 100)]),
        ];
        write_files(&files, schema, &WriteOptions::default()).unwrap();
        let url_dictionary: Vec<bool> = files
            .iter()
            .map(|(p, _)| SerializedFileReader::new(File::open(p).unwrap()).unwrap().metadata().row_group(0).column(0).dictionary_page_offset().is_some())
            .collect();
        assert_eq!(url_dictionary, vec![false, true, false]);
    }

    #[test]
    fn an_unsynced_write_gives_the_same_file() {
        let dir = tempfile::tempdir().unwrap();
        let batches = vec![batch(0, 3000)];
        let synced = write_file(&dir.path().join("a.parquet"), batches[0].schema(), &batches, &WriteOptions::default()).unwrap();
        let opts = WriteOptions { sync: false, ..Default::default() };
        let unsynced = write_file(&dir.path().join("b.parquet"), batches[0].schema(), &batches, &opts).unwrap();
        assert_eq!((unsynced.rows, unsynced.file_bytes, &unsynced.checksum), (synced.rows, synced.file_bytes, &synced.checksum));
        assert_eq!(std::fs::read(dir.path().join("a.parquet")).unwrap(), std::fs::read(dir.path().join("b.parquet")).unwrap());
    }

    #[test]
    fn writes_bounded_row_groups_and_lamina_metadata() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let batches = vec![batch(0, 2500), batch(2500, 2500)];
        let opts = WriteOptions { row_group_rows: 1000, ..Default::default() };
        let written = write_file(&path, batches[0].schema(), &batches, &opts).unwrap();
        assert_eq!(written.rows, 5000);
        assert_eq!(written.row_groups.iter().map(|r| r.rows).collect::<Vec<_>>(), vec![1000; 5]);
        assert_eq!(written.file_bytes, std::fs::metadata(&path).unwrap().len());

        let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        let meta = reader.metadata();
        assert_eq!(meta.file_metadata().num_rows(), 5000);
        let kv = meta.file_metadata().key_value_metadata().unwrap();
        let get = |k: &str| kv.iter().find(|e| e.key == k).and_then(|e| e.value.clone());
        assert_eq!(get(FILE_VERSION_KEY).as_deref(), Some(FILE_VERSION));
        assert!(get("ARROW:schema").is_some());
        let col = meta.row_group(0).column(0);
        assert!(matches!(col.compression(), Compression::ZSTD(_)), "{:?}", col.compression());
        assert!(col.column_index_offset().is_some(), "page index must be written");
    }

    #[test]
    fn level_zero_writes_uncompressed_pages_and_a_bad_level_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let rows = batch(0, 100);
        let path = dir.path().join("plain.parquet");
        let options = WriteOptions { zstd_level: 0, ..WriteOptions::default() };
        write_file(&path, rows.schema(), std::slice::from_ref(&rows), &options).unwrap();
        let reader = SerializedFileReader::new(File::open(&path).unwrap()).unwrap();
        for col in reader.metadata().row_group(0).columns() {
            assert!(matches!(col.compression(), Compression::UNCOMPRESSED), "{:?}", col.compression());
        }
        let bad = WriteOptions { zstd_level: 23, ..WriteOptions::default() };
        let refused = write_file(&dir.path().join("bad.parquet"), rows.schema(), &[rows], &bad);
        assert!(matches!(refused, Err(Error::InvalidArgument(_))));
    }

    #[test]
    fn checksum_is_the_crc32c_of_the_file_as_written() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let batches = vec![batch(0, 20_000)];
        let written = write_file(&path, batches[0].schema(), &batches, &WriteOptions { row_group_rows: 3000, ..Default::default() }).unwrap();
        assert_eq!(written.checksum, crate::io::checksum(&std::fs::read(&path).unwrap()));
        assert!(written.checksum.starts_with("crc32c:") && written.checksum.len() == 15, "{}", written.checksum);
    }

    #[test]
    fn refuses_existing_file_and_reserved_keys() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        std::fs::write(&path, b"taken").unwrap();
        let b = batch(0, 10);
        let err = write_file(&path, b.schema(), std::slice::from_ref(&b), &WriteOptions::default()).unwrap_err();
        assert!(matches!(err, Error::Io { .. }), "{err}");
        assert_eq!(std::fs::read(&path).unwrap(), b"taken", "an existing file is never overwritten");

        let opts = WriteOptions { extra_metadata: vec![("lamina.x".into(), "1".into())], ..Default::default() };
        let err = write_file(&dir.path().join("b.parquet"), b.schema(), &[b], &opts).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    }

    #[test]
    fn mismatched_batch_schema_is_refused_and_leaves_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a.parquet");
        let b = batch(0, 10);
        let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Int64, false)]));
        let err = write_file(&path, other, &[b], &WriteOptions::default()).unwrap_err();
        assert!(matches!(err, Error::InvalidArgument(_)));
        assert!(!path.exists());
    }
}
