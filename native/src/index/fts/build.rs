//! Building full-text segments: analyzing fragments in parallel, and merging segments.

use std::collections::{BTreeMap, HashMap};

use rayon::prelude::*;

use super::format::{decode_lengths, decode_postings, write, NO_DOC};
use super::Analyzer;
use crate::error::{Error, Result};
use crate::index::keys::{KeyColumn, KeyType};
use crate::index::{local_address, BuildOptions, Built, SegmentReader};

/// Postings by term: (local address, term frequency), ascending addresses.
type Postings = HashMap<String, Vec<(u64, u32)>>;

/// One fragment's analyzed documents: postings by term, and lengths.
struct Analyzed {
    ordinal: u32,
    lengths: Vec<u32>,
    postings: HashMap<String, Vec<(u64, u32)>>,
}

/// Smallest unit of parallel analysis; a fragment is cut into about 4 chunks per thread, since
/// every chunk's term map must be merged serially afterwards.
const CHUNK_DOCS: usize = 2048;

fn analyze(ordinal: u32, col: &KeyColumn, analyzer: &Analyzer) -> Analyzed {
    let mut docs: Vec<(u32, &[u8])> = Vec::with_capacity(col.len());
    col.for_each_bytes(|off, b| docs.push((off, b)));
    let per_chunk = (docs.len() / (rayon::current_num_threads() * 4)).max(CHUNK_DOCS);
    let chunks: Vec<(Vec<(u32, u32)>, Postings)> = docs
        .par_chunks(per_chunk)
        .map_init(
            || analyzer.stemmer(),
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

/// A segment of the `(ordinal, string column)` inputs.
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

/// One segment of several covering disjoint ordinals, built with `options.analyzer`.
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
