//! ACL and its subcommands (Valkey 8.0's `aclCommand`): users, their rules, the ACL log, the
//! ACL file. The rules themselves live in [`crate::acl`].

use std::sync::Arc;

use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, flags as f};
use hotkv_protocol::{Args, ReplyBuf};

use super::{int_arg, reply_help, row, subcommand_syntax_error};
use crate::acl::{self, UserCell, rules};
use crate::config::table as t;
use crate::registry::{Flow, Lookup, ServerSpec};
use crate::server::Server;
use crate::session::Session;

const BASE: u32 = f::NOSCRIPT | f::LOADING | f::STALE;
const ADMIN: u32 = f::ADMIN | BASE;
const ALL_NODES: &[&str] = &["request_policy:all_nodes", "response_policy:all_succeeded"];

/// ACL and its subcommands.
pub static COMMANDS: &[ServerSpec] = &[CommandSpec::container(
    "acl",
    -2,
    "server",
    "6.0.0",
    "A container for Access List Control commands.",
    &[
        row(
            "cat",
            -2,
            BASE,
            0,
            &[],
            "server",
            "6.0.0",
            "Lists the ACL categories, or the commands inside a category.",
            "O(1) since the categories and commands are a fixed set.",
            cat_cmd,
        ),
        row(
            "deluser",
            -3,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Deletes ACL users, and terminates their connections.",
            "O(1) amortized time considering the typical user.",
            deluser,
        )
        .with_tips(ALL_NODES),
        row(
            "dryrun",
            -4,
            ADMIN,
            0,
            &[],
            "server",
            "7.0.0",
            "Simulates the execution of a command by a user, without executing the command.",
            "O(1).",
            dryrun,
        ),
        row(
            "genpass",
            -2,
            BASE,
            0,
            &[],
            "server",
            "6.0.0",
            "Generates a pseudorandom, secure password that can be used to identify ACL users.",
            "O(1)",
            genpass,
        ),
        row(
            "getuser",
            3,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Lists the ACL rules of a user.",
            "O(N). Where N is the number of password, command and pattern rules that the user has.",
            getuser,
        ),
        row(
            "help",
            2,
            f::LOADING | f::STALE,
            0,
            &[],
            "server",
            "6.0.0",
            "Returns helpful text about the different subcommands.",
            "O(1)",
            help,
        ),
        row(
            "list",
            2,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Dumps the effective rules in ACL file format.",
            "O(N). Where N is the number of configured users.",
            list,
        ),
        row(
            "load",
            2,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Reloads the rules from the configured ACL file.",
            "O(N). Where N is the number of configured users.",
            load,
        ),
        row(
            "log",
            -2,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Lists recent security events generated due to ACL rules.",
            "O(N) with N being the number of entries shown.",
            log,
        ),
        row(
            "save",
            2,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Saves the effective ACL rules in the configured ACL file.",
            "O(N). Where N is the number of configured users.",
            save,
        )
        .with_tips(ALL_NODES),
        row(
            "setuser",
            -3,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Creates and modifies an ACL user and its rules.",
            "O(N). Where N is the number of rules provided.",
            setuser,
        )
        .with_tips(ALL_NODES),
        row(
            "users",
            2,
            ADMIN,
            0,
            &[],
            "server",
            "6.0.0",
            "Lists all ACL users.",
            "O(N). Where N is the number of configured users.",
            users,
        ),
        row(
            "whoami",
            2,
            BASE,
            0,
            &[],
            "server",
            "6.0.0",
            "Returns the authenticated username of the current connection.",
            "O(1)",
            whoami,
        ),
    ],
)];

fn setuser(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let name = args.get(2);
    if rules::has_spaces(name) {
        return Err(CommandError::err("Usernames can't contain spaces or null characters"));
    }
    let name = String::from_utf8_lossy(name).into_owned();
    let ops: Vec<Vec<u8>> = args.iter().skip(3).map(<[u8]>::to_vec).collect();
    let settings = srv.settings.load();
    let before = srv.acl.user(name.as_bytes()).map(|c| c.rules());
    let cell = srv.acl.set_user(&srv.registry, &settings, &name, &ops).map_err(CommandError::err)?;
    if let Some(before) = before {
        kill_lost_subscribers(srv, &before, &cell);
    }
    out.ok();
    Ok(Flow::Continue)
}

fn deluser(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let names: Vec<&[u8]> = args.iter().skip(2).collect();
    if names.iter().any(|n| *n == b"default") {
        return Err(CommandError::err("The 'default' user cannot be removed"));
    }
    let gone = srv.acl.delete_users(&names);
    out.int(gone.len() as i64);
    Ok(disconnect_users(srv, sess, &gone))
}

