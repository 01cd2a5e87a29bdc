//! Corrupt-input corpus and bounded fuzzing of the index-segment readers.
//!
//! Three layers, because directories and blocks are checksummed: (1) the whole stored file
//! mutated (the checksums catch most of it), (2) the directory mutated and its checksum
//! recomputed, (3) one block mutated and its checksum in the directory recomputed. (2) and (3)
//! are what a hostile writer can produce; the decoders behind the checksums must hold there too.

use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array, StringArray};

use super::fts::{DocLengths, SegmentQuery, ServedFragment};
use super::keys::{Key, KeyColumn, KeyRange};
use crate::keys::encode_i64;
use super::*;
use crate::testkit::{assert_clean, bit_flips, drive, truncations, Mutant};

fn ints(n: i64, ordinal_seed: i64) -> KeyColumn {
    KeyColumn::new(Arc::new(Int64Array::from_iter((0..n).map(|i| (i % 23 != 0).then_some((i * 7919 + ordinal_seed) % 500))))).unwrap()
}

fn strings(n: usize) -> KeyColumn {
    KeyColumn::new(Arc::new(StringArray::from_iter((0..n).map(|i| (i % 19 != 0).then(|| format!("k{:03}", (i * 31) % 200)))))).unwrap()
}

fn texts(n: usize) -> KeyColumn {
    const WORDS: [&str; 12] = ["lamina", "table", "row", "index", "query", "storage", "page", "fast", "slow", "crc", "bit", "flip"];
    let a: ArrayRef = Arc::new(StringArray::from_iter(
        (0..n).map(|i| (i % 11 != 0).then(|| (0..1 + i % 9).map(|k| WORDS[(i * 7 + k * 3) % WORDS.len()]).collect::<Vec<_>>().join(" "))),
    ));
    KeyColumn::new(a).unwrap()
}

fn options() -> BuildOptions {
    BuildOptions { page_entries: 64, ..Default::default() }
}

/// Valid segments of every kind and key type.
fn segments() -> Vec<(&'static str, Kind, Vec<u8>)> {
    let b = |kind, inputs| build(kind, inputs, &options()).unwrap().bytes;
    vec![
        ("btree int64", Kind::BTree, b(Kind::BTree, vec![(0, ints(900, 1)), (2, ints(400, 2))])),
        ("btree bytes", Kind::BTree, b(Kind::BTree, vec![(0, strings(700)), (1, strings(300))])),
        ("bitmap int64", Kind::Bitmap, b(Kind::Bitmap, vec![(0, ints(900, 1)), (1, ints(500, 3))])),
        ("bitmap bytes", Kind::Bitmap, b(Kind::Bitmap, vec![(0, strings(700))])),
        ("fts", Kind::Fts, b(Kind::Fts, vec![(0, texts(500)), (1, texts(300))])),
    ]
}

/// Fetched block bytes: `stored` from the file, except one replaced block.
struct Blocks<'a> {
    file: &'a [u8],
    replaced: Option<(u32, &'a [u8])>,
}

impl<'a> Blocks<'a> {
    fn get(&self, r: &SegmentReader, id: u32) -> Result<&'a [u8]> {
        match self.replaced {
            Some((rid, bytes)) if rid == id => Ok(bytes),
            _ => r.stored_block(self.file, id),
        }
    }
}

/// Everything a query does with a segment: range lookups (btree, bitmap) or a BM25 query with
/// and without deletions (fts).
fn query_all(r: &SegmentReader, blocks: &Blocks<'_>) -> Result<usize> {
    match r.kind {
        Kind::BTree | Kind::Bitmap => {
            let key = |v: i64, s: &str| if r.key_type() == Some(keys::KeyType::Bytes) { Key::Bytes(s.as_bytes().to_vec()) } else { Key::Num(encode_i64(v)) };
            let ranges = [
                KeyRange { lo: None, hi: None },
                KeyRange::point(key(42, "k031")),
                KeyRange { lo: Some((key(100, "k100"), false)), hi: Some((key(300, "k150"), true)) },
            ];
            let ids = r.blocks_for_ranges(&ranges)?;
            let fetched = ids.iter().map(|(id, _)| Ok((*id, blocks.get(r, *id)?))).collect::<Result<Vec<_>>>()?;
            Ok(r.lookup(&ranges, &fetched)?.len())
        }
        Kind::Fts => {
            let dir = r.fts()?;
            let mut served = Vec::new();
            for (i, f) in dir.fragments.iter().enumerate() {
                let deleted: &[u32] = if i == 0 { &[0, 5, 17] } else { &[] };
                served.push(ServedFragment { ordinal: f.ordinal, fragment_id: 7 + i as u64, block: i as u32, lengths: blocks.get(r, i as u32)?, deleted });
            }
            let mut found = 0;
            for (served, terms) in [(&served[..], vec!["lamina", "row", "crc", "absent"]), (&served[served.len().min(1)..], vec!["flip", "table"])] {
                let docs = Arc::new(DocLengths::new(r, served)?);
                let terms: Vec<String> = terms.into_iter().map(String::from).collect();
                let postings = terms
                    .iter()
                    .filter_map(|t| dir.term_block(t))
                    .map(|id| Ok((id, blocks.get(r, id)?)))
                    .collect::<Result<Vec<_>>>()?;
                let avgdl = docs.total_len as f64 / docs.docs.max(1) as f64;
                let q = SegmentQuery::prepare(r, Arc::clone(&docs), &terms, postings)?;
                found += q.top_k(docs.docs, avgdl, &q.dfs(), 10)?.len();
            }
            Ok(found)
        }
    }
}

