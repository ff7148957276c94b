//! Hashes: field/value maps, packed while small, a table past the limits.
//!
//! A new hash is a [`Packed`] sequence of alternating fields and values (Valkey's `listpack`
//! encoding). It becomes a [`Dict`] (`hashtable`) once it holds more than
//! `hash-max-listpack-entries` fields or is given a field or value longer than
//! `hash-max-listpack-value` bytes — at the same points Valkey converts — and never goes back.
//!
//! A hash some of whose fields have a time to live (HEXPIRE, Redis 7.4) is a [`Hash::Volatile`]:
//! the same packed or table body, boxed with a side table of field -> expire time and a lower
//! bound of those times. Hashes without field TTLs pay nothing for the feature: the variant's
//! tag already exists, and a hash whose last field TTL goes returns to its plain body.

use std::collections::{HashMap, HashSet};

use super::dict::{Dict, Keyed};
use super::lpentry::Elem;
use super::packed::Packed;
use super::sample;
use crate::object::size_class;

/// The compact-encoding limits (`hash-max-listpack-entries`, `hash-max-listpack-value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HashLimits {
    /// Most fields a packed hash holds.
    pub max_entries: usize,
    /// Longest field or value a packed hash holds.
    pub max_value: usize,
}

impl HashLimits {
    /// No limit: everything stays packed (RDB loading, before [`Hash::conform`]).
    pub const UNBOUNDED: HashLimits = HashLimits { max_entries: usize::MAX, max_value: usize::MAX };
}

/// A hash value.
#[derive(Debug, Clone)]
pub enum Hash {
    /// Fields and values alternating in one allocation.
    Packed(Packed),
    /// A table of [`Pair`]s.
    Table(Box<Dict<Pair>>),
    /// A packed or table hash with at least one field TTL.
    Volatile(Box<Volatile>),
}

/// A hash with field TTLs: its body (never itself volatile) and the TTLs.
#[derive(Debug, Clone)]
pub struct Volatile {
    body: Hash,
    /// Field -> unix time in milliseconds; only fields of `body`, never empty.
    ttls: HashMap<Box<[u8]>, i64>,
    /// At most the smallest time of `ttls` (exact after a purge; a persisted or rewritten
    /// field may leave it lower, which costs one purge that finds nothing and recomputes it).
    min: i64,
}

impl Volatile {
    /// Drops `field`'s TTL, if any; returns whether it had one.
    fn forget(&mut self, field: &[u8]) -> bool {
        self.ttls.remove(field).is_some()
    }
}

impl Default for Hash {
    fn default() -> Self {
        Hash::Packed(Packed::new())
    }
}

impl Hash {
    /// An empty hash.
    pub fn new() -> Hash {
        Hash::default()
    }

    /// Number of fields.
    pub fn len(&self) -> usize {
        match self {
            Hash::Packed(p) => p.len() / 2,
            Hash::Table(d) => d.len(),
            Hash::Volatile(v) => v.body.len(),
        }
    }

