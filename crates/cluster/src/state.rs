//! The cluster as one node sees it, and the rules that change it: Redis Cluster's gossip,
//! failure detection, epochs and slot ownership, with no I/O. The bus feeds it frames and
//! ticks and carries out what it returns; CLUSTER commands call it directly. Everything here
//! runs under one mutex for microseconds at a time; the command path never takes it (it reads
//! a snapshot of slot ownership).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;

use tracing::{info, warn};

use crate::node::{ClientKind, Node, NodeFlags, NodeId};
use crate::nodes_conf::{OpenSlot, SavedConfig};
use crate::slots::{SLOTS, SlotSet};
use crate::wire::{Body, CertSummary, Ext, Extensions, Gossip, GossipSection, Header, Kind, Message};

#[path = "failover.rs"]
mod failover;

use failover::{Election, Join, Manual};
pub use failover::{FailoverMode, NoReplication, PauseChange, ReplicationHooks, Target};

/// Settings the cluster state acts on (the server fills them from its directives).
#[derive(Clone, Debug)]
pub struct Settings {
    /// `cluster-node-timeout`, ms.
    pub node_timeout_ms: i64,
    /// `cluster-require-full-coverage`.
    pub require_full_coverage: bool,
    /// `cluster-allow-reads-when-down`.
    pub allow_reads_when_down: bool,
    /// `cluster-allow-pubsubshard-when-down`.
    pub allow_pubsubshard_when_down: bool,
    /// The address this node announces (`cluster-announce-ip`; empty: learnt from peers).
    pub announce_ip: String,
    /// Plain client port announced.
    pub port: u16,
    /// TLS client port announced.
    pub tls_port: u16,
    /// Bus port announced.
    pub bus_port: u16,
    /// `cluster-announce-hostname`.
    pub hostname: String,
    /// `cluster-announce-human-nodename`.
    pub human_nodename: String,
    /// `cluster-announce-client-ipv4` (empty: IPv4 clients are told `ip`).
    pub client_ipv4: String,
    /// `cluster-announce-client-ipv6` (empty: IPv6 clients are told `ip`).
    pub client_ipv6: String,
    /// `cluster-preferred-endpoint-type`: what redirects and CLUSTER SLOTS name a node by.
    pub preferred_endpoint: Endpoint,
    /// `cluster-replica-validity-factor`: a replica whose link to its failed primary has been
    /// down for more than this many node timeouts (plus one `repl-ping-replica-period`) does
    /// not fail over on its own; 0: it always may.
    pub replica_validity_factor: u32,
    /// `repl-ping-replica-period`, ms: the validity check allows for one period of silence.
    pub repl_ping_period_ms: i64,
    /// `cluster-replica-no-failover`: this replica never starts an automatic failover (a
    /// manual one still works).
    pub replica_no_failover: bool,
    /// `cluster-allow-replica-migration`: a replica may move to a primary left without any.
    pub allow_replica_migration: bool,
    /// `cluster-migration-barrier`: the working replicas a primary keeps before one of them
    /// may migrate.
    pub migration_barrier: usize,
    /// `cluster-ping-interval` (hidden, for tests): how long a node may go unpinged; 0 for
    /// half the node timeout.
    pub ping_interval_ms: i64,
}

impl Settings {
    /// How long a node not heard from waits for its next PING.
    fn ping_interval(&self) -> i64 {
        if self.ping_interval_ms > 0 { self.ping_interval_ms } else { (self.node_timeout_ms.max(1) / 2).max(1) }
    }
}

/// `cluster-preferred-endpoint-type`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Endpoint {
    /// The node's address.
    #[default]
    Ip,
    /// Its `cluster-announce-hostname` (`?` when it has none).
    Hostname,
    /// Nothing: clients reach the slot at the address they already used.
    Unknown,
}

impl Endpoint {
    /// What clients are told to reach `node` at, as Valkey's `clusterNodePreferredEndpoint`:
    /// its address for the client's family (`?` while unknown, see [`Node::client_ip`]), its
    /// host name (`?` without one), or, for `unknown-endpoint`, an empty host (CLUSTER SLOTS
    /// sends a null there).
    pub fn of(self, node: &Node, ipv6_client: bool) -> &str {
        match self {
            Endpoint::Ip => match node.client_ip(ipv6_client) {
                "" => "?",
                ip => ip,
            },
            Endpoint::Hostname if node.hostname.is_empty() => "?",
            Endpoint::Hostname => &node.hostname,
            Endpoint::Unknown => "",
        }
    }
}

/// Why a CLUSTER command was refused; the text is Valkey's reply without `ERR `.
pub type CmdError = String;

/// What one node knows of another, beyond its [`Node`] record.
#[derive(Clone, Debug)]
struct Entry {
    node: Node,
    /// Primaries that reported it failing, with when (unix ms).
    fail_reports: Vec<(NodeId, i64)>,
    /// When it was marked FAIL.
    fail_time: i64,
    /// The certificate it last said it serves.
    cert: CertSummary,
    /// When any frame from it last arrived (unix ms): a node that talks is not failing, even
    /// while a PONG is late (Valkey's `data_received`).
    heard_ms: i64,
    /// When this node last voted for a replica of it, a primary (unix ms; Valkey's
    /// `voted_time`).
    voted_ms: i64,
    /// Since when this primary has had no working replica though it should have one (unix ms,
    /// 0: it has one; Valkey's `orphaned_time`).
    orphaned_ms: i64,
    /// Which outbound link `node.link_connected` speaks for (the bus's link serial, 0: none).
    /// A link that closes after another one to the same node came up must not mark the node
    /// disconnected: the bus never dials a node it has a link to, so it would stay so.
    link: u64,
    /// The slots its own frames last claimed (not what local SETSLOTs made of it): an import
    /// from it of a slot it was heard holding is confirmed from the start.
    claimed: SlotSet,
}

impl Entry {
    fn new(node: Node) -> Entry {
        Entry {
            node,
            fail_reports: Vec::new(),
            fail_time: 0,
            cert: CertSummary::default(),
            heard_ms: 0,
            voted_ms: 0,
            orphaned_ms: 0,
            link: 0,
            claimed: SlotSet::new(),
        }
    }
}

/// What a frame asks the bus to do.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Send on the link the frame came from, in order (a PONG, then an UPDATE for a sender
    /// whose slot claims are stale).
    pub reply: Vec<Message>,
    /// Close that link (the peer is not who the link was opened for, or was forgotten).
    pub close: bool,
    /// Send to every connected node.
    pub broadcast: Vec<Message>,
    /// An outbound link to this node id should now be known by another id (a handshake
    /// node whose real id arrived).
    pub renamed: Option<(NodeId, NodeId)>,
    /// A message another node published, for this node's subscribers only: it is never sent
    /// on (the publisher sent it to every node that must see it).
    pub publish: Option<Published>,
}

/// A PUBLISH or SPUBLISH that arrived over the bus.
#[derive(Debug, PartialEq, Eq)]
pub struct Published {
    /// Channel.
    pub channel: Vec<u8>,
    /// Message.
    pub message: Vec<u8>,
    /// A shard channel's (SPUBLISH).
    pub shard: bool,
}

/// The state of the cluster as this node knows it.
pub struct ClusterState {
    me: NodeId,
    nodes: HashMap<NodeId, Entry>,
    /// The owner of each slot. `owners[s] == Some(id)` exactly when `s` is in that node's
    /// `slots`: [`ClusterState::set_owner`] changes both, and the per-tick and per-frame
    /// checks below count on it to read the bitmaps instead of walking 16384 owners.
    owners: Vec<Option<NodeId>>,
    migrating: HashMap<u16, NodeId>,
    importing: HashMap<u16, NodeId>,
    /// Imports opened by SETSLOT IMPORTING whose source has not been heard claiming the slot
    /// since: only a source seen holding the slot can be seen giving it up. A frame the source
    /// sent before it took the slot (redis-cli's fix makes the node with the keys the owner
    /// with ADDSLOTS, then has the others import from it at once) may be read here after the
    /// SETSLOT, the bus running on a thread of its own; it does not claim the slot, and taking
    /// that for the end of the import made this node take the slot back from its new owner.
    unconfirmed_imports: HashSet<u16>,
    current_epoch: u64,
    last_vote_epoch: u64,
    ok: bool,
    cfg: Settings,
    /// The node table changed since [`ClusterState::take_view_changed`] last looked.
    dirty: bool,
    /// The node table changed since the last save ([`ClusterState::take_dirty`]): the bus
    /// saves a moment after a change, not at once, and routing must not be rebuilt on every
    /// turn until then.
    unsaved: bool,
    /// When the bus first saw the oldest change not yet saved (ms; 0 for none), so that it
    /// saves a moment later (see [`ClusterState::unsaved_for`]).
    unsaved_since: i64,
    /// Something the routing snapshot is built from changed that the saved table does not
    /// show (cluster_state), or a slot changed owner (see [`ClusterState::take_view_changed`]).
    view_changed: bool,
    /// Messages sent and received, per type, for CLUSTER INFO.
    sent: [u64; 10],
    received: [u64; 10],
    /// Links closed for passing `cluster-link-sendbuf-limit`.
    links_over_limit: u64,
    /// Slots logged as migrated to another shard, for the tests.
    #[cfg(test)]
    pub(crate) migrations_logged: usize,
    /// This node's certificate, gossiped in every header.
    cert: CertSummary,
    /// Nodes forgotten (CLUSTER FORGET, here or on a node that told us), with when they may be
    /// added back (unix ms): gossip does not re-add them meanwhile, and every PING and PONG
    /// tells the receiver to forget them too (Valkey's nodes blacklist).
    forgotten: HashMap<NodeId, i64>,
    /// When the next once-a-second ping to the longest-silent node is due (unix ms).
    next_ping_ms: i64,
    /// Tell every node about this one now (see [`ClusterState::take_announcements`]).
    announce: bool,
    /// The node's replication, as the server wired it (offsets, data age, the write pause).
    repl: Arc<dyn ReplicationHooks>,
    /// The election this replica runs or has scheduled.
    election: Election,
    /// A manual failover under way, on the replica that asked for it or on its primary.
    manual: Manual,
    /// Messages the bus is to send, besides replies and pings (see
    /// [`ClusterState::take_outgoing`]).
    outbox: Vec<(Target, Message)>,
    /// A change of the client write pause for the bus to make (see
    /// [`ClusterState::take_pause_change`]).
    pause_change: Option<PauseChange>,
    /// Slots this primary lost to another node's claim while it may still hold keys in them,
    /// for the bus to empty (see [`ClusterState::take_dirty_slots`]).
    dirty_slots: Vec<u16>,
    /// The time of the last tick or frame (unix ms): the clock of checks made without one.
    clock_ms: i64,
    /// Until when (unix ms) a primary restarted with slots stays down, so that the cluster may
    /// tell it it was failed over before it accepts a write (Valkey's
    /// `CLUSTER_WRITABLE_DELAY`); `i64::MAX` until its first tick starts the delay.
    writable_at_ms: i64,
    /// State of the pseudo-random election delays.
    rng: u64,
}

/// What CLUSTER SETSLOT does to a slot.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetSlot {
    /// MIGRATING to the node.
    Migrating(NodeId),
    /// IMPORTING from the node.
    Importing(NodeId),
    /// STABLE: no longer moving.
    Stable,
    /// NODE: the node owns it now.
    Node(NodeId),
}

