//! Valkey's stream: entries with increasing ids, stored as Valkey stores them.
//!
//! The entries live in nodes, each a [`Listpack`] in exactly the layout of Valkey's
//! `t_stream.c`, kept in a sorted map by the id of the node's *master entry* (Valkey's radix
//! tree keyed by the 128-bit big-endian id). A node starts with the master entry:
//!
//! ```text
//! count | deleted | num-fields | field_1 ... field_N | 0
//! ```
//!
//! then one run of listpack elements per entry, ids delta-encoded against the master id:
//!
//! ```text
//! flags | ms-diff | seq-diff | [num-fields | field_1 |] value_1 ... | lp-count
//! ```
//!
//! where the field names are left out (the SAMEFIELDS flag) when they are the master entry's.
//! Deleted entries stay in place with the DELETED flag until their whole node goes, as in
//! Valkey; this keeps DUMP payloads and RDB files byte for byte what Valkey writes for the
//! same history of commands.
//!
//! Cost per entry: its values (and field names when they differ from the node's first entry)
//! with one to five bytes of listpack framing each, plus about eight bytes of flags, id deltas
//! and lp-count, an id within 127 ms of its node's master id costing one byte per delta;
//! a node (100 entries by default, `stream-node-max-entries`) adds its master entry and one
//! map slot (two ids and a listpack handle, about 48 bytes), under a byte per entry. An entry
//! `XADD s * item 1` costs 8 bytes, as in Valkey. Measured: 200,000 `XADD s <id> item <n>`
//! grow `used_memory` by 16.0 bytes per entry here and by 20.9 on redis-server 7.0, whose
//! node listpacks keep spare room from their preallocation.

use std::collections::BTreeMap;
use std::fmt;

use super::listpack::Listpack;
use super::lpentry::Elem;

/// A stream entry id, `<ms>-<seq>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct StreamId {
    /// Milliseconds part.
    pub ms: u64,
    /// Sequence part.
    pub seq: u64,
}

impl StreamId {
    /// `0-0`.
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    /// The largest id.
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    /// A new id.
    pub const fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    /// The next id, `None` past the largest (`streamIncrID`).
    pub fn incr(self) -> Option<StreamId> {
        match (self.seq.checked_add(1), self.ms.checked_add(1)) {
            (Some(seq), _) => Some(StreamId::new(self.ms, seq)),
            (None, Some(ms)) => Some(StreamId::new(ms, 0)),
            (None, None) => None,
        }
    }

    /// The previous id, `None` before `0-0` (`streamDecrID`).
    pub fn decr(self) -> Option<StreamId> {
        match (self.seq.checked_sub(1), self.ms.checked_sub(1)) {
            (Some(seq), _) => Some(StreamId::new(self.ms, seq)),
            (None, Some(ms)) => Some(StreamId::new(ms, u64::MAX)),
            (None, None) => None,
        }
    }

    /// Whether this is `0-0`.
    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// The 128-bit big-endian form (radix tree keys, RDB, PEL entries).
    pub fn to_be_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&self.ms.to_be_bytes());
        b[8..].copy_from_slice(&self.seq.to_be_bytes());
        b
    }

    /// Reads the 128-bit big-endian form.
    pub fn from_be_bytes(b: &[u8]) -> Option<StreamId> {
        if b.len() != 16 {
            return None;
        }
        let ms = u64::from_be_bytes(b[..8].try_into().ok()?);
        let seq = u64::from_be_bytes(b[8..].try_into().ok()?);
        Some(StreamId::new(ms, seq))
    }

    /// The id as Valkey writes it.
    pub fn to_bytes(self) -> Vec<u8> {
        self.to_string().into_bytes()
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Entry flag: the entry was deleted.
pub const FLAG_DELETED: i64 = 1;
/// Entry flag: the entry has the master entry's fields, which it leaves out.
pub const FLAG_SAMEFIELDS: i64 = 2;

/// Valkey's `STREAM_LISTPACK_MAX_SIZE`: no node grows past 1 GiB.
const LISTPACK_MAX_SIZE: usize = 1 << 30;

/// A stream's entries and counters (consumer groups are [`crate::types::stream_group`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Stream {
    nodes: BTreeMap<StreamId, Listpack>,
    length: u64,
    /// Id of the last entry ever added (or set by XSETID).
    pub last_id: StreamId,
    /// Id of the first live entry, `0-0` when empty.
    pub first_id: StreamId,
    /// Largest id ever deleted by XDEL (or set by XSETID).
    pub max_deleted: StreamId,
    /// Entries ever added.
    pub entries_added: u64,
    /// Consumer groups by name.
    pub groups: BTreeMap<Vec<u8>, crate::types::stream_group::Group>,
}

