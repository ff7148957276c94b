//! The active expire cycle: finds keys whose TTL passed and that nobody reads, so they do not
//! linger. It works as Valkey's `activeExpireCycle`: each call samples a few keys with a TTL
//! per database, resuming where the last call stopped, and samples again only while a good
//! share of what it saw had expired, so a keyspace where little is expiring costs almost
//! nothing however many TTLs it holds, and one where much is expiring is swept as fast as the
//! time budget allows. Each slot is locked only while a handful of its keys are looked at.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::ctx::{Events, KeyState};
use crate::keyspace::{Db, Keyspace};
use crate::object::Object;
use crate::slot::SLOTS;

/// Bumped whenever a slot gets its first key with a TTL. When every database's last whole pass
/// found no such slot, the cycle sleeps until this moves: a keyspace without TTLs costs the
/// cron nothing instead of a walk over 16384 slot counters ten times a second (which showed in
/// profiles of plain SET/GET loads). Process-wide; several keyspaces only cause extra passes.
static VOLATILE_EPOCH: AtomicU64 = AtomicU64::new(0);

/// Called by `Slot::sync` after a slot's TTL count went from zero to more.
pub(crate) fn volatile_slot_appeared() {
    VOLATILE_EPOCH.fetch_add(1, Ordering::Release);
}

/// Which of Valkey's two cycles a call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CycleKind {
    /// The cron's cycle, once per `hz` period, with [`slow_cycle_budget`] of time.
    Slow,
    /// A short extra cycle between cron ticks while the slow one cannot keep up (see
    /// [`ExpireCursor::fast_cycle_at`]), with [`fast_cycle_budget`] of time.
    Fast,
}

/// What one call is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct Cycle {
    /// Slow or fast.
    pub kind: CycleKind,
    /// The clock keys' TTLs are compared with.
    pub now_ms: i64,
    /// When the call must return.
    pub deadline: Instant,
    /// `active-expire-effort` (1-10).
    pub effort: u32,
    /// A replica never expires keys itself: its primary sends the DELs.
    pub replica: bool,
    /// `lazyfree-lazy-expire`: deletions reach the write stream as UNLINK rather than DEL.
    pub lazy: bool,
}

/// Where the cycle resumes, per database, and what it learnt from the calls so far.
#[derive(Debug, Default, Clone)]
pub struct ExpireCursor {
    /// The database the next call starts with.
    next_db: usize,
    dbs: Vec<DbCursor>,
    /// Whether the last call ran out of time (Valkey's `timelimit_exit`).
    timelimit_exit: bool,
    /// Running estimate of the share of keys with a TTL that had expired, in percent.
    stale_perc: f64,
    /// When the last fast cycle started.
    last_fast: Option<Instant>,
}

/// What one call did.
#[derive(Debug, Default, Clone, Copy)]
pub struct CycleStats {
    /// Keys deleted.
    pub expired: u64,
    /// Keys with a TTL examined.
    pub sampled: u64,
    /// Hash fields deleted for their TTL (`expired_subkeys`).
    pub expired_fields: u64,
    /// Whether the time budget ran out.
    pub time_cap_reached: bool,
}

/// Runs one cycle: samples each database with keys to expire (up to 16 a call, all of them
/// after a call that ran out of time, as Valkey's `CRON_DBS_PER_CALL`), until the share of
/// expired keys in a sample drops to what the effort accepts, a whole pass over the database
/// is done, or `cycle.deadline` passes. A fast cycle runs only when
/// [`ExpireCursor::fast_cycle_at`] says one is due.
pub fn active_expire_cycle(ks: &Keyspace, cursor: &mut ExpireCursor, cycle: &Cycle, events: &dyn Events) -> CycleStats {
    if cycle.kind == CycleKind::Fast {
        match cursor.fast_cycle_at(cycle.effort) {
            Some(at) if at <= Instant::now() => cursor.last_fast = Some(Instant::now()),
            _ => return CycleStats::default(),
        }
    }
    let st = if cycle.replica {
        // A replica never expires keys itself: its primary sends the DELs. Nor does it ask for
        // fast cycles, even if it was a primary running out of time.
        cursor.timelimit_exit = false;
        CycleStats::default()
    } else {
        let mut st = sample_dbs(ks, cursor, cycle, events);
        st.expired_fields = expire_hash_fields(ks, cycle, events);
        st
    };
    // Every call moves the estimate, also one that found nothing to look at: it must come down
    // for fast cycles to stop once the keys with a TTL are gone.
    let current = if st.sampled == 0 { 0.0 } else { st.expired as f64 * 100.0 / st.sampled as f64 };
    cursor.stale_perc = current * 0.05 + cursor.stale_perc * 0.95;
    st
}

