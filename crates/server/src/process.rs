//! Process lifecycle: configuration loading, daemonizing, the startup log, listeners, the
//! pid file, signals and graceful shutdown.

use std::path::PathBuf;
use std::sync::Arc;

use tracing::{info, warn};

use crate::config::Settings;
use crate::config::table::{self, TABLE};
use crate::config::value;
use crate::listener;
use crate::server::{Server, bool_of, int_of, str_of};

/// What the command line asks for.
pub enum Loaded {
    /// Run a server with these settings and this configuration file.
    Run(Settings, Option<PathBuf>),
    /// Exit at once with this code (`--version`, `--help`).
    Exit(i32),
}

/// Reads `hotkv [config-file] [--directive value ...]`.
pub fn load_config(args: &[String]) -> Result<Loaded, String> {
    let mut settings = Settings::defaults();
    let mut rest = args;
    let mut file = None;
    if let Some(first) = rest.first() {
        match first.as_str() {
            "-v" | "--version" => {
                println!("hotkv server v={} redis-compatible={}", crate::VERSION, crate::cmd::conn::REDIS_VERSION);
                return Ok(Loaded::Exit(0));
            }
            "-h" | "--help" => {
                println!("Usage: hotkv [/path/to/hotkv.conf|hotkv.toml] [--directive value ...]");
                return Ok(Loaded::Exit(0));
            }
            f if !f.starts_with("--") => {
                let text = std::fs::read_to_string(f).map_err(|e| {
                    format!("Fatal error, can't open config file '{f}': {}", listener::os_text(&e))
                })?;
                apply_conf_text(&mut settings, &text)?;
                file = Some(PathBuf::from(f));
                rest = &rest[1..];
            }
            _ => {}
        }
    }
    let mut i = 0;
    while i < rest.len() {
        let Some(name) = rest[i].strip_prefix("--") else {
            return Err(fatal(&rest[i], "Bad directive or wrong number of arguments"));
        };
        let mut vals = Vec::new();
        i += 1;
        while i < rest.len() && !rest[i].starts_with("--") {
            vals.push(rest[i].clone());
            i += 1;
        }
        set_directive(&mut settings, name, &vals).map_err(|e| fatal(&format!("{name} {}", vals.join(" ")), &e))?;
    }
    Ok(Loaded::Run(settings, file))
}

fn apply_conf_text(settings: &mut Settings, text: &str) -> Result<(), String> {
    for (n, line) in text.lines().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let words: Vec<String> = hotkv_protocol::split_args(trimmed.as_bytes())
            .map_err(|e| fatal_at(n + 1, line, &e.to_string()))?
            .into_iter()
            .map(|w| String::from_utf8_lossy(&w).into_owned())
            .collect();
        let Some((name, vals)) = words.split_first() else { continue };
        set_directive(settings, name, vals).map_err(|e| fatal_at(n + 1, line, &e))?;
    }
    Ok(())
}

fn set_directive(settings: &mut Settings, name: &str, vals: &[String]) -> Result<(), String> {
    let id = table::find(name).ok_or_else(|| "Bad directive or wrong number of arguments".to_string())?;
    let d = &TABLE[id];
    let vals: Vec<String> = if matches!(d.ty, value::Ty::List) { vals.to_vec() } else { vec![vals.join(" ")] };
    let v = value::parse(d.ty, &vals)?;
    settings.set(id, v);
    Ok(())
}

fn fatal(line: &str, reason: &str) -> String {
    format!("\n*** FATAL CONFIG FILE ERROR (Version {}) ***\nReading the configuration file, at line 2\n>>> '{line}'\n{reason}", crate::VERSION)
}

fn fatal_at(n: usize, line: &str, reason: &str) -> String {
    format!("\n*** FATAL CONFIG FILE ERROR (Version {}) ***\nReading the configuration file, at line {n}\n>>> '{}'\n{reason}", crate::VERSION, line.trim())
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
pub async fn serve(srv: Arc<Server>) -> i32 {
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
    let no_effect: Vec<&str> = TABLE
        .iter()
        .enumerate()
        .filter(|(id, d)| d.flags & table::NO_EFFECT != 0 && settings.display(*id) != d.default)
        .map(|(_, d)| d.name)
        .collect();
    if !no_effect.is_empty() {
        warn!("These directives are accepted but have no effect in this version: {}", no_effect.join(", "));
    }
    let port = int_of(&settings, "port", 6379) as u16;
    let backlog = int_of(&settings, "tcp-backlog", 511) as i32;
    let bind = settings.list(table::BIND).to_vec();
    let listeners = if port == 0 {
        Vec::new()
    } else {
        match listener::bind_all(&bind, port, backlog) {
            Ok(l) if !l.is_empty() => l,
            Ok(_) => {
                warn!("Failed listening on port {port} (tcp), aborting.");
                return 1;
            }
            Err(e) => {
                warn!("{e}");
                warn!("Failed listening on port {port} (tcp), aborting.");
                return 1;
            }
        }
    };
    let bound_port = listeners.first().and_then(|l| l.local_addr().ok()).map_or(port, |a| a.port());
    srv.ports.lock().0 = bound_port;
    info!("Running mode=standalone, port={bound_port}, PID: {pid}.");
    let pidfile = pidfile_path(&settings, port);
    if let Some(p) = &pidfile
        && let Err(e) = std::fs::write(p, format!("{pid}\n"))
    {
        warn!("Failed to write PID file: {}", listener::os_text(&e));
    }
    srv.memory.refresh();
    info!("Server initialized");
    let cron = crate::cron::spawn(srv.clone());
    for l in listeners {
        match tokio::net::TcpListener::from_std(l) {
            Ok(l) => {
                tokio::spawn(listener::accept_loop(srv.clone(), l));
            }
            Err(e) => {
                warn!("Failed listening on port {port} (tcp), aborting: {e}");
                return 1;
            }
        }
    }
    info!("Ready to accept connections tcp");
    wait_for_shutdown(&srv).await;
    info!("User requested shutdown...");
    srv.request_shutdown();
    if let Some(p) = &pidfile {
        info!("Removing the pid file.");
        let _ = std::fs::remove_file(p);
    }
    let _ = cron.join();
    info!("hotkv is now ready to exit, bye bye...");
    0
}

fn pidfile_path(settings: &Settings, port: u16) -> Option<PathBuf> {
    let p = str_of(settings, "pidfile", "");
    if !p.is_empty() {
        return Some(PathBuf::from(p));
    }
    // Valkey writes a default pid file only when daemonized.
    bool_of(settings, "daemonize", false).then(|| PathBuf::from(format!("/var/run/hotkv_{port}.pid")))
}

async fn wait_for_shutdown(srv: &Server) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (signal(SignalKind::terminate()), signal(SignalKind::interrupt())) else {
        srv.shutdown.notified().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => warn!("Received SIGTERM scheduling shutdown..."),
        _ = int.recv() => warn!("Received SIGINT scheduling shutdown..."),
        _ = srv.shutdown.notified() => {}
    }
}
