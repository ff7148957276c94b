//! DEBUG SLEEP stops the whole server, as Valkey's sleep in its one event loop: a client that
//! sends a command while another sleeps hears back only after the sleeper did, inside MULTI
//! too. (The replication side is in `replication.rs`.)
//!
//! Order, not time, decides: the server logs (at verbose level) when a sleep has stopped it,
//! the other client's command is sent after that, and when its reply arrives the sleeper's
//! must already be there.

use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, TestServer};

use crate::{ok, server_with};

const WAIT: Duration = Duration::from_secs(20);

/// A server that allows DEBUG and logs when a sleep stops it.
pub(crate) fn sleepy_server(extra: &[(&str, &str)]) -> TestServer {
    let mut overrides = vec![("enable-debug-command", "yes"), ("loglevel", "verbose")];
    overrides.extend_from_slice(extra);
    server_with(&overrides)
}

/// Waits until `srv` logged its `n`-th stop by DEBUG SLEEP.
#[track_caller]
pub(crate) fn wait_stopped(srv: &TestServer, n: usize) {
    let stopped =
        hotkv_test_support::wait_for(|| srv.log().matches("DEBUG SLEEP: the server stops").count() >= n, WAIT);
    assert!(stopped, "the server never said it stopped:\n{}", srv.log());
}

/// Whether a reply is waiting on `c`'s socket, unread.
pub(crate) fn reply_waiting(c: &RawClient) -> bool {
    let s = c.writer_clone().expect("clone the socket");
    s.set_nonblocking(true).expect("nonblocking");
    let mut b = [0u8; 1];
    let waiting = matches!(s.peek(&mut b), Ok(n) if n > 0);
    s.set_nonblocking(false).expect("blocking again");
    waiting
}

#[test]
fn no_client_hears_back_before_the_sleeper() {
    let srv = sleepy_server(&[]);
    let mut sleeper = srv.client();
    let mut other = srv.client();
    ok(&mut other, &["SET", "k", "v"]);
    sleeper.send(&["DEBUG", "SLEEP", "1"]);
    wait_stopped(&srv, 1);
    other.send(&["GET", "k"]);
    assert_eq!(other.read_frame(), Frame::bulk("v"));
    assert!(reply_waiting(&sleeper), "GET was answered before the sleeper's OK");
    assert_eq!(sleeper.read_frame(), Frame::ok());
    // A client that connects during a sleep waits too.
    sleeper.send(&["DEBUG", "SLEEP", "1"]);
    wait_stopped(&srv, 2);
    let mut late = srv.client();
    late.send(&["PING"]);
    assert_eq!(late.read_frame(), Frame::simple("PONG"));
    assert!(reply_waiting(&sleeper), "PING was answered before the sleeper's OK");
    assert_eq!(sleeper.read_frame(), Frame::ok());
}

#[test]
fn a_sleep_inside_multi_stops_the_server_too() {
    let srv = sleepy_server(&[]);
    let mut sleeper = srv.client();
    let mut other = srv.client();
    ok(&mut sleeper, &["MULTI"]);
    assert_eq!(sleeper.cmd(&["DEBUG", "SLEEP", "1"]), Frame::simple("QUEUED"));
    assert_eq!(sleeper.cmd(&["SET", "k", "v"]), Frame::simple("QUEUED"));
    sleeper.send(&["EXEC"]);
    wait_stopped(&srv, 1);
    other.send(&["GET", "k"]);
    // The transaction ran whole before anyone else: its write is seen.
    assert_eq!(other.read_frame(), Frame::bulk("v"));
    assert!(reply_waiting(&sleeper), "GET was answered before EXEC");
    assert_eq!(sleeper.read_frame().items(), &[Frame::ok(), Frame::ok()]);
}

#[test]
fn debug_sleep_0_does_not_stop_the_server() {
    let srv = sleepy_server(&[]);
    let mut c = srv.client();
    ok(&mut c, &["DEBUG", "SLEEP", "0"]);
    ok(&mut c, &["DEBUG", "SLEEP", "not-a-number"]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    assert!(!srv.log().contains("DEBUG SLEEP: the server stops"), "{}", srv.log());
}
