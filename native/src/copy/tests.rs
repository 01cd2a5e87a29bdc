use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::sync::Arc;

use arrow::array::{Int64Array, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::file::statistics::Statistics;

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
fn a_rewrite_keeps_its_sources_choice_of_dictionary() {
    let dir = tempfile::tempdir().unwrap();
    let has_dictionary = |p: &Path| SerializedFileReader::new(File::open(p).unwrap()).unwrap().metadata().row_group(0).column(1).dictionary_page_offset().is_some();
    // distinct strings: written plain, and encoded plain again
    let a = write(dir.path(), "a.parquet", 0, 300, 100);
    assert!(!has_dictionary(&a));
    let out = dir.path().join("out.parquet");
    let actions: Vec<Action> = (0..3).map(|rg| Action::Encode { source: 0, row_group: rg }).collect();
    rewrite(&[src(&a, vec![1])], &actions, schema(), &out, &WriteOptions::default()).unwrap();
    assert!(!has_dictionary(&out));
    // repeated strings: a dictionary, in the sources and the output
    let s = StringArray::from_iter((0..300).map(|i| Some(format!("v{}", i % 5))));
    let repeated = RecordBatch::try_new(schema(), vec![Arc::new(Int64Array::from_iter_values(0..300)), Arc::new(s)]).unwrap();
    let r = dir.path().join("r.parquet");
    write_file(&r, schema(), &[repeated], &WriteOptions { row_group_rows: 100, ..Default::default() }).unwrap();
    assert!(has_dictionary(&r));
    let out2 = dir.path().join("out2.parquet");
    rewrite(&[src(&r, vec![1])], &actions, schema(), &out2, &WriteOptions::default()).unwrap();
    assert!(has_dictionary(&out2));
    assert_eq!(ids(&out2), (0..300).filter(|&i| i != 1).collect::<Vec<_>>());
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
    assert!(piece_selection(&[5, 50], 10, 10, 0, 10).is_none());
    let sel = piece_selection(&[0, 3, 9, 12], 0, 10, 0, 7).unwrap();
    assert_eq!(sel.row_count(), 7);
    assert_eq!(selected(&sel), vec![1, 2, 4, 5, 6, 7, 8]);
}

/// The physical rows a selection keeps.
fn selected(sel: &RowSelection) -> Vec<usize> {
    let mut rows = Vec::new();
    let mut at = 0;
    for s in sel.iter() {
        if !s.skip {
            rows.extend(at..at + s.row_count);
        }
        at += s.row_count;
    }
    rows
}

#[test]
fn selection_of_a_window_of_live_rows() {
    // Rows 0..10 of a row group starting at file row 20; file rows 21, 24, 25 deleted:
    // live physical rows 0, 2, 3, 6, 7, 8, 9.
    let deleted = [3, 21, 24, 25, 40];
    assert_eq!(selected(&piece_selection(&deleted, 20, 10, 0, 3).unwrap()), vec![0, 2, 3]);
    assert_eq!(selected(&piece_selection(&deleted, 20, 10, 3, 4).unwrap()), vec![6, 7, 8, 9]);
    assert_eq!(selected(&piece_selection(&deleted, 20, 10, 2, 2).unwrap()), vec![3, 6]);
    // No deletions: a window is one range, the whole row group no selection at all.
    assert_eq!(selected(&piece_selection(&[], 0, 10, 4, 3).unwrap()), vec![4, 5, 6]);
    assert!(piece_selection(&[], 0, 10, 0, 10).is_none());
}

#[test]
fn units_cut_row_groups_across_sources_and_stop_at_copies() {
    let e = |source, row_group| Action::Encode { source, row_group };
    let actions = [e(0, 0), e(0, 1), e(1, 0), Action::Copy { source: 2, row_group: 0 }, e(3, 0), e(3, 1)];
    let live = [300, 0, 500, 1000, 250, 100];
    let p = |source, row_group, skip, take| Piece { source, row_group, skip, take };
    assert_eq!(
        plan_units(&actions, &live, &[false; 6], 400),
        vec![
            Unit::Encode(vec![p(0, 0, 0, 300), p(1, 0, 0, 100)]),
            Unit::Encode(vec![p(1, 0, 100, 400)]),
            Unit::Copy { source: 2, row_group: 0 },
            Unit::Encode(vec![p(3, 0, 0, 250), p(3, 1, 0, 100)]),
        ]
    );
    assert_eq!(plan_units(&[e(0, 0)], &[0], &[true], 400), vec![], "a row group with no live row makes nothing");
    // Once an output row group is half full, a row group that would straddle its end starts the
    // next one: 2 (not whole) because everything before it is whole, 4 because it is whole itself.
    let actions = [e(0, 0), e(1, 0), e(2, 0), e(3, 0), e(4, 0)];
    assert_eq!(
        plan_units(&actions, &[150, 150, 150, 150, 150], &[true, true, false, true, true], 400),
        vec![
            Unit::Encode(vec![p(0, 0, 0, 150), p(1, 0, 0, 150)]),
            Unit::Encode(vec![p(2, 0, 0, 150), p(3, 0, 0, 150)]),
            Unit::Encode(vec![p(4, 0, 0, 150)]),
        ]
    );
    // Neither whole nor after whole ones: cut where the row group is full.
    assert_eq!(
        plan_units(&actions[..3], &[150, 150, 150], &[false, true, false], 400),
        vec![Unit::Encode(vec![p(0, 0, 0, 150), p(1, 0, 0, 150), p(2, 0, 0, 100)]), Unit::Encode(vec![p(2, 0, 100, 50)])]
    );
    // Below half full, a whole row group is cut as any other.
    assert_eq!(
        plan_units(&[e(0, 0), e(1, 0)], &[150, 300], &[true, true], 400),
        vec![Unit::Encode(vec![p(0, 0, 0, 150), p(1, 0, 0, 250)]), Unit::Encode(vec![p(1, 0, 250, 50)])]
    );
}

#[test]
fn row_groups_cut_inside_a_source_row_group_with_deletions_keep_every_live_row() {
    // 3 sources of 1,000 rows in row groups of 500; deletions on both sides of the cuts at 700 and 1,400 live rows.
    let dir = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..3).map(|i| write_noisy(dir.path(), &format!("{i}.parquet"), i * 1000, 1000, 500)).collect();
    let deleted: Vec<Vec<u32>> = vec![(0..1000).filter(|o| o % 7 == 3).collect(), vec![0, 199, 200, 201, 999], vec![]];
    let sources: Vec<Source> = paths.iter().zip(&deleted).map(|(p, d)| src(p, d.clone())).collect();
    let actions: Vec<Action> = (0..3).flat_map(|s| (0..2).map(move |rg| Action::Encode { source: s, row_group: rg })).collect();
    let out = dir.path().join("out.parquet");
    let opts = WriteOptions { row_group_rows: 700, ..Default::default() };
    let (written, stats) = rewrite(&sources, &actions, schema(), &out, &opts).unwrap();
    let expected: Vec<i64> = (0..3000i64)
        .filter(|&r| !deleted[(r / 1000) as usize].contains(&((r % 1000) as u32)))
        .collect();
    assert_eq!(written.rows, expected.len() as u64);
    let (ids, strings) = values(&out);
    assert_eq!(ids, expected);
    assert_eq!(strings, expected.iter().map(|&r| noisy(r)).collect::<Vec<_>>());
    let sizes: Vec<u64> = written.row_groups.iter().map(|r| r.rows).collect();
    let n = expected.len() as u64; // 2,852: four full row groups and a short last one
    assert_eq!(sizes, vec![700, 700, 700, 700, n - 2800]);
    assert_eq!(stats.row_groups_encoded, 5);
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

/// A hybrid rewrite copies row groups of a source on one thread while
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

/// A schema with every kind of leaf a splice meets: a required int, a nullable float, a
/// dictionary string, a fixed-size list of floats and a struct mixing a string and an int.
fn rich_schema() -> SchemaRef {
    use arrow::datatypes::Fields;
    let item = Arc::new(Field::new("item", DataType::Float32, true));
    let st = Fields::from(vec![Field::new("r", DataType::Utf8, true), Field::new("c", DataType::Int32, true)]);
    Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("v", DataType::Float64, true),
        Field::new("s", DataType::Utf8, true),
        Field::new("e", DataType::FixedSizeList(item, 4), true),
        Field::new("st", DataType::Struct(st), true),
    ]))
}

