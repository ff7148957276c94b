//! [`TestServer`]: one real server process per test, in its own temp dir, on its own ports.

use std::fmt::Write as _;
use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::client::RawClient;
use crate::ports::{BUS_OFFSET, free_port_pair};
use crate::process::{self, terminate};
use crate::resp::Frame;
use crate::{START_TIMEOUT, wait_for};

/// The line a server logs once its listeners accept clients (hotkv and Valkey alike).
const READY_LINE: &str = "Ready to accept connections";

/// How long a stopping server gets between SIGTERM and SIGKILL.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Where the server's configuration comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigFormat {
    /// A generated `hotkv.conf` in the temp dir, passed as the first argument (the default).
    Conf,
    /// No file: every directive as a `--name value` flag.
    Flags,
}

/// Writes a custom config file for a given port and temp dir.
type FileFn = Box<dyn Fn(u16, &Path) -> String>;

/// Configures and starts a [`TestServer`]. Made by [`TestServer::builder`].
pub struct Builder {
    bin: PathBuf,
    config: Vec<(String, String)>,
    format: ConfigFormat,
    custom_file: Option<(String, FileFn)>,
    args: Vec<String>,
    env: Vec<(String, String)>,
    start_timeout: Duration,
    port_hint: Option<u16>,
    no_ping: bool,
}

impl Builder {
    fn new(bin: impl AsRef<Path>) -> Builder {
        // HOTKV_TEST_BIN runs the suite against another server (e.g. a reference
        // valkey-server) to check that a test's expectations match the original.
        let bin = std::env::var_os("HOTKV_TEST_BIN").map_or_else(|| bin.as_ref().to_path_buf(), PathBuf::from);
        Builder {
            bin,
            config: Vec::new(),
            format: ConfigFormat::Conf,
            custom_file: None,
            args: Vec::new(),
            env: Vec::new(),
            start_timeout: START_TIMEOUT,
            port_hint: None,
            no_ping: false,
        }
    }

    /// Adds a directive, e.g. `config("maxmemory", "1mb")`. In the `.conf` format the line is
    /// written as `name value` verbatim (quote the value yourself if it needs quotes); as
    /// flags, the value is split on whitespace into separate arguments.
    pub fn config(mut self, name: &str, value: &str) -> Builder {
        self.config.push((name.to_string(), value.to_string()));
        self
    }

    /// Adds several directives.
    pub fn configs(mut self, pairs: &[(&str, &str)]) -> Builder {
        for (k, v) in pairs {
            self = self.config(k, v);
        }
        self
    }

    /// Chooses where the configuration goes (default: a `.conf` file).
    pub fn format(mut self, format: ConfigFormat) -> Builder {
        self.format = format;
        self
    }

    /// Replaces the generated config with a file named `name` in the temp dir whose text
    /// `contents(port, dir)` returns; it must set the port itself. Directives added with
    /// [`Builder::config`] are then passed as `--name value` flags after the file. Use it for
    /// `.toml` files and hand-written `.conf` files.
    pub fn config_file(mut self, name: &str, contents: impl Fn(u16, &Path) -> String + 'static) -> Builder {
        self.custom_file = Some((name.to_string(), Box::new(contents)));
        self
    }

    /// Appends a command-line argument after the config file and flags.
    pub fn arg(mut self, arg: &str) -> Builder {
        self.args.push(arg.to_string());
        self
    }

    /// Appends several command-line arguments.
    pub fn args(mut self, args: &[&str]) -> Builder {
        self.args.extend(args.iter().map(|a| a.to_string()));
        self
    }

