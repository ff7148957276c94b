//! Databases of slot tables, and the locks that give a command its slots.
//!
//! Every database is 16384 independently locked tables, one per cluster hash slot. A
//! command locks the slots of its keys, in ascending `(db, slot)` order so that commands
//! with several keys never deadlock, runs, and unlocks: commands on different slots never
//! wait for each other, on any number of cores, and there is no global lock on the command
//! path. A transaction (MULTI/EXEC) locks the union of its commands' slots the same way.
//!
//! Whole-keyspace commands (KEYS, SCAN, DBSIZE, FLUSHDB, RANDOMKEY) visit slots one at a time.

use std::collections::BTreeSet;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};

use parking_lot::{Mutex, MutexGuard};
use smallvec::SmallVec;

use crate::propagate::{NoSink, WriteSink};
use crate::slot::SLOTS;
use crate::table::Table;

/// One slot's table plus counters readable without its lock (DBSIZE, INFO keyspace,
/// CLUSTER COUNTKEYSINSLOT). Aligned to a cache line so neighbouring slots locked by different
/// cores do not share one.
#[repr(align(64))]
#[derive(Default)]
pub struct Slot {
    table: Mutex<Table>,
    keys: AtomicU32,
    volatile: AtomicU32,
    /// Address of the table's groups with log2 of their count in the low 6 bits (groups are
    /// 64-byte aligned and a power of two in number), 0 for none. Published for prefetching
    /// only, never dereferenced: a pipelined batch warms the lines its commands will touch.
    groups: AtomicUsize,
}

impl Slot {
    /// Locks the table.
    pub fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock()
    }

    /// Locks the table if it is free right now.
    pub fn try_lock(&self) -> Option<MutexGuard<'_, Table>> {
        self.table.try_lock()
    }

    /// Keys in the slot (may lag a concurrent writer by one command).
    pub fn keys(&self) -> usize {
        self.keys.load(Ordering::Relaxed) as usize
    }

    /// Keys with a TTL in the slot.
    pub fn volatile(&self) -> usize {
        self.volatile.load(Ordering::Relaxed) as usize
    }

    /// Publishes the counters after a change made under the lock.
    pub fn sync(&self, table: &Table) {
        self.keys.store(table.len() as u32, Ordering::Relaxed);
        let volatile = table.volatile_len() as u32;
        // Only the lock holder writes the counter, so a load and a store do (no atomic RMW).
        let before = self.volatile.load(Ordering::Relaxed);
        if before != volatile {
            self.volatile.store(volatile, Ordering::Relaxed);
            if before == 0 {
                crate::expire::volatile_slot_appeared();
            }
        }
        let (addr, len) = table.groups_addr();
        debug_assert!(addr % 64 == 0 && (len == 0 || len.is_power_of_two()));
        let packed = if len == 0 { 0 } else { addr | len.trailing_zeros() as usize };
        self.groups.store(packed, Ordering::Relaxed);
    }

    /// Hints the CPU to load the cache line of `hash`'s home group in this slot's table.
    pub fn prefetch_home(&self, hash: u32) {
        let packed = self.groups.load(Ordering::Relaxed);
        if packed == 0 {
            return;
        }
        let (addr, len) = (packed & !63, 1usize << (packed & 63));
        crate::prefetch::read(addr + (hash as usize & (len - 1)) * 64);
    }
}

impl Slot {
    /// Hints the CPU to load the entry `hash` most likely names, when the table is free right
    /// now: a pipelined batch then waits for all its entries at once instead of one by one.
    /// Never waits for the lock; a busy slot just gets no hint.
    pub fn prefetch_entry(&self, hash: u32) {
        if let Some(t) = self.try_lock() {
            t.prefetch_entry(hash);
        }
    }
}

// One cache line per slot, so slots locked by different cores never share one, and 16384
// slots per database cost 1 MiB.
const _: () = assert!(std::mem::size_of::<Slot>() == 64);

