//! THE dispatch function: every command of every client goes through [`dispatch`], which runs
//! the cross-cutting checks in a fixed order, each a small named step, roughly as Valkey's
//! `processCommand` does: look up → arity → authentication → memory → execute → account.

// TSC-based: two clock reads per command cost a few ns instead of two vDSO calls.
use quanta::Instant;

use hotkv_engine::cmd::{EngineCmd, LockPlan};
use hotkv_engine::command::flags;
use hotkv_engine::keyspace::{LockId, LockSet};
use hotkv_engine::plan::{KeyHint, Plan};
use hotkv_engine::remote::{RemoteOutcome, RemoteRequest};
use hotkv_engine::slot::SLOTS;
use hotkv_engine::{BlockMode, CommandError, Ctx, Effects, EngineConfig};
use hotkv_protocol::{Args, ReplyBuf};

use crate::blocking::{BlockWait, Waiter, Wakeup};
use crate::events::CmdEvents;
use crate::evict;
use crate::registry::{Command, Flow, Lookup, Spec};
use crate::server::{Runtime, Server, unix_us};
use crate::session::{Queued, ReplyMode, Session};

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

/// Per-connection state reused from command to command, so dispatch allocates nothing per
/// command.
#[derive(Default)]
pub struct Scratch {
    /// The plan of the command being dispatched (EXEC's is its transaction's union).
    pub(crate) plan: Plan,
    /// What the connection already computed about the next command's key.
    hint: KeyHint,
    /// A cluster routing decision to finish under the command's slot locks: ASK or TRYAGAIN
    /// for a slot being migrated, or the whole decision again if the slot table changed
    /// since it was made (see `routing::confirm`).
    pub(crate) pending: Option<crate::routing::Pending>,
    /// The outcome of the request to another node the command being re-run made.
    pub(crate) resume: Option<RemoteOutcome>,
    /// The write stream's buffer, lent to each call.
    pub(crate) effects: Effects,
    /// The script an EVAL or EVALSHA names, found while judging its flags.
    pub(crate) script: Option<std::sync::Arc<hotkv_scripting::Script>>,
    /// The Lua debugger's session, lent by the connection to the EVAL it runs (SCRIPT DEBUG).
    pub(crate) debugger: Option<Box<hotkv_scripting::ldb::Session>>,
}

/// A command waiting on another node: what to ask, and how to run its second turn.
pub struct RemoteWait {
    /// The request to perform.
    pub request: RemoteRequest,
    /// The command's arguments, to run it again with the outcome.
    pub argv: Vec<Vec<u8>>,
    /// Its plan, which the second turn keeps.
    pub plan: Plan,
}

impl Scratch {
    /// Hands the next dispatched command the slot and hash of one of its keys.
    pub fn set_hint(&mut self, hint: KeyHint) {
        self.hint = hint;
    }
}

/// Runs one command, writing its reply into `out`.
pub fn dispatch(b: &Batch<'_>, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf, scratch: &mut Scratch) -> Flow {
    dispatch_with(b, sess, args, out, scratch, BlockMode::Normal, None)
}

/// [`dispatch`] with a given behaviour for blocking commands (a blocked client re-runs its
/// command in `Normal` mode when asked to retry, in `Immediate` mode when it timed out), and
/// the plan already made for these arguments, if any (a blocked client keeps its plan).
pub fn dispatch_with(
    b: &Batch<'_>,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
    mode: BlockMode,
    plan: Option<&Plan>,
) -> Flow {
    // What the software watchdog watches: this thread is in a command until it returns.
    let _busy = crate::watchdog::busy();
    let tracking = b.srv.tracking.active();
    if tracking {
        before_command(b, sess, out);
    }
    let mark = out.len();
    let reply_mode = advance_reply_mode(sess);
    sess.pushed = false;
    let flow = run_checked(b, sess, args, out, scratch, mode, plan);
    // A hint is for this command only, whether or not it got as far as using it; so is a
    // pending routing check.
    scratch.hint = KeyHint::default();
    scratch.pending = None;
    scratch.resume = None;
    scratch.script = None;
    // ASKING holds for the next command only, or until EXEC inside a transaction (Valkey's
    // resetClient).
    if sess.asking && sess.multi.is_none() && !args.get(0).eq_ignore_ascii_case(b"asking") {
        sess.asking = false;
    }
    let flow = match flow {
        Ok(flow) => flow,
        Err(e) => {
            out.truncate(mark);
            reply_error(b.srv, out, &e);
            Flow::Continue
        }
    };
    // CLIENT REPLY ON answers even when replies were off or skipped, as in Valkey; so do
    // RESP3 pushes, which are not replies.
    if matches!(reply_mode, ReplyMode::Off | ReplyMode::Skip) && sess.reply_mode != ReplyMode::On && !sess.pushed {
        out.truncate(mark);
    }
    // The skipped command may itself have changed the mode (CLIENT REPLY OFF/ON).
    if reply_mode == ReplyMode::Skip && sess.reply_mode == ReplyMode::Skip {
        sess.reply_mode = ReplyMode::On;
    }
    if tracking || sess.tracking.is_some() {
        after_command(sess, &args, out);
    }
    flow
}

/// CLIENT TRACKING before a command: the table is brought back within
/// `tracking-table-max-keys`, and what is waiting for this client goes out before the reply
/// (Valkey's processCommand evicts tracked keys before it calls the command).
fn before_command(b: &Batch<'_>, sess: &mut Session, out: &mut ReplyBuf) {
    b.srv.tracking.limit();
    crate::tracking::drain(sess, out);
}

