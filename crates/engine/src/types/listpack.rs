//! Valkey's `listpack`: a sequence of strings and integers packed into one buffer.
//!
//! Small lists, small sorted sets and every quicklist node are listpacks, byte for byte the
//! format Valkey uses (`src/listpack.c`), for two reasons: memory (an element costs its bytes
//! plus two or three bytes of framing, integers as little as one byte), and DUMP/RESTORE
//! (`LIST_QUICKLIST_2` and `ZSET_LISTPACK` payloads carry listpacks verbatim).
//!
//! Layout: `[total bytes: u32 LE][count: u16 LE, 65535 = unknown][entries...][0xFF]`.
//! An entry is `[encoding + data][backlen]`, where backlen is the size of encoding + data in
//! 1-5 bytes read from the end, so the list can be walked both ways.
//!
//! This module is the framing only. The entries' encoding + data is [`crate::types::lpentry`],
//! the one codec it shares with [`crate::types::packed`], which keeps the same entries without
//! this framing (no header, back-lengths or terminator) for small hashes and sets.
//! [`walk`] and [`write_framed`] convert between the two framings: they check or add the
//! header, back-lengths and terminator around entries that are copied as they are.
//!
//! Positions are byte offsets of entries; the offset of the terminator marks "past the end".

use std::fmt;

use super::lpentry::{Elem, Encoded, backlen_size, decode, decode_backlen, write_backlen};

/// Bytes before the first entry.
pub const HEADER: usize = 6;
/// The terminator byte.
const EOF: u8 = 0xFF;
/// Header count meaning "too many to count here: walk the entries".
const COUNT_UNKNOWN: usize = 65535;

/// A listpack.
#[derive(Clone, PartialEq, Eq)]
pub struct Listpack {
    buf: Vec<u8>,
}

/// A listpack that failed validation (RESTORE of a corrupt payload).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Corrupt;

impl Listpack {
    /// An empty listpack (7 bytes, as Valkey's `lpNew`).
    pub fn new() -> Listpack {
        let mut buf = Vec::with_capacity(HEADER + 1);
        write_framed(std::iter::empty(), &mut buf);
        Listpack { buf }
    }

    /// Takes a listpack from a DUMP payload, checking every entry so later reads cannot go
    /// out of bounds.
    pub fn from_bytes(buf: Vec<u8>) -> Result<Listpack, Corrupt> {
        let n = walk(&buf, |_, _| {})?;
        let mut lp = Listpack { buf };
        lp.set_count(n);
        lp.buf.shrink_to_fit();
        Ok(lp)
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// Total encoded size (`lpBytes`).
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Heap bytes held (the buffer's capacity).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        let n = usize::from(u16::from_le_bytes([self.buf[4], self.buf[5]]));
        if n != COUNT_UNKNOWN {
            return n;
        }
        self.iter().count()
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.buf[HEADER] == EOF
    }

    /// Offset of the terminator: inserting there appends.
    pub fn end(&self) -> usize {
        self.buf.len() - 1
    }

    /// Offset of the first entry.
    pub fn first(&self) -> Option<usize> {
        (!self.is_empty()).then_some(HEADER)
    }

    /// Offset of the last entry.
    pub fn last(&self) -> Option<usize> {
        self.prev(self.end())
    }

    /// The entry after the one at `p`.
    pub fn next(&self, p: usize) -> Option<usize> {
        self.entry(p).1
    }

    /// The entry before the one at `p` (or before the terminator).
    pub fn prev(&self, p: usize) -> Option<usize> {
        if p <= HEADER {
            return None;
        }
        // Stored listpacks were validated, so every backlen is well formed.
        let payload = decode_backlen(&self.buf, p - 1).unwrap_or(0);
        Some(p - payload - backlen_size(payload))
    }

    /// The entry at element index `i`; negative counts from the end (`lpSeek`).
    pub fn seek(&self, i: i64) -> Option<usize> {
        let len = self.len() as i64;
        let i = if i < 0 { len + i } else { i };
        if i < 0 || i >= len {
            return None;
        }
        if i < len / 2 {
            let mut p = self.first()?;
            for _ in 0..i {
                p = self.next(p)?;
            }
            Some(p)
        } else {
            let mut p = self.last()?;
            for _ in 0..(len - 1 - i) {
                p = self.prev(p)?;
            }
            Some(p)
        }
    }

    /// The element at `p`.
    pub fn get(&self, p: usize) -> Elem<'_> {
        self.entry(p).0
    }

