//! The engine's [`SlotRouter`] for a cluster node: an immutable [`SlotMap`] of who serves each
//! slot, rebuilt by the bus after every change of the node table and swapped in whole, so the
//! command path reads it with one atomic load and never waits for the bus.

use std::collections::HashMap;
use std::sync::Arc;

use arc_swap::ArcSwap;
use hotkv_engine::error::DownReason;
use hotkv_engine::plan::Plan;
use hotkv_engine::route::{KeyPresence, Route, RouteCtx, SlotRouter};

use crate::node::{Node, NodeFlags, NodeId};
use crate::slots::SLOTS;
use crate::state::{ClusterState, Endpoint as EndpointKind};

/// A node as redirects name it.
#[derive(Debug)]
struct Endpoint {
    id: NodeId,
    /// `host:port` for each kind of client, by [`Endpoint::index`]: plain and TLS clients
    /// are told different ports, IPv4 and IPv6 clients may be told different addresses
    /// (`cluster-announce-client-ipv4`/`-ipv6`). Shared when they are the same.
    addrs: [Arc<str>; 4],
}

impl Endpoint {
    fn of(n: &Node, kind: EndpointKind) -> Endpoint {
        let mut addrs: [Option<Arc<str>>; 4] = Default::default();
        for ipv6 in [false, true] {
            for tls in [false, true] {
                let text = format!("{}:{}", kind.of(n, ipv6), n.client_port(tls));
                let shared = addrs.iter().flatten().find(|a| ***a == *text).cloned();
                addrs[Endpoint::index(tls, ipv6)] = Some(shared.unwrap_or_else(|| text.into()));
            }
        }
        Endpoint { id: n.id, addrs: addrs.map(Option::unwrap_or_default) }
    }

    fn index(tls: bool, ipv6: bool) -> usize {
        usize::from(tls) | (usize::from(ipv6) << 1)
    }

    fn addr(&self, ctx: &RouteCtx) -> Arc<str> {
        self.addrs[Endpoint::index(ctx.tls, ctx.ipv6)].clone()
    }
}

/// Who serves every slot, as of one moment.
pub struct SlotMap {
    /// Each slot's owner, an index into `endpoints` ([`NO_OWNER`] for none): a map is built
    /// after every SETSLOT of a reshard, and 16384 reference-counted pointers to build and
    /// drop each time were most of a SETSLOT's cost.
    owners: Vec<u16>,
    /// The nodes that own slots.
    endpoints: Vec<Arc<Endpoint>>,
    me: NodeId,
    /// The primary whose slots this replica may serve to READONLY clients.
    my_primary: Option<NodeId>,
    ok: bool,
    allow_reads_when_down: bool,
    allow_pubsubshard_when_down: bool,
    /// Slots migrating away from here, with their target.
    migrating: HashMap<u16, Arc<Endpoint>>,
    /// Slots being imported here.
    importing: HashMap<u16, NodeId>,
}

/// [`SlotMap::owners`] of a slot nobody serves.
const NO_OWNER: u16 = u16::MAX;

impl SlotMap {
    /// The map of `st` now.
    pub fn of(st: &ClusterState) -> SlotMap {
        let kind = st.settings().preferred_endpoint;
        // Node by node over their slot sets: a lookup per slot (two hashes each, 16384 times)
        // made every SETSLOT of a reshard cost milliseconds.
        let mut owners = vec![NO_OWNER; SLOTS];
        let mut endpoints = Vec::new();
        for n in st.nodes() {
            if n.slots.is_empty() || endpoints.len() >= usize::from(NO_OWNER) {
                continue;
            }
            let index = endpoints.len() as u16;
            endpoints.push(Arc::new(Endpoint::of(n, kind)));
            for s in n.slots.iter() {
                owners[usize::from(s)] = index;
            }
        }
        let migrating = st
            .migrating()
            .iter()
            .filter_map(|(slot, to)| {
                let known = endpoints.iter().find(|e| e.id == *to).cloned();
                known.or_else(|| st.node(to).map(|n| Arc::new(Endpoint::of(n, kind)))).map(|e| (*slot, e))
            })
            .collect();
        let me = st.myself();
        SlotMap {
            owners,
            endpoints,
            me: me.id,
            my_primary: if me.flags.has(NodeFlags::REPLICA) { me.primary } else { None },
            ok: st.is_ok(),
            allow_reads_when_down: st.settings().allow_reads_when_down,
            allow_pubsubshard_when_down: st.settings().allow_pubsubshard_when_down,
            migrating,
            importing: st.importing().clone(),
        }
    }
}

