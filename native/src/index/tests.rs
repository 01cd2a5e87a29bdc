use std::sync::Arc;

use arrow::array::{ArrayRef, DictionaryArray, Float64Array, Int64Array, StringArray};
use arrow::datatypes::Int32Type;

use super::fts::{self, decode_postings, Analyzer, TermPostings};
use super::keys::{Key, KeyColumn, KeyRange};
use crate::keys::{encode_f64, encode_i64};
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
    let docs = |o: u32| strings(vec![Some("the cat sat"), None, Some(if o.is_multiple_of(2) { "Cats and dogs" } else { "the the dog" })]);
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

/// Runs both phases of a text query over one whole in-memory segment: (docs, total length, dfs, top k).
fn text_query(bytes: &[u8], terms: &[&str], served: &[(u32, u64, Vec<u32>)], k: usize) -> (u64, u64, Vec<u64>, Vec<(u64, f64)>) {
    let r = SegmentReader::from_bytes(bytes, "mem").unwrap();
    let dir = r.fts().unwrap();
    let block = |id: u32| {
        let b = dir.block(id).unwrap();
        &bytes[b.offset as usize..][..b.len as usize]
    };
    let terms: Vec<String> = terms.iter().map(|t| t.to_string()).collect();
    let postings: Vec<(u32, &[u8])> = terms.iter().filter_map(|t| dir.term_block(t)).map(|id| (id, block(id))).collect();
    let fragments: Vec<fts::ServedFragment<'_>> = served
        .iter()
        .map(|(ordinal, fid, deleted)| {
            let id = dir.fragments.iter().position(|f| f.ordinal == *ordinal).unwrap() as u32;
            fts::ServedFragment { ordinal: *ordinal, fragment_id: *fid, block: id, lengths: block(id), deleted }
        })
        .collect();
    let docs = std::sync::Arc::new(fts::DocLengths::new(&r, &fragments).unwrap());
    let (n, total_len) = (docs.docs, docs.total_len);
    let q = fts::SegmentQuery::prepare(&r, docs, &terms, postings).unwrap();
    let top = q.top_k(n, total_len as f64 / n as f64, &q.dfs(), k).unwrap();
    // a second run (reused scratch) gives the same
    assert_eq!(q.top_k(n, total_len as f64 / n as f64, &q.dfs(), k).unwrap(), top);
    assert!(q.top_k(n, 1.0, &[1; 9], 3).is_err(), "one df per term");
    (n, total_len, q.dfs(), top)
}

