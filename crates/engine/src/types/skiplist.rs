//! The `skiplist` encoding of a sorted set: Valkey's skip list with span counts (so rank
//! queries are O(log N)) plus a member index, as `zskiplist` + `dict` in `t_zset.c`.
//!
//! Nodes live in one arena (`Vec<Node>`) and link by `u32` index, so the structure is plain
//! safe Rust and costs no allocation per node beyond the member's bytes. The member index is
//! a `hashbrown::HashTable` of node indexes hashed by member: members are stored once, in
//! their node. Order is by score, then by member bytes (Valkey's `sdscmp`).

use std::fmt;
use std::hash::BuildHasher;
use std::sync::LazyLock;

use hashbrown::HashTable;

use crate::policy::random_u64;

/// Most levels a node can have (`ZSKIPLIST_MAXLEVEL`).
const MAX_LEVEL: usize = 32;
/// "No node".
const NIL: u32 = u32::MAX;
/// The header node's index.
const HEAD: u32 = 0;

/// Seeded once per process, so clients cannot choose colliding members.
static STATE: LazyLock<foldhash::fast::RandomState> = LazyLock::new(Default::default);

fn member_hash(m: &[u8]) -> u64 {
    STATE.hash_one(m)
}

#[derive(Clone, Copy, Debug)]
struct Level {
    forward: u32,
    /// Number of level-0 steps the forward link jumps.
    span: u32,
}

/// Levels kept in the node itself: all of them for 255 nodes in 256.
const LOW: usize = 4;
/// Levels above `LOW` for a tall node, in `SkipList::tall`.
const HIGH: usize = MAX_LEVEL - LOW;

/// Exactly one cache line. A search step reads the node's score and then one of its forward
/// links; with the links in a separate allocation (as a spilled small vector had them for
/// one node in sixteen) or the node straddling two lines, that step cost two cache misses.
#[derive(Clone)]
#[repr(C, align(64))]
struct Node {
    member: Box<[u8]>,
    score: f64,
    backward: u32,
    /// Number of levels (0 for a free arena slot) in the low 6 bits; for a node taller than
    /// `LOW`, its slot in `SkipList::tall` above them.
    meta: u32,
    low: [Level; LOW],
}

const _: () = assert!(std::mem::size_of::<Node>() == 64);

const EMPTY: Level = Level { forward: NIL, span: 0 };
const HEIGHT_BITS: u32 = 6;
const HEIGHT_MASK: u32 = (1 << HEIGHT_BITS) - 1;

impl Node {
    fn height(&self) -> usize {
        (self.meta & HEIGHT_MASK) as usize
    }

    fn tall_slot(&self) -> usize {
        (self.meta >> HEIGHT_BITS) as usize * HIGH
    }
}

/// A skip list ordered by (score, member) with a member index.
#[derive(Clone)]
pub struct SkipList {
    nodes: Vec<Node>,
    free: Vec<u32>,
    tail: u32,
    len: usize,
    level: usize,
    index: HashTable<u32>,
    /// `HIGH` levels per tall node (the header is one), by the slot in its `meta`.
    tall: Vec<Level>,
    tall_free: Vec<u32>,
}

impl Default for SkipList {
    fn default() -> Self {
        SkipList::new()
    }
}

