//! Streams in RDB files and DUMP payloads: `STREAM_LISTPACKS_3` (type 21, what Redis 7.2+ and
//! Valkey 8 write), and the older 15 and 19 read.
//!
//! Layout: the node count, each node as its 16-byte big-endian master id and its listpack
//! (both raw strings), then length, last id, (19+: first id, max deleted id, entries added),
//! and the groups: name, last id, (19+: entries read), the group PEL (raw 16-byte id, 8-byte
//! LE delivery time, delivery count), then the consumers: name, seen time, (21: active time)
//! and their PEL ids. Every count is checked against what follows before anything is built
//! from it, and every node is walked ([`check_node`]) so later reads cannot fail.

use std::collections::BTreeSet;
use std::sync::Arc;

use super::{RdbError, Reader, Strings, put_blob, put_string, type_and_key, write_len};
use crate::types::listpack::Listpack;
use crate::types::stream::{Stream, StreamId, check_node};
use crate::types::stream_group::{Consumer, Group, INVALID_ENTRIES_READ, Nack};

/// `RDB_TYPE_STREAM_LISTPACKS`.
pub const TYPE_STREAM_1: u8 = 15;
/// `RDB_TYPE_STREAM_LISTPACKS_2`.
pub const TYPE_STREAM_2: u8 = 19;
/// `RDB_TYPE_STREAM_LISTPACKS_3`.
pub const TYPE_STREAM_3: u8 = 21;

/// Appends a stream as type 21.
pub(super) fn encode_stream(out: &mut Vec<u8>, key: Option<&[u8]>, s: &Stream, c: Strings) {
    type_and_key(out, TYPE_STREAM_3, key, c);
    write_len(out, s.node_count() as u64);
    for (master, lp) in s.nodes() {
        put_blob(out, &master.to_be_bytes(), c);
        put_blob(out, lp.as_bytes(), c);
    }
    write_len(out, s.len());
    for id in [s.last_id, s.first_id, s.max_deleted] {
        write_len(out, id.ms);
        write_len(out, id.seq);
    }
    write_len(out, s.entries_added);
    write_len(out, s.groups.len() as u64);
    for (name, g) in &s.groups {
        put_string(out, name, c);
        write_len(out, g.last_id.ms);
        write_len(out, g.last_id.seq);
        write_len(out, g.entries_read as u64);
        write_len(out, g.pel.len() as u64);
        for (id, n) in &g.pel {
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&n.delivery_time.to_le_bytes());
            write_len(out, n.delivery_count);
        }
        write_len(out, g.consumers.len() as u64);
        for (cname, cons) in &g.consumers {
            put_string(out, cname, c);
            out.extend_from_slice(&cons.seen_time.to_le_bytes());
            out.extend_from_slice(&cons.active_time.to_le_bytes());
            write_len(out, cons.pel.len() as u64);
            for id in &cons.pel {
                out.extend_from_slice(&id.to_be_bytes());
            }
        }
    }
}

/// Reads a stream of type 15, 19 or 21.
pub(super) fn read_stream(r: &mut Reader<'_>, ty: u8) -> Result<Stream, RdbError> {
    let bad = || RdbError::BadFormat;
    let mut s = Stream::new();
    let nodes = r.len()?;
    let mut last: Option<StreamId> = None;
    for _ in 0..nodes {
        let key = r.string()?;
        let master = StreamId::from_be_bytes(&key).ok_or_else(bad)?;
        if last.is_some_and(|l| master <= l) {
            return Err(bad());
        }
        let lp = Listpack::from_bytes(r.string()?).map_err(|_| bad())?;
        let (live, node_last) = check_node(master, &lp, last).ok_or_else(bad)?;
        last = Some(node_last);
        s.push_node(master, lp, live);
    }
    let length = r.len()?;
    if length != s.loaded_len() {
        return Err(bad());
    }
    s.last_id = id(r)?;
    if last.is_some_and(|l| l > s.last_id) {
        return Err(bad());
    }
    if ty >= TYPE_STREAM_2 {
        s.first_id = id(r)?;
        s.max_deleted = id(r)?;
        s.entries_added = r.len()?;
    } else {
        s.entries_added = length;
    }
    // The recorded first id is the first live entry's: recomputed, so it cannot disagree.
    s.refresh_first();
    let groups = r.len()?;
    for _ in 0..groups {
        let name = r.string()?;
        let last_id = id(r)?;
        let entries_read = if ty >= TYPE_STREAM_2 { r.len()? as i64 } else { estimate_entries_read(&s, last_id) };
        let mut g = Group::new(last_id, entries_read.max(INVALID_ENTRIES_READ));
        let pel = r.len()?;
        for _ in 0..pel {
            let id = StreamId::from_be_bytes(r.take(16)?).ok_or_else(bad)?;
            let time = i64::from_le_bytes(r.take(8)?.try_into().map_err(|_| bad())?);
            let count = r.len()?;
            let n = Nack { delivery_time: time, delivery_count: count, consumer: Arc::from(&b""[..]) };
            if g.pel.insert(id, n).is_some() {
                return Err(bad());
            }
        }
        let mut assigned = BTreeSet::new();
        let consumers = r.len()?;
        for _ in 0..consumers {
            let cname: Arc<[u8]> = Arc::from(r.string()?);
            let seen = i64::from_le_bytes(r.take(8)?.try_into().map_err(|_| bad())?);
            let active =
                if ty >= TYPE_STREAM_3 { i64::from_le_bytes(r.take(8)?.try_into().map_err(|_| bad())?) } else { seen };
            let mut owned = BTreeSet::new();
            let n = r.len()?;
            for _ in 0..n {
                let id = StreamId::from_be_bytes(r.take(16)?).ok_or_else(bad)?;
                let nack = g.pel.get_mut(&id).ok_or_else(bad)?;
                if !assigned.insert(id) || !owned.insert(id) {
                    return Err(bad());
                }
                nack.consumer = cname.clone();
            }
            let cons = Consumer { name: cname.clone(), seen_time: seen, active_time: active, pel: owned };
            if g.consumers.insert(cname, cons).is_some() {
                return Err(bad());
            }
        }
        // Every pending entry must have an owner (Valkey checks it under deep sanitization).
        if assigned.len() != g.pel.len() {
            return Err(bad());
        }
        if s.groups.insert(name, g).is_some() {
            return Err(bad());
        }
    }
    Ok(s)
}

