//! Building full-text segments: analyzing fragments in parallel, and merging segments.
//!
//! Documents are cut into chunks (over all input fragments, in address order) analyzed on rayon's
//! threads. Each chunk interns its terms in a [`Dict`] (term bytes in one arena, ids by an
//! open-addressing table) and keeps per term id its postings `(offset, tf)`. The chunks' terms
//! are then interned once more into one dictionary for the build, each term listing its chunks'
//! runs in address order; terms are sorted once, and their posting blocks encoded in parallel.

use std::collections::BTreeMap;

use rayon::prelude::*;

use super::format::{decode_lengths, decode_postings, write, PostingEncoder, NO_DOC};
use super::Analyzer;
use crate::error::{Error, Result};
use crate::index::keys::{KeyColumn, KeyType};
use crate::index::{local_address, BuildOptions, Built, SegmentReader};

/// Terms interned in one arena, with dense ids in first-seen order, found by an open-addressing
/// table (linear probing, at most 5/8 full). A slot holds the term's key: a term of up to 11 bytes
/// is its key (bytes and length), so finding it reads one slot and nothing else; a longer one keys
/// by its first 8 bytes and 24 bits of its hash, and is compared in the arena. The hash is a
/// multiply-rotate over 8-byte words (FxHash-style), seeded per process so collisions cannot be
/// precomputed from document text.
struct Dict {
    seed: u64,
    arena: Vec<u8>,
    /// By id: where its bytes are in the arena (offset, length).
    terms: Vec<(usize, u32)>,
    slots: Vec<Slot>,
}

/// A table slot: a term's key and `id + 1` (0: empty).
#[derive(Clone, Copy, Default)]
struct Slot {
    k0: u64,
    k1: u32,
    id: u32,
}

const K: u64 = 0x517c_c1b7_2722_0a95;
/// Longest term keyed by its bytes alone.
const INLINE: usize = 11;
/// `k1`'s top byte for a longer term (an inline term's is its length, at most 11).
const LONG: u32 = 0xff << 24;

impl Dict {
    fn new(seed: u64) -> Dict {
        Dict { seed, arena: Vec::new(), terms: Vec::new(), slots: vec![Slot::default(); 1024] }
    }

    /// The key of `t` and its hash.
    #[inline]
    fn key(&self, t: &[u8]) -> (u64, u32, u64) {
        let mut w = [0u8; 16];
        if t.len() <= INLINE {
            w[..t.len()].copy_from_slice(t);
            let k0 = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
            let k1 = u32::from_le_bytes([w[8], w[9], w[10], 0]) | (t.len() as u32) << 24;
            return (k0, k1, self.mix(k0, k1));
        }
        let mut h = self.seed ^ (t.len() as u64).wrapping_mul(K);
        let mut chunks = t.chunks_exact(8);
        for c in &mut chunks {
            w[..8].copy_from_slice(c);
            h = (h.rotate_left(5) ^ u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]])).wrapping_mul(K);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut r = [0u8; 8];
            r[..rest.len()].copy_from_slice(rest);
            h = (h.rotate_left(5) ^ u64::from_le_bytes(r)).wrapping_mul(K);
        }
        let h = h ^ (h >> 29) ^ (h >> 47);
        w[..8].copy_from_slice(&t[..8]);
        let k0 = u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]);
        (k0, LONG | (h >> 40) as u32, h)
    }

    /// The hash of an inline key.
    #[inline]
    fn mix(&self, k0: u64, k1: u32) -> u64 {
        let h = ((k0 ^ self.seed).wrapping_mul(K).rotate_left(23) ^ u64::from(k1)).wrapping_mul(K);
        h ^ (h >> 29) ^ (h >> 47)
    }

    fn len(&self) -> usize {
        self.terms.len()
    }

    #[inline]
    fn bytes(&self, id: u32) -> &[u8] {
        let (off, len) = self.terms[id as usize];
        &self.arena[off..off + len as usize]
    }

    /// The id of `t`, interned if new; the flag says it is new.
    #[inline]
    fn intern(&mut self, t: &[u8]) -> (u32, bool) {
        let (k0, k1, h) = self.key(t);
        let mask = self.slots.len() - 1;
        let mut i = h as usize & mask;
        loop {
            let s = self.slots[i];
            if s.id == 0 {
                break;
            }
            if s.k0 == k0 && s.k1 == k1 && (k1 & LONG != LONG || self.bytes(s.id - 1) == t) {
                return (s.id - 1, false);
            }
            i = (i + 1) & mask;
        }
        let id = self.terms.len() as u32;
        self.terms.push((self.arena.len(), t.len() as u32));
        self.arena.extend_from_slice(t);
        self.slots[i] = Slot { k0, k1, id: id + 1 };
        if self.terms.len() * 8 > self.slots.len() * 5 {
            self.grow();
        }
        (id, true)
    }

    fn grow(&mut self) {
        let mut slots = vec![Slot::default(); self.slots.len() * 2];
        let mask = slots.len() - 1;
        for s in self.slots.iter().filter(|s| s.id != 0) {
            let h = if s.k1 & LONG == LONG { self.key(self.bytes(s.id - 1)).2 } else { self.mix(s.k0, s.k1) };
            let mut i = h as usize & mask;
            while slots[i].id != 0 {
                i = (i + 1) & mask;
            }
            slots[i] = *s;
        }
        self.slots = slots;
    }
}

