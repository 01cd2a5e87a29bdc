use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use super::*;

/// splitmix64: deterministic test data without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn owned(key: Key<'_>) -> (i128, Vec<u8>) {
    match key {
        Key::I64(v) => (v as i128, Vec::new()),
        Key::U64(v) => (v as i128, Vec::new()),
        Key::Bytes(b) => (0, b.to_vec()),
    }
}

#[test]
fn int64_keys_iterate_in_order_and_newest_wins() {
    let mt = MemTable::new(KeyKind::Int64);
    let mut model = BTreeMap::new();
    let mut rng = Rng(1);
    for i in 0..5000u64 {
        let k = rng.next() as i64 % 1000; // negative and positive, many repeats
        let v = i.to_le_bytes();
        mt.put(Key::I64(k), &v).unwrap();
        model.insert(k, v.to_vec());
    }
    assert_eq!(mt.len(), 5000);
    assert_eq!(mt.distinct_keys(), model.len() as u64);
    assert_eq!(mt.sequence(), 5000);
    for (k, v) in &model {
        assert_eq!(mt.get(Key::I64(*k)).unwrap(), Lookup::Live(v));
    }
    assert_eq!(mt.get(Key::I64(5000)).unwrap(), Lookup::Absent);
    let got: Vec<(i64, Vec<u8>)> = mt
        .newest()
        .map(|e| match e.key {
            Key::I64(k) => (k, e.value.unwrap().to_vec()),
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, model.into_iter().collect::<Vec<_>>());
}

#[test]
fn uint64_keys_order_above_i64_max() {
    let mt = MemTable::new(KeyKind::UInt64);
    for k in [u64::MAX, 0, 1 << 63, 7, (1 << 63) - 1] {
        mt.put(Key::U64(k), &k.to_be_bytes()).unwrap();
    }
    let keys: Vec<Key<'_>> = mt.newest().map(|e| e.key).collect();
    assert_eq!(keys, [0, 7, (1 << 63) - 1, 1 << 63, u64::MAX].map(Key::U64));
    assert_eq!(mt.get(Key::U64(u64::MAX)).unwrap().value(), Some(&u64::MAX.to_be_bytes()[..]));
}

#[test]
fn ascending_appends_and_inserts_mix() {
    // Ascending keys take the append path; the odd ones then go in between.
    let mt = MemTable::new(KeyKind::Int64);
    for k in (0..2000).step_by(2) {
        mt.put(Key::I64(k), b"even").unwrap();
    }
    for k in (1..2000i64).rev().step_by(2) {
        mt.put(Key::I64(k), b"odd").unwrap();
    }
    mt.put(Key::I64(5000), b"tail").unwrap();
    let keys: Vec<Key<'_>> = mt.newest().map(|e| e.key).collect();
    let want: Vec<Key<'_>> = (0..2000).chain([5000]).map(Key::I64).collect();
    assert_eq!(keys, want);
    for k in 0..2000 {
        let want: &[u8] = if k % 2 == 0 { b"even" } else { b"odd" };
        assert_eq!(mt.get(Key::I64(k)).unwrap(), Lookup::Live(want));
    }
}

#[test]
fn tombstones_hide_values_until_put_again() {
    let mt = MemTable::new(KeyKind::Int64);
    mt.put(Key::I64(1), b"a").unwrap();
    mt.put(Key::I64(2), b"b").unwrap();
    mt.delete(Key::I64(1)).unwrap();
    mt.delete(Key::I64(3)).unwrap(); // a key never put: the tombstone still shadows flushed data
    assert_eq!(mt.get(Key::I64(1)).unwrap(), Lookup::Deleted);
    assert_eq!(mt.get(Key::I64(3)).unwrap(), Lookup::Deleted);
    assert_eq!(mt.get(Key::I64(1)).unwrap().value(), None);
    let entries: Vec<(Key<'_>, Option<&[u8]>)> = mt.newest().map(|e| (e.key, e.value)).collect();
    assert_eq!(entries, vec![(Key::I64(1), None), (Key::I64(2), Some(&b"b"[..])), (Key::I64(3), None)]);
    mt.put(Key::I64(1), b"again").unwrap();
    assert_eq!(mt.get(Key::I64(1)).unwrap(), Lookup::Live(b"again"));
    assert_eq!((mt.len(), mt.distinct_keys()), (5, 3));
    // Empty values are values, not tombstones.
    mt.put(Key::I64(4), b"").unwrap();
    assert_eq!(mt.get(Key::I64(4)).unwrap(), Lookup::Live(b""));
}

#[test]
fn seek_and_stop_at_a_visible_sequence() {
    let mt = MemTable::new(KeyKind::Bytes);
    let k = Key::Bytes(b"key");
    let s1 = mt.put(k, b"v1").unwrap();
    mt.put(Key::Bytes(b"kex"), b"before").unwrap();
    let s2 = mt.put(k, b"v2").unwrap();
    mt.put(Key::Bytes(b"kez"), b"after").unwrap();
    let s3 = mt.delete(k).unwrap();
    let s4 = mt.put(k, b"v4").unwrap();
    assert!(s1 < s2 && s2 < s3 && s3 < s4);
    assert_eq!(mt.get_at(k, 0).unwrap(), Lookup::Absent);
    assert_eq!(mt.get_at(k, s1).unwrap(), Lookup::Live(b"v1"));
    assert_eq!(mt.get_at(k, s2 - 1).unwrap(), Lookup::Live(b"v1"));
    assert_eq!(mt.get_at(k, s2).unwrap(), Lookup::Live(b"v2"));
    assert_eq!(mt.get_at(k, s3).unwrap(), Lookup::Deleted);
    assert_eq!(mt.get_at(k, s4).unwrap(), Lookup::Live(b"v4"));
    assert_eq!(mt.get(k).unwrap(), Lookup::Live(b"v4"));
    // A key whose only entry is newer than the visible sequence is absent.
    assert_eq!(mt.get_at(Key::Bytes(b"kez"), s2).unwrap(), Lookup::Absent);
    // The iterator sees the same snapshot.
    let at_s2: Vec<(Key<'_>, Option<&[u8]>, u64)> = mt.newest_at(s2).map(|e| (e.key, e.value, e.seq)).collect();
    assert_eq!(at_s2, vec![(Key::Bytes(b"kex"), Some(&b"before"[..]), s1 + 1), (k, Some(&b"v2"[..]), s2)]);
    let at_s3: Vec<(Key<'_>, Option<&[u8]>)> = mt.newest_at(s3).map(|e| (e.key, e.value)).collect();
    assert_eq!(at_s3[1], (k, None));
}

#[test]
fn short_and_long_byte_keys_compare_lexicographically() {
    let mt = MemTable::new(KeyKind::Bytes);
    let mut keys: Vec<Vec<u8>> = vec![
        b"".to_vec(),
        b"\0".to_vec(),
        b"a".to_vec(),
        b"a\0".to_vec(),
        b"abcdefgh".to_vec(),
        b"abcdefgh\0".to_vec(),
        b"abcdefghi".to_vec(),
        vec![b'x'; 24],
        vec![b'x'; 25],
        [vec![b'x'; 24], vec![0]].concat(),
        vec![b'x'; 100],
        [vec![b'x'; 99], vec![b'w']].concat(),
        vec![0xff; 16],
    ];
    let mut rng = Rng(7);
    for _ in 0..500 {
        let len = rng.below(40) as usize;
        keys.push((0..len).map(|_| b"ab\0\xff"[rng.below(4) as usize]).collect());
    }
    let mut model = BTreeMap::new();
    for (i, k) in keys.iter().enumerate() {
        let v = format!("value {i}").into_bytes();
        mt.put(Key::Bytes(k), &v).unwrap();
        model.insert(k.clone(), v);
    }
    assert_eq!(mt.distinct_keys(), model.len() as u64);
    for (k, v) in &model {
        assert_eq!(mt.get(Key::Bytes(k)).unwrap(), Lookup::Live(v), "{k:?}");
    }
    assert_eq!(mt.get(Key::Bytes(&[b'x'; 26])).unwrap(), Lookup::Absent);
    assert_eq!(mt.get(Key::Bytes(b"abcdefgh\0\0")).unwrap(), Lookup::Absent);
    let got: Vec<(Vec<u8>, Vec<u8>)> = mt.newest().map(|e| (owned(e.key).1, e.value.unwrap().to_vec())).collect();
    assert_eq!(got, model.into_iter().collect::<Vec<_>>());
}

/// (sequence, value or tombstone)
type Version = (u64, Option<Vec<u8>>);

#[test]
fn random_operations_match_a_versioned_model() {
    for kind in [KeyKind::Int64, KeyKind::Bytes] {
        let mt = MemTable::new(kind);
        // Every version of every key: (seq, value or tombstone).
        let mut model: BTreeMap<i64, Vec<Version>> = BTreeMap::new();
        let mut rng = Rng(42);
        let bytes_key = |k: i64| format!("{:0>width$}", k, width = (k % 40) as usize + 1).into_bytes();
        for i in 0..20_000u64 {
            let k = rng.below(2000) as i64;
            let kb = bytes_key(k);
            let key = if kind == KeyKind::Int64 { Key::I64(k) } else { Key::Bytes(&kb) };
            let value = (rng.below(5) != 0).then(|| vec![i as u8; rng.below(300) as usize]);
            let seq = mt.writer().apply(key, value.as_deref()).unwrap();
            model.entry(k).or_default().push((seq, value));
        }
        for _ in 0..5000 {
            let k = rng.below(2100) as i64;
            let visible = rng.below(mt.sequence() + 2);
            let kb = bytes_key(k);
            let key = if kind == KeyKind::Int64 { Key::I64(k) } else { Key::Bytes(&kb) };
            let want = match model.get(&k).and_then(|vs| vs.iter().rev().find(|(s, _)| *s <= visible)) {
                None => Lookup::Absent,
                Some((_, None)) => Lookup::Deleted,
                Some((_, Some(v))) => Lookup::Live(v),
            };
            assert_eq!(mt.get_at(key, visible).unwrap(), want);
            assert_eq!(mt.get_at_by_seek(key, visible).unwrap(), want);
            assert_eq!(mt.get(key).unwrap(), mt.get_at_by_seek(key, u64::MAX).unwrap());
        }
        assert_eq!(mt.len(), 20_000);
        assert_eq!(mt.distinct_keys(), model.len() as u64);
    }
}

#[test]
fn batches_apply_like_rows_in_order() {
    for kind in [KeyKind::UInt64, KeyKind::Bytes] {
        let mt = MemTable::new(kind);
        let mut model: BTreeMap<u64, Vec<Version>> = BTreeMap::new();
        let mut rng = Rng(9);
        let bytes_key = |k: u64| format!("{k:0>width$}", width = (k % 30) as usize + 1).into_bytes();
        let mut seq = 0;
        for batch in 0..60 {
            // Batches of 0 to ~3000 rows over 5000 keys: repeats within a batch, tombstones,
            // keys above everything (the append path) and single-row batches.
            let rows = match batch % 4 {
                0 => rng.below(3000) as usize,
                1 => 1,
                _ => rng.below(200) as usize,
            };
            let ks: Vec<u64> = (0..rows).map(|_| if batch % 7 == 3 { 10_000 + batch * 100 + rng.below(50) } else { rng.below(5000) }).collect();
            let kbs: Vec<Vec<u8>> = ks.iter().map(|&k| bytes_key(k)).collect();
            let vals: Vec<Option<Vec<u8>>> = (0..rows).map(|i| (rng.below(6) != 0).then(|| format!("b{batch}r{i}").into_bytes())).collect();
            let batch_rows: Vec<(Key<'_>, Option<&[u8]>)> = (0..rows)
                .map(|i| (if kind == KeyKind::UInt64 { Key::U64(ks[i]) } else { Key::Bytes(&kbs[i]) }, vals[i].as_deref()))
                .collect();
            let last = mt.writer().apply_batch(&batch_rows).unwrap();
            for (i, &k) in ks.iter().enumerate() {
                model.entry(k).or_default().push((seq + 1 + i as u64, vals[i].clone()));
            }
            seq += rows as u64;
            assert_eq!(last, seq);
            assert_eq!(mt.sequence(), seq);
            // A single put between batches continues the sequence.
            let k = rng.below(5000);
            let kb = bytes_key(k);
            let key = if kind == KeyKind::UInt64 { Key::U64(k) } else { Key::Bytes(&kb) };
            seq = mt.put(key, b"single").unwrap();
            model.entry(k).or_default().push((seq, Some(b"single".to_vec())));
        }
        assert_eq!(mt.len(), seq);
        assert_eq!(mt.distinct_keys(), model.len() as u64);
        for _ in 0..5000 {
            let k = *model.keys().nth(rng.below(model.len() as u64) as usize).unwrap();
            let visible = rng.below(seq + 2);
            let kb = bytes_key(k);
            let key = if kind == KeyKind::UInt64 { Key::U64(k) } else { Key::Bytes(&kb) };
            let want = match model[&k].iter().rev().find(|(s, _)| *s <= visible) {
                None => Lookup::Absent,
                Some((_, None)) => Lookup::Deleted,
                Some((_, Some(v))) => Lookup::Live(v),
            };
            assert_eq!(mt.get_at(key, visible).unwrap(), want);
            assert_eq!(mt.get_at_by_seek(key, visible).unwrap(), want);
        }
        // The scan: newest per key, in key order, with its sequence.
        let mut want: Vec<(Vec<u8>, Option<Vec<u8>>, u64)> = model
            .iter()
            .map(|(&k, vs)| {
                let (s, v) = vs.last().unwrap();
                (if kind == KeyKind::UInt64 { k.to_be_bytes().to_vec() } else { bytes_key(k) }, v.clone(), *s)
            })
            .collect();
        want.sort();
        let got: Vec<(Vec<u8>, Option<Vec<u8>>, u64)> = mt
            .newest()
            .map(|e| {
                let k = match e.key {
                    Key::U64(v) => v.to_be_bytes().to_vec(),
                    other => owned(other).1,
                };
                (k, e.value.map(<[u8]>::to_vec), e.seq)
            })
            .collect();
        assert_eq!(got, want);
    }
}

#[test]
fn an_invalid_batch_applies_nothing() {
    let mt = MemTable::new(KeyKind::Int64);
    mt.put(Key::I64(1), b"one").unwrap();
    let rows = [(Key::I64(2), Some(&b"two"[..])), (Key::Bytes(b"3"), None)];
    assert!(matches!(mt.writer().apply_batch(&rows), Err(Error::InvalidArgument(_))));
    assert_eq!((mt.len(), mt.sequence()), (1, 1));
    assert_eq!(mt.get(Key::I64(2)).unwrap(), Lookup::Absent);
    assert_eq!(mt.writer().apply_batch(&[]).unwrap(), 1);
}

#[test]
fn wrong_key_types_and_sizes_are_invalid_arguments() {
    let mt = MemTable::new(KeyKind::Int64);
    assert!(matches!(mt.put(Key::U64(1), b"v"), Err(Error::InvalidArgument(_))));
    assert!(matches!(mt.get(Key::Bytes(b"1")), Err(Error::InvalidArgument(_))));
    assert!(matches!(MemTable::new(KeyKind::Bytes).delete(Key::I64(1)), Err(Error::InvalidArgument(_))));
    assert!(matches!(KeyKind::parse("float64"), Err(Error::InvalidArgument(_))));
    assert_eq!(KeyKind::parse("uint64").unwrap(), KeyKind::UInt64);
    assert!(mt.is_empty());
}

#[test]
fn arena_grows_with_large_values() {
    let mt = MemTable::new(KeyKind::UInt64);
    let first = mt.arena_bytes();
    assert!(first > 0);
    let big = vec![7u8; 3 << 20];
    mt.put(Key::U64(1), &big).unwrap();
    for k in 2..10_000u64 {
        mt.put(Key::U64(k), &[1u8; 200]).unwrap();
    }
    assert!(mt.arena_bytes() >= first + big.len() + 10_000 * 200);
    assert_eq!(mt.get(Key::U64(1)).unwrap().value().map(<[u8]>::len), Some(big.len()));
    // The writer is a lock: a second one is refused while the first is held.
    let w = mt.writer();
    assert!(mt.try_writer().is_none());
    drop(w);
    assert!(mt.try_writer().is_some());
}

/// The value the writer stores for key `k` at version `round`: its length depends on
/// the key and every byte is derived from it, so a torn or misdirected read shows.
fn value_of(k: u64, round: u8) -> Vec<u8> {
    let len = 8 + (k % 97) as usize;
    let mut v: Vec<u8> = (0..len).map(|i| (k as u8).wrapping_mul(31).wrapping_add(i as u8)).collect();
    v[..8].copy_from_slice(&k.to_le_bytes());
    v.push(round);
    v
}

fn check_value(k: u64, v: &[u8]) {
    let round = *v.last().expect("empty value");
    assert_eq!(v, value_of(k, round).as_slice(), "torn value for key {k}");
}

fn uuid_of(k: u64) -> [u8; 16] {
    let mut r = Rng(k);
    let mut out = [0u8; 16];
    out[..8].copy_from_slice(&r.next().to_le_bytes());
    out[8..].copy_from_slice(&r.next().to_le_bytes());
    out
}

#[test]
fn readers_never_miss_a_published_key_while_one_writer_inserts() {
    for kind in [KeyKind::Int64, KeyKind::Bytes] {
        const N: usize = 60_000;
        let mt = MemTable::new(kind);
        let mut rng = Rng(3);
        // Random insertion order (the general path) with an ascending run (the append path).
        let mut order: Vec<u64> = (0..N as u64).collect();
        for i in (1..N / 2).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let published = AtomicUsize::new(0);
        let done = AtomicBool::new(false);
        let key_of = |k: u64, buf: &mut [u8; 16]| -> Key<'static> {
            match kind {
                KeyKind::Int64 => Key::I64(k as i64 - (N as i64 / 2)),
                _ => {
                    *buf = uuid_of(k);
                    Key::Bytes(Box::leak(Box::new(*buf)))
                }
            }
        };
        let keys: Vec<Key<'static>> = order.iter().map(|&k| key_of(k, &mut [0; 16])).collect();
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut w = mt.writer();
                let values: Vec<Vec<u8>> = order.iter().map(|&k| value_of(k, 0)).collect();
                let mut i = 0;
                while i < N {
                    if (i / 1000) % 2 == 0 {
                        // Rows one by one.
                        w.put(keys[i], &values[i]).unwrap();
                        i += 1;
                    } else {
                        // A batch of up to 100 rows.
                        let end = (i + 1 + i % 100).min(N);
                        let rows: Vec<(Key<'_>, Option<&[u8]>)> = (i..end).map(|j| (keys[j], Some(values[j].as_slice()))).collect();
                        w.apply_batch(&rows).unwrap();
                        i = end;
                    }
                    published.store(i, Ordering::Release);
                    // Overwrite an earlier key now and then: readers must see one version or the other.
                    if i % 7 == 0 {
                        let j = (i * 31) % i;
                        w.put(keys[j], &value_of(order[j], (i % 250) as u8 + 1)).unwrap();
                    }
                    if i % 1024 == 0 {
                        // Let readers run without releasing the writer.
                        std::thread::yield_now();
                    }
                }
                done.store(true, Ordering::Release);
            });
            for r in 0..3u64 {
                let (mt, published, done, keys, order) = (&mt, &published, &done, &keys, &order);
                s.spawn(move || {
                    let mut rng = Rng(100 + r);
                    let mut reads = 0u64;
                    loop {
                        let finished = done.load(Ordering::Acquire);
                        let n = published.load(Ordering::Acquire);
                        if n > 0 {
                            for _ in 0..64 {
                                let i = rng.below(n as u64) as usize;
                                match mt.get(keys[i]).unwrap() {
                                    Lookup::Live(v) => check_value(order[i], v),
                                    other => panic!("key #{i} published but read as {other:?}"),
                                }
                                reads += 1;
                            }
                        }
                        if r == 0 && reads.is_multiple_of(8192) {
                            // A snapshot scan while the writer runs: ordered, every value whole.
                            let mut last: Option<Key<'_>> = None;
                            let mut seen = 0;
                            for e in mt.newest() {
                                assert!(last.is_none_or(|l| l < e.key), "out of order");
                                last = Some(e.key);
                                seen += 1;
                            }
                            assert!(seen >= n);
                        }
                        if finished {
                            break;
                        }
                    }
                    assert!(reads > 0);
                });
            }
        });
        assert_eq!(mt.distinct_keys(), N as u64);
        assert_eq!(mt.newest().count(), N);
    }
}

#[test]
fn arrow_batches_put_get_and_list_newest() {
    use arrow::array::{Array, ArrayRef, AsArray, BinaryArray, Int64Array, StringArray, UInt64Array};
    use std::sync::Arc;
    let m = MemTable::new(KeyKind::UInt64);
    let keys: ArrayRef = Arc::new(Int64Array::from(vec![3, 1, 3]));
    let values: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"a"[..]), Some(&b"b"[..]), None]));
    assert_eq!(m.put_arrays(&keys, &values).unwrap(), 3);
    // a negative key for uint64 keys, or values of another type, apply nothing
    let negative: ArrayRef = Arc::new(Int64Array::from(vec![5, -1]));
    let two: ArrayRef = Arc::new(BinaryArray::from(vec![Some(&b"x"[..]), Some(&b"y"[..])]));
    assert!(matches!(m.put_arrays(&negative, &two), Err(Error::InvalidArgument(e)) if e.contains("out of range")));
    let strings: ArrayRef = Arc::new(StringArray::from(vec!["x"]));
    let five: ArrayRef = Arc::new(UInt64Array::from(vec![5u64]));
    assert!(m.put_arrays(&five, &strings).is_err());
    assert_eq!(m.sequence(), 3);
    let probe: ArrayRef = Arc::new(UInt64Array::from(vec![1u64, 3, 5]));
    let (states, values) = m.get_arrays(&probe).unwrap();
    assert_eq!(states.buffers()[0].as_slice(), &[LIVE, DELETED, ABSENT]);
    let values = arrow::array::make_array(values);
    assert_eq!(values.as_binary::<i32>().iter().collect::<Vec<_>>(), vec![Some(&b"b"[..]), None, None]);
    let (keys, values) = m.newest_arrays();
    assert_eq!(arrow::array::make_array(keys).as_primitive::<arrow::datatypes::UInt64Type>().values().to_vec(), vec![1, 3]);
    assert_eq!(arrow::array::make_array(values).null_count(), 1);
    let bytes = MemTable::new(KeyKind::Bytes);
    assert!(bytes.get_arrays(&probe).is_err(), "integer keys for byte keys");
}
