//! The replica's link to its primary (Valkey's `connectWithPrimary`, `syncWithPrimary`,
//! `readSyncBulkPayload` and the master client), as one task: connect, handshake, full or
//! partial resync, then apply the stream, acknowledge it, and start over a second after any
//! failure. Whatever the primary sends, the task logs, drops the link and retries; it never
//! panics and holds at most one command (`proto-max-bulk-len`) plus one read of memory.

use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use hotkv_protocol::{Args, Decoder, Limits, Step};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::{Instant, timeout, timeout_at};
use tracing::{info, warn};

use crate::primary::{Primary, SyncPoint};
use crate::reply::{BulkHeader, PsyncReply, parse_bulk_header, parse_psync_reply, ping_reply_ok};
use crate::staging::{Installed, Installing, StageError, StagedFile, Staging};
use crate::{AsyncStream, BoxFuture, Error, ProtocolViolation, REPLID_LEN, within_live_limit};

/// Dials the primary. The server implements it over plain TCP or hotkv-tls depending on
/// `tls-replication`.
pub trait Connector: Send + Sync {
    /// Opens a connection to `host:port`.
    fn connect<'a>(&'a self, host: &'a str, port: u16) -> BoxFuture<'a, io::Result<Box<dyn AsyncStream>>>;

    /// Whether the connections it makes are TLS (for the log line).
    fn is_tls(&self) -> bool;
}

/// Applies what the primary sends to this node. The server implements it with its master
/// client. Writes applied here must not reach the engine's [`hotkv_engine::WriteSink`]: the
/// link feeds the primary's bytes unchanged to this node's own [`Primary`] instead, so
/// chained replicas get exactly the stream the primary sent.
pub trait Applier: Send {
    /// A full resync starts: the RDB that follows replaces the whole dataset. `same_history`:
    /// the primary's replication id is the one this node already follows, so the data it holds
    /// is an earlier point of the same history (Valkey then keeps serving it while it loads,
    /// with `repl-diskless-load swapdb`).
    fn begin_full_sync(&mut self, same_history: bool) -> Result<(), String>;

    /// Asked as a full sync's snapshot begins to arrive: `Some` to receive it into a file
    /// first and load it once whole (Valkey's disk-based load), `None` to load it as it
    /// arrives. The default loads as it arrives.
    fn staging(&mut self) -> Option<Staging> {
        None
    }

    /// A snapshot received to disk is whole and about to replace `dbfilename`: a future that
    /// ends once nothing else may write that file (a background save of the old data, which
    /// would rename its own file over it), or `None`.
    fn before_install(&mut self) -> Option<BoxFuture<'static, ()>> {
        None
    }

    /// The next piece of the RDB file, in order, as it arrives.
    fn load_rdb(&mut self, chunk: &[u8]) -> Result<(), String>;

    /// How many bytes of the RDB to load between two chances for the server's clients to run
    /// ([`Applier::let_clients_in`]); the default loads each piece as it arrives.
    fn load_piece_bytes(&self) -> usize {
        usize::MAX
    }

    /// Called after every [`Applier::load_piece_bytes`] loaded: a future that ends once the
    /// server let in what waited while the pieces loaded (Valkey, which loads in its event
    /// loop, processes events every `loading-process-events-interval-bytes`), or `None`.
    fn let_clients_in(&mut self) -> Option<BoxFuture<'static, ()>> {
        None
    }

    /// The RDB ended (`ok`) or the transfer failed (`!ok`: the link will retry). An error
    /// from a complete RDB (it did not parse) fails the sync too.
    fn end_full_sync(&mut self, ok: bool) -> Result<(), String>;

    /// One command of the stream: its arguments and its exact bytes. `SELECT` arrives here
    /// too; `PING` and `REPLCONF` do not (the link handles them). Errors are the server's to
    /// log; the stream goes on, as Valkey's does.
    fn apply(&mut self, args: Args<'_>, raw: &[u8]);

    /// The commands of one read, in order (see [`StreamBatch`]). The default applies them
    /// one by one; the server prepares them together first.
    fn apply_batch(&mut self, batch: &StreamBatch<'_>) {
        for i in 0..batch.len() {
            self.apply(batch.args(i), batch.raw(i));
        }
    }

    /// The stream starts on a connection to `primary` (`host:port`): the server shows its
    /// master client from now on. The future it returns ends when the server wants this
    /// connection dropped (CLIENT KILL of the master client): the link then reconnects and
    /// continues where it was, as a Valkey replica whose master client was killed does.
    fn stream_started(&mut self, _primary: &str) -> BoxFuture<'static, ()> {
        Box::pin(std::future::pending())
    }

    /// Whether the server holds the stream back now (CLIENT PAUSE WRITE or ALL on this
    /// replica, which Valkey applies to its master client too): `Some` future that ends when
    /// it may go on. The stream is still read and acknowledged meanwhile, at the offset
    /// applied.
    fn held(&mut self) -> Option<BoxFuture<'static, ()>> {
        None
    }

    /// The answer to a `PSYNC ... FAILOVER` this link sent (see [`ReplicaConfig::failover`]):
    /// `Ok` when the target took over and continued or resynced us, `Err` with its error or
    /// the write failure otherwise. The server ends or aborts its coordinated failover here.
    fn failover_outcome(&mut self, _outcome: Result<(), String>) {}

    /// The stream's connection ended.
    fn stream_ended(&mut self) {}

    /// Everything up to `applied` was applied: the stream offset up to which this node's
    /// append-only file is fsynced, sent as `REPLCONF ACK <offset> FACK <aofoffset>` for the
    /// primary's WAITAOF; `None` (no FACK) when this node has no AOF.
    fn aof_fsynced(&mut self, _applied: u64) -> Option<u64> {
        None
    }
}

