//! Bitmaps (SETBIT, BITCOUNT, BITPOS, BITOP, BITFIELD) and HyperLogLog (PFADD, PFCOUNT,
//! PFMERGE) through the real binary and three real clients. Both are strings underneath, so
//! the tests also check that they mix with string commands and refuse other types.

use hotkv_test_support::tools::{python, redis_cli};
use hotkv_test_support::{Frame, RawClient};
use redis::Commands;

use crate::{assert_err, ok, redis_conn, server, server_error};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn ints(v: &[i64]) -> Frame {
    Frame::Array(v.iter().map(|&n| Frame::Integer(n)).collect())
}

/// PFCOUNT of `keys` as a number.
fn pfcount(c: &mut RawClient, keys: &[&str]) -> i64 {
    let mut argv = vec!["PFCOUNT"];
    argv.extend_from_slice(keys);
    c.cmd(&argv).int()
}

#[test]
fn bitmaps_through_the_redis_crate() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let old: bool = con.setbit("b", 7, true).unwrap();
    assert!(!old, "the old bit was 0");
    let old: bool = con.setbit("b", 7, true).unwrap();
    assert!(old);
    let bit: bool = con.getbit("b", 7).unwrap();
    assert!(bit);
    let bit: bool = con.getbit("b", 100_000).unwrap();
    assert!(!bit, "past the end reads 0");
    let raw: Vec<u8> = con.get("b").unwrap();
    assert_eq!(raw, [1u8]);
    let () = con.set("x", "foobar").unwrap();
    let n: i64 = con.bitcount("x").unwrap();
    assert_eq!(n, 26);
    let n: i64 = con.bitcount_range("x", 1, 1).unwrap();
    assert_eq!(n, 6);
    let () = con.set("y", "abc").unwrap();
    let n: i64 = con.bit_and("dest", &["x", "y"]).unwrap();
    assert_eq!(n, 6, "the result is as long as the longest source");
    let raw: Vec<u8> = con.get("dest").unwrap();
    assert_eq!(raw, b"`bc\0\0\0");
    let n: i64 = con.rpush("l", 1).unwrap();
    assert_eq!(n, 1);
    let err = con.setbit::<_, bool>("l", 0, true).unwrap_err();
    assert_eq!(server_error(&err), WRONGTYPE);
}

