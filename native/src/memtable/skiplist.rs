//! A single-writer, lock-free-read skiplist in an arena (RocksDB's
//! InlineSkipList design), with a hash index of each key's newest entry.
//!
//! Each entry is one arena allocation: header (sequence, value length, height,
//! key), the tower of forward links (height 1 + k with probability
//! 3/4 * (1/4)^k), the value bytes, then any key bytes too long to be inline.
//! Entries are ordered by key ascending, then sequence descending, so the first
//! entry of a key is its newest.
//!
//! Concurrency: the writer is whoever holds [`SkipList::write`]'s lock; it
//! fills a node completely, then links it bottom-up with `Release` stores,
//! then points the hash index at it. Readers traverse with `Acquire` loads and
//! no lock: a node they can reach was fully written before it was linked, is
//! never modified afterwards (except its links, which are atomics), and is
//! never freed before the list is dropped, which `&self` borrows rule out.
//!
//! Lookups of the newest entry go through the hash index (about two cache
//! misses instead of the ~40 of a skiplist search over a million entries);
//! lookups at an older visible sequence seek in the skiplist and stop at the
//! first entry of the key that is visible. Batches are linked in key order,
//! each search starting from where the previous entry went.

use std::marker::PhantomData;
use std::mem::{offset_of, size_of};
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicPtr, AtomicU64, AtomicUsize, Ordering::*};
use std::sync::{Mutex, MutexGuard, TryLockError};

use super::arena::Arena;
use super::hash::{HashIndex, IndexWriter, MAX_KEYS};
use super::node_key::KeyFormat;
use crate::error::{Error, Result};

/// Tallest tower; with p = 1/4 this serves ~4^16 entries in O(log n).
pub(super) const MAX_HEIGHT: usize = 16;

/// `value_len` of a tombstone.
const TOMBSTONE: u32 = u32::MAX;

/// The fixed part of an entry; the tower follows it in the same allocation.
#[repr(C)]
pub(super) struct Node<F: KeyFormat> {
    seq: u64,
    value_len: u32,
    height: u32,
    key: F::Stored,
    tower: [AtomicPtr<Node<F>>; 0],
}

impl<F: KeyFormat> Node<F> {
    const TOWER: usize = offset_of!(Node<F>, tower);

    /// The link of `node` at `level`.
    ///
    /// # Safety
    /// `node` is a node of a live list (or its head) with `height > level`.
    #[inline(always)]
    unsafe fn link<'a>(node: *const Node<F>, level: usize) -> &'a AtomicPtr<Node<F>> {
        // SAFETY: the tower has `height` initialised links right after the header, inside
        // the node's allocation (the caller guarantees `level < height`).
        unsafe { &*(node as *const u8).add(Self::TOWER).cast::<AtomicPtr<Node<F>>>().add(level) }
    }

    /// The value of `node` (`None` for a tombstone).
    ///
    /// # Safety
    /// `node` is an entry (not the head) of a live list; the bytes live as long as the list.
    #[inline(always)]
    unsafe fn value<'a>(node: *const Node<F>) -> Option<&'a [u8]> {
        // SAFETY: the header fields were written before the node was published.
        let (len, height) = unsafe { ((*node).value_len, (*node).height as usize) };
        if len == TOMBSTONE {
            return None;
        }
        let at = Self::TOWER + height * size_of::<AtomicPtr<Node<F>>>();
        // SAFETY: `len` value bytes were copied right after the tower before publication.
        Some(unsafe { std::slice::from_raw_parts((node as *const u8).add(at), len as usize) })
    }

    /// # Safety
    /// `node` is an entry (not the head) of a live list.
    #[inline(always)]
    pub(super) unsafe fn key<'a>(node: *const Node<F>) -> &'a F::Stored {
        // SAFETY: entries' keys are written before publication and never change.
        unsafe { &(*node).key }
    }
}

/// What the writer alone touches, behind the list's lock.
struct WriteState<F: KeyFormat> {
    arena: Arena,
    rng: u64,
    /// The last node at each level (the head where a level is empty): appends
    /// of keys above every key skip the search.
    tails: [*mut Node<F>; MAX_HEIGHT],
    index: IndexWriter,
}

