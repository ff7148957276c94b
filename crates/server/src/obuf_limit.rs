//! `client-output-buffer-limit` for normal and pub/sub clients, checked where Valkey checks it:
//! as replies are added (the connection, per command and inside a reply being built, see
//! `ReplyBuf::set_limit`; the publisher, per message queued for a subscriber) and in the clients
//! cron, which closes a client whose soft limit expired while no traffic flows.
//!
//! What counts is what waits to reach the client beyond the first 16 KiB, which Valkey keeps
//! in its static reply buffer: unsent replies, queued messages and pushes. The soft limit's
//! clock lives in the client's record, shared by all three checkers; it is read only while the
//! client is over its soft limit.
//! Replicas and the primary's link have their own limits (replication), so they are not
//! checked here.

use std::sync::atomic::{AtomicI64, AtomicUsize, Ordering};

use crate::server::{Runtime, Server, unix_ms};
use crate::session::{ClientInfo, flag};

/// Pending output that fits Valkey's static reply buffer and does not count
/// (`PROTO_REPLY_CHUNK_BYTES`).
pub const FREE_BYTES: usize = crate::reply_buffer::CHUNK_SIZE;

/// One class's limits; 0 for none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limit {
    /// Bytes at which the client is closed at once.
    pub hard: usize,
    /// Bytes above which the client may stay only `soft_ms`.
    pub soft: usize,
    /// How long, in milliseconds, a client may stay above `soft`.
    pub soft_ms: i64,
}

impl Limit {
    /// The limit of a `client-output-buffer-limit` triple (hard, soft, soft seconds).
    pub fn from_triple(hard: i64, soft: i64, secs: i64) -> Limit {
        Limit { hard: hard.max(0) as usize, soft: soft.max(0) as usize, soft_ms: secs.max(0).saturating_mul(1000) }
    }

    /// Whether neither bound is set.
    pub fn is_none(&self) -> bool {
        self.hard == 0 && self.soft == 0
    }
}

/// A class's limit where threads without the runtime settings read it (the publisher).
#[derive(Debug, Default)]
pub struct SharedLimit {
    hard: AtomicUsize,
    soft: AtomicUsize,
    soft_ms: AtomicI64,
}

impl SharedLimit {
    /// The limit now.
    pub fn load(&self) -> Limit {
        Limit {
            hard: self.hard.load(Ordering::Relaxed),
            soft: self.soft.load(Ordering::Relaxed),
            soft_ms: self.soft_ms.load(Ordering::Relaxed),
        }
    }

    /// Replaces the limit (CONFIG SET).
    pub fn store(&self, l: Limit) {
        self.hard.store(l.hard, Ordering::Relaxed);
        self.soft.store(l.soft, Ordering::Relaxed);
        self.soft_ms.store(l.soft_ms, Ordering::Relaxed);
    }
}

/// The limit of `c`'s class (Valkey's `getClientType`): subscribed clients are the pubsub
/// class, everyone else but replicas and the primary normal. None for those two.
pub fn class_limit(c: &ClientInfo, rt: &Runtime) -> Option<Limit> {
    let f = c.flags.load(Ordering::Relaxed);
    if f & (flag::REPLICA | flag::MASTER) != 0 && f & flag::MONITOR == 0 {
        return None;
    }
    Some(if f & flag::PUBSUB != 0 { rt.obuf_pubsub } else { rt.obuf_normal })
}

/// Whether `c`, with `pending` bytes waiting to reach it, is over `limit`: at or over the hard
/// limit, or over the soft limit for longer than allowed (Valkey's
/// `checkClientOutputBufferLimits`). Starts or stops the soft limit's clock; reads the time only
/// while over the soft limit.
pub fn reached(c: &ClientInfo, pending: usize, limit: Limit) -> bool {
    let used = pending.saturating_sub(FREE_BYTES);
    if limit.hard > 0 && used >= limit.hard {
        return true;
    }
    let since = &c.obuf_soft_since;
    if limit.soft == 0 || used < limit.soft {
        if since.load(Ordering::Relaxed) != 0 {
            since.store(0, Ordering::Relaxed);
        }
        return false;
    }
    let now = unix_ms();
    match since.load(Ordering::Relaxed) {
        0 => {
            // First seen over it; another checker may have started the clock meanwhile.
            let _ = since.compare_exchange(0, now, Ordering::Relaxed, Ordering::Relaxed);
            false
        }
        start => now - start > limit.soft_ms,
    }
}

/// Closes `c` for passing its output limit: it leaves CLIENT LIST and the clients' memory at
/// once, as Valkey frees it before serving anyone else. `by_cron` words the log line as
/// Valkey's synchronous close does.
pub fn close(srv: &Server, c: &ClientInfo, by_cron: bool) {
    let how = if by_cron { "closed" } else { "scheduled to be closed ASAP" };
    tracing::warn!("Client id={} addr={} {how} for overcoming of output buffer limits.", c.id, c.addr);
    srv.stats.obuf_limit_disconnections.fetch_add(1, Ordering::Relaxed);
    c.kill();
    srv.clients.memory.closing(c);
}

/// The clients cron's check (Valkey's `closeClientOnOutputBufferLimitReached(c, 0)`): a client
/// whose soft limit expired while nothing was added to its output is closed here.
pub fn cron_visit(srv: &Server, c: &ClientInfo, rt: &Runtime) {
    let Some(limit) = class_limit(c, rt) else { return };
    if limit.is_none() || c.is_killed() {
        return;
    }
    let pending = c.pending_output();
    if pending > 0 && reached(c, pending, limit) {
        close(srv, c, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> ClientInfo {
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], 1));
        ClientInfo::new(1, addr, addr, -1, 0)
    }

    #[test]
    fn the_hard_limit_counts_past_the_static_buffer() {
        let c = client();
        let limit = Limit::from_triple(1000, 0, 0);
        assert!(!reached(&c, FREE_BYTES + 999, limit));
        assert!(reached(&c, FREE_BYTES + 1000, limit));
        assert!(!reached(&c, usize::MAX, Limit::default()), "no limit");
    }

    #[test]
    fn the_soft_limit_needs_time_and_restarts_once_under() {
        let c = client();
        let limit = Limit::from_triple(0, 1000, 60);
        assert!(!reached(&c, FREE_BYTES + 2000, limit), "the first time only starts the clock");
        let started = c.obuf_soft_since.load(Ordering::Relaxed);
        assert!(started > 0);
        assert!(!reached(&c, FREE_BYTES + 2000, limit), "60 seconds have not passed");
        c.obuf_soft_since.store(started - 60_001, Ordering::Relaxed);
        assert!(reached(&c, FREE_BYTES + 2000, limit), "over it for longer than 60 seconds");
        assert!(!reached(&c, FREE_BYTES, limit));
        assert_eq!(c.obuf_soft_since.load(Ordering::Relaxed), 0, "under it again: the clock stops");
    }
}
