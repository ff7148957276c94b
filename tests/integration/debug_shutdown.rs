//! DEBUG SLEEP, SHUTDOWN and SIGTERM: the server stops cleanly, with exit code 0.

use std::time::{Duration, Instant};

use hotkv_test_support::{Frame, SIGTERM};

use crate::{assert_err, ok, server, server_with};

/// DEBUG is refused unless enabled, as in Valkey (its test suite enables it the same way).
fn debug_server() -> hotkv_test_support::TestServer {
    server_with(&[("enable-debug-command", "yes")])
}

const EXIT_WAIT: Duration = Duration::from_secs(10);

#[test]
fn debug_sleep_0_returns_ok_at_once() {
    let srv = debug_server();
    let mut c = srv.client();
    let start = Instant::now();
    ok(&mut c, &["DEBUG", "SLEEP", "0"]);
    assert!(start.elapsed() < Duration::from_secs(2));
}

#[test]
fn debug_sleep_takes_the_given_time() {
    let srv = debug_server();
    let mut c = srv.client();
    let start = Instant::now();
    ok(&mut c, &["DEBUG", "SLEEP", "0.2"]);
    assert!(start.elapsed() >= Duration::from_millis(200), "DEBUG SLEEP 0.2 took {:?}", start.elapsed());
}

#[test]
fn shutdown_closes_the_connection_and_exits_0() {
    let mut srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    // A successful SHUTDOWN sends no reply: the connection just closes.
    match c.try_cmd(&["SHUTDOWN"]) {
        Err(_) => {}
        Ok(reply) => panic!("SHUTDOWN replied {reply} instead of exiting"),
    }
    let status = srv.wait_exit(EXIT_WAIT).expect("the server is still running 10 s after SHUTDOWN");
    assert_eq!(status.code(), Some(0), "exit status {status}");
    assert!(srv.log().contains("ready to exit, bye bye"), "no farewell in the log:\n{}", srv.log());
}

#[test]
fn shutdown_nosave_also_exits_and_bad_arguments_do_not() {
    let mut srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["SHUTDOWN", "BOGUS"]), "ERR syntax error");
    assert_err(&c.cmd(&["SHUTDOWN", "ABORT"]), "ERR No shutdown in progress.");
    assert!(srv.is_running(), "a refused SHUTDOWN stopped the server");
    assert!(c.try_cmd(&["SHUTDOWN", "NOSAVE"]).is_err(), "SHUTDOWN NOSAVE replied instead of exiting");
    let status = srv.wait_exit(EXIT_WAIT).expect("still running after SHUTDOWN NOSAVE");
    assert_eq!(status.code(), Some(0));
}

#[test]
fn sigterm_shuts_down_cleanly() {
    let mut srv = server();
    assert_eq!(srv.cmd(&["PING"]), Frame::simple("PONG"));
    srv.signal(SIGTERM);
    let status = srv.wait_exit(EXIT_WAIT).expect("still running 10 s after SIGTERM");
    assert_eq!(status.code(), Some(0), "exit status {status}");
    assert!(srv.log().contains("Received SIGTERM scheduling shutdown"), "log:\n{}", srv.log());
}
