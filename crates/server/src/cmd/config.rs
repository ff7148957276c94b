//! CONFIG GET / SET / RESETSTAT / REWRITE / HELP.

use std::sync::Arc;

use hotkv_engine::CommandError;
use hotkv_engine::command::{CommandSpec, acl, flags as f};
use hotkv_protocol::{Args, ReplyBuf};
use tracing::{info, warn};

use super::row;
use crate::config::runtime::{self, SetError};
use crate::config::table::{self, Hook};
use crate::config::value::Value;
use crate::hooks;
use crate::registry::{Flow, ServerSpec};
use crate::server::Server;
use crate::session::Session;

const ADMIN_FLAGS: u32 = f::ADMIN | f::NOSCRIPT | f::LOADING | f::STALE;

/// CONFIG and its subcommands.
pub static COMMANDS: &[ServerSpec] = &[CommandSpec::container(
    "config",
    -2,
    "server",
    "2.0.0",
    "A container for server configuration commands.",
    SUBCOMMANDS,
)];

static SUBCOMMANDS: &[ServerSpec] = &[
    row(
        "get",
        -3,
        ADMIN_FLAGS,
        0,
        &[],
        "server",
        "2.0.0",
        "Returns the effective values of configuration parameters.",
        "O(N) when N is the number of configuration parameters provided",
        get,
    ),
    row(
        "set",
        -4,
        ADMIN_FLAGS,
        0,
        &[],
        "server",
        "2.0.0",
        "Sets configuration parameters in-flight.",
        "O(N) when N is the number of configuration parameters provided",
        set,
    )
    .with_tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    row("resetstat", 2, ADMIN_FLAGS, 0, &[], "server", "2.0.0", "Resets the server's statistics.", "O(1)", resetstat)
        .with_tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    row(
        "rewrite",
        2,
        ADMIN_FLAGS,
        0,
        &[],
        "server",
        "2.8.0",
        "Persists the effective configuration to file.",
        "O(1)",
        rewrite,
    )
    .with_tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
    row(
        "help",
        2,
        f::LOADING | f::STALE,
        acl::SLOW,
        &[],
        "server",
        "5.0.0",
        "Returns helpful text about the different subcommands.",
        "O(1)",
        help,
    ),
];

fn get(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let patterns: Vec<&[u8]> = args.iter().skip(2).collect();
    let pairs = runtime::get(&srv.settings.load(), &patterns);
    out.map(pairs.len());
    for (k, v) in pairs {
        out.bulk(k.as_bytes());
        out.bulk(v.as_bytes());
    }
    Ok(Flow::Continue)
}

fn set(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if !args.len().is_multiple_of(2) {
        return Err(CommandError::WrongArity("config|set".into()));
    }
    let pairs: Vec<(&[u8], &[u8])> = (2..args.len()).step_by(2).map(|i| (args.get(i), args.get(i + 1))).collect();
    // Refused first, as Valkey gives the loading error precedence (a client may wait and retry).
    if srv.repl.loading() || srv.repl.async_loading() || srv.persist.loading() {
        use crate::config::table::{DENY_LOADING, TABLE, find};
        let denied =
            |name: &[u8]| std::str::from_utf8(name).ok().and_then(find).is_some_and(|d| TABLE[d].has(DENY_LOADING));
        if pairs.iter().any(|(name, _)| denied(name)) {
            return Err(CommandError::raw("LOADING Valkey is loading the dataset in memory"));
        }
    }
    // Serialise CONFIG SETs so a concurrent one cannot interleave its hooks with ours.
    let _guard = srv.config_lock.lock();
    let _exec = crate::aof::wire::ExecMark::new(sess.in_exec);
    let old = srv.settings.load_full();
    let local = sess.info.addr.is_local();
    let outcome = runtime::set_as(&old, &pairs, local).map_err(set_error)?;
    srv.install_settings(outcome.settings.clone());
    for run in &outcome.hooks {
        if let Err(failure) = hooks::apply(srv, run.hook, &old, &outcome.settings) {
            // Put everything back, including what earlier hooks changed. A failing hook has
            // changed nothing itself (each one undoes its own partial work).
            srv.install_settings(Settings::clone(&old));
            for undo in outcome.hooks.iter().take_while(|h| h.hook != run.hook) {
                let _ = hooks::apply(srv, undo.hook, &outcome.settings, &old);
            }
            return Err(match failure {
                hooks::HookError::Reason(reason) => set_error(SetError::hook_failed(run.name, &reason)),
                hooks::HookError::Reply(reply) => CommandError::raw(reply),
            });
        }
    }
    let maxmemory = outcome.hooks.iter().any(|run| run.hook == Hook::Maxmemory);
    let clients = outcome.hooks.iter().any(|run| matches!(run.hook, Hook::Maxmemory | Hook::Clients));
    // The settings before and the copy the hooks ran with are not the dataset's memory: they
    // go before the eviction measures what to free (26 KB of them made a limit set 40 KB
    // below the memory in use evict 66 KB of keys).
    drop(outcome);
    drop(old);
    // Only now that nothing can be rolled back: a lower maxmemory evicts before the reply.
    if maxmemory {
        if sess.in_exec {
            // EXEC holds its keys' slot locks, which a pass run here would wait on from this
            // very thread for ever: the eviction runs beside it and proceeds once EXEC is over,
            // as Valkey's eviction timer runs after the command.
            crate::evict::limit_changed_after_exec(srv);
        } else {
            crate::evict::limit_changed(srv);
        }
    }
    if clients {
        crate::client_evict::limit_changed(srv);
    }
    out.ok();
    Ok(Flow::Continue)
}

