//! Hash commands on named fields: HSET, HSETNX, HMSET, HGET, HMGET, HDEL, HEXISTS, HLEN,
//! HSTRLEN, HINCRBY, HINCRBYFLOAT. Whole-hash reads are in `hash_walk`.
//!
//! Replies, errors and keyspace events follow Valkey's `t_hash.c`. A write to a missing key
//! works on a fresh hash that is stored only if the command left it non-empty, and a hash
//! that loses its last field is deleted, as Valkey never keeps an empty collection.

use hotkv_protocol::{Args, ReplyBuf};

use super::counter::{checked_sum, format_human, parse_float};
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::types::hash::{Hash, HashLimits};
use crate::types::lpentry::Elem;

/// Hash command rows.
pub static COMMANDS: &[Spec] = &[
    row(
        "hset",
        -4,
        WRITE_FAST,
        RW_UPDATE,
        "2.0.0",
        "Creates or modifies the value of a field in a hash.",
        "O(1) for each field/value pair added, so O(N) to add N field/value pairs when the command is called with \
         multiple field/value pairs.",
        hset,
    ),
    row(
        "hsetnx",
        4,
        WRITE_FAST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "2.0.0",
        "Sets the value of a field in a hash only when the field doesn't exist.",
        "O(1)",
        hsetnx,
    ),
    row(
        "hmset",
        -4,
        WRITE_FAST,
        RW_UPDATE,
        "2.0.0",
        "Sets the values of multiple fields.",
        "O(N) where N is the number of fields being set.",
        hset,
    ),
    row(
        "hget",
        3,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        "2.0.0",
        "Returns the value of a field in a hash.",
        "O(1)",
        hget,
    ),
    row(
        "hmget",
        -3,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        "2.0.0",
        "Returns the values of all fields in a hash.",
        "O(N) where N is the number of fields being requested.",
        hmget,
    ),
    row(
        "hdel",
        -3,
        flags::WRITE | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "2.0.0",
        "Deletes one or more fields and their values from a hash. Deletes the hash if no fields remain.",
        "O(N) where N is the number of fields to be removed.",
        hdel,
    ),
    row(
        "hexists",
        3,
        flags::READONLY | flags::FAST,
        RO,
        "2.0.0",
        "Determines whether a field exists in a hash.",
        "O(1)",
        hexists,
    ),
    row("hlen", 2, flags::READONLY | flags::FAST, RO, "2.0.0", "Returns the number of fields in a hash.", "O(1)", hlen),
    row(
        "hstrlen",
        3,
        flags::READONLY | flags::FAST,
        RO,
        "3.2.0",
        "Returns the length of the value of a field.",
        "O(1)",
        hstrlen,
    ),
    row(
        "hincrby",
        4,
        WRITE_FAST,
        RW_ACCESS_UPDATE,
        "2.0.0",
        "Increments the integer value of a field in a hash by a number. Uses 0 as initial value if the field doesn't \
         exist.",
        "O(1)",
        hincrby,
    ),
    row(
        "hincrbyfloat",
        4,
        WRITE_FAST,
        RW_ACCESS_UPDATE,
        "2.6.0",
        "Increments the floating point value of a field by a number. Uses 0 as initial value if the field doesn't \
         exist.",
        "O(1)",
        hincrbyfloat,
    ),
];

/// A row of a hash command: HASH ACL category, `hash` group, keys from its key specs.
#[allow(clippy::too_many_arguments)]
pub(super) const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(
        name,
        arity,
        flags,
        acl::HASH,
        keys,
        "hash",
        since,
        summary,
        complexity,
        EngineCmd { run, plan: LockPlan::Keys },
    )
}

const WRITE_FAST: u32 = flags::WRITE | flags::DENYOOM | flags::FAST;
const RO: &[KeySpec] = &[KeySpec::single(1, kf::RO)];
const RO_ACCESS: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];
const RW_UPDATE: &[KeySpec] = &[KeySpec::single(1, kf::RW | kf::UPDATE)];
const RW_ACCESS_UPDATE: &[KeySpec] = &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE)];

