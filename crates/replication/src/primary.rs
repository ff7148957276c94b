//! The primary: the node's replication identity and stream, and its attached replicas.
//!
//! One [`Primary`] exists per node, whatever its role: a replica keeps one too, fed with the
//! bytes it applied, so its own replicas (chained replication) and a later promotion see the
//! same ids and offsets (Valkey keeps `server.replid` and the backlog on replicas for the
//! same reason).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hotkv_engine::{Effects, WriteSink};
use parking_lot::{Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};
use tokio::sync::{Notify, watch};
// tokio's clock, so tests can pause and advance time for lag, timeouts and the backlog ttl.
use tokio::time::Instant;
use tracing::{info, warn};

use crate::buffer::ReplBuffer;
use crate::direct::Direct;
use crate::sender::{Handshake, ReplicaSession};
use crate::{Error, ProtocolViolation, random_hex40};

/// Replication settings of the primary side; the server maps its directives onto them.
#[derive(Debug, Clone)]
pub struct PrimarySettings {
    /// `repl-backlog-size` (default 1 MiB).
    pub backlog_size: u64,
    /// `repl-backlog-ttl`: free the backlog after this long without replicas; zero keeps it.
    pub backlog_ttl: Duration,
    /// `repl-ping-replica-period`, in cron ticks (seconds).
    pub ping_period: u32,
    /// `repl-timeout`: an online replica silent this long is dropped.
    pub timeout: Duration,
    /// `client-output-buffer-limit replica` hard limit in bytes (0: none).
    pub obuf_hard: u64,
    /// The soft limit in bytes (0: none)...
    pub obuf_soft: u64,
    /// ...and how long a replica may stay above it.
    pub obuf_soft_duration: Duration,
    /// `min-replicas-to-write` (0: off).
    pub min_replicas_to_write: usize,
    /// `min-replicas-max-lag` in seconds (0: off).
    pub min_replicas_max_lag: u64,
}

impl Default for PrimarySettings {
    /// Valkey 8's defaults.
    fn default() -> Self {
        PrimarySettings {
            backlog_size: 1024 * 1024,
            backlog_ttl: Duration::from_secs(3600),
            ping_period: 10,
            timeout: Duration::from_secs(60),
            obuf_hard: 256 * 1024 * 1024,
            obuf_soft: 64 * 1024 * 1024,
            obuf_soft_duration: Duration::from_secs(60),
            min_replicas_to_write: 0,
            min_replicas_max_lag: 10,
        }
    }
}

/// What a replica asked for: `PSYNC <replid> <offset>`, or the old `SYNC`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncRequest {
    /// The replication id the replica knows, `?` to force a full resync.
    pub replid: String,
    /// The first byte it needs (its offset + 1), -1 with `?`.
    pub offset: i64,
    /// False for `SYNC`: no `+FULLRESYNC` line is sent and partial resync is impossible.
    pub psync: bool,
}

impl SyncRequest {
    /// Parses `PSYNC replid offset [...]` or `SYNC` from a command's arguments. `None` when
    /// the arguments are not one of those (the server replies with its usual arity or syntax
    /// error).
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a [u8]>) -> Option<SyncRequest> {
        let mut it = args.into_iter();
        let name = it.next()?;
        if name.eq_ignore_ascii_case(b"SYNC") {
            return Some(SyncRequest { replid: "?".into(), offset: -1, psync: false });
        }
        if !name.eq_ignore_ascii_case(b"PSYNC") {
            return None;
        }
        let replid = String::from_utf8_lossy(it.next()?).into_owned();
        let offset = hotkv_protocol::parse_i64(it.next()?)?;
        Some(SyncRequest { replid, offset, psync: true })
    }
}

/// The primary's answer to a [`SyncRequest`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncDecision {
    /// `+CONTINUE`: stream from the byte after `pos`.
    Continue {
        /// Offset of the last byte the replica already has.
        pos: u64,
    },
    /// A snapshot, then the stream from the snapshot's offset.
    FullResync,
}

/// Where a snapshot is consistent with the stream: its replication id and the offset of the
/// last stream byte it includes. Taken with [`Primary::snapshot_point`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncPoint {
    /// `master_replid` at that moment.
    pub replid: String,
    /// `master_repl_offset` at that moment.
    pub offset: u64,
}

/// A replica's replication state, as `INFO` names it (`replstateToString`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplicaState {
    /// Waiting for the snapshot, or receiving it in the diskless (EOF-marked) form: Valkey
    /// streams that form from its save child and says `wait_bgsave` until it ends.
    WaitBgsave,
    /// Receiving the snapshot in the length-prefixed form, gathered first (Valkey's disk form).
    SendBulk,
    /// Receiving the stream.
    Online,
}

impl ReplicaState {
    /// The word `INFO replication` prints.
    pub fn as_str(self) -> &'static str {
        match self {
            ReplicaState::WaitBgsave => "wait_bgsave",
            ReplicaState::SendBulk => "send_bulk",
            ReplicaState::Online => "online",
        }
    }
}

/// One attached replica, for `INFO` and `ROLE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaSummary {
    /// The address it announced (`REPLCONF ip-address`) or its peer address.
    pub ip: String,
    /// Its announced listening port (0 when unknown).
    pub port: u16,
    /// Where it is in the sync.
    pub state: ReplicaState,
    /// The last offset it acknowledged.
    pub ack_offset: u64,
    /// Seconds since its last ACK while online, else 0.
    pub lag: u64,
}

impl ReplicaSummary {
    /// `ip:port` as Valkey's `replicationGetReplicaName` prints it in the log.
    pub fn name(&self) -> String {
        replica_name(&self.ip, self.port)
    }
}

/// The node's replication state as a primary. Shared by the dispatch path (as the engine's
/// [`WriteSink`]), the replica senders, the replica link, INFO and the cron.
pub struct Primary {
    state: Mutex<State>,
    /// Whether the backlog exists: the engine asks on every write, so it must not lock.
    active: AtomicBool,
    /// Whether this node replicates from a primary: its backlog then lives on without
    /// replicas (`repl-backlog-ttl` applies to primaries only).
    upstream: AtomicBool,
    /// The end of the stream; senders wait on it for new bytes.
    stream: watch::Sender<u64>,
    /// Bumped on every ACK; WAIT waits on it.
    acks: watch::Sender<u64>,
    /// INFO stats `sync_full`, `sync_partial_ok`, `sync_partial_err`.
    syncs: [std::sync::atomic::AtomicU64; 3],
    /// Senders waiting for the stream to grow: appends wake them only when there are some.
    waiting: std::sync::atomic::AtomicUsize,
    /// Held shared by a replica while it applies a batch of its primary's stream and feeds it
    /// on, and exclusively across a snapshot's cut: the cut then sees a batch either applied
    /// and counted in the offset, or neither (see [`Primary::apply_gate`]).
    gate: RwLock<()>,
}

/// Counts of what PSYNC/SYNC requests got, for INFO stats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SyncCounts {
    /// `sync_full`: full resyncs served.
    pub full: u64,
    /// `sync_partial_ok`: requests continued from the backlog.
    pub partial_ok: u64,
    /// `sync_partial_err`: requests to continue that had to resync fully (`PSYNC ?` is not one).
    pub partial_err: u64,
}

