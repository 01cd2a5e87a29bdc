use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::file::reader::{FileReader, SerializedFileReader};

use super::*;
use crate::file::writer::write_file;

fn schema() -> SchemaRef {
    Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("s", DataType::Utf8, true)]))
}

fn batch(start: i64, n: usize) -> RecordBatch {
    let ids = Int64Array::from_iter_values(start..start + n as i64);
    let s = StringArray::from_iter((0..n).map(|i| if i % 4 == 0 { None } else { Some(format!("v{}", start + i as i64)) }));
    RecordBatch::try_new(schema(), vec![Arc::new(ids), Arc::new(s)]).unwrap()
}

fn write(dir: &Path, name: &str, start: i64, n: usize, rg: usize) -> PathBuf {
    let path = dir.join(name);
    let opts = WriteOptions { row_group_rows: rg, ..Default::default() };
    write_file(&path, schema(), &[batch(start, n)], &opts).unwrap();
    path
}

fn ids(path: &Path) -> Vec<i64> {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap().build().unwrap();
    reader
        .flat_map(|b| {
            let b = b.unwrap();
            b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().to_vec()
        })
        .collect()
}

fn chunk_bytes(path: &Path, rg: usize, col: usize) -> Vec<u8> {
    let reader = SerializedFileReader::new(File::open(path).unwrap()).unwrap();
    let meta = reader.metadata().row_group(rg).column(col).clone();
    let start = meta.dictionary_page_offset().unwrap_or(meta.data_page_offset());
    let mut f = File::open(path).unwrap();
    f.seek(SeekFrom::Start(start as u64)).unwrap();
    let mut buf = vec![0; meta.compressed_size() as usize];
    f.read_exact(&mut buf).unwrap();
    buf
}

fn src(path: &Path, deleted: Vec<u32>) -> Source {
    Source { path: path.to_path_buf(), deleted }
}

#[test]
fn binary_copy_keeps_chunks_byte_identical() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.parquet", 0, 3000, 1000);
    let b = write(dir.path(), "b.parquet", 3000, 2000, 1000);
    let out = dir.path().join("out.parquet");
    let actions: Vec<Action> = (0..3)
        .map(|rg| Action::Copy { source: 0, row_group: rg })
        .chain((0..2).map(|rg| Action::Copy { source: 1, row_group: rg }))
        .collect();
    let (written, stats) = rewrite(&[src(&a, vec![]), src(&b, vec![])], &actions, schema(), &out, &WriteOptions::default()).unwrap();
    assert_eq!(written.rows, 5000);
    assert_eq!(stats.row_groups_copied, 5);
    assert_eq!(stats.row_groups_encoded, 0);
    assert_eq!(ids(&out), (0..5000).collect::<Vec<_>>());
    for col in 0..2 {
        assert_eq!(chunk_bytes(&out, 0, col), chunk_bytes(&a, 0, col));
        assert_eq!(chunk_bytes(&out, 4, col), chunk_bytes(&b, 1, col));
    }
    let reader = SerializedFileReader::new(File::open(&out).unwrap()).unwrap();
    assert!(reader.metadata().row_group(3).column(0).offset_index_offset().is_some(), "page index rebuilt");
    let kv = reader.metadata().file_metadata().key_value_metadata().unwrap().clone();
    assert!(kv.iter().any(|e| e.key == FILE_VERSION_KEY));
    assert!(kv.iter().any(|e| e.key == "ARROW:schema"));
}

#[test]
fn full_rewrite_drops_deleted_rows_and_cuts_full_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.parquet", 0, 300, 100);
    let b = write(dir.path(), "b.parquet", 300, 300, 100);
    let out = dir.path().join("out.parquet");
    let actions: Vec<Action> = (0..3)
        .map(|rg| Action::Encode { source: 0, row_group: rg })
        .chain((0..3).map(|rg| Action::Encode { source: 1, row_group: rg }))
        .collect();
    let opts = WriteOptions { row_group_rows: 250, ..Default::default() };
    let (written, stats) = rewrite(&[src(&a, vec![0, 99, 100, 299]), src(&b, vec![5])], &actions, schema(), &out, &opts).unwrap();
    let expected: Vec<i64> = (0..600).filter(|i| ![0, 99, 100, 299, 305].contains(i)).collect();
    assert_eq!(ids(&out), expected);
    assert_eq!(written.row_groups.iter().map(|r| r.rows).collect::<Vec<_>>(), vec![250, 250, 95]);
    assert_eq!(stats.rows_encoded, 595);
}

