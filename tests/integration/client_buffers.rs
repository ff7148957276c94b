//! Client query and output buffers as Valkey 8.0 manages them, against the real binary: query
//! buffers held only while needed and resized by the clients cron (unit/querybuf), output
//! limits enforced while a reply is built, per pub/sub message and with no traffic at all
//! (unit/obuf-limits).

use std::time::{Duration, Instant};

use hotkv_test_support::{RawClient, TestServer, wait_for};

use crate::{assert_err, info, info_num, ok, server_with};

const WAIT: Duration = Duration::from_secs(10);

/// A server whose clients cron visits every client every 10 ms, as the Valkey tests set it.
fn fast_cron() -> TestServer {
    server_with(&[("hz", "100")])
}

/// A field of client `id`'s CLIENT LIST line; None once the client is gone.
fn field(ctl: &mut RawClient, id: i64, name: &str) -> Option<usize> {
    let line = ctl.cmd(&["CLIENT", "LIST", "ID", &id.to_string()]).text();
    let prefix = format!("{name}=");
    let value = line.split(' ').find_map(|f| f.strip_prefix(prefix.as_str()))?;
    Some(value.trim().parse().unwrap_or_else(|_| panic!("{line}")))
}

/// `qbuf` plus `qbuf-free`: the query buffer's size.
fn query_buffer(ctl: &mut RawClient, id: i64) -> usize {
    field(ctl, id, "qbuf").unwrap() + field(ctl, id, "qbuf-free").unwrap()
}

fn id_of(c: &mut RawClient) -> i64 {
    c.cmd(&["CLIENT", "ID"]).int()
}

#[test]
fn a_client_keeps_a_query_buffer_only_while_it_holds_part_of_a_command() {
    let s = fast_cron();
    let mut ctl = s.client();
    let mut c = s.client();
    let id = id_of(&mut c);
    assert_eq!(query_buffer(&mut ctl, id), 0, "whole commands leave no buffer behind");
    c.send_raw(b"*3\r\n$3\r\nset\r\n$2\r\na");
    assert!(wait_for(|| query_buffer(&mut ctl, id) > 0, WAIT));
    c.send_raw(b"a\r\n$1\r\nb\r\n");
    assert_eq!(c.read_frame().text(), "OK");
    let kept = query_buffer(&mut ctl, id);
    assert!((16 * 1024..=32 * 1024).contains(&kept), "one read's worth, kept after the command: {kept}");
    // Not under the 2 seconds of idleness, freed once past them.
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(query_buffer(&mut ctl, id), kept);
    assert!(wait_for(|| query_buffer(&mut ctl, id) == 0, WAIT));
    assert!(field(&mut ctl, id, "idle").unwrap() >= 3);
    // Freed, not broken: the client is served on.
    assert_eq!(c.cmd(&["GET", "aa"]).text(), "b");
}

#[test]
fn a_big_argument_is_reserved_whole_and_trimmed_once_its_client_is_idle() {
    let s = fast_cron();
    let mut ctl = s.client();
    let mut c = s.client();
    let id = id_of(&mut c);
    c.send_raw(b"*3\r\n$3\r\nset\r\n$1\r\na\r\n$1000000\r\nx");
    assert!(wait_for(|| field(&mut ctl, id, "qbuf") == Some(1), WAIT));
    assert!(query_buffer(&mut ctl, id) >= 1_000_000, "room for the whole argument from its first byte");
    assert!(wait_for(|| query_buffer(&mut ctl, id) < 1_000_000, WAIT));
    assert!(field(&mut ctl, id, "idle").unwrap() >= 3, "trimmed only after 2 seconds of idleness");
    assert_eq!(field(&mut ctl, id, "qbuf"), Some(1), "what it holds stays");
    // The rest of the argument still arrives into a buffer that grows for it.
    c.send_raw(&vec![b'x'; 999_999]);
    c.send_raw(b"\r\n");
    assert_eq!(c.read_frame().text(), "OK");
    assert_eq!(c.cmd(&["STRLEN", "a"]).int(), 1_000_000);
}

