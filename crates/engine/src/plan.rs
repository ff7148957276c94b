//! A command's plan: what its arguments say about keys, computed once per call by dispatch
//! right after the command's row is found and its arity checked, and reused by everyone after
//! it: cluster routing, the slot locks, MULTI (a queued command keeps its plan, EXEC locks the
//! union) and blocked clients (a waiter keeps its plan for the retry and for being served).
//!
//! Before plans, a command's keys were found in three places (the lock planner, a registry
//! helper and COMMAND GETKEYS) and EXEC re-derived every queued command's keys. Now the key
//! specs are read in one function, [`crate::command::for_each_key`], and only here on the
//! command path.

use hotkv_protocol::Args;
use smallvec::SmallVec;

use crate::cmd::LockPlan;
use crate::command::{CommandSpec, FindKeys, KeysFound, for_each_key, key_flags};
use crate::keyspace::{LockId, LockSet, lock_id};
use crate::slot::{SLOTS, key_slot};

/// One key argument of a call, or a sharded pub/sub channel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeyArg {
    /// Its argument index.
    pub pos: u32,
    /// Its hash slot.
    pub slot: u16,
    /// A sharded pub/sub channel (SPUBLISH, SSUBSCRIBE): routed like a key, as Valkey routes
    /// shard channels, but never locked nor looked up.
    pub channel: bool,
}

/// Which slots a command needs locked when it runs inside a transaction, where every
/// command of the transaction runs under one lock set taken before the first.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LockScope {
    /// The slots of its keys ([`Plan::locks`]).
    Keys,
    /// Every slot of its database: it walks the database (KEYS, SCAN, FLUSHDB), or reads keys
    /// its arguments do not name (SORT with BY or GET patterns).
    Database,
    /// Every slot of every database (FLUSHALL, SWAPDB).
    AllDatabases,
}

/// A call's keys, their slots, the slot locks it needs and what routing needs to know.
///
/// Buffers are inline for up to three keys and reused between calls (dispatch keeps one plan
/// per connection), so planning allocates nothing on the hot path.
#[derive(Clone, Debug, Default)]
pub struct Plan {
    keys: SmallVec<[KeyArg; 3]>,
    locks: SmallVec<[LockId; 3]>,
    db: u32,
    /// MOVE's and COPY ... DB's other database, whose slots are locked too.
    other_db: Option<u32>,
    /// The slot of the first key or channel, when [`flag::ROUTED`].
    slot: u16,
    flags: u8,
    seed: Option<Seed>,
}

/// The key the handler will most likely look up first, with what is known of it, so its lock
/// set can be seeded and CRC16 and the table hash run once per command.
#[derive(Clone, Copy, Debug)]
struct Seed {
    pos: u32,
    slot: u16,
    hash: Option<u32>,
}

mod flag {
    /// It has keys or channels: [`super::Plan::slot`] is set.
    pub(super) const ROUTED: u8 = 1 << 0;
    /// Its keys and channels hash to more than one slot.
    pub(super) const CROSS_SLOT: u8 = 1 << 1;
    /// [`super::LockScope::Database`].
    pub(super) const WHOLE_DB: u8 = 1 << 2;
    /// [`super::LockScope::AllDatabases`].
    pub(super) const ALL_DBS: u8 = 1 << 3;
    /// The arguments do not fit the key specs.
    pub(super) const BAD_KEYS: u8 = 1 << 4;
    /// A union absorbed a plan with shard channels (a transaction with SPUBLISH).
    pub(super) const CHANNELS: u8 = 1 << 5;
}

/// Buffers grown beyond this many elements (a huge MSET, a transaction that locks every slot)
/// are released when the plan is reused, so one such call does not pin memory on its
/// connection for good.
const KEEP_CAPACITY: usize = 1024;