/// CLIENT TRACKING after a command: invalidations its own writes caused follow its reply,
/// even with CLIENT REPLY OFF (they are pushes); CLIENT CACHING holds for one command, or
/// for the transaction it was given before, and survives other CLIENT calls (Valkey's
/// resetClient).
fn after_command(sess: &mut Session, args: &Args<'_>, out: &mut ReplyBuf) {
    crate::tracking::drain(sess, out);
    if sess.caching && sess.multi.is_none() && !args.get(0).eq_ignore_ascii_case(b"client") {
        sess.caching = false;
    }
}

/// Looks the command up and runs it; errors before execution count as rejected calls.
fn run_checked(
    b: &Batch<'_>,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
    mode: BlockMode,
    plan: Option<&Plan>,
) -> Result<Flow, CommandError> {
    let reg = &b.srv.registry;
    let lookup = reg.lookup(&args);
    let Lookup::Found(id) = lookup else {
        flag_transaction(sess);
        return Err(reg.unknown_error(&lookup, &args));
    };
    let cmd = reg.get(id);
    sess.running = id as u32 + 1;
    let rejected = |sess: &mut Session, e: CommandError| {
        b.srv.stats.reject(Some(id));
        if id == b.srv.known.exec && sess.multi.is_some() {
            // Valkey's execCommandAbort: a refused EXEC discards the transaction and says why.
            crate::cmd::multi::discard_transaction(b.srv, sess);
            return CommandError::raw(format!("EXECABORT Transaction discarded because of: {}", e.message()));
        }
        flag_transaction(sess);
        e
    };
    if let Err(e) = check_arity(cmd, &args) {
        return Err(rejected(sess, e));
    }
    // A script's declared flags stand for EVAL's and FCALL's own (Valkey's getCommandFlags).
    let cflags = crate::script::command_flags(b, cmd, &args, &mut scratch.script);
    plan_call(b, cmd, sess, &args, scratch, plan);
    check_auth(b, cmd, sess).map_err(|e| rejected(sess, e))?;
    check_acl(b, cmd, sess, &args).map_err(|e| rejected(sess, e))?;
    // A command's second turn after waiting on another node was routed on its first: routing
    // it again could answer TRYAGAIN for keys its first turn moved away, and the keys the
    // target acknowledged would then stay here as well.
    // Nor is what a primary sends its replica: it owns the slots its replica serves.
    let master = sess.has_flag(crate::session::flag::MASTER);
    if scratch.resume.is_none() && !master {
        route(b, cmd, cflags, sess, &args, scratch).map_err(|e| redirected(b, sess, id, e))?;
    }
    if sess.multi.is_some() && cmd.spec.flags() & flags::NO_MULTI != 0 {
        return Err(rejected(sess, CommandError::err("Command not allowed inside a transaction")));
    }
    check_pubsub_context(b, cmd, sess, out).map_err(|e| rejected(sess, e))?;
    // A second turn is not held back either: its first turn passed the pause, and holding it
    // would run the command again from its start, its outcome lost.
    if scratch.resume.is_none() && !master && paused(b, cmd, cflags, sess) {
        return Ok(Flow::Paused(args.iter().map(<[u8]>::to_vec).collect()));
    }
    if !master {
        check_replication(b, cmd, cflags, sess).map_err(|e| rejected(sess, e))?;
    }
    if cmd.spec.flags() & flags::ALLOW_BUSY == 0
        && let Some(function) = b.srv.script_runs.busy()
    {
        return Err(rejected(sess, crate::script::busy_error(function)));
    }
    if sess.multi.is_some() && !b.srv.known.multi_immediate.contains(&id) {
        return queue(b, cmd, cflags, sess, args, out, &scratch.plan).map_err(|e| rejected(sess, e));
    }
    if id == b.srv.known.exec {
        if let Some(m) = &sess.multi
            && m.queue.iter().any(|q| q.flags & flags::DENYOOM != 0)
        {
            check_memory(b, cflags, sess, true).map_err(|e| rejected(sess, e))?;
        }
        let start = Instant::now();
        let r = crate::multi::exec(b, sess, out, scratch);
        // EXEC itself is a call in commandstats (a failed one for EXECABORT or a missing
        // MULTI), besides the queued commands it ran.
        account(b, sess, cmd, &args, start.elapsed().as_nanos() as u64, r.is_err());
        return r;
    }
    check_memory(b, cflags, sess, false).map_err(|e| rejected(sess, e))?;
    // Keys the eviction took away are announced before the reply, as in Valkey.
    if b.engine.maxmemory != 0 && b.srv.tracking.active() {
        crate::tracking::drain(sess, out);
    }
    if let Some(i) = b.srv.known.scripts.iter().position(|&s| s == id) {
        // MONITOR shows the script before the commands it runs (EVAL and FCALL skip the feed
        // after the call), once: not again when the debugger runs it.
        if scratch.debugger.is_none()
            && !sess.reprocessing
            && b.srv.monitors.load(std::sync::atomic::Ordering::Relaxed) > 0
        {
            feed_monitors(b.srv, sess, &args, false);
        }
        let start = Instant::now();
        let mark = out.len();
        let r = crate::script::run(b, sess, script_kind(i), script_read_only(i), args, out, scratch);
        // A script whose reply is an error failed, whatever raised it (Valkey's failed_calls).
        let failed = r.is_err() || out.as_bytes().get(mark) == Some(&b'-');
        // An EVAL handed to the debugger counts once, when it runs.
        if !matches!(r, Ok(Flow::Debug(_))) {
            account(b, sess, cmd, &args, start.elapsed().as_nanos() as u64, failed);
        }
        return r;
    }
    Ok(execute(b, sess, cmd, args, out, scratch, mode))
}

