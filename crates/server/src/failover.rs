//! Standalone coordinated failover (`FAILOVER [TO host port [FORCE]] [TIMEOUT ms] | ABORT`):
//! a primary hands its role to one of its replicas without losing a write.
//!
//! 1. The primary pauses writes (the failover pause purpose, as a cluster manual failover
//!    does) so its stream stops growing, and asks its replicas for acknowledgements.
//! 2. Once the target (or, without `TO`, any replica) acknowledged the whole stream, or the
//!    timeout passed with `FORCE`, the primary becomes a replica of the target and sends it
//!    `PSYNC <its replid> <offset+1> FAILOVER`.
//! 3. The target, still a replica of that replid, promotes itself and continues the old
//!    primary from its second replid (a partial resync).
//! 4. The old primary's writers wake from the pause as clients of a replica (`-READONLY`).
//!
//! If the target rejects the PSYNC, or `FAILOVER ABORT` comes first, the primary becomes a
//! primary again and its replicas resync partially, as Valkey's `abortFailover` does.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tracing::info;

use crate::server::{Server, unix_ms};

/// How long one wait for acknowledgements lasts before the state is looked at again (the
/// deadline, an abort, a target that went away).
const CHECK_EVERY: Duration = Duration::from_millis(100);

/// Where a coordinated failover is (`master_failover_state`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum State {
    /// No failover.
    #[default]
    None,
    /// Writes paused, waiting for a replica to acknowledge the whole stream.
    WaitForSync {
        /// The replica named with `TO`, if any.
        target: Option<(String, u16)>,
        /// When to give up (or, with `force`, to go ahead anyway).
        deadline: Option<Instant>,
        /// `FORCE`: fail over at the deadline even if the target is behind.
        force: bool,
        /// Told apart from a later failover by the driver task.
        id: u64,
    },
    /// This node follows the target and asked it to take over.
    InProgress {
        /// The target.
        target: (String, u16),
    },
}

impl State {
    /// The word INFO prints.
    pub fn as_str(&self) -> &'static str {
        match self {
            State::None => "no-failover",
            State::WaitForSync { .. } => "waiting-for-sync",
            State::InProgress { .. } => "failover-in-progress",
        }
    }
}

/// The node's coordinated failover.
#[derive(Default)]
pub struct Coordinator {
    state: Mutex<State>,
    next_id: std::sync::atomic::AtomicU64,
}

/// What FAILOVER asked for.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Request {
    /// `TO host port`.
    pub target: Option<(String, u16)>,
    /// `FORCE`.
    pub force: bool,
    /// `TIMEOUT ms`.
    pub timeout_ms: Option<u64>,
}

impl Coordinator {
    /// The current state.
    pub fn state(&self) -> State {
        self.state.lock().clone()
    }

    /// Whether a failover is under way (REPLICAOF and PSYNC are refused meanwhile).
    pub fn active(&self) -> bool {
        *self.state.lock() != State::None
    }
}

