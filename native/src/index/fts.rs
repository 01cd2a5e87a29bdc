//! Full-text segments: an inverted index of analyzed terms with term
//! frequencies, plus every document's length, for BM25.
//!
//! The analyzer splits on Unicode word boundaries (UAX #29), lowercases,
//! drops tokens longer than `max_token_len` bytes and optionally applies the
//! Snowball English stemmer. Queries go through the same analyzer.
//!
//! ```text
//! directory := header | docs u64 | total_len u64 | stem u8 | max_token_len u32
//!              | fragments u32 | (ordinal u32, rows u32, docs u32, total_len u64, block)*
//!              | terms u32 | (term bytes, df u32, block)*                   terms ascending
//! lengths   := u32*rows   tokens per row; u32::MAX for a null (not a document)
//! postings  := n u32 | local addresses u64*n (ascending) | tf u32*n
//! ```
//! Block ids: the fragments' length blocks first, then one posting block per term.

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;
use rust_stemmers::{Algorithm, Stemmer};
use unicode_segmentation::UnicodeSegmentation;

use super::codec::{Dec, Enc};
use super::keys::{KeyColumn, KeyType};
use super::{corrupt, directory_header, local_address, BlockRef, BuildOptions, Built, Kind, SegmentReader, SegmentWriter};
use crate::error::{Error, Result};

/// Row length marking a null (no document).
pub const NO_DOC: u32 = u32::MAX;

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Analyzer {
    pub stem: bool,
    pub max_token_len: usize,
}

impl Default for Analyzer {
    fn default() -> Self {
        Analyzer { stem: false, max_token_len: 64 }
    }
}

impl Analyzer {
    /// The terms of `text`, in order, repeats kept.
    pub fn tokenize(&self, text: &str) -> Vec<String> {
        let stemmer = self.stem.then(|| Stemmer::create(Algorithm::English));
        self.tokenize_with(text, stemmer.as_ref())
    }

    fn tokenize_with(&self, text: &str, stemmer: Option<&Stemmer>) -> Vec<String> {
        text.unicode_words()
            .filter(|w| w.len() <= self.max_token_len)
            .map(|w| {
                let lower = w.to_lowercase();
                match stemmer {
                    Some(s) => s.stem(&lower).into_owned(),
                    None => lower,
                }
            })
            .collect()
    }

    /// Distinct terms of a query, in first-seen order.
    pub fn query_terms(&self, text: &str) -> Vec<String> {
        let mut seen = std::collections::HashSet::new();
        self.tokenize(text).into_iter().filter(|t| seen.insert(t.clone())).collect()
    }
}

#[derive(Debug, Clone)]
pub struct FragmentStats {
    pub ordinal: u32,
    pub rows: u32,
    pub docs: u32,
    pub total_len: u64,
    pub block: BlockRef,
}

#[derive(Debug)]
pub struct Term {
    pub term: String,
    pub df: u32,
    pub block: BlockRef,
}

#[derive(Debug)]
pub struct Directory {
    pub docs: u64,
    pub total_len: u64,
    pub analyzer: Analyzer,
    pub fragments: Vec<FragmentStats>,
    pub terms: Vec<Term>,
}

impl Directory {
    pub(crate) fn decode(d: &mut Dec<'_, '_>) -> Result<Directory> {
        let docs = d.u64()?;
        let total_len = d.u64()?;
        let stem = d.u8()? != 0;
        let max_token_len = d.u32()? as usize;
        let nf = d.count(36)?;
        let mut fragments = Vec::with_capacity(nf);
        for _ in 0..nf {
            fragments.push(FragmentStats { ordinal: d.u32()?, rows: d.u32()?, docs: d.u32()?, total_len: d.u64()?, block: d.block()? });
        }
        let nt = d.count(24)?;
        let mut terms = Vec::with_capacity(nt);
        for _ in 0..nt {
            let raw = d.bytes()?;
            let term = std::str::from_utf8(raw).map_err(|_| corrupt("", "a term is not UTF-8"))?.to_string();
            terms.push(Term { term, df: d.u32()?, block: d.block()? });
        }
        Ok(Directory { docs, total_len, analyzer: Analyzer { stem, max_token_len }, fragments, terms })
    }

    pub fn block(&self, id: u32) -> Option<BlockRef> {
        let id = id as usize;
        match id.checked_sub(self.fragments.len()) {
            None => Some(self.fragments[id].block),
            Some(t) => self.terms.get(t).map(|t| t.block),
        }
    }

