//! Loading an RDB file's keys into a [`Keyspace`].
//!
//! [`Loader`] applies the items an [`RdbReader`] produces, so a caller that receives the file
//! in pieces (a replica's full sync over a socket) drives it item by item; [`load`] does the
//! whole loop for anything that implements [`Read`]. Values get the encodings this server's
//! limits call for, as RESTORE gives them. Each key takes its slot's lock only for its own
//! insertion, after its value was built.

use std::io::Read;

use super::{Item, Loaded, RdbError, RdbReader, Restored, access_clock};
use crate::ctx::EngineConfig;
use crate::entry::{Entry, NewValue, ValueRef};
use crate::hash::key_hash;
use crate::keyspace::Keyspace;
use crate::object::Object;
use crate::policy;
use crate::slot::key_slot;

/// What a load found besides the keys.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct LoadStats {
    /// Keys inserted.
    pub loaded: u64,
    /// Keys left out because their TTL had passed.
    pub expired: u64,
    /// Keys that replaced a key of the same name already in the keyspace.
    pub replaced: u64,
    /// The AUX fields, in file order (`repl-id`, `repl-offset` matter to a replica).
    pub aux: Vec<(Vec<u8>, Vec<u8>)>,
    /// The code of every function library in the file. hotkv runs no functions: a caller
    /// that must not lose them refuses a file where this is not empty.
    pub functions: Vec<Vec<u8>>,
    /// The keys left out as expired, with their database, while they fit the budget given to
    /// [`Loader::collect_expired`]: a primary that continues its replication history after a
    /// restart sends them to its replicas as DELs, since the replicas still hold them.
    pub expired_keys: Vec<(usize, Vec<u8>)>,
    /// More expired keys than the budget held: the list is incomplete (and emptied).
    pub expired_overflow: bool,
}

/// Inserts the keys of an RDB file into a keyspace, one [`Item`] at a time.
pub struct Loader<'a> {
    ks: &'a Keyspace,
    cfg: &'a EngineConfig,
    now_ms: i64,
    db: usize,
    stats: LoadStats,
    /// Bytes of expired keys [`LoadStats::expired_keys`] may still take; `None`: not kept.
    expired_budget: Option<usize>,
    /// Load keys whose TTL passed too (a replica's full sync: its primary deletes them).
    keep_expired: bool,
}