struct State {
    settings: PrimarySettings,
    replid: String,
    replid2: String,
    /// `second_replid_offset`; -1 when there is no second id.
    second_offset: i64,
    /// `master_repl_offset`, kept while there is no backlog.
    offset: u64,
    backlog: Option<ReplBuffer>,
    /// The database of the last command in the stream (`replicas_eldb`); `None` forces SELECT.
    seldb: Option<usize>,
    replicas: BTreeMap<u64, Entry>,
    next_id: u64,
    /// When the last replica left (for `repl-backlog-ttl`).
    no_replicas_since: Instant,
    /// Cron ticks, for the PING period.
    ticks: u64,
    /// The stream offset right after the last `REPLCONF GETACK *`, so waiters arriving with no
    /// write in between share one.
    last_getack: u64,
    /// Whether this node's data continues its id and offset: false from when it was made a
    /// replica of another shard's primary (see [`Primary::forget_history`]) until a full sync
    /// from that primary completes.
    history: bool,
}

struct Entry {
    ip: String,
    port: u16,
    client_id: u64,
    peer: String,
    state: ReplicaState,
    ack_off: u64,
    aof_off: u64,
    ack_time: Instant,
    soft_since: Option<Instant>,
    /// After an EOF-marked transfer the stream waits for the replica's first ACK, since the
    /// replica looks for the mark at the end of what it read (`repl_start_cmd_stream_on_ack`).
    start_on_ack: bool,
    /// Set when the primary drops the replica; its sender stops.
    dropped: Option<&'static str>,
    kill: Arc<Notify>,
    /// Bytes of the still-filling block its sender copied and has not finished writing: a
    /// replica that stops reading keeps up to a block of them alive, which is its buffer's
    /// memory as much as the blocks it pins.
    copied: usize,
    /// Its socket, when an event loop may send the stream on it (see `direct`).
    direct: Option<Arc<Direct>>,
}

impl Primary {
    /// A primary with a fresh random replication id, no second id, offset 0 and no backlog.
    pub fn new(settings: PrimarySettings) -> Arc<Primary> {
        let (stream, _) = watch::channel(0);
        let (acks, _) = watch::channel(0);
        Arc::new(Primary {
            state: Mutex::new(State {
                settings,
                replid: random_hex40(),
                replid2: NO_REPLID.to_string(),
                second_offset: -1,
                offset: 0,
                backlog: None,
                seldb: None,
                replicas: BTreeMap::new(),
                next_id: 0,
                no_replicas_since: Instant::now(),
                ticks: 0,
                last_getack: u64::MAX,
                history: true,
            }),
            active: AtomicBool::new(false),
            upstream: AtomicBool::new(false),
            stream,
            acks,
            syncs: Default::default(),
            waiting: Default::default(),
            gate: RwLock::new(()),
        })
    }

    /// The settings in force.
    pub fn settings(&self) -> PrimarySettings {
        self.state.lock().settings.clone()
    }

    /// Replaces the settings (CONFIG SET); a new backlog size resizes the backlog at once.
    pub fn set_settings(&self, settings: PrimarySettings) {
        let mut st = self.state.lock();
        if let Some(b) = st.backlog.as_mut() {
            b.resize(settings.backlog_size);
        }
        st.settings = settings;
    }

    /// `master_replid`.
    pub fn replid(&self) -> String {
        self.state.lock().replid.clone()
    }

    /// `master_replid2` and `second_repl_offset`.
    pub fn replid2(&self) -> (String, i64) {
        let st = self.state.lock();
        (st.replid2.clone(), st.second_offset)
    }

    /// `master_repl_offset`.
    pub fn offset(&self) -> u64 {
        self.state.lock().offset
    }

    /// Whether the backlog exists (`repl_backlog_active`).
    pub fn backlog_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// `repl_backlog_first_byte_offset` and `repl_backlog_histlen` (zeros without a backlog).
    pub fn backlog_window(&self) -> (u64, u64) {
        let st = self.state.lock();
        st.backlog.as_ref().map_or((0, 0), |b| (b.first_byte_offset(), b.histlen()))
    }

    /// The replication buffer's memory, and the part of it beyond `backlog_size` while
    /// replicas are attached: what only they keep alive (Valkey's `mem_clients_slaves`, and
    /// what its `freeMemoryGetNotCountedMemory` leaves out of `maxmemory`).
    pub fn buffer_memory_split(&self, backlog_size: usize) -> (usize, usize) {
        let st = self.state.lock();
        let copied: usize = st.replicas.values().map(|e| e.copied).sum();
        let total = st.backlog.as_ref().map_or(0, ReplBuffer::memory) + copied;
        let replicas = if st.replicas.is_empty() { 0 } else { total.saturating_sub(backlog_size) };
        (total, replicas)
    }

    /// The attached replicas in the order they attached (`slave0`, `slave1`, ...).
    pub fn replicas(&self) -> Vec<ReplicaSummary> {
        let st = self.state.lock();
        let now = Instant::now();
        // A dropped replica is gone for INFO from the moment it is dropped, as Valkey frees
        // its client at once: its session only notices later, on its own thread.
        st.replicas.values().filter(|e| e.attached()).map(|e| e.summary(now)).collect()
    }

    /// DEBUG CHANGE-REPL-ID: a new id and no second one (`changeReplicationId` and
    /// `clearReplicationId2`), so no replica can continue the old history with us.
    pub fn change_replid(&self) {
        let mut st = self.state.lock();
        st.replid = random_hex40();
        st.replid2 = NO_REPLID.to_string();
        st.second_offset = -1;
    }

    /// CONFIG RESETSTAT: the sync counters start again from zero.
    pub fn reset_sync_counts(&self) {
        for c in &self.syncs {
            c.store(0, Ordering::Relaxed);
        }
    }

    /// What PSYNC/SYNC requests got so far.
    pub fn sync_counts(&self) -> SyncCounts {
        let at = |i: usize| self.syncs[i].load(Ordering::Relaxed);
        SyncCounts { full: at(0), partial_ok: at(1), partial_err: at(2) }
    }

    /// The rotation Valkey does when a replica is promoted (`shiftReplicationId`): the current
    /// id becomes the second one, valid up to the current offset, and a new id is drawn, so
    /// replicas of the old primary can still continue with us. The next write re-selects its
    /// database.
    pub fn shift_replid(&self) {
        let mut st = self.state.lock();
        st.replid2 = std::mem::replace(&mut st.replid, random_hex40());
        st.second_offset = st.offset as i64 + 1;
        st.seldb = None;
        info!(
            replid2 = %st.replid2,
            valid_up_to = st.second_offset,
            replid = %st.replid,
            "Setting secondary replication ID to {}, valid up to offset: {}. New replication ID is {}",
            st.replid2,
            st.second_offset,
            st.replid
        );
    }

    /// REPLICAOF NO ONE: the node stops following a primary, rotates its ids and drops its
    /// replicas so they reconnect and learn the new id (`replicationUnsetPrimary`).
    pub fn promote(&self) {
        self.upstream.store(false, Ordering::Release);
        // A primary's stream is its own history, whatever it followed before.
        self.state.lock().history = true;
        self.shift_replid();
        self.disconnect_replicas("promoted to primary");
    }

    /// Drops the replica served on connection `client_id` (CLIENT KILL), releasing what it
    /// pinned in the buffer before the command answers, as Valkey's `freeClient` does; its
    /// session then ends on its own thread. False when no replica has that connection.
    pub fn disconnect_client(&self, client_id: u64, why: &'static str) -> bool {
        self.drop_replicas_where(why, |e| e.client_id == client_id) > 0
    }

    /// Drops every attached replica (`disconnectReplicas`).
    pub fn disconnect_replicas(&self, why: &'static str) {
        self.drop_replicas_where(why, |_| true);
    }

