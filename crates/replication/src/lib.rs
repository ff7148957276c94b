//! Replication for hotkv, as Valkey 8 speaks it.
//!
//! This crate owns the primary's side of replication (the shared replication buffer whose
//! recent window is the backlog, replication ids, the PSYNC decision, the per-replica sender
//! task, ACK bookkeeping, WAIT and min-replicas) and the replica's side (the link to a
//! primary: handshake, full and partial resync, the command stream, ACKs, timeouts and
//! reconnection), plus the `INFO replication` section for both roles.
//!
//! It depends only on hotkv-protocol and hotkv-engine (plus tokio, parking_lot, tracing and
//! bytes). It never names the server, cluster or tls crates: dialing a primary goes through
//! [`Connector`], applying what the primary sends through [`Applier`], and producing an RDB
//! snapshot through [`SnapshotSource`]; the server implements all three and does the wiring
//! (REPLICAOF, the master client, config directives, INFO).
//!
//! # Wiring, in short
//!
//! - One [`Primary`] per node, shared (`Arc`). It is the engine's [`hotkv_engine::WriteSink`]:
//!   the dispatch path calls `append` with a call's effects while the call holds its slot
//!   locks. The server's once-a-second cron calls [`Primary::cron`].
//! - A client connection that sends `REPLCONF ...` feeds it to a [`Handshake`]; on `PSYNC`
//!   or `SYNC` the connection task calls [`Primary::accept_sync`] and then runs
//!   [`ReplicaSession::run`] on its stream until the replica goes away.
//! - `REPLICAOF host port` spawns a [`ReplicaLink`] ([`ReplicaLink::spawn`]); the link feeds
//!   what it applied to the node's own [`Primary`] so chained replicas see the same stream.

mod buffer;
mod direct;
mod info;
mod primary;
mod replica;
mod reply;
mod sender;
mod shared;
mod staging;

#[cfg(test)]
mod e2e_tests;
#[cfg(test)]
mod testkit;

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;

use tokio::io::{AsyncRead, AsyncWrite};

pub use direct::DirectOut;
pub use info::{InfoExtra, render_info};
pub use primary::{
    Primary, PrimarySettings, ReplicaState, ReplicaSummary, SyncDecision, SyncPoint, SyncRequest, hold_wakes,
};
pub use replica::{
    Applier, Connector, CredentialSource, LinkState, LinkStatus, LiveDuration, ReplicaConfig, ReplicaHandle,
    ReplicaLink, StreamBatch,
};
pub use reply::{BulkHeader, PsyncReply, parse_bulk_header, parse_psync_reply};
pub use sender::{DescribeCommand, Handshake, LinkCommand, ReplconfReply, ReplicaSession, Snapshot, SnapshotSource};
pub use shared::{GroupSettings, SharedSnapshots};
pub use staging::Staging;

/// A boxed future, so the traits the server implements stay object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A byte stream to or from a peer: a TCP connection, plain or TLS.
pub trait AsyncStream: AsyncRead + AsyncWrite + Unpin + Send {}

impl<T: AsyncRead + AsyncWrite + Unpin + Send> AsyncStream for T {}

/// Length of a replication id and of the EOF mark of a diskless transfer
/// (`CONFIG_RUN_ID_SIZE`, `RDB_EOF_MARK_SIZE`).
pub const REPLID_LEN: usize = 40;

/// Everything that can end a replication session or link.
#[derive(Debug)]
pub enum Error {
    /// The socket failed or closed.
    Io(io::Error),
    /// The peer sent bytes that do not follow the protocol.
    Protocol(ProtocolViolation),
    /// The peer answered with an error or refused what we asked.
    Refused(String),
    /// Nothing arrived for longer than `repl-timeout`.
    Timeout(&'static str),
    /// The server's applier or snapshot source failed.
    Local(String),
    /// The replica was dropped by the primary (output buffer limit, timeout, REPLICAOF).
    Dropped(&'static str),
}

/// The ways a peer can break the protocol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolViolation {
    /// A reply line longer than we accept.
    LineTooLong,
    /// A reply we cannot parse, quoted (truncated) for the log.
    BadReply(String),
    /// The replication stream did not decode.
    Stream(hotkv_protocol::ProtocolError),
    /// The primary sent an inline command in the stream (only newlines are allowed).
    InlineFromPrimary,
    /// A snapshot source reported an offset the stream cannot start from.
    BadSnapshotOffset {
        /// The offset the snapshot claimed.
        offset: u64,
        /// The oldest offset still held for this replica.
        pinned: u64,
        /// The current end of the stream.
        end: u64,
    },
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::Io(e) => write!(f, "i/o error: {e}"),
            Error::Protocol(p) => write!(f, "protocol error: {p}"),
            Error::Refused(msg) => write!(f, "refused: {msg}"),
            Error::Timeout(what) => write!(f, "timeout: {what}"),
            Error::Local(msg) => write!(f, "local failure: {msg}"),
            Error::Dropped(why) => write!(f, "dropped: {why}"),
        }
    }
}

