//! What every type shares: TYPE and OBJECT ENCODING at and across the compact-encoding
//! thresholds (moved with CONFIG SET), SCAN TYPE, COPY/RENAME/MOVE keeping value and TTL,
//! MEMORY USAGE, WRONGTYPE across families, emptied collections deleted, DUMP/RESTORE, and a
//! keyspace event from one command of each family.
//!
//! Values are compared with DEBUG DIGEST-VALUE, which hashes a whole value of any type the
//! way Valkey does, so a copy that lost or reordered an element is caught.

use std::collections::BTreeSet;
use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, TestServer};

use crate::{assert_err, ok, server, server_with};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

/// One key of each type: (key, TYPE name, command that creates it).
const SAMPLES: &[(&str, &str, &[&str])] = &[
    ("str", "string", &["SET", "str", "hello"]),
    ("list", "list", &["RPUSH", "list", "a", "b", "3"]),
    ("hash", "hash", &["HSET", "hash", "f", "v", "n", "1"]),
    ("set", "set", &["SADD", "set", "x", "y", "7"]),
    ("zset", "zset", &["ZADD", "zset", "1", "a", "2.5", "b"]),
];

/// A server that allows DEBUG (for DIGEST-VALUE).
fn debug_server() -> TestServer {
    server_with(&[("enable-debug-command", "yes")])
}

fn create_samples(c: &mut RawClient) {
    for (_, _, create) in SAMPLES {
        assert!(!c.cmd(create).is_error(), "{create:?}");
    }
}

fn digest(c: &mut RawClient, key: &str) -> String {
    let reply = c.cmd(&["DEBUG", "DIGEST-VALUE", key]);
    reply.items()[0].text()
}

fn encoding(c: &mut RawClient, key: &str) -> String {
    c.cmd(&["OBJECT", "ENCODING", key]).text()
}

#[test]
fn type_and_encoding_of_strings_lists_and_zsets_across_thresholds() {
    let srv = server();
    let mut c = srv.client();
    create_samples(&mut c);
    for (key, ty, _) in SAMPLES {
        assert_eq!(c.cmd(&["TYPE", key]), Frame::simple(ty), "{key}");
    }
    assert_eq!(c.cmd(&["TYPE", "none"]), Frame::simple("none"));
    ok(&mut c, &["SET", "s44", &"x".repeat(44)]);
    ok(&mut c, &["SET", "s45", &"x".repeat(45)]);
    ok(&mut c, &["SET", "i", "-9223372036854775808"]);
    assert_eq!(
        (encoding(&mut c, "s44"), encoding(&mut c, "s45"), encoding(&mut c, "i")),
        ("embstr".into(), "raw".into(), "int".into())
    );
    c.cmd(&["PFADD", "hll", "a"]);
    assert_eq!((c.cmd(&["TYPE", "hll"]), encoding(&mut c, "hll")), (Frame::simple("string"), "raw".into()));

    ok(&mut c, &["CONFIG", "SET", "list-max-listpack-size", "4"]);
    c.cmd(&["RPUSH", "l", "1", "2", "3", "4"]);
    assert_eq!(encoding(&mut c, "l"), "listpack", "at the count limit");
    c.cmd(&["RPUSH", "l", "5"]);
    assert_eq!(encoding(&mut c, "l"), "quicklist", "one past it");
    // Valkey converts back only once one node holds at most half the limit.
    c.cmd(&["RPOP", "l", "2"]);
    assert_eq!(encoding(&mut c, "l"), "quicklist");
    c.cmd(&["RPOP", "l"]);
    assert_eq!(encoding(&mut c, "l"), "listpack");
    ok(&mut c, &["CONFIG", "SET", "list-max-listpack-size", "-1"]);
    c.cmd(&["RPUSH", "big", &"x".repeat(5000)]);
    assert_eq!(encoding(&mut c, "big"), "quicklist", "an element over the 4 kB size class");

    ok(&mut c, &["CONFIG", "SET", "zset-max-listpack-entries", "2"]);
    ok(&mut c, &["CONFIG", "SET", "zset-max-listpack-value", "5"]);
    c.cmd(&["ZADD", "z", "1", "a", "2", "b"]);
    assert_eq!(encoding(&mut c, "z"), "listpack");
    c.cmd(&["ZADD", "z", "3", "c"]);
    assert_eq!(encoding(&mut c, "z"), "skiplist");
    c.cmd(&["ZADD", "zv", "1", "abcde"]);
    assert_eq!(encoding(&mut c, "zv"), "listpack", "a member at the value limit");
    c.cmd(&["ZADD", "zv", "1", "abcdef"]);
    assert_eq!(encoding(&mut c, "zv"), "skiplist");
}