/// Where to replicate from and how, from `replicaof`, `masteruser`, `masterauth`,
/// `replica-announce-ip`, `repl-timeout` and the node's port.
#[derive(Debug, Clone)]
pub struct ReplicaConfig {
    /// The primary's host.
    pub host: String,
    /// The primary's port.
    pub port: u16,
    /// Our port, announced with `REPLCONF listening-port` (`replica-announce-port` or `port`).
    pub listening_port: u16,
    /// `replica-announce-ip`, announced with `REPLCONF ip-address`.
    pub announce_ip: Option<String>,
    /// `repl-timeout`, shared with the server so CONFIG SET reaches a link already up.
    pub timeout: LiveDuration,
    /// `proto-max-bulk-len`: the largest argument the stream may carry.
    pub max_bulk_len: u64,
    /// Delay before reconnecting after a failure (Valkey's cron: one second).
    pub retry_delay: Duration,
    /// How often to send `REPLCONF ACK` (Valkey's cron: every second).
    pub ack_period: Duration,
    /// A primary handing over to this replica-to-be (standalone FAILOVER): the first PSYNC
    /// carries `FAILOVER`, which makes the target promote itself before it answers.
    pub failover: bool,
    /// Since when this node has had no link up to a primary, carried over from the link this
    /// one replaces (Valkey's `repl_down_since` is the server's, not a link's): a replica
    /// told to follow a new primary that dies before the first sync still knows how old its
    /// data is, and can stand in a failover election.
    pub down_since: Option<Instant>,
    /// Where `AUTH`'s user and password (`masteruser`, `masterauth`) come from, read at each
    /// connection: Valkey reads them at every attempt, so a CONFIG SET reaches a link that is
    /// retrying after a refused AUTH. None: no AUTH.
    pub credentials: Option<CredentialSource>,
}

/// (user, password) for the primary's `AUTH`, read when a connection is made.
#[derive(Clone)]
pub struct CredentialSource(pub Arc<dyn Fn() -> (Option<String>, Option<String>) + Send + Sync>);

impl std::fmt::Debug for CredentialSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.write_str("CredentialSource")
    }
}

/// A duration a running link reads each time it waits, so a new value (CONFIG SET
/// repl-timeout) applies to the next wait of a link already up.
#[derive(Debug, Clone)]
pub struct LiveDuration(std::sync::Arc<std::sync::atomic::AtomicU64>);

impl LiveDuration {
    /// A value of `d`.
    pub fn new(d: Duration) -> Self {
        LiveDuration(std::sync::Arc::new(std::sync::atomic::AtomicU64::new(d.as_millis() as u64)))
    }

    /// The value now.
    pub fn get(&self) -> Duration {
        Duration::from_millis(self.0.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// Changes the value for every holder.
    pub fn set(&self, d: Duration) {
        self.0.store(d.as_millis() as u64, std::sync::atomic::Ordering::Relaxed);
    }
}

impl ReplicaConfig {
    /// Valkey's defaults for a primary at `host:port`, announcing `listening_port`.
    pub fn new(host: impl Into<String>, port: u16, listening_port: u16) -> Self {
        ReplicaConfig {
            host: host.into(),
            port,
            listening_port,
            announce_ip: None,
            timeout: LiveDuration::new(Duration::from_secs(60)),
            max_bulk_len: 512 * 1024 * 1024,
            retry_delay: Duration::from_secs(1),
            ack_period: Duration::from_secs(1),
            failover: false,
            down_since: None,
            credentials: None,
        }
    }
}

/// The link's state (`repl_state`, simplified to what INFO distinguishes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkState {
    /// Waiting to (re)connect.
    Connect,
    /// Dialing.
    Connecting,
    /// Connected, exchanging PING/AUTH/REPLCONF/PSYNC.
    Handshake,
    /// Receiving the snapshot.
    Transfer,
    /// Receiving the stream.
    Connected,
    /// Stopped (REPLICAOF NO ONE or another primary).
    Stopped,
}

/// The link as INFO reports it.
#[derive(Debug, Clone)]
pub struct LinkStatus {
    /// `master_host`.
    pub host: String,
    /// `master_port`.
    pub port: u16,
    /// Where the link is.
    pub state: LinkState,
    /// When the primary last sent something on a connected link.
    pub last_io: Option<Instant>,
    /// When the link went down (`None` while up, or before it ever was).
    pub down_since: Option<Instant>,
    /// `slave_read_repl_offset`: stream bytes read, applied or not.
    pub read_offset: u64,
    /// `slave_repl_offset`: stream bytes of complete commands processed. `None` before the
    /// first sync (INFO then shows this node's own offset).
    pub offset: Option<u64>,
    /// Snapshot size being received (0 for an EOF-marked transfer, whose size is unknown).
    pub transfer_size: u64,
    /// Snapshot bytes received so far.
    pub transfer_read: u64,
    /// When snapshot bytes last arrived.
    pub transfer_last_io: Option<Instant>,
    /// Whether the connection is TLS.
    pub tls: bool,
}

/// Control of a running link; dropping it stops the link.
pub struct ReplicaHandle {
    status: Arc<Mutex<LinkStatus>>,
    stop: watch::Sender<bool>,
    task: Option<JoinHandle<()>>,
    drain: Arc<Drain>,
}

/// A request to the streaming link to apply what its primary already sent before it stops
/// ([`ReplicaHandle::drain_and_stop`]).
#[derive(Default)]
struct Drain {
    asked: tokio::sync::Notify,
    done: Mutex<Option<tokio::sync::oneshot::Sender<()>>>,
}

impl ReplicaHandle {
    /// The link's status now.
    pub fn status(&self) -> LinkStatus {
        self.status.lock().clone()
    }

    /// Stops the link and waits for its task to end (a full sync in progress is abandoned:
    /// the applier sees `end_full_sync(false)`).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }

