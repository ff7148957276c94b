//! The cluster bus: a listener on the bus port, one outbound link per known node, and a cron
//! every 100 ms, all tokio tasks on the server's runtime. Frames are decoded on the link's
//! task; the [`ClusterState`] mutex is held only to apply one frame or one tick, never across
//! I/O. How a link is made (plain TCP or mutual TLS) is the [`Transport`]'s business, which
//! the server provides; this crate knows nothing of certificates.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, mpsc};
use tracing::{debug, info, warn};

use crate::node::NodeId;
use crate::nodes_conf;
use crate::state::ClusterState;
use crate::wire::{self, Message, WireError};

/// A bus connection, plain or TLS.
pub trait BusStream: AsyncRead + AsyncWrite + Send + Unpin {}
impl<T: AsyncRead + AsyncWrite + Send + Unpin> BusStream for T {}

/// A boxed future, for the transport's object-safe methods.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// Why a link could not be made; `Display` is the text the log shows.
#[derive(Debug)]
pub struct LinkError(pub String);

impl std::fmt::Display for LinkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

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
}

/// Plain TCP links.
pub struct PlainTransport;

impl Transport for PlainTransport {
    fn connect(&self, addr: SocketAddr, _: NodeId) -> BoxFuture<'_, Result<Box<dyn BusStream>, LinkError>> {
        Box::pin(async move {
            let tcp = TcpStream::connect(addr).await.map_err(|e| LinkError(e.to_string()))?;
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

/// What the bus shares between its tasks and with the command path.
pub struct Bus {
    state: Arc<Mutex<ClusterState>>,
    transport: Arc<dyn Transport>,
    /// Senders of the outbound links that are up, by node id.
    links: Mutex<HashMap<NodeId, mpsc::UnboundedSender<Arc<Vec<u8>>>>>,
    /// Nodes an outbound link is being made to.
    dialing: Mutex<HashSet<NodeId>>,
    /// Last dial failure per node: (when, reason), so retries do not flood the log.
    failures: Mutex<HashMap<NodeId, (i64, String)>>,
    conf_path: PathBuf,
    /// Wakes the cron early (after a CLUSTER command changed something).
    wake: Notify,
    /// Called after a change of the table or of `cluster_state`, with the state locked: the
    /// server rebuilds its routing snapshot there.
    on_change: Box<dyn Fn(&ClusterState) + Send + Sync>,
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
    ) -> Arc<Bus> {
        Arc::new(Bus {
            state,
            transport,
            links: Mutex::new(HashMap::new()),
            dialing: Mutex::new(HashSet::new()),
            failures: Mutex::new(HashMap::new()),
            conf_path,
            wake: Notify::new(),
            on_change,
        })
    }

    /// The state, for CLUSTER commands (lock briefly; call [`Bus::changed`] after a change).
    pub fn state(&self) -> &Arc<Mutex<ClusterState>> {
        &self.state
    }

    /// A CLUSTER command changed the state: save, republish, and act on it now.
    pub fn changed(&self) {
        self.after_change(true);
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
        Ok(())
    }

    /// Sends `msg` to every node with an outbound link.
    pub fn broadcast(&self, msg: &Message) {
        let mut buf = Vec::new();
        wire::encode(msg, &mut buf);
        let frame = Arc::new(buf);
        for tx in self.links.lock().values() {
            let _ = tx.send(frame.clone());
        }
    }

    fn send_to(&self, id: &NodeId, msg: &Message) {
        let mut buf = Vec::new();
        wire::encode(msg, &mut buf);
        if let Some(tx) = self.links.lock().get(id) {
            let _ = tx.send(Arc::new(buf));
        }
    }

    /// Saves `nodes.conf` when the table changed, and tells the server when the table or
    /// `cluster_state` changed (or always, with `publish`: a CLUSTER command may have changed
    /// what the table does not track, such as migrating slots or a setting). Runs after every
    /// tick and every frame, and most of them change nothing: the server's rebuild walks all
    /// 16384 slots, which done ten times a second plus once per frame was nearly all the CPU
    /// an idle node spent.
    fn after_change(&self, publish: bool) {
        let saved = {
            let mut st = self.state.lock();
            let dirty = st.take_dirty();
            let flipped = st.take_state_flipped();
            if publish || dirty || flipped {
                (self.on_change)(&st);
            }
            dirty.then(|| st.saved())
        };
        if let Some(saved) = saved
            && let Err(e) = nodes_conf::save(&self.conf_path, &saved)
        {
            warn!(cause = %e, "could not save the cluster config file");
        }
    }

    async fn cron(self: Arc<Self>) {
        let mut interval = tokio::time::interval(Duration::from_millis(100));
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {}
                _ = self.wake.notified() => {}
            }
            let now = now_ms();
            let (pings, targets) = {
                let mut st = self.state.lock();
                (st.tick(now), st.link_targets())
            };
            for (id, msg) in &pings {
                self.send_to(id, msg);
            }
            for (id, ip, port) in targets {
                self.dial_if_needed(id, &ip, port, now);
            }
            self.after_change(false);
        }
    }

