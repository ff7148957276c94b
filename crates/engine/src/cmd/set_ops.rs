//! Commands over several sets: SMOVE, SINTER, SINTERCARD, SINTERSTORE, SUNION, SUNIONSTORE,
//! SDIFF, SDIFFSTORE.
//!
//! Every key is named by a key spec, so the dispatcher holds all their slots; the sources are
//! then read in place, side by side, without copying them. Results follow Valkey's
//! `sinterGenericCommand` and `sunionDiffGenericCommand`: the smallest set drives an
//! intersection, a difference picks the cheaper of its two algorithms, and a STORE variant
//! overwrites its destination whatever its type, or deletes it when the result is empty.

use hotkv_protocol::{Args, ReplyBuf};

use super::set::{reply_members, row, store};
use super::{Spec, int_arg, push_bulk};
use crate::command::{BeginSearch, FindKeys, KeySpec, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::entry::ValueRef;
use crate::error::{CmdResult, CommandError};
use crate::keyspace::LockId;
use crate::object::Object;
use crate::table::Table;
use crate::types::set::{Set, SetLimits};

/// Multi-set command rows.
pub static COMMANDS: &[Spec] = &[
    row(
        "smove",
        4,
        flags::WRITE | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE), KeySpec::single(2, kf::RW | kf::INSERT)],
        "1.0.0",
        "Moves a member from one set to another.",
        "O(1)",
        smove,
    ),
    row(
        "sinter",
        -2,
        flags::READONLY,
        ALL_RO,
        "1.0.0",
        "Returns the intersect of multiple sets.",
        "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
        sinter,
    )
    .with_tips(&["nondeterministic_output_order"]),
    row(
        "sintercard",
        -3,
        flags::READONLY,
        &[KeySpec {
            flags: kf::RO | kf::ACCESS,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "7.0.0",
        "Returns the number of members of the intersect of multiple sets.",
        "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
        sintercard,
    ),
    row(
        "sinterstore",
        -3,
        flags::WRITE | flags::DENYOOM,
        STORE_KEYS,
        "1.0.0",
        "Stores the intersect of multiple sets in a key.",
        "O(N*M) worst case where N is the cardinality of the smallest set and M is the number of sets.",
        sinterstore,
    ),
    row(
        "sunion",
        -2,
        flags::READONLY,
        ALL_RO,
        "1.0.0",
        "Returns the union of multiple sets.",
        "O(N) where N is the total number of elements in all given sets.",
        sunion,
    )
    .with_tips(&["nondeterministic_output_order"]),
    row(
        "sunionstore",
        -3,
        flags::WRITE | flags::DENYOOM,
        STORE_KEYS,
        "1.0.0",
        "Stores the union of multiple sets in a key.",
        "O(N) where N is the total number of elements in all given sets.",
        sunionstore,
    ),
    row(
        "sdiff",
        -2,
        flags::READONLY,
        ALL_RO,
        "1.0.0",
        "Returns the difference of multiple sets.",
        "O(N) where N is the total number of elements in all given sets.",
        sdiff,
    )
    .with_tips(&["nondeterministic_output_order"]),
    row(
        "sdiffstore",
        -3,
        flags::WRITE | flags::DENYOOM,
        STORE_KEYS,
        "1.0.0",
        "Stores the difference of multiple sets in a key.",
        "O(N) where N is the total number of elements in all given sets.",
        sdiffstore,
    ),
];

const ALL_RO: &[KeySpec] = &[KeySpec::range(1, -1, 1, kf::RO | kf::ACCESS)];
const STORE_KEYS: &[KeySpec] =
    &[KeySpec::single(1, kf::OW | kf::UPDATE), KeySpec::range(2, -1, 1, kf::RO | kf::ACCESS)];

/// Looks `keys` up as sets for reading — each one a counted read with lazy expiry and a type
/// check, in order, like Valkey's `lookupKeyRead` loop — then lends them all to `f` at once
/// (`None` for a missing key), borrowed in place from their locked tables.
fn with_sets<R>(ctx: &mut Ctx<'_>, keys: &[&[u8]], f: impl FnOnce(&[Option<&Set>]) -> R) -> Result<R, CommandError> {
    let db = ctx.db;
    let mut located = Vec::with_capacity(keys.len());
    for key in keys {
        let present = match ctx.read(key)? {
            Some(k) => k.set().map(|_| true)?,
            None => false,
        };
        located.push(present.then(|| ctx.locks.locate(db, key)));
    }
    let tables: Vec<(LockId, &Table)> = ctx.locks.tables_mut().map(|(id, t, _)| (id, &*t)).collect();
    let sets: Vec<Option<&Set>> = keys
        .iter()
        .zip(&located)
        .map(|(key, at)| {
            let (id, hash) = (*at)?;
            let (_, table) = tables.iter().find(|(i, _)| *i == id)?;
            match table.at(table.find(key, hash)?).value() {
                ValueRef::Obj(Object::Set(s)) => Some(s),
                _ => None,
            }
        })
        .collect();
    Ok(f(&sets))
}

/// Replaces `dst` with `result`, or deletes it when the result is empty (Valkey notifies
/// `del` only if a key was there). Replies with the result's size.
fn store_result(ctx: &mut Ctx<'_>, dst: &[u8], result: Set, event: &str, out: &mut ReplyBuf) -> CmdResult {
    let n = result.len();
    if n == 0 {
        if ctx.delete(dst)? {
            ctx.events.notify('g', "del", dst, ctx.db);
        }
    } else {
        store(ctx, dst, result)?;
        ctx.events.notify('s', event, dst, ctx.db);
    }
    out.int(n as i64);
    Ok(())
}

fn smove(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (src, dst, member) = (args.get(1), args.get(2), args.get(3));
    // A missing source answers 0 before any type check, as in Valkey.
    let Some(k) = ctx.write(src)? else {
        out.int(0);
        return Ok(());
    };
    k.set()?;
    if let Some(k) = ctx.write(dst)? {
        k.set()?;
    }
    if src == dst {
        let Some(k) = ctx.write(src)? else { return Err(CommandError::NoSuchKey) };
        out.int(i64::from(k.set()?.contains(member)));
        return Ok(());
    }
    let Some(mut k) = ctx.write(src)? else { return Err(CommandError::NoSuchKey) };
    let s = k.set_mut()?;
    if !s.remove(member) {
        out.int(0);
        return Ok(());
    }
    let emptied = s.is_empty();
    if emptied {
        drop(k.delete());
    }
    ctx.changed(src, 's', "srem", emptied);
    let limits = SetLimits::from(ctx.cfg);
    let added = match ctx.write(dst)? {
        Some(mut k) => {
            let added = k.set_mut()?.add(member, limits);
            if added {
                ctx.modified(dst);
            }
            added
        }
        None => {
            let mut s = Set::for_first(member, 1, limits);
            s.add(member, limits);
            store(ctx, dst, s)?;
            true
        }
    };
    if added {
        ctx.events.notify('s', "sadd", dst, ctx.db);
    }
    out.int(1);
    Ok(())
}

/// What an intersection produces.
enum Inter {
    /// SINTER: the members, encoded as bulk strings, and their number.
    Reply(Vec<u8>, usize),
    /// SINTERCARD: the count.
    Card(u64),
    /// SINTERSTORE: the result set.
    Store(Set),
}

/// What the caller of [`intersect`] wants.
#[derive(Clone, Copy)]
enum InterMode {
    Reply,
    Card { limit: u64 },
    Store,
}

/// Valkey's `sinterGenericCommand`: the members of the smallest set found in all the others.
/// A missing key is an empty set, which empties the result at once.
fn intersect(sets: &[Option<&Set>], mode: InterMode, limits: SetLimits) -> Inter {
    let mut found: Vec<&Set> = sets.iter().flatten().copied().collect();
    let empty = found.len() < sets.len();
    found.sort_by_key(|s| s.len());
    let first = found.first().copied().filter(|_| !empty);
    let others = if found.is_empty() { &[][..] } else { &found[1..] };
    let members = first.into_iter().flat_map(Set::iter).filter(|e| {
        // The same key named twice is one set: skip the lookup.
        others.iter().all(|o| first.is_some_and(|f| std::ptr::eq(*o, f)) || o.contains_elem(*e))
    });
    match mode {
        InterMode::Card { limit } => {
            let cap = if limit == 0 { usize::MAX } else { usize::try_from(limit).unwrap_or(usize::MAX) };
            Inter::Card(members.take(cap).count() as u64)
        }
        InterMode::Reply => {
            let (mut buf, mut n) = (Vec::new(), 0);
            for e in members {
                e.with_bytes(|b| push_bulk(&mut buf, b));
                n += 1;
            }
            Inter::Reply(buf, n)
        }
        InterMode::Store => {
            // Valkey starts from the smallest set's compact encoding and re-packs an
            // all-integer result as an intset.
            let mut result = match first {
                Some(Set::Ints(_)) => Set::ints(),
                _ => Set::packed(),
            };
            let mut only_ints = true;
            for e in members {
                only_ints &= e.as_int().is_some();
                result.add_elem(e, limits);
            }
            if only_ints {
                result.make_intset(limits);
            }
            Inter::Store(result)
        }
    }
}

fn sinter(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let limits = SetLimits::from(ctx.cfg);
    if let Inter::Reply(buf, n) = with_sets(ctx, &keys, |sets| intersect(sets, InterMode::Reply, limits))? {
        out.set(n);
        out.raw(&buf);
    }
    Ok(())
}

fn sintercard(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let numkeys = int_arg(args.get(1))
        .ok()
        .filter(|&n| n >= 1)
        .ok_or_else(|| CommandError::err("numkeys should be greater than 0"))?;
    if numkeys > args.len() as i64 - 2 {
        return Err(CommandError::err("Number of keys can't be greater than number of args"));
    }
    let numkeys = numkeys as usize;
    let mut limit = 0;
    let mut i = 2 + numkeys;
    while i < args.len() {
        if args.get(i).eq_ignore_ascii_case(b"limit") && i + 1 < args.len() {
            let n = int_arg(args.get(i + 1)).ok().filter(|&n| n >= 0);
            limit = n.ok_or_else(|| CommandError::err("LIMIT can't be negative"))? as u64;
            i += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let keys: Vec<&[u8]> = args.iter().skip(2).take(numkeys).collect();
    let limits = SetLimits::from(ctx.cfg);
    if let Inter::Card(n) = with_sets(ctx, &keys, |sets| intersect(sets, InterMode::Card { limit }, limits))? {
        out.int(n as i64);
    }
    Ok(())
}

fn sinterstore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(2).collect();
    let limits = SetLimits::from(ctx.cfg);
    let Inter::Store(result) = with_sets(ctx, &keys, |sets| intersect(sets, InterMode::Store, limits))? else {
        unreachable!("store mode stores")
    };
    store_result(ctx, args.get(1), result, "sinterstore", out)
}

/// Union or difference.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Diff,
}

/// Valkey's `sunionDiffGenericCommand`. Without a destination the result is a scratch set,
/// a table unless every input is an intset; with one it starts as an intset and converts
/// as members are added, exactly as SADD would.
fn union_diff(sets: &[Option<&Set>], op: Op, store: bool, limits: SetLimits) -> Set {
    let all_ints = sets.iter().flatten().all(|s| matches!(s, Set::Ints(_)));
    let mut result = if store || all_ints { Set::ints() } else { Set::table(0) };
    match op {
        Op::Union => {
            for s in sets.iter().flatten() {
                s.iter().for_each(|e| {
                    result.add_elem(e, limits);
                });
            }
        }
        Op::Diff => {
            let Some(Some(first)) = sets.first() else { return result };
            let others: Vec<&Set> = sets[1..].iter().flatten().copied().collect();
            // The first set named again subtracts everything.
            if others.iter().any(|o| std::ptr::eq(*o, *first)) {
                return result;
            }
            // Algorithm 1 probes each member of the first set in the others (N*M, cheap per
            // step and early-exiting); algorithm 2 adds the first set and removes all the
            // others (total size). Valkey halves the first estimate to favour algorithm 1.
            let probe_cost = first.len() * (others.len() + 1) / 2;
            let total_cost = first.len() + others.iter().map(|s| s.len()).sum::<usize>();
            if probe_cost <= total_cost {
                let mut others = others;
                // Bigger sets first: a member is likelier to be found early.
                others.sort_by_key(|s| std::cmp::Reverse(s.len()));
                for e in first.iter().filter(|e| !others.iter().any(|o| o.contains_elem(*e))) {
                    result.add_elem(e, limits);
                }
            } else {
                first.iter().for_each(|e| {
                    result.add_elem(e, limits);
                });
                for o in others {
                    if result.is_empty() {
                        break;
                    }
                    o.iter().for_each(|e| {
                        result.remove_elem(e);
                    });
                }
            }
        }
    }
    result
}

fn sunion(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    union_diff_reply(ctx, args, Op::Union, out)
}

fn sdiff(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    union_diff_reply(ctx, args, Op::Diff, out)
}

fn union_diff_reply(ctx: &mut Ctx<'_>, args: Args<'_>, op: Op, out: &mut ReplyBuf) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(1).collect();
    let limits = SetLimits::from(ctx.cfg);
    let result = with_sets(ctx, &keys, |sets| union_diff(sets, op, false, limits))?;
    reply_members(&result, out);
    Ok(())
}

