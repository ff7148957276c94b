//! Test harness for hotkv's integration tests: spawns real `hotkv` processes on free loopback
//! ports and talks to them.
//!
//! - [`TestServer`] writes a config into a fresh temp dir, starts the binary, waits until it
//!   answers PING, and stops it (SIGTERM, then SIGKILL) and removes the dir on `Drop`,
//!   printing the server's log when the test is failing (Valkey `dump_server_log`).
//! - [`RawClient`] is a tiny RESP2/RESP3 client that returns [`Frame`]s and can send raw
//!   bytes, for protocol tests that must see exact shapes.
//! - [`tools`] runs `redis-cli`, `redis-benchmark` and redis-py snippets against a server.
//! - [`FaultProxy`] sits between cluster nodes to partition, blackhole or cut their links.
//! - [`wait_for`] replaces sleeps: poll a condition until it holds or a deadline passes.
//!
//! Cargo hands the binary's path (`env!("CARGO_BIN_EXE_hotkv")`) only to the tests of the
//! package that owns the binary, so this crate never guesses it: every entry point takes the
//! path from the caller. Setting `HOTKV_TEST_BIN` runs a suite against another
//! Redis-compatible server (e.g. a reference `valkey-server`) to compare behaviour.
//!
//! Every wait here is bounded: nothing in this crate can hang a test forever.
//!
//! Depends only on std and libc; it must not depend on hotkv's own crates, so it tests the
//! binary from the outside exactly as a user would.

mod client;
pub mod fuzz;
mod ports;
mod process;
mod proxy;
mod resp;
mod server;
pub mod tools;

use std::time::{Duration, Instant};

/// Signal numbers for [`TestServer::signal`] and [`ProcessGuard::signal`], so tests need no
/// libc dependency of their own.
pub use libc::{SIGABRT, SIGALRM, SIGCONT, SIGINT, SIGKILL, SIGSEGV, SIGSTOP, SIGTERM};

pub use client::RawClient;
pub use ports::free_port;
pub use process::{ProcessGuard, raise_fd_limit, signal};
pub use proxy::{Fault, FaultProxy, MAX_LINKS};
/// RESP framing for clients over other transports than [`RawClient`]'s TCP (a unix socket).
pub use resp::{Frame, encode_command, read_frame};
pub use server::{Builder, ConfigFormat, Exited, TestServer};

/// How long a server may take to answer its first PING.
pub const START_TIMEOUT: Duration = Duration::from_secs(10);

/// Default read/write timeout of a [`RawClient`] and the default bound for external tools.
pub const IO_TIMEOUT: Duration = Duration::from_secs(10);

/// Polls `cond` every few milliseconds until it returns true or `timeout` passes; returns
/// whether it held. Use it instead of a sleep whenever a test waits for the server to do
/// something asynchronous (expiry, a closed connection, a log line).
pub fn wait_for(mut cond: impl FnMut() -> bool, timeout: Duration) -> bool {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            // One last look: the condition may have become true during the final pause.
            return cond();
        }
        std::thread::sleep(pause);
        // Back off a little so a long wait does not spin, but stay responsive.
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wait_for_returns_true_once_the_condition_holds() {
        let mut n = 0;
        assert!(wait_for(
            || {
                n += 1;
                n >= 3
            },
            Duration::from_secs(1)
        ));
    }

    #[test]
    fn wait_for_gives_up_after_the_timeout() {
        let start = Instant::now();
        assert!(!wait_for(|| false, Duration::from_millis(50)));
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert!(start.elapsed() < Duration::from_secs(2));
    }
}