    /// All elements, front to back.
    pub fn iter(&self) -> Iter<'_> {
        Iter { lp: self, front: self.first(), back: self.last() }
    }

    /// Inserts `value` before the entry at `p` (at [`Listpack::end`] to append).
    pub fn insert(&mut self, p: usize, value: &[u8]) {
        let enc = Encoded::of(Elem::of(value));
        self.grow(enc.len() + backlen_size(enc.len()));
        // Written past the terminator, then rotated into place: no buffer of its own for the
        // entry, and for an append the rotation moves only the terminator.
        let end = self.buf.len();
        write_entry(enc, &mut self.buf);
        let added = self.buf.len() - end;
        self.buf[p..].rotate_right(added);
        self.bump(1);
    }

    /// Appends `value`.
    pub fn push_back(&mut self, value: &[u8]) {
        let end = self.end();
        self.insert(end, value);
    }

    /// Prepends `value`.
    pub fn push_front(&mut self, value: &[u8]) {
        self.insert(HEADER, value);
    }

    /// Removes the entry at `p`; the following entry (if any) is then at `p`.
    pub fn delete(&mut self, p: usize) {
        let size = self.entry_size(p);
        self.buf.drain(p..p + size);
        self.bump(-1);
        self.fix_total();
    }

    /// Removes `n` entries starting at `p`.
    pub fn delete_many(&mut self, p: usize, n: usize) {
        let mut end = p;
        let mut removed = 0;
        while removed < n && self.buf[end] != EOF {
            end += self.entry_size(end);
            removed += 1;
        }
        self.buf.drain(p..end);
        self.bump(-(removed as i64));
        self.fix_total();
    }

    /// Replaces the element at `p` with `value`.
    pub fn replace(&mut self, p: usize, value: &[u8]) {
        let mut enc = Vec::with_capacity(value.len() + 10);
        encode(value, &mut enc);
        let old = self.entry_size(p);
        if enc.len() > old {
            self.grow(enc.len() - old);
        }
        self.buf.splice(p..p + old, enc);
        self.fix_total();
    }

    /// Appends every element of `other` (merging two quicklist nodes).
    pub fn append_all(&mut self, other: &Listpack) {
        let entries = &other.buf[HEADER..other.buf.len() - 1];
        self.grow(entries.len());
        let end = self.end();
        self.buf.splice(end..end, entries.iter().copied());
        let n = self.len() + other.len();
        self.set_count(n);
        self.fix_total();
    }

    /// Releases spare capacity (after a bulk build).
    pub fn shrink_to_fit(&mut self) {
        self.buf.shrink_to_fit();
    }

    /// The element at `p` and the entry after it: one decode for both, as a forward walk
    /// needs both.
    fn entry(&self, p: usize) -> (Elem<'_>, Option<usize>) {
        let (e, size) = self.decode_entry(p);
        let n = p + size;
        (e, (self.buf[n] != EOF).then_some(n))
    }

    /// Size of the whole entry at `p`: encoding, data and backlen.
    fn entry_size(&self, p: usize) -> usize {
        self.decode_entry(p).1
    }

    /// The element at `p` and the size of its whole entry.
    fn decode_entry(&self, p: usize) -> (Elem<'_>, usize) {
        // Invariant: the buffer was built by `encode` or checked by `from_bytes`, and `p` is
        // the offset of an entry.
        let (e, end) = decode(&self.buf, p).expect("listpack holds well-formed entries");
        let payload = end - p;
        (e, payload + backlen_size(payload))
    }

    /// Makes room for `extra` bytes without the doubling growth of `Vec`: a listpack is
    /// reallocated to its exact size on every change, as Valkey's, so its memory is its
    /// length rounded to the allocator's size class, not up to twice that.
    fn grow(&mut self, extra: usize) {
        if self.buf.capacity() - self.buf.len() < extra {
            self.buf.reserve_exact(extra);
        }
        let total = self.buf.len() + extra;
        self.buf[..4].copy_from_slice(&(total as u32).to_le_bytes());
    }

    fn fix_total(&mut self) {
        let total = self.buf.len() as u32;
        self.buf[..4].copy_from_slice(&total.to_le_bytes());
    }

    fn bump(&mut self, by: i64) {
        let stored = usize::from(u16::from_le_bytes([self.buf[4], self.buf[5]]));
        if stored == COUNT_UNKNOWN {
            let n = self.iter().count();
            self.set_count(n);
        } else {
            self.set_count((stored as i64 + by) as usize);
        }
    }

    fn set_count(&mut self, n: usize) {
        self.buf[4..6].copy_from_slice(&header_count(n).to_le_bytes());
    }
}