fn rich_batch(start: i64, n: usize) -> RecordBatch {
    use arrow::array::{FixedSizeListArray, Float32Array, Float64Array, Int32Array, StructArray};
    let ids: Vec<i64> = (start..start + n as i64).collect();
    let v = Float64Array::from_iter(ids.iter().map(|&i| (i % 9 != 0).then(|| if i % 13 == 0 { -0.0 } else { (i as f64).sin() * 1e3 })));
    let s = StringArray::from_iter(ids.iter().map(|&i| (i % 5 != 0).then(|| format!("host-{}", i % 40))));
    let items = Float32Array::from_iter(ids.iter().flat_map(|&i| (0..4).map(move |k| (k != 2 || i % 3 != 0).then_some((i * 4 + k) as f32 / 7.0))));
    let nulls = arrow::buffer::NullBuffer::from(ids.iter().map(|&i| i % 17 != 0).collect::<Vec<_>>());
    let Some(DataType::FixedSizeList(item, _)) = rich_schema().field_with_name("e").ok().map(|f| f.data_type().clone()) else { unreachable!() };
    let e = FixedSizeListArray::new(item, 4, Arc::new(items), Some(nulls));
    let DataType::Struct(fields) = rich_schema().field(4).data_type().clone() else { unreachable!() };
    let r = StringArray::from_iter(ids.iter().map(|&i| Some(["eu", "us", "ap"][(i % 3) as usize])));
    let c = Int32Array::from_iter(ids.iter().map(|&i| (i % 4 != 0).then_some((i % 1000) as i32)));
    let st_nulls = arrow::buffer::NullBuffer::from(ids.iter().map(|&i| i % 11 != 0).collect::<Vec<_>>());
    let st = StructArray::new(fields, vec![Arc::new(r), Arc::new(c)], Some(st_nulls));
    RecordBatch::try_new(rich_schema(), vec![Arc::new(Int64Array::from(ids)), Arc::new(v), Arc::new(s), Arc::new(e), Arc::new(st)]).unwrap()
}

