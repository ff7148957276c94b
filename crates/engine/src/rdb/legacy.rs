//! Readers for the pre-listpack blobs older Redis versions put in DUMP payloads and RDB files:
//! the ziplist (RDB types 10, 12, 13 and the nodes of 14, Redis 2.6–6.2) and the zipmap
//! (type 9, Redis before 2.6). hotkv never writes them; Redis 7 and Valkey 8 still load them,
//! so a value MIGRATEd from an old node, or a DUMP kept from one, restores here too.
//!
//! Both are walked with every declared length checked against the bytes actually present
//! before anything is read or allocated from it, the checks Valkey's deep
//! `ziplistValidateIntegrity` and `zipmapValidateIntegrity` make. Output grows only as the
//! walk reaches real entries, so a short blob claiming huge lengths costs nothing.

use super::RdbError;
use crate::types::lpentry::Elem;

/// Calls `f` with every entry of a ziplist, after checking the whole layout: header byte
/// count equals the blob size, each entry's previous-length field equals the size of the
/// entry before it, the tail offset names the last entry, the terminator follows the last
/// entry, and the header count matches unless it saturated at 65535.
///
/// Layout: `[zlbytes: u32 LE][zltail: u32 LE][zllen: u16 LE][entries...][0xFF]`.
pub(super) fn ziplist_for_each(
    blob: &[u8],
    mut f: impl FnMut(Elem<'_>) -> Result<(), RdbError>,
) -> Result<(), RdbError> {
    if blob.len() < ZL_HEADER + 1 {
        return Err(RdbError::BadFormat);
    }
    let bytes = u32::from_le_bytes([blob[0], blob[1], blob[2], blob[3]]) as usize;
    let tail = u32::from_le_bytes([blob[4], blob[5], blob[6], blob[7]]) as usize;
    let header_count = usize::from(u16::from_le_bytes([blob[8], blob[9]]));
    let end = blob.len() - 1;
    if bytes != blob.len() || blob[end] != ZL_END || tail > end {
        return Err(RdbError::BadFormat);
    }
    let (mut p, mut prev_size, mut last, mut count) = (ZL_HEADER, 0usize, None, 0usize);
    while blob[p] != ZL_END {
        // `p < end` here: blob[end] is the terminator, so the loop stops at it at the latest.
        let (prev_len, prev_field) = match blob[p] {
            ZL_BIG_PREVLEN => (read_u32_le(blob, p + 1, end)? as usize, 5),
            n => (usize::from(n), 1),
        };
        if prev_len != prev_size {
            return Err(RdbError::BadFormat);
        }
        let enc_at = p + prev_field;
        let (value, size) = entry(blob, enc_at, end)?;
        f(value)?;
        prev_size = prev_field + size;
        last = Some(p);
        p += prev_size;
        count += 1;
    }
    if p != end || last.is_some_and(|l| l != tail) {
        return Err(RdbError::BadFormat);
    }
    if header_count != usize::from(u16::MAX) && header_count != count {
        return Err(RdbError::BadFormat);
    }
    Ok(())
}

/// Calls `f` with every field/value pair of a zipmap, after the checks of Valkey's deep
/// `zipmapValidateIntegrity`: every length stays inside the blob, there is at least one
/// pair, and the leading count matches unless it is the "too many" marker 254.
///
/// Layout: `[count: u8][field len][field][value len][free: u8][value][free bytes]...[0xFF]`,
/// a length being one byte below 254, or 254 then a u32 LE.
pub(super) fn zipmap_for_each(
    blob: &[u8],
    mut f: impl FnMut(&[u8], &[u8]) -> Result<(), RdbError>,
) -> Result<(), RdbError> {
    if blob.len() < 2 || blob[blob.len() - 1] != ZM_END {
        return Err(RdbError::BadFormat);
    }
    let end = blob.len() - 1;
    let (mut p, mut count) = (1usize, 0usize);
    while blob[p] != ZM_END {
        let (flen, at) = zipmap_len(blob, p, end)?;
        let field = slice(blob, at, flen, end)?;
        let (vlen, at) = zipmap_len(blob, at + flen, end)?;
        // One byte of "free" space count follows the value length; the value then that many
        // unused bytes.
        let free = usize::from(*blob.get(at).filter(|_| at < end).ok_or(RdbError::BadFormat)?);
        let value = slice(blob, at + 1, vlen, end)?;
        p = (at + 1 + vlen).checked_add(free).filter(|&q| q <= end).ok_or(RdbError::BadFormat)?;
        f(field, value)?;
        count += 1;
    }
    if count == 0 || (blob[0] != ZM_BIGLEN && usize::from(blob[0]) != count) {
        return Err(RdbError::BadFormat);
    }
    Ok(())
}

/// Decodes the entry whose encoding byte is at `at`: its value and the size of encoding plus
/// data. Nothing past `end` (the terminator's offset) may belong to it.
fn entry(blob: &[u8], at: usize, end: usize) -> Result<(Elem<'_>, usize), RdbError> {
    let enc = *blob.get(at).filter(|_| at < end).ok_or(RdbError::BadFormat)?;
    let int = |n: usize| -> Result<i64, RdbError> {
        let b = slice(blob, at + 1, n, end)?;
        let mut le = [0u8; 8];
        le[..n].copy_from_slice(b);
        // Sign-extend from the top byte actually stored (int24 included).
        let shift = 64 - 8 * n as u32;
        Ok((i64::from_le_bytes(le) << shift) >> shift)
    };
    Ok(match enc {
        0x00..=0x3F => {
            let n = usize::from(enc & 0x3F);
            (Elem::Str(slice(blob, at + 1, n, end)?), 1 + n)
        }
        0x40..=0x7F => {
            let low = *blob.get(at + 1).filter(|_| at + 1 < end).ok_or(RdbError::BadFormat)?;
            let n = (usize::from(enc & 0x3F) << 8) | usize::from(low);
            (Elem::Str(slice(blob, at + 2, n, end)?), 2 + n)
        }
        // Any 10xxxxxx byte is the 32-bit length form; its low bits are ignored, as in Valkey.
        0x80..=0xBF => {
            let b = slice(blob, at + 1, 4, end)?;
            let n = u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize;
            (Elem::Str(slice(blob, at + 5, n, end)?), 5 + n)
        }
        ZL_INT16 => (Elem::Int(int(2)?), 3),
        ZL_INT32 => (Elem::Int(int(4)?), 5),
        ZL_INT64 => (Elem::Int(int(8)?), 9),
        ZL_INT24 => (Elem::Int(int(3)?), 4),
        ZL_INT8 => (Elem::Int(int(1)?), 2),
        // 4-bit immediates 0001..1101 hold 0..12.
        0xF1..=0xFD => (Elem::Int(i64::from(enc & 0x0F) - 1), 1),
        _ => return Err(RdbError::BadFormat),
    })
}

/// A zipmap length at `p`: its value and the offset after it.
fn zipmap_len(blob: &[u8], p: usize, end: usize) -> Result<(usize, usize), RdbError> {
    match *blob.get(p).filter(|_| p < end).ok_or(RdbError::BadFormat)? {
        n if n < ZM_BIGLEN => Ok((usize::from(n), p + 1)),
        _ => Ok((read_u32_le(blob, p + 1, end)? as usize, p + 5)),
    }
}

/// A u32 LE at `at`, entirely before `end`.
fn read_u32_le(blob: &[u8], at: usize, end: usize) -> Result<u32, RdbError> {
    let b = slice(blob, at, 4, end)?;
    Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
}

/// `n` bytes at `at`, all before the terminator at `end`.
fn slice(blob: &[u8], at: usize, n: usize, end: usize) -> Result<&[u8], RdbError> {
    let stop = at.checked_add(n).filter(|&s| s <= end).ok_or(RdbError::BadFormat)?;
    Ok(&blob[at..stop])
}

/// Ziplist header: total bytes, tail offset, count.
const ZL_HEADER: usize = 10;
/// Ziplist terminator.
const ZL_END: u8 = 0xFF;
/// A previous-entry length of 254 or more: this byte, then a u32 LE.
const ZL_BIG_PREVLEN: u8 = 0xFE;
const ZL_INT16: u8 = 0xC0;
const ZL_INT32: u8 = 0xD0;
const ZL_INT64: u8 = 0xE0;
const ZL_INT24: u8 = 0xF0;
const ZL_INT8: u8 = 0xFE;
/// Zipmap terminator.
const ZM_END: u8 = 0xFF;
/// A zipmap count or length byte meaning "more": the count must be walked, the length
/// follows as a u32.
const ZM_BIGLEN: u8 = 254;

/// Builders for the legacy blobs, shared by the unit tests here and in `cmd::dump`: they
/// encode exactly as Redis 6.2's `ziplist.c` and Redis 2.4's `zipmap.c` did.
#[cfg(test)]
pub(crate) mod build {
    /// A ziplist of `items`, integers encoded as Redis's `zipTryEncoding` chooses.
    pub(crate) fn ziplist(items: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let (mut prev, mut tail) = (0usize, super::ZL_HEADER);
        for it in items {
            tail = super::ZL_HEADER + body.len();
            let start = body.len();
            if prev < 254 {
                body.push(prev as u8);
            } else {
                body.push(0xFE);
                body.extend_from_slice(&(prev as u32).to_le_bytes());
            }
            encode(it, &mut body);
            prev = body.len() - start;
        }
        let total = super::ZL_HEADER + body.len() + 1;
        let mut out = Vec::with_capacity(total);
        out.extend_from_slice(&(total as u32).to_le_bytes());
        out.extend_from_slice(&(tail as u32).to_le_bytes());
        out.extend_from_slice(&(items.len().min(65535) as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out.push(0xFF);
        out
    }

    fn encode(it: &[u8], out: &mut Vec<u8>) {
        if it.len() <= 20
            && let Some(v) = hotkv_protocol::parse_i64(it)
        {
            match v {
                0..=12 => out.push(0xF1 + v as u8),
                -128..=127 => out.extend_from_slice(&[0xFE, v as u8]),
                -32768..=32767 => {
                    out.push(0xC0);
                    out.extend_from_slice(&(v as i16).to_le_bytes());
                }
                -8_388_608..=8_388_607 => {
                    out.push(0xF0);
                    out.extend_from_slice(&(v as i32).to_le_bytes()[..3]);
                }
                _ if i32::try_from(v).is_ok() => {
                    out.push(0xD0);
                    out.extend_from_slice(&(v as i32).to_le_bytes());
                }
                _ => {
                    out.push(0xE0);
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
            return;
        }
        match it.len() {
            n if n < 64 => out.push(n as u8),
            n if n < 16384 => out.extend_from_slice(&[0x40 | (n >> 8) as u8, n as u8]),
            n => {
                out.push(0x80);
                out.extend_from_slice(&(n as u32).to_be_bytes());
            }
        }
        out.extend_from_slice(it);
    }

    /// A zipmap of `pairs`, each value followed by `free` unused bytes.
    pub(crate) fn zipmap(pairs: &[(&[u8], &[u8])], free: u8) -> Vec<u8> {
        let mut out = vec![pairs.len().min(254) as u8];
        let len = |out: &mut Vec<u8>, n: usize| {
            if n < 254 {
                out.push(n as u8);
            } else {
                out.push(254);
                out.extend_from_slice(&(n as u32).to_le_bytes());
            }
        };
        for (f, v) in pairs {
            len(&mut out, f.len());
            out.extend_from_slice(f);
            len(&mut out, v.len());
            out.push(free);
            out.extend_from_slice(v);
            out.extend(std::iter::repeat_n(0u8, usize::from(free)));
        }
        out.push(0xFF);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(blob: &[u8]) -> Result<Vec<Vec<u8>>, RdbError> {
        let mut out = Vec::new();
        ziplist_for_each(blob, |v| {
            out.push(v.to_vec());
            Ok(())
        })?;
        Ok(out)
    }

    #[test]
    fn a_ziplist_redis_6_wrote_decodes() {
        // What Redis 6.2 stores for RPUSH l a 1 -1 300 70000 -5000000000 (worked out by hand
        // from ziplist.c): a string, a 4-bit immediate, int8, int16, int24 and int64.
        let zl = build::ziplist(&[b"a", b"1", b"-1", b"300", b"70000", b"-5000000000"]);
        assert_eq!(
            &zl[..],
            &[
                0x26, 0, 0, 0, 0x1B, 0, 0, 0, 6, 0, // header: 38 bytes, tail at 27, 6 entries
                0x00, 0x01, b'a', // string "a"
                0x03, 0xF2, // immediate 1
                0x02, 0xFE, 0xFF, // int8 -1
                0x03, 0xC0, 0x2C, 0x01, // int16 300
                0x04, 0xF0, 0x70, 0x11, 0x01, // int24 70000
                0x05, 0xE0, 0x00, 0x0E, 0xFA, 0xD5, 0xFE, 0xFF, 0xFF, 0xFF, // int64
                0xFF,
            ][..]
        );
        assert_eq!(entries(&zl).unwrap(), [&b"a"[..], b"1", b"-1", b"300", b"70000", b"-5000000000"]);
    }

    #[test]
    fn long_entries_use_the_wide_prevlen_and_lengths() {
        let big = vec![b'x'; 300];
        let huge = vec![b'y'; 20000];
        let zl = build::ziplist(&[&big, b"after", &huge, b"2147483647", b"-8388608"]);
        assert_eq!(entries(&zl).unwrap(), [&big[..], b"after", &huge, b"2147483647", b"-8388608"]);
    }

    #[test]
    fn every_declared_length_is_checked() {
        let good = build::ziplist(&[b"abc", b"12", b"hello"]);
        // Every truncation, every single-byte change: an error or a value, never a panic.
        for cut in 0..good.len() {
            let _ = entries(&good[..cut]);
        }
        for i in 0..good.len() {
            for b in [0x00, 0x3F, 0x40, 0x7F, 0x80, 0xBF, 0xC0, 0xE0, 0xF0, 0xFD, 0xFE, 0xFF] {
                let mut m = good.clone();
                m[i] = b;
                let _ = entries(&m);
            }
        }
        // A 32-bit string length of 4 GiB in a 16-byte blob.
        let mut zl = build::ziplist(&[b"a"]);
        zl.splice(11..12, [0x80, 0xFF, 0xFF, 0xFF, 0xF0]);
        let n = zl.len() as u32;
        zl[..4].copy_from_slice(&n.to_le_bytes());
        assert_eq!(entries(&zl), Err(RdbError::BadFormat));
        // Wrong count, wrong tail, wrong previous length.
        let mut bad = good.clone();
        bad[8] = 2;
        assert_eq!(entries(&bad), Err(RdbError::BadFormat));
        let mut bad = good.clone();
        bad[4] = 10;
        assert_eq!(entries(&bad), Err(RdbError::BadFormat));
        let mut bad = good.clone();
        bad[15] = 4;
        assert_eq!(entries(&bad), Err(RdbError::BadFormat));
        // A saturated count is walked.
        let mut sat = good.clone();
        sat[8..10].copy_from_slice(&[0xFF, 0xFF]);
        assert_eq!(entries(&sat).unwrap().len(), 3);
    }

    #[test]
    fn zipmaps_decode_with_free_space_and_big_lengths() {
        let long = vec![b'v'; 300];
        let zm = build::zipmap(&[(b"f", b"v"), (b"name", &long)], 2);
        let mut pairs = Vec::new();
        zipmap_for_each(&zm, |f, v| {
            pairs.push((f.to_vec(), v.to_vec()));
            Ok(())
        })
        .unwrap();
        assert_eq!(pairs, [(b"f".to_vec(), b"v".to_vec()), (b"name".to_vec(), long)]);
        let nothing = |f: &[u8], v: &[u8]| -> Result<(), RdbError> {
            let _ = (f, v);
            Ok(())
        };
        for cut in 0..zm.len() {
            let _ = zipmap_for_each(&zm[..cut], nothing);
        }
        assert_eq!(zipmap_for_each(&[0, 0xFF], nothing), Err(RdbError::BadFormat), "empty");
        let mut wrong = zm.clone();
        wrong[0] = 3;
        assert_eq!(zipmap_for_each(&wrong, nothing), Err(RdbError::BadFormat), "count");
        // A 4 GiB value length.
        let claim = [1, 1, b'f', 254, 0xFF, 0xFF, 0xFF, 0xFF, 0, 0xFF];
        assert_eq!(zipmap_for_each(&claim, nothing), Err(RdbError::BadFormat));
    }
}
