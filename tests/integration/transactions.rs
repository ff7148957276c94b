//! MULTI / EXEC / DISCARD / WATCH: atomic with respect to other clients, Valkey's errors.

use std::time::Duration;

use hotkv_test_support::{Frame, wait_for};

use crate::{assert_err, ok, server};

fn queued(c: &mut hotkv_test_support::RawClient, args: &[&str]) {
    assert_eq!(c.cmd(args), Frame::simple("QUEUED"), "{args:?}");
}

#[test]
fn exec_runs_the_queue_and_returns_every_reply() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["SET", "a", "1"]);
    queued(&mut c, &["INCR", "a"]);
    queued(&mut c, &["INCR", "nonint-later"]);
    queued(&mut c, &["GET", "a"]);
    assert_eq!(
        c.cmd(&["EXEC"]),
        Frame::Array(vec![Frame::ok(), Frame::Integer(2), Frame::Integer(1), Frame::bulk("2")])
    );
}

#[test]
fn runtime_errors_do_not_stop_the_transaction() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "s", "text"]);
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["INCR", "s"]);
    queued(&mut c, &["SET", "after", "yes"]);
    let Frame::Array(replies) = c.cmd(&["EXEC"]) else { panic!("EXEC reply is not an array") };
    assert!(matches!(&replies[0], Frame::Error(e) if e.starts_with("ERR value is not an integer")), "{replies:?}");
    assert_eq!(replies[1], Frame::ok());
    assert_eq!(c.cmd(&["GET", "after"]), Frame::bulk("yes"));
}

#[test]
fn queueing_errors_abort_with_execabort() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["SET", "x", "1"]);
    assert_err(&c.cmd(&["NOSUCHCOMMAND"]), "ERR unknown command 'NOSUCHCOMMAND', with args beginning with: ");
    assert_err(&c.cmd(&["GET"]), "ERR wrong number of arguments for 'get' command");
    assert_err(&c.cmd(&["EXEC"]), "EXECABORT Transaction discarded because of previous errors.");
    assert_eq!(c.cmd(&["EXISTS", "x"]), Frame::Integer(0), "nothing ran");
}

#[test]
fn nesting_watch_and_stray_exec_discard_are_refused() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["EXEC"]), "ERR EXEC without MULTI");
    assert_err(&c.cmd(&["DISCARD"]), "ERR DISCARD without MULTI");
    ok(&mut c, &["MULTI"]);
    assert_err(&c.cmd(&["MULTI"]), "ERR Command not allowed inside a transaction");
    assert_err(&c.cmd(&["WATCH", "k"]), "ERR Command not allowed inside a transaction");
    ok(&mut c, &["DISCARD"]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"), "out of the transaction again");
}

#[test]
fn watch_aborts_exec_when_another_client_changes_the_key() {
    let srv = server();
    let mut c = srv.client();
    let mut other = srv.client();
    ok(&mut c, &["SET", "w", "1"]);
    ok(&mut c, &["WATCH", "w"]);
    ok(&mut other, &["SET", "w", "2"]);
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["SET", "w", "3"]);
    assert_eq!(c.cmd(&["EXEC"]), Frame::NullArray);
    assert_eq!(c.cmd(&["GET", "w"]), Frame::bulk("2"));
    // The watch ends with EXEC: the next transaction runs.
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["SET", "w", "4"]);
    assert_eq!(c.cmd(&["EXEC"]), Frame::Array(vec![Frame::ok()]));
}