    /// Stops the link once it has applied what its primary already sent: the bytes waiting
    /// in this side's socket and buffer. For PSYNC FAILOVER, where the primary hands its role
    /// to this node: a write it streamed before the handover must not be lost because this
    /// node had not read it yet (a stopped or slow replica: Valkey reads its primary's bytes
    /// before the PSYNC that arrived after them, as its event loop takes them in order).
    /// Waits at most `limit` for the link (one not streaming has nothing to apply).
    pub async fn drain_and_stop(self, limit: Duration) {
        // `Connected` is the command stream's state, the one place a request is answered.
        if self.status.lock().state == LinkState::Connected {
            let (tx, rx) = tokio::sync::oneshot::channel();
            *self.drain.done.lock() = Some(tx);
            self.drain.asked.notify_one();
            let _ = timeout(limit, rx).await;
        }
        self.stop().await;
    }
}

impl Drop for ReplicaHandle {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

/// Consecutive commands of the stream, decoded together so that an applier can warm the cache
/// lines their keys touch before running them (a replica applying random SETs one at a time
/// spent half its CPU waiting for slot and table lines: the same misses its primary overlaps
/// across a pipelined batch). `PING` and `REPLCONF` are not in it.
pub struct StreamBatch<'a> {
    buf: &'a [u8],
    spans: &'a [(usize, usize)],
    cmds: &'a [BatchCmd],
}

/// One command of a [`StreamBatch`]: its first span, its argument count, its bytes.
#[derive(Debug, Clone, Copy)]
struct BatchCmd {
    first: usize,
    argc: usize,
    start: usize,
    end: usize,
}

impl<'a> StreamBatch<'a> {
    /// Number of commands.
    pub fn len(&self) -> usize {
        self.cmds.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// The arguments of command `i`.
    pub fn args(&self, i: usize) -> Args<'a> {
        let c = self.cmds[i];
        Args::from_parts(self.buf, &self.spans[c.first..c.first + c.argc])
    }

    /// The exact bytes of command `i` in the stream.
    pub fn raw(&self, i: usize) -> &'a [u8] {
        let c = self.cmds[i];
        &self.buf[c.start..c.end]
    }
}

/// Room for one read's batch, kept across reads.
#[derive(Default)]
struct BatchBuf {
    spans: Vec<(usize, usize)>,
    cmds: Vec<BatchCmd>,
}

impl BatchBuf {
    fn clear(&mut self) {
        self.spans.clear();
        self.cmds.clear();
    }

    fn push(&mut self, args: &Args<'_>, start: usize, end: usize) {
        let first = self.spans.len();
        self.spans.extend_from_slice(args.spans());
        self.cmds.push(BatchCmd { first, argc: args.len(), start, end });
    }

    /// Hands the batch to `applier` and empties it.
    fn apply(&mut self, buf: &[u8], applier: &mut dyn Applier) {
        if !self.cmds.is_empty() {
            applier.apply_batch(&StreamBatch { buf, spans: &self.spans, cmds: &self.cmds });
        }
        self.clear();
    }
}

/// The link to a primary.
pub struct ReplicaLink {
    cfg: ReplicaConfig,
    connector: Arc<dyn Connector>,
    applier: Box<dyn Applier>,
    primary: Arc<Primary>,
    status: Arc<Mutex<LinkStatus>>,
    stop: watch::Receiver<bool>,
    /// Whether the applier is inside begin/end_full_sync.
    loading: bool,
    /// Snapshot bytes loaded since the applier last let its clients in.
    loaded_since_let_in: usize,
    /// Whether the applier is between stream_started and stream_ended.
    streaming: bool,
    batch: BatchBuf,
    /// The file a disk-based full sync is being received into.
    staged: Option<StagedFile>,
    /// Its install, while it runs (see [`Installing`]).
    installing: Option<Installing>,
    drain: Arc<Drain>,
}

impl ReplicaLink {
    /// Starts replicating from `cfg.host:cfg.port` on a new task (REPLICAOF host port).
    /// `primary` is this node's own replication state: the link continues from its id and
    /// offset when it has a backlog, and feeds it every byte it applies.
    pub fn spawn(
        cfg: ReplicaConfig,
        connector: Arc<dyn Connector>,
        applier: Box<dyn Applier>,
        primary: Arc<Primary>,
    ) -> ReplicaHandle {
        info!(host = %cfg.host, port = cfg.port, "Replication: becoming a replica of {}:{}", cfg.host, cfg.port);
        primary.set_upstream(true);
        let status = Arc::new(Mutex::new(LinkStatus {
            host: cfg.host.clone(),
            port: cfg.port,
            state: LinkState::Connect,
            last_io: None,
            down_since: cfg.down_since,
            read_offset: 0,
            offset: None,
            transfer_size: 0,
            transfer_read: 0,
            transfer_last_io: None,
            tls: connector.is_tls(),
        }));
        let (stop_tx, stop_rx) = watch::channel(false);
        let drain = Arc::new(Drain::default());
        let link = ReplicaLink {
            drain: drain.clone(),
            cfg,
            connector,
            applier,
            primary,
            status: status.clone(),
            stop: stop_rx,
            loading: false,
            loaded_since_let_in: 0,
            streaming: false,
            batch: BatchBuf::default(),
            staged: None,
            installing: None,
        };
        let task = tokio::spawn(link.run());
        ReplicaHandle { status, stop: stop_tx, task: Some(task), drain }
    }

