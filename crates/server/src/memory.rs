//! Memory accounting: jemalloc's own counters, so `used_memory` is exactly the live data the
//! allocator handed out (like Valkey's zmalloc with jemalloc; blocks parked in thread caches
//! do not count), kept current between refreshes by per-thread counters; RSS from the kernel.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, LazyLock};

use arc_swap::ArcSwap;
use tikv_jemalloc_ctl::{epoch, stats, thread};

/// The process allocator: jemalloc, for its size classes (the compact-entry layout is sized
/// for them), thread caches, and exact statistics.
#[global_allocator]
static GLOBAL: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// Runs a jemalloc control that takes no value (`arena.<i>.purge`);
/// `name` must end with a NUL. Returns whether jemalloc accepted it.
pub fn mallctl_void(name: &[u8]) -> bool {
    assert_eq!(name.last(), Some(&0), "mallctl names are NUL-terminated");
    #[allow(unsafe_code)]
    // SAFETY: name is NUL-terminated, and a void mallctl takes no old or new value pointers.
    let rc = unsafe {
        tikv_jemalloc_sys::mallctl(
            name.as_ptr().cast(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            0,
        )
    };
    rc == 0
}

/// Bytes sitting in the threads' allocator caches: freed by the program, counted as
/// allocated by jemalloc. `used_memory` leaves them out, so it is the live data, as Valkey's
/// own counter is, and moves as soon as keys are freed (eviction depends on that).
fn thread_cached_bytes() -> u64 {
    // Both counters exist in jemalloc 5.3; stashed bytes are cached too, awaiting a check.
    #[allow(unsafe_code)]
    let read = |name: &[u8]| {
        // SAFETY: NUL-terminated names of size_t statistics.
        let v = unsafe { tikv_jemalloc_ctl::raw::read::<usize>(name) };
        v.unwrap_or(0) as u64
    };
    read(b"stats.arenas.4096.tcache_bytes\0") + read(b"stats.arenas.4096.tcache_stashed_bytes\0")
}

/// Each thread that checks memory publishes here its own net allocation (bytes it allocated
/// minus bytes it freed, from jemalloc's per-thread counters, which only it reads), so the
/// gauge can move between two refreshes of the global statistics without their cost.
static THREAD_NETS: LazyLock<ArcSwap<Vec<Arc<AtomicI64>>>> = LazyLock::new(Default::default);

thread_local! {
    /// This thread's counters and its published cell.
    static MY_NET: Option<(thread::ThreadLocal<u64>, thread::ThreadLocal<u64>, Arc<AtomicI64>)> = {
        let counters = thread::allocatedp::read().and_then(|a| Ok((a, thread::deallocatedp::read()?)));
        counters.ok().map(|(a, d)| {
            let cell = Arc::new(AtomicI64::new(0));
            THREAD_NETS.rcu(|v| {
                let mut v = Vec::clone(v);
                v.push(cell.clone());
                v
            });
            (a, d, cell)
        })
    };
}

/// Publishes the calling thread's net allocation.
fn publish_own() {
    MY_NET.with(|mine| {
        if let Some((a, d, cell)) = mine {
            cell.store(a.get().wrapping_sub(d.get()) as i64, Ordering::Relaxed);
        }
    });
}

/// Sum of the published net allocations.
fn published_total() -> i64 {
    THREAD_NETS.load().iter().map(|c| c.load(Ordering::Relaxed)).fold(0i64, i64::wrapping_add)
}

/// The allocator's counters: exact figures from its statistics at each refresh, and between
/// refreshes that figure moved by what the threads that check memory have allocated since.
#[derive(Default)]
pub struct MemoryGauge {
    allocated: AtomicU64,
    resident: AtomicU64,
    peak: AtomicU64,
    refreshed_ms: std::sync::atomic::AtomicI64,
    /// [`published_total`] at the last refresh.
    mark: AtomicI64,
}

impl MemoryGauge {
    /// Reads fresh counters from jemalloc (a few microseconds); call from the cron or when
    /// a decision depends on the exact value (eviction).
    pub fn refresh(&self) -> u64 {
        // Advancing the epoch makes jemalloc publish up-to-date totals.
        publish_own();
        self.mark.store(published_total(), Ordering::Relaxed);
        let _ = epoch::advance();
        let allocated = (stats::allocated::read().unwrap_or(0) as u64).saturating_sub(thread_cached_bytes());
        self.allocated.store(allocated, Ordering::Relaxed);
        self.peak.fetch_max(allocated, Ordering::Relaxed);
        self.resident.store(process_rss().unwrap_or(0), Ordering::Relaxed);
        allocated
    }

    /// Refreshes unless the figures are less than a millisecond old; returns `used_memory`.
    pub fn refresh_at(&self, now_ms: i64) -> u64 {
        if !self.stale(now_ms) {
            return self.used();
        }
        self.refreshed_ms.store(now_ms, Ordering::Relaxed);
        self.refresh()
    }

    /// Whether the figures are older than a millisecond.
    pub fn stale(&self, now_ms: i64) -> bool {
        self.refreshed_ms.load(Ordering::Relaxed) < now_ms
    }

    /// Bytes allocated at the last refresh (`used_memory`).
    pub fn used(&self) -> u64 {
        self.allocated.load(Ordering::Relaxed)
    }

    /// `used_memory` now, for a decision on the command path (maxmemory): the last refresh
    /// plus what the checking threads allocated since, each as of its own last check (this
    /// thread's as of now). Costs a few loads; a full refresh happens once a millisecond.
    /// Threads publish at most one command late, so the figure errs high, never low, by
    /// about what other threads allocated in one command.
    pub fn current(&self, now_ms: i64) -> u64 {
        if self.stale(now_ms) {
            return self.refresh_at(now_ms);
        }
        publish_own();
        let moved = published_total().wrapping_sub(self.mark.load(Ordering::Relaxed));
        self.used().saturating_add_signed(moved)
    }

    /// Largest `used_memory` seen (`used_memory_peak`).
    pub fn peak(&self) -> u64 {
        self.peak.load(Ordering::Relaxed).max(self.used())
    }

    /// Resets the peak to the current value (`MEMORY` stats reset / CONFIG RESETSTAT).
    pub fn reset_peak(&self) {
        self.peak.store(self.used(), Ordering::Relaxed);
    }

    /// Resident set size at the last refresh (`used_memory_rss`).
    pub fn rss(&self) -> u64 {
        self.resident.load(Ordering::Relaxed)
    }

    /// Allocator-level figures for INFO memory: (active, resident, mapped, retained).
    pub fn allocator_stats(&self) -> (u64, u64, u64, u64) {
        let _ = epoch::advance();
        (
            stats::active::read().unwrap_or(0) as u64,
            stats::resident::read().unwrap_or(0) as u64,
            stats::mapped::read().unwrap_or(0) as u64,
            stats::retained::read().unwrap_or(0) as u64,
        )
    }
}

/// The process's resident set size from /proc, as Valkey's `zmalloc_get_rss`.
pub fn process_rss() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    let page = page_size();
    Some(pages * page)
}

fn page_size() -> u64 {
    #[allow(unsafe_code)]
    // SAFETY: sysconf has no preconditions and only reads system configuration.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as u64 } else { 4096 }
}

/// Total physical memory (`total_system_memory`).
pub fn total_system_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("MemTotal:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kb| kb.parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

/// Formats bytes as Valkey's `bytesToHuman` (`1.50M`, `912.00K`, `100B`).
pub fn human(n: u64) -> String {
    let n = n as f64;
    const K: f64 = 1024.0;
    if n < K {
        format!("{}B", n as u64)
    } else if n < K * K {
        format!("{:.2}K", n / K)
    } else if n < K * K * K {
        format!("{:.2}M", n / (K * K))
    } else if n < K * K * K * K {
        format!("{:.2}G", n / (K * K * K))
    } else if n < K * K * K * K * K {
        format!("{:.2}T", n / (K * K * K * K))
    } else {
        format!("{:.2}P", n / (K * K * K * K * K))
    }
}