/// Opens a whole stored segment, queries it, and merges it into a new one.
fn read_file(kind: Kind, bytes: &[u8]) -> Result<usize> {
    let r = SegmentReader::from_bytes(bytes, "_indices/x/seg.idx")?;
    let n = query_all(&r, &Blocks { file: bytes, replaced: None })?;
    merge(kind, &[(bytes, "_indices/x/seg.idx".to_string())], &options())?;
    Ok(n)
}

/// The segment with its directory replaced by `dir` and the footer sealed over it (valid checksum).
fn reseal_directory(valid: &[u8], dir: &[u8]) -> Vec<u8> {
    let footer = parse_footer(valid, valid.len() as u64, "valid").unwrap();
    let mut out = valid[..footer.dir_offset as usize].to_vec();
    out.extend_from_slice(dir);
    let mut f = codec::Enc::default();
    f.u64(footer.dir_offset);
    f.u64(dir.len() as u64);
    f.u32(crc32fast::hash(dir));
    f.u8(footer.kind as u8);
    f.u8(FORMAT_VERSION);
    f.u16(0);
    f.raw(MAGIC);
    out.extend_from_slice(&f.into_bytes());
    out
}

/// Points block `id` of `r`'s directory at bytes of `len` with `crc`, as a writer sealing them would.
fn reseal_block(r: &mut SegmentReader, id: u32, len: u32, crc: u32) {
    let slot = match &mut r.body {
        Body::BTree(d) => &mut d.pages[id as usize].block,
        Body::Bitmap(d) => &mut d.values[id as usize].block,
        Body::Fts(d) => match (id as usize).checked_sub(d.fragments.len()) {
            None => &mut d.fragments[id as usize].block,
            Some(t) => &mut d.terms[t].block,
        },
    };
    slot.len = len;
    slot.crc = crc;
}

fn block_count(r: &SegmentReader) -> u32 {
    match &r.body {
        Body::BTree(d) => d.pages.len() as u32,
        Body::Bitmap(d) => d.values.len() as u32,
        Body::Fts(d) => (d.fragments.len() + d.terms.len()) as u32,
    }
}

#[test]
fn corrupt_segment_files_fail_without_panicking() {
    let mut failures = Vec::new();
    for (seed, (name, kind, valid)) in segments().into_iter().enumerate() {
        assert!(read_file(kind, &valid).unwrap() > 0, "{name}: the valid segment answers");
        let mut mutants = truncations(&valid, 100);
        mutants.extend(bit_flips(&valid, 300, 512, 100 + seed as u64));
        failures.extend(drive(name, &valid, mutants, |b| read_file(kind, b)));
    }
    assert_clean(failures);
}

#[test]
fn corrupt_directories_with_valid_checksums_fail_without_panicking() {
    let mut failures = Vec::new();
    for (seed, (name, kind, valid)) in segments().into_iter().enumerate() {
        let footer = parse_footer(&valid, valid.len() as u64, "valid").unwrap();
        let dir = &valid[footer.dir_offset as usize..(footer.dir_offset + footer.dir_len) as usize];
        let mut mutants = truncations(dir, 150);
        mutants.extend(bit_flips(dir, 300, dir.len(), 200 + seed as u64));
        let name = format!("{name} directory");
        failures.extend(drive(&name, dir, mutants, |d| read_file(kind, &reseal_directory(&valid, d))));
    }
    assert_clean(failures);
}