/// A slot's table, either borrowed from a lock set or locked for this reference alone.
pub enum SlotRef<'a, 's> {
    /// Held by the command's lock set.
    Held(&'s mut Table, &'a Slot),
    /// Locked for as long as this value lives.
    Own(MutexGuard<'a, Table>, &'a Slot),
}

impl SlotRef<'_, '_> {
    /// The slot (for its counters).
    pub fn slot(&self) -> &Slot {
        match self {
            SlotRef::Held(_, s) | SlotRef::Own(_, s) => s,
        }
    }

    /// Publishes the slot's counters after a change.
    pub fn sync(&mut self) {
        match self {
            SlotRef::Held(t, s) => s.sync(t),
            SlotRef::Own(t, s) => s.sync(t),
        }
    }
}

impl std::ops::Deref for SlotRef<'_, '_> {
    type Target = Table;
    fn deref(&self) -> &Table {
        match self {
            SlotRef::Held(t, _) => t,
            SlotRef::Own(t, _) => t,
        }
    }
}

impl std::ops::DerefMut for SlotRef<'_, '_> {
    fn deref_mut(&mut self) -> &mut Table {
        match self {
            SlotRef::Held(t, _) => t,
            SlotRef::Own(t, _) => t,
        }
    }
}

/// One database: its slots.
pub struct Db {
    slots: Box<[Slot]>,
    /// Hashes with field TTLs, by a time no later than their earliest one (Redis's per-db
    /// `hexpires`): what the active expire cycle reclaims fields from. An entry may be stale
    /// (the key went, was renamed, or its earliest time moved); the cycle checks the key when
    /// the time comes and files it again under its current time if it still has field TTLs.
    /// Taken only after a slot lock, or with none held.
    field_ttls: Mutex<BTreeSet<(i64, Box<[u8]>)>>,
}

impl Db {
    fn new() -> Db {
        Db { slots: (0..SLOTS).map(|_| Slot::default()).collect(), field_ttls: Mutex::default() }
    }

    /// Files the hash at `key` for active field expiry at `when` (its earliest field TTL).
    pub fn watch_field_ttls(&self, key: &[u8], when: i64) {
        self.field_ttls.lock().insert((when, key.into()));
    }

    /// Takes up to `max` filed hashes whose time is before `now`, earliest first.
    pub fn due_field_ttls(&self, now: i64, max: usize) -> Vec<Box<[u8]>> {
        let mut set = self.field_ttls.lock();
        let mut due = Vec::new();
        while due.len() < max {
            match set.first() {
                Some((when, _)) if *when < now => due.extend(set.pop_first().map(|(_, k)| k)),
                _ => break,
            }
        }
        due
    }

    /// Number of filed hashes (stale entries included).
    pub fn field_ttls_filed(&self) -> usize {
        self.field_ttls.lock().len()
    }

    /// Forgets every filed hash (FLUSHDB, FLUSHALL).
    pub fn clear_field_ttls(&self) {
        self.field_ttls.lock().clear();
    }

    /// Exchanges the filed hashes with `other`'s (SWAPDB, under both databases' slot locks).
    pub fn swap_field_ttls(&self, other: &Db) {
        if std::ptr::eq(self, other) {
            return;
        }
        let mut a = self.field_ttls.lock();
        let mut b = other.field_ttls.lock();
        std::mem::swap(&mut *a, &mut *b);
    }

    /// Slot `s`.
    pub fn slot(&self, s: u16) -> &Slot {
        &self.slots[s as usize]
    }

    /// All slots in order.
    pub fn slots(&self) -> &[Slot] {
        &self.slots
    }

    /// Number of keys.
    pub fn len(&self) -> usize {
        self.slots.iter().map(Slot::keys).sum()
    }

    /// Whether the database holds no key.
    pub fn is_empty(&self) -> bool {
        self.slots.iter().all(|s| s.keys() == 0)
    }