    /// Sets an environment variable for the server process.
    pub fn env(mut self, key: &str, value: &str) -> Builder {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// How long to wait for the first PING answer (default [`START_TIMEOUT`]).
    pub fn start_timeout(mut self, timeout: Duration) -> Builder {
        self.start_timeout = timeout;
        self
    }

    /// Counts the server as started once it logs its ready line, without a PING on the plain
    /// port: for servers that serve TLS only (`port 0`). The log must go to stdout.
    pub fn ready_without_ping(mut self) -> Builder {
        self.no_ping = true;
        self
    }

    /// Tries `port` on the first attempt instead of a free one. Meant for testing the harness
    /// itself: if `port` is taken, the spawn retries once on a free port, as it does when
    /// another process grabs a port between picking and binding.
    pub fn port_hint(mut self, port: u16) -> Builder {
        self.port_hint = Some(port);
        self
    }

    /// Starts the server and waits until it answers PING; panics with the server's output if
    /// it exits or does not answer in time. If it fails to bind because another process took
    /// the port meanwhile, it retries once on a new port.
    #[track_caller]
    pub fn spawn(self) -> TestServer {
        let dir = TempDir::new();
        let mut last_failure = String::new();
        for attempt in 0..2 {
            let port = match (attempt, self.port_hint) {
                (0, Some(hint)) => hint,
                _ => free_port_pair(),
            };
            let (mut child, log) = self.start(&dir, port);
            match self.wait_ready(&mut child, port, log.as_deref()) {
                Ok(()) => {
                    // Tests count clients (INFO clients, CLIENT LIST): let the server notice
                    // that the readiness probes hung up before handing it over.
                    if !self.no_ping {
                        wait_for(|| crate::process::server_side_connections(port) == 0, Duration::from_secs(2));
                    }
                    return TestServer { child: Some(child), port, dir, log, exit: None };
                }
                Err(failure) => {
                    kill_child(&mut child);
                    let report = output_report(&dir, log.as_deref());
                    let retry = attempt == 0 && port_was_taken(&report);
                    last_failure = format!("{failure}\n{report}");
                    if !retry {
                        break;
                    }
                }
            }
        }
        panic!("test server did not start: {last_failure}");
    }

    /// Runs the server with this configuration without waiting for it to serve, and returns
    /// how it exited once it does. For startup errors (exit code 1 and a message on stderr)
    /// and for `daemonize yes`, whose foreground process exits at once. Kills the process
    /// and panics if it is still running after `timeout`.
    #[track_caller]
    pub fn run_to_exit(self, timeout: Duration) -> Exited {
        let dir = TempDir::new();
        let port = free_port_pair();
        let (mut child, _) = self.start(&dir, port);
        let deadline = Instant::now() + timeout;
        let status = loop {
            match child.try_wait() {
                Ok(Some(status)) => break status,
                Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
                Ok(None) => {
                    kill_child(&mut child);
                    panic!("server still running after {timeout:?}\n{}", output_report(&dir, None));
                }
                Err(e) => panic!("waiting for the server: {e}"),
            }
        };
        let stdout = fs::read_to_string(dir.path().join("stdout.log")).unwrap_or_default();
        let stderr = fs::read_to_string(dir.path().join("stderr.log")).unwrap_or_default();
        Exited { status, stdout, stderr, port, dir }
    }

    /// Writes the config for `port` and starts the process; returns it and its log file
    /// when known (None when a custom file may send the log anywhere).
    fn start(&self, dir: &TempDir, port: u16) -> (Child, Option<PathBuf>) {
        let d = dir.path();
        let mut argv: Vec<String> = Vec::new();
        let mut log = Some(d.join("stdout.log"));
        if let Some((name, contents)) = &self.custom_file {
            let path = d.join(name);
            write_file(&path, &contents(port, d));
            argv.push(path.display().to_string());
            argv.extend(flags(&self.config));
            log = None;
        } else {
            let mut all = vec![
                ("port".to_string(), port.to_string()),
                // Loopback only; `-` makes ::1 optional where IPv6 is off.
                ("bind".to_string(), "127.0.0.1 -::1".to_string()),
                ("dir".to_string(), d.display().to_string()),
                // As Valkey's test config: a full sync starts at once instead of waiting five
                // seconds for more replicas (tests that exercise the wait set it themselves).
                ("repl-diskless-sync-delay".to_string(), "0".to_string()),
            ];
            all.extend(self.config.iter().cloned());
            match self.format {
                ConfigFormat::Conf => {
                    let path = d.join("hotkv.conf");
                    let mut text = String::new();
                    for (k, v) in &all {
                        let _ = writeln!(text, "{k} {v}");
                    }
                    write_file(&path, &text);
                    argv.push(path.display().to_string());
                }
                ConfigFormat::Flags => argv.extend(flags(&all)),
            }
            for (k, v) in &self.config {
                if k.eq_ignore_ascii_case("logfile") {
                    let v = v.trim_matches('"');
                    log = (!v.is_empty()).then(|| d.join(v));
                }
                // Below notice level the ready line is not logged: rely on PING alone.
                if k.eq_ignore_ascii_case("loglevel") && matches!(v.as_str(), "warning" | "nothing") {
                    log = None;
                }
            }
        }
        argv.extend(self.args.iter().cloned());
        let out = File::create(d.join("stdout.log")).expect("create stdout.log in the test dir");
        let err = File::create(d.join("stderr.log")).expect("create stderr.log in the test dir");
        let mut cmd = Command::new(&self.bin);
        cmd.args(&argv).current_dir(d).stdin(Stdio::null()).stdout(out).stderr(err);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {}: {e}", self.bin.display()));
        (child, log)
    }

    /// Waits until the child answers PING (and has logged its ready line, when we know where
    /// its log goes: a PING answered by some other process that owns the port does not count).
    fn wait_ready(&self, child: &mut Child, port: u16, log: Option<&Path>) -> Result<(), String> {
        let deadline = Instant::now() + self.start_timeout;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                return Err(format!("server exited during startup with {status}"));
            }
            let logged = log.is_none_or(|p| fs::read_to_string(p).is_ok_and(|t| t.contains(READY_LINE)));
            // `start` truncated the log file, so a ready line in it is this process's.
            if logged && (if self.no_ping { log.is_some() } else { answers_ping(port) }) {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(format!("no PING answer on port {port} within {:?}", self.start_timeout));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// A running server process owned by one test. Dropping it stops the process (SIGTERM, then
/// SIGKILL after a grace period) and removes its temp dir; if the test is failing, the
/// server's output is printed first.
pub struct TestServer {
    child: Option<Child>,
    port: u16,
    dir: TempDir,
    log: Option<PathBuf>,
    exit: Option<ExitStatus>,
}

impl TestServer {
    /// Starts `bin` (pass `env!("CARGO_BIN_EXE_hotkv")`) with these directives on top of the
    /// harness's own (port, loopback bind, dir).
    #[track_caller]
    pub fn spawn(bin: impl AsRef<Path>, overrides: &[(&str, &str)]) -> TestServer {
        Builder::new(bin).configs(overrides).spawn()
    }

    /// A builder for anything beyond a list of directives.
    pub fn builder(bin: impl AsRef<Path>) -> Builder {
        Builder::new(bin)
    }

    /// The client port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The port reserved for the cluster bus (client port + 10000).
    pub fn bus_port(&self) -> u16 {
        self.port + BUS_OFFSET
    }

    /// `redis://127.0.0.1:<port>/`, for the `redis` crate and redis-py.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// The server's temp dir (its `dir`, config file and output files).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().map_or(0, Child::id)
    }

    /// A new raw client connection.
    #[track_caller]
    pub fn client(&self) -> RawClient {
        RawClient::connect(self.port)
    }

    /// Sends one command on a fresh connection and returns the reply.
    #[track_caller]
    pub fn cmd<A: AsRef<[u8]>>(&self, args: &[A]) -> Frame {
        self.client().cmd(args)
    }

    /// The server log so far (its log file if known, else its stdout).
    pub fn log(&self) -> String {
        let path = self.log.clone().unwrap_or_else(|| self.dir().join("stdout.log"));
        fs::read_to_string(path).unwrap_or_default()
    }

    /// What the process wrote to stderr so far.
    pub fn stderr(&self) -> String {
        fs::read_to_string(self.dir().join("stderr.log")).unwrap_or_default()
    }

    /// Client connections the server side still holds open (TCP states ESTABLISHED or
    /// CLOSE_WAIT on the server port), read from `/proc/net/tcp{,6}`: independent of any
    /// server command, so protocol tests can check that a connection was really closed.
    pub fn open_connections(&self) -> usize {
        process::server_side_connections(self.port)
    }

    /// Waits up to `timeout` for `needle` to appear in the log; true if it did.
    pub fn wait_for_log(&self, needle: &str, timeout: Duration) -> bool {
        wait_for(|| self.log().contains(needle), timeout)
    }

    /// Sends a signal (e.g. `libc::SIGTERM`) to the process. `SIGSTOP` returns once every
    /// thread has stopped: `kill` returns before that (each thread stops when it next handles
    /// its signals), and on a loaded machine a replica went on to apply and acknowledge a
    /// write sent after the signal.
    pub fn signal(&self, sig: i32) {
        if let Err(e) = process::signal(self.pid(), sig) {
            panic!("cannot signal server pid {}: {e}", self.pid());
        }
        if sig == libc::SIGSTOP {
            let stopped = wait_for(|| all_threads_stopped(self.pid()), Duration::from_secs(10));
            assert!(stopped, "server pid {} did not stop", self.pid());
        }
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        self.poll_exit().is_none()
    }

    /// Waits up to `timeout` for the process to exit by itself (after SHUTDOWN or a signal);
    /// returns its status, or None if it is still running.
    pub fn wait_exit(&mut self, timeout: Duration) -> Option<ExitStatus> {
        wait_for(|| self.poll_exit().is_some(), timeout);
        self.poll_exit()
    }

    /// Stops the process now (SIGTERM, then SIGKILL after a grace period) and returns how it
    /// exited.
    pub fn stop(&mut self) -> ExitStatus {
        if let Some(status) = self.poll_exit() {
            return status;
        }
        self.signal(libc::SIGTERM);
        if let Some(status) = self.wait_exit(STOP_GRACE) {
            return status;
        }
        if let Some(child) = self.child.as_mut() {
            kill_child(child);
        }
        self.poll_exit().expect("a SIGKILLed child has exited")
    }

    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exit.is_none()
            && let Some(child) = self.child.as_mut()
            && let Ok(Some(status)) = child.try_wait()
        {
            self.exit = Some(status);
        }
        self.exit
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        let failing = std::thread::panicking();
        if self.poll_exit().is_none() {
            if let Some(child) = self.child.as_ref() {
                terminate(child.id(), STOP_GRACE);
            }
            if let Some(child) = self.child.as_mut() {
                kill_child(child);
            }
        }
        if failing {
            eprintln!(
                "==== hotkv test server on port {} ({}) ====\n{}",
                self.port,
                self.exit.map_or_else(|| "stopped by the harness".to_string(), |s| s.to_string()),
                output_report(&self.dir, self.log.as_deref())
            );
        }
    }
}

/// How a server run with [`Builder::run_to_exit`] ended. Owns the temp dir (removed on drop)
/// so a daemonized server's pid file and log stay readable.
pub struct Exited {
    /// The exit status.
    pub status: ExitStatus,
    /// Everything written to stdout.
    pub stdout: String,
    /// Everything written to stderr.
    pub stderr: String,
    /// The port the harness configured.
    pub port: u16,
    dir: TempDir,
}

impl Exited {
    /// The exit code (None if killed by a signal).
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// The temp dir the server ran in.
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Exited {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "==== hotkv test server run ({}) ====\n--- stdout ---\n{}\n--- stderr ---\n{}",
                self.status, self.stdout, self.stderr
            );
        }
    }
}