impl SkipList {
    /// An empty skip list.
    pub fn new() -> SkipList {
        let head =
            Node { member: Box::default(), score: 0.0, backward: NIL, meta: MAX_LEVEL as u32, low: [EMPTY; LOW] };
        SkipList {
            nodes: vec![head],
            free: Vec::new(),
            tail: NIL,
            len: 0,
            level: 1,
            index: HashTable::new(),
            tall: vec![EMPTY; HIGH],
            tall_free: Vec::new(),
        }
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no members.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Heap bytes: the arena, the index and every member, in allocator size classes.
    pub fn heap_size(&self) -> usize {
        use crate::object::size_class;
        let members: usize =
            self.nodes.iter().filter(|n| !n.member.is_empty()).map(|n| size_class(n.member.len())).sum();
        size_class(self.nodes.capacity() * std::mem::size_of::<Node>())
            + size_class(self.free.capacity() * 4)
            + self.index.allocation_size()
            + members
            + size_class(self.tall.capacity() * std::mem::size_of::<Level>())
            + size_class(self.tall_free.capacity() * 4)
    }

    /// The score of `member`.
    pub fn score(&self, member: &[u8]) -> Option<f64> {
        self.find(member).map(|i| self.node(i).score)
    }

    /// Inserts a member that is not present.
    pub fn insert(&mut self, member: Box<[u8]>, score: f64) {
        let hash = member_hash(&member);
        let x = self.alloc(member, score, random_level());
        self.link(x);
        let nodes = &self.nodes;
        self.index.insert_unique(hash, x, |&i| member_hash(&nodes[i as usize].member));
    }

    /// Links the unlinked node `x` at the place its (score, member) sorts to (`zslInsert`
    /// without the allocation), keeping the node's own height.
    fn link(&mut self, x: u32) {
        let mut update = [HEAD; MAX_LEVEL];
        let mut rank = [0u32; MAX_LEVEL];
        let mut cur = HEAD;
        {
            let n = self.node(x);
            let (score, member) = (n.score, &*n.member);
            for i in (0..self.level).rev() {
                rank[i] = if i == self.level - 1 { 0 } else { rank[i + 1] };
                loop {
                    let f = self.lv(cur, i).forward;
                    if f == NIL || !self.before(f, score, member) {
                        break;
                    }
                    rank[i] += self.lv(cur, i).span;
                    cur = f;
                }
                update[i] = cur;
            }
        }
        let lvl = self.node(x).height();
        if lvl > self.level {
            for i in self.level..lvl {
                rank[i] = 0;
                update[i] = HEAD;
                self.lv_mut(HEAD, i).span = self.len as u32;
            }
            self.level = lvl;
        }
        for i in 0..lvl {
            let u = update[i];
            let up = self.lv(u, i);
            *self.lv_mut(x, i) = Level { forward: up.forward, span: up.span - (rank[0] - rank[i]) };
            *self.lv_mut(u, i) = Level { forward: x, span: rank[0] - rank[i] + 1 };
        }
        for (i, &u) in update.iter().enumerate().take(self.level).skip(lvl) {
            self.lv_mut(u, i).span += 1;
        }
        self.nodes[x as usize].backward = if update[0] == HEAD { NIL } else { update[0] };
        match self.node(x).low[0].forward {
            NIL => self.tail = x,
            f => self.nodes[f as usize].backward = x,
        }
        self.len += 1;
    }

    /// Removes `member`; returns its score.
    pub fn remove(&mut self, member: &[u8]) -> Option<f64> {
        let hash = member_hash(member);
        let nodes = &self.nodes;
        let (i, _) = self.index.find_entry(hash, |&j| *nodes[j as usize].member == *member).ok()?.remove();
        let score = self.node(i).score;
        self.unlink(score, member);
        self.release(i);
        Some(score)
    }

    /// Changes the score of a present member.
    pub fn update_score(&mut self, member: &[u8], score: f64) {
        let Some(i) = self.find(member) else { return };
        let n = self.node(i);
        // Valkey's shortcut: when the node stays between its neighbours, change it in place.
        let back_ok = n.backward == NIL || self.node(n.backward).score < score;
        let fwd = n.low[0].forward;
        let fwd_ok = fwd == NIL || self.node(fwd).score > score;
        if back_ok && fwd_ok {
            self.nodes[i as usize].score = score;
            return;
        }
        // Otherwise move the node itself (`zslUpdateScore`): its slot in the arena, and so
        // its index entry and member bytes, stay; no hashing, no allocation.
        let old = n.score;
        self.unlink(old, member);
        self.nodes[i as usize].score = score;
        self.link(i);
    }

    /// 0-based rank of `member` and its score.
    pub fn rank(&self, member: &[u8]) -> Option<(usize, f64)> {
        let score = self.score(member)?;
        let mut rank = 0usize;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.lv(x, i).forward;
                if f == NIL {
                    break;
                }
                let n = self.node(f);
                if n.score < score || (n.score == score && *n.member <= *member) {
                    rank += self.lv(x, i).span as usize;
                    x = f;
                } else {
                    break;
                }
            }
            if x != HEAD && *self.node(x).member == *member {
                return Some((rank - 1, score));
            }
        }
        None
    }

    /// How many members satisfy `before`, which must hold for a prefix of the order (all
    /// members below a score bound, say): the rank where that prefix ends, in O(log N).
    pub fn count_before(&self, before: impl Fn(f64, &[u8]) -> bool) -> usize {
        let mut rank = 0usize;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.lv(x, i).forward;
                if f == NIL || !before(self.node(f).score, &self.node(f).member) {
                    break;
                }
                rank += self.lv(x, i).span as usize;
                x = f;
            }
        }
        rank
    }

    /// Up to `n` members from 0-based rank `start`, forwards or backwards.
    pub fn range(&self, start: usize, n: usize, rev: bool) -> Vec<(&[u8], f64)> {
        let mut out = Vec::with_capacity(n.min(self.len));
        let mut x = self.by_rank(start + 1);
        while x != NIL && out.len() < n {
            let node = self.node(x);
            out.push((&*node.member, node.score));
            x = if rev { node.backward } else { node.low[0].forward };
        }
        out
    }

    /// Every member in order.
    pub fn iter(&self) -> impl Iterator<Item = (&[u8], f64)> + '_ {
        let mut x = self.node(HEAD).low[0].forward;
        std::iter::from_fn(move || {
            if x == NIL {
                return None;
            }
            let n = self.node(x);
            x = n.low[0].forward;
            Some((&*n.member, n.score))
        })
    }

    /// Removes `n` members from 0-based rank `start`; returns them.
    pub fn remove_range(&mut self, start: usize, n: usize) -> Vec<(Box<[u8]>, f64)> {
        let doomed: Vec<Box<[u8]>> = self.range(start, n, false).into_iter().map(|(m, _)| Box::from(m)).collect();
        doomed
            .into_iter()
            .map(|m| {
                let s = self.remove(&m).unwrap_or(0.0);
                (m, s)
            })
            .collect()
    }

    /// One step of ZSCAN: up to `count` members from arena slot `cursor` on, and the cursor
    /// to continue from (0 when done). A member keeps its slot for life (a score update
    /// moves the node, not the member), so members present for a whole scan are returned.
    pub fn scan(&self, cursor: u64, count: usize) -> (u64, Vec<(&[u8], f64)>) {
        let mut out = Vec::new();
        let mut i = usize::try_from(cursor).unwrap_or(usize::MAX).max(1);
        while i < self.nodes.len() && out.len() < count {
            let n = &self.nodes[i];
            // Free slots have no levels; live nodes have at least one.
            if n.height() != 0 {
                out.push((&*n.member, n.score));
            }
            i += 1;
        }
        (if i >= self.nodes.len() { 0 } else { i as u64 }, out)
    }

    fn node(&self, i: u32) -> &Node {
        &self.nodes[i as usize]
    }

    fn find(&self, member: &[u8]) -> Option<u32> {
        self.index.find(member_hash(member), |&i| *self.nodes[i as usize].member == *member).copied()
    }

    /// Whether node `i` sorts before (score, member).
    fn before(&self, i: u32, score: f64, member: &[u8]) -> bool {
        let n = self.node(i);
        n.score < score || (n.score == score && *n.member < *member)
    }

    /// The node at 1-based rank `r`, or NIL.
    fn by_rank(&self, r: usize) -> u32 {
        let mut traversed = 0usize;
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let l = self.lv(x, i);
                if l.forward == NIL || traversed + l.span as usize > r {
                    break;
                }
                traversed += l.span as usize;
                x = l.forward;
            }
            if traversed == r {
                return if x == HEAD { NIL } else { x };
            }
        }
        NIL
    }

    /// Unlinks the node holding (score, member) from every level (`zslDelete`).
    fn unlink(&mut self, score: f64, member: &[u8]) {
        let mut update = [HEAD; MAX_LEVEL];
        let mut x = HEAD;
        for i in (0..self.level).rev() {
            loop {
                let f = self.lv(x, i).forward;
                if f == NIL || !self.before(f, score, member) {
                    break;
                }
                x = f;
            }
            update[i] = x;
        }
        let x = self.node(x).low[0].forward;
        if x == NIL || *self.node(x).member != *member {
            return;
        }
        for (i, &u) in update.iter().enumerate().take(self.level) {
            let xl = (i < self.node(x).height()).then(|| self.lv(x, i));
            let ul = self.lv_mut(u, i);
            match xl {
                Some(xl) if ul.forward == x => {
                    ul.span = ul.span + xl.span - 1;
                    ul.forward = xl.forward;
                }
                _ => ul.span = ul.span.saturating_sub(1),
            }
        }
        let (fwd, back) = (self.node(x).low[0].forward, self.node(x).backward);
        match fwd {
            NIL => self.tail = back,
            f => self.nodes[f as usize].backward = back,
        }
        while self.level > 1 && self.lv(HEAD, self.level - 1).forward == NIL {
            self.level -= 1;
        }
        self.len -= 1;
    }

    /// Level `i` of node `x`.
    #[inline]
    fn lv(&self, x: u32, i: usize) -> Level {
        let n = self.node(x);
        if i < LOW { n.low[i] } else { self.tall[n.tall_slot() + i - LOW] }
    }

    #[inline]
    fn lv_mut(&mut self, x: u32, i: usize) -> &mut Level {
        let n = &mut self.nodes[x as usize];
        if i < LOW { &mut n.low[i] } else { &mut self.tall[n.tall_slot() + i - LOW] }
    }

    /// A node of `height` levels, in a free arena slot when there is one.
    fn alloc(&mut self, member: Box<[u8]>, score: f64, height: usize) -> u32 {
        let mut meta = height as u32;
        if height > LOW {
            let slot = match self.tall_free.pop() {
                Some(t) => t,
                None => {
                    self.tall.extend_from_slice(&[EMPTY; HIGH]);
                    (self.tall.len() / HIGH - 1) as u32
                }
            };
            meta |= slot << HEIGHT_BITS;
        }
        let node = Node { member, score, backward: NIL, meta, low: [EMPTY; LOW] };
        match self.free.pop() {
            Some(i) => {
                self.nodes[i as usize] = node;
                i
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as u32
            }
        }
    }

    /// Returns unlinked node `i`'s arena slot (and tall slot) for reuse.
    fn release(&mut self, i: u32) {
        let n = &mut self.nodes[i as usize];
        if n.height() > LOW {
            self.tall_free.push(n.meta >> HEIGHT_BITS);
        }
        n.member = Box::default();
        n.meta = 0;
        self.free.push(i);
    }
}

