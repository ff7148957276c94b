//! Listening sockets and the accept loop: admission control (maxclients, protected mode)
//! happens here, before a connection task exists.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, TcpKeepalive, Type};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::server::{Server, unix_ms};
use crate::session::ClientInfo;

/// Valkey's reply to a non-loopback client in protected mode.
const DENIED: &str = "-DENIED Running in protected mode because protected mode is enabled and no password is set for the default user. In this mode connections are only accepted from the loopback interface. If you want to connect from external computers, you may adopt one of the following solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the loopback interface by connecting from the same host the server is running, however MAKE SURE it's not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change permanent. 2) Alternatively you can just disable the protected mode by editing the configuration file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started the server manually just for testing, restart it with the '--protected-mode no' option. 4) Set up an authentication password for the default user. NOTE: You only need to do one of the above things in order for the server to start accepting connections from the outside.\r\n";

/// Binds `port` on every address of `bind` (`*` = all IPv4, `::*` = all IPv6, a leading `-`
/// makes an address optional). Errors carry Valkey's log text.
pub fn bind_all(bind: &[String], port: u16, backlog: i32) -> Result<Vec<std::net::TcpListener>, String> {
    let mut out = Vec::new();
    for raw in bind {
        let (optional, addr) = match raw.strip_prefix('-') {
            Some(a) => (true, a),
            None => (false, raw.as_str()),
        };
        let ip: IpAddr = match addr {
            "*" => IpAddr::V4(Ipv4Addr::UNSPECIFIED),
            "::*" => IpAddr::V6(Ipv6Addr::UNSPECIFIED),
            other => match other.parse() {
                Ok(ip) => ip,
                Err(_) => {
                    if optional {
                        continue;
                    }
                    return Err(format!(
                        "Warning: Could not create server TCP listening socket {addr}:{port}: Name or service not known"
                    ));
                }
            },
        };
        match bind_one(SocketAddr::new(ip, port), backlog) {
            Ok(l) => out.push(l),
            Err(e) if optional && is_unavailable(&e) => continue,
            Err(e) => {
                return Err(format!("Warning: Could not create server TCP listening socket {addr}:{port}: bind: {}", os_text(&e)));
            }
        }
    }
    Ok(out)
}

fn bind_one(addr: SocketAddr, backlog: i32) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    if addr.is_ipv6() {
        // Keep IPv6 sockets to IPv6 so `*` and `::*` can both bind the same port.
        socket.set_only_v6(true)?;
    }
    socket.bind(&addr.into())?;
    socket.listen(backlog)?;
    socket.set_nonblocking(true)?;
    Ok(socket.into())
}

fn is_unavailable(e: &std::io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::EADDRNOTAVAIL | libc::EAFNOSUPPORT | libc::EPROTONOSUPPORT))
}

/// The OS error text without Rust's " (os error N)" suffix.
pub fn os_text(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// A running accept loop and the signal that stops it.
pub struct ListenerHandle {
    stop: Arc<Notify>,
    task: JoinHandle<()>,
    /// The address it listens on.
    pub addr: Option<SocketAddr>,
}

/// Starts an accept loop per listener.
pub fn start(srv: &Arc<Server>, listeners: Vec<std::net::TcpListener>) -> std::io::Result<Vec<ListenerHandle>> {
    let mut out = Vec::new();
    for l in listeners {
        let addr = l.local_addr().ok();
        let l = TcpListener::from_std(l)?;
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(accept_loop(srv.clone(), l, stop.clone()));
        out.push(ListenerHandle { stop, task, addr });
    }
    Ok(out)
}

/// Stops accept loops and waits until their sockets are closed, so the port can be bound
/// again at once. Must run on a multi-threaded runtime worker (CONFIG SET does).
pub fn stop_blocking(handles: Vec<ListenerHandle>) {
    for h in &handles {
        h.stop.notify_one();
    }
    let rt = tokio::runtime::Handle::current();
    tokio::task::block_in_place(|| {
        rt.block_on(async {
            for h in handles {
                let _ = h.task.await;
            }
        })
    });
}

/// CONFIG SET port/bind: replaces the plain listeners. The old ones close first (the new
/// set may reuse their addresses); if the new set cannot be bound, the old one is restored
/// and the reason returned.
pub fn rebind(srv: &Arc<Server>, old: (&[String], u16), new: (&[String], u16), backlog: i32) -> Result<(), String> {
    let handles = std::mem::take(&mut *srv.listeners.lock());
    stop_blocking(handles);
    let bind_new = || -> Result<Vec<ListenerHandle>, String> {
        if new.1 == 0 {
            return Ok(Vec::new());
        }
        let ls = bind_all(new.0, new.1, backlog)?;
        if ls.is_empty() {
            return Err("Failed to bind to specified addresses.".to_string());
        }
        start(srv, ls).map_err(|e| os_text(&e))
    };
    match bind_new() {
        Ok(h) => {
            let port = h.first().and_then(|h| h.addr).map_or(new.1, |a| a.port());
            srv.ports.lock().0 = port;
            *srv.listeners.lock() = h;
            Ok(())
        }
        Err(e) => {
            if old.1 != 0
                && let Ok(ls) = bind_all(old.0, old.1, backlog)
                && let Ok(h) = start(srv, ls)
            {
                *srv.listeners.lock() = h;
            }
            Err(e)
        }
    }
}

/// Accepts clients until shutdown or until `stop` is notified.
async fn accept_loop(srv: Arc<Server>, listener: TcpListener, stop: Arc<Notify>) {
    loop {
        let (stream, peer) = tokio::select! {
            _ = stop.notified() => return,
            r = listener.accept() => match r {
                Ok(x) => x,
                Err(e) => {
                    // EMFILE and friends: back off instead of spinning.
                    warn!("Error accepting a client connection: {}", os_text(&e));
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
            _ = srv.shutdown.notified() => return,
        };
        if srv.is_shutting_down() {
            return;
        }
        tokio::spawn(admit(srv.clone(), stream, peer));
    }
}

async fn admit(srv: Arc<Server>, mut stream: TcpStream, peer: SocketAddr) {
    let rt = srv.rt.load_full();
    if srv.clients.len() >= rt.maxclients {
        let _ = stream.write_all(b"-ERR max number of clients reached\r\n").await;
        srv.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        return;
    }
    if rt.protected_mode && rt.requirepass.is_none() && !is_loopback(peer.ip()) {
        let _ = stream.write_all(DENIED.as_bytes()).await;
        srv.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        return;
    }
    let _ = stream.set_nodelay(true);
    if rt.tcp_keepalive > 0 {
        let ka = TcpKeepalive::new().with_time(Duration::from_secs(rt.tcp_keepalive));
        let _ = SockRef::from(&stream).set_tcp_keepalive(&ka);
    }
    srv.stats.connections_received.fetch_add(1, Ordering::Relaxed);
    let laddr = stream.local_addr().unwrap_or(peer);
    let id = srv.clients.next_id();
    let info = Arc::new(ClientInfo::new(id, peer, laddr, stream.as_raw_fd(), unix_ms()));
    debug!("Accepted {peer}");
    crate::connection::serve(srv, stream, info).await;
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}
