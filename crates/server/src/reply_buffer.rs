//! Each client's reply buffer as Valkey sizes it: CLIENT LIST's `rbs=` (the buffer's size,
//! Valkey's `buf_usable_size`) and `rbp=` (the most of it a batch of replies used since the
//! last reset, `buf_peak`), and the cron pass that resizes it
//! (`clientsCronResizeOutputBuffer`): a buffer whose peak stayed under half its size shrinks to
//! the peak (not below 1 KiB), one that was filled doubles (up to 16 KiB), and every
//! `peak-reset-time` the peak restarts from what is pending, so an idle client shrinks.
//!
//! The connection's real reply buffer grows with what a batch needs; it keeps at most the
//! size recorded here between batches (see `Conn::release_idle_buffers`). The per-batch cost
//! is one load, plus a store only when the peak rises; everything else runs in the cron.
//!
//! DEBUG REPLYBUFFER PEAK-RESET-TIME and RESIZING change the [`Tuning`], as in Valkey.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};

use crate::server::Server;
use crate::session::ClientInfo;

/// The smallest size a buffer shrinks to (Valkey's `PROTO_REPLY_MIN_BYTES`).
pub const MIN_SIZE: usize = 1024;
/// A new client's size, and the most a buffer grows to (`PROTO_REPLY_CHUNK_BYTES`).
pub const CHUNK_SIZE: usize = 16 * 1024;
/// How often the peak restarts by default (`REPLY_BUFFER_DEFAULT_PEAK_RESET_TIME`).
pub const DEFAULT_PEAK_RESET_MS: i64 = 5000;

/// One client's reply buffer size and peak. The connection raises the peak, the cron resizes
/// and resets; both only ever store whole values, so a race loses one observation at most.
#[derive(Debug)]
pub struct ReplyBuffer {
    size: AtomicUsize,
    peak: AtomicUsize,
    /// Unix ms of the last peak reset.
    peak_reset_at: AtomicI64,
}

impl ReplyBuffer {
    /// A new client's buffer: 16 KiB, its peak the whole of it, as Valkey's `createClient`.
    pub fn new(now_ms: i64) -> ReplyBuffer {
        ReplyBuffer {
            size: AtomicUsize::new(CHUNK_SIZE),
            peak: AtomicUsize::new(CHUNK_SIZE),
            peak_reset_at: AtomicI64::new(now_ms),
        }
    }

    /// The buffer's size (`rbs=`).
    pub fn size(&self) -> usize {
        self.size.load(Ordering::Relaxed)
    }

    /// The peak since the last reset (`rbp=`).
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// A batch queued `pending` reply bytes: what of them fits in the buffer raises the peak
    /// (Valkey puts the rest in its reply list, which the peak does not see).
    #[inline]
    pub fn note(&self, pending: usize) {
        let used = pending.min(self.size.load(Ordering::Relaxed));
        if used > self.peak.load(Ordering::Relaxed) {
            self.peak.store(used, Ordering::Relaxed);
        }
    }

    /// One cron visit: resizes by the peak, then resets the peak to what is `pending` if the
    /// reset time has passed.
    pub fn cron(&self, pending: usize, now_ms: i64, tuning: &Tuning) -> Option<Resize> {
        if !tuning.resizing.load(Ordering::Relaxed) {
            return None;
        }
        let size = self.size();
        let resize = next_size(size, self.peak());
        let reset_ms = tuning.peak_reset_ms.load(Ordering::Relaxed);
        if reset_ms >= 0 && now_ms - self.peak_reset_at.load(Ordering::Relaxed) >= reset_ms {
            self.peak.store(pending.min(size), Ordering::Relaxed);
            self.peak_reset_at.store(now_ms, Ordering::Relaxed);
        }
        let resize = resize?;
        let new = match resize {
            Resize::Shrink(n) | Resize::Grow(n) => n,
        };
        self.size.store(new, Ordering::Relaxed);
        Some(resize)
    }
}

/// A size change the cron made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Resize {
    /// Shrunk to this many bytes.
    Shrink(usize),
    /// Grown to this many bytes.
    Grow(usize),
}

/// Valkey's rule: under half used shrinks to the peak plus one (not below [`MIN_SIZE`]); a
/// full buffer doubles while the doubled size stays under twice [`CHUNK_SIZE`], capped at it.
pub fn next_size(size: usize, peak: usize) -> Option<Resize> {
    let half = size / 2;
    if half >= MIN_SIZE && peak < half {
        return Some(Resize::Shrink(MIN_SIZE.max(peak + 1)));
    }
    if size * 2 < CHUNK_SIZE * 2 && peak == size {
        return Some(Resize::Grow(CHUNK_SIZE.min(size * 2)));
    }
    None
}

