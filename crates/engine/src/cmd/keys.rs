//! Generic commands on named keys: DEL, UNLINK, EXISTS, TYPE, TOUCH, RENAME, RENAMENX.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, LookupFlags};
use crate::entry::{Entry, NewValue, ValueRef};
use crate::error::{CmdResult, CommandError};
use crate::hash::key_hash;
use crate::object::Object;

/// Generic key command rows of this file.
pub static COMMANDS: &[Spec] = &[
    row(
        "del",
        -2,
        flags::WRITE,
        ALL_RM,
        LockPlan::Keys,
        "1.0.0",
        "Deletes one or more keys.",
        "O(N) where N is the number of keys that will be removed. When a key to remove holds a value other than a \
         string, the individual complexity for this key is O(M) where M is the number of elements in the list, set, \
         sorted set or hash. Removing a single key that holds a string value is O(1).",
        del,
    )
    .with_tips(MULTI_SHARD_SUM),
    row(
        "unlink",
        -2,
        flags::WRITE | flags::FAST,
        ALL_RM,
        LockPlan::Keys,
        "4.0.0",
        "Asynchronously deletes one or more keys.",
        "O(1) for each key removed regardless of its size. Then the command does O(N) work in a different thread in \
         order to reclaim memory, where N is the number of allocations the deleted objects where composed of.",
        unlink,
    )
    .with_tips(MULTI_SHARD_SUM),
    row(
        "exists",
        -2,
        flags::READONLY | flags::FAST,
        ALL_RO,
        LockPlan::Keys,
        "1.0.0",
        "Determines whether one or more keys exist.",
        "O(N) where N is the number of keys to check.",
        exists,
    )
    .with_tips(MULTI_SHARD_SUM),
    row(
        "type",
        2,
        flags::READONLY | flags::FAST,
        &[KeySpec::single(1, kf::RO)],
        LockPlan::Keys,
        "1.0.0",
        "Determines the type of value stored at a key.",
        "O(1)",
        type_,
    ),
    row(
        "touch",
        -2,
        flags::READONLY | flags::FAST,
        ALL_RO,
        LockPlan::Keys,
        "3.2.1",
        "Returns the number of existing keys out of those specified after updating the time they were last accessed.",
        "O(N) where N is the number of keys that will be touched.",
        touch,
    )
    .with_tips(MULTI_SHARD_SUM),
    row(
        "rename",
        3,
        flags::WRITE,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE), KeySpec::single(2, kf::OW | kf::UPDATE)],
        LockPlan::Keys,
        "1.0.0",
        "Renames a key and overwrites the destination.",
        "O(1)",
        rename,
    ),
    row(
        "renamenx",
        3,
        flags::WRITE | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE), KeySpec::single(2, kf::OW | kf::INSERT)],
        LockPlan::Keys,
        "1.0.0",
        "Renames a key only when the target key name doesn't exist.",
        "O(1)",
        renamenx,
    ),
];

/// A row of a generic command (KEYSPACE ACL category, `generic` group).
#[allow(clippy::too_many_arguments)]
pub(super) const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    plan: LockPlan,
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(
        name,
        arity,
        flags,
        acl::KEYSPACE,
        keys,
        "generic",
        since,
        summary,
        complexity,
        EngineCmd { run, plan },
    )
}

const ALL_RM: &[KeySpec] = &[KeySpec::range(1, -1, 1, kf::RM | kf::DELETE)];
const ALL_RO: &[KeySpec] = &[KeySpec::range(1, -1, 1, kf::RO)];
const MULTI_SHARD_SUM: &[&str] = &["request_policy:multi_shard", "response_policy:agg_sum"];
/// TYPE, TTL and EXISTS look without counting as an access.
const NO_TOUCH: LookupFlags = LookupFlags { no_touch: true, no_notify: false };

fn del(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let mut n = 0;
    for key in args.iter().skip(1) {
        if ctx.delete(key)? {
            ctx.events.notify('g', "del", key, ctx.db);
            n += 1;
        }
    }
    out.int(n);
    Ok(())
}

/// UNLINK frees values off the command path in Valkey. Our values are strings freed in
/// O(1) allocations, so deleting in place is already as cheap as handing them off.
fn unlink(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    del(ctx, args, out)
}

fn exists(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let mut n = 0;
    // A key named twice counts twice, as in Valkey.
    for key in args.iter().skip(1) {
        if ctx.read_with(key, NO_TOUCH)?.is_some() {
            n += 1;
        }
    }
    out.int(n);
    Ok(())
}