/// FAILOVER without ABORT, after the checks on the node's role and replicas: pauses writes
/// and starts the task that waits for the target. Errors are Valkey's texts.
pub fn start(srv: &Arc<Server>, req: Request) -> Result<(), String> {
    let co = &srv.repl.failover;
    let id = co.next_id.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    {
        let mut st = co.state.lock();
        if *st != State::None {
            return Err("FAILOVER already in progress.".into());
        }
        if srv.repl.is_replica() {
            return Err("FAILOVER is not valid when server is a replica.".into());
        }
        let replicas = srv.repl.primary.replicas();
        if replicas.is_empty() {
            return Err("FAILOVER requires connected replicas.".into());
        }
        if req.force && (req.timeout_ms.is_none() || req.target.is_none()) {
            return Err("FAILOVER with force option requires both a timeout and target HOST and IP.".into());
        }
        match &req.target {
            Some((host, port)) => {
                let r = replicas.iter().find(|r| r.ip.eq_ignore_ascii_case(host) && r.port == *port);
                let Some(r) = r else { return Err("FAILOVER target HOST and PORT is not a replica.".into()) };
                if r.state != hotkv_replication::ReplicaState::Online {
                    return Err("FAILOVER target replica is not online.".into());
                }
                info!("FAILOVER requested to {}:{}.", host, port);
            }
            None => info!("FAILOVER requested to any replica."),
        }
        *st = State::WaitForSync {
            target: req.target.clone(),
            deadline: req.timeout_ms.map(|ms| Instant::now() + Duration::from_millis(ms)),
            force: req.force,
            id,
        };
    }
    srv.pause.pause_for_failover(i64::MAX, unix_ms());
    // From here the offset the driver reads only grows by what replicas need (GETACK).
    srv.pause.drain_writes(&srv.ks);
    let weak = Arc::downgrade(srv);
    tokio::spawn(async move {
        while let Some(srv) = weak.upgrade() {
            if !drive(&srv, id).await {
                return;
            }
        }
    });
    Ok(())
}

/// One look at a waiting failover: goes ahead, aborts, or waits a little for acknowledgements.
/// Returns whether the failover `id` still waits.
async fn drive(srv: &Arc<Server>, id: u64) -> bool {
    let (target, deadline, force) = match srv.repl.failover.state() {
        State::WaitForSync { target, deadline, force, id: current } if current == id => (target, deadline, force),
        _ => return false,
    };
    if srv.is_shutting_down() {
        return false;
    }
    let primary = &srv.repl.primary;
    let offset = primary.offset();
    let replicas = primary.replicas();
    let caught_up = |r: &&hotkv_replication::ReplicaSummary| r.ack_offset == offset;
    let ready = match &target {
        Some((host, port)) => {
            replicas.iter().find(|r| r.ip.eq_ignore_ascii_case(host) && r.port == *port).filter(caught_up)
        }
        None => replicas.iter().find(caught_up),
    };
    if let Some(r) = ready {
        info!("Failover target {}:{} is synced, failing over.", r.ip, r.port);
        hand_over(srv, id, (r.ip.clone(), r.port));
        return false;
    }
    let now = Instant::now();
    if let Some(end) = deadline
        && end <= now
    {
        match (force, target) {
            (true, Some((host, port))) => {
                info!("FAILOVER to {}:{} time out exceeded, failing over.", host, port);
                hand_over(srv, id, (host, port));
            }
            _ => abort(srv, "Replica never caught up before timeout"),
        }
        return false;
    }
    let wait = deadline.map_or(CHECK_EVERY, |end| (end - now).min(CHECK_EVERY));
    // Asks the replicas for an ACK (REPLCONF GETACK) and wakes on the first that comes.
    let all = replicas.len().max(1);
    primary.wait_for(offset, all, Some(wait)).await;
    true
}

/// The target is synced (or FORCE said go): this node follows it and asks it to take over.
fn hand_over(srv: &Arc<Server>, id: u64, target: (String, u16)) {
    {
        let mut st = srv.repl.failover.state.lock();
        if !matches!(&*st, State::WaitForSync { id: current, .. } if *current == id) {
            return;
        }
        *st = State::InProgress { target: target.clone() };
    }
    crate::replication::follow_for_failover(srv, target.0, target.1);
}

/// The target answered our PSYNC FAILOVER: the failover is over either way.
pub fn outcome(srv: &Arc<Server>, result: Result<(), String>) {
    match result {
        Ok(()) => clear(srv),
        Err(why) => abort(srv, &why),
    }
}