    /// Drops the replicas `which` picks; how many there were.
    fn drop_replicas_where(&self, why: &'static str, which: impl Fn(&Entry) -> bool) -> usize {
        let mut st = self.state.lock();
        let ids: Vec<u64> = st.replicas.iter().filter(|(_, e)| which(e)).map(|(&id, _)| id).collect();
        for &id in &ids {
            st.drop_replica(id, why);
        }
        ids.len()
    }

    /// The consistency point of a snapshot for a full resync: the id and offset the snapshot
    /// stands for. A [`crate::SnapshotSource`] calls it at the moment its view of the keyspace
    /// is fixed, with no write in flight between the two (writes append while holding their
    /// slot locks, so holding all of them, or the server's equivalent barrier, is enough).
    /// It also makes the next write re-send SELECT (`replicas_eldb = -1`), since a replica
    /// starting from this point does not know which database the stream had selected.
    pub fn snapshot_point(&self) -> SyncPoint {
        let mut st = self.state.lock();
        st.seldb = None;
        SyncPoint { replid: st.replid.clone(), offset: st.offset }
    }

    /// Handles `PSYNC`/`SYNC` from a replica (`syncCommand` and
    /// `primaryTryPartialResynchronization`): decides between continuing and a full resync,
    /// attaches the replica, and returns the session to run on its connection. The server
    /// has already refused the request if this node is a replica whose link is down
    /// (`-NOMASTERLINK`) or loading.
    pub fn accept_sync(
        self: &Arc<Self>,
        req: &SyncRequest,
        handshake: &Handshake,
        client_id: u64,
        peer: &str,
    ) -> ReplicaSession {
        let ip = handshake.ip_address.clone().unwrap_or_else(|| peer_ip(peer).to_string());
        let name = replica_name(&ip, handshake.listening_port);
        let now = Instant::now();
        let mut st = self.state.lock();
        info!(replica = %name, "Replica {} asks for synchronization", name);
        let decision = match st.try_partial(req, &name) {
            Some(pos) => SyncDecision::Continue { pos },
            None => SyncDecision::FullResync,
        };
        let [full, ok, err] = &self.syncs;
        match decision {
            SyncDecision::Continue { .. } => ok.fetch_add(1, Ordering::Relaxed),
            SyncDecision::FullResync => {
                // `PSYNC ?` asks for a full sync; any other id asked to continue and could not.
                if req.psync && req.replid != "?" {
                    err.fetch_add(1, Ordering::Relaxed);
                }
                full.fetch_add(1, Ordering::Relaxed)
            }
        };
        if st.backlog.is_none() {
            // The first replica creates the backlog, with a fresh id: our old offsets had no
            // history anyone could continue from (Valkey does the same in syncCommand). A
            // replica keeps its primary's id instead (the server refuses PSYNC while its link
            // is down, so this only happens in a window it already checked).
            if !self.upstream.load(Ordering::Acquire) {
                st.replid = random_hex40();
                st.replid2 = NO_REPLID.to_string();
                st.second_offset = -1;
            }
            st.backlog = Some(ReplBuffer::new(st.offset, st.settings.backlog_size));
            self.active.store(true, Ordering::Release);
            info!("Replication backlog created, my new replication IDs are '{}' and '{}'", st.replid, st.replid2);
        }
        let id = st.next_id;
        st.next_id += 1;
        let (pos, state) = match decision {
            SyncDecision::Continue { pos } => (pos, ReplicaState::Online),
            // Pinned at the current end until the snapshot names its point, which cannot be
            // earlier, so nothing the replica will need is trimmed meanwhile.
            SyncDecision::FullResync => (st.offset, ReplicaState::WaitBgsave),
        };
        if let Some(b) = st.backlog.as_mut() {
            b.attach(id, pos);
        }
        let kill = Arc::new(Notify::new());
        st.replicas.insert(
            id,
            Entry {
                ip,
                port: handshake.listening_port,
                client_id,
                peer: peer.to_string(),
                state,
                ack_off: 0,
                aof_off: 0,
                ack_time: now,
                soft_since: None,
                start_on_ack: false,
                dropped: None,
                kill: kill.clone(),
                copied: 0,
                direct: None,
            },
        );
        let replid = st.replid.clone();
        if let SyncDecision::Continue { pos } = decision {
            let len = st.offset - pos;
            info!(
                replica = %name,
                offset = pos + 1,
                "Partial resynchronization request from {} accepted. Sending {} bytes of backlog starting from offset {}.",
                name,
                len,
                pos + 1
            );
        }
        drop(st);
        ReplicaSession::new(self.clone(), id, decision, req.psync, replid, handshake.clone(), name, kill)
    }

    /// Tells the primary to count replicas that acknowledged `offset`, asking them for an ACK
    /// once, and waits until `numreplicas` did or `timeout` passes (`WAIT`; `None` waits
    /// forever, as `WAIT n 0`). Resolves to the number of online replicas whose ACK reached
    /// `offset`. The server passes the offset after the client's last write (read with
    /// [`Primary::offset`] after its append; a later one only makes WAIT stricter).
    pub async fn wait_for(&self, offset: u64, numreplicas: usize, timeout: Option<Duration>) -> usize {
        let mut acks = self.acks.subscribe();
        let count = self.count_acked(offset);
        if count >= numreplicas {
            return count;
        }
        self.request_acks();
        let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
        loop {
            let changed = acks.changed();
            let woke = match deadline {
                Some(d) => tokio::time::timeout_at(d, changed).await.ok(),
                None => Some(changed.await),
            };
            let count = self.count_acked(offset);
            if count >= numreplicas || !matches!(woke, Some(Ok(()))) {
                return count;
            }
        }
    }

    /// The number of online replicas whose ACK reached `offset` (`replicationCountAcksByOffset`).
    pub fn count_acked(&self, offset: u64) -> usize {
        let st = self.state.lock();
        st.replicas.values().filter(|e| e.online() && e.ack_off >= offset).count()
    }

    /// The number of online replicas that acknowledged the given AOF offset (`WAITAOF`).
    pub fn count_aof_acked(&self, offset: u64) -> usize {
        let st = self.state.lock();
        st.replicas.values().filter(|e| e.online() && e.aof_off >= offset).count()
    }

    /// Online replicas whose lag is at most `min-replicas-max-lag` (`repl_good_replicas_count`).
    pub fn good_replicas(&self) -> usize {
        let st = self.state.lock();
        let now = Instant::now();
        let max_lag = st.settings.min_replicas_max_lag;
        st.replicas.values().filter(|e| e.online() && e.lag(now) <= max_lag).count()
    }

    /// Whether writes are allowed under `min-replicas-to-write` / `min-replicas-max-lag`; the
    /// server answers `-NOREPLICAS Not enough good replicas to write.` otherwise.
    pub fn writes_allowed(&self) -> bool {
        let (to_write, max_lag) = {
            let st = self.state.lock();
            (st.settings.min_replicas_to_write, st.settings.min_replicas_max_lag)
        };
        to_write == 0 || max_lag == 0 || self.good_replicas() >= to_write
    }

