//! Client-side caching (CLIENT TRACKING): RESP3 pushes, RESP2 redirection through
//! `__redis__:invalidate`, BCAST prefixes, OPTIN/OPTOUT, NOLOOP, flushes, expiry,
//! transactions, the table's size limit, a broken redirection, the error texts, and that a
//! tracking client leaves nothing behind. Expected frames follow Valkey 8.0.

use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, wait_for};

use crate::{assert_err, ok, server, server_with};

fn resp3(c: &mut RawClient) {
    assert!(matches!(c.cmd(&["HELLO", "3"]), Frame::Map(_)));
}

fn invalidate(ks: &[&str]) -> Frame {
    Frame::Push(vec![Frame::bulk("invalidate"), keys(ks)])
}

fn redirected(keys: Frame) -> Frame {
    Frame::Array(vec![Frame::bulk("message"), Frame::bulk("__redis__:invalidate"), keys])
}

fn keys(ks: &[&str]) -> Frame {
    Frame::Array(ks.iter().copied().map(Frame::bulk).collect())
}

/// A RESP2 client subscribed to `__redis__:invalidate`, and its id.
fn redirect_target(srv: &hotkv_test_support::TestServer) -> (RawClient, String) {
    let mut r = srv.client();
    let Frame::Integer(id) = r.cmd(&["CLIENT", "ID"]) else { panic!("CLIENT ID") };
    r.cmd(&["SUBSCRIBE", "__redis__:invalidate"]);
    (r, id.to_string())
}

fn info_field(c: &mut RawClient, name: &str) -> i64 {
    let text = c.cmd(&["INFO", "all"]).text();
    let prefix = format!("{name}:");
    let line = text.lines().find(|l| l.starts_with(&prefix)).unwrap_or_else(|| panic!("no {name}"));
    line[prefix.len()..].trim().parse().unwrap()
}

#[test]
fn resp3_client_gets_a_push_after_another_clients_write() {
    let srv = server();
    let (mut c, mut w) = (srv.client(), srv.client());
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON"]);
    ok(&mut w, &["SET", "k", "1"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("1"));
    ok(&mut w, &["SET", "k", "2"]);
    assert_eq!(c.read_frame(), invalidate(&["k"]));
    // Forgotten once invalidated: the next write says nothing until it is read again.
    ok(&mut w, &["SET", "k", "3"]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn resp2_client_redirects_to_a_subscriber_of_the_invalidate_channel() {
    let srv = server();
    let (mut r, id) = redirect_target(&srv);
    let (mut c, mut w) = (srv.client(), srv.client());
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "REDIRECT", &id]);
    assert_eq!(c.cmd(&["CLIENT", "GETREDIR"]), Frame::Integer(id.parse().unwrap()));
    c.cmd(&["MGET", "a", "b"]);
    ok(&mut w, &["SET", "a", "1"]);
    assert_eq!(r.read_frame(), redirected(keys(&["a"])));
    let line = c.cmd(&["CLIENT", "INFO"]).text();
    assert!(line.contains(" flags=t ") && line.contains(&format!(" redir={id} ")), "{line}");
}

#[test]
fn bcast_sends_keys_matching_the_prefixes_once_per_command() {
    let srv = server();
    let (mut c, mut w) = (srv.client(), srv.client());
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a:", "PREFIX", "b:"]);
    ok(&mut w, &["MSET", "a:1", "x", "c:1", "x", "a:2", "x"]);
    assert_eq!(c.read_frame(), invalidate(&["a:1", "a:2"]));
    ok(&mut w, &["SET", "b:1", "x"]);
    assert_eq!(c.read_frame(), invalidate(&["b:1"]));
    let Frame::Map(info) = c.cmd(&["CLIENT", "TRACKINGINFO"]) else { panic!() };
    assert_eq!(info[0], (Frame::bulk("flags"), Frame::Set(vec![Frame::bulk("on"), Frame::bulk("bcast")])));
    assert_eq!(info[2], (Frame::bulk("prefixes"), keys(&["a:", "b:"])));
    assert_eq!(info_field(&mut w, "tracking_total_prefixes"), 2);
    assert!(c.cmd(&["CLIENT", "INFO"]).text().contains(" flags=tB "));
}

#[test]
fn optin_and_optout_follow_client_caching() {
    let srv = server();
    let (mut c, mut w) = (srv.client(), srv.client());
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "OPTIN"]);
    c.cmd(&["GET", "no"]);
    ok(&mut c, &["CLIENT", "CACHING", "YES"]);
    c.cmd(&["GET", "yes"]);
    ok(&mut w, &["MSET", "no", "1", "yes", "1"]);
    assert_eq!(c.read_frame(), invalidate(&["yes"]));
    ok(&mut c, &["CLIENT", "TRACKING", "OFF"]);
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "OPTOUT"]);
    ok(&mut c, &["CLIENT", "CACHING", "NO"]);
    c.cmd(&["GET", "no"]);
    c.cmd(&["GET", "yes"]);
    ok(&mut w, &["MSET", "no", "2", "yes", "2"]);
    assert_eq!(c.read_frame(), invalidate(&["yes"]));
}

