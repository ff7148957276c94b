//! CLIENT PAUSE: for a while, commands of normal clients wait instead of running, all of
//! them (`ALL`) or those that may write or replicate (`WRITE`). While a pause lasts, keys
//! do not expire (a read of an expired key says it is missing but leaves it) and nothing is
//! evicted, so the dataset stays exactly as it was: what a failover or a resharding step
//! needs to copy a primary consistently.
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
    /// Unix milliseconds the pause ends at.
    end_ms: AtomicI64,
    /// Serialises changes, so mode and end move together.
    change: Mutex<()>,
    /// Woken when the pause ends or gets less strict.
    released: Notify,
}

impl Pause {
    /// The mode in force at `now_ms` (ending an expired pause on the way).
    pub fn mode(&self, now_ms: i64) -> Mode {
        let m = Mode::from_u8(self.mode.load(Ordering::Relaxed));
        if m == Mode::None || now_ms < self.end_ms() {
            return m;
        }
        let _g = self.change.lock();
        self.expire_locked(now_ms)
    }

    /// The mode at `now_ms`, ending a pause past its end; the caller holds `change`.
    fn expire_locked(&self, now_ms: i64) -> Mode {
        let m = Mode::from_u8(self.mode.load(Ordering::Relaxed));
        if m != Mode::None && now_ms >= self.end_ms() {
            self.set(Mode::None, 0);
            return Mode::None;
        }
        m
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
        let _g = self.change.lock();
        let current = self.expire_locked(now_ms);
        let mode = mode.max(current);
        let end = if current == Mode::None { end_ms } else { end_ms.max(self.end_ms()) };
        self.end_ms.store(end, Ordering::Relaxed);
        self.mode.store(mode as u8, Ordering::Relaxed);
    }

    /// CLIENT UNPAUSE.
    pub fn unpause(&self) {
        let _g = self.change.lock();
        self.set(Mode::None, 0);
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
