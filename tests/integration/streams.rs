//! Streams: the entry commands and their errors, DUMP/RESTORE against redis-server 7.0 (whose
//! nodes must be byte for byte ours), hostile RESTORE payloads, and a stream through an RDB
//! reload.

use hotkv_test_support::{Frame, RawClient};

use crate::dump_restore::redis_tool;

fn c() -> (hotkv_test_support::TestServer, RawClient) {
    let s = crate::server();
    let c = s.client();
    (s, c)
}

fn dump(c: &mut RawClient, key: &str) -> Vec<u8> {
    match c.cmd(&["DUMP", key]) {
        Frame::Bulk(b) => b,
        other => panic!("DUMP {key}: {other}"),
    }
}

/// Builds the same history on a server: nodes split by count, deletions, an exact trim, ids
/// with every sequence shape, fields that differ from the node's master entry.
fn build(c: &mut RawClient, key: &str) {
    for i in 1..=130 {
        let id = format!("{i}-{}", i % 3);
        let reply = c.cmd(&["XADD", key, &id, "item", &i.to_string(), "f2", &format!("x{i}")]);
        assert!(!reply.is_error(), "{reply}");
    }
    c.cmd(&["XADD", key, "200-0", "other", "1"]);
    c.cmd(&["XADD", key, "300-0", "big", &"v".repeat(5000)]);
    assert_eq!(c.cmd(&["XDEL", key, "5-2", "131-0", "7-1"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["XTRIM", key, "MAXLEN", "120"]), Frame::Integer(10));
    c.cmd(&["XADD", key, "301-0", "item", "2", "f2", "x"]);
}

#[test]
fn entry_commands_and_their_errors() {
    let (_s, mut c) = c();
    assert_eq!(c.cmd(&["XADD", "s", "1-1", "a", "1"]), Frame::bulk("1-1"));
    assert_eq!(c.cmd(&["XADD", "s", "1-*", "a", "2"]), Frame::bulk("1-2"));
    let cases: &[(&[&str], &str)] = &[
        (
            &["XADD", "s", "1-1", "a", "1"],
            "ERR The ID specified in XADD is equal or smaller than the target stream top item",
        ),
        (&["XADD", "s", "0-0", "a", "1"], "ERR The ID specified in XADD must be greater than 0-0"),
        (&["XADD", "s", "1-x", "a", "1"], "ERR Invalid stream ID specified as stream command argument"),
        (&["XADD", "s", "-1", "a", "1"], "ERR Invalid stream ID specified as stream command argument"),
        (&["XADD", "s", "*", "a"], "ERR wrong number of arguments for 'xadd' command"),
        (&["XADD", "s", "MAXLEN", "-1", "*", "a", "1"], "ERR The MAXLEN argument must be >= 0."),
        (
            &["XADD", "s", "MAXLEN", "1", "MINID", "1", "*", "a", "1"],
            "ERR syntax error, MAXLEN and MINID options at the same time are not compatible",
        ),
        (
            &["XADD", "s", "MAXLEN", "1", "LIMIT", "10", "*", "a", "1"],
            "ERR syntax error, LIMIT cannot be used without the special ~ option",
        ),
        (
            &["XTRIM", "s", "LIMIT", "1"],
            "ERR syntax error, LIMIT cannot be used without specifying a trimming strategy",
        ),
        (&["XTRIM", "s", "FOO", "1"], "ERR syntax error"),
        (&["XRANGE", "s", "(-", "+"], "ERR Invalid stream ID specified as stream command argument"),
        (&["XRANGE", "s", "-", "+", "COUNT"], "ERR syntax error"),
        (&["XRANGE", "s", "(18446744073709551615-18446744073709551615", "+"], "ERR invalid start ID for the interval"),
        (&["XRANGE", "s", "-", "(0-0"], "ERR invalid end ID for the interval"),
        (&["XSETID", "nokey", "1-1"], "ERR no such key"),
        (&["XSETID", "s", "1-0"], "ERR The ID specified in XSETID is smaller than the target stream top item"),
        (
            &["XSETID", "s", "5-0", "ENTRIESADDED", "1"],
            "ERR The entries_added specified in XSETID is smaller than the target stream length",
        ),
        (
            &["XSETID", "s", "5-0", "MAXDELETEDID", "6-0"],
            "ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
        ),
        (&["XINFO", "STREAM", "nokey"], "ERR no such key"),
    ];
    for (argv, want) in cases {
        assert_eq!(c.cmd(argv), Frame::error(want), "{argv:?}");
    }
    c.cmd(&["SET", "str", "x"]);
    for argv in [&["XADD", "str", "*", "a", "1"][..], &["XLEN", "str"], &["XRANGE", "str", "-", "+"]] {
        assert!(c.cmd(argv).error_text().unwrap().starts_with("WRONGTYPE"), "{argv:?}");
    }
    // A huge COUNT allocates nothing up front.
    let all = c.cmd(&["XRANGE", "s", "-", "+", "COUNT", "9223372036854775807"]);
    assert_eq!(all.items().len(), 2);
    assert_eq!(c.cmd(&["XREVRANGE", "s", "+", "-", "COUNT", "1"]).items()[0].items()[0], Frame::bulk("1-2"));
    assert_eq!(c.cmd(&["XRANGE", "s", "(1-1", "+"]).items().len(), 1);
    assert!(c.cmd(&["XRANGE", "s", "-", "+", "COUNT", "0"]).is_null());
    assert_eq!(c.cmd(&["XADD", "new", "NOMKSTREAM", "*", "a", "1"]), Frame::NullBulk);
    assert_eq!(c.cmd(&["EXISTS", "new"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["TYPE", "s"]), Frame::simple("stream"));
    assert_eq!(c.cmd(&["OBJECT", "ENCODING", "s"]), Frame::bulk("stream"));
    assert!(c.cmd(&["MEMORY", "USAGE", "s"]).int() > 50);
    assert_eq!(c.cmd(&["SCAN", "0", "TYPE", "stream"]).items()[1], Frame::Array(vec![Frame::bulk("s")]));
    assert_eq!(c.cmd(&["COPY", "s", "s2"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["RENAME", "s2", "s3"]), Frame::ok());
    assert_eq!(c.cmd(&["XLEN", "s3"]), Frame::Integer(2));
    assert_eq!(c.cmd(&["XDEL", "s", "1-1", "1-2", "9-9"]), Frame::Integer(2));
    // Emptied streams stay, with their last id.
    assert_eq!(c.cmd(&["XLEN", "s"]), Frame::Integer(0));
    let info = c.cmd(&["XINFO", "STREAM", "s"]);
    assert_eq!(info.field("last-generated-id"), Some(Frame::bulk("1-2")));
    assert_eq!(info.field("max-deleted-entry-id"), Some(Frame::bulk("1-2")));
    assert_eq!(info.field("entries-added"), Some(Frame::Integer(2)));
    assert_eq!(c.cmd(&["XSETID", "s", "10-0", "ENTRIESADDED", "5", "MAXDELETEDID", "3-0"]), Frame::ok());
    let info = c.cmd(&["XINFO", "STREAM", "s"]);
    assert_eq!(info.field("max-deleted-entry-id"), Some(Frame::bulk("3-0")));
    assert_eq!(c.cmd(&["XADD", "s", "10-*", "a", "1"]), Frame::bulk("10-1"));
}

#[test]
fn keyspace_events_of_stream_commands() {
    let (s, mut c) = c();
    c.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEt"]);
    let mut sub = s.client();
    sub.cmd(&["PSUBSCRIBE", "__keyevent@0__:*"]);
    c.cmd(&["XADD", "s", "MAXLEN", "1", "1-1", "a", "1"]);
    c.cmd(&["XADD", "s", "MAXLEN", "1", "2-1", "a", "1"]);
    c.cmd(&["XDEL", "s", "2-1"]);
    c.cmd(&["XSETID", "s", "5-0"]);
    let mut events = Vec::new();
    for _ in 0..5 {
        let f = sub.read_frame();
        events.push(f.items()[2].text());
    }
    assert_eq!(
        events,
        [
            "__keyevent@0__:xadd",
            "__keyevent@0__:xadd",
            "__keyevent@0__:xtrim",
            "__keyevent@0__:xdel",
            "__keyevent@0__:xsetid"
        ]
    );
}

#[test]
fn redis_payloads_restore_here_with_the_same_nodes() {
    let Some(bin) = redis_tool("redis-server", "compare stream payloads with") else { return };
    let redis = hotkv_test_support::TestServer::builder(bin).configs(&[("save", "\"\""), ("appendonly", "no")]).spawn();
    let (_s, mut h) = c();
    let mut r = redis.client();
    for c in [&mut r, &mut h] {
        assert_eq!(c.cmd(&["CONFIG", "SET", "rdbcompression", "no"]), Frame::ok());
        build(c, "t");
    }
    let (theirs, ours) = (dump(&mut r, "t"), dump(&mut h, "t"));
    // Redis 7.0 writes type 19, Valkey 8 and hotkv 21; without groups the bodies are the same
    // bytes: the same nodes, split at the same entries, deletions flagged in place.
    assert_eq!((theirs[0], ours[0]), (19, 21));
    assert_eq!(theirs[1..theirs.len() - 10], ours[1..ours.len() - 10]);
    assert_eq!(h.cmd(&[&b"RESTORE"[..], b"r", b"0", &theirs]), Frame::ok());
    let full = |c: &mut RawClient, k: &str| c.cmd(&["XINFO", "STREAM", k, "FULL", "COUNT", "0"]);
    let (here, there) = (full(&mut h, "r"), full(&mut r, "t"));
    for field in [
        "length",
        "radix-tree-keys",
        "radix-tree-nodes",
        "last-generated-id",
        "max-deleted-entry-id",
        "entries-added",
        "recorded-first-entry-id",
        "entries",
    ] {
        assert_eq!(here.field(field), there.field(field), "{field}");
    }
    // Compressed payloads load too.
    r.cmd(&["CONFIG", "SET", "rdbcompression", "yes"]);
    let packed = dump(&mut r, "t");
    assert!(packed.len() < theirs.len());
    assert_eq!(h.cmd(&[&b"RESTORE"[..], b"p", b"0", &packed]), Frame::ok());
    assert_eq!(h.cmd(&["XRANGE", "p", "-", "+"]), r.cmd(&["XRANGE", "t", "-", "+"]));
    // Ours restores here byte for byte.
    assert_eq!(h.cmd(&[&b"RESTORE"[..], b"o", b"0", &ours]), Frame::ok());
    assert_eq!(dump(&mut h, "o"), ours);
}

#[test]
fn hostile_restore_payloads_are_refused() {
    let (_s, mut c) = c();
    c.cmd(&["CONFIG", "SET", "rdbcompression", "no"]);
    build(&mut c, "t");
    let good = dump(&mut c, "t");
    let body = &good[..good.len() - 10];
    let sign = |body: &[u8]| {
        let mut p = body.to_vec();
        p.extend_from_slice(&10u16.to_le_bytes());
        let crc = hotkv_engine::rdb::crc64(0, &p);
        p.extend_from_slice(&crc.to_le_bytes());
        p
    };
    let mut bad = Vec::new();
    // Cut at every length.
    for n in 1..body.len() {
        bad.push(sign(&body[..n]));
    }
    // A node count of 2^62, a huge listpack length, a flipped byte in every listpack entry.
    bad.push(sign(&[21, 0x81, 0x40, 0, 0, 0, 0, 0, 0, 0]));
    let mut v = body.to_vec();
    v[1] = 0x81;
    bad.push(sign(&v));
    for i in (20..body.len()).step_by(7) {
        let mut v = body.to_vec();
        v[i] ^= 0x5a;
        bad.push(sign(&v));
    }
    let mut refused = 0;
    for p in &bad {
        let reply = c.cmd(&[&b"RESTORE"[..], b"x", b"0", p, b"REPLACE"]);
        if reply.is_error() {
            assert_eq!(reply, Frame::error("ERR Bad data format"));
            refused += 1;
        } else {
            // Whatever was accepted must read back whole.
            assert!(!c.cmd(&["XRANGE", "x", "-", "+"]).is_error());
            assert!(!c.cmd(&["XINFO", "STREAM", "x", "FULL"]).is_error());
        }
    }
    assert!(refused > bad.len() / 2, "{refused} of {}", bad.len());
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn streams_survive_a_reload_and_redis_cli_reads_them() {
    let s = crate::server_with(&[("enable-debug-command", "yes")]);
    let mut c = s.client();
    build(&mut c, "t");
    let before = c.cmd(&["XINFO", "STREAM", "t", "FULL"]);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Frame::ok());
    assert_eq!(c.cmd(&["XINFO", "STREAM", "t", "FULL"]), before);
    let out = hotkv_test_support::tools::redis_cli(s.port(), &["XRANGE", "t", "300", "+"]);
    assert!(out.starts_with("300-0\nbig\nvvvv"), "{out}");
}

fn blocked(c: &mut RawClient) -> i64 {
    crate::info_num(&crate::info(c, "clients"), "blocked_clients")
}

fn wait_blocked(c: &mut RawClient, n: i64) {
    assert!(
        hotkv_test_support::wait_for(|| blocked(c) == n, std::time::Duration::from_secs(5)),
        "blocked clients never reached {n}"
    );
}

/// Readers waiting after different ids on one stream are each served when an entry beyond
/// their id comes, whatever their place in line; `$` means the id that was last when it
/// blocked; a stream replaced by another type wakes nobody.
#[test]
fn blocked_readers_are_served_each_after_its_own_id() {
    let (s, mut c) = c();
    c.cmd(&["XADD", "s", "5-0", "a", "1"]);
    let (mut far, mut dollar) = (s.client(), s.client());
    far.send(&["XREAD", "BLOCK", "0", "STREAMS", "s", "100-0"]);
    wait_blocked(&mut c, 1);
    dollar.send(&["XREAD", "COUNT", "10", "BLOCK", "0", "STREAMS", "s", "$"]);
    wait_blocked(&mut c, 2);
    // A transaction that adds and deletes leaves nothing to read.
    c.cmd(&["MULTI"]);
    c.cmd(&["XADD", "s", "6-0", "gone", "1"]);
    c.cmd(&["DEL", "s"]);
    c.cmd(&["LPUSH", "s", "x"]);
    c.cmd(&["EXEC"]);
    c.cmd(&["DEL", "s"]);
    assert_eq!(blocked(&mut c), 2);
    c.cmd(&["XADD", "s", "7-0", "b", "2"]);
    let got = dollar.read_frame();
    assert_eq!(got.items()[0].items()[0], Frame::bulk("s"));
    assert_eq!(got.items()[0].items()[1].items()[0].items()[0], Frame::bulk("7-0"));
    wait_blocked(&mut c, 1);
    c.cmd(&["XADD", "s", "101-0", "c", "3"]);
    let got = far.read_frame();
    assert_eq!(got.items()[0].items()[1].items()[0].items()[0], Frame::bulk("101-0"));
    // A timeout replies a null array; MULTI never blocks.
    assert!(c.cmd(&["XREAD", "BLOCK", "20", "STREAMS", "s", "$"]).is_null());
    c.cmd(&["MULTI"]);
    c.cmd(&["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
    assert!(c.cmd(&["EXEC"]).items()[0].is_null());
}

/// The whole of a stream as XINFO STREAM FULL shows it, without the times that differ
/// between two servers by nature (consumers' seen/active times are copied by XCLAIM's TIME,
/// but a consumer XREADGROUP creates on the primary is seen when the replica runs it).
fn state(c: &mut RawClient, key: &str) -> Frame {
    c.cmd(&["XINFO", "STREAM", key, "FULL", "COUNT", "0"])
}

fn strip_consumer_times(f: Frame) -> Frame {
    match f {
        Frame::Array(items) => {
            let mut out = Vec::with_capacity(items.len());
            let mut blank = false;
            for item in items {
                if blank {
                    out.push(Frame::Integer(0));
                    blank = false;
                    continue;
                }
                blank = item == Frame::bulk("seen-time") || item == Frame::bulk("active-time");
                out.push(strip_consumer_times(item));
            }
            Frame::Array(out)
        }
        other => other,
    }
}

/// Where two replies first differ, readably.
fn first_difference(a: &Frame, b: &Frame, path: String) -> Option<String> {
    match (a, b) {
        (Frame::Array(x), Frame::Array(y)) => {
            for (i, (p, q)) in x.iter().zip(y).enumerate() {
                let name = if i > 0 { x[i - 1].text_lossy() } else { String::new() };
                if let Some(d) = first_difference(p, q, format!("{path}/{i}({name})")) {
                    return Some(d);
                }
            }
            (x.len() != y.len()).then(|| format!("{path}: {} vs {} items", x.len(), y.len()))
        }
        _ => (a != b).then(|| format!("{path}: {} vs {}", a.text_lossy(), b.text_lossy())),
    }
}

#[test]
fn consumer_groups_and_their_errors() {
    let (_s, mut c) = c();
    let e = |s: &str| Frame::error(s);
    assert_eq!(
        c.cmd(&["XGROUP", "CREATE", "s", "g", "$"]),
        e(
            "ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."
        )
    );
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]), Frame::ok());
    assert_eq!(c.cmd(&["XGROUP", "CREATE", "s", "g", "$"]), e("BUSYGROUP Consumer Group name already exists"));
    assert_eq!(
        c.cmd(&["XGROUP", "SETID", "s", "nog", "0"]),
        e("NOGROUP No such consumer group 'nog' for key name 's'")
    );
    assert_eq!(
        c.cmd(&["XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">"]),
        e("NOGROUP No such key 's' or consumer group 'nog' in XREADGROUP with GROUP option")
    );
    assert!(
        c.cmd(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$"])
            .error_text()
            .unwrap()
            .contains("The $ ID is meaningless")
    );
    for i in 1..=5 {
        c.cmd(&["XADD", "s", &format!("{i}-0"), "f", &i.to_string()]);
    }
    let got = c.cmd(&["XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">"]);
    assert_eq!(got.items()[0].items()[1].items().len(), 2);
    c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", ">"]);
    let summary = c.cmd(&["XPENDING", "s", "g"]);
    assert_eq!(summary.items()[0], Frame::Integer(5));
    assert_eq!(summary.items()[1], Frame::bulk("1-0"));
    assert_eq!(summary.items()[3].items()[1], Frame::Array(vec![Frame::bulk("bob"), Frame::bulk("3")]));
    assert_eq!(c.cmd(&["XACK", "s", "g", "1-0", "9-9"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["XACK", "s", "g", "bad"]), e("ERR Invalid stream ID specified as stream command argument"));
    let ext = c.cmd(&["XPENDING", "s", "g", "-", "+", "10", "bob"]);
    assert_eq!(ext.items().len(), 3);
    // Claims: the history of alice, then bob's entries taken over, one of them deleted.
    assert_eq!(c.cmd(&["XDEL", "s", "4-0"]), Frame::Integer(1));
    let auto = c.cmd(&["XAUTOCLAIM", "s", "g", "alice", "0", "0", "COUNT", "10"]);
    assert_eq!(auto.items()[0], Frame::bulk("0-0"));
    assert_eq!(auto.items()[1].items().len(), 3);
    assert_eq!(auto.items()[2], Frame::Array(vec![Frame::bulk("4-0")]));
    let claimed = c.cmd(&["XCLAIM", "s", "g", "bob", "0", "5-0", "JUSTID"]);
    assert_eq!(claimed, Frame::Array(vec![Frame::bulk("5-0")]));
    let hist = c.cmd(&["XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0"]);
    assert_eq!(hist.items()[0].items()[1].items().len(), 1);
    assert_eq!(c.cmd(&["XGROUP", "CREATECONSUMER", "s", "g", "carol"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["XGROUP", "DELCONSUMER", "s", "g", "bob"]), Frame::Integer(1));
    let groups = c.cmd(&["XINFO", "GROUPS", "s"]);
    assert_eq!(groups.items()[0].field("pending"), Some(Frame::Integer(2)));
    assert_eq!(groups.items()[0].field("entries-read"), Some(Frame::Integer(5)));
    assert_eq!(groups.items()[0].field("lag"), Some(Frame::Integer(0)));
    let consumers = c.cmd(&["XINFO", "CONSUMERS", "s", "g"]);
    assert_eq!(consumers.items().len(), 2);
    assert_eq!(c.cmd(&["XAUTOCLAIM", "s", "g", "a", "0", "0", "COUNT", "0"]), e("ERR COUNT must be > 0"));
    assert_eq!(c.cmd(&["XCLAIM", "s", "g", "a", "0", "1-0", "BOGUS"]), e("ERR Unrecognized XCLAIM option 'BOGUS'"));
    // A DUMP with groups restores whole, and survives a round trip byte for byte.
    let payload = dump(&mut c, "s");
    assert_eq!(c.cmd(&[&b"RESTORE"[..], b"copy", b"0", &payload]), Frame::ok());
    assert_eq!(dump(&mut c, "copy"), payload);
    assert_eq!(state(&mut c, "copy"), state(&mut c, "s"));
    assert_eq!(c.cmd(&["XGROUP", "DESTROY", "s", "g"]), Frame::Integer(1));
}

/// A blocked XREADGROUP gets NOGROUP when its group goes, and is served in line after XADD.
#[test]
fn blocked_group_readers() {
    let (s, mut c) = c();
    c.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    let (mut a, mut b) = (s.client(), s.client());
    a.send(&["XREADGROUP", "GROUP", "g", "a", "BLOCK", "0", "STREAMS", "s", ">"]);
    wait_blocked(&mut c, 1);
    b.send(&["XREADGROUP", "GROUP", "g", "b", "BLOCK", "0", "STREAMS", "s", ">"]);
    wait_blocked(&mut c, 2);
    c.cmd(&["XADD", "s", "1-0", "f", "v"]);
    assert_eq!(a.read_frame().items()[0].items()[1].items()[0].items()[0], Frame::bulk("1-0"));
    wait_blocked(&mut c, 1);
    c.cmd(&["XGROUP", "DESTROY", "s", "g"]);
    assert!(b.read_frame().error_text().unwrap().starts_with("NOGROUP"));
}

/// A replica applies XADD with generated ids, approximate trims, group reads, claims and
/// acks through what the primary sends (XADD with its id, XCLAIM and XGROUP SETID), and ends
/// up with the same streams, groups and pending entries.
#[test]
fn a_replica_follows_stream_and_group_traffic() {
    let conf = [("save", "\"\""), ("appendonly", "no")];
    let (primary, replica) = (crate::server_with(&conf), crate::server_with(&conf));
    let mut p = primary.client();
    p.cmd(&["XADD", "before", "*", "f", "v"]);
    p.cmd(&["XGROUP", "CREATE", "before", "g", "0"]);
    p.cmd(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "before", ">"]);
    let mut r = replica.client();
    assert_eq!(r.cmd(&["REPLICAOF", "127.0.0.1", &primary.port().to_string()]), Frame::ok());
    p.cmd(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
    // A reader blocked on the primary is served by an XADD: its delivery reaches the replica
    // inside the writer's call.
    let mut blocked = primary.client();
    blocked.send(&["XREADGROUP", "GROUP", "g", "waiter", "BLOCK", "0", "STREAMS", "s", ">"]);
    wait_blocked(&mut p, 1);
    p.cmd(&["XADD", "s", "*", "n", "first"]);
    assert_eq!(blocked.read_frame().items()[0].items()[1].items().len(), 1);
    for i in 0..400 {
        p.cmd(&["XADD", "s", "MAXLEN", "~", "150", "*", "n", &i.to_string()]);
        if i % 7 == 0 {
            p.cmd(&["XREADGROUP", "GROUP", "g", &format!("c{}", i % 3), "COUNT", "5", "STREAMS", "s", ">"]);
        }
        if i % 11 == 0 {
            p.cmd(&["XREADGROUP", "GROUP", "g", "noack", "NOACK", "COUNT", "2", "STREAMS", "s", ">"]);
        }
    }
    // Claims of entries still there (a claim of a trimmed one creates the claiming consumer
    // on the primary alone, as in Valkey, which does not propagate that creation).
    let first = p.cmd(&["XRANGE", "s", "-", "+", "COUNT", "1"]).items()[0].items()[0].text();
    let pend = p.cmd(&["XPENDING", "s", "g", &first, "+", "5"]);
    let first = pend.items()[0].items()[0].text();
    p.cmd(&["XACK", "s", "g", &first]);
    p.cmd(&["XCLAIM", "s", "g", "thief", "0", &pend.items()[1].items()[0].text()]);
    let auto = p.cmd(&["XAUTOCLAIM", "s", "g", "auto", "0", &first, "COUNT", "3"]);
    assert_eq!(auto.items()[1].items().len(), 3);
    p.cmd(&["XTRIM", "s", "MINID", "~", "0"]);
    assert_eq!(p.cmd(&["WAIT", "1", "10000"]).int(), 1);
    for key in ["s", "before"] {
        let (a, b) = (strip_consumer_times(state(&mut p, key)), strip_consumer_times(state(&mut r, key)));
        if let Some(d) = first_difference(&a, &b, key.to_string()) {
            panic!("{d}");
        }
    }
    assert_eq!(p.cmd(&["XRANGE", "s", "-", "+"]), r.cmd(&["XRANGE", "s", "-", "+"]));
}

/// redis-py's stream API (its parsers of XRANGE, XREAD, XINFO, XPENDING and XAUTOCLAIM
/// replies) against hotkv, in RESP2 and RESP3.
#[test]
fn redis_py_drives_streams_and_groups() {
    let s = crate::server();
    let out = hotkv_test_support::tools::python(
        s.port(),
        r#"
for proto in (2, 3):
    r = redis.Redis(port=PORT, decode_responses=True, protocol=proto)
    r.delete("s")
    print(r.xadd("s", {"a": "1"}, id="1-0"), r.xadd("s", {"b": "2"}, id="2-0"), r.xlen("s"))
    print(r.xrange("s"), r.xrevrange("s", count=1))
    print(r.xread({"s": "0"}, count=1))
    print(r.xgroup_create("s", "g", id="0"), r.xreadgroup("g", "c", {"s": ">"}, count=1))
    print(r.xpending("s", "g")["pending"], r.xack("s", "g", "1-0"))
    print(r.xautoclaim("s", "g", "d", 0, "0-0", justid=True))
    info = r.xinfo_stream("s")
    print(info["length"], info["last-generated-id"], info["first-entry"], r.xinfo_groups("s")[0]["lag"])
    print(r.xtrim("s", maxlen=0), r.xlen("s"))
"#,
    );
    let round = "1-0 2-0 2\n\
                 [('1-0', {'a': '1'}), ('2-0', {'b': '2'})] [('2-0', {'b': '2'})]\n";
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 16, "{out}");
    assert!(out.starts_with(round), "{out}");
    assert_eq!(lines[4], "1 1", "{out}");
    assert_eq!(lines[6], "2 2-0 ('1-0', {'a': '1'}) 1", "{out}");
    assert_eq!(lines[7], "2 0", "{out}");
    // RESP3: XREAD is a map keyed by stream.
    assert_eq!(lines[10], "{'s': [[('1-0', {'a': '1'})]]}", "{out}");
}

/// The Rust `redis` crate's view of a stream: XADD with `*` and a generated id that XRANGE
/// returns, XLEN, and the error of a bad id surfacing as a server error.
#[test]
fn rust_redis_client_reads_generated_ids() {
    let s = crate::server();
    let mut con = crate::redis_conn(&s);
    let id: String = redis::cmd("XADD").arg("s").arg("*").arg("f").arg("v").query(&mut con).unwrap();
    let (ms, seq) = id.split_once('-').unwrap();
    assert!(ms.parse::<u64>().unwrap() > 1_700_000_000_000 && seq == "0", "{id}");
    let range: Vec<(String, Vec<String>)> = redis::cmd("XRANGE").arg("s").arg("-").arg("+").query(&mut con).unwrap();
    assert_eq!(range, vec![(id, vec!["f".to_string(), "v".to_string()])]);
    let len: i64 = redis::cmd("XLEN").arg("s").query(&mut con).unwrap();
    assert_eq!(len, 1);
    let err = redis::cmd("XADD").arg("s").arg("1-x").arg("f").arg("v").query::<String>(&mut con).unwrap_err();
    assert_eq!(crate::server_error(&err), "ERR Invalid stream ID specified as stream command argument");
}

/// A stream with groups DUMPed by redis-server 7.0 (type 19, no consumer active times)
/// restores here with its groups, PEL and consumers.
#[test]
fn redis_groups_restore_here() {
    let Some(bin) = redis_tool("redis-server", "compare stream payloads with") else { return };
    let redis = hotkv_test_support::TestServer::builder(bin).configs(&[("save", "\"\""), ("appendonly", "no")]).spawn();
    let (_s, mut h) = c();
    let mut r = redis.client();
    build(&mut r, "t");
    r.cmd(&["XGROUP", "CREATE", "t", "g1", "0"]);
    r.cmd(&["XGROUP", "CREATE", "t", "g2", "100-0"]);
    r.cmd(&["XREADGROUP", "GROUP", "g1", "alice", "COUNT", "7", "STREAMS", "t", ">"]);
    r.cmd(&["XREADGROUP", "GROUP", "g1", "bob", "COUNT", "3", "STREAMS", "t", ">"]);
    r.cmd(&["XGROUP", "CREATECONSUMER", "t", "g2", "idle"]);
    r.cmd(&["XDEL", "t", "9-0"]);
    let payload = dump(&mut r, "t");
    assert_eq!(payload[0], 19);
    assert_eq!(h.cmd(&[&b"RESTORE"[..], b"t", b"0", &payload]), Frame::ok());
    // Redis 7.0 has no consumer active times (nor reports them): compare what it reports.
    let calls: &[&[&str]] = &[
        &["XRANGE", "t", "-", "+"],
        &["XINFO", "GROUPS", "t"],
        &["XPENDING", "t", "g1", "-", "+", "100"],
        &["XPENDING", "t", "g2"],
        &["XLEN", "t"],
    ];
    for call in calls {
        let (here, there) = (h.cmd(call), r.cmd(call));
        let strip_idle = |f: Frame| match f {
            // XPENDING's idle times move with the clock.
            Frame::Array(v) if call[0] == "XPENDING" && call.len() > 3 => Frame::Array(
                v.into_iter()
                    .map(|row| match row {
                        Frame::Array(mut x) => {
                            x[2] = Frame::Integer(0);
                            Frame::Array(x)
                        }
                        o => o,
                    })
                    .collect(),
            ),
            o => o,
        };
        assert_eq!(strip_idle(here), strip_idle(there), "{call:?}");
    }
    let names = |c: &mut RawClient| -> Vec<Frame> {
        c.cmd(&["XINFO", "CONSUMERS", "t", "g1"]).items().iter().map(|m| m.field("pending").unwrap()).collect()
    };
    assert_eq!(names(&mut h), names(&mut r));
    assert_eq!(h.cmd(&["XPENDING", "t", "g1"]), r.cmd(&["XPENDING", "t", "g1"]));
}
