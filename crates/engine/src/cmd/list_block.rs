//! List commands that move elements between lists or wait for them: LMOVE, RPOPLPUSH,
//! LMPOP and the blocking BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP.
//!
//! A blocking command is an ordinary handler. With data it serves and replies at once. With
//! none it either replies as on timeout (inside MULTI: [`Ctx::can_block`] is false) or asks
//! the dispatcher to block the client ([`Ctx::block_on`]) and writes nothing. The server
//! re-runs the handler in [`BlockMode::Serving`] when one of the keys changes; a key that
//! then holds another type counts as "no data yet" instead of WRONGTYPE, since the client
//! asked to wait for a list.

use hotkv_protocol::{Args, ReplyBuf};

use super::list::{create, fill, range_arg, set_dirty};
use super::{EngineCmd, LockPlan, Spec, parse_timeout};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{BlockMode, Ctx};
use crate::error::{CmdResult, CommandError};
use crate::types::list::{End, List};

/// Moving and blocking list command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "lmove",
        5,
        flags::WRITE | flags::DENYOOM,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE), KeySpec::single(2, kf::RW | kf::INSERT)],
        "list",
        "6.2.0",
        "Returns an element after popping it from one list and pushing it to another. Deletes the list if the last element was moved.",
        "O(1)",
        EngineCmd { run: lmove, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "rpoplpush",
        3,
        flags::WRITE | flags::DENYOOM,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE), KeySpec::single(2, kf::RW | kf::INSERT)],
        "list",
        "1.2.0",
        "Returns the last element of a list after removing and pushing it to another list. Deletes the list if the last element was popped.",
        "O(1)",
        EngineCmd { run: rpoplpush, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "lmpop",
        -4,
        flags::WRITE,
        acl::LIST,
        &[KeySpec {
            flags: kf::RW | kf::ACCESS | kf::DELETE,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "list",
        "7.0.0",
        "Returns multiple elements from a list after removing them. Deletes the list if the last element was popped.",
        "O(N+M) where N is the number of provided keys and M is the number of elements returned.",
        EngineCmd { run: lmpop, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "blpop",
        -3,
        flags::WRITE | flags::BLOCKING,
        acl::LIST,
        &[KeySpec::range(1, -2, 1, kf::RW | kf::ACCESS | kf::DELETE)],
        "list",
        "2.0.0",
        "Removes and returns the first element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
        "O(N) where N is the number of provided keys.",
        EngineCmd { run: blpop, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "brpop",
        -3,
        flags::WRITE | flags::BLOCKING,
        acl::LIST,
        &[KeySpec::range(1, -2, 1, kf::RW | kf::ACCESS | kf::DELETE)],
        "list",
        "2.0.0",
        "Removes and returns the last element in a list. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
        "O(N) where N is the number of provided keys.",
        EngineCmd { run: brpop, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "blmove",
        6,
        flags::WRITE | flags::DENYOOM | flags::BLOCKING,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE), KeySpec::single(2, kf::RW | kf::INSERT)],
        "list",
        "6.2.0",
        "Pops an element from a list, pushes it to another list and returns it. Blocks until an element is available otherwise. Deletes the list if the last element was moved.",
        "O(1)",
        EngineCmd { run: blmove, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "brpoplpush",
        4,
        flags::WRITE | flags::DENYOOM | flags::BLOCKING,
        acl::LIST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE), KeySpec::single(2, kf::RW | kf::INSERT)],
        "list",
        "2.2.0",
        "Pops an element from a list, pushes it to another list and returns it. Block until an element is available otherwise. Deletes the list if the last element was popped.",
        "O(1)",
        EngineCmd { run: brpoplpush, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "blmpop",
        -5,
        flags::WRITE | flags::BLOCKING,
        acl::LIST,
        &[KeySpec {
            flags: kf::RW | kf::ACCESS | kf::DELETE,
            begin: BeginSearch::Index(2),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "list",
        "7.0.0",
        "Pops the first element from one of multiple lists. Blocks until an element is available otherwise. Deletes the list if the last element was popped.",
        "O(N+M) where N is the number of provided keys and M is the number of elements returned.",
        EngineCmd { run: blmpop, plan: LockPlan::Keys },
    ),
];

/// What a pop found at one key.
enum Found {
    /// No list there (missing, or of another type while serving a blocked client).
    Nothing,
    /// The popped elements, in pop order.
    Popped(Vec<Vec<u8>>),
}

/// Pops up to `count` elements from the list at `key` (`listPopRangeAndReplyWithKey`'s
/// work, without the reply), deleting the key when emptied and sending the events.
fn pop_from(ctx: &mut Ctx<'_>, key: &[u8], end: End, count: usize) -> Result<Found, CommandError> {
    let fill = fill(ctx);
    let serving = ctx.block_mode == BlockMode::Serving;
    let Some(mut k) = ctx.write(key)? else { return Ok(Found::Nothing) };
    let l = match k.list_mut() {
        Ok(l) => l,
        Err(_) if serving => return Ok(Found::Nothing),
        Err(e) => return Err(e),
    };
    let vals = l.pop_many(end, count, fill);
    let deleted = l.is_empty();
    if deleted {
        drop(k.delete());
    }
    let before = ctx.stats.dirty;
    ctx.changed(key, 'l', if end == End::Head { "lpop" } else { "rpop" }, deleted);
    set_dirty(ctx, before, vals.len());
    Ok(Found::Popped(vals))
}

/// Parses LEFT or RIGHT.
fn parse_end(arg: &[u8]) -> Result<End, CommandError> {
    if arg.eq_ignore_ascii_case(b"left") {
        Ok(End::Head)
    } else if arg.eq_ignore_ascii_case(b"right") {
        Ok(End::Tail)
    } else {
        Err(CommandError::Syntax)
    }
}

fn blpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    bpop(ctx, args, out, End::Head)
}

fn brpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    bpop(ctx, args, out, End::Tail)
}

/// BLPOP/BRPOP: the first key with data, in argument order, gives one element.
fn bpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, end: End) -> CmdResult {
    let last = args.len() - 1;
    let deadline = parse_timeout(args.get(last), ctx.now_ms)?;
    for key in args.iter().take(last).skip(1) {
        if let Found::Popped(vals) = pop_from(ctx, key, end, 1)? {
            out.array(2);
            out.bulk(key);
            out.bulk(&vals[0]);
            propagate_pop(ctx, key, end, 1);
            return Ok(());
        }
    }
    let keys = args.iter().take(last).skip(1).map(<[u8]>::to_vec).collect();
    wait(ctx, out, keys, deadline);
    Ok(())
}

/// A blocking pop goes to the stream as the pop it did (Valkey: BLPOP as LPOP), so a
/// replica never blocks on it.
fn propagate_pop(ctx: &mut Ctx<'_>, key: &[u8], end: End, count: usize) {
    if ctx.propagating() {
        let cmd: &[u8] = if end == End::Head { b"LPOP" } else { b"RPOP" };
        let n = itoa::Buffer::new().format(count).as_bytes().to_vec();
        ctx.propagate_as(&[cmd, key, &n]);
    }
}

/// No data: block, or reply with the timeout's null array when blocking is not allowed.
fn wait(ctx: &mut Ctx<'_>, out: &mut ReplyBuf, keys: Vec<Vec<u8>>, deadline: Option<i64>) {
    if ctx.can_block() {
        ctx.block_on(keys, deadline);
    } else {
        out.null_array();
    }
}

/// The arguments of LMPOP, BLMPOP, ZMPOP and BZMPOP after the timeout:
/// `numkeys key... <side> [COUNT n]`, where the side is LEFT|RIGHT or MIN|MAX.
pub(super) struct MpopArgs<'a, S> {
    pub(super) keys: Vec<&'a [u8]>,
    pub(super) side: S,
    pub(super) count: usize,
}

