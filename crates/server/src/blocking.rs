//! Clients blocked on keys (BLPOP, BZPOPMIN, BLMOVE...).
//!
//! A blocking command that finds no data asks to block ([`hotkv_engine::Ctx::block_on`]); the
//! dispatcher registers a [`Waiter`] on each key *before* releasing the command's locks, so a
//! writer cannot slip in between and leave it asleep. When a command touches a key someone
//! waits on, the dispatcher re-runs the waiters' commands in arrival order, inside the writer's
//! locks, and sends each reply to its connection. A waiter's connection task holds no thread
//! while it waits.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use hotkv_engine::plan::Plan;
use hotkv_protocol::Protocol;
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// How a blocked client is woken.
#[derive(Debug)]
pub enum Wakeup {
    /// Served: these bytes are its reply, and serving it took this many nanoseconds.
    Reply(Vec<u8>, u64),
    /// Could not be served in place (it needs locks the writer could not take): run the
    /// command again normally.
    Retry,
    /// Timed out or `CLIENT UNBLOCK ... TIMEOUT`: run the command again without blocking,
    /// which gives the command's own timeout reply.
    Timeout,
    /// `CLIENT UNBLOCK ... ERROR`.
    Error(String),
    /// The node became a replica: this error, then the connection closes (Valkey's
    /// `disconnectAllBlockedClients`).
    Disconnect(String),
}

/// A client waiting on keys.
pub struct Waiter {
    /// Client id.
    pub client: u64,
    /// The database of its keys.
    pub db: usize,
    /// Registry index of its command.
    pub cmd: usize,
    /// Its arguments.
    pub args: Vec<Vec<u8>>,
    /// Its plan, made when it was first dispatched: serving it takes these locks, and a retry
    /// runs with it instead of planning again.
    pub plan: Plan,
    /// Its protocol, to encode a reply on its behalf.
    pub proto: Protocol,
    /// The keys it waits on.
    pub keys: Vec<Vec<u8>>,
    /// It waits for something of its own (XREAD after its id), so whether it can be served
    /// says nothing about the waiters behind it (see `hotkv_engine::BlockRequest`).
    pub independent: std::sync::atomic::AtomicBool,
    /// Its client's ACL user: whoever serves it checks the call again first, since the rules
    /// may have changed while it waited (Valkey reprocesses an unblocked command).
    pub acl_user: std::sync::OnceLock<Arc<crate::acl::UserCell>>,
    tx: Mutex<Option<oneshot::Sender<Wakeup>>>,
}

impl Waiter {
    /// A waiter and the receiver its connection awaits.
    pub fn new(
        client: u64,
        db: usize,
        cmd: usize,
        args: Vec<Vec<u8>>,
        plan: Plan,
        proto: Protocol,
        keys: Vec<Vec<u8>>,
    ) -> (Arc<Waiter>, oneshot::Receiver<Wakeup>) {
        let (tx, rx) = oneshot::channel();
        (
            Arc::new(Waiter {
                client,
                db,
                cmd,
                args,
                plan,
                proto,
                keys,
                independent: std::sync::atomic::AtomicBool::new(false),
                acl_user: std::sync::OnceLock::new(),
                tx: Mutex::new(Some(tx)),
            }),
            rx,
        )
    }

    /// Wakes the client; false if it was already woken (or gone).
    pub fn wake(&self, w: Wakeup) -> bool {
        match self.claim() {
            Some(tx) => tx.send(w).is_ok(),
            None => false,
        }
    }

    /// Takes the right to wake this client. Whoever claims it decides the outcome: the
    /// server serving it (it then either sends the reply or [`Waiter::unclaim`]s), or the
    /// client itself on timeout. This is what keeps a served reply from being lost when the
    /// timeout fires at the same moment.
    pub fn claim(&self) -> Option<oneshot::Sender<Wakeup>> {
        self.tx.lock().take()
    }

    /// Gives back a claim that was not used (the command found no data after all).
    pub fn unclaim(&self, tx: oneshot::Sender<Wakeup>) {
        *self.tx.lock() = Some(tx);
    }
}

/// A key of a database.
type DbKey = (usize, Box<[u8]>);

/// What a blocked connection waits for.
pub struct BlockWait {
    /// Its registration.
    pub waiter: Arc<Waiter>,
    /// Where the wakeup arrives.
    pub rx: oneshot::Receiver<Wakeup>,
    /// Unix milliseconds to time out at, `None` to wait forever.
    pub deadline_ms: Option<i64>,
}

