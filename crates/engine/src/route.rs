//! Cluster routing as the command path sees it: the engine owns the question, the cluster
//! crate owns the answer.
//!
//! Dispatch asks a [`SlotRouter`] where a call's [`Plan`] goes, in two steps, as Valkey's
//! `getNodeByQuery` decides in one (it runs on one thread; here commands run on every core):
//!
//! 1. [`SlotRouter::route`], before any slot lock is taken, from the plan's slots and the
//!    router's view of slot ownership: Ok, MOVED, CROSSSLOT, CLUSTERDOWN, or "it depends on
//!    which keys exist" ([`Route::CheckKeys`]) for a slot being migrated or imported.
//! 2. Under the command's slot locks, [`SlotRouter::route_locked`], with a count of the keys
//!    present ([`KeyPresence`]), after a `CheckKeys` or whenever the slot table changed since
//!    step 1 ([`SlotRouter::table_version`]): the whole decision again, from the table as it
//!    is now, so usually Ok, ASK or TRYAGAIN, but MOVED if the slot left meanwhile. The
//!    locks make the answer true for as long as the command runs: a key moves only under its
//!    slot's lock, and every MIGRATE of a slot is sent after the table that announced its
//!    migration was published, so a command that gets the lock after a key left also sees
//!    that table.
//!
//! Step 1's answer alone is not enough: between it and the locks, a slot can finish moving
//! (a GET would then read this node's empty slot and answer nil for a key the new owner
//! holds) or start moving and lose the key.
//!
//! A standalone server wires in [`Standalone`], which never answers `CheckKeys` and has no
//! table version, so step 2 costs one branch on a local. A call without keys is never routed
//! at all.
//!
//! The cluster crate implements the trait over an immutable snapshot of its slot table (see
//! `docs/cluster.md`); nothing here knows about nodes, epochs or the bus.

use std::sync::Arc;

use hotkv_protocol::Args;

use crate::error::{CommandError, DownReason};
use crate::keyspace::{Keyspace, LockSet};
use crate::plan::Plan;

/// Decides where calls go. Implemented by the cluster crate; [`Standalone`] serves everything.
pub trait SlotRouter: Send + Sync {
    /// Where a call with keys or shard channels goes, decided before any slot lock is taken.
    /// A cross-slot plan ([`Plan::is_cross_slot`]) must get [`Route::CrossSlot`] before any
    /// other check, as in Valkey. `Ask` and `TryAgain` belong to [`SlotRouter::route_locked`]:
    /// answer [`Route::CheckKeys`] to get there.
    fn route(&self, plan: &Plan, ctx: &RouteCtx) -> Route;

    /// Where a call goes once its keys have been counted under its slot locks: the whole of
    /// [`SlotRouter::route`]'s decision again, from one look at the table as it is now, then
    /// the key rules where that decision depends on them. Called after `route` answered
    /// [`Route::CheckKeys`], or answered Ok with a [`SlotRouter::table_version`] that has
    /// changed since. Answering `CheckKeys` is taken as `Ok`.
    fn route_locked(&self, plan: &Plan, ctx: &RouteCtx, keys: &KeyPresence) -> Route;

    /// A number that changes whenever an answer of [`SlotRouter::route`] may have, read
    /// before `route` and again under the slot locks; `None` for a table that never changes.
    fn table_version(&self) -> Option<u64> {
        None
    }
}

/// What routing needs to know about the client and the command besides the plan.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RouteCtx {
    /// The client came in over TLS: a redirect names the node's TLS port.
    pub tls: bool,
    /// The client came in over IPv6: a redirect names the node's address for IPv6 clients
    /// (`cluster-announce-client-ipv6`), else the one for IPv4 clients.
    pub ipv6: bool,
    /// The client sent ASKING (or the command is flagged `asking`, RESTORE-ASKING): an
    /// importing slot serves it.
    pub asking: bool,
    /// The client sent READONLY: a replica serves its reads.
    pub readonly: bool,
    /// The command may write (for EXEC: some queued command may).
    pub write: bool,
}

/// Where a call goes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Route {
    /// Serve it here.
    Ok,
    /// The slot is being migrated or imported: count the keys under the slot locks and ask
    /// [`SlotRouter::route_locked`].
    CheckKeys,
    /// Another node serves the slot.
    Moved {
        /// The slot.
        slot: u16,
        /// That node's `host:port`, the port chosen for the client's kind.
        addr: Arc<str>,
    },
    /// The slot is migrating and the keys are not here: ask the target, once.
    Ask {
        /// The slot.
        slot: u16,
        /// The target's `host:port`, the port chosen for the client's kind.
        addr: Arc<str>,
    },
    /// Some keys are here and some are not, during a migration.
    TryAgain,
    /// The keys hash to different slots.
    CrossSlot,
    /// This node cannot serve the request now.
    Down(DownReason),
}

impl Route {
    /// The error reply for a redirect or refusal; `None` when the call may go on.
    pub fn into_error(self) -> Option<CommandError> {
        Some(match self {
            Route::Ok | Route::CheckKeys => return None,
            Route::Moved { slot, addr } => CommandError::Moved { slot, addr },
            Route::Ask { slot, addr } => CommandError::Ask { slot, addr },
            Route::TryAgain => CommandError::TryAgain,
            Route::CrossSlot => CommandError::CrossSlot,
            Route::Down(reason) => CommandError::ClusterDown(reason),
        })
    }
}