    /// Whether there is no field (such a hash must not stay in the keyspace).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        match self {
            Hash::Packed(_) => "listpack",
            Hash::Table(_) => "hashtable",
            // Redis 7.4 names a listpack with TTLs `listpackex`.
            Hash::Volatile(v) if matches!(v.body, Hash::Packed(_)) => "listpackex",
            Hash::Volatile(v) => v.body.encoding(),
        }
    }

    /// Heap bytes outside the object, in allocator size classes.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Hash::Packed(p) => p.heap_bytes(),
            Hash::Table(d) => d.heap_bytes(),
            Hash::Volatile(v) => {
                // The box, the body, the map's slots (key box, time, control byte) and keys.
                let slots = v.ttls.capacity() * (std::mem::size_of::<(Box<[u8]>, i64)>() + 1);
                let keys: usize = v.ttls.keys().map(|k| size_class(k.len())).sum();
                size_class(std::mem::size_of::<Volatile>()) + v.body.heap_bytes() + size_class(slots) + keys
            }
        }
    }

    /// The value of `field`.
    pub fn get(&self, field: &[u8]) -> Option<Elem<'_>> {
        match self {
            Hash::Packed(p) => p.find(field, 2).map(|at| p.at(p.at(at).1).0),
            Hash::Table(d) => d.find(field).map(|pos| Elem::Str(d.at(pos).value())),
            Hash::Volatile(v) => v.body.get(field),
        }
    }

    /// Whether `field` exists.
    pub fn contains(&self, field: &[u8]) -> bool {
        match self {
            Hash::Packed(p) => p.find(field, 2).is_some(),
            Hash::Table(d) => d.find(field).is_some(),
            Hash::Volatile(v) => v.body.contains(field),
        }
    }

    /// Converts ahead of a write of `new_fields` pairs whose longest argument is `longest`
    /// bytes, as Valkey's `hashTypeTryConversion`: too many pairs or a too long argument
    /// make the table encoding right away (sized for the pairs).
    pub fn prepare(&mut self, new_fields: usize, longest: usize, limits: HashLimits) {
        if let Hash::Volatile(v) = self {
            return v.body.prepare(new_fields, longest, limits);
        }
        if let Hash::Packed(p) = self
            && (new_fields > limits.max_entries || longest > limits.max_value)
        {
            let hint = (p.len() / 2).max(new_fields);
            self.make_table(hint);
        }
    }

    /// Sets `field` to `value`, dropping any TTL it had (HSET, as Redis 7.4); returns whether
    /// the field is new.
    pub fn set(&mut self, field: &[u8], value: &[u8], limits: HashLimits) -> bool {
        if matches!(self, Hash::Packed(_)) && (field.len() > limits.max_value || value.len() > limits.max_value) {
            self.make_table(self.len() + 1);
        }
        let added = match self {
            Hash::Packed(p) => match p.find(field, 2) {
                Some(at) => {
                    let value_at = p.at(at).1;
                    p.replace(value_at, Elem::of(value));
                    false
                }
                None => {
                    p.push(&[Elem::of(field), Elem::of(value)]);
                    true
                }
            },
            Hash::Table(d) => match d.find(field) {
                Some(pos) => {
                    d.replace(pos, Pair::new(field, value));
                    false
                }
                None => {
                    d.insert_new(Pair::new(field, value));
                    true
                }
            },
            Hash::Volatile(v) => {
                v.forget(field);
                let added = v.body.set(field, value, limits);
                self.settle();
                return added;
            }
        };
        if added && matches!(self, Hash::Packed(_)) && self.len() > limits.max_entries {
            self.make_table(self.len());
        }
        added
    }

    /// Sets `field` to `value` and keeps any TTL it had (HINCRBY, HINCRBYFLOAT: Redis's
    /// `HASH_SET_KEEP_TTL`); returns whether the field is new.
    pub fn set_keeping_ttl(&mut self, field: &[u8], value: &[u8], limits: HashLimits) -> bool {
        match self {
            Hash::Volatile(v) => v.body.set(field, value, limits),
            h => h.set(field, value, limits),
        }
    }

    /// Removes `field`; returns whether it existed.
    pub fn remove(&mut self, field: &[u8]) -> bool {
        match self {
            Hash::Packed(p) => match p.find(field, 2) {
                Some(at) => {
                    p.remove(at, 2);
                    true
                }
                None => false,
            },
            Hash::Table(d) => d.remove(field).is_some(),
            Hash::Volatile(v) => {
                v.forget(field);
                let removed = v.body.remove(field);
                self.settle();
                removed
            }
        }
    }

    /// The fields and values.
    pub fn iter(&self) -> Iter<'_> {
        match self {
            Hash::Packed(p) => Iter::Packed(p.iter()),
            Hash::Table(d) => Iter::Table(d.iter()),
            Hash::Volatile(v) => v.body.iter(),
        }
    }

    /// The expire time of `field` (unix ms), `None` when it has none or does not exist.
    pub fn expire_of(&self, field: &[u8]) -> Option<i64> {
        match self {
            Hash::Volatile(v) => v.ttls.get(field).copied(),
            _ => None,
        }
    }

    /// A time no later than the earliest field TTL, `None` when no field has one: a hash
    /// needs a purge ([`Hash::remove_expired`]) only once this is past.
    pub fn min_expire(&self) -> Option<i64> {
        match self {
            Hash::Volatile(v) => Some(v.min),
            _ => None,
        }
    }

    /// Whether any field has a TTL.
    pub fn has_field_ttls(&self) -> bool {
        matches!(self, Hash::Volatile(_))
    }

    /// Gives the existing `field` the expire time `when` (unix ms); returns false when there
    /// is no such field.
    pub fn set_expire(&mut self, field: &[u8], when: i64) -> bool {
        if !self.contains(field) {
            return false;
        }
        if !matches!(self, Hash::Volatile(_)) {
            let body = std::mem::take(self);
            *self = Hash::Volatile(Box::new(Volatile { body, ttls: HashMap::new(), min: when }));
        }
        let Hash::Volatile(v) = self else { unreachable!("made volatile above") };
        v.ttls.insert(field.into(), when);
        v.min = v.min.min(when);
        true
    }

    /// Removes `field`'s TTL; returns whether it had one (HPERSIST).
    pub fn persist(&mut self, field: &[u8]) -> bool {
        let Hash::Volatile(v) = self else { return false };
        let had = v.forget(field);
        self.settle();
        had
    }

    /// Deletes the fields whose expire time is before `now` (a field lives through its own
    /// millisecond, as a key does) and returns them. Cheap when nothing is due: one compare.
    pub fn remove_expired(&mut self, now: i64) -> Vec<Vec<u8>> {
        let Hash::Volatile(v) = self else { return Vec::new() };
        if v.min >= now {
            return Vec::new();
        }
        let mut due: Vec<Vec<u8>> = v.ttls.iter().filter(|&(_, &t)| t < now).map(|(f, _)| f.to_vec()).collect();
        // In field order, so the write stream does not depend on the map's.
        due.sort_unstable();
        for f in &due {
            v.ttls.remove(f.as_slice());
            v.body.remove(f);
        }
        v.min = v.ttls.values().copied().min().unwrap_or(i64::MAX);
        self.settle();
        due
    }

    /// The fields that have a TTL, with their times (RDB, DUMP).
    pub fn field_ttls(&self) -> impl Iterator<Item = (&[u8], i64)> + '_ {
        let map = match self {
            Hash::Volatile(v) => Some(&v.ttls),
            _ => None,
        };
        map.into_iter().flat_map(|m| m.iter().map(|(f, &t)| (&f[..], t)))
    }

    /// Returns a volatile hash whose last TTL went to its plain body.
    fn settle(&mut self) {
        if let Hash::Volatile(v) = self
            && v.ttls.is_empty()
        {
            *self = std::mem::take(&mut v.body);
        }
    }

    /// O(1) access to the `i`th pair after at most one O(N) pass (for sampling).
    pub fn indexed(&self) -> Indexed<'_> {
        let hash = match self {
            Hash::Volatile(v) => &v.body,
            h => h,
        };
        let offsets = match hash {
            Hash::Packed(p) => p.offsets(2),
            Hash::Table(_) | Hash::Volatile(_) => Vec::new(),
        };
        Indexed { hash, offsets }
    }

    /// A uniformly random pair, or `None` when empty. O(1) for a table, O(N) when packed.
    pub fn random(&self) -> Option<(Elem<'_>, Elem<'_>)> {
        if self.is_empty() {
            return None;
        }
        let i = sample::below(self.len());
        Some(match self {
            Hash::Packed(p) => {
                let mut it = p.iter().skip(2 * i);
                // Invariant: a packed hash holds len() complete pairs.
                (it.next().expect("field"), it.next().expect("value"))
            }
            Hash::Table(d) => d.at(i).elems(),
            Hash::Volatile(v) => return v.body.random(),
        })
    }

    /// HSCAN's walk: visits the pairs of one cursor step and returns the next cursor. A
    /// packed hash is visited whole in one call that returns 0, as Valkey does.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(Elem<'_>, Elem<'_>)) -> u64 {
        match self {
            Hash::Packed(_) => {
                self.iter().for_each(|(k, v)| f(k, v));
                0
            }
            Hash::Table(d) => d.scan(cursor, |pair| {
                let (k, v) = pair.elems();
                f(k, v)
            }),
            Hash::Volatile(v) => v.body.scan(cursor, f),
        }
    }

    /// Builds a packed hash from loaded pairs; `None` if a field repeats (a corrupt payload).
    /// Call [`Hash::conform`] afterwards to apply the configured limits.
    pub fn from_pairs(pairs: &[(Vec<u8>, Vec<u8>)]) -> Option<Hash> {
        let mut seen = HashSet::with_capacity(pairs.len());
        if !pairs.iter().all(|(f, _)| seen.insert(f.as_slice())) {
            return None;
        }
        let elems = pairs.iter().flat_map(|(f, v)| [Elem::of(f), Elem::of(v)]);
        Some(Hash::Packed(Packed::from_elems(elems)))
    }

    /// Builds a hash from a listpack blob of alternating fields and values (RDB
    /// `HASH_LISTPACK`); `None` if the blob is malformed, empty, odd, or repeats a field.
    pub fn from_listpack(blob: &[u8]) -> Option<Hash> {
        let p = Packed::from_listpack(blob)?;
        if p.is_empty() || p.len() % 2 != 0 {
            return None;
        }
        let mut seen = HashSet::with_capacity(p.len() / 2);
        if !p.iter().step_by(2).all(|f| seen.insert(f)) {
            return None;
        }
        drop(seen);
        Some(Hash::Packed(p))
    }

    /// Moves a loaded hash to the table encoding if it is over the limits.
    pub fn conform(&mut self, limits: HashLimits) {
        if let Hash::Volatile(v) = self {
            return v.body.conform(limits);
        }
        let Hash::Packed(p) = self else { return };
        let long = || p.iter().any(|e| e.str_len() > limits.max_value);
        if p.len() / 2 > limits.max_entries || long() {
            self.make_table(self.len());
        }
    }

    /// Converts to the table encoding, sized for `hint` fields.
    fn make_table(&mut self, hint: usize) {
        let Hash::Packed(p) = self else { return };
        let mut d = Dict::with_capacity(hint);
        let mut it = p.iter();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            k.with_bytes(|k| v.with_bytes(|v| d.insert_new(Pair::new(k, v))));
        }
        *self = Hash::Table(Box::new(d));
    }
}

