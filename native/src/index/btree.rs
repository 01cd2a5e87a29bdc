//! BTree segments: every (key, local address) pair sorted by key then address,
//! cut into pages of `page_entries`; the directory keeps each page's first and
//! last key, so a lookup reads only the pages its ranges overlap.
//!
//! ```text
//! directory := header | key_type u8 | pages u32 | (block, count u32, min key, max key)*
//! page      := count u32 | keys | addresses u64*count
//! keys      := u64*count (numeric) | lengths u32*count, bytes (bytes keys)
//! key       := u64 (numeric) | len u32, bytes
//! ```

use rayon::prelude::*;

use super::codec::{Dec, Enc};
use super::keys::{Key, KeyColumn, KeyRange, KeyType};
use super::{corrupt, directory_header, local_address, partition_point, BlockRef, BuildOptions, Built, Kind, SegmentReader, SegmentWriter};
use crate::error::{Error, Result};

#[derive(Debug)]
pub struct Page {
    pub block: BlockRef,
    pub count: u32,
    pub min: Key,
    pub max: Key,
}

#[derive(Debug)]
pub struct Directory {
    pub key_type: KeyType,
    pub pages: Vec<Page>,
}

pub(crate) fn decode_key(d: &mut Dec<'_, '_>, key_type: KeyType) -> Result<Key> {
    Ok(if key_type.is_numeric() { Key::Num(d.u64()?) } else { Key::Bytes(d.bytes()?.to_vec()) })
}

pub(crate) fn encode_key(e: &mut Enc, key: &Key) {
    match key {
        Key::Num(v) => e.u64(*v),
        Key::Bytes(b) => e.bytes(b),
    }
}

impl Directory {
    pub(crate) fn decode(d: &mut Dec<'_, '_>) -> Result<Directory> {
        let key_type = KeyType::from_u8(d.u8()?, d.object())?;
        let n = d.count(24)?;
        let mut pages = Vec::with_capacity(n);
        for _ in 0..n {
            let block = d.block()?;
            let count = d.u32()?;
            let min = decode_key(d, key_type)?;
            let max = decode_key(d, key_type)?;
            pages.push(Page { block, count, min, max });
        }
        Ok(Directory { key_type, pages })
    }

    /// Index range of pages that may hold keys of `r` (pages are in key order).
    fn page_span(&self, r: &KeyRange) -> std::ops::Range<usize> {
        let start = self.pages.partition_point(|p| !r.above_lo(&p.max));
        let end = start + self.pages[start..].partition_point(|p| r.below_hi(&p.min));
        start..end
    }

    pub fn blocks_for(&self, ranges: &[KeyRange]) -> Vec<(u32, BlockRef)> {
        let mut ids: Vec<usize> = ranges.iter().flat_map(|r| self.page_span(r)).collect();
        ids.sort_unstable();
        ids.dedup();
        ids.into_iter().map(|i| (i as u32, self.pages[i].block)).collect()
    }

    pub fn lookup<'b>(&self, ranges: &[KeyRange], get: impl Fn(u32) -> Result<&'b [u8]>, object: &str) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        // Ranges come sorted (an IN list's points): a page that serves a run of them is decoded once.
        let mut last: Option<(usize, PageView<'b>)> = None;
        for r in ranges {
            for i in self.page_span(r) {
                if last.as_ref().is_none_or(|(at, _)| *at != i) {
                    last = Some((i, PageView::decode(get(i as u32)?, self.key_type, object)?));
                }
                if let Some((_, page)) = &last {
                    page.collect(r, &mut out);
                }
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }
}

/// One page, read in place: numeric keys and addresses stay little-endian bytes of the page (a lookup
/// binary-searches them without copying the page); bytes keys borrow from it.
struct PageView<'a> {
    nums: &'a [u8],
    bytes: Vec<&'a [u8]>,
    addrs: &'a [u8],
}

fn u64_at(raw: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&raw[i * 8..i * 8 + 8]);
    u64::from_le_bytes(a)
}