/// One entry, borrowed from its node.
#[derive(Debug, Clone)]
pub struct Entry<'a> {
    /// Its id.
    pub id: StreamId,
    /// Field/value pairs.
    pub fields: Vec<(Elem<'a>, Elem<'a>)>,
}

/// Trimming of XADD and XTRIM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Trim {
    /// Keep at most this many entries.
    MaxLen(u64),
    /// Drop entries below this id.
    MinId(StreamId),
}

/// Where an entry sits in a node: the positions needed to read or flag it.
#[derive(Debug, Clone, Copy)]
struct Slot {
    id: StreamId,
    flags: i64,
    /// Offset of the flags element.
    at: usize,
    /// Offset of the first element after the entry, `None` at the end of the node.
    next: Option<usize>,
}

impl Stream {
    /// An empty stream.
    pub fn new() -> Stream {
        Stream::default()
    }

    /// Live entries.
    pub fn len(&self) -> u64 {
        self.length
    }

    /// Whether there are no live entries.
    pub fn is_empty(&self) -> bool {
        self.length == 0
    }

    /// Nodes (`radix-tree-keys`).
    pub fn node_count(&self) -> usize {
        self.nodes.len()
    }

    /// The nodes, by master id (RDB and DUMP).
    pub fn nodes(&self) -> impl Iterator<Item = (&StreamId, &Listpack)> {
        self.nodes.iter()
    }

    /// Heap bytes of the entries (MEMORY USAGE, eviction).
    pub fn heap_size(&self) -> usize {
        let nodes: usize = self.nodes.values().map(|lp| crate::object::size_class(lp.capacity().max(1))).sum();
        let groups: usize = self.groups.iter().map(|(n, g)| n.len() + g.heap_size()).sum();
        nodes + self.nodes.len() * 48 + groups + 64
    }

