//! The AOF lines of INFO persistence, in Valkey 8's order and format.
//!
//! Valkey prints them in two runs: ten lines inside the main block (between
//! `rdb_last_load_keys_loaded` and `module_fork_in_progress`), and six more after
//! `module_fork_last_cow_size` when `appendonly` is on. [`AofInfo::render_head`] and
//! [`AofInfo::render_tail`] write one run each, so the section's owner interleaves them.

use std::fmt::Write;

use super::rewrite::RewriteStats;
use super::writer::WriterStats;

/// Everything the AOF contributes to INFO persistence.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AofInfo {
    /// `aof_enabled`: `appendonly yes` (also while waiting for the first rewrite).
    pub enabled: bool,
    /// `aof_rewrite_in_progress`.
    pub rewrite_in_progress: bool,
    /// `aof_rewrite_scheduled` (and `aof_pending_rewrite`).
    pub rewrite_scheduled: bool,
    /// `aof_last_rewrite_time_sec`, -1 before the first rewrite.
    pub last_rewrite_time_sec: i64,
    /// `aof_current_rewrite_time_sec`, -1 when none runs.
    pub current_rewrite_time_sec: i64,
    /// `aof_last_bgrewrite_status`.
    pub last_bgrewrite_ok: bool,
    /// `aof_rewrites`.
    pub rewrites: u64,
    /// `aof_rewrites_consecutive_failures`.
    pub rewrites_consecutive_failures: u64,
    /// `aof_last_write_status` (writes and background fsyncs).
    pub last_write_ok: bool,
    /// `aof_last_cow_size`: always 0, hotkv does not fork.
    pub last_cow_size: u64,
    /// `aof_current_size`.
    pub current_size: u64,
    /// `aof_base_size`.
    pub base_size: u64,
    /// `aof_buffer_length`.
    pub buffer_length: u64,
    /// `aof_pending_bio_fsync`.
    pub pending_bio_fsync: u64,
    /// `aof_delayed_fsync`.
    pub delayed_fsync: u64,
}

impl AofInfo {
    /// Gathers the fields: `writer` is `None` when the AOF is off; `now` is unix seconds.
    pub fn gather(enabled: bool, writer: Option<&WriterStats>, rw: &RewriteStats, now: u64) -> AofInfo {
        let w = writer.cloned().unwrap_or(WriterStats { write_ok: true, ..WriterStats::default() });
        AofInfo {
            enabled,
            rewrite_in_progress: rw.started_at.is_some(),
            rewrite_scheduled: rw.scheduled,
            last_rewrite_time_sec: rw.last_time_sec,
            current_rewrite_time_sec: rw
                .started_at
                .map_or(-1, |s| i64::try_from(now.saturating_sub(s)).unwrap_or(i64::MAX)),
            last_bgrewrite_ok: rw.last_ok,
            rewrites: rw.rewrites,
            rewrites_consecutive_failures: rw.consecutive_failures,
            last_write_ok: w.write_ok,
            last_cow_size: 0,
            current_size: w.current_size,
            base_size: w.base_size,
            buffer_length: w.buffer_length,
            pending_bio_fsync: w.pending_bio_fsync,
            delayed_fsync: w.delayed_fsync,
        }
    }

    /// The lines from `aof_enabled` to `aof_last_cow_size`, each ending in CRLF.
    pub fn render_head(&self, out: &mut String) {
        let status = |ok: bool| if ok { "ok" } else { "err" };
        let _ = write!(
            out,
            "aof_enabled:{}\r\naof_rewrite_in_progress:{}\r\naof_rewrite_scheduled:{}\r\n\
             aof_last_rewrite_time_sec:{}\r\naof_current_rewrite_time_sec:{}\r\naof_last_bgrewrite_status:{}\r\n\
             aof_rewrites:{}\r\naof_rewrites_consecutive_failures:{}\r\naof_last_write_status:{}\r\n\
             aof_last_cow_size:{}\r\n",
            u8::from(self.enabled),
            u8::from(self.rewrite_in_progress),
            u8::from(self.rewrite_scheduled),
            self.last_rewrite_time_sec,
            self.current_rewrite_time_sec,
            status(self.last_bgrewrite_ok),
            self.rewrites,
            self.rewrites_consecutive_failures,
            status(self.last_write_ok),
            self.last_cow_size,
        );
    }

    /// The lines from `aof_current_size` to `aof_delayed_fsync`, only when the AOF is on.
    pub fn render_tail(&self, out: &mut String) {
        if !self.enabled {
            return;
        }
        let _ = write!(
            out,
            "aof_current_size:{}\r\naof_base_size:{}\r\naof_pending_rewrite:{}\r\naof_buffer_length:{}\r\n\
             aof_pending_bio_fsync:{}\r\naof_delayed_fsync:{}\r\n",
            self.current_size,
            self.base_size,
            u8::from(self.rewrite_scheduled),
            self.buffer_length,
            self.pending_bio_fsync,
            self.delayed_fsync,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_renders_valkeys_defaults_and_no_tail() {
        let info = AofInfo::gather(false, None, &RewriteStats::default(), 1000);
        let mut s = String::new();
        info.render_head(&mut s);
        info.render_tail(&mut s);
        assert_eq!(
            s,
            "aof_enabled:0\r\naof_rewrite_in_progress:0\r\naof_rewrite_scheduled:0\r\naof_last_rewrite_time_sec:-1\r\n\
             aof_current_rewrite_time_sec:-1\r\naof_last_bgrewrite_status:ok\r\naof_rewrites:0\r\n\
             aof_rewrites_consecutive_failures:0\r\naof_last_write_status:ok\r\naof_last_cow_size:0\r\n"
        );
    }

    #[test]
    fn on_with_a_rewrite_running_and_a_write_error() {
        let mut rw = RewriteStats::default();
        rw.started(990);
        rw.finished(false, 993);
        rw.started(995);
        rw.scheduled = true;
        let w = WriterStats {
            write_ok: false,
            current_size: 500,
            base_size: 100,
            buffer_length: 7,
            pending_bio_fsync: 1,
            delayed_fsync: 2,
        };
        let info = AofInfo::gather(true, Some(&w), &rw, 1000);
        let mut s = String::new();
        info.render_head(&mut s);
        info.render_tail(&mut s);
        let lines: Vec<&str> = s.split("\r\n").collect();
        assert_eq!(
            lines,
            [
                "aof_enabled:1",
                "aof_rewrite_in_progress:1",
                "aof_rewrite_scheduled:1",
                "aof_last_rewrite_time_sec:3",
                "aof_current_rewrite_time_sec:5",
                "aof_last_bgrewrite_status:err",
                "aof_rewrites:2",
                "aof_rewrites_consecutive_failures:1",
                "aof_last_write_status:err",
                "aof_last_cow_size:0",
                "aof_current_size:500",
                "aof_base_size:100",
                "aof_pending_rewrite:1",
                "aof_buffer_length:7",
                "aof_pending_bio_fsync:1",
                "aof_delayed_fsync:2",
                "",
            ]
        );
    }
}
