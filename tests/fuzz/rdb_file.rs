//! Whole RDB files: mutations of a file redis-server 7.0.15 saved with every encoding it has
//! (`corpus/rdb-file/`), of a file hotkv's writer made, and of hand-built ones for what neither
//! writes (version 4 without a checksum, Valkey 9's header, expire times in seconds, IDLE and
//! FREQ, SLOT_INFO, a function library). The trailing checksum is recomputed so the decoders,
//! not the checksum, judge the data. Every input is fed in pieces and loaded into a keyspace:
//! it must load or be refused with an error, never panic, and never cost more memory than its
//! size justifies (a declared length must not become an allocation). A file that loads is
//! written again by hotkv and must load again with the same number of keys.
//!
//! Also here because this binary counts allocations: what the writer allocates per key.

use hotkv_engine::ctx::EngineConfig;
use hotkv_engine::keyspace::Keyspace;
use hotkv_engine::rdb::{self, AuxValue, Item, Loader, RdbReader, RdbWriter, crc64};
use hotkv_engine::slot::key_slot;
use hotkv_engine::testkit::TestKit;
use hotkv_test_support::fuzz::{Budget, allocs_during, peak_during, run};

/// The loaders' clock: before every TTL in the seeds.
const NOW: i64 = 1_700_000_000_000;

#[test]
fn rdb_reader_survives_mutated_files() {
    let mut seeds = crate::seeds("rdb-file");
    seeds.push(hotkv_file());
    seeds.extend(hand_built());
    let plain = EngineConfig::default();
    // Tiny encoding limits send loaded values through every conversion.
    let tiny = EngineConfig {
        list_max_listpack_size: 2,
        hash_max_listpack_entries: 1,
        hash_max_listpack_value: 4,
        set_max_intset_entries: 2,
        set_max_listpack_entries: 1,
        zset_max_listpack_entries: 1,
        ..EngineConfig::default()
    };
    let mut file = Vec::new();
    let mut n = 0usize;
    // Made once and emptied slot by slot: a keyspace costs a megabyte per database, and
    // visiting every slot of it would take most of an input's time.
    let (ks, ks2) = (Keyspace::new(4), Keyspace::new(4));
    let (mut touched, mut touched2) = (Vec::new(), Vec::new());
    run("rdb-file", &seeds, Budget::from_env(20_000), |input, tally| {
        file.clear();
        file.extend_from_slice(input);
        if let Some(body) = file.len().checked_sub(8).filter(|&b| b > 9) {
            let crc = crc64(0, &file[..body]);
            file[body..].copy_from_slice(&crc.to_le_bytes());
        }
        n += 1;
        let cfg = if n.is_multiple_of(2) { &plain } else { &tiny };
        let piece = [1, 3, 64, usize::MAX][n % 4];
        clear(&ks, &mut touched);
        let (accepted, peak) = peak_during(|| load(&file, piece, &ks, cfg, &mut touched));
        tally.max_peak = tally.max_peak.max(peak);
        // LZF expands at most 88 times; anything beyond is a declared length turned into memory.
        assert!(peak <= 200 * file.len() + (1 << 20), "{peak} bytes for a {}-byte file", file.len());
        if accepted {
            let again = rewrite(&ks);
            clear(&ks2, &mut touched2);
            assert!(
                load(&again, usize::MAX, &ks2, cfg, &mut touched2),
                "hotkv's rewrite of an accepted file is refused"
            );
            assert_eq!(ks2.total_keys(), ks.total_keys());
        }
        accepted
    });
}

#[test]
fn every_rdb_seed_loads() {
    let mut seeds = crate::seeds("rdb-file");
    seeds.push(hotkv_file());
    seeds.extend(hand_built());
    for (i, seed) in seeds.iter().enumerate() {
        let ks = Keyspace::new(4);
        assert!(load(seed, 5, &ks, &EngineConfig::default(), &mut Vec::new()), "seed {i}");
        assert!(ks.total_keys() > 0, "seed {i}");
    }
}

#[test]
fn the_writer_allocates_nothing_per_key_but_for_lists_and_sorted_sets() {
    let mut t = TestKit::default();
    for i in 0..2000 {
        let k = |kind: &str| format!("{kind}:{i}");
        t.run(&["SET", &k("str"), "value"]);
        t.run(&["SET", &k("int"), &i.to_string()]);
        t.run(&["APPEND", &k("appended"), "grown"]);
        t.run(&["HSET", &k("hash"), "f", "v", "g", "1"]);
        t.run(&["SADD", &k("intset"), "1", "2"]);
        t.run(&["SADD", &k("set"), "a", "b"]);
        t.run(&["PEXPIRE", &k("str"), "100000"]);
    }
    assert_eq!(write_allocs(&t.ks), 0, "strings, hashes and sets");
    let mut t = TestKit::default();
    for i in 0..2000 {
        t.run(&["RPUSH", &format!("list:{i}"), "a", "b"]);
    }
    // Walking a list's nodes boxes an iterator, twice (count, then write).
    assert!(write_allocs(&t.ks) <= 2 * 2000, "lists");
    let mut t = TestKit::default();
    for i in 0..2000 {
        t.run(&["ZADD", &format!("zset:{i}"), "1", "a"]);
    }
    // Reading a sorted set highest score first collects its members.
    assert!(write_allocs(&t.ks) <= 2000, "sorted sets");
}

