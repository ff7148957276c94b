//! Consumer groups: XGROUP, XREADGROUP, XACK, XPENDING, XCLAIM and XAUTOCLAIM (Valkey's
//! `t_stream.c`).
//!
//! What these commands do to a group reaches replicas and the AOF as Valkey sends it, never
//! as the call itself: each entry delivered or claimed as an idempotent
//! `XCLAIM <key> <group> <consumer> 0 <id> TIME <ms> RETRYCOUNT <n> FORCE JUSTID LASTID <id>`,
//! a moved last-delivered id as `XGROUP SETID ... ENTRIESREAD <n>`, and a consumer that no
//! XCLAIM will create (NOACK) as `XGROUP CREATECONSUMER`.

use hotkv_protocol::{Args, ReplyBuf};

use super::stream::{invalid_id, parse_id, parse_interval_id, parse_strict_id, quiet_change, reply_entry};
use super::stream_info::{has_tombstones_after, no_group};
use super::stream_read::{OwnedEntry, borrow, owned, parse_read_args, reply_nothing};
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::rdb::stream::estimate_entries_read;
use crate::types::stream::{Stream, StreamId};
use crate::types::stream_group::{Group, INVALID_ENTRIES_READ, Nack};

/// Consumer-group command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::container("xgroup", -2, "stream", "5.0.0", "A container for consumer groups commands.", XGROUP),
    CommandSpec::new(
        "xreadgroup",
        -7,
        flags::WRITE | flags::BLOCKING,
        acl::STREAM,
        &[KeySpec {
            flags: kf::RW | kf::UPDATE,
            begin: BeginSearch::Keyword { keyword: "STREAMS", start_from: 4 },
            find: FindKeys::Range { last_key: -1, step: 1, limit: 2 },
        }],
        "stream",
        "5.0.0",
        "Returns new or historical messages from a stream for a consumer in a group. Blocks until a message is available otherwise.",
        "For each stream mentioned: O(M) with M being the number of elements returned. If M is constant (e.g. always asking for the first 10 elements with COUNT), you can consider it O(1). On the other side when XREADGROUP blocks, XADD will pay the O(N) time in order to serve the N clients blocked on the stream getting new data.",
        EngineCmd { run: xreadgroup, plan: LockPlan::Keys },
    )
    .with_getkeys(xreadgroup_keys),
    CommandSpec::new(
        "xack",
        -4,
        flags::WRITE | flags::FAST,
        acl::STREAM,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "stream",
        "5.0.0",
        "Returns the number of messages that were successfully acknowledged by the consumer group member of a stream.",
        "O(1) for each message ID processed.",
        EngineCmd { run: xack, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "xpending",
        -3,
        flags::READONLY,
        acl::STREAM,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "stream",
        "5.0.0",
        "Returns the information and entries from a stream consumer group's pending entries list.",
        "O(N) with N being the number of elements returned, so asking for a small fixed number of entries per call is O(1). O(M), where M is the total number of entries scanned when used with the IDLE filter. When the command returns just the summary and the list of consumers is small, it runs in O(1) time; otherwise, an additional O(N) time for iterating every consumer.",
        EngineCmd { run: xpending, plan: LockPlan::Keys },
    )
    .with_tips(&["nondeterministic_output"]),
    CommandSpec::new(
        "xclaim",
        -6,
        flags::WRITE | flags::FAST,
        acl::STREAM,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "stream",
        "5.0.0",
        "Changes, or acquires, ownership of a message in a consumer group, as if the message was delivered a consumer group member.",
        "O(log N) with N being the number of messages in the PEL of the consumer group.",
        EngineCmd { run: xclaim, plan: LockPlan::Keys },
    )
    .with_tips(&["nondeterministic_output"]),
    CommandSpec::new(
        "xautoclaim",
        -6,
        flags::WRITE | flags::FAST,
        acl::STREAM,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "stream",
        "6.2.0",
        "Changes, or acquires, ownership of messages in a consumer group, as if the messages were delivered to as consumer group member.",
        "O(1) if COUNT is small.",
        EngineCmd { run: xautoclaim, plan: LockPlan::Keys },
    )
    .with_tips(&["nondeterministic_output"]),
];

