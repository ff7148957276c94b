//! Connection commands: PING, ECHO, QUIT, RESET, HELLO, AUTH.

use std::sync::atomic::Ordering;

use hotkv_engine::CommandError;
use hotkv_engine::command::{acl, flags as f};
use hotkv_protocol::{Args, Protocol, ReplyBuf};

use super::row;
use crate::registry::{Flow, ServerSpec};
use crate::server::Server;
use crate::session::{ReplyMode, Session, flag};

/// The Redis version whose behaviour hotkv matches; clients gate features on it.
pub const REDIS_VERSION: &str = "7.2.4";

const CONN: u32 = acl::CONNECTION;

/// Connection command rows.
pub static COMMANDS: &[ServerSpec] = &[
    row(
        "ping",
        -1,
        f::FAST,
        CONN,
        &[],
        "connection",
        "1.0.0",
        "Returns the server's liveliness response.",
        "O(1)",
        ping,
    )
    .with_tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
    row(
        "echo",
        2,
        f::LOADING | f::STALE | f::FAST,
        CONN,
        &[],
        "connection",
        "1.0.0",
        "Returns the given string.",
        "O(1)",
        echo,
    ),
    row(
        "quit",
        -1,
        f::ALLOW_BUSY | f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_AUTH,
        CONN,
        &[],
        "connection",
        "1.0.0",
        "Closes the connection.",
        "O(1)",
        quit,
    ),
    row(
        "reset",
        1,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_AUTH | f::ALLOW_BUSY,
        CONN,
        &[],
        "connection",
        "6.2.0",
        "Resets the connection.",
        "O(1)",
        reset,
    ),
    row(
        "hello",
        -1,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_AUTH | f::ALLOW_BUSY,
        CONN,
        &[],
        "connection",
        "6.0.0",
        "Handshakes with the server.",
        "O(1)",
        hello,
    ),
    row(
        "auth",
        -2,
        f::NOSCRIPT | f::LOADING | f::STALE | f::FAST | f::NO_AUTH | f::ALLOW_BUSY,
        CONN,
        &[],
        "connection",
        "1.0.0",
        "Authenticates the connection.",
        "O(N) where N is the number of passwords defined for the user",
        auth,
    ),
];

fn ping(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if args.len() > 2 {
        return Err(CommandError::WrongArity("ping".into()));
    }
    // A RESP2 subscriber gets PING's reply in the shape of a pub/sub message.
    if sess.subscribed() && !out.is_resp3() {
        out.array(2);
        out.bulk(b"pong");
        out.bulk(args.opt(1).unwrap_or(b""));
        return Ok(Flow::Continue);
    }
    match args.len() {
        1 => out.simple("PONG"),
        _ => out.bulk(args.get(1)),
    }
    Ok(Flow::Continue)
}

fn echo(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.bulk(args.get(1));
    Ok(Flow::Continue)
}

fn quit(_: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.ok();
    sess.close_after_reply = true;
    sess.set_flag(flag::CLOSE_AFTER_REPLY, true);
    Ok(Flow::Close)
}

fn reset(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    sess.db = 0;
    sess.info.db.store(0, Ordering::Relaxed);
    out.set_protocol(Protocol::Resp2);
    sess.info.resp.store(2, Ordering::Relaxed);
    sess.reply_mode = ReplyMode::On;
    sess.info.name.lock().clear();
    sess.set_flag(flag::NO_EVICT | flag::NO_TOUCH, false);
    if sess.has_flag(flag::MONITOR) {
        sess.set_flag(flag::MONITOR, false);
        srv.monitors.fetch_sub(1, Ordering::Relaxed);
    }
    // Back to `default`, logged in only if it needs no password (Valkey's clientSetDefaultAuth).
    sess.login(srv.acl.default_user());
    sess.authenticated = !srv.acl.auth_required();
    sess.multi = None;
    sess.set_flag(flag::MULTI, false);
    crate::cmd::multi::forget_watches(srv, sess);
    crate::cmd::client_tracking::disable(srv, sess);
    if let Some(mut subs) = sess.subs.take() {
        srv.pubsub.unsubscribe_all(&mut subs);
    }
    sess.set_flag(flag::PUBSUB, false);
    sess.sync_counts();
    out.simple("RESET");
    Ok(Flow::Continue)
}

