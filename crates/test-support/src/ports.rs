//! Free loopback ports for test servers.
//!
//! The OS picks a free port (bind port 0, then release it); we also require `port + 10000`,
//! the future cluster bus port, to be free (Valkey's `find_available_port` checks both).
//! Between release and the server's bind another process may take the port; the spawner
//! retries once with a new port when that happens. Within this process, ports handed out
//! are remembered so two tests starting at the same moment never get the same one.

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

/// Offset of the cluster bus port from the client port, as in Redis Cluster.
pub(crate) const BUS_OFFSET: u16 = 10000;

/// Ports already handed to a server of this process; never handed out twice.
static TAKEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Returns a client port whose bus port is free too; panics after many failed attempts.
pub(crate) fn free_port_pair() -> u16 {
    for _ in 0..200 {
        let Some(port) = os_free_port() else { continue };
        // The bus port must exist: ports above 55535 have no room for +10000.
        let Some(bus) = port.checked_add(BUS_OFFSET) else { continue };
        if !is_free(bus) {
            continue;
        }
        let mut taken = TAKEN.lock().unwrap_or_else(|p| p.into_inner());
        if taken.contains(&port) || taken.contains(&bus) {
            continue;
        }
        taken.insert(port);
        taken.insert(bus);
        return port;
    }
    panic!("no free loopback port pair (port, port+10000) after 200 attempts");
}

/// A free loopback port for a second listener of a test server (a TLS port), never handed
/// out twice in this process.
pub fn free_port() -> u16 {
    free_port_pair()
}

fn os_free_port() -> Option<u16> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).ok()?;
    Some(l.local_addr().ok()?.port())
}

fn is_free(port: u16) -> bool {
    TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_distinct_and_bindable() {
        let a = free_port_pair();
        let b = free_port_pair();
        assert_ne!(a, b);
        assert!(a <= u16::MAX - BUS_OFFSET);
        assert!(is_free(a) && is_free(a + BUS_OFFSET));
    }
}
