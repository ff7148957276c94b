//! Generic key commands: DEL, EXISTS, UNLINK, TOUCH, TYPE, RENAME, KEYS, RANDOMKEY, DBSIZE,
//! FLUSHDB, COPY, DUMP/RESTORE (Valkey 8.0 `db.c`, `cluster.c` semantics).

use std::collections::BTreeSet;

use hotkv_test_support::Frame;

use crate::{assert_err, ok, server, set_all};

#[test]
fn del_and_exists_count_keys() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("a", "1"), ("b", "2")]);
    // EXISTS counts a key once per mention.
    assert_eq!(c.cmd(&["EXISTS", "a", "a", "b", "missing"]), Frame::Integer(3));
    assert_eq!(c.cmd(&["DEL", "a", "b", "missing"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["EXISTS", "a", "b"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["DEL", "a"]), Frame::Integer(0));
}

#[test]
fn unlink_and_touch_count_existing_keys() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("a", "1"), ("b", "2")]);
    assert_eq!(c.cmd(&["TOUCH", "a", "b", "missing"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["UNLINK", "a", "missing"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXISTS", "a", "b"]), Frame::Integer(1));
}

#[test]
fn type_reports_string_and_none() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "s", "v"]);
    assert_eq!(c.cmd(&["TYPE", "s"]), Frame::simple("string"));
    assert_eq!(c.cmd(&["TYPE", "missing"]), Frame::simple("none"));
}

#[test]
fn rename_moves_the_value_and_its_ttl() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "old", "v", "PX", "100000"]);
    ok(&mut c, &["SET", "new", "overwritten"]);
    ok(&mut c, &["RENAME", "old", "new"]);
    assert_eq!(c.cmd(&["GET", "new"]), Frame::bulk("v"));
    assert_eq!(c.cmd(&["EXISTS", "old"]), Frame::Integer(0));
    let pttl = c.cmd(&["PTTL", "new"]).int();
    assert!(pttl > 0 && pttl <= 100_000, "the TTL moves with the value: {pttl}");
    // Renaming a key onto itself is a no-op that succeeds.
    ok(&mut c, &["RENAME", "new", "new"]);
    assert_eq!(c.cmd(&["GET", "new"]), Frame::bulk("v"));
    assert_err(&c.cmd(&["RENAME", "missing", "x"]), "ERR no such key");
}

#[test]
fn renamenx_refuses_an_existing_target() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("a", "1"), ("b", "2")]);
    assert_eq!(c.cmd(&["RENAMENX", "a", "b"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["MGET", "a", "b"]), Frame::Array(vec![Frame::bulk("1"), Frame::bulk("2")]));
    assert_eq!(c.cmd(&["RENAMENX", "a", "c"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["GET", "c"]), Frame::bulk("1"));
    assert_err(&c.cmd(&["RENAMENX", "missing", "d"]), "ERR no such key");
}

#[test]
fn keys_matches_glob_patterns() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("hello", "1"), ("hallo", "2"), ("hxllo", "3"), ("hllo", "4"), ("heeeello", "5"), ("a*b", "6")]);
    let keys = |c: &mut hotkv_test_support::RawClient, pat: &str| -> BTreeSet<String> {
        c.cmd(&["KEYS", pat]).items().iter().map(Frame::text).collect()
    };
    let set = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<BTreeSet<_>>();
    assert_eq!(keys(&mut c, "h?llo"), set(&["hello", "hallo", "hxllo"]));
    assert_eq!(keys(&mut c, "h*llo"), set(&["hello", "hallo", "hxllo", "hllo", "heeeello"]));
    assert_eq!(keys(&mut c, "h[ae]llo"), set(&["hello", "hallo"]));
    assert_eq!(keys(&mut c, "h[^e]llo"), set(&["hallo", "hxllo"]));
    assert_eq!(keys(&mut c, "h[a-b]llo"), set(&["hallo"]));
    assert_eq!(keys(&mut c, "a\\*b"), set(&["a*b"]));
    assert_eq!(keys(&mut c, "*").len(), 6);
    assert_eq!(keys(&mut c, "nomatch*"), set(&[]));
}

