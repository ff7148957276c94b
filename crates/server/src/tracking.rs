//! Client-side caching (`CLIENT TRACKING`): the server remembers which clients read which keys
//! and tells them when a key changes, as Valkey's `tracking.c` does.
//!
//! * **Default mode.** A read-only command run by a tracking client records its keys in the
//!   tracking table (key → the clients that may cache it). When the key changes — a write by
//!   anyone, expiry, eviction, a replica applying its primary's stream, a transaction or a
//!   script — every client recorded for it gets one invalidation and the key is forgotten.
//! * **BCAST mode.** No table: a changed key is sent to every client whose prefix it starts
//!   with, one message per prefix per command (or per active expire cycle).
//! * **Flush.** FLUSHDB and FLUSHALL send every tracking client a null invalidation ("all
//!   keys") and empty the table.
//!
//! Keys are recorded without their database, as in Valkey.
//!
//! **Concurrency.** Nothing here is on the path of a client that does not track, beyond one
//! or two relaxed loads per changed key ([`Tracking::modified`]). The table is sharded by key
//! hash, each shard behind its own mutex held for one map operation; messages are queued to
//! the receiving connection's inbox after the shard lock is released, and that connection
//! encodes them in its own protocol ([`write_push`]). A client that turns tracking off or
//! disconnects is removed from the table at once, so it leaves nothing behind (Valkey removes
//! it lazily, when its keys change).

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use arc_swap::ArcSwapOption;
use hotkv_engine::plan::KeyArg;
use hotkv_protocol::{Args, ReplyBuf};
use parking_lot::{Mutex, RwLock};

use crate::session::{ClientInfo, Session, flag};

/// A message for a connection that is not the reply to one of its commands.
#[derive(Debug, Clone)]
pub enum Push {
    /// Keys to drop from the client's cache; `None` for all of them (a flush). `redirected`:
    /// sent on behalf of a client that redirects here, so a RESP2 connection in pub/sub mode
    /// gets it as a message of the `__redis__:invalidate` channel.
    Invalidate {
        /// The keys, or `None` for every key.
        keys: Option<Arc<[Box<[u8]>]>>,
        /// Sent on behalf of another client.
        redirected: bool,
    },
    /// The client this one redirects its invalidations to is gone (`tracking-redir-broken`).
    RedirBroken(u64),
}

/// Pushes other connections queue for one connection. Nothing is allocated until the first
/// push (a tokio channel per connection cost every idle client 2 KB, a fifth of its memory);
/// closed when the connection goes.
#[derive(Default)]
pub struct Inbox {
    queue: parking_lot::Mutex<(std::collections::VecDeque<Push>, bool)>,
    /// The connection's task while it waits. Only that task waits here, so one waker slot
    /// does: registering it again costs two atomic operations, where a `Notify` took a mutex
    /// twice per wait (to enqueue the waiter, and to unlink it when the socket won the race),
    /// which a pipeline-1 client paid on every request.
    ready: atomic_waker::AtomicWaker,
    /// Bytes the queued pushes will take once written (about); zero exactly when none is
    /// queued, so the connection looks without the lock.
    bytes: AtomicUsize,
    /// A [`Inbox::ring`] the connection has not seen yet.
    rung: std::sync::atomic::AtomicBool,
}

impl Inbox {
    /// Queues `p` unless the inbox is closed; returns about how many bytes it will take.
    pub fn send(&self, p: Push) -> usize {
        let bytes = p.size();
        let mut q = self.queue.lock();
        if q.1 {
            return 0;
        }
        q.0.push_back(p);
        self.bytes.fetch_add(bytes, Ordering::Relaxed);
        drop(q);
        self.ready.wake();
        bytes
    }

