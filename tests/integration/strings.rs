//! String commands and their errors (Valkey 8.0 `t_string.c` semantics), through the Rust
//! `redis` crate for the happy paths and the raw client for exact error lines.

use hotkv_test_support::Frame;
use redis::Commands;

use crate::{assert_err, ok, redis_conn, server};

#[test]
fn set_then_get_round_trips_through_the_redis_crate() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let () = con.set("greeting", "hello").unwrap();
    assert_eq!(con.get::<_, Option<String>>("greeting").unwrap().as_deref(), Some("hello"));
    assert_eq!(con.get::<_, Option<String>>("missing").unwrap(), None);
}

#[test]
fn get_of_a_missing_key_is_a_resp2_null_bulk() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["GET", "nope"]), Frame::NullBulk);
}

#[test]
fn get_and_set_check_arity() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["GET"]), "ERR wrong number of arguments for 'get' command");
    assert_err(&c.cmd(&["GET", "a", "b"]), "ERR wrong number of arguments for 'get' command");
    assert_err(&c.cmd(&["SET", "k"]), "ERR wrong number of arguments for 'set' command");
}

#[test]
fn set_nx_and_xx_only_write_when_the_condition_holds() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "1", "XX"]), Frame::NullBulk, "XX on a missing key");
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk);
    ok(&mut c, &["SET", "k", "1", "NX"]);
    assert_eq!(c.cmd(&["SET", "k", "2", "NX"]), Frame::NullBulk, "NX on an existing key");
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("1"));
    ok(&mut c, &["SET", "k", "3", "XX"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("3"));
}

#[test]
fn set_get_option_returns_the_previous_value() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "v1", "GET"]), Frame::NullBulk);
    assert_eq!(c.cmd(&["SET", "k", "v2", "GET"]), Frame::bulk("v1"));
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("v2"));
    assert_eq!(c.cmd(&["GETSET", "k", "v3"]), Frame::bulk("v2"));
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("v3"));
}

#[test]
fn set_rejects_conflicting_or_unknown_options() {
    let srv = server();
    let mut c = srv.client();
    for args in [
        &["SET", "k", "v", "NX", "XX"][..],
        &["SET", "k", "v", "EX", "10", "PX", "10000"],
        &["SET", "k", "v", "KEEPTTL", "EX", "10"],
        &["SET", "k", "v", "BOGUS"],
        &["SET", "k", "v", "EX"],
    ] {
        assert_err(&c.cmd(args), "ERR syntax error");
    }
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk, "a rejected SET must not write");
}

#[test]
fn set_rejects_bad_expire_times() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["SET", "k", "v", "EX", "0"]), "ERR invalid expire time in 'set' command");
    assert_err(&c.cmd(&["SET", "k", "v", "PX", "-5"]), "ERR invalid expire time in 'set' command");
    assert_err(&c.cmd(&["SET", "k", "v", "EX", "ten"]), "ERR value is not an integer or out of range");
    assert_err(&c.cmd(&["SET", "k", "v", "EX", "9223372036854775807"]), "ERR invalid expire time in 'set' command");
}

#[test]
fn incr_and_decr_family_count() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["INCR", "n"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["INCRBY", "n", "10"]), Frame::Integer(11));
    assert_eq!(c.cmd(&["DECR", "n"]), Frame::Integer(10));
    assert_eq!(c.cmd(&["DECRBY", "n", "25"]), Frame::Integer(-15));
    assert_eq!(c.cmd(&["GET", "n"]), Frame::bulk("-15"));
    ok(&mut c, &["SET", "big", "9223372036854775806"]);
    assert_eq!(c.cmd(&["INCR", "big"]), Frame::Integer(i64::MAX));
}

