//! The server-side session cache behind `tls-session-caching`, `tls-session-cache-size` and
//! `tls-session-cache-timeout`.
//!
//! rustls' own `ServerSessionMemoryCache` has a size but no lifetime, and rustls' stateless
//! tickets have fixed lifetimes, so neither honours the timeout directive. This cache stores
//! each session with its insertion time and treats older ones as absent; stateless tickets stay
//! off so that every resumption goes through it. Eviction is oldest-first.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use rustls::server::StoresServerSessions;

/// Upstream's "0 = unlimited" becomes this cap: a bound is still needed for memory.
pub(crate) const UNLIMITED_CAP: usize = 1_000_000;

/// A bounded session store whose entries expire.
pub(crate) struct SessionCache {
    inner: Mutex<Inner>,
    capacity: usize,
    ttl: Duration,
}

struct Inner {
    map: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// Insertion order; may hold keys already taken (removed lazily).
    order: VecDeque<Vec<u8>>,
}

impl SessionCache {
    /// A cache of `size` sessions (0 = [`UNLIMITED_CAP`]) that live `timeout_secs` seconds.
    pub(crate) fn new(size: u32, timeout_secs: u32) -> SessionCache {
        let capacity = if size == 0 { UNLIMITED_CAP } else { size as usize };
        SessionCache {
            inner: Mutex::new(Inner { map: HashMap::new(), order: VecDeque::new() }),
            capacity,
            ttl: Duration::from_secs(u64::from(timeout_secs)),
        }
    }

    /// Sessions currently held (expired ones included until they are looked up or evicted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        let mut inner = self.inner.lock();
        let fresh = inner.map.get(key).map(|(_, at)| at.elapsed() < self.ttl)?;
        if !fresh || remove {
            return inner.map.remove(key).filter(|_| fresh).map(|(v, _)| v);
        }
        inner.map.get(key).map(|(v, _)| v.clone())
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut inner = self.inner.lock();
        while inner.map.len() >= self.capacity {
            let Some(old) = inner.order.pop_front() else { break };
            inner.map.remove(&old);
        }
        if inner.map.insert(key.clone(), (value, Instant::now())).is_none() {
            inner.order.push_back(key);
        }
        // Taken sessions leave their key in `order`; compact before it grows unbounded.
        if inner.order.len() > 2 * self.capacity.min(inner.map.len() + 1024) {
            let Inner { map, order } = &mut *inner;
            order.retain(|k| map.contains_key(k));
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

impl fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionCache").field("capacity", &self.capacity).field("ttl", &self.ttl).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_beyond_capacity() {
        let c = SessionCache::new(2, 300);
        c.put(b"a".to_vec(), b"1".to_vec());
        c.put(b"b".to_vec(), b"2".to_vec());
        c.put(b"c".to_vec(), b"3".to_vec());
        assert_eq!(c.get(b"a"), None);
        assert_eq!(c.get(b"b"), Some(b"2".to_vec()));
        assert_eq!(c.take(b"c"), Some(b"3".to_vec()));
        assert_eq!(c.take(b"c"), None);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn expired_sessions_are_misses() {
        let c = SessionCache::new(10, 0);
        c.put(b"a".to_vec(), b"1".to_vec());
        assert_eq!(c.get(b"a"), None);
        assert_eq!(c.len(), 0, "an expired entry is dropped when looked up");
    }

    #[test]
    fn zero_size_means_a_large_cap() {
        assert_eq!(SessionCache::new(0, 1).capacity, UNLIMITED_CAP);
    }

    #[test]
    fn taken_keys_do_not_pile_up() {
        let c = SessionCache::new(4, 300);
        for i in 0..10_000u32 {
            c.put(i.to_be_bytes().to_vec(), vec![1]);
            c.take(&i.to_be_bytes());
        }
        assert!(c.inner.lock().order.len() < 3000);
    }
}