    /// About how many bytes the queued pushes will take.
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
    }

    /// Whether the connection went away.
    pub fn is_closed(&self) -> bool {
        self.queue.lock().1
    }

    /// Refuses further pushes and drops the queued ones.
    pub fn close(&self) {
        let mut q = self.queue.lock();
        q.1 = true;
        q.0 = Default::default();
        self.bytes.store(0, Ordering::Relaxed);
    }

    /// The next queued push, if any.
    pub fn try_recv(&self) -> Option<Push> {
        // A push counted after this look wakes the waiting task, which looks again.
        if self.bytes.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let p = self.queue.lock().0.pop_front()?;
        self.bytes.fetch_sub(p.size(), Ordering::Relaxed);
        Some(p)
    }

    /// Waits for the next push (forever once closed), or for a [`Inbox::ring`]: then `None`.
    /// The waker is registered before the second look, so a push or a ring in between wakes
    /// the task and is never missed.
    pub async fn recv(&self) -> Option<Push> {
        std::future::poll_fn(|cx| match self.poll_mail(cx.waker()) {
            Some(p) => std::task::Poll::Ready(p),
            None => std::task::Poll::Pending,
        })
        .await
    }

    /// What [`Inbox::recv`] would complete with now, if anything; otherwise `waker` is woken
    /// at the next push or ring.
    pub fn poll_mail(&self, waker: &std::task::Waker) -> Option<Option<Push>> {
        if let Some(p) = self.look() {
            return Some(p);
        }
        self.ready.register(waker);
        self.look()
    }

    /// A queued push, or `Some(None)` for a ring not yet seen.
    fn look(&self) -> Option<Option<Push>> {
        if let Some(p) = self.try_recv() {
            return Some(Some(p));
        }
        (self.rung.load(Ordering::Relaxed) && self.rung.swap(false, Ordering::Relaxed)).then_some(None)
    }

    /// Wakes the connection without a push: the cron left it a request elsewhere (a query
    /// buffer resize). The connection's wait is the inbox's, so it needs no second waker.
    pub fn ring(&self) {
        self.rung.store(true, Ordering::Relaxed);
        self.ready.wake();
    }
}

impl Push {
    /// About how many bytes it takes written out.
    fn size(&self) -> usize {
        match self {
            Push::Invalidate { keys: Some(keys), .. } => 32 + keys.iter().map(|k| k.len() + 16).sum::<usize>(),
            _ => 48,
        }
    }
}

/// What one `CLIENT TRACKING ON` asked for.
#[derive(Default)]
pub struct Tracker {
    /// `REDIRECT` client id, 0 for none.
    pub redirect: u64,
    /// The redirect target, found when tracking was turned on.
    target: Weak<ClientInfo>,
    /// `BCAST`.
    pub bcast: bool,
    /// `OPTIN`.
    pub optin: bool,
    /// `OPTOUT`.
    pub optout: bool,
    /// `NOLOOP`.
    pub noloop: bool,
    /// BCAST prefixes, sorted (CLIENT TRACKINGINFO lists them in this order, as Valkey's rax).
    pub prefixes: Vec<Box<[u8]>>,
    /// An invalidation found the redirect target gone (flag `R`, `broken_redirect`).
    pub broken: AtomicBool,
}

/// A connection's tracking state, part of its [`ClientInfo`] so that whoever changes a key
/// can find it.
#[derive(Default)]
pub struct ClientTracking {
    /// The current settings; `None` while tracking is off.
    state: ArcSwapOption<Tracker>,
    /// Entries of the tracking table that name this client.
    items: AtomicUsize,
}

impl ClientTracking {
    /// The current settings, if tracking is on.
    pub fn current(&self) -> Option<Arc<Tracker>> {
        self.state.load_full()
    }
}

/// The session's copy of its tracking mode, read on every command without touching shared
/// state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Mode {
    /// `BCAST`: reads are not recorded.
    pub bcast: bool,
    /// `OPTIN`: only reads after `CLIENT CACHING YES` are recorded.
    pub optin: bool,
    /// `OPTOUT`: reads after `CLIENT CACHING NO` are not recorded.
    pub optout: bool,
}

/// Options of `CLIENT TRACKING ON`, parsed.
#[derive(Default)]
pub struct Options {
    /// `REDIRECT` id, 0 for none.
    pub redirect: u64,
    /// The redirect target.
    pub target: Option<Arc<ClientInfo>>,
    /// `BCAST`.
    pub bcast: bool,
    /// `OPTIN`.
    pub optin: bool,
    /// `OPTOUT`.
    pub optout: bool,
    /// `NOLOOP`.
    pub noloop: bool,
    /// `PREFIX` arguments, in the order given.
    pub prefixes: Vec<Vec<u8>>,
}

/// Tracked key → the clients that may cache it.
type Shard = Mutex<HashMap<Box<[u8]>, Vec<Arc<ClientInfo>>>>;