    /// Appends an entry with id `id`, which must be above [`Stream::last_id`]. `node_bytes`
    /// and `node_entries` are `stream-node-max-bytes` and `stream-node-max-entries`.
    pub fn append(&mut self, id: StreamId, fields: &[(&[u8], &[u8])], node_bytes: usize, node_entries: usize) {
        let tot: usize = fields.iter().map(|(f, v)| f.len() + v.len()).sum();
        let max_bytes = if node_bytes == 0 || node_bytes > LISTPACK_MAX_SIZE { LISTPACK_MAX_SIZE } else { node_bytes };
        let mut reuse = None;
        if let Some((&master, lp)) = self.nodes.iter().next_back() {
            let (count, deleted) = counts(lp);
            let full =
                lp.bytes() + tot >= max_bytes || (node_entries > 0 && (count + deleted) as usize >= node_entries);
            if !full {
                reuse = Some(master);
            }
        }
        let mut flags = 0;
        let master = match reuse {
            None => {
                let mut lp = Listpack::new();
                push_int(&mut lp, 1);
                push_int(&mut lp, 0);
                push_int(&mut lp, fields.len() as i64);
                for (f, _) in fields {
                    lp.push_back(f);
                }
                push_int(&mut lp, 0);
                self.nodes.insert(id, lp);
                flags |= FLAG_SAMEFIELDS;
                id
            }
            Some(master) => {
                let lp = self.nodes.get_mut(&master).expect("node just found");
                let (count, _) = counts(lp);
                let p = lp.first().expect("node has a master entry");
                replace_int(lp, p, count + 1);
                if same_fields(lp, fields) {
                    flags |= FLAG_SAMEFIELDS;
                }
                master
            }
        };
        let lp = self.nodes.get_mut(&master).expect("node exists");
        push_int(lp, flags);
        push_int(lp, id.ms.wrapping_sub(master.ms) as i64);
        push_int(lp, id.seq.wrapping_sub(master.seq) as i64);
        let same = flags & FLAG_SAMEFIELDS != 0;
        if !same {
            push_int(lp, fields.len() as i64);
        }
        for (f, v) in fields {
            if !same {
                lp.push_back(f);
            }
            lp.push_back(v);
        }
        let lp_count = fields.len() as i64 + 3 + if same { 0 } else { fields.len() as i64 + 1 };
        push_int(lp, lp_count);
        self.length += 1;
        self.entries_added += 1;
        self.last_id = id;
        if self.length == 1 {
            self.first_id = id;
        }
    }

    /// Calls `f` on each live entry from `start` to `end` (inclusive), in order or reversed,
    /// until it returns false.
    pub fn range<'s>(&'s self, start: StreamId, end: StreamId, rev: bool, mut f: impl FnMut(Entry<'s>) -> bool) {
        if start > end {
            return;
        }
        if !rev {
            let from = self.nodes.range(..=start).next_back().map_or(start, |(k, _)| *k);
            for (master, lp) in self.nodes.range(from..) {
                if *master > end {
                    return;
                }
                for s in slots(*master, lp) {
                    if s.id > end {
                        return;
                    }
                    if s.id >= start && s.flags & FLAG_DELETED == 0 && !f(read_entry(*master, lp, s)) {
                        return;
                    }
                }
            }
        } else {
            for (master, lp) in self.nodes.range(..=end).rev() {
                let all: Vec<Slot> = slots(*master, lp).collect();
                for s in all.into_iter().rev() {
                    if s.id < start {
                        return;
                    }
                    if s.id <= end && s.flags & FLAG_DELETED == 0 && !f(read_entry(*master, lp, s)) {
                        return;
                    }
                }
            }
        }
    }

