//! A consumer group's pending entries: XACK, XPENDING, XCLAIM and XAUTOCLAIM (Valkey's
//! `t_stream.c`). Claims reach replicas and the AOF as the idempotent XCLAIM form
//! `stream_group.rs` describes, never as themselves.

use hotkv_protocol::{Args, ReplyBuf};

use super::stream::{parse_interval_id, parse_strict_id, reply_entry};
use super::stream_group::{also_propagate, setid_argv, xclaim_argv};
use super::stream_read::{OwnedEntry, borrow, owned};
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::types::stream::StreamId;

/// Pending-entries command rows.
pub static COMMANDS: &[Spec] = &[
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
        props.push(setid_argv(key, group, g));
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
    use super::super::stream_group::tests::kit;

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
