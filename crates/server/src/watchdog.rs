//! The software watchdog (`watchdog-period`, Valkey's debugging aid): when a thread has been
//! inside one command for longer than the period, it gets a SIGALRM, whose handler logs
//! `--- WATCHDOG TIMER EXPIRED ---` and the thread's stack ([`crate::crash`]); the command
//! then carries on.
//!
//! Valkey re-arms a process timer from its cron, which a long command keeps from running.
//! hotkv runs commands on several threads, so each thread that runs commands has a slot here:
//! dispatch bumps the slot's counter when a command starts and again when it ends ([`busy`]:
//! two relaxed stores on a line no other thread writes), and a watchdog thread, started by the
//! first non-zero period, looks at the counters a few times per period. An odd counter that
//! has not moved for a whole period is a thread stuck in one command. The slots are a fixed
//! array of atomics, so the SIGALRM handler can read them too (to show the stacks of the
//! threads running a command when the signal comes from outside).

use std::sync::OnceLock;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// Marks the calling thread busy with a command until dropped. Nested calls (a command run
/// by another, as EXEC runs its queue) are no-ops.
pub fn busy() -> Busy {
    let index = MINE.try_with(|m| m.index).unwrap_or(NONE);
    let Some(slot) = SLOTS.get(index) else { return Busy(NONE) };
    let beat = slot.beat.load(Ordering::Relaxed);
    if beat & 1 == 1 {
        return Busy(NONE);
    }
    slot.beat.store(beat + 1, Ordering::Relaxed);
    Busy(index)
}

/// See [`busy`].
pub struct Busy(usize);

impl Drop for Busy {
    fn drop(&mut self) {
        if let Some(slot) = SLOTS.get(self.0) {
            slot.beat.store(slot.beat.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        }
    }
}

/// Sets the period in milliseconds (0 turns the watchdog off); starts the watchdog thread
/// the first time it is turned on.
pub fn set_period(ms: u64) {
    PERIOD_MS.store(ms, Ordering::Relaxed);
    if ms == 0 {
        return;
    }
    let thread = WATCHER.get_or_init(|| {
        std::thread::Builder::new().name("hotkv-watchdog".into()).spawn(watch).map(|h| h.thread().clone()).ok()
    });
    if let Some(t) = thread {
        t.unpark();
    }
}

/// Whether thread `tid` was signalled by [`forward_to_busy`] (clearing the mark).
/// Async-signal-safe.
pub(crate) fn take_forwarded(tid: i32) -> bool {
    SLOTS.iter().any(|s| s.tid.load(Ordering::Relaxed) == tid && s.forwarded.swap(false, Ordering::SeqCst))
}

/// Calls `signal` for every thread in a command but `me`, marked as forwarded first.
/// Async-signal-safe.
pub(crate) fn forward_to_busy(me: i32, mut signal: impl FnMut(i32)) {
    for s in SLOTS.iter() {
        let tid = s.tid.load(Ordering::Relaxed);
        if tid != 0 && tid != me && s.beat.load(Ordering::Relaxed) & 1 == 1 {
            s.forwarded.store(true, Ordering::SeqCst);
            signal(tid);
        }
    }
}

/// One thread's slot, on a cache line of its own: each worker writes its slot twice per
/// command, and neighbours sharing a line would bounce it between cores.
#[repr(align(128))]
struct Slot {
    /// The thread's kernel id; 0 when the slot is free.
    tid: AtomicI32,
    /// Bumped when a command starts and when it ends: odd while one runs.
    beat: AtomicU64,
    /// Set before a SIGALRM forwarded to this thread.
    forwarded: AtomicBool,
}

/// Claims a slot for the thread's life.
struct Registration {
    index: usize,
}

impl Registration {
    fn claim() -> Registration {
        let tid = thread_id();
        let index = SLOTS
            .iter()
            .position(|s| s.tid.compare_exchange(0, tid, Ordering::SeqCst, Ordering::Relaxed).is_ok())
            .unwrap_or(NONE);
        Registration { index }
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        if let Some(s) = SLOTS.get(self.index) {
            s.beat.store(0, Ordering::Relaxed);
            s.forwarded.store(false, Ordering::Relaxed);
            s.tid.store(0, Ordering::SeqCst);
        }
    }
}

thread_local! {
    static MINE: Registration = Registration::claim();
}

/// The watchdog thread: looks at every slot a few times per period.
fn watch() {
    // (beat seen, since when, already reported) per slot.
    let mut seen: Vec<(u64, Instant, bool)> = vec![(0, Instant::now(), false); SLOTS.len()];
    loop {
        let period = PERIOD_MS.load(Ordering::Relaxed);
        if period == 0 {
            std::thread::park();
            continue;
        }
        std::thread::sleep(Duration::from_millis((period / 4).clamp(5, 100)));
        let now = Instant::now();
        for (slot, seen) in SLOTS.iter().zip(seen.iter_mut()) {
            let tid = slot.tid.load(Ordering::Relaxed);
            let beat = slot.beat.load(Ordering::Relaxed);
            if tid == 0 || beat & 1 == 0 || beat != seen.0 {
                *seen = (beat, now, false);
                continue;
            }
            // Once per stuck command, as Valkey's timer, which only cron re-arms.
            if !seen.2 && now.duration_since(seen.1) >= Duration::from_millis(period) {
                seen.2 = true;
                crate::crash::watchdog_expired(tid);
            }
        }
    }
}

#[allow(unsafe_code)]
fn thread_id() -> i32 {
    // SAFETY: gettid has no arguments.
    unsafe { libc::gettid() }
}

/// No slot.
const NONE: usize = usize::MAX;
/// Threads that can be watched at once (runtime workers and blocking threads).
const MAX_THREADS: usize = 256;

static SLOTS: [Slot; MAX_THREADS] =
    [const { Slot { tid: AtomicI32::new(0), beat: AtomicU64::new(0), forwarded: AtomicBool::new(false) } };
        MAX_THREADS];
static PERIOD_MS: AtomicU64 = AtomicU64::new(0);
static WATCHER: OnceLock<Option<std::thread::Thread>> = OnceLock::new();

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_makes_the_beat_odd_and_nesting_is_a_no_op() {
        let index = MINE.with(|m| m.index);
        let beat = || SLOTS[index].beat.load(Ordering::Relaxed);
        let before = beat();
        assert_eq!(before & 1, 0);
        {
            let _outer = busy();
            assert_eq!(beat(), before + 1);
            {
                let _inner = busy();
                assert_eq!(beat(), before + 1);
            }
            assert_eq!(beat(), before + 1);
        }
        assert_eq!(beat(), before + 2);
        let mut seen = Vec::new();
        forward_to_busy(0, |t| seen.push(t));
        assert!(!seen.contains(&thread_id()), "an idle thread is not signalled");
    }

    #[test]
    fn a_thread_gives_its_slot_back() {
        let (index, tid) = std::thread::spawn(|| (MINE.with(|m| m.index), thread_id())).join().unwrap();
        assert_ne!(index, NONE);
        assert_ne!(SLOTS[index].tid.load(Ordering::SeqCst), tid);
    }
}
