//! Writing whole RDB files: the snapshot a replica loads on full sync, and later `dump.rdb`.
//!
//! The writer streams. Every method appends to a buffer the caller passes in and owns, so the
//! caller may ship or write out that buffer between calls (one slot table at a time, say) and
//! reuse it. The file's trailing CRC-64 covers every byte before it: each method checksums
//! exactly the bytes it appended, before returning, so no byte of the file can bypass the
//! checksum and the caller has nothing to remember. The header is written by the constructor
//! and [`RdbWriter::finish`] consumes the writer, so the file also cannot lack either end.
//!
//! Layout (Redis's `rdbSaveRio`): `REDIS0010`, AUX fields, then per database `SELECTDB`,
//! `RESIZEDB` and its keys (`[EXPIRETIME_MS][type][key][object]`), then `EOF` and the
//! checksum. Objects use the DUMP encodings ([`super::encode_value`]), all known to Redis 7.0.

use super::{OPCODE_AUX, OPCODE_EOF, OPCODE_EXPIRETIME_MS, OPCODE_RESIZEDB, OPCODE_SELECTDB, WRITE_VERSION};
use super::{Strings, crc64, encode_value_with, write_len, write_string};
use crate::entry::ValueRef;
use crate::keyspace::Keyspace;
use crate::table::Table;

/// The value of an AUX field. Redis stores every AUX value as an RDB string; an integer
/// (`redis-bits`, `ctime`, `used-mem`, `repl-stream-db`, `repl-offset`, `aof-base`) as its
/// decimal text, which the string encoder stores as an integer when it fits 32 bits, exactly
/// as `rdbSaveAuxFieldStrInt` does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuxValue<'a> {
    /// A string (`redis-ver`, `repl-id`).
    Str(&'a [u8]),
    /// An integer.
    Int(i64),
}

/// Streams one RDB file (version 10, which Redis 7.0+ and Valkey load) into buffers the
/// caller owns. See the module documentation for why the checksum cannot be bypassed.
#[derive(Debug)]
pub struct RdbWriter {
    crc: u64,
    written: u64,
    opts: WriteOptions,
}

/// How a file is written: `rdbcompression` and `rdbchecksum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteOptions {
    /// LZF-compress strings longer than 20 bytes (`rdbcompression yes`).
    pub compress: bool,
    /// Write the CRC-64 trailer; without it the trailer is 0, which loaders take as "not
    /// checksummed" (`rdbchecksum no`).
    pub checksum: bool,
}

impl Default for WriteOptions {
    /// Checksummed, uncompressed. The server's saves, AOF bases and full syncs take both from
    /// `rdbcompression` and `rdbchecksum` instead, as Valkey's `rdbSaveRio` does.
    fn default() -> WriteOptions {
        WriteOptions { compress: false, checksum: true }
    }
}

