//! Sorted sets through the real binary and three real clients, with the shapes a library
//! hides: scores as RESP3 doubles, WITHSCORES as pairs in RESP3 and flat in RESP2, ranges by
//! rank, score and lexicographic order at and past their ends, and Valkey's option errors.

use hotkv_test_support::tools::{python, redis_cli};
use hotkv_test_support::{Frame, RawClient};
use redis::Commands;

use crate::{assert_err, redis_conn, server, server_error, server_with};

fn arr(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(Frame::bulk).collect())
}

fn dbl(s: &str) -> Frame {
    Frame::Double(s.into())
}

/// A `[member, score]` pair as RESP3 sends it.
fn pair(m: &str, score: &str) -> Frame {
    Frame::Array(vec![Frame::bulk(m), dbl(score)])
}

fn resp3(c: &mut RawClient) {
    assert!(matches!(c.cmd(&["HELLO", "3"]), Frame::Map(_)));
}

#[test]
fn sorted_sets_through_the_redis_crate() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let n: i64 = con.zadd_multiple("z", &[(1.5, "a"), (2.0, "b"), (-3.0, "c")]).unwrap();
    assert_eq!(n, 3);
    let score: Option<f64> = con.zscore("z", "a").unwrap();
    assert_eq!(score, Some(1.5));
    let score: Option<f64> = con.zscore("z", "nope").unwrap();
    assert_eq!(score, None);
    let score: f64 = con.zincr("z", "a", 10).unwrap();
    assert_eq!(score, 11.5);
    let all: Vec<(String, f64)> = con.zrange_withscores("z", 0, -1).unwrap();
    assert_eq!(all, vec![("c".into(), -3.0), ("b".into(), 2.0), ("a".into(), 11.5)]);
    let above: Vec<String> = con.zrangebyscore("z", "(-3", "+inf").unwrap();
    assert_eq!(above, ["b", "a"]);
    let n: i64 = con.zcard("z").unwrap();
    assert_eq!(n, 3);
    let rank: Option<i64> = con.zrank("z", "b").unwrap();
    assert_eq!(rank, Some(1));
    let rank: Option<i64> = con.zrevrank("z", "b").unwrap();
    assert_eq!(rank, Some(1));
    let popped: Vec<String> = con.zpopmin("z", 2).unwrap();
    assert_eq!(popped, ["c", "-3", "b", "2"]);
    let n: i64 = con.zrem("z", "a").unwrap();
    assert_eq!(n, 1);
    let exists: bool = con.exists("z").unwrap();
    assert!(!exists, "the emptied sorted set is gone");
    let () = con.set("s", "v").unwrap();
    let err = con.zadd::<_, _, _, i64>("s", "m", 1).unwrap_err();
    assert_eq!(server_error(&err), "WRONGTYPE Operation against a key holding the wrong kind of value");
}

#[test]
fn zadd_options_and_their_conflicts() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["ZADD", "z", "1", "a", "2", "b"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["ZADD", "z", "NX", "5", "a", "3", "c"]), Frame::Integer(1), "NX leaves a alone");
    assert_eq!(c.cmd(&["ZSCORE", "z", "a"]), Frame::bulk("1"));
    assert_eq!(c.cmd(&["ZADD", "z", "XX", "CH", "5", "a", "9", "new"]), Frame::Integer(1), "XX adds nothing");
    assert_eq!(c.cmd(&["ZADD", "z", "GT", "CH", "4", "a", "7", "b"]), Frame::Integer(1), "GT only raises");
    assert_eq!(c.cmd(&["ZADD", "z", "LT", "4", "a"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["ZSCORE", "z", "a"]), Frame::bulk("4"));
    assert_eq!(c.cmd(&["ZADD", "z", "INCR", "0.5", "a"]), Frame::bulk("4.5"));
    assert_eq!(c.cmd(&["ZADD", "z", "NX", "INCR", "1", "a"]), Frame::NullBulk, "an INCR that NX refuses is nil");
    assert_err(
        &c.cmd(&["ZADD", "z", "XX", "NX", "1", "a"]),
        "ERR XX and NX options at the same time are not compatible",
    );
    assert_err(
        &c.cmd(&["ZADD", "z", "GT", "LT", "1", "a"]),
        "ERR GT, LT, and/or NX options at the same time are not compatible",
    );
    assert_err(
        &c.cmd(&["ZADD", "z", "INCR", "1", "a", "2", "b"]),
        "ERR INCR option supports a single increment-element pair",
    );
    assert_err(&c.cmd(&["ZADD", "z", "x", "a"]), "ERR value is not a valid float");
    assert_err(&c.cmd(&["ZADD", "z", "nan", "a"]), "ERR value is not a valid float");
    assert_err(&c.cmd(&["ZADD", "z", "1", "a", "2"]), "ERR syntax error");
    assert_eq!(c.cmd(&["ZADD", "inf", "+inf", "top"]), Frame::Integer(1));
    assert_err(&c.cmd(&["ZINCRBY", "inf", "-inf", "top"]), "ERR resulting score is not a number (NaN)");
    assert_eq!(c.cmd(&["ZSCORE", "inf", "top"]), Frame::bulk("inf"));
}

