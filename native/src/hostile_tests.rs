//! Property tests of the native decoders against hostile files: for data files
//! (point reads through `take` and `take_many` from a local file or from an object's bytes, the
//! decoded-chunk cache, rewrite in copy and encode mode), deletion bitmaps and WAL rows, proptest
//! draws random truncation points, random multi-bit flips, and huge values (u32::MAX, i32::MAX,
//! i64::MAX, u64::MAX, negative varints) written where the format keeps a length, an offset or a
//! count. Every case must return `Err(Corrupt)` naming the object or valid data; never panic (not
//! even one a guard catches, in Lamina's code), never allocate over `testkit::MAX_ALLOCATION` at
//! once, never take over `LAMINA_FUZZ_CASE_SECONDS`. Index segments: `index::corrupt_tests`.
//!
//! Cases per property: `LAMINA_PROPTEST_CASES` (default 256: a few seconds in all); seed:
//! `LAMINA_FUZZ_SEED` (default 16, so `cargo test` is repeatable). A longer run:
//! `LAMINA_PROPTEST_CASES=5000 LAMINA_FUZZ_SEED=$RANDOM cargo test hostile`.

use std::sync::Arc;

use bytes::Bytes;
use parquet::file::metadata::{PageIndexPolicy, ParquetMetaDataReader};
use proptest::prelude::*;
use proptest::test_runner::{Config, RngSeed, TestCaseError, TestRunner};

use crate::copy::Action;
use crate::corrupt_tests::{data_file, data_schema, rewrite_bytes, stage, wal_rows, wal_schema};
use crate::file::take::{clear_caches, take, take_many, Source, Wanted};
use crate::testkit::{check_one, fuzz_seed};

/// How a stored length is encoded where it lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Width {
    U16,
    U32,
    U64,
    /// A Thrift compact-protocol varint (zigzag for signed fields): replaced by a longer or shorter one.
    Varint,
}

/// A place in a valid file where a length, an offset or a count is stored.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Site {
    pub at: usize,
    pub width: Width,
}

/// Values a hostile writer puts where a length belongs.
const HUGE: [u64; 8] = [u64::MAX, i64::MAX as u64, u32::MAX as u64, i32::MAX as u64, 0x8000_0000, 1 << 40, 0, 1];

/// One damage to a valid file.
#[derive(Clone, Debug)]
pub(crate) enum Hostile {
    /// Cut at this fraction (of 2^16) of the length.
    Truncate(u16),
    /// Flip these bits: (position as a fraction of 2^32, from the end when `tail`; bit).
    Flips(Vec<(u32, bool, u8)>),
    /// A huge value at length site `site` (index mod the number of sites).
    Huge { site: usize, value: usize },
}

pub(crate) fn hostile() -> impl Strategy<Value = Vec<Hostile>> {
    let one = prop_oneof![
        any::<u16>().prop_map(Hostile::Truncate),
        prop::collection::vec((any::<u32>(), prop::bool::weighted(0.25), 0u8..8), 1..6).prop_map(Hostile::Flips),
        (any::<usize>(), 0..HUGE.len() + 2).prop_map(|(site, value)| Hostile::Huge { site, value }),
    ];
    prop::collection::vec(one, 1..3)
}

fn varint(mut v: u64) -> Vec<u8> {
    let mut out = Vec::new();
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return out;
        }
        out.push(b | 0x80);
    }
}

fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