// SAFETY: the raw pointers are into the arena this state owns (or the list's head, in the
// same arena); the state moves between threads only as a whole, under the list's mutex.
unsafe impl<F: KeyFormat> Send for WriteState<F> {}

pub(super) struct SkipList<F: KeyFormat> {
    head: NonNull<Node<F>>,
    /// Levels in use (>= 1). Read `Relaxed`: a stale value only changes where a search starts.
    height: AtomicUsize,
    entries: AtomicU64,
    keys: AtomicU64,
    /// Sequence of the newest linked entry (stored `Release` after linking it).
    seq: AtomicU64,
    arena_bytes: AtomicUsize,
    /// The newest node of every key, for point lookups.
    index: HashIndex<F>,
    write: Mutex<WriteState<F>>,
}

// SAFETY: shared access only reads immutable published nodes and atomics; the arena and the
// writer's pointers are behind `write`. Nodes hold no thread-affine data.
unsafe impl<F: KeyFormat> Sync for SkipList<F> {}
// SAFETY: the list owns its arena and every node in it.
unsafe impl<F: KeyFormat> Send for SkipList<F> {}

impl<F: KeyFormat> SkipList<F> {
    pub(super) fn new() -> Self {
        let mut arena = Arena::new();
        let size = Node::<F>::TOWER + MAX_HEIGHT * size_of::<AtomicPtr<Node<F>>>();
        let head = arena.alloc(size).cast::<Node<F>>();
        // SAFETY: `size` fresh bytes; all-zero is a valid header, key (integers and byte
        // arrays) and null links. The head's key is never read.
        unsafe { ptr::write_bytes(head.as_ptr().cast::<u8>(), 0, size) };
        let (index, index_writer) = HashIndex::new(&mut arena);
        let arena_bytes = AtomicUsize::new(arena.allocated());
        let tails = [head.as_ptr(); MAX_HEIGHT];
        SkipList {
            head,
            height: AtomicUsize::new(1),
            entries: AtomicU64::new(0),
            keys: AtomicU64::new(0),
            seq: AtomicU64::new(0),
            arena_bytes,
            index,
            write: Mutex::new(WriteState { arena, rng: 0x9E37_79B9_7F4A_7C15, tails, index: index_writer }),
        }
    }

    pub(super) fn entries(&self) -> u64 {
        self.entries.load(Relaxed)
    }

    pub(super) fn distinct_keys(&self) -> u64 {
        self.keys.load(Relaxed)
    }

    pub(super) fn sequence(&self) -> u64 {
        self.seq.load(Acquire)
    }

    pub(super) fn arena_bytes(&self) -> usize {
        self.arena_bytes.load(Relaxed)
    }

