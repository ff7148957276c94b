//! OBJECT ENCODING/IDLETIME/FREQ/REFCOUNT and MEMORY USAGE: introspection of one key.

use hotkv_test_support::Frame;

use crate::{assert_err, ok, server, server_with, set_all};

#[test]
fn object_encoding_follows_the_string_representation() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("int", "12345"), ("neg", "-7"), ("short", "hello"), ("zero-led", "0123")]);
    ok(&mut c, &["SET", "long", &"x".repeat(100)]);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "int"]), Frame::bulk("int"));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "neg"]), Frame::bulk("int"));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "short"]), Frame::bulk("embstr"));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "zero-led"]), Frame::bulk("embstr"), "not a canonical integer");
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "long"]), Frame::bulk("raw"));
    // Appending turns a small string into a growable one.
    c.cmd(&["APPEND", "short", "!"]);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "short"]), Frame::bulk("raw"));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "missing"]), Frame::NullBulk);
}

#[test]
fn object_idletime_and_refcount_answer_for_existing_keys() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    let idle = c.cmd(&["OBJECT", "IDLETIME", "k"]).int();
    assert!((0..=2).contains(&idle), "a just-written key is not idle: {idle}");
    assert!(c.cmd(&["OBJECT", "REFCOUNT", "k"]).int() >= 1);
    assert_eq!(c.cmd(&["OBJECT", "IDLETIME", "missing"]), Frame::NullBulk);
}

#[test]
fn object_freq_needs_an_lfu_policy() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    assert_err(
        &c.cmd(&["OBJECT", "FREQ", "k"]),
        "ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
    );
}

#[test]
fn object_freq_counts_accesses_under_lfu() {
    let srv = server_with(&[("maxmemory-policy", "allkeys-lfu")]);
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    let before = c.cmd(&["OBJECT", "FREQ", "k"]).int();
    for _ in 0..100 {
        c.cmd(&["GET", "k"]);
    }
    let after = c.cmd(&["OBJECT", "FREQ", "k"]).int();
    assert!(after > before, "OBJECT FREQ did not grow with 100 reads: {before} -> {after}");
    assert_err(
        &c.cmd(&["OBJECT", "IDLETIME", "k"]),
        "ERR An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.",
    );
}

#[test]
fn memory_usage_grows_with_the_value() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "small", "v"]);
    ok(&mut c, &["SET", "big", &"x".repeat(10_000)]);
    let small = c.cmd(&["MEMORY", "USAGE", "small"]).int();
    let big = c.cmd(&["MEMORY", "USAGE", "big"]).int();
    assert!(small > 0 && small < 200, "MEMORY USAGE of a 1-byte value: {small}");
    assert!((10_000..20_000).contains(&big), "MEMORY USAGE of a 10 kB value: {big}");
    assert_eq!(c.cmd(&["MEMORY", "USAGE", "missing"]), Frame::NullBulk);
    assert!(c.cmd(&["MEMORY", "USAGE", "big", "SAMPLES", "0"]).int() >= 10_000);
    assert_err(&c.cmd(&["MEMORY", "USAGE", "big", "SAMPLES"]), "ERR syntax error");
}
