//! SORT and SORT_RO through the real binary: lists, sets and sorted sets sorted by themselves
//! or by other keys (`BY w_*`, `BY h_*->f`), GET patterns, ALPHA/DESC/LIMIT, STORE and what a
//! replica gets of it, Valkey's errors and cluster-mode refusals, reply shapes in RESP2 and
//! RESP3, and SORTs reading pattern keys while other clients write them, which must neither
//! deadlock nor see half of a write.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use hotkv_test_support::tools::redis_cli;
use hotkv_test_support::{Frame, RawClient, wait_for};

use crate::{assert_err, ok, redis_conn, server, server_with};

fn arr(items: &[&str]) -> Frame {
    Frame::Array(items.iter().map(Frame::bulk).collect())
}

fn sort(con: &mut redis::Connection, args: &[&str]) -> redis::RedisResult<Vec<Option<String>>> {
    redis::cmd("SORT").arg(args).query(con)
}

#[test]
fn lists_sets_and_sorted_sets_by_themselves_and_by_other_keys() {
    let srv = server();
    let mut con = redis_conn(&srv);
    let some = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    redis::cmd("RPUSH").arg(&["l", "3", "1", "2", "10"]).exec(&mut con).unwrap();
    redis::cmd("SADD").arg(&["s", "3", "1", "2", "10"]).exec(&mut con).unwrap();
    redis::cmd("ZADD").arg(&["z", "4", "3", "3", "1", "2", "2", "1", "10"]).exec(&mut con).unwrap();
    for key in ["l", "s", "z"] {
        assert_eq!(sort(&mut con, &[key]).unwrap(), some(&["1", "2", "3", "10"]), "{key}");
        assert_eq!(sort(&mut con, &[key, "DESC"]).unwrap(), some(&["10", "3", "2", "1"]), "{key}");
        assert_eq!(sort(&mut con, &[key, "ALPHA"]).unwrap(), some(&["1", "10", "2", "3"]), "{key}");
        assert_eq!(sort(&mut con, &[key, "LIMIT", "1", "2"]).unwrap(), some(&["2", "3"]), "{key}");
    }
    assert_eq!(sort(&mut con, &["l", "BY", "nosort"]).unwrap(), some(&["3", "1", "2", "10"]));
    assert_eq!(sort(&mut con, &["z", "BY", "nosort", "DESC", "LIMIT", "0", "2"]).unwrap(), some(&["3", "1"]));
    // BY and GET: string keys and hash fields, missing ones as nil.
    redis::cmd("MSET")
        .arg(&["w_1", "40", "w_2", "30", "w_3", "20", "w_10", "10", "n_1", "one"])
        .exec(&mut con)
        .unwrap();
    for (i, w) in [("1", "4"), ("2", "3"), ("3", "2"), ("10", "1")] {
        redis::cmd("HSET").arg(&[&format!("h_{i}"), "w", w, "name", &format!("n{i}")]).exec(&mut con).unwrap();
    }
    assert_eq!(sort(&mut con, &["s", "BY", "w_*"]).unwrap(), some(&["10", "3", "2", "1"]));
    assert_eq!(sort(&mut con, &["z", "BY", "h_*->w", "LIMIT", "0", "1"]).unwrap(), some(&["10"]));
    assert_eq!(
        sort(&mut con, &["l", "BY", "w_*", "DESC", "GET", "#", "GET", "n_*", "GET", "h_*->name"]).unwrap(),
        vec![
            Some("1".into()),
            Some("one".into()),
            Some("n1".into()),
            Some("2".into()),
            None,
            Some("n2".into()),
            Some("3".into()),
            None,
            Some("n3".into()),
            Some("10".into()),
            None,
            Some("n10".into()),
        ]
    );
    let ro: Vec<String> =
        redis::cmd("SORT_RO").arg(&["l", "BY", "h_*->w", "GET", "h_*->name"]).query(&mut con).unwrap();
    assert_eq!(ro, ["n10", "n3", "n2", "n1"]);
    // redis-cli prints the same.
    assert_eq!(
        redis_cli(srv.port(), &["SORT", "l", "BY", "w_*", "GET", "#", "GET", "w_*"]),
        "10\n10\n3\n20\n2\n30\n1\n40\n"
    );
}

