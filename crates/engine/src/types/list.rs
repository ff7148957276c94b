//! The list type: one listpack while small, a quicklist (a deque of listpack nodes) once it
//! outgrows `list-max-listpack-size`, as Valkey's `t_list.c` and `quicklist.c`.
//!
//! Both ends are O(1): a push or pop touches only the first or last node, and a node is at
//! most 8 KiB by default so shifting its bytes is cheap. Operations in the middle (LSET,
//! LINSERT, LREM) find their node by walking node counts from the nearer end, then edit that
//! node; a node that grows past the limit is split, neighbours that fit together are merged.
//! Compression (`list-compress-depth`) is not implemented: every node is stored plain.

use std::collections::VecDeque;

use super::listpack::{Listpack, encoded_size, walk};
use super::lpentry::{Elem, backlen_size, is_canonical};

/// A list value.
#[derive(Debug, Clone, PartialEq)]
pub enum List {
    /// A single listpack (OBJECT ENCODING `listpack`).
    Packed(Listpack),
    /// A quicklist (OBJECT ENCODING `quicklist`).
    Quick(Box<Quicklist>),
}

/// A deque of listpack nodes with the total element count.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Quicklist {
    nodes: VecDeque<Listpack>,
    len: usize,
}

/// Which end of a list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// The head (LEFT, LPUSH).
    Head,
    /// The tail (RIGHT, RPUSH).
    Tail,
}

/// Valkey's size classes for a negative `list-max-listpack-size`.
const SIZE_LEVELS: [usize; 5] = [4096, 8192, 16384, 32768, 65536];
/// Largest node for a count-limited (positive) fill, `SIZE_SAFETY_LIMIT`.
const SIZE_SAFETY_LIMIT: usize = 8192;
/// Overestimate of an entry's framing when deciding whether it fits a node.
const SIZE_ESTIMATE_OVERHEAD: usize = 8;

/// `quicklistNodeLimit`: (byte limit, count limit) of a node for a fill setting.
fn node_limit(fill: i64) -> (usize, usize) {
    if fill >= 0 {
        (usize::MAX, fill.max(1) as usize)
    } else {
        let level = ((-fill - 1) as usize).min(SIZE_LEVELS.len() - 1);
        (SIZE_LEVELS[level], usize::MAX)
    }
}

/// `quicklistNodeExceedsLimit`.
fn exceeds_limit(fill: i64, bytes: usize, count: usize) -> bool {
    let (size, max_count) = node_limit(fill);
    if size != usize::MAX { bytes > size } else { bytes > SIZE_SAFETY_LIMIT || count > max_count }
}

/// Whether pushing `lp`'s elements onto an empty list builds `lp` itself: each entry is in
/// the form a push writes ([`is_canonical`]), and no push converts the list to a quicklist
/// (the check of [`List::grow_for`], replayed).
fn builds_as_is(lp: &Listpack, fill: i64) -> bool {
    let (mut bytes, mut count) = (Listpack::new().bytes(), 0);
    let mut as_is = true;
    let walked = walk(lp.as_bytes(), |entry, e| {
        as_is &= is_canonical(entry, e) && !exceeds_limit(fill, bytes + e.str_len(), count + 1);
        bytes += entry.len() + backlen_size(entry.len());
        count += 1;
    });
    walked.is_ok() && as_is
}

impl Default for List {
    fn default() -> Self {
        List::Packed(Listpack::new())
    }
}

impl List {
    /// An empty list in the small encoding.
    pub fn new() -> List {
        List::default()
    }

