//! The shared server state every connection task holds an `Arc` to.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::time::Instant;

use arc_swap::ArcSwap;
use hotkv_engine::route::{SlotRouter, Standalone};
use hotkv_engine::{EngineConfig, Keyspace};
use parking_lot::Mutex;
use tokio::sync::{Notify, broadcast};

use crate::config::Settings;
use crate::config::table::{self as t, find};
use crate::config::value::Value;
use crate::memory::MemoryGauge;
use crate::registry::Registry;
use crate::session::Clients;
use crate::slowlog::{LatencyMonitor, SlowLog};
use crate::stats::Stats;

/// Values read on the command path, derived from [`Settings`] whenever they change.
#[derive(Debug, Clone)]
pub struct Runtime {
    /// `requirepass`, if set.
    pub requirepass: Option<String>,
    /// `protected-mode`.
    pub protected_mode: bool,
    /// `timeout` in seconds (0 = never).
    pub timeout: u64,
    /// `maxclients`.
    pub maxclients: usize,
    /// `client-query-buffer-limit`.
    pub query_buffer_limit: usize,
    /// `proto-max-bulk-len`.
    pub proto_max_bulk_len: u64,
    /// `slowlog-log-slower-than` in microseconds (negative = off).
    pub slowlog_threshold: i64,
    /// `slowlog-max-len`.
    pub slowlog_max_len: usize,
    /// `latency-monitor-threshold` in milliseconds (0 = off).
    pub latency_threshold: u64,
    /// `latency-tracking` (INFO latencystats).
    pub latency_tracking: bool,
    /// `latency-tracking-info-percentiles`.
    pub latency_percentiles: Vec<f64>,
    /// `databases`.
    pub databases: usize,
    /// `tcp-keepalive` seconds.
    pub tcp_keepalive: u64,
    /// `client-output-buffer-limit` of the normal class.
    pub obuf_normal: crate::obuf_limit::Limit,
    /// `client-output-buffer-limit` of the pubsub class.
    pub obuf_pubsub: crate::obuf_limit::Limit,
    /// `notify-keyspace-events` as bits (see `events::class`).
    pub notify: u32,
    /// `tls-auth-clients`, applied to each new TLS connection.
    pub tls_auth: hotkv_tls::ClientAuth,
    /// `tls-auth-clients-user`.
    pub tls_cert_user: hotkv_tls::CertUser,
    /// `replica-read-only`.
    pub replica_read_only: bool,
    /// `replica-serve-stale-data`.
    pub replica_serve_stale_data: bool,
    /// `min-replicas-to-write`.
    pub min_replicas_to_write: usize,
    /// `stop-writes-on-bgsave-error`.
    pub stop_writes_on_bgsave_error: bool,
    /// Whether `save` has rules (MISCONF applies only then).
    pub save_rules: bool,
    /// `busy-reply-threshold` (`lua-time-limit`), milliseconds; 0 = never.
    pub busy_reply_threshold: u64,
    /// `maxmemory-clients` in bytes (a percentage applied to `maxmemory`), 0 = no limit.
    pub client_eviction_limit: usize,
}

impl Runtime {
    /// Derives the runtime values.
    pub fn from_settings(s: &Settings) -> Runtime {
        let pass = s.str(t::REQUIREPASS);
        Runtime {
            requirepass: (!pass.is_empty()).then(|| pass.to_string()),
            protected_mode: s.bool(t::PROTECTED_MODE),
            timeout: s.int(t::TIMEOUT).max(0) as u64,
            maxclients: s.int(t::MAXCLIENTS).max(1) as usize,
            query_buffer_limit: s.int(t::CLIENT_QUERY_BUFFER_LIMIT).max(0) as usize,
            proto_max_bulk_len: s.int(t::PROTO_MAX_BULK_LEN).max(0) as u64,
            slowlog_threshold: s.int(t::SLOWLOG_LOG_SLOWER_THAN),
            slowlog_max_len: s.int(t::SLOWLOG_MAX_LEN).max(0) as usize,
            latency_threshold: s.int(t::LATENCY_MONITOR_THRESHOLD).max(0) as u64,
            latency_tracking: s.bool(t::LATENCY_TRACKING),
            latency_percentiles: s
                .display(t::LATENCY_TRACKING_INFO_PERCENTILES)
                .split_whitespace()
                .filter_map(|p| p.parse().ok())
                .collect(),
            databases: s.int(t::DATABASES).max(1) as usize,
            tcp_keepalive: s.int(t::TCP_KEEPALIVE).max(0) as u64,
            notify: crate::events::class::parse(s.str(t::NOTIFY_KEYSPACE_EVENTS)),
            tls_auth: crate::tls::client_auth(s),
            tls_cert_user: s.str(t::TLS_AUTH_CLIENTS_USER).parse().unwrap_or_default(),
            replica_read_only: s.bool(t::REPLICA_READ_ONLY),
            replica_serve_stale_data: s.bool(t::REPLICA_SERVE_STALE_DATA),
            min_replicas_to_write: s.int(t::MIN_REPLICAS_TO_WRITE).max(0) as usize,
            stop_writes_on_bgsave_error: s.bool(t::STOP_WRITES_ON_BGSAVE_ERROR),
            save_rules: !s.ints(t::SAVE).is_empty(),
            busy_reply_threshold: s.int(t::BUSY_REPLY_THRESHOLD).max(0) as u64,
            client_eviction_limit: crate::client_evict::limit(s.int(t::MAXMEMORY_CLIENTS), s.int(t::MAXMEMORY)),
            obuf_normal: obuf_class(s, 0),
            obuf_pubsub: obuf_class(s, 2),
        }
    }
}

