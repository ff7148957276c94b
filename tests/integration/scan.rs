//! SCAN: full iteration, filters, errors, and the guarantee that matters to clients — every
//! key present for the whole iteration is returned, even while other keys are added.

use std::collections::BTreeSet;

use hotkv_test_support::{Frame, RawClient};
use redis::Commands;

use crate::{assert_err, redis_conn, server};

/// Writes `n` keys named `{prefix}{i}` with one pipelined batch.
fn fill(c: &mut RawClient, prefix: &str, range: std::ops::Range<usize>) -> BTreeSet<String> {
    let keys: BTreeSet<String> = range.map(|i| format!("{prefix}{i}")).collect();
    for k in &keys {
        c.send(&["SET", k, "v"]);
    }
    for _ in &keys {
        assert_eq!(c.read_frame(), Frame::ok());
    }
    keys
}

/// One SCAN call: the next cursor and the keys of this page.
fn scan_page(c: &mut RawClient, cursor: &str, extra: &[&str]) -> (String, Vec<String>) {
    let mut args = vec!["SCAN", cursor];
    args.extend_from_slice(extra);
    let reply = c.cmd(&args);
    let items = reply.items();
    assert_eq!(items.len(), 2, "SCAN reply shape: {reply}");
    (items[0].text(), items[1].items().iter().map(Frame::text).collect())
}

/// Scans to the end (bounded number of calls), calling `between` after each page.
fn scan_all(c: &mut RawClient, extra: &[&str], mut between: impl FnMut(&mut RawClient)) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    let mut cursor = "0".to_string();
    for _ in 0..100_000 {
        let (next, keys) = scan_page(c, &cursor, extra);
        seen.extend(keys);
        if next == "0" {
            return seen;
        }
        cursor = next;
        between(c);
    }
    panic!("SCAN did not finish within 100000 calls");
}

#[test]
fn scan_visits_every_key() {
    let srv = server();
    let mut c = srv.client();
    let keys = fill(&mut c, "key:", 0..1000);
    let seen = scan_all(&mut c, &["COUNT", "50"], |_| {});
    assert_eq!(seen, keys);
}

#[test]
fn scan_match_and_type_filter_the_keys() {
    let srv = server();
    let mut c = srv.client();
    let users = fill(&mut c, "user:", 0..100);
    fill(&mut c, "order:", 0..100);
    assert_eq!(scan_all(&mut c, &["MATCH", "user:*", "COUNT", "20"], |_| {}), users);
    assert_eq!(scan_all(&mut c, &["TYPE", "string"], |_| {}).len(), 200);
    assert!(scan_all(&mut c, &["TYPE", "list"], |_| {}).is_empty());
}

#[test]
fn scan_returns_every_key_present_throughout_while_keys_are_added() {
    let srv = server();
    let mut c = srv.client();
    let initial = fill(&mut c, "old:", 0..2000);
    let mut next_new = 0;
    let seen = scan_all(&mut c, &["COUNT", "25"], |c| {
        fill(c, "new:", next_new..next_new + 20);
        next_new += 20;
    });
    let missing: Vec<&String> = initial.difference(&seen).collect();
    assert!(
        missing.is_empty(),
        "{} keys present throughout were never returned: {:?}",
        missing.len(),
        &missing[..missing.len().min(10)]
    );
    assert!(seen.iter().all(|k| k.starts_with("old:") || k.starts_with("new:")));
}

#[test]
fn scan_rejects_bad_cursors_and_options() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["SCAN", "abc"]), "ERR invalid cursor");
    assert_err(&c.cmd(&["SCAN", "0", "COUNT", "0"]), "ERR syntax error");
    assert_err(&c.cmd(&["SCAN", "0", "MATCH"]), "ERR syntax error");
    assert_err(&c.cmd(&["SCAN", "0", "BOGUS", "1"]), "ERR syntax error");
    assert_err(&c.cmd(&["SCAN", "0", "TYPE", "bogus"]), "ERR unknown type name 'bogus'");
}

#[test]
fn the_redis_crate_scan_iterator_sees_every_key() {
    let srv = server();
    let mut c = srv.client();
    let keys = fill(&mut c, "it:", 0..300);
    fill(&mut c, "other:", 0..50);
    let mut con = redis_conn(&srv);
    let seen: BTreeSet<String> = con.scan_match::<_, String>("it:*").unwrap().map(|k| k.unwrap()).collect();
    assert_eq!(seen, keys);
}