    /// Number of keys with a TTL.
    pub fn volatile(&self) -> usize {
        self.slots.iter().map(Slot::volatile).sum()
    }
}

/// Bytes the keyspace holds per configured database before any is used: the server checks a
/// `databases` count against the machine's memory with it.
pub const DB_HANDLE_BYTES: usize = std::mem::size_of::<OnceLock<Db>>();

/// All databases. Database 0 exists from the start; the others are created on first use, so
/// an idle server does not pay for 16 x 16384 tables.
pub struct Keyspace {
    dbs: Box<[OnceLock<Db>]>,
    in_flight: InFlight,
    /// Where writes are recorded (replication, AOF); none until the server wires one.
    sink: OnceLock<std::sync::Arc<dyn WriteSink>>,
    /// The snapshot in progress, which every slot lock path settles first.
    pub(crate) snap: crate::snapshot::SnapState,
}

/// Keys a MIGRATE has sent and not yet settled, per database, with how many MIGRATEs hold
/// each. While a key is here, cluster routing counts it as present on this node even if a
/// client deleted it meanwhile, so nobody is sent to the target (ASK) for a key whose fate
/// the MIGRATE still decides there. Changed and read only under the key's slot lock, so a
/// routing check and a MIGRATE never see each other half done; the count spares every other
/// check the mutex.
#[derive(Default)]
struct InFlight {
    count: std::sync::atomic::AtomicUsize,
    keys: Mutex<std::collections::HashMap<InFlightKey, u32>>,
}

/// A key in flight: its database and name.
type InFlightKey = (usize, Box<[u8]>);

/// Identifies a locked slot: `db * 16384 + slot`, which is also the locking order.
pub type LockId = u32;

/// Most databases a keyspace can hold: every slot of every database has a [`LockId`].
pub const MAX_DATABASES: usize = (LockId::MAX as usize >> 14) + 1;

/// The lock id of a slot of a database.
pub fn lock_id(db: usize, slot: u16) -> LockId {
    (db * SLOTS) as u32 + u32::from(slot)
}

impl Keyspace {
    /// A keyspace with `databases` databases.
    pub fn new(databases: usize) -> Keyspace {
        let dbs: Box<[OnceLock<Db>]> = (0..databases.max(1)).map(|_| OnceLock::new()).collect();
        let ks = Keyspace { dbs, in_flight: InFlight::default(), sink: OnceLock::new(), snap: Default::default() };
        ks.db(0);
        ks
    }

    /// Deletes every key of slot `s` of database `db`, as one unit under the slot's lock, each
    /// propagated as a DEL (Valkey's `delKeysInSlot`, for a slot another node took while this
    /// one still held keys in it). WATCHes of the keys see the change; no keyspace
    /// notification goes out, as in Valkey (the keys moved rather than went away). Returns how
    /// many keys it deleted.
    pub fn delete_slot_keys(&self, db: usize, s: u16, lazy: bool, events: &dyn crate::ctx::Events) -> usize {
        if db >= self.databases() || self.db_if_used(db).is_none() {
            return 0;
        }
        let mut table = self.lock_slot(db, s);
        if table.is_empty() {
            return 0;
        }
        let old = table.take_all();
        self.db(db).slot(s).sync(&table);
        let keys: Vec<&[u8]> = old.iter().map(|(_, e)| e.key()).collect();
        crate::propagate::record_del(self, db, &keys, lazy);
        drop(table);
        for k in &keys {
            events.key_replaced(db, k, crate::ctx::KeyState::Live, crate::ctx::KeyState::Missing);
        }
        keys.len()
    }

    /// Marks `key` of `db` as sent by a MIGRATE that has not settled it (call under its
    /// slot lock; see [`InFlight`]).
    pub fn in_flight_add(&self, db: usize, key: &[u8]) {
        let mut keys = self.in_flight.keys.lock();
        *keys.entry((db, key.into())).or_insert(0) += 1;
        self.in_flight.count.store(keys.len(), Ordering::Relaxed);
    }

