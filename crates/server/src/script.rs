//! EVAL, EVALSHA, FCALL and their `_RO` forms: a script runs on the calling client's thread,
//! under the slot locks of the keys it declared, taken once in order as EXEC takes its
//! transaction's; other clients never see it half done. Each command the script calls is
//! planned, checked (Valkey's `scriptCall`: arity, `noscript`, read-only scripts, OOM, cluster
//! slots) and run against the same locked context, and the write stream gets the script's
//! effects as one MULTI/EXEC, never the script.
//!
//! A key the script did not declare is locked when first used, without risking a deadlock:
//! at once when free or when waiting keeps the locking order, else the run starts over with
//! that slot among the locks taken up front if nothing was written yet, else waits a bounded
//! time (see [`LockSet::add`]).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use quanta::Instant;

use hotkv_engine::command::flags;
use hotkv_engine::entry::Entry;
use hotkv_engine::keyspace::{LockId, lock_id};
use hotkv_engine::plan::{KeyHint, LockScope, Plan};
use hotkv_engine::route::{KeyPresence, Route};
use hotkv_engine::slot::SLOTS;
use hotkv_engine::{AddLock, BlockMode, CommandError, Ctx, DownReason, EngineConfig, Events, NoEvents};
use hotkv_protocol::{Args, ReplyBuf};
use hotkv_scripting::{Call, Host, LogLevel, Outcome, Script, flag as sflag};

use crate::dispatch::{Batch, Scratch, account_as, dataset_config, reply_error, serve_blocked};
use crate::events::CmdEvents;
use crate::registry::{Command, Flow, Lookup, Spec};
use crate::session::{Session, flag};

/// How long a script that already wrote waits for the lock of a key it did not declare when
/// taking it in order is impossible: whoever holds it may be waiting for one of the script's
/// locks, and giving up is what breaks that cycle.
const UNDECLARED_WAIT: Duration = Duration::from_millis(200);

/// Runs that started over to take an undeclared key's lock up front before the script locks
/// its whole database instead.
const MAX_RESTARTS: usize = 8;

/// Which script command is running.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// EVAL / EVAL_RO.
    Eval,
    /// EVALSHA / EVALSHA_RO.
    EvalSha,
    /// FCALL / FCALL_RO.
    Fcall,
}

/// How SCRIPT DEBUG runs the client's next EVAL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DebugMode {
    /// SYNC: the script's changes stay.
    Sync,
    /// YES: the script's changes are undone when the session ends, and nobody sees them
    /// meanwhile (Valkey runs the session in a forked child).
    RolledBack,
}

/// Whether this run is debugged under SCRIPT DEBUG YES, its changes undone at its end.
fn rolls_back(sess: &Session, debugger: &Option<Box<hotkv_scripting::ldb::Session>>) -> bool {
    debugger.is_some() && sess.debug_scripts == Some(DebugMode::RolledBack)
}

/// The script about to run, found before any lock is taken.
struct Target {
    code: Code,
    flags: u32,
    /// What error texts and FUNCTION STATS call it: `f_<sha>` or the function's name.
    name: String,
}

/// An EVAL script or a library function.
enum Code {
    Script(Arc<Script>),
    Function,
}

/// EVAL, EVALSHA, FCALL and their `_RO` forms, dispatched outside a transaction.
#[allow(clippy::too_many_arguments)]
pub fn run(
    b: &Batch<'_>,
    sess: &mut Session,
    kind: Kind,
    ro: bool,
    args: Args<'_>,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
) -> Result<Flow, CommandError> {
    if sess.debug_scripts.is_some() {
        match kind {
            Kind::EvalSha if args.get(1).len() != 40 => return Err(noscript()),
            Kind::EvalSha => return Err(CommandError::err("Please use EVAL instead of EVALSHA for debugging")),
            // The connection lends its socket to the debugger, then runs the EVAL again.
            Kind::Eval if scratch.debugger.is_none() => {
                return Ok(Flow::Debug(args.iter().map(<[u8]>::to_vec).collect()));
            }
            _ => {}
        }
    }
    let numkeys = numkeys(kind, &args)?;
    let target = find(b, kind, &args, scratch.script.take())?;
    prepare(b, sess, &target, ro)?;
    // Under SCRIPT DEBUG YES nobody may see what the script does: no event, no write stream,
    // no key found expired deleted, and every key it changes put back at the end.
    let rolled_back = rolls_back(sess, &scratch.debugger);
    let mut held = None;
    let mut cfg = dataset_config(b, &mut held, sess);
    let quiet_cfg;
    if rolled_back {
        quiet_cfg = EngineConfig { replica: true, ..cfg.clone() };
        cfg = &quiet_cfg;
    }
    let events = CmdEvents::new(b.srv, b.rt.notify).by(sess.id);
    let quiet = NoEvents;
    let seen: &dyn Events = if rolled_back { &quiet } else { &events };
    let mut extra: Vec<LockId> = Vec::new();
    let mut whole = false;
    let mut restarts = 0;
    loop {
        let ids = lock_ids(scratch.plan.locks(), &extra);
        let mut locks = if whole { b.srv.ks.lock_all(&databases_of(b, &ids, sess.db)) } else { b.srv.ks.lock(&ids) };
        if let Some(route) = scratch.pending {
            crate::routing::confirm(b, &scratch.plan, &route, |seen| {
                seen.count(&b.srv.ks, &mut locks, sess.db, &args, &scratch.plan, b.now_ms)
            })?;
        }
        let no_touch = sess.has_flag(flag::NO_TOUCH);
        let mut local = std::mem::take(&mut sess.local);
        let mut ctx = Ctx::new(&b.srv.ks, sess.db, b.now_ms, cfg, &mut local, no_touch, seen, locks);
        ctx.block_mode = BlockMode::Immediate;
        ctx.effects = std::mem::take(&mut scratch.effects);
        ctx.effects.begin(b.srv.ks.sink().active() && !rolled_back);
        let dirty = ctx.stats.dirty;
        let mark = out.len();
        // A debugged script never starts over: the session would replay from its start.
        let may_restart = restarts < MAX_RESTARTS && scratch.debugger.is_none();
        let restart = run_in(b, sess, &target, ro, numkeys, &args, out, &mut ctx, may_restart, &mut scratch.debugger);
        // Whatever ran reaches the stream as one MULTI/EXEC before the locks go: a run that
        // starts over wrote nothing but may have deleted keys found expired.
        ctx.emit();
        if rolled_back {
            ctx.stats.dirty = dirty;
        } else {
            serve_blocked(b, &mut ctx, &events);
        }
        scratch.effects = std::mem::take(&mut ctx.effects);
        drop(ctx);
        sess.local = local;
        match restart {
            None => break,
            Some(Needs::Locks(ids)) => {
                out.truncate(mark);
                extra.extend(ids);
                restarts += 1;
            }
            Some(Needs::Everything) => {
                out.truncate(mark);
                whole = true;
                restarts = MAX_RESTARTS;
            }
        }
    }
    Ok(Flow::Continue)
}

