//! BM25 over one full-text segment.
//!
//! Queries score per segment in two phases so that BM25's statistics are
//! global: [`DocLengths`] (the served rows' lengths, deletions applied; reusable)
//! and [`SegmentQuery::prepare`] give the segment's live N, total length and df
//! per term; the caller sums them over segments, [`SegmentQuery::top_k`] scores
//! into a dense array and returns only the segment's best `k`. [`bm25_top_k`]
//! is the reference scorer over postings gathered by the caller.

use std::collections::HashMap;

use rayon::prelude::*;

use super::format::{PostingBlock, NO_DOC, RUN};
use crate::error::{Error, Result};
use crate::index::{corrupt, local_address, partition_point, SegmentReader};

/// BM25 parameters (Robertson/Lucene): idf = ln(1 + (N - df + 0.5) / (df + 0.5)).
pub const K1: f64 = 1.2;
pub const B: f64 = 0.75;

/// One query term's live postings, with each document's length.
pub struct TermPostings<'a> {
    pub addrs: &'a [u64],
    pub tfs: &'a [u32],
    pub lengths: &'a [u32],
}

/// BM25 idf of a term in `df` of `n` documents.
#[inline]
fn idf(n: f64, df: f64) -> f64 {
    (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
}

/// One posting's BM25 contribution. Every scorer uses this one expression, so
/// scores are bit-identical however the postings are gathered.
#[inline(always)]
fn term_score(idf: f64, tf: u32, dl: u32, avgdl: f64) -> f64 {
    let tf = tf as f64;
    idf * tf * (K1 + 1.0) / (tf + K1 * (1.0 - B + B * (dl as f64) / avgdl))
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
        let idf = idf(n, t.addrs.len() as f64);
        for ((a, tf), dl) in t.addrs.iter().zip(t.tfs).zip(t.lengths) {
            *scores.entry(*a).or_insert(0.0) += term_score(idf, *tf, *dl, avgdl);
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

/// One fragment a segment serves in a text query, as the caller supplies it.
pub struct ServedFragment<'a> {
    /// The fragment's ordinal in the segment.
    pub ordinal: u32,
    /// The fragment's id: row addresses are `(fragment_id << 32) | offset`.
    pub fragment_id: u64,
    /// Block id and bytes of the fragment's length block.
    pub block: u32,
    pub lengths: &'a [u8],
    /// Offsets deleted from the fragment (any order).
    pub deleted: &'a [u32],
}

/// A served fragment's place among a query's documents.
#[derive(Clone, Copy, Debug)]
struct Span {
    /// `fragment id << 32`: the fragment's row addresses.
    base: u64,
    ordinal: u32,
    /// Its first document index.
    start: u32,
    rows: u32,
}

/// The documents a segment serves in a text query: the rows of the served
/// fragments, indexed densely (fragments in ordinal order, then offset), with
/// their lengths ([`NO_DOC`] for nulls and deleted rows), and their share of
/// the BM25 statistics. It depends only on the served fragments and their
/// deletions, not on the query, so callers may keep it for later queries.
#[derive(Debug)]
pub struct DocLengths {
    object: String,
    /// Served fragments in ordinal order.
    spans: Vec<Span>,
    lengths: Vec<u32>,
    /// Every fragment of the segment is served and nothing is deleted: every posting is live.
    complete: bool,
    /// Live documents and their total length.
    pub docs: u64,
    pub total_len: u64,
}

impl DocLengths {
    pub fn new(reader: &SegmentReader, fragments: &[ServedFragment<'_>]) -> Result<DocLengths> {
        let dir = reader.fts()?;
        let object = reader.object.as_str();
        let mut served: Vec<&ServedFragment<'_>> = fragments.iter().collect();
        served.sort_unstable_by_key(|f| f.ordinal);
        let mut ids: Vec<u64> = served.iter().map(|f| f.fragment_id).collect();
        ids.sort_unstable();
        if ids.windows(2).any(|w| w[0] == w[1]) || served.windows(2).any(|w| w[0].ordinal == w[1].ordinal) {
            return Err(Error::InvalidArgument(format!("a fragment or ordinal is served twice by {object}")));
        }
        let mut spans = Vec::with_capacity(served.len());
        let mut rows = 0u32;
        for f in &served {
            if f.fragment_id >> 32 != 0 {
                return Err(Error::InvalidArgument(format!("fragment id {} does not fit a row address", f.fragment_id)));
            }
            let stats = dir
                .fragments
                .get(f.block as usize)
                .filter(|s| s.ordinal == f.ordinal)
                .ok_or_else(|| Error::InvalidArgument(format!("block {} of {object} is not the lengths of ordinal {}", f.block, f.ordinal)))?;
            // The directory's row count is only trusted once the block holding one length per row
            // was supplied and checked: it bounds what is allocated below.
            reader.check_block(f.block, f.lengths)?;
            if f.lengths.len() as u64 != u64::from(stats.rows) * 4 {
                return Err(corrupt(object, format!("a length block of {} bytes for {} rows", f.lengths.len(), stats.rows)));
            }
            spans.push(Span { base: f.fragment_id << 32, ordinal: f.ordinal, start: rows, rows: stats.rows });
            rows = rows
                .checked_add(stats.rows)
                .filter(|r| *r < u32::MAX)
                .ok_or_else(|| Error::InvalidArgument(format!("a text query over {} rows or more of one segment", u32::MAX)))?;
        }
        let mut lengths = Vec::with_capacity(rows as usize);
        let mut deleted = false;
        for (f, span) in served.iter().zip(&spans) {
            let start = lengths.len();
            let n = span.rows as usize;
            lengths.extend(f.lengths.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])));
            for &off in f.deleted {
                let slot = lengths[start..]
                    .get_mut(off as usize)
                    .ok_or_else(|| corrupt(object, format!("deleted offset {off} is beyond the {n} rows of ordinal {}", f.ordinal)))?;
                *slot = NO_DOC;
                deleted = true;
            }
        }
        let (mut docs, mut total_len) = (0u64, 0u64);
        for &dl in &lengths {
            if dl != NO_DOC {
                docs += 1;
                total_len += dl as u64;
            }
        }
        let complete = !deleted && served.len() == dir.fragments.len();
        Ok(DocLengths { object: object.to_string(), spans, lengths, complete, docs, total_len })
    }

    /// Bytes held.
    pub fn size(&self) -> usize {
        self.lengths.len() * 4 + self.spans.len() * std::mem::size_of::<Span>()
    }

    /// Calls `f(document - lo, tf, length)` for every posting of `block` on a live
    /// document in `lo..hi`, in posting order. Postings of fragments not served
    /// are skipped without being decoded (each served fragment's first run is found
    /// by binary search over the runs' first addresses, the block being sorted by address).
    #[inline(always)]
    fn for_each_live<B: AsRef<[u8]>>(&self, block: &PostingBlock<B>, lo: usize, hi: usize, mut f: impl FnMut(usize, u32, u32)) -> Result<()> {
        if lo >= hi {
            return Ok(());
        }
        let runs = block.runs();
        let (mut addrs, mut tfs) = ([0u64; RUN], [0u32; RUN]);
        // the next run to decode; the decoded run before it, `held` postings, read up to `at`
        let (mut next, mut held, mut at) = (0usize, 0usize, 0usize);
        let first_span = self.spans.partition_point(|s| (s.start + s.rows) as usize <= lo);
        for span in &self.spans[first_span..] {
            let start = span.start as usize;
            if start >= hi {
                break;
            }
            // the offsets of this fragment inside lo..hi, and their postings
            let (o_lo, o_hi) = (lo.saturating_sub(start), (span.rows as usize).min(hi - start));
            let a_lo = local_address(span.ordinal, o_lo as u32);
            let a_hi = a_lo + (o_hi - o_lo) as u64;
            // runs starting at or below a_lo: the last of them is the first that can hold a_lo
            let k = next + partition_point(runs - next, |i| block.first(next + i) <= a_lo);
            if k > next {
                (next, held, at) = (k - 1, 0, 0);
            }
            let lengths = &self.lengths[start + o_lo..start + o_hi];
            'span: loop {
                if at == held {
                    if next == runs {
                        break;
                    }
                    held = block.decode(next, &mut addrs, &mut tfs, &self.object)?;
                    (next, at) = (next + 1, 0);
                }
                for (&addr, &tf) in addrs[at..held].iter().zip(&tfs[at..held]) {
                    if addr >= a_hi {
                        break 'span;
                    }
                    at += 1;
                    // addresses are strictly ascending (checked by decode): below a_lo is before the range
                    let i = addr.wrapping_sub(a_lo) as usize;
                    let Some(&dl) = lengths.get(i) else {
                        continue;
                    };
                    if dl != NO_DOC {
                        f(start + o_lo + i - lo, tf, dl);
                    } else if self.complete {
                        return Err(corrupt(&self.object, format!("a posting names row {} of ordinal {}, a null", o_lo + i, span.ordinal)));
                    }
                }
            }
        }
        Ok(())
    }
}