#[test]
fn hybrid_copies_large_and_merges_runs_of_small_row_groups() {
    let dir = tempfile::tempdir().unwrap();
    let big = write(dir.path(), "big.parquet", 0, 2000, 2000);
    let small1 = write(dir.path(), "s1.parquet", 2000, 30, 10);
    let small2 = write(dir.path(), "s2.parquet", 2030, 20, 10);
    let out = dir.path().join("out.parquet");
    let mut actions = vec![Action::Copy { source: 0, row_group: 0 }];
    actions.extend((0..3).map(|rg| Action::Encode { source: 1, row_group: rg }));
    actions.extend((0..2).map(|rg| Action::Encode { source: 2, row_group: rg }));
    let sources = [src(&big, vec![]), src(&small1, vec![]), src(&small2, vec![])];
    let (written, stats) = rewrite(&sources, &actions, schema(), &out, &WriteOptions::default()).unwrap();
    assert_eq!(ids(&out), (0..2050).collect::<Vec<_>>());
    assert_eq!(written.row_groups.iter().map(|r| r.rows).collect::<Vec<_>>(), vec![2000, 50]);
    assert_eq!((stats.row_groups_copied, stats.row_groups_encoded), (1, 1));
    assert_eq!(chunk_bytes(&out, 0, 1), chunk_bytes(&big, 0, 1));
}

#[test]
fn copy_refuses_a_row_group_holding_a_deleted_row() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.parquet", 0, 10, 10);
    let out = dir.path().join("out.parquet");
    let err = rewrite(&[src(&a, vec![1])], &[Action::Copy { source: 0, row_group: 0 }], schema(), &out, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(err.to_string().contains("row group 0") && err.to_string().contains("a.parquet"), "{err}");
    assert!(!out.exists());
    // The last row of one row group (row 1999 of 0..3000 in groups of 1000): still refused.
    let b = write(dir.path(), "b.parquet", 0, 3000, 1000);
    let actions = [Action::Copy { source: 0, row_group: 0 }, Action::Copy { source: 0, row_group: 1 }];
    let err = rewrite(&[src(&b, vec![1999])], &actions, schema(), &out, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(ref m) if m.contains("row group 1") && m.contains("1 deleted")), "{err}");
    assert!(!out.exists());
}

#[test]
fn copy_of_clean_row_groups_of_a_source_with_deletions_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.parquet", 0, 4000, 1000);
    let out = dir.path().join("out.parquet");
    // Deleted rows in row groups 1 and 3 only (first and last rows of them); 0 and 2 are copied.
    let deleted = vec![1000, 1500, 3998, 3999];
    let actions = [
        Action::Copy { source: 0, row_group: 0 },
        Action::Encode { source: 0, row_group: 1 },
        Action::Copy { source: 0, row_group: 2 },
        Action::Encode { source: 0, row_group: 3 },
    ];
    let (written, stats) = rewrite(&[src(&a, deleted.clone())], &actions, schema(), &out, &WriteOptions::default()).unwrap();
    let want: Vec<i64> = (0..4000).filter(|i| !deleted.contains(&(*i as u32))).collect();
    assert_eq!(ids(&out), want);
    assert_eq!(written.rows, 3996);
    assert_eq!((stats.row_groups_copied, stats.row_groups_encoded), (2, 2));
    assert_eq!(written.row_groups.iter().map(|r| r.rows).collect::<Vec<_>>(), vec![1000, 998, 1000, 998]);
    for col in 0..2 {
        assert_eq!(chunk_bytes(&out, 0, col), chunk_bytes(&a, 0, col));
        assert_eq!(chunk_bytes(&out, 2, col), chunk_bytes(&a, 2, col));
    }
}

#[test]
fn corrupt_source_names_the_file_and_leaves_no_output() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.parquet", 0, 10, 10);
    let bytes = std::fs::read(&a).unwrap();
    std::fs::write(&a, &bytes[..bytes.len() / 2]).unwrap();
    let out = dir.path().join("out.parquet");
    let err = rewrite(&[src(&a, vec![])], &[Action::Encode { source: 0, row_group: 0 }], schema(), &out, &WriteOptions::default()).unwrap_err();
    assert!(matches!(err, Error::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("a.parquet"), "{err}");
    assert!(!out.exists());
}

#[test]
fn wrong_schema_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.parquet", 0, 10, 10);
    let other = Arc::new(Schema::new(vec![Field::new("x", DataType::Int32, true)]));
    let err = rewrite(&[src(&a, vec![])], &[Action::Encode { source: 0, row_group: 0 }], other, &dir.path().join("o"), &WriteOptions::default()).unwrap_err();
    assert!(err.to_string().contains("the table has"), "{err}");
}

#[test]
fn bad_options_are_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let a = write(dir.path(), "a.parquet", 0, 10, 10);
    let out = dir.path().join("out.parquet");
    let opts = WriteOptions { row_group_rows: 0, ..Default::default() };
    let err = rewrite(&[src(&a, vec![])], &[Action::Encode { source: 0, row_group: 0 }], schema(), &out, &opts).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)), "{err}");
    assert!(!out.exists());
}

