//! Packed sequences: the compact encoding of small hashes and sets (Valkey's `listpack`).
//!
//! All elements live back to back in one allocation of exactly their size, so a hash of ten
//! short fields costs one small allocation instead of twenty strings and a table. Each element
//! uses listpack's element encodings — a canonical decimal integer is stored as a 1-9 byte
//! integer, a string as a 1, 2 or 5 byte length then its bytes — but without listpack's
//! back-length byte, because nothing here walks backwards.
//!
//! The encoding is canonical: a given string always encodes to the same bytes (an integer
//! exactly when [`parse_i64`] accepts it, the shortest header otherwise). Looking an element up
//! is therefore a byte comparison of encoded forms, with no decoding of the candidates.
//!
//! Operations are O(N) in the number of elements, as a listpack's are; the thresholds that
//! convert a collection to its table encoding keep N small.
//!
//! Why not store hashes and sets as real listpacks ([`crate::types::listpack`]), as lists and
//! sorted sets are? Header, terminator and back-lengths cost 7 + N bytes, which crosses a
//! jemalloc size class for most small values: measured with MEMORY USAGE, 9–44% more per
//! small hash or set (a 2-field hash 80 → 96 bytes, 10 fields 176 → 224, a 10-member set
//! 176 → 192). DUMP does not need it either: [`Packed::write_listpack`] adds the missing
//! bytes while copying, so a packed hash still dumps as `HASH_LISTPACK` without re-encoding.

use hotkv_protocol::{ReplyBuf, parse_i64};

use crate::object::size_class;
use crate::types::listpack::{backlen_size, write_backlen};

/// One element of a collection, borrowed: a string, or an integer stored in binary form
/// (which stands for its decimal string).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Elem<'a> {
    /// String bytes.
    Str(&'a [u8]),
    /// A canonical decimal integer.
    Int(i64),
}

impl<'a> Elem<'a> {
    /// The element for `bytes`: an integer when the bytes are a canonical decimal integer.
    pub fn of(bytes: &'a [u8]) -> Elem<'a> {
        match parse_i64(bytes) {
            Some(n) => Elem::Int(n),
            None => Elem::Str(bytes),
        }
    }

    /// Writes the element as a bulk string.
    pub fn reply(self, out: &mut ReplyBuf) {
        match self {
            Elem::Str(b) => out.bulk(b),
            Elem::Int(n) => out.bulk_int(n),
        }
    }

    /// Calls `f` with the element's string form.
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

/// A sequence of elements in one exactly-sized allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packed {
    buf: Box<[u8]>,
    len: u32,
}

impl Packed {
    /// An empty sequence (allocates nothing).
    pub fn new() -> Packed {
        Packed::default()
    }

    /// Builds a sequence from elements in one allocation.
    pub fn from_elems<'e>(elems: impl IntoIterator<Item = Elem<'e>> + Clone) -> Packed {
        let size: usize = elems.clone().into_iter().map(|e| Encoded::of(e).len()).sum();
        let mut buf = Vec::with_capacity(size);
        let mut len = 0u32;
        for e in elems {
            Encoded::of(e).write(&mut buf);
            len += 1;
        }
        Packed { buf: buf.into_boxed_slice(), len }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Encoded size in bytes.
    pub fn bytes(&self) -> usize {
        self.buf.len()
    }

    /// Heap bytes, rounded to the allocator's size class.
    pub fn heap_bytes(&self) -> usize {
        if self.buf.is_empty() { 0 } else { size_class(self.buf.len()) }
    }

    /// The elements in order.
    pub fn iter(&self) -> Iter<'_> {
        Iter { buf: &self.buf, at: 0 }
    }

    /// The element at byte offset `at` (the start of an element) and the offset after it.
    pub fn at(&self, at: usize) -> (Elem<'_>, usize) {
        // Invariant: buffers are only built by `Encoded::write` or validated by
        // `from_listpack`, and callers pass offsets of element starts.
        decode(&self.buf, at).expect("packed buffer holds well-formed elements")
    }

    /// Byte offsets of every `stride`-th element's start (0, stride, 2*stride, ...): one pass,
    /// after which any element is reachable in O(1) (random sampling).
    pub fn offsets(&self, stride: usize) -> Vec<u32> {
        let mut out = Vec::with_capacity(self.len() / stride.max(1));
        let mut at = 0;
        let mut i = 0;
        while at < self.buf.len() {
            if i % stride == 0 {
                out.push(at as u32);
            }
            at = self.at(at).1;
            i += 1;
        }
        out
    }