    /// Block id of `term`'s postings, if the segment has the term.
    pub fn term_block(&self, term: &str) -> Option<u32> {
        self.terms
            .binary_search_by(|t| t.term.as_str().cmp(term))
            .ok()
            .map(|i| (self.fragments.len() + i) as u32)
    }
}

/// Decodes a posting block: ascending local addresses and their term frequencies.
pub fn decode_postings(bytes: &[u8], object: &str) -> Result<(Vec<u64>, Vec<u32>)> {
    let mut d = Dec::new(bytes, object);
    let n = d.u32()? as usize;
    let addrs = d.u64s(n)?;
    let tfs = d.u32s(n)?;
    d.finish()?;
    Ok((addrs, tfs))
}

/// Decodes a fragment's length block (tokens per row, [`NO_DOC`] for nulls).
pub fn decode_lengths(bytes: &[u8], rows: u32, object: &str) -> Result<Vec<u32>> {
    let mut d = Dec::new(bytes, object);
    let out = d.u32s(rows as usize)?;
    d.finish()?;
    Ok(out)
}

/// Postings by term: (local address, term frequency), ascending addresses.
type Postings = HashMap<String, Vec<(u64, u32)>>;

/// One fragment's analyzed documents: postings by term, and lengths.
struct Analyzed {
    ordinal: u32,
    lengths: Vec<u32>,
    postings: HashMap<String, Vec<(u64, u32)>>,
}

const CHUNK_DOCS: usize = 2048;

fn analyze(ordinal: u32, col: &KeyColumn, analyzer: &Analyzer) -> Analyzed {
    let mut docs: Vec<(u32, &[u8])> = Vec::with_capacity(col.len());
    col.for_each_bytes(|off, b| docs.push((off, b)));
    let chunks: Vec<(Vec<(u32, u32)>, Postings)> = docs
        .par_chunks(CHUNK_DOCS)
        .map_init(
            || analyzer.stem.then(|| Stemmer::create(Algorithm::English)),
            |stemmer, chunk| {
                let mut lens = Vec::with_capacity(chunk.len());
                let mut map: HashMap<String, Vec<(u64, u32)>> = HashMap::new();
                for (off, raw) in chunk {
                    let text = String::from_utf8_lossy(raw);
                    let mut tokens = analyzer.tokenize_with(&text, stemmer.as_ref());
                    lens.push((*off, tokens.len() as u32));
                    tokens.sort_unstable();
                    let addr = local_address(ordinal, *off);
                    let mut i = 0;
                    while i < tokens.len() {
                        let mut j = i + 1;
                        while j < tokens.len() && tokens[j] == tokens[i] {
                            j += 1;
                        }
                        let tf = (j - i) as u32;
                        match map.get_mut(&tokens[i]) {
                            Some(v) => v.push((addr, tf)),
                            None => {
                                map.insert(std::mem::take(&mut tokens[i]), vec![(addr, tf)]);
                            }
                        }
                        i = j;
                    }
                }
                (lens, map)
            },
        )
        .collect();
    let mut lengths = vec![NO_DOC; col.len()];
    let mut postings: HashMap<String, Vec<(u64, u32)>> = HashMap::new();
    for (lens, map) in chunks {
        for (off, n) in lens {
            lengths[off as usize] = n;
        }
        for (term, list) in map {
            postings.entry(term).or_default().extend(list);
        }
    }
    Analyzed { ordinal, lengths, postings }
}