/// Whether `known.scripts[i]` is one of the `_RO` forms.
pub(crate) fn script_read_only(i: usize) -> bool {
    matches!(i, 2 | 3 | 5)
}

/// Which script command `known.scripts[i]` is: EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL,
/// FCALL_RO.
pub(crate) fn script_kind(i: usize) -> crate::script::Kind {
    match i {
        0 | 2 => crate::script::Kind::Eval,
        1 | 3 => crate::script::Kind::EvalSha,
        _ => crate::script::Kind::Fcall,
    }
}

/// The engine settings a command runs with: while CLIENT PAUSE holds the dataset still, a
/// read of an expired key says it is missing but leaves it, as on a replica (Valkey's
/// PAUSE_ACTION_EXPIRE). `held` keeps that copy alive; it is made only during a pause.
pub(crate) fn dataset_config<'a>(
    b: &Batch<'a>,
    held: &'a mut Option<EngineConfig>,
    sess: &Session,
) -> &'a EngineConfig {
    // What our primary sends sees keys its TTLs passed: the primary's DEL is on its way.
    if sess.has_flag(crate::session::flag::MASTER) {
        return held.insert(EngineConfig { from_primary: true, ..b.engine.clone() });
    }
    if !b.srv.pause.holds_dataset(b.now_ms) {
        return b.engine;
    }
    held.insert(EngineConfig { replica: true, ..b.engine.clone() })
}

/// Whether CLIENT PAUSE holds this command back: every command under `ALL`; under `WRITE`,
/// one that may write or replicate, or an EXEC with one queued (Valkey's processCommand,
/// which checks before queueing, so a write is not even queued during a pause).
fn paused(b: &Batch<'_>, cmd: &Command, cflags: u32, sess: &Session) -> bool {
    if cmd.id == b.srv.known.exec
        && let Some(m) = &sess.multi
    {
        return transaction_paused(b, m);
    }
    use crate::pause::Mode;
    match b.srv.pause.mode(b.now_ms) {
        Mode::None => false,
        Mode::All => true,
        Mode::Write => cflags & (flags::WRITE | flags::MAY_REPLICATE) != 0,
    }
}

/// Whether the pause holds back the EXEC of `multi`: any EXEC under `ALL`, one with a
/// command that may write or replicate under `WRITE`.
pub(crate) fn transaction_paused(b: &Batch<'_>, multi: &crate::session::MultiState) -> bool {
    use crate::pause::Mode;
    match b.srv.pause.mode(b.now_ms) {
        Mode::None => false,
        Mode::All => true,
        Mode::Write => queues(multi, flags::WRITE | flags::MAY_REPLICATE),
    }
}

/// Whether `multi` has a queued command with one of `mask`'s flags.
fn queues(multi: &crate::session::MultiState, mask: u32) -> bool {
    multi.queue.iter().any(|q| q.flags & mask != 0)
}

/// Cluster routing, before any slot lock: redirects and refusals are answered here. When the
/// router needs the keys counted under the slot locks, an engine command and EXEC leave that
/// to the code that takes their locks (`scratch.pending`); any other call (queued, or a server
/// command) is checked now, as Valkey decides at queue time.
fn route(
    b: &Batch<'_>,
    cmd: &Command,
    cflags: u32,
    sess: &Session,
    args: &Args<'_>,
    scratch: &mut Scratch,
) -> Result<(), CommandError> {
    let Some(pending) = crate::routing::route(b, cmd, cflags, sess, &scratch.plan)? else { return Ok(()) };
    let queued = sess.multi.is_some() && !b.srv.known.multi_immediate.contains(&cmd.id);
    if cmd.id == b.srv.known.exec || (cmd.spec.engine().is_some() && !queued) {
        scratch.pending = Some(pending);
        return Ok(());
    }
    // Queued commands are routed again by EXEC, under its locks; a server command has none.
    if pending.needs_keys() { crate::routing::check_keys_now(b, args, &scratch.plan, &pending) } else { Ok(()) }
}

/// A call the router redirected or refused: a rejected call, whose error flags the
/// transaction being queued; EXEC instead discards its transaction and answers with the
/// redirect itself, not EXECABORT (Valkey's processCommand).
fn redirected(b: &Batch<'_>, sess: &mut Session, id: usize, e: CommandError) -> CommandError {
    b.srv.stats.reject(Some(id));
    if id == b.srv.known.exec && sess.multi.is_some() {
        crate::cmd::multi::discard_transaction(b.srv, sess);
    } else {
        flag_transaction(sess);
    }
    e
}

/// An error while queueing a transaction makes EXEC fail with EXECABORT.
fn flag_transaction(sess: &mut Session) {
    if let Some(m) = &mut sess.multi {
        m.aborted = true;
    }
}

