//! Set commands on one key: SADD, SREM, SISMEMBER, SMISMEMBER, SCARD, SMEMBERS, SPOP,
//! SRANDMEMBER, SSCAN. Commands combining several sets are in `set_ops`.
//!
//! Replies, errors, encodings and keyspace events follow Valkey's `t_set.c`; a set that
//! loses its last member is deleted.

use hotkv_protocol::{Args, ReplyBuf};

use super::scan::{ElemKind, ElemScanArgs, drive_scan, parse_cursor, scan_reply};
use super::{EngineCmd, LockPlan, MAX_REPEATED_PICKS, Spec, int_arg, push_bulk, random_count, too_many_picks};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, EngineConfig, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::types::lpentry::Elem;
use crate::types::sample;
use crate::types::set::{Set, SetLimits};

/// Single-key set command rows.
pub static COMMANDS: &[Spec] = &[
    row(
        "sadd",
        -3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "1.0.0",
        "Adds one or more members to a set. Creates the key if it doesn't exist.",
        "O(1) for each element added, so O(N) to add N elements when the command is called with multiple \
         arguments.",
        sadd,
    ),
    row(
        "srem",
        -3,
        flags::WRITE | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "1.0.0",
        "Removes one or more members from a set. Deletes the set if the last member was removed.",
        "O(N) where N is the number of members to be removed.",
        srem,
    ),
    row(
        "sismember",
        3,
        flags::READONLY | flags::FAST,
        RO,
        "1.0.0",
        "Determines whether a member belongs to a set.",
        "O(1)",
        sismember,
    ),
    row(
        "smismember",
        -3,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        "6.2.0",
        "Determines whether multiple members belong to a set.",
        "O(N) where N is the number of elements being checked for membership",
        smismember,
    ),
    row(
        "scard",
        2,
        flags::READONLY | flags::FAST,
        RO,
        "1.0.0",
        "Returns the number of members in a set.",
        "O(1)",
        scard,
    ),
    row(
        "smembers",
        2,
        flags::READONLY,
        RO_ACCESS,
        "1.0.0",
        "Returns all members of a set.",
        "O(N) where N is the set cardinality.",
        smembers,
    )
    .with_tips(&["nondeterministic_output_order"]),
    row(
        "spop",
        -2,
        flags::WRITE | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE)],
        "1.0.0",
        "Returns one or more random members from a set after removing them. Deletes the set if the last member was \
         popped.",
        "Without the count argument O(1), otherwise O(N) where N is the value of the passed count.",
        spop,
    )
    .with_tips(&["nondeterministic_output"]),
    row(
        "srandmember",
        -2,
        flags::READONLY,
        RO_ACCESS,
        "1.0.0",
        "Get one or multiple random members from a set",
        "Without the count argument O(1), otherwise O(N) where N is the absolute value of the passed count.",
        srandmember,
    )
    .with_tips(&["nondeterministic_output"]),
    row(
        "sscan",
        -3,
        flags::READONLY,
        RO_ACCESS,
        "2.8.0",
        "Iterates over members of a set.",
        "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to \
         return back to 0. N is the number of elements inside the collection.",
        sscan,
    )
    .with_tips(&["nondeterministic_output"]),
];

/// A row of a set command: SET ACL category, `set` group.
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
        acl::SET,
        keys,
        "set",
        since,
        summary,
        complexity,
        EngineCmd { run, plan: LockPlan::Keys },
    )
}

const RO: &[KeySpec] = &[KeySpec::single(1, kf::RO)];
const RO_ACCESS: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];

impl From<&EngineConfig> for SetLimits {
    fn from(cfg: &EngineConfig) -> SetLimits {
        SetLimits {
            intset_entries: cfg.set_max_intset_entries,
            listpack_entries: cfg.set_max_listpack_entries,
            listpack_value: cfg.set_max_listpack_value,
        }
    }
}

