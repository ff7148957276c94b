//! What a command handler works with: its locked slots, the clock, the settings, and the
//! lookups that apply lazy expiry, hit/miss counting and access tracking the way Valkey's
//! `lookupKeyRead` / `lookupKeyWrite` / `setKey` / `dbDelete` do.

use crate::entry::{Entry, NewValue, ValueRef};
use crate::error::CommandError;
use crate::keyspace::{AddLock, Keyspace, LockId, LockSet, Slot};
use crate::object::Object;
use crate::policy::{self, EvictionPolicy};
use crate::propagate::Effects;
use crate::remote::{RemoteOutcome, RemoteRequest};
use crate::table::Table;
use crate::types::hash::Hash;
use crate::types::list::List;
use crate::types::set::Set;
use crate::types::stream::Stream;
use crate::types::zset::ZSet;

/// Engine settings a handler may read. The server fills it from its configuration.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// `maxmemory` in bytes; 0 is no limit.
    pub maxmemory: u64,
    /// `maxmemory-policy`.
    pub policy: EvictionPolicy,
    /// `maxmemory-samples`.
    pub samples: usize,
    /// `maxmemory-eviction-tenacity` (0-100).
    pub eviction_tenacity: u32,
    /// `lfu-log-factor`.
    pub lfu_log_factor: u32,
    /// `lfu-decay-time` in minutes.
    pub lfu_decay_time: u32,
    /// `proto-max-bulk-len`: the largest string APPEND/SETRANGE may build.
    pub proto_max_bulk_len: u64,
    /// `active-expire-effort` (1-10).
    pub active_expire_effort: u32,
    /// `hz`.
    pub hz: u32,
    /// Whether this node is a replica (keys are not deleted on lazy expiry).
    pub replica: bool,
    /// The call comes from this replica's primary, or from the AOF being loaded (both run
    /// as a client with the MASTER flag): keys past their TTL still exist for it, since the
    /// primary decides when they go (Valkey's master client sees them as valid; while
    /// loading Valkey expires nothing), so its DEL of an expired key deletes it.
    pub from_primary: bool,
    /// `cluster-enabled`: SELECT of any database but 0 is refused, as Valkey refuses it.
    pub cluster: bool,
    /// `hll-sparse-max-bytes`: a sparse HyperLogLog that would grow beyond this many bytes
    /// (header included) becomes dense. The server fills it from its configuration.
    pub hll_sparse_max_bytes: usize,
    /// `list-max-listpack-size`: negative for a byte limit per node (-1 = 4 KiB ... -5 =
    /// 64 KiB), positive for an element count.
    pub list_max_listpack_size: i64,
    /// `zset-max-listpack-entries`.
    pub zset_max_listpack_entries: usize,
    /// `zset-max-listpack-value`.
    pub zset_max_listpack_value: usize,
    /// `hash-max-listpack-entries`: most fields of a compact hash.
    pub hash_max_listpack_entries: usize,
    /// `hash-max-listpack-value`: longest field or value of a compact hash.
    pub hash_max_listpack_value: usize,
    /// `set-max-intset-entries`: most members of an intset.
    pub set_max_intset_entries: usize,
    /// `set-max-listpack-entries`: most members of a compact set.
    pub set_max_listpack_entries: usize,
    /// `set-max-listpack-value`: longest member of a compact set.
    pub set_max_listpack_value: usize,
    /// `stream-node-max-bytes`: a stream node (listpack) grows to at most this size; 0 is
    /// Valkey's 1 GiB cap.
    pub stream_node_max_bytes: usize,
    /// `stream-node-max-entries`: most entries (live and deleted) of a stream node; 0 is no
    /// limit.
    pub stream_node_max_entries: usize,
    /// `rdbcompression`: DUMP payloads (and so MIGRATE) LZF-compress long strings, as files do.
    pub rdb_compression: bool,
    /// `lazyfree-lazy-expire`: an expired key goes to the stream as UNLINK rather than DEL.
    pub lazy_expire: bool,
    /// `lazyfree-lazy-eviction`: an evicted key goes to the stream as UNLINK.
    pub lazy_eviction: bool,
    /// `lazyfree-lazy-server-del`: a key the server deletes on its own account (RESTORE over
    /// an expired time, SPOP of a whole set, a dirty slot's keys) goes out as UNLINK.
    pub lazy_server_del: bool,
}