/// Plans the call once, right after lookup and arity: its keys, their slots, its lock ids
/// and lock scope. Everything after this reads the plan instead of the key specs. EXEC's plan
/// is the union of its transaction's plans; a re-run blocked command brings its own.
fn plan_call(
    b: &Batch<'_>,
    cmd: &Command,
    sess: &Session,
    args: &Args<'_>,
    scratch: &mut Scratch,
    plan: Option<&Plan>,
) {
    if let Some(p) = plan {
        scratch.plan.clone_from(p);
        return;
    }
    if cmd.id == b.srv.known.exec {
        crate::multi::plan_union(b, sess, &mut scratch.plan);
        return;
    }
    let dbs = b.srv.ks.databases();
    match cmd.spec {
        Spec::Engine(s) => {
            let lock = s.handler.as_ref().map_or(LockPlan::Keys, |h| h.plan);
            scratch.plan.compute(s, lock, args, sess.db, dbs, &scratch.hint);
        }
        // Server commands take no slot locks to run; their keys (WATCH) and shard channels
        // are planned for routing all the same.
        Spec::Server(s) => scratch.plan.compute(s, LockPlan::Keys, args, sess.db, dbs, &scratch.hint),
    }
}

/// Queues a command between MULTI and EXEC, with its plan.
fn queue(
    b: &Batch<'_>,
    cmd: &Command,
    cflags: u32,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
    plan: &Plan,
) -> Result<Flow, CommandError> {
    // Valkey refuses to queue a command that may grow memory while over the limit.
    check_memory(b, cflags, sess, false)?;
    let argv = args.iter().map(<[u8]>::to_vec).collect();
    if let Some(m) = &mut sess.multi {
        m.queue.push(Queued { cmd: cmd.id, flags: cflags, argv, plan: plan.clone() });
    }
    sess.sync_counts();
    out.simple("QUEUED");
    Ok(Flow::Continue)
}

fn check_arity(cmd: &Command, args: &Args<'_>) -> Result<(), CommandError> {
    let arity = cmd.spec.arity();
    let argc = args.len() as i32;
    if (arity > 0 && arity != argc) || argc < -arity {
        return Err(CommandError::WrongArity(cmd.full_name.clone()));
    }
    Ok(())
}

/// NOAUTH, while the default user has a password or is off (Valkey's `authRequired`, which
/// follows the user: clearing `requirepass` lets waiting clients in).
fn check_auth(b: &Batch<'_>, cmd: &Command, sess: &Session) -> Result<(), CommandError> {
    if !sess.authenticated && cmd.spec.flags() & flags::NO_AUTH == 0 && b.srv.acl.auth_required() {
        return Err(CommandError::NoAuth);
    }
    Ok(())
}

/// The ACL check, before routing: a client is never told where keys it may not touch live.
/// For a user who may run everything (the default user unless configured) this is one
/// relaxed load; see [`crate::acl::Acl::check`].
fn check_acl(b: &Batch<'_>, cmd: &Command, sess: &Session, args: &Args<'_>) -> Result<(), CommandError> {
    let Some(user) = &sess.acl_user else { return Ok(()) };
    b.srv.acl.check(user, cmd, args).map_err(|d| crate::acl::refuse(b.srv, sess, cmd, args, d))
}

/// A RESP2 client in subscribed mode may only (un)subscribe, ping, quit and reset; the
/// unsubscribe commands are refused outside subscribed mode.
fn check_pubsub_context(b: &Batch<'_>, cmd: &Command, sess: &Session, out: &ReplyBuf) -> Result<(), CommandError> {
    let known = &b.srv.known;
    if sess.subscribed() && !out.is_resp3() && !known.pubsub_allowed.contains(&cmd.id) {
        return Err(CommandError::err(format!(
            "Can't execute '{}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context",
            cmd.full_name
        )));
    }
    if !sess.subscribed() && known.unsubscribes.contains(&cmd.id) {
        return Err(CommandError::raw(format!("NOSUB '{}' command executed not in subscribed mode", cmd.full_name)));
    }
    Ok(())
}

/// The replication checks of Valkey's processCommand: writes on a read-only replica
/// (READONLY) or on a primary without enough good replicas (NOREPLICAS), anything but stale
/// commands on a replica whose link is down when `replica-serve-stale-data` is off
/// (MASTERDOWN), and anything but loading commands while a full sync loads (LOADING). An EXEC
/// counts as a write when a write is queued.
fn check_replication(b: &Batch<'_>, cmd: &Command, flags: u32, sess: &Session) -> Result<(), CommandError> {
    let repl = &b.srv.repl;
    let replica = repl.is_replica();
    let loading = repl.loading() || b.srv.persist.loading();
    // Valkey's writeCommandsDeniedByDiskError: a failed background save first, then the AOF.
    let misconf = if crate::persistence::denies_writes(b.srv, b.rt) {
        Some(std::borrow::Cow::Borrowed(crate::persistence::MISCONF))
    } else {
        b.srv.aof.misconf().map(std::borrow::Cow::Owned)
    };
    if !replica && b.rt.min_replicas_to_write == 0 && !loading && misconf.is_none() {
        return Ok(());
    }
    let writes = flags & flags::WRITE != 0
        || (cmd.id == b.srv.known.exec && sess.multi.as_ref().is_some_and(|m| queues(m, flags::WRITE)));
    // Valkey refuses PING too, so a health check notices (processCommand's deny_write_type).
    if let Some(text) = misconf
        && (writes || cmd.id == b.srv.known.ping)
    {
        return Err(CommandError::raw(text));
    }
    if replica {
        if writes && b.rt.replica_read_only {
            return Err(CommandError::raw("READONLY You can't write against a read only replica."));
        }
        // An EXEC is as stale-safe as the least of what it queued (Valkey checks the queued
        // commands' flags at EXEC).
        let stale_ok = if cmd.id == b.srv.known.exec {
            sess.multi.as_ref().is_none_or(|m| m.queue.iter().all(|q| q.flags & flags::STALE != 0))
        } else {
            flags & flags::STALE != 0
        };
        if !stale_ok && !b.rt.replica_serve_stale_data && !repl.link_up() {
            return Err(CommandError::raw(
                "MASTERDOWN Link with MASTER is down and replica-serve-stale-data is set to 'no'.",
            ));
        }
    } else if writes && b.rt.min_replicas_to_write > 0 && !repl.primary.writes_allowed() {
        return Err(CommandError::raw("NOREPLICAS Not enough good replicas to write."));
    }
    if loading && flags & flags::LOADING == 0 {
        return Err(CommandError::raw("LOADING Valkey is loading the dataset in memory"));
    }
    // While a full sync loads beside the data clients use, what would change the node's
    // role or persistence under it waits (Valkey's CMD_NO_ASYNC_LOADING).
    if replica && flags & flags::NO_ASYNC_LOADING != 0 && repl.async_loading() {
        return Err(CommandError::raw("LOADING Valkey is loading the dataset in memory"));
    }
    Ok(())
}

