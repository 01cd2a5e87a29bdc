//! Index keys: numeric columns become order-preserving `u64`s (one sort and
//! one comparison for int64, uint64 and float64; the encodings are
//! [`crate::keys`]), everything else is bytes. Nulls and NaNs are not indexed:
//! no comparison a filter can express matches them.

use std::cmp::Ordering;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, AsArray, DictionaryArray};
use arrow::datatypes::{DataType, Float64Type, Int32Type, Int64Type, UInt64Type};

use crate::error::{Error, Result};
use crate::keys::{encode_f64, encode_i64};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum KeyType {
    I64 = 1,
    U64 = 2,
    F64 = 3,
    Bytes = 4,
}

impl KeyType {
    pub fn from_u8(v: u8, object: &str) -> Result<KeyType> {
        match v {
            1 => Ok(KeyType::I64),
            2 => Ok(KeyType::U64),
            3 => Ok(KeyType::F64),
            4 => Ok(KeyType::Bytes),
            _ => Err(super::corrupt(object, format!("unknown key type {v}"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KeyType::I64 => "int64",
            KeyType::U64 => "uint64",
            KeyType::F64 => "float64",
            KeyType::Bytes => "bytes",
        }
    }

    pub fn is_numeric(self) -> bool {
        self != KeyType::Bytes
    }
}

/// One key; `Num` holds the order-preserving encoding of the column's type.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Key {
    Num(u64),
    Bytes(Vec<u8>),
}

/// A value a query compares the column with, as the caller has it (before encoding).
#[derive(Clone, Debug, PartialEq)]
pub enum Scalar {
    I64(i64),
    U64(u64),
    F64(f64),
    Bytes(Vec<u8>),
}

impl Scalar {
    /// The key of this value (its order-preserving encoding); `None` for NaN, which no key equals.
    pub fn key(self) -> Option<Key> {
        match self {
            Scalar::I64(v) => Some(Key::Num(encode_i64(v))),
            Scalar::U64(v) => Some(Key::Num(v)),
            Scalar::F64(v) => encode_f64(v).map(Key::Num),
            Scalar::Bytes(b) => Some(Key::Bytes(b)),
        }
    }
}

/// A range of keys; `None` bounds are open.
#[derive(Clone, Debug)]
pub struct KeyRange {
    pub lo: Option<(Key, bool)>,
    pub hi: Option<(Key, bool)>,
}

impl KeyRange {
    /// The keys between `lo` and `hi`, each `(value, inclusive)` or `None` for open;
    /// `None` if a bound is NaN: the range matches nothing.
    pub fn between(lo: Option<(Scalar, bool)>, hi: Option<(Scalar, bool)>) -> Option<KeyRange> {
        let bound = |b: Option<(Scalar, bool)>| match b {
            None => Some(None),
            Some((v, inclusive)) => v.key().map(|k| Some((k, inclusive))),
        };
        Some(KeyRange { lo: bound(lo)?, hi: bound(hi)? })
    }

    pub fn point(k: Key) -> Self {
        KeyRange { lo: Some((k.clone(), true)), hi: Some((k, true)) }
    }

    pub fn above_lo(&self, k: &Key) -> bool {
        match &self.lo {
            None => true,
            Some((lo, incl)) => match k.cmp(lo) {
                Ordering::Greater => true,
                Ordering::Equal => *incl,
                Ordering::Less => false,
            },
        }
    }

    pub fn below_hi(&self, k: &Key) -> bool {
        match &self.hi {
            None => true,
            Some((hi, incl)) => match k.cmp(hi) {
                Ordering::Less => true,
                Ordering::Equal => *incl,
                Ordering::Greater => false,
            },
        }
    }

    pub fn contains(&self, k: &Key) -> bool {
        self.above_lo(k) && self.below_hi(k)
    }

    /// Whether some key in `[min, max]` can be in this range.
    pub fn overlaps(&self, min: &Key, max: &Key) -> bool {
        self.below_hi(min) && self.above_lo(max)
    }
}

/// The values of one fragment's indexed column, in offset order.
pub struct KeyColumn {
    pub key_type: KeyType,
    array: ArrayRef,
}

impl KeyColumn {
    /// Accepts int64, uint64, float64, (large) utf8/binary, or a dictionary of utf8/binary;
    /// the Python side casts every other indexable type to one of these.
    pub fn new(array: ArrayRef) -> Result<KeyColumn> {
        let key_type = match array.data_type() {
            DataType::Int64 => KeyType::I64,
            DataType::UInt64 => KeyType::U64,
            DataType::Float64 => KeyType::F64,
            DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary => KeyType::Bytes,
            DataType::Dictionary(k, v)
                if **k == DataType::Int32
                    && matches!(**v, DataType::Utf8 | DataType::LargeUtf8 | DataType::Binary | DataType::LargeBinary) =>
            {
                KeyType::Bytes
            }
            other => {
                return Err(Error::InvalidArgument(format!(
                    "cannot index values of type {other}; cast to int64, uint64, float64, string or binary"
                )))
            }
        };
        if array.len() > u32::MAX as usize {
            return Err(Error::InvalidArgument("a fragment has at most 2^32 rows".into()));
        }
        Ok(KeyColumn { key_type, array })
    }

    pub fn len(&self) -> usize {
        self.array.len()
    }

    pub fn is_empty(&self) -> bool {
        self.array.is_empty()
    }

    /// Calls `f(offset, key)` for every indexed (non-null, non-NaN) numeric value.
    pub fn for_each_num(&self, mut f: impl FnMut(u32, u64)) {
        let nulls = self.array.logical_nulls();
        let valid = |i: usize| nulls.as_ref().is_none_or(|n| n.is_valid(i));
        match self.key_type {
            KeyType::I64 => {
                for (i, v) in self.array.as_primitive::<Int64Type>().values().iter().enumerate() {
                    if valid(i) {
                        f(i as u32, encode_i64(*v));
                    }
                }
            }
            KeyType::U64 => {
                for (i, v) in self.array.as_primitive::<UInt64Type>().values().iter().enumerate() {
                    if valid(i) {
                        f(i as u32, *v);
                    }
                }
            }
            KeyType::F64 => {
                for (i, v) in self.array.as_primitive::<Float64Type>().values().iter().enumerate() {
                    if valid(i) {
                        if let Some(k) = encode_f64(*v) {
                            f(i as u32, k);
                        }
                    }
                }
            }
            KeyType::Bytes => {}
        }
    }

    /// Calls `f(offset, bytes)` for every non-null value of a bytes column.
    pub fn for_each_bytes<'a>(&'a self, mut f: impl FnMut(u32, &'a [u8])) {
        if let Some(d) = self.array.as_any().downcast_ref::<DictionaryArray<Int32Type>>() {
            let dict = collect_bytes(d.values().as_ref());
            for (i, c) in d.keys().iter().enumerate() {
                if let Some(Some(b)) = c.and_then(|c| dict.get(c as usize)) {
                    f(i as u32, b);
                }
            }
            return;
        }
        for (i, v) in collect_bytes(self.array.as_ref()).into_iter().enumerate() {
            if let Some(b) = v {
                f(i as u32, b);
            }
        }
    }

    /// Codes (None = null) and values of a dictionary column.
    pub fn dictionary(&self) -> Option<(Vec<Option<i32>>, ArrayRef)> {
        let d: &DictionaryArray<Int32Type> = self.array.as_any().downcast_ref()?;
        let codes = d.keys().iter().collect();
        Some((codes, Arc::clone(d.values())))
    }
}

/// Every value of a (large) utf8/binary array; None for nulls and other types.
fn collect_bytes(a: &dyn Array) -> Vec<Option<&[u8]>> {
    match a.data_type() {
        DataType::Binary => a.as_binary::<i32>().iter().collect(),
        DataType::LargeBinary => a.as_binary::<i64>().iter().collect(),
        DataType::Utf8 => a.as_string::<i32>().iter().map(|v| v.map(str::as_bytes)).collect(),
        DataType::LargeUtf8 => a.as_string::<i64>().iter().map(|v| v.map(str::as_bytes)).collect(),
        _ => Vec::new(),
    }
}