impl From<&crate::ctx::EngineConfig> for HashLimits {
    fn from(cfg: &crate::ctx::EngineConfig) -> HashLimits {
        HashLimits { max_entries: cfg.hash_max_listpack_entries, max_value: cfg.hash_max_listpack_value }
    }
}

/// Runs `f` on the hash at `key`, or on a new empty hash when the key is missing (Valkey's
/// `hashTypeLookupWriteOrCreate`). A new hash is stored only if `f` succeeded and left it
/// non-empty; an existing one is recorded as modified.
fn update<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    f: impl FnOnce(&mut Hash) -> Result<R, CommandError>,
) -> Result<R, CommandError> {
    if let Some(mut k) = ctx.write(key)? {
        let r = f(k.hash_mut()?)?;
        ctx.modified(key);
        return Ok(r);
    }
    let mut h = Hash::new();
    let r = f(&mut h)?;
    if !h.is_empty() {
        ctx.set(key, NewValue::Object(Object::Hash(h)), Ttl::Clear)?;
    }
    Ok(r)
}

fn hset(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let hmset = args.get(0).eq_ignore_ascii_case(b"hmset");
    if args.len() % 2 == 1 {
        return Err(CommandError::WrongArity(if hmset { "hmset" } else { "hset" }.into()));
    }
    let key = args.get(1);
    let limits = HashLimits::from(ctx.cfg);
    let pairs = (args.len() - 2) / 2;
    let longest = args.iter().skip(2).map(<[u8]>::len).max().unwrap_or(0);
    let added = update(ctx, key, |h| {
        h.prepare(pairs, longest, limits);
        Ok((0..pairs).filter(|i| h.set(args.get(2 + 2 * i), args.get(3 + 2 * i), limits)).count())
    })?;
    // Valkey counts every pair as a change.
    ctx.stats.dirty += pairs as u64 - 1;
    ctx.events.notify('h', "hset", key, ctx.db);
    if hmset {
        out.ok()
    } else {
        out.int(added as i64)
    }
    Ok(())
}

fn hsetnx(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, field, value) = (args.get(1), args.get(2), args.get(3));
    if let Some(k) = ctx.write(key)?
        && k.hash()?.contains(field)
    {
        out.int(0);
        return Ok(());
    }
    let limits = HashLimits::from(ctx.cfg);
    update(ctx, key, |h| {
        h.prepare(1, field.len().max(value.len()), limits);
        h.set(field, value, limits);
        Ok(())
    })?;
    ctx.events.notify('h', "hset", key, ctx.db);
    out.int(1);
    Ok(())
}

fn hget(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(k) = ctx.read(args.get(1))? else {
        out.null();
        return Ok(());
    };
    match k.hash()?.get(args.get(2)) {
        Some(v) => v.reply(out),
        None => out.null(),
    }
    Ok(())
}

fn hmget(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let k = ctx.read(args.get(1))?;
    // A missing key is an empty hash: one null per field.
    let h = match &k {
        Some(k) => Some(k.hash()?),
        None => None,
    };
    out.array(args.len() - 2);
    for field in args.iter().skip(2) {
        match h.and_then(|h| h.get(field)) {
            Some(v) => v.reply(out),
            None => out.null(),
        }
    }
    Ok(())
}

fn hdel(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let h = k.hash_mut()?;
    let mut deleted = 0;
    for field in args.iter().skip(2) {
        if h.remove(field) {
            deleted += 1;
            if h.is_empty() {
                break;
            }
        }
    }
    let emptied = h.is_empty();
    if emptied {
        drop(k.delete());
    }
    if deleted > 0 {
        ctx.changed(key, 'h', "hdel", emptied);
        ctx.stats.dirty += deleted - 1;
    }
    out.int(deleted as i64);
    Ok(())
}

fn hexists(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let found = match ctx.read(args.get(1))? {
        Some(k) => k.hash()?.contains(args.get(2)),
        None => false,
    };
    out.int(i64::from(found));
    Ok(())
}

