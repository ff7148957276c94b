//! Server commands that need no subsystem of their own: TIME, LASTSAVE, SHUTDOWN and MONITOR
//! (WAIT's row is here, its handler with replication's).

use std::sync::atomic::Ordering;

use hotkv_engine::CommandError;
use hotkv_engine::command::{acl, flags as f};
use hotkv_protocol::{Args, ReplyBuf};

use super::{int_arg, row};
use crate::registry::{Flow, ServerSpec};
use crate::server::{Server, unix_us};
use crate::session::{Session, flag};

/// Server command rows.
pub static COMMANDS: &[ServerSpec] = &[
    row("time", 1, f::LOADING | f::STALE | f::FAST, 0, &[], "server", "2.6.0", "Returns the server time.", "O(1)", time)
        .with_tips(&["nondeterministic_output"]),
    row("lastsave", 1, f::LOADING | f::STALE | f::FAST, acl::ADMIN | acl::DANGEROUS, &[], "server", "1.0.0",
        "Returns the Unix timestamp of the last successful save to disk.", "O(1)", lastsave)
        .with_tips(&["nondeterministic_output"]),
    row("shutdown", -1, f::ADMIN | f::NOSCRIPT | f::LOADING | f::STALE | f::NO_MULTI | f::ALLOW_BUSY, 0, &[],
        "server", "1.0.0", "Synchronously saves the database(s) to disk and shuts down the server.",
        "O(N) when saving, where N is the total number of keys in all databases when saving data, otherwise O(1)",
        shutdown),
    row("save", 1, f::ADMIN | f::NOSCRIPT | f::NO_ASYNC_LOADING | f::NO_MULTI, 0, &[], "server", "1.0.0",
        "Synchronously saves the database(s) to disk.",
        "O(N) where N is the total number of keys in all databases", save),
    row("bgsave", -1, f::ADMIN | f::NOSCRIPT | f::NO_ASYNC_LOADING, 0, &[], "server", "1.0.0",
        "Asynchronously saves the database(s) to disk.", "O(1)", bgsave),
    row("monitor", 1, f::ADMIN | f::NOSCRIPT | f::LOADING | f::STALE, 0, &[], "server", "1.0.0",
        "Listens for all requests received by the server in real-time.", "", monitor),
    row("wait", 3, f::BLOCKING, acl::CONNECTION, &[], "generic", "3.0.0",
        "Blocks until the asynchronous replication of all preceding write commands sent by the connection is completed.",
        "O(1)", super::repl::wait)
        .with_tips(&["request_policy:all_shards", "response_policy:agg_min"]),
];

fn time(_: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let us = unix_us();
    out.array(2);
    out.bulk_int(us / 1_000_000);
    out.bulk_int(us % 1_000_000);
    Ok(Flow::Continue)
}

fn lastsave(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.int(srv.lastsave.load(Ordering::Relaxed));
    Ok(Flow::Continue)
}

/// SHUTDOWN's modifiers.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ShutdownArgs {
    /// NOSAVE.
    pub nosave: bool,
    /// SAVE.
    pub save: bool,
    /// NOW: do not wait for replicas.
    pub now: bool,
    /// FORCE: ignore errors that would prevent shutting down.
    pub force: bool,
    /// ABORT: cancel a shutdown in progress.
    pub abort: bool,
}

impl ShutdownArgs {
    /// Parses the modifiers; illegal combinations are syntax errors, as in Valkey.
    pub fn parse<'a>(args: impl Iterator<Item = &'a [u8]>) -> Result<ShutdownArgs, CommandError> {
        let mut s = ShutdownArgs::default();
        for a in args {
            let field = match String::from_utf8_lossy(a).to_ascii_lowercase().as_str() {
                "nosave" => &mut s.nosave,
                "save" => &mut s.save,
                "now" => &mut s.now,
                "force" => &mut s.force,
                "abort" => &mut s.abort,
                _ => return Err(CommandError::Syntax),
            };
            *field = true;
        }
        let any_flag = s.nosave || s.save || s.now || s.force;
        if (s.abort && any_flag) || (s.nosave && s.save) {
            return Err(CommandError::Syntax);
        }
        Ok(s)
    }
}

impl ShutdownArgs {
    /// The modifiers that shape the shutdown (all but ABORT).
    pub fn opts(&self) -> crate::shutdown::Opts {
        crate::shutdown::Opts { nosave: self.nosave, save: self.save, now: self.now, force: self.force }
    }
}

/// SHUTDOWN [NOSAVE|SAVE] [NOW] [FORCE] | SHUTDOWN ABORT (see [`crate::shutdown`]). The caller
/// waits, as a blocked client, until the server exits (no reply) or the shutdown fails or is
/// aborted (an error).
fn shutdown(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let s = ShutdownArgs::parse(args.iter().skip(1))?;
    if s.abort {
        if !crate::shutdown::abort(srv) {
            return Err(CommandError::err("No shutdown in progress."));
        }
        out.ok();
        return Ok(Flow::Continue);
    }
    let Some(srv) = srv.arc() else { return Ok(Flow::Shutdown) };
    let cur = super::client::Current { id: sess.id, cmd: "shutdown", argv_mem: args.total_len() };
    let client = super::client::client_line(&srv.registry, &sess.info, crate::server::unix_ms(), &cur);
    let done = crate::shutdown::request(&srv, s.opts(), Some(client));
    // Counted in `blocked_clients` until the reply, as Valkey's BLOCKED_SHUTDOWN.
    sess.set_flag(flag::BLOCKED, true);
    Ok(Flow::Await(Box::pin(async move {
        if done.await {
            // The process exits before answering, as Valkey's does.
            std::future::pending::<()>().await;
        }
        b"-ERR Errors trying to SHUTDOWN. Check logs.\r\n".to_vec()
    })))
}

