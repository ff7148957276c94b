//! Pub/Sub: RESP2 subscribed mode, RESP3 pushes, patterns, shard channels, keyspace events.

use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, wait_for};

use crate::{assert_err, ok, server};

fn arr(items: &[Frame]) -> Frame {
    Frame::Array(items.to_vec())
}

#[test]
fn subscribe_receives_published_messages_and_counts_receivers() {
    let srv = server();
    let mut sub = srv.client();
    assert_eq!(
        sub.cmd(&["SUBSCRIBE", "news", "sport"]),
        arr(&[Frame::bulk("subscribe"), Frame::bulk("news"), Frame::Integer(1)])
    );
    assert_eq!(sub.read_frame(), arr(&[Frame::bulk("subscribe"), Frame::bulk("sport"), Frame::Integer(2)]));
    let mut p = srv.client();
    assert_eq!(p.cmd(&["PUBLISH", "news", "hello"]), Frame::Integer(1));
    assert_eq!(p.cmd(&["PUBLISH", "nobody", "x"]), Frame::Integer(0));
    assert_eq!(sub.read_frame(), arr(&[Frame::bulk("message"), Frame::bulk("news"), Frame::bulk("hello")]));
    assert_eq!(
        p.cmd(&["PUBSUB", "NUMSUB", "news", "none"]),
        arr(&[Frame::bulk("news"), Frame::Integer(1), Frame::bulk("none"), Frame::Integer(0)])
    );
    let Frame::Array(mut chans) = p.cmd(&["PUBSUB", "CHANNELS"]) else { panic!() };
    chans.sort_by_key(|f| format!("{f:?}"));
    assert_eq!(chans, vec![Frame::bulk("news"), Frame::bulk("sport")]);
}

#[test]
fn resp2_subscribed_mode_allows_only_pubsub_commands() {
    let srv = server();
    let mut sub = srv.client();
    sub.cmd(&["SUBSCRIBE", "c"]);
    assert_err(
        &sub.cmd(&["GET", "k"]),
        "ERR Can't execute 'get': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
    );
    assert_eq!(sub.cmd(&["PING"]), arr(&[Frame::bulk("pong"), Frame::bulk("")]));
    assert_eq!(sub.cmd(&["UNSUBSCRIBE"]), arr(&[Frame::bulk("unsubscribe"), Frame::bulk("c"), Frame::Integer(0)]));
    assert_eq!(sub.cmd(&["PING"]), Frame::simple("PONG"), "back to normal once unsubscribed");
    assert_err(&sub.cmd(&["UNSUBSCRIBE"]), "NOSUB 'unsubscribe' command executed not in subscribed mode");
}

#[test]
fn resp3_subscribers_get_pushes_and_can_run_any_command() {
    let srv = server();
    let mut sub = srv.client();
    assert!(matches!(sub.cmd(&["HELLO", "3"]), Frame::Map(_)));
    assert_eq!(
        sub.cmd(&["SUBSCRIBE", "c"]),
        Frame::Push(vec![Frame::bulk("subscribe"), Frame::bulk("c"), Frame::Integer(1)])
    );
    ok(&mut sub, &["SET", "k", "v"]);
    let mut p = srv.client();
    assert_eq!(p.cmd(&["PUBLISH", "c", "m"]), Frame::Integer(1));
    assert_eq!(sub.read_frame(), Frame::Push(vec![Frame::bulk("message"), Frame::bulk("c"), Frame::bulk("m")]));
}