impl PartialEq for Hash {
    /// Same fields with the same values, whatever the encodings.
    fn eq(&self, other: &Hash) -> bool {
        self.len() == other.len()
            && self.iter().all(|(k, v)| k.with_bytes(|k| other.get(k)).is_some_and(|o| o.to_vec() == v.to_vec()))
    }
}

/// A field and its value in one allocation: the field's length (LEB128), the field, the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pair(Box<[u8]>);

impl Pair {
    /// Packs `field` and `value`.
    pub fn new(field: &[u8], value: &[u8]) -> Pair {
        let mut buf = Vec::with_capacity(5 + field.len() + value.len());
        let mut n = field.len();
        while n >= 0x80 {
            buf.push((n as u8) | 0x80);
            n >>= 7;
        }
        buf.push(n as u8);
        buf.extend_from_slice(field);
        buf.extend_from_slice(value);
        Pair(buf.into_boxed_slice())
    }

    /// The field.
    pub fn field(&self) -> &[u8] {
        let (len, at) = self.split();
        &self.0[at..at + len]
    }

    /// The value.
    pub fn value(&self) -> &[u8] {
        let (len, at) = self.split();
        &self.0[at + len..]
    }

    /// Field and value as elements.
    pub fn elems(&self) -> (Elem<'_>, Elem<'_>) {
        (Elem::Str(self.field()), Elem::Str(self.value()))
    }

