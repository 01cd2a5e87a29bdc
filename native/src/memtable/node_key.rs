//! How a key is stored in a skiplist node and compared.
//!
//! Numeric keys are one order-preserving `u64` ([`crate::keys`]). Byte keys
//! keep their first eight bytes as a big-endian `u64` prefix
//! ([`crate::keys::bytes_prefix`]), so most comparisons are one integer
//! comparison; the bytes themselves sit inline in the node when they fit in
//! [`INLINE`] bytes and in the node's allocation, after the value, otherwise.

use std::cmp::Ordering;

use crate::keys::bytes_prefix;

/// A key layout: what a node stores and what a search compares against.
pub(super) trait KeyFormat: 'static {
    /// The key as stored inline in a node.
    type Stored: Copy;
    /// The key a search holds (precomputed once per search).
    type Probe<'a>: Copy;

    /// Bytes the key needs outside the node header (0 when it is stored inline).
    fn spill_len(key: Self::Probe<'_>) -> usize;

    /// The stored form of `key`, copying any spilled bytes to `spill`.
    ///
    /// # Safety
    /// `spill` must be valid for writes of `spill_len(key)` bytes and outlive
    /// every use of the returned value (it is the node's own arena memory).
    unsafe fn store(key: Self::Probe<'_>, spill: *mut u8) -> Self::Stored;

    /// The key a stored value holds. Stored values only exist inside arena
    /// nodes (see [`KeyFormat::store`]), so their spilled bytes live as long as they do.
    fn load(stored: &Self::Stored) -> Self::Probe<'_>;

    /// `stored` compared with `key`.
    fn compare(stored: &Self::Stored, key: Self::Probe<'_>) -> Ordering;

    /// Two keys compared (the order `compare` follows).
    fn order(a: Self::Probe<'_>, b: Self::Probe<'_>) -> Ordering;

    /// A hash of `key` for the point-lookup index; `seed` is per memtable.
    fn hash(key: Self::Probe<'_>, seed: u64) -> u64;
}

/// The high and low halves of a 128-bit product, folded (wyhash's mixer).
#[inline(always)]
fn fold_mul(a: u64, b: u64) -> u64 {
    let r = (a as u128) * (b as u128);
    (r as u64) ^ ((r >> 64) as u64)
}

const K1: u64 = 0xA076_1D64_78BD_642F;
const K2: u64 = 0xE703_7ED1_A0B4_28DB;

/// `int64` / `uint64` keys as their order-preserving `u64`.
pub(super) struct NumKey;

impl KeyFormat for NumKey {
    type Stored = u64;
    type Probe<'a> = u64;

    #[inline]
    fn spill_len(_: u64) -> usize {
        0
    }

    #[inline]
    unsafe fn store(key: u64, _: *mut u8) -> u64 {
        key
    }

    #[inline]
    fn load(stored: &u64) -> u64 {
        *stored
    }

    #[inline]
    fn compare(stored: &u64, key: u64) -> Ordering {
        stored.cmp(&key)
    }

    #[inline]
    fn order(a: u64, b: u64) -> Ordering {
        a.cmp(&b)
    }

    #[inline]
    fn hash(key: u64, seed: u64) -> u64 {
        fold_mul(key ^ seed, K1)
    }
}

/// Byte keys up to this length are stored inside the node.
pub(super) const INLINE: usize = 24;

/// Byte keys, compared lexicographically.
pub(super) struct BytesKey;

/// A byte key with its comparison prefix.
#[derive(Clone, Copy)]
pub(super) struct BytesProbe<'a> {
    prefix: u64,
    bytes: &'a [u8],
}

impl<'a> BytesProbe<'a> {
    /// `bytes` must be shorter than 4 GiB (the caller checks).
    #[inline]
    pub(super) fn new(bytes: &'a [u8]) -> Self {
        BytesProbe { prefix: bytes_prefix(bytes), bytes }
    }

    pub(super) fn bytes(self) -> &'a [u8] {
        self.bytes
    }
}

#[derive(Clone, Copy)]
#[repr(C)]
union KeyBytes {
    inline: [u8; INLINE],
    spilled: *const u8,
}

/// A stored byte key. `prefix` comes last so that it sits next to the node's
/// tower, which a search reads together with it.
#[derive(Clone, Copy)]
#[repr(C)]
pub(super) struct StoredBytes {
    len: u32,
    data: KeyBytes,
    prefix: u64,
}

impl KeyFormat for BytesKey {
    type Stored = StoredBytes;
    type Probe<'a> = BytesProbe<'a>;

    #[inline]
    fn spill_len(key: BytesProbe<'_>) -> usize {
        if key.bytes.len() <= INLINE {
            0
        } else {
            key.bytes.len()
        }
    }

    unsafe fn store(key: BytesProbe<'_>, spill: *mut u8) -> StoredBytes {
        let len = key.bytes.len();
        let data = if len <= INLINE {
            let mut inline = [0u8; INLINE];
            inline[..len].copy_from_slice(key.bytes);
            KeyBytes { inline }
        } else {
            // SAFETY: the caller gives `spill_len(key) == len` writable bytes at `spill`,
            // which cannot overlap `key` (fresh arena memory).
            unsafe { std::ptr::copy_nonoverlapping(key.bytes.as_ptr(), spill, len) };
            KeyBytes { spilled: spill }
        };
        StoredBytes { len: len as u32, data, prefix: key.prefix }
    }

    #[inline]
    fn load(stored: &StoredBytes) -> BytesProbe<'_> {
        let len = stored.len as usize;
        let bytes = if len <= INLINE {
            // SAFETY: keys of at most INLINE bytes are written as `inline` by `store`.
            unsafe { &stored.data.inline[..len] }
        } else {
            // SAFETY: longer keys are written as `spilled`, a pointer to `len` bytes in the
            // node's own allocation, which lives as long as the node that holds `stored`.
            unsafe { std::slice::from_raw_parts(stored.data.spilled, len) }
        };
        BytesProbe { prefix: stored.prefix, bytes }
    }

    #[inline]
    fn compare(stored: &StoredBytes, key: BytesProbe<'_>) -> Ordering {
        match stored.prefix.cmp(&key.prefix) {
            Ordering::Equal => Self::load(stored).bytes.cmp(key.bytes),
            other => other,
        }
    }

    #[inline]
    fn order(a: BytesProbe<'_>, b: BytesProbe<'_>) -> Ordering {
        a.prefix.cmp(&b.prefix).then_with(|| a.bytes.cmp(b.bytes))
    }

    #[inline]
    fn hash(key: BytesProbe<'_>, seed: u64) -> u64 {
        let mut h = seed ^ (key.bytes.len() as u64).wrapping_mul(K2);
        let mut chunks = key.bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            h = fold_mul(h ^ u64::from_le_bytes(w), K1);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            h = fold_mul(h ^ u64::from_le_bytes(w), K1);
        }
        fold_mul(h, K2)
    }
}