/// A key taken out of the table, with the clients it named.
type Taken = (Box<[u8]>, Vec<Arc<ClientInfo>>);

/// BCAST prefix → the clients registered for it.
type Prefixes = RwLock<BTreeMap<Box<[u8]>, Vec<Arc<ClientInfo>>>>;

/// The server's tracking state: the table of tracked keys and the BCAST prefixes.
pub struct Tracking {
    shards: Box<[Shard]>,
    /// Keys in the table (INFO `tracking_total_keys`).
    keys: AtomicUsize,
    /// (key, client) pairs in the table (INFO `tracking_total_items`).
    items: AtomicUsize,
    /// Clients with tracking on (INFO `tracking_clients`).
    clients: AtomicUsize,
    /// BCAST prefix → the clients registered for it.
    prefixes: Prefixes,
    /// Number of prefixes (INFO `tracking_total_prefixes`), read without the lock.
    nprefixes: AtomicUsize,
    /// `tracking-table-max-keys`; 0 is no limit.
    pub max_keys: AtomicUsize,
    /// Calls of [`Tracking::limit`] in a row that ended still over the limit: each tries
    /// harder, as Valkey's `trackingLimitUsedSlots`.
    rounds: AtomicU32,
    /// One limit enforcement at a time.
    limiting: Mutex<()>,
    /// Picks the shard an eviction starts from.
    cursor: AtomicUsize,
    /// The clients' memory (`maxmemory-clients`): a push queued for a connection counts as
    /// its memory at once, even while that connection is stuck writing to a client that does
    /// not read.
    memory: Arc<crate::client_evict::ClientMemory>,
}

impl Default for Tracking {
    fn default() -> Self {
        Tracking {
            shards: (0..SHARDS).map(|_| Shard::default()).collect(),
            keys: AtomicUsize::new(0),
            items: AtomicUsize::new(0),
            clients: AtomicUsize::new(0),
            prefixes: RwLock::new(BTreeMap::new()),
            nprefixes: AtomicUsize::new(0),
            max_keys: AtomicUsize::new(1_000_000),
            rounds: AtomicU32::new(0),
            limiting: Mutex::new(()),
            cursor: AtomicUsize::new(0),
            memory: Default::default(),
        }
    }
}

impl Tracking {
    /// Empty tracking state with the `tracking-table-max-keys` limit `max_keys`.
    pub fn with_max_keys(max_keys: usize, memory: Arc<crate::client_evict::ClientMemory>) -> Tracking {
        let t = Tracking { memory, ..Tracking::default() };
        t.max_keys.store(max_keys, Ordering::Relaxed);
        t
    }

    /// Whether any client tracks (one relaxed load).
    pub fn active(&self) -> bool {
        self.clients.load(Ordering::Relaxed) > 0
    }

    /// INFO `tracking_clients`.
    pub fn clients(&self) -> usize {
        self.clients.load(Ordering::Relaxed)
    }

