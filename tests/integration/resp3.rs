//! RESP3: HELLO negotiation and the reply shapes that change with the protocol (map, null,
//! double, verbatim...), checked byte-shape by byte-shape with the raw client.

use hotkv_test_support::{Frame, RawClient};

use crate::{assert_err, ok, redis_conn_url, server};

/// Switches `c` to RESP3 and returns the HELLO reply.
fn hello3(c: &mut RawClient) -> Frame {
    let reply = c.cmd(&["HELLO", "3"]);
    assert!(matches!(reply, Frame::Map(_)), "HELLO 3 must reply with a RESP3 map, got {reply}");
    reply
}

#[test]
fn hello_3_replies_with_a_map_of_server_facts() {
    let srv = server();
    let mut c = srv.client();
    let reply = hello3(&mut c);
    let keys: Vec<String> = reply.pairs().iter().map(|(k, _)| k.text()).collect();
    assert_eq!(keys, ["server", "version", "proto", "id", "mode", "role", "modules"]);
    assert_eq!(reply.field("proto"), Some(Frame::Integer(3)));
    assert!(matches!(reply.field("id"), Some(Frame::Integer(id)) if id > 0));
    assert_eq!(reply.field("mode"), Some(Frame::bulk("standalone")));
    assert_eq!(reply.field("role"), Some(Frame::bulk("master")));
    assert_eq!(reply.field("modules"), Some(Frame::Array(vec![])));
    let version = reply.field("version").unwrap().text();
    assert!(version.split('.').count() == 3, "version {version:?} is not x.y.z");
}

#[test]
fn hello_without_a_version_keeps_resp2_and_replies_with_a_flat_array() {
    let srv = server();
    let mut c = srv.client();
    let reply = c.cmd(&["HELLO"]);
    assert!(matches!(&reply, Frame::Array(v) if v.len() == 14), "HELLO in RESP2: {reply}");
    assert_eq!(reply.field("proto"), Some(Frame::Integer(2)));
    assert_eq!(c.cmd(&["GET", "missing"]), Frame::NullBulk);
}

#[test]
fn hello_rejects_unsupported_versions() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["HELLO", "4"]), "NOPROTO unsupported protocol version");
    assert_err(&c.cmd(&["HELLO", "1"]), "NOPROTO unsupported protocol version");
    assert_err(&c.cmd(&["HELLO", "three"]), "ERR Protocol version is not an integer or out of range");
    assert_eq!(c.cmd(&["GET", "missing"]), Frame::NullBulk, "a failed HELLO keeps RESP2");
}

#[test]
fn resp3_nulls_replace_null_bulks() {
    let srv = server();
    let mut c = srv.client();
    hello3(&mut c);
    ok(&mut c, &["SET", "a", "1"]);
    assert_eq!(c.cmd(&["GET", "missing"]), Frame::Null);
    assert_eq!(c.cmd(&["MGET", "a", "missing"]), Frame::Array(vec![Frame::bulk("1"), Frame::Null]));
    assert_eq!(c.cmd(&["SET", "a", "2", "NX"]), Frame::Null);
    // INCRBYFLOAT stays a bulk string in RESP3, as in Valkey: clients parse it as text.
    assert_eq!(c.cmd(&["INCRBYFLOAT", "f", "1.5"]), Frame::bulk("1.5"));
}

#[test]
fn debug_protocol_shows_each_resp3_type() {
    let srv = crate::server_with(&[("enable-debug-command", "yes")]);
    let mut c = srv.client();
    // In RESP2 a double degrades to a bulk string.
    assert_eq!(c.cmd(&["DEBUG", "PROTOCOL", "double"]), Frame::bulk("3.141"));
    hello3(&mut c);
    assert_eq!(c.cmd(&["DEBUG", "PROTOCOL", "double"]), Frame::Double("3.141".into()));
    assert_eq!(c.cmd(&["DEBUG", "PROTOCOL", "null"]), Frame::Null);
    assert_eq!(c.cmd(&["DEBUG", "PROTOCOL", "true"]), Frame::Boolean(true));
    assert_eq!(c.cmd(&["DEBUG", "PROTOCOL", "false"]), Frame::Boolean(false));
    assert_eq!(
        c.cmd(&["DEBUG", "PROTOCOL", "bignum"]),
        Frame::BigNumber("1234567999999999999999999999999999999".into())
    );
    assert_eq!(
        c.cmd(&["DEBUG", "PROTOCOL", "set"]),
        Frame::Set(vec![Frame::Integer(0), Frame::Integer(1), Frame::Integer(2)])
    );
    assert_eq!(
        c.cmd(&["DEBUG", "PROTOCOL", "map"]),
        Frame::Map(vec![
            (Frame::Integer(0), Frame::Boolean(false)),
            (Frame::Integer(1), Frame::Boolean(true)),
            (Frame::Integer(2), Frame::Boolean(false)),
        ])
    );
    assert!(matches!(c.cmd(&["DEBUG", "PROTOCOL", "verbatim"]), Frame::Verbatim(f, _) if f == "txt"));
}

#[test]
fn config_get_is_a_map_in_resp3() {
    let srv = server();
    let mut c = srv.client();
    hello3(&mut c);
    let reply = c.cmd(&["CONFIG", "GET", "maxmemory"]);
    assert_eq!(reply, Frame::Map(vec![(Frame::bulk("maxmemory"), Frame::bulk("0"))]));
}

#[test]
fn info_is_a_verbatim_string_in_resp3() {
    let srv = server();
    let mut c = srv.client();
    hello3(&mut c);
    match c.cmd(&["INFO", "server"]) {
        Frame::Verbatim(format, text) => {
            assert_eq!(format, "txt");
            assert!(String::from_utf8_lossy(&text).contains("redis_version:"));
        }
        other => panic!("INFO in RESP3 must be a verbatim string, got {other}"),
    }
}

#[test]
fn reset_returns_the_connection_to_resp2() {
    let srv = server();
    let mut c = srv.client();
    hello3(&mut c);
    assert_eq!(c.cmd(&["RESET"]), Frame::simple("RESET"));
    assert_eq!(c.cmd(&["GET", "missing"]), Frame::NullBulk);
}

#[test]
fn the_redis_crate_works_over_resp3() {
    let srv = server();
    let mut con = redis_conn_url(&format!("{}?protocol=resp3", srv.url()));
    let () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let v: Option<String> = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v.as_deref(), Some("v"));
    let none: Option<String> = redis::cmd("GET").arg("missing").query(&mut con).unwrap();
    assert_eq!(none, None);
}