fn write(
    mut fragments: Vec<(u32, Vec<u32>)>,
    mut postings: BTreeMap<String, Vec<(u64, u32)>>,
    analyzer: &Analyzer,
    ordinals: u32,
) -> Result<Built> {
    fragments.sort_by_key(|(o, _)| *o);
    if fragments.windows(2).any(|w| w[0].0 == w[1].0) {
        return Err(Error::InvalidArgument("two inputs index the same fragment ordinal".into()));
    }
    let mut w = SegmentWriter::new();
    let mut frag_stats = Vec::with_capacity(fragments.len());
    let (mut docs, mut total_len) = (0u64, 0u64);
    for (ordinal, lengths) in &fragments {
        let mut e = Enc::with_capacity(lengths.len() * 4);
        e.u32s(lengths);
        let live: Vec<u32> = lengths.iter().copied().filter(|n| *n != NO_DOC).collect();
        let stats = FragmentStats {
            ordinal: *ordinal,
            rows: lengths.len() as u32,
            docs: live.len() as u32,
            total_len: live.iter().map(|n| *n as u64).sum(),
            block: w.block(&e.into_bytes()),
        };
        docs += stats.docs as u64;
        total_len += stats.total_len;
        frag_stats.push(stats);
    }
    let mut terms = Vec::with_capacity(postings.len());
    for (term, list) in postings.iter_mut() {
        if !list.is_sorted_by_key(|p| p.0) {
            list.sort_unstable_by_key(|p| p.0);
        }
        let mut e = Enc::with_capacity(4 + list.len() * 12);
        e.u32(list.len() as u32);
        list.iter().for_each(|(a, _)| e.u64(*a));
        list.iter().for_each(|(_, tf)| e.u32(*tf));
        terms.push((term.as_str(), list.len() as u32, w.block(&e.into_bytes())));
    }
    let mut dir = directory_header(Kind::Fts, docs, ordinals);
    dir.u64(docs);
    dir.u64(total_len);
    dir.u8(analyzer.stem as u8);
    dir.u32(analyzer.max_token_len as u32);
    dir.u32(frag_stats.len() as u32);
    for f in &frag_stats {
        dir.u32(f.ordinal);
        dir.u32(f.rows);
        dir.u32(f.docs);
        dir.u64(f.total_len);
        dir.block(&f.block);
    }
    dir.u32(terms.len() as u32);
    for (term, df, block) in &terms {
        dir.bytes(term.as_bytes());
        dir.u32(*df);
        dir.block(block);
    }
    Ok(Built { bytes: w.finish(Kind::Fts, dir), rows: docs, ordinals })
}

pub fn build(mut inputs: Vec<(u32, KeyColumn)>, ordinals: u32, options: &BuildOptions) -> Result<Built> {
    if inputs.iter().any(|(_, c)| c.key_type != KeyType::Bytes) {
        return Err(Error::InvalidArgument("a full-text index needs a string column".into()));
    }
    inputs.sort_by_key(|(o, _)| *o);
    let mut fragments = Vec::with_capacity(inputs.len());
    let mut postings: BTreeMap<String, Vec<(u64, u32)>> = BTreeMap::new();
    for (ordinal, col) in &inputs {
        let a = analyze(*ordinal, col, &options.analyzer);
        fragments.push((a.ordinal, a.lengths));
        for (term, list) in a.postings {
            postings.entry(term).or_default().extend(list);
        }
    }
    write(fragments, postings, &options.analyzer, ordinals)
}

pub(crate) fn merge(inputs: &[(SegmentReader, &[u8])], options: &BuildOptions) -> Result<Built> {
    let mut fragments = Vec::new();
    let mut postings: BTreeMap<String, Vec<(u64, u32)>> = BTreeMap::new();
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
            let (addrs, tfs) = decode_postings(reader.stored_block(bytes, id)?, &reader.object)?;
            postings.entry(t.term.clone()).or_default().extend(addrs.into_iter().zip(tfs));
        }
    }
    write(fragments, postings, &options.analyzer, ordinals)
}

/// BM25 parameters (Robertson/Lucene): idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
pub const K1: f64 = 1.2;
pub const B: f64 = 0.75;

/// One query term's live postings, with each document's length.
pub struct TermPostings<'a> {
    pub addrs: &'a [u64],
    pub tfs: &'a [u32],
    pub lengths: &'a [u32],
}

/// Top `k` documents by BM25 over `terms` (df = postings given), best first, ties by address.
pub fn bm25_top_k(terms: &[TermPostings<'_>], docs: u64, avgdl: f64, k: usize) -> Result<Vec<(u64, f64)>> {
    let n = docs as f64;
    let avgdl = if avgdl > 0.0 { avgdl } else { 1.0 };
    let mut scores: HashMap<u64, f64> = HashMap::new();
    for t in terms {
        if t.addrs.len() != t.tfs.len() || t.addrs.len() != t.lengths.len() {
            return Err(Error::InvalidArgument("postings, frequencies and lengths differ in length".into()));
        }
        let df = t.addrs.len() as f64;
        let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
        for ((a, tf), dl) in t.addrs.iter().zip(t.tfs).zip(t.lengths) {
            let tf = *tf as f64;
            let s = idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * (*dl as f64) / avgdl));
            *scores.entry(*a).or_insert(0.0) += s;
        }
    }
    let mut all: Vec<(u64, f64)> = scores.into_iter().collect();
    let order = |x: &(u64, f64), y: &(u64, f64)| y.1.total_cmp(&x.1).then(x.0.cmp(&y.0));
    if all.len() > k && k > 0 {
        all.select_nth_unstable_by(k - 1, order);
        all.truncate(k);
    }
    all.truncate(k);
    all.sort_unstable_by(order);
    Ok(all)
}
