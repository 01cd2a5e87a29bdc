//! Column chunks handed to arrow-rs's record-batch reader with their zstd pages decompressed here, by one
//! decompression context per thread, reused for every page of every file that thread reads.
//!
//! arrow-rs 60 makes a codec per column chunk it reads, and its zstd codec is a compressor *and* a
//! decompressor, each allocated and zeroed (`parquet/src/compression.rs`, `ZSTDCodec::new`). A lookup
//! touching one small chunk in each of thousands of fragments paid that for every chunk: about a quarter of
//! a cold `take`'s native time (perf). Here each chunk is read by arrow-rs's own page reader told the chunk
//! is uncompressed, so it hands over the pages as stored (headers parsed and CRCs checked by it, as before),
//! and [`ZstdPages`] decompresses each one before the decoders see it. Other codecs are read as before.

use std::cell::RefCell;
use std::sync::Arc;

use bytes::Bytes;
use parquet::arrow::arrow_reader::RowGroups;
use parquet::basic::Compression;
use parquet::column::page::{Page, PageIterator, PageMetadata, PageReader};
use parquet::errors::{ParquetError, Result};
use parquet::file::metadata::{ParquetMetaData, RowGroupMetaData};
use parquet::file::reader::ChunkReader;
use parquet::file::serialized_reader::SerializedPageReader;

use super::MAX_ZSTD_RATIO;

/// The row groups `row_groups` of one file, as arrow-rs's `ParquetRecordBatchReader::try_new_with_row_groups` reads them.
pub struct ChunkGroups<R> {
    pub reader: Arc<R>,
    pub metadata: Arc<ParquetMetaData>,
    pub row_groups: Vec<usize>,
}

impl<R: ChunkReader + 'static> RowGroups for ChunkGroups<R> {
    fn num_rows(&self) -> usize {
        self.row_groups.iter().map(|&g| usize::try_from(self.metadata.row_group(g).num_rows()).unwrap_or(0)).sum()
    }

    fn column_chunks(&self, i: usize) -> Result<Box<dyn PageIterator>> {
        Ok(Box::new(Chunks {
            reader: Arc::clone(&self.reader),
            metadata: Arc::clone(&self.metadata),
            column: i,
            row_groups: self.row_groups.clone().into_iter(),
        }))
    }

    fn row_groups(&self) -> Box<dyn Iterator<Item = &RowGroupMetaData> + '_> {
        Box::new(self.row_groups.iter().map(|&g| self.metadata.row_group(g)))
    }

    fn metadata(&self) -> &ParquetMetaData {
        &self.metadata
    }
}

/// One column's chunks, row group after row group.
struct Chunks<R> {
    reader: Arc<R>,
    metadata: Arc<ParquetMetaData>,
    column: usize,
    row_groups: std::vec::IntoIter<usize>,
}

impl<R: ChunkReader + 'static> Chunks<R> {
    fn pages(&self, g: usize) -> Result<Box<dyn PageReader>> {
        let group = self.metadata.row_group(g);
        let chunk = group.column(self.column);
        let locations = self.metadata.page_index().and_then(|ix| ix.page_locations(g, self.column).cloned());
        let rows = usize::try_from(group.num_rows()).map_err(|e| ParquetError::General(format!("row group {g}: {e}")))?;
        let reader = Arc::clone(&self.reader);
        if !matches!(chunk.compression(), Compression::ZSTD(_)) {
            return Ok(Box::new(SerializedPageReader::new(reader, chunk, rows, locations)?));
        }
        // No page of the chunk decompresses to more than the whole chunk's recorded size (headers included): a
        // hostile frame cannot make us allocate more than the footer says this chunk holds.
        let limit = usize::try_from(chunk.uncompressed_size()).unwrap_or(0).min(MAX_PAGE_BYTES);
        let stored = chunk.clone().into_builder().set_compression(Compression::UNCOMPRESSED).build()?;
        Ok(Box::new(ZstdPages { inner: SerializedPageReader::new(reader, &stored, rows, locations)?, limit }))
    }
}

impl<R: ChunkReader + 'static> Iterator for Chunks<R> {
    type Item = Result<Box<dyn PageReader>>;

    fn next(&mut self) -> Option<Self::Item> {
        let g = self.row_groups.next()?;
        Some(self.pages(g))
    }
}

impl<R: ChunkReader + 'static> PageIterator for Chunks<R> {}