    async fn run(mut self) {
        loop {
            if *self.stop.borrow() {
                break;
            }
            self.set_state(LinkState::Connecting);
            info!(host = %self.cfg.host, port = self.cfg.port, "Replication: connecting to primary {}:{}", self.cfg.host, self.cfg.port);
            let mut stop = self.stop.clone();
            let outcome = tokio::select! {
                r = self.session() => Some(r),
                _ = stop.wait_for(|s| *s) => None,
            };
            if let Some(install) = self.installing.take() {
                install.abandon().await;
            }
            if self.loading {
                self.loading = false;
                if let Err(e) = self.applier.end_full_sync(false) {
                    warn!(cause = %e, "abandoning the partial snapshot failed");
                }
            }
            // A stop drops the session mid-stream: its end is told here instead (the server
            // would otherwise go on listing the master client of a link that is gone).
            if std::mem::take(&mut self.streaming) {
                self.applier.stream_ended();
            }
            let was_up = self.status.lock().state == LinkState::Connected;
            {
                let mut st = self.status.lock();
                st.state = LinkState::Connect;
                st.last_io = None;
                // Valkey counts "down since" from the loss of a link that was up; a link that
                // never came up shows -1.
                if was_up {
                    st.down_since = Some(Instant::now());
                }
            }
            match outcome {
                None => break,
                Some(Err(e)) if was_up => warn!(cause = %e, "Connection with primary lost."),
                Some(Err(e)) => {
                    warn!(cause = %e, "Replication: sync with primary {}:{} failed", self.cfg.host, self.cfg.port)
                }
                Some(Ok(())) => {}
            }
            let mut stop = self.stop.clone();
            tokio::select! {
                _ = tokio::time::sleep(self.cfg.retry_delay) => {}
                _ = stop.wait_for(|s| *s) => break,
            }
        }
        self.set_state(LinkState::Stopped);
        info!(host = %self.cfg.host, port = self.cfg.port, "Replication: stopped replicating from {}:{}", self.cfg.host, self.cfg.port);
    }

    /// One connection: dial, handshake, resync, stream. Returns only with an error.
    async fn session(&mut self) -> Result<(), Error> {
        let stream = timeout(self.cfg.timeout.get(), self.connector.connect(&self.cfg.host, self.cfg.port))
            .await
            .map_err(|_| Error::Timeout("connecting to the primary"))??;
        let tls = self.connector.is_tls();
        info!(
            host = %self.cfg.host,
            port = self.cfg.port,
            tls,
            "Replication: connected to primary {}:{}{}",
            self.cfg.host,
            self.cfg.port,
            if tls { " over TLS" } else { "" }
        );
        self.set_state(LinkState::Handshake);
        let mut conn = Conn { stream, buf: BytesMut::with_capacity(READ_CHUNK), timeout: self.cfg.timeout.clone() };
        self.handshake(&mut conn).await?;
        let offset = self.psync(&mut conn).await?;
        let killed = self.applier.stream_started(&format!("{}:{}", self.cfg.host, self.cfg.port));
        self.streaming = true;
        let r = self.stream(conn, offset, killed).await;
        self.streaming = false;
        self.applier.stream_ended();
        r
    }

