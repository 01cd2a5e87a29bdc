//! Corrupt-input corpus and bounded fuzzing of the data-file, WAL and deletion readers
//! and the regression corpus of damaged files in `native/corpus/`; index
//! segments are in `index::corrupt_tests`. See `testkit`.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Date32Array, FixedSizeBinaryArray, Float64Array, Int32Array, Int64Array, ListArray,
    StringArray, StructArray, TimestampMicrosecondArray,
};
use arrow::datatypes::{DataType, Field, Fields, Int32Type, Schema, SchemaRef, TimeUnit};
use arrow::record_batch::RecordBatch;

use crate::copy::{rewrite, Action, Source};
use crate::file::writer::{write_file, WriteOptions};
use crate::testkit::{assert_clean, bit_flips, check_one, drive, footer_runs, truncations};

pub(crate) fn data_schema() -> SchemaRef {
    let inner = Fields::from(vec![Field::new("a", DataType::Int32, true), Field::new("b", DataType::Utf8, true)]);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("x", DataType::Float64, true),
        Field::new("l", DataType::List(Arc::new(Field::new("item", DataType::Int32, true))), true),
        Field::new("st", DataType::Struct(inner), true),
    ]))
}

pub(crate) fn data_batch(start: i64, n: usize) -> RecordBatch {
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let s = StringArray::from_iter(ids.iter().map(|i| (i % 5 != 0).then(|| format!("s{}", i % 97))));
    let x = Float64Array::from_iter(ids.iter().map(|i| (i % 11 != 0).then_some(*i as f64 * 0.5)));
    let l = ListArray::from_iter_primitive::<Int32Type, _, _>(
        ids.iter().map(|i| (i % 13 != 0).then(|| (0..(i % 4) as i32).map(|k| (k != 2).then_some(k + *i as i32)).collect::<Vec<_>>())),
    );
    let a: ArrayRef = Arc::new(Int32Array::from_iter(ids.iter().map(|i| Some(*i as i32 % 100))));
    let b: ArrayRef = Arc::new(StringArray::from_iter(ids.iter().map(|i| (i % 3 != 0).then(|| format!("b{}", i % 7)))));
    let DataType::Struct(fields) = data_schema().field(4).data_type().clone() else { unreachable!() };
    let st = StructArray::new(fields, vec![a, b], Some(ids.iter().map(|i| i % 9 != 0).collect()));
    RecordBatch::try_new(
        data_schema(),
        vec![Arc::new(Int64Array::from(ids)), Arc::new(s), Arc::new(x), Arc::new(l), Arc::new(st)],
    )
    .unwrap()
}

/// A valid data file of 3 row groups (and its bytes).
pub(crate) fn data_file(dir: &Path) -> Vec<u8> {
    let path = dir.join("valid.parquet");
    let opts = WriteOptions { row_group_rows: 1500, ..Default::default() };
    write_file(&path, data_schema(), &[data_batch(0, 4500)], &opts).unwrap();
    std::fs::read(&path).unwrap()
}

/// Writes `bytes` under a fresh name (the take footer cache is keyed by path and size).
pub(crate) fn stage(dir: &Path, bytes: &[u8]) -> std::path::PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = dir.join(format!("m{}.parquet", N.fetch_add(1, Ordering::Relaxed)));
    std::fs::write(&path, bytes).unwrap();
    path
}

fn data_mutants(valid: &[u8], seed: u64) -> Vec<crate::testkit::Mutant> {
    let mut m = truncations(valid, 120);
    m.extend(bit_flips(valid, 300, 4096, seed));
    m
}

/// The data-file mutants, plus a 0xff run at every footer byte (point reads are cheap: all of them).
fn take_mutants(valid: &[u8], seed: u64) -> Vec<crate::testkit::Mutant> {
    let mut m = data_mutants(valid, seed);
    m.extend(footer_runs(valid));
    m
}

/// Rewrites a staged copy of `bytes` with `actions` (one source); removes what it wrote.
pub(crate) fn rewrite_bytes(dir: &Path, bytes: &[u8], actions: &[Action]) -> crate::Result<u64> {
    let src = stage(dir, bytes);
    let out = src.with_extension("out");
    let opts = WriteOptions { row_group_rows: 1000, ..Default::default() };
    let result = rewrite(&[Source { path: src.clone(), deleted: vec![3, 1600, 4499] }], actions, data_schema(), &out, &opts)
        .or_else(|e| match e {
            // copy refuses sources with deletions: try again without (the corpus is about the bytes)
            crate::Error::InvalidArgument(_) => {
                rewrite(&[Source { path: src.clone(), deleted: vec![] }], actions, data_schema(), &out, &opts)
            }
            e => Err(e),
        });
    let _ = std::fs::remove_file(&src);
    let _ = std::fs::remove_file(&out);
    result.map(|(w, _)| w.rows)
}

