//! Lists through the real binary and three real clients: the `redis` crate, redis-cli and
//! redis-py, plus a raw client for the edges a library would smooth over (negative and
//! out-of-range indexes, huge counts, empty and null replies, RESP2 against RESP3 shapes).

use std::time::Duration;

use hotkv_test_support::tools::{python, redis_cli};
use hotkv_test_support::{Frame, RawClient, wait_for};
use redis::{Commands, Direction};

use crate::{assert_err, ok, redis_conn, server, server_error, server_with};

const WRONGTYPE: &str = "WRONGTYPE Operation against a key holding the wrong kind of value";

fn arr(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(Frame::bulk).collect())
}

/// A client that has switched to RESP3.
fn resp3(c: &mut RawClient) {
    assert!(matches!(c.cmd(&["HELLO", "3"]), Frame::Map(_)));
}

#[test]
fn lists_through_the_redis_crate() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let n: i64 = con.rpush("l", &["a", "b", "c"]).unwrap();
    assert_eq!(n, 3);
    let n: i64 = con.lpush("l", "z").unwrap();
    assert_eq!(n, 4);
    let all: Vec<String> = con.lrange("l", 0, -1).unwrap();
    assert_eq!(all, ["z", "a", "b", "c"]);
    let tail: Vec<String> = con.lrange("l", -2, 100).unwrap();
    assert_eq!(tail, ["b", "c"]);
    let last: Option<String> = con.lindex("l", -1).unwrap();
    assert_eq!(last.as_deref(), Some("c"));
    let past: Option<String> = con.lindex("l", 99).unwrap();
    assert_eq!(past, None);
    let n: i64 = con.linsert_before("l", "b", "ab").unwrap();
    assert_eq!(n, 5);
    let n: i64 = con.linsert_before("l", "nope", "x").unwrap();
    assert_eq!(n, -1);
    let () = con.lset("l", 0, "first").unwrap();
    let err = con.lset::<_, _, ()>("l", 50, "x").unwrap_err();
    assert_eq!(server_error(&err), "ERR index out of range");
    let n: i64 = con.lrem("l", 0, "ab").unwrap();
    assert_eq!(n, 1);
    let moved: String = con.lmove("l", "dst", Direction::Right, Direction::Left).unwrap();
    assert_eq!(moved, "c");
    let popped: Vec<String> = con.lpop("l", std::num::NonZeroUsize::new(10)).unwrap();
    assert_eq!(popped, ["first", "a", "b"]);
    let exists: bool = con.exists("l").unwrap();
    assert!(!exists, "the popped-empty list is gone");
    let missing: Option<Vec<String>> = con.lpop("l", std::num::NonZeroUsize::new(2)).unwrap();
    assert_eq!(missing, None);
    let n: i64 = con.llen("dst").unwrap();
    assert_eq!(n, 1);
    let err = con.lpush::<_, _, i64>("dst", 1).and_then(|_| con.incr::<_, _, i64>("dst", 1)).unwrap_err();
    assert_eq!(server_error(&err), WRONGTYPE);
}

#[test]
fn negative_out_of_range_and_huge_indexes() {
    let srv = server();
    let mut c = srv.client();
    c.cmd(&["RPUSH", "l", "0", "1", "2", "3", "4"]);
    assert_eq!(c.cmd(&["LRANGE", "l", "-100", "1"]), arr(&["0", "1"]), "a start before the head clamps");
    assert_eq!(c.cmd(&["LRANGE", "l", "3", "-100"]), arr(&[]), "an end before the start is empty");
    assert_eq!(c.cmd(&["LRANGE", "l", "5", "10"]), arr(&[]));
    assert_eq!(c.cmd(&["LRANGE", "l", "-1", "9223372036854775807"]), arr(&["4"]));
    assert_eq!(c.cmd(&["LRANGE", "l", "-9223372036854775808", "0"]), arr(&["0"]));
    assert_err(&c.cmd(&["LRANGE", "l", "0", "9223372036854775808"]), "ERR value is not an integer or out of range");
    assert_eq!(c.cmd(&["LINDEX", "l", "-5"]), Frame::bulk("0"));
    assert_eq!(c.cmd(&["LINDEX", "l", "-6"]), Frame::NullBulk);
    assert_err(&c.cmd(&["LINDEX", "l", "x"]), "ERR value is not an integer or out of range");
    assert_err(&c.cmd(&["LSET", "missing", "0", "v"]), "ERR no such key");
    assert_err(&c.cmd(&["LSET", "l", "-6", "v"]), "ERR index out of range");
    // Popping more than there is takes everything; the huge count is not an allocation.
    assert_eq!(c.cmd(&["RPOP", "l", "9223372036854775807"]), arr(&["4", "3", "2", "1", "0"]));
    assert_eq!(c.cmd(&["EXISTS", "l"]), Frame::Integer(0));
    c.cmd(&["RPUSH", "t", "a", "b", "c"]);
    ok(&mut c, &["LTRIM", "t", "1", "-1"]);
    assert_eq!(c.cmd(&["LRANGE", "t", "0", "-1"]), arr(&["b", "c"]));
    ok(&mut c, &["LTRIM", "t", "5", "10"]);
    assert_eq!(c.cmd(&["EXISTS", "t"]), Frame::Integer(0), "trimming to nothing deletes the key");
}

