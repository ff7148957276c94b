//! Per-connection state: what only the connection task touches ([`Session`]), and what
//! other clients may read or act on through CLIENT LIST/KILL ([`ClientInfo`]).

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU8, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

use hotkv_engine::LocalStats;
use parking_lot::Mutex;
use tokio::sync::Notify;

/// Client flags shown in CLIENT LIST (`flags=`), as bits.
pub mod flag {
    /// `O`: MONITOR.
    pub const MONITOR: u32 = 1 << 0;
    /// `e`: CLIENT NO-EVICT on.
    pub const NO_EVICT: u32 = 1 << 1;
    /// `T`: CLIENT NO-TOUCH on.
    pub const NO_TOUCH: u32 = 1 << 2;
    /// `c`: close after the reply is written.
    pub const CLOSE_AFTER_REPLY: u32 = 1 << 3;
    /// `x`: in MULTI.
    pub const MULTI: u32 = 1 << 4;
    /// `P`: subscribed to pub/sub.
    pub const PUBSUB: u32 = 1 << 5;
    /// `b`: blocked.
    pub const BLOCKED: u32 = 1 << 6;
    /// Has WATCHed keys (INFO `watching_clients`; no CLIENT LIST letter).
    pub const WATCHING: u32 = 1 << 7;
    /// `M`: the client that applies our primary's stream.
    pub const MASTER: u32 = 1 << 8;
    /// `S`: a replica attached to this node.
    pub const REPLICA: u32 = 1 << 9;
    /// `U`: connected through the unix socket (`unixsocket`).
    pub const UNIX_SOCKET: u32 = 1 << 10;
    /// `t`: CLIENT TRACKING on.
    pub const TRACKING: u32 = 1 << 11;
    /// `R`: the client tracking redirects to is gone.
    pub const TRACKING_BROKEN_REDIR: u32 = 1 << 12;
    /// `B`: tracking in BCAST mode.
    pub const TRACKING_BCAST: u32 = 1 << 13;
}

/// What CLIENT REPLY asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReplyMode {
    /// Replies are sent.
    On,
    /// Replies are dropped until CLIENT REPLY ON.
    Off,
    /// The next command's reply is dropped (set by SKIP, applied to the command after it).
    SkipNext,
    /// This command's reply is dropped.
    Skip,
}