impl Plan {
    /// Plans a call of the command `spec` in database `db`. `lock` is the row's lock plan
    /// (commands outside the engine pass [`LockPlan::Keys`]: they take no locks to run, but
    /// routing may lock their keys' slots to look at them). `hint` may give the slot (and
    /// table hash) of one argument, computed earlier by the connection while prefetching.
    pub fn compute<H>(
        &mut self,
        spec: &CommandSpec<H>,
        lock: LockPlan,
        args: &Args<'_>,
        db: usize,
        databases: usize,
        hint: &KeyHint,
    ) {
        self.reset(db);
        match lock {
            LockPlan::PerSlot => self.flags |= flag::WHOLE_DB,
            LockPlan::PerSlotAllDbs => self.flags |= flag::ALL_DBS,
            LockPlan::KeysAndUndeclared(reads_more) if reads_more(args) => self.flags |= flag::WHOLE_DB,
            _ => {}
        }
        if spec.key_specs.is_empty() {
            return;
        }
        let keys = &mut self.keys;
        let found = for_each_key(spec, args, true, |pos, flags| {
            keys.push(KeyArg { pos: pos as u32, slot: 0, channel: flags & key_flags::NOT_KEY != 0 });
        });
        if found != Ok(KeysFound::Complete) {
            self.keys.clear();
            // A bad key count (SINTERCARD a k, ZUNION 5 k) is the handler's to report, in its
            // own words ("numkeys should be greater than 0"), as Valkey does: lock nothing and
            // let it run. Such a handler validates its count before it looks at any key.
            if !spec.key_specs.iter().any(|k| matches!(k.find, FindKeys::Keynum { .. })) {
                self.flags |= flag::BAD_KEYS;
            }
            return;
        }
        self.other_db = match lock {
            LockPlan::KeysAlsoInDbArg(i) => args.opt(i).and_then(parse_db),
            LockPlan::KeysAlsoInDbOption => db_option(args).and_then(parse_db),
            _ => None,
        }
        .filter(|d| *d < databases)
        .map(|d| d as u32);
        for i in 0..self.keys.len() {
            let k = self.keys[i];
            let hinted = hint.applies(args, k.pos as usize);
            let slot = if hinted { hint.slot } else { key_slot(args.get(k.pos as usize)) };
            self.keys[i].slot = slot;
            self.route_slot(slot);
            if k.channel {
                continue;
            }
            if hinted || self.seed.is_none() {
                let hash = if hinted { hint.hash } else { None };
                self.seed = Some(Seed { pos: k.pos, slot, hash });
            }
            self.locks.push(lock_id(db, slot));
            if let Some(other) = self.other_db {
                self.locks.push(lock_id(other as usize, slot));
            }
        }
        if self.locks.len() > 1 {
            self.locks.sort_unstable();
            self.locks.dedup();
        }
    }

    /// Starts the union of a transaction's plans (EXEC's plan), in database `db`.
    pub fn begin_union(&mut self, db: usize) {
        self.reset(db);
    }

    /// Adds a queued command's plan to a union, as if the command ran in database `db` (a
    /// transaction may SELECT between its commands): its slots for routing, its lock scope
    /// expanded into lock ids. Finish with [`Plan::end_union`].
    pub fn absorb(&mut self, other: &Plan, db: usize, databases: usize) {
        if let Some(slot) = other.slot() {
            self.route_slot(slot);
        }
        self.flags |= other.flags & flag::CROSS_SLOT;
        // The union keeps no key arguments, but routing must still know a queued SPUBLISH
        // is there: a replica serves a transaction on its primary's shard channels (Valkey's
        // getNodeByQuery, `pubsubshard_included`).
        if other.has_channels() {
            self.flags |= flag::CHANNELS;
        }
        match other.lock_scope() {
            LockScope::AllDatabases => {
                self.locks.extend((0..databases).flat_map(|d| (0..SLOTS as u16).map(move |s| lock_id(d, s))));
            }
            LockScope::Database => self.locks.extend((0..SLOTS as u16).map(|s| lock_id(db, s))),
            LockScope::Keys if other.db as usize == db => self.locks.extend_from_slice(&other.locks),
            LockScope::Keys => {
                for k in other.keys.iter().filter(|k| !k.channel) {
                    self.locks.push(lock_id(db, k.slot));
                    if let Some(o) = other.other_db {
                        self.locks.push(lock_id(o as usize, k.slot));
                    }
                }
            }
        }
    }

    /// Sorts and deduplicates a union's lock ids.
    pub fn end_union(&mut self) {
        self.locks.sort_unstable();
        self.locks.dedup();
    }

    /// The key and channel arguments, in key-spec order (empty for a union).
    pub fn keys(&self) -> &[KeyArg] {
        &self.keys
    }