/// One chunk's analysis: its documents' lengths, its terms, and each term's postings
/// `(offset, tf)`, offsets ascending: those of term id `i` are `postings[starts[i]..starts[i + 1]]`.
struct Chunk {
    ordinal: u32,
    lengths: Vec<(u32, u32)>,
    dict: Dict,
    starts: Vec<u32>,
    postings: Vec<(u32, u32)>,
}

impl Chunk {
    fn postings(&self, id: u32) -> &[(u32, u32)] {
        &self.postings[self.starts[id as usize] as usize..self.starts[id as usize + 1] as usize]
    }

    /// Analyzes the documents `(offset, text)` of `chunk`: terms are interned as they come, each
    /// document's distinct terms counted in a small list (a term's last document and place in the
    /// list are kept by id), and appended to one flat list, grouped by term at the end (a counting sort).
    fn analyze(ordinal: u32, chunk: &[(u32, &[u8])], analyzer: &Analyzer, stemmer: Option<&rust_stemmers::Stemmer>, seed: u64) -> Chunk {
        let mut lengths = Vec::with_capacity(chunk.len());
        let mut dict = Dict::new(seed);
        // by term id: (1 + index in `chunk` of its last document, its place in `doc`)
        let mut last: Vec<(u32, u32)> = Vec::new();
        let mut doc: Vec<(u32, u32)> = Vec::new();
        // per document: its distinct terms' (id, tf), then (offset, distinct terms) per document
        let mut flat: Vec<(u32, u32)> = Vec::new();
        let mut per_doc: Vec<(u32, u32)> = Vec::with_capacity(chunk.len());
        for (d, &(off, raw)) in chunk.iter().enumerate() {
            let d = d as u32 + 1;
            let mut n = 0u32;
            doc.clear();
            analyzer.each_term(raw, stemmer, |t| {
                n += 1;
                let (id, new) = dict.intern(t.as_bytes());
                if new {
                    last.push((0, 0));
                }
                let l = &mut last[id as usize];
                if l.0 == d {
                    doc[l.1 as usize].1 += 1;
                } else {
                    *l = (d, doc.len() as u32);
                    doc.push((id, 1));
                }
            });
            lengths.push((off, n));
            flat.extend_from_slice(&doc);
            per_doc.push((off, doc.len() as u32));
        }
        drop(last);
        let mut starts = vec![0u32; dict.len() + 1];
        for &(id, _) in &flat {
            starts[id as usize + 1] += 1;
        }
        for i in 1..starts.len() {
            starts[i] += starts[i - 1];
        }
        let mut postings = vec![(0u32, 0u32); flat.len()];
        let mut at: Vec<u32> = starts[..dict.len()].to_vec();
        let mut entries = flat.iter();
        for &(off, k) in &per_doc {
            for &(id, tf) in entries.by_ref().take(k as usize) {
                let a = &mut at[id as usize];
                postings[*a as usize] = (off, tf);
                *a += 1;
            }
        }
        Chunk { ordinal, lengths, dict, starts, postings }
    }
}