#[test]
fn selection_skips_deleted_rows() {
    assert!(selection(&[5, 50], 10, 10).is_none());
    let sel = selection(&[0, 3, 9, 12], 0, 10).unwrap();
    assert_eq!(sel.row_count(), 7);
}

/// All values of both columns of a file, in order.
fn values(path: &Path) -> (Vec<i64>, Vec<Option<String>>) {
    let reader = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap().build().unwrap();
    let (mut ids, mut s) = (Vec::new(), Vec::new());
    for b in reader {
        let b = b.unwrap();
        ids.extend(b.column(0).as_any().downcast_ref::<Int64Array>().unwrap().values().iter().copied());
        s.extend(b.column(1).as_any().downcast_ref::<StringArray>().unwrap().iter().map(|v| v.map(str::to_string)));
    }
    (ids, s)
}

/// A string that barely compresses (so column chunks span many reads), null every 7th row.
fn noisy(i: i64) -> Option<String> {
    let mix = |x: u64| {
        let x = (x ^ (x >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
        let x = (x ^ (x >> 27)).wrapping_mul(0x94d049bb133111eb);
        x ^ (x >> 31)
    };
    (i % 7 != 0).then(|| format!("{i}:{:016x}{:016x}{:016x}", mix(i as u64), mix(!(i as u64)), mix(i as u64 ^ 0x5555)))
}

fn write_noisy(dir: &Path, name: &str, start: i64, n: usize, rg: usize) -> PathBuf {
    let path = dir.join(name);
    let ids = Int64Array::from_iter_values(start..start + n as i64);
    let s = StringArray::from_iter((start..start + n as i64).map(noisy));
    let b = RecordBatch::try_new(schema(), vec![Arc::new(ids), Arc::new(s)]).unwrap();
    write_file(&path, schema(), &[b], &WriteOptions { row_group_rows: rg, ..Default::default() }).unwrap();
    path
}

/// Issue 16, defect 0: a hybrid rewrite copies row groups of a source on one thread while
/// another decodes other row groups of that same source. Both once went through one shared
/// file offset, so either read could land elsewhere in the file: failed splices, undecodable
/// pages, or chunks copied from the wrong place into a file that then read back wrong.
#[test]
fn hybrid_copy_and_decode_of_one_source_at_once_keep_every_value() {
    let dir = tempfile::tempdir().unwrap();
    // One source in many row groups, copied and re-encoded alternately; a second one mostly copied.
    let a = write_noisy(dir.path(), "a.parquet", 0, 40 * 4000, 4000);
    let b = write_noisy(dir.path(), "b.parquet", 160_000, 10 * 4000, 4000);
    let actions: Vec<Action> = (0..40)
        .map(|rg| if rg % 2 == 0 { Action::Copy { source: 0, row_group: rg } } else { Action::Encode { source: 0, row_group: rg } })
        .chain((0..10).map(|rg| if rg % 3 == 0 { Action::Encode { source: 1, row_group: rg } } else { Action::Copy { source: 1, row_group: rg } }))
        .collect();
    let want_ids: Vec<i64> = (0..200_000).collect();
    let want_s: Vec<Option<String>> = (0..200_000).map(noisy).collect();
    let sources = [src(&a, vec![]), src(&b, vec![])];
    let opts = WriteOptions { row_group_rows: 4000, ..Default::default() };
    for round in 0..6 {
        let out = dir.path().join(format!("out{round}.parquet"));
        let (written, stats) = rewrite(&sources, &actions, schema(), &out, &opts)
            .unwrap_or_else(|e| panic!("round {round}: a healthy source failed to rewrite: {e}"));
        assert_eq!((written.rows, stats.row_groups_copied), (200_000, 26), "round {round}");
        let (ids, s) = values(&out);
        assert!(ids == want_ids, "round {round}: ids differ");
        assert_eq!(written.checksum, crate::io::checksum(&std::fs::read(&out).unwrap()), "round {round}: checksum of the output");
        assert!(s == want_s, "round {round}: strings differ");
        for (out_rg, src_rg) in [(0, 0), (2, 2), (38, 38)] {
            assert!(chunk_bytes(&out, out_rg, 1) == chunk_bytes(&a, src_rg, 1), "round {round}: copied chunk differs");
        }
    }
}

#[test]
fn actions_parse_by_name() {
    assert_eq!(Action::parse("copy", 1, 2).unwrap(), Action::Copy { source: 1, row_group: 2 });
    assert_eq!(Action::parse("encode", 0, 5).unwrap(), Action::Encode { source: 0, row_group: 5 });
    let err = Action::parse("splice", 0, 0).unwrap_err();
    assert!(err.to_string().contains("\"copy\" or \"encode\""), "{err}");
}