/// The router the server wires in for cluster mode.
pub struct ClusterRouter {
    map: ArcSwap<SlotMap>,
    /// Bumped by every publish, so the server can tell cheaply that routing changed.
    generation: std::sync::atomic::AtomicU64,
}

impl ClusterRouter {
    /// A router over `map`.
    pub fn new(map: SlotMap) -> ClusterRouter {
        ClusterRouter { map: ArcSwap::from_pointee(map), generation: Default::default() }
    }

    /// Publishes a new map; calls routed from now on see it.
    pub fn publish(&self, map: SlotMap) {
        self.map.store(Arc::new(map));
        self.generation.fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    /// Whether this node serves `slot`'s shard channels: it owns the slot, or its primary does.
    pub fn serves_shard(&self, slot: u16) -> bool {
        let map = self.map.load();
        map.endpoints
            .get(usize::from(map.owners[usize::from(slot)]))
            .is_some_and(|o| o.id == map.me || map.my_primary == Some(o.id))
    }

    /// The primary this node replicates as of the last published map (None: it is a primary).
    pub fn my_primary(&self) -> Option<NodeId> {
        self.map.load().my_primary
    }

    /// The cluster state as of the last published map: what routing serves by.
    pub fn is_ok(&self) -> bool {
        self.map.load().ok
    }

    /// How many maps were published: changes whenever routing may have.
    pub fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }
}

impl SlotRouter for ClusterRouter {
    fn route(&self, plan: &Plan, ctx: &RouteCtx) -> Route {
        decide(&self.map.load(), plan, ctx)
    }

    fn route_locked(&self, plan: &Plan, ctx: &RouteCtx, keys: &KeyPresence) -> Route {
        // One look at the table for the whole decision: the slot may have finished moving
        // (or started) since `route`, and a decision made on one table and finished on
        // another served a GET here after its key had gone to the new owner.
        let map = self.map.load();
        let route = decide(&map, plan, ctx);
        if route != Route::CheckKeys {
            return route;
        }
        let Some(slot) = plan.slot() else { return Route::Ok };
        // Valkey's getNodeByQuery: some keys here and some not, mid-migration: try again
        // later; none here on the source: ask the target; on the target, with ASKING, serve
        // unless a multi-key request is incomplete.
        if let Some(target) = map.migrating.get(&slot) {
            if keys.missing > 0 && keys.present > 0 {
                return Route::TryAgain;
            }
            if keys.missing > 0 {
                return Route::Ask { slot, addr: target.addr(ctx) };
            }
            return Route::Ok;
        }
        if map.importing.contains_key(&slot) && keys.several && keys.missing > 0 {
            return Route::TryAgain;
        }
        Route::Ok
    }

    fn table_version(&self) -> Option<u64> {
        Some(self.generation())
    }
}

