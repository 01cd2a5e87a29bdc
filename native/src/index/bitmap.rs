//! Bitmap segments: for each distinct key, a roaring bitmap (64-bit treemap,
//! portable serialization) of the local addresses holding it. For
//! low-cardinality columns; a segment refuses more than `max_bitmap_values`.
//!
//! ```text
//! directory := header | key_type u8 | values u32 | (key, block, rows u64)*   keys ascending
//! block     := RoaringTreemap serialization
//! ```

use std::collections::HashMap;

use roaring::RoaringTreemap;

use super::btree::{decode_key, encode_key, same_key_type};
use super::codec::Dec;
use super::keys::{Key, KeyColumn, KeyRange, KeyType};
use super::{corrupt, directory_header, local_address, BlockRef, BuildOptions, Built, Kind, SegmentReader, SegmentWriter};
use crate::error::{Error, Result};

#[derive(Debug)]
pub struct Value {
    pub key: Key,
    pub block: BlockRef,
    pub rows: u64,
}

#[derive(Debug)]
pub struct Directory {
    pub key_type: KeyType,
    pub values: Vec<Value>,
}

impl Directory {
    pub(crate) fn decode(d: &mut Dec<'_, '_>) -> Result<Directory> {
        let key_type = KeyType::from_u8(d.u8()?, d.object())?;
        let n = d.count(24)?;
        let mut values = Vec::with_capacity(n);
        for _ in 0..n {
            let key = decode_key(d, key_type)?;
            values.push(Value { key, block: d.block()?, rows: d.u64()? });
        }
        Ok(Directory { key_type, values })
    }

    fn matching(&self, ranges: &[KeyRange]) -> Vec<usize> {
        let mut ids: Vec<usize> = ranges
            .iter()
            .flat_map(|r| {
                let start = self.values.partition_point(|v| !r.above_lo(&v.key));
                let end = start + self.values[start..].partition_point(|v| r.below_hi(&v.key));
                start..end
            })
            .collect();
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Decodes value `i`'s bitmap; it must hold the rows the directory records (a few hostile
    /// bytes of run containers can describe billions of addresses).
    fn checked_bitmap(&self, i: usize, bytes: &[u8], object: &str) -> Result<RoaringTreemap> {
        let bitmap = decode_bitmap(bytes, object)?;
        if bitmap.len() != self.values[i].rows {
            return Err(corrupt(object, format!("bitmap block {i} holds {} rows, the directory says {}", bitmap.len(), self.values[i].rows)));
        }
        Ok(bitmap)
    }

    pub fn blocks_for(&self, ranges: &[KeyRange]) -> Vec<(u32, BlockRef)> {
        self.matching(ranges).into_iter().map(|i| (i as u32, self.values[i].block)).collect()
    }

    pub fn lookup<'b>(&self, ranges: &[KeyRange], get: impl Fn(u32) -> Result<&'b [u8]>, object: &str) -> Result<Vec<u64>> {
        let mut acc = RoaringTreemap::new();
        for i in self.matching(ranges) {
            acc |= self.checked_bitmap(i, get(i as u32)?, object)?;
        }
        Ok(acc.iter().collect())
    }
}

fn decode_bitmap(bytes: &[u8], object: &str) -> Result<RoaringTreemap> {
    RoaringTreemap::deserialize_from(bytes).map_err(|e| corrupt(object, format!("bitmap block is undecodable ({e})")))
}

fn too_many(n: usize, options: &BuildOptions) -> Error {
    Error::InvalidArgument(format!(
        "column has more than {} distinct values ({n} seen so far); a bitmap index is for low-cardinality columns: use a btree index",
        options.max_bitmap_values
    ))
}

fn write(values: Vec<(Key, RoaringTreemap)>, key_type: KeyType, ordinals: u32) -> Built {
    let mut w = SegmentWriter::new();
    let mut entries = Vec::with_capacity(values.len());
    let mut rows = 0;
    for (key, bitmap) in values {
        let mut buf = Vec::with_capacity(bitmap.serialized_size());
        bitmap.serialize_into(&mut buf).unwrap_or_else(|_| unreachable!("serializing into a Vec is infallible"));
        rows += bitmap.len();
        entries.push((key, w.block(&buf), bitmap.len()));
    }
    let mut dir = directory_header(Kind::Bitmap, rows, ordinals);
    dir.u8(key_type as u8);
    dir.u32(entries.len() as u32);
    for (key, block, n) in &entries {
        encode_key(&mut dir, key);
        dir.block(block);
        dir.u64(*n);
    }
    Built { bytes: w.finish(Kind::Bitmap, dir), rows, ordinals }
}