/// State owned by the connection task.
pub struct Session {
    /// Client id.
    pub id: u64,
    /// Selected database.
    pub db: usize,
    /// Whether AUTH (or HELLO AUTH) succeeded, or no password is required.
    pub authenticated: bool,
    /// Authenticated user name.
    pub user: String,
    /// The ACL user whose rules apply; `None` for the server's own clients (our primary's
    /// stream, the AOF loader), which may run anything, as in Valkey.
    pub acl_user: Option<Arc<crate::acl::UserCell>>,
    /// CLIENT REPLY state.
    pub reply_mode: ReplyMode,
    /// Counters folded into the server's totals after each batch.
    pub local: LocalStats,
    /// Shared view for other clients.
    pub info: Arc<ClientInfo>,
    /// Close the connection once pending replies are written.
    pub close_after_reply: bool,
    /// A blocked command is running again (its timeout, or a retry once its keys are
    /// ready): MONITOR already saw it.
    pub reprocessing: bool,
    /// Registry index + 1 of the command being run (0 before the first): named in the log
    /// when a command panics, since the connection task's boundary only sees the session.
    pub running: u32,
    /// Bytes read since the last batch, folded into the server totals.
    pub pending_in: u64,
    /// MONITOR was called: the connection subscribes to the feed after this batch.
    pub enter_monitor: bool,
    /// The transaction being queued (between MULTI and EXEC/DISCARD).
    pub multi: Option<MultiState>,
    /// EXEC is running the queued commands (with their slot locks held): a command that
    /// would take every slot lock (BGSAVE's cut) must not wait for them here.
    pub in_exec: bool,
    /// A script is running a command for this client: nothing may wait (WAIT, WAITAOF answer
    /// at once, as Valkey's script client is `deny_blocking`).
    pub in_script: bool,
    /// WATCHed keys: (database, key, whether it is stale: it had expired, undeleted, when
    /// watched, and has not changed since; shared with the watch registry, which updates it).
    pub watched: Vec<(usize, Vec<u8>, std::sync::Arc<AtomicBool>)>,
    /// Set by anyone who changes a watched key.
    pub watch_dirty: std::sync::Arc<AtomicBool>,
    /// Pub/sub queue and subscriptions, created by the first subscription.
    pub subs: Option<crate::pubsub::ClientSubs>,
    /// The client is connected over TLS (a cluster redirect names the TLS port).
    pub tls: bool,
    /// ASKING was sent: the next command may use a slot this node is importing (cluster).
    pub asking: bool,
    /// READONLY was sent: a replica serves this client's reads of its primary's slots
    /// (cluster; READWRITE clears it).
    pub readonly: bool,
    /// What this connection announced with REPLCONF before PSYNC (a replica's handshake).
    pub handshake: Option<Box<hotkv_replication::Handshake>>,
    /// The running command replied with RESP3 push frames only ((un)subscribe
    /// confirmations), which CLIENT REPLY OFF/SKIP does not silence: Valkey's `pushing`.
    pub pushed: bool,
    /// A DEBUG SLEEP this client ran: the server stays stopped until its reply is written,
    /// so no other client is answered before it (Valkey writes the sleeper's reply first).
    pub thaw_after_reply: Option<crate::freeze::Held>,
    /// CLIENT TRACKING's mode while it is on (the shared settings are in `info.tracking`).
    pub tracking: Option<crate::tracking::Mode>,
    /// CLIENT CACHING was given for the next command (or transaction).
    pub caching: bool,
    /// SCRIPT DEBUG YES or SYNC: the next EVAL runs under the Lua debugger.
    pub debug_scripts: Option<crate::script::DebugMode>,
}

/// A transaction being queued.
#[derive(Default)]
pub struct MultiState {
    /// The queued commands.
    pub queue: Vec<Queued>,
    /// An error while queueing: EXEC answers EXECABORT.
    pub aborted: bool,
}

/// A command queued between MULTI and EXEC.
pub struct Queued {
    /// Its registry index.
    pub cmd: usize,
    /// Its command flags as dispatch judged them (a script's come from its shebang).
    pub flags: u32,
    /// Its arguments.
    pub argv: Vec<Vec<u8>>,
    /// The plan dispatch made when it was queued: EXEC locks and routes their union.
    pub plan: hotkv_engine::plan::Plan,
}

impl Session {
    /// A session for a newly accepted client.
    pub fn new(info: Arc<ClientInfo>, authenticated: bool) -> Session {
        Session {
            tracking: None,
            caching: false,
            debug_scripts: None,
            id: info.id,
            db: 0,
            authenticated,
            user: "default".into(),
            acl_user: None,
            reply_mode: ReplyMode::On,
            local: LocalStats::default(),
            info,
            close_after_reply: false,
            thaw_after_reply: None,
            reprocessing: false,
            running: 0,
            pending_in: 0,
            enter_monitor: false,
            multi: None,
            in_exec: false,
            in_script: false,
            watched: Vec::new(),
            watch_dirty: std::sync::Arc::new(AtomicBool::new(false)),
            subs: None,
            tls: false,
            asking: false,
            readonly: false,
            handshake: None,
            pushed: false,
        }
    }

    /// Whether the client came in over IPv6, so that cluster mode tells it a node's
    /// `cluster-announce-client-ipv6` (Valkey's `isClientConnIpV6`). An IPv4 client on a
    /// dual-stack socket (an IPv4-mapped peer address) counts as IPv4: it is one, and might
    /// not reach an IPv6 address.
    pub fn ipv6(&self) -> bool {
        match &self.info.addr {
            ClientAddr::Tcp(SocketAddr::V6(a)) => a.ip().to_ipv4_mapped().is_none(),
            ClientAddr::Tcp(SocketAddr::V4(_)) | ClientAddr::Unix(_) => false,
        }
    }