    fn dial_if_needed(self: &Arc<Self>, id: NodeId, ip: &str, port: u16, now: i64) {
        if self.links.lock().contains_key(&id) || self.dialing.lock().contains(&id) {
            return;
        }
        // A node that refused us is tried again once a second, not every tick.
        if self.failures.lock().get(&id).is_some_and(|(at, _)| now - at < 1000) {
            return;
        }
        let Ok(ip) = ip.parse::<std::net::IpAddr>() else { return };
        self.dialing.lock().insert(id);
        tokio::spawn(self.clone().outbound(id, SocketAddr::new(ip, port)));
    }

    async fn outbound(self: Arc<Self>, id: NodeId, addr: SocketAddr) {
        let stream = self.transport.connect(addr, id).await;
        self.dialing.lock().remove(&id);
        let stream = match stream {
            Ok(s) => s,
            Err(e) => {
                self.dial_failed(id, addr, &e.0);
                return;
            }
        };
        self.failures.lock().remove(&id);
        let (tx, rx) = mpsc::unbounded_channel();
        let first = {
            let mut st = self.state.lock();
            st.link_up(&id, now_ms())
        };
        let Some(first) = first else { return };
        self.links.lock().insert(id, tx.clone());
        let mut buf = Vec::new();
        wire::encode(&first, &mut buf);
        let _ = tx.send(Arc::new(buf));
        let (reader, writer) = tokio::io::split(stream);
        let writing = tokio::spawn(write_frames(writer, rx));
        let mut link_id = id;
        let result = self.read_frames(reader, Some(&mut link_id), addr).await;
        if let Err(e) = result {
            debug!(node_id = %link_id, cause = %e, "bus link closed");
        }
        writing.abort();
        self.links.lock().remove(&link_id);
        self.state.lock().link_down(&link_id);
    }

