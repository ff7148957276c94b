//! Cluster mode, the server's side: loads or creates the node table from `nodes.conf`, binds
//! the bus port, starts the bus on a thread of its own (so failure detection never waits
//! behind command batches), and keeps the router that dispatch asks fed with a fresh slot map
//! after every change. The rules live in `hotkv-cluster`; this module only wires them to the
//! configuration, the listeners, the TLS material and the local pub/sub subscribers.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Weak};

use hotkv_cluster::bus::{BoxFuture, Bus, BusStream, LinkError, PlainTransport, PubSubSink, Transport};
use hotkv_cluster::node::NodeId;
use hotkv_cluster::nodes_conf;
use hotkv_cluster::router::{ClusterRouter, SlotMap};
use hotkv_cluster::state::{ClusterState, Endpoint, ReplicationHooks, Settings as ClusterSettings};
use hotkv_cluster::wire::CertSummary;
use hotkv_engine::route::{Route, RouteCtx, SlotRouter};
use hotkv_replication::LinkState;
use hotkv_tls::{HandshakeError, TlsManager, TlsState};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tracing::{info, warn};

use crate::config::Settings;
use crate::config::table;
use crate::pubsub::PubSub;
use crate::server::{Server, unix_ms};

/// A cluster node's moving parts, held by the server.
pub struct ClusterNode {
    /// The bus and the node table behind it.
    pub bus: Arc<Bus>,
    /// What dispatch asks about slots.
    pub router: Arc<ClusterRouter>,
    /// Woken whenever the routing snapshot is rebuilt: the task that makes replication follow
    /// the node table (`replication::reconcile_cluster`) acts on a failover at once instead of
    /// at its next poll, so a new primary accepts writes as soon as it serves the slots.
    pub roles: Arc<Notify>,
}

impl ClusterNode {
    /// The node table, locked (briefly: never across I/O).
    pub fn state(&self) -> parking_lot::MutexGuard<'_, ClusterState> {
        self.bus.state().lock()
    }

    /// Tells the bus that a CLUSTER command changed the table: saved, republished, acted on.
    pub fn changed(&self) {
        self.bus.changed();
    }
}

/// Where `nodes.conf` lives: `cluster-config-file`, relative to `dir`.
pub fn conf_path(s: &Settings) -> PathBuf {
    let file = Path::new(s.str(table::CLUSTER_CONFIG_FILE));
    if file.is_absolute() { file.to_path_buf() } else { Path::new(s.str(table::DIR)).join(file) }
}

/// The bus port this node listens on: `cluster-port`, else its client port (the TLS one when
/// the bus runs TLS and the node has one) plus 10000.
pub fn bus_port(s: &Settings) -> u16 {
    let explicit = s.int(table::CLUSTER_PORT) as u16;
    if explicit != 0 {
        return explicit;
    }
    // Out of range (a client port above 55535) leaves 0, which `start` refuses.
    bus_base(s).checked_add(BUS_PORT_INCR).unwrap_or(0)
}

/// Valkey's `CLUSTER_PORT_INCR`.
const BUS_PORT_INCR: u16 = 10000;

/// The client port the bus port is derived from.
fn bus_base(s: &Settings) -> u16 {
    let tls_port = s.int(table::TLS_PORT) as u16;
    if s.bool(table::TLS_CLUSTER) && tls_port != 0 { tls_port } else { s.int(table::PORT) as u16 }
}

/// `cluster-link-sendbuf-limit`, for the bus.
fn sendbuf_limit(s: &Settings) -> u64 {
    u64::try_from(s.int(table::CLUSTER_LINK_SENDBUF_LIMIT)).unwrap_or(0)
}