    /// The live entry with id `id`.
    pub fn get(&self, id: StreamId) -> Option<Entry<'_>> {
        let mut found = None;
        self.range(id, id, false, |e| {
            found = Some(e);
            false
        });
        found
    }

    /// Whether a live entry has id `id`.
    pub fn contains(&self, id: StreamId) -> bool {
        self.get(id).is_some()
    }

    /// The first (or last) live entry's id (`streamGetEdgeID`).
    pub fn edge_id(&self, first: bool) -> Option<StreamId> {
        let mut found = None;
        self.range(StreamId::MIN, StreamId::MAX, !first, |e| {
            found = Some(e.id);
            false
        });
        found
    }

    /// Flags the entry `id` deleted (XDEL); false if there is no such live entry. Does not
    /// touch `max_deleted` or `first_id`: the caller does, as XDEL does.
    pub fn delete(&mut self, id: StreamId) -> bool {
        let Some((&master, lp)) = self.nodes.range(..=id).next_back() else { return false };
        let Some(s) = slots(master, lp).find(|s| s.id == id) else { return false };
        if s.flags & FLAG_DELETED != 0 {
            return false;
        }
        let (count, deleted) = counts(lp);
        if count == 1 {
            self.nodes.remove(&master);
        } else {
            let lp = self.nodes.get_mut(&master).expect("node exists");
            replace_int(lp, s.at, s.flags | FLAG_DELETED);
            set_counts(lp, count - 1, deleted + 1);
        }
        self.length -= 1;
        true
    }

    /// Refreshes `first_id` after entries were removed.
    pub fn refresh_first(&mut self) {
        self.first_id = if self.length == 0 { StreamId::MIN } else { self.edge_id(true).unwrap_or_default() };
    }

    /// Removes entries from the head (`streamTrim`): whole nodes only when `approx`, at most
    /// `limit` entries when `limit` is not 0. Returns how many went.
    pub fn trim(&mut self, trim: Trim, approx: bool, limit: u64) -> u64 {
        let mut removed = 0u64;
        loop {
            if let Trim::MaxLen(max) = trim
                && self.length <= max
            {
                break;
            }
            let Some((&master, lp)) = self.nodes.iter().next() else { break };
            let (entries, marked) = counts(lp);
            let entries = entries as u64;
            if limit != 0 && removed + entries > limit {
                break;
            }
            let whole = match trim {
                Trim::MaxLen(max) => self.length - entries >= max,
                Trim::MinId(min) => slots(master, lp).last().is_none_or(|s| s.id < min),
            };
            if whole {
                self.nodes.remove(&master);
                self.length -= entries;
                removed += entries;
                continue;
            }
            if approx {
                break;
            }
            let all: Vec<Slot> = slots(master, lp).collect();
            let lp = self.nodes.get_mut(&master).expect("node exists");
            let mut here = 0u64;
            for s in all {
                let stop = match trim {
                    Trim::MaxLen(max) => self.length <= max,
                    Trim::MinId(min) => s.id >= min,
                };
                if stop {
                    break;
                }
                if s.flags & FLAG_DELETED == 0 {
                    // The flag keeps its one-byte encoding, so later offsets do not move.
                    replace_int(lp, s.at, s.flags | FLAG_DELETED);
                    here += 1;
                    self.length -= 1;
                }
            }
            set_counts(lp, entries as i64 - here as i64, marked + here as i64);
            removed += here;
            break;
        }
        if self.length == 0 {
            self.first_id = StreamId::MIN;
        } else if removed > 0 {
            self.refresh_first();
        }
        removed
    }

    /// Adds a node read from an RDB file or a DUMP payload, already checked by
    /// [`check_node`]; `live` is its count of live entries.
    pub fn push_node(&mut self, master: StreamId, lp: Listpack, live: u64) {
        self.nodes.insert(master, lp);
        self.length += live;
    }

    /// Sets the entry count after loading (the RDB states it; it must match the nodes).
    pub fn loaded_len(&self) -> u64 {
        self.length
    }
}

/// Checks a node from outside (RDB, RESTORE) so that reading it later cannot fail: its master
/// entry, every entry's shape and lp-count, ids increasing from `after` (exclusive, `None`
/// for the first node) and not below the master id, and the counts. Returns (live entries,
/// last id in the node).
pub fn check_node(master: StreamId, lp: &Listpack, after: Option<StreamId>) -> Option<(u64, StreamId)> {
    let mut p = lp.first()?;
    let count = lp.get(p).as_int()?;
    p = lp.next(p)?;
    let deleted = lp.get(p).as_int()?;
    p = lp.next(p)?;
    let nfields = lp.get(p).as_int()?;
    if count < 0 || deleted < 0 || nfields < 0 {
        return None;
    }
    for _ in 0..nfields {
        p = lp.next(p)?;
    }
    p = lp.next(p)?;
    if lp.get(p).as_int()? != 0 {
        return None;
    }
    let mut next = lp.next(p);
    let (mut live, mut dead, mut last) = (0i64, 0i64, None::<StreamId>);
    while let Some(start) = next {
        let mut p = start;
        let flags = lp.get(p).as_int()?;
        if !(0..=3).contains(&flags) {
            return None;
        }
        p = lp.next(p)?;
        let ms = lp.get(p).as_int()?;
        p = lp.next(p)?;
        let seq = lp.get(p).as_int()?;
        let id = StreamId::new(master.ms.wrapping_add(ms as u64), master.seq.wrapping_add(seq as u64));
        if id < master || last.is_some_and(|l| id <= l) || after.is_some_and(|a| id <= a) {
            return None;
        }
        let n = if flags & FLAG_SAMEFIELDS != 0 {
            nfields
        } else {
            p = lp.next(p)?;
            let n = lp.get(p).as_int()?;
            if !(0..=1 << 30).contains(&n) {
                return None;
            }
            n * 2
        };
        for _ in 0..n {
            p = lp.next(p)?;
        }
        p = lp.next(p)?;
        let want = if flags & FLAG_SAMEFIELDS != 0 { nfields + 3 } else { n + 4 };
        if lp.get(p).as_int()? != want {
            return None;
        }
        if flags & FLAG_DELETED != 0 {
            dead += 1;
        } else {
            live += 1;
        }
        last = Some(id);
        next = lp.next(p);
    }
    (live == count && dead == deleted && live + dead > 0).then(|| (live as u64, last.unwrap_or(master)))
}