#[test]
fn incr_rejects_non_integers_and_overflow() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "s", "abc"]);
    assert_err(&c.cmd(&["INCR", "s"]), "ERR value is not an integer or out of range");
    ok(&mut c, &["SET", "sp", " 1"]);
    assert_err(&c.cmd(&["INCR", "sp"]), "ERR value is not an integer or out of range");
    assert_err(&c.cmd(&["INCRBY", "n", "1.5"]), "ERR value is not an integer or out of range");
    ok(&mut c, &["SET", "max", "9223372036854775807"]);
    assert_err(&c.cmd(&["INCR", "max"]), "ERR increment or decrement would overflow");
    assert_eq!(c.cmd(&["GET", "max"]), Frame::bulk("9223372036854775807"));
}

#[test]
fn incrbyfloat_formats_like_valkey_and_rejects_bad_input() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "f", "10.50"]);
    assert_eq!(c.cmd(&["INCRBYFLOAT", "f", "0.1"]), Frame::bulk("10.6"));
    assert_eq!(c.cmd(&["INCRBYFLOAT", "f", "-10.6"]), Frame::bulk("0"));
    assert_eq!(c.cmd(&["INCRBYFLOAT", "g", "5.0e3"]), Frame::bulk("5000"));
    assert_err(&c.cmd(&["INCRBYFLOAT", "f", "abc"]), "ERR value is not a valid float");
    ok(&mut c, &["SET", "s", "xyz"]);
    assert_err(&c.cmd(&["INCRBYFLOAT", "s", "1"]), "ERR value is not a valid float");
    assert_err(&c.cmd(&["INCRBYFLOAT", "f", "inf"]), "ERR increment would produce NaN or Infinity");
}

#[test]
fn append_and_strlen_track_length() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["STRLEN", "k"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["APPEND", "k", "hello"]), Frame::Integer(5));
    assert_eq!(c.cmd(&["APPEND", "k", " world"]), Frame::Integer(11));
    assert_eq!(c.cmd(&["STRLEN", "k"]), Frame::Integer(11));
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("hello world"));
    // An integer-encoded value appends as text.
    ok(&mut c, &["SET", "n", "12"]);
    assert_eq!(c.cmd(&["APPEND", "n", "34"]), Frame::Integer(4));
    assert_eq!(c.cmd(&["GET", "n"]), Frame::bulk("1234"));
}

#[test]
fn getrange_and_setrange_address_bytes() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "Hello World"]);
    assert_eq!(c.cmd(&["GETRANGE", "k", "0", "4"]), Frame::bulk("Hello"));
    assert_eq!(c.cmd(&["GETRANGE", "k", "-5", "-1"]), Frame::bulk("World"));
    assert_eq!(c.cmd(&["GETRANGE", "k", "5", "2"]), Frame::bulk(""));
    assert_eq!(c.cmd(&["GETRANGE", "k", "0", "1000"]), Frame::bulk("Hello World"));
    assert_eq!(c.cmd(&["SUBSTR", "k", "6", "-1"]), Frame::bulk("World"));
    assert_eq!(c.cmd(&["GETRANGE", "missing", "0", "-1"]), Frame::bulk(""));
    assert_eq!(c.cmd(&["SETRANGE", "k", "6", "Redis"]), Frame::Integer(11));
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("Hello Redis"));
    // Writing past the end of a missing key pads with zero bytes.
    assert_eq!(c.cmd(&["SETRANGE", "pad", "3", "ab"]), Frame::Integer(5));
    assert_eq!(c.cmd(&["GET", "pad"]), Frame::bulk(b"\0\0\0ab"));
    // An empty value on a missing key creates nothing.
    assert_eq!(c.cmd(&["SETRANGE", "none", "0", ""]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXISTS", "none"]), Frame::Integer(0));
}

#[test]
fn setrange_rejects_negative_and_oversized_offsets() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["SETRANGE", "k", "-1", "x"]), "ERR offset is out of range");
    // 512 MiB + 1 byte would exceed proto-max-bulk-len: refused before allocating.
    assert_err(
        &c.cmd(&["SETRANGE", "k", "536870912", "x"]),
        "ERR string exceeds maximum allowed size (proto-max-bulk-len)",
    );
    assert_eq!(c.cmd(&["EXISTS", "k"]), Frame::Integer(0));
}

