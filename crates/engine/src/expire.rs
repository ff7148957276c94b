//! The active expire cycle: finds keys whose TTL passed and that nobody reads, so they do not
//! linger. It walks slots that have keys with a TTL, a bounded number of buckets at a time,
//! under a time budget, resuming where it stopped; each slot is locked only briefly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::ctx::{Events, KeyState};
use crate::keyspace::Keyspace;
use crate::slot::SLOTS;

/// Buckets examined per slot visit.
const BUCKETS_PER_VISIT: usize = 256;

/// Bumped whenever a slot gets its first key with a TTL. A cycle that made a full pass without
/// finding any such slot sleeps until this moves: a keyspace without TTLs costs the cron
/// nothing instead of a walk over 16384 slot counters ten times a second (which showed in
/// profiles of plain SET/GET loads). Process-wide; several keyspaces only cause extra passes.
static VOLATILE_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Called by `Slot::sync` after a slot's TTL count went from zero to more.
pub(crate) fn volatile_slot_appeared() {
    VOLATILE_EPOCH.fetch_add(1, Ordering::Release);
}

/// Where the cycle resumes: (database, slot), and what the current pass has seen.
#[derive(Debug, Default, Clone, Copy)]
pub struct ExpireCursor {
    db: usize,
    slot: usize,
    /// `VOLATILE_EPOCH` when the current pass started.
    pass_epoch: u64,
    /// Whether the current pass met a slot with TTLs.
    pass_saw_volatile: bool,
    /// Set when a whole pass found none: the epoch it started at.
    idle_since: Option<u64>,
    /// A pass is under way: arriving back at the first slot ends it. (Not "this call has
    /// stepped": with one database a pass is exactly one call, and every call would start a
    /// new pass without ever ending one, walking 16384 slots ten times a second for nothing.)
    in_pass: bool,
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
    lazy: bool,
    events: &dyn Events,
) -> CycleStats {
    let mut st = CycleStats::default();
    // A replica never expires keys itself: its primary sends the DELs.
    if replica {
        return st;
    }
    if let Some(epoch) = cursor.idle_since {
        if VOLATILE_EPOCH.load(Ordering::Acquire) == epoch {
            return st;
        }
        cursor.idle_since = None;
    }
    let total = ks.databases() * SLOTS;
    for step in 0..total {
        if step % 64 == 63 && Instant::now() >= deadline {
            st.time_cap_reached = true;
            return st;
        }
        if cursor.db == 0 && cursor.slot == 0 {
            // A pass ends here. Reading the epoch before the next pass looks at any slot
            // means a TTL set during that pass is seen by it or moves the epoch past it.
            if cursor.in_pass && !cursor.pass_saw_volatile {
                cursor.idle_since = Some(cursor.pass_epoch);
                cursor.in_pass = false;
                return st;
            }
            cursor.pass_epoch = VOLATILE_EPOCH.load(Ordering::Acquire);
            cursor.pass_saw_volatile = false;
            cursor.in_pass = true;
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
        cursor.pass_saw_volatile = true;
        let mut table = ks.lock_slot(db, s as u16);
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
        // Recorded before the slot is unlocked: a replica must see the expiry before any later
        // write of the same key.
        crate::propagate::record_del(ks, db, &expired_keys, lazy);
        drop(table);
        for key in &expired_keys {
            events.notify('x', "expired", key, db);
            events.key_replaced(db, key, KeyState::Stale, KeyState::Missing);
        }
        st.expired += expired_keys.len() as u64;
    }
    st
}

/// A writable replica's own keys with a TTL (Valkey's `expireReplicaKeys`): the primary
/// sends no DEL for keys it never had, so the replica expires these itself. Deletes each of
/// `keys` (database, name) that exists with a TTL past at `now_ms`; returns the ones to keep
/// watching (they still exist with a TTL in the future).
pub fn expire_replica_keys(
    ks: &Keyspace,
    keys: Vec<(usize, Vec<u8>)>,
    now_ms: i64,
    lazy: bool,
    events: &dyn Events,
) -> (u64, Vec<(usize, Vec<u8>)>) {
    let mut expired = 0;
    let mut keep = Vec::with_capacity(keys.len());
    for (db, key) in keys {
        if db >= ks.databases() {
            continue;
        }
        let s = crate::slot::key_slot(&key);
        let mut table = ks.lock_slot(db, s);
        let Some(i) = table.find(&key, crate::hash::key_hash(&key)) else { continue };
        match table.at(i).expire() {
            Some(when) if now_ms > when => {
                table.remove_at(i);
                ks.db(db).slot(s).sync(&table);
                crate::propagate::record_del(ks, db, &[&key], lazy);
                drop(table);
                events.notify('x', "expired", &key, db);
                events.key_replaced(db, &key, KeyState::Stale, KeyState::Missing);
                expired += 1;
            }
            Some(_) => keep.push((db, key)),
            None => {}
        }
    }
    (expired, keep)
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
        let st = active_expire_cycle(&t.ks, &mut cursor, t.now_ms, deadline, false, false, &NoEvents);
        assert_eq!(st.expired, 1000);
        assert_eq!(t.ks.total_keys(), 1000);
        assert_eq!(t.ks.db(0).volatile(), 1000);
        let st = active_expire_cycle(&t.ks, &mut cursor, t.now_ms, deadline, true, false, &NoEvents);
        assert_eq!(st.expired, 0);
    }

    #[test]
    fn sleeps_without_ttls_and_wakes_for_the_first_one() {
        let mut t = TestKit::default();
        t.run(&["SET", "plain", "v"]);
        let mut cursor = ExpireCursor::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Other tests in this process set TTLs, which moves the global epoch and may wake the
        // cycle: it must fall asleep again within a few passes.
        for _ in 0..50 {
            active_expire_cycle(&t.ks, &mut cursor, t.now_ms, deadline, false, false, &NoEvents);
            if cursor.idle_since.is_some() {
                break;
            }
        }
        assert!(cursor.idle_since.is_some(), "a pass without TTLs puts the cycle to sleep");
        t.run(&["SET", "k", "v", "PX", "10"]);
        t.now_ms += 50;
        let mut expired = 0;
        for _ in 0..3 {
            expired += active_expire_cycle(&t.ks, &mut cursor, t.now_ms, deadline, false, false, &NoEvents).expired;
        }
        assert_eq!(expired, 1);
        assert_eq!(t.ks.total_keys(), 1);
    }

    #[test]
    fn one_database_without_ttls_sleeps_too() {
        // Cluster mode has one database: a pass is exactly one call's worth of slots, and the
        // cycle must still notice that a whole pass found no TTL.
        let mut t = TestKit { ks: crate::keyspace::Keyspace::new(1), ..TestKit::default() };
        t.run(&["SET", "plain", "v"]);
        let mut cursor = ExpireCursor::default();
        let deadline = Instant::now() + Duration::from_secs(10);
        // Other tests in this process set TTLs, which moves the global epoch and may wake the
        // cycle: it must fall asleep again within a few passes.
        for _ in 0..50 {
            active_expire_cycle(&t.ks, &mut cursor, t.now_ms, deadline, false, false, &NoEvents);
            if cursor.idle_since.is_some() {
                break;
            }
        }
        assert!(cursor.idle_since.is_some(), "a pass without TTLs puts the cycle to sleep");
    }
}
