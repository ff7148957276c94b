//! Inline commands (what `telnet` and `nc` users type): plain words, quoting and escapes as
//! Valkey's `sdssplitargs` reads them, blank lines, and the inline error cases.

use std::time::Duration;

use hotkv_test_support::Frame;

use crate::{assert_err, server};

#[test]
fn inline_ping_replies_pong() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"PING\r\n");
    assert_eq!(c.read_frame(), Frame::simple("PONG"));
    c.send_raw(b"ping hello\r\n");
    assert_eq!(c.read_frame(), Frame::bulk("hello"));
}

#[test]
fn a_bare_newline_ends_an_inline_command() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"PING\n");
    assert_eq!(c.read_frame(), Frame::simple("PONG"));
}

#[test]
fn inline_arguments_may_be_quoted_and_escaped() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"SET k1 \"hello world\"\r\n");
    assert_eq!(c.read_frame(), Frame::ok());
    c.send_raw(b"SET k2 \"a\\x41\\tb\\n\"\r\n");
    assert_eq!(c.read_frame(), Frame::ok());
    c.send_raw(b"SET k3 'it\\'s'\r\n");
    assert_eq!(c.read_frame(), Frame::ok());
    c.send_raw(b"SET k4 \"\"\r\n");
    assert_eq!(c.read_frame(), Frame::ok());
    assert_eq!(c.cmd(&["GET", "k1"]), Frame::bulk("hello world"));
    assert_eq!(c.cmd(&["GET", "k2"]), Frame::bulk("aA\tb\n"));
    assert_eq!(c.cmd(&["GET", "k3"]), Frame::bulk("it's"));
    assert_eq!(c.cmd(&["GET", "k4"]), Frame::bulk(""));
}

#[test]
fn extra_spaces_between_inline_arguments_are_ignored() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"  SET   k    v  \r\n");
    assert_eq!(c.read_frame(), Frame::ok());
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("v"));
}

#[test]
fn empty_lines_are_skipped_without_a_reply() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"\r\n\r\n\nPING\r\n");
    assert_eq!(c.read_frame(), Frame::simple("PONG"));
    // Had the blank lines produced replies, this would read one of them instead.
    assert_eq!(c.cmd(&["ECHO", "next"]), Frame::bulk("next"));
}

#[test]
fn unbalanced_quotes_are_a_protocol_error_that_closes_the_connection() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(b"SET k \"unterminated\r\nPING\r\n");
    assert_err(&c.read_frame(), "ERR Protocol error: unbalanced quotes in request");
    assert!(c.closed_within(Duration::from_secs(5)), "connection still open after a protocol error");
    assert_eq!(srv.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn an_inline_request_over_64k_without_newline_is_refused() {
    let srv = server();
    let mut c = srv.client();
    c.send_raw(&vec![b'A'; 70 * 1024]);
    assert_err(&c.read_frame(), "ERR Protocol error: too big inline request");
    assert!(c.closed_within(Duration::from_secs(5)), "connection still open after a protocol error");
}
