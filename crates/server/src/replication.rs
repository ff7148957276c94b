//! Replication wired into the server: the node's [`Primary`] as the keyspace's write sink, the
//! engine snapshots behind full syncs, the master client that applies a primary's stream, the
//! dialer (plain or TLS), and the role changes (REPLICAOF, CLUSTER REPLICATE).

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::Bytes;
use hotkv_engine::plan::KeyHint;
use hotkv_engine::rdb::{LoadStats, Loader, RdbReader};
use hotkv_engine::{Effects, Keyspace, WriteSink};
use hotkv_protocol::{Args, ReplyBuf};
use hotkv_replication::{
    Applier, AsyncStream, BoxFuture, Connector, CredentialSource, GroupSettings, LinkState, LinkStatus, Primary,
    PrimarySettings, ReplicaConfig, ReplicaHandle, ReplicaLink, SharedSnapshots, Snapshot, SnapshotSource, StreamBatch,
};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::{info, warn};

use crate::config::Settings;
use crate::config::table as t;
use crate::config::value::Value;
use crate::dispatch::{Batch, Scratch, dispatch};
use crate::events::CmdEvents;
use crate::freeze::Gated;
use crate::server::{Server, unix_ms};
use crate::session::{ClientInfo, Session, flag};

/// The node's replication state.
pub struct Replication {
    /// This node's stream, backlog and replicas; also what it feeds chained replicas as a
    /// replica.
    pub primary: Arc<Primary>,
    /// Whether this node follows a primary. Shared with the keyspace's sink.
    replica: Arc<AtomicBool>,
    /// Whether a full sync is being loaded (commands answer -LOADING).
    loading: AtomicBool,
    /// Whether a full sync is being loaded beside the data clients keep using (`async_loading`:
    /// `repl-diskless-load swapdb` and the primary's history is ours).
    async_loading: AtomicBool,
    /// The link to our primary.
    link: Mutex<Option<ReplicaHandle>>,
    /// A coordinated failover (FAILOVER) this node runs as the primary.
    pub failover: crate::failover::Coordinator,
    /// Keys clients wrote on this replica (`replica-read-only no`): its primary never sends
    /// their DELs, so the cron expires those with a TTL itself (Valkey's
    /// `replicaKeysWithExpire`). Keys without a TTL leave at the next look.
    own_keys: Mutex<std::collections::HashSet<(usize, Vec<u8>)>>,
    /// `repl-timeout` as the link to our primary reads it: CONFIG SET changes a link that is
    /// already up.
    link_timeout: hotkv_replication::LiveDuration,
    /// The snapshots full resyncs are served from, shared by replicas that ask together.
    snapshots: std::sync::OnceLock<Arc<SharedSnapshots>>,
}

impl Replication {
    /// The state of a node that starts as a primary.
    pub fn new(settings: &Settings) -> Replication {
        Replication {
            primary: Primary::new(primary_settings(settings)),
            replica: Arc::new(AtomicBool::new(false)),
            loading: AtomicBool::new(false),
            async_loading: AtomicBool::new(false),
            link: Mutex::new(None),
            failover: Default::default(),
            own_keys: Default::default(),
            link_timeout: hotkv_replication::LiveDuration::new(primary_settings(settings).timeout),
            snapshots: std::sync::OnceLock::new(),
        }
    }

    /// The keyspace's write sink: the primary's stream, while this node is not a replica
    /// (a replica's stream is its primary's bytes, fed by the link, never its own writes).
    /// A concrete type, so the fan-out calls it directly: a dynamic call per layer was a
    /// tenth of the sink chain's instructions per SET.
    pub fn sink(&self) -> Sink {
        Sink { primary: self.primary.clone(), replica: self.replica.clone() }
    }

    /// Sets the full-sync load flag, for tests of what must wait for it.
    #[cfg(test)]
    pub(crate) fn set_loading_for_test(&self, on: bool) {
        self.loading.store(on, Ordering::Release);
    }

    /// Whether this node follows a primary.
    pub fn is_replica(&self) -> bool {
        self.replica.load(Ordering::Acquire)
    }

    /// A client (not the primary's stream) wrote `keys` of `args` on this replica.
    pub fn note_own_write(&self, db: usize, args: &Args<'_>, keys: &[hotkv_engine::plan::KeyArg]) {
        let mut own = self.own_keys.lock();
        for k in keys.iter().filter(|k| !k.channel) {
            own.insert((db, args.get(k.pos as usize).to_vec()));
        }
    }

    /// The keys [`Replication::note_own_write`] collected, for the cron to look at.
    pub fn take_own_keys(&self) -> Vec<(usize, Vec<u8>)> {
        let mut own = self.own_keys.lock();
        if own.is_empty() {
            return Vec::new();
        }
        std::mem::take(&mut *own).into_iter().collect()
    }

    /// Puts back the keys that still have a TTL to come.
    pub fn keep_own_keys(&self, keep: Vec<(usize, Vec<u8>)>) {
        self.own_keys.lock().extend(keep);
    }

    /// Whether a full sync is being loaded.
    pub fn loading(&self) -> bool {
        self.loading.load(Ordering::Acquire)
    }

    /// Whether a full sync is being loaded while clients go on with the old data (INFO's
    /// `async_loading`): commands flagged `no_async_loading` answer -LOADING meanwhile.
    pub fn async_loading(&self) -> bool {
        self.async_loading.load(Ordering::Acquire)
    }

    /// The link's status, when this node is a replica.
    pub fn link_status(&self) -> Option<LinkStatus> {
        self.link.lock().as_ref().map(ReplicaHandle::status)
    }

    /// Whether this replica's link to its primary is up (false on a primary).
    pub fn link_up(&self) -> bool {
        self.link_status().is_some_and(|s| s.state == LinkState::Connected)
    }
}

