//! Test data for the file codec's unit tests: a keyspace holding every type in every encoding
//! hotkv has, with and without TTLs, over several databases, and a canonical view of a
//! keyspace to compare two of them.

use std::collections::BTreeMap;

use crate::entry::ValueRef;
use crate::keyspace::Keyspace;
use crate::object::Object;
use crate::testkit::TestKit;

/// The clock of the fixture's TestKit.
pub(crate) const NOW: i64 = 1_700_000_000_000;

/// A key's contents in a form that compares across encodings' element orders: its encoding,
/// its elements (hash pairs and set members sorted), scores as bits.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Canon {
    pub encoding: &'static str,
    pub items: Vec<Vec<u8>>,
    pub expire: Option<i64>,
}

/// Every key of every database: `(db, key) -> contents`.
pub(crate) fn contents(ks: &Keyspace) -> BTreeMap<(usize, Vec<u8>), Canon> {
    let mut all = BTreeMap::new();
    for db in 0..ks.databases() {
        let Some(d) = ks.db_if_used(db) else { continue };
        for slot in d.slots() {
            let t = slot.lock();
            for (_, e) in t.iter() {
                let (encoding, items) = canon(e.value());
                all.insert((db, e.key().to_vec()), Canon { encoding, items, expire: e.expire() });
            }
        }
    }
    all
}

fn canon(v: ValueRef<'_>) -> (&'static str, Vec<Vec<u8>>) {
    match v {
        ValueRef::Str(s) => ("string", vec![s.to_vec()]),
        ValueRef::Obj(Object::Str(s)) => ("string", vec![s.clone()]),
        ValueRef::Obj(Object::List(l)) => (l.encoding(), l.iter().map(|v| v.to_vec()).collect()),
        ValueRef::Obj(Object::Hash(h)) => {
            let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = h.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect();
            pairs.sort();
            (h.encoding(), pairs.into_iter().flat_map(|(f, v)| [f, v]).collect())
        }
        ValueRef::Obj(Object::Set(s)) => {
            let mut members: Vec<Vec<u8>> = s.iter().map(|m| m.to_vec()).collect();
            members.sort();
            (s.encoding(), members)
        }
        ValueRef::Obj(Object::ZSet(z)) => (
            z.encoding(),
            z.iter().into_iter().flat_map(|(m, s)| [m.to_vec(), s.to_bits().to_le_bytes().to_vec()]).collect(),
        ),
        ValueRef::Obj(Object::Stream(_)) => ("stream", vec![crate::rdb::dump_value(v, crate::rdb::Strings::Plain)]),
    }
}

/// Runs `argv` and checks it was not refused.
fn ok(t: &mut TestKit, argv: &[&str]) {
    let reply = t.run(argv);
    assert!(!reply.starts_with('-'), "{argv:?}: {reply}");
}

/// One command with many arguments: `cmd key` then `args`.
fn bulk(t: &mut TestKit, cmd: &str, key: &str, args: impl IntoIterator<Item = String>) {
    let mut argv = vec![cmd.as_bytes().to_vec(), key.as_bytes().to_vec()];
    argv.extend(args.into_iter().map(String::into_bytes));
    let reply = t.run_bytes(&argv);
    assert!(!reply.starts_with('-'), "{cmd} {key}: {reply}");
}

