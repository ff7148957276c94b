//! Listening sockets and the accept loop: admission control (maxclients, protected mode)
//! happens here, before a connection task exists. Clients come in over TCP (`port`), TLS
//! (`tls-port`) and the unix socket (`unixsocket`); past admission all three are served by
//! the same connection task.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use socket2::{Domain, SockAddr, SockRef, Socket, TcpKeepalive, Type};
use tokio::net::{TcpListener, TcpStream, UnixListener, UnixStream};
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tracing::{debug, warn};

use crate::server::{Server, unix_ms};
use crate::session::{ClientAddr, ClientInfo, flag, is_loopback};

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

/// What a listener serves, in Valkey's connection-type names (`Ready to accept connections
/// tcp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenerKind {
    /// Plain-text TCP (`port`).
    Tcp,
    /// TLS (`tls-port`).
    Tls,
    /// The unix socket (`unixsocket`), plain text only, as in Valkey.
    Unix,
}

/// A running accept loop and the signal that stops it.
pub struct ListenerHandle {
    stop: Arc<Notify>,
    task: JoinHandle<()>,
    /// The address it listens on (None for the unix socket).
    pub addr: Option<SocketAddr>,
    /// What it serves.
    pub kind: ListenerKind,
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
        let listener = TcpListener::from_std(l)?;
        let stop = Arc::new(Notify::new());
        let task = tokio::spawn(accept_loop(srv.clone(), Listening::Tcp { listener, tls }, stop.clone()));
        let kind = if tls { ListenerKind::Tls } else { ListenerKind::Tcp };
        out.push(ListenerHandle { stop, task, addr, kind });
    }
    Ok(out)
}

/// Opens the unix socket at `path` as Valkey's `anetUnixServer` does: a stale socket file is
/// unlinked first (whatever is at the path, as Valkey does), `perm` (non-zero) is applied with
/// chmod and `group` (a name, or failing that a number) with chown, keeping the owner. The
/// error is Valkey's text, logged after `Failed opening Unix socket: `.
pub fn bind_unix(path: &str, perm: u32, group: &str, backlog: i32) -> Result<std::os::unix::net::UnixListener, String> {
    // sun_path holds 108 bytes with its terminating NUL.
    const SUN_PATH: usize = 108;
    if path.len() > SUN_PATH - 1 {
        return Err(format!("unix socket path too long ({}), must be under {SUN_PATH}", path.len()));
    }
    // What was there may be a socket left by a server that did not shut down cleanly.
    let _ = std::fs::remove_file(path);
    let socket = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(|e| format!("socket: {}", os_text(&e)))?;
    let addr = SockAddr::unix(path).map_err(|e| format!("bind: {}", os_text(&e)))?;
    socket.bind(&addr).map_err(|e| format!("bind: {}", os_text(&e)))?;
    if perm != 0 {
        use std::os::unix::fs::PermissionsExt;
        // Valkey ignores a failed chmod too: the socket is usable, only more or less open.
        let _ = std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm));
    }
    if !group.is_empty() {
        let gid = group_id(group).map_err(|e| format!("getgrnam error for group '{group}': {e}"))?;
        std::os::unix::fs::chown(path, None, Some(gid))
            .map_err(|e| format!("chown error for group '{group}': {}", os_text(&e)))?;
    }
    socket.listen(backlog).map_err(|e| format!("listen: {}", os_text(&e)))?;
    socket.set_nonblocking(true).map_err(|e| format!("listen: {}", os_text(&e)))?;
    Ok(socket.into())
}