/// Reads the primary's settings from the configuration.
pub fn primary_settings(s: &Settings) -> PrimarySettings {
    let obuf = s.ints(t::CLIENT_OUTPUT_BUFFER_LIMIT);
    let at = |i: usize| obuf.get(i).copied().unwrap_or(0).max(0) as u64;
    PrimarySettings {
        backlog_size: s.int(t::REPL_BACKLOG_SIZE).max(1) as u64,
        backlog_ttl: Duration::from_secs(s.int(t::REPL_BACKLOG_TTL).max(0) as u64),
        ping_period: s.int(t::REPL_PING_REPLICA_PERIOD).clamp(1, i64::from(u32::MAX)) as u32,
        timeout: Duration::from_secs(s.int(t::REPL_TIMEOUT).max(1) as u64),
        obuf_hard: at(3),
        obuf_soft: at(4),
        obuf_soft_duration: Duration::from_secs(at(5)),
        min_replicas_to_write: s.int(t::MIN_REPLICAS_TO_WRITE).max(0) as usize,
        min_replicas_max_lag: s.int(t::MIN_REPLICAS_MAX_LAG).max(0) as u64,
    }
}

/// The keyspace's sink: the primary, muted while this node is a replica.
pub struct Sink {
    primary: Arc<Primary>,
    replica: Arc<AtomicBool>,
}

impl WriteSink for Sink {
    #[inline]
    fn active(&self) -> bool {
        !self.replica.load(Ordering::Acquire) && self.primary.active()
    }

    #[inline]
    fn append(&self, effects: &Effects) {
        if !self.replica.load(Ordering::Acquire) {
            self.primary.append(effects);
        }
    }

    #[inline]
    fn append_resp(&self, db: usize, resp: &[u8]) {
        if !self.replica.load(Ordering::Acquire) {
            self.primary.append_resp(db, resp);
        }
    }
}

/// Wires replication into a started server: the keyspace's sink, and the link to the primary
/// `replicaof` names. Runs inside the runtime.
pub fn start(srv: &Arc<Server>) {
    // Replication and the AOF both take the write stream (aof::wire's fan-out).
    srv.ks.set_sink(crate::aof::wire::fan_out(srv));
    if srv.cluster.is_some() {
        reconcile_cluster(srv);
        return;
    }
    let target = srv.settings.load().list(t::REPLICAOF).to_vec();
    if let [host, port] = target.as_slice()
        && let Ok(port) = port.parse::<u16>()
    {
        follow(srv, host.clone(), port);
    }
}

/// In cluster mode the node table says whom this node replicates (CLUSTER REPLICATE, a
/// nodes.conf read at start, a failover): a task follows it, so every way the table changes
/// is acted on in one place.
fn reconcile_cluster(srv: &Arc<Server>) {
    let weak = Arc::downgrade(srv);
    let Some(roles) = srv.cluster.as_ref().map(|c| c.roles.clone()) else { return };
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(Duration::from_millis(100));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            // The poll catches what the table changed without a new routing snapshot.
            tokio::select! {
                _ = tick.tick() => {}
                () = roles.notified() => {}
            }
            let Some(srv) = weak.upgrade() else { return };
            if srv.is_shutting_down() {
                return;
            }
            let Some(cluster) = &srv.cluster else { return };
            let tls = srv.settings.load().bool(t::TLS_REPLICATION);
            // The role as the bus last published it, not as the table has it now: the bus
            // publishes a failover's win only once its PONGs are on the wire, and a node seen
            // as a primary before anyone heard it won (and frozen then, as Valkey's
            // unit/cluster/failover2 does) leaves its sibling in an election nobody votes
            // for. The address is read live: it may change without a new map.
            let published = cluster.router.my_primary();
            let want = {
                let st = cluster.state();
                published.and_then(|p| st.node(&p)).map(|p| {
                    let port = if tls && p.tls_port != 0 { p.tls_port } else { p.port };
                    (p.ip.clone(), port)
                })
            };
            match want {
                Some((ip, port)) if !ip.is_empty() && port != 0 => {
                    let same = srv.repl.link_status().is_some_and(|s| s.host == ip && s.port == port);
                    if !same {
                        follow(&srv, ip, port);
                    }
                }
                Some(_) => {}
                None if srv.repl.is_replica() => promote(&srv, "the cluster made this node a primary"),
                None => {}
            }
        }
    });
}

/// The settings changed (CONFIG SET of a replication directive).
pub fn apply(srv: &Server, new: &Settings) {
    let settings = primary_settings(new);
    srv.repl.link_timeout.set(settings.timeout);
    srv.repl.primary.set_settings(settings);
}

/// Once a second, from the cron thread.
pub fn cron(srv: &Server) {
    srv.repl.primary.cron();
}

/// Makes this node a replica of `host:port` (REPLICAOF, CLUSTER REPLICATE, `replicaof` at
/// start): stops any link it had, keeps its data until the primary's snapshot replaces it
/// (or its history continues, when the primary can), and dials.
pub fn follow(srv: &Arc<Server>, host: String, port: u16) {
    follow_with(srv, host, port, false);
}

/// A coordinated failover hands over to `host:port`: follow it, and make the first PSYNC ask
/// it to take over (see [`crate::failover`]).
pub fn follow_for_failover(srv: &Arc<Server>, host: String, port: u16) {
    follow_with(srv, host, port, true);
}