/// The pages of one zstd chunk, read as stored and decompressed here.
struct ZstdPages<R: ChunkReader> {
    inner: SerializedPageReader<R>,
    /// The most bytes one page may decompress to.
    limit: usize,
}

impl<R: ChunkReader> Iterator for ZstdPages<R> {
    type Item = Result<Page>;

    fn next(&mut self) -> Option<Self::Item> {
        self.get_next_page().transpose()
    }
}

impl<R: ChunkReader> PageReader for ZstdPages<R> {
    fn get_next_page(&mut self) -> Result<Option<Page>> {
        self.inner.get_next_page()?.map(|p| decompress(p, self.limit)).transpose()
    }

    fn peek_next_page(&mut self) -> Result<Option<PageMetadata>> {
        self.inner.peek_next_page()
    }

    fn skip_next_page(&mut self) -> Result<()> {
        self.inner.skip_next_page()
    }

    fn supports_deferred_dictionary(&self) -> bool {
        self.inner.supports_deferred_dictionary()
    }

    fn take_deferred_dictionary(&mut self) -> Result<Option<Page>> {
        self.inner.take_deferred_dictionary()?.map(|p| decompress(p, self.limit)).transpose()
    }

    fn at_record_boundary(&mut self) -> Result<bool> {
        self.inner.at_record_boundary()
    }
}

thread_local! {
    /// This thread's zstd decompression context, made on its first zstd page.
    static CONTEXT: RefCell<Option<zstd::bulk::Decompressor<'static>>> = const { RefCell::new(None) };
}

/// `page` with its stored bytes decompressed to at most `limit` bytes (a v2 data page's levels are stored
/// uncompressed, before its values; a v2 page may also say it is not compressed at all).
///
/// What arrow-rs's own zstd path also checked and this cannot: that a page decompresses to exactly the size its
/// header records (`SerializedPageReader` does not hand the header over). The frame checks its own content size,
/// and the page CRC, when written, is checked by arrow-rs as before; a page whose header lies about its size is
/// decoded from what the frame holds, and the decoders bound every read by the buffer they are given.
fn decompress(page: Page, limit: usize) -> Result<Page> {
    Ok(match page {
        Page::DataPage { buf, num_values, encoding, def_level_encoding, rep_level_encoding, statistics } => {
            Page::DataPage { buf: unzstd(&buf, 0, limit)?, num_values, encoding, def_level_encoding, rep_level_encoding, statistics }
        }
        Page::DataPageV2 { buf, num_values, encoding, num_nulls, num_rows, def_levels_byte_len, rep_levels_byte_len, is_compressed, statistics } => {
            let levels = def_levels_byte_len as usize + rep_levels_byte_len as usize;
            if levels > buf.len() {
                return Err(ParquetError::General(format!("page levels of {levels} bytes in a page of {}", buf.len())));
            }
            let buf = if is_compressed { unzstd(&buf, levels, limit)? } else { buf };
            Page::DataPageV2 { buf, num_values, encoding, num_nulls, num_rows, def_levels_byte_len, rep_levels_byte_len, is_compressed: false, statistics }
        }
        Page::DictionaryPage { buf, num_values, encoding, is_sorted } => Page::DictionaryPage { buf: unzstd(&buf, 0, limit)?, num_values, encoding, is_sorted },
    })
}

