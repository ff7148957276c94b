//! Integration tests: the real `hotkv` binary that cargo built, driven by real clients (the
//! Rust `redis` crate, `redis-cli`, `redis-benchmark`, redis-py) and by a raw RESP client for
//! exact protocol shapes.
//!
//! One test binary with a module per area keeps link time low (STYLE.md §6). Every test starts
//! its own server on its own ports in its own temp dir, so tests run in parallel safely; every
//! wait is bounded; every process started is stopped when its guard drops.
//!
//! Expected replies follow Valkey 8.0. Set `HOTKV_TEST_BIN=/path/to/valkey-server` to run the
//! suite against a reference server and check an expectation.

mod acl;
mod aof;
mod auth;
mod benchmark;
mod bitmaps_hll;
mod blocking;
mod client_buffers;
mod client_cmd;
mod client_eviction;
mod cluster;
mod cluster_client_ip;
mod cluster_failover;
mod cluster_partition;
mod cluster_pubsub;
mod cluster_tls;
mod collections;
mod command;
mod config_file;
mod config_set;
mod crash;
mod databases;
mod debug_shutdown;
mod debug_sleep;
mod doc_cluster_tls;
mod dump_restore;
mod expiry;
mod generic_types;
mod geo;
mod harness;
mod hash_expiry;
mod hostile;
mod info;
mod inline;
mod keys;
mod lists;
mod maxmemory;
mod model;
mod monitor_slowlog;
mod object_memory;
mod persistence;
mod pipeline;
mod pki;
mod protocol;
mod pubsub;
mod python;
mod python_scripting;
mod rdb_file;
mod redis_cli;
mod replication;
mod resharding;
mod resp3;
mod scan;
mod script_debug;
mod scripting;
mod sort;
mod streams;
mod strings;
mod tls;
mod tracking;
mod transactions;
mod unix_socket;
mod zsets;

use std::time::Duration;

use hotkv_test_support::{Builder, Frame, RawClient, TestServer};

/// The binary under test; cargo passes its path only to tests of the package that owns it.
pub const BIN: &str = env!("CARGO_BIN_EXE_hotkv");

/// A server with the harness defaults only.
pub fn server() -> TestServer {
    TestServer::spawn(BIN, &[])
}

/// A server with extra directives.
pub fn server_with(overrides: &[(&str, &str)]) -> TestServer {
    TestServer::spawn(BIN, overrides)
}

/// A builder for servers that need more than directives (custom files, flags, format).
pub fn builder() -> Builder {
    TestServer::builder(BIN)
}

/// A `redis` crate connection with bounded reads, so a missing reply fails instead of hanging.
pub fn redis_conn(srv: &TestServer) -> redis::Connection {
    redis_conn_url(&srv.url())
}

/// A `redis` crate connection to `url` with bounded connect and reads.
pub fn redis_conn_url(url: &str) -> redis::Connection {
    let client = redis::Client::open(url).unwrap_or_else(|e| panic!("bad url {url}: {e}"));
    let con = client
        .get_connection_with_timeout(Duration::from_secs(10))
        .unwrap_or_else(|e| panic!("cannot connect to {url}: {e}"));
    con.set_read_timeout(Some(Duration::from_secs(10))).expect("set read timeout");
    con.set_write_timeout(Some(Duration::from_secs(10))).expect("set write timeout");
    con
}

/// The server's error line (`WRONGPASS invalid ...`) from a `redis` crate error, rebuilt
/// from its code and detail, for exact comparisons.
pub fn server_error(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// Asserts that `reply` is exactly the error line `expected`.
#[track_caller]
pub fn assert_err(reply: &Frame, expected: &str) {
    match reply.error_text() {
        Some(text) => assert_eq!(text, expected, "wrong error text"),
        None => panic!("expected error {expected:?}, got {reply}"),
    }
}

/// Asserts that `reply` is an error whose line starts with `prefix`.
#[track_caller]
pub fn assert_err_prefix(reply: &Frame, prefix: &str) {
    match reply.error_text() {
        Some(text) => assert!(text.starts_with(prefix), "error {text:?} does not start with {prefix:?}"),
        None => panic!("expected an error starting with {prefix:?}, got {reply}"),
    }
}

/// Sends `args` and asserts the reply is `+OK`.
#[track_caller]
pub fn ok(c: &mut RawClient, args: &[&str]) {
    let reply = c.cmd(args);
    assert_eq!(reply, Frame::ok(), "{args:?}");
}

/// Sets each key to its value with one SET per pair: setup that depends on SET alone, so a
/// test fails on the command it is about, not on MSET.
#[track_caller]
pub fn set_all(c: &mut RawClient, pairs: &[(&str, &str)]) {
    for (k, v) in pairs {
        ok(c, &["SET", k, v]);
    }
}

/// The text of `INFO <section>` as a string (bulk in RESP2, verbatim in RESP3).
#[track_caller]
pub fn info(c: &mut RawClient, section: &str) -> String {
    let reply = c.cmd(&["INFO", section]);
    assert!(!reply.is_error(), "INFO {section}: {reply}");
    reply.text()
}

/// The value of `field` in INFO text (`field:value` lines), if present.
pub fn info_field(text: &str, field: &str) -> Option<String> {
    text.lines().find_map(|l| l.strip_prefix(field).and_then(|r| r.strip_prefix(':')).map(|v| v.trim().to_string()))
}

/// The value of a numeric INFO field; panics (naming the field) if absent or not a number.
#[track_caller]
pub fn info_num(text: &str, field: &str) -> i64 {
    let v = info_field(text, field).unwrap_or_else(|| panic!("INFO has no {field} field:\n{text}"));
    v.parse().unwrap_or_else(|_| panic!("INFO {field}:{v} is not an integer"))
}

/// `CONFIG GET name` as the value string.
#[track_caller]
pub fn config_get(c: &mut RawClient, name: &str) -> String {
    let reply = c.cmd(&["CONFIG", "GET", name]);
    match reply.field(name) {
        Some(v) => v.text(),
        None => panic!("CONFIG GET {name} returned {reply}"),
    }
}
