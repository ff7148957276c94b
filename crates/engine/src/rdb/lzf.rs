//! LZF compression, the format Redis uses for RDB strings when `rdbcompression` is on.
//!
//! The decompressor lives beside the other decoders in `rdb.rs`; this is the other half.
//! The output is LZF's plain format: literal runs (`ctrl < 32`: `ctrl + 1` bytes follow) and
//! back references (length in the top three bits, extended by a byte when 7, then a 13-bit
//! distance). Any compressor that emits it is valid; this one is the greedy single-probe hash
//! search liblzf uses, so ratios land close to redis-server's.

/// Compresses `input`; `None` when the result would be longer than `max_out` bytes (Redis
/// keeps a string uncompressed unless it saves at least 4 bytes, see [`compress_string`]).
pub(crate) fn compress(input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    // The hash table is reused from string to string, never cleared: zeroing 64 KiB for
    // every string of a save made a BGSAVE of a million small strings 34 times slower than
    // redis-server's. An entry left by an earlier string is only a candidate: it is used
    // only when it points before the current position and the bytes there really match,
    // so a stale one costs a comparison, never a wrong reference.
    TABLE.with(|t| compress_with(&mut t.borrow_mut(), input, max_out))
}

thread_local! {
    static TABLE: std::cell::RefCell<Box<[u32]>> = std::cell::RefCell::new(vec![0u32; 1 << HASH_BITS].into_boxed_slice());
}

fn compress_with(table: &mut [u32], input: &[u8], max_out: usize) -> Option<Vec<u8>> {
    let n = input.len();
    let mut out = Vec::with_capacity(max_out.min(n + n / 32 + 1));
    // Last position + 1 at which each 3-byte hash was seen; 0 = never (or another string's).
    let mut lit_start = 0;
    let mut ip = 0;
    while ip + MIN_MATCH <= n {
        let h = hash(&input[ip..ip + MIN_MATCH]);
        let seen = table[h] as usize;
        table[h] = (ip + 1) as u32;
        if seen != 0 && seen - 1 < ip {
            let r = seen - 1;
            let dist = ip - r;
            if dist <= MAX_DISTANCE && input[r..r + MIN_MATCH] == input[ip..ip + MIN_MATCH] {
                let limit = MAX_MATCH.min(n - ip);
                let mut len = MIN_MATCH;
                while len < limit && input[r + len] == input[ip + len] {
                    len += 1;
                }
                literals(&mut out, &input[lit_start..ip]);
                backref(&mut out, len, dist - 1);
                if out.len() > max_out {
                    return None;
                }
                // Index the positions the match covered, so later data can refer to them.
                for k in ip + 1..(ip + len).min(n.saturating_sub(MIN_MATCH - 1)) {
                    table[hash(&input[k..k + MIN_MATCH])] = (k + 1) as u32;
                }
                ip += len;
                lit_start = ip;
                continue;
            }
        }
        ip += 1;
    }
    literals(&mut out, &input[lit_start..]);
    (out.len() <= max_out).then_some(out)
}

/// Redis's rule (`rdbSaveRawString`, `rdbSaveLzfStringObject`): strings longer than 20 bytes
/// are compressed when that saves more than 4 bytes. Returns the compressed bytes then.
pub(crate) fn compress_string(s: &[u8]) -> Option<Vec<u8>> {
    if s.len() <= COMPRESS_ABOVE {
        return None;
    }
    compress(s, s.len() - 4)
}

fn hash(b: &[u8]) -> usize {
    let v = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
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
const COMPRESS_ABOVE: usize = 20;
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
