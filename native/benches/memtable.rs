//! Memtable throughput and latency, native only (no Python).
//!
//!     cargo bench --manifest-path native/Cargo.toml --bench memtable
//!
//! 1,000,000 int64 keys (random, and ascending) and 1,000,000 random 16-byte
//! UUID keys, 100-byte values: insert rate through one writer (row by row, and
//! `apply_batch` in batches of 10,000 rows); single-thread `get` latency (mean
//! over 1M random hits; p50/p99 from 200k individually timed gets, net of the
//! timer's own cost); read scaling with 1, 2 and 4 reader threads (total
//! gets/s); and the newest-per-key scan a flush runs. `LAMINA_BENCH_N`
//! changes the key count.

use std::hint::black_box;
use std::time::Instant;

use lamina_native::memtable::{Key, KeyKind, Lookup, MemTable};

const VALUE_BYTES: usize = 100;
const BATCH_ROWS: usize = 10_000;

/// splitmix64.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fn shuffled(n: usize, seed: u64) -> Vec<usize> {
    let mut rng = Rng(seed);
    let mut v: Vec<usize> = (0..n).collect();
    for i in (1..n).rev() {
        v.swap(i, (rng.next() % (i as u64 + 1)) as usize);
    }
    v
}

fn value_of(i: usize) -> [u8; VALUE_BYTES] {
    let mut v = [0u8; VALUE_BYTES];
    for (j, b) in v.iter_mut().enumerate() {
        *b = (i as u8).wrapping_add(j as u8);
    }
    v
}

/// The median cost of timing nothing with `Instant`.
fn timer_ns() -> u64 {
    let mut v: Vec<u64> = (0..10_000)
        .map(|_| {
            let t = Instant::now();
            t.elapsed().as_nanos() as u64
        })
        .collect();
    v.sort_unstable();
    v[v.len() / 2]
}

fn bench(name: &str, kind: KeyKind, keys: &[Key<'_>]) {
    let n = keys.len();
    let values: Vec<[u8; VALUE_BYTES]> = (0..n).map(value_of).collect();
    let mt = MemTable::new(kind);
    let t = Instant::now();
    {
        let mut w = mt.writer();
        for (k, v) in keys.iter().zip(&values) {
            w.put(*k, v).expect("put");
        }
    }
    let insert_s = t.elapsed().as_secs_f64();
    drop(mt);
    let mt = MemTable::new(kind);
    let t = Instant::now();
    {
        let mut w = mt.writer();
        let rows: Vec<(Key<'_>, Option<&[u8]>)> = keys.iter().zip(&values).map(|(k, v)| (*k, Some(&v[..]))).collect();
        for batch in rows.chunks(BATCH_ROWS) {
            w.apply_batch(batch).expect("apply_batch");
        }
    }
    let batch_s = t.elapsed().as_secs_f64();
    println!(
        "{name:<18} insert {:>5.2} M/s ({:>4.0} ns/row) one by one, {:>5.2} M/s ({:>4.0} ns/row) in batches of {BATCH_ROWS}; \
         arena {} MiB = {:.0} B/entry",
        n as f64 / insert_s / 1e6,
        insert_s * 1e9 / n as f64,
        n as f64 / batch_s / 1e6,
        batch_s * 1e9 / n as f64,
        mt.arena_bytes() >> 20,
        mt.arena_bytes() as f64 / n as f64
    );

    // Single-thread gets of present keys in random order.
    let order = shuffled(n, 99);
    let t = Instant::now();
    let mut hits = 0usize;
    for &i in &order {
        if let Lookup::Live(v) = mt.get(black_box(keys[i])).expect("get") {
            hits += v.len();
        }
    }
    let mean_ns = t.elapsed().as_secs_f64() * 1e9 / n as f64;
    assert_eq!(hits, n * VALUE_BYTES);
    let mut lat: Vec<u64> = order
        .iter()
        .take(200_000)
        .map(|&i| {
            let t = Instant::now();
            black_box(mt.get(black_box(keys[i])).expect("get"));
            t.elapsed().as_nanos() as u64
        })
        .collect();
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() - 1) as f64 * p) as usize].saturating_sub(timer_ns());
    println!("{:<18} get    mean {mean_ns:>5.0} ns   p50 {:>5} ns   p99 {:>5} ns (net of the timer's {} ns)", "", pct(0.5), pct(0.99), timer_ns());

    // Read scaling: each reader does n gets over its own random order.
    let mut line = format!("{:<18} readers", "");
    let mut base = 0.0;
    for threads in [1usize, 2, 4] {
        let orders: Vec<Vec<usize>> = (0..threads).map(|t| shuffled(n, 1000 + t as u64)).collect();
        let t = Instant::now();
        std::thread::scope(|s| {
            for o in &orders {
                let mt = &mt;
                s.spawn(move || {
                    let mut found = 0usize;
                    for &i in o {
                        found += matches!(mt.get(keys[i]), Ok(Lookup::Live(_))) as usize;
                    }
                    assert_eq!(found, o.len());
                });
            }
        });
        let rate = (threads * n) as f64 / t.elapsed().as_secs_f64();
        if threads == 1 {
            base = rate;
        }
        line += &format!("  {threads}: {:>5.2} M gets/s ({:.2}x)", rate / 1e6, rate / base);
    }
    println!("{line}");

    let t = Instant::now();
    let scanned = mt.newest().filter(|e| e.value.is_some()).count();
    assert_eq!(scanned, n);
    println!("{:<18} newest-per-key scan {:>6.1} ms ({:.0} ns/entry)", "", t.elapsed().as_secs_f64() * 1e3, t.elapsed().as_secs_f64() * 1e9 / n as f64);
}

fn main() {
    let n: usize = std::env::var("LAMINA_BENCH_N").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let threads = std::thread::available_parallelism().map_or(1, |p| p.get());
    println!("memtable: {n} keys, {VALUE_BYTES}-byte values, {threads} hardware threads");

    let mut rng = Rng(1);
    let random: Vec<Key<'static>> = (0..n).map(|_| Key::I64(rng.next() as i64)).collect();
    bench("int64 random", KeyKind::Int64, &random);
    let ascending: Vec<Key<'static>> = (0..n as i64).map(Key::I64).collect();
    bench("int64 ascending", KeyKind::Int64, &ascending);
    let uuids: Vec<[u8; 16]> = (0..n)
        .map(|_| {
            let mut u = [0u8; 16];
            u[..8].copy_from_slice(&rng.next().to_le_bytes());
            u[8..].copy_from_slice(&rng.next().to_le_bytes());
            u
        })
        .collect();
    let uuid_keys: Vec<Key<'_>> = uuids.iter().map(|u| Key::Bytes(u)).collect();
    bench("uuid random", KeyKind::Bytes, &uuid_keys);
}