/// A directory under the system temp dir, unique to one server, removed on drop unless
/// `HOTKV_TEST_KEEP` is set (to inspect a failure).
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.subsec_nanos());
        for _ in 0..100 {
            let n = SEQ.fetch_add(1, Ordering::Relaxed);
            let p = std::env::temp_dir().join(format!("hotkv-test-{}-{n}-{nanos}", std::process::id()));
            // create_dir (not _all) fails if it exists, so the dir is ours alone.
            if fs::create_dir(&p).is_ok() {
                return TempDir(p);
            }
        }
        panic!("cannot create a temp dir under {}", std::env::temp_dir().display());
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        if std::env::var_os("HOTKV_TEST_KEEP").is_some() {
            eprintln!("keeping test dir {}", self.0.display());
            return;
        }
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn flags(pairs: &[(String, String)]) -> Vec<String> {
    let mut out = Vec::new();
    for (k, v) in pairs {
        out.push(format!("--{k}"));
        out.extend(v.split_whitespace().map(str::to_string));
    }
    out
}

fn write_file(path: &Path, text: &str) {
    fs::write(path, text).unwrap_or_else(|e| panic!("cannot write {}: {e}", path.display()));
}

/// A short probe: connect, PING, accept any well-formed reply (`-NOAUTH` proves the server
/// is up as well as `+PONG` does).
fn answers_ping(port: u16) -> bool {
    let Ok(mut c) = RawClient::try_connect(port) else { return false };
    c.set_timeout(Duration::from_secs(1));
    c.try_cmd(&["PING"]).is_ok()
}