/// What [`ClusterState::claim_slots`] knows about a claim beyond its slots.
#[derive(Clone, Copy)]
struct Claim {
    /// The sender was in this node's shard before this frame.
    same_shard: bool,
    /// The primary the sender was a replica of until this frame promoted it.
    took_over: Option<NodeId>,
}

/// How long a forgotten node stays out of the table (Valkey's `cluster-blacklist-ttl`): the
/// time an operator has to forget it on every node before gossip would bring it back.
pub const FORGET_TTL_MS: i64 = 60_000;

/// Message type names as CLUSTER INFO prints them.
const KIND_NAMES: [&str; 10] =
    ["ping", "pong", "meet", "fail", "publish", "auth-req", "auth-ack", "update", "mfstart", "publishshard"];

impl ClusterState {
    /// A node on its first start: a fresh id, no slots, alone.
    pub fn fresh(cfg: Settings) -> ClusterState {
        let me = Node::new(NodeId::random(), NodeFlags::MYSELF | NodeFlags::PRIMARY);
        let saved = SavedConfig { nodes: vec![me], current_epoch: 0, last_vote_epoch: 0, open_slots: Vec::new() };
        let mut s = ClusterState::from_saved(saved, cfg);
        s.dirty = true;
        s
    }

    /// A node restarted from its `nodes.conf`.
    pub fn from_saved(saved: SavedConfig, cfg: Settings) -> ClusterState {
        let me =
            saved.nodes.iter().find(|n| n.flags.has(NodeFlags::MYSELF)).map(|n| n.id).unwrap_or_else(NodeId::random);
        let mut s = ClusterState {
            me,
            nodes: HashMap::new(),
            owners: vec![None; SLOTS],
            migrating: HashMap::new(),
            importing: HashMap::new(),
            unconfirmed_imports: HashSet::new(),
            current_epoch: saved.current_epoch,
            last_vote_epoch: saved.last_vote_epoch,
            ok: false,
            cfg,
            dirty: false,
            unsaved: false,
            unsaved_since: 0,
            view_changed: true,
            sent: [0; 10],
            received: [0; 10],
            links_over_limit: 0,
            #[cfg(test)]
            migrations_logged: 0,
            cert: CertSummary::default(),
            announce: false,
            forgotten: HashMap::new(),
            next_ping_ms: 0,
            repl: Arc::new(NoReplication),
            election: Election::default(),
            manual: Manual::default(),
            outbox: Vec::new(),
            pause_change: None,
            dirty_slots: Vec::new(),
            clock_ms: 0,
            writable_at_ms: 0,
            rng: failover::seed(&me),
        };
        for open in &saved.open_slots {
            match *open {
                OpenSlot::Migrating(slot, to) => s.migrating.insert(slot, to),
                OpenSlot::Importing(slot, from) => s.importing.insert(slot, from),
            };
        }
        for mut node in saved.nodes {
            node.link_connected = false;
            node.ping_sent_ms = 0;
            for slot in node.slots.iter() {
                // A file that gives a slot to two nodes: the last one listed keeps it.
                if let Some(prev) = s.owners[usize::from(slot)].and_then(|p| s.nodes.get_mut(&p)) {
                    prev.node.slots.remove(slot);
                }
                s.owners[usize::from(slot)] = Some(node.id);
            }
            s.nodes.insert(node.id, Entry::new(node));
        }
        s.apply_settings_to_me();
        s.update_state();
        s
    }

    /// A node restarted from its file: when it is a primary with slots in a cluster, it may
    /// have been failed over meanwhile, so it stays down (refusing writes) until two seconds
    /// after its first tick, time for the other nodes to tell it (Valkey's
    /// `CLUSTER_WRITABLE_DELAY`).
    pub fn hold_until_rejoined(&mut self) {
        let me = self.myself();
        if me.is_primary() && !me.slots.is_empty() && self.nodes.len() > 1 {
            self.writable_at_ms = i64::MAX;
            self.ok = false;
            self.view_changed = true;
        }
    }

    /// New settings (CONFIG SET of an announce directive or the node timeout).
    pub fn set_settings(&mut self, cfg: Settings) {
        self.cfg = cfg;
        self.apply_settings_to_me();
        self.update_state();
        self.dirty = true;
    }

    /// The settings in force.
    pub fn settings(&self) -> &Settings {
        &self.cfg
    }

    /// The certificate this node now serves (after a TLS load or reload).
    pub fn set_cert(&mut self, cert: CertSummary) {
        self.cert = cert;
    }

    fn apply_settings_to_me(&mut self) {
        let cfg = self.cfg.clone();
        let me = self.myself_mut();
        if !cfg.announce_ip.is_empty() {
            me.ip = cfg.announce_ip.clone();
        }
        me.port = cfg.port;
        me.tls_port = cfg.tls_port;
        me.bus_port = cfg.bus_port;
        me.hostname = cfg.hostname.clone();
        me.human_nodename = cfg.human_nodename.clone();
        me.client_ipv4 = cfg.client_ipv4.clone();
        me.client_ipv6 = cfg.client_ipv6.clone();
        // Gossiped, so that the other replicas of our primary leave us out of their ranks.
        me.flags.set(NodeFlags::NOFAILOVER, cfg.replica_no_failover);
    }

    /// This node's id.
    pub fn myself_id(&self) -> NodeId {
        self.me
    }

    /// This node's record.
    pub fn myself(&self) -> &Node {
        &self.nodes[&self.me].node
    }

    fn myself_mut(&mut self) -> &mut Node {
        let me = self.me;
        &mut self.nodes.get_mut(&me).expect("myself is always in the table").node
    }

    /// A node's record.
    pub fn node(&self, id: &NodeId) -> Option<&Node> {
        self.nodes.get(id).map(|e| &e.node)
    }

    /// Every node, this one first, then by id.
    pub fn nodes(&self) -> Vec<&Node> {
        let mut v: Vec<&Node> = self.nodes.values().map(|e| &e.node).collect();
        v.sort_by_key(|n| (!n.flags.has(NodeFlags::MYSELF), n.id));
        v
    }

    /// The owner of `slot`.
    pub fn owner(&self, slot: u16) -> Option<&Node> {
        self.owners.get(usize::from(slot)).copied().flatten().and_then(|id| self.node(&id))
    }

    /// Whether the cluster is ok as this node sees it.
    pub fn is_ok(&self) -> bool {
        self.ok
    }

    /// The current epoch.
    pub fn current_epoch(&self) -> u64 {
        self.current_epoch
    }

    /// The last epoch this node voted in.
    pub fn last_vote_epoch(&self) -> u64 {
        self.last_vote_epoch
    }

    /// Whether the table changed since [`ClusterState::take_dirty`] was last called.
    pub fn take_dirty(&mut self) -> bool {
        self.unsaved_since = 0;
        // A save may come first (the cron saves at once when an epoch moved, from another
        // thread than the link that made the change): the routing snapshot must still be
        // rebuilt for what it saved. Losing that left an import's end unrouted: CLUSTER NODES
        // gave the slot to this node, and its clients got MOVED to the old owner for good.
        self.view_changed |= self.dirty;
        std::mem::take(&mut self.dirty) | std::mem::take(&mut self.unsaved)
    }

    /// How long (ms) the table has had changes not yet saved, counted from the first call
    /// that saw them (the second value says this call was it); `None` when there are none.
    pub fn unsaved_for(&mut self, now: i64) -> Option<(i64, bool)> {
        if !self.is_dirty() {
            self.unsaved_since = 0;
            return None;
        }
        let first = self.unsaved_since == 0;
        if first {
            self.unsaved_since = now;
        }
        Some((now - self.unsaved_since, first))
    }

    /// How long (ms) the oldest unsaved change has waited, once [`ClusterState::unsaved_for`]
    /// has seen it.
    pub fn unsaved_age(&self, now: i64) -> Option<i64> {
        (self.unsaved_since != 0).then(|| now - self.unsaved_since)
    }

    /// Whether the table changed since [`ClusterState::take_dirty`] was last called, without
    /// taking it.
    pub fn is_dirty(&self) -> bool {
        self.dirty || self.unsaved
    }

    /// Whether what the command path's routing snapshot is built from (slot owners, their
    /// addresses, this node's role, cluster_state, the settings) may have changed since this
    /// was last called; call it before [`ClusterState::take_dirty`], since any change of the
    /// table counts. Rebuilding the snapshot walks all 16384 slots, so the bus does it only
    /// then, not after every PING and PONG.
    pub fn take_view_changed(&mut self) -> bool {
        let changed = std::mem::take(&mut self.dirty);
        self.unsaved |= changed;
        std::mem::take(&mut self.view_changed) || changed
    }

    /// Whether [`ClusterState::take_view_changed`] would report a change, without taking it.
    pub(crate) fn view_change_pending(&self) -> bool {
        self.view_changed || self.dirty
    }

    /// What `nodes.conf` should hold now.
    pub fn saved(&self) -> SavedConfig {
        let mut open_slots: Vec<OpenSlot> = self
            .migrating
            .iter()
            .map(|(s, to)| OpenSlot::Migrating(*s, *to))
            .chain(self.importing.iter().map(|(s, from)| OpenSlot::Importing(*s, *from)))
            .collect();
        open_slots.sort_by_key(|o| match o {
            OpenSlot::Migrating(s, _) => (*s, 0),
            OpenSlot::Importing(s, _) => (*s, 1),
        });
        SavedConfig {
            nodes: self.nodes().into_iter().cloned().collect(),
            current_epoch: self.current_epoch,
            last_vote_epoch: self.last_vote_epoch,
            open_slots,
        }
    }

    // ---- the bus's side -------------------------------------------------------------------

    /// Nodes this node should hold an outbound link to: every other node with an address.
    pub fn link_targets(&self) -> Vec<(NodeId, String, u16)> {
        self.nodes
            .values()
            .filter(|e| e.node.id != self.me && !e.node.flags.has(NodeFlags::NOADDR) && e.node.bus_port != 0)
            .map(|e| (e.node.id, e.node.ip.clone(), e.node.bus_port))
            .collect()
    }

    /// Outbound link `link` (a serial, never 0) to `id` came up: the first frame to send on it
    /// (MEET for a node met by CLUSTER MEET, else PING).
    pub fn link_up(&mut self, id: &NodeId, link: u64, now: i64) -> Option<Message> {
        let e = self.nodes.get_mut(id)?;
        e.node.link_connected = true;
        e.link = link;
        let kind = if e.node.flags.has(NodeFlags::MEET) { Kind::Meet } else { Kind::Ping };
        // A ping still unanswered keeps its time: redialling must not restart the failure
        // clock, or a node whose links are accepted then dropped would never be suspected
        // (Valkey's clusterLinkConnectHandler keeps `old_ping_sent`).
        if e.node.ping_sent_ms == 0 {
            e.node.ping_sent_ms = now;
        }
        Some(self.gossip_message(kind, Some(*id), now))
    }

    /// Nodes whose outbound link is up but silent: a ping unanswered for over half the node
    /// timeout and nothing heard from them for as long. The bus closes and redials those
    /// links (see `Bus::close_silent`).
    pub fn silent_links(&self, now: i64) -> Vec<NodeId> {
        let half = self.cfg.node_timeout_ms.max(1) / 2;
        self.nodes
            .values()
            .filter(|e| e.node.link_connected && e.node.ping_sent_ms != 0)
            .filter(|e| now - e.node.ping_sent_ms > half && now - e.heard_ms > half)
            .map(|e| e.node.id)
            .collect()
    }