/// A script queued in a transaction, run by EXEC under the transaction's locks: it cannot
/// start over, so an undeclared key's busy lock is waited for a bounded time.
pub fn run_queued<'b: 'c, 'c>(
    b: &Batch<'b>,
    sess: &mut Session,
    kind: Kind,
    ro: bool,
    args: Args<'_>,
    out: &mut ReplyBuf,
    ctx: &mut Ctx<'c>,
) -> Result<Flow, CommandError> {
    let numkeys = numkeys(kind, &args)?;
    let target = find(b, kind, &args, None)?;
    prepare(b, sess, &target, ro)?;
    run_in(b, sess, &target, ro, numkeys, &args, out, ctx, false, &mut None);
    Ok(Flow::Continue)
}

/// What a run that gave up needs locked from the start.
enum Needs {
    /// These slots besides the declared ones.
    Locks(Vec<LockId>),
    /// Every slot of the databases involved.
    Everything,
}

/// EVAL's numkeys, checked as Valkey checks it.
fn numkeys(kind: Kind, args: &Args<'_>) -> Result<usize, CommandError> {
    let Some(n) = hotkv_protocol::parse_i64(args.get(2)) else {
        return Err(match kind {
            Kind::Fcall => CommandError::err("Bad number of keys provided"),
            _ => CommandError::NotInteger,
        });
    };
    if n > args.len() as i64 - 3 {
        return Err(CommandError::err("Number of keys can't be greater than number of args"));
    }
    if n < 0 {
        return Err(CommandError::err("Number of keys can't be negative"));
    }
    Ok(n as usize)
}

/// The script an EVAL names by body (caching it) or an EVALSHA by SHA, or a FCALL's function.
fn find(b: &Batch<'_>, kind: Kind, args: &Args<'_>, found: Option<Arc<Script>>) -> Result<Target, CommandError> {
    if let (Kind::Eval | Kind::EvalSha, Some(script)) = (kind, found) {
        b.srv.scripts.touch(&script);
        return Ok(Target {
            flags: script.shebang.flags,
            name: script.function_name().to_string(),
            code: Code::Script(script),
        });
    }
    match kind {
        Kind::Eval => {
            let script = add_script(b.srv, args.get(1), true)?;
            b.srv.scripts.touch(&script);
            Ok(Target {
                flags: script.shebang.flags,
                name: script.function_name().to_string(),
                code: Code::Script(script),
            })
        }
        Kind::EvalSha => {
            let script = b.srv.scripts.get(args.get(1)).ok_or_else(noscript)?;
            b.srv.scripts.touch(&script);
            Ok(Target {
                flags: script.shebang.flags,
                name: script.function_name().to_string(),
                code: Code::Script(script),
            })
        }
        Kind::Fcall => {
            let (_, def) = b.srv.functions.get(args.get(1)).ok_or_else(|| CommandError::err("Function not found"))?;
            Ok(Target { flags: def.flags, name: def.name, code: Code::Function })
        }
    }
}

fn noscript() -> CommandError {
    CommandError::raw("NOSCRIPT No matching script. Please use EVAL.")
}

/// Caches a script body after compiling it in this thread's VM (EVAL: evictable; SCRIPT
/// LOAD: kept).
pub(crate) fn add_script(
    srv: &crate::server::Server,
    body: &[u8],
    evictable: bool,
) -> Result<Arc<Script>, CommandError> {
    srv.scripts
        .add(body, evictable, |s| {
            hotkv_scripting::with_vm(|vm| vm.script(&s.sha, s.code()).map(drop))
                .unwrap_or_else(|| Err("Lua VM unavailable".into()))
        })
        .map_err(CommandError::err)
}

/// Compiles a library in this thread's VM and says which functions it registers (FUNCTION
/// LOAD, RESTORE, and libraries found in a loaded file).
pub(crate) fn compile_library(
    code: &[u8],
    md: &hotkv_scripting::functions::Metadata,
) -> Result<Vec<hotkv_scripting::FnDef>, String> {
    hotkv_scripting::with_vm(|vm| {
        vm.load_library(code, md, LIBRARY_LOAD_LIMIT).map(|fns| fns.into_iter().map(|(d, _)| d).collect())
    })
    .unwrap_or_else(|| Err("Lua VM unavailable".into()))
}

