//! Whole RDB files against a real redis-server 7.0, both ways: a `dump.rdb` it `SAVE`d with
//! every type in every encoding it has (configured per key to force each one, compressed
//! quicklist nodes and LZF strings included) is read by hotkv's reader into a keyspace and
//! compared key by key, TTL by TTL; and a file hotkv's writer made from every encoding hotkv
//! has is loaded by redis-server at startup and compared the same way (and passed through
//! `redis-check-rdb` when it is installed).
//!
//! Without redis-server the tests print why and pass, as `dump_restore` does.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hotkv_engine::ctx::EngineConfig;
use hotkv_engine::entry::ValueRef;
use hotkv_engine::keyspace::Keyspace;
use hotkv_engine::object::Object;
use hotkv_engine::rdb::{self, AuxValue};
use hotkv_engine::testkit::TestKit;
use hotkv_test_support::{Frame, RawClient, TestServer, tools};

use crate::dump_restore::redis_tool;

/// A key's type, its elements in an order both servers agree on (hash pairs and set members
/// sorted, scores as numbers) and its absolute expire time in milliseconds.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Contents {
    ty: &'static str,
    items: Vec<Vec<u8>>,
    pub(crate) expire_ms: Option<i64>,
}

pub(crate) type Dataset = BTreeMap<(usize, Vec<u8>), Contents>;

#[test]
fn a_file_redis_saved_loads_here_with_every_value_and_ttl() {
    let Some(bin) = redis_tool("redis-server", "read a dump.rdb it saved") else { return };
    let redis = TestServer::builder(bin).configs(&[("save", "\"\""), ("appendonly", "no")]).spawn();
    let mut r = redis.client();
    let now = wall_ms();
    build_on_redis(&mut r, now);
    assert_eq!(r.cmd(&["SAVE"]), Frame::ok());
    let want = redis_dataset(&mut r);
    let file = std::fs::read(redis.dir().join("dump.rdb")).expect("redis-server wrote dump.rdb");

    // `soon` expires in a minute: loaded two minutes from now, it is left out and counted.
    let ks = Keyspace::new(16);
    let stats = rdb::load(&file[..], &ks, &EngineConfig::default(), now + 120_000).expect("hotkv reads redis's file");
    assert_eq!(stats.expired, 1);
    assert!(stats.aux.iter().any(|(k, v)| k == b"redis-ver" && v.starts_with(b"7.")), "{:?}", stats.aux);
    let mut want_later = want.clone();
    want_later.remove(&(0, b"soon".to_vec()));
    assert_eq!(stats.loaded as usize, want_later.len());
    assert_same(&engine_dataset(&ks), &want_later);

    // Fed one small piece at a time, the same items come out.
    let mut reader = rdb::RdbReader::new(512 << 20);
    let mut entries = 0;
    for piece in file.chunks(7) {
        reader.feed(piece);
        while let Some(item) = reader.next_item().expect("valid file") {
            entries += usize::from(matches!(item, rdb::Item::Entry { .. }));
        }
    }
    reader.finish().expect("whole file");
    assert_eq!(entries, want.len());
}

#[test]
fn a_file_hotkv_wrote_loads_on_redis_with_every_value_and_ttl() {
    let Some(bin) = redis_tool("redis-server", "load a file hotkv wrote") else { return };
    let now = wall_ms();
    let t = build_here(now);
    let want = engine_dataset(&t.ks);
    let aux = [
        ("redis-ver", AuxValue::Str(b"7.0.0")),
        ("redis-bits", AuxValue::Int(64)),
        ("ctime", AuxValue::Int(now / 1000)),
        ("used-mem", AuxValue::Int(5_000_000_000)),
        ("aof-base", AuxValue::Int(0)),
    ];
    let mut file = Vec::new();
    let keys = rdb::snapshot(&t.ks, &aux, |chunk| {
        file.extend_from_slice(chunk);
        Ok::<(), ()>(())
    })
    .expect("writing to memory");
    assert_eq!(keys as usize, want.len());

    // The file is written into the server's dir before it starts, and loaded at startup.
    let redis = TestServer::builder(bin)
        .config_file("redis.conf", move |port, dir| {
            std::fs::write(dir.join("hotkv.rdb"), &file).expect("write the rdb file");
            format!(
                "port {port}\nbind 127.0.0.1\ndir {}\ndbfilename hotkv.rdb\nsave \"\"\nappendonly no\n",
                dir.display()
            )
        })
        .spawn();
    let mut r = redis.client();
    assert_same(&redis_dataset(&mut r), &want);

    if let Some(check) = redis_tool("redis-check-rdb", "check hotkv's file with it") {
        let path = redis.dir().join("hotkv.rdb");
        let out = tools::run_bounded(std::process::Command::new(check).arg(&path), None, Duration::from_secs(30));
        assert!(out.stdout.contains("RDB looks OK"), "redis-check-rdb:\n{}\n{}", out.stdout, out.stderr);
    }
}

