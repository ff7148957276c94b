//! The primary's side of one replica connection: what the replica announced with REPLCONF,
//! and the session that answers its PSYNC, sends the snapshot and then the stream.

use std::future::Future;
use std::io;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use hotkv_protocol::{Decoder, Limits, Step};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::{Notify, mpsc};
use tracing::{info, warn};

use crate::direct::{Direct, DirectOut};
use crate::primary::{Primary, SyncDecision, SyncPoint};
use crate::{BoxFuture, Error, ProtocolViolation, random_hex40, within_live_limit};

/// What a replica told us with `REPLCONF` before `PSYNC`. The server keeps one per client
/// connection and feeds it every `REPLCONF` the client sends.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Handshake {
    /// `REPLCONF listening-port`.
    pub listening_port: u16,
    /// `REPLCONF ip-address`.
    pub ip_address: Option<String>,
    /// `capa eof`: the replica reads `$EOF:<mark>` transfers.
    pub capa_eof: bool,
    /// `capa psync2`: the replica understands `+CONTINUE <replid>`.
    pub capa_psync2: bool,
}

/// The reply to a `REPLCONF` on a client connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReplconfReply {
    /// `+OK`.
    Ok,
    /// An error reply, without the leading `-`.
    Error(String),
    /// No reply at all (`ACK` and `GETACK` never answer).
    Silent,
}

impl Handshake {
    /// Applies `REPLCONF <option> <value> ...` (`args` without the command name) and says
    /// what to reply, as Valkey's `replconfCommand` does for a connection that is not yet a
    /// replica.
    pub fn replconf(&mut self, args: &[&[u8]]) -> ReplconfReply {
        if args.len() % 2 == 1 {
            return ReplconfReply::Error("ERR wrong number of arguments for 'replconf' command".into());
        }
        for pair in args.chunks(2) {
            let (opt, value) = (pair[0], pair[1]);
            let opt_lc = opt.to_ascii_lowercase();
            match opt_lc.as_slice() {
                b"listening-port" => match hotkv_protocol::parse_i64(value).and_then(|p| u16::try_from(p).ok()) {
                    Some(p) => self.listening_port = p,
                    None => return ReplconfReply::Error("ERR value is not an integer or out of range".into()),
                },
                b"ip-address" => {
                    if value.len() >= MAX_HOST_LEN {
                        return ReplconfReply::Error(format!(
                            "ERR REPLCONF ip-address provided by replica instance is too long: {} bytes",
                            value.len()
                        ));
                    }
                    self.ip_address = Some(String::from_utf8_lossy(value).into_owned());
                }
                b"capa" => {
                    // Capabilities we do not know are ignored, as Valkey does.
                    if value.eq_ignore_ascii_case(b"eof") {
                        self.capa_eof = true;
                    } else if value.eq_ignore_ascii_case(b"psync2") {
                        self.capa_psync2 = true;
                    }
                }
                // Only a replica's session acts on these; from a plain client they are silent.
                b"ack" | b"getack" => return ReplconfReply::Silent,
                b"version" | b"rdb-only" | b"rdb-filter-only" => {}
                _ => {
                    return ReplconfReply::Error(format!(
                        "ERR Unrecognized REPLCONF option: {}",
                        String::from_utf8_lossy(opt)
                    ));
                }
            }
        }
        ReplconfReply::Ok
    }
}

/// Counts a sender as waiting for the stream for as long as it lives (also when the
/// sender's future is dropped mid-wait).
struct WaitGuard<'a>(&'a Primary);

impl<'a> WaitGuard<'a> {
    fn new(p: &'a Primary) -> WaitGuard<'a> {
        p.will_wait();
        WaitGuard(p)
    }
}

impl Drop for WaitGuard<'_> {
    fn drop(&mut self) {
        self.0.done_waiting();
    }
}

/// An RDB snapshot for a full resync: its consistency point and its bytes.
pub struct Snapshot {
    /// Where the snapshot stands in the stream, from [`Primary::snapshot_point`].
    pub point: SyncPoint,
    /// The RDB bytes in order; the channel closes after the last chunk. An `Err` aborts the
    /// transfer (the replica is dropped and retries).
    pub rdb: mpsc::Receiver<io::Result<Bytes>>,
    /// Whatever the source keeps alive until the transfer is done with the snapshot (the
    /// server counts a full sync as running meanwhile, as Valkey counts its replication child
    /// until the last byte left its pipe).
    pub hold: Option<Box<dyn std::any::Any + Send>>,
}

/// Produces snapshots for full resyncs. The server implements it with the engine's RDB writer.
pub trait SnapshotSource: Send + Sync {
    /// Starts a snapshot. The implementation calls [`Primary::snapshot_point`] at the moment
    /// its view of the keyspace is fixed and returns that point with a channel of RDB chunks.
    fn snapshot(&self) -> BoxFuture<'_, io::Result<Snapshot>>;
}