/// The `client-output-buffer-limit` of class `n` (0 normal, 1 replica, 2 pubsub): its hard
/// limit, soft limit and soft seconds are the class's three numbers.
fn obuf_class(s: &Settings, n: usize) -> crate::obuf_limit::Limit {
    let l = s.ints(t::CLIENT_OUTPUT_BUFFER_LIMIT);
    let at = |i: usize| l.get(3 * n + i).copied().unwrap_or(0);
    crate::obuf_limit::Limit::from_triple(at(0), at(1), at(2))
}

/// A directive's value by name (for code paths that take names from clients).
pub fn value_of<'s>(s: &'s Settings, name: &str) -> Option<&'s Value> {
    find(name).map(|id| s.get(id))
}

/// An integer directive by name, or `default` if the table lacks it.
pub fn int_of(s: &Settings, name: &str, default: i64) -> i64 {
    value_of(s, name).map_or(default, Value::as_int)
}

/// A yes/no directive by name, or `default`.
pub fn bool_of(s: &Settings, name: &str, default: bool) -> bool {
    value_of(s, name).map_or(default, Value::as_bool)
}

/// A string directive by name, or `default`.
pub fn str_of(s: &Settings, name: &str, default: &str) -> String {
    value_of(s, name).map_or_else(|| default.to_string(), |v| v.as_str().to_string())
}

/// Commands dispatch must recognise (transactions, pub/sub context).
#[derive(Debug, Clone, Copy)]
pub struct Known {
    /// EXEC.
    pub exec: usize,
    /// Commands that run at once inside MULTI instead of being queued.
    pub multi_immediate: [usize; 6],
    /// Commands allowed in RESP2 subscribed mode.
    pub pubsub_allowed: [usize; 9],
    /// UNSUBSCRIBE, PUNSUBSCRIBE, SUNSUBSCRIBE (refused outside subscribed mode).
    pub unsubscribes: [usize; 3],
    /// SELECT (EXEC follows database changes while planning its locks).
    pub select: usize,
    /// PING (refused with MISCONF like a write, as Valkey does).
    pub ping: usize,
    /// FLUSHALL (saves the emptied dataset when save rules are set).
    pub flushall: usize,
    /// EVAL, EVALSHA, EVAL_RO, EVALSHA_RO, FCALL, FCALL_RO: run by `crate::script`.
    pub scripts: [usize; 6],
    /// TIME (a script sees the time its run started, as Valkey's cached time).
    pub time: usize,
}

impl Known {
    fn new(r: &Registry) -> Known {
        let id = |n: &str| r.by_name(n).unwrap_or(usize::MAX);
        Known {
            exec: id("exec"),
            multi_immediate: [id("exec"), id("discard"), id("multi"), id("watch"), id("quit"), id("reset")],
            pubsub_allowed: [
                id("ping"),
                id("subscribe"),
                id("ssubscribe"),
                id("unsubscribe"),
                id("sunsubscribe"),
                id("psubscribe"),
                id("punsubscribe"),
                id("quit"),
                id("reset"),
            ],
            unsubscribes: [id("unsubscribe"), id("punsubscribe"), id("sunsubscribe")],
            select: id("select"),
            ping: id("ping"),
            flushall: id("flushall"),
            scripts: [id("eval"), id("evalsha"), id("eval_ro"), id("evalsha_ro"), id("fcall"), id("fcall_ro")],
            time: id("time"),
        }
    }
}