    /// The offset of the first element equal to `needle` among elements 0, stride,
    /// 2*stride, ... (stride 2 searches the fields of a hash and skips its values).
    pub fn find(&self, needle: &[u8], stride: usize) -> Option<usize> {
        let enc = Encoded::of(Elem::of(needle));
        let head = enc.head();
        let mut at = 0;
        let mut i = 0;
        while at < self.buf.len() {
            if i % stride == 0 {
                let rest = &self.buf[at..];
                if rest.starts_with(head) && rest[head.len()..].starts_with(enc.body) {
                    return Some(at);
                }
            }
            at = self.at(at).1;
            i += 1;
        }
        None
    }

    /// Appends elements, growing the allocation once.
    pub fn push(&mut self, elems: &[Elem<'_>]) {
        let extra: usize = elems.iter().map(|e| Encoded::of(*e).len()).sum();
        self.edit(|v| {
            v.reserve_exact(extra);
            for e in elems {
                Encoded::of(*e).write(v);
            }
        });
        self.len += elems.len() as u32;
    }

    /// Replaces the element starting at offset `at` with `elem`.
    pub fn replace(&mut self, at: usize, elem: Elem<'_>) {
        let end = self.at(at).1;
        let enc = Encoded::of(elem);
        let mut bytes = Vec::with_capacity(enc.len());
        enc.write(&mut bytes);
        self.edit(|v| {
            v.reserve_exact(bytes.len().saturating_sub(end - at));
            v.splice(at..end, bytes);
        });
    }

    /// Removes `n` consecutive elements starting at offset `at`.
    pub fn remove(&mut self, at: usize, n: usize) {
        let mut end = at;
        for _ in 0..n {
            end = self.at(end).1;
        }
        self.edit(|v| {
            v.drain(at..end);
        });
        self.len -= n as u32;
    }

    /// Decodes a listpack blob from an RDB payload (Valkey's `HASH_LISTPACK`/`SET_LISTPACK`),
    /// checking every length against the blob. Elements are re-encoded canonically.
    pub fn from_listpack(blob: &[u8]) -> Option<Packed> {
        let total = u32::from_le_bytes(blob.get(0..4)?.try_into().ok()?) as usize;
        let count = u16::from_le_bytes(blob.get(4..6)?.try_into().ok()?);
        if total != blob.len() || blob.last() != Some(&LP_END) {
            return None;
        }
        let body = &blob[..blob.len() - 1];
        let mut elems = Vec::new();
        let mut at = 6;
        while at < body.len() {
            let (e, next) = decode(body, at)?;
            // The back-length that follows each listpack entry: the entry's size in 7-bit
            // groups.
            let back = backlen_size(next - at);
            at = next.checked_add(back).filter(|&n| n <= body.len())?;
            elems.push(match e {
                Elem::Str(b) => Elem::of(b),
                e => e,
            });
        }
        if count != LP_COUNT_UNKNOWN && usize::from(count) != elems.len() {
            return None;
        }
        Some(Packed::from_elems(elems))
    }

    /// Size of this sequence written as a listpack by [`Packed::write_listpack`].
    pub fn listpack_bytes(&self) -> usize {
        LP_HEADER + self.spans().map(|l| l + backlen_size(l)).sum::<usize>() + 1
    }

    /// Appends this sequence as a listpack blob (RDB `HASH_LISTPACK`). Every element is
    /// already encoded as a listpack entry is, so this copies each one and adds what the
    /// packed form leaves out: the header, a back-length per entry and the terminator. Nothing
    /// is decoded or re-encoded.
    pub fn write_listpack(&self, out: &mut Vec<u8>) {
        let total = self.listpack_bytes();
        out.reserve(total);
        out.extend_from_slice(&(total as u32).to_le_bytes());
        // 65535 itself means "unknown, walk the entries", as for any count above it.
        let count = u16::try_from(self.len).unwrap_or(LP_COUNT_UNKNOWN);
        out.extend_from_slice(&count.to_le_bytes());
        let mut at = 0;
        for l in self.spans() {
            out.extend_from_slice(&self.buf[at..at + l]);
            write_backlen(l, out);
            at += l;
        }
        out.push(LP_END);
    }

    /// The encoded size of each element, in order.
    fn spans(&self) -> impl Iterator<Item = usize> + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let (_, next) = decode(&self.buf, at)?;
            let l = next - at;
            at = next;
            Some(l)
        })
    }

    /// Runs `f` on the buffer as a vector and stores it back exactly sized.
    fn edit(&mut self, f: impl FnOnce(&mut Vec<u8>)) {
        let mut v = std::mem::take(&mut self.buf).into_vec();
        f(&mut v);
        self.buf = v.into_boxed_slice();
    }
}

/// The elements of a [`Packed`], in order.
#[derive(Clone)]
pub struct Iter<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Iterator for Iter<'a> {
    type Item = Elem<'a>;

    fn next(&mut self) -> Option<Elem<'a>> {
        if self.at >= self.buf.len() {
            return None;
        }
        let (e, next) = decode(self.buf, self.at).expect("packed buffer holds well-formed elements");
        self.at = next;
        Some(e)
    }
}