/// Documents `(offset, text)` of one fragment, and a chunk of them with its ordinal.
type Docs<'a> = Vec<(u32, &'a [u8])>;
type ChunkDocs<'a, 'b> = (u32, &'b [(u32, &'a [u8])]);
/// A term's runs `(chunk, term id in the chunk)`, and a merged term's `(addresses, tfs)` per segment.
type Runs = Vec<(u32, u32)>;
type Decoded = Vec<(Vec<u64>, Vec<u32>)>;

/// Smallest unit of parallel analysis; the documents are cut into about 4 chunks per thread, since
/// every chunk's terms are merged serially afterwards.
const CHUNK_DOCS: usize = 2048;

/// Every document of `inputs` (ordinals ascending) analyzed, in chunks in address order.
fn analyze(inputs: &[(u32, KeyColumn)], analyzer: &Analyzer, seed: u64) -> Vec<Chunk> {
    let docs: Vec<(u32, Docs<'_>)> = inputs
        .iter()
        .map(|(ordinal, col)| {
            let mut docs = Vec::with_capacity(col.len());
            col.for_each_bytes(|off, b| docs.push((off, b)));
            (*ordinal, docs)
        })
        .collect();
    let total: usize = docs.iter().map(|(_, d)| d.len()).sum();
    let per_chunk = (total / (rayon::current_num_threads() * 4)).max(CHUNK_DOCS);
    let chunks: Vec<ChunkDocs<'_, '_>> = docs.iter().flat_map(|(o, d)| d.chunks(per_chunk).map(move |c| (*o, c))).collect();
    chunks
        .into_par_iter()
        .map_init(|| analyzer.stemmer(), |stemmer, (ordinal, chunk)| Chunk::analyze(ordinal, chunk, analyzer, stemmer.as_ref(), seed))
        .collect()
}

/// A per-process hash seed for the term dictionaries.
fn seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0x6c61_6d69_6e61);
    h.finish()
}

/// The terms of `chunks` (in address order), each with its runs `(chunk, term id in the chunk)`
/// in address order, sorted by term.
fn merge_chunks(chunks: &[Chunk], seed: u64) -> (Dict, Vec<u32>, Vec<Runs>) {
    let mut all = Dict::new(seed);
    let mut runs: Vec<Runs> = Vec::new();
    for (c, chunk) in chunks.iter().enumerate() {
        for local in 0..chunk.dict.len() as u32 {
            let (id, new) = all.intern(chunk.dict.bytes(local));
            if new {
                runs.push(Vec::with_capacity(1));
            }
            runs[id as usize].push((c as u32, local));
        }
    }
    let mut order: Vec<u32> = (0..all.len() as u32).collect();
    order.par_sort_unstable_by(|a, b| all.bytes(*a).cmp(all.bytes(*b)));
    (all, order, runs)
}

