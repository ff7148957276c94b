//! A set of hash slots as a 2 KiB bitmap (what a node claims in every bus message), and the
//! text forms Redis prints: merged ranges such as `0-5460 5462 5464-5500`.

use std::fmt;

/// Hash slots in a cluster.
pub const SLOTS: usize = 16384;

/// A set of slots, one bit each, slot 0 in the lowest bit of the first byte (the order of
/// Redis's `myslots` bitmap, so the wire form is these bytes as they are).
#[derive(Clone, PartialEq, Eq)]
pub struct SlotSet([u8; SLOTS / 8]);

impl SlotSet {
    /// Bytes of the wire form.
    pub const BYTES: usize = SLOTS / 8;

    /// No slot.
    pub fn new() -> SlotSet {
        SlotSet([0; SLOTS / 8])
    }

    /// Every slot.
    pub fn full() -> SlotSet {
        SlotSet([0xff; SLOTS / 8])
    }

    /// The set from its wire form.
    pub fn from_bytes(bytes: &[u8; SLOTS / 8]) -> SlotSet {
        SlotSet(*bytes)
    }

    /// The wire form.
    pub fn as_bytes(&self) -> &[u8; SLOTS / 8] {
        &self.0
    }

    /// Whether `slot` is in the set.
    pub fn contains(&self, slot: u16) -> bool {
        let s = usize::from(slot);
        s < SLOTS && self.0[s / 8] & (1 << (s % 8)) != 0
    }

    /// Adds `slot`; true if it was absent.
    pub fn insert(&mut self, slot: u16) -> bool {
        let s = usize::from(slot) % SLOTS;
        let absent = self.0[s / 8] & (1 << (s % 8)) == 0;
        self.0[s / 8] |= 1 << (s % 8);
        absent
    }

    /// Removes `slot`; true if it was present.
    pub fn remove(&mut self, slot: u16) -> bool {
        let s = usize::from(slot) % SLOTS;
        let present = self.0[s / 8] & (1 << (s % 8)) != 0;
        self.0[s / 8] &= !(1 << (s % 8));
        present
    }

    /// Number of slots in the set.
    pub fn len(&self) -> usize {
        self.0.iter().map(|b| b.count_ones() as usize).sum()
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.iter().all(|&b| b == 0)
    }

    /// The slots in ascending order. A plain iterator over the bytes that skips empty ones and
    /// takes each set bit with `trailing_zeros`: the routing snapshot walks every node's set
    /// after each CLUSTER SETSLOT, and a filter over all 16384 bits (closures and all, in a
    /// debug build) made that walk most of a SETSLOT's cost, milliseconds each, enough to push
    /// a 4096-slot rebalance on a loaded machine past five minutes.
    pub fn iter(&self) -> Slots<'_> {
        Slots { bytes: &self.0, next: 0, base: 0, bits: 0 }
    }

    /// Maximal runs of consecutive slots, `(first, last)` inclusive, ascending.
    pub fn ranges(&self) -> Vec<(u16, u16)> {
        let mut out: Vec<(u16, u16)> = Vec::new();
        for s in self.iter() {
            match out.last_mut() {
                Some((_, end)) if *end + 1 == s => *end = s,
                _ => out.push((s, s)),
            }
        }
        out
    }
}

/// The slots of a [`SlotSet`], ascending ([`SlotSet::iter`]).
pub struct Slots<'a> {
    bytes: &'a [u8; SLOTS / 8],
    /// The next byte to load.
    next: usize,
    /// The first slot of the loaded byte.
    base: u16,
    /// The loaded byte's bits not yet yielded.
    bits: u8,
}

impl Iterator for Slots<'_> {
    type Item = u16;

    fn next(&mut self) -> Option<u16> {
        while self.bits == 0 {
            let &b = self.bytes.get(self.next)?;
            self.base = (self.next * 8) as u16;
            self.bits = b;
            self.next += 1;
        }
        let bit = self.bits.trailing_zeros() as u16;
        self.bits &= self.bits - 1;
        Some(self.base + bit)
    }
}

impl Default for SlotSet {
    fn default() -> Self {
        SlotSet::new()
    }
}

/// `CLUSTER NODES` text of a slot set: merged ranges, `a-b` or `n`, space separated. Every
/// node prints an owner's slots in this one form, which redis-cli compares textually while it
/// waits for a cluster to join.
impl fmt::Display for SlotSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (a, b)) in self.ranges().into_iter().enumerate() {
            if i > 0 {
                f.write_str(" ")?;
            }
            if a == b { write!(f, "{a}")? } else { write!(f, "{a}-{b}")? }
        }
        Ok(())
    }
}

impl fmt::Debug for SlotSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SlotSet[{self}]")
    }
}

/// Parses a slot number as CLUSTER commands take it: a decimal from 0 to 16383.
pub fn parse_slot(arg: &[u8]) -> Option<u16> {
    let text = std::str::from_utf8(arg).ok()?;
    let n: i64 = text.parse().ok()?;
    u16::try_from(n).ok().filter(|&s| usize::from(s) < SLOTS)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_as_redis_prints_them() {
        let mut s = SlotSet::new();
        for slot in (0..=5460).chain([5462]).chain(5464..=5500).chain([16383]) {
            s.insert(slot);
        }
        assert_eq!(s.to_string(), "0-5460 5462 5464-5500 16383");
        assert_eq!(s.len(), 5461 + 1 + 37 + 1);
        assert!(s.remove(5462) && !s.remove(5462));
        assert_eq!(s.to_string(), "0-5460 5464-5500 16383");
        assert_eq!(SlotSet::full().to_string(), "0-16383");
        assert_eq!(SlotSet::new().to_string(), "");
    }

    #[test]
    fn iter_yields_every_member_once_in_order() {
        let mut s = SlotSet::new();
        let members = [0u16, 1, 7, 8, 9, 15, 16, 100, 1000, 8191, 8192, 16382, 16383];
        for &slot in &members {
            s.insert(slot);
        }
        assert_eq!(s.iter().collect::<Vec<_>>(), members);
        assert_eq!(SlotSet::new().iter().count(), 0);
        assert!(SlotSet::full().iter().eq(0..SLOTS as u16));
    }

    #[test]
    fn wire_form_is_redis_bit_order() {
        let mut s = SlotSet::new();
        s.insert(0);
        s.insert(9);
        assert_eq!(&s.as_bytes()[..2], &[0b1, 0b10]);
        assert_eq!(SlotSet::from_bytes(s.as_bytes()), s);
    }

    #[test]
    fn slot_arguments() {
        assert_eq!(parse_slot(b"0"), Some(0));
        assert_eq!(parse_slot(b"16383"), Some(16383));
        assert_eq!(parse_slot(b"16384"), None);
        assert_eq!(parse_slot(b"-1"), None);
        assert_eq!(parse_slot(b"x"), None);
    }
}
