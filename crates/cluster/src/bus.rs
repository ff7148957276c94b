//! The cluster bus: a listener on the bus port, one outbound link per known node, and a cron
//! every 100 ms, all tokio tasks on the runtime of the bus's own thread. Frames are decoded on
//! the link's task; the [`ClusterState`] mutex is held only to apply one frame or one tick (or
//! to build a PUBLISH's header), never across I/O. How a link is made (plain TCP or mutual TLS)
//! is the [`Transport`]'s business, which the server provides; this crate knows nothing of
//! certificates. Messages published on other nodes reach this node's subscribers through a
//! [`PubSubSink`], which the server provides too.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};
use tracing::{debug, info, warn};

use crate::node::NodeId;
use crate::nodes_conf;
use crate::state::{ClusterState, PauseChange, Target};
use crate::wire::{self, Kind, Message, WireError};

/// A bus connection, plain or TLS.
pub trait BusStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> BusStream for T {}

/// A boxed future, for the transport's object-safe methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a link could not be made; `Display` is the text the log shows.
#[derive(Debug)]
pub struct LinkError {
    /// The text the log shows.
    pub reason: String,
    /// The other end refused us by policy (our certificate, its TLS settings), rather than the
    /// network or a node that is down failing the dial: nothing changes that until someone
    /// changes a certificate or a setting, so it is retried slowly (see [`Bus::dial_if_needed`]).
    pub refused: bool,
}

impl LinkError {
    /// The network failed the link, or nothing listens there: worth trying again soon.
    pub fn network(reason: impl Into<String>) -> LinkError {
        LinkError { reason: reason.into(), refused: false }
    }

    /// The other end, or our own checks of it, refused the link.
    pub fn refused(reason: impl Into<String>) -> LinkError {
        LinkError { reason: reason.into(), refused: true }
    }
}

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.reason)
    }
}

/// The last failed dial to a node.
struct Failure {
    /// When, unix ms.
    at: i64,
    reason: String,
    /// See [`LinkError::refused`].
    refused: bool,
}

/// How soon a dial the network failed is tried again: the cron's shortest tick.
const NETWORK_RETRY_MS: i64 = 100;
/// How soon a dial the other end refused is tried again.
const REFUSED_RETRY_MS: i64 = 1000;

/// How bus links are made; the server implements it with or without TLS.
pub trait Transport: Send + Sync + 'static {
    /// What a link is called in the log (`bus link`, `TLS bus link`).
    fn link_name(&self) -> &'static str {
        "bus link"
    }
    /// Dials a node's bus port; `node` names it in errors.
    fn connect(&self, addr: SocketAddr, node: NodeId) -> BoxFuture<'_, Result<Box<dyn BusStream>, LinkError>>;
    /// Completes an accepted connection (the TLS handshake, for TLS).
    fn accept(&self, tcp: TcpStream, peer: SocketAddr) -> BoxFuture<'_, Result<Box<dyn BusStream>, LinkError>>;
    /// Why a link this node opened failed before the first frame came back, in the words of a
    /// failed dial. Under TLS 1.3 the dialler's handshake is over before the other end has
    /// checked its certificate, so a refusal of our certificate arrives as the first read's
    /// error; the TLS transport words it like a handshake failure.
    fn refused(&self, e: &io::Error) -> LinkError {
        LinkError::network(e.to_string())
    }
}

/// Plain TCP links.
pub struct PlainTransport;

impl Transport for PlainTransport {
    fn connect(&self, addr: SocketAddr, _: NodeId) -> BoxFuture<'_, Result<Box<dyn BusStream>, LinkError>> {
        Box::pin(async move {
            let tcp = TcpStream::connect(addr).await.map_err(|e| LinkError::network(e.to_string()))?;
            let _ = tcp.set_nodelay(true);
            Ok(Box::new(tcp) as Box<dyn BusStream>)
        })
    }

    fn accept(&self, tcp: TcpStream, _: SocketAddr) -> BoxFuture<'_, Result<Box<dyn BusStream>, LinkError>> {
        Box::pin(async move {
            let _ = tcp.set_nodelay(true);
            Ok(Box::new(tcp) as Box<dyn BusStream>)
        })
    }
}

/// Where messages published on other nodes go: the server delivers them to its own
/// subscribers. The trait is the cluster crate's, so that the crate never names the server.
pub trait PubSubSink: Send + Sync {
    /// Delivers `message` on `channel` to this node's subscribers (shard channel subscribers
    /// when `shard`). Runs on the bus thread, once per message that arrives: it must not block.
    fn deliver(&self, channel: &[u8], message: &[u8], shard: bool);
}

/// One bus link as `CLUSTER LINKS` shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkInfo {
    /// The node at the other end.
    pub node: NodeId,
    /// The other node opened it (`from`), rather than this one (`to`).
    pub inbound: bool,
    /// When it was made, unix ms; for an outbound link, when the dial started (as Valkey's
    /// `create-time`).
    pub created_ms: i64,
    /// Bytes queued on it and not yet written to the socket.
    pub send_queued: usize,
}

impl LinkInfo {
    /// `direction`, in Valkey's words.
    pub fn direction(&self) -> &'static str {
        if self.inbound { "from" } else { "to" }
    }

    /// `events`: what Valkey's event loop would wait for on the link. A link is always read;
    /// it waits to write only while something is queued.
    pub fn events(&self) -> &'static str {
        if self.send_queued > 0 { "rw" } else { "r" }
    }
}

/// What the bus shares between its tasks and with the command path.
pub struct Bus {
    state: Arc<Mutex<ClusterState>>,
    transport: Arc<dyn Transport>,
    /// The links that are up, both ways, by node id.
    links: Mutex<Links>,
    /// Numbers links, so that a closing link removes itself and not its successor.
    next_serial: AtomicU64,
    /// Nodes an outbound link is being made to.
    /// (CLUSTER LINKS lists them, from when the dial started, as Valkey lists a link that is
    /// still connecting: a TLS handshake with a node that does not answer can last.)
    dialing: Mutex<HashMap<NodeId, i64>>,
    /// Last dial failure per node, so retries do not flood the log (or, for a refusal, the
    /// other end's log).
    failures: Mutex<HashMap<NodeId, Failure>>,
    conf_path: PathBuf,
    /// Held while `nodes.conf` is written (see [`Bus::save_now`]).
    /// Serialises saves; holds the epochs (current, last vote, this node's config) the file
    /// last reached the disk with.
    saving: Mutex<(u64, u64, u64)>,
    /// Wakes the cron early (after a CLUSTER command changed something).
    wake: Notify,
    /// Called, with the state locked, after a change of what routing depends on (see
    /// [`ClusterState::take_view_changed`]): the server rebuilds its routing snapshot there.
    on_change: Box<dyn Fn(&ClusterState) + Send + Sync>,
    /// Where PUBLISH and PUBLISHSHARD messages from other nodes go.
    sink: Arc<dyn PubSubSink>,
    /// `DEBUG DROP-CLUSTER-PACKET-FILTER`: frames of this Valkey message type are counted,
    /// then dropped unread (-1: none, -2: all).
    drop_filter: AtomicI64,
    /// `DEBUG CLOSE-CLUSTER-LINK-ON-PACKET-DROP`: a dropped frame closes its link too.
    close_on_drop: AtomicBool,
    /// Blocks while the server is stopped (DEBUG SLEEP): see [`Bus::set_stop_gate`].
    stop_gate: std::sync::OnceLock<StopGate>,
    /// `cluster-link-sendbuf-limit`: a link whose memory passes it is closed (0: no limit).
    sendbuf_limit: AtomicU64,
    /// Taken around every frame the bus applies to the table, and by a transaction of CLUSTER
    /// commands for its whole run (see [`Bus::hold_frames`]).
    frame_gate: Mutex<()>,
}

