//! Test support for the corrupt-input corpus and the bounded fuzz loop:
//! seeded mutations of valid stored bytes, a runner that turns a panic into a test failure,
//! and an allocator probe that records the largest single allocation request.
//!
//! Every native reader of stored bytes is driven with (1) every prefix of a valid file at a
//! stride, (2) a few hundred seeded single-bit flips, and (3) for `LAMINA_FUZZ_SECONDS`
//! (default 0.25 s per reader and input) random multi-byte mutations, seeded by `LAMINA_FUZZ_SEED`.
//! A longer run: `LAMINA_FUZZ_SECONDS=60 LAMINA_FUZZ_SEED=$RANDOM cargo test corrupt_`. A reader must return `Err` (or, for a
//! flip it cannot detect, `Ok`), never panic, and never ask for more than [`MAX_ALLOCATION`] at once
//! (a request above [`REFUSED_ALLOCATION`] is refused, naming the case, before the process aborts).

use std::alloc::{GlobalAlloc, Layout, System};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Largest single allocation a reader may request while reading a small corrupt file: far above
/// what the corpus files need, far below what a trusted length field could ask for.
pub const MAX_ALLOCATION: usize = 64 << 20;

/// A request above this while a corrupt input is read is refused outright (the process then aborts,
/// as Rust does on a failed allocation) after the case is named on stderr: granting it could make a
/// shared test machine swap or kill its neighbours, and what it was sized from is already a failure.
pub const REFUSED_ALLOCATION: usize = 1 << 30;

/// The global allocator of test builds: the system allocator, recording requests above the limit.
pub struct Probe;

static LARGEST: AtomicUsize = AtomicUsize::new(0);

/// The corpus read in progress (`name: how`), for the message of a refused allocation.
static CASE: std::sync::Mutex<String> = std::sync::Mutex::new(String::new());

/// Records a request of `size` bytes; whether it may be passed on to the system allocator.
fn admit(size: usize) -> bool {
    LARGEST.fetch_max(size, Ordering::Relaxed);
    if size <= REFUSED_ALLOCATION || !READING.load(Ordering::Relaxed) {
        return true;
    }
    // No allocation here: fixed text, the size in a stack buffer, the case if its lock is free.
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = size;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let write = |b: &[u8]| {
        // SAFETY: writes `b` (valid for its length) to stderr; no memory of ours is touched.
        unsafe { libc::write(2, b.as_ptr().cast(), b.len()) };
    };
    write(b"\ntestkit: refused an allocation of ");
    write(&digits[at..]);
    write(b" bytes while reading a corrupt input: ");
    if let Ok(case) = CASE.try_lock() {
        write(case.as_bytes());
    }
    write(b"\n");
    false
}

unsafe impl GlobalAlloc for Probe {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if !admit(layout.size()) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc(layout) }
    }
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        if !admit(layout.size()) {
            return std::ptr::null_mut();
        }
        unsafe { System.alloc_zeroed(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if !admit(new_size) {
            return std::ptr::null_mut();
        }
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static PROBE: Probe = Probe;

/// The largest allocation requested so far by any test.
pub fn largest_allocation() -> usize {
    LARGEST.load(Ordering::Relaxed)
}

/// SplitMix64: a small seeded generator (no dependency).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9e37_79b9_7f4a_7c15)
    }
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }
}

/// One corrupted variant of a valid file, and how it was made (for the failure message).
pub struct Mutant {
    pub bytes: Vec<u8>,
    pub how: String,
    /// Truncations can never be read back: the reader must fail.
    pub must_fail: bool,
}

/// Every prefix of `bytes` at a stride (about `count` of them, plus the last 8).
pub fn truncations(bytes: &[u8], count: usize) -> Vec<Mutant> {
    let stride = (bytes.len() / count.max(1)).max(1);
    let mut lens: Vec<usize> = (0..bytes.len()).step_by(stride).collect();
    lens.extend(bytes.len().saturating_sub(8)..bytes.len());
    lens.sort_unstable();
    lens.dedup();
    lens.into_iter()
        .map(|n| Mutant { bytes: bytes[..n].to_vec(), how: format!("truncated to {n} of {} bytes", bytes.len()), must_fail: true })
        .collect()
}

/// `count` seeded single-bit flips; half of them in the last `tail` bytes (footers, directories).
pub fn bit_flips(bytes: &[u8], count: usize, tail: usize, seed: u64) -> Vec<Mutant> {
    let mut rng = Rng::new(seed);
    (0..count)
        .filter(|_| !bytes.is_empty())
        .map(|i| {
            let pos = if i % 2 == 0 {
                rng.below(bytes.len())
            } else {
                bytes.len() - 1 - rng.below(tail.min(bytes.len()))
            };
            let bit = rng.below(8);
            let mut b = bytes.to_vec();
            b[pos] ^= 1 << bit;
            Mutant { bytes: b, how: format!("bit {bit} of byte {pos} flipped (seed {seed})"), must_fail: false }
        })
        .collect()
}

