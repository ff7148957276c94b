//! CLIENT PAUSE: for a while, commands of normal clients wait instead of running, all of
//! them (`ALL`) or those that may write or replicate (`WRITE`). While a pause lasts, keys
//! do not expire (a read of an expired key says it is missing but leaves it) and nothing is
//! evicted, so the dataset stays exactly as it was: what a failover or a resharding step
//! needs to copy a primary consistently.
//!
//! Several purposes may pause at once, each with its own mode and end, as Valkey's pause
//! purposes: CLIENT PAUSE, a manual failover (the primary holds writes while its replica
//! catches up) and a shutdown waiting for its replicas. The strictest one is in force; ending
//! one leaves the others.
//!
//! The command path pays one relaxed load when no pause is on. Paused clients wait on a
//! [`Notify`] (no thread, no polling) and run their command again when the pause ends or
//! becomes less strict; a client paused again waits again.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};

use parking_lot::Mutex;
use tokio::sync::Notify;

/// What a pause holds back.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Mode {
    /// Nothing paused.
    None = 0,
    /// Commands that may write or replicate (`CLIENT PAUSE ... WRITE`).
    Write = 1,
    /// Every command (`CLIENT PAUSE ...` or `... ALL`).
    All = 2,
}

impl Mode {
    fn from_u8(v: u8) -> Mode {
        match v {
            1 => Mode::Write,
            2 => Mode::All,
            _ => Mode::None,
        }
    }
}

/// The server's pause state.
#[derive(Default)]
pub struct Pause {
    /// The mode in force (a `Mode` as u8): the fast path reads only this.
    mode: AtomicU8,
    /// Unix milliseconds the mode in force ends at (another purpose's may follow).
    end_ms: AtomicI64,
    /// Each purpose's pause; changes are serialised here, so mode and end move together.
    change: Mutex<Purposes>,
    /// Woken when the pause ends or gets less strict.
    released: Notify,
}

/// What each purpose pauses, and until when (unix ms).
#[derive(Default)]
struct Purposes {
    /// CLIENT PAUSE.
    client: Option<(Mode, i64)>,
    /// A cluster manual failover on this primary.
    failover: Option<(Mode, i64)>,
    /// A shutdown waiting for replicas (`PAUSE_DURING_SHUTDOWN`).
    shutdown: Option<(Mode, i64)>,
}

impl Purposes {
    fn all(&self) -> [Option<(Mode, i64)>; 3] {
        [self.client, self.failover, self.shutdown]
    }
}

impl Pause {
    /// The mode in force at `now_ms` (ending an expired pause on the way).
    pub fn mode(&self, now_ms: i64) -> Mode {
        let m = Mode::from_u8(self.mode.load(Ordering::Relaxed));
        if m == Mode::None || now_ms < self.end_ms() {
            return m;
        }
        let mut purposes = self.change.lock();
        self.recompute(&mut purposes, now_ms)
    }

    /// Drops the purposes past their end and puts the strictest remaining one in force;
    /// returns its mode. The caller holds `change`.
    fn recompute(&self, p: &mut Purposes, now_ms: i64) -> Mode {
        for slot in [&mut p.client, &mut p.failover, &mut p.shutdown] {
            if slot.is_some_and(|(_, end)| now_ms >= end) {
                *slot = None;
            }
        }
        let mode = p.all().iter().flatten().map(|(m, _)| *m).max().unwrap_or(Mode::None);
        // In force until the last purpose of that mode ends.
        let end = p.all().iter().flatten().filter(|(m, _)| *m == mode).map(|(_, e)| *e).max();
        self.set(mode, end.unwrap_or(0));
        mode
    }

    /// Whether expiry and eviction are held back at `now_ms`.
    pub fn holds_dataset(&self, now_ms: i64) -> bool {
        self.mode(now_ms) != Mode::None
    }

    /// When the pause in force ends, unix milliseconds.
    pub fn end_ms(&self) -> i64 {
        self.end_ms.load(Ordering::Relaxed)
    }

    /// CLIENT PAUSE: pauses until `end_ms`. As Valkey's `pauseClientsByClient`, a pause
    /// never gets shorter or less strict by a new one: the later end and the stricter mode
    /// stay.
    pub fn pause(&self, mode: Mode, end_ms: i64, now_ms: i64) {
        let mut p = self.change.lock();
        self.recompute(&mut p, now_ms);
        p.client = Some(match p.client {
            Some((m, end)) => (mode.max(m), end_ms.max(end)),
            None => (mode, end_ms),
        });
        self.recompute(&mut p, now_ms);
    }

    /// CLIENT UNPAUSE: ends CLIENT PAUSE's pause (a failover's stays, as in Valkey).
    pub fn unpause(&self) {
        let mut p = self.change.lock();
        p.client = None;
        // Nothing else is ended here: a purpose past its end is dropped by the next look.
        self.recompute(&mut p, i64::MIN);
    }

    /// A cluster manual failover on this primary: writes wait until `end_ms` at the latest.
    pub fn pause_for_failover(&self, end_ms: i64, now_ms: i64) {
        let mut p = self.change.lock();
        p.failover = Some((Mode::Write, end_ms));
        self.recompute(&mut p, now_ms);
    }

    /// The manual failover ended: its pause ends (a CLIENT PAUSE stays).
    pub fn end_failover_pause(&self, now_ms: i64) {
        let mut p = self.change.lock();
        p.failover = None;
        self.recompute(&mut p, now_ms);
    }