#[test]
fn reply_shapes_in_resp2_and_resp3() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["RPUSH", "l", "b", "a"]).int(), 2);
    ok(&mut c, &["SET", "v_a", "x"]);
    let want2 = Frame::Array(vec![Frame::bulk("a"), Frame::bulk("x"), Frame::bulk("b"), Frame::NullBulk]);
    assert_eq!(c.cmd(&["SORT", "l", "ALPHA", "GET", "#", "GET", "v_*"]), want2);
    assert_eq!(c.cmd(&["SORT", "nokey"]), Frame::Array(vec![]));
    assert!(matches!(c.cmd(&["HELLO", "3"]), Frame::Map(_)));
    let want3 = Frame::Array(vec![Frame::bulk("a"), Frame::bulk("x"), Frame::bulk("b"), Frame::Null]);
    assert_eq!(c.cmd(&["SORT_RO", "l", "ALPHA", "GET", "#", "GET", "v_*"]), want3);
    assert_eq!(c.cmd(&["SORT", "l", "ALPHA", "STORE", "dst"]), Frame::Integer(2));
    // COMMAND knows both, with SORT's destination among its keys.
    let keys = c.cmd(&["COMMAND", "GETKEYS", "SORT", "abc", "BY", "w_*", "STORE", "def"]);
    assert_eq!(keys, Frame::Array(vec![Frame::bulk("abc"), Frame::bulk("def")]));
    let keys = c.cmd(&["COMMAND", "GETKEYS", "SORT_RO", "abc", "GET", "x_*"]);
    assert_eq!(keys, Frame::Array(vec![Frame::bulk("abc")]));
    let info = c.cmd(&["COMMAND", "INFO", "sort", "sort_ro"]);
    let flags = |row: &Frame| row.items()[2].items().iter().map(Frame::text).collect::<Vec<_>>();
    assert_eq!(flags(&info.items()[0]), ["write", "denyoom", "movablekeys"]);
    assert_eq!(flags(&info.items()[1]), ["readonly", "movablekeys"]);
}

#[test]
fn bad_input_gets_valkeys_errors() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "str", "x"]);
    assert_eq!(c.cmd(&["RPUSH", "l", "1", "2", "x"]).int(), 3);
    assert_err(&c.cmd(&["SORT", "str"]), "WRONGTYPE Operation against a key holding the wrong kind of value");
    assert_err(&c.cmd(&["SORT", "l"]), "ERR One or more scores can't be converted into double");
    assert_err(&c.cmd(&["SORT", "l", "STORE", "d"]), "ERR One or more scores can't be converted into double");
    assert_eq!(c.cmd(&["EXISTS", "d"]).int(), 0, "a failed sort stores nothing");
    assert_err(&c.cmd(&["SORT", "l", "LIMIT", "0"]), "ERR syntax error");
    assert_err(&c.cmd(&["SORT", "l", "LIMIT", "zero", "1"]), "ERR value is not an integer or out of range");
    assert_err(
        &c.cmd(&["SORT", "l", "LIMIT", "0", "99999999999999999999"]),
        "ERR value is not an integer or out of range",
    );
    assert_err(&c.cmd(&["SORT", "l", "ALPHA", "NOPE"]), "ERR syntax error");
    assert_err(&c.cmd(&["SORT_RO", "l", "STORE", "d"]), "ERR syntax error");
    assert_err(&c.cmd(&["SORT"]), "ERR wrong number of arguments for 'sort' command");
    // LIMIT far out of range is clamped, never an error.
    let max = i64::MAX.to_string();
    let min = i64::MIN.to_string();
    assert_eq!(c.cmd(&["SORT", "l", "ALPHA", "LIMIT", "2", &max]), arr(&["x"]));
    assert_eq!(c.cmd(&["SORT", "l", "ALPHA", "LIMIT", &min, "1"]), arr(&["1"]));
    assert_eq!(c.cmd(&["SORT", "l", "ALPHA", "LIMIT", &max, &max]), arr(&[]));
    assert_eq!(c.cmd(&["SORT", "l", "ALPHA", "LIMIT", "1", &min]), arr(&["2", "x"]));
    // Missing pattern keys: weight 0, GET nil; keys of other types count as missing.
    assert_eq!(c.cmd(&["SORT", "l", "BY", "nokey_*", "GET", "#"]), arr(&["1", "2", "x"]));
    assert_eq!(c.cmd(&["SORT", "l", "BY", "str", "GET", "str_*"]), Frame::Array(vec![Frame::NullBulk; 3]));
}

