//! Keeping memory under `maxmemory`: called from dispatch before each command when a limit
//! is set, and by CONFIG SET when the limit changes.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hotkv_engine::EngineConfig;
use hotkv_engine::policy::EvictionPolicy;

use crate::server::{Server, unix_ms};

/// How an eviction pass ended (Valkey's `EVICT_OK`, `EVICT_RUNNING` and `EVICT_FAIL`, with
/// the last split in two).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Memory is within the limit.
    Within,
    /// The evicted keys add up to what the pass set out to free, though memory is still over:
    /// what the evictions themselves made (invalidation messages to tracking clients, events)
    /// is not evicted for in the same pass, as in Valkey, or every eviction would call for more.
    Freed,
    /// Still over: the time budget ran out while keys were being evicted, so another pass
    /// can free more.
    OutOfTime,
    /// Still over after evicting keys: nothing evictable is left.
    Exhausted,
    /// Still over and nothing was evicted (no evictable key, `noeviction`, or another
    /// thread is evicting): commands that may grow memory are refused.
    Full,
}

/// Evicts as needed; returns whether the server is over the limit with nothing it can evict
/// (the caller then refuses commands that may grow memory). Like Valkey's `performEvictions`,
/// a pass that freed keys but ran out of time lets the command through: eviction continues on
/// the next command.
pub fn perform(srv: &Server, cfg: &EngineConfig, now_ms: i64) -> bool {
    pass(srv, cfg, now_ms) == Pass::Full
}

/// CONFIG SET maxmemory's hook (Valkey's `updateMaxmemory`): says in the log when the new
/// limit is below the memory in use. The eviction itself waits for [`limit_changed`], once
/// every hook of the CONFIG SET has succeeded.
pub fn warn_below_usage(srv: &Server) {
    let limit = srv.engine.load().maxmemory;
    if limit == 0 {
        return;
    }
    let used = srv.memory.refresh();
    if limit < used {
        tracing::warn!(
            "WARNING: the new maxmemory value set via CONFIG SET ({limit}) is smaller than the current memory usage \
             ({used}). This will result in key eviction and/or the inability to accept new write commands depending \
             on the maxmemory-policy."
        );
    }
}

/// [`limit_changed`] for a CONFIG SET inside EXEC: on a blocking thread of the runtime, which
/// waits for the transaction's slot locks like any other client.
pub fn limit_changed_after_exec(srv: &Server) {
    if let (Some(srv), Ok(rt)) = (srv.arc(), tokio::runtime::Handle::try_current()) {
        rt.spawn_blocking(move || limit_changed(&srv));
    }
}

/// After a CONFIG SET changed `maxmemory`: a limit below the memory in use evicts at once,
/// not on the next write. Valkey starts its eviction timer, whose first pass runs before the
/// CONFIG SET reply goes out and whose later ones go on until memory is within the limit or
/// nothing is left to evict; here the passes run back to back before the reply (other
/// clients keep being served meanwhile, and may evict too). A CONFIG SET that failed and was
/// rolled back evicts nothing, as in Valkey, where the timer sees the restored limit.
pub fn limit_changed(srv: &Server) {
    let cfg = srv.engine.load();
    if cfg.maxmemory == 0 {
        return;
    }
    loop {
        let now_ms = unix_ms();
        // A pause holds the dataset still (PAUSE_ACTION_EVICT): eviction waits for the first
        // command after it, as in Valkey.
        if srv.pause.holds_dataset(now_ms) || pass(srv, &cfg, now_ms) != Pass::OutOfTime {
            return;
        }
    }
}

/// The replication buffer's memory, and the part of it only replicas keep alive (beyond
/// `repl-backlog-size`).
pub fn replication_buffer(srv: &Server) -> (usize, usize) {
    let backlog = srv.settings.load().int(crate::config::table::REPL_BACKLOG_SIZE).max(0) as usize;
    srv.repl.primary.buffer_memory_split(backlog)
}

/// Memory that `maxmemory` does not count (INFO's `mem_not_counted_for_evict`): what replicas
/// keep in the replication buffer, as in Valkey, so a slow replica does not make the primary
/// evict keys, whose deletions it would then have to send that replica too; and what clients
/// closed for their memory still hold until their connections are gone, which Valkey frees
/// before it serves anyone else.
pub fn not_counted(srv: &Server) -> u64 {
    (replication_buffer(srv).1 + srv.clients.memory.freeing()) as u64
}

/// `used_memory` as `maxmemory` counts it, given the figure from the allocator.
fn counted(srv: &Server, used: u64) -> u64 {
    used.saturating_sub(not_counted(srv))
}