fn sunionstore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    union_diff_store(ctx, args, Op::Union, out)
}

fn sdiffstore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    union_diff_store(ctx, args, Op::Diff, out)
}

fn union_diff_store(ctx: &mut Ctx<'_>, args: Args<'_>, op: Op, out: &mut ReplyBuf) -> CmdResult {
    let keys: Vec<&[u8]> = args.iter().skip(2).collect();
    let limits = SetLimits::from(ctx.cfg);
    let result = with_sets(ctx, &keys, |sets| union_diff(sets, op, true, limits))?;
    let event = if op == Op::Union { "sunionstore" } else { "sdiffstore" };
    store_result(ctx, args.get(1), result, event, out)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use hotkv_protocol::Protocol;

    use crate::testkit::{Resp, TestKit};

    const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

    fn members(t: &mut TestKit, argv: &[&str]) -> BTreeSet<String> {
        Resp::parse(&t.run(argv)).items().iter().map(|x| x.text().to_string()).collect()
    }

    fn set(items: &[&str]) -> BTreeSet<String> {
        items.iter().map(|s| s.to_string()).collect()
    }

    fn encoding(t: &mut TestKit, key: &str) -> String {
        Resp::parse(&t.run(&["OBJECT", "ENCODING", key])).text().to_string()
    }

    /// Three sets in one hash slot, in the encoding `kind` asks for.
    fn fixture(t: &mut TestKit, kind: &str) {
        let (a, b, c): (Vec<String>, Vec<String>, Vec<String>) = match kind {
            "intset" => (
                (0..10).map(|i| i.to_string()).collect(),
                (5..15).map(|i| i.to_string()).collect(),
                vec!["7".into(), "8".into(), "100".into()],
            ),
            "listpack" => (
                (0..10).map(|i| format!("m{i}")).collect(),
                (5..15).map(|i| format!("m{i}")).collect(),
                vec!["m7".into(), "m8".into(), "x".into()],
            ),
            _ => (
                (0..200).map(|i| format!("m{i}")).collect(),
                (5..215).map(|i| format!("m{i}")).collect(),
                vec!["m7".into(), "m8".into(), "x".into()],
            ),
        };
        for (key, items) in [("{t}a", a), ("{t}b", b), ("{t}c", c)] {
            let mut argv = vec!["SADD", key];
            argv.extend(items.iter().map(String::as_str));
            t.run(&argv);
        }
        assert_eq!(encoding(t, "{t}a"), kind);
    }

    #[test]
    fn inter_union_diff_in_every_encoding() {
        for kind in ["intset", "listpack", "hashtable"] {
            let mut t = TestKit::default();
            fixture(&mut t, kind);
            let a = members(&mut t, &["SMEMBERS", "{t}a"]);
            let b = members(&mut t, &["SMEMBERS", "{t}b"]);
            let c = members(&mut t, &["SMEMBERS", "{t}c"]);
            let ab: BTreeSet<String> = a.intersection(&b).cloned().collect();
            let abc: BTreeSet<String> = ab.intersection(&c).cloned().collect();
            assert_eq!(members(&mut t, &["SINTER", "{t}a", "{t}b"]), ab, "{kind}");
            assert_eq!(members(&mut t, &["SINTER", "{t}a", "{t}b", "{t}c"]), abc);
            assert_eq!(members(&mut t, &["SINTER", "{t}a", "{t}a"]), a, "a key named twice");
            assert_eq!(members(&mut t, &["SINTER", "{t}a", "{t}none"]), set(&[]));
            let union: BTreeSet<String> = a.union(&b).chain(c.iter()).cloned().collect();
            assert_eq!(members(&mut t, &["SUNION", "{t}a", "{t}none", "{t}b", "{t}c"]), union);
            let diff: BTreeSet<String> = a.difference(&b).filter(|m| !c.contains(*m)).cloned().collect();
            assert_eq!(members(&mut t, &["SDIFF", "{t}a", "{t}b", "{t}c"]), diff);
            // Algorithm 2 (add the first, remove the others) wins with many small subtrahends.
            assert_eq!(
                members(&mut t, &["SDIFF", "{t}a", "{t}c", "{t}c", "{t}c", "{t}c", "{t}c"]),
                a.difference(&c).cloned().collect()
            );
            assert_eq!(members(&mut t, &["SDIFF", "{t}a", "{t}none"]), a);
            assert_eq!(members(&mut t, &["SDIFF", "{t}none", "{t}a"]), set(&[]));
            assert_eq!(members(&mut t, &["SDIFF", "{t}a", "{t}b", "{t}a"]), set(&[]), "the first set named again");
            assert_eq!(t.run(&["SINTERCARD", "3", "{t}a", "{t}b", "{t}c"]), format!(":{}\r\n", abc.len()));
            assert_eq!(t.run(&["SINTERCARD", "2", "{t}a", "{t}b", "LIMIT", "3"]), ":3\r\n");
            assert_eq!(t.run(&["SINTERCARD", "2", "{t}a", "{t}b", "LIMIT", "0"]), format!(":{}\r\n", ab.len()));
        }
    }

    #[test]
    fn replies_are_sets_in_resp3() {
        let mut t = TestKit::default();
        t.run(&["SADD", "{t}a", "1"]);
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["SINTER", "{t}a", "{t}a"]), "~1\r\n$1\r\n1\r\n");
        assert_eq!(t.run(&["SINTER", "{t}a", "{t}x"]), "~0\r\n");
        assert_eq!(t.run(&["SUNION", "{t}x"]), "~0\r\n");
        assert_eq!(t.run(&["SDIFF", "{t}a"]), "~1\r\n$1\r\n1\r\n");
        t.proto = Protocol::Resp2;
        assert_eq!(t.run(&["SUNION", "{t}x"]), "*0\r\n");
    }

    #[test]
    fn sintercard_arguments() {
        let mut t = TestKit::default();
        t.run(&["SADD", "{t}s", "a"]);
        let numkeys = "-ERR numkeys should be greater than 0\r\n";
        let too_many = "-ERR Number of keys can't be greater than number of args\r\n";
        assert_eq!(t.run(&["SINTERCARD"]), "-ERR wrong number of arguments for 'sintercard' command\r\n");
        assert_eq!(t.run(&["SINTERCARD", "1"]), "-ERR wrong number of arguments for 'sintercard' command\r\n");
        assert_eq!(t.run(&["SINTERCARD", "0", "{t}s"]), numkeys);
        assert_eq!(t.run(&["SINTERCARD", "a", "{t}s"]), numkeys);
        assert_eq!(t.run(&["SINTERCARD", "2", "{t}s"]), too_many);
        assert_eq!(t.run(&["SINTERCARD", "3", "{t}s", "{t}x"]), too_many);
        assert_eq!(t.run(&["SINTERCARD", "1", "{t}s", "{t}x"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SINTERCARD", "1", "{t}s", "LIMIT"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SINTERCARD", "1", "{t}s", "LIMIT", "-1"]), "-ERR LIMIT can't be negative\r\n");
        assert_eq!(t.run(&["SINTERCARD", "1", "{t}s", "LIMIT", "a"]), "-ERR LIMIT can't be negative\r\n");
        assert_eq!(t.run(&["SINTERCARD", "1", "{t}none"]), ":0\r\n");
        assert_eq!(t.run(&["SINTERCARD", "1", "{t}none", "limit", "10"]), ":0\r\n");
        assert_eq!(t.run(&["SINTERCARD", "1", "{t}s"]), ":1\r\n");
    }

    #[test]
    fn store_variants_overwrite_or_delete_the_destination() {
        let mut t = TestKit::default();
        fixture(&mut t, "listpack");
        t.run(&["SET", "{t}d", "a string", "EX", "100"]);
        t.events.take();
        assert_eq!(t.run(&["SINTERSTORE", "{t}d", "{t}a", "{t}b"]), ":5\r\n");
        assert_eq!(t.events.take(), ["s:sinterstore:{t}d@0"]);
        assert_eq!(t.run(&["TYPE", "{t}d"]), "+set\r\n");
        assert_eq!(t.run(&["TTL", "{t}d"]), ":-1\r\n", "the old TTL goes with the old value");
        assert_eq!(t.run(&["SUNIONSTORE", "{t}d", "{t}a", "{t}c"]), ":11\r\n");
        assert_eq!(t.run(&["SDIFFSTORE", "{t}d", "{t}a", "{t}b"]), ":5\r\n");
        assert_eq!(members(&mut t, &["SMEMBERS", "{t}d"]), set(&["m0", "m1", "m2", "m3", "m4"]));
        t.events.take();
        assert_eq!(t.run(&["SINTERSTORE", "{t}d", "{t}a", "{t}none"]), ":0\r\n");
        assert_eq!(t.events.take(), ["m:keymiss:{t}none@0", "g:del:{t}d@0"]);
        assert_eq!(t.run(&["EXISTS", "{t}d"]), ":0\r\n");
        t.events.take();
        assert_eq!(t.run(&["SDIFFSTORE", "{t}d", "{t}a", "{t}a"]), ":0\r\n");
        assert!(t.events.take().is_empty(), "no key was there to delete");
        assert_eq!(t.run(&["SUNIONSTORE", "{t}d", "{t}none"]), ":0\r\n");
        // The destination may be a source.
        assert_eq!(t.run(&["SUNIONSTORE", "{t}a", "{t}a", "{t}c"]), ":11\r\n");
        assert_eq!(t.run(&["SCARD", "{t}a"]), ":11\r\n");
        t.events.take();
        assert_eq!(t.run(&["SUNIONSTORE", "{t}new", "{t}c"]), ":3\r\n");
        assert_eq!(t.events.take(), ["n:new:{t}new@0", "s:sunionstore:{t}new@0"]);
    }

    #[test]
    fn stored_results_take_the_compact_encodings() {
        let mut t = TestKit::default();
        fixture(&mut t, "hashtable");
        t.run(&["SADD", "{t}i", "1", "2", "3"]);
        t.run(&["SADD", "{t}j", "2", "3", "4", "x"]);
        t.run(&["SINTERSTORE", "{t}d", "{t}i", "{t}j"]);
        assert_eq!(encoding(&mut t, "{t}d"), "intset");
        t.run(&["SINTERSTORE", "{t}d", "{t}j", "{t}j"]);
        assert_eq!(encoding(&mut t, "{t}d"), "listpack");
        t.run(&["SINTERSTORE", "{t}d", "{t}a", "{t}b"]);
        assert_eq!(encoding(&mut t, "{t}d"), "hashtable", "195 members");
        t.run(&["SUNIONSTORE", "{t}d", "{t}i", "{t}j"]);
        assert_eq!(encoding(&mut t, "{t}d"), "listpack");
        t.run(&["SUNIONSTORE", "{t}d", "{t}i", "{t}i"]);
        assert_eq!(encoding(&mut t, "{t}d"), "intset");
        t.run(&["SDIFFSTORE", "{t}d", "{t}a", "{t}c"]);
        assert_eq!(encoding(&mut t, "{t}d"), "hashtable");
        // A table source of integers only still yields an intset.
        t.cfg.set_max_intset_entries = 1;
        t.cfg.set_max_listpack_entries = 1;
        t.run(&["SADD", "{t}k", "1", "2"]);
        t.cfg.set_max_intset_entries = 512;
        t.cfg.set_max_listpack_entries = 128;
        assert_eq!(encoding(&mut t, "{t}k"), "hashtable");
        t.run(&["SINTERSTORE", "{t}d", "{t}k", "{t}k"]);
        assert_eq!(encoding(&mut t, "{t}d"), "intset");
    }

    #[test]
    fn smove_cases() {
        let mut t = TestKit::default();
        t.run(&["SADD", "{t}src", "a", "b"]);
        t.run(&["SADD", "{t}dst", "c"]);
        t.run(&["SET", "{t}str", "v"]);
        t.events.take();
        assert_eq!(t.run(&["SMOVE", "{t}src", "{t}dst", "a"]), ":1\r\n");
        assert_eq!(t.events.take(), ["s:srem:{t}src@0", "s:sadd:{t}dst@0"]);
        assert_eq!(t.run(&["SMOVE", "{t}src", "{t}dst", "zz"]), ":0\r\n");
        assert_eq!(t.run(&["SMOVE", "{t}src", "{t}src", "b"]), ":1\r\n", "same set: membership");
        assert_eq!(t.run(&["SMOVE", "{t}src", "{t}src", "zz"]), ":0\r\n");
        assert_eq!(t.run(&["SMOVE", "{t}none", "{t}str", "a"]), ":0\r\n", "a missing source answers first");
        assert_eq!(t.run(&["SMOVE", "{t}src", "{t}str", "b"]), WRONGTYPE);
        assert_eq!(t.run(&["SMOVE", "{t}str", "{t}dst", "b"]), WRONGTYPE);
        t.run(&["SADD", "{t}dst", "b"]);
        t.events.take();
        assert_eq!(t.run(&["SMOVE", "{t}src", "{t}dst", "b"]), ":1\r\n", "already in the destination");
        assert_eq!(t.events.take(), ["s:srem:{t}src@0", "g:del:{t}src@0"]);
        assert_eq!(t.run(&["EXISTS", "{t}src"]), ":0\r\n");
        t.run(&["SADD", "{t}dst", "5"]);
        assert_eq!(t.run(&["SMOVE", "{t}dst", "{t}new", "5"]), ":1\r\n");
        assert_eq!(encoding(&mut t, "{t}new"), "intset");
        assert_eq!(members(&mut t, &["SMEMBERS", "{t}dst"]), set(&["a", "b", "c"]));
    }

    #[test]
    fn wrong_type_among_many_keys() {
        let mut t = TestKit::default();
        t.run(&["SADD", "{t}s", "a"]);
        t.run(&["SET", "{t}str", "v"]);
        for argv in [
            &["SINTER", "{t}s", "{t}str"][..],
            &["SINTER", "{t}none", "{t}str"],
            &["SINTERCARD", "2", "{t}s", "{t}str"],
            &["SINTERCARD", "1", "{t}str"],
            &["SUNION", "{t}str", "{t}s"],
            &["SDIFF", "{t}s", "{t}str"],
            &["SINTERSTORE", "{t}d", "{t}s", "{t}str"],
            &["SUNIONSTORE", "{t}d", "{t}str"],
            &["SDIFFSTORE", "{t}d", "{t}none", "{t}str"],
        ] {
            assert_eq!(t.run(argv), WRONGTYPE, "{argv:?}");
        }
        assert_eq!(t.run(&["EXISTS", "{t}d"]), ":0\r\n");
        assert_eq!(t.run(&["SUNIONSTORE", "{t}str", "{t}s"]), ":1\r\n", "any destination type is overwritten");
        assert_eq!(t.run(&["TYPE", "{t}str"]), "+set\r\n");
    }

    #[test]
    fn every_key_is_locked() {
        // The rows name every key, so keys in different slots are all reachable (a missing
        // key spec would trip the lock assertion in with_sets).
        let mut t = TestKit::default();
        t.run(&["SADD", "x", "1", "2"]);
        t.run(&["SADD", "y", "2", "3"]);
        t.run(&["SADD", "z", "3", "4"]);
        assert_eq!(members(&mut t, &["SUNION", "x", "y", "z"]), set(&["1", "2", "3", "4"]));
        assert_eq!(t.run(&["SINTERCARD", "2", "x", "y"]), ":1\r\n");
        assert_eq!(t.run(&["SDIFFSTORE", "w", "x", "y", "z"]), ":1\r\n");
        assert_eq!(t.run(&["SMOVE", "x", "z", "1"]), ":1\r\n");
        assert_eq!(members(&mut t, &["SMEMBERS", "z"]), set(&["1", "3", "4"]));
    }
}