/// The master entry's (live, deleted) counts.
fn counts(lp: &Listpack) -> (i64, i64) {
    let p = lp.first().expect("node has a master entry");
    let count = lp.get(p).as_int().unwrap_or(0);
    let deleted = lp.next(p).and_then(|q| lp.get(q).as_int()).unwrap_or(0);
    (count, deleted)
}

fn set_counts(lp: &mut Listpack, count: i64, deleted: i64) {
    let p = lp.first().expect("node has a master entry");
    replace_int(lp, p, count);
    let q = lp.next(p).expect("node has a deleted count");
    replace_int(lp, q, deleted);
}

fn push_int(lp: &mut Listpack, n: i64) {
    lp.push_back(itoa::Buffer::new().format(n).as_bytes());
}

fn replace_int(lp: &mut Listpack, p: usize, n: i64) {
    lp.replace(p, itoa::Buffer::new().format(n).as_bytes());
}

/// Whether `fields` are the node's master fields, in order.
fn same_fields(lp: &Listpack, fields: &[(&[u8], &[u8])]) -> bool {
    let Some(p) = lp.first().and_then(|p| lp.next(p)).and_then(|p| lp.next(p)) else { return false };
    if lp.get(p).as_int() != Some(fields.len() as i64) {
        return false;
    }
    let mut p = p;
    for (f, _) in fields {
        let Some(q) = lp.next(p) else { return false };
        if !lp.get(q).eq_bytes(f) {
            return false;
        }
        p = q;
    }
    true
}

/// The master fields of a node and the offset of its first entry.
fn master_fields(lp: &Listpack) -> (Vec<Elem<'_>>, Option<usize>) {
    let mut p = lp.first().and_then(|p| lp.next(p)).and_then(|p| lp.next(p)).expect("master entry");
    let n = lp.get(p).as_int().unwrap_or(0);
    let mut fields = Vec::with_capacity(n.clamp(0, 64) as usize);
    for _ in 0..n {
        p = lp.next(p).expect("master field");
        fields.push(lp.get(p));
    }
    let term = lp.next(p).expect("master terminator");
    (fields, lp.next(term))
}

/// Walks a node's entries (live and deleted), front to back.
fn slots(master: StreamId, lp: &Listpack) -> impl Iterator<Item = Slot> + '_ {
    let (fields, first) = master_fields(lp);
    let nfields = fields.len();
    let mut next = first;
    std::iter::from_fn(move || {
        let at = next?;
        let flags = lp.get(at).as_int().unwrap_or(0);
        let mut p = lp.next(at)?;
        let ms = lp.get(p).as_int().unwrap_or(0);
        p = lp.next(p)?;
        let seq = lp.get(p).as_int().unwrap_or(0);
        let n = if flags & FLAG_SAMEFIELDS != 0 {
            nfields
        } else {
            p = lp.next(p)?;
            lp.get(p).as_int().unwrap_or(0) as usize * 2
        };
        for _ in 0..n {
            p = lp.next(p)?;
        }
        p = lp.next(p)?; // lp-count
        next = lp.next(p);
        let id = StreamId::new(master.ms.wrapping_add(ms as u64), master.seq.wrapping_add(seq as u64));
        Some(Slot { id, flags, at, next })
    })
}

