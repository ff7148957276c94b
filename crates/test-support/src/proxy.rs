//! A fault-injecting TCP proxy, to test cluster links the way networks fail (Dragonfly's
//! `tests/dragonfly/proxy.py`, TiKV's `transport_simulate.rs` filters).
//!
//! A [`FaultProxy`] listens on a free loopback port and forwards each connection to a target
//! port. At any time a test can tell it to:
//!
//! - [`FaultProxy::partition`]: close every link and refuse new ones (accept, then close at
//!   once: the dialler sees its link die before the first reply);
//! - [`FaultProxy::blackhole`]: forward nothing, keep every socket open, accept new links and
//!   never answer them: a silent network. A link that was blackholed stays silent for good,
//!   even after [`FaultProxy::heal`], like a middlebox that lost its connection state: the
//!   ends must notice and dial again, as Valkey's nodes do when a link stays quiet for half the
//!   node timeout;
//! - [`FaultProxy::cut_after`]: forward `n` more bytes, then close every link mid-stream (a
//!   peer that vanishes mid-frame) and refuse new ones until healed;
//! - [`FaultProxy::heal`]: forward again (new links, and links that were never blackholed).
//!
//! A fault can also be aimed at the links one process opened ([`FaultProxy::fault_from`]):
//! the proxy finds which process owns the other end of each link through `/proc` (Linux), so
//! a test can cut the links a node *opens* to others without touching the links others open
//! to it. Cluster tests use that to isolate a node both ways: blackhole its own proxy (links
//! to it) and, in every other node's proxy, the links it opened.
//!
//! Threads are bounded: one accepting thread and one per live link, at most [`MAX_LINKS`]
//! (more are refused). Dropping the proxy stops and joins them all and closes every socket.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::Duration;

/// Links one proxy forwards at once; more are refused.
pub const MAX_LINKS: usize = 64;

/// What a proxy does to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Forward both ways.
    Pass,
    /// Close the link; refuse new ones.
    Refuse,
    /// Forward nothing and answer nothing; keep the sockets open.
    Blackhole,
    /// Forward this many more bytes (both directions, all links together), then close every
    /// link and refuse new ones.
    CutAfter(usize),
}

/// A TCP proxy that can partition, blackhole or cut the links through it; see the module doc.
pub struct FaultProxy {
    port: u16,
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port, forwarding to `127.0.0.1:target`.
    pub fn start(target: u16) -> FaultProxy {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind a proxy port");
        listener.set_nonblocking(true).expect("non-blocking proxy listener");
        let port = listener.local_addr().expect("proxy address").port();
        let shared = Arc::new(Shared {
            target: SocketAddr::from((Ipv4Addr::LOCALHOST, target)),
            port,
            stop: AtomicBool::new(false),
            inner: Mutex::new(Inner {
                fault: Fault::Pass,
                by_process: HashMap::new(),
                links: HashMap::new(),
                next_id: 0,
                cuts: 0,
                accepted: 0,
            }),
        });
        let s = shared.clone();
        let acceptor = std::thread::Builder::new()
            .name(format!("proxy-{port}"))
            .spawn(move || accept_loop(&s, &listener))
            .expect("spawn the proxy's thread");
        FaultProxy { port, shared, acceptor: Some(acceptor) }
    }

    /// The port the proxy listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// Closes every link and refuses new ones.
    pub fn partition(&self) {
        self.shared.lock().fault = Fault::Refuse;
    }

    /// Forwards nothing from now on; keeps (and accepts) sockets without answering.
    pub fn blackhole(&self) {
        self.shared.lock().fault = Fault::Blackhole;
    }

    /// Forwards `n` more bytes, then closes every link and refuses new ones.
    pub fn cut_after(&self, n: usize) {
        self.shared.lock().fault = Fault::CutAfter(n);
    }

    /// Forwards again, for every process; links blackholed before stay silent.
    pub fn heal(&self) {
        let mut inner = self.shared.lock();
        inner.fault = Fault::Pass;
        inner.by_process.clear();
    }