/// One eviction pass, bounded by `maxmemory-eviction-tenacity`'s time budget.
fn pass(srv: &Server, cfg: &EngineConfig, now_ms: i64) -> Pass {
    let used = srv.memory.current(now_ms);
    // What is not counted is only looked at when it matters (it takes the replication lock).
    if used <= cfg.maxmemory {
        return Pass::Within;
    }
    let used = counted(srv, used);
    if used <= cfg.maxmemory {
        return Pass::Within;
    }
    // `current` errs high by what a thread allocated before the last refresh and published
    // after it (counted twice until the next refresh: 83 KB once, just after a connection was
    // set up), so a key is evicted, or a write refused, only on the allocator's own figure.
    let used = counted(srv, srv.memory.refresh());
    if used <= cfg.maxmemory {
        return Pass::Within;
    }
    if cfg.policy == EvictionPolicy::NoEviction {
        return Pass::Full;
    }
    // One evictor at a time: others go on and are judged on the figure the evictor leaves.
    let Some(_guard) = srv.evict_lock.try_lock() else {
        return if counted(srv, srv.memory.used()) > cfg.maxmemory { Pass::Full } else { Pass::Within };
    };
    let start = Instant::now();
    let budget = time_budget(cfg.eviction_tenacity);
    let mut to_free = used - cfg.maxmemory;
    let mut freed_any = false;
    let events = crate::events::CmdEvents::new(srv, srv.rt.load().notify);
    loop {
        // The clock is read every 16 keys, as Valkey does, so a pass always makes progress.
        let done = hotkv_engine::evict::evict(&srv.ks, cfg, now_ms, to_free, &events, |d| {
            d.keys < 64 && (d.keys % 16 != 0 || d.keys == 0 || start.elapsed() < budget)
        });
        srv.stats.evicted_keys.fetch_add(done.keys, Ordering::Relaxed);
        freed_any |= done.keys > 0;
        // Not refresh_at: within the same millisecond it would return the figure from before
        // the eviction and the loop would evict until its budget ran out.
        let used = counted(srv, srv.memory.refresh());
        if used <= cfg.maxmemory {
            return Pass::Within;
        }
        if done.keys == 0 {
            return if freed_any { Pass::Exhausted } else { Pass::Full };
        }
        if done.bytes >= to_free {
            return Pass::Freed;
        }
        if start.elapsed() >= budget {
            return Pass::OutOfTime;
        }
        // Valkey's performEvictions counts down what its deletions freed from one target
        // set at the start: re-measuring here would add what the evictions caused meanwhile.
        to_free -= done.bytes;
    }
}

/// Valkey's `evictionTimeLimitUs`: 50 µs per unit of tenacity up to 10, then growing 15% per
/// unit, and unlimited at 100.
fn time_budget(tenacity: u32) -> Duration {
    if tenacity >= 100 {
        return Duration::from_secs(3600);
    }
    if tenacity <= 10 {
        return Duration::from_micros(50 * u64::from(tenacity.max(1)));
    }
    Duration::from_micros((500.0 * 1.15f64.powi(tenacity as i32 - 10)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};

    /// A server with `n` keys and `policy`, and a client of it.
    fn with_keys(n: usize, policy: &str) -> (std::sync::Arc<Server>, crate::cmd::testutil::TestClient) {
        let srv = server();
        let mut c = client(&srv, 40001);
        for i in 0..n {
            assert_eq!(c.run(&srv, &["SET", &format!("k{i}"), "v"]), "+OK\r\n");
        }
        assert_eq!(c.run(&srv, &["CONFIG", "SET", "maxmemory-policy", policy]), "+OK\r\n");
        (srv, c)
    }

    #[test]
    fn lowering_maxmemory_evicts_before_the_reply() {
        let (srv, mut c) = with_keys(40, "allkeys-lru");
        assert_eq!(c.run(&srv, &["CONFIG", "SET", "maxmemory", "1"]), "+OK\r\n");
        // No write came after the CONFIG SET: its own reply found the keys gone.
        assert_eq!(srv.ks.total_keys(), 0);
        assert_eq!(srv.stats.evicted_keys.load(Ordering::Relaxed), 40);
        // Nothing is left to evict, so writes are refused (Valkey's EVICT_FAIL)...
        assert!(c.run(&srv, &["SET", "k", "v"]).starts_with("-OOM "));
        // ...until the limit is lifted.
        assert_eq!(c.run(&srv, &["CONFIG", "SET", "maxmemory", "0"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["SET", "k", "v"]), "+OK\r\n");
    }

    #[test]
    fn a_limit_above_usage_evicts_nothing() {
        let (srv, mut c) = with_keys(40, "allkeys-lru");
        assert_eq!(c.run(&srv, &["CONFIG", "SET", "maxmemory", "100gb"]), "+OK\r\n");
        assert_eq!(srv.ks.total_keys(), 40);
    }

    #[test]
    fn noeviction_keeps_the_keys_and_refuses_writes() {
        let (srv, mut c) = with_keys(40, "noeviction");
        assert_eq!(c.run(&srv, &["CONFIG", "SET", "maxmemory", "1"]), "+OK\r\n");
        assert_eq!(srv.ks.total_keys(), 40);
        assert!(c.run(&srv, &["SET", "k", "v"]).starts_with("-OOM "));
    }

    #[test]
    fn a_rolled_back_config_set_evicts_nothing() {
        let (srv, mut c) = with_keys(40, "allkeys-lru");
        // A port already taken makes the listener hook fail after the maxmemory hook ran.
        let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = taken.local_addr().expect("bound address").port().to_string();
        let reply = c.run(&srv, &["CONFIG", "SET", "maxmemory", "1", "port", &port]);
        assert!(reply.starts_with("-ERR CONFIG SET failed"), "{reply}");
        assert_eq!(srv.ks.total_keys(), 40);
        assert_eq!(srv.engine.load().maxmemory, 0);
    }

    #[test]
    fn a_pause_holds_eviction_back() {
        let (srv, mut c) = with_keys(40, "allkeys-lru");
        assert_eq!(c.run(&srv, &["CLIENT", "PAUSE", "100000", "WRITE"]), "+OK\r\n");
        // CONFIG SET itself waits out a write pause (hotkv flags it may-replicate), so the
        // limit is installed the way CONFIG SET does it, then its eviction step is run.
        let (lowered, _) = crate::config::runtime::set(&srv.settings.load(), &[(b"maxmemory", b"1")])
            .expect("maxmemory 1 is a valid setting");
        srv.install_settings(lowered);
        limit_changed(&srv);
        assert_eq!(srv.ks.total_keys(), 40);
        assert_eq!(c.run(&srv, &["CLIENT", "UNPAUSE"]), "+OK\r\n");
        limit_changed(&srv);
        assert_eq!(srv.ks.total_keys(), 0);
    }
}