use crate::config::Settings;

fn set_error(e: SetError) -> CommandError {
    CommandError::raw(e.to_string())
}

fn resetstat(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    srv.stats.reset();
    srv.reply_buffers.shrinks.store(0, std::sync::atomic::Ordering::Relaxed);
    srv.reply_buffers.expands.store(0, std::sync::atomic::Ordering::Relaxed);
    srv.pubsub.limit_disconnections.store(0, std::sync::atomic::Ordering::Relaxed);
    srv.memory.reset_peak();
    // Counters kept beside the command path's: Valkey's resetServerStats clears them too
    // (a test that resets, restarts its primary and expects one partial sync depends on it).
    srv.repl.primary.reset_sync_counts();
    srv.persist.reset_stats();
    srv.aof.reset_stats();
    srv.scripts.reset_stats();
    srv.ks.reset_snapshot_stats();
    out.ok();
    Ok(Flow::Continue)
}

fn rewrite(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let Some(path) = &srv.config_file else {
        return Err(CommandError::err("The server is running without a config file"));
    };
    let mut settings: Arc<Settings> = srv.settings.load_full();
    // Valkey's rewriteConfigUserOption: without an aclfile the users live in this file, so
    // it gets them as they are now (ACL SETUSER and DELUSER included), not as loaded.
    if settings.str(table::ACLFILE).is_empty() {
        let users = srv.acl.users().iter().map(|c| user_line(c.name(), &c.rules().describe())).collect();
        Arc::make_mut(&mut settings).set(table::USER, Value::Lines(users));
    }
    match runtime::rewrite(&settings, path) {
        Ok(()) => {
            info!("CONFIG REWRITE executed with success.");
            out.ok();
            Ok(Flow::Continue)
        }
        Err(e) => {
            let reason = crate::config::os_reason(&e);
            warn!("CONFIG REWRITE failed: {reason}");
            Err(CommandError::err(format!("Rewriting config file: {reason}")))
        }
    }
}

/// A `user` directive's arguments: the name, then the rules as ACL LIST words them, one
/// argument per word (a selector's words are joined again when the file is read).
fn user_line(name: &str, rules: &str) -> Vec<String> {
    std::iter::once(name.to_string()).chain(rules.split(' ').filter(|w| !w.is_empty()).map(str::to_string)).collect()
}

fn help(_: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    const LINES: &[&str] = &[
        "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        "GET <pattern>",
        "    Return parameters matching the glob-like <pattern> and their values.",
        "SET <directive> <value>",
        "    Set the configuration <directive> to <value>.",
        "RESETSTAT",
        "    Reset statistics reported by the INFO command.",
        "REWRITE",
        "    Rewrite the configuration file.",
        "HELP",
        "    Print this help.",
    ];
    out.array(LINES.len());
    for l in LINES {
        out.simple(l);
    }
    Ok(Flow::Continue)
}
