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
use crate::state::ClusterState;

/// A node as redirects name it.
#[derive(Debug)]
struct Endpoint {
    id: NodeId,
    /// `host:port` for plain clients.
    plain: Arc<str>,
    /// `host:port` for TLS clients.
    tls: Arc<str>,
}

impl Endpoint {
    fn of(n: &Node) -> Endpoint {
        // An unknown address is `?`, as Valkey prints it.
        let host = if n.ip.is_empty() { "?" } else { n.ip.as_str() };
        Endpoint {
            id: n.id,
            plain: format!("{host}:{}", n.client_port(false)).into(),
            tls: format!("{host}:{}", n.client_port(true)).into(),
        }
    }

    fn addr(&self, tls: bool) -> Arc<str> {
        if tls { self.tls.clone() } else { self.plain.clone() }
    }
}

/// Who serves every slot, as of one moment.
pub struct SlotMap {
    owners: Vec<Option<Arc<Endpoint>>>,
    me: NodeId,
    /// The primary whose slots this replica may serve to READONLY clients.
    my_primary: Option<NodeId>,
    ok: bool,
    allow_reads_when_down: bool,
    /// Slots migrating away from here, with their target.
    migrating: HashMap<u16, Arc<Endpoint>>,
    /// Slots being imported here.
    importing: HashMap<u16, NodeId>,
}

impl SlotMap {
    /// The map of `st` now.
    pub fn of(st: &ClusterState) -> SlotMap {
        let mut endpoints: HashMap<NodeId, Arc<Endpoint>> = HashMap::new();
        let mut endpoint = |n: &Node| endpoints.entry(n.id).or_insert_with(|| Arc::new(Endpoint::of(n))).clone();
        let owners = (0..SLOTS as u16).map(|s| st.owner(s).map(&mut endpoint)).collect();
        let migrating =
            st.migrating().iter().filter_map(|(slot, to)| st.node(to).map(|n| (*slot, endpoint(n)))).collect();
        let me = st.myself();
        SlotMap {
            owners,
            me: me.id,
            my_primary: if me.flags.has(NodeFlags::REPLICA) { me.primary } else { None },
            ok: st.is_ok(),
            allow_reads_when_down: st.settings().allow_reads_when_down,
            migrating,
            importing: st.importing().clone(),
        }
    }
}

/// The router the server wires in for cluster mode.
pub struct ClusterRouter {
    map: ArcSwap<SlotMap>,
}

impl ClusterRouter {
    /// A router over `map`.
    pub fn new(map: SlotMap) -> ClusterRouter {
        ClusterRouter { map: ArcSwap::from_pointee(map) }
    }

    /// Publishes a new map; calls routed from now on see it.
    pub fn publish(&self, map: SlotMap) {
        self.map.store(Arc::new(map));
    }
}

impl SlotRouter for ClusterRouter {
    fn route(&self, plan: &Plan, ctx: &RouteCtx) -> Route {
        if plan.is_cross_slot() {
            return Route::CrossSlot;
        }
        let Some(slot) = plan.slot() else { return Route::Ok };
        let map = self.map.load();
        if !map.ok {
            if !map.allow_reads_when_down {
                return Route::Down(DownReason::Down);
            }
            if ctx.write {
                return Route::Down(DownReason::ReadOnly);
            }
        }
        let Some(owner) = &map.owners[usize::from(slot)] else { return Route::Down(DownReason::Unbound) };
        if owner.id == map.me {
            return if map.migrating.contains_key(&slot) { Route::CheckKeys } else { Route::Ok };
        }
        if map.importing.contains_key(&slot) && ctx.asking {
            return Route::CheckKeys;
        }
        // A replica serves its primary's slots to clients that asked for READONLY reads.
        if ctx.readonly && !ctx.write && map.my_primary == Some(owner.id) {
            return Route::Ok;
        }
        Route::Moved { slot, addr: owner.addr(ctx.tls) }
    }

    fn route_locked(&self, plan: &Plan, ctx: &RouteCtx, keys: &KeyPresence) -> Route {
        let Some(slot) = plan.slot() else { return Route::Ok };
        let map = self.map.load();
        // Valkey's getNodeByQuery: some keys here and some not, mid-migration: try again
        // later; none here on the source: ask the target; on the target, with ASKING, serve
        // unless a multi-key request is incomplete.
        if let Some(target) = map.migrating.get(&slot) {
            if keys.missing > 0 && keys.present > 0 {
                return Route::TryAgain;
            }
            if keys.missing > 0 {
                return Route::Ask { slot, addr: target.addr(ctx.tls) };
            }
            return Route::Ok;
        }
        if map.importing.contains_key(&slot) && keys.several && keys.missing > 0 {
            return Route::TryAgain;
        }
        Route::Ok
    }
}