    /// INFO `tracking_total_keys`.
    pub fn total_keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed)
    }

    /// INFO `tracking_total_items`.
    pub fn total_items(&self) -> usize {
        self.items.load(Ordering::Relaxed)
    }

    /// INFO `tracking_total_prefixes`.
    pub fn total_prefixes(&self) -> usize {
        self.nprefixes.load(Ordering::Relaxed)
    }

    /// Whether a changed key must be looked at: something is in the table, or some client
    /// listens to prefixes.
    pub fn wants_changes(&self) -> bool {
        self.keys.load(Ordering::Relaxed) > 0 || self.nprefixes.load(Ordering::Relaxed) > 0
    }

    /// Whether changed keys must be collected for BCAST clients.
    pub fn broadcasting(&self) -> bool {
        self.nprefixes.load(Ordering::Relaxed) > 0
    }

    /// Turns tracking on (or changes its options) for `info`; the options were checked
    /// against each other and the client's current mode by the caller.
    pub fn enable(&self, info: &Arc<ClientInfo>, opts: Options) {
        let old = info.tracking.current();
        if old.is_none() {
            self.clients.fetch_add(1, Ordering::Relaxed);
        }
        let mut prefixes: Vec<Box<[u8]>> = Vec::new();
        if opts.bcast {
            // Prefixes accumulate while BCAST stays on (Valkey's client_tracking_prefixes).
            if let Some(old) = old.as_ref().filter(|o| o.bcast) {
                prefixes.extend(old.prefixes.iter().cloned());
            }
            let asked: Vec<Vec<u8>> = if opts.prefixes.is_empty() { vec![Vec::new()] } else { opts.prefixes };
            let mut table = self.prefixes.write();
            for p in asked {
                if prefixes.iter().any(|q| **q == *p) {
                    continue;
                }
                let clients = table.entry(p.clone().into_boxed_slice()).or_default();
                if !clients.iter().any(|c| Arc::ptr_eq(c, info)) {
                    clients.push(info.clone());
                }
                prefixes.push(p.into_boxed_slice());
            }
            self.nprefixes.store(table.len(), Ordering::Relaxed);
            prefixes.sort();
        }
        let t = Tracker {
            redirect: opts.redirect,
            target: opts.target.as_ref().map_or_else(Weak::new, Arc::downgrade),
            bcast: opts.bcast,
            optin: opts.optin,
            optout: opts.optout,
            noloop: opts.noloop,
            prefixes,
            broken: AtomicBool::new(false),
        };
        info.tracking.state.store(Some(Arc::new(t)));
        info.redir.store(opts.redirect as i64, Ordering::Relaxed);
        set_flags(info, flag::TRACKING, true);
        set_flags(info, flag::TRACKING_BCAST, opts.bcast);
        set_flags(info, flag::TRACKING_BROKEN_REDIR, false);
    }

    /// Turns tracking off for `info` (CLIENT TRACKING OFF, RESET, disconnect) and forgets
    /// every key recorded for it.
    pub fn disable(&self, info: &Arc<ClientInfo>) {
        let Some(old) = info.tracking.state.swap(None) else { return };
        self.clients.fetch_sub(1, Ordering::Relaxed);
        if old.bcast {
            let mut table = self.prefixes.write();
            for p in &old.prefixes {
                if let Some(clients) = table.get_mut(p) {
                    clients.retain(|c| !Arc::ptr_eq(c, info));
                    if clients.is_empty() {
                        table.remove(p);
                    }
                }
            }
            self.nprefixes.store(table.len(), Ordering::Relaxed);
        }
        info.redir.store(-1, Ordering::Relaxed);
        set_flags(info, flag::TRACKING | flag::TRACKING_BCAST | flag::TRACKING_BROKEN_REDIR, false);
        self.forget(info);
    }

    /// Removes `info` from every key of the table, one shard lock at a time, stopping as soon
    /// as none is left.
    fn forget(&self, info: &Arc<ClientInfo>) {
        for shard in self.shards.iter() {
            if info.tracking.items.load(Ordering::Relaxed) == 0 {
                return;
            }
            let mut map = shard.lock();
            let (mut removed, mut gone) = (0, 0);
            map.retain(|_, clients| {
                let before = clients.len();
                clients.retain(|c| !Arc::ptr_eq(c, info));
                removed += before - clients.len();
                if clients.is_empty() {
                    gone += 1;
                    return false;
                }
                true
            });
            drop(map);
            if removed > 0 {
                self.items.fetch_sub(removed, Ordering::Relaxed);
                info.tracking.items.fetch_sub(removed, Ordering::Relaxed);
            }
            if gone > 0 {
                self.keys.fetch_sub(gone, Ordering::Relaxed);
            }
        }
    }

    /// Records that `info` may cache `key` (Valkey's `trackingRememberKeys`, one key).
    pub fn remember(&self, info: &Arc<ClientInfo>, key: &[u8]) {
        let mut map = self.shard(key).lock();
        let new_key = match map.get_mut(key) {
            Some(clients) if clients.iter().any(|c| Arc::ptr_eq(c, info)) => return,
            Some(clients) => {
                clients.push(info.clone());
                false
            }
            None => {
                map.insert(key.into(), vec![info.clone()]);
                true
            }
        };
        drop(map);
        if new_key {
            self.keys.fetch_add(1, Ordering::Relaxed);
        }
        self.items.fetch_add(1, Ordering::Relaxed);
        info.tracking.items.fetch_add(1, Ordering::Relaxed);
    }

    /// `key` changed; `writer` is the client whose command changed it (0 for none). Sends
    /// the invalidation to the clients the table names for it and forgets it (Valkey's
    /// `trackingInvalidateKey`); BCAST clients are served by the caller's batch.
    pub fn invalidate(&self, key: &[u8], writer: u64) {
        if self.keys.load(Ordering::Relaxed) == 0 {
            return;
        }
        let Some((key, clients)) = self.take(key) else { return };
        // The table's own copy of the key travels in the message: an eviction that frees a key
        // must not allocate it again for its invalidation, or freeing memory would free
        // nothing while clients track (the feedback loop Valkey's maxmemory tests guard).
        let keys: Arc<[Box<[u8]>]> = Arc::from(vec![key]);
        for c in clients {
            let Some(t) = c.tracking.current() else { continue };
            // A client that switched to BCAST gets nothing for keys it read before.
            if t.bcast || (t.noloop && c.id == writer) {
                continue;
            }
            send(&self.memory, &c, &t, Push::Invalidate { keys: Some(keys.clone()), redirected: false });
        }
    }

    /// Takes `key`'s entry out of the table.
    fn take(&self, key: &[u8]) -> Option<Taken> {
        let (key, clients) = self.shard(key).lock().remove_entry(key)?;
        self.keys.fetch_sub(1, Ordering::Relaxed);
        self.items.fetch_sub(clients.len(), Ordering::Relaxed);
        for c in &clients {
            c.tracking.items.fetch_sub(1, Ordering::Relaxed);
        }
        Some((key, clients))
    }

    /// Sends the keys changed by one command (or expire cycle) to the BCAST clients whose
    /// prefixes they match, one message per prefix (Valkey's
    /// `trackingBroadcastInvalidationMessages`). Each key comes with the client that last
    /// changed it (0 for none), which a NOLOOP client does not hear about.
    pub fn broadcast(&self, changed: &[(Vec<u8>, u64)]) {
        if changed.is_empty() {
            return;
        }
        let table = self.prefixes.read();
        for (prefix, clients) in table.iter() {
            let mut keys: BTreeMap<&[u8], u64> = BTreeMap::new();
            for (k, by) in changed {
                if k.starts_with(prefix) {
                    keys.insert(k, *by);
                }
            }
            if keys.is_empty() {
                continue;
            }
            let all: Arc<[Box<[u8]>]> = keys.keys().map(|k| Box::from(*k)).collect();
            for c in clients {
                let Some(t) = c.tracking.current() else { continue };
                let msg = if t.noloop {
                    let own: Arc<[Box<[u8]>]> =
                        keys.iter().filter(|(_, by)| **by != c.id).map(|(k, _)| Box::from(*k)).collect();
                    if own.is_empty() {
                        continue;
                    }
                    own
                } else {
                    all.clone()
                };
                send(&self.memory, c, &t, Push::Invalidate { keys: Some(msg), redirected: false });
            }
        }
    }

    /// A database was flushed: every tracking client of `clients` is told all its keys are
    /// invalid, and the table is emptied (Valkey's `trackingInvalidateKeysOnFlush`).
    pub fn flushed(&self, clients: &[Arc<ClientInfo>]) {
        if !self.active() && self.keys.load(Ordering::Relaxed) == 0 {
            return;
        }
        for c in clients {
            if let Some(t) = c.tracking.current() {
                send(&self.memory, c, &t, Push::Invalidate { keys: None, redirected: false });
            }
        }
        for shard in self.shards.iter() {
            let map = std::mem::take(&mut *shard.lock());
            if map.is_empty() {
                continue;
            }
            self.keys.fetch_sub(map.len(), Ordering::Relaxed);
            for clients in map.into_values() {
                self.items.fetch_sub(clients.len(), Ordering::Relaxed);
                for c in clients {
                    c.tracking.items.fetch_sub(1, Ordering::Relaxed);
                }
            }
        }
    }

    /// Keeps the table within `tracking-table-max-keys`: over it, evicts keys one after the
    /// other (each an invalidation for the clients that had it), up to 100 the first time and
    /// 100 more on each call that still ended over the limit (Valkey's
    /// `trackingLimitUsedSlots`). Called before each command while clients track, and by cron.
    pub fn limit(&self) {
        let max = self.max_keys.load(Ordering::Relaxed);
        if max == 0 || self.keys.load(Ordering::Relaxed) <= max {
            return;
        }
        let Some(_one) = self.limiting.try_lock() else { return };
        let mut effort = 100 * (u64::from(self.rounds.load(Ordering::Relaxed)) + 1);
        while effort > 0 {
            effort -= 1;
            let Some(key) = self.any_key() else { break };
            self.invalidate(&key, 0);
            if self.keys.load(Ordering::Relaxed) <= max {
                self.rounds.store(0, Ordering::Relaxed);
                return;
            }
        }
        self.rounds.fetch_add(1, Ordering::Relaxed);
    }

    /// Some key of the table, from a shard further along at each call.
    fn any_key(&self) -> Option<Box<[u8]>> {
        let start = self.cursor.fetch_add(1, Ordering::Relaxed);
        (0..SHARDS).find_map(|i| self.shards[(start + i) % SHARDS].lock().keys().next().cloned())
    }

    fn shard(&self, key: &[u8]) -> &Shard {
        &self.shards[hotkv_engine::hash::key_hash(key) as usize % SHARDS]
    }
}