    /// Builds a list from elements, choosing the encoding as pushes would.
    pub fn from_elements<'a>(items: impl IntoIterator<Item = &'a [u8]>, fill: i64) -> List {
        let mut l = List::new();
        for it in items {
            l.push(&[it], End::Tail, fill);
        }
        l
    }

    /// A list from a listpack read from outside (a one-node `LIST_QUICKLIST_2`): that
    /// listpack, not copied, when it is byte for byte what [`List::from_elements`] would build
    /// from its elements — the usual case, as Redis 7 and Valkey write small lists with the
    /// same encoding and limits; otherwise built from its elements.
    pub fn from_listpack(lp: Listpack, fill: i64) -> List {
        if builds_as_is(&lp, fill) {
            return List::Packed(lp);
        }
        let items: Vec<Vec<u8>> = lp.iter().map(Elem::to_vec).collect();
        List::from_elements(items.iter().map(Vec::as_slice), fill)
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            List::Packed(lp) => lp.len(),
            List::Quick(q) => q.len,
        }
    }

    /// Whether the list is empty (it is then deleted by the caller).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The name OBJECT ENCODING reports.
    pub fn encoding(&self) -> &'static str {
        match self {
            List::Packed(_) => "listpack",
            List::Quick(_) => "quicklist",
        }
    }

    /// The nodes, in order (one for the listpack encoding).
    pub fn nodes(&self) -> Box<dyn Iterator<Item = &Listpack> + '_> {
        match self {
            List::Packed(lp) => Box::new(std::iter::once(lp)),
            List::Quick(q) => Box::new(q.nodes.iter()),
        }
    }

    /// Heap bytes, counting each buffer in its allocator size class.
    pub fn heap_size(&self) -> usize {
        use crate::object::size_class;
        match self {
            List::Packed(lp) => size_class(lp.capacity()),
            List::Quick(q) => {
                size_class(std::mem::size_of::<Quicklist>())
                    + size_class(q.nodes.capacity() * std::mem::size_of::<Listpack>())
                    + q.nodes.iter().map(|n| size_class(n.capacity())).sum::<usize>()
            }
        }
    }

    /// Pushes `items` one by one at `end` (so LPUSH a b c leaves c first), converting to a
    /// quicklist first when the whole batch would not fit a listpack.
    pub fn push(&mut self, items: &[&[u8]], end: End, fill: i64) {
        self.grow_for(items.iter().map(|i| i.len()).sum(), items.len(), fill);
        for it in items {
            match self {
                List::Packed(lp) => match end {
                    End::Head => lp.push_front(it),
                    End::Tail => lp.push_back(it),
                },
                List::Quick(q) => q.push(it, end, fill),
            }
        }
    }

    /// Removes and returns the element at `end`.
    pub fn pop(&mut self, end: End) -> Option<Vec<u8>> {
        match self {
            List::Packed(lp) => {
                let p = match end {
                    End::Head => lp.first()?,
                    End::Tail => lp.last()?,
                };
                let v = lp.get(p).to_vec();
                lp.delete(p);
                Some(v)
            }
            List::Quick(q) => q.pop(end),
        }
    }

    /// The element at `index` (negative counts from the tail).
    pub fn get(&self, index: i64) -> Option<Elem<'_>> {
        let i = self.absolute(index)?;
        let (node, p) = self.locate(i);
        Some(node.get(p))
    }

    /// Elements `start..start + n` in order, or from `start` backwards when `rev`.
    pub fn range(&self, start: usize, n: usize, rev: bool) -> Vec<Elem<'_>> {
        let mut out = Vec::with_capacity(n.min(1 << 16));
        if n == 0 || start >= self.len() {
            return out;
        }
        match self {
            List::Packed(lp) => {
                let mut p = lp.seek(start as i64);
                while let Some(at) = p {
                    out.push(lp.get(at));
                    if out.len() == n {
                        break;
                    }
                    p = if rev { lp.prev(at) } else { lp.next(at) };
                }
            }
            List::Quick(q) => {
                let (mut ni, mut p) = q.locate(start);
                loop {
                    let node = &q.nodes[ni];
                    out.push(node.get(p));
                    if out.len() == n {
                        break;
                    }
                    let step = if rev { node.prev(p) } else { node.next(p) };
                    match step {
                        Some(next) => p = next,
                        None if rev && ni > 0 => {
                            ni -= 1;
                            p = q.nodes[ni].last().unwrap_or_default();
                        }
                        None if !rev && ni + 1 < q.nodes.len() => {
                            ni += 1;
                            p = q.nodes[ni].first().unwrap_or_default();
                        }
                        None => break,
                    }
                }
            }
        }
        out
    }

    /// Every element, front to back.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Elem<'_>> + '_ {
        let nodes: Vec<&Listpack> = self.nodes().collect();
        nodes.into_iter().flat_map(|n| n.iter())
    }

    /// Replaces the element at `index`; false when out of range.
    pub fn set(&mut self, index: i64, value: &[u8], fill: i64) -> bool {
        // Valkey's LSET checks the limit as if the value were appended (one more element),
        // and before looking at the index: a full listpack converts even for a small value.
        self.grow_for(value.len(), 1, fill);
        let Some(i) = self.absolute(index) else { return false };
        match self {
            List::Packed(lp) => {
                let p = lp.seek(i as i64).unwrap_or_default();
                lp.replace(p, value);
            }
            List::Quick(q) => {
                let (ni, p) = q.locate(i);
                q.nodes[ni].replace(p, value);
                q.split_if_needed(ni, fill);
            }
        }
        self.try_shrink(fill);
        true
    }

    /// Inserts `value` before or after the first element equal to `pivot`; false when no
    /// element is.
    pub fn insert(&mut self, pivot: &[u8], value: &[u8], after: bool, fill: i64) -> bool {
        // Valkey converts before looking for the pivot, whether or not it is found.
        self.grow_for(value.len(), 1, fill);
        let Some(i) = self.iter().position(|v| v.eq_bytes(pivot)) else { return false };
        let at = if after { i + 1 } else { i };
        match self {
            List::Packed(lp) => {
                let p = lp.seek(at as i64).unwrap_or(lp.end());
                lp.insert(p, value);
            }
            List::Quick(q) => q.insert_at(at, value, fill),
        }
        true
    }

    /// LREM: removes up to `count` elements equal to `value` (all when 0), from the tail
    /// when `from_tail`. Returns how many were removed.
    pub fn remove(&mut self, value: &[u8], count: usize, from_tail: bool, fill: i64) -> usize {
        let mut left = if count == 0 { usize::MAX } else { count };
        let mut removed = 0;
        let node_count = match self {
            List::Packed(_) => 1,
            List::Quick(q) => q.nodes.len(),
        };
        let order: Box<dyn Iterator<Item = usize>> =
            if from_tail { Box::new((0..node_count).rev()) } else { Box::new(0..node_count) };
        for ni in order {
            if left == 0 {
                break;
            }
            let node = match self {
                List::Packed(lp) => lp,
                List::Quick(q) => &mut q.nodes[ni],
            };
            let mut hits = Vec::new();
            let mut p = node.first();
            while let Some(at) = p {
                if node.get(at).eq_bytes(value) {
                    hits.push(at);
                }
                p = node.next(at);
            }
            let take = hits.len().min(left);
            let chosen = if from_tail { &hits[hits.len() - take..] } else { &hits[..take] };
            // Highest offset first, so the offsets still to delete stay valid.
            for &at in chosen.iter().rev() {
                node.delete(at);
            }
            left -= take;
            removed += take;
            if let List::Quick(q) = self {
                q.len -= take;
            }
        }
        if let List::Quick(q) = self {
            q.compact(fill);
        }
        self.try_shrink(fill);
        removed
    }

    /// LTRIM's work: drops `head` elements from the head and `tail` from the tail.
    pub fn trim(&mut self, head: usize, tail: usize, fill: i64) {
        self.drop_end(End::Head, head);
        self.drop_end(End::Tail, tail);
        self.try_shrink(fill);
    }

    /// Removes and returns up to `n` elements from `end`, in the order they were popped.
    pub fn pop_many(&mut self, end: End, n: usize, fill: i64) -> Vec<Vec<u8>> {
        let n = n.min(self.len());
        let out = match end {
            End::Head => self.range(0, n, false),
            End::Tail => self.range(self.len() - 1, n, true),
        }
        .into_iter()
        .map(Elem::to_vec)
        .collect();
        self.drop_end(end, n);
        self.try_shrink(fill);
        out
    }

    /// After removals: a quicklist left with one small node becomes a listpack again once it
    /// is under half the limit (Valkey's `LIST_CONV_SHRINKING`, which avoids flapping).
    pub fn try_shrink(&mut self, fill: i64) {
        let List::Quick(q) = self else { return };
        if q.nodes.len() > 1 {
            return;
        }
        let (size, count) = node_limit(fill);
        let Some(node) = q.nodes.front() else {
            *self = List::new();
            return;
        };
        if node.bytes() > size / 2 || q.len > count / 2 {
            return;
        }
        let lp = q.nodes.pop_front().unwrap_or_default();
        *self = List::Packed(lp);
    }

    /// Converts to a quicklist when adding `bytes` in `count` elements would exceed the
    /// listpack limit (`listTypeTryConvertListpack`).
    fn grow_for(&mut self, bytes: usize, count: usize, fill: i64) {
        let List::Packed(lp) = self else { return };
        if !exceeds_limit(fill, lp.bytes() + bytes, lp.len() + count) {
            return;
        }
        let lp = std::mem::take(lp);
        let mut q = Quicklist::default();
        if !lp.is_empty() {
            q.len = lp.len();
            q.nodes.push_back(lp);
        }
        *self = List::Quick(Box::new(q));
    }

    fn drop_end(&mut self, end: End, n: usize) {
        if n == 0 {
            return;
        }
        match self {
            List::Packed(lp) => match end {
                End::Head => {
                    if let Some(p) = lp.first() {
                        lp.delete_many(p, n);
                    }
                }
                End::Tail => {
                    let len = lp.len();
                    if let Some(p) = lp.seek(len.saturating_sub(n) as i64) {
                        lp.delete_many(p, n);
                    }
                }
            },
            List::Quick(q) => q.drop_end(end, n),
        }
    }

    fn absolute(&self, index: i64) -> Option<usize> {
        let len = self.len() as i64;
        let i = if index < 0 { len.checked_add(index)? } else { index };
        (0..len).contains(&i).then_some(i as usize)
    }

    /// The node and offset of element `i` (in range).
    fn locate(&self, i: usize) -> (&Listpack, usize) {
        match self {
            List::Packed(lp) => (lp, lp.seek(i as i64).unwrap_or_default()),
            List::Quick(q) => {
                let (ni, p) = q.locate(i);
                (&q.nodes[ni], p)
            }
        }
    }
}

