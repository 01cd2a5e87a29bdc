//! Little-endian encoding of index directories and blocks, with bounds-checked
//! decoding: every read from stored bytes returns `Corrupt` instead of panicking.

use super::corrupt;
use crate::error::Result;

/// Where a block lives in its segment, and its crc32.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockRef {
    pub offset: u64,
    pub len: u32,
    pub crc: u32,
}

#[derive(Default)]
pub(crate) struct Enc(Vec<u8>);

impl Enc {
    pub fn with_capacity(n: usize) -> Self {
        Enc(Vec::with_capacity(n))
    }
    pub fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    pub fn u16(&mut self, v: u16) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    pub fn raw(&mut self, v: &[u8]) {
        self.0.extend_from_slice(v);
    }
    pub fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.raw(v);
    }
    pub fn block(&mut self, b: &BlockRef) {
        self.u64(b.offset);
        self.u32(b.len);
        self.u32(b.crc);
    }
    pub fn u32s(&mut self, v: &[u32]) {
        self.0.reserve(v.len() * 4);
        for x in v {
            self.u32(*x);
        }
    }
    pub fn into_bytes(self) -> Vec<u8> {
        self.0
    }
}

pub(crate) struct Dec<'a, 'o> {
    buf: &'a [u8],
    pos: usize,
    object: &'o str,
}

impl<'a, 'o> Dec<'a, 'o> {
    pub fn new(buf: &'a [u8], object: &'o str) -> Self {
        Dec { buf, pos: 0, object }
    }

    /// The object being decoded (for errors).
    pub fn object(&self) -> &'o str {
        self.object
    }

    pub fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        let end = self.pos.checked_add(n).filter(|e| *e <= self.buf.len()).ok_or_else(|| {
            corrupt(self.object, format!("needs {n} bytes at {} of a {}-byte record (truncated)", self.pos, self.buf.len()))
        })?;
        let out = &self.buf[self.pos..end];
        self.pos = end;
        Ok(out)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N]> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    pub fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    pub fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(self.array()?))
    }
    pub fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(self.array()?))
    }
    pub fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()? as usize;
        self.take(n)
    }
    pub fn block(&mut self) -> Result<BlockRef> {
        Ok(BlockRef { offset: self.u64()?, len: self.u32()?, crc: self.u32()? })
    }
    /// A count that must fit in the remaining bytes at `min_each` bytes per item.
    pub fn count(&mut self, min_each: usize) -> Result<usize> {
        let n = self.u32()? as usize;
        if n.saturating_mul(min_each.max(1)) > self.buf.len() - self.pos {
            return Err(corrupt(self.object, format!("count {n} at {} exceeds the record", self.pos - 4)));
        }
        Ok(n)
    }
    pub fn u64s(&mut self, n: usize) -> Result<Vec<u64>> {
        let raw = self.take(n.checked_mul(8).ok_or_else(|| corrupt(self.object, "length overflow"))?)?;
        Ok(raw.chunks_exact(8).map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]])).collect())
    }
    pub fn u32s(&mut self, n: usize) -> Result<Vec<u32>> {
        let raw = self.take(n.checked_mul(4).ok_or_else(|| corrupt(self.object, "length overflow"))?)?;
        Ok(raw.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
    }
    pub fn finish(&self) -> Result<()> {
        if self.pos != self.buf.len() {
            return Err(corrupt(self.object, format!("{} unexpected trailing bytes", self.buf.len() - self.pos)));
        }
        Ok(())
    }
}