/// Applies `damage` to `valid`; whether the result can only fail to read (a pure truncation).
pub(crate) fn apply(valid: &[u8], sites: &[Site], damage: &[Hostile]) -> (Vec<u8>, bool) {
    let mut b = valid.to_vec();
    let mut only_cut = true;
    for d in damage {
        match d {
            Hostile::Truncate(f) => b.truncate(b.len() * *f as usize >> 16),
            Hostile::Flips(flips) => {
                only_cut = false;
                for &(at, tail, bit) in flips {
                    if b.is_empty() {
                        break;
                    }
                    let region = if tail { b.len().min(2048) } else { b.len() };
                    let off = (region as u64 * at as u64 >> 32) as usize;
                    let pos = if tail { b.len() - 1 - off } else { off };
                    b[pos] ^= 1 << bit;
                }
            }
            Hostile::Huge { site, value } => {
                only_cut = false;
                if sites.is_empty() {
                    continue;
                }
                let s = sites[site % sites.len()];
                // Two more values: just past the file, and a negative one (sign-extended).
                let v = match value {
                    v if *v < HUGE.len() => HUGE[*v],
                    v if *v == HUGE.len() => valid.len() as u64 + 1,
                    _ => u64::MAX - 7,
                };
                put(&mut b, s, v);
            }
        }
    }
    (b, only_cut)
}

fn put(b: &mut Vec<u8>, s: Site, v: u64) {
    let le = v.to_le_bytes();
    let n = match s.width {
        Width::U16 => 2,
        Width::U32 => 4,
        Width::U64 => 8,
        Width::Varint => {
            if s.at >= b.len() {
                return;
            }
            let old = b[s.at..].iter().take(10).position(|x| x & 0x80 == 0).map_or(1, |p| p + 1);
            let end = (s.at + old).min(b.len());
            b.splice(s.at..end, varint(zigzag(v as i64)));
            return;
        }
    };
    for (k, byte) in le.iter().take(n).enumerate() {
        if let Some(slot) = b.get_mut(s.at + k) {
            *slot = *byte;
        }
    }
}

/// Every place in `region` of `bytes` where one of `values` is stored with `width`.
pub(crate) fn sites_of(bytes: &[u8], region: std::ops::Range<usize>, values: &[u64], width: Width) -> Vec<Site> {
    let mut needles: Vec<Vec<u8>> = values
        .iter()
        .filter(|v| **v >= 64) // one-byte encodings match everywhere
        .map(|&v| match width {
            Width::U16 => (v as u16).to_le_bytes().to_vec(),
            Width::U32 => (v as u32).to_le_bytes().to_vec(),
            Width::U64 => v.to_le_bytes().to_vec(),
            Width::Varint => varint(zigzag(v as i64)),
        })
        .collect();
    needles.sort();
    needles.dedup();
    let hay = &bytes[region.start.min(bytes.len())..region.end.min(bytes.len())];
    let mut out = Vec::new();
    for n in &needles {
        for (i, w) in hay.windows(n.len()).enumerate() {
            if w == n.as_slice() {
                out.push(Site { at: region.start + i, width });
            }
        }
    }
    out.sort_by_key(|s| s.at);
    out
}

/// Where a Lamina data file keeps lengths and offsets: the footer length, the sizes in each page
/// header (found at the offsets the offset index lists), and every chunk and page offset, size and
/// count the footer and the page indexes record (as Thrift varints).
pub(crate) fn parquet_sites(bytes: &[u8]) -> Vec<Site> {
    let len = bytes.len();
    let mut sites = vec![Site { at: len - 8, width: Width::U32 }];
    let meta = ParquetMetaDataReader::new()
        .with_offset_index_policy(PageIndexPolicy::Required)
        .parse_and_finish(&Bytes::copy_from_slice(bytes))
        .unwrap();
    let mut values = Vec::new();
    let mut pages = Vec::new();
    let mut chunks_end = 0u64;
    for (g, rg) in meta.row_groups().iter().enumerate() {
        values.extend([rg.num_rows() as u64, rg.total_byte_size() as u64]);
        for (c, col) in rg.columns().iter().enumerate() {
            let (start, size) = col.byte_range();
            chunks_end = chunks_end.max(start + size);
            values.extend([col.data_page_offset() as u64, col.compressed_size() as u64, col.uncompressed_size() as u64, col.num_values() as u64]);
            values.extend(col.dictionary_page_offset().map(|o| o as u64));
            values.extend(col.offset_index_offset().map(|o| o as u64));
            values.extend(col.offset_index_length().map(|o| o as u64));
            pages.extend(col.dictionary_page_offset().map(|o| o as usize));
            if let Some(index) = meta.page_index_for_row_group(g).offset_index(c) {
                for p in &index.page_locations {
                    values.extend([p.offset as u64, p.compressed_page_size as u64, p.first_row_index as u64]);
                    pages.push(p.offset as usize);
                }
            }
        }
    }
    // Page headers: field 1 (type), 2 (uncompressed size), 3 (compressed size), each `0x15 varint`.
    for p in pages {
        let mut at = p;
        for field in 0..3 {
            if bytes.get(at) != Some(&0x15) {
                break;
            }
            at += 1;
            if field > 0 {
                sites.push(Site { at, width: Width::Varint });
            }
            at += bytes[at..].iter().take(10).position(|x| x & 0x80 == 0).map_or(1, |q| q + 1);
        }
    }
    sites.extend(sites_of(bytes, chunks_end as usize..len - 8, &values, Width::Varint));
    sites
}