    /// The field length and where the field starts.
    fn split(&self) -> (usize, usize) {
        let mut len = 0usize;
        let mut shift = 0;
        for (i, &b) in self.0.iter().enumerate() {
            len |= usize::from(b & 0x7F) << shift;
            if b < 0x80 {
                return (len, i + 1);
            }
            shift += 7;
        }
        unreachable!("a pair always holds a complete length")
    }
}

impl Keyed for Pair {
    fn key(&self) -> &[u8] {
        self.field()
    }

    fn heap_bytes(&self) -> usize {
        size_class(self.0.len())
    }
}

/// The pairs of a [`Hash`].
pub enum Iter<'a> {
    /// Over a packed hash.
    Packed(super::packed::Iter<'a>),
    /// Over a table.
    Table(std::slice::Iter<'a, Pair>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = (Elem<'a>, Elem<'a>);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Packed(it) => Some((it.next()?, it.next()?)),
            Iter::Table(it) => it.next().map(Pair::elems),
        }
    }
}

/// Pairs of a hash by position (see [`Hash::indexed`]).
pub struct Indexed<'a> {
    hash: &'a Hash,
    offsets: Vec<u32>,
}

impl<'a> Indexed<'a> {
    /// The `i`th pair, `i < len()`.
    pub fn get(&self, i: usize) -> (Elem<'a>, Elem<'a>) {
        match self.hash {
            Hash::Packed(p) => {
                let (k, next) = p.at(self.offsets[i] as usize);
                (k, p.at(next).0)
            }
            Hash::Table(d) => d.at(i).elems(),
            Hash::Volatile(_) => unreachable!("Hash::indexed unwraps a volatile hash"),
        }
    }