static XGROUP: &[Spec] = &[
    xgroup_row(
        "create",
        -5,
        flags::WRITE | flags::DENYOOM,
        kf::RW | kf::INSERT,
        "Creates a consumer group.",
        xgroup_create,
    ),
    xgroup_row(
        "setid",
        -5,
        flags::WRITE,
        kf::RW | kf::UPDATE,
        "Sets the last-delivered ID of a consumer group.",
        xgroup_setid,
    ),
    xgroup_row("destroy", 4, flags::WRITE, kf::RW | kf::DELETE, "Destroys a consumer group.", xgroup_destroy),
    xgroup_row(
        "createconsumer",
        5,
        flags::WRITE | flags::DENYOOM,
        kf::RW | kf::INSERT,
        "Creates a consumer in a consumer group.",
        xgroup_createconsumer,
    ),
    xgroup_row(
        "delconsumer",
        5,
        flags::WRITE,
        kf::RW | kf::DELETE,
        "Deletes a consumer from a consumer group.",
        xgroup_delconsumer,
    ),
    CommandSpec::new(
        "help",
        2,
        flags::LOADING | flags::STALE,
        acl::STREAM,
        &[],
        "stream",
        "5.0.0",
        "Returns helpful text about the different subcommands.",
        "O(1)",
        EngineCmd { run: xgroup_help, plan: LockPlan::Keys },
    ),
];

const fn xgroup_row(
    name: &'static str,
    arity: i32,
    fl: u32,
    key: u32,
    summary: &'static str,
    run: super::EngineFn,
) -> Spec {
    const INSERT: &[KeySpec] = &[KeySpec::single(2, kf::RW | kf::INSERT)];
    const UPDATE: &[KeySpec] = &[KeySpec::single(2, kf::RW | kf::UPDATE)];
    const DELETE: &[KeySpec] = &[KeySpec::single(2, kf::RW | kf::DELETE)];
    let specs = match key {
        k if k == kf::RW | kf::INSERT => INSERT,
        k if k == kf::RW | kf::UPDATE => UPDATE,
        _ => DELETE,
    };
    CommandSpec::new(
        name,
        arity,
        fl,
        acl::STREAM,
        specs,
        "stream",
        "5.0.0",
        summary,
        "O(1)",
        EngineCmd { run, plan: LockPlan::Keys },
    )
}

/// XREADGROUP's keys, as XREAD's.
fn xreadgroup_keys(args: &Args<'_>, found: &mut dyn FnMut(usize, u32)) {
    super::stream_read::stream_keys(args, kf::RW | kf::UPDATE, found);
}

/// Records `argv` for the write stream in place of the call (Valkey's `alsoPropagate` with
/// the call's own propagation prevented).
fn also_propagate<A: AsRef<[u8]>>(ctx: &mut Ctx<'_>, argv: &[A]) {
    if ctx.propagating() {
        let db = ctx.db;
        ctx.effects.replace(db, argv);
    }
}

/// `addReplySubcommandSyntaxError` for XGROUP.
fn sub_syntax(args: &Args<'_>) -> CommandError {
    CommandError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try XGROUP HELP.",
        String::from_utf8_lossy(args.get(1))
    ))
}

/// XGROUP's options after the id (MKSTREAM, ENTRIESREAD), as `xgroupCommand` reads them.
fn xgroup_opts(args: &Args<'_>, create: bool, setid: bool) -> Result<(bool, i64), CommandError> {
    let (mut mkstream, mut entries_read) = (false, INVALID_ENTRIES_READ);
    let mut i = 5;
    while i < args.len() {
        let a = args.get(i);
        if create && a.eq_ignore_ascii_case(b"mkstream") {
            mkstream = true;
            i += 1;
        } else if (create || setid) && a.eq_ignore_ascii_case(b"entriesread") && i + 1 < args.len() {
            entries_read = int_arg(args.get(i + 1))?;
            if entries_read < 0 && entries_read != INVALID_ENTRIES_READ {
                return Err(CommandError::err("value for ENTRIESREAD must be positive or -1"));
            }
            i += 2;
        } else {
            return Err(sub_syntax(args));
        }
    }
    Ok((mkstream, entries_read))
}

fn key_must_exist() -> CommandError {
    CommandError::err(
        "The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically.",
    )
}

fn xgroup_create(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (mkstream, entries_read) = xgroup_opts(&args, true, false)?;
    let (key, group) = (args.get(2), args.get(3));
    let exists = match ctx.write(key)? {
        Some(k) => {
            k.stream()?;
            true
        }
        None => false,
    };
    if !exists && !mkstream {
        return Err(key_must_exist());
    }
    if args.len() > 8 {
        return Err(sub_syntax(&args));
    }
    let id = match args.get(4) {
        b"$" => match ctx.write(key)? {
            Some(k) => k.stream()?.last_id,
            None => StreamId::MIN,
        },
        other => parse_strict_id(other, 0)?,
    };
    let before = ctx.stats.dirty;
    if !exists {
        ctx.set(key, NewValue::Object(Object::Stream(Box::default())), Ttl::Clear)?;
    }
    let mut k = ctx.write(key)?.ok_or_else(key_must_exist)?;
    let s = k.stream_mut()?;
    if s.groups.contains_key(group) {
        ctx.stats.dirty = before + u64::from(!exists);
        return Err(CommandError::raw("BUSYGROUP Consumer Group name already exists"));
    }
    s.groups.insert(group.to_vec(), Group::new(id, entries_read));
    out.ok();
    quiet_change(ctx, key, "xgroup-create");
    ctx.stats.dirty = before + 1 + u64::from(!exists);
    Ok(())
}

