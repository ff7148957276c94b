//! CLIENT: the connection's own settings (ID, names, library info, REPLY, NO-EVICT,
//! NO-TOUCH) and the view of and control over other connections (LIST, INFO, KILL).

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, acl, flags as f};
use hotkv_protocol::{Args, ReplyBuf};

use super::conn::valid_client_name;
use super::{int_arg, reply_help, row, text};
use crate::registry::{Flow, Registry, ServerSpec};
use crate::server::{Server, unix_ms};
use crate::session::{ClientInfo, ReplyMode, Session, flag};

const BASE: u32 = f::NOSCRIPT | f::LOADING | f::STALE;
const ADMIN: u32 = f::ADMIN | BASE;
const CONN: u32 = acl::CONNECTION;
const ALL_NODES: &[&str] = &["request_policy:all_nodes", "response_policy:all_succeeded"];

/// CLIENT and its subcommands.
pub static COMMANDS: &[ServerSpec] = &[CommandSpec::container(
    "client",
    -2,
    "connection",
    "2.4.0",
    "A container for client connection commands.",
    &[
        row(
            "caching",
            3,
            BASE,
            CONN,
            &[],
            "connection",
            "6.0.0",
            "Instructs the server whether to track the keys in the next request.",
            "O(1)",
            super::client_tracking::caching,
        ),
        row(
            "getredir",
            2,
            BASE,
            CONN,
            &[],
            "connection",
            "6.0.0",
            "Returns the client ID to which the connection's tracking notifications are redirected.",
            "O(1)",
            super::client_tracking::getredir,
        ),
        row(
            "getname",
            2,
            BASE,
            CONN,
            &[],
            "connection",
            "2.6.9",
            "Returns the name of the connection.",
            "O(1)",
            getname,
        ),
        row(
            "help",
            2,
            f::LOADING | f::STALE,
            CONN,
            &[],
            "connection",
            "5.0.0",
            "Returns helpful text about the different subcommands.",
            "O(1)",
            help,
        ),
        row(
            "id",
            2,
            BASE,
            CONN,
            &[],
            "connection",
            "5.0.0",
            "Returns the unique client ID of the connection.",
            "O(1)",
            id,
        ),
        row(
            "info",
            2,
            BASE,
            CONN,
            &[],
            "connection",
            "6.2.0",
            "Returns information about the connection.",
            "O(1)",
            info,
        )
        .with_tips(&["nondeterministic_output"]),
        row(
            "kill",
            -3,
            ADMIN,
            CONN,
            &[],
            "connection",
            "2.4.0",
            "Terminates open connections.",
            "O(N) where N is the number of client connections",
            kill,
        ),
        row(
            "list",
            -2,
            ADMIN,
            CONN,
            &[],
            "connection",
            "2.4.0",
            "Lists open connections.",
            "O(N) where N is the number of client connections",
            list,
        )
        .with_tips(&["nondeterministic_output"]),
        row(
            "no-evict",
            3,
            ADMIN,
            CONN,
            &[],
            "connection",
            "7.0.0",
            "Sets the client eviction mode of the connection.",
            "O(1)",
            no_evict,
        ),
        row(
            "no-touch",
            3,
            BASE,
            CONN,
            &[],
            "connection",
            "7.2.0",
            "Controls whether commands sent by the client affect the LRU/LFU of accessed keys.",
            "O(1)",
            no_touch,
        ),
        row(
            "reply",
            3,
            BASE,
            CONN,
            &[],
            "connection",
            "3.2.0",
            "Instructs the server whether to reply to commands.",
            "O(1)",
            reply,
        ),
        row(
            "setinfo",
            4,
            BASE,
            CONN,
            &[],
            "connection",
            "7.2.0",
            "Sets information specific to the client or connection.",
            "O(1)",
            setinfo,
        )
        .with_tips(ALL_NODES),
        row("setname", 3, BASE, CONN, &[], "connection", "2.6.9", "Sets the connection name.", "O(1)", setname)
            .with_tips(ALL_NODES),
        row(
            "unblock",
            -3,
            ADMIN,
            CONN,
            &[],
            "connection",
            "5.0.0",
            "Unblocks a client blocked by a blocking command from a different connection.",
            "O(log N) where N is the number of client connections",
            unblock,
        ),
        row(
            "tracking",
            -3,
            BASE,
            CONN,
            &[],
            "connection",
            "6.0.0",
            "Controls server-assisted client-side caching for the connection.",
            "O(1). Some options may introduce additional complexity.",
            super::client_tracking::tracking,
        ),
        row(
            "trackinginfo",
            2,
            BASE,
            CONN,
            &[],
            "connection",
            "6.2.0",
            "Returns information about server-assisted client-side caching for the connection.",
            "O(1)",
            super::client_tracking::trackinginfo,
        ),
        row("pause", -3, ADMIN, CONN, &[], "connection", "3.0.0", "Suspends commands processing.", "O(1)", pause),
        row(
            "unpause",
            2,
            ADMIN,
            CONN,
            &[],
            "connection",
            "6.2.0",
            "Resumes processing commands from paused clients.",
            "O(N) Where N is the number of paused clients",
            unpause,
        ),
    ],
)];

