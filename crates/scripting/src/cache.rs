//! The script cache every thread shares: EVAL bodies by SHA, as Valkey's `lua_scripts` dict.
//! Each thread's VM compiles a script on its first use there ([`crate::Vm::script`]).

use foldhash::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::RwLock;

use crate::body::{Sha, Shebang, eval_shebang, sha1_hex};

/// Scripts added by EVAL (not SCRIPT LOAD) beyond this many are evicted oldest first, so a
/// client generating a new script per call cannot grow the cache without bound (Valkey's
/// LRU_LIST_LENGTH).
pub const EVAL_SCRIPTS_KEPT: usize = 500;

/// A cached script.
#[derive(Debug)]
pub struct Script {
    /// Its SHA1.
    pub sha: Sha,
    /// The whole body, shebang included.
    pub body: Box<[u8]>,
    /// Its shebang.
    pub shebang: Shebang,
    /// `f_<sha>`, Valkey's name for its function in error texts.
    name: String,
    /// The cache's clock when the script was added or last ran: eviction takes the least
    /// recent. Stored only when the clock moved since, so a script run over and over by many
    /// threads is only read, and its line is not passed from core to core.
    used: AtomicU64,
}

impl Script {
    /// The code the compiler sees: the body with its shebang line blanked (the newline kept).
    pub fn code(&self) -> &[u8] {
        &self.body[self.shebang.len..]
    }

    /// Valkey's name for the script's function, `f_<sha>`, used in error texts.
    pub fn function_name(&self) -> &str {
        &self.name
    }
}

/// The shared cache.
#[derive(Default)]
pub struct ScriptCache {
    inner: RwLock<Inner>,
    /// Ticks once per script added: only the order of adds and runs matters to eviction,
    /// and runs between two adds are all more recent than every script added before them.
    clock: AtomicU64,
    evicted: AtomicU64,
}

#[derive(Default)]
struct Inner {
    scripts: HashMap<Sha, Arc<Script>>,
    /// EVAL-added scripts; SCRIPT LOAD takes a script out of it for good.
    evictable: Vec<Sha>,
    memory: usize,
}

impl ScriptCache {
    /// The script `sha` (any case), if cached.
    pub fn get(&self, sha: &[u8]) -> Option<Arc<Script>> {
        let key = lower_sha(sha)?;
        self.inner.read().scripts.get(&key).cloned()
    }

    /// Adds `body` (EVAL: `evictable`; SCRIPT LOAD: kept until a flush). `check` validates
    /// the code (the caller compiles it in its VM) before the script is cached. Returns the
    /// cached script, or the error text (without its `ERR ` code).
    pub fn add(
        &self,
        body: &[u8],
        evictable: bool,
        check: impl FnOnce(&Script) -> Result<(), String>,
    ) -> Result<Arc<Script>, String> {
        let sha = sha1_hex(body);
        // Bound first: a guard in an `if let` scrutinee would live through the body, and the
        // write below would then wait for it forever.
        let cached = self.inner.read().scripts.get(&sha).cloned();
        if let Some(s) = cached {
            if !evictable {
                self.inner.write().evictable.retain(|x| *x != sha);
            }
            return Ok(s);
        }
        let shebang = eval_shebang(body)?;
        let name = format!("f_{}", std::str::from_utf8(&sha).unwrap_or(""));
        let used = AtomicU64::new(self.clock.fetch_add(1, Ordering::Relaxed) + 1);
        let script = Arc::new(Script { sha, body: body.into(), shebang, name, used });
        check(&script)?;
        let mut inner = self.inner.write();
        if let Some(s) = inner.scripts.get(&sha).cloned() {
            return Ok(s);
        }
        if evictable {
            while inner.evictable.len() >= EVAL_SCRIPTS_KEPT {
                // The least recently run (a scan of at most 500 stamps, only when a new EVAL
                // script would pass the limit).
                let oldest = {
                    let Inner { scripts, evictable, .. } = &*inner;
                    let used = |sha: &Sha| scripts.get(sha).map_or(0, |s| s.used.load(Ordering::Relaxed));
                    (0..evictable.len()).min_by_key(|&i| used(&evictable[i]))
                };
                let Some(i) = oldest else { break };
                let old = inner.evictable.swap_remove(i);
                if let Some(s) = inner.scripts.remove(&old) {
                    inner.memory -= s.body.len() + 40;
                    self.evicted.fetch_add(1, Ordering::Relaxed);
                }
            }
            inner.evictable.push(sha);
        }
        inner.memory += script.body.len() + 40;
        inner.scripts.insert(sha, script.clone());
        Ok(script)
    }

