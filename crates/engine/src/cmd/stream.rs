//! Stream commands on entries: XADD, XRANGE, XREVRANGE, XLEN, XDEL, XTRIM, XSETID and XINFO
//! (Valkey's `t_stream.c`). Consumer groups are in `stream_group.rs`, XREAD and XREADGROUP in
//! `stream_read.rs`.
//!
//! Every change sends Valkey's keyspace event (class `t`). Unlike the other collections, a
//! stream stays when its last entry goes: its last id and groups are state of their own.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::types::stream::{Entry, Stream, StreamId, Trim};

/// Stream entry command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "xadd",
        -5,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::STREAM,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "stream",
        "5.0.0",
        "Appends a new message to a stream. Creates the key if it doesn't exist.",
        "O(1) when adding a new entry, O(N) when trimming where N being the number of entries evicted.",
        EngineCmd { run: xadd, plan: LockPlan::Keys },
    )
    .with_tips(&["nondeterministic_output"]),
    CommandSpec::new(
        "xrange",
        -4,
        flags::READONLY,
        acl::STREAM,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "stream",
        "5.0.0",
        "Returns the messages from a stream within a range of IDs.",
        "O(N) with N being the number of elements being returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).",
        EngineCmd { run: xrange, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "xrevrange",
        -4,
        flags::READONLY,
        acl::STREAM,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "stream",
        "5.0.0",
        "Returns the messages from a stream within a range of IDs in reverse order.",
        "O(N) with N being the number of elements returned. If N is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1).",
        EngineCmd { run: xrevrange, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "xlen",
        2,
        flags::READONLY | flags::FAST,
        acl::STREAM,
        &[KeySpec::single(1, kf::RO)],
        "stream",
        "5.0.0",
        "Return the number of messages in a stream.",
        "O(1)",
        EngineCmd { run: xlen, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "xdel",
        -3,
        flags::WRITE | flags::FAST,
        acl::STREAM,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "stream",
        "5.0.0",
        "Returns the number of messages after removing them from a stream.",
        "O(1) for each single item to delete in the stream, regardless of the stream size.",
        EngineCmd { run: xdel, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "xtrim",
        -4,
        flags::WRITE,
        acl::STREAM,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "stream",
        "5.0.0",
        "Deletes messages from the beginning of a stream.",
        "O(N), with N being the number of evicted entries. Constant times are very small however, since entries are organized in macro nodes containing multiple entries that can be released with a single deallocation.",
        EngineCmd { run: xtrim, plan: LockPlan::Keys },
    )
    .with_tips(&["nondeterministic_output"]),
    CommandSpec::new(
        "xsetid",
        -3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::STREAM,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "stream",
        "5.0.0",
        "An internal command for replicating stream values.",
        "O(1)",
        EngineCmd { run: xsetid, plan: LockPlan::Keys },
    ),
];

/// Sends a stream keyspace event and counts one change, without touching the key for WATCH or
/// blocked readers: Valkey signals a modified key only for XADD, XDEL, XTRIM and a stream
/// made by XGROUP CREATE MKSTREAM, never for XSETID or the consumer-group bookkeeping.
pub(crate) fn quiet_change(ctx: &mut Ctx<'_>, key: &[u8], event: &str) {
    ctx.events.notify('t', event, key, ctx.db);
    ctx.stats.dirty += 1;
}

/// `Invalid stream ID specified as stream command argument`.
pub(crate) fn invalid_id() -> CommandError {
    CommandError::err("Invalid stream ID specified as stream command argument")
}

/// Parses an id as `streamGenericParseIDOrReply`: `-` and `+` unless `strict`, `<ms>` with
/// `missing_seq`, `<ms>-<seq>`, and `<ms>-*` (seq `None`) when `allow_star_seq`.
pub(crate) fn parse_id_ext(
    arg: &[u8],
    missing_seq: u64,
    strict: bool,
    allow_star_seq: bool,
) -> Result<(StreamId, bool), CommandError> {
    if arg.len() > 127 {
        return Err(invalid_id());
    }
    match arg {
        b"-" if !strict => return Ok((StreamId::MIN, true)),
        b"+" if !strict => return Ok((StreamId::MAX, true)),
        _ => {}
    }
    let (ms_part, seq_part) = match arg.iter().position(|&b| b == b'-') {
        Some(i) => (&arg[..i], Some(&arg[i + 1..])),
        None => (arg, None),
    };
    let ms = parse_u64(ms_part).ok_or_else(invalid_id)?;
    match seq_part {
        None => Ok((StreamId::new(ms, missing_seq), true)),
        Some(b"*") if allow_star_seq => Ok((StreamId::new(ms, 0), false)),
        Some(s) => Ok((StreamId::new(ms, parse_u64(s).ok_or_else(invalid_id)?), true)),
    }
}

/// `streamParseIDOrReply`: `-` and `+` allowed.
pub(crate) fn parse_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, CommandError> {
    parse_id_ext(arg, missing_seq, false, false).map(|(id, _)| id)
}

/// `streamParseStrictIDOrReply`: `-` and `+` refused.
pub(crate) fn parse_strict_id(arg: &[u8], missing_seq: u64) -> Result<StreamId, CommandError> {
    parse_id_ext(arg, missing_seq, true, false).map(|(id, _)| id)
}

/// `streamParseIntervalIDOrReply` with the exclusive `(` form: the id and whether it excludes.
pub(crate) fn parse_interval_id(arg: &[u8], missing_seq: u64) -> Result<(StreamId, bool), CommandError> {
    if arg.len() > 1 && arg[0] == b'(' {
        return Ok((parse_strict_id(&arg[1..], missing_seq)?, true));
    }
    Ok((parse_id(arg, missing_seq)?, false))
}

/// `string2ull`: digits only (a leading `+` or `-` is refused), no overflow.
fn parse_u64(b: &[u8]) -> Option<u64> {
    if b.is_empty() || b.len() > 20 || !b.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(b).ok()?.parse().ok()
}

/// Writes one entry: `[id, [field, value, ...]]`.
pub(crate) fn reply_entry(out: &mut ReplyBuf, e: &Entry<'_>) {
    out.array(2);
    out.bulk(e.id.to_string().as_bytes());
    out.array(e.fields.len() * 2);
    for (f, v) in &e.fields {
        f.reply(out);
        v.reply(out);
    }
}

/// The entries from `start` to `end` (reversed when `rev`), at most `count` (0: all).
pub(crate) fn collect_range(s: &Stream, start: StreamId, end: StreamId, rev: bool, count: usize) -> Vec<Entry<'_>> {
    let mut v = Vec::new();
    s.range(start, end, rev, |e| {
        v.push(e);
        count == 0 || v.len() < count
    });
    v
}

/// Writes the entries as an array.
pub(crate) fn reply_entries(out: &mut ReplyBuf, entries: &[Entry<'_>]) {
    out.array(entries.len());
    for e in entries {
        reply_entry(out, e);
    }
}

/// Trim options of XADD and XTRIM (`streamAddTrimArgs`).
#[derive(Debug, Clone, Copy, Default)]
struct TrimArgs {
    trim: Option<Trim>,
    approx: bool,
    /// Index of the MAXLEN/MINID value, for the rewrite.
    arg_idx: usize,
    limit: u64,
}

/// XADD's parsed options.
struct AddArgs {
    trim: TrimArgs,
    nomkstream: bool,
    /// The id given and whether its seq was given; `None` for `*`.
    id: Option<(StreamId, bool)>,
    /// Index of the id argument.
    id_idx: usize,
}

/// `streamParseAddOrTrimArgsOrReply`.
fn parse_add_or_trim(ctx: &Ctx<'_>, args: &Args<'_>, xadd: bool) -> Result<AddArgs, CommandError> {
    let mut t = TrimArgs::default();
    let mut nomkstream = false;
    let mut id = None;
    let mut limit_given = false;
    let argc = args.len();
    let mut i = 2;
    while i < argc {
        let more = argc - 1 - i;
        let opt = args.get(i);
        if xadd && opt == b"*" {
            break;
        } else if (opt.eq_ignore_ascii_case(b"maxlen") || opt.eq_ignore_ascii_case(b"minid")) && more > 0 {
            let maxlen = opt.eq_ignore_ascii_case(b"maxlen");
            if t.trim.is_some() {
                return Err(CommandError::err(
                    "syntax error, MAXLEN and MINID options at the same time are not compatible",
                ));
            }
            t.approx = false;
            let next = args.get(i + 1);
            if more >= 2 && next == b"~" {
                t.approx = true;
                i += 1;
            } else if more >= 2 && next == b"=" {
                i += 1;
            }
            let v = args.get(i + 1);
            t.trim = Some(if maxlen {
                let n = int_arg(v)?;
                if n < 0 {
                    return Err(CommandError::err("The MAXLEN argument must be >= 0."));
                }
                Trim::MaxLen(n as u64)
            } else {
                Trim::MinId(parse_strict_id(v, 0)?)
            });
            i += 1;
            t.arg_idx = i;
        } else if opt.eq_ignore_ascii_case(b"limit") && more > 0 {
            let n = int_arg(args.get(i + 1))?;
            if n < 0 {
                return Err(CommandError::err("The LIMIT argument must be >= 0."));
            }
            t.limit = n as u64;
            limit_given = true;
            i += 1;
        } else if xadd && opt.eq_ignore_ascii_case(b"nomkstream") {
            nomkstream = true;
        } else if xadd {
            id = Some(parse_id_ext(opt, 0, true, true)?);
            break;
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    if t.limit != 0 && t.trim.is_none() {
        return Err(CommandError::err("syntax error, LIMIT cannot be used without specifying a trimming strategy"));
    }
    if !xadd && t.trim.is_none() {
        return Err(CommandError::err("syntax error, XTRIM must be called with a trimming strategy"));
    }
    if ctx.cfg.from_primary {
        // The primary rewrote `~` to `=` with the outcome: trim exactly to it.
        t.limit = 0;
    } else if limit_given {
        if !t.approx {
            return Err(CommandError::err("syntax error, LIMIT cannot be used without the special ~ option"));
        }
    } else if t.approx {
        let l = 100i64.saturating_mul(ctx.cfg.stream_node_max_entries as i64);
        t.limit = if l <= 0 { 10_000 } else { l.min(1_000_000) as u64 };
    } else {
        t.limit = 0;
    }
    Ok(AddArgs { trim: t, nomkstream, id, id_idx: i })
}

/// Trims after XADD or for XTRIM: how many entries went and, when the trim was approximate,
/// the exact value to send to the write stream in place of `~ <arg>` (`= <outcome>`), so
/// replicas and the AOF trim to the same place (`streamRewriteTrimArgument`).
fn trim_exact(s: &mut Stream, t: &TrimArgs) -> (u64, Option<Vec<u8>>) {
    let Some(trim) = t.trim else { return (0, None) };
    let removed = s.trim(trim, t.approx, t.limit);
    let exact = t.approx.then(|| match trim {
        Trim::MaxLen(_) => s.len().to_string().into_bytes(),
        Trim::MinId(_) => s.edge_id(true).unwrap_or_default().to_bytes(),
    });
    (removed, exact)
}

/// The call's arguments with an approximate trim made exact (see [`trim_exact`]).
fn rewritten(args: &Args<'_>, t: &TrimArgs, exact: Option<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut argv: Vec<Vec<u8>> = args.iter().map(<[u8]>::to_vec).collect();
    if let Some(v) = exact {
        argv[t.arg_idx - 1] = b"=".to_vec();
        argv[t.arg_idx] = v;
    }
    argv
}

/// The id XADD gives the new entry (`streamAppendItem`'s rules), or its error.
fn next_id(s: &Stream, given: Option<(StreamId, bool)>, now_ms: i64) -> Result<StreamId, CommandError> {
    let too_small =
        || CommandError::err("The ID specified in XADD is equal or smaller than the target stream top item");
    let id = match given {
        Some((id, true)) => id,
        Some((id, false)) if id.ms == s.last_id.ms => {
            if s.last_id.seq == u64::MAX {
                return Err(too_small());
            }
            StreamId::new(id.ms, s.last_id.seq + 1)
        }
        Some((id, false)) => id,
        None => {
            let now = now_ms.max(0) as u64;
            if now > s.last_id.ms { StreamId::new(now, 0) } else { s.last_id.incr().unwrap_or(StreamId::MAX) }
        }
    };
    if id <= s.last_id {
        return Err(too_small());
    }
    Ok(id)
}

fn xadd(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let a = parse_add_or_trim(ctx, &args, true)?;
    let field_pos = a.id_idx + 1;
    let nargs = args.len().saturating_sub(field_pos);
    if nargs < 2 || nargs % 2 == 1 {
        return Err(CommandError::WrongArity("xadd".into()));
    }
    if let Some((id, true)) = a.id
        && id.is_zero()
    {
        return Err(CommandError::err("The ID specified in XADD must be greater than 0-0"));
    }
    let key = args.get(1);
    let pairs: Vec<(&[u8], &[u8])> =
        (field_pos..args.len()).step_by(2).map(|i| (args.get(i), args.get(i + 1))).collect();
    let total: usize = pairs.iter().map(|(f, v)| f.len() + v.len()).sum();
    let (node_bytes, node_entries) = (ctx.cfg.stream_node_max_bytes, ctx.cfg.stream_node_max_entries);
    let now = ctx.now_ms;
    let before = ctx.stats.dirty;
    let (id, (trimmed, exact)) = match ctx.write(key)? {
        Some(mut k) => {
            let s = k.stream_mut()?;
            let id = add_to(s, &a, now, total, &pairs, node_bytes, node_entries)?;
            (id, trim_exact(s, &a.trim))
        }
        None if a.nomkstream => {
            out.null();
            return Ok(());
        }
        None => {
            let mut s = Stream::new();
            let id = add_to(&mut s, &a, now, total, &pairs, node_bytes, node_entries)?;
            let trimmed = trim_exact(&mut s, &a.trim);
            ctx.set(key, NewValue::Object(Object::Stream(Box::new(s))), Ttl::Clear)?;
            (id, trimmed)
        }
    };
    let id_text = id.to_bytes();
    out.bulk(&id_text);
    ctx.changed(key, 't', "xadd", false);
    if trimmed > 0 {
        ctx.events.notify('t', "xtrim", key, ctx.db);
    }
    ctx.stats.dirty = before + 1;
    // A generated id, or an approximate trim, would not replay to the same stream.
    if ctx.propagating() && (a.id.is_none_or(|(_, seq_given)| !seq_given) || exact.is_some()) {
        let mut argv = rewritten(&args, &a.trim, exact);
        argv[a.id_idx] = id_text;
        ctx.propagate_as(&argv);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn add_to(
    s: &mut Stream,
    a: &AddArgs,
    now: i64,
    total: usize,
    pairs: &[(&[u8], &[u8])],
    node_bytes: usize,
    node_entries: usize,
) -> Result<StreamId, CommandError> {
    if s.last_id == StreamId::MAX {
        return Err(CommandError::err("The stream has exhausted the last possible ID, unable to add more items"));
    }
    let id = next_id(s, a.id, now)?;
    if total > 1 << 30 {
        return Err(CommandError::err("Elements are too large to be stored"));
    }
    s.append(id, pairs, node_bytes, node_entries);
    Ok(id)
}

fn xrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, args, out, false)
}

fn xrevrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, args, out, true)
}

/// XRANGE and XREVRANGE (`xrangeGenericCommand`).
fn range_generic(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, rev: bool) -> CmdResult {
    let (start_arg, end_arg) = if rev { (args.get(3), args.get(2)) } else { (args.get(2), args.get(3)) };
    let (mut start, start_ex) = parse_interval_id(start_arg, 0)?;
    if start_ex {
        start = start.incr().ok_or_else(|| CommandError::err("invalid start ID for the interval"))?;
    }
    let (mut end, end_ex) = parse_interval_id(end_arg, u64::MAX)?;
    if end_ex {
        end = end.decr().ok_or_else(|| CommandError::err("invalid end ID for the interval"))?;
    }
    let mut count: i64 = -1;
    let mut j = 4;
    while j < args.len() {
        if args.get(j).eq_ignore_ascii_case(b"count") && j + 1 < args.len() {
            count = int_arg(args.get(j + 1))?.max(0);
            j += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let Some(k) = ctx.read(args.get(1))? else {
        out.array(0);
        return Ok(());
    };
    let s = k.stream()?;
    if count == 0 {
        out.null_array();
        return Ok(());
    }
    let count = if count < 0 { 0 } else { usize::try_from(count).unwrap_or(usize::MAX) };
    reply_entries(out, &collect_range(s, start, end, rev, count));
    Ok(())
}

fn xlen(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let n = match ctx.read(args.get(1))? {
        Some(k) => k.stream()?.len(),
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn xdel(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let s = k.stream_mut()?;
    let ids = (2..args.len()).map(|i| parse_strict_id(args.get(i), 0)).collect::<Result<Vec<_>, _>>()?;
    let mut deleted = 0u64;
    let mut first = false;
    for id in ids {
        if s.delete(id) {
            first |= id == s.first_id;
            if id > s.max_deleted {
                s.max_deleted = id;
            }
            deleted += 1;
        }
    }
    if deleted > 0 && (s.is_empty() || first) {
        s.refresh_first();
    }
    out.int(deleted as i64);
    if deleted > 0 {
        let before = ctx.stats.dirty;
        ctx.changed(key, 't', "xdel", false);
        ctx.stats.dirty = before + deleted;
    }
    Ok(())
}

fn xtrim(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let a = parse_add_or_trim(ctx, &args, false)?;
    let key = args.get(1);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let s = k.stream_mut()?;
    let (removed, exact) = trim_exact(s, &a.trim);
    out.int(removed as i64);
    if removed > 0 {
        let before = ctx.stats.dirty;
        ctx.changed(key, 't', "xtrim", false);
        ctx.stats.dirty = before + removed;
        if exact.is_some() && ctx.propagating() {
            let argv = rewritten(&args, &a.trim, exact);
            ctx.propagate_as(&argv);
        }
    }
    Ok(())
}

fn xsetid(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let id = parse_strict_id(args.get(2), 0)?;
    let mut entries_added: Option<u64> = None;
    let mut max_xdel = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let opt = args.get(i);
        if opt.eq_ignore_ascii_case(b"entriesadded") && more > 0 {
            let n = int_arg(args.get(i + 1))?;
            if n < 0 {
                return Err(CommandError::err("entries_added must be positive"));
            }
            entries_added = Some(n as u64);
        } else if opt.eq_ignore_ascii_case(b"maxdeletedid") && more > 0 {
            max_xdel = parse_strict_id(args.get(i + 1), 0)?;
            if id < max_xdel {
                return Err(CommandError::err(
                    "The ID specified in XSETID is smaller than the provided max_deleted_entry_id",
                ));
            }
        } else {
            return Err(CommandError::Syntax);
        }
        i += 2;
    }
    let key = args.get(1);
    let Some(mut k) = ctx.write(key)? else { return Err(CommandError::NoSuchKey) };
    let s = k.stream_mut()?;
    if id < s.max_deleted {
        return Err(CommandError::err("The ID specified in XSETID is smaller than current max_deleted_entry_id"));
    }
    if !s.is_empty() {
        let top = s.edge_id(false).unwrap_or_default();
        if id < top {
            return Err(CommandError::err("The ID specified in XSETID is smaller than the target stream top item"));
        }
        if entries_added.is_some_and(|n| s.len() > n) {
            return Err(CommandError::err(
                "The entries_added specified in XSETID is smaller than the target stream length",
            ));
        }
    }
    s.last_id = id;
    if let Some(n) = entries_added {
        s.entries_added = n;
    }
    if !max_xdel.is_zero() {
        s.max_deleted = max_xdel;
    }
    out.ok();
    quiet_change(ctx, key, "xsetid");
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::TestKit;

    #[test]
    fn xadd_ids_and_errors() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["XADD", "s", "1-1", "a", "1"]), "$3\r\n1-1\r\n");
        assert_eq!(t.run(&["XADD", "s", "1-*", "a", "2"]), "$3\r\n1-2\r\n");
        assert_eq!(
            t.run(&["XADD", "s", "1-1", "a", "2"]),
            "-ERR The ID specified in XADD is equal or smaller than the target stream top item\r\n"
        );
        assert_eq!(
            t.run(&["XADD", "s", "0-0", "a", "2"]),
            "-ERR The ID specified in XADD must be greater than 0-0\r\n"
        );
        assert_eq!(
            t.run(&["XADD", "s", "x-1", "a", "2"]),
            "-ERR Invalid stream ID specified as stream command argument\r\n"
        );
        assert_eq!(t.run(&["XADD", "s", "2-0", "a"]), "-ERR wrong number of arguments for 'xadd' command\r\n");
        assert_eq!(t.run(&["XADD", "n", "NOMKSTREAM", "*", "a", "1"]), "$-1\r\n");
        assert_eq!(t.run(&["XLEN", "s"]), ":2\r\n");
        assert_eq!(t.run(&["TYPE", "s"]), "+stream\r\n");
        assert_eq!(
            t.run(&["XRANGE", "s", "-", "+", "COUNT", "1"]),
            "*1\r\n*2\r\n$3\r\n1-1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
        );
        assert_eq!(t.run(&["XREVRANGE", "s", "+", "(1-2"]), "*0\r\n");
        assert_eq!(t.run(&["XDEL", "s", "1-1", "5-5"]), ":1\r\n");
        assert_eq!(
            t.run(&["XSETID", "s", "1-0"]),
            "-ERR The ID specified in XSETID is smaller than current max_deleted_entry_id\r\n"
        );
        assert_eq!(t.run(&["XTRIM", "s", "MAXLEN", "0"]), ":1\r\n");
        assert_eq!(t.run(&["XLEN", "s"]), ":0\r\n");
        assert_eq!(t.run(&["EXISTS", "s"]), ":1\r\n");
    }

    #[test]
    fn approximate_trim_propagates_exact() {
        let mut t = TestKit { record: true, ..TestKit::default() };
        for _ in 0..250 {
            t.run(&["XADD", "s", "*", "f", "v"]);
        }
        t.stream.clear();
        let r = t.run(&["XADD", "s", "MAXLEN", "~", "10", "*", "f", "v"]);
        let id = r.split("\r\n").nth(1).unwrap().to_string();
        assert_eq!(t.run(&["XLEN", "s"]), ":51\r\n");
        assert_eq!(t.stream, vec![format!("0: XADD s MAXLEN = 51 {id} f v")]);
    }
}