    /// PING, then AUTH and REPLCONF pipelined, as Valkey's replica sends them.
    async fn handshake(&mut self, conn: &mut Conn) -> Result<(), Error> {
        conn.send(&[b"PING"]).await?;
        let pong = conn.line().await?;
        if !ping_reply_ok(&pong) {
            warn!("Error reply to PING from primary: '{}'", String::from_utf8_lossy(&pong));
            return Err(Error::Refused(format!("PING: {}", String::from_utf8_lossy(&pong))));
        }
        info!("Primary replied to PING, replication can continue...");
        let mut out = Vec::new();
        let (user, auth) = self.cfg.credentials.as_ref().map_or((None, None), |read| (read.0)());
        if let Some(pass) = &auth {
            match &user {
                Some(user) => encode(&mut out, &[b"AUTH", user.as_bytes(), pass.as_bytes()]),
                None => encode(&mut out, &[b"AUTH", pass.as_bytes()]),
            }
        }
        let port = self.cfg.listening_port.to_string();
        encode(&mut out, &[b"REPLCONF", b"listening-port", port.as_bytes()]);
        if let Some(ip) = &self.cfg.announce_ip {
            encode(&mut out, &[b"REPLCONF", b"ip-address", ip.as_bytes()]);
        }
        encode(&mut out, &[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"]);
        encode(&mut out, &[b"REPLCONF", b"version", VERSION.as_bytes()]);
        conn.write(&out).await?;
        if auth.is_some() {
            let r = conn.line().await?;
            if r.first() == Some(&b'-') {
                warn!("Unable to AUTH to PRIMARY: {}", String::from_utf8_lossy(&r));
                return Err(Error::Refused(format!("AUTH: {}", String::from_utf8_lossy(&r))));
            }
        }
        let mut what = vec!["listening-port"];
        if self.cfg.announce_ip.is_some() {
            what.push("ip-address");
        }
        what.extend(["capa", "VERSION"]);
        for w in what {
            let r = conn.line().await?;
            // Not every server understands every REPLCONF option; none of them is essential.
            if r.first() == Some(&b'-') {
                info!("(Non critical) Primary does not understand REPLCONF {}: {}", w, String::from_utf8_lossy(&r));
            }
        }
        Ok(())
    }

    /// PSYNC, and a full resync if the primary wants one. Returns the offset the stream
    /// starts from.
    async fn psync(&mut self, conn: &mut Conn) -> Result<u64, Error> {
        let cursor = self.primary.psync_cursor();
        let (id, next) = match &cursor {
            Some((id, off)) => {
                info!("Trying a partial resynchronization (request {}:{}).", id, off + 1);
                (id.clone(), (off + 1).to_string())
            }
            None => {
                info!("Partial resynchronization not possible (no cached primary)");
                ("?".to_string(), "-1".to_string())
            }
        };
        let failover = std::mem::take(&mut self.cfg.failover);
        let sent = if failover {
            conn.send(&[b"PSYNC", id.as_bytes(), next.as_bytes(), b"FAILOVER"]).await
        } else {
            conn.send(&[b"PSYNC", id.as_bytes(), next.as_bytes()]).await
        };
        if let Err(e) = sent {
            if failover {
                self.applier.failover_outcome(Err("Write error to failover target".into()));
            }
            return Err(e);
        }
        let reply = loop {
            let line = match conn.line().await {
                Ok(line) => line,
                // The target may or may not have taken over: as Valkey, only an answer ends
                // the failover; the next connection asks again.
                Err(e) => {
                    self.cfg.failover |= failover;
                    return Err(e);
                }
            };
            match parse_psync_reply(&line).map_err(|e| {
                warn!(cause = %e, "Unexpected reply to PSYNC from primary");
                e
            }) {
                Ok(PsyncReply::KeepAlive) => continue,
                Ok(other) => break other,
                Err(e) => {
                    if failover {
                        self.applier.failover_outcome(Err("Failover target rejected psync request".into()));
                    }
                    return Err(e.into());
                }
            }
        };
        if failover {
            let outcome = match &reply {
                PsyncReply::FullResync { .. } | PsyncReply::Continue { .. } => Ok(()),
                _ => Err("Failover target rejected psync request".to_string()),
            };
            let rejected = outcome.is_err();
            self.applier.failover_outcome(outcome);
            if rejected {
                // The abort logged Valkey's line, once (its tests count it); the link's own
                // warning says what the target answered.
                let said = match &reply {
                    PsyncReply::Error(s) | PsyncReply::TryLater(s) => s.as_str(),
                    _ => "",
                };
                return Err(Error::Refused(format!("the failover target answered PSYNC with '{said}'")));
            }
        }
        match reply {
            PsyncReply::FullResync { replid, offset } => {
                info!("Full resync from primary: {}:{}", replid, offset);
                self.full_sync(conn, SyncPoint { replid, offset }).await?;
                Ok(offset)
            }
            PsyncReply::Continue { replid } => {
                let Some((_, offset)) = cursor else {
                    return Err(ProtocolViolation::BadReply("+CONTINUE to a PSYNC without history".into()).into());
                };
                info!("Successful partial resynchronization with primary.");
                if let Some(id) = replid {
                    self.primary.upstream_continue(&id);
                }
                info!("PRIMARY <-> REPLICA sync: Primary accepted a Partial Resynchronization.");
                Ok(offset)
            }
            PsyncReply::TryLater(msg) => {
                info!("Primary is currently unable to PSYNC but should be in the future: -{}", msg);
                Err(Error::Refused(msg))
            }
            PsyncReply::Error(msg) => {
                warn!("Unexpected reply to PSYNC from primary: -{}", msg);
                Err(Error::Refused(msg))
            }
            PsyncReply::KeepAlive => unreachable!("keepalives are skipped above"),
        }
    }

    /// Receives the snapshot in either form and hands it to the applier.
    async fn full_sync(&mut self, conn: &mut Conn, point: SyncPoint) -> Result<(), Error> {
        {
            let mut st = self.status.lock();
            st.state = LinkState::Transfer;
            st.transfer_size = 0;
            st.transfer_read = 0;
            st.transfer_last_io = Some(Instant::now());
        }
        let header = loop {
            let line = conn.line().await?;
            match parse_bulk_header(&line)? {
                BulkHeader::KeepAlive => self.status.lock().transfer_last_io = Some(Instant::now()),
                BulkHeader::Error(msg) => {
                    warn!("PRIMARY aborted replication with an error: {}", msg);
                    return Err(Error::Refused(msg));
                }
                h => break h,
            }
        };
        let staging = self.applier.staging();
        let to = if staging.is_some() { "disk" } else { "parser" };
        match &header {
            BulkHeader::Len(n) => {
                info!("PRIMARY <-> REPLICA sync: receiving {} bytes from primary to {}", n, to);
                self.status.lock().transfer_size = *n;
            }
            _ => info!("PRIMARY <-> REPLICA sync: receiving streamed RDB from primary with EOF to {}", to),
        }
        match staging {
            None => {
                self.begin_load(&point)?;
                if let Err(e) = self.read_snapshot(conn, header).await {
                    self.log_failed_load(&e);
                    return Err(e);
                }
                self.end_load()?;
            }
            Some(stage) => self.load_via_disk(conn, header, &point, stage).await?,
        }
        self.primary.upstream_full_sync_done(&point);
        info!("PRIMARY <-> REPLICA sync: Finished with success");
        // The first ACK at once: a primary that sent an EOF-marked snapshot starts the stream
        // only when it sees it.
        conn.send(&[b"REPLCONF", b"ACK", point.offset.to_string().as_bytes()]).await?;
        Ok(())
    }

    /// The snapshot's bytes, in the form the header announced.
    async fn read_snapshot(&mut self, conn: &mut Conn, header: BulkHeader) -> Result<(), Error> {
        match header {
            BulkHeader::Len(n) => self.read_sized(conn, n).await,
            BulkHeader::EofMark(mark) => self.read_marked(conn, &mark).await,
            BulkHeader::KeepAlive | BulkHeader::Error(_) => unreachable!("full_sync reads past these"),
        }
    }

    /// The load starts and our history ends (Valkey's replicationAttachToNewPrimary): our own
    /// replicas must resync, and the backlog restarts at the primary's offset once the load
    /// succeeds.
    fn begin_load(&mut self, point: &SyncPoint) -> Result<(), Error> {
        let same_history = self.primary.replid() == point.replid;
        self.primary.upstream_full_sync_started();
        self.applier.begin_full_sync(same_history).map_err(Error::Local)?;
        self.loading = true;
        self.loaded_since_let_in = 0;
        Ok(())
    }

    fn end_load(&mut self) -> Result<(), Error> {
        self.loading = false;
        self.applier.end_full_sync(true).map_err(Error::Local)
    }

    /// The snapshot into a file first: the old data and history stay until it is whole and in
    /// place (see [`crate::staging`]), then it loads from the file.
    async fn load_via_disk(
        &mut self,
        conn: &mut Conn,
        header: BulkHeader,
        point: &SyncPoint,
        stage: Staging,
    ) -> Result<(), Error> {
        self.staged = Some(StagedFile::create(stage).map_err(stage_failed)?);
        let read = self.read_snapshot(conn, header).await;
        // Dropped on failure, the temp file goes with it.
        let staged = self.staged.take().expect("staged above");
        read?;
        if let Some(wait) = self.applier.before_install() {
            wait.await;
        }
        let installing = self.installing.insert(staged.install());
        let installed = installing.finish().await;
        self.installing = None;
        let mut installed = installed.map_err(stage_failed)?;
        self.begin_load(point)?;
        let loaded = match self.load_file(&mut installed).await {
            Ok(()) => self.end_load(),
            Err(e) => Err(e),
        };
        if let Err(e) = &loaded {
            warn!(cause = %e, "Failed trying to load the PRIMARY synchronization DB from disk, check server logs.");
        }
        if installed.stage.remove_after_load {
            info!("Removing the RDB file obtained from the primary. This replica has persistence disabled");
            let _ = std::fs::remove_file(&installed.stage.target);
        }
        loaded
    }

    /// Loads a staged snapshot in the applier's pieces.
    async fn load_file(&mut self, file: &mut Installed) -> Result<(), Error> {
        let mut buf = vec![0u8; self.applier.load_piece_bytes().clamp(4096, 4 << 20)];
        loop {
            let n = file.read(&mut buf).map_err(|e| Error::Local(format!("reading the synced RDB file: {e}")))?;
            if n == 0 {
                return Ok(());
            }
            self.load(&buf[..n]).await?;
        }
    }

    /// Where received snapshot bytes go: the staged file, or the applier.
    async fn take_snapshot_bytes(&mut self, bytes: &[u8]) -> Result<(), Error> {
        match &mut self.staged {
            Some(f) => f.write(bytes).map_err(stage_failed),
            None => self.load(bytes).await,
        }
    }

    /// Valkey's lines for a snapshot that stopped loading part way (tests and operators look
    /// for "Internal error in RDB"); the run loop then discards what was loaded. A short read
    /// is a lost connection and the link retries, as in Valkey; bad data is also retried here,
    /// where Valkey exits: nothing a primary sends may stop this node.
    fn log_failed_load(&self, e: &Error) {
        let at = self.status.lock().transfer_read;
        match e {
            Error::Local(reason) => {
                warn!("Internal error in RDB reading offset {} -> {}. Failure loading rdb format", at, reason)
            }
            _ => warn!(
                cause = %e,
                "Internal error in RDB reading offset {} -> Unexpected EOF reading RDB file. Failure loading rdb format from socket, assuming connection error, resuming operation.",
                at
            ),
        }
        warn!("Failed trying to load the PRIMARY synchronization DB from socket, check server logs.");
    }

    /// Hands `bytes` of the snapshot to the applier in pieces of its size, and lets its
    /// clients in after each whole piece.
    async fn load(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let piece = self.applier.load_piece_bytes().max(1);
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.loaded_since_let_in >= piece {
                if let Some(wait) = self.applier.let_clients_in() {
                    wait.await;
                }
                self.loaded_since_let_in = 0;
            }
            let n = rest.len().min(piece - self.loaded_since_let_in);
            self.applier.load_rdb(&rest[..n]).map_err(Error::Local)?;
            self.loaded_since_let_in += n;
            rest = &rest[n..];
        }
        Ok(())
    }

    /// `$<len>`: exactly `len` bytes; what follows is the stream.
    async fn read_sized(&mut self, conn: &mut Conn, len: u64) -> Result<(), Error> {
        let mut left = len;
        loop {
            let take = (conn.buf.len() as u64).min(left) as usize;
            if take > 0 {
                self.take_snapshot_bytes(&conn.buf[..take]).await?;
                conn.buf.advance(take);
                left -= take as u64;
                self.note_transfer(take);
            }
            if left == 0 {
                return Ok(());
            }
            conn.fill("Timeout receiving bulk data from PRIMARY... If the problem persists try to set the 'repl-timeout' parameter in valkey.conf to a larger value.").await?;
        }
    }

    /// `$EOF:<mark>`: bytes until the 40-byte mark. The mark is searched for in everything
    /// read, not only at the end of a read, so stream bytes right behind it are kept.
    async fn read_marked(&mut self, conn: &mut Conn, mark: &[u8; REPLID_LEN]) -> Result<(), Error> {
        loop {
            if let Some(at) = find(&conn.buf, mark) {
                if at > 0 {
                    self.take_snapshot_bytes(&conn.buf[..at]).await?;
                }
                self.note_transfer(at);
                conn.buf.advance(at + REPLID_LEN);
                return Ok(());
            }
            // Everything but what could be the start of a mark split across reads.
            let safe = conn.buf.len().saturating_sub(REPLID_LEN - 1);
            if safe > 0 {
                self.take_snapshot_bytes(&conn.buf[..safe]).await?;
                conn.buf.advance(safe);
                self.note_transfer(safe);
            }
            conn.fill("Timeout receiving bulk data from PRIMARY... If the problem persists try to set the 'repl-timeout' parameter in valkey.conf to a larger value.").await?;
        }
    }

    /// The command stream: apply, count, feed our own replicas, answer GETACK, ACK every
    /// second, and give up after `repl-timeout` of silence.
    async fn stream(
        &mut self,
        mut conn: Conn,
        mut offset: u64,
        mut killed: BoxFuture<'static, ()>,
    ) -> Result<(), Error> {
        let mut read_offset = offset + conn.buf.len() as u64;
        {
            let mut st = self.status.lock();
            st.state = LinkState::Connected;
            st.down_since = None;
            st.last_io = Some(Instant::now());
            st.offset = Some(offset);
            st.read_offset = read_offset;
        }
        let limits = Limits { max_bulk_len: self.cfg.max_bulk_len, auth_required: false };
        let mut dec = Decoder::new();
        let mut ack_tick = tokio::time::interval(self.cfg.ack_period);
        let mut last_io = Instant::now();
        let drain = self.drain.clone();
        loop {
            let held = self.applier.held();
            if held.is_none() {
                let (getack, more) = self.process(&mut conn.buf, &mut dec, limits, &mut offset)?;
                {
                    let mut st = self.status.lock();
                    st.offset = Some(offset);
                    st.read_offset = read_offset;
                }
                if let Some(at) = getack {
                    let fack = self.applier.aof_fsynced(at);
                    send_ack(&mut conn, at, fack).await?;
                }
                if more {
                    // A long backlog is applied in slices, letting the clients that share this
                    // worker thread run in between (a task that never yields keeps them waiting:
                    // INFO on a replica catching up took seconds). A kill meanwhile stops it.
                    tokio::select! {
                        biased;
                        () = &mut killed => return Err(killed_link()),
                        () = tokio::task::yield_now() => {}
                    }
                    continue;
                }
            }
            let released = async {
                match held {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                }
            };
            conn.buf.reserve(READ_CHUNK);
            // The kill first. A CLIENT KILL of the master client that ran while the server was
            // stopped (`MULTI`, `DEBUG SLEEP`, `CLIENT KILL`, `EXEC`) wakes this task; when it
            // does not run before the server wakes (a loaded machine), the kill and the bytes
            // that arrived in the sleep are both ready, and Valkey's link never reads those
            // bytes. Picked at random, the read made this replica as far along as its sibling,
            // and unit/cluster/slave-selection's election chose the wrong one in 2 runs of 5.
            tokio::select! {
                biased;
                () = &mut killed => return Err(killed_link()),
                () = drain.asked.notified() => {
                    self.drain_now(&mut conn, &mut dec, limits, &mut offset, read_offset)?;
                    if let Some(done) = drain.done.lock().take() {
                        let _ = done.send(());
                    }
                    // Nothing more is read: the stop that follows ends this task.
                    std::future::pending::<()>().await;
                }
                () = released => {}
                r = timeout_at(last_io + self.cfg.timeout.get(), conn.stream.read_buf(&mut conn.buf)) => {
                    let n = match r {
                        Err(_) => {
                            warn!("PRIMARY timeout: no data nor PING received...");
                            return Err(Error::Timeout("no data nor PING from the primary"));
                        }
                        Ok(r) => r?,
                    };
                    if n == 0 {
                        return Err(Error::Io(io::ErrorKind::UnexpectedEof.into()));
                    }
                    read_offset += n as u64;
                    last_io = Instant::now();
                    let mut st = self.status.lock();
                    st.last_io = Some(last_io);
                    st.read_offset = read_offset;
                }
                _ = ack_tick.tick() => {
                    let fack = self.applier.aof_fsynced(offset);
                    send_ack(&mut conn, offset, fack).await?;
                }
            }
        }
    }

    /// Reads what has arrived without waiting for more, and applies every complete command
    /// ([`ReplicaHandle::drain_and_stop`]). Not while the applier holds the stream (DEBUG
    /// SLEEP, a pause): then nothing may be applied, as with any stop.
    fn drain_now(
        &mut self,
        conn: &mut Conn,
        dec: &mut Decoder,
        limits: Limits,
        offset: &mut u64,
        mut read_offset: u64,
    ) -> Result<(), Error> {
        if self.applier.held().is_some() {
            return Ok(());
        }
        // Polled once each with a waker that does nothing: a read that would wait ends it.
        let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
        loop {
            conn.buf.reserve(READ_CHUNK);
            let mut read = std::pin::pin!(conn.stream.read_buf(&mut conn.buf));
            match std::future::Future::poll(read.as_mut(), &mut cx) {
                std::task::Poll::Ready(Ok(n)) if n > 0 => read_offset += n as u64,
                _ => break,
            }
        }
        while self.process(&mut conn.buf, dec, limits, offset)?.1 {}
        let mut st = self.status.lock();
        st.offset = Some(*offset);
        st.read_offset = read_offset;
        Ok(())
    }

    /// Applies the complete commands in `buf`, at most [`APPLY_SLICE`] of them; returns the
    /// offset to report if a `REPLCONF GETACK` was among them (the offset before it, as
    /// Valkey reports it), and whether complete commands may remain.
    fn process(
        &mut self,
        buf: &mut BytesMut,
        dec: &mut Decoder,
        limits: Limits,
        offset: &mut u64,
    ) -> Result<(Option<u64>, bool), Error> {
        // Until the batch is fed on: a snapshot's cut waits for it (see `Primary::apply_gate`).
        let _gate = self.primary.apply_gate();
        let mut getack = None;
        let mut start = 0usize;
        let mut budget = APPLY_SLICE;
        let mut more = false;
        loop {
            if budget == 0 {
                more = true;
                break;
            }
            budget -= 1;
            let step = dec.next(buf, limits).map_err(|e| Error::Protocol(ProtocolViolation::Stream(e)))?;
            let end = dec.consumed();
            match step {
                Step::Incomplete => break,
                // Newlines and empty arrays: consumed and counted, as Valkey counts them.
                Step::Empty => {}
                Step::Command => {
                    if dec.is_inline() {
                        return Err(ProtocolViolation::InlineFromPrimary.into());
                    }
                    let args = dec.args(buf);
                    let name = args.get(0);
                    if name.eq_ignore_ascii_case(b"REPLCONF") {
                        if args.opt(1).is_some_and(|a| a.eq_ignore_ascii_case(b"GETACK")) {
                            getack = Some(*offset + start as u64);
                        }
                    } else if !name.eq_ignore_ascii_case(b"PING") {
                        self.batch.push(&args, start, end);
                    }
                }
            }
            start = end;
        }
        self.batch.apply(buf, self.applier.as_mut());
        let n = dec.discard_consumed();
        if n > 0 {
            // Our own replicas get exactly what we processed, so our offsets stay our
            // primary's.
            self.primary.feed_upstream(&buf[..n]);
            buf.advance(n);
            *offset += n as u64;
        }
        Ok((getack, more))
    }

    fn note_transfer(&self, n: usize) {
        let mut st = self.status.lock();
        st.transfer_read += n as u64;
        st.transfer_last_io = Some(Instant::now());
    }

    fn set_state(&self, state: LinkState) {
        self.status.lock().state = state;
    }
}

/// The end of a link whose master client was killed (CLIENT KILL).
fn killed_link() -> Error {
    info!("Connection with primary lost: its client was killed");
    Error::Local("the primary's client was killed".into())
}

/// Most commands of the stream applied before the link lets other tasks run.
const APPLY_SLICE: usize = 256;

/// The connection with a read buffer kept across the handshake, the snapshot and the stream
/// (the primary may send them back to back in one read).
struct Conn {
    stream: Box<dyn AsyncStream>,
    buf: BytesMut,
    timeout: LiveDuration,
}

impl Conn {
    async fn send(&mut self, args: &[&[u8]]) -> Result<(), Error> {
        let mut out = Vec::new();
        encode(&mut out, args);
        self.write(&out).await
    }

