//! The stored form of a full-text segment: its directory and its blocks.
//!
//! ```text
//! directory := header | docs u64 | total_len u64 | stem u8 | max_token_len u32
//!              | fragments u32 | (ordinal u32, rows u32, docs u32, total_len u64, block)*
//!              | terms u32 | (term bytes, df u32, block)*                   terms ascending
//! lengths   := u32*rows   tokens per row; u32::MAX for a null (not a document)
//! postings  := packed | plain
//! packed    := u32::MAX | n u32 | runs u32 | (first address u64, end u32)*runs | run*
//! run       := count-1 u8 | delta_bits u8 | tf_bits u8
//!              | (address - previous - 1) in delta_bits each, count-1 of them, LSB first, padded to a byte
//!              | (tf - 1) in tf_bits each, count of them, LSB first, padded to a byte
//! plain     := n u32 | local addresses u64*n (ascending) | tf u32*n
//! ```
//! Block ids: the fragments' length blocks first, then one posting block per term.
//!
//! A packed block cuts a term's postings into runs of at most [`RUN`] postings of one fragment
//! ordinal; `end` is where a run's bytes end, counted from the first run. Builds write a term with
//! one posting plain (smaller), every other term packed; segments written before the packed layout
//! existed are plain throughout and read as they are. A plain block's `n` is never `u32::MAX`
//! (its block would exceed the 4 GiB a block length can say).

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

/// Decodes a posting block (either layout): ascending local addresses and their term frequencies.
pub fn decode_postings(bytes: &[u8], object: &str) -> Result<(Vec<u64>, Vec<u32>)> {
    let block = PostingBlock::new(bytes, object)?;
    if block.packed.is_none() {
        let mut d = Dec::new(&bytes[4..], object);
        let (addrs, tfs) = (d.u64s(block.n)?, d.u32s(block.n)?);
        if addrs.windows(2).any(|w| w[0] >= w[1]) {
            return Err(corrupt(object, "posting addresses are not ascending"));
        }
        return Ok((addrs, tfs));
    }
    let (mut addrs, mut tfs) = (Vec::with_capacity(block.n), Vec::with_capacity(block.n));
    let (mut a, mut t) = ([0u64; RUN], [0u32; RUN]);
    for j in 0..block.runs() {
        let n = block.decode(j, &mut a, &mut t, object)?;
        addrs.extend_from_slice(&a[..n]);
        tfs.extend_from_slice(&t[..n]);
    }
    Ok((addrs, tfs))
}

/// Decodes a fragment's length block (tokens per row, [`NO_DOC`] for nulls).
pub fn decode_lengths(bytes: &[u8], rows: u32, object: &str) -> Result<Vec<u32>> {
    let mut d = Dec::new(bytes, object);
    let out = d.u32s(rows as usize)?;
    d.finish()?;
    Ok(out)
}

/// Postings per run of a packed block (and per decoded run of a plain one).
pub(super) const RUN: usize = 128;
/// First u32 of a packed posting block.
const PACKED: u32 = u32::MAX;
/// Bytes of a packed block's header (`u32::MAX`, n, runs) and of one run's skip entry.
const PACKED_HEAD: usize = 12;
const SKIP: usize = 12;
/// Bytes of a run's header.
const RUN_HEAD: usize = 3;

/// Bytes of `count` values of `bits` bits each, packed.
#[inline]
fn packed_len(count: usize, bits: u8) -> usize {
    (count * bits as usize).div_ceil(8)
}

#[inline]
fn le_u64(b: &[u8], at: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(a)
}

#[inline]
fn le_u32(b: &[u8], at: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[at..at + 4]);
    u32::from_le_bytes(a)
}

/// Appends `values` (each below `2^bits`, `bits` ≤ 32) packed LSB first, padded to a byte.
fn pack(values: impl Iterator<Item = u32>, bits: u8, out: &mut Vec<u8>) {
    if bits == 0 {
        return;
    }
    let (mut acc, mut held) = (0u64, 0u32);
    for v in values {
        acc |= u64::from(v) << held;
        held += u32::from(bits);
        while held >= 8 {
            out.push(acc as u8);
            acc >>= 8;
            held -= 8;
        }
    }
    if held > 0 {
        out.push(acc as u8);
    }
}