/// Stores `set` at `key` as a new value (replacing whatever was there, TTL included).
pub(super) fn store(ctx: &mut Ctx<'_>, key: &[u8], set: Set) -> CmdResult {
    ctx.set(key, NewValue::Object(Object::Set(set)), Ttl::Clear)
}

fn sadd(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let limits = SetLimits::from(ctx.cfg);
    let members = args.iter().skip(2);
    // Valkey sizes the set for every argument, repeats included.
    let hint = members.len();
    let added = match ctx.write(key)? {
        Some(mut k) => {
            let s = k.set_mut()?;
            s.reserve(hint, limits);
            let added = members.filter(|m| s.add(m, limits)).count();
            if added > 0 {
                ctx.modified(key);
            }
            added
        }
        None => {
            let mut s = Set::for_first(args.get(2), hint, limits);
            let added = members.filter(|m| s.add(m, limits)).count();
            store(ctx, key, s)?;
            added
        }
    };
    if added > 0 {
        ctx.stats.dirty += added as u64 - 1;
        ctx.events.notify('s', "sadd", key, ctx.db);
    }
    out.int(added as i64);
    Ok(())
}

fn srem(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let s = k.set_mut()?;
    let mut removed = 0;
    for m in args.iter().skip(2) {
        if s.remove(m) {
            removed += 1;
            if s.is_empty() {
                break;
            }
        }
    }
    let emptied = s.is_empty();
    if emptied {
        drop(k.delete());
    }
    if removed > 0 {
        ctx.changed(key, 's', "srem", emptied);
        ctx.stats.dirty += removed - 1;
    }
    out.int(removed as i64);
    Ok(())
}

fn sismember(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let found = match ctx.read(args.get(1))? {
        Some(k) => k.set()?.contains(args.get(2)),
        None => false,
    };
    out.int(i64::from(found));
    Ok(())
}

fn smismember(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let k = ctx.read(args.get(1))?;
    // A missing key is an empty set: all zeros.
    let s = match &k {
        Some(k) => Some(k.set()?),
        None => None,
    };
    out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        out.int(i64::from(s.is_some_and(|s| s.contains(m))));
    }
    Ok(())
}

