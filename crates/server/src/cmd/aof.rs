//! Append-only file commands: BGREWRITEAOF and WAITAOF (their work is in `aof::wire`).

use std::time::Duration;

use hotkv_engine::CommandError;
use hotkv_engine::command::{acl, flags as f};
use hotkv_protocol::{Args, ReplyBuf};

use super::{int_arg, row};
use crate::registry::{Flow, ServerSpec};
use crate::server::Server;
use crate::session::{Session, flag};

/// AOF command rows.
pub static COMMANDS: &[ServerSpec] = &[
    row("bgrewriteaof", 1, f::ADMIN | f::NOSCRIPT | f::NO_ASYNC_LOADING, 0, &[], "server", "1.0.0",
        "Asynchronously rewrites the append-only file to disk.", "O(1)", bgrewriteaof),
    row("waitaof", 4, f::BLOCKING, acl::CONNECTION, &[], "generic", "7.2.0",
        "Blocks until all of the preceding write commands sent by the connection are written to the append-only file of the primary and/or replicas.",
        "O(1)", waitaof)
        .with_tips(&["request_policy:all_shards", "response_policy:agg_min"]),
];

/// BGREWRITEAOF: started, scheduled behind a running save, or an error when one runs.
fn bgrewriteaof(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let Some(srv) = srv.arc() else { return Err(CommandError::err("server is not running")) };
    let reply = crate::aof::wire::bgrewriteaof(&srv, sess.in_exec).map_err(CommandError::err)?;
    out.simple(reply);
    Ok(Flow::Continue)
}

/// WAITAOF numlocal numreplicas timeout.
fn waitaof(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let numlocal = int_arg(args.get(1), None)?;
    let numreplicas = int_arg(args.get(2), None)?;
    let ms = crate::cmd::server::parse_timeout_ms(args.get(3))?;
    if numlocal < 0 || numreplicas < 0 {
        return Err(CommandError::err("value is out of range, must be positive"));
    }
    if srv.repl.is_replica() {
        return Err(CommandError::err(
            "WAITAOF cannot be used with replica instances. Please also note that writes to replicas are just local and are not propagated.",
        ));
    }
    if numlocal > 0 && srv.aof.writer().is_none() {
        return Err(CommandError::err("WAITAOF cannot be used when numlocal is set but appendonly is disabled."));
    }
    let Some(arc) = srv.arc() else { return Err(CommandError::err("server is not running")) };
    let timeout = (ms > 0).then(|| Duration::from_millis(ms as u64));
    let targets = crate::aof::wire::WaitTargets::now(srv);
    let (local, replicas) = targets.reached(srv);
    // Inside a transaction or a script WAITAOF cannot wait: it answers with what is synced
    // now.
    let done = local >= numlocal as u64 && replicas >= numreplicas as usize;
    if done || sess.multi.is_some() || sess.has_flag(flag::MULTI) || sess.in_script {
        out.array(2);
        out.int(local as i64);
        out.int(replicas as i64);
        return Ok(Flow::Continue);
    }
    Ok(Flow::Await(Box::pin(crate::aof::wire::waitaof(arc, targets, numlocal as u64, numreplicas as usize, timeout))))
}