    /// The once-a-second replication cron of the primary side (`replicationCron`): PING into
    /// the stream every `repl-ping-replica-period`, drop replicas silent for `repl-timeout`
    /// or over the soft output limit too long, and free an unused backlog after
    /// `repl-backlog-ttl`.
    pub fn cron(&self) {
        let mut st = self.state.lock();
        let now = Instant::now();
        let period = u64::from(st.settings.ping_period.max(1));
        st.ticks += 1;
        // Tick n runs about n seconds after start: PINGs go at multiples of the period since
        // start, as Valkey's cron loops count, not at the first tick a replica sees (a replica
        // attached in the first second would get one at once, and a primary with an idle
        // stream would not stay at offset 0).
        // A replica never pings its own replicas: its stream is its primary's, byte for byte,
        // PINGs included, and one of its own would put its offsets ahead of its primary's
        // (Valkey's replicationFeedReplicas returns on a replica).
        let replica = self.upstream.load(Ordering::Acquire);
        if !replica && st.ticks.checked_rem(period) == Some(0) && !st.replicas.is_empty() && st.backlog.is_some() {
            // No SELECT: PING is not about a database (Valkey propagates it with dictid -1).
            st.append_raw(PING);
            self.stream.send_replace(st.offset);
        }
        let timeout = st.settings.timeout;
        let timed_out: Vec<u64> =
            st.replicas.iter().filter(|(_, e)| e.online() && now - e.ack_time > timeout).map(|(&id, _)| id).collect();
        for id in timed_out {
            let name = st.replicas.get(&id).map(|e| replica_name(&e.ip, e.port)).unwrap_or_default();
            warn!(replica = %name, "Disconnecting timedout replica (streaming sync): {}", name);
            st.drop_replica(id, "timeout");
        }
        st.check_limits(now);
        let ttl = st.settings.backlog_ttl;
        if st.replicas.is_empty()
            && st.backlog.is_some()
            && !ttl.is_zero()
            && !self.upstream.load(Ordering::Acquire)
            && now - st.no_replicas_since > ttl
        {
            // Without a backlog the offset stops moving, so the id must change: a replica of
            // the old history could otherwise continue from a stream with a gap.
            st.backlog = None;
            self.active.store(false, Ordering::Release);
            st.replid = random_hex40();
            st.replid2 = NO_REPLID.to_string();
            st.second_offset = -1;
            info!("Replication backlog freed after {} seconds without connected replicas.", ttl.as_secs());
        }
    }

    // ---- the replica side's hooks (chained replication) ----

    /// Marks the node as a replica (its backlog then survives without replicas) or not.
    pub fn set_upstream(&self, on: bool) {
        self.upstream.store(on, Ordering::Release);
    }

    /// The id and offset to continue from when connecting to a primary, if this node has a
    /// history (its backlog exists): `PSYNC <replid> <offset + 1>`. Valkey's replica uses its
    /// own id and offset the same way (`replicationCachePrimaryUsingMyself`).
    pub fn psync_cursor(&self) -> Option<(String, u64)> {
        let st = self.state.lock();
        st.backlog.as_ref().filter(|_| st.history).map(|_| (st.replid.clone(), st.offset))
    }

    /// This node now follows a primary whose stream its data has no part in (the cluster made
    /// it a replica in another shard): it must not ask to continue its own id and offset, and
    /// it has processed nothing of the new primary's stream until a full sync from it
    /// completes. Valkey drops its cached primary for this (`full_sync_required` in
    /// `replicationSetPrimary`), so that `replicationGetReplicaOffset` says 0.
    pub fn forget_history(&self) {
        self.state.lock().history = false;
    }

    /// Whether this node's offset counts data of the stream it follows (see
    /// [`Primary::forget_history`]).
    pub fn has_history(&self) -> bool {
        self.state.lock().history
    }

    /// A full sync from our primary begins: our history is about to be replaced, so our own
    /// replicas are dropped and the backlog freed (`replicationAttachToNewPrimary`).
    pub fn upstream_full_sync_started(&self) {
        let mut st = self.state.lock();
        let ids: Vec<u64> = st.replicas.keys().copied().collect();
        for id in ids {
            st.drop_replica(id, "full sync from primary");
        }
        st.backlog = None;
        // Nothing of the new stream is processed until the snapshot is in (Valkey discards
        // its cached primary on FULLRESYNC), however long the transfer takes.
        st.history = false;
        self.active.store(false, Ordering::Release);
    }

    /// A full sync from our primary completed at `point`: adopt its id and offset, forget the
    /// second id, and start a backlog there so our replicas can follow.
    pub fn upstream_full_sync_done(&self, point: &SyncPoint) {
        let mut st = self.state.lock();
        st.replid = point.replid.clone();
        st.replid2 = NO_REPLID.to_string();
        st.second_offset = -1;
        st.offset = point.offset;
        st.seldb = None;
        st.history = true;
        st.backlog = Some(ReplBuffer::new(point.offset, st.settings.backlog_size));
        self.active.store(true, Ordering::Release);
        self.stream.send_replace(point.offset);
    }

    /// Our primary continued us under `new_replid`: if it differs from ours, ours becomes the
    /// second id up to our offset and our replicas are dropped to learn the new one.
    pub fn upstream_continue(&self, new_replid: &str) {
        let mut st = self.state.lock();
        if st.replid == new_replid {
            return;
        }
        info!(replid = %new_replid, "Primary replication ID changed to {}", new_replid);
        st.replid2 = std::mem::replace(&mut st.replid, new_replid.to_string());
        st.second_offset = st.offset as i64 + 1;
        let ids: Vec<u64> = st.replicas.keys().copied().collect();
        for id in ids {
            st.drop_replica(id, "primary replication id changed");
        }
    }

