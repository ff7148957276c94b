//! Packed sequences: the compact encoding of small hashes and sets (Valkey's `listpack`).
//!
//! All elements live back to back in one allocation of exactly their size, so a hash of ten
//! short fields costs one small allocation instead of twenty strings and a table. Each element
//! is a listpack entry ([`crate::types::lpentry`], the codec [`crate::types::listpack`] uses
//! too) — a canonical decimal integer as a 1-9 byte integer, a string as a 1, 2 or 5 byte
//! length then its bytes — framed differently: no header, no terminator and no back-length
//! after each entry, because nothing here walks backwards.
//!
//! The encoding is canonical ([`Elem::of`], [`Encoded::of`]), so looking an element up is a
//! byte comparison of encoded forms, with no decoding of the candidates.
//!
//! Operations are O(N) in the number of elements, as a listpack's are; the thresholds that
//! convert a collection to its table encoding keep N small.
//!
//! Why not store hashes and sets in the listpack framing, as lists and sorted sets are?
//! Header, terminator and back-lengths cost 7 + N bytes, which crosses a jemalloc size class
//! for most small values: measured with MEMORY USAGE, 9–44% more per small hash or set (a
//! 2-field hash 80 → 96 bytes, 10 fields 176 → 224, a 10-member set 176 → 192). DUMP and
//! RESTORE do not need it either, since the entries are the same bytes in both framings:
//! [`Packed::write_listpack`] copies them and adds the framing, so a packed hash dumps as
//! `HASH_LISTPACK` without re-encoding, and [`Packed::from_listpack`] copies them out of a
//! checked blob, re-encoding only entries Valkey would not have written (an integer spelled
//! as a string, a longer header than needed).

use crate::object::size_class;
use crate::types::listpack;
use crate::types::lpentry::{Elem, Encoded, decode, is_canonical};

/// A sequence of elements in one exactly-sized allocation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Packed {
    buf: Box<[u8]>,
    len: u32,
    /// A byte that is always 0 and so leaves 255 spare bit patterns: an enum holding a
    /// `Packed` and more than one other boxed variant ([`crate::types::hash::Hash`]) keeps its
    /// tag there instead of growing by a word.
    niche: Niche,
}

/// See [`Packed`]'s `niche` field.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(u8)]
enum Niche {
    #[default]
    Zero = 0,
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
        Packed { buf: buf.into_boxed_slice(), len, niche: Niche::Zero }
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
        let mut at = 0;
        let mut i = 0;
        while at < self.buf.len() {
            if i % stride == 0 && enc.is_prefix_of(&self.buf[at..]) {
                return Some(at);
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

    /// Takes the elements of a listpack blob from an RDB payload (Valkey's
    /// `HASH_LISTPACK`/`SET_LISTPACK`), checked from header to terminator. Entries are copied
    /// as they are; only one in a form [`Encoded::of`] does not write is re-encoded, so that
    /// lookups by encoded bytes find it.
    pub fn from_listpack(blob: &[u8]) -> Option<Packed> {
        // The entries are the blob less its framing: never more bytes than the blob.
        let mut buf = Vec::with_capacity(blob.len());
        let n = listpack::walk(blob, |entry, e| {
            if is_canonical(entry, e) {
                buf.extend_from_slice(entry);
            } else {
                Encoded::of(e.canonical()).write(&mut buf);
            }
        })
        .ok()?;
        Some(Packed { buf: buf.into_boxed_slice(), len: u32::try_from(n).ok()?, niche: Niche::Zero })
    }

    /// Size of this sequence written as a listpack by [`Packed::write_listpack`].
    pub fn listpack_bytes(&self) -> usize {
        listpack::framed_size(self.entries().map(<[u8]>::len))
    }

    /// Appends this sequence as a listpack blob (RDB `HASH_LISTPACK`). Every element is
    /// already a listpack entry, so this copies each one and adds what the packed form leaves
    /// out: the header, a back-length per entry and the terminator. Nothing is decoded or
    /// re-encoded.
    pub fn write_listpack(&self, out: &mut Vec<u8>) {
        listpack::write_framed(self.entries(), out);
    }

    /// Each element's entry bytes, in order.
    fn entries(&self) -> impl Iterator<Item = &[u8]> + Clone + '_ {
        let mut at = 0;
        std::iter::from_fn(move || {
            let (_, next) = decode(&self.buf, at)?;
            let entry = &self.buf[at..next];
            at = next;
            Some(entry)
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
        let values = crate::types::lpentry::width_boundaries();
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
    fn reads_entries_valkey_writes_as_they_are_and_canonicalises_the_rest() {
        let p = Packed::from_elems([b"f".as_slice(), b"-5000", b"a string", b"7"].map(Elem::of));
        let mut blob = Vec::new();
        p.write_listpack(&mut blob);
        let q = Packed::from_listpack(&blob).unwrap();
        assert_eq!(q.buf, p.buf, "the entries, copied");
        assert_eq!(q.len(), 4);
        // "12" as a string entry, 5 as an int13, "x" behind a 12-bit length: a listpack Valkey
        // reads but would not write. Each is stored in the form lookups expect.
        let odd: [&[u8]; 3] = [&[0x82, b'1', b'2'], &[0xC0, 0x05], &[0xE0, 0x01, b'x']];
        let mut blob = Vec::new();
        listpack::write_framed(odd.into_iter(), &mut blob);
        let q = Packed::from_listpack(&blob).unwrap();
        assert_eq!(q.iter().collect::<Vec<_>>(), [Elem::Int(12), Elem::Int(5), Elem::Str(b"x")]);
        assert_eq!(q, Packed::from_elems([b"12".as_slice(), b"5", b"x"].map(Elem::of)));
        assert!(q.find(b"12", 1).is_some() && q.find(b"5", 1).is_some());
    }

    #[test]
    fn refuses_a_wrong_back_length() {
        let blob = [0x0d, 0, 0, 0, 0x02, 0x00, 0x81, b'f', 0x03, 0x81, b'v', 0x02, 0xff];
        assert!(Packed::from_listpack(&blob).is_none());
    }

    proptest::proptest! {
        #[test]
        fn reading_arbitrary_or_damaged_listpacks_never_panics(
            junk in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
            flips in proptest::collection::vec((0usize..256, proptest::num::u8::ANY), 1..4),
        ) {
            let _ = Packed::from_listpack(&junk);
            let good = Packed::from_elems([b"field".as_slice(), b"300", b"-1", &[b'z'; 70], b""].map(Elem::of));
            let mut blob = Vec::new();
            good.write_listpack(&mut blob);
            for (at, x) in flips {
                let i = at % blob.len();
                blob[i] ^= x;
            }
            if let Some(p) = Packed::from_listpack(&blob) {
                // Whatever was accepted is well formed: it walks, and it dumps as a listpack
                // that reads back the same.
                let elems: Vec<Vec<u8>> = strs(&p);
                proptest::prop_assert_eq!(elems.len(), p.len());
                let mut again = Vec::new();
                p.write_listpack(&mut again);
                proptest::prop_assert_eq!(Packed::from_listpack(&again), Some(p));
            }
        }
    }
}