    /// The MIGRATE that sent `key` of `db` settled it (call under its slot lock).
    pub fn in_flight_remove(&self, db: usize, key: &[u8]) {
        let mut keys = self.in_flight.keys.lock();
        let k = (db, Box::<[u8]>::from(key));
        if let Some(n) = keys.get_mut(&k) {
            *n -= 1;
            if *n == 0 {
                keys.remove(&k);
            }
        }
        self.in_flight.count.store(keys.len(), Ordering::Relaxed);
    }

    /// Whether a MIGRATE has sent `key` of `db` and not settled it yet.
    pub fn in_flight(&self, db: usize, key: &[u8]) -> bool {
        self.in_flight.count.load(Ordering::Relaxed) != 0
            && self.in_flight.keys.lock().contains_key(&(db, Box::<[u8]>::from(key)))
    }

    /// Wires the write stream's consumer, once, before the keyspace serves commands.
    /// Returns false if one was already wired.
    pub fn set_sink(&self, sink: std::sync::Arc<dyn WriteSink>) -> bool {
        self.sink.set(sink).is_ok()
    }

    /// The write stream's consumer ([`NoSink`] until one is wired).
    pub fn sink(&self) -> &dyn WriteSink {
        match self.sink.get() {
            Some(s) => &**s,
            None => &NoSink,
        }
    }

    /// Number of databases.
    pub fn databases(&self) -> usize {
        self.dbs.len()
    }

    /// Database `i` (created on first use). Panics when `i` is out of range: callers validate
    /// indexes from clients against [`Keyspace::databases`].
    pub fn db(&self, i: usize) -> &Db {
        self.dbs[i].get_or_init(Db::new)
    }

    /// Database `i` if it was ever used.
    pub fn db_if_used(&self, i: usize) -> Option<&Db> {
        self.dbs[i].get()
    }

