//! Lamina data files: plain Parquet with fixed writer properties and a
//! Lamina file version in the key-value metadata (docs/FORMAT.md, "Data files").

use parquet::file::metadata::ParquetMetaData;

use crate::error::{Error, Result};

pub mod pages;
pub mod take;
pub mod writer;

/// Key-value metadata key holding the Lamina file version of a data file.
pub const FILE_VERSION_KEY: &str = "lamina.file_version";
/// The file version this build writes. Bump it only with a FORMAT.md change.
pub const FILE_VERSION: &str = "1";
/// Key-value metadata key naming the writer (informational).
pub const WRITER_KEY: &str = "lamina.writer";

/// Checks that every column chunk of `meta` (and every page its offset index lists) lies inside
/// the `len`-byte file at `path`, before any chunk is read or copied: parquet trusts these
/// offsets, and its arithmetic on them overflows (panics) on hostile values.
pub(crate) fn check_layout(meta: &ParquetMetaData, len: u64, path: &str) -> Result<()> {
    for row_group in 0..meta.num_row_groups() {
        let page_index = meta.page_index_for_row_group(row_group);
        let bad = |i: usize, what: String| Error::Corrupt {
            object: path.to_string(),
            reason: format!("column chunk {i} of row group {row_group}: {what}"),
        };
        for (i, column) in meta.row_group(row_group).columns().iter().enumerate() {
            let data = column.data_page_offset();
            let start = column.dictionary_page_offset().unwrap_or(data);
            let size = column.compressed_size();
            let end = start
                .checked_add(size)
                .filter(|end| start >= 4 && size > 0 && (start..*end).contains(&data))
                .filter(|end| u64::try_from(*end).is_ok_and(|e| e <= len));
            let Some(end) = end else {
                return Err(bad(i, format!("bytes {start}+{size} (data pages at {data}) are not inside the {len}-byte file")));
            };
            if let Some(offsets) = page_index.offset_index(i) {
                let mut previous = start;
                for page in &offsets.page_locations {
                    let inside = page.compressed_page_size > 0
                        && page.offset >= previous
                        && page.offset.checked_add(i64::from(page.compressed_page_size)).is_some_and(|e| e <= end);
                    if !inside {
                        return Err(bad(i, format!("a page at {}+{} lies outside the chunk or out of order", page.offset, page.compressed_page_size)));
                    }
                    previous = page.offset + i64::from(page.compressed_page_size);
                }
            }
        }
    }
    Ok(())
}
