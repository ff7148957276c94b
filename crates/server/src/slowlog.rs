//! SLOWLOG entries and LATENCY monitor samples.

use std::collections::{BTreeMap, VecDeque};

use hotkv_protocol::Args;

/// Most arguments kept per slow log entry (the last slot says how many were left out).
const MAX_ARGC: usize = 32;
/// Longest argument kept per slow log entry.
const MAX_STRING: usize = 128;
/// Samples kept per latency event.
const LATENCY_TS_LEN: usize = 160;

/// One slow command.
#[derive(Debug, Clone)]
pub struct SlowEntry {
    /// Increasing id.
    pub id: u64,
    /// Unix seconds when it ran.
    pub time: i64,
    /// Duration in microseconds.
    pub micros: u64,
    /// Arguments, trimmed like Valkey's.
    pub args: Vec<Vec<u8>>,
    /// `ip:port` of the client.
    pub addr: String,
    /// Client name.
    pub name: String,
}

/// The slow log, newest first.
#[derive(Debug, Default)]
pub struct SlowLog {
    entries: VecDeque<SlowEntry>,
    next_id: u64,
}

impl SlowLog {
    /// Adds an entry and trims to `max_len`.
    pub fn push(&mut self, args: &Args<'_>, time: i64, micros: u64, addr: String, name: String, max_len: usize) {
        // slowlog-max-len 0 disables the log: no entry, so no id is used up (Valkey's ids
        // count logged commands only).
        if max_len == 0 {
            return;
        }
        let mut kept = Vec::with_capacity(args.len().min(MAX_ARGC));
        let argc = args.len();
        let secret = crate::dispatch::secret_args(args);
        for (i, a) in args.iter().enumerate() {
            if i == MAX_ARGC - 1 && argc > MAX_ARGC {
                kept.push(format!("... ({} more arguments)", argc - MAX_ARGC + 1).into_bytes());
                break;
            }
            if secret(i) {
                kept.push(b"(redacted)".to_vec());
            } else if a.len() > MAX_STRING {
                let mut s = a[..MAX_STRING].to_vec();
                s.extend_from_slice(format!("... ({} more bytes)", a.len() - MAX_STRING).as_bytes());
                kept.push(s);
            } else {
                kept.push(a.to_vec());
            }
        }
        self.entries.push_front(SlowEntry { id: self.next_id, time, micros, args: kept, addr, name });
        self.next_id += 1;
        self.entries.truncate(max_len);
    }

    /// Newest entries first.
    pub fn entries(&self) -> impl Iterator<Item = &SlowEntry> {
        self.entries.iter()
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the log is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// SLOWLOG RESET.
    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// Applies a smaller `slowlog-max-len`.
    pub fn trim(&mut self, max_len: usize) {
        self.entries.truncate(max_len);
    }
}

/// One latency event's history.
#[derive(Debug, Clone)]
pub struct LatencySeries {
    /// (unix seconds, milliseconds), oldest first, at most one per second.
    pub samples: VecDeque<(i64, u64)>,
    /// Highest latency ever recorded.
    pub max: u64,
}

/// LATENCY monitor: events such as `command`, `fast-command`, `expire-cycle`.
#[derive(Debug, Default)]
pub struct LatencyMonitor {
    events: BTreeMap<String, LatencySeries>,
}

impl LatencyMonitor {
    /// Records a sample; samples in the same second keep the highest.
    pub fn add(&mut self, event: &str, now_s: i64, ms: u64) {
        let series =
            self.events.entry(event.to_string()).or_insert_with(|| LatencySeries { samples: VecDeque::new(), max: 0 });
        series.max = series.max.max(ms);
        if let Some(last) = series.samples.back_mut()
            && last.0 == now_s
        {
            last.1 = last.1.max(ms);
            return;
        }
        series.samples.push_back((now_s, ms));
        if series.samples.len() > LATENCY_TS_LEN {
            series.samples.pop_front();
        }
    }

    /// All events by name.
    pub fn events(&self) -> impl Iterator<Item = (&String, &LatencySeries)> {
        self.events.iter()
    }

    /// One event.
    pub fn event(&self, name: &str) -> Option<&LatencySeries> {
        self.events.get(name)
    }

    /// Resets the named events (all when `names` is empty); returns how many were reset.
    pub fn reset(&mut self, names: &[String]) -> usize {
        if names.is_empty() {
            let n = self.events.len();
            self.events.clear();
            return n;
        }
        names.iter().filter(|n| self.events.remove(n.as_str()).is_some()).count()
    }
}