/// One segment's side of a BM25 query, in two phases so that statistics can
/// be summed over segments first.
///
/// [`SegmentQuery::prepare`] checks the query terms' posting blocks and counts
/// each term's live documents over [`DocLengths`]. [`SegmentQuery::top_k`] then
/// scores with the global statistics, accumulating into a dense score array
/// (one slot per document), and returns the best `k` with their row addresses.
pub struct SegmentQuery<B> {
    docs: std::sync::Arc<DocLengths>,
    /// Per query term: its posting block (None: not in the segment) and its live df here.
    terms: Vec<(Option<PostingBlock<B>>, u64)>,
}

impl<B: AsRef<[u8]>> SegmentQuery<B> {
    /// The segment this query reads (for errors).
    pub fn object(&self) -> &str {
        &self.docs.object
    }

    /// Phase 1: `postings` are the fetched posting blocks `(id, bytes)` of (at
    /// least) the query terms the segment has.
    pub fn prepare(reader: &SegmentReader, docs: std::sync::Arc<DocLengths>, terms: &[String], postings: Vec<(u32, B)>) -> Result<Self> {
        let dir = reader.fts()?;
        let object = reader.object.as_str();
        if docs.object != reader.object {
            return Err(Error::InvalidArgument(format!("the documents of {} cannot answer a query on {object}", docs.object)));
        }
        let mut postings: Vec<(u32, Option<B>)> = postings.into_iter().map(|(id, b)| (id, Some(b))).collect();
        let mut out = Vec::with_capacity(terms.len());
        for term in terms {
            let Some(id) = dir.term_block(term) else {
                out.push((None, 0));
                continue;
            };
            let bytes = postings
                .iter_mut()
                .find(|(b, _)| *b == id)
                .and_then(|(_, b)| b.take())
                .ok_or_else(|| Error::InvalidArgument(format!("block {id} of {object} (term {term:?}) was not supplied once per term")))?;
            reader.check_block(id, bytes.as_ref())?;
            let block = PostingBlock::new(bytes, object)?;
            let df = if docs.complete {
                block.n as u64
            } else {
                let mut live = 0u64;
                docs.for_each_live(&block, 0, docs.lengths.len(), |_, _, _| live += 1)?;
                live
            };
            out.push((Some(block), df));
        }
        Ok(SegmentQuery { docs, terms: out })
    }