fn config() -> Config {
    let cases = std::env::var("LAMINA_PROPTEST_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(256);
    Config { cases, failure_persistence: None, rng_seed: RngSeed::Fixed(fuzz_seed()), ..Config::default() }
}

/// Runs the property `read` over hostile variants of `valid`: every failure `check_one` finds fails the case.
pub(crate) fn property<T>(name: &str, valid: &[u8], sites: &[Site], object: Option<&str>, must_fail_cuts: bool, read: impl Fn(&[u8]) -> crate::Result<T>) {
    let contained = std::cell::Cell::new(0usize);
    let outcomes = std::cell::Cell::new((0usize, 0usize));
    let mut runner = TestRunner::new(config());
    let result = runner.run(&hostile(), |damage| {
        let (bytes, cut) = apply(valid, sites, &damage);
        let must_fail = must_fail_cuts && cut && bytes.len() < valid.len();
        let how = format!("{damage:?} ({} of {} bytes)", bytes.len(), valid.len());
        let mut n = contained.get();
        let failures = check_one(name, &how, must_fail, object, &mut n, || {
            let r = read(&bytes);
            outcomes.set((outcomes.get().0 + r.is_ok() as usize, outcomes.get().1 + r.is_err() as usize));
            r
        });
        contained.set(n);
        if failures.is_empty() {
            Ok(())
        } else {
            Err(TestCaseError::fail(failures.join("\n")))
        }
    });
    let contained = contained.get();
    eprintln!("{name}: {} cases read back, {} refused", outcomes.get().0, outcomes.get().1);
    if contained > 0 {
        eprintln!("{name}: {contained} panics inside parquet/arrow were caught and reported as corrupt files");
    }
    if let Err(e) = result {
        panic!("{name}: {e}");
    }
}

const OBJECT: &str = "s3://bucket/table/data/hostile.parquet";

fn columns() -> Vec<String> {
    data_schema().fields().iter().map(|f| f.name().clone()).collect()
}

const OFFSETS: [u32; 6] = [0, 7, 1499, 1500, 3001, 4499];

fn take_bytes(object: &str, bytes: &[u8], offsets: &[u32], columns: &[String]) -> crate::Result<arrow::record_batch::RecordBatch> {
    let wanted = [Wanted { object, source: Source::Bytes(Bytes::copy_from_slice(bytes)), size: bytes.len() as u64, offsets }];
    take_many(&wanted, columns, 1)
}

#[test]
fn hostile_data_files_fail_take_many_from_bytes_with_corrupt_naming_the_object() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let sites = parquet_sites(&valid);
    assert!(sites.len() > 20, "the length sites of a data file are found ({})", sites.len());
    let columns = columns();
    assert_eq!(take_bytes(OBJECT, &valid, &OFFSETS, &columns).unwrap().num_rows(), 6);
    // Caches emptied before each case: a corrupt file is read from its bytes, never from a cache.
    property("take_many (bytes, all columns)", &valid, &sites, Some(OBJECT), true, |b| {
        clear_caches(None, None);
        take_bytes(OBJECT, b, &OFFSETS, &columns)
    });
    // Chunks too large for the decoded-chunk cache: the page-by-page path.
    property("take_many (bytes, page by page)", &valid, &sites, Some(OBJECT), true, |b| {
        clear_caches(None, Some(0));
        let r = take_bytes(OBJECT, b, &OFFSETS, &columns);
        clear_caches(None, Some(crate::file::take::DEFAULT_CHUNK_CACHE_BYTES));
        r
    });
}