/// `streamEstimateDistanceFromFirstEverEntry`, for groups from type 15 files.
pub fn estimate_entries_read(s: &Stream, id: StreamId) -> i64 {
    if s.entries_added == 0 {
        return 0;
    }
    if s.is_empty() && id <= s.last_id {
        return s.entries_added as i64;
    }
    if id == s.last_id {
        return s.entries_added as i64;
    }
    if id > s.last_id {
        return INVALID_ENTRIES_READ;
    }
    if s.max_deleted.is_zero() || s.max_deleted < s.first_id {
        if id < s.first_id {
            return (s.entries_added - s.len()) as i64;
        }
        if id == s.first_id {
            return (s.entries_added - s.len() + 1) as i64;
        }
    }
    INVALID_ENTRIES_READ
}

fn id(r: &mut Reader<'_>) -> Result<StreamId, RdbError> {
    Ok(StreamId::new(r.len()?, r.len()?))
}

/// Measures the string at the start of a buffer (`None`: incomplete).
pub(super) type StrLen<'a> = dyn Fn(&[u8]) -> Result<Option<usize>, RdbError> + 'a;
/// Reads the length at the start of a buffer and its size (`None`: incomplete).
pub(super) type LenAt<'a> = dyn Fn(&[u8]) -> Result<Option<(u64, usize)>, RdbError> + 'a;

/// The size of a stream record's body (after its type byte and key) at the start of `b`, `None`
/// while `b` holds only part of it. `str_len` and `len` measure one string and one length.
pub(super) fn scan_len(b: &[u8], ty: u8, str_len: &StrLen<'_>, len: &LenAt<'_>) -> Result<Option<usize>, RdbError> {
    let mut at = 0usize;
    macro_rules! string {
        () => {{
            let Some(n) = str_len(&b[at..])? else { return Ok(None) };
            at += n;
        }};
    }
    macro_rules! length {
        () => {{
            let Some((v, n)) = len(&b[at..])? else { return Ok(None) };
            at += n;
            v
        }};
    }
    macro_rules! raw {
        ($n:expr) => {{
            if b.len() < at + $n {
                return Ok(None);
            }
            at += $n;
        }};
    }
    let nodes = length!();
    for _ in 0..nodes {
        string!();
        string!();
    }
    // length and last id; then first id, max deleted id and entries added.
    let ids = if ty >= TYPE_STREAM_2 { 8 } else { 3 };
    for _ in 0..ids {
        length!();
    }
    let groups = length!();
    for _ in 0..groups {
        string!();
        length!();
        length!();
        if ty >= TYPE_STREAM_2 {
            length!();
        }
        let pel = length!();
        for _ in 0..pel {
            raw!(24);
            length!();
        }
        let consumers = length!();
        for _ in 0..consumers {
            string!();
            raw!(if ty >= TYPE_STREAM_3 { 16 } else { 8 });
            let n = length!();
            for _ in 0..n {
                raw!(16);
            }
        }
    }
    Ok(Some(at))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rdb::{Item, RdbReader};

    fn sample() -> Stream {
        let mut s = Stream::new();
        for i in 1..=250u64 {
            let v = format!("value-{i}-compressible-compressible");
            s.append(StreamId::new(i, i % 3), &[(b"item", v.as_bytes()), (b"f2", b"x")], 4096, 100);
        }
        s.delete(StreamId::new(5, 2));
        let mut g = Group::new(StreamId::new(10, 1), 10);
        g.consumer_or_create(b"alice", 1000);
        g.consumer_or_create(b"bob", 1000);
        g.assign(StreamId::new(3, 0), b"alice", 5, 2);
        s.groups.insert(b"g1".to_vec(), g);
        s
    }

    #[test]
    fn a_file_record_reads_back_in_pieces() {
        let s = sample();
        for c in [Strings::Plain, Strings::Lzf] {
            let mut file = b"REDIS0011".to_vec();
            encode_stream(&mut file, Some(b"key"), &s, c);
            file.push(0xFF);
            file.extend_from_slice(&[0; 8]);
            for piece in [1usize, 7, 1 << 20] {
                let mut r = RdbReader::new(1 << 20);
                let mut got = None;
                for chunk in file.chunks(piece) {
                    r.feed(chunk);
                    while let Some(item) = r.next_item().unwrap() {
                        if let Item::Entry { value, .. } = item {
                            got = Some(value);
                        }
                    }
                }
                match got {
                    Some(crate::rdb::Loaded::Object(crate::object::Object::Stream(back))) => assert_eq!(*back, s),
                    other => panic!("{c:?} {piece}: {other:?}"),
                }
            }
        }
    }
}
