//! Replication commands: REPLICAOF/SLAVEOF, REPLCONF, PSYNC/SYNC, ROLE, WAIT and FAILOVER.

use std::sync::Arc;
use std::time::Duration;

use hotkv_engine::CommandError;
use hotkv_engine::command::{acl, flags as f};
use hotkv_protocol::{Args, ReplyBuf};
use hotkv_replication::{Handshake, LinkState, ReplconfReply, SyncRequest};

use super::{int_arg, row, text};
use crate::registry::{Flow, ServerSpec};
use crate::replication::SyncStart;
use crate::server::Server;
use crate::session::{Session, flag};

/// Replication command rows.
pub static COMMANDS: &[ServerSpec] = &[
    row(
        "replicaof",
        3,
        f::ADMIN | f::NOSCRIPT | f::STALE | f::NO_ASYNC_LOADING,
        acl::ADMIN | acl::DANGEROUS,
        &[],
        "server",
        "5.0.0",
        "Configures a server as replica of another, or promotes it to a primary.",
        "O(1)",
        replicaof,
    ),
    row(
        "slaveof",
        3,
        f::ADMIN | f::NOSCRIPT | f::STALE | f::NO_ASYNC_LOADING,
        acl::ADMIN | acl::DANGEROUS,
        &[],
        "server",
        "1.0.0",
        "Sets a server as a replica of another, or promotes it to being a primary.",
        "O(1)",
        replicaof,
    ),
    row(
        "replconf",
        -1,
        f::ADMIN | f::NOSCRIPT | f::LOADING | f::STALE | f::ALLOW_BUSY,
        acl::ADMIN | acl::DANGEROUS,
        &[],
        "server",
        "3.0.0",
        "An internal command for configuring the replication stream.",
        "O(1)",
        replconf,
    ),
    row(
        "psync",
        -3,
        f::ADMIN | f::NOSCRIPT | f::NO_ASYNC_LOADING | f::NO_MULTI,
        acl::ADMIN | acl::DANGEROUS,
        &[],
        "server",
        "2.8.0",
        "An internal command used in replication.",
        "",
        psync,
    ),
    row(
        "sync",
        1,
        f::ADMIN | f::NOSCRIPT | f::NO_ASYNC_LOADING | f::NO_MULTI,
        acl::ADMIN | acl::DANGEROUS,
        &[],
        "server",
        "1.0.0",
        "An internal command used in replication.",
        "",
        psync,
    ),
    row(
        "failover",
        -1,
        f::ADMIN | f::NOSCRIPT | f::STALE,
        acl::ADMIN | acl::DANGEROUS,
        &[],
        "server",
        "6.2.0",
        "Starts a coordinated failover from a server to one of its replicas.",
        "O(1)",
        failover,
    ),
    row(
        "role",
        1,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST,
        acl::ADMIN | acl::DANGEROUS,
        &[],
        "server",
        "2.8.12",
        "Returns the replication role.",
        "O(1)",
        role,
    ),
];

fn replicaof(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if srv.cluster.is_some() {
        return Err(CommandError::err("REPLICAOF not allowed in cluster mode."));
    }
    if srv.repl.failover.active() {
        return Err(CommandError::err("REPLICAOF not allowed while failing over."));
    }
    let arc = srv.arc().ok_or_else(|| CommandError::err("server is shutting down"))?;
    let (host, port) = (args.get(1), args.get(2));
    if host.eq_ignore_ascii_case(b"no") && port.eq_ignore_ascii_case(b"one") {
        crate::replication::promote(&arc, &format!("user request from 'id={} addr={}'", sess.id, sess.info.addr));
        out.ok();
        return Ok(Flow::Continue);
    }
    let port = int_arg(port, Some("Invalid master port"))?;
    let port = u16::try_from(port).map_err(|_| CommandError::err("Invalid master port"))?;
    let host = text(host);
    if let Some(st) = srv.repl.link_status()
        && st.host.eq_ignore_ascii_case(&host)
        && st.port == port
    {
        tracing::info!(
            "REPLICAOF would result into synchronization with the primary we are already connected with. No operation performed."
        );
        out.simple("OK Already connected to specified master");
        return Ok(Flow::Continue);
    }
    crate::replication::follow(&arc, host, port);
    out.ok();
    Ok(Flow::Continue)
}

fn replconf(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let argv: Vec<&[u8]> = args.iter().skip(1).collect();
    let hs = sess.handshake.get_or_insert_with(|| Box::new(Handshake::default()));
    match hs.replconf(&argv) {
        ReplconfReply::Ok => out.ok(),
        ReplconfReply::Error(e) => return Err(CommandError::raw(e)),
        ReplconfReply::Silent => {}
    }
    Ok(Flow::Continue)
}

