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
    let read = |mib: &[usize]| {
        if mib.is_empty() {
            return 0;
        }
        // SAFETY: the MIBs of size_t statistics, from jemalloc's own lookup.
        let v = unsafe { tikv_jemalloc_ctl::raw::read_mib::<usize>(mib) };
        v.unwrap_or(0) as u64
    };
    let m = &*MIBS;
    read(&m.tcache_bytes) + read(&m.tcache_stashed_bytes)
}

/// The jemalloc controls the cron reads ten times a second, looked up once: a lookup by name
/// (string compares down jemalloc's control tree, and "4096" parsed) cost about a tenth of an
/// idle node's cron.
struct Mibs {
    epoch: Option<tikv_jemalloc_ctl::epoch_mib>,
    allocated: Option<stats::allocated_mib>,
    tcache_bytes: Vec<usize>,
    tcache_stashed_bytes: Vec<usize>,
}

static MIBS: LazyLock<Mibs> = LazyLock::new(|| {
    let mib = |name: &[u8]| {
        // `stats.arenas.<i>.<name>`: four components.
        let mut m = vec![0usize; 4];
        tikv_jemalloc_ctl::raw::name_to_mib(name, &mut m).map(|()| m).unwrap_or_default()
    };
    Mibs {
        epoch: epoch::mib().ok(),
        allocated: stats::allocated::mib().ok(),
        tcache_bytes: mib(b"stats.arenas.4096.tcache_bytes\0"),
        tcache_stashed_bytes: mib(b"stats.arenas.4096.tcache_stashed_bytes\0"),
    }
});

/// Advances jemalloc's statistics epoch (it then merges the arenas' figures) and reads
/// `stats.allocated`.
fn allocator_allocated() -> u64 {
    let m = &*MIBS;
    if let Some(e) = &m.epoch {
        let _ = e.advance();
    }
    m.allocated.as_ref().and_then(|a| a.read().ok()).unwrap_or(0) as u64
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
        let allocated = allocator_allocated().saturating_sub(thread_cached_bytes());
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

    /// `used_memory` now, as the command path's first look at maxmemory: the last refresh
    /// plus what the checking threads allocated since, each as of its own last check (this
    /// thread's as of now). Costs a few loads; a full refresh happens once a millisecond.
    /// It errs high, never low: what a thread allocated before a refresh and publishes after
    /// it counts twice until the next one (83 KB once, a connection's set-up). So it only
    /// clears a command; eviction decides on [`MemoryGauge::refresh`] (`evict::pass`).
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
    // Opened once and read from the start each time: one system call instead of a path
    // lookup, a stat, reads and a close, ten times a second on an idle server.
    static STATM: LazyLock<Option<std::fs::File>> = LazyLock::new(|| std::fs::File::open("/proc/self/statm").ok());
    let mut buf = [0u8; 128];
    let n = std::os::unix::fs::FileExt::read_at(STATM.as_ref()?, &mut buf, 0).ok()?;
    let statm = std::str::from_utf8(&buf[..n]).ok()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rss_is_read_again_from_the_held_file_each_time() {
        let first = process_rss().expect("statm readable");
        // Touch 32 MiB so that the resident size moves well past noise.
        let block = vec![1u8; 32 << 20];
        let second = process_rss().expect("statm readable again");
        assert!(second >= first + (16 << 20), "{first} -> {second}");
        drop(block);
    }

    #[test]
    fn allocated_follows_the_allocator_through_the_cached_controls() {
        let gauge = MemoryGauge::default();
        let before = gauge.refresh();
        // Large against what other tests of this binary may free meanwhile.
        let block = vec![1u8; 64 << 20];
        let during = gauge.refresh();
        assert!(during >= before + (32 << 20), "{before} -> {during}");
        drop(block);
    }
}
