//! Hashes with field TTLs in RDB files and DUMP payloads, in Redis 7.4's encodings:
//! `HASH_LISTPACK_EX` (25) for a packed hash, a listpack of field, value, expire-time triples
//! after the hash's earliest time, and `HASH_METADATA` (24) for a table, the earliest time then
//! per field a TTL relative to it (0: none), the field and the value. The release candidates'
//! forms without the earliest time are read too: the listpack (23), and the table (22, with
//! absolute times) from a version 12 file or payload only, as Valkey 9 gives that number to its
//! own, different, `HASH_2` encoding.
//!
//! hotkv writes these types, which come with Redis's RDB version 12, inside its version 10
//! files and payloads, and only for hashes that have field TTLs: every other key stays
//! readable by Redis 7.0+ and Valkey 8, but a Redis 7.2 or Valkey 8 peer refuses a key written
//! this way (RESTORE answers `Bad data format`, a full sync or file load stops there).

use super::{LISTPACK_MAX_SAFETY_SIZE, RdbError, Reader, Strings, put_blob, put_string, type_and_key, write_len};
use crate::types::hash::Hash;
use crate::types::lpentry::Elem;
use crate::types::packed::Packed;

/// A hash with field TTLs as a listpack of field, value, TTL triples (Redis 7.4).
pub(super) const TYPE_HASH_LISTPACK_EX: u8 = 25;
/// A hash with field TTLs as its earliest time and TTL, field, value records (Redis 7.4).
pub(super) const TYPE_HASH_METADATA: u8 = 24;
/// [`TYPE_HASH_LISTPACK_EX`] without the earliest time (Redis 7.4 release candidates).
pub(super) const TYPE_HASH_LISTPACK_EX_PRE_GA: u8 = 23;
/// [`TYPE_HASH_METADATA`] without the earliest time, its TTLs absolute (Redis 7.4 release
/// candidates; read only from version 12, as Valkey 9 numbers its own `HASH_2` 22).
pub(super) const TYPE_HASH_METADATA_PRE_GA: u8 = 22;

/// The latest expire time Redis accepts in these encodings (`EB_EXPIRE_TIME_MAX`).
const MAX_EXPIRE_MS: u64 = 0x0000_FFFF_FFFF_FFFF;

/// Writes `h` in one of Redis 7.4's encodings if it has field TTLs; returns false (writing
/// nothing) when it has none.
pub(super) fn encode(out: &mut Vec<u8>, key: Option<&[u8]>, h: &Hash, c: Strings) -> bool {
    let Some(min) = h.field_ttls().map(|(_, t)| t).min() else { return false };
    // Fields by time, those without a TTL last: Redis keeps a listpackex in that order and
    // reads a hash's earliest time from its first triple.
    let mut triples: Vec<(Elem<'_>, Elem<'_>, Option<i64>)> =
        h.iter().map(|(f, v)| (f, v, f.with_bytes(|f| h.expire_of(f)))).collect();
    triples.sort_by_key(|&(_, _, t)| t.unwrap_or(i64::MAX));
    if h.encoding() == "listpackex" {
        let lp = Packed::from_elems(triples.iter().flat_map(|&(f, v, t)| [f, v, Elem::Int(t.unwrap_or(0))]));
        if lp.listpack_bytes() <= LISTPACK_MAX_SAFETY_SIZE {
            type_and_key(out, TYPE_HASH_LISTPACK_EX, key, c);
            out.extend_from_slice(&min.to_le_bytes());
            let mut blob = Vec::with_capacity(lp.listpack_bytes());
            lp.write_listpack(&mut blob);
            put_blob(out, &blob, c);
            return true;
        }
    }
    type_and_key(out, TYPE_HASH_METADATA, key, c);
    out.extend_from_slice(&min.to_le_bytes());
    write_len(out, triples.len() as u64);
    for (f, v, t) in triples {
        // Relative to the earliest time, plus one so that 0 can mean "no TTL".
        write_len(out, t.map_or(0, |t| (t - min + 1) as u64));
        f.with_bytes(|b| put_string(out, b, c));
        v.with_bytes(|b| put_string(out, b, c));
    }
    true
}