/// Parses the `*MPOP` arguments from `numkeys_idx` on; `side` reads the side argument.
pub(super) fn parse_mpop<'a, S>(
    args: &Args<'a>,
    numkeys_idx: usize,
    side: impl Fn(&[u8]) -> Result<S, CommandError>,
) -> Result<MpopArgs<'a, S>, CommandError> {
    let numkeys = range_arg(args.get(numkeys_idx), 1, i64::MAX, Some("numkeys should be greater than 0"))?;
    let where_idx = usize::try_from(numkeys)
        .ok()
        .and_then(|n| n.checked_add(numkeys_idx + 1))
        .filter(|&w| w < args.len())
        .ok_or(CommandError::Syntax)?;
    let side = side(args.get(where_idx))?;
    let mut count = None;
    let mut j = where_idx + 1;
    while j < args.len() {
        if count.is_none() && args.get(j).eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            count = Some(range_arg(args.get(j + 1), 1, i64::MAX, Some("count should be greater than 0"))? as usize);
            j += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let keys = (numkeys_idx + 1..where_idx).map(|i| args.get(i)).collect();
    Ok(MpopArgs { keys, side, count: count.unwrap_or(1) })
}

/// Pops from the first non-empty list and replies `[key, [elements]]`; false when none had
/// data.
fn mpop(ctx: &mut Ctx<'_>, out: &mut ReplyBuf, a: &MpopArgs<'_, End>) -> Result<bool, CommandError> {
    for key in &a.keys {
        if let Found::Popped(vals) = pop_from(ctx, key, a.side, a.count)? {
            out.array(2);
            out.bulk(key);
            out.array(vals.len());
            for v in &vals {
                out.bulk(v);
            }
            propagate_pop(ctx, key, a.side, vals.len());
            return Ok(true);
        }
    }
    Ok(false)
}

