//! Order-preserving key encodings, shared by index segments and the memtable.
//!
//! A numeric key becomes one `u64` that sorts as the value does, so int64,
//! uint64 and float64 keys are sorted and compared as plain integers; a byte
//! key gets an 8-byte prefix that decides most comparisons on its own. Index
//! segments store the numeric encodings (docs/FORMAT.md, "Indices"), so these
//! functions are part of the format: segments written before must still read.

/// The order-preserving `u64` of an `int64` key (the sign bit flipped).
#[inline]
pub fn encode_i64(v: i64) -> u64 {
    (v as u64) ^ (1 << 63)
}

/// The `int64` key [`encode_i64`] encoded.
#[inline]
pub fn decode_i64(v: u64) -> i64 {
    (v ^ (1 << 63)) as i64
}

/// The order-preserving `u64` of a `float64` key; `None` for NaN (no comparison
/// matches it, so it is never a key). -0.0 and 0.0 are one key (they compare equal).
#[inline]
pub fn encode_f64(v: f64) -> Option<u64> {
    if v.is_nan() {
        return None;
    }
    let v = if v == 0.0 { 0.0 } else { v };
    let bits = v.to_bits();
    Some(if bits >> 63 == 1 { !bits } else { bits | (1 << 63) })
}

/// The first eight bytes of a byte key, big-endian, zero padded. If two keys'
/// prefixes differ they order as the keys do (a shorter key that is a prefix of
/// a longer one is padded with zeros, which sort first); if they are equal the
/// keys must be compared.
#[inline]
pub fn bytes_prefix(bytes: &[u8]) -> u64 {
    let mut buf = [0u8; 8];
    let n = bytes.len().min(8);
    buf[..n].copy_from_slice(&bytes[..n]);
    u64::from_be_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numeric_encodings_are_pinned_and_order_like_the_values() {
        // stored in index segments: these exact values
        assert_eq!(encode_i64(i64::MIN), 0);
        assert_eq!(encode_i64(-1), 0x7fff_ffff_ffff_ffff);
        assert_eq!(encode_i64(0), 0x8000_0000_0000_0000);
        assert_eq!(encode_i64(i64::MAX), u64::MAX);
        assert_eq!(encode_f64(f64::NEG_INFINITY), Some(0x000f_ffff_ffff_ffff));
        assert_eq!(encode_f64(-1.5), Some(0x4007_ffff_ffff_ffff));
        assert_eq!(encode_f64(-0.0), Some(0x8000_0000_0000_0000));
        assert_eq!(encode_f64(0.0), Some(0x8000_0000_0000_0000));
        assert_eq!(encode_f64(1.5), Some(0xbff8_0000_0000_0000));
        assert_eq!(encode_f64(f64::INFINITY), Some(0xfff0_0000_0000_0000));
        assert_eq!(encode_f64(f64::NAN), None);
        let ints = [i64::MIN, -5, -1, 0, 1, 7, i64::MAX];
        for w in ints.windows(2) {
            assert!(encode_i64(w[0]) < encode_i64(w[1]), "{w:?}");
        }
        assert!(ints.iter().all(|v| decode_i64(encode_i64(*v)) == *v));
        let floats = [f64::NEG_INFINITY, -1e300, -1.5, -f64::MIN_POSITIVE, 0.0, f64::MIN_POSITIVE, 1.5, 1e300, f64::INFINITY];
        for w in floats.windows(2) {
            assert!(encode_f64(w[0]) < encode_f64(w[1]), "{w:?}");
        }
    }

    #[test]
    fn prefixes_order_like_the_bytes() {
        let keys: [&[u8]; 9] = [b"", b"\0", b"\0\0", b"a", b"a\0", b"a\0\x01", b"ab", b"abcdefgh", b"abcdefgh\0"];
        for a in keys {
            for b in keys {
                let (pa, pb) = (bytes_prefix(a), bytes_prefix(b));
                if pa != pb {
                    assert_eq!(pa.cmp(&pb), a.cmp(b), "{a:?} vs {b:?}");
                }
            }
        }
        assert_eq!(bytes_prefix(b"ab"), 0x6162_0000_0000_0000);
    }
}
