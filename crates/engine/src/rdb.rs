//! Redis's RDB format: DUMP/RESTORE payloads, and whole files.
//!
//! Payloads (this file) move values between hotkv, Redis and Valkey (`MIGRATE`,
//! `redis-cli --cluster`, a value DUMPed from Redis and RESTOREd here). Layout:
//! `[type][object][rdb version: u16 LE][CRC-64/Jones: u64 LE]`. hotkv writes version 10
//! with encodings Redis 7.0 knows, which Redis 7.0+, Valkey 8 and 9 all load; it reads
//! versions 0–11 and 80–81, every string encoding (raw, integer, LZF) and every object
//! encoding Redis 7 and Valkey 8 load: streams (15, 19, 21; `rdb/stream.rs`), plain (types 0–5), intset (11),
//! listpacks (16, 17, 18, 20), and the older ziplists and zipmap (9, 10, 12, 13, 14, read by
//! `rdb/legacy.rs`).
//!
//! Files (a replica's full sync, `dump.rdb`) hold the same objects behind a header, opcodes
//! and a trailing checksum: [`RdbWriter`] and [`snapshot`] write them (`rdb/writer.rs`),
//! [`RdbReader`] reads them as their bytes arrive (`rdb/reader.rs`), and [`Loader`] / [`load`]
//! put their keys into a keyspace (`rdb/load.rs`).

#[cfg(test)]
mod fixture;
mod hash_ttl;
mod legacy;
mod load;
mod lzf;
mod reader;
pub mod stream;
mod writer;

pub use load::{LoadStats, Loader, load};
pub use reader::{Item, RdbReader};
pub use writer::{AuxValue, RdbWriter, WriteOptions, snapshot};

use std::fmt;

use crate::ctx::EngineConfig;
use crate::entry::ValueRef;
use crate::object::Object;
use crate::policy::{self, EvictionPolicy};
use crate::types::hash::Hash;
use crate::types::list::List;
use crate::types::listpack::Listpack;
use crate::types::lpentry::Elem;
use crate::types::set::Set;
use crate::types::zset::{Limits as ZSetLimits, ZSet, lp_score};

/// RDB version written into payloads.
pub const WRITE_VERSION: u16 = 10;

/// The newest `REDIS00nn` version read (Redis 7.4's; Valkey 8.0 stops at 11). What hotkv writes
/// stays [`WRITE_VERSION`].
pub const REDIS_MAX_VERSION: u16 = 12;

/// RDB type of a string value.
pub const TYPE_STRING: u8 = 0;
/// A list as a count of strings (read only; Redis before 3.2 wrote it).
pub const TYPE_LIST: u8 = 1;
/// A sorted set with scores as ASCII (read only).
pub const TYPE_ZSET: u8 = 3;
/// A sorted set with scores as binary doubles (written for sorted sets).
pub const TYPE_ZSET_2: u8 = 5;
/// A sorted set as one listpack of member, score pairs (read only).
pub const TYPE_ZSET_LISTPACK: u8 = 17;
/// A list as quicklist nodes, each a listpack or one plain element (written for lists).
pub const TYPE_LIST_QUICKLIST_2: u8 = 18;
/// Quicklist node container: a single element stored as is.
const CONTAINER_PLAIN: u64 = 1;
/// Quicklist node container: a listpack.
const CONTAINER_PACKED: u64 = 2;
/// RDB type of a set written as its members.
pub const TYPE_SET: u8 = 2;
/// RDB type of a hash written as field/value pairs.
pub const TYPE_HASH: u8 = 4;
/// RDB type of a set of integers as an intset blob.
pub const TYPE_SET_INTSET: u8 = 11;
/// A hash as a zipmap blob (read only; Redis before 2.6).
pub const TYPE_HASH_ZIPMAP: u8 = 9;
/// A list as one ziplist blob (read only; Redis 2.6 to 3.0).
pub const TYPE_LIST_ZIPLIST: u8 = 10;
/// A sorted set as a ziplist of member, score pairs (read only; Redis before 7.0).
pub const TYPE_ZSET_ZIPLIST: u8 = 12;
/// A hash as a ziplist of field, value pairs (read only; Redis before 7.0).
pub const TYPE_HASH_ZIPLIST: u8 = 13;
/// A list as quicklist nodes, each a ziplist blob (read only; Redis 3.2 to 6.2).
pub const TYPE_LIST_QUICKLIST: u8 = 14;
/// Stream encodings (Redis 5, 7.0, 7.2+), all read; 21 is written (`rdb/stream.rs`).
pub const TYPE_STREAMS: [u8; 3] = [15, 19, 21];
/// RDB type of a hash as a listpack blob.
pub const TYPE_HASH_LISTPACK: u8 = 16;
/// RDB type of a set as a listpack blob (Redis 7.2+, Valkey).
pub const TYPE_SET_LISTPACK: u8 = 20;

/// File opcode: a Valkey 8 cluster node's key counts of one slot (read and skipped).
pub const OPCODE_SLOT_INFO: u8 = 0xF4;
/// File opcode: a function library's code (Redis 7.0 GA and later).
pub const OPCODE_FUNCTION2: u8 = 0xF5;
/// File opcode: functions in the format of Redis 7.0's release candidates (refused).
pub const OPCODE_FUNCTION_PRE_GA: u8 = 0xF6;
/// File opcode: a module's auxiliary data (refused).
pub const OPCODE_MODULE_AUX: u8 = 0xF7;
/// File opcode: the next key's LRU idle time, in seconds.
pub const OPCODE_IDLE: u8 = 0xF8;
/// File opcode: the next key's LFU counter, one byte.
pub const OPCODE_FREQ: u8 = 0xF9;
/// File opcode: an AUX field, two strings.
pub const OPCODE_AUX: u8 = 0xFA;
/// File opcode: key and TTL counts of the selected database, a sizing hint.
pub const OPCODE_RESIZEDB: u8 = 0xFB;
/// File opcode: the next key's expire time in unix milliseconds, i64 little-endian.
pub const OPCODE_EXPIRETIME_MS: u8 = 0xFC;
/// File opcode: the next key's expire time in unix seconds, i32 little-endian (old files).
pub const OPCODE_EXPIRETIME: u8 = 0xFD;
/// File opcode: the database of the keys that follow.
pub const OPCODE_SELECTDB: u8 = 0xFE;
/// File opcode: the end of the data, followed by the checksum from version 5 on.
pub const OPCODE_EOF: u8 = 0xFF;

/// The special string encoding of an LZF-compressed string (`RDB_ENC_LZF`), after `0xC0`.
const ENC_LZF: u8 = 3;

/// A DUMP payload that cannot be restored, or RDB data that cannot be read. RESTORE only ever
/// meets the first two, whose texts are Valkey's replies; the others come from whole files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RdbError {
    /// Wrong version or checksum: `DUMP payload version or checksum are wrong`.
    VersionOrChecksum,
    /// The object does not decode: `Bad data format`.
    BadFormat,
    /// A file that starts with neither `REDIS` nor `VALKEY` and a version number.
    BadMagic,
    /// A file version this reader does not load (it reads 1–11 and Valkey's 80–81).
    UnsupportedVersion(u16),
    /// The checksum after the EOF opcode does not match the data before it.
    Checksum {
        /// What the file says.
        stored: u64,
        /// What its bytes add up to.
        computed: u64,
    },
    /// A value type hotkv cannot hold (streams, module values, Valkey 9's hashes with field
    /// expiry) or a byte that is neither a type nor an opcode this reader knows.
    UnsupportedType(u8),
    /// `MODULE_AUX` data (opcode 0xF7): hotkv has no modules to hand it to.
    ModuleAux,
    /// The function format of Redis 7.0's release candidates (opcode 0xF6), which Redis 7.0
    /// itself refuses.
    PreGaFunctions,
    /// A declared string length over the limit the reader was given (`proto-max-bulk-len`).
    TooLong {
        /// The declared length.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// `SELECTDB` names a database the keyspace does not have.
    DbOutOfRange {
        /// The database in the file.
        db: u64,
        /// How many the keyspace has.
        databases: usize,
    },
    /// The data ended before the EOF opcode (and its checksum).
    Truncated,
    /// Reading the input failed.
    Io(std::io::ErrorKind),
}