/// SAVE: the image of this instant, written before the reply. Only this client waits: the
/// snapshot is taken as BGSAVE's, so other clients keep running (Valkey blocks them all).
fn save(srv: &Server, _: &mut Session, _: Args<'_>, _: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let Some(srv) = srv.arc() else { return Err(CommandError::err("server is not running")) };
    let done = crate::persistence::start(&srv, crate::persistence::SaveKind::Foreground)
        .map_err(|_| CommandError::err("Background save already in progress"))?;
    Ok(Flow::Await(Box::pin(async move {
        match done.await {
            Ok(Ok(())) => b"+OK\r\n".to_vec(),
            _ => b"-ERR\r\n".to_vec(),
        }
    })))
}

/// BGSAVE [SCHEDULE|CANCEL].
fn bgsave(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let schedule = match args.len() {
        1 => false,
        2 if args.get(1).eq_ignore_ascii_case(b"schedule") => true,
        2 if args.get(1).eq_ignore_ascii_case(b"cancel") => {
            out.simple(crate::persistence::bgsave_cancel(srv).map_err(CommandError::err)?);
            return Ok(Flow::Continue);
        }
        _ => return Err(CommandError::Syntax),
    };
    let Some(srv) = srv.arc() else { return Err(CommandError::err("server is not running")) };
    let in_exec = sess.in_exec;
    let reply = crate::persistence::bgsave(&srv, schedule, in_exec).map_err(CommandError::err)?;
    out.simple(reply);
    Ok(Flow::Continue)
}

fn monitor(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    // A second MONITOR is ignored without a reply, as in Valkey.
    if sess.has_flag(flag::MONITOR) {
        return Ok(Flow::Continue);
    }
    sess.set_flag(flag::MONITOR, true);
    srv.monitors.fetch_add(1, Ordering::Relaxed);
    sess.enter_monitor = true;
    out.ok();
    Ok(Flow::Continue)
}

/// Valkey's `getTimeoutFromObjectOrReply` in milliseconds: the timeout's validation errors.
pub fn parse_timeout_ms(arg: &[u8]) -> Result<i64, CommandError> {
    let ms = int_arg(arg, Some("timeout is not an integer or out of range"))?;
    if ms < 0 {
        return Err(CommandError::err("timeout is negative"));
    }
    if ms > 0 && ms > i64::MAX - crate::server::unix_ms() {
        return Err(CommandError::err("timeout is out of range"));
    }
    Ok(ms)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};

    #[test]
    fn shutdown_modifiers() {
        let p = |a: &[&str]| ShutdownArgs::parse(a.iter().map(|s| s.as_bytes()));
        assert_eq!(p(&["NOSAVE", "now"]).unwrap(), ShutdownArgs { nosave: true, now: true, ..Default::default() });
        assert_eq!(p(&["save", "nosave"]), Err(CommandError::Syntax));
        assert_eq!(p(&["abort", "force"]), Err(CommandError::Syntax));
        assert_eq!(p(&["later"]), Err(CommandError::Syntax));
        let srv = server();
        let mut c = client(&srv, 42000);
        assert_eq!(c.run(&srv, &["shutdown", "abort"]), "-ERR No shutdown in progress.\r\n");
        assert_eq!(c.run_flow(&srv, &["shutdown", "nosave"]), (String::new(), Flow::Shutdown));
    }

    #[test]
    fn time_lastsave_wait_monitor() {
        let srv = server();
        let mut c = client(&srv, 42001);
        let t = c.run(&srv, &["time"]);
        assert!(t.starts_with("*2\r\n$10\r\n"), "{t}");
        assert_eq!(c.run(&srv, &["lastsave"]), format!(":{}\r\n", srv.lastsave.load(Ordering::Relaxed)));
        assert_eq!(c.run(&srv, &["wait", "0", "0"]), ":0\r\n");
        // No replica can acknowledge: the reply waits for the timeout, with no lock held.
        let (out, flow) = c.run_flow(&srv, &["wait", "1", "100"]);
        assert!(out.is_empty() && matches!(flow, Flow::Await(_)), "{out:?} {flow:?}");
        assert_eq!(c.run(&srv, &["wait", "x", "0"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(c.run(&srv, &["wait", "1", "-1"]), "-ERR timeout is negative\r\n");
        assert_eq!(c.run(&srv, &["wait", "1", "1.5"]), "-ERR timeout is not an integer or out of range\r\n");
        assert_eq!(c.run(&srv, &["monitor"]), "+OK\r\n");
        assert!(c.sess.enter_monitor && srv.monitors.load(Ordering::Relaxed) == 1);
        assert_eq!(c.run(&srv, &["monitor"]), "");
        assert_eq!(srv.monitors.load(Ordering::Relaxed), 1);
    }
}