#[test]
fn type_and_encoding_of_hashes_and_sets_across_thresholds() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "hash-max-listpack-entries", "2"]);
    c.cmd(&["HSET", "h2", "a", "1", "b", "2"]);
    assert_eq!(encoding(&mut c, "h2"), "listpack");
    c.cmd(&["HSET", "h3", "a", "1", "b", "2", "c", "3"]);
    assert_eq!(encoding(&mut c, "h3"), "hashtable");
    assert_eq!(c.cmd(&["TYPE", "h3"]), Frame::simple("hash"));
    ok(&mut c, &["CONFIG", "SET", "hash-max-listpack-value", "3"]);
    c.cmd(&["HSET", "hv", "abc", "xyz"]);
    assert_eq!(encoding(&mut c, "hv"), "listpack");
    c.cmd(&["HSET", "hv", "f", "long"]);
    assert_eq!(encoding(&mut c, "hv"), "hashtable", "a value over the limit");

    ok(&mut c, &["CONFIG", "SET", "set-max-intset-entries", "3"]);
    c.cmd(&["SADD", "ints", "1", "2", "3"]);
    assert_eq!(encoding(&mut c, "ints"), "intset");
    c.cmd(&["SADD", "ints", "4"]);
    assert_eq!(encoding(&mut c, "ints"), "hashtable", "an intset that overflows becomes a table");
    c.cmd(&["SADD", "mixed", "1", "2"]);
    c.cmd(&["SADD", "mixed", "a"]);
    assert_eq!(encoding(&mut c, "mixed"), "listpack", "a string member in a small intset");
    ok(&mut c, &["CONFIG", "SET", "set-max-listpack-entries", "3"]);
    c.cmd(&["SADD", "mixed", "b"]);
    assert_eq!(encoding(&mut c, "mixed"), "hashtable");
    ok(&mut c, &["CONFIG", "SET", "set-max-listpack-value", "4"]);
    c.cmd(&["SADD", "sv", "abcd"]);
    assert_eq!(encoding(&mut c, "sv"), "listpack");
    c.cmd(&["SADD", "sv2", "abcde"]);
    assert_eq!(encoding(&mut c, "sv2"), "hashtable");
    assert_eq!(c.cmd(&["TYPE", "sv2"]), Frame::simple("set"));
}

#[test]
fn scan_type_keeps_one_type() {
    let srv = server();
    let mut c = srv.client();
    create_samples(&mut c);
    c.cmd(&["PFADD", "hll", "x"]);
    for (_, ty, _) in SAMPLES {
        let mut cursor = "0".to_string();
        let mut seen = BTreeSet::new();
        loop {
            let reply = c.cmd(&["SCAN", &cursor, "TYPE", ty, "COUNT", "3"]);
            let items = reply.items();
            cursor = items[0].text();
            seen.extend(items[1].items().iter().map(Frame::text));
            if cursor == "0" {
                break;
            }
        }
        let want: BTreeSet<String> = match *ty {
            "string" => ["str", "hll"].map(String::from).into(),
            other => SAMPLES.iter().filter(|s| s.1 == other).map(|s| s.0.to_string()).collect(),
        };
        assert_eq!(seen, want, "SCAN TYPE {ty}");
    }
    assert_eq!(c.cmd(&["SCAN", "0", "TYPE", "stream"]).items()[1], Frame::Array(vec![]));
}

#[test]
fn copy_rename_and_move_keep_value_and_ttl() {
    let srv = debug_server();
    let mut c = srv.client();
    create_samples(&mut c);
    for (key, ty, _) in SAMPLES {
        assert_eq!(c.cmd(&["EXPIRE", key, "1000"]), Frame::Integer(1));
        let want = digest(&mut c, key);
        let copy = format!("{key}:copy");
        assert_eq!(c.cmd(&["COPY", key, &copy]), Frame::Integer(1), "{key}");
        assert_eq!(digest(&mut c, &copy), want, "COPY of a {ty}");
        assert!(c.cmd(&["PTTL", &copy]).int() > 990_000, "COPY keeps the TTL of a {ty}");
        assert_eq!(c.cmd(&["COPY", key, &copy]), Frame::Integer(0), "COPY without REPLACE");
        let renamed = format!("{key}:renamed");
        ok(&mut c, &["RENAME", &copy, &renamed]);
        assert_eq!(c.cmd(&["EXISTS", &copy]), Frame::Integer(0));
        assert_eq!(digest(&mut c, &renamed), want, "RENAME of a {ty}");
        assert!(c.cmd(&["PTTL", &renamed]).int() > 990_000, "RENAME keeps the TTL of a {ty}");
        assert_eq!(c.cmd(&["MOVE", &renamed, "3"]), Frame::Integer(1));
        ok(&mut c, &["SELECT", "3"]);
        assert_eq!(c.cmd(&["TYPE", &renamed]), Frame::simple(ty));
        assert_eq!(digest(&mut c, &renamed), want, "MOVE of a {ty}");
        assert!(c.cmd(&["PTTL", &renamed]).int() > 990_000, "MOVE keeps the TTL of a {ty}");
        assert_eq!(c.cmd(&["COPY", &renamed, key, "DB", "0"]), Frame::Integer(0), "the source is still there");
        assert_eq!(c.cmd(&["COPY", &renamed, key, "DB", "0", "REPLACE"]), Frame::Integer(1));
        ok(&mut c, &["SELECT", "0"]);
        assert_eq!(digest(&mut c, key), want, "COPY ... DB REPLACE of a {ty}");
    }
}