    /// Locks the given slots, which must be sorted and without duplicates.
    pub fn lock(&self, ids: &[LockId]) -> LockSet<'_> {
        debug_assert!(ids.windows(2).all(|w| w[0] < w[1]), "lock ids must be sorted and unique");
        let mut set = LockSet { guards: SmallVec::new(), memo: KeyMemo::default() };
        for &id in ids {
            let slot = self.slot_by_id(id);
            let table = slot.lock();
            self.settle_snapshot(id, &table);
            set.guards.push((id, slot, table));
        }
        set
    }

    /// Locks every slot of the given databases (SWAPDB, FLUSHALL in a transaction).
    pub fn lock_all(&self, dbs: &[usize]) -> LockSet<'_> {
        let mut dbs = dbs.to_vec();
        dbs.sort_unstable();
        dbs.dedup();
        let mut set = LockSet { guards: SmallVec::new(), memo: KeyMemo::default() };
        for db in dbs {
            for s in 0..SLOTS as u16 {
                let id = lock_id(db, s);
                let slot = self.slot_by_id(id);
                let table = slot.lock();
                self.settle_snapshot(id, &table);
                set.guards.push((id, slot, table));
            }
        }
        set
    }

    /// The slot a lock id names.
    pub fn slot_by_id(&self, id: LockId) -> &Slot {
        let db = id as usize / SLOTS;
        self.db(db).slot((id as usize % SLOTS) as u16)
    }

    /// Total keys over all databases.
    pub fn total_keys(&self) -> usize {
        self.dbs.iter().filter_map(OnceLock::get).map(Db::len).sum()
    }

    /// Exchanges the contents of every database with `other`'s, holding every slot lock of
    /// both at once, so no client sees half of each: a replica's full sync loaded into `other`
    /// (`repl-diskless-load swapdb`) while its clients went on with the old data. Afterwards
    /// `other` holds the old data, for the caller to drop. As Valkey's swap of its temporary
    /// databases: WATCHes of keys that either side holds see the change, and `events` hears a
    /// flush (client-side caching invalidates everything) and a change of each database.
    /// Returns the keys now held.
    pub fn swap_in(&self, other: &Keyspace, now_ms: i64, events: &dyn crate::ctx::Events) -> usize {
        use crate::ctx::KeyState;
        let n = self.databases().min(other.databases());
        let in_use = || -> Vec<usize> {
            (0..n).filter(|&i| self.db_if_used(i).is_some() || other.db_if_used(i).is_some()).collect()
        };
        // Asked before any slot is locked, as FLUSHALL asks.
        let watched_in: Vec<Vec<Vec<u8>>> = (0..n).map(|i| events.watched_keys(i)).collect();
        // A database that comes into use while the others are being locked would keep its keys
        // through the swap: it is caught once all are locked, and the locking starts over.
        let (used, mut mine, mut theirs) = loop {
            let used = in_use();
            let mine = self.lock_all(&used);
            let theirs = other.lock_all(&used);
            if in_use() == used {
                break (used, mine, theirs);
            }
        };
        let watched: Vec<&Vec<Vec<u8>>> = used.iter().map(|&i| &watched_in[i]).collect();
        let state = |t: &Table, key: &[u8]| match t.find(key, crate::hash::key_hash(key)) {
            None => KeyState::Missing,
            Some(i) if t.at(i).expire().is_some_and(|when| now_ms > when) => KeyState::Stale,
            Some(_) => KeyState::Live,
        };
        let mut changed = Vec::new();
        {
            // Both sets hold the same ids in the same order: database by database, slot by slot.
            let mut a: Vec<_> = mine.tables_mut().collect();
            let mut b: Vec<_> = theirs.tables_mut().collect();
            for ((_, x, xs), (_, y, ys)) in a.iter_mut().zip(b.iter_mut()) {
                std::mem::swap(&mut **x, &mut **y);
                xs.sync(x);
                ys.sync(y);
            }
            for (at, keys) in watched.iter().enumerate() {
                for key in keys.iter() {
                    let i = at * SLOTS + crate::slot::key_slot(key) as usize;
                    let (before, after) = (state(b[i].1, key), state(a[i].1, key));
                    if before != KeyState::Missing || after != KeyState::Missing {
                        changed.push((used[at], key.clone(), before, after));
                    }
                }
            }
        }
        for &i in &used {
            self.db(i).swap_field_ttls(other.db(i));
        }
        let held = used.iter().map(|&i| self.db(i).len()).sum();
        drop(theirs);
        drop(mine);
        events.flushed();
        for (db, key, before, after) in &changed {
            events.key_replaced(*db, key, *before, *after);
        }
        for &i in &used {
            events.db_changed(i);
        }
        held
    }
}

/// How [`LockSet::add`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddLock {
    /// The set held it already.
    Held,
    /// Taken now.
    Added,
    /// Held by someone else, and waiting for it could deadlock.
    Busy,
}

/// The slot locks a command holds while it runs, and the slot and table hash of the key it
/// last located (a command usually looks the same key up two or three times: lock planning,
/// lookup, write; CRC16 and the table hash are then computed once).
pub struct LockSet<'a> {
    guards: SmallVec<[(LockId, &'a Slot, MutexGuard<'a, Table>); 1]>,
    memo: KeyMemo,
}

/// A copy of the last located key (up to 32 bytes) with its lock id and table hash.
struct KeyMemo {
    len: u8,
    key: [u8; MEMO_MAX],
    id: LockId,
    hash: u32,
}

const MEMO_MAX: usize = 32;

impl Default for KeyMemo {
    fn default() -> Self {
        KeyMemo { len: u8::MAX, key: [0; MEMO_MAX], id: 0, hash: 0 }
    }
}