#[test]
fn hostile_data_files_fail_take_from_local_files_and_take_many_on_threads() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let sites = parquet_sites(&valid);
    let columns = columns();
    // One path for every case, the caches emptied before each (they are keyed by path and size).
    let path = dir.path().join("hostile.parquet");
    let object = path.display().to_string();
    property("take (local file)", &valid, &sites, Some(&object), true, |b| {
        clear_caches(None, None);
        std::fs::write(&path, b).unwrap();
        take(&path, b.len() as u64, &[3, 1600, 4000], &columns[..2])
    });
    // A hostile file among good ones, decoded on three threads: the error names the hostile one.
    let good = stage(dir.path(), &valid);
    let good_name = good.display().to_string();
    property("take_many (3 files, 3 threads)", &valid, &sites, Some(OBJECT), false, |b| {
        clear_caches(None, None);
        let wanted = [
            Wanted { object: &good_name, source: Source::File(good.clone()), size: valid.len() as u64, offsets: &[1, 2] },
            Wanted { object: OBJECT, source: Source::Bytes(Bytes::copy_from_slice(b)), size: b.len() as u64, offsets: &OFFSETS },
            Wanted { object: &good_name, source: Source::File(good.clone()), size: valid.len() as u64, offsets: &[4000] },
        ];
        take_many(&wanted, &columns, 3)
    });
}

/// The caches are keyed by the object's location and size: a hostile object under a new name is
/// never answered from what a good object of the same size left in the caches, and its own failed
/// read leaves nothing that makes a second read succeed. Each case reads the hostile bytes three
/// times: with the caches holding the valid file (same size, another name), again (its own leftovers
/// cached), and from cold caches; the three outcomes must agree.
#[test]
fn hostile_data_files_never_hit_the_cache_entries_of_another_object() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let sites = parquet_sites(&valid);
    let columns = columns();
    let n = std::sync::atomic::AtomicU64::new(0);
    let outcome = |r: crate::Result<arrow::record_batch::RecordBatch>| r.map_err(|e| e.to_string());
    property("take_many cache isolation", &valid, &sites, Some("new"), true, |b| {
        let object = format!("s3://bucket/table/data/new-{}.parquet", n.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        clear_caches(None, None);
        take_bytes("s3://bucket/table/data/good.parquet", &valid, &OFFSETS, &columns).unwrap();
        let warm = outcome(take_bytes(&object, b, &OFFSETS, &columns));
        let again = outcome(take_bytes(&object, b, &OFFSETS, &columns));
        clear_caches(None, None);
        let cold = outcome(take_bytes(&object, b, &OFFSETS, &columns));
        if warm != cold || again != cold {
            return Err(crate::Error::InvalidArgument(format!("outcomes differ: with a good file cached {warm:?}, again {again:?}, cold {cold:?}")));
        }
        // An error must be Corrupt naming the new object: checked here, reported under one name.
        match take_bytes(&object, b, &OFFSETS, &columns) {
            Err(crate::Error::Corrupt { object: o, reason }) if o == object => Err(crate::Error::Corrupt { object: "new".into(), reason }),
            Err(e) => Err(crate::Error::InvalidArgument(format!("not Corrupt naming {object}: {e:?}"))),
            Ok(b) => Ok(b),
        }
    });
}

