//! LZF compression, the format Redis uses for RDB strings when `rdbcompression` is on.
//!
//! The decompressor lives beside the other decoders in `rdb.rs`; this is the other half.
//! The output is LZF's plain format: literal runs (`ctrl < 32`: `ctrl + 1` bytes follow) and
//! back references (length in the top three bits, extended by a byte when 7, then a 13-bit
//! distance). Any compressor that emits it is valid; this one is the greedy single-probe hash
//! search liblzf uses, so ratios land close to redis-server's.

/// Appends `input` compressed to `out`; false (and `out` as it was) when the result would be
/// longer than `max_out` bytes (Redis keeps a string uncompressed unless it saves at least 4
/// bytes, see [`compress_string_into`]). Allocates nothing beyond `out`'s growth.
pub(crate) fn compress_into(out: &mut Vec<u8>, input: &[u8], max_out: usize) -> bool {
    // The hash table is reused from string to string and cleared only when its position
    // counter wraps: zeroing 64 KiB for every string of a save made a BGSAVE of a million
    // small strings 34 times slower than redis-server's. Entries are positions past a
    // per-thread base that grows by each string's length, so entries of earlier strings read
    // as empty: the output depends on the input alone, which MIGRATE relies on when it
    // compares a key's payload with the one it sent.
    TABLE.with(|t| {
        let mut t = t.borrow_mut();
        let Some(base) = t.reserve(input.len()) else { return false };
        let start = out.len();
        let ok = compress_with(&mut t.slots, base, out, input, max_out);
        if !ok {
            out.truncate(start);
        }
        ok
    })
}

/// [`compress_into`] into a new vector (tests and callers without a buffer of their own).
#[cfg(test)]
pub(crate) fn compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    compress_into(&mut out, input, max_out).then_some(out)
}

/// Redis's rule (`rdbSaveRawString`, `rdbSaveLzfStringObject`): strings longer than 20 bytes
/// are compressed when that saves at least 4 bytes. Appends the compressed bytes to `out` and
/// returns true then.
pub(crate) fn compress_string_into(out: &mut Vec<u8>, s: &[u8]) -> bool {
    s.len() > COMPRESS_ABOVE && compress_into(out, s, s.len() - 4)
}

/// [`compress_string_into`] into a new vector.
#[cfg(test)]
pub(crate) fn compress_string(s: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    compress_string_into(&mut out, s).then_some(out)
}

thread_local! {
    static TABLE: std::cell::RefCell<Table> = std::cell::RefCell::new(Table {
        slots: Box::new([0u32; 1 << HASH_BITS]),
        base: 0,
    });
}

/// A fixed size lets the compiler drop the bounds checks of the hash lookups.
type Slots = [u32; 1 << HASH_BITS];

/// The last position at which each 3-byte hash was seen, as `base + position + 1`.
struct Table {
    slots: Box<Slots>,
    /// Every entry at or below it belongs to an earlier string.
    base: u32,
}

impl Table {
    /// The base for a string of `n` bytes, moving the next string's past it; `None` for a
    /// string too long to index in 32 bits (over 4 GiB: kept uncompressed).
    fn reserve(&mut self, n: usize) -> Option<u32> {
        let n = u32::try_from(n).ok().filter(|&n| n < u32::MAX)?;
        if self.base.checked_add(n + 1).is_none() {
            self.slots.fill(0);
            self.base = 0;
        }
        let base = self.base;
        self.base += n + 1;
        Some(base)
    }
}

fn compress_with(table: &mut Slots, base: u32, out: &mut Vec<u8>, input: &[u8], max_out: usize) -> bool {
    let n = input.len();
    let start = out.len();
    out.reserve(max_out.min(n + n / 32 + 1));
    let mut lit_start = 0;
    let mut ip = 0;
    // The 3 bytes at `ip`, kept rolling so each step loads one new byte.
    let mut v = if n >= MIN_MATCH { three(input, 0) >> 8 } else { 0 };
    while ip + MIN_MATCH <= n {
        v = ((v << 8) | u32::from(input[ip + 2])) & 0xFF_FFFF;
        let h = hash(v);
        let seen = table[h];
        // `ip < n < u32::MAX - base` (see `Table::reserve`): no overflow.
        table[h] = base + ip as u32 + 1;
        if seen > base {
            let r = (seen - base - 1) as usize;
            let dist = ip - r;
            if dist <= MAX_DISTANCE && three(input, r) == v {
                let len =
                    MIN_MATCH + common_prefix(&input[r + MIN_MATCH..], &input[ip + MIN_MATCH..(ip + MAX_MATCH).min(n)]);
                literals(out, &input[lit_start..ip]);
                backref(out, len, dist - 1);
                if out.len() - start > max_out {
                    return false;
                }
                // Index the last two positions the match covered, as liblzf's VERY_FAST
                // build (Redis's) does: every position cost twice the time on text for a
                // ratio a few percent better.
                for k in (ip + len).saturating_sub(2).max(ip + 1)..(ip + len).min(n.saturating_sub(MIN_MATCH - 1)) {
                    table[hash(three(input, k))] = base + k as u32 + 1;
                }
                ip += len;
                lit_start = ip;
                if ip + MIN_MATCH <= n {
                    v = three(input, ip) >> 8;
                }
                continue;
            }
        }
        ip += 1;
    }
    literals(out, &input[lit_start..]);
    out.len() - start <= max_out
}