#[test]
fn mset_mget_and_msetnx() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MSET", "a", "1", "b", "2"]);
    assert_eq!(
        c.cmd(&["MGET", "a", "missing", "b"]),
        Frame::Array(vec![Frame::bulk("1"), Frame::NullBulk, Frame::bulk("2")])
    );
    assert_eq!(c.cmd(&["MSETNX", "b", "x", "c", "3"]), Frame::Integer(0), "b exists: nothing written");
    assert_eq!(c.cmd(&["EXISTS", "c"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["MSETNX", "c", "3", "d", "4"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["MGET", "c", "d"]), Frame::Array(vec![Frame::bulk("3"), Frame::bulk("4")]));
    assert_err(&c.cmd(&["MSET", "a", "1", "b"]), "ERR wrong number of arguments for 'mset' command");
}

#[test]
fn getdel_and_getex() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    assert_eq!(c.cmd(&["GETDEL", "k"]), Frame::bulk("v"));
    assert_eq!(c.cmd(&["EXISTS", "k"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["GETDEL", "k"]), Frame::NullBulk);

    ok(&mut c, &["SET", "k", "v"]);
    assert_eq!(c.cmd(&["GETEX", "k", "PX", "100000"]), Frame::bulk("v"));
    let pttl = c.cmd(&["PTTL", "k"]).int();
    assert!(pttl > 0 && pttl <= 100_000, "PTTL after GETEX PX: {pttl}");
    assert_eq!(c.cmd(&["GETEX", "k", "PERSIST"]), Frame::bulk("v"));
    assert_eq!(c.cmd(&["PTTL", "k"]), Frame::Integer(-1));
    assert_err(&c.cmd(&["GETEX", "k", "EX", "0"]), "ERR invalid expire time in 'getex' command");
    assert_err(&c.cmd(&["GETEX", "k", "PERSIST", "EX", "10"]), "ERR syntax error");
}

#[test]
fn setex_psetex_and_setnx() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SETEX", "a", "100", "v"]);
    let ttl = c.cmd(&["TTL", "a"]).int();
    assert!((1..=100).contains(&ttl), "TTL after SETEX: {ttl}");
    ok(&mut c, &["PSETEX", "b", "100000", "v"]);
    let pttl = c.cmd(&["PTTL", "b"]).int();
    assert!(pttl > 0 && pttl <= 100_000, "PTTL after PSETEX: {pttl}");
    assert_err(&c.cmd(&["SETEX", "a", "0", "v"]), "ERR invalid expire time in 'setex' command");
    assert_err(&c.cmd(&["PSETEX", "a", "-5", "v"]), "ERR invalid expire time in 'psetex' command");
    assert_eq!(c.cmd(&["SETNX", "c", "1"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["SETNX", "c", "2"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["GET", "c"]), Frame::bulk("1"));
}

#[test]
fn lcs_finds_the_longest_common_subsequence() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MSET", "a", "ohmytext", "b", "mynewtext"]);
    assert_eq!(c.cmd(&["LCS", "a", "b"]), Frame::bulk("mytext"));
    assert_eq!(c.cmd(&["LCS", "a", "b", "LEN"]), Frame::Integer(6));
}

#[test]
fn values_are_binary_safe() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let value: Vec<u8> = (0..=255u8).chain(*b"\r\n\0\r\n").collect();
    let key: &[u8] = b"bin\0key\r\n";
    let () = redis::cmd("SET").arg(key).arg(&value).query(&mut con).unwrap();
    let back: Vec<u8> = redis::cmd("GET").arg(key).query(&mut con).unwrap();
    assert_eq!(back, value);
}

#[test]
fn a_one_megabyte_value_round_trips() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let value: String = (0..1024 * 1024).map(|i| char::from(b'a' + (i % 26) as u8)).collect();
    let () = con.set("big", &value).unwrap();
    assert_eq!(con.get::<_, Option<String>>("big").unwrap(), Some(value));
    let len: i64 = redis::cmd("STRLEN").arg("big").query(&mut con).unwrap();
    assert_eq!(len, 1024 * 1024);
}