/// DEBUG REPLYBUFFER's settings and the counts INFO reports.
#[derive(Debug)]
pub struct Tuning {
    /// Milliseconds between peak resets; negative for never.
    pub peak_reset_ms: AtomicI64,
    /// Whether the cron resizes at all.
    pub resizing: AtomicBool,
    /// `reply_buffer_shrinks`.
    pub shrinks: AtomicU64,
    /// `reply_buffer_expands`.
    pub expands: AtomicU64,
}

impl Default for Tuning {
    fn default() -> Self {
        Tuning {
            peak_reset_ms: AtomicI64::new(DEFAULT_PEAK_RESET_MS),
            resizing: AtomicBool::new(true),
            shrinks: AtomicU64::new(0),
            expands: AtomicU64::new(0),
        }
    }
}

/// One cron visit to client `c` (see `cron::clients_cron`): resizes its reply buffer and counts
/// the change for INFO.
pub fn visit(srv: &Server, c: &ClientInfo, now_ms: i64) {
    let tuning = &srv.reply_buffers;
    let pending = c.obl.load(Ordering::Relaxed);
    match c.reply_buf.cron(pending, now_ms, tuning) {
        Some(Resize::Shrink(_)) => tuning.shrinks.fetch_add(1, Ordering::Relaxed),
        Some(Resize::Grow(_)) => tuning.expands.fetch_add(1, Ordering::Relaxed),
        None => 0,
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resizes_as_valkeys_cron() {
        assert_eq!(next_size(CHUNK_SIZE, CHUNK_SIZE), None, "a new client stays until its peak resets");
        assert_eq!(next_size(CHUNK_SIZE, 0), Some(Resize::Shrink(MIN_SIZE)));
        assert_eq!(next_size(CHUNK_SIZE, 5000), Some(Resize::Shrink(5001)));
        assert_eq!(next_size(CHUNK_SIZE, 8192), None, "half used keeps its size");
        assert_eq!(next_size(MIN_SIZE, 0), None, "never below 1 KiB");
        assert_eq!(next_size(2047, 0), None, "half of it is under 1 KiB");
        assert_eq!(next_size(MIN_SIZE, MIN_SIZE), Some(Resize::Grow(2048)));
        assert_eq!(next_size(12_000, 12_000), Some(Resize::Grow(CHUNK_SIZE)), "capped at 16 KiB");
        assert_eq!(next_size(CHUNK_SIZE, CHUNK_SIZE), None);
    }

    #[test]
    fn an_idle_client_shrinks_and_a_busy_one_grows_back() {
        let tuning = Tuning::default();
        tuning.peak_reset_ms.store(100, Ordering::Relaxed);
        let b = ReplyBuffer::new(0);
        assert_eq!(b.cron(0, 50, &tuning), None);
        assert_eq!(b.cron(0, 100, &tuning), None, "this visit only resets the peak");
        assert_eq!(b.peak(), 0);
        assert_eq!(b.cron(0, 200, &tuning), Some(Resize::Shrink(MIN_SIZE)));
        assert_eq!(b.size(), MIN_SIZE);
        tuning.peak_reset_ms.store(-1, Ordering::Relaxed);
        let mut grown = Vec::new();
        for t in 0..6 {
            b.note(32 * 1024);
            assert_eq!(b.peak(), b.size(), "only what fits counts");
            grown.push(b.cron(0, 300 + t * 100, &tuning));
        }
        let sizes = [2048, 4096, 8192, CHUNK_SIZE].map(|n| Some(Resize::Grow(n)));
        assert_eq!(grown, [&sizes[..], &[None, None]].concat());
    }

    #[test]
    fn resizing_off_and_never_resetting() {
        let tuning = Tuning::default();
        tuning.resizing.store(false, Ordering::Relaxed);
        let b = ReplyBuffer::new(0);
        b.note(10);
        assert_eq!(b.cron(0, 60_000, &tuning), None);
        assert_eq!((b.size(), b.peak()), (CHUNK_SIZE, CHUNK_SIZE));
        tuning.resizing.store(true, Ordering::Relaxed);
        tuning.peak_reset_ms.store(-1, Ordering::Relaxed);
        assert_eq!(b.cron(0, 120_000, &tuning), None, "the initial peak never resets");
        tuning.peak_reset_ms.store(DEFAULT_PEAK_RESET_MS, Ordering::Relaxed);
        assert_eq!(b.cron(5000, 120_000, &tuning), None);
        assert_eq!(b.peak(), 5000, "reset to what is pending");
        assert_eq!(b.cron(0, 120_100, &tuning), Some(Resize::Shrink(5001)));
    }
}