impl<'a> LockSet<'a> {
    /// A set holding no lock (for commands without keys).
    pub fn empty() -> LockSet<'a> {
        LockSet { guards: SmallVec::new(), memo: KeyMemo::default() }
    }

    /// Tells the set the slot and hash of `key` in `db`, computed by the caller, so that the
    /// handler's first [`LockSet::locate`] of it computes nothing.
    pub fn seed(&mut self, db: usize, key: &[u8], slot: u16, hash: u32) {
        if key.len() <= MEMO_MAX {
            self.memo.len = key.len() as u8;
            self.memo.key[..key.len()].copy_from_slice(key);
            self.memo.id = lock_id(db, slot);
            self.memo.hash = hash;
        }
    }

    /// The lock id of `key` in database `db` and its table hash, remembered for the next call
    /// with the same key.
    pub fn locate(&mut self, db: usize, key: &[u8]) -> (LockId, u32) {
        let m = &self.memo;
        if usize::from(m.len) == key.len() && key.len() <= MEMO_MAX && &m.key[..key.len()] == key {
            let base = lock_id(db, 0);
            if m.id >= base && m.id < base + SLOTS as u32 {
                return (m.id, m.hash);
            }
            return (lock_id(db, (m.id as usize % SLOTS) as u16), m.hash);
        }
        let id = lock_id(db, crate::slot::key_slot(key));
        let hash = crate::hash::key_hash(key);
        if key.len() <= MEMO_MAX {
            self.memo.len = key.len() as u8;
            self.memo.key[..key.len()].copy_from_slice(key);
            self.memo.id = id;
            self.memo.hash = hash;
        }
        (id, hash)
    }

    /// The locked table for `id` and its slot, if this set holds it.
    pub fn get(&mut self, id: LockId) -> Option<(&mut Table, &'a Slot)> {
        let i = if self.guards.len() == 1 {
            if self.guards[0].0 != id {
                return None;
            }
            0
        } else {
            self.guards.binary_search_by_key(&id, |g| g.0).ok()?
        };
        let (_, slot, guard) = &mut self.guards[i];
        Some((&mut **guard, *slot))
    }

    /// Whether the set holds `id`.
    pub fn holds(&self, id: LockId) -> bool {
        self.guards.binary_search_by_key(&id, |g| g.0).is_ok()
    }

    /// Number of locked slots.
    pub fn len(&self) -> usize {
        self.guards.len()
    }

    /// Whether no slot is locked.
    pub fn is_empty(&self) -> bool {
        self.guards.is_empty()
    }

    /// The table of slot `s` of database `db`: the one this set holds, or else locked just for
    /// the returned guard. Whole-keyspace commands (KEYS, SCAN, FLUSHDB...) walk slots with it,
    /// so inside a transaction that already holds every slot they do not lock twice.
    pub fn slot_ref<'s>(&'s mut self, ks: &'a Keyspace, db: usize, s: u16) -> SlotRef<'a, 's> {
        let id = lock_id(db, s);
        if let Some(i) = self.guards.iter().position(|g| g.0 == id) {
            let (_, slot, guard) = &mut self.guards[i];
            return SlotRef::Held(guard, slot);
        }
        let slot = ks.db(db).slot(s);
        let table = slot.lock();
        ks.settle_snapshot(id, &table);
        SlotRef::Own(table, slot)
    }

    /// Whether this set holds every slot of database `db`.
    pub fn holds_db(&self, db: usize) -> bool {
        let first = lock_id(db, 0);
        self.guards.iter().filter(|g| g.0 >= first && g.0 < first + SLOTS as u32).count() == SLOTS
    }

    /// Adds the locks of `ids` this set does not hold yet, without waiting: succeeds only if
    /// every one of them was free. Used to serve a blocked client from inside another command,
    /// where waiting for a lock out of order could deadlock.
    pub fn try_extend(&mut self, ks: &'a Keyspace, ids: &[LockId]) -> bool {
        let mut added = Vec::new();
        for &id in ids {
            if self.holds(id) || added.iter().any(|(i, _, _)| *i == id) {
                continue;
            }
            let slot = ks.slot_by_id(id);
            match slot.table.try_lock() {
                Some(g) => {
                    ks.settle_snapshot(id, &g);
                    added.push((id, slot, g));
                }
                None => return false,
            }
        }
        for (id, slot, table) in added {
            self.insert(id, slot, table);
        }
        true
    }

    /// Adds the lock of `id` to a set that already holds others, for a key the command did
    /// not declare (a script's): waits for it only when that keeps the locking order (every
    /// lock held is below `id`, so whoever holds `id` never waits for one of ours); otherwise
    /// takes it only if it is free. [`AddLock::Busy`] leaves the choice to the caller: start
    /// over with `id` among the locks taken in order, or wait a bounded time with
    /// [`LockSet::add_within`].
    pub fn add(&mut self, ks: &'a Keyspace, id: LockId) -> AddLock {
        if self.holds(id) {
            return AddLock::Held;
        }
        let slot = ks.slot_by_id(id);
        let table = match slot.table.try_lock() {
            Some(g) => g,
            None if self.guards.last().is_none_or(|g| g.0 < id) => slot.table.lock(),
            None => return AddLock::Busy,
        };
        ks.settle_snapshot(id, &table);
        self.insert(id, slot, table);
        AddLock::Added
    }

    /// Waits up to `limit` for the lock of `id`, out of order: whoever holds it may be waiting
    /// for one of ours, and the limit is what breaks that cycle. False when it stayed busy.
    pub fn add_within(&mut self, ks: &'a Keyspace, id: LockId, limit: std::time::Duration) -> bool {
        if self.holds(id) {
            return true;
        }
        let slot = ks.slot_by_id(id);
        let Some(table) = slot.table.try_lock_for(limit) else { return false };
        ks.settle_snapshot(id, &table);
        self.insert(id, slot, table);
        true
    }

    fn insert(&mut self, id: LockId, slot: &'a Slot, table: MutexGuard<'a, Table>) {
        let at = self.guards.partition_point(|g| g.0 < id);
        self.guards.insert(at, (id, slot, table));
    }

    /// The ids this set holds, in order.
    pub fn ids(&self) -> impl Iterator<Item = LockId> + '_ {
        self.guards.iter().map(|g| g.0)
    }

    /// The locked tables in lock order.
    pub fn tables_mut(&mut self) -> impl Iterator<Item = (LockId, &mut Table, &'a Slot)> {
        self.guards.iter_mut().map(|(id, slot, g)| (*id, &mut **g, *slot))
    }
}

