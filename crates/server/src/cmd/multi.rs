//! MULTI, EXEC, DISCARD, WATCH, UNWATCH. Queueing and EXEC's execution live in dispatch and
//! `crate::multi`, which own the locks; these handlers manage the session's state.

use std::sync::atomic::Ordering;

use hotkv_engine::CommandError;
use hotkv_engine::command::{KeySpec, acl, flags as f, key_flags};
use hotkv_engine::slot::key_slot;
use hotkv_protocol::{Args, ReplyBuf};

use super::row;
use crate::registry::{Flow, ServerSpec};
use crate::server::{Server, unix_ms};
use crate::session::{MultiState, Session, flag};

const TX: u32 = acl::TRANSACTION;

/// Transaction command rows.
pub static COMMANDS: &[ServerSpec] = &[
    row("multi", 1, f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_MULTI | f::ALLOW_BUSY, TX, &[],
        "transactions", "1.2.0", "Starts a transaction.", "O(1)", multi),
    row("exec", 1, f::NOSCRIPT | f::LOADING | f::STALE | f::SKIP_SLOWLOG, TX, &[], "transactions", "1.2.0",
        "Executes all commands in a transaction.", "Depends on commands in the transaction", exec),
    row("discard", 1, f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::ALLOW_BUSY, TX, &[], "transactions",
        "2.0.0", "Discards a transaction.", "O(N), when N is the number of queued commands", discard),
    row("watch", -2, f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_MULTI | f::ALLOW_BUSY, TX,
        &[KeySpec::range(1, -1, 1, key_flags::RO)], "transactions", "2.2.0",
        "Monitors changes to keys to determine the execution of a transaction.", "O(1) for every key.", watch),
    row("unwatch", 1, f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::ALLOW_BUSY, TX, &[], "transactions",
        "2.2.0", "Forgets about watched keys of a transaction.", "O(1)", unwatch),
];

fn multi(_: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    sess.multi = Some(MultiState::default());
    sess.set_flag(flag::MULTI, true);
    out.ok();
    Ok(Flow::Continue)
}

/// Dispatch runs EXEC itself (it needs the locks); reaching this means there was no MULTI.
fn exec(_: &Server, _: &mut Session, _: Args<'_>, _: &mut ReplyBuf) -> Result<Flow, CommandError> {
    Err(CommandError::err("EXEC without MULTI"))
}

fn discard(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if sess.multi.take().is_none() {
        return Err(CommandError::err("DISCARD without MULTI"));
    }
    sess.set_flag(flag::MULTI, false);
    forget_watches(srv, sess);
    out.ok();
    Ok(Flow::Continue)
}

fn watch(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if sess.multi.is_some() {
        return Err(CommandError::err("WATCH inside MULTI is not allowed"));
    }
    // Already doomed: watching more changes nothing.
    if sess.watch_dirty.load(Ordering::Relaxed) {
        out.ok();
        return Ok(Flow::Continue);
    }
    let now = unix_ms();
    for key in args.iter().skip(1) {
        if sess.watched.iter().any(|(db, k, _)| *db == sess.db && k == key) {
            continue;
        }
        let expired = {
            let table = srv.ks.db(sess.db).slot(key_slot(key)).lock();
            table
                .find(key, hotkv_engine::hash::key_hash(key))
                .is_some_and(|i| table.at(i).expire().is_some_and(|when| now > when))
        };
        srv.watches.watch(sess.db, key, &sess.watch_dirty);
        sess.watched.push((sess.db, key.to_vec(), expired));
    }
    sess.set_flag(flag::WATCHING, !sess.watched.is_empty());
    out.ok();
    Ok(Flow::Continue)
}

fn unwatch(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    forget_watches(srv, sess);
    out.ok();
    Ok(Flow::Continue)
}

/// Drops every WATCH of the session.
pub fn forget_watches(srv: &Server, sess: &mut Session) {
    let keys: Vec<(usize, Vec<u8>)> = sess.watched.drain(..).map(|(db, k, _)| (db, k)).collect();
    srv.watches.unwatch(&keys, &sess.watch_dirty);
    sess.watch_dirty.store(false, Ordering::Relaxed);
    sess.set_flag(flag::WATCHING, false);
}
