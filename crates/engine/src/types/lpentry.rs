//! One listpack entry: the element codec every listpack-shaped buffer in the engine shares.
//!
//! Valkey's listpack (`src/listpack.c`) stores an element as an encoding byte and data: a
//! canonical decimal integer as a 1-9 byte integer (uint7, int13, int16, int24, int32, int64),
//! any other string as a 1, 2 or 5 byte length then its bytes. This module is the only place
//! that writes or reads that encoding. Two framings put the entries in a buffer:
//!
//! - [`crate::types::listpack`]: Valkey's listpack byte for byte — a 6-byte header, each entry
//!   followed by its back-length (so the list can be walked from the end), a terminator.
//!   Lists (quicklist nodes) and small sorted sets, which DUMP copies out verbatim.
//! - [`crate::types::packed`]: the entries back to back and nothing else, for small hashes and
//!   sets, which only walk forwards; its module doc says what that saves.
//!
//! Since an entry is the same bytes in both, moving between the framings copies entries and
//! adds or drops back-lengths; no element is decoded and encoded again.
//!
//! The encoding is canonical: [`Encoded::of`] gives one string the same bytes every time (an
//! integer exactly when [`parse_i64`] accepts it, the shortest header otherwise), so an
//! element can be found by comparing encoded bytes.
//!
//! The decoders read bytes from outside (RESTORE payloads, RDB files): every read is checked
//! against the buffer and a bad entry is `None`, never a panic, and no length read from the
//! bytes sizes an allocation.

use hotkv_protocol::{ReplyBuf, parse_i64};

// The `#[inline]`s below: the framings' loops (list and zset walks, hash and set lookups,
// DUMP, RESTORE) call these per element from other modules, which may land in other codegen
// units. Without them, checking a 20-entry listpack (`Listpack::from_bytes`) measured 28%
// slower and dumping a packed hash 38% slower than with the codec in each framing's module.

/// One element, borrowed from an entry or an argument: a string, or an integer stored in
/// binary form (which stands for its decimal string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem<'a> {
    /// String bytes.
    Str(&'a [u8]),
    /// A canonical decimal integer.
    Int(i64),
}

impl<'a> Elem<'a> {
    /// The element for `bytes`: an integer when the bytes are a canonical decimal integer
    /// (Valkey's `lpStringToInt64`).
    #[inline]
    pub fn of(bytes: &'a [u8]) -> Elem<'a> {
        match parse_i64(bytes) {
            Some(n) => Elem::Int(n),
            None => Elem::Str(bytes),
        }
    }

    /// The same element in the form [`Elem::of`] gives: a string that spells a canonical
    /// integer becomes that integer. Entries from outside may hold such strings.
    pub fn canonical(self) -> Elem<'a> {
        match self {
            Elem::Str(b) => Elem::of(b),
            e => e,
        }
    }

    /// Writes the element as a bulk string.
    pub fn reply(self, out: &mut ReplyBuf) {
        match self {
            Elem::Str(b) => out.bulk(b),
            Elem::Int(n) => out.bulk_int(n),
        }
    }

    /// Calls `f` with the element's string form, formatting an integer on the stack.
    pub fn with_bytes<R>(self, f: impl FnOnce(&[u8]) -> R) -> R {
        match self {
            Elem::Str(b) => f(b),
            Elem::Int(n) => f(itoa::Buffer::new().format(n).as_bytes()),
        }
    }

    /// The element's string form, owned.
    pub fn to_vec(self) -> Vec<u8> {
        self.with_bytes(<[u8]>::to_vec)
    }

    /// Whether the element's string form is `other`.
    pub fn eq_bytes(self, other: &[u8]) -> bool {
        self.with_bytes(|b| b == other)
    }

    /// Length of the string form (HSTRLEN).
    pub fn str_len(self) -> usize {
        match self {
            Elem::Str(b) => b.len(),
            Elem::Int(n) => itoa::Buffer::new().format(n).len(),
        }
    }

    /// The integer the element stands for, if it is one.
    pub fn as_int(self) -> Option<i64> {
        match self {
            Elem::Int(n) => Some(n),
            Elem::Str(b) => parse_i64(b),
        }
    }
}

/// An element's entry, ready to write: a header (which holds all of an integer) and a
/// string's bytes, borrowed.
#[derive(Debug, Clone, Copy)]
pub struct Encoded<'a> {
    head: [u8; 9],
    head_len: u8,
    body: &'a [u8],
}