    /// Whether the client is subscribed to any channel, pattern or shard channel.
    pub fn subscribed(&self) -> bool {
        self.subs.as_ref().is_some_and(crate::pubsub::ClientSubs::any)
    }

    /// Publishes the subscription and watch counts to CLIENT LIST after they changed.
    pub fn sync_counts(&self) {
        let c = &self.info.counts;
        let (sub, psub, ssub) =
            self.subs.as_ref().map_or((0, 0, 0), |s| (s.channels.len(), s.patterns.len(), s.shard.len()));
        c.sub.store(sub as u32, Ordering::Relaxed);
        c.psub.store(psub as u32, Ordering::Relaxed);
        c.ssub.store(ssub as u32, Ordering::Relaxed);
        c.watch.store(self.watched.len() as u32, Ordering::Relaxed);
        c.multi.store(self.multi.as_ref().map_or(0, |m| m.queue.len()) as u32, Ordering::Relaxed);
    }

    /// Logs the session in as `user` (AUTH, HELLO AUTH, a client certificate).
    pub fn login(&mut self, user: Arc<crate::acl::UserCell>) {
        self.authenticated = true;
        self.user = user.name().to_string();
        *self.info.user.lock() = self.user.clone();
        self.acl_user = Some(user);
    }

    /// Whether a client flag is set.
    pub fn has_flag(&self, f: u32) -> bool {
        self.info.flags.load(Ordering::Relaxed) & f != 0
    }

    /// Sets or clears a client flag.
    pub fn set_flag(&self, f: u32, on: bool) {
        if on {
            self.info.flags.fetch_or(f, Ordering::Relaxed);
        } else {
            self.info.flags.fetch_and(!f, Ordering::Relaxed);
        }
    }
}

/// Sizes of a client's subscriptions, watches and transaction, for CLIENT LIST.
#[derive(Default)]
pub struct Counts {
    /// Subscribed channels.
    pub sub: AtomicU32,
    /// Subscribed patterns.
    pub psub: AtomicU32,
    /// Subscribed shard channels.
    pub ssub: AtomicU32,
    /// WATCHed keys.
    pub watch: AtomicU32,
    /// Commands queued in the open transaction.
    pub multi: AtomicU32,
}