impl EngineConfig {
    /// Whether a command given an expire time already past keeps its key with that TTL
    /// rather than deleting it: see [`Ctx::already_expired`].
    pub fn keeps_past_ttls(&self) -> bool {
        self.replica || self.from_primary
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            maxmemory: 0,
            policy: EvictionPolicy::NoEviction,
            samples: 5,
            eviction_tenacity: 10,
            lfu_log_factor: 10,
            lfu_decay_time: 1,
            proto_max_bulk_len: 512 * 1024 * 1024,
            active_expire_effort: 1,
            hz: 10,
            replica: false,
            from_primary: false,
            cluster: false,
            hll_sparse_max_bytes: 3000,
            list_max_listpack_size: -2,
            zset_max_listpack_entries: 128,
            zset_max_listpack_value: 64,
            // Valkey 8's defaults (Redis 7.0 keeps 128 hash fields compact, Valkey 512).
            hash_max_listpack_entries: 512,
            stream_node_max_bytes: 4096,
            stream_node_max_entries: 100,
            hash_max_listpack_value: 64,
            set_max_intset_entries: 512,
            set_max_listpack_entries: 128,
            set_max_listpack_value: 64,
            rdb_compression: true,
            lazy_expire: true,
            lazy_eviction: true,
            lazy_server_del: true,
        }
    }
}

/// Counters a connection accumulates locally and folds into the server's totals after each
/// batch, so the command path touches no shared counter.
#[derive(Debug, Default, Clone)]
pub struct LocalStats {
    /// `keyspace_hits`.
    pub hits: u64,
    /// `keyspace_misses`.
    pub misses: u64,
    /// `expired_keys` (lazy expiry).
    pub expired: u64,
    /// `expired_subkeys`: hash fields deleted by lazy expiry of their TTL.
    pub expired_fields: u64,
    /// Changes to the dataset (`rdb_changes_since_last_save`).
    pub dirty: u64,
}

/// Notifications about the keyspace for other subsystems (WATCH, keyspace events,
/// blocked clients, replication). The engine calls them; the server implements them.
pub trait Events: Sync {
    /// `key` in `db` was modified or deleted.
    fn key_touched(&self, _db: usize, _key: &[u8]) {}
    /// `key` in `db` went from `before` to `after` without a command writing it: it expired,
    /// or a flush or swap replaced what the database holds. WATCH tells these apart, as
    /// Valkey does: deleting a key that had already expired when it was watched changes
    /// nothing logically. By default, the same as [`Events::key_touched`].
    fn key_replaced(&self, db: usize, key: &[u8], _before: KeyState, _after: KeyState) {
        self.key_touched(db, key)
    }
    /// Clients blocked on `key` in `db` should look again, but the key's value is not
    /// modified for WATCH (Valkey's `signalKeyAsReady` without `signalModifiedKey`: XGROUP
    /// DESTROY, whose blocked XREADGROUP callers must fail NOGROUP).
    fn key_ready(&self, _db: usize, _key: &[u8]) {}
    /// A keyspace notification (`notify-keyspace-events`): `class` is the event class
    /// letter (`g` generic, `$` string, `x` expired, `e` evicted, ...).
    fn notify(&self, _class: char, _event: &str, _key: &[u8], _db: usize) {}
    /// Every key of `db` may have changed at once (FLUSHDB, FLUSHALL, SWAPDB): clients
    /// blocked on keys of that database look again. (WATCH is told key by key, through
    /// [`Events::watched_keys`] and [`Events::key_touched`].)
    fn db_changed(&self, _db: usize) {}
    /// FLUSHDB or FLUSHALL emptied databases: client-side caches drop every key (CLIENT
    /// TRACKING's null invalidation, Valkey's `trackingInvalidateKeysOnFlush`). Called before
    /// the flushed keys are reported one by one to WATCH.
    fn flushed(&self) {}
    /// The WATCHed keys of `db`, so that a flush or swap touches exactly those that change,
    /// as Valkey's `touchAllWatchedKeysInDb`.
    fn watched_keys(&self, _db: usize) -> Vec<Vec<u8>> {
        Vec::new()
    }
}

/// What a key holds, as WATCH sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyState {
    /// No entry.
    Missing,
    /// An entry whose TTL has passed but that nobody deleted yet.
    Stale,
    /// A live entry.
    Live,
}

/// Events sink that ignores everything.
pub struct NoEvents;
impl Events for NoEvents {}

/// How long a call that cannot start over waits for a busy lock of a key it did not declare
/// that it cannot wait for in order (see [`Ctx::lock_undeclared`]): the holder may be waiting
/// for one of the call's locks, and giving up is what breaks that cycle.
const UNDECLARED_WAIT: std::time::Duration = std::time::Duration::from_millis(200);

/// Strings up to this size replace their entry with a new allocation instead of being
/// copied over the old value.
const FRESH_ENTRY_MAX: usize = 1024;

/// How SET-like writes treat an existing TTL.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ttl {
    /// Remove any TTL (plain SET).
    Clear,
    /// Keep the TTL the key had (KEEPTTL, SETRANGE, APPEND, INCR...).
    Keep,
    /// Expire at this unix time in milliseconds.
    At(i64),
}