    /// The slot every key and channel hashes to (the first one's, for a cross-slot call);
    /// `None` for a call without keys, which cluster routing never redirects.
    pub fn slot(&self) -> Option<u16> {
        (self.flags & flag::ROUTED != 0).then_some(self.slot)
    }

    /// Whether the keys and channels hash to more than one slot (CROSSSLOT in a cluster).
    pub fn is_cross_slot(&self) -> bool {
        self.flags & flag::CROSS_SLOT != 0
    }

    /// Whether some argument is a sharded pub/sub channel (for a union: of some command in it).
    pub fn has_channels(&self) -> bool {
        self.flags & flag::CHANNELS != 0 || self.keys.iter().any(|k| k.channel)
    }

    /// The slot locks the call needs, sorted and unique: none for a command that walks the
    /// keyspace itself ([`LockScope::Database`]), every one of them for a union that contains
    /// such a command.
    pub fn locks(&self) -> &[LockId] {
        &self.locks
    }

    /// Which slots the command needs inside a transaction.
    pub fn lock_scope(&self) -> LockScope {
        if self.flags & flag::ALL_DBS != 0 {
            LockScope::AllDatabases
        } else if self.flags & flag::WHOLE_DB != 0 {
            LockScope::Database
        } else {
            LockScope::Keys
        }
    }

    /// Whether the arguments did not fit the key specs (the call is a syntax error).
    pub fn keys_invalid(&self) -> bool {
        self.flags & flag::BAD_KEYS != 0
    }

    /// The database the plan was made for.
    pub fn db(&self) -> usize {
        self.db as usize
    }

    /// Tells `locks` the slot and table hash of the key the handler will likely look up
    /// first, so that lookup computes neither.
    pub fn seed(&self, locks: &mut LockSet<'_>, args: &Args<'_>) {
        if let Some(s) = self.seed {
            let key = args.get(s.pos as usize);
            let hash = s.hash.unwrap_or_else(|| crate::hash::key_hash(key));
            locks.seed(self.db as usize, key, s.slot, hash);
        }
    }

    fn reset(&mut self, db: usize) {
        if self.keys.capacity() > KEEP_CAPACITY {
            self.keys = SmallVec::new();
        }
        if self.locks.capacity() > KEEP_CAPACITY {
            self.locks = SmallVec::new();
        }
        self.keys.clear();
        self.locks.clear();
        self.db = db as u32;
        self.other_db = None;
        self.slot = 0;
        self.flags = 0;
        self.seed = None;
    }

    fn route_slot(&mut self, slot: u16) {
        if self.flags & flag::ROUTED == 0 {
            self.flags |= flag::ROUTED;
            self.slot = slot;
        } else if self.slot != slot {
            self.flags |= flag::CROSS_SLOT;
        }
    }
}

/// The slot of one key argument, and its table hash when known, so that a command computes
/// them once: the connection computes them while prefetching a pipeline, the plan uses the
/// slot, and the lock set is seeded with both for the handler's first lookup. Before this,
/// CRC16 ran three times and the table hash twice for every single-key command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyHint {
    /// The argument index; 0 (the command name) means no hint.
    pub arg: usize,
    /// Address of that argument's first byte, so a hint can never apply to another command.
    pub at: usize,
    /// Its hash slot.
    pub slot: u16,
    /// Its table hash, if computed.
    pub hash: Option<u32>,
}

impl KeyHint {
    /// A hint for argument `arg` of `args`, computing the slot (and the hash if asked).
    pub fn of(args: &Args<'_>, arg: usize, with_hash: bool) -> KeyHint {
        let key = args.get(arg);
        KeyHint {
            arg,
            at: key.as_ptr() as usize,
            slot: key_slot(key),
            hash: with_hash.then(|| crate::hash::key_hash(key)),
        }
    }

    /// Whether it describes argument `arg` of `args`.
    pub fn applies(&self, args: &Args<'_>, arg: usize) -> bool {
        self.arg != 0 && self.arg == arg && arg < args.len() && args.get(arg).as_ptr() as usize == self.at
    }
}

/// The argument of COPY's last `DB` option, found the way COPY parses its options (the
/// value after `DB` is never itself an option), so the locks match the database it uses.
fn db_option<'a>(args: &Args<'a>) -> Option<&'a [u8]> {
    let mut found = None;
    let mut i = 3;
    while i < args.len() {
        if args.get(i).eq_ignore_ascii_case(b"db") && i + 1 < args.len() {
            found = Some(args.get(i + 1));
            i += 1;
        }
        i += 1;
    }
    found
}