#[test]
fn patterns_and_shard_channels() {
    let srv = server();
    let mut sub = srv.client();
    assert_eq!(
        sub.cmd(&["PSUBSCRIBE", "user:*"]),
        arr(&[Frame::bulk("psubscribe"), Frame::bulk("user:*"), Frame::Integer(1)])
    );
    let mut p = srv.client();
    assert_eq!(p.cmd(&["PUBSUB", "NUMPAT"]), Frame::Integer(1));
    assert_eq!(p.cmd(&["PUBLISH", "user:42", "in"]), Frame::Integer(1));
    assert_eq!(
        sub.read_frame(),
        arr(&[Frame::bulk("pmessage"), Frame::bulk("user:*"), Frame::bulk("user:42"), Frame::bulk("in")])
    );
    let mut ssub = srv.client();
    assert_eq!(
        ssub.cmd(&["SSUBSCRIBE", "orders"]),
        arr(&[Frame::bulk("ssubscribe"), Frame::bulk("orders"), Frame::Integer(1)])
    );
    assert_eq!(p.cmd(&["SPUBLISH", "orders", "o1"]), Frame::Integer(1));
    assert_eq!(p.cmd(&["PUBLISH", "orders", "not-shard"]), Frame::Integer(0), "shard channels are their own namespace");
    assert_eq!(ssub.read_frame(), arr(&[Frame::bulk("smessage"), Frame::bulk("orders"), Frame::bulk("o1")]));
    assert_eq!(p.cmd(&["PUBSUB", "SHARDNUMSUB", "orders"]), arr(&[Frame::bulk("orders"), Frame::Integer(1)]));
}

#[test]
fn keyspace_notifications_follow_notify_keyspace_events() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    let mut sub = srv.client();
    sub.cmd(&["PSUBSCRIBE", "__key*@0__:*"]);
    ok(&mut c, &["SET", "k", "v", "PX", "50"]);
    let mut seen = Vec::new();
    for _ in 0..4 {
        seen.push(sub.read_frame());
    }
    let text: String = seen.iter().map(show).collect::<Vec<_>>().join(" ");
    for needle in ["__keyspace@0__:k", "__keyevent@0__:set", "__keyevent@0__:expire"] {
        assert!(text.contains(needle), "{needle} missing from {text}");
    }
    // The expiry is announced by the active cycle even though nobody reads the key.
    let mut expired = false;
    assert!(wait_for(
        || {
            if let Ok(f) = sub.try_read_frame() {
                expired |= show(&f).contains("__keyevent@0__:expired");
            }
            expired
        },
        Duration::from_secs(5)
    ));
}

/// Valkey's unit/pubsub "Keyspace notifications: evicted events": the event arrives right
/// after CONFIG SET lowers maxmemory, with no other command to trigger the eviction.
#[test]
fn keyspace_notifications_report_evictions_from_config_set() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "Ee"]);
    ok(&mut c, &["CONFIG", "SET", "maxmemory-policy", "allkeys-lru"]);
    let mut sub = srv.client();
    sub.cmd(&["PSUBSCRIBE", "*"]);
    ok(&mut c, &["SET", "foo", "bar"]);
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "1"]);
    assert_eq!(
        sub.read_frame(),
        arr(&[Frame::bulk("pmessage"), Frame::bulk("*"), Frame::bulk("__keyevent@0__:evicted"), Frame::bulk("foo")])
    );
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "0"]);
}

/// A message frame as readable text.
fn show(f: &Frame) -> String {
    match f {
        Frame::Array(items) | Frame::Push(items) => items.iter().map(show).collect::<Vec<_>>().join(","),
        Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
        other => format!("{other:?}"),
    }
}

#[test]
fn a_disconnected_subscriber_is_forgotten() {
    let srv = server();
    {
        let mut sub = RawClient::connect(srv.port());
        sub.cmd(&["SUBSCRIBE", "gone"]);
    }
    let mut p = srv.client();
    assert!(wait_for(|| p.cmd(&["PUBLISH", "gone", "x"]) == Frame::Integer(0), Duration::from_secs(5)));
}

#[test]
fn client_reply_off_does_not_silence_pubsub() {
    // pubsub.tcl: keyspace notifications reach a RESP2 subscriber whose replies are off.
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "notify-keyspace-events", "KA"]);
    let mut sub = srv.client();
    sub.send(&["CLIENT", "REPLY", "OFF"]);
    assert_eq!(sub.cmd(&["PSUBSCRIBE", "*"]), arr(&[Frame::bulk("psubscribe"), Frame::bulk("*"), Frame::Integer(1)]));
    ok(&mut c, &["SET", "foo", "bar"]);
    assert_eq!(
        sub.read_frame(),
        arr(&[Frame::bulk("pmessage"), Frame::bulk("*"), Frame::bulk("__keyspace@0__:foo"), Frame::bulk("set")])
    );
}