    /// Number of pairs.
    pub fn len(&self) -> usize {
        self.hash.len()
    }

    /// Whether there is no pair.
    pub fn is_empty(&self) -> bool {
        self.hash.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: HashLimits = HashLimits { max_entries: 4, max_value: 8 };

    fn fields(h: &Hash) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = h.iter().map(|(k, _)| k.to_vec()).collect();
        v.sort();
        v
    }

    #[test]
    fn set_get_remove_in_both_encodings() {
        for limits in [SMALL, HashLimits { max_entries: 0, max_value: 0 }] {
            let mut h = Hash::new();
            assert!(h.set(b"a", b"1", limits));
            assert!(!h.set(b"a", b"22", limits));
            assert!(h.set(b"b", b"x", limits));
            assert_eq!(h.get(b"a").map(Elem::to_vec), Some(b"22".to_vec()));
            assert_eq!(h.len(), 2);
            assert!(h.remove(b"a") && !h.remove(b"a"));
            assert!(!h.contains(b"a") && h.contains(b"b"));
            assert!(h.remove(b"b") && h.is_empty());
        }
    }

    #[test]
    fn converts_at_the_limits_and_never_back() {
        let mut h = Hash::new();
        for i in 0..4 {
            h.set(format!("f{i}").as_bytes(), b"v", SMALL);
        }
        assert_eq!(h.encoding(), "listpack");
        h.set(b"f4", b"v", SMALL);
        assert_eq!(h.encoding(), "hashtable");
        for i in 0..5 {
            h.remove(format!("f{i}").as_bytes());
        }
        h.set(b"x", b"y", SMALL);
        assert_eq!(h.encoding(), "hashtable");

        let mut h = Hash::new();
        h.set(b"f", b"12345678", SMALL);
        assert_eq!(h.encoding(), "listpack", "exactly max_value bytes fits");
        h.set(b"f", b"123456789", SMALL);
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h.get(b"f").map(Elem::to_vec), Some(b"123456789".to_vec()));

