//! The point-lookup index next to the skiplist: an open-addressing hash table
//! (linear probing) from each key to its newest node.
//!
//! A skiplist search touches ~40 nodes in a million-entry memtable, each a
//! likely cache (and TLB) miss; this table answers "newest entry of key" in
//! about two. It follows the skiplist's rules: one writer (the holder of the
//! list's write lock, which alone owns the [`IndexWriter`]), lock-free
//! readers, slots published with `Release` and read with `Acquire`. A slot
//! only ever goes from null to a node of one key, then to newer nodes of that
//! key, so a reader's probe sequence is never broken.
//!
//! Growing builds a twice larger table, fills it, then publishes it. Old
//! tables stay in the arena (readers may still be probing them) until the
//! memtable is dropped. The writer keeps 32 bits of each slot's hash on the
//! side, so growing and probing past other keys never touch their nodes.
//! Memory: 16-32 bytes per key in the current table, as much again in retired
//! ones, plus the writer's 8-16 bytes of hashes (on the heap, not in the arena).

use std::mem::{offset_of, size_of};
use std::ptr;
use std::sync::atomic::{AtomicPtr, Ordering::*};

use super::arena::Arena;
use super::node_key::KeyFormat;
use super::skiplist::Node;

/// Slots of the first table; a table is grown before it is more than half full.
const INITIAL_SLOTS: usize = 1 << 10;

/// Most distinct keys a memtable takes: tables stay within 2^31 slots, whose
/// indices the writer's 32-bit hashes can address.
pub(super) const MAX_KEYS: u64 = 1 << 30;

#[repr(C)]
struct Table<F: KeyFormat> {
    /// `log2(slots)`: the slot of a hash is its top `bits` bits.
    bits: u32,
    slots: [AtomicPtr<Node<F>>; 0],
}

impl<F: KeyFormat> Table<F> {
    const SLOTS: usize = offset_of!(Table<F>, slots);

    /// A table of `1 << bits` empty slots in `arena`.
    fn alloc(arena: &mut Arena, bits: u32) -> *mut Table<F> {
        let size = Self::SLOTS + (1usize << bits) * size_of::<AtomicPtr<Node<F>>>();
        let t = arena.alloc(size).cast::<Table<F>>().as_ptr();
        // SAFETY: `size` fresh 8-aligned bytes: zero is a valid header and null slots; the
        // header is written before the table is shared.
        unsafe {
            ptr::write_bytes(t.cast::<u8>(), 0, size);
            ptr::addr_of_mut!((*t).bits).write(bits);
        }
        t
    }

    /// # Safety
    /// `t` is a live table and `i < 1 << bits`.
    #[inline(always)]
    unsafe fn slot<'a>(t: *const Table<F>, i: usize) -> &'a AtomicPtr<Node<F>> {
        // SAFETY: `1 << bits` slots follow the header inside the table's allocation.
        unsafe { &*(t as *const u8).add(Self::SLOTS).cast::<AtomicPtr<Node<F>>>().add(i) }
    }
}

/// The slot a hash starts probing at in a table of `1 << bits` slots.
#[inline(always)]
fn home(hash: u64, bits: u32) -> usize {
    (hash >> (64 - bits)) as usize
}

/// The top 32 bits of a hash: what the writer keeps per slot.
#[inline(always)]
fn tag(hash: u64) -> u32 {
    (hash >> 32) as u32
}

pub(super) struct HashIndex<F: KeyFormat> {
    table: AtomicPtr<Table<F>>,
    seed: u64,
}

/// The writer's side of the index: the hash tag of every slot of the current table.
pub(super) struct IndexWriter {
    tags: Vec<u32>,
}