impl fmt::Display for RdbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RdbError::VersionOrChecksum => f.write_str("DUMP payload version or checksum are wrong"),
            RdbError::BadFormat => f.write_str("Bad data format"),
            RdbError::BadMagic => f.write_str("wrong signature: not an RDB file"),
            RdbError::UnsupportedVersion(v) => write!(f, "can't handle RDB format version {v}"),
            RdbError::Checksum { stored, computed } => {
                write!(f, "wrong RDB checksum: expected {stored:016x}, got {computed:016x}")
            }
            RdbError::UnsupportedType(t @ (6 | 7)) => write!(f, "module values are not supported (RDB type {t})"),
            RdbError::UnsupportedType(t) => write!(f, "unknown or unsupported RDB type or opcode {t}"),
            RdbError::ModuleAux => f.write_str("module aux data not supported"),
            RdbError::PreGaFunctions => f.write_str("pre-release function format not supported"),
            RdbError::TooLong { len, max } => write!(f, "string of {len} bytes exceeds the limit of {max}"),
            RdbError::DbOutOfRange { db, databases } => {
                write!(f, "database {db} out of range: this server has {databases} databases")
            }
            RdbError::Truncated => f.write_str("unexpected end of RDB data"),
            RdbError::Io(kind) => write!(f, "reading RDB data: {kind}"),
        }
    }
}

impl std::error::Error for RdbError {}

/// A decoded value.
#[derive(Debug, Clone, PartialEq)]
pub enum Loaded {
    /// A string.
    Str(Vec<u8>),
    /// Any other value type (added as the types land).
    Object(Object),
    /// A list's elements, front to back; the caller picks the encoding.
    List(Vec<Vec<u8>>),
    /// A list that came as one listpack (a one-node `LIST_QUICKLIST_2`, how Redis 7 and
    /// Valkey write every small list): kept as it is when that is the listpack its elements
    /// would be built into ([`List::from_listpack`]).
    ListListpack(Listpack),
    /// A sorted set's members with their scores, in no particular order, without
    /// duplicates; the caller picks the encoding.
    ZSet(Vec<(Vec<u8>, f64)>),
    /// A sorted set's listpack, checked to be in order ([`ZSet::listpack_in_order`]): kept
    /// as it is when it fits the limits.
    ZSetListpack(Listpack),
}

/// A decoded value in the encoding this server's limits call for, ready to insert.
#[derive(Debug)]
pub enum Restored {
    /// A string, stored inline in its entry.
    Str(Vec<u8>),
    /// Any other value.
    Obj(Object),
}

impl Loaded {
    /// Picks the encoding `cfg`'s limits call for (RESTORE and the RDB loader alike): lists
    /// are built to `list-max-listpack-size`, sorted sets sorted and built to their limits,
    /// hashes and sets converted when they exceed theirs.
    pub fn into_restored(self, cfg: &EngineConfig) -> Restored {
        match self {
            Loaded::Str(s) => Restored::Str(s),
            Loaded::Object(mut o) => {
                o.conform(cfg);
                Restored::Obj(o)
            }
            Loaded::List(items) => Restored::Obj(Object::List(List::from_elements(
                items.iter().map(Vec::as_slice),
                cfg.list_max_listpack_size,
            ))),
            Loaded::ListListpack(lp) => {
                Restored::Obj(Object::List(List::from_listpack(lp, cfg.list_max_listpack_size)))
            }
            Loaded::ZSet(mut items) => {
                items.sort_by(|(am, a), (bm, b)| a.total_cmp(b).then_with(|| am.cmp(bm)));
                let limits =
                    ZSetLimits { max_entries: cfg.zset_max_listpack_entries, max_value: cfg.zset_max_listpack_value };
                Restored::Obj(Object::ZSet(ZSet::from_sorted(&items, limits)))
            }
            Loaded::ZSetListpack(lp) => {
                let limits =
                    ZSetLimits { max_entries: cfg.zset_max_listpack_entries, max_value: cfg.zset_max_listpack_value };
                Restored::Obj(Object::ZSet(ZSet::from_ordered_listpack(lp, limits)))
            }
        }
    }
}

/// The access clock a restored key starts with when its payload or record carries an idle
/// time in seconds (RESTORE IDLETIME, the RDB `IDLE` opcode) or an LFU counter (FREQ): the one
/// the eviction policy uses, as Valkey's `objectSetLRUOrLFU`. `None` when neither applies, so
/// the key keeps the clock a new key gets.
pub fn access_clock(policy: EvictionPolicy, now_ms: i64, idle_s: Option<i64>, freq: Option<u8>) -> Option<u32> {
    match (freq, idle_s) {
        (Some(f), _) if policy.is_lfu() => Some((policy::initial(policy, now_ms) & !0xFF) | u32::from(f)),
        (_, Some(idle)) if !policy.is_lfu() => {
            Some(policy::lru_clock(now_ms.saturating_sub(idle.saturating_mul(1000))))
        }
        _ => None,
    }
}

/// Serialises a string value as a DUMP payload.
pub fn dump_string(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(value.len() + 16);
    encode_string(&mut out, None, value, Strings::Plain);
    finish(out)
}

/// Serialises any value as a DUMP payload (DUMP, MIGRATE), its strings and blobs written as
/// `c` says: Valkey's `createDumpPayload` compresses them under `rdbcompression yes`, as its
/// files do.
pub fn dump_value(value: ValueRef<'_>, c: Strings) -> Vec<u8> {
    let hint = match value {
        ValueRef::Str(s) => s.len() + 16,
        ValueRef::Obj(Object::Str(s)) => s.len() + 16,
        ValueRef::Obj(Object::List(l)) => l.nodes().map(|n| n.bytes() + 8).sum::<usize>() + 16,
        ValueRef::Obj(Object::ZSet(z)) => z.len() * 24 + 16,
        ValueRef::Obj(Object::Hash(h)) => h.len() * 16 + 16,
        ValueRef::Obj(Object::Set(s)) => s.len() * 8 + 16,
        ValueRef::Obj(Object::Stream(s)) => s.nodes().map(|(_, n)| n.bytes() + 24).sum::<usize>() + 64,
    };
    let mut out = Vec::with_capacity(hint);
    encode_value_with(&mut out, None, value, c);
    finish(out)
}

/// Serialises a list as `LIST_QUICKLIST_2`: its listpack nodes verbatim, which Redis 7.0+
/// and Valkey load without re-encoding.
pub fn dump_list(list: &List) -> Vec<u8> {
    let mut out = Vec::with_capacity(list.nodes().map(|n| n.bytes() + 8).sum::<usize>() + 16);
    encode_list(&mut out, None, list, Strings::Plain);
    finish(out)
}

/// Serialises a hash as a DUMP payload: a packed hash as `HASH_LISTPACK` (Redis 7.0+), its
/// elements copied as they are stored; a table as type 4, field/value pairs. Either loads on
/// Redis 7.0+ and Valkey, which re-encode to their own limits.
pub fn dump_hash(h: &Hash) -> Vec<u8> {
    let mut out = Vec::with_capacity(16);
    encode_hash(&mut out, None, h, Strings::Plain);
    finish(out)
}

/// Serialises a sorted set as `ZSET_2`, highest score first as Redis writes it (so a loader
/// inserting at the head does no searching).
pub fn dump_zset(z: &ZSet) -> Vec<u8> {
    let mut out = Vec::with_capacity(z.len() * 24 + 16);
    encode_zset(&mut out, None, z, Strings::Plain);
    finish(out)
}

/// Serialises a set as a DUMP payload: an intset as `SET_INTSET`, its stored bytes copied;
/// any other set as type 2, its members. A packed set is not written as `SET_LISTPACK`
/// (type 20), which Redis 7.0 cannot load.
pub fn dump_set(s: &Set) -> Vec<u8> {
    let mut out = Vec::with_capacity(s.len() * 8 + 16);
    encode_set(&mut out, None, s, Strings::Plain);
    finish(out)
}