fn follow_with(srv: &Arc<Server>, host: String, port: u16, failover: bool) {
    let old = srv.repl.link.lock().take();
    // The link to the old primary is lost now if it was up; if it was not, this node's data
    // has been without a primary since whenever the last one went.
    let down_since = old.as_ref().and_then(|o| {
        let st = o.status();
        if st.state == LinkState::Connected { Some(tokio::time::Instant::now()) } else { st.down_since }
    });
    if let Some(old) = old {
        tokio::spawn(old.stop());
    }
    srv.repl.replica.store(true, Ordering::Release);
    srv.blocked.disconnect_all();
    srv.repl.primary.set_upstream(true);
    set_replicaof(srv, vec![host.clone(), port.to_string()]);
    let settings = srv.settings.load();
    let rt = srv.rt.load();
    let mut cfg = ReplicaConfig::new(host, port, announced_port(srv, &settings));
    // Read at every connection, as Valkey does: CONFIG SET primaryauth reaches a link that
    // keeps retrying after a refused AUTH.
    let weak = Arc::downgrade(srv);
    cfg.credentials = Some(CredentialSource(Arc::new(move || match weak.upgrade() {
        Some(srv) => credentials(&srv),
        None => (None, None),
    })));
    let ip = settings.str(t::REPLICA_ANNOUNCE_IP);
    cfg.announce_ip = (!ip.is_empty()).then(|| ip.to_string());
    cfg.timeout = srv.repl.link_timeout.clone();
    cfg.timeout.set(Duration::from_secs(settings.int(t::REPL_TIMEOUT).max(1) as u64));
    cfg.max_bulk_len = rt.proto_max_bulk_len;
    cfg.failover = failover;
    cfg.down_since = down_since;
    let tls = settings.bool(t::TLS_REPLICATION);
    let connector = Arc::new(Dialer { srv: Arc::downgrade(srv), tls });
    let applier = Box::new(MasterClient::new(srv));
    let handle = ReplicaLink::spawn(cfg, connector, applier, srv.repl.primary.clone());
    *srv.repl.link.lock() = Some(handle);
}

/// The user and password a replica logs in to its primary with.
fn credentials(srv: &Server) -> (Option<String>, Option<String>) {
    let settings = srv.settings.load();
    let user = settings.str(t::PRIMARYUSER);
    let auth = settings.str(t::PRIMARYAUTH);
    // Without masterauth a replica logs in with the node's own requirepass: the nodes of one
    // deployment share it (the product doc's cluster sets only requirepass).
    let auth = if auth.is_empty() { srv.rt.load().requirepass.clone() } else { Some(auth.to_string()) };
    ((!user.is_empty()).then(|| user.to_string()), auth)
}

/// REPLICAOF NO ONE (and a failover's end): this node stops following and becomes a primary
/// of its own history. `why` completes the log line, as Valkey's "(user request from ...)".
pub fn promote(srv: &Arc<Server>, why: &str) {
    let old = srv.repl.link.lock().take();
    if let Some(old) = old {
        tokio::spawn(old.stop());
        info!("MASTER MODE enabled ({})", why);
    }
    become_primary(srv);
}

/// PSYNC FAILOVER: [`promote`] once the link has applied what the primary handing over
/// already sent (see `ReplicaHandle::drain_and_stop`), so its PSYNC, which follows those
/// bytes, finds them counted and continues partially.
pub async fn promote_after_draining(srv: &Arc<Server>, why: &str) {
    let old = srv.repl.link.lock().take();
    if let Some(old) = old {
        old.drain_and_stop(Duration::from_secs(1)).await;
        info!("MASTER MODE enabled ({})", why);
    }
    become_primary(srv);
}

fn become_primary(srv: &Arc<Server>) {
    srv.repl.loading.store(false, Ordering::Release);
    // A primary's own active expiry covers every key from now on.
    srv.repl.own_keys.lock().clear();
    if srv.repl.replica.swap(false, Ordering::AcqRel) {
        srv.repl.primary.promote();
    }
    set_replicaof(srv, Vec::new());
}

/// The port a replica announces: `replica-announce-port`, else the port its primary's
/// replicas reach it on (the TLS port when replication runs on TLS).
fn announced_port(srv: &Server, s: &Settings) -> u16 {
    let announced = s.int(t::REPLICA_ANNOUNCE_PORT) as u16;
    if announced != 0 {
        return announced;
    }
    let (port, tls_port) = *srv.ports.lock();
    if s.bool(t::TLS_REPLICATION) && tls_port != 0 { tls_port } else { port }
}

/// Records the primary in `replicaof` (CONFIG GET, REWRITE), which also turns the engine's
/// replica behaviour on or off (no lazy expiry, no active expiry).
fn set_replicaof(srv: &Server, target: Vec<String>) {
    let _guard = srv.config_lock.lock();
    let mut s = (**srv.settings.load()).clone();
    // A cluster node's primary lives in nodes.conf; `replicaof` there would stop the next
    // start.
    if srv.cluster.is_none() {
        s.set(t::REPLICAOF, Value::List(target));
    }
    srv.install_settings(s);
}

/// Dials the primary, in TLS when `tls-replication` is on.
struct Dialer {
    srv: Weak<Server>,
    tls: bool,
}

impl Connector for Dialer {
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<Box<dyn AsyncStream>>> {
        Box::pin(async move {
            let srv = self.srv.upgrade().ok_or_else(|| io::Error::other("server is shutting down"))?;
            // While DEBUG SLEEP stops this server, it neither dials, reads nor writes (Gated):
            // the link stays as Valkey's sleeping event loop leaves it.
            srv.freeze.thawed().await;
            let tcp = tokio::net::TcpStream::connect((host, port)).await?;
            let _ = tcp.set_nodelay(true);
            if !self.tls {
                return Ok(Box::new(Gated::new(tcp, srv)) as Box<dyn AsyncStream>);
            }
            let tls = srv.tls.connect(host, tcp).await.map_err(|e| io::Error::other(e.to_string()))?;
            Ok(Box::new(Gated::new(tls, srv)) as Box<dyn AsyncStream>)
        })
    }