/// A segment of the `(ordinal, string column)` inputs.
pub fn build(mut inputs: Vec<(u32, KeyColumn)>, ordinals: u32, options: &BuildOptions) -> Result<Built> {
    if inputs.iter().any(|(_, c)| c.key_type != KeyType::Bytes) {
        return Err(Error::InvalidArgument("a full-text index needs a string column".into()));
    }
    inputs.sort_by_key(|(o, _)| *o);
    if inputs.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(Error::InvalidArgument("two inputs index the same fragment ordinal".into()));
    }
    let seed = seed();
    let chunks = analyze(&inputs, &options.analyzer, seed);
    let mut fragments: Vec<(u32, Vec<u32>)> = inputs.iter().map(|(o, col)| (*o, vec![NO_DOC; col.len()])).collect();
    for chunk in &chunks {
        // chunks and fragments are both in ordinal order
        let Some(f) = fragments.iter_mut().find(|f| f.0 == chunk.ordinal) else { continue };
        for &(off, n) in &chunk.lengths {
            f.1[off as usize] = n;
        }
    }
    let (dict, order, runs) = merge_chunks(&chunks, seed);
    let terms: Vec<(&[u8], u32, Vec<u8>)> = order
        .par_iter()
        .map(|&id| {
            let mut e = PostingEncoder::new();
            for &(c, local) in &runs[id as usize] {
                let chunk = &chunks[c as usize];
                for &(off, tf) in chunk.postings(local) {
                    e.push(local_address(chunk.ordinal, off), tf);
                }
            }
            (dict.bytes(id), e.len() as u32, e.finish())
        })
        .collect();
    write(fragments, terms, &options.analyzer, ordinals)
}

