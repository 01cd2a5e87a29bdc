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

/// Checks what parquet's readers trust in the footer of the `len`-byte file at `path` before anything
/// is read, decoded or copied: every column chunk (and every page its offset index lists) lies inside
/// the file, since parquet's offset arithmetic overflows (panics) on hostile values; and every count
/// the readers size buffers from agrees with the others and with the bytes. A row group's row count
/// becomes the batch a whole chunk is decoded in (and the capacity reserved for it), so it must be
/// the sum the file records, the value count of each of its leaves, and cover its pages' first rows;
/// a fixed-size value wider than the whole file can hold, compressed as well as zstd can, cannot be in it.
pub(crate) fn check_layout(meta: &ParquetMetaData, len: u64, path: &str) -> Result<()> {
    let corrupt = |reason: String| Error::Corrupt { object: path.to_string(), reason };
    let descr = meta.file_metadata().schema_descr();
    for leaf in descr.columns() {
        let most = len.saturating_mul(MAX_ZSTD_RATIO as u64);
        if leaf.physical_type() == parquet::basic::Type::FIXED_LEN_BYTE_ARRAY && !u64::try_from(leaf.type_length()).is_ok_and(|w| w > 0 && w <= most) {
            return Err(corrupt(format!("column {} holds values of {} bytes each, more than a {len}-byte file can hold", leaf.path(), leaf.type_length())));
        }
    }
    let mut total = 0u64;
    for row_group in 0..meta.num_row_groups() {
        let rows = meta.row_group(row_group).num_rows();
        total = u64::try_from(rows)
            .ok()
            .and_then(|n| total.checked_add(n))
            .ok_or_else(|| corrupt(format!("row group {row_group} has {rows} rows")))?;
    }
    let declared = meta.file_metadata().num_rows();
    if u64::try_from(declared).ok() != Some(total) {
        return Err(corrupt(format!("the footer says {declared} rows, its row groups hold {total}")));
    }
    for row_group in 0..meta.num_row_groups() {
        let page_index = meta.page_index_for_row_group(row_group);
        let rows = meta.row_group(row_group).num_rows();
        let bad = |i: usize, what: String| corrupt(format!("column chunk {i} of row group {row_group}: {what}"));
        for (i, column) in meta.row_group(row_group).columns().iter().enumerate() {
            // A leaf outside any list has one value (or null) per row; inside a list, at least one
            // level per row (an empty or null list still has one).
            let values = column.num_values();
            let repeated = column.column_descr().max_rep_level() > 0;
            if values < 0 || (repeated && values < rows) || (!repeated && values != rows) {
                return Err(bad(i, format!("{values} values in a row group of {rows} rows")));
            }
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
                let mut first_row = None;
                for page in &offsets.page_locations {
                    let inside = page.compressed_page_size > 0
                        && page.offset >= previous
                        && page.offset.checked_add(i64::from(page.compressed_page_size)).is_some_and(|e| e <= end);
                    if !inside {
                        return Err(bad(i, format!("a page at {}+{} lies outside the chunk or out of order", page.offset, page.compressed_page_size)));
                    }
                    // Rows per page are the gaps between first rows (the last page's runs to the row
                    // group's end): they start at 0, grow, and stay inside the row group.
                    let ordered = match first_row {
                        None => page.first_row_index == 0,
                        Some(before) => page.first_row_index > before,
                    };
                    if !ordered || page.first_row_index >= rows.max(1) {
                        return Err(bad(i, format!("a page starting at row {} in a row group of {rows} rows", page.first_row_index)));
                    }
                    first_row = Some(page.first_row_index);
                    previous = page.offset + i64::from(page.compressed_page_size);
                }
            }
        }
    }
    Ok(())
}

/// Most bytes one stored byte of a zstd frame decompresses to: a block of at most 128 KiB in 4 bytes
/// (a 3-byte header and the one byte it repeats).
pub(crate) const MAX_ZSTD_RATIO: usize = (128 << 10) / 4;

/// Most bytes one decoded batch may reserve for one leaf's values ([`batch_rows`]).
pub(crate) const BATCH_BYTES: usize = 16 << 20;

/// Rows to decode at once, at most `want`, from the leaves `leaves` of `meta`: parquet reserves a
/// batch's capacity up front, per leaf (values of their fixed width, an offset per string, levels),
/// so the count is bounded by [`BATCH_BYTES`] over the widest leaf, never taken from the footer alone.
pub(crate) fn batch_rows(meta: &ParquetMetaData, leaves: impl IntoIterator<Item = usize>, want: usize) -> usize {
    let descr = meta.file_metadata().schema_descr();
    let widest = leaves
        .into_iter()
        .filter(|&l| l < descr.num_columns())
        .map(|l| {
            let leaf = descr.column(l);
            match leaf.physical_type() {
                parquet::basic::Type::FIXED_LEN_BYTE_ARRAY => usize::try_from(leaf.type_length()).unwrap_or(usize::MAX),
                parquet::basic::Type::INT96 => 12,
                _ => 8,
            }
        })
        .max()
        .unwrap_or(8)
        .max(8);
    want.clamp(1, (BATCH_BYTES / widest).max(1))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{FixedSizeBinaryArray, Int64Array};
    use arrow::datatypes::{DataType, Field, Schema};
    use arrow::record_batch::RecordBatch;
    use parquet::file::metadata::ParquetMetaDataReader;

    use super::*;

    /// Wide fixed-size values are decoded in fewer rows at once; a width the file cannot hold is corrupt.
    #[test]
    fn batches_are_bounded_by_the_widest_value_and_widths_by_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wide.parquet");
        let schema = Arc::new(Schema::new(vec![Field::new("id", DataType::Int64, false), Field::new("v", DataType::FixedSizeBinary(4096), true)]));
        let v = FixedSizeBinaryArray::try_from_sparse_iter_with_size((0..10u8).map(|i| (i % 3 != 0).then(|| vec![i; 4096])), 4096).unwrap();
        let batch = RecordBatch::try_new(Arc::clone(&schema), vec![Arc::new(Int64Array::from_iter_values(0..10)), Arc::new(v)]).unwrap();
        writer::write_file(&path, schema, &[batch], &writer::WriteOptions::default()).unwrap();
        let bytes = std::fs::read(&path).unwrap();
        let meta = ParquetMetaDataReader::new().parse_and_finish(&bytes::Bytes::from(bytes.clone())).unwrap();
        assert_eq!(batch_rows(&meta, [1], 1 << 20), BATCH_BYTES / 4096);
        assert_eq!(batch_rows(&meta, [0, 1], 100), 100);
        assert_eq!(batch_rows(&meta, [0], 1 << 40), BATCH_BYTES / 8);
        assert_eq!(batch_rows(&meta, [0], 0), 1);
        check_layout(&meta, bytes.len() as u64, "wide.parquet").unwrap();
        // 6 values of 4096 bytes fit in a 1 KB file (they compress); not in a file of 0 bytes.
        let err = check_layout(&meta, 0, "wide.parquet").unwrap_err();
        assert!(matches!(&err, Error::Corrupt { object, reason } if object == "wide.parquet" && reason.contains("4096 bytes each")), "{err}");
    }
}