/// The links that are up.
#[derive(Default)]
struct Links {
    /// Links this node opened: PINGs, MEET, FAIL and publishes go there.
    outbound: HashMap<NodeId, Link>,
    /// Links other nodes opened, once a frame named a node this one knows: PONGs go there.
    /// One per node, as in Valkey.
    inbound: HashMap<NodeId, Link>,
}

/// One link in the registry.
#[derive(Clone)]
struct Link {
    tx: LinkTx,
    /// Unix ms.
    created_ms: i64,
    serial: u64,
    /// Closes it early: an inbound link a newer one replaced, an outbound link to a node that
    /// left the table or one gone silent.
    close: Arc<Notify>,
}

impl Link {
    /// Its memory for `mem_cluster_links` and the send-buffer limit: the fixed cost of a link
    /// (its registry entry and read buffer, about what Valkey counts for its `clusterLink`), so
    /// that a limit of one byte closes every link as in Valkey, plus the bytes queued on it.
    fn memory(&self) -> u64 {
        LINK_OVERHEAD + self.tx.queued.load(Ordering::Relaxed) as u64
    }
}

/// How long a change to the node table may wait before `nodes.conf` is written (unless an
/// epoch moved: see [`Bus::changed`]), so that a burst of changes costs one save.
const SAVE_DELAY_MS: i64 = 50;

/// The fixed memory of one link (see [`Link::memory`]).
const LINK_OVERHEAD: u64 = 4096 + std::mem::size_of::<Link>() as u64;

/// The sending side of a link: frames for its writer task, and how many bytes of them wait.
#[derive(Clone)]
struct LinkTx {
    tx: mpsc::UnboundedSender<Arc<Vec<u8>>>,
    queued: Arc<AtomicUsize>,
}

impl LinkTx {
    fn channel() -> (LinkTx, mpsc::UnboundedReceiver<Arc<Vec<u8>>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (LinkTx { tx, queued: Arc::new(AtomicUsize::new(0)) }, rx)
    }

    /// Queues a frame; the writer subtracts its length once it is written.
    fn send(&self, frame: Arc<Vec<u8>>) {
        let n = frame.len();
        // Added before sending, so that the writer never subtracts bytes not yet counted.
        self.queued.fetch_add(n, Ordering::Relaxed);
        if self.tx.send(frame).is_err() {
            self.queued.fetch_sub(n, Ordering::Relaxed);
        }
    }

    fn encode_and_send(&self, msg: &Message) {
        let mut buf = Vec::with_capacity(wire::encoded_len(msg));
        wire::encode(msg, &mut buf);
        self.send(Arc::new(buf));
    }
}

