//! DUMP/RESTORE against a real redis-server 7.0: every type in every encoding it has, DUMPed
//! there, RESTOREd here, read back and compared; then DUMPed here and RESTOREd there, and
//! compared again. The pre-7.0 ziplist/zipmap fixtures of the engine's unit tests are
//! restored into both servers too, which checks the hand-built bytes against a real loader.
//!
//! redis-server is looked for at `$REDIS_SERVER`, then on `PATH`; without it the tests print
//! why and pass, as the suite must run on machines that only have hotkv.

use std::path::PathBuf;

use hotkv_test_support::{Frame, RawClient, TestServer};

/// One key to build on redis-server: its name, the commands that build it, the encoding
/// redis-server 7.0 gives it (checked there, so the case really covers that encoding) and the
/// one hotkv gives it, which is Valkey 8's: small lists and small string sets are listpacks
/// there, where Redis 7.0 has only quicklists and hashtables.
struct Case {
    key: &'static str,
    build: Vec<Vec<Vec<u8>>>,
    encoding: &'static str,
    here: &'static str,
}

#[test]
fn redis_payloads_restore_here_and_ours_restore_there() {
    let Some(redis) = redis_server() else { return };
    let hotkv = crate::server();
    let (mut r, mut h) = (redis.client(), hotkv.client());
    let cases = cases();
    for case in &cases {
        for argv in &case.build {
            let reply = r.cmd(argv);
            assert!(!reply.is_error(), "{}: {reply}", case.key);
        }
        assert_eq!(r.cmd(&["OBJECT", "ENCODING", case.key]), Frame::bulk(case.encoding), "{} on redis", case.key);
    }
    for case in &cases {
        let key = case.key.as_bytes();
        let payload = dump(&mut r, key);
        let reply = h.cmd(&[&b"RESTORE"[..], key, b"0", &payload]);
        assert_eq!(reply, Frame::ok(), "{}: RESTORE of redis's payload", case.key);
        let original = contents(&mut r, key);
        assert_eq!(contents(&mut h, key), original, "{}: redis -> hotkv", case.key);
        assert_eq!(h.cmd(&["OBJECT", "ENCODING", case.key]), Frame::bulk(case.here), "{}: encoding here", case.key);
        let back = [b"back:", key].concat();
        let ours = dump(&mut h, key);
        let reply = r.cmd(&[&b"RESTORE"[..], &back, b"0", &ours]);
        assert_eq!(reply, Frame::ok(), "{}: RESTORE of our payload on redis", case.key);
        assert_eq!(contents(&mut r, &back), original, "{}: hotkv -> redis", case.key);
    }
}

#[test]
fn legacy_encodings_restore_alike_on_both() {
    let Some(redis) = redis_server() else { return };
    let hotkv = crate::server();
    let (mut r, mut h) = (redis.client(), hotkv.client());
    for (key, payload) in LEGACY {
        let payload = unhex(payload);
        for (who, c) in [("redis", &mut r), ("hotkv", &mut h)] {
            let reply = c.cmd(&[&b"RESTORE"[..], key.as_bytes(), b"0", &payload]);
            assert_eq!(reply, Frame::ok(), "{key} on {who}");
        }
        assert_eq!(contents(&mut h, key.as_bytes()), contents(&mut r, key.as_bytes()), "{key}");
        // And our re-encoding of it loads on redis.
        let back = format!("back:{key}");
        let ours = dump(&mut h, key.as_bytes());
        assert_eq!(r.cmd(&[&b"RESTORE"[..], back.as_bytes(), b"0", &ours]), Frame::ok(), "{key}");
        assert_eq!(contents(&mut r, back.as_bytes()), contents(&mut r, key.as_bytes()), "{key}");
    }
}

