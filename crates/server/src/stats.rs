//! Server statistics without shared hot counters.
//!
//! Counters are sharded by worker thread: a thread adds to its own cache-line-aligned shard
//! with relaxed atomics (no contention on the command path) and INFO sums the shards.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;

const SHARDS: usize = 16;

/// Error codes the server's own replies can carry are a few dozen; codes relayed from a peer
/// (a MIGRATE target's error) could be anything, so past this many kinds the rest count as
/// `ERRORSTATS_OVERFLOW` too (Valkey tracks them without bound).
const MAX_ERROR_KINDS: usize = 1024;

/// Per-command counters (INFO commandstats) and latency histogram (INFO latencystats).
#[derive(Default)]
pub struct CmdCounters {
    calls: AtomicU64,
    nanos: AtomicU64,
    rejected: AtomicU64,
    failed: AtomicU64,
    hist: OnceLock<Box<Histogram>>,
}

/// Totals of one command over all shards.
#[derive(Debug, Default, Clone, Copy)]
pub struct CmdTotals {
    /// Successful or failed executions.
    pub calls: u64,
    /// Time spent executing, in microseconds.
    pub usec: u64,
    /// Refused before execution (arity, auth, OOM...).
    pub rejected: u64,
    /// Executed with an error reply.
    pub failed: u64,
}

#[repr(align(128))]
struct Shard {
    commands: AtomicU64,
    net_in: AtomicU64,
    net_out: AtomicU64,
    hits: AtomicU64,
    misses: AtomicU64,
    expired: AtomicU64,
    /// Hash fields deleted for their TTL by commands (lazy expiry, HEXPIRE with a past time).
    expired_fields: AtomicU64,
    dirty: AtomicU64,
    per_cmd: Box<[CmdCounters]>,
}

/// Server-wide statistics.
pub struct Stats {
    shards: Box<[Shard]>,
    /// `total_connections_received`.
    pub connections_received: AtomicU64,
    /// `rejected_connections`.
    pub rejected_connections: AtomicU64,
    /// `evicted_keys`.
    pub evicted_keys: AtomicU64,
    /// `expired_keys` from the active cycle (lazy ones are in the shards).
    pub active_expired: AtomicU64,
    /// `expired_subkeys` (Redis 7.4): hash fields the active cycle deleted for their TTL.
    pub active_expired_fields: AtomicU64,
    /// `expired_time_cap_reached_count`.
    pub expire_cap_reached: AtomicU64,
    /// `expire_cycle_cpu_milliseconds`, in microseconds.
    pub expire_cycle_us: AtomicU64,
    /// `expired_stale_perc`, an `f64`'s bits.
    expired_stale_perc: AtomicU64,
    /// `total_eviction_exceeded_time` etc are not tracked; `evicted_clients`.
    pub evicted_clients: AtomicU64,
    /// `client_query_buffer_limit_disconnections`.
    pub qbuf_limit_disconnections: AtomicU64,
    /// `client_output_buffer_limit_disconnections`.
    pub obuf_limit_disconnections: AtomicU64,
    /// Cron cycles (hotkv's event loop: workers have no loop of their own to count).
    pub cron_cycles: AtomicU64,
    /// Microseconds spent in cron cycles.
    pub cron_usec: AtomicU64,
    /// Most commands run in one batch (`eventloop_cmd_per_cycle_max`).
    pub max_batch_cmds: AtomicU64,
    /// Longest batch in microseconds (`eventloop_duration_max`).
    pub max_batch_usec: AtomicU64,
    /// `total_error_replies`.
    pub error_replies: AtomicU64,
    errors: Mutex<HashMap<String, u64>>,
    /// Instantaneous metrics samples.
    pub samples: Mutex<Samples>,
}

/// Ring buffers for `instantaneous_*` metrics, sampled by the cron every 100 ms.
#[derive(Default)]
pub struct Samples {
    last_ms: i64,
    last: [u64; 5],
    ring: [[f64; 16]; 5],
    idx: usize,
}

