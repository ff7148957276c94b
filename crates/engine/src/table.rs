//! The hash table of one slot of one database.
//!
//! Open addressing with linear probing over groups of seven buckets, each group one 64-byte
//! cache line holding seven control bytes and seven entry pointers. A control byte is 0 for an
//! empty bucket, else `0x80 | volatile << 6 | tag` where `tag` is 6 bits of the key's hash: a
//! lookup reads its home group's line, compares tags and dereferences only an entry whose tag
//! matches (two cache lines per lookup: group and entry), and the active expire cycle finds
//! keys with a TTL without touching the others. Homes are groups, so the load a home can absorb
//! before spilling into the next group is seven keys.
//!
//! A table with one key holds it in `one`, with no groups: at a few keys per slot (small
//! datasets spread over 16384 slots), a 64-byte group for a single key would cost as much as
//! the key. The second key moves both into groups; the last key but one leaving moves the
//! survivor back. Its bucket index is 0.
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
/// Buckets per group: 7 tags and 7 entry pointers fill one 64-byte cache line.
const WIDTH: usize = 7;

/// Seven buckets in one cache line: a lookup reads one line for all of a home's candidates.
#[repr(C, align(64))]
#[derive(Default)]
struct Group {
    ctrl: [u8; WIDTH],
    _pad: u8,
    ents: [Option<Entry>; WIDTH],
}

/// A bucket position: group in the high bits, position within the group in the low 3 bits.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Pos {
    g: usize,
    s: usize,
}

impl Pos {
    fn index(self) -> usize {
        (self.g << 3) | self.s
    }

    fn from_index(i: usize) -> Pos {
        Pos { g: i >> 3, s: i & 7 }
    }
}

/// A slot's keys.
#[derive(Default)]
pub struct Table {
    groups: Box<[Group]>,
    /// The only key, while there is exactly one and no groups.
    one: Option<Entry>,
    len: u32,
    volatile: u32,
    /// Where the active expire cycle resumes in this table (a bucket index).
    expire_cursor: u32,
}