/// Records the keys a read-only command just read for its client, if it tracks in default
/// mode and OPTIN/OPTOUT with CLIENT CACHING allow it (Valkey's `call` →
/// `trackingRememberKeys`). Shard channels are not keys.
pub fn remember_reads(srv: &crate::server::Server, sess: &Session, args: &Args<'_>, keys: &[KeyArg]) {
    let Some(m) = sess.tracking else { return };
    if m.bcast || (m.optin && !sess.caching) || (m.optout && sess.caching) {
        return;
    }
    for k in keys.iter().filter(|k| !k.channel) {
        srv.tracking.remember(&sess.info, args.get(k.pos as usize));
    }
}

/// Writes the pushes waiting for this connection into its output, in its protocol.
pub fn drain(sess: &mut Session, out: &mut ReplyBuf) {
    while let Some(p) = sess.info.inbox.try_recv() {
        write_push(out, sess.subscribed(), &p);
    }
}

/// Encodes one push: for a RESP3 connection `>2 invalidate [keys]` (`_` for all keys) or
/// `>2 tracking-redir-broken <id>`; for a RESP2 connection in pub/sub mode an invalidation
/// sent on behalf of a redirecting client is a `message` of `__redis__:invalidate`; anything
/// else cannot reach a RESP2 connection and is dropped (Valkey's `sendTrackingMessage`).
pub fn write_push(out: &mut ReplyBuf, subscribed: bool, p: &Push) {
    match p {
        Push::Invalidate { keys, redirected } => {
            if out.is_resp3() {
                out.push(2);
                out.bulk(b"invalidate");
            } else if *redirected && subscribed {
                out.push(3);
                out.bulk(b"message");
                out.bulk(CHANNEL);
            } else {
                return;
            }
            match keys {
                None => out.null(),
                Some(keys) => {
                    out.array(keys.len());
                    keys.iter().for_each(|k| out.bulk(k));
                }
            }
        }
        Push::RedirBroken(id) => {
            if out.is_resp3() {
                out.push(2);
                out.bulk(b"tracking-redir-broken");
                out.int(*id as i64);
            }
        }
    }
}