#[test]
fn hostile_data_files_fail_rewrite_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let valid = data_file(dir.path());
    let sites = parquet_sites(&valid);
    let encode: Vec<Action> = (0..3).map(|rg| Action::Encode { source: 0, row_group: rg }).collect();
    let copy: Vec<Action> = (0..3).map(|rg| Action::Copy { source: 0, row_group: rg }).collect();
    let encode_all = encode.clone();
    let hybrid = vec![Action::Copy { source: 0, row_group: 0 }, Action::Encode { source: 0, row_group: 1 }, Action::Copy { source: 0, row_group: 2 }];
    // One source path for every case (and its name in the error).
    let src = dir.path().join("source.parquet");
    let out = dir.path().join("out.parquet");
    let object = src.display().to_string();
    let opts = crate::file::writer::WriteOptions { row_group_rows: 1000, ..Default::default() };
    for (name, actions) in [("rewrite (encode)", encode), ("rewrite (copy)", copy), ("rewrite (hybrid)", hybrid)] {
        property(name, &valid, &sites, Some(&object), true, |b| {
            std::fs::write(&src, b).unwrap();
            let run = |actions: &[Action]| {
                let r = crate::copy::rewrite(&[crate::copy::Source { path: src.clone(), deleted: vec![] }], actions, data_schema(), &out, &opts);
                let _ = std::fs::remove_file(&out);
                r.map(|(w, _)| w.rows)
            };
            match run(&actions) {
                // A source whose chunks cannot be copied as they are (another schema or metadata) is
                // refused with InvalidArgument naming it, and the compaction worker encodes it instead.
                Err(crate::Error::InvalidArgument(m)) if m.contains(&object) && m.contains("copied") => run(&encode_all),
                other => other,
            }
        });
    }
    let _ = rewrite_bytes; // the corpus's helper (with deletions) is exercised by corrupt_tests
}

/// Where WAL rows keep lengths: each string/binary value's u32 length, and each field's i32 header.
fn wal_sites(rows: &[u8]) -> Vec<Site> {
    let widths: Vec<Option<usize>> = wal_schema()
        .fields()
        .iter()
        .map(|f| match f.data_type() {
            arrow::datatypes::DataType::Utf8 | arrow::datatypes::DataType::LargeBinary => None,
            arrow::datatypes::DataType::Boolean => Some(1),
            arrow::datatypes::DataType::FixedSizeBinary(w) => Some(*w as usize),
            arrow::datatypes::DataType::Date32 => Some(4),
            _ => Some(8),
        })
        .collect();
    let i32_at = |p: usize| i32::from_le_bytes(rows[p..p + 4].try_into().unwrap());
    let mut sites = Vec::new();
    let mut p = 0;
    while p < rows.len() {
        sites.push(Site { at: p, width: Width::U32 });
        let h = i32_at(p);
        p += 4;
        if h >= 0 {
            match widths[h as usize] {
                Some(w) => p += w,
                None => {
                    sites.push(Site { at: p, width: Width::U32 });
                    p += 4 + i32_at(p) as usize;
                }
            }
        }
    }
    sites
}

#[test]
fn hostile_wal_rows_fail_decode_and_split() {
    let (valid, ends) = wal_rows();
    let sites = wal_sites(&valid);
    assert!(sites.len() > 1000);
    let object = "_wal/0/0000000001/segment.d";
    // A cut at a row end is a valid, shorter run of rows: cuts are not required to fail here.
    let decode = |b: &[u8]| {
        let cut_at_row_end = b.len() < valid.len() && (b.is_empty() || ends.contains(&(b.len() as u64)));
        crate::wal::decode(b, wal_schema(), object).map(|d| (d.batch.num_rows(), cut_at_row_end))
    };
    property("wal decode", &valid, &sites, Some(object), false, decode);
    property("wal split", &valid, &sites, Some(object), false, |b| crate::wal::split(b, wal_schema(), 0, object));
}

/// Where a portable roaring bitmap keeps counts: the container count, each container's
/// cardinality, each container's offset.
fn roaring_sites(bytes: &[u8]) -> Vec<Site> {
    let n = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    let mut sites = vec![Site { at: 0, width: Width::U32 }, Site { at: 4, width: Width::U32 }];
    sites.extend((0..n).map(|i| Site { at: 8 + 4 * i + 2, width: Width::U16 }));
    sites.extend((0..n).map(|i| Site { at: 8 + 4 * n + 4 * i, width: Width::U32 }));
    sites
}

