//! What DEBUG OBJECT and DEBUG DIGEST / DIGEST-VALUE say about one stored value: its
//! encoding name, status line and Valkey's `xorObjectDigest` signature, for every type.
//!
//! The digests must equal Valkey's bit for bit, because the test suite compares the digest of
//! a dataset before and after an operation (and replicas compare theirs with the primary's):
//! ordered types (strings, lists) mix element by element, unordered ones (sets, hashes,
//! sorted sets) XOR one digest per element so that iteration order never matters.

use hotkv_engine::entry::{Entry, ValueRef};
use hotkv_engine::object::Object;
use hotkv_engine::policy;
use hotkv_engine::rdb;
use hotkv_engine::types::list::List;
use sha1_smol::Sha1;

/// Quicklist knobs DEBUG OBJECT prints (Valkey's `ql_listpack_max` and `ql_compressed`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct ListKnobs {
    /// `list-max-listpack-size`.
    pub fill: i64,
    /// `list-compress-depth`.
    pub compress_depth: i64,
}

/// Valkey's `string2ll` acceptance: the canonical decimal form of an `i64`.
fn is_int_string(b: &[u8]) -> bool {
    b.len() <= 20 && hotkv_protocol::parse_i64(b).is_some_and(|n| n.to_string().as_bytes() == b)
}

/// (encoding, bytes of a string) of a value as Valkey would store it.
pub(crate) fn encoding<'a>(v: &ValueRef<'a>) -> (&'static str, Option<&'a [u8]>) {
    match *v {
        ValueRef::Str(b) if is_int_string(b) => ("int", Some(b)),
        ValueRef::Str(b) if b.len() <= 44 => ("embstr", Some(b)),
        ValueRef::Str(b) => ("raw", Some(b)),
        ValueRef::Obj(Object::Str(b)) => ("raw", Some(b.as_slice())),
        ValueRef::Obj(Object::List(l)) => (l.encoding(), None),
        ValueRef::Obj(Object::ZSet(z)) => (z.encoding(), None),
        ValueRef::Obj(Object::Hash(h)) => (h.encoding(), None),
        ValueRef::Obj(Object::Set(s)) => (s.encoding(), None),
        ValueRef::Obj(Object::Stream(_)) => ("stream", None),
    }
}

/// RDB length of a string (`rdbSaveRawString` without LZF compression).
pub(crate) fn rdb_string_len(b: &[u8]) -> usize {
    if b.len() <= 11
        && let Some(n) = hotkv_protocol::parse_i64(b).filter(|_| is_int_string(b))
    {
        if i8::try_from(n).is_ok() {
            return 2;
        } else if i16::try_from(n).is_ok() {
            return 3;
        } else if i32::try_from(n).is_ok() {
            return 5;
        }
    }
    let prefix = match b.len() {
        0..64 => 1,
        64..16384 => 2,
        n if n <= u32::MAX as usize => 5,
        _ => 9,
    };
    prefix + b.len()
}

/// `serializedlength`: the bytes the value takes in hotkv's own serialisation (the DUMP
/// payload without its type byte, version and checksum), which is Valkey's
/// `rdbSavedObjectLen` up to the container format, and uncompressed whatever `rdbcompression`
/// says.
fn serialized_len(v: &ValueRef<'_>) -> usize {
    let payload = match *v {
        ValueRef::Str(b) => return rdb_string_len(b),
        ValueRef::Obj(Object::Str(b)) => return rdb_string_len(b),
        ValueRef::Obj(Object::List(l)) => rdb::dump_list(l),
        ValueRef::Obj(Object::ZSet(z)) => rdb::dump_zset(z),
        ValueRef::Obj(Object::Hash(h)) => rdb::dump_hash(h),
        ValueRef::Obj(Object::Set(s)) => rdb::dump_set(s),
        ValueRef::Obj(Object::Stream(_)) => rdb::dump_value(*v, rdb::Strings::Plain),
    };
    // One type byte in front, two version bytes and an eight-byte CRC behind.
    payload.len().saturating_sub(11)
}

/// The quicklist fields Valkey appends for a list in the `quicklist` encoding; empty for
/// every other value.
fn quicklist_fields(l: &List, fast: bool, knobs: ListKnobs) -> String {
    if !matches!(l, List::Quick(_)) {
        return String::new();
    }
    let nodes = l.nodes().count();
    let mut s = format!(
        " ql_nodes:{nodes} ql_avg_node:{:.2} ql_listpack_max:{} ql_compressed:{}",
        l.len() as f64 / nodes.max(1) as f64,
        knobs.fill,
        i32::from(knobs.compress_depth != 0)
    );
    if !fast {
        // Nodes are never compressed here, so the uncompressed size is their byte size.
        s.push_str(&format!(" ql_uncompressed_size:{}", l.nodes().map(|n| n.bytes()).sum::<usize>()));
    }
    s
}

/// DEBUG OBJECT's status line.
pub(crate) fn object_line(e: &Entry, fast: bool, now_ms: i64, lfu_decay_time: u32, knobs: ListKnobs) -> String {
    let value = e.value();
    let (enc, _) = encoding(&value);
    let lru = e.lru();
    let mut s = format!("Value at:{:p} refcount:1 encoding:{enc}", e as *const Entry);
    if !fast {
        s.push_str(&format!(" serializedlength:{}", serialized_len(&value)));
    }
    s.push_str(&format!(
        " lru:{lru} lru_seconds_idle:{} lfu_freq:{} lfu_access_time_minutes:{}",
        policy::idle_ms(lru, now_ms) / 1000,
        policy::lfu_decayed(lru, now_ms, lfu_decay_time),
        lru >> 8
    ));
    if let ValueRef::Obj(Object::List(l)) = value {
        s.push_str(&quicklist_fields(l, fast, knobs));
    }
    s
}