#[test]
fn corrupt_data_files_fail_full_rewrite_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let actions: Vec<Action> = (0..3).map(|rg| Action::Encode { source: 0, row_group: rg }).collect();
    assert_eq!(rewrite_bytes(dir.path(), &valid, &actions).unwrap(), 4497);
    assert_clean(drive("rewrite (encode)", &valid, data_mutants(&valid, 1), |b| rewrite_bytes(dir.path(), b, &actions)));
}

#[test]
fn corrupt_data_files_fail_binary_and_hybrid_copy_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let copy: Vec<Action> = (0..3).map(|rg| Action::Copy { source: 0, row_group: rg }).collect();
    let hybrid = vec![Action::Copy { source: 0, row_group: 0 }, Action::Encode { source: 0, row_group: 1 }, Action::Copy { source: 0, row_group: 2 }];
    assert_eq!(rewrite_bytes(dir.path(), &valid, &copy).unwrap(), 4500);
    assert_clean(drive("rewrite (copy)", &valid, data_mutants(&valid, 2), |b| rewrite_bytes(dir.path(), b, &copy)));
    assert_clean(drive("rewrite (hybrid)", &valid, data_mutants(&valid, 3), |b| rewrite_bytes(dir.path(), b, &hybrid)));
}

#[test]
fn corrupt_data_files_fail_take_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let columns: Vec<String> = data_schema().fields().iter().map(|f| f.name().clone()).collect();
    let take = |b: &[u8]| {
        let path = stage(dir.path(), b);
        let r = crate::file::take::take(&path, b.len() as u64, &[0, 7, 1499, 1500, 3001, 4499], &columns);
        let _ = std::fs::remove_file(&path);
        r
    };
    assert_eq!(take(&valid).unwrap().num_rows(), 6);
    assert_clean(drive("take (by path)", &valid, take_mutants(&valid, 4), take));
}

#[test]
fn corrupt_data_files_fail_take_from_bytes_without_panicking() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let columns: Vec<String> = data_schema().fields().iter().map(|f| f.name().clone()).collect();
    // A new object name per read: the caches are keyed by name and size.
    let n = AtomicU64::new(0);
    let take = |b: &[u8]| {
        let object = format!("s3://bucket/t/data/m{}.parquet", n.fetch_add(1, Ordering::Relaxed));
        let wanted = [crate::file::take::Wanted {
            object: &object,
            source: crate::file::take::Source::Bytes(bytes::Bytes::copy_from_slice(b)),
            size: b.len() as u64,
            offsets: &[0, 7, 1499, 1500, 3001, 4499],
        }];
        crate::file::take::take_many(&wanted, &columns, 1)
    };
    assert_eq!(take(&valid).unwrap().num_rows(), 6);
    assert_clean(drive("take (from bytes)", &valid, take_mutants(&valid, 8), take));
}