#[test]
fn dense_text_query_matches_bm25_top_k() {
    // ordinal 0 is fragment 9 and ordinal 2 fragment 4: row-address order is not ordinal order
    let docs0 = strings(vec![Some("cat dog"), Some("cat dog"), None, Some("cat cat bird"), Some("dog"), Some("cat dog")]);
    let docs1 = strings(vec![Some("fish"), Some("cat")]);
    let docs2 = strings(vec![Some("cat dog"), Some("bird bird cat"), Some(""), Some("cat dog")]);
    let built = build(Kind::Fts, vec![(0, docs0), (1, docs1), (2, docs2)], &BuildOptions::default()).unwrap();
    // ordinal 1 is not served (its fragment is gone or served by another segment)
    let served = vec![(0u32, 9u64, vec![5u32, 1]), (2, 4, vec![])];
    let addr = |fid: u64, off: u64| (fid << 32) | off;
    let (docs, total_len, dfs, top) = text_query(&built.bytes, &["cat", "dog", "nothing"], &served, 100);
    // live docs: fragment 9 offsets 0, 3, 4; fragment 4 offsets 0, 1, 2 (empty, still a document), 3
    assert_eq!((docs, total_len), (7, 2 + 3 + 1 + 2 + 3 + 2));
    assert_eq!(dfs, vec![5, 4, 0]);
    // k above the matches: every match, none of the deleted or unserved rows
    let got: Vec<u64> = top.iter().map(|(a, _)| *a).collect();
    assert_eq!(got.len(), 6);
    for a in [addr(9, 1), addr(9, 5), addr(4, 2)] {
        assert!(!got.contains(&a), "{a:#x} in {got:x?}");
    }
    // the same as the reference scorer over the same live postings, bit for bit
    let live = [(addr(4, 0), 2u32), (addr(4, 1), 3), (addr(4, 3), 2), (addr(9, 0), 2), (addr(9, 3), 3), (addr(9, 4), 1)];
    let cat: Vec<(u64, u32, u32)> = vec![(addr(4, 0), 1, 2), (addr(4, 1), 1, 3), (addr(4, 3), 1, 2), (addr(9, 0), 1, 2), (addr(9, 3), 2, 3)];
    let dog: Vec<(u64, u32, u32)> = vec![(addr(4, 0), 1, 2), (addr(4, 3), 1, 2), (addr(9, 0), 1, 2), (addr(9, 4), 1, 1)];
    let split = |v: &[(u64, u32, u32)]| -> (Vec<u64>, Vec<u32>, Vec<u32>) {
        (v.iter().map(|p| p.0).collect(), v.iter().map(|p| p.1).collect(), v.iter().map(|p| p.2).collect())
    };
    let (ca, ct, cl) = split(&cat);
    let (da, dt, dl) = split(&dog);
    let terms = [TermPostings { addrs: &ca, tfs: &ct, lengths: &cl }, TermPostings { addrs: &da, tfs: &dt, lengths: &dl }];
    let avgdl = live.iter().map(|p| p.1 as f64).sum::<f64>() / 7.0;
    let want = fts::bm25_top_k(&terms, 7, avgdl, 100).unwrap();
    assert_eq!(top.len(), want.len());
    for ((a, s), (wa, ws)) in top.iter().zip(&want) {
        assert_eq!((a, s.to_bits()), (wa, ws.to_bits()));
    }
    // ties ("cat dog" at 4:0, 4:3 and 9:0) by smaller row address
    let tied: Vec<u64> = top.iter().filter(|(_, s)| *s == top[0].1).map(|(a, _)| *a).collect();
    assert_eq!(tied, vec![addr(4, 0), addr(4, 3), addr(9, 0)]);
    // a k inside the tie keeps the smallest addresses
    let (.., two) = text_query(&built.bytes, &["cat", "dog"], &served, 2);
    assert_eq!(two.iter().map(|(a, _)| *a).collect::<Vec<_>>(), vec![addr(4, 0), addr(4, 3)]);
    // a term only in deleted or unserved rows matches nothing
    let (_, _, dfs, none) = text_query(&built.bytes, &["fish"], &served, 10);
    assert_eq!((dfs, none.len()), (vec![0], 0));
    // every fragment served, nothing deleted: the same scores as the reference over all postings
    let all = vec![(0u32, 9u64, vec![]), (1, 5, vec![]), (2, 4, vec![])];
    let (docs, _, dfs, top) = text_query(&built.bytes, &["cat"], &all, 3);
    assert_eq!((docs, dfs), (11, vec![8]));
    assert_eq!(top.iter().map(|(a, _)| *a).collect::<Vec<_>>(), vec![addr(5, 1), addr(9, 3), addr(4, 0)]);
    // bad input is refused, not a panic
    let r = SegmentReader::from_bytes(&built.bytes, "mem").unwrap();
    let nothing = std::sync::Arc::new(fts::DocLengths::new(&r, &[]).unwrap());
    let bad = fts::SegmentQuery::<&[u8]>::prepare(&r, nothing.clone(), &["cat".into()], vec![]);
    assert!(matches!(bad, Err(crate::Error::InvalidArgument(_))));
    let other = SegmentReader::from_bytes(&build(Kind::Fts, vec![(0, strings(vec![Some("cat")]))], &BuildOptions::default()).unwrap().bytes, "other").unwrap();
    assert!(fts::SegmentQuery::<&[u8]>::prepare(&other, nothing, &[], vec![]).is_err());
    // damaged input is Corrupt: a deleted offset beyond the rows, a posting block failing its checksum
    let dir = r.fts().unwrap();
    let block = |id: u32| dir.block(id).map(|b| &built.bytes[b.offset as usize..][..b.len as usize]).unwrap();
    let beyond = [fts::ServedFragment { ordinal: 1, fragment_id: 5, block: 1, lengths: block(1), deleted: &[2] }];
    assert!(matches!(fts::DocLengths::new(&r, &beyond), Err(crate::Error::Corrupt { .. })));
    let docs = std::sync::Arc::new(fts::DocLengths::new(&r, &beyond[..0]).unwrap());
    let id = dir.term_block("cat").unwrap();
    let mut flipped = block(id).to_vec();
    flipped[5] ^= 1;
    let bad = fts::SegmentQuery::prepare(&r, docs, &["cat".into()], vec![(id, flipped.as_slice())]);
    assert!(matches!(bad, Err(crate::Error::Corrupt { .. })));
}

