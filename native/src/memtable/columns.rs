//! Arrow arrays in and out of a memtable: the batch calls of the WAL applier.
//!
//! Keys come as an int64, uint64 or (large/view) binary or string array checked
//! against the memtable's key type; values as a binary array whose nulls are
//! deletes. Lookups answer with a state per key ([`ABSENT`], [`LIVE`],
//! [`DELETED`]) and a binary array of values, large if 2 GiB offsets do not fit.

use arrow::array::{
    Array, ArrayData, ArrayRef, AsArray, GenericBinaryBuilder, Int64Array, OffsetSizeTrait, UInt64Array, UInt8Array,
};
use arrow::datatypes::{DataType, Int64Type, UInt64Type};

use super::{Entry, Key, KeyKind, Lookup, MemTable};
use crate::error::{Error, Result};

/// The state of a key that has no entry.
pub const ABSENT: u8 = 0;
/// The state of a key whose newest entry is a value.
pub const LIVE: u8 = 1;
/// The state of a key whose newest entry is a delete.
pub const DELETED: u8 = 2;

impl Lookup<'_> {
    /// [`ABSENT`], [`LIVE`] or [`DELETED`].
    pub fn state(&self) -> u8 {
        match self {
            Lookup::Absent => ABSENT,
            Lookup::Live(_) => LIVE,
            Lookup::Deleted => DELETED,
        }
    }
}

/// A key column of an Arrow array, checked against the memtable's key type.
enum KeyColumn<'a> {
    I64(Int64Array),
    U64(UInt64Array),
    Bytes(&'a ArrayRef),
}

impl<'a> KeyColumn<'a> {
    fn new(kind: KeyKind, array: &'a ArrayRef) -> Result<KeyColumn<'a>> {
        if array.null_count() > 0 {
            return Err(Error::InvalidArgument("memtable keys must not be null".into()));
        }
        let numeric = matches!(kind, KeyKind::Int64 | KeyKind::UInt64);
        match array.data_type() {
            DataType::Int64 if numeric => Ok(KeyColumn::I64(array.as_primitive::<Int64Type>().clone())),
            DataType::UInt64 if numeric => Ok(KeyColumn::U64(array.as_primitive::<UInt64Type>().clone())),
            DataType::Binary
            | DataType::LargeBinary
            | DataType::BinaryView
            | DataType::Utf8
            | DataType::LargeUtf8
            | DataType::Utf8View
                if kind == KeyKind::Bytes =>
            {
                Ok(KeyColumn::Bytes(array))
            }
            t => Err(Error::InvalidArgument(format!("memtable keys are {}; got an array of {t}", kind.name()))),
        }
    }

    fn len(&self) -> usize {
        match self {
            KeyColumn::I64(a) => a.len(),
            KeyColumn::U64(a) => a.len(),
            KeyColumn::Bytes(a) => a.len(),
        }
    }

    /// Key `i` as the memtable of `kind` takes it; integers out of its range are errors.
    fn key(&self, kind: KeyKind, i: usize) -> Result<Key<'_>> {
        let out_of_range =
            |v: &dyn std::fmt::Display| Error::InvalidArgument(format!("key {v} is out of range for {} keys", kind.name()));
        Ok(match self {
            KeyColumn::I64(a) => {
                let v = a.value(i);
                match kind {
                    KeyKind::UInt64 => Key::U64(u64::try_from(v).map_err(|_| out_of_range(&v))?),
                    _ => Key::I64(v),
                }
            }
            KeyColumn::U64(a) => {
                let v = a.value(i);
                match kind {
                    KeyKind::Int64 => Key::I64(i64::try_from(v).map_err(|_| out_of_range(&v))?),
                    _ => Key::U64(v),
                }
            }
            KeyColumn::Bytes(a) => Key::Bytes(bytes_at(a, i)),
        })
    }
}