impl Samples {
    /// Records totals (commands, bytes in, bytes out, cron cycles, cron µs) seen at `now_ms`.
    pub fn record(&mut self, now_ms: i64, totals: [u64; 5]) {
        if self.last_ms != 0 {
            let dt = (now_ms - self.last_ms).max(1) as f64;
            for (k, total) in totals.iter().enumerate() {
                self.ring[k][self.idx] = (total.saturating_sub(self.last[k])) as f64 * 1000.0 / dt;
            }
            self.idx = (self.idx + 1) % 16;
        }
        self.last_ms = now_ms;
        self.last = totals;
    }

    /// Mean rate of metric `k` (0 commands, 1 input bytes, 2 output bytes, 3 cron cycles,
    /// 4 cron µs) per second.
    pub fn rate(&self, k: usize) -> f64 {
        self.ring[k].iter().sum::<f64>() / 16.0
    }
}

thread_local! {
    static SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

fn shard_index() -> usize {
    SHARD.with(|s| {
        let mut i = s.get();
        if i == usize::MAX {
            i = NEXT_SHARD.fetch_add(1, Ordering::Relaxed) % SHARDS;
            s.set(i);
        }
        i
    })
}

impl Stats {
    /// Statistics for `commands` registered commands.
    pub fn new(commands: usize) -> Stats {
        let shards = (0..SHARDS)
            .map(|_| Shard {
                commands: AtomicU64::new(0),
                net_in: AtomicU64::new(0),
                net_out: AtomicU64::new(0),
                hits: AtomicU64::new(0),
                misses: AtomicU64::new(0),
                expired: AtomicU64::new(0),
                expired_fields: AtomicU64::new(0),
                dirty: AtomicU64::new(0),
                per_cmd: (0..commands).map(|_| CmdCounters::default()).collect(),
            })
            .collect();
        Stats {
            shards,
            connections_received: AtomicU64::new(0),
            rejected_connections: AtomicU64::new(0),
            evicted_keys: AtomicU64::new(0),
            active_expired: AtomicU64::new(0),
            active_expired_fields: AtomicU64::new(0),
            expire_cap_reached: AtomicU64::new(0),
            expire_cycle_us: AtomicU64::new(0),
            expired_stale_perc: AtomicU64::new(0),
            evicted_clients: AtomicU64::new(0),
            qbuf_limit_disconnections: AtomicU64::new(0),
            obuf_limit_disconnections: AtomicU64::new(0),
            cron_cycles: AtomicU64::new(0),
            cron_usec: AtomicU64::new(0),
            max_batch_cmds: AtomicU64::new(0),
            max_batch_usec: AtomicU64::new(0),
            error_replies: AtomicU64::new(0),
            errors: Mutex::new(HashMap::new()),
            samples: Mutex::new(Samples::default()),
        }
    }

    fn shard(&self) -> &Shard {
        &self.shards[shard_index()]
    }

    /// Records one executed command.
    pub fn call(&self, cmd: usize, nanos: u64, failed: bool, track_latency: bool) {
        let s = self.shard();
        s.commands.fetch_add(1, Ordering::Relaxed);
        let c = &s.per_cmd[cmd];
        c.calls.fetch_add(1, Ordering::Relaxed);
        c.nanos.fetch_add(nanos, Ordering::Relaxed);
        if failed {
            c.failed.fetch_add(1, Ordering::Relaxed);
        }
        if track_latency {
            c.hist.get_or_init(Default::default).add(nanos);
        }
    }

    /// Records a command refused before execution.
    pub fn reject(&self, cmd: Option<usize>) {
        if let Some(cmd) = cmd {
            self.shard().per_cmd[cmd].rejected.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records an error reply by its code (`ERR`, `WRONGTYPE`...).
    pub fn error(&self, code: &str) {
        self.count_error(code, MAX_ERROR_KINDS);
    }

    /// An error reply whose code a script chose (Valkey's `ERR_REPLY_FLAG_CUSTOM`): past 128
    /// kinds, a code not seen yet is counted as `ERRORSTATS_OVERFLOW`, so scripts inventing
    /// codes cannot grow the table without bound.
    pub fn error_custom(&self, code: &str) {
        self.count_error(code, 128);
    }

    fn count_error(&self, code: &str, kinds: usize) {
        self.error_replies.fetch_add(1, Ordering::Relaxed);
        let mut errors = self.errors.lock();
        let code = if errors.len() >= kinds && !errors.contains_key(code) { "ERRORSTATS_OVERFLOW" } else { code };
        match errors.get_mut(code) {
            Some(n) => *n += 1,
            None => {
                errors.insert(code.to_string(), 1);
            }
        }
    }

    /// Folds a connection's local counters in.
    pub fn absorb(&self, local: &mut hotkv_engine::LocalStats, net_in: u64, net_out: u64) {
        let s = self.shard();
        for (counter, v) in [
            (&s.hits, local.hits),
            (&s.misses, local.misses),
            (&s.expired, local.expired),
            (&s.expired_fields, local.expired_fields),
            (&s.dirty, local.dirty),
            (&s.net_in, net_in),
            (&s.net_out, net_out),
        ] {
            if v != 0 {
                counter.fetch_add(v, Ordering::Relaxed);
            }
        }
        *local = hotkv_engine::LocalStats::default();
    }

    fn sum(&self, f: impl Fn(&Shard) -> &AtomicU64) -> u64 {
        self.shards.iter().map(|s| f(s).load(Ordering::Relaxed)).sum()
    }

    /// `total_commands_processed`.
    pub fn commands(&self) -> u64 {
        self.sum(|s| &s.commands)
    }
    /// `total_net_input_bytes`.
    pub fn net_in(&self) -> u64 {
        self.sum(|s| &s.net_in)
    }
    /// `total_net_output_bytes`.
    pub fn net_out(&self) -> u64 {
        self.sum(|s| &s.net_out)
    }
    /// `keyspace_hits`.
    pub fn hits(&self) -> u64 {
        self.sum(|s| &s.hits)
    }
    /// `keyspace_misses`.
    pub fn misses(&self) -> u64 {
        self.sum(|s| &s.misses)
    }
    /// `expired_keys`.
    pub fn expired(&self) -> u64 {
        self.sum(|s| &s.expired) + self.active_expired.load(Ordering::Relaxed)
    }
    /// `expired_subkeys`: hash fields deleted for their TTL.
    pub fn expired_fields(&self) -> u64 {
        self.sum(|s| &s.expired_fields) + self.active_expired_fields.load(Ordering::Relaxed)
    }
    /// `expired_stale_perc`: the expire cycle's estimate of the share of keys with a TTL that
    /// had expired, in percent.
    pub fn expired_stale_perc(&self) -> f64 {
        f64::from_bits(self.expired_stale_perc.load(Ordering::Relaxed))
    }
    /// Publishes the expire cycle's estimate (see [`Stats::expired_stale_perc`]).
    pub fn set_expired_stale_perc(&self, perc: f64) {
        self.expired_stale_perc.store(perc.to_bits(), Ordering::Relaxed);
    }
    /// Changes since startup (`rdb_changes_since_last_save`).
    pub fn dirty(&self) -> u64 {
        self.sum(|s| &s.dirty)
    }

    /// Records a batch's size and duration when it sets a new maximum.
    pub fn batch(&self, commands: u64, usec: u64) {
        // Read first: the shared line is written only when a record falls.
        if commands > self.max_batch_cmds.load(Ordering::Relaxed) {
            self.max_batch_cmds.fetch_max(commands, Ordering::Relaxed);
        }
        if usec > self.max_batch_usec.load(Ordering::Relaxed) {
            self.max_batch_usec.fetch_max(usec, Ordering::Relaxed);
        }
    }

    /// Microseconds spent executing commands, all commands together.
    pub fn command_usec(&self) -> u64 {
        self.shards.iter().flat_map(|s| s.per_cmd.iter()).map(|c| c.nanos.load(Ordering::Relaxed)).sum::<u64>() / 1000
    }

    /// Totals for command `cmd`.
    pub fn command(&self, cmd: usize) -> CmdTotals {
        let mut t = CmdTotals::default();
        for s in self.shards.iter() {
            let c = &s.per_cmd[cmd];
            t.calls += c.calls.load(Ordering::Relaxed);
            t.usec += c.nanos.load(Ordering::Relaxed) / 1000;
            t.rejected += c.rejected.load(Ordering::Relaxed);
            t.failed += c.failed.load(Ordering::Relaxed);
        }
        t
    }

    /// Latency percentiles of command `cmd` in microseconds, if it ever ran.
    pub fn percentiles(&self, cmd: usize, ps: &[f64]) -> Option<Vec<f64>> {
        let merged = self.merged_histogram(cmd)?;
        Some(ps.iter().map(|p| merged.percentile(*p) as f64 / 1000.0).collect())
    }

    /// LATENCY HISTOGRAM's figures for command `cmd`: its calls, and the cumulative count of
    /// calls at each power-of-two bucket from 1024 ns on, in microseconds, as Valkey's
    /// `fillCommandCDF` walks its histogram (buckets that add nothing are left out).
    pub fn latency_cdf(&self, cmd: usize) -> Option<(u64, Vec<(u64, u64)>)> {
        let merged = self.merged_histogram(cmd)?;
        let total = merged.count();
        let mut out = Vec::new();
        let mut seen = 0;
        for k in 10..64u32 {
            if seen >= total {
                break;
            }
            let bound = 1u64 << k;
            let cumulative = merged.count_below(bound);
            if cumulative > seen {
                // hdr_histogram's highest value equivalent to 2^k at two significant digits.
                out.push(((bound + (bound >> 7) - 1) / 1000, cumulative));
                seen = cumulative;
            }
        }
        Some((total, out))
    }

    /// The command's histogram over all shards; None when it has no samples (never ran, or
    /// CONFIG RESETSTAT emptied it: Valkey then reports nothing, as if it never ran).
    fn merged_histogram(&self, cmd: usize) -> Option<Histogram> {
        let mut merged = Histogram::default();
        for s in self.shards.iter() {
            if let Some(h) = s.per_cmd[cmd].hist.get() {
                merged.merge(h);
            }
        }
        (merged.count() > 0).then_some(merged)
    }

    /// Error counts by code.
    pub fn errors(&self) -> Vec<(String, u64)> {
        let mut v: Vec<_> = self.errors.lock().iter().map(|(k, v)| (k.clone(), *v)).collect();
        v.sort();
        v
    }

    /// CONFIG RESETSTAT.
    pub fn reset(&self) {
        for s in self.shards.iter() {
            for a in [&s.commands, &s.net_in, &s.net_out, &s.hits, &s.misses, &s.expired, &s.expired_fields] {
                a.store(0, Ordering::Relaxed);
            }
            for c in s.per_cmd.iter() {
                for a in [&c.calls, &c.nanos, &c.rejected, &c.failed] {
                    a.store(0, Ordering::Relaxed);
                }
                if let Some(h) = c.hist.get() {
                    h.reset();
                }
            }
        }
        for a in [
            &self.connections_received,
            &self.rejected_connections,
            &self.evicted_keys,
            &self.active_expired,
            &self.active_expired_fields,
            &self.expire_cap_reached,
            &self.expire_cycle_us,
            &self.expired_stale_perc,
            &self.evicted_clients,
            &self.qbuf_limit_disconnections,
            &self.obuf_limit_disconnections,
            &self.error_replies,
        ] {
            a.store(0, Ordering::Relaxed);
        }
        self.errors.lock().clear();
    }
}

/// A log-linear latency histogram in nanoseconds: 8 linear sub-buckets per power of two,
/// so percentiles are within 12.5% of the true value.
pub struct Histogram {
    buckets: Box<[AtomicU64]>,
}

const SUB: u32 = 8;
/// Indexes go up to exponent 63: (63 - 2) * SUB + SUB - 1.
const BUCKETS: usize = (62 * SUB) as usize;

impl Default for Histogram {
    fn default() -> Self {
        Histogram { buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect() }
    }
}

impl Histogram {
    fn index(v: u64) -> usize {
        if v < u64::from(SUB) {
            return v as usize;
        }
        let e = 63 - v.leading_zeros();
        let sub = (v >> (e - 3)) & u64::from(SUB - 1);
        ((e - 2) * SUB) as usize + sub as usize
    }

    fn upper(i: usize) -> u64 {
        if i < SUB as usize {
            return i as u64;
        }
        let e = (i / SUB as usize) as u32 + 2;
        let sub = (i % SUB as usize) as u64;
        ((u64::from(SUB) + sub + 1) << (e - 3)).wrapping_sub(1)
    }

    /// Records a value.
    pub fn add(&self, v: u64) {
        self.buckets[Self::index(v).min(BUCKETS - 1)].fetch_add(1, Ordering::Relaxed);
    }

    fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.buckets.iter().zip(other.buckets.iter()) {
            a.fetch_add(b.load(Ordering::Relaxed), Ordering::Relaxed);
        }
    }

    fn reset(&self) {
        for b in self.buckets.iter() {
            b.store(0, Ordering::Relaxed);
        }
    }

    /// Number of recorded values.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Number of recorded values below `bound`, a power of two (bucket edges fall on them).
    pub fn count_below(&self, bound: u64) -> u64 {
        debug_assert!(bound.is_power_of_two());
        self.buckets
            .iter()
            .enumerate()
            .take_while(|(i, _)| Self::upper(*i) < bound)
            .map(|(_, b)| b.load(Ordering::Relaxed))
            .sum()
    }

    /// The value at percentile `p` (0-100), as the upper bound of its bucket.
    pub fn percentile(&self, p: f64) -> u64 {
        let total: u64 = self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum();
        if total == 0 {
            return 0;
        }
        let target = ((p / 100.0) * total as f64).ceil().max(1.0) as u64;
        let mut seen = 0;
        for (i, b) in self.buckets.iter().enumerate() {
            seen += b.load(Ordering::Relaxed);
            if seen >= target {
                return Self::upper(i);
            }
        }
        Self::upper(BUCKETS - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn script_chosen_error_codes_overflow_past_128_kinds_and_server_ones_do_not() {
        let stats = Stats::new(1);
        for i in 0..130 {
            stats.error_custom(&format!("E{i}"));
        }
        stats.error_custom("E1");
        stats.error("ERR");
        let errors: HashMap<String, u64> = stats.errors().into_iter().collect();
        assert_eq!(errors["ERRORSTATS_OVERFLOW"], 2, "E128 and E129 came after 128 kinds");
        assert_eq!(errors["E1"], 2, "a code already tracked keeps counting");
        assert_eq!(errors["ERR"], 1, "the server's own codes are still tracked");
        assert!(!errors.contains_key("E129"));
    }

    #[test]
    fn counts_below_powers_of_two_are_exact() {
        let h = Histogram::default();
        for v in [0u64, 1, 7, 8, 1023, 1024, 1025, 2047, 2048, 1 << 20, (1 << 20) + 5, u64::MAX] {
            h.add(v);
        }
        assert_eq!(h.count_below(8), 3);
        assert_eq!(h.count_below(1024), 5);
        assert_eq!(h.count_below(2048), 8);
        assert_eq!(h.count_below(4096), 9);
        assert_eq!(h.count_below(1 << 20), 9);
        assert_eq!(h.count_below(1 << 21), 11);
        assert_eq!(h.count(), 12);
    }

    #[test]
    fn histogram_percentiles_are_close() {
        let h = Histogram::default();
        for v in 1..=10_000u64 {
            h.add(v * 1000);
        }
        let p50 = h.percentile(50.0) as f64;
        let p99 = h.percentile(99.0) as f64;
        assert!((p50 / 5_000_000.0 - 1.0).abs() < 0.13, "{p50}");
        assert!((p99 / 9_900_000.0 - 1.0).abs() < 0.13, "{p99}");
        for i in 0..BUCKETS - 1 {
            assert!(Histogram::index(Histogram::upper(i)) == i, "bucket {i}");
        }
    }
}