fn getuser(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let Some(cell) = srv.acl.user(args.get(2)) else {
        out.null();
        return Ok(Flow::Continue);
    };
    let u = cell.rules();
    out.map(6);
    out.bulk(b"flags");
    let flags: Vec<&str> = u.flag_names().collect();
    out.set(flags.len());
    for fl in flags {
        out.bulk(fl.as_bytes());
    }
    out.bulk(b"passwords");
    out.array(u.passwords().len());
    for p in u.passwords() {
        out.bulk(p.as_bytes());
    }
    let (root, others) = u.selectors().split_first().expect("a user always has its root selector");
    describe_selector(out, root);
    out.bulk(b"selectors");
    out.array(others.len());
    for s in others {
        out.map(3);
        describe_selector(out, s);
    }
    Ok(Flow::Continue)
}

fn describe_selector(out: &mut ReplyBuf, s: &rules::Selector) {
    out.bulk(b"commands");
    out.bulk(s.command_rules().as_bytes());
    out.bulk(b"keys");
    out.bulk(s.keys_text().as_bytes());
    out.bulk(b"channels");
    out.bulk(s.channels_text().as_bytes());
}

fn list(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let users = srv.acl.users();
    out.array(users.len());
    for c in users {
        out.bulk(format!("user {} {}", c.name(), c.rules().describe()).as_bytes());
    }
    Ok(Flow::Continue)
}

fn users(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let users = srv.acl.users();
    out.array(users.len());
    for c in users {
        out.bulk(c.name().as_bytes());
    }
    Ok(Flow::Continue)
}

fn whoami(_: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.bulk(sess.user.as_bytes());
    Ok(Flow::Continue)
}

fn aclfile(srv: &Server) -> Result<String, CommandError> {
    let path = srv.settings.load().str(t::ACLFILE).to_string();
    if path.is_empty() {
        return Err(CommandError::err(
            "This instance is not configured to use an ACL file. You may want to specify users via the ACL SETUSER \
             command and then issue a CONFIG REWRITE (assuming you have a configuration file set) in order to store \
             users in the configuration.",
        ));
    }
    Ok(path)
}

fn load(srv: &Server, sess: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let path = aclfile(srv)?;
    let settings = srv.settings.load();
    let env = srv.acl.env(&srv.registry, &settings);
    let users = acl::file::read(&settings, &path, &env).map_err(CommandError::err)?;
    let before: Vec<(Arc<UserCell>, Arc<acl::User>)> =
        srv.acl.users().into_iter().map(|c| (c.clone(), c.rules())).collect();
    let gone = srv.acl.replace_all(users);
    for (cell, old) in &before {
        if !cell.is_deleted() {
            kill_lost_subscribers(srv, old, cell);
        }
    }
    out.ok();
    Ok(disconnect_users(srv, sess, &gone))
}

fn save(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let path = aclfile(srv)?;
    let file = acl::file::resolve(&srv.settings.load(), &path);
    if let Err(e) = acl::file::save(&srv.acl, &file) {
        tracing::warn!("Writing ACL file for ACL SAVE: {e}");
        return Err(CommandError::err(
            "There was an error trying to save the ACLs. Please check the server logs for more information",
        ));
    }
    out.ok();
    Ok(Flow::Continue)
}

fn cat_cmd(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    at_most(&args, 3)?;
    let Some(name) = args.opt(2) else {
        let names = hotkv_engine::command::acl::NAMES;
        out.array(names.len());
        for (_, n) in names {
            out.bulk(n.as_bytes());
        }
        return Ok(Flow::Continue);
    };
    let text = String::from_utf8_lossy(name);
    let Some(bit) = rules::category(&text) else {
        let shown: String = text.chars().take(128).collect();
        return Err(CommandError::err(format!("Unknown category '{shown}'")));
    };
    let names: Vec<&str> =
        srv.registry.all().filter(|c| c.spec.effective_acl() & bit != 0).map(|c| c.full_name.as_str()).collect();
    out.array(names.len());
    for n in names {
        out.bulk(n.as_bytes());
    }
    Ok(Flow::Continue)
}

fn genpass(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    at_most(&args, 3)?;
    const MAX_BITS: i64 = 4096;
    let bits = match args.opt(2) {
        Some(a) => int_arg(a, Some("value is not an integer or out of range"))?,
        None => 256,
    };
    if bits <= 0 || bits > MAX_BITS {
        return Err(CommandError::err(format!(
            "ACL GENPASS argument must be the number of bits for the output password, a positive number up to \
             {MAX_BITS}"
        )));
    }
    let chars = (bits + 3) / 4;
    out.bulk(crate::server::random_hex(chars as usize).as_bytes());
    Ok(Flow::Continue)
}

fn log(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    at_most(&args, 3)?;
    let mut count = 10;
    if let Some(a) = args.opt(2) {
        if a.eq_ignore_ascii_case(b"reset") {
            srv.acl.log.lock().reset();
            out.ok();
            return Ok(Flow::Continue);
        }
        count = int_arg(a, Some("value is not an integer or out of range"))?.max(0);
    }
    let now = crate::server::unix_ms();
    let log = srv.acl.log.lock();
    let n = (count as usize).min(log.len());
    out.array(n);
    for e in log.newest(n) {
        out.map(10);
        out.bulk(b"count");
        out.int(e.count as i64);
        out.bulk(b"reason");
        out.bulk(e.reason.name().as_bytes());
        out.bulk(b"context");
        out.bulk(e.context.name().as_bytes());
        out.bulk(b"object");
        out.bulk(e.object.as_bytes());
        out.bulk(b"username");
        out.bulk(e.username.as_bytes());
        out.bulk(b"age-seconds");
        out.double((now - e.updated_ms) as f64 / 1000.0);
        out.bulk(b"client-info");
        out.bulk(e.client_info.as_bytes());
        out.bulk(b"entry-id");
        out.int(e.entry_id as i64);
        out.bulk(b"timestamp-created");
        out.int(e.created_ms);
        out.bulk(b"timestamp-last-updated");
        out.int(e.updated_ms);
    }
    Ok(Flow::Continue)
}