/// Every waiter, by (database, key) in arrival order, and by client.
#[derive(Default)]
pub struct Blocked {
    keys: Mutex<HashMap<DbKey, VecDeque<Arc<Waiter>>>>,
    clients: Mutex<HashMap<u64, Arc<Waiter>>>,
    count: AtomicUsize,
}

impl Blocked {
    /// Registers a waiter at the back of each of its keys' queues.
    pub fn register(&self, w: Arc<Waiter>) {
        {
            let mut keys = self.keys.lock();
            for k in &w.keys {
                keys.entry((w.db, Box::from(&k[..]))).or_default().push_back(w.clone());
            }
        }
        self.clients.lock().insert(w.client, w);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends `w`'s client back to run its command again, unless it was already claimed (served
    /// or timing out): what it waits on changed under it (its slot moved to another node, a
    /// full sync replaced the dataset).
    pub fn retry(&self, w: &Arc<Waiter>) {
        if let Some(tx) = w.claim() {
            self.unregister(w);
            let _ = tx.send(Wakeup::Retry);
        }
    }

    /// Removes a waiter from every queue (served, timed out, disconnected); idempotent.
    pub fn unregister(&self, w: &Arc<Waiter>) {
        {
            let mut clients = self.clients.lock();
            match clients.get(&w.client) {
                Some(cur) if Arc::ptr_eq(cur, w) => {
                    clients.remove(&w.client);
                }
                _ => return,
            }
        }
        self.count.fetch_sub(1, Ordering::Relaxed);
        let mut keys = self.keys.lock();
        for k in &w.keys {
            let key = (w.db, Box::from(&k[..]));
            if let Some(q) = keys.get_mut(&key) {
                q.retain(|x| !Arc::ptr_eq(x, w));
                if q.is_empty() {
                    keys.remove(&key);
                }
            }
        }
    }

    /// Whether anyone waits on `key` in `db` (one relaxed load when nobody waits at all).
    pub fn waits_on(&self, db: usize, key: &[u8]) -> bool {
        self.count.load(Ordering::Relaxed) > 0 && self.keys.lock().contains_key(&(db, Box::from(key)))
    }

    /// The first waiter on `key` in `db`.
    pub fn first(&self, db: usize, key: &[u8]) -> Option<Arc<Waiter>> {
        self.keys.lock().get(&(db, Box::from(key))).and_then(|q| q.front().cloned())
    }

    /// Every waiter on `key` in `db`, in arrival order.
    pub fn waiters(&self, db: usize, key: &[u8]) -> Vec<Arc<Waiter>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.keys.lock().get(&(db, Box::from(key))).map(|q| q.iter().cloned().collect()).unwrap_or_default()
    }

