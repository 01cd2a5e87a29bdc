use std::sync::Arc;

use arrow::array::{ArrayRef, DictionaryArray, Float64Array, Int64Array, StringArray};
use arrow::datatypes::Int32Type;

use super::fts::{decode_postings, Analyzer};
use super::keys::{encode_f64, encode_i64, Key, KeyColumn, KeyRange};
use super::*;

fn col(a: ArrayRef) -> KeyColumn {
    KeyColumn::new(a).unwrap()
}

fn ints(v: Vec<Option<i64>>) -> KeyColumn {
    col(Arc::new(Int64Array::from(v)))
}

fn strings(v: Vec<Option<&str>>) -> KeyColumn {
    col(Arc::new(StringArray::from(v)))
}

/// Runs a range query against a whole segment held in memory.
fn query(bytes: &[u8], ranges: &[KeyRange]) -> Vec<u64> {
    let r = SegmentReader::from_bytes(bytes, "mem").unwrap();
    let blocks: Vec<(u32, &[u8])> = r
        .blocks_for_ranges(ranges)
        .unwrap()
        .into_iter()
        .map(|(id, b)| (id, &bytes[b.offset as usize..(b.offset + b.len as u64) as usize]))
        .collect();
    r.lookup(ranges, &blocks).unwrap()
}

fn brute(values: &[(u32, Vec<Option<i64>>)], pred: impl Fn(i64) -> bool) -> Vec<u64> {
    let mut out: Vec<u64> = values
        .iter()
        .flat_map(|(o, v)| v.iter().enumerate().filter(|(_, x)| x.is_some_and(&pred)).map(move |(i, _)| local_address(*o, i as u32)))
        .collect();
    out.sort_unstable();
    out
}

fn pseudo_random(n: usize, modulo: i64, seed: u64) -> Vec<Option<i64>> {
    let mut x = seed;
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let v = ((x >> 33) as i64) % modulo - modulo / 2;
            (v % 17 != 0).then_some(v)
        })
        .collect()
}

fn range(lo: Option<(i64, bool)>, hi: Option<(i64, bool)>) -> KeyRange {
    KeyRange { lo: lo.map(|(v, i)| (Key::Num(encode_i64(v)), i)), hi: hi.map(|(v, i)| (Key::Num(encode_i64(v)), i)) }
}

#[test]
fn btree_and_bitmap_match_brute_force_on_random_ints() {
    let data: Vec<(u32, Vec<Option<i64>>)> = vec![(0, pseudo_random(5000, 200, 1)), (2, pseudo_random(3000, 200, 2))];
    let options = BuildOptions { page_entries: 64, ..Default::default() };
    for kind in [Kind::BTree, Kind::Bitmap] {
        let inputs = data.iter().map(|(o, v)| (*o, ints(v.clone()))).collect();
        let built = build(kind, inputs, &options).unwrap();
        assert_eq!(built.ordinals, 3);
        for (lo, hi) in [(Some((-5, true)), Some((-5, true))), (Some((-30, false)), Some((40, true))), (None, Some((-90, false))), (Some((99, true)), None), (None, None)] {
            let expect = brute(&data, |x| {
                lo.is_none_or(|(l, inc)| if inc { x >= l } else { x > l }) && hi.is_none_or(|(h, inc)| if inc { x <= h } else { x < h })
            });
            assert_eq!(query(&built.bytes, &[range(lo, hi)]), expect, "{kind:?} {lo:?} {hi:?}");
        }
        // IN: several points, one repeated and one absent
        let pts: Vec<KeyRange> = [3i64, 3, -7, 10_000].iter().map(|v| KeyRange::point(Key::Num(encode_i64(*v)))).collect();
        assert_eq!(query(&built.bytes, &pts), brute(&data, |x| x == 3 || x == -7));
    }
}

#[test]
fn floats_order_and_skip_nan() {
    let a: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN), Some(-0.0), Some(-2.0), None, Some(0.0)]));
    let built = build(Kind::BTree, vec![(0, col(a))], &BuildOptions::default()).unwrap();
    assert_eq!(built.rows, 4);
    let zero = KeyRange::point(Key::Num(encode_f64(0.0).unwrap()));
    assert_eq!(query(&built.bytes, &[zero]), vec![2, 5]);
    let neg = KeyRange { lo: None, hi: Some((Key::Num(encode_f64(0.0).unwrap()), false)) };
    assert_eq!(query(&built.bytes, &[neg]), vec![3]);
}

#[test]
fn string_keys_plain_and_dictionary() {
    let plain = strings(vec![Some("b"), Some("a"), None, Some("c"), Some("b"), Some("")]);
    let dict: DictionaryArray<Int32Type> = vec![Some("b"), Some("a"), None, Some("c"), Some("b"), Some("")].into_iter().collect();
    for kind in [Kind::BTree, Kind::Bitmap] {
        for c in [plain_copy(&plain), col(Arc::new(dict.clone()))] {
            let built = build(kind, vec![(1, c)], &BuildOptions { page_entries: 2, ..Default::default() }).unwrap();
            let b = |s: &str| Key::Bytes(s.as_bytes().to_vec());
            let base = 1u64 << 32;
            assert_eq!(query(&built.bytes, &[KeyRange::point(b("b"))]), vec![base, base + 4]);
            assert_eq!(query(&built.bytes, &[KeyRange::point(b(""))]), vec![base + 5]);
            let r = KeyRange { lo: Some((b("a"), false)), hi: Some((b("c"), true)) };
            assert_eq!(query(&built.bytes, &[r]), vec![base, base + 3, base + 4]);
        }
    }
}