#[test]
fn dense_text_query_equals_bm25_top_k_bit_for_bit_on_many_documents() {
    // enough postings for the precomputed score tables, some tf and lengths beyond them
    let mut x = 17u64;
    let mut next = |m: u64| {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (x >> 33) % m
    };
    let words = ["a", "b", "c", "d", "e", "f"];
    let frag = |n: usize, next: &mut dyn FnMut(u64) -> u64| -> Vec<Option<String>> {
        (0..n)
            .map(|_| match next(50) {
                0 => None,
                1 => Some(vec!["a"; 9 + next(300) as usize].join(" ")),
                _ => Some((0..1 + next(12)).map(|_| words[(next(6) * next(6) / 5) as usize]).collect::<Vec<_>>().join(" ")),
            })
            .collect()
    };
    let texts: Vec<Vec<Option<String>>> = vec![frag(30_000, &mut next), frag(20_000, &mut next)];
    let cols = texts.iter().enumerate().map(|(o, v)| (o as u32, col(Arc::new(StringArray::from(v.clone()))))).collect();
    let built = build(Kind::Fts, cols, &BuildOptions::default()).unwrap();
    let deleted: Vec<u32> = (0..20_000).step_by(7).collect();
    for (served, k) in [(vec![(0u32, 3u64, vec![]), (1, 2, vec![])], 60_000), (vec![(0, 1, vec![]), (1, 2, deleted.clone())], 60_000), (vec![(1, 2, deleted.clone())], 5)] {
        let (docs, total_len, dfs, top) = text_query(&built.bytes, &["a", "e", "b"], &served, k);
        // scored on the global pool's threads and on 7, split at other documents: the same
        let pool = rayon::ThreadPoolBuilder::new().num_threads(7).build().unwrap();
        assert_eq!(pool.install(|| text_query(&built.bytes, &["a", "e", "b"], &served, k)).3, top);
        // the reference: live postings with global addresses and lengths, per term
        let r = SegmentReader::from_bytes(&built.bytes, "mem").unwrap();
        let dir = r.fts().unwrap();
        let mut lens = std::collections::HashMap::new();
        for (o, fid, del) in &served {
            let i = dir.fragments.iter().position(|f| f.ordinal == *o).unwrap();
            let mut l = fts::decode_lengths(r.stored_block(&built.bytes, i as u32).unwrap(), dir.fragments[i].rows, "mem").unwrap();
            del.iter().for_each(|d| l[*d as usize] = fts::NO_DOC);
            lens.insert(*o, (*fid, l));
        }
        let live: Vec<u32> = lens.values().flat_map(|(_, l)| l.iter().copied().filter(|d| *d != fts::NO_DOC)).collect();
        assert_eq!((docs, total_len), (live.len() as u64, live.iter().map(|d| *d as u64).sum()));
        let mut cols = Vec::new();
        for t in ["a", "e", "b"] {
            let (addrs, tfs) = decode_postings(r.stored_block(&built.bytes, dir.term_block(t).unwrap()).unwrap(), "mem").unwrap();
            let mut v: Vec<(u64, u32, u32)> = addrs
                .iter()
                .zip(&tfs)
                .filter_map(|(a, tf)| {
                    let (fid, l) = lens.get(&((a >> 32) as u32))?;
                    let dl = l[(a & 0xFFFF_FFFF) as usize];
                    (dl != fts::NO_DOC).then_some(((fid << 32) | (a & 0xFFFF_FFFF), *tf, dl))
                })
                .collect();
            v.sort_unstable();
            cols.push((v.iter().map(|p| p.0).collect::<Vec<_>>(), v.iter().map(|p| p.1).collect::<Vec<_>>(), v.iter().map(|p| p.2).collect::<Vec<_>>()));
        }
        assert_eq!(dfs, cols.iter().map(|c| c.0.len() as u64).collect::<Vec<_>>());
        assert!(dfs[0] > 8192 && cols[0].1.iter().any(|tf| *tf > 8) && cols[0].2.iter().any(|dl| *dl > 256));
        let terms: Vec<TermPostings<'_>> = cols.iter().map(|(a, t, l)| TermPostings { addrs: a, tfs: t, lengths: l }).collect();
        let want = fts::bm25_top_k(&terms, docs, total_len as f64 / docs as f64, k).unwrap();
        assert_eq!(top.len(), want.len());
        assert!(top.iter().zip(&want).all(|((a, s), (wa, ws))| a == wa && s.to_bits() == ws.to_bits()), "{served:?}");
    }
}