/// `stored[..keep]` as is, then `stored[keep..]` decompressed (one or more zstd frames) to at most `limit` bytes.
fn unzstd(stored: &Bytes, keep: usize, limit: usize) -> Result<Bytes> {
    if keep > stored.len() {
        return Err(ParquetError::General(format!("page levels of {keep} bytes in a page of {}", stored.len())));
    }
    let frames = &stored[keep..];
    // Nor more than its stored bytes can hold: a zstd block holds at most 128 KiB and takes at least 4 bytes.
    let limit = limit.min(MAX_PAGE_BYTES).min(frames.len().saturating_mul(MAX_ZSTD_RATIO));
    if frames.is_empty() {
        return Ok(stored.clone()); // a page with no non-null values
    }
    // A frame records its content size (every writer we know sets it); without it, or with several frames,
    // the whole is decoded as a stream.
    let size = match zstd::zstd_safe::get_frame_content_size(frames) {
        Ok(Some(n)) => match usize::try_from(n) {
            Ok(n) if n <= limit => Some(n),
            _ => return Err(ParquetError::General(format!("zstd page of {n} bytes, more than its column chunk's or its {} stored bytes' {limit}", frames.len()))),
        },
        _ => None,
    };
    let mut out = Vec::with_capacity(keep + size.unwrap_or(frames.len().saturating_mul(4)));
    out.extend_from_slice(&stored[..keep]);
    if let Some(size) = size {
        let done = CONTEXT.with(|cell| -> std::io::Result<usize> {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                *slot = Some(zstd::bulk::Decompressor::new()?);
            }
            match slot.as_mut() {
                Some(context) => {
                    let start = out.len();
                    out.reserve(size);
                    let mut cursor = std::io::Cursor::new(&mut out);
                    cursor.set_position(start as u64);
                    context.decompress_to_buffer(frames, &mut cursor)
                }
                None => Err(std::io::Error::other("no zstd context")),
            }
        });
        match done {
            Ok(n) if n == size => return Ok(Bytes::from(out)),
            _ => out.truncate(keep), // several frames, or a size that lies: decoded as a stream below
        }
    }
    let bad = |e: std::io::Error| ParquetError::General(format!("zstd page: {e}"));
    let decoder = zstd::stream::read::Decoder::with_buffer(frames).map_err(bad)?;
    std::io::Read::read_to_end(&mut std::io::Read::take(decoder, limit as u64 + 1), &mut out).map_err(bad)?;
    if out.len() - keep > limit {
        return Err(ParquetError::General(format!("zstd page decompresses to more than its column chunk's or its {} stored bytes' {limit}", frames.len())));
    }
    Ok(Bytes::from(out))
}

/// A page's recorded content size above this is not trusted for an allocation up front (a page is at most
/// a few MiB as written; a hostile header must not reserve gigabytes).
const MAX_PAGE_BYTES: usize = 1 << 30;

#[cfg(test)]
mod tests {
    use std::fs::File;

    use arrow::record_batch::RecordBatch;
    use parquet::arrow::arrow_reader::{ArrowReaderMetadata, ArrowReaderOptions, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection};
    use parquet::arrow::{parquet_to_arrow_field_levels, ArrowWriter, ProjectionMask};
    use parquet::basic::ZstdLevel;
    use parquet::file::metadata::PageIndexPolicy;
    use parquet::file::properties::{WriterProperties, WriterVersion};

    use super::*;
    use crate::corrupt_tests::{data_batch, data_schema};

    fn write(path: &std::path::Path, props: WriterProperties) {
        let mut w = ArrowWriter::try_new(File::create(path).unwrap(), data_schema(), Some(props)).unwrap();
        for start in (0..4500).step_by(500) {
            w.write(&data_batch(start, 500)).unwrap();
        }
        w.close().unwrap();
    }

