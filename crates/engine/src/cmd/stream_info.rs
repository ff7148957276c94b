//! XINFO STREAM, GROUPS, CONSUMERS and HELP (Valkey's `xinfoCommand`), and the consumer-group
//! lag both XINFO forms report.

use hotkv_protocol::{Args, ReplyBuf};

use super::stream::{collect_range, reply_entries, reply_entry};
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::rdb::stream::estimate_entries_read;
use crate::types::stream::{Stream, StreamId};
use crate::types::stream_group::{Group, INVALID_ENTRIES_READ};

/// XINFO, as a container of its subcommand rows.
pub static COMMANDS: &[Spec] = &[CommandSpec::container(
    "xinfo",
    -2,
    "stream",
    "5.0.0",
    "A container for stream introspection commands.",
    SUBCOMMANDS,
)];

static SUBCOMMANDS: &[Spec] = &[
    CommandSpec::new(
        "stream",
        -3,
        flags::READONLY,
        acl::STREAM,
        &[KeySpec::single(2, kf::RO)],
        "stream",
        "5.0.0",
        "Returns information about a stream.",
        "O(1)",
        EngineCmd { run: xinfo_stream, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "groups",
        3,
        flags::READONLY,
        acl::STREAM,
        &[KeySpec::single(2, kf::RO)],
        "stream",
        "5.0.0",
        "Returns a list of the consumer groups of a stream.",
        "O(1)",
        EngineCmd { run: xinfo_groups, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "consumers",
        4,
        flags::READONLY,
        acl::STREAM,
        &[KeySpec::single(2, kf::RO)],
        "stream",
        "5.0.0",
        "Returns a list of the consumers in a consumer group.",
        "O(1)",
        EngineCmd { run: xinfo_consumers, plan: LockPlan::Keys },
    )
    .with_tips(&["nondeterministic_output"]),
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
        EngineCmd { run: xinfo_help, plan: LockPlan::Keys },
    ),
];

/// `-NOGROUP No such consumer group '<g>' for key name '<k>'`.
pub(crate) fn no_group(group: &[u8], key: &[u8]) -> CommandError {
    CommandError::raw(format!(
        "NOGROUP No such consumer group '{}' for key name '{}'",
        String::from_utf8_lossy(group),
        String::from_utf8_lossy(key)
    ))
}

/// `streamRangeHasTombstones` from `start` to the end.
pub(crate) fn has_tombstones_after(s: &Stream, start: StreamId) -> bool {
    if s.is_empty() || s.max_deleted.is_zero() || s.first_id > s.max_deleted {
        return false;
    }
    start <= s.max_deleted
}

/// The group's lag (`streamReplyWithCGLag`), `None` when it cannot be known.
pub(crate) fn lag(s: &Stream, g: &Group) -> Option<i64> {
    if s.entries_added == 0 {
        return Some(0);
    }
    if g.entries_read != INVALID_ENTRIES_READ && !has_tombstones_after(s, g.last_id) {
        return Some(s.entries_added as i64 - g.entries_read);
    }
    let read = estimate_entries_read(s, g.last_id);
    (read != INVALID_ENTRIES_READ).then(|| s.entries_added as i64 - read)
}

fn opt_int(out: &mut ReplyBuf, v: Option<i64>) {
    match v {
        Some(n) => out.int(n),
        None => out.null(),
    }
}

fn entries_read(g: &Group) -> Option<i64> {
    (g.entries_read != INVALID_ENTRIES_READ).then_some(g.entries_read)
}

/// `addReplySubcommandSyntaxError`.
fn sub_syntax(args: &Args<'_>) -> CommandError {
    CommandError::err(format!(
        "unknown subcommand or wrong number of arguments for '{}'. Try XINFO HELP.",
        String::from_utf8_lossy(args.get(1))
    ))
}

fn xinfo_stream(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let optc = args.len() - 3;
    let mut full = false;
    let mut count: i64 = 10;
    if optc != 0 {
        if (optc != 1 && optc != 3) || !args.get(3).eq_ignore_ascii_case(b"full") {
            return Err(sub_syntax(&args));
        }
        full = true;
        if optc == 3 {
            if !args.get(4).eq_ignore_ascii_case(b"count") {
                return Err(sub_syntax(&args));
            }
            count = int_arg(args.get(5))?;
            if count < 0 {
                count = 10;
            }
        }
    }
    let Some(k) = ctx.read(args.get(2))? else { return Err(CommandError::NoSuchKey) };
    let s = k.stream()?;
    out.map(if full { 9 } else { 10 });
    out.bulk(b"length");
    out.int(s.len() as i64);
    out.bulk(b"radix-tree-keys");
    out.int(s.node_count() as i64);
    out.bulk(b"radix-tree-nodes");
    let keys: Vec<[u8; 16]> = s.nodes().map(|(id, _)| id.to_be_bytes()).collect();
    out.int(rax_nodes(&keys) as i64);
    for (name, id) in [("last-generated-id", s.last_id), ("max-deleted-entry-id", s.max_deleted)] {
        out.bulk(name.as_bytes());
        out.bulk(id.to_string().as_bytes());
    }
    out.bulk(b"entries-added");
    out.int(s.entries_added as i64);
    out.bulk(b"recorded-first-entry-id");
    out.bulk(s.first_id.to_string().as_bytes());
    if !full {
        out.bulk(b"groups");
        out.int(s.groups.len() as i64);
        for (name, rev) in [("first-entry", false), ("last-entry", true)] {
            out.bulk(name.as_bytes());
            match collect_range(s, StreamId::MIN, StreamId::MAX, rev, 1).first() {
                Some(e) => reply_entry(out, e),
                None => out.null(),
            }
        }
        return Ok(());
    }
    let count = usize::try_from(count).unwrap_or(usize::MAX);
    out.bulk(b"entries");
    reply_entries(out, &collect_range(s, StreamId::MIN, StreamId::MAX, false, count));
    out.bulk(b"groups");
    out.array(s.groups.len());
    for (name, g) in &s.groups {
        out.map(7);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"last-delivered-id");
        out.bulk(g.last_id.to_string().as_bytes());
        out.bulk(b"entries-read");
        opt_int(out, entries_read(g));
        out.bulk(b"lag");
        opt_int(out, lag(s, g));
        out.bulk(b"pel-count");
        out.int(g.pel.len() as i64);
        out.bulk(b"pending");
        let take = if count == 0 { g.pel.len() } else { count.min(g.pel.len()) };
        out.array(take);
        for (id, n) in g.pel.iter().take(take) {
            out.array(4);
            out.bulk(id.to_string().as_bytes());
            out.bulk(&n.consumer);
            out.int(n.delivery_time);
            out.int(n.delivery_count as i64);
        }
        out.bulk(b"consumers");
        out.array(g.consumers.len());
        for c in g.consumers.values() {
            out.map(5);
            out.bulk(b"name");
            out.bulk(&c.name);
            out.bulk(b"seen-time");
            out.int(c.seen_time);
            out.bulk(b"active-time");
            out.int(c.active_time);
            out.bulk(b"pel-count");
            out.int(c.pel.len() as i64);
            out.bulk(b"pending");
            let take = if count == 0 { c.pel.len() } else { count.min(c.pel.len()) };
            out.array(take);
            for id in c.pel.iter().take(take) {
                let n = &g.pel[id];
                out.array(3);
                out.bulk(id.to_string().as_bytes());
                out.int(n.delivery_time);
                out.int(n.delivery_count as i64);
            }
        }
    }
    Ok(())
}

