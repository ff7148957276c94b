//! Process lifecycle: configuration loading, daemonizing, the startup log, listeners, the
//! pid file, signals and graceful shutdown.

use std::path::PathBuf;
use std::sync::Arc;

use tracing::{info, warn};

use crate::config::cli::{self, Invocation};
use crate::config::table;
use crate::config::{LoadedConfig, Settings};
use crate::listener;
use crate::server::Server;

/// What the command line asks for.
pub enum Loaded {
    /// Run a server with this configuration.
    Run(LoadedConfig),
    /// Exit at once with this code (`--version`, `--help`).
    Exit(i32),
}

/// Reads `hotkv [config-file] [--directive value ...]`; the error is the text to print on
/// stderr before exiting with status 1.
pub fn load_config(args: &[String]) -> Result<Loaded, String> {
    match cli::parse_args(args, &mut std::io::stdin()) {
        Ok(Invocation::Serve(loaded)) => Ok(Loaded::Run(loaded)),
        Ok(Invocation::Version) => {
            println!("{}", cli::version_text());
            Ok(Loaded::Exit(0))
        }
        Ok(Invocation::Help) => {
            eprintln!("{}", cli::usage_text());
            Ok(Loaded::Exit(1))
        }
        Ok(Invocation::CheckTls(loaded)) => {
            let name = loaded.config_file.as_ref().map_or_else(String::new, |p| p.display().to_string());
            Ok(Loaded::Exit(crate::tls::check_main(&loaded.settings, &name)))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// Detaches from the terminal: fork, setsid, stdio to /dev/null. Must run before any thread
/// starts (the runtime is built afterwards).
pub fn daemonize() -> std::io::Result<()> {
    #[allow(unsafe_code)]
    // SAFETY: called while the process is single-threaded (before the runtime and the log
    // writer exist), so fork duplicates no lock held by another thread.
    unsafe {
        match libc::fork() {
            -1 => return Err(std::io::Error::last_os_error()),
            0 => {}
            _ => libc::_exit(0),
        }
        if libc::setsid() == -1 {
            return Err(std::io::Error::last_os_error());
        }
        let fd = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
        if fd != -1 {
            libc::dup2(fd, libc::STDIN_FILENO);
            libc::dup2(fd, libc::STDOUT_FILENO);
            libc::dup2(fd, libc::STDERR_FILENO);
            if fd > libc::STDERR_FILENO {
                libc::close(fd);
            }
        }
    }
    Ok(())
}

/// Logs the banner, binds, writes the pid file, serves until shutdown; returns the exit code.
pub async fn serve(srv: Arc<Server>, no_effect: Vec<&'static str>, warnings: Vec<String>) -> i32 {
    let settings = srv.settings.load_full();
    let pid = std::process::id();
    info!("oO0OoO0OoO0Oo hotkv is starting oO0OoO0OoO0Oo");
    info!(
        "hotkv version={}, redis_version={}, bits=64, pid={pid}, just started",
        crate::VERSION,
        crate::cmd::conn::REDIS_VERSION
    );
    match &srv.config_file {
        Some(_) => info!("Configuration loaded"),
        None => warn!(
            "Warning: no config file specified, using the default config. In order to specify a config file use hotkv /path/to/hotkv.conf"
        ),
    }
    for w in &warnings {
        warn!("{w}");
    }
    if !no_effect.is_empty() {
        warn!("These directives are accepted but have no effect in this version: {}", no_effect.join(", "));
    }
    let port = settings.int(table::PORT) as u16;
    let tls_port = settings.int(table::TLS_PORT) as u16;
    let backlog = settings.int(table::TCP_BACKLOG) as i32;
    let bind = settings.list(table::BIND).to_vec();
    let unixsocket = settings.str(table::UNIXSOCKET).to_string();
    if port == 0 && tls_port == 0 && unixsocket.is_empty() {
        warn!("Configured to not listen anywhere, exiting.");
        return 1;
    }
    // Reading and checking the files blocks, which is fine here: this runs on the main thread
    // before anything is served.
    if crate::tls::init(&srv.tls, &settings).is_err() {
        // The reason and the file are in the log line the TLS crate wrote.
        return 1;
    }
    // Right after the TLS material is in, as the reference doc lists the startup lines.
    if srv.cluster.is_some() && settings.bool(table::TLS_CLUSTER) {
        info!("TLS on the cluster bus, other nodes verified against the CA");
    }
    if settings.bool(table::TLS_REPLICATION) {
        info!("TLS on replication links, other nodes verified against the CA");
    }
    let listeners = match bind_port(&bind, port, backlog, "tcp") {
        Some(l) => l,
        None => return 1,
    };
    let tls_listeners = match bind_port(&bind, tls_port, backlog, "tls") {
        Some(l) => l,
        None => return 1,
    };
    // After the TCP ports, so a port already in use leaves no socket file behind.
    let unix_listener = match bind_unix(&settings, &unixsocket, backlog) {
        Some(l) => l,
        None => return 1,
    };
    let bound =
        |ls: &[std::net::TcpListener], p: u16| ls.first().and_then(|l| l.local_addr().ok()).map_or(p, |a| a.port());
    let (bound_port, bound_tls) = (bound(&listeners, port), bound(&tls_listeners, tls_port));
    *srv.ports.lock() = (bound_port, bound_tls);
    if tls_port != 0 {
        info!("TLS enabled on {}:{bound_tls}", crate::tls::binds_text(&bind));
    }
    if let Err(e) = crate::cluster::start(&srv, &settings) {
        warn!("{e}");
        return 1;
    }
    let mode = if srv.cluster.is_some() { "cluster" } else { "standalone" };
    info!("Running mode={mode}, port={}, PID: {pid}.", if bound_port != 0 { bound_port } else { bound_tls });
    let pidfile = pidfile_path(&settings, if port != 0 { port } else { tls_port });
    if let Some(p) = &pidfile
        && let Err(e) = std::fs::write(p, format!("{pid}\n"))
    {
        warn!("Failed to write PID file: {}", listener::os_text(&e));
    }
    // Valkey 8.0 listens before loading and answers -LOADING meanwhile; replication and the
    // cron start once the dataset is in (a primary then carries on the file's replication
    // history).
    // Loading from the first accepted client on: the load itself sets its own flag only
    // once it has found what to load, and the AOF opens after it.
    srv.persist.set_starting(true);
    for (ls, tls, p) in [(listeners, false, port), (tls_listeners, true, tls_port)] {
        match listener::start(&srv, ls, tls) {
            Ok(h) => srv.listeners.lock().extend(h),
            Err(e) => {
                warn!("Failed listening on port {p} ({}), aborting: {e}", if tls { "tls" } else { "tcp" });
                return 1;
            }
        }
    }
    if let Some(l) = unix_listener {
        match listener::start_unix(&srv, l, &unixsocket) {
            Ok(h) => srv.listeners.lock().push(h),
            Err(e) => {
                warn!("Failed opening Unix socket: {e}");
                return 1;
            }
        }
    }
    info!("Server initialized");
    let loader = srv.clone();
    let loaded = tokio::task::spawn_blocking(move || crate::aof::wire::load_at_start(&loader)).await;
    srv.persist.set_starting(false);
    if !matches!(loaded, Ok(Ok(()))) {
        listener::stop_blocking(std::mem::take(&mut *srv.listeners.lock()));
        return 1;
    }
    crate::replication::start(&srv);
    let startup = srv.memory.refresh();
    srv.startup_memory.store(startup, std::sync::atomic::Ordering::Relaxed);
    let cron = crate::cron::spawn(srv.clone());
    let tls_task = tokio::spawn(srv.tls.clone().run_background());
    // One line per listener kind, in Valkey's order of connection types.
    if port != 0 {
        info!("Ready to accept connections tcp");
    }
    if !unixsocket.is_empty() {
        info!("Ready to accept connections unix");
    }
    if tls_port != 0 {
        info!("Ready to accept connections tls");
    }
    let mut signals = Signals::new();
    loop {
        match wait_for_shutdown(&srv, &mut signals).await {
            // A shutdown finished its wait and its save (crate::shutdown), or nothing asked.
            Trigger::Command => break,
            Trigger::Signal(sigint) => on_signal(&srv, sigint),
        }
    }
    srv.request_shutdown();
    if let Some(p) = &pidfile {
        info!("Removing the pid file.");
        let _ = std::fs::remove_file(p);
    }
    listener::stop_blocking(std::mem::take(&mut *srv.listeners.lock()));
    if !unixsocket.is_empty() {
        info!("Removing the unix socket file.");
        if let Err(e) = std::fs::remove_file(&unixsocket) {
            warn!("Error removing the unix socket file: {}", listener::os_text(&e));
        }
    }
    tls_task.abort();
    let _ = cron.join();
    // No client writes any more: what the AOF holds is final.
    crate::aof::wire::shutdown(&srv);
    if let Some(node) = &srv.cluster {
        node.bus.flush();
    }
    info!("hotkv is now ready to exit, bye bye...");
    0
}

/// Binds `port` on every bind address, or logs Valkey's lines and returns `None`; port 0 binds
/// nothing.
fn bind_port(bind: &[String], port: u16, backlog: i32, kind: &str) -> Option<Vec<std::net::TcpListener>> {
    if port == 0 {
        return Some(Vec::new());
    }
    match listener::bind_all(bind, port, backlog) {
        Ok(l) if !l.is_empty() => Some(l),
        Ok(_) => {
            warn!("Failed listening on port {port} ({kind}), aborting.");
            None
        }
        Err(e) => {
            warn!("{e}");
            warn!("Failed listening on port {port} ({kind}), aborting.");
            None
        }
    }
}

/// Opens the `unixsocket` socket (None inside when it is not configured), or logs Valkey's
/// line and returns `None`.
fn bind_unix(settings: &Settings, path: &str, backlog: i32) -> Option<Option<std::os::unix::net::UnixListener>> {
    if path.is_empty() {
        return Some(None);
    }
    let perm = settings.int(table::UNIXSOCKETPERM) as u32;
    match listener::bind_unix(path, perm, settings.str(table::UNIXSOCKETGROUP), backlog) {
        Ok(l) => Some(Some(l)),
        Err(e) => {
            warn!("Failed opening Unix socket: {e}");
            None
        }
    }
}

fn pidfile_path(settings: &Settings, port: u16) -> Option<PathBuf> {
    let p = settings.str(table::PIDFILE);
    if !p.is_empty() {
        return Some(PathBuf::from(p));
    }
    // Valkey writes a default pid file only when daemonized.
    settings.bool(table::DAEMONIZE).then(|| PathBuf::from(format!("/var/run/hotkv_{port}.pid")))
}

/// What ended the wait for shutdown.
enum Trigger {
    /// A shutdown is done with its wait and save, or something else asked to stop.
    Command,
    /// SIGINT (`true`) or SIGTERM (`false`).
    Signal(bool),
}

/// The SIGTERM and SIGINT streams, made once so that no signal falls between two waits.
struct Signals {
    term: Option<tokio::signal::unix::Signal>,
    int: Option<tokio::signal::unix::Signal>,
}

impl Signals {
    fn new() -> Signals {
        use tokio::signal::unix::{SignalKind, signal};
        Signals { term: signal(SignalKind::terminate()).ok(), int: signal(SignalKind::interrupt()).ok() }
    }
}

async fn wait_for_shutdown(srv: &Server, signals: &mut Signals) -> Trigger {
    async fn next(s: &mut Option<tokio::signal::unix::Signal>) {
        match s {
            Some(s) => {
                s.recv().await;
            }
            None => std::future::pending().await,
        }
    }
    tokio::select! {
        _ = next(&mut signals.term) => Trigger::Signal(false),
        _ = next(&mut signals.int) => Trigger::Signal(true),
        _ = srv.shutdown.notified() => Trigger::Command,
    }
}

/// SIGTERM or SIGINT: a shutdown with the `shutdown-on-sigterm` / `-sigint` flags, whose task
/// asks the process to stop once it is done (Valkey's `shutdown_asap`). A second SIGINT while
/// one is in progress exits at once, as Valkey's "You insist".
fn on_signal(srv: &Arc<Server>, sigint: bool) {
    if sigint && srv.shutdown_wait.in_progress() {
        warn!("You insist... exiting now.");
        std::process::exit(1);
    }
    let name = if sigint { "SIGINT" } else { "SIGTERM" };
    warn!("Received {name} scheduling shutdown...");
    let settings = srv.settings.load();
    let flags = settings.str(if sigint { table::SHUTDOWN_ON_SIGINT } else { table::SHUTDOWN_ON_SIGTERM });
    // The shutdown runs on its own task; a failure leaves the server running.
    drop(crate::shutdown::request(srv, crate::shutdown::Opts::from_config(flags), None));
}