/// Slow-cycle time budget for a cron `period`: 25% of it, plus 2% per effort step above 1
/// (Valkey's `ACTIVE_EXPIRE_CYCLE_SLOW_TIME_PERC`).
pub fn slow_cycle_budget(period: Duration, effort: u32) -> Duration {
    period * Effort::new(effort).slow_time_perc() / 100
}

/// Fast-cycle time budget: 1 ms, plus a quarter of that per effort step above 1 (Valkey's
/// `ACTIVE_EXPIRE_CYCLE_FAST_DURATION`).
pub fn fast_cycle_budget(effort: u32) -> Duration {
    Duration::from_micros(Effort::new(effort).fast_duration_us())
}

impl ExpireCursor {
    /// When a fast cycle may next run, if one is wanted: the last cycle ran out of time, or the
    /// estimated share of expired keys is above what the effort accepts. Fast cycles start at
    /// least twice their budget apart, so they use at most half the time between cron ticks
    /// (Valkey runs them from `beforeSleep` under the same rules).
    pub fn fast_cycle_at(&self, effort: u32) -> Option<Instant> {
        let e = Effort::new(effort);
        if !self.timelimit_exit && self.stale_perc < e.acceptable_stale() as f64 {
            return None;
        }
        Some(self.last_fast.map_or_else(Instant::now, |t| t + fast_cycle_budget(effort) * 2))
    }

    /// `expired_stale_perc`: the running estimate of the share, in percent, of keys with a TTL
    /// that had expired when the cycle looked at them.
    pub fn stale_perc(&self) -> f64 {
        self.stale_perc
    }