/// PSYNC and the old SYNC: the connection becomes the replica's session once the reply is
/// out (Valkey's `syncCommand`).
fn psync(srv: &Server, sess: &mut Session, args: Args<'_>, _: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if sess.has_flag(flag::REPLICA) {
        return Ok(Flow::Continue);
    }
    // PSYNC <replid> <offset> FAILOVER: our primary hands its role to us (FAILOVER TO).
    let mut failover = None;
    if args.len() > 3 && args.get(0).eq_ignore_ascii_case(b"psync") && args.get(3).eq_ignore_ascii_case(b"failover") {
        let replid = args.get(1);
        tracing::info!("Failover request received for replid {}.", String::from_utf8_lossy(replid));
        if !srv.repl.is_replica() {
            return Err(CommandError::err("PSYNC FAILOVER can't be sent to a master."));
        }
        if replid != srv.repl.primary.replid().as_bytes() {
            return Err(CommandError::err("PSYNC FAILOVER replid must match my replid."));
        }
        // A cluster node's role follows the node table, which only CLUSTER FAILOVER changes
        // (FAILOVER itself is refused in cluster mode, so no hotkv node sends this there).
        if srv.cluster.is_some() {
            return Err(CommandError::err(
                "PSYNC FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead.",
            ));
        }
        // Promoted by the session's start, after the link has applied what this primary sent.
        failover = Some(format!("failover request from 'id={} addr={}'", sess.id, sess.info.addr));
    } else {
        if srv.repl.failover.active() {
            return Err(CommandError::raw("NOMASTERLINK Can't SYNC while failing over"));
        }
        if srv.repl.is_replica() && !srv.repl.link_up() {
            return Err(CommandError::raw("NOMASTERLINK Can't SYNC while not connected with my master"));
        }
    }
    if sess.has_flag(flag::PUBSUB) || sess.has_flag(flag::MONITOR) {
        return Err(CommandError::err("Replica can't be a subscriber or a monitor"));
    }
    let peer = {
        let port = sess.handshake.as_ref().map_or(0, |h| h.listening_port);
        format!("{}:{}", sess.info.addr.ip_text(), port)
    };
    // The arities leave the offset as the one thing that can fail to parse.
    let Some(req) = SyncRequest::parse(args.iter()) else {
        tracing::warn!("Replica {} asks for synchronization but with a wrong offset", peer);
        return Err(CommandError::NotInteger);
    };
    let hs = sess.handshake.take().map(|h| *h).unwrap_or_default();
    let start = match failover {
        Some(why) => SyncStart::Failover { req, handshake: hs, client_id: sess.id, peer, why },
        None => SyncStart::Accepted(srv.repl.primary.accept_sync(&req, &hs, sess.id, &peer)),
    };
    sess.set_flag(flag::REPLICA, true);
    Ok(Flow::Replica(Box::new(start)))
}

fn role(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    match srv.repl.link_status() {
        Some(st) => {
            out.array(5);
            out.bulk(b"slave");
            out.bulk(st.host.as_bytes());
            out.int(i64::from(st.port));
            let state = match st.state {
                LinkState::Connect | LinkState::Stopped => "connect",
                LinkState::Connecting => "connecting",
                LinkState::Handshake => "handshake",
                LinkState::Transfer => "sync",
                LinkState::Connected => "connected",
            };
            out.bulk(state.as_bytes());
            out.int(st.offset.map_or(-1, |o| o as i64));
        }
        None => {
            let p = &srv.repl.primary;
            let replicas = p.replicas();
            out.array(3);
            out.bulk(b"master");
            out.int(p.offset() as i64);
            out.array(replicas.len());
            for r in &replicas {
                out.array(3);
                out.bulk(r.ip.as_bytes());
                out.bulk(r.port.to_string().as_bytes());
                out.bulk(r.ack_offset.to_string().as_bytes());
            }
        }
    }
    Ok(Flow::Continue)
}

/// WAIT numreplicas timeout: the number of replicas that acknowledged everything this node
/// had streamed when WAIT ran, once `numreplicas` did or the timeout passed (0: forever).
pub(crate) fn wait(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if srv.repl.is_replica() {
        return Err(CommandError::err(
            "WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is configured to be writable (which is not the default) writes to replicas are just local and are not propagated.",
        ));
    }
    let n = int_arg(args.get(1), None)?;
    let ms = crate::cmd::server::parse_timeout_ms(args.get(2))?;
    let primary = Arc::clone(&srv.repl.primary);
    let offset = primary.offset();
    let want = usize::try_from(n).unwrap_or(0);
    let acked = primary.count_acked(offset);
    // Inside a transaction or a script WAIT cannot wait: it answers with what is
    // acknowledged now.
    if acked >= want || sess.multi.is_some() || sess.has_flag(flag::MULTI) || sess.in_script {
        out.int(acked as i64);
        return Ok(Flow::Continue);
    }
    let timeout = (ms > 0).then(|| Duration::from_millis(ms as u64));
    Ok(Flow::Await(Box::pin(async move {
        let n = primary.wait_for(offset, want, timeout).await;
        let mut reply = ReplyBuf::new();
        reply.int(n as i64);
        reply.as_bytes().to_vec()
    })))
}

/// FAILOVER [TO host port [FORCE]] [TIMEOUT ms] | FAILOVER ABORT (see [`crate::failover`]).
fn failover(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if srv.cluster.is_some() {
        return Err(CommandError::err("FAILOVER not allowed in cluster mode. Use CLUSTER FAILOVER command instead."));
    }
    let arc = srv.arc().ok_or_else(|| CommandError::err("server is shutting down"))?;
    let rest: Vec<&[u8]> = args.iter().skip(1).collect();
    if let [only] = rest.as_slice()
        && only.eq_ignore_ascii_case(b"abort")
    {
        if !srv.repl.failover.active() {
            return Err(CommandError::err("No failover in progress."));
        }
        crate::failover::abort(&arc, "Failover manually aborted");
        out.ok();
        return Ok(Flow::Continue);
    }
    let req = crate::failover::parse(&rest).map_err(|e| match e {
        crate::failover::ParseError::NotInteger => CommandError::NotInteger,
        crate::failover::ParseError::Timeout => CommandError::err("FAILOVER timeout must be greater than 0"),
        crate::failover::ParseError::Syntax => CommandError::Syntax,
    })?;
    crate::failover::start(&arc, req).map_err(CommandError::err)?;
    out.ok();
    Ok(Flow::Continue)
}