/// Unpacks `count` values of `bits` bits (≤ 32) packed at `b[at..]` (their bytes are there) into `out`.
#[inline]
fn unpack(b: &[u8], at: usize, count: usize, bits: u8, out: &mut [u32; RUN]) {
    if bits == 0 {
        out[..count].fill(0);
        return;
    }
    let len = packed_len(count, bits);
    let mask = (1u64 << bits) - 1;
    let width = bits as usize;
    let mut get = |src: &[u8]| {
        for (i, o) in out[..count].iter_mut().enumerate() {
            let bit = i * width;
            *o = ((le_u64(src, bit >> 3) >> (bit & 7)) & mask) as u32;
        }
    };
    if at + len + 8 <= b.len() {
        // every value is one unaligned 8-byte load inside the block
        get(&b[at..]);
    } else {
        // near the block's end: a copy with 8 bytes of slack
        let mut buf = [0u8; RUN * 4 + 8];
        buf[..len].copy_from_slice(&b[at..at + len]);
        get(&buf);
    }
}

/// Encodes one term's postings, pushed in strictly ascending address order, as a posting block.
pub(super) struct PostingEncoder {
    n: u64,
    skips: Vec<u8>,
    data: Vec<u8>,
    addrs: [u64; RUN],
    tfs: [u32; RUN],
    held: usize,
}

impl PostingEncoder {
    pub(super) fn new() -> Self {
        PostingEncoder { n: 0, skips: Vec::new(), data: Vec::new(), addrs: [0; RUN], tfs: [0; RUN], held: 0 }
    }

    #[inline]
    pub(super) fn push(&mut self, addr: u64, tf: u32) {
        if self.held == RUN || (self.held > 0 && self.addrs[0] >> 32 != addr >> 32) {
            self.flush();
        }
        self.addrs[self.held] = addr;
        self.tfs[self.held] = tf;
        self.held += 1;
        self.n += 1;
    }

    /// Writes the held postings as one run (one ordinal: every delta fits 32 bits).
    fn flush(&mut self) {
        let (a, t) = (&self.addrs[..self.held], &self.tfs[..self.held]);
        // ascending input gives deltas >= 1; anything else (a hostile merge input) wraps, never panics
        let delta = |i: usize| a[i].wrapping_sub(a[i - 1]).wrapping_sub(1) as u32;
        let bits = |max: u32| (32 - max.leading_zeros()) as u8;
        let delta_bits = bits((1..a.len()).map(delta).max().unwrap_or(0));
        let tf_bits = bits(t.iter().map(|tf| tf.wrapping_sub(1)).max().unwrap_or(0));
        self.data.extend_from_slice(&[(a.len() - 1) as u8, delta_bits, tf_bits]);
        pack((1..a.len()).map(delta), delta_bits, &mut self.data);
        pack(t.iter().map(|tf| tf.wrapping_sub(1)), tf_bits, &mut self.data);
        self.skips.extend_from_slice(&a[0].to_le_bytes());
        self.skips.extend_from_slice(&(self.data.len() as u32).to_le_bytes());
        self.held = 0;
    }

    /// Postings pushed so far.
    pub(super) fn len(&self) -> u64 {
        self.n
    }

    /// The block: plain for one posting, packed otherwise.
    pub(super) fn finish(mut self) -> Vec<u8> {
        if self.n == 1 {
            let mut out = Vec::with_capacity(16);
            out.extend_from_slice(&1u32.to_le_bytes());
            out.extend_from_slice(&self.addrs[0].to_le_bytes());
            out.extend_from_slice(&self.tfs[0].to_le_bytes());
            return out;
        }
        if self.held > 0 {
            self.flush();
        }
        let runs = self.skips.len() / SKIP;
        let mut out = Vec::with_capacity(PACKED_HEAD + self.skips.len() + self.data.len());
        out.extend_from_slice(&PACKED.to_le_bytes());
        out.extend_from_slice(&(self.n as u32).to_le_bytes());
        out.extend_from_slice(&(runs as u32).to_le_bytes());
        out.extend_from_slice(&self.skips);
        out.extend_from_slice(&self.data);
        out
    }
}

/// One query term's posting block (either layout), its structure checked: [`PostingBlock::decode`]
/// gives its postings run by run, and [`PostingBlock::first`] each run's first address without
/// decoding it, so readers skip to an address by binary search.
pub(super) struct PostingBlock<B> {
    bytes: B,
    /// Postings in the block.
    pub(super) n: usize,
    /// Packed: the number of runs (else plain).
    packed: Option<usize>,
}