#[test]
fn ranges_by_rank_score_and_lex() {
    let srv = server();
    let mut c = srv.client();
    c.cmd(&["ZADD", "z", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e"]);
    c.cmd(&["ZADD", "n", "1", "one", "2", "two", "3", "three"]);
    assert_eq!(c.cmd(&["ZRANGE", "n", "-100", "100"]), arr(&["one", "two", "three"]));
    assert_eq!(c.cmd(&["ZRANGE", "n", "2", "1"]), arr(&[]));
    assert_eq!(c.cmd(&["ZRANGE", "n", "-1", "-1", "WITHSCORES"]), arr(&["three", "3"]));
    assert_eq!(c.cmd(&["ZRANGE", "n", "(1", "3", "BYSCORE", "LIMIT", "1", "5"]), arr(&["three"]));
    assert_eq!(c.cmd(&["ZRANGE", "n", "+inf", "-inf", "BYSCORE", "REV"]), arr(&["three", "two", "one"]));
    assert_eq!(c.cmd(&["ZRANGEBYSCORE", "n", "-inf", "+inf", "LIMIT", "0", "-1"]), arr(&["one", "two", "three"]));
    assert_eq!(c.cmd(&["ZRANGEBYSCORE", "n", "5", "10"]), arr(&[]));
    assert_eq!(c.cmd(&["ZCOUNT", "n", "(1", "(3"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["ZRANGE", "z", "[b", "(d", "BYLEX"]), arr(&["b", "c"]));
    assert_eq!(c.cmd(&["ZRANGEBYLEX", "z", "-", "+", "LIMIT", "3", "10"]), arr(&["d", "e"]));
    assert_eq!(c.cmd(&["ZREVRANGEBYLEX", "z", "+", "(c"]), arr(&["e", "d"]));
    assert_eq!(c.cmd(&["ZLEXCOUNT", "z", "(a", "[c"]), Frame::Integer(2));
    assert_err(&c.cmd(&["ZRANGEBYSCORE", "n", "x", "1"]), "ERR min or max is not a float");
    assert_err(&c.cmd(&["ZRANGEBYLEX", "z", "a", "+"]), "ERR min or max not valid string range item");
    assert_err(
        &c.cmd(&["ZRANGE", "n", "0", "1", "LIMIT", "0", "1"]),
        "ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
    );
    assert_err(
        &c.cmd(&["ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES"]),
        "ERR syntax error, WITHSCORES not supported in combination with BYLEX",
    );
    assert_eq!(c.cmd(&["ZRANGE", "none", "0", "-1"]), arr(&[]));
    assert_eq!(c.cmd(&["ZREMRANGEBYRANK", "n", "0", "-2"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["ZREMRANGEBYSCORE", "n", "-inf", "+inf"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXISTS", "n"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["ZREMRANGEBYLEX", "z", "-", "+"]), Frame::Integer(5));
    assert_eq!(c.cmd(&["EXISTS", "z"]), Frame::Integer(0));
}

#[test]
fn resp2_and_resp3_reply_shapes() {
    let srv = server();
    let mut c2 = srv.client();
    c2.cmd(&["ZADD", "z", "1.5", "a", "2", "b"]);
    assert_eq!(c2.cmd(&["ZSCORE", "z", "a"]), Frame::bulk("1.5"));
    assert_eq!(c2.cmd(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]), arr(&["a", "1.5", "b", "2"]));
    assert_eq!(c2.cmd(&["ZRANDMEMBER", "z", "-2", "WITHSCORES"]).items().len(), 4, "flat in RESP2");
    assert_eq!(c2.cmd(&["ZMSCORE", "z", "a", "x"]), Frame::Array(vec![Frame::bulk("1.5"), Frame::NullBulk]));
    assert_eq!(c2.cmd(&["ZPOPMIN", "none"]), arr(&[]));
    let mut c = srv.client();
    resp3(&mut c);
    assert_eq!(c.cmd(&["ZSCORE", "z", "a"]), dbl("1.5"));
    assert_eq!(c.cmd(&["ZSCORE", "z", "x"]), Frame::Null);
    assert_eq!(c.cmd(&["ZINCRBY", "z", "1", "b"]), dbl("3"));
    assert_eq!(c.cmd(&["ZMSCORE", "z", "a", "x"]), Frame::Array(vec![dbl("1.5"), Frame::Null]));
    assert_eq!(c.cmd(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]), Frame::Array(vec![pair("a", "1.5"), pair("b", "3")]));
    assert_eq!(c.cmd(&["ZRANGE", "z", "0", "-1"]), arr(&["a", "b"]), "without scores the members stay flat");
    let Frame::Array(picks) = c.cmd(&["ZRANDMEMBER", "z", "-3", "WITHSCORES"]) else { panic!("ZRANDMEMBER") };
    assert_eq!(picks.len(), 3);
    for p in &picks {
        assert!(*p == pair("a", "1.5") || *p == pair("b", "3"), "{p}");
    }
    assert_eq!(c.cmd(&["ZRANDMEMBER", "none", "5", "WITHSCORES"]), Frame::Array(vec![]));
    assert_err(&c.cmd(&["ZRANDMEMBER", "z", "-9223372036854775807", "WITHSCORES"]), "ERR value is out of range");
    assert_eq!(c.cmd(&["ZPOPMAX", "z"]), Frame::Array(vec![Frame::bulk("b"), dbl("3")]), "one pop is flat");
    assert_eq!(c.cmd(&["ZADD", "z", "INCR", "1", "a"]), dbl("2.5"));
    assert_eq!(c.cmd(&["ZPOPMIN", "z", "5"]), Frame::Array(vec![pair("a", "2.5")]), "a counted pop is pairs");
    c.cmd(&["ZADD", "m", "1", "x"]);
    assert_eq!(
        c.cmd(&["ZMPOP", "1", "m", "MIN"]),
        Frame::Array(vec![Frame::bulk("m"), Frame::Array(vec![pair("x", "1")])])
    );
    assert_eq!(c.cmd(&["ZMPOP", "1", "m", "MIN"]), Frame::Null);
}

#[test]
fn zset_encodings_follow_their_thresholds() {
    let srv = server_with(&[("zset-max-listpack-entries", "3"), ("zset-max-listpack-value", "8")]);
    let mut c = srv.client();
    c.cmd(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "z"]), Frame::bulk("listpack"));
    c.cmd(&["ZADD", "z", "4", "d"]);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "z"]), Frame::bulk("skiplist"));
    c.cmd(&["ZADD", "long", "1", "123456789"]);
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "long"]), Frame::bulk("skiplist"), "a member over the value limit");
    // ZRANGESTORE builds the destination for its own size.
    assert_eq!(c.cmd(&["ZRANGESTORE", "small", "z", "0", "1"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "small"]), Frame::bulk("listpack"));
    assert_eq!(c.cmd(&["ZRANGESTORE", "empty", "z", "5", "9"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["EXISTS", "empty"]), Frame::Integer(0), "an empty result stores nothing");
}