#[cfg(test)]
mod lock_tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn an_undeclared_lock_is_waited_for_only_in_order() {
        let ks = Keyspace::new(1);
        let mut set = ks.lock(&[10]);
        assert_eq!(set.add(&ks, 10), AddLock::Held);
        assert_eq!(set.add(&ks, 3), AddLock::Added, "a free lock is taken whatever its place");
        // Held elsewhere and below what we hold: waiting could deadlock, so the caller decides.
        let other = ks.slot_by_id(5).lock();
        assert_eq!(set.add(&ks, 5), AddLock::Busy);
        assert!(!set.add_within(&ks, 5, Duration::from_millis(5)));
        drop(other);
        assert!(set.add_within(&ks, 5, Duration::from_millis(5)));
        // Held elsewhere but above everything we hold: waiting keeps the order, so it waits.
        std::thread::scope(|t| {
            let (tx, rx) = std::sync::mpsc::channel();
            let ks = &ks;
            t.spawn(move || {
                let g = ks.slot_by_id(20).lock();
                tx.send(()).unwrap();
                std::thread::sleep(Duration::from_millis(20));
                drop(g);
            });
            rx.recv().unwrap();
            assert_eq!(set.add(ks, 20), AddLock::Added);
        });
        assert_eq!(set.ids().collect::<Vec<_>>(), vec![3, 5, 10, 20]);
    }
}