impl fmt::Display for ProtocolViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolViolation::LineTooLong => f.write_str("reply line too long"),
            ProtocolViolation::BadReply(r) => write!(f, "unexpected reply '{r}'"),
            ProtocolViolation::Stream(e) => write!(f, "bad replication stream: {e}"),
            ProtocolViolation::InlineFromPrimary => f.write_str("inline command from primary"),
            ProtocolViolation::BadSnapshotOffset { offset, pinned, end } => {
                write!(f, "snapshot offset {offset} outside [{pinned}, {end}]")
            }
        }
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Error::Io(e) => Some(e),
            _ => None,
        }
    }
}

impl From<io::Error> for Error {
    fn from(e: io::Error) -> Self {
        Error::Io(e)
    }
}

impl From<ProtocolViolation> for Error {
    fn from(p: ProtocolViolation) -> Self {
        Error::Protocol(p)
    }
}

/// 40 random lowercase hex characters: a replication id or an EOF mark (Valkey's
/// `getRandomHexChars`). Reads the kernel's random source; if that fails, falls back to
/// std's randomly keyed hasher mixed with the time, which is still unique per call.
pub fn random_hex40() -> String {
    use std::io::Read;

    let mut bytes = [0u8; REPLID_LEN / 2];
    let from_kernel = std::fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut bytes)).is_ok();
    if !from_kernel {
        fallback_random(&mut bytes);
    }
    let mut s = String::with_capacity(REPLID_LEN);
    for b in bytes {
        s.push(HEX[(b >> 4) as usize] as char);
        s.push(HEX[(b & 15) as usize] as char);
    }
    s
}

fn fallback_random(out: &mut [u8]) {
    use std::hash::{BuildHasher, Hasher};
    use std::sync::atomic::{AtomicU64, Ordering};

    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let state = std::collections::hash_map::RandomState::new();
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let mut h = state.build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        h.write_usize(i);
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
        let v = h.finish().to_le_bytes();
        chunk.copy_from_slice(&v[..chunk.len()]);
    }
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// Runs `io` until it completes, or until `limit()` has passed since it began without it
/// completing (`None`). The limit is read again every second while `io` waits, as Valkey's
/// replication cron checks `repl-timeout` once a second, so a CONFIG SET reaches a read or
/// write already waiting (Valkey's tests lower it under a peer that then goes silent).
pub(crate) async fn within_live_limit<F: Future>(io: F, limit: impl Fn() -> std::time::Duration) -> Option<F::Output> {
    let since = tokio::time::Instant::now();
    tokio::pin!(io);
    loop {
        let left = limit().saturating_sub(since.elapsed());
        if left.is_zero() {
            return None;
        }
        tokio::select! {
            biased;
            out = &mut io => return Some(out),
            _ = tokio::time::sleep(left.min(std::time::Duration::from_secs(1))) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::within_live_limit;

    #[tokio::test(start_paused = true)]
    async fn a_limit_lowered_while_waiting_ends_the_wait_within_a_second() {
        let limit = AtomicU64::new(60);
        let started = tokio::time::Instant::now();
        let waiting =
            within_live_limit(std::future::pending::<()>(), || Duration::from_secs(limit.load(Ordering::SeqCst)));
        let lower = async {
            tokio::time::sleep(Duration::from_millis(2500)).await;
            limit.store(2, Ordering::SeqCst);
        };
        let (out, ()) = tokio::join!(waiting, lower);
        assert_eq!(out, None);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(2500) && took <= Duration::from_millis(3500), "{took:?}");
        // What completes in time is returned.
        assert_eq!(within_live_limit(async { 7 }, || Duration::from_secs(1)).await, Some(7));
    }
}