/// Value `i` of a (large/view) binary or string array; the type was checked.
fn bytes_at(a: &ArrayRef, i: usize) -> &[u8] {
    match a.data_type() {
        DataType::Binary => a.as_binary::<i32>().value(i),
        DataType::LargeBinary => a.as_binary::<i64>().value(i),
        DataType::BinaryView => a.as_binary_view().value(i),
        DataType::Utf8 => a.as_string::<i32>().value(i).as_bytes(),
        DataType::LargeUtf8 => a.as_string::<i64>().value(i).as_bytes(),
        _ => a.as_string_view().value(i).as_bytes(),
    }
}

/// Checks a value column: binary, large binary or binary view, one value per key.
fn check_values(values: &ArrayRef, rows: usize) -> Result<()> {
    if !matches!(values.data_type(), DataType::Binary | DataType::LargeBinary | DataType::BinaryView) {
        return Err(Error::InvalidArgument(format!(
            "memtable values must be binary, large_binary or binary_view, not {}",
            values.data_type()
        )));
    }
    if values.len() != rows {
        return Err(Error::InvalidArgument(format!("{rows} keys but {} values", values.len())));
    }
    Ok(())
}

/// A binary array of `values` (nulls for `None`), large if the bytes do not fit in 2 GiB offsets.
fn binary_array<'a>(values: impl ExactSizeIterator<Item = Option<&'a [u8]>> + Clone) -> ArrayData {
    let bytes: usize = values.clone().map(|v| v.map_or(0, <[u8]>::len)).sum();
    fn build<'a, O: OffsetSizeTrait>(values: impl ExactSizeIterator<Item = Option<&'a [u8]>>, bytes: usize) -> ArrayData {
        let mut b = GenericBinaryBuilder::<O>::with_capacity(values.len(), bytes);
        for v in values {
            b.append_option(v);
        }
        b.finish().into_data()
    }
    if bytes <= i32::MAX as usize {
        build::<i32>(values, bytes)
    } else {
        build::<i64>(values, bytes)
    }
}

impl MemTable {
    /// Puts `values[i]` under `keys[i]` in order (a null value deletes); returns the last
    /// sequence. Every key and value is checked first: an invalid one applies nothing.
    pub fn put_arrays(&self, keys: &ArrayRef, values: &ArrayRef) -> Result<u64> {
        let kind = self.kind();
        let keys = KeyColumn::new(kind, keys)?;
        check_values(values, keys.len())?;
        let rows = (0..keys.len())
            .map(|i| Ok((keys.key(kind, i)?, (!values.is_null(i)).then(|| bytes_at(values, i)))))
            .collect::<Result<Vec<_>>>()?;
        self.writer().apply_batch(&rows)
    }

    /// (state of each key as uint8, binary values: null unless live) for an array of keys.
    pub fn get_arrays(&self, keys: &ArrayRef) -> Result<(ArrayData, ArrayData)> {
        let kind = self.kind();
        let keys = KeyColumn::new(kind, keys)?;
        let found = (0..keys.len()).map(|i| self.get(keys.key(kind, i)?)).collect::<Result<Vec<Lookup<'_>>>>()?;
        let states = UInt8Array::from(found.iter().map(Lookup::state).collect::<Vec<u8>>()).into_data();
        Ok((states, binary_array(found.iter().map(|l| l.value()))))
    }

    /// (keys, values) of the newest entry of every key, in key order, as of this call;
    /// values are null for deleted keys. Keys are int64, uint64 or binary.
    pub fn newest_arrays(&self) -> (ArrayData, ArrayData) {
        let entries: Vec<Entry<'_>> = self.newest().collect();
        let keys = match self.kind() {
            KeyKind::Int64 => {
                let v: Vec<i64> = entries.iter().map(|e| if let Key::I64(k) = e.key { k } else { 0 }).collect();
                Int64Array::from(v).into_data()
            }
            KeyKind::UInt64 => {
                let v: Vec<u64> = entries.iter().map(|e| if let Key::U64(k) = e.key { k } else { 0 }).collect();
                UInt64Array::from(v).into_data()
            }
            KeyKind::Bytes => binary_array(entries.iter().map(|e| if let Key::Bytes(b) = e.key { Some(b) } else { None })),
        };
        (keys, binary_array(entries.iter().map(|e| e.value)))
    }
}
