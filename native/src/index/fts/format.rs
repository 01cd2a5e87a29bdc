//! The stored form of a full-text segment: its directory and its blocks.
//!
//! ```text
//! directory := header | docs u64 | total_len u64 | stem u8 | max_token_len u32
//!              | fragments u32 | (ordinal u32, rows u32, docs u32, total_len u64, block)*
//!              | terms u32 | (term bytes, df u32, block)*                   terms ascending
//! lengths   := u32*rows   tokens per row; u32::MAX for a null (not a document)
//! postings  := n u32 | local addresses u64*n (ascending) | tf u32*n
//! ```
//! Block ids: the fragments' length blocks first, then one posting block per term.

use std::collections::BTreeMap;

use super::Analyzer;
use crate::error::{Error, Result};
use crate::index::codec::{Dec, Enc};
use crate::index::{corrupt, directory_header, BlockRef, Built, Kind, SegmentWriter};

/// Row length marking a null (no document).
pub const NO_DOC: u32 = u32::MAX;

/// One fragment's entry in the directory: its rows, documents, tokens and length block.
#[derive(Debug, Clone)]
pub struct FragmentStats {
    pub ordinal: u32,
    pub rows: u32,
    pub docs: u32,
    pub total_len: u64,
    pub block: BlockRef,
}

/// One term's entry in the directory: its document frequency and posting block.
#[derive(Debug)]
pub struct Term {
    pub term: String,
    pub df: u32,
    pub block: BlockRef,
}

/// The decoded directory of a full-text segment.
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
        // Each fragment has one length block: an ordinal listed twice is a damaged directory (a query
        // would otherwise refuse the caller's fragments as "served twice").
        let mut ordinals: Vec<u32> = fragments.iter().map(|f| f.ordinal).collect();
        ordinals.sort_unstable();
        if let Some(w) = ordinals.windows(2).find(|w| w[0] == w[1]) {
            return Err(corrupt(d.object(), format!("fragment ordinal {} is listed twice", w[0])));
        }
        let nt = d.count(24)?;
        let mut terms = Vec::with_capacity(nt);
        for _ in 0..nt {
            let raw = d.bytes()?;
            let term = std::str::from_utf8(raw).map_err(|_| corrupt(d.object(), "a term is not UTF-8"))?.to_string();
            terms.push(Term { term, df: d.u32()?, block: d.block()? });
        }
        Ok(Directory { docs, total_len, analyzer: Analyzer { stem, max_token_len }, fragments, terms })
    }

    /// Where block `id` is (a fragment's lengths, then the terms' postings).
    pub fn block(&self, id: u32) -> Option<BlockRef> {
        let id = id as usize;
        match id.checked_sub(self.fragments.len()) {
            None => Some(self.fragments[id].block),
            Some(t) => self.terms.get(t).map(|t| t.block),
        }
    }

    /// `(block id, stats)` of each fragment's length block, in directory order.
    pub fn length_blocks(&self) -> impl Iterator<Item = (u32, &FragmentStats)> {
        self.fragments.iter().enumerate().map(|(i, f)| (i as u32, f))
    }

    /// `(term, block id, block)` of the posting blocks of those of `terms` the segment has, in order.
    pub fn term_blocks(&self, terms: Vec<String>) -> Vec<(String, u32, BlockRef)> {
        terms
            .into_iter()
            .filter_map(|t| {
                let id = self.term_block(&t)?;
                let b = self.block(id)?;
                Some((t, id, b))
            })
            .collect()
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

/// One query term's posting block: `n | addresses u64*n | tf u32*n`, size checked.
pub(super) struct PostingBlock<B> {
    bytes: B,
    /// Postings in the block.
    pub(super) n: usize,
}

impl<B: AsRef<[u8]>> PostingBlock<B> {
    pub(super) fn new(bytes: B, object: &str) -> Result<Self> {
        let b = bytes.as_ref();
        let n = Dec::new(b, object).u32()? as usize;
        if (b.len() - 4) / 12 != n || (b.len() - 4) % 12 != 0 {
            return Err(corrupt(object, format!("a posting block of {} bytes for {n} postings", b.len())));
        }
        Ok(PostingBlock { bytes, n })
    }

    /// The bytes of the addresses (u64 each) and of the term frequencies (u32 each).
    pub(super) fn columns(&self) -> (&[u8], &[u8]) {
        self.bytes.as_ref()[4..].split_at(self.n * 8)
    }
}

/// Encodes a segment from each fragment's lengths `(ordinal, tokens per row)` and the
/// postings of every term; two fragments with one ordinal are refused.
pub(super) fn write(
    mut fragments: Vec<(u32, Vec<u32>)>,
    mut postings: BTreeMap<String, Vec<Vec<(u64, u32)>>>,
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
    for (term, runs) in postings.iter_mut() {
        // a term's postings come in runs (one per analyzed chunk or merged segment), usually in
        // ascending order already; otherwise they are put together and sorted
        let mut prev = None;
        let ascending = runs.iter().filter(|r| !r.is_empty()).all(|r| {
            let ok = r.is_sorted_by_key(|p| p.0) && prev.is_none_or(|p| p <= r[0].0);
            prev = r.last().map(|p| p.0);
            ok
        });
        if !ascending {
            let mut all: Vec<(u64, u32)> = runs.drain(..).flatten().collect();
            all.sort_unstable_by_key(|p| p.0);
            runs.push(all);
        }
        let n: usize = runs.iter().map(Vec::len).sum();
        let mut e = Enc::with_capacity(4 + n * 12);
        e.u32(n as u32);
        runs.iter().flatten().for_each(|(a, _)| e.u64(*a));
        runs.iter().flatten().for_each(|(_, tf)| e.u32(*tf));
        terms.push((term.as_str(), n as u32, w.block(&e.into_bytes())));
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