/// Logs the session in as `user` if the password fits; a failure is logged in ACL LOG under
/// the name tried, with the command as typed as its object (Valkey's checkPasswordBasedAuth).
fn check_credentials(
    srv: &Server,
    sess: &mut Session,
    args: &Args<'_>,
    user: &[u8],
    pass: &[u8],
) -> Result<(), CommandError> {
    match srv.acl.authenticate(user, pass) {
        Some(cell) => {
            sess.login(cell);
            Ok(())
        }
        None => {
            let object = String::from_utf8_lossy(args.get(0)).into_owned();
            let name = String::from_utf8_lossy(user).into_owned();
            crate::acl::record(srv, sess, crate::acl::Reason::Auth, object, Some(name));
            Err(CommandError::WrongPass)
        }
    }
}

fn auth(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let (user, pass) = match args.len() {
        2 => {
            if srv.acl.default_user().rules().nopass() {
                return Err(CommandError::err(
                    "AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
                ));
            }
            (&b"default"[..], args.get(1))
        }
        3 => (args.get(1), args.get(2)),
        _ => return Err(CommandError::Syntax),
    };
    check_credentials(srv, sess, &args, user, pass)?;
    out.ok();
    Ok(Flow::Continue)
}

/// Validates a client name: no spaces, newlines or special characters (Valkey's rule:
/// printable ASCII from '!' to '~').
pub fn valid_client_name(name: &[u8]) -> Result<(), CommandError> {
    if name.iter().all(|c| (b'!'..=b'~').contains(c)) {
        Ok(())
    } else {
        Err(CommandError::err("Client names cannot contain spaces, newlines or special characters."))
    }
}

fn hello(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let mut next = 1;
    let mut version = None;
    if args.len() >= 2 {
        let v = hotkv_protocol::parse_i64(args.get(1))
            .ok_or_else(|| CommandError::err("Protocol version is not an integer or out of range"))?;
        if !(2..=3).contains(&v) {
            return Err(CommandError::raw("NOPROTO unsupported protocol version"));
        }
        version = Some(v);
        next = 2;
    }
    let mut creds = None;
    let mut name = None;
    let mut j = next;
    while j < args.len() {
        let opt = args.get(j);
        let more = args.len() - 1 - j;
        if opt.eq_ignore_ascii_case(b"auth") && more >= 2 {
            creds = Some((args.get(j + 1), args.get(j + 2)));
            j += 3;
        } else if opt.eq_ignore_ascii_case(b"setname") && more >= 1 {
            let n = args.get(j + 1);
            valid_client_name(n)?;
            name = Some(n);
            j += 2;
        } else {
            return Err(CommandError::err(format!("Syntax error in HELLO option '{}'", String::from_utf8_lossy(opt))));
        }
    }
    if let Some((user, pass)) = creds {
        check_credentials(srv, sess, &args, user, pass)?;
    }
    if !sess.authenticated {
        return Err(CommandError::raw(
            "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
        ));
    }
    if let Some(n) = name {
        *sess.info.name.lock() = String::from_utf8_lossy(n).into_owned();
    }
    if let Some(v) = version {
        out.set_protocol(if v == 3 { Protocol::Resp3 } else { Protocol::Resp2 });
        sess.info.resp.store(v as u8, Ordering::Relaxed);
    }
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"hotkv");
    out.bulk(b"version");
    out.bulk(REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(i64::from(sess.info.resp.load(Ordering::Relaxed)));
    out.bulk(b"id");
    out.int(sess.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
    Ok(Flow::Continue)
}