impl<'a> Encoded<'a> {
    /// The entry for `e`, in the shortest encoding that holds it. An `Elem::Str` is written
    /// as a string even if it spells an integer: callers pass [`Elem::of`] for canonical bytes.
    #[inline]
    pub fn of(e: Elem<'a>) -> Encoded<'a> {
        let mut head = [0u8; 9];
        let (head_len, body): (usize, &[u8]) = match e {
            Elem::Int(n) if (0..=127).contains(&n) => {
                head[0] = n as u8;
                (1, &[])
            }
            Elem::Int(n) if (INT13_MIN..=INT13_MAX).contains(&n) => {
                let raw = (n as u16) & 0x1FFF;
                head[0] = INT13 | (raw >> 8) as u8;
                head[1] = raw as u8;
                (2, &[])
            }
            Elem::Int(n) => {
                let (tag, width) = if i16::try_from(n).is_ok() {
                    (INT16, 2)
                } else if (INT24_MIN..=INT24_MAX).contains(&n) {
                    (INT24, 3)
                } else if i32::try_from(n).is_ok() {
                    (INT32, 4)
                } else {
                    (INT64, 8)
                };
                head[0] = tag;
                head[1..=width].copy_from_slice(&n.to_le_bytes()[..width]);
                (1 + width, &[])
            }
            Elem::Str(b) if b.len() < STR6_LIMIT => {
                head[0] = STR6 | b.len() as u8;
                (1, b)
            }
            Elem::Str(b) if b.len() < STR12_LIMIT => {
                head[0] = STR12 | (b.len() >> 8) as u8;
                head[1] = b.len() as u8;
                (2, b)
            }
            Elem::Str(b) => {
                head[0] = STR32;
                // Strings are limited by proto-max-bulk-len, far below 4 GiB.
                head[1..5].copy_from_slice(&(b.len() as u32).to_le_bytes());
                (5, b)
            }
        };
        Encoded { head, head_len: head_len as u8, body }
    }

    /// The encoding byte and what follows it up to a string's bytes (all of an integer).
    #[inline]
    pub fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    /// A string's bytes; empty for an integer.
    pub fn body(&self) -> &'a [u8] {
        self.body
    }

    /// Size of the entry (encoding and data, no back-length).
    #[allow(clippy::len_without_is_empty, reason = "an entry always has its encoding byte")]
    #[inline]
    pub fn len(&self) -> usize {
        usize::from(self.head_len) + self.body.len()
    }

    /// Whether `bytes` starts with this entry.
    #[inline]
    pub fn is_prefix_of(&self, bytes: &[u8]) -> bool {
        let head = self.head();
        bytes.starts_with(head) && bytes[head.len()..].starts_with(self.body)
    }

    /// Appends the entry.
    #[inline]
    pub fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head());
        out.extend_from_slice(self.body);
    }
}

/// Decodes the entry at `at`: the element and the offset just past its data. `None` when
/// the encoding byte is not one listpack defines or the entry runs past `buf`.
#[inline]
pub fn decode(buf: &[u8], at: usize) -> Option<(Elem<'_>, usize)> {
    let b = *buf.get(at)?;
    let bytes = |from: usize, n: usize| buf.get(from..from.checked_add(n)?);
    let int = |n: usize| -> Option<i64> {
        let raw = bytes(at + 1, n)?;
        let mut le = [0u8; 8];
        le[..n].copy_from_slice(raw);
        // Sign-extend from n bytes.
        let shift = 64 - 8 * n as u32;
        Some((i64::from_le_bytes(le) << shift) >> shift)
    };
    Some(match b {
        0x00..=0x7F => (Elem::Int(i64::from(b)), at + 1),
        0x80..=0xBF => {
            let n = usize::from(b & 0x3F);
            (Elem::Str(bytes(at + 1, n)?), at + 1 + n)
        }
        0xC0..=0xDF => {
            let raw = (u16::from(b & 0x1F) << 8) | u16::from(*buf.get(at + 1)?);
            // Sign-extend from 13 bits.
            (Elem::Int(i64::from(((raw << 3) as i16) >> 3)), at + 2)
        }
        0xE0..=0xEF => {
            let n = (usize::from(b & 0x0F) << 8) | usize::from(*buf.get(at + 1)?);
            (Elem::Str(bytes(at + 2, n)?), at + 2 + n)
        }
        STR32 => {
            let n = u32::from_le_bytes(bytes(at + 1, 4)?.try_into().ok()?) as usize;
            (Elem::Str(bytes(at + 5, n)?), at + 5 + n)
        }
        INT16 => (Elem::Int(int(2)?), at + 3),
        INT24 => (Elem::Int(int(3)?), at + 4),
        INT32 => (Elem::Int(int(4)?), at + 5),
        INT64 => (Elem::Int(int(8)?), at + 9),
        _ => return None,
    })
}