/// How long FUNCTION LOAD lets a library's top-level code run (Valkey's LOAD_TIMEOUT_MS).
pub(crate) const LIBRARY_LOAD_LIMIT: Duration = Duration::from_millis(500);

/// Replaces the libraries with the ones a loaded RDB file (or a full sync) carried, as Valkey
/// replaces its function context. A library that does not load is logged and left out.
pub fn install_functions(srv: &crate::server::Server, codes: &[Vec<u8>]) {
    srv.functions.flush();
    for code in codes {
        if let Err(e) = srv.functions.load(code, true, compile_library) {
            tracing::warn!("A function library in the loaded data was left out: {e}");
        }
    }
}

/// Adds a loaded file's libraries to the ones loaded already (DEBUG RELOAD NOFLUSH): with
/// `replace` the file's copy of a library wins, without it a library loaded already fails.
pub fn add_functions(srv: &crate::server::Server, codes: &[Vec<u8>], replace: bool) -> Result<(), String> {
    let policy = if replace { hotkv_scripting::RestorePolicy::Replace } else { hotkv_scripting::RestorePolicy::Append };
    srv.functions.restore(codes, policy, compile_library)
}

/// The flags dispatch judges a call by: for EVAL and FCALL with declared flags (a shebang, or
/// any function), Valkey's `scriptFlagsToCmdFlags` of the script's flags; otherwise the
/// command's own.
/// The script found on the way is kept in `found`, so the run does not look it up again.
pub fn command_flags(b: &Batch<'_>, cmd: &Command, args: &Args<'_>, found: &mut Option<Arc<Script>>) -> u32 {
    let own = cmd.spec.flags();
    let Some(i) = b.srv.known.scripts.iter().position(|&s| s == cmd.id) else { return own };
    let script_flags = match crate::dispatch::script_kind(i) {
        Kind::Eval => match b.srv.scripts.get(&hotkv_scripting::sha1_hex(args.get(1))) {
            Some(s) => {
                let flags = s.shebang.flags;
                *found = Some(s);
                Some(flags)
            }
            None => hotkv_scripting::body::eval_shebang(args.get(1)).ok().map(|s| s.flags),
        },
        Kind::EvalSha => b.srv.scripts.get(args.get(1)).map(|s| {
            let flags = s.shebang.flags;
            *found = Some(s);
            flags
        }),
        Kind::Fcall => b.srv.functions.get(args.get(1)).map(|(_, d)| d.flags),
    };
    match script_flags {
        Some(f) if f & sflag::EVAL_COMPAT_MODE == 0 => {
            let mut flags = own & !(flags::STALE | flags::DENYOOM | flags::WRITE | flags::MAY_REPLICATE);
            if f & (sflag::ALLOW_OOM | sflag::NO_WRITES) == 0 {
                flags |= flags::DENYOOM;
            }
            if f & sflag::NO_WRITES == 0 {
                flags |= flags::WRITE;
            }
            if f & sflag::ALLOW_STALE != 0 {
                flags |= flags::STALE;
            }
            flags
        }
        _ => own,
    }
}

/// Valkey's `scriptPrepareForRun`: what the script's flags forbid here, checked before it
/// runs.
fn prepare(b: &Batch<'_>, sess: &Session, t: &Target, ro: bool) -> Result<(), CommandError> {
    let f = t.flags;
    let repl = &b.srv.repl;
    let stale = repl.is_replica() && !repl.link_up() && !b.rt.replica_serve_stale_data;
    if f & sflag::EVAL_COMPAT_MODE != 0 {
        // A script without a shebang says nothing of stale data: it may not run on it.
        if stale {
            return Err(CommandError::raw(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            ));
        }
        return Ok(());
    }
    if f & sflag::NO_CLUSTER != 0 && b.srv.cluster.is_some() {
        return Err(CommandError::err("Can not run script on cluster, 'no-cluster' flag is set."));
    }
    let master = sess.has_flag(flag::MASTER);
    if f & sflag::ALLOW_STALE == 0 && stale {
        return Err(CommandError::raw(
            "MASTERDOWN Link with MASTER is down, replica-serve-stale-data is set to 'no' and 'allow-stale' flag is not set on the script.",
        ));
    }
    if f & sflag::NO_WRITES == 0 {
        if repl.is_replica() && b.rt.replica_read_only && !master {
            return Err(CommandError::raw("READONLY Can not run script with write flag on readonly replica"));
        }
        if crate::persistence::denies_writes(b.srv, b.rt) {
            return Err(CommandError::raw(
                "MISCONF Valkey is configured to save RDB snapshots, but it's currently unable to persist to disk. Writable scripts are blocked. Use 'no-writes' flag for read only scripts.",
            ));
        }
        if let Some(aof) = b.srv.aof.misconf() {
            let reason = aof.split_once("AOF error: ").map_or("", |(_, r)| r).to_string();
            return Err(CommandError::raw(format!(
                "MISCONF Valkey is configured to persist data to AOF, but it's currently unable to persist to disk. Writable scripts are blocked. Use 'no-writes' flag for read only scripts. AOF error: {reason}"
            )));
        }
        if ro {
            return Err(CommandError::err("Can not execute a script with write flag using *_ro command."));
        }
        if b.rt.min_replicas_to_write > 0 && !repl.is_replica() && !repl.primary.writes_allowed() {
            return Err(CommandError::raw("NOREPLICAS Not enough good replicas to write."));
        }
        if f & sflag::ALLOW_OOM == 0 && over_memory(b) && !master {
            return Err(CommandError::raw(
                "OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'",
            ));
        }
    }
    Ok(())
}

/// Whether the server is over `maxmemory` now (after trying to evict).
fn over_memory(b: &Batch<'_>) -> bool {
    b.engine.maxmemory > 0 && crate::evict::perform(b.srv, b.engine, b.now_ms)
}