#[test]
fn corrupt_blocks_with_valid_checksums_fail_without_panicking() {
    let mut failures = Vec::new();
    for (seed, (name, _, valid)) in segments().into_iter().enumerate() {
        let r = SegmentReader::from_bytes(&valid, "valid").unwrap();
        // The first, a middle and the last block: length blocks and postings for fts.
        let n = block_count(&r);
        for id in [0, n / 2, n - 1] {
            let block = r.stored_block(&valid, id).unwrap().to_vec();
            let mut mutants: Vec<Mutant> = truncations(&block, 40);
            mutants.iter_mut().for_each(|m| m.must_fail = false); // a shorter bitmap can still be a bitmap
            mutants.extend(bit_flips(&block, 100, block.len(), 300 + seed as u64 * 16 + id as u64));
            let read = |b: &[u8]| {
                let mut r = SegmentReader::from_bytes(&valid, "_indices/x/seg.idx")?;
                reseal_block(&mut r, id, b.len() as u32, crc32fast::hash(b));
                query_all(&r, &Blocks { file: &valid, replaced: Some((id, b)) })
            };
            failures.extend(drive(&format!("{name} block {id}"), &block, mutants, read));
        }
    }
    assert_clean(failures);
}

/// Property tests: random truncations, multi-bit flips and huge values where the
/// container keeps lengths (the footer's directory offset and length; in a directory resealed with a
/// valid checksum, every block's offset and length and every count it records), for every kind.
#[test]
fn hostile_segments_fail_with_corrupt_naming_the_object() {
    use crate::hostile_tests::{property, sites_of, Site, Width};
    let object = "_indices/x/seg.idx";
    for (name, kind, valid) in segments() {
        let n = valid.len();
        let footer = [Site { at: n - 32, width: Width::U64 }, Site { at: n - 24, width: Width::U64 }];
        property(&format!("{name} file"), &valid, &footer, Some(object), true, |b| read_file(kind, b));
        // The directory, resealed: its block offsets and lengths, and its counts, get huge values.
        let r = SegmentReader::from_bytes(&valid, "valid").unwrap();
        let f = parse_footer(&valid, n as u64, "valid").unwrap();
        let dir = valid[f.dir_offset as usize..(f.dir_offset + f.dir_len) as usize].to_vec();
        let refs: Vec<BlockRef> = (0..block_count(&r)).filter_map(|id| r.block_ref(id)).collect();
        let mut sites = sites_of(&dir, 0..dir.len(), &refs.iter().map(|b| b.offset).collect::<Vec<_>>(), Width::U64);
        sites.extend(sites_of(&dir, 0..dir.len(), &refs.iter().map(|b| u64::from(b.len)).collect::<Vec<_>>(), Width::U32));
        sites.extend(sites_of(&dir, 0..dir.len(), &[u64::from(block_count(&r)), r.rows, u64::from(r.ordinals)], Width::U32));
        assert!(sites.len() >= refs.len(), "{name}: the directory's length sites are found");
        property(&format!("{name} directory"), &dir, &sites, Some(object), false, |d| match read_file(kind, &reseal_directory(&valid, d)) {
            // A directory that records another analyzer is a valid segment of another index
            // configuration: merging refuses it, naming it (not corruption).
            Err(Error::InvalidArgument(m)) if m.contains(object) && m.contains("another analyzer") => Ok(0),
            other => other,
        });
    }
}

/// Found by `hostile_segments_fail_with_corrupt_naming_the_object` (LAMINA_FUZZ_SEED=4242): an fts
/// directory listing one fragment ordinal twice reached queries, which refused it as the caller's
/// InvalidArgument instead of the segment's corruption.
#[test]
fn an_fts_directory_listing_a_fragment_twice_is_corrupt() {
    let (_, kind, valid) = segments().into_iter().find(|(n, _, _)| *n == "fts").unwrap();
    let r = SegmentReader::from_bytes(&valid, "valid").unwrap();
    let Body::Fts(d) = &r.body else { unreachable!() };
    assert_eq!(d.fragments.len(), 2);
    let footer = parse_footer(&valid, valid.len() as u64, "valid").unwrap();
    let mut dir = valid[footer.dir_offset as usize..(footer.dir_offset + footer.dir_len) as usize].to_vec();
    // The second fragment's ordinal (u32) becomes the first's: it follows kind, rows, ordinals,
    // docs, total_len, stem, max_token_len and the count, then one 36-byte fragment entry.
    let second = 1 + 8 + 4 + 8 + 8 + 1 + 4 + 4 + 36;
    let first = u32::from_le_bytes(dir[second - 36..second - 32].try_into().unwrap());
    assert_eq!(first, d.fragments[0].ordinal);
    dir[second..second + 4].copy_from_slice(&first.to_le_bytes());
    let err = read_file(kind, &reseal_directory(&valid, &dir)).unwrap_err();
    assert!(matches!(&err, Error::Corrupt { object, .. } if object == "_indices/x/seg.idx") && err.to_string().contains("listed twice"), "{err:?}");
}