#[test]
fn bit_edges_and_errors() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SETBIT", "b", "100000", "1"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["STRLEN", "b"]), Frame::Integer(12_501), "the string grows to hold the bit");
    assert_err(&c.cmd(&["SETBIT", "b", "4294967296", "1"]), "ERR bit offset is not an integer or out of range");
    assert_err(&c.cmd(&["SETBIT", "b", "-1", "1"]), "ERR bit offset is not an integer or out of range");
    assert_err(&c.cmd(&["SETBIT", "b", "0", "2"]), "ERR bit is not an integer or out of range");
    assert_err(&c.cmd(&["GETBIT", "b", "x"]), "ERR bit offset is not an integer or out of range");
    assert_eq!(c.cmd(&[b"SET".as_slice(), b"s", b"\xff\xf0\x00"]), Frame::ok());
    assert_eq!(c.cmd(&["BITCOUNT", "s", "-2", "-1"]), Frame::Integer(4));
    assert_eq!(c.cmd(&["BITCOUNT", "s", "0", "0", "BIT"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["BITCOUNT", "s", "5", "1"]), Frame::Integer(0), "an inverted range is empty");
    assert_eq!(c.cmd(&["BITCOUNT", "s", "1"]), Frame::Integer(4), "Valkey 8: a start alone counts to the end");
    assert_err(&c.cmd(&["BITCOUNT", "s", "0", "1", "WORD"]), "ERR syntax error");
    assert_eq!(c.cmd(&["BITCOUNT", "none"]), Frame::Integer(0));
    assert_eq!(c.cmd(&[b"SET".as_slice(), b"p", b"\x00\x0f"]), Frame::ok());
    assert_eq!(c.cmd(&["BITPOS", "p", "1"]), Frame::Integer(12));
    assert_eq!(c.cmd(&["BITPOS", "p", "0", "1"]), Frame::Integer(8));
    assert_eq!(c.cmd(&["BITPOS", "p", "1", "0", "0"]), Frame::Integer(-1));
    assert_eq!(c.cmd(&["BITPOS", "p", "1", "7", "15", "BIT"]), Frame::Integer(12));
    assert_eq!(c.cmd(&["BITPOS", "none", "1"]), Frame::Integer(-1));
    assert_eq!(c.cmd(&["BITPOS", "none", "0"]), Frame::Integer(0));
    assert_err(&c.cmd(&["BITPOS", "p", "2"]), "ERR The bit argument must be 1 or 0.");
    assert_err(&c.cmd(&["BITOP", "NOT", "d", "p", "s"]), "ERR BITOP NOT must be called with a single source key.");
    assert_err(&c.cmd(&["BITOP", "NAND", "d", "p"]), "ERR syntax error");
    assert_eq!(c.cmd(&["BITOP", "OR", "d", "none1", "none2"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXISTS", "d"]), Frame::Integer(0), "an empty result deletes the destination");
    c.cmd(&["SADD", "set", "m"]);
    assert_err(&c.cmd(&["BITOP", "AND", "d", "p", "set"]), WRONGTYPE);
    assert_err(&c.cmd(&["BITCOUNT", "set"]), WRONGTYPE);
}

#[test]
fn bitfield_types_overflow_and_resp3() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(
        c.cmd(&["BITFIELD", "f", "SET", "u8", "0", "255", "GET", "u8", "0", "GET", "i8", "0"]),
        ints(&[0, 255, -1])
    );
    assert_eq!(c.cmd(&["BITFIELD", "f", "INCRBY", "u8", "0", "10"]), ints(&[9]), "WRAP is the default");
    assert_eq!(c.cmd(&["BITFIELD", "f", "OVERFLOW", "SAT", "INCRBY", "u8", "0", "300"]), ints(&[255]));
    assert_eq!(
        c.cmd(&["BITFIELD", "f", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "1"]),
        Frame::Array(vec![Frame::NullBulk])
    );
    assert_eq!(c.cmd(&["BITFIELD", "f", "SET", "i16", "#1", "-2", "GET", "i16", "#1"]), ints(&[0, -2]));
    assert_eq!(c.cmd(&["BITFIELD", "f"]), ints(&[]));
    assert_eq!(c.cmd(&["BITFIELD_RO", "f", "GET", "u4", "0"]), ints(&[15]));
    assert_err(
        &c.cmd(&["BITFIELD", "f", "GET", "u64", "0"]),
        "ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
    );
    assert_err(&c.cmd(&["BITFIELD", "f", "OVERFLOW", "NOPE"]), "ERR Invalid OVERFLOW type specified");
    assert_err(
        &c.cmd(&["BITFIELD_RO", "f", "SET", "u8", "0", "1"]),
        "ERR BITFIELD_RO only supports the GET subcommand",
    );
    assert_err(&c.cmd(&["BITFIELD", "f", "GET", "u8", "-1"]), "ERR bit offset is not an integer or out of range");
    assert!(matches!(c.cmd(&["HELLO", "3"]), Frame::Map(_)));
    assert_eq!(
        c.cmd(&["BITFIELD", "f", "OVERFLOW", "FAIL", "INCRBY", "u8", "0", "1"]),
        Frame::Array(vec![Frame::Null])
    );
}

#[test]
fn hyperloglog_counts_merges_and_type_checks() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["PFADD", "h"]), Frame::Integer(1), "PFADD with no elements creates the key");
    assert_eq!(c.cmd(&["PFADD", "h"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["TYPE", "h"]), Frame::simple("string"));
    assert_eq!(c.cmd(&["PFADD", "h", "a", "b", "c"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["PFADD", "h", "a", "b"]), Frame::Integer(0), "nothing new");
    assert_eq!(pfcount(&mut c, &["h"]), 3);
    assert_eq!(pfcount(&mut c, &["none"]), 0);
    // Ten thousand distinct elements: the estimate stays within HLL's standard error bound.
    let mut argv = vec!["PFADD".to_string(), "big".to_string()];
    argv.extend((0..10_000).map(|i| format!("el:{i}")));
    assert_eq!(c.cmd(&argv), Frame::Integer(1));
    let n = pfcount(&mut c, &["big"]);
    assert!((9_750..=10_250).contains(&n), "estimate {n} for 10000");
    let union = pfcount(&mut c, &["big", "h", "none"]);
    assert!((9_750..=10_260).contains(&union), "union estimate {union}");
    ok(&mut c, &["PFMERGE", "m", "h", "big"]);
    assert_eq!(pfcount(&mut c, &["m"]), union, "a merge counts as the union does");
    ok(&mut c, &["PFMERGE", "empty"]);
    assert_eq!(pfcount(&mut c, &["empty"]), 0, "PFMERGE of nothing creates an empty HLL");
    ok(&mut c, &["SET", "plain", "not an hll"]);
    for args in [&["PFADD", "plain", "x"][..], &["PFCOUNT", "plain"], &["PFMERGE", "m", "plain"]] {
        assert_err(&c.cmd(args), "WRONGTYPE Key is not a valid HyperLogLog string value.");
    }
    c.cmd(&["RPUSH", "list", "x"]);
    assert_err(&c.cmd(&["PFADD", "list", "x"]), WRONGTYPE);
    // An HLL is a string: GET and SET carry it, and the copy still counts.
    let Frame::Bulk(raw) = c.cmd(&["GET", "h"]) else { panic!("GET of an HLL") };
    assert!(raw.starts_with(b"HYLL"));
    assert_eq!(c.cmd(&[b"SET".as_slice(), b"copy", &raw]), Frame::ok());
    assert_eq!(pfcount(&mut c, &["copy"]), 3);
}

#[test]
fn bitmaps_and_hll_through_redis_cli() {
    let srv = server();
    let port = srv.port();
    assert_eq!(redis_cli(port, &["SETBIT", "b", "3", "1"]), "0\n");
    assert_eq!(redis_cli(port, &["--no-raw", "GET", "b"]), "\"\\x10\"\n");
    assert_eq!(
        redis_cli(port, &["--no-raw", "BITFIELD", "b", "GET", "u4", "0", "GET", "i4", "0"]),
        "1) (integer) 1\n2) (integer) 1\n"
    );
    assert_eq!(redis_cli(port, &["--no-raw", "BITPOS", "b", "2"]), "(error) ERR The bit argument must be 1 or 0.\n");
    assert_eq!(redis_cli(port, &["PFADD", "h", "x", "y", "z"]), "1\n");
    assert_eq!(redis_cli(port, &["--no-raw", "PFCOUNT", "h"]), "(integer) 3\n");
}

#[test]
fn bitmaps_and_hll_through_redis_py() {
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT)
print(r.setbit("b", 9, 1), r.getbit("b", 9), r.getbit("b", 10**6), r.get("b"))
print(r.bitcount("b"), r.bitpos("b", 1), r.bitpos("b", 1, 2), r.bitop("NOT", "n", "b"), r.get("n"))
bf = r.bitfield("f")
print(bf.set("u8", 0, 200).incrby("u8", 0, 100).overflow("FAIL").incrby("u8", 0, 1000).execute())
print(r.bitfield_ro("f", "u8", 0, items=[("i8", 0)]))
print(r.pfadd("h", *[f"e{i}" for i in range(100)]), r.pfcount("h"), r.pfadd("h", "e1"))
print(r.pfadd("h2", "x"), r.pfmerge("u", "h", "h2"), r.pfcount("u"), r.pfcount("h", "h2"))
r.set("s", "text")
try:
    r.pfcount("s")
except redis.ResponseError as e:
    print("error:", e)
"#,
    );
    let expected = "0 1 0 b'\\x00@'\n\
                    1 9 -1 2 b'\\xff\\xbf'\n\
                    [0, 44, None]\n\
                    [44, 44]\n\
                    1 100 0\n\
                    1 True 101 101\n\
                    error: WRONGTYPE Key is not a valid HyperLogLog string value.\n";
    assert_eq!(out, expected);
}

