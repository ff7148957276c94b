//! Sorted integer arrays: the compact encoding of small sets of integers (Valkey's `intset`).
//!
//! The integers are kept sorted, little-endian, all in the narrowest width (2, 4 or 8 bytes)
//! that fits the widest of them, in one exactly-sized allocation. Membership is a binary
//! search (O(log N)); insertion and removal move the tail (O(N)), as in Valkey, whose
//! `set-max-intset-entries` keeps N small. The width only grows: removing the one large
//! member leaves the others wide, as an intset does.

use crate::object::size_class;

/// A sorted set of integers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntSet {
    data: Box<[u8]>,
    width: u8,
}

impl Default for IntSet {
    fn default() -> Self {
        IntSet { data: Box::default(), width: 2 }
    }
}

impl IntSet {
    /// An empty set (allocates nothing).
    pub fn new() -> IntSet {
        IntSet::default()
    }

    /// Number of members.
    pub fn len(&self) -> usize {
        self.data.len() / usize::from(self.width)
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// Bytes per member: 2, 4 or 8.
    pub fn width(&self) -> usize {
        usize::from(self.width)
    }

    /// Heap bytes, rounded to the allocator's size class.
    pub fn heap_bytes(&self) -> usize {
        if self.data.is_empty() { 0 } else { size_class(self.data.len()) }
    }

    /// The `i`th smallest member.
    pub fn get(&self, i: usize) -> i64 {
        read(&self.data, self.width(), i)
    }

    /// The smallest and largest members.
    pub fn min_max(&self) -> Option<(i64, i64)> {
        if self.is_empty() { None } else { Some((self.get(0), self.get(self.len() - 1))) }
    }

    /// Whether `v` is a member.
    pub fn contains(&self, v: i64) -> bool {
        width_of(v) <= self.width() && self.search(v).is_ok()
    }

    /// Adds `v`; returns whether it was not a member yet.
    pub fn insert(&mut self, v: i64) -> bool {
        let w = width_of(v);
        if w > self.width() {
            // Wider than every member, so it sorts before all of them or after all of them.
            let old = std::mem::take(self);
            let mut data = Vec::with_capacity((old.len() + 1) * w);
            let mut push = |x: i64| data.extend_from_slice(&x.to_le_bytes()[..w]);
            if v < 0 {
                push(v);
            }
            old.iter().for_each(&mut push);
            if v >= 0 {
                push(v);
            }
            *self = IntSet { data: data.into_boxed_slice(), width: w as u8 };
            return true;
        }
        let Err(pos) = self.search(v) else { return false };
        let w = self.width();
        self.edit(|d| {
            d.reserve_exact(w);
            let at = pos * w;
            d.splice(at..at, v.to_le_bytes()[..w].iter().copied());
        });
        true
    }

    /// Removes `v`; returns whether it was a member.
    pub fn remove(&mut self, v: i64) -> bool {
        if width_of(v) > self.width() {
            return false;
        }
        let Ok(pos) = self.search(v) else { return false };
        self.remove_at(pos);
        true
    }

    /// Removes the `i`th smallest member.
    pub fn remove_at(&mut self, i: usize) {
        let w = self.width();
        self.edit(|d| {
            d.drain(i * w..(i + 1) * w);
        });
    }

    /// The members in ascending order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = i64> + Clone + '_ {
        let w = self.width();
        (0..self.len()).map(move |i| read(&self.data, w, i))
    }

    /// Builds a set from ascending, distinct members.
    pub fn from_sorted(values: &[i64]) -> IntSet {
        let w = values.iter().map(|&v| width_of(v)).max().unwrap_or(2);
        let mut data = Vec::with_capacity(values.len() * w);
        for v in values {
            data.extend_from_slice(&v.to_le_bytes()[..w]);
        }
        IntSet { data: data.into_boxed_slice(), width: w as u8 }
    }