/// The stream at `key` and its group `group`, with XGROUP's errors.
fn group_of<'k>(s: &'k mut Stream, key: &[u8], group: &[u8]) -> Result<&'k mut Group, CommandError> {
    s.groups.get_mut(group).ok_or_else(|| no_group(group, key))
}

fn xgroup_setid(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (_, entries_read) = xgroup_opts(&args, false, true)?;
    let (key, group) = (args.get(2), args.get(3));
    let Some(mut k) = ctx.write(key)? else { return Err(key_must_exist()) };
    let s = k.stream_mut()?;
    let last = s.last_id;
    group_of(s, key, group)?;
    if args.len() != 5 && args.len() != 7 {
        return Err(sub_syntax(&args));
    }
    let id = match args.get(4) {
        b"$" => last,
        other => parse_id(other, 0)?,
    };
    let g = group_of(s, key, group)?;
    g.last_id = id;
    g.entries_read = entries_read;
    out.ok();
    quiet_change(ctx, key, "xgroup-setid");
    Ok(())
}

fn xgroup_destroy(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, group) = (args.get(2), args.get(3));
    let Some(mut k) = ctx.write(key)? else { return Err(key_must_exist()) };
    let s = k.stream_mut()?;
    if s.groups.remove(group).is_none() {
        out.int(0);
        return Ok(());
    }
    out.int(1);
    quiet_change(ctx, key, "xgroup-destroy");
    // Its blocked XREADGROUP callers run again and fail NOGROUP; a WATCH is not touched.
    ctx.events.key_ready(ctx.db, key);
    Ok(())
}

fn xgroup_createconsumer(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, group, name) = (args.get(2), args.get(3), args.get(4));
    let now = ctx.now_ms;
    let Some(mut k) = ctx.write(key)? else { return Err(key_must_exist()) };
    let g = group_of(k.stream_mut()?, key, group)?;
    let created = g.consumer_or_create(name, now).1;
    out.int(i64::from(created));
    if created {
        quiet_change(ctx, key, "xgroup-createconsumer");
    }
    Ok(())
}

fn xgroup_delconsumer(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, group, name) = (args.get(2), args.get(3), args.get(4));
    let Some(mut k) = ctx.write(key)? else { return Err(key_must_exist()) };
    let g = group_of(k.stream_mut()?, key, group)?;
    match g.delete_consumer(name) {
        Some(pending) => {
            out.int(pending as i64);
            quiet_change(ctx, key, "xgroup-delconsumer");
        }
        None => out.int(0),
    }
    Ok(())
}

fn xgroup_help(_: &mut Ctx<'_>, _: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    super::object::help(
        out,
        "XGROUP",
        &[
            "CREATE <key> <groupname> <id|$> [option]",
            "    Create a new consumer group. Options are:",
            "    * MKSTREAM",
            "      Create the empty stream if it does not exist.",
            "    * ENTRIESREAD entries_read",
            "      Set the group's entries_read counter (internal use).",
            "CREATECONSUMER <key> <groupname> <consumer>",
            "    Create a new consumer in the specified group.",
            "DELCONSUMER <key> <groupname> <consumer>",
            "    Remove the specified consumer.",
            "DESTROY <key> <groupname>",
            "    Remove the specified group.",
            "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
            "    Set the current group ID and entries_read counter.",
        ],
    );
    Ok(())
}

/// One stream's part of an XREADGROUP reply: delivered entries, or history (`None` for an
/// entry deleted since).
enum Served {
    New(Vec<OwnedEntry>),
    History(Vec<(StreamId, Option<OwnedEntry>)>),
}