#[test]
fn noloop_spares_a_client_its_own_writes() {
    let srv = server();
    let (mut c, mut w) = (srv.client(), srv.client());
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "NOLOOP"]);
    c.cmd(&["MGET", "mine", "theirs"]);
    ok(&mut c, &["SET", "mine", "1"]);
    ok(&mut w, &["SET", "theirs", "1"]);
    assert_eq!(c.read_frame(), invalidate(&["theirs"]));
    // Without NOLOOP the own write's invalidation follows its reply.
    ok(&mut c, &["CLIENT", "TRACKING", "ON"]);
    c.cmd(&["GET", "mine"]);
    ok(&mut c, &["SET", "mine", "2"]);
    assert_eq!(c.read_frame(), invalidate(&["mine"]));
}

#[test]
fn a_flush_sends_a_null_invalidation() {
    let srv = server();
    let (mut r, id) = redirect_target(&srv);
    let (mut c3, mut c2, mut w) = (srv.client(), srv.client(), srv.client());
    resp3(&mut c3);
    ok(&mut c3, &["CLIENT", "TRACKING", "ON"]);
    ok(&mut c2, &["CLIENT", "TRACKING", "ON", "REDIRECT", &id]);
    c3.cmd(&["GET", "k"]);
    c2.cmd(&["GET", "k"]);
    ok(&mut w, &["FLUSHALL"]);
    assert_eq!(c3.read_frame(), Frame::Push(vec![Frame::bulk("invalidate"), Frame::Null]));
    assert_eq!(r.read_frame(), redirected(Frame::NullBulk));
    assert_eq!(info_field(&mut w, "tracking_total_keys"), 0);
}

#[test]
fn an_expired_key_is_invalidated() {
    let srv = server();
    let (mut c, mut w) = (srv.client(), srv.client());
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON"]);
    ok(&mut w, &["SET", "k", "v", "PX", "50"]);
    c.cmd(&["GET", "k"]);
    // The active expire cycle deletes it without anyone touching it.
    c.set_timeout(Duration::from_secs(5));
    assert_eq!(c.read_frame(), invalidate(&["k"]));
}

#[test]
fn a_transaction_invalidates_after_its_reply() {
    let srv = server();
    let mut c = srv.client();
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON"]);
    ok(&mut c, &["MSET", "a", "1", "b", "2"]);
    c.cmd(&["GET", "a"]);
    ok(&mut c, &["MULTI"]);
    c.cmd(&["INCR", "a"]);
    c.cmd(&["GET", "b"]);
    assert_eq!(c.cmd(&["EXEC"]), Frame::Array(vec![Frame::Integer(2), Frame::bulk("2")]));
    assert_eq!(c.read_frame(), invalidate(&["a"]));
}