fn scard(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let n = match ctx.read(args.get(1))? {
        Some(k) => k.set()?.len(),
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn smembers(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(k) = ctx.read(args.get(1))? else {
        out.set(0);
        return Ok(());
    };
    reply_members(k.set()?, out);
    Ok(())
}

/// Every member, as a set reply (an array in RESP2).
pub(super) fn reply_members(s: &Set, out: &mut ReplyBuf) {
    out.set(s.len());
    s.iter().for_each(|m| m.reply(out));
}

fn spop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let count = match args.opt(2) {
        Some(arg) => {
            let n = int_arg(arg)?;
            Some(u64::try_from(n).map_err(|_| CommandError::err("value is out of range, must be positive"))?)
        }
        None => None,
    };
    let limits = SetLimits::from(ctx.cfg);
    let Some(mut k) = ctx.write(key)? else {
        if count.is_some() {
            out.set(0)
        } else {
            out.null()
        }
        return Ok(());
    };
    let s = k.set_mut()?;
    let mut removed = Vec::new();
    let take_all = count.is_some_and(|n| n >= s.len() as u64);
    // Valkey counts every popped member as a change.
    let changes = count.map_or(1, |n| n.min(s.len() as u64));
    match count {
        Some(0) => {
            out.set(0);
            return Ok(());
        }
        Some(_) if take_all => {
            // Everything goes: reply with the set as it is and delete the key.
            reply_members(s, out);
        }
        Some(n) => {
            let popped = s.pop_many(n as usize, limits);
            out.set(popped.len());
            popped.iter().for_each(|m| out.bulk(m));
            removed = popped;
        }
        None => {
            // Invariant: sets in the keyspace are never empty.
            let m = s.pop_random().expect("non-empty set");
            out.bulk(&m);
            removed.push(m);
        }
    }
    let emptied = take_all || s.is_empty();
    if emptied {
        drop(k.delete());
    }
    // The pick is random: the stream names the members that went (Valkey: SREM, or DEL of a
    // set popped whole).
    if take_all {
        ctx.propagate_as(&[crate::propagate::del_verb(ctx.cfg.lazy_server_del), key]);
    } else if ctx.propagating() {
        // In SREMs of 1024 members at most, as Valkey's spopWithCountCommand batches them,
        // so no single replicated command grows with the count.
        for batch in removed.chunks(SPOP_BATCH) {
            let argv: Vec<&[u8]> = [b"SREM".as_slice(), key].into_iter().chain(batch.iter().map(|m| &m[..])).collect();
            ctx.propagate_as(&argv);
        }
    }
    ctx.changed(key, 's', "spop", emptied);
    ctx.stats.dirty += changes - 1;
    Ok(())
}

/// Members per SREM that SPOP with a count replicates (Valkey's batch size).
const SPOP_BATCH: usize = 1024;

fn srandmember(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let Some(arg) = args.opt(2) else {
        match ctx.read(args.get(1))? {
            Some(k) => match k.set()?.random() {
                Some(m) => m.reply(out),
                None => out.null(),
            },
            None => out.null(),
        }
        return Ok(());
    };
    let count = random_count(arg)?;
    let Some(k) = ctx.read(args.get(1))? else {
        out.array(0);
        return Ok(());
    };
    let s = k.set()?;
    if count == 0 {
        out.array(0);
        return Ok(());
    }
    // A negative count repeats picks; 1 needs no uniqueness either.
    if count < 0 || count == 1 {
        let n = count.unsigned_abs();
        if n > MAX_REPEATED_PICKS && !out.is_limited() {
            return Err(too_many_picks());
        }
        let ix = s.indexed();
        out.array(n as usize);
        for _ in 0..n {
            // The client is being closed for its output limit: the rest would be dropped.
            if out.limit_passed() {
                break;
            }
            ix.get(sample::below(ix.len())).reply(out);
        }
        return Ok(());
    }
    if count as u64 >= s.len() as u64 {
        out.array(s.len());
        s.iter().for_each(|m| m.reply(out));
        return Ok(());
    }
    let ix = s.indexed();
    out.array(count as usize);
    for i in sample::distinct(ix.len(), count as usize) {
        ix.get(i).reply(out);
    }
    Ok(())
}

fn sscan(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let cursor = parse_cursor(args.get(2)).ok_or_else(|| CommandError::err("invalid cursor"))?;
    let Some(k) = ctx.read(args.get(1))? else {
        scan_reply(out, 0, 0, &[]);
        return Ok(());
    };
    let s = k.set()?;
    let opts = ElemScanArgs::parse(&args, ElemKind::Set)?;
    let (mut buf, mut n) = (Vec::new(), 0);
    let next = drive_scan(cursor, opts.count, |c, sampled| {
        s.scan(c, |m: Elem<'_>| {
            *sampled += 1;
            m.with_bytes(|m| {
                if opts.matches(m) {
                    push_bulk(&mut buf, m);
                    n += 1;
                }
            });
        })
    });
    scan_reply(out, next, n, &buf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeSet, HashMap};

    use hotkv_protocol::Protocol;
    use proptest::prelude::*;

    use crate::testkit::{Resp, TestKit};

    const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

    fn members(t: &mut TestKit, argv: &[&str]) -> BTreeSet<String> {
        Resp::parse(&t.run(argv)).items().iter().map(|x| x.text().to_string()).collect()
    }

    fn encoding(t: &mut TestKit, key: &str) -> String {
        Resp::parse(&t.run(&["OBJECT", "ENCODING", key])).text().to_string()
    }

    fn sadd_range(t: &mut TestKit, key: &str, items: impl Iterator<Item = String>) {
        let items: Vec<String> = items.collect();
        let mut argv = vec!["SADD", key];
        argv.extend(items.iter().map(String::as_str));
        t.run(&argv);
    }

    #[test]
    fn sadd_srem_and_membership() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SADD", "s", "a", "b", "a"]), ":2\r\n");
        assert_eq!(t.run(&["SADD", "s", "b", "c"]), ":1\r\n");
        assert_eq!(t.run(&["SADD", "s", "c"]), ":0\r\n");
        assert_eq!(t.run(&["SCARD", "s"]), ":3\r\n");
        assert_eq!(t.run(&["SCARD", "nokey"]), ":0\r\n");
        assert_eq!(t.run(&["SISMEMBER", "s", "a"]), ":1\r\n");
        assert_eq!(t.run(&["SISMEMBER", "s", "z"]), ":0\r\n");
        assert_eq!(t.run(&["SISMEMBER", "nokey", "z"]), ":0\r\n");
        assert_eq!(t.run(&["SMISMEMBER", "s", "a", "z", "c"]), "*3\r\n:1\r\n:0\r\n:1\r\n");
        assert_eq!(t.run(&["SMISMEMBER", "nokey", "a", "b"]), "*2\r\n:0\r\n:0\r\n");
        assert_eq!(t.run(&["TYPE", "s"]), "+set\r\n");
        t.events.take();
        assert_eq!(t.run(&["SREM", "s", "a", "zz"]), ":1\r\n");
        assert_eq!(t.events.take(), ["s:srem:s@0"]);
        assert_eq!(t.run(&["SREM", "s", "zz"]), ":0\r\n");
        assert!(t.events.take().is_empty());
        assert_eq!(t.run(&["SREM", "s", "b", "c", "d"]), ":2\r\n");
        assert_eq!(t.events.take(), ["s:srem:s@0", "g:del:s@0"]);
        assert_eq!(t.run(&["EXISTS", "s"]), ":0\r\n");
        assert_eq!(t.run(&["SREM", "s", "a"]), ":0\r\n");
        t.events.take();
        assert_eq!(t.run(&["SADD", "n", "1"]), ":1\r\n");
        assert_eq!(t.events.take(), ["n:new:n@0", "s:sadd:n@0"]);
        assert_eq!(t.run(&["SADD", "n", "1"]), ":0\r\n");
        assert!(t.events.take().is_empty(), "nothing added, nothing notified");
    }

    #[test]
    fn smembers_in_both_protocols() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SMEMBERS", "nokey"]), "*0\r\n");
        t.run(&["SADD", "s", "3", "1", "2"]);
        assert_eq!(t.run(&["SMEMBERS", "s"]), "*3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n", "an intset is sorted");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["SMEMBERS", "s"]), "~3\r\n$1\r\n1\r\n$1\r\n2\r\n$1\r\n3\r\n");
        assert_eq!(t.run(&["SMEMBERS", "nokey"]), "~0\r\n");
    }

    #[test]
    fn encodings_convert_at_valkeys_thresholds() {
        let mut t = TestKit::default();
        sadd_range(&mut t, "i", (0..512).map(|i| i.to_string()));
        assert_eq!(encoding(&mut t, "i"), "intset");
        t.run(&["SADD", "i", "512"]);
        assert_eq!(encoding(&mut t, "i"), "hashtable");
        sadd_range(&mut t, "j", (0..10).map(|i| (i * 1_000_000_000_000i64).to_string()));
        assert_eq!(encoding(&mut t, "j"), "intset", "64-bit integers too");
        t.run(&["SADD", "j", "abc"]);
        assert_eq!(encoding(&mut t, "j"), "listpack");
        sadd_range(&mut t, "k", (0..128).map(|i| i.to_string()));
        t.run(&["SADD", "k", "abc"]);
        assert_eq!(encoding(&mut t, "k"), "hashtable", "an intset of 128 has no room left as a listpack");
        sadd_range(&mut t, "l", (0..128).map(|i| format!("m{i}")));
        assert_eq!(encoding(&mut t, "l"), "listpack");
        t.run(&["SADD", "l", "m128"]);
        assert_eq!(encoding(&mut t, "l"), "hashtable");
        t.run(&["SADD", "v", &"x".repeat(64)]);
        assert_eq!(encoding(&mut t, "v"), "listpack");
        t.run(&["SADD", "v", &"x".repeat(65)]);
        assert_eq!(encoding(&mut t, "v"), "hashtable");
        // One SADD with more arguments than a listpack holds: a table at once, duplicates
        // and all, as Valkey sizes by argument count.
        sadd_range(&mut t, "d", (0..129).map(|_| "same".to_string()));
        assert_eq!((encoding(&mut t, "d"), t.run(&["SCARD", "d"])), ("hashtable".into(), ":1\r\n".into()));
        sadd_range(&mut t, "e", (0..513).map(|i| i.to_string()));
        assert_eq!(encoding(&mut t, "e"), "hashtable");
        t.run(&["SADD", "f", "1"]);
        sadd_range(&mut t, "f", (0..129).map(|i| i.to_string()));
        assert_eq!(encoding(&mut t, "f"), "intset", "an intset takes 129 integers in one call");
        // Never back.
        for i in 1..513 {
            t.run(&["SREM", "i", &i.to_string()]);
        }
        assert_eq!((encoding(&mut t, "i"), t.run(&["SCARD", "i"])), ("hashtable".into(), ":1\r\n".into()));
    }

    #[test]
    fn spop_single_and_counted() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SPOP", "nokey"]), "$-1\r\n");
        assert_eq!(t.run(&["SPOP", "nokey", "3"]), "*0\r\n");
        t.run(&["SADD", "s", "a"]);
        t.events.take();
        assert_eq!(t.run(&["SPOP", "s"]), "$1\r\na\r\n");
        assert_eq!(t.events.take(), ["s:spop:s@0", "g:del:s@0"]);
        assert_eq!(t.run(&["EXISTS", "s"]), ":0\r\n");
        t.run(&["SADD", "s", "a", "b"]);
        assert_eq!(t.run(&["SPOP", "s", "0"]), "*0\r\n");
        assert_eq!(t.run(&["SPOP", "s", "-1"]), "-ERR value is out of range, must be positive\r\n");
        assert_eq!(t.run(&["SPOP", "s", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SPOP", "s", "1", "2"]), "-ERR syntax error\r\n");
        t.events.take();
        assert_eq!(members(&mut t, &["SPOP", "s", "9223372036854775807"]), ["a".to_string(), "b".into()].into());
        assert_eq!(t.events.take(), ["s:spop:s@0", "g:del:s@0"]);
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["SPOP", "nokey", "1"]), "~0\r\n");
        t.run(&["SADD", "s", "a"]);
        assert_eq!(t.run(&["SPOP", "s", "0"]), "~0\r\n");
        assert_eq!(t.run(&["SPOP", "s", "5"]), "~1\r\n$1\r\na\r\n");
    }

    #[test]
    fn spop_count_removes_what_it_returns_in_every_encoding() {
        for (items, enc) in [
            (0..20).map(|i| i.to_string()).collect::<Vec<_>>(),
            (0..20).map(|i| format!("m{i}")).collect(),
            (0..200).map(|i| format!("m{i}")).collect(),
        ]
        .into_iter()
        .zip(["intset", "listpack", "hashtable"])
        {
            for count in [1, 3, 10, items.len() - 1] {
                let mut t = TestKit::default();
                sadd_range(&mut t, "s", items.iter().cloned());
                assert_eq!(encoding(&mut t, "s"), enc);
                let popped: Vec<String> = Resp::parse(&t.run(&["SPOP", "s", &count.to_string()]))
                    .items()
                    .iter()
                    .map(|x| x.text().into())
                    .collect();
                let rest = members(&mut t, &["SMEMBERS", "s"]);
                let unique: BTreeSet<String> = popped.iter().cloned().collect();
                assert_eq!((popped.len(), unique.len(), rest.len()), (count, count, items.len() - count));
                assert!(unique.is_disjoint(&rest));
                assert_eq!(unique.union(&rest).count(), items.len());
                // Like Valkey, a table whose few survivors are rebuilt comes back packed.
                let rebuilt = enc == "hashtable" && (items.len() - count) * 5 <= count;
                assert_eq!(encoding(&mut t, "s"), if rebuilt { "listpack" } else { enc }, "{count}");
            }
        }
    }

    #[test]
    fn srandmember_edge_cases() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SRANDMEMBER", "nokey"]), "$-1\r\n");
        assert_eq!(t.run(&["SRANDMEMBER", "nokey", "5"]), "*0\r\n");
        t.run(&["SADD", "s", "a"]);
        assert_eq!(t.run(&["SRANDMEMBER", "s"]), "$1\r\na\r\n");
        assert_eq!(t.run(&["SRANDMEMBER", "s", "0"]), "*0\r\n");
        assert_eq!(t.run(&["SRANDMEMBER", "s", "-2"]), "*2\r\n$1\r\na\r\n$1\r\na\r\n");
        assert_eq!(t.run(&["SRANDMEMBER", "s", "9223372036854775807"]), "*1\r\n$1\r\na\r\n");
        assert!(t.run(&["SRANDMEMBER", "s", "-9223372036854775808"]).starts_with("-ERR value is out of range"));
        assert!(t.run(&["SRANDMEMBER", "s", "-9223372036854775807"]).starts_with("-ERR value is out of range"));
        assert_eq!(t.run(&["SRANDMEMBER", "s", "1", "2"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SRANDMEMBER", "s", "x"]), "-ERR value is not an integer or out of range\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["SRANDMEMBER", "nokey", "5"]), "*0\r\n", "an array, not a set, in RESP3 too");
        assert_eq!(t.run(&["SRANDMEMBER", "nokey"]), "_\r\n");
    }

    #[test]
    fn srandmember_samples_fairly_in_every_encoding() {
        for items in [(0..10).map(|i| i.to_string()).collect::<Vec<_>>(), (0..10).map(|i| format!("m{i}")).collect()] {
            for table in [false, true] {
                let mut t = TestKit::default();
                if table {
                    t.cfg.set_max_intset_entries = 0;
                    t.cfg.set_max_listpack_entries = 0;
                }
                sadd_range(&mut t, "s", items.iter().cloned());
                let mut hits: HashMap<String, u32> = HashMap::new();
                for m in Resp::parse(&t.run(&["SRANDMEMBER", "s", "-10000"])).items() {
                    *hits.entry(m.text().into()).or_default() += 1;
                }
                assert_eq!(hits.len(), 10);
                assert!(hits.values().all(|&n| (700..1300).contains(&n)), "{} {hits:?}", encoding(&mut t, "s"));
                for count in [2, 5, 9, 10, 11] {
                    let got = members(&mut t, &["SRANDMEMBER", "s", &count.to_string()]);
                    assert_eq!(got.len(), count.min(10), "distinct picks");
                }
            }
        }
    }

    #[test]
    fn sscan_compact_and_table() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SSCAN", "nokey", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
        t.run(&["SADD", "s", "1", "2", "10"]);
        assert_eq!(t.run(&["SSCAN", "s", "0", "MATCH", "1*"]), "*2\r\n$1\r\n0\r\n*2\r\n$1\r\n1\r\n$2\r\n10\r\n");
        assert_eq!(t.run(&["SSCAN", "s", "0", "NOVALUES"]), "-ERR NOVALUES option can only be used in HSCAN\r\n");
        assert_eq!(t.run(&["SSCAN", "s", "-x"]), "-ERR invalid cursor\r\n");
        assert_eq!(t.run(&["SSCAN", "s", "0", "COUNT", "0"]), "-ERR syntax error\r\n");
        sadd_range(&mut t, "big", (0..1000).map(|i| format!("m{i}")));
        let mut cursor = "0".to_string();
        let mut seen = BTreeSet::new();
        let mut calls = 0;
        loop {
            let r = Resp::parse(&t.run(&["SSCAN", "big", &cursor, "COUNT", "20"]));
            seen.extend(r.items()[1].items().iter().map(|x| x.text().to_string()));
            cursor = r.items()[0].text().to_string();
            calls += 1;
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.len(), 1000);
        assert!(calls > 10, "a table is walked in steps ({calls} calls)");
    }

    #[test]
    fn wrong_type_everywhere() {
        let mut t = TestKit::default();
        t.run(&["SET", "str", "v"]);
        for argv in [
            &["SADD", "str", "a"][..],
            &["SREM", "str", "a"],
            &["SISMEMBER", "str", "a"],
            &["SMISMEMBER", "str", "a"],
            &["SCARD", "str"],
            &["SMEMBERS", "str"],
            &["SPOP", "str"],
            &["SPOP", "str", "2"],
            &["SRANDMEMBER", "str"],
            &["SRANDMEMBER", "str", "-2"],
            &["SSCAN", "str", "0"],
        ] {
            assert_eq!(t.run(argv), WRONGTYPE, "{argv:?}");
        }
        t.run(&["SADD", "s", "a"]);
        for argv in [
            &["GET", "s"][..],
            &["INCR", "s"],
            &["HGET", "s", "a"],
            &["HSET", "s", "a", "b"],
            &["SETRANGE", "s", "0", "x"],
        ] {
            assert_eq!(t.run(argv), WRONGTYPE, "{argv:?}");
        }
        t.run(&["HSET", "h", "a", "1"]);
        assert_eq!(t.run(&["SADD", "h", "a"]), WRONGTYPE);
        assert_eq!(t.run(&["SMEMBERS", "s"]), "*1\r\n$1\r\na\r\n");
    }

    #[test]
    fn generic_commands_handle_sets_and_hashes() {
        let mut t = TestKit::default();
        t.run(&["SADD", "s", "a", "b"]);
        t.run(&["HSET", "h", "f", "v"]);
        t.run(&["SET", "str", "v"]);
        assert_eq!(t.run(&["SCAN", "0", "TYPE", "set"]), "*2\r\n$1\r\n0\r\n*1\r\n$1\r\ns\r\n");
        assert_eq!(t.run(&["SCAN", "0", "TYPE", "hash"]), "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nh\r\n");
        assert_eq!(t.run(&["COPY", "s", "c"]), ":1\r\n");
        t.run(&["SADD", "c", "z"]);
        assert_eq!((t.run(&["SCARD", "s"]), t.run(&["SCARD", "c"])), (":2\r\n".into(), ":3\r\n".into()), "a deep copy");
        assert_eq!(t.run(&["RENAME", "c", "r"]), "+OK\r\n");
        assert_eq!(members(&mut t, &["SMEMBERS", "r"]), ["a", "b", "z"].iter().map(|s| s.to_string()).collect());
        assert_eq!(t.run(&["RENAME", "s", "str"]), "+OK\r\n", "onto a string");
        assert_eq!(t.run(&["TYPE", "str"]), "+set\r\n");
        let usage = |t: &mut TestKit, k: &str| t.run(&["MEMORY", "USAGE", k])[1..].trim().parse::<i64>().unwrap();
        let small = usage(&mut t, "r");
        sadd_range(&mut t, "big", (0..1000).map(|i| format!("member-{i}")));
        assert!(small > 0 && usage(&mut t, "big") > 1000 * 24, "{small}");
        assert_eq!(t.run(&["DEL", "big", "r", "h"]), ":3\r\n");
        assert_eq!(t.run(&["DBSIZE"]), ":1\r\n");
    }

    /// One set command for the property test.
    #[derive(Debug, Clone)]
    enum Op {
        Add(Vec<u8>),
        Rem(Vec<u8>),
        IsMember(u8),
        Card,
        Members,
        Pop(u8),
    }

    /// Members: small integers, a big one, short strings and one long string.
    fn member(m: u8) -> String {
        match m {
            0..=5 => m.to_string(),
            6 => "-9223372036854775808".into(),
            7..=11 => format!("m{m}"),
            _ => "a-member-longer-than-the-limit".into(),
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            prop::collection::vec(0u8..13, 1..5).prop_map(Op::Add),
            prop::collection::vec(0u8..13, 1..4).prop_map(Op::Rem),
            (0u8..13).prop_map(Op::IsMember),
            Just(Op::Card),
            Just(Op::Members),
            (0u8..4).prop_map(Op::Pop),
        ]
    }

    proptest! {
        #[test]
        fn set_commands_match_a_model(ops in prop::collection::vec(op(), 1..60)) {
            let mut t = TestKit::default();
            t.cfg.set_max_intset_entries = 4;
            t.cfg.set_max_listpack_entries = 6;
            t.cfg.set_max_listpack_value = 20;
            let mut model: BTreeSet<String> = BTreeSet::new();
            for op in ops {
                match op {
                    Op::Add(ms) => {
                        let names: Vec<String> = ms.iter().map(|&m| member(m)).collect();
                        let added = names.iter().filter(|n| model.insert((*n).clone())).count();
                        let mut argv = vec!["SADD", "s"];
                        argv.extend(names.iter().map(String::as_str));
                        prop_assert_eq!(t.run(&argv), format!(":{added}\r\n"));
                    }
                    Op::Rem(ms) => {
                        let names: Vec<String> = ms.iter().map(|&m| member(m)).collect();
                        let removed = names.iter().filter(|n| model.remove(*n)).count();
                        let mut argv = vec!["SREM", "s"];
                        argv.extend(names.iter().map(String::as_str));
                        prop_assert_eq!(t.run(&argv), format!(":{removed}\r\n"));
                    }
                    Op::IsMember(m) => {
                        let want = format!(":{}\r\n", i64::from(model.contains(&member(m))));
                        prop_assert_eq!(t.run(&["SISMEMBER", "s", &member(m)]), want);
                    }
                    Op::Card => prop_assert_eq!(t.run(&["SCARD", "s"]), format!(":{}\r\n", model.len())),
                    Op::Members => prop_assert_eq!(members(&mut t, &["SMEMBERS", "s"]), model.clone()),
                    Op::Pop(n) => {
                        let reply = Resp::parse(&t.run(&["SPOP", "s", &n.to_string()]));
                        let popped: Vec<String> = reply.items().iter().map(|x| x.text().to_string()).collect();
                        prop_assert_eq!(popped.len(), usize::from(n).min(model.len()));
                        for p in &popped {
                            prop_assert!(model.remove(p), "popped {} twice or from nowhere", p);
                        }
                    }
                }
                prop_assert_eq!(t.run(&["EXISTS", "s"]), format!(":{}\r\n", i64::from(!model.is_empty())));
                if !model.is_empty() {
                    let enc = encoding(&mut t, "s");
                    let ints = model.iter().all(|m| m.parse::<i64>().is_ok());
                    if enc == "intset" {
                        prop_assert!(ints && model.len() <= 4);
                    }
                    if enc == "listpack" {
                        prop_assert!(model.len() <= 6 && model.iter().all(|m| m.len() <= 20));
                    }
                }
            }
        }
    }
}
