//! Malformed and hostile input: each case must get Valkey's `-ERR Protocol error: ...` line,
//! close only the offending connection, and leave the server serving everyone else.

use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, TestServer, wait_for};

use crate::{assert_err, ok, server, server_with};

const CLOSE_WAIT: Duration = Duration::from_secs(5);

/// Sends `bytes` on a fresh connection, expects exactly `error`, then expects the server to
/// close that connection while another client is still served.
#[track_caller]
fn assert_protocol_error(srv: &TestServer, bytes: &[u8], error: &str) {
    let mut bystander = srv.client();
    let mut c = srv.client();
    // The server may close before taking all of a long input; its reply is still readable.
    let _ = c.try_send_raw(bytes);
    assert_err(&c.read_frame(), error);
    assert!(c.closed_within(CLOSE_WAIT), "the server kept the connection open after {error:?}");
    // PING answers PONG, or NOAUTH when a password is required: either way, still served.
    let reply = bystander.cmd(&["PING"]);
    assert!(
        reply == Frame::simple("PONG") || reply.error_text().is_some_and(|e| e.starts_with("NOAUTH")),
        "another client stopped being served: {reply}"
    );
}

#[test]
fn garbage_instead_of_a_bulk_header_closes_the_connection() {
    let srv = server();
    assert_protocol_error(&srv, b"*1\r\nfoo\r\n", "ERR Protocol error: expected '$', got 'f'");
    assert_protocol_error(&srv, b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\nfooz\r\n", "ERR Protocol error: expected '$', got 'f'");
}

#[test]
fn binary_garbage_in_a_multibulk_count_closes_the_connection() {
    let srv = server();
    assert_protocol_error(&srv, b"*\x01\x02\xff\r\n", "ERR Protocol error: invalid multibulk length");
    assert_protocol_error(&srv, b"*3000000000\r\n", "ERR Protocol error: invalid multibulk length");
}

#[test]
fn a_bulk_length_over_proto_max_bulk_len_is_invalid() {
    let srv = server();
    // 600 MB > the 512 MB default of proto-max-bulk-len: refused before reading any payload.
    assert_protocol_error(&srv, b"*1\r\n$600000000\r\n", "ERR Protocol error: invalid bulk length");
}

#[test]
fn negative_or_non_numeric_bulk_lengths_are_invalid() {
    let srv = server();
    assert_protocol_error(&srv, b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$-10\r\n", "ERR Protocol error: invalid bulk length");
    assert_protocol_error(
        &srv,
        b"*3\r\n$3\r\nSET\r\n$1\r\nx\r\n$blabla\r\n",
        "ERR Protocol error: invalid bulk length",
    );
}

#[test]
fn proto_max_bulk_len_from_the_config_bounds_arguments() {
    let srv = server_with(&[("proto-max-bulk-len", "1mb")]);
    assert_protocol_error(&srv, b"*2\r\n$4\r\nECHO\r\n$2000000\r\n", "ERR Protocol error: invalid bulk length");
    let mut c = srv.client();
    let fits = "x".repeat(1000);
    assert_eq!(c.cmd(&["ECHO", &fits]), Frame::bulk(&fits));
}

#[test]
fn negative_and_zero_multibulk_counts_are_ignored() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"*-10\r\n*0\r\n");
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn desync_garbage_without_newline_hits_the_header_limits() {
    let srv = server();
    let filler = vec![b'A'; 70 * 1024];
    for (start, error) in [
        (&b"\x00"[..], "ERR Protocol error: too big inline request"),
        (b"*\x00", "ERR Protocol error: too big mbulk count string"),
        (b"$\x00", "ERR Protocol error: too big inline request"),
    ] {
        let mut bytes = start.to_vec();
        bytes.extend_from_slice(&filler);
        assert_protocol_error(&srv, &bytes, error);
    }
}

#[test]
fn unauthenticated_clients_get_small_request_limits() {
    let srv = server_with(&[("requirepass", "s3cret")]);
    assert_protocol_error(&srv, b"*100\r\n", "ERR Protocol error: unauthenticated multibulk length");
    assert_protocol_error(&srv, b"*1\r\n$100000000\r\n", "ERR Protocol error: unauthenticated bulk length");
    // Once authenticated, the normal limits apply.
    let mut c = srv.client();
    ok(&mut c, &["AUTH", "s3cret"]);
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let mut args = vec!["DEL"];
    args.extend(keys.iter().map(String::as_str));
    assert_eq!(c.cmd(&args), Frame::Integer(0), "a 21-argument command after AUTH");
    let big = "y".repeat(100_000);
    ok(&mut c, &["SET", "big", &big]);
}

#[test]
fn a_half_closed_client_still_gets_its_replies() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"*1\r\n$4\r\nPING\r\n*2\r\n$4\r\nECHO\r\n$3\r\nbye\r\n");
    c.shutdown_write();
    assert_eq!(c.read_frame(), Frame::simple("PONG"));
    assert_eq!(c.read_frame(), Frame::bulk("bye"));
    assert!(c.closed_within(CLOSE_WAIT), "the server did not close after the client's EOF");
    assert!(
        wait_for(|| srv.open_connections() == 0, CLOSE_WAIT),
        "server still holds {} connections",
        srv.open_connections()
    );
}