    fn is_tls(&self) -> bool {
        self.tls
    }
}

/// The client that applies a primary's stream: commands run through dispatch like any
/// client's, with no reply, no routing and no read-only check (Valkey's master client), and
/// the snapshot of a full sync loaded through the engine's RDB reader. A CLIENT PAUSE of
/// writes holds the whole stream back, as Valkey postpones its master client's commands.
struct MasterClient {
    srv: Arc<Server>,
    sess: Session,
    scratch: Scratch,
    /// Each batch command's key slot and hash, from the prefetch (see `apply_batch`).
    hints: Vec<Option<(u16, u32)>>,
    out: ReplyBuf,
    reader: Option<RdbReader>,
    load: (usize, LoadStats),
    errors: u64,
    /// A full sync began and none of its snapshot has arrived yet: the old data stays, and
    /// keeps serving reads, until the first piece does.
    sync_pending: bool,
    /// The sync in progress loads beside the live data (`repl-diskless-load swapdb`); `true`
    /// when clients keep being served the old data meanwhile (the primary's history is ours).
    swapdb: Option<bool>,
    /// Where that load goes, once its first piece arrived.
    beside: Option<Keyspace>,
}

impl MasterClient {
    fn new(srv: &Arc<Server>) -> MasterClient {
        let addr = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        let info = Arc::new(ClientInfo::new(srv.clients.next_id(), addr, addr, -1, unix_ms()));
        info.flags.fetch_or(flag::MASTER, Ordering::Relaxed);
        let sess = Session::new(info, true);
        MasterClient {
            srv: srv.clone(),
            sess,
            scratch: Scratch::default(),
            hints: Vec::new(),
            out: ReplyBuf::new(),
            reader: None,
            load: (0, LoadStats::default()),
            errors: 0,
            sync_pending: false,
            swapdb: None,
            beside: None,
        }
    }

    /// Starts the load of the snapshot now arriving: into the keyspace, once the old data is
    /// dropped, or beside it with `repl-diskless-load swapdb` (Valkey's temporary databases).
    fn start_load(&mut self) {
        match self.swapdb {
            Some(serving) => {
                if serving {
                    // An earlier point of the same history: as good to read as any stale data.
                    info!(
                        "PRIMARY <-> REPLICA sync: Loading DB in memory, serving the old data meanwhile (async loading)"
                    );
                    self.srv.repl.async_loading.store(true, Ordering::Release);
                } else {
                    info!("PRIMARY <-> REPLICA sync: Loading DB in memory, keeping the old data until it succeeds");
                    self.srv.repl.loading.store(true, Ordering::Release);
                    announce_loading(&self.srv);
                }
                self.beside = Some(Keyspace::new(self.srv.ks.databases()));
            }
            None => {
                info!("PRIMARY <-> REPLICA sync: Flushing old data");
                self.srv.repl.loading.store(true, Ordering::Release);
                announce_loading(&self.srv);
            }
        }
        // A transaction the old stream left open never completes: the new history starts
        // after the snapshot.
        if self.sess.multi.is_some() {
            crate::cmd::multi::discard_transaction(&self.srv, &mut self.sess);
        }
        self.sess.db = 0;
        if self.beside.is_none() {
            self.flush_all();
            // Valkey's line for every kind of load (its tests wait for it).
            info!("PRIMARY <-> REPLICA sync: Loading DB in memory");
        }
        self.reader = Some(RdbReader::new(self.srv.rt.load().proto_max_bulk_len));
        self.load = (0, LoadStats::default());
    }

    /// Loads the next piece of the snapshot into the keyspace.
    fn feed(&mut self, chunk: &[u8]) -> Result<(), String> {
        let Some(reader) = self.reader.as_mut() else { return Err("no full sync in progress".into()) };
        reader.feed(chunk);
        let engine = self.srv.engine.load();
        let (db, stats) = std::mem::take(&mut self.load);
        let into = self.beside.as_ref().unwrap_or(&self.srv.ks);
        // Keys past their TTL are loaded too, as a Valkey replica does: the primary's DELs
        // remove them, and until then both sides hold the same keys (DEBUG DIGEST agrees).
        let mut loader = Loader::resume(into, &engine, unix_ms(), db, stats).keep_expired();
        let delay = self.srv.settings.load().int(t::KEY_LOAD_DELAY);
        let mut result = Ok(());
        loop {
            match reader.next_item() {
                Ok(Some(item)) => {
                    let key = matches!(item, hotkv_engine::rdb::Item::Entry { .. });
                    if key && delay != 0 {
                        key_load_delay(delay);
                    }
                    if let Err(e) = loader.apply(item) {
                        result = Err(e.to_string());
                        break;
                    }
                }
                Ok(None) => break,
                Err(e) => {
                    result = Err(e.to_string());
                    break;
                }
            }
        }
        self.load = loader.into_parts();
        result
    }