/// Where a call goes by `map` alone, before its keys are counted (Valkey's getNodeByQuery
/// up to the key checks).
fn decide(map: &SlotMap, plan: &Plan, ctx: &RouteCtx) -> Route {
    if plan.is_cross_slot() {
        return Route::CrossSlot;
    }
    let Some(slot) = plan.slot() else { return Route::Ok };
    // Valkey's getNodeByQuery order: a slot nobody serves first, then the cluster's state.
    let Some(owner) = map.endpoints.get(usize::from(map.owners[usize::from(slot)])) else {
        return Route::Down(DownReason::Unbound);
    };
    // Sharded pub/sub (SSUBSCRIBE, SPUBLISH...) has its own rule while the cluster is down.
    let shard_pubsub = plan.has_channels();
    if !map.ok {
        if shard_pubsub {
            if !map.allow_pubsubshard_when_down {
                return Route::Down(DownReason::Down);
            }
        } else if !map.allow_reads_when_down {
            return Route::Down(DownReason::Down);
        } else if ctx.write {
            return Route::Down(DownReason::ReadOnly);
        }
    }
    if owner.id == map.me {
        return if map.migrating.contains_key(&slot) { Route::CheckKeys } else { Route::Ok };
    }
    if map.importing.contains_key(&slot) && ctx.asking {
        return Route::CheckKeys;
    }
    // A replica serves its primary's slots to clients that asked for READONLY reads, and
    // its shard's channels to anyone: SSUBSCRIBE there hears SPUBLISH on the primary.
    if (ctx.readonly || shard_pubsub) && !ctx.write && map.my_primary == Some(owner.id) {
        // A replica knows its primary's migrations (SETSLOT is replicated): for keys it
        // lacks it redirects as its primary would (ASK, TRYAGAIN), as Valkey 8.
        let migrating = !shard_pubsub && map.migrating.contains_key(&slot);
        return if migrating { Route::CheckKeys } else { Route::Ok };
    }
    Route::Moved { slot, addr: owner.addr(ctx) }
}

#[cfg(test)]
mod tests {
    use hotkv_engine::slot::key_slot;

    use super::*;
    use crate::nodes_conf::SavedConfig;
    use crate::state::{Endpoint as Kind, Settings};

    fn plan(argv: &[&str]) -> Plan {
        hotkv_engine::testkit::plan_of(argv, 0, 1)
    }

    fn settings() -> Settings {
        Settings {
            node_timeout_ms: 1000,
            require_full_coverage: true,
            allow_reads_when_down: false,
            announce_ip: String::new(),
            port: 7000,
            tls_port: 7100,
            bus_port: 17100,
            hostname: String::new(),
            human_nodename: String::new(),
            client_ipv4: String::new(),
            client_ipv6: String::new(),
            preferred_endpoint: Kind::Ip,
            replica_validity_factor: 10,
            repl_ping_period_ms: 10_000,
            replica_no_failover: false,
            allow_replica_migration: true,
            migration_barrier: 1,
            ping_interval_ms: 0,
            allow_pubsubshard_when_down: true,
        }
    }

    /// Me serving every slot but `foo`'s (12182), which `other` serves; `replica` is mine.
    fn two_nodes(cfg: Settings, me_replica_of_other: bool) -> (ClusterState, NodeId) {
        let mut me = Node::new(NodeId::random(), NodeFlags::MYSELF | NodeFlags::PRIMARY);
        let mut other = Node::new(NodeId::random(), NodeFlags::PRIMARY);
        other.ip = "10.0.0.2".into();
        other.port = 7001;
        other.tls_port = 7101;
        other.hostname = "node2.example.com".into();
        for s in 0..SLOTS as u16 {
            if s == 12182 {
                other.slots.insert(s)
            } else {
                me.slots.insert(s)
            };
        }
        if me_replica_of_other {
            me.flags = NodeFlags(NodeFlags::MYSELF | NodeFlags::REPLICA);
            me.primary = Some(other.id);
            me.slots = crate::SlotSet::new();
            other.slots = crate::SlotSet::full();
        }
        let id = other.id;
        let st = ClusterState::from_saved(
            SavedConfig { nodes: vec![me, other], current_epoch: 1, last_vote_epoch: 0, open_slots: Vec::new() },
            cfg,
        );
        (st, id)
    }

    fn ctx(tls: bool, write: bool) -> RouteCtx {
        RouteCtx { tls, write, ..RouteCtx::default() }
    }

    #[test]
    fn redirects_name_the_port_of_the_clients_kind() {
        let (st, _) = two_nodes(settings(), false);
        let r = ClusterRouter::new(SlotMap::of(&st));
        assert_eq!(key_slot(b"foo"), 12182);
        let moved = |tls| r.route(&plan(&["GET", "foo"]), &ctx(tls, false));
        assert_eq!(moved(false), Route::Moved { slot: 12182, addr: "10.0.0.2:7001".into() });
        assert_eq!(moved(true), Route::Moved { slot: 12182, addr: "10.0.0.2:7101".into() });
        assert_eq!(r.route(&plan(&["GET", "bar"]), &ctx(false, false)), Route::Ok);
        assert_eq!(r.route(&plan(&["MSET", "foo", "1", "bar", "2"]), &ctx(false, true)), Route::CrossSlot);
        assert_eq!(r.route(&plan(&["DBSIZE"]), &ctx(false, false)), Route::Ok, "no keys: never redirected");
    }