    /// Outbound link `link` to `id` closed or failed; a newer link to `id` stays counted.
    pub fn link_down(&mut self, id: &NodeId, link: u64) {
        if let Some(e) = self.nodes.get_mut(id).filter(|e| e.link == link) {
            e.node.link_connected = false;
            e.link = 0;
        }
    }

    /// The header of a PUBLISH (`Kind::Publish`) or SPUBLISH (`Kind::PublishShard`) this node
    /// sends, and in `targets` the nodes to send it to, as Valkey's `clusterPropagatePublish`:
    /// every other node for PUBLISH; for SPUBLISH the other nodes of this node's shard (a
    /// primary's replicas; a replica's primary and sibling replicas). Nodes still in a handshake
    /// do not know this node yet and are left out. `None` when there is no one to send to.
    pub fn publish_header(&mut self, kind: Kind, targets: &mut Vec<NodeId>) -> Option<Header> {
        let shard = self.shard_of(self.myself());
        let mut connected = 0;
        for e in self.nodes.values() {
            let n = &e.node;
            if n.id == self.me || n.flags.has(NodeFlags::HANDSHAKE) {
                continue;
            }
            if kind == Kind::PublishShard && self.shard_of(n) != shard {
                continue;
            }
            targets.push(n.id);
            connected += u64::from(n.link_connected);
        }
        if targets.is_empty() {
            return None;
        }
        // Counted per node sent to, as Valkey counts messages per link.
        self.sent[kind as usize] += connected;
        Some(self.header())
    }

    /// The shard a node belongs to, named by its primary.
    fn shard_of(&self, n: &Node) -> NodeId {
        match n.primary {
            Some(p) if n.flags.has(NodeFlags::REPLICA) => p,
            _ => n.id,
        }
    }

    /// Builds a message of `kind` with this node's header.
    pub fn message(&mut self, kind: Kind, body: Body) -> Message {
        self.sent[kind as usize] += 1;
        Message { kind, header: self.header(), body }
    }

    fn header(&self) -> Header {
        let me = self.myself();
        // A replica claims its primary's slots and config epoch, so that everyone can tell
        // whose view is newer.
        let (slots, config_epoch) = match me.primary.and_then(|p| self.node(&p)) {
            Some(p) if me.flags.has(NodeFlags::REPLICA) => (p.slots.clone(), p.config_epoch),
            _ => (me.slots.clone(), me.config_epoch),
        };
        Header {
            sender: self.me,
            current_epoch: self.current_epoch,
            config_epoch,
            repl_offset: self.repl.offset(),
            flags: me.flags.0 & !(NodeFlags::MYSELF | NodeFlags::MIGRATE_TO),
            state_ok: self.ok,
            msg_flags: self.msg_flags(),
            primary: me.primary,
            ip: self.cfg.announce_ip.clone(),
            port: me.port,
            tls_port: me.tls_port,
            bus_port: me.bus_port,
            hostname: me.hostname.clone(),
            human_nodename: me.human_nodename.clone(),
            slots,
            cert: self.cert.clone(),
        }
    }

    /// A PING, PONG or MEET with gossip about every node this one suspects, plus a few other
    /// nodes picked at random, as Valkey's `clusterSendPing` picks them. The pick must be
    /// random: taking the nodes heard from longest ago, which each ping here did before, could
    /// leave a node out of every ping of a node that hears it often, and with ten nodes some
    /// learned of a new one 20-28 s late (Valkey's cluster tests wait 50 s for ten nodes).
    fn gossip_message(&mut self, kind: Kind, to: Option<NodeId>, now: i64) -> Message {
        let mut seed = self.random() | 1;
        // Sized once and shuffled in place: one allocation whatever the number of nodes.
        let mut candidates: Vec<&Entry> = Vec::with_capacity(self.nodes.len());
        candidates.extend(
            self.nodes
                .values()
                .filter(|e| e.node.id != self.me && Some(e.node.id) != to && !e.node.flags.has(NodeFlags::HANDSHAKE))
                .filter(|e| !e.node.flags.has(NodeFlags::NOADDR)),
        );
        // Suspected nodes first, all of them: their failure reports travel this way.
        candidates.sort_unstable_by_key(|e| !e.node.flags.has(NodeFlags::PFAIL));
        let suspected = candidates.iter().take_while(|e| e.node.flags.has(NodeFlags::PFAIL)).count();
        // Redis gossips about a tenth of the nodes, at least three; small clusters hear about
        // everyone every time.
        let wanted = ((self.nodes.len() / 10).max(3) + suspected).min(candidates.len());
        for i in suspected..wanted {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let j = i + (seed % (candidates.len() - i) as u64) as usize;
            candidates.swap(i, j);
        }
        let mut entries = GossipSection::with_capacity(wanted);
        for e in candidates.into_iter().take(wanted) {
            entries.push(&Gossip {
                id: e.node.id,
                ping_sent_ms: e.node.ping_sent_ms,
                pong_received_ms: e.node.pong_received_ms,
                ip: &e.node.ip,
                port: e.node.port,
                tls_port: e.node.tls_port,
                bus_port: e.node.bus_port,
                flags: e.node.flags.0,
            });
        }
        let ext = self.extensions(now);
        self.message(kind, Body::Gossip { entries, ext })
    }

    /// The ping extensions this node sends: its shard, the client addresses it announces,
    /// then every node it forgot and has not yet re-admitted, with the seconds left (Valkey's
    /// `writePingExtensions`).
    fn extensions(&self, now: i64) -> Extensions {
        let mut ext = Extensions::default();
        let me = self.myself();
        ext.push(&Ext::ShardId(me.shard_id));
        if !me.client_ipv4.is_empty() {
            ext.push(&Ext::ClientIpv4(&me.client_ipv4));
        }
        if !me.client_ipv6.is_empty() {
            ext.push(&Ext::ClientIpv6(&me.client_ipv6));
        }
        for (id, until) in self.forgotten.iter().filter(|(_, until)| **until > now) {
            ext.push(&Ext::ForgottenNode { id: *id, ttl_secs: ((until - now) / 1000) as u64 });
        }
        ext
    }

    /// The periodic work (every 100 ms): which nodes to ping now, and failure detection.
    /// Returns the PINGs to send on outbound links.
    pub fn tick(&mut self, now: i64) -> Vec<(NodeId, Message)> {
        self.clock_ms = now;
        if self.writable_at_ms == i64::MAX {
            self.writable_at_ms = now + WRITABLE_DELAY_MS;
        }
        let timeout = self.cfg.node_timeout_ms.max(1);
        let mut out = Vec::new();
        let ids: Vec<NodeId> = self.nodes.keys().copied().filter(|id| *id != self.me).collect();
        for id in ids {
            let e = &self.nodes[&id];
            let n = &e.node;
            // A handshake that did not complete in time is dropped (Valkey: node timeout,
            // at least a second).
            if n.flags.has(NodeFlags::HANDSHAKE) && now - n.pong_received_ms > timeout.max(1000) {
                self.nodes.remove(&id);
                continue;
            }
            if !n.link_connected {
                // No link: count as a ping sent now, so that a node that never answers is
                // suspected after the timeout like one that stopped answering.
                if n.ping_sent_ms == 0
                    && let Some(e) = self.nodes.get_mut(&id)
                {
                    e.node.ping_sent_ms = now;
                }
                continue;
            }
            // As Valkey's clusterCron: a node not heard from for half the node timeout is
            // pinged now (one ping outstanding at a time), so that a live node always answers
            // before it would be suspected; the others hear from the once-a-second ping below.
            if n.ping_sent_ms == 0 && now - n.pong_received_ms > self.cfg.ping_interval() {
                out.push(self.ping(id, now));
                continue;
            }
            // A primary in a manual failover pings the replica that asked at every tick: each
            // ping carries its offset, final once its writes are paused.
            if self.paused_for() == Some(id) {
                let msg = self.gossip_message(Kind::Ping, Some(id), now);
                if let Some(e) = self.nodes.get_mut(&id)
                    && e.node.ping_sent_ms == 0
                {
                    e.node.ping_sent_ms = now;
                }
                out.push((id, msg));
            }
        }
        // Once a second, the node heard from longest ago among those with a link and no ping
        // outstanding (Valkey takes the oldest of five random ones; here all are looked at,
        // which also spreads the pings evenly).
        if now >= self.next_ping_ms {
            self.next_ping_ms = now + 1000;
            let oldest = self
                .nodes
                .values()
                .filter(|e| e.node.id != self.me && e.node.link_connected && e.node.ping_sent_ms == 0)
                .filter(|e| !e.node.flags.has(NodeFlags::HANDSHAKE))
                .min_by_key(|e| e.node.pong_received_ms)
                .map(|e| e.node.id);
            if let Some(id) = oldest {
                out.push(self.ping(id, now));
            }
        }
        self.forgotten.retain(|_, until| *until > now);
        self.detect_failures(now);
        self.expire_fail_reports(now);
        self.failover_tick(now);
        self.update_state();
        out
    }

    /// How long the bus may wait before the next [`ClusterState::tick`] (ms, 100 to 1000):
    /// until the next ping or failure check is due. Valkey's cron runs at 10 Hz; an idle node
    /// here then wakes about once a second instead of ten times, while a node that is joining,
    /// dialling, or suspects a node still ticks every 100 ms.
    pub fn next_tick_in(&self, now: i64) -> i64 {
        let timeout = self.cfg.node_timeout_ms.max(1);
        if self.failover_pending() || now < self.writable_at_ms {
            return TICK_MIN_MS;
        }
        let mut due = self.next_ping_ms;
        for e in self.nodes.values().filter(|e| e.node.id != self.me) {
            let n = &e.node;
            if !n.link_connected || n.flags.0 & (NodeFlags::HANDSHAKE | NodeFlags::PFAIL | NodeFlags::MEET) != 0 {
                return TICK_MIN_MS;
            }
            due = due.min(if n.ping_sent_ms == 0 {
                n.pong_received_ms + self.cfg.ping_interval() + 1
            } else {
                n.ping_sent_ms.max(e.heard_ms) + timeout + 1
            });
        }
        (due - now).clamp(TICK_MIN_MS, TICK_MAX_MS)
    }

    /// A PING to `id`, noted as outstanding.
    fn ping(&mut self, id: NodeId, now: i64) -> (NodeId, Message) {
        let msg = self.gossip_message(Kind::Ping, Some(id), now);
        if let Some(e) = self.nodes.get_mut(&id) {
            e.node.ping_sent_ms = now;
        }
        (id, msg)
    }

    /// PFAIL for nodes whose ping went unanswered past the timeout; FAIL where primaries agree.
    fn detect_failures(&mut self, now: i64) {
        let timeout = self.cfg.node_timeout_ms.max(1);
        let suspects: Vec<NodeId> = self
            .nodes
            .values()
            .filter(|e| e.node.id != self.me && !e.node.flags.has(NodeFlags::HANDSHAKE))
            .filter(|e| e.node.ping_sent_ms != 0 && now - e.node.ping_sent_ms > timeout && now - e.heard_ms > timeout)
            .filter(|e| !e.node.flags.has(NodeFlags::PFAIL) && !e.node.flags.has(NodeFlags::FAIL))
            .map(|e| e.node.id)
            .collect();
        for id in suspects {
            if let Some(e) = self.nodes.get_mut(&id) {
                info!(node_id = %id, "*** NODE {id} possibly failing");
                e.node.flags.set(NodeFlags::PFAIL, true);
                self.dirty = true;
            }
        }
        let pfail: Vec<NodeId> =
            self.nodes.values().filter(|e| e.node.flags.has(NodeFlags::PFAIL)).map(|e| e.node.id).collect();
        for id in pfail {
            self.fail_if_agreed(id, now);
        }
    }

