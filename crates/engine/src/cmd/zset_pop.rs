//! Sorted set pops: ZPOPMIN, ZPOPMAX, ZMPOP and the blocking BZPOPMIN, BZPOPMAX, BZMPOP
//! (Valkey's `genericZpopCommand` and `blockingGenericZpopCommand`).
//!
//! Blocking follows the list commands' contract (see `list_block.rs`): serve data at once,
//! reply as on timeout when blocking is not allowed, otherwise ask to block and write
//! nothing; when re-run for a blocked client, a key of another type is "no data yet".

use hotkv_protocol::{Args, ReplyBuf};

use super::list::positive_arg;
use super::list_block::parse_mpop;
use super::{EngineCmd, LockPlan, Spec, parse_timeout};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{BlockMode, Ctx};
use crate::error::{CmdResult, CommandError};

/// Pop command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "zpopmin",
        -2,
        flags::WRITE | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE)],
        "sorted_set",
        "5.0.0",
        "Returns the lowest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.",
        "O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.",
        EngineCmd { run: zpopmin, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zpopmax",
        -2,
        flags::WRITE | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE)],
        "sorted_set",
        "5.0.0",
        "Returns the highest-scoring members from a sorted set after removing them. Deletes the sorted set if the last member was popped.",
        "O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of elements popped.",
        EngineCmd { run: zpopmax, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zmpop",
        -4,
        flags::WRITE,
        acl::SORTEDSET,
        &[KeySpec {
            flags: kf::RW | kf::ACCESS | kf::DELETE,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "sorted_set",
        "7.0.0",
        "Returns the highest- or lowest-scoring members from one or more sorted sets after removing them. Deletes the sorted set if the last member was popped.",
        "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.",
        EngineCmd { run: zmpop, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "bzpopmin",
        -3,
        flags::WRITE | flags::FAST | flags::BLOCKING,
        acl::SORTEDSET,
        &[KeySpec::range(1, -2, 1, kf::RW | kf::ACCESS | kf::DELETE)],
        "sorted_set",
        "5.0.0",
        "Removes and returns the member with the lowest score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.",
        "O(log(N)) with N being the number of elements in the sorted set.",
        EngineCmd { run: bzpopmin, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "bzpopmax",
        -3,
        flags::WRITE | flags::FAST | flags::BLOCKING,
        acl::SORTEDSET,
        &[KeySpec::range(1, -2, 1, kf::RW | kf::ACCESS | kf::DELETE)],
        "sorted_set",
        "5.0.0",
        "Removes and returns the member with the highest score from one or more sorted sets. Blocks until a member available otherwise.  Deletes the sorted set if the last element was popped.",
        "O(log(N)) with N being the number of elements in the sorted set.",
        EngineCmd { run: bzpopmax, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "bzmpop",
        -5,
        flags::WRITE | flags::BLOCKING,
        acl::SORTEDSET,
        &[KeySpec {
            flags: kf::RW | kf::ACCESS | kf::DELETE,
            begin: BeginSearch::Index(2),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "sorted_set",
        "7.0.0",
        "Removes and returns a member by score from one or more sorted sets. Blocks until a member is available otherwise. Deletes the sorted set if the last element was popped.",
        "O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in the sorted set, and M being the number of elements popped.",
        EngineCmd { run: bzmpop, plan: LockPlan::Keys },
    ),
];

/// How a pop reply is shaped (`emitkey` and `use_nested_array` in Valkey).
#[derive(Clone, Copy)]
struct Shape {
    /// Lead with the key (the blocking pops and ZMPOP).
    key: bool,
    /// Each member and score as a two-element array.
    nested: bool,
}

/// Pops up to `count` members from the lowest (`max` false) or highest end of the set at
/// `key` and writes the reply; false when there is no sorted set there (nothing written).
fn pop_at(
    ctx: &mut Ctx<'_>,
    out: &mut ReplyBuf,
    key: &[u8],
    max: bool,
    count: usize,
    shape: Shape,
) -> Result<bool, CommandError> {
    let serving = ctx.block_mode == BlockMode::Serving;
    let Some(mut k) = ctx.write(key)? else { return Ok(false) };
    let z = match k.zset_mut() {
        Ok(z) => z,
        Err(_) if serving => return Ok(false),
        Err(e) => return Err(e),
    };
    let n = count.min(z.len());
    let start = if max { z.len() - 1 } else { 0 };
    let popped: Vec<(Vec<u8>, f64)> = z.range(start, n, max).iter().map(|(m, s)| (m.to_vec(), *s)).collect();
    let first = if max { z.len() - n } else { 0 };
    z.remove_range(first, n);
    let deleted = z.is_empty();
    if deleted {
        drop(k.delete());
    }
    match (shape.key, shape.nested) {
        (false, false) => out.array(2 * n),
        (false, true) => out.array(n),
        (true, false) => {
            out.array(2 * n + 1);
            out.bulk(key);
        }
        (true, true) => {
            out.array(2);
            out.bulk(key);
            out.array(n);
        }
    }
    for (m, s) in &popped {
        if shape.nested {
            out.array(2);
        }
        out.bulk(m);
        out.double(*s);
    }
    ctx.changed(key, 'z', if max { "zpopmax" } else { "zpopmin" }, deleted);
    Ok(true)
}

fn zpopmin(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    zpop(ctx, args, out, false)
}

fn zpopmax(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    zpop(ctx, args, out, true)
}

/// ZPOPMIN/ZPOPMAX: without a count a flat `[member, score]`; with one, pairs in RESP3.
fn zpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, max: bool) -> CmdResult {
    if args.len() > 3 {
        return Err(CommandError::Syntax);
    }
    let count = match args.opt(2) {
        Some(c) => Some(positive_arg(c, None)? as usize),
        None => None,
    };
    let shape = Shape { key: false, nested: out.is_resp3() && count.is_some() };
    if count == Some(0) {
        // Valkey checks the type first, then answers an empty array.
        if let Some(k) = ctx.write(args.get(1))? {
            k.zset()?;
        }
        out.array(0);
        return Ok(());
    }
    if !pop_at(ctx, out, args.get(1), max, count.unwrap_or(1), shape)? {
        out.array(0);
    }
    Ok(())
}

/// ZMPOP's and BZMPOP's side: MIN or MAX (true).
fn parse_max(w: &[u8]) -> Result<bool, CommandError> {
    match w {
        w if w.eq_ignore_ascii_case(b"min") => Ok(false),
        w if w.eq_ignore_ascii_case(b"max") => Ok(true),
        _ => Err(CommandError::Syntax),
    }
}

/// Pops from the first key holding a sorted set; false when none does.
fn pop_first(
    ctx: &mut Ctx<'_>,
    out: &mut ReplyBuf,
    keys: &[&[u8]],
    max: bool,
    count: usize,
    shape: Shape,
) -> Result<Option<usize>, CommandError> {
    for (i, key) in keys.iter().enumerate() {
        if pop_at(ctx, out, key, max, count, shape)? {
            return Ok(Some(i));
        }
    }
    Ok(None)
}

/// The blocking pops go to the stream as the pop they did (Valkey: BZPOPMIN as ZPOPMIN):
/// a replica must never block on them.
fn propagate_pop(ctx: &mut Ctx<'_>, key: &[u8], max: bool, count: usize) {
    if ctx.propagating() {
        let cmd: &[u8] = if max { b"ZPOPMAX" } else { b"ZPOPMIN" };
        let n = itoa::Buffer::new().format(count).as_bytes().to_vec();
        ctx.propagate_as(&[cmd, key, &n]);
    }
}

fn zmpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let a = parse_mpop(&args, 1, parse_max)?;
    if pop_first(ctx, out, &a.keys, a.side, a.count, Shape { key: true, nested: true })?.is_none() {
        out.null_array();
    }
    Ok(())
}

fn bzmpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let a = parse_mpop(&args, 2, parse_max)?;
    let deadline = parse_timeout(args.get(1), ctx.now_ms)?;
    match pop_first(ctx, out, &a.keys, a.side, a.count, Shape { key: true, nested: true })? {
        Some(i) => propagate_pop(ctx, a.keys[i], a.side, a.count),
        None => wait(ctx, out, &a.keys, deadline),
    }
    Ok(())
}

fn bzpopmin(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    bzpop(ctx, args, out, false)
}

fn bzpopmax(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    bzpop(ctx, args, out, true)
}

/// BZPOPMIN/BZPOPMAX: `[key, member, score]` from the first key with data.
fn bzpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, max: bool) -> CmdResult {
    let last = args.len() - 1;
    let deadline = parse_timeout(args.get(last), ctx.now_ms)?;
    let keys: Vec<&[u8]> = args.iter().take(last).skip(1).collect();
    match pop_first(ctx, out, &keys, max, 1, Shape { key: true, nested: false })? {
        Some(i) => propagate_pop(ctx, keys[i], max, 1),
        None => wait(ctx, out, &keys, deadline),
    }
    Ok(())
}

/// No data: block, or reply with the timeout's null array when blocking is not allowed.
fn wait(ctx: &mut Ctx<'_>, out: &mut ReplyBuf, keys: &[&[u8]], deadline: Option<i64>) {
    if ctx.can_block() {
        ctx.block_on(keys.iter().map(|k| k.to_vec()).collect(), deadline);
    } else {
        out.null_array();
    }
}

#[cfg(test)]
mod tests {
    use hotkv_protocol::Protocol;

    use crate::ctx::{BlockMode, BlockRequest};
    use crate::testkit::TestKit;

    const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

    fn blocked(keys: &[&str], deadline_ms: Option<i64>) -> Option<BlockRequest> {
        Some(BlockRequest {
            keys: keys.iter().map(|k| k.as_bytes().to_vec()).collect(),
            deadline_ms,
            argv: None,
            independent: false,
        })
    }

    #[test]
    fn zpopmin_and_zpopmax() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]);
        assert_eq!(t.run(&["ZPOPMIN", "z"]), "*2\r\n$1\r\na\r\n$1\r\n1\r\n");
        assert_eq!(t.run(&["ZPOPMAX", "z", "5"]), "*4\r\n$1\r\nc\r\n$1\r\n3\r\n$1\r\nb\r\n$1\r\n2\r\n");
        assert_eq!(t.run(&["EXISTS", "z"]), ":0\r\n");
        assert_eq!(t.run(&["ZPOPMIN", "z"]), "*0\r\n");
        assert_eq!(t.run(&["ZPOPMIN", "z", "0"]), "*0\r\n");
        assert_eq!(t.run(&["ZPOPMIN", "z", "-1"]), "-ERR value is out of range, must be positive\r\n");
        assert_eq!(t.run(&["ZPOPMIN", "z", "1", "2"]), "-ERR syntax error\r\n");
        t.run(&["ZADD", "z", "1", "a", "2", "b"]);
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["ZPOPMIN", "z"]), "*2\r\n$1\r\na\r\n,1\r\n", "no count: flat even in RESP3");
        assert_eq!(t.run(&["ZPOPMAX", "z", "1"]), "*1\r\n*2\r\n$1\r\nb\r\n,2\r\n");
        t.run(&["SET", "s", "v"]);
        assert_eq!(t.run(&["ZPOPMIN", "s", "0"]), WRONGTYPE);
    }

    #[test]
    fn zmpop_shapes_and_errors() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "b", "1", "x", "2", "y"]);
        assert_eq!(t.run(&["ZMPOP", "2", "a", "b", "MAX"]), "*2\r\n$1\r\nb\r\n*1\r\n*2\r\n$1\r\ny\r\n$1\r\n2\r\n");
        assert_eq!(
            t.run(&["ZMPOP", "2", "a", "b", "MIN", "COUNT", "9"]),
            "*2\r\n$1\r\nb\r\n*1\r\n*2\r\n$1\r\nx\r\n$1\r\n1\r\n"
        );
        assert_eq!(t.run(&["ZMPOP", "2", "a", "b", "MIN"]), "*-1\r\n");
        assert_eq!(t.run(&["ZMPOP", "0", "a", "MIN"]), "-ERR numkeys should be greater than 0\r\n");
        assert_eq!(t.run(&["ZMPOP", "1", "a", "MID"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZMPOP", "1", "a", "MIN", "COUNT", "0"]), "-ERR count should be greater than 0\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["ZMPOP", "1", "a", "MIN"]), "_\r\n");
    }

    #[test]
    fn bzpop_in_all_three_modes() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "b", "1", "x", "2", "y"]);
        assert_eq!(t.run(&["BZPOPMIN", "a", "b", "0"]), "*3\r\n$1\r\nb\r\n$1\r\nx\r\n$1\r\n1\r\n");
        assert_eq!(t.run(&["BZPOPMAX", "a", "b", "0"]), "*3\r\n$1\r\nb\r\n$1\r\ny\r\n$1\r\n2\r\n");
        assert_eq!(t.run(&["BZPOPMIN", "a", "b", "2.5"]), "");
        assert_eq!(t.last_block, blocked(&["a", "b"], Some(t.now_ms + 2500)));
        assert_eq!(t.run(&["BZMPOP", "0", "1", "a", "MIN"]), "");
        assert_eq!(t.last_block, blocked(&["a"], None));
        assert_eq!(t.run(&["BZPOPMIN", "a", "x"]), "-ERR timeout is not a float or out of range\r\n");
        assert_eq!(t.run(&["BZMPOP", "-1", "1", "a", "MIN"]), "-ERR timeout is negative\r\n");
        t.run(&["SET", "s", "v"]);
        assert_eq!(t.run(&["BZPOPMIN", "s", "0"]), WRONGTYPE);
        t.block_mode = BlockMode::Immediate;
        assert_eq!(t.run(&["BZPOPMAX", "a", "0"]), "*-1\r\n");
        assert_eq!(t.run(&["BZMPOP", "0", "1", "a", "MAX"]), "*-1\r\n");
        assert_eq!(t.last_block, None);
        t.block_mode = BlockMode::Serving;
        assert_eq!(t.run(&["BZPOPMIN", "s", "a", "0"]), "", "wrong type while serving: keep waiting");
        assert_eq!(t.last_block, blocked(&["s", "a"], None));
        t.run(&["ZADD", "a", "5", "m"]);
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["BZPOPMIN", "s", "a", "0"]), "*3\r\n$1\r\na\r\n$1\r\nm\r\n,5\r\n");
        assert_eq!(t.run(&["EXISTS", "a"]), ":0\r\n");
    }

    #[test]
    fn pop_events() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "z", "1", "a", "2", "b"]);
        t.events.take();
        t.run(&["ZPOPMIN", "z"]);
        t.run(&["ZPOPMAX", "z"]);
        assert_eq!(t.events.take(), ["z:zpopmin:z@0", "z:zpopmax:z@0", "g:del:z@0"]);
    }
}