/// The settings the cluster rules act on.
pub fn cluster_settings(s: &Settings) -> ClusterSettings {
    let announced = |id, fallback: u16| match s.int(id) as u16 {
        0 => fallback,
        p => p,
    };
    ClusterSettings {
        node_timeout_ms: s.int(table::CLUSTER_NODE_TIMEOUT),
        require_full_coverage: s.bool(table::CLUSTER_REQUIRE_FULL_COVERAGE),
        allow_reads_when_down: s.bool(table::CLUSTER_ALLOW_READS_WHEN_DOWN),
        allow_pubsubshard_when_down: s.bool(table::CLUSTER_ALLOW_PUBSUBSHARD_WHEN_DOWN),
        announce_ip: s.str(table::CLUSTER_ANNOUNCE_IP).to_owned(),
        port: announced(table::CLUSTER_ANNOUNCE_PORT, s.int(table::PORT) as u16),
        tls_port: announced(table::CLUSTER_ANNOUNCE_TLS_PORT, s.int(table::TLS_PORT) as u16),
        bus_port: announced(table::CLUSTER_ANNOUNCE_BUS_PORT, bus_port(s)),
        hostname: s.str(table::CLUSTER_ANNOUNCE_HOSTNAME).to_owned(),
        human_nodename: s.str(table::CLUSTER_ANNOUNCE_HUMAN_NODENAME).to_owned(),
        client_ipv4: s.str(table::CLUSTER_ANNOUNCE_CLIENT_IPV4).to_owned(),
        client_ipv6: s.str(table::CLUSTER_ANNOUNCE_CLIENT_IPV6).to_owned(),
        preferred_endpoint: match s.str(table::CLUSTER_PREFERRED_ENDPOINT_TYPE) {
            "hostname" => Endpoint::Hostname,
            "unknown-endpoint" => Endpoint::Unknown,
            _ => Endpoint::Ip,
        },
        replica_validity_factor: u32::try_from(s.int(table::CLUSTER_REPLICA_VALIDITY_FACTOR)).unwrap_or(0),
        repl_ping_period_ms: s.int(table::REPL_PING_REPLICA_PERIOD).saturating_mul(1000),
        replica_no_failover: s.bool(table::CLUSTER_REPLICA_NO_FAILOVER),
        allow_replica_migration: s.bool(table::CLUSTER_ALLOW_REPLICA_MIGRATION),
        migration_barrier: usize::try_from(s.int(table::CLUSTER_MIGRATION_BARRIER)).unwrap_or(0),
        ping_interval_ms: s.int(table::CLUSTER_PING_INTERVAL),
    }
}

/// Loads the node table (or makes a fresh node) and saves it at once, so a node that cannot
/// write its file finds out now, not at its first change. `Ok(None)` outside cluster mode;
/// an error names the file (and the line, for a corrupt one).
pub fn load(s: &Settings) -> Result<Option<Loaded>, String> {
    if !s.bool(table::CLUSTER_ENABLED) {
        return Ok(None);
    }
    let path = conf_path(s);
    let cfg = cluster_settings(s);
    let state = match nodes_conf::load(&path).map_err(|e| e.to_string())? {
        Some(saved) => {
            let mut st = ClusterState::from_saved(saved, cfg);
            st.hold_until_rejoined();
            info!("Node configuration loaded, I'm {}", st.myself_id());
            st
        }
        None => {
            let st = ClusterState::fresh(cfg);
            info!("No cluster configuration found, I'm {}", st.myself_id());
            st
        }
    };
    nodes_conf::save(&path, &state.saved(), true).map_err(|e| e.to_string())?;
    let router = Arc::new(ClusterRouter::new(SlotMap::of(&state)));
    Ok(Some((state, router, path)))
}