impl RdbWriter {
    /// Starts a file: appends the magic `REDIS0010` and the AUX fields, in the given order
    /// (Redis writes `redis-ver`, `redis-bits`, `ctime`, `used-mem`, then the replication
    /// fields `repl-stream-db`, `repl-id`, `repl-offset`, then `aof-base`).
    pub fn new(out: &mut Vec<u8>, aux: &[(&str, AuxValue<'_>)]) -> RdbWriter {
        RdbWriter::with_options(out, aux, WriteOptions::default())
    }

    /// [`RdbWriter::new`] with a choice of compression and checksum.
    pub fn with_options(out: &mut Vec<u8>, aux: &[(&str, AuxValue<'_>)], opts: WriteOptions) -> RdbWriter {
        let mut w = RdbWriter { crc: 0, written: 0, opts };
        let start = out.len();
        out.extend_from_slice(&MAGIC);
        for (key, value) in aux {
            put_aux(out, key, *value);
        }
        w.seal(out, start);
        w
    }

    /// Appends one more AUX field (Redis allows them anywhere before EOF).
    pub fn aux(&mut self, out: &mut Vec<u8>, key: &str, value: AuxValue<'_>) {
        let start = out.len();
        put_aux(out, key, value);
        self.seal(out, start);
    }

    /// Appends a function library's code (`FUNCTION2`), as Redis 7 writes each library before
    /// the keys.
    pub fn function(&mut self, out: &mut Vec<u8>, code: &[u8]) {
        let start = out.len();
        out.push(super::OPCODE_FUNCTION2);
        crate::rdb::write_string(out, code);
        self.seal(out, start);
    }

    /// Appends `SELECTDB`: the keys that follow belong to database `db`. A file may select a
    /// database more than once; Redis's loader just switches again.
    pub fn select_db(&mut self, out: &mut Vec<u8>, db: usize) {
        let start = out.len();
        out.push(OPCODE_SELECTDB);
        write_len(out, db as u64);
        self.seal(out, start);
    }

    /// Appends `RESIZEDB`: how many keys, and keys with a TTL, the selected database is about
    /// to receive. Only a sizing hint for the loader.
    pub fn resize_db(&mut self, out: &mut Vec<u8>, keys: u64, expires: u64) {
        let start = out.len();
        out.push(OPCODE_RESIZEDB);
        write_len(out, keys);
        write_len(out, expires);
        self.seal(out, start);
    }

    /// Appends one key: `EXPIRETIME_MS` (absolute unix milliseconds) when it has a TTL, then
    /// its type, name and value.
    pub fn entry(&mut self, out: &mut Vec<u8>, key: &[u8], value: ValueRef<'_>, expire_ms: Option<i64>) {
        let start = out.len();
        put_entry(out, key, value, expire_ms, self.strings());
        self.seal(out, start);
    }

    /// Appends every key of one slot table, those past their TTL included (Valkey writes
    /// them; a primary that loads the file drops them and tells its replicas); returns how
    /// many it wrote. The caller holds the slot's lock for the duration, and may release it
    /// before shipping `out`.
    pub fn table(&mut self, out: &mut Vec<u8>, table: &Table) -> usize {
        let start = out.len();
        let mut n = 0;
        let strings = self.strings();
        // Entries live wherever they were allocated, not in table order: asking for the one
        // a few places ahead overlaps its cache miss with the encoding of this one.
        let mut ahead = table.iter().skip(PREFETCH_DISTANCE);
        for (_, e) in table.iter() {
            if let Some((_, next)) = ahead.next() {
                crate::prefetch::read(next.addr());
            }
            // Keys past their TTL are written too, as Valkey writes them: replicas still hold
            // them, and a primary that loads the file deletes them and sends the DELs on.
            put_entry(out, e.key(), e.value(), e.expire(), strings);
            n += 1;
        }
        // One checksum pass over the whole table, not one per key.
        self.seal(out, start);
        n
    }

    /// Ends the file: `EOF` and the CRC-64 of every byte written before it, little-endian.
    pub fn finish(mut self, out: &mut Vec<u8>) {
        let start = out.len();
        out.push(OPCODE_EOF);
        self.seal(out, start);
        let crc = if self.opts.checksum { self.crc } else { 0 };
        out.extend_from_slice(&crc.to_le_bytes());
        self.written += 8;
    }

    /// Bytes written so far.
    pub fn written(&self) -> u64 {
        self.written
    }

    fn strings(&self) -> Strings {
        if self.opts.compress { Strings::Lzf } else { Strings::Plain }
    }

    /// Folds what was appended since `start` into the checksum.
    fn seal(&mut self, out: &[u8], start: usize) {
        let added = &out[start..];
        if self.opts.checksum {
            self.crc = crc64(self.crc, added);
        }
        self.written += added.len() as u64;
    }
}

/// Writes every database of `ks` as one RDB file, handing the bytes to `sink` in chunks of
/// about 64 KiB as they are produced; returns how many keys it wrote. Empty databases are
/// skipped, as Redis skips them.
///
/// Slots are locked one at a time, only while their keys are encoded, so commands keep
/// running meanwhile: the result is not a point-in-time image of the keyspace. Each slot is
/// consistent in itself; a write to a slot already written is not in the file, one to a slot
/// not yet written is. A full sync must account for that with what it replays afterwards.
pub fn snapshot<E>(
    ks: &Keyspace,
    aux: &[(&str, AuxValue<'_>)],
    mut sink: impl FnMut(&[u8]) -> Result<(), E>,
) -> Result<u64, E> {
    let mut buf = Vec::with_capacity(SNAPSHOT_CHUNK + SNAPSHOT_CHUNK / 2);
    let mut w = RdbWriter::new(&mut buf, aux);
    let mut keys = 0u64;
    for i in 0..ks.databases() {
        let Some(db) = ks.db_if_used(i) else { continue };
        if db.is_empty() {
            continue;
        }
        w.select_db(&mut buf, i);
        w.resize_db(&mut buf, db.len() as u64, db.volatile() as u64);
        for slot in db.slots() {
            // The lock-free count may lag a writer by one command, which is the same as
            // visiting this slot a moment earlier.
            if slot.keys() == 0 {
                continue;
            }
            keys += w.table(&mut buf, &slot.lock()) as u64;
            if buf.len() >= SNAPSHOT_CHUNK {
                sink(&buf)?;
                buf.clear();
            }
        }
    }
    w.finish(&mut buf);
    sink(&buf)?;
    Ok(keys)
}

fn put_aux(out: &mut Vec<u8>, key: &str, value: AuxValue<'_>) {
    out.push(OPCODE_AUX);
    write_string(out, key.as_bytes());
    match value {
        AuxValue::Str(s) => write_string(out, s),
        AuxValue::Int(n) => write_string(out, itoa::Buffer::new().format(n).as_bytes()),
    }
}

fn put_entry(out: &mut Vec<u8>, key: &[u8], value: ValueRef<'_>, expire_ms: Option<i64>, c: Strings) {
    if let Some(when) = expire_ms {
        out.push(OPCODE_EXPIRETIME_MS);
        out.extend_from_slice(&when.to_le_bytes());
    }
    encode_value_with(out, Some(key), value, c);
}

/// `REDIS` and the version as four decimal digits.
const MAGIC: [u8; 9] = {
    let v = WRITE_VERSION;
    [b'R', b'E', b'D', b'I', b'S', digit(v, 1000), digit(v, 100), digit(v, 10), digit(v, 1)]
};

const fn digit(v: u16, place: u16) -> u8 {
    b'0' + ((v / place) % 10) as u8
}

/// How many entries ahead [`RdbWriter::table`] prefetches.
const PREFETCH_DISTANCE: usize = 8;

/// How much [`snapshot`] buffers before handing bytes to its sink.
const SNAPSHOT_CHUNK: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use crate::entry::{Entry, NewValue};
    use crate::hash::key_hash;
    use crate::object::Object;
    use crate::rdb::fixture::{self, NOW, REDIS_LIST_FILE, REDIS_STRING_FILE, hex, unhex};
    use crate::rdb::{Item, RdbReader};
    use crate::slot::key_slot;
    use crate::types::list::List;

    /// The AUX fields redis-server 7.0.15 wrote into the fixtures.
    fn redis_aux(used_mem: i64) -> [(&'static str, AuxValue<'static>); 5] {
        [
            ("redis-ver", AuxValue::Str(b"7.0.15")),
            ("redis-bits", AuxValue::Int(64)),
            ("ctime", AuxValue::Int(0x6b0f_3c8a)),
            ("used-mem", AuxValue::Int(used_mem)),
            ("aof-base", AuxValue::Int(0)),
        ]
    }

    #[test]
    fn a_string_key_is_byte_for_byte_what_redis_7_writes() {
        let mut out = Vec::new();
        let mut w = RdbWriter::new(&mut out, &redis_aux(0x0e_5488));
        w.select_db(&mut out, 0);
        w.resize_db(&mut out, 1, 0);
        w.entry(&mut out, b"k", ValueRef::Str(b"v"), None);
        w.finish(&mut out);
        assert_eq!(hex(&out), hex(&unhex(REDIS_STRING_FILE)));
    }

    #[test]
    fn a_list_with_a_ttl_is_byte_for_byte_what_redis_7_writes() {
        let list = Object::List(List::from_elements([&b"a"[..], b"1"], -2));
        // Shipped in three separately cleared buffers: the checksum still covers them all.
        let (mut file, mut out) = (Vec::new(), Vec::new());
        let mut w = RdbWriter::new(&mut out, &redis_aux(0x10_3758));
        file.append(&mut out);
        w.select_db(&mut out, 0);
        w.resize_db(&mut out, 1, 1);
        w.entry(&mut out, b"l", ValueRef::Obj(&list), Some(4_102_444_800_000));
        file.append(&mut out);
        w.finish(&mut out);
        file.append(&mut out);
        assert_eq!(hex(&file), hex(&unhex(REDIS_LIST_FILE)));
    }

    #[test]
    fn aux_integers_are_encoded_as_redis_encodes_them() {
        let mut out = Vec::new();
        let w = RdbWriter::new(
            &mut out,
            &[("a", AuxValue::Int(-1)), ("b", AuxValue::Int(70_000)), ("c", AuxValue::Int(5_000_000_000))],
        );
        let written = w.written();
        w.finish(&mut out);
        assert_eq!(written as usize, out.len() - 9);
        let body = &out[9..out.len() - 9];
        // int8, int32, then too wide for the integer encodings: its decimal text.
        assert_eq!(hex(body), "fa0161c0fffa0162c270110100fa01630a35303030303030303030");
    }

    #[test]
    fn compressed_files_without_checksum_read_back_whole() {
        let t = fixture::sample();
        let want = fixture::expected(&t, NOW);
        let long = "x".repeat(200);
        let mut plain_len = 0;
        for (compress, checksum) in [(false, true), (true, true), (true, false)] {
            let mut file = Vec::new();
            let mut w = RdbWriter::with_options(&mut file, &[], WriteOptions { compress, checksum });
            w.select_db(&mut file, 0);
            w.entry(&mut file, long.as_bytes(), ValueRef::Str(long.as_bytes()), None);
            for db in [0, 1, 9] {
                w.select_db(&mut file, db);
                for slot in t.ks.db(db).slots() {
                    w.table(&mut file, &slot.lock());
                }
            }
            w.finish(&mut file);
            if !compress {
                plain_len = file.len();
            } else {
                assert!(file.len() < plain_len - 300, "{} vs {plain_len}", file.len());
            }
            assert_eq!(file[file.len() - 8..] == [0; 8], !checksum);
            let ks = Keyspace::new(16);
            let stats = crate::rdb::load(&file[..], &ks, &t.cfg, NOW).unwrap();
            assert_eq!(stats.loaded as usize, want.len() + 1);
            let mut got = fixture::contents(&ks);
            assert!(got.remove(&(0, long.as_bytes().to_vec())).is_some());
            assert_eq!(got, want);
        }
    }

    #[test]
    fn tables_keep_keys_past_their_ttl() {
        let t = fixture::sample();
        let slot = t.ks.db(0).slot(key_slot(b"gone"));
        let table = slot.lock();
        let mut out = Vec::new();
        let mut w = RdbWriter::new(&mut out, &[]);
        assert_eq!(w.table(&mut out, &table), table.len());
    }

    #[test]
    fn snapshots_read_back_whole() {
        let t = fixture::sample();
        let mut file = Vec::new();
        let keys = snapshot(&t.ks, &[("redis-ver", AuxValue::Str(b"7.2.4"))], |chunk| {
            file.extend_from_slice(chunk);
            Ok::<(), ()>(())
        })
        .unwrap();
        assert_eq!(keys as usize, fixture::expected(&t, NOW).len());
        let mut r = RdbReader::new(u64::MAX);
        r.feed(&file);
        let mut dbs = Vec::new();
        while let Some(item) = r.next_item().unwrap() {
            if let Item::SelectDb(db) = item {
                dbs.push(db);
            }
        }
        assert!(r.is_done());
        assert_eq!(dbs, [0, 1, 9], "empty databases are skipped");
    }

    /// Inserts `n` keys of 16 bytes with 32-byte values into database 0 of a new keyspace.
    fn small_strings(n: usize) -> Keyspace {
        let ks = Keyspace::new(1);
        let value = [b'v'; 32];
        for i in 0..n {
            let key = format!("key:{i:012}");
            let slot = ks.db(0).slot(key_slot(key.as_bytes()));
            let mut t = slot.lock();
            t.insert_new(Entry::new(key.as_bytes(), key_hash(key.as_bytes()), NewValue::Bytes(&value), None, 0));
            slot.sync(&t);
        }
        ks
    }

    #[test]
    #[ignore = "measurement: cargo test --release -p hotkv-engine serialise_1m -- --ignored --nocapture"]
    fn serialise_1m_small_string_keys() {
        let ks = small_strings(1_000_000);
        for round in 0..3 {
            let mut bytes = 0;
            let start = Instant::now();
            let keys = snapshot(&ks, &[], |chunk| {
                bytes += chunk.len();
                Ok::<(), ()>(())
            })
            .unwrap();
            let took = start.elapsed();
            println!(
                "round {round}: {keys} keys, {bytes} bytes in {took:?}: {:.0} ns/key, {:.0} MB/s",
                took.as_nanos() as f64 / keys as f64,
                bytes as f64 / took.as_secs_f64() / 1e6
            );
        }
        let mut file = Vec::new();
        snapshot(&ks, &[], |chunk| {
            file.extend_from_slice(chunk);
            Ok::<(), ()>(())
        })
        .unwrap();
        let start = Instant::now();
        let crc = crate::rdb::crc64(0, &file[..file.len() - 8]);
        println!("of which checksumming {} bytes: {:?} ({crc:016x})", file.len(), start.elapsed());
        let fresh = Keyspace::new(1);
        let start = Instant::now();
        let stats = crate::rdb::load(&file[..], &fresh, &crate::ctx::EngineConfig::default(), NOW).unwrap();
        let took = start.elapsed();
        println!("load: {} keys in {took:?}: {:.0} ns/key", stats.loaded, took.as_nanos() as f64 / stats.loaded as f64);
    }
}