/// The declared keys' locks and the ones an earlier run found it needed, sorted and unique.
fn lock_ids(declared: &[LockId], extra: &[LockId]) -> Vec<LockId> {
    let mut ids: Vec<LockId> = declared.iter().chain(extra).copied().collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// The databases of `ids` and the client's, for a run that locks everything.
fn databases_of(b: &Batch<'_>, ids: &[LockId], db: usize) -> Vec<usize> {
    let mut dbs: Vec<usize> = ids.iter().map(|&id| id as usize / SLOTS).chain([db]).collect();
    dbs.sort_unstable();
    dbs.dedup();
    dbs.retain(|&d| d < b.srv.ks.databases());
    dbs
}

/// Runs the script with `ctx` holding its locks (also EXEC's path for a queued script). The
/// reply goes to `out`. Returns what a run that gave up needs to start over with, when
/// `may_restart` allowed giving up.
#[allow(clippy::too_many_arguments)]
fn run_in<'b: 'c, 'c>(
    b: &Batch<'b>,
    sess: &mut Session,
    t: &Target,
    ro: bool,
    numkeys: usize,
    args: &Args<'_>,
    out: &mut ReplyBuf,
    ctx: &mut Ctx<'c>,
    may_restart: bool,
    debugger: &mut Option<Box<hotkv_scripting::ldb::Session>>,
) -> Option<Needs> {
    let keys: Vec<&[u8]> = (0..numkeys).map(|i| args.get(3 + i)).collect();
    let argv: Vec<&[u8]> = (3 + numkeys..args.len()).map(|i| args.get(i)).collect();
    let rolled_back = rolls_back(sess, debugger);
    let mut host = ScriptHost {
        b,
        sess,
        ctx,
        flags: t.flags,
        read_only: ro || t.flags & sflag::NO_WRITES != 0,
        wrote: false,
        may_restart,
        restart: None,
        undo: rolled_back.then(Vec::new),
        slot: declared_slot(b, &keys),
        repl: 3,
        plan: Plan::default(),
        started_over_memory: None,
        state: None,
        target: t,
        args: *args,
        started: std::time::Instant::now(),
        started_us: crate::server::unix_us(),
        calls: 0,
        next_poll: LONG_RUN,
    };
    let call = Call { keys: &keys, args: &argv };
    let mark = out.len();
    let outcome = hotkv_scripting::with_vm(|vm| match &t.code {
        Code::Script(script) => match vm.script(&script.sha, script.code()) {
            Ok(f) => match debugger.take() {
                Some(session) => {
                    let (outcome, session) = vm.eval_debug(&f, &t.name, call, &mut host, out, session);
                    *debugger = Some(session);
                    outcome
                }
                None => vm.eval(&f, &t.name, call, &mut host, out),
            },
            Err(e) => {
                out.error(&format!("ERR {e}"));
                Outcome::Failed { counted: true }
            }
        },
        Code::Function => match vm.function(&t.name, &b.srv.functions) {
            Some(f) => vm.fcall(&f, &t.name, call, &mut host, out),
            None => {
                out.error("ERR Function not found");
                Outcome::Failed { counted: true }
            }
        },
    });
    host.finish();
    if let Some(undo) = host.undo.take() {
        for (db, key, saved) in undo.into_iter().rev() {
            let _ = host.ctx.put_back(db, &key, saved);
        }
    }
    let ScriptHost { restart, .. } = host;
    match outcome {
        None => {
            out.error("ERR Lua VM unavailable");
            b.srv.stats.error("ERR");
        }
        Some(Outcome::Failed { counted: true }) if restart.is_none() => {
            // Past an output limit the buffer may have dropped the error already.
            let code = error_code(out.as_bytes().get(mark..).unwrap_or_default());
            b.srv.stats.error_custom(&code);
        }
        _ => {}
    }
    restart
}

/// The code of the error reply `reply` (`-CODE message`), for errorstats.
fn error_code(reply: &[u8]) -> String {
    let rest = reply.strip_prefix(b"-").unwrap_or(reply);
    let end = rest.iter().position(|&c| c == b' ' || c == b'\r').unwrap_or(rest.len());
    String::from_utf8_lossy(&rest[..end]).into_owned()
}

/// The slot of the declared keys in cluster mode, which undeclared keys must share unless the
/// script may cross slots.
fn declared_slot(b: &Batch<'_>, keys: &[&[u8]]) -> Option<u16> {
    b.srv.cluster.as_ref()?;
    keys.first().map(|k| hotkv_engine::slot::key_slot(k))
}

/// Scripts that ran long enough to be polled (100,000 Lua instructions): what SCRIPT KILL
/// and FUNCTION KILL look at, and whether other clients get BUSY. A short script never
/// touches it, so no lock is shared by every script call.
#[derive(Default)]
pub struct Runs {
    slow: parking_lot::Mutex<Vec<Arc<RunState>>>,
    /// Runs past `busy-reply-threshold`: other clients' commands get BUSY while non-zero.
    busy: std::sync::atomic::AtomicUsize,
    /// DEBUG SET-DISABLE-DENY-SCRIPTS: scripts may call `noscript` commands (tests only).
    pub allow_noscript: AtomicBool,
}

impl Runs {
    /// Whether a script runs past `busy-reply-threshold` now, and whether it is a function.
    pub fn busy(&self) -> Option<bool> {
        if self.busy.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let slow = self.slow.lock();
        slow.iter().find(|r| r.busy.load(Ordering::Relaxed)).map(|r| r.function)
    }