/// Builds the node (its bus not started yet) from what [`load`] found, with links made by
/// `tls` when `tls-cluster` is on; messages published on other nodes go to `pubsub`'s
/// subscribers. The certificate this node gossips follows every TLS commit (the startup load,
/// CONFIG SET, automatic reloads), whether or not the bus itself runs TLS.
pub fn build(s: &Settings, loaded: Loaded, tls: &Arc<TlsManager>, pubsub: Arc<PubSub>) -> ClusterNode {
    let (state, router, path) = loaded;
    let publish = router.clone();
    let transport: Arc<dyn Transport> =
        if s.bool(table::TLS_CLUSTER) { Arc::new(TlsTransport { tls: tls.clone() }) } else { Arc::new(PlainTransport) };
    let state = Arc::new(Mutex::new(state));
    let gossiped = state.clone();
    tls.on_commit(move |tls| gossiped.lock().set_cert(cert_summary(tls)));
    let roles = Arc::new(Notify::new());
    let changed = roles.clone();
    let on_change = Box::new(move |st: &ClusterState| {
        publish.publish(SlotMap::of(st));
        changed.notify_one();
    });
    let bus = Bus::new(state, transport, path.clone(), on_change, pubsub);
    bus.set_sendbuf_limit(sendbuf_limit(s));
    ClusterNode { bus, router, roles }
}

/// The node's replication and write pause as the cluster's failover sees them.
struct ReplicationView {
    srv: Weak<Server>,
}

impl ReplicationHooks for ReplicationView {
    fn offset(&self) -> u64 {
        self.srv.upgrade().map_or(0, |srv| my_offset(&srv))
    }

    fn data_age_ms(&self) -> i64 {
        let Some(status) = self.srv.upgrade().and_then(|srv| srv.repl.link_status()) else { return i64::MAX };
        // Valkey: the primary's last interaction while connected, the loss of the link
        // otherwise; a link never up has no data worth failing over with.
        let since = if status.state == LinkState::Connected { status.last_io } else { status.down_since };
        since.map_or(i64::MAX, |t| i64::try_from(t.elapsed().as_millis()).unwrap_or(i64::MAX))
    }

    fn loading(&self) -> bool {
        self.srv.upgrade().is_some_and(|srv| srv.repl.is_replica() && srv.repl.loading())
    }

    fn pause_writes(&self, until_ms: i64) {
        if let Some(srv) = self.srv.upgrade() {
            srv.pause.pause_for_failover(until_ms, unix_ms());
            srv.pause.drain_writes(&srv.ks);
        }
    }

    fn unpause_writes(&self) {
        if let Some(srv) = self.srv.upgrade() {
            srv.pause.end_failover_pause(unix_ms());
        }
    }

    fn forget_history(&self) {
        if let Some(srv) = self.srv.upgrade() {
            srv.repl.primary.forget_history();
        }
    }

    fn keys_in_slot(&self, slot: u16) -> usize {
        self.srv.upgrade().map_or(0, |srv| srv.ks.db(0).slot(slot).keys())
    }

    fn delete_keys_in_slot(&self, slot: u16) {
        if let Some(srv) = self.srv.upgrade() {
            let events = crate::events::CmdEvents::new(&srv, srv.rt.load().notify);
            srv.ks.delete_slot_keys(0, slot, srv.engine.load().lazy_server_del, &events);
        }
    }
}

/// Clients blocked on keys of a slot this node no longer serves, or while the cluster is
/// down, are woken to run their command again, which answers them with the redirect (MOVED)
/// or CLUSTERDOWN, as Valkey's `clusterRedirectBlockedClientIfNeeded`; subscribers of shard
/// channels whose slot is no longer served here are unsubscribed. Called by the cron; looks
/// only when the slot map changed since `seen`.
pub fn redirect_blocked(srv: &Server, seen: &mut u64) {
    let Some(node) = &srv.cluster else { return };
    let generation = node.router.generation();
    if generation == *seen {
        return;
    }
    *seen = generation;
    // Shard channels of slots no longer served here end, as Valkey's removeChannelsInSlot.
    srv.pubsub.end_shard_channels(|channel| node.router.serves_shard(hotkv_engine::slot::key_slot(channel)));
    // The address in the route does not matter: the command's own run words the redirect
    // for its client.
    let ctx = RouteCtx { tls: false, ipv6: false, asking: false, readonly: false, write: true };
    for w in srv.blocked.all() {
        if !matches!(node.router.route(&w.plan, &ctx), Route::Moved { .. } | Route::Down(_)) {
            continue;
        }
        srv.blocked.retry(&w);
    }
}