/// Ends a failover, if one is under way (Valkey's `abortFailover`): a node that already
/// follows the target becomes a primary again; the write pause ends.
pub fn abort(srv: &Arc<Server>, why: &str) {
    // Taken in one step, so the driver cannot hand over to a failover aborted meanwhile.
    let st = std::mem::take(&mut *srv.repl.failover.state.lock());
    let target = match &st {
        State::None => return,
        State::WaitForSync { target, .. } => target.clone(),
        State::InProgress { target } => Some(target.clone()),
    };
    match target {
        Some((host, port)) => info!("FAILOVER to {}:{} aborted: {}", host, port, why),
        None => info!("FAILOVER to any replica aborted: {}", why),
    }
    if matches!(st, State::InProgress { .. }) {
        crate::replication::promote(srv, "failover aborted");
    }
    srv.pause.end_failover_pause(unix_ms());
}

/// Back to no failover, writes unpaused.
fn clear(srv: &Server) {
    *srv.repl.failover.state.lock() = State::None;
    srv.pause.end_failover_pause(unix_ms());
}

/// Parses FAILOVER's arguments after the name (not ABORT), as Valkey: each option at most
/// once, `TIMEOUT` positive.
pub fn parse(args: &[&[u8]]) -> Result<Request, ParseError> {
    let mut req = Request::default();
    let mut i = 0;
    while i < args.len() {
        let a = args[i];
        if a.eq_ignore_ascii_case(b"timeout") && i + 1 < args.len() && req.timeout_ms.is_none() {
            let ms = hotkv_protocol::parse_i64(args[i + 1]).ok_or(ParseError::NotInteger)?;
            if ms <= 0 {
                return Err(ParseError::Timeout);
            }
            req.timeout_ms = Some(ms as u64);
            i += 2;
        } else if a.eq_ignore_ascii_case(b"to") && i + 2 < args.len() && req.target.is_none() {
            let port = hotkv_protocol::parse_i64(args[i + 2]).ok_or(ParseError::NotInteger)?;
            let host = String::from_utf8_lossy(args[i + 1]).into_owned();
            // A port out of range names no replica; Valkey finds none either.
            req.target = Some((host, u16::try_from(port).unwrap_or(0)));
            i += 3;
        } else if a.eq_ignore_ascii_case(b"force") && !req.force {
            req.force = true;
            i += 1;
        } else {
            return Err(ParseError::Syntax);
        }
    }
    Ok(req)
}

/// Why FAILOVER's arguments were refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ParseError {
    /// A number that is not one.
    NotInteger,
    /// `TIMEOUT` of zero or less.
    Timeout,
    /// Anything else.
    Syntax,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Request, ParseError> {
        let v: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        parse(&v)
    }

    #[test]
    fn arguments_parse_as_valkey_reads_them() {
        assert_eq!(p(&[]), Ok(Request::default()));
        let r = p(&["TO", "127.0.0.1", "7001", "force", "timeout", "100"]).unwrap();
        assert_eq!(r.target, Some(("127.0.0.1".into(), 7001)));
        assert!(r.force);
        assert_eq!(r.timeout_ms, Some(100));
        assert_eq!(p(&["timeout", "0"]), Err(ParseError::Timeout));
        assert_eq!(p(&["timeout", "-5"]), Err(ParseError::Timeout));
        assert_eq!(p(&["timeout", "x"]), Err(ParseError::NotInteger));
        assert_eq!(p(&["to", "h", "port"]), Err(ParseError::NotInteger));
        assert_eq!(p(&["to", "h"]), Err(ParseError::Syntax));
        assert_eq!(p(&["force", "force"]), Err(ParseError::Syntax));
        assert_eq!(p(&["timeout", "5", "timeout", "6"]), Err(ParseError::Syntax));
        assert_eq!(p(&["abort"]), Err(ParseError::Syntax));
    }

    #[test]
    fn states_print_as_info_names_them() {
        assert_eq!(State::None.as_str(), "no-failover");
        let w = State::WaitForSync { target: None, deadline: None, force: false, id: 0 };
        assert_eq!(w.as_str(), "waiting-for-sync");
        assert_eq!(State::InProgress { target: ("h".into(), 1) }.as_str(), "failover-in-progress");
    }
}