    async fn write(&mut self, bytes: &[u8]) -> Result<(), Error> {
        let t = self.timeout.get();
        timeout(t, async {
            self.stream.write_all(bytes).await?;
            self.stream.flush().await
        })
        .await
        .map_err(|_| Error::Timeout("writing to the primary"))??;
        Ok(())
    }

    /// One reply line without its line ending (`syncReadLine`).
    async fn line(&mut self) -> Result<Vec<u8>, Error> {
        loop {
            if let Some(nl) = self.buf.iter().position(|&b| b == b'\n') {
                let mut line = self.buf.split_to(nl + 1);
                line.truncate(nl);
                if line.last() == Some(&b'\r') {
                    line.truncate(nl - 1);
                }
                return Ok(line.to_vec());
            }
            if self.buf.len() > MAX_LINE {
                return Err(ProtocolViolation::LineTooLong.into());
            }
            self.buf.reserve(1024);
            self.read_more("Timeout connecting to the PRIMARY...", "handshake").await?;
        }
    }

    /// Reads more bytes into the buffer, within `repl-timeout`.
    async fn fill(&mut self, on_timeout: &'static str) -> Result<(), Error> {
        self.buf.reserve(READ_CHUNK);
        self.read_more(on_timeout, "receiving the snapshot").await
    }

