//! The hash table of one slot of one database.
//!
//! Open addressing with linear probing over an array of entries plus a parallel array of
//! control bytes. A control byte is 0 for an empty bucket, else `0x80 | volatile << 6 | tag`
//! where `tag` is 6 bits of the key's hash: a lookup compares control bytes (dense, one
//! cache line for 64 buckets) and only dereferences an entry whose tag matches, and the active
//! expire cycle finds keys with a TTL without touching the others.
//!
//! Deletion shifts later entries back (no tombstones), which keeps the invariant that every
//! entry sits in the run of occupied buckets starting at its home bucket. SCAN walks *home*
//! buckets in reverse-binary order, like Valkey's dict, so a key present for a whole scan is
//! returned even when the table grows or shrinks in between.

use crate::entry::Entry;

const EMPTY: u8 = 0;
const FULL: u8 = 0x80;
const VOLATILE: u8 = 0x40;
const TAG_MASK: u8 = 0x3F;
const MIN_CAPACITY: usize = 4;

/// A slot's keys.
#[derive(Default)]
pub struct Table {
    ctrl: Box<[u8]>,
    ents: Box<[Option<Entry>]>,
    len: u32,
    volatile: u32,
    /// Where the active expire cycle resumes in this table.
    expire_cursor: u32,
}