/// What the line of the calling client shows differently: its command is the one running.
pub struct Current<'a> {
    /// Id of the calling client.
    pub id: u64,
    /// Full name of the running command (`client|list`).
    pub cmd: &'a str,
    /// Bytes of the running command's arguments (`argv-mem`).
    pub argv_mem: usize,
}

/// One CLIENT LIST line (without the newline), field for field as Valkey 8.0's
/// `catClientInfoString`.
pub fn client_line(reg: &Registry, c: &ClientInfo, now_ms: i64, current: &Current<'_>) -> String {
    let me = c.id == current.id;
    let flags = c.flags.load(Ordering::Relaxed);
    let last = c.last_cmd.load(Ordering::Relaxed) as usize;
    let cmd = if me {
        current.cmd
    } else if last == 0 || last > reg.len() {
        "NULL"
    } else {
        reg.get(last - 1).full_name.as_str()
    };
    let load = |a: &std::sync::atomic::AtomicUsize| a.load(Ordering::Relaxed);
    // The running command's query is consumed and its reply not yet queued.
    let (qbuf, obl) = if me { (0, 0) } else { (c.query_buf.pending(), load(&c.obl)) };
    // Valkey's omem is its reply list: what waits beyond its static reply buffer, the measure
    // output limits apply to.
    let omem = c.pending_output().saturating_sub(crate::obuf_limit::FREE_BYTES);
    let qbuf_free = c.query_buf.free();
    let argv_mem = if me { current.argv_mem } else { 0 };
    // What maxmemory-clients counts for it (see `client_evict::usage`), plus, for the caller,
    // its running command's arguments.
    let tot_mem = c.memory() + argv_mem;
    let (rbs, rbp) = (c.reply_buf.size(), c.reply_buf.peak());
    let mut s = String::with_capacity(360);
    let _ = write!(
        s,
        "id={} addr={} laddr={} fd={} name={} age={} idle={} flags={} db={} sub={} psub={} ssub={} multi={} watch={} \
         qbuf={qbuf} qbuf-free={qbuf_free} argv-mem={argv_mem} multi-mem=0 rbs={rbs} rbp={rbp} obl={obl} oll=0 \
         omem={omem} tot-mem={tot_mem} events=r cmd={cmd} user={} redir={} resp={} lib-name={} lib-ver={} \
         tot-net-in={} tot-net-out={} tot-cmds={}",
        c.id,
        c.addr,
        c.laddr,
        c.fd,
        c.name.lock(),
        c.created.elapsed().as_secs(),
        (now_ms / 1000 - c.last_interaction.load(Ordering::Relaxed) / 1000).max(0),
        c.flag_letters(),
        c.db.load(Ordering::Relaxed),
        c.counts.sub.load(Ordering::Relaxed),
        c.counts.psub.load(Ordering::Relaxed),
        c.counts.ssub.load(Ordering::Relaxed),
        if flags & flag::MULTI != 0 { i64::from(c.counts.multi.load(Ordering::Relaxed)) } else { -1 },
        c.counts.watch.load(Ordering::Relaxed),
        c.user.lock(),
        c.redir.load(Ordering::Relaxed),
        c.resp.load(Ordering::Relaxed),
        c.lib_name.lock(),
        c.lib_ver.lock(),
        c.net_in.load(Ordering::Relaxed),
        c.net_out.load(Ordering::Relaxed),
        c.commands.load(Ordering::Relaxed),
    );
    s
}

