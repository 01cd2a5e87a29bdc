//! Page splicing: a column chunk of a re-encoded output row group built from the data pages of
//! whole source column chunks, byte for byte, where re-encoding them would give the same kind of
//! pages again.
//!
//! A full rewrite merges small row groups into full-size ones. For a leaf whose pages the writer
//! never dictionary-encodes (fixed-width numbers: `file::writer` turns dictionaries off for them),
//! a source chunk is a run of self-contained data pages (levels and values, zstd), relocatable as
//! they are: the output chunk is their concatenation, with the chunk statistics merged and the
//! page index (offset and column index) carried over page by page. Decoding and re-encoding such
//! a leaf (for a fixed-size list, its repetition and definition levels value by value) was most of
//! a full rewrite's time. A leaf is spliced only where that keeps the file as good as a re-encode:
//!
//! - the source is copyable at all (exactly the table's schema, the current file version), and the
//!   piece is the whole source row group (no deleted row in it, not cut by an output boundary);
//! - the chunk is zstd, has no dictionary page and only non-dictionary encodings, and has an offset
//!   index whose pages tile the chunk exactly;
//! - its pages are not small: at least [`MIN_PAGE_ROWS`] rows on average (tiny pages
//!   must not be carried into compacted files: they would be read slowly forever). Smaller ones are re-encoded with the rest.
//!
//! Pages of a spliced chunk hold at most what the writer puts in a page (`DATA_PAGE_ROWS` rows,
//! give or take a write batch), like any re-encoded page.

use bytes::{Bytes, BytesMut};
use parquet::basic::{Compression, Type as PhysicalType};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{ColumnChunkMetaData, ColumnIndexBuilder, ParquetMetaData};
use parquet::file::page_index::column_index::ColumnIndexMetaData;
use parquet::file::page_index::offset_index::{OffsetIndexMetaData, PageLocation};
use parquet::file::reader::ChunkReader;
use parquet::file::statistics::Statistics;
use parquet::schema::types::ColumnDescPtr;

use super::Opened;
use crate::error::{Error, Result};
use crate::file::writer::DATA_PAGE_ROWS;

/// Fewest rows per page, on average over a source chunk, for its pages to be spliced.
pub(super) const MIN_PAGE_ROWS: u64 = DATA_PAGE_ROWS as u64 / 4;

/// Whether leaf `leaf` of row group `row_group` of `meta` can be spliced (the source's own
/// eligibility and the piece being whole are the caller's to check).
pub(super) fn spliceable(meta: &ParquetMetaData, row_group: usize, leaf: usize) -> bool {
    let rg = meta.row_group(row_group);
    let Some(chunk) = rg.columns().get(leaf) else { return false };
    let numeric = matches!(chunk.column_type(), PhysicalType::INT32 | PhysicalType::INT64 | PhysicalType::FLOAT | PhysicalType::DOUBLE);
    let plain = chunk.dictionary_page_offset().is_none()
        && chunk.encodings().all(|e| !matches!(e, parquet::basic::Encoding::PLAIN_DICTIONARY | parquet::basic::Encoding::RLE_DICTIONARY));
    if !numeric || !plain || !matches!(chunk.compression(), Compression::ZSTD(_)) {
        return false;
    }
    let page_index = meta.page_index_for_row_group(row_group);
    let Some(offsets) = page_index.offset_index(leaf) else { return false };
    let pages = &offsets.page_locations;
    let rows = u64::try_from(rg.num_rows()).unwrap_or(0);
    if pages.is_empty() || rows < MIN_PAGE_ROWS * pages.len() as u64 {
        return false;
    }
    // The pages must tile the chunk: first page at its start, each next one right after.
    let mut at = chunk.data_page_offset();
    for (i, page) in pages.iter().enumerate() {
        let first_ok = if i == 0 { page.first_row_index == 0 } else { page.first_row_index > pages[i - 1].first_row_index };
        if page.offset != at || page.compressed_page_size <= 0 || !first_ok {
            return false;
        }
        at += i64::from(page.compressed_page_size);
    }
    at == chunk.data_page_offset() + chunk.compressed_size()
}

/// One source chunk to splice: its file and row group.
pub(super) struct Part<'a> {
    pub src: &'a Opened,
    pub row_group: usize,
}