    /// One read, given up after `repl-timeout` without a byte (logging `on_timeout`), the
    /// setting followed while the read waits (Valkey's "Slave is able to detect timeout
    /// during handshake" lowers it under a primary that then goes silent).
    async fn read_more(&mut self, on_timeout: &'static str, during: &'static str) -> Result<(), Error> {
        let Conn { stream, buf, timeout } = self;
        let Some(n) = within_live_limit(stream.read_buf(buf), || timeout.get()).await else {
            warn!("{}", on_timeout);
            return Err(Error::Timeout(during));
        };
        if n? == 0 {
            return Err(Error::Io(io::ErrorKind::UnexpectedEof.into()));
        }
        Ok(())
    }
}

async fn send_ack(conn: &mut Conn, offset: u64, fack: Option<u64>) -> Result<(), Error> {
    let off = offset.to_string();
    match fack {
        Some(f) => conn.send(&[b"REPLCONF", b"ACK", off.as_bytes(), b"FACK", f.to_string().as_bytes()]).await,
        None => conn.send(&[b"REPLCONF", b"ACK", off.as_bytes()]).await,
    }
}

/// Writes a command as a RESP array of bulk strings.
fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    hotkv_engine::propagate::write_command(out, args.iter().copied(), args.len());
}

/// The first position of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    if hay.len() < needle.len() {
        return None;
    }
    let first = needle[0];
    (0..=hay.len() - needle.len()).find(|&i| hay[i] == first && &hay[i..i + needle.len()] == needle)
}