/// Appends `value` as `[type][key][object]`, the key/value record of an RDB file, or as
/// `[type][object]`, the body of a DUMP payload, when `key` is `None`. Both use the same
/// encodings, the ones Redis 7.0 loads (see the `dump_*` functions). Nothing is allocated
/// beyond `out`'s growth for strings, hashes and sets.
pub fn encode_value(out: &mut Vec<u8>, key: Option<&[u8]>, value: ValueRef<'_>) {
    encode_value_with(out, key, value, Strings::Plain);
}

/// How an encoder writes strings and blobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Strings {
    /// As they are (DUMP payloads, `rdbcompression no`).
    Plain,
    /// LZF-compressed when longer than 20 bytes and compressible, as Redis writes them with
    /// `rdbcompression yes` (keys, values, elements and listpack/intset blobs alike).
    Lzf,
}

/// [`encode_value`] with a choice of string encoding.
pub fn encode_value_with(out: &mut Vec<u8>, key: Option<&[u8]>, value: ValueRef<'_>, c: Strings) {
    match value {
        ValueRef::Str(s) => encode_string(out, key, s, c),
        ValueRef::Obj(Object::Str(s)) => encode_string(out, key, s, c),
        ValueRef::Obj(Object::List(l)) => encode_list(out, key, l, c),
        ValueRef::Obj(Object::ZSet(z)) => encode_zset(out, key, z, c),
        ValueRef::Obj(Object::Hash(h)) => encode_hash(out, key, h, c),
        ValueRef::Obj(Object::Set(s)) => encode_set(out, key, s, c),
        ValueRef::Obj(Object::Stream(s)) => stream::encode_stream(out, key, s, c),
    }
}

/// The type byte, then the key when there is one (an RDB file's record).
fn type_and_key(out: &mut Vec<u8>, ty: u8, key: Option<&[u8]>, c: Strings) {
    out.push(ty);
    if let Some(key) = key {
        put_string(out, key, c);
    }
}

/// A string element: [`write_string`], or LZF-compressed when `c` asks and it pays.
fn put_string(out: &mut Vec<u8>, s: &[u8], c: Strings) {
    // Redis tries the integer encodings first (up to 11 bytes), so they never compress.
    if c == Strings::Lzf && s.len() > 11 && put_lzf(out, s) {
        return;
    }
    write_string(out, s);
}

/// A blob written as a raw string (listpack, intset): compressed under the same rule.
fn put_blob(out: &mut Vec<u8>, blob: &[u8], c: Strings) {
    if c == Strings::Lzf && put_lzf(out, blob) {
        return;
    }
    write_len(out, blob.len() as u64);
    out.extend_from_slice(blob);
}

/// Appends `s` LZF-compressed (`0xC3`, compressed length, original length, data) if Redis
/// would compress it; false when it stays as it is.
fn put_lzf(out: &mut Vec<u8>, s: &[u8]) -> bool {
    if s.len() <= lzf::COMPRESS_ABOVE {
        return false;
    }
    // The data goes straight into `out` behind room for the longest header it can need (the
    // compressed length is at most `s.len() - 4`); the header is written in front afterwards
    // and the data moved down when it came out shorter. No buffer per string.
    let start = out.len();
    let room = 1 + len_size((s.len() - 4) as u64) + len_size(s.len() as u64);
    out.resize(start + room, 0);
    if !lzf::compress_string_into(out, s) {
        out.truncate(start);
        return false;
    }
    let packed = out.len() - start - room;
    let (plen, plen_n) = len_bytes(packed as u64);
    let (slen, slen_n) = len_bytes(s.len() as u64);
    let used = 1 + plen_n + slen_n;
    out[start] = 0xC0 | ENC_LZF;
    out[start + 1..start + 1 + plen_n].copy_from_slice(&plen[..plen_n]);
    out[start + 1 + plen_n..start + used].copy_from_slice(&slen[..slen_n]);
    if used < room {
        out.copy_within(start + room.., start + used);
        out.truncate(out.len() - (room - used));
    }
    true
}

fn encode_string(out: &mut Vec<u8>, key: Option<&[u8]>, value: &[u8], c: Strings) {
    type_and_key(out, TYPE_STRING, key, c);
    put_string(out, value, c);
}

fn encode_list(out: &mut Vec<u8>, key: Option<&[u8]>, list: &List, c: Strings) {
    type_and_key(out, TYPE_LIST_QUICKLIST_2, key, c);
    // Counted first rather than collected: no allocation per list.
    write_len(out, list.nodes().filter(|n| !n.is_empty()).count() as u64);
    for n in list.nodes().filter(|n| !n.is_empty()) {
        write_len(out, CONTAINER_PACKED);
        put_blob(out, n.as_bytes(), c);
    }
}

fn encode_hash(out: &mut Vec<u8>, key: Option<&[u8]>, h: &Hash, c: Strings) {
    if hash_ttl::encode(out, key, h, c) {
        return;
    }
    if let Hash::Packed(p) = h {
        let blob = p.listpack_bytes();
        // Past Valkey's listpack safety limit the blob would be refused: pairs then.
        if blob <= LISTPACK_MAX_SAFETY_SIZE {
            type_and_key(out, TYPE_HASH_LISTPACK, key, c);
            if c == Strings::Lzf {
                with_scratch(|lp| {
                    p.write_listpack(lp);
                    put_blob(out, lp, c);
                });
                return;
            }
            out.reserve(blob + 9);
            write_len(out, blob as u64);
            p.write_listpack(out);
            return;
        }
    }
    type_and_key(out, TYPE_HASH, key, c);
    write_len(out, h.len() as u64);
    for (f, v) in h.iter() {
        f.with_bytes(|b| put_string(out, b, c));
        v.with_bytes(|b| put_string(out, b, c));
    }
}

fn encode_zset(out: &mut Vec<u8>, key: Option<&[u8]>, z: &ZSet, c: Strings) {
    // A small set is already the listpack Redis 7 and Valkey write: its bytes go out as they
    // are, and load back without re-encoding.
    if let ZSet::Packed(lp) = z
        && lp.bytes() <= LISTPACK_MAX_SAFETY_SIZE
    {
        type_and_key(out, TYPE_ZSET_LISTPACK, key, c);
        put_blob(out, lp.as_bytes(), c);
        return;
    }
    type_and_key(out, TYPE_ZSET_2, key, c);
    write_len(out, z.len() as u64);
    for (m, score) in z.range(z.len().saturating_sub(1), z.len(), true) {
        m.with_bytes(|b| put_string(out, b, c));
        out.extend_from_slice(&score.to_le_bytes());
    }
}

fn encode_set(out: &mut Vec<u8>, key: Option<&[u8]>, s: &Set, c: Strings) {
    if let Set::Ints(i) = s {
        type_and_key(out, TYPE_SET_INTSET, key, c);
        if c == Strings::Lzf {
            with_scratch(|blob| {
                i.write_blob(blob);
                put_blob(out, blob, c);
            });
            return;
        }
        out.reserve(i.blob_bytes() + 9);
        write_len(out, i.blob_bytes() as u64);
        i.write_blob(out);
        return;
    }
    type_and_key(out, TYPE_SET, key, c);
    write_len(out, s.len() as u64);
    for m in s.iter() {
        m.with_bytes(|b| put_string(out, b, c));
    }
}