    /// Applies `fault` (only `Refuse` or `Blackhole` make sense) to the links process `pid`
    /// opens through this proxy, now and later, whatever the proxy does to the others;
    /// [`FaultProxy::heal`] lifts it.
    pub fn fault_from(&self, pid: u32, fault: Fault) {
        let mut inner = self.shared.lock();
        inner.by_process.insert(pid, fault);
        // Links that are already up: find which ones the process owns.
        let port = self.shared.port;
        for link in inner.links.values_mut() {
            if link.owner.is_none() && process_owns(pid, link.peer, port) {
                link.owner = Some(pid);
            }
        }
    }

    /// Links up now (forwarding or silent).
    pub fn links(&self) -> usize {
        self.shared.lock().links.len()
    }

    /// How many times a [`Fault::CutAfter`] went off.
    pub fn cuts(&self) -> usize {
        self.shared.lock().cuts
    }

    /// Links accepted so far, refused ones included.
    pub fn accepted(&self) -> usize {
        self.shared.lock().accepted
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        if let Some(t) = self.acceptor.take() {
            let _ = t.join();
        }
    }
}

struct Shared {
    target: SocketAddr,
    port: u16,
    stop: AtomicBool,
    inner: Mutex<Inner>,
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panicking link thread must not take the test down with a poisoned lock.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

struct Inner {
    fault: Fault,
    by_process: HashMap<u32, Fault>,
    links: HashMap<u64, LinkInfo>,
    next_id: u64,
    cuts: usize,
    accepted: usize,
}

struct LinkInfo {
    peer: SocketAddr,
    /// The process of `by_process` that opened it, once known.
    owner: Option<u32>,
}

impl Inner {
    /// What applies to link `id` now.
    fn fault_of(&self, id: u64) -> Fault {
        let owner = self.links.get(&id).and_then(|l| l.owner);
        owner.and_then(|p| self.by_process.get(&p).copied()).unwrap_or(self.fault)
    }
}

fn accept_loop(shared: &Arc<Shared>, listener: &TcpListener) {
    let mut threads: Vec<JoinHandle<()>> = Vec::new();
    while !shared.stop.load(Ordering::SeqCst) {
        threads.retain(|t| !t.is_finished());
        let (client, peer) = match listener.accept() {
            Ok(c) => c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                std::thread::sleep(POLL);
                continue;
            }
            Err(_) => {
                std::thread::sleep(POLL);
                continue;
            }
        };
        let Some(id) = register(shared, peer, threads.len()) else {
            drop(client);
            continue;
        };
        let s = shared.clone();
        match std::thread::Builder::new().name(format!("proxy-{}-{id}", shared.port)).spawn(move || {
            forward(&s, id, client);
            s.lock().links.remove(&id);
        }) {
            Ok(t) => threads.push(t),
            Err(_) => {
                shared.lock().links.remove(&id);
            }
        }
    }
    for t in threads {
        let _ = t.join();
    }
}

/// Records an accepted link; `None` when it is to be refused (closed at once).
fn register(shared: &Shared, peer: SocketAddr, live: usize) -> Option<u64> {
    let mut inner = shared.lock();
    inner.accepted += 1;
    if live >= MAX_LINKS {
        return None;
    }
    let owner = inner.by_process.keys().copied().find(|pid| process_owns(*pid, peer, shared.port));
    let id = inner.next_id;
    inner.next_id += 1;
    inner.links.insert(id, LinkInfo { peer, owner });
    if inner.fault_of(id) == Fault::Refuse {
        inner.links.remove(&id);
        return None;
    }
    Some(id)
}

