//! Sets: an [`IntSet`] while every member is an integer (Valkey's `intset`), a [`Packed`]
//! sequence while small (`listpack`), a [`Dict`] past the limits (`hashtable`).
//!
//! Conversions happen where Valkey's `setTypeAddAux`, `setTypeCreate` and
//! `setTypeMaybeConvert` make them, driven by `set-max-intset-entries`,
//! `set-max-listpack-entries` and `set-max-listpack-value`, and only ever towards the table:
//! removing members never re-packs a set. The one exception is Valkey's too: SPOP with a count
//! that leaves few survivors rebuilds them as a new, possibly packed, set.

use std::collections::HashSet;

use super::dict::Dict;
use super::intset::IntSet;
use super::lpentry::Elem;
use super::packed::Packed;
use super::sample;

/// The compact-encoding limits of sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SetLimits {
    /// `set-max-intset-entries`.
    pub intset_entries: usize,
    /// `set-max-listpack-entries`.
    pub listpack_entries: usize,
    /// `set-max-listpack-value`.
    pub listpack_value: usize,
}

impl SetLimits {
    /// No limit: everything stays compact (RDB loading, before [`Set::conform`]).
    pub const UNBOUNDED: SetLimits =
        SetLimits { intset_entries: usize::MAX, listpack_entries: usize::MAX, listpack_value: usize::MAX };

    /// The intset limit as Valkey applies it (capped at 2^30 by intset internals).
    fn intset_max(self) -> usize {
        self.intset_entries.min(1 << 30)
    }
}

/// SPOP with a count rebuilds a table from its survivors when they number at most
/// 1/SPOP_REBUILD_FACTOR of the popped members (Valkey's `SPOP_MOVE_STRATEGY_MUL`).
const SPOP_REBUILD_FACTOR: usize = 5;

/// A member of a table-encoded set.
pub type Member = Box<[u8]>;

/// A set value.
#[derive(Debug, Clone)]
pub enum Set {
    /// Sorted integers.
    Ints(IntSet),
    /// Members in one allocation.
    Packed(Packed),
    /// A table of members.
    Table(Box<Dict<Member>>),
}

impl Set {
    /// An empty set of the encoding Valkey's `setTypeCreate` picks for a first member and
    /// `size_hint` members to come.
    pub fn for_first(member: &[u8], size_hint: usize, limits: SetLimits) -> Set {
        if Elem::of(member).as_int().is_some() && size_hint <= limits.intset_entries {
            Set::Ints(IntSet::new())
        } else if size_hint <= limits.listpack_entries {
            Set::Packed(Packed::new())
        } else {
            Set::table(size_hint)
        }
    }

    /// An empty intset (the start of SUNIONSTORE/SDIFFSTORE results, as in Valkey).
    pub fn ints() -> Set {
        Set::Ints(IntSet::new())
    }

    /// An empty packed set.
    pub fn packed() -> Set {
        Set::Packed(Packed::new())
    }

    /// An empty table sized for `n` members (temporary results that need fast lookups).
    pub fn table(n: usize) -> Set {
        Set::Table(Box::new(Dict::with_capacity(n)))
    }