#[test]
fn sorted_sets_through_redis_cli() {
    let srv = server();
    let port = srv.port();
    assert_eq!(redis_cli(port, &["ZADD", "z", "1", "a", "2.5", "b"]), "2\n");
    assert_eq!(redis_cli(port, &["ZRANGE", "z", "0", "-1", "WITHSCORES"]), "a\n1\nb\n2.5\n");
    assert_eq!(redis_cli(port, &["--no-raw", "ZSCORE", "z", "b"]), "\"2.5\"\n");
    assert_eq!(redis_cli(port, &["-3", "--no-raw", "ZSCORE", "z", "b"]), "(double) 2.5\n");
    assert_eq!(
        redis_cli(port, &["-3", "--no-raw", "ZRANGE", "z", "0", "-1", "WITHSCORES"]),
        "1) 1) \"a\"\n   2) (double) 1\n2) 1) \"b\"\n   2) (double) 2.5\n"
    );
    assert_eq!(
        redis_cli(port, &["--no-raw", "ZADD", "z", "XX", "NX", "1", "a"]),
        "(error) ERR XX and NX options at the same time are not compatible\n"
    );
}

#[test]
fn sorted_sets_through_redis_py() {
    let srv = server();
    let out = python(
        srv.port(),
        r#"
r = redis.Redis(port=PORT, decode_responses=True)
print(r.zadd("z", {"a": 1, "b": 2.5, "c": -1}), r.zscore("z", "b"), r.zscore("z", "x"))
print(r.zrange("z", 0, -1, withscores=True), r.zrevrange("z", 0, 0))
print(r.zrangebyscore("z", "(-1", "+inf"), r.zcount("z", "-inf", "(2.5"), r.zrank("z", "a"))
print(r.zincrby("z", 2, "a"), r.zmscore("z", ["a", "nope"]), r.zpopmax("z"))
print(r.zadd("z", {"a": 10}, gt=True, ch=True), r.zadd("z", {"a": 1}, gt=True, ch=True))
print(r.zrandmember("z", 2, withscores=True) is not None, r.zcard("z"), r.zrem("z", "a", "c"), r.exists("z"))
r3 = redis.Redis(port=PORT, protocol=3, decode_responses=True)
r3.zadd("y", {"m": 0.5})
print(r3.zscore("y", "m"), r3.zrange("y", 0, -1, withscores=True), r3.zpopmin("y"))
"#,
    );
    let expected = "3 2.5 None\n\
                    [('c', -1.0), ('a', 1.0), ('b', 2.5)] ['b']\n\
                    ['a', 'b'] 2 1\n\
                    3.0 [3.0, None] [('a', 3.0)]\n\
                    1 0\n\
                    True 3 2 1\n\
                    0.5 [['m', 0.5]] ['m', 0.5]\n";
    assert_eq!(out, expected);
}