/// Options of a read lookup beyond lazy expiry, as Valkey's `LOOKUP_*` flags.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LookupFlags {
    /// Do not update the access time (TYPE, TTL, EXISTS, OBJECT): `LOOKUP_NOTOUCH`.
    pub no_touch: bool,
    /// Do not send the `keymiss` notification (OBJECT): `LOOKUP_NONOTIFY`.
    pub no_notify: bool,
}

/// How one lookup behaves.
#[derive(Clone, Copy)]
struct Mode {
    /// A read: hits and misses are counted.
    read: bool,
    /// Update the access time (unless the client set NO-TOUCH).
    touch: bool,
    /// On a read miss, send `keymiss`.
    notify_miss: bool,
}

impl Mode {
    const WRITE: Mode = Mode { read: false, touch: true, notify_miss: false };
}

/// How a blocking command (BLPOP, BZPOPMIN, BLMOVE, ...) behaves when it finds no data.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BlockMode {
    /// A normal call: ask the dispatcher to block the client ([`Ctx::block_on`]).
    #[default]
    Normal,
    /// Inside MULTI/EXEC or a script: never block, reply as a non-blocking call with no data
    /// would.
    Immediate,
    /// Re-run because the client's timeout expired (or CLIENT UNBLOCK ... TIMEOUT): never
    /// block, give the timeout's reply. It differs from [`BlockMode::Immediate`]'s for BLMOVE
    /// and BRPOPLPUSH: Valkey's `replyToBlockedClientTimedOut` answers a null array, where a
    /// call that may not block answers a null bulk.
    TimedOut,
    /// Re-run on behalf of a blocked client because one of its keys changed: with no data,
    /// ask to stay blocked ([`Ctx::block_on`]) and write nothing.
    Serving,
}

/// What a blocking command asks the dispatcher when it found no data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlockRequest {
    /// The keys to wait on, in the client's database.
    pub keys: Vec<Vec<u8>>,
    /// Absolute unix time in milliseconds to give up at, `None` to wait forever.
    pub deadline_ms: Option<i64>,
    /// The arguments to run the command with when it is served, when they differ from the
    /// call's: XREAD's `$` becomes the id that was last when it blocked, or a client woken
    /// later would wait again for entries that already came (Valkey rewrites the argument).
    pub argv: Option<Vec<Vec<u8>>>,
    /// Whether the waiters on a key each wait for something of their own (XREAD and
    /// XREADGROUP after different ids): one that still finds nothing does not mean the next
    /// one in line will, as it does for a list's pops.
    pub independent: bool,
}

/// A command's execution context.
pub struct Ctx<'a> {
    /// The keyspace.
    pub ks: &'a Keyspace,
    /// The client's selected database.
    pub db: usize,
    /// The command's time, unix milliseconds (fixed for the whole command, as in Valkey).
    pub now_ms: i64,
    /// Engine settings.
    pub cfg: &'a EngineConfig,
    /// The connection's counters.
    pub stats: &'a mut LocalStats,
    /// `CLIENT NO-TOUCH on`: reads do not update access times.
    pub no_touch: bool,
    /// Keyspace notifications.
    pub events: &'a dyn Events,
    /// The slots this command may use.
    pub locks: LockSet<'a>,
    /// How a blocking command behaves without data.
    pub block_mode: BlockMode,
    /// Set by [`Ctx::block_on`]: the client must block (no reply was written).
    pub block: Option<BlockRequest>,
    /// Set by a command that must wait on another node (no reply was written): the
    /// dispatcher performs it with no lock held and runs the command again with the outcome
    /// in `resume` (see [`crate::remote`]).
    pub remote: Option<RemoteRequest>,
    /// The outcome of this command's request to another node, on its second turn.
    pub resume: Option<RemoteOutcome>,
    /// What the command's [`crate::cmd::PrepareFn`] produced before the locks were taken.
    pub prepared: Option<crate::cmd::Prepared>,
    /// What the call did, for the write stream (see [`crate::propagate`]). The dispatcher
    /// lends its reusable buffer for the call.
    pub effects: Effects,
    /// The client may read every key for this call (ACL: `allkeys`, `~*` or `%R~*` in a
    /// selector that allows it). Set by the dispatcher only for commands that read keys they
    /// do not name; SORT refuses BY and GET patterns without it, as Valkey does.
    pub full_key_access: bool,
    /// The call runs inside a script (Valkey's `CLIENT_SCRIPT`): SORT then sorts a set even
    /// when told not to, so that the script's outcome is the same on every node.
    pub in_script: bool,
    /// The caller can run the call again from scratch with more locks taken up front (a call
    /// dispatched on its own; not one in a transaction or a script): see
    /// [`Ctx::lock_undeclared`].
    pub may_restart: bool,
    /// Set by [`Ctx::lock_undeclared`] when the call must start over with these locks (sorted,
    /// unique) taken with its own: the handler returned without a reply and wrote nothing.
    pub restart: Option<Vec<LockId>>,
}