/// Client classes of CLIENT LIST TYPE and CLIENT KILL TYPE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientType {
    /// Ordinary clients, MONITOR clients included (as in Valkey).
    Normal,
    /// Replicas attached to this node (none yet).
    Replica,
    /// The link to this node's primary (none yet).
    Primary,
    /// Clients in pub/sub mode.
    PubSub,
}

impl ClientType {
    /// Valkey's `getClientTypeByName`.
    pub fn parse(name: &[u8]) -> Option<ClientType> {
        let n = String::from_utf8_lossy(name).to_ascii_lowercase();
        match n.as_str() {
            "normal" => Some(ClientType::Normal),
            "slave" | "replica" => Some(ClientType::Replica),
            "pubsub" => Some(ClientType::PubSub),
            "master" | "primary" => Some(ClientType::Primary),
            _ => None,
        }
    }

    /// The class of a connected client.
    pub fn of(c: &ClientInfo) -> ClientType {
        let f = c.flags.load(Ordering::Relaxed);
        if f & flag::MASTER != 0 {
            ClientType::Primary
        } else if f & flag::REPLICA != 0 {
            ClientType::Replica
        } else if f & flag::PUBSUB != 0 {
            ClientType::PubSub
        } else {
            ClientType::Normal
        }
    }
}

fn unknown_type(name: &[u8]) -> CommandError {
    CommandError::err(format!("Unknown client type '{}'", text(name)))
}

/// The filters of CLIENT KILL; the old `CLIENT KILL addr` form is `addr` with `skipme` off.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct KillFilter {
    /// Peer address, `ip:port`.
    pub addr: Option<String>,
    /// Local address, `ip:port`.
    pub laddr: Option<String>,
    /// Client class.
    pub kind: Option<ClientType>,
    /// Client id.
    pub id: Option<u64>,
    /// User name.
    pub user: Option<String>,
    /// Whether the calling client is spared.
    pub skipme: bool,
    /// Only clients connected at least this many seconds ago.
    pub max_age: Option<i64>,
    /// The old form, which replies +OK or an error rather than a count.
    pub old_form: bool,
}

impl KillFilter {
    /// Parses the arguments after `CLIENT KILL` (Valkey's option loop, same errors).
    pub fn parse(args: &[&[u8]]) -> Result<KillFilter, CommandError> {
        if let [addr] = args {
            return Ok(KillFilter { addr: Some(text(addr)), old_form: true, ..KillFilter::default() });
        }
        let mut k = KillFilter { skipme: true, ..KillFilter::default() };
        let mut i = 0;
        while i < args.len() {
            let (opt, Some(val)) = (args[i], args.get(i + 1)) else { return Err(CommandError::Syntax) };
            let is = |name: &str| opt.eq_ignore_ascii_case(name.as_bytes());
            if is("id") {
                let id = hotkv_protocol::parse_i64(val).filter(|n| *n >= 1);
                k.id = Some(id.ok_or_else(|| CommandError::err("client-id should be greater than 0"))? as u64);
            } else if is("maxage") {
                let age = int_arg(val, Some("maxage is not an integer or out of range"))?;
                if age <= 0 {
                    return Err(CommandError::err("maxage should be greater than 0"));
                }
                k.max_age = Some(age);
            } else if is("type") {
                k.kind = Some(ClientType::parse(val).ok_or_else(|| unknown_type(val))?);
            } else if is("addr") {
                k.addr = Some(text(val));
            } else if is("laddr") {
                k.laddr = Some(text(val));
            } else if is("user") {
                k.user = Some(text(val));
            } else if is("skipme") {
                k.skipme = if val.eq_ignore_ascii_case(b"yes") {
                    true
                } else if val.eq_ignore_ascii_case(b"no") {
                    false
                } else {
                    return Err(CommandError::Syntax);
                };
            } else {
                return Err(CommandError::Syntax);
            }
            i += 2;
        }
        Ok(k)
    }

