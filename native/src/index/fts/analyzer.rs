//! The analyzer: how text becomes terms, for documents and queries alike.
//!
//! Text is split on Unicode word boundaries (UAX #29), lowercased, tokens
//! longer than `max_token_len` bytes are dropped and, optionally, the Snowball
//! English stemmer is applied. A segment records its analyzer; queries on it
//! go through the same one.

use rust_stemmers::{Algorithm, Stemmer};
use unicode_segmentation::UnicodeSegmentation;

/// The options of an analyzer, as a segment's directory records them.
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
        self.tokenize_with(text, self.stemmer().as_ref())
    }

    /// The stemmer this analyzer applies, if any; callers tokenizing many texts make it once (per thread).
    pub(super) fn stemmer(&self) -> Option<Stemmer> {
        self.stem.then(|| Stemmer::create(Algorithm::English))
    }

    /// [`Analyzer::tokenize`] with a stemmer made once by the caller ([`Analyzer::stemmer`]).
    pub(super) fn tokenize_with(&self, text: &str, stemmer: Option<&Stemmer>) -> Vec<String> {
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