/// Reads a hash of one of the four types above; empty, repeated fields, a TTL past Redis's
/// maximum or a malformed listpack are corrupt.
pub(super) fn read(r: &mut Reader<'_>, ty: u8) -> Result<Hash, RdbError> {
    let min = match ty {
        TYPE_HASH_LISTPACK_EX | TYPE_HASH_METADATA => {
            Some(u64::from_le_bytes(r.take(8)?.try_into().map_err(|_| RdbError::BadFormat)?))
        }
        _ => None,
    };
    let mut pairs = Vec::new();
    let mut ttls = Vec::new();
    if matches!(ty, TYPE_HASH_LISTPACK_EX | TYPE_HASH_LISTPACK_EX_PRE_GA) {
        let lp = Packed::from_listpack(&r.string()?).ok_or(RdbError::BadFormat)?;
        if lp.len() % 3 != 0 {
            return Err(RdbError::BadFormat);
        }
        let mut it = lp.iter();
        while let (Some(f), Some(v), Some(t)) = (it.next(), it.next(), it.next()) {
            let t = t.as_int().and_then(|t| u64::try_from(t).ok()).ok_or(RdbError::BadFormat)?;
            pairs.push((f.to_vec(), v.to_vec()));
            ttls.push(t);
        }
    } else {
        // No capacity from the untrusted count: the reader fails at the end of the data first.
        for _ in 0..r.len()? {
            let ttl = r.len()?;
            let at = match (ttl, min) {
                (0, _) => 0,
                (t, None) => t,
                (t, Some(min)) => t.checked_add(min).ok_or(RdbError::BadFormat)? - 1,
            };
            ttls.push(at);
            pairs.push((r.string()?, r.string()?));
        }
    }
    if pairs.is_empty() || ttls.iter().any(|&t| t > MAX_EXPIRE_MS) {
        return Err(RdbError::BadFormat);
    }
    let mut h = Hash::from_pairs(&pairs).ok_or(RdbError::BadFormat)?;
    for ((f, _), t) in pairs.iter().zip(ttls) {
        if t != 0 {
            // Within MAX_EXPIRE_MS, checked above.
            h.set_expire(f, t as i64);
        }
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::object::Object;
    use crate::rdb::{Loaded, dump_hash, restore};
    use crate::types::hash::HashLimits;

    fn volatile(limits: HashLimits) -> Hash {
        let mut h = Hash::new();
        for (f, v) in [("a", "1"), ("b", "two"), ("c", "3"), ("d", "x")] {
            h.set(f.as_bytes(), v.as_bytes(), limits);
        }
        h.set_expire(b"b", 1_700_000_005_000);
        h.set_expire(b"a", 1_700_000_001_000);
        h.set_expire(b"d", 1_800_000_000_000);
        h
    }

    fn round_trip(h: &Hash) -> Hash {
        let p = dump_hash(h);
        match restore(&p, u64::MAX) {
            Ok(Loaded::Object(Object::Hash(back))) => back,
            other => panic!("hash expected, got {other:?}"),
        }
    }

    #[test]
    fn both_bodies_round_trip_with_their_ttls() {
        for (limits, ty) in [
            (HashLimits::UNBOUNDED, TYPE_HASH_LISTPACK_EX),
            (HashLimits { max_entries: 0, max_value: 0 }, TYPE_HASH_METADATA),
        ] {
            let h = volatile(limits);
            assert_eq!(dump_hash(&h)[0], ty);
            let back = round_trip(&h);
            assert_eq!(back, h);
            for f in [&b"a"[..], b"b", b"c", b"d"] {
                assert_eq!(back.expire_of(f), h.expire_of(f), "{f:?}");
            }
            assert_eq!(back.min_expire(), Some(1_700_000_001_000));
        }
        let mut plain = Hash::new();
        plain.set(b"a", b"1", HashLimits::UNBOUNDED);
        assert_eq!(dump_hash(&plain)[0], crate::rdb::TYPE_HASH_LISTPACK, "no TTL, no new type");
    }

    #[test]
    fn a_listpack_ex_holds_its_triples_by_time() {
        let h = volatile(HashLimits::UNBOUNDED);
        let p = dump_hash(&h);
        let mut r = Reader::new(&p[1..p.len() - 10], u64::MAX as usize);
        assert_eq!(r.take(8).unwrap(), 1_700_000_001_000i64.to_le_bytes());
        let lp = Packed::from_listpack(&r.string().unwrap()).unwrap();
        let order: Vec<Vec<u8>> = lp.iter().step_by(3).map(Elem::to_vec).collect();
        assert_eq!(order, [b"a".to_vec(), b"b".to_vec(), b"d".to_vec(), b"c".to_vec()]);
        let times: Vec<i64> = lp.iter().skip(2).step_by(3).filter_map(Elem::as_int).collect();
        assert_eq!(times, [1_700_000_001_000, 1_700_000_005_000, 1_800_000_000_000, 0]);
    }

    #[test]
    fn reads_the_release_candidate_form_and_refuses_corrupt_ones() {
        // Type 23: a listpack of field, value, absolute TTL triples, no earliest time first.
        let lp = Packed::from_elems([
            Elem::Str(b"f"),
            Elem::Int(1),
            Elem::Int(0),
            Elem::Str(b"g"),
            Elem::Int(2),
            Elem::Int(1_700_000_000_000),
        ]);
        let mut body = vec![TYPE_HASH_LISTPACK_EX_PRE_GA];
        let mut blob = Vec::new();
        lp.write_listpack(&mut blob);
        put_blob(&mut body, &blob, Strings::Plain);
        let h = match restore(&crate::rdb::finish(body), u64::MAX) {
            Ok(Loaded::Object(Object::Hash(h))) => h,
            other => panic!("{other:?}"),
        };
        assert_eq!((h.expire_of(b"f"), h.expire_of(b"g")), (None, Some(1_700_000_000_000)));
        // A TTL past Redis's maximum, a count larger than the data, a repeated field, a short
        // earliest time, Valkey 9's type 22.
        let record = |body: &mut Vec<u8>, ttl: u64, f: &[u8]| {
            write_len(body, ttl);
            put_string(body, f, Strings::Plain);
            put_string(body, b"v", Strings::Plain);
        };
        let mut past_max = vec![TYPE_HASH_METADATA, 1, 0, 0, 0, 0, 0, 0, 0];
        write_len(&mut past_max, 1);
        record(&mut past_max, MAX_EXPIRE_MS + 1, b"f");
        let mut huge = vec![TYPE_HASH_METADATA, 0, 0, 0, 0, 0, 0, 0, 0];
        write_len(&mut huge, u64::MAX >> 1);
        let mut dup = vec![TYPE_HASH_METADATA, 0, 0, 0, 0, 0, 0, 0, 0];
        write_len(&mut dup, 2);
        record(&mut dup, 0, b"f");
        record(&mut dup, 0, b"f");
        let mut empty = vec![TYPE_HASH_METADATA, 0, 0, 0, 0, 0, 0, 0, 0];
        write_len(&mut empty, 0);
        let mut valkey = vec![22];
        write_len(&mut valkey, 1);
        record(&mut valkey, 0, b"f");
        for bad in [past_max, huge, dup, empty, valkey, vec![TYPE_HASH_LISTPACK_EX, 1, 2]] {
            let got = restore(&crate::rdb::finish(bad.clone()), u64::MAX).err();
            assert_eq!(got, Some(RdbError::BadFormat), "{bad:?}");
        }
    }

    /// A payload with Redis 7.4's version 12 footer.
    fn finish_v12(mut body: Vec<u8>) -> Vec<u8> {
        body.extend_from_slice(&12u16.to_le_bytes());
        let crc = crate::rdb::crc64(0, &body);
        body.extend_from_slice(&crc.to_le_bytes());
        body
    }

    #[test]
    fn reads_the_release_candidate_table_form_from_version_12() {
        // Type 22: a count, then absolute TTL (0: none), field, value records.
        let mut body = vec![TYPE_HASH_METADATA_PRE_GA];
        write_len(&mut body, 2);
        for (ttl, f, v) in [(0, b"f", b"1"), (1_700_000_000_000, b"g", b"2")] {
            write_len(&mut body, ttl);
            put_string(&mut body, f, Strings::Plain);
            put_string(&mut body, v, Strings::Plain);
        }
        let h = match restore(&finish_v12(body.clone()), u64::MAX) {
            Ok(Loaded::Object(Object::Hash(h))) => h,
            other => panic!("{other:?}"),
        };
        assert_eq!((h.expire_of(b"f"), h.expire_of(b"g")), (None, Some(1_700_000_000_000)));
        assert_eq!(h.get(b"g").map(|v| v.to_vec()), Some(b"2".to_vec()));
        assert_eq!(restore(&crate::rdb::finish(body), u64::MAX).err(), Some(RdbError::BadFormat), "not in 10");
        // The GA forms hotkv writes read the same under version 12.
        let p = dump_hash(&volatile(HashLimits::UNBOUNDED));
        let v12 = finish_v12(p[..p.len() - 10].to_vec());
        assert!(
            matches!(restore(&v12, u64::MAX), Ok(Loaded::Object(Object::Hash(h))) if h.expire_of(b"a") == Some(1_700_000_001_000))
        );
    }
}
