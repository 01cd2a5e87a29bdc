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
    /// Runs of postings by term, in ascending addresses run after run.
    postings: HashMap<String, Vec<Vec<(u64, u32)>>>,
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
                let mut map: Postings = HashMap::new();
                for (off, raw) in chunk {
                    let addr = local_address(ordinal, *off);
                    let mut n = 0u32;
                    // a term is copied only the first time the chunk sees it; a repeat in the same
                    // document is the last posting of its list
                    analyzer.each_term(raw, stemmer.as_ref(), |t| {
                        n += 1;
                        match map.get_mut(t) {
                            Some(v) => match v.last_mut() {
                                Some(last) if last.0 == addr => last.1 += 1,
                                _ => v.push((addr, 1)),
                            },
                            None => {
                                map.insert(t.to_owned(), vec![(addr, 1)]);
                            }
                        }
                    });
                    lens.push((*off, n));
                }
                (lens, map)
            },
        )
        .collect();
    let mut lengths = vec![NO_DOC; col.len()];
    // each term's lists stay as they are, one run per chunk in chunk order (ascending addresses):
    // `write` encodes them one after the other, so they are never copied into one list
    let mut postings: HashMap<String, Vec<Vec<(u64, u32)>>> = HashMap::new();
    for (lens, map) in chunks {
        for (off, n) in lens {
            lengths[off as usize] = n;
        }
        for (term, list) in map {
            match postings.get_mut(&term) {
                Some(runs) => runs.push(list),
                None => {
                    postings.insert(term, vec![list]);
                }
            }
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
    let mut postings: BTreeMap<String, Vec<Vec<(u64, u32)>>> = BTreeMap::new();
    for (ordinal, col) in &inputs {
        let a = analyze(*ordinal, col, &options.analyzer);
        fragments.push((a.ordinal, a.lengths));
        for (term, list) in a.postings {
            match postings.get_mut(&term) {
                Some(v) => v.extend(list),
                None => {
                    postings.insert(term, list);
                }
            }
        }
    }
    write(fragments, postings, &options.analyzer, ordinals)
}

/// One segment of several covering disjoint ordinals, built with `options.analyzer`.
pub(crate) fn merge(inputs: &[(SegmentReader, &[u8])], options: &BuildOptions) -> Result<Built> {
    let mut fragments = Vec::new();
    let mut postings: BTreeMap<String, Vec<Vec<(u64, u32)>>> = BTreeMap::new();
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
            postings.entry(t.term.clone()).or_default().push(addrs.into_iter().zip(tfs).collect());
        }
    }
    write(fragments, postings, &options.analyzer, ordinals)
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
        let words = ["cat", "Cat", "dog's", "e.g.", "3.14", "_x", "caf\u{e9}", "\u{c9}T\u{c9}", "a:b", "__", "run", "RUNS"];
        let mut rng = crate::testkit::Rng::new(5);
        let docs: Vec<Option<String>> = (0..9000)
            .map(|i| {
                (i % 97 != 3).then(|| (0..rng.below(9)).map(|_| words[rng.below(words.len())]).collect::<Vec<_>>().join(" "))
            })
            .collect();
        let col = KeyColumn::new(Arc::new(StringArray::from(docs.clone()))).unwrap();
        for analyzer in [Analyzer::default(), Analyzer { stem: true, max_token_len: 4 }] {
            let got = analyze(3, &col, &analyzer);
            let mut want: Postings = HashMap::new();
            let mut lengths = vec![NO_DOC; docs.len()];
            for (off, d) in docs.iter().enumerate() {
                let Some(d) = d else { continue };
                let terms = analyzer.tokenize(d);
                lengths[off] = terms.len() as u32;
                let mut tf: BTreeMap<String, u32> = BTreeMap::new();
                terms.into_iter().for_each(|t| *tf.entry(t).or_default() += 1);
                for (t, n) in tf {
                    want.entry(t).or_default().push((local_address(3, off as u32), n));
                }
            }
            assert_eq!(got.lengths, lengths);
            assert!(got.postings.values().any(|runs| runs.len() > 1), "several chunks, one run each");
            let got: Postings = got.postings.into_iter().map(|(t, runs)| (t, runs.concat())).collect();
            assert_eq!(got, want);
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
}