/// A run of four 0xff bytes at every position of the Thrift footer (the last `len - 8` bytes before
/// its length and magic): a varint there swallows its neighbours and becomes a huge count or size
/// while the footer still parses, as a few damaged bytes near the end of a file once did.
pub fn footer_runs(bytes: &[u8]) -> Vec<Mutant> {
    let Some(footer) = bytes.len().checked_sub(8).and_then(|at| bytes.get(at..at + 4)) else { return Vec::new() };
    let footer = u32::from_le_bytes([footer[0], footer[1], footer[2], footer[3]]) as usize;
    let end = bytes.len() - 8;
    (end.saturating_sub(footer)..end)
        .map(|pos| {
            let mut b = bytes.to_vec();
            for slot in b.iter_mut().skip(pos).take(4.min(end - pos)) {
                *slot = 0xff;
            }
            Mutant { bytes: b, how: format!("0xff run at footer byte {pos}"), must_fail: false }
        })
        .collect()
}

/// A random multi-part mutation: flips, overwritten runs, extreme 4- and 8-byte values,
/// a cut, a duplicated or removed run.
pub fn mutate(bytes: &[u8], rng: &mut Rng) -> Vec<u8> {
    let mut b = bytes.to_vec();
    for _ in 0..1 + rng.below(4) {
        if b.is_empty() {
            break;
        }
        let pos = if rng.below(2) == 0 { rng.below(b.len()) } else { b.len() - 1 - rng.below(b.len().min(512)) };
        match rng.below(7) {
            0 => b[pos] ^= 1 << rng.below(8),
            1 => b[pos] = rng.next() as u8,
            2 | 3 => {
                const EXTREMES: [u64; 8] = [0, 1, 0xff, 0x7fff_ffff, 0x8000_0000, 0xffff_ffff, u64::MAX, 0x7fff_ffff_ffff_ffff];
                let v = EXTREMES[rng.below(EXTREMES.len())].to_le_bytes();
                let n = if rng.below(2) == 0 { 4 } else { 8 };
                for (k, byte) in v.iter().take(n).enumerate() {
                    if let Some(slot) = b.get_mut(pos + k) {
                        *slot = *byte;
                    }
                }
            }
            4 => b.truncate(pos),
            5 => {
                let end = (pos + 1 + rng.below(64)).min(b.len());
                let run: Vec<u8> = b[pos..end].to_vec();
                b.splice(pos..pos, run);
            }
            _ => {
                let end = (pos + 1 + rng.below(64)).min(b.len());
                b.drain(pos..end);
            }
        }
    }
    b
}

/// Seconds of random mutations per reader and input kind: `LAMINA_FUZZ_SECONDS` (default 0.25;
/// it is spent once per reader and input kind, so keep it small for `cargo test`).
pub fn fuzz_budget() -> Duration {
    let secs = std::env::var("LAMINA_FUZZ_SECONDS").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.25);
    Duration::from_secs_f64(secs.max(0.0))
}

/// Seed of the random mutations: `LAMINA_FUZZ_SEED` (default 16, so `cargo test` is repeatable).
pub fn fuzz_seed() -> u64 {
    std::env::var("LAMINA_FUZZ_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(16)
}

static ONE_READER: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Held by a test that panics on purpose, so its panics are not charged to a corpus read.
pub fn exclusive() -> std::sync::MutexGuard<'static, ()> {
    ONE_READER.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Where the panics of the current corpus read happened (`file:line`), even those a reader caught
/// itself (`error::guard` around parquet's decoders): a caught panic in Lamina's own code still
/// fails the corpus; one inside parquet or arrow is a dependency's bug the guard contains.
static PANICS: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
static READING: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
static READER: std::sync::Mutex<Option<String>> = std::sync::Mutex::new(None);

fn record_panics() {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let at = info.location().map(|l| format!("{}:{}", l.file(), l.line())).unwrap_or_default();
            // Only the reading test's thread and the unnamed threads a reader spawns: a panic of
            // another test (libtest names its threads) is not this read's.
            let reading = READING.load(Ordering::SeqCst) && {
                let me = std::thread::current();
                me.name().is_none() || me.name() == READER.lock().unwrap_or_else(std::sync::PoisonError::into_inner).as_deref()
            };
            let quiet = reading && in_dependency(&at);
            if reading {
                PANICS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(at);
            }
            if !quiet {
                previous(info);
            }
        }));
    });
}