/// Runs `f` with an empty buffer this thread keeps: a blob that must be built before it can be
/// compressed (a hash's listpack, an intset) needs no allocation of its own per value.
fn with_scratch<R>(f: impl FnOnce(&mut Vec<u8>) -> R) -> R {
    thread_local! {
        static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    SCRATCH.with(|cell| {
        // Taken out rather than borrowed, so a nested use cannot fail: it gets a new buffer.
        let mut buf = std::mem::take(&mut *cell.borrow_mut());
        buf.clear();
        let r = f(&mut buf);
        // Kept for the next value unless an unusually large blob grew it.
        if buf.capacity() <= SCRATCH_KEEP {
            *cell.borrow_mut() = buf;
        }
        r
    })
}

/// Largest scratch buffer a thread keeps between values.
const SCRATCH_KEEP: usize = 1 << 20;

/// Appends the version and checksum to an encoded object.
pub fn finish(mut out: Vec<u8>) -> Vec<u8> {
    out.extend_from_slice(&WRITE_VERSION.to_le_bytes());
    let crc = crc64(0, &out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

/// FUNCTION DUMP's payload: each library's code as a `FUNCTION2` record, then the version
/// and checksum footer of a DUMP payload.
pub fn dump_functions<'c>(codes: impl Iterator<Item = &'c [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OPCODE_FUNCTION2);
        write_string(&mut out, code);
    }
    finish(out)
}

/// Why a FUNCTION RESTORE payload was refused, with Valkey's texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FunctionsPayloadError {
    /// `DUMP payload version or checksum are wrong`.
    VersionOrChecksum,
    /// A record that is not a library.
    NotAFunction,
    /// The release-candidate format (0xF6).
    PreGa,
    /// A record that does not parse.
    Unreadable,
}

impl std::fmt::Display for FunctionsPayloadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            FunctionsPayloadError::VersionOrChecksum => "DUMP payload version or checksum are wrong",
            FunctionsPayloadError::NotAFunction => "given type is not a function",
            FunctionsPayloadError::PreGa => "Pre-GA function format not supported",
            FunctionsPayloadError::Unreadable => "can not read data type",
        })
    }
}

/// The libraries' codes in a FUNCTION DUMP payload, its footer checked first. `max_string`
/// bounds each code.
pub fn restore_functions(payload: &[u8], max_string: u64) -> Result<Vec<Vec<u8>>, FunctionsPayloadError> {
    if payload.len() < 10 {
        return Err(FunctionsPayloadError::VersionOrChecksum);
    }
    let (body, footer) = payload.split_at(payload.len() - 8);
    let version = u16::from_le_bytes([body[body.len() - 2], body[body.len() - 1]]);
    let crc = u64::from_le_bytes(footer.try_into().map_err(|_| FunctionsPayloadError::VersionOrChecksum)?);
    if !known_payload_version(version) || crc != crc64(0, body) {
        return Err(FunctionsPayloadError::VersionOrChecksum);
    }
    let max_string = usize::try_from(max_string).unwrap_or(usize::MAX);
    let mut r = Reader { buf: &body[..body.len() - 2], pos: 0, max_string };
    let mut codes = Vec::new();
    while r.remaining() > 0 {
        match r.byte().map_err(|_| FunctionsPayloadError::Unreadable)? {
            OPCODE_FUNCTION2 => codes.push(r.string().map_err(|_| FunctionsPayloadError::Unreadable)?),
            OPCODE_FUNCTION_PRE_GA => return Err(FunctionsPayloadError::PreGa),
            _ => return Err(FunctionsPayloadError::NotAFunction),
        }
    }
    Ok(codes)
}

/// Checks version and checksum and decodes the object. `max_string` bounds every string the
/// object may hold once decoded (the server passes `proto-max-bulk-len`): compressed strings
/// can claim far more than the payload carries.
pub fn restore(payload: &[u8], max_string: u64) -> Result<Loaded, RdbError> {
    if payload.len() < 10 {
        return Err(RdbError::VersionOrChecksum);
    }
    let (body, footer) = payload.split_at(payload.len() - 8);
    let version = u16::from_le_bytes([body[body.len() - 2], body[body.len() - 1]]);
    if !known_payload_version(version) {
        return Err(RdbError::VersionOrChecksum);
    }
    let crc = u64::from_le_bytes(footer.try_into().map_err(|_| RdbError::VersionOrChecksum)?);
    if crc != crc64(0, body) {
        return Err(RdbError::VersionOrChecksum);
    }
    let max_string = usize::try_from(max_string).unwrap_or(usize::MAX);
    let mut r = Reader { buf: &body[..body.len() - 2], pos: 0, max_string };
    let ty = r.byte()?;
    let value = read_object(&mut r, ty, version)?;
    if r.pos != r.buf.len() {
        return Err(RdbError::BadFormat);
    }
    Ok(value)
}

/// Whether a DUMP payload of `version` is read: Valkey 8's `verifyDumpPayload` refuses only
/// versions above its own (11), so 0 is accepted; hotkv reads Redis 7.4's 12 too, and Valkey's
/// own range.
fn known_payload_version(version: u16) -> bool {
    (0..=REDIS_MAX_VERSION).contains(&version) || (80..=81).contains(&version)
}

/// Decodes the object of RDB type `ty` at the reader's position: the part of a DUMP payload
/// after its type byte, or of an RDB file's record after its key. `version` is the payload's
/// or file's RDB version: a few type numbers mean different things to Redis and Valkey.
pub fn read_object(r: &mut Reader<'_>, ty: u8, version: u16) -> Result<Loaded, RdbError> {
    Ok(match ty {
        TYPE_STRING => Loaded::Str(r.string()?),
        TYPE_LIST => Loaded::List(read_list(r)?),
        TYPE_LIST_QUICKLIST_2 => read_quicklist(r)?,
        TYPE_ZSET_LISTPACK => {
            let lp = Listpack::from_bytes(r.string()?).map_err(|_| RdbError::BadFormat)?;
            if ZSet::listpack_in_order(&lp) {
                Loaded::ZSetListpack(lp)
            } else {
                Loaded::ZSet(zset_listpack_items(&lp)?)
            }
        }
        TYPE_ZSET | TYPE_ZSET_2 => Loaded::ZSet(read_zset(r, ty)?),
        TYPE_SET => Loaded::Object(Object::Set(read_set(r)?)),
        TYPE_HASH => Loaded::Object(Object::Hash(read_hash(r)?)),
        TYPE_SET_INTSET => Loaded::Object(Object::Set(Set::from_intset(&r.string()?).ok_or(RdbError::BadFormat)?)),
        TYPE_SET_LISTPACK => Loaded::Object(Object::Set(Set::from_listpack(&r.string()?).ok_or(RdbError::BadFormat)?)),
        TYPE_HASH_LISTPACK => {
            Loaded::Object(Object::Hash(Hash::from_listpack(&r.string()?).ok_or(RdbError::BadFormat)?))
        }
        TYPE_LIST_ZIPLIST => Loaded::List(non_empty(ziplist_items(&r.string()?, Vec::new())?)?),
        TYPE_LIST_QUICKLIST => Loaded::List(read_ziplist_quicklist(r)?),
        TYPE_ZSET_ZIPLIST => Loaded::ZSet(read_zset(r, ty)?),
        TYPE_HASH_ZIPLIST => Loaded::Object(Object::Hash(read_hash_ziplist(&r.string()?)?)),
        TYPE_HASH_ZIPMAP => Loaded::Object(Object::Hash(read_hash_zipmap(&r.string()?)?)),
        hash_ttl::TYPE_HASH_LISTPACK_EX_PRE_GA..=hash_ttl::TYPE_HASH_LISTPACK_EX => {
            Loaded::Object(Object::Hash(hash_ttl::read(r, ty)?))
        }
        // Redis 7.4's release candidates wrote it in version 12; Valkey 9's 22 is another type.
        hash_ttl::TYPE_HASH_METADATA_PRE_GA if version == 12 => Loaded::Object(Object::Hash(hash_ttl::read(r, ty)?)),
        15 | 19 | 21 => Loaded::Object(Object::Stream(Box::new(stream::read_stream(r, ty)?))),
        // Modules (6, 7) and types from the future: Valkey's reply for all of them.
        _ => return Err(RdbError::BadFormat),
    })
}

