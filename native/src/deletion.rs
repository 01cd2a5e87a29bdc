//! Deletion files: the row offsets deleted from one fragment, as a roaring
//! bitmap in the portable serialization (readable by CRoaring, pyroaring,
//! Java RoaringBitmap). See docs/FORMAT.md, "Deletion files".

use roaring::RoaringBitmap;

use crate::error::{Error, Result};

/// Serializes the offsets (any order, duplicates allowed) as a portable roaring bitmap.
pub fn encode(offsets: impl IntoIterator<Item = u32>) -> Vec<u8> {
    let bitmap: RoaringBitmap = offsets.into_iter().collect();
    let mut out = Vec::with_capacity(bitmap.serialized_size());
    // Writing into a Vec cannot fail.
    bitmap
        .serialize_into(&mut out)
        .unwrap_or_else(|_| unreachable!("serializing into a Vec is infallible"));
    out
}

/// Decodes a deletion file; `object` names it in the error if the bytes are not a bitmap.
pub fn decode(bytes: &[u8], object: &str) -> Result<RoaringBitmap> {
    RoaringBitmap::deserialize_from(bytes).map_err(|e| Error::Corrupt {
        object: object.to_string(),
        reason: format!("not a portable roaring bitmap ({e})"),
    })
}

/// Decodes a deletion file into its sorted offsets; with `rows` (the fragment's row count),
/// an offset at or beyond it is `Corrupt`, checked before the offsets are materialized (a few
/// hostile bytes of run containers can otherwise describe billions of offsets).
pub fn decode_offsets(bytes: &[u8], object: &str, rows: Option<u64>) -> Result<Vec<u32>> {
    let bitmap = decode(bytes, object)?;
    if let (Some(rows), Some(max)) = (rows, bitmap.max()) {
        if u64::from(max) >= rows {
            return Err(Error::Corrupt {
                object: object.to_string(),
                reason: format!("deletes offset {max} of a fragment of {rows} rows"),
            });
        }
    }
    Ok(bitmap.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_sorts_and_dedups() {
        let bytes = encode([7u32, 3, 3, 1_000_000, 0]);
        assert_eq!(decode_offsets(&bytes, "t", None).unwrap(), vec![0, 3, 7, 1_000_000]);
    }

    #[test]
    fn empty_round_trip() {
        let bytes = encode(std::iter::empty());
        assert!(decode_offsets(&bytes, "t", None).unwrap().is_empty());
    }

    #[test]
    fn truncated_bytes_are_corrupt() {
        let bytes = encode(0u32..10_000);
        let err = decode(&bytes[..bytes.len() / 2], "_deletions/x.bin").unwrap_err();
        assert!(matches!(err, Error::Corrupt { .. }), "{err}");
        assert!(err.to_string().contains("_deletions/x.bin"));
    }

    #[test]
    fn portable_format_header() {
        // Portable format starts with the cookie 12346 (no runs) or 12347 (runs).
        let bytes = encode([1u32, 2, 3]);
        let cookie = u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
        assert!(cookie & 0xFFFF == 12346 || cookie & 0xFFFF == 12347, "cookie {cookie}");
    }
}