/// The stored bytes of segments of every kind and key type, pinned: segments written by
/// earlier builds must still read, so a change here is a format change (docs/FORMAT.md).
#[test]
fn stored_segment_bytes_are_pinned() {
    use arrow::array::UInt64Array;
    // (the key encodings themselves are pinned in crate::keys)
    let columns: Vec<(&str, ArrayRef)> = vec![
        ("int64", Arc::new(Int64Array::from(vec![Some(3), Some(-7), None, Some(i64::MIN), Some(3), Some(i64::MAX)]))),
        ("uint64", Arc::new(UInt64Array::from(vec![Some(0), Some(u64::MAX), Some(9), None, Some(9)]))),
        ("float64", Arc::new(Float64Array::from(vec![Some(1.5), Some(f64::NAN), Some(-0.0), Some(f64::NEG_INFINITY), None, Some(0.0), Some(-1.5)]))),
        ("string", Arc::new(StringArray::from(vec![Some("b"), Some(""), None, Some("longer than eight bytes"), Some("b"), Some("\u{e9}")]))),
    ];
    let mut got = Vec::new();
    for (name, a) in &columns {
        for kind in [Kind::BTree, Kind::Bitmap] {
            let built = build(kind, vec![(0, col(a.clone())), (2, col(a.clone()))], &BuildOptions { page_entries: 3, ..Default::default() }).unwrap();
            got.push(format!("{} {name}: {}", kind.name(), crate::io::checksum(&built.bytes)));
        }
    }
    let text = strings(vec![Some("The cat; the CAT!"), Some("dog"), None, Some(""), Some("a cat and running dogs")]);
    let built = build(Kind::Fts, vec![(1, text)], &BuildOptions { analyzer: Analyzer { stem: true, max_token_len: 5 }, ..Default::default() }).unwrap();
    got.push(format!("fts: {}", crate::io::checksum(&built.bytes)));
    let want = [
        "btree int64: crc32c:dc6305ab",
        "bitmap int64: crc32c:cbebb138",
        "btree uint64: crc32c:3d60dcf8",
        "bitmap uint64: crc32c:1ac117c6",
        "btree float64: crc32c:36a4a21f",
        "bitmap float64: crc32c:d5a3fe64",
        "btree string: crc32c:c452c0b6",
        "bitmap string: crc32c:4cd1b5eb",
        "fts: crc32c:b7eaaaa8",
    ];
    assert_eq!(got, want);
}

#[test]
fn ranges_from_scalars_encode_their_bounds_and_nan_matches_nothing() {
    let r = KeyRange::between(Some((Scalar::I64(-1), false)), Some((Scalar::F64(1.5), true))).unwrap();
    assert_eq!(r.lo, Some((Key::Num(encode_i64(-1)), false)));
    assert_eq!(r.hi, Some((Key::Num(encode_f64(1.5).unwrap()), true)));
    let open = KeyRange::between(None, Some((Scalar::Bytes(b"k".to_vec()), true))).unwrap();
    assert!(open.lo.is_none() && open.contains(&Key::Bytes(b"a".to_vec())));
    assert!(KeyRange::between(Some((Scalar::F64(f64::NAN), true)), None).is_none());
    assert!(KeyRange::between(None, Some((Scalar::F64(f64::NAN), false))).is_none());
    assert_eq!(Scalar::U64(7).key(), Some(Key::Num(7)));
}

/// Full-text segments with packed postings are written as version 2 (a build reading only version 1
/// says "upgrade Lamina" instead of failing on their blocks); this build reads both full-text
/// versions, and version 1 only for the kinds whose layout did not change.
#[test]
fn segment_versions_are_read_per_kind() {
    use crate::index::{parse_footer, written_version, FOOTER_LEN, FORMAT_VERSION};
    assert_eq!((written_version(Kind::Fts), written_version(Kind::BTree), written_version(Kind::Bitmap)), (2, 1, 1));
    let text = strings(vec![Some("a cat"), Some("dog")]);
    let fts = build(Kind::Fts, vec![(0, text)], &BuildOptions::default()).unwrap().bytes;
    let a: ArrayRef = Arc::new(Int64Array::from(vec![Some(1), Some(2)]));
    let btree = build(Kind::BTree, vec![(0, col(a))], &BuildOptions::default()).unwrap().bytes;
    let at = |bytes: &[u8], version: u8| {
        let mut b = bytes.to_vec();
        let n = b.len();
        b[n - FOOTER_LEN + 21] = version; // dir_offset u64, dir_len u64, dir_crc u32, kind u8, then the version
        b
    };
    for (bytes, kind, readable) in [(&fts, Kind::Fts, vec![1u8, 2]), (&btree, Kind::BTree, vec![1u8])] {
        assert_eq!(bytes[bytes.len() - FOOTER_LEN + 21], written_version(kind));
        for v in 0u8..=3 {
            let b = at(bytes, v);
            let got = parse_footer(&b, b.len() as u64, "seg");
            if readable.contains(&v) {
                assert!(got.is_ok(), "{kind:?} version {v}");
            } else {
                let e = got.unwrap_err().to_string();
                assert!(e.contains(&format!("index format version {v}")) && e.contains("upgrade Lamina"), "{e}");
            }
        }
    }
    assert_eq!(FORMAT_VERSION, 1);
}