        let mut h = Hash::new();
        h.prepare(5, 1, SMALL);
        assert_eq!(h.encoding(), "hashtable", "too many pairs at once");
    }

    #[test]
    fn pairs_hold_long_fields() {
        let field = vec![b'f'; 300];
        let p = Pair::new(&field, b"value");
        assert_eq!((p.field(), p.value()), (&field[..], &b"value"[..]));
        let p = Pair::new(b"", b"");
        assert_eq!((p.field(), p.value()), (&b""[..], &b""[..]));
    }

    #[test]
    fn indexed_random_and_scan_cover_all_pairs() {
        for limits in [SMALL, HashLimits { max_entries: 0, max_value: 0 }] {
            let mut h = Hash::new();
            for i in 0..4 {
                h.set(format!("f{i}").as_bytes(), format!("{i}").as_bytes(), limits);
            }
            let ix = h.indexed();
            let mut got: Vec<Vec<u8>> = (0..ix.len()).map(|i| ix.get(i).0.to_vec()).collect();
            got.sort();
            assert_eq!(got, fields(&h));
            let (k, v) = h.random().unwrap();
            assert_eq!(h.get(&k.to_vec()).map(Elem::to_vec), Some(v.to_vec()));
            let mut scanned = Vec::new();
            let mut cursor = 0;
            loop {
                cursor = h.scan(cursor, |k, _| scanned.push(k.to_vec()));
                if cursor == 0 {
                    break;
                }
            }
            scanned.sort();
            assert_eq!(scanned, fields(&h));
        }
    }

    #[test]
    fn loading_rejects_duplicates_and_conforms() {
        let pairs = vec![(b"a".to_vec(), b"1".to_vec()), (b"a".to_vec(), b"2".to_vec())];
        assert!(Hash::from_pairs(&pairs).is_none());
        let pairs: Vec<_> = (0..6).map(|i| (format!("f{i}").into_bytes(), b"v".to_vec())).collect();
        let mut h = Hash::from_pairs(&pairs).unwrap();
        assert_eq!(h.encoding(), "listpack");
        let copy = h.clone();
        h.conform(SMALL);
        assert_eq!(h.encoding(), "hashtable");
        assert_eq!(h, copy, "equality ignores the encoding");
    }

    #[test]
    fn field_ttls_live_beside_either_body_and_go_with_their_fields() {
        for limits in [SMALL, HashLimits { max_entries: 0, max_value: 0 }] {
            let mut h = Hash::new();
            for f in ["a", "b", "c"] {
                h.set(f.as_bytes(), b"v", limits);
            }
            let plain = h.encoding();
            assert!(!h.set_expire(b"nope", 5), "only existing fields");
            assert!(h.set_expire(b"a", 10) && h.set_expire(b"b", 20));
            assert!(h.has_field_ttls() && h.min_expire() == Some(10));
            assert_eq!(h.expire_of(b"a"), Some(10));
            assert_eq!((h.len(), h.get(b"a").map(Elem::to_vec)), (3, Some(b"v".to_vec())));
            // Rewriting a field drops its TTL; keeping it is explicit.
            h.set_keeping_ttl(b"b", b"w", limits);
            assert_eq!(h.expire_of(b"b"), Some(20));
            h.set(b"b", b"x", limits);
            assert_eq!(h.expire_of(b"b"), None);
            assert!(h.remove_expired(10).is_empty(), "a field lives through its own millisecond");
            assert_eq!(h.remove_expired(11), [b"a".to_vec()]);
            assert!(!h.has_field_ttls() && h.encoding() == plain, "back to the plain body");
            h.set_expire(b"c", 30);
            assert!(h.persist(b"c") && !h.persist(b"c") && !h.has_field_ttls());
            h.set_expire(b"c", 30);
            assert!(h.remove(b"c") && h.expire_of(b"c").is_none() && !h.has_field_ttls());
        }
    }

    #[test]
    fn a_ten_field_hash_costs_what_a_listpack_does() {
        // The memory benchmark's hash: fields field0..field9, values like value-12345-0.
        let mut h = Hash::new();
        for k in 0..10 {
            h.set(format!("field{k}").as_bytes(), format!("value-12345-{k}").as_bytes(), HashLimits::UNBOUNDED);
        }
        // 10 x (1 + 6) + 10 x (1 + 13) = 210 bytes in one allocation, a 224-byte size class.
        // Valkey's listpack holds the same plus a back-length byte per element and a 7-byte
        // header and terminator (237 bytes, a 256-byte class) behind a 16-byte robj; here the
        // Object (32 bytes) lives inside the key's entry, so the buffer is all there is.
        assert_eq!(h.heap_bytes(), 224);
        assert!(std::mem::size_of::<crate::object::Object>() <= 32);
        assert_eq!(std::mem::size_of::<Hash>(), 24, "the volatile variant costs no word");
        let o = crate::object::Object::Hash(h);
        assert_eq!(o.heap_size(), 224);
    }
}