    /// Failure reports older than twice the node timeout no longer count (Valkey's validity).
    fn expire_fail_reports(&mut self, now: i64) {
        let validity = self.cfg.node_timeout_ms.max(1) * 2;
        for e in self.nodes.values_mut() {
            e.fail_reports.retain(|(_, at)| now - at <= validity);
        }
    }

    /// Marks `id` FAIL when a majority of the primaries that serve slots (this node included
    /// when it is one and suspects it) report it failing, and broadcasts the verdict.
    fn fail_if_agreed(&mut self, id: NodeId, now: i64) -> Option<Message> {
        let size = self.cluster_size();
        let quorum = size / 2 + 1;
        let e = self.nodes.get(&id)?;
        if !e.node.flags.has(NodeFlags::PFAIL) || e.node.flags.has(NodeFlags::FAIL) {
            return None;
        }
        let me = self.myself();
        let mine = usize::from(me.is_primary() && !me.slots.is_empty());
        if e.fail_reports.len() + mine < quorum {
            return None;
        }
        let e = self.nodes.get_mut(&id)?;
        e.node.flags.set(NodeFlags::PFAIL, false);
        e.node.flags.set(NodeFlags::FAIL, true);
        e.fail_time = now;
        self.dirty = true;
        info!(node_id = %id, "Marking node {id} as failing (quorum reached)");
        let msg = self.message(Kind::Fail, Body::Fail(id));
        self.update_state();
        Some(msg)
    }

    /// Primaries that serve at least one slot (`cluster_size`).
    fn cluster_size(&self) -> usize {
        self.nodes.values().filter(|e| e.node.is_primary() && !e.node.slots.is_empty()).count()
    }

    /// Recomputes `cluster_state`: ok when every slot is served (or full coverage is not
    /// required) and no slot's owner is FAIL, and this node reaches a majority of the primaries
    /// that serve slots: a node cut off in a minority stops serving, as Valkey's
    /// `clusterUpdateState` does ("we are in a minority partition"), instead of answering
    /// for slots the majority may already have failed over.
    ///
    /// It runs on every tick, so it counts the slots of the nodes that are not FAIL, a few
    /// 2 KiB bitmaps, instead of looking up the owner of each of the 16384 slots: the sets
    /// are disjoint and match `owners`, so every slot is served by a live node exactly when
    /// the count is 16384.
    fn update_state(&mut self) {
        // A primary back from a restart stays down a moment (see `writable_at_ms`).
        if !self.ok && self.myself().is_primary() && self.clock_ms < self.writable_at_ms {
            return;
        }
        let ok = !self.cfg.require_full_coverage
            || self
                .nodes
                .values()
                .filter(|e| !e.node.flags.has(NodeFlags::FAIL))
                .map(|e| e.node.slots.len())
                .sum::<usize>()
                == SLOTS;
        let ok = ok && self.reaches_a_majority();
        if ok != self.ok {
            info!(state = if ok { "ok" } else { "fail" }, "Cluster state changed: {}", if ok { "ok" } else { "fail" });
            self.ok = ok;
            self.view_changed = true;
        }
    }

    /// Whether the voting primaries (those that serve slots) this node does not suspect are
    /// a majority of them; this node counts as reachable.
    fn reaches_a_majority(&self) -> bool {
        let voting = self.nodes.values().filter(|e| e.node.is_primary() && !e.node.slots.is_empty());
        let (size, unreachable) = voting.fold((0, 0), |(size, down), e| {
            (size + 1, down + usize::from(e.node.flags.has(NodeFlags::PFAIL) || e.node.flags.has(NodeFlags::FAIL)))
        });
        size - unreachable > size / 2
    }

    /// Counts links the bus closed for passing `cluster-link-sendbuf-limit` (CLUSTER INFO
    /// `total_cluster_links_buffer_limit_exceeded`).
    pub fn count_links_over_limit(&mut self, n: u64) {
        self.links_over_limit += n;
    }

    /// Counts a frame of `kind` received (CLUSTER INFO), also one the bus's debug filter drops.
    pub fn count_received(&mut self, kind: Kind) {
        self.received[kind as usize] += 1;
    }

    /// Handles a frame that arrived on a link. `link_node` is the node an outbound link was
    /// opened to (None for a link another node opened); `peer_ip` the link's remote address,
    /// `local_ip` its local one.
    pub fn receive(
        &mut self,
        msg: Message,
        link_node: Option<NodeId>,
        peer_ip: &str,
        local_ip: Option<&str>,
        now: i64,
    ) -> Outcome {
        let mut out = Outcome::default();
        self.clock_ms = now;
        self.count_received(msg.kind);
        let h = &msg.header;
        if h.sender == self.me {
            // A link to ourselves (a MEET of our own address): nothing to learn.
            out.close = true;
            return out;
        }
        if h.current_epoch > self.current_epoch {
            self.current_epoch = h.current_epoch;
            self.dirty = true;
        }
        // A reply on an outbound link to a node met by address: now we know its id.
        if let Some(expected) = link_node
            && expected != h.sender
        {
            let handshake = self.nodes.get(&expected).is_some_and(|e| e.node.flags.has(NodeFlags::HANDSHAKE));
            if !handshake || self.nodes.contains_key(&h.sender) {
                // Someone else answers at that address, or a node we already know: the
                // handshake entry or the stale address is dropped.
                if handshake {
                    self.nodes.remove(&expected);
                } else if let Some(e) = self.nodes.get_mut(&expected) {
                    e.node.flags.set(NodeFlags::NOADDR, true);
                    e.node.link_connected = false;
                }
                out.close = true;
                return out;
            }
            let mut e = self.nodes.remove(&expected).expect("checked above");
            e.node.id = h.sender;
            e.node.flags.set(NodeFlags::HANDSHAKE | NodeFlags::MEET, false);
            info!(node_id = %h.sender, "Handshake with node {} completed", h.sender);
            self.nodes.insert(h.sender, e);
            out.renamed = Some((expected, h.sender));
            self.dirty = true;
        }
        let known = self.nodes.contains_key(&h.sender);
        if !known {
            if msg.kind != Kind::Meet {
                // Only a MEET introduces a node; anything else from a stranger is ignored
                // (Valkey drops it too), and its link closed. An outbound link whose node is
                // a stranger now was to a node forgotten since: closed too.
                out.close = link_node.is_some() || msg.kind != Kind::Ping;
                if msg.kind == Kind::Ping {
                    // Answer, so the sender's handshake completes if it met us.
                    out.reply.push(self.gossip_message(Kind::Pong, None, now));
                }
                return out;
            }
            // Our first frame to it is a MEET too: if its own handshake with us timed out, it
            // has forgotten us and would ignore a PING, and it would never join (Valkey's met
            // node handshakes back the same way).
            let mut node = Node::new(h.sender, NodeFlags::MEET);
            node.ip = if h.ip.is_empty() { peer_ip.to_owned() } else { h.ip.clone() };
            self.nodes.insert(h.sender, Entry::new(node));
            info!(node_id = %h.sender, "Node {} met us, adding it", h.sender);
            self.dirty = true;
        }
        // This node learns its own address from the nodes that meet it: the address they
        // dialled (the link's local address here), unless it announces one (Valkey's myip).
        // Without any address yet, a PING teaches it too; a later MEET corrects it.
        if (msg.kind == Kind::Meet || (msg.kind == Kind::Ping && self.myself().ip.is_empty()))
            && self.cfg.announce_ip.is_empty()
            && let Some(local) = local_ip.filter(|ip| !ip.is_empty() && *ip != self.myself().ip)
        {
            info!("IP address for this node updated to {local}");
            self.myself_mut().ip = local.to_owned();
            self.dirty = true;
        }
        if let Body::Publish { channel, message } = msg.body {
            // Only PING, PONG and MEET carry news about the sender (Valkey reads a sender's
            // config from those three, and sends PUBLISH with a header that has none), so a
            // message costs no walk over the slots: it goes to the local subscribers.
            out.publish = Some(Published { channel, message, shard: msg.kind == Kind::PublishShard });
            return out;
        }
        let newer_owner = self.update_sender(&msg, peer_ip, now);
        self.note_offset(h);
        match &msg.body {
            Body::Gossip { entries, ext } => {
                // Forgotten nodes first, so that the gossip after them cannot bring one back.
                self.process_extensions(h.sender, ext, now);
                if matches!(msg.kind, Kind::Ping | Kind::Meet) {
                    out.reply.push(self.gossip_message(Kind::Pong, None, now));
                }
                self.process_gossip(h.sender, entries, now, &mut out);
            }
            Body::Fail(id) => {
                if let Some(e) = self.nodes.get_mut(id)
                    && *id != self.me
                    && !e.node.flags.has(NodeFlags::FAIL)
                {
                    info!(node_id = %id, "FAIL message received from {} about {id}", h.sender);
                    e.node.flags.set(NodeFlags::FAIL, true);
                    e.node.flags.set(NodeFlags::PFAIL, false);
                    e.fail_time = now;
                    self.dirty = true;
                    self.update_state();
                }
            }
            Body::Update { id, config_epoch, slots } => {
                // Someone saw us (or gossip) claim slots with a stale epoch: the node it names
                // holds them with a newer one. Valkey's clusterUpdateSlotsConfigWith.
                let newer = self.nodes.get(id).is_some_and(|e| e.node.config_epoch < *config_epoch);
                if newer && *id != self.me {
                    let same_shard = self.in_my_shard(id);
                    let mut took_over = None;
                    if let Some(e) = self.nodes.get_mut(id) {
                        e.node.config_epoch = *config_epoch;
                        // Only a primary holds slots: one we knew as a replica was promoted.
                        if !e.node.is_primary() {
                            e.node.flags.set(NodeFlags::REPLICA, false);
                            e.node.flags.set(NodeFlags::PRIMARY | NodeFlags::MIGRATE_TO, true);
                            took_over = e.node.primary.take();
                        }
                    }
                    info!(node_id = %id, "UPDATE from {} about {id}: its slots, epoch {config_epoch}", h.sender);
                    self.claim_slots(*id, *config_epoch, slots, Claim { same_shard, took_over });
                    self.dirty = true;
                }
            }
            Body::AuthRequest { force } => {
                if let Some(ack) = self.vote(h.sender, h, *force, now) {
                    out.reply.push(ack);
                }
            }
            Body::Empty if msg.kind == Kind::FailoverAuthAck => self.count_vote(h.sender, h.current_epoch, now),
            Body::Empty if msg.kind == Kind::MfStart => {
                if let Some(ping) = self.manual_failover_requested(h.sender, now) {
                    out.reply.push(ping);
                }
            }
            Body::Publish { .. } | Body::Empty => {}
        }
        // The sender claims slots that a node with a newer epoch holds: tell it, so that it
        // stops serving them (it may not hear from that node directly).
        if let Some(owner) = newer_owner.and_then(|o| self.nodes.get(&o)).map(|e| e.node.clone()) {
            let update = Body::Update { id: owner.id, config_epoch: owner.config_epoch, slots: Box::new(owner.slots) };
            out.reply.push(self.message(Kind::Update, update));
        }
        out
    }