    /// Ends the load (`ok`: the whole snapshot arrived) and applies what came with it.
    fn finish_load(&mut self, ok: bool) -> Result<(), String> {
        let reader = self.reader.take();
        let done = ok && reader.as_ref().is_some_and(RdbReader::is_done);
        let half_loaded = !done && reader.is_some() && self.beside.is_none();
        if let Some(loaded) = self.beside.take() {
            self.swap_in(loaded, done);
        }
        if half_loaded {
            // A replica must not serve part of a snapshot as its data (Valkey empties it).
            info!("PRIMARY <-> REPLICA sync: Discarding the half-loaded data");
            self.flush_all();
        }
        self.srv.repl.loading.store(false, Ordering::Release);
        self.srv.repl.async_loading.store(false, Ordering::Release);
        announce_loading(&self.srv);
        if !ok {
            return Ok(());
        }
        match reader {
            Some(r) if r.is_done() => {
                // Valkey's rdbLoad line; the link says "Finished with success" next.
                let stats = &self.load.1;
                info!(
                    keys = stats.loaded,
                    expired = stats.expired,
                    "Done loading RDB, keys loaded: {}, keys expired: {}.",
                    stats.loaded,
                    stats.expired
                );
                // The primary's libraries replace ours, as its keys did.
                crate::script::install_functions(&self.srv, &self.load.1.functions);
                // The snapshot went straight into the keyspace, past the AOF.
                crate::aof::wire::after_full_sync(&self.srv);
                // The primary's open slots come with its data (Valkey's cluster-slot-states):
                // a new replica knows a migration under way as its primary does.
                if let Some(cluster) = &self.srv.cluster {
                    let open = self.load.1.aux.iter().find(|(k, _)| k == crate::cluster::OPEN_SLOTS_AUX.as_bytes());
                    crate::cluster::apply_open_slots(cluster, open.map(|(_, v)| v.as_slice()));
                }
                Ok(())
            }
            Some(r) => Err(r.finish().err().map_or_else(|| "snapshot incomplete".to_string(), |e| e.to_string())),
            None => Err("no full sync in progress".into()),
        }
    }

    /// A load beside the live data ended: `done`, it replaces the live data at once; either
    /// way the dataset left over is freed on a thread of its own, as Valkey frees it in the
    /// background.
    fn swap_in(&mut self, loaded: Keyspace, done: bool) {
        let srv = self.srv.clone();
        if done {
            info!("PRIMARY <-> REPLICA sync: Swapping active DB with loaded DB");
            let events = CmdEvents::new(&srv, srv.rt.load().notify);
            srv.ks.swap_in(&loaded, unix_ms(), &events);
            // Keys written on this replica went with the old data.
            srv.repl.own_keys.lock().clear();
            // A client blocked on a key the new data holds runs its command again and finds it.
            for (db, key) in events.take_ready() {
                for w in srv.blocked.waiters(db, &key) {
                    srv.blocked.retry(&w);
                }
            }
            info!("PRIMARY <-> REPLICA sync: Discarding old DB in background");
        } else {
            info!("PRIMARY <-> REPLICA sync: Discarding temporary DB in background");
        }
        let freed = std::thread::Builder::new().name("hotkv-lazyfree".into()).spawn(move || drop(loaded));
        // On failure the closure, and the dataset with it, was already dropped by spawn.
        let _ = freed;
    }

    /// Empties every database, run as the master client's own command.
    fn flush_all(&mut self) {
        let (flat, spans) = crate::dispatch::flatten(&[b"FLUSHALL".to_vec()]);
        self.run(Args::from_parts(&flat, &spans));
    }

    fn run(&mut self, args: Args<'_>) {
        let srv = self.srv.clone();
        let engine = srv.engine.load();
        let rt = srv.rt.load();
        let b = Batch { srv: &srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
        self.run_in(&b, args);
    }

    /// Runs one command of the stream in `b` and logs an error reply.
    fn run_in(&mut self, b: &Batch<'_>, args: Args<'_>) {
        self.out.truncate(0);
        let _ = dispatch(b, &mut self.sess, args, &mut self.out, &mut self.scratch);
        if self.out.as_bytes().first() == Some(&b'-') {
            self.errors += 1;
            // Valkey goes on (propagation-error-behavior ignore) and says so in the log.
            if self.errors <= 10 || self.errors.is_power_of_two() {
                let reply = String::from_utf8_lossy(self.out.as_bytes());
                warn!(
                    "== CRITICAL == This replica is sending an error to its primary: '{}' after processing the command '{}'",
                    reply.trim_end().trim_start_matches('-'),
                    String::from_utf8_lossy(args.get(0))
                );
            }
        }
        self.out.truncate(0);
    }
}

impl Applier for MasterClient {
    fn begin_full_sync(&mut self, same_history: bool) -> Result<(), String> {
        // The primary may take long to send its first byte (a slow or delayed snapshot): the
        // old data is dropped only when the new one starts to arrive.
        self.sync_pending = true;
        let swapdb = self.srv.settings.load().str(t::REPL_DISKLESS_LOAD) == "swapdb";
        self.swapdb = swapdb.then_some(same_history);
        Ok(())
    }

    fn staging(&mut self) -> Option<hotkv_replication::Staging> {
        let s = self.srv.settings.load();
        // Valkey loads from the socket with swapdb, and with on-empty-db when there is
        // nothing to lose; otherwise the snapshot goes to disk first, so a transfer that fails
        // leaves the old data, and the history with it, as they were.
        let from_socket = match s.str(t::REPL_DISKLESS_LOAD) {
            "swapdb" => true,
            "on-empty-db" => self.srv.ks.total_keys() == 0,
            _ => false,
        };
        if from_socket {
            return None;
        }
        let secs = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let temp = std::path::Path::new(s.str(t::DIR)).join(format!("temp-{secs}.{}.rdb", std::process::id()));
        let persists = !s.ints(t::SAVE).is_empty() || s.bool(t::APPENDONLY);
        Some(hotkv_replication::Staging {
            temp,
            target: crate::persistence::file::rdb_path(&self.srv),
            remove_after_load: s.bool(t::RDB_DEL_SYNC_FILES) && !persists,
        })
    }

    fn before_install(&mut self) -> Option<BoxFuture<'static, ()>> {
        if !crate::persistence::abort_for_synced_file(&self.srv) {
            return None;
        }
        let srv = self.srv.clone();
        Some(Box::pin(async move {
            // An aborted save stops at its next slot; the bound only guards a stuck disk.
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while srv.persist.in_progress() && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }))
    }