impl<F: KeyFormat> HashIndex<F> {
    pub(super) fn new(arena: &mut Arena) -> (Self, IndexWriter) {
        // A per-memtable seed, so no fixed set of keys collides in every memtable.
        let seed = {
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_usize(arena as *const Arena as usize);
            h.finish()
        };
        let bits = INITIAL_SLOTS.trailing_zeros();
        let index = HashIndex { table: AtomicPtr::new(Table::alloc(arena, bits)), seed };
        (index, IndexWriter { tags: vec![0; INITIAL_SLOTS] })
    }

    #[inline(always)]
    pub(super) fn hash(&self, key: F::Probe<'_>) -> u64 {
        F::hash(key, self.seed)
    }

    /// The newest node of `key` (null if it has none yet). `hash` is `self.hash(key)`.
    #[inline]
    pub(super) fn find(&self, key: F::Probe<'_>, hash: u64) -> *const Node<F> {
        let t = self.table.load(Acquire);
        // SAFETY: `t` is a published table; a table's header never changes.
        let bits = unsafe { (*t).bits };
        let mask = (1usize << bits) - 1;
        let mut i = home(hash, bits);
        loop {
            // SAFETY: `i <= mask`.
            let n = unsafe { Table::slot(t, i) }.load(Acquire);
            // SAFETY: a non-null slot holds a published node of the list.
            if n.is_null() || F::compare(unsafe { Node::key(n) }, key) == std::cmp::Ordering::Equal {
                return n;
            }
            i = (i + 1) & mask;
        }
    }

    /// Points `key`'s slot at `node`, its new newest entry, already linked into the list.
    /// `keys` is the number of distinct keys before this insert (below [`MAX_KEYS`]).
    /// Returns whether `key` is new. `w` and `arena` are the list writer's.
    pub(super) fn upsert(
        &self,
        w: &mut IndexWriter,
        arena: &mut Arena,
        key: F::Probe<'_>,
        hash: u64,
        node: *mut Node<F>,
        keys: u64,
    ) -> bool {
        let mut t = self.table.load(Relaxed);
        if (keys as usize + 1) * 2 > w.tags.len() {
            t = self.grow(w, arena, t);
        }
        let tag = tag(hash);
        let mask = w.tags.len() - 1;
        let mut i = home(hash, w.tags.len().trailing_zeros());
        loop {
            // SAFETY: `i <= mask`, and `w.tags` has one entry per slot of the current table `t`.
            let slot = unsafe { Table::slot(t, i) };
            let n = slot.load(Relaxed);
            if n.is_null() {
                w.tags[i] = tag;
                slot.store(node, Release);
                return true;
            }
            // SAFETY: a non-null slot holds a published node of the list.
            if w.tags[i] == tag && F::compare(unsafe { Node::key(n) }, key) == std::cmp::Ordering::Equal {
                slot.store(node, Release);
                return false;
            }
            i = (i + 1) & mask;
        }
    }

    /// Copies `old` into a table twice its size and publishes it; `old` stays allocated.
    fn grow(&self, w: &mut IndexWriter, arena: &mut Arena, old: *mut Table<F>) -> *mut Table<F> {
        let bits = w.tags.len().trailing_zeros() + 1;
        let t = Table::<F>::alloc(arena, bits);
        let mask = (1usize << bits) - 1;
        let mut tags = vec![0u32; 1 << bits];
        for (j, &tag) in w.tags.iter().enumerate() {
            // SAFETY: `j` is a slot of `old`, which has one per tag.
            let n = unsafe { Table::slot(old, j) }.load(Relaxed);
            if n.is_null() {
                continue;
            }
            // Bits 63..32 of the hash are the tag: the home slot needs no node.
            let mut i = (tag >> (32 - bits)) as usize;
            // SAFETY: `i <= mask`; the new table is not shared yet and has room for every key.
            while !unsafe { Table::slot(t, i) }.load(Relaxed).is_null() {
                i = (i + 1) & mask;
            }
            // SAFETY: as above.
            unsafe { Table::slot(t, i) }.store(n, Relaxed);
            tags[i] = tag;
        }
        w.tags = tags;
        self.table.store(t, Release);
        t
    }
}
