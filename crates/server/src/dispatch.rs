//! THE dispatch function: every command of every client goes through [`dispatch`], which runs
//! the cross-cutting checks in a fixed order, each a small named step, roughly as Valkey's
//! `processCommand` does: look up → arity → authentication → memory → execute → account.

use std::time::Instant;

use hotkv_engine::cmd::{EngineCmd, plan_locks};
use hotkv_engine::command::flags;
use hotkv_engine::keyspace::LockId;
use hotkv_engine::{CommandError, Ctx, EngineConfig, NoEvents};
use hotkv_protocol::{Args, ReplyBuf};

use crate::evict;
use crate::registry::{Command, Flow, Lookup};
use crate::server::{Runtime, Server, unix_us};
use crate::session::{ReplyMode, Session};

/// What stays fixed for a batch of pipelined commands, loaded once per batch.
pub struct Batch<'a> {
    /// The server.
    pub srv: &'a Server,
    /// Engine settings snapshot.
    pub engine: &'a EngineConfig,
    /// Runtime values snapshot.
    pub rt: &'a Runtime,
    /// Command time, unix milliseconds.
    pub now_ms: i64,
}

/// Reusable vectors, so dispatch allocates nothing per command.
#[derive(Default)]
pub struct Scratch {
    keys: Vec<usize>,
    locks: Vec<LockId>,
}

/// Runs one command, writing its reply into `out`.
pub fn dispatch(b: &Batch<'_>, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf, scratch: &mut Scratch) -> Flow {
    let mark = out.len();
    let mode = advance_reply_mode(sess);
    let flow = match run_checked(b, sess, args, out, scratch) {
        Ok(flow) => flow,
        Err(e) => {
            out.truncate(mark);
            reply_error(b.srv, out, &e);
            Flow::Continue
        }
    };
    // CLIENT REPLY ON answers even when replies were off or skipped, as in Valkey.
    if matches!(mode, ReplyMode::Off | ReplyMode::Skip) && sess.reply_mode != ReplyMode::On {
        out.truncate(mark);
    }
    // The skipped command may itself have changed the mode (CLIENT REPLY OFF/ON).
    if mode == ReplyMode::Skip && sess.reply_mode == ReplyMode::Skip {
        sess.reply_mode = ReplyMode::On;
    }
    flow
}

/// Looks the command up and runs it; errors before execution count as rejected calls.
fn run_checked(
    b: &Batch<'_>,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
) -> Result<Flow, CommandError> {
    let reg = &b.srv.registry;
    let lookup = reg.lookup(&args);
    let Lookup::Found(id) = lookup else {
        return Err(reg.unknown_error(&lookup, &args));
    };
    let cmd = reg.get(id);
    let rejected = |e: CommandError| {
        b.srv.stats.reject(Some(id));
        e
    };
    check_arity(cmd, &args).map_err(rejected)?;
    check_auth(cmd, sess).map_err(rejected)?;
    check_memory(b, cmd, sess).map_err(rejected)?;
    Ok(execute(b, sess, cmd, args, out, scratch))
}

fn check_arity(cmd: &Command, args: &Args<'_>) -> Result<(), CommandError> {
    let arity = cmd.spec.arity();
    let argc = args.len() as i32;
    if (arity > 0 && arity != argc) || argc < -arity {
        return Err(CommandError::WrongArity(cmd.full_name.clone()));
    }
    Ok(())
}

fn check_auth(cmd: &Command, sess: &Session) -> Result<(), CommandError> {
    if !sess.authenticated && cmd.spec.flags() & flags::NO_AUTH == 0 {
        return Err(CommandError::NoAuth);
    }
    Ok(())
}

/// Over `maxmemory`, try to evict; a command that may grow memory is then refused with OOM
/// if the server is still over the limit (Valkey's `performEvictions` + `CMD_DENYOOM`).
fn check_memory(b: &Batch<'_>, cmd: &Command, sess: &Session) -> Result<(), CommandError> {
    if b.engine.maxmemory == 0 {
        return Ok(());
    }
    let over = evict::perform(b.srv, b.engine, b.now_ms);
    if over && cmd.spec.flags() & flags::DENYOOM != 0 && !sess.has_flag(crate::session::flag::NO_EVICT) {
        return Err(CommandError::OutOfMemory);
    }
    Ok(())
}