    /// Marks a script as run now (EVAL, EVALSHA), so eviction takes older ones first.
    pub fn touch(&self, script: &Script) {
        let now = self.clock.load(Ordering::Relaxed);
        if script.used.load(Ordering::Relaxed) != now {
            script.used.store(now, Ordering::Relaxed);
        }
    }

    /// SCRIPT FLUSH: every script goes, and every VM is replaced with what it compiled.
    pub fn flush(&self) {
        let mut inner = self.inner.write();
        *inner = Inner::default();
        crate::vm::reset_all();
    }

    /// Number of cached scripts (INFO number_of_cached_scripts).
    pub fn len(&self) -> usize {
        self.inner.read().scripts.len()
    }

    /// Whether no script is cached.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Bytes the cached bodies take (INFO used_memory_scripts_eval).
    pub fn memory(&self) -> usize {
        self.inner.read().memory
    }

    /// Scripts evicted so far (INFO evicted_scripts).
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }

    /// CONFIG RESETSTAT: `evicted_scripts` starts again from zero.
    pub fn reset_stats(&self) {
        self.evicted.store(0, Ordering::Relaxed);
    }
}

/// `sha` lowercased, if it has the length of a SHA1 in hex.
fn lower_sha(sha: &[u8]) -> Option<Sha> {
    let mut out: Sha = sha.try_into().ok()?;
    out.make_ascii_lowercase();
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eval_scripts_are_evicted_oldest_first_and_loaded_ones_kept() {
        let cache = ScriptCache::default();
        let kept = cache.add(b"return 'kept'", false, |_| Ok(())).unwrap();
        for i in 0..EVAL_SCRIPTS_KEPT + 10 {
            cache.add(format!("return {i}").as_bytes(), true, |_| Ok(())).unwrap();
        }
        assert_eq!(cache.evicted(), 10);
        assert_eq!(cache.len(), EVAL_SCRIPTS_KEPT + 1);
        assert!(cache.get(&kept.sha).is_some());
        assert!(cache.get(&sha1_hex(b"return 0")).is_none());
        let upper: Vec<u8> = kept.sha.to_ascii_uppercase();
        assert!(cache.get(&upper).is_some(), "SHA lookups ignore case");
        cache.flush();
        assert!(cache.is_empty());
    }

    #[test]
    fn eviction_is_plain_lru_over_adds_and_runs() {
        let cache = ScriptCache::default();
        let add = |i: usize| cache.add(format!("return {i}").as_bytes(), true, |_| Ok(())).unwrap();
        let scripts: Vec<_> = (1..=EVAL_SCRIPTS_KEPT).map(add).collect();
        // Runs of "return 1" and "return 2" make them the most recent; runs with no add in
        // between store nothing more.
        cache.touch(&scripts[0]);
        cache.touch(&scripts[1]);
        cache.touch(&scripts[1]);
        add(1000);
        assert_eq!(cache.evicted(), 1);
        assert!(cache.get(&scripts[0].sha).is_some());
        assert!(cache.get(&scripts[1].sha).is_some());
        assert!(cache.get(&scripts[2].sha).is_none(), "the least recent goes");
        assert!(cache.get(&scripts[3].sha).is_some());
    }

    #[test]
    fn script_load_of_a_script_eval_cached_keeps_it() {
        let cache = ScriptCache::default();
        let s = cache.add(b"return 1", true, |_| Ok(())).unwrap();
        cache.add(b"return 1", false, |_| Ok(())).unwrap();
        for i in 0..EVAL_SCRIPTS_KEPT {
            cache.add(format!("return {i} + 1").as_bytes(), true, |_| Ok(())).unwrap();
        }
        assert!(cache.get(&s.sha).is_some(), "SCRIPT LOAD took it out of eviction");
    }

    #[test]
    fn a_bad_script_is_not_cached() {
        let cache = ScriptCache::default();
        assert!(cache.add(b"#!lua flags=nope\nreturn 1", true, |_| Ok(())).is_err());
        assert!(cache.add(b"return +", true, |_| Err("bad".into())).is_err());
        assert!(cache.is_empty());
    }
}