fn plain_copy(c: &KeyColumn) -> KeyColumn {
    let mut v: Vec<Option<String>> = vec![None; c.len()];
    c.for_each_bytes(|i, b| v[i as usize] = Some(String::from_utf8(b.to_vec()).unwrap()));
    col(Arc::new(StringArray::from(v)))
}

#[test]
fn merge_equals_one_build() {
    let parts: Vec<(u32, Vec<Option<i64>>)> = (0..4).map(|o| (o, pseudo_random(1000, 50, o as u64 + 7))).collect();
    let options = BuildOptions { page_entries: 100, ..Default::default() };
    for kind in [Kind::BTree, Kind::Bitmap] {
        let whole = build(kind, parts.iter().map(|(o, v)| (*o, ints(v.clone()))).collect(), &options).unwrap();
        let pieces: Vec<Built> = parts.chunks(2).map(|c| build(kind, c.iter().map(|(o, v)| (*o, ints(v.clone()))).collect(), &options).unwrap()).collect();
        let inputs: Vec<(&[u8], String)> = pieces.iter().map(|p| (p.bytes.as_slice(), "p".to_string())).collect();
        let merged = merge(kind, &inputs, &options).unwrap();
        assert_eq!(merged.bytes, whole.bytes, "{kind:?}");
    }
    let docs = |o: u32| strings(vec![Some("the cat sat"), None, Some(if o % 2 == 0 { "Cats and dogs" } else { "the the dog" })]);
    let options = BuildOptions::default();
    let whole = build(Kind::Fts, (0..4).map(|o| (o, docs(o))).collect(), &options).unwrap();
    let a = build(Kind::Fts, (0..2).map(|o| (o, docs(o))).collect(), &options).unwrap();
    let b = build(Kind::Fts, (2..4).map(|o| (o, docs(o))).collect(), &options).unwrap();
    let merged = merge(Kind::Fts, &[(a.bytes.as_slice(), "a".into()), (b.bytes.as_slice(), "b".into())], &options).unwrap();
    assert_eq!(merged.bytes, whole.bytes);
}

#[test]
fn fts_postings_lengths_and_bm25() {
    let docs = strings(vec![Some("The cat; the CAT!"), Some("dog"), None, Some(""), Some("a cat and a dog")]);
    let built = build(Kind::Fts, vec![(0, docs)], &BuildOptions::default()).unwrap();
    let r = SegmentReader::from_bytes(&built.bytes, "mem").unwrap();
    let dir = r.fts().unwrap();
    assert_eq!((dir.docs, dir.total_len), (4, 4 + 1 + 5));
    let id = dir.term_block("cat").unwrap();
    let b = dir.block(id).unwrap();
    let (addrs, tfs) = decode_postings(&built.bytes[b.offset as usize..][..b.len as usize], "mem").unwrap();
    assert_eq!((addrs, tfs), (vec![0, 4], vec![2, 1]));
    assert!(dir.term_block("Cat").is_none());
    let lens = [4u32, 5];
    let top = fts::bm25_top_k(&[fts::TermPostings { addrs: &[0, 4], tfs: &[2, 1], lengths: &lens }], 4, 2.5, 1).unwrap();
    assert_eq!(top.len(), 1);
    assert_eq!(top[0].0, 0);
}

#[test]
fn stemming_is_optional() {
    let plain = Analyzer::default();
    let stem = Analyzer { stem: true, ..Default::default() };
    assert_eq!(plain.tokenize("Running runners RUN"), vec!["running", "runners", "run"]);
    assert_eq!(stem.tokenize("Running runs"), vec!["run", "run"]);
    assert_eq!(plain.query_terms("a b a"), vec!["a", "b"]);
}

#[test]
fn corrupt_segments_are_refused_with_the_name() {
    let built = build(Kind::BTree, vec![(0, ints((0..1000).map(Some).collect()))], &BuildOptions { page_entries: 10, ..Default::default() }).unwrap();
    let err = SegmentReader::from_bytes(&built.bytes[..built.bytes.len() - 3], "_indices/x/seg.lidx").unwrap_err();
    assert!(err.to_string().contains("_indices/x/seg.lidx"), "{err}");
    let r = SegmentReader::from_bytes(&built.bytes, "seg").unwrap();
    let ranges = [range(Some((5, true)), Some((5, true)))];
    let (id, b) = r.blocks_for_ranges(&ranges).unwrap()[0];
    let mut page = built.bytes[b.offset as usize..][..b.len as usize].to_vec();
    page[7] ^= 0xff;
    let err = r.lookup(&ranges, &[(id, &page)]).unwrap_err();
    assert!(matches!(err, crate::Error::Corrupt { .. }), "{err}");
    let mut bad = built.bytes.clone();
    let n = bad.len();
    bad[n - 40] ^= 1; // inside the directory
    assert!(SegmentReader::from_bytes(&bad, "seg").is_err());
}

#[test]
fn bitmap_refuses_high_cardinality() {
    let options = BuildOptions { max_bitmap_values: 10, ..Default::default() };
    let err = build(Kind::Bitmap, vec![(0, ints((0..100).map(Some).collect()))], &options).unwrap_err();
    assert!(err.to_string().contains("btree"), "{err}");
}