/// What the bus says about the certificate this node serves: the server certificate (the one
/// every TLS client and every node that dials us sees) and the trusted CA that signed it.
fn cert_summary(tls: Option<&TlsState>) -> CertSummary {
    let Some(tls) = tls else { return CertSummary::default() };
    let certs = tls.certs();
    let mut c = CertSummary {
        serial: certs.server.serial.clone(),
        fingerprint: certs.server.fingerprint,
        not_after: certs.server.not_after,
        ..CertSummary::default()
    };
    if let Some(ca) = &certs.issuer {
        c.ca_serial.clone_from(&ca.serial);
        c.ca_fingerprint = ca.fingerprint;
        c.ca_not_after = ca.not_after;
    }
    c
}

/// What [`load`] found: the node table, a router over it, and where it is saved.
pub type Loaded = (ClusterState, Arc<ClusterRouter>, PathBuf);

/// Binds the bus port on the `bind` addresses and starts the bus on its own thread.
pub fn start(srv: &Arc<Server>, s: &Settings) -> Result<(), String> {
    let Some(node) = &srv.cluster else { return Ok(()) };
    node.state().set_replication(Arc::new(ReplicationView { srv: Arc::downgrade(srv) }));
    if !s.bool(table::TLS_CLUSTER) && !s.bool(table::CLUSTER_BUS_PORT_PROTECTED_MODE) {
        warn!(
            "WARNING: the cluster bus port is not authenticated: tls-cluster is off and \
             cluster-bus-port-protected-mode is no, so any host that reaches the port can join this cluster and \
             speak its protocol. Let only trusted hosts reach it, or set tls-cluster yes."
        );
    }
    let port = bus_port(s);
    if port == 0 {
        // Valkey's port sanity check, in its words with the port added: it exits rather than
        // bind a port that does not exist (hotkv used to wrap around to a low port).
        return Err(format!(
            "Valkey port number too high. Cluster communication port is 10,000 port numbers higher than your \
             Valkey port. Your Valkey port number must be 55535 or less. (port {})",
            bus_base(s)
        ));
    }
    let bind = s.list(table::BIND).to_vec();
    let listeners = crate::listener::bind_all(&bind, port, s.int(table::TCP_BACKLOG) as i32)
        .map_err(|e| format!("{e}; Failed listening on the cluster bus port {port}"))?;
    if listeners.is_empty() {
        return Err(format!("Failed listening on the cluster bus port {port}"));
    }
    let weak = Arc::downgrade(srv);
    node.bus.set_stop_gate(hotkv_cluster::bus::StopGate(Arc::new(move || {
        if let Some(srv) = weak.upgrade() {
            srv.freeze.wait_blocking();
        }
    })));
    let bus = node.bus.clone();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("Can't start the cluster bus: {e}"))?;
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("hotkv-bus".into())
        .spawn(move || {
            runtime.block_on(async move {
                let _ = ready_tx.send(bus.start(listeners).map_err(|e| e.to_string()));
                std::future::pending::<()>().await;
            })
        })
        .map_err(|e| format!("Can't start the cluster bus thread: {e}"))?;
    ready_rx.recv().map_err(|_| "The cluster bus thread stopped".to_string())??;
    info!("Cluster bus listening on port {port}");
    Ok(())
}

/// CONFIG SET of a cluster directive: the rules act on the new values at once.
pub fn apply(srv: &Server, new: &Settings) {
    if let Some(node) = &srv.cluster {
        node.state().set_settings(cluster_settings(new));
        node.bus.set_sendbuf_limit(sendbuf_limit(new));
        node.changed();
    }
}

/// What other nodes publish reaches this node's subscribers; the reply counts of PUBLISH and
/// SPUBLISH are the publishing node's alone, as in Valkey, so the counts here are dropped.
impl PubSubSink for PubSub {
    fn deliver(&self, channel: &[u8], message: &[u8], shard: bool) {
        if shard {
            self.spublish(channel, message);
        } else {
            self.publish(channel, message);
        }
    }
}