/// Whether `entry`, which decodes to `e`, is the bytes [`Encoded::of`] writes for the
/// element: an integer not spelled as a string, in its shortest header. A listpack from
/// outside may hold other forms, which Valkey reads but never writes.
#[inline]
pub fn is_canonical(entry: &[u8], e: Elem<'_>) -> bool {
    // Same element and same size means the same header: each encoding of an element has a
    // different size.
    e.canonical() == e && Encoded::of(e).len() == entry.len()
}

/// Bytes of the back-length written after an entry of `l` bytes (encoding and data).
#[inline]
pub fn backlen_size(l: usize) -> usize {
    match l {
        0..=127 => 1,
        128..16383 => 2,
        16383..2097151 => 3,
        2097151..268435455 => 4,
        _ => 5,
    }
}

/// Appends the back-length of an entry of `l` bytes.
#[inline]
pub fn write_backlen(l: usize, out: &mut Vec<u8>) {
    let n = backlen_size(l);
    // Most significant group first; every byte but the first carries the continuation bit,
    // so a reader walking backwards knows where the number ends.
    for i in (0..n).rev() {
        let group = ((l >> (7 * i)) & 127) as u8;
        out.push(if i == n - 1 { group } else { group | 128 });
    }
}

/// Reads a back-length whose last byte is at `p`; `None` past the start of `buf` or beyond
/// five bytes.
#[inline]
pub fn decode_backlen(buf: &[u8], mut p: usize) -> Option<usize> {
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

const STR6: u8 = 0x80;
const INT13: u8 = 0xC0;
const STR12: u8 = 0xE0;
const STR32: u8 = 0xF0;
const INT16: u8 = 0xF1;
const INT24: u8 = 0xF2;
const INT32: u8 = 0xF3;
const INT64: u8 = 0xF4;
const STR6_LIMIT: usize = 1 << 6;
const STR12_LIMIT: usize = 1 << 12;
const INT13_MIN: i64 = -(1 << 12);
const INT13_MAX: i64 = (1 << 12) - 1;
const INT24_MIN: i64 = -(1 << 23);
const INT24_MAX: i64 = (1 << 23) - 1;

/// Every integer at the edge of a width, and just outside it: the values the framings'
/// tests store.
#[cfg(test)]
pub(crate) fn width_boundaries() -> Vec<i64> {
    tests::INT_WIDTHS
        .iter()
        .flat_map(|&(lo, hi, _)| [lo.checked_sub(1), Some(lo), Some(hi), hi.checked_add(1)])
        .flatten()
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(e: Elem<'_>) -> Vec<u8> {
        let mut out = Vec::new();
        Encoded::of(e).write(&mut out);
        out
    }

    /// Each integer width (uint7, int13, int16, int24, int32, int64): its range and the
    /// size of its entries.
    pub(super) const INT_WIDTHS: [(i64, i64, usize); 6] = [
        (0, 127, 1),
        (INT13_MIN, INT13_MAX, 2),
        (i16::MIN as i64, i16::MAX as i64, 3),
        (INT24_MIN, INT24_MAX, 4),
        (i32::MIN as i64, i32::MAX as i64, 5),
        (i64::MIN, i64::MAX, 9),
    ];

    #[test]
    fn integers_take_the_shortest_width_and_round_trip() {
        for (lo, hi, size) in INT_WIDTHS {
            for n in [lo, hi] {
                let text = n.to_string();
                let e = Elem::of(text.as_bytes());
                assert_eq!(e, Elem::Int(n), "{n}");
                let bytes = entry(e);
                assert_eq!((bytes.len(), Encoded::of(e).len()), (size, size), "{n}");
                assert_eq!(decode(&bytes, 0), Some((Elem::Int(n), size)), "{n}");
                assert!(is_canonical(&bytes, e), "{n}");
                // One byte short is never an entry.
                assert_eq!(decode(&bytes[..size - 1], 0), None, "{n}");
            }
            // Just outside the range takes a wider entry (the ranges nest).
            for n in [lo.checked_sub(1), hi.checked_add(1)].into_iter().flatten() {
                let wider = Encoded::of(Elem::Int(n)).len();
                assert!(wider > size, "{n}: {wider} bytes");
                assert_eq!(decode(&entry(Elem::Int(n)), 0), Some((Elem::Int(n), wider)), "{n}");
            }
        }
    }

    #[test]
    fn integer_headers_match_valkey() {
        assert_eq!(entry(Elem::Int(5)), [0x05]);
        assert_eq!(entry(Elem::Int(-1)), [0xDF, 0xFF]);
        assert_eq!(entry(Elem::Int(4095)), [0xCF, 0xFF]);
        assert_eq!(entry(Elem::Int(-4096)), [0xD0, 0x00]);
        assert_eq!(entry(Elem::Int(-5000)), [0xF1, 0x78, 0xEC]);
        assert_eq!(entry(Elem::Int(100_000)), [0xF2, 0xA0, 0x86, 0x01]);
        assert_eq!(entry(Elem::Int(3_000_000_000))[0], 0xF4);
    }

    #[test]
    fn strings_at_every_length_boundary() {
        for (n, head) in [(0, 1), (1, 1), (63, 1), (64, 2), (4095, 2), (4096, 5), (70_000, 5)] {
            let s = vec![b'x'; n];
            let e = Elem::of(&s);
            let bytes = entry(e);
            assert_eq!(Encoded::of(e).head().len(), head, "{n}");
            assert_eq!(bytes.len(), head + n, "{n}");
            assert_eq!(decode(&bytes, 0), Some((Elem::Str(&s), head + n)), "{n}");
            assert!(is_canonical(&bytes, e));
            assert_eq!(decode(&bytes[..bytes.len() - 1], 0), None, "{n}: truncated");
        }
        assert_eq!(entry(Elem::Str(b"ab")), [0x82, b'a', b'b']);
        assert_eq!(&entry(Elem::Str(&[b'y'; 64]))[..2], [0xE0, 64]);
        assert_eq!(&entry(Elem::Str(&[b'y'; 4096]))[..5], [0xF0, 0, 0x10, 0, 0]);
    }

    #[test]
    fn non_canonical_entries_are_told_apart() {
        // "12" stored as a string, 5 as an int13, a short string behind a 12-bit length.
        let cases: [&[u8]; 3] = [&[0x82, b'1', b'2'], &[0xC0, 0x05], &[0xE0, 0x01, b'a']];
        for raw in cases {
            let (e, end) = decode(raw, 0).unwrap();
            assert_eq!(end, raw.len());
            assert!(!is_canonical(raw, e), "{raw:?}");
        }
        assert!(is_canonical(&[0x82, b'-', b'0'], Elem::Str(b"-0")), "-0 is not an integer");
    }

    #[test]
    fn backlen_boundaries_round_trip() {
        for l in [0, 127, 128, 16382, 16383, 2097150, 2097151, 268435454, 268435455, u32::MAX as usize] {
            let mut out = vec![0xAA];
            write_backlen(l, &mut out);
            assert_eq!(out.len() - 1, backlen_size(l), "{l}");
            assert_eq!(decode_backlen(&out, out.len() - 1), Some(l), "{l}");
        }
        assert_eq!(decode_backlen(&[0x80, 0x80], 1), None, "runs off the start");
        assert_eq!(decode_backlen(&[0x81; 6], 5), None, "more than five bytes");
        assert_eq!(decode_backlen(&[], 0), None);
    }

    #[test]
    fn elem_helpers() {
        assert_eq!(Elem::Int(-120).str_len(), 4);
        assert_eq!(Elem::Str(b"abc").str_len(), 3);
        assert_eq!(Elem::Int(42).to_vec(), b"42");
        assert_eq!(Elem::Str(b"12").as_int(), Some(12));
        assert_eq!(Elem::Str(b"x").as_int(), None);
        assert!(Elem::Int(-7).eq_bytes(b"-7") && !Elem::Int(7).eq_bytes(b"07"));
        assert_eq!(Elem::Str(b"-12").canonical(), Elem::Int(-12));
    }

    proptest::proptest! {
        #[test]
        fn decoding_arbitrary_bytes_never_panics(
            mut buf in proptest::collection::vec(proptest::num::u8::ANY, 0..48),
            // Most random first bytes are short entries; force the long-string and int64
            // headers, whose lengths could claim far more than the buffer holds.
            head in proptest::option::of(proptest::sample::select(vec![0xF0u8, 0xE0, 0xEF, 0xF4, 0xF5, 0xFF])),
        ) {
            if let (Some(h), Some(first)) = (head, buf.first_mut()) {
                *first = h;
            }
            for at in 0..=buf.len() + 1 {
                if let Some((e, end)) = decode(&buf, at) {
                    proptest::prop_assert!(end > at && end <= buf.len());
                    if let Elem::Str(s) = e {
                        proptest::prop_assert!(s.len() < end - at);
                    }
                }
                if let Some(l) = decode_backlen(&buf, at) {
                    proptest::prop_assert!(l < 1 << 35);
                }
            }
        }
    }
}