/// A key found in its locked table.
pub struct KeyMut<'t> {
    table: &'t mut Table,
    slot: &'t Slot,
    idx: usize,
    /// What a replica's reader sees of a hash some of whose fields are past their TTL: a copy
    /// without them, the stored hash waiting for the primary's HDELs (see `Ctx::lookup`).
    live: Option<Box<Hash>>,
}

impl<'t> KeyMut<'t> {
    /// The entry.
    pub fn entry(&self) -> &Entry {
        self.table.at(self.idx)
    }

    /// The value.
    pub fn value(&self) -> ValueRef<'_> {
        self.table.at(self.idx).value()
    }

    /// The string value, or WRONGTYPE.
    pub fn str(&self) -> Result<&[u8], CommandError> {
        match self.value() {
            ValueRef::Str(b) => Ok(b),
            ValueRef::Obj(Object::Str(v)) => Ok(v),
            #[allow(unreachable_patterns)]
            ValueRef::Obj(_) => Err(CommandError::WrongType),
        }
    }

    /// The list value, or WRONGTYPE.
    pub fn list(&self) -> Result<&List, CommandError> {
        match self.value() {
            ValueRef::Obj(Object::List(l)) => Ok(l),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The hash value, or WRONGTYPE. On a replica's read, without the fields past their TTL.
    pub fn hash(&self) -> Result<&Hash, CommandError> {
        if let Some(live) = &self.live {
            return Ok(live);
        }
        match self.value() {
            ValueRef::Obj(Object::Hash(h)) => Ok(h),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The list value for in-place changes, or WRONGTYPE.
    pub fn list_mut(&mut self) -> Result<&mut List, CommandError> {
        match self.entry_mut().object_mut() {
            Some(Object::List(l)) => Ok(l),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The hash value for in-place changes, or WRONGTYPE.
    pub fn hash_mut(&mut self) -> Result<&mut Hash, CommandError> {
        match self.entry_mut().object_mut() {
            Some(Object::Hash(h)) => Ok(h),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The sorted set value, or WRONGTYPE.
    pub fn zset(&self) -> Result<&ZSet, CommandError> {
        match self.value() {
            ValueRef::Obj(Object::ZSet(z)) => Ok(z),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The set value, or WRONGTYPE.
    pub fn set(&self) -> Result<&Set, CommandError> {
        match self.value() {
            ValueRef::Obj(Object::Set(s)) => Ok(s),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The sorted set value for in-place changes, or WRONGTYPE.
    pub fn zset_mut(&mut self) -> Result<&mut ZSet, CommandError> {
        match self.entry_mut().object_mut() {
            Some(Object::ZSet(z)) => Ok(z),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The set value for in-place changes, or WRONGTYPE.
    pub fn set_mut(&mut self) -> Result<&mut Set, CommandError> {
        match self.entry_mut().object_mut() {
            Some(Object::Set(s)) => Ok(s),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The stream value, or WRONGTYPE.
    pub fn stream(&self) -> Result<&Stream, CommandError> {
        match self.value() {
            ValueRef::Obj(Object::Stream(s)) => Ok(s),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The stream value for in-place changes, or WRONGTYPE.
    pub fn stream_mut(&mut self) -> Result<&mut Stream, CommandError> {
        match self.entry_mut().object_mut() {
            Some(Object::Stream(s)) => Ok(s),
            _ => Err(CommandError::WrongType),
        }
    }

    /// The entry, mutably. Use [`KeyMut::set_expire`] to change its TTL.
    pub fn entry_mut(&mut self) -> &mut Entry {
        self.table.at_mut(self.idx)
    }

    /// Replaces the value, keeping the TTL.
    pub fn set_value(&mut self, v: NewValue<'_>) {
        self.table.at_mut(self.idx).set_value(v);
    }

    /// Sets or removes the TTL.
    pub fn set_expire(&mut self, when: Option<i64>) {
        self.table.at_mut(self.idx).set_expire(when);
        self.table.refresh(self.idx);
        self.slot.sync(self.table);
    }

    /// Removes the key, returning its entry.
    pub fn delete(self) -> Entry {
        let e = self.table.remove_at(self.idx);
        self.slot.sync(self.table);
        e
    }
}

impl<'a> Ctx<'a> {
    /// A context for one command in database `db` with the given locks.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ks: &'a Keyspace,
        db: usize,
        now_ms: i64,
        cfg: &'a EngineConfig,
        stats: &'a mut LocalStats,
        no_touch: bool,
        events: &'a dyn Events,
        locks: LockSet<'a>,
    ) -> Ctx<'a> {
        Ctx {
            ks,
            db,
            now_ms,
            cfg,
            stats,
            no_touch,
            events,
            locks,
            block_mode: BlockMode::Normal,
            block: None,
            remote: None,
            resume: None,
            prepared: None,
            effects: Effects::default(),
            full_key_access: true,
            in_script: false,
            may_restart: false,
            restart: None,
        }
    }

    /// Locks the slots `ids` (sorted, unique) of keys the call reads without having declared
    /// them (SORT's BY and GET patterns), on top of the locks it holds, without risking a
    /// deadlock: a free lock is taken at once, a busy one is waited for only when every lock
    /// held is below it, which keeps the global locking order ([`LockSet::add`]). When a busy
    /// lock is below one the call holds, waiting could deadlock, so a call that can start over
    /// asks to ([`Ctx::restart`]; the caller then runs it again with `ids` locked in order)
    /// and this returns false: the handler must return at once, having written nothing. A
    /// call that cannot start over waits for such a lock a bounded time (whoever holds it may
    /// be waiting for one of ours), then fails. Transactions and scripts never get there in
    /// practice: their plans give such calls every slot of the database up front
    /// ([`crate::cmd::LockPlan::KeysAndUndeclared`]).
    pub fn lock_undeclared(&mut self, ids: &[LockId]) -> Result<bool, CommandError> {
        for &id in ids {
            match self.locks.add(self.ks, id) {
                AddLock::Held | AddLock::Added => continue,
                AddLock::Busy => {}
            }
            if self.may_restart {
                self.restart = Some(ids.to_vec());
                return Ok(false);
            }
            if !self.locks.add_within(self.ks, id, UNDECLARED_WAIT) {
                return Err(CommandError::err(
                    "could not lock a key read through a pattern while another client held it",
                ));
            }
        }
        Ok(true)
    }

    /// Records `argv` in the write stream as what this call did, in place of its own
    /// arguments (a relative TTL made absolute, a random pop made an SREM, ...).
    pub fn propagate_as<A: AsRef<[u8]>>(&mut self, argv: &[A]) {
        let db = self.db;
        self.effects.replace(db, argv);
    }

    /// Records the deletion of `key` because the time the call gave it is already past, as
    /// Valkey's `deleteExpiredKeyFromOverwriteAndPropagate`: UNLINK or DEL by
    /// `lazyfree-lazy-expire`, in place of the call's arguments.
    pub fn propagate_expired(&mut self, key: &[u8]) {
        let verb = crate::propagate::del_verb(self.cfg.lazy_expire);
        self.propagate_as(&[verb, key]);
    }

    /// Hands what the call recorded so far, then `argv`, to the write stream at once, in place
    /// of the call's arguments. For a handler that locked more than its call's slots itself
    /// (a flush, a swap of databases): it must reach the stream before those locks go, or a
    /// write that runs right after them could reach the stream first.
    pub fn propagate_now<A: AsRef<[u8]>>(&mut self, db: usize, argv: &[A]) {
        self.effects.suppress();
        if !self.effects.on() {
            return;
        }
        self.effects.push(db, argv);
        self.ks.sink().append(&self.effects);
        self.effects.begin(true);
        self.effects.suppress();
    }

    /// Whether this call records its effects: handlers skip building a rewrite otherwise.
    pub fn propagating(&self) -> bool {
        self.effects.on()
    }

    /// Ends a call for the write stream: when it changed the dataset (`dirty` moved past
    /// `dirty_before`) and its handler recorded nothing in its place, its own arguments are
    /// its effect, in database `db` (the one it started in). A call that failed after writing
    /// still propagates what it wrote, as Valkey's `call()` does.
    pub fn record_call(&mut self, db: usize, args: &hotkv_protocol::Args<'_>, dirty_before: u64) {
        if self.request_is_effect(dirty_before) {
            // A request that arrived as canonical RESP is copied whole: re-encoding it was
            // 3% of a primary's CPU with a replica attached (SET -P16).
            match args.resp_frame() {
                Some(resp) => self.effects.push_resp(db, resp),
                None => self.effects.push_parts(db, args.iter()),
            }
        }
    }

    /// Whether the call's own request is among its effects: it records, it changed the
    /// dataset, and its handler recorded nothing in its place.
    fn request_is_effect(&self, dirty_before: u64) -> bool {
        self.effects.on() && self.stats.dirty > dirty_before && !self.effects.replaced()
    }

    /// Hands what the call (or a transaction) recorded to the write stream, while its locks
    /// are still held: calls on a common slot reach the stream in the order they ran.
    pub fn emit(&mut self) {
        if self.effects.is_empty() {
            return;
        }
        self.effects.wrap_multi();
        self.ks.sink().append(&self.effects);
        self.effects.begin(false);
    }

    /// [`Ctx::record_call`] then [`Ctx::emit`], for a call run on its own. A call whose only
    /// effect is its request as it arrived goes to the stream straight from the request's
    /// bytes.
    pub fn finish_call(&mut self, db: usize, args: &hotkv_protocol::Args<'_>, dirty_before: u64) {
        if self.effects.is_empty()
            && self.request_is_effect(dirty_before)
            && let Some(resp) = args.resp_frame()
        {
            self.ks.sink().append_resp(db, resp);
            self.effects.begin(false);
            return;
        }
        self.record_call(db, args, dirty_before);
        self.emit();
    }

    /// Whether a blocking command without data may block now (see [`BlockMode`]).
    pub fn can_block(&self) -> bool {
        !matches!(self.block_mode, BlockMode::Immediate | BlockMode::TimedOut)
    }

    /// Asks the dispatcher to block the client on `keys` until `deadline_ms` (None: forever).
    /// The handler must not write a reply after calling this.
    pub fn block_on(&mut self, keys: Vec<Vec<u8>>, deadline_ms: Option<i64>) {
        self.block = Some(BlockRequest { keys, deadline_ms, argv: None, independent: false });
    }

    /// [`Ctx::block_on`] for a command whose waiters are independent of each other, served
    /// with `argv` in place of the call's arguments when given (see [`BlockRequest`]).
    pub fn block_on_with(&mut self, keys: Vec<Vec<u8>>, deadline_ms: Option<i64>, argv: Option<Vec<Vec<u8>>>) {
        self.block = Some(BlockRequest { keys, deadline_ms, argv, independent: true });
    }

    /// The locked table holding `key` in database `db`.
    pub fn table(&mut self, db: usize, key: &[u8]) -> Result<(&mut Table, &'a Slot, u32), CommandError> {
        let (id, hash) = self.locks.locate(db, key);
        match self.locks.get(id) {
            Some((t, s)) => Ok((t, s, hash)),
            None => {
                debug_assert!(false, "slot of key not locked: command metadata is missing a key spec");
                Err(CommandError::err("internal error: key slot not locked"))
            }
        }
    }

    /// Looks a key up for reading: expired keys are deleted (and count as misses), hits and
    /// misses are counted, and the access time is updated unless NO-TOUCH.
    pub fn read(&mut self, key: &[u8]) -> Result<Option<KeyMut<'_>>, CommandError> {
        self.read_with(key, LookupFlags::default())
    }

    /// [`Ctx::read`] with Valkey's lookup flags: counts hits and misses like any read.
    pub fn read_with(&mut self, key: &[u8], flags: LookupFlags) -> Result<Option<KeyMut<'_>>, CommandError> {
        let db = self.db;
        let mode = Mode { read: true, touch: !flags.no_touch, notify_miss: !flags.no_notify };
        self.lookup(db, key, mode)
    }

    /// Looks a key up for writing: expired keys are deleted; no hit/miss counting.
    pub fn write(&mut self, key: &[u8]) -> Result<Option<KeyMut<'_>>, CommandError> {
        let db = self.db;
        self.lookup(db, key, Mode::WRITE)
    }

    /// [`Ctx::write`] in another database (MOVE, COPY ... DB).
    pub fn write_in(&mut self, db: usize, key: &[u8]) -> Result<Option<KeyMut<'_>>, CommandError> {
        self.lookup(db, key, Mode::WRITE)
    }

    /// Whether `key` exists (after lazy expiry), without touching it.
    pub fn exists(&mut self, key: &[u8]) -> Result<bool, CommandError> {
        let db = self.db;
        let found = self.lookup(db, key, Mode { touch: false, ..Mode::WRITE })?.is_some();
        Ok(found)
    }

    /// Stores `value` at `key` in the current database, creating or overwriting it.
    pub fn set(&mut self, key: &[u8], value: NewValue<'_>, ttl: Ttl) -> Result<(), CommandError> {
        let db = self.db;
        self.set_in(db, key, value, ttl)
    }

    /// [`Ctx::set`] in database `db`.
    pub fn set_in(&mut self, db: usize, key: &[u8], value: NewValue<'_>, ttl: Ttl) -> Result<(), CommandError> {
        let now = self.now_ms;
        let policy = self.cfg.policy;
        let events = self.events;
        if let NewValue::Object(Object::Hash(h)) = &value
            && let Some(when) = h.min_expire()
        {
            self.ks.db(db).watch_field_ttls(key, when);
        }
        let (table, slot, hash) = self.table(db, key)?;
        match table.find(key, hash) {
            Some(i) => {
                let e = table.at_mut(i);
                let expire = match ttl {
                    Ttl::Keep => e.expire(),
                    Ttl::Clear => None,
                    Ttl::At(t) => Some(t),
                };
                match value {
                    // A small string gets a fresh entry, as Valkey gives SET a fresh object:
                    // writing the new value into recently freed (cache-hot) memory avoids the
                    // read-for-ownership misses of overwriting the old entry's value lines.
                    NewValue::Bytes(b) if b.len() <= FRESH_ENTRY_MAX => {
                        *e = Entry::new(key, hash, NewValue::Bytes(b), expire, e.lru());
                    }
                    value => {
                        e.set_value(value);
                        e.set_expire(expire);
                    }
                }
                table.refresh(i);
            }
            None => {
                let expire = if let Ttl::At(t) = ttl { Some(t) } else { None };
                table.insert_new(Entry::new(key, hash, value, expire, policy::initial(policy, now)));
                events.notify('n', "new", key, db);
            }
        }
        slot.sync(table);
        self.stats.dirty += 1;
        self.events.key_touched(db, key);
        Ok(())
    }

    /// Inserts an entry built elsewhere (RENAME, MOVE, COPY) into `db`, replacing any key of
    /// that name; the entry's key and hash must match. Like Valkey's delete-then-`dbAdd`, it
    /// sends the `new` event even when it replaced a key.
    pub fn put_entry(&mut self, db: usize, entry: Entry) -> Result<(), CommandError> {
        let key = entry.key().to_vec();
        let events = self.events;
        if let ValueRef::Obj(Object::Hash(h)) = entry.value()
            && let Some(when) = h.min_expire()
        {
            self.ks.db(db).watch_field_ttls(&key, when);
        }
        let (table, slot, hash) = self.table(db, &key)?;
        debug_assert_eq!(hash, entry.hash());
        if let Some(i) = table.find(&key, hash) {
            table.remove_at(i);
        }
        table.insert_new(entry);
        events.notify('n', "new", &key, db);
        slot.sync(table);
        self.stats.dirty += 1;
        self.events.key_touched(db, &key);
        Ok(())
    }

    /// A copy of `key` in `db` as it is now, expired or not, access clock included: what
    /// [`Ctx::put_back`] restores. `None` when there is no such key.
    pub fn save_key(&mut self, db: usize, key: &[u8]) -> Result<Option<Entry>, CommandError> {
        let (table, _, hash) = self.table(db, key)?;
        Ok(table.find(key, hash).map(|i| {
            let e = table.at(i);
            let value = match e.value() {
                ValueRef::Str(b) => NewValue::Bytes(b),
                ValueRef::Obj(o) => NewValue::Object(o.clone()),
            };
            Entry::new(key, hash, value, e.expire(), e.lru())
        }))
    }

    /// Puts `key` back in `db` as [`Ctx::save_key`] found it (absent for `None`), unseen: no
    /// event, no dirty count, nothing for the write stream. For changes nobody may ever see
    /// (a script debugged with SCRIPT DEBUG YES), undone under the locks they were made in.
    pub fn put_back(&mut self, db: usize, key: &[u8], saved: Option<Entry>) -> Result<(), CommandError> {
        if let Some(e) = &saved
            && let ValueRef::Obj(Object::Hash(h)) = e.value()
            && let Some(when) = h.min_expire()
        {
            self.ks.db(db).watch_field_ttls(key, when);
        }
        let (table, slot, hash) = self.table(db, key)?;
        if let Some(i) = table.find(key, hash) {
            table.remove_at(i);
        }
        if let Some(e) = saved {
            table.insert_new(e);
        }
        slot.sync(table);
        Ok(())
    }

    /// Deletes `key` from the current database; returns whether it existed.
    pub fn delete(&mut self, key: &[u8]) -> Result<bool, CommandError> {
        let db = self.db;
        self.delete_in(db, key)
    }

    /// Deletes `key` from `db`; returns whether it existed (an expired key did not).
    pub fn delete_in(&mut self, db: usize, key: &[u8]) -> Result<bool, CommandError> {
        let Some(k) = self.lookup(db, key, Mode::WRITE)? else { return Ok(false) };
        drop(k.delete());
        self.stats.dirty += 1;
        self.events.key_touched(db, key);
        Ok(true)
    }

    /// Records a change made through a [`KeyMut`] (for dirty counting and WATCH).
    pub fn modified(&mut self, key: &[u8]) {
        self.stats.dirty += 1;
        self.events.key_touched(self.db, key);
    }

    /// Records a change to the collection at `key`: dirty and WATCH, its keyspace event of
    /// `class` (`l`, `z`, `h`, `s`), and `del` when the change emptied and deleted it.
    pub fn changed(&mut self, key: &[u8], class: char, event: &str, deleted: bool) {
        self.modified(key);
        self.events.notify(class, event, key, self.db);
        if deleted {
            self.events.notify('g', "del", key, self.db);
        }
    }

    /// Whether a command given the absolute expire time `when` deletes its key instead of
    /// keeping it with that TTL (Valkey's `checkAlreadyExpired`: EXPIRE, SET, GETEX,
    /// RESTORE). Never on a replica, which keeps the key until its primary's DEL, nor for a
    /// call of the primary's stream or of an AOF being replayed: Valkey applies the file as
    /// written while `server.loading`, so a later command of the file still finds the key
    /// (an RPUSH appends to it), and the TTL removes it after the load.
    pub fn already_expired(&self, when: i64) -> bool {
        when <= self.now_ms && !self.cfg.keeps_past_ttls()
    }

    /// Whether an entry is logically expired at the command's time (Valkey: `now > when`).
    pub fn is_expired(&self, e: &Entry) -> bool {
        e.expire().is_some_and(|when| self.now_ms > when)
    }

    fn lookup(&mut self, db: usize, key: &[u8], mode: Mode) -> Result<Option<KeyMut<'_>>, CommandError> {
        let now = self.now_ms;
        let replica = self.cfg.replica;
        let (policy, log_factor, decay) = (self.cfg.policy, self.cfg.lfu_log_factor, self.cfg.lfu_decay_time);
        let no_touch = self.no_touch || !mode.touch;
        let read = mode.read;
        let events = self.events;
        let (table, slot, hash) = {
            let (id, hash) = self.locks.locate(db, key);
            match self.locks.get(id) {
                Some((t, s)) => (t, s, hash),
                None => {
                    debug_assert!(false, "slot of key not locked: command metadata is missing a key spec");
                    return Err(CommandError::err("internal error: key slot not locked"));
                }
            }
        };
        let Some(idx) = table.find(key, hash) else {
            if read {
                self.stats.misses += 1;
                if mode.notify_miss {
                    events.notify('m', "keymiss", key, db);
                }
            }
            return Ok(None);
        };
        if !self.cfg.from_primary && table.at(idx).expire().is_some_and(|when| now > when) {
            if read {
                self.stats.misses += 1;
            }
            // A replica waits for its primary's DEL, so a read returns "no key" but keeps it;
            // a write on a writable replica deletes it first, as Valkey's lookupKeyWrite
            // (EXPIRE_FORCE_DELETE_EXPIRED), so the key it makes has no stale TTL.
            if !replica || !read {
                table.remove_at(idx);
                slot.sync(table);
                self.effects.push(db, &[crate::propagate::del_verb(self.cfg.lazy_expire), key]);
                self.stats.expired += 1;
                events.notify('x', "expired", key, db);
                events.key_replaced(db, key, KeyState::Stale, KeyState::Missing);
            }
            if read && mode.notify_miss {
                events.notify('m', "keymiss", key, db);
            }
            return Ok(None);
        }
        // A replica's readers do not see fields past their TTL either, but the fields stay until
        // the primary's HDELs, as in Redis 7.4 (`hashTypeGetValue` on a replica).
        let live = if replica && read && !self.cfg.from_primary { live_fields(table.at(idx), now) } else { None };
        if live.as_ref().is_some_and(|h| h.is_empty()) {
            self.stats.misses += 1;
            if mode.notify_miss {
                events.notify('m', "keymiss", key, db);
            }
            return Ok(None);
        }
        let expired =
            if self.cfg.from_primary || replica { Vec::new() } else { expired_fields(table.at_mut(idx), now) };
        if !expired.is_empty() {
            // Redis 7.4 propagates each expired field as an HDEL of its own.
            for f in &expired {
                self.effects.push(db, &[b"HDEL".as_slice(), key, f]);
            }
            self.stats.expired_fields += expired.len() as u64;
            events.notify('h', "hexpired", key, db);
            if matches!(table.at(idx).value(), ValueRef::Obj(Object::Hash(h)) if h.is_empty()) {
                table.remove_at(idx);
                slot.sync(table);
                events.notify('g', "del", key, db);
                events.key_replaced(db, key, KeyState::Live, KeyState::Missing);
                if read {
                    self.stats.misses += 1;
                    if mode.notify_miss {
                        events.notify('m', "keymiss", key, db);
                    }
                }
                return Ok(None);
            }
            events.key_touched(db, key);
        }
        if read {
            self.stats.hits += 1;
        }
        if !no_touch {
            let e = table.at_mut(idx);
            let lru = policy::touched(e.lru(), policy, now, log_factor, decay);
            e.set_lru(lru);
        }
        Ok(Some(KeyMut { table, slot, idx, live }))
    }
}

/// A copy of a hash entry without its fields past their TTL, `None` when there are none (or the
/// value is no hash): one compare unless some field is due.
fn live_fields(e: &Entry, now: i64) -> Option<Box<Hash>> {
    match e.value() {
        // The lower bound may be stale (a persisted field): the times say whether one is due.
        ValueRef::Obj(Object::Hash(h))
            if h.min_expire().is_some_and(|min| min < now) && h.field_ttls().any(|(_, t)| t < now) =>
        {
            let mut live = h.clone();
            live.remove_expired(now);
            Some(Box::new(live))
        }
        _ => None,
    }
}

/// Deletes the fields of a hash entry whose TTL is past and returns them (none for every other
/// value, and for a hash with no field due: one compare).
fn expired_fields(e: &mut Entry, now: i64) -> Vec<Vec<u8>> {
    match e.object_mut() {
        Some(Object::Hash(h)) => h.remove_expired(now),
        _ => Vec::new(),
    }
}