/// Bus links over mutual TLS: every link presents this node's certificate (the client pair's
/// when set) and verifies the other end against the CA, whatever `tls-auth-clients` says. Each
/// link takes the material current when it is made, so a reload reaches new links while
/// established ones keep working.
struct TlsTransport {
    tls: Arc<TlsManager>,
}

/// What a failed handshake reminds the operator of, on each end (the doc's words).
const DIAL_HINT: &str = "(the TLS handshake: it must have tls-cluster yes, and a certificate tls-ca-cert-file trusts)";

impl Transport for TlsTransport {
    fn link_name(&self) -> &'static str {
        "TLS bus link"
    }

    fn connect(&self, addr: std::net::SocketAddr, _: NodeId) -> BoxFuture<'_, Result<Box<dyn BusStream>, LinkError>> {
        Box::pin(async move {
            let tcp = TcpStream::connect(addr).await.map_err(|e| LinkError::network(e.to_string()))?;
            let _ = tcp.set_nodelay(true);
            // Nodes are dialled by address; the verifier checks the chain, and a name only
            // when tls-expected-peer-name asks for one. The TLS crate counts a refusal in
            // INFO tls (tls_outbound_handshake_failures).
            let tls = self.tls.connect(&addr.ip().to_string(), tcp).await.map_err(|e| {
                let text = format!("{e} {DIAL_HINT}");
                // A socket error or a cut mid-handshake is the network's; anything else is
                // the TLS settings or certificates of one end refusing the other.
                if matches!(e, HandshakeError::Io(_) | HandshakeError::UnexpectedEof) {
                    LinkError::network(text)
                } else {
                    LinkError::refused(text)
                }
            })?;
            Ok(Box::new(tls) as Box<dyn BusStream>)
        })
    }

    fn accept(
        &self,
        tcp: TcpStream,
        peer: std::net::SocketAddr,
    ) -> BoxFuture<'_, Result<Box<dyn BusStream>, LinkError>> {
        Box::pin(async move {
            let hint = format!(
                "(the TLS handshake from {}: tls-cluster is on here, the other nodes must use it too, with a \
                 certificate tls-ca-cert-file trusts)",
                peer.ip()
            );
            let _ = tcp.set_nodelay(true);
            // A RESP client that dialled the bus port (redis-cli -p 17000 PING) is closed
            // without a word, as on the client port: it would print a TLS alert as a protocol
            // error. Anything else, a plain node's frame included, gets the alert rustls sends,
            // which a plain node reads as an oversized frame and reports.
            let mut first = [0u8; 1];
            if tcp.peek(&mut first).await.is_ok_and(|n| n == 1) && (first[0] == b'*' || first[0].is_ascii_alphabetic())
            {
                // Read what it sent before closing: unread input would turn the close into a
                // reset, which the client reports as such.
                let mut sink = [0u8; 4096];
                for _ in 0..16 {
                    if !matches!(tcp.try_read(&mut sink), Ok(n) if n > 0) {
                        break;
                    }
                }
                let _ = socket2::SockRef::from(&tcp).shutdown(std::net::Shutdown::Both);
                return Err(LinkError::refused(format!("{} {hint}", HandshakeError::WrongVersionNumber)));
            }
            // Counted in INFO tls (tls_handshake_failures) by the TLS crate.
            let tls = self.tls.accept_bus_stream(tcp).await.map_err(|e| LinkError::refused(format!("{e} {hint}")))?;
            Ok(Box::new(tls) as Box<dyn BusStream>)
        })
    }

    fn refused(&self, e: &std::io::Error) -> LinkError {
        // Our handshake had ended; the other end's alert says why it refused us, and that is
        // a refused handshake for INFO tls too.
        let reason = HandshakeError::from_io(e);
        let text = format!("{reason} {DIAL_HINT}");
        if matches!(reason, HandshakeError::AlertReceived(_)) {
            self.tls.counters().outbound_handshake_failures.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return LinkError::refused(text);
        }
        LinkError::network(text)
    }
}