    /// Whether every used database's last whole pass found no key with a TTL and no slot got
    /// one since.
    fn asleep(&self, ks: &Keyspace, epoch: u64) -> bool {
        (0..ks.databases()).all(|db| ks.db_if_used(db).is_none() || self.dbs[db].idle_at == Some(epoch))
    }
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

/// Reclaims the expired fields of the hashes filed as due in each database (see
/// `Db::watch_field_ttls`), earliest first, as Redis's `activeExpireCycle` does with its
/// `hexpires`: up to [`FIELD_HASHES_PER_KEY`] hashes per key the key cycle samples in a loop
/// at this effort, per database, and no further once `cycle.deadline` passed. Each expired field reaches the write stream as an
/// HDEL, a hash left empty as its deletion. Returns the number of fields deleted.
pub fn expire_hash_fields(ks: &Keyspace, cycle: &Cycle, events: &dyn Events) -> u64 {
    let mut expired = 0;
    let max = Effort::new(cycle.effort).keys_per_loop() * FIELD_HASHES_PER_KEY;
    for db in 0..ks.databases() {
        let Some(d) = ks.db_if_used(db) else { continue };
        if Instant::now() >= cycle.deadline {
            break;
        }
        for key in d.due_field_ttls(cycle.now_ms, max) {
            expired += expire_fields_of(ks, db, d, &key, cycle, events);
        }
    }
    expired
}

/// Deletes the expired fields of the hash at `key`, if it still is one, and files it again
/// under its next time if it keeps field TTLs.
fn expire_fields_of(ks: &Keyspace, db: usize, d: &Db, key: &[u8], cycle: &Cycle, events: &dyn Events) -> u64 {
    let s = crate::slot::key_slot(key);
    let mut table = ks.lock_slot(db, s);
    let Some(i) = table.find(key, crate::hash::key_hash(key)) else { return 0 };
    // A key whose own TTL passed is the key cycle's (or the next reader's) to delete.
    if table.at(i).expire().is_some_and(|when| cycle.now_ms > when) {
        return 0;
    }
    let Some(Object::Hash(h)) = table.at_mut(i).object_mut() else { return 0 };
    let fields = h.remove_expired(cycle.now_ms);
    let emptied = h.is_empty();
    if let Some(next) = h.min_expire() {
        d.watch_field_ttls(key, next);
    }
    if fields.is_empty() {
        return 0;
    }
    if emptied {
        table.remove_at(i);
        d.slot(s).sync(&table);
    }
    // Recorded before the slot is unlocked, so a replica sees them before any later write.
    crate::propagate::record_hdel(ks, db, key, &fields);
    drop(table);
    events.notify('h', "hexpired", key, db);
    if emptied {
        events.notify('g', "del", key, db);
        events.key_replaced(db, key, KeyState::Live, KeyState::Missing);
    } else {
        events.key_touched(db, key);
    }
    fields.len() as u64
}

/// The body of a call on a primary: samples each database in turn until its samples show few
/// expired keys, its pass is done, or time runs out.
fn sample_dbs(ks: &Keyspace, cursor: &mut ExpireCursor, cycle: &Cycle, events: &dyn Events) -> CycleStats {
    let mut st = CycleStats::default();
    let effort = Effort::new(cycle.effort);
    let databases = ks.databases();
    cursor.dbs.resize_with(databases, DbCursor::default);
    let epoch = VOLATILE_EPOCH.load(Ordering::Acquire);
    if cursor.asleep(ks, epoch) {
        return st;
    }
    let dbs_per_call = if cursor.timelimit_exit { databases } else { DBS_PER_CALL.min(databases) };
    cursor.timelimit_exit = false;
    let mut performed = 0;
    let mut iteration = 0u32;
    'dbs: for _ in 0..databases {
        if performed == dbs_per_call {
            break;
        }
        let db = cursor.next_db % databases;
        cursor.next_db = (db + 1) % databases;
        let Some(d) = ks.db_if_used(db) else { continue };
        let dc = &mut cursor.dbs[db];
        if dc.idle_at == Some(epoch) {
            continue;
        }
        performed += 1;
        loop {
            iteration += 1;
            let sample = sample_db(ks, db, d, dc, &effort, cycle, events);
            st.sampled += sample.sampled;
            st.expired += sample.expired;
            let again = !sample.db_done
                && (sample.sampled == 0 || sample.expired * 100 > effort.acceptable_stale() * sample.sampled);
            // The clock is read every 16 samples, as Valkey does: reading it costs more than a
            // sample that finds nothing.
            if iteration.is_multiple_of(16) && Instant::now() >= cycle.deadline {
                cursor.timelimit_exit = true;
                st.time_cap_reached = true;
                break 'dbs;
            }
            if !again {
                break;
            }
        }
    }
    st
}

/// Where the cycle resumes in one database; within a slot, the slot's table keeps its place.
#[derive(Debug, Default, Clone, Copy)]
struct DbCursor {
    slot: usize,
    /// `VOLATILE_EPOCH` when the current pass over the database started.
    pass_epoch: u64,
    /// Whether the current pass met a slot with TTLs.
    pass_saw_volatile: bool,
    /// Set when a whole pass found none: the epoch it started at.
    idle_at: Option<u64>,
}

impl DbCursor {
    /// Moves to the next slot; true when that ends a pass over the database.
    fn advance(&mut self) -> bool {
        self.slot += 1;
        if self.slot < SLOTS {
            return false;
        }
        self.slot = 0;
        self.idle_at = (!self.pass_saw_volatile).then_some(self.pass_epoch);
        // Read before the next pass looks at any slot: a TTL set during that pass is seen by
        // it or moves the epoch past it.
        self.pass_epoch = VOLATILE_EPOCH.load(Ordering::Acquire);
        self.pass_saw_volatile = false;
        true
    }
}

/// One sample of a database.
#[derive(Debug, Default)]
struct Sample {
    sampled: u64,
    expired: u64,
    /// The sample reached the end of the database.
    db_done: bool,
}

