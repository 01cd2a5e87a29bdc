//! The memtable of streaming WAL ingestion: rows applied from the WAL, keyed by
//! primary key, answering point lookups until they are flushed to Parquet.
//!
//! A [`MemTable`] is an arena skiplist (see `skiplist.rs`) of versioned
//! entries: every put or delete gets the next sequence number, and a lookup
//! returns the newest entry of a key whose sequence is visible. Keys are
//! `int64`, `uint64` (one order-preserving `u64` in the node) or bytes
//! (inline when at most 24 bytes long), in key order. A hash index next to
//! the skiplist (`hash.rs`) finds a key's newest entry in O(1). The WAL
//! applier's batch calls take and return Arrow arrays (`columns.rs`).
//!
//! Concurrency: one writer at a time ([`MemTable::writer`] is a lock; every
//! write goes through a [`Writer`], which takes `&mut self`), any number of
//! readers at once without locks (`get`, `newest`, the counters). Memory is
//! only released when the memtable is dropped; [`MemTable::arena_bytes`]
//! tells the caller when to flush and start a new one.

mod arena;
mod columns;
mod hash;
mod node_key;
mod skiplist;

#[cfg(test)]
mod tests;

use crate::error::{Error, Result};
use crate::keys::{decode_i64, encode_i64};
use node_key::{BytesKey, BytesProbe, NumKey};
use skiplist::{Iter, ListWriter, SkipList};

pub use columns::{ABSENT, DELETED, LIVE};

/// The type of a memtable's keys.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyKind {
    Int64,
    UInt64,
    Bytes,
}

impl KeyKind {
    /// "int64", "uint64" or "bytes".
    pub fn parse(name: &str) -> Result<KeyKind> {
        match name {
            "int64" => Ok(KeyKind::Int64),
            "uint64" => Ok(KeyKind::UInt64),
            "bytes" => Ok(KeyKind::Bytes),
            _ => Err(Error::InvalidArgument(format!("memtable key type must be int64, uint64 or bytes, not {name:?}"))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            KeyKind::Int64 => "int64",
            KeyKind::UInt64 => "uint64",
            KeyKind::Bytes => "bytes",
        }
    }
}

/// One key; its variant must match the memtable's [`KeyKind`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Key<'a> {
    I64(i64),
    U64(u64),
    Bytes(&'a [u8]),
}

impl Key<'_> {
    fn kind(&self) -> KeyKind {
        match self {
            Key::I64(_) => KeyKind::Int64,
            Key::U64(_) => KeyKind::UInt64,
            Key::Bytes(_) => KeyKind::Bytes,
        }
    }
}

/// A value, or `None` for a delete (a tombstone).
pub type Value<'a> = Option<&'a [u8]>;

/// One row of a batch: a key and its value or `None` to delete it.
pub type Row<'a> = (Key<'a>, Value<'a>);

/// What a point lookup found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup<'a> {
    /// No entry for the key (at the visible sequence).
    Absent,
    /// The newest entry is this value.
    Live(&'a [u8]),
    /// The newest entry is a tombstone.
    Deleted,
}

impl<'a> Lookup<'a> {
    fn from_raw(raw: Option<Option<&'a [u8]>>) -> Self {
        match raw {
            None => Lookup::Absent,
            Some(None) => Lookup::Deleted,
            Some(Some(v)) => Lookup::Live(v),
        }
    }

    /// The value, if the key is live.
    pub fn value(self) -> Option<&'a [u8]> {
        match self {
            Lookup::Live(v) => Some(v),
            _ => None,
        }
    }
}

/// The newest entry of a key: its value (`None` for a tombstone) and sequence.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Entry<'a> {
    pub key: Key<'a>,
    pub value: Option<&'a [u8]>,
    pub seq: u64,
}

enum Lists {
    I64(SkipList<NumKey>),
    U64(SkipList<NumKey>),
    Bytes(SkipList<BytesKey>),
}

/// A versioned, ordered in-memory table of one writer and lock-free readers.
pub struct MemTable {
    lists: Lists,
}

/// Runs `$body` with `$l` bound to the skiplist, whatever its key format.
macro_rules! with_list {
    ($self:expr, $l:ident => $body:expr) => {
        match &$self.lists {
            Lists::I64($l) | Lists::U64($l) => $body,
            Lists::Bytes($l) => $body,
        }
    };
}

/// The error for a key of another type than the memtable's.
fn wrong_key(kind: KeyKind, key: &Key<'_>) -> Error {
    Error::InvalidArgument(format!("memtable keys are {}, not {}", kind.name(), key.kind().name()))
}

