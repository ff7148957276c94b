//! What the engine reports about the keyspace, and who listens: WATCH (a touched key aborts
//! the transactions watching it), blocked clients (a touched key they wait on may serve them),
//! and keyspace notifications (`notify-keyspace-events`, published on `__keyspace@N__:` and
//! `__keyevent@N__:` channels).
//!
//! The engine calls [`CmdEvents`] while it holds the command's slot locks; everything here is
//! cheap when nobody watches, waits or listens (one relaxed load each).

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use hotkv_engine::{Events, KeyState};
use parking_lot::Mutex;

use crate::server::Server;

/// A key of a database.
type DbKey = (usize, Box<[u8]>);

/// One transaction's watch of one key.
struct Watcher {
    /// The transaction's flag: set, EXEC fails.
    dirty: Arc<AtomicBool>,
    /// The key had expired (but was not deleted) when watched, and has not changed since.
    stale: Arc<AtomicBool>,
}

/// Keys being WATCHed, and the flags of the transactions watching them.
#[derive(Default)]
pub struct Watches {
    map: Mutex<HashMap<DbKey, Vec<Watcher>>>,
    count: AtomicUsize,
}

impl Watches {
    /// Registers the transaction with flag `dirty` as watching `key` in `db`; `stale` says
    /// whether the key had already expired, and is kept up to date here.
    pub fn watch(&self, db: usize, key: &[u8], dirty: &Arc<AtomicBool>, stale: &Arc<AtomicBool>) {
        let mut m = self.map.lock();
        let v = m.entry((db, key.into())).or_default();
        if !v.iter().any(|w| Arc::ptr_eq(&w.dirty, dirty)) {
            v.push(Watcher { dirty: dirty.clone(), stale: stale.clone() });
            self.count.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Removes `flag` from the given keys.
    pub fn unwatch(&self, keys: &[(usize, Vec<u8>)], flag: &Arc<AtomicBool>) {
        if keys.is_empty() {
            return;
        }
        let mut m = self.map.lock();
        for (db, key) in keys {
            let k = (*db, Box::from(&key[..]));
            if let Some(v) = m.get_mut(&k) {
                let before = v.len();
                v.retain(|w| !Arc::ptr_eq(&w.dirty, flag));
                self.count.fetch_sub(before - v.len(), Ordering::Relaxed);
                if v.is_empty() {
                    m.remove(&k);
                }
            }
        }
    }

    /// Marks every transaction watching `key` in `db` as dirty.
    pub fn touch(&self, db: usize, key: &[u8]) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        if let Some(v) = self.map.lock().get(&(db, Box::from(key))) {
            v.iter().for_each(|w| w.dirty.store(true, Ordering::Relaxed));
        }
    }

    /// `key` in `db` went from `before` to `after` by expiry, flush or swap. As Valkey's
    /// `touchWatchedKey` and `touchAllWatchedKeysInDb`: for a watcher that saw the key
    /// already expired, its deletion changes nothing (and from then on it watches a missing
    /// key), nor does its replacement by another expired value; for one that saw it missing,
    /// its replacement by an expired value changes nothing either (it now watches a stale
    /// key). Anything else makes the transaction fail.
    pub fn transition(&self, db: usize, key: &[u8], before: KeyState, after: KeyState) {
        if self.count.load(Ordering::Relaxed) == 0 {
            return;
        }
        let m = self.map.lock();
        let Some(v) = m.get(&(db, Box::from(key))) else { return };
        for w in v {
            if w.stale.load(Ordering::Relaxed) {
                match after {
                    KeyState::Missing => w.stale.store(false, Ordering::Relaxed),
                    KeyState::Stale if before == KeyState::Stale => {}
                    _ => w.dirty.store(true, Ordering::Relaxed),
                }
            } else if before == KeyState::Missing && after == KeyState::Stale {
                w.stale.store(true, Ordering::Relaxed);
            } else {
                w.dirty.store(true, Ordering::Relaxed);
            }
        }
    }

    /// The watched keys of `db`.
    pub fn keys_in_db(&self, db: usize) -> Vec<Vec<u8>> {
        if self.count.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        self.map.lock().keys().filter(|(d, _)| *d == db).map(|(_, k)| k.to_vec()).collect()
    }

    /// Number of watched (key, client) pairs (INFO `total_watched_keys`).
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether nothing is watched.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Notification classes of `notify-keyspace-events`, as bits.
pub mod class {
    /// `K`: publish on `__keyspace@<db>__:<key>`.
    pub const KEYSPACE: u32 = 1 << 0;
    /// `E`: publish on `__keyevent@<db>__:<event>`.
    pub const KEYEVENT: u32 = 1 << 1;

    /// The bit of an event class letter (`g`, `$`, `l`, ...), 0 for an unknown letter.
    pub fn bit(c: char) -> u32 {
        match c {
            'g' => 1 << 2,
            '$' => 1 << 3,
            'l' => 1 << 4,
            's' => 1 << 5,
            'h' => 1 << 6,
            'z' => 1 << 7,
            'x' => 1 << 8,
            'e' => 1 << 9,
            't' => 1 << 10,
            'm' => 1 << 11,
            'd' => 1 << 13,
            'n' => 1 << 14,
            _ => 0,
        }
    }

    /// Parses the directive's canonical letters into bits (`A` is every class but `m` and `n`).
    pub fn parse(letters: &str) -> u32 {
        let mut bits = 0;
        for c in letters.chars() {
            bits |= match c {
                'K' => KEYSPACE,
                'E' => KEYEVENT,
                'A' => "g$lshzxetd".chars().map(bit).fold(0, |a, b| a | b),
                c => bit(c),
            };
        }
        bits
    }
}

/// The engine's event sink for one command (or one transaction).
pub struct CmdEvents<'a> {
    srv: &'a Server,
    notify: u32,
    /// The client whose command this is (0 for the server's own work: active expiry,
    /// eviction): CLIENT TRACKING's NOLOOP spares it the invalidations of its own writes.
    writer: u64,
    /// Keys changed, each with the client that changed it (0 for expiry), for the BCAST
    /// tracking clients: sent when the command ends, one message per prefix.
    changed: Mutex<Vec<(Vec<u8>, u64)>>,
    /// Keys touched that blocked clients wait on, to serve after the command.
    pub ready: Mutex<Vec<(usize, Vec<u8>)>>,
    /// Whether `ready` may hold something (checked without the lock on every command).
    any: AtomicBool,
}

impl<'a> CmdEvents<'a> {
    /// Events for a command on `srv` with the current notification classes.
    pub fn new(srv: &'a Server, notify: u32) -> CmdEvents<'a> {
        CmdEvents {
            srv,
            notify,
            writer: 0,
            changed: Mutex::new(Vec::new()),
            ready: Mutex::new(Vec::new()),
            any: AtomicBool::new(false),
        }
    }

    /// The same sink, for a command of client `id`.
    pub fn by(mut self, id: u64) -> CmdEvents<'a> {
        self.writer = id;
        self
    }

