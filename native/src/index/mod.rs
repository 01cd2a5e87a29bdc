//! Secondary-index segments: one container format, three kinds.
//!
//! A segment indexes the rows of an ordered list of fragments. Inside the
//! segment a row is named by its *local address* `(ordinal << 32) | offset`,
//! where `ordinal` is the fragment's position in that list; the manifest maps
//! ordinals to fragment ids (docs/FORMAT.md, "Indices"). Segments are thus
//! written before their fragments have ids (compaction outputs) and never
//! rewritten when fragments come and go.
//!
//! ```text
//! segment   := block* directory footer
//! footer    := dir_offset u64 | dir_len u64 | dir_crc32 u32 | kind u8 | version u8 | 0u16 | "LMNIDX01"
//! ```
//! Blocks are read individually (ranged GETs) and checked against the crc32
//! the directory records for them. Readers get the directory once and then
//! ask which blocks a query needs ([`SegmentReader::blocks_for_ranges`],
//! [`fts::Directory::term_blocks`]); the caller fetches and caches them. Key
//! encodings are [`crate::keys`]; the layouts per kind are in `btree`, `bitmap`
//! and `fts`.

pub mod bitmap;
pub mod btree;
mod codec;
pub mod fts;
pub mod keys;
#[cfg(test)]
mod corrupt_tests;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};

pub use codec::BlockRef;
pub use keys::{Key, KeyColumn, KeyRange, Scalar};

use crate::error::{Error, Result};
use codec::{Dec, Enc};

pub const MAGIC: &[u8; 8] = b"LMNIDX01";
pub const FOOTER_LEN: usize = 32;
/// The oldest segment format version this build reads.
pub const FORMAT_VERSION: u8 = 1;

/// The version a segment of `kind` is written in: full-text segments with packed postings (runs of
/// bit-packed address gaps, docs/FORMAT.md §10.3) are version 2, so a build that reads only version 1
/// refuses them as "a newer format: upgrade Lamina" rather than as corrupt blocks; this build reads
/// version-1 full-text segments too. B-tree and bitmap segments are unchanged: version 1.
pub fn written_version(kind: Kind) -> u8 {
    match kind {
        Kind::Fts => 2,
        Kind::BTree | Kind::Bitmap => FORMAT_VERSION,
    }
}

/// Local address of a row inside a segment.
pub fn local_address(ordinal: u32, offset: u32) -> u64 {
    ((ordinal as u64) << 32) | offset as u64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    BTree = 1,
    Bitmap = 2,
    Fts = 3,
}

