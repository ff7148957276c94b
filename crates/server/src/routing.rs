//! Cluster routing, dispatch's side of it: asks the server's `SlotRouter` where a planned
//! call goes, at the two points the engine's routing contract names (`hotkv_engine::route`):
//!
//! * [`route`], right after authentication and before anything takes a slot lock: MOVED,
//!   CROSSSLOT and CLUSTERDOWN are answered here, for queued MULTI commands too (Valkey routes
//!   at queue time, and a refused command makes EXEC fail with EXECABORT), and for EXEC on the
//!   union of its transaction.
//! * [`route_locked`], under the slot locks, only when the router answered `CheckKeys` (a
//!   slot being migrated): ASK and TRYAGAIN depend on which keys exist, and the locks keep the
//!   answer true while the command runs. Engine commands and EXEC do it under the locks they
//!   run with; a command that runs without slot locks (queued, or a server command such as
//!   WATCH or SPUBLISH) takes its plan's locks just for the count ([`check_keys_now`]).
//!
//! A call without keys or shard channels is never routed, so no router is even asked about
//! PING, CONFIG or DBSIZE.

use hotkv_engine::CommandError;
use hotkv_engine::command::flags;
use hotkv_engine::plan::Plan;
use hotkv_engine::route::{KeyPresence, Route, RouteCtx};
use hotkv_protocol::Args;

use crate::dispatch::Batch;
use crate::registry::Command;
use crate::session::Session;

/// A routing decision that is finished under the call's slot locks ([`confirm`]).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pending {
    ctx: RouteCtx,
    /// The router answered `CheckKeys`: ASK or TRYAGAIN depend on which keys exist.
    check_keys: bool,
    /// The slot table [`route`] decided on: if it changed by the time the locks are held,
    /// the decision is made again there.
    version: Option<u64>,
}

impl Pending {
    /// Whether only the code that takes the call's locks can finish the decision.
    pub(crate) fn needs_keys(&self) -> bool {
        self.check_keys
    }
}

/// Where a planned call goes, decided before any slot lock is taken. `Ok(Some(p))` means the
/// decision is finished under the slot locks: hand `p` to [`confirm`] there. A router whose
/// table never changes (standalone) answers `Ok(None)` for everything it serves.
pub(crate) fn route(
    b: &Batch<'_>,
    cmd: &Command,
    cflags: u32,
    sess: &Session,
    plan: &Plan,
) -> Result<Option<Pending>, CommandError> {
    if plan.slot().is_none() {
        return Ok(None);
    }
    let ctx = route_ctx(b, cmd, cflags, sess);
    let router = &b.srv.router;
    // Read before the decision: a table published after this read is seen under the locks.
    let version = router.table_version();
    match router.route(plan, &ctx) {
        Route::CheckKeys => Ok(Some(Pending { ctx, check_keys: true, version })),
        Route::Ok => Ok(version.map(|_| Pending { ctx, check_keys: false, version })),
        other => other.into_error().map_or(Ok(None), Err),
    }
}

/// Finishes `pending` under the call's slot locks: when the router wants keys counted, or
/// the slot table changed since [`route`], `count` counts them (under those locks) and the
/// router decides again. Otherwise nothing is counted: the common case costs one atomic load.
pub(crate) fn confirm(
    b: &Batch<'_>,
    plan: &Plan,
    pending: &Pending,
    count: impl FnOnce(&mut KeyPresence),
) -> Result<(), CommandError> {
    if !pending.check_keys && b.srv.router.table_version() == pending.version {
        return Ok(());
    }
    let mut seen = KeyPresence::default();
    count(&mut seen);
    route_locked(b, plan, &pending.ctx, &seen)
}

/// Where a call goes once `keys` were counted under its slot locks.
fn route_locked(b: &Batch<'_>, plan: &Plan, ctx: &RouteCtx, keys: &KeyPresence) -> Result<(), CommandError> {
    b.srv.router.route_locked(plan, ctx, keys).into_error().map_or(Ok(()), Err)
}