/// How far one [`Table::walk_volatile`] went.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Walked {
    /// Keys with a TTL handed to the callback.
    pub keys: usize,
    /// Buckets passed (a bucket re-examined after a removal counts once).
    pub buckets: usize,
    /// Whether the walk reached the end of the table; the next one starts from the beginning.
    pub done: bool,
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
        self.groups.len() * WIDTH
    }

    /// Bytes used by the bucket array (not the entries).
    pub fn overhead_bytes(&self) -> usize {
        self.groups.len() * std::mem::size_of::<Group>()
    }

    /// Address and number of the groups, for prefetch hints (0, 0 when empty).
    pub fn groups_addr(&self) -> (usize, usize) {
        if self.groups.is_empty() {
            return (0, 0);
        }
        (self.groups.as_ptr() as usize, self.groups.len())
    }

    /// Finds `key`, whose table hash is `hash`; returns its bucket index.
    pub fn find(&self, key: &[u8], hash: u32) -> Option<usize> {
        if self.groups.is_empty() {
            return self.one.as_ref().is_some_and(|e| e.hash() == hash && e.key() == key).then_some(0);
        }
        let want = FULL | tag(hash);
        let mut g = self.home(hash);
        loop {
            let group = &self.groups[g];
            for s in 0..WIDTH {
                let c = group.ctrl[s];
                if c == EMPTY {
                    return None;
                }
                if c & !VOLATILE == want
                    && let Some(e) = &group.ents[s]
                    && e.key() == key
                {
                    return Some(Pos { g, s }.index());
                }
            }
            g = (g + 1) & self.gmask();
        }
    }

    /// Hints the CPU to load the entries in `hash`'s home group whose tag matches: the header
    /// and key line, and the next, where a value of up to 100-odd bytes ends. Reads only the
    /// group (which the caller has usually prefetched already), never an entry.
    pub fn prefetch_entry(&self, hash: u32) {
        if self.groups.is_empty() {
            if let Some(e) = &self.one {
                crate::prefetch::read(e.addr());
                crate::prefetch::read(e.addr() + 64);
            }
            return;
        }
        let want = FULL | tag(hash);
        let group = &self.groups[self.home(hash)];
        for s in 0..WIDTH {
            if group.ctrl[s] & !VOLATILE == want
                && let Some(e) = &group.ents[s]
            {
                crate::prefetch::read(e.addr());
                crate::prefetch::read(e.addr() + 64);
            }
        }
    }

    /// The entry in bucket `i` (an index from [`Table::find`] or iteration).
    pub fn at(&self, i: usize) -> &Entry {
        if self.groups.is_empty() {
            debug_assert_eq!(i, 0);
            return self.one.as_ref().expect("bucket index from find() is occupied");
        }
        let p = Pos::from_index(i);
        self.groups[p.g].ents[p.s].as_ref().expect("bucket index from find() is occupied")
    }

    /// The entry in bucket `i`, mutably. Call [`Table::refresh`] after changing its expire.
    pub fn at_mut(&mut self, i: usize) -> &mut Entry {
        if self.groups.is_empty() {
            debug_assert_eq!(i, 0);
            return self.one.as_mut().expect("bucket index from find() is occupied");
        }
        let p = Pos::from_index(i);
        self.groups[p.g].ents[p.s].as_mut().expect("bucket index from find() is occupied")
    }

    /// Re-reads bucket `i`'s expire flag after the entry gained or lost a TTL.
    pub fn refresh(&mut self, i: usize) {
        let volatile = self.at(i).expire().is_some();
        if self.groups.is_empty() {
            self.volatile = u32::from(volatile);
            return;
        }
        let p = Pos::from_index(i);
        let c = &mut self.groups[p.g].ctrl[p.s];
        let was = *c & VOLATILE != 0;
        if volatile != was {
            *c ^= VOLATILE;
            if volatile {
                self.volatile += 1;
            } else {
                self.volatile -= 1;
            }
        }
    }

    /// Inserts an entry whose key is not in the table; returns its bucket index.
    pub fn insert_new(&mut self, entry: Entry) -> usize {
        if self.groups.is_empty() {
            match self.one.take() {
                None => {
                    self.volatile = u32::from(entry.expire().is_some());
                    self.one = Some(entry);
                    self.len = 1;
                    return 0;
                }
                Some(first) => {
                    // The second key: both move into a group.
                    self.groups = (0..1).map(|_| Group::default()).collect();
                    self.len = 0;
                    self.volatile = 0;
                    self.place(first);
                }
            }
        }
        if (self.len as usize + 1) * 5 > self.capacity() * 4 {
            self.resize(self.groups.len() * 2);
        }
        self.place(entry)
    }

    /// Removes and returns the entry in bucket `i`.
    pub fn remove_at(&mut self, i: usize) -> Entry {
        if self.groups.is_empty() {
            debug_assert_eq!(i, 0);
            let entry = self.one.take().expect("bucket index from find() is occupied");
            self.len = 0;
            self.volatile = 0;
            return entry;
        }
        let p = Pos::from_index(i);
        let group = &mut self.groups[p.g];
        let entry = group.ents[p.s].take().expect("bucket index from find() is occupied");
        if group.ctrl[p.s] & VOLATILE != 0 {
            self.volatile -= 1;
        }
        group.ctrl[p.s] = EMPTY;
        self.len -= 1;
        self.backshift(p);
        if self.len == 1 {
            // The survivor goes back to `one` and the groups are freed: keys spread over many
            // slots would otherwise leave a group behind in every slot they ever touched,
            // memory that evicting keys could never win back.
            let groups = std::mem::take(&mut self.groups);
            self.one = groups.into_vec().into_iter().flat_map(|g| g.ents).flatten().next();
            self.expire_cursor = 0;
        } else if self.groups.len() > 1 && (self.len as usize) * 8 < self.capacity() {
            self.resize(self.groups.len() / 2);
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
        self.one.iter().map(|e| (0, e)).chain(self.groups.iter().enumerate().flat_map(|(g, group)| {
            group.ents.iter().enumerate().filter_map(move |(s, e)| e.as_ref().map(|e| (Pos { g, s }.index(), e)))
        }))
    }

    /// Visits the keys whose home group is the one `cursor` designates, and returns the next
    /// cursor (0 when the table is done). Same contract as Valkey's `dictScan`.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(&Entry)) -> u64 {
        if self.groups.is_empty() {
            // One home at most: visiting it ends the table (a key seen twice across a shrink
            // is allowed, as in Valkey).
            if let Some(e) = &self.one {
                f(e);
            }
            return 0;
        }
        let gmask = self.gmask();
        let home = cursor as usize & gmask;
        let mut p = Pos { g: home, s: 0 };
        let mut steps = 0;
        while self.ctrl_at(p) != EMPTY && steps < self.capacity() {
            if let Some(e) = &self.groups[p.g].ents[p.s]
                && self.home(e.hash()) == home
            {
                f(e);
            }
            p = self.next(p);
            steps += 1;
        }
        next_cursor(cursor, gmask as u64)
    }

    /// Bucket index of an occupied bucket at or after `start` (wrapping), for random sampling.
    pub fn occupied_from(&self, start: usize) -> Option<usize> {
        self.first_from(start, |c| c != EMPTY)
    }

    /// Bucket index of a key with a TTL at or after `start` (wrapping), for volatile-* eviction.
    pub fn volatile_from(&self, start: usize) -> Option<usize> {
        if self.volatile == 0 {
            return None;
        }
        self.first_from(start, |c| c & VOLATILE != 0)
    }

    /// Walks the keys with a TTL from this table's expire cursor, calling `f` with the index of
    /// each; `f` returns true when it removed that entry, so the walk re-examines the bucket (a
    /// later entry may have shifted into it). Stops after `max_keys` calls of `f` or `max_buckets`
    /// buckets passed, or at the end of the table, where the cursor goes back to the start; the
    /// next walk resumes where this one stopped.
    pub fn walk_volatile(
        &mut self,
        max_buckets: usize,
        max_keys: usize,
        mut f: impl FnMut(&mut Table, usize) -> bool,
    ) -> Walked {
        let mut w = Walked::default();
        let at = self.expire_cursor as usize;
        let (mut g, mut s) = (at >> 3, at & 7);
        while w.keys < max_keys && w.buckets < max_buckets {
            if self.volatile == 0 {
                w.done = true;
                break;
            }
            if self.groups.is_empty() {
                // One key, kept outside the groups (also when removals just left one).
                w.keys += 1;
                f(self, 0);
                w.done = true;
                break;
            }
            if g >= self.groups.len() {
                w.done = true;
                break;
            }
            if self.groups[g].ctrl[s] & VOLATILE != 0 {
                w.keys += 1;
                let groups = self.groups.len();
                if f(self, Pos { g, s }.index()) {
                    if self.groups.len() != groups {
                        // The table shrank and every key moved: start it again.
                        (g, s) = (0, 0);
                    }
                    continue;
                }
            }
            w.buckets += 1;
            s += 1;
            if s == WIDTH {
                s = 0;
                g += 1;
            }
        }
        self.expire_cursor = if w.done || self.groups.is_empty() { 0 } else { Pos { g, s }.index() as u32 };
        w
    }

    fn gmask(&self) -> usize {
        self.groups.len() - 1
    }

    fn home(&self, hash: u32) -> usize {
        hash as usize & self.gmask()
    }

    fn ctrl_at(&self, p: Pos) -> u8 {
        self.groups[p.g].ctrl[p.s]
    }

    /// The bucket after `p` in probe order, wrapping at the end of the table.
    fn next(&self, p: Pos) -> Pos {
        if p.s + 1 < WIDTH { Pos { g: p.g, s: p.s + 1 } } else { Pos { g: (p.g + 1) & self.gmask(), s: 0 } }
    }

    fn first_from(&self, start: usize, want: impl Fn(u8) -> bool) -> Option<usize> {
        if self.groups.is_empty() {
            let e = self.one.as_ref()?;
            let ctrl = FULL | tag(e.hash()) | if e.expire().is_some() { VOLATILE } else { 0 };
            return want(ctrl).then_some(0);
        }
        let n = self.capacity();
        let start = start % n;
        let mut p = Pos { g: start / WIDTH, s: start % WIDTH };
        for _ in 0..n {
            if want(self.ctrl_at(p)) {
                return Some(p.index());
            }
            p = self.next(p);
        }
        None
    }

    fn place(&mut self, entry: Entry) -> usize {
        let mut p = Pos { g: self.home(entry.hash()), s: 0 };
        while self.ctrl_at(p) != EMPTY {
            p = self.next(p);
        }
        let volatile = entry.expire().is_some();
        let group = &mut self.groups[p.g];
        group.ctrl[p.s] = FULL | tag(entry.hash()) | if volatile { VOLATILE } else { 0 };
        group.ents[p.s] = Some(entry);
        self.len += 1;
        if volatile {
            self.volatile += 1;
        }
        p.index()
    }

    /// Linear position of a bucket in probe order, for the "between" test of deletion.
    fn flat(p: Pos) -> usize {
        p.g * WIDTH + p.s
    }

    /// Closes the gap at `hole` by moving back entries whose home allows it, which keeps every
    /// entry within the run of occupied buckets that starts at its home (no tombstones).
    fn backshift(&mut self, mut hole: Pos) {
        let mut j = hole;
        loop {
            j = self.next(j);
            if self.ctrl_at(j) == EMPTY {
                return;
            }
            let home = self.groups[j.g].ents[j.s].as_ref().map_or(0, |e| self.home(e.hash()));
            let (h, jj, hh) = (Self::flat(hole), Self::flat(j), home * WIDTH);
            // The entry at j may move to the hole unless its home lies cyclically in (hole, j].
            let home_in_between = if h <= jj { h < hh && hh <= jj } else { h < hh || hh <= jj };
            if !home_in_between {
                let c = self.groups[j.g].ctrl[j.s];
                let e = self.groups[j.g].ents[j.s].take();
                self.groups[j.g].ctrl[j.s] = EMPTY;
                self.groups[hole.g].ctrl[hole.s] = c;
                self.groups[hole.g].ents[hole.s] = e;
                hole = j;
            }
        }
    }

    fn resize(&mut self, groups: usize) {
        let old = std::mem::replace(&mut self.groups, (0..groups).map(|_| Group::default()).collect());
        self.len = 0;
        self.volatile = 0;
        self.expire_cursor = 0;
        for group in old.into_vec() {
            for e in group.ents.into_iter().flatten() {
                self.place(e);
            }
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
    fn an_emptied_table_keeps_no_groups_and_fills_again() {
        let mut t = Table::new();
        for round in 0..2 {
            for i in 0..20u32 {
                t.insert_new(entry(format!("k{i}").as_bytes(), (i % 2 == 0).then_some(5)));
            }
            assert!(t.capacity() > 0);
            loop {
                let Some(i) = t.iter().map(|(i, _)| i).next() else { break };
                drop(t.remove_at(i));
            }
            assert_eq!((t.len(), t.volatile_len(), t.capacity(), t.groups_addr()), (0, 0, 0, (0, 0)), "round {round}");
            assert!(t.find(b"k1", hash_of(b"k1")).is_none());
            assert!(t.walk_volatile(10, 10, |_, _| unreachable!()).done);
        }
    }

    #[test]
    fn one_key_lives_outside_the_groups_and_moves_in_and_out() {
        let mut t = Table::new();
        t.insert_new(entry(b"a", Some(5)));
        assert_eq!((t.len(), t.volatile_len(), t.capacity()), (1, 1, 0));
        let i = t.find(b"a", hash_of(b"a")).unwrap();
        assert_eq!((i, t.at(i).key()), (0, &b"a"[..]));
        assert!(t.find(b"b", hash_of(b"b")).is_none());
        assert_eq!((t.occupied_from(12345), t.volatile_from(7)), (Some(0), Some(0)));
        assert_eq!(scan_all(&t), vec![b"a".to_vec()]);
        assert_eq!(t.iter().map(|(i, e)| (i, e.key().to_vec())).collect::<Vec<_>>(), vec![(0, b"a".to_vec())]);
        t.at_mut(0).set_expire(None);
        t.refresh(0);
        assert_eq!((t.volatile_len(), t.volatile_from(0)), (0, None));
        // A second key moves both into a group; removing one moves the other back out.
        t.insert_new(entry(b"b", Some(5)));
        assert_eq!((t.len(), t.volatile_len(), t.capacity()), (2, 1, WIDTH));
        let ib = t.find(b"b", hash_of(b"b")).unwrap();
        drop(t.remove_at(ib));
        assert_eq!((t.len(), t.volatile_len(), t.capacity(), t.groups_addr()), (1, 0, 0, (0, 0)));
        assert!(t.find(b"a", hash_of(b"a")).is_some());
        // The expire walk visits the lone key and may remove it.
        t.insert_new(entry(b"c", Some(5)));
        let ia = t.find(b"a", hash_of(b"a")).unwrap();
        drop(t.remove_at(ia));
        let mut seen = Vec::new();
        assert!(
            t.walk_volatile(10, 10, |t, i| {
                seen.push(t.at(i).key().to_vec());
                drop(t.remove_at(i));
                true
            })
            .done
        );
        assert_eq!((seen, t.len(), t.volatile_len()), (vec![b"c".to_vec()], 0, 0));
    }

    #[test]
    fn the_expire_walk_stops_at_its_limits_and_resumes_where_it_stopped() {
        let mut t = Table::new();
        for i in 0..300u32 {
            t.insert_new(entry(format!("k{i}").as_bytes(), (i % 3 != 0).then_some(5)));
        }
        // Twenty keys a walk, nothing removed: every key with a TTL is seen exactly once per
        // pass, and only the last walk of the pass says it is done.
        let mut seen = Vec::new();
        let mut walks = 0;
        loop {
            let w = t.walk_volatile(usize::MAX, 20, |t, i| {
                seen.push(t.at(i).key().to_vec());
                false
            });
            walks += 1;
            assert!(w.keys <= 20);
            if w.done {
                break;
            }
            assert_eq!(w.keys, 20);
        }
        assert_eq!((seen.len(), walks), (200, 11));
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), 200);
        // A bucket limit stops a walk too.
        let w = t.walk_volatile(5, 100, |_, _| false);
        assert_eq!((w.buckets, w.done), (5, false));
        // Removing every key it sees, walks empty the table, the last key included.
        let mut removed = 0;
        while t.volatile_len() > 0 {
            t.walk_volatile(usize::MAX, 20, |t, i| {
                drop(t.remove_at(i));
                removed += 1;
                true
            });
        }
        assert_eq!((removed, t.len()), (200, 100));
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