    /// Live document frequency of each query term in this segment.
    pub fn dfs(&self) -> Vec<u64> {
        self.terms.iter().map(|t| t.1).collect()
    }

    /// Phase 2: the best `k` documents of this segment as (row address, score),
    /// best first, ties by smaller address; `docs`, `avgdl` and `dfs` (per query
    /// term) are the statistics over every segment. Scores equal [`bm25_top_k`]'s
    /// bit for bit: each document sums its terms in query-term order. Many
    /// postings are scored on several threads, each over a range of documents.
    pub fn top_k(&self, docs: u64, avgdl: f64, dfs: &[u64], k: usize) -> Result<Vec<(u64, f64)>>
    where
        B: Sync,
    {
        if dfs.len() != self.terms.len() {
            return Err(Error::InvalidArgument(format!("{} document frequencies for {} query terms", dfs.len(), self.terms.len())));
        }
        let n = docs as f64;
        let avgdl = if avgdl > 0.0 { avgdl } else { 1.0 };
        let terms: Vec<(&PostingBlock<B>, ScoreTable)> = self
            .terms
            .iter()
            .zip(dfs)
            .filter(|((block, live), _)| block.is_some() && *live > 0)
            .filter_map(|((block, _), &df)| block.as_ref().map(|b| (b, ScoreTable::new(idf(n, df as f64), avgdl, b.n))))
            .collect();
        let postings: usize = terms.iter().map(|(b, _)| b.n).sum();
        let rows = self.docs.lengths.len();
        let mut scratch = Scratch::take(rows);
        // ranges of whole bitmap words, so each thread owns its slots and bits
        let parts = if postings >= PARALLEL_POSTINGS { rayon::current_num_threads().clamp(1, rows.div_ceil(PART_ROWS)) } else { 1 };
        let mut ranges = Vec::with_capacity(parts);
        let (mut scores, mut touched) = (&mut scratch.scores[..rows], &mut scratch.touched[..rows.div_ceil(64)]);
        let mut lo = 0;
        for p in 0..parts {
            let hi = if p + 1 == parts { rows } else { (rows * (p + 1) / parts) & !63 }.max(lo);
            let (s, rest) = std::mem::take(&mut scores).split_at_mut(hi - lo);
            let (t, rest_t) = std::mem::take(&mut touched).split_at_mut((hi - lo).div_ceil(64));
            (scores, touched) = (rest, rest_t);
            ranges.push((lo, s, t));
            lo = hi;
        }
        let run = |(lo, s, t): (usize, &mut [f64], &mut [u64])| self.score_range(lo, s, t, &terms, k);
        let found: Vec<Result<Vec<Ranked>>> =
            if parts == 1 { ranges.into_iter().map(run).collect() } else { ranges.into_par_iter().map(run).collect() };
        let mut all = Vec::new();
        for f in found {
            all.extend(f?); // on an error the scratch is dropped, not returned dirty
        }
        scratch.give_back();
        all.sort_unstable();
        all.truncate(k);
        Ok(all.into_iter().map(|r| (r.1, r.0)).collect())
    }