/// Byte keys are at most this long (lengths are stored as `u32`).
const MAX_KEY_BYTES: usize = u32::MAX as usize;

fn bytes_probe(b: &[u8]) -> Result<BytesProbe<'_>> {
    if b.len() > MAX_KEY_BYTES {
        return Err(Error::InvalidArgument(format!("a memtable key of {} bytes is too large", b.len())));
    }
    Ok(BytesProbe::new(b))
}

impl MemTable {
    pub fn new(kind: KeyKind) -> Self {
        let lists = match kind {
            KeyKind::Int64 => Lists::I64(SkipList::new()),
            KeyKind::UInt64 => Lists::U64(SkipList::new()),
            KeyKind::Bytes => Lists::Bytes(SkipList::new()),
        };
        MemTable { lists }
    }

    pub fn kind(&self) -> KeyKind {
        match self.lists {
            Lists::I64(_) => KeyKind::Int64,
            Lists::U64(_) => KeyKind::UInt64,
            Lists::Bytes(_) => KeyKind::Bytes,
        }
    }


    /// The writer, waiting while another thread holds it (a thread holding it already
    /// must not ask again: the lock is not reentrant). Readers are never blocked.
    pub fn writer(&self) -> Writer<'_> {
        Writer {
            inner: match &self.lists {
                Lists::I64(l) => WriterInner::I64(l.write()),
                Lists::U64(l) => WriterInner::U64(l.write()),
                Lists::Bytes(l) => WriterInner::Bytes(l.write()),
            },
        }
    }

    /// The writer if no other thread holds it.
    pub fn try_writer(&self) -> Option<Writer<'_>> {
        let inner = match &self.lists {
            Lists::I64(l) => WriterInner::I64(l.try_write()?),
            Lists::U64(l) => WriterInner::U64(l.try_write()?),
            Lists::Bytes(l) => WriterInner::Bytes(l.try_write()?),
        };
        Some(Writer { inner })
    }

    /// Puts one value (taking the writer for this call); returns its sequence.
    pub fn put(&self, key: Key<'_>, value: &[u8]) -> Result<u64> {
        self.writer().apply(key, Some(value))
    }

    /// Deletes a key (a tombstone, taking the writer for this call); returns its sequence.
    pub fn delete(&self, key: Key<'_>) -> Result<u64> {
        self.writer().apply(key, None)
    }

    /// The newest entry of `key`.
    #[inline]
    pub fn get(&self, key: Key<'_>) -> Result<Lookup<'_>> {
        self.get_at(key, u64::MAX)
    }

    /// The newest entry of `key` with a sequence <= `visible` (seek and stop).
    #[inline]
    pub fn get_at(&self, key: Key<'_>, visible: u64) -> Result<Lookup<'_>> {
        let raw = match (&self.lists, key) {
            (Lists::I64(l), Key::I64(v)) => l.get(encode_i64(v), visible),
            (Lists::U64(l), Key::U64(v)) => l.get(v, visible),
            (Lists::Bytes(l), Key::Bytes(b)) => l.get(bytes_probe(b)?, visible),
            _ => return Err(wrong_key(self.kind(), &key)),
        };
        Ok(Lookup::from_raw(raw))
    }

    /// `get_at` through the skiplist alone (the hash index bypassed), to check one against the other.
    #[cfg(test)]
    fn get_at_by_seek(&self, key: Key<'_>, visible: u64) -> Result<Lookup<'_>> {
        let raw = match (&self.lists, key) {
            (Lists::I64(l), Key::I64(v)) => l.get_by_seek(encode_i64(v), visible),
            (Lists::U64(l), Key::U64(v)) => l.get_by_seek(v, visible),
            (Lists::Bytes(l), Key::Bytes(b)) => l.get_by_seek(bytes_probe(b)?, visible),
            _ => return Err(wrong_key(self.kind(), &key)),
        };
        Ok(Lookup::from_raw(raw))
    }

    /// The newest entry of every key, keys ascending, as of now: entries added
    /// while iterating are not seen.
    pub fn newest(&self) -> Newest<'_> {
        self.newest_at(self.sequence())
    }

    /// The newest entry with a sequence <= `visible` of every key that has one, keys ascending.
    pub fn newest_at(&self, visible: u64) -> Newest<'_> {
        let inner = match &self.lists {
            Lists::I64(l) => NewestInner::I64(l.iter(visible)),
            Lists::U64(l) => NewestInner::U64(l.iter(visible)),
            Lists::Bytes(l) => NewestInner::Bytes(l.iter(visible)),
        };
        Newest { inner }
    }

    /// Entries (every put and delete, all versions).
    pub fn len(&self) -> u64 {
        with_list!(self, l => l.entries())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Distinct keys.
    pub fn distinct_keys(&self) -> u64 {
        with_list!(self, l => l.distinct_keys())
    }

    /// The sequence of the newest entry (0 when empty).
    pub fn sequence(&self) -> u64 {
        with_list!(self, l => l.sequence())
    }

    /// Bytes the memtable's arena holds (allocated in 1 MiB chunks).
    pub fn arena_bytes(&self) -> usize {
        with_list!(self, l => l.arena_bytes())
    }
}

enum WriterInner<'a> {
    I64(ListWriter<'a, NumKey>),
    U64(ListWriter<'a, NumKey>),
    Bytes(ListWriter<'a, BytesKey>),
}

/// The exclusive writer of a memtable (a lock, released on drop).
pub struct Writer<'a> {
    inner: WriterInner<'a>,
}

impl Writer<'_> {
    fn kind(&self) -> KeyKind {
        match self.inner {
            WriterInner::I64(_) => KeyKind::Int64,
            WriterInner::U64(_) => KeyKind::UInt64,
            WriterInner::Bytes(_) => KeyKind::Bytes,
        }
    }

    /// Puts one value; returns its sequence.
    pub fn put(&mut self, key: Key<'_>, value: &[u8]) -> Result<u64> {
        self.apply(key, Some(value))
    }

    /// Adds a tombstone; returns its sequence.
    pub fn delete(&mut self, key: Key<'_>) -> Result<u64> {
        self.apply(key, None)
    }

    /// Puts `Some(value)` or deletes (`None`); returns the entry's sequence.
    pub fn apply(&mut self, key: Key<'_>, value: Option<&[u8]>) -> Result<u64> {
        let kind = self.kind();
        match (&mut self.inner, key) {
            (WriterInner::I64(w), Key::I64(v)) => w.insert(encode_i64(v), value),
            (WriterInner::U64(w), Key::U64(v)) => w.insert(v, value),
            (WriterInner::Bytes(w), Key::Bytes(b)) => w.insert(bytes_probe(b)?, value),
            (_, key) => Err(wrong_key(kind, &key)),
        }
    }

    /// Applies `rows` (a value, or `None` to delete) as if one by one in order: row `i`
    /// gets the current sequence plus `i + 1`. Faster than [`Writer::apply`] per row for
    /// large batches (the rows are linked in key order). Checks every row first: an
    /// invalid one applies nothing. Returns the last sequence.
    pub fn apply_batch(&mut self, rows: &[Row<'_>]) -> Result<u64> {
        /// Every row with its key as `probe` makes it (an error for a key of another type).
        fn probes<'k, P>(rows: &[Row<'k>], probe: impl Fn(Key<'k>) -> Result<P>) -> Result<Vec<(P, Value<'k>)>> {
            rows.iter().map(|&(key, value)| Ok((probe(key)?, value))).collect()
        }
        let kind = self.kind();
        match &mut self.inner {
            WriterInner::I64(w) => w.insert_batch(&probes(rows, |k| match k {
                Key::I64(v) => Ok(encode_i64(v)),
                other => Err(wrong_key(kind, &other)),
            })?),
            WriterInner::U64(w) => w.insert_batch(&probes(rows, |k| match k {
                Key::U64(v) => Ok(v),
                other => Err(wrong_key(kind, &other)),
            })?),
            WriterInner::Bytes(w) => w.insert_batch(&probes(rows, |k| match k {
                Key::Bytes(b) => bytes_probe(b),
                other => Err(wrong_key(kind, &other)),
            })?),
        }
    }
}

/// The newest entry per key in key order; see [`MemTable::newest_at`].
pub struct Newest<'a> {
    inner: NewestInner<'a>,
}

enum NewestInner<'a> {
    I64(Iter<'a, NumKey>),
    U64(Iter<'a, NumKey>),
    Bytes(Iter<'a, BytesKey>),
}

impl<'a> Iterator for Newest<'a> {
    type Item = Entry<'a>;

    fn next(&mut self) -> Option<Entry<'a>> {
        let (key, value, seq) = match &mut self.inner {
            NewestInner::I64(it) => it.next().map(|(k, v, s)| (Key::I64(decode_i64(k)), v, s))?,
            NewestInner::U64(it) => it.next().map(|(k, v, s)| (Key::U64(k), v, s))?,
            NewestInner::Bytes(it) => it.next().map(|(k, v, s)| (Key::Bytes(k.bytes()), v, s))?,
        };
        Some(Entry { key, value, seq })
    }
}