/// Reads the fields of the entry at `s`.
fn read_entry<'a>(_master: StreamId, lp: &'a Listpack, s: Slot) -> Entry<'a> {
    let _ = s.next;
    let mut p = lp.next(lp.next(s.at).expect("ms")).expect("seq");
    let mut fields = Vec::new();
    if s.flags & FLAG_SAMEFIELDS != 0 {
        let (names, _) = master_fields(lp);
        for name in names {
            p = lp.next(p).expect("value");
            fields.push((name, lp.get(p)));
        }
    } else {
        p = lp.next(p).expect("num-fields");
        let n = lp.get(p).as_int().unwrap_or(0);
        for _ in 0..n {
            p = lp.next(p).expect("field");
            let f = lp.get(p);
            p = lp.next(p).expect("value");
            fields.push((f, lp.get(p)));
        }
    }
    Entry { id: s.id, fields }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ids(s: &Stream, rev: bool) -> Vec<String> {
        let mut v = Vec::new();
        s.range(StreamId::MIN, StreamId::MAX, rev, |e| {
            v.push(e.id.to_string());
            true
        });
        v
    }

    #[test]
    fn append_read_delete_trim() {
        let mut s = Stream::new();
        for i in 1..=250u64 {
            let v = i.to_string();
            let f: &[u8] = if i % 7 == 0 { b"other" } else { b"item" };
            s.append(StreamId::new(i, 0), &[(f, v.as_bytes())], 4096, 100);
        }
        assert_eq!((s.len(), s.node_count()), (250, 3));
        assert_eq!(ids(&s, false).len(), 250);
        assert_eq!(ids(&s, true)[0], "250-0");
        let e = s.get(StreamId::new(7, 0)).unwrap();
        assert_eq!(e.fields[0].0.to_vec(), b"other");
        assert_eq!(e.fields[0].1.to_vec(), b"7");
        assert!(s.delete(StreamId::new(7, 0)) && !s.delete(StreamId::new(7, 0)));
        assert!(!s.contains(StreamId::new(7, 0)));
        assert_eq!(s.len(), 249);
        assert_eq!(s.trim(Trim::MaxLen(200), true, 0), 0, "a whole node would leave too few");
        assert_eq!(s.trim(Trim::MaxLen(150), true, 0), 99);
        assert_eq!(s.first_id, StreamId::new(101, 0));
        assert_eq!(s.trim(Trim::MaxLen(10), false, 0), 140);
        assert_eq!(ids(&s, false).first().unwrap(), "241-0");
        assert_eq!(s.trim(Trim::MinId(StreamId::new(245, 0)), false, 0), 4);
        assert_eq!(s.len(), 6);
        for (m, lp) in s.nodes() {
            assert!(check_node(*m, lp, None).is_some());
        }
    }

    #[test]
    fn id_arithmetic() {
        assert_eq!(StreamId::new(1, u64::MAX).incr(), Some(StreamId::new(2, 0)));
        assert_eq!(StreamId::MAX.incr(), None);
        assert_eq!(StreamId::new(2, 0).decr(), Some(StreamId::new(1, u64::MAX)));
        assert_eq!(StreamId::MIN.decr(), None);
        let id = StreamId::new(5, 9);
        assert_eq!(StreamId::from_be_bytes(&id.to_be_bytes()), Some(id));
    }
}
