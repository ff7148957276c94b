//! The table encoding of large hashes and sets (Valkey's `hashtable`).
//!
//! Entries live in a dense vector, so a uniformly random member is one index away (SPOP,
//! SRANDMEMBER and HRANDFIELD are O(1) per element, where a bucket-sampling table needs
//! retries). Lookups go through a separate index: open addressing with linear probing over
//! 8-byte buckets holding an entry position and the entry's hash, so probes compare hashes
//! without touching entries and growing the index never rehashes a key.
//!
//! Removal swaps the last entry into the hole (O(1)) and deletes index buckets by shifting
//! later ones back (no tombstones), which keeps every entry in the run of occupied buckets
//! that starts at its home bucket. Scanning therefore walks *home* buckets in reverse-binary
//! cursor order, exactly like Valkey's `dictScan`: an entry present for a whole HSCAN/SSCAN is
//! returned at least once even when the index grows or shrinks in between.

use crate::hash::key_hash;
use crate::object::size_class;

/// What a table entry must provide: the bytes it is looked up by, and its heap size.
pub trait Keyed {
    /// The lookup key (a set member, a hash field).
    fn key(&self) -> &[u8];
    /// Heap bytes the entry owns, rounded to allocator size classes.
    fn heap_bytes(&self) -> usize;
}

impl Keyed for Box<[u8]> {
    fn key(&self) -> &[u8] {
        self
    }

    fn heap_bytes(&self) -> usize {
        if self.is_empty() { 0 } else { size_class(self.len()) }
    }
}

/// One index bucket: the position of an entry in the dense vector, and its hash.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Bucket {
    pos: u32,
    hash: u32,
}

const EMPTY: Bucket = Bucket { pos: u32::MAX, hash: 0 };
/// The smallest index: entries only reach a table past a compact encoding's limits.
const MIN_BUCKETS: usize = 8;

/// A hash table of entries with O(1) lookup, insertion, removal and random access.
#[derive(Debug, Clone)]
pub struct Dict<E> {
    items: Vec<E>,
    index: Box<[Bucket]>,
    /// Sum of the entries' own heap bytes, kept so MEMORY USAGE is exact in O(1).
    item_bytes: usize,
}

impl<E: Keyed> Dict<E> {
    /// An empty table sized for `n` entries.
    pub fn with_capacity(n: usize) -> Dict<E> {
        let mut d = Dict { items: Vec::with_capacity(n), index: Box::default(), item_bytes: 0 };
        d.resize(buckets_for(n));
        d
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// The entry at dense position `pos` (any position below `len()`).
    pub fn at(&self, pos: usize) -> &E {
        &self.items[pos]
    }

    /// The entries, in dense order.
    pub fn iter(&self) -> std::slice::Iter<'_, E> {
        self.items.iter()
    }

    /// The position of the entry whose key is `key`.
    pub fn find(&self, key: &[u8]) -> Option<usize> {
        self.find_hashed(key, key_hash(key)).map(|(_, pos)| pos)
    }

    /// Inserts an entry whose key is not in the table.
    pub fn insert_new(&mut self, e: E) {
        debug_assert!(self.find(e.key()).is_none(), "insert_new of an existing key");
        if (self.items.len() + 1) * 5 > self.index.len() * 4 {
            self.resize((self.index.len() * 2).max(MIN_BUCKETS));
        }
        let hash = key_hash(e.key());
        self.item_bytes += e.heap_bytes();
        let pos = self.items.len() as u32;
        self.items.push(e);
        self.place(Bucket { pos, hash });
    }

    /// Replaces the entry at `pos` with one of the same key.
    pub fn replace(&mut self, pos: usize, e: E) {
        debug_assert_eq!(self.items[pos].key(), e.key());
        self.item_bytes = self.item_bytes - self.items[pos].heap_bytes() + e.heap_bytes();
        self.items[pos] = e;
    }

