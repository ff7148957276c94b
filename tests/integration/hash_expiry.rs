//! Hash field expiry (Redis 7.4 / Valkey 9): HEXPIRE and its forms, HTTL and its forms,
//! HPERSIST; every reply code, the errors, lazy expiry of fields, and a replica that receives
//! absolute HPEXPIREAT times and HDELs for the fields that expired on its primary. Waits use
//! `wait_for` with short TTLs; no sleep decides a test.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hotkv_test_support::{Frame, RawClient, wait_for};

use crate::{assert_err, info, info_num, ok, server, server_with};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

fn ints(codes: &[i64]) -> Frame {
    Frame::Array(codes.iter().map(|&c| Frame::Integer(c)).collect())
}

/// Waits until `probe` on `c` replies `want`, with a generous bound: TTLs here are short.
#[track_caller]
fn assert_soon(c: &mut RawClient, probe: &[&str], want: Frame) {
    let mut last = Frame::Null;
    let ok = wait_for(
        || {
            last = c.cmd(probe);
            last == want
        },
        Duration::from_secs(5),
    );
    assert!(ok, "{probe:?} still replies {last} after 5 s, not {want}");
}

#[test]
fn every_reply_code() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]), Frame::Integer(3));
    assert_eq!(c.cmd(&["HEXPIRE", "h", "100", "FIELDS", "2", "a", "nope"]), ints(&[1, -2]));
    assert_eq!(c.cmd(&["HEXPIRE", "h", "200", "NX", "FIELDS", "2", "a", "b"]), ints(&[0, 1]));
    assert_eq!(c.cmd(&["HEXPIRE", "h", "50", "XX", "FIELDS", "2", "a", "c"]), ints(&[1, 0]));
    assert_eq!(c.cmd(&["HEXPIRE", "h", "40", "GT", "FIELDS", "1", "a"]), ints(&[0]));
    assert_eq!(c.cmd(&["HEXPIRE", "h", "70", "LT", "FIELDS", "2", "a", "c"]), ints(&[0, 1]));
    let ttl = c.cmd(&["HTTL", "h", "FIELDS", "4", "a", "b", "c", "nope"]);
    let ttl: Vec<i64> = ttl.items().iter().map(Frame::int).collect();
    assert!((49..=50).contains(&ttl[0]) && (199..=200).contains(&ttl[1]) && (69..=70).contains(&ttl[2]), "{ttl:?}");
    assert_eq!(ttl[3], -2);
    let pttl = c.cmd(&["HPTTL", "h", "FIELDS", "1", "a"]).items()[0].int();
    assert!(pttl > 49_000 && pttl <= 50_000, "{pttl}");
    let at = now_ms() + 60_000;
    assert_eq!(c.cmd(&["HPEXPIREAT", "h", &at.to_string(), "FIELDS", "1", "a"]), ints(&[1]));
    assert_eq!(c.cmd(&["HPEXPIRETIME", "h", "FIELDS", "2", "a", "x"]), ints(&[at, -2]));
    assert_eq!(c.cmd(&["HEXPIRETIME", "h", "FIELDS", "1", "a"]), ints(&[(at + 999) / 1000]));
    assert_eq!(c.cmd(&["HPERSIST", "h", "FIELDS", "3", "a", "a", "x"]), ints(&[1, -1, -2]));
    assert_eq!(c.cmd(&["HTTL", "h", "FIELDS", "1", "a"]), ints(&[-1]));
    // A time already past deletes the field, and the key with its last one.
    assert_eq!(c.cmd(&["HEXPIREAT", "h", "1", "FIELDS", "2", "a", "b"]), ints(&[2, 2]));
    assert_eq!(c.cmd(&["HGETALL", "h"]), Frame::Array(vec![Frame::bulk("c"), Frame::bulk("3")]));
    assert_eq!(c.cmd(&["HPEXPIREAT", "h", "0", "FIELDS", "1", "c"]), ints(&[2]));
    assert_eq!(c.cmd(&["EXISTS", "h"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["HEXPIRE", "h", "10", "FIELDS", "1", "a"]), ints(&[-2]));
    assert_eq!(c.cmd(&["HTTL", "h", "FIELDS", "1", "a"]), ints(&[-2]));
    assert_eq!(c.cmd(&["HPERSIST", "h", "FIELDS", "1", "a"]), ints(&[-2]));
}

