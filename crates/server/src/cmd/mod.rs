//! Commands implemented by the server crate (connection, server, introspection), with their
//! metadata rows. Data commands live in the engine.

use hotkv_engine::command::{CommandSpec, KeySpec};

use crate::registry::{ServerFn, ServerSpec};

pub mod config;
pub mod conn;

/// Every server command row.
pub fn commands() -> impl Iterator<Item = &'static ServerSpec> {
    conn::COMMANDS.iter().chain(config::COMMANDS.iter())
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