fn xreadgroup(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    // Whatever it changes goes out as XCLAIM / XGROUP commands, never as itself.
    ctx.effects.suppress();
    let r = parse_read_args(&args, ctx.now_ms, true)?;
    let (group, consumer) = r.group.expect("parse_read_args requires GROUP");
    let now = ctx.now_ms;
    // Check every key, group and id before changing anything, in Valkey's order.
    let mut ids: Vec<Option<StreamId>> = Vec::with_capacity(r.n.min(1024));
    for j in 0..r.n {
        let key = args.get(r.first_key + j);
        let Some(k) = ctx.write(key)? else {
            return Err(nogroup_read(key, group));
        };
        if !k.stream()?.groups.contains_key(group) {
            return Err(nogroup_read(key, group));
        }
        ids.push(match args.get(r.first_key + r.n + j) {
            b"$" => return Err(meaningless('$')),
            b"+" => return Err(meaningless('+')),
            b">" => None,
            other => Some(parse_strict_id(other, 0).map_err(|_| invalid_id())?),
        });
    }
    let mut served: Vec<(&[u8], Served)> = Vec::new();
    let before = ctx.stats.dirty;
    let mut dirty = 0u64;
    for (j, id) in ids.iter().enumerate() {
        let key = args.get(r.first_key + j);
        let mut k = ctx.write(key)?.expect("checked above");
        let s = k.stream_mut()?;
        let top = s.edge_id(false);
        let g_last = s.groups[group].last_id;
        let serve_after = match id {
            Some(_) => None,
            None if top.is_some_and(|t| t > g_last) => Some(g_last),
            None => None,
        };
        // The group leaves the stream while the entries are read, so both can be borrowed.
        let mut g = s.groups.remove(group).expect("checked above");
        let created = g.consumer_or_create(consumer, now).1;
        g.consumers.get_mut(consumer).expect("consumer exists").seen_time = now;
        let mut props: Vec<Vec<Vec<u8>>> = Vec::new();
        if created {
            dirty += 1;
            if r.noack {
                props.push(vec![
                    b"XGROUP".to_vec(),
                    b"CREATECONSUMER".to_vec(),
                    key.to_vec(),
                    group.to_vec(),
                    consumer.to_vec(),
                ]);
            }
        }
        let part = if let Some(after) = *id {
            dirty += 1;
            // Like new entries, history starts after the id given.
            let got = match after.incr() {
                Some(start) => history(s, &mut g, consumer, start, r.count, now),
                None => Vec::new(),
            };
            Some(Served::History(got))
        } else if let Some(after) = serve_after {
            dirty += 1;
            Some(Served::New(deliver(s, &mut g, consumer, after, r.count, r.noack, now, key, group, &mut props)))
        } else {
            None
        };
        s.groups.insert(group.to_vec(), g);
        if created {
            ctx.events.notify('t', "xgroup-createconsumer", key, ctx.db);
        }
        for p in &props {
            also_propagate(ctx, p);
        }
        if let Some(p) = part {
            served.push((key, p));
        }
    }
    // Counted, but no key is touched: Valkey's XREADGROUP signals no modified key.
    ctx.stats.dirty = before + dirty;
    if !served.is_empty() {
        reply_groups(out, &served);
        return Ok(());
    }
    match r.block {
        Some(deadline) if ctx.can_block() => {
            let keys = (0..r.n).map(|j| args.get(r.first_key + j).to_vec()).collect();
            ctx.block_on_with(keys, deadline, None);
        }
        _ => reply_nothing(out),
    }
    Ok(())
}