impl Quicklist {
    fn push(&mut self, value: &[u8], end: End, fill: i64) {
        let node = match end {
            End::Head => self.nodes.front_mut(),
            End::Tail => self.nodes.back_mut(),
        };
        let fits = node
            .as_ref()
            .is_some_and(|n| !exceeds_limit(fill, n.bytes() + value.len() + SIZE_ESTIMATE_OVERHEAD, n.len() + 1));
        match (node, fits) {
            (Some(n), true) => match end {
                End::Head => n.push_front(value),
                End::Tail => n.push_back(value),
            },
            _ => {
                let mut n = Listpack::new();
                n.push_back(value);
                match end {
                    End::Head => self.nodes.push_front(n),
                    End::Tail => self.nodes.push_back(n),
                }
            }
        }
        self.len += 1;
    }

    fn pop(&mut self, end: End) -> Option<Vec<u8>> {
        let node = match end {
            End::Head => self.nodes.front_mut()?,
            End::Tail => self.nodes.back_mut()?,
        };
        let p = match end {
            End::Head => node.first()?,
            End::Tail => node.last()?,
        };
        let v = node.get(p).to_vec();
        node.delete(p);
        if node.is_empty() {
            match end {
                End::Head => self.nodes.pop_front(),
                End::Tail => self.nodes.pop_back(),
            };
        }
        self.len -= 1;
        Some(v)
    }

