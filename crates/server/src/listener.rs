//! Listening sockets and the accept loop: admission control (maxclients, protected mode)
//! happens here, before a connection task exists.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use socket2::{Domain, SockRef, Socket, TcpKeepalive, Type};
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
                return Err(format!(
                    "Warning: Could not create server TCP listening socket {addr}:{port}: bind: {}",
                    os_text(&e)
                ));
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
    /// Whether it is a TLS port.
    pub tls: bool,
}

/// Starts an accept loop per listener; `tls` makes them TLS ports.
pub fn start(
    srv: &Arc<Server>,
    listeners: Vec<std::net::TcpListener>,
    tls: bool,
) -> std::io::Result<Vec<ListenerHandle>> {
    let mut out = Vec::new();
    for l in listeners {
        let addr = l.local_addr().ok();
        let l = TcpListener::from_std(l)?;
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(accept_loop(srv.clone(), l, stop.clone(), tls));
        out.push(ListenerHandle { stop, task, addr, tls });
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

/// CONFIG SET port/tls-port/bind: replaces the plain (`tls` false) or TLS listeners. The old
/// ones close first (the new set may reuse their addresses); if the new set cannot be bound,
/// the old one is restored and the reason returned.
pub fn rebind(
    srv: &Arc<Server>,
    tls: bool,
    old: (&[String], u16),
    new: (&[String], u16),
    backlog: i32,
) -> Result<(), String> {
    let handles: Vec<ListenerHandle> = {
        let mut all = srv.listeners.lock();
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut *all).into_iter().partition(|h| h.tls == tls);
        *all = others;
        mine
    };
    stop_blocking(handles);
    let bind_new = || -> Result<Vec<ListenerHandle>, String> {
        if new.1 == 0 {
            return Ok(Vec::new());
        }
        let ls = bind_all(new.0, new.1, backlog)?;
        if ls.is_empty() {
            return Err("Failed to bind to specified addresses.".to_string());
        }
        start(srv, ls, tls).map_err(|e| os_text(&e))
    };
    let set_port = |port: u16| {
        let mut ports = srv.ports.lock();
        if tls { ports.1 = port } else { ports.0 = port }
    };
    match bind_new() {
        Ok(h) => {
            set_port(h.first().and_then(|h| h.addr).map_or(new.1, |a| a.port()));
            srv.listeners.lock().extend(h);
            Ok(())
        }
        Err(e) => {
            if old.1 != 0
                && let Ok(ls) = bind_all(old.0, old.1, backlog)
                && let Ok(h) = start(srv, ls, tls)
            {
                srv.listeners.lock().extend(h);
            }
            Err(e)
        }
    }
}

/// Accepts clients until shutdown or until `stop` is notified.
async fn accept_loop(srv: Arc<Server>, listener: TcpListener, stop: Arc<Notify>, tls: bool) {
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
        tokio::spawn(admit(srv.clone(), stream, peer, tls));
    }
}

async fn admit(srv: Arc<Server>, stream: TcpStream, peer: SocketAddr, tls: bool) {
    let rt = srv.rt.load_full();
    // A TLS connection gets the configuration in force now, with the client-certificate
    // policy in force now: a reload or CONFIG SET affects only later connections.
    let session = if tls {
        match srv.tls.accept(rt.tls_auth) {
            Some(s) => Some(s),
            None => {
                debug!("TLS connection from {peer} closed: no TLS configuration is loaded");
                return;
            }
        }
    } else {
        None
    };
    let refusal = if srv.clients.len() >= rt.maxclients {
        Some("-ERR max number of clients reached\r\n")
    } else if rt.protected_mode && rt.requirepass.is_none() && !is_loopback(peer.ip()) {
        Some(DENIED)
    } else {
        None
    };
    let _ = stream.set_nodelay(true);
    let id = srv.clients.next_id();
    if let Some(msg) = refusal {
        srv.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        refuse(stream, session, id, msg).await;
        return;
    }
    if rt.tcp_keepalive > 0 {
        let ka = TcpKeepalive::new().with_time(Duration::from_secs(rt.tcp_keepalive));
        let _ = SockRef::from(&stream).set_tcp_keepalive(&ka);
    }
    srv.stats.connections_received.fetch_add(1, Ordering::Relaxed);
    let laddr = stream.local_addr().unwrap_or(peer);
    let info = Arc::new(ClientInfo::new(id, peer, laddr, stream.as_raw_fd(), unix_ms()));
    debug!("Accepted {peer}");
    crate::connection::serve(srv, stream, info, session).await;
}

/// Tells a refused client why and closes. A TLS client can only read the reason once its
/// handshake is done, so that waits for its first request (a few seconds at most).
async fn refuse(stream: TcpStream, tls: Option<hotkv_tls::TlsSession>, id: u64, msg: &str) {
    let Ok(mut sock) = crate::io::Socket::new(stream, tls, id) else { return };
    if sock.is_tls() {
        let mut buf = bytes::BytesMut::with_capacity(1024);
        let first = tokio::time::timeout(Duration::from_secs(5), sock.read_into(&mut buf)).await;
        if !matches!(first, Ok(Ok(n)) if n > 0) {
            sock.shutdown();
            return;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), sock.write_all(msg.as_bytes())).await;
    sock.shutdown();
}

fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}
