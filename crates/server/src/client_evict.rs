//! `maxmemory-clients`: when the memory of all client connections together reaches the limit,
//! the connections that use the most are closed, largest first, until the rest fit (Valkey's
//! client eviction). Each connection keeps what it uses up to date in its record whatever the
//! limit (`ClientInfo::memory`: one relaxed store before each read, and what waits to be sent
//! as it changes), so CLIENT LIST's `tot-mem` and eviction count alike and a limit set by
//! CONFIG SET finds idle clients already measured. Only under a limit is the total summed
//! (after each batch); with none the check is one load.
//!
//! What a connection uses, as Valkey counts it (`getClientMemoryUsage`): its query buffer's
//! capacity, its reply buffer's capacity, the replies its client has not read yet, its queued
//! pub/sub messages, the arguments of a queued transaction, its subscriptions, watched keys and
//! tracking prefixes, and a fixed part for its state.
//! Replicas, the primary's client and CLIENT NO-EVICT clients are never evicted; NO-EVICT
//! clients count toward the total, as in Valkey.

use std::cmp::Reverse;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use crate::server::{Server, unix_ms};
use crate::session::{ClientInfo, Session, flag};

/// The smallest limit applied: a smaller one would leave no room to talk to the server at all
/// (Valkey's floor, 128 KiB).
pub const MIN_LIMIT: usize = 128 * 1024;

/// `ClientInfo::freeing` once the connection is gone.
const GONE: usize = usize::MAX;

/// What a connection costs besides its buffers: its task, session and client record.
const FIXED: usize = 2048;

/// The limit in bytes for `maxmemory-clients` (`value`: bytes, or minus a percentage of
/// `maxmemory`), 0 for none. A percentage of an unlimited `maxmemory` is no limit.
pub fn limit(value: i64, maxmemory: i64) -> usize {
    let bytes = if value < 0 {
        if maxmemory <= 0 {
            return 0;
        }
        (maxmemory as f64 * (-value) as f64 / 100.0) as u64
    } else {
        value as u64
    };
    if bytes == 0 { 0 } else { (bytes as usize).max(MIN_LIMIT) }
}

/// The sum of what the clients that count use.
#[derive(Default)]
pub struct ClientMemory {
    total: AtomicUsize,
    /// Held by the connection that evicts: another one that finds the total over the limit
    /// meanwhile leaves it to that one.
    evicting: Mutex<()>,
    /// What clients being closed for their memory (evicted, or over their output limit) held
    /// when they were told to close, until their connections are gone.
    freeing: AtomicUsize,
}

impl ClientMemory {
    /// Bytes used by all counted clients.
    pub fn total(&self) -> usize {
        self.total.load(Ordering::Relaxed)
    }

    /// `info` now uses `mem` bytes. A client being closed reports nothing more.
    pub fn report(&self, info: &ClientInfo, mem: usize) {
        if info.is_killed() {
            return;
        }
        let old = info.mem.swap(mem, Ordering::Relaxed);
        if mem >= old {
            self.total.fetch_add(mem - old, Ordering::Relaxed);
        } else {
            self.total.fetch_sub(old - mem, Ordering::Relaxed);
        }
    }

    /// `info` uses `bytes` more than it reported (a push another connection queued for it).
    pub fn grow(&self, info: &ClientInfo, bytes: usize) {
        if info.is_killed() {
            return;
        }
        info.mem.fetch_add(bytes, Ordering::Relaxed);
        self.total.fetch_add(bytes, Ordering::Relaxed);
    }

    /// `info` stops counting.
    pub fn forget(&self, info: &ClientInfo) {
        let old = info.mem.swap(0, Ordering::Relaxed);
        self.total.fetch_sub(old, Ordering::Relaxed);
    }

    /// `info` is told to close for its memory: it stops counting at once, and what it holds
    /// counts as about to be freed until its connection is gone (Valkey frees such a client
    /// before it serves anyone else; here its own thread closes it). A connection that is
    /// already gone adds nothing.
    pub fn closing(&self, info: &ClientInfo) {
        self.forget(info);
        let held = info.memory();
        // Added before it is recorded, so that a close racing with this never takes away
        // more than was added.
        self.freeing.fetch_add(held, Ordering::Relaxed);
        let mut was = info.freeing.load(Ordering::Relaxed);
        loop {
            if was == GONE {
                self.freeing.fetch_sub(held, Ordering::Relaxed);
                return;
            }
            match info.freeing.compare_exchange(was, held, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => break,
                Err(now) => was = now,
            }
        }
        self.freeing.fetch_sub(was, Ordering::Relaxed);
    }

    /// The connection of `info` is gone.
    pub fn closed(&self, info: &ClientInfo) {
        self.forget(info);
        let was = info.freeing.swap(GONE, Ordering::Relaxed);
        if was != GONE {
            self.freeing.fetch_sub(was, Ordering::Relaxed);
        }
    }

    /// What clients told to close for their memory still hold (see [`ClientMemory::closing`]).
    pub fn freeing(&self) -> usize {
        self.freeing.load(Ordering::Relaxed)
    }
}

/// What the connection of `sess` uses besides its pending output (`ClientInfo::pending_output`,
/// which other connections and the socket change while this one may not run), given its
/// buffers' capacities.
pub fn usage(sess: &Session, rbuf: usize, out: usize) -> usize {
    let mut mem = FIXED + rbuf + out;
    if let Some(subs) = &sess.subs {
        let names = subs.channels.iter().chain(&subs.patterns).chain(&subs.shard);
        mem += names.map(|c| c.len() + 32).sum::<usize>();
    }
    // As Valkey counts a watch (its list node and record, the key being shared).
    mem += sess.watched.len() * 64;
    // BCAST prefixes, about as Valkey counts their radix tree's nodes.
    if sess.tracking.is_some()
        && let Some(t) = sess.info.tracking.current()
    {
        mem += t.prefixes.len() * 48;
    }
    if let Some(m) = &sess.multi {
        mem += m.queue.iter().map(|q| 64 + q.argv.iter().map(|a| a.len() + 24).sum::<usize>()).sum::<usize>();
    }
    mem
}