#[test]
fn bitmaps_are_strings_that_string_commands_edit() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SETBIT", "b", "0", "1"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["APPEND", "b", "A"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["GET", "b"]), Frame::bulk(b"\x80A"));
    assert_eq!(c.cmd(&["BITCOUNT", "b"]), Frame::Integer(3), "0x80 and 'A' (0x41)");
    assert_eq!(c.cmd(&["SETRANGE", "b", "3", "\x01"]), Frame::Integer(4), "the gap is zero-filled");
    assert_eq!(c.cmd(&["BITPOS", "b", "1", "2"]), Frame::Integer(31));
    assert_eq!(c.cmd(&["GETBIT", "b", "31"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "b"]), Frame::bulk("raw"));
    // BITOP pads shorter sources with zeros; NOT of a missing key is empty and deletes.
    ok(&mut c, &["SET", "short", "\x0f"]);
    assert_eq!(c.cmd(&["BITOP", "XOR", "x", "b", "short"]), Frame::Integer(4));
    assert_eq!(c.cmd(&["GET", "x"]), Frame::bulk(b"\x8fA\x00\x01"));
    ok(&mut c, &["SET", "x", "kept?"]);
    assert_eq!(c.cmd(&["BITOP", "NOT", "x", "none"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXISTS", "x"]), Frame::Integer(0));
    // A bitmap with a TTL keeps it through SETBIT, as any string edit does.
    assert_eq!(c.cmd(&["EXPIRE", "b", "100"]), Frame::Integer(1));
    c.cmd(&["SETBIT", "b", "100", "1"]);
    assert!(c.cmd(&["TTL", "b"]).int() > 90);
}