fn parse_db(arg: &[u8]) -> Option<usize> {
    hotkv_protocol::parse_i64(arg).and_then(|n| usize::try_from(n).ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::commands;
    use crate::command::KeySpec;
    use crate::testkit::with_args;

    /// The plan of an engine command.
    fn plan(argv: &[&str], db: usize) -> Plan {
        crate::testkit::plan_of(argv, db, 16)
    }

    fn id(db: usize, key: &str) -> LockId {
        lock_id(db, key_slot(key.as_bytes()))
    }

    fn sorted(mut v: Vec<LockId>) -> Vec<LockId> {
        v.sort_unstable();
        v
    }

    #[test]
    fn key_commands_lock_their_slots() {
        assert_eq!(plan(&["MSET", "a", "1", "b", "2"], 0).locks(), sorted(vec![id(0, "a"), id(0, "b")]));
        assert_eq!(plan(&["GET", "{x}1"], 3).locks(), [id(3, "x")]);
        assert_eq!(plan(&["DEL", "{x}1", "{x}2"], 0).locks(), [id(0, "x")]);
        assert!(plan(&["KEYS", "*"], 0).locks().is_empty());
        assert!(plan(&["DBSIZE"], 0).locks().is_empty());
    }

    #[test]
    fn move_and_copy_also_lock_the_other_database() {
        assert_eq!(plan(&["MOVE", "k", "2"], 0).locks(), [id(0, "k"), id(2, "k")]);
        assert_eq!(plan(&["MOVE", "k", "99"], 0).locks(), [id(0, "k")], "the handler rejects it");
        assert_eq!(plan(&["MOVE", "k", "0"], 0).locks(), [id(0, "k")]);
        let want = sorted(vec![id(0, "a"), id(0, "b"), id(5, "a"), id(5, "b")]);
        assert_eq!(plan(&["COPY", "a", "b", "DB", "5"], 0).locks(), want);
        let want = sorted(vec![id(1, "a"), id(1, "b"), id(3, "a"), id(3, "b")]);
        assert_eq!(plan(&["COPY", "a", "b", "DB", "5", "REPLACE", "db", "3"], 1).locks(), want, "last DB wins");
        assert_eq!(plan(&["COPY", "a", "b", "REPLACE"], 0).locks(), sorted(vec![id(0, "a"), id(0, "b")]));
    }

    #[test]
    fn slots_and_cross_slot() {
        let p = plan(&["GET", "foo"], 0);
        assert_eq!((p.slot(), p.is_cross_slot()), (Some(12182), false));
        assert_eq!(p.keys(), [KeyArg { pos: 1, slot: 12182, channel: false }]);
        let p = plan(&["MSET", "{t}a", "1", "{t}b", "2"], 0);
        assert_eq!((p.slot(), p.is_cross_slot()), (Some(key_slot(b"t")), false));
        let p = plan(&["MSET", "foo", "1", "bar", "2"], 0);
        assert_eq!((p.slot(), p.is_cross_slot()), (Some(12182), true), "the first key's slot");
        let p = plan(&["DBSIZE"], 0);
        assert_eq!((p.slot(), p.is_cross_slot(), p.keys().len()), (None, false, 0));
    }

    #[test]
    fn whole_keyspace_commands_say_so() {
        assert_eq!(plan(&["GET", "k"], 0).lock_scope(), LockScope::Keys);
        assert_eq!(plan(&["DBSIZE"], 0).lock_scope(), LockScope::Keys, "reads counters only");
        for argv in [&["KEYS", "*"][..], &["SCAN", "0"], &["FLUSHDB"], &["RANDOMKEY"]] {
            assert_eq!(plan(argv, 0).lock_scope(), LockScope::Database, "{argv:?}");
        }
        assert_eq!(plan(&["FLUSHALL"], 0).lock_scope(), LockScope::AllDatabases);
        assert_eq!(plan(&["SWAPDB", "0", "1"], 0).lock_scope(), LockScope::AllDatabases);
    }

    #[test]
    fn bad_key_counts_are_left_to_the_handler() {
        let p = plan(&["SINTERCARD", "x", "k"], 0);
        assert!(!p.keys_invalid() && p.keys().is_empty() && p.locks().is_empty());
        let p = plan(&["ZUNION", "5", "k"], 0);
        assert!(!p.keys_invalid() && p.slot().is_none());
    }

    #[test]
    fn channels_route_but_do_not_lock() {
        static SHARD: [KeySpec; 1] = [KeySpec::range(1, -1, 1, key_flags::NOT_KEY)];
        let spec: CommandSpec<()> =
            CommandSpec { key_specs: &SHARD, ..CommandSpec::new("ssubscribe", -2, 0, 0, &[], "", "", "", "", ()) };
        let mut p = Plan::default();
        with_args(&["SSUBSCRIBE", "{c}1", "{c}2"], |a| p.compute(&spec, LockPlan::Keys, a, 0, 16, &KeyHint::default()));
        assert_eq!((p.slot(), p.is_cross_slot(), p.has_channels()), (Some(key_slot(b"c")), false, true));
        assert!(p.locks().is_empty());
        with_args(&["SSUBSCRIBE", "foo", "bar"], |a| p.compute(&spec, LockPlan::Keys, a, 0, 16, &KeyHint::default()));
        assert!(p.is_cross_slot());
        // A transaction's union remembers that a queued command had channels, and forgets it
        // when reused.
        with_args(&["SSUBSCRIBE", "{c}1"], |a| p.compute(&spec, LockPlan::Keys, a, 0, 16, &KeyHint::default()));
        let mut union = Plan::default();
        union.begin_union(0);
        union.absorb(&p, 0, 16);
        union.end_union();
        assert!(union.keys().is_empty() && union.has_channels());
        union.begin_union(0);
        assert!(!union.has_channels());
    }

    #[test]
    fn a_hint_saves_the_crc_and_seeds_the_lookup() {
        let spec = commands().find(|s| s.name == "get").expect("GET");
        let mut p = Plan::default();
        with_args(&["GET", "foo"], |a| {
            // A deliberately wrong slot shows the hint was used instead of CRC16.
            let hint = KeyHint { slot: 7, ..KeyHint::of(a, 1, true) };
            p.compute(spec, LockPlan::Keys, a, 0, 16, &hint);
            assert_eq!(p.slot(), Some(7));
            // A hint for another buffer never applies.
            let other = KeyHint { at: 1, ..hint };
            p.compute(spec, LockPlan::Keys, a, 0, 16, &other);
            assert_eq!(p.slot(), Some(12182));
            assert_eq!(p.seed.map(|s| (s.pos, s.slot)), Some((1, 12182)));
        });
    }

    #[test]
    fn a_union_follows_databases_and_lock_scopes() {
        let (a, b, moved) = (plan(&["SET", "a", "1"], 0), plan(&["GET", "b"], 0), plan(&["MOVE", "a", "2"], 0));
        let mut u = Plan::default();
        u.begin_union(0);
        u.absorb(&a, 0, 16);
        u.absorb(&b, 0, 16);
        // Queued in database 0 but run after a SELECT 1: its locks move with it.
        u.absorb(&b, 1, 16);
        u.absorb(&moved, 1, 16);
        u.end_union();
        assert_eq!(u.locks(), sorted(vec![id(0, "a"), id(0, "b"), id(1, "b"), id(1, "a"), id(2, "a")]));
        assert_eq!((u.slot(), u.is_cross_slot()), (Some(key_slot(b"a")), true));
        u.begin_union(0);
        u.absorb(&a, 0, 16);
        u.absorb(&plan(&["FLUSHDB"], 0), 3, 16);
        u.end_union();
        assert_eq!(u.locks().len(), SLOTS + 1);
        assert!(u.locks().contains(&lock_id(3, 0)) && u.locks().contains(&id(0, "a")));
        assert_eq!((u.slot(), u.is_cross_slot()), (Some(key_slot(b"a")), false), "FLUSHDB has no keys to route");
        u.begin_union(0);
        u.absorb(&plan(&["FLUSHALL"], 0), 0, 2);
        u.end_union();
        assert_eq!(u.locks().len(), 2 * SLOTS);
        u.begin_union(0);
        u.end_union();
        assert!(u.locks().is_empty() && u.slot().is_none());
    }
}