fn lmpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let a = parse_mpop(&args, 1, parse_end)?;
    if !mpop(ctx, out, &a)? {
        out.null_array();
    }
    Ok(())
}

fn blmpop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let a = parse_mpop(&args, 2, parse_end)?;
    let deadline = parse_timeout(args.get(1), ctx.now_ms)?;
    if !mpop(ctx, out, &a)? {
        wait(ctx, out, a.keys.iter().map(|k| k.to_vec()).collect(), deadline);
    }
    Ok(())
}

fn lmove(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (from, to) = (parse_end(args.get(3))?, parse_end(args.get(4))?);
    if !move_generic(ctx, out, args.get(1), args.get(2), from, to)? {
        out.null();
    }
    Ok(())
}

fn rpoplpush(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    if !move_generic(ctx, out, args.get(1), args.get(2), End::Tail, End::Head)? {
        out.null();
    }
    Ok(())
}

fn blmove(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (from, to) = (parse_end(args.get(3))?, parse_end(args.get(4))?);
    let deadline = parse_timeout(args.get(5), ctx.now_ms)?;
    bmove(ctx, out, args.get(1), args.get(2), (from, to, false), deadline)
}

fn brpoplpush(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let deadline = parse_timeout(args.get(3), ctx.now_ms)?;
    bmove(ctx, out, args.get(1), args.get(2), (End::Tail, End::Head, true), deadline)
}

fn bmove(
    ctx: &mut Ctx<'_>,
    out: &mut ReplyBuf,
    src: &[u8],
    dst: &[u8],
    (from, to, rpoplpush_form): (End, End, bool),
    deadline: Option<i64>,
) -> CmdResult {
    if move_generic(ctx, out, src, dst, from, to)? {
        // As the non-blocking form, so a replica never blocks on it: BRPOPLPUSH as RPOPLPUSH,
        // BLMOVE as LMOVE (Valkey's blmoveGenericCommand).
        if ctx.propagating() {
            if rpoplpush_form {
                ctx.propagate_as(&[b"RPOPLPUSH".as_slice(), src, dst]);
            } else {
                let side = |e: End| if e == End::Head { b"LEFT".as_slice() } else { b"RIGHT".as_slice() };
                ctx.propagate_as(&[b"LMOVE".as_slice(), src, dst, side(from), side(to)]);
            }
        }
    } else {
        if ctx.can_block() {
            ctx.block_on(vec![src.to_vec()], deadline);
        } else if ctx.block_mode == BlockMode::TimedOut {
            // Valkey replies to every timed-out list waiter alike, with a null array.
            out.null_array();
        } else {
            out.null();
        }
    }
    Ok(())
}