impl<B: AsRef<[u8]>> PostingBlock<B> {
    pub(super) fn new(bytes: B, object: &str) -> Result<Self> {
        let b = bytes.as_ref();
        let mut d = Dec::new(b, object);
        let first = d.u32()?;
        if first != PACKED {
            let n = first as usize;
            if (b.len() - 4) / 12 != n || !(b.len() - 4).is_multiple_of(12) {
                return Err(corrupt(object, format!("a posting block of {} bytes for {n} postings", b.len())));
            }
            return Ok(PostingBlock { bytes, n, packed: None });
        }
        let n = d.u32()? as usize;
        let runs = d.count(SKIP + RUN_HEAD)?;
        let data = &b[PACKED_HEAD + runs * SKIP..];
        let (mut start, mut total, mut prev) = (0usize, 0usize, None::<u64>);
        for j in 0..runs {
            let at = PACKED_HEAD + j * SKIP;
            let (first, end) = (le_u64(b, at), le_u32(b, at + 8) as usize);
            if prev.is_some_and(|p| p >= first) {
                return Err(corrupt(object, "posting runs are not in ascending address order"));
            }
            prev = Some(first);
            let run = data.get(start..end).filter(|r| r.len() >= RUN_HEAD).ok_or_else(|| corrupt(object, format!("posting run {j} ends at {end}, before {start} + 3 or past the block")))?;
            let (count, delta_bits, tf_bits) = (run[0] as usize + 1, run[1], run[2]);
            if delta_bits > 32 || tf_bits > 32 || run.len() != RUN_HEAD + packed_len(count - 1, delta_bits) + packed_len(count, tf_bits) {
                return Err(corrupt(object, format!("posting run {j} of {} bytes does not hold {count} postings of {delta_bits} and {tf_bits} bits", run.len())));
            }
            total += count;
            start = end;
        }
        if start != data.len() || total != n {
            return Err(corrupt(object, format!("a packed posting block of {n} postings holds {total} in {start} of {} bytes", data.len())));
        }
        Ok(PostingBlock { bytes, n, packed: Some(runs) })
    }

    /// Runs of the block (a plain block is read in runs of [`RUN`] postings).
    #[inline]
    pub(super) fn runs(&self) -> usize {
        self.packed.unwrap_or(self.n.div_ceil(RUN))
    }

    /// The first address of run `j` (< [`PostingBlock::runs`]).
    #[inline]
    pub(super) fn first(&self, j: usize) -> u64 {
        let b = self.bytes.as_ref();
        match self.packed {
            Some(_) => le_u64(b, PACKED_HEAD + j * SKIP),
            None => le_u64(b, 4 + 8 * j * RUN),
        }
    }

    /// Decodes run `j` into `addrs` and `tfs`; returns its postings. Addresses are strictly
    /// ascending within the run and below the next run's first, or the block is corrupt.
    pub(super) fn decode(&self, j: usize, addrs: &mut [u64; RUN], tfs: &mut [u32; RUN], object: &str) -> Result<usize> {
        let b = self.bytes.as_ref();
        let count = match self.packed {
            Some(runs) => {
                let data = PACKED_HEAD + runs * SKIP;
                let start = if j == 0 { 0 } else { le_u32(b, PACKED_HEAD + (j - 1) * SKIP + 8) as usize };
                let at = data + start;
                let (count, delta_bits, tf_bits) = (b[at] as usize + 1, b[at + 1], b[at + 2]);
                let mut deltas = [0u32; RUN];
                unpack(b, at + RUN_HEAD, count - 1, delta_bits, &mut deltas);
                unpack(b, at + RUN_HEAD + packed_len(count - 1, delta_bits), count, tf_bits, tfs);
                let mut a = self.first(j);
                addrs[0] = a;
                let mut overflow = false;
                for (o, d) in addrs[1..count].iter_mut().zip(&deltas[..count - 1]) {
                    let (next, o1) = a.overflowing_add(u64::from(*d) + 1);
                    overflow |= o1;
                    a = next;
                    *o = a;
                }
                for t in &mut tfs[..count] {
                    *t = t.wrapping_add(1);
                }
                if overflow {
                    return Err(corrupt(object, "posting addresses overflow"));
                }
                count
            }
            None => {
                let lo = j * RUN;
                let count = (self.n - lo).min(RUN);
                let (a, t) = (&b[4 + 8 * lo..4 + 8 * (lo + count)], &b[4 + 8 * self.n + 4 * lo..4 + 8 * self.n + 4 * (lo + count)]);
                for (i, (o, ot)) in addrs[..count].iter_mut().zip(&mut tfs[..count]).enumerate() {
                    *o = le_u64(a, 8 * i);
                    *ot = le_u32(t, 4 * i);
                }
                if addrs[..count].windows(2).any(|w| w[0] >= w[1]) {
                    return Err(corrupt(object, "posting addresses are not ascending"));
                }
                count
            }
        };
        if j + 1 < self.runs() && addrs[count - 1] >= self.first(j + 1) {
            return Err(corrupt(object, "posting addresses are not ascending"));
        }
        Ok(count)
    }
}