fn type_(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let name = match ctx.read_with(args.get(1), NO_TOUCH)? {
        Some(k) => type_name(k.value()),
        None => "none",
    };
    out.simple(name);
    Ok(())
}

/// The name TYPE reports, and SCAN TYPE matches, for a value.
pub(super) fn type_name(v: ValueRef<'_>) -> &'static str {
    match v {
        ValueRef::Str(_) => "string",
        ValueRef::Obj(o) => o.type_name(),
    }
}

fn touch(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    // TOUCH exists to update access times, so it does even for a NO-TOUCH client.
    let saved = std::mem::replace(&mut ctx.no_touch, false);
    let mut n = 0;
    let mut result = Ok(());
    for key in args.iter().skip(1) {
        match ctx.read(key) {
            Ok(found) => n += i64::from(found.is_some()),
            Err(e) => {
                result = Err(e);
                break;
            }
        }
    }
    ctx.no_touch = saved;
    result?;
    out.int(n);
    Ok(())
}

fn rename(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    rename_generic(ctx, args, false, out)
}

fn renamenx(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    rename_generic(ctx, args, true, out)
}

fn rename_generic(ctx: &mut Ctx<'_>, args: Args<'_>, nx: bool, out: &mut ReplyBuf) -> CmdResult {
    let (src, dst) = (args.get(1), args.get(2));
    if ctx.write(src)?.is_none() {
        return Err(CommandError::NoSuchKey);
    }
    // Renaming a key onto itself changes nothing, but the key must exist (since 3.2).
    if src == dst || (nx && ctx.write(dst)?.is_some()) {
        if nx {
            out.int(0)
        } else {
            out.ok()
        }
        return Ok(());
    }
    let Some(k) = ctx.write(src)? else { return Err(CommandError::NoSuchKey) };
    let moved = rekey(k.delete(), dst);
    ctx.events.key_touched(ctx.db, src);
    let db = ctx.db;
    ctx.put_entry(db, moved)?;
    ctx.events.notify('g', "rename_from", src, db);
    ctx.events.notify('g', "rename_to", dst, db);
    if nx {
        out.int(1)
    } else {
        out.ok()
    }
    Ok(())
}

/// The same value, TTL and access clock under another key name. An object moves without
/// copying its contents.
pub(super) fn rekey(mut old: Entry, key: &[u8]) -> Entry {
    let (expire, lru, hash) = (old.expire(), old.lru(), key_hash(key));
    if let Some(obj) = old.object_mut() {
        let obj = std::mem::replace(obj, Object::Str(Vec::new()));
        return Entry::new(key, hash, NewValue::Object(obj), expire, lru);
    }
    match old.value() {
        ValueRef::Str(b) => Entry::new(key, hash, NewValue::Bytes(b), expire, lru),
        ValueRef::Obj(o) => Entry::new(key, hash, NewValue::Object(o.clone()), expire, lru),
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::EvictionPolicy;
    use crate::testkit::TestKit;

    #[test]
    fn del_and_unlink() {
        let mut t = TestKit::default();
        t.run(&["MSET", "a", "1", "b", "2", "c", "3"]);
        t.events.take();
        assert_eq!(t.run(&["DEL", "a", "b", "nope", "a"]), ":2\r\n");
        assert_eq!(t.events.take(), ["g:del:a@0", "g:del:b@0"]);
        assert_eq!(t.run(&["UNLINK", "c", "c"]), ":1\r\n");
        assert_eq!(t.run(&["DEL"]), "-ERR wrong number of arguments for 'del' command\r\n");
        assert_eq!(t.ks.db(0).len(), 0);
    }

    #[test]
    fn del_of_expired_key_counts_nothing() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v", "PX", "10"]);
        t.now_ms += 11;
        t.events.take();
        assert_eq!(t.run(&["DEL", "k"]), ":0\r\n");
        assert_eq!(t.events.take(), ["x:expired:k@0"]);
    }

    #[test]
    fn exists_counts_duplicates_without_touching() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["EXISTS", "k", "k", "nope"]), ":2\r\n");
        assert_eq!(t.run(&["EXISTS", "nope"]), ":0\r\n");
        assert_eq!((t.stats.hits, t.stats.misses), (2, 2));
        t.now_ms += 10_000;
        t.run(&["EXISTS", "k"]);
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "k"]), ":10\r\n", "EXISTS is not an access");
        t.run(&["SET", "v", "x", "PX", "5"]);
        t.now_ms += 6;
        assert_eq!(t.run(&["EXISTS", "v"]), ":0\r\n");
    }

    #[test]
    fn type_reports_string_or_none() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        t.run(&["APPEND", "o", "grown"]);
        t.run(&["APPEND", "o", "more"]);
        assert_eq!(t.run(&["TYPE", "k"]), "+string\r\n");
        assert_eq!(t.run(&["TYPE", "o"]), "+string\r\n");
        assert_eq!(t.run(&["TYPE", "nope"]), "+none\r\n");
    }

    #[test]
    fn touch_updates_access_time_even_with_no_touch() {
        let mut t = TestKit::default();
        t.run(&["SET", "a", "1"]);
        t.run(&["SET", "b", "2"]);
        t.now_ms += 5_000;
        t.no_touch = true;
        t.run(&["GET", "a"]);
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "a"]), ":5\r\n", "NO-TOUCH client");
        assert_eq!(t.run(&["TOUCH", "a", "nope", "b", "a"]), ":3\r\n");
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "a"]), ":0\r\n");
        assert!(t.no_touch);
        t.cfg.policy = EvictionPolicy::AllKeysLfu;
        assert_eq!(t.run(&["TOUCH", "a"]), ":1\r\n");
    }

    #[test]
    fn rename_moves_value_and_ttl() {
        let mut t = TestKit::default();
        t.run(&["SET", "a", "v", "EX", "100"]);
        t.events.take();
        assert_eq!(t.run(&["RENAME", "a", "b"]), "+OK\r\n");
        assert_eq!(t.events.take(), ["n:new:b@0", "g:rename_from:a@0", "g:rename_to:b@0"]);
        assert_eq!(t.run(&["GET", "a"]), "$-1\r\n");
        assert_eq!(t.run(&["GET", "b"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["TTL", "b"]), ":100\r\n");
        // Overwrites the destination, dropping its TTL for the source's (none here).
        t.run(&["SET", "c", "old", "EX", "50"]);
        t.run(&["SET", "d", "new"]);
        assert_eq!(t.run(&["RENAME", "d", "c"]), "+OK\r\n");
        assert_eq!(t.run(&["GET", "c"]), "$3\r\nnew\r\n");
        assert_eq!(t.run(&["TTL", "c"]), ":-1\r\n");
        assert_eq!(t.ks.db(0).len(), 2);
    }

    #[test]
    fn rename_objects_and_edge_cases() {
        let mut t = TestKit::default();
        t.run(&["APPEND", "a", "hello"]);
        t.run(&["APPEND", "a", " world"]);
        assert_eq!(t.run(&["RENAME", "a", "{x}b"]), "+OK\r\n");
        assert_eq!(t.run(&["GET", "{x}b"]), "$11\r\nhello world\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "{x}b"]), "$3\r\nraw\r\n");
        assert_eq!(t.run(&["RENAME", "nope", "x"]), "-ERR no such key\r\n");
        assert_eq!(t.run(&["RENAME", "nope", "nope"]), "-ERR no such key\r\n");
        assert_eq!(t.run(&["RENAME", "{x}b", "{x}b"]), "+OK\r\n");
        assert_eq!(t.run(&["GET", "{x}b"]), "$11\r\nhello world\r\n");
        t.run(&["SET", "e", "v", "PX", "5"]);
        t.now_ms += 6;
        assert_eq!(t.run(&["RENAME", "e", "f"]), "-ERR no such key\r\n", "expired source");
    }

    #[test]
    fn renamenx() {
        let mut t = TestKit::default();
        t.run(&["SET", "a", "1"]);
        t.run(&["SET", "b", "2"]);
        assert_eq!(t.run(&["RENAMENX", "a", "b"]), ":0\r\n");
        assert_eq!(t.run(&["RENAMENX", "a", "a"]), ":0\r\n");
        assert_eq!(t.run(&["RENAMENX", "a", "c"]), ":1\r\n");
        assert_eq!(t.run(&["MGET", "a", "b", "c"]), "*3\r\n$-1\r\n$1\r\n2\r\n$1\r\n1\r\n");
        assert_eq!(t.run(&["RENAMENX", "nope", "d"]), "-ERR no such key\r\n");
        t.run(&["SET", "e", "v", "PX", "5"]);
        t.now_ms += 6;
        assert_eq!(t.run(&["RENAMENX", "c", "e"]), ":1\r\n", "an expired destination is free");
    }
}