    /// Whether client `c` is to be killed by client `me`.
    pub fn matches(&self, c: &ClientInfo, me: u64) -> bool {
        self.addr.as_ref().is_none_or(|a| *a == c.addr.to_string())
            && self.laddr.as_ref().is_none_or(|a| *a == c.laddr.to_string())
            && self.kind.is_none_or(|t| t == ClientType::of(c))
            && self.id.is_none_or(|id| id == c.id)
            && self.user.as_ref().is_none_or(|u| *u == *c.user.lock())
            && !(self.skipme && c.id == me)
            && self.max_age.is_none_or(|age| c.created.elapsed().as_secs() as i64 >= age)
    }
}

fn kill(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let rest: Vec<&[u8]> = args.iter().skip(2).collect();
    let filter = KillFilter::parse(&rest)?;
    if let Some(u) = &filter.user
        && srv.acl.user(u.as_bytes()).is_none()
    {
        return Err(CommandError::err(format!("No such user '{u}'")));
    }
    let mut killed = 0;
    let mut me = false;
    for c in srv.clients.snapshot() {
        if !filter.matches(&c, sess.id) {
            continue;
        }
        if c.id == sess.id {
            me = true;
        } else {
            c.kill();
            // A replica's share of the replication buffer goes now, not when its session
            // notices: INFO right after the kill must not still count it.
            if ClientType::of(&c) == ClientType::Replica {
                srv.repl.primary.disconnect_client(c.id, "killed by CLIENT KILL");
            }
        }
        killed += 1;
    }
    if filter.old_form {
        if killed == 0 {
            return Err(CommandError::err("No such client"));
        }
        out.ok();
    } else {
        out.int(killed);
    }
    if me {
        // The reply is queued first; the connection closes once it is written.
        sess.close_after_reply = true;
        sess.set_flag(flag::CLOSE_AFTER_REPLY, true);
    }
    Ok(Flow::Continue)
}

fn current<'a>(srv: &'a Server, sess: &Session, args: &Args<'_>, sub: &str) -> Current<'a> {
    let id = srv.registry.by_name(sub).unwrap_or(0);
    Current { id: sess.id, cmd: srv.registry.get(id).full_name.as_str(), argv_mem: args.total_len() }
}

fn list(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let cur = current(srv, sess, &args, "client|list");
    let now = unix_ms();
    let mut text = String::new();
    let mut add = |c: &ClientInfo| {
        text.push_str(&client_line(&srv.registry, c, now, &cur));
        text.push('\n');
    };
    if args.len() == 4 && args.get(2).eq_ignore_ascii_case(b"type") {
        let kind = ClientType::parse(args.get(3)).ok_or_else(|| unknown_type(args.get(3)))?;
        srv.clients.snapshot().iter().filter(|c| ClientType::of(c) == kind).for_each(|c| add(c));
    } else if args.len() > 3 && args.get(2).eq_ignore_ascii_case(b"id") {
        for a in args.iter().skip(3) {
            let id = int_arg(a, Some("Invalid client ID"))?;
            if let Some(c) = u64::try_from(id).ok().and_then(|id| srv.clients.get(id)) {
                add(&c);
            }
        }
    } else if args.len() != 2 {
        return Err(CommandError::Syntax);
    } else {
        srv.clients.snapshot().iter().for_each(|c| add(c));
    }
    out.verbatim(text.as_bytes());
    Ok(Flow::Continue)
}

fn info(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let cur = current(srv, sess, &args, "client|info");
    let mut line = client_line(&srv.registry, &sess.info, unix_ms(), &cur);
    line.push('\n');
    out.verbatim(line.as_bytes());
    Ok(Flow::Continue)
}