fn dryrun(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let Some(cell) = srv.acl.user(args.get(2)) else {
        return Err(CommandError::err(format!("User '{}' not found", String::from_utf8_lossy(args.get(2)))));
    };
    let argv: Vec<Vec<u8>> = args.iter().skip(3).map(<[u8]>::to_vec).collect();
    let (flat, spans) = crate::dispatch::flatten(&argv);
    let call = Args::from_parts(&flat, &spans);
    let Lookup::Found(id) = srv.registry.lookup(&call) else {
        return Err(CommandError::err(format!("Command '{}' not found", String::from_utf8_lossy(args.get(3)))));
    };
    let cmd = srv.registry.get(id);
    let arity = cmd.spec.arity();
    let argc = call.len() as i32;
    if (arity > 0 && arity != argc) || argc < -arity {
        return Err(CommandError::err(format!("wrong number of arguments for '{}' command", cmd.full_name)));
    }
    match srv.acl.check_rules(&cell.rules(), cmd, &call) {
        Ok(()) => out.ok(),
        Err(d) => out.bulk(acl::denied_message(cell.name(), cmd, &call, d, true).as_bytes()),
    }
    Ok(Flow::Continue)
}

fn help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    reply_help(
        out,
        &args,
        &[
            "CAT [<category>]",
            "    List all commands that belong to <category>, or all command categories",
            "    when no category is specified.",
            "DELUSER <username> [<username> ...]",
            "    Delete a list of users.",
            "DRYRUN <username> <command> [<arg> ...]",
            "    Returns whether the user can execute the given command without executing the command.",
            "GETUSER <username>",
            "    Get the user's details.",
            "GENPASS [<bits>]",
            "    Generate a secure 256-bit user password. The optional `bits` argument can",
            "    be used to specify a different size.",
            "LIST",
            "    Show users details in config file format.",
            "LOAD",
            "    Reload users from the ACL file.",
            "LOG [<count> | RESET]",
            "    Show the ACL log entries.",
            "SAVE",
            "    Save the current config to the ACL file.",
            "SETUSER <username> <attribute> [<attribute> ...]",
            "    Create or modify a user with the specified attributes.",
            "USERS",
            "    List all the registered usernames.",
            "WHOAMI",
            "    Return the current connection username.",
        ],
    );
    Ok(Flow::Continue)
}

/// CAT, GENPASS and LOG take one optional argument; more is Valkey's subcommand syntax error.
fn at_most(args: &Args<'_>, n: usize) -> Result<(), CommandError> {
    if args.len() > n {
        return Err(subcommand_syntax_error(args));
    }
    Ok(())
}

/// Closes the connections of removed users (Valkey's ACLFreeUserAndKillClients); the calling
/// connection, if it is one of them, closes once its reply is written.
fn disconnect_users(srv: &Server, sess: &mut Session, gone: &[Arc<UserCell>]) -> Flow {
    if gone.is_empty() {
        return Flow::Continue;
    }
    let names: Vec<&str> = gone.iter().map(|c| c.name()).collect();
    for c in srv.clients.snapshot() {
        if c.id != sess.id && names.contains(&c.user.lock().as_str()) {
            c.kill();
        }
    }
    if !names.contains(&sess.user.as_str()) {
        return Flow::Continue;
    }
    sess.acl_user = Some(srv.acl.default_user());
    sess.authenticated = false;
    sess.close_after_reply = true;
    sess.set_flag(crate::session::flag::CLOSE_AFTER_REPLY, true);
    Flow::Close
}

/// A user lost channels: its subscribers to channels it may no longer use are disconnected
/// (Valkey's ACLKillPubsubClientsIfNeeded).
fn kill_lost_subscribers(srv: &Server, before: &acl::User, cell: &UserCell) {
    let after = cell.rules();
    if after.all_channels() {
        return;
    }
    let kept = !before.all_channels() && before.channel_patterns().all(|p| after.channel_patterns().any(|q| q == p));
    if kept {
        return;
    }
    for c in srv.clients.snapshot() {
        if *c.user.lock() != cell.name() {
            continue;
        }
        let subs = srv.pubsub.subscriptions_of(c.id);
        let lost = subs.channels.iter().chain(&subs.shard).any(|ch| !after.channel_allowed(ch, false))
            || subs.patterns.iter().any(|p| !after.channel_allowed(p, true));
        if lost {
            c.kill();
        }
    }
}
