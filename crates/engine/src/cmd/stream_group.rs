//! Consumer groups: XGROUP and XREADGROUP (Valkey's `t_stream.c`); the pending entries
//! commands XACK, XPENDING, XCLAIM and XAUTOCLAIM are in `stream_claim.rs`.
//!
//! What these commands do to a group reaches replicas and the AOF as Valkey sends it, never
//! as the call itself: each entry delivered or claimed as an idempotent
//! `XCLAIM <key> <group> <consumer> 0 <id> TIME <ms> RETRYCOUNT <n> FORCE JUSTID LASTID <id>`,
//! a moved last-delivered id as `XGROUP SETID ... ENTRIESREAD <n>`, and a consumer that no
//! XCLAIM will create (NOACK) as `XGROUP CREATECONSUMER`.

use hotkv_protocol::{Args, ReplyBuf};

use super::stream::{invalid_id, parse_id, parse_strict_id, quiet_change, reply_entry};
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
pub(super) fn also_propagate<A: AsRef<[u8]>>(ctx: &mut Ctx<'_>, argv: &[A]) {
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
        props.push(setid_argv(key, group, g));
    }
    got
}

/// `XGROUP SETID key group <last id> ENTRIESREAD <n>`: how a read that moved a group's last id
/// reaches replicas (with the XCLAIMs of what it delivered).
pub(super) fn setid_argv(key: &[u8], group: &[u8], g: &Group) -> Vec<Vec<u8>> {
    vec![
        b"XGROUP".to_vec(),
        b"SETID".to_vec(),
        key.to_vec(),
        group.to_vec(),
        g.last_id.to_bytes(),
        b"ENTRIESREAD".to_vec(),
        g.entries_read.to_string().into_bytes(),
    ]
}

pub(super) fn xclaim_argv(key: &[u8], group: &[u8], id: &[u8], n: &Nack, last: StreamId) -> Vec<Vec<u8>> {
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

#[cfg(test)]
pub(super) mod tests {
    use crate::testkit::TestKit;

    /// A recording kit with group `g` on stream `s` holding 1-0 and 2-0, nothing recorded yet.
    pub(in crate::cmd) fn kit() -> TestKit {
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
}