/// One segment of several covering disjoint ordinals, built with `options.analyzer`.
pub(crate) fn merge(inputs: &[(SegmentReader, &[u8])], options: &BuildOptions) -> Result<Built> {
    let mut fragments = Vec::new();
    let mut postings: BTreeMap<String, Decoded> = BTreeMap::new();
    let mut ordinals = 0;
    for (reader, bytes) in inputs {
        let dir = reader.fts()?;
        if dir.analyzer != options.analyzer {
            return Err(Error::InvalidArgument(format!("{} was built with another analyzer ({:?})", reader.object, dir.analyzer)));
        }
        ordinals = ordinals.max(reader.ordinals);
        for (i, f) in dir.fragments.iter().enumerate() {
            fragments.push((f.ordinal, decode_lengths(reader.stored_block(bytes, i as u32)?, f.rows, &reader.object)?));
        }
        for (i, t) in dir.terms.iter().enumerate() {
            let id = (dir.fragments.len() + i) as u32;
            postings.entry(t.term.clone()).or_default().push(decode_postings(reader.stored_block(bytes, id)?, &reader.object)?);
        }
    }
    let postings: Vec<(String, Decoded)> = postings.into_iter().collect();
    let terms: Vec<(&str, u32, Vec<u8>)> = postings
        .par_iter()
        .map(|(term, runs)| {
            // a term's runs (one per segment) are in address order unless segments cover
            // interleaved ordinals: then they are put together and sorted
            let mut e = PostingEncoder::new();
            let ascending = runs.iter().filter(|r| !r.0.is_empty()).map(|r| (r.0[0], r.0[r.0.len() - 1])).is_sorted_by(|a, b| a.1 < b.0);
            if ascending {
                runs.iter().for_each(|(a, t)| a.iter().zip(t).for_each(|(a, t)| e.push(*a, *t)));
            } else {
                let mut all: Vec<(u64, u32)> = runs.iter().flat_map(|(a, t)| a.iter().copied().zip(t.iter().copied())).collect();
                all.sort_unstable_by_key(|p| p.0);
                all.iter().for_each(|(a, t)| e.push(*a, *t));
            }
            (term.as_str(), e.len() as u32, e.finish())
        })
        .collect();
    write(fragments, terms, &options.analyzer, ordinals)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::StringArray;

    use super::*;

    /// Postings and lengths of `analyze` (several chunks, repeats in a document, non-ASCII and
    /// invalid-free UTF-8 text) equal those counted from `Analyzer::tokenize` document by document.
    #[test]
    fn analyze_counts_what_tokenize_gives() {
        use std::collections::HashMap;
        let words = ["cat", "Cat", "dog's", "e.g.", "3.14", "_x", "caf\u{e9}", "\u{c9}T\u{c9}", "a:b", "__", "run", "RUNS"];
        let mut rng = crate::testkit::Rng::new(5);
        let docs: Vec<Option<String>> = (0..9000)
            .map(|i| {
                (i % 97 != 3).then(|| (0..rng.below(9)).map(|_| words[rng.below(words.len())]).collect::<Vec<_>>().join(" "))
            })
            .collect();
        let col = || KeyColumn::new(Arc::new(StringArray::from(docs.clone()))).unwrap();
        for analyzer in [Analyzer::default(), Analyzer { stem: true, max_token_len: 4 }] {
            let inputs = vec![(3, col()), (5, col())];
            let chunks = analyze(&inputs, &analyzer, seed());
            let (dict, order, runs) = merge_chunks(&chunks, seed());
            let mut want: HashMap<String, Vec<(u64, u32)>> = HashMap::new();
            let mut lengths = vec![NO_DOC; docs.len()];
            for ordinal in [3, 5] {
                for (off, d) in docs.iter().enumerate() {
                    let Some(d) = d else { continue };
                    let terms = analyzer.tokenize(d);
                    lengths[off] = terms.len() as u32;
                    let mut tf: BTreeMap<String, u32> = BTreeMap::new();
                    terms.into_iter().for_each(|t| *tf.entry(t).or_default() += 1);
                    for (t, n) in tf {
                        want.entry(t).or_default().push((local_address(ordinal, off as u32), n));
                    }
                }
            }
            for ordinal in [3, 5] {
                let mut got = vec![NO_DOC; docs.len()];
                chunks.iter().filter(|c| c.ordinal == ordinal).flat_map(|c| &c.lengths).for_each(|(o, n)| got[*o as usize] = *n);
                assert_eq!(got, lengths);
            }
            assert!(runs.iter().any(|r| r.len() > 2), "several chunks, one run each");
            let got: HashMap<String, Vec<(u64, u32)>> = order
                .iter()
                .map(|&id| {
                    let list = runs[id as usize]
                        .iter()
                        .flat_map(|&(c, l)| {
                            let chunk = &chunks[c as usize];
                            chunk.postings(l).iter().map(move |&(o, tf)| (local_address(chunk.ordinal, o), tf))
                        })
                        .collect();
                    (String::from_utf8(dict.bytes(id).to_vec()).unwrap(), list)
                })
                .collect();
            assert_eq!(got, want);
            let sorted: Vec<&[u8]> = order.iter().map(|&id| dict.bytes(id)).collect();
            assert!(sorted.windows(2).all(|w| w[0] < w[1]), "terms sorted once, distinct");
        }
    }

    /// Terms are told apart whatever their length (inline keys up to 11 bytes, longer ones through
    /// the arena), across table growth, including long terms sharing their first 8 bytes.
    #[test]
    fn dictionary_tells_terms_apart() {
        let mut d = Dict::new(1);
        let terms: Vec<String> = (0..5000).map(|i| format!("{}{i}", "x".repeat(i % 20))).chain(["".into(), "\0".into(), "\0\0".into()]).collect();
        for (i, t) in terms.iter().enumerate() {
            assert_eq!(d.intern(t.as_bytes()), (i as u32, true), "{t:?}");
        }
        for (i, t) in terms.iter().enumerate() {
            assert_eq!(d.intern(t.as_bytes()), (i as u32, false));
            assert_eq!(d.bytes(i as u32), t.as_bytes());
        }
    }

    /// Segments merged out of ordinal order: each term's runs are put back in address order.
    #[test]
    fn merge_in_any_order_equals_one_build() {
        use crate::index::{build as build_any, merge as merge_any, BuildOptions, Kind};
        let docs = |o: u32| {
            let v = vec![Some("the cat sat"), None, Some(if o % 2 == 0 { "Cats and dogs" } else { "the the dog" })];
            KeyColumn::new(Arc::new(StringArray::from(v))).unwrap()
        };
        let options = BuildOptions::default();
        let whole = build_any(Kind::Fts, (0..4).map(|o| (o, docs(o))).collect(), &options).unwrap();
        let a = build_any(Kind::Fts, (0..2).map(|o| (o, docs(o))).collect(), &options).unwrap();
        let b = build_any(Kind::Fts, (2..4).map(|o| (o, docs(o))).collect(), &options).unwrap();
        let merged = merge_any(Kind::Fts, &[(b.bytes.as_slice(), "b".into()), (a.bytes.as_slice(), "a".into())], &options).unwrap();
        assert_eq!(merged.bytes, whole.bytes);
    }

    /// A segment in the plain posting layout (every segment written before the packed one) answers
    /// queries as the packed segment of the same documents does, and merges into the same bytes.
    #[test]
    fn plain_layout_segments_read_like_packed_ones() {
        use std::sync::Arc as A;

        use crate::index::codec::Enc;
        use crate::index::fts::{DocLengths, SegmentQuery, ServedFragment};
        use crate::index::{build as build_any, merge as merge_any, Kind};
        let words = ["cat", "dog", "bird", "fish", "cow"];
        let mut rng = crate::testkit::Rng::new(3);
        let col = |n: usize, rng: &mut crate::testkit::Rng| {
            let v: Vec<Option<String>> =
                (0..n).map(|i| (i % 13 != 5).then(|| (0..1 + rng.below(6)).map(|_| words[rng.below(words.len())]).collect::<Vec<_>>().join(" "))).collect();
            KeyColumn::new(A::new(StringArray::from(v))).unwrap()
        };
        let options = BuildOptions::default();
        let packed = build_any(Kind::Fts, vec![(0, col(700, &mut rng)), (1, col(300, &mut rng))], &options).unwrap();
        let r = SegmentReader::from_bytes(&packed.bytes, "packed").unwrap();
        let dir = r.fts().unwrap();
        let fragments: Vec<(u32, Vec<u32>)> =
            dir.fragments.iter().enumerate().map(|(i, f)| (f.ordinal, decode_lengths(r.stored_block(&packed.bytes, i as u32).unwrap(), f.rows, "p").unwrap())).collect();
        let terms: Vec<(&str, u32, Vec<u8>)> = dir
            .terms
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let (addrs, tfs) = decode_postings(r.stored_block(&packed.bytes, (dir.fragments.len() + i) as u32).unwrap(), "p").unwrap();
                let mut e = Enc::default();
                e.u32(addrs.len() as u32);
                addrs.iter().for_each(|a| e.u64(*a));
                e.u32s(&tfs);
                (t.term.as_str(), t.df, e.into_bytes())
            })
            .collect();
        let plain = write(fragments, terms, &options.analyzer, packed.ordinals).unwrap();
        assert!(plain.bytes.len() > packed.bytes.len());
        let top = |bytes: &[u8]| {
            let r = SegmentReader::from_bytes(bytes, "seg").unwrap();
            let dir = r.fts().unwrap();
            let served: Vec<ServedFragment<'_>> = dir
                .fragments
                .iter()
                .enumerate()
                .map(|(i, f)| ServedFragment { ordinal: f.ordinal, fragment_id: 9 + i as u64, block: i as u32, lengths: r.stored_block(bytes, i as u32).unwrap(), deleted: if i == 0 { &[3, 4, 100] } else { &[] } })
                .collect();
            let docs = A::new(DocLengths::new(&r, &served).unwrap());
            let terms: Vec<String> = ["cat", "fish", "cow"].into_iter().map(String::from).collect();
            let postings: Vec<(u32, &[u8])> = terms.iter().filter_map(|t| dir.term_block(t)).map(|id| (id, r.stored_block(bytes, id).unwrap())).collect();
            let q = SegmentQuery::prepare(&r, A::clone(&docs), &terms, postings).unwrap();
            let top = q.top_k(docs.docs, docs.total_len as f64 / docs.docs as f64, &q.dfs(), 50).unwrap();
            (q.dfs(), top.into_iter().map(|(a, s)| (a, s.to_bits())).collect::<Vec<_>>())
        };
        assert_eq!(top(&plain.bytes), top(&packed.bytes));
        let merged = merge_any(Kind::Fts, &[(plain.bytes.as_slice(), "plain".into())], &options).unwrap();
        assert_eq!(merged.bytes, packed.bytes);
    }
}