    /// What the header says about its sender: address, role, epochs, slots, liveness. Returns
    /// a node that holds some slot the sender claims with a newer epoch, if any.
    fn update_sender(&mut self, msg: &Message, peer_ip: &str, now: i64) -> Option<NodeId> {
        let h = &msg.header;
        let me = self.me;
        // Whether the sender was in this node's shard before this frame: a failover moves a
        // shard's slots to one of its replicas, which the others then follow.
        let same_shard = self.in_my_shard(&h.sender);
        let e = self.nodes.get_mut(&h.sender)?;
        e.heard_ms = now;
        let n = &mut e.node;
        let ip = if h.ip.is_empty() { peer_ip } else { &h.ip };
        if n.ip != ip || n.port != h.port || n.tls_port != h.tls_port || n.bus_port != h.bus_port {
            n.ip = ip.to_owned();
            n.port = h.port;
            n.tls_port = h.tls_port;
            n.bus_port = h.bus_port;
            n.flags.set(NodeFlags::NOADDR, false);
            self.dirty = true;
        }
        n.hostname.clone_from(&h.hostname);
        n.human_nodename.clone_from(&h.human_nodename);
        e.cert = h.cert.clone();
        if msg.kind == Kind::Pong || msg.kind == Kind::Ping || msg.kind == Kind::Meet {
            // Any frame proves it alive (heard_ms); only a PONG answers our ping, and counts as
            // one received (Valkey's pong_received): a node that pings us often must still be
            // pinged in turn, or its link from us would carry nothing.
            if msg.kind == Kind::Pong {
                n.pong_received_ms = now;
                n.ping_sent_ms = 0;
                n.flags.set(NodeFlags::MEET, false);
            }
            if n.flags.has(NodeFlags::PFAIL) {
                n.flags.set(NodeFlags::PFAIL, false);
                self.dirty = true;
            }
            // A FAIL is cleared when the node is back and serves no slots (or holds them
            // long after the failure, Valkey's clearNodeFailureIfNeeded).
            if n.flags.has(NodeFlags::FAIL) && (n.slots.is_empty() || now - e.fail_time > self.cfg.node_timeout_ms * 2)
            {
                info!(node_id = %h.sender, "Clear FAIL state for node {}: is reachable again", h.sender);
                n.flags.set(NodeFlags::FAIL, false);
                self.dirty = true;
            }
        }
        // Role.
        let replica = h.flags & NodeFlags::REPLICA != 0;
        let was = n.flags;
        // A replica that claims slots now took them over from its primary (a failover).
        let took_over = if !replica && was.has(NodeFlags::REPLICA) { n.primary } else { None };
        n.flags.set(NodeFlags::REPLICA, replica);
        n.flags.set(NodeFlags::PRIMARY, !replica);
        n.flags.set(NodeFlags::NOFAILOVER, h.flags & NodeFlags::NOFAILOVER != 0);
        // A replica promoted took over a shard that had replicas: one may migrate to it if it
        // is left without any (Valkey's clusterSetNodeAsPrimary).
        if !replica && was.has(NodeFlags::REPLICA) {
            n.flags.set(NodeFlags::MIGRATE_TO, true);
        }
        if replica {
            n.flags.set(NodeFlags::MIGRATE_TO, false);
        }
        let new_primary = replica && n.primary != h.primary;
        if n.flags != was || n.primary != h.primary {
            n.primary = if replica { h.primary } else { None };
            self.dirty = true;
        }
        let sender = h.sender;
        if new_primary {
            self.leave_sub_replica();
        }
        if replica {
            // Its primary has (had) a replica.
            if let Some(p) = h.primary.and_then(|p| self.nodes.get_mut(&p)) {
                p.node.flags.set(NodeFlags::MIGRATE_TO, true);
            }
            // A replica's header carries its primary's slots and config epoch: news of a
            // failover that this node may not have heard from the new primary yet (Valkey's
            // "A failover occurred in shard"). Taken only when newer than what we know.
            if let Some(p) = h.primary.filter(|p| *p != me && *p != sender)
                && self.nodes.get(&p).is_some_and(|e| e.node.config_epoch < h.config_epoch)
            {
                let same_shard = self.in_my_shard(&p);
                let mut took_over = None;
                if let Some(e) = self.nodes.get_mut(&p) {
                    e.node.config_epoch = h.config_epoch;
                    if !e.node.is_primary() {
                        info!(
                            node_id = %p,
                            "A failover occurred in shard {p}; node {sender} failed over to node {p} with a config epoch of {}",
                            h.config_epoch
                        );
                        e.node.flags.set(NodeFlags::REPLICA, false);
                        e.node.flags.set(NodeFlags::PRIMARY | NodeFlags::MIGRATE_TO, true);
                        took_over = e.node.primary.take();
                    }
                }
                self.dirty = true;
                self.claim_slots(p, h.config_epoch, &h.slots, Claim { same_shard, took_over });
            }
            // A replica's slots are its primary's; it owns none itself.
            if !self.nodes[&sender].node.slots.is_empty() {
                let slots: Vec<u16> = self.nodes[&sender].node.slots.iter().collect();
                for s in slots {
                    self.set_owner(s, None);
                }
                self.dirty = true;
            }
            return None;
        }
        let epoch_changed = self.nodes[&sender].node.config_epoch != h.config_epoch;
        if epoch_changed {
            self.nodes.get_mut(&sender).expect("present").node.config_epoch = h.config_epoch;
            self.dirty = true;
        }
        if sender == me {
            return None;
        }
        let newer = self.claim_slots(sender, h.config_epoch, &h.slots, Claim { same_shard, took_over });
        self.handle_epoch_collision(sender, h.config_epoch);
        newer
    }

    /// This replica's primary has become a replica itself (it lost its shard's last slot and
    /// followed the node that took it, or it followed another replica of its shard after a
    /// failover): this node follows the new primary directly, since nothing else would move it
    /// once no slot is left to claim (Valkey's sub-replica safeguard in `clusterProcessPacket`).
    fn leave_sub_replica(&mut self) {
        let me = self.myself();
        let Some(primary) = me.primary.filter(|_| !me.is_primary()) else { return };
        let Some(grand) = self.nodes.get(&primary).filter(|e| !e.node.is_primary()).and_then(|e| e.node.primary) else {
            return;
        };
        if grand == self.me || !self.nodes.contains_key(&grand) {
            return;
        }
        info!(node_id = %grand, "I'm a sub-replica! Reconfiguring myself as a replica of {grand} from {primary}");
        // A replica of our primary that won a failover, not yet known as a primary here, is
        // still in this node's shard: its stream continues ours.
        let join = if self.in_my_shard(&grand) { Join::SameShard } else { Join::OtherShard };
        self.set_primary(grand, join);
    }

    /// Whether `id` is in this node's shard as the table says now: this node's primary or one
    /// of its replicas, this node's replica, or a replica of the same primary.
    fn in_my_shard(&self, id: &NodeId) -> bool {
        match self.nodes.get(id) {
            Some(e) => self.shard_of(&e.node) == self.shard_of(self.myself()),
            None => false,
        }
    }

    /// A primary claims `slots` with `epoch`: it takes every slot that is free or held with an
    /// older epoch. Slots it no longer claims stay its own here until another node claims
    /// them, as in Valkey's `clusterUpdateSlotsConfigWith`: a DELSLOTS is not propagated (the
    /// owner answers for the slot, with the redirect or refusal it now deserves), and a slot
    /// handed over in a migration is claimed by its new owner with a newer epoch. Returns the
    /// first node found holding a claimed slot with a newer epoch (the claim is stale).
    ///
    /// When the claim takes the last slots of this node's shard (this primary's, or its
    /// primary's, for a replica), this node follows the sender as its replica (Valkey's
    /// `clusterUpdateSlotsConfigWith`) if the sender is in the shard as the table knows it (a
    /// failover there), or whatever shard it is in under `cluster-allow-replica-migration`
    /// (a reshard took the shard's last slot, or the table does not know the sender is in the
    /// shard, as when this node was killed right after it won a failover and comes back
    /// before it heard its old primary turn into its replica). A primary that may not move
    /// says it is now an empty primary.
    fn claim_slots(&mut self, sender: NodeId, epoch: u64, slots: &SlotSet, claim: Claim) -> Option<NodeId> {
        let Claim { same_shard, took_over } = claim;
        self.confirm_imports(sender, slots);
        if let Some(e) = self.nodes.get_mut(&sender)
            && e.claimed != *slots
        {
            e.claimed = slots.clone();
        }
        self.follow_migration_target(sender, epoch, slots);
        self.take_relinquished_imports(sender, slots);
        // The usual PING or PONG claims what the sender holds here already: nothing to take,
        // no stale claim, and no need to walk the slots.
        if self.nodes.get(&sender).is_some_and(|e| e.node.slots == *slots) {
            return None;
        }
        let me = self.myself();
        let cur_primary = if me.is_primary() { Some(self.me) } else { me.primary };
        let mut lost_by_my_shard = false;
        let mut changed = false;
        let mut newer = None;
        let mut dirty = Vec::new();
        for slot in slots.iter() {
            let owner = self.owners[usize::from(slot)];
            if owner == Some(sender) {
                continue;
            }
            // A slot this node is importing is its to take, not gossip's, unless the source's
            // shard failed over: its new primary claims the slot, and the import goes on from
            // it (Valkey: "Failover occurred in migration source").
            if let Some(&source) = self.importing.get(&slot) {
                let newer = owner.and_then(|o| self.nodes.get(&o)).is_none_or(|o| o.node.config_epoch < epoch);
                if source == sender || !newer || !self.same_shard(&source, &sender) {
                    continue;
                }
                let (name, shard) = self.describe(&sender);
                info!(
                    "Failover occurred in migration source. Update importing source for slot {slot} to node {sender} ({name}) in shard {shard}."
                );
                self.importing.insert(slot, sender);
                self.set_owner(slot, Some(sender));
                changed = true;
                continue;
            }
            match owner.and_then(|o| self.nodes.get(&o)).map(|o| (o.node.id, o.node.config_epoch)) {
                Some((_, held)) if held >= epoch => {
                    if held > epoch && newer.is_none() {
                        newer = owner;
                    }
                }
                _ => {
                    // A failover is not a migration: the slots stay in their shard, so no
                    // line per slot. The shard is the persisted shard id, as Valkey's
                    // `areInSameShard`: a winner frozen while a sibling replaced it is a
                    // primary of its own when it returns, but of the same shard.
                    if let Some(from) = owner
                        && took_over != Some(from)
                        && !self.same_shard(&from, &sender)
                        && !self.same_shard_id(&from, &sender)
                    {
                        let (from_name, from_shard) = self.describe(&from);
                        let (name, shard) = self.describe(&sender);
                        info!(
                            "Slot {slot} is migrated from node {from} ({from_name}) in shard {from_shard} to node {sender} ({name}) in shard {shard}."
                        );
                        #[cfg(test)]
                        {
                            self.migrations_logged += 1;
                        }
                    }
                    if owner == Some(self.me) && sender != self.me {
                        dirty.push(slot);
                    }
                    lost_by_my_shard |= owner.is_some() && owner == cur_primary;
                    self.set_owner(slot, Some(sender));
                    // The node this one was moving the slot to owns it now: the move is over
                    // here too, even before anyone runs SETSLOT NODE on this node. So is a move
                    // that another shard ended by taking the slot; a failover in this node's
                    // own shard keeps it (the new primary carries it on).
                    if let Some(&target) = self.migrating.get(&slot)
                        && (target == sender || !same_shard)
                    {
                        if target != sender {
                            let (name, shard) = self.describe(&target);
                            info!(
                                "Slot {slot} is no longer being migrated to node {target} ({name}) in shard {shard}."
                            );
                        }
                        self.migrating.remove(&slot);
                    }
                    changed = true;
                }
            }
        }
        if changed {
            self.dirty = true;
            self.update_state();
        }
        let shard_emptied = cur_primary.and_then(|p| self.nodes.get(&p)).is_some_and(|p| p.node.slots.is_empty());
        if lost_by_my_shard && shard_emptied && sender != self.me {
            let (name, shard) = self.describe(&sender);
            if same_shard || self.cfg.allow_replica_migration {
                info!(
                    node_id = %sender,
                    "Configuration change detected. Reconfiguring myself as a replica of node {sender} ({name}) in shard {shard}"
                );
                self.set_primary(sender, if same_shard { Join::SameShard } else { Join::OtherShard });
            } else if self.myself().is_primary() {
                // A reshard took the last slot (an operator's doing), and this node may not
                // move: it stays, empty, as SETSLOT NODE would leave it.
                info!(
                    node_id = %sender,
                    "My last slot was migrated to node {sender} ({name}) in shard {shard}. I am now an empty primary."
                );
            }
        } else if !dirty.is_empty() {
            // Still a primary serving other slots: the keys of the slots taken from it would
            // otherwise stay here, unreachable and counted, and come back if the slot ever did
            // (Valkey's dirty slots).
            self.dirty_slots.extend(dirty);
        }
        newer
    }