/// Time now, unix ms.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl Bus {
    /// A bus over `state`, saving to `conf_path`.
    pub fn new(
        state: Arc<Mutex<ClusterState>>,
        transport: Arc<dyn Transport>,
        conf_path: PathBuf,
        on_change: Box<dyn Fn(&ClusterState) + Send + Sync>,
        sink: Arc<dyn PubSubSink>,
    ) -> Arc<Bus> {
        Arc::new(Bus {
            state,
            transport,
            links: Mutex::new(Links::default()),
            next_serial: AtomicU64::new(1),
            dialing: Mutex::new(HashMap::new()),
            failures: Mutex::new(HashMap::new()),
            conf_path,
            saving: Mutex::new((u64::MAX, u64::MAX, u64::MAX)),
            wake: Notify::new(),
            on_change,
            sink,
            drop_filter: AtomicI64::new(-1),
            close_on_drop: AtomicBool::new(false),
            stop_gate: std::sync::OnceLock::new(),
            sendbuf_limit: AtomicU64::new(0),
            frame_gate: Mutex::new(()),
        })
    }

    /// `cluster-link-sendbuf-limit`, in bytes; 0 for none.
    pub fn set_sendbuf_limit(&self, bytes: u64) {
        self.sendbuf_limit.store(bytes, Ordering::Relaxed);
    }

    /// What the links take, as `INFO memory`'s `mem_cluster_links`: a fixed cost per link
    /// plus the bytes queued on it.
    pub fn links_memory(&self) -> u64 {
        let links = self.links.lock();
        links.outbound.values().chain(links.inbound.values()).map(Link::memory).sum()
    }

    /// Closes every link whose memory passed `cluster-link-sendbuf-limit` (a peer that stopped
    /// reading would otherwise make its queue grow without bound), and counts each in
    /// `total_cluster_links_buffer_limit_exceeded`, as Valkey's
    /// `clusterNodeCronFreeLinkOnBufferLimitReached` every cron. The links are dialled again.
    fn free_links_over_limit(&self) {
        let limit = self.sendbuf_limit.load(Ordering::Relaxed);
        if limit == 0 {
            return;
        }
        let over = |l: &Link| l.memory() > limit;
        let freed = {
            let mut links = self.links.lock();
            let Links { outbound, inbound } = &mut *links;
            let mut freed = 0;
            for map in [outbound, inbound] {
                map.retain(|id, l| {
                    if !over(l) {
                        return true;
                    }
                    warn!(node_id = %id, "Freeing cluster link ({} bytes) past cluster-link-sendbuf-limit", l.memory());
                    l.close.notify_one();
                    freed += 1;
                    false
                });
            }
            freed
        };
        if freed > 0 {
            self.state.lock().count_links_over_limit(freed);
        }
    }

    /// `DEBUG DROP-CLUSTER-PACKET-FILTER <type>`: drop received frames of Valkey's message type
    /// `kind` (0 ping, 1 pong, 2 meet, ... 10 publishshard), all of them for -2, none for -1.
    pub fn set_drop_filter(&self, kind: i64) {
        self.drop_filter.store(kind, Ordering::Relaxed);
    }

    /// `DEBUG CLOSE-CLUSTER-LINK-ON-PACKET-DROP <0|1>`: a dropped frame closes its link.
    pub fn set_close_on_drop(&self, on: bool) {
        self.close_on_drop.store(on, Ordering::Relaxed);
    }

    /// Whether the drop filter takes a frame of `kind`.
    fn filtered(&self, kind: Kind) -> bool {
        // Valkey numbers its module message 9, so its shard publish is 10.
        let valkey_type = if kind == Kind::PublishShard { 10 } else { kind as i64 };
        let filter = self.drop_filter.load(Ordering::Relaxed);
        filter == -2 || filter == valkey_type
    }

    /// Keeps the bus from applying any frame to the table until the guard drops. Valkey runs a
    /// MULTI/EXEC of CLUSTER commands between two turns of its one event loop, so no gossip
    /// lands between them; here the bus has a thread of its own, and redis-cli's `--cluster
    /// fix` makes a node a slot's owner with `MULTI, DELSLOTS s, ADDSLOTS s, BUMPEPOCH, EXEC`:
    /// a PING of the old owner read between the DELSLOTS and the ADDSLOTS gave the slot back
    /// to it, ADDSLOTS failed with "Slot s is already busy", and fix gave up with the slot
    /// still open. Hold it briefly: PINGs go unanswered meanwhile.
    pub fn hold_frames(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.frame_gate.lock()
    }

    /// The state, for CLUSTER commands (lock briefly; call [`Bus::changed`] after a change).
    pub fn state(&self) -> &Arc<Mutex<ClusterState>> {
        &self.state
    }

    /// A CLUSTER command changed the state: send what it queued, republish it at once, and
    /// save it.
    ///
    /// The save is made before this returns (so before the command replies) only when an
    /// epoch moved, which must be durable before anyone hears of it (a lost epoch or vote
    /// could let two nodes win one election). Any other change is saved by the bus thread
    /// [`SAVE_DELAY_MS`] later, off the client's path, together with whatever else changed
    /// meanwhile: redis-cli's reshard sends three SETSLOTs per slot to each of two nodes, and
    /// the PONG that spreads the new owner changes every other node's table too, so a save
    /// per change (a new temp file and a rename, each) was most of what a reshard waited for
    /// at a few keys per slot. A node killed inside that window restarts with its previous
    /// slot table, which gossip and UPDATE repair (ownership) and `--cluster fix` finishes
    /// (open slots).
    pub fn changed(&self) {
        // What the command queued goes on the links before the server acts on the change, as
        // in `after_change`: a takeover's PONGs, which announce a win the command made itself.
        // An epoch it moved is on the disk before any message carries it.
        self.save_if_epochs_moved();
        let outgoing = self.state.lock().take_outgoing(now_ms());
        self.send_outgoing(&outgoing);
        let pause = {
            let mut st = self.state.lock();
            st.take_view_changed();
            (self.on_change)(&st);
            st.take_pause_change().map(|p| (p, st.replication()))
        };
        apply_pause(&self.state, pause);
        self.wake.notify_one();
    }

    /// Saves `nodes.conf`, forced to the disk, if an epoch moved since the last save: before
    /// a message that carries the epoch leaves (a vote above all: a node that forgot it voted
    /// could vote twice in one epoch after a restart).
    fn save_if_epochs_moved(&self) {
        let epochs = epochs_of(&self.state.lock());
        if *self.saving.lock() != epochs
            && self.state.lock().is_dirty()
            && let Err(e) = self.save_now()
        {
            warn!(cause = %e, "could not save the cluster config file");
        }
    }

    /// Sends what the state queued: to one node, or to every node.
    fn send_outgoing(&self, msgs: &[(Target, Message)]) {
        for (target, msg) in msgs {
            match target {
                Target::Node(id) => self.send_to(id, msg),
                Target::All => self.broadcast(msg),
            }
        }
    }

    /// Saves `nodes.conf` now if the table changed since the last save (at shutdown: the
    /// bus thread may not have had its turn yet).
    pub fn flush(&self) {
        self.after_change(false);
        self.save_if_due(true);
    }

    /// Installs what stops the bus while the server is stopped (Valkey's DEBUG SLEEP stops its
    /// one event loop, the bus with it: no frame is read or answered, no PING leaves, and
    /// peers see the node go silent). The gate blocks its caller until the stop ends; the
    /// cron calls it on every turn, on the bus's own thread, so every task of the bus waits.
    pub fn set_stop_gate(&self, gate: StopGate) {
        let _ = self.stop_gate.set(gate);
    }

    /// Runs the cron's turn now (a stop began: the bus should stop at once, not at its next
    /// tick).
    pub fn nudge(&self) {
        self.wake.notify_one();
    }

    /// Starts the listener and the cron on the current runtime.
    pub fn start(self: &Arc<Self>, listeners: Vec<std::net::TcpListener>) -> io::Result<()> {
        for l in listeners {
            l.set_nonblocking(true)?;
            let l = TcpListener::from_std(l)?;
            tokio::spawn(self.clone().accept_loop(l));
        }
        tokio::spawn(self.clone().cron());
        self.after_change(true);
        self.save_if_due(true);
        Ok(())
    }

    /// Sends `msg` to every node with an outbound link.
    pub fn broadcast(&self, msg: &Message) {
        let mut buf = Vec::with_capacity(wire::encoded_len(msg));
        wire::encode(msg, &mut buf);
        let frame = Arc::new(buf);
        for link in self.links.lock().outbound.values() {
            link.tx.send(frame.clone());
        }
    }

    /// Sends a message published on this node to the nodes that must see it, as Valkey's
    /// `clusterPropagatePublish`: PUBLISH (`shard` false) to every other node, PUBLISHSHARD to
    /// the other nodes of this node's shard. The server calls it from PUBLISH and SPUBLISH after
    /// delivering locally; a message that arrived over the bus is delivered, never sent on. The
    /// state is locked only to copy the header; the frame is encoded outside the lock and
    /// queued on the links, without waiting for any socket.
    pub fn publish(&self, channel: &[u8], message: &[u8], shard: bool) {
        let kind = if shard { Kind::PublishShard } else { Kind::Publish };
        let mut targets = Vec::new();
        let Some(header) = self.state.lock().publish_header(kind, &mut targets) else { return };
        let len = wire::publish_frame_len(&header, channel.len(), message.len());
        if len > wire::MAX_FRAME as usize {
            // The other nodes would drop the link over it; the local subscribers had it.
            warn!(bytes = len, "a published message is too large for the cluster bus, delivered on this node only");
            return;
        }
        let mut buf = Vec::with_capacity(len);
        wire::encode_publish(kind, &header, channel, message, &mut buf);
        let frame = Arc::new(buf);
        let links = self.links.lock();
        for id in &targets {
            if let Some(link) = links.outbound.get(id) {
                link.tx.send(frame.clone());
            }
        }
    }

    /// Every link to or from a node this one knows, by node id, `to` before `from`
    /// (`CLUSTER LINKS`). Links to nodes forgotten since they were made are left out, as
    /// Valkey lists the links of the nodes in its table.
    pub fn links(&self) -> Vec<LinkInfo> {
        let info = |node: &NodeId, link: &Link, inbound| LinkInfo {
            node: *node,
            inbound,
            created_ms: link.created_ms,
            send_queued: link.tx.queued.load(Ordering::Relaxed),
        };
        let mut out: Vec<LinkInfo> = {
            let links = self.links.lock();
            let to = links.outbound.iter().map(|(id, l)| info(id, l, false));
            let mut out: Vec<LinkInfo> = to.chain(links.inbound.iter().map(|(id, l)| info(id, l, true))).collect();
            let dialing = self.dialing.lock();
            let connecting = dialing.iter().filter(|(id, _)| !links.outbound.contains_key(id));
            out.extend(connecting.map(|(id, at)| LinkInfo {
                node: *id,
                inbound: false,
                created_ms: *at,
                send_queued: 0,
            }));
            out
        };
        {
            let st = self.state.lock();
            out.retain(|l| st.node(&l.node).is_some());
        }
        out.sort_by_key(|l| (l.node, l.inbound));
        out
    }

    /// Closes this node's links with `node`: the one it opened (`to`), the one `node` opened
    /// (`from`), or both, at once and before anything else is sent on them (`DEBUG CLUSTERLINK
    /// KILL`, which Valkey's tests use to lose messages on purpose). Closed links are dialled
    /// again as usual.
    pub fn kill_links(&self, node: &NodeId, to: bool, from: bool) {
        let mut links = self.links.lock();
        let outbound = if to { links.outbound.remove(node) } else { None };
        let inbound = if from { links.inbound.remove(node) } else { None };
        for link in outbound.iter().chain(inbound.iter()) {
            link.close.notify_one();
        }
    }

    fn send_to(&self, id: &NodeId, msg: &Message) {
        if let Some(link) = self.links.lock().outbound.get(id) {
            link.tx.encode_and_send(msg);
        }
    }

    fn next_serial(&self) -> u64 {
        self.next_serial.fetch_add(1, Ordering::Relaxed)
    }

    /// Lets the link writers (tasks of this same runtime) put what was just queued on the
    /// wire before [`Bus::after_change`] hands a changed table to the server. The server acts
    /// on it at once, on its own threads: a replica that won an election answers INFO as a
    /// primary. Had the bus thread been preempted before its writers ran, a client could see
    /// the new role while the PONGs announcing the win were still queued here, and a process
    /// frozen then (Valkey's unit/cluster/failover2 does exactly that) leaves the cluster
    /// believing the old primary's shard has no new one: its sibling's election for the old
    /// primary gets no votes and expires. Valkey cannot show the role before those writes,
    /// as one event loop serves both. Only when the table changed, to keep PINGs cheap.
    async fn writers_first(&self) {
        if self.state.lock().view_change_pending() {
            tokio::task::yield_now().await;
        }
    }

    /// Saves `nodes.conf` when the table changed (once the change is [`SAVE_DELAY_MS`] old),
    /// and tells the server when what routing depends on changed. This runs after every frame
    /// and every tick, so it does nothing when nothing changed: the server's rebuild walks all
    /// 16384 slots, and an fsync per frame or a rebuild after every PING kept the bus thread
    /// busy enough, in a loaded debug build, to answer PINGs a second late (and get healthy
    /// nodes flagged fail?). `publish` forces the rebuild: a CLUSTER command may change what
    /// the table does not track.
    fn after_change(&self, publish: bool) {
        let (pause, lost) = {
            let mut st = self.state.lock();
            if st.take_view_changed() || publish {
                (self.on_change)(&st);
            }
            let lost = st.take_dirty_slots();
            let lost = (!lost.is_empty())
                .then(|| (lost, st.myself().id, st.myself().human_nodename.clone(), st.replication()));
            (st.take_pause_change().map(|p| (p, st.replication())), lost)
        };
        self.save_if_due(false);
        // After the routing snapshot: writes a failover's end releases must see that this node
        // no longer serves the slots, and clients asking for keys of a lost slot already get
        // MOVED while its keys are deleted.
        apply_pause(&self.state, pause);
        if let Some((slots, me, name, hooks)) = lost {
            for slot in slots {
                if hooks.keys_in_slot(slot) > 0 {
                    // Only a primary has dirty slots: its shard is named by itself.
                    info!("Deleting keys in dirty slot {slot} on node {me} ({name}) in shard {me}");
                    hooks.delete_keys_in_slot(slot);
                }
            }
        }
    }

    /// Saves `nodes.conf` if the table has changes older than [`SAVE_DELAY_MS`], or any
    /// changes at all when `now`; starts the delay at a change seen for the first time.
    fn save_if_due(&self, now: bool) {
        let Some((age, first_seen)) = self.state.lock().unsaved_for(now_ms()) else { return };
        if !now && age < SAVE_DELAY_MS {
            if first_seen {
                // The cron may be asleep for up to a second: it must wake for the save.
                self.wake.notify_one();
            }
            return;
        }
        if let Err(e) = self.save_now() {
            warn!(cause = %e, "could not save the cluster config file");
        }
    }

    /// How long the cron may sleep before a delayed save is due, if one is waiting.
    fn save_due_in(&self, now: i64) -> Option<Duration> {
        let age = self.state.lock().unsaved_age(now)?;
        Some(Duration::from_millis((SAVE_DELAY_MS - age).max(0) as u64))
    }

    /// Writes `nodes.conf` now (CLUSTER SAVECONFIG, and every change). Saves are serialised
    /// and each takes the table as it is once its turn comes: the bus thread and a CLUSTER
    /// command on a worker may save at once, and they share the temp file, so unserialised
    /// saves could interleave their bytes, or an older table could be renamed in last.
    ///
    /// The file is renamed into place every time, but forced to the disk (fsync) only when an
    /// epoch changed, as Valkey fsyncs only for those: a lost epoch or vote could let two
    /// nodes win one election, while a lost slot move is repaired by gossip and UPDATE. An
    /// fsync per SETSLOT made a 2000-slot reshard take minutes.
    pub fn save_now(&self) -> Result<(), nodes_conf::ConfError> {
        let mut synced = self.saving.lock();
        let (saved, epochs) = {
            let mut st = self.state.lock();
            // What is rendered here is saved: a change after this marks the table again.
            st.take_dirty();
            (st.saved(), epochs_of(&st))
        };
        let fsync = epochs != *synced;
        nodes_conf::save(&self.conf_path, &saved, fsync)?;
        if fsync {
            *synced = epochs;
        }
        Ok(())
    }

    /// The bus's periodic work: pings, failure detection, dials. It sleeps until the state says
    /// the next tick is due (100 ms to 1 s, [`ClusterState::next_tick_in`]), or until a CLUSTER
    /// command wakes it: an idle node wakes about once a second, not at a fixed 10 Hz.
    async fn cron(self: Arc<Self>) {
        let mut wait = Duration::from_millis(100);
        loop {
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake.notified() => {}
            }
            if let Some(gate) = self.stop_gate.get() {
                (gate.0)();
            }
            let now = now_ms();
            let (pings, outgoing, targets, silent, timeout) = {
                let mut st = self.state.lock();
                let pings = st.tick(now);
                let outgoing = st.take_outgoing(now);
                wait = Duration::from_millis(st.next_tick_in(now) as u64);
                (pings, outgoing, st.link_targets(), st.silent_links(now), st.settings().node_timeout_ms)
            };
            self.save_if_epochs_moved();
            for (id, msg) in &pings {
                self.send_to(id, msg);
            }
            self.send_outgoing(&outgoing);
            self.close_links_to_strangers();
            self.close_silent(&silent, now, timeout);
            self.free_links_over_limit();
            for (id, ip, port) in targets {
                self.dial_if_needed(id, &ip, port, now);
            }
            self.writers_first().await;
            self.after_change(false);
            if let Some(due) = self.save_due_in(now_ms()) {
                wait = wait.min(due);
            }
        }
    }

    /// Closes the outbound links to nodes no longer in the table (forgotten, or a handshake
    /// given up): nothing is sent to them any more, and Valkey frees a deleted node's links.
    fn close_links_to_strangers(&self) {
        // One lock at a time: the link registry is never held while the state is taken.
        let mut ids: Vec<NodeId> = self.links.lock().outbound.keys().copied().collect();
        {
            let st = self.state.lock();
            ids.retain(|id| st.node(id).is_none());
        }
        let mut links = self.links.lock();
        for id in ids {
            if let Some(link) = links.outbound.remove(&id) {
                link.close.notify_one();
            }
        }
    }

    /// Closes the outbound links to `silent` nodes (waiting for a PONG for over half the node
    /// timeout, with nothing at all heard from them meanwhile) that are older than the node
    /// timeout, to be dialled again at the next tick, as Valkey's `clusterCron` does: a link
    /// whose network lost it (a middlebox dropped its state, a partition outlived a socket)
    /// stays open and silent forever, and the node behind it would never be heard again even
    /// once it is reachable. The age check keeps a node that is really down from being
    /// redialled at every tick.
    fn close_silent(&self, silent: &[NodeId], now: i64, timeout: i64) {
        let links = self.links.lock();
        for id in silent {
            if let Some(link) = links.outbound.get(id).filter(|l| now - l.created_ms > timeout) {
                debug!(node_id = %id, "closing a silent bus link to dial again");
                link.close.notify_one();
            }
        }
    }

    fn dial_if_needed(self: &Arc<Self>, id: NodeId, ip: &str, port: u16, now: i64) {
        if self.links.lock().outbound.contains_key(&id) || self.dialing.lock().contains_key(&id) {
            return;
        }
        // A link the network failed is dialled again at the next tick, as Valkey's cron does:
        // waiting longer lets a pending PING outlive the node timeout across a short
        // partition, and the node is failed after the network came back. A node that refused
        // us is tried again once a second: only a new certificate or setting changes its
        // answer, and each try logs a refused handshake on its side too.
        let retry_ms = |f: &Failure| if f.refused { REFUSED_RETRY_MS } else { NETWORK_RETRY_MS };
        if self.failures.lock().get(&id).is_some_and(|f| now - f.at < retry_ms(f)) {
            return;
        }
        let Ok(ip) = ip.parse::<std::net::IpAddr>() else { return };
        self.dialing.lock().insert(id, now);
        tokio::spawn(self.clone().outbound(id, SocketAddr::new(ip, port)));
    }

    async fn outbound(self: Arc<Self>, id: NodeId, addr: SocketAddr) {
        let created_ms = now_ms();
        let stream = self.transport.connect(addr, id).await;
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                self.dialing.lock().remove(&id);
                self.dial_failed(id, addr, &e, 0);
                return;
            }
        };
        let (tx, rx) = LinkTx::channel();
        let serial = self.next_serial();
        let first = {
            let mut st = self.state.lock();
            st.link_up(&id, serial, now_ms())
        };
        let Some(first) = first else {
            self.dialing.lock().remove(&id);
            return;
        };
        let close = Arc::new(Notify::new());
        self.links.lock().outbound.insert(id, Link { tx: tx.clone(), created_ms, serial, close: close.clone() });
        // Only now, with the link registered, may the cron dial `id` again: between the two it
        // saw neither and dialled a second link.
        self.dialing.lock().remove(&id);
        tx.encode_and_send(&first);
        let (reader, writer) = tokio::io::split(stream);
        let writing = tokio::spawn(write_frames(writer, rx, tx.queued.clone()));
        let mut link_id = id;
        let mut answered = false;
        let result = tokio::select! {
            r = self.read_frames(reader, Some(&mut link_id), addr, &mut answered) => r,
            _ = close.notified() => Ok(()),
        };
        writing.abort();
        {
            let mut links = self.links.lock();
            if links.outbound.get(&link_id).is_some_and(|l| l.serial == serial) {
                links.outbound.remove(&link_id);
            }
        }
        if answered {
            if let Err(e) = result {
                debug!(node_id = %link_id, cause = %e, "bus link closed");
            }
            self.state.lock().link_down(&link_id, serial);
            return;
        }
        // Nothing came back: the other end refused the link (our certificate, under TLS 1.3)
        // or cannot speak to us. That is a failed dial: logged once per reason, and retried as
        // its cause says (see `dial_if_needed`).
        match result {
            Err(e) => self.dial_failed(link_id, addr, &self.transport.refused(&e), serial),
            Ok(()) => self.dial_failed_quietly(link_id, "closed before the first message", serial),
        }
    }

    /// A dial to `id` failed, or link `serial` (0: none was made) closed before any answer.
    fn dial_failed(&self, id: NodeId, addr: SocketAddr, e: &LinkError, serial: u64) {
        let reason = &e.reason;
        if self.record_failure(id, reason, e.refused) {
            debug!(node_id = %id, "bus link to {addr} failed again: {reason}");
        } else {
            warn!("Cluster: the {} to node {id} at {addr} failed: {reason}", self.transport.link_name());
        }
        self.state.lock().link_down(&id, serial);
    }

    /// A failed dial whose reason was already logged (a frame too large, say).
    fn dial_failed_quietly(&self, id: NodeId, reason: &str, serial: u64) {
        // A link closed cleanly before its first frame: a node shutting down, a middlebox
        // dropping connections. A refusal of our certificate comes as an alert, an error.
        self.record_failure(id, reason, false);
        debug!(node_id = %id, "bus link failed: {reason}");
        self.state.lock().link_down(&id, serial);
    }

    /// Remembers when and why a dial to `id` failed; returns whether it failed for that same
    /// reason last time.
    fn record_failure(&self, id: NodeId, reason: &str, refused: bool) -> bool {
        let mut failures = self.failures.lock();
        let repeated = failures.get(&id).is_some_and(|f| f.reason == reason);
        failures.insert(id, Failure { at: now_ms(), reason: reason.to_owned(), refused });
        repeated
    }

    async fn accept_loop(self: Arc<Self>, listener: TcpListener) {
        loop {
            let (tcp, peer) = match listener.accept().await {
                Ok(c) => c,
                Err(e) => {
                    warn!(cause = %e, "Error accepting cluster node connection");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let bus = self.clone();
            let local = tcp.local_addr().map(|a| a.ip().to_string()).unwrap_or_default();
            tokio::spawn(async move {
                let stream = match bus.transport.accept(tcp, peer).await {
                    Ok(s) => s,
                    Err(e) => {
                        warn!("Error accepting cluster node connection: {e}");
                        return;
                    }
                };
                let (reader, writer) = tokio::io::split(stream);
                let (tx, rx) = LinkTx::channel();
                let writing = tokio::spawn(write_frames(writer, rx, tx.queued.clone()));
                let close = Arc::new(Notify::new());
                let link = Link { tx, created_ms: now_ms(), serial: bus.next_serial(), close: close.clone() };
                let mut named = None;
                let result = tokio::select! {
                    r = bus.read_inbound(reader, &link, peer, &local, &mut named) => r,
                    _ = close.notified() => Ok(()),
                };
                if let Err(e) = result {
                    debug!(%peer, cause = %e, "inbound bus link closed");
                }
                writing.abort();
                bus.drop_inbound(named, link.serial);
            });
        }
    }

    /// Reads an inbound link. Once a frame names a node this one knows, the link is
    /// registered as that node's (`named`), for CLUSTER LINKS; its `close` closes it early.
    async fn read_inbound(
        &self,
        reader: tokio::io::ReadHalf<Box<dyn BusStream>>,
        link: &Link,
        peer: SocketAddr,
        local_ip: &str,
        named: &mut Option<NodeId>,
    ) -> io::Result<()> {
        let peer_ip = peer.ip().to_string();
        self.frames(reader, peer, None, |bus, msg| {
            let sender = msg.header.sender;
            let now = now_ms();
            let (out, known, outgoing) = {
                let _gate = bus.frame_gate.lock();
                let mut st = bus.state.lock();
                let out = st.receive(msg, None, &peer_ip, Some(local_ip), now);
                (out, st.node(&sender).is_some(), st.take_outgoing(now))
            };
            if named.is_none() && known && !out.close {
                *named = Some(sender);
                bus.name_inbound(sender, link.clone());
            }
            bus.save_if_epochs_moved();
            for reply in &out.reply {
                link.tx.encode_and_send(reply);
            }
            bus.send_outgoing(&outgoing);
            bus.carry_out(out.broadcast, out.publish);
            !out.close
        })
        .await
    }

    /// Registers an inbound link as `node`'s. Valkey keeps one inbound link per node: a node
    /// that reconnected may be heard on its new link before its old one is seen to close, so
    /// the old one (most likely stale) is closed.
    fn name_inbound(&self, node: NodeId, link: Link) {
        let old = self.links.lock().inbound.insert(node, link);
        if let Some(old) = old {
            debug!(node_id = %node, "replacing the inbound bus link from {node}");
            old.close.notify_one();
        }
    }

    /// An inbound link closed: it leaves the registry, unless a newer link replaced it there.
    fn drop_inbound(&self, named: Option<NodeId>, serial: u64) {
        let Some(node) = named else { return };
        let mut links = self.links.lock();
        if links.inbound.get(&node).is_some_and(|l| l.serial == serial) {
            links.inbound.remove(&node);
        }
    }

    /// Does what a frame asked beyond a reply: broadcasts, and local delivery of a message
    /// another node published (never sent on: its publisher sent it to every node concerned).
    fn carry_out(&self, broadcast: Vec<Message>, publish: Option<crate::state::Published>) {
        for b in &broadcast {
            self.broadcast(b);
        }
        if let Some(p) = publish {
            self.sink.deliver(&p.channel, &p.message, p.shard);
        }
    }

    /// Reads an outbound link's frames; `answered` is set once the first one arrives (the
    /// link works: a later dial failure is news again).
    async fn read_frames(
        &self,
        reader: tokio::io::ReadHalf<Box<dyn BusStream>>,
        link_id: Option<&mut NodeId>,
        peer: SocketAddr,
        answered: &mut bool,
    ) -> io::Result<()> {
        let known = link_id.as_deref().copied();
        let mut id = link_id;
        let peer_ip = peer.ip().to_string();
        self.frames(reader, peer, known, |bus, msg| {
            let Some(link) = id.as_deref_mut() else { return false };
            if !*answered {
                *answered = true;
                bus.failures.lock().remove(link);
            }
            let now = now_ms();
            let (out, outgoing) = {
                let _gate = bus.frame_gate.lock();
                let mut st = bus.state.lock();
                let out = st.receive(msg, Some(*link), &peer_ip, None, now);
                (out, st.take_outgoing(now))
            };
            bus.save_if_epochs_moved();
            bus.send_outgoing(&outgoing);
            if let Some((old, new)) = out.renamed {
                let mut links = bus.links.lock();
                if let Some(l) = links.outbound.remove(&old) {
                    links.outbound.insert(new, l);
                }
                *link = new;
            }
            bus.carry_out(out.broadcast, out.publish);
            !out.close
        })
        .await
    }

    /// Reads frames until the link closes or misbehaves, handing each to `handle` (which
    /// returns false to close the link). The buffer grows with what arrives, never with a
    /// declared length.
    async fn frames(
        &self,
        mut reader: tokio::io::ReadHalf<Box<dyn BusStream>>,
        peer: SocketAddr,
        known: Option<NodeId>,
        mut handle: impl FnMut(&Self, Message) -> bool,
    ) -> io::Result<()> {
        let mut buf: Vec<u8> = Vec::with_capacity(4096);
        // Who is at the other end, for the log: the node an outbound link was opened to, then
        // whoever the frames say.
        let mut sender = known;
        loop {
            match wire::decode(&buf) {
                Ok(Some((msg, used))) => {
                    sender = Some(msg.header.sender);
                    buf.drain(..used);
                    if self.filtered(msg.kind) {
                        // Counted as received, as Valkey counts a frame before its debug filter.
                        self.state.lock().count_received(msg.kind);
                        if self.close_on_drop.load(Ordering::Relaxed) {
                            warn!("Closing link for matching packet type {}", msg.kind as u16);
                            return Ok(());
                        }
                        warn!("Dropping packet that matches debug drop filter");
                        continue;
                    }
                    let publish = matches!(msg.kind, Kind::Publish | Kind::PublishShard);
                    let keep = handle(self, msg);
                    // A published message changes nothing the server's routing snapshot holds,
                    // and rebuilding that (16384 slots) per message would cost publishers
                    // dearly; an epoch it taught is saved by the next tick's check.
                    if !publish {
                        self.writers_first().await;
                        self.after_change(false);
                    }
                    if !keep {
                        return Ok(());
                    }
                    continue;
                }
                Ok(None) => {}
                Err(WireError::TooLarge(n)) => {
                    let who = sender.map_or_else(|| peer.to_string(), |s| s.to_string());
                    warn!("Cluster link message too large from {who}: {n} bytes");
                    return Ok(());
                }
                Err(e) => {
                    warn!(%peer, cause = %e, "dropping a bus link that sent a bad frame");
                    return Ok(());
                }
            }
            if buf.capacity() - buf.len() < 1024 {
                buf.reserve(buf.len().max(4096));
            }
            let n = reader.read_buf(&mut buf).await?;
            if n == 0 {
                return Ok(());
            }
        }
    }
}

/// Writes a link's frames as they are queued; `queued` counts the bytes still waiting.
async fn write_frames(
    mut writer: tokio::io::WriteHalf<Box<dyn BusStream>>,
    mut rx: mpsc::UnboundedReceiver<Arc<Vec<u8>>>,
    queued: Arc<AtomicUsize>,
) {
    while let Some(frame) = rx.recv().await {
        if writer.write_all(&frame).await.is_err() {
            return;
        }
        queued.fetch_sub(frame.len(), Ordering::Relaxed);
        // Everything queued meanwhile goes in the same flush.
        while let Ok(more) = rx.try_recv() {
            if writer.write_all(&more).await.is_err() {
                return;
            }
            queued.fetch_sub(more.len(), Ordering::Relaxed);
        }
        if writer.flush().await.is_err() {
            return;
        }
    }
}

/// Blocks the calling thread while the server is stopped (see [`Bus::set_stop_gate`]).
#[derive(Clone)]
pub struct StopGate(pub Arc<dyn Fn() + Send + Sync>);

/// Logs what the bus listens on.
pub fn log_listening(addrs: &[SocketAddr]) {
    for a in addrs {
        info!("Cluster bus listening on {a}");
    }
}

/// Makes a write pause change the state asked for, with the hooks that carry it out.
fn apply_pause(
    state: &Mutex<ClusterState>,
    change: Option<(PauseChange, std::sync::Arc<dyn crate::state::ReplicationHooks>)>,
) {
    match change {
        Some((PauseChange::Pause { until_ms }, hooks)) => {
            hooks.pause_writes(until_ms);
            state.lock().pause_applied();
        }
        Some((PauseChange::Unpause, hooks)) => hooks.unpause_writes(),
        None => {}
    }
}

/// The epochs a save must make durable: current, last vote, this node's config epoch.
fn epochs_of(st: &ClusterState) -> (u64, u64, u64) {
    (st.current_epoch(), st.last_vote_epoch(), st.myself().config_epoch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::ClientKind;
    use crate::state::Settings;

    /// A delivered message: channel, message, shard.
    type Seen = (String, String, bool);

    /// A sink that records what it is handed.
    #[derive(Default)]
    struct Recorder(Mutex<Vec<Seen>>);

    impl PubSubSink for Recorder {
        fn deliver(&self, channel: &[u8], message: &[u8], shard: bool) {
            let text = |b: &[u8]| String::from_utf8_lossy(b).into_owned();
            self.0.lock().push((text(channel), text(message), shard));
        }
    }

    fn node(bus_port: u16, port: u16, sink: Arc<dyn PubSubSink>) -> (Arc<Bus>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("hotkv-bus-{}-{bus_port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = Settings {
            // Nothing here tests failure detection: a long timeout keeps a busy machine (these
            // tests run side by side) from flapping nodes to FAIL while a test waits for `ok`.
            node_timeout_ms: 5000,
            require_full_coverage: true,
            allow_reads_when_down: false,
            allow_pubsubshard_when_down: true,
            announce_ip: String::new(),
            port,
            tls_port: 0,
            bus_port,
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
        let state = Arc::new(Mutex::new(ClusterState::fresh(cfg)));
        (Bus::new(state, Arc::new(PlainTransport), dir.join("nodes.conf"), Box::new(|_| {}), sink), dir)
    }

    #[tokio::test]
    async fn a_dial_the_network_failed_is_retried_at_the_next_tick_a_refused_one_a_second_later() {
        let (bus, dir) = node(1, 7000, Arc::new(Recorder::default()));
        let (down, refusing) = (NodeId::random(), NodeId::random());
        let failed_at = 1_000_000;
        {
            let mut failures = bus.failures.lock();
            let failure = |refused| Failure { at: failed_at, reason: "because".into(), refused };
            failures.insert(down, failure(false));
            failures.insert(refusing, failure(true));
        }
        // Port 1 on loopback: any dial that is made fails at once, and is not looked at here.
        let dialled = |id: &NodeId, now: i64| {
            bus.dial_if_needed(*id, "127.0.0.1", 1, now);
            bus.dialing.lock().remove(id).is_some()
        };
        let tick = failed_at + NETWORK_RETRY_MS;
        assert!(!dialled(&down, failed_at + 10));
        assert!(dialled(&down, tick));
        assert!(!dialled(&refusing, tick));
        assert!(!dialled(&refusing, failed_at + REFUSED_RETRY_MS - 1));
        assert!(dialled(&refusing, failed_at + REFUSED_RETRY_MS));
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn the_routing_snapshot_is_rebuilt_only_when_the_table_or_cluster_state_changed() {
        let dir = std::env::temp_dir().join(format!("hotkv-bus-publish-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = Settings {
            node_timeout_ms: 1000,
            require_full_coverage: true,
            allow_reads_when_down: false,
            announce_ip: String::new(),
            port: 7000,
            tls_port: 0,
            bus_port: 17000,
            hostname: String::new(),
            human_nodename: String::new(),
            client_ipv4: String::new(),
            client_ipv6: String::new(),
            allow_pubsubshard_when_down: true,
            preferred_endpoint: Default::default(),
            replica_validity_factor: 10,
            repl_ping_period_ms: 10_000,
            replica_no_failover: false,
            allow_replica_migration: true,
            migration_barrier: 1,
            ping_interval_ms: 0,
        };
        let state = Arc::new(Mutex::new(ClusterState::fresh(cfg)));
        let published = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = published.clone();
        let on_change = Box::new(move |_: &ClusterState| {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let bus =
            Bus::new(state, Arc::new(PlainTransport), dir.join("nodes.conf"), on_change, Arc::new(Recorder::default()));
        let seen = || published.load(std::sync::atomic::Ordering::Relaxed);
        // A CLUSTER command always republishes (it may change what the table does not track).
        bus.changed();
        assert_eq!(seen(), 1);
        // A tick or a frame that changed nothing does not.
        bus.state().lock().tick(now_ms());
        bus.after_change(false);
        assert_eq!(seen(), 1);
        // A changed table does, once; so does cluster_state turning ok.
        bus.state().lock().add_slots(&(0..16384).collect::<Vec<_>>()).unwrap();
        bus.after_change(false);
        assert_eq!(seen(), 2);
        assert!(bus.state().lock().is_ok());
        bus.after_change(false);
        assert_eq!(seen(), 2);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn listener() -> (std::net::TcpListener, u16) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        (l, port)
    }

    /// Polls `cond` until it holds, failing the test after 20 s with `what` and the tables.
    async fn wait_until(what: &str, buses: &[(Arc<Bus>, std::path::PathBuf, u16)], mut cond: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !cond() {
            if std::time::Instant::now() >= deadline {
                let tables: Vec<String> =
                    buses.iter().map(|(b, _, _)| b.state().lock().nodes_text(ClientKind::default())).collect();
                panic!("timed out waiting for {what}:\n{}", tables.join("\n"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Three primaries over real sockets, each with `sinks[i]`, joined through node 0 and
    /// linked both ways: (bus, its directory, its bus port).
    async fn joined(sinks: &[Arc<Recorder>]) -> Vec<(Arc<Bus>, std::path::PathBuf, u16)> {
        let mut buses = Vec::new();
        for (i, sink) in sinks.iter().enumerate() {
            let (l, port) = listener();
            let (bus, dir) = node(port, 7000 + i as u16, sink.clone());
            bus.start(vec![l]).unwrap();
            let ranges = [(0u16, 5460u16), (5461, 10922), (10923, 16383)][i];
            bus.state().lock().add_slots(&(ranges.0..=ranges.1).collect::<Vec<_>>()).unwrap();
            bus.changed();
            buses.push((bus, dir, port));
        }
        let first_bus_port = buses[0].2;
        for (bus, _, _) in &buses[1..] {
            bus.state().lock().meet("127.0.0.1", 7000, first_bus_port, now_ms()).unwrap();
            bus.changed();
        }
        let joined = || {
            buses.iter().all(|(b, _, _)| {
                let st = b.state().lock();
                st.is_ok()
                    && st.nodes().len() == 3
                    && st.nodes().iter().all(|n| (n.link_connected || n.id == st.myself_id()) && n.ip == "127.0.0.1")
            })
        };
        wait_until("three nodes to join", &buses, joined).await;
        buses
    }

    fn clean_up(buses: &[(Arc<Bus>, std::path::PathBuf, u16)]) {
        for (_, dir, _) in buses {
            let _ = std::fs::remove_dir_all(dir);
        }
    }

    impl Recorder {
        fn seen(&self) -> Vec<Seen> {
            self.0.lock().clone()
        }

        fn has(&self, message: &str) -> bool {
            self.seen().iter().any(|(_, m, _)| m == message)
        }
    }

    fn publish(channel: &str, message: &str) -> Seen {
        (channel.into(), message.into(), false)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_join_over_real_sockets_and_save_their_table() {
        let sinks: Vec<Arc<Recorder>> = (0..3).map(|_| Arc::default()).collect();
        let buses = joined(&sinks).await;
        // Every node saves a table naming all three, which loads back (SAVECONFIG: a change
        // alone is saved a moment later).
        for (bus, dir, _) in &buses {
            bus.save_now().unwrap();
            let saved = nodes_conf::load(&dir.join("nodes.conf")).unwrap().unwrap();
            assert_eq!(saved.nodes.len(), 3);
        }
        clean_up(&buses);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_publish_reaches_every_other_node_once_and_goes_no_further() {
        let sinks: Vec<Arc<Recorder>> = (0..3).map(|_| Arc::default()).collect();
        let buses = joined(&sinks).await;
        let bus = |i: usize| &buses[i].0;
        bus(1).publish(b"news", b"hello", false);
        bus(1).publish(b"news", b"again", false);
        // Three primaries: a shard of one, so an SPUBLISH goes nowhere.
        bus(1).publish(b"{a}x", b"solo", true);
        bus(1).publish(b"end", b"from 1", false);
        wait_until("node 1's messages", &buses, || sinks[0].has("from 1") && sinks[2].has("from 1")).await;
        // Had node 0 or 2 sent node 1's messages on, the copies would be queued on their links
        // ahead of these.
        bus(0).publish(b"end", b"from 0", false);
        bus(2).publish(b"end", b"from 2", false);
        wait_until("the last messages", &buses, || {
            sinks[1].seen().len() == 2 && sinks[0].has("from 2") && sinks[2].has("from 0")
        })
        .await;
        let from_1 = [publish("news", "hello"), publish("news", "again"), publish("end", "from 1")];
        assert_eq!(sinks[0].seen(), [&from_1[..], &[publish("end", "from 2")]].concat());
        assert_eq!(sinks[2].seen(), [&from_1[..], &[publish("end", "from 0")]].concat());
        let mut heard_by_1 = sinks[1].seen();
        heard_by_1.sort();
        assert_eq!(heard_by_1, [publish("end", "from 0"), publish("end", "from 2")]);
        let info = bus(1).state().lock().info_text();
        assert!(info.contains("cluster_stats_messages_publish_sent:6\r\n"), "{info}");
        assert!(info.contains("cluster_stats_messages_publish_received:2\r\n"), "{info}");
        assert!(!info.contains("publishshard"), "{info}");
        clean_up(&buses);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_node_lists_a_link_each_way_to_every_other() {
        let start = now_ms();
        let sinks: Vec<Arc<Recorder>> = (0..3).map(|_| Arc::default()).collect();
        let buses = joined(&sinks).await;
        let ids: Vec<NodeId> = buses.iter().map(|(b, _, _)| b.state().lock().myself_id()).collect();
        // A link shows up inbound once a frame from its node arrived on it, and nothing stays
        // queued on a link whose peer reads.
        let settled = |b: &Arc<Bus>| b.links().len() == 4 && b.links().iter().all(|l| l.send_queued == 0);
        wait_until("links both ways", &buses, || buses.iter().all(|(b, _, _)| settled(b))).await;
        for (i, (bus, _, _)) in buses.iter().enumerate() {
            let mut others: Vec<NodeId> = ids.iter().copied().filter(|id| *id != ids[i]).collect();
            others.sort();
            let links = bus.links();
            let seen: Vec<(NodeId, &str)> = links.iter().map(|l| (l.node, l.direction())).collect();
            assert_eq!(seen, [(others[0], "to"), (others[0], "from"), (others[1], "to"), (others[1], "from")]);
            for l in &links {
                assert!(l.created_ms >= start && l.created_ms <= now_ms(), "{l:?}");
                assert_eq!(l.events(), "r");
            }
        }
        clean_up(&buses);
    }

    /// A fourth node, whose bus runs as the server runs it: alone on a current-thread runtime
    /// of its own thread. `on_change` stands for its server's hook.
    fn replica_on_its_own_thread(
        on_change: Box<dyn Fn(&ClusterState) + Send + Sync>,
    ) -> (Arc<Bus>, std::path::PathBuf, u16) {
        let (l, port) = listener();
        let (scratch, dir) = node(port, 7003, Arc::new(Recorder::default()));
        let state = scratch.state().clone();
        let bus = Bus::new(state, Arc::new(PlainTransport), dir.join("nodes.conf"), on_change, scratch.sink.clone());
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let started = bus.clone();
        std::thread::spawn(move || {
            runtime.block_on(async move {
                started.start(vec![l]).unwrap();
                std::future::pending::<()>().await
            })
        });
        (bus, dir, port)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_failover_winner_has_told_the_others_before_its_server_acts_on_it() {
        // Valkey's unit/cluster/failover2 freezes a replica as soon as INFO says it won, and
        // then expects its sibling to replace it: the others must have heard the win by then,
        // or the sibling runs an election for the old primary that cannot get votes. The
        // server switches roles in its change hook, so the hook here waits for the others to
        // learn the win; the bus thread is busy in it, as a preempted or frozen one would be.
        winner_tells_the_others_first(crate::state::FailoverMode::Force).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_takeover_is_on_the_links_before_the_server_acts_on_it() {
        // The same for CLUSTER FAILOVER TAKEOVER, whose win is made by the command itself:
        // `Bus::changed` queues the PONGs that announce it before the hook runs (on the
        // command's thread here, as on a worker's in the server).
        winner_tells_the_others_first(crate::state::FailoverMode::Takeover).await;
    }

    /// A replica of node 0 joins [`joined`]'s three nodes and fails over in `mode`; its
    /// server's change hook waits up to 15 s for the others to know it as a primary. Only
    /// the order decides: if the bus told nobody before the hook ran, nobody learns it while
    /// the hook holds the bus, however long it waits (3 s was too short on a loaded host).
    async fn winner_tells_the_others_first(mode: crate::state::FailoverMode) {
        let sinks: Vec<Arc<Recorder>> = (0..3).map(|_| Arc::default()).collect();
        let mut buses = joined(&sinks).await;
        let others: Vec<Arc<Mutex<ClusterState>>> = buses.iter().map(|(b, _, _)| b.state().clone()).collect();
        let heard = Arc::new(Mutex::new(None::<bool>));
        let outcome = heard.clone();
        let on_change = Box::new(move |st: &ClusterState| {
            let me = st.myself();
            if !me.is_primary() || me.slots.is_empty() || outcome.lock().is_some() {
                return;
            }
            let id = me.id;
            let deadline = std::time::Instant::now() + Duration::from_secs(15);
            let all_know = || others.iter().all(|o| o.lock().node(&id).is_some_and(|n| n.is_primary()));
            while !all_know() && std::time::Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(10));
            }
            *outcome.lock() = Some(all_know());
        });
        let replica = replica_on_its_own_thread(on_change);
        let primary = buses[0].0.state().lock().myself_id();
        replica.0.state().lock().meet("127.0.0.1", 7000, buses[0].2, now_ms()).unwrap();
        replica.0.changed();
        buses.push(replica);
        let bus = |i: usize| buses[i].0.clone();
        let replica_id = bus(3).state().lock().myself_id();
        wait_until("the fourth node to join", &buses, || {
            buses.iter().all(|(b, _, _)| {
                let st = b.state().lock();
                st.nodes().len() == 4 && st.nodes().iter().all(|n| n.link_connected || n.id == st.myself_id())
            })
        })
        .await;
        bus(3).state().lock().replicate(&primary).unwrap();
        bus(3).changed();
        wait_until("the replica to be known as one", &buses, || {
            (0..3).all(|i| bus(i).state().lock().node(&replica_id).is_some_and(|n| n.primary == Some(primary)))
        })
        .await;
        bus(3).state().lock().failover(mode, "test", now_ms()).unwrap();
        bus(3).changed();
        wait_until("the replica to win", &buses, || heard.lock().is_some()).await;
        assert_eq!(*heard.lock(), Some(true), "the server acted on the win before the bus told anyone");
        clean_up(&buses);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_newer_inbound_link_from_a_node_replaces_the_older() {
        let sinks: Vec<Arc<Recorder>> = (0..3).map(|_| Arc::default()).collect();
        let buses = joined(&sinks).await;
        let one = buses[1].0.state().lock().myself_id();
        let from_one = |b: &Bus| b.links().iter().filter(|l| l.node == one && l.inbound).count();
        wait_until("node 1's link to node 0", &buses, || from_one(&buses[0].0) == 1).await;
        // A second link from node 1 (made here, with node 1's header) replaces the first, which
        // node 0 closes; node 1 dials again, and its new link replaces this one in turn.
        let ping = buses[1]
            .0
            .state()
            .lock()
            .message(wire::Kind::Ping, wire::Body::Gossip { entries: Default::default(), ext: Default::default() });
        let mut frame = Vec::new();
        wire::encode(&ping, &mut frame);
        let mut second = TcpStream::connect(("127.0.0.1", buses[0].2)).await.unwrap();
        second.write_all(&frame).await.unwrap();
        let mut sink = Vec::new();
        let closed = tokio::time::timeout(Duration::from_secs(20), second.read_to_end(&mut sink)).await;
        assert!(matches!(closed, Ok(Ok(_))), "node 0 kept the replaced link open: {closed:?}");
        assert_eq!(from_one(&buses[0].0), 1);
        wait_until("node 1 to link to node 0 again", &buses, || {
            buses[1].0.links().iter().any(|l| l.node == buses[0].0.state().lock().myself_id() && !l.inbound)
        })
        .await;
        clean_up(&buses);
    }
}