#[test]
fn restore_inside_multi_and_with_options() {
    let Some(redis) = redis_server() else { return };
    let hotkv = crate::server();
    let (mut r, mut h) = (redis.client(), hotkv.client());
    r.cmd(&["RPUSH", "l", "a", "b", "c"]);
    let payload = dump(&mut r, b"l");
    // EXEC runs RESTORE's decoding before it takes the transaction's locks.
    for c in [&mut h, &mut r] {
        assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
        c.cmd(&[&b"RESTORE"[..], b"m", b"0", &payload]);
        c.cmd(&[&b"RESTORE"[..], b"m", b"0", &payload]);
        c.cmd(&[&b"RESTORE"[..], b"m2", b"0", b"junk"]);
        let replies = c.cmd(&["EXEC"]);
        assert_eq!(
            replies,
            Frame::Array(vec![
                Frame::ok(),
                Frame::error("BUSYKEY Target key name already exists."),
                Frame::error("ERR DUMP payload version or checksum are wrong"),
            ])
        );
    }
    assert_eq!(contents(&mut h, b"m"), contents(&mut r, b"m"));
    // Option and error replies, the same on both servers.
    r.cmd(&["SET", "busy", "v"]);
    h.cmd(&["SET", "busy", "v"]);
    let calls: &[&[&[u8]]] = &[
        &[b"RESTORE", b"busy", b"0", &payload],
        &[b"RESTORE", b"busy", b"-5", &payload],
        &[b"RESTORE", b"busy", b"-5", &payload, b"REPLACE"],
        &[b"RESTORE", b"fresh", b"x", &payload],
        &[b"RESTORE", b"fresh", b"0", &payload, b"IDLETIME", b"10", b"FREQ", b"3"],
        &[b"RESTORE", b"fresh", b"0", &payload, b"FREQ", b"300"],
        &[b"RESTORE", b"fresh", b"0", &payload, b"IDLETIME", b"-1"],
        &[b"RESTORE", b"fresh", b"0", b"\x00\x01x\x0a\x00\x00\x00\x00\x00\x00\x00\x00\x00"],
        &[b"RESTORE", b"abs", b"1", &payload, b"ABSTTL"],
        &[b"RESTORE", b"idle", b"0", &payload, b"IDLETIME", b"1000"],
        &[b"RESTORE", b"busy", b"100000", &payload, b"REPLACE", b"ABSTTL"],
        &[b"EXISTS", b"busy", b"abs", b"idle", b"fresh"],
    ];
    for call in calls {
        assert_eq!(h.cmd(call), r.cmd(call), "{:?}", String::from_utf8_lossy(&call[1..].concat()));
    }
    assert_eq!(h.cmd(&["OBJECT", "IDLETIME", "idle"]), r.cmd(&["OBJECT", "IDLETIME", "idle"]));
}

#[test]
fn compressed_payloads_round_trip_both_ways() {
    // Under `rdbcompression yes` (both defaults) redis-server LZF-compresses strings and
    // blobs longer than 20 bytes in its DUMP payloads, and so does hotkv now: each side's
    // compressed payloads must load on the other.
    let Some(redis) = redis_server() else { return };
    let hotkv = crate::server();
    let (mut r, mut h) = (redis.client(), hotkv.client());
    let text = "hotkv:compressible:".repeat(300);
    let builds: Vec<Vec<Vec<u8>>> = vec![
        argv(&["SET", "s", &text]),
        argv(&["HSET", "h", "f", &text, "g", "v"]),
        argv(&["RPUSH", "l", &text[..200], &text[..300], "x"]),
        argv(&["ZADD", "z", "1", &text[..100], "2", "b"]),
        argv(&["SADD", "set", &text[..90], &text[..95], "c"]),
    ];
    for (c, who) in [(&mut r, "redis"), (&mut h, "hotkv")] {
        for b in &builds {
            assert!(!c.cmd(b).is_error(), "{who}: {b:?}");
        }
    }
    let theirs = dump(&mut r, b"s");
    let ours = dump(&mut h, b"s");
    for (who, p) in [("redis", &theirs), ("hotkv", &ours)] {
        assert!(p.len() < text.len() / 4, "{who}: a {}-byte payload for {} bytes", p.len(), text.len());
        assert_eq!(p[1], 0xC3, "{who}: RDB_ENC_LZF after the type byte");
    }
    for key in ["s", "h", "l", "z", "set"] {
        let k = key.as_bytes();
        let original = contents(&mut r, k);
        let back = [b"back:", k].concat();
        let (theirs, ours) = (dump(&mut r, k), dump(&mut h, k));
        assert_eq!(h.cmd(&[&b"RESTORE"[..], &back, b"0", &theirs]), Frame::ok(), "{key}: redis -> hotkv");
        assert_eq!(contents(&mut h, &back), original, "{key}: redis -> hotkv");
        assert_eq!(r.cmd(&[&b"RESTORE"[..], &back, b"0", &ours]), Frame::ok(), "{key}: hotkv -> redis");
        assert_eq!(contents(&mut r, &back), original, "{key}: hotkv -> redis");
    }
    // `rdbcompression no` on both: the string goes out as it is, byte for byte as Redis's.
    for c in [&mut r, &mut h] {
        assert_eq!(c.cmd(&["CONFIG", "SET", "rdbcompression", "no"]), Frame::ok());
    }
    let plain = dump(&mut h, b"s");
    assert_eq!(plain, dump(&mut r, b"s"));
    assert!(plain.len() > text.len());
}

/// The redis-server to compare with, started; `None` (after saying why) when there is none.
fn redis_server() -> Option<TestServer> {
    let bin = redis_tool("redis-server", "compare DUMP payloads with")?;
    Some(TestServer::builder(bin).configs(&[("save", "\"\""), ("appendonly", "no")]).spawn())
}

