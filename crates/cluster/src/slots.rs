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

    /// The slots in ascending order.
    pub fn iter(&self) -> impl Iterator<Item = u16> + '_ {
        (0..SLOTS as u16).filter(|&s| self.contains(s))
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