    /// Decodes Valkey's intset blob (RDB type `SET_INTSET`): u32 width, u32 count, then the
    /// members, which must be strictly ascending.
    pub fn from_blob(blob: &[u8]) -> Option<IntSet> {
        let width = u32::from_le_bytes(blob.get(0..4)?.try_into().ok()?) as usize;
        let count = u32::from_le_bytes(blob.get(4..8)?.try_into().ok()?) as usize;
        if !matches!(width, 2 | 4 | 8) || blob.len() != 8 + count.checked_mul(width)? {
            return None;
        }
        let data = &blob[8..];
        let values: Vec<i64> = (0..count).map(|i| read(data, width, i)).collect();
        if values.windows(2).any(|w| w[0] >= w[1]) {
            return None;
        }
        Some(IntSet::from_sorted(&values))
    }

    /// Size of the blob [`IntSet::write_blob`] writes.
    pub fn blob_bytes(&self) -> usize {
        8 + self.data.len()
    }

    /// Appends Valkey's intset blob (RDB `SET_INTSET`): the members are already stored as an
    /// intset stores them, so this is the two header words and one copy.
    pub fn write_blob(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&u32::from(self.width).to_le_bytes());
        out.extend_from_slice(&(self.len() as u32).to_le_bytes());
        out.extend_from_slice(&self.data);
    }

    fn search(&self, v: i64) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len());
        while lo < hi {
            let mid = (lo + hi) / 2;
            match self.get(mid).cmp(&v) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }

    fn edit(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let mut v = std::mem::take(&mut self.data).into_vec();
        f(&mut v);
        self.data = v.into_boxed_slice();
    }
}

/// The narrowest intset width that holds `v`.
fn width_of(v: i64) -> usize {
    if i16::try_from(v).is_ok() {
        2
    } else if i32::try_from(v).is_ok() {
        4
    } else {
        8
    }
}

/// The `i`th `width`-byte little-endian signed integer of `data`.
fn read(data: &[u8], width: usize, i: usize) -> i64 {
    let mut le = [0u8; 8];
    le[..width].copy_from_slice(&data[i * width..(i + 1) * width]);
    let shift = 64 - 8 * width as u32;
    (i64::from_le_bytes(le) << shift) >> shift
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn insert_keeps_order_and_rejects_duplicates() {
        let mut s = IntSet::new();
        for v in [5, -3, 100, 5, 0, -3] {
            s.insert(v);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), [-3, 0, 5, 100]);
        assert!(!s.insert(0));
        assert!(s.contains(100) && !s.contains(99));
        assert_eq!((s.width(), s.len(), s.min_max()), (2, 4, Some((-3, 100))));
    }

    #[test]
    fn width_upgrades_at_both_ends() {
        let mut s = IntSet::from_sorted(&[1, 2, 3]);
        assert!(s.insert(70_000));
        assert_eq!((s.width(), s.iter().collect::<Vec<_>>()), (4, vec![1, 2, 3, 70_000]));
        assert!(s.insert(i64::MIN));
        assert_eq!((s.width(), s.iter().collect::<Vec<_>>()), (8, vec![i64::MIN, 1, 2, 3, 70_000]));
        assert!(s.remove(i64::MIN));
        assert_eq!(s.width(), 8, "never narrows again, as an intset");
        assert!(!s.remove(i64::MAX));
        assert!(!s.contains(i64::MAX));
        assert_eq!(s.heap_bytes(), size_class(32));
    }

    #[test]
    fn remove_and_bounds() {
        let mut s = IntSet::from_sorted(&[-32768, 0, 32767]);
        assert!(!s.contains(40_000), "wider than the set: cannot be a member");
        assert!(s.remove(0));
        assert!(!s.remove(0));
        s.remove_at(0);
        assert_eq!(s.iter().collect::<Vec<_>>(), [32767]);
        s.remove_at(0);
        assert!(s.is_empty() && s.heap_bytes() == 0);
    }

    #[test]
    fn blobs_from_redis() {
        // `SADD s 1 2 3` in Redis 7.0: width 2, three members.
        let blob = [2, 0, 0, 0, 3, 0, 0, 0, 1, 0, 2, 0, 3, 0];
        let s = IntSet::from_blob(&blob).unwrap();
        assert_eq!(s.iter().collect::<Vec<_>>(), [1, 2, 3]);
        assert!(IntSet::from_blob(&blob[..13]).is_none());
        let mut unsorted = blob;
        unsorted[8] = 9;
        assert!(IntSet::from_blob(&unsorted).is_none());
        let mut width = blob;
        width[0] = 3;
        assert!(IntSet::from_blob(&width).is_none());
    }
}