    /// Held while a replica applies a batch of its primary's commands and then feeds the same
    /// bytes to [`Primary::feed_upstream`]. A replica applies under the slot locks but feeds
    /// after them; without the gate a snapshot's cut could fall between the two, and its
    /// image would hold the batch's effects with an offset from before it: a sub-replica's
    /// full sync, or this replica's own file at a restart, would then apply the batch twice.
    pub fn apply_gate(&self) -> RwLockReadGuard<'_, ()> {
        self.gate.read()
    }

    /// Held across a snapshot's cut (taken before any slot lock, as the replica takes the
    /// gate before it applies): see [`Primary::apply_gate`].
    pub fn cut_gate(&self) -> RwLockWriteGuard<'_, ()> {
        self.gate.write()
    }

    /// Appends bytes a replica applied from its primary, unchanged, so this node's stream is
    /// byte for byte its primary's (`replicationFeedStreamFromPrimaryStream`).
    pub fn feed_upstream(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut st = self.state.lock();
        if st.backlog.is_none() {
            return;
        }
        st.append_raw(bytes);
        let now = Instant::now();
        st.check_limits(now);
        self.stream.send_replace(st.offset);
    }

    /// The stream bytes after offset `from`, as far as they are held (tests compare streams).
    #[cfg(test)]
    pub(crate) fn stream_after(&self, from: u64) -> Vec<u8> {
        let st = self.state.lock();
        let Some(b) = st.backlog.as_ref() else { return Vec::new() };
        let mut out = Vec::new();
        b.read(from, usize::MAX, &mut out);
        out.concat()
    }

    // ---- for the senders ----

    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.stream.subscribe()
    }

    /// A sender is about to look at the buffer for the last time before waiting (see
    /// `append`); [`Primary::done_waiting`] when it found bytes or was woken.
    pub(crate) fn will_wait(&self) {
        self.waiting.fetch_add(1, Ordering::SeqCst);
    }

    /// The other half of [`Primary::will_wait`].
    pub(crate) fn done_waiting(&self) {
        self.waiting.fetch_sub(1, Ordering::SeqCst);
    }

    /// Moves a full-sync replica's pin to the snapshot's point.
    pub(crate) fn begin_bulk(&self, id: u64, point: &SyncPoint) -> Result<(), Error> {
        let mut st = self.state.lock();
        let State { backlog, replicas, offset, replid, .. } = &mut *st;
        let entry = replicas.get_mut(&id).ok_or(Error::Dropped("detached"))?;
        if let Some(why) = entry.dropped {
            return Err(Error::Dropped(why));
        }
        let buf = backlog.as_mut().ok_or(Error::Dropped("backlog freed"))?;
        let pinned = buf.position(id).ok_or(Error::Dropped("detached"))?;
        if point.offset < pinned || point.offset > *offset {
            return Err(ProtocolViolation::BadSnapshotOffset { offset: point.offset, pinned, end: *offset }.into());
        }
        if point.replid != *replid {
            return Err(Error::Local("replication id changed during the snapshot".into()));
        }
        buf.advance(id, point.offset);
        Ok(())
    }

    /// A gathered snapshot's bytes start going out.
    pub(crate) fn set_sending(&self, id: u64) {
        if let Some(e) = self.state.lock().replicas.get_mut(&id) {
            e.state = ReplicaState::SendBulk;
        }
    }

    /// The snapshot is sent: the replica is online; with `wait_ack` the stream starts at its
    /// first ACK.
    pub(crate) fn set_online(&self, id: u64, wait_ack: bool) {
        let mut st = self.state.lock();
        if let Some(e) = st.replicas.get_mut(&id) {
            e.state = ReplicaState::Online;
            e.ack_time = Instant::now();
            e.start_on_ack = wait_ack;
        }
    }

    /// Collects stream bytes for replica `id` into `out`; returns the position after them.
    pub(crate) fn read_stream(&self, id: u64, max: usize, out: &mut Vec<Bytes>) -> Result<u64, Error> {
        let mut st = self.state.lock();
        let State { replicas, backlog, .. } = &mut *st;
        let entry = replicas.get_mut(&id).ok_or(Error::Dropped("detached"))?;
        if let Some(why) = entry.dropped {
            return Err(Error::Dropped(why));
        }
        let buf = backlog.as_ref().ok_or(Error::Dropped("backlog freed"))?;
        let pos = buf.position(id).ok_or(Error::Dropped("detached"))?;
        if entry.start_on_ack {
            return Ok(pos);
        }
        Ok(entry.read(buf, pos, max, out))
    }

    /// Why replica `id` was dropped, for its session's error.
    pub(crate) fn drop_reason(&self, id: u64) -> &'static str {
        self.state.lock().replicas.get(&id).and_then(|e| e.dropped).unwrap_or("dropped by the primary")
    }

    /// Records that replica `id` has been sent everything up to `pos`.
    pub(crate) fn advance(&self, id: u64, pos: u64) {
        self.state.lock().sent(id, pos);
    }

    /// `REPLCONF ACK <offset> [FACK <aofoffset>]` from replica `id`, or a bare newline
    /// (`offset` None) that only refreshes its ACK time.
    pub(crate) fn ack(&self, id: u64, offset: Option<u64>, aof: Option<u64>) {
        let mut st = self.state.lock();
        let Some(e) = st.replicas.get_mut(&id) else { return };
        e.ack_time = Instant::now();
        if let Some(off) = offset {
            e.ack_off = e.ack_off.max(off);
        }
        if let Some(aof) = aof {
            e.aof_off = e.aof_off.max(aof);
        }
        let start = std::mem::take(&mut e.start_on_ack) && offset.is_some();
        let off = st.offset;
        drop(st);
        if start {
            self.stream.send_replace(off);
        }
        self.acks.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Removes replica `id` (its session ended).
    pub(crate) fn detach(&self, id: u64) {
        let mut st = self.state.lock();
        if st.replicas.remove(&id).is_some() {
            if let Some(b) = st.backlog.as_mut() {
                b.detach(id);
            }
            if st.replicas.is_empty() {
                st.no_replicas_since = Instant::now();
            }
        }
        drop(st);
        // A WAIT counting this replica must look again.
        self.acks.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Appends `REPLCONF GETACK *` unless one is already the last thing in the stream.
    fn request_acks(&self) {
        let mut st = self.state.lock();
        if st.backlog.is_none() || st.last_getack == st.offset {
            return;
        }
        st.append_raw(GETACK);
        st.last_getack = st.offset;
        self.stream.send_replace(st.offset);
    }
}

impl WriteSink for Primary {
    fn active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    fn append(&self, effects: &Effects) {
        if !effects.is_empty() {
            self.append_cmds(effects.iter());
        }
    }

    fn append_resp(&self, db: usize, resp: &[u8]) {
        self.append_cmds(std::iter::once((db, resp)));
    }
}

impl Primary {
    /// Appends commands (database, RESP bytes) to the stream, with a SELECT where the database
    /// changes.
    #[inline]
    fn append_cmds<'c>(&self, cmds: impl Iterator<Item = (usize, &'c [u8])>) {
        let mut st = self.state.lock();
        let State { backlog, seldb, offset, .. } = &mut *st;
        let Some(buf) = backlog.as_mut() else { return };
        let mut new_block = false;
        for (db, bytes) in cmds {
            if db != hotkv_engine::propagate::NO_DB && *seldb != Some(db) {
                let mut select = Vec::with_capacity(32);
                hotkv_engine::propagate::write_select(&mut select, db);
                new_block |= buf.append(&select);
                *seldb = Some(db);
            }
            new_block |= buf.append(bytes);
        }
        *offset = buf.offset();
        // Output limits are looked at when the stream starts a block (every 16 KiB or more),
        // as Valkey's feedReplicationBuffer does, and by the cron: a look per write cost a
        // walk of the replicas under the stream's lock for every SET.
        if new_block && !st.replicas.is_empty() && st.any_over_soft() {
            st.check_limits(Instant::now());
        }
        let end = st.offset;
        drop(st);
        // Waking costs a lock and a notify: only when a sender is waiting (it registers
        // before its last look at the buffer, so it either sees these bytes or this wake).
        if self.waiting.load(Ordering::SeqCst) > 0 {
            if WAKES_HELD.get() {
                WAKE_PENDING.set(true);
            } else {
                self.stream.send_replace(end);
            }
        }
    }
}