    /// SCRIPT KILL (`function` false) or FUNCTION KILL: stops the slow runs of that kind that
    /// wrote nothing.
    pub fn kill(&self, function: bool) -> Result<(), CommandError> {
        let slow = self.slow.lock();
        if slow.is_empty() {
            return Err(CommandError::raw("NOTBUSY No scripts in execution right now."));
        }
        let mine: Vec<&Arc<RunState>> = slow.iter().filter(|r| r.function == function).collect();
        if mine.is_empty() {
            return Err(busy_error(!function));
        }
        if mine.iter().all(|r| r.from_master) {
            return Err(CommandError::raw(
                "UNKILLABLE The busy script was sent by a master instance in the context of replication and cannot be killed.",
            ));
        }
        let killable: Vec<&&Arc<RunState>> = mine.iter().filter(|r| !r.wrote.load(Ordering::Relaxed)).collect();
        if killable.is_empty() {
            return Err(CommandError::raw(
                "UNKILLABLE Sorry the script already executed write commands against the dataset. You can either wait the script termination or kill the server in a hard way using the SHUTDOWN NOSAVE command.",
            ));
        }
        for r in killable {
            r.kill.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The slow run FUNCTION STATS shows: name, command and milliseconds so far.
    pub fn running(&self) -> Option<(String, Vec<Vec<u8>>, u64)> {
        let slow = self.slow.lock();
        slow.first().map(|r| (r.name.clone(), r.command.clone(), r.started.elapsed().as_millis() as u64))
    }
}

/// The BUSY error other clients get while a script (or function) runs long.
pub fn busy_error(function: bool) -> CommandError {
    CommandError::raw(if function {
        "BUSY Valkey is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE."
    } else {
        "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE."
    })
}

/// One run, as the interrupt hook and SCRIPT KILL share it.
struct RunState {
    kill: AtomicBool,
    wrote: AtomicBool,
    busy: AtomicBool,
    function: bool,
    from_master: bool,
    /// The script's name and the command that runs it, for FUNCTION STATS.
    name: String,
    command: Vec<Vec<u8>>,
    started: std::time::Instant,
}

/// The server as one script run sees it.
struct ScriptHost<'h, 'b, 'c> {
    b: &'h Batch<'b>,
    /// The script and the command running it (FUNCTION STATS shows both).
    target: &'h Target,
    args: Args<'h>,
    started: std::time::Instant,
    sess: &'h mut Session,
    ctx: &'h mut Ctx<'c>,
    flags: u32,
    read_only: bool,
    /// A write command ran: from now on the run cannot fail on the server's state, nor start
    /// over.
    wrote: bool,
    may_restart: bool,
    /// Set when the run gave up to start over with more locks.
    restart: Option<Needs>,
    /// SCRIPT DEBUG YES: every key a call may change, as it was before the first such call,
    /// to be put back when the run ends.
    undo: Option<Vec<Saved>>,
    /// The slot the script's keys are in (cluster mode), once known.
    slot: Option<u16>,
    /// `redis.set_repl` flags: 1 AOF, 2 replicas.
    repl: u8,
    plan: Plan,
    started_over_memory: Option<bool>,
    /// What SCRIPT KILL sees of this run, once it ran long enough to be polled.
    state: Option<Arc<RunState>>,
    /// Unix microseconds when the run started: TIME inside it answers this.
    started_us: i64,
    /// Commands called so far, and when (since `started`) they next look at the clock.
    calls: u32,
    next_poll: Duration,
}

/// How often the calls of a long script look at the clock for BUSY and SCRIPT KILL.
const CALL_POLL_EVERY: Duration = Duration::from_millis(5);

/// A key as it was before a SCRIPT DEBUG YES run changed it: (database, key, entry or none).
type Saved = (usize, Vec<u8>, Option<Entry>);

/// How long a run lasts before it counts as long: SCRIPT KILL, FUNCTION STATS and the busy
/// checks see it from then on.
const LONG_RUN: std::time::Duration = std::time::Duration::from_millis(1);

impl<'b: 'c, 'c> Host for ScriptHost<'_, 'b, 'c> {
    fn call(&mut self, args: Args<'_>, reply: &mut ReplyBuf) {
        // A script that spends its time in the commands it calls (a loop over CLIENT LIST, or
        // KEYS) reaches the instruction hook rarely: every 16 calls the clock is read too,
        // so that other clients get BUSY and SCRIPT KILL finds the run on time. Killing it
        // is still the hook's.
        self.calls = self.calls.wrapping_add(1);
        if self.calls.is_multiple_of(16) && !self.state.as_ref().is_some_and(|s| s.kill.load(Ordering::Relaxed)) {
            let elapsed = self.started.elapsed();
            if elapsed >= self.next_poll {
                self.next_poll = elapsed + CALL_POLL_EVERY;
                let _ = self.poll();
            }
        }
        if self.restart.is_some() {
            reply.error("ERR script is starting over");
            return;
        }
        if let Err(e) = self.call_args(args, reply) {
            reply.truncate(0);
            reply_error(self.b.srv, reply, &e);
        }
    }

    fn acl_check(&mut self, args: Args<'_>) -> Option<bool> {
        let srv = self.b.srv;
        let Lookup::Found(id) = srv.registry.lookup(&args) else { return None };
        Some(match &self.sess.acl_user {
            Some(user) => srv.acl.check(user, srv.registry.get(id), &args).is_ok(),
            None => true,
        })
    }