#[test]
fn randomkey_returns_an_existing_key_or_nil() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["RANDOMKEY"]), Frame::NullBulk);
    set_all(&mut c, &[("a", "1"), ("b", "2")]);
    for _ in 0..10 {
        let k = c.cmd(&["RANDOMKEY"]).text();
        assert!(k == "a" || k == "b", "RANDOMKEY returned {k:?}");
    }
}

#[test]
fn dbsize_and_flushdb() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
    set_all(&mut c, &[("a", "1"), ("b", "2"), ("c", "3")]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(3));
    ok(&mut c, &["FLUSHDB"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
    ok(&mut c, &["SET", "a", "1"]);
    ok(&mut c, &["FLUSHDB", "ASYNC"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
    ok(&mut c, &["SET", "a", "1"]);
    ok(&mut c, &["FLUSHALL", "SYNC"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
}

#[test]
fn copy_duplicates_a_key_unless_the_target_exists() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "src", "v", "PX", "100000"]);
    assert_eq!(c.cmd(&["COPY", "src", "dst"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["GET", "dst"]), Frame::bulk("v"));
    assert!(c.cmd(&["PTTL", "dst"]).int() > 0, "COPY keeps the TTL");
    ok(&mut c, &["SET", "src", "w"]);
    assert_eq!(c.cmd(&["COPY", "src", "dst"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["GET", "dst"]), Frame::bulk("v"));
    assert_eq!(c.cmd(&["COPY", "src", "dst", "REPLACE"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["GET", "dst"]), Frame::bulk("w"));
    assert_eq!(c.cmd(&["COPY", "missing", "x"]), Frame::Integer(0));
    assert_err(&c.cmd(&["COPY", "src", "src"]), "ERR source and destination objects are the same");
    // Into another database.
    assert_eq!(c.cmd(&["COPY", "src", "other", "DB", "1"]), Frame::Integer(1));
    ok(&mut c, &["SELECT", "1"]);
    assert_eq!(c.cmd(&["GET", "other"]), Frame::bulk("w"));
}

#[test]
fn dump_and_restore_round_trip_a_value() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "some value"]);
    let payload = match c.cmd(&["DUMP", "k"]) {
        Frame::Bulk(b) => b,
        other => panic!("DUMP returned {other}"),
    };
    assert_eq!(c.cmd(&["DUMP", "missing"]), Frame::NullBulk);
    let restore = |c: &mut hotkv_test_support::RawClient, key: &str, ttl: &str, extra: &[&str]| {
        let mut args: Vec<&[u8]> = vec![b"RESTORE", key.as_bytes(), ttl.as_bytes(), &payload];
        args.extend(extra.iter().map(|s| s.as_bytes()));
        c.cmd(&args)
    };
    assert_eq!(restore(&mut c, "copy", "0", &[]), Frame::ok());
    assert_eq!(c.cmd(&["GET", "copy"]), Frame::bulk("some value"));
    assert_eq!(c.cmd(&["PTTL", "copy"]), Frame::Integer(-1));
    assert_err(&restore(&mut c, "copy", "0", &[]), "BUSYKEY Target key name already exists.");
    assert_eq!(restore(&mut c, "copy", "100000", &["REPLACE"]), Frame::ok());
    let pttl = c.cmd(&["PTTL", "copy"]).int();
    assert!(pttl > 0 && pttl <= 100_000, "RESTORE with a TTL: {pttl}");
    // A payload whose checksum does not match is refused.
    let mut bad = payload.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    let reply = c.cmd(&[&b"RESTORE"[..], b"bad", b"0", &bad]);
    assert_err(&reply, "ERR DUMP payload version or checksum are wrong");
}