fn in_dependency(location: &str) -> bool {
    location.contains("/.cargo/registry/") || location.contains("/rustc/")
}

/// Longest one read of a small corrupt input may take: `LAMINA_FUZZ_CASE_SECONDS` (default 2 s, far
/// above the milliseconds a read of the corpus files takes: it catches runaway loops sized by a
/// corrupt length, not slowness of a loaded machine).
pub fn case_budget() -> Duration {
    let secs = std::env::var("LAMINA_FUZZ_CASE_SECONDS").ok().and_then(|s| s.parse::<f64>().ok()).unwrap_or(2.0);
    Duration::from_secs_f64(secs.max(0.001))
}

/// Reads one corrupt input with `read` and returns what went wrong: a panic (even one a reader
/// caught itself, when it is in Lamina's code), `Ok` where only `Err` is possible, an error that is
/// not `Corrupt` naming `object` (when given), an allocation over [`MAX_ALLOCATION`], a read over
/// [`case_budget`]. `contained` counts panics inside parquet/arrow that a guard turned into errors.
pub fn check_one<T>(
    name: &str,
    how: &str,
    must_fail: bool,
    object: Option<&str>,
    contained: &mut usize,
    read: impl FnOnce() -> crate::Result<T>,
) -> Vec<String> {
    record_panics();
    let mut failures = Vec::new();
    // One read at a time across the corpus tests, so an allocation is charged to its reader.
    let _one = ONE_READER.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let before = largest_allocation();
    PANICS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clear();
    *READER.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = std::thread::current().name().map(String::from);
    *CASE.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = format!("{name}: {how}");
    READING.store(true, Ordering::SeqCst);
    let started = Instant::now();
    let outcome = catch_unwind(AssertUnwindSafe(read));
    let took = started.elapsed();
    READING.store(false, Ordering::SeqCst);
    for at in PANICS.lock().unwrap_or_else(std::sync::PoisonError::into_inner).drain(..) {
        if in_dependency(&at) {
            *contained += 1;
        } else {
            failures.push(format!("{name}: {how}: panicked in Lamina's code at {at}"));
        }
    }
    match outcome {
        Err(payload) => {
            let msg = payload
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            failures.push(format!("{name}: {how}: panicked: {msg}"));
        }
        Ok(Ok(_)) if must_fail => failures.push(format!("{name}: {how}: read back without an error")),
        Ok(Err(e)) => {
            if let Some(object) = object {
                let named = matches!(&e, crate::Error::Corrupt { object: o, .. } if o == object);
                if !named {
                    failures.push(format!("{name}: {how}: not a Corrupt error naming {object}: {e:?}"));
                }
            }
        }
        Ok(Ok(_)) => {}
    }
    let after = largest_allocation();
    if after > MAX_ALLOCATION && after > before {
        failures.push(format!("{name}: {how}: asked for {after} bytes at once"));
    }
    if took > case_budget() {
        failures.push(format!("{name}: {how}: took {took:?} (LAMINA_FUZZ_CASE_SECONDS bounds one read)"));
    }
    failures
}

/// Feeds `mutants`, then random mutations of `valid` for the fuzz budget, to `read`; returns
/// what went wrong (a panic, `Ok` where only `Err` is possible, an oversized allocation).
pub fn drive<T>(name: &str, valid: &[u8], mutants: Vec<Mutant>, read: impl Fn(&[u8]) -> crate::Result<T>) -> Vec<String> {
    let mut failures = Vec::new();
    let mut contained = 0usize;
    for m in &mutants {
        failures.extend(check_one(name, &m.how, m.must_fail, None, &mut contained, || read(&m.bytes)));
    }
    let deadline = Instant::now() + fuzz_budget();
    let seed = fuzz_seed();
    let mut rng = Rng::new(seed);
    let mut i = 0u64;
    while Instant::now() < deadline {
        let bytes = mutate(valid, &mut rng);
        let how = format!("random mutation {i} (LAMINA_FUZZ_SEED={seed})");
        failures.extend(check_one(name, &how, false, None, &mut contained, || read(&bytes)));
        i += 1;
    }
    if contained > 0 {
        eprintln!("{name}: {contained} panics inside parquet/arrow were caught and reported as corrupt files");
    }
    failures
}

/// Fails the test with every failure listed (the first 20).
pub fn assert_clean(failures: Vec<String>) {
    if !failures.is_empty() {
        let shown: Vec<&String> = failures.iter().take(20).collect();
        panic!("{} corrupt inputs were mishandled:\n{}", failures.len(), shown.iter().map(|s| s.as_str()).collect::<Vec<_>>().join("\n"));
    }
}