    fn load_rdb(&mut self, chunk: &[u8]) -> Result<(), String> {
        // Valkey loads in its one thread, so no client sees a snapshot half loaded: each piece
        // loads here with clients held (as DEBUG SLEEP holds them), and one that arrives
        // whole is never answered -LOADING.
        // Loaded beside the live data, the snapshot is seen only whole (see `swap_in`).
        let srv = self.srv.clone();
        let _held = self.swapdb.is_none().then(|| srv.freeze.begin());
        if std::mem::take(&mut self.sync_pending) {
            self.start_load();
        }
        let result = self.feed(chunk);
        if self.beside.is_none() && self.reader.as_ref().is_some_and(RdbReader::is_done) {
            self.srv.repl.loading.store(false, Ordering::Release);
        }
        result
    }

    fn load_piece_bytes(&self) -> usize {
        self.srv.settings.load().int(t::LOADING_PROCESS_EVENTS_INTERVAL_BYTES).max(1) as usize
    }

    fn let_clients_in(&mut self) -> Option<BoxFuture<'static, ()>> {
        // Loaded beside the live data, the pieces hold no one.
        if self.swapdb.is_some() {
            return None;
        }
        let srv = self.srv.clone();
        Some(Box::pin(async move { srv.freeze.let_in().await }))
    }

    fn end_full_sync(&mut self, ok: bool) -> Result<(), String> {
        if std::mem::take(&mut self.sync_pending) && !ok {
            // Nothing arrived: the old data was never touched.
            return Ok(());
        }
        self.finish_load(ok)
    }

    fn apply(&mut self, args: Args<'_>, _raw: &[u8]) {
        self.run(args);
    }

    /// As a client connection runs a pipelined batch: one clock read and one configuration
    /// load for the batch, and the lines of every command's key warmed before the first runs.
    fn apply_batch(&mut self, batch: &StreamBatch<'_>) {
        let srv = self.srv.clone();
        let engine = srv.engine.load();
        let rt = srv.rt.load();
        let b = Batch { srv: &srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
        self.hints.clear();
        if batch.len() >= 2 {
            let keys = (0..batch.len()).map(|i| {
                let args = batch.args(i);
                (args.len() >= 2).then(|| args.get(1))
            });
            crate::connection::prefetch_keys(&srv, self.sess.db, keys, &mut self.hints);
        }
        for i in 0..batch.len() {
            let args = batch.args(i);
            if let Some(Some((slot, hash))) = self.hints.get(i) {
                let at = args.get(1).as_ptr() as usize;
                self.scratch.set_hint(KeyHint { arg: 1, at, slot: *slot, hash: Some(*hash) });
            }
            self.run_in(&b, args);
        }
    }

    fn aof_fsynced(&mut self, applied: u64) -> Option<u64> {
        crate::aof::wire::replica_fsynced(&self.srv, applied)
    }

    fn held(&mut self) -> Option<BoxFuture<'static, ()>> {
        use crate::pause::Mode;
        match self.srv.pause.mode(unix_ms()) {
            Mode::None => None,
            _ => {
                let srv = self.srv.clone();
                Some(Box::pin(async move { srv.pause.released().await }))
            }
        }
    }

    fn stream_started(&mut self, primary: &str) -> BoxFuture<'static, ()> {
        // A fresh client per connection, listed as the primary's address (CLIENT LIST shows it,
        // CLIENT KILL addr or TYPE master drops the link), as Valkey's master client.
        let addr = primary.parse().unwrap_or_else(|_| std::net::SocketAddr::from(([0, 0, 0, 0], 0)));
        let info = Arc::new(ClientInfo::new(self.srv.clients.next_id(), addr, addr, -1, unix_ms()));
        info.flags.fetch_or(flag::MASTER, Ordering::Relaxed);
        // The session itself carries on: a stream that continues (+CONTINUE) relies on the
        // database it selected and on a transaction it was in the middle of.
        info.db.store(self.sess.db as u32, Ordering::Relaxed);
        self.sess.id = info.id;
        self.sess.info = info.clone();
        self.srv.clients.add(info.clone());
        Box::pin(async move {
            while !info.is_killed() {
                info.wake.notified().await;
            }
        })
    }

    fn stream_ended(&mut self) {
        self.srv.clients.remove(self.sess.id);
    }

    fn failover_outcome(&mut self, outcome: Result<(), String>) {
        crate::failover::outcome(&self.srv, outcome);
    }
}

/// The server's source of full-sync snapshots: the engine's, shared by the replicas that ask
/// within `repl-diskless-sync-delay` seconds of the first (or as soon as
/// `repl-diskless-sync-max-replicas` of them wait) when `repl-diskless-sync` is on.
pub fn snapshots(srv: &Arc<Server>) -> Arc<SharedSnapshots> {
    srv.repl
        .snapshots
        .get_or_init(|| {
            let weak = Arc::downgrade(srv);
            let settings: GroupSettings = Arc::new(move || {
                let Some(srv) = weak.upgrade() else { return (Duration::ZERO, 0) };
                let s = srv.settings.load();
                if !s.bool(t::REPL_DISKLESS_SYNC) {
                    return (Duration::ZERO, 0);
                }
                let delay = Duration::from_secs(s.int(t::REPL_DISKLESS_SYNC_DELAY).max(0) as u64);
                (delay, s.int(t::REPL_DISKLESS_SYNC_MAX_REPLICAS).max(0) as usize)
            });
            Arc::new(SharedSnapshots::new(Arc::new(EngineSnapshots { srv: Arc::downgrade(srv) }), settings))
        })
        .clone()
}

/// Full-sync snapshots from the engine: a point-in-time image taken without stopping
/// clients (see `hotkv_engine::snapshot`), written as an RDB file as it is produced.
pub struct EngineSnapshots {
    /// The server.
    pub srv: Weak<Server>,
}

