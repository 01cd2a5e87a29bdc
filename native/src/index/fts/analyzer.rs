//! The analyzer: how text becomes terms, for documents and queries alike.
//!
//! Text is split on Unicode word boundaries (UAX #29), lowercased, tokens
//! longer than `max_token_len` bytes are dropped and, optionally, the Snowball
//! English stemmer is applied. A segment records its analyzer; queries on it
//! go through the same one.
//!
//! Pure ASCII text takes a byte-level path ([`ascii_words`]) that yields exactly the words of
//! `unicode_words` (the UAX #29 rules restricted to ASCII) and lowercases them in place, with no
//! allocation per token; other text goes through `unicode-segmentation` and `to_lowercase`.

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
        let mut terms = Vec::new();
        self.each_term(text.as_bytes(), stemmer, |t| terms.push(t.to_owned()));
        terms
    }

    /// Calls `f` with each term of `raw` (UTF-8, invalid sequences read as U+FFFD), in order,
    /// repeats kept: the terms of [`Analyzer::tokenize`], without an allocation per term for ASCII.
    pub(super) fn each_term(&self, raw: &[u8], stemmer: Option<&Stemmer>, mut f: impl FnMut(&str)) {
        if raw.is_ascii() {
            // ASCII is valid UTF-8, and a slice of it at any byte is too.
            let mut lower = [0u8; 64];
            let mut owned = Vec::new();
            for (a, b) in ascii_words(raw) {
                let w = &raw[a..b];
                if w.len() > self.max_token_len {
                    continue;
                }
                let buf: &mut [u8] = if w.len() <= lower.len() {
                    &mut lower[..w.len()]
                } else {
                    owned.clear();
                    owned.resize(w.len(), 0);
                    &mut owned[..]
                };
                for (d, s) in buf.iter_mut().zip(w) {
                    *d = s.to_ascii_lowercase();
                }
                let Ok(term) = std::str::from_utf8(buf) else {
                    continue; // not reached: lowercased ASCII is UTF-8
                };
                match stemmer {
                    Some(s) => f(&s.stem(term)),
                    None => f(term),
                }
            }
        } else {
            for t in self.tokenize_unicode(&String::from_utf8_lossy(raw), stemmer) {
                f(&t);
            }
        }
    }

    /// The general path: UAX #29 words of `text` (`unicode_words`), `to_lowercase`, then the stemmer.
    fn tokenize_unicode(&self, text: &str, stemmer: Option<&Stemmer>) -> Vec<String> {
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

/// Letters, digits and `_` (ExtendNumLet): the bytes a word is made of (UAX #29 WB5, WB8-WB10, WB13a-b).
#[inline]
fn is_core(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// Whether `b`, between `prev` and `next`, joins them into one word: `. , ; '` between digits
/// (MidNum, MidNumLetQ: WB11-WB12), `' . :` between letters (MidNumLetQ, MidLetter: WB6-WB7).
#[inline]
fn is_infix(b: u8, prev: u8, next: u8) -> bool {
    match b {
        b'.' | b',' | b';' | b'\'' if prev.is_ascii_digit() && next.is_ascii_digit() => true,
        b'\'' | b'.' | b':' if prev.is_ascii_alphabetic() && next.is_ascii_alphabetic() => true,
        _ => false,
    }
}

/// The byte ranges of the words of ASCII `text`, in order: what `unicode_words` yields for it.
///
/// Word segments are maximal runs of letters, digits and `_`, joined across single infix
/// punctuation ([`is_infix`]); every other byte (spaces, CR LF, other punctuation) is a segment of
/// its own or of spaces, none of which holds a letter or digit. `unicode_words` keeps the segments
/// holding a letter or a digit, so a run of `_` alone is dropped.
pub(super) fn ascii_words(text: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let n = text.len();
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < n {
            if !is_core(text[i]) {
                i += 1;
                continue;
            }
            let start = i;
            let mut alnum = text[i] != b'_';
            i += 1;
            while i < n {
                let b = text[i];
                if is_core(b) {
                    alnum |= b != b'_';
                    i += 1;
                } else if i + 1 < n && is_infix(b, text[i - 1], text[i + 1]) {
                    // the next byte is a letter or a digit: take both
                    alnum = true;
                    i += 2;
                } else {
                    break;
                }
            }
            if alnum {
                return Some((start, i));
            }
        }
        None
    })
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use unicode_segmentation::UnicodeSegmentation;

    use super::*;

    /// The words of `text` as `unicode_words` and `to_lowercase` give them (the reference).
    fn reference(text: &str) -> Vec<String> {
        text.unicode_words().map(str::to_lowercase).collect()
    }

    /// The same from the crate's general UAX #29 segmenter (`unicode_words` has its own ASCII path).
    fn reference_general(text: &str) -> Vec<String> {
        text.split_word_bounds().filter(|w| w.chars().any(char::is_alphanumeric)).map(str::to_lowercase).collect()
    }

    /// Cases: `LAMINA_PROPTEST_CASES` times 8 (default 2,048), seed `LAMINA_FUZZ_SEED` (repeatable).
    fn config() -> ProptestConfig {
        let cases = std::env::var("LAMINA_PROPTEST_CASES").ok().and_then(|s| s.parse::<u32>().ok()).unwrap_or(256) * 8;
        ProptestConfig {
            cases,
            failure_persistence: None,
            rng_seed: proptest::test_runner::RngSeed::Fixed(crate::testkit::fuzz_seed()),
            ..ProptestConfig::default()
        }
    }

    fn fast(text: &str) -> Vec<String> {
        ascii_words(text.as_bytes()).map(|(a, b)| text[a..b].to_ascii_lowercase()).collect()
    }

    /// ASCII rich in the bytes the word rules treat specially.
    fn tricky_ascii() -> impl Strategy<Value = String> {
        let alphabet: Vec<char> = "aZe'.,:;_- \n\r\t19\"!?/()@#x\u{b}\u{c}\0~Q0".chars().collect();
        let one = prop_oneof![
            8 => proptest::sample::select(alphabet),
            1 => (0u8..128).prop_map(char::from),
        ];
        proptest::collection::vec(one, 0..64).prop_map(|v| v.into_iter().collect())
    }

    #[test]
    fn fixed_cases_match_unicode_words() {
        for text in [
            "",
            "_",
            "__ _",
            "a_ _b __c__ _1_",
            "Hello, World!",
            "e.g. U.S.A. don't rock'n'roll 'quoted' it's'",
            "3.14 1,000,000 1;2 1:2 1'2 a.1 1.a a1.2 1a.b a..b a.'b 1.,2",
            "http://example.com/a:b a:b: :a",
            "tab\there\r\nCRLF\rCR\nLF\u{b}VT\u{c}FF",
            "x.y.z. .x. 'a' a' 'a ,1, 1, ,1",
            "MiXeD CaSe ABC_def_123",
            "a-b a--b a/b a@b.c #tag $5.00 (paren) [x] {y}",
            "...,,,;;;:::'''___",
        ] {
            assert_eq!(fast(text), reference(text), "{text:?}");
            assert_eq!(fast(text), reference_general(text), "{text:?}");
        }
    }

    #[test]
    fn analyzer_ascii_path_matches_the_unicode_path() {
        let texts = ["The Runners' RUNNING: e.g. 3.14, a_b, don't", "x y   z", "ünïcode Café done"];
        for stem in [false, true] {
            for max in [1, 3, 64] {
                let a = Analyzer { stem, max_token_len: max };
                let s = a.stemmer();
                for t in texts {
                    assert_eq!(a.tokenize_with(t, s.as_ref()), a.tokenize_unicode(t, s.as_ref()), "{t:?} {a:?}");
                }
            }
        }
        // words over 64 bytes go through the owned buffer
        let long = format!("{} b {}", "A".repeat(70), "C".repeat(64));
        let a = Analyzer { stem: false, max_token_len: 100 };
        assert_eq!(a.tokenize(&long), vec!["a".repeat(70), "b".into(), "c".repeat(64)]);
        // invalid UTF-8 is read as U+FFFD, as before
        let mut got = Vec::new();
        Analyzer::default().each_term(b"ab\xffcd ef", None, |t| got.push(t.to_owned()));
        assert_eq!(got, reference(&String::from_utf8_lossy(b"ab\xffcd ef")));
    }

    proptest! {
        #![proptest_config(config())]

        #[test]
        fn ascii_fast_path_matches_unicode_words(text in tricky_ascii()) {
            prop_assert_eq!(fast(&text), reference(&text));
            prop_assert_eq!(fast(&text), reference_general(&text));
        }

        #[test]
        fn analyzer_matches_the_unicode_path(text in tricky_ascii(), stem: bool, max in 1usize..12) {
            let a = Analyzer { stem, max_token_len: max };
            let s = a.stemmer();
            prop_assert_eq!(a.tokenize_with(&text, s.as_ref()), a.tokenize_unicode(&text, s.as_ref()));
        }
    }
}