impl<'a> PageView<'a> {
    fn decode(buf: &'a [u8], key_type: KeyType, object: &str) -> Result<PageView<'a>> {
        let mut d = Dec::new(buf, object);
        let n = d.u32()? as usize;
        let wide = n.checked_mul(8).ok_or_else(|| crate::error::Error::Corrupt { object: object.to_string(), reason: "length overflow".into() })?;
        let (mut nums, mut bytes): (&[u8], Vec<&[u8]>) = (&[], Vec::new());
        if key_type.is_numeric() {
            nums = d.take(wide)?;
        } else {
            let lens = d.u32s(n)?;
            bytes.reserve(n);
            for len in lens {
                bytes.push(d.take(len as usize)?);
            }
        }
        let addrs = d.take(wide)?;
        d.finish()?;
        Ok(PageView { nums, bytes, addrs })
    }

    fn collect(&self, r: &KeyRange, out: &mut Vec<u64>) {
        let (lo, hi) = if !self.nums.is_empty() {
            let n = self.nums.len() / 8;
            let lo = partition_point(n, |i| !r.above_lo(&Key::Num(u64_at(self.nums, i))));
            let hi = lo + partition_point(n - lo, |i| r.below_hi(&Key::Num(u64_at(self.nums, lo + i))));
            (lo, hi)
        } else {
            let above = |k: &[u8]| match &r.lo {
                None => true,
                Some((Key::Bytes(lo), incl)) => k > lo.as_slice() || (*incl && k == lo.as_slice()),
                Some((Key::Num(_), _)) => false,
            };
            let below = |k: &[u8]| match &r.hi {
                None => true,
                Some((Key::Bytes(hi), incl)) => k < hi.as_slice() || (*incl && k == hi.as_slice()),
                Some((Key::Num(_), _)) => false,
            };
            let lo = self.bytes.partition_point(|k| !above(k));
            let hi = lo + self.bytes[lo..].partition_point(|k| below(k));
            (lo, hi)
        };
        out.extend((lo..hi).map(|i| u64_at(self.addrs, i)));
    }
}

/// Sorted entries of a segment being built.
enum Entries<'a> {
    Num(Vec<(u64, u64)>),
    Bytes(Vec<(&'a [u8], u64)>),
}

impl Entries<'_> {
    fn len(&self) -> usize {
        match self {
            Entries::Num(v) => v.len(),
            Entries::Bytes(v) => v.len(),
        }
    }

    fn sort(&mut self) {
        match self {
            Entries::Num(v) => v.par_sort_unstable(),
            Entries::Bytes(v) => v.par_sort_unstable(),
        }
    }

    /// Sorts a concatenation of sorted runs: the stable sort finds the runs and only merges them.
    fn merge_runs(&mut self) {
        match self {
            Entries::Num(v) => v.sort(),
            Entries::Bytes(v) => v.sort(),
        }
    }
}

fn write(entries: Entries<'_>, key_type: KeyType, ordinals: u32, options: &BuildOptions) -> Built {
    let rows = entries.len() as u64;
    let per = options.page_entries;
    let mut w = SegmentWriter::new();
    let mut pages: Vec<(BlockRef, u32, Key, Key)> = Vec::new();
    match &entries {
        Entries::Num(v) => {
            for chunk in v.chunks(per) {
                let mut e = Enc::with_capacity(4 + chunk.len() * 16);
                e.u32(chunk.len() as u32);
                chunk.iter().for_each(|(k, _)| e.u64(*k));
                chunk.iter().for_each(|(_, a)| e.u64(*a));
                let block = w.block(&e.into_bytes());
                pages.push((block, chunk.len() as u32, Key::Num(chunk[0].0), Key::Num(chunk[chunk.len() - 1].0)));
            }
        }
        Entries::Bytes(v) => {
            for chunk in v.chunks(per) {
                let mut e = Enc::default();
                e.u32(chunk.len() as u32);
                chunk.iter().for_each(|(k, _)| e.u32(k.len() as u32));
                chunk.iter().for_each(|(k, _)| e.raw(k));
                chunk.iter().for_each(|(_, a)| e.u64(*a));
                let block = w.block(&e.into_bytes());
                let (first, last) = (chunk[0].0.to_vec(), chunk[chunk.len() - 1].0.to_vec());
                pages.push((block, chunk.len() as u32, Key::Bytes(first), Key::Bytes(last)));
            }
        }
    }
    let mut dir = directory_header(Kind::BTree, rows, ordinals);
    dir.u8(key_type as u8);
    dir.u32(pages.len() as u32);
    for (block, count, min, max) in &pages {
        dir.block(block);
        dir.u32(*count);
        encode_key(&mut dir, min);
        encode_key(&mut dir, max);
    }
    Built { bytes: w.finish(Kind::BTree, dir), rows, ordinals }
}

pub(crate) fn same_key_type(inputs: &[(u32, KeyColumn)]) -> Result<Option<KeyType>> {
    let mut t = None;
    for (_, c) in inputs {
        if t.is_some_and(|t| t != c.key_type) {
            return Err(Error::InvalidArgument("all fragments of one index segment must have the same key type".into()));
        }
        t = Some(c.key_type);
    }
    Ok(t)
}

pub fn build(inputs: Vec<(u32, KeyColumn)>, ordinals: u32, options: &BuildOptions) -> Result<Built> {
    let key_type = same_key_type(&inputs)?.unwrap_or(KeyType::I64);
    let total: usize = inputs.iter().map(|(_, c)| c.len()).sum();
    let mut entries = if key_type.is_numeric() {
        let mut v = Vec::with_capacity(total);
        for (ord, col) in &inputs {
            col.for_each_num(|off, k| v.push((k, local_address(*ord, off))));
        }
        Entries::Num(v)
    } else {
        let mut v = Vec::with_capacity(total);
        for (ord, col) in &inputs {
            col.for_each_bytes(|off, b| v.push((b, local_address(*ord, off))));
        }
        Entries::Bytes(v)
    };
    entries.sort();
    Ok(write(entries, key_type, ordinals, options))
}

pub(crate) fn merge(inputs: &[(SegmentReader, &[u8])], options: &BuildOptions) -> Result<Built> {
    let mut key_type = None;
    let mut views = Vec::new();
    let mut ordinals = 0;
    for (reader, bytes) in inputs {
        let dir = match &reader.body {
            super::Body::BTree(d) => d,
            _ => return Err(corrupt(&reader.object, "not a btree segment")),
        };
        if key_type.is_some_and(|t| t != dir.key_type) {
            return Err(Error::InvalidArgument(format!("{} has {} keys, other segments differ", reader.object, dir.key_type.name())));
        }
        key_type = Some(dir.key_type);
        ordinals = ordinals.max(reader.ordinals);
        for i in 0..dir.pages.len() {
            views.push(PageView::decode(reader.stored_block(bytes, i as u32)?, dir.key_type, &reader.object)?);
        }
    }
    let key_type = key_type.unwrap_or(KeyType::I64);
    let mut entries = if key_type.is_numeric() {
        Entries::Num(views.iter().flat_map(|p| (0..p.nums.len() / 8).map(move |i| (u64_at(p.nums, i), u64_at(p.addrs, i)))).collect())
    } else {
        Entries::Bytes(views.iter().flat_map(|p| p.bytes.iter().copied().enumerate().map(move |(i, k)| (k, u64_at(p.addrs, i)))).collect())
    };
    entries.merge_runs();
    Ok(write(entries, key_type, ordinals, options))
}