/// Longest reply line accepted during the handshake.
const MAX_LINE: usize = 64 * 1024;
/// Bytes reserved per read.
const READ_CHUNK: usize = 64 * 1024;
/// What we announce with `REPLCONF version` (the Valkey release whose protocol we speak).
const VERSION: &str = "8.0.1";

/// A staged file that could not be made or put in place: logged in Valkey's words.
fn stage_failed(e: StageError) -> Error {
    warn!("{}", e);
    Error::Local(e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn find_mark() {
        assert_eq!(find(b"abcdef", b"cd"), Some(2));
        assert_eq!(find(b"abcdef", b"ef"), Some(4));
        assert_eq!(find(b"abcdef", b"eg"), None);
        assert_eq!(find(b"ab", b"abc"), None);
    }

    /// A batch built from decoded commands gives back each one's arguments and exact bytes,
    /// and the batch buffer is reused empty after it was applied.
    #[test]
    fn a_batch_hands_over_each_command_whole() {
        struct Seen(Vec<(Vec<Vec<u8>>, Vec<u8>)>);
        impl Applier for Seen {
            fn begin_full_sync(&mut self, _: bool) -> Result<(), String> {
                Ok(())
            }
            fn load_rdb(&mut self, _: &[u8]) -> Result<(), String> {
                Ok(())
            }
            fn end_full_sync(&mut self, _: bool) -> Result<(), String> {
                Ok(())
            }
            fn apply(&mut self, args: Args<'_>, raw: &[u8]) {
                self.0.push((args.iter().map(<[u8]>::to_vec).collect(), raw.to_vec()));
            }
        }
        let buf = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$2\r\nv1\r\n*1\r\n$5\r\nMULTI\r\n*2\r\n$3\r\nDEL\r\n$2\r\nk2\r\n";
        let mut dec = Decoder::new();
        let mut batch = BatchBuf::default();
        let limits = Limits { max_bulk_len: 1 << 20, auth_required: false };
        let mut start = 0;
        while let Ok(Step::Command) = dec.next(buf, limits) {
            let end = dec.consumed();
            batch.push(&dec.args(buf), start, end);
            start = end;
        }
        let mut seen = Seen(Vec::new());
        batch.apply(buf, &mut seen);
        assert!(batch.cmds.is_empty() && batch.spans.is_empty());
        let names: Vec<Vec<Vec<u8>>> = seen.0.iter().map(|(a, _)| a.clone()).collect();
        assert_eq!(
            names,
            vec![
                vec![b"SET".to_vec(), b"k".to_vec(), b"v1".to_vec()],
                vec![b"MULTI".to_vec()],
                vec![b"DEL".to_vec(), b"k2".to_vec()],
            ]
        );
        let raw: Vec<u8> = seen.0.iter().flat_map(|(_, r)| r.clone()).collect();
        assert_eq!(raw, buf.to_vec());
    }
}