/// The part of a client visible to other clients and to the server cron.
pub struct ClientInfo {
    /// Unique, increasing client id.
    pub id: u64,
    /// Peer address.
    pub addr: ClientAddr,
    /// Local address.
    pub laddr: ClientAddr,
    /// Socket descriptor.
    pub fd: i32,
    /// Creation time.
    pub created: Instant,
    /// Unix milliseconds of the last command or read.
    pub last_interaction: AtomicI64,
    /// Selected database.
    pub db: AtomicU32,
    /// Registry index + 1 of the last command (0 = none).
    pub last_cmd: AtomicU32,
    /// RESP version (2 or 3).
    pub resp: AtomicU8,
    /// Flag bits, see [`flag`].
    pub flags: AtomicU32,
    /// Its query buffer's size and peak (CLIENT LIST `qbuf=`, `qbuf-free=`) and the cron's
    /// resize requests.
    pub query_buf: crate::query_buffer::QueryBuffer,
    /// Replies of the batch being written.
    pub obl: AtomicUsize,
    /// Unix ms since which its pending output has been over its class's soft output limit, 0
    /// while under it (see `obuf_limit`).
    pub obuf_soft_since: AtomicI64,
    /// Replies the client has not read yet: what its socket's kernel buffer could not take
    /// (CLIENT LIST `omem`, Valkey's reply list).
    pub omem: Arc<AtomicUsize>,
    /// Valkey's reply buffer size and peak (CLIENT LIST `rbs=`, `rbp=`).
    pub reply_buf: crate::reply_buffer::ReplyBuffer,
    /// Memory its connection uses besides what waits to be sent (buffers, subscriptions,
    /// ...), kept up to date by the connection; see [`ClientInfo::memory`].
    pub used: AtomicUsize,
    /// Bytes of pub/sub messages queued for it and not yet encoded (shared with whoever
    /// publishes to it, for the pubsub output limit).
    pub pubsub_queued: Arc<AtomicUsize>,
    /// What [`ClientInfo::memory`] was when last counted in the clients' total for
    /// `maxmemory-clients` (0 while no limit is set); see `client_evict`.
    pub mem: AtomicUsize,
    /// What it held when it was told to close for its memory (see `ClientMemory::closing`).
    pub freeing: AtomicUsize,
    /// Bytes read.
    pub net_in: AtomicU64,
    /// Bytes written.
    pub net_out: AtomicU64,
    /// Commands run.
    pub commands: AtomicU64,
    /// CLIENT SETNAME.
    pub name: Mutex<String>,
    /// CLIENT SETINFO LIB-NAME.
    pub lib_name: Mutex<String>,
    /// CLIENT SETINFO LIB-VER.
    pub lib_ver: Mutex<String>,
    /// Authenticated user.
    pub user: Mutex<String>,
    /// Set by CLIENT KILL or the idle timeout; the task closes when woken.
    pub killed: AtomicBool,
    /// A Lua debugging session (SCRIPT DEBUG) holds its connection: a shutdown ends it.
    pub debugging: AtomicBool,
    /// CLIENT LIST's `sub=`, `psub=`, `ssub=`, `watch=` and `multi=` (commands queued; shown
    /// only while the MULTI flag is set), kept up to date by the session.
    pub counts: Counts,
    /// Wakes the connection task.
    pub wake: Notify,
    /// CLIENT TRACKING state, shared with whoever invalidates keys.
    pub tracking: crate::tracking::ClientTracking,
    /// CLIENT LIST's `redir=`: the tracking redirect id, 0 without one, -1 with tracking off.
    pub redir: AtomicI64,
    /// Where other connections queue pushes for this one.
    pub inbox: crate::tracking::Inbox,
    /// The socket descriptor while the connection owns it; cleared under this lock before the
    /// socket closes, so CLIENT KILL never shuts down a descriptor reused by someone else.
    pub sock: Mutex<Option<std::os::fd::RawFd>>,
}

impl ClientInfo {
    /// A new client record.
    pub fn new(id: u64, addr: impl Into<ClientAddr>, laddr: impl Into<ClientAddr>, fd: i32, now_ms: i64) -> ClientInfo {
        ClientInfo {
            id,
            addr: addr.into(),
            laddr: laddr.into(),
            fd,
            created: Instant::now(),
            last_interaction: AtomicI64::new(now_ms),
            db: AtomicU32::new(0),
            last_cmd: AtomicU32::new(0),
            resp: AtomicU8::new(2),
            flags: AtomicU32::new(0),
            query_buf: Default::default(),
            obl: AtomicUsize::new(0),
            obuf_soft_since: AtomicI64::new(0),
            omem: Arc::new(AtomicUsize::new(0)),
            reply_buf: crate::reply_buffer::ReplyBuffer::new(now_ms),
            used: AtomicUsize::new(0),
            pubsub_queued: Arc::new(AtomicUsize::new(0)),
            mem: AtomicUsize::new(0),
            freeing: AtomicUsize::new(0),
            net_in: AtomicU64::new(0),
            net_out: AtomicU64::new(0),
            commands: AtomicU64::new(0),
            name: Mutex::new(String::new()),
            lib_name: Mutex::new(String::new()),
            lib_ver: Mutex::new(String::new()),
            user: Mutex::new("default".into()),
            killed: AtomicBool::new(false),
            debugging: AtomicBool::new(false),
            counts: Counts::default(),
            wake: Notify::new(),
            tracking: crate::tracking::ClientTracking::default(),
            redir: AtomicI64::new(-1),
            inbox: crate::tracking::Inbox::default(),
            sock: Mutex::new(None),
        }
    }