    /// The exclusive writer, waiting for the current one to finish.
    pub(super) fn write(&self) -> ListWriter<'_, F> {
        // A panic while writing cannot leave a half-linked node (linking does not
        // panic), so a poisoned lock still guards a consistent list.
        let state = self.write.lock().unwrap_or_else(|e| e.into_inner());
        ListWriter { list: self, state }
    }

    /// The exclusive writer if nobody else holds it.
    pub(super) fn try_write(&self) -> Option<ListWriter<'_, F>> {
        let state = match self.write.try_lock() {
            Ok(s) => s,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        Some(ListWriter { list: self, state })
    }

    /// The first entry not ordered before (`key`, `visible`): the newest entry of `key`
    /// with a sequence <= `visible` if there is one, else an entry of a greater key, or null.
    #[inline]
    fn seek(&self, key: F::Probe<'_>, visible: u64) -> *const Node<F> {
        let mut x: *const Node<F> = self.head.as_ptr();
        let mut level = self.height.load(Relaxed) - 1;
        // The node last found not to be before the target: skip comparing it again one level down.
        let mut known_after: *const Node<F> = ptr::null();
        loop {
            // SAFETY: `x` is the head or an entry reached at `level`, so its height exceeds `level`.
            let next = unsafe { Node::link(x, level) }.load(Acquire);
            let before = !ptr::eq(next, known_after)
                && !next.is_null()
                // SAFETY: `next` is a published entry of this list.
                && match F::compare(unsafe { Node::key(next) }, key) {
                    std::cmp::Ordering::Less => true,
                    // SAFETY: as above.
                    std::cmp::Ordering::Equal => (unsafe { (*next).seq }) > visible,
                    std::cmp::Ordering::Greater => false,
                };
            if before {
                x = next;
            } else if level == 0 {
                return next;
            } else {
                known_after = next;
                level -= 1;
            }
        }
    }

    /// The newest entry of `key` with a sequence <= `visible`: `None` if there is
    /// none, `Some(None)` for a tombstone, `Some(Some(value))` for a value.
    ///
    /// The hash index gives the key's newest entry; only when that one is newer
    /// than `visible` does the skiplist seek to the older version.
    #[inline]
    pub(super) fn get(&self, key: F::Probe<'_>, visible: u64) -> Option<Option<&[u8]>> {
        let n = self.index.find(key, self.index.hash(key));
        if n.is_null() {
            return None;
        }
        // SAFETY: a non-null result of `find` is a published entry of this list.
        if unsafe { (*n).seq } <= visible {
            // SAFETY: as above; the value lives as long as `&self`.
            return Some(unsafe { Node::value(n) });
        }
        self.get_by_seek(key, visible)
    }

    /// `get` through the skiplist alone.
    pub(super) fn get_by_seek(&self, key: F::Probe<'_>, visible: u64) -> Option<Option<&[u8]>> {
        let n = self.seek(key, visible);
        // SAFETY: a non-null result of `seek` is a published entry of this list.
        if n.is_null() || F::compare(unsafe { Node::key(n) }, key) != std::cmp::Ordering::Equal {
            return None;
        }
        // SAFETY: as above; the value lives as long as `&self`.
        Some(unsafe { Node::value(n) })
    }

    /// The newest entry with a sequence <= `visible` of every key that has one, keys ascending.
    pub(super) fn iter(&self, visible: u64) -> Iter<'_, F> {
        // SAFETY: the head's tower has MAX_HEIGHT links.
        let first = unsafe { Node::link(self.head.as_ptr(), 0) }.load(Acquire);
        Iter { next: first, last: ptr::null(), visible, _list: PhantomData }
    }
}

/// Exclusive write access to a list.
pub(super) struct ListWriter<'a, F: KeyFormat> {
    list: &'a SkipList<F>,
    state: MutexGuard<'a, WriteState<F>>,
}

/// Where an entry goes: between `prev[i]` and `next[i]` (null: the end) at every level.
struct Splice<F: KeyFormat> {
    prev: [*mut Node<F>; MAX_HEIGHT],
    next: [*mut Node<F>; MAX_HEIGHT],
}

/// The stored length of a value (TOMBSTONE for a delete), or why it cannot be stored.
fn value_len(value: Option<&[u8]>) -> Result<u32> {
    match value {
        None => Ok(TOMBSTONE),
        Some(v) => match u32::try_from(v.len()) {
            Ok(n) if n != TOMBSTONE => Ok(n),
            _ => Err(Error::InvalidArgument(format!("a memtable value of {} bytes is too large", v.len()))),
        },
    }
}