    /// Removes the entry whose key is `key`.
    pub fn remove(&mut self, key: &[u8]) -> Option<E> {
        let (b, pos) = self.find_hashed(key, key_hash(key))?;
        Some(self.remove_found(b, pos))
    }

    /// Removes the entry at dense position `pos`.
    pub fn remove_at(&mut self, pos: usize) -> E {
        let key = self.items[pos].key();
        let b = self.bucket_of(key_hash(key), pos);
        self.remove_found(b, pos)
    }

    /// Heap bytes of the table and its entries, in allocator size classes.
    pub fn heap_bytes(&self) -> usize {
        let items = self.items.capacity() * std::mem::size_of::<E>();
        let index = self.index.len() * std::mem::size_of::<Bucket>();
        let class = |n| if n == 0 { 0 } else { size_class(n) };
        size_class(std::mem::size_of::<Self>()) + class(items) + class(index) + self.item_bytes
    }

    /// Visits the entries whose home bucket is the one `cursor` designates and returns the
    /// next cursor (0 when done), with `dictScan`'s guarantees (see the module comment).
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&E)) -> u64 {
        if self.items.is_empty() {
            return 0;
        }
        let mask = self.index.len() - 1;
        let home = cursor as usize & mask;
        let mut b = home;
        for _ in 0..self.index.len() {
            let bucket = self.index[b];
            if bucket == EMPTY {
                break;
            }
            if bucket.hash as usize & mask == home {
                f(&self.items[bucket.pos as usize]);
            }
            b = (b + 1) & mask;
        }
        next_cursor(cursor, mask as u64)
    }

    /// Finds `key`: its bucket and its position.
    fn find_hashed(&self, key: &[u8], hash: u32) -> Option<(usize, usize)> {
        if self.items.is_empty() {
            return None;
        }
        let mask = self.index.len() - 1;
        let mut b = hash as usize & mask;
        loop {
            let bucket = self.index[b];
            if bucket == EMPTY {
                return None;
            }
            if bucket.hash == hash && self.items[bucket.pos as usize].key() == key {
                return Some((b, bucket.pos as usize));
            }
            b = (b + 1) & mask;
        }
    }

    /// The bucket pointing at `pos`, whose entry hashes to `hash`.
    fn bucket_of(&self, hash: u32, pos: usize) -> usize {
        let mask = self.index.len() - 1;
        let mut b = hash as usize & mask;
        // Invariant: every entry has exactly one bucket, in the run starting at its home.
        while self.index[b].pos as usize != pos {
            b = (b + 1) & mask;
        }
        b
    }

    fn remove_found(&mut self, b: usize, pos: usize) -> E {
        self.unplace(b);
        let last = self.items.len() - 1;
        if pos != last {
            // The last entry moves into the hole: repoint its bucket.
            let moved = key_hash(self.items[last].key());
            let mb = self.bucket_of(moved, last);
            self.index[mb].pos = pos as u32;
        }
        let e = self.items.swap_remove(pos);
        self.item_bytes -= e.heap_bytes();
        if self.index.len() > MIN_BUCKETS && self.items.len() * 8 < self.index.len() {
            self.resize(self.index.len() / 2);
        }
        if self.items.capacity() > 16 && self.items.len() * 4 < self.items.capacity() {
            self.items.shrink_to(self.items.len() * 2);
        }
        e
    }

    /// Puts a bucket in the first free slot of its home's run.
    fn place(&mut self, bucket: Bucket) {
        let mask = self.index.len() - 1;
        let mut b = bucket.hash as usize & mask;
        while self.index[b] != EMPTY {
            b = (b + 1) & mask;
        }
        self.index[b] = bucket;
    }

    /// Empties bucket `hole` and shifts later buckets of the run back so no run is broken.
    fn unplace(&mut self, mut hole: usize) {
        let mask = self.index.len() - 1;
        self.index[hole] = EMPTY;
        let mut b = (hole + 1) & mask;
        while self.index[b] != EMPTY {
            let home = self.index[b].hash as usize & mask;
            // Move b into the hole unless its home lies cyclically in (hole, b].
            let dist_home = b.wrapping_sub(home) & mask;
            let dist_hole = b.wrapping_sub(hole) & mask;
            if dist_home >= dist_hole {
                self.index[hole] = self.index[b];
                self.index[b] = EMPTY;
                hole = b;
            }
            b = (b + 1) & mask;
        }
    }

    fn resize(&mut self, buckets: usize) {
        let old = std::mem::replace(&mut self.index, vec![EMPTY; buckets].into_boxed_slice());
        for bucket in old.iter().filter(|b| **b != EMPTY) {
            self.place(*bucket);
        }
    }
}

