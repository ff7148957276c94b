//! EXEC: runs a queued transaction atomically with respect to every other client, on every
//! core, by taking the union of its commands' slot locks once, in order, for the whole
//! transaction (a transaction with a whole-keyspace command takes every slot of the
//! databases involved). Queued blocking commands do not block (`BlockMode::Immediate`).
//!
//! Each queued command keeps the plan dispatch made when it was queued; EXEC's own plan is
//! their union ([`plan_union`]), made by dispatch before EXEC runs, so no key is found twice.

use quanta::Instant;
use std::sync::atomic::Ordering;

use hotkv_engine::cmd::Prepared;
use hotkv_engine::plan::Plan;
use hotkv_engine::slot::key_slot;
use hotkv_engine::{BlockMode, CommandError, Ctx, EngineConfig};
use hotkv_protocol::{Args, ReplyBuf};

use crate::dispatch::{Batch, Scratch, account, reply_error, serve_blocked};
use crate::events::CmdEvents;
use crate::registry::{Command, Flow};
use crate::session::{MultiState, Queued, Session, flag};

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
    let watched = !sess.watched.is_empty();
    unwatch_all(b, sess);
    if multi.aborted {
        return Err(CommandError::raw("EXECABORT Transaction discarded because of previous errors."));
    }
    if dirty {
        out.null_array();
        return Ok(Flow::Continue);
    }
    sess.in_exec = true;
    let ran = run(b, sess, multi, out, scratch);
    sess.in_exec = false;
    if let Some(multi) = ran? {
        // A pause began after dispatch checked it: the transaction waits and runs again, but
        // its watches are gone by now, so a watching one answers as if a key had changed
        // (clients of WATCH retry on that) rather than run unguarded later.
        if watched {
            out.null_array();
            return Ok(Flow::Continue);
        }
        sess.multi = Some(multi);
        sess.set_flag(flag::MULTI, true);
        return Ok(Flow::Paused(vec![b"EXEC".to_vec()]));
    }
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

/// EXEC's plan: the union of the queued commands' plans, each as it will run, following the
/// SELECTs inside the transaction (empty outside a transaction).
pub(crate) fn plan_union(b: &Batch<'_>, sess: &Session, plan: &mut Plan) {
    plan.begin_union(sess.db);
    if let Some(multi) = &sess.multi {
        let dbs = b.srv.ks.databases();
        for (q, db) in with_databases(b, sess.db, &multi.queue) {
            plan.absorb(&q.plan, db, dbs);
        }
    }
    plan.end_union();
}