/// One replica's session on its connection, made by [`Primary::accept_sync`]. Dropping it
/// (or [`ReplicaSession::run`] returning) detaches the replica.
pub struct ReplicaSession {
    primary: Arc<Primary>,
    pub(crate) id: u64,
    decision: SyncDecision,
    /// False for the old `SYNC`, which gets no `+FULLRESYNC` line.
    psync: bool,
    replid: String,
    handshake: Handshake,
    name: String,
    kill: Arc<Notify>,
    /// Its socket as event loops may send on it, when the server lent it.
    direct: Option<Arc<Direct>>,
    /// Names the commands a replica must not send (see [`ReplicaSession::describe_commands`]).
    describe: Option<DescribeCommand>,
}

/// What the server knows of a command a replica sent on its link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkCommand {
    /// Valkey's full name: `get`, `xinfo|help`.
    pub name: String,
    /// It reads or writes the keyspace (or may replicate).
    pub keyspace: bool,
}

/// How the server describes a command; a command it does not know (or without one) is named
/// by its first word.
pub type DescribeCommand = Box<dyn Fn(&hotkv_protocol::Args<'_>) -> Option<LinkCommand> + Send + Sync>;

impl ReplicaSession {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        primary: Arc<Primary>,
        id: u64,
        decision: SyncDecision,
        psync: bool,
        replid: String,
        handshake: Handshake,
        name: String,
        kill: Arc<Notify>,
    ) -> Self {
        ReplicaSession { primary, id, decision, psync, replid, handshake, name, kill, direct: None, describe: None }
    }

    /// How to name a command the replica sends on its link for the log line that drops it.
    pub fn describe_commands(&mut self, describe: DescribeCommand) {
        self.describe = Some(describe);
    }

    /// Lets the event loops that append to the stream send it on the replica's connection
    /// themselves while this session waits for more (see [`DirectOut`]). Only for a
    /// connection whose bytes need no further processing: plain TCP.
    pub fn lend_socket(&mut self, out: Box<dyn DirectOut>) {
        let direct = Direct::new(out);
        self.primary.lend_socket(self.id, direct.clone());
        self.direct = Some(direct);
    }

    /// Whether this session continues the replica's stream or sends a snapshot first.
    pub fn decision(&self) -> SyncDecision {
        self.decision
    }

    /// Serves the replica on `stream` (the client's connection, plain or TLS, right after
    /// its PSYNC; `leftover` holds bytes the server had read past it) until the replica goes
    /// away or the primary drops it. Run it on the connection's own task.
    pub async fn run<S>(self, stream: S, leftover: &[u8], source: &dyn SnapshotSource) -> Result<(), Error>
    where
        S: AsyncRead + AsyncWrite + Unpin + Send,
    {
        let (mut rd, mut wr) = tokio::io::split(stream);
        let kill = self.kill.clone();
        let result = {
            let work = async {
                match self.decision {
                    SyncDecision::Continue { .. } => {
                        let line = if self.handshake.capa_psync2 {
                            format!("+CONTINUE {}\r\n", self.replid)
                        } else {
                            "+CONTINUE\r\n".to_string()
                        };
                        wr.write_all(line.as_bytes()).await?;
                        wr.flush().await?;
                    }
                    SyncDecision::FullResync => self.full_sync(&mut wr, source).await?,
                }
                self.stream_out(&mut wr).await
            };
            let acks = self.read_acks(&mut rd, leftover);
            tokio::select! {
                r = work => r,
                r = acks => r,
                _ = kill.notified() => Err(Error::Dropped(self.primary.drop_reason(self.id))),
            }
        };
        match &result {
            Err(Error::Dropped(why)) => warn!(replica = %self.name, "Replica {} dropped: {}", self.name, why),
            Err(e) => info!(replica = %self.name, cause = %e, "Connection with replica {} lost.", self.name),
            Ok(()) => info!(replica = %self.name, "Connection with replica {} lost.", self.name),
        }
        result
    }

    /// `+FULLRESYNC`, then the snapshot in the form the replica can read.
    async fn full_sync<W: AsyncWrite + Unpin>(&self, wr: &mut W, source: &dyn SnapshotSource) -> Result<(), Error> {
        info!(replica = %self.name, "Starting BGSAVE for SYNC with target: replicas sockets");
        let snap =
            keepalive(wr, source.snapshot()).await?.map_err(|e| Error::Local(format!("snapshot failed: {e}")))?;
        let Snapshot { point, mut rdb, hold: _hold } = snap;
        self.primary.begin_bulk(self.id, &point)?;
        if self.psync {
            let line = format!("+FULLRESYNC {} {}\r\n", point.replid, point.offset);
            wr.write_all(line.as_bytes()).await?;
        }
        if self.handshake.capa_eof {
            // Diskless form: the length is unknown up front, the end is a random mark.
            let mark = random_hex40();
            wr.write_all(format!("$EOF:{mark}\r\n").as_bytes()).await?;
            while let Some(chunk) = rdb.recv().await {
                self.write_bulk(wr, &chunk.map_err(|e| Error::Local(format!("snapshot failed: {e}")))?).await?;
            }
            wr.write_all(mark.as_bytes()).await?;
            wr.flush().await?;
            self.primary.set_online(self.id, true);
            info!(
                replica = %self.name,
                "Streamed RDB transfer with replica {} succeeded (socket). Waiting for REPLCONF ACK from replica to enable streaming",
                self.name
            );
        } else {
            // The length must come first, so the whole snapshot is gathered (Valkey writes it
            // to disk); newlines keep the replica from timing out meanwhile.
            let gathered = keepalive(wr, async {
                let mut chunks = Vec::new();
                while let Some(chunk) = rdb.recv().await {
                    chunks.push(chunk?);
                }
                io::Result::Ok(chunks)
            })
            .await?
            .map_err(|e| Error::Local(format!("snapshot failed: {e}")))?;
            let len: usize = gathered.iter().map(Bytes::len).sum();
            self.primary.set_sending(self.id);
            wr.write_all(format!("${len}\r\n").as_bytes()).await?;
            for c in &gathered {
                self.write_bulk(wr, c).await?;
            }
            wr.flush().await?;
            self.primary.set_online(self.id, false);
        }
        info!(replica = %self.name, "Synchronization with replica {} succeeded", self.name);
        Ok(())
    }

    /// Writes snapshot bytes, giving the replica up when a write makes no progress for
    /// `repl-timeout` (followed while the write waits: Valkey's rdb-pipe tests lower it
    /// mid-sync), as Valkey's replication cron drops a replica whose full sync stalled: one
    /// that stopped reading would otherwise hold every replica that shares its snapshot.
    async fn write_bulk<W: AsyncWrite + Unpin>(&self, wr: &mut W, mut bytes: &[u8]) -> Result<(), Error> {
        while !bytes.is_empty() {
            let Some(n) = within_live_limit(wr.write(bytes), || self.primary.settings().timeout).await else {
                warn!(replica = %self.name, "Disconnecting timedout replica (full sync): {}", self.name);
                return Err(Error::Dropped("timeout during the full sync"));
            };
            let n = n?;
            if n == 0 {
                return Err(Error::Io(io::ErrorKind::WriteZero.into()));
            }
            bytes = &bytes[n..];
        }
        Ok(())
    }

    /// Sends the shared stream from the replica's position, forever.
    async fn stream_out<W: AsyncWrite + Unpin>(&self, wr: &mut W) -> Result<(), Error> {
        let mut rx = self.primary.subscribe();
        let mut chunks = Vec::new();
        loop {
            // Registered and marked seen before reading: an append after the read wakes us.
            let waiting = WaitGuard::new(&self.primary);
            rx.borrow_and_update();
            if let Some(d) = &self.direct {
                d.take().await;
            }
            chunks.clear();
            let pos = self.primary.read_stream(self.id, BATCH, &mut chunks)?;
            if chunks.is_empty() {
                if let Some(d) = &self.direct {
                    d.park();
                }
                let woken = rx.changed().await;
                drop(waiting);
                if woken.is_err() {
                    return Ok(());
                }
                // Woken by one write: let the batches running on the other workers append
                // theirs too, so one send carries many commands (Valkey writes to replicas
                // once per event-loop turn for the same reason).
                tokio::task::yield_now().await;
                continue;
            }
            drop(waiting);
            for c in &chunks {
                wr.write_all(c).await?;
            }
            wr.flush().await?;
            self.primary.advance(self.id, pos);
        }
    }

    /// Reads what the replica sends: `REPLCONF ACK <offset> [FACK <aofoffset>]`, and newlines
    /// while it loads. Returns when the connection closes.
    async fn read_acks<R: AsyncRead + Unpin>(&self, rd: &mut R, leftover: &[u8]) -> Result<(), Error> {
        let mut buf = BytesMut::with_capacity(1024);
        buf.extend_from_slice(leftover);
        let mut dec = Decoder::new();
        // A replica only sends short commands: the unauthenticated limits (10 arguments,
        // 16 KiB each) bound what a misbehaving one can make us hold.
        let limits = Limits { max_bulk_len: 1024, auth_required: true };
        loop {
            loop {
                match dec.next(&buf, limits).map_err(|e| Error::Protocol(ProtocolViolation::Stream(e)))? {
                    Step::Incomplete => break,
                    Step::Empty => self.primary.ack(self.id, None, None),
                    Step::Command => {
                        let args = dec.args(&buf);
                        let replconf = args.get(0).eq_ignore_ascii_case(b"REPLCONF") && args.len() >= 2;
                        if replconf && args.len() >= 3 && args.get(1).eq_ignore_ascii_case(b"ACK") {
                            let off = hotkv_protocol::parse_u64(args.get(2));
                            let fack = match (args.opt(3), args.opt(4)) {
                                (Some(k), Some(v)) if k.eq_ignore_ascii_case(b"FACK") => hotkv_protocol::parse_u64(v),
                                _ => None,
                            };
                            if off.is_some() {
                                self.primary.ack(self.id, off, fack);
                            }
                        } else if !(replconf && args.get(1).eq_ignore_ascii_case(b"GETACK")) {
                            return Err(self.refuse(&args));
                        }
                    }
                }
            }
            let n = dec.discard_consumed();
            buf.advance(n);
            if rd.read_buf(&mut buf).await? == 0 {
                return Err(Error::Io(io::ErrorKind::UnexpectedEof.into()));
            }
        }
    }

    /// A command on the link that would have a reply: the stream is one-way, so a reply
    /// would land in the middle of it. Valkey runs the command (refusing those that touch
    /// the keyspace), then frees the replica when the reply is produced; the end is the same
    /// without running it.
    fn refuse(&self, args: &hotkv_protocol::Args<'_>) -> Error {
        let cmd = self.describe.as_ref().and_then(|describe| describe(args)).unwrap_or_else(|| LinkCommand {
            name: String::from_utf8_lossy(args.get(0)).to_lowercase(),
            keyspace: false,
        });
        if cmd.keyspace {
            warn!(
                replica = %self.name,
                "== CRITICAL == This primary is sending an error to its replica: 'Replica can't interact with the keyspace' after processing the command '{}'",
                cmd.name
            );
        }
        warn!(
            replica = %self.name,
            "Replica generated a reply to command '{}', disconnecting it: id={} replica={}",
            cmd.name, self.id, self.name
        );
        Error::Dropped("sent a command on the replication link")
    }
}

