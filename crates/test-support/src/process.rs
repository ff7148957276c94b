//! Process-level helpers: signals, liveness, resource limits, and a guard for processes that
//! are not our children (a daemonized server).
//!
//! This is the one module that uses `unsafe`: `kill(2)`, `getrlimit(2)` and `setrlimit(2)`
//! have no safe std wrapper. Each call is a plain syscall on integers or on a local struct.

use std::io;
use std::time::Duration;

use crate::wait_for;

/// Sends `sig` to `pid`.
#[allow(unsafe_code)]
pub fn signal(pid: u32, sig: i32) -> io::Result<()> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::other("pid out of range"))?;
    // SAFETY: kill(2) takes two integers and touches no memory of ours.
    let rc = unsafe { libc::kill(pid, sig) };
    if rc == 0 { Ok(()) } else { Err(io::Error::last_os_error()) }
}

/// Whether a process with this pid exists (and is not a zombie we could reap).
pub(crate) fn alive(pid: u32) -> bool {
    // Signal 0 checks existence; a zombie still "exists", so look at its state too.
    if signal(pid, 0).is_err() {
        return false;
    }
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state letter follows the parenthesised command name.
        Ok(stat) => stat.rsplit_once(')').is_none_or(|(_, rest)| !rest.trim_start().starts_with('Z')),
        Err(_) => false,
    }
}

/// Counts sockets whose local port is `port` in state ESTABLISHED (01) or CLOSE_WAIT (08):
/// connections a server on `port` has accepted and not yet closed.
pub(crate) fn server_side_connections(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let mut cols = line.split_whitespace();
            let (Some(local), Some(_remote), Some(state)) = (cols.nth(1), cols.next(), cols.next()) else {
                continue;
            };
            let local_port = local.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if local_port == Some(port) && matches!(state, "01" | "08") {
                n += 1;
            }
        }
    }
    n
}

/// Raises this process's soft open-files limit to at least `want` (children inherit it).
/// Returns the limit now in force, or why it cannot reach `want` (hard limit too low and no
/// privilege to raise it).
#[allow(unsafe_code)]
pub fn raise_fd_limit(want: u64) -> Result<u64, String> {
    let mut lim = libc::rlimit { rlim_cur: 0, rlim_max: 0 };
    // SAFETY: getrlimit writes into the local struct we pass.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        return Err(format!("getrlimit: {}", io::Error::last_os_error()));
    }
    if lim.rlim_cur >= want {
        return Ok(lim.rlim_cur);
    }
    let new = libc::rlimit { rlim_cur: want, rlim_max: lim.rlim_max.max(want) };
    // SAFETY: setrlimit reads the local struct we pass.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &new) } == 0 {
        return Ok(want);
    }
    let err = io::Error::last_os_error();
    if lim.rlim_max >= want {
        // Raising only the soft limit needs no privilege.
        let soft = libc::rlimit { rlim_cur: want, rlim_max: lim.rlim_max };
        // SAFETY: as above.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &soft) } == 0 {
            return Ok(want);
        }
    }
    Err(format!("open files limit is {} (hard {}) and cannot be raised to {want}: {err}", lim.rlim_cur, lim.rlim_max))
}

/// Kills a process that is not our child (so `Child` cannot own it) when dropped: SIGTERM,
/// then SIGKILL if it is still alive after a grace period. Use it for a daemonized server,
/// whose pid the test reads from its pid file.
#[derive(Debug)]
pub struct ProcessGuard {
    pid: Option<u32>,
}

impl ProcessGuard {
    /// Guards `pid`.
    pub fn new(pid: u32) -> ProcessGuard {
        ProcessGuard { pid: Some(pid) }
    }

    /// The guarded pid.
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    /// Sends a signal (e.g. `libc::SIGTERM`) without giving up the guard.
    pub fn signal(&self, sig: i32) -> io::Result<()> {
        match self.pid {
            Some(pid) => signal(pid, sig),
            None => Ok(()),
        }
    }

    /// Waits up to `timeout` for the process to be gone; true if it is.
    pub fn wait_gone(&self, timeout: Duration) -> bool {
        match self.pid {
            Some(pid) => wait_for(|| !alive(pid), timeout),
            None => true,
        }
    }

    /// Stops guarding: the process is known to be gone or is someone else's business.
    pub fn release(&mut self) {
        self.pid = None;
    }
}

impl Drop for ProcessGuard {
    fn drop(&mut self) {
        let Some(pid) = self.pid.take() else { return };
        terminate(pid, Duration::from_secs(5));
    }
}

/// SIGTERM, wait up to `grace`, then SIGKILL and wait briefly.
pub(crate) fn terminate(pid: u32, grace: Duration) {
    if !alive(pid) {
        return;
    }
    let _ = signal(pid, libc::SIGTERM);
    if wait_for(|| !alive(pid), grace) {
        return;
    }
    let _ = signal(pid, libc::SIGKILL);
    wait_for(|| !alive(pid), Duration::from_secs(5));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fd_limit_at_or_below_current_is_a_no_op() {
        let now = raise_fd_limit(1).unwrap();
        assert!(now >= 1);
    }

    #[test]
    fn counts_accepted_connections_on_a_port() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        assert_eq!(server_side_connections(port), 0);
        let _client = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (accepted, _) = listener.accept().unwrap();
        assert_eq!(server_side_connections(port), 1);
        drop(accepted);
        assert_eq!(server_side_connections(port), 0);
    }

    #[test]
    fn guard_terminates_a_process() {
        let mut child = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let guard = ProcessGuard::new(child.id());
        assert!(alive(child.id()));
        drop(guard);
        // The guard signalled it; reap it so it does not linger as a zombie.
        let status = child.wait().unwrap();
        assert!(!status.success());
    }
}