/// Encodes a segment from each fragment's lengths `(ordinal, tokens per row)` and every term's
/// `(term, postings, posting block)`, terms strictly ascending; two fragments with one ordinal are refused.
pub(super) fn write<T: AsRef<[u8]>>(mut fragments: Vec<(u32, Vec<u32>)>, terms: Vec<(T, u32, Vec<u8>)>, analyzer: &Analyzer, ordinals: u32) -> Result<Built> {
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
        let live = lengths.iter().filter(|n| **n != NO_DOC);
        let stats = FragmentStats {
            ordinal: *ordinal,
            rows: lengths.len() as u32,
            docs: live.clone().count() as u32,
            total_len: live.map(|n| *n as u64).sum(),
            block: w.block(&e.into_bytes()),
        };
        docs += stats.docs as u64;
        total_len += stats.total_len;
        frag_stats.push(stats);
    }
    let refs: Vec<BlockRef> = terms.iter().map(|(_, _, block)| w.block(block)).collect();
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
    for ((term, df, _), block) in terms.iter().zip(&refs) {
        dir.bytes(term.as_ref());
        dir.u32(*df);
        dir.block(block);
    }
    Ok(Built { bytes: w.finish(Kind::Fts, dir), rows: docs, ordinals })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(postings: &[(u64, u32)]) -> (Vec<u64>, Vec<u32>) {
        let mut e = PostingEncoder::new();
        postings.iter().for_each(|(a, t)| e.push(*a, *t));
        decode_postings(&e.finish(), "mem").unwrap()
    }

    /// Packed blocks give back what was pushed: runs cut at 128 postings and at every ordinal,
    /// deltas and frequencies of every width up to 32 bits, one posting (plain).
    #[test]
    fn packed_postings_round_trip() {
        let mut rng = crate::testkit::Rng::new(9);
        for case in 0..200 {
            let n = [1, 2, 127, 128, 129, 300, 1000][case % 7];
            let mut a = (rng.below(3) as u64) << 32 | rng.below(1000) as u64;
            let mut want = Vec::with_capacity(n);
            for i in 0..n {
                let tf = match rng.below(4) { 0 => u32::MAX - rng.below(9) as u32, 1 => 1 + rng.below(3) as u32, _ => 1 };
                want.push((a, tf));
                a += match (case + i) % 5 { 0 => 1, 1 => 1 + rng.below(70) as u64, 2 => u32::MAX as u64 - rng.below(5) as u64, 3 => 1 << 32, _ => 2 };
            }
            let (addrs, tfs) = roundtrip(&want);
            assert_eq!(addrs, want.iter().map(|p| p.0).collect::<Vec<_>>(), "case {case}");
            assert_eq!(tfs, want.iter().map(|p| p.1).collect::<Vec<_>>(), "case {case}");
        }
    }

    /// A plain block (every segment written before the packed layout) still decodes, in runs.
    #[test]
    fn plain_blocks_still_decode() {
        let addrs: Vec<u64> = (0..300).map(|i| (i / 100) << 32 | (i * 3)).collect();
        let tfs: Vec<u32> = (0..300).map(|i| 1 + i % 4).collect();
        let mut e = Enc::default();
        e.u32(300);
        addrs.iter().for_each(|a| e.u64(*a));
        e.u32s(&tfs);
        let bytes = e.into_bytes();
        assert_eq!(decode_postings(&bytes, "mem").unwrap(), (addrs.clone(), tfs));
        let b = PostingBlock::new(&bytes[..], "mem").unwrap();
        assert_eq!((b.runs(), b.first(2)), (3, addrs[256]));
    }

    /// A common term (every document) packs to a few bytes per run: deltas and frequencies of 0 bits.
    #[test]
    fn dense_postings_pack_small() {
        let mut e = PostingEncoder::new();
        (0..1280u64).for_each(|a| e.push(a, 1));
        assert_eq!(e.finish().len(), PACKED_HEAD + 10 * (SKIP + RUN_HEAD));
    }
}
