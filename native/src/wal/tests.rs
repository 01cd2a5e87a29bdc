use std::sync::Arc;

use arrow::array::{
    ArrayRef, BinaryArray, BooleanArray, Date32Array, FixedSizeBinaryArray, Float32Array, Float64Array, Int16Array,
    Int64Array, Int8Array, LargeStringArray, StringArray, TimestampMicrosecondArray, UInt64Array,
};
use arrow::datatypes::{DataType, Field, Schema, TimeUnit};
use arrow::record_batch::RecordBatch;

use arrow::array::{Array, AsArray};

use super::*;

fn every_type() -> RecordBatch {
    let schema = Arc::new(Schema::new(vec![
        Field::new("b", DataType::Boolean, true),
        Field::new("i8", DataType::Int8, true),
        Field::new("i16", DataType::Int16, true),
        Field::new("i64", DataType::Int64, false),
        Field::new("u64", DataType::UInt64, true),
        Field::new("f32", DataType::Float32, true),
        Field::new("f64", DataType::Float64, true),
        Field::new("d", DataType::Date32, true),
        Field::new("ts", DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true),
        Field::new("s", DataType::Utf8, true),
        Field::new("ls", DataType::LargeUtf8, true),
        Field::new("bin", DataType::Binary, true),
        Field::new("fsb", DataType::FixedSizeBinary(3), true),
    ]));
    let big = "x".repeat(100_000);
    let cols: Vec<ArrayRef> = vec![
        Arc::new(BooleanArray::from(vec![Some(true), None, Some(false), Some(true)])),
        Arc::new(Int8Array::from(vec![Some(-128), Some(127), None, Some(0)])),
        Arc::new(Int16Array::from(vec![None, Some(-1), Some(2), Some(3)])),
        Arc::new(Int64Array::from(vec![i64::MIN, -1, 0, i64::MAX])),
        Arc::new(UInt64Array::from(vec![Some(u64::MAX), None, Some(0), Some(1)])),
        Arc::new(Float32Array::from(vec![Some(f32::NAN), Some(-0.0), None, Some(1.5)])),
        Arc::new(Float64Array::from(vec![Some(f64::INFINITY), None, Some(2.25), Some(-3.0)])),
        Arc::new(Date32Array::from(vec![Some(19000), None, Some(-1), Some(0)])),
        Arc::new(TimestampMicrosecondArray::from(vec![Some(1), Some(-1), None, Some(i64::MAX)]).with_timezone("UTC")),
        Arc::new(StringArray::from(vec![Some(""), None, Some("héllo"), Some(big.as_str())])),
        Arc::new(LargeStringArray::from(vec![Some("a"), Some(""), None, Some("z")])),
        Arc::new(BinaryArray::from(vec![Some(&b"\x00\x01"[..]), None, Some(&b""[..]), Some(&b"\xff"[..])])),
        Arc::new(FixedSizeBinaryArray::try_from_sparse_iter_with_size(
            vec![Some(b"abc".to_vec()), None, Some(b"\0\0\0".to_vec()), Some(b"xyz".to_vec())].into_iter(),
            3,
        ).unwrap()),
    ];
    RecordBatch::try_new(schema, cols).unwrap()
}

#[test]
fn round_trip_every_type_nulls_empty_and_large_values() {
    let batch = every_type();
    let (bytes, ends) = encode(&batch, None, &[]).unwrap();
    assert_eq!(ends.len(), 4);
    assert_eq!(*ends.last().unwrap() as usize, bytes.len());
    let back = decode(&bytes, batch.schema(), "mem").unwrap();
    assert_eq!(back.deletes, vec![false; 4]);
    // NaN != NaN, so compare the float32 column by bits and the rest directly
    for (i, (a, b)) in batch.columns().iter().zip(back.batch.columns()).enumerate() {
        if i == 5 {
            let (a, b) = (a.as_primitive::<arrow::datatypes::Float32Type>(), b.as_primitive::<arrow::datatypes::Float32Type>());
            assert_eq!(a.nulls(), b.nulls());
            assert!(a.values().iter().zip(b.values()).all(|(x, y)| x.to_bits() == y.to_bits()));
        } else {
            assert_eq!(a.to_data(), b.to_data(), "column {i}");
        }
    }
}