impl Kind {
    pub fn parse(name: &str) -> Result<Kind> {
        match name {
            "btree" => Ok(Kind::BTree),
            "bitmap" => Ok(Kind::Bitmap),
            "fts" => Ok(Kind::Fts),
            other => Err(Error::InvalidArgument(format!("unknown index kind {other:?}; kinds: btree, bitmap, fts"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::BTree => "btree",
            Kind::Bitmap => "bitmap",
            Kind::Fts => "fts",
        }
    }

    fn from_u8(v: u8, object: &str) -> Result<Kind> {
        match v {
            1 => Ok(Kind::BTree),
            2 => Ok(Kind::Bitmap),
            3 => Ok(Kind::Fts),
            _ => Err(corrupt(object, format!("unknown index kind {v}"))),
        }
    }
}

/// The first `i` in `0..n` where `pred(i)` is false (`pred` true then false), like a slice's
/// `partition_point` over positions that are read in place (keys and addresses inside a stored block).
pub(crate) fn partition_point(n: usize, pred: impl Fn(usize) -> bool) -> usize {
    let (mut lo, mut hi) = (0, n);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if pred(mid) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

pub(crate) fn corrupt(object: &str, reason: impl Into<String>) -> Error {
    Error::Corrupt { object: object.to_string(), reason: reason.into() }
}

/// One segment being written: blocks are appended, then the directory and footer.
pub(crate) struct SegmentWriter {
    buf: Vec<u8>,
}

impl SegmentWriter {
    pub fn new() -> Self {
        SegmentWriter { buf: Vec::new() }
    }

    pub fn block(&mut self, bytes: &[u8]) -> BlockRef {
        let r = BlockRef { offset: self.buf.len() as u64, len: bytes.len() as u32, crc: crc32fast::hash(bytes) };
        self.buf.extend_from_slice(bytes);
        r
    }

    pub fn finish(mut self, kind: Kind, directory: Enc) -> Vec<u8> {
        let dir = directory.into_bytes();
        let dir_offset = self.buf.len() as u64;
        self.buf.extend_from_slice(&dir);
        let mut footer = Enc::default();
        footer.u64(dir_offset);
        footer.u64(dir.len() as u64);
        footer.u32(crc32fast::hash(&dir));
        footer.u8(kind as u8);
        footer.u8(written_version(kind));
        footer.u16(0);
        footer.raw(MAGIC);
        self.buf.extend_from_slice(&footer.into_bytes());
        self.buf
    }
}

/// Where the directory is, from the last [`FOOTER_LEN`] bytes of a segment.
#[derive(Clone, Copy, Debug)]
pub struct Footer {
    pub dir_offset: u64,
    pub dir_len: u64,
    pub dir_crc: u32,
    pub kind: Kind,
}

pub fn parse_footer(tail: &[u8], file_len: u64, object: &str) -> Result<Footer> {
    if tail.len() < FOOTER_LEN || file_len < FOOTER_LEN as u64 {
        return Err(corrupt(object, format!("{file_len} bytes is too short for an index segment (truncated?)")));
    }
    let f = &tail[tail.len() - FOOTER_LEN..];
    if &f[24..32] != MAGIC {
        return Err(corrupt(object, "no index-segment magic at the end (truncated or not a Lamina index file)"));
    }
    let mut d = Dec::new(f, object);
    let dir_offset = d.u64()?;
    let dir_len = d.u64()?;
    let dir_crc = d.u32()?;
    let kind = Kind::from_u8(d.u8()?, object)?;
    let version = d.u8()?;
    if !(FORMAT_VERSION..=written_version(kind)).contains(&version) {
        return Err(corrupt(object, format!(
            "{} index format version {version}; this build reads versions {FORMAT_VERSION} to {}: upgrade Lamina",
            kind.name(), written_version(kind))));
    }
    if dir_offset.checked_add(dir_len).and_then(|end| end.checked_add(FOOTER_LEN as u64)) != Some(file_len) {
        return Err(corrupt(object, format!("directory at {dir_offset}+{dir_len} does not end at the footer of a {file_len}-byte file")));
    }
    Ok(Footer { dir_offset, dir_len, dir_crc, kind })
}

/// The parsed directory of one segment: answers which blocks a query needs and
/// decodes those blocks.
#[derive(Debug)]
pub struct SegmentReader {
    pub object: String,
    pub kind: Kind,
    pub rows: u64,
    pub ordinals: u32,
    body: Body,
}

#[derive(Debug)]
enum Body {
    BTree(btree::Directory),
    Bitmap(bitmap::Directory),
    Fts(fts::Directory),
}

impl SegmentReader {
    pub fn open(footer: &Footer, directory: &[u8], object: &str) -> Result<SegmentReader> {
        if directory.len() as u64 != footer.dir_len || crc32fast::hash(directory) != footer.dir_crc {
            return Err(corrupt(object, "index directory checksum mismatch"));
        }
        let mut d = Dec::new(directory, object);
        let kind = Kind::from_u8(d.u8()?, object)?;
        if kind != footer.kind {
            return Err(corrupt(object, "directory kind differs from the footer's"));
        }
        let rows = d.u64()?;
        let ordinals = d.u32()?;
        let body = match kind {
            Kind::BTree => Body::BTree(btree::Directory::decode(&mut d)?),
            Kind::Bitmap => Body::Bitmap(bitmap::Directory::decode(&mut d)?),
            Kind::Fts => Body::Fts(fts::Directory::decode(&mut d)?),
        };
        d.finish()?;
        Ok(SegmentReader { object: object.to_string(), kind, rows, ordinals, body })
    }

    /// Opens a whole segment held in memory.
    pub fn from_bytes(bytes: &[u8], object: &str) -> Result<SegmentReader> {
        let footer = parse_footer(bytes, bytes.len() as u64, object)?;
        let start = footer.dir_offset as usize;
        SegmentReader::open(&footer, &bytes[start..start + footer.dir_len as usize], object)
    }

    pub fn key_type(&self) -> Option<keys::KeyType> {
        match &self.body {
            Body::BTree(b) => Some(b.key_type),
            Body::Bitmap(b) => Some(b.key_type),
            Body::Fts(_) => None,
        }
    }

    fn wrong_kind(&self, what: &str) -> Error {
        Error::InvalidArgument(format!("{} is a {} index segment; it cannot answer {what}", self.object, self.kind.name()))
    }

    /// Blocks (id, ref) a range query reads.
    pub fn blocks_for_ranges(&self, ranges: &[KeyRange]) -> Result<Vec<(u32, BlockRef)>> {
        match &self.body {
            Body::BTree(b) => Ok(b.blocks_for(ranges)),
            Body::Bitmap(b) => Ok(b.blocks_for(ranges)),
            Body::Fts(_) => Err(self.wrong_kind("value ranges")),
        }
    }

    /// Sorted, distinct local addresses of the rows whose key is in any of `ranges`;
    /// `blocks` are the bytes of (at least) the blocks [`Self::blocks_for_ranges`] named.
    pub fn lookup(&self, ranges: &[KeyRange], blocks: &[(u32, &[u8])]) -> Result<Vec<u64>> {
        let by_id: std::collections::HashMap<u32, &[u8]> = blocks.iter().copied().collect();
        let get = |id: u32| -> Result<&[u8]> {
            let bytes = *by_id
                .get(&id)
                .ok_or_else(|| Error::InvalidArgument(format!("block {id} of {} was not supplied", self.object)))?;
            self.check_block(id, bytes)?;
            Ok(bytes)
        };
        match &self.body {
            Body::BTree(b) => b.lookup(ranges, get, &self.object),
            Body::Bitmap(b) => b.lookup(ranges, get, &self.object),
            Body::Fts(_) => Err(self.wrong_kind("value ranges")),
        }
    }

    fn block_ref(&self, id: u32) -> Option<BlockRef> {
        match &self.body {
            Body::BTree(b) => b.pages.get(id as usize).map(|p| p.block),
            Body::Bitmap(b) => b.values.get(id as usize).map(|v| v.block),
            Body::Fts(f) => f.block(id),
        }
    }

    /// Block `id` sliced out of the whole segment file `file`, checked.
    pub(crate) fn stored_block<'a>(&self, file: &'a [u8], id: u32) -> Result<&'a [u8]> {
        let r = self.block_ref(id).ok_or_else(|| corrupt(&self.object, format!("no block {id}")))?;
        let start = r.offset as usize;
        let bytes = file
            .get(start..start.saturating_add(r.len as usize))
            .ok_or_else(|| corrupt(&self.object, format!("block {id} lies outside the file")))?;
        self.check_block(id, bytes)?;
        Ok(bytes)
    }

    /// Checks fetched bytes against the directory's crc32 for block `id`.
    pub fn check_block(&self, id: u32, bytes: &[u8]) -> Result<()> {
        let r = self.block_ref(id).ok_or_else(|| corrupt(&self.object, format!("no block {id}")))?;
        if bytes.len() != r.len as usize || crc32fast::hash(bytes) != r.crc {
            return Err(corrupt(&self.object, format!("block {id} at byte {} fails its checksum", r.offset)));
        }
        Ok(())
    }

    pub fn fts(&self) -> Result<&fts::Directory> {
        match &self.body {
            Body::Fts(f) => Ok(f),
            _ => Err(self.wrong_kind("text queries")),
        }
    }
}

/// Writes `bytes` to `path` (never replacing a file) and fsyncs it.
pub fn write_segment_file(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let shown = path.display().to_string();
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(path)
        .map_err(|e| Error::io(&shown, e))?;
    f.write_all(bytes).map_err(|e| Error::io(&shown, e))?;
    f.sync_all().map_err(|e| Error::io(&shown, e))?;
    Ok(())
}

/// Common directory header: kind, rows indexed, fragment ordinals.
pub(crate) fn directory_header(kind: Kind, rows: u64, ordinals: u32) -> Enc {
    let mut e = Enc::default();
    e.u8(kind as u8);
    e.u64(rows);
    e.u32(ordinals);
    e
}

/// A built segment: its bytes and summary.
#[derive(Debug)]
pub struct Built {
    pub bytes: Vec<u8>,
    pub rows: u64,
    pub ordinals: u32,
}

/// Merges segments of one kind covering disjoint ordinals into one.
pub fn merge(kind: Kind, inputs: &[(&[u8], String)], options: &BuildOptions) -> Result<Built> {
    let readers: Vec<(SegmentReader, &[u8])> = inputs
        .iter()
        .map(|(bytes, name)| Ok((SegmentReader::from_bytes(bytes, name)?, *bytes)))
        .collect::<Result<_>>()?;
    for (r, _) in &readers {
        if r.kind != kind {
            return Err(Error::InvalidArgument(format!("cannot merge {} segment {} into a {} index", r.kind.name(), r.object, kind.name())));
        }
    }
    match kind {
        Kind::BTree => btree::merge(&readers, options),
        Kind::Bitmap => bitmap::merge(&readers, options),
        Kind::Fts => fts::merge(&readers, options),
    }
}

/// Options of a build; unused ones are ignored by a kind.
#[derive(Clone, Debug)]
pub struct BuildOptions {
    /// BTree: entries per page (the unit of a lookup read).
    pub page_entries: usize,
    /// Bitmap: refuse a segment with more distinct values than this.
    pub max_bitmap_values: usize,
    /// FTS: analyzer.
    pub analyzer: fts::Analyzer,
}

impl Default for BuildOptions {
    fn default() -> Self {
        BuildOptions { page_entries: 4096, max_bitmap_values: 65_536, analyzer: fts::Analyzer::default() }
    }
}

impl BuildOptions {
    pub fn validate(&self) -> Result<()> {
        if self.page_entries == 0 || self.page_entries > 1 << 20 {
            return Err(Error::InvalidArgument(format!("page_entries must be in 1..=1048576, got {}", self.page_entries)));
        }
        if self.max_bitmap_values == 0 {
            return Err(Error::InvalidArgument("max_bitmap_values must be at least 1".into()));
        }
        Ok(())
    }
}

/// Builds one segment and, with `path`, writes it there ([`write_segment_file`]);
/// returns it with the checksum of its bytes (`"crc32c:%08x"`).
pub fn build_segment(kind: Kind, inputs: Vec<(u32, KeyColumn)>, path: Option<&Path>, options: &BuildOptions) -> Result<(Built, String)> {
    let built = build(kind, inputs, options)?;
    let checksum = crate::io::checksum(&built.bytes);
    if let Some(p) = path {
        write_segment_file(p, &built.bytes)?;
    }
    Ok((built, checksum))
}

/// Merges the local segment files `(path, name for errors)` into a new file `output`
/// ([`merge`], [`write_segment_file`]); returns the merged segment and its checksum.
pub fn merge_files(kind: Kind, inputs: &[(PathBuf, String)], output: &Path, options: &BuildOptions) -> Result<(Built, String)> {
    let mut data = Vec::with_capacity(inputs.len());
    for (path, name) in inputs {
        data.push((std::fs::read(path).map_err(|e| Error::io(path.display().to_string(), e))?, name.clone()));
    }
    let refs: Vec<(&[u8], String)> = data.iter().map(|(b, n)| (b.as_slice(), n.clone())).collect();
    let built = merge(kind, &refs, options)?;
    let checksum = crate::io::checksum(&built.bytes);
    write_segment_file(output, &built.bytes)?;
    Ok((built, checksum))
}

/// Builds one segment from `(ordinal, key column)` inputs.
pub fn build(kind: Kind, inputs: Vec<(u32, KeyColumn)>, options: &BuildOptions) -> Result<Built> {
    options.validate()?;
    let ordinals = inputs.iter().map(|(o, _)| *o + 1).max().unwrap_or(0);
    match kind {
        Kind::BTree => btree::build(inputs, ordinals, options),
        Kind::Bitmap => bitmap::build(inputs, ordinals, options),
        Kind::Fts => fts::build(inputs, ordinals, options),
    }
}