/// Every file of `native/corpus/` (damaged data files that once made a reader panic, abort or
/// allocate without bound) fails every native reader with `Corrupt` naming it: `take` by path and
/// `take_many` from bytes, through the decoded-chunk cache and page by page, and a rewrite by copy
/// and by encode. Rows asked: 0, 17, 2500 and 4999, those below the rows its footer records.
#[test]
fn the_regression_corpus_fails_every_reader_with_corrupt() {
    use crate::file::take::{clear_caches, take, take_many, Source, Wanted, DEFAULT_CHUNK_CACHE_BYTES};
    let corpus = Path::new(env!("CARGO_MANIFEST_DIR")).join("corpus");
    let mut files: Vec<_> = std::fs::read_dir(&corpus)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "parquet"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no corpus files in {}", corpus.display());
    let dir = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut contained = 0usize;
    for file in &files {
        let bytes = std::fs::read(file).unwrap();
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        // What the footer says, where it parses: the columns and how many rows to ask for.
        let footer = parquet::arrow::arrow_reader::ArrowReaderMetadata::load(&bytes::Bytes::from(bytes.clone()), Default::default());
        let (columns, schema, rows) = match &footer {
            Ok(m) => (
                m.schema().fields().iter().map(|f| f.name().clone()).collect::<Vec<_>>(),
                Arc::clone(m.schema()),
                m.metadata().file_metadata().num_rows(),
            ),
            Err(_) => (vec!["id".to_string()], data_schema(), 5000),
        };
        let offsets: Vec<u32> = [0u32, 17, 2500, 4999].into_iter().filter(|&o| i64::from(o) < rows).collect();
        let path = dir.path().join(&name);
        std::fs::write(&path, &bytes).unwrap();
        let object = path.display().to_string();
        for chunk_cache in [DEFAULT_CHUNK_CACHE_BYTES, 0] {
            let how = if chunk_cache > 0 { "whole chunks" } else { "page by page" };
            failures.extend(check_one(&name, &format!("take by path, {how}"), true, Some(&object), &mut contained, || {
                clear_caches(None, Some(chunk_cache));
                take(&path, bytes.len() as u64, &offsets, &columns)
            }));
            let s3 = format!("s3://bucket/t/data/{name}");
            failures.extend(check_one(&name, &format!("take_many from bytes, {how}"), true, Some(&s3), &mut contained, || {
                clear_caches(None, Some(chunk_cache));
                let wanted = [Wanted { object: &s3, source: Source::Bytes(bytes::Bytes::from(bytes.clone())), size: bytes.len() as u64, offsets: &offsets }];
                take_many(&wanted, &columns, 1)
            }));
        }
        clear_caches(None, Some(DEFAULT_CHUNK_CACHE_BYTES));
        let groups = footer.as_ref().map(|m| m.metadata().num_row_groups()).unwrap_or(1);
        for mode in ["copy", "encode"] {
            let actions: Vec<Action> = (0..groups).map(|g| Action::parse(mode, 0, g).unwrap()).collect();
            let out = dir.path().join(format!("{name}.{mode}.out"));
            failures.extend(check_one(&name, &format!("rewrite ({mode})"), true, Some(&object), &mut contained, || {
                let opts = WriteOptions { row_group_rows: 1000, ..Default::default() };
                let r = rewrite(&[crate::copy::Source { path: path.clone(), deleted: vec![] }], &actions, Arc::clone(&schema), &out, &opts);
                let _ = std::fs::remove_file(&out);
                r.map(|(w, _)| w.rows)
            }));
        }
    }
    assert_clean(failures);
}

pub(crate) fn wal_schema() -> SchemaRef {
    Arc::new(Schema::new(vec![
        Field::new("k", DataType::Int64, false),
        Field::new("s", DataType::Utf8, true),
        Field::new("bin", DataType::LargeBinary, true),
        Field::new("flag", DataType::Boolean, true),
        Field::new("x", DataType::Float64, true),
        Field::new("fx", DataType::FixedSizeBinary(3), true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, None), true),
    ]))
}

/// Encoded WAL rows and each row's end offset.
pub(crate) fn wal_rows() -> (Vec<u8>, Vec<u64>) {
    let n = 300i64;
    let r = 0..n;
    let batch = RecordBatch::try_new(
        wal_schema(),
        vec![
            Arc::new(Int64Array::from_iter_values(r.clone())),
            Arc::new(StringArray::from_iter(r.clone().map(|i| (i % 4 != 0).then(|| format!("v{i}"))))),
            Arc::new(arrow::array::LargeBinaryArray::from_iter(r.clone().map(|i| (i % 3 != 0).then(|| vec![i as u8; (i % 5) as usize])))),
            Arc::new(BooleanArray::from_iter(r.clone().map(|i| (i % 6 != 0).then_some(i % 2 == 0)))),
            Arc::new(Float64Array::from_iter(r.clone().map(|i| (i % 7 != 0).then_some(i as f64)))),
            Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(r.clone().map(|i| (i % 8 != 0).then_some([i as u8; 3])), 3).unwrap()),
            Arc::new(Date32Array::from_iter(r.clone().map(|i| (i % 9 != 0).then_some(i as i32)))),
            Arc::new(TimestampMicrosecondArray::from_iter(r.clone().map(|i| (i % 10 != 0).then_some(i * 1000)))),
        ],
    )
    .unwrap();
    let deletes = BooleanArray::from_iter(r.map(|i| Some(i % 17 == 0)));
    crate::wal::encode(&batch, Some(&deletes), &[0]).unwrap()
}

#[test]
fn corrupt_wal_rows_fail_decode_and_split_without_panicking() {
    let (valid, ends) = wal_rows();
    let mut mutants = truncations(&valid, 200);
    // A prefix ending exactly at a row end is a valid, shorter run of rows: every other cut must fail.
    mutants.iter_mut().for_each(|m| m.must_fail = m.bytes.len() as u64 != 0 && !ends.contains(&(m.bytes.len() as u64)));
    mutants.extend(bit_flips(&valid, 300, valid.len(), 5));
    assert_eq!(crate::wal::decode(&valid, wal_schema(), "w").unwrap().batch.num_rows(), 300);
    let decode = |b: &[u8]| crate::wal::decode(b, wal_schema(), "wal/segment");
    assert_clean(drive("wal decode", &valid, mutants, decode));
    let mutants = bit_flips(&valid, 300, valid.len(), 6);
    assert_clean(drive("wal split", &valid, mutants, |b| crate::wal::split(b, wal_schema(), 0, "wal/segment")));
}

