//! The sorted set type: a listpack of (member, score) pairs in order while small, a skip
//! list with a member index once it passes `zset-max-listpack-entries` members or a member
//! longer than `zset-max-listpack-value` bytes arrives (Valkey's `t_zset.c`).
//!
//! Every query is expressed in ranks: a score or lex bound becomes "how many members come
//! before it" ([`ZSet::count_before`], O(log N) in the skip list), and ranges are read and
//! removed by rank. Commands therefore never care which encoding they face.

use super::listpack::Listpack;
use super::lpentry::Elem;
use super::skiplist::SkipList;

/// A sorted set value.
#[derive(Debug, Clone, PartialEq)]
pub enum ZSet {
    /// Pairs of member and score, sorted (OBJECT ENCODING `listpack`).
    Packed(Listpack),
    /// A skip list plus member index (OBJECT ENCODING `skiplist`).
    Skip(Box<SkipList>),
}

/// The conversion thresholds (`zset-max-listpack-entries`, `zset-max-listpack-value`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most members a listpack holds.
    pub max_entries: usize,
    /// Longest member a listpack holds.
    pub max_value: usize,
}

/// A listpack may not grow past 1 GiB (`lpSafeToAdd`).
const LISTPACK_SAFETY_SIZE: usize = 1 << 30;

impl ZSet {
    /// An empty set in the encoding Valkey picks for `size_hint` members of at most
    /// `max_len` bytes (`zsetTypeCreate`).
    pub fn new(size_hint: usize, max_len: usize, limits: Limits) -> ZSet {
        if size_hint <= limits.max_entries && max_len <= limits.max_value {
            ZSet::Packed(Listpack::new())
        } else {
            ZSet::Skip(Box::default())
        }
    }

    /// Builds a set from members sorted by (score, member), without duplicates.
    pub fn from_sorted(items: &[(Vec<u8>, f64)], limits: Limits) -> ZSet {
        let max_len = items.iter().map(|(m, _)| m.len()).max().unwrap_or(0);
        let total: usize = items.iter().map(|(m, _)| m.len()).sum();
        let mut z = ZSet::new(items.len(), max_len, limits);
        if total > LISTPACK_SAFETY_SIZE {
            z = ZSet::Skip(Box::default());
        }
        match &mut z {
            ZSet::Packed(lp) => {
                for (m, s) in items {
                    lp.push_back(m);
                    append_score(lp, *s);
                }
            }
            ZSet::Skip(sl) => {
                for (m, s) in items {
                    sl.insert(m.clone().into_boxed_slice(), *s);
                }
            }
        }
        z
    }