#[test]
fn a_big_query_buffer_shrinks_to_its_recent_peak_while_its_client_is_busy() {
    let s = fast_cron();
    let mut ctl = s.client();
    let mut c = s.client();
    let id = id_of(&mut c);
    ok(&mut c, &["SET", "x", &"A".repeat(400_000)]);
    let big = query_buffer(&mut ctl, id);
    assert!(big > 400_000, "kept after the big argument: {big}");
    let small = "A".repeat(100);
    let deadline = Instant::now() + WAIT;
    let shrunk = loop {
        ok(&mut c, &["SET", "x", &small]);
        let size = query_buffer(&mut ctl, id);
        if (1..big).contains(&size) || Instant::now() > deadline {
            break size;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!((1..big).contains(&shrunk), "still {shrunk} of {big} bytes");
    assert!(field(&mut ctl, id, "idle").unwrap() < 2, "shrunk while busy, not for idleness");
}

#[test]
fn a_subscriber_over_the_soft_limit_is_closed_even_with_no_traffic() {
    let s = server_with(&[("hz", "100"), ("client-output-buffer-limit", "pubsub 0 100000 1")]);
    let mut ctl = s.client();
    let mut sub = s.client();
    let id = id_of(&mut sub);
    sub.send(&["SUBSCRIBE", "foo"]);
    assert_eq!(sub.read_frame().items()[0].text(), "subscribe");
    // The subscriber reads nothing: its pending output grows past the soft limit.
    let payload = "x".repeat(1000);
    while field(&mut ctl, id, "omem").unwrap() < 200_000 {
        ctl.cmd(&["PUBLISH", "foo", &payload]);
    }
    let over = Instant::now();
    // No more traffic: only the cron can find the limit expired.
    assert!(field(&mut ctl, id, "omem").is_some(), "closed before its soft limit's second");
    assert!(wait_for(|| field(&mut ctl, id, "omem").is_none(), WAIT), "never closed");
    assert!(over.elapsed() >= Duration::from_millis(900), "closed after {:?}", over.elapsed());
    let stats = info(&mut ctl, "stats");
    assert_eq!(info_num(&stats, "client_output_buffer_limit_disconnections"), 1, "{stats}");
}

#[test]
fn a_subscriber_over_the_hard_limit_is_closed_as_messages_are_queued() {
    let s = server_with(&[("client-output-buffer-limit", "pubsub 100000 0 0")]);
    let mut ctl = s.client();
    let mut sub = s.client();
    let id = id_of(&mut sub);
    sub.send(&["SUBSCRIBE", "foo"]);
    sub.read_frame();
    let mut omem = 0;
    while let Some(now) = field(&mut ctl, id, "omem") {
        omem = now;
        assert!(omem < 200_000, "omem={omem} and still connected");
        ctl.cmd(&["PUBLISH", "foo", "bar"]);
    }
    assert!(omem >= 70_000, "closed early, at omem={omem}");
}

#[test]
fn keys_is_cut_off_once_its_reply_passes_the_hard_limit() {
    let s = server_with(&[("client-output-buffer-limit", "normal 100000 0 0")]);
    let mut c = s.client();
    let prefix = "k".repeat(100);
    for i in 0..1000 {
        c.send(&["SET", &format!("{prefix}{i}"), "v"]);
    }
    for _ in 0..1000 {
        c.read_frame();
    }
    // About 111 KB of keys: the first 16 KiB would fit Valkey's static buffer, but KEYS
    // sends its length last, so all of it counts.
    c.send(&["KEYS", "*"]);
    assert!(c.closed_within(WAIT), "the whole reply was sent");
    let mut admin = s.client();
    assert_eq!(info_num(&info(&mut admin, "stats"), "client_output_buffer_limit_disconnections"), 1);
    // Without a limit the same KEYS is answered in full.
    ok(&mut admin, &["CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0"]);
    assert_eq!(admin.cmd(&["KEYS", "*"]).items().len(), 1000);
}

#[test]
fn a_huge_random_count_stops_at_the_hard_limit_and_is_refused_without_one() {
    let s = server_with(&[("client-output-buffer-limit", "normal 1000000 0 0")]);
    let mut c = s.client();
    assert_eq!(c.cmd(&["HSET", "h", "a", "b"]).int(), 1);
    assert_eq!(c.cmd(&["SADD", "s", "a"]).int(), 1);
    let started = Instant::now();
    c.send(&["HRANDFIELD", "h", "-999999999"]);
    assert!(c.closed_within(WAIT), "answered in full");
    let mut c = s.client();
    c.send(&["SRANDMEMBER", "s", "-999999999"]);
    assert!(c.closed_within(WAIT), "answered in full");
    assert!(started.elapsed() < WAIT, "both stopped early: {:?}", started.elapsed());
    let mut c = s.client();
    ok(&mut c, &["CONFIG", "SET", "client-output-buffer-limit", "normal 0 0 0"]);
    assert_err(
        &c.cmd(&["HRANDFIELD", "h", "-999999999"]),
        "ERR value is out of range, a negative count may ask for at most 16777216 elements",
    );
}

#[test]
fn a_client_within_its_limits_is_answered_in_full() {
    let s = server_with(&[("client-output-buffer-limit", "normal 100000 0 0")]);
    let mut c = s.client();
    ok(&mut c, &["SET", "v", &"x".repeat(60_000)]);
    // 60 KB, then 60 KB more in the same batch: each reply alone fits, the batch does not.
    assert_eq!(c.cmd(&["GET", "v"]).text().len(), 60_000);
    c.send_raw(b"GET v\r\nGET v\r\n");
    assert!(c.closed_within(WAIT), "120 KB pending passed the 100000 bytes");
}
