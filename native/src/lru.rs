//! One least-recently-used map bounded by bytes, for the native caches of immutable things
//! (parsed footers, decoded column chunks): an entry larger than the whole budget is never kept,
//! so the bound holds whatever is asked.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hash;

/// (entries, bytes, budget, hits, misses).
pub type LruStats = (usize, usize, usize, u64, u64);

pub struct ByteLru<K, V> {
    entries: HashMap<K, (V, usize, u64)>,
    order: BTreeMap<u64, K>,
    bytes: usize,
    budget: usize,
    tick: u64,
    hits: u64,
    misses: u64,
}

impl<K: Hash + Eq + Clone, V: Clone> ByteLru<K, V> {
    pub fn new(budget: usize) -> Self {
        ByteLru { entries: HashMap::new(), order: BTreeMap::new(), bytes: 0, budget, tick: 0, hits: 0, misses: 0 }
    }

    pub fn budget(&self) -> usize {
        self.budget
    }

    /// The value at `key` (now the most recently used), counting a hit or a miss.
    pub fn get(&mut self, key: &K) -> Option<V> {
        self.tick += 1;
        let tick = self.tick;
        match self.entries.get_mut(key) {
            Some((value, _, used)) => {
                self.order.remove(used);
                *used = tick;
                self.order.insert(tick, key.clone());
                self.hits += 1;
                Some(value.clone())
            }
            None => {
                self.misses += 1;
                None
            }
        }
    }

    /// Keeps `value` (`size` bytes), evicting the least recently used entries to stay in budget.
    pub fn put(&mut self, key: K, value: V, size: usize) {
        if size > self.budget || self.entries.contains_key(&key) {
            return;
        }
        while self.bytes + size > self.budget {
            let Some((_, old)) = self.order.pop_first() else { break };
            if let Some((_, n, _)) = self.entries.remove(&old) {
                self.bytes -= n;
            }
        }
        self.tick += 1;
        self.order.insert(self.tick, key.clone());
        self.entries.insert(key, (value, size, self.tick));
        self.bytes += size;
    }

    pub fn stats(&self) -> LruStats {
        (self.entries.len(), self.bytes, self.budget, self.hits, self.misses)
    }
}

#[cfg(test)]
mod tests {
    use super::ByteLru;

    #[test]
    fn stays_within_its_budget_and_evicts_the_least_recently_used() {
        let mut c = ByteLru::new(10);
        c.put("a", 1, 4);
        c.put("b", 2, 4);
        assert_eq!(c.get(&"a"), Some(1)); // b is now the oldest
        c.put("c", 3, 4);
        assert_eq!(c.get(&"b"), None);
        assert_eq!(c.get(&"a"), Some(1));
        assert_eq!(c.get(&"c"), Some(3));
        c.put("huge", 9, 11); // larger than the budget: never kept
        assert_eq!(c.get(&"huge"), None);
        let (entries, bytes, budget, hits, misses) = c.stats();
        assert_eq!((entries, bytes, budget, hits, misses), (2, 8, 10, 3, 2));
    }
}