/// Levels for a new node: each further level with probability 1/4 (`zslRandomLevel`).
fn random_level() -> usize {
    let mut level = 1;
    while level < MAX_LEVEL && random_u64().is_multiple_of(4) {
        level += 1;
    }
    level
}

impl PartialEq for SkipList {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl fmt::Debug for SkipList {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(|(m, s)| (String::from_utf8_lossy(m).into_owned(), s))).finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[derive(PartialEq)]
    struct Key(f64, Vec<u8>);
    impl Eq for Key {}
    impl PartialOrd for Key {
        fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
            Some(self.cmp(o))
        }
    }
    impl Ord for Key {
        fn cmp(&self, o: &Self) -> std::cmp::Ordering {
            self.0.total_cmp(&o.0).then_with(|| self.1.cmp(&o.1))
        }
    }

    #[test]
    fn ranks_and_ranges_match_a_sorted_model() {
        let mut s = SkipList::new();
        let mut model = BTreeSet::new();
        for i in 0..2000u64 {
            let m = format!("m{}", (i * 7919) % 1000).into_bytes();
            let score = ((i * 31) % 97) as f64;
            if let Some(old) = s.score(&m) {
                if i % 2 == 0 {
                    s.update_score(&m, score);
                    model.remove(&Key(old, m.clone()));
                    model.insert(Key(score, m));
                } else {
                    assert_eq!(s.remove(&m), Some(old));
                    model.remove(&Key(old, m));
                }
            } else {
                s.insert(m.clone().into_boxed_slice(), score);
                model.insert(Key(score, m));
            }
        }
        assert_eq!(s.len(), model.len());
        let want: Vec<(Vec<u8>, f64)> = model.iter().map(|k| (k.1.clone(), k.0)).collect();
        let got: Vec<(Vec<u8>, f64)> = s.iter().map(|(m, sc)| (m.to_vec(), sc)).collect();
        assert_eq!(got, want);
        for (r, (m, sc)) in want.iter().enumerate() {
            assert_eq!(s.rank(m), Some((r, *sc)));
        }
        let mid: Vec<Vec<u8>> = s.range(100, 10, false).iter().map(|(m, _)| m.to_vec()).collect();
        assert_eq!(mid, want[100..110].iter().map(|x| x.0.clone()).collect::<Vec<_>>());
        let back: Vec<Vec<u8>> = s.range(100, 3, true).iter().map(|(m, _)| m.to_vec()).collect();
        assert_eq!(back, [want[100].0.clone(), want[99].0.clone(), want[98].0.clone()]);
        let below_50 = s.count_before(|sc, _| sc < 50.0);
        assert_eq!(below_50, want.iter().filter(|x| x.1 < 50.0).count());
        let removed = s.remove_range(10, 20);
        assert_eq!(removed.len(), 20);
        assert_eq!(s.len(), want.len() - 20);
        assert_eq!(s.range(10, 1, false)[0].0, &want[30].0[..]);
    }

    /// Enough members for nodes taller than the in-node levels, whose slots in `tall` are
    /// freed and reused as members move and leave.
    #[test]
    fn tall_nodes_survive_moves_removals_and_reuse() {
        let mut s = SkipList::new();
        let mut model = BTreeSet::new();
        let mut scores = std::collections::HashMap::new();
        for round in 0..3u64 {
            for i in 0..20_000u64 {
                let m = format!("member:{}", (i * 7919 + round) % 15_000).into_bytes();
                let score = ((i * 2654435761 + round * 97) % 5_000) as f64;
                match scores.insert(m.clone(), score) {
                    Some(old) if i % 3 == 0 => {
                        assert_eq!(s.remove(&m), Some(old));
                        model.remove(&Key(old, m.clone()));
                        scores.remove(&m);
                    }
                    Some(old) => {
                        s.update_score(&m, score);
                        model.remove(&Key(old, m.clone()));
                        model.insert(Key(score, m));
                    }
                    None => {
                        s.insert(m.clone().into_boxed_slice(), score);
                        model.insert(Key(score, m));
                    }
                }
            }
            assert_eq!(s.len(), model.len());
            assert!(s.nodes.iter().any(|n| n.height() > LOW), "no tall node was exercised");
            let want: Vec<(Vec<u8>, f64)> = model.iter().map(|k| (k.1.clone(), k.0)).collect();
            let got: Vec<(Vec<u8>, f64)> = s.iter().map(|(m, sc)| (m.to_vec(), sc)).collect();
            assert_eq!(got, want);
            for r in (0..want.len()).step_by(97) {
                assert_eq!(s.rank(&want[r].0), Some((r, want[r].1)));
            }
            let back: Vec<Vec<u8>> = s.range(want.len() - 3, 3, true).iter().map(|(m, _)| m.to_vec()).collect();
            assert_eq!(
                back,
                [want[want.len() - 3].0.clone(), want[want.len() - 4].0.clone(), want[want.len() - 5].0.clone()]
            );
        }
    }
}