fn kill_child(child: &mut Child) {
    let _ = child.kill();
    let _ = child.wait();
}

/// Startup failed because the port was taken between picking and binding.
fn port_was_taken(report: &str) -> bool {
    report.contains("Address already in use") || report.contains("Could not create server TCP listening socket")
}

/// The server's stdout, stderr and log file, each cut to its last lines.
fn output_report(dir: &TempDir, log: Option<&Path>) -> String {
    let mut out = String::new();
    let mut files = vec![dir.path().join("stdout.log"), dir.path().join("stderr.log")];
    if let Some(l) = log
        && !files.iter().any(|f| f == l)
    {
        files.push(l.to_path_buf());
    }
    for f in files {
        let text = fs::read_to_string(&f).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = &lines[lines.len().saturating_sub(200)..];
        let _ = writeln!(out, "--- {} ({} lines, last {}) ---", f.display(), lines.len(), tail.len());
        for l in tail {
            let _ = writeln!(out, "{l}");
        }
    }
    out
}

/// Whether every thread of `pid` is stopped (`T` in its stat line, or gone).
fn all_threads_stopped(pid: u32) -> bool {
    let Ok(tasks) = fs::read_dir(format!("/proc/{pid}/task")) else { return true };
    tasks.filter_map(Result::ok).all(|t| {
        let stat = fs::read_to_string(t.path().join("stat")).unwrap_or_default();
        // The state follows the command name, which is in parentheses and may hold spaces.
        stat.rsplit_once(") ").and_then(|(_, rest)| rest.chars().next()).is_none_or(|c| c == 'T' || c == 't')
    })
}