#[test]
fn errors_are_redis_words() {
    let srv = server();
    let mut c = srv.client();
    c.cmd(&["HSET", "h", "a", "1"]);
    ok(&mut c, &["SET", "s", "v"]);
    let cases: &[(&[&str], &str)] = &[
        (&["HEXPIRE", "h", "10", "FIELDS", "0", "a"], "ERR Parameter `numFields` should be greater than 0"),
        (
            &["HEXPIRE", "h", "10", "FIELDS", "2", "a"],
            "ERR The `numfields` parameter must match the number of arguments",
        ),
        (
            &["HEXPIRE", "h", "10", "NX", "XX", "FIELDS", "1", "a"],
            "ERR Mandatory argument FIELDS is missing or not at the right position",
        ),
        (&["HEXPIRE", "h", "-1", "FIELDS", "1", "a"], "ERR invalid expire time, must be >= 0"),
        (&["HEXPIRE", "h", "70368744178", "FIELDS", "1", "a"], "ERR invalid expire time in 'hexpire' command"),
        (&["HPEXPIREAT", "h", "70368744177664", "FIELDS", "1", "a"], "ERR invalid expire time in 'hpexpireat' command"),
        (&["HEXPIRE", "h", "ten", "FIELDS", "1", "a"], "ERR value is not an integer or out of range"),
        (&["HTTL", "h", "FIELDS", "-1", "a"], "ERR Number of fields must be a positive integer"),
        (
            &["HPERSIST", "h", "FIELDS", "1", "a", "b"],
            "ERR The `numfields` parameter must match the number of arguments",
        ),
        (
            &["HEXPIRE", "s", "10", "FIELDS", "1", "a"],
            "WRONGTYPE Operation against a key holding the wrong kind of value",
        ),
        (&["HPTTL", "s", "FIELDS", "1", "a"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
        (&["HEXPIRE", "h", "10", "FIELDS", "1"], "ERR wrong number of arguments for 'hexpire' command"),
    ];
    for (argv, want) in cases {
        assert_err(&c.cmd(argv), want);
    }
}

#[test]
fn fields_expire_lazily_and_take_the_key_with_the_last() {
    let srv = server();
    let mut c = srv.client();
    let mut sub = srv.client();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    sub.cmd(&["PSUBSCRIBE", "__keyevent@0__:*"]);
    c.cmd(&["HSET", "h", "a", "1", "b", "2", "keep", "3"]);
    assert_eq!(c.cmd(&["HPEXPIRE", "h", "20", "FIELDS", "2", "a", "b"]), ints(&[1, 1]));
    assert_soon(&mut c, &["HLEN", "h"], Frame::Integer(1));
    assert_eq!(c.cmd(&["HGETALL", "h"]), Frame::Array(vec![Frame::bulk("keep"), Frame::bulk("3")]));
    assert_eq!(c.cmd(&["HEXISTS", "h", "a"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["HPEXPIRE", "h", "20", "FIELDS", "1", "keep"]), ints(&[1]));
    assert_soon(&mut c, &["EXISTS", "h"], Frame::Integer(0));
    // The events: hset, hexpire, then one hexpired per purge, and del with the last field.
    let mut events = Vec::new();
    while !events.iter().any(|e| e == "del") {
        let msg = sub.read_frame();
        events.push(msg.items()[2].text().rsplit(':').next().unwrap_or_default().to_string());
    }
    assert_eq!(events.iter().filter(|e| *e == "hexpired").count(), 2, "{events:?}");
    assert_eq!(events.last().map(String::as_str), Some("del"), "{events:?}");
    assert_eq!(info_num(&info(&mut c, "stats"), "expired_subkeys"), 3);
}

#[test]
fn writes_clear_a_ttl_and_increments_keep_it() {
    let srv = server();
    let mut c = srv.client();
    c.cmd(&["HSET", "h", "a", "1", "n", "1"]);
    c.cmd(&["HEXPIRE", "h", "100", "FIELDS", "2", "a", "n"]);
    c.cmd(&["HSET", "h", "a", "2"]);
    c.cmd(&["HINCRBY", "h", "n", "1"]);
    let ttl = c.cmd(&["HTTL", "h", "FIELDS", "2", "a", "n"]);
    assert_eq!(ttl.items()[0], Frame::Integer(-1), "HSET drops the TTL");
    assert!(ttl.items()[1].int() > 0, "HINCRBY keeps it: {ttl}");
}

#[test]
fn a_replica_gets_absolute_times_and_hdels() {
    let primary = server();
    let replica = server();
    let mut r = replica.client();
    ok(&mut r, &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    assert!(
        wait_for(|| r.cmd(&["INFO", "replication"]).text().contains("master_link_status:up"), Duration::from_secs(20)),
        "link never came up; replica log:\n{}",
        replica.log()
    );
    let mut p = primary.client();
    p.cmd(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
    assert_eq!(p.cmd(&["HEXPIRE", "h", "1000", "FIELDS", "1", "c"]), ints(&[1]));
    assert_eq!(p.cmd(&["HPEXPIRE", "h", "300", "FIELDS", "1", "a"]), ints(&[1]));
    let at = p.cmd(&["HPEXPIRETIME", "h", "FIELDS", "2", "a", "c"]);
    ok(&mut p, &["SET", "sync1", "1"]);
    assert_soon(&mut r, &["GET", "sync1"], Frame::bulk("1"));
    assert_eq!(r.cmd(&["HPEXPIRETIME", "h", "FIELDS", "2", "a", "c"]), at, "the same absolute times");
    // The primary deletes `a` when it reads it after its time and sends an HDEL; the replica
    // never expires a field itself.
    assert_soon(&mut p, &["HLEN", "h"], Frame::Integer(2));
    assert_soon(&mut r, &["HEXISTS", "h", "a"], Frame::Integer(0));
    assert_eq!(r.cmd(&["HGET", "h", "b"]), Frame::bulk("2"));
    assert_eq!(p.cmd(&["HPEXPIREAT", "h", "1", "FIELDS", "1", "b"]), ints(&[2]));
    assert_eq!(p.cmd(&["HPERSIST", "h", "FIELDS", "1", "c"]), ints(&[1]));
    ok(&mut p, &["SET", "sync2", "1"]);
    assert_soon(&mut r, &["GET", "sync2"], Frame::bulk("1"));
    assert_eq!(r.cmd(&["HGETALL", "h"]), Frame::Array(vec![Frame::bulk("c"), Frame::bulk("3")]));
    assert_eq!(r.cmd(&["HTTL", "h", "FIELDS", "1", "c"]), ints(&[-1]));
}

#[test]
fn a_replica_hides_expired_fields_until_the_primarys_hdel_arrives() {
    // The primary's active expiry is off, so only its own reads send the HDELs.
    let primary = server_with(&[("enable-debug-command", "yes")]);
    let replica = server();
    let mut r = replica.client();
    ok(&mut r, &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    assert!(
        wait_for(|| r.cmd(&["INFO", "replication"]).text().contains("master_link_status:up"), Duration::from_secs(20)),
        "link never came up; replica log:\n{}",
        replica.log()
    );
    let mut p = primary.client();
    ok(&mut p, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    p.cmd(&["HSET", "h", "a", "1", "b", "22", "c", "3"]);
    p.cmd(&["HSET", "gone", "x", "1"]);
    assert_eq!(p.cmd(&["HPEXPIRE", "h", "200", "FIELDS", "2", "a", "b"]), ints(&[1, 1]));
    assert_eq!(p.cmd(&["HPEXPIRE", "gone", "200", "FIELDS", "1", "x"]), ints(&[1]));
    ok(&mut p, &["SET", "sync1", "1"]);
    assert_soon(&mut r, &["GET", "sync1"], Frame::bulk("1"));
    assert_eq!(r.cmd(&["HLEN", "h"]), Frame::Integer(3), "alive before its time");
    assert_soon(&mut r, &["HGET", "h", "a"], Frame::NullBulk);
    let (c, three) = (Frame::bulk("c"), Frame::bulk("3"));
    assert_eq!(r.cmd(&["HMGET", "h", "a", "c"]), Frame::Array(vec![Frame::NullBulk, three.clone()]));
    assert_eq!(r.cmd(&["HEXISTS", "h", "b"]), Frame::Integer(0));
    assert_eq!(r.cmd(&["HSTRLEN", "h", "b"]), Frame::Integer(0));
    assert_eq!(r.cmd(&["HLEN", "h"]), Frame::Integer(1));
    assert_eq!(r.cmd(&["HGETALL", "h"]), Frame::Array(vec![c.clone(), three.clone()]));
    assert_eq!(r.cmd(&["HKEYS", "h"]), Frame::Array(vec![c.clone()]));
    assert_eq!(r.cmd(&["HVALS", "h"]), Frame::Array(vec![three.clone()]));
    assert_eq!(r.cmd(&["HRANDFIELD", "h", "-3"]), Frame::Array(vec![c.clone(), c.clone(), c.clone()]));
    let scan = r.cmd(&["HSCAN", "h", "0"]);
    assert_eq!(scan, Frame::Array(vec![Frame::bulk("0"), Frame::Array(vec![c, three])]));
    assert_eq!(r.cmd(&["HTTL", "h", "FIELDS", "3", "a", "b", "c"]), ints(&[-2, -2, -1]));
    assert_eq!(r.cmd(&["HGETALL", "gone"]), Frame::Array(vec![]));
    // Nothing was deleted on the replica: both keys are there, no field was counted expired.
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(3));
    assert_eq!(info_num(&info(&mut r, "stats"), "expired_subkeys"), 0);
    // The primary's reads delete them and send the HDELs (the last one takes `gone`).
    assert_eq!(p.cmd(&["HLEN", "h"]), Frame::Integer(1));
    assert_eq!(p.cmd(&["EXISTS", "gone"]), Frame::Integer(0), "its lookup deleted the last field");
    assert_soon(&mut r, &["DBSIZE"], Frame::Integer(2));
    assert_eq!(r.cmd(&["HLEN", "h"]), Frame::Integer(1));
}

#[test]
fn the_active_cycle_reclaims_fields_nobody_reads() {
    let primary = server();
    let replica = server();
    let mut r = replica.client();
    ok(&mut r, &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    assert!(
        wait_for(|| r.cmd(&["INFO", "replication"]).text().contains("master_link_status:up"), Duration::from_secs(20)),
        "link never came up; replica log:\n{}",
        replica.log()
    );
    let mut p = primary.client();
    for i in 0..20 {
        let key = format!("h{i}");
        p.cmd(&["HSET", &key, "f", "1"]);
        assert_eq!(p.cmd(&["HPEXPIRE", &key, "30", "FIELDS", "1", "f"]), ints(&[1]));
    }
    // DBSIZE reads no key, so only the active cycle can bring it down; the replica follows the
    // HDELs it sends.
    assert_soon(&mut p, &["DBSIZE"], Frame::Integer(0));
    assert_soon(&mut r, &["DBSIZE"], Frame::Integer(0));
    assert_eq!(info_num(&info(&mut p, "stats"), "expired_subkeys"), 20);
    assert_eq!(info_num(&info(&mut r, "stats"), "expired_subkeys"), 0, "the replica deleted none itself");
}

#[test]
fn dump_restore_and_debug_reload_keep_field_ttls() {
    let srv = server_with(&[("enable-debug-command", "yes")]);
    let mut c = srv.client();
    // One packed (HASH_LISTPACK_EX, type 25) and one table (HASH_METADATA, type 24).
    c.cmd(&["HSET", "small", "a", "1", "b", "2", "c", "3"]);
    let long = "x".repeat(100);
    c.cmd(&["HSET", "big", "a", &long, "b", "2"]);
    let at = now_ms() + 100_000;
    for key in ["small", "big"] {
        assert_eq!(c.cmd(&["HPEXPIREAT", key, &at.to_string(), "FIELDS", "1", "a"]), ints(&[1]));
    }
    assert_eq!(c.cmd(&["HPEXPIRE", "small", "100", "FIELDS", "1", "b"]), ints(&[1]));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "big"]), Frame::bulk("hashtable"));
    for (key, ty) in [("small", 25u8), ("big", 24)] {
        let Frame::Bulk(payload) = c.cmd(&["DUMP", key]) else { panic!("DUMP {key}") };
        assert_eq!(payload[0], ty, "{key}");
        let copy = format!("{key}-copy");
        let mut argv: Vec<Vec<u8>> = vec![b"RESTORE".to_vec(), copy.clone().into_bytes(), b"0".to_vec()];
        argv.push(payload);
        assert_eq!(c.cmd(&argv), Frame::ok());
        assert_eq!(c.cmd(&["HPEXPIRETIME", &copy, "FIELDS", "2", "a", "c"]).items()[0], Frame::Integer(at));
        assert_eq!(c.cmd(&["HLEN", &copy]), c.cmd(&["HLEN", key]));
    }
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Frame::ok());
    assert_eq!(c.cmd(&["HPEXPIRETIME", "big", "FIELDS", "2", "a", "b"]), ints(&[at, -1]));
    assert_eq!(c.cmd(&["HPEXPIRETIME", "small-copy", "FIELDS", "2", "a", "c"]), ints(&[at, -1]));
    // A field TTL that came back from the file still expires, actively (DBSIZE reads no key).
    assert_eq!(c.cmd(&["HPEXPIRE", "big", "50", "FIELDS", "2", "a", "b"]), ints(&[1, 1]));
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Frame::ok());
    let keys = c.cmd(&["DBSIZE"]).int();
    assert_soon(&mut c, &["DBSIZE"], Frame::Integer(keys - 1));
    assert_soon(&mut c, &["HLEN", "small"], Frame::Integer(2));
}
