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
    row(
        "multi",
        1,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_MULTI | f::ALLOW_BUSY,
        TX,
        &[],
        "transactions",
        "1.2.0",
        "Starts a transaction.",
        "O(1)",
        multi,
    ),
    row(
        "exec",
        1,
        f::NOSCRIPT | f::LOADING | f::STALE | f::SKIP_SLOWLOG,
        TX,
        &[],
        "transactions",
        "1.2.0",
        "Executes all commands in a transaction.",
        "Depends on commands in the transaction",
        exec,
    ),
    row(
        "discard",
        1,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::ALLOW_BUSY,
        TX,
        &[],
        "transactions",
        "2.0.0",
        "Discards a transaction.",
        "O(N), when N is the number of queued commands",
        discard,
    ),
    row(
        "watch",
        -2,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_MULTI | f::ALLOW_BUSY,
        TX,
        &[KeySpec::range(1, -1, 1, key_flags::RO)],
        "transactions",
        "2.2.0",
        "Monitors changes to keys to determine the execution of a transaction.",
        "O(1) for every key.",
        watch,
    ),
    row(
        "unwatch",
        1,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::ALLOW_BUSY,
        TX,
        &[],
        "transactions",
        "2.2.0",
        "Forgets about watched keys of a transaction.",
        "O(1)",
        unwatch,
    ),
];

fn multi(_: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    sess.multi = Some(MultiState::default());
    sess.sync_counts();
    sess.set_flag(flag::MULTI, true);
    out.ok();
    Ok(Flow::Continue)
}

/// Dispatch runs EXEC itself (it needs the locks); reaching this means there was no MULTI.
fn exec(_: &Server, _: &mut Session, _: Args<'_>, _: &mut ReplyBuf) -> Result<Flow, CommandError> {
    Err(CommandError::err("EXEC without MULTI"))
}

fn discard(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if sess.multi.is_none() {
        return Err(CommandError::err("DISCARD without MULTI"));
    }
    discard_transaction(srv, sess);
    out.ok();
    Ok(Flow::Continue)
}

/// Drops the queued transaction and every WATCH (Valkey's `discardTransaction`).
pub fn discard_transaction(srv: &Server, sess: &mut Session) {
    sess.multi = None;
    sess.set_flag(flag::MULTI, false);
    forget_watches(srv, sess);
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
        let stale = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(expired));
        srv.watches.watch(sess.db, key, &sess.watch_dirty, &stale);
        sess.watched.push((sess.db, key.to_vec(), stale));
    }
    sess.set_flag(flag::WATCHING, !sess.watched.is_empty());
    sess.sync_counts();
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
    sess.sync_counts();
}

#[cfg(test)]
mod tests {
    use crate::cmd::testutil::{client, server};

    #[test]
    fn a_flush_aborts_only_transactions_watching_keys_it_removed() {
        let srv = server();
        let mut c = client(&srv, 45000);
        let mut other = client(&srv, 45001);
        for flush in ["flushall", "flushdb"] {
            // Watching a missing key: the flush changes nothing for it.
            assert_eq!(c.run(&srv, &["watch", "x"]), "+OK\r\n");
            other.run(&srv, &["set", "unrelated", "1"]);
            other.run(&srv, &[flush]);
            c.run(&srv, &["multi"]);
            c.run(&srv, &["ping"]);
            assert_eq!(c.run(&srv, &["exec"]), "*1\r\n+PONG\r\n", "{flush} with a missing watched key");
            // Watching a key the flush removes: the transaction aborts.
            other.run(&srv, &["set", "x", "1"]);
            c.run(&srv, &["watch", "x"]);
            other.run(&srv, &[flush]);
            c.run(&srv, &["multi"]);
            c.run(&srv, &["ping"]);
            assert_eq!(c.run(&srv, &["exec"]), "*-1\r\n", "{flush} removing a watched key");
        }
        // SWAPDB touches a watched key that exists on either side.
        other.run(&srv, &["select", "1"]);
        other.run(&srv, &["set", "y", "1"]);
        c.run(&srv, &["watch", "y", "z"]);
        other.run(&srv, &["swapdb", "0", "1"]);
        c.run(&srv, &["multi"]);
        assert_eq!(c.run(&srv, &["exec"]), "*-1\r\n");
    }

    #[test]
    fn exec_is_a_call_in_commandstats() {
        let srv = server();
        let mut c = client(&srv, 45002);
        c.run(&srv, &["multi"]);
        c.run(&srv, &["set", "a", "b"]);
        assert_eq!(c.run(&srv, &["exec"]), "*1\r\n+OK\r\n");
        assert_eq!(c.run(&srv, &["exec"]), "-ERR EXEC without MULTI\r\n");
        c.run(&srv, &["multi"]);
        c.run(&srv, &["nosuchcommand"]);
        assert!(c.run(&srv, &["exec"]).starts_with("-EXECABORT"));
        let stats = c.run(&srv, &["info", "commandstats"]);
        assert!(stats.contains("cmdstat_exec:calls=3,"), "{stats}");
        assert!(stats.contains(",rejected_calls=0,failed_calls=2\r\n"), "{stats}");
    }

    #[test]
    fn client_list_counts_watches_queued_commands_and_subscriptions() {
        let srv = server();
        let mut c = client(&srv, 45003);
        let info = |c: &mut crate::cmd::testutil::TestClient| c.run(&srv, &["client", "info"]);
        assert!(info(&mut c).contains(" sub=0 psub=0 ssub=0 multi=-1 watch=0 "));
        c.run(&srv, &["watch", "a", "b", "a"]);
        assert!(info(&mut c).contains(" multi=-1 watch=2 "), "{}", info(&mut c));
        c.run(&srv, &["multi"]);
        c.run(&srv, &["set", "a", "1"]);
        c.run(&srv, &["get", "a"]);
        // CLIENT INFO inside MULTI is queued too; read the line from another client.
        let mut other = client(&srv, 45004);
        let list = other.run(&srv, &["client", "list"]);
        assert!(list.contains(" multi=2 watch=2 "), "{list}");
        c.run(&srv, &["exec"]);
        assert!(info(&mut c).contains(" multi=-1 watch=0 "), "{}", info(&mut c));
        c.run(&srv, &["hello", "3"]);
        c.run(&srv, &["subscribe", "x", "y"]);
        c.run(&srv, &["psubscribe", "p*"]);
        c.run(&srv, &["ssubscribe", "s"]);
        assert!(info(&mut c).contains(" sub=2 psub=1 ssub=1 "), "{}", info(&mut c));
        c.run(&srv, &["unsubscribe", "x"]);
        assert!(info(&mut c).contains(" sub=1 psub=1 ssub=1 "), "{}", info(&mut c));
        c.run(&srv, &["reset"]);
        assert!(info(&mut c).contains(" sub=0 psub=0 ssub=0 "), "{}", info(&mut c));
    }
}