    /// A shutdown waits for its replicas: writes wait until it ends (Valkey pauses writes
    /// with no end, `PAUSE_DURING_SHUTDOWN`).
    pub fn pause_for_shutdown(&self, now_ms: i64) {
        let mut p = self.change.lock();
        p.shutdown = Some((Mode::Write, i64::MAX));
        self.recompute(&mut p, now_ms);
    }

    /// The shutdown failed or was aborted: its pause ends (the others stay).
    pub fn end_shutdown_pause(&self, now_ms: i64) {
        let mut p = self.change.lock();
        p.shutdown = None;
        self.recompute(&mut p, now_ms);
    }

    /// Returns once no write that began before the pause can still change the keyspace or
    /// the replication stream: the barrier a failover needs before it calls the offset final.
    ///
    /// A write checks the pause before it runs, on any worker thread, so one may be past that
    /// check when the pause begins. Dispatch checks the pause again once the call holds its
    /// slot locks, and a call records its effects before it releases them; taking every slot
    /// lock once, after the pause is in force, therefore waits out every call that locked a
    /// slot before, and every call that locks one after sees the pause and waits.
    /// (Valkey, single-threaded, needs no such pass.)
    pub fn drain_writes(&self, ks: &hotkv_engine::keyspace::Keyspace) {
        for i in 0..ks.databases() {
            let Some(db) = ks.db_if_used(i) else { continue };
            for slot in db.slots() {
                drop(slot.lock());
            }
        }
    }

    fn set(&self, mode: Mode, end_ms: i64) {
        let before = Mode::from_u8(self.mode.swap(mode as u8, Ordering::Relaxed));
        self.end_ms.store(end_ms, Ordering::Relaxed);
        if mode < before {
            self.released.notify_waiters();
        }
    }

    /// Waits until the pause ends or gets less strict (or `end_ms` passes: the first
    /// client to look then ends it and wakes the others).
    pub async fn released(&self) {
        let notified = self.released.notified();
        tokio::pin!(notified);
        // Registered before the check, so a release between the two is not missed.
        notified.as_mut().enable();
        let now = crate::server::unix_ms();
        if self.mode(now) == Mode::None {
            return;
        }
        let left = (self.end_ms() - now).max(0) as u64;
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(std::time::Duration::from_millis(left)) => {
                self.mode(crate::server::unix_ms());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_pause_keeps_the_later_end_and_the_stricter_mode() {
        let p = Pause::default();
        assert_eq!(p.mode(0), Mode::None);
        p.pause(Mode::All, 200, 0);
        p.pause(Mode::Write, 20, 10);
        assert_eq!(p.mode(100), Mode::All, "ALL stays until its end");
        assert_eq!(p.end_ms(), 200);
        assert_eq!(p.mode(200), Mode::None, "and ends then");
        p.pause(Mode::Write, 1000, 300);
        p.pause(Mode::Write, 400, 310);
        assert_eq!((p.mode(500), p.end_ms()), (Mode::Write, 1000), "a shorter pause does not shorten it");
        p.unpause();
        assert_eq!(p.mode(500), Mode::None);
    }

    #[test]
    fn a_failover_pause_and_client_pause_end_separately() {
        let p = Pause::default();
        p.pause_for_failover(1000, 0);
        assert_eq!((p.mode(10), p.end_ms()), (Mode::Write, 1000));
        // CLIENT PAUSE ALL is stricter for its time, then the failover's pause goes on.
        p.pause(Mode::All, 100, 10);
        assert_eq!((p.mode(50), p.end_ms()), (Mode::All, 100));
        assert_eq!(p.mode(100), Mode::Write);
        assert_eq!(p.end_ms(), 1000);
        // CLIENT UNPAUSE leaves the failover's pause; its end leaves a CLIENT PAUSE.
        p.pause(Mode::Write, 5000, 200);
        p.unpause();
        assert_eq!((p.mode(300), p.end_ms()), (Mode::Write, 1000));
        p.pause(Mode::Write, 5000, 300);
        p.end_failover_pause(400);
        assert_eq!((p.mode(400), p.end_ms()), (Mode::Write, 5000));
        p.unpause();
        assert_eq!(p.mode(400), Mode::None);
    }

    #[test]
    fn a_shutdown_pause_holds_writes_until_it_ends() {
        let p = Pause::default();
        p.pause_for_shutdown(0);
        assert_eq!(p.mode(1_000_000), Mode::Write, "no end of its own");
        p.pause(Mode::All, 100, 10);
        p.unpause();
        assert_eq!(p.mode(200), Mode::Write, "CLIENT UNPAUSE leaves it");
        p.end_shutdown_pause(300);
        assert_eq!(p.mode(300), Mode::None);
    }

    #[tokio::test]
    async fn waiters_are_released_by_unpause_and_by_the_end() {
        let p = std::sync::Arc::new(Pause::default());
        let now = crate::server::unix_ms();
        p.pause(Mode::All, now + 60_000, now);
        let waiter = tokio::spawn({
            let p = p.clone();
            async move { p.released().await }
        });
        tokio::task::yield_now().await;
        p.unpause();
        tokio::time::timeout(std::time::Duration::from_secs(10), waiter).await.expect("released").unwrap();
        let now = crate::server::unix_ms();
        p.pause(Mode::Write, now + 20, now);
        tokio::time::timeout(std::time::Duration::from_secs(10), p.released()).await.expect("ends by itself");
        assert_eq!(p.mode(crate::server::unix_ms()), Mode::None);
    }
}