fn read_all(path: &Path, selection: Option<RowSelection>) -> RecordBatch {
    let options = ArrowReaderOptions::new().with_page_index_policy(PageIndexPolicy::Required);
    let mut builder = ParquetRecordBatchReaderBuilder::try_new_with_options(File::open(path).unwrap(), options).unwrap();
    if let Some(sel) = selection {
        builder = builder.with_row_selection(sel);
    }
    let batches: Vec<RecordBatch> = builder.build().unwrap().map(|b| b.unwrap()).collect();
    arrow::compute::concat_batches(&rich_schema(), &batches).unwrap()
}

/// Whole source row groups of fixed-width leaves are spliced page for page into
/// full-size row groups; everything else (strings, a row group with deleted rows) is re-encoded.
#[test]
fn full_rewrite_splices_the_pages_of_whole_numeric_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriteOptions { row_group_rows: 3000, ..Default::default() };
    let paths: Vec<PathBuf> = (0..6)
        .map(|i| {
            let path = dir.path().join(format!("{i}.parquet"));
            write_file(&path, rich_schema(), &[rich_batch(i * 3000, 3000)], &opts).unwrap();
            path
        })
        .collect();
    let deleted = [5u32, 1000];
    let sources: Vec<Source> = paths.iter().enumerate().map(|(i, p)| src(p, if i == 2 { deleted.to_vec() } else { vec![] })).collect();
    let actions: Vec<Action> = (0..6).map(|s| Action::Encode { source: s, row_group: 0 }).collect();
    let out = dir.path().join("out.parquet");
    let (written, stats) = rewrite(&sources, &actions, rich_schema(), &out, &WriteOptions { row_group_rows: 7000, ..Default::default() }).unwrap();

    // Row groups end on source boundaries once half full: [0, 1], [2 (two rows deleted), 3], [4, 5].
    assert_eq!(written.row_groups.iter().map(|r| r.rows).collect::<Vec<_>>(), vec![6000, 5998, 6000]);
    // Splice candidates: id, v, e.item, st.c of row groups 0 and 2; row group 1 holds deleted rows.
    assert_eq!(stats.chunks_spliced, 8);

    // Every value of every live row, in order, through the page index.
    let all = rich_batch(0, 18_000);
    let keep: Vec<u32> = (0..18_000u32).filter(|r| !(6000..9000).contains(r) || !deleted.contains(&(r - 6000))).collect();
    let expected = arrow::compute::take_record_batch(&all, &arrow::array::UInt32Array::from(keep)).unwrap();
    assert_eq!(read_all(&out, None), expected);
    // A selection inside spliced pages (row group 2, second source) reads through the rebuilt offset index.
    let sel = RowSelection::from_consecutive_ranges([15_000..15_100, 17_990..17_998].into_iter(), 17_998);
    let want = arrow::compute::concat_batches(&rich_schema(), &[expected.slice(15_000, 100), expected.slice(17_990, 8)]).unwrap();
    assert_eq!(read_all(&out, Some(sel)), want);

    // Spliced chunks are the source chunks' bytes, one after the other.
    for (leaf, spliced) in [(0, true), (1, true), (2, false), (3, true), (4, false), (5, true)] {
        let joined = [chunk_bytes(&paths[4], 0, leaf), chunk_bytes(&paths[5], 0, leaf)].concat();
        assert_eq!(chunk_bytes(&out, 2, leaf) == joined, spliced, "leaf {leaf}");
    }
    // Chunk statistics merged: exact min, max and null count of the rows of each row group.
    let reader = SerializedFileReader::new(File::open(&out).unwrap()).unwrap();
    let mut first = 0usize;
    for rg in 0..3 {
        let meta = reader.metadata().row_group(rg);
        let rows = meta.num_rows() as usize;
        let part = expected.slice(first, rows);
        let v = part.column(1).as_any().downcast_ref::<arrow::array::Float64Array>().unwrap();
        let present: Vec<f64> = v.iter().flatten().collect();
        match meta.column(1).statistics().unwrap() {
            Statistics::Double(s) => {
                let min = present.iter().copied().fold(f64::INFINITY, f64::min);
                let max = present.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                assert_eq!((*s.min_opt().unwrap(), *s.max_opt().unwrap()), (min, max), "row group {rg}");
                assert_eq!(s.null_count_opt(), Some(arrow::array::Array::null_count(v) as u64));
            }
            other => panic!("{other:?}"),
        }
        match meta.column(0).statistics().unwrap() {
            Statistics::Int64(s) => {
                let ids = part.column(0).as_any().downcast_ref::<Int64Array>().unwrap();
                assert_eq!((*s.min_opt().unwrap(), *s.max_opt().unwrap()), (ids.value(0), ids.value(rows - 1)));
            }
            other => panic!("{other:?}"),
        }
        first += rows;
    }
}

