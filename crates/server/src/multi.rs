//! EXEC: runs a queued transaction atomically with respect to every other client, on every
//! core, by taking the union of its commands' slot locks once, in order, for the whole
//! transaction (a transaction with a whole-keyspace command takes every slot of the
//! databases involved). Queued blocking commands do not block (`BlockMode::Immediate`).

use quanta::Instant;
use std::sync::atomic::Ordering;

use hotkv_engine::cmd::{LockPlan, plan_locks};
use hotkv_engine::keyspace::lock_id;
use hotkv_engine::slot::{SLOTS, key_slot};
use hotkv_engine::{BlockMode, CommandError, Ctx};
use hotkv_protocol::{Args, ReplyBuf};

use crate::dispatch::{Batch, Scratch, account, engine_spec, reply_error, serve_blocked};
use crate::events::CmdEvents;
use crate::registry::{Command, Flow};
use crate::session::{MultiState, Session, flag};

/// EXEC.
pub fn exec(
    b: &Batch<'_>,
    sess: &mut Session,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
) -> Result<Flow, CommandError> {
    let Some(multi) = sess.multi.take() else {
        return Err(CommandError::err("EXEC without MULTI"));
    };
    sess.set_flag(flag::MULTI, false);
    let dirty = sess.watch_dirty.load(Ordering::Relaxed) || watched_key_expired(b, sess);
    unwatch_all(b, sess);
    if multi.aborted {
        return Err(CommandError::raw("EXECABORT Transaction discarded because of previous errors."));
    }
    if dirty {
        out.null_array();
        return Ok(Flow::Continue);
    }
    run(b, sess, multi, out, scratch);
    Ok(Flow::Continue)
}

/// Drops every WATCH of the client.
fn unwatch_all(b: &Batch<'_>, sess: &mut Session) {
    crate::cmd::multi::forget_watches(b.srv, sess);
}

/// A watched key that expired since WATCH (it was not expired then) aborts the transaction
/// even if nobody deleted it yet, as Valkey's `isWatchedKeyExpired`.
fn watched_key_expired(b: &Batch<'_>, sess: &Session) -> bool {
    sess.watched.iter().any(|(db, key, stale)| {
        if stale.load(Ordering::Relaxed) {
            return false;
        }
        let table = b.srv.ks.db(*db).slot(key_slot(key)).lock();
        table
            .find(key, hotkv_engine::hash::key_hash(key))
            .is_some_and(|i| table.at(i).expire().is_some_and(|when| b.now_ms > when))
    })
}

/// The lock ids of the whole transaction, following SELECTs inside it.
fn plan(b: &Batch<'_>, sess: &Session, multi: &MultiState, scratch: &mut Scratch, ids: &mut Vec<u32>) {
    let dbs = b.srv.ks.databases();
    let mut db = sess.db;
    let mut keys = Vec::new();
    let mut one = Vec::new();
    for (id, argv) in &multi.queue {
        let cmd = b.srv.registry.get(*id);
        let (Some(spec), Some(ecmd)) = (engine_spec(cmd), cmd.spec.engine()) else { continue };
        let (flat, spans) = flatten(argv);
        let args = Args::from_parts(&flat, &spans);
        if *id == b.srv.known.select {
            if let Some(n) = args.opt(1).and_then(hotkv_protocol::parse_i64).and_then(|n| usize::try_from(n).ok())
                && n < dbs
            {
                db = n;
            }
            continue;
        }
        if let LockPlan::PerSlot = ecmd.plan {
            // A whole-keyspace command: every slot of its database, or of all of them.
            let all = matches!(spec.name, "flushall" | "swapdb");
            let range = if all { 0..dbs } else { db..db + 1 };
            for d in range {
                ids.extend((0..SLOTS as u16).map(|s| lock_id(d, s)));
            }
            continue;
        }
        if plan_locks(spec, &args, db, dbs, &mut keys, &mut one).is_ok() {
            ids.extend_from_slice(&one);
        }
    }
    let _ = scratch;
    ids.sort_unstable();
    ids.dedup();
}

fn flatten(argv: &[Vec<u8>]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut flat = Vec::with_capacity(argv.iter().map(Vec::len).sum());
    let mut spans = Vec::with_capacity(argv.len());
    for a in argv {
        spans.push((flat.len(), flat.len() + a.len()));
        flat.extend_from_slice(a);
    }
    (flat, spans)
}

fn run(b: &Batch<'_>, sess: &mut Session, multi: MultiState, out: &mut ReplyBuf, scratch: &mut Scratch) {
    let mut ids = Vec::new();
    plan(b, sess, &multi, scratch, &mut ids);
    let events = CmdEvents::new(b.srv, b.rt.notify);
    let locks = b.srv.ks.lock(&ids);
    let no_touch = sess.has_flag(flag::NO_TOUCH);
    let mut local = std::mem::take(&mut sess.local);
    let mut held = None;
    let cfg = crate::dispatch::dataset_config(b, &mut held);
    let mut ctx = Ctx::new(&b.srv.ks, sess.db, b.now_ms, cfg, &mut local, no_touch, &events, locks);
    ctx.block_mode = BlockMode::Immediate;
    out.array(multi.queue.len());
    for (id, argv) in &multi.queue {
        let cmd = b.srv.registry.get(*id);
        let (flat, spans) = flatten(argv);
        let args = Args::from_parts(&flat, &spans);
        let mark = out.len();
        let start = Instant::now();
        let result = match cmd.spec.engine() {
            Some(ecmd) => (ecmd.run)(&mut ctx, args, out).map(|()| Flow::Continue),
            None => run_server(b, sess, cmd, args, out, &mut ctx),
        };
        let nanos = start.elapsed().as_nanos() as u64;
        if let Err(e) = &result {
            out.truncate(mark);
            reply_error(b.srv, out, e);
        }
        account(b, sess, cmd, &args, nanos, result.is_err());
    }
    serve_blocked(b, &mut ctx, &events);
    let db = ctx.db;
    drop(ctx);
    sess.local = local;
    if db != sess.db {
        sess.db = db;
        sess.info.db.store(db as u32, Ordering::Relaxed);
    }
}

/// A server command inside a transaction sees the transaction's database.
fn run_server(
    b: &Batch<'_>,
    sess: &mut Session,
    cmd: &Command,
    args: Args<'_>,
    out: &mut ReplyBuf,
    ctx: &mut Ctx<'_>,
) -> Result<Flow, CommandError> {
    let Some(f) = cmd.spec.server() else {
        return Err(CommandError::err("internal error: command without handler"));
    };
    sess.db = ctx.db;
    let r = f(b.srv, sess, args, out);
    ctx.db = sess.db;
    r
}