#[test]
fn store_replaces_or_deletes_the_destination_and_reaches_a_replica() {
    let (primary, replica) = (server(), server());
    let mut r = replica.client();
    ok(&mut r, &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    let mut p = primary.client();
    assert_eq!(p.cmd(&["SADD", "s", "b", "c", "a", "10", "9"]).int(), 5);
    assert_eq!(p.cmd(&["HSET", "dst", "f", "v"]).int(), 1);
    ok(&mut p, &["SET", "gone", "x"]);
    ok(&mut p, &["MSET", "w_a", "3", "w_b", "1", "w_c", "2"]);
    assert_eq!(p.cmd(&["SORT", "s", "BY", "nosort", "STORE", "dst"]), Frame::Integer(5));
    assert_eq!(
        p.cmd(&["SORT", "s", "BY", "w_*", "LIMIT", "2", "3", "GET", "#", "GET", "w_*", "STORE", "byw"]),
        Frame::Integer(6)
    );
    assert_eq!(p.cmd(&["SORT", "nokey", "STORE", "gone"]), Frame::Integer(0));
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]).int(), 1);
    for c in [&mut p, &mut r] {
        assert_eq!(c.cmd(&["LRANGE", "dst", "0", "-1"]), arr(&["10", "9", "a", "b", "c"]), "a stored set is sorted");
        assert_eq!(c.cmd(&["LRANGE", "byw", "0", "-1"]), arr(&["b", "1", "c", "2", "a", "3"]));
        assert_eq!(c.cmd(&["EXISTS", "gone"]).int(), 0);
    }
}

#[test]
fn cluster_mode_refuses_patterns_that_may_name_keys_of_another_slot() {
    let srv = server_with(&[("cluster-enabled", "yes")]);
    let mut c = srv.client();
    ok(&mut c, &["CLUSTER", "ADDSLOTSRANGE", "0", "16383"]);
    assert!(wait_for(|| c.cmd(&["CLUSTER", "INFO"]).text().contains("cluster_state:ok"), Duration::from_secs(10)));
    assert_eq!(c.cmd(&["LPUSH", "{a}mylist", "1", "2", "3"]).int(), 3);
    ok(
        &mut c,
        &["MSET", "{a}by1", "20", "{a}by2", "30", "{a}by3", "0", "{a}get1", "200", "{a}get2", "100", "{a}get3", "30"],
    );
    let by = "ERR BY option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.";
    let get =
        "ERR GET option of SORT denied in Cluster mode when keys formed by the pattern may be in different slots.";
    for cmd in ["SORT", "SORT_RO"] {
        assert_err(&c.cmd(&[cmd, "{a}mylist", "BY", "by*"]), by);
        assert_eq!(c.cmd(&[cmd, "{a}mylist", "BY", "{a}by*"]), arr(&["3", "1", "2"]));
        assert_err(&c.cmd(&[cmd, "{a}mylist", "BY", "{a}by*", "GET", "get*"]), get);
        assert_eq!(c.cmd(&[cmd, "{a}mylist", "BY", "{a}by*", "GET", "{a}get*"]), arr(&["30", "200", "100"]));
        assert_err(&c.cmd(&[cmd, "{a}mylist", "GET", "#"]), get);
        assert_eq!(c.cmd(&[cmd, "{a}mylist", "BY", "nosort"]), arr(&["3", "2", "1"]));
    }
    assert_err(
        &c.cmd(&["SORT", "{a}mylist", "STORE", "{b}x"]),
        "CROSSSLOT Keys in request don't hash to the same slot",
    );
    assert_eq!(c.cmd(&["SORT", "{a}mylist", "STORE", "{a}x"]), Frame::Integer(3));
}