/// Compares two datasets key by key, so a failure names the key.
#[track_caller]
pub(crate) fn assert_same(got: &Dataset, want: &Dataset) {
    for (key, w) in want {
        let name = String::from_utf8_lossy(&key.1);
        let g = got.get(key).unwrap_or_else(|| panic!("db {} key {name}: missing", key.0));
        assert_eq!(g, w, "db {} key {name}", key.0);
    }
    assert_eq!(
        got.len(),
        want.len(),
        "extra keys: {:?}",
        got.keys().filter(|k| !want.contains_key(*k)).collect::<Vec<_>>()
    );
}

/// Every key of every database of a hotkv keyspace.
pub(crate) fn engine_dataset(ks: &Keyspace) -> Dataset {
    let mut all = Dataset::new();
    for db in 0..ks.databases() {
        let Some(d) = ks.db_if_used(db) else { continue };
        for slot in d.slots() {
            let t = slot.lock();
            for (_, e) in t.iter() {
                let (ty, items) = match e.value() {
                    ValueRef::Str(s) => ("string", vec![s.to_vec()]),
                    ValueRef::Obj(Object::Str(s)) => ("string", vec![s.clone()]),
                    ValueRef::Obj(Object::List(l)) => ("list", l.iter().map(|v| v.to_vec()).collect()),
                    ValueRef::Obj(Object::Hash(h)) => {
                        ("hash", sorted_pairs(h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()))
                    }
                    ValueRef::Obj(Object::Set(s)) => {
                        let mut m: Vec<Vec<u8>> = s.iter().map(|m| m.to_vec()).collect();
                        m.sort();
                        ("set", m)
                    }
                    ValueRef::Obj(Object::ZSet(z)) => {
                        ("zset", z.iter().into_iter().flat_map(|(m, s)| [m.to_vec(), score(s)]).collect())
                    }
                    ValueRef::Obj(Object::Stream(_)) => {
                        ("stream", vec![hotkv_engine::rdb::dump_value(e.value(), hotkv_engine::rdb::Strings::Plain)])
                    }
                };
                all.insert((db, e.key().to_vec()), Contents { ty, items, expire_ms: e.expire() });
            }
        }
    }
    all
}

/// Every key of every database of a redis-server (or any server), read with commands.
pub(crate) fn redis_dataset(c: &mut RawClient) -> Dataset {
    let mut all = Dataset::new();
    for db in 0..16 {
        assert_eq!(c.cmd(&["SELECT", &db.to_string()]), Frame::ok());
        for key in c.cmd(&["KEYS", "*"]).items().to_vec() {
            let Frame::Bulk(key) = key else { panic!("KEYS gave {key}") };
            let ty = c.cmd(&[&b"TYPE"[..], &key]).text();
            let read: &[&[u8]] = match ty.as_str() {
                "string" => &[b"GET"],
                "list" => &[b"LRANGE", b"0", b"-1"],
                "hash" => &[b"HGETALL"],
                "set" => &[b"SMEMBERS"],
                "zset" => &[b"ZRANGE", b"0", b"-1", b"WITHSCORES"],
                other => panic!("unexpected type {other}"),
            };
            let mut argv = vec![read[0], &key[..]];
            argv.extend_from_slice(&read[1..]);
            let bytes = |f: &Frame| match f {
                Frame::Bulk(b) => b.clone(),
                other => panic!("{other}"),
            };
            let reply = c.cmd(&argv);
            let (ty, items) = match ty.as_str() {
                "string" => ("string", vec![bytes(&reply)]),
                "list" => ("list", reply.items().iter().map(bytes).collect()),
                "hash" => {
                    ("hash", sorted_pairs(reply.items().chunks(2).map(|p| (bytes(&p[0]), bytes(&p[1]))).collect()))
                }
                "set" => {
                    let mut m: Vec<Vec<u8>> = reply.items().iter().map(bytes).collect();
                    m.sort();
                    ("set", m)
                }
                _ => {
                    let items = reply.items().chunks(2).flat_map(|p| {
                        let s = p[1].text_lossy();
                        [bytes(&p[0]), score(s.parse().unwrap_or_else(|_| panic!("score {s}")))]
                    });
                    ("zset", items.collect())
                }
            };
            let expire = c.cmd(&[&b"PEXPIRETIME"[..], &key]).int();
            all.insert((db, key), Contents { ty, items, expire_ms: (expire >= 0).then_some(expire) });
        }
    }
    assert_eq!(c.cmd(&["SELECT", "0"]), Frame::ok());
    all
}

