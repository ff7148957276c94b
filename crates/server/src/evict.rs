//! Keeping memory under `maxmemory`, called from dispatch before each command when a limit
//! is set.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use hotkv_engine::EngineConfig;
use hotkv_engine::policy::EvictionPolicy;

use crate::server::Server;

/// Evicts as needed; returns whether the server is over the limit with nothing it can evict
/// (the caller then refuses commands that may grow memory). Like Valkey's `performEvictions`,
/// a pass that freed keys but ran out of time lets the command through: eviction continues on
/// the next command.
pub fn perform(srv: &Server, cfg: &EngineConfig, now_ms: i64) -> bool {
    let used = srv.memory.current(now_ms);
    if used <= cfg.maxmemory {
        return false;
    }
    if cfg.policy == EvictionPolicy::NoEviction {
        return true;
    }
    // One evictor at a time: others go on and are judged on the figure the evictor leaves.
    let Some(_guard) = srv.evict_lock.try_lock() else {
        return srv.memory.used() > cfg.maxmemory;
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
        let used = srv.memory.refresh();
        if used <= cfg.maxmemory {
            return false;
        }
        if done.keys == 0 {
            return !freed_any;
        }
        if start.elapsed() >= budget {
            return false;
        }
        to_free = used - cfg.maxmemory;
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
