//! RESTORE payloads: mutations of real DUMP payloads of every type and encoding (most from
//! redis-server 7.0, see `corpus/restore/`), with the CRC-64 recomputed so the object decoder
//! really runs. An accepted payload must give a value that every read of its type can walk,
//! and that DUMPs and RESTOREs again to the same bytes.

use hotkv_engine::rdb::crc64;
use hotkv_engine::testkit::TestKit;
use hotkv_test_support::fuzz::{Budget, peak_during, run};

/// The replies a refused payload may get, as Valkey words them.
const REFUSALS: &[&str] = &["-ERR Bad data format\r\n", "-ERR DUMP payload version or checksum are wrong\r\n"];

/// The payload of a bulk reply.
fn bulk(reply: &[u8]) -> Option<&[u8]> {
    let nl = reply.iter().position(|&b| b == b'\n')?;
    (reply.first() == Some(&b'$') && reply.len() >= nl + 3).then(|| &reply[nl + 1..reply.len() - 2])
}

fn argv(parts: &[&[u8]]) -> Vec<Vec<u8>> {
    parts.iter().map(|p| p.to_vec()).collect()
}

/// Reads the restored key `k` every way its type allows; none may panic.
fn walk(t: &mut TestKit) {
    let ty = t.run(&["TYPE", "k"]);
    let reads: &[&[&str]] = match ty.as_str() {
        "+string\r\n" => {
            &[&["GET", "k"], &["STRLEN", "k"], &["BITCOUNT", "k"], &["PFCOUNT", "k"], &["GETBIT", "k", "9"]]
        }
        "+list\r\n" => {
            &[&["LRANGE", "k", "0", "-1"], &["LINDEX", "k", "-1"], &["LPOS", "k", "x"], &["RPUSH", "k", "new"]]
        }
        "+set\r\n" => {
            &[&["SMEMBERS", "k"], &["SISMEMBER", "k", "a"], &["SRANDMEMBER", "k", "-3"], &["SADD", "k", "new"]]
        }
        "+hash\r\n" => {
            &[&["HGETALL", "k"], &["HGET", "k", "f"], &["HRANDFIELD", "k", "-3"], &["HSET", "k", "new", "v"]]
        }
        "+zset\r\n" => &[
            &["ZRANGE", "k", "0", "-1", "WITHSCORES"],
            &["ZRANGEBYSCORE", "k", "-inf", "+inf"],
            &["ZRANK", "k", "a"],
            &["ZADD", "k", "1", "new"],
        ],
        "+stream\r\n" => &[
            &["XRANGE", "k", "-", "+"],
            &["XREVRANGE", "k", "+", "-", "COUNT", "3"],
            &["XINFO", "STREAM", "k", "FULL"],
            &["XDEL", "k", "5-1"],
            &["XADD", "k", "*", "f", "v"],
        ],
        other => panic!("RESTORE made a key of type {other:?}"),
    };
    for cmd in reads {
        t.run(cmd);
    }
    t.run(&["OBJECT", "ENCODING", "k"]);
}

/// Runs one payload through RESTORE; true when it was accepted.
fn check(t: &mut TestKit, payload: &[u8]) -> bool {
    // The kit records every keyspace event; left to grow, its log would be counted here.
    t.events.take();
    let reply = t.run_bytes(&argv(&[b"RESTORE", b"k", b"0", payload, b"REPLACE"]));
    if reply != "+OK\r\n" {
        assert!(REFUSALS.contains(&reply.as_str()), "unexpected reply {reply:?}");
        return false;
    }
    walk(t);
    // What was accepted dumps, restores and dumps again to the same bytes.
    let first = t.run_raw(&argv(&[b"DUMP", b"k"]));
    let first = bulk(&first).expect("DUMP of an existing key is a bulk").to_vec();
    assert_eq!(t.run_bytes(&argv(&[b"RESTORE", b"k2", b"0", &first, b"REPLACE"])), "+OK\r\n");
    let again = t.run_raw(&argv(&[b"DUMP", b"k2"]));
    assert_eq!(bulk(&again), Some(&first[..]), "DUMP is not stable across RESTORE");
    true
}

#[test]
fn restore_survives_mutated_payloads() {
    let seeds = crate::seeds("restore");
    let mut plain = TestKit::default();
    // Tiny encoding limits send restored values through every conversion.
    let mut tiny = TestKit::default();
    tiny.cfg.list_max_listpack_size = 2;
    tiny.cfg.hash_max_listpack_entries = 1;
    tiny.cfg.hash_max_listpack_value = 4;
    tiny.cfg.set_max_intset_entries = 2;
    tiny.cfg.set_max_listpack_entries = 1;
    tiny.cfg.zset_max_listpack_entries = 1;
    let mut flip = false;
    let mut payload = Vec::new();
    run("restore", &seeds, Budget::from_env(100_000), |input, tally| {
        payload.clear();
        payload.extend_from_slice(input);
        // Re-sign the mutated body, so the decoder sees it rather than the checksum check.
        if let Some(body) = payload.len().checked_sub(8) {
            let crc = crc64(0, &payload[..body]);
            payload[body..].copy_from_slice(&crc.to_le_bytes());
        }
        flip = !flip;
        let t = if flip { &mut plain } else { &mut tiny };
        let (accepted, peak) = peak_during(|| check(t, &payload));
        tally.max_peak = tally.max_peak.max(peak);
        // LZF expands at most 88 times; anything beyond is a declared length turned into memory.
        assert!(peak <= 200 * payload.len() + (1 << 20), "{peak} bytes for a {}-byte payload", payload.len());
        accepted
    });
}

#[test]
fn every_seed_restores_except_the_attacks() {
    let mut t = TestKit::default();
    for (name, seed) in std::fs::read_dir(crate::corpus_dir("restore"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), std::fs::read(&p).unwrap()))
    {
        assert_eq!(check(&mut t, &seed), !name.starts_with("attack-"), "{name}");
    }
}