fn id(_: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.int(sess.id as i64);
    Ok(Flow::Continue)
}

fn getname(_: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let name = sess.info.name.lock();
    if name.is_empty() {
        out.null()
    } else {
        out.bulk(name.as_bytes())
    }
    Ok(Flow::Continue)
}

fn setname(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    valid_client_name(args.get(2))?;
    *sess.info.name.lock() = text(args.get(2));
    out.ok();
    Ok(Flow::Continue)
}

fn setinfo(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let (attr, val) = (args.get(2), args.get(3));
    let slot = if attr.eq_ignore_ascii_case(b"lib-name") {
        &sess.info.lib_name
    } else if attr.eq_ignore_ascii_case(b"lib-ver") {
        &sess.info.lib_ver
    } else {
        return Err(CommandError::err(format!("Unrecognized option '{}'", text(attr))));
    };
    if !val.iter().all(|c| (b'!'..=b'~').contains(c)) {
        return Err(CommandError::err(format!(
            "{} cannot contain spaces, newlines or special characters.",
            text(attr)
        )));
    }
    *slot.lock() = text(val);
    out.ok();
    Ok(Flow::Continue)
}

/// Parses an `on`/`off` argument; anything else is a syntax error.
fn on_off(arg: &[u8]) -> Result<bool, CommandError> {
    if arg.eq_ignore_ascii_case(b"on") {
        Ok(true)
    } else if arg.eq_ignore_ascii_case(b"off") {
        Ok(false)
    } else {
        Err(CommandError::Syntax)
    }
}

fn reply(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let mode = args.get(2);
    if mode.eq_ignore_ascii_case(b"skip") {
        // SKIP does nothing while replies are off, as in Valkey.
        if sess.reply_mode != ReplyMode::Off {
            sess.reply_mode = ReplyMode::SkipNext;
        }
        return Ok(Flow::Continue);
    }
    if on_off(mode)? {
        sess.reply_mode = ReplyMode::On;
        out.ok();
    } else {
        sess.reply_mode = ReplyMode::Off;
    }
    Ok(Flow::Continue)
}

fn no_evict(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    sess.set_flag(flag::NO_EVICT, on_off(args.get(2))?);
    out.ok();
    Ok(Flow::Continue)
}

fn no_touch(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    sess.set_flag(flag::NO_TOUCH, on_off(args.get(2))?);
    out.ok();
    Ok(Flow::Continue)
}