#[test]
fn corrupt_deletion_files_fail_decode_without_panicking() {
    // Sparse offsets (array containers), a dense run (bitmap container), and a high key.
    let offsets: Vec<u32> = (0..5000).map(|i| i * 37).chain(200_000..210_000).chain([4_000_000_000]).collect();
    let valid = crate::deletion::encode(offsets.iter().copied());
    assert_eq!(crate::deletion::decode_offsets(&valid, "d", None).unwrap().len(), offsets.len());
    let mut mutants = truncations(&valid, 300);
    mutants.extend(bit_flips(&valid, 300, 64, 7));
    assert_clean(drive("deletion decode", &valid, mutants, |b| crate::deletion::decode_offsets(b, "_deletions/x.bin", Some(4_000_000_001))));
    let small = crate::deletion::encode([1u32, 5, 9]);
    let err = crate::deletion::decode_offsets(&small, "_deletions/y.bin", Some(9)).unwrap_err();
    assert!(matches!(err, crate::Error::Corrupt { .. }) && err.to_string().contains("_deletions/y.bin"), "{err}");
}

/// A footer whose counts all agree on a row group of 2^36 rows (its row count, its leaves' value
/// counts, the file's total: nothing to catch by comparing them) over the same 1,500 rows of pages:
/// reads decode in batches bounded by `file::batch_rows`, never in one batch of the footer's count,
/// and fail with `Corrupt` when the pages run out.
#[test]
fn a_footer_whose_counts_agree_on_a_huge_row_group_is_read_within_the_allocation_cap() {
    use parquet::file::metadata::{FileMetaData, PageIndexPolicy, ParquetMetaData, ParquetMetaDataReader, ParquetMetaDataWriter};
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let meta = ParquetMetaDataReader::new()
        .with_page_index_policy(PageIndexPolicy::Skip)
        .parse_and_finish(&bytes::Bytes::copy_from_slice(&valid))
        .unwrap();
    let huge = 1i64 << 36;
    let groups: Vec<_> = meta
        .row_groups()
        .iter()
        .enumerate()
        .map(|(g, rg)| {
            if g != 1 {
                return rg.clone();
            }
            let extra = huge - rg.num_rows();
            let columns = rg.columns().iter().map(|c| c.clone().into_builder().set_num_values(c.num_values() + extra).build().unwrap()).collect();
            rg.clone().into_builder().set_num_rows(huge).set_column_metadata(columns).build().unwrap()
        })
        .collect();
    let total = groups.iter().map(|g| g.num_rows()).sum();
    let fm = meta.file_metadata();
    let file = FileMetaData::new(fm.version(), total, fm.created_by().map(String::from), fm.key_value_metadata().cloned(), fm.schema_descr_ptr(), fm.column_orders().cloned());
    let lying = ParquetMetaData::new(file, groups);
    let footer = u32::from_le_bytes(valid[valid.len() - 8..valid.len() - 4].try_into().unwrap()) as usize;
    let mut bytes = valid[..valid.len() - 8 - footer].to_vec();
    ParquetMetaDataWriter::new(&mut bytes, &lying).finish().unwrap();
    let path = stage(dir.path(), &bytes);
    let object = path.display().to_string();
    let columns: Vec<String> = data_schema().fields().iter().map(|f| f.name().clone()).collect();
    let mut failures = Vec::new();
    let mut contained = 0usize;
    // Offsets inside the huge row group (its first rows, then rows its pages do not hold) and after it.
    let offsets = [0u32, 1500, 3_000_000_000];
    for chunk_cache in [crate::file::take::DEFAULT_CHUNK_CACHE_BYTES, 0] {
        failures.extend(check_one("huge row group", &format!("take, chunk cache {chunk_cache}"), true, Some(&object), &mut contained, || {
            crate::file::take::clear_caches(None, Some(chunk_cache));
            crate::file::take::take(&path, bytes.len() as u64, &offsets, &columns)
        }));
    }
    crate::file::take::clear_caches(None, Some(crate::file::take::DEFAULT_CHUNK_CACHE_BYTES));
    let encode: Vec<Action> = (0..3).map(|rg| Action::Encode { source: 0, row_group: rg }).collect();
    failures.extend(check_one("huge row group", "rewrite (encode)", true, Some(&object), &mut contained, || {
        let out = path.with_extension("out");
        let opts = WriteOptions { row_group_rows: 1000, ..Default::default() };
        let r = rewrite(&[Source { path: path.clone(), deleted: vec![] }], &encode, data_schema(), &out, &opts);
        let _ = std::fs::remove_file(&out);
        r.map(|(w, _)| w.rows)
    }));
    assert_clean(failures);
}