/// Runs the handler and does the accounting: commandstats, errorstats, slow log, latency
/// monitor and the MONITOR feed.
fn execute(
    b: &Batch<'_>,
    sess: &mut Session,
    cmd: &Command,
    args: Args<'_>,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
) -> Flow {
    let mark = out.len();
    let start = Instant::now();
    let result = match cmd.spec.engine() {
        Some(ecmd) => run_engine(b, sess, cmd, ecmd, args, out, scratch).map(|()| Flow::Continue),
        None => match cmd.spec.server() {
            Some(f) => f(b.srv, sess, args, out),
            None => Err(CommandError::err("internal error: command without handler")),
        },
    };
    let nanos = start.elapsed().as_nanos() as u64;
    let failed = result.is_err();
    let flow = match result {
        Ok(flow) => flow,
        Err(e) => {
            out.truncate(mark);
            reply_error(b.srv, out, &e);
            Flow::Continue
        }
    };
    b.srv.stats.call(cmd.id, nanos, failed, b.rt.latency_tracking);
    sess.info.commands.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    sess.info.last_cmd.store(cmd.id as u32 + 1, std::sync::atomic::Ordering::Relaxed);
    record_slow(b, sess, cmd, &args, nanos);
    if b.srv.monitors.load(std::sync::atomic::Ordering::Relaxed) > 0
        && cmd.spec.flags() & (flags::SKIP_MONITOR | flags::ADMIN) == 0
    {
        feed_monitors(b.srv, sess, &args);
    }
    flow
}

fn run_engine(
    b: &Batch<'_>,
    sess: &mut Session,
    cmd: &Command,
    ecmd: &EngineCmd,
    args: Args<'_>,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
) -> Result<(), CommandError> {
    let Some(spec) = (match cmd.spec {
        crate::registry::Spec::Engine(s) => Some(s),
        crate::registry::Spec::Server(_) => None,
    }) else {
        return Err(CommandError::err("internal error: engine command without engine row"));
    };
    plan_locks(spec, &args, sess.db, b.srv.ks.databases(), &mut scratch.keys, &mut scratch.locks)?;
    let locks = b.srv.ks.lock(&scratch.locks);
    let no_touch = sess.has_flag(crate::session::flag::NO_TOUCH);
    let mut ctx = Ctx::new(&b.srv.ks, sess.db, b.now_ms, b.engine, &mut sess.local, no_touch, &NoEvents, locks);
    let r = (ecmd.run)(&mut ctx, args, out);
    let db = ctx.db;
    drop(ctx);
    if db != sess.db {
        sess.db = db;
        sess.info.db.store(db as u32, std::sync::atomic::Ordering::Relaxed);
    }
    r
}

/// Writes an error reply and counts it in errorstats.
pub fn reply_error(srv: &Server, out: &mut ReplyBuf, e: &CommandError) {
    let msg = e.message();
    out.error(&msg);
    srv.stats.error(msg.split(' ').next().unwrap_or("ERR"));
}

/// CLIENT REPLY SKIP drops the reply of the command after it: that command runs in `Skip`.
fn advance_reply_mode(sess: &mut Session) -> ReplyMode {
    if sess.reply_mode == ReplyMode::SkipNext {
        sess.reply_mode = ReplyMode::Skip;
    }
    sess.reply_mode
}

fn record_slow(b: &Batch<'_>, sess: &Session, cmd: &Command, args: &Args<'_>, nanos: u64) {
    let micros = nanos / 1000;
    let threshold = b.rt.slowlog_threshold;
    if threshold >= 0 && micros as i64 >= threshold && cmd.spec.flags() & flags::SKIP_SLOWLOG == 0 {
        let name = sess.info.name.lock().clone();
        b.srv.slowlog.lock().push(args, b.now_ms / 1000, micros, sess.info.addr.to_string(), name, b.rt.slowlog_max_len);
    }
    let ms = micros / 1000;
    if b.rt.latency_threshold > 0 && ms >= b.rt.latency_threshold {
        let event = if cmd.spec.flags() & flags::FAST != 0 { "fast-command" } else { "command" };
        b.srv.latency.lock().add(event, b.now_ms / 1000, ms);
    }
}

/// Sends `+<time> [<db> <addr>] "arg" ...` to MONITOR clients.
fn feed_monitors(srv: &Server, sess: &Session, args: &Args<'_>) {
    let us = unix_us();
    let mut line = format!("{}.{:06} [{} {}]", us / 1_000_000, us % 1_000_000, sess.db, sess.info.addr);
    for a in args.iter() {
        line.push(' ');
        repr(&mut line, a);
    }
    let _ = srv.monitor_tx.send(line.into());
}

/// Valkey's `sdscatrepr`: a double-quoted, escaped representation.
pub fn repr(out: &mut String, s: &[u8]) {
    out.push('"');
    for &c in s {
        match c {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.push(c as char),
            c => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out.push('"');
}