/// How many bytes of a snapshot may wait for the replica before the snapshot's own pass
/// waits too (slots that clients write are still written out at once).
const SNAPSHOT_AHEAD: usize = 64;

impl SnapshotSource for EngineSnapshots {
    fn snapshot(&self) -> BoxFuture<'_, io::Result<Snapshot>> {
        let srv = self.srv.upgrade();
        Box::pin(async move {
            let srv = srv.ok_or_else(|| io::Error::other("server is shutting down"))?;
            let (tx, rx) = mpsc::channel(SNAPSHOT_AHEAD);
            let (point_tx, point_rx) = tokio::sync::oneshot::channel();
            // Running from the wait for the keyspace's snapshot until the transfer is done
            // with its last byte (or the replica went away).
            let running = crate::persistence::SyncSnapshot::begin(srv.clone());
            std::thread::Builder::new()
                .name("hotkv-snapshot".into())
                .spawn(move || write_snapshot(&srv, tx, point_tx))?;
            let point = point_rx.await.map_err(|_| io::Error::other("the snapshot did not start"))?;
            Ok(Snapshot { point, rdb: rx, hold: Some(Box::new(running)) })
        })
    }
}

fn write_snapshot(
    srv: &Arc<Server>,
    tx: mpsc::Sender<io::Result<Bytes>>,
    point_tx: tokio::sync::oneshot::Sender<hotkv_replication::SyncPoint>,
) {
    // A BGSAVE may hold the keyspace's one snapshot: the replica waits for it, as a Valkey
    // replica waits for the next BGSAVE when the running one cannot serve it.
    let retry = || {
        let wait = !srv.is_shutting_down() && !tx.is_closed();
        if wait {
            std::thread::sleep(Duration::from_millis(20));
        }
        wait
    };
    let started = |cut: &crate::snapshot::Cut| {
        let _ = point_tx.send(cut.point.clone());
    };
    let ship = |b: Bytes| tx.blocking_send(Ok(b)).is_ok();
    // Valkey's replication child writes the same RDB as a save (rdbSaveRio): strings LZF-
    // compressed under `rdbcompression`, the CRC under `rdbchecksum`, and slowed down by
    // `rdb-key-save-delay`, which its replication tests use to make a full sync last.
    let settings = srv.settings.load();
    let mut opts = crate::snapshot::StreamOptions {
        write: crate::persistence::file::file_write_options(&settings),
        key_delay: crate::persistence::file::key_save_delay(&settings),
        ..crate::snapshot::StreamOptions::default()
    };
    drop(settings);
    if srv.cluster.is_some() {
        let weak = Arc::downgrade(srv);
        opts.aux_at_cut = Some(crate::snapshot::AuxHook(Arc::new(move || {
            let Some(srv) = weak.upgrade() else { return Vec::new() };
            let Some(cluster) = &srv.cluster else { return Vec::new() };
            let st = cluster.state();
            match crate::cluster::encode_open_slots(&st) {
                Some(v) => vec![(crate::cluster::OPEN_SLOTS_AUX, v)],
                None => Vec::new(),
            }
        })));
    }
    let end = crate::snapshot::stream_rdb(srv, &opts, retry, started, ship);
    if let crate::snapshot::StreamEnd::Done { keys } = end {
        info!(keys, "Snapshot for replication complete ({} keys)", keys);
    }
}

/// Tells the cluster at once that this replica started or stopped loading a full sync:
/// CLUSTER SLOTS on every node hides a loading replica, so clients do not send it reads it
/// would answer with -LOADING.
fn announce_loading(srv: &Server) {
    if let Some(cluster) = &srv.cluster {
        cluster.bus.state().lock().announce_soon();
        cluster.bus.changed();
    }
}

/// `key-load-delay` (a test lever, as Valkey's `debugDelay`): microseconds to sleep per key
/// loaded; a negative value sleeps one microsecond once every `-delay` keys (Valkey draws
/// that at random; a count gives the same rate).
pub(crate) fn key_load_delay(delay: i64) {
    static KEYS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let us = if delay > 0 {
        delay as u64
    } else {
        u64::from(KEYS.fetch_add(1, Ordering::Relaxed).is_multiple_of(delay.unsigned_abs()))
    };
    if us > 0 {
        std::thread::sleep(Duration::from_micros(us));
    }
}

/// What a replica's connection runs after its PSYNC: the session the primary accepted (the
/// bytes the replica sent past PSYNC stay in the connection's read buffer).
pub enum SyncStart {
    /// The replica's session.
    Accepted(hotkv_replication::ReplicaSession),
    /// PSYNC ... FAILOVER from this node's own primary: accepted once this node has applied
    /// what that primary sent and become a primary ([`promote_after_draining`]).
    Failover {
        /// The PSYNC.
        req: hotkv_replication::SyncRequest,
        /// What its REPLCONFs said.
        handshake: hotkv_replication::Handshake,
        /// The connection's client id.
        client_id: u64,
        /// `ip:listening-port`.
        peer: String,
        /// The end of the "MASTER MODE enabled (...)" line.
        why: String,
    },
}

impl SyncStart {
    /// The replica's session, once this node may serve it.
    pub async fn session(self, srv: &Arc<Server>) -> hotkv_replication::ReplicaSession {
        match self {
            SyncStart::Accepted(session) => session,
            SyncStart::Failover { req, handshake, client_id, peer, why } => {
                promote_after_draining(srv, &why).await;
                srv.repl.primary.accept_sync(&req, &handshake, client_id, &peer)
            }
        }
    }
}