    /// CLIENT TRACKING: `key` changed (by `by`, 0 for no client).
    fn track(&self, key: &[u8], by: u64) {
        let t = &self.srv.tracking;
        if !t.wants_changes() {
            return;
        }
        t.invalidate(key, self.writer);
        if t.broadcasting() {
            self.changed.lock().push((key.to_vec(), by));
        }
    }

    /// Whether some key was made ready since the last [`CmdEvents::take_ready`].
    pub fn any_ready(&self) -> bool {
        self.any.load(Ordering::Relaxed)
    }

    /// Queues `key` for the clients blocked on it, if any.
    fn maybe_ready(&self, db: usize, key: &[u8]) {
        if self.srv.blocked.waits_on(db, key) {
            let mut r = self.ready.lock();
            if !r.iter().any(|(d, k)| *d == db && k == key) {
                r.push((db, key.to_vec()));
            }
            self.any.store(true, Ordering::Relaxed);
        }
    }

    /// Takes the keys made ready so far.
    pub fn take_ready(&self) -> Vec<(usize, Vec<u8>)> {
        self.any.store(false, Ordering::Relaxed);
        std::mem::take(&mut *self.ready.lock())
    }
}

impl Events for CmdEvents<'_> {
    fn key_touched(&self, db: usize, key: &[u8]) {
        self.srv.watches.touch(db, key);
        self.maybe_ready(db, key);
        self.track(key, self.writer);
    }