    #[test]
    fn each_address_family_is_sent_to_its_announced_client_address() {
        let (mut st, other) = two_nodes(settings(), false);
        let mut cfg = settings();
        cfg.client_ipv4 = "192.0.2.1".into();
        st.set_settings(cfg);
        // The other node's addresses as its ping extensions would have set them.
        let mut saved = st.saved();
        let n = saved.nodes.iter_mut().find(|n| n.id == other).unwrap();
        n.client_ipv6 = "2001:db8::2".into();
        let st = ClusterState::from_saved(saved, st.settings().clone());
        let r = ClusterRouter::new(SlotMap::of(&st));
        let moved = |tls, ipv6| r.route(&plan(&["GET", "foo"]), &RouteCtx { ipv6, ..ctx(tls, false) });
        assert_eq!(moved(false, false), Route::Moved { slot: 12182, addr: "10.0.0.2:7001".into() });
        assert_eq!(moved(true, false), Route::Moved { slot: 12182, addr: "10.0.0.2:7101".into() });
        assert_eq!(moved(false, true), Route::Moved { slot: 12182, addr: "2001:db8::2:7001".into() });
        assert_eq!(moved(true, true), Route::Moved { slot: 12182, addr: "2001:db8::2:7101".into() });
        // Hostnames do not depend on the client's family.
        let st = ClusterState::from_saved(st.saved(), Settings { preferred_endpoint: Kind::Hostname, ..settings() });
        r.publish(SlotMap::of(&st));
        assert_eq!(moved(false, true), Route::Moved { slot: 12182, addr: "node2.example.com:7001".into() });
    }

    #[test]
    fn the_preferred_endpoint_type_names_hosts() {
        let (st, _) = two_nodes(Settings { preferred_endpoint: Kind::Hostname, ..settings() }, false);
        let r = ClusterRouter::new(SlotMap::of(&st));
        let moved = r.route(&plan(&["GET", "foo"]), &ctx(false, false));
        assert_eq!(moved, Route::Moved { slot: 12182, addr: "node2.example.com:7001".into() });
        let (st, _) = two_nodes(Settings { preferred_endpoint: Kind::Unknown, ..settings() }, false);
        let r = ClusterRouter::new(SlotMap::of(&st));
        assert_eq!(
            r.route(&plan(&["GET", "foo"]), &ctx(false, false)),
            Route::Moved { slot: 12182, addr: ":7001".into() }
        );
    }

    #[test]
    fn a_down_cluster_refuses_or_serves_reads_as_configured() {
        let (mut st, _) = two_nodes(settings(), false);
        st.del_slots(&[12182]).unwrap();
        let r = ClusterRouter::new(SlotMap::of(&st));
        assert_eq!(r.route(&plan(&["GET", "bar"]), &ctx(false, false)), Route::Down(DownReason::Down));
        st.set_settings(Settings { allow_reads_when_down: true, ..settings() });
        r.publish(SlotMap::of(&st));
        assert_eq!(r.route(&plan(&["GET", "bar"]), &ctx(false, false)), Route::Ok);
        assert_eq!(r.route(&plan(&["SET", "bar", "1"]), &ctx(false, true)), Route::Down(DownReason::ReadOnly));
        assert_eq!(r.route(&plan(&["GET", "foo"]), &ctx(false, false)), Route::Down(DownReason::Unbound));
        // Without full coverage the cluster stays up, and only the unserved slot is refused.
        st.set_settings(Settings { require_full_coverage: false, ..settings() });
        r.publish(SlotMap::of(&st));
        assert_eq!(r.route(&plan(&["SET", "bar", "1"]), &ctx(false, true)), Route::Ok);
        assert_eq!(r.route(&plan(&["SET", "foo", "1"]), &ctx(false, true)), Route::Down(DownReason::Unbound));
    }

