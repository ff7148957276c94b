//! The harness itself, against the real binary: isolation, cleanup, the retry on a taken port,
//! and startup failures that report the server's output.

use std::net::TcpListener;
use std::time::Duration;

use hotkv_test_support::{Frame, wait_for};

use crate::{builder, server};

#[test]
fn each_server_gets_its_own_ports_and_dir() {
    let a = server();
    let b = server();
    assert_ne!(a.port(), b.port());
    assert_ne!(a.dir(), b.dir());
    assert_eq!(a.bus_port(), a.port() + 10000);
    assert!(a.dir().starts_with(std::env::temp_dir()));
    assert!(a.dir().join("hotkv.conf").is_file());
    assert_eq!(a.cmd(&["PING"]), Frame::simple("PONG"));
    assert_eq!(b.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn dropping_a_server_stops_it_and_removes_its_dir() {
    let srv = server();
    let (pid, dir, port) = (srv.pid(), srv.dir().to_path_buf(), srv.port());
    drop(srv);
    assert!(!std::path::Path::new(&format!("/proc/{pid}")).exists(), "server pid {pid} survived its guard");
    assert!(!dir.exists(), "{} was not removed", dir.display());
    assert!(hotkv_test_support::RawClient::try_connect(port).is_err(), "port {port} still accepts connections");
}

#[test]
fn a_taken_port_is_retried_on_a_free_one() {
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind a port to hold");
    let taken = holder.local_addr().unwrap().port();
    let srv = builder().port_hint(taken).spawn();
    assert_ne!(srv.port(), taken);
    assert_eq!(srv.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
#[should_panic(expected = "Bad directive or wrong number of arguments")]
fn a_server_that_cannot_start_fails_the_test_with_its_output() {
    builder().config("no-such-directive", "1").spawn();
}

#[test]
fn the_server_log_is_readable_while_it_runs() {
    let srv = server();
    assert!(srv.wait_for_log("Ready to accept connections", Duration::from_secs(1)), "{}", srv.log());
    assert!(wait_for(|| srv.open_connections() == 0, Duration::from_secs(5)), "startup probes still connected");
    let _c = srv.client();
    assert!(wait_for(|| srv.open_connections() == 1, Duration::from_secs(5)));
}