/// Starts the accept loop of the unix socket; its clients show `addr=<path>:0`.
pub fn start_unix(
    srv: &Arc<Server>,
    listener: std::os::unix::net::UnixListener,
    path: &str,
) -> std::io::Result<ListenerHandle> {
    let listener = UnixListener::from_std(listener)?;
    let stop = Arc::new(Notify::new());
    let path: Arc<str> = path.into();
    let task = tokio::spawn(accept_loop(srv.clone(), Listening::Unix { listener, path }, stop.clone()));
    Ok(ListenerHandle { stop, task, addr: None, kind: ListenerKind::Unix })
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
        let kind = if tls { ListenerKind::Tls } else { ListenerKind::Tcp };
        let (mine, others): (Vec<_>, Vec<_>) = std::mem::take(&mut *all).into_iter().partition(|h| h.kind == kind);
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

/// A listening socket and what its clients are.
enum Listening {
    Tcp { listener: TcpListener, tls: bool },
    Unix { listener: UnixListener, path: Arc<str> },
}

/// A connection just accepted, with what its listener says about it.
enum Incoming {
    Tcp { stream: TcpStream, peer: SocketAddr, tls: bool },
    Unix { stream: UnixStream, path: Arc<str> },
}

impl Listening {
    async fn accept(&self) -> std::io::Result<Incoming> {
        Ok(match self {
            Listening::Tcp { listener, tls } => {
                let (stream, peer) = listener.accept().await?;
                Incoming::Tcp { stream, peer, tls: *tls }
            }
            Listening::Unix { listener, path } => {
                let (stream, _) = listener.accept().await?;
                Incoming::Unix { stream, path: path.clone() }
            }
        })
    }
}

/// Accepts clients until shutdown or until `stop` is notified.
async fn accept_loop(srv: Arc<Server>, listening: Listening, stop: Arc<Notify>) {
    loop {
        let incoming = tokio::select! {
            _ = stop.notified() => return,
            r = listening.accept() => match r {
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
        match incoming {
            Incoming::Tcp { stream, peer, tls } => tokio::spawn(admit(srv.clone(), stream, peer, tls)),
            Incoming::Unix { stream, path } => tokio::spawn(admit_unix(srv.clone(), stream, path)),
        };
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
    } else if rt.protected_mode && srv.acl.default_user().rules().nopass() && !is_loopback(peer.ip()) {
        Some(DENIED)
    } else {
        None
    };
    let _ = stream.set_nodelay(true);
    let id = srv.clients.next_id();
    if let Some(msg) = refusal {
        srv.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        if let Ok(sock) = crate::io::Socket::tcp(stream) {
            refuse(sock, session, id, msg).await;
        }
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
    let Ok(sock) = crate::io::Socket::tcp(stream) else { return };
    crate::connection::serve(srv, sock, info, session).await;
}

/// Admits a client of the unix socket: always local (protected mode lets it in, as Valkey's
/// `connIsLocal` says of every unix connection), never TLS, subject to `maxclients`.
async fn admit_unix(srv: Arc<Server>, stream: UnixStream, path: Arc<str>) {
    let id = srv.clients.next_id();
    let Ok(sock) = crate::io::Socket::unix(stream) else { return };
    if srv.clients.len() >= srv.rt.load().maxclients {
        srv.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
        refuse(sock, None, id, "-ERR max number of clients reached\r\n").await;
        return;
    }
    srv.stats.connections_received.fetch_add(1, Ordering::Relaxed);
    debug!("Accepted connection to {path}");
    let addr = ClientAddr::Unix(path);
    let info = ClientInfo::new(id, addr.clone(), addr, sock.as_raw_fd(), unix_ms());
    info.flags.fetch_or(flag::UNIX_SOCKET, Ordering::Relaxed);
    crate::connection::serve(srv, sock, Arc::new(info), None).await;
}

/// Tells a refused client why and closes. A TLS client can only read the reason once its
/// handshake is done, so that waits for its first request (a few seconds at most).
async fn refuse(stream: Socket, tls: Option<hotkv_tls::TlsSession>, id: u64, msg: &str) {
    let Ok(mut sock) = crate::io::Socket::new(stream, tls, id) else { return };
    if sock.is_tls() {
        let mut buf = bytes::BytesMut::new();
        let first = tokio::time::timeout(Duration::from_secs(5), sock.read_into(&mut buf, 1024)).await;
        if !matches!(first, Ok(Ok(n)) if n > 0) {
            sock.shutdown();
            return;
        }
    }
    let _ = tokio::time::timeout(Duration::from_secs(5), sock.write_all(msg.as_bytes())).await;
    sock.shutdown();
}

/// The id of a group given by name or, when no group has that name, by number (Valkey takes
/// names only; a number is what `chown :1000` accepts too).
fn group_id(group: &str) -> Result<u32, String> {
    let name = std::ffi::CString::new(group).map_err(|_| "invalid group name".to_string())?;
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    loop {
        #[allow(unsafe_code)]
        // SAFETY: every pointer is valid for the call: `grp` and `found` are locals, `buf` is
        // a live buffer of the length passed, and `name` a NUL-terminated string; the result
        // is read only through `found`, which getgrnam_r points at `grp` or sets to null.
        let (rc, gid) = unsafe {
            let mut grp: libc::group = std::mem::zeroed();
            let mut found: *mut libc::group = std::ptr::null_mut();
            let rc = libc::getgrnam_r(name.as_ptr(), &mut grp, buf.as_mut_ptr(), buf.len(), &mut found);
            (rc, (!found.is_null()).then(|| (*found).gr_gid))
        };
        if rc == libc::ERANGE && buf.len() < 1 << 20 {
            buf.resize(buf.len() * 4, 0);
            continue;
        }
        if let Some(gid) = gid {
            return Ok(gid);
        }
        if let Ok(gid) = group.parse::<u32>() {
            return Ok(gid);
        }
        return Err(match rc {
            0 => "no such group".to_string(),
            e => os_text(&std::io::Error::from_raw_os_error(e)),
        });
    }
}