/// Over `maxmemory`, try to evict; a command that may grow memory is then refused with OOM
/// if the server is still over the limit (Valkey's `performEvictions` + `CMD_DENYOOM`).
fn check_memory(b: &Batch<'_>, cflags: u32, sess: &Session, deny: bool) -> Result<(), CommandError> {
    // A pause holds the dataset still: no eviction, so no OOM either (Valkey's
    // PAUSE_ACTION_EVICT).
    if b.engine.maxmemory == 0 || b.srv.pause.holds_dataset(b.now_ms) || sess.has_flag(crate::session::flag::MASTER) {
        return Ok(());
    }
    let over = evict::perform(b.srv, b.engine, b.now_ms);
    let denyoom = deny || cflags & flags::DENYOOM != 0;
    if over && denyoom && !sess.has_flag(crate::session::flag::NO_EVICT) {
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
    mode: BlockMode,
) -> Flow {
    let mark = out.len();
    let start = Instant::now();
    let result = match cmd.spec.engine() {
        Some(ecmd) => run_engine(b, sess, cmd, ecmd, args, out, scratch, mode),
        None => match cmd.spec.server() {
            Some(f) => f(b.srv, sess, args, out),
            None => Err(CommandError::err("internal error: command without handler")),
        },
    };
    let nanos = start.elapsed().as_nanos() as u64;
    let failed = result.is_err();
    if !failed && cmd.id == b.srv.known.flushall {
        crate::persistence::after_flushall(b.srv);
    }
    if !failed
        && cmd.spec.flags() & flags::WRITE != 0
        && b.engine.replica
        && !sess.has_flag(crate::session::flag::MASTER)
        && b.srv.repl.is_replica()
    {
        b.srv.repl.note_own_write(sess.db, &args, scratch.plan.keys());
    }
    let flow = match result {
        Ok(flow) => flow,
        Err(e) => {
            out.truncate(mark);
            reply_error(b.srv, out, &e);
            Flow::Continue
        }
    };
    // A command that blocked is accounted when it is served, as in Valkey; MONITOR sees it
    // now, once (not again when it is served or run again). So is one waiting on another
    // node, when its second turn ends.
    if matches!(flow, Flow::Block(_) | Flow::Remote(_)) {
        if !sess.reprocessing {
            feed_monitors_for(b, sess, cmd, &args, false);
        }
    } else {
        account(b, sess, cmd, &args, nanos, failed);
    }
    flow
}

/// commandstats, the slow log, the latency monitor and the MONITOR feed for one call.
pub(crate) fn account(b: &Batch<'_>, sess: &Session, cmd: &Command, args: &Args<'_>, nanos: u64, failed: bool) {
    account_as(b, sess, cmd, args, nanos, failed, false);
}

/// [`account`] for a call a script made: MONITOR shows it from `lua`, as Valkey does.
pub(crate) fn account_as(
    b: &Batch<'_>,
    sess: &Session,
    cmd: &Command,
    args: &Args<'_>,
    nanos: u64,
    failed: bool,
    from_script: bool,
) {
    b.srv.stats.call(cmd.id, nanos, failed, b.rt.latency_tracking);
    account_client(b, sess, cmd, args, nanos);
    if !sess.reprocessing {
        feed_monitors_for(b, sess, cmd, args, from_script);
    }
}

/// What `account` does for the calling client: its counters, the slow log (which names it)
/// and the latency monitor. A blocked command served by another connection was counted in
/// commandstats there and gets this part when its reply arrives, as Valkey logs a blocked
/// command only once it is unblocked.
pub(crate) fn account_client(b: &Batch<'_>, sess: &Session, cmd: &Command, args: &Args<'_>, nanos: u64) {
    sess.info.commands.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    sess.info.last_cmd.store(cmd.id as u32 + 1, std::sync::atomic::Ordering::Relaxed);
    record_slow(b, sess, cmd, args, nanos);
}

/// The MONITOR feed for a call, unless the command is one MONITOR does not show.
fn feed_monitors_for(b: &Batch<'_>, sess: &Session, cmd: &Command, args: &Args<'_>, from_script: bool) {
    if b.srv.monitors.load(std::sync::atomic::Ordering::Relaxed) > 0
        && cmd.spec.flags() & (flags::SKIP_MONITOR | flags::ADMIN) == 0
    {
        feed_monitors(b.srv, sess, args, from_script);
    }
}

#[allow(clippy::too_many_arguments)]
fn run_engine(
    b: &Batch<'_>,
    sess: &mut Session,
    cmd: &Command,
    ecmd: &EngineCmd,
    args: Args<'_>,
    out: &mut ReplyBuf,
    scratch: &mut Scratch,
    mode: BlockMode,
) -> Result<Flow, CommandError> {
    let pending = scratch.pending.take();
    let plan = &scratch.plan;
    if plan.keys_invalid() {
        return Err(CommandError::Syntax);
    }
    let mut held = None;
    let cfg = dataset_config(b, &mut held, sess);
    // A command's lock-free step (RESTORE's decoding) runs before any slot is locked.
    let prepared = ecmd.plan.prepare().map(|f| f(&args, cfg));
    // Declared before the locks: the lock set borrows the same lifetime as the events sink.
    let events = CmdEvents::new(b.srv, b.rt.notify).by(sess.id);
    // Locks a call asked for on top of its plan's, to start over with (see `Ctx::restart`).
    let mut extra: Vec<LockId> = Vec::new();
    let mut restarts = 0;
    let mut prepared = prepared;
    let full_key_access = full_key_access(b, sess, cmd, ecmd, &args);
    let mut local = std::mem::take(&mut sess.local);
    // The call's context (its lock set inline) stays where it was built: moving it out of the
    // loop copied a kilobyte or two per command, twice with its construction (callgrind: 200
    // instructions of memcpy per SET at pipeline 1). What follows the call runs in the loop.
    let (flow, db, r) = loop {
        let mut locks = lock_for(b, plan, &extra, restarts, sess.db);
        // The pause again, under the locks: a pause that began after the check above is waited
        // out here, before the call changes anything (see `Pause::drain_writes`).
        if scratch.resume.is_none()
            && !sess.has_flag(crate::session::flag::MASTER)
            && paused(b, cmd, cmd.spec.flags(), sess)
        {
            drop(locks);
            sess.local = local;
            return Ok(Flow::Paused(args.iter().map(<[u8]>::to_vec).collect()));
        }
        if let Some(route) = &pending {
            // ASK or TRYAGAIN: which keys exist, seen under the locks the command will run with.
            let confirmed = crate::routing::confirm(b, plan, route, |seen| {
                seen.count(&b.srv.ks, &mut locks, sess.db, &args, plan, b.now_ms)
            });
            if let Err(e) = confirmed {
                sess.local = local;
                return Err(e);
            }
        }
        plan.seed(&mut locks, &args);
        let no_touch = sess.has_flag(crate::session::flag::NO_TOUCH);
        let mut ctx = Ctx::new(&b.srv.ks, sess.db, b.now_ms, cfg, &mut local, no_touch, &events, locks);
        ctx.block_mode = mode;
        ctx.resume = scratch.resume.take();
        ctx.prepared = prepared.take();
        ctx.may_restart = true;
        ctx.full_key_access = full_key_access;
        ctx.effects = std::mem::take(&mut scratch.effects);
        ctx.effects.begin(b.srv.ks.sink().active());
        let dirty = ctx.stats.dirty;
        let mark = out.len();
        let r = (ecmd.run)(&mut ctx, args, out);
        let Some(more) = ctx.restart.take() else {
            // Recorded under the slot locks the read took: a write of these keys either ran
            // before the read or finds them recorded and invalidates them.
            if sess.tracking.is_some() && cmd.spec.flags() & flags::READONLY != 0 {
                crate::tracking::remember_reads(b.srv, sess, &args, plan.keys());
            }
            ctx.finish_call(sess.db, &args, dirty);
            let mut flow = Flow::Continue;
            if let Some(request) = ctx.remote.take()
                && r.is_ok()
            {
                let argv = args.iter().map(<[u8]>::to_vec).collect();
                flow = Flow::Remote(Box::new(RemoteWait { request, argv, plan: plan.clone() }));
            }
            if let Some(req) = ctx.block.take()
                && r.is_ok()
            {
                // Registered before the locks are released, so no write can slip in unnoticed.
                let argv = req.argv.unwrap_or_else(|| args.iter().map(<[u8]>::to_vec).collect());
                let (waiter, rx) = Waiter::new(sess.id, ctx.db, cmd.id, argv, plan.clone(), out.protocol(), req.keys);
                waiter.independent.store(req.independent, std::sync::atomic::Ordering::Relaxed);
                if let Some(u) = &sess.acl_user {
                    let _ = waiter.acl_user.set(u.clone());
                }
                b.srv.blocked.register(waiter.clone());
                flow = Flow::Block(BlockWait { waiter, rx, deadline_ms: req.deadline_ms });
            }
            serve_blocked(b, &mut ctx, &events);
            scratch.effects = std::mem::take(&mut ctx.effects);
            let db = ctx.db;
            drop(ctx);
            break (flow, db, r);
        };
        // The call read keys it did not declare and met a busy lock it could not wait for in
        // order (SORT BY/GET). It wrote nothing, but what it found expired is gone: that goes
        // to the stream before the locks are released, as any call's effects do.
        out.truncate(mark);
        ctx.emit();
        serve_blocked(b, &mut ctx, &events);
        scratch.effects = std::mem::take(&mut ctx.effects);
        drop(ctx);
        extra.extend(more);
        restarts += 1;
    };
    sess.local = local;
    if db != sess.db {
        sess.db = db;
        sess.info.db.store(db as u32, std::sync::atomic::Ordering::Relaxed);
    }
    r.map(|()| flow)
}

/// Whether the caller may read every key for this call, for a command that reads keys it does
/// not name (SORT's BY and GET patterns, which Valkey allows only with unrestricted read
/// access to keys); true for every other command, without asking the ACL.
pub(crate) fn full_key_access(b: &Batch<'_>, sess: &Session, cmd: &Command, ecmd: &EngineCmd, args: &Args<'_>) -> bool {
    if !matches!(ecmd.plan, LockPlan::KeysAndUndeclared(_)) {
        return true;
    }
    sess.acl_user.as_ref().is_none_or(|u| b.srv.acl.reads_every_key(u, cmd, args))
}

/// Runs of one call that started over to take the locks of keys it did not declare up front,
/// before its next run takes every slot of its database instead.
const MAX_RESTARTS: usize = 4;

/// The locks of an engine call's run: its plan's, plus those an earlier run of it asked for
/// (sorted, in order, so nothing can deadlock), or after [`MAX_RESTARTS`] every slot of the
/// databases involved, which ends any further asking.
fn lock_for<'k>(b: &Batch<'k>, plan: &Plan, extra: &[LockId], restarts: usize, db: usize) -> LockSet<'k> {
    if extra.is_empty() {
        return b.srv.ks.lock(plan.locks());
    }
    let mut ids: Vec<LockId> = plan.locks().iter().chain(extra).copied().collect();
    if restarts >= MAX_RESTARTS {
        let mut dbs: Vec<usize> = ids.iter().map(|&id| id as usize / SLOTS).collect();
        dbs.push(db);
        return b.srv.ks.lock_all(&dbs);
    }
    ids.sort_unstable();
    ids.dedup();
    b.srv.ks.lock(&ids)
}