thread_local! {
    /// Set for the life of an event-loop thread (`hold_wakes`): its appends leave the
    /// senders' wake to the end of the loop's turn (`Primary::release_wakes`).
    static WAKES_HELD: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
    /// An append on this thread found a sender waiting since the last release.
    static WAKE_PENDING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Makes this thread's appends wake the stream's senders only when it calls
/// [`Primary::release_wakes`], which it must do before it sleeps. For an event loop, which
/// runs every ready client's batch in one turn: waking the sender, a task on another thread,
/// for each batch cost a cross-thread wakeup and a context switch per batch (a primary with
/// one replica spent 2.7x its CPU per SET at pipeline 16). Valkey writes to replicas once per
/// turn, in beforeSleep, for the same reason.
pub fn hold_wakes() {
    WAKES_HELD.set(true);
}

impl Primary {
    /// The end of a turn on a thread that holds its wakes, for every append since the last
    /// call that found a sender waiting. With `direct`, the thread first sends the stream
    /// itself on the sockets that waiting senders parked (see [`crate::DirectOut`]); the
    /// senders are woken only when one of them still has something to send. The server passes
    /// false while DEBUG SLEEP stops it, when nothing may reach the replicas.
    pub fn release_wakes(&self, direct: bool) {
        if !WAKE_PENDING.replace(false) {
            return;
        }
        let served = if direct { self.send_direct() } else { 0 };
        // A waiting sender that was not served, or one between its look and its wait.
        if self.waiting.load(Ordering::SeqCst) > served {
            self.stream.send_replace(self.offset());
        }
    }

    /// Sends the stream to every replica whose sender parked its socket; the number of them
    /// left with nothing to send.
    fn send_direct(&self) -> usize {
        let mut loans: Vec<Loan> = Vec::new();
        let mut served = 0;
        {
            let mut st = self.state.lock();
            let State { replicas, backlog, offset, .. } = &mut *st;
            let Some(buf) = backlog.as_ref() else { return 0 };
            for (&id, e) in replicas.iter_mut() {
                let Some(d) = e.direct.as_ref() else { continue };
                if !e.online() || !d.try_lend() {
                    continue;
                }
                let d = d.clone();
                let Some(from) = buf.position(id).filter(|_| !e.start_on_ack) else {
                    // Its stream starts at its first ACK, which wakes it.
                    d.give_back();
                    served += 1;
                    continue;
                };
                let mut chunks = Vec::new();
                let to = e.read(buf, from, crate::sender::BATCH, &mut chunks);
                // Beyond one send's worth, the sender takes it from there.
                loans.push(Loan { id, direct: d, from, to, all: to >= *offset, chunks, sent: from });
            }
        }
        if loans.is_empty() {
            return served;
        }
        for l in &mut loans {
            l.sent = l.from + l.direct.try_send(&l.chunks) as u64;
        }
        {
            let mut st = self.state.lock();
            for l in &loans {
                st.sent(l.id, l.sent);
            }
        }
        for l in &loans {
            // Given back only once its position is recorded: the sender reads from there.
            l.direct.give_back();
            if l.sent == l.to && l.all {
                served += 1;
            }
        }
        served
    }

    /// Lets event loops send the stream on replica `id`'s socket while its sender waits.
    pub(crate) fn lend_socket(&self, id: u64, direct: Arc<Direct>) {
        if let Some(e) = self.state.lock().replicas.get_mut(&id) {
            e.direct = Some(direct);
        }
    }
}

/// A replica's socket lent to a loop for one send.
struct Loan {
    id: u64,
    direct: Arc<Direct>,
    /// Its position when lent, and after the bytes read for it.
    from: u64,
    to: u64,
    /// Those bytes were all the stream had.
    all: bool,
    chunks: Vec<Bytes>,
    /// The position after what the socket took.
    sent: u64,
}

impl Entry {
    /// Collects the stream after `from` (up to about `max` bytes) for this replica into `out`;
    /// the position after it.
    fn read(&mut self, buf: &ReplBuffer, from: u64, max: usize, out: &mut Vec<Bytes>) -> u64 {
        let to = buf.read(from, max, out);
        // What came from the tail is a copy (see `ReplBuffer::read`), alive until `sent`.
        self.copied = to.saturating_sub(from.max(buf.tail_start())) as usize;
        to
    }
}

impl State {
    /// Replica `id` has been sent everything up to `pos`: its copy of the tail is gone and
    /// what only it held may be trimmed.
    fn sent(&mut self, id: u64, pos: u64) {
        if let Some(e) = self.replicas.get_mut(&id) {
            e.copied = 0;
        }
        if let Some(b) = self.backlog.as_mut() {
            b.advance(id, pos);
        }
    }

    /// PSYNC's partial path; `Some(pos)` when the replica can continue after `pos`.
    fn try_partial(&self, req: &SyncRequest, name: &str) -> Option<u64> {
        if !req.psync {
            return None;
        }
        let id1 = req.replid.eq_ignore_ascii_case(&self.replid);
        let id2 = req.replid.eq_ignore_ascii_case(&self.replid2) && self.second_offset >= 0;
        let continuable = id1 || (id2 && req.offset <= self.second_offset);
        if !continuable {
            if req.replid == "?" {
                info!(replica = %name, "Full resync requested by replica {}", name);
            } else if !id1 && !id2 {
                info!(
                    "Partial resynchronization not accepted: Replication ID mismatch (Replica asked for '{}', my replication IDs are '{}' and '{}')",
                    req.replid, self.replid, self.replid2
                );
            } else {
                info!(
                    "Partial resynchronization not accepted: Requested offset for second ID was {}, but I can reply up to {}",
                    req.offset, self.second_offset
                );
            }
            return None;
        }
        let held = req.offset >= 1 && self.backlog.as_ref().is_some_and(|b| b.holds(req.offset as u64 - 1));
        if !held {
            info!(
                replica = %name,
                "Unable to partial resync with replica {} for lack of backlog (Replica request was: {}).",
                name,
                req.offset
            );
            if req.offset > self.offset as i64 {
                warn!(
                    replica = %name,
                    "Warning: replica {} tried to PSYNC with an offset that is greater than the primary replication offset.",
                    name
                );
            }
            return None;
        }
        Some(req.offset as u64 - 1)
    }

    fn append_raw(&mut self, bytes: &[u8]) {
        if let Some(b) = self.backlog.as_mut() {
            b.append(bytes);
            self.offset = b.offset();
        }
    }

    /// Whether a replica is past the soft (or hard) output limit: the common case, none is,
    /// costs no clock read.
    fn any_over_soft(&self) -> bool {
        let Some(buf) = self.backlog.as_ref() else { return false };
        let s = &self.settings;
        let soft = if s.obuf_soft == 0 { u64::MAX } else { s.obuf_soft };
        let hard = if s.obuf_hard == 0 { u64::MAX } else { s.obuf_hard.max(buf.backlog_size()) };
        let limit = soft.min(hard);
        buf.pending_all()
            .any(|(id, pending)| pending >= limit || self.replicas.get(&id).is_some_and(|e| e.soft_since.is_some()))
    }

    /// Drops replicas over the hard output limit, or over the soft one for too long
    /// (`checkClientOutputBufferLimits` with Valkey's replica class).
    fn check_limits(&mut self, now: Instant) {
        let Some(buf) = self.backlog.as_ref() else { return };
        let s = &self.settings;
        // Valkey never lets the hard limit be below the backlog size: a replica that could
        // partially resync must not be dropped at once.
        let hard = if s.obuf_hard == 0 { u64::MAX } else { s.obuf_hard.max(buf.backlog_size()) };
        let soft = if s.obuf_soft == 0 { u64::MAX } else { s.obuf_soft };
        let soft_for = s.obuf_soft_duration;
        let mut over = Vec::new();
        for (id, pending) in buf.pending_all() {
            let Some(e) = self.replicas.get_mut(&id) else { continue };
            if pending >= hard {
                over.push(id);
            } else if pending >= soft {
                match e.soft_since {
                    None => e.soft_since = Some(now),
                    Some(t) if now - t > soft_for => over.push(id),
                    Some(_) => {}
                }
            } else {
                e.soft_since = None;
            }
        }
        for id in over {
            if let Some(e) = self.replicas.get(&id) {
                warn!(
                    client_id = e.client_id,
                    peer = %e.peer,
                    "Client id={} addr={} flags=S scheduled to be closed ASAP for overcoming of output buffer limits.",
                    e.client_id,
                    e.peer
                );
            }
            self.drop_replica(id, "output buffer limits");
        }
    }

    /// Marks a replica dropped, wakes its sender and releases what it pinned at once.
    fn drop_replica(&mut self, id: u64, why: &'static str) {
        let Some(e) = self.replicas.get_mut(&id) else { return };
        if e.dropped.is_none() {
            e.dropped = Some(why);
            e.kill.notify_one();
        }
        if let Some(b) = self.backlog.as_mut() {
            b.detach(id);
        }
    }
}

impl Entry {
    /// Not dropped: its session may still be winding down, but it counts no more.
    fn attached(&self) -> bool {
        self.dropped.is_none()
    }

    /// Attached and streaming: what WAIT and `min-replicas-to-write` count.
    fn online(&self) -> bool {
        self.attached() && self.state == ReplicaState::Online
    }

    fn lag(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.ack_time).as_secs()
    }

    fn summary(&self, now: Instant) -> ReplicaSummary {
        ReplicaSummary {
            ip: self.ip.clone(),
            port: self.port,
            state: self.state,
            ack_offset: self.ack_off,
            lag: if self.state == ReplicaState::Online { self.lag(now) } else { 0 },
        }
    }
}