#[test]
fn watch_sees_deletion_flush_and_expiry() {
    let srv = server();
    let mut c = srv.client();
    let mut other = srv.client();
    for (setup, change) in [
        (vec!["SET", "k", "v"], vec!["DEL", "k"]),
        (vec!["SET", "k", "v"], vec!["FLUSHDB"]),
        (vec!["SET", "k", "v"], vec!["SWAPDB", "0", "1"]),
    ] {
        ok(&mut c, &["FLUSHALL"]);
        assert!(!c.cmd(&setup).is_error());
        ok(&mut c, &["WATCH", "k"]);
        assert!(!other.cmd(&change).is_error(), "{change:?}");
        ok(&mut c, &["MULTI"]);
        queued(&mut c, &["PING"]);
        assert_eq!(c.cmd(&["EXEC"]), Frame::NullArray, "{change:?} must abort the transaction");
    }
    // A watched key that expires before EXEC aborts it, even if nobody touched it.
    ok(&mut c, &["SET", "t", "v", "PX", "100"]);
    ok(&mut c, &["WATCH", "t"]);
    assert!(wait_for(|| other.cmd(&["PTTL", "t"]) == Frame::Integer(-2), Duration::from_secs(5)));
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["PING"]);
    assert_eq!(c.cmd(&["EXEC"]), Frame::NullArray);
}

#[test]
fn unwatch_and_a_key_already_expired_at_watch_time_do_not_abort() {
    let srv = server();
    let mut c = srv.client();
    let mut other = srv.client();
    ok(&mut c, &["SET", "u", "1"]);
    ok(&mut c, &["WATCH", "u"]);
    ok(&mut c, &["UNWATCH"]);
    ok(&mut other, &["SET", "u", "2"]);
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["GET", "u"]);
    assert_eq!(c.cmd(&["EXEC"]), Frame::Array(vec![Frame::bulk("2")]));
}

/// Runs MULTI PING EXEC and returns EXEC's reply.
fn exec_ping(c: &mut hotkv_test_support::RawClient) -> Frame {
    ok(c, &["MULTI"]);
    queued(c, &["PING"]);
    c.cmd(&["EXEC"])
}

/// Valkey's multi suite on stale keys (expired, not yet deleted: active expiry is off):
/// deleting one, flushing it or swapping it away changes nothing logically; swapping a
/// missing key for a stale one, or a stale one for another, neither. A live key replaced
/// by a stale one, or a stale key replaced by a live one, does abort.
#[test]
fn stale_watched_keys_changed_by_expiry_flush_or_swap() {
    let srv = crate::server_with(&[("enable-debug-command", "yes")]);
    let mut c = srv.client();
    let stale = |c: &mut hotkv_test_support::RawClient, db: &str, key: &str| {
        ok(c, &["SELECT", db]);
        ok(c, &["SET", key, "v", "PX", "1"]);
        std::thread::sleep(Duration::from_millis(5));
    };
    let pong = Frame::Array(vec![Frame::simple("PONG")]);
    ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    // Deleted by lazy expiry (EXISTS) after WATCH.
    ok(&mut c, &["FLUSHALL"]);
    stale(&mut c, "0", "x");
    ok(&mut c, &["WATCH", "x"]);
    assert_eq!(c.cmd(&["EXISTS", "x"]), Frame::Integer(0));
    assert_eq!(exec_ping(&mut c), pong, "expiring a stale key");
    // Flushed.
    stale(&mut c, "0", "x");
    ok(&mut c, &["WATCH", "x"]);
    ok(&mut c, &["FLUSHDB"]);
    assert_eq!(exec_ping(&mut c), pong, "flushing a stale key");
    // Swapped for nothing, nothing for a stale key, a stale key for another.
    for (db0, db1) in [(false, true), (true, false), (true, true)] {
        ok(&mut c, &["FLUSHALL"]);
        if db0 {
            stale(&mut c, "0", "x");
        }
        if db1 {
            stale(&mut c, "1", "x");
        }
        ok(&mut c, &["SELECT", "1"]);
        ok(&mut c, &["WATCH", "x"]);
        ok(&mut c, &["SWAPDB", "0", "1"]);
        assert_eq!(exec_ping(&mut c), pong, "SWAPDB with a stale x in db0: {db0}, in db1: {db1}");
    }
    // A stale key swapped for a live one, and a live one for a stale one, are changes.
    for live_in_watched_db in [false, true] {
        ok(&mut c, &["FLUSHALL"]);
        let (stale_db, live_db) = if live_in_watched_db { ("0", "1") } else { ("1", "0") };
        stale(&mut c, stale_db, "x");
        ok(&mut c, &["SELECT", live_db]);
        ok(&mut c, &["SET", "x", "live"]);
        ok(&mut c, &["SELECT", "1"]);
        ok(&mut c, &["WATCH", "x"]);
        ok(&mut c, &["SWAPDB", "0", "1"]);
        assert_eq!(exec_ping(&mut c), Frame::NullArray, "live x in the watched db: {live_in_watched_db}");
    }
    // A stale watched key that is then written again is a change.
    ok(&mut c, &["FLUSHALL"]);
    stale(&mut c, "0", "x");
    ok(&mut c, &["WATCH", "x"]);
    assert_eq!(c.cmd(&["EXISTS", "x"]), Frame::Integer(0));
    ok(&mut srv.client(), &["SET", "x", "again"]);
    assert_eq!(exec_ping(&mut c), Frame::NullArray, "a write after the stale key went");
    ok(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "1"]);
}