    #[test]
    fn a_replica_serves_readonly_reads_of_its_primary() {
        let (st, primary) = two_nodes(settings(), true);
        let r = ClusterRouter::new(SlotMap::of(&st));
        let read = plan(&["GET", "bar"]);
        assert!(matches!(r.route(&read, &ctx(false, false)), Route::Moved { .. }));
        let readonly = RouteCtx { readonly: true, ..ctx(false, false) };
        assert_eq!(r.route(&read, &readonly), Route::Ok);
        let write = RouteCtx { readonly: true, ..ctx(false, true) };
        assert!(matches!(r.route(&plan(&["SET", "bar", "1"]), &write), Route::Moved { .. }));
        assert!(st.node(&primary).is_some());
    }

    #[test]
    fn the_decision_under_the_locks_is_made_again_on_the_table_as_it_is_then() {
        let (mut st, other) = two_nodes(settings(), false);
        let r = ClusterRouter::new(SlotMap::of(&st));
        let get = plan(&["GET", "bar"]);
        let slot = key_slot(b"bar");
        let c = ctx(false, false);
        let mut missing = KeyPresence::default();
        missing.missing = 1;
        let before = r.table_version();
        assert_eq!(r.route(&get, &c), Route::Ok);
        // The slot starts moving before the command has its lock, and the key leaves: the
        // version tells dispatch to ask again, and the key is asked of the target.
        st.set_slot(slot, crate::state::SetSlot::Migrating(other), 0).unwrap();
        r.publish(SlotMap::of(&st));
        assert_ne!(r.table_version(), before);
        assert_eq!(r.route_locked(&get, &c, &missing), Route::Ask { slot, addr: "10.0.0.2:7001".into() });
        assert_eq!(r.route(&get, &c), Route::CheckKeys);
        // It finishes moving before the next command has its lock: the new owner is named,
        // where a decision finished on the old `CheckKeys` served an empty slot here.
        st.set_slot(slot, crate::state::SetSlot::Node(other), 0).unwrap();
        r.publish(SlotMap::of(&st));
        assert_eq!(r.route_locked(&get, &c, &missing), Route::Moved { slot, addr: "10.0.0.2:7001".into() });
    }
}

/// Shard channels and the down-cluster rules, on a replica's view.
#[cfg(test)]
mod shard_tests {
    use hotkv_engine::command::{CommandSpec, KeySpec, key_flags};
    use hotkv_engine::plan::KeyHint;
    use hotkv_engine::slot::key_slot;
    use hotkv_engine::testkit::with_args;

    use super::*;
    use crate::nodes_conf::SavedConfig;
    use crate::state::{ClusterState, Settings};

    static KEY: [KeySpec; 1] = [KeySpec::single(1, key_flags::RO)];
    static CHANNEL: [KeySpec; 1] = [KeySpec::single(1, key_flags::NOT_KEY)];

    /// The plan of `argv`, whose argument 1 is a key, or a shard channel when `channel`.
    fn plan(argv: &[&str], channel: bool) -> Plan {
        let specs = if channel { &CHANNEL } else { &KEY };
        let spec: CommandSpec<()> = CommandSpec::new("c", -2, 0, 0, specs, "", "", "", "", ());
        let mut p = Plan::default();
        with_args(argv, |args| p.compute(&spec, hotkv_engine::cmd::LockPlan::Keys, args, 0, 16, &KeyHint::default()));
        p
    }

