//! The active expire cycle: finds keys whose TTL passed and that nobody reads, so they do not
//! linger. It walks slots that have keys with a TTL, a bounded number of buckets at a time,
//! under a time budget, resuming where it stopped; each slot is locked only briefly.

use std::time::Instant;

use crate::ctx::Events;
use crate::keyspace::Keyspace;
use crate::slot::SLOTS;

/// Buckets examined per slot visit.
const BUCKETS_PER_VISIT: usize = 256;

/// Where the cycle resumes: (database, slot).
#[derive(Debug, Default, Clone, Copy)]
pub struct ExpireCursor {
    db: usize,
    slot: usize,
}

/// What one cycle did.
#[derive(Debug, Default, Clone, Copy)]
pub struct CycleStats {
    /// Keys deleted.
    pub expired: u64,
    /// Keys with a TTL examined.
    pub sampled: u64,
    /// Whether the time budget ran out before a full pass.
    pub time_cap_reached: bool,
}

/// Runs one cycle until `deadline` or one full pass over all slots.
pub fn active_expire_cycle(
    ks: &Keyspace,
    cursor: &mut ExpireCursor,
    now_ms: i64,
    deadline: Instant,
    replica: bool,
    events: &dyn Events,
) -> CycleStats {
    let mut st = CycleStats::default();
    // A replica never expires keys itself: its primary sends the DELs.
    if replica {
        return st;
    }
    let total = ks.databases() * SLOTS;
    for step in 0..total {
        if step % 64 == 63 && Instant::now() >= deadline {
            st.time_cap_reached = true;
            return st;
        }
        let (db, s) = (cursor.db, cursor.slot);
        cursor.slot += 1;
        if cursor.slot == SLOTS {
            cursor.slot = 0;
            cursor.db = (cursor.db + 1) % ks.databases();
        }
        let Some(d) = ks.db_if_used(db) else {
            // Skip the whole unused database.
            cursor.slot = 0;
            cursor.db = (db + 1) % ks.databases();
            continue;
        };
        let slot = d.slot(s as u16);
        if slot.volatile() == 0 {
            continue;
        }
        let mut table = slot.lock();
        let mut expired_keys: Vec<Vec<u8>> = Vec::new();
        table.walk_volatile(BUCKETS_PER_VISIT, |t, i| {
            st.sampled += 1;
            let e = t.at(i);
            if e.expire().is_some_and(|when| now_ms > when) {
                expired_keys.push(e.key().to_vec());
                t.remove_at(i);
                true
            } else {
                false
            }
        });
        slot.sync(&table);
        drop(table);
        for key in &expired_keys {
            events.notify('x', "expired", key, db);
            events.key_touched(db, key);
        }
        st.expired += expired_keys.len() as u64;
    }
    st
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ctx::NoEvents;
    use crate::testkit::TestKit;

    #[test]
    fn removes_expired_keys_nobody_reads() {
        let mut t = TestKit::default();
        for i in 0..2000 {
            t.run(&["SET", &format!("k{i}"), "v", "PX", if i % 2 == 0 { "10" } else { "100000" }]);
        }
        t.run(&["SELECT", "3"]);
        t.now_ms += 50;
        let mut cursor = ExpireCursor::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        let st = active_expire_cycle(&t.ks, &mut cursor, t.now_ms, deadline, false, &NoEvents);
        assert_eq!(st.expired, 1000);
        assert_eq!(t.ks.total_keys(), 1000);
        assert_eq!(t.ks.db(0).volatile(), 1000);
        let st = active_expire_cycle(&t.ks, &mut cursor, t.now_ms, deadline, true, &NoEvents);
        assert_eq!(st.expired, 0);
    }
}
