//! An append-only arena: memory is handed out in 8-byte aligned pieces from
//! chunks that are never moved, reused or freed before the arena is dropped.
//!
//! That is what lets skiplist readers follow raw pointers without epochs or
//! hazard pointers: anything they can reach lives as long as the memtable.
//! The arena itself is single-owner (`&mut self` to allocate); the skiplist
//! keeps it behind its writer lock.

use std::alloc::{alloc, dealloc, handle_alloc_error, Layout};
use std::ptr::NonNull;

/// Every allocation is aligned to (and rounded up to a multiple of) this.
pub(super) const ALIGN: usize = 8;

/// Size of an ordinary chunk. Pieces larger than a quarter of it get a chunk
/// of their own, so a large value never wastes the rest of the current chunk.
pub(super) const CHUNK_BYTES: usize = 1 << 20;

pub(super) struct Arena {
    /// Every chunk ever allocated, with its layout, freed on drop.
    chunks: Vec<(NonNull<u8>, Layout)>,
    /// Next free byte of the current chunk and bytes left in it.
    cursor: *mut u8,
    left: usize,
    /// Sum of all chunk sizes: the memory this arena holds.
    allocated: usize,
}

impl Arena {
    pub(super) fn new() -> Self {
        Arena { chunks: Vec::new(), cursor: std::ptr::null_mut(), left: 0, allocated: 0 }
    }

    /// Bytes of all chunks allocated so far.
    pub(super) fn allocated(&self) -> usize {
        self.allocated
    }

    /// `size` bytes (rounded up to [`ALIGN`]), aligned to [`ALIGN`], uninitialised.
    /// Aborts like `Vec` when the allocator fails; panics only if `size` overflows a layout.
    pub(super) fn alloc(&mut self, size: usize) -> NonNull<u8> {
        let size = size.max(1).next_multiple_of(ALIGN);
        if size > self.left {
            if size > CHUNK_BYTES / 4 {
                // A dedicated chunk; the current one stays current.
                return self.new_chunk(size);
            }
            let chunk = self.new_chunk(CHUNK_BYTES);
            self.cursor = chunk.as_ptr();
            self.left = CHUNK_BYTES;
        }
        let out = self.cursor;
        // SAFETY: `size <= self.left`, so `cursor + size` stays inside (or one past) the current chunk.
        self.cursor = unsafe { self.cursor.add(size) };
        self.left -= size;
        // SAFETY: `out` points into a live chunk, so it is not null.
        unsafe { NonNull::new_unchecked(out) }
    }

    fn new_chunk(&mut self, size: usize) -> NonNull<u8> {
        let layout = match Layout::from_size_align(size, ALIGN) {
            Ok(l) => l,
            Err(_) => panic!("memtable arena: a piece of {size} bytes cannot be allocated"),
        };
        // SAFETY: `layout` has a non-zero size (callers pass at least ALIGN bytes).
        let ptr = unsafe { alloc(layout) };
        let Some(ptr) = NonNull::new(ptr) else { handle_alloc_error(layout) };
        self.chunks.push((ptr, layout));
        self.allocated += size;
        ptr
    }
}

impl Drop for Arena {
    fn drop(&mut self) {
        for (ptr, layout) in self.chunks.drain(..) {
            // SAFETY: each chunk was allocated by `alloc` with exactly this layout and is freed once.
            unsafe { dealloc(ptr.as_ptr(), layout) };
        }
    }
}

// SAFETY: the arena owns its chunks outright (raw pointers only because their
// addresses must stay stable); moving it to another thread moves that ownership.
unsafe impl Send for Arena {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_are_aligned_disjoint_and_counted() {
        let mut a = Arena::new();
        let p1 = a.alloc(3).as_ptr() as usize;
        let p2 = a.alloc(16).as_ptr() as usize;
        assert_eq!(p1 % ALIGN, 0);
        assert_eq!(p2, p1 + 8);
        assert_eq!(a.allocated(), CHUNK_BYTES);
        // A big piece gets its own chunk and the current chunk keeps serving small ones.
        let big = a.alloc(CHUNK_BYTES).as_ptr() as usize;
        assert_eq!(a.allocated(), 2 * CHUNK_BYTES);
        let p3 = a.alloc(8).as_ptr() as usize;
        assert_eq!(p3, p2 + 16);
        assert_ne!(big, p3);
    }
}