impl Default for Listpack {
    fn default() -> Self {
        Listpack::new()
    }
}

impl fmt::Debug for Listpack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(|v| String::from_utf8_lossy(&v.to_vec()).into_owned())).finish()
    }
}

/// Iterator over a listpack's elements, from either end.
pub struct Iter<'a> {
    lp: &'a Listpack,
    front: Option<usize>,
    back: Option<usize>,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Elem<'a>;

    fn next(&mut self) -> Option<Elem<'a>> {
        let p = self.front?;
        let (e, next) = self.lp.entry(p);
        if Some(p) == self.back {
            self.front = None;
            self.back = None;
        } else {
            self.front = next;
        }
        Some(e)
    }
}

impl DoubleEndedIterator for Iter<'_> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let p = self.back?;
        if Some(p) == self.front {
            self.front = None;
            self.back = None;
        } else {
            self.back = self.lp.prev(p);
        }
        Some(self.lp.get(p))
    }
}

/// Encodes `value` as one entry (encoding, data, backlen), as an integer when it is a
/// canonical decimal integer (Valkey's `lpStringToInt64`).
pub fn encode(value: &[u8], out: &mut Vec<u8>) {
    write_entry(Encoded::of(Elem::of(value)), out);
}

/// The bytes one element takes in a listpack.
pub fn encoded_size(value: &[u8]) -> usize {
    let payload = Encoded::of(Elem::of(value)).len();
    payload + backlen_size(payload)
}

/// Appends `enc` and its back-length.
fn write_entry(enc: Encoded<'_>, out: &mut Vec<u8>) {
    enc.write(out);
    write_backlen(enc.len(), out);
}

/// Checks a listpack from outside (a RESTORE payload, an RDB file) from header to
/// terminator, every entry and back-length against the bytes, and calls `f` with each
/// entry's encoding + data (without its back-length) and its element, in order. Returns the
/// number of entries.
pub fn walk<'a>(blob: &'a [u8], mut f: impl FnMut(&'a [u8], Elem<'a>)) -> Result<usize, Corrupt> {
    let total = blob.get(..4).ok_or(Corrupt)?;
    if blob.len() < HEADER + 1
        || u32::from_le_bytes([total[0], total[1], total[2], total[3]]) as usize != blob.len()
        || blob[blob.len() - 1] != EOF
    {
        return Err(Corrupt);
    }
    let last = blob.len() - 1;
    let mut n = 0usize;
    let mut p = HEADER;
    while p < last {
        // Entries end before the terminator: a string claiming its byte is corrupt too.
        let (e, data_end) = decode(&blob[..last], p).ok_or(Corrupt)?;
        let payload = data_end - p;
        let end = data_end.checked_add(backlen_size(payload)).filter(|&e| e <= last).ok_or(Corrupt)?;
        if decode_backlen(blob, end - 1) != Some(payload) {
            return Err(Corrupt);
        }
        f(&blob[p..data_end], e);
        p = end;
        n += 1;
    }
    let header = usize::from(u16::from_le_bytes([blob[4], blob[5]]));
    if header != COUNT_UNKNOWN && header != n {
        return Err(Corrupt);
    }
    Ok(n)
}

/// Size of the listpack [`write_framed`] writes around entries of these sizes.
pub fn framed_size(entry_sizes: impl Iterator<Item = usize>) -> usize {
    HEADER + entry_sizes.map(|l| l + backlen_size(l)).sum::<usize>() + 1
}

/// Appends a listpack of `entries`, each an encoding + data as [`Encoded::write`] writes
/// it: the entries are copied as they are, with the header, a back-length after each and
/// the terminator added around them.
pub fn write_framed<'e>(entries: impl Iterator<Item = &'e [u8]> + Clone, out: &mut Vec<u8>) {
    let (total, count) = entries.clone().fold((framed_size(std::iter::empty()), 0), |(total, count), e| {
        (total + e.len() + backlen_size(e.len()), count + 1)
    });
    out.reserve(total);
    out.extend_from_slice(&(total as u32).to_le_bytes());
    out.extend_from_slice(&header_count(count).to_le_bytes());
    for e in entries {
        out.extend_from_slice(e);
        write_backlen(e.len(), out);
    }
    out.push(EOF);
}