/// The nodes of the radix tree Valkey would hold for these node keys (16-byte big-endian
/// master ids), as insertions build it: a compressed node for each run of bytes the keys
/// share, a branching node where they part, a leaf per key, and the head. Deletions can leave
/// Valkey's tree less compact than this, so after trims it is what a fresh load would show.
fn rax_nodes(keys: &[[u8; 16]]) -> usize {
    fn count(keys: &[[u8; 16]], d: usize) -> usize {
        if d == 16 {
            return 1;
        }
        let (first, last) = (&keys[0], &keys[keys.len() - 1]);
        let shared = (d..16).take_while(|&i| first[i] == last[i]).count();
        if shared > 0 {
            return 1 + count(keys, d + shared);
        }
        let mut n = 1;
        let mut start = 0;
        while start < keys.len() {
            let b = keys[start][d];
            let end = start + keys[start..].iter().take_while(|k| k[d] == b).count();
            n += count(&keys[start..end], d + 1);
            start = end;
        }
        n
    }
    if keys.is_empty() { 1 } else { count(keys, 0) }
}

fn xinfo_groups(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(k) = ctx.read(args.get(2))? else { return Err(CommandError::NoSuchKey) };
    let s = k.stream()?;
    out.array(s.groups.len());
    for (name, g) in &s.groups {
        out.map(6);
        out.bulk(b"name");
        out.bulk(name);
        out.bulk(b"consumers");
        out.int(g.consumers.len() as i64);
        out.bulk(b"pending");
        out.int(g.pel.len() as i64);
        out.bulk(b"last-delivered-id");
        out.bulk(g.last_id.to_string().as_bytes());
        out.bulk(b"entries-read");
        opt_int(out, entries_read(g));
        out.bulk(b"lag");
        opt_int(out, lag(s, g));
    }
    Ok(())
}

fn xinfo_consumers(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let now = ctx.now_ms;
    let (key, group) = (args.get(2), args.get(3));
    let Some(k) = ctx.read(key)? else { return Err(CommandError::NoSuchKey) };
    let s = k.stream()?;
    let Some(g) = s.groups.get(group) else { return Err(no_group(group, key)) };
    out.array(g.consumers.len());
    for c in g.consumers.values() {
        let inactive = if c.active_time != -1 { now - c.active_time } else { -1 };
        out.map(4);
        out.bulk(b"name");
        out.bulk(&c.name);
        out.bulk(b"pending");
        out.int(c.pel.len() as i64);
        out.bulk(b"idle");
        out.int((now - c.seen_time).max(0));
        out.bulk(b"inactive");
        out.int(inactive);
    }
    Ok(())
}

fn xinfo_help(_: &mut Ctx<'_>, _: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    super::object::help(
        out,
        "XINFO",
        &[
            "CONSUMERS <key> <groupname>",
            "    Show consumers of <groupname>.",
            "GROUPS <key>",
            "    Show the stream consumer groups.",
            "STREAM <key> [FULL [COUNT <count>]",
            "    Show information about the stream.",
        ],
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::rax_nodes;
    use crate::types::stream::StreamId;

    /// Counts redis-server 7.0 reported for nodes made one entry each.
    #[test]
    fn radix_tree_nodes_as_valkey_counts_them() {
        let ids = [(1, 1), (2, 1), (3, 1), (300, 1), (70000, 1), (70000, 2)];
        let want = [2, 6, 8, 11, 14, 16];
        let mut keys = Vec::new();
        for (&(ms, seq), want) in ids.iter().zip(want) {
            keys.push(StreamId::new(ms, seq).to_be_bytes());
            assert_eq!(rax_nodes(&keys), want, "{ms}-{seq}");
        }
        assert_eq!(rax_nodes(&[]), 1);
    }
}