    /// Node index and offset of element `i`, walking from the nearer end.
    fn locate(&self, i: usize) -> (usize, usize) {
        if i < self.len / 2 {
            let mut skipped = 0;
            for (ni, n) in self.nodes.iter().enumerate() {
                let c = n.len();
                if i < skipped + c {
                    return (ni, n.seek((i - skipped) as i64).unwrap_or_default());
                }
                skipped += c;
            }
        } else {
            let mut after = self.len;
            for (ni, n) in self.nodes.iter().enumerate().rev() {
                let c = n.len();
                after -= c;
                if i >= after {
                    return (ni, n.seek((i - after) as i64).unwrap_or_default());
                }
            }
        }
        (0, super::listpack::HEADER)
    }

    fn insert_at(&mut self, at: usize, value: &[u8], fill: i64) {
        if at == self.len {
            return self.push(value, End::Tail, fill);
        }
        let (ni, p) = self.locate(at);
        self.nodes[ni].insert(p, value);
        self.len += 1;
        self.split_if_needed(ni, fill);
    }

    /// Splits node `ni` into nodes within the limit when an edit made it too big.
    fn split_if_needed(&mut self, ni: usize, fill: i64) {
        let node = &self.nodes[ni];
        if node.len() <= 1 || !exceeds_limit(fill, node.bytes(), node.len()) {
            return;
        }
        let mut parts = vec![Listpack::new()];
        for v in node.iter() {
            let current = parts.last_mut().unwrap_or_else(|| unreachable!("parts starts non-empty"));
            let size = v.with_bytes(encoded_size);
            if !current.is_empty() && exceeds_limit(fill, current.bytes() + size, current.len() + 1) {
                parts.push(Listpack::new());
            }
            let current = parts.last_mut().unwrap_or_else(|| unreachable!("parts is non-empty"));
            v.with_bytes(|b| current.push_back(b));
        }
        self.nodes.remove(ni);
        for (k, part) in parts.into_iter().enumerate() {
            self.nodes.insert(ni + k, part);
        }
    }