/// Valkey's `xorDigest`: XORs SHA1(data) into `digest` (order-independent).
pub(crate) fn xor_digest(digest: &mut [u8; 20], data: &[u8]) {
    let h = Sha1::from(data).digest().bytes();
    for (d, x) in digest.iter_mut().zip(h) {
        *d ^= x;
    }
}

/// Valkey's `mixDigest`: digest = SHA1(digest xor SHA1(data)) (order-dependent).
pub(crate) fn mix_digest(digest: &mut [u8; 20], data: &[u8]) {
    xor_digest(digest, data);
    *digest = Sha1::from(&digest[..]).digest().bytes();
}

/// The digest of one field/value pair or member/score pair: mixed from zero, so that the
/// pairs can then be XORed into the value's digest in any order.
fn pair_digest(a: &[u8], b: &[u8]) -> [u8; 20] {
    let mut d = [0u8; 20];
    mix_digest(&mut d, a);
    mix_digest(&mut d, b);
    d
}

/// Valkey's `xorObjectDigest` for one entry's value and expire.
pub(crate) fn entry_digest(e: &Entry, digest: &mut [u8; 20]) {
    // Valkey's OBJ_STRING, OBJ_LIST, OBJ_SET, OBJ_ZSET and OBJ_HASH type codes, big-endian.
    let type_id: u32 = match e.value() {
        ValueRef::Str(_) | ValueRef::Obj(Object::Str(_)) => 0,
        ValueRef::Obj(Object::List(_)) => 1,
        ValueRef::Obj(Object::Set(_)) => 2,
        ValueRef::Obj(Object::ZSet(_)) => 3,
        ValueRef::Obj(Object::Hash(_)) => 4,
        ValueRef::Obj(Object::Stream(_)) => 6,
    };
    mix_digest(digest, &type_id.to_be_bytes());
    match e.value() {
        ValueRef::Str(b) => mix_digest(digest, b),
        ValueRef::Obj(Object::Str(b)) => mix_digest(digest, b),
        // Integers packed in a listpack are digested as their decimal text, as Valkey's
        // `listTypeGet` hands them over as string objects.
        ValueRef::Obj(Object::List(l)) => l.iter().for_each(|v| v.with_bytes(|b| mix_digest(digest, b))),
        // A set member goes straight into the XOR, without a per-member mix.
        ValueRef::Obj(Object::Set(s)) => s.iter().for_each(|m| m.with_bytes(|b| xor_digest(digest, b))),
        ValueRef::Obj(Object::ZSet(z)) => {
            let mut score = Vec::with_capacity(24);
            for (m, sc) in z.iter() {
                score.clear();
                // The bare `fpconv_dtoa` form: `1e+17`, not ZSCORE's `100000000000000000`.
                hotkv_protocol::fpconv_dtoa(sc, &mut score);
                // Valkey XORs the 20-byte element digest in as data, so it is hashed again.
                xor_digest(digest, &m.with_bytes(|b| pair_digest(b, &score)));
            }
        }
        ValueRef::Obj(Object::Hash(h)) => {
            for (f, v) in h.iter() {
                xor_digest(digest, &f.with_bytes(|fb| v.with_bytes(|vb| pair_digest(fb, vb))));
            }
        }
        // Each entry's `<ms>.<seq>`, then its fields and values, mixed in order.
        ValueRef::Obj(Object::Stream(s)) => {
            use hotkv_engine::types::stream::StreamId;
            s.range(StreamId::MIN, StreamId::MAX, false, |e| {
                mix_digest(digest, format!("{}.{}", e.id.ms, e.id.seq).as_bytes());
                for (f, v) in &e.fields {
                    f.with_bytes(|b| mix_digest(digest, b));
                    v.with_bytes(|b| mix_digest(digest, b));
                }
                true
            });
        }
    }
    if e.expire().is_some() {
        xor_digest(digest, b"!!expire!!");
    }
}

/// Lower-case hex of a digest, as DEBUG replies it.
pub(crate) fn hex(d: &[u8; 20]) -> String {
    d.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotkv_engine::entry::ValueRef;

    #[test]
    fn primitives_and_string_forms() {
        // SHA1 of the empty string, as a sanity check of the primitive.
        let mut d = [0u8; 20];
        xor_digest(&mut d, b"");
        assert_eq!(hex(&d), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(rdb_string_len(b"12"), 2);
        assert_eq!(rdb_string_len(b"1000"), 3);
        assert_eq!(rdb_string_len(b"100000"), 5);
        assert_eq!(rdb_string_len(b"hello"), 6);
        assert_eq!(rdb_string_len(&[b'x'; 100]), 102);
        assert_eq!(encoding(&ValueRef::Str(b"-12")).0, "int");
        assert_eq!(encoding(&ValueRef::Str(b"012")).0, "embstr");
        assert_eq!(encoding(&ValueRef::Str(&[b'a'; 45])).0, "raw");
    }

    #[test]
    fn a_pair_digest_depends_on_its_order() {
        assert_ne!(pair_digest(b"a", b"b"), pair_digest(b"b", b"a"));
        let mut one = [0u8; 20];
        xor_digest(&mut one, &pair_digest(b"f", b"v"));
        xor_digest(&mut one, &pair_digest(b"n", b"12"));
        let mut other = [0u8; 20];
        xor_digest(&mut other, &pair_digest(b"n", b"12"));
        xor_digest(&mut other, &pair_digest(b"f", b"v"));
        assert_eq!(one, other, "pairs combine in any order");
    }
}
