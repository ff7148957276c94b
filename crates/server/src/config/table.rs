//! Every configuration directive, declared once.
//!
//! A row gives the Valkey name, aliases, the hotkv.toml path, the type and range, the default
//! (as the text a `.conf` file would hold, so defaults go through the same parser), flags, the
//! hook CONFIG SET runs after changing it, and a one-line description. The `.conf` parser, the
//! toml loader, `--flags`, CONFIG GET/SET/REWRITE and docs/configuration.md all read this
//! table; nothing else declares a directive.
//!
//! The rows follow Valkey 8.0.1's `static_configs[]` (names, aliases, bounds, defaults,
//! mutability), plus the file-only directives `rename-command`, `user` and `loadmodule`, the
//! TLS and cluster directives Valkey 9 and Redis added, and hotkv's own `worker-threads`. The
//! toml key is the name with `-` turned into `_`, without the `tls-` or `cluster-` prefix in
//! those two sections.

use super::value::{Check, Ty};

/// May be changed with CONFIG SET.
pub const MUTABLE: u32 = 1 << 0;
/// A secret (passwords): a caller must not log it; CONFIG GET still shows it, as Valkey does.
pub const SENSITIVE: u32 = 1 << 1;
/// Not listed by CONFIG GET with a pattern nor in the docs; an exact CONFIG GET still finds it.
pub const HIDDEN: u32 = 1 << 2;
/// Accepted for compatibility; hotkv gives it no meaning yet (named once in the startup log).
pub const NO_EFFECT: u32 = 1 << 3;
/// Repeating the directive while loading appends instead of replacing (`save`, `user`).
pub const APPEND: u32 = 1 << 4;
/// CONFIG SET refuses it unless `enable-protected-configs` allows it (`dir`, `dbfilename`).
pub const PROTECTED: u32 = 1 << 5;
/// CONFIG SET runs the hook even when the value does not change (re-reading a file path).
pub const VOLATILE: u32 = 1 << 6;
/// Only files and the command line set it; CONFIG GET and SET do not know it.
pub const FILE_ONLY: u32 = 1 << 7;
/// Read where it is used, on every use, so a change needs no hook.
pub const ON_USE: u32 = 1 << 8;
/// CONFIG SET refuses it with `-LOADING` while a dataset loads (Valkey's
/// DENY_LOADING_CONFIG: the directory, the AOF switch and how a full sync loads).
pub const DENY_LOADING: u32 = 1 << 9;

/// What must happen after a directive changes at runtime. Several rows may share a hook;
/// CONFIG SET runs each distinct hook once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// Rebuild the engine settings snapshot (maxmemory policy, proto-max-bulk-len, hz...).
    Engine,
    /// Reopen listeners (port, bind, tls-port), building the TLS context first if needed.
    Listeners,
    /// Change the log level.
    Logging,
    /// Rebuild the TLS contexts from the tls-* directives (only when TLS is in use).
    Tls,
    /// TLS settings that take effect without a rebuild (reload interval, expected peer names).
    TlsLive,
    /// Re-evaluate memory limits now (maxmemory may require eviction).
    Maxmemory,
    /// Update limits read by connections (timeouts, buffer limits, maxclients).
    Clients,
    /// Update what this node announces to the cluster (addresses, ports, flags).
    Cluster,
    /// Resize the replication backlog or recount good replicas.
    Replication,
    /// Change the working directory (`dir`); fails with the system's reason.
    WorkingDir,
    /// Turn the append-only file on or off, change its fsync policy or timestamps.
    Aof,
    /// Crash reports and the software watchdog (crash-log-enabled, watchdog-period...).
    Crash,
    /// The default user's password follows requirepass.
    Acl,
}

/// One directive.
#[derive(Debug)]
pub struct Directive {
    /// Canonical Valkey name.
    pub name: &'static str,
    /// Other accepted names.
    pub aliases: &'static [&'static str],
    /// `section.key` in hotkv.toml (keys use `_`).
    pub toml: &'static str,
    /// Type and range.
    pub ty: Ty,
    /// Default, as `.conf` text.
    pub default: &'static str,
    /// Bit set of [`MUTABLE`], [`SENSITIVE`], [`HIDDEN`], [`NO_EFFECT`], [`APPEND`],
    /// [`PROTECTED`], [`VOLATILE`], [`FILE_ONLY`], [`ON_USE`].
    pub flags: u32,
    /// Hook run after CONFIG SET changes it.
    pub apply: Option<Hook>,
    /// One line for the docs.
    pub doc: &'static str,
}

impl Directive {
    /// Whether the row has `flag`.
    pub fn has(&self, flag: u32) -> bool {
        self.flags & flag != 0
    }

    /// The hotkv.toml section.
    pub fn section(&self) -> &'static str {
        self.toml.split('.').next().unwrap_or(self.toml)
    }
}

/// Index of a directive in [`TABLE`].
pub type DirId = usize;

macro_rules! directives {
    ($( $id:ident = $name:literal [$($alias:literal),*] $toml:literal : $ty:expr, $default:literal,
        $flags:expr, $apply:expr, $doc:literal; )*) => {
        // An enum numbers the rows without recursing once per row (there are too many rows
        // for the macro recursion limit).
        #[allow(non_camel_case_types, clippy::upper_case_acronyms, dead_code)]
        #[derive(Clone, Copy)]
        #[repr(usize)]
        enum Row { $($id),* }
        $(
            #[allow(missing_docs)]
            pub const $id: DirId = Row::$id as usize;
        )*
        /// The directive table.
        pub static TABLE: &[Directive] = &[$(
            Directive {
                name: $name,
                aliases: &[$($alias),*],
                toml: $toml,
                ty: $ty,
                default: $default,
                flags: $flags,
                apply: $apply,
                doc: $doc,
            },
        )*];
    };
}

