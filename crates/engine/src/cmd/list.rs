//! List commands that act on one list: the pushes and pops, LLEN, LRANGE, LINDEX, LSET,
//! LINSERT, LREM, LTRIM and LPOS (Valkey's `t_list.c`). Commands that move elements between
//! lists or block live in `list_block.rs`.
//!
//! Every change sends Valkey's keyspace event (class `l`) and a list emptied by a command is
//! deleted at once, with a `del` event, so no key ever holds an empty list.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::types::list::{End, List};
use crate::types::lpentry::Elem;

/// Single-list command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "lpush",
        -3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "list",
        "1.0.0",
        "Prepends one or more elements to a list. Creates the key if it doesn't exist.",
        "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
        EngineCmd { run: lpush, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "rpush",
        -3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "list",
        "1.0.0",
        "Appends one or more elements to a list. Creates the key if it doesn't exist.",
        "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
        EngineCmd { run: rpush, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lpushx",
        -3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "list",
        "2.2.0",
        "Prepends one or more elements to a list only when the list exists.",
        "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
        EngineCmd { run: lpushx, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "rpushx",
        -3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "list",
        "2.2.0",
        "Appends an element to a list only when the list exists.",
        "O(1) for each element added, so O(N) to add N elements when the command is called with multiple arguments.",
        EngineCmd { run: rpushx, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lpop",
        -2,
        flags::WRITE | flags::FAST,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE)],
        "list",
        "1.0.0",
        "Returns the first elements in a list after removing it. Deletes the list if the last element was popped.",
        "O(N) where N is the number of elements returned",
        EngineCmd { run: lpop, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "rpop",
        -2,
        flags::WRITE | flags::FAST,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE)],
        "list",
        "1.0.0",
        "Returns and removes the last elements of a list. Deletes the list if the last element was popped.",
        "O(N) where N is the number of elements returned",
        EngineCmd { run: rpop, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "llen",
        2,
        flags::READONLY | flags::FAST,
        acl::LIST,
        &[KeySpec::single(1, kf::RO)],
        "list",
        "1.0.0",
        "Returns the length of a list.",
        "O(1)",
        EngineCmd { run: llen, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lrange",
        4,
        flags::READONLY,
        acl::LIST,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "list",
        "1.0.0",
        "Returns a range of elements from a list.",
        "O(S+N) where S is the distance of start offset from HEAD for small lists, from nearest end (HEAD or TAIL) for large lists; and N is the number of elements in the specified range.",
        EngineCmd { run: lrange, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lindex",
        3,
        flags::READONLY,
        acl::LIST,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "list",
        "1.0.0",
        "Returns an element from a list by its index.",
        "O(N) where N is the number of elements to traverse to get to the element at index. This makes asking for the first or the last element of the list O(1).",
        EngineCmd { run: lindex, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lset",
        4,
        flags::WRITE | flags::DENYOOM,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "list",
        "1.0.0",
        "Sets the value of an element in a list by its index.",
        "O(N) where N is the length of the list. Setting either the first or the last element of the list is O(1).",
        EngineCmd { run: lset, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "linsert",
        5,
        flags::WRITE | flags::DENYOOM,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "list",
        "2.2.0",
        "Inserts an element before or after another element in a list.",
        "O(N) where N is the number of elements to traverse before seeing the value pivot. This means that inserting somewhere on the left end on the list (head) can be considered O(1) and inserting somewhere on the right end (tail) is O(N).",
        EngineCmd { run: linsert, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lrem",
        4,
        flags::WRITE,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "list",
        "1.0.0",
        "Removes elements from a list. Deletes the list if the last element was removed.",
        "O(N+M) where N is the length of the list and M is the number of elements removed.",
        EngineCmd { run: lrem, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "ltrim",
        4,
        flags::WRITE,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "list",
        "1.0.0",
        "Removes elements from both ends a list. Deletes the list if all elements were trimmed.",
        "O(N) where N is the number of elements to be removed by the operation.",
        EngineCmd { run: ltrim, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lpos",
        -3,
        flags::READONLY,
        acl::LIST,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "list",
        "6.0.6",
        "Returns the index of matching elements in a list.",
        "O(N) where N is the number of elements in the list, for the average case. When searching for elements near the head or the tail of the list, or when the MAXLEN option is provided, the command may run in constant time.",
        EngineCmd { run: lpos, plan: LockPlan::Keys },
    ),
];

/// The node limit (`list-max-listpack-size`) commands pass to the list.
pub(super) fn fill(ctx: &Ctx<'_>) -> i64 {
    ctx.cfg.list_max_listpack_size
}

/// Stores a new list at `key` (which does not exist).
pub(super) fn create(ctx: &mut Ctx<'_>, key: &[u8], list: List) -> CmdResult {
    ctx.set(key, NewValue::Object(Object::List(list)), Ttl::Clear)
}

/// Makes the command's share of `dirty` Valkey's figure, `n` (`server.dirty += n`): the
/// per-change counting of `ctx.set` and `ctx.modified` counts a push that creates its key
/// twice and a pop of five elements once, and BLPOP's suite test counts exactly.
pub(super) fn set_dirty(ctx: &mut Ctx<'_>, before: u64, n: usize) {
    ctx.stats.dirty = before + n as u64;
}

/// `getRangeLongFromObjectOrReply`: an integer in `min..=max`; `msg` replaces both errors.
pub(super) fn range_arg(arg: &[u8], min: i64, max: i64, msg: Option<&'static str>) -> Result<i64, CommandError> {
    let v = match hotkv_protocol::parse_i64(arg) {
        Some(v) => v,
        None => return Err(msg.map_or(CommandError::NotInteger, CommandError::err)),
    };
    if v < min || v > max {
        return Err(match msg {
            Some(m) => CommandError::err(m),
            None => CommandError::err(format!("value is out of range, value must between {min} and {max}")),
        });
    }
    Ok(v)
}

/// `getPositiveLongFromObjectOrReply`.
pub(super) fn positive_arg(arg: &[u8], msg: Option<&'static str>) -> Result<i64, CommandError> {
    range_arg(arg, 0, i64::MAX, Some(msg.unwrap_or("value is out of range, must be positive")))
}

/// Clamps Valkey's `start`/`end` (negative from the tail) to a range of `len`: `None` when
/// empty, else (first index, count).
pub(super) fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let end = if end < 0 { len + end } else { end };
    if start > end || start >= len {
        return None;
    }
    let end = end.min(len - 1);
    Some((start as usize, (end - start + 1) as usize))
}

fn lpush(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    push_generic(ctx, args, out, End::Head, false)
}

fn rpush(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    push_generic(ctx, args, out, End::Tail, false)
}

fn lpushx(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    push_generic(ctx, args, out, End::Head, true)
}

fn rpushx(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    push_generic(ctx, args, out, End::Tail, true)
}

/// LPUSH, RPUSH and their X forms (`pushGenericCommand`).
fn push_generic(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, end: End, xx: bool) -> CmdResult {
    let key = args.get(1);
    let items: Vec<&[u8]> = args.iter().skip(2).collect();
    let fill = fill(ctx);
    let before = ctx.stats.dirty;
    let len = match ctx.write(key)? {
        Some(mut k) => {
            let l = k.list_mut()?;
            l.push(&items, end, fill);
            l.len()
        }
        None if xx => {
            out.int(0);
            return Ok(());
        }
        None => {
            let mut l = List::new();
            l.push(&items, end, fill);
            let n = l.len();
            create(ctx, key, l)?;
            n
        }
    };
    out.int(len as i64);
    ctx.changed(key, 'l', if end == End::Head { "lpush" } else { "rpush" }, false);
    set_dirty(ctx, before, items.len());
    Ok(())
}

fn lpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    pop_generic(ctx, args, out, End::Head)
}

fn rpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    pop_generic(ctx, args, out, End::Tail)
}

/// LPOP/RPOP with an optional count (`popGenericCommand`).
fn pop_generic(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, end: End) -> CmdResult {
    let name = if end == End::Head { "lpop" } else { "rpop" };
    if args.len() > 3 {
        return Err(CommandError::WrongArity(name.into()));
    }
    let count = match args.opt(2) {
        Some(a) => Some(positive_arg(a, None)? as usize),
        None => None,
    };
    let key = args.get(1);
    let fill = fill(ctx);
    let Some(mut k) = ctx.write(key)? else {
        if count.is_some() {
            out.null_array()
        } else {
            out.null()
        }
        return Ok(());
    };
    let l = k.list_mut()?;
    let popped = match count {
        Some(0) => {
            out.array(0);
            return Ok(());
        }
        None => {
            let v = l.pop(end).unwrap_or_default();
            l.try_shrink(fill);
            out.bulk(&v);
            1
        }
        Some(n) => {
            let vals = l.pop_many(end, n, fill);
            out.array(vals.len());
            for v in &vals {
                out.bulk(v);
            }
            vals.len()
        }
    };
    let deleted = l.is_empty();
    if deleted {
        drop(k.delete());
    }
    let before = ctx.stats.dirty;
    ctx.changed(key, 'l', name, deleted);
    set_dirty(ctx, before, popped);
    Ok(())
}

fn llen(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let n = match ctx.read(args.get(1))? {
        Some(k) => k.list()?.len(),
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn lrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (start, end) = (int_arg(args.get(2))?, int_arg(args.get(3))?);
    let Some(k) = ctx.read(args.get(1))? else {
        out.array(0);
        return Ok(());
    };
    let l = k.list()?;
    let Some((first, n)) = clamp_range(start, end, l.len()) else {
        out.array(0);
        return Ok(());
    };
    out.array(n);
    for v in l.range(first, n, false) {
        v.reply(out);
    }
    Ok(())
}

fn lindex(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(k) = ctx.read(args.get(1))? else {
        out.null();
        return Ok(());
    };
    let l = k.list()?;
    match l.get(int_arg(args.get(2))?) {
        Some(v) => v.reply(out),
        None => out.null(),
    }
    Ok(())
}

fn lset(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let fill = fill(ctx);
    let Some(mut k) = ctx.write(key)? else { return Err(CommandError::NoSuchKey) };
    let l = k.list_mut()?;
    let index = int_arg(args.get(2))?;
    if !l.set(index, args.get(3), fill) {
        return Err(CommandError::IndexOutOfRange);
    }
    out.ok();
    ctx.changed(key, 'l', "lset", false);
    Ok(())
}

fn linsert(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let after = match args.get(2) {
        w if w.eq_ignore_ascii_case(b"after") => true,
        w if w.eq_ignore_ascii_case(b"before") => false,
        _ => return Err(CommandError::Syntax),
    };
    let key = args.get(1);
    let fill = fill(ctx);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let l = k.list_mut()?;
    if !l.insert(args.get(3), args.get(4), after, fill) {
        out.int(-1);
        return Ok(());
    }
    out.int(l.len() as i64);
    ctx.changed(key, 'l', "linsert", false);
    Ok(())
}

fn lrem(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let count = range_arg(args.get(2), -i64::MAX, i64::MAX, None)?;
    let key = args.get(1);
    let fill = fill(ctx);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let l = k.list_mut()?;
    let removed = l.remove(args.get(3), count.unsigned_abs() as usize, count < 0, fill);
    out.int(removed as i64);
    if removed > 0 {
        let deleted = l.is_empty();
        if deleted {
            drop(k.delete());
        }
        ctx.changed(key, 'l', "lrem", deleted);
    }
    Ok(())
}

fn ltrim(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (start, end) = (int_arg(args.get(2))?, int_arg(args.get(3))?);
    let key = args.get(1);
    let fill = fill(ctx);
    let Some(mut k) = ctx.write(key)? else {
        out.ok();
        return Ok(());
    };
    let l = k.list_mut()?;
    let len = l.len();
    let (head, tail) = match clamp_range(start, end, len) {
        Some((first, n)) => (first, len - first - n),
        None => (len, 0),
    };
    l.trim(head, tail, fill);
    let deleted = l.is_empty();
    if deleted {
        drop(k.delete());
    }
    // Valkey sends `ltrim` (and counts a change) even when nothing was trimmed.
    ctx.changed(key, 'l', "ltrim", deleted);
    out.ok();
    Ok(())
}

/// LPOS's options, parsed.
struct LposArgs {
    rank: i64,
    count: Option<usize>,
    maxlen: usize,
}

fn parse_lpos(args: &Args<'_>) -> Result<LposArgs, CommandError> {
    let mut a = LposArgs { rank: 1, count: None, maxlen: 0 };
    let mut j = 3;
    while j < args.len() {
        let opt = args.get(j);
        let more = j + 1 < args.len();
        if opt.eq_ignore_ascii_case(b"rank") && more {
            j += 1;
            a.rank = range_arg(args.get(j), -i64::MAX, i64::MAX, None)?;
            if a.rank == 0 {
                return Err(CommandError::err(
                    "RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative \
                     to start from the end of the list",
                ));
            }
        } else if opt.eq_ignore_ascii_case(b"count") && more {
            j += 1;
            a.count = Some(positive_arg(args.get(j), Some("COUNT can't be negative"))? as usize);
        } else if opt.eq_ignore_ascii_case(b"maxlen") && more {
            j += 1;
            a.maxlen = positive_arg(args.get(j), Some("MAXLEN can't be negative"))? as usize;
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    Ok(a)
}

fn lpos(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let opts = parse_lpos(&args)?;
    let elem = args.get(2);
    let Some(k) = ctx.read(args.get(1))? else {
        if opts.count.is_some() {
            out.array(0)
        } else {
            out.null()
        }
        return Ok(());
    };
    let l = k.list()?;
    let len = l.len();
    let from_tail = opts.rank < 0;
    let skip = opts.rank.unsigned_abs() as usize - 1;
    // COUNT 0 means "all matches".
    let want = match opts.count {
        Some(0) => usize::MAX,
        Some(n) => n,
        None => 1,
    };
    let limit = if opts.maxlen == 0 { len } else { opts.maxlen.min(len) };
    let mut found = Vec::new();
    let mut matches = 0usize;
    let iter: Box<dyn Iterator<Item = (usize, Elem<'_>)>> = if from_tail {
        Box::new(l.iter().rev().enumerate().map(|(i, v)| (len - 1 - i, v)))
    } else {
        Box::new(l.iter().enumerate())
    };
    for (pos, v) in iter.take(limit) {
        if v.eq_bytes(elem) {
            matches += 1;
            if matches > skip {
                found.push(pos);
                if found.len() >= want {
                    break;
                }
            }
        }
    }
    match opts.count {
        Some(_) => {
            out.array(found.len());
            for p in found {
                out.int(p as i64);
            }
        }
        None => match found.first() {
            Some(&p) => out.int(p as i64),
            None => out.null(),
        },
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::arr;
    use std::collections::VecDeque;

    use hotkv_protocol::Protocol;
    use proptest::prelude::*;

    use crate::testkit::TestKit;

    const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

    /// A RESP array of bulk strings.
    #[test]
    fn dirty_counts_elements_as_valkey_does() {
        let mut t = TestKit::default();
        let step = |t: &mut TestKit, argv: &[&str], want: u64| {
            let before = t.stats.dirty;
            t.run(argv);
            assert_eq!(t.stats.dirty - before, want, "{argv:?}");
        };
        step(&mut t, &["LPUSH", "l", "a"], 1);
        step(&mut t, &["RPUSH", "l", "b", "c", "d"], 3);
        step(&mut t, &["LPUSHX", "none", "x"], 0);
        step(&mut t, &["LPOP", "l", "2"], 2);
        step(&mut t, &["LMOVE", "l", "m", "LEFT", "LEFT"], 1);
        step(&mut t, &["RPOP", "l"], 1);
        step(&mut t, &["LPOP", "l", "0"], 0);
    }

    #[test]
    fn push_and_range() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["LPUSH", "l", "a", "b", "c"]), ":3\r\n");
        assert_eq!(t.run(&["RPUSH", "l", "d", "1", "-200"]), ":6\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "0", "-1"]), arr(&["c", "b", "a", "d", "1", "-200"]));
        assert_eq!(t.run(&["LRANGE", "l", "-2", "100"]), arr(&["1", "-200"]));
        assert_eq!(t.run(&["LRANGE", "l", "-100", "1"]), arr(&["c", "b"]));
        assert_eq!(t.run(&["LRANGE", "l", "4", "2"]), "*0\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "6", "10"]), "*0\r\n");
        assert_eq!(t.run(&["LRANGE", "nope", "0", "-1"]), "*0\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "x", "1"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "-9223372036854775808", "9223372036854775807"]).lines().next(), Some("*6"));
        assert_eq!(t.run(&["LLEN", "l"]), ":6\r\n");
        assert_eq!(t.run(&["LLEN", "nope"]), ":0\r\n");
        assert_eq!(t.run(&["LPUSHX", "nope", "a"]), ":0\r\n");
        assert_eq!(t.run(&["RPUSHX", "l", "x", "y"]), ":8\r\n");
        assert_eq!(t.run(&["LPUSHX", "l", "z"]), ":9\r\n");
        assert_eq!(t.run(&["EXISTS", "nope"]), ":0\r\n");
        assert_eq!(t.run(&["TYPE", "l"]), "+list\r\n");
        assert_eq!(t.run(&["LPUSH", "l"]), "-ERR wrong number of arguments for 'lpush' command\r\n");
    }

    #[test]
    fn pops_with_and_without_count() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b", "c", "d", "e"]);
        assert_eq!(t.run(&["LPOP", "l"]), "$1\r\na\r\n");
        assert_eq!(t.run(&["RPOP", "l"]), "$1\r\ne\r\n");
        assert_eq!(t.run(&["LPOP", "l", "0"]), "*0\r\n");
        assert_eq!(t.run(&["RPOP", "l", "2"]), arr(&["d", "c"]));
        assert_eq!(t.run(&["LPOP", "l", "5"]), arr(&["b"]));
        assert_eq!(t.run(&["EXISTS", "l"]), ":0\r\n", "emptied lists are deleted");
        assert_eq!(t.run(&["LPOP", "l"]), "$-1\r\n");
        assert_eq!(t.run(&["LPOP", "l", "1"]), "*-1\r\n");
        assert_eq!(t.run(&["LPOP", "l", "0"]), "*-1\r\n", "a missing key wins over count 0");
        assert_eq!(t.run(&["LPOP", "l", "-1"]), "-ERR value is out of range, must be positive\r\n");
        assert_eq!(t.run(&["LPOP", "l", "1", "2"]), "-ERR wrong number of arguments for 'lpop' command\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["LPOP", "l"]), "_\r\n");
        assert_eq!(t.run(&["RPOP", "l", "3"]), "_\r\n");
        t.run(&["RPUSH", "big", &"x".repeat(10)]);
        assert_eq!(t.run(&["RPOP", "big", "9223372036854775807"]), arr(&[&"x".repeat(10)]));
    }

    #[test]
    fn index_set_insert() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b", "c"]);
        assert_eq!(t.run(&["LINDEX", "l", "0"]), "$1\r\na\r\n");
        assert_eq!(t.run(&["LINDEX", "l", "-1"]), "$1\r\nc\r\n");
        assert_eq!(t.run(&["LINDEX", "l", "3"]), "$-1\r\n");
        assert_eq!(t.run(&["LINDEX", "l", "-4"]), "$-1\r\n");
        assert_eq!(t.run(&["LINDEX", "l", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["LINDEX", "nope", "x"]), "$-1\r\n", "missing key before index parsing");
        assert_eq!(t.run(&["LSET", "l", "1", "B"]), "+OK\r\n");
        assert_eq!(t.run(&["LSET", "l", "-1", "C"]), "+OK\r\n");
        assert_eq!(t.run(&["LSET", "l", "3", "x"]), "-ERR index out of range\r\n");
        assert_eq!(t.run(&["LSET", "nope", "0", "x"]), "-ERR no such key\r\n");
        assert_eq!(t.run(&["LINSERT", "l", "BEFORE", "B", "a2"]), ":4\r\n");
        assert_eq!(t.run(&["LINSERT", "l", "after", "C", "end"]), ":5\r\n");
        assert_eq!(t.run(&["LINSERT", "l", "after", "zz", "x"]), ":-1\r\n");
        assert_eq!(t.run(&["LINSERT", "nope", "after", "a", "x"]), ":0\r\n");
        assert_eq!(t.run(&["LINSERT", "l", "middle", "a", "x"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "0", "-1"]), arr(&["a", "a2", "B", "C", "end"]));
    }

    #[test]
    fn lrem_and_ltrim() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "x", "a", "x", "b", "x", "c", "x"]);
        assert_eq!(t.run(&["LREM", "l", "2", "x"]), ":2\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "0", "-1"]), arr(&["a", "b", "x", "c", "x"]));
        assert_eq!(t.run(&["LREM", "l", "-1", "x"]), ":1\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "0", "-1"]), arr(&["a", "b", "x", "c"]));
        assert_eq!(t.run(&["LREM", "l", "0", "zz"]), ":0\r\n");
        assert!(t.run(&["LREM", "l", "-9223372036854775808", "x"]).starts_with("-ERR value is out of range"));
        assert_eq!(t.run(&["LTRIM", "l", "1", "-2"]), "+OK\r\n");
        assert_eq!(t.run(&["LRANGE", "l", "0", "-1"]), arr(&["b", "x"]));
        assert_eq!(t.run(&["LTRIM", "l", "5", "10"]), "+OK\r\n");
        assert_eq!(t.run(&["EXISTS", "l"]), ":0\r\n");
        assert_eq!(t.run(&["LTRIM", "nope", "0", "1"]), "+OK\r\n");
        t.run(&["RPUSH", "l", "1", "1", "1"]);
        assert_eq!(t.run(&["LREM", "l", "0", "1"]), ":3\r\n");
        assert_eq!(t.run(&["EXISTS", "l"]), ":0\r\n");
    }

    #[test]
    fn lpos_options() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b", "c", "1", "2", "3", "c", "c"]);
        assert_eq!(t.run(&["LPOS", "l", "c"]), ":2\r\n");
        assert_eq!(t.run(&["LPOS", "l", "c", "RANK", "2"]), ":6\r\n");
        assert_eq!(t.run(&["LPOS", "l", "c", "RANK", "-1"]), ":7\r\n");
        assert_eq!(t.run(&["LPOS", "l", "c", "COUNT", "0"]), "*3\r\n:2\r\n:6\r\n:7\r\n");
        assert_eq!(t.run(&["LPOS", "l", "c", "COUNT", "2", "RANK", "-1"]), "*2\r\n:7\r\n:6\r\n");
        assert_eq!(t.run(&["LPOS", "l", "c", "COUNT", "0", "MAXLEN", "7"]), "*2\r\n:2\r\n:6\r\n");
        assert_eq!(t.run(&["LPOS", "l", "2"]), ":4\r\n", "integers compare as strings");
        assert_eq!(t.run(&["LPOS", "l", "x"]), "$-1\r\n");
        assert_eq!(t.run(&["LPOS", "l", "x", "COUNT", "1"]), "*0\r\n");
        assert_eq!(t.run(&["LPOS", "nope", "x", "COUNT", "1"]), "*0\r\n");
        assert!(t.run(&["LPOS", "l", "c", "RANK", "0"]).starts_with("-ERR RANK can't be zero"));
        assert_eq!(t.run(&["LPOS", "l", "c", "COUNT", "-1"]), "-ERR COUNT can't be negative\r\n");
        assert_eq!(t.run(&["LPOS", "l", "c", "MAXLEN", "x"]), "-ERR MAXLEN can't be negative\r\n");
        assert_eq!(t.run(&["LPOS", "l", "c", "FOO"]), "-ERR syntax error\r\n");
        assert_eq!(
            t.run(&["LPOS", "l", "c", "RANK", "-9223372036854775808"]),
            "-ERR value is out of range, value must between -9223372036854775807 and 9223372036854775807\r\n"
        );
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["LPOS", "l", "x"]), "_\r\n");
    }

    #[test]
    fn wrongtype_everywhere() {
        let mut t = TestKit::default();
        t.run(&["SET", "s", "v"]);
        for cmd in [
            &["LPUSH", "s", "a"][..],
            &["RPUSH", "s", "a"],
            &["LPUSHX", "s", "a"],
            &["RPUSHX", "s", "a"],
            &["LPOP", "s"],
            &["RPOP", "s", "2"],
            &["LLEN", "s"],
            &["LRANGE", "s", "0", "1"],
            &["LINDEX", "s", "0"],
            &["LSET", "s", "0", "a"],
            &["LINSERT", "s", "BEFORE", "a", "b"],
            &["LREM", "s", "0", "a"],
            &["LTRIM", "s", "0", "1"],
            &["LPOS", "s", "a"],
        ] {
            assert_eq!(t.run(cmd), WRONGTYPE, "{cmd:?}");
        }
        t.run(&["RPUSH", "l", "a"]);
        assert_eq!(t.run(&["GET", "l"]), WRONGTYPE);
    }

    #[test]
    fn encodings_follow_list_max_listpack_size() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "l"]), "$8\r\nlistpack\r\n");
        let big = "x".repeat(9000);
        t.run(&["RPUSH", "l", &big]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "l"]), "$9\r\nquicklist\r\n");
        t.run(&["RPOP", "l"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "l"]), "$8\r\nlistpack\r\n", "shrinks once small again");
        t.cfg.list_max_listpack_size = 4;
        t.run(&["RPUSH", "c", "1", "2", "3", "4"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "c"]), "$8\r\nlistpack\r\n");
        t.run(&["RPUSH", "c", "5"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "c"]), "$9\r\nquicklist\r\n");
        t.run(&["LTRIM", "c", "0", "2"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "c"]), "$9\r\nquicklist\r\n", "3 is over half of 4");
        t.run(&["RPOP", "c"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "c"]), "$8\r\nlistpack\r\n");
        let usage = t.run(&["MEMORY", "USAGE", "l"]);
        let n: usize = usage[1..usage.len() - 2].parse().unwrap();
        assert!(n > 16 && n < 200, "{usage}");
    }

    #[test]
    fn keyspace_events() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "a", "b"]);
        t.run(&["LPUSH", "l", "c"]);
        t.run(&["LSET", "l", "0", "x"]);
        t.run(&["LINSERT", "l", "BEFORE", "x", "y"]);
        t.run(&["LREM", "l", "1", "y"]);
        t.run(&["LTRIM", "l", "0", "1"]);
        t.run(&["LPOP", "l"]);
        t.run(&["RPOP", "l"]);
        assert_eq!(
            t.events.take(),
            [
                "n:new:l@0",
                "l:rpush:l@0",
                "l:lpush:l@0",
                "l:lset:l@0",
                "l:linsert:l@0",
                "l:lrem:l@0",
                "l:ltrim:l@0",
                "l:lpop:l@0",
                "l:rpop:l@0",
                "g:del:l@0",
            ]
        );
    }

    #[test]
    fn copy_rename_and_long_lists() {
        let mut t = TestKit::default();
        let items: Vec<String> = (0..5000).map(|i| format!("item-{i}")).collect();
        let mut argv = vec!["RPUSH", "l"];
        argv.extend(items.iter().map(String::as_str));
        t.run(&argv);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "l"]), "$9\r\nquicklist\r\n");
        assert_eq!(t.run(&["LINDEX", "l", "2500"]), "$9\r\nitem-2500\r\n");
        assert_eq!(t.run(&["LINDEX", "l", "-5000"]), "$6\r\nitem-0\r\n");
        assert_eq!(t.run(&["COPY", "l", "c"]), ":1\r\n");
        assert_eq!(t.run(&["RENAME", "c", "r"]), "+OK\r\n");
        assert_eq!(t.run(&["LRANGE", "r", "4998", "-1"]), arr(&["item-4998", "item-4999"]));
        t.run(&["LPOP", "l"]);
        assert_eq!(t.run(&["LLEN", "r"]), ":5000\r\n", "COPY duplicates the value");
        assert_eq!(t.run(&["LREM", "l", "0", "item-42"]), ":1\r\n");
        assert_eq!(t.run(&["LPOS", "l", "item-43"]), ":41\r\n");
    }

    /// A command the model and the engine both run.
    #[derive(Debug, Clone)]
    enum Op {
        Push(bool, Vec<String>),
        Pop(bool, Option<usize>),
        Set(i64, String),
        Insert(bool, String, String),
        Rem(i64, String),
        Trim(i64, i64),
        Range(i64, i64),
        Index(i64),
    }

    fn op() -> impl Strategy<Value = Op> {
        let val = prop_oneof![Just("a".to_string()), Just("7".to_string()), "[a-c]{0,3}", "x{60,70}"];
        prop_oneof![
            (any::<bool>(), prop::collection::vec(val.clone(), 1..20)).prop_map(|(h, v)| Op::Push(h, v)),
            (any::<bool>(), prop::option::of(0usize..10)).prop_map(|(h, c)| Op::Pop(h, c)),
            (-30i64..30, val.clone()).prop_map(|(i, v)| Op::Set(i, v)),
            (any::<bool>(), val.clone(), val.clone()).prop_map(|(a, p, v)| Op::Insert(a, p, v)),
            (-3i64..3, val.clone()).prop_map(|(c, v)| Op::Rem(c, v)),
            (-40i64..40, -40i64..40).prop_map(|(a, b)| Op::Trim(a, b)),
            (-40i64..40, -40i64..40).prop_map(|(a, b)| Op::Range(a, b)),
            (-40i64..40).prop_map(Op::Index),
        ]
    }

    fn model_range(m: &VecDeque<String>, start: i64, end: i64) -> Vec<String> {
        match super::clamp_range(start, end, m.len()) {
            Some((s, n)) => m.iter().skip(s).take(n).cloned().collect(),
            None => Vec::new(),
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        #[test]
        fn behaves_like_a_deque(ops in prop::collection::vec(op(), 1..60), fill in prop_oneof![Just(-1i64), Just(-2), Just(3)]) {
            let mut t = TestKit::default();
            t.cfg.list_max_listpack_size = fill;
            let mut m: VecDeque<String> = VecDeque::new();
            for op in ops {
                match op {
                    Op::Push(head, vals) => {
                        let mut argv = vec![if head { "LPUSH" } else { "RPUSH" }, "l"];
                        argv.extend(vals.iter().map(String::as_str));
                        t.run(&argv);
                        for v in vals {
                            if head { m.push_front(v) } else { m.push_back(v) }
                        }
                    }
                    Op::Pop(head, count) => {
                        let c = count.map(|c| c.to_string());
                        let mut argv = vec![if head { "LPOP" } else { "RPOP" }, "l"];
                        if let Some(c) = &c { argv.push(c); }
                        let got = t.run(&argv);
                        let n = count.unwrap_or(1).min(m.len());
                        let popped: Vec<String> = (0..n).filter_map(|_| if head { m.pop_front() } else { m.pop_back() }).collect();
                        if count.is_some() && !popped.is_empty() {
                            let want: Vec<&str> = popped.iter().map(String::as_str).collect();
                            prop_assert_eq!(got, arr(&want));
                        }
                    }
                    Op::Set(i, v) => {
                        let got = t.run(&["LSET", "l", &i.to_string(), &v]);
                        let idx = if i < 0 { m.len() as i64 + i } else { i };
                        if m.is_empty() {
                            prop_assert_eq!(got, "-ERR no such key\r\n");
                        } else if idx >= 0 && (idx as usize) < m.len() {
                            m[idx as usize] = v;
                        } else {
                            prop_assert_eq!(got, "-ERR index out of range\r\n");
                        }
                    }
                    Op::Insert(after, pivot, v) => {
                        t.run(&["LINSERT", "l", if after { "AFTER" } else { "BEFORE" }, &pivot, &v]);
                        if let Some(i) = m.iter().position(|x| *x == pivot) {
                            m.insert(if after { i + 1 } else { i }, v);
                        }
                    }
                    Op::Rem(c, v) => {
                        t.run(&["LREM", "l", &c.to_string(), &v]);
                        let limit = if c == 0 { usize::MAX } else { c.unsigned_abs() as usize };
                        let mut idx: Vec<usize> = m.iter().enumerate().filter(|(_, x)| **x == v).map(|(i, _)| i).collect();
                        if c < 0 { idx.reverse(); }
                        idx.truncate(limit);
                        idx.sort_unstable();
                        for i in idx.into_iter().rev() { m.remove(i); }
                    }
                    Op::Trim(a, b) => {
                        t.run(&["LTRIM", "l", &a.to_string(), &b.to_string()]);
                        m = model_range(&m, a, b).into();
                    }
                    Op::Range(a, b) => {
                        let want = model_range(&m, a, b);
                        let want: Vec<&str> = want.iter().map(String::as_str).collect();
                        prop_assert_eq!(t.run(&["LRANGE", "l", &a.to_string(), &b.to_string()]), arr(&want));
                    }
                    Op::Index(i) => {
                        let idx = if i < 0 { m.len() as i64 + i } else { i };
                        let want = if idx >= 0 { m.get(idx as usize) } else { None };
                        let got = t.run(&["LINDEX", "l", &i.to_string()]);
                        match want {
                            Some(v) => prop_assert_eq!(got, format!("${}\r\n{v}\r\n", v.len())),
                            None => prop_assert_eq!(got, "$-1\r\n"),
                        }
                    }
                }
                prop_assert_eq!(t.run(&["LLEN", "l"]), format!(":{}\r\n", m.len()));
                prop_assert_eq!(t.run(&["EXISTS", "l"]), format!(":{}\r\n", u8::from(!m.is_empty())));
            }
            let all: Vec<&str> = m.iter().map(String::as_str).collect();
            prop_assert_eq!(t.run(&["LRANGE", "l", "0", "-1"]), arr(&all));
        }
    }
}