/// Queues `msg` for tracking client `c` with settings `t`: to its redirect target if it has
/// one (marking the redirection broken, and telling a RESP3 client so, when the target is
/// gone), else to itself when it speaks RESP3.
fn send(memory: &crate::client_evict::ClientMemory, c: &Arc<ClientInfo>, t: &Tracker, msg: Push) {
    if t.redirect == 0 {
        if c.resp.load(Ordering::Relaxed) >= 3 {
            deliver(memory, c, msg);
        }
        return;
    }
    let target = t.target.upgrade().filter(|x| !x.is_killed() && !x.inbox.is_closed());
    let Some(target) = target else {
        t.broken.store(true, Ordering::Relaxed);
        set_flags(c, flag::TRACKING_BROKEN_REDIR, true);
        if c.resp.load(Ordering::Relaxed) >= 3 {
            deliver(memory, c, Push::RedirBroken(t.redirect));
        }
        return;
    };
    let resp3 = target.resp.load(Ordering::Relaxed) >= 3;
    if !resp3 && target.flags.load(Ordering::Relaxed) & flag::PUBSUB == 0 {
        return;
    }
    let msg = match msg {
        Push::Invalidate { keys, .. } => Push::Invalidate { keys, redirected: true },
        other => other,
    };
    deliver(memory, &target, msg);
}