    fn key_replaced(&self, db: usize, key: &[u8], before: KeyState, after: KeyState) {
        self.srv.watches.transition(db, key, before, after);
        self.maybe_ready(db, key);
        // An expired key was deleted by the server, not by the client whose command found it
        // (Valkey signals it with no client), so even a NOLOOP BCAST client hears of it.
        let expired = before == KeyState::Stale && after == KeyState::Missing;
        self.track(key, if expired { 0 } else { self.writer });
    }

    fn flushed(&self) {
        let t = &self.srv.tracking;
        if t.active() || t.total_keys() > 0 {
            t.flushed(&self.srv.clients.snapshot());
        }
    }

    fn key_ready(&self, db: usize, key: &[u8]) {
        self.maybe_ready(db, key);
    }

    fn notify(&self, c: char, event: &str, key: &[u8], db: usize) {
        let bit = class::bit(c);
        if self.notify & bit == 0 || self.notify & (class::KEYSPACE | class::KEYEVENT) == 0 {
            return;
        }
        if self.notify & class::KEYSPACE != 0 {
            let mut channel = format!("__keyspace@{db}__:").into_bytes();
            channel.extend_from_slice(key);
            self.srv.pubsub.publish(&channel, event.as_bytes());
        }
        if self.notify & class::KEYEVENT != 0 {
            let channel = format!("__keyevent@{db}__:{event}");
            self.srv.pubsub.publish(channel.as_bytes(), key);
        }
    }

    fn watched_keys(&self, db: usize) -> Vec<Vec<u8>> {
        self.srv.watches.keys_in_db(db)
    }

    fn db_changed(&self, db: usize) {
        let keys = self.srv.blocked.keys_in_db(db);
        if !keys.is_empty() {
            self.ready.lock().extend(keys.into_iter().map(|k| (db, k)));
            self.any.store(true, Ordering::Relaxed);
        }
    }
}

/// What the command changed reaches BCAST tracking clients once it is over (Valkey sends them
/// before it sleeps, once per event loop turn).
impl Drop for CmdEvents<'_> {
    fn drop(&mut self) {
        let changed = std::mem::take(self.changed.get_mut());
        if !changed.is_empty() {
            self.srv.tracking.broadcast(&changed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn class_letters() {
        assert_eq!(class::parse(""), 0);
        let kea = class::parse("AKE");
        assert_ne!(kea & class::bit('g'), 0);
        assert_eq!(kea & class::bit('m'), 0, "A does not include keymiss");
        assert_eq!(kea & class::bit('n'), 0, "A does not include new");
        assert_ne!(class::parse("Kx") & class::bit('x'), 0);
    }

    #[test]
    fn watches_mark_and_forget() {
        let w = Watches::default();
        let f = Arc::new(AtomicBool::new(false));
        w.watch(0, b"k", &f, &Arc::new(AtomicBool::new(false)));
        w.touch(1, b"k");
        assert!(!f.load(Ordering::Relaxed));
        w.touch(0, b"k");
        assert!(f.load(Ordering::Relaxed));
        w.unwatch(&[(0, b"k".to_vec())], &f);
        assert!(w.is_empty());
    }

    /// Valkey's touchWatchedKey / touchAllWatchedKeysInDb rules, for a watcher that saw the
    /// key stale or not: (stale at watch, before, after) -> (dirty, stale afterwards).
    #[test]
    fn transitions_follow_valkeys_stale_key_rules() {
        use KeyState::{Live, Missing, Stale};
        let cases = [
            (true, Stale, Missing, false, false),
            (true, Stale, Stale, false, true),
            (true, Stale, Live, true, true),
            (false, Missing, Stale, false, true),
            (false, Live, Missing, true, false),
            (false, Live, Stale, true, false),
            (false, Stale, Missing, true, false),
            (false, Missing, Live, true, false),
        ];
        for (was_stale, before, after, dirty, stale_after) in cases {
            let w = Watches::default();
            let (d, st) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(was_stale)));
            w.watch(0, b"k", &d, &st);
            w.transition(0, b"k", before, after);
            let got = (d.load(Ordering::Relaxed), st.load(Ordering::Relaxed));
            assert_eq!(got, (dirty, stale_after), "stale at watch {was_stale}, {before:?} -> {after:?}");
        }
    }
}