/// Empties the slots a load wrote to.
fn clear(ks: &Keyspace, touched: &mut Vec<(usize, u16)>) {
    for (db, s) in touched.drain(..) {
        let slot = ks.db(db).slot(s);
        let mut t = slot.lock();
        drop(t.take_all());
        slot.sync(&t);
    }
}

/// Allocations made writing every slot of database 0 into a buffer that is big enough.
fn write_allocs(ks: &Keyspace) -> u64 {
    let mut out = Vec::with_capacity(16 << 20);
    let mut w = RdbWriter::new(&mut out, &[]);
    let ((), allocs) = allocs_during(|| {
        for slot in ks.db(0).slots() {
            w.table(&mut out, &slot.lock());
        }
    });
    assert!(out.len() < out.capacity(), "the buffer grew: allocations are not the writer's own");
    allocs
}

/// Loads `file` fed in pieces of `piece` bytes into `ks`, noting in `touched` the slots it
/// may have written: whether it was a whole valid file.
fn load(file: &[u8], piece: usize, ks: &Keyspace, cfg: &EngineConfig, touched: &mut Vec<(usize, u16)>) -> bool {
    let mut r = RdbReader::new(cfg.proto_max_bulk_len);
    let mut loader = Loader::new(ks, cfg, NOW);
    let mut db = 0;
    for chunk in file.chunks(piece.clamp(1, file.len().max(1))) {
        r.feed(chunk);
        loop {
            match r.next_item() {
                Ok(Some(item)) => {
                    match &item {
                        Item::SelectDb(d) => db = usize::try_from(*d).unwrap_or(usize::MAX),
                        Item::Entry { key, .. } if db < ks.databases() => touched.push((db, key_slot(key))),
                        _ => {}
                    }
                    if loader.apply(item).is_err() {
                        return false;
                    }
                }
                Ok(None) => break,
                Err(_) => return false,
            }
        }
    }
    r.finish().is_ok()
}

/// Everything in `ks`, written by hotkv.
fn rewrite(ks: &Keyspace) -> Vec<u8> {
    let mut out = Vec::new();
    rdb::snapshot(ks, &[], |c| {
        out.extend_from_slice(c);
        Ok::<(), ()>(())
    })
    .expect("writing to memory");
    out
}

/// A file hotkv writes, with each of its encodings once and a TTL.
fn hotkv_file() -> Vec<u8> {
    let mut t = TestKit::default();
    for argv in [
        &["SET", "s", "hello"][..],
        &["SET", "i", "-70000"],
        &["RPUSH", "l", "a", "1"],
        &["HSET", "h", "f", "v"],
        &["SADD", "si", "1", "2"],
        &["SADD", "ss", "a", "b"],
        &["ZADD", "z", "1", "a", "2", "b"],
        &["XADD", "x", "1-1", "f", "v", "g", "w"],
        &["XADD", "x", "2-0", "other", "1"],
        &["XGROUP", "CREATE", "x", "grp", "0"],
        &["XREADGROUP", "GROUP", "grp", "c", "COUNT", "1", "STREAMS", "x", ">"],
        &["PEXPIRE", "s", "100000"],
    ] {
        t.run(argv);
    }
    let mut out = Vec::new();
    rdb::snapshot(&t.ks, &[("redis-ver", AuxValue::Str(b"7.2.4"))], |c| {
        out.extend_from_slice(c);
        Ok::<(), ()>(())
    })
    .expect("writing to memory");
    out
}

/// Files for what neither Redis 7.0 nor hotkv writes.
fn hand_built() -> Vec<Vec<u8>> {
    let signed = |magic: &[u8], body: &[u8]| {
        let mut f = [magic, body, &[0xFF]].concat();
        let crc = crc64(0, &f);
        f.extend_from_slice(&crc.to_le_bytes());
        f
    };
    vec![
        // Version 4: no checksum after EOF.
        [&b"REDIS0004"[..], &[0xFE, 0, 0, 1, b'k', 1, b'v', 0xFF]].concat(),
        // Valkey 9's header.
        signed(b"VALKEY080", &[0, 1, b'k', 1, b'v']),
        // SLOT_INFO, a function library, an expire in seconds, IDLE, FREQ, two SELECTDBs.
        signed(
            b"REDIS0011",
            &[
                0xF4, 5, 1, 0, 0xF5, 3, b'l', b'u', b'a', 0xFD, 0x80, 0xF0, 0xFA, 0x7F, 0xF8, 10, 0xF9, 3, 0, 1, b'k',
                1, b'v', 0xFE, 2, 0xFE, 1, 0, 1, b'j', 0xC1, 0x10, 0x27,
            ],
        ),
    ]
}
