//! Full-text segments: an inverted index of analyzed terms with term
//! frequencies, plus every document's length, for BM25.
//!
//! - `analyzer`: how text becomes terms, the same for documents and queries;
//! - `format`: the segment's directory and blocks as stored, encoded and decoded;
//! - `build`: analyzing fragments (in parallel) and merging segments;
//! - `query`: BM25 over one segment, in two phases so that statistics are global.

mod analyzer;
mod build;
mod format;
mod query;

pub use analyzer::Analyzer;
pub(crate) use build::merge;
pub use build::build;
pub use format::{decode_lengths, decode_postings, Directory, FragmentStats, Term, NO_DOC};
pub use query::{bm25_top_k, DocLengths, SegmentQuery, ServedFragment, TermPostings, B, K1};