impl Table {
    /// An empty table; allocates nothing until the first insert.
    pub fn new() -> Table {
        Table::default()
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the table holds no key.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Number of keys with an expire time.
    pub fn volatile_len(&self) -> usize {
        self.volatile as usize
    }

    /// Number of buckets.
    pub fn capacity(&self) -> usize {
        self.ctrl.len()
    }

    /// Bytes used by the bucket arrays (not the entries).
    pub fn overhead_bytes(&self) -> usize {
        self.ctrl.len() * (1 + std::mem::size_of::<Option<Entry>>())
    }

    /// Finds `key`, whose table hash is `hash`; returns its bucket index.
    pub fn find(&self, key: &[u8], hash: u32) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let want = FULL | tag(hash);
        let mut i = hash as usize & mask;
        loop {
            let c = self.ctrl[i];
            if c == EMPTY {
                return None;
            }
            if c & !VOLATILE == want
                && let Some(e) = &self.ents[i]
                && e.key() == key
            {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// The entry in bucket `i` (an index from [`Table::find`] or iteration).
    pub fn at(&self, i: usize) -> &Entry {
        self.ents[i].as_ref().expect("bucket index from find() is occupied")
    }

    /// The entry in bucket `i`, mutably. Call [`Table::refresh`] after changing its expire.
    pub fn at_mut(&mut self, i: usize) -> &mut Entry {
        self.ents[i].as_mut().expect("bucket index from find() is occupied")
    }

    /// Re-reads bucket `i`'s expire flag after the entry gained or lost a TTL.
    pub fn refresh(&mut self, i: usize) {
        let volatile = self.at(i).expire().is_some();
        let was = self.ctrl[i] & VOLATILE != 0;
        if volatile != was {
            self.ctrl[i] ^= VOLATILE;
            if volatile {
                self.volatile += 1;
            } else {
                self.volatile -= 1;
            }
        }
    }

    /// Inserts an entry whose key is not in the table; returns its bucket index.
    pub fn insert_new(&mut self, entry: Entry) -> usize {
        if (self.len as usize + 1) * 5 > self.capacity() * 4 {
            self.resize((self.capacity() * 2).max(MIN_CAPACITY));
        }
        self.place(entry)
    }

    /// Removes and returns the entry in bucket `i`.
    pub fn remove_at(&mut self, i: usize) -> Entry {
        let entry = self.ents[i].take().expect("bucket index from find() is occupied");
        if self.ctrl[i] & VOLATILE != 0 {
            self.volatile -= 1;
        }
        self.ctrl[i] = EMPTY;
        self.len -= 1;
        self.backshift(i);
        if self.capacity() > MIN_CAPACITY && (self.len as usize) * 8 < self.capacity() {
            self.resize(self.capacity() / 2);
        }
        entry
    }

    /// Removes every entry, returning the old contents so the caller can drop them elsewhere
    /// (FLUSHALL ASYNC frees memory off the command path).
    pub fn take_all(&mut self) -> Table {
        std::mem::take(self)
    }

    /// Iterates over all entries with their bucket indexes.
    pub fn iter(&self) -> impl Iterator<Item = (usize, &Entry)> {
        self.ents.iter().enumerate().filter_map(|(i, e)| e.as_ref().map(|e| (i, e)))
    }

    /// Visits the keys whose home bucket is the one `cursor` designates, and returns the next
    /// cursor (0 when the table is done). Same contract as Valkey's `dictScan`.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&Entry)) -> u64 {
        if self.len == 0 {
            return 0;
        }
        let mask = self.mask();
        let home = cursor as usize & mask;
        let mut i = home;
        while self.ctrl[i] != EMPTY {
            if let Some(e) = &self.ents[i]
                && e.hash() as usize & mask == home
            {
                f(e);
            }
            i = (i + 1) & mask;
            if i == home {
                break;
            }
        }
        next_cursor(cursor, mask as u64)
    }

    /// Bucket index of an occupied bucket at or after `start` (wrapping), for random sampling.
    pub fn occupied_from(&self, start: usize) -> Option<usize> {
        if self.len == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = start & mask;
        loop {
            if self.ctrl[i] != EMPTY {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Bucket index of a key with a TTL at or after `start` (wrapping), for volatile-* eviction.
    pub fn volatile_from(&self, start: usize) -> Option<usize> {
        if self.volatile == 0 {
            return None;
        }
        let mask = self.mask();
        let mut i = start & mask;
        loop {
            if self.ctrl[i] & VOLATILE != 0 {
                return Some(i);
            }
            i = (i + 1) & mask;
        }
    }

    /// Walks up to `budget` buckets from this table's expire cursor, calling `f` with the
    /// index of each bucket that holds a key with a TTL. `f` returns true when it removed that
    /// entry, so the walk re-examines the bucket (a later entry may have shifted into it).
    /// Returns whether the walk wrapped around the whole table.
    pub fn walk_volatile(&mut self, budget: usize, mut f: impl FnMut(&mut Table, usize) -> bool) -> bool {
        if self.volatile == 0 || self.capacity() == 0 {
            self.expire_cursor = 0;
            return true;
        }
        let mut i = self.expire_cursor as usize & self.mask();
        let mut steps = 0;
        while steps < budget {
            if self.capacity() == 0 {
                self.expire_cursor = 0;
                return true;
            }
            i &= self.mask();
            if self.ctrl[i] & VOLATILE != 0 && f(self, i) {
                steps += 1;
                continue;
            }
            i += 1;
            steps += 1;
            if i >= self.capacity() {
                self.expire_cursor = 0;
                return true;
            }
        }
        self.expire_cursor = i as u32;
        false
    }

    fn mask(&self) -> usize {
        self.capacity() - 1
    }

    fn place(&mut self, entry: Entry) -> usize {
        let mask = self.mask();
        let mut i = entry.hash() as usize & mask;
        while self.ctrl[i] != EMPTY {
            i = (i + 1) & mask;
        }
        let volatile = entry.expire().is_some();
        self.ctrl[i] = FULL | tag(entry.hash()) | if volatile { VOLATILE } else { 0 };
        self.ents[i] = Some(entry);
        self.len += 1;
        if volatile {
            self.volatile += 1;
        }
        i
    }

    /// Closes the gap at `hole` by moving back entries that may live there.
    fn backshift(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut j = hole;
        loop {
            j = (j + 1) & mask;
            if self.ctrl[j] == EMPTY {
                return;
            }
            let home = self.ents[j].as_ref().map_or(0, |e| e.hash() as usize & mask);
            // The entry at j may move to the hole unless its home lies cyclically in (hole, j].
            let home_in_between = if hole <= j { hole < home && home <= j } else { hole < home || home <= j };
            if !home_in_between {
                self.ctrl[hole] = self.ctrl[j];
                self.ents[hole] = self.ents[j].take();
                self.ctrl[j] = EMPTY;
                hole = j;
            }
        }
    }

    fn resize(&mut self, capacity: usize) {
        let old_ents = std::mem::replace(&mut self.ents, (0..capacity).map(|_| None).collect());
        self.ctrl = vec![EMPTY; capacity].into_boxed_slice();
        self.len = 0;
        self.volatile = 0;
        self.expire_cursor = 0;
        for e in old_ents.into_vec().into_iter().flatten() {
            self.place(e);
        }
    }
}

fn tag(hash: u32) -> u8 {
    (hash >> 26) as u8 & TAG_MASK
}

/// Valkey's reverse-binary cursor increment: scanning the high bits first means buckets that
/// split or merge on resize are visited consistently.
fn next_cursor(cursor: u64, mask: u64) -> u64 {
    let mut v = cursor | !mask;
    v = v.reverse_bits();
    v = v.wrapping_add(1);
    v.reverse_bits()
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use super::*;
    use crate::entry::NewValue;

    fn hash_of(key: &[u8]) -> u32 {
        crate::hash::key_hash(key)
    }

    fn entry(key: &[u8], ttl: Option<i64>) -> Entry {
        Entry::new(key, hash_of(key), NewValue::Bytes(b"v"), ttl, 0)
    }

    fn scan_all(t: &Table) -> Vec<Vec<u8>> {
        let mut out = Vec::new();
        let mut c = 0;
        loop {
            c = t.scan(c, |e| out.push(e.key().to_vec()));
            if c == 0 {
                return out;
            }
        }
    }

    #[test]
    fn insert_find_remove() {
        let mut t = Table::new();
        for i in 0..1000u32 {
            let k = i.to_string();
            assert!(t.find(k.as_bytes(), hash_of(k.as_bytes())).is_none());
            t.insert_new(entry(k.as_bytes(), (i % 3 == 0).then_some(5)));
        }
        assert_eq!(t.len(), 1000);
        assert_eq!(t.volatile_len(), 334);
        for i in (0..1000u32).step_by(2) {
            let k = i.to_string();
            let idx = t.find(k.as_bytes(), hash_of(k.as_bytes())).unwrap();
            assert_eq!(t.remove_at(idx).key(), k.as_bytes());
        }
        assert_eq!(t.len(), 500);
        for i in 0..1000u32 {
            let k = i.to_string();
            assert_eq!(t.find(k.as_bytes(), hash_of(k.as_bytes())).is_some(), i % 2 == 1, "{i}");
        }
        let mut keys = scan_all(&t);
        keys.sort();
        assert_eq!(keys.len(), 500);
    }

    #[test]
    fn scan_survives_growth_and_shrink() {
        let mut t = Table::new();
        for i in 0..200u32 {
            t.insert_new(entry(format!("k{i}").as_bytes(), None));
        }
        let mut seen = BTreeSet::new();
        let mut c = 0;
        let mut step = 0;
        loop {
            c = t.scan(c, |e| {
                seen.insert(e.key().to_vec());
            });
            step += 1;
            // Grow a lot in the middle of the scan, then shrink.
            if step == 10 {
                for i in 200..2000u32 {
                    t.insert_new(entry(format!("k{i}").as_bytes(), None));
                }
            }
            if step == 40 {
                for i in 200..2000u32 {
                    let k = format!("k{i}");
                    let idx = t.find(k.as_bytes(), hash_of(k.as_bytes())).unwrap();
                    t.remove_at(idx);
                }
            }
            if c == 0 {
                break;
            }
        }
        for i in 0..200u32 {
            assert!(seen.contains(format!("k{i}").as_bytes()), "k{i} missed");
        }
    }

    proptest::proptest! {
        #[test]
        fn behaves_like_a_map(ops in proptest::collection::vec((0u8..3, 0u16..64), 0..400)) {
            let mut t = Table::new();
            let mut model: HashMap<Vec<u8>, bool> = HashMap::new();
            for (op, k) in ops {
                let key = format!("key:{k}").into_bytes();
                let h = hash_of(&key);
                match op {
                    0 | 1 => {
                        let ttl = op == 1;
                        if let Some(i) = t.find(&key, h) {
                            t.at_mut(i).set_expire(ttl.then_some(1));
                            t.refresh(i);
                        } else {
                            t.insert_new(entry(&key, ttl.then_some(1)));
                        }
                        model.insert(key, ttl);
                    }
                    _ => {
                        if let Some(i) = t.find(&key, h) {
                            t.remove_at(i);
                        }
                        model.remove(&key);
                    }
                }
            }
            proptest::prop_assert_eq!(t.len(), model.len());
            proptest::prop_assert_eq!(t.volatile_len(), model.values().filter(|v| **v).count());
            for (k, ttl) in &model {
                let i = t.find(k, hash_of(k));
                proptest::prop_assert!(i.is_some());
                proptest::prop_assert_eq!(t.at(i.unwrap()).expire().is_some(), *ttl);
            }
            let mut scanned = scan_all(&t);
            scanned.sort();
            let mut want: Vec<_> = model.keys().cloned().collect();
            want.sort();
            proptest::prop_assert_eq!(scanned, want);
        }
    }
}