#[test]
fn hostile_deletion_files_fail_decode() {
    let offsets: Vec<u32> = (0..5000).map(|i| i * 37).chain(200_000..210_000).chain([4_000_000_000]).collect();
    let valid = crate::deletion::encode(offsets.iter().copied());
    assert_eq!(u32::from_le_bytes(valid[..4].try_into().unwrap()), 12346, "written without run containers");
    let sites = roaring_sites(&valid);
    let object = "_deletions/7-hostile.bin";
    property("deletion decode", &valid, &sites, Some(object), true, |b| crate::deletion::decode_offsets(b, object, Some(4_000_000_001)));
    // Bitmaps with run containers (12347): written by other roaring writers, read the same way.
    let mut runs = roaring::RoaringBitmap::new();
    runs.insert_range(0..100_000);
    runs.insert_range(1_000_000..1_000_010);
    runs.optimize();
    let mut with_runs = Vec::new();
    runs.serialize_into(&mut with_runs).unwrap();
    assert_eq!(u16::from_le_bytes(with_runs[..2].try_into().unwrap()), 12347, "serialized with run containers");
    let sites: Vec<Site> = (0..with_runs.len().min(64)).step_by(2).map(|at| Site { at, width: Width::U16 }).collect();
    property("deletion decode (runs)", &with_runs, &sites, Some(object), true, |b| crate::deletion::decode_offsets(b, object, Some(2_000_000)));
}

#[test]
fn the_hostile_strategies_damage_where_they_say() {
    let valid: Vec<u8> = (0..100u8).collect();
    let sites = [Site { at: 10, width: Width::U32 }, Site { at: 20, width: Width::Varint }];
    let (b, cut) = apply(&valid, &sites, &[Hostile::Huge { site: 0, value: 2 }]);
    assert_eq!((&b[10..14], cut), (&[0xff, 0xff, 0xff, 0xff][..], false));
    let (b, _) = apply(&valid, &sites, &[Hostile::Huge { site: 1, value: 1 }]);
    assert_eq!(&b[20..30], &varint(zigzag(i64::MAX))[..]);
    assert_eq!(b.len(), 100 - 1 + 10);
    let (b, cut) = apply(&valid, &sites, &[Hostile::Truncate(1 << 15)]);
    assert_eq!((b.len(), cut), (50, true));
    let (b, _) = apply(&valid, &sites, &[Hostile::Flips(vec![(0, true, 0), (0, false, 7)])]);
    assert_eq!((b[99], b[0]), (99 ^ 1, 0x80));
    assert_eq!(sites_of(&[0, 0xe8, 0x07, 5, 0xe8, 0x07], 0..6, &[500], Width::Varint).len(), 2);
    let _ = Arc::new(0);
}

/// Found by `hostile_data_files_fail_rewrite_in_every_mode`: a source with fewer row groups than the
/// manifest records (the plan names row groups from the manifest) was `InvalidArgument`, which the
/// compaction worker does not report as a corrupt file.
#[test]
fn a_source_with_fewer_row_groups_than_planned_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("two.parquet");
    let opts = crate::file::writer::WriteOptions { row_group_rows: 1500, ..Default::default() };
    crate::file::writer::write_file(&src, data_schema(), &[crate::corrupt_tests::data_batch(0, 3000)], &opts).unwrap();
    let actions: Vec<Action> = (0..3).map(|rg| Action::Encode { source: 0, row_group: rg }).collect();
    let err = crate::copy::rewrite(&[crate::copy::Source { path: src.clone(), deleted: vec![] }], &actions, data_schema(), &dir.path().join("o"), &opts)
        .unwrap_err();
    assert!(matches!(&err, crate::Error::Corrupt { object, .. } if *object == src.display().to_string()), "{err:?}");
}
