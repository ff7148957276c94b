//! The hotkv server: configuration, listeners, connections, dispatch and the commands that
//! concern the server rather than the data.
//!
//! Depends on the protocol, engine and TLS crates (and, as their issues land, on the cluster
//! and replication crates); nothing depends on it but the `hotkv` binary.

pub mod acl;
pub mod aof;
pub mod blocking;
pub mod client_evict;
pub mod cluster;
pub mod cmd;
pub mod config;
pub mod connection;
pub mod crash;
pub mod cron;
pub mod dispatch;
pub mod events;
pub mod evict;
pub mod evloop;
pub mod failover;
pub mod freeze;
pub mod hooks;
pub mod io;
pub mod listener;
pub mod log;
pub mod memory;
pub mod migrate;
pub mod multi;
pub mod obuf_limit;
pub mod pause;
pub mod persistence;
pub mod process;
pub mod pubsub;
pub mod query_buffer;
pub mod registry;
pub mod replication;
pub mod reply_buffer;
pub mod routing;
pub mod script;
pub mod server;
pub mod session;
pub mod shutdown;
pub mod slowlog;
pub mod snapshot;
pub mod stats;
pub mod tls;
pub mod tracking;
pub mod watchdog;

use crate::config::Settings;
use crate::registry::Registry;
use crate::server::Server;

/// hotkv's own version.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Runs the server with the process arguments; returns the exit code.
pub fn main() -> i32 {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // Started as `hotkv-check-aof` (or Valkey's and Redis's names for it, through a link):
    // the AOF checker, as redis-server runs its tools by the name it was started under.
    let argv0 = std::env::args().next().unwrap_or_default();
    if aof::check::invoked_as_checker(&argv0) {
        return aof::check::main(&argv0, &args);
    }
    let loaded = match process::load_config(&args) {
        Ok(process::Loaded::Run(l)) => l,
        Ok(process::Loaded::Exit(code)) => return code,
        Err(fatal) => {
            eprintln!("{fatal}");
            return 1;
        }
    };
    let settings = loaded.settings;
    let daemonize = settings.bool(config::table::DAEMONIZE);
    if daemonize && let Err(e) = process::daemonize() {
        eprintln!("Can't daemonize: {e}");
        return 1;
    }
    let level = log::LogLevel::parse(settings.str(config::table::LOGLEVEL));
    let logfile = settings.str(config::table::LOGFILE).to_string();
    if let Err(e) = log::init(level, &logfile, daemonize) {
        eprintln!("Can't open the log file: {e}");
        return 1;
    }
    crash::install(&settings);
    let workers = worker_threads(&settings);
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(workers)
        .thread_name("hotkv-worker")
        // Run every connection that is ready before asking the kernel for more, as an event
        // loop does. With tokio's default (poll for I/O every 61 task polls), 1000 busy
        // connections on one worker overflow its run queue and the overflow waits behind
        // connections woken later: redis-benchmark -c 1000 -P 1 saw p99 52 ms against
        // redis-server's 10-13 ms; with 1024 (one epoll batch), 13 ms. Pipelined cells are
        // unchanged: their queue drains long before 1024 polls.
        .event_interval(1024)
        // Room for a crash report on each runtime thread's signal stack.
        .on_thread_start(crash::alt_stack_for_this_thread)
        .on_thread_stop(crash::release_alt_stack)
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            tracing::warn!("Can't start the runtime: {e}");
            return 1;
        }
    };
    let table = match cluster::load(&settings) {
        Ok(table) => table,
        Err(e) => {
            tracing::warn!("{e}");
            eprintln!("{e}");
            return 1;
        }
    };
    let mut registry = Registry::new(cmd::commands());
    for line in settings.lines(crate::config::table::RENAME_COMMAND) {
        if let [old, new] = line.as_slice()
            && let Err(e) = registry.rename(old, new)
        {
            let e = config::FatalConfigError::Config { reason: format!(">>> 'rename-command {old} \"{new}\"'\n{e}") };
            tracing::warn!("{e}");
            eprintln!("{e}");
            return 1;
        }
    }
    let mut srv = Server::new(settings, loaded.config_file, registry);
    if let Err(e) = acl::file::load_at_startup(&srv) {
        tracing::warn!("{e}");
        eprintln!("{e}");
        return 1;
    }
    if let Some(table) = table {
        let node = cluster::build(&srv.settings.load(), table, &srv.tls, srv.pubsub.clone());
        srv.router = node.router.clone();
        srv.cluster = Some(node);
    }
    let srv = srv.into_arc();
    runtime.block_on(process::serve(srv, loaded.no_effect, loaded.warnings))
}

/// `worker-threads`, with 0 read as one per CPU: the runtime's workers and the event loops.
pub(crate) fn worker_threads(settings: &Settings) -> usize {
    match settings.int(config::table::WORKER_THREADS) {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n as usize,
    }
}

/// The settings a fresh node runs with, for tests and tools.
pub fn default_settings() -> Settings {
    Settings::defaults()
}