    /// Whether a listpack read from an RDB file or a DUMP payload can serve as a sorted set
    /// as it is: (member, score) pairs with numeric scores, in the order this type keeps (by
    /// score, then member), no member twice. Redis and Valkey write them so; anything else
    /// takes the slow path that sorts or refuses it.
    pub fn listpack_in_order(lp: &Listpack) -> bool {
        if !lp.len().is_multiple_of(2) || lp.is_empty() {
            return false;
        }
        let bytes_cmp = |a: &Elem<'_>, b: &Elem<'_>| a.with_bytes(|x| b.with_bytes(|y| x.cmp(y)));
        // Repeated members, found with an open-addressing table of member indexes (at most
        // half full): sorting the members instead cost more than the rest of the load.
        let pairs = lp.len() / 2;
        let slots = (pairs * 2).next_power_of_two();
        let mut seen = vec![u32::MAX; slots];
        let mut members = Vec::with_capacity(pairs);
        let mut prev: Option<(Elem<'_>, f64)> = None;
        let mut it = lp.iter();
        while let (Some(m), Some(s)) = (it.next(), it.next()) {
            let score = match s {
                Elem::Int(i) => i as f64,
                Elem::Str(b"inf") => f64::INFINITY,
                Elem::Str(b"-inf") => f64::NEG_INFINITY,
                Elem::Str(b) => match hotkv_protocol::parse_double(b) {
                    Some(d) => d,
                    None => return false,
                },
            };
            if score.is_nan() {
                return false;
            }
            if let Some((pm, ps)) = prev
                && !(ps < score || (ps == score && bytes_cmp(&pm, &m).is_lt()))
            {
                return false;
            }
            prev = Some((m, score));
            let mut at = m.with_bytes(crate::hash::key_hash) as usize & (slots - 1);
            while let Some(&i) = seen.get(at).filter(|&&i| i != u32::MAX) {
                if bytes_cmp(&members[i as usize], &m).is_eq() {
                    return false;
                }
                at = (at + 1) & (slots - 1);
            }
            seen[at] = members.len() as u32;
            members.push(m);
        }
        true
    }

    /// A sorted set from a listpack [`ZSet::listpack_in_order`] accepted, kept as it is when
    /// it fits `limits` (no re-encoding), else converted as ZADD would have.
    pub fn from_ordered_listpack(lp: Listpack, limits: Limits) -> ZSet {
        let fits = lp.len() / 2 <= limits.max_entries && lp.iter().step_by(2).all(|m| m.str_len() <= limits.max_value);
        if fits {
            return ZSet::Packed(lp);
        }
        let mut sl = Box::<SkipList>::default();
        let mut it = lp.iter();
        while let (Some(m), Some(s)) = (it.next(), it.next()) {
            sl.insert(m.to_vec().into_boxed_slice(), lp_score(s));
        }
        ZSet::Skip(sl)
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        match self {
            ZSet::Packed(lp) => lp.len() / 2,
            ZSet::Skip(s) => s.len(),
        }
    }

    /// Whether the set is empty (it is then deleted by the caller).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        match self {
            ZSet::Packed(_) => "listpack",
            ZSet::Skip(_) => "skiplist",
        }
    }

    /// Heap bytes, in allocator size classes.
    pub fn heap_size(&self) -> usize {
        use crate::object::size_class;
        match self {
            ZSet::Packed(lp) => size_class(lp.capacity()),
            ZSet::Skip(s) => size_class(std::mem::size_of::<SkipList>()) + s.heap_size(),
        }
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        match self {
            ZSet::Packed(lp) => lp_find(lp, member).map(|(_, s)| s),
            ZSet::Skip(s) => s.score(member),
        }
    }

    /// Converts a listpack to a skip list when a write of `size_hint` members of up to
    /// `max_len` bytes will not fit (`zsetTypeMaybeConvert`).
    pub fn maybe_convert(&mut self, size_hint: usize, max_len: usize, limits: Limits) {
        if matches!(self, ZSet::Packed(_)) && (size_hint > limits.max_entries || max_len > limits.max_value) {
            self.convert_to_skiplist();
        }
    }

    /// Adds a member that is not present, converting to a skip list when it does not fit.
    pub fn insert(&mut self, member: &[u8], score: f64, limits: Limits) {
        if let ZSet::Packed(lp) = self
            && (lp.len() / 2 + 1 > limits.max_entries
                || member.len() > limits.max_value
                || lp.bytes() + member.len() > LISTPACK_SAFETY_SIZE)
        {
            self.convert_to_skiplist();
        }
        match self {
            ZSet::Packed(lp) => lp_insert(lp, member, score),
            ZSet::Skip(s) => s.insert(Box::from(member), score),
        }
    }

    /// Changes the score of a present member.
    pub fn update(&mut self, member: &[u8], score: f64) {
        match self {
            ZSet::Packed(lp) => {
                if let Some((p, _)) = lp_find(lp, member) {
                    lp.delete_many(p, 2);
                    lp_insert(lp, member, score);
                }
            }
            ZSet::Skip(s) => s.update_score(member, score),
        }
    }

    /// Removes `member`; returns whether it was present.
    pub fn remove(&mut self, member: &[u8]) -> bool {
        match self {
            ZSet::Packed(lp) => match lp_find(lp, member) {
                Some((p, _)) => {
                    lp.delete_many(p, 2);
                    true
                }
                None => false,
            },
            ZSet::Skip(s) => s.remove(member).is_some(),
        }
    }

    /// 0-based rank of `member` (ascending) and its score.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        match self {
            ZSet::Packed(lp) => {
                let mut r = 0;
                let mut p = lp.first();
                while let Some(m) = p {
                    let sp = lp.next(m)?;
                    if lp.get(m).eq_bytes(member) {
                        return Some((r, lp_score(lp.get(sp))));
                    }
                    r += 1;
                    p = lp.next(sp);
                }
                None
            }
            ZSet::Skip(s) => s.rank(member),
        }
    }

    /// How many members satisfy `before`, which must hold for a prefix of the order.
    pub fn count_before(&self, before: impl Fn(f64, &[u8]) -> bool) -> usize {
        match self {
            ZSet::Packed(lp) => {
                let mut n = 0;
                let mut p = lp.first();
                while let Some(m) = p {
                    let Some(sp) = lp.next(m) else { break };
                    if !lp.get(m).with_bytes(|b| before(lp_score(lp.get(sp)), b)) {
                        break;
                    }
                    n += 1;
                    p = lp.next(sp);
                }
                n
            }
            ZSet::Skip(s) => s.count_before(before),
        }
    }

    /// Up to `n` members from 0-based rank `start`, ascending, or descending from `start`
    /// when `rev`.
    pub fn range(&self, start: usize, n: usize, rev: bool) -> Vec<(Elem<'_>, f64)> {
        let mut out = Vec::with_capacity(n.min(self.len()));
        if start >= self.len() {
            return out;
        }
        match self {
            ZSet::Packed(lp) => {
                let mut p = lp.seek(2 * start as i64);
                while let Some(m) = p {
                    if out.len() == n {
                        break;
                    }
                    let Some(sp) = lp.next(m) else { break };
                    out.push((lp.get(m), lp_score(lp.get(sp))));
                    p = if rev { lp.prev(m).and_then(|s| lp.prev(s)) } else { lp.next(sp) };
                }
            }
            ZSet::Skip(s) => out.extend(s.range(start, n, rev).into_iter().map(|(m, sc)| (Elem::Str(m), sc))),
        }
        out
    }

    /// Every member in order, with its score.
    pub fn iter(&self) -> Vec<(Elem<'_>, f64)> {
        self.range(0, self.len(), false)
    }

    /// Removes `n` members from 0-based rank `start`; returns how many it removed.
    pub fn remove_range(&mut self, start: usize, n: usize) -> usize {
        let n = n.min(self.len().saturating_sub(start));
        if n == 0 {
            return 0;
        }
        match self {
            ZSet::Packed(lp) => {
                if let Some(p) = lp.seek(2 * start as i64) {
                    lp.delete_many(p, 2 * n);
                }
            }
            ZSet::Skip(s) => {
                s.remove_range(start, n);
            }
        }
        n
    }

    /// Converts a skip list back to a listpack when it fits (`zsetConvertToListpackIfNeeded`,
    /// used for the results of store commands).
    pub fn compact_if_small(&mut self, limits: Limits) {
        let ZSet::Skip(s) = self else { return };
        let (mut max_len, mut total) = (0, 0);
        for (m, _) in s.iter() {
            max_len = max_len.max(m.len());
            total += m.len();
        }
        if s.len() <= limits.max_entries && max_len <= limits.max_value && total <= LISTPACK_SAFETY_SIZE {
            let mut lp = Listpack::new();
            for (m, sc) in s.iter() {
                lp.push_back(m);
                append_score(&mut lp, sc);
            }
            *self = ZSet::Packed(lp);
        }
    }

    fn convert_to_skiplist(&mut self) {
        let ZSet::Packed(lp) = self else { return };
        let mut s = SkipList::new();
        let mut p = lp.first();
        while let Some(m) = p {
            let Some(sp) = lp.next(m) else { break };
            s.insert(lp.get(m).to_vec().into_boxed_slice(), lp_score(lp.get(sp)));
            p = lp.next(sp);
        }
        *self = ZSet::Skip(Box::new(s));
    }
}