    fn poll(&mut self) -> Option<String> {
        let runs = &self.b.srv.script_runs;
        let state = match &self.state {
            Some(s) => s.clone(),
            // The VM counts instructions across runs (Lua 5.1 keeps the hook's count), so a
            // short run is polled now and then too: it is not a long run, and must not pay
            // for one (the registration below hands the worker over and naps 2 ms).
            None if self.started.elapsed() < LONG_RUN => return None,
            None => {
                // A long run: from now on SCRIPT KILL and FUNCTION STATS see it.
                let s = Arc::new(RunState {
                    kill: AtomicBool::new(false),
                    wrote: AtomicBool::new(self.wrote),
                    busy: AtomicBool::new(false),
                    function: matches!(self.target.code, Code::Function),
                    from_master: self.sess.has_flag(flag::MASTER),
                    name: self.target.name.clone(),
                    command: self.args.iter().map(<[u8]>::to_vec).collect(),
                    started: self.started,
                });
                runs.slow.lock().push(s.clone());
                self.state = Some(s.clone());
                // A long run keeps this worker: its queue (clients whose turn came while the
                // script ran, the one in its LIFO slot among them, which no other worker may
                // steal) moves to a new worker thread, as `block_in_place` hands it over; the
                // short wait lets that thread take it before this one would take it back.
                // On an event loop's thread, the loop's other clients move to runtime tasks.
                crate::evloop::on_long_run();
                if let Ok(rt) = tokio::runtime::Handle::try_current()
                    && rt.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread
                {
                    tokio::task::block_in_place(|| std::thread::sleep(std::time::Duration::from_millis(2)));
                }
                s
            }
        };
        // This worker is taken for a while, and while it runs nobody may be polling the I/O
        // driver: the other workers can be parked on a condition variable until they are
        // told of work. Two tasks pushed here (one fills the worker's LIFO slot, which cannot
        // be stolen; the second goes to its queue) make tokio wake a parked worker to steal,
        // and that worker then parks on the driver, so the other clients (SCRIPT KILL among
        // them) are served meanwhile rather than after the script. At every poll (every
        // 100k instructions), since a worker that served a client may park again where no
        // one wakes it.
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            drop(rt.spawn(async {}));
            drop(rt.spawn(async {}));
        }
        let elapsed = self.started.elapsed().as_millis() as u64;
        let threshold = self.b.rt.busy_reply_threshold;
        if threshold > 0 && elapsed >= threshold && !state.busy.swap(true, Ordering::Relaxed) {
            runs.busy.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                "Slow script detected: still in execution after {elapsed} milliseconds. You can try killing the script using the {} command. Script name is: {}.",
                if state.function { "FUNCTION KILL" } else { "SCRIPT KILL" },
                state.name
            );
        }
        if state.kill.load(Ordering::Relaxed) {
            let text = if state.function {
                "Script killed by user with FUNCTION KILL."
            } else {
                "Script killed by user with SCRIPT KILL."
            };
            tracing::info!("{text}");
            return Some(text.to_string());
        }
        None
    }

    fn log(&mut self, level: LogLevel, msg: &[u8]) {
        let text = String::from_utf8_lossy(msg);
        match level {
            LogLevel::Debug => tracing::trace!(target: "hotkv::script", "{text}"),
            LogLevel::Verbose => tracing::debug!(target: "hotkv::script", "{text}"),
            LogLevel::Notice => tracing::info!(target: "hotkv::script", "{text}"),
            LogLevel::Warning => tracing::warn!(target: "hotkv::script", "{text}"),
        }
    }

    fn set_repl(&mut self, flags: u8) {
        self.repl = flags;
    }
}

impl<'b: 'c, 'c> ScriptHost<'_, 'b, 'c> {
    /// The run ended: a long one leaves the slow runs, and others stop getting BUSY for it.
    fn finish(&mut self) {
        let Some(state) = self.state.take() else { return };
        let runs = &self.b.srv.script_runs;
        runs.slow.lock().retain(|r| !Arc::ptr_eq(r, &state));
        if state.busy.swap(false, Ordering::Relaxed) {
            runs.busy.fetch_sub(1, Ordering::Relaxed);
        }
    }