#[test]
fn the_table_limit_evicts_keys_with_invalidations() {
    let srv = server_with(&[("tracking-table-max-keys", "2")]);
    let (mut r, id) = redirect_target(&srv);
    let mut c = srv.client();
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "REDIRECT", &id]);
    c.cmd(&["MGET", "k1", "k2", "k3", "k4", "k5"]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    for _ in 0..3 {
        let Frame::Array(msg) = r.read_frame() else { panic!("an invalidation") };
        assert_eq!(msg[1], Frame::bulk("__redis__:invalidate"));
    }
    assert_eq!(info_field(&mut c, "tracking_total_keys"), 2);
    ok(&mut c, &["CONFIG", "SET", "tracking-table-max-keys", "1"]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    assert_eq!(info_field(&mut c, "tracking_total_keys"), 1);
}

#[test]
fn a_closed_redirect_target_breaks_the_redirection() {
    let srv = server();
    let mut r = srv.client();
    let Frame::Integer(id) = r.cmd(&["CLIENT", "ID"]) else { panic!() };
    let (mut c, mut w) = (srv.client(), srv.client());
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "REDIRECT", &id.to_string()]);
    c.cmd(&["GET", "k"]);
    ok(&mut r, &["QUIT"]);
    ok(&mut w, &["SET", "k", "1"]);
    assert_eq!(c.read_frame(), Frame::Push(vec![Frame::bulk("tracking-redir-broken"), Frame::Integer(id)]));
    let Frame::Map(info) = c.cmd(&["CLIENT", "TRACKINGINFO"]) else { panic!() };
    assert_eq!(info[0], (Frame::bulk("flags"), Frame::Set(vec![Frame::bulk("on"), Frame::bulk("broken_redirect")])));
    assert!(c.cmd(&["CLIENT", "INFO"]).text().contains(" flags=tR "));
}

#[test]
fn options_are_checked_with_valkeys_error_texts() {
    let srv = server();
    let mut c = srv.client();
    assert_err(
        &c.cmd(&["CLIENT", "TRACKING", "ON", "PREFIX", "a"]),
        "ERR PREFIX option requires BCAST mode to be enabled",
    );
    assert_err(
        &c.cmd(&["CLIENT", "TRACKING", "ON", "OPTIN", "OPTOUT"]),
        "ERR You can't specify both OPTIN mode and OPTOUT mode",
    );
    assert_err(
        &c.cmd(&["CLIENT", "TRACKING", "ON", "BCAST", "OPTIN"]),
        "ERR OPTIN and OPTOUT are not compatible with BCAST",
    );
    assert_err(
        &c.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", "999999"]),
        "ERR The client ID you want redirect to does not exist",
    );
    assert_err(&c.cmd(&["CLIENT", "TRACKING", "ON", "REDIRECT", "x"]), "ERR value is not an integer or out of range");
    assert_err(&c.cmd(&["CLIENT", "TRACKING", "MAYBE"]), "ERR syntax error");
    assert_err(&c.cmd(&["CLIENT", "TRACKING", "ON", "NOSUCH"]), "ERR syntax error");
    assert_err(
        &c.cmd(&["CLIENT", "CACHING", "YES"]),
        "ERR CLIENT CACHING can be called only when the client is in tracking mode with OPTIN or OPTOUT mode enabled",
    );
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "ab"]);
    assert_err(
        &c.cmd(&["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a"]),
        "ERR Prefix 'a' overlaps with an existing prefix 'ab'. Prefixes for a single client must not overlap.",
    );
    assert_err(
        &c.cmd(&["CLIENT", "TRACKING", "ON"]),
        "ERR You can't switch BCAST mode on/off before disabling tracking for this client, and then re-enabling \
         it with a different mode.",
    );
    ok(&mut c, &["CLIENT", "TRACKING", "OFF"]);
    ok(&mut c, &["CLIENT", "TRACKING", "ON", "OPTIN"]);
    assert_err(
        &c.cmd(&["CLIENT", "CACHING", "NO"]),
        "ERR CLIENT CACHING NO is only valid when tracking is enabled in OPTOUT mode.",
    );
    assert_err(
        &c.cmd(&["CLIENT", "TRACKING", "ON", "OPTOUT"]),
        "ERR You can't switch OPTIN/OPTOUT mode before disabling tracking for this client, and then re-enabling \
         it with a different mode.",
    );
    ok(&mut c, &["CLIENT", "TRACKING", "OFF"]);
    assert_eq!(c.cmd(&["CLIENT", "GETREDIR"]), Frame::Integer(-1));
}