/// Reads a score entry: an integer, or a string in `d2string` form (`zzlGetScore`).
pub fn lp_score(v: Elem<'_>) -> f64 {
    match v {
        Elem::Int(i) => i as f64,
        Elem::Str(s) => std::str::from_utf8(s).ok().and_then(|t| t.parse().ok()).unwrap_or(0.0),
    }
}

/// Inserts a score entry formatted as Valkey does (`d2string`), so integral scores become
/// listpack integers.
fn push_score(lp: &mut Listpack, at: usize, score: f64) {
    let mut buf = Vec::with_capacity(24);
    hotkv_protocol::format_double(score, &mut buf);
    lp.insert(at, &buf);
}

/// Offset of `member`'s entry and its score.
fn lp_find(lp: &Listpack, member: &[u8]) -> Option<(usize, f64)> {
    let mut p = lp.first();
    while let Some(m) = p {
        let sp = lp.next(m)?;
        if lp.get(m).eq_bytes(member) {
            return Some((m, lp_score(lp.get(sp))));
        }
        p = lp.next(sp);
    }
    None
}

/// Inserts a pair before the first element that sorts after it (`zzlInsert`).
fn lp_insert(lp: &mut Listpack, member: &[u8], score: f64) {
    let mut p = lp.first();
    while let Some(m) = p {
        let Some(sp) = lp.next(m) else { break };
        let s = lp_score(lp.get(sp));
        if s > score || (s == score && lp.get(m).with_bytes(|b| b > member)) {
            push_score(lp, m, score);
            lp.insert(m, member);
            return;
        }
        p = lp.next(sp);
    }
    lp.push_back(member);
    append_score(lp, score);
}