impl<'a> Loader<'a> {
    /// A loader into `ks`, encoding values to `cfg`'s limits; keys whose TTL passed before
    /// `now_ms` are skipped, as Valkey skips them when a primary loads a file.
    pub fn new(ks: &'a Keyspace, cfg: &'a EngineConfig, now_ms: i64) -> Loader<'a> {
        Loader { ks, cfg, now_ms, db: 0, stats: LoadStats::default(), expired_budget: None, keep_expired: false }
    }

    /// Keeps the names of the keys skipped as expired, up to `budget` bytes, in
    /// [`LoadStats::expired_keys`]; past it, sets [`LoadStats::expired_overflow`] instead.
    pub fn collect_expired(mut self, budget: usize) -> Loader<'a> {
        self.expired_budget = Some(budget);
        self
    }

    /// Loads keys whose TTL has passed as well, as a Valkey replica does: its primary's
    /// stream deletes them, and until then both hold the same keys.
    pub fn keep_expired(mut self) -> Loader<'a> {
        self.keep_expired = true;
        self
    }

    /// Applies one item; returns true once it was the end of the file.
    pub fn apply(&mut self, item: Item) -> Result<bool, RdbError> {
        match item {
            Item::Aux { key, value } => self.stats.aux.push((key, value)),
            Item::SelectDb(db) => {
                let databases = self.ks.databases();
                // Redis 7.0 stops loading the same way ("configured to handle more than N
                // databases").
                self.db = usize::try_from(db)
                    .ok()
                    .filter(|&d| d < databases)
                    .ok_or(RdbError::DbOutOfRange { db, databases })?;
            }
            // Sizing hints: tables grow as keys arrive, and a file's counts are not trusted
            // with an allocation.
            Item::ResizeDb { .. } | Item::SlotInfo { .. } => {}
            Item::Entry { key, value, expire_ms, idle_s, freq } => self.insert(&key, value, expire_ms, idle_s, freq)?,
            Item::FunctionLib(code) => self.stats.functions.push(code),
            Item::Eof => return Ok(true),
        }
        Ok(false)
    }

    /// A loader that carries on where [`Loader::into_parts`] left another (a file that arrives
    /// in pieces, loaded by a caller that cannot keep the loader between them).
    pub fn resume(ks: &'a Keyspace, cfg: &'a EngineConfig, now_ms: i64, db: usize, stats: LoadStats) -> Loader<'a> {
        Loader { ks, cfg, now_ms, db, stats, expired_budget: None, keep_expired: false }
    }

    /// The selected database and what was loaded so far, for [`Loader::resume`].
    pub fn into_parts(self) -> (usize, LoadStats) {
        (self.db, self.stats)
    }

    /// What was loaded so far.
    pub fn stats(&self) -> &LoadStats {
        &self.stats
    }

    /// Ends the load, returning what it did.
    pub fn finish(self) -> LoadStats {
        self.stats
    }

    fn insert(
        &mut self,
        key: &[u8],
        value: Loaded,
        expire_ms: Option<i64>,
        idle_s: Option<u64>,
        freq: Option<u8>,
    ) -> Result<(), RdbError> {
        // An entry stores its key length in 32 bits; `proto-max-bulk-len` may allow more.
        if u32::try_from(key.len()).is_err() {
            return Err(RdbError::TooLong { len: key.len() as u64, max: u64::from(u32::MAX) });
        }
        if !self.keep_expired && expire_ms.is_some_and(|when| self.now_ms > when) {
            self.stats.expired += 1;
            if let Some(budget) = self.expired_budget.as_mut() {
                // A DEL in the stream costs about this much besides the key.
                let cost = key.len() + 24;
                if *budget >= cost && !self.stats.expired_overflow {
                    *budget -= cost;
                    self.stats.expired_keys.push((self.db, key.to_vec()));
                } else if !self.stats.expired_overflow {
                    self.stats.expired_overflow = true;
                    self.stats.expired_keys = Vec::new();
                }
            }
            return Ok(());
        }
        let p = self.cfg.policy;
        let idle_s = idle_s.map(|s| i64::try_from(s).unwrap_or(i64::MAX));
        let lru = access_clock(p, self.now_ms, idle_s, freq).unwrap_or_else(|| policy::initial(p, self.now_ms));
        let hash = key_hash(key);
        // The value is built before the slot is locked: commands on the slot wait only for
        // the insertion.
        let entry = match value.into_restored(self.cfg) {
            Restored::Str(s) => Entry::new(key, hash, NewValue::Bytes(&s), expire_ms, lru),
            Restored::Obj(o) => Entry::new(key, hash, NewValue::Object(o), expire_ms, lru),
        };
        let db = self.ks.db(self.db);
        let slot = db.slot(key_slot(key));
        let mut table = slot.lock();
        // A hash with field TTLs is filed for the active expire cycle, as a command would.
        if let ValueRef::Obj(Object::Hash(h)) = entry.value()
            && let Some(when) = h.min_expire()
        {
            db.watch_field_ttls(key, when);
        }
        if let Some(i) = table.find(key, hash) {
            table.remove_at(i);
            self.stats.replaced += 1;
        }
        table.insert_new(entry);
        slot.sync(&table);
        self.stats.loaded += 1;
        Ok(())
    }
}

/// Reads a whole RDB file from `input` into `ks` (see [`Loader::new`] for `cfg` and
/// `now_ms`); strings longer than `cfg.proto_max_bulk_len` are refused. Reads in 64 KiB
/// blocks and stops at EOF; anything after the file is left unread or ignored.
pub fn load(mut input: impl Read, ks: &Keyspace, cfg: &EngineConfig, now_ms: i64) -> Result<LoadStats, RdbError> {
    let mut reader = RdbReader::new(cfg.proto_max_bulk_len);
    let mut loader = Loader::new(ks, cfg, now_ms);
    let mut block = vec![0u8; READ_BLOCK];
    loop {
        while let Some(item) = reader.next_item()? {
            if loader.apply(item)? {
                return Ok(loader.finish());
            }
        }
        let n = match input.read(&mut block) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(RdbError::Io(e.kind())),
        };
        if n == 0 {
            reader.finish()?;
            // `finish` is Ok only after EOF, which returned above.
            return Err(RdbError::Truncated);
        }
        reader.feed(&block[..n]);
    }
}