/// CLIENT UNBLOCK id [TIMEOUT|ERROR]: the blocked client gets its timeout reply, or the
/// UNBLOCKED error.
fn unblock(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let id = hotkv_protocol::parse_i64(args.get(2)).ok_or(CommandError::NotInteger)?;
    let as_error = match args.opt(3) {
        None => false,
        Some(a) if a.eq_ignore_ascii_case(b"timeout") => false,
        Some(a) if a.eq_ignore_ascii_case(b"error") => true,
        Some(_) => return Err(CommandError::err("CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
    };
    if args.len() > 4 {
        return Err(CommandError::Syntax);
    }
    let woken = u64::try_from(id).ok().and_then(|id| srv.blocked.by_client(id)).is_some_and(|w| {
        w.wake(if as_error {
            crate::blocking::Wakeup::Error("UNBLOCKED client unblocked via CLIENT UNBLOCK".into())
        } else {
            crate::blocking::Wakeup::Timeout
        })
    });
    out.int(i64::from(woken));
    Ok(Flow::Continue)
}

/// CLIENT PAUSE timeout [WRITE|ALL].
fn pause(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    use crate::pause::Mode;
    if args.len() > 4 {
        return Err(super::subcommand_syntax_error(&args));
    }
    let mode = match args.opt(3).map(<[u8]>::to_ascii_lowercase).as_deref() {
        None | Some(b"all") => Mode::All,
        Some(b"write") => Mode::Write,
        Some(_) => return Err(CommandError::err("CLIENT PAUSE mode must be WRITE or ALL")),
    };
    let ms = hotkv_protocol::parse_i64(args.get(2))
        .ok_or_else(|| CommandError::err("timeout is not an integer or out of range"))?;
    if ms < 0 {
        return Err(CommandError::err("timeout is negative"));
    }
    let now = unix_ms();
    srv.pause.pause(mode, now.saturating_add(ms), now);
    out.ok();
    Ok(Flow::Continue)
}

fn unpause(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    srv.pause.unpause();
    out.ok();
    Ok(Flow::Continue)
}

fn help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    reply_help(
        out,
        &args,
        &[
            "CACHING (YES|NO)",
            "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
            "GETREDIR",
            "    Return the client ID we are redirecting to when tracking is enabled.",
            "GETNAME",
            "    Return the name of the current connection.",
            "ID",
            "    Return the ID of the current connection.",
            "INFO",
            "    Return information about the current client connection.",
            "KILL <ip:port>",
            "    Kill connection made from <ip:port>.",
            "KILL <option> <value> [<option> <value> [...]]",
            "    Kill connections. Options are:",
            "    * ADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made from the specified address",
            "    * LADDR (<ip:port>|<unixsocket>:0)",
            "      Kill connections made to specified local address",
            "    * TYPE (NORMAL|PRIMARY|REPLICA|PUBSUB)",
            "      Kill connections by type.",
            "    * USER <username>",
            "      Kill connections authenticated by <username>.",
            "    * SKIPME (YES|NO)",
            "      Skip killing current connection (default: yes).",
            "    * ID <client-id>",
            "      Kill connections by client id.",
            "    * MAXAGE <maxage>",
            "      Kill connections older than the specified age.",
            "LIST [options ...]",
            "    Return information about client connections. Options:",
            "    * TYPE (NORMAL|PRIMARY|REPLICA|PUBSUB)",
            "      Return clients of specified type.",
            "UNBLOCK <clientid> [TIMEOUT|ERROR]",
            "    Unblock the specified blocked client.",
            "UNPAUSE",
            "    Stop the current client pause, resuming traffic.",
            "PAUSE <timeout> [WRITE|ALL]",
            "    Suspend all, or just write, clients for <timeout> milliseconds.",
            "REPLY (ON|OFF|SKIP)",
            "    Control the replies sent to the current connection.",
            "SETNAME <name>",
            "    Assign the name <name> to the current connection.",
            "SETINFO <option> <value>",
            "    Set client meta attr. Options are:",
            "    * LIB-NAME: the client lib name.",
            "    * LIB-VER: the client lib version.",
            "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
            "         [OPTIN] [OPTOUT] [NOLOOP]",
            "    Control server assisted client side caching.",
            "TRACKINGINFO",
            "    Report tracking status for the current connection.",
            "NO-EVICT (ON|OFF)",
            "    Protect current client connection from eviction.",
            "NO-TOUCH (ON|OFF)",
            "    Will not touch LRU/LFU stats when this mode is on.",
        ],
    );
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};

    fn parse(args: &[&str]) -> Result<KillFilter, CommandError> {
        let v: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
        KillFilter::parse(&v)
    }

    fn err(args: &[&str]) -> String {
        parse(args).unwrap_err().message().into_owned()
    }

    #[test]
    fn kill_filters_parse_like_valkey() {
        let k = parse(&["127.0.0.1:5"]).unwrap();
        assert!(k.old_form && !k.skipme && k.addr.as_deref() == Some("127.0.0.1:5"));
        let k = parse(&["ID", "7", "type", "NORMAL", "skipme", "no", "maxage", "3"]).unwrap();
        assert_eq!((k.id, k.kind, k.skipme, k.max_age), (Some(7), Some(ClientType::Normal), false, Some(3)));
        assert_eq!(err(&["id", "10", "wrong_arg"]), "ERR syntax error");
        for bad in ["str", "-1", "0"] {
            assert_eq!(err(&["id", bad]), "ERR client-id should be greater than 0");
        }
        assert_eq!(err(&["type", "wrong_type"]), "ERR Unknown client type 'wrong_type'");
        // The user's existence is the ACL table's to say, when the command runs.
        assert_eq!(parse(&["user", "wrong_user"]).unwrap().user.as_deref(), Some("wrong_user"));
        assert_eq!(err(&["skipme", "yes_or_no"]), "ERR syntax error");
        assert_eq!(err(&["maxage", "str"]), "ERR maxage is not an integer or out of range");
        assert_eq!(err(&["maxage", "9999999999999999999"]), "ERR maxage is not an integer or out of range");
        assert_eq!(err(&["maxage", "-1"]), "ERR maxage should be greater than 0");
    }

    #[test]
    fn list_line_has_valkeys_fields_in_order() {
        let srv = server();
        let mut c = client(&srv, 41000);
        let line = c.run(&srv, &["client", "list"]);
        let body = line.split_once("\r\n").unwrap().1.strip_suffix("\r\n").unwrap();
        let fields: Vec<&str> = body.trim_end().split(' ').map(|f| f.split_once('=').unwrap().0).collect();
        assert_eq!(
            fields.join(" "),
            "id addr laddr fd name age idle flags db sub psub ssub multi watch qbuf qbuf-free argv-mem multi-mem \
             rbs rbp obl oll omem tot-mem events cmd user redir resp lib-name lib-ver tot-net-in tot-net-out tot-cmds"
        );
        let id = c.sess.id;
        assert!(body.starts_with(&format!("id={id} addr=127.0.0.1:41000 laddr=127.0.0.1:6379 fd=8 name= age=0 idle=0 flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 watch=0 qbuf=0 ")), "{body}");
        assert!(body.contains(" argv-mem=10 multi-mem=0 "), "{body}");
        assert!(body.contains(" obl=0 oll=0 omem=0 "), "{body}");
        assert!(body.contains(" rbs=16384 rbp=16384 "), "a new client's reply buffer, as Valkey's: {body}");
        assert!(body.contains(" events=r cmd=client|list user=default redir=-1 resp=2 lib-name= lib-ver= "), "{body}");
        assert!(body.ends_with(" tot-cmds=0\n"), "{body}");
        let info = c.run(&srv, &["client", "info"]);
        assert!(info.contains(" cmd=client|info ") && info.contains(" tot-cmds=1\n"), "{info}");
    }

    #[test]
    fn list_reports_the_reply_buffer_the_cron_sized() {
        let srv = server();
        let mut c = client(&srv, 41003);
        let tuning = crate::reply_buffer::Tuning::default();
        // The first visit after the reset time resets the peak, the next shrinks to it.
        c.sess.info.reply_buf.cron(0, i64::MAX, &tuning);
        c.sess.info.reply_buf.cron(0, i64::MAX, &tuning);
        let line = c.run(&srv, &["client", "info"]);
        assert!(line.contains(" rbs=1024 rbp=0 "), "{line}");
        c.sess.info.reply_buf.note(5000);
        let line = c.run(&srv, &["client", "info"]);
        assert!(line.contains(" rbs=1024 rbp=1024 "), "only what fits counts: {line}");
    }

    #[test]
    fn list_filters_and_other_clients() {
        let srv = server();
        let mut a = client(&srv, 41001);
        let mut b = client(&srv, 41002);
        b.run(&srv, &["ping"]);
        let all = a.run(&srv, &["client", "list"]);
        assert_eq!(all.matches("id=").count(), 2, "{all}");
        assert!(all.contains(&format!("id={} ", b.sess.id)) && all.contains(" cmd=ping "), "{all}");
        let one = a.run(&srv, &["client", "list", "id", &b.sess.id.to_string(), "999"]);
        assert_eq!(one.matches("id=").count(), 1, "{one}");
        assert_eq!(a.run(&srv, &["client", "list", "id", "x"]), "-ERR Invalid client ID\r\n");
        assert_eq!(a.run(&srv, &["client", "list", "type", "bad"]), "-ERR Unknown client type 'bad'\r\n");
        assert_eq!(a.run(&srv, &["client", "list", "type"]), "-ERR syntax error\r\n");
        assert!(a.run(&srv, &["client", "list", "type", "pubsub"]).starts_with("$0\r\n"));
        assert!(a.run(&srv, &["client", "list", "type", "normal"]).matches("id=").count() == 2);
    }

    #[test]
    fn kill_replies_and_marks() {
        let srv = server();
        let mut a = client(&srv, 41003);
        let b = client(&srv, 41004);
        assert_eq!(a.run(&srv, &["client", "kill", "1.2.3.4:5"]), "-ERR No such client\r\n");
        assert_eq!(a.run(&srv, &["client", "kill", "127.0.0.1:41004"]), "+OK\r\n");
        assert!(b.sess.info.is_killed());
        // A killed client is gone at once, as in Valkey, even before its task deregisters it.
        assert_eq!(a.run(&srv, &["client", "kill", "127.0.0.1:41004"]), "-ERR No such client\r\n");
        assert_eq!(a.run(&srv, &["client", "kill", "skipme", "yes"]), ":0\r\n");
        assert!(!a.sess.close_after_reply);
        assert_eq!(a.run(&srv, &["client", "kill", "id", &a.sess.id.to_string(), "skipme", "no"]), ":1\r\n");
        assert!(a.sess.close_after_reply);
    }

    #[test]
    fn own_settings() {
        let srv = server();
        let mut a = client(&srv, 41005);
        assert_eq!(a.run(&srv, &["client", "getname"]), "$-1\r\n");
        assert_eq!(
            a.run(&srv, &["client", "setname", "a b"]),
            "-ERR Client names cannot contain spaces, newlines or special characters.\r\n"
        );
        assert_eq!(a.run(&srv, &["client", "setname", "foo"]), "+OK\r\n");
        assert_eq!(a.run(&srv, &["client", "getname"]), "$3\r\nfoo\r\n");
        assert_eq!(
            a.run(&srv, &["client", "setinfo", "lib-name", "redis py"]),
            "-ERR lib-name cannot contain spaces, newlines or special characters.\r\n"
        );
        assert_eq!(a.run(&srv, &["client", "setinfo", "badopt", "x"]), "-ERR Unrecognized option 'badopt'\r\n");
        assert_eq!(a.run(&srv, &["client", "setinfo", "LIB-VER", "1.0"]), "+OK\r\n");
        assert!(a.run(&srv, &["client", "info"]).contains(" name=foo "));
        assert!(a.run(&srv, &["client", "info"]).contains(" lib-ver=1.0 "));
        assert_eq!(a.run(&srv, &["client", "no-evict", "maybe"]), "-ERR syntax error\r\n");
        assert_eq!(a.run(&srv, &["client", "no-touch", "ON"]), "+OK\r\n");
        assert!(a.run(&srv, &["client", "info"]).contains(" flags=T "));
        assert_eq!(a.run(&srv, &["client", "id"]), format!(":{}\r\n", a.sess.id));
        assert_eq!(a.run(&srv, &["client", "nosuch"]), "-ERR unknown subcommand 'nosuch'. Try CLIENT HELP.\r\n");
        assert!(
            a.run(&srv, &["client", "help"])
                .starts_with("*58\r\n+CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n")
        );
    }

    #[test]
    fn reply_modes() {
        let srv = server();
        let mut a = client(&srv, 41006);
        assert_eq!(a.run(&srv, &["client", "reply", "skip"]), "");
        assert_eq!(a.run(&srv, &["ping"]), "");
        assert_eq!(a.run(&srv, &["ping"]), "+PONG\r\n");
        assert_eq!(a.run(&srv, &["client", "reply", "off"]), "");
        assert_eq!(a.run(&srv, &["ping"]), "");
        assert_eq!(a.run(&srv, &["client", "reply", "on"]), "+OK\r\n");
        assert_eq!(a.run(&srv, &["client", "reply", "maybe"]), "-ERR syntax error\r\n");
    }
}