/// The replication offset this node announces (Valkey's `getNodeReplicationOffset` for
/// myself): 0 while a replica loads a full sync, which hides it from CLUSTER SLOTS and ranks
/// it last in an election until it holds its primary's data.
pub fn my_offset(srv: &Server) -> u64 {
    // Valkey's replicationGetReplicaOffset: nothing processed of the primary's stream while a
    // full sync loads, or before one from a primary of another shard completes.
    let none = (srv.repl.is_replica() && srv.repl.loading()) || !srv.repl.primary.has_history();
    if none { 0 } else { srv.repl.primary.offset() }
}

/// The AUX field of a full sync's RDB that carries the primary's open slots (Valkey 8).
pub const OPEN_SLOTS_AUX: &str = "cluster-slot-states";

/// The open slots as Valkey writes them in `cluster-slot-states`: `<slot><<id>,` for each
/// import, then `<slot>><id>,` for each migration; `None` when no slot is open.
pub fn encode_open_slots(st: &hotkv_cluster::state::ClusterState) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    for (states, mark) in [(st.importing(), b'<'), (st.migrating(), b'>')] {
        let mut slots: Vec<_> = states.iter().collect();
        slots.sort_unstable_by_key(|(slot, _)| **slot);
        for (slot, id) in slots {
            out.extend_from_slice(slot.to_string().as_bytes());
            out.push(mark);
            out.extend_from_slice(id.as_str().as_bytes());
            out.push(b',');
        }
    }
    (!out.is_empty()).then_some(out)
}

/// Parses `cluster-slot-states`; `None` for anything malformed (a primary that lies gets no
/// open slot from it).
pub fn decode_open_slots(v: &[u8]) -> Option<Vec<(u16, bool, hotkv_cluster::node::NodeId)>> {
    let mut out = Vec::new();
    for item in v.split(|&b| b == b',').filter(|i| !i.is_empty()) {
        let at = item.iter().position(|&b| b == b'<' || b == b'>')?;
        let slot: u16 = std::str::from_utf8(&item[..at]).ok()?.parse().ok()?;
        if usize::from(slot) >= hotkv_engine::slot::SLOTS {
            return None;
        }
        let id = hotkv_cluster::node::NodeId::parse(&item[at + 1..])?;
        out.push((slot, item[at] == b'<', id));
    }
    Some(out)
}

/// A replica's full sync ended: its open slots become the ones its primary sent.
pub fn apply_open_slots(cluster: &ClusterNode, field: Option<&[u8]>) {
    let open = match field {
        None => Vec::new(),
        Some(v) => match decode_open_slots(v) {
            Some(open) => open,
            None => {
                warn!("Ignoring a malformed cluster-slot-states field from the primary");
                return;
            }
        },
    };
    cluster.state().set_open_slots(&open);
    cluster.changed();
}

#[cfg(test)]
mod open_slot_tests {
    use super::*;

    #[test]
    fn cluster_slot_states_parse_as_valkey_writes_them() {
        let a = "a".repeat(40);
        let b = "b".repeat(40);
        let field = format!("609<{a},7>{b},13>{b},");
        let open = decode_open_slots(field.as_bytes()).unwrap();
        assert_eq!(open.len(), 3);
        assert_eq!(open[0].0, 609);
        assert!(open[0].1, "< is an import");
        assert!(!open[1].1);
        // Whatever a primary could send that is not the format gives nothing.
        for bad in ["609", "609<short,", "x<aaaa,", "99999<{a},", "609?{a},"] {
            assert!(decode_open_slots(bad.replace("{a}", &a).as_bytes()).is_none(), "{bad}");
        }
        assert_eq!(decode_open_slots(b"").unwrap(), vec![]);
    }
}