/// How much [`load`] reads at a time.
const READ_BLOCK: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::EvictionPolicy;
    use crate::rdb::fixture::{self, NOW};
    use crate::rdb::{AuxValue, OPCODE_FREQ, OPCODE_IDLE, snapshot};

    fn file_of(ks: &Keyspace) -> Vec<u8> {
        let mut file = Vec::new();
        let aux = [("redis-ver", AuxValue::Str(b"7.2.4")), ("repl-offset", AuxValue::Int(1234))];
        snapshot(ks, &aux, |c| {
            file.extend_from_slice(c);
            Ok::<(), ()>(())
        })
        .unwrap();
        file
    }

    #[test]
    fn every_type_and_encoding_round_trips_with_its_ttl() {
        let t = fixture::sample();
        let want = fixture::expected(&t, NOW);
        // The fixture really covers every encoding.
        let mut encodings: Vec<&str> = want.values().map(|c| c.encoding).collect();
        encodings.sort();
        encodings.dedup();
        assert_eq!(encodings, ["hashtable", "intset", "listpack", "quicklist", "skiplist", "string"]);
        let ks = Keyspace::new(16);
        let stats = load(&file_of(&t.ks)[..], &ks, &t.cfg, NOW).unwrap();
        assert_eq!(fixture::contents(&ks), want);
        assert_eq!(stats.loaded as usize, want.len());
        assert_eq!((stats.expired, stats.replaced), (0, 0));
        assert_eq!(
            stats.aux,
            [(b"redis-ver".to_vec(), b"7.2.4".to_vec()), (b"repl-offset".to_vec(), b"1234".to_vec())]
        );
        // The slots' lock-free counters were published.
        assert_eq!(ks.db(0).len(), want.keys().filter(|(db, _)| *db == 0).count());
        assert_eq!(ks.db(0).volatile(), want.iter().filter(|((db, _), c)| *db == 0 && c.expire.is_some()).count());
    }

    #[test]
    fn hashes_with_field_ttls_load_with_them_and_are_filed_for_expiry() {
        let mut t = crate::testkit::TestKit::default();
        t.run(&["HSET", "small", "a", "1", "b", "2"]);
        t.run(&["HPEXPIRE", "small", "5000", "FIELDS", "1", "a"]);
        t.cfg.hash_max_listpack_entries = 0;
        t.run(&["HSET", "big", "a", "1", "b", "2"]);
        t.run(&["HPEXPIRE", "big", "7000", "FIELDS", "1", "b"]);
        let file = file_of(&t.ks);
        let mut back = crate::testkit::TestKit { now_ms: t.now_ms, ..Default::default() };
        load(&file[..], &back.ks, &back.cfg, t.now_ms).unwrap();
        assert_eq!(back.ks.db(0).field_ttls_filed(), 2);
        assert_eq!(back.run(&["HPTTL", "small", "FIELDS", "2", "a", "b"]), "*2\r\n:5000\r\n:-1\r\n");
        assert_eq!(back.run(&["HPTTL", "big", "FIELDS", "2", "a", "b"]), "*2\r\n:-1\r\n:7000\r\n");
        // Written as HASH_METADATA, built to the loading node's limits, as any hash.
        assert_eq!(back.run(&["OBJECT", "ENCODING", "big"]), "$10\r\nlistpackex\r\n");
    }

    #[test]
    fn keys_expired_when_loading_are_skipped_and_counted() {
        let t = fixture::sample();
        let file = file_of(&t.ks);
        let ks = Keyspace::new(16);
        let stats = load(&file[..], &ks, &t.cfg, NOW + 501).unwrap();
        assert_eq!(stats.expired, 1);
        assert_eq!(fixture::contents(&ks), fixture::expected(&t, NOW + 501));
        assert!(!fixture::contents(&ks).contains_key(&(0, b"gone".to_vec())));
    }

    /// Feeds a whole file through `loader`.
    fn load_with(file: &[u8], mut loader: Loader<'_>) -> LoadStats {
        let mut reader = RdbReader::new(u64::MAX);
        reader.feed(file);
        while let Some(item) = reader.next_item().unwrap() {
            if loader.apply(item).unwrap() {
                return loader.finish();
            }
        }
        panic!("no EOF")
    }

    #[test]
    fn expired_keys_are_named_within_the_budget_or_kept_on_request() {
        let t = fixture::sample();
        let file = file_of(&t.ks);
        let later = NOW + 501;
        let ks = Keyspace::new(16);
        let stats = load_with(&file, Loader::new(&ks, &t.cfg, later).collect_expired(1 << 20));
        assert_eq!((stats.expired, stats.expired_overflow), (1, false));
        assert_eq!(stats.expired_keys, [(0, b"gone".to_vec())]);
        // A budget too small for the DEL: no list, and the caller learns it is incomplete.
        let ks = Keyspace::new(16);
        let stats = load_with(&file, Loader::new(&ks, &t.cfg, later).collect_expired(10));
        assert!(stats.expired_overflow && stats.expired_keys.is_empty());
        // A replica's load keeps it, as the primary's DEL will remove it.
        let ks = Keyspace::new(16);
        let stats = load_with(&file, Loader::new(&ks, &t.cfg, later).keep_expired());
        assert_eq!(stats.expired, 0);
        assert!(fixture::contents(&ks).contains_key(&(0, b"gone".to_vec())));
    }

    #[test]
    fn a_database_the_keyspace_lacks_is_an_error() {
        let t = fixture::sample();
        let ks = Keyspace::new(4);
        let err = load(&file_of(&t.ks)[..], &ks, &t.cfg, NOW).unwrap_err();
        assert_eq!(err, RdbError::DbOutOfRange { db: 9, databases: 4 });
    }

    #[test]
    fn existing_keys_are_replaced() {
        let t = fixture::sample();
        let mut target = fixture::sample();
        target.run(&["SET", "list-small", "was a string"]);
        target.run(&["SET", "extra", "stays"]);
        let stats = load(&file_of(&t.ks)[..], &target.ks, &t.cfg, NOW).unwrap();
        assert_eq!(stats.replaced, stats.loaded);
        let got = fixture::contents(&target.ks);
        assert_eq!(got[&(0, b"list-small".to_vec())].encoding, "listpack");
        assert_eq!(got[&(0, b"extra".to_vec())].items, [b"stays".to_vec()]);
    }

    #[test]
    fn idle_and_freq_set_the_access_clock_the_policy_uses() {
        let mut body = b"REDIS0010".to_vec();
        body.extend_from_slice(&[OPCODE_IDLE, 0x40 | 1, 0, 0, 1, b'i', 1, b'v']);
        body.extend_from_slice(&[OPCODE_FREQ, 9, 0, 1, b'f', 1, b'v']);
        // EOF with a zero checksum: checksums off.
        body.push(0xFF);
        body.extend_from_slice(&[0; 8]);
        for policy in [EvictionPolicy::AllKeysLru, EvictionPolicy::AllKeysLfu] {
            let cfg = EngineConfig { policy, ..EngineConfig::default() };
            let ks = Keyspace::new(1);
            load(&body[..], &ks, &cfg, NOW).unwrap();
            let lru = |k: &[u8]| {
                let t = ks.db(0).slot(key_slot(k)).lock();
                t.at(t.find(k, key_hash(k)).unwrap()).lru()
            };
            if policy.is_lfu() {
                assert_eq!(lru(b"f") & 0xFF, 9);
                assert_eq!(lru(b"i"), policy::initial(policy, NOW));
            } else {
                assert_eq!(lru(b"i"), policy::lru_clock(NOW - 256_000));
                assert_eq!(lru(b"f"), policy::initial(policy, NOW));
            }
        }
    }

    #[test]
    fn functions_are_handed_back_and_truncation_is_an_error() {
        let mut f = b"REDIS0010".to_vec();
        f.extend_from_slice(&[0xF5, 3, b'l', b'u', b'a', 0xFF]);
        let crc = crate::rdb::crc64(0, &f);
        f.extend_from_slice(&crc.to_le_bytes());
        let ks = Keyspace::new(1);
        let stats = load(&f[..], &ks, &EngineConfig::default(), NOW).unwrap();
        assert_eq!(stats.functions, [b"lua".to_vec()]);
        for cut in 0..f.len() {
            assert_eq!(load(&f[..cut], &ks, &EngineConfig::default(), NOW), Err(RdbError::Truncated), "{cut}");
        }
    }

    #[test]
    fn read_errors_are_reported() {
        struct Failing;
        impl Read for Failing {
            fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
                Err(std::io::ErrorKind::ConnectionReset.into())
            }
        }
        let ks = Keyspace::new(1);
        let err = load(Failing, &ks, &EngineConfig::default(), NOW).unwrap_err();
        assert_eq!(err, RdbError::Io(std::io::ErrorKind::ConnectionReset));
    }
}