    /// Keys of `db` that have waiters (SWAPDB and FLUSHALL can make them ready).
    pub fn keys_in_db(&self, db: usize) -> Vec<Vec<u8>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.keys.lock().keys().filter(|(d, _)| *d == db).map(|(_, k)| k.to_vec()).collect()
    }

    /// Every waiter (cluster mode re-routes them when the slot map changes).
    pub fn all(&self) -> Vec<Arc<Waiter>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.clients.lock().values().cloned().collect()
    }

    /// Ends every wait with an error that closes its connection, when this node starts
    /// following a primary: the keys they wait on would be filled by that primary's stream,
    /// and serving them would pop on the replica alone (Valkey's `disconnectAllBlockedClients`,
    /// from `replicationSetPrimary`).
    pub fn disconnect_all(&self) {
        for w in self.all() {
            w.wake(Wakeup::Disconnect(
                "UNBLOCKED force unblock from blocking operation, instance state changed (master -> replica?)".into(),
            ));
        }
    }

    /// The waiter of a client, for CLIENT UNBLOCK.
    pub fn by_client(&self, id: u64) -> Option<Arc<Waiter>> {
        self.clients.lock().get(&id).cloned()
    }

    /// Blocked clients (INFO `blocked_clients`).
    pub fn clients(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Keys with a waiter that a deleted key also wakes (XREADGROUP, which then fails
    /// NOGROUP): INFO `total_blocking_keys_on_nokey`.
    pub fn keys_on_nokey(&self, is_nokey: impl Fn(usize) -> bool) -> usize {
        if self.clients() == 0 {
            return 0;
        }
        self.keys.lock().values().filter(|q| q.iter().any(|w| is_nokey(w.cmd))).count()
    }

    /// Keys with waiters (INFO `total_blocking_keys`).
    pub fn keys(&self) -> usize {
        if self.clients() == 0 {
            return 0;
        }
        self.keys.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};
    use crate::registry::Flow;

    /// Runs a blocking command that must block; returns what its connection waits on.
    fn block(srv: &crate::server::Server, c: &mut crate::cmd::testutil::TestClient, argv: &[&str]) -> BlockWait {
        match c.run_flow(srv, argv) {
            (_, Flow::Block(wait)) => wait,
            (reply, _) => panic!("{argv:?} did not block: {reply:?}"),
        }
    }

    /// The reply a served waiter was sent.
    fn served(wait: &mut BlockWait) -> String {
        match wait.rx.try_recv() {
            Ok(Wakeup::Reply(bytes, _)) => String::from_utf8_lossy(&bytes).into_owned(),
            other => panic!("not served: {other:?}"),
        }
    }

    /// Valkey's list.tcl "$pop when new key is moved into place": a key that arrives whole
    /// serves its waiters in arrival order, from the value as moved (LPUSH abc def hij puts
    /// hij at the head).
    #[test]
    fn a_renamed_key_serves_its_waiters_in_arrival_order() {
        let srv = server();
        let (mut w1, mut w2, mut admin) = (client(&srv, 40101), client(&srv, 40102), client(&srv, 40103));
        let mut first = block(&srv, &mut w1, &["BLPOP", "foo{t}", "5"]);
        let mut second = block(&srv, &mut w2, &["BLMPOP", "0", "1", "foo{t}", "LEFT", "COUNT", "1"]);
        assert_eq!(srv.blocked.clients(), 2);
        assert_eq!(admin.run(&srv, &["LPUSH", "bob{t}", "abc", "def", "hij"]), ":3\r\n");
        assert_eq!(admin.run(&srv, &["RENAME", "bob{t}", "foo{t}"]), "+OK\r\n");
        assert_eq!(served(&mut first), "*2\r\n$6\r\nfoo{t}\r\n$3\r\nhij\r\n");
        assert_eq!(served(&mut second), "*2\r\n$6\r\nfoo{t}\r\n*1\r\n$3\r\ndef\r\n");
        // The writer claimed both, so no later write serves them again before their
        // connections unregister them.
        assert!(first.waiter.claim().is_none() && second.waiter.claim().is_none());
        assert_eq!(admin.run(&srv, &["LRANGE", "foo{t}", "0", "-1"]), "*1\r\n$3\r\nabc\r\n");
    }

    /// A waiter unregistered when its client goes away (what the connection does on a closed
    /// socket) stops counting and takes nothing from a later push.
    #[test]
    fn an_unregistered_waiter_is_not_served() {
        let srv = server();
        let (mut gone, mut admin) = (client(&srv, 40111), client(&srv, 40112));
        let wait = block(&srv, &mut gone, &["BLPOP", "q", "0"]);
        srv.blocked.unregister(&wait.waiter);
        assert_eq!((srv.blocked.clients(), srv.blocked.keys()), (0, 0));
        assert!(!srv.blocked.waits_on(0, b"q"));
        assert_eq!(admin.run(&srv, &["RPUSH", "q", "v"]), ":1\r\n");
        assert_eq!(admin.run(&srv, &["LLEN", "q"]), ":1\r\n");
    }

    #[test]
    fn arrival_order_and_cleanup() {
        let b = Blocked::default();
        let (w1, _r1) =
            Waiter::new(1, 0, 0, vec![], Plan::default(), Protocol::Resp2, vec![b"a".to_vec(), b"b".to_vec()]);
        let (w2, mut r2) = Waiter::new(2, 0, 0, vec![], Plan::default(), Protocol::Resp2, vec![b"a".to_vec()]);
        b.register(w1.clone());
        b.register(w2.clone());
        assert!(b.waits_on(0, b"a") && b.waits_on(0, b"b") && !b.waits_on(1, b"a"));
        assert_eq!(b.first(0, b"a").unwrap().client, 1);
        b.unregister(&w1);
        b.unregister(&w1);
        assert_eq!(b.first(0, b"a").unwrap().client, 2);
        assert!(!b.waits_on(0, b"b"));
        assert_eq!((b.clients(), b.keys()), (1, 1));
        assert!(w2.wake(Wakeup::Timeout));
        assert!(!w2.wake(Wakeup::Timeout));
        assert!(matches!(r2.try_recv(), Ok(Wakeup::Timeout)));
    }
}
