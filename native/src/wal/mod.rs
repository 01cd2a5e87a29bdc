//! The write-ahead log's native side: the row codec its transactions carry.
//!
//! Rows are encoded row-first (`row_first`): a producer appends rows one at a
//! time, and the applier either lifts them into Arrow columns or splits them into
//! one value per row for the memtable. The segment framing around those rows
//! (transaction entries with their checksums, claims, seals) lives in
//! `lamina/wal.py`, next to the store it writes to.

mod row_first;
#[cfg(test)]
mod tests;

pub use row_first::{check_schema, decode, decode_values, encode, split, Decoded};