#[test]
fn deletes_keep_only_the_key_and_split_extracts_keys() {
    let batch = every_type();
    let deletes = BooleanArray::from(vec![false, true, false, false]);
    let (bytes, _) = encode(&batch, Some(&deletes), &[3]).unwrap();
    let back = decode(&bytes, batch.schema(), "mem").unwrap();
    assert_eq!(back.deletes, vec![false, true, false, false]);
    assert!(back.batch.column(9).is_null(1), "a delete row carries only the key");
    let (keys, values, dels) = split(&bytes, batch.schema(), 3, "mem").unwrap();
    assert_eq!(keys.as_primitive::<arrow::datatypes::Int64Type>().values().to_vec(), vec![i64::MIN, -1, 0, i64::MAX]);
    assert_eq!(dels.values().to_vec(), vec![0, 1, 0, 0]);
    // each value is one complete row that decodes on its own
    let one = decode(values.value(2), batch.schema(), "mem").unwrap();
    assert_eq!(one.batch.num_rows(), 1);
    assert_eq!(one.batch.column(9).as_string::<i32>().value(0), "héllo");
}

#[test]
fn truncated_or_garbled_rows_are_corrupt_not_panics() {
    let batch = every_type();
    let (bytes, ends) = encode(&batch, None, &[]).unwrap();
    for cut in [1, 5, ends[0] as usize - 1, bytes.len() - 2] {
        let err = decode(&bytes[..cut], batch.schema(), "_wal/0/seg").err().expect("must fail");
        assert!(err.to_string().contains("_wal/0/seg"), "{err}");
    }
    let mut bad = bytes.clone();
    bad[0..4].copy_from_slice(&99i32.to_le_bytes());
    assert!(decode(&bad, batch.schema(), "x").is_err());
    assert!(decode(&[], batch.schema(), "x").unwrap().batch.num_rows() == 0);
}

#[test]
fn nested_types_are_refused_by_name() {
    let schema = Schema::new(vec![Field::new("l", DataType::List(Arc::new(Field::new("item", DataType::Int32, true))), true)]);
    let err = check_schema(&schema).unwrap_err();
    assert!(err.to_string().contains("\"l\""), "{err}");
}

/// Encoded rows are stored in WAL segments that later builds must still read: pinned.
#[test]
fn encoded_bytes_are_pinned() {
    let batch = every_type();
    let deletes = BooleanArray::from(vec![false, true, false, false]);
    let (bytes, ends) = encode(&batch, Some(&deletes), &[3]).unwrap();
    assert_eq!(&bytes[..12], &[0, 0, 0, 0, 1, 1, 0, 0, 0, 0x80, 0xfb, 0xff], "column 0: true, column 1: -128, column 2: null");
    assert_eq!(ends, vec![116, 136, 240, 100_357], "a delete row is its marker, its key and the end marker");
    assert_eq!(crate::io::checksum(&bytes), "crc32c:809100a3");
}

#[test]
fn values_decode_skipping_nulls() {
    let batch = every_type();
    let (_, values, _) = split(&encode(&batch, None, &[]).unwrap().0, batch.schema(), 3, "mem").unwrap();
    let some: BinaryArray = (0..4).map(|i| (i != 1).then(|| values.value(i))).collect();
    let back = decode_values(&some, batch.schema(), "mem").unwrap();
    assert_eq!(back.num_rows(), 3);
    assert_eq!(back.column(3).as_primitive::<arrow::datatypes::Int64Type>().values().to_vec(), vec![i64::MIN, 0, i64::MAX]);
    let err = decode_values(&Int64Array::from(vec![1]), batch.schema(), "mem").unwrap_err();
    assert!(err.to_string().contains("binary"), "{err}");
}