impl Drop for ReplicaSession {
    fn drop(&mut self) {
        self.primary.detach(self.id);
    }
}

/// Awaits `fut`, writing a newline to the replica every second meanwhile (`replicationCron`
/// does this for replicas waiting for their snapshot).
async fn keepalive<W: AsyncWrite + Unpin, F: Future>(wr: &mut W, fut: F) -> Result<F::Output, Error> {
    tokio::pin!(fut);
    let mut tick = tokio::time::interval(KEEPALIVE);
    tick.tick().await;
    loop {
        tokio::select! {
            out = &mut fut => return Ok(out),
            _ = tick.tick() => {
                wr.write_all(b"\n").await?;
                wr.flush().await?;
            }
        }
    }
}

/// How much stream one write round sends (a loop's send too).
pub(crate) const BATCH: usize = 256 * 1024;
/// `NET_HOST_STR_LEN`.
const MAX_HOST_LEN: usize = 256;
const KEEPALIVE: Duration = Duration::from_secs(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn rc(h: &mut Handshake, args: &[&str]) -> ReplconfReply {
        let a: Vec<&[u8]> = args.iter().map(|s| s.as_bytes()).collect();
        h.replconf(&a)
    }

    #[test]
    fn replconf_options() {
        let mut h = Handshake::default();
        assert_eq!(rc(&mut h, &["listening-port", "6380"]), ReplconfReply::Ok);
        assert_eq!(rc(&mut h, &["ip-address", "10.1.2.3"]), ReplconfReply::Ok);
        assert_eq!(rc(&mut h, &["capa", "eof", "capa", "psync2", "capa", "dual-channel"]), ReplconfReply::Ok);
        assert_eq!(rc(&mut h, &["version", "8.0.1"]), ReplconfReply::Ok);
        assert_eq!(
            h,
            Handshake { listening_port: 6380, ip_address: Some("10.1.2.3".into()), capa_eof: true, capa_psync2: true }
        );
        assert_eq!(rc(&mut h, &["ACK", "10"]), ReplconfReply::Silent);
        assert!(matches!(rc(&mut h, &["listening-port", "99999"]), ReplconfReply::Error(_)));
        assert!(matches!(rc(&mut h, &["capa"]), ReplconfReply::Error(e) if e.contains("wrong number")));
        assert_eq!(rc(&mut h, &["bogus", "1"]), ReplconfReply::Error("ERR Unrecognized REPLCONF option: bogus".into()));
        let long = "x".repeat(300);
        assert!(matches!(rc(&mut h, &["ip-address", &long]), ReplconfReply::Error(e) if e.contains("300 bytes")));
    }
}