fn nogroup_read(key: &[u8], group: &[u8]) -> CommandError {
    CommandError::raw(format!(
        "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

fn meaningless(sym: char) -> CommandError {
    CommandError::err(format!(
        "The {sym} ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The {sym} ID would just return an empty result set."
    ))
}

/// Serves `consumer` entries after `after` (`streamReplyWithRange` with a group).
#[allow(clippy::too_many_arguments)]
fn deliver(
    s: &Stream,
    g: &mut Group,
    consumer: &[u8],
    after: StreamId,
    count: usize,
    noack: bool,
    now: i64,
    key: &[u8],
    group: &[u8],
    props: &mut Vec<Vec<Vec<u8>>>,
) -> Vec<OwnedEntry> {
    let Some(start) = after.incr() else { return Vec::new() };
    let mut got = Vec::new();
    let mut moved = false;
    s.range(start, StreamId::MAX, false, |e| {
        if e.id > g.last_id {
            if g.entries_read != INVALID_ENTRIES_READ && !has_tombstones_after(s, e.id) {
                g.entries_read += 1;
            } else if s.entries_added > 0 {
                g.entries_read = estimate_entries_read(s, e.id);
            }
            g.last_id = e.id;
            moved = true;
        }
        got.push(owned(&e));
        if !noack {
            g.assign(e.id, consumer, now, 1);
            g.consumers.get_mut(consumer).expect("consumer exists").active_time = now;
            let n = &g.pel[&e.id];
            props.push(xclaim_argv(key, group, &e.id.to_bytes(), n, g.last_id));
        }
        count == 0 || got.len() < count
    });
    if moved {
        props.push(vec![
            b"XGROUP".to_vec(),
            b"SETID".to_vec(),
            key.to_vec(),
            group.to_vec(),
            g.last_id.to_bytes(),
            b"ENTRIESREAD".to_vec(),
            g.entries_read.to_string().into_bytes(),
        ]);
    }
    got
}

fn xclaim_argv(key: &[u8], group: &[u8], id: &[u8], n: &Nack, last: StreamId) -> Vec<Vec<u8>> {
    [
        &b"XCLAIM"[..],
        key,
        group,
        &n.consumer,
        b"0",
        id,
        b"TIME",
        n.delivery_time.to_string().as_bytes(),
        b"RETRYCOUNT",
        n.delivery_count.to_string().as_bytes(),
        b"FORCE",
        b"JUSTID",
        b"LASTID",
        &last.to_bytes(),
    ]
    .iter()
    .map(|a| a.to_vec())
    .collect()
}

/// The consumer's own pending entries from `start` (`streamReplyWithRangeFromConsumerPEL`):
/// each delivered again (time and count updated), a deleted one reported without fields.
fn history(
    s: &Stream,
    g: &mut Group,
    consumer: &[u8],
    start: StreamId,
    count: usize,
    now: i64,
) -> Vec<(StreamId, Option<OwnedEntry>)> {
    let c = &g.consumers[consumer];
    let ids: Vec<StreamId> = c.pel.range(start..).take(if count == 0 { usize::MAX } else { count }).copied().collect();
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        match s.get(id) {
            Some(e) => {
                if let Some(n) = g.pel.get_mut(&id) {
                    n.delivery_time = now;
                    n.delivery_count += 1;
                }
                out.push((id, Some(owned(&e))));
            }
            None => out.push((id, None)),
        }
    }
    out
}

fn reply_groups(out: &mut ReplyBuf, served: &[(&[u8], Served)]) {
    let resp3 = out.is_resp3();
    if resp3 {
        out.map(served.len());
    } else {
        out.array(served.len());
    }
    for (key, part) in served {
        if !resp3 {
            out.array(2);
        }
        out.bulk(key);
        match part {
            Served::New(entries) => {
                out.array(entries.len());
                for e in entries {
                    reply_entry(out, &borrow(e));
                }
            }
            Served::History(entries) => {
                out.array(entries.len());
                for (id, e) in entries {
                    match e {
                        Some(e) => reply_entry(out, &borrow(e)),
                        None => {
                            out.array(2);
                            out.bulk(id.to_string().as_bytes());
                            out.null_array();
                        }
                    }
                }
            }
        }
    }
}

fn xack(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, group) = (args.get(1), args.get(2));
    let has_group = match ctx.write(key)? {
        Some(k) => k.stream()?.groups.contains_key(group),
        None => false,
    };
    if !has_group {
        out.int(0);
        return Ok(());
    }
    let ids = (3..args.len()).map(|i| parse_strict_id(args.get(i), 0)).collect::<Result<Vec<_>, _>>()?;
    let mut k = ctx.write(key)?.expect("checked above");
    let g = k.stream_mut()?.groups.get_mut(group).expect("checked above");
    let acked = ids.into_iter().filter(|&id| g.ack(id)).count();
    out.int(acked as i64);
    ctx.stats.dirty += acked as u64;
    Ok(())
}

fn xpending(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let argc = args.len();
    let (key, group) = (args.get(1), args.get(2));
    let justinfo = argc == 3;
    if argc != 3 && !(6..=9).contains(&argc) {
        return Err(CommandError::Syntax);
    }
    let (mut start, mut end, mut count, mut minidle, mut consumer) = (StreamId::MIN, StreamId::MAX, 0i64, 0i64, None);
    if argc >= 6 {
        let mut at = 3;
        if args.get(3).eq_ignore_ascii_case(b"idle") {
            minidle = int_arg(args.get(4))?;
            if argc < 8 {
                return Err(CommandError::Syntax);
            }
            at += 2;
        }
        count = int_arg(args.get(at + 2))?.max(0);
        let (s, sx) = parse_interval_id(args.get(at), 0)?;
        start = if sx { s.incr().ok_or_else(|| CommandError::err("invalid start ID for the interval"))? } else { s };
        let (e, ex) = parse_interval_id(args.get(at + 1), u64::MAX)?;
        end = if ex { e.decr().ok_or_else(|| CommandError::err("invalid end ID for the interval"))? } else { e };
        if at + 3 < argc {
            consumer = Some(args.get(at + 3));
        }
    }
    let now = ctx.now_ms;
    let k = ctx.read(key)?;
    let g = match &k {
        Some(k) => k.stream()?.groups.get(group),
        None => None,
    };
    let Some(g) = g else {
        return Err(CommandError::raw(format!(
            "NOGROUP No such key '{}' or consumer group '{}'",
            String::from_utf8_lossy(key),
            String::from_utf8_lossy(group)
        )));
    };
    if justinfo {
        out.array(4);
        out.int(g.pel.len() as i64);
        let (Some(first), Some(last)) = (g.pel.keys().next(), g.pel.keys().next_back()) else {
            out.null();
            out.null();
            out.null_array();
            return Ok(());
        };
        out.bulk(first.to_string().as_bytes());
        out.bulk(last.to_string().as_bytes());
        let with: Vec<_> = g.consumers.values().filter(|c| !c.pel.is_empty()).collect();
        out.array(with.len());
        for c in with {
            out.array(2);
            out.bulk(&c.name);
            out.bulk_int(c.pel.len() as i64);
        }
        return Ok(());
    }
    let ids: Vec<StreamId> = match consumer {
        Some(name) => match g.consumers.get(name) {
            Some(c) => c.pel.range(start..).copied().collect_range_until(end),
            None => {
                out.array(0);
                return Ok(());
            }
        },
        None => g.pel.range(start..).map(|(id, _)| *id).collect_range_until(end),
    };
    let mut rows = Vec::new();
    for id in ids {
        if count == 0 {
            break;
        }
        let n = &g.pel[&id];
        if minidle != 0 && now - n.delivery_time < minidle {
            continue;
        }
        count -= 1;
        rows.push((id, n));
    }
    out.array(rows.len());
    for (id, n) in rows {
        out.array(4);
        out.bulk(id.to_string().as_bytes());
        out.bulk(&n.consumer);
        out.int((now - n.delivery_time).max(0));
        out.int(n.delivery_count as i64);
    }
    Ok(())
}

/// Ids up to `end` (inclusive) of an ascending iterator.
trait UntilEnd {
    fn collect_range_until(self, end: StreamId) -> Vec<StreamId>;
}

impl<I: Iterator<Item = StreamId>> UntilEnd for I {
    fn collect_range_until(self, end: StreamId) -> Vec<StreamId> {
        self.take_while(|id| *id <= end).collect()
    }
}

fn nogroup_claim(key: &[u8], group: &[u8]) -> CommandError {
    CommandError::raw(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

fn xclaim(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    let has_group = match ctx.write(key)? {
        Some(k) => k.stream()?.groups.contains_key(group),
        None => false,
    };
    if !has_group {
        return Err(nogroup_claim(key, group));
    }
    let minidle = hotkv_protocol::parse_i64(args.get(4))
        .ok_or_else(|| CommandError::err("Invalid min-idle-time argument for XCLAIM"))?
        .max(0);
    let mut j = 5;
    let mut ids = Vec::new();
    while j < args.len() {
        match parse_strict_id(args.get(j), 0) {
            Ok(id) => ids.push((id, j)),
            Err(_) => break,
        }
        j += 1;
    }
    let now = ctx.now_ms;
    let (mut force, mut justid, mut retrycount, mut deliverytime, mut last_id) =
        (false, false, -1i64, -1i64, StreamId::MIN);
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        let num = |a: &[u8], what: &str| {
            hotkv_protocol::parse_i64(a)
                .ok_or_else(|| CommandError::err(format!("Invalid {what} option argument for XCLAIM")))
        };
        if opt.eq_ignore_ascii_case(b"force") {
            force = true;
        } else if opt.eq_ignore_ascii_case(b"justid") {
            justid = true;
        } else if opt.eq_ignore_ascii_case(b"idle") && more > 0 {
            j += 1;
            deliverytime = now - num(args.get(j), "IDLE")?;
        } else if opt.eq_ignore_ascii_case(b"time") && more > 0 {
            j += 1;
            deliverytime = num(args.get(j), "TIME")?;
        } else if opt.eq_ignore_ascii_case(b"retrycount") && more > 0 {
            j += 1;
            retrycount = num(args.get(j), "RETRYCOUNT")?;
        } else if opt.eq_ignore_ascii_case(b"lastid") && more > 0 {
            j += 1;
            last_id = parse_strict_id(args.get(j), 0)?;
        } else {
            return Err(CommandError::err(format!("Unrecognized XCLAIM option '{}'", String::from_utf8_lossy(opt))));
        }
        j += 1;
    }
    ctx.effects.suppress();
    if deliverytime == -1 || deliverytime < 0 || deliverytime > now {
        deliverytime = now;
    }
    let mut k = ctx.write(key)?.expect("checked above");
    let s = k.stream_mut()?;
    let present: Vec<bool> = ids.iter().map(|(id, _)| s.contains(*id)).collect();
    let mut entries: Vec<Option<OwnedEntry>> = Vec::new();
    if !justid {
        entries = ids.iter().map(|(id, _)| s.get(*id).map(|e| owned(&e))).collect();
    }
    let g = s.groups.get_mut(group).expect("checked above");
    let mut propagate_last = false;
    if last_id > g.last_id {
        g.last_id = last_id;
        propagate_last = true;
    }
    let created = g.consumer_or_create(consumer, now).1;
    g.consumers.get_mut(consumer).expect("consumer exists").seen_time = now;
    let mut props: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut claimed: Vec<usize> = Vec::new();
    let mut dirty = 0u64;
    for (i, &(id, at)) in ids.iter().enumerate() {
        if !present[i] {
            if let Some(n) = g.pel.get(&id) {
                props.push(xclaim_argv(key, group, args.get(at), n, g.last_id));
                propagate_last = false;
                dirty += 1;
                g.ack(id);
            }
            continue;
        }
        // FORCE makes a pending entry (delivered once, owned by nobody yet) for an id that
        // had none; an owner-less entry is claimed whatever its idle time.
        let base = match g.pel.get(&id) {
            Some(n) if minidle > 0 && now - n.delivery_time < minidle => continue,
            Some(n) => n.delivery_count,
            None if force => 1,
            None => continue,
        };
        let count = if retrycount >= 0 {
            retrycount as u64
        } else if !justid {
            base + 1
        } else {
            base
        };
        g.assign(id, consumer, deliverytime, count);
        g.consumers.get_mut(consumer).expect("consumer exists").active_time = now;
        claimed.push(i);
        props.push(xclaim_argv(key, group, args.get(at), &g.pel[&id], g.last_id));
        propagate_last = false;
        dirty += 1;
    }
    if propagate_last {
        props.push(vec![
            b"XGROUP".to_vec(),
            b"SETID".to_vec(),
            key.to_vec(),
            group.to_vec(),
            g.last_id.to_bytes(),
            b"ENTRIESREAD".to_vec(),
            g.entries_read.to_string().into_bytes(),
        ]);
        dirty += 1;
    }
    out.array(claimed.len());
    for i in claimed {
        if justid {
            out.bulk(ids[i].0.to_string().as_bytes());
        } else if let Some(e) = &entries[i] {
            reply_entry(out, &borrow(e));
        }
    }
    if created {
        ctx.events.notify('t', "xgroup-createconsumer", key, ctx.db);
        dirty += 1;
    }
    for p in &props {
        also_propagate(ctx, p);
    }
    ctx.stats.dirty += dirty;
    Ok(())
}

fn xautoclaim(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, group, consumer) = (args.get(1), args.get(2), args.get(3));
    let minidle = hotkv_protocol::parse_i64(args.get(4))
        .ok_or_else(|| CommandError::err("Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0);
    let (mut start, ex) = parse_interval_id(args.get(5), 0)?;
    if ex {
        start = start.incr().ok_or_else(|| CommandError::err("invalid start ID for the interval"))?;
    }
    let (mut count, mut justid) = (100i64, false);
    let mut j = 6;
    while j < args.len() {
        let more = args.len() - 1 - j;
        let opt = args.get(j);
        if opt.eq_ignore_ascii_case(b"count") && more > 0 {
            let max = i64::MAX / 16;
            count = hotkv_protocol::parse_i64(args.get(j + 1))
                .filter(|n| (1..=max).contains(n))
                .ok_or_else(|| CommandError::err("COUNT must be > 0"))?;
            j += 1;
        } else if opt.eq_ignore_ascii_case(b"justid") {
            justid = true;
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    let has_group = match ctx.write(key)? {
        Some(k) => k.stream()?.groups.contains_key(group),
        None => false,
    };
    if !has_group {
        return Err(nogroup_claim(key, group));
    }
    ctx.effects.suppress();
    let now = ctx.now_ms;
    let mut k = ctx.write(key)?.expect("checked above");
    let s = k.stream_mut()?;
    let mut attempts = count.saturating_mul(10);
    let mut cursor = Some(start);
    let mut eof = false;
    let (mut claimed, mut deleted): (Vec<(StreamId, Option<OwnedEntry>)>, Vec<StreamId>) = (Vec::new(), Vec::new());
    let mut props: Vec<Vec<Vec<u8>>> = Vec::new();
    let created = s.groups.get_mut(group).expect("checked").consumer_or_create(consumer, now).1;
    s.groups.get_mut(group).expect("checked").consumers.get_mut(consumer).expect("exists").seen_time = now;
    while attempts > 0 && count > 0 {
        attempts -= 1;
        let g = &s.groups[group];
        let Some(from) = cursor else {
            eof = true;
            break;
        };
        let Some((&id, n)) = g.pel.range(from..).next() else {
            eof = true;
            break;
        };
        cursor = id.incr();
        let idle_ok = minidle == 0 || now - n.delivery_time >= minidle;
        let entry = s.get(id).map(|e| owned(&e));
        let g = s.groups.get_mut(group).expect("checked");
        let Some(entry) = entry else {
            props.push(xclaim_argv(key, group, &id.to_bytes(), &g.pel[&id], g.last_id));
            g.ack(id);
            deleted.push(id);
            count -= 1;
            continue;
        };
        if !idle_ok {
            continue;
        }
        let n = &g.pel[&id];
        let dc = if justid { n.delivery_count } else { n.delivery_count + 1 };
        g.assign(id, consumer, now, dc);
        g.consumers.get_mut(consumer).expect("exists").active_time = now;
        props.push(xclaim_argv(key, group, &id.to_bytes(), &g.pel[&id], g.last_id));
        claimed.push((id, (!justid).then_some(entry)));
        count -= 1;
    }
    let g = &s.groups[group];
    let next = if eof { None } else { cursor.and_then(|c| g.pel.range(c..).next().map(|(id, _)| *id)) };
    out.array(3);
    out.bulk(next.unwrap_or_default().to_string().as_bytes());
    out.array(claimed.len());
    for (id, e) in &claimed {
        match e {
            Some(e) => reply_entry(out, &borrow(e)),
            None => out.bulk(id.to_string().as_bytes()),
        }
    }
    out.array(deleted.len());
    for id in &deleted {
        out.bulk(id.to_string().as_bytes());
    }
    let dirty = props.len() as u64 + u64::from(created);
    if created {
        ctx.events.notify('t', "xgroup-createconsumer", key, ctx.db);
    }
    for p in &props {
        also_propagate(ctx, p);
    }
    ctx.stats.dirty += dirty;
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::TestKit;

    fn kit() -> TestKit {
        let mut t = TestKit { record: true, ..TestKit::default() };
        t.run(&["XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"]);
        t.run(&["XADD", "s", "1-0", "f", "v"]);
        t.run(&["XADD", "s", "2-0", "f", "v"]);
        t.stream.clear();
        t
    }

    #[test]
    fn xreadgroup_goes_out_as_xclaim_and_setid() {
        let mut t = kit();
        let now = t.now_ms.to_string();
        t.run(&["XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">"]);
        assert_eq!(
            t.stream,
            vec![
                "4294967295: MULTI".to_string(),
                format!("0: XCLAIM s g c 0 1-0 TIME {now} RETRYCOUNT 1 FORCE JUSTID LASTID 1-0"),
                "0: XGROUP SETID s g 1-0 ENTRIESREAD 1".to_string(),
                "4294967295: EXEC".to_string(),
            ]
        );
        t.stream.clear();
        t.run(&["XREADGROUP", "GROUP", "g", "n", "NOACK", "STREAMS", "s", ">"]);
        assert_eq!(
            t.stream,
            vec![
                "4294967295: MULTI".to_string(),
                "0: XGROUP CREATECONSUMER s g n".to_string(),
                "0: XGROUP SETID s g 2-0 ENTRIESREAD 2".to_string(),
                "4294967295: EXEC".to_string(),
            ]
        );
    }

    #[test]
    fn claims_go_out_as_xclaim() {
        let mut t = kit();
        let now = t.now_ms.to_string();
        t.run(&["XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"]);
        t.run(&["XDEL", "s", "1-0"]);
        t.stream.clear();
        let r = t.run(&["XAUTOCLAIM", "s", "g", "d", "0", "0"]);
        assert!(r.starts_with("*3\r\n$3\r\n0-0\r\n"), "{r}");
        assert_eq!(
            t.stream,
            vec![
                "4294967295: MULTI".to_string(),
                format!("0: XCLAIM s g c 0 1-0 TIME {now} RETRYCOUNT 1 FORCE JUSTID LASTID 2-0"),
                format!("0: XCLAIM s g d 0 2-0 TIME {now} RETRYCOUNT 2 FORCE JUSTID LASTID 2-0"),
                "4294967295: EXEC".to_string(),
            ]
        );
        t.stream.clear();
        t.run(&["XCLAIM", "s", "g", "e", "0", "2-0", "JUSTID"]);
        assert_eq!(t.stream, vec![format!("0: XCLAIM s g e 0 2-0 TIME {now} RETRYCOUNT 2 FORCE JUSTID LASTID 2-0")]);
    }
}
