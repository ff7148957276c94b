//! maxmemory: noeviction refuses writes with Valkey's exact OOM error; eviction policies make
//! room instead.

use std::time::Duration;

use hotkv_test_support::{Frame, RawClient};

use crate::{info, info_num, ok, server_with, set_all};

const OOM: &str = "OOM command not allowed when used memory > 'maxmemory'.";
/// 64 KiB values reach a 32 MiB limit in ~500 writes, quick even on a debug build.
const VALUE_LEN: usize = 64 * 1024;

/// Writes `key{i}` for i in `range` until one fails; returns the first error reply.
fn fill_until_error(c: &mut RawClient, prefix: &str, range: std::ops::Range<usize>, ttl: bool) -> Option<Frame> {
    let value = "v".repeat(VALUE_LEN);
    for i in range {
        let key = format!("{prefix}{i}");
        let mut args = vec!["SET", key.as_str(), value.as_str()];
        if ttl {
            args.extend(["EX", "10000"]);
        }
        let reply = c.cmd(&args);
        if reply.is_error() {
            return Some(reply);
        }
        assert_eq!(reply, Frame::ok());
    }
    None
}

#[test]
fn noeviction_refuses_writes_with_the_oom_error() {
    let srv = server_with(&[("maxmemory", "32mb"), ("maxmemory-policy", "noeviction")]);
    let mut c = srv.client();
    // 2000 x 64 KiB = 125 MiB: far past the limit, so the refusal must come.
    let err = fill_until_error(&mut c, "k", 0..2000, false).expect("writes past maxmemory were all accepted");
    assert_eq!(err.error_text().as_deref(), Some(OOM));
    // Reads, deletes and commands that do not grow memory still work.
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    assert!(matches!(c.cmd(&["GET", "k0"]), Frame::Bulk(_) | Frame::NullBulk));
    assert!(c.cmd(&["DEL", "k0", "k1"]).int() >= 0);
    let err = c.cmd(&["SET", "another", &"v".repeat(VALUE_LEN)]);
    if err.is_error() {
        assert_eq!(err.error_text().as_deref(), Some(OOM));
    }
}

#[test]
fn allkeys_lru_evicts_instead_of_refusing() {
    let srv = server_with(&[("maxmemory", "32mb"), ("maxmemory-policy", "allkeys-lru")]);
    let mut c = srv.client();
    let n = 1000;
    if let Some(err) = fill_until_error(&mut c, "k", 0..n, false) {
        panic!("allkeys-lru must evict, not refuse: {err}");
    }
    let kept = c.cmd(&["DBSIZE"]).int();
    assert!(kept > 0 && kept < n as i64, "DBSIZE {kept} after writing {n} x 64 KiB into 32 MiB");
    let stats = info(&mut c, "stats");
    assert!(info_num(&stats, "evicted_keys") >= (n as i64 - kept), "{stats}");
}

#[test]
fn volatile_lru_evicts_only_keys_with_a_ttl() {
    let srv = server_with(&[("maxmemory", "32mb"), ("maxmemory-policy", "volatile-lru")]);
    let mut c = srv.client();
    let persistent = 100; // 6.25 MiB that must never be evicted
    assert!(fill_until_error(&mut c, "keep", 0..persistent, false).is_none());
    if let Some(err) = fill_until_error(&mut c, "tmp", 0..1000, true) {
        panic!("volatile-lru had volatile keys to evict but refused: {err}");
    }
    let mut keep: Vec<String> = (0..persistent).map(|i| format!("keep{i}")).collect();
    keep.insert(0, "EXISTS".into());
    assert_eq!(c.cmd(&keep), Frame::Integer(persistent as i64), "a key without TTL was evicted");
    assert!(c.cmd(&["DBSIZE"]).int() < (persistent + 1000) as i64, "nothing was evicted");
}

/// Valkey's "propagation with eviction in MULTI": a CONFIG SET maxmemory inside EXEC. The
/// transaction holds its keys' slot locks, so evicting before the CONFIG SET's reply would
/// wait on them from the same thread: EXEC hung and held x's slot for ever. The eviction
/// now runs once EXEC is over, with no further command, as Valkey's eviction timer does.
#[test]
fn lowering_maxmemory_inside_exec_evicts_after_it() {
    let srv = server_with(&[("maxmemory-policy", "allkeys-lru")]);
    let mut c = srv.client();
    c.set_timeout(Duration::from_secs(10));
    ok(&mut c, &["MULTI"]);
    for cmd in [&["INCR", "x"][..], &["CONFIG", "SET", "maxmemory", "1"], &["INCR", "x"]] {
        assert_eq!(c.cmd(cmd), Frame::Simple("QUEUED".into()));
    }
    assert_eq!(c.cmd(&["EXEC"]).items(), [Frame::Integer(1), Frame::Simple("OK".into()), Frame::Integer(2)]);
    let mut other = srv.client();
    assert!(
        hotkv_test_support::wait_for(|| other.cmd(&["DBSIZE"]) == Frame::Integer(0), Duration::from_secs(10)),
        "x was never evicted"
    );
    assert_eq!(info_num(&info(&mut other, "stats"), "evicted_keys"), 1);
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
}

#[test]
fn lowering_maxmemory_below_usage_evicts_before_the_reply() {
    let srv = server_with(&[("maxmemory-policy", "allkeys-lru"), ("notify-keyspace-events", "Ee")]);
    let mut c = srv.client();
    let mut sub = srv.client();
    assert_eq!(sub.cmd(&["PSUBSCRIBE", "__keyevent@*__:evicted"]).items()[2], Frame::Integer(1));
    set_all(&mut c, &[("a", "1"), ("b", "2"), ("c", "3")]);
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    // No write came after the CONFIG SET: the keys went before its reply (Valkey's
    // updateMaxmemory starts the eviction at once).
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
    let mut evicted: Vec<String> = (0..3)
        .map(|_| {
            let msg = sub.read_frame();
            let items = msg.items();
            assert_eq!(
                items[..3],
                [Frame::bulk("pmessage"), Frame::bulk("__keyevent@*__:evicted"), Frame::bulk("__keyevent@0__:evicted")],
                "{msg}"
            );
            items[3].text()
        })
        .collect();
    evicted.sort();
    assert_eq!(evicted, ["a", "b", "c"]);
    assert_eq!(info_num(&info(&mut c, "stats"), "evicted_keys"), 3);
    assert!(srv.wait_for_log("is smaller than the current memory usage", Duration::from_secs(10)), "{}", srv.log());
    // Nothing is left to evict: writes are refused until the limit is lifted.
    assert_eq!(c.cmd(&["SET", "d", "4"]).error_text().as_deref(), Some(OOM));
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
    ok(&mut c, &["SET", "d", "4"]);
}