    /// Valkey's `setTypeMaybeConvert`: goes to the table ahead of adding `size_hint` members
    /// that would not fit the current encoding.
    pub fn reserve(&mut self, size_hint: usize, limits: SetLimits) {
        let over = match self {
            Set::Ints(_) => size_hint > limits.intset_entries,
            Set::Packed(_) => size_hint > limits.listpack_entries,
            Set::Table(_) => false,
        };
        if over {
            self.make_table(size_hint);
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        match self {
            Set::Ints(s) => s.len(),
            Set::Packed(p) => p.len(),
            Set::Table(d) => d.len(),
        }
    }

    /// Whether the set is empty (such a set must not stay in the keyspace).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        match self {
            Set::Ints(_) => "intset",
            Set::Packed(_) => "listpack",
            Set::Table(_) => "hashtable",
        }
    }

    /// Heap bytes outside the object, in allocator size classes.
    pub fn heap_bytes(&self) -> usize {
        match self {
            Set::Ints(s) => s.heap_bytes(),
            Set::Packed(p) => p.heap_bytes(),
            Set::Table(d) => d.heap_bytes(),
        }
    }

    /// Whether `member` belongs to the set.
    pub fn contains(&self, member: &[u8]) -> bool {
        self.contains_elem(Elem::of(member))
    }

    /// [`Set::contains`] for an element taken from another set (no integer formatting when
    /// both sides hold integers).
    pub fn contains_elem(&self, e: Elem<'_>) -> bool {
        match self {
            Set::Ints(s) => e.as_int().is_some_and(|v| s.contains(v)),
            Set::Packed(p) => e.with_bytes(|b| p.find(b, 1).is_some()),
            Set::Table(d) => e.with_bytes(|b| d.find(b).is_some()),
        }
    }

    /// Adds `member`; returns whether it is new.
    pub fn add(&mut self, member: &[u8], limits: SetLimits) -> bool {
        self.add_elem(Elem::of(member), limits)
    }

    /// [`Set::add`] for an element, converting as Valkey's `setTypeAddAux` does.
    pub fn add_elem(&mut self, e: Elem<'_>, limits: SetLimits) -> bool {
        match self {
            Set::Ints(s) => {
                if let Some(v) = e.as_int() {
                    let added = s.insert(v);
                    if added && s.len() > limits.intset_max() {
                        self.make_table(0);
                    }
                    return added;
                }
                // A string member: packed if it and every integer's digits fit, else a table.
                let digits = s.min_max().map_or(0, |(lo, hi)| Elem::Int(lo).str_len().max(Elem::Int(hi).str_len()));
                let fits = s.len() < limits.listpack_entries
                    && e.str_len() <= limits.listpack_value
                    && digits <= limits.listpack_value;
                if fits {
                    let mut p = Packed::from_elems(s.iter().map(Elem::Int));
                    p.push(&[e]);
                    *self = Set::Packed(p);
                } else {
                    let hint = s.len() + 1;
                    self.make_table(hint);
                    self.add_elem(e, limits);
                }
                true
            }
            Set::Packed(p) => {
                if e.with_bytes(|b| p.find(b, 1)).is_some() {
                    return false;
                }
                if p.len() < limits.listpack_entries && e.str_len() <= limits.listpack_value {
                    p.push(&[e]);
                } else {
                    let hint = p.len() + 1;
                    self.make_table(hint);
                    self.add_elem(e, limits);
                }
                true
            }
            Set::Table(d) => e.with_bytes(|b| {
                if d.find(b).is_some() {
                    return false;
                }
                d.insert_new(b.into());
                true
            }),
        }
    }

    /// Removes `member`; returns whether it was there.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self {
            Set::Ints(s) => Elem::of(member).as_int().is_some_and(|v| s.remove(v)),
            Set::Packed(p) => match p.find(member, 1) {
                Some(at) => {
                    p.remove(at, 1);
                    true
                }
                None => false,
            },
            Set::Table(d) => d.remove(member).is_some(),
        }
    }

    /// [`Set::remove`] for an element taken from another set.
    pub fn remove_elem(&mut self, e: Elem<'_>) -> bool {
        match self {
            Set::Ints(s) => e.as_int().is_some_and(|v| s.remove(v)),
            _ => e.with_bytes(|b| self.remove(b)),
        }
    }

    /// The members.
    pub fn iter(&self) -> Iter<'_> {
        match self {
            Set::Ints(s) => Iter::Ints(s, 0),
            Set::Packed(p) => Iter::Packed(p.iter()),
            Set::Table(d) => Iter::Table(d.iter()),
        }
    }

    /// O(1) access to the `i`th member after at most one O(N) pass (for sampling).
    pub fn indexed(&self) -> Indexed<'_> {
        let offsets = match self {
            Set::Packed(p) => p.offsets(1),
            _ => Vec::new(),
        };
        Indexed { set: self, offsets }
    }

    /// A uniformly random member, or `None` when empty. O(1), O(N) when packed.
    pub fn random(&self) -> Option<Elem<'_>> {
        if self.is_empty() {
            return None;
        }
        let i = sample::below(self.len());
        Some(match self {
            Set::Ints(s) => Elem::Int(s.get(i)),
            // Invariant: i < len().
            Set::Packed(p) => p.iter().nth(i).expect("i < len"),
            Set::Table(d) => Elem::Str(d.at(i)),
        })
    }

    /// Removes and returns a uniformly random member. O(1) for a table, O(N) otherwise (as
    /// Valkey's intset and listpack removals).
    pub fn pop_random(&mut self) -> Option<Vec<u8>> {
        if self.is_empty() {
            return None;
        }
        let i = sample::below(self.len());
        Some(match self {
            Set::Ints(s) => {
                let v = s.get(i);
                s.remove_at(i);
                Elem::Int(v).to_vec()
            }
            Set::Packed(p) => {
                let at = p.offsets(1)[i] as usize;
                let m = p.at(at).0.to_vec();
                p.remove(at, 1);
                m
            }
            Set::Table(d) => d.remove_at(i).into_vec(),
        })
    }

    /// Removes and returns `count` distinct random members, `count < len()`: O(count) for a
    /// table, one O(N) rebuild for the compact encodings.
    ///
    /// When few members remain (at most a fifth of those popped), Valkey's `spopWithCount`
    /// rebuilds a table set from the survivors, added one by one to a fresh listpack; this
    /// does the same, so such a set can come back packed.
    pub fn pop_many(&mut self, count: usize, limits: SetLimits) -> Vec<Vec<u8>> {
        let remaining = self.len() - count;
        if let Set::Table(_) = self
            && remaining * SPOP_REBUILD_FACTOR > count
        {
            return (0..count).filter_map(|_| self.pop_random()).collect();
        }
        let picks = sample::distinct(self.len(), count);
        let mut picked = vec![false; self.len()];
        let ix = self.indexed();
        let popped = picks
            .iter()
            .map(|&i| {
                picked[i] = true;
                ix.get(i).to_vec()
            })
            .collect();
        drop(ix);
        let kept = |(i, _): &(usize, Elem<'_>)| !picked[*i];
        *self = match self {
            Set::Ints(s) => {
                let rest: Vec<i64> = s.iter().enumerate().filter(|&(i, _)| !picked[i]).map(|(_, v)| v).collect();
                Set::Ints(IntSet::from_sorted(&rest))
            }
            Set::Packed(p) => Set::Packed(Packed::from_elems(p.iter().enumerate().filter(kept).map(|(_, e)| e))),
            Set::Table(d) => {
                let mut rest = Set::packed();
                for (_, e) in d.iter().map(|m| Elem::Str(m)).enumerate().filter(kept) {
                    rest.add_elem(e, limits);
                }
                rest
            }
        };
        popped
    }

    /// SSCAN's walk: visits the members of one cursor step and returns the next cursor. A
    /// compact set is visited whole in one call that returns 0, as Valkey does.
    pub fn scan(&self, cursor: u64, mut f: impl FnMut(Elem<'_>)) -> u64 {
        match self {
            Set::Table(d) => d.scan(cursor, |m| f(Elem::Str(m))),
            _ => {
                self.iter().for_each(f);
                0
            }
        }
    }

    /// Valkey's `maybeConvertToIntset` for a result known to hold only integers: re-encodes
    /// it as an intset when it is small enough.
    pub fn make_intset(&mut self, limits: SetLimits) {
        if matches!(self, Set::Ints(_)) || self.len() > limits.intset_max() {
            return;
        }
        let mut values: Vec<i64> = self.iter().filter_map(Elem::as_int).collect();
        if values.len() != self.len() {
            return;
        }
        values.sort_unstable();
        *self = Set::Ints(IntSet::from_sorted(&values));
    }

    /// Builds a set from loaded members in the most compact encoding; `None` if a member
    /// repeats (a corrupt payload). Call [`Set::conform`] afterwards.
    pub fn from_members(members: &[Vec<u8>]) -> Option<Set> {
        let mut seen = HashSet::with_capacity(members.len());
        if !members.iter().all(|m| seen.insert(m.as_slice())) {
            return None;
        }
        let ints: Option<Vec<i64>> = members.iter().map(|m| Elem::of(m).as_int()).collect();
        Some(match ints {
            Some(mut v) => {
                v.sort_unstable();
                Set::Ints(IntSet::from_sorted(&v))
            }
            None => Set::Packed(Packed::from_elems(members.iter().map(|m| Elem::of(m)))),
        })
    }

    /// Builds a set from a listpack blob (RDB `SET_LISTPACK`); `None` if the blob is
    /// malformed, empty, or repeats a member.
    pub fn from_listpack(blob: &[u8]) -> Option<Set> {
        let p = Packed::from_listpack(blob)?;
        let mut seen = HashSet::with_capacity(p.len());
        if p.is_empty() || !p.iter().all(|m| seen.insert(m)) {
            return None;
        }
        drop(seen);
        Some(Set::Packed(p))
    }

    /// Builds a set from an intset blob (RDB `SET_INTSET`); `None` if it is malformed or empty.
    pub fn from_intset(blob: &[u8]) -> Option<Set> {
        IntSet::from_blob(blob).filter(|s| !s.is_empty()).map(Set::Ints)
    }

    /// Moves a loaded set to the encoding its size calls for under `limits`.
    pub fn conform(&mut self, limits: SetLimits) {
        let over = match self {
            Set::Ints(s) => s.len() > limits.intset_max(),
            Set::Packed(p) => {
                p.len() > limits.listpack_entries || p.iter().any(|e| e.str_len() > limits.listpack_value)
            }
            Set::Table(_) => false,
        };
        if over {
            self.make_table(0);
        }
    }

    /// Converts to the table encoding, sized for `hint` members or the current ones.
    fn make_table(&mut self, hint: usize) {
        if let Set::Table(_) = self {
            return;
        }
        let mut d = Dict::with_capacity(hint.max(self.len()));
        for e in self.iter() {
            e.with_bytes(|b| d.insert_new(b.into()));
        }
        *self = Set::Table(Box::new(d));
    }
}

impl PartialEq for Set {
    /// Same members, whatever the encodings.
    fn eq(&self, other: &Set) -> bool {
        self.len() == other.len() && self.iter().all(|e| other.contains_elem(e))
    }
}

/// The members of a [`Set`].
pub enum Iter<'a> {
    /// Over an intset, from a position.
    Ints(&'a IntSet, usize),
    /// Over a packed set.
    Packed(super::packed::Iter<'a>),
    /// Over a table.
    Table(std::slice::Iter<'a, Member>),
}

impl<'a> Iterator for Iter<'a> {
    type Item = Elem<'a>;

    fn next(&mut self) -> Option<Elem<'a>> {
        match self {
            Iter::Ints(s, i) => {
                let v = (*i < s.len()).then(|| s.get(*i))?;
                *i += 1;
                Some(Elem::Int(v))
            }
            Iter::Packed(it) => it.next(),
            Iter::Table(it) => it.next().map(|m| Elem::Str(m)),
        }
    }
}

/// Members of a set by position (see [`Set::indexed`]).
pub struct Indexed<'a> {
    set: &'a Set,
    offsets: Vec<u32>,
}

impl<'a> Indexed<'a> {
    /// The `i`th member, `i < len()`.
    pub fn get(&self, i: usize) -> Elem<'a> {
        match self.set {
            Set::Ints(s) => Elem::Int(s.get(i)),
            Set::Packed(p) => p.at(self.offsets[i] as usize).0,
            Set::Table(d) => Elem::Str(d.at(i)),
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.set.len()
    }

    /// Whether there is no member.
    pub fn is_empty(&self) -> bool {
        self.set.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: SetLimits = SetLimits { intset_entries: 4, listpack_entries: 3, listpack_value: 5 };

    fn members(s: &Set) -> Vec<Vec<u8>> {
        let mut v: Vec<Vec<u8>> = s.iter().map(Elem::to_vec).collect();
        v.sort();
        v
    }

    fn build(items: &[&str], limits: SetLimits) -> Set {
        let mut s = Set::for_first(items[0].as_bytes(), items.len(), limits);
        for m in items {
            s.add(m.as_bytes(), limits);
        }
        s
    }

    #[test]
    fn creation_follows_set_type_create() {
        assert_eq!(Set::for_first(b"1", 4, SMALL).encoding(), "intset");
        assert_eq!(Set::for_first(b"1", 5, SMALL).encoding(), "hashtable");
        assert_eq!(Set::for_first(b"a", 3, SMALL).encoding(), "listpack");
        assert_eq!(Set::for_first(b"a", 4, SMALL).encoding(), "hashtable");
        assert_eq!(Set::for_first(b"01", 1, SMALL).encoding(), "listpack", "not a canonical integer");
    }

    #[test]
    fn intset_converts_to_listpack_or_table() {
        let mut s = build(&["1", "2"], SMALL);
        assert_eq!(s.encoding(), "intset");
        assert!(s.add(b"abc", SMALL));
        assert_eq!((s.encoding(), members(&s)), ("listpack", vec![b"1".to_vec(), b"2".to_vec(), b"abc".to_vec()]));

        let mut s = build(&["1", "2", "3"], SMALL);
        s.add(b"abc", SMALL);
        assert_eq!(s.encoding(), "hashtable", "three members already fill the listpack limit");

        let mut s = build(&["1", "123456"], SMALL);
        s.add(b"a", SMALL);
        assert_eq!(s.encoding(), "hashtable", "an integer's digits exceed the listpack value limit");

        let mut s = build(&["1", "2", "3", "4"], SMALL);
        assert_eq!(s.encoding(), "intset");
        s.add(b"5", SMALL);
        assert_eq!((s.encoding(), s.len()), ("hashtable", 5));
        assert!(s.contains(b"5") && !s.add(b"5", SMALL));
    }

    #[test]
    fn listpack_converts_on_count_or_length() {
        let mut s = build(&["a", "b", "c"], SMALL);
        assert_eq!(s.encoding(), "listpack");
        assert!(!s.add(b"a", SMALL));
        s.add(b"d", SMALL);
        assert_eq!(s.encoding(), "hashtable");
        let mut s = build(&["a"], SMALL);
        s.add(b"abcdef", SMALL);
        assert_eq!((s.encoding(), s.len()), ("hashtable", 2));
        assert!(s.remove(b"abcdef") && s.remove(b"a") && s.is_empty());
        s.add(b"x", SMALL);
        assert_eq!(s.encoding(), "hashtable", "never back");
    }

    #[test]
    fn membership_across_encodings() {
        for items in [&["1", "-7", "300000"][..], &["a", "1", "b"], &["x", "y", "z", "w", "1"]] {
            let mut s = build(items, SMALL);
            for m in items {
                assert!(s.contains(m.as_bytes()), "{m} in {}", s.encoding());
            }
            assert!(!s.contains(b"nope") && !s.contains(b"01"));
            assert!(s.remove(items[0].as_bytes()) && !s.contains(items[0].as_bytes()));
        }
    }

    #[test]
    fn pops_remove_what_they_return() {
        for items in [&["1", "2", "3", "4"][..], &["a", "b", "c"], &["a", "b", "c", "d", "e", "f"]] {
            let mut s = build(items, SMALL);
            let enc = s.encoding();
            let one = s.pop_random().unwrap();
            assert!(!s.contains(&one));
            let more = s.pop_many(s.len() - 1, SMALL);
            assert_eq!(s.len(), 1, "{enc}");
            assert!(more.iter().all(|m| !s.contains(m) && *m != one));
            assert_eq!(s.encoding(), enc, "popping keeps the encoding");
        }
    }

    #[test]
    fn loading_and_intset_conversion() {
        let m = |v: &[&str]| v.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
        assert!(Set::from_members(&m(&["a", "a"])).is_none());
        let mut s = Set::from_members(&m(&["3", "1", "2", "9", "8"])).unwrap();
        assert_eq!(s.encoding(), "intset");
        s.conform(SMALL);
        assert_eq!(s.encoding(), "hashtable");
        let copy = s.clone();
        s.make_intset(SetLimits::UNBOUNDED);
        assert_eq!((s.encoding(), &s), ("intset", &copy));
        let mut s = Set::from_members(&m(&["abcdef"])).unwrap();
        s.conform(SMALL);
        assert_eq!(s.encoding(), "hashtable");
    }

    #[test]
    fn a_hundred_member_set_costs_what_valkey_pays() {
        let words: Vec<String> = (10_000..10_100).map(|i| format!("member:{i}")).collect();
        let s = Set::from_members(&words.iter().map(|w| w.clone().into_bytes()).collect::<Vec<_>>()).unwrap();
        // 100 x (1 + 12) = 1300 bytes, a 1536-byte class; Valkey's listpack is 1407 bytes
        // (back-lengths, header), the same class.
        assert_eq!((s.encoding(), s.heap_bytes()), ("listpack", 1536));
        let ints: Vec<Vec<u8>> = (0..100).map(|i: i64| (i * 7).to_string().into_bytes()).collect();
        let s = Set::from_members(&ints).unwrap();
        // 100 x 2 bytes; Valkey's intset adds an 8-byte header: 208 bytes, the same class.
        assert_eq!((s.encoding(), s.heap_bytes()), ("intset", 224));
        // As a table the same hundred strings cost about what Valkey's dict does: 16 bytes per
        // slot of the dense vector, 8 per index bucket, and each member's own allocation.
        let mut t = Set::from_members(&words.iter().map(|w| w.clone().into_bytes()).collect::<Vec<_>>()).unwrap();
        t.conform(SetLimits { intset_entries: 0, listpack_entries: 0, listpack_value: 0 });
        assert_eq!(t.encoding(), "hashtable");
        assert!(t.heap_bytes() < 100 * 48 + 2048 + 1024 + 64, "{}", t.heap_bytes());
    }
}