    /// Slots this primary lost to another node's newer claim while still serving others (a
    /// failover elsewhere took them, or an operator assigned them away): the server deletes
    /// the keys it still holds in them, each propagated as a DEL, and logs Valkey's "Deleting
    /// keys in dirty slot" line for every slot that had some.
    pub fn take_dirty_slots(&mut self) -> Vec<u16> {
        std::mem::take(&mut self.dirty_slots)
    }

    /// A primary `sender` that took over the shard this node migrates slots to (a failover
    /// there) becomes their target (Valkey: "Failover occurred in migration target").
    fn follow_migration_target(&mut self, sender: NodeId, epoch: u64, slots: &SlotSet) {
        if self.migrating.is_empty() || sender == self.me {
            return;
        }
        let moved: Vec<u16> = self
            .migrating
            .iter()
            .filter(|&(slot, target)| {
                *target != sender
                    && !slots.contains(*slot)
                    && self.same_shard(target, &sender)
                    && self.nodes.get(target).is_some_and(|t| t.node.config_epoch < epoch || !t.node.is_primary())
            })
            .map(|(slot, _)| *slot)
            .collect();
        for slot in moved {
            let (name, shard) = self.describe(&sender);
            info!(
                "Failover occurred in migration target. Slot {slot} is now being migrated to node {sender} ({name}) in shard {shard}."
            );
            self.migrating.insert(slot, sender);
            self.dirty = true;
        }
    }

    /// The source of an import no longer claims the slot: it gave it up (SETSLOT NODE on the
    /// source first, or this node's primary died before it finalised the move). This primary
    /// ends the import and takes the slot, so it is never left without an owner (Valkey:
    /// "Clear my importing source for the slot").
    fn take_relinquished_imports(&mut self, sender: NodeId, slots: &SlotSet) {
        if self.importing.is_empty() || !self.myself().is_primary() {
            return;
        }
        let gone: Vec<u16> = self
            .importing
            .iter()
            .filter(|&(slot, source)| {
                *source == sender && !slots.contains(*slot) && !self.unconfirmed_imports.contains(slot)
            })
            .map(|(slot, _)| *slot)
            .collect();
        for slot in gone {
            let (name, shard) = self.describe(&sender);
            info!(
                "Slot {slot} is no longer being imported from node {sender} ({name}) in shard {shard}; Clear my importing source for the slot."
            );
            self.importing.remove(&slot);
            if self.owners[usize::from(slot)] != Some(self.me) {
                self.set_owner(slot, Some(self.me));
                if self.bump_epoch().0 {
                    info!("ConfigEpoch updated after importing slot {slot}");
                }
                self.announce = true;
            }
            self.dirty = true;
            self.update_state();
        }
    }

    /// The imports from `sender` of slots it claims now are confirmed: from here on, a frame of
    /// its without the slot means it gave the slot up. Forgets the imports that ended.
    fn confirm_imports(&mut self, sender: NodeId, slots: &SlotSet) {
        if self.unconfirmed_imports.is_empty() {
            return;
        }
        let importing = &self.importing;
        self.unconfirmed_imports
            .retain(|slot| importing.get(slot).is_some_and(|source| *source != sender || !slots.contains(*slot)));
    }

    /// Whether two nodes are in one shard as the table knows it (a replica is in its
    /// primary's).
    fn same_shard(&self, a: &NodeId, b: &NodeId) -> bool {
        match (self.nodes.get(a), self.nodes.get(b)) {
            (Some(x), Some(y)) => self.shard_of(&x.node) == self.shard_of(&y.node),
            _ => false,
        }
    }

    /// Whether two known nodes carry the same shard id.
    fn same_shard_id(&self, a: &NodeId, b: &NodeId) -> bool {
        match (self.nodes.get(a), self.nodes.get(b)) {
            (Some(x), Some(y)) => x.node.shard_id == y.node.shard_id,
            _ => false,
        }
    }

    /// A node's human name and shard id, for log lines (Valkey prints `shard_id`).
    fn describe(&self, id: &NodeId) -> (String, NodeId) {
        self.nodes.get(id).map_or((String::new(), *id), |e| (e.node.human_nodename.clone(), e.node.shard_id))
    }

    fn set_owner(&mut self, slot: u16, owner: Option<NodeId>) {
        // The table is saved with its slots too; every caller marks it, but a missed one
        // would leave the routing snapshot behind.
        self.dirty = true;
        if let Some(old) = self.owners[usize::from(slot)].and_then(|o| self.nodes.get_mut(&o)) {
            old.node.slots.remove(slot);
        }
        self.owners[usize::from(slot)] = owner;
        if let Some(new) = owner.and_then(|o| self.nodes.get_mut(&o)) {
            new.node.slots.insert(slot);
        }
    }

    /// Two primaries with the same config epoch: the one with the smaller id takes a new
    /// epoch, so that every node agrees whose claim wins (Valkey's
    /// `clusterHandleConfigEpochCollision`).
    fn handle_epoch_collision(&mut self, sender: NodeId, epoch: u64) {
        let me = self.myself();
        if !me.is_primary() || me.config_epoch != epoch || sender > self.me {
            return;
        }
        let sender_primary = self.nodes.get(&sender).is_some_and(|e| e.node.is_primary());
        if !sender_primary {
            return;
        }
        self.current_epoch += 1;
        let new = self.current_epoch;
        self.myself_mut().config_epoch = new;
        self.dirty = true;
        warn!(epoch = new, "WARNING: configEpoch collision with node {sender}. configEpoch set to {new}");
    }

    /// `node` is in `shard` (Valkey's `updateShardId`); so is this node when `node` is its
    /// primary (they differ only until the first PING after a node is added or loaded).
    fn update_shard_id(&mut self, node: NodeId, shard: NodeId) {
        if let Some(e) = self.nodes.get_mut(&node)
            && e.node.shard_id != shard
        {
            e.node.shard_id = shard;
            self.dirty = true;
        }
        if node != self.me && self.myself().primary == Some(node) && self.myself().shard_id != shard {
            self.myself_mut().shard_id = shard;
            self.dirty = true;
        }
    }

    /// What a PING, PONG or MEET's extensions say: the sender's shard and client addresses
    /// (one it does not send it no longer announces), and nodes the sender forgot, forgotten
    /// here too for the time it has left unless one is this node or its primary (Valkey's
    /// `clusterProcessPingExtensions`).
    fn process_extensions(&mut self, sender: NodeId, ext: &Extensions, now: i64) {
        let (mut ipv4, mut ipv6) = ("", "");
        let mut shard = None;
        for e in ext.iter() {
            let (id, ttl_secs) = match e {
                Ext::ShardId(id) => {
                    shard = Some(id);
                    continue;
                }
                Ext::ClientIpv4(ip) => {
                    ipv4 = ip;
                    continue;
                }
                Ext::ClientIpv6(ip) => {
                    ipv6 = ip;
                    continue;
                }
                Ext::ForgottenNode { id, ttl_secs } => (id, ttl_secs),
                Ext::Unknown { .. } => continue,
            };
            if id == self.me || self.myself().primary == Some(id) || !self.nodes.contains_key(&id) {
                continue;
            }
            // A peer's ttl is a claim: no longer than a forget here would last.
            let ttl_ms = i64::try_from(ttl_secs).unwrap_or(i64::MAX).saturating_mul(1000).min(FORGET_TTL_MS);
            info!(node_id = %id, "Node {id} forgotten, as node {sender} tells");
            self.forgotten.insert(id, now + ttl_ms);
            self.del_node(&id);
        }
        if let Some(e) = self.nodes.get_mut(&sender)
            && (e.node.client_ipv4 != ipv4 || e.node.client_ipv6 != ipv6)
        {
            // Saved in nodes.conf and shown to clients: the routing snapshot is rebuilt.
            e.node.client_ipv4 = ipv4.to_owned();
            e.node.client_ipv6 = ipv6.to_owned();
            self.dirty = true;
        }
        // A sender that names no shard (an older version) is in its primary's.
        let shard = shard.or_else(|| {
            let primary = self.nodes.get(&sender)?.node.primary?;
            Some(self.nodes.get(&primary)?.node.shard_id)
        });
        if let Some(shard) = shard {
            self.update_shard_id(sender, shard);
        }
    }