/// How many leading bytes `a` and `b` share (at most `b.len()`), eight at a time.
fn common_prefix(a: &[u8], b: &[u8]) -> usize {
    let limit = b.len().min(a.len());
    let mut i = 0;
    while i + 8 <= limit {
        let x = u64::from_le_bytes(a[i..i + 8].try_into().unwrap_or_default());
        let y = u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let diff = x ^ y;
        if diff != 0 {
            return i + (diff.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while i < limit && a[i] == b[i] {
        i += 1;
    }
    i
}

/// The 3 bytes at `i` as one number, first byte highest.
fn three(b: &[u8], i: usize) -> u32 {
    (u32::from(b[i]) << 16) | (u32::from(b[i + 1]) << 8) | u32::from(b[i + 2])
}

fn hash(v: u32) -> usize {
    (v.wrapping_mul(2_654_435_761) >> (32 - HASH_BITS)) as usize
}

fn literals(out: &mut Vec<u8>, mut run: &[u8]) {
    while !run.is_empty() {
        let take = run.len().min(MAX_LITERAL);
        out.push((take - 1) as u8);
        out.extend_from_slice(&run[..take]);
        run = &run[take..];
    }
}

/// A reference to `len` bytes starting `off + 1` bytes back.
fn backref(out: &mut Vec<u8>, len: usize, off: usize) {
    let l = len - 2;
    let high = (off >> 8) as u8;
    if l < 7 {
        out.push(((l as u8) << 5) | high);
    } else {
        out.push((7 << 5) | high);
        out.push((l - 7) as u8);
    }
    out.push(off as u8);
}

/// Redis compresses only strings longer than this.
pub(crate) const COMPRESS_ABOVE: usize = 20;
const HASH_BITS: u32 = 14;
const MIN_MATCH: usize = 3;
/// 2 + 7 + 255: the longest length a back reference can say.
const MAX_MATCH: usize = 264;
/// 13 bits of distance, counted from 1.
const MAX_DISTANCE: usize = 1 << 13;
const MAX_LITERAL: usize = 32;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdb::lzf_decompress;

    fn round_trip(data: &[u8]) -> usize {
        let c = compress(data, usize::MAX).unwrap();
        assert_eq!(lzf_decompress(&c, data.len()).unwrap(), data, "len {}", data.len());
        c.len()
    }

    #[test]
    fn a_table_left_by_longer_strings_never_makes_a_wrong_reference() {
        // Long strings fill the shared table with positions far beyond a short one's end,
        // and with the same 3-byte prefixes at other places; the short ones must still round
        // trip exactly.
        let long: Vec<u8> = (0..60_000u32).map(|i| b"key:value:"[(i % 10) as usize] ^ (i / 7000) as u8).collect();
        round_trip(&long);
        for s in [&b"key:value:key:value:xyz"[..], b"value:key:value:key:value", b"kkkkkkkkkkkkkkkkkkkkkkkkkkk"] {
            round_trip(s);
            round_trip(&long);
        }
    }

    #[test]
    fn everything_round_trips_through_the_decompressor() {
        let mut seed = 0x1234_5678_u64;
        let mut rnd = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        round_trip(b"");
        round_trip(b"a");
        round_trip(b"abcabcabcabcabcabcabcabcabc");
        round_trip(&[b'x'; 100_000]);
        for len in [1, 2, 3, 4, 31, 32, 33, 263, 264, 265, 8191, 8192, 8193, 20_000, 70_000] {
            // Random, low-entropy and repetitive-with-noise data of each length.
            let random: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
            let small: Vec<u8> = (0..len).map(|_| b'a' + (rnd() % 3) as u8).collect();
            let text: Vec<u8> =
                (0..len).map(|i| b"hello world, hello hotkv "[i % 25] ^ u8::from(rnd() % 50 == 0)).collect();
            round_trip(&random);
            round_trip(&small);
            round_trip(&text);
        }
    }

    #[test]
    fn ratios_are_in_redis_servers_range() {
        // redis-server 7.0 SAVEs a 1000-byte run of one letter as an 18-byte LZF string and
        // 100 copies of "hotkv:" as 20 bytes: this compressor lands within a few bytes.
        let (run, text) = (round_trip(&[b'a'; 1000]), round_trip(&b"hotkv:".repeat(100)));
        assert!(run <= 18 + 4 && text <= 20 + 4, "{run} {text}");
        // Incompressible data is refused under Redis's rule.
        let random: Vec<u8> = (0..100u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        assert_eq!(compress_string(&random), None);
        assert_eq!(compress_string(&[b'a'; 20]), None, "20 bytes or fewer stay as they are");
        assert!(compress_string(&[b'a'; 21]).is_some());
    }

    #[test]
    fn a_limit_it_cannot_meet_gives_none() {
        assert_eq!(compress(b"abcdefgh", 4), None);
        assert!(compress(b"abcdefgh", 9).is_some());
    }
}