#[test]
fn pop_counts_and_their_errors() {
    let srv = server();
    let mut c = srv.client();
    c.cmd(&["RPUSH", "l", "a", "b"]);
    assert_eq!(c.cmd(&["LPOP", "l", "0"]), arr(&[]), "a zero count is an empty array");
    assert_err(&c.cmd(&["LPOP", "l", "-1"]), "ERR value is out of range, must be positive");
    // Valkey's getPositiveLongFromObjectOrReply gives the same text for a non-number.
    assert_err(&c.cmd(&["LPOP", "l", "x"]), "ERR value is out of range, must be positive");
    assert_err(&c.cmd(&["LPOP", "l", "1", "2"]), "ERR wrong number of arguments for 'lpop' command");
    assert_eq!(c.cmd(&["LPOP", "none"]), Frame::NullBulk);
    assert_eq!(c.cmd(&["LPOP", "none", "1"]), Frame::NullArray);
    assert_eq!(
        c.cmd(&["LMPOP", "2", "none", "l", "RIGHT", "COUNT", "5"]),
        Frame::Array(vec![Frame::bulk("l"), arr(&["b", "a"])])
    );
    assert_eq!(c.cmd(&["LMPOP", "1", "l", "LEFT"]), Frame::NullArray);
    assert_err(&c.cmd(&["LMPOP", "0", "l", "LEFT"]), "ERR numkeys should be greater than 0");
    assert_err(&c.cmd(&["LMPOP", "1", "l", "LEFT", "COUNT", "0"]), "ERR count should be greater than 0");
    assert_err(&c.cmd(&["LMPOP", "1", "l", "UP"]), "ERR syntax error");
}

#[test]
fn lpos_ranks_counts_and_maxlen() {
    let srv = server();
    let mut c = srv.client();
    c.cmd(&["RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c"]);
    assert_eq!(c.cmd(&["LPOS", "l", "c"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["LPOS", "l", "c", "RANK", "-1"]), Frame::Integer(7));
    assert_eq!(
        c.cmd(&["LPOS", "l", "c", "COUNT", "0"]),
        Frame::Array(vec![Frame::Integer(2), Frame::Integer(6), Frame::Integer(7)])
    );
    assert_eq!(c.cmd(&["LPOS", "l", "c", "RANK", "2", "COUNT", "1"]), Frame::Array(vec![Frame::Integer(6)]));
    assert_eq!(c.cmd(&["LPOS", "l", "c", "MAXLEN", "2"]), Frame::NullBulk);
    assert_eq!(c.cmd(&["LPOS", "l", "zz", "COUNT", "3"]), arr(&[]));
    assert_eq!(c.cmd(&["LPOS", "none", "zz"]), Frame::NullBulk);
    assert_err(
        &c.cmd(&["LPOS", "l", "c", "RANK", "0"]),
        "ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list",
    );
    assert_err(&c.cmd(&["LPOS", "l", "c", "COUNT", "-1"]), "ERR COUNT can't be negative");
    assert_err(&c.cmd(&["LPOS", "l", "c", "MAXLEN", "-1"]), "ERR MAXLEN can't be negative");
    assert_err(&c.cmd(&["LPOS", "l", "c", "RANK"]), "ERR syntax error");
}

#[test]
fn resp3_list_shapes() {
    let srv = server();
    let mut c = srv.client();
    resp3(&mut c);
    assert_eq!(c.cmd(&["LPOP", "none"]), Frame::Null);
    assert_eq!(c.cmd(&["LPOP", "none", "3"]), Frame::Null, "RESP3 has one null for every shape");
    assert_eq!(c.cmd(&["LINDEX", "none", "0"]), Frame::Null);
    c.cmd(&["RPUSH", "l", "a"]);
    assert_eq!(c.cmd(&["LPOS", "l", "b"]), Frame::Null);
    assert_eq!(c.cmd(&["BLPOP", "none", "0.01"]), Frame::Null);
    assert_eq!(c.cmd(&["LPOP", "l", "5"]), arr(&["a"]));
}

#[test]
fn blocking_pop_is_served_by_a_push_from_another_client() {
    let srv = server();
    let mut waiter = srv.client();
    let mut pusher = srv.client();
    waiter.send(&["BRPOP", "q1", "q2", "5"]);
    assert!(wait_for(
        || crate::info_num(&crate::info(&mut pusher, "clients"), "blocked_clients") == 1,
        Duration::from_secs(5)
    ));
    assert_eq!(pusher.cmd(&["LPUSH", "q2", "x", "y"]), Frame::Integer(2));
    assert_eq!(waiter.read_frame(), arr(&["q2", "x"]));
    assert_err(&waiter.cmd(&["BLPOP", "q2", "-1"]), "ERR timeout is negative");
    assert_err(&waiter.cmd(&["BLPOP", "q2", "x"]), "ERR timeout is not a float or out of range");
}

#[test]
fn wrongtype_and_the_list_encodings() {
    let srv = server_with(&[("list-max-listpack-size", "4")]);
    let mut c = srv.client();
    ok(&mut c, &["SET", "s", "v"]);
    for args in [
        &["LPUSH", "s", "x"][..],
        &["RPUSHX", "s", "x"],
        &["LRANGE", "s", "0", "-1"],
        &["LLEN", "s"],
        &["LPOP", "s"],
        &["LINDEX", "s", "0"],
        &["LPOS", "s", "x"],
        &["LMOVE", "s", "d", "LEFT", "LEFT"],
    ] {
        assert_err(&c.cmd(args), WRONGTYPE);
    }
    assert_eq!(c.cmd(&["LPUSHX", "none", "x"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXISTS", "none"]), Frame::Integer(0), "LPUSHX creates nothing");
    c.cmd(&["RPUSH", "l", "1", "2", "3", "4"]);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "l"]), Frame::bulk("listpack"));
    c.cmd(&["RPUSH", "l", "5"]);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "l"]), Frame::bulk("quicklist"));
    assert_eq!(c.cmd(&["LRANGE", "l", "2", "4"]), arr(&["3", "4", "5"]), "ranges cross nodes");
}