    /// Scores documents `lo..lo + scores.len()` (`scores` and `touched` are their
    /// slots and bits, zeroed) and returns their best `k`, leaving the slots zeroed.
    fn score_range(&self, lo: usize, scores: &mut [f64], touched: &mut [u64], terms: &[(&PostingBlock<B>, ScoreTable)], k: usize) -> Result<Vec<Ranked>> {
        for (block, table) in terms {
            self.docs.for_each_live(block, lo, lo + scores.len(), |d, tf, dl| {
                scores[d] += table.score(tf, dl);
                touched[d >> 6] |= 1 << (d & 63);
            })?;
        }
        Ok(best_touched(scores, touched, lo, &self.docs.spans, k))
    }
}

/// Postings at or above this count are scored on several threads, each over at least `PART_ROWS` documents
/// (small in tests, so that they take this path).
const PARALLEL_POSTINGS: usize = if cfg!(test) { 1 << 10 } else { 1 << 17 };
const PART_ROWS: usize = if cfg!(test) { 1 << 8 } else { 1 << 16 };


/// One term's [`term_score`], precomputed for small term frequencies and
/// document lengths when the term has many postings: a lookup gives the same
/// bits as the computation, without its two divisions.
struct ScoreTable {
    idf: f64,
    avgdl: f64,
    table: Vec<f64>,
}

const TABLE_TF: u32 = 8;
const TABLE_DL: u32 = 256;