fn hlen(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let n = match ctx.read(args.get(1))? {
        Some(k) => k.hash()?.len(),
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn hstrlen(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let n = match ctx.read(args.get(1))? {
        Some(k) => k.hash()?.get(args.get(2)).map_or(0, Elem::str_len),
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn hincrby(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let by = int_arg(args.get(3))?;
    let limits = HashLimits::from(ctx.cfg);
    let value = update(ctx, key, |h| {
        let current = match h.get(field) {
            Some(v) => v.as_int().ok_or_else(|| CommandError::err("hash value is not an integer"))?,
            None => 0,
        };
        let value = current.checked_add(by).ok_or(CommandError::Overflow)?;
        h.set_keeping_ttl(field, itoa::Buffer::new().format(value).as_bytes(), limits);
        Ok(value)
    })?;
    ctx.events.notify('h', "hincrby", key, ctx.db);
    out.int(value);
    Ok(())
}

fn hincrbyfloat(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, field) = (args.get(1), args.get(2));
    let by = parse_float(args.get(3))?;
    // Checked before the key is looked up, so a bad increment never creates it.
    if !by.is_finite() {
        return Err(CommandError::err("value is NaN or Infinity"));
    }
    let limits = HashLimits::from(ctx.cfg);
    let (text, ttl) = update(ctx, key, |h| {
        let current = match h.get(field) {
            Some(Elem::Int(n)) => n as f64,
            Some(Elem::Str(s)) => parse_float(s).map_err(|_| CommandError::err("hash value is not a float"))?,
            None => 0.0,
        };
        let mut text = String::new();
        format_human(checked_sum(current, by)?, &mut text);
        h.set_keeping_ttl(field, text.as_bytes(), limits);
        Ok((text, h.expire_of(field)))
    })?;
    ctx.propagate_as(&[b"HSET".as_slice(), key, field, text.as_bytes()]);
    // The HSET clears the field's TTL on a replica; give it back, in the absolute form.
    if let Some(when) = ttl {
        let when = itoa::Buffer::new().format(when).to_owned();
        ctx.propagate_as(&[b"HPEXPIREAT".as_slice(), key, when.as_bytes(), b"FIELDS", b"1", field]);
    }
    ctx.events.notify('h', "hincrbyfloat", key, ctx.db);
    out.bulk(text.as_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use hotkv_protocol::Protocol;
    use proptest::prelude::*;

    use crate::testkit::{Resp, TestKit};

    const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

    fn strings(r: &Resp) -> Vec<String> {
        r.items().iter().map(|x| x.text().to_string()).collect()
    }

    fn encoding(t: &mut TestKit, key: &str) -> String {
        Resp::parse(&t.run(&["OBJECT", "ENCODING", key])).text().to_string()
    }

    #[test]
    fn hset_hget_and_hmset() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["HSET", "h", "a", "1", "b", "2"]), ":2\r\n");
        assert_eq!(t.run(&["HSET", "h", "a", "x", "c", "3"]), ":1\r\n", "only new fields count");
        assert_eq!(t.run(&["HGET", "h", "a"]), "$1\r\nx\r\n");
        assert_eq!(t.run(&["HGET", "h", "zz"]), "$-1\r\n");
        assert_eq!(t.run(&["HGET", "nokey", "a"]), "$-1\r\n");
        assert_eq!(t.run(&["HMSET", "h", "d", "4"]), "+OK\r\n");
        assert_eq!(t.run(&["HLEN", "h"]), ":4\r\n");
        assert_eq!(t.run(&["HSET", "h", "a", "1", "b"]), "-ERR wrong number of arguments for 'hset' command\r\n");
        assert_eq!(t.run(&["HMSET", "h", "a"]), "-ERR wrong number of arguments for 'hmset' command\r\n");
        assert_eq!(t.run(&["HSET", "h", "a", "1", "a", "2"]), ":0\r\n", "the last value of a repeated field wins");
        assert_eq!(t.run(&["HGET", "h", "a"]), "$1\r\n2\r\n");
        assert_eq!(t.run(&["TYPE", "h"]), "+hash\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["HGET", "h", "zz"]), "_\r\n");
    }

    #[test]
    fn hsetnx_sets_only_new_fields() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["HSETNX", "h", "f", "1"]), ":1\r\n");
        assert_eq!(t.run(&["HSETNX", "h", "f", "2"]), ":0\r\n");
        assert_eq!(t.run(&["HGET", "h", "f"]), "$1\r\n1\r\n");
        t.run(&["SET", "s", "v"]);
        assert_eq!(t.run(&["HSETNX", "s", "f", "1"]), WRONGTYPE);
    }

    #[test]
    fn hmget_treats_a_missing_key_as_empty() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "n", "-77"]);
        assert_eq!(t.run(&["HMGET", "h", "a", "x", "n"]), "*3\r\n$1\r\n1\r\n$-1\r\n$3\r\n-77\r\n");
        assert_eq!(t.run(&["HMGET", "nokey", "a", "b"]), "*2\r\n$-1\r\n$-1\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["HMGET", "nokey", "a"]), "*1\r\n_\r\n");
    }

    #[test]
    fn hdel_deletes_the_emptied_hash() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
        t.events.take();
        assert_eq!(t.run(&["HDEL", "h", "a", "nope", "a"]), ":1\r\n");
        assert_eq!(t.events.take(), ["h:hdel:h@0"]);
        assert_eq!(t.run(&["HDEL", "h", "nope"]), ":0\r\n");
        assert!(t.events.take().is_empty(), "nothing deleted, nothing notified");
        assert_eq!(t.run(&["HDEL", "h", "b", "c", "d"]), ":2\r\n");
        assert_eq!(t.events.take(), ["h:hdel:h@0", "g:del:h@0"]);
        assert_eq!(t.run(&["EXISTS", "h"]), ":0\r\n");
        assert_eq!(t.run(&["HDEL", "h", "a"]), ":0\r\n");
    }

    #[test]
    fn hexists_hlen_hstrlen() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "s", "hello", "n", "-123", "z", "0", "big", "9223372036854775808"]);
        assert_eq!(t.run(&["HEXISTS", "h", "s"]), ":1\r\n");
        assert_eq!(t.run(&["HEXISTS", "h", "x"]), ":0\r\n");
        assert_eq!(t.run(&["HEXISTS", "nokey", "x"]), ":0\r\n");
        assert_eq!(t.run(&["HLEN", "h"]), ":4\r\n");
        assert_eq!(t.run(&["HLEN", "nokey"]), ":0\r\n");
        for (f, n) in [("s", 5), ("n", 4), ("z", 1), ("big", 19), ("x", 0)] {
            assert_eq!(t.run(&["HSTRLEN", "h", f]), format!(":{n}\r\n"), "{f}");
        }
        assert_eq!(t.run(&["HSTRLEN", "nokey", "s"]), ":0\r\n");
    }

    #[test]
    fn hincrby() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["HINCRBY", "h", "n", "2"]), ":2\r\n");
        assert_eq!(t.run(&["HINCRBY", "h", "n", "-5"]), ":-3\r\n");
        t.run(&["HSET", "h", "big", "17179869184", "s", " 11", "t", "11 "]);
        assert_eq!(t.run(&["HINCRBY", "h", "big", "17179869184"]), ":34359738368\r\n");
        assert_eq!(t.run(&["HINCRBY", "h", "s", "1"]), "-ERR hash value is not an integer\r\n");
        assert_eq!(t.run(&["HINCRBY", "h", "t", "1"]), "-ERR hash value is not an integer\r\n");
        assert_eq!(t.run(&["HINCRBY", "h", "n", "v"]), "-ERR value is not an integer or out of range\r\n");
        t.run(&["HSET", "h", "m", "-9223372036854775484"]);
        assert_eq!(t.run(&["HINCRBY", "h", "m", "-1"]), ":-9223372036854775485\r\n");
        assert_eq!(t.run(&["HINCRBY", "h", "m", "-10000"]), "-ERR increment or decrement would overflow\r\n");
        assert_eq!(t.run(&["HINCRBY", "x", "f", "zz"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["EXISTS", "x"]), ":0\r\n");
        t.events.take();
        t.run(&["HINCRBY", "h", "n", "1"]);
        assert_eq!(t.events.take(), ["h:hincrby:h@0"]);
    }

    #[test]
    fn hincrbyfloat() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "f", "10.5"]), "$4\r\n10.5\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "f", "0.1"]), "$4\r\n10.6\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "g", "1.23"]), "$4\r\n1.23\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "g", "0.77"]), "$1\r\n2\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "g", "-0.1"]), "$3\r\n1.9\r\n");
        t.run(&["HSET", "h", "i", "5", "s", " 11", "nul", "1\u{0}2"]);
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "i", "1.5"]), "$3\r\n6.5\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "s", "1"]), "-ERR hash value is not a float\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "nul", "1"]), "-ERR hash value is not a float\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "h", "i", "v"]), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run(&["HINCRBYFLOAT", "hfoo", "f", "+inf"]), "-ERR value is NaN or Infinity\r\n");
        assert_eq!(t.run(&["EXISTS", "hfoo"]), ":0\r\n");
        t.run(&["HSET", "h", "huge", "1.7e308"]);
        assert_eq!(
            t.run(&["HINCRBYFLOAT", "h", "huge", "1.7e308"]),
            "-ERR increment would produce NaN or Infinity\r\n"
        );
    }

    #[test]
    fn hincrbyfloat_converts_on_long_values_and_fields() {
        let mut t = TestKit::default();
        t.cfg.hash_max_listpack_value = 8;
        t.run(&["HSET", "small", "tmp", "0"]);
        t.run(&["HSET", "big", "tmp", "0"]);
        t.run(&["HINCRBYFLOAT", "small", "tmp", "0.000005"]);
        t.run(&["HINCRBYFLOAT", "big", "tmp", "0.0000005"]);
        assert_eq!((encoding(&mut t, "small"), encoding(&mut t, "big")), ("listpack".into(), "hashtable".into()));
        t.run(&["HINCRBYFLOAT", "small2", "abcdefgh", "1"]);
        t.run(&["HINCRBYFLOAT", "big2", "abcdefghi", "1"]);
        assert_eq!((encoding(&mut t, "small2"), encoding(&mut t, "big2")), ("listpack".into(), "hashtable".into()));
    }

    #[test]
    fn encoding_converts_at_valkeys_thresholds() {
        let mut t = TestKit::default();
        let fields: Vec<String> = (0..512).flat_map(|i| [format!("f{i}"), "v".to_string()]).collect();
        let mut argv = vec!["HSET", "h"];
        argv.extend(fields.iter().map(String::as_str));
        assert_eq!(t.run(&argv), ":512\r\n");
        assert_eq!(encoding(&mut t, "h"), "listpack");
        t.run(&["HSET", "h", "f512", "v"]);
        assert_eq!(encoding(&mut t, "h"), "hashtable");
        for i in 0..513 {
            t.run(&["HDEL", "h", &format!("f{i}")]);
            if i == 511 {
                assert_eq!(encoding(&mut t, "h"), "hashtable", "never converts back");
            }
        }
        assert_eq!(t.run(&["EXISTS", "h"]), ":0\r\n");
        // 64-byte values stay compact, 65 bytes convert; so does a long field.
        t.run(&["HSET", "v", "f", &"x".repeat(64)]);
        assert_eq!(encoding(&mut t, "v"), "listpack");
        t.run(&["HSET", "v", "f", &"x".repeat(65)]);
        assert_eq!(encoding(&mut t, "v"), "hashtable");
        t.run(&["HSET", "k", &"k".repeat(65), "v"]);
        assert_eq!(encoding(&mut t, "k"), "hashtable");
        // Too many pairs in one call convert before inserting, even when they repeat.
        t.cfg.hash_max_listpack_entries = 2;
        t.run(&["HSET", "p", "a", "1", "a", "2", "a", "3"]);
        assert_eq!((encoding(&mut t, "p"), t.run(&["HLEN", "p"])), ("hashtable".into(), ":1\r\n".into()));
    }

    #[test]
    fn wrong_type_everywhere() {
        let mut t = TestKit::default();
        t.run(&["SET", "s", "v"]);
        for argv in [
            &["HSET", "s", "f", "v"][..],
            &["HSETNX", "s", "f", "v"],
            &["HMSET", "s", "f", "v"],
            &["HGET", "s", "f"],
            &["HMGET", "s", "f"],
            &["HDEL", "s", "f"],
            &["HEXISTS", "s", "f"],
            &["HLEN", "s"],
            &["HSTRLEN", "s", "f"],
            &["HGETALL", "s"],
            &["HKEYS", "s"],
            &["HVALS", "s"],
            &["HINCRBY", "s", "f", "1"],
            &["HINCRBYFLOAT", "s", "f", "1"],
            &["HRANDFIELD", "s"],
            &["HRANDFIELD", "s", "2", "WITHVALUES"],
            &["HSCAN", "s", "0", "BOGUS"],
        ] {
            assert_eq!(t.run(argv), WRONGTYPE, "{argv:?}");
        }
        t.run(&["HSET", "h", "f", "v"]);
        for argv in
            [&["GET", "h"][..], &["APPEND", "h", "x"], &["INCR", "h"], &["STRLEN", "h"], &["GETRANGE", "h", "0", "1"]]
        {
            assert_eq!(t.run(argv), WRONGTYPE, "{argv:?}");
        }
        assert_eq!(t.run(&["HGET", "h", "f"]), "$1\r\nv\r\n", "the hash is untouched");
    }

    #[test]
    fn keyspace_events_and_dirty() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2"]);
        assert_eq!(t.events.take(), ["n:new:h@0", "h:hset:h@0"]);
        assert_eq!(t.stats.dirty, 2);
        t.run(&["HSETNX", "h", "a", "1"]);
        t.run(&["HINCRBYFLOAT", "h", "a", "1"]);
        assert_eq!(t.events.take(), ["h:hincrbyfloat:h@0"]);
        t.run(&["HDEL", "nokey", "a"]);
        t.run(&["HGET", "nokey", "a"]);
        assert_eq!(t.events.take(), ["m:keymiss:nokey@0"]);
    }

    #[test]
    fn memory_usage_and_copies() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2"]);
        let small: i64 = t.run(&["MEMORY", "USAGE", "h"])[1..].trim().parse().unwrap();
        t.cfg.hash_max_listpack_entries = 0;
        t.run(&["HSET", "t", "a", "1", "b", "2"]);
        let table: i64 = t.run(&["MEMORY", "USAGE", "t", "SAMPLES", "0"])[1..].trim().parse().unwrap();
        assert!(small > 0 && table > small, "{small} {table}");
        assert_eq!(t.run(&["COPY", "t", "c"]), ":1\r\n");
        t.run(&["HSET", "c", "z", "9"]);
        assert_eq!((t.run(&["HLEN", "t"]), t.run(&["HLEN", "c"])), (":2\r\n".into(), ":3\r\n".into()));
        assert_eq!(encoding(&mut t, "c"), "hashtable");
        assert_eq!(t.run(&["RENAME", "c", "d"]), "+OK\r\n");
        assert_eq!(t.run(&["HGET", "d", "z"]), "$1\r\n9\r\n");
        assert_eq!(t.run(&["MOVE", "d", "1"]), ":1\r\n");
        t.run(&["SELECT", "1"]);
        assert_eq!(t.run(&["HLEN", "d"]), ":3\r\n");
    }

    /// One hash command for the property test.
    #[derive(Debug, Clone)]
    enum Op {
        Set(u8, u8),
        SetNx(u8, u8),
        Del(Vec<u8>),
        IncrBy(u8, i8),
        Get(u8),
        Len,
        GetAll,
        Exists(u8),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..12, 0u8..6).prop_map(|(f, v)| Op::Set(f, v)),
            (0u8..12, 0u8..6).prop_map(|(f, v)| Op::SetNx(f, v)),
            prop::collection::vec(0u8..12, 1..4).prop_map(Op::Del),
            (0u8..12, any::<i8>()).prop_map(|(f, n)| Op::IncrBy(f, n)),
            (0u8..12).prop_map(Op::Get),
            Just(Op::Len),
            Just(Op::GetAll),
            (0u8..12).prop_map(Op::Exists),
        ]
    }

    /// Field and value texts: short ones, integers, and long ones that force a conversion.
    fn field(f: u8) -> String {
        if f == 11 { "long-field-name-beyond-the-limit".into() } else { format!("f{f}") }
    }

    fn value(v: u8) -> String {
        match v {
            0 => "0".into(),
            1 => "-17".into(),
            2 => "x".repeat(20),
            _ => format!("v{v}"),
        }
    }

    proptest! {
        #[test]
        fn hash_commands_match_a_model(ops in prop::collection::vec(op(), 1..60)) {
            let mut t = TestKit::default();
            t.cfg.hash_max_listpack_entries = 5;
            t.cfg.hash_max_listpack_value = 16;
            let mut model: BTreeMap<String, String> = BTreeMap::new();
            for op in ops {
                match op {
                    Op::Set(f, v) => {
                        let new = model.insert(field(f), value(v)).is_none();
                        prop_assert_eq!(t.run(&["HSET", "h", &field(f), &value(v)]), format!(":{}\r\n", i64::from(new)));
                    }
                    Op::SetNx(f, v) => {
                        let new = !model.contains_key(&field(f));
                        if new {
                            model.insert(field(f), value(v));
                        }
                        prop_assert_eq!(t.run(&["HSETNX", "h", &field(f), &value(v)]), format!(":{}\r\n", i64::from(new)));
                    }
                    Op::Del(fs) => {
                        let names: Vec<String> = fs.iter().map(|&f| field(f)).collect();
                        let mut n = 0;
                        for name in &names {
                            n += i64::from(model.remove(name).is_some());
                        }
                        let mut argv = vec!["HDEL", "h"];
                        argv.extend(names.iter().map(String::as_str));
                        prop_assert_eq!(t.run(&argv), format!(":{n}\r\n"));
                    }
                    Op::IncrBy(f, by) => {
                        let reply = t.run(&["HINCRBY", "h", &field(f), &by.to_string()]);
                        match model.get(&field(f)).map(|v| v.parse::<i64>()) {
                            Some(Err(_)) => prop_assert_eq!(reply, "-ERR hash value is not an integer\r\n"),
                            current => {
                                let n = current.map_or(0, |c| c.unwrap()) + i64::from(by);
                                model.insert(field(f), n.to_string());
                                prop_assert_eq!(reply, format!(":{n}\r\n"));
                            }
                        }
                    }
                    Op::Get(f) => {
                        let want = match model.get(&field(f)) {
                            Some(v) => format!("${}\r\n{v}\r\n", v.len()),
                            None => "$-1\r\n".into(),
                        };
                        prop_assert_eq!(t.run(&["HGET", "h", &field(f)]), want);
                    }
                    Op::Len => prop_assert_eq!(t.run(&["HLEN", "h"]), format!(":{}\r\n", model.len())),
                    Op::Exists(f) => {
                        let want = format!(":{}\r\n", i64::from(model.contains_key(&field(f))));
                        prop_assert_eq!(t.run(&["HEXISTS", "h", &field(f)]), want);
                    }
                    Op::GetAll => {
                        let flat = strings(&Resp::parse(&t.run(&["HGETALL", "h"])));
                        let got: BTreeMap<String, String> = flat.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
                        prop_assert_eq!(&got, &model);
                    }
                }
                prop_assert_eq!(t.run(&["EXISTS", "h"]), format!(":{}\r\n", i64::from(!model.is_empty())));
                if !model.is_empty() {
                    let compact = model.len() <= 5 && model.iter().all(|(k, v)| k.len() <= 16 && v.len() <= 16);
                    let enc = encoding(&mut t, "h");
                    // Compact data is packed unless it once grew past the limits.
                    prop_assert!(compact || enc == "hashtable", "{} for {:?}", enc, model);
                }
            }
        }
    }
}
