//! Access tracking for eviction: the 24-bit LRU clock and Valkey's LFU counter, kept in each
//! entry's `lru` field, and the `maxmemory-policy` values.

use std::cell::Cell;

/// `maxmemory-policy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EvictionPolicy {
    /// Refuse writes with OOM.
    #[default]
    NoEviction,
    /// Least recently used among all keys.
    AllKeysLru,
    /// Least frequently used among all keys.
    AllKeysLfu,
    /// Random among all keys.
    AllKeysRandom,
    /// Least recently used among keys with a TTL.
    VolatileLru,
    /// Least frequently used among keys with a TTL.
    VolatileLfu,
    /// Random among keys with a TTL.
    VolatileRandom,
    /// Nearest expire time first.
    VolatileTtl,
}

impl EvictionPolicy {
    /// All policies with their directive spelling.
    pub const NAMES: &'static [(EvictionPolicy, &'static str)] = &[
        (EvictionPolicy::VolatileLru, "volatile-lru"),
        (EvictionPolicy::VolatileLfu, "volatile-lfu"),
        (EvictionPolicy::VolatileRandom, "volatile-random"),
        (EvictionPolicy::VolatileTtl, "volatile-ttl"),
        (EvictionPolicy::AllKeysLru, "allkeys-lru"),
        (EvictionPolicy::AllKeysLfu, "allkeys-lfu"),
        (EvictionPolicy::AllKeysRandom, "allkeys-random"),
        (EvictionPolicy::NoEviction, "noeviction"),
    ];

    /// Parses a directive value (case-insensitive).
    pub fn parse(s: &str) -> Option<EvictionPolicy> {
        Self::NAMES.iter().find(|(_, n)| n.eq_ignore_ascii_case(s)).map(|(p, _)| *p)
    }

    /// The directive spelling.
    pub fn name(self) -> &'static str {
        Self::NAMES.iter().find(|(p, _)| *p == self).map_or("noeviction", |(_, n)| n)
    }

    /// Whether entries track frequency rather than recency.
    pub fn is_lfu(self) -> bool {
        matches!(self, EvictionPolicy::AllKeysLfu | EvictionPolicy::VolatileLfu)
    }

    /// Whether only keys with a TTL may be evicted.
    pub fn volatile_only(self) -> bool {
        matches!(
            self,
            EvictionPolicy::VolatileLru
                | EvictionPolicy::VolatileLfu
                | EvictionPolicy::VolatileRandom
                | EvictionPolicy::VolatileTtl
        )
    }
}

/// Largest value of the 24-bit clock.
pub const LRU_CLOCK_MAX: u32 = (1 << 24) - 1;
/// Initial LFU counter of a new key, so it is not evicted before it had a chance.
pub const LFU_INIT_VAL: u32 = 5;

/// The LRU clock at `now_ms`: seconds, wrapping at 24 bits (about 194 days).
pub fn lru_clock(now_ms: i64) -> u32 {
    ((now_ms / 1000) as u32) & LRU_CLOCK_MAX
}

/// Milliseconds since the access recorded as `lru`, wrap-aware.
pub fn idle_ms(lru: u32, now_ms: i64) -> u64 {
    let now = lru_clock(now_ms);
    let ticks = if now >= lru { now - lru } else { LRU_CLOCK_MAX - lru + now };
    u64::from(ticks) * 1000
}

/// The `lru` field of a new key under `policy`.
pub fn initial(policy: EvictionPolicy, now_ms: i64) -> u32 {
    if policy.is_lfu() { (lfu_minutes(now_ms) << 8) | LFU_INIT_VAL } else { lru_clock(now_ms) }
}

/// The `lru` field after an access.
pub fn touched(lru: u32, policy: EvictionPolicy, now_ms: i64, log_factor: u32, decay_time: u32) -> u32 {
    if !policy.is_lfu() {
        return lru_clock(now_ms);
    }
    let counter = lfu_log_incr(lfu_decayed(lru, now_ms, decay_time), log_factor);
    (lfu_minutes(now_ms) << 8) | counter
}

/// The LFU counter of `lru` after the decay for the time since its last access.
pub fn lfu_decayed(lru: u32, now_ms: i64, decay_time: u32) -> u32 {
    let ldt = lru >> 8;
    let counter = lru & 255;
    let now = lfu_minutes(now_ms);
    let elapsed = if now >= ldt { now - ldt } else { 65535 - ldt + now };
    let periods = elapsed.checked_div(decay_time).unwrap_or(0);
    counter.saturating_sub(periods)
}

fn lfu_minutes(now_ms: i64) -> u32 {
    ((now_ms / 60_000) as u32) & 0xFFFF
}

fn lfu_log_incr(counter: u32, log_factor: u32) -> u32 {
    if counter >= 255 {
        return 255;
    }
    let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
    let p = 1.0 / (base * f64::from(log_factor) + 1.0);
    if random_f64() < p { counter + 1 } else { counter }
}

thread_local! {
    static RNG: Cell<u64> = Cell::new(seed());
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64);
    let local = 0u8;
    (t ^ (std::ptr::addr_of!(local) as u64).rotate_left(32)) | 1
}

/// A fast thread-local pseudo-random number (xorshift64*), for sampling, not for secrets.
pub fn random_u64() -> u64 {
    RNG.with(|r| {
        let mut x = r.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        r.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    })
}

fn random_f64() -> f64 {
    (random_u64() >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lfu_counter_grows_slowly_and_decays() {
        let now = 10 * 60_000;
        let mut lru = initial(EvictionPolicy::AllKeysLfu, now);
        assert_eq!(lru & 255, LFU_INIT_VAL);
        for _ in 0..1000 {
            lru = touched(lru, EvictionPolicy::AllKeysLfu, now, 10, 1);
        }
        let c = lru & 255;
        assert!(c > LFU_INIT_VAL && c < 40, "counter {c}");
        // Ten minutes later with a decay time of one minute, ten periods were lost.
        assert_eq!(lfu_decayed(lru, now + 10 * 60_000, 1), c - 10);
    }

    #[test]
    fn idle_time_wraps() {
        assert_eq!(idle_ms(lru_clock(5_000), 7_000), 2_000);
        assert_eq!(idle_ms(LRU_CLOCK_MAX, 1_000), 1_000);
    }
}