/// A set written as its members; empty or with repeated members is corrupt, as in Valkey.
fn read_set(r: &mut Reader<'_>) -> Result<Set, RdbError> {
    let n = r.len()?;
    // No capacity from the untrusted count: the reader fails at the end of the payload first.
    let mut members = Vec::new();
    for _ in 0..n {
        members.push(r.string()?);
    }
    if members.is_empty() {
        return Err(RdbError::BadFormat);
    }
    Set::from_members(&members).ok_or(RdbError::BadFormat)
}

/// A hash written as field/value pairs; empty or with repeated fields is corrupt.
fn read_hash(r: &mut Reader<'_>) -> Result<Hash, RdbError> {
    let n = r.len()?;
    let mut pairs = Vec::new();
    for _ in 0..n {
        pairs.push((r.string()?, r.string()?));
    }
    if pairs.is_empty() {
        return Err(RdbError::BadFormat);
    }
    Hash::from_pairs(&pairs).ok_or(RdbError::BadFormat)
}

/// Writes an RDB length.
pub fn write_len(out: &mut Vec<u8>, n: u64) {
    let (b, used) = len_bytes(n);
    out.extend_from_slice(&b[..used]);
}

/// An RDB length's bytes: the buffer and how many of its bytes are used.
fn len_bytes(n: u64) -> ([u8; 9], usize) {
    let mut b = [0u8; 9];
    if n < 1 << 6 {
        b[0] = n as u8;
        (b, 1)
    } else if n < 1 << 14 {
        b[0] = 0x40 | (n >> 8) as u8;
        b[1] = n as u8;
        (b, 2)
    } else if n <= u64::from(u32::MAX) {
        b[0] = 0x80;
        b[1..5].copy_from_slice(&(n as u32).to_be_bytes());
        (b, 5)
    } else {
        b[0] = 0x81;
        b[1..9].copy_from_slice(&n.to_be_bytes());
        (b, 9)
    }
}

/// How many bytes [`write_len`] writes for `n`.
fn len_size(n: u64) -> usize {
    len_bytes(n).1
}

/// Writes a string, using the integer encodings for short decimal integers as Redis does.
pub fn write_string(out: &mut Vec<u8>, s: &[u8]) {
    if s.len() <= 11
        && let Some(v) = hotkv_protocol::parse_i64(s)
    {
        if let Ok(v) = i8::try_from(v) {
            out.extend_from_slice(&[0xC0, v as u8]);
            return;
        }
        if let Ok(v) = i16::try_from(v) {
            out.push(0xC1);
            out.extend_from_slice(&v.to_le_bytes());
            return;
        }
        if let Ok(v) = i32::try_from(v) {
            out.push(0xC2);
            out.extend_from_slice(&v.to_le_bytes());
            return;
        }
    }
    write_len(out, s.len() as u64);
    out.extend_from_slice(s);
}

/// A cursor over an RDB object.
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
    /// Longest string a compressed encoding may expand to.
    max_string: usize,
}

impl<'a> Reader<'a> {
    /// A reader over `buf` whose compressed strings expand to at most `max_string` bytes.
    pub fn new(buf: &'a [u8], max_string: usize) -> Reader<'a> {
        Reader { buf, pos: 0, max_string }
    }

    /// Bytes not read yet.
    pub fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }

    /// One byte.
    pub fn byte(&mut self) -> Result<u8, RdbError> {
        let b = *self.buf.get(self.pos).ok_or(RdbError::BadFormat)?;
        self.pos += 1;
        Ok(b)
    }

    /// `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], RdbError> {
        let end = self.pos.checked_add(n).ok_or(RdbError::BadFormat)?;
        let s = self.buf.get(self.pos..end).ok_or(RdbError::BadFormat)?;
        self.pos = end;
        Ok(s)
    }

    /// A length, or the special-encoding marker of a string (`Err(code)` inside `Ok`).
    fn len_or_special(&mut self) -> Result<Result<u64, u8>, RdbError> {
        let b = self.byte()?;
        Ok(match b >> 6 {
            0 => Ok(u64::from(b & 0x3F)),
            1 => Ok((u64::from(b & 0x3F) << 8) | u64::from(self.byte()?)),
            2 if b == 0x80 => {
                Ok(u64::from(u32::from_be_bytes(self.take(4)?.try_into().map_err(|_| RdbError::BadFormat)?)))
            }
            2 if b == 0x81 => Ok(u64::from_be_bytes(self.take(8)?.try_into().map_err(|_| RdbError::BadFormat)?)),
            2 => return Err(RdbError::BadFormat),
            _ => Err(b & 0x3F),
        })
    }

    /// Reads a length (not the reader's size: it consumes input).
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&mut self) -> Result<u64, RdbError> {
        self.len_or_special()?.map_err(|_| RdbError::BadFormat)
    }

    /// A string in any encoding.
    pub fn string(&mut self) -> Result<Vec<u8>, RdbError> {
        match self.len_or_special()? {
            Ok(n) => Ok(self.take(usize::try_from(n).map_err(|_| RdbError::BadFormat)?)?.to_vec()),
            Err(0) => Ok((self.byte()? as i8).to_string().into_bytes()),
            Err(1) => Ok(i16::from_le_bytes(self.take(2)?.try_into().map_err(|_| RdbError::BadFormat)?)
                .to_string()
                .into_bytes()),
            Err(2) => Ok(i32::from_le_bytes(self.take(4)?.try_into().map_err(|_| RdbError::BadFormat)?)
                .to_string()
                .into_bytes()),
            Err(3) => {
                let clen = usize::try_from(self.len()?).map_err(|_| RdbError::BadFormat)?;
                let len = usize::try_from(self.len()?).map_err(|_| RdbError::BadFormat)?;
                if len > self.max_string {
                    return Err(RdbError::BadFormat);
                }
                lzf_decompress(self.take(clen)?, len)
            }
            Err(_) => Err(RdbError::BadFormat),
        }
    }
}

/// A length that must fit memory: it bounds an allocation only after the data was seen.
fn count(r: &mut Reader<'_>) -> Result<usize, RdbError> {
    usize::try_from(r.len()?).map_err(|_| RdbError::BadFormat)
}