/// Valkey's execCommandAbort: EXEC refused for memory discards the transaction and says so.
#[test]
fn exec_over_maxmemory_with_a_write_queued_is_execabort_oom() {
    let srv = server();
    let mut c = srv.client();
    let mut admin = srv.client();
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["SET", "x", "1"]);
    queued(&mut c, &["GET", "x"]);
    ok(&mut admin, &["CONFIG", "SET", "maxmemory", "1"]);
    assert_err(
        &c.cmd(&["EXEC"]),
        "EXECABORT Transaction discarded because of: OOM command not allowed when used memory > 'maxmemory'.",
    );
    ok(&mut admin, &["CONFIG", "SET", "maxmemory", "0"]);
    assert_err(&c.cmd(&["EXEC"]), "ERR EXEC without MULTI");
    assert_eq!(c.cmd(&["GET", "x"]), Frame::NullBulk, "nothing ran");
}

#[test]
fn exec_is_atomic_for_concurrent_clients() {
    // While transactions move 1 from a to b, a reader doing MGET a b must always see a sum
    // of 1000: it can never observe half of a transaction.
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MSET", "{t}a", "1000", "{t}b", "0"]);
    let port = srv.port();
    let writer = std::thread::spawn(move || {
        let mut w = hotkv_test_support::RawClient::connect(port);
        for _ in 0..500 {
            ok(&mut w, &["MULTI"]);
            queued(&mut w, &["DECR", "{t}a"]);
            queued(&mut w, &["INCR", "{t}b"]);
            assert!(matches!(w.cmd(&["EXEC"]), Frame::Array(_)));
        }
    });
    let mut r = srv.client();
    while !writer.is_finished() {
        let Frame::Array(v) = r.cmd(&["MGET", "{t}a", "{t}b"]) else { panic!("MGET") };
        let n = |f: &Frame| f.text().parse::<i64>().unwrap();
        assert_eq!(n(&v[0]) + n(&v[1]), 1000);
    }
    writer.join().unwrap();
    assert_eq!(c.cmd(&["GET", "{t}b"]), Frame::bulk("500"));
}

#[test]
fn blocking_free_commands_and_selects_inside_exec() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MULTI"]);
    queued(&mut c, &["SELECT", "3"]);
    queued(&mut c, &["SET", "in3", "v"]);
    queued(&mut c, &["DBSIZE"]);
    queued(&mut c, &["KEYS", "*"]);
    assert_eq!(
        c.cmd(&["EXEC"]),
        Frame::Array(vec![Frame::ok(), Frame::ok(), Frame::Integer(1), Frame::Array(vec![Frame::bulk("in3")])])
    );
    assert_eq!(c.cmd(&["GET", "in3"]), Frame::bulk("v"), "SELECT inside EXEC sticks");
}