fn sorted_pairs(mut pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Vec<Vec<u8>> {
    pairs.sort();
    pairs.into_iter().flat_map(|(f, v)| [f, v]).collect()
}

/// Scores compared as doubles: Redis 7.0 prints 1e300 as `1.0000000000000000001e+300`.
fn score(s: f64) -> Vec<u8> {
    format!("{s:e}").into_bytes()
}

/// Runs a command on redis-server and checks it was not refused.
fn on(r: &mut RawClient, argv: &[&[u8]]) {
    let reply = r.cmd(argv);
    assert!(!reply.is_error(), "{:?}: {reply}", String::from_utf8_lossy(&argv.concat()));
}

/// `cmd key` and many arguments.
fn many(cmd: &str, key: &str, args: impl IntoIterator<Item = String>) -> Vec<Vec<u8>> {
    let mut argv = vec![cmd.as_bytes().to_vec(), key.as_bytes().to_vec()];
    argv.extend(args.into_iter().map(String::into_bytes));
    argv
}

fn on_many(r: &mut RawClient, argv: Vec<Vec<u8>>) {
    let reply = r.cmd(&argv);
    assert!(!reply.is_error(), "{}: {reply}", String::from_utf8_lossy(&argv[1]));
}

/// Builds every type in every encoding redis-server 7.0 has, checking each encoding there,
/// over databases 0, 2 and 15, with TTLs.
pub(crate) fn build_on_redis(r: &mut RawClient, now: i64) {
    let s = |v: &str| v.as_bytes().to_vec();
    let noise = noise(5000);
    let expect = |r: &mut RawClient, key: &str, encoding: &str| {
        assert_eq!(r.cmd(&["OBJECT", "ENCODING", key]), Frame::bulk(encoding), "{key} on redis");
    };
    on(r, &[b"SET", b"str-small", b"hello"]);
    on(r, &[b"SET", b"str-int", b"12345"]);
    on(r, &[b"SET", b"str-minint", b"-9223372036854775808"]);
    on(r, &[b"SET", b"str-empty", b""]);
    on(r, &[b"SET", b"str-lzf", &s(&"abc".repeat(7000))]);
    on(r, &[b"SET", b"str-raw", noise.as_bytes()]);
    on(r, &[b"SET", b"bin\x00\xff", b"\x00\x01\xfe\xff"]);
    on(r, &[b"SET", b"12345", b"integer key"]);
    on(r, &[b"SET", b"soon", b"v", b"PX", b"60000"]);
    expect(r, "str-int", "int");
    expect(r, "str-lzf", "raw");
    // Lists: one node, many nodes, many nodes compressed (LZF blobs in the file).
    on(r, &[b"CONFIG", b"SET", b"list-max-listpack-size", b"4"]);
    on(r, &[b"RPUSH", b"list-small", b"a", b"1", b"-70000", b"", b"5000000000"]);
    on_many(r, many("RPUSH", "list-multi", (0..100).map(|i| format!("item-{i}"))));
    on(r, &[b"CONFIG", b"SET", b"list-compress-depth", b"1"]);
    on_many(r, many("RPUSH", "list-compressed", (0..100).map(|i| format!("value-{i}-{}", "x".repeat(50)))));
    on(r, &[b"CONFIG", b"SET", b"list-compress-depth", b"0"]);
    on(r, &[b"RPUSH", b"list-bigelem", b"a", &s(&"y".repeat(10000)), b"b"]);
    for key in ["list-small", "list-multi", "list-compressed"] {
        expect(r, key, "quicklist");
    }
    // Hashes: listpack, hashtable by size, by value length, and forced by configuration.
    on(r, &[b"HSET", b"hash-small", b"f", b"v", b"n", b"-12", b"e", b""]);
    on_many(r, many("HSET", "hash-large", (0..600).flat_map(|i| [format!("f{i}"), format!("{i}")])));
    on(r, &[b"HSET", b"hash-longval", b"f", &s(&"x".repeat(100)), b"g", b"1"]);
    on(r, &[b"CONFIG", b"SET", b"hash-max-listpack-entries", b"0"]);
    on(r, &[b"HSET", b"hash-forced", b"a", b"1"]);
    on(r, &[b"CONFIG", b"SET", b"hash-max-listpack-entries", b"128"]);
    expect(r, "hash-small", "listpack");
    for key in ["hash-large", "hash-longval", "hash-forced"] {
        expect(r, key, "hashtable");
    }
    // Sets: intset, hashtable of integers past the intset limit, of strings, forced.
    on(r, &[b"SADD", b"set-int", b"1", b"-5", b"70000", b"5000000000"]);
    on_many(r, many("SADD", "set-int-large", (0..1000).map(|i| (i * 7).to_string())));
    on(r, &[b"SADD", b"set-str", b"a", b"b", b"12"]);
    on(r, &[b"CONFIG", b"SET", b"set-max-intset-entries", b"0"]);
    on(r, &[b"SADD", b"set-int-forced", b"1", b"2"]);
    on(r, &[b"CONFIG", b"SET", b"set-max-intset-entries", b"512"]);
    expect(r, "set-int", "intset");
    expect(r, "set-int-large", "hashtable");
    // Redis 7.0 keeps small string sets in a hashtable; Valkey (and hotkv) in a listpack.
    for key in ["set-str", "set-int-forced"] {
        let enc = r.cmd(&["OBJECT", "ENCODING", key]);
        assert!(enc == Frame::bulk("hashtable") || enc == Frame::bulk("listpack"), "{key}: {enc}");
    }
    // Sorted sets: listpack with the infinities, skiplist by size, forced.
    on(r, &[b"ZADD", b"zset-small", b"1", b"a", b"2.5", b"b", b"-inf", b"c", b"inf", b"d", b"1e300", b"e"]);
    on_many(r, many("ZADD", "zset-large", (0..300).flat_map(|i| [format!("{}.125", i % 40), format!("m{i}")])));
    on(r, &[b"CONFIG", b"SET", b"zset-max-listpack-entries", b"0"]);
    on(r, &[b"ZADD", b"zset-forced", b"1", b"a"]);
    on(r, &[b"CONFIG", b"SET", b"zset-max-listpack-entries", b"128"]);
    expect(r, "zset-small", "listpack");
    expect(r, "zset-large", "skiplist");
    expect(r, "zset-forced", "skiplist");
    // TTLs on every type, absolute and relative.
    for (key, ms) in [("str-small", 3_600_000), ("list-multi", 7_200_000), ("zset-large", 86_400_000)] {
        on(r, &[b"PEXPIREAT", key.as_bytes(), (now + ms).to_string().as_bytes()]);
    }
    on(r, &[b"EXPIRE", b"hash-small", b"86400"]);
    on(r, &[b"EXPIRE", b"set-int", b"100000"]);
    // Other databases.
    on(r, &[b"SELECT", b"2"]);
    on(r, &[b"SET", b"str-small", b"database two"]);
    on(r, &[b"RPUSH", b"list-small", b"x"]);
    on(r, &[b"SET", b"ttl", b"v", b"PX", b"86400000"]);
    on(r, &[b"SELECT", b"15"]);
    on(r, &[b"SADD", b"set-int", b"3"]);
    on(r, &[b"HSET", b"hash-small", b"only", b"field"]);
    on(r, &[b"SELECT", b"0"]);
}

/// Builds every type in every encoding hotkv has, over databases 0, 3 and 15, with TTLs.
fn build_here(now: i64) -> TestKit {
    let mut t = TestKit { now_ms: now, ..TestKit::default() };
    let run = |t: &mut TestKit, argv: Vec<Vec<u8>>| {
        let reply = t.run_bytes(&argv);
        assert!(!reply.starts_with('-'), "{}: {reply}", String::from_utf8_lossy(&argv[0]));
    };
    let words = |w: &[&str]| w.iter().map(|s| s.as_bytes().to_vec()).collect::<Vec<_>>();
    run(&mut t, words(&["SET", "str-small", "hello"]));
    run(&mut t, words(&["SET", "str-int", "-123456"]));
    run(&mut t, words(&["SET", "str-int64", "9223372036854775807"]));
    run(&mut t, words(&["SET", "str-empty", ""]));
    run(&mut t, words(&["SET", "str-noise", &noise(20_000)]));
    run(&mut t, words(&["SET", "str-repeat", &"abc".repeat(7000)]));
    run(&mut t, words(&["APPEND", "str-appended", "grown by APPEND"]));
    run(&mut t, vec![b"SET".to_vec(), b"bin\x00\xff".to_vec(), b"\x00\x01\xfe\xff".to_vec()]);
    run(&mut t, words(&["SET", "777", "integer key"]));
    run(&mut t, words(&["RPUSH", "list-small", "a", "1", "-70000", "", "5000000000"]));
    run(&mut t, many("RPUSH", "list-large", (0..5000).map(|i| format!("item-{i}"))));
    run(&mut t, words(&["RPUSH", "list-bigelem", "a", &"y".repeat(10000), "b"]));
    run(&mut t, words(&["HSET", "hash-small", "f", "v", "n", "-12", "e", ""]));
    run(&mut t, many("HSET", "hash-large", (0..600).flat_map(|i| [format!("f{i}"), format!("{i}")])));
    run(&mut t, words(&["SADD", "set-int", "1", "-5", "70000", "5000000000"]));
    run(&mut t, many("SADD", "set-int-large", (0..1000).map(|i| (i * 7).to_string())));
    run(&mut t, words(&["SADD", "set-str", "a", "b", "12"]));
    run(&mut t, many("SADD", "set-str-large", (0..700).map(|i| format!("m{i}"))));
    run(&mut t, words(&["ZADD", "zset-small", "1", "a", "2.5", "b", "-inf", "c", "inf", "d", "1e300", "e"]));
    run(&mut t, many("ZADD", "zset-large", (0..300).flat_map(|i| [format!("{}.125", i % 40), format!("m{i}")])));
    for (key, ms) in [("str-small", 3_600_000), ("list-large", 7_200_000), ("hash-large", 86_400_000)] {
        run(&mut t, words(&["PEXPIREAT", key, &(now + ms).to_string()]));
    }
    run(&mut t, words(&["PEXPIRE", "set-int", "100000000"]));
    run(&mut t, words(&["PEXPIRE", "zset-small", "5000000"]));
    // Expired by the time the file is written: left out of it.
    run(&mut t, words(&["PEXPIREAT", "str-empty", &(now - 1).to_string()]));
    t.db = 3;
    run(&mut t, words(&["SET", "str-small", "database three"]));
    run(&mut t, words(&["RPUSH", "list-small", "x"]));
    t.db = 15;
    run(&mut t, words(&["SADD", "set-int", "3"]));
    run(&mut t, words(&["HSET", "hash-small", "only", "field"]));
    run(&mut t, words(&["SET", "ttl", "v", "PX", "86400000"]));
    t.db = 0;
    // Every encoding is really there.
    let mut encodings = Vec::new();
    for key in ["list-small", "list-large", "hash-small", "hash-large", "set-int", "set-str", "set-str-large"] {
        encodings.push(t.run(&["OBJECT", "ENCODING", key]));
    }
    encodings.push(t.run(&["OBJECT", "ENCODING", "zset-small"]));
    encodings.push(t.run(&["OBJECT", "ENCODING", "zset-large"]));
    let encodings: Vec<&str> = encodings.iter().map(|e| e.trim_end().rsplit('\n').next().unwrap_or("")).collect();
    assert_eq!(
        encodings,
        ["listpack", "quicklist", "listpack", "hashtable", "intset", "listpack", "hashtable", "listpack", "skiplist"]
    );
    t
}

/// Text that LZF barely compresses.
fn noise(n: u32) -> String {
    (0..n).map(|i| char::from(b'!' + (i.wrapping_mul(2_654_435_761) >> 25) as u8 % 90)).collect()
}

pub(crate) fn wall_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}