/// Looks at up to `keys_per_loop` keys with a TTL in database `db` from where its cursor
/// stands, passing at most 20 buckets per key wanted (sparse tables cost bucket checks, not
/// keys), and deletes those that expired. Slots without TTLs are skipped by their counter.
fn sample_db(
    ks: &Keyspace,
    db: usize,
    d: &Db,
    dc: &mut DbCursor,
    effort: &Effort,
    cycle: &Cycle,
    events: &dyn Events,
) -> Sample {
    let want = effort.keys_per_loop();
    let max_buckets = want * BUCKETS_PER_KEY;
    let mut out = Sample::default();
    let mut buckets = 0;
    let mut keys = 0;
    while keys < want && buckets < max_buckets {
        let s = dc.slot as u16;
        let slot = d.slot(s);
        if slot.volatile() != 0 {
            dc.pass_saw_volatile = true;
            let mut table = ks.lock_slot(db, s);
            let mut expired_keys: Vec<Vec<u8>> = Vec::new();
            let walked = table.walk_volatile(max_buckets - buckets, want - keys, |t, i| {
                let e = t.at(i);
                if e.expire().is_some_and(|when| cycle.now_ms > when) {
                    expired_keys.push(e.key().to_vec());
                    t.remove_at(i);
                    true
                } else {
                    false
                }
            });
            slot.sync(&table);
            // Recorded before the slot is unlocked: a replica must see the expiry before any
            // later write of the same key.
            crate::propagate::record_del(ks, db, &expired_keys, cycle.lazy);
            drop(table);
            for key in &expired_keys {
                events.notify('x', "expired", key, db);
                events.key_replaced(db, key, KeyState::Stale, KeyState::Missing);
            }
            keys += walked.keys;
            buckets += walked.buckets;
            out.sampled += walked.keys as u64;
            out.expired += expired_keys.len() as u64;
            if !walked.done {
                // A limit was reached inside this slot; the next sample resumes in it.
                continue;
            }
        }
        if dc.advance() {
            out.db_done = true;
            break;
        }
    }
    out
}

/// The cycle's parameters at an `active-expire-effort`, as Valkey scales them.
#[derive(Debug, Clone, Copy)]
struct Effort(u32);

impl Effort {
    /// From `active-expire-effort` 1-10 to a step of 0-9.
    fn new(effort: u32) -> Effort {
        Effort(effort.clamp(1, 10) - 1)
    }

    fn keys_per_loop(self) -> usize {
        KEYS_PER_LOOP + KEYS_PER_LOOP / 4 * self.0 as usize
    }

    fn acceptable_stale(self) -> u64 {
        ACCEPTABLE_STALE - u64::from(self.0)
    }

    fn slow_time_perc(self) -> u32 {
        SLOW_TIME_PERC + 2 * self.0
    }

    fn fast_duration_us(self) -> u64 {
        FAST_DURATION_US + FAST_DURATION_US / 4 * u64::from(self.0)
    }
}

/// Keys a sample looks at, at effort 1 (Valkey's `ACTIVE_EXPIRE_CYCLE_KEYS_PER_LOOP`).
const KEYS_PER_LOOP: usize = 20;
/// Buckets a sample may pass per key it wants, so sparse tables stop it too.
const BUCKETS_PER_KEY: usize = 20;
/// Percent of expired keys in a sample above which the database is sampled again, at effort 1
/// (Valkey's `ACTIVE_EXPIRE_CYCLE_ACCEPTABLE_STALE`).
const ACCEPTABLE_STALE: u64 = 10;
/// Percent of the cron period a slow cycle may use, at effort 1.
const SLOW_TIME_PERC: u32 = 25;
/// A fast cycle's budget in microseconds, at effort 1.
const FAST_DURATION_US: u64 = 1000;
/// Databases a call visits unless the previous one ran out of time (`CRON_DBS_PER_CALL`).
const DBS_PER_CALL: usize = 16;

