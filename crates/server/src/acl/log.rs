//! The ACL log (ACL LOG): refused commands, keys, channels and failed logins, newest first,
//! with similar events within a minute folded into one entry (Valkey's `addACLLogEntry`).

use std::collections::VecDeque;

use super::{Context, Reason};

/// Events of the same kind this close together (ms) count into one entry.
const GROUPING_MAX_MS: i64 = 60_000;
/// How many recent entries a new event is compared with.
const MATCH_SCAN: usize = 10;

/// One entry.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// Times this happened.
    pub count: u64,
    /// What was refused.
    pub reason: Reason,
    /// Where.
    pub context: Context,
    /// The command, key, channel, or `AUTH`.
    pub object: String,
    /// The user (for a failed login: the name tried).
    pub username: String,
    /// Unix ms of the last occurrence.
    pub updated_ms: i64,
    /// CLIENT INFO of the last client.
    pub client_info: String,
    /// Entries ever created before this one.
    pub entry_id: u64,
    /// Unix ms of the first occurrence.
    pub created_ms: i64,
}

/// The entries, newest first.
#[derive(Debug, Default)]
pub struct AclLog {
    entries: VecDeque<Entry>,
    created: u64,
}

impl AclLog {
    /// Adds an event (its `count`, `entry_id` and `created_ms` are set here), keeping at most
    /// `max_len` entries.
    pub fn add(&mut self, mut e: Entry, max_len: usize) {
        if max_len == 0 {
            self.entries.clear();
            return;
        }
        let similar = self.entries.iter().take(MATCH_SCAN).position(|old| {
            old.reason == e.reason
                && old.context == e.context
                && (old.updated_ms - e.updated_ms).abs() <= GROUPING_MAX_MS
                && old.object == e.object
                && old.username == e.username
        });
        if let Some(i) = similar
            && let Some(mut old) = self.entries.remove(i)
        {
            old.count += 1;
            old.client_info = e.client_info;
            old.updated_ms = e.updated_ms;
            self.entries.push_front(old);
            return;
        }
        e.count = 1;
        e.entry_id = self.created;
        e.created_ms = e.updated_ms;
        self.created += 1;
        self.entries.push_front(e);
        self.entries.truncate(max_len);
    }

    /// Forgets every entry (ACL LOG RESET); entry ids keep counting.
    pub fn reset(&mut self) {
        self.entries.clear();
    }

    /// The newest `n` entries.
    pub fn newest(&self, n: usize) -> impl Iterator<Item = &Entry> {
        self.entries.iter().take(n)
    }

    /// Number of entries.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether there is none.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(object: &str, at: i64) -> Entry {
        Entry {
            count: 0,
            reason: Reason::Command,
            context: Context::Toplevel,
            object: object.into(),
            username: "u".into(),
            updated_ms: at,
            client_info: format!("at {at}"),
            entry_id: 0,
            created_ms: 0,
        }
    }

    #[test]
    fn similar_events_fold_and_move_to_the_front() {
        let mut log = AclLog::default();
        log.add(ev("get", 1000), 10);
        log.add(ev("set", 2000), 10);
        log.add(ev("get", 3000), 10);
        let all: Vec<_> = log.newest(10).collect();
        assert_eq!(all.len(), 2);
        assert_eq!((all[0].object.as_str(), all[0].count, all[0].entry_id), ("get", 2, 0));
        assert_eq!((all[0].created_ms, all[0].updated_ms, all[0].client_info.as_str()), (1000, 3000, "at 3000"));
        // Over a minute later it is a new series.
        log.add(ev("get", 3000 + GROUPING_MAX_MS + 1), 10);
        assert_eq!(log.newest(1).next().map(|e| (e.count, e.entry_id)), Some((1, 2)));
    }

    #[test]
    fn length_is_capped_and_zero_keeps_nothing() {
        let mut log = AclLog::default();
        for i in 0..5 {
            log.add(ev(&format!("c{i}"), i), 3);
        }
        assert_eq!(log.newest(10).map(|e| e.object.as_str()).collect::<Vec<_>>(), ["c4", "c3", "c2"]);
        log.add(ev("x", 9), 0);
        assert!(log.is_empty());
    }
}