#[test]
fn lists_through_redis_cli() {
    let srv = server();
    let port = srv.port();
    assert_eq!(redis_cli(port, &["RPUSH", "l", "a", "b c", "3"]), "3\n");
    assert_eq!(redis_cli(port, &["LRANGE", "l", "0", "-1"]), "a\nb c\n3\n");
    assert_eq!(redis_cli(port, &["--no-raw", "LRANGE", "l", "0", "-1"]), "1) \"a\"\n2) \"b c\"\n3) \"3\"\n");
    assert_eq!(redis_cli(port, &["--no-raw", "LRANGE", "none", "0", "-1"]), "(empty array)\n");
    assert_eq!(redis_cli(port, &["--no-raw", "LPOP", "none"]), "(nil)\n");
    assert_eq!(redis_cli(port, &["--no-raw", "LPOS", "l", "3"]), "(integer) 2\n");
    assert_eq!(redis_cli(port, &["--no-raw", "LSET", "l", "9", "x"]), "(error) ERR index out of range\n");
    assert_eq!(redis_cli(port, &["-3", "--no-raw", "LPOP", "none", "2"]), "(nil)\n");
}

#[test]
fn lists_through_redis_py() {
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT, decode_responses=True)
print(r.rpush("l", *"abcde"), r.lrange("l", 1, -2), r.lindex("l", -1), r.lindex("l", 10))
print(r.lpop("l"), r.rpop("l", 2), r.lpop("missing"), r.lpop("missing", 3))
print(r.linsert("l", "AFTER", "b", "bb"), r.lpos("l", "bb"), r.lpos("l", "zz"), r.lrem("l", 0, "b"))
print(r.lmove("l", "m", "LEFT", "RIGHT"), r.lrange("m", 0, -1), r.llen("l"), r.exists("l"))
print(r.blpop(["empty1", "m"], timeout=1), r.blpop("empty1", timeout=0.05), r.exists("m"))
try:
    r.lset("l", 99, "x")
except redis.ResponseError as e:
    print("error:", e)
r.set("s", "v")
try:
    r.lpush("s", "x")
except redis.ResponseError as e:
    print("error:", e)
r3 = redis.Redis(port=PORT, protocol=3, decode_responses=True)
print(r3.lpop("missing", 2), r3.rpush("l3", 1, 2), r3.lrange("l3", 0, -1))
"#,
    );
    let expected = "5 ['b', 'c', 'd'] e None\n\
                    a ['e', 'd'] None None\n\
                    3 1 None 1\n\
                    bb ['bb'] 1 1\n\
                    ('m', 'bb') None 0\n\
                    error: index out of range\n\
                    error: WRONGTYPE Operation against a key holding the wrong kind of value\n\
                    None 2 ['1', '2']\n";
    assert_eq!(out, expected);
}