fn append_score(lp: &mut Listpack, score: f64) {
    let end = lp.end();
    push_score(lp, end, score);
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_entries: 128, max_value: 64 };

    fn members(z: &ZSet) -> Vec<(String, f64)> {
        z.iter().into_iter().map(|(m, s)| (String::from_utf8(m.to_vec()).unwrap(), s)).collect()
    }

    #[test]
    fn both_encodings_agree() {
        let mut a = ZSet::new(0, 0, LIMITS);
        let mut b = ZSet::Skip(Box::default());
        for i in 0..100 {
            let m = format!("{}", (i * 37) % 50);
            let s = ((i * 13) % 7) as f64 - 2.5;
            for z in [&mut a, &mut b] {
                match z.score(m.as_bytes()) {
                    Some(_) if i % 3 == 0 => {
                        z.remove(m.as_bytes());
                    }
                    Some(_) => z.update(m.as_bytes(), s),
                    None => z.insert(m.as_bytes(), s, LIMITS),
                }
            }
        }
        assert_eq!(a.encoding(), "listpack");
        assert_eq!(members(&a), members(&b));
        let m = members(&a);
        for (r, (name, s)) in m.iter().enumerate() {
            assert_eq!(a.rank(name.as_bytes()), Some((r, *s)));
            assert_eq!(b.rank(name.as_bytes()), Some((r, *s)));
        }
        let before = |s: f64, _: &[u8]| s < 0.0;
        assert_eq!(a.count_before(before), b.count_before(before));
        let ra: Vec<_> = a.range(3, 4, true).iter().map(|(m, s)| (m.to_vec(), *s)).collect();
        let rb: Vec<_> = b.range(3, 4, true).iter().map(|(m, s)| (m.to_vec(), *s)).collect();
        assert_eq!(ra, rb);
        assert_eq!(a.remove_range(2, 5), 5);
        assert_eq!(b.remove_range(2, 5), 5);
        assert_eq!(members(&a), members(&b));
    }

    #[test]
    fn converts_at_thresholds() {
        let mut z = ZSet::new(1, 1, LIMITS);
        for i in 0..128 {
            z.insert(format!("m{i}").as_bytes(), i as f64, LIMITS);
        }
        assert_eq!(z.encoding(), "listpack");
        z.insert(b"one-more", 0.0, LIMITS);
        assert_eq!(z.encoding(), "skiplist");
        let mut z = ZSet::new(1, 1, LIMITS);
        z.insert(&[b'x'; 64], 1.0, LIMITS);
        assert_eq!(z.encoding(), "listpack");
        z.insert(&[b'x'; 65], 1.0, LIMITS);
        assert_eq!(z.encoding(), "skiplist");
        z.remove(&[b'x'; 65]);
        z.compact_if_small(LIMITS);
        assert_eq!(z.encoding(), "listpack");
        assert_eq!(z.len(), 1);
    }

    #[test]
    fn scores_are_stored_as_valkey_formats_them() {
        let mut z = ZSet::new(0, 0, LIMITS);
        z.insert(b"a", 1.0, LIMITS);
        z.insert(b"b", 1.5, LIMITS);
        z.insert(b"c", f64::INFINITY, LIMITS);
        let ZSet::Packed(lp) = &z else { panic!() };
        let raw: Vec<Elem<'_>> = lp.iter().collect();
        assert_eq!(raw[1], Elem::Int(1));
        assert_eq!(raw[3], Elem::Str(b"1.5"));
        assert_eq!(raw[5], Elem::Str(b"inf"));
        assert_eq!(z.score(b"c"), Some(f64::INFINITY));
    }
}