#[test]
fn memory_usage_grows_with_each_type() {
    let srv = server();
    let mut c = srv.client();
    let fill = |c: &mut RawClient, cmd: &str, key: &str, n: usize| {
        for i in 0..n {
            let m = format!("member-{i:05}");
            let argv: Vec<&str> = match cmd {
                "RPUSH" | "SADD" => vec![cmd, key, &m],
                "HSET" => vec![cmd, key, &m, "value"],
                _ => vec![cmd, key, "1", &m],
            };
            assert!(!c.cmd(&argv).is_error());
        }
    };
    for cmd in ["RPUSH", "SADD", "HSET", "ZADD"] {
        fill(&mut c, cmd, "small", 5);
        fill(&mut c, cmd, "large", 2000);
        let small = c.cmd(&["MEMORY", "USAGE", "small"]).int();
        let large = c.cmd(&["MEMORY", "USAGE", "large", "SAMPLES", "0"]).int();
        assert!(small > 50 && small < 1000, "{cmd}: MEMORY USAGE of 5 members {small}");
        // Each of 2000 members holds at least its 12 bytes of text.
        assert!(large > 2000 * 12 && large > 20 * small, "{cmd}: {small} for 5 members, {large} for 2000");
        c.cmd(&["DEL", "small", "large"]);
    }
}

#[test]
fn each_family_refuses_the_other_types() {
    let srv = server();
    let mut c = srv.client();
    create_samples(&mut c);
    // One reading and one writing command per family, run against every other type.
    let family: &[(&str, &[&[&str]])] = &[
        ("string", &[&["GET", "K"], &["APPEND", "K", "x"], &["SETBIT", "K", "1", "1"], &["PFADD", "K", "x"]]),
        ("list", &[&["LRANGE", "K", "0", "-1"], &["LPUSH", "K", "x"]]),
        ("hash", &[&["HGETALL", "K"], &["HSET", "K", "f", "v"]]),
        ("set", &[&["SMEMBERS", "K"], &["SADD", "K", "x"]]),
        ("zset", &[&["ZRANGE", "K", "0", "-1"], &["ZADD", "K", "1", "x"]]),
    ];
    for (ty, commands) in family {
        for (key, key_ty, _) in SAMPLES {
            if key_ty == ty {
                continue;
            }
            for cmd in *commands {
                let argv: Vec<&str> = cmd.iter().map(|a| if *a == "K" { *key } else { *a }).collect();
                assert_err(&c.cmd(&argv), WRONGTYPE);
            }
        }
    }
    // Sets stand in for sorted sets in the Z*STORE family, and nothing else does.
    assert_eq!(c.cmd(&["ZUNIONSTORE", "u", "2", "set", "zset"]), Frame::Integer(5));
    assert_err(&c.cmd(&["ZUNIONSTORE", "u", "1", "list"]), WRONGTYPE);
    assert_err(&c.cmd(&["SUNION", "set", "hash"]), WRONGTYPE);
}