    /// Asks the connection to close: its pending read ends at once.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Relaxed);
        if let Some(fd) = *self.sock.lock() {
            crate::io::shutdown_fd(fd);
        }
        self.wake.notify_one();
    }

    /// Everything waiting to reach the client: replies its socket holds, pub/sub messages and
    /// pushes queued for it (CLIENT LIST `omem`). Other connections add to it while this
    /// one may be busy, so it is read live.
    pub fn pending_output(&self) -> usize {
        self.omem.load(Ordering::Relaxed) + self.pubsub_queued.load(Ordering::Relaxed) + self.inbox.bytes()
    }

    /// What its connection uses: CLIENT LIST `tot-mem`, and what `maxmemory-clients` counts
    /// (see `client_evict::usage`).
    pub fn memory(&self) -> usize {
        self.used.load(Ordering::Relaxed) + self.pending_output()
    }

    /// Whether CLIENT KILL or a timeout asked the connection to close.
    pub fn is_killed(&self) -> bool {
        self.killed.load(Ordering::Relaxed)
    }

    /// The `flags=` letters of CLIENT LIST.
    pub fn flag_letters(&self) -> String {
        let f = self.flags.load(Ordering::Relaxed);
        let mut s = String::new();
        for (bit, c) in [
            (flag::MONITOR, 'O'),
            (flag::REPLICA, 'S'),
            (flag::MASTER, 'M'),
            (flag::PUBSUB, 'P'),
            (flag::MULTI, 'x'),
            (flag::BLOCKED, 'b'),
            (flag::TRACKING, 't'),
            (flag::TRACKING_BROKEN_REDIR, 'R'),
            (flag::TRACKING_BCAST, 'B'),
            (flag::CLOSE_AFTER_REPLY, 'c'),
            (flag::UNIX_SOCKET, 'U'),
            (flag::NO_EVICT, 'e'),
            (flag::NO_TOUCH, 'T'),
        ] {
            if f & bit != 0 {
                s.push(c);
            }
        }
        if s.is_empty() {
            s.push('N');
        }
        s
    }
}

/// Where a client is connected, as Valkey names it: `ip:port` (`[ip]:port` for IPv6), or for
/// a client of the unix socket the socket's configured path with port 0 (`/tmp/x.sock:0`,
/// Valkey's `genClientAddrString`), for both ends of the connection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClientAddr {
    /// A TCP connection (plain or TLS).
    Tcp(SocketAddr),
    /// A connection to the unix socket at this path.
    Unix(Arc<str>),
}

impl ClientAddr {
    /// Whether the client is on this machine: a loopback address (an IPv4-mapped one too) or
    /// the unix socket (Valkey's `connIsLocal`). Protected mode, `enable-debug-command local`
    /// and `enable-protected-configs local` ask this.
    pub fn is_local(&self) -> bool {
        match self {
            ClientAddr::Tcp(a) => is_loopback(a.ip()),
            ClientAddr::Unix(_) => true,
        }
    }

    /// The IP address as text, for a replica's announced address; a unix-socket peer is
    /// `/unixsocket`, the name Valkey's `anetFdToString` gives it.
    pub fn ip_text(&self) -> String {
        match self {
            ClientAddr::Tcp(a) => a.ip().to_string(),
            ClientAddr::Unix(_) => "/unixsocket".to_string(),
        }
    }

    /// The address in a MONITOR line: `ip:port`, or `unix:<path>` for the unix socket
    /// (Valkey's `replicationFeedMonitors`).
    pub fn monitor_text(&self) -> String {
        match self {
            ClientAddr::Tcp(a) => a.to_string(),
            ClientAddr::Unix(path) => format!("unix:{path}"),
        }
    }
}

impl From<SocketAddr> for ClientAddr {
    fn from(a: SocketAddr) -> ClientAddr {
        ClientAddr::Tcp(a)
    }
}

