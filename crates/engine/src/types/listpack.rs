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
//! Positions are byte offsets of entries; the offset of the terminator marks "past the end".

use std::fmt;

/// Bytes before the first entry.
pub const HEADER: usize = 6;
/// The terminator byte.
const EOF: u8 = 0xFF;
/// Header count meaning "too many to count here: walk the entries".
const COUNT_UNKNOWN: usize = 65535;

/// One element, borrowed from the listpack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Bytes stored as a string.
    Str(&'a [u8]),
    /// A string that was a canonical decimal integer, stored as that integer.
    Int(i64),
}

impl Value<'_> {
    /// Whether the element equals `other` as a string.
    pub fn eq_bytes(&self, other: &[u8]) -> bool {
        match *self {
            Value::Str(s) => s == other,
            Value::Int(v) => itoa::Buffer::new().format(v).as_bytes() == other,
        }
    }

    /// The element as owned bytes.
    pub fn to_vec(&self) -> Vec<u8> {
        match *self {
            Value::Str(s) => s.to_vec(),
            Value::Int(v) => itoa::Buffer::new().format(v).as_bytes().to_vec(),
        }
    }

    /// Calls `f` with the element's bytes, formatting an integer on the stack.
    pub fn with_bytes<R>(&self, f: impl FnOnce(&[u8]) -> R) -> R {
        match *self {
            Value::Str(s) => f(s),
            Value::Int(v) => f(itoa::Buffer::new().format(v).as_bytes()),
        }
    }

    /// The string length of the element.
    pub fn str_len(&self) -> usize {
        self.with_bytes(|b| b.len())
    }
}

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
        buf.extend_from_slice(&((HEADER + 1) as u32).to_le_bytes());
        buf.extend_from_slice(&0u16.to_le_bytes());
        buf.push(EOF);
        Listpack { buf }
    }

    /// Takes a listpack from a DUMP payload, checking every entry so later reads cannot go
    /// out of bounds.
    pub fn from_bytes(buf: Vec<u8>) -> Result<Listpack, Corrupt> {
        if buf.len() < HEADER + 1 || read_u32(&buf, 0) as usize != buf.len() || buf[buf.len() - 1] != EOF {
            return Err(Corrupt);
        }
        let mut n = 0usize;
        let mut p = HEADER;
        while buf[p] != EOF {
            let (payload, _) = decode_header(&buf, p).ok_or(Corrupt)?;
            let back = backlen_size(payload);
            let end = p.checked_add(payload + back).filter(|&e| e < buf.len()).ok_or(Corrupt)?;
            if decode_backlen(&buf, end - 1) != Some(payload) {
                return Err(Corrupt);
            }
            p = end;
            n += 1;
        }
        if p != buf.len() - 1 {
            return Err(Corrupt);
        }
        let header = usize::from(u16::from_le_bytes([buf[4], buf[5]]));
        if header != COUNT_UNKNOWN && header != n {
            return Err(Corrupt);
        }
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
        let n = p + self.entry_size(p);
        (self.buf[n] != EOF).then_some(n)
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
    pub fn get(&self, p: usize) -> Value<'_> {
        decode_value(&self.buf, p)
    }

    /// All elements, front to back.
    pub fn iter(&self) -> Iter<'_> {
        Iter { lp: self, front: self.first(), back: self.last() }
    }

    /// Inserts `value` before the entry at `p` (at [`Listpack::end`] to append).
    pub fn insert(&mut self, p: usize, value: &[u8]) {
        let mut enc = Vec::with_capacity(value.len() + 10);
        encode(value, &mut enc);
        self.grow(enc.len());
        self.buf.splice(p..p, enc);
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

    /// Size of the whole entry at `p`: encoding, data and backlen.
    fn entry_size(&self, p: usize) -> usize {
        let (payload, _) = decode_header(&self.buf, p).unwrap_or((1, 0));
        payload + backlen_size(payload)
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
        let stored = if n >= COUNT_UNKNOWN { COUNT_UNKNOWN as u16 } else { n as u16 };
        self.buf[4..6].copy_from_slice(&stored.to_le_bytes());
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
    type Item = Value<'a>;

    fn next(&mut self) -> Option<Value<'a>> {
        let p = self.front?;
        if Some(p) == self.back {
            self.front = None;
            self.back = None;
        } else {
            self.front = self.lp.next(p);
        }
        Some(self.lp.get(p))
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
    let start = out.len();
    match hotkv_protocol::parse_i64(value) {
        Some(v) => encode_int(v, out),
        None => encode_str(value, out),
    }
    let payload = out.len() - start;
    write_backlen(payload, out);
}

/// The bytes one element takes in a listpack.
pub fn encoded_size(value: &[u8]) -> usize {
    let payload = match hotkv_protocol::parse_i64(value) {
        Some(v) if (0..=127).contains(&v) => 1,
        Some(v) if (-4096..=4095).contains(&v) => 2,
        Some(v) if i16::try_from(v).is_ok() => 3,
        Some(v) if (-(1 << 23)..(1 << 23)).contains(&v) => 4,
        Some(v) if i32::try_from(v).is_ok() => 5,
        Some(_) => 9,
        None if value.len() < 64 => 1 + value.len(),
        None if value.len() < 4096 => 2 + value.len(),
        None => 5 + value.len(),
    };
    payload + backlen_size(payload)
}

fn encode_int(v: i64, out: &mut Vec<u8>) {
    if (0..=127).contains(&v) {
        out.push(v as u8);
    } else if (-4096..=4095).contains(&v) {
        let u = if v < 0 { (1 << 13) + v } else { v } as u16;
        out.extend_from_slice(&[0xC0 | (u >> 8) as u8, u as u8]);
    } else if let Ok(v) = i16::try_from(v) {
        out.push(0xF1);
        out.extend_from_slice(&v.to_le_bytes());
    } else if (-(1 << 23)..(1 << 23)).contains(&v) {
        out.push(0xF2);
        out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
    } else if let Ok(v) = i32::try_from(v) {
        out.push(0xF3);
        out.extend_from_slice(&v.to_le_bytes());
    } else {
        out.push(0xF4);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

fn encode_str(s: &[u8], out: &mut Vec<u8>) {
    let n = s.len();
    if n < 64 {
        out.push(0x80 | n as u8);
    } else if n < 4096 {
        out.extend_from_slice(&[0xE0 | (n >> 8) as u8, n as u8]);
    } else {
        out.push(0xF0);
        out.extend_from_slice(&(n as u32).to_le_bytes());
    }
    out.extend_from_slice(s);
}

/// Bytes of the back-length written after an entry of `l` bytes (encoding and data).
pub(crate) fn backlen_size(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..16383 => 2,
        16383..2097151 => 3,
        2097151..268435455 => 4,
        _ => 5,
    }
}

/// Appends the back-length of an entry of `l` bytes.
pub(crate) fn write_backlen(l: usize, out: &mut Vec<u8>) {
    let n = backlen_size(l);
    // Most significant group first; every byte but the first carries the continuation bit,
    // so a reader walking backwards knows where the number ends.
    for i in (0..n).rev() {
        let group = ((l >> (7 * i)) & 127) as u8;
        out.push(if i == n - 1 { group } else { group | 128 });
    }
}

/// Reads a backlen whose last byte is at `p`.
fn decode_backlen(buf: &[u8], mut p: usize) -> Option<usize> {
    let mut val = 0usize;
    let mut shift = 0;
    loop {
        let b = *buf.get(p)?;
        val |= usize::from(b & 127) << shift;
        if b & 128 == 0 {
            return Some(val);
        }
        shift += 7;
        if shift > 28 || p == 0 {
            return None;
        }
        p -= 1;
    }
}

/// The size of encoding + data of the entry at `p`, and where its string data starts
/// (0 for an integer). `None` when it runs past the buffer.
fn decode_header(buf: &[u8], p: usize) -> Option<(usize, usize)> {
    let b = *buf.get(p)?;
    let (size, data) = if b & 0x80 == 0 {
        (1, 0)
    } else if b & 0xC0 == 0x80 {
        (1 + usize::from(b & 0x3F), p + 1)
    } else if b & 0xE0 == 0xC0 {
        (2, 0)
    } else if b & 0xF0 == 0xE0 {
        (2 + ((usize::from(b & 0x0F) << 8) | usize::from(*buf.get(p + 1)?)), p + 2)
    } else {
        match b {
            0xF0 => (5 + read_u32(buf.get(p + 1..p + 5)?, 0) as usize, p + 5),
            0xF1 => (3, 0),
            0xF2 => (4, 0),
            0xF3 => (5, 0),
            0xF4 => (9, 0),
            _ => return None,
        }
    };
    (p.checked_add(size)? <= buf.len()).then_some((size, data))
}

fn decode_value(buf: &[u8], p: usize) -> Value<'_> {
    let b = buf[p];
    let le = |n: usize| {
        let mut v = [0u8; 8];
        v[..n].copy_from_slice(&buf[p + 1..p + 1 + n]);
        // Sign-extend from n bytes.
        let shift = 64 - 8 * n as u32;
        (i64::from_le_bytes(v) << shift) >> shift
    };
    if b & 0x80 == 0 {
        return Value::Int(i64::from(b));
    }
    if b & 0xE0 == 0xC0 {
        let u = (i64::from(b & 0x1F) << 8) | i64::from(buf[p + 1]);
        return Value::Int(if u >= 1 << 12 { u - (1 << 13) } else { u });
    }
    match b {
        0xF1 => Value::Int(le(2)),
        0xF2 => Value::Int(le(3)),
        0xF3 => Value::Int(le(4)),
        0xF4 => Value::Int(le(8)),
        _ => {
            let (size, data) = decode_header(buf, p).unwrap_or((1, p + 1));
            Value::Str(&buf[data..p + size])
        }
    }
}

fn read_u32(buf: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([buf[at], buf[at + 1], buf[at + 2], buf[at + 3]])
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
        let vals: Vec<String> = [
            0i64,
            1,
            127,
            128,
            -1,
            -4096,
            4095,
            4096,
            -4097,
            32767,
            -32768,
            32768,
            8388607,
            -8388608,
            8388608,
            i32::MAX as i64,
            i32::MIN as i64,
            i64::MAX,
            i64::MIN,
        ]
        .iter()
        .map(|v| v.to_string())
        .collect();
        let mut l = Listpack::new();
        for v in &vals {
            l.push_back(v.as_bytes());
            assert!(matches!(l.get(l.last().unwrap()), Value::Int(_)), "{v}");
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