/// The chunk of leaf `leaf` made of the pages of `parts` (each checked by [`spliceable`]), in
/// order, as bytes and the close result `SerializedRowGroupWriter::append_column` takes
/// (offsets relative to the bytes; the writer moves them to where the chunk lands).
pub(super) fn splice(descr: ColumnDescPtr, parts: &[Part<'_>], leaf: usize) -> Result<(Bytes, ColumnCloseResult)> {
    let total: i64 = parts.iter().map(|p| p.src.meta().row_group(p.row_group).column(leaf).compressed_size()).sum();
    let mut buf = BytesMut::with_capacity(usize::try_from(total).unwrap_or(0));
    let mut locations = Vec::new();
    let mut index = Some(ColumnIndexBuilder::new(descr.physical_type()));
    let (mut rows, mut values, mut uncompressed) = (0i64, 0i64, 0i64);
    let mut stats: Option<Statistics> = None;
    let mut stats_known = true;
    let mut encodings = Vec::new();
    // Unsigned integers (UINT_32, UINT_64 …) are stored as INT32/INT64 but ordered as unsigned.
    let unsigned = descr.sort_order() == parquet::basic::SortOrder::UNSIGNED;
    for part in parts {
        let meta = part.src.meta();
        let rg = meta.row_group(part.row_group);
        let chunk = rg.column(leaf);
        let start = chunk.data_page_offset();
        let corrupt = |e: &dyn std::fmt::Display| part.src.corrupt(format!("column chunk {leaf} of row group {} cannot be read ({e})", part.row_group));
        let len = usize::try_from(chunk.compressed_size()).map_err(|e| corrupt(&e))?;
        let bytes = part.src.file.get_bytes(start as u64, len).map_err(|e| corrupt(&e))?;
        if bytes.len() != len {
            return Err(corrupt(&format!("{} bytes read of {len}", bytes.len())));
        }
        let page_index = meta.page_index_for_row_group(part.row_group);
        let offsets = page_index.offset_index(leaf).ok_or_else(|| corrupt(&"no offset index"))?;
        let base = buf.len() as i64;
        for page in &offsets.page_locations {
            locations.push(PageLocation {
                offset: base + (page.offset - start),
                compressed_page_size: page.compressed_page_size,
                first_row_index: rows + page.first_row_index,
            });
        }
        index = match (index, page_index.column_index(leaf)) {
            (Some(mut builder), Some(ci)) => append_pages(&mut builder, ci, offsets.page_locations.len()).then_some(builder),
            _ => None,
        };
        buf.extend_from_slice(&bytes);
        rows += rg.num_rows();
        values += chunk.num_values();
        uncompressed += chunk.uncompressed_size();
        for e in chunk.encodings() {
            if !encodings.contains(&e) {
                encodings.push(e);
            }
        }
        match chunk.statistics() {
            Some(s) if stats_known => stats = merge(stats, s, unsigned),
            _ => stats_known = false,
        }
        if stats.is_none() {
            stats_known = false;
        }
    }
    let compression = parts
        .first()
        .map(|p| p.src.meta().row_group(p.row_group).column(leaf).compression())
        .ok_or_else(|| Error::InvalidArgument("a spliced chunk needs at least one source chunk".into()))?;
    let mut builder = ColumnChunkMetaData::builder(descr)
        .set_compression(compression)
        .set_encodings(encodings)
        .set_total_compressed_size(buf.len() as i64)
        .set_total_uncompressed_size(uncompressed)
        .set_num_values(values)
        .set_data_page_offset(0);
    if let (true, Some(s)) = (stats_known, stats) {
        builder = builder.set_statistics(s);
    }
    let metadata = builder.build().map_err(|e| Error::InvalidArgument(format!("spliced chunk metadata: {e}")))?;
    let column_index = index.and_then(|b| b.build().ok());
    let close = ColumnCloseResult {
        bytes_written: buf.len() as u64,
        rows_written: rows as u64,
        metadata,
        bloom_filter: None,
        column_index,
        offset_index: Some(OffsetIndexMetaData { page_locations: locations, unencoded_byte_array_data_bytes: None }),
    };
    Ok((buf.freeze(), close))
}

/// Appends a source chunk's column index entries (`pages` of them); false when it cannot be carried.
fn append_pages(builder: &mut ColumnIndexBuilder, index: &ColumnIndexMetaData, pages: usize) -> bool {
    if index.num_pages() as usize != pages {
        return false;
    }
    fn bytes<T: Copy>(v: Option<&T>, to: impl Fn(T) -> Vec<u8>) -> Vec<u8> {
        v.map(|v| to(*v)).unwrap_or_default()
    }
    for i in 0..pages {
        let (min, max) = match index {
            ColumnIndexMetaData::INT32(c) => (bytes(c.min_value(i), |v: i32| v.to_le_bytes().to_vec()), bytes(c.max_value(i), |v: i32| v.to_le_bytes().to_vec())),
            ColumnIndexMetaData::INT64(c) => (bytes(c.min_value(i), |v: i64| v.to_le_bytes().to_vec()), bytes(c.max_value(i), |v: i64| v.to_le_bytes().to_vec())),
            ColumnIndexMetaData::FLOAT(c) => (bytes(c.min_value(i), |v: f32| v.to_le_bytes().to_vec()), bytes(c.max_value(i), |v: f32| v.to_le_bytes().to_vec())),
            ColumnIndexMetaData::DOUBLE(c) => (bytes(c.min_value(i), |v: f64| v.to_le_bytes().to_vec()), bytes(c.max_value(i), |v: f64| v.to_le_bytes().to_vec())),
            _ => return false,
        };
        let null_page = index.is_null_page(i);
        if !null_page && (min.is_empty() || max.is_empty()) {
            return false;
        }
        let Some(nulls) = index.null_count(i) else { return false };
        // Float pages must carry a NaN count, other types none (ColumnIndexBuilder's contract).
        let float = matches!(index, ColumnIndexMetaData::FLOAT(_) | ColumnIndexMetaData::DOUBLE(_));
        let nans = index.nan_count(i);
        if float != nans.is_some() {
            return false;
        }
        builder.append(null_page, min, max, nulls, nans);
    }
    true
}

/// Statistics of two chunks together (min of mins, max of maxes, sum of null counts); None when
/// either lacks what the sum needs (then the spliced chunk carries none: "may hold anything").
fn merge(acc: Option<Statistics>, next: &Statistics, unsigned: bool) -> Option<Statistics> {
    fn both<T: Copy>(a: Option<&T>, b: Option<&T>, pick: impl Fn(T, T) -> T) -> Option<Option<T>> {
        match (a, b) {
            (Some(a), Some(b)) => Some(Some(pick(*a, *b))),
            (Some(v), None) | (None, Some(v)) => Some(Some(*v)),
            (None, None) => Some(None),
        }
    }
    let nulls = |a: Option<u64>, b: Option<u64>| Some(a? + b?);
    let Some(acc) = acc else { return Some(next.clone()) };
    macro_rules! merged {
        ($a:expr, $b:expr, $ty:ty, $min:expr, $max:expr) => {{
            let min = both($a.min_opt(), $b.min_opt(), $min)?;
            let max = both($a.max_opt(), $b.max_opt(), $max)?;
            let n = nulls($a.null_count_opt(), $b.null_count_opt())?;
            if !($a.min_is_exact() && $a.max_is_exact() && $b.min_is_exact() && $b.max_is_exact()) {
                return None;
            }
            Some(Statistics::new::<$ty>(min, max, None, Some(n), false))
        }};
    }
    match (&acc, next) {
        (Statistics::Int32(a), Statistics::Int32(b)) if unsigned => {
            merged!(a, b, i32, |x: i32, y: i32| if (y as u32) < (x as u32) { y } else { x }, |x: i32, y: i32| if (y as u32) > (x as u32) { y } else { x })
        }
        (Statistics::Int64(a), Statistics::Int64(b)) if unsigned => {
            merged!(a, b, i64, |x: i64, y: i64| if (y as u64) < (x as u64) { y } else { x }, |x: i64, y: i64| if (y as u64) > (x as u64) { y } else { x })
        }
        (Statistics::Int32(a), Statistics::Int32(b)) => merged!(a, b, i32, |x: i32, y| x.min(y), |x: i32, y| x.max(y)),
        (Statistics::Int64(a), Statistics::Int64(b)) => merged!(a, b, i64, |x: i64, y| x.min(y), |x: i64, y| x.max(y)),
        // total_cmp: -0.0 below +0.0, so the Parquet rule for zero bounds survives the merge (NaN never is a bound).
        (Statistics::Float(a), Statistics::Float(b)) => merged!(a, b, f32, |x: f32, y: f32| if y.total_cmp(&x).is_lt() { y } else { x }, |x: f32, y: f32| if y.total_cmp(&x).is_gt() { y } else { x }),
        (Statistics::Double(a), Statistics::Double(b)) => merged!(a, b, f64, |x: f64, y: f64| if y.total_cmp(&x).is_lt() { y } else { x }, |x: f64, y: f64| if y.total_cmp(&x).is_gt() { y } else { x }),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn int32(min: i32, max: i32, nulls: u64) -> Statistics {
        Statistics::new::<i32>(Some(min), Some(max), None, Some(nulls), false)
    }

    #[test]
    fn merged_statistics_follow_the_column_sort_order() {
        // 0xFFFF_FFFE as a UINT_32 is the largest value, as a signed INT32 it is -2.
        let (a, b) = (int32(1, -2, 0), int32(5, 10, 3));
        let unsigned = merge(Some(a.clone()), &b, true).unwrap();
        assert_eq!(unsigned, int32(1, -2, 3));
        let signed = merge(Some(int32(-2, 1, 0)), &b, false).unwrap();
        assert_eq!(signed, int32(-2, 10, 3));
        assert_eq!(merge(Some(a), &b, false).unwrap(), int32(1, 10, 3), "the same bits ordered as signed");
        // A chunk without a null count makes the merged statistics unknown.
        let no_nulls = Statistics::new::<i32>(Some(0), Some(1), None, None, false);
        assert!(merge(Some(int32(1, 2, 0)), &no_nulls, false).is_none());
        // Float bounds: -0.0 stays the minimum next to +0.0.
        let f = |lo: f32, hi: f32| Statistics::new::<f32>(Some(lo), Some(hi), None, Some(0), false);
        assert_eq!(merge(Some(f(0.0, 1.0)), &f(-0.0, 0.5), false).unwrap(), f(-0.0, 1.0));
    }
}