#[test]
fn a_tracking_client_that_disconnects_leaves_nothing_behind() {
    let srv = server();
    let mut w = srv.client();
    {
        let mut c = srv.client();
        resp3(&mut c);
        ok(&mut c, &["CLIENT", "TRACKING", "ON"]);
        let keys: Vec<String> = (0..500).map(|i| format!("key:{i}")).collect();
        let mut mget = vec!["MGET"];
        mget.extend(keys.iter().map(String::as_str));
        c.cmd(&mget);
        assert_eq!(info_field(&mut w, "tracking_total_items"), 500);
        assert_eq!(info_field(&mut w, "tracking_clients"), 1);
    }
    assert!(
        wait_for(|| info_field(&mut w, "tracking_total_items") == 0, Duration::from_secs(10)),
        "the disconnected client's keys stay in the table"
    );
    assert_eq!(info_field(&mut w, "tracking_total_keys"), 0);
    assert_eq!(info_field(&mut w, "tracking_clients"), 0);
}

/// A cache kept from GETs and invalidations stays right while another client writes as fast
/// as it can: a read is recorded before any later write of its key can look for it (both
/// under the key's slot lock), so no write slips between a read and its record unannounced.
#[test]
fn a_cache_fed_by_invalidations_never_stays_stale_under_concurrent_writes() {
    let srv = server();
    let mut c = srv.client();
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON"]);
    ok(&mut c, &["SET", "n", "0"]);
    let mut w = srv.client();
    let writer = std::thread::spawn(move || {
        for _ in 0..2000 {
            w.cmd(&["INCR", "n"]);
        }
        w
    });
    let mut cache: Option<String> = None;
    let on_frame = |f: Frame, cache: &mut Option<String>| -> Option<Frame> {
        match f {
            Frame::Push(_) => {
                assert_eq!(f, invalidate(&["n"]));
                *cache = None;
                None
            }
            reply => Some(reply),
        }
    };
    let mut rounds = 0;
    while !writer.is_finished() || rounds == 0 {
        rounds += 1;
        if cache.is_none() {
            c.send(&["GET", "n"]);
            let v = loop {
                if let Some(reply) = on_frame(c.read_frame(), &mut cache) {
                    break reply.text();
                }
            };
            cache = Some(v);
        } else {
            c.send(&["PING"]);
            while on_frame(c.read_frame(), &mut cache).is_none() {}
        }
    }
    let mut w = writer.join().unwrap();
    // Whatever is still on its way arrives before the reply to a command sent now.
    c.send(&["PING"]);
    while on_frame(c.read_frame(), &mut cache).is_none() {}
    if let Some(v) = cache {
        assert_eq!(v, w.cmd(&["GET", "n"]).text(), "stale cache after {rounds} rounds");
    }
}

/// Writes a replica applies from its primary's stream invalidate what its own clients read,
/// and its full sync starts with a null invalidation (the FLUSHALL that empties it).
#[test]
fn a_replica_invalidates_keys_its_primary_changes() {
    let primary = server();
    let replica = server();
    let mut c = replica.client();
    resp3(&mut c);
    ok(&mut c, &["CLIENT", "TRACKING", "ON"]);
    ok(&mut replica.client(), &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    c.set_timeout(Duration::from_secs(20));
    assert_eq!(c.read_frame(), Frame::Push(vec![Frame::bulk("invalidate"), Frame::Null]));
    let (mut p, mut r) = (primary.client(), replica.client());
    ok(&mut p, &["SET", "k", "1"]);
    assert!(wait_for(|| r.cmd(&["GET", "k"]) == Frame::bulk("1"), Duration::from_secs(20)), "never replicated");
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("1"));
    ok(&mut p, &["SET", "k", "2"]);
    assert_eq!(c.read_frame(), invalidate(&["k"]));
}