/// `replicationGetReplicaName`: `ip:port`, with IPv6 in brackets.
pub(crate) fn replica_name(ip: &str, port: u16) -> String {
    if port == 0 {
        format!("{ip}:<unknown-replica-port>")
    } else if ip.contains(':') {
        format!("[{ip}]:{port}")
    } else {
        format!("{ip}:{port}")
    }
}

/// The IP part of a `host:port` or `[v6]:port` peer address.
fn peer_ip(peer: &str) -> &str {
    if let Some(rest) = peer.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match peer.rsplit_once(':') {
        Some((ip, _)) if !ip.contains(':') => ip,
        _ => peer,
    }
}

/// `master_replid2` when there is no second id.
pub(crate) const NO_REPLID: &str = "0000000000000000000000000000000000000000";
const PING: &[u8] = b"*1\r\n$4\r\nPING\r\n";
const GETACK: &[u8] = b"*3\r\n$8\r\nREPLCONF\r\n$6\r\nGETACK\r\n$1\r\n*\r\n";

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn effects(cmds: &[(usize, &[&str])]) -> Effects {
        let mut e = Effects::default();
        e.begin(true);
        for (db, argv) in cmds {
            e.push(*db, argv);
        }
        e
    }

    fn stream_bytes(p: &Primary) -> Vec<u8> {
        let st = p.state.lock();
        let b = st.backlog.as_ref().expect("backlog");
        let mut out = Vec::new();
        b.read(b.first_byte_offset() - 1, usize::MAX, &mut out);
        out.concat()
    }

    fn full_sync_replica(p: &Arc<Primary>) -> ReplicaSession {
        let hs = Handshake { listening_port: 7000, ..Handshake::default() };
        p.accept_sync(&SyncRequest { replid: "?".into(), offset: -1, psync: true }, &hs, 9, "127.0.0.1:5555")
    }

    #[test]
    fn no_backlog_no_stream() {
        let p = Primary::new(PrimarySettings::default());
        assert!(!p.active());
        p.append(&effects(&[(0, &["SET", "k", "v"])]));
        assert_eq!(p.offset(), 0, "master_repl_offset only moves while the backlog exists");
        assert_eq!(p.backlog_window(), (0, 0));
    }

    #[test]
    fn a_thread_that_holds_its_wakes_wakes_a_waiting_sender_once_at_release() {
        let p = Primary::new(PrimarySettings::default());
        let _s = full_sync_replica(&p);
        let mut rx = p.subscribe();
        rx.borrow_and_update();
        // Nobody waits: an append wakes nothing, held or not.
        p.append(&effects(&[(0, &["SET", "a", "1"])]));
        assert!(!rx.has_changed().unwrap());
        p.will_wait();
        // A thread that does not hold its wakes wakes the waiting sender at once.
        p.append(&effects(&[(0, &["SET", "a", "2"])]));
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        // An event loop's thread: many appends, no wake until the turn ends, then one, with
        // the offset of the last.
        let p2 = p.clone();
        std::thread::spawn(move || {
            hold_wakes();
            for i in 0..10 {
                p2.append(&effects(&[(0, &["SET", "b", &i.to_string()])]));
            }
        })
        .join()
        .unwrap();
        assert!(!rx.has_changed().unwrap(), "a held append woke the sender");
        // The release is the holding thread's own: another thread's finds nothing pending.
        p.release_wakes(true);
        assert!(!rx.has_changed().unwrap());
        let p2 = p.clone();
        std::thread::spawn(move || {
            hold_wakes();
            p2.append(&effects(&[(0, &["SET", "c", "1"])]));
            p2.append(&effects(&[(0, &["SET", "c", "2"])]));
            p2.release_wakes(true);
            p2.release_wakes(true);
        })
        .join()
        .unwrap();
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), p.offset());
        p.done_waiting();
    }

    /// A replica's socket as a loop sees it: takes up to `room` bytes, keeps what it took.
    struct Socketish {
        room: std::sync::atomic::AtomicUsize,
        got: Mutex<Vec<u8>>,
    }

    impl crate::DirectOut for Arc<Socketish> {
        fn try_send(&self, chunks: &[Bytes]) -> std::io::Result<usize> {
            let mut got = self.got.lock();
            let mut n = 0;
            for c in chunks {
                let take = c.len().min(self.room.load(Ordering::SeqCst) - n);
                got.extend_from_slice(&c[..take]);
                n += take;
            }
            Ok(n)
        }
    }

    #[test]
    fn a_loop_sends_the_stream_on_a_parked_socket_and_wakes_the_sender_only_for_what_it_could_not() {
        let p = Primary::new(PrimarySettings::default());
        let _first = full_sync_replica(&p);
        p.append(&effects(&[(0, &["SET", "a", "0"])]));
        let req = SyncRequest { replid: p.replid(), offset: p.offset() as i64 + 1, psync: true };
        let session = p.accept_sync(&req, &Handshake::default(), 2, "127.0.0.1:6000");
        let sock = Arc::new(Socketish { room: usize::MAX.into(), got: Mutex::default() });
        let direct = Direct::new(Box::new(sock.clone()));
        p.lend_socket(session.id, direct.clone());
        let mut rx = p.subscribe();
        rx.borrow_and_update();
        let from = p.offset();
        let on_a_loop = |p: &Arc<Primary>, cmds: &'static [(usize, &'static [&'static str])], direct: bool| {
            let p = p.clone();
            std::thread::spawn(move || {
                hold_wakes();
                p.append(&effects(cmds));
                p.release_wakes(direct);
            })
            .join()
            .unwrap();
        };
        // The sender has not parked its socket: the loop wakes it, as before.
        p.will_wait();
        on_a_loop(&p, &[(0, &["SET", "b", "1"])], true);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        assert!(sock.got.lock().is_empty());
        // It catches up and parks: the loop sends the next turn's bytes itself, from the
        // replica's position, and the sender sleeps on.
        let mut chunks = Vec::new();
        let pos = p.read_stream(session.id, 1 << 20, &mut chunks).unwrap();
        p.advance(session.id, pos);
        direct.park();
        let before = p.offset();
        on_a_loop(&p, &[(0, &["SET", "c", "2"]), (0, &["SET", "d", "3"])], true);
        assert!(!rx.has_changed().unwrap(), "the loop sent it all, yet woke the sender");
        assert_eq!(sock.got.lock().as_slice(), &p.stream_after(before)[..]);
        assert!(from < before);
        // While the server is stopped (DEBUG SLEEP) the loop leaves the socket alone.
        on_a_loop(&p, &[(0, &["SET", "e", "4"])], false);
        assert!(rx.has_changed().unwrap());
        rx.borrow_and_update();
        let mut chunks = Vec::new();
        let pos = p.read_stream(session.id, 1 << 20, &mut chunks).unwrap();
        p.advance(session.id, pos);
        // A socket that takes 5 bytes: the loop records those and wakes the sender for the rest.
        sock.got.lock().clear();
        sock.room.store(5, Ordering::SeqCst);
        let before = p.offset();
        on_a_loop(&p, &[(0, &["SET", "f", "5"])], true);
        assert!(rx.has_changed().unwrap());
        let mut chunks = Vec::new();
        p.read_stream(session.id, 1 << 20, &mut chunks).unwrap();
        let rest: Vec<u8> = chunks.iter().flat_map(|c| c.iter().copied()).collect();
        let whole = p.stream_after(before);
        assert_eq!(sock.got.lock().as_slice(), &whole[..5]);
        assert_eq!(rest, &whole[5..]);
        p.done_waiting();
    }

    #[test]
    fn disconnecting_a_replicas_connection_releases_its_buffer_at_once() {
        let p = Primary::new(PrimarySettings { backlog_size: 16 * 1024, ..PrimarySettings::default() });
        let _s = full_sync_replica(&p);
        let value = "A".repeat(1000);
        for _ in 0..2000 {
            p.append(&effects(&[(0, &["SET", "k", &value])]));
        }
        let (total, replicas) = p.buffer_memory_split(16 * 1024);
        assert!(replicas > 1 << 20, "{total} {replicas}");
        assert!(!p.disconnect_client(10, "killed"), "no replica on connection 10");
        assert!(p.disconnect_client(9, "killed"));
        let (total, replicas) = p.buffer_memory_split(16 * 1024);
        assert!(total < 64 * 1024 && replicas < 64 * 1024, "{total} {replicas}");
    }

    #[test]
    fn select_only_when_the_db_changes_and_after_a_snapshot_point() {
        let p = Primary::new(PrimarySettings::default());
        let _s = full_sync_replica(&p);
        assert!(p.active());
        assert_eq!(p.backlog_window(), (1, 0));
        p.append(&effects(&[(0, &["SET", "a", "1"]), (0, &["SET", "b", "2"])]));
        p.append(&effects(&[(3, &["DEL", "a"])]));
        p.append(&effects(&[(3, &["DEL", "b"])]));
        let _ = p.snapshot_point();
        p.append(&effects(&[(3, &["DEL", "c"])]));
        let s = String::from_utf8(stream_bytes(&p)).unwrap();
        assert_eq!(
            s,
            "*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$1\r\na\r\n$1\r\n1\r\n*3\r\n$3\r\nSET\r\n$1\r\nb\r\n$1\r\n2\r\n\
             *2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n*2\r\n$3\r\nDEL\r\n$1\r\na\r\n*2\r\n$3\r\nDEL\r\n$1\r\nb\r\n\
             *2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n*2\r\n$3\r\nDEL\r\n$1\r\nc\r\n"
        );
        assert_eq!(p.offset(), s.len() as u64);
        assert_eq!(p.backlog_window(), (1, s.len() as u64));
    }

    #[test]
    fn psync_decisions() {
        let p = Primary::new(PrimarySettings { backlog_size: 16 * 1024, ..PrimarySettings::default() });
        let first = full_sync_replica(&p);
        assert_eq!(first.decision(), SyncDecision::FullResync);
        for i in 0..10 {
            p.append(&effects(&[(0, &["SET", "k", &i.to_string()])]));
        }
        let id = p.replid();
        let hs = Handshake::default();
        let req = |replid: &str, offset: i64| SyncRequest { replid: replid.into(), offset, psync: true };
        let end = p.offset() as i64;
        assert_eq!(p.accept_sync(&req(&id, 1), &hs, 1, "1.2.3.4:5").decision(), SyncDecision::Continue { pos: 0 });
        assert_eq!(
            p.accept_sync(&req(&id, end + 1), &hs, 1, "1.2.3.4:5").decision(),
            SyncDecision::Continue { pos: end as u64 }
        );
        assert_eq!(p.accept_sync(&req(&id, end + 2), &hs, 1, "1.2.3.4:5").decision(), SyncDecision::FullResync);
        assert_eq!(p.accept_sync(&req(&id, 0), &hs, 1, "1.2.3.4:5").decision(), SyncDecision::FullResync);
        assert_eq!(p.accept_sync(&req(&random_hex40(), 1), &hs, 1, "1.2.3.4:5").decision(), SyncDecision::FullResync);
        let sync = SyncRequest { replid: id.clone(), offset: 1, psync: false };
        assert_eq!(p.accept_sync(&sync, &hs, 1, "1.2.3.4:5").decision(), SyncDecision::FullResync);
        // After a shift the old id is good up to the shift point, the new one from there on.
        p.shift_replid();
        let (id2, second) = p.replid2();
        assert_eq!(id2, id);
        assert_eq!(second, end + 1);
        p.append(&effects(&[(0, &["SET", "k", "after"])]));
        assert_eq!(
            p.accept_sync(&req(&id, end + 1), &hs, 1, "1.2.3.4:5").decision(),
            SyncDecision::Continue { pos: end as u64 }
        );
        assert_eq!(p.accept_sync(&req(&id, end + 2), &hs, 1, "1.2.3.4:5").decision(), SyncDecision::FullResync);
        let new_id = p.replid();
        assert_eq!(
            p.accept_sync(&req(&new_id, end + 2), &hs, 1, "1.2.3.4:5").decision(),
            SyncDecision::Continue { pos: end as u64 + 1 }
        );
    }

    #[test]
    fn sync_request_parsing() {
        let parse = |a: &[&str]| SyncRequest::parse(a.iter().map(|s| s.as_bytes()));
        assert_eq!(parse(&["SYNC"]), Some(SyncRequest { replid: "?".into(), offset: -1, psync: false }));
        assert_eq!(parse(&["psync", "?", "-1"]), Some(SyncRequest { replid: "?".into(), offset: -1, psync: true }));
        assert_eq!(parse(&["PSYNC", "abc", "x"]), None);
        assert_eq!(parse(&["PSYNC", "abc"]), None);
        assert_eq!(parse(&["GET", "abc"]), None);
    }

    #[test]
    fn names_and_peers() {
        assert_eq!(replica_name("10.0.0.1", 6380), "10.0.0.1:6380");
        assert_eq!(replica_name("::1", 6380), "[::1]:6380");
        assert_eq!(replica_name("10.0.0.1", 0), "10.0.0.1:<unknown-replica-port>");
        assert_eq!(peer_ip("10.0.0.1:4000"), "10.0.0.1");
        assert_eq!(peer_ip("[::1]:4000"), "::1");
        assert_eq!(peer_ip("::1"), "::1");
    }

    #[tokio::test(start_paused = true)]
    async fn backlog_is_freed_after_the_ttl_with_a_new_id() {
        let p = Primary::new(PrimarySettings { backlog_ttl: Duration::from_secs(5), ..PrimarySettings::default() });
        drop(full_sync_replica(&p));
        let id = p.replid();
        assert!(p.backlog_active());
        tokio::time::advance(Duration::from_secs(3)).await;
        p.cron();
        assert!(p.backlog_active(), "kept within the ttl");
        tokio::time::advance(Duration::from_secs(3)).await;
        p.cron();
        assert!(!p.backlog_active());
        assert_ne!(p.replid(), id);
    }
}