    /// This node is a replica of P, which serves the slot of `{p}`; Q serves every other slot
    /// but the one of `{u}`, which nobody serves (the cluster is down when `full_coverage`).
    fn router(full_coverage: bool, reads_when_down: bool, pubsubshard_when_down: bool) -> ClusterRouter {
        let (p, q, me) = (NodeId::random(), NodeId::random(), NodeId::random());
        let node = |id, flags, port| {
            let mut n = Node::new(id, flags);
            n.ip = "10.0.0.1".into();
            n.port = port;
            n
        };
        let mut primary = node(p, NodeFlags::PRIMARY, 7000);
        let mut other = node(q, NodeFlags::PRIMARY, 7001);
        let mut replica = node(me, NodeFlags::MYSELF | NodeFlags::REPLICA, 7002);
        replica.primary = Some(p);
        let (mine, unbound) = (key_slot(b"{p}"), key_slot(b"{u}"));
        assert_ne!(mine, unbound);
        primary.slots.insert(mine);
        for s in (0..SLOTS as u16).filter(|s| *s != mine && *s != unbound) {
            other.slots.insert(s);
        }
        let cfg = Settings {
            node_timeout_ms: 1000,
            require_full_coverage: full_coverage,
            allow_reads_when_down: reads_when_down,
            allow_pubsubshard_when_down: pubsubshard_when_down,
            announce_ip: String::new(),
            port: 7002,
            tls_port: 0,
            bus_port: 17002,
            hostname: String::new(),
            human_nodename: String::new(),
            client_ipv4: String::new(),
            client_ipv6: String::new(),
            preferred_endpoint: Default::default(),
            replica_validity_factor: 10,
            repl_ping_period_ms: 10_000,
            replica_no_failover: false,
            allow_replica_migration: true,
            migration_barrier: 1,
            ping_interval_ms: 0,
        };
        let saved = SavedConfig {
            nodes: vec![primary, other, replica],
            current_epoch: 0,
            last_vote_epoch: 0,
            open_slots: Vec::new(),
        };
        let st = ClusterState::from_saved(saved, cfg);
        assert_eq!(st.is_ok(), !full_coverage);
        ClusterRouter::new(SlotMap::of(&st))
    }

    fn route(r: &ClusterRouter, argv: &[&str], channel: bool, readonly: bool, write: bool) -> Route {
        r.route(&plan(argv, channel), &RouteCtx { readonly, write, ..RouteCtx::default() })
    }

    fn moved(arg: &str, port: u16) -> Route {
        let slot = key_slot(arg.as_bytes());
        Route::Moved { slot, addr: format!("10.0.0.1:{port}").into() }
    }

    #[test]
    fn a_replica_serves_its_shards_channels_without_readonly() {
        let r = router(false, false, true);
        assert_eq!(route(&r, &["SSUBSCRIBE", "{p}news"], true, false, false), Route::Ok);
        assert_eq!(route(&r, &["SPUBLISH", "{p}news"], true, false, false), Route::Ok);
        // Keys still need READONLY, as in Valkey; another shard's channel is redirected.
        assert_eq!(route(&r, &["GET", "{p}k"], false, false, false), moved("{p}k", 7000));
        assert_eq!(route(&r, &["GET", "{p}k"], false, true, false), Route::Ok);
        assert_eq!(route(&r, &["SPUBLISH", "{q}news"], true, false, false), moved("{q}news", 7001));
        assert_eq!(route(&r, &["SPUBLISH", "{u}news"], true, false, false), Route::Down(DownReason::Unbound));
    }

    #[test]
    fn shard_channels_follow_allow_pubsubshard_when_down() {
        // Down, with the defaults: reads refused, sharded pub/sub served.
        let r = router(true, false, true);
        assert_eq!(route(&r, &["SPUBLISH", "{p}news"], true, false, false), Route::Ok);
        assert_eq!(route(&r, &["SPUBLISH", "{q}news"], true, false, false), moved("{q}news", 7001));
        assert_eq!(route(&r, &["GET", "{p}k"], false, true, false), Route::Down(DownReason::Down));
        // A slot nobody serves is reported as such first, as Valkey's getNodeByQuery does.
        assert_eq!(route(&r, &["SPUBLISH", "{u}news"], true, false, false), Route::Down(DownReason::Unbound));
        assert_eq!(route(&r, &["GET", "{u}k"], false, false, false), Route::Down(DownReason::Unbound));
        let r = router(true, true, false);
        assert_eq!(route(&r, &["SSUBSCRIBE", "{p}news"], true, false, false), Route::Down(DownReason::Down));
        assert_eq!(route(&r, &["GET", "{p}k"], false, true, false), Route::Ok);
        assert_eq!(route(&r, &["SET", "{p}k"], false, true, true), Route::Down(DownReason::ReadOnly));
    }
}