/// Hashes with due field TTLs looked at per database and call, per key a sample takes (20 at
/// the default effort): each is found at once through its filed time, no sampling needed.
const FIELD_HASHES_PER_KEY: usize = 5;

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::ctx::NoEvents;
    use crate::testkit::TestKit;

    fn slow(now_ms: i64) -> Cycle {
        let deadline = Instant::now() + Duration::from_secs(60);
        Cycle { kind: CycleKind::Slow, now_ms, deadline, effort: 1, replica: false, lazy: false }
    }

    fn run(t: &TestKit, cursor: &mut ExpireCursor, cycle: Cycle) -> CycleStats {
        active_expire_cycle(&t.ks, cursor, &cycle, &NoEvents)
    }

    /// `n` keys `k<i>`; those with `expired(i)` true are 50 ms past their TTL, the others
    /// have 100 s to go.
    fn fill(t: &mut TestKit, n: usize, expired: impl Fn(usize) -> bool) {
        for i in 0..n {
            let px = if expired(i) { "10" } else { "100000" };
            t.run(&["SET", &format!("k{i}"), "v", "PX", px]);
        }
        t.now_ms += 60;
    }

    #[test]
    fn removes_expired_keys_nobody_reads() {
        let mut t = TestKit::default();
        fill(&mut t, 2000, |i| i % 2 == 0);
        t.run(&["SELECT", "3"]);
        let mut cursor = ExpireCursor::default();
        // Half of every sample has expired: the cycle keeps sampling until its pass is done.
        let st = run(&t, &mut cursor, slow(t.now_ms));
        assert_eq!((st.expired, st.time_cap_reached), (1000, false));
        assert_eq!(t.ks.total_keys(), 1000);
        assert_eq!(t.ks.db(0).volatile(), 1000);
        assert!(cursor.stale_perc() > 0.0);
        let st = run(&t, &mut cursor, Cycle { replica: true, ..slow(t.now_ms) });
        assert_eq!(st.expired, 0);
    }

    #[test]
    fn a_keyspace_where_few_keys_expired_costs_one_sample_per_cycle() {
        let mut t = TestKit::default();
        fill(&mut t, 10_000, |i| i % 100 == 0);
        let mut cursor = ExpireCursor::default();
        let st = run(&t, &mut cursor, slow(t.now_ms));
        // A sample of 20 with at most 10% expired stops the cycle; one with more repeats it.
        assert!(st.sampled < 100, "{st:?}");
        assert!(!st.time_cap_reached);
        // The cursor moves on, so every key is seen within a pass: 10_000 / 20 calls.
        let mut cycles = 1;
        while t.ks.total_keys() > 9_900 {
            let st = run(&t, &mut cursor, slow(t.now_ms));
            assert!(st.sampled < 100, "{st:?}");
            cycles += 1;
            assert!(cycles <= 600, "the 100 expired keys are found within one pass");
        }
        assert_eq!(cursor.fast_cycle_at(1), None, "nothing calls for a fast cycle");
    }

    #[test]
    fn an_expired_keyspace_is_emptied_within_a_bounded_number_of_cycles() {
        let mut t = TestKit::default();
        fill(&mut t, 20_000, |_| true);
        let mut cursor = ExpireCursor::default();
        // A deadline already passed makes every call stop at its first clock check, after 16
        // samples of 20 keys: the worst case of a cycle that runs out of time.
        let capped = Cycle { deadline: Instant::now(), ..slow(t.now_ms) };
        let mut cycles = 0;
        while t.ks.total_keys() > 0 {
            let st = run(&t, &mut cursor, capped);
            assert!(st.expired <= 16 * 20, "{st:?}");
            if t.ks.total_keys() > 0 {
                assert_eq!((st.expired, st.time_cap_reached), (16 * 20, true));
                assert!(cursor.fast_cycle_at(1).is_some(), "a capped cycle calls for fast cycles");
            }
            cycles += 1;
            assert!(cycles <= 20_000 / 320 + 1);
        }
        assert_eq!(t.ks.db(0).volatile(), 0);
        // With nothing left to expire, the estimate of expired keys decays and fast cycles stop.
        let calm = (0..100).position(|_| {
            run(&t, &mut cursor, slow(t.now_ms));
            cursor.fast_cycle_at(1).is_none()
        });
        assert!(calm.is_some(), "stale estimate {}", cursor.stale_perc());
    }

    #[test]
    fn a_higher_effort_samples_more_and_tolerates_fewer_expired_keys() {
        assert_eq!(Effort::new(1).keys_per_loop(), 20);
        assert_eq!(Effort::new(10).keys_per_loop(), 65);
        assert_eq!((Effort::new(1).acceptable_stale(), Effort::new(10).acceptable_stale()), (10, 1));
        assert_eq!(slow_cycle_budget(Duration::from_millis(100), 1), Duration::from_millis(25));
        assert_eq!(slow_cycle_budget(Duration::from_millis(100), 10), Duration::from_millis(43));
        assert_eq!(fast_cycle_budget(1), Duration::from_millis(1));
        assert_eq!(fast_cycle_budget(10), Duration::from_micros(3250));
        // 5% expired: effort 1 stops after one sample, effort 10 keeps sampling to the end.
        let mut t = TestKit::default();
        fill(&mut t, 2000, |i| i % 20 == 0);
        let mut cursor = ExpireCursor::default();
        let low = run(&t, &mut cursor, slow(t.now_ms));
        assert!(low.sampled < 100, "{low:?}");
        let mut cursor = ExpireCursor::default();
        let high = run(&t, &mut cursor, Cycle { effort: 10, ..slow(t.now_ms) });
        assert_eq!(t.ks.total_keys() as u64, 2000 - 100, "{high:?}");
    }

    #[test]
    fn a_fast_cycle_runs_only_when_the_slow_one_cannot_keep_up() {
        let mut t = TestKit::default();
        fill(&mut t, 1000, |i| i == 7);
        let mut cursor = ExpireCursor::default();
        let fast = Cycle { kind: CycleKind::Fast, ..slow(t.now_ms) };
        assert_eq!(cursor.fast_cycle_at(1), None);
        assert_eq!(run(&t, &mut cursor, fast).sampled, 0);
        assert_eq!(t.ks.total_keys(), 1000);
        // After a capped slow cycle, the first fast cycle is due at once.
        run(&t, &mut cursor, Cycle { deadline: Instant::now(), ..slow(t.now_ms) });
        let mut cursor = ExpireCursor { timelimit_exit: true, ..ExpireCursor::default() };
        assert!(cursor.fast_cycle_at(1).is_some_and(|at| at <= Instant::now()));
        assert!(run(&t, &mut cursor, fast).sampled > 0);
        assert!(cursor.last_fast.is_some());
    }

    #[test]
    fn sleeps_without_ttls_and_wakes_for_the_first_one() {
        let mut t = TestKit::default();
        t.run(&["SET", "plain", "v"]);
        let mut cursor = ExpireCursor::default();
        fall_asleep(&t, &mut cursor);
        t.run(&["SET", "k", "v", "PX", "10"]);
        t.now_ms += 50;
        let mut expired = 0;
        for _ in 0..3 {
            expired += run(&t, &mut cursor, slow(t.now_ms)).expired;
        }
        assert_eq!(expired, 1);
        assert_eq!(t.ks.total_keys(), 1);
    }

    #[test]
    fn one_database_without_ttls_sleeps_too() {
        // Cluster mode has one database.
        let mut t = TestKit { ks: crate::keyspace::Keyspace::new(1), ..TestKit::default() };
        t.run(&["SET", "plain", "v"]);
        let mut cursor = ExpireCursor::default();
        fall_asleep(&t, &mut cursor);
    }

    /// Runs cycles until the cursor sleeps. Other tests in this process set TTLs, which moves
    /// the process-wide epoch and wakes the cycle again for as long as they run (on a loaded
    /// two-core CI machine that outlasted 50 cycles): so this waits for a whole pass with the
    /// epoch still, and only a cycle that never sleeps once the other tests are done fails.
    fn fall_asleep(t: &TestKit, cursor: &mut ExpireCursor) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while Instant::now() < deadline {
            run(t, cursor, slow(t.now_ms));
            if cursor.asleep(&t.ks, VOLATILE_EPOCH.load(Ordering::Acquire)) {
                return;
            }
        }
        panic!("a pass without TTLs puts the cycle to sleep");
    }

    #[test]
    fn reclaims_expired_hash_fields_nobody_reads() {
        let mut t = TestKit::default();
        for i in 0..50 {
            let key = format!("h{i}");
            t.run(&["HSET", &key, "a", "1", "b", "2", "keep", "3"]);
            t.run(&["HPEXPIRE", &key, "10", "FIELDS", "2", "a", "b"]);
            t.run(&["HPEXPIRE", &key, "100000", "FIELDS", "1", "keep"]);
        }
        t.run(&["HSET", "gone", "only", "1"]);
        t.run(&["HPEXPIRE", "gone", "10", "FIELDS", "1", "only"]);
        // A filed hash that went away or lost its TTLs meanwhile is dropped on the way.
        t.run(&["HSET", "persisted", "f", "1"]);
        t.run(&["HPEXPIRE", "persisted", "10", "FIELDS", "1", "f"]);
        t.run(&["HPERSIST", "persisted", "FIELDS", "1", "f"]);
        t.run(&["HSET", "deleted", "f", "1"]);
        t.run(&["HPEXPIRE", "deleted", "10", "FIELDS", "1", "f"]);
        t.run(&["DEL", "deleted"]);
        t.now_ms += 11;
        t.record = true;
        t.sink.set_active(true);
        let mut cursor = ExpireCursor::default();
        let st = run(&t, &mut cursor, slow(t.now_ms));
        assert_eq!(st.expired_fields, 101);
        let lines = t.sink.take();
        assert_eq!(lines.len(), 101);
        assert!(lines.contains(&"0: HDEL gone only".to_string()) && lines.contains(&"0: HDEL h7 b".to_string()));
        assert_eq!(t.ks.total_keys(), 51, "the hash that lost its only field went");
        assert_eq!(t.ks.db(0).field_ttls_filed(), 50, "each hash filed again under its next time");
        t.sink.set_active(false);
        t.record = false;
        assert_eq!(t.run(&["HGETALL", "h3"]), "*2\r\n$4\r\nkeep\r\n$1\r\n3\r\n");
        assert_eq!(run(&t, &mut cursor, slow(t.now_ms)).expired_fields, 0, "nothing due until then");
        t.now_ms += 100_000;
        assert_eq!(run(&t, &mut cursor, Cycle { replica: true, ..slow(t.now_ms) }).expired_fields, 0);
        assert_eq!(run(&t, &mut cursor, slow(t.now_ms)).expired_fields, 50);
        assert_eq!((t.ks.total_keys(), t.ks.db(0).field_ttls_filed()), (1, 0));
    }

    #[test]
    fn renamed_moved_and_swapped_hashes_keep_expiring_their_fields() {
        let mut t = TestKit::default();
        for key in ["a", "b", "c"] {
            t.run(&["HSET", key, "f", "1", "g", "2"]);
            t.run(&["HPEXPIRE", key, "10", "FIELDS", "1", "f"]);
        }
        t.run(&["RENAME", "a", "a2"]);
        t.run(&["MOVE", "b", "1"]);
        t.run(&["SWAPDB", "0", "2"]);
        t.now_ms += 11;
        let st = run(&t, &mut ExpireCursor::default(), slow(t.now_ms));
        assert_eq!(st.expired_fields, 3);
        for (db, key) in [("2", "a2"), ("1", "b"), ("2", "c")] {
            t.run(&["SELECT", db]);
            assert_eq!(t.run(&["HTTL", key, "FIELDS", "1", "g"]), "*1\r\n:-1\r\n", "{key}");
        }
        t.run(&["SELECT", "2"]);
        t.run(&["HPEXPIRE", "a2", "10", "FIELDS", "1", "g"]);
        assert_eq!(t.ks.db(2).field_ttls_filed(), 1);
        t.run(&["FLUSHALL"]);
        assert_eq!(t.ks.db(2).field_ttls_filed(), 0, "a flush forgets the filed hashes");
    }
}