    /// Valkey's `scriptCall`, then the call itself.
    fn call_args(&mut self, args: Args<'_>, reply: &mut ReplyBuf) -> Result<(), CommandError> {
        let b = self.b;
        let reg = &b.srv.registry;
        let Lookup::Found(id) = reg.lookup(&args) else {
            return Err(CommandError::err("Unknown command called from script"));
        };
        let cmd = reg.get(id);
        let arity = cmd.spec.arity();
        let argc = args.len() as i32;
        if (arity > 0 && arity != argc) || argc < -arity {
            return Err(CommandError::err("Wrong number of args calling command from script"));
        }
        let cflags = cmd.spec.flags();
        let rejected = |e: CommandError| {
            b.srv.stats.reject(Some(id));
            e
        };
        if cflags & flags::NOSCRIPT != 0 && !b.srv.script_runs.allow_noscript.load(Ordering::Relaxed) {
            return Err(rejected(CommandError::err("This Redis command is not allowed from script")));
        }
        let repl = &b.srv.repl;
        let master = self.sess.has_flag(flag::MASTER);
        if repl.is_replica() && !repl.link_up() && !b.rt.replica_serve_stale_data && cflags & flags::STALE == 0 {
            return Err(rejected(CommandError::err("Can not execute the command on a stale replica")));
        }
        if let Some(user) = &self.sess.acl_user
            && let Err(d) = b.srv.acl.check(user, cmd, &args)
        {
            let object = crate::acl::denied_object(cmd, &args, d);
            crate::acl::record_in(b.srv, self.sess, d.reason, crate::acl::Context::Lua, object, None);
            let why = crate::acl::denied_message(&self.sess.user, cmd, &args, d, false);
            return Err(rejected(CommandError::err(format!("ACL failure in script: {why}"))));
        }
        if self.read_only && cflags & (flags::WRITE | flags::MAY_REPLICATE) != 0 {
            return Err(rejected(CommandError::err("Write commands are not allowed from read-only scripts.")));
        }
        if cflags & flags::WRITE != 0 && !self.wrote {
            if repl.is_replica() && b.rt.replica_read_only && !master {
                return Err(rejected(CommandError::raw("READONLY You can't write against a read only replica.")));
            }
            if crate::persistence::denies_writes(b.srv, b.rt) {
                return Err(rejected(CommandError::raw(crate::persistence::MISCONF)));
            }
            if let Some(text) = b.srv.aof.misconf() {
                return Err(rejected(CommandError::raw(text)));
            }
            if b.rt.min_replicas_to_write > 0 && !repl.is_replica() && !repl.primary.writes_allowed() {
                return Err(rejected(CommandError::raw("NOREPLICAS Not enough good replicas to write.")));
            }
        }
        if self.flags & sflag::ALLOW_OOM == 0 && !self.wrote && cflags & flags::DENYOOM != 0 && !master {
            let over = *self.started_over_memory.get_or_insert_with(|| over_memory(b));
            if over {
                return Err(rejected(CommandError::OutOfMemory));
            }
        }
        let dbs = b.srv.ks.databases();
        match cmd.spec {
            Spec::Engine(s) => {
                let lock = s.handler.as_ref().map_or(hotkv_engine::cmd::LockPlan::Keys, |h| h.plan);
                self.plan.compute(s, lock, &args, self.ctx.db, dbs, &KeyHint::default());
            }
            Spec::Server(s) => {
                self.plan.compute(s, hotkv_engine::cmd::LockPlan::Keys, &args, self.ctx.db, dbs, &KeyHint::default())
            }
        }
        if self.plan.keys_invalid() {
            return Err(CommandError::Syntax);
        }
        if id == b.srv.known.time {
            // The whole script runs at one instant, as Valkey's cached time.
            reply.array(2);
            reply.bulk_int(self.started_us / 1_000_000);
            reply.bulk_int(self.started_us % 1_000_000);
            b.srv.stats.call(id, 0, false, b.rt.latency_tracking);
            return Ok(());
        }
        self.check_cluster(cmd, &args)?;
        self.lock(cmd)?;
        if self.undo.is_some() && cflags & (flags::WRITE | flags::MAY_REPLICATE) != 0 {
            self.save_keys(cmd, &args)?;
        }
        if cflags & flags::WRITE != 0 {
            self.wrote = true;
            if let Some(s) = &self.state {
                s.wrote.store(true, Ordering::Relaxed);
            }
        }
        self.execute(cmd, args, reply)
    }