pub fn build(inputs: Vec<(u32, KeyColumn)>, ordinals: u32, options: &BuildOptions) -> Result<Built> {
    let key_type = same_key_type(&inputs)?.unwrap_or(KeyType::I64);
    let mut by_key: HashMap<Key, Vec<u64>> = HashMap::new();
    for (ord, col) in &inputs {
        if key_type.is_numeric() {
            let mut local: HashMap<u64, Vec<u64>> = HashMap::new();
            col.for_each_num(|off, k| local.entry(k).or_default().push(local_address(*ord, off)));
            if local.len() > options.max_bitmap_values {
                return Err(too_many(local.len(), options));
            }
            for (k, addrs) in local {
                by_key.entry(Key::Num(k)).or_default().extend(addrs);
            }
        } else if let Some((codes, values)) = col.dictionary() {
            // Dictionary-encoded strings: group by code, then resolve each code once.
            let mut per_code: Vec<Vec<u64>> = vec![Vec::new(); values.len()];
            for (off, code) in codes.iter().enumerate() {
                if let Some(v) = code.and_then(|c| per_code.get_mut(c as usize)) {
                    v.push(local_address(*ord, off as u32));
                }
            }
            let dict = KeyColumn::new(values)?;
            let mut names: Vec<Option<Vec<u8>>> = vec![None; per_code.len()];
            dict.for_each_bytes(|i, b| names[i as usize] = Some(b.to_vec()));
            for (name, addrs) in names.into_iter().zip(per_code) {
                if let (Some(name), false) = (name, addrs.is_empty()) {
                    by_key.entry(Key::Bytes(name)).or_default().extend(addrs);
                }
            }
        } else {
            let mut local: HashMap<&[u8], Vec<u64>> = HashMap::new();
            col.for_each_bytes(|off, b| local.entry(b).or_default().push(local_address(*ord, off)));
            if local.len() > options.max_bitmap_values {
                return Err(too_many(local.len(), options));
            }
            for (k, addrs) in local {
                by_key.entry(Key::Bytes(k.to_vec())).or_default().extend(addrs);
            }
        }
        if by_key.len() > options.max_bitmap_values {
            return Err(too_many(by_key.len(), options));
        }
    }
    let mut values: Vec<(Key, RoaringTreemap)> = by_key
        .into_iter()
        .map(|(k, mut addrs)| {
            if !addrs.is_sorted() {
                addrs.sort_unstable();
            }
            let bm = RoaringTreemap::from_sorted_iter(addrs).unwrap_or_else(|_| unreachable!("addresses were sorted"));
            (k, bm)
        })
        .collect();
    values.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(write(values, key_type, ordinals))
}

pub(crate) fn merge(inputs: &[(SegmentReader, &[u8])], options: &BuildOptions) -> Result<Built> {
    let mut key_type = None;
    let mut ordinals = 0;
    let mut by_key: std::collections::BTreeMap<Key, RoaringTreemap> = std::collections::BTreeMap::new();
    for (reader, bytes) in inputs {
        let dir = match &reader.body {
            super::Body::Bitmap(d) => d,
            _ => return Err(corrupt(&reader.object, "not a bitmap segment")),
        };
        if key_type.is_some_and(|t| t != dir.key_type) {
            return Err(Error::InvalidArgument(format!("{} has {} keys, other segments differ", reader.object, dir.key_type.name())));
        }
        key_type = Some(dir.key_type);
        ordinals = ordinals.max(reader.ordinals);
        for (i, v) in dir.values.iter().enumerate() {
            *by_key.entry(v.key.clone()).or_default() |= dir.checked_bitmap(i, reader.stored_block(bytes, i as u32)?, &reader.object)?;
        }
        if by_key.len() > options.max_bitmap_values {
            return Err(too_many(by_key.len(), options));
        }
    }
    Ok(write(by_key.into_iter().collect(), key_type.unwrap_or(KeyType::I64), ordinals))
}