    /// Gossip about other nodes: failure reports, and nodes this one does not know yet.
    fn process_gossip(&mut self, sender: NodeId, entries: &GossipSection, now: i64, out: &mut Outcome) {
        // Only primaries that serve slots vote on failures (Valkey's
        // `clusterNodeIsVotingPrimary`): a primary without slots is not counted in the quorum,
        // so its reports must not count either.
        let voter = self
            .nodes
            .get(&sender)
            .filter(|e| e.node.is_primary() && !e.node.slots.is_empty())
            .map(|e| e.node.human_nodename.clone());
        for g in entries.iter() {
            if g.id == self.me {
                continue;
            }
            match self.nodes.get_mut(&g.id) {
                Some(e) => {
                    // A node we cannot reach, which the sender reaches at another address (it
                    // restarted on new ports while we were down): take that address, so our
                    // next dial goes there (Valkey's clusterProcessGossipSection). Otherwise
                    // two nodes that both moved would never find each other.
                    let unreachable = e.node.flags.has(NodeFlags::PFAIL) || e.node.flags.has(NodeFlags::FAIL);
                    let healthy = g.flags & (NodeFlags::PFAIL | NodeFlags::FAIL | NodeFlags::NOADDR) == 0;
                    if unreachable
                        && healthy
                        && g.bus_port != 0
                        && (e.node.ip != g.ip || e.node.port != g.port || e.node.bus_port != g.bus_port)
                    {
                        info!(node_id = %g.id, "Address updated for node {} from gossip of {sender}: {}:{}", g.id, g.ip, g.port);
                        e.node.ip = g.ip.to_owned();
                        e.node.port = g.port;
                        e.node.tls_port = g.tls_port;
                        e.node.bus_port = g.bus_port;
                        self.dirty = true;
                    }
                    if let Some(sender_name) = &voter {
                        let failing = g.flags & (NodeFlags::PFAIL | NodeFlags::FAIL) != 0;
                        let had = e.fail_reports.iter().position(|(r, _)| *r == sender);
                        let name = &e.node.human_nodename;
                        match (failing, had) {
                            (true, Some(i)) => e.fail_reports[i].1 = now,
                            (true, None) => {
                                e.fail_reports.push((sender, now));
                                info!(
                                    node_id = %g.id,
                                    "Node {sender} ({sender_name}) reported node {} ({name}) as not reachable.",
                                    g.id
                                );
                            }
                            (false, Some(i)) => {
                                e.fail_reports.remove(i);
                                info!(
                                    node_id = %g.id,
                                    "Node {sender} ({sender_name}) reported node {} ({name}) is back online.",
                                    g.id
                                );
                            }
                            (false, None) => {}
                        }
                        if failing && let Some(fail) = self.fail_if_agreed(g.id, now) {
                            out.broadcast.push(fail);
                        }
                    }
                }
                None => {
                    // A node we have not met: add it, if the sender vouches for a live one
                    // with an address; our link to it confirms the id.
                    if g.flags & (NodeFlags::NOADDR | NodeFlags::HANDSHAKE | NodeFlags::FAIL) != 0 || g.bus_port == 0 {
                        continue;
                    }
                    // A node forgotten here stays out until its time is up, whoever still
                    // remembers it (Valkey's clusterBlacklistExists).
                    if self.is_forgotten(&g.id, now) {
                        continue;
                    }
                    let mut node = Node::new(g.id, g.flags & (NodeFlags::PRIMARY | NodeFlags::REPLICA));
                    node.ip = g.ip.to_owned();
                    node.port = g.port;
                    node.tls_port = g.tls_port;
                    node.bus_port = g.bus_port;
                    node.pong_received_ms = now;
                    info!(node_id = %g.id, "Node {} learnt from gossip of {sender}", g.id);
                    self.nodes.insert(g.id, Entry::new(node));
                    self.dirty = true;
                }
            }
        }
    }

    // ---- CLUSTER commands ------------------------------------------------------------------

    /// CLUSTER MEET: a handshake node at that address, met on the next tick.
    pub fn meet(&mut self, ip: &str, port: u16, bus_port: u16, now: i64) -> Result<(), CmdError> {
        if ip.parse::<std::net::IpAddr>().is_err() {
            return Err(format!("Invalid node address specified: {ip}:{port}"));
        }
        let pending = self.nodes.values().any(|e| {
            e.node.flags.has(NodeFlags::HANDSHAKE)
                && e.node.ip == ip
                && e.node.port == port
                && e.node.bus_port == bus_port
        });
        if pending {
            return Ok(());
        }
        let mut node = Node::new(NodeId::random(), NodeFlags::HANDSHAKE | NodeFlags::MEET);
        node.ip = ip.to_owned();
        node.port = port;
        node.bus_port = bus_port;
        node.pong_received_ms = now;
        self.nodes.insert(node.id, Entry::new(node));
        Ok(())
    }

    /// CLUSTER ADDSLOTS / ADDSLOTSRANGE.
    pub fn add_slots(&mut self, slots: &[u16]) -> Result<(), CmdError> {
        self.require_primary()?;
        let mut seen = SlotSet::new();
        for &s in slots {
            if self.owners[usize::from(s)].is_some() {
                return Err(format!("Slot {s} is already busy"));
            }
            if !seen.insert(s) {
                return Err(format!("Slot {s} specified multiple times"));
            }
        }
        for &s in slots {
            self.importing.remove(&s);
            self.set_owner(s, Some(self.me));
        }
        self.dirty = true;
        // The claim reaches every node now (redis-cli --cluster fix covers a slot with
        // ADDSLOTS and BUMPEPOCH, then moves on to the next step at once).
        self.announce = true;
        self.update_state();
        Ok(())
    }

    /// CLUSTER DELSLOTS / DELSLOTSRANGE.
    pub fn del_slots(&mut self, slots: &[u16]) -> Result<(), CmdError> {
        let mut seen = SlotSet::new();
        for &s in slots {
            if self.owners[usize::from(s)].is_none() {
                return Err(format!("Slot {s} is already unassigned"));
            }
            if !seen.insert(s) {
                return Err(format!("Slot {s} specified multiple times"));
            }
        }
        for &s in slots {
            self.migrating.remove(&s);
            self.importing.remove(&s);
            self.set_owner(s, None);
        }
        self.dirty = true;
        self.update_state();
        Ok(())
    }

    /// CLUSTER FLUSHSLOTS: this node gives up every slot it serves.
    pub fn flush_slots(&mut self) {
        let mine: Vec<u16> = self.myself().slots.iter().collect();
        for s in mine {
            self.set_owner(s, None);
        }
        self.dirty = true;
        self.update_state();
    }

    /// CLUSTER SET-CONFIG-EPOCH: only on a node that knows no other and has epoch 0.
    pub fn set_config_epoch(&mut self, epoch: u64) -> Result<(), CmdError> {
        if self.nodes.len() > 1 {
            return Err("The user can assign a config epoch only when the node does not know any other node.".into());
        }
        if self.myself().config_epoch != 0 {
            return Err("Node config epoch is already non-zero".into());
        }
        self.myself_mut().config_epoch = epoch;
        warn!(epoch, "configEpoch set to {epoch} via CLUSTER SET-CONFIG-EPOCH");
        if self.current_epoch < epoch {
            self.current_epoch = epoch;
        }
        self.dirty = true;
        Ok(())
    }

    /// CLUSTER BUMPEPOCH: a new config epoch unless this node's is already the largest and
    /// unique. Returns whether it bumped, and the epoch.
    pub fn bump_epoch(&mut self) -> (bool, u64) {
        let mine = self.myself().config_epoch;
        // Valkey's clusterGetMaxEpoch counts the current epoch too: a node's config epoch in
        // this table may be stale, the current epoch has seen every header.
        let max = self.nodes.values().map(|e| e.node.config_epoch).max().unwrap_or(0).max(self.current_epoch);
        let unique = self.nodes.values().filter(|e| e.node.config_epoch == mine).count() == 1;
        if mine == 0 || mine != max || !unique {
            self.current_epoch += 1;
            let e = self.current_epoch;
            self.myself_mut().config_epoch = e;
            self.dirty = true;
            // Told now rather than at the next ping: a node that still believes this one's
            // old epoch may take a slot from it with an epoch that is no longer the newest
            // (an import finished there would then lose to this node's stale claim).
            self.announce = true;
            return (true, e);
        }
        (false, mine)
    }

    /// CLUSTER FORGET, as Valkey 8: the node leaves the table and may not come back from gossip
    /// for [`FORGET_TTL_MS`], and every PING and PONG meanwhile tells the other nodes to forget
    /// it too. A node already forgotten (maybe by gossip) is forgotten again, without error.
    pub fn forget(&mut self, id: &NodeId, now: i64) -> Result<(), CmdError> {
        if !self.nodes.contains_key(id) {
            if self.is_forgotten(id, now) {
                return Ok(());
            }
            return Err(format!("Unknown node {id}"));
        }
        if *id == self.me {
            return Err("I tried hard but I can't forget myself...".into());
        }
        if self.myself().primary == Some(*id) && !self.myself().is_primary() {
            return Err("Can't forget my master!".into());
        }
        self.forgotten.insert(*id, now + FORGET_TTL_MS);
        self.del_node(id);
        Ok(())
    }

    /// Whether `id` was forgotten less than its time ago.
    fn is_forgotten(&self, id: &NodeId, now: i64) -> bool {
        self.forgotten.get(id).is_some_and(|until| *until > now)
    }

    /// Removes a node from the table: its slots become unassigned, and its failure reports
    /// about other nodes no longer count (Valkey's `clusterDelNode`).
    fn del_node(&mut self, id: &NodeId) {
        let Some(gone) = self.nodes.remove(id) else { return };
        for s in gone.node.slots.iter() {
            self.owners[usize::from(s)] = None;
        }
        for e in self.nodes.values_mut() {
            e.fail_reports.retain(|(reporter, _)| reporter != id);
        }
        self.dirty = true;
        self.update_state();
    }

    /// Whether CLUSTER SETSLOT would change anything here: a primary waits for its replicas
    /// only for a change (redis-cli sends SETSLOT NODE to every primary, most of which already
    /// heard it through gossip).
    pub fn set_slot_changes(&self, slot: u16, action: SetSlot) -> bool {
        let (migrating, importing) = (self.migrating.get(&slot), self.importing.get(&slot));
        match action {
            SetSlot::Migrating(to) => migrating != Some(&to),
            SetSlot::Importing(from) => importing != Some(&from),
            SetSlot::Stable => migrating.is_some() || importing.is_some(),
            SetSlot::Node(to) => {
                self.owners[usize::from(slot)] != Some(to) || migrating.is_some() || importing.is_some()
            }
        }
    }

    /// What CLUSTER SETSLOT would refuse, without changing anything (a primary checks before
    /// it replicates the command); returns the primary of this node's shard.
    pub fn check_set_slot(&self, slot: u16, action: SetSlot, keys_here: usize) -> Result<NodeId, CmdError> {
        // A replica applies what its primary replicated to it before applying it itself
        // (Valkey 8): the checks that only make sense on the owner were made there.
        let primary_me = self.myself().is_primary();
        let my_primary = if primary_me {
            self.me
        } else {
            self.myself().primary.ok_or_else(|| CmdError::from("Please use SETSLOT only with masters."))?
        };
        let owner = self.owners[usize::from(slot)];
        let primary = |id: &NodeId, unknown: String| -> Result<(), CmdError> {
            match self.nodes.get(id) {
                None => Err(unknown),
                Some(e) if !e.node.is_primary() => Err("Target node is not a master".into()),
                Some(_) => Ok(()),
            }
        };
        match action {
            SetSlot::Migrating(to) => {
                if primary_me && owner != Some(self.me) {
                    return Err(format!("I'm not the owner of hash slot {slot}"));
                }
                primary(&to, format!("I don't know about node {to}"))?;
            }
            SetSlot::Importing(from) => {
                if primary_me && owner == Some(self.me) {
                    return Err(format!("I'm already the owner of hash slot {slot}"));
                }
                primary(&from, format!("I don't know about node {from}"))?;
            }
            SetSlot::Stable => {}
            SetSlot::Node(to) => {
                primary(&to, format!("Unknown node {to}"))?;
                if primary_me && owner == Some(self.me) && to != self.me && keys_here != 0 {
                    return Err(format!(
                        "Can't assign hashslot {slot} to a different node while I still hold keys for this hash slot."
                    ));
                }
            }
        }
        Ok(my_primary)
    }