/// LMOVE's work (`lmoveGenericCommand`): pops from `src` and pushes onto `dst`, replying
/// with the element; false (and no reply) when `src` has no list. A `dst` of another type
/// is WRONGTYPE, checked before anything changes. `src == dst` rotates the list in place.
fn move_generic(
    ctx: &mut Ctx<'_>,
    out: &mut ReplyBuf,
    src: &[u8],
    dst: &[u8],
    from: End,
    to: End,
) -> Result<bool, CommandError> {
    let fill = fill(ctx);
    let serving = ctx.block_mode == BlockMode::Serving;
    // A move is one change in Valkey's count, however many keys it creates or deletes.
    let before = ctx.stats.dirty;
    let Some(mut k) = ctx.write(src)? else { return Ok(false) };
    match k.list() {
        Ok(_) => {}
        Err(_) if serving => return Ok(false),
        Err(e) => return Err(e),
    }
    let push_event = if to == End::Head { "lpush" } else { "rpush" };
    let pop_event = if from == End::Head { "lpop" } else { "rpop" };
    if src == dst {
        let l = k.list_mut()?;
        let v = l.pop(from).unwrap_or_default();
        l.push(&[&v], to, fill);
        out.bulk(&v);
        ctx.changed(dst, 'l', push_event, false);
        ctx.changed(src, 'l', pop_event, false);
        set_dirty(ctx, before, 1);
        return Ok(true);
    }
    if let Some(d) = ctx.write(dst)? {
        d.list()?;
    }
    let mut k = ctx.write(src)?.ok_or(CommandError::NoSuchKey)?;
    let l = k.list_mut()?;
    let v = l.pop(from).unwrap_or_default();
    l.try_shrink(fill);
    let deleted = l.is_empty();
    if deleted {
        drop(k.delete());
    }
    match ctx.write(dst)? {
        Some(mut d) => d.list_mut()?.push(&[&v], to, fill),
        None => create(ctx, dst, List::from_elements([&v[..]], fill))?,
    }
    out.bulk(&v);
    ctx.changed(dst, 'l', push_event, false);
    ctx.changed(src, 'l', pop_event, deleted);
    set_dirty(ctx, before, 1);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use crate::testkit::arr;
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
    fn lmove_and_rpoplpush() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "a", "1", "2", "3"]);
        assert_eq!(t.run(&["LMOVE", "a", "b", "LEFT", "RIGHT"]), "$1\r\n1\r\n");
        assert_eq!(t.run(&["LMOVE", "a", "b", "right", "left"]), "$1\r\n3\r\n");
        assert_eq!(t.run(&["LRANGE", "b", "0", "-1"]), arr(&["3", "1"]));
        assert_eq!(t.run(&["RPOPLPUSH", "a", "b"]), "$1\r\n2\r\n");
        assert_eq!(t.run(&["EXISTS", "a"]), ":0\r\n");
        assert_eq!(t.run(&["LRANGE", "b", "0", "-1"]), arr(&["2", "3", "1"]));
        assert_eq!(t.run(&["RPOPLPUSH", "a", "b"]), "$-1\r\n");
        assert_eq!(t.run(&["LMOVE", "a", "b", "UP", "LEFT"]), "-ERR syntax error\r\n");
        // Rotation of a list onto itself, even a one-element one.
        assert_eq!(t.run(&["RPOPLPUSH", "b", "b"]), "$1\r\n1\r\n");
        assert_eq!(t.run(&["LRANGE", "b", "0", "-1"]), arr(&["1", "2", "3"]));
        t.run(&["RPUSH", "one", "x"]);
        t.events.take();
        assert_eq!(t.run(&["LMOVE", "one", "one", "LEFT", "RIGHT"]), "$1\r\nx\r\n");
        assert_eq!(t.events.take(), ["l:rpush:one@0", "l:lpop:one@0"]);
        assert_eq!(t.run(&["LRANGE", "one", "0", "-1"]), arr(&["x"]));
        t.run(&["SET", "s", "v"]);
        assert_eq!(t.run(&["LMOVE", "b", "s", "LEFT", "LEFT"]), WRONGTYPE);
        assert_eq!(t.run(&["LLEN", "b"]), ":3\r\n", "nothing popped on a wrong destination");
        assert_eq!(t.run(&["LMOVE", "s", "b", "LEFT", "LEFT"]), WRONGTYPE);
        assert_eq!(t.run(&["LMOVE", "nope", "s", "LEFT", "LEFT"]), "$-1\r\n", "no source: nothing checked");
        t.run(&["RPUSH", "last", "z"]);
        t.events.take();
        t.run(&["LMOVE", "last", "new", "LEFT", "LEFT"]);
        assert_eq!(t.events.take(), ["n:new:new@0", "l:lpush:new@0", "l:lpop:last@0", "g:del:last@0"]);
    }

    #[test]
    fn lmpop() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "b", "1", "2", "3"]);
        assert_eq!(t.run(&["LMPOP", "2", "a", "b", "LEFT"]), "*2\r\n$1\r\nb\r\n*1\r\n$1\r\n1\r\n");
        assert_eq!(
            t.run(&["LMPOP", "2", "a", "b", "RIGHT", "COUNT", "10"]),
            "*2\r\n$1\r\nb\r\n*2\r\n$1\r\n3\r\n$1\r\n2\r\n"
        );
        assert_eq!(t.run(&["LMPOP", "2", "a", "b", "RIGHT"]), "*-1\r\n");
        assert_eq!(t.run(&["LMPOP", "0", "a", "LEFT"]), "-ERR numkeys should be greater than 0\r\n");
        assert_eq!(t.run(&["LMPOP", "1", "a", "UP"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["LMPOP", "1", "a", "LEFT", "COUNT", "0"]), "-ERR count should be greater than 0\r\n");
        assert_eq!(t.run(&["LMPOP", "1", "a", "LEFT", "COUNT", "1", "COUNT", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["LMPOP", "1", "a", "LEFT", "FOO"]), "-ERR syntax error\r\n");
        t.run(&["SET", "s", "v"]);
        assert_eq!(t.run(&["LMPOP", "2", "a", "s", "LEFT"]), WRONGTYPE);
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["LMPOP", "1", "a", "LEFT"]), "_\r\n");
    }

    #[test]
    fn blpop_serves_at_once_when_data_exists() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "b", "x", "y"]);
        assert_eq!(t.run(&["BLPOP", "a", "b", "0"]), arr(&["b", "x"]));
        assert_eq!(t.run(&["BRPOP", "a", "b", "1.5"]), arr(&["b", "y"]));
        assert_eq!(t.run(&["EXISTS", "b"]), ":0\r\n");
        assert_eq!(t.last_block, None);
        assert_eq!(t.run(&["BLPOP", "a", "x"]), "-ERR timeout is not a float or out of range\r\n");
        assert_eq!(t.run(&["BLPOP", "a", "-1"]), "-ERR timeout is negative\r\n");
    }

    #[test]
    fn blpop_blocks_in_normal_mode() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["BLPOP", "a", "b", "1.5"]), "");
        assert_eq!(t.last_block, blocked(&["a", "b"], Some(t.now_ms + 1500)));
        assert_eq!(t.run(&["BRPOP", "a", "0"]), "");
        assert_eq!(t.last_block, blocked(&["a"], None));
        t.run(&["SET", "s", "v"]);
        assert_eq!(t.run(&["BLPOP", "s", "0"]), WRONGTYPE, "wrong type is an error at once");
    }

    #[test]
    fn blocking_pops_inside_multi_reply_as_on_timeout() {
        let mut t = TestKit { block_mode: BlockMode::Immediate, ..TestKit::default() };
        assert_eq!(t.run(&["BLPOP", "a", "0"]), "*-1\r\n");
        assert_eq!(t.run(&["BLMPOP", "0", "1", "a", "LEFT"]), "*-1\r\n");
        assert_eq!(t.run(&["BLMOVE", "a", "b", "LEFT", "LEFT", "0"]), "$-1\r\n");
        assert_eq!(t.run(&["BRPOPLPUSH", "a", "b", "0"]), "$-1\r\n");
        assert_eq!(t.last_block, None);
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["BRPOP", "a", "0"]), "_\r\n");
        t.run(&["RPUSH", "a", "v"]);
        assert_eq!(t.run(&["BRPOP", "a", "0"]), "*2\r\n$1\r\na\r\n$1\r\nv\r\n");
    }

    #[test]
    fn a_timed_out_blocking_move_replies_a_null_array() {
        let mut t = TestKit { block_mode: BlockMode::TimedOut, ..TestKit::default() };
        assert_eq!(t.run(&["BLMOVE", "a", "b", "LEFT", "LEFT", "0"]), "*-1\r\n");
        assert_eq!(t.run(&["BRPOPLPUSH", "a", "b", "0"]), "*-1\r\n");
        assert_eq!(t.run(&["BLPOP", "a", "0"]), "*-1\r\n");
        assert_eq!(t.run(&["BLMPOP", "0", "1", "a", "LEFT"]), "*-1\r\n");
        assert_eq!(t.last_block, None);
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["BLMOVE", "a", "b", "LEFT", "LEFT", "0"]), "_\r\n");
        // Data that came in the meantime is still served.
        t.run(&["RPUSH", "a", "v"]);
        assert_eq!(t.run(&["BRPOPLPUSH", "a", "b", "0"]), "$1\r\nv\r\n");
    }

    #[test]
    fn serving_mode_waits_past_wrong_types_and_serves_data() {
        let mut t = TestKit { block_mode: BlockMode::Serving, ..TestKit::default() };
        t.run(&["SET", "a", "string"]);
        assert_eq!(t.run(&["BLPOP", "a", "b", "0"]), "");
        assert_eq!(t.last_block, blocked(&["a", "b"], None));
        assert_eq!(t.run(&["BLMOVE", "a", "d", "LEFT", "LEFT", "0"]), "");
        assert_eq!(t.last_block, blocked(&["a"], None));
        assert_eq!(t.run(&["BLMPOP", "0", "2", "a", "b", "LEFT", "COUNT", "2"]), "");
        assert_eq!(t.last_block, blocked(&["a", "b"], None));
        t.run(&["RPUSH", "b", "1", "2", "3"]);
        assert_eq!(
            t.run(&["BLMPOP", "0", "2", "a", "b", "LEFT", "COUNT", "2"]),
            "*2\r\n$1\r\nb\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n"
        );
        assert_eq!(t.last_block, None);
        assert_eq!(t.run(&["BRPOPLPUSH", "b", "d", "0"]), "$1\r\n3\r\n");
        assert_eq!(t.run(&["LRANGE", "d", "0", "-1"]), arr(&["3"]));
        assert_eq!(t.run(&["EXISTS", "b"]), ":0\r\n");
    }

    #[test]
    fn blmove_and_blmpop_argument_errors() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["BLMOVE", "a", "b", "LEFT", "UP", "0"]), "-ERR syntax error\r\n");
        assert_eq!(
            t.run(&["BLMOVE", "a", "b", "LEFT", "LEFT", "x"]),
            "-ERR timeout is not a float or out of range\r\n"
        );
        assert_eq!(t.run(&["BLMPOP", "x", "1", "a", "LEFT"]), "-ERR timeout is not a float or out of range\r\n");
        assert_eq!(t.run(&["BLMPOP", "0", "0", "a", "LEFT"]), "-ERR numkeys should be greater than 0\r\n");
        // list.tcl "BLPOP: timeout value out of range": a hex timeout is a (huge) number.
        assert_eq!(t.run(&["BLPOP", "a", "0x7FFFFFFFFFFFFF"]), "-ERR timeout is out of range\r\n");
        assert_eq!(t.run(&["BLMPOP", "x", "1", "a", "UP"]), "-ERR syntax error\r\n", "options before the timeout");
        t.run(&["RPUSH", "a", "1"]);
        t.run(&["SET", "s", "v"]);
        assert_eq!(t.run(&["BLMOVE", "a", "s", "LEFT", "LEFT", "0"]), WRONGTYPE);
        assert_eq!(t.run(&["BLMOVE", "s", "a", "LEFT", "LEFT", "0"]), WRONGTYPE);
        assert_eq!(t.run(&["BLMOVE", "a", "b", "LEFT", "RIGHT", "0"]), "$1\r\n1\r\n");
        assert_eq!(t.run(&["BLMOVE", "a", "b", "LEFT", "RIGHT", "0.01"]), "");
        assert_eq!(t.last_block, blocked(&["a"], Some(t.now_ms + 10)));
    }
}