/// Pages too small to carry into a compacted file (a file of tiny pages reads slowly forever) are re-encoded, not spliced.
#[test]
fn small_pages_are_re_encoded_not_spliced() {
    let dir = tempfile::tempdir().unwrap();
    let opts = WriteOptions { row_group_rows: 1000, ..Default::default() };
    let paths: Vec<PathBuf> = (0..4)
        .map(|i| {
            let path = dir.path().join(format!("{i}.parquet"));
            write_file(&path, rich_schema(), &[rich_batch(i * 1000, 1000)], &opts).unwrap();
            path
        })
        .collect();
    let sources: Vec<Source> = paths.iter().map(|p| src(p, vec![])).collect();
    let actions: Vec<Action> = (0..4).map(|s| Action::Encode { source: s, row_group: 0 }).collect();
    let out = dir.path().join("out.parquet");
    let (written, stats) = rewrite(&sources, &actions, rich_schema(), &out, &WriteOptions::default()).unwrap();
    assert_eq!(stats.chunks_spliced, 0);
    assert_eq!(written.row_groups.len(), 1);
    assert_eq!(read_all(&out, None), rich_batch(0, 4000));
}

/// Strings of chunks that fell back from dictionary to plain pages are decoded as plain strings
/// (a dictionary read would re-hash them), next to a spliced id column; every value survives.
#[test]
fn strings_of_plain_fallback_chunks_next_to_spliced_pages_keep_every_value() {
    let dir = tempfile::tempdir().unwrap();
    // ~55-byte distinct strings: 3,000 of them overflow the 128 KiB dictionary page, so pages fall back to plain.
    let paths: Vec<PathBuf> = (0..4).map(|i| write_noisy(dir.path(), &format!("{i}.parquet"), i * 3000, 3000, 3000)).collect();
    let reader = SerializedFileReader::new(File::open(&paths[0]).unwrap()).unwrap();
    let mask = reader.metadata().row_group(0).column(1).page_encoding_stats_mask().cloned().unwrap();
    assert!(mask.is_set(parquet::basic::Encoding::PLAIN), "the source must hold plain fallback pages");
    let sources: Vec<Source> = paths.iter().map(|p| src(p, vec![])).collect();
    let actions: Vec<Action> = (0..4).map(|s| Action::Encode { source: s, row_group: 0 }).collect();
    let out = dir.path().join("out.parquet");
    let (written, stats) = rewrite(&sources, &actions, schema(), &out, &WriteOptions::default()).unwrap();
    assert_eq!(written.rows, 12_000);
    assert_eq!(stats.chunks_spliced, 1, "the id column of the one output row group");
    let (ids, strings) = values(&out);
    assert_eq!(ids, (0..12_000).collect::<Vec<_>>());
    assert_eq!(strings, (0..12_000).map(noisy).collect::<Vec<_>>());
}