/// `LIST`: a count, then the elements.
fn read_list(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, RdbError> {
    let n = count(r)?;
    // Every element takes at least one byte, so what is left bounds the count that is real.
    let mut items = Vec::with_capacity(n.min(r.remaining()));
    for _ in 0..n {
        items.push(r.string()?);
    }
    non_empty(items)
}

/// `LIST_QUICKLIST_2`: a node count, then per node a container kind and a blob. Empty
/// listpack nodes are skipped, as Valkey does. A list of one listpack node keeps that node.
fn read_quicklist(r: &mut Reader<'_>) -> Result<Loaded, RdbError> {
    let n = count(r)?;
    let mut items = Vec::new();
    for _ in 0..n {
        let container = r.len()?;
        let blob = r.string()?;
        match container {
            CONTAINER_PLAIN => items.push(blob),
            CONTAINER_PACKED => {
                let lp = Listpack::from_bytes(blob).map_err(|_| RdbError::BadFormat)?;
                if n == 1 && !lp.is_empty() {
                    return Ok(Loaded::ListListpack(lp));
                }
                items.extend(lp.iter().map(|v| v.to_vec()));
            }
            _ => return Err(RdbError::BadFormat),
        }
    }
    Ok(Loaded::List(non_empty(items)?))
}

/// `ZSET` (ASCII scores), `ZSET_2` (binary scores), `ZSET_LISTPACK` or `ZSET_ZIPLIST`.
/// Duplicate members and NaN scores are corrupt data, as in Valkey's loader.
fn read_zset(r: &mut Reader<'_>, ty: u8) -> Result<Vec<(Vec<u8>, f64)>, RdbError> {
    let mut items = Vec::new();
    if ty == TYPE_ZSET_ZIPLIST {
        let mut member = None;
        legacy::ziplist_for_each(&r.string()?, |v| {
            match member.take() {
                None => member = Some(v.to_vec()),
                Some(m) => items.push((m, scored(v, v)?.1)),
            }
            Ok(())
        })?;
        if member.is_some() {
            return Err(RdbError::BadFormat);
        }
    } else {
        let n = count(r)?;
        for _ in 0..n {
            let m = r.string()?;
            let score = if ty == TYPE_ZSET_2 {
                f64::from_le_bytes(r.take(8)?.try_into().map_err(|_| RdbError::BadFormat)?)
            } else {
                ascii_score(r)?
            };
            items.push((m, score));
        }
    }
    checked_zset(items)
}

/// The pairs of a sorted set's listpack that is not in order: sorted later, or refused.
fn zset_listpack_items(lp: &Listpack) -> Result<Vec<(Vec<u8>, f64)>, RdbError> {
    let mut items = Vec::new();
    let mut it = lp.iter();
    while let Some(m) = it.next() {
        items.push(scored(m, it.next().ok_or(RdbError::BadFormat)?)?);
    }
    checked_zset(items)
}

/// A NaN score, a member twice or no member at all is corrupt.
fn checked_zset(items: Vec<(Vec<u8>, f64)>) -> Result<Vec<(Vec<u8>, f64)>, RdbError> {
    if items.iter().any(|(_, s)| s.is_nan()) {
        return Err(RdbError::BadFormat);
    }
    let mut seen = std::collections::HashSet::with_capacity(items.len());
    if !items.iter().all(|(m, _)| seen.insert(m.as_slice())) {
        return Err(RdbError::BadFormat);
    }
    non_empty(items)
}

/// A member and its score entry from a listpack or ziplist; a score string that is not a
/// number is corrupt.
fn scored(member: Elem<'_>, score: Elem<'_>) -> Result<(Vec<u8>, f64), RdbError> {
    if let Elem::Str(b) = score
        && hotkv_protocol::parse_double(b).is_none()
        && !matches!(b, b"inf" | b"-inf")
    {
        return Err(RdbError::BadFormat);
    }
    Ok((member.to_vec(), lp_score(score)))
}

/// Appends a ziplist's entries to `items`.
fn ziplist_items(blob: &[u8], mut items: Vec<Vec<u8>>) -> Result<Vec<Vec<u8>>, RdbError> {
    legacy::ziplist_for_each(blob, |v| {
        items.push(v.to_vec());
        Ok(())
    })?;
    Ok(items)
}

/// `LIST_QUICKLIST`: a node count, then each node a ziplist blob. Empty nodes are skipped, as
/// Valkey does; a list left with no element is corrupt.
fn read_ziplist_quicklist(r: &mut Reader<'_>) -> Result<Vec<Vec<u8>>, RdbError> {
    let n = count(r)?;
    let mut items = Vec::new();
    for _ in 0..n {
        items = ziplist_items(&r.string()?, items)?;
    }
    non_empty(items)
}

/// `HASH_ZIPLIST`: alternating fields and values; odd, empty or with a repeated field is
/// corrupt (Valkey's `ziplistPairsConvertAndValidateIntegrity`).
fn read_hash_ziplist(blob: &[u8]) -> Result<Hash, RdbError> {
    let (mut pairs, mut field) = (Vec::new(), None);
    legacy::ziplist_for_each(blob, |v| {
        match field.take() {
            None => field = Some(v.to_vec()),
            Some(f) => pairs.push((f, v.to_vec())),
        }
        Ok(())
    })?;
    if field.is_some() || pairs.is_empty() {
        return Err(RdbError::BadFormat);
    }
    Hash::from_pairs(&pairs).ok_or(RdbError::BadFormat)
}

/// `HASH_ZIPMAP`: field/value pairs; a repeated field is corrupt, as in Valkey.
fn read_hash_zipmap(blob: &[u8]) -> Result<Hash, RdbError> {
    let mut pairs = Vec::new();
    legacy::zipmap_for_each(blob, |f, v| {
        pairs.push((f.to_vec(), v.to_vec()));
        Ok(())
    })?;
    Hash::from_pairs(&pairs).ok_or(RdbError::BadFormat)
}

/// `rdbLoadDoubleValue`: a length byte (253 NaN, 254 +inf, 255 -inf) and ASCII digits.
fn ascii_score(r: &mut Reader<'_>) -> Result<f64, RdbError> {
    match r.byte()? {
        253 => Ok(f64::NAN),
        254 => Ok(f64::INFINITY),
        255 => Ok(f64::NEG_INFINITY),
        n => {
            let text = std::str::from_utf8(r.take(usize::from(n))?).map_err(|_| RdbError::BadFormat)?;
            text.trim().parse().map_err(|_| RdbError::BadFormat)
        }
    }
}

/// Valkey refuses to restore an empty collection.
fn non_empty<T>(items: Vec<T>) -> Result<Vec<T>, RdbError> {
    if items.is_empty() { Err(RdbError::BadFormat) } else { Ok(items) }
}

/// Largest listpack Valkey accepts (`LISTPACK_MAX_SAFETY_SIZE`, 1 GiB).
const LISTPACK_MAX_SAFETY_SIZE: usize = 1 << 30;

/// Most bytes one byte of LZF input can produce: a long back reference is three bytes (control,
/// length, offset) that copy 7 + 255 + 2 = 264 bytes.
const LZF_MAX_RATIO: usize = 88;

/// LZF decompression (the format Redis uses for compressed RDB strings).
///
/// `out_len` comes from the payload, so it is a claim, not a fact: it is checked against what
/// `input` can produce before anything is allocated from it (a 40-byte payload claiming 2^62
/// bytes must be `Bad data format`, not an allocation failure), and the output then grows
/// only as fast as real input fills it.
fn lzf_decompress(input: &[u8], out_len: usize) -> Result<Vec<u8>, RdbError> {
    // Redis and Valkey decompress nothing into an empty string, whatever the input holds.
    if out_len == 0 {
        return Ok(Vec::new());
    }
    if out_len > input.len().saturating_mul(LZF_MAX_RATIO) {
        return Err(RdbError::BadFormat);
    }
    let mut out = Vec::new();
    out.try_reserve_exact(out_len.min(input.len().saturating_mul(4))).map_err(|_| RdbError::BadFormat)?;
    let mut i = 0;
    while i < input.len() {
        let ctrl = usize::from(input[i]);
        i += 1;
        if ctrl < 32 {
            // A literal run of ctrl + 1 bytes.
            let run = input.get(i..i + ctrl + 1).ok_or(RdbError::BadFormat)?;
            out.extend_from_slice(run);
            i += ctrl + 1;
        } else {
            // A back reference: length (3 bits, extended by a byte when 7) and offset.
            let mut len = ctrl >> 5;
            if len == 7 {
                len += usize::from(*input.get(i).ok_or(RdbError::BadFormat)?);
                i += 1;
            }
            let low = usize::from(*input.get(i).ok_or(RdbError::BadFormat)?);
            i += 1;
            let back = ((ctrl & 0x1F) << 8) + low + 1;
            let start = out.len().checked_sub(back).ok_or(RdbError::BadFormat)?;
            // Byte by byte: the reference may overlap what it produces.
            for k in 0..len + 2 {
                let b = out[start + k];
                out.push(b);
            }
        }
        if out.len() > out_len {
            return Err(RdbError::BadFormat);
        }
    }
    if out.len() != out_len {
        return Err(RdbError::BadFormat);
    }
    Ok(out)
}

/// Slice-by-8 tables of CRC-64/Jones: `CRC_TABLES[0]` is the bytewise table, and
/// `CRC_TABLES[k][i]` is the CRC of byte `i` followed by `k` zero bytes.
const CRC_TABLES: [[u64; 256]; 8] = {
    let mut t = [[0u64; 256]; 8];
    let mut i = 0;
    while i < 256 {
        let mut c = i as u64;
        let mut bit = 0;
        while bit < 8 {
            c = if c & 1 == 1 { (c >> 1) ^ 0x95AC_9329_AC4B_C9B5 } else { c >> 1 };
            bit += 1;
        }
        t[0][i] = c;
        i += 1;
    }
    let mut k = 1;
    while k < 8 {
        let mut i = 0;
        while i < 256 {
            let prev = t[k - 1][i];
            t[k][i] = (prev >> 8) ^ t[0][(prev & 0xFF) as usize];
            i += 1;
        }
        k += 1;
    }
    t
};

/// CRC-64/Jones (reflected), the checksum of RDB files and DUMP payloads. Eight bytes per
/// step (slice-by-8, as Redis does): byte at a time, checksumming was a tenth of a MIGRATE's
/// cost on the source, every value being checksummed when it is sent and again when its
/// second turn checks it is unchanged.
pub fn crc64(mut crc: u64, data: &[u8]) -> u64 {
    let t = &CRC_TABLES;
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        let c = crc ^ u64::from_le_bytes(word);
        crc = t[7][(c & 0xFF) as usize]
            ^ t[6][((c >> 8) & 0xFF) as usize]
            ^ t[5][((c >> 16) & 0xFF) as usize]
            ^ t[4][((c >> 24) & 0xFF) as usize]
            ^ t[3][((c >> 32) & 0xFF) as usize]
            ^ t[2][((c >> 40) & 0xFF) as usize]
            ^ t[1][((c >> 48) & 0xFF) as usize]
            ^ t[0][(c >> 56) as usize];
    }
    for &b in chunks.remainder() {
        crc = t[0][((crc ^ u64::from(b)) & 0xFF) as usize] ^ (crc >> 8);
    }
    crc
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_eight_bytes_at_a_time_matches_byte_at_a_time() {
        let bytewise = |data: &[u8]| {
            data.iter().fold(0u64, |crc, &b| CRC_TABLES[0][((crc ^ u64::from(b)) & 0xFF) as usize] ^ (crc >> 8))
        };
        let data: Vec<u8> = (0..300u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 64, 299, 300] {
            assert_eq!(crc64(0, &data[..len]), bytewise(&data[..len]), "len {len}");
        }
        // Chained: a checksum continued over a second piece.
        assert_eq!(crc64(crc64(0, &data[..13]), &data[13..]), bytewise(&data));
    }

    fn restore_all(payload: &[u8]) -> Result<Loaded, RdbError> {
        restore(payload, u64::MAX)
    }

    /// A sorted-set listpack payload of the given elements, as Redis 7 lays it out.
    fn zset_listpack(elems: &[&[u8]]) -> Vec<u8> {
        let mut lp = Listpack::new();
        for e in elems {
            lp.push_back(e);
        }
        let mut body = vec![TYPE_ZSET_LISTPACK];
        write_len(&mut body, lp.bytes() as u64);
        body.extend_from_slice(lp.as_bytes());
        finish(body)
    }

    #[test]
    fn zset_listpacks_in_order_are_kept_whole_and_others_sorted_or_refused() {
        let cfg = EngineConfig::default();
        let restored = |p: &[u8]| match restore_all(p).map(|l| l.into_restored(&cfg)) {
            Ok(Restored::Obj(Object::ZSet(z))) => Ok(z),
            Ok(other) => panic!("zset expected, got {other:?}"),
            Err(e) => Err(e),
        };
        // In order, with integer members and infinite scores: adopted as it is.
        let ordered: &[&[u8]] = &[b"x", b"-inf", b"7", b"1", b"b", b"1", b"a", b"2.5", b"z", b"inf"];
        let Ok(Loaded::ZSetListpack(_)) = restore_all(&zset_listpack(ordered)) else { panic!("kept whole") };
        let z = restored(&zset_listpack(ordered)).unwrap();
        let mut again = Vec::new();
        encode_value(&mut again, None, ValueRef::Obj(&Object::ZSet(z.clone())));
        assert_eq!(finish(again), zset_listpack(ordered), "written back byte for byte");
        // Out of order: sorted on the slow path, same set.
        let shuffled: &[&[u8]] = &[b"z", b"inf", b"a", b"2.5", b"7", b"1", b"x", b"-inf", b"b", b"1"];
        let Ok(Loaded::ZSet(_)) = restore_all(&zset_listpack(shuffled)) else { panic!("slow path") };
        assert_eq!(restored(&zset_listpack(shuffled)).unwrap(), z);
        // Corrupt: a member twice (in score order), a score that is no number, NaN, odd count.
        for bad in [&[&b"a"[..], b"1", b"b", b"2", b"a", b"3"][..], &[b"a", b"x"], &[b"a", b"nan"], &[b"a", b"1", b"b"]]
        {
            assert_eq!(restore_all(&zset_listpack(bad)), Err(RdbError::BadFormat), "{bad:?}");
        }
        // Past the limits: converted as ZADD would have.
        let small = EngineConfig { zset_max_listpack_entries: 2, ..EngineConfig::default() };
        let Ok(Restored::Obj(Object::ZSet(big))) =
            restore_all(&zset_listpack(ordered)).map(|l| l.into_restored(&small))
        else {
            panic!("zset expected")
        };
        assert_eq!(big.encoding(), "skiplist");
        let owned = |z: &ZSet| z.iter().into_iter().map(|(m, s)| (m.to_vec(), s)).collect::<Vec<_>>();
        assert_eq!(owned(&big), owned(&z));
    }

    #[test]
    fn function_payloads_round_trip_and_bad_ones_are_refused() {
        let p = dump_functions([&b"#!lua name=a\n"[..], b"#!lua name=b\n"].into_iter());
        assert_eq!(
            restore_functions(&p, 1 << 20).unwrap(),
            vec![b"#!lua name=a\n".to_vec(), b"#!lua name=b\n".to_vec()]
        );
        let mut bad = p.clone();
        bad[3] ^= 1;
        assert_eq!(restore_functions(&bad, 1 << 20), Err(FunctionsPayloadError::VersionOrChecksum));
        assert_eq!(restore_functions(b"x", 1 << 20), Err(FunctionsPayloadError::VersionOrChecksum));
        assert_eq!(restore_functions(&dump_string(b"v"), 1 << 20), Err(FunctionsPayloadError::NotAFunction));
        assert_eq!(
            restore_functions(&finish(vec![OPCODE_FUNCTION2, 0x80]), 1 << 20),
            Err(FunctionsPayloadError::Unreadable)
        );
    }

    #[test]
    fn crc64_check_value() {
        assert_eq!(crc64(0, b"123456789"), 0xe9c6_d914_c4b8_d9ca);
    }

    #[test]
    fn matches_a_payload_redis_wrote() {
        // DUMP of "hello" from Redis 7.0 (cluster client contract, section 4).
        let redis =
            [0x00, 0x05, b'h', b'e', b'l', b'l', b'o', 0x0a, 0x00, 0x63, 0x72, 0xdf, 0x76, 0x65, 0x34, 0x20, 0x0a];
        assert_eq!(dump_string(b"hello"), redis);
        assert_eq!(restore_all(&redis), Ok(Loaded::Str(b"hello".to_vec())));
    }

    #[test]
    fn integers_and_long_strings_round_trip() {
        for v in [&b"0"[..], b"-128", b"127", b"32767", b"-2147483648", b"2147483648", b"007", &[b'x'; 20000]] {
            assert_eq!(restore_all(&dump_string(v)), Ok(Loaded::Str(v.to_vec())), "{:?}", String::from_utf8_lossy(v));
        }
    }

    #[test]
    fn lzf_strings_from_redis_decode() {
        // A 40-byte "aaaa..." string LZF-compressed as Redis does: literal 'a', back reference.
        let mut body = vec![TYPE_STRING, 0xC3];
        let compressed = [0x00, b'a', 0xE0, 0x1E, 0x00];
        write_len(&mut body, compressed.len() as u64);
        write_len(&mut body, 40);
        body.extend_from_slice(&compressed);
        let payload = finish(body);
        assert_eq!(restore_all(&payload), Ok(Loaded::Str(vec![b'a'; 40])));
    }

    #[test]
    fn lzf_lengths_are_claims_checked_before_allocating() {
        let compressed = [0x00, b'a', 0xE0, 0x1E, 0x00];
        let payload = |len: u64, max: u64| {
            let mut body = vec![TYPE_STRING, 0xC3];
            write_len(&mut body, compressed.len() as u64);
            write_len(&mut body, len);
            body.extend_from_slice(&compressed);
            restore(&finish(body), max)
        };
        // The payload: 2^62 claimed from 5 bytes of input.
        assert_eq!(payload(1 << 62, u64::MAX), Err(RdbError::BadFormat));
        assert_eq!(payload((1 << 32) + 40, u64::MAX), Err(RdbError::BadFormat));
        assert_eq!(payload(41, u64::MAX), Err(RdbError::BadFormat), "one byte more than the input makes");
        assert_eq!(payload(40, 39), Err(RdbError::BadFormat), "longer than proto-max-bulk-len");
        assert_eq!(payload(40, 40), Ok(Loaded::Str(vec![b'a'; 40])));
        assert_eq!(payload(0, u64::MAX), Ok(Loaded::Str(Vec::new())), "Redis decompresses nothing to empty");
    }

    #[test]
    fn rejects_bad_payloads() {
        let mut p = dump_string(b"hello");
        *p.last_mut().unwrap() ^= 1;
        assert_eq!(restore_all(&p), Err(RdbError::VersionOrChecksum));
        assert_eq!(restore_all(b"short"), Err(RdbError::VersionOrChecksum));
        let mut body = vec![99u8, 1, 2];
        body.extend_from_slice(&13u16.to_le_bytes());
        let crc = crc64(0, &body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(restore_all(&body), Err(RdbError::VersionOrChecksum), "version 13 is foreign");
        assert_eq!(restore_all(&finish(vec![99u8, 1, 2])), Err(RdbError::BadFormat));
        assert_eq!(restore_all(&finish(vec![0, 0x05, b'h'])), Err(RdbError::BadFormat));
    }
}

#[cfg(test)]
mod legacy_tests {
    //! Payloads in the encodings Redis wrote before 7.0, built by `legacy::build` as Redis
    //! 6.2's `rdbSaveObject` laid them out (type byte, the blob as an RDB string), and pinned
    //! as hex so a change to the builder cannot silently change what is tested. Each blob's
    //! header, previous-length bytes and integer encodings were checked by hand against the
    //! layout comments of Valkey's `ziplist.c` and `zipmap.c`; the checksums are computed.

    use super::legacy::build;
    use super::*;

    fn payload(ty: u8, blob: &[u8]) -> Vec<u8> {
        let mut body = vec![ty];
        write_len(&mut body, blob.len() as u64);
        body.extend_from_slice(blob);
        finish(body)
    }

    fn hex(b: &[u8]) -> String {
        b.iter().map(|x| format!("{x:02x}")).collect()
    }

    fn strings(items: &[&[u8]]) -> Vec<Vec<u8>> {
        items.iter().map(|i| i.to_vec()).collect()
    }

    #[test]
    fn list_ziplist_type_10() {
        let p = payload(TYPE_LIST_ZIPLIST, &build::ziplist(&[b"a", b"300", b"-7"]));
        assert_eq!(hex(&p), "0a151500000011000000030000016103c02c0104fef9ff0a00d74eadac15c9ba5d");
        assert_eq!(restore(&p, u64::MAX), Ok(Loaded::List(strings(&[b"a", b"300", b"-7"]))));
    }

    #[test]
    fn list_quicklist_of_ziplists_type_14() {
        let a = build::ziplist(&[b"x", b"y"]);
        let empty = build::ziplist(&[]);
        let b = build::ziplist(&[b"12345678901"]);
        let mut body = vec![TYPE_LIST_QUICKLIST, 3];
        for zl in [&a, &empty, &b] {
            write_len(&mut body, zl.len() as u64);
            body.extend_from_slice(zl);
        }
        let p = finish(body);
        assert_eq!(
            hex(&p),
            "0e0311110000000d0000000200000178030179ff0b0b0000000a0000000000ff15150000000a00\
             0000010000e0351cdcdf02000000ff0a00cd4656d00b70d263"
        );
        assert_eq!(restore(&p, u64::MAX), Ok(Loaded::List(strings(&[b"x", b"y", b"12345678901"]))));
        let mut only_empty = vec![TYPE_LIST_QUICKLIST, 1];
        write_len(&mut only_empty, empty.len() as u64);
        only_empty.extend_from_slice(&empty);
        assert_eq!(restore(&finish(only_empty), u64::MAX), Err(RdbError::BadFormat));
    }

    #[test]
    fn zset_ziplist_type_12() {
        let p = payload(TYPE_ZSET_ZIPLIST, &build::ziplist(&[b"c", b"-inf", b"a", b"1", b"b", b"2.5"]));
        assert_eq!(
            hex(&p),
            "0c21210000001b000000060000016303042d696e6606016103f20201620303322e35ff0a00b4f90ee3243a5af5"
        );
        let Ok(Loaded::ZSet(items)) = restore(&p, u64::MAX) else { panic!("zset expected") };
        assert_eq!(items, [(b"c".to_vec(), f64::NEG_INFINITY), (b"a".to_vec(), 1.0), (b"b".to_vec(), 2.5)]);
        for bad in [&[&b"a"[..], b"1", b"b"][..], &[b"a", b"x"], &[b"a", b"1", b"a", b"2"]] {
            let p = payload(TYPE_ZSET_ZIPLIST, &build::ziplist(bad));
            assert_eq!(restore(&p, u64::MAX), Err(RdbError::BadFormat), "{bad:?}");
        }
    }

    #[test]
    fn hash_ziplist_type_13() {
        let p = payload(TYPE_HASH_ZIPLIST, &build::ziplist(&[b"f", b"v", b"n", b"-70000"]));
        assert_eq!(hex(&p), "0d191900000013000000040000016603017603016e03f090eefeff0a00cdfc1dafff7d4cf6");
        let Ok(Loaded::Object(Object::Hash(h))) = restore(&p, u64::MAX) else { panic!("hash expected") };
        assert_eq!(
            h,
            Hash::from_pairs(&[(b"f".to_vec(), b"v".to_vec()), (b"n".to_vec(), b"-70000".to_vec())]).unwrap()
        );
        for bad in [&[&b"f"[..], b"v", b"g"][..], &[], &[b"f", b"1", b"f", b"2"]] {
            let p = payload(TYPE_HASH_ZIPLIST, &build::ziplist(bad));
            assert_eq!(restore(&p, u64::MAX), Err(RdbError::BadFormat), "{bad:?}");
        }
    }

    #[test]
    fn hash_zipmap_type_9() {
        let p = payload(TYPE_HASH_ZIPMAP, &build::zipmap(&[(b"f", b"v"), (b"n", b"12")], 1));
        assert_eq!(hex(&p), "090f02016601017600016e0201313200ff0a006533f05545169fce");
        let Ok(Loaded::Object(Object::Hash(h))) = restore(&p, u64::MAX) else { panic!("hash expected") };
        assert_eq!(h, Hash::from_pairs(&[(b"f".to_vec(), b"v".to_vec()), (b"n".to_vec(), b"12".to_vec())]).unwrap());
        let dup = payload(TYPE_HASH_ZIPMAP, &build::zipmap(&[(b"f", b"v"), (b"f", b"w")], 0));
        assert_eq!(restore(&dup, u64::MAX), Err(RdbError::BadFormat));
    }

    #[test]
    fn streams_modules_and_unknown_types_are_bad_data_format() {
        for ty in TYPE_STREAMS.into_iter().chain([6, 7, 22, 200]) {
            // A stream cut short is as bad as a type this server does not know.
            assert_eq!(restore(&finish(vec![ty, 0, 0, 0]), u64::MAX), Err(RdbError::BadFormat), "type {ty}");
        }
    }

    #[test]
    fn version_zero_is_accepted_as_valkey_does() {
        let mut body = vec![TYPE_STRING, 1, b'x'];
        body.extend_from_slice(&0u16.to_le_bytes());
        let crc = crc64(0, &body);
        body.extend_from_slice(&crc.to_le_bytes());
        assert_eq!(restore(&body, u64::MAX), Ok(Loaded::Str(b"x".to_vec())));
    }
}