/// Serves clients blocked on keys the command touched, in arrival order, while the command's
/// locks are still held (Valkey's `handleClientsBlockedOnKeys`). A waiter whose command needs
/// a lock this command does not hold is retried by its own connection instead, since waiting
/// for that lock here could deadlock.
pub(crate) fn serve_blocked(b: &Batch<'_>, ctx: &mut Ctx<'_>, events: &CmdEvents<'_>) {
    if !events.any_ready() {
        return;
    }
    let mut ready: std::collections::VecDeque<(usize, Vec<u8>)> = events.take_ready().into();
    let mut budget = 100_000;
    while let Some((db, key)) = ready.pop_front() {
        // Waiters in arrival order, as they were when the key became ready; one already
        // served or gone by its turn cannot be claimed and is passed over.
        let waiters = b.srv.blocked.waiters(db, &key);
        // Set when a pop found nothing: the pops behind it would find nothing either, but
        // stream readers, which each wait for their own id, are still tried.
        let mut pops_done = false;
        for w in waiters {
            if budget == 0 {
                break;
            }
            if pops_done && !w.independent.load(std::sync::atomic::Ordering::Relaxed) {
                continue;
            }
            budget -= 1;
            let Some(tx) = w.claim() else {
                // Timing out right now: it will unregister itself.
                b.srv.blocked.unregister(&w);
                continue;
            };
            let cmd = b.srv.registry.get(w.cmd);
            let Some(ecmd) = cmd.spec.engine() else {
                b.srv.blocked.unregister(&w);
                let _ = tx.send(Wakeup::Retry);
                continue;
            };
            let (flat, spans) = flatten(&w.args);
            let args = Args::from_parts(&flat, &spans);
            // Refused now: its own connection runs it again, through dispatch's ACL check.
            if w.acl_user.get().is_some_and(|u| b.srv.acl.check(u, cmd, &args).is_err()) {
                b.srv.blocked.unregister(&w);
                let _ = tx.send(Wakeup::Retry);
                continue;
            }
            // The plan it was blocked with: its keys are the same, and so is its database.
            let ks = ctx.ks;
            if !ctx.locks.try_extend(ks, w.plan.locks()) {
                b.srv.blocked.unregister(&w);
                let _ = tx.send(Wakeup::Retry);
                continue;
            }
            let mut reply = ReplyBuf::new();
            reply.set_protocol(w.proto);
            let (saved_db, saved_mode) = (ctx.db, ctx.block_mode);
            ctx.db = w.db;
            ctx.block_mode = BlockMode::Serving;
            let start = Instant::now();
            ctx.effects.begin(ctx.ks.sink().active());
            let dirty = ctx.stats.dirty;
            let r = (ecmd.run)(ctx, args, &mut reply);
            ctx.finish_call(w.db, &args, dirty);
            let still_blocked = ctx.block.take();
            ctx.db = saved_db;
            ctx.block_mode = saved_mode;
            if let Some(req) = still_blocked {
                w.unclaim(tx);
                if !req.independent {
                    // Nothing for the first pop in line means nothing for the pops after it.
                    pops_done = true;
                }
                continue;
            }
            if let Err(e) = &r {
                reply.truncate(0);
                reply_error(b.srv, &mut reply, e);
            }
            b.srv.blocked.unregister(&w);
            let nanos = start.elapsed().as_nanos() as u64;
            // commandstats here, so the call counts even if its client is gone by now; the
            // slow log, which names the client, is written by the client's own connection.
            b.srv.stats.call(cmd.id, nanos, r.is_err(), b.rt.latency_tracking);
            let _ = tx.send(Wakeup::Reply(reply.as_bytes().to_vec(), nanos));
            // Serving may have made other keys ready (BLMOVE pushes to its destination).
            ready.extend(events.take_ready());
        }
    }
}