/// Whether eviction may close `c`.
fn evictable(c: &ClientInfo) -> bool {
    let f = c.flags.load(Ordering::Relaxed);
    f & (flag::NO_EVICT | flag::MASTER | flag::REPLICA) == 0 && !c.is_killed()
}

/// Whether `c` counts toward the clients' total (a replica's or primary's link does not).
fn counted(c: &ClientInfo) -> bool {
    c.flags.load(Ordering::Relaxed) & (flag::MASTER | flag::REPLICA) == 0
}

/// Counts what `info` uses now and, if all clients together are at or over `limit`, evicts
/// the largest ones until they fit (this one included: the caller checks whether it was
/// closed).
pub fn check(srv: &Server, info: &ClientInfo, limit: usize) {
    if !counted(info) {
        return;
    }
    srv.clients.memory.report(info, info.memory());
    if srv.clients.memory.total() >= limit {
        evict(srv);
    }
}

/// `maxmemory-clients` (or the `maxmemory` a percentage refers to) changed: every client is
/// counted at what it uses now, idle ones included, and the largest are evicted before CONFIG
/// SET answers, as Valkey's `applyClientMaxMemoryUsage` does. With no limit, nothing counts.
pub fn limit_changed(srv: &Server) {
    if srv.rt.load().client_eviction_limit > 0 {
        evict(srv);
        return;
    }
    for c in srv.clients.snapshot() {
        srv.clients.memory.forget(&c);
    }
}

/// Closes the clients that use the most memory until all together use less than the limit
/// (Valkey's `evictClients`). The limit is read again here: the caller's may predate a CONFIG
/// SET that raised or removed it.
pub fn evict(srv: &Server) {
    let memory = &srv.clients.memory;
    let Some(_one) = memory.evicting.try_lock() else { return };
    let limit = srv.rt.load().client_eviction_limit;
    if limit == 0 {
        return;
    }
    // Count every client at what it uses now: replies queued for a client drain without its
    // connection reporting, so a total from old reports may be over for no one.
    let clients = srv.clients.snapshot();
    for c in clients.iter().filter(|c| counted(c)) {
        memory.report(c, c.memory());
    }
    if memory.total() < limit {
        return;
    }
    let mut candidates: Vec<Arc<ClientInfo>> = clients.into_iter().filter(|c| evictable(c)).collect();
    candidates.sort_by_key(|c| Reverse(c.mem.load(Ordering::Relaxed)));
    let now = unix_ms();
    for c in candidates {
        if memory.total() < limit {
            return;
        }
        let current = crate::cmd::client::Current { id: 0, cmd: "NULL", argv_mem: 0 };
        let line = crate::cmd::client::client_line(&srv.registry, &c, now, &current);
        tracing::info!(client = c.id, "Evicting client: {line}");
        memory.closing(&c);
        // Counted before the client sees its connection close.
        srv.stats.evicted_clients.fetch_add(1, Ordering::Relaxed);
        c.kill();
    }
    if memory.total() >= limit {
        tracing::warn!("Over client maxmemory after evicting all evictable clients");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_as_valkey_computes_them() {
        assert_eq!(limit(0, 1 << 30), 0);
        assert_eq!(limit(1 << 20, 0), 1 << 20);
        assert_eq!(limit(1000, 0), MIN_LIMIT, "a tiny limit is raised to the floor");
        assert_eq!(limit(-10, 10 << 20), 1 << 20);
        assert_eq!(limit(-10, 0), 0, "a percentage of no maxmemory is no limit");
        assert_eq!(limit(-1, 1 << 20), MIN_LIMIT);
    }

    #[test]
    fn reports_move_the_total_by_their_difference_and_a_killed_client_stops_counting() {
        let m = ClientMemory::default();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let (a, b) = (ClientInfo::new(1, addr, addr, -1, 0), ClientInfo::new(2, addr, addr, -1, 0));
        m.report(&a, 1000);
        m.report(&b, 500);
        m.report(&a, 300);
        assert_eq!(m.total(), 800);
        m.forget(&a);
        a.kill();
        m.report(&a, 5000);
        assert_eq!(m.total(), 500);
        m.forget(&b);
        m.forget(&b);
        assert_eq!(m.total(), 0);
    }

    #[test]
    fn a_client_closed_for_its_memory_counts_as_freeing_until_its_connection_is_gone() {
        let m = ClientMemory::default();
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        let (a, b) = (ClientInfo::new(1, addr, addr, -1, 0), ClientInfo::new(2, addr, addr, -1, 0));
        a.used.store(1000, Ordering::Relaxed);
        b.used.store(300, Ordering::Relaxed);
        m.report(&a, a.memory());
        m.closing(&a);
        assert_eq!((m.total(), m.freeing()), (0, 1000));
        // Told twice (evicted, then over its output limit): counted once.
        m.closing(&a);
        assert_eq!(m.freeing(), 1000);
        m.closed(&a);
        assert_eq!(m.freeing(), 0);
        m.closed(&a);
        assert_eq!(m.freeing(), 0);
        // Gone before it was told: nothing stays counted.
        m.closed(&b);
        m.closing(&b);
        assert_eq!((m.total(), m.freeing()), (0, 0));
    }
}