    /// CLUSTER SETSLOT, with Valkey's checks in its order. `keys_here` counts the keys this
    /// node holds in the slot (NODE refuses to give away a slot that still has keys).
    pub fn set_slot(&mut self, slot: u16, action: SetSlot, keys_here: usize) -> Result<(), CmdError> {
        let my_primary = self.check_set_slot(slot, action, keys_here)?;
        let owner = self.owners[usize::from(slot)];
        match action {
            SetSlot::Migrating(to) => {
                info!("Migrating slot {slot} to node {to} ({})", self.nodes[&to].node.human_nodename);
                self.migrating.insert(slot, to);
            }
            SetSlot::Importing(from) => {
                info!("Importing slot {slot} from node {from} ({})", self.nodes[&from].node.human_nodename);
                self.importing.insert(slot, from);
                // A source heard holding the slot (the usual move, and Valkey's test of a
                // source that gives the slot up at once) is confirmed already; one not heard
                // holding it yet (redis-cli's fix made it the owner a moment ago) is not.
                if !self.nodes[&from].claimed.contains(slot) {
                    self.unconfirmed_imports.insert(slot);
                }
            }
            SetSlot::Stable => {
                info!("Marking slot {slot} stable");
                self.migrating.remove(&slot);
                self.importing.remove(&slot);
            }
            SetSlot::Node(to) => {
                let target = &self.nodes[&to].node;
                info!(
                    "Assigning slot {slot} to node {to} ({}) in shard {}",
                    target.human_nodename,
                    self.shard_of(target)
                );
                if keys_here == 0 {
                    self.migrating.remove(&slot);
                }
                let was_ours = owner == Some(my_primary);
                self.set_owner(slot, Some(to));
                let shard_empty = self.nodes.get(&my_primary).is_some_and(|e| e.node.slots.is_empty());
                if was_ours && shard_empty && to != my_primary {
                    let (name, shard) =
                        (self.nodes[&to].node.human_nodename.clone(), self.shard_of(&self.nodes[&to].node));
                    if self.cfg.allow_replica_migration {
                        // The whole shard moved: follow the node that took its last slot (a
                        // full sync, since its history is another shard's), as Valkey does.
                        info!(
                            "Lost my last slot during slot migration. Reconfiguring myself as a replica of {to} ({name}) in shard {shard}"
                        );
                        self.set_primary(to, Join::OtherShard);
                    } else if self.myself().is_primary() {
                        info!(
                            "My last slot was migrated to node {to} ({name}) in shard {shard}. I am now an empty primary."
                        );
                    }
                }
                // The import is over on the importing primary and on its replicas; only the
                // primary makes it known.
                let imported = (to == self.me || to == my_primary) && self.importing.remove(&slot).is_some();
                if imported && to == self.me {
                    // A manual move: a new epoch makes this node's claim win everywhere, and
                    // every node hears it now rather than at its next ping.
                    if self.bump_epoch().0 {
                        info!("ConfigEpoch updated after importing slot {slot}");
                    }
                    self.announce = true;
                }
            }
        }
        self.dirty = true;
        self.update_state();
        Ok(())
    }

    /// Asks for a PONG to every node at the bus's next turn: something the header carries
    /// changed that the others should not learn only from the next regular ping (a replica
    /// starting or ending the load of a full sync).
    pub fn announce_soon(&mut self) {
        self.announce = true;
    }

    /// A PONG to every node with a link, when a change must spread at once (a slot that
    /// finished importing); empty otherwise.
    pub fn take_announcements(&mut self, now: i64) -> Vec<(NodeId, Message)> {
        if !std::mem::take(&mut self.announce) {
            return Vec::new();
        }
        let ids: Vec<NodeId> =
            self.nodes.values().filter(|e| e.node.id != self.me && e.node.link_connected).map(|e| e.node.id).collect();
        ids.into_iter().map(|id| (id, self.gossip_message(Kind::Pong, Some(id), now))).collect()
    }

    /// CLUSTER REPLICATE (the node table's side): this node becomes a replica of `id`.
    pub fn replicate(&mut self, id: &NodeId) -> Result<(), CmdError> {
        let Some(target) = self.nodes.get(id) else { return Err(format!("Unknown node {id}")) };
        if *id == self.me {
            return Err("Can't replicate myself".into());
        }
        if !target.node.is_primary() {
            return Err("I can only replicate a master, not a replica.".into());
        }
        if self.myself().is_primary() && !self.myself().slots.is_empty() {
            return Err("To set a master the node must be empty and without assigned slots.".into());
        }
        self.set_primary(*id, Join::OtherShard);
        Ok(())
    }

    /// CLUSTER RESET: forget every other node; HARD also takes a new id and zeroes epochs.
    pub fn reset(&mut self, hard: bool) {
        self.reset_manual_failover();
        self.election = Election::default();
        let mut me = self.nodes.remove(&self.me).expect("myself").node;
        self.nodes.clear();
        self.owners.iter_mut().for_each(|o| *o = None);
        self.migrating.clear();
        self.importing.clear();
        self.unconfirmed_imports.clear();
        self.forgotten.clear();
        me.slots = SlotSet::new();
        me.flags = NodeFlags(NodeFlags::MYSELF | NodeFlags::PRIMARY);
        me.primary = None;
        if hard {
            me.id = NodeId::random();
            me.shard_id = NodeId::random();
            me.config_epoch = 0;
            self.current_epoch = 0;
            self.last_vote_epoch = 0;
            self.me = me.id;
        }
        self.nodes.insert(me.id, Entry::new(me));
        self.dirty = true;
        self.update_state();
    }

    /// CLUSTER COUNT-FAILURE-REPORTS.
    pub fn failure_reports(&self, id: &NodeId) -> Option<usize> {
        self.nodes.get(id).map(|e| e.fail_reports.len())
    }

    /// Replicas of `id`.
    pub fn replicas_of(&self, id: &NodeId) -> Vec<&Node> {
        let mut v: Vec<&Node> = self.nodes.values().map(|e| &e.node).filter(|n| n.primary == Some(*id)).collect();
        v.sort_by_key(|n| n.id);
        v
    }

    /// The certificate a node last said it serves.
    pub fn cert_of(&self, id: &NodeId) -> Option<&CertSummary> {
        self.nodes.get(id).map(|e| if *id == self.me { &self.cert } else { &e.cert })
    }

    /// Every node with the certificate it last said it serves (this one's as set by
    /// [`ClusterState::set_cert`]), in [`ClusterState::nodes`] order: `CLUSTER CERTS`.
    pub fn certs(&self) -> Vec<(&Node, &CertSummary)> {
        self.nodes().into_iter().filter_map(|n| self.cert_of(&n.id).map(|c| (n, c))).collect()
    }

    /// A replica's full sync brought its primary's open slots (`importing` true for an
    /// import): they replace this node's own. Unknown nodes are left out.
    pub fn set_open_slots(&mut self, open: &[(u16, bool, NodeId)]) {
        self.migrating.clear();
        self.importing.clear();
        self.unconfirmed_imports.clear();
        for &(slot, importing, id) in open {
            if !self.nodes.contains_key(&id) {
                continue;
            }
            if importing {
                self.importing.insert(slot, id);
            } else {
                self.migrating.insert(slot, id);
            }
        }
        self.dirty = true;
    }

    /// The slot this node is migrating away, and where.
    pub fn migrating(&self) -> &HashMap<u16, NodeId> {
        &self.migrating
    }

    /// The slots this node is importing, and from where.
    pub fn importing(&self) -> &HashMap<u16, NodeId> {
        &self.importing
    }

    // ---- views -----------------------------------------------------------------------------

    /// CLUSTER NODES, for a client of the given kind.
    pub fn nodes_text(&self, client: ClientKind) -> String {
        let mut out = String::new();
        for n in self.nodes() {
            let mut extra = String::new();
            if n.id == self.me {
                let mut m: Vec<_> = self.migrating.iter().collect();
                m.sort();
                for (slot, to) in m {
                    let _ = write!(extra, " [{slot}->-{to}]");
                }
                let mut i: Vec<_> = self.importing.iter().collect();
                i.sort();
                for (slot, from) in i {
                    let _ = write!(extra, " [{slot}-<-{from}]");
                }
            }
            n.describe(&mut out, client, &extra);
            out.push('\n');
        }
        out
    }

    /// CLUSTER INFO, with this table's own state.
    pub fn info_text(&self) -> String {
        self.info_text_serving(self.ok)
    }

    /// CLUSTER INFO with `cluster_state` from `ok`: the server passes the state its routing
    /// serves by, which follows the table a moment later (the bus first tells its peers, see
    /// `Bus::after_change`). A client that read `ok` must not then get CLUSTERDOWN.
    pub fn info_text_serving(&self, ok: bool) -> String {
        let assigned = self.owners.iter().filter(|o| o.is_some()).count();
        let flagged = |bit| {
            self.owners
                .iter()
                .filter(|o| o.and_then(|id| self.nodes.get(&id)).is_some_and(|e| e.node.flags.has(bit)))
                .count()
        };
        let (pfail, fail) = (flagged(NodeFlags::PFAIL), flagged(NodeFlags::FAIL));
        let mut s = String::new();
        let _ = write!(
            s,
            "cluster_state:{}\r\ncluster_slots_assigned:{assigned}\r\ncluster_slots_ok:{}\r\ncluster_slots_pfail:{pfail}\r\n\
             cluster_slots_fail:{fail}\r\ncluster_known_nodes:{}\r\ncluster_size:{}\r\ncluster_current_epoch:{}\r\n\
             cluster_my_epoch:{}\r\n",
            if ok { "ok" } else { "fail" },
            assigned - pfail - fail,
            self.nodes.len(),
            self.cluster_size(),
            self.current_epoch,
            self.my_epoch(),
        );
        let mut total = 0;
        for (i, name) in KIND_NAMES.iter().enumerate() {
            if self.sent[i] > 0 {
                let _ = write!(s, "cluster_stats_messages_{name}_sent:{}\r\n", self.sent[i]);
            }
            total += self.sent[i];
        }
        let _ = write!(s, "cluster_stats_messages_sent:{total}\r\n");
        let mut total = 0;
        for (i, name) in KIND_NAMES.iter().enumerate() {
            if self.received[i] > 0 {
                let _ = write!(s, "cluster_stats_messages_{name}_received:{}\r\n", self.received[i]);
            }
            total += self.received[i];
        }
        let _ = write!(
            s,
            "cluster_stats_messages_received:{total}\r\ntotal_cluster_links_buffer_limit_exceeded:{}\r\n",
            self.links_over_limit
        );
        s
    }

    /// This node's config epoch (its primary's, for a replica), as `cluster_my_epoch`.
    fn my_epoch(&self) -> u64 {
        let me = self.myself();
        match me.primary.and_then(|p| self.node(&p)) {
            Some(p) if !me.is_primary() => p.config_epoch,
            _ => me.config_epoch,
        }
    }

    fn require_primary(&self) -> Result<(), CmdError> {
        if self.myself().is_primary() { Ok(()) } else { Err("Please use SETSLOT only with masters.".into()) }
    }
}

/// How long a primary restarted with slots stays down after its first tick (Valkey's
/// `CLUSTER_WRITABLE_DELAY`).
const WRITABLE_DELAY_MS: i64 = 2000;

/// The shortest and longest wait between two ticks (see [`ClusterState::next_tick_in`]).
const TICK_MIN_MS: i64 = 100;
const TICK_MAX_MS: i64 = 1000;

#[cfg(test)]
#[path = "state_tests.rs"]
mod tests;