/// A stored argument vector as one buffer and the spans `Args::from_parts` takes.
pub(crate) fn flatten(argv: &[Vec<u8>]) -> (Vec<u8>, Vec<(usize, usize)>) {
    let mut at = 0;
    let spans = argv
        .iter()
        .map(|a| {
            at += a.len();
            (at - a.len(), at)
        })
        .collect();
    (argv.concat(), spans)
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
    // Valkey judges a call by the settings after it ran: the CONFIG SET that turns the slow
    // log on is its first entry. Only admin commands change settings, and they are rare
    // enough to pay for a fresh look.
    let fresh;
    let rt = if cmd.spec.flags() & flags::ADMIN != 0 {
        fresh = b.srv.rt.load();
        &**fresh
    } else {
        b.rt
    };
    let threshold = rt.slowlog_threshold;
    if threshold >= 0
        && micros as i64 >= threshold
        && rt.slowlog_max_len > 0
        && cmd.spec.flags() & flags::SKIP_SLOWLOG == 0
    {
        let name = sess.info.name.lock().clone();
        b.srv.slowlog.lock().push(args, b.now_ms / 1000, micros, sess.info.addr.to_string(), name, rt.slowlog_max_len);
    }
    let ms = micros / 1000;
    if rt.latency_threshold > 0 && ms >= rt.latency_threshold {
        let event = if cmd.spec.flags() & flags::FAST != 0 { "fast-command" } else { "command" };
        b.srv.latency.lock().add(event, b.now_ms / 1000, ms);
    }
}

