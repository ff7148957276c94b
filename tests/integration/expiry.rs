//! Key expiry: PX/PEXPIRE/PEXPIREAT, TTL reporting, EXPIRE options, active expiry. Waits use
//! `wait_for` with short TTLs; no sleep decides a test.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hotkv_test_support::{Frame, RawClient, wait_for};

use crate::{assert_err, ok, server, set_all};

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock after 1970").as_millis() as i64
}

/// Waits until `key` (set to a non-empty value) reads as missing; the bound is generous, TTLs
/// in these tests are short.
#[track_caller]
fn assert_gone_soon(c: &mut RawClient, key: &str) {
    let mut last = Frame::Null;
    let gone = wait_for(
        || {
            last = c.cmd(&["GET", key]);
            last == Frame::NullBulk
        },
        Duration::from_secs(5),
    );
    assert!(gone, "{key} still readable 5 s after its TTL (GET replied {last})");
}

#[test]
fn set_px_makes_the_key_expire() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v", "PX", "100"]);
    assert_gone_soon(&mut c, "k");
}

#[test]
fn pexpire_sets_a_ttl_and_the_key_expires() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    assert_eq!(c.cmd(&["PEXPIRE", "k", "300"]), Frame::Integer(1));
    let pttl = c.cmd(&["PTTL", "k"]).int();
    assert!(pttl > 0 && pttl <= 300, "PTTL right after PEXPIRE 300: {pttl}");
    assert_gone_soon(&mut c, "k");
    assert_eq!(c.cmd(&["PEXPIRE", "k", "300"]), Frame::Integer(0), "PEXPIRE on a missing key");
}

#[test]
fn pexpireat_in_the_past_deletes_at_once() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("a", "1"), ("b", "2")]);
    assert_eq!(c.cmd(&["PEXPIREAT", "a", "1"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXISTS", "a"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXPIRE", "b", "-1"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXISTS", "b"]), Frame::Integer(0));
}

#[test]
fn pexpireat_in_the_future_expires_on_time() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    let at = now_ms() + 300;
    assert_eq!(c.cmd(&["PEXPIREAT", "k", &at.to_string()]), Frame::Integer(1));
    assert_eq!(c.cmd(&["PEXPIRETIME", "k"]), Frame::Integer(at));
    // Seconds are rounded to the nearest, as Valkey's ttlGenericCommand does.
    assert_eq!(c.cmd(&["EXPIRETIME", "k"]), Frame::Integer((at + 500) / 1000));
    assert_gone_soon(&mut c, "k");
}

#[test]
fn ttl_and_pttl_report_missing_and_persistent_keys() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "p", "v"]);
    assert_eq!(c.cmd(&["TTL", "missing"]), Frame::Integer(-2));
    assert_eq!(c.cmd(&["PTTL", "missing"]), Frame::Integer(-2));
    assert_eq!(c.cmd(&["TTL", "p"]), Frame::Integer(-1));
    assert_eq!(c.cmd(&["PTTL", "p"]), Frame::Integer(-1));
    assert_eq!(c.cmd(&["EXPIRETIME", "missing"]), Frame::Integer(-2));
    assert_eq!(c.cmd(&["PEXPIRETIME", "p"]), Frame::Integer(-1));
    assert_eq!(c.cmd(&["EXPIRE", "p", "100"]), Frame::Integer(1));
    let ttl = c.cmd(&["TTL", "p"]).int();
    assert!((99..=100).contains(&ttl), "TTL after EXPIRE 100: {ttl}");
}