impl fmt::Display for ClientAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClientAddr::Tcp(a) => a.fmt(f),
            ClientAddr::Unix(path) => write!(f, "{path}:0"),
        }
    }
}

/// Whether `ip` is a loopback address, an IPv4-mapped IPv6 one included.
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback()),
    }
}

/// All connected clients.
#[derive(Default)]
pub struct Clients {
    map: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    next_id: AtomicU64,
    count: AtomicUsize,
    /// Their memory, for `maxmemory-clients`.
    pub memory: Arc<crate::client_evict::ClientMemory>,
}

impl Clients {
    /// The next client id (ids start at 1... Valkey starts at 1 too, after its own fake ones).
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    /// Registers a client.
    pub fn add(&self, info: Arc<ClientInfo>) {
        self.map.lock().insert(info.id, info);
        self.count.fetch_add(1, Ordering::Relaxed);
    }

    /// Removes a client.
    pub fn remove(&self, id: u64) {
        let removed = self.map.lock().remove(&id);
        if let Some(info) = removed {
            self.count.fetch_sub(1, Ordering::Relaxed);
            self.memory.closed(&info);
        }
    }

    /// Number of connected clients.
    pub fn len(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Whether no client is connected.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A snapshot of all clients, by id. A killed client is left out at once, as Valkey frees
    /// it inside CLIENT KILL, although its task may take a moment to notice and deregister.
    pub fn snapshot(&self) -> Vec<Arc<ClientInfo>> {
        self.map.lock().values().filter(|c| !c.is_killed()).cloned().collect()
    }

    /// Calls `f` on up to `n` clients in id order from id `from`, wrapping around once, and
    /// returns the id to start from next time (a cron's round-robin, without a snapshot).
    pub fn visit_from(&self, from: u64, n: usize, mut f: impl FnMut(&ClientInfo)) -> u64 {
        let map = self.map.lock();
        let mut next = from;
        let mut it = map.range(from..).chain(map.range(..from)).take(n.min(map.len()));
        for (&id, c) in &mut it {
            f(c);
            next = id + 1;
        }
        next
    }

    /// One client (not a killed one).
    pub fn get(&self, id: u64) -> Option<Arc<ClientInfo>> {
        self.map.lock().get(&id).filter(|c| !c.is_killed()).cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_addresses_read_as_valkey_writes_them() {
        let v4 = ClientAddr::from("127.0.0.1:5000".parse::<SocketAddr>().unwrap());
        let v6 = ClientAddr::from("[::1]:5000".parse::<SocketAddr>().unwrap());
        let unix = ClientAddr::Unix("/tmp/hotkv.sock".into());
        assert_eq!(v4.to_string(), "127.0.0.1:5000");
        assert_eq!(v6.to_string(), "[::1]:5000");
        assert_eq!(unix.to_string(), "/tmp/hotkv.sock:0");
        assert_eq!(unix.monitor_text(), "unix:/tmp/hotkv.sock");
        assert_eq!(v4.monitor_text(), "127.0.0.1:5000");
        assert_eq!(unix.ip_text(), "/unixsocket");
        assert!(v4.is_local() && v6.is_local() && unix.is_local());
        let mapped = ClientAddr::from("[::ffff:127.0.0.1]:1".parse::<SocketAddr>().unwrap());
        assert!(mapped.is_local());
        assert!(!ClientAddr::from("10.0.0.1:1".parse::<SocketAddr>().unwrap()).is_local());
    }

    #[test]
    fn a_unix_client_has_the_u_flag_in_valkey_order() {
        let unix = ClientAddr::Unix("/tmp/s".into());
        let info = ClientInfo::new(1, unix.clone(), unix, 3, 0);
        assert_eq!(info.flag_letters(), "N");
        info.flags.fetch_or(flag::UNIX_SOCKET | flag::CLOSE_AFTER_REPLY | flag::NO_EVICT, Ordering::Relaxed);
        assert_eq!(info.flag_letters(), "cUe");
    }
}