/// A Redis tool (`redis-server`, `redis-check-rdb`) at `$REDIS_SERVER`'s directory for the
/// checker, `$REDIS_SERVER` itself for the server, else on `PATH`; `None` after saying it
/// skips `purpose` when there is none, as the suite must run on machines that only have hotkv.
pub(crate) fn redis_tool(name: &str, purpose: &str) -> Option<PathBuf> {
    let from_env = std::env::var_os("REDIS_SERVER").map(PathBuf::from).and_then(|server| {
        if name == "redis-server" {
            Some(server)
        } else {
            server.parent().map(|d| d.join(name)).filter(|p| p.is_file())
        }
    });
    let bin = from_env.or_else(|| {
        std::env::var_os("PATH")?.to_str()?.split(':').map(|d| PathBuf::from(d).join(name)).find(|p| p.is_file())
    });
    if bin.is_none() {
        let hint = if name == "redis-server" { " or in $REDIS_SERVER" } else { "" };
        eprintln!("skipped: no {name} on PATH{hint} to {purpose}");
    }
    bin
}

fn dump(c: &mut RawClient, key: &[u8]) -> Vec<u8> {
    match c.cmd(&[&b"DUMP"[..], key]) {
        Frame::Bulk(b) => b,
        other => panic!("DUMP {}: {other}", String::from_utf8_lossy(key)),
    }
}

/// A key's type and contents in a form both servers agree on: hash pairs and set members
/// sorted (their order is the encoding's), scores as numbers, everything else as read.
fn contents(c: &mut RawClient, key: &[u8]) -> (String, Vec<Frame>) {
    let ty = c.cmd(&[&b"TYPE"[..], key]).text();
    let read: &[&[u8]] = match ty.as_str() {
        "string" => &[b"GET"],
        "list" => &[b"LRANGE", b"0", b"-1"],
        "hash" => &[b"HGETALL"],
        "set" => &[b"SMEMBERS"],
        "zset" => &[b"ZRANGE", b"0", b"-1", b"WITHSCORES"],
        other => panic!("unexpected type {other}"),
    };
    let mut argv = vec![read[0], key];
    argv.extend_from_slice(&read[1..]);
    let mut items = match c.cmd(&argv) {
        Frame::Array(items) => items,
        single => vec![single],
    };
    match ty.as_str() {
        "hash" => {
            let mut pairs: Vec<(Frame, Frame)> = items.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
            pairs.sort_by_key(|(f, _)| f.text_lossy());
            items = pairs.into_iter().flat_map(|(f, v)| [f, v]).collect();
        }
        "set" => items.sort_by_key(Frame::text_lossy),
        // Scores compared as numbers: Redis 7.0 prints 1e300 as `1.0000000000000000001e+300`
        // (%.17g), Valkey 8 and hotkv as `1e+300` (shortest round trip). Same double.
        "zset" => {
            for score in items.iter_mut().skip(1).step_by(2) {
                let text = score.text_lossy();
                let value: f64 = text.parse().unwrap_or_else(|_| panic!("score {text}"));
                *score = Frame::bulk(format!("{value:e}"));
            }
        }
        _ => {}
    }
    (ty, items)
}

fn argv(words: &[&str]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.as_bytes().to_vec()).collect()
}

/// One command that builds `key` from `elems` (`RPUSH key e...`, `HSET key f v ...`).
fn bulk_build(cmd: &str, key: &str, elems: impl IntoIterator<Item = String>) -> Vec<Vec<u8>> {
    let mut a = argv(&[cmd, key]);
    a.extend(elems.into_iter().map(String::into_bytes));
    a
}

