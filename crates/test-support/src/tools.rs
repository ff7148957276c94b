//! Running external clients against a test server: `redis-cli`, `redis-benchmark` (Debian
//! `redis-tools`) and redis-py (`pip install redis`). `scripts/test.sh` installs them.
//!
//! Every run is bounded: a tool still running at its deadline is killed and the test fails
//! with whatever it printed so far. A missing tool fails the test with the install hint
//! rather than skipping it, so a machine without the prerequisites cannot pass silently.

use std::io::{Read, Write};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::IO_TIMEOUT;

/// What a finished tool printed.
#[derive(Debug)]
pub struct ToolOutput {
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// Runs `cmd` with `stdin` fed to it, waiting at most `timeout`; panics if it cannot start
/// or overruns (after killing it).
#[track_caller]
pub fn run_bounded(cmd: &mut Command, stdin: Option<&[u8]>, timeout: Duration) -> ToolOutput {
    let what = format!("{cmd:?}");
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap_or_else(|e| panic!("cannot run {what}: {e}"));
    // Feed and drain on threads: a tool blocked writing a full pipe would never exit.
    let feeder = stdin.map(|data| {
        let data = data.to_vec();
        let mut pipe = child.stdin.take().expect("stdin was piped");
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        })
    });
    let out = drain(child.stdout.take().expect("stdout was piped"));
    let err = drain(child.stderr.take().expect("stderr was piped"));
    let deadline = Instant::now() + timeout;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(10)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                let (o, e) = (out.join().unwrap_or_default(), err.join().unwrap_or_default());
                panic!("{what} still running after {timeout:?}; killed\n--- stdout ---\n{o}\n--- stderr ---\n{e}");
            }
            Err(e) => panic!("waiting for {what}: {e}"),
        }
    };
    if let Some(f) = feeder {
        let _ = f.join();
    }
    ToolOutput { status, stdout: out.join().unwrap_or_default(), stderr: err.join().unwrap_or_default() }
}

/// Runs `redis-cli -p <port> <args...>` and returns its stdout. redis-cli exits 0 even when
/// the server replies with an error, so tests assert on the text.
#[track_caller]
pub fn redis_cli(port: u16, args: &[&str]) -> String {
    redis_cli_output(port, args, None).stdout
}

/// Runs `redis-cli -h 127.0.0.1 -p <port> <args...>` with optional stdin; returns everything.
#[track_caller]
pub fn redis_cli_output(port: u16, args: &[&str], stdin: Option<&[u8]>) -> ToolOutput {
    require("redis-cli", &["--version"]);
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args);
    run_bounded(&mut cmd, stdin, IO_TIMEOUT)
}

/// Runs `redis-benchmark -h 127.0.0.1 -p <port> <args...>` for at most `timeout`.
#[track_caller]
pub fn redis_benchmark(port: u16, args: &[&str], timeout: Duration) -> ToolOutput {
    require("redis-benchmark", &["--version"]);
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(args);
    run_bounded(&mut cmd, None, timeout)
}

/// Runs a Python snippet with redis-py importable and returns its stdout; panics with its
/// stderr if it fails. The snippet sees `PORT` (the server's port) and `redis` (the
/// module) already defined.
#[track_caller]
pub fn python(port: u16, code: &str) -> String {
    require("python3", &["-c", "import redis"]);
    let script = format!("import os, sys\nimport redis\nPORT = int(os.environ['HOTKV_PORT'])\n{code}\n");
    let mut cmd = Command::new("python3");
    cmd.arg("-c").arg(script).env("HOTKV_PORT", port.to_string());
    let out = run_bounded(&mut cmd, None, Duration::from_secs(30));
    assert!(
        out.status.success(),
        "python snippet failed ({})\n--- code ---\n{code}\n--- stdout ---\n{}\n--- stderr ---\n{}",
        out.status,
        out.stdout,
        out.stderr
    );
    out.stdout
}

/// Panics with an install hint unless `program probe_args...` runs successfully. Checked
/// once per program per test binary.
#[track_caller]
fn require(program: &'static str, probe: &[&str]) {
    static CLI: OnceLock<bool> = OnceLock::new();
    static BENCH: OnceLock<bool> = OnceLock::new();
    static PY: OnceLock<bool> = OnceLock::new();
    let cell = match program {
        "redis-cli" => &CLI,
        "redis-benchmark" => &BENCH,
        _ => &PY,
    };
    let ok = *cell.get_or_init(|| {
        Command::new(program)
            .args(probe)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    assert!(
        ok,
        "`{program} {}` failed: the test prerequisites are missing; run scripts/test.sh, \
         which installs redis-tools and redis-py",
        probe.join(" ")
    );
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        let _ = pipe.read_to_end(&mut buf);
        String::from_utf8_lossy(&buf).into_owned()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_bounded_collects_output_and_stdin() {
        let out = run_bounded(Command::new("cat").arg("-"), Some(b"hello"), Duration::from_secs(5));
        assert!(out.status.success());
        assert_eq!(out.stdout, "hello");
    }

    #[test]
    #[should_panic(expected = "still running")]
    fn run_bounded_kills_overrunning_tools() {
        run_bounded(Command::new("sleep").arg("30"), None, Duration::from_millis(100));
    }
}