/// Sends `+<time> [<db> <addr>] "arg" ...` to MONITOR clients.
fn feed_monitors(srv: &Server, sess: &Session, args: &Args<'_>, from_script: bool) {
    let us = unix_us();
    let addr = if from_script { "lua".to_string() } else { sess.info.addr.monitor_text() };
    let mut line = format!("{}.{:06} [{} {addr}]", us / 1_000_000, us % 1_000_000, sess.db);
    let secret = secret_args(args);
    for (i, a) in args.iter().enumerate() {
        line.push(' ');
        if secret(i) {
            line.push_str("\"(redacted)\"");
        } else {
            hotkv_protocol::repr(&mut line, a);
        }
    }
    let _ = srv.monitor_tx.send(line.into());
}

/// Which arguments of a call are secrets, which MONITOR and SLOWLOG show as `(redacted)`, as
/// Valkey's `redactClientCommandArgument` does: AUTH's arguments, HELLO's `AUTH username
/// password`, every argument of ACL SETUSER and DELUSER and ACL GETUSER's user, the values
/// CONFIG SET gives secret directives (requirepass, masterauth...), and MIGRATE's `AUTH
/// password` and `AUTH2 username password` (before its KEYS list, which holds key names).
/// AUTH is redacted whole, even in a form Valkey refuses before redacting.
pub fn secret_args(args: &Args<'_>) -> impl Fn(usize) -> bool + use<> {
    // Every argument from `from` on, and the ones listed.
    let mut from = usize::MAX;
    let mut listed: Vec<usize> = Vec::new();
    let name = args.get(0);
    let sub = |i: usize, s: &[u8]| args.opt(i).is_some_and(|a| a.eq_ignore_ascii_case(s));
    if name.eq_ignore_ascii_case(b"auth") {
        from = 1;
    } else if name.eq_ignore_ascii_case(b"hello") {
        let mut j = 2;
        while j < args.len() {
            if sub(j, b"auth") && j + 2 < args.len() {
                listed.extend([j + 1, j + 2]);
                j += 3;
            } else if sub(j, b"setname") {
                j += 2;
            } else {
                j += 1;
            }
        }
    } else if name.eq_ignore_ascii_case(b"acl") {
        if sub(1, b"setuser") || sub(1, b"deluser") {
            from = 2;
        } else if sub(1, b"getuser") {
            listed.push(2);
        }
    } else if name.eq_ignore_ascii_case(b"config") && sub(1, b"set") {
        let mut j = 2;
        while j + 1 < args.len() {
            let dir = std::str::from_utf8(args.get(j)).ok().and_then(crate::config::table::find);
            if dir.is_some_and(|d| crate::config::table::TABLE[d].has(crate::config::table::SENSITIVE)) {
                listed.push(j + 1);
            }
            j += 2;
        }
    } else if args.len() > 6 && name.eq_ignore_ascii_case(b"migrate") {
        let mut i = 6;
        while i < args.len() {
            let a = args.get(i);
            if a.eq_ignore_ascii_case(b"keys") {
                break;
            }
            if a.eq_ignore_ascii_case(b"auth") {
                listed.push(i + 1);
                i += 2;
            } else if a.eq_ignore_ascii_case(b"auth2") {
                listed.extend([i + 1, i + 2]);
                i += 3;
            } else {
                i += 1;
            }
        }
    }
    move |i| i >= from || listed.contains(&i)
}