impl<F: KeyFormat> ListWriter<'_, F> {
    /// Adds an entry for `key` (a value, or a tombstone for `None`) with the next
    /// sequence number, newer than every entry so far; returns that sequence.
    pub(super) fn insert(&mut self, key: F::Probe<'_>, value: Option<&[u8]>) -> Result<u64> {
        let vlen = value_len(value)?;
        self.check_room(1)?;
        let seq = self.list.seq.load(Relaxed) + 1;
        let mut splice = self.locate(key);
        self.link(&mut splice, key, value, vlen, seq);
        self.list.seq.store(seq, Release);
        Ok(seq)
    }

    /// Adds `rows` as if inserted one by one in order (row `i` gets the sequence after
    /// the current one plus `i`), but in key order, each search starting where the
    /// previous entry went. Returns the last sequence. Nothing is applied if a row is
    /// invalid. Readers may see the rows in any order; the sequence is published last,
    /// so snapshots (`iter`, a visible sequence) see all of them or none.
    pub(super) fn insert_batch(&mut self, rows: &[(F::Probe<'_>, Option<&[u8]>)]) -> Result<u64> {
        let base = self.list.seq.load(Relaxed);
        if rows.is_empty() {
            return Ok(base);
        }
        self.check_room(rows.len())?;
        let mut order: Vec<(usize, u32)> = Vec::with_capacity(rows.len());
        for (i, (_, value)) in rows.iter().enumerate() {
            order.push((i, value_len(*value)?));
        }
        // Stable: the rows of one key stay in sequence order, each newer than the last.
        order.sort_by(|a, b| F::order(rows[a.0].0, rows[b.0].0));
        let mut splice = self.locate(rows[order[0].0].0);
        for (n, &(i, vlen)) in order.iter().enumerate() {
            let (key, value) = rows[i];
            if n > 0 {
                self.relocate(&mut splice, key);
            }
            self.link(&mut splice, key, value, vlen, base + 1 + i as u64);
        }
        let last = base + rows.len() as u64;
        self.list.seq.store(last, Release);
        Ok(last)
    }

    fn check_room(&self, rows: usize) -> Result<()> {
        if self.list.keys.load(Relaxed) + rows as u64 > MAX_KEYS {
            return Err(Error::InvalidArgument(format!("a memtable holds at most {MAX_KEYS} keys: flush it")));
        }
        Ok(())
    }

    /// Where a new entry of `key` goes. It is newer than every entry of its key, so it
    /// goes before them: after the last smaller key.
    fn locate(&self, key: F::Probe<'_>) -> Splice<F> {
        let list = self.list;
        let st = &*self.state;
        let head = list.head.as_ptr();
        let tail = st.tails[0];
        // SAFETY: a tail other than the head is a published entry.
        if tail == head || F::compare(unsafe { Node::key(tail) }, key) == std::cmp::Ordering::Less {
            // Above every key: append after the tails (the head on empty levels).
            return Splice { prev: st.tails, next: [ptr::null_mut(); MAX_HEIGHT] };
        }
        let mut splice = Splice { prev: [head; MAX_HEIGHT], next: [ptr::null_mut(); MAX_HEIGHT] };
        self.search(&mut splice, key, head, list.height.load(Relaxed) - 1);
        splice
    }

    /// Moves `splice`, where an entry of a key <= `key` went last, to where `key` goes:
    /// from the lowest level whose bracket still holds `key`, down.
    fn relocate(&self, splice: &mut Splice<F>, key: F::Probe<'_>) {
        let mut level = 0;
        while level + 1 < MAX_HEIGHT {
            let n = splice.next[level];
            // SAFETY: a non-null splice link is a published entry.
            if n.is_null() || F::compare(unsafe { Node::key(n) }, key) != std::cmp::Ordering::Less {
                break;
            }
            level += 1;
        }
        self.search(splice, key, splice.prev[level], level);
    }

    /// Fills `splice` for `key` at levels `top..=0`, starting from `x`, which is before `key`
    /// and is the head or an entry at least `top + 1` high.
    fn search(&self, splice: &mut Splice<F>, key: F::Probe<'_>, mut x: *mut Node<F>, top: usize) {
        for level in (0..=top).rev() {
            loop {
                // SAFETY: `x` is the head or an entry reached at `level`.
                let n = unsafe { Node::link(x, level) }.load(Acquire);
                // SAFETY: a non-null link is a published entry.
                if !n.is_null() && F::compare(unsafe { Node::key(n) }, key) == std::cmp::Ordering::Less {
                    x = n;
                } else {
                    splice.next[level] = n;
                    break;
                }
            }
            splice.prev[level] = x;
        }
    }

    /// Builds the entry, links it at `splice` and points the hash index at it. The
    /// caller publishes the sequence. Afterwards `splice` is where an entry of the
    /// same key would go: just before this one.
    fn link(&mut self, splice: &mut Splice<F>, key: F::Probe<'_>, value: Option<&[u8]>, value_len: u32, seq: u64) {
        let list = self.list;
        let st = &mut *self.state;
        let hash = list.index.hash(key);
        let height = random_height(&mut st.rng);
        let vlen = value.map_or(0, <[u8]>::len);
        let value_at = Node::<F>::TOWER + height * size_of::<AtomicPtr<Node<F>>>();
        let size = value_at + vlen + F::spill_len(key);
        let node = st.arena.alloc(size).cast::<Node<F>>().as_ptr();
        // SAFETY: `node` has `size` fresh, 8-aligned bytes: the header, `height` links, the
        // value and the spilled key all fit; nothing else can see it until it is linked.
        unsafe {
            let bytes = node.cast::<u8>();
            ptr::addr_of_mut!((*node).seq).write(seq);
            ptr::addr_of_mut!((*node).value_len).write(value_len);
            ptr::addr_of_mut!((*node).height).write(height as u32);
            if let Some(v) = value {
                ptr::copy_nonoverlapping(v.as_ptr(), bytes.add(value_at), v.len());
            }
            ptr::addr_of_mut!((*node).key).write(F::store(key, bytes.add(value_at + vlen)));
            let tower = bytes.add(Node::<F>::TOWER).cast::<AtomicPtr<Node<F>>>();
            for (level, n) in splice.next.iter().enumerate().take(height) {
                tower.add(level).write(AtomicPtr::new(*n));
            }
        }
        if height > list.height.load(Relaxed) {
            list.height.store(height, Relaxed);
        }
        // SAFETY: a non-null next[0] is a published entry.
        let new_key_here = splice.next[0].is_null()
            || F::compare(unsafe { Node::key(splice.next[0]) }, key) != std::cmp::Ordering::Equal;
        for level in 0..height {
            // SAFETY: prev[level] is the head or an entry whose height exceeds `level`.
            unsafe { Node::link(splice.prev[level], level) }.store(node, Release);
            if splice.next[level].is_null() {
                st.tails[level] = node;
            }
            splice.next[level] = node;
        }
        let new_key = list.index.upsert(&mut st.index, &mut st.arena, key, hash, node, list.keys.load(Relaxed));
        debug_assert_eq!(new_key, new_key_here);
        list.entries.store(list.entries.load(Relaxed) + 1, Relaxed);
        if new_key {
            list.keys.store(list.keys.load(Relaxed) + 1, Relaxed);
        }
        list.arena_bytes.store(st.arena.allocated(), Relaxed);
    }
}

/// 1 + the number of pairs of trailing zero bits of a random word: P(height > h) = 4^-h.
fn random_height(rng: &mut u64) -> usize {
    // xorshift64: plenty for tower heights.
    let mut x = *rng;
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    *rng = x;
    (1 + x.trailing_zeros() as usize / 2).min(MAX_HEIGHT)
}

/// The newest entry per key with a sequence <= a visible one, in key order.
///
/// Entries linked while iterating have larger sequences than `visible` (it was
/// read from the list first), so they are skipped: the iterator sees a snapshot.
pub(super) struct Iter<'a, F: KeyFormat> {
    next: *const Node<F>,
    /// The entry returned last (null before the first).
    last: *const Node<F>,
    visible: u64,
    _list: PhantomData<&'a SkipList<F>>,
}

/// One entry: key, value (`None` for a tombstone) and sequence.
pub(super) type RawEntry<'a, F> = (<F as KeyFormat>::Probe<'a>, Option<&'a [u8]>, u64);

impl<'a, F: KeyFormat> Iterator for Iter<'a, F> {
    type Item = RawEntry<'a, F>;

    fn next(&mut self) -> Option<Self::Item> {
        while !self.next.is_null() {
            let n = self.next;
            // SAFETY: `n` and a non-null `last` are published entries of the list borrowed for 'a.
            unsafe {
                self.next = Node::link(n, 0).load(Acquire);
                if (*n).seq > self.visible {
                    continue;
                }
                let key = F::load(Node::key(n));
                // Entries of a key are adjacent, newest first: the first visible one wins.
                if !self.last.is_null() && F::compare(Node::key(self.last), key) == std::cmp::Ordering::Equal {
                    continue;
                }
                self.last = n;
                return Some((key, Node::value(n), (*n).seq));
            }
        }
        None
    }
}
