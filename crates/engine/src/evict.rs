//! Eviction when `maxmemory` is exceeded: approximated LRU/LFU/TTL/random, as Valkey does it,
//! by sampling a few keys from random slots into a pool of the best candidates and evicting
//! the best, until enough memory is freed or a time budget runs out.

use crate::ctx::{EngineConfig, Events};
use crate::entry::{Entry, ValueRef};
use crate::keyspace::Keyspace;
use crate::policy::{self, EvictionPolicy, random_u64};
use crate::slot::SLOTS;

/// Candidates kept per eviction round (Valkey's `EVPOOL_SIZE`).
const POOL_SIZE: usize = 16;

/// Result of one eviction call.
#[derive(Debug, Default, Clone, Copy)]
pub struct Evicted {
    /// Keys removed.
    pub keys: u64,
    /// Estimated bytes released.
    pub bytes: u64,
}

#[derive(Debug)]
struct Candidate {
    score: u64,
    db: usize,
    slot: u16,
    key: Vec<u8>,
}

/// Evicts keys under `cfg.policy` until about `to_free` bytes are released, or nothing is
/// evictable, or `keep_going` says stop (a time budget). Never holds more than one slot lock.
pub fn evict(
    ks: &Keyspace,
    cfg: &EngineConfig,
    now_ms: i64,
    to_free: u64,
    events: &dyn Events,
    mut keep_going: impl FnMut(&Evicted) -> bool,
) -> Evicted {
    let mut done = Evicted::default();
    if cfg.policy == EvictionPolicy::NoEviction {
        return done;
    }
    let mut pool: Vec<Candidate> = Vec::with_capacity(POOL_SIZE + cfg.samples);
    while done.bytes < to_free && keep_going(&done) {
        fill_pool(ks, cfg, now_ms, &mut pool);
        let Some(best) = pool.pop() else { break };
        let slot = ks.db(best.db).slot(best.slot);
        let mut table = ks.lock_slot(best.db, best.slot);
        let hash = crate::hash::key_hash(&best.key);
        let Some(i) = table.find(&best.key, hash) else { continue };
        let entry = table.remove_at(i);
        slot.sync(&table);
        // Recorded before the slot is unlocked: a replica must see the eviction before any
        // later write of the same key.
        crate::propagate::record_del(ks, best.db, &[&best.key], cfg.lazy_eviction);
        drop(table);
        done.keys += 1;
        done.bytes += entry_bytes(&entry) as u64;
        events.notify('e', "evicted", &best.key, best.db);
        events.key_touched(best.db, &best.key);
        drop(entry);
    }
    done
}

/// Approximate heap bytes of an entry: its allocation, its object, and its bucket.
pub fn entry_bytes(e: &Entry) -> usize {
    let obj = match e.value() {
        ValueRef::Obj(o) => o.heap_size(),
        ValueRef::Str(_) => 0,
    };
    e.alloc_size() + obj + 9
}

/// Samples keys from random non-empty slots into `pool`, sorted so the best candidate is last.
fn fill_pool(ks: &Keyspace, cfg: &EngineConfig, now_ms: i64, pool: &mut Vec<Candidate>) {
    let volatile = cfg.policy.volatile_only();
    for db in 0..ks.databases() {
        let Some(d) = ks.db_if_used(db) else { continue };
        let has_keys = if volatile { d.volatile() > 0 } else { !d.is_empty() };
        if !has_keys {
            continue;
        }
        for _ in 0..cfg.samples {
            let start = (random_u64() % SLOTS as u64) as usize;
            let Some(s) = (0..SLOTS).map(|k| (start + k) % SLOTS).find(|&s| {
                let slot = d.slot(s as u16);
                if volatile { slot.volatile() > 0 } else { slot.keys() > 0 }
            }) else {
                break;
            };
            let table = d.slot(s as u16).lock();
            let r = random_u64() as usize;
            let idx = if volatile { table.volatile_from(r) } else { table.occupied_from(r) };
            let Some(idx) = idx else { continue };
            let e = table.at(idx);
            let score = score(cfg, e, now_ms);
            if pool.iter().any(|c| c.db == db && c.key == e.key()) {
                continue;
            }
            pool.push(Candidate { score, db, slot: s as u16, key: e.key().to_vec() });
        }
    }
    pool.sort_by_key(|c| c.score);
    if pool.len() > POOL_SIZE {
        pool.drain(..pool.len() - POOL_SIZE);
    }
}

/// Higher is a better victim.
fn score(cfg: &EngineConfig, e: &Entry, now_ms: i64) -> u64 {
    match cfg.policy {
        EvictionPolicy::AllKeysLru | EvictionPolicy::VolatileLru => policy::idle_ms(e.lru(), now_ms),
        EvictionPolicy::AllKeysLfu | EvictionPolicy::VolatileLfu => {
            255 - u64::from(policy::lfu_decayed(e.lru(), now_ms, cfg.lfu_decay_time))
        }
        EvictionPolicy::VolatileTtl => u64::MAX - e.expire().unwrap_or(i64::MAX) as u64,
        EvictionPolicy::AllKeysRandom | EvictionPolicy::VolatileRandom => random_u64(),
        EvictionPolicy::NoEviction => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ctx::NoEvents;
    use crate::testkit::TestKit;

    #[test]
    fn lru_evicts_the_idlest_keys_first() {
        let mut t = TestKit::default();
        t.cfg.policy = EvictionPolicy::AllKeysLru;
        t.cfg.samples = 64;
        for i in 0..50 {
            t.run(&["SET", &format!("old{i}"), "v"]);
        }
        t.now_ms += 100_000;
        for i in 0..50 {
            t.run(&["SET", &format!("new{i}"), "v"]);
        }
        let done = evict(&t.ks, &t.cfg, t.now_ms, u64::MAX, &NoEvents, |d| d.keys < 25);
        assert_eq!(done.keys, 25);
        let mut survivors_new = 0;
        for i in 0..50 {
            if t.run(&["GET", &format!("new{i}")]) != "$-1\r\n" {
                survivors_new += 1;
            }
        }
        assert!(survivors_new >= 45, "evicted recent keys: {survivors_new} of 50 left");
    }

    #[test]
    fn volatile_policies_spare_persistent_keys() {
        let mut t = TestKit::default();
        t.cfg.policy = EvictionPolicy::VolatileTtl;
        for i in 0..20 {
            t.run(&["SET", &format!("p{i}"), "v"]);
            t.run(&["SET", &format!("v{i}"), "v", "EX", &format!("{}", 100 + i)]);
        }
        let done = evict(&t.ks, &t.cfg, t.now_ms, u64::MAX, &NoEvents, |_| true);
        assert_eq!(done.keys, 20);
        assert_eq!(t.ks.total_keys(), 20);
        let noev = EngineConfig::default();
        assert_eq!(evict(&t.ks, &noev, t.now_ms, u64::MAX, &NoEvents, |_| true).keys, 0);
    }
}