/// The router of a server without cluster mode: every call is served here, whatever its
/// slots (MSET of keys in different slots works as it always has).
#[derive(Clone, Copy, Debug, Default)]
pub struct Standalone;

impl SlotRouter for Standalone {
    fn route(&self, _: &Plan, _: &RouteCtx) -> Route {
        Route::Ok
    }

    fn route_locked(&self, _: &Plan, _: &RouteCtx, _: &KeyPresence) -> Route {
        Route::Ok
    }
}

/// How many of a request's keys this node holds, counted under the slot locks: what a
/// cluster needs to answer ASK or TRYAGAIN for a slot being migrated (Valkey's
/// `getNodeByQuery` counts `existing_keys` and `missing_keys`). Channels are not counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KeyPresence {
    /// Keys that exist (and have not expired).
    pub present: usize,
    /// Keys that do not.
    pub missing: usize,
    /// Whether the request names more than one distinct key.
    pub several: bool,
    first: Option<Box<[u8]>>,
}

impl KeyPresence {
    /// Counts the keys of `plan`, a call of `args` run in database `db`, in the tables `locks`
    /// holds (a slot it does not hold is locked just for the look). Expired keys count as
    /// missing, and are left for the command to delete. Call once per command of a
    /// transaction to count a whole EXEC.
    pub fn count<'a>(
        &mut self,
        ks: &'a Keyspace,
        locks: &mut LockSet<'a>,
        db: usize,
        args: &Args<'_>,
        plan: &Plan,
        now_ms: i64,
    ) {
        for k in plan.keys().iter().filter(|k| !k.channel) {
            let key = args.get(k.pos as usize);
            match &self.first {
                None => self.first = Some(key.into()),
                Some(first) => self.several |= **first != *key,
            }
            let table = locks.slot_ref(ks, db, k.slot);
            // A key a MIGRATE is still settling counts as here: it is this node's to decide.
            let live = table
                .find(key, crate::hash::key_hash(key))
                .is_some_and(|i| table.at(i).expire().is_none_or(|when| now_ms <= when))
                || ks.in_flight(db, key);
            if live {
                self.present += 1;
            } else {
                self.missing += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::with_args;

    /// The plan of an engine command in database 0.
    fn plan(argv: &[&str]) -> Plan {
        crate::testkit::plan_of(argv, 0, 16)
    }

    #[test]
    fn routes_become_valkeys_errors() {
        assert_eq!(Route::Ok.into_error(), None);
        assert_eq!(Route::CheckKeys.into_error(), None);
        let moved = Route::Moved { slot: 12182, addr: "10.0.0.2:6380".into() }.into_error().expect("an error");
        assert_eq!(moved.message(), "MOVED 12182 10.0.0.2:6380");
        let ask = Route::Ask { slot: 1, addr: "h:1".into() }.into_error().expect("an error");
        assert_eq!(ask.message(), "ASK 1 h:1");
        assert_eq!(Route::CrossSlot.into_error(), Some(CommandError::CrossSlot));
        assert_eq!(Route::TryAgain.into_error(), Some(CommandError::TryAgain));
        assert_eq!(
            Route::Down(DownReason::Unbound).into_error().map(|e| e.message().into_owned()),
            Some("CLUSTERDOWN Hash slot not served".to_string())
        );
    }

    #[test]
    fn standalone_serves_everything() {
        let cross = plan(&["MSET", "foo", "1", "bar", "2"]);
        assert!(cross.is_cross_slot());
        let ctx = RouteCtx { write: true, ..RouteCtx::default() };
        assert_eq!(Standalone.route(&cross, &ctx), Route::Ok);
        assert_eq!(Standalone.route_locked(&cross, &ctx, &KeyPresence::default()), Route::Ok);
    }

    #[test]
    fn presence_counts_live_keys_under_the_locks() {
        let mut t = crate::testkit::TestKit::default();
        t.run(&["SET", "{s}a", "1"]);
        t.run(&["SET", "{s}old", "1", "PX", "10"]);
        let now = t.now_ms;
        let count = |argv: &[&str], at: i64| {
            let p = plan(argv);
            let mut locks = t.ks.lock(p.locks());
            let mut seen = KeyPresence::default();
            with_args(argv, |a| seen.count(&t.ks, &mut locks, 0, a, &p, at));
            (seen.present, seen.missing, seen.several)
        };
        assert_eq!(count(&["MGET", "{s}a", "{s}b", "{s}a"], now), (2, 1, true));
        assert_eq!(count(&["GET", "{s}a"], now), (1, 0, false));
        assert_eq!(count(&["GET", "{s}old"], now), (1, 0, false));
        assert_eq!(count(&["GET", "{s}old"], now + 11), (0, 1, false), "expired is missing");
        // A key a MIGRATE is settling is here, even once deleted.
        t.ks.in_flight_add(0, b"{s}b");
        assert_eq!(count(&["GET", "{s}b"], now), (1, 0, false));
        t.ks.in_flight_remove(0, b"{s}b");
        assert_eq!(count(&["GET", "{s}b"], now), (0, 1, false));
        // A key whose slot the set does not hold is looked at under its own lock.
        let p = plan(&["GET", "{s}a"]);
        let mut none = LockSet::empty();
        let mut seen = KeyPresence::default();
        with_args(&["GET", "{s}a"], |a| seen.count(&t.ks, &mut none, 0, a, &p, now));
        assert_eq!(seen.present, 1);
    }
}