    fn dial_failed(&self, id: NodeId, addr: SocketAddr, reason: &str) {
        let mut failures = self.failures.lock();
        let repeated = failures.get(&id).is_some_and(|(_, r)| r == reason);
        failures.insert(id, (now_ms(), reason.to_owned()));
        drop(failures);
        if repeated {
            debug!(node_id = %id, "bus link to {addr} failed again: {reason}");
        } else {
            warn!("Cluster: the {} to node {id} at {addr} failed: {reason}", self.transport.link_name());
        }
        self.state.lock().link_down(&id);
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
                let (tx, rx) = mpsc::unbounded_channel();
                let writing = tokio::spawn(write_frames(writer, rx));
                let result = bus.read_inbound(reader, tx, peer, &local).await;
                if let Err(e) = result {
                    debug!(%peer, cause = %e, "inbound bus link closed");
                }
                writing.abort();
            });
        }
    }

    async fn read_inbound(
        &self,
        reader: tokio::io::ReadHalf<Box<dyn BusStream>>,
        tx: mpsc::UnboundedSender<Arc<Vec<u8>>>,
        peer: SocketAddr,
        local_ip: &str,
    ) -> io::Result<()> {
        self.frames(reader, peer, None, |bus, msg| {
            let out = bus.state.lock().receive(msg, None, &peer.ip().to_string(), Some(local_ip), now_ms());
            if let Some(reply) = out.reply {
                let mut buf = Vec::new();
                wire::encode(&reply, &mut buf);
                let _ = tx.send(Arc::new(buf));
            }
            for b in &out.broadcast {
                bus.broadcast(b);
            }
            !out.close
        })
        .await
    }

    async fn read_frames(
        &self,
        reader: tokio::io::ReadHalf<Box<dyn BusStream>>,
        link_id: Option<&mut NodeId>,
        peer: SocketAddr,
    ) -> io::Result<()> {
        let known = link_id.as_deref().copied();
        let mut id = link_id;
        self.frames(reader, peer, known, |bus, msg| {
            let Some(link) = id.as_deref_mut() else { return false };
            let out = bus.state.lock().receive(msg, Some(*link), &peer.ip().to_string(), None, now_ms());
            if let Some((old, new)) = out.renamed {
                let mut links = bus.links.lock();
                if let Some(tx) = links.remove(&old) {
                    links.insert(new, tx);
                }
                *link = new;
            }
            for b in &out.broadcast {
                bus.broadcast(b);
            }
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
                    let keep = handle(self, msg);
                    self.after_change(false);
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

async fn write_frames(
    mut writer: tokio::io::WriteHalf<Box<dyn BusStream>>,
    mut rx: mpsc::UnboundedReceiver<Arc<Vec<u8>>>,
) {
    while let Some(frame) = rx.recv().await {
        if writer.write_all(&frame).await.is_err() {
            return;
        }
        // Everything queued meanwhile goes in the same flush.
        while let Ok(more) = rx.try_recv() {
            if writer.write_all(&more).await.is_err() {
                return;
            }
        }
        if writer.flush().await.is_err() {
            return;
        }
    }
}

/// Logs what the bus listens on.
pub fn log_listening(addrs: &[SocketAddr]) {
    for a in addrs {
        info!("Cluster bus listening on {a}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Settings;

    fn node(bus_port: u16, port: u16) -> (Arc<Bus>, std::path::PathBuf) {
        let dir = std::env::temp_dir().join(format!("hotkv-bus-{}-{bus_port}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let cfg = Settings {
            node_timeout_ms: 1000,
            require_full_coverage: true,
            allow_reads_when_down: false,
            announce_ip: String::new(),
            port,
            tls_port: 0,
            bus_port,
            hostname: String::new(),
            human_nodename: String::new(),
        };
        let state = Arc::new(Mutex::new(ClusterState::fresh(cfg)));
        (Bus::new(state, Arc::new(PlainTransport), dir.join("nodes.conf"), Box::new(|_| {})), dir)
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
        };
        let state = Arc::new(Mutex::new(ClusterState::fresh(cfg)));
        let published = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let count = published.clone();
        let on_change = Box::new(move |_: &ClusterState| {
            count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
        let bus = Bus::new(state, Arc::new(PlainTransport), dir.join("nodes.conf"), on_change);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn three_nodes_join_over_real_sockets_and_save_their_table() {
        let mut buses = Vec::new();
        for i in 0..3u16 {
            let (l, port) = listener();
            let (bus, dir) = node(port, 7000 + i);
            bus.start(vec![l]).unwrap();
            let ranges = [(0u16, 5460u16), (5461, 10922), (10923, 16383)][usize::from(i)];
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
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !joined() {
            assert!(std::time::Instant::now() < deadline, "{}", buses[0].0.state().lock().nodes_text(false));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        // Every node saved a table naming all three, which loads back.
        for (bus, dir, _) in &buses {
            bus.changed();
            let saved = nodes_conf::load(&dir.join("nodes.conf")).unwrap().unwrap();
            assert_eq!(saved.nodes.len(), 3);
            std::fs::remove_dir_all(dir).unwrap();
        }
    }
}