    /// Drops empty nodes and merges neighbours that fit in one node together (after LREM).
    fn compact(&mut self, fill: i64) {
        self.nodes.retain(|n| !n.is_empty());
        let mut i = 0;
        while i + 1 < self.nodes.len() {
            let (a, b) = (&self.nodes[i], &self.nodes[i + 1]);
            // -7: the merged node has one header and terminator, not two.
            if !exceeds_limit(fill, a.bytes() + b.bytes() - 7, a.len() + b.len()) {
                let b = self.nodes.remove(i + 1).unwrap_or_default();
                self.nodes[i].append_all(&b);
            } else {
                i += 1;
            }
        }
    }

    fn drop_end(&mut self, end: End, mut n: usize) {
        n = n.min(self.len);
        self.len -= n;
        while n > 0 {
            let node = match end {
                End::Head => self.nodes.front_mut(),
                End::Tail => self.nodes.back_mut(),
            };
            let Some(node) = node else { break };
            let c = node.len();
            if c <= n {
                n -= c;
                match end {
                    End::Head => self.nodes.pop_front(),
                    End::Tail => self.nodes.pop_back(),
                };
                continue;
            }
            let start = match end {
                End::Head => node.first(),
                End::Tail => node.seek((c - n) as i64),
            };
            if let Some(p) = start {
                node.delete_many(p, n);
            }
            n = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::listpack;

    fn strs(l: &List) -> Vec<String> {
        l.iter().map(|v| String::from_utf8(v.to_vec()).unwrap()).collect()
    }

    #[test]
    fn from_listpack_keeps_what_pushes_would_build() {
        let items: [&[u8]; 6] = [b"a", b"b", b"c", b"1", b"200", b"-5000"];
        let built = List::from_elements(items, -2);
        let List::Packed(lp) = &built else { panic!("small") };
        let kept = List::from_listpack(lp.clone(), -2);
        let List::Packed(k) = &kept else { panic!("kept as a listpack") };
        assert_eq!((k.as_bytes(), k.capacity()), (lp.as_bytes(), lp.capacity()));
        // Over a count limit of 4 pushes would have made a quicklist: so does this.
        assert_eq!(List::from_listpack(lp.clone(), 4), List::from_elements(items, 4));
        assert_eq!(List::from_listpack(lp.clone(), 4).encoding(), "quicklist");
        // "12" as a string entry, which a push stores as an integer: rebuilt.
        let mut odd = Vec::new();
        listpack::write_framed([&[0x82, b'1', b'2'][..], &[0x81, b'x']].into_iter(), &mut odd);
        let l = List::from_listpack(Listpack::from_bytes(odd).unwrap(), -2);
        assert_eq!(l, List::from_elements([&b"12"[..], b"x"], -2));
        let List::Packed(lp) = &l else { panic!("small") };
        assert_eq!(lp.get(lp.first().unwrap()), Elem::Int(12));
    }

    #[test]
    fn converts_at_valkey_thresholds() {
        let mut l = List::new();
        // 8 KiB: 64-byte strings cost 67 bytes each in a listpack (2 + 64 + 1).
        let item = vec![b'x'; 64];
        let mut n = 0;
        while matches!(l, List::Packed(_)) {
            l.push(&[&item], End::Tail, -2);
            n += 1;
        }
        assert_eq!(l.encoding(), "quicklist");
        assert_eq!(n, (8192 - 7) / 67 + 1, "the push that would pass 8192 bytes converts");
        // Shrinks back only below half the limit.
        while l.len() > 61 {
            l.pop(End::Tail);
            l.try_shrink(-2);
        }
        assert_eq!(l.encoding(), "listpack");
        // Count-limited fill.
        let mut l = List::new();
        for i in 0..5 {
            l.push(&[i.to_string().as_bytes()], End::Tail, 4);
        }
        assert_eq!(l.encoding(), "quicklist");
    }

    #[test]
    fn lset_on_a_full_listpack_converts_like_valkey() {
        // list.tcl "List listpack -> quicklist encoding conversion": fill 3, three elements,
        // LSET of a small value gives a quicklist (Valkey counts the value as one more).
        let three = |fill| List::from_elements([&b"a"[..], b"b", b"c"], fill);
        let mut l = three(3);
        assert_eq!(l.encoding(), "listpack");
        assert!(l.set(0, b"hello", 3));
        assert_eq!((l.encoding(), strs(&l)), ("quicklist", vec!["hello".into(), "b".into(), "c".into()]));
        // The conversion happens before the index is checked, as in Valkey.
        let mut l = three(3);
        assert!(!l.set(7, b"x", 3));
        assert_eq!(l.encoding(), "quicklist");
        // Room for one more: it stays a listpack.
        let mut l = three(4);
        assert!(l.set(-1, b"z", 4));
        assert_eq!(l.encoding(), "listpack");
    }

    #[test]
    fn quicklist_keeps_order_across_nodes() {
        let mut l = List::new();
        let mut model = VecDeque::new();
        for i in 0..3000 {
            let v = format!("value-{i}-{}", "y".repeat(i % 50));
            if i % 3 == 0 {
                l.push(&[v.as_bytes()], End::Head, -2);
                model.push_front(v);
            } else {
                l.push(&[v.as_bytes()], End::Tail, -2);
                model.push_back(v);
            }
        }
        assert_eq!(l.encoding(), "quicklist");
        assert_eq!(strs(&l), Vec::from(model.clone()));
        assert_eq!(l.get(1500).unwrap().to_vec(), model[1500].as_bytes());
        assert_eq!(l.get(-1).unwrap().to_vec(), model[2999].as_bytes());
        let r: Vec<Vec<u8>> = l.range(2990, 20, true).into_iter().map(Elem::to_vec).collect();
        assert_eq!(r.len(), 20);
        assert_eq!(r[19], model[2971].as_bytes());
        assert!(l.set(1000, &[b'z'; 9000], -2));
        model[1000] = "z".repeat(9000);
        assert!(l.insert(model[5].clone().as_bytes(), b"ins", true, -2));
        model.insert(6, "ins".into());
        assert_eq!(strs(&l), Vec::from(model.clone()));
        l.trim(100, 200, -2);
        let kept: Vec<String> = model.iter().skip(100).take(model.len() - 300).cloned().collect();
        assert_eq!(strs(&l), kept);
    }
}