/// Finds a directive by name or alias, case-insensitively.
pub fn find(name: &str) -> Option<DirId> {
    TABLE
        .iter()
        .position(|d| d.name.eq_ignore_ascii_case(name) || d.aliases.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

/// Finds a directive by its toml path.
pub fn find_toml(path: &str) -> Option<DirId> {
    TABLE.iter().position(|d| d.toml == path)
}

const INT: u64 = i32::MAX as u64;
const UINT: u64 = u32::MAX as u64;
const LONG: u64 = i64::MAX as u64;
const ULONG: u64 = u64::MAX;
const IMIN: i64 = i32::MIN as i64;
const fn int(min: i64, max: u64) -> Ty {
    Ty::Int { min, max }
}
const fn mem(min: i64, max: u64) -> Ty {
    Ty::Memory { min, max }
}
const B: Ty = Ty::Bool;
const S: Ty = Ty::Str(Check::Any);
const O: Ty = Ty::OptStr(Check::Any);
const P16: Ty = int(0, 65535);
const M: u32 = MUTABLE;
const I: u32 = 0;
const NE: u32 = NO_EFFECT;
const SEN: u32 = SENSITIVE;
const HID: u32 = HIDDEN;
const U: u32 = ON_USE;
const H: Option<Hook> = None;
const ENGINE: Option<Hook> = Some(Hook::Engine);
const LISTEN: Option<Hook> = Some(Hook::Listeners);
const LOG: Option<Hook> = Some(Hook::Logging);
const CLIENTS: Option<Hook> = Some(Hook::Clients);
const TLS: Option<Hook> = Some(Hook::Tls);
const TLS_LIVE: Option<Hook> = Some(Hook::TlsLive);
const CLUSTER: Option<Hook> = Some(Hook::Cluster);
const REPL: Option<Hook> = Some(Hook::Replication);
const AOF: Option<Hook> = Some(Hook::Aof);
const CRASH: Option<Hook> = Some(Hook::Crash);
const ACL: Option<Hook> = Some(Hook::Acl);
const POLICIES: &[&str] = &[
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "noeviction",
];
const PROTECTED_ACTION: Ty = Ty::Enum(&["no", "yes", "local"]);
const SHUTDOWN: Ty = Ty::Flags(&["default", "save", "nosave", "now", "force"]);
const FACILITIES: &[&str] = &["user", "local0", "local1", "local2", "local3", "local4", "local5", "local6", "local7"];

directives! {
    // general
    DAEMONIZE = "daemonize" [] "general.daemonize": B, "no", I, H,
        "Run in the background, detached from the terminal.";
    PIDFILE = "pidfile" [] "general.pidfile": O, "", I, H,
        "Write the process id to this file.";
    LOGLEVEL = "loglevel" [] "general.loglevel": Ty::Enum(&["debug", "verbose", "notice", "warning", "nothing"]),
        "notice", M, LOG, "Log verbosity.";
    LOGFILE = "logfile" [] "general.logfile": S, "", I, H,
        "Log file; empty logs to standard output.";
    DATABASES = "databases" [] "general.databases": int(1, INT), "16", I, H,
        "Number of databases (forced to 1 in cluster mode).";
    WORKER_THREADS = "worker-threads" [] "general.worker_threads": int(0, 1024), "0", I, H,
        "hotkv: threads that run connections and commands; 0 = one per CPU.";
    EVENT_LOOP = "event-loop" [] "general.event_loop": B, "yes", I, H,
        "hotkv: serve clients on one event loop per worker thread (no: a runtime task per client).";
    HZ = "hz" [] "general.hz": int(0, INT), "10", M, ENGINE,
        "Background task frequency (active expiry, timeouts, stats); kept within 1-500.";
    DYNAMIC_HZ = "dynamic-hz" [] "general.dynamic_hz": B, "yes", M | NE, H,
        "Raise hz temporarily with many clients.";
    SUPERVISED = "supervised" [] "general.supervised": Ty::Enum(&["upstart", "systemd", "auto", "no"]), "no", I | NE, H,
        "Talk to upstart or systemd about readiness.";
    ALWAYS_SHOW_LOGO = "always-show-logo" [] "general.always_show_logo": B, "no", I | NE, H,
        "Print the ASCII logo at startup even when not on a terminal.";
    SET_PROC_TITLE = "set-proc-title" [] "general.set_proc_title": B, "yes", I | NE, H,
        "Change the process title shown by ps.";
    PROC_TITLE_TEMPLATE = "proc-title-template" [] "general.proc_title_template": Ty::Str(Check::ProcTitle),
        "\"{title} {listen-addr} {server-mode}\"", M | NE, H, "Template of the process title.";
    SYSLOG_ENABLED = "syslog-enabled" [] "general.syslog_enabled": B, "no", I | NE, H,
        "Also log to syslog.";
    SYSLOG_IDENT = "syslog-ident" [] "general.syslog_ident": S, "hotkv", I | NE, H,
        "Syslog identity.";
    SYSLOG_FACILITY = "syslog-facility" [] "general.syslog_facility": Ty::Enum(FACILITIES), "local0", I | NE, H,
        "Syslog facility.";
    CRASH_LOG_ENABLED = "crash-log-enabled" [] "general.crash_log_enabled": B, "yes", M, CRASH,
        "Write a crash report (signal, stack) to the log on fatal signals.";
    CRASH_MEMCHECK_ENABLED = "crash-memcheck-enabled" [] "general.crash_memcheck_enabled": B, "yes", M | NE, H,
        "Run a memory test after a crash.";
    USE_EXIT_ON_PANIC = "use-exit-on-panic" [] "general.use_exit_on_panic": B, "no", M | HID, CRASH,
        "Exit instead of aborting on panic (tests).";
    ENABLE_DEBUG_ASSERT = "enable-debug-assert" [] "general.enable_debug_assert": B, "no", I | HID | NE, H,
        "Enable expensive assertions (tests).";
    DEBUG_CONTEXT = "debug-context" [] "general.debug_context": S, "", M | HID | NE, H,
        "Free text included in crash reports.";
    SHUTDOWN_TIMEOUT = "shutdown-timeout" [] "general.shutdown_timeout": int(0, INT), "10", M | U, H,
        "Seconds to wait for replicas to catch up on shutdown.";
    SHUTDOWN_ON_SIGINT = "shutdown-on-sigint" [] "general.shutdown_on_sigint": SHUTDOWN, "default", M | U, H,
        "SHUTDOWN flags used on SIGINT.";
    SHUTDOWN_ON_SIGTERM = "shutdown-on-sigterm" [] "general.shutdown_on_sigterm": SHUTDOWN, "default", M | U, H,
        "SHUTDOWN flags used on SIGTERM.";
    IO_THREADS = "io-threads" [] "general.io_threads": int(1, 128), "1", I | NE, H,
        "Valkey I/O threads; hotkv sizes its pool with worker-threads.";
    IO_THREADS_DO_READS = "io-threads-do-reads" [] "general.io_threads_do_reads": B, "yes", I | NE, H,
        "Let I/O threads read and parse requests.";
    EVENTS_PER_IO_THREAD = "events-per-io-thread" [] "general.events_per_io_thread": int(0, INT), "2", M | NE, H,
        "Events per I/O thread before another thread is used.";
    SERVER_CPULIST = "server-cpulist" ["server_cpulist"] "general.server_cpulist": O, "", I | NE, H,
        "CPUs the main threads are pinned to.";
    BIO_CPULIST = "bio-cpulist" ["bio_cpulist"] "general.bio_cpulist": O, "", I | NE, H,
        "CPUs the background I/O threads are pinned to.";
    AOF_REWRITE_CPULIST = "aof-rewrite-cpulist" ["aof_rewrite_cpulist"] "general.aof_rewrite_cpulist": O, "", I | NE, H,
        "CPUs the AOF rewrite child is pinned to.";
    BGSAVE_CPULIST = "bgsave-cpulist" ["bgsave_cpulist"] "general.bgsave_cpulist": O, "", I | NE, H,
        "CPUs the snapshot child is pinned to.";
    IGNORE_WARNINGS = "ignore-warnings" [] "general.ignore_warnings": S, "", M | NE, H,
        "Startup warnings to silence.";
    LOCALE_COLLATE = "locale-collate" [] "general.locale_collate": S, "", M | NE, H,
        "Locale Valkey sorts strings with (SORT ALPHA); hotkv always compares as the C locale does, byte order up to the first NUL.";
    EXTENDED_REDIS_COMPATIBILITY = "extended-redis-compatibility" [] "general.extended_redis_compatibility": B, "no",
        M | NE, H, "Reply as Redis where Valkey differs (server name in HELLO, errors).";
    HIDE_USER_DATA_FROM_LOG = "hide-user-data-from-log" [] "general.hide_user_data_from_log": B, "yes", M | NE, H,
        "Keep keys and values out of log lines.";
    AVAILABILITY_ZONE = "availability-zone" [] "general.availability_zone": S, "", M | NE, H,
        "Availability zone reported by HELLO.";
    OOM_SCORE_ADJ = "oom-score-adj" [] "general.oom_score_adj": Ty::Enum(&["no", "yes|relative", "absolute"]), "no",
        M | NE, H, "Set the kernel's OOM score of the process.";
    OOM_SCORE_ADJ_VALUES = "oom-score-adj-values" [] "general.oom_score_adj_values": Ty::OomValues, "0 200 800",
        M | NE, H, "OOM score adjustments for a primary, a replica and background children.";
    // network
    BIND = "bind" [] "network.bind": Ty::Bind, "* -::*", M, LISTEN,
        "Addresses to listen on; `-` before an address makes it optional.";
    BIND_SOURCE_ADDR = "bind-source-addr" [] "network.bind_source_addr": O, "", M | NE, H,
        "Source address of outgoing connections.";
    PORT = "port" [] "network.port": P16, "6379", M, LISTEN,
        "TCP port for plain-text clients; 0 turns the plain listener off.";
    PROTECTED_MODE = "protected-mode" [] "network.protected_mode": B, "yes", M | U, H,
        "Without a password and bound beyond loopback, refuse non-loopback clients.";
    TCP_BACKLOG = "tcp-backlog" [] "network.tcp_backlog": int(0, INT), "511", I, H,
        "Listen backlog.";
    TCP_KEEPALIVE = "tcp-keepalive" [] "network.tcp_keepalive": int(0, INT), "300", M | U, H,
        "TCP keepalive interval in seconds for client sockets (0 = off).";
    UNIXSOCKET = "unixsocket" [] "network.unixsocket": O, "", I, H,
        "Unix socket to listen on too (plain text, no TLS); unlinked first, removed at shutdown.";
    UNIXSOCKETPERM = "unixsocketperm" [] "network.unixsocketperm": Ty::Octal { max: 0o777 }, "0", I, H,
        "Permissions of the unix socket (octal; 0 keeps what the umask gives).";
    UNIXSOCKETGROUP = "unixsocketgroup" [] "network.unixsocketgroup": O, "", I, H,
        "Group given to the unix socket, by name or number.";
    SOCKET_MARK_ID = "socket-mark-id" [] "network.socket_mark_id": int(0, UINT), "0", I | NE, H,
        "Mark (SO_MARK) set on listening sockets.";
    MAX_NEW_CONNECTIONS_PER_CYCLE = "max-new-connections-per-cycle" [] "network.max_new_connections_per_cycle":
        int(1, 1000), "10", M | NE, H, "Plain connections accepted per event-loop cycle.";
    MAX_NEW_TLS_CONNECTIONS_PER_CYCLE = "max-new-tls-connections-per-cycle" []
        "network.max_new_tls_connections_per_cycle": int(1, 1000), "1", M | NE, H,
        "TLS connections accepted per event-loop cycle.";
    // security
    REQUIREPASS = "requirepass" [] "security.requirepass": O, "", M | SEN, ACL,
        "Password of the default user.";
    ACLFILE = "aclfile" [] "security.aclfile": S, "", I, H,
        "File of ACL users.";
    ACLLOG_MAX_LEN = "acllog-max-len" [] "security.acllog_max_len": int(0, LONG), "128", M | U, H,
        "Entries kept by ACL LOG.";
    ACL_PUBSUB_DEFAULT = "acl-pubsub-default" [] "security.acl_pubsub_default":
        Ty::Enum(&["resetchannels", "allchannels"]), "resetchannels", M | U, H, "Channel permissions of new users.";
    ENABLE_PROTECTED_CONFIGS = "enable-protected-configs" [] "security.enable_protected_configs": PROTECTED_ACTION,
        "no", I, H, "Allow CONFIG SET of protected directives (dir, dbfilename): no, yes or local clients.";
    ENABLE_DEBUG_COMMAND = "enable-debug-command" [] "security.enable_debug_command": PROTECTED_ACTION, "no", I, H,
        "Allow DEBUG: no, yes or local clients.";
    ENABLE_MODULE_COMMAND = "enable-module-command" [] "security.enable_module_command": PROTECTED_ACTION, "no",
        I | NE, H, "Allow MODULE: no, yes or local clients.";
    SANITIZE_DUMP_PAYLOAD = "sanitize-dump-payload" [] "security.sanitize_dump_payload":
        Ty::Enum(&["no", "yes", "clients"]), "no", M | NE, H, "Deep checks of RESTORE payloads.";
    RENAME_COMMAND = "rename-command" [] "security.rename_command": Ty::Lines { min: 2, max: 2 }, "",
        FILE_ONLY | APPEND, H, "Rename a command (`rename-command CONFIG \"\"` removes it).";
    USER = "user" [] "security.user": Ty::Lines { min: 1, max: usize::MAX }, "", FILE_ONLY | APPEND, H,
        "Declare an ACL user with its rules; without an aclfile, CONFIG REWRITE writes every current user here.";
    // clients
    MAXCLIENTS = "maxclients" [] "clients.maxclients": int(1, UINT), "10000", M, CLIENTS,
        "Maximum number of connected clients.";
    TIMEOUT = "timeout" [] "clients.timeout": int(0, INT), "0", M, CLIENTS,
        "Close a client after this many idle seconds (0 = never).";
    CLIENT_OUTPUT_BUFFER_LIMIT = "client-output-buffer-limit" [] "clients.client_output_buffer_limit":
        Ty::BufferLimits, "normal 0 0 0 replica 256mb 64mb 60 pubsub 32mb 8mb 60", M | U, H,
        "Output buffer limits per client class: hard, soft and soft seconds. What waits to reach a \
         client beyond its first 16 KiB counts (CLIENT LIST omem); a reply being built stops at the \
         hard limit, and the clients cron closes a client whose soft limit expired with no traffic. \
         A normal client whose unread replies pass 64mb and no hard limit above that is no longer \
         read until it reads.";
    MAXMEMORY_CLIENTS = "maxmemory-clients" [] "clients.maxmemory_clients": Ty::MemoryPercent { max: LONG }, "0",
        M, CLIENTS, "Memory all client connections may use together, in bytes or % of maxmemory (at least \
         128kb); past it the largest are closed. 0 = no limit.";
    TRACKING_TABLE_MAX_KEYS = "tracking-table-max-keys" [] "clients.tracking_table_max_keys": int(0, LONG), "1000000",
        M, CLIENTS, "Keys remembered for client-side caching.";
    // limits
    PROTO_MAX_BULK_LEN = "proto-max-bulk-len" [] "limits.proto_max_bulk_len": mem(1024 * 1024, LONG), "512mb", M,
        ENGINE, "Largest single request argument and string value.";
    CLIENT_QUERY_BUFFER_LIMIT = "client-query-buffer-limit" [] "limits.client_query_buffer_limit":
        mem(1024 * 1024, LONG), "1gb", M, CLIENTS, "Largest pending request data per client.";
    BUSY_REPLY_THRESHOLD = "busy-reply-threshold" ["lua-time-limit"] "limits.busy_reply_threshold": int(0, LONG),
        "5000", M | U, H, "Milliseconds a script may run before others get BUSY replies.";
    // memory
    MAXMEMORY = "maxmemory" [] "memory.maxmemory": mem(0, ULONG), "0", M, Some(Hook::Maxmemory),
        "Memory limit for the dataset; 0 = none.";
    MAXMEMORY_POLICY = "maxmemory-policy" [] "memory.maxmemory_policy": Ty::Enum(POLICIES), "noeviction", M, ENGINE,
        "What to evict when over maxmemory.";
    MAXMEMORY_SAMPLES = "maxmemory-samples" [] "memory.maxmemory_samples": int(1, 64), "5", M, ENGINE,
        "Keys sampled per eviction round.";
    MAXMEMORY_EVICTION_TENACITY = "maxmemory-eviction-tenacity" [] "memory.maxmemory_eviction_tenacity":
        int(0, 100), "10", M, ENGINE, "How long one command may spend evicting.";
    LFU_LOG_FACTOR = "lfu-log-factor" [] "memory.lfu_log_factor": int(0, INT), "10", M, ENGINE,
        "Logarithmic factor of the LFU counter.";
    LFU_DECAY_TIME = "lfu-decay-time" [] "memory.lfu_decay_time": int(0, INT), "1", M, ENGINE,
        "Minutes for the LFU counter to decay by one.";
    ACTIVE_EXPIRE_EFFORT = "active-expire-effort" [] "memory.active_expire_effort": int(1, 10), "1", M, ENGINE,
        "Effort of the active expire cycle.";
    LAZYFREE_LAZY_EVICTION = "lazyfree-lazy-eviction" [] "memory.lazyfree_lazy_eviction": B, "yes", M, ENGINE,
        "Replicate evictions as UNLINK (values are always freed at once).";
    LAZYFREE_LAZY_EXPIRE = "lazyfree-lazy-expire" [] "memory.lazyfree_lazy_expire": B, "yes", M, ENGINE,
        "Replicate expirations as UNLINK (values are always freed at once).";
    LAZYFREE_LAZY_SERVER_DEL = "lazyfree-lazy-server-del" [] "memory.lazyfree_lazy_server_del": B, "yes", M, ENGINE,
        "Replicate the server's own deletions as UNLINK (values are always freed at once).";
    LAZYFREE_LAZY_USER_DEL = "lazyfree-lazy-user-del" [] "memory.lazyfree_lazy_user_del": B, "yes", M | NE, H,
        "Make DEL behave like UNLINK.";
    LAZYFREE_LAZY_USER_FLUSH = "lazyfree-lazy-user-flush" [] "memory.lazyfree_lazy_user_flush": B, "yes", M | NE, H,
        "Make FLUSHALL/FLUSHDB asynchronous by default.";
    ACTIVEDEFRAG = "activedefrag" [] "memory.activedefrag": B, "no", M | NE, H,
        "Active defragmentation.";
    ACTIVE_DEFRAG_IGNORE_BYTES = "active-defrag-ignore-bytes" [] "memory.active_defrag_ignore_bytes": mem(1, LONG),
        "100mb", M | NE, H, "Fragmentation waste below which defrag does not start.";
    ACTIVE_DEFRAG_THRESHOLD_LOWER = "active-defrag-threshold-lower" [] "memory.active_defrag_threshold_lower":
        int(0, 1000), "10", M | NE, H, "Fragmentation percentage at which defrag starts.";
    ACTIVE_DEFRAG_THRESHOLD_UPPER = "active-defrag-threshold-upper" [] "memory.active_defrag_threshold_upper":
        int(0, 1000), "100", M | NE, H, "Fragmentation percentage of maximum defrag effort.";
    ACTIVE_DEFRAG_CYCLE_MIN = "active-defrag-cycle-min" [] "memory.active_defrag_cycle_min": int(1, 99), "1",
        M | NE, H, "Minimum CPU percentage spent on defrag.";
    ACTIVE_DEFRAG_CYCLE_MAX = "active-defrag-cycle-max" [] "memory.active_defrag_cycle_max": int(1, 99), "25",
        M | NE, H, "Maximum CPU percentage spent on defrag.";
    ACTIVE_DEFRAG_MAX_SCAN_FIELDS = "active-defrag-max-scan-fields" [] "memory.active_defrag_max_scan_fields":
        int(1, LONG), "1000", M | NE, H, "Collections with more fields are defragmented separately.";
    JEMALLOC_BG_THREAD = "jemalloc-bg-thread" [] "memory.jemalloc_bg_thread": B, "yes", M | NE, H,
        "Let jemalloc purge memory from a background thread.";
    DISABLE_THP = "disable-thp" [] "memory.disable_thp": B, "yes", I | NE, H,
        "Turn transparent huge pages off for the process.";
    // persistence
    DIR = "dir" [] "persistence.dir": Ty::Str(Check::NonEmpty), "./", M | PROTECTED | DENY_LOADING, Some(Hook::WorkingDir),
        "Working directory (files such as nodes.conf are kept here).";
    SAVE = "save" [] "persistence.save": Ty::Save, "3600 1 300 100 60 10000", M | APPEND | U, H,
        "Snapshot after <seconds> if at least <changes> writes; `\"\"` for none.";
    DBFILENAME = "dbfilename" [] "persistence.dbfilename": Ty::Str(Check::FileName), "dump.rdb", M | PROTECTED | U, H,
        "Snapshot file name.";
    RDBCOMPRESSION = "rdbcompression" [] "persistence.rdbcompression": B, "yes", M, ENGINE,
        "Compress strings in snapshots and DUMP payloads.";
    RDBCHECKSUM = "rdbchecksum" [] "persistence.rdbchecksum": B, "yes", I, H,
        "Checksum snapshots.";
    // Valkey deletes the RDB a disk-based full sync wrote when persistence is off; hotkv's full
    // syncs write no file on either end (docs/persistence.md), so there is nothing to read it.
    RDB_DEL_SYNC_FILES = "rdb-del-sync-files" [] "persistence.rdb_del_sync_files": B, "no", M | U, H,
        "On a node that persists nothing, delete the snapshot file a replica received from its primary once loaded.";
    RDB_SAVE_INCREMENTAL_FSYNC = "rdb-save-incremental-fsync" [] "persistence.rdb_save_incremental_fsync": B, "yes",
        M | U, H, "Fsync snapshots every 4 MB while writing.";
    STOP_WRITES_ON_BGSAVE_ERROR = "stop-writes-on-bgsave-error" [] "persistence.stop_writes_on_bgsave_error": B,
        "yes", M | U, H, "Refuse writes after a failed snapshot.";
    APPENDONLY = "appendonly" [] "persistence.appendonly": B, "no", M | DENY_LOADING, AOF,
        "Append-only file.";
    APPENDFILENAME = "appendfilename" [] "persistence.appendfilename": Ty::Str(Check::FileName), "appendonly.aof",
        I, H, "Base name of the append-only files.";
    APPENDDIRNAME = "appenddirname" [] "persistence.appenddirname": Ty::Str(Check::DirName), "appendonlydir", I, H,
        "Directory of the append-only files.";
    APPENDFSYNC = "appendfsync" [] "persistence.appendfsync": Ty::Enum(&["everysec", "always", "no"]), "everysec",
        M, AOF, "When to fsync the append-only file.";
    NO_APPENDFSYNC_ON_REWRITE = "no-appendfsync-on-rewrite" [] "persistence.no_appendfsync_on_rewrite": B, "no",
        M, AOF, "Skip fsync while a rewrite or snapshot runs.";
    AUTO_AOF_REWRITE_PERCENTAGE = "auto-aof-rewrite-percentage" [] "persistence.auto_aof_rewrite_percentage":
        int(0, INT), "100", M | U, H, "Rewrite the append-only file when it grew by this percentage.";
    AUTO_AOF_REWRITE_MIN_SIZE = "auto-aof-rewrite-min-size" [] "persistence.auto_aof_rewrite_min_size": mem(0, LONG),
        "64mb", M | U, H, "Smallest append-only file that is rewritten automatically.";
    AOF_LOAD_TRUNCATED = "aof-load-truncated" [] "persistence.aof_load_truncated": B, "yes", M | U, H,
        "Load a truncated append-only file instead of refusing to start.";
    AOF_USE_RDB_PREAMBLE = "aof-use-rdb-preamble" [] "persistence.aof_use_rdb_preamble": B, "yes", M | U, H,
        "Start rewritten append-only files with a snapshot.";
    AOF_TIMESTAMP_ENABLED = "aof-timestamp-enabled" [] "persistence.aof_timestamp_enabled": B, "no", M, AOF,
        "Write timestamps into the append-only file.";
    AOF_REWRITE_INCREMENTAL_FSYNC = "aof-rewrite-incremental-fsync" [] "persistence.aof_rewrite_incremental_fsync":
        B, "yes", M | U, H, "Fsync every 4 MB while rewriting.";
    AOF_DISABLE_AUTO_GC = "aof-disable-auto-gc" [] "persistence.aof_disable_auto_gc": B, "no", M | HID, AOF,
        "Keep the history files a rewrite retires (marked `h` in the manifest) instead of deleting them.";
    RDB_KEY_SAVE_DELAY = "rdb-key-save-delay" [] "persistence.rdb_key_save_delay": int(IMIN, INT), "0", M | HID | U, H,
        "Delay per key while saving (tests).";
    KEY_LOAD_DELAY = "key-load-delay" [] "persistence.key_load_delay": int(IMIN, INT), "0", M | HID | U, H,
        "Delay per key while loading (tests).";
    LOADING_PROCESS_EVENTS_INTERVAL_BYTES = "loading-process-events-interval-bytes" []
        "persistence.loading_process_events_interval_bytes": int(1024, INT), "2097152", M | HID | U, H,
        "Bytes of a full sync's snapshot a replica loads, holding its clients, before it lets them (and the cluster bus) run again.";
    // replication
    REPLICAOF = "replicaof" ["slaveof"] "replication.replicaof": Ty::ReplicaOf, "", I, H,
        "Replicate <host> <port> at startup.";
    PRIMARYAUTH = "primaryauth" ["masterauth"] "replication.primaryauth": O, "", M | SEN | U, H,
        "Password used to authenticate with the primary.";
    PRIMARYUSER = "primaryuser" ["masteruser"] "replication.primaryuser": O, "", M | SEN | U, H,
        "User used to authenticate with the primary.";
    REPLICA_SERVE_STALE_DATA = "replica-serve-stale-data" ["slave-serve-stale-data"]
        "replication.replica_serve_stale_data": B, "yes", M | U, H, "Serve reads while the link is down.";
    REPLICA_READ_ONLY = "replica-read-only" ["slave-read-only"] "replication.replica_read_only": B, "yes", M | U, H,
        "Refuse writes on a replica.";
    REPLICA_LAZY_FLUSH = "replica-lazy-flush" ["slave-lazy-flush"] "replication.replica_lazy_flush": B, "yes",
        M | NE, H, "Flush asynchronously before a full sync.";
    REPLICA_IGNORE_MAXMEMORY = "replica-ignore-maxmemory" ["slave-ignore-maxmemory"]
        "replication.replica_ignore_maxmemory": B, "yes", M | NE, H, "A replica does not evict on its own.";
    REPLICA_IGNORE_DISK_WRITE_ERRORS = "replica-ignore-disk-write-errors" []
        "replication.replica_ignore_disk_write_errors": B, "no", M | NE, H, "Go on replicating after a write error.";
    REPLICA_ANNOUNCED = "replica-announced" [] "replication.replica_announced": B, "yes", M | U, H,
        "List this replica in Sentinel's replies.";
    REPLICA_PRIORITY = "replica-priority" ["slave-priority"] "replication.replica_priority": int(0, INT), "100",
        M | U, H, "Promotion priority; lower goes first, 0 never.";
    REPLICA_ANNOUNCE_IP = "replica-announce-ip" ["slave-announce-ip"] "replication.replica_announce_ip": O, "",
        M | U, H, "Address this replica reports to its primary.";
    REPLICA_ANNOUNCE_PORT = "replica-announce-port" ["slave-announce-port"] "replication.replica_announce_port": P16,
        "0", M | U, H, "Port this replica reports to its primary.";
    REPL_DISKLESS_SYNC = "repl-diskless-sync" [] "replication.repl_diskless_sync": B, "yes", M | U, H,
        "Full syncs always go over the socket without a file; `no` starts each at once, without the \
         wait of repl-diskless-sync-delay.";
    REPL_DISKLESS_SYNC_DELAY = "repl-diskless-sync-delay" [] "replication.repl_diskless_sync_delay": int(0, INT), "5",
        M | U, H, "Seconds a full sync waits after its replica asked, so that the replicas asking meanwhile \
         share its snapshot.";
    REPL_DISKLESS_SYNC_MAX_REPLICAS = "repl-diskless-sync-max-replicas" []
        "replication.repl_diskless_sync_max_replicas": int(0, INT), "0", M | U, H,
        "Start a delayed full sync as soon as this many replicas wait (0: wait the whole delay).";
    REPL_DISKLESS_LOAD = "repl-diskless-load" [] "replication.repl_diskless_load":
        Ty::Enum(&["disabled", "on-empty-db", "swapdb"]), "disabled", M | U | DENY_LOADING, H,
        "How a replica loads a full sync: `disabled` receives it into a file first, keeping the old data and history until it is whole; `on-empty-db` loads from the socket when the replica holds no key, as `disabled` otherwise; `swapdb` loads from the socket beside the old data and swaps at the end, serving the old data meanwhile when the primary's history is the replica's.";
    DUAL_CHANNEL_REPLICATION_ENABLED = "dual-channel-replication-enabled" []
        "replication.dual_channel_replication_enabled": B, "no", M | NE, H,
        "Stream the backlog on a second connection during a full sync.";
    REPL_DISABLE_TCP_NODELAY = "repl-disable-tcp-nodelay" [] "replication.repl_disable_tcp_nodelay": B, "no",
        M | NE, H, "Batch small packets to replicas.";
    REPL_BACKLOG_SIZE = "repl-backlog-size" [] "replication.repl_backlog_size": mem(1, LONG), "10mb", M, REPL,
        "Size of the replication backlog.";
    REPL_BACKLOG_TTL = "repl-backlog-ttl" [] "replication.repl_backlog_ttl": int(0, LONG), "3600", M, REPL,
        "Seconds without replicas before the backlog is freed.";
    REPL_TIMEOUT = "repl-timeout" [] "replication.repl_timeout": int(1, INT), "60", M, REPL,
        "Replication timeout in seconds.";
    REPL_PING_REPLICA_PERIOD = "repl-ping-replica-period" ["repl-ping-slave-period"]
        "replication.repl_ping_replica_period": int(1, INT), "10", M, REPL, "Seconds between pings to replicas.";
    MIN_REPLICAS_TO_WRITE = "min-replicas-to-write" ["min-slaves-to-write"] "replication.min_replicas_to_write":
        int(0, INT), "0", M, REPL, "Refuse writes with fewer good replicas.";
    MIN_REPLICAS_MAX_LAG = "min-replicas-max-lag" ["min-slaves-max-lag"] "replication.min_replicas_max_lag":
        int(0, INT), "10", M, REPL, "Seconds of lag a good replica may have.";
    PROPAGATION_ERROR_BEHAVIOR = "propagation-error-behavior" [] "replication.propagation_error_behavior":
        Ty::Enum(&["ignore", "panic", "panic-on-replicas"]), "ignore", M | NE, H,
        "What a replica does when a replicated command fails.";
    // cluster
    CLUSTER_ENABLED = "cluster-enabled" [] "cluster.enabled": B, "no", I, H,
        "Run as a cluster node.";
    CLUSTER_CONFIG_FILE = "cluster-config-file" [] "cluster.config_file": Ty::Str(Check::NonEmpty), "nodes.conf",
        I, H, "File where the node keeps the cluster state.";
    CLUSTER_NODE_TIMEOUT = "cluster-node-timeout" [] "cluster.node_timeout": int(0, LONG), "15000", M, CLUSTER,
        "Milliseconds before an unreachable node is considered failing.";
    CLUSTER_PORT = "cluster-port" [] "cluster.port": P16, "0", I, H,
        "Cluster bus port; 0 = client port + 10000.";
    CLUSTER_ANNOUNCE_IP = "cluster-announce-ip" [] "cluster.announce_ip": O, "", M, CLUSTER,
        "Address announced to other nodes.";
    CLUSTER_ANNOUNCE_CLIENT_IPV4 = "cluster-announce-client-ipv4" [] "cluster.announce_client_ipv4":
        Ty::OptStr(Check::Ipv4), "", M, CLUSTER, "IPv4 address announced to IPv4 clients.";
    CLUSTER_ANNOUNCE_CLIENT_IPV6 = "cluster-announce-client-ipv6" [] "cluster.announce_client_ipv6":
        Ty::OptStr(Check::Ipv6), "", M, CLUSTER, "IPv6 address announced to IPv6 clients.";
    CLUSTER_ANNOUNCE_HOSTNAME = "cluster-announce-hostname" [] "cluster.announce_hostname": Ty::OptStr(Check::Hostname),
        "", M, CLUSTER, "Host name announced to other nodes and clients.";
    CLUSTER_ANNOUNCE_HUMAN_NODENAME = "cluster-announce-human-nodename" [] "cluster.announce_human_nodename":
        Ty::OptStr(Check::NodeName), "", M, CLUSTER, "Name shown for this node in logs.";
    CLUSTER_ANNOUNCE_PORT = "cluster-announce-port" [] "cluster.announce_port": P16, "0", M, CLUSTER,
        "Client port announced to other nodes; 0 = port.";
    CLUSTER_ANNOUNCE_TLS_PORT = "cluster-announce-tls-port" [] "cluster.announce_tls_port": P16, "0", M, CLUSTER,
        "TLS client port announced to other nodes; 0 = tls-port.";
    CLUSTER_ANNOUNCE_BUS_PORT = "cluster-announce-bus-port" [] "cluster.announce_bus_port": P16, "0", M, CLUSTER,
        "Bus port announced to other nodes; 0 = the bus port.";
    CLUSTER_PREFERRED_ENDPOINT_TYPE = "cluster-preferred-endpoint-type" [] "cluster.preferred_endpoint_type":
        Ty::Enum(&["ip", "hostname", "unknown-endpoint"]), "ip", M | NE, CLUSTER,
        "Endpoint given to clients in redirects and CLUSTER SLOTS.";
    CLUSTER_REQUIRE_FULL_COVERAGE = "cluster-require-full-coverage" [] "cluster.require_full_coverage": B, "yes",
        M, CLUSTER, "Stop serving when some slot has no owner.";
    CLUSTER_ALLOW_READS_WHEN_DOWN = "cluster-allow-reads-when-down" [] "cluster.allow_reads_when_down": B, "no",
        M, CLUSTER, "Serve reads while the cluster is down.";
    CLUSTER_ALLOW_PUBSUBSHARD_WHEN_DOWN = "cluster-allow-pubsubshard-when-down" []
        "cluster.allow_pubsubshard_when_down": B, "yes", M, CLUSTER, "Serve sharded pub/sub while the cluster is down.";
    CLUSTER_REPLICA_VALIDITY_FACTOR = "cluster-replica-validity-factor" ["cluster-slave-validity-factor"]
        "cluster.replica_validity_factor": int(0, INT), "10", M, CLUSTER,
        "How stale a replica may be to fail over (factor of node timeout; 0 = always).";
    CLUSTER_REPLICA_NO_FAILOVER = "cluster-replica-no-failover" ["cluster-slave-no-failover"]
        "cluster.replica_no_failover": B, "no", M, CLUSTER, "Never fail over automatically to this replica.";
    CLUSTER_MIGRATION_BARRIER = "cluster-migration-barrier" [] "cluster.migration_barrier": int(0, INT), "1", M, CLUSTER,
        "Replicas a primary keeps before one may migrate to an orphaned primary.";
    CLUSTER_ALLOW_REPLICA_MIGRATION = "cluster-allow-replica-migration" [] "cluster.allow_replica_migration": B,
        "yes", M, CLUSTER, "Let replicas migrate to orphaned primaries, and follow a node that took all their shard's slots.";
    CLUSTER_BLACKLIST_TTL = "cluster-blacklist-ttl" [] "cluster.blacklist_ttl": int(0, ULONG), "60", M | NE, H,
        "Seconds a forgotten node stays ignored.";
    CLUSTER_LINK_SENDBUF_LIMIT = "cluster-link-sendbuf-limit" [] "cluster.link_sendbuf_limit": mem(0, ULONG), "0",
        M, CLUSTER, "Memory a bus link may take (its queued messages); past it the link is closed; 0 = none.";
    CLUSTER_SLOT_STATS_ENABLED = "cluster-slot-stats-enabled" [] "cluster.slot_stats_enabled": B, "no", M | NE, H,
        "Track CPU and network use per slot.";
    CLUSTER_PING_INTERVAL = "cluster-ping-interval" [] "cluster.ping_interval": int(0, LONG), "0", M | HID, CLUSTER,
        "Milliseconds a node may go without a PING from this one; 0 = half the node timeout (tests).";
    CLUSTER_BUS_PORT_PROTECTED_MODE = "cluster-bus-port-protected-mode" [] "cluster.bus_port_protected_mode": B, "no",
        M | U | NE, H, "Redis-compatible, not in Valkey: refuse a cluster bus without tls-cluster.";
    // tls
    TLS_PORT = "tls-port" [] "tls.port": P16, "0", M, LISTEN,
        "TCP port for TLS clients; 0 = no TLS listener.";
    TLS_CERT_FILE = "tls-cert-file" [] "tls.cert_file": O, "", M | VOLATILE, TLS,
        "Server certificate chain (PEM), also the client certificate of outgoing links.";
    TLS_KEY_FILE = "tls-key-file" [] "tls.key_file": O, "", M | VOLATILE, TLS,
        "Private key of tls-cert-file (PEM).";
    TLS_KEY_FILE_PASS = "tls-key-file-pass" [] "tls.key_file_pass": O, "", M | SEN, TLS,
        "Passphrase of an encrypted tls-key-file.";
    TLS_CLIENT_CERT_FILE = "tls-client-cert-file" [] "tls.client_cert_file": O, "", M | VOLATILE, TLS,
        "Certificate presented on outgoing links (replication, cluster bus).";
    TLS_CLIENT_KEY_FILE = "tls-client-key-file" [] "tls.client_key_file": O, "", M | VOLATILE, TLS,
        "Private key of tls-client-cert-file.";
    TLS_CLIENT_KEY_FILE_PASS = "tls-client-key-file-pass" [] "tls.client_key_file_pass": O, "", M | SEN, TLS,
        "Passphrase of an encrypted tls-client-key-file.";
    TLS_DH_PARAMS_FILE = "tls-dh-params-file" [] "tls.dh_params_file": O, "", M | VOLATILE, TLS,
        "Diffie-Hellman parameters for DHE cipher suites.";
    TLS_CA_CERT_FILE = "tls-ca-cert-file" [] "tls.ca_cert_file": O, "", M | VOLATILE, TLS,
        "CA bundle that verifies every peer.";
    TLS_CA_CERT_DIR = "tls-ca-cert-dir" [] "tls.ca_cert_dir": O, "", M | VOLATILE, TLS,
        "Directory of CA certificates that verify every peer.";
    TLS_AUTH_CLIENTS = "tls-auth-clients" [] "tls.auth_clients": Ty::Enum(&["no", "yes", "optional"]), "yes",
        M | U, H, "Client certificates on the client port: required, optional or not asked for.";
    TLS_AUTH_CLIENTS_USER = "tls-auth-clients-user" [] "tls.auth_clients_user": Ty::Enum(&["off", "CN", "URI"]), "off",
        M | U, H, "Valkey 9: log in as the enabled ACL user named by the client certificate's CN or URI SAN.";
    TLS_REPLICATION = "tls-replication" [] "tls.replication": B, "no", M, TLS,
        "Connect to the primary over TLS.";
    TLS_CLUSTER = "tls-cluster" [] "tls.cluster": B, "no", M, TLS,
        "Use TLS on the cluster bus.";
    TLS_PROTOCOLS = "tls-protocols" [] "tls.protocols": Ty::OptStr(Check::TlsProtocols), "", M, TLS,
        "TLS versions accepted; empty = TLSv1.2 TLSv1.3.";
    TLS_CIPHERS = "tls-ciphers" [] "tls.ciphers": O, "", M, TLS,
        "TLS 1.2 cipher list.";
    TLS_CIPHERSUITES = "tls-ciphersuites" [] "tls.ciphersuites": O, "", M, TLS,
        "TLS 1.3 cipher suites.";
    TLS_PREFER_SERVER_CIPHERS = "tls-prefer-server-ciphers" [] "tls.prefer_server_ciphers": B, "no", M, TLS,
        "Prefer the server's cipher order over the client's.";
    TLS_SESSION_CACHING = "tls-session-caching" [] "tls.session_caching": B, "yes", M, TLS,
        "Cache TLS sessions for resumption.";
    TLS_SESSION_CACHE_SIZE = "tls-session-cache-size" [] "tls.session_cache_size": int(0, INT), "20480", M, TLS,
        "Sessions cached; 0 = unlimited.";
    TLS_SESSION_CACHE_TIMEOUT = "tls-session-cache-timeout" [] "tls.session_cache_timeout": int(0, INT), "300",
        M, TLS, "Seconds a cached session stays valid.";
    TLS_AUTO_RELOAD_INTERVAL = "tls-auto-reload-interval" [] "tls.auto_reload_interval": int(0, INT), "0", M, TLS_LIVE,
        "Valkey 9: seconds between checks of the TLS files for changes; 0 = off.";
    TLS_EXPECTED_PEER_NAME = "tls-expected-peer-name" [] "tls.expected_peer_name": Ty::OptStr(Check::PeerNames), "",
        M, TLS_LIVE, "Redis-compatible, not in Valkey: names other nodes' certificates must carry.";
    // latency
    SLOWLOG_LOG_SLOWER_THAN = "slowlog-log-slower-than" [] "latency.slowlog_log_slower_than": int(-1, LONG), "10000",
        M | U, H, "Microseconds above which a command is logged in SLOWLOG; -1 = never.";
    SLOWLOG_MAX_LEN = "slowlog-max-len" [] "latency.slowlog_max_len": int(0, LONG), "128", M | U, H,
        "Entries kept by SLOWLOG.";
    LATENCY_MONITOR_THRESHOLD = "latency-monitor-threshold" [] "latency.latency_monitor_threshold": int(0, LONG), "0",
        M | U, H, "Milliseconds above which events are sampled by LATENCY; 0 = off.";
    LATENCY_TRACKING = "latency-tracking" [] "latency.latency_tracking": B, "yes", M | U, H,
        "Per-command latency histograms.";
    LATENCY_TRACKING_INFO_PERCENTILES = "latency-tracking-info-percentiles" []
        "latency.latency_tracking_info_percentiles": Ty::Percentiles, "50 99 99.9", M | U, H,
        "Percentiles reported by INFO latencystats.";
    WATCHDOG_PERIOD = "watchdog-period" [] "latency.watchdog_period": int(0, INT), "0", M | HID, CRASH,
        "Software watchdog period in milliseconds (debugging).";
    // advanced
    NOTIFY_KEYSPACE_EVENTS = "notify-keyspace-events" [] "advanced.notify_keyspace_events": Ty::Events, "",
        M | NE, H, "Keyspace notification classes (letters from Ag$lshzxeKEtmdn).";
    ACTIVEREHASHING = "activerehashing" [] "advanced.activerehashing": B, "yes", M | NE, H,
        "Rehash main tables incrementally in the background.";
    HASH_MAX_LISTPACK_ENTRIES = "hash-max-listpack-entries" ["hash-max-ziplist-entries"]
        "advanced.hash_max_listpack_entries": int(0, LONG), "512", M, ENGINE, "Largest hash kept compact, in fields.";
    HASH_MAX_LISTPACK_VALUE = "hash-max-listpack-value" ["hash-max-ziplist-value"] "advanced.hash_max_listpack_value":
        mem(0, LONG), "64", M, ENGINE, "Largest field or value of a compact hash.";
    LIST_MAX_LISTPACK_SIZE = "list-max-listpack-size" ["list-max-ziplist-size"] "advanced.list_max_listpack_size":
        int(IMIN, INT), "-2", M, ENGINE, "List node size: entries, or -1..-5 for 4..64 KB.";
    LIST_COMPRESS_DEPTH = "list-compress-depth" [] "advanced.list_compress_depth": int(0, INT), "0", M | NE, H,
        "List nodes left uncompressed at each end; 0 = no compression.";
    SET_MAX_INTSET_ENTRIES = "set-max-intset-entries" [] "advanced.set_max_intset_entries": int(0, LONG), "512",
        M, ENGINE, "Largest set of integers kept compact.";
    SET_MAX_LISTPACK_ENTRIES = "set-max-listpack-entries" [] "advanced.set_max_listpack_entries": int(0, LONG), "128",
        M, ENGINE, "Largest set kept compact, in members.";
    SET_MAX_LISTPACK_VALUE = "set-max-listpack-value" [] "advanced.set_max_listpack_value": int(0, LONG), "64",
        M, ENGINE, "Largest member of a compact set.";
    ZSET_MAX_LISTPACK_ENTRIES = "zset-max-listpack-entries" ["zset-max-ziplist-entries"]
        "advanced.zset_max_listpack_entries": int(0, LONG), "128", M, ENGINE, "Largest sorted set kept compact.";
    ZSET_MAX_LISTPACK_VALUE = "zset-max-listpack-value" ["zset-max-ziplist-value"] "advanced.zset_max_listpack_value":
        mem(0, LONG), "64", M, ENGINE, "Largest member of a compact sorted set.";
    HLL_SPARSE_MAX_BYTES = "hll-sparse-max-bytes" [] "advanced.hll_sparse_max_bytes": mem(0, LONG), "3000", M, ENGINE,
        "Largest sparse HyperLogLog.";
    STREAM_NODE_MAX_BYTES = "stream-node-max-bytes" [] "advanced.stream_node_max_bytes": mem(0, LONG), "4096", M, ENGINE,
        "Largest stream node in bytes.";
    STREAM_NODE_MAX_ENTRIES = "stream-node-max-entries" [] "advanced.stream_node_max_entries": int(0, LONG), "100",
        M, ENGINE, "Largest stream node in entries.";
    PREFETCH_BATCH_MAX_SIZE = "prefetch-batch-max-size" [] "advanced.prefetch_batch_max_size": int(0, 128), "16",
        M | NE, H, "Keys prefetched per batch by I/O threads.";
    // modules
    LOADMODULE = "loadmodule" [] "modules.loadmodule": Ty::Lines { min: 1, max: usize::MAX }, "",
        FILE_ONLY | APPEND | NE, H, "Load a module: path and arguments (hotkv cannot load modules).";
    MODULE_CONFIG = "<module>.<config>" [] "modules.config": Ty::Lines { min: 2, max: 2 }, "", FILE_ONLY | APPEND | NE, H,
        "A module's own directive, kept for that module.";
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::super::Settings;
    use super::super::value::{self, Value};
    use super::*;

    #[test]
    fn names_aliases_and_toml_paths_are_unique() {
        let mut names = HashSet::new();
        let mut tomls = HashSet::new();
        for d in TABLE {
            assert!(names.insert(d.name.to_ascii_lowercase()), "duplicate name {}", d.name);
            for a in d.aliases {
                assert!(names.insert(a.to_ascii_lowercase()), "duplicate alias {a}");
            }
            assert!(tomls.insert(d.toml), "duplicate toml path {}", d.toml);
            assert!(d.toml.contains('.'), "{}: toml path needs a section", d.name);
        }
    }

    #[test]
    fn toml_keys_follow_the_names() {
        // The key is the name with `_` for `-`, without the prefix that repeats the section.
        for d in TABLE.iter().filter(|d| d.name != "<module>.<config>") {
            let (section, key) = d.toml.split_once('.').unwrap();
            let bare = match section {
                "tls" | "cluster" => d.name.strip_prefix(&format!("{section}-")).unwrap_or(d.name),
                _ => d.name,
            };
            assert_eq!(key, bare.replace('-', "_"), "{}", d.name);
        }
    }

    #[test]
    fn every_default_parses_and_reads_back() {
        let s = Settings::defaults();
        for (id, d) in TABLE.iter().enumerate() {
            if !d.default.is_empty() {
                let args: Vec<String> = hotkv_protocol::split_args(d.default.as_bytes())
                    .unwrap()
                    .into_iter()
                    .map(|a| String::from_utf8(a).unwrap())
                    .collect();
                assert!(d.ty.multi_arg() || args.len() == 1, "{}: default needs one argument", d.name);
                value::parse(d, &args, &d.ty.empty()).unwrap_or_else(|e| panic!("{}: {e}", d.name));
            }
            assert!(s.is_default(id));
        }
    }

    #[test]
    fn flags_are_consistent() {
        for d in TABLE {
            if d.has(FILE_ONLY) {
                assert!(!d.has(MUTABLE) && d.apply.is_none(), "{}: file-only rows are not runtime", d.name);
                assert!(matches!(d.ty, Ty::Lines { .. }), "{}", d.name);
            }
            if d.has(APPEND) {
                assert!(matches!(d.ty, Ty::Save | Ty::Lines { .. }), "{}: only lists can append", d.name);
            }
            if d.has(VOLATILE) || d.has(ON_USE) {
                assert!(d.has(MUTABLE), "{}: volatile/on-use only matter at runtime", d.name);
            }
            assert!(!(d.has(ON_USE) && d.apply.is_some()), "{}: read on use, so no hook", d.name);
            assert!(!d.doc.is_empty() && d.doc.ends_with('.'), "{}: doc line", d.name);
        }
    }

    #[test]
    fn mutable_rows_have_a_hook_or_need_none() {
        for d in TABLE {
            if d.has(MUTABLE) && d.apply.is_none() {
                assert!(d.has(ON_USE) || d.has(NO_EFFECT), "{} is mutable without a hook", d.name);
            }
        }
    }

    #[test]
    fn valkey_names_and_aliases_resolve() {
        for (alias, name) in [
            ("slaveof", "replicaof"),
            ("masterauth", "primaryauth"),
            ("masteruser", "primaryuser"),
            ("slave-read-only", "replica-read-only"),
            ("hash-max-ziplist-entries", "hash-max-listpack-entries"),
            ("lua-time-limit", "busy-reply-threshold"),
            ("cluster-slave-validity-factor", "cluster-replica-validity-factor"),
            ("BIO_CPULIST", "bio-cpulist"),
        ] {
            assert_eq!(TABLE[find(alias).unwrap()].name, name);
        }
        assert_eq!(find_toml("tls.cert_file"), Some(TLS_CERT_FILE));
        assert_eq!(find_toml("cluster.enabled"), Some(CLUSTER_ENABLED));
        assert_eq!(Settings::defaults().get(TLS_AUTH_CLIENTS), &Value::Word("yes"));
        // Valkey 8.0.1 declares 198 directives (outside its LOG_REQ_RES builds); hotkv adds the
        // file-only ones, the newer TLS and cluster ones and worker-threads.
        assert!(TABLE.len() >= 207, "{}", TABLE.len());
    }
}