#[test]
fn persist_removes_the_ttl() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v", "EX", "100"]);
    assert_eq!(c.cmd(&["PERSIST", "k"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["TTL", "k"]), Frame::Integer(-1));
    assert_eq!(c.cmd(&["PERSIST", "k"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["PERSIST", "missing"]), Frame::Integer(0));
}

#[test]
fn set_clears_the_ttl_unless_keepttl() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v", "EX", "100"]);
    ok(&mut c, &["SET", "k", "w", "KEEPTTL"]);
    assert!(c.cmd(&["TTL", "k"]).int() > 0, "KEEPTTL keeps it");
    ok(&mut c, &["SET", "k", "x"]);
    assert_eq!(c.cmd(&["TTL", "k"]), Frame::Integer(-1), "a plain SET clears it");
}

#[test]
fn incr_and_append_keep_the_ttl() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "n", "1", "EX", "100"]);
    ok(&mut c, &["SET", "s", "a", "EX", "100"]);
    assert_eq!(c.cmd(&["INCR", "n"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["APPEND", "s", "b"]), Frame::Integer(2));
    assert!(c.cmd(&["TTL", "n"]).int() > 0, "INCR keeps the TTL");
    assert!(c.cmd(&["TTL", "s"]).int() > 0, "APPEND keeps the TTL");
}

#[test]
fn expire_nx_xx_gt_lt_options() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    assert_eq!(c.cmd(&["EXPIRE", "k", "100", "XX"]), Frame::Integer(0), "XX needs a TTL");
    assert_eq!(c.cmd(&["EXPIRE", "k", "100", "NX"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXPIRE", "k", "200", "NX"]), Frame::Integer(0), "NX refuses an existing TTL");
    assert_eq!(c.cmd(&["EXPIRE", "k", "200", "GT"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXPIRE", "k", "50", "GT"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXPIRE", "k", "50", "LT"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXPIRE", "k", "500", "LT"]), Frame::Integer(0));
    let ttl = c.cmd(&["TTL", "k"]).int();
    assert!((49..=50).contains(&ttl), "TTL after the option dance: {ttl}");
    // A key without TTL counts as an infinite TTL for GT and LT.
    ok(&mut c, &["SET", "p", "v"]);
    assert_eq!(c.cmd(&["EXPIRE", "p", "100", "GT"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXPIRE", "p", "100", "LT"]), Frame::Integer(1));
}

#[test]
fn expire_rejects_incompatible_options_and_bad_times() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    assert_err(
        &c.cmd(&["EXPIRE", "k", "100", "NX", "XX"]),
        "ERR NX and XX, GT or LT options at the same time are not compatible",
    );
    assert_err(
        &c.cmd(&["EXPIRE", "k", "100", "GT", "LT"]),
        "ERR GT and LT options at the same time are not compatible",
    );
    assert_err(&c.cmd(&["EXPIRE", "k", "100", "BOGUS"]), "ERR Unsupported option BOGUS");
    assert_err(&c.cmd(&["EXPIRE", "k", "soon"]), "ERR value is not an integer or out of range");
    assert_err(&c.cmd(&["EXPIRE", "k", "9223372036854775807"]), "ERR invalid expire time in 'expire' command");
    assert_err(&c.cmd(&["PEXPIRE", "k", "9223372036854775807"]), "ERR invalid expire time in 'pexpire' command");
    assert_eq!(c.cmd(&["TTL", "k"]), Frame::Integer(-1), "failed EXPIREs change nothing");
}

#[test]
fn expired_keys_are_reclaimed_without_being_accessed() {
    let srv = server();
    let mut c = srv.client();
    for i in 0..200 {
        c.send(&["SET", &format!("k{i}"), "v", "PX", "50"]);
    }
    for _ in 0..200 {
        assert_eq!(c.read_frame(), Frame::ok());
    }
    ok(&mut c, &["SET", "keeper", "v"]);
    // DBSIZE counts keys whose TTL passed but were not yet reclaimed, so only the active
    // expire cycle can bring it down to the one persistent key.
    assert!(
        wait_for(|| c.cmd(&["DBSIZE"]) == Frame::Integer(1), Duration::from_secs(10)),
        "active expiry did not reclaim the keys: DBSIZE {}",
        c.cmd(&["DBSIZE"])
    );
}