fn cases() -> Vec<Case> {
    let case = |key, build, encoding| Case { key, build, encoding, here: encoding };
    let valkey = |c: Case, here| Case { here, ..c };
    let noise: String =
        (0..5000u32).map(|i| char::from(b'!' + (i.wrapping_mul(2_654_435_761) >> 25) as u8 % 90)).collect();
    let big = "x".repeat(100);
    vec![
        case("str-small", vec![argv(&["SET", "str-small", "hello"])], "embstr"),
        case("str-int", vec![argv(&["SET", "str-int", "12345"])], "int"),
        case("str-minint", vec![argv(&["SET", "str-minint", "-9223372036854775808"])], "int"),
        case("str-empty", vec![argv(&["SET", "str-empty", ""])], "embstr"),
        case("str-lzf", vec![argv(&["SET", "str-lzf", &"abc".repeat(7000)])], "raw"),
        case("str-raw", vec![argv(&["SET", "str-raw", &noise])], "raw"),
        valkey(
            case("list-small", vec![argv(&["RPUSH", "list-small", "a", "1", "-70000", "", "5000000000"])], "quicklist"),
            "listpack",
        ),
        case(
            "list-large",
            vec![bulk_build("RPUSH", "list-large", (0..2000).map(|i| format!("item-{i}")))],
            "quicklist",
        ),
        case("list-bigelem", vec![argv(&["RPUSH", "list-bigelem", "a", &"y".repeat(10000), "b"])], "quicklist"),
        case("hash-small", vec![argv(&["HSET", "hash-small", "f", "v", "n", "-12", "e", ""])], "listpack"),
        case(
            "hash-large",
            vec![bulk_build("HSET", "hash-large", (0..600).flat_map(|i| [format!("f{i}"), format!("{i}")]))],
            "hashtable",
        ),
        case("hash-longval", vec![argv(&["HSET", "hash-longval", "f", &big, "g", "1"])], "hashtable"),
        case("set-int-small", vec![argv(&["SADD", "set-int-small", "1", "-5", "70000", "5000000000"])], "intset"),
        case(
            "set-int-large",
            vec![bulk_build("SADD", "set-int-large", (0..1000).map(|i| (i * 7).to_string()))],
            "hashtable",
        ),
        valkey(case("set-str-small", vec![argv(&["SADD", "set-str-small", "a", "b", "12"])], "hashtable"), "listpack"),
        case(
            "set-str-large",
            vec![bulk_build("SADD", "set-str-large", (0..700).map(|i| format!("m{i}")))],
            "hashtable",
        ),
        case(
            "zset-small",
            vec![argv(&["ZADD", "zset-small", "1", "a", "2.5", "b", "-inf", "c", "inf", "d", "1e300", "e"])],
            "listpack",
        ),
        case(
            "zset-large",
            vec![bulk_build("ZADD", "zset-large", (0..300).flat_map(|i| [format!("{}.125", i % 40), format!("m{i}")]))],
            "skiplist",
        ),
        case("zset-longmember", vec![argv(&["ZADD", "zset-longmember", "1", &big, "2", "b"])], "skiplist"),
    ]
}

/// The engine's pre-7.0 fixtures (`crates/engine/src/rdb.rs`, `legacy_tests`).
const LEGACY: &[(&str, &str)] = &[
    ("list-ziplist", "0a151500000011000000030000016103c02c0104fef9ff0a00d74eadac15c9ba5d"),
    (
        "list-quicklist",
        "0e0311110000000d0000000200000178030179ff0b0b0000000a0000000000ff15150000000a000000010000e0351cdcdf02000000ff0a00cd4656d00b70d263",
    ),
    ("zset-ziplist", "0c21210000001b000000060000016303042d696e6606016103f20201620303322e35ff0a00b4f90ee3243a5af5"),
    ("hash-ziplist", "0d191900000013000000040000016603017603016e03f090eefeff0a00cdfc1dafff7d4cf6"),
    ("hash-zipmap", "090f02016601017600016e0201313200ff0a006533f05545169fce"),
];

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex")).collect()
}

/// A DUMP payload with its version footer set to `version` and its checksum redone.
fn with_version(payload: &[u8], version: u16) -> Vec<u8> {
    let mut body = payload[..payload.len() - 10].to_vec();
    body.extend_from_slice(&version.to_le_bytes());
    let crc = hotkv_engine::rdb::crc64(0, &body);
    body.extend_from_slice(&crc.to_le_bytes());
    body
}

#[test]
fn redis_7_4_payload_versions_restore_and_later_ones_are_refused() {
    let hotkv = crate::server();
    let mut h = hotkv.client();
    h.cmd(&["HSET", "h", "a", "1", "b", "2"]);
    h.cmd(&["HPEXPIREAT", "h", "4000000000000", "FIELDS", "1", "b"]);
    h.cmd(&["SET", "s", "text"]);
    for key in ["h", "s"] {
        let payload = dump(&mut h, key.as_bytes());
        assert_eq!(payload[payload.len() - 10..payload.len() - 8], [10, 0], "hotkv still writes version 10");
        let v12 = with_version(&payload, 12);
        let copy = format!("{key}-12");
        assert_eq!(h.cmd(&[&b"RESTORE"[..], copy.as_bytes(), b"0", &v12]), Frame::ok(), "{key}");
        let v13 = with_version(&payload, 13);
        crate::assert_err(
            &h.cmd(&[&b"RESTORE"[..], b"refused", b"0", &v13]),
            "ERR DUMP payload version or checksum are wrong",
        );
    }
    let times = Frame::Array(vec![Frame::Integer(-1), Frame::Integer(4_000_000_000_000)]);
    assert_eq!(h.cmd(&["HPEXPIRETIME", "h-12", "FIELDS", "2", "a", "b"]), times);
    assert_eq!(h.cmd(&["GET", "s-12"]), Frame::bulk("text"));
    assert_eq!(h.cmd(&["EXISTS", "refused"]), Frame::Integer(0));
}