/// Everything shared by connections.
pub struct Server {
    /// The data.
    pub ks: Keyspace,
    /// The full configuration.
    pub settings: ArcSwap<Settings>,
    /// Derived command-path values.
    pub rt: ArcSwap<Runtime>,
    /// Engine settings.
    pub engine: ArcSwap<EngineConfig>,
    /// All commands.
    pub registry: Registry,
    /// Connected clients.
    pub clients: Clients,
    /// Statistics.
    pub stats: Stats,
    /// Allocator figures.
    pub memory: MemoryGauge,
    /// Start instant, for uptime.
    pub started: Instant,
    /// 40 hex characters, new at every start.
    pub run_id: String,
    /// The configuration file, for CONFIG REWRITE and INFO.
    pub config_file: Option<PathBuf>,
    /// The executable, for INFO.
    pub executable: PathBuf,
    /// Signals that the server must shut down.
    pub shutdown: Notify,
    /// Set once shutdown started.
    pub shutting_down: AtomicBool,
    /// A shutdown waiting for replicas or saving, before the process exits.
    pub shutdown_wait: crate::shutdown::Coordinator,
    /// Unix seconds of the last successful save (the start time until one succeeds, as
    /// Valkey).
    pub lastsave: AtomicI64,
    /// RDB persistence: saves in progress, their outcome, loading.
    pub persist: crate::persistence::Persistence,
    /// The slow log.
    pub slowlog: Mutex<SlowLog>,
    /// LATENCY samples.
    pub latency: Mutex<LatencyMonitor>,
    /// MONITOR feed.
    pub monitor_tx: broadcast::Sender<Arc<str>>,
    /// Number of MONITOR clients (checked before formatting a feed line).
    pub monitors: AtomicUsize,
    /// Ports actually bound: (plain, tls).
    pub ports: Mutex<(u16, u16)>,
    /// Held by the one thread evicting at a time.
    pub evict_lock: Mutex<()>,
    /// Pub/sub subscriptions.
    pub pubsub: Arc<crate::pubsub::PubSub>,
    /// WATCHed keys.
    pub watches: crate::events::Watches,
    /// CLIENT TRACKING: tracked keys and BCAST prefixes.
    pub tracking: crate::tracking::Tracking,
    /// Clients blocked on keys.
    pub blocked: crate::blocking::Blocked,
    /// Registry indexes of the commands dispatch treats specially.
    pub known: Known,
    /// `used_memory` when the server became ready (`used_memory_startup`).
    pub startup_memory: std::sync::atomic::AtomicU64,
    /// Serialises CONFIG SET.
    pub config_lock: Mutex<()>,
    /// Accept loops, plain and TLS.
    pub listeners: Mutex<Vec<crate::listener::ListenerHandle>>,
    /// TLS material in force and everything that replaces it.
    pub tls: Arc<hotkv_tls::TlsManager>,
    /// A handle to this server's own `Arc`, for code that has only `&Server` and must spawn
    /// tasks (CONFIG SET port).
    pub this: std::sync::OnceLock<std::sync::Weak<Server>>,
    /// The event loops that serve clients (`event-loop`), started by the first.
    pub loops: std::sync::OnceLock<Option<crate::evloop::Loops>>,
    /// Whether the cron runs the active expire cycle (DEBUG SET-ACTIVE-EXPIRE).
    pub active_expire: AtomicBool,
    /// DEBUG PAUSE-CRON: the cron thread does nothing while set.
    pub cron_paused: AtomicBool,
    /// DEBUG REPLYBUFFER's settings and the reply buffer resize counts.
    pub reply_buffers: crate::reply_buffer::Tuning,
    /// CLIENT PAUSE.
    pub pause: crate::pause::Pause,
    /// DEBUG SLEEP's stop of the whole server.
    pub freeze: crate::freeze::Freeze,
    /// Where calls go: [`Standalone`] (everything here) unless cluster mode wires in the
    /// cluster's router. Dispatch asks it only about calls with keys.
    pub router: Arc<dyn SlotRouter>,
    /// The cluster node, in cluster mode.
    pub cluster: Option<crate::cluster::ClusterNode>,
    /// MIGRATE's cached connections to target instances.
    pub migrate: crate::migrate::MigratePool,
    /// Replication: this node's stream and replicas, and its link to a primary.
    pub repl: crate::replication::Replication,
    /// The append-only file (`appendonly`): its writer, files and rewrites.
    pub aof: Arc<crate::aof::wire::Aof>,
    /// EVAL's script cache, shared by every thread's Lua VM.
    pub scripts: hotkv_scripting::ScriptCache,
    /// FUNCTION libraries, shared likewise.
    pub functions: hotkv_scripting::Functions,
    /// Scripts running long enough to be seen by SCRIPT KILL and to make others BUSY.
    pub script_runs: Arc<crate::script::Runs>,
    /// ACL users, the ACL log.
    pub acl: crate::acl::Acl,
}