/// [`confirm`] for a call that holds no slot locks of its own at this point: its plan's
/// locks are taken just to count its keys, so the count is one consistent view.
pub(crate) fn check_keys_now(
    b: &Batch<'_>,
    args: &Args<'_>,
    plan: &Plan,
    pending: &Pending,
) -> Result<(), CommandError> {
    let ks = &b.srv.ks;
    let mut locks = ks.lock(plan.locks());
    confirm(b, plan, pending, |seen| seen.count(ks, &mut locks, plan.db(), args, plan, b.now_ms))
}

/// What the router needs to know about the client and the command.
/// `cflags` are the call's flags as dispatch judged them (a script's from its shebang).
fn route_ctx(b: &Batch<'_>, cmd: &Command, cflags: u32, sess: &Session) -> RouteCtx {
    let f = cflags;
    // EXEC writes if any queued command may (Valkey's `mstate.cmd_flags`).
    let write = f & flags::WRITE != 0
        || (cmd.id == b.srv.known.exec
            && sess.multi.as_ref().is_some_and(|m| m.queue.iter().any(|q| q.flags & flags::WRITE != 0)));
    RouteCtx {
        tls: sess.tls,
        ipv6: sess.ipv6(),
        asking: sess.asking || f & flags::ASKING != 0,
        readonly: sess.readonly,
        write,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, OnceLock, Weak};

    use hotkv_engine::keyspace::{LockId, lock_id};
    use hotkv_engine::route::SlotRouter;
    use hotkv_engine::slot::key_slot;
    use parking_lot::Mutex;

    use super::*;
    use crate::cmd::testutil::{TestClient, client, server_with_router};
    use crate::registry::Flow;
    use crate::server::Server;

    /// One call of [`SlotRouter::route`] as the fake saw it.
    #[derive(Clone, Debug)]
    struct Seen {
        slot: u16,
        cross: bool,
        locks: Vec<LockId>,
        ctx: RouteCtx,
        /// Whether the slot's lock (database 0) was held at that moment.
        held: bool,
    }

    /// A router with a scripted slot table: `moved` slots live on 10.0.0.9 (port 7000, or
    /// 7100 for TLS clients), `migrating` slots go to 10.0.0.8 for missing keys.
    #[derive(Default)]
    struct Fake {
        moved: Mutex<Vec<u16>>,
        everything_moved: bool,
        migrating: Mutex<Vec<u16>>,
        /// A slot that starts migrating right after the next `route` answered (a SETSLOT
        /// that lands between the decision and the locks).
        migrates_after_route: Mutex<Option<u16>>,
        version: std::sync::atomic::AtomicU64,
        seen: Mutex<Vec<Seen>>,
        locked: Mutex<Vec<(KeyPresence, bool)>>,
        srv: OnceLock<Weak<Server>>,
    }

    impl Fake {
        fn held(&self, slot: u16) -> bool {
            let srv = self.srv.get().and_then(Weak::upgrade).expect("the test server is alive");
            srv.ks.db(0).slot(slot).try_lock().is_none()
        }
    }

    impl SlotRouter for Fake {
        fn route(&self, plan: &Plan, ctx: &RouteCtx) -> Route {
            let slot = plan.slot().expect("only calls with keys are routed");
            let seen = Seen {
                slot,
                cross: plan.is_cross_slot(),
                locks: plan.locks().to_vec(),
                ctx: *ctx,
                held: self.held(slot),
            };
            self.seen.lock().push(seen);
            if plan.is_cross_slot() {
                return Route::CrossSlot;
            }
            if self.everything_moved || self.moved.lock().contains(&slot) {
                let addr = if ctx.tls { "10.0.0.9:7100" } else { "10.0.0.9:7000" };
                return Route::Moved { slot, addr: addr.into() };
            }
            if self.migrating.lock().contains(&slot) {
                return Route::CheckKeys;
            }
            if let Some(slot) = self.migrates_after_route.lock().take() {
                self.migrating.lock().push(slot);
                self.version.fetch_add(1, std::sync::atomic::Ordering::Release);
            }
            Route::Ok
        }

        fn table_version(&self) -> Option<u64> {
            Some(self.version.load(std::sync::atomic::Ordering::Acquire))
        }

        fn route_locked(&self, plan: &Plan, _: &RouteCtx, keys: &KeyPresence) -> Route {
            let slot = plan.slot().expect("only calls with keys are routed");
            self.locked.lock().push((keys.clone(), self.held(slot)));
            match (keys.present, keys.missing) {
                (0, m) if m > 0 => Route::Ask { slot, addr: "10.0.0.8:7000".into() },
                (p, m) if p > 0 && m > 0 => Route::TryAgain,
                _ => Route::Ok,
            }
        }
    }

    fn setup(fake: Fake) -> (Arc<Server>, Arc<Fake>, TestClient) {
        let fake = Arc::new(fake);
        let srv = server_with_router(fake.clone());
        let _ = fake.srv.set(Arc::downgrade(&srv));
        let c = client(&srv, 46000);
        (srv, fake, c)
    }

    fn slot(key: &str) -> u16 {
        key_slot(key.as_bytes())
    }

    const CROSSSLOT: &str = "-CROSSSLOT Keys in request don't hash to the same slot\r\n";
    const EXECABORT: &str = "-EXECABORT Transaction discarded because of previous errors.\r\n";

    #[test]
    fn moved_is_decided_before_any_lock_is_taken() {
        let (srv, fake, mut c) = setup(Fake { moved: Mutex::new(vec![slot("foo")]), ..Fake::default() });
        // Another thread holds the key's slot: a dispatch that tried to lock it would wait.
        let guard = srv.ks.db(0).slot(slot("foo")).lock();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::scope(|s| {
            s.spawn(|| {
                let _ = tx.send(c.run(&srv, &["GET", "foo"]));
            });
            let reply = rx.recv_timeout(std::time::Duration::from_secs(10));
            drop(guard);
            assert_eq!(reply.as_deref(), Ok("-MOVED 12182 10.0.0.9:7000\r\n"), "answered without the slot lock");
        });
        assert!(fake.locked.lock().is_empty(), "no under-lock step for MOVED");
        // A TLS client is sent to the TLS port; the router chose it from the context.
        c.sess.tls = true;
        assert_eq!(c.run(&srv, &["SET", "foo", "1"]), "-MOVED 12182 10.0.0.9:7100\r\n");
        let last = fake.seen.lock().last().cloned().expect("routed");
        assert!(last.ctx.tls && last.ctx.write && !last.held, "{last:?}");
        c.sess.tls = false;
        assert_eq!(c.run(&srv, &["GET", "bar"]), "$-1\r\n", "other slots are served here");
        let info = c.run(&srv, &["INFO", "errorstats"]);
        assert!(info.contains("errorstat_MOVED:count=2"), "{info}");
        assert!(c.run(&srv, &["INFO", "commandstats"]).contains("cmdstat_get:calls=1,"), "rejected calls do not run");
    }

    #[test]
    fn crossslot_for_keys_in_several_slots() {
        let (srv, fake, mut c) = setup(Fake::default());
        assert_eq!(c.run(&srv, &["MSET", "foo", "1", "bar", "2"]), CROSSSLOT);
        assert_eq!(c.run(&srv, &["DBSIZE"]), ":0\r\n", "nothing was written");
        assert_eq!(c.run(&srv, &["MSET", "{t}a", "1", "{t}b", "2"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["DEL", "foo", "{t}a"]), CROSSSLOT);
        let seen = fake.seen.lock();
        assert_eq!(seen.iter().map(|s| s.cross).collect::<Vec<_>>(), [true, false, true]);
        assert!(seen.iter().all(|s| !s.held));
    }

    #[test]
    fn a_call_without_keys_is_never_redirected() {
        let (srv, fake, mut c) = setup(Fake { everything_moved: true, ..Fake::default() });
        assert_eq!(c.run(&srv, &["PING"]), "+PONG\r\n");
        assert_eq!(c.run(&srv, &["DBSIZE"]), ":0\r\n");
        assert_eq!(c.run(&srv, &["KEYS", "*"]), "*0\r\n");
        assert_eq!(c.run(&srv, &["FLUSHALL"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["MULTI"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["PING"]), "+QUEUED\r\n");
        assert_eq!(c.run(&srv, &["EXEC"]), "*1\r\n+PONG\r\n", "an EXEC without keys neither");
        assert!(fake.seen.lock().is_empty(), "the router was never asked");
        // Shard channels route like keys.
        assert_eq!(c.run(&srv, &["SPUBLISH", "foo", "m"]), "-MOVED 12182 10.0.0.9:7000\r\n");
        assert_eq!(c.run(&srv, &["GET", "foo"]), "-MOVED 12182 10.0.0.9:7000\r\n");
    }

    #[test]
    fn queued_commands_are_routed_when_queued() {
        let (srv, _, mut c) = setup(Fake { moved: Mutex::new(vec![slot("foo")]), ..Fake::default() });
        assert_eq!(c.run(&srv, &["MULTI"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["SET", "{t}a", "1"]), "+QUEUED\r\n");
        assert_eq!(c.run(&srv, &["SET", "foo", "1"]), "-MOVED 12182 10.0.0.9:7000\r\n");
        assert_eq!(c.run(&srv, &["EXEC"]), EXECABORT);
        assert_eq!(c.run(&srv, &["EXISTS", "{t}a"]), ":0\r\n");
    }

    #[test]
    fn exec_routes_the_union_of_its_transaction() {
        let (srv, fake, mut c) = setup(Fake::default());
        for cmd in [&["MULTI"][..], &["SET", "foo", "1"], &["GET", "bar"]] {
            assert!(!c.run(&srv, cmd).starts_with('-'), "{cmd:?}");
        }
        // Each command alone is fine; together they span two slots.
        assert_eq!(c.run(&srv, &["EXEC"]), CROSSSLOT);
        let exec = fake.seen.lock().last().cloned().expect("EXEC was routed");
        let mut union = vec![lock_id(0, slot("foo")), lock_id(0, slot("bar"))];
        union.sort_unstable();
        assert_eq!((exec.slot, exec.cross, exec.locks, exec.ctx.write), (slot("foo"), true, union, true));
        assert_eq!(c.run(&srv, &["EXEC"]), "-ERR EXEC without MULTI\r\n", "the transaction was discarded");
        assert_eq!(c.run(&srv, &["EXISTS", "foo"]), ":0\r\n");
        for cmd in [&["MULTI"][..], &["SET", "{t}a", "1"], &["SELECT", "1"], &["GET", "{t}b"]] {
            assert!(!c.run(&srv, cmd).starts_with('-'), "{cmd:?}");
        }
        assert_eq!(c.run(&srv, &["EXEC"]), "*3\r\n+OK\r\n+OK\r\n$-1\r\n");
        let exec = fake.seen.lock().last().cloned().expect("EXEC was routed");
        // GET runs after SELECT 1: the union locks its slot there.
        let union = vec![lock_id(0, slot("t")), lock_id(1, slot("t"))];
        assert_eq!((exec.slot, exec.cross, exec.locks, exec.ctx.write), (slot("t"), false, union, true));
    }

    #[test]
    fn ask_and_tryagain_are_decided_under_the_slot_locks() {
        let (srv, fake, mut c) = setup(Fake::default());
        let mut other = client(&srv, 46001);
        assert_eq!(c.run(&srv, &["SET", "{t}a", "1"]), "+OK\r\n");
        fake.migrating.lock().push(slot("t"));
        assert_eq!(c.run(&srv, &["GET", "{t}a"]), "$1\r\n1\r\n", "all keys here: served");
        assert_eq!(c.run(&srv, &["GET", "{t}b"]), "-ASK 15891 10.0.0.8:7000\r\n");
        assert_eq!(
            c.run(&srv, &["MGET", "{t}a", "{t}b"]),
            "-TRYAGAIN Multiple keys request during rehashing of slot\r\n"
        );
        let counts: Vec<_> =
            fake.locked.lock().iter().map(|(k, held)| (k.present, k.missing, k.several, *held)).collect();
        assert_eq!(counts, [(1, 0, false, true), (0, 1, false, true), (1, 1, true, true)]);
        assert!(fake.seen.lock().iter().all(|s| !s.held), "route() itself runs before the locks");
        // A server command with keys is checked too.
        assert_eq!(c.run(&srv, &["WATCH", "{t}b"]), "-ASK 15891 10.0.0.8:7000\r\n");
        // Queued commands are checked when queued...
        assert_eq!(c.run(&srv, &["MULTI"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["GET", "{t}b"]), "-ASK 15891 10.0.0.8:7000\r\n");
        assert_eq!(c.run(&srv, &["EXEC"]), EXECABORT);
        // ...and EXEC again, under the transaction's locks: the key left in between.
        assert_eq!(c.run(&srv, &["MULTI"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["GET", "{t}a"]), "+QUEUED\r\n");
        assert_eq!(other.run(&srv, &["DEL", "{t}a"]), ":1\r\n");
        assert_eq!(c.run(&srv, &["EXEC"]), "-ASK 15891 10.0.0.8:7000\r\n");
        assert_eq!(fake.locked.lock().last().map(|(k, held)| (k.missing, *held)), Some((1, true)));
        assert_eq!(c.run(&srv, &["EXEC"]), "-ERR EXEC without MULTI\r\n");
    }

    #[test]
    fn a_slot_that_starts_moving_before_the_locks_are_taken_is_routed_again_under_them() {
        let (srv, fake, mut c) = setup(Fake::default());
        assert_eq!(c.run(&srv, &["SET", "{t}a", "1"]), "+OK\r\n");
        assert!(fake.locked.lock().is_empty(), "an unchanged table costs no count");
        // The key this GET wants has left with the slot's migration by the time it holds the
        // lock: answered with ASK, not with the nil of the empty slot here.
        *fake.migrates_after_route.lock() = Some(slot("t"));
        assert_eq!(c.run(&srv, &["GET", "{t}b"]), "-ASK 15891 10.0.0.8:7000\r\n");
        assert_eq!(fake.locked.lock().last().map(|(k, held)| (k.missing, *held)), Some((1, true)));
        fake.migrating.lock().clear();
        *fake.migrates_after_route.lock() = Some(slot("t"));
        c.run(&srv, &["MULTI"]);
        c.run(&srv, &["GET", "{t}b"]);
        assert_eq!(c.run(&srv, &["EXEC"]), "-ASK 15891 10.0.0.8:7000\r\n", "EXEC too");
    }

    #[test]
    fn asking_lasts_for_one_command_or_one_transaction() {
        let (srv, fake, mut c) = setup(Fake::default());
        let asked = |fake: &Fake| fake.seen.lock().last().map(|s| s.ctx.asking);
        c.sess.asking = true;
        c.run(&srv, &["GET", "k"]);
        assert_eq!((asked(&fake), c.sess.asking), (Some(true), false));
        c.run(&srv, &["GET", "k"]);
        assert_eq!(asked(&fake), Some(false));
        c.run(&srv, &["MULTI"]);
        c.sess.asking = true;
        c.run(&srv, &["GET", "k"]);
        assert!(c.sess.asking, "kept inside the transaction");
        c.run(&srv, &["EXEC"]);
        assert_eq!((asked(&fake), c.sess.asking), (Some(true), false));
        // RESTORE-ASKING-style commands carry the flag themselves; READONLY is passed on.
        c.sess.readonly = true;
        c.run(&srv, &["GET", "k"]);
        assert_eq!(
            fake.seen.lock().last().map(|s| (s.ctx.asking, s.ctx.readonly, s.ctx.write)),
            Some((false, true, false))
        );
    }

    #[test]
    fn queued_and_blocked_commands_keep_their_plans() {
        let (srv, _, mut c) = setup(Fake::default());
        c.run(&srv, &["MULTI"]);
        c.run(&srv, &["MSET", "{t}a", "1", "{t}b", "2"]);
        let queued = &c.sess.multi.as_ref().expect("in MULTI").queue[0];
        assert_eq!(queued.plan.keys().iter().map(|k| k.pos).collect::<Vec<_>>(), [1, 3]);
        assert_eq!(queued.plan.locks(), [lock_id(0, slot("t"))]);
        c.run(&srv, &["DISCARD"]);
        let (_, flow) = c.run_flow(&srv, &["BLPOP", "{q}list", "0"]);
        let Flow::Block(wait) = flow else { panic!("BLPOP on nothing blocks") };
        assert_eq!(wait.waiter.plan.locks(), [lock_id(0, slot("q"))]);
        srv.blocked.unregister(&wait.waiter);
    }
}