    fn ours(path: &std::path::Path, groups: Vec<usize>, roots: &[usize], selection: Option<RowSelection>) -> RecordBatch {
        let options = ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Optional);
        let meta = ArrowReaderMetadata::load(&File::open(path).unwrap(), options).unwrap();
        let mask = ProjectionMask::roots(meta.metadata().file_metadata().schema_descr(), roots.iter().copied());
        let levels = parquet_to_arrow_field_levels(meta.metadata().file_metadata().schema_descr(), mask, Some(meta.schema().fields())).unwrap();
        let groups = ChunkGroups { reader: Arc::new(File::open(path).unwrap()), metadata: Arc::clone(meta.metadata()), row_groups: groups };
        let reader = ParquetRecordBatchReader::try_new_with_row_groups(&levels, &groups, 700, selection).unwrap();
        let batches: Vec<RecordBatch> = reader.collect::<std::result::Result<_, _>>().unwrap();
        arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
    }

    fn arrows(path: &std::path::Path, groups: Vec<usize>, roots: &[usize], selection: Option<RowSelection>) -> RecordBatch {
        let options = ArrowReaderOptions::new().with_offset_index_policy(PageIndexPolicy::Optional);
        let b = ParquetRecordBatchReaderBuilder::try_new_with_options(File::open(path).unwrap(), options).unwrap();
        let mask = ProjectionMask::roots(b.parquet_schema(), roots.iter().copied());
        let mut b = b.with_row_groups(groups).with_projection(mask).with_batch_size(700);
        if let Some(s) = selection {
            b = b.with_row_selection(s);
        }
        let batches: Vec<RecordBatch> = b.build().unwrap().collect::<std::result::Result<_, _>>().unwrap();
        arrow::compute::concat_batches(&batches[0].schema(), &batches).unwrap()
    }

    /// Every codec and page layout reads the same rows as arrow-rs's own reader: zstd v1 and v2 data pages,
    /// with and without dictionaries, many pages per chunk, nulls, nested columns, row selections that skip
    /// pages by the offset index, and the chunks of other codecs passed through untouched.
    #[test]
    fn pages_read_through_a_reused_context_equal_arrow_rs_own_reader() {
        let dir = tempfile::tempdir().unwrap();
        let zstd = Compression::ZSTD(ZstdLevel::try_new(3).unwrap());
        let cases = [
            ("zstd-v1", WriterProperties::builder().set_compression(zstd).set_writer_version(WriterVersion::PARQUET_1_0)),
            ("zstd-v2", WriterProperties::builder().set_compression(zstd).set_writer_version(WriterVersion::PARQUET_2_0)),
            ("zstd-plain", WriterProperties::builder().set_compression(zstd).set_dictionary_enabled(false)),
            ("snappy", WriterProperties::builder().set_compression(Compression::SNAPPY)),
            ("none", WriterProperties::builder().set_compression(Compression::UNCOMPRESSED)),
        ];
        let selection = RowSelection::from_consecutive_ranges([0..3, 700..705, 1490..1510, 2999..3000].into_iter(), 3000);
        for (name, props) in cases {
            let path = dir.path().join(format!("{name}.parquet"));
            let props = props.set_max_row_group_row_count(Some(1500)).set_data_page_row_count_limit(128).set_write_batch_size(64).build();
            write(&path, props);
            for roots in [vec![0, 1, 2, 3, 4], vec![1], vec![4, 3]] {
                assert_eq!(ours(&path, vec![0, 1, 2], &roots, None), arrows(&path, vec![0, 1, 2], &roots, None), "{name} {roots:?}");
                assert_eq!(
                    ours(&path, vec![0, 2], &roots, Some(selection.clone())),
                    arrows(&path, vec![0, 2], &roots, Some(selection.clone())),
                    "{name} {roots:?} selected"
                );
            }
        }
    }

    /// A zstd page whose frame does not record its size, or that holds two frames, is still decoded (as a
    /// stream); its levels (v2) are kept as stored.
    #[test]
    fn frames_without_a_size_or_several_frames_are_decoded_as_a_stream() {
        let body = b"0123456789abcdef".repeat(300);
        let one = zstd::bulk::compress(&body, 3).unwrap();
        let mut no_size = Vec::new();
        {
            let mut enc = zstd::stream::write::Encoder::new(&mut no_size, 3).unwrap();
            enc.include_contentsize(false).unwrap();
            std::io::Write::write_all(&mut enc, &body).unwrap();
            enc.finish().unwrap();
        }
        assert_eq!(zstd::zstd_safe::get_frame_content_size(&no_size).ok().flatten(), None);
        let mut two = one.clone();
        two.extend_from_slice(&one);
        let levels = b"LEVELS";
        for (stored, want) in [(one.clone(), body.clone()), (no_size, body.clone()), (two, [body.clone(), body.clone()].concat())] {
            assert_eq!(unzstd(&Bytes::from(stored.clone()), 0, 1 << 20).unwrap().as_ref(), &want[..]);
            let with_levels = Bytes::from([&levels[..], &stored[..]].concat());
            assert_eq!(unzstd(&with_levels, levels.len(), 1 << 20).unwrap().as_ref(), &[&levels[..], &want[..]].concat()[..]);
        }
        assert!(unzstd(&Bytes::from_static(b"not zstd at all"), 0, 1 << 20).is_err());
        assert!(unzstd(&Bytes::from_static(b"ab"), 3, 1 << 20).is_err());
        // more than the column chunk records: refused, whether the frame says its size or not
        let bomb_sized = zstd::bulk::compress(&vec![0u8; 1 << 20], 3).unwrap();
        assert!(unzstd(&Bytes::from(bomb_sized), 0, 4096).is_err());
        let mut bomb = Vec::new();
        {
            let mut enc = zstd::stream::write::Encoder::new(&mut bomb, 3).unwrap();
            enc.include_contentsize(false).unwrap();
            std::io::Write::write_all(&mut enc, &vec![0u8; 1 << 20]).unwrap();
            enc.finish().unwrap();
        }
        assert!(unzstd(&Bytes::from(bomb.clone()), 0, 4096).is_err());
        assert_eq!(unzstd(&Bytes::from(bomb), 0, 1 << 20).unwrap().len(), 1 << 20);
    }
}