#[test]
fn a_client_that_vanishes_mid_argument_is_cleaned_up() {
    let srv = server();
    {
        let mut c = srv.client();
        // Announce a 100 MB value, send a little of it, and disconnect.
        c.send_raw(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000000\r\n");
        c.send_raw(&[b'z'; 1000]);
    }
    assert!(
        wait_for(|| srv.open_connections() == 0, CLOSE_WAIT),
        "server still holds {} connections",
        srv.open_connections()
    );
    let mut c = srv.client();
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk, "a partial command must not run");
    ok(&mut c, &["SET", "k", "v"]);
}

#[test]
fn ten_thousand_idle_connections_leave_the_server_responsive_and_small() {
    const IDLE: usize = 10_000;
    // Our side needs an fd per connection and the server (which inherits the limit) too.
    if let Err(why) = hotkv_test_support::raise_fd_limit(IDLE as u64 + 1_000) {
        println!("skipping ten_thousand_idle_connections: {why}");
        return;
    }
    let srv = server_with(&[("maxclients", "10100")]);
    let rss_before = rss_kib(srv.pid());
    let mut idle = Vec::with_capacity(IDLE);
    for i in 0..IDLE {
        match RawClient::try_connect(srv.port()) {
            Ok(c) => idle.push(c),
            Err(e) => panic!("connection #{i} failed: {e}"),
        }
    }
    assert!(
        wait_for(|| srv.open_connections() >= IDLE, Duration::from_secs(30)),
        "server accepted only {} of {IDLE} connections",
        srv.open_connections()
    );
    let mut c = srv.client();
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    ok(&mut c, &["SET", "k", "v"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("v"));
    // A few of the idle ones still work too.
    for i in [0, IDLE / 2, IDLE - 1] {
        assert_eq!(idle[i].cmd(&["PING"]), Frame::simple("PONG"), "idle connection #{i}");
    }
    // Idle clients must hold no big buffers: allow 16 KiB each, well below a 16 KiB read
    // buffer plus a reply buffer per client.
    let rss_after = rss_kib(srv.pid());
    let per_conn = (rss_after.saturating_sub(rss_before)) * 1024 / IDLE as u64;
    assert!(per_conn < 16 * 1024, "RSS grew {rss_before} -> {rss_after} KiB: {per_conn} bytes per idle connection");
    // The same bound seen through INFO, as operators see it.
    let text = crate::info(&mut c, "memory");
    let info_rss = crate::info_num(&text, "used_memory_rss") as u64;
    assert!(
        info_rss < rss_before * 1024 + (IDLE as u64) * 16 * 1024,
        "INFO used_memory_rss {info_rss} exceeds the bound (start {rss_before} KiB + 16 KiB per connection)"
    );
    let clients = crate::info(&mut c, "clients");
    assert!(crate::info_num(&clients, "connected_clients") as usize > IDLE);
}

/// Resident set size of a process in KiB, from /proc.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read /proc/<pid>/status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/<pid>/status")
}

#[test]
fn output_buffer_limit_closes_a_client_that_would_buffer_too_much() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "big", &"a".repeat(100_000)]);
    ok(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "normal 10 0 0"]);
    // The reply (100 KB) passes the 10-byte hard limit beyond the static buffer: closed.
    let mut victim = srv.client();
    victim.send(&["GET", "big"]);
    assert!(victim.closed_within(Duration::from_secs(5)), "the client was not closed");
    let mut admin = srv.client();
    let stats = crate::info(&mut admin, "stats");
    assert_eq!(crate::info_num(&stats, "client_output_buffer_limit_disconnections"), 1, "{stats}");
    // Small replies stay within the static buffer and are not limited.
    assert_eq!(admin.cmd(&["PING"]), Frame::simple("PONG"));
}