/// The queued commands with the database each will run in, starting from `db`: a queued
/// SELECT changes it for the commands after it.
fn with_databases<'q>(b: &Batch<'_>, mut db: usize, queue: &'q [Queued]) -> impl Iterator<Item = (&'q Queued, usize)> {
    let (select, dbs) = (b.srv.known.select, b.srv.ks.databases());
    queue.iter().map(move |q| {
        let at = db;
        if q.cmd == select
            && let Some(n) = q.argv.get(1).and_then(|a| hotkv_protocol::parse_i64(a))
            && let Ok(n) = usize::try_from(n)
            && n < dbs
        {
            db = n;
        }
        (q, at)
    })
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

/// Runs the transaction under the union of its locks. Fails only when cluster routing, which
/// looks at the keys under those locks, sends it elsewhere (ASK, TRYAGAIN). Hands the
/// transaction back unrun when a pause that began after dispatch's check holds it (see
/// `Pause::drain_writes`).
fn run(
    b: &Batch<'_>,
    sess: &mut Session,
    multi: MultiState,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
) -> Result<Option<MultiState>, CommandError> {
    let mut held = None;
    let cfg = crate::dispatch::dataset_config(b, &mut held, sess);
    // Every queued command's lock-free step (RESTORE's decoding) runs before EXEC locks.
    let mut prepared: Vec<_> = multi.queue.iter().map(|q| prepare(b, q, cfg)).collect();
    let events = CmdEvents::new(b.srv, b.rt.notify).by(sess.id);
    let mut locks = b.srv.ks.lock(scratch.plan.locks());
    if !sess.has_flag(flag::MASTER) && crate::dispatch::transaction_paused(b, &multi) {
        drop(locks);
        return Ok(Some(multi));
    }
    if let Some(route) = scratch.pending.take() {
        crate::routing::confirm(b, &scratch.plan, &route, |seen| {
            for (q, db) in with_databases(b, sess.db, &multi.queue) {
                let (flat, spans) = flatten(&q.argv);
                seen.count(&b.srv.ks, &mut locks, db, &Args::from_parts(&flat, &spans), &q.plan, b.now_ms);
            }
        })?;
    }
    let no_touch = sess.has_flag(flag::NO_TOUCH);
    let mut local = std::mem::take(&mut sess.local);
    let mut ctx = Ctx::new(&b.srv.ks, sess.db, b.now_ms, cfg, &mut local, no_touch, &events, locks);
    ctx.block_mode = BlockMode::Immediate;
    ctx.effects = std::mem::take(&mut scratch.effects);
    ctx.effects.begin(b.srv.ks.sink().active());
    // CLUSTER commands in a transaction see the node table change only by their own doing, as
    // in Valkey: no bus frame is applied between them (see `Bus::hold_frames`).
    let cluster_cmd = |q: &crate::session::Queued| b.srv.registry.get(q.cmd).full_name.starts_with("cluster|");
    let _frames = b.srv.cluster.as_ref().filter(|_| multi.queue.iter().any(cluster_cmd)).map(|c| c.bus.hold_frames());
    out.array(multi.queue.len());
    for (q, prepared) in multi.queue.iter().zip(&mut prepared) {
        let cmd = b.srv.registry.get(q.cmd);
        ctx.prepared = prepared.take();
        let (flat, spans) = flatten(&q.argv);
        let args = Args::from_parts(&flat, &spans);
        let mark = out.len();
        let start = Instant::now();
        let (db, dirty) = (ctx.db, ctx.stats.dirty);
        ctx.effects.next_call();
        let script = b.srv.known.scripts.iter().position(|&s| s == q.cmd);
        let mut result = match crate::acl::recheck_queued(b.srv, sess, cmd, &args) {
            Err(e) => Err(e),
            Ok(()) => match (cmd.spec.engine(), script) {
                (Some(ecmd), _) => {
                    ctx.full_key_access = crate::dispatch::full_key_access(b, sess, cmd, ecmd, &args);
                    (ecmd.run)(&mut ctx, args, out).map(|()| Flow::Continue)
                }
                (None, Some(i)) => {
                    let (kind, ro) = (crate::dispatch::script_kind(i), crate::dispatch::script_read_only(i));
                    let r = crate::script::run_queued(b, sess, kind, ro, args, out, &mut ctx);
                    // The script's calls recorded their effects; the script itself is not
                    // replayed.
                    ctx.effects.suppress();
                    r
                }
                (None, None) => run_server(b, sess, cmd, args, out, &mut ctx),
            },
        };
        // A command that must wait on another node (MIGRATE) cannot do so while the
        // transaction holds every lock it needs: it fails, as a command that errors at run
        // time does, and the others still run.
        if ctx.remote.take().is_some() && result.is_ok() {
            result = Err(CommandError::err(format!("{} cannot wait on another node inside MULTI", cmd.full_name)));
        }
        ctx.record_call(db, &args, dirty);
        if sess.tracking.is_some()
            && cmd.spec.engine().is_some()
            && cmd.spec.flags() & hotkv_engine::command::flags::READONLY != 0
        {
            crate::tracking::remember_reads(b.srv, sess, &args, q.plan.keys());
        }
        if result.is_ok()
            && cmd.spec.flags() & hotkv_engine::command::flags::WRITE != 0
            && cfg.replica
            && !sess.has_flag(flag::MASTER)
            && b.srv.repl.is_replica()
        {
            b.srv.repl.note_own_write(db, &args, q.plan.keys());
        }
        let nanos = start.elapsed().as_nanos() as u64;
        if let Err(e) = &result {
            out.truncate(mark);
            reply_error(b.srv, out, e);
        }
        if result.is_ok() && q.cmd == b.srv.known.flushall {
            crate::persistence::after_flushall(b.srv);
        }
        account(b, sess, cmd, &args, nanos, result.is_err());
    }
    // The transaction reaches the stream as one MULTI/EXEC, before its locks go.
    ctx.emit();
    serve_blocked(b, &mut ctx, &events);
    scratch.effects = std::mem::take(&mut ctx.effects);
    let db = ctx.db;
    drop(ctx);
    sess.local = local;
    if db != sess.db {
        sess.db = db;
        sess.info.db.store(db as u32, Ordering::Relaxed);
    }
    Ok(None)
}

/// The lock-free step of a queued engine command, if its row has one.
fn prepare(b: &Batch<'_>, q: &Queued, cfg: &EngineConfig) -> Option<Prepared> {
    let f = b.srv.registry.get(q.cmd).spec.engine()?.plan.prepare()?;
    let (flat, spans) = flatten(&q.argv);
    Some(f(&Args::from_parts(&flat, &spans), cfg))
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