/// Writers replace every weight at once (MSET, MULTI/EXEC) and move elements around while
/// other clients sort by those weights, get them, store results and run SORT inside
/// transactions and scripts. Keys spread over many slots, so a SORT's pattern locks come in
/// every order relative to the writers' locks. Every call must answer (no deadlock), and every
/// SORT must see each write whole: all the weights it gets are from the same MSET.
#[test]
fn sorts_with_patterns_never_deadlock_nor_see_half_a_write() {
    const N: usize = 40;
    let srv = server();
    let mut c = srv.client();
    let elems: Vec<String> = (0..N).map(|i| i.to_string()).collect();
    let mut rpush = vec!["RPUSH".to_string(), "list".into()];
    rpush.extend(elems.iter().cloned());
    assert_eq!(c.cmd(&rpush).int(), N as i64);
    let mset = |g: usize| {
        let mut argv = vec!["MSET".to_string()];
        for e in &elems {
            argv.extend([format!("w_{e}"), format!("{g}")]);
            argv.extend([format!("h_{e}"), format!("{g}")]);
        }
        argv
    };
    assert_eq!(c.cmd(&mset(0)), Frame::ok());
    let stop = Arc::new(AtomicBool::new(false));
    let sorts = Arc::new(AtomicUsize::new(0));
    let deadline = Instant::now() + Duration::from_secs(3);
    std::thread::scope(|s| {
        for w in 0..2 {
            let (srv, stop, mset) = (&srv, stop.clone(), &mset);
            s.spawn(move || {
                let mut c: RawClient = srv.client();
                let mut g = 1 + w;
                while !stop.load(Ordering::Relaxed) {
                    let mut argv = mset(g);
                    if g % 2 == 0 {
                        // The same write with its keys in the other order.
                        let pairs: Vec<_> = argv[1..].chunks(2).rev().flatten().cloned().collect();
                        argv.truncate(1);
                        argv.extend(pairs);
                    }
                    if g % 3 == 0 {
                        ok(&mut c, &["MULTI"]);
                        assert_eq!(c.cmd(&argv), Frame::Simple("QUEUED".into()));
                        assert_eq!(c.cmd(&["LMOVE", "list", "list", "LEFT", "RIGHT"]), Frame::Simple("QUEUED".into()));
                        assert!(matches!(c.cmd(&["EXEC"]), Frame::Array(_)));
                    } else {
                        assert_eq!(c.cmd(&argv), Frame::ok());
                        assert!(!c.cmd(&["LMOVE", "list", "list", "RIGHT", "LEFT"]).is_error());
                    }
                    g += 2;
                }
            });
        }
        for r in 0..3 {
            let (srv, stop, sorts) = (&srv, stop.clone(), sorts.clone());
            s.spawn(move || {
                let mut c: RawClient = srv.client();
                let mut i = 0;
                while !stop.load(Ordering::Relaxed) {
                    i += 1;
                    let reply = match (r + i) % 4 {
                        0 => c.cmd(&["SORT", "list", "BY", "w_*", "GET", "w_*", "GET", "h_*"]),
                        1 => c.cmd(&[
                            "SORT_RO", "list", "BY", "h_*", "DESC", "LIMIT", "0", "20", "GET", "h_*", "GET", "w_*",
                        ]),
                        2 => {
                            ok(&mut c, &["MULTI"]);
                            assert_eq!(
                                c.cmd(&["SORT", "list", "BY", "w_*", "GET", "w_*", "GET", "h_*"]),
                                Frame::Simple("QUEUED".into())
                            );
                            c.cmd(&["EXEC"]).items()[0].clone()
                        }
                        _ => c.cmd(&[
                            "EVAL",
                            "return redis.call('SORT', KEYS[1], 'BY', 'w_*', 'GET', 'w_*', 'GET', 'h_*')",
                            "1",
                            "list",
                        ]),
                    };
                    let values: Vec<String> = reply.items().iter().map(Frame::text).collect();
                    assert!(!values.is_empty(), "{reply}");
                    assert!(values.iter().all(|v| *v == values[0]), "a SORT saw half of a write: {values:?}");
                    let stored = c.cmd(&["SORT", "list", "BY", "w_*", "GET", "h_*", "STORE", &format!("out{r}")]);
                    assert_eq!(stored, Frame::Integer(N as i64));
                    sorts.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
        while Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
    });
    assert!(sorts.load(Ordering::Relaxed) > 10, "sorts ran: {}", sorts.load(Ordering::Relaxed));
    // Everyone answered; the server still does.
    assert_eq!(c.cmd(&["LLEN", "list"]).int(), N as i64);
}

/// Valkey's acl-v2 "Test sort with ACL permissions": BY and GET patterns need a selector that
/// allows SORT and may read every key; GET `#` too.
#[test]
fn patterns_need_read_access_to_every_key() {
    let srv = server();
    let mut admin = srv.client();
    ok(&mut admin, &["SET", "v1", "1"]);
    assert_eq!(admin.cmd(&["LPUSH", "mylist", "1"]).int(), 1);
    let mut c = srv.client();
    let by = "ERR BY option of SORT denied due to insufficient ACL permissions.";
    let get = "ERR GET option of SORT denied due to insufficient ACL permissions.";
    for (i, rules) in [&["(+sort ~mylist)"][..], &["(+sort ~mylist ~v*)"], &["(+sort ~mylist %W~*)"]].iter().enumerate()
    {
        let mut argv = vec!["ACL", "SETUSER", "sorter", "reset", "on", "nopass"];
        argv.extend(rules.iter());
        ok(&mut admin, &argv);
        if i == 0 {
            ok(&mut c, &["AUTH", "sorter", "x"]);
        }
        assert_err(&c.cmd(&["SORT", "mylist", "BY", "v*"]), by);
        assert_err(&c.cmd(&["SORT", "mylist", "GET", "v*"]), get);
        assert_err(&c.cmd(&["SORT", "mylist", "GET", "#"]), get);
        assert_eq!(c.cmd(&["SORT", "mylist", "BY", "nosort"]), arr(&["1"]), "a constant BY reads nothing");
    }
    ok(&mut admin, &["ACL", "SETUSER", "sorter", "(+sort ~mylist %R~*)"]);
    assert_eq!(c.cmd(&["SORT", "mylist", "BY", "v*"]), arr(&["1"]));
    assert_eq!(c.cmd(&["SORT", "mylist", "BY", "v*", "GET", "v*"]), arr(&["1"]));
    // In a transaction and a script too.
    ok(
        &mut admin,
        &["ACL", "SETUSER", "sorter", "reset", "on", "nopass", "+sort", "+multi", "+exec", "+eval", "~mylist"],
    );
    ok(&mut c, &["MULTI"]);
    assert_eq!(c.cmd(&["SORT", "mylist", "BY", "v*"]), Frame::Simple("QUEUED".into()));
    assert_err(&c.cmd(&["EXEC"]).items()[0], by);
    let r = c.cmd(&["EVAL", "return redis.pcall('SORT', KEYS[1], 'GET', 'v*')", "1", "mylist"]);
    assert_err(&r, get);
}