/// A keyspace with every type in every encoding, TTLs, binary keys and values, in databases
/// 0, 1 and 9. Key `gone` in database 0 expires at `NOW + 500`, every other TTL is an hour
/// or more away.
pub(crate) fn sample() -> TestKit {
    let mut t = TestKit::default();
    let noise: String =
        (0..20_000u32).map(|i| char::from(b'!' + (i.wrapping_mul(2_654_435_761) >> 25) as u8 % 90)).collect();
    ok(&mut t, &["SET", "str", "hello"]);
    ok(&mut t, &["SET", "int8", "-7"]);
    ok(&mut t, &["SET", "int16", "1234"]);
    ok(&mut t, &["SET", "int32", "-2147483648"]);
    ok(&mut t, &["SET", "int64", "9223372036854775807"]);
    ok(&mut t, &["SET", "padded", "007"]);
    ok(&mut t, &["SET", "empty", ""]);
    ok(&mut t, &["SET", "42", "key is an integer"]);
    ok(&mut t, &["SET", "long", &noise]);
    ok(&mut t, &["SET", "repeated", &"abc".repeat(5000)]);
    ok(&mut t, &["APPEND", "appended", "grown by append"]);
    t.run_bytes(&[b"SET".to_vec(), b"bin\x00\xff".to_vec(), b"\x00\x01\xfe\xff".to_vec()]);
    ok(&mut t, &["SET", "ttl", "v", "PX", "3600000"]);
    ok(&mut t, &["SET", "gone", "v", "PX", "500"]);
    ok(&mut t, &["RPUSH", "list-small", "a", "1", "-70000", "", "5000000000"]);
    bulk(&mut t, "RPUSH", "list-large", (0..5000).map(|i| format!("item-{i}")));
    ok(&mut t, &["RPUSH", "list-bigelem", "a", &"y".repeat(10000), "b"]);
    ok(&mut t, &["PEXPIRE", "list-large", "7200000"]);
    ok(&mut t, &["HSET", "hash-small", "f", "v", "n", "-12", "e", ""]);
    bulk(&mut t, "HSET", "hash-large", (0..600).flat_map(|i| [format!("f{i}"), format!("{i}")]));
    ok(&mut t, &["HSET", "hash-longval", "f", &"x".repeat(100), "g", "1"]);
    ok(&mut t, &["SADD", "set-int", "1", "-5", "70000", "5000000000"]);
    bulk(&mut t, "SADD", "set-int-large", (0..1000).map(|i| (i * 7).to_string()));
    ok(&mut t, &["SADD", "set-str", "a", "b", "12"]);
    bulk(&mut t, "SADD", "set-str-large", (0..700).map(|i| format!("m{i}")));
    ok(&mut t, &["PEXPIRE", "set-int", "9000000"]);
    ok(&mut t, &["ZADD", "zset-small", "1", "a", "2.5", "b", "-inf", "c", "inf", "d", "1e300", "e"]);
    bulk(&mut t, "ZADD", "zset-large", (0..300).flat_map(|i| [format!("{}.125", i % 40), format!("m{i}")]));
    ok(&mut t, &["ZADD", "zset-longmember", "1", &"z".repeat(100), "2", "b"]);
    ok(&mut t, &["PEXPIRE", "zset-large", "3600000"]);
    t.db = 1;
    ok(&mut t, &["SET", "str", "database one"]);
    ok(&mut t, &["RPUSH", "list-small", "x"]);
    ok(&mut t, &["SET", "ttl1", "v", "PX", "86400000"]);
    t.db = 9;
    ok(&mut t, &["SADD", "set-int", "3"]);
    ok(&mut t, &["HSET", "hash-small", "only", "field"]);
    t.db = 0;
    t
}

/// The fixture's keys as they should load at `now`: those expired by then left out.
pub(crate) fn expected(t: &TestKit, now: i64) -> BTreeMap<(usize, Vec<u8>), Canon> {
    let mut all = contents(&t.ks);
    all.retain(|_, c| c.expire.is_none_or(|when| when >= now));
    all
}

/// Bytes from hex text (whitespace ignored).
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    let s: Vec<u8> = s.bytes().filter(|b| !b.is_ascii_whitespace()).collect();
    s.chunks(2).map(|p| u8::from_str_radix(std::str::from_utf8(p).unwrap(), 16).unwrap()).collect()
}

/// Hex text of bytes.
pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// `redis-server` 7.0.15's `SAVE` after `SET k v`.
pub(crate) const REDIS_STRING_FILE: &str = "524544495330303130fa0972656469732d76657206372e302e3135fa0a72656469732d62697473c040\
fa056374696d65c28a3c0f6bfa08757365642d6d656dc288540e00fa08616f662d62617365c000fe00fb0100\
00016b0176ff3ba4bf393c6d6628";

/// `redis-server` 7.0.15's `SAVE` after `RPUSH l a 1` and `PEXPIREAT l 4102444800000`.
pub(crate) const REDIS_LIST_FILE: &str = "524544495330303130fa0972656469732d76657206372e302e3135fa0a72656469732d62697473c040\
fa056374696d65c28a3c0f6bfa08757365642d6d656dc25837 1000fa08616f662d62617365c000fe00fb0101\
fc00d8c32cbb0300001201 6c01020c0c000000020081610201 01ffff6e0d9653a2a16d8e";