#[test]
fn a_collection_emptied_by_its_last_member_is_gone() {
    let srv = server();
    let mut c = srv.client();
    let cases: &[(&[&str], &[&str])] = &[
        (&["RPUSH", "k", "a"], &["LREM", "k", "0", "a"]),
        (&["RPUSH", "k", "a"], &["LMOVE", "k", "other", "LEFT", "LEFT"]),
        (&["HSET", "k", "f", "v"], &["HDEL", "k", "f", "nope"]),
        (&["SADD", "k", "m"], &["SPOP", "k"]),
        (&["SADD", "k", "m"], &["SMOVE", "k", "dst", "m"]),
        (&["SADD", "k", "1"], &["SINTERSTORE", "k", "k", "nothing"]),
        (&["ZADD", "k", "1", "m"], &["ZPOPMAX", "k"]),
        (&["ZADD", "k", "1", "m"], &["ZREMRANGEBYSCORE", "k", "-inf", "+inf"]),
    ];
    for (create, empty) in cases {
        assert!(!c.cmd(create).is_error());
        assert!(!c.cmd(empty).is_error(), "{empty:?}");
        assert_eq!(c.cmd(&["EXISTS", "k"]), Frame::Integer(0), "{create:?} then {empty:?}");
        assert_eq!(c.cmd(&["TYPE", "k"]), Frame::simple("none"));
    }
}

#[test]
fn dump_and_restore_round_trip_every_type() {
    let srv = debug_server();
    let mut c = srv.client();
    // RESTORE builds values for the current settings, so set them before the originals.
    ok(&mut c, &["CONFIG", "SET", "list-max-listpack-size", "2"]);
    create_samples(&mut c);
    c.cmd(&["RPUSH", "quick", "1", "2", "3", "4", "5"]);
    c.cmd(&["PFADD", "hll", "a", "b"]);
    let keys: Vec<&str> = SAMPLES.iter().map(|s| s.0).chain(["quick", "hll"]).collect();
    for key in keys {
        let want = digest(&mut c, key);
        let Frame::Bulk(payload) = c.cmd(&["DUMP", key]) else { panic!("DUMP {key}") };
        let copy = format!("{key}:restored");
        assert_eq!(c.cmd(&[b"RESTORE".as_slice(), copy.as_bytes(), b"50000", &payload]), Frame::ok());
        assert!(c.cmd(&["PTTL", &copy]).int() > 49_000, "RESTORE with a TTL");
        assert_eq!(c.cmd(&["PERSIST", &copy]), Frame::Integer(1));
        assert_eq!(digest(&mut c, &copy), want, "{key} round trip");
        // A restored short string is embstr even where PFADD made a raw one, as in Valkey.
        if key != "hll" {
            assert_eq!(encoding(&mut c, &copy), encoding(&mut c, key), "{key} encoding");
        }
        let busy = c.cmd(&[b"RESTORE".as_slice(), copy.as_bytes(), b"0", &payload]);
        assert_err(&busy, "BUSYKEY Target key name already exists.");
    }
    assert_eq!(c.cmd(&["DUMP", "none"]), Frame::NullBulk);
    assert_err(&c.cmd(&["RESTORE", "bad", "0", "garbage"]), "ERR DUMP payload version or checksum are wrong");
}

#[test]
fn one_keyspace_event_per_family() {
    let srv = server_with(&[("notify-keyspace-events", "KEA")]);
    let mut sub = srv.client();
    sub.set_timeout(Duration::from_secs(5));
    sub.cmd(&["PSUBSCRIBE", "__keyevent@0__:*"]);
    let mut c = srv.client();
    let cases: &[(&[&str], &[&str])] = &[
        (&["SET", "s", "v"], &["set"]),
        (&["SETBIT", "b", "1", "1"], &["setbit"]),
        (&["PFADD", "p", "x"], &["pfadd"]),
        (&["LPUSH", "l", "x"], &["lpush"]),
        (&["HSET", "h", "f", "v"], &["hset"]),
        (&["SADD", "st", "m"], &["sadd"]),
        (&["ZADD", "z", "1", "m"], &["zadd"]),
        (&["ZINCRBY", "z", "1", "m"], &["zincr"]),
        // Removing the last member announces the removal, then the key's deletion.
        (&["LPOP", "l"], &["lpop", "del"]),
        (&["HDEL", "h", "f"], &["hdel", "del"]),
        (&["SREM", "st", "m"], &["srem", "del"]),
        (&["ZPOPMIN", "z"], &["zpopmin", "del"]),
    ];
    for (cmd, events) in cases {
        assert!(!c.cmd(cmd).is_error(), "{cmd:?}");
        for event in *events {
            let msg = sub.read_frame();
            let want = Frame::Array(vec![
                Frame::bulk("pmessage"),
                Frame::bulk("__keyevent@0__:*"),
                Frame::bulk(format!("__keyevent@0__:{event}")),
                Frame::bulk(cmd[1]),
            ]);
            assert_eq!(msg, want, "{cmd:?}");
        }
    }
    // A command that changes nothing announces nothing: the next event is the marker's.
    c.cmd(&["SREM", "none", "m"]);
    ok(&mut c, &["SET", "marker", "1"]);
    assert_eq!(sub.read_frame().items()[3], Frame::bulk("marker"));
}
