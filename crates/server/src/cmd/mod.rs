//! Commands implemented by the server crate (connection, server, introspection), with their
//! metadata rows. Data commands live in the engine.

use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, KeySpec};
use hotkv_protocol::{Args, ReplyBuf};

use crate::registry::{ServerFn, ServerSpec};

pub mod acl;
pub mod aof;
pub mod client;
pub(crate) mod client_tracking;
pub mod cluster;
pub mod command;
pub mod config;
pub mod conn;
pub mod debug;
mod debug_value;
pub mod info;
pub mod memory;
pub mod multi;
pub mod pubsub;
pub mod repl;
pub mod scripting;
pub mod server;
pub mod slowlog;

#[cfg(test)]
pub(crate) mod testutil;

/// Every server command row.
pub fn commands() -> impl Iterator<Item = &'static ServerSpec> {
    conn::COMMANDS
        .iter()
        .chain(info::COMMANDS.iter())
        .chain(client::COMMANDS.iter())
        .chain(command::COMMANDS.iter())
        .chain(config::COMMANDS.iter())
        .chain(memory::COMMANDS.iter())
        .chain(multi::COMMANDS.iter())
        .chain(pubsub::COMMANDS.iter())
        .chain(server::COMMANDS.iter())
        .chain(aof::COMMANDS.iter())
        .chain(repl::COMMANDS.iter())
        .chain(slowlog::COMMANDS.iter())
        .chain(debug::COMMANDS.iter())
        .chain(cluster::COMMANDS.iter())
        .chain(scripting::COMMANDS.iter())
        .chain(acl::COMMANDS.iter())
}

/// A server command row.
#[allow(clippy::too_many_arguments)]
pub(crate) const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    acl: u32,
    keys: &'static [KeySpec],
    group: &'static str,
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: ServerFn,
) -> ServerSpec {
    CommandSpec::new(name, arity, flags, acl, keys, group, since, summary, complexity, run)
}

/// Valkey's `addReplyHelp`: a header naming the command, the given lines, and the HELP
/// footer, all as status replies.
pub(crate) fn reply_help(out: &mut ReplyBuf, args: &Args<'_>, lines: &[&str]) {
    let cmd = String::from_utf8_lossy(args.get(0)).to_ascii_uppercase();
    out.array(lines.len() + 3);
    out.simple(&format!("{cmd} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"));
    for l in lines {
        out.simple(l);
    }
    out.simple("HELP");
    out.simple("    Print this help.");
}

/// Valkey's `addReplySubcommandSyntaxError`, for a subcommand called with arguments its
/// handler does not accept.
pub(crate) fn subcommand_syntax_error(args: &Args<'_>) -> CommandError {
    let sub = String::from_utf8_lossy(args.opt(1).unwrap_or_default());
    let sub: String = sub.chars().take(128).collect();
    let cmd = String::from_utf8_lossy(args.get(0)).to_ascii_uppercase();
    CommandError::err(format!("unknown subcommand or wrong number of arguments for '{sub}'. Try {cmd} HELP."))
}

/// Parses a signed integer argument; `msg` replaces Valkey's default error text, as
/// `getLongLongFromObjectOrReply` does.
pub(crate) fn int_arg(arg: &[u8], msg: Option<&'static str>) -> Result<i64, CommandError> {
    hotkv_protocol::parse_i64(arg).ok_or_else(|| match msg {
        Some(m) => CommandError::err(m),
        None => CommandError::NotInteger,
    })
}

/// An argument as text, for error messages and names.
pub(crate) fn text(arg: &[u8]) -> String {
    String::from_utf8_lossy(arg).into_owned()
}