impl ScoreTable {
    fn new(idf: f64, avgdl: f64, postings: usize) -> ScoreTable {
        let mut table = Vec::new();
        if postings >= 4 * (TABLE_TF * TABLE_DL) as usize {
            table.reserve_exact((TABLE_TF * TABLE_DL) as usize);
            for tf in 1..=TABLE_TF {
                table.extend((0..TABLE_DL).map(|dl| term_score(idf, tf, dl, avgdl)));
            }
        }
        ScoreTable { idf, avgdl, table }
    }

    #[inline(always)]
    fn score(&self, tf: u32, dl: u32) -> f64 {
        let i = tf.wrapping_sub(1);
        if i < TABLE_TF && dl < TABLE_DL {
            if let Some(s) = self.table.get((i * TABLE_DL + dl) as usize) {
                return *s;
            }
        }
        term_score(self.idf, tf, dl, self.avgdl)
    }
}

/// A zeroed score slot per document and a bit per touched document, reused
/// across queries (a fresh 8-byte-per-document allocation costs more than the
/// scoring); [`best_touched`] leaves both zeroed again.
struct Scratch {
    scores: Vec<f64>,
    touched: Vec<u64>,
}

/// Scratch buffers kept for reuse, and the largest one kept (in documents).
static SCRATCH: std::sync::Mutex<Vec<Scratch>> = std::sync::Mutex::new(Vec::new());
const SCRATCH_KEEP: usize = 2;
const SCRATCH_MAX_DOCS: usize = 1 << 23;

impl Scratch {
    fn take(docs: usize) -> Scratch {
        let reused = SCRATCH.lock().unwrap_or_else(std::sync::PoisonError::into_inner).pop();
        let mut s = reused.unwrap_or(Scratch { scores: Vec::new(), touched: Vec::new() });
        if s.scores.len() < docs {
            s.scores.resize(docs, 0.0);
            s.touched.resize(docs.div_ceil(64), 0);
        }
        s
    }

    fn give_back(self) {
        if self.scores.len() <= SCRATCH_MAX_DOCS {
            let mut v = SCRATCH.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if v.len() < SCRATCH_KEEP {
                v.push(self);
            }
        }
    }
}

/// The best `k` touched documents of `lo..lo + scores.len()` (their slots and
/// bits) as ranked row addresses, best first, ties by smaller address; zeroes
/// every touched slot and bit.
fn best_touched(scores: &mut [f64], touched: &mut [u64], lo: usize, spans: &[Span], k: usize) -> Vec<Ranked> {
    use std::collections::BinaryHeap;
    let mut heap: BinaryHeap<Ranked> = BinaryHeap::with_capacity(k.min(scores.len()) + 1);
    let mut span = spans.partition_point(|s| s.start as usize <= lo).saturating_sub(1);
    let mut threshold = f64::NEG_INFINITY;
    for (w, word) in touched.iter_mut().enumerate() {
        let mut bits = std::mem::take(word);
        while bits != 0 {
            let i = (w << 6) | bits.trailing_zeros() as usize;
            bits &= bits - 1;
            let score = std::mem::take(&mut scores[i]);
            // below the k-th best score: worse whatever its address (NaN goes on to the full comparison)
            if k == 0 || score < threshold {
                continue;
            }
            // documents come in ascending order, so spans are walked once
            let d = lo + i;
            while span + 1 < spans.len() && spans[span + 1].start as usize <= d {
                span += 1;
            }
            let s = spans[span];
            let r = Ranked(score, s.base | (d as u64 - s.start as u64));
            if heap.len() < k {
                heap.push(r);
            } else if let Some(mut worst) = heap.peek_mut() {
                if r < *worst {
                    *worst = r;
                }
            }
            if heap.len() == k {
                threshold = heap.peek().map_or(threshold, |w| w.0);
            }
        }
    }
    heap.into_sorted_vec()
}

/// A scored row in a top-k heap: `Ord` puts the worse one first (lower score,
/// then larger address), so a max-heap's top is the current k-th best.
#[derive(Clone, Copy)]
struct Ranked(f64, u64);

impl PartialEq for Ranked {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}
impl Eq for Ranked {}
impl PartialOrd for Ranked {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Ranked {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.0.total_cmp(&self.0).then(self.1.cmp(&other.1))
    }
}