/// An element's encoding: a header (which holds all of an integer) and a string's bytes.
struct Encoded<'a> {
    head: [u8; 9],
    head_len: u8,
    body: &'a [u8],
}

impl<'a> Encoded<'a> {
    fn of(e: Elem<'a>) -> Encoded<'a> {
        let mut head = [0u8; 9];
        let (head_len, body): (usize, &[u8]) = match e {
            Elem::Int(n) if (0..=127).contains(&n) => {
                head[0] = n as u8;
                (1, &[])
            }
            Elem::Int(n) if (-4096..=4095).contains(&n) => {
                let raw = (n as u16) & 0x1FFF;
                head[0] = INT13 | (raw >> 8) as u8;
                head[1] = raw as u8;
                (2, &[])
            }
            Elem::Int(n) => {
                let (tag, width) = if i16::try_from(n).is_ok() {
                    (INT16, 2)
                } else if (-(1 << 23)..(1 << 23)).contains(&n) {
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
            Elem::Str(b) if b.len() < 64 => {
                head[0] = STR6 | b.len() as u8;
                (1, b)
            }
            Elem::Str(b) if b.len() < 4096 => {
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

    fn head(&self) -> &[u8] {
        &self.head[..usize::from(self.head_len)]
    }

    fn len(&self) -> usize {
        usize::from(self.head_len) + self.body.len()
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(self.head());
        out.extend_from_slice(self.body);
    }
}

/// Decodes the element at `at`, checking bounds; returns it and the offset after it.
fn decode(buf: &[u8], at: usize) -> Option<(Elem<'_>, usize)> {
    let b = *buf.get(at)?;
    let bytes = |from: usize, n: usize| buf.get(from..from.checked_add(n)?);
    let int = |from: usize, n: usize| -> Option<i64> {
        let raw = bytes(from, n)?;
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
        INT16 => (Elem::Int(int(at + 1, 2)?), at + 3),
        INT24 => (Elem::Int(int(at + 1, 3)?), at + 4),
        INT32 => (Elem::Int(int(at + 1, 4)?), at + 5),
        INT64 => (Elem::Int(int(at + 1, 8)?), at + 9),
        _ => return None,
    })
}

const STR6: u8 = 0x80;
const INT13: u8 = 0xC0;
const STR12: u8 = 0xE0;
const STR32: u8 = 0xF0;
const INT16: u8 = 0xF1;
const INT24: u8 = 0xF2;
const INT32: u8 = 0xF3;
const INT64: u8 = 0xF4;
const LP_END: u8 = 0xFF;
/// A listpack's header: total bytes (u32 LE) and count (u16 LE).
const LP_HEADER: usize = 6;
const LP_COUNT_UNKNOWN: u16 = u16::MAX;

#[cfg(test)]
mod tests {
    use super::*;

    fn strs(p: &Packed) -> Vec<Vec<u8>> {
        p.iter().map(Elem::to_vec).collect()
    }

    #[test]
    fn writes_a_listpack_that_validates_with_every_entry_size() {
        let sizes = [0, 1, 63, 64, 127, 128, 4095, 4096, 16383, 16384, 20000];
        let mut elems: Vec<Vec<u8>> = sizes.iter().map(|&n| vec![b'x'; n]).collect();
        elems.extend(
            ["0", "127", "-4096", "4095", "32767", "-8388608", "2147483647", "-9223372036854775808"]
                .map(|s| s.as_bytes().to_vec()),
        );
        let p = Packed::from_elems(elems.iter().map(|e| Elem::of(e)));
        let mut blob = vec![0xAA];
        p.write_listpack(&mut blob);
        assert_eq!(blob.len() - 1, p.listpack_bytes());
        let lp = crate::types::listpack::Listpack::from_bytes(blob[1..].to_vec()).expect("a valid listpack");
        assert_eq!(lp.iter().map(|v| v.to_vec()).collect::<Vec<_>>(), elems);
        assert_eq!(Packed::from_listpack(&blob[1..]).map(|q| strs(&q)), Some(elems));
    }

    #[test]
    fn integers_round_trip_at_every_width_boundary() {
        let values: Vec<i64> = vec![
            0,
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
            (1 << 23) - 1,
            -(1 << 23),
            1 << 23,
            i32::MAX as i64,
            i32::MIN as i64,
            i32::MAX as i64 + 1,
            i64::MAX,
            i64::MIN,
        ];
        let texts: Vec<String> = values.iter().map(i64::to_string).collect();
        let p = Packed::from_elems(texts.iter().map(|t| Elem::of(t.as_bytes())));
        assert_eq!(p.len(), values.len());
        let back: Vec<i64> = p.iter().map(|e| e.as_int().unwrap()).collect();
        assert_eq!(back, values);
        assert!(p.iter().all(|e| matches!(e, Elem::Int(_))));
        for t in &texts {
            assert!(p.find(t.as_bytes(), 1).is_some(), "{t}");
        }
    }

    #[test]
    fn non_canonical_integers_stay_strings() {
        let items: [&[u8]; 5] = [b"007", b"-0", b"+1", b" 1", b"99999999999999999999"];
        let p = Packed::from_elems(items.iter().map(|b| Elem::of(b)));
        assert!(p.iter().all(|e| matches!(e, Elem::Str(_))));
        assert_eq!(p.find(b"7", 1), None);
        assert_eq!(p.find(b"0", 1), None);
        assert!(p.find(b"-0", 1).is_some());
    }

    #[test]
    fn strings_at_header_boundaries() {
        let lens = [0usize, 1, 63, 64, 4095, 4096, 70_000];
        let items: Vec<Vec<u8>> = lens.iter().map(|&n| vec![b'x'; n]).collect();
        let p = Packed::from_elems(items.iter().map(|b| Elem::of(b)));
        assert_eq!(strs(&p), items);
        let header: usize = [1, 1, 1, 2, 2, 5, 5].iter().sum();
        assert_eq!(p.bytes(), header + lens.iter().sum::<usize>());
    }

    #[test]
    fn find_with_stride_skips_values() {
        let mut p = Packed::new();
        p.push(&[Elem::of(b"f1"), Elem::of(b"v1"), Elem::of(b"v1"), Elem::of(b"f1")]);
        let at = p.find(b"v1", 2).expect("second pair's field");
        assert_eq!(p.at(at).0, Elem::Str(b"v1"));
        assert_eq!(p.at(p.at(at).1).0, Elem::Str(b"f1"));
        assert_eq!(p.find(b"f1", 2), Some(0));
    }

    #[test]
    fn replace_and_remove_keep_the_buffer_exact() {
        let mut p = Packed::from_elems([Elem::of(b"a"), Elem::of(b"1"), Elem::of(b"b"), Elem::of(b"2")]);
        let at = p.find(b"1", 1).unwrap();
        p.replace(at, Elem::of(b"a much longer value"));
        assert_eq!(strs(&p), [&b"a"[..], b"a much longer value", b"b", b"2"]);
        p.replace(at, Elem::of(b"-5000"));
        assert_eq!(strs(&p), [&b"a"[..], b"-5000", b"b", b"2"]);
        p.remove(0, 2);
        assert_eq!((p.len(), strs(&p)), (2, vec![b"b".to_vec(), b"2".to_vec()]));
        assert_eq!(p.bytes(), 3);
        p.remove(0, 2);
        assert!(p.is_empty() && p.bytes() == 0 && p.heap_bytes() == 0);
    }

    #[test]
    fn offsets_reach_every_element() {
        let p = Packed::from_elems([b"a".as_slice(), b"10000", b"ccc", b"-1", b""].map(Elem::of));
        let all = p.offsets(1);
        let pairs = p.offsets(2);
        assert_eq!(all.len(), 5);
        assert_eq!(pairs.len(), 3);
        assert_eq!(p.at(all[3] as usize).0, Elem::Int(-1));
        assert_eq!(p.at(pairs[1] as usize).0, Elem::Str(b"ccc"));
    }

    #[test]
    fn reads_a_listpack_redis_wrote() {
        // The listpack of hash {f: v} from Redis 7.0 (cluster client contract, section 4).
        let blob = [0x0d, 0, 0, 0, 0x02, 0x00, 0x81, b'f', 0x02, 0x81, b'v', 0x02, 0xff];
        let p = Packed::from_listpack(&blob).unwrap();
        assert_eq!(strs(&p), [b"f", b"v"]);
        // Truncated, wrong total, wrong count, missing terminator.
        assert!(Packed::from_listpack(&blob[..12]).is_none());
        let mut bad = blob;
        bad[0] = 0x0e;
        assert!(Packed::from_listpack(&bad).is_none());
        let mut bad = blob;
        bad[4] = 3;
        assert!(Packed::from_listpack(&bad).is_none());
        let mut bad = blob;
        bad[12] = 0;
        assert!(Packed::from_listpack(&bad).is_none());
        let mut unknown = blob;
        unknown[4] = 0xff;
        unknown[5] = 0xff;
        assert!(Packed::from_listpack(&unknown).is_some(), "65535 means not counted");
    }

    #[test]
    fn elem_helpers() {
        assert_eq!(Elem::Int(-120).str_len(), 4);
        assert_eq!(Elem::Str(b"abc").str_len(), 3);
        assert_eq!(Elem::Int(42).to_vec(), b"42");
        assert_eq!(Elem::Str(b"12").as_int(), Some(12));
        assert_eq!(Elem::Str(b"x").as_int(), None);
    }
}