/// Names a command a replica sent on its link as Valkey's log does (`xinfo|help`), and says
/// whether it touches the keyspace (Valkey refuses those with an error first).
pub fn describe_link_commands(srv: &Arc<Server>) -> hotkv_replication::DescribeCommand {
    let weak = Arc::downgrade(srv);
    Box::new(move |args| {
        use hotkv_engine::command::flags;
        let srv = weak.upgrade()?;
        let crate::registry::Lookup::Found(id) = srv.registry.lookup(args) else { return None };
        let cmd = srv.registry.get(id);
        let keyspace = cmd.spec.flags() & (flags::WRITE | flags::READONLY | flags::MAY_REPLICATE) != 0;
        Some(hotkv_replication::LinkCommand { name: cmd.full_name.clone(), keyspace })
    })
}

/// A plain replica connection's second descriptor, on which the event loop that ends a turn
/// sends the stream itself while the replica's session waits (it never blocks: the socket is
/// non-blocking, and the descriptor shares that mode).
pub struct LentSocket(pub socket2::Socket);

impl hotkv_replication::DirectOut for LentSocket {
    fn try_send(&self, chunks: &[Bytes]) -> io::Result<usize> {
        // One sendmsg for the turn's bytes, which span a block boundary most turns (blocks
        // are 16 KiB): a send per chunk was 1.75 sends a turn.
        const MAX: usize = 16;
        let mut slices = [io::IoSlice::new(&[]); MAX];
        for (slot, c) in slices.iter_mut().zip(chunks) {
            *slot = io::IoSlice::new(c);
        }
        let n = chunks.len().min(MAX);
        match self.0.send_vectored_with_flags(&slices[..n], libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT) {
            Ok(sent) => Ok(sent),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::Interrupted => Ok(0),
            Err(e) => Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};

    /// The RDB a full sync from `srv` would send.
    fn snapshot_of(srv: &Server) -> Vec<u8> {
        let mut rdb = Vec::new();
        let opts = crate::snapshot::StreamOptions::default();
        let end = crate::snapshot::stream_rdb(
            srv,
            &opts,
            || false,
            |_| {},
            |b| {
                rdb.extend_from_slice(&b);
                true
            },
        );
        assert!(matches!(end, crate::snapshot::StreamEnd::Done { .. }));
        rdb
    }

    #[test]
    fn a_full_sync_keeps_the_old_data_until_its_snapshot_arrives_and_loads_a_whole_one_at_once() {
        let primary = server();
        client(&primary, 0).run(&primary, &["SET", "new", "1"]);
        let rdb = snapshot_of(&primary);
        let replica = server();
        let mut c = client(&replica, 0);
        c.run(&replica, &["SET", "old", "1"]);
        let mut mc = MasterClient::new(&replica);
        mc.begin_full_sync(false).unwrap();
        // The primary has not sent a byte yet: the old data still serves reads.
        assert!(!replica.repl.loading());
        assert_eq!(c.run(&replica, &["GET", "old"]), "$1\r\n1\r\n");
        // A snapshot that arrives in one piece is loaded before any client runs again.
        mc.load_rdb(&rdb).unwrap();
        assert!(!replica.repl.loading());
        mc.end_full_sync(true).unwrap();
        assert_eq!(c.run(&replica, &["GET", "new"]), "$1\r\n1\r\n");
        assert_eq!(c.run(&replica, &["EXISTS", "old"]), ":0\r\n");
    }

    #[test]
    fn swapdb_loads_beside_the_old_data_and_swaps_in_only_a_whole_snapshot() {
        let primary = server();
        client(&primary, 0).run(&primary, &["SET", "new", "1"]);
        let rdb = snapshot_of(&primary);
        let replica = server();
        let mut c = client(&replica, 0);
        assert_eq!(c.run(&replica, &["CONFIG", "SET", "repl-diskless-load", "swapdb"]), "+OK\r\n");
        c.run(&replica, &["SET", "old", "1"]);
        for same_history in [true, false] {
            // A load cut halfway: the old data was there all along, and stays.
            let mut mc = MasterClient::new(&replica);
            mc.begin_full_sync(same_history).unwrap();
            mc.load_rdb(&rdb[..rdb.len() / 2]).unwrap();
            assert_eq!((replica.repl.async_loading(), replica.repl.loading()), (same_history, !same_history));
            let during = c.run(&replica, &["GET", "old"]);
            if same_history {
                assert_eq!(during, "$1\r\n1\r\n");
            } else {
                assert!(during.starts_with("-LOADING"), "{during}");
            }
            mc.end_full_sync(false).unwrap();
            assert!(!replica.repl.async_loading() && !replica.repl.loading());
            assert_eq!(c.run(&replica, &["MGET", "old", "new"]), "*2\r\n$1\r\n1\r\n$-1\r\n");
        }
        // A whole one replaces everything when it ends, not before.
        let mut mc = MasterClient::new(&replica);
        mc.begin_full_sync(true).unwrap();
        mc.load_rdb(&rdb).unwrap();
        assert_eq!(c.run(&replica, &["MGET", "old", "new"]), "*2\r\n$1\r\n1\r\n$-1\r\n");
        mc.end_full_sync(true).unwrap();
        assert_eq!(c.run(&replica, &["MGET", "old", "new"]), "*2\r\n$-1\r\n$1\r\n1\r\n");
        assert!(!replica.repl.async_loading());
    }

    #[test]
    fn a_full_sync_that_fails_before_its_snapshot_arrives_leaves_the_old_data() {
        let replica = server();
        let mut c = client(&replica, 0);
        c.run(&replica, &["SET", "old", "1"]);
        let mut mc = MasterClient::new(&replica);
        mc.begin_full_sync(false).unwrap();
        mc.end_full_sync(false).unwrap();
        assert!(!replica.repl.loading());
        assert_eq!(c.run(&replica, &["GET", "old"]), "$1\r\n1\r\n");
    }
}