/// Buckets for `n` entries under the 80% load bound.
fn buckets_for(n: usize) -> usize {
    (n.saturating_mul(5) / 4 + 1).next_power_of_two().max(MIN_BUCKETS)
}

/// The reverse-binary increment of `dictScan`: the next home bucket to visit, such that a
/// scan started at a smaller or larger table size never skips a bucket.
fn next_cursor(cursor: u64, mask: u64) -> u64 {
    let mut v = cursor | !mask;
    v = v.reverse_bits();
    v = v.wrapping_add(1);
    v.reverse_bits()
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    fn member(s: &str) -> Box<[u8]> {
        s.as_bytes().into()
    }

    fn check(d: &Dict<Box<[u8]>>) {
        let mut seen = HashSet::new();
        for (pos, e) in d.items.iter().enumerate() {
            assert_eq!(d.find(e), Some(pos));
            assert!(seen.insert(e.clone()));
        }
        assert_eq!(d.index.iter().filter(|b| **b != EMPTY).count(), d.len());
        assert_eq!(d.item_bytes, d.items.iter().map(Keyed::heap_bytes).sum::<usize>());
    }

    #[test]
    fn insert_find_remove_at_scale() {
        let mut d = Dict::with_capacity(0);
        for i in 0..5000 {
            d.insert_new(member(&format!("m{i}")));
        }
        check(&d);
        for i in (0..5000).step_by(3) {
            assert!(d.remove(format!("m{i}").as_bytes()).is_some());
        }
        assert!(d.remove(b"m0").is_none());
        check(&d);
        while d.len() > 10 {
            d.remove_at(d.len() / 2);
        }
        check(&d);
        assert_eq!(d.index.len(), 64, "the index shrinks with the table");
        assert!(d.find(b"nope").is_none());
    }

    #[test]
    fn scan_returns_every_stable_entry_across_resizes() {
        let mut d = Dict::with_capacity(0);
        for i in 0..200 {
            d.insert_new(member(&format!("s{i}")));
        }
        let mut seen = HashSet::new();
        let mut cursor = 0;
        let mut step = 0;
        loop {
            cursor = d.scan(cursor, |e| {
                seen.insert(e.clone());
            });
            step += 1;
            // Grow and shrink the table under the scan with entries that come and go.
            if step == 20 {
                for i in 0..2000 {
                    d.insert_new(member(&format!("t{i}")));
                }
            }
            if step == 400 {
                for i in 0..2000 {
                    d.remove(format!("t{i}").as_bytes());
                }
            }
            if cursor == 0 {
                break;
            }
        }
        for i in 0..200 {
            assert!(seen.contains(&member(&format!("s{i}"))), "s{i} missed");
        }
    }

    #[test]
    fn replace_and_accounting() {
        let mut d = Dict::with_capacity(4);
        d.insert_new(member("k"));
        let before = d.heap_bytes();
        d.replace(0, member("k"));
        assert_eq!(d.heap_bytes(), before);
        assert_eq!(d.remove_at(0), member("k"));
        assert!(d.is_empty());
        assert_eq!(d.scan(0, |_| panic!("empty")), 0);
    }
}