fn deliver(memory: &crate::client_evict::ClientMemory, c: &ClientInfo, msg: Push) {
    // A closed inbox is a connection going away: nothing to tell it.
    let bytes = c.inbox.send(msg);
    if bytes > 0 && c.mem.load(Ordering::Relaxed) > 0 {
        memory.grow(c, bytes);
    }
}

fn set_flags(info: &ClientInfo, bits: u32, on: bool) {
    if on {
        info.flags.fetch_or(bits, Ordering::Relaxed);
    } else {
        info.flags.fetch_and(!bits, Ordering::Relaxed);
    }
}

/// The pub/sub channel RESP2 redirect targets hear invalidations on.
pub const CHANNEL: &[u8] = b"__redis__:invalidate";

/// Shards of the tracking table.
const SHARDS: usize = 256;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{TestClient, client, server};

    const HELLO3: &[&str] = &["hello", "3"];

    fn resp3(srv: &crate::server::Server, port: u16) -> TestClient {
        let mut c = client(srv, port);
        c.run(srv, HELLO3);
        c
    }

    fn inv(keys: &[&str]) -> String {
        let mut s = format!(">2\r\n$10\r\ninvalidate\r\n*{}\r\n", keys.len());
        for k in keys {
            s.push_str(&format!("${}\r\n{k}\r\n", k.len()));
        }
        s
    }

    #[test]
    fn a_read_key_is_invalidated_once_when_another_client_writes_it() {
        let srv = server();
        let (mut a, mut w) = (resp3(&srv, 1), client(&srv, 2));
        assert_eq!(a.run(&srv, &["client", "tracking", "on"]), "+OK\r\n");
        a.run(&srv, &["mget", "k", "other"]);
        assert_eq!((srv.tracking.total_keys(), srv.tracking.total_items()), (2, 2));
        w.run(&srv, &["set", "k", "v"]);
        // Queued for `a`: it goes out before its next reply.
        assert_eq!(a.run(&srv, &["ping"]), format!("{}+PONG\r\n", inv(&["k"])));
        w.run(&srv, &["set", "k", "v2"]);
        assert_eq!(a.run(&srv, &["ping"]), "+PONG\r\n");
        assert_eq!(srv.tracking.total_keys(), 1);
    }

    #[test]
    fn own_writes_follow_the_reply_unless_noloop() {
        let srv = server();
        let mut a = resp3(&srv, 1);
        a.run(&srv, &["client", "tracking", "on"]);
        a.run(&srv, &["get", "k"]);
        assert_eq!(a.run(&srv, &["set", "k", "1"]), format!("+OK\r\n{}", inv(&["k"])));
        a.run(&srv, &["client", "tracking", "on", "noloop"]);
        a.run(&srv, &["get", "k"]);
        assert_eq!(a.run(&srv, &["set", "k", "2"]), "+OK\r\n");
        assert_eq!(srv.tracking.total_keys(), 0, "the key is forgotten all the same");
    }

    #[test]
    fn turning_tracking_off_or_disconnecting_leaves_nothing_behind() {
        let srv = server();
        let mut a = resp3(&srv, 1);
        a.run(&srv, &["client", "tracking", "on"]);
        a.run(&srv, &["mget", "k1", "k2", "k3"]);
        let mut b = resp3(&srv, 2);
        b.run(&srv, &["client", "tracking", "on"]);
        b.run(&srv, &["get", "k1"]);
        assert_eq!((srv.tracking.total_keys(), srv.tracking.total_items(), srv.tracking.clients()), (3, 4, 2));
        a.run(&srv, &["client", "tracking", "off"]);
        assert_eq!((srv.tracking.total_keys(), srv.tracking.total_items(), srv.tracking.clients()), (1, 1, 1));
        srv.tracking.disable(&b.sess.info);
        assert_eq!((srv.tracking.total_keys(), srv.tracking.total_items(), srv.tracking.clients()), (0, 0, 0));
    }

    #[test]
    fn a_flush_sends_a_null_invalidation_and_empties_the_table() {
        let srv = server();
        let (mut a, mut w) = (resp3(&srv, 1), client(&srv, 2));
        a.run(&srv, &["client", "tracking", "on"]);
        a.run(&srv, &["get", "k"]);
        w.run(&srv, &["flushdb"]);
        assert_eq!(a.run(&srv, &["ping"]), ">2\r\n$10\r\ninvalidate\r\n_\r\n+PONG\r\n");
        assert_eq!(srv.tracking.total_keys(), 0);
    }

    #[test]
    fn bcast_sends_matching_keys_per_prefix_and_noloop_skips_own() {
        let srv = server();
        let (mut a, mut w) = (resp3(&srv, 1), client(&srv, 2));
        assert_eq!(a.run(&srv, &["client", "tracking", "on", "bcast", "prefix", "x:", "noloop"]), "+OK\r\n");
        assert_eq!(srv.tracking.total_prefixes(), 1);
        w.run(&srv, &["mset", "x:2", "a", "y:1", "b", "x:1", "c"]);
        assert_eq!(a.run(&srv, &["ping"]), format!("{}+PONG\r\n", inv(&["x:1", "x:2"])));
        assert_eq!(a.run(&srv, &["set", "x:3", "v"]), "+OK\r\n");
        a.run(&srv, &["client", "tracking", "off"]);
        assert_eq!(srv.tracking.total_prefixes(), 0);
    }

    #[test]
    fn the_table_is_kept_within_its_limit_before_each_command() {
        let srv = server();
        let mut a = resp3(&srv, 1);
        a.run(&srv, &["client", "tracking", "on"]);
        a.run(&srv, &["mget", "k1", "k2", "k3"]);
        srv.tracking.max_keys.store(1, Ordering::Relaxed);
        let reply = a.run(&srv, &["ping"]);
        assert_eq!(reply.matches("invalidate").count(), 2, "{reply}");
        assert!(reply.ends_with("+PONG\r\n"));
        assert_eq!(srv.tracking.total_keys(), 1);
    }

    #[test]
    fn optin_tracks_only_after_caching_yes_for_one_command() {
        let srv = server();
        let mut a = resp3(&srv, 1);
        a.run(&srv, &["client", "tracking", "on", "optin"]);
        a.run(&srv, &["get", "k0"]);
        assert_eq!(srv.tracking.total_keys(), 0);
        a.run(&srv, &["client", "caching", "yes"]);
        a.run(&srv, &["client", "id"]);
        a.run(&srv, &["get", "k1"]);
        a.run(&srv, &["get", "k2"]);
        assert_eq!(srv.tracking.total_keys(), 1, "CLIENT calls keep CACHING, the read uses it");
    }

    #[test]
    fn a_resp2_redirect_target_in_pubsub_gets_a_channel_message() {
        let srv = server();
        let (mut a, mut r, mut w) = (client(&srv, 1), client(&srv, 2), client(&srv, 3));
        r.run(&srv, &["subscribe", "__redis__:invalidate"]);
        let id = r.sess.id.to_string();
        assert_eq!(a.run(&srv, &["client", "tracking", "on", "redirect", &id]), "+OK\r\n");
        a.run(&srv, &["get", "k"]);
        w.run(&srv, &["set", "k", "v"]);
        let mut out = ReplyBuf::new();
        drain(&mut r.sess, &mut out);
        assert_eq!(
            String::from_utf8_lossy(out.as_bytes()),
            "*3\r\n$7\r\nmessage\r\n$20\r\n__redis__:invalidate\r\n*1\r\n$1\r\nk\r\n"
        );
    }

    #[test]
    fn a_gone_redirect_target_breaks_the_redirection() {
        let srv = server();
        let (mut a, r, mut w) = (resp3(&srv, 1), resp3(&srv, 2), client(&srv, 3));
        let id = r.sess.id;
        a.run(&srv, &["client", "tracking", "on", "redirect", &id.to_string()]);
        a.run(&srv, &["get", "k"]);
        srv.clients.remove(id);
        drop(r);
        w.run(&srv, &["set", "k", "v"]);
        let broken = format!(">2\r\n$21\r\ntracking-redir-broken\r\n:{id}\r\n");
        assert_eq!(a.run(&srv, &["ping"]), format!("{broken}+PONG\r\n"));
        assert!(a.sess.info.flag_letters().contains("tR"), "{}", a.sess.info.flag_letters());
    }
}