/// Forwards one link until it closes, a fault closes it, or the proxy stops.
fn forward(shared: &Shared, id: u64, client: TcpStream) {
    let _ = client.set_read_timeout(Some(POLL));
    let _ = client.set_nodelay(true);
    // A link born in a blackhole never reaches the target.
    let mut upstream = None;
    if shared.lock().fault_of(id) != Fault::Blackhole {
        let Ok(up) = TcpStream::connect_timeout(&shared.target, Duration::from_secs(2)) else { return };
        let _ = up.set_read_timeout(Some(POLL));
        let _ = up.set_nodelay(true);
        upstream = Some(up);
    }
    let mut silent = upstream.is_none();
    let mut buf = vec![0u8; 16 * 1024];
    let (mut client_w, mut client_r) = (&client, &client);
    while !shared.stop.load(Ordering::SeqCst) {
        let fault = shared.lock().fault_of(id);
        match fault {
            Fault::Refuse => break,
            Fault::Blackhole => silent = true,
            Fault::Pass | Fault::CutAfter(_) => {}
        }
        if silent {
            // Read and drop, so the thread sees the link close; answer nothing.
            if !swallow(&mut client_r, &mut buf) || upstream.as_mut().is_some_and(|up| !swallow(up, &mut buf)) {
                break;
            }
            continue;
        }
        let Some(up) = upstream.as_ref() else { break };
        let (mut up_r, mut up_w) = (up, up);
        if !pump(shared, id, &mut client_r, &mut up_w, &mut buf)
            || !pump(shared, id, &mut up_r, &mut client_w, &mut buf)
        {
            break;
        }
    }
    let _ = client.shutdown(std::net::Shutdown::Both);
    if let Some(up) = upstream {
        let _ = up.shutdown(std::net::Shutdown::Both);
    }
}

/// Moves what `from` has (waiting at most one poll) to `to`; false once the link is over
/// (closed, failed, or cut by a [`Fault::CutAfter`]).
fn pump(shared: &Shared, id: u64, from: &mut impl Read, to: &mut impl Write, buf: &mut [u8]) -> bool {
    let n = match from.read(buf) {
        Ok(0) => return false,
        Ok(n) => n,
        Err(e) if timed_out(&e) => return true,
        Err(_) => return false,
    };
    // The fault may have changed while we waited for these bytes.
    let allowed = {
        let mut inner = shared.lock();
        match inner.fault_of(id) {
            Fault::Pass => n,
            Fault::Refuse => return false,
            // Swallowed: the link is silent from now on (the caller sees that next round).
            Fault::Blackhole => return true,
            Fault::CutAfter(left) if left > n => {
                inner.fault = Fault::CutAfter(left - n);
                n
            }
            Fault::CutAfter(left) => {
                inner.fault = Fault::Refuse;
                inner.cuts += 1;
                left
            }
        }
    };
    to.write_all(&buf[..allowed]).is_ok() && allowed == n
}

/// Reads what `from` has (waiting at most one poll) and drops it; false once it is closed.
fn swallow(from: &mut impl Read, buf: &mut [u8]) -> bool {
    match from.read(buf) {
        Ok(0) => false,
        Ok(_) => true,
        Err(e) => timed_out(&e),
    }
}

fn timed_out(e: &io::Error) -> bool {
    matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut | io::ErrorKind::Interrupted)
}

/// Whether process `pid` owns the socket at `peer` that is connected to our `port`: the socket's
/// inode from `/proc/net/tcp`, looked for among the process's file descriptors.
fn process_owns(pid: u32, peer: SocketAddr, port: u16) -> bool {
    let Some(inode) = socket_inode(peer.port(), port) else { return false };
    let wanted = format!("socket:[{inode}]");
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else { return false };
    fds.flatten().any(|fd| std::fs::read_link(fd.path()).is_ok_and(|l| l.to_string_lossy() == wanted))
}

/// The inode of the loopback socket whose local port is `local` and remote port `remote`.
fn socket_inode(local: u16, remote: u16) -> Option<String> {
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let port_of = |c: &str| c.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if cols.len() > 9 && port_of(cols[1]) == Some(local) && port_of(cols[2]) == Some(remote) {
                return Some(cols[9].to_string());
            }
        }
    }
    None
}