/// The header's count for `n` entries: 65535 itself means "unknown, walk the entries", as
/// for any count above it.
fn header_count(n: usize) -> u16 {
    u16::try_from(n).unwrap_or(COUNT_UNKNOWN as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lp(items: &[&[u8]]) -> Listpack {
        let mut lp = Listpack::new();
        for i in items {
            lp.push_back(i);
        }
        lp
    }

    #[test]
    fn matches_valkey_bytes() {
        // From the cluster client contract: a hash {f: v} as HASH_LISTPACK.
        assert_eq!(lp(&[b"f", b"v"]).as_bytes(), [0x0d, 0, 0, 0, 2, 0, 0x81, b'f', 2, 0x81, b'v', 2, 0xff]);
        // 16 bytes: a, b, c as Redis 7.0 wrote them in a QUICKLIST_2 node.
        assert_eq!(lp(&[b"a", b"b", b"c"]).as_bytes().len(), 16);
    }

    #[test]
    fn integers_round_trip_in_every_width() {
        let vals: Vec<String> = crate::types::lpentry::width_boundaries().iter().map(i64::to_string).collect();
        let mut l = Listpack::new();
        for v in &vals {
            l.push_back(v.as_bytes());
            assert!(matches!(l.get(l.last().unwrap()), Elem::Int(_)), "{v}");
        }
        let back: Vec<String> = l.iter().map(|v| String::from_utf8(v.to_vec()).unwrap()).collect();
        assert_eq!(back, vals);
        let rev: Vec<String> = l.iter().rev().map(|v| String::from_utf8(v.to_vec()).unwrap()).collect();
        assert_eq!(rev, vals.iter().rev().cloned().collect::<Vec<_>>());
        for v in &vals {
            let mut enc = Vec::new();
            encode(v.as_bytes(), &mut enc);
            assert_eq!(enc.len(), encoded_size(v.as_bytes()), "{v}");
        }
        assert_eq!(Listpack::from_bytes(l.as_bytes().to_vec()).unwrap(), l);
    }

    #[test]
    fn strings_of_every_length_class() {
        let sizes = [0usize, 1, 63, 64, 127, 128, 4095, 4096, 20000];
        let strs: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'x'; n]).collect();
        let mut l = Listpack::new();
        for s in &strs {
            l.push_front(s);
        }
        let got: Vec<Vec<u8>> = l.iter().rev().map(|v| v.to_vec()).collect();
        assert_eq!(got, strs);
        for s in &strs {
            let mut enc = Vec::new();
            encode(s, &mut enc);
            assert_eq!(enc.len(), encoded_size(s));
        }
        assert_eq!(l.len(), sizes.len());
        assert_eq!(l.bytes(), l.as_bytes().len());
        assert_eq!(Listpack::from_bytes(l.as_bytes().to_vec()).unwrap(), l);
    }

    #[test]
    fn edits() {
        let mut l = lp(&[b"a", b"b", b"c", b"d"]);
        let p = l.seek(1).unwrap();
        l.replace(p, b"a much longer replacement value than before, over sixty-four bytes long!!");
        l.delete(l.seek(0).unwrap());
        l.insert(l.seek(-1).unwrap(), b"12");
        let got: Vec<Vec<u8>> = l.iter().map(|v| v.to_vec()).collect();
        assert_eq!(got.len(), 4);
        assert_eq!(got[2], b"12");
        assert_eq!(l.seek(-5), None);
        l.delete_many(HEADER, 10);
        assert!(l.is_empty());
        assert_eq!(l, Listpack::new());
    }

    #[test]
    fn rejects_corrupt_bytes() {
        let good = lp(&[b"a", b"bc"]).as_bytes().to_vec();
        assert!(Listpack::from_bytes(good.clone()).is_ok());
        for i in 0..good.len() {
            let mut bad = good.clone();
            bad[i] ^= 0x40;
            // Either rejected or still a consistent listpack; never a panic.
            if let Ok(l) = Listpack::from_bytes(bad) {
                let _ = l.iter().count();
            }
        }
        assert_eq!(Listpack::from_bytes(good[..good.len() - 1].to_vec()), Err(Corrupt));
    }
}