impl Server {
    /// The server for the given configuration and command rows.
    pub fn new(settings: Settings, config_file: Option<PathBuf>, registry: Registry) -> Server {
        let rt = Runtime::from_settings(&settings);
        let clients = Clients::default();
        let client_memory = clients.memory.clone();
        let tracking_max_keys = settings.int(t::TRACKING_TABLE_MAX_KEYS).max(0) as usize;
        let engine = settings.engine_config();
        let commands = registry.len();
        let known = Known::new(&registry);
        let (monitor_tx, _) = broadcast::channel(4096);
        let pubsub_limit = rt.obuf_pubsub;
        let repl = crate::replication::Replication::new(&settings);
        let acl = crate::acl::Acl::new(&registry, &settings);
        let srv = Server {
            ks: Keyspace::new(rt.databases),
            engine: ArcSwap::from_pointee(engine),
            rt: ArcSwap::from_pointee(rt),
            settings: ArcSwap::from_pointee(settings),
            registry,
            known,
            clients,
            stats: Stats::new(commands),
            memory: MemoryGauge::default(),
            started: Instant::now(),
            run_id: random_hex(40),
            config_file,
            executable: std::env::current_exe().unwrap_or_default(),
            shutdown: Notify::new(),
            shutting_down: AtomicBool::new(false),
            shutdown_wait: Default::default(),
            lastsave: AtomicI64::new(unix_ms() / 1000),
            persist: Default::default(),
            aof: Default::default(),
            scripts: Default::default(),
            functions: Default::default(),
            script_runs: Default::default(),
            slowlog: Mutex::new(SlowLog::default()),
            latency: Mutex::new(LatencyMonitor::default()),
            monitor_tx,
            monitors: AtomicUsize::new(0),
            ports: Mutex::new((0, 0)),
            evict_lock: Mutex::new(()),
            startup_memory: std::sync::atomic::AtomicU64::new(0),
            pubsub: Arc::default(),
            watches: crate::events::Watches::default(),
            tracking: crate::tracking::Tracking::with_max_keys(tracking_max_keys, client_memory),
            blocked: crate::blocking::Blocked::default(),
            migrate: crate::migrate::MigratePool::default(),
            repl,
            config_lock: Mutex::new(()),
            listeners: Mutex::new(Vec::new()),
            tls: Arc::new(hotkv_tls::TlsManager::new()),
            this: std::sync::OnceLock::new(),
            loops: std::sync::OnceLock::new(),
            active_expire: AtomicBool::new(true),
            cron_paused: AtomicBool::new(false),
            reply_buffers: Default::default(),
            pause: Default::default(),
            freeze: Default::default(),
            router: Arc::new(Standalone),
            cluster: None,
            acl,
        };
        srv.pubsub.limit.store(pubsub_limit);
        srv
    }

    /// This server as an `Arc` (set right after construction by [`Server::into_arc`]).
    pub fn arc(&self) -> Option<Arc<Server>> {
        self.this.get().and_then(std::sync::Weak::upgrade)
    }

    /// Wraps the server in an `Arc` that it can hand out to tasks it spawns.
    pub fn into_arc(self) -> Arc<Server> {
        let srv = Arc::new(self);
        let _ = srv.this.set(Arc::downgrade(&srv));
        srv
    }

    /// Starts shutting down.
    pub fn request_shutdown(&self) {
        self.shutting_down.store(true, Ordering::SeqCst);
        self.shutdown.notify_waiters();
        self.shutdown.notify_one();
    }

    /// Whether shutdown started.
    pub fn is_shutting_down(&self) -> bool {
        self.shutting_down.load(Ordering::SeqCst)
    }

    /// Replaces the configuration and everything derived from it.
    pub fn install_settings(&self, s: Settings) {
        self.pubsub.limit.store(obuf_class(&s, 2));
        self.rt.store(Arc::new(Runtime::from_settings(&s)));
        self.tracking.max_keys.store(s.int(t::TRACKING_TABLE_MAX_KEYS).max(0) as usize, Ordering::Relaxed);
        let mut engine = s.engine_config();
        // The role is the replication state's to say (a cluster replica has no `replicaof`).
        engine.replica = self.repl.is_replica();
        self.engine.store(Arc::new(engine));
        self.settings.store(Arc::new(s));
    }
}

/// Unix time in milliseconds.
pub fn unix_ms() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

/// Unix time in microseconds.
pub fn unix_us() -> i64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_micros() as i64)
}

/// Random lower-case hex from the kernel's generator (run ids).
pub fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n.div_ceil(2)];
    let ok =
        std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes)).is_ok();
    if !ok {
        for (i, b) in bytes.iter_mut().enumerate() {
            *b = (hotkv_engine::policy::random_u64() >> (i % 8)) as u8;
        }
    }
    let mut s: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    s.truncate(n);
    s
}