/// How long a link thread waits on a socket before it looks at the fault again.
const POLL: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait_for;

    /// An echo server on a free port, served by one thread per connection until the test ends.
    fn echo() -> u16 {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let port = l.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for mut c in l.incoming().flatten() {
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = c.read(&mut buf) {
                        if n == 0 || c.write_all(&buf[..n]).is_err() {
                            return;
                        }
                    }
                });
            }
        });
        port
    }

    fn dial(p: &FaultProxy) -> TcpStream {
        let c = TcpStream::connect((Ipv4Addr::LOCALHOST, p.port())).unwrap();
        c.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
        c
    }

    /// What one round trip of `msg` brings back: `Some(bytes)`, `None` when the link is closed,
    /// or `Some(empty)` when nothing came back in time.
    fn round_trip(c: &mut TcpStream, msg: &[u8]) -> Option<Vec<u8>> {
        if c.write_all(msg).is_err() {
            return None;
        }
        let mut buf = vec![0u8; 1024];
        match c.read(&mut buf) {
            Ok(0) => None,
            Ok(n) => Some(buf[..n].to_vec()),
            Err(e) if timed_out(&e) => Some(Vec::new()),
            Err(_) => None,
        }
    }

    #[test]
    fn forwards_until_partitioned_and_again_once_healed() {
        let p = FaultProxy::start(echo());
        let mut c = dial(&p);
        assert_eq!(round_trip(&mut c, b"hello").unwrap(), b"hello");
        p.partition();
        assert!(wait_for(|| round_trip(&mut c, b"x").is_none(), Duration::from_secs(5)));
        let mut refused = dial(&p);
        assert_eq!(round_trip(&mut refused, b"x"), None);
        p.heal();
        let mut again = dial(&p);
        assert_eq!(round_trip(&mut again, b"back").unwrap(), b"back");
    }

    #[test]
    fn a_blackhole_keeps_links_open_and_silent_even_after_healing() {
        let p = FaultProxy::start(echo());
        let mut c = dial(&p);
        assert_eq!(round_trip(&mut c, b"hello").unwrap(), b"hello");
        p.blackhole();
        assert_eq!(round_trip(&mut c, b"lost").unwrap(), b"");
        let mut born_silent = dial(&p);
        assert_eq!(round_trip(&mut born_silent, b"lost").unwrap(), b"");
        p.heal();
        assert_eq!(round_trip(&mut c, b"still lost").unwrap(), b"");
        let mut fresh = dial(&p);
        assert_eq!(round_trip(&mut fresh, b"new").unwrap(), b"new");
        // Closing its end frees a silent link's thread.
        drop((c, born_silent));
        assert!(wait_for(|| p.links() == 1, Duration::from_secs(5)), "{} links", p.links());
    }

    #[test]
    fn a_cut_passes_n_bytes_then_closes_mid_stream() {
        let p = FaultProxy::start(echo());
        let mut c = dial(&p);
        p.cut_after(8);
        // Five bytes out leave three of the budget for the five echoed back.
        c.write_all(b"12345").unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 16];
        while let Ok(n) = c.read(&mut buf) {
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"123");
        assert_eq!(p.cuts(), 1);
        assert_eq!(round_trip(&mut dial(&p), b"x"), None);
        p.heal();
        assert_eq!(round_trip(&mut dial(&p), b"ok").unwrap(), b"ok");
    }

    #[test]
    fn a_fault_from_one_process_spares_the_others() {
        let p = FaultProxy::start(echo());
        let mut mine = dial(&p);
        assert_eq!(round_trip(&mut mine, b"a").unwrap(), b"a");
        // A process that is not this one (pid 1): nothing of ours is touched.
        p.fault_from(1, Fault::Refuse);
        assert_eq!(round_trip(&mut mine, b"b").unwrap(), b"b");
        p.fault_from(std::process::id(), Fault::Refuse);
        assert!(wait_for(|| round_trip(&mut mine, b"x").is_none(), Duration::from_secs(5)));
        assert_eq!(round_trip(&mut dial(&p), b"x"), None);
        p.heal();
        assert_eq!(round_trip(&mut dial(&p), b"c").unwrap(), b"c");
    }

    #[test]
    fn dropping_the_proxy_closes_everything() {
        let p = FaultProxy::start(echo());
        let port = p.port();
        let mut c = dial(&p);
        assert_eq!(round_trip(&mut c, b"a").unwrap(), b"a");
        drop(p);
        assert_eq!(round_trip(&mut c, b"b"), None);
        assert!(TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err());
    }
}