    /// Valkey's `scriptVerifyClusterState`: every key on this node, in one slot unless the
    /// script may cross slots.
    fn check_cluster(&mut self, cmd: &Command, args: &Args<'_>) -> Result<(), CommandError> {
        let b = self.b;
        if b.srv.cluster.is_none() || self.sess.has_flag(flag::MASTER) {
            return Ok(());
        }
        let Some(slot) = self.plan.slot() else { return Ok(()) };
        let rctx = hotkv_engine::route::RouteCtx {
            tls: self.sess.tls,
            ipv6: false,
            asking: self.sess.asking,
            readonly: self.sess.readonly,
            write: cmd.spec.flags() & flags::WRITE != 0,
        };
        let route = match b.srv.router.route(&self.plan, &rctx) {
            Route::CheckKeys => {
                let mut seen = KeyPresence::default();
                let held = self.plan.locks().iter().all(|&id| self.ctx.locks.holds(id));
                if held {
                    seen.count(&b.srv.ks, &mut self.ctx.locks, self.ctx.db, args, &self.plan, b.now_ms);
                    b.srv.router.route_locked(&self.plan, &rctx, &seen)
                } else {
                    Route::TryAgain
                }
            }
            r => r,
        };
        let name = &cmd.full_name;
        match route {
            Route::Ok | Route::CheckKeys => {}
            Route::Down(DownReason::ReadOnly) => {
                return Err(CommandError::err(
                    "Script attempted to execute a write command while the cluster is down and readonly",
                ));
            }
            Route::Down(DownReason::Unbound) => {
                return Err(CommandError::err("Script attempted to access a slot not served"));
            }
            Route::Down(DownReason::Down) => {
                return Err(CommandError::err("Script attempted to execute a command while the cluster is down"));
            }
            Route::CrossSlot => {
                return Err(CommandError::err(format!(
                    "Command '{name}' in script attempted to access keys that don't hash to the same slot"
                )));
            }
            Route::TryAgain => {
                return Err(CommandError::err(format!(
                    "Unable to execute command '{name}' in script because undeclared keys were accessed during rehashing of the slot"
                )));
            }
            Route::Moved { .. } | Route::Ask { .. } => {
                return Err(CommandError::err("Script attempted to access a non local key in a cluster node"));
            }
        }
        if self.flags & (sflag::ALLOW_CROSS_SLOT | sflag::EVAL_COMPAT_MODE) == 0 {
            match self.slot {
                None => self.slot = Some(slot),
                Some(s) if s != slot => {
                    return Err(CommandError::err("Script attempted to access keys that do not hash to the same slot"));
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// SCRIPT DEBUG YES: notes the keys a call may change as they are now, once each. A call
    /// whose effects are not in its keys (a flush, a publish) cannot be undone, so it is
    /// refused.
    fn save_keys(&mut self, cmd: &Command, args: &Args<'_>) -> Result<(), CommandError> {
        let keys = self.plan.keys();
        if self.plan.lock_scope() != LockScope::Keys || keys.is_empty() || keys.iter().any(|k| k.channel) {
            return Err(CommandError::err(format!(
                "'{}' cannot be undone at the end of a SCRIPT DEBUG YES session: use SCRIPT DEBUG SYNC",
                cmd.full_name
            )));
        }
        let Some(undo) = self.undo.as_mut() else { return Ok(()) };
        // A key may be written in another database than the script's (MOVE, COPY ... DB):
        // every database whose lock the call holds for the key's slot.
        for k in keys {
            let key = args.get(k.pos as usize);
            for &id in self.plan.locks() {
                let (db, slot) = (id as usize / SLOTS, (id as usize % SLOTS) as u16);
                if slot != k.slot || undo.iter().any(|(d, saved, _)| *d == db && saved.as_slice() == key) {
                    continue;
                }
                let before = self.ctx.save_key(db, key)?;
                undo.push((db, key.to_vec(), before));
            }
        }
        Ok(())
    }

    /// Takes the locks the call needs that the run does not hold yet.
    fn lock(&mut self, cmd: &Command) -> Result<(), CommandError> {
        let ks = &self.b.srv.ks;
        let whole = self.plan.lock_scope() != LockScope::Keys;
        // A call's own keys are usually held already (declared, or locked by an earlier call):
        // nothing to collect for them.
        if !whole && self.plan.locks().iter().all(|&id| self.ctx.locks.holds(id)) {
            return Ok(());
        }
        let ids: Vec<LockId> = match self.plan.lock_scope() {
            LockScope::Keys => self.plan.locks().to_vec(),
            LockScope::Database => (0..SLOTS as u16).map(|s| lock_id(self.ctx.db, s)).collect(),
            LockScope::AllDatabases => {
                let used = (0..ks.databases()).filter(|&d| ks.db_if_used(d).is_some());
                used.flat_map(|d| (0..SLOTS as u16).map(move |s| lock_id(d, s))).collect()
            }
        };
        for id in ids {
            match self.ctx.locks.add(ks, id) {
                AddLock::Held | AddLock::Added => continue,
                AddLock::Busy => {}
            }
            if self.may_restart && !self.wrote {
                self.restart = Some(if whole { Needs::Everything } else { Needs::Locks(self.plan.locks().to_vec()) });
                return Err(CommandError::err("script is starting over"));
            }
            if !self.ctx.locks.add_within(ks, id, UNDECLARED_WAIT) {
                return Err(CommandError::err(format!(
                    "Command '{}' in script could not lock a key it did not declare while another client held it; declare every key the script uses",
                    cmd.full_name
                )));
            }
        }
        Ok(())
    }

    /// Runs the checked call against the locked context.
    fn execute(&mut self, cmd: &Command, args: Args<'_>, reply: &mut ReplyBuf) -> Result<(), CommandError> {
        let b = self.b;
        let ctx = &mut *self.ctx;
        let start = Instant::now();
        let (db, dirty) = (ctx.db, ctx.stats.dirty);
        let effects_mark = ctx.effects.len();
        ctx.effects.next_call();
        let result = match cmd.spec.engine() {
            Some(ecmd) => {
                // The slot and hash the plan computed, so the handler's lookup does not.
                self.plan.seed(&mut ctx.locks, &args);
                ctx.prepared = ecmd.plan.prepare().map(|f| f(&args, ctx.cfg));
                // A script's call: SORT sorts a set it was told not to (Valkey's CLIENT_SCRIPT).
                let outer = std::mem::replace(&mut ctx.in_script, true);
                let outer_access = ctx.full_key_access;
                ctx.full_key_access = crate::dispatch::full_key_access(b, self.sess, cmd, ecmd, &args);
                let r = (ecmd.run)(ctx, args, reply).map(|()| Flow::Continue);
                ctx.in_script = outer;
                ctx.full_key_access = outer_access;
                r
            }
            None => match cmd.spec.server() {
                Some(f) => {
                    // The call sees the script's database; the caller keeps its own (a SELECT
                    // inside a script stays there).
                    let caller_db = std::mem::replace(&mut self.sess.db, ctx.db);
                    self.sess.in_script = true;
                    let r = f(b.srv, self.sess, args, reply);
                    self.sess.in_script = false;
                    ctx.db = std::mem::replace(&mut self.sess.db, caller_db);
                    // Nothing a script calls may wait or hand the connection elsewhere.
                    match r {
                        Ok(Flow::Continue | Flow::Close) => Ok(Flow::Continue),
                        Ok(_) => Err(CommandError::err(format!("{} cannot wait inside a script", cmd.full_name))),
                        Err(e) => Err(e),
                    }
                }
                None => Err(CommandError::err("internal error: command without handler")),
            },
        };
        let mut result = result.map(|_| ());
        if ctx.remote.take().is_some() && result.is_ok() {
            result = Err(CommandError::err(format!("{} cannot wait on another node inside a script", cmd.full_name)));
        }
        ctx.block = None;
        ctx.record_call(db, &args, dirty);
        // The script's reads are the caller's (Valkey tracks the commands a script calls, not
        // EVAL_RO itself).
        if self.sess.tracking.is_some() && cmd.spec.engine().is_some() && cmd.spec.flags() & flags::READONLY != 0 {
            crate::tracking::remember_reads(b.srv, self.sess, &args, self.plan.keys());
        }
        // redis.set_repl: this call's effects reach only the consumers it names.
        ctx.effects.limit_from(effects_mark, self.repl);
        let nanos = start.elapsed().as_nanos() as u64;
        let failed = result.is_err();
        if let Err(e) = &result {
            reply.truncate(0);
            reply_error(b.srv, reply, e);
        }
        account_as(b, self.sess, cmd, &args, nanos, failed, true);
        Ok(())
    }
}
