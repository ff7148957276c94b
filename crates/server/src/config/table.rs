//! Every configuration directive, declared once.
//!
//! A row gives the Valkey name, aliases, the hotkv.toml path, the type and range, the default
//! (as the text a `.conf` file would hold, so defaults go through the same parser), flags, the
//! hook CONFIG SET runs after changing it, and a one-line description. The `.conf` parser, the
//! toml loader, `--flags`, CONFIG GET/SET/REWRITE and docs/configuration.md all read this
//! table; nothing else declares a directive.

use super::value::Ty;

/// May be changed with CONFIG SET.
pub const MUTABLE: u32 = 1 << 0;
/// Value never shown in logs (CONFIG GET still shows it, as Valkey does for requirepass).
pub const SENSITIVE: u32 = 1 << 1;
/// Not listed by CONFIG GET * nor in the docs.
pub const HIDDEN: u32 = 1 << 2;
/// Accepted for compatibility; hotkv gives it no meaning yet (named once in the startup log).
pub const NO_EFFECT: u32 = 1 << 3;
/// Repeating the directive in a file appends instead of replacing (`save`, `include`-like).
pub const APPEND: u32 = 1 << 4;

/// What must happen after a directive changes at runtime. Several rows may share a hook;
/// CONFIG SET runs each distinct hook once.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Hook {
    /// Rebuild the engine settings snapshot (maxmemory, policies, proto-max-bulk-len, hz...).
    Engine,
    /// Reopen listeners (port, bind, tls-port).
    Listeners,
    /// Change the log level or file.
    Logging,
    /// Reload TLS material.
    Tls,
    /// Re-evaluate memory limits now (maxmemory may require eviction).
    Maxmemory,
    /// Update limits read by connections (timeouts, buffer limits, maxclients).
    Clients,
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
    /// Bit set of [`MUTABLE`], [`SENSITIVE`], [`HIDDEN`], [`NO_EFFECT`], [`APPEND`].
    pub flags: u32,
    /// Hook run after CONFIG SET changes it.
    pub apply: Option<Hook>,
    /// One line for the docs.
    pub doc: &'static str,
}

/// Index of a directive in [`TABLE`].
pub type DirId = usize;

macro_rules! directives {
    ($( $id:ident = $name:literal [$($alias:literal),*] $toml:literal : $ty:expr, $default:literal,
        $flags:expr, $apply:expr, $doc:literal; )*) => {
        directives!(@ids 0usize; $($id)*);
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
    (@ids $n:expr; $id:ident $($rest:ident)*) => {
        #[allow(missing_docs)]
        pub const $id: DirId = $n;
        directives!(@ids $n + 1usize; $($rest)*);
    };
    (@ids $n:expr;) => {};
}

const I64: i64 = i64::MAX;
const MEM: Ty = Ty::Memory { min: 0, max: I64 };
const fn int(min: i64, max: i64) -> Ty {
    Ty::Int { min, max }
}
const M: u32 = MUTABLE;
const I: u32 = 0;
const NE: u32 = NO_EFFECT;
const H: Option<Hook> = None;
const ENGINE: Option<Hook> = Some(Hook::Engine);
const LISTEN: Option<Hook> = Some(Hook::Listeners);
const LOG: Option<Hook> = Some(Hook::Logging);
const CLIENTS: Option<Hook> = Some(Hook::Clients);
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

directives! {
    // network
    BIND = "bind" [] "network.bind": Ty::List, "* -::*", M, LISTEN,
        "Addresses to listen on; `-` before an address makes it optional.";
    PORT = "port" [] "network.port": int(0, 65535), "6379", M, LISTEN,
        "TCP port for plain-text clients; 0 turns the plain listener off.";
    PROTECTED_MODE = "protected-mode" [] "network.protected_mode": Ty::Bool, "yes", M, H,
        "Without a password and bound beyond loopback, refuse non-loopback clients.";
    TCP_BACKLOG = "tcp-backlog" [] "network.tcp_backlog": int(0, i32::MAX as i64), "511", I, H,
        "Listen backlog.";
    TIMEOUT = "timeout" [] "network.timeout": int(0, i32::MAX as i64), "0", M, CLIENTS,
        "Close a client after this many idle seconds (0 = never).";
    TCP_KEEPALIVE = "tcp-keepalive" [] "network.tcp_keepalive": int(0, i32::MAX as i64), "300", M, H,
        "TCP keepalive interval in seconds for client sockets (0 = off).";
    MAXCLIENTS = "maxclients" [] "network.maxclients": int(1, i32::MAX as i64), "10000", M, CLIENTS,
        "Maximum number of connected clients.";
    // general
    DAEMONIZE = "daemonize" [] "general.daemonize": Ty::Bool, "no", I, H,
        "Run in the background, detached from the terminal.";
    PIDFILE = "pidfile" [] "general.pidfile": Ty::Str, "", I, H,
        "Write the process id to this file.";
    LOGLEVEL = "loglevel" [] "general.loglevel": Ty::Enum(&["debug", "verbose", "notice", "warning", "nothing"]),
        "notice", M, LOG, "Log verbosity.";
    LOGFILE = "logfile" [] "general.logfile": Ty::Str, "", I, H,
        "Log file; empty logs to standard output.";
    DATABASES = "databases" [] "general.databases": int(1, i32::MAX as i64), "16", I, H,
        "Number of databases.";
    WORKER_THREADS = "worker-threads" [] "general.worker_threads": int(0, 1024), "0", I, H,
        "Threads that run connections and commands; 0 = one per CPU.";
    HZ = "hz" [] "general.hz": int(1, 500), "10", M, ENGINE,
        "Background task frequency (active expiry, timeouts, stats).";
    // security
    REQUIREPASS = "requirepass" [] "security.requirepass": Ty::Str, "", M | SENSITIVE, H,
        "Password of the default user.";
    // memory
    MAXMEMORY = "maxmemory" [] "memory.maxmemory": MEM, "0", M, Some(Hook::Maxmemory),
        "Memory limit for the dataset; 0 = none.";
    MAXMEMORY_POLICY = "maxmemory-policy" [] "memory.maxmemory_policy": Ty::Enum(POLICIES), "noeviction", M, ENGINE,
        "What to evict when over maxmemory.";
    MAXMEMORY_SAMPLES = "maxmemory-samples" [] "memory.maxmemory_samples": int(1, 64), "5", M, ENGINE,
        "Keys sampled per eviction round.";
    MAXMEMORY_EVICTION_TENACITY = "maxmemory-eviction-tenacity" [] "memory.maxmemory_eviction_tenacity":
        int(0, 100), "10", M, ENGINE, "How long one command may spend evicting.";
    LFU_LOG_FACTOR = "lfu-log-factor" [] "memory.lfu_log_factor": int(0, i32::MAX as i64), "10", M, ENGINE,
        "Logarithmic factor of the LFU counter.";
    LFU_DECAY_TIME = "lfu-decay-time" [] "memory.lfu_decay_time": int(0, i32::MAX as i64), "1", M, ENGINE,
        "Minutes for the LFU counter to decay by one.";
    ACTIVE_EXPIRE_EFFORT = "active-expire-effort" [] "memory.active_expire_effort": int(1, 10), "1", M, ENGINE,
        "Effort of the active expire cycle.";
    // limits
    PROTO_MAX_BULK_LEN = "proto-max-bulk-len" [] "limits.proto_max_bulk_len": Ty::Memory { min: 1024 * 1024, max: I64 },
        "512mb", M, ENGINE, "Largest single request argument and string value.";
    CLIENT_QUERY_BUFFER_LIMIT = "client-query-buffer-limit" [] "limits.client_query_buffer_limit":
        Ty::Memory { min: 1024 * 1024, max: I64 }, "1gb", M, CLIENTS, "Largest pending request data per client.";
    // persistence
    DIR = "dir" [] "persistence.dir": Ty::Str, "./", M, H, "Working directory.";
    SAVE = "save" [] "persistence.save": Ty::List, "3600 1 300 100 60 10000", M | NE | APPEND, H,
        "RDB snapshot points (accepted; hotkv does not persist yet).";
    APPENDONLY = "appendonly" [] "persistence.appendonly": Ty::Bool, "no", M | NE, H,
        "Append-only file (accepted; hotkv does not persist yet).";
}

/// Finds a directive by name or alias, case-insensitively.
pub fn find(name: &str) -> Option<DirId> {
    TABLE.iter().position(|d| d.name.eq_ignore_ascii_case(name) || d.aliases.iter().any(|a| a.eq_ignore_ascii_case(name)))
}

/// Finds a directive by its toml path.
pub fn find_toml(path: &str) -> Option<DirId> {
    TABLE.iter().position(|d| d.toml == path)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;

    #[test]
    fn names_aliases_and_toml_paths_are_unique() {
        let mut names = HashSet::new();
        let mut tomls = HashSet::new();
        for d in TABLE {
            assert!(names.insert(d.name), "duplicate name {}", d.name);
            for a in d.aliases {
                assert!(names.insert(a), "duplicate alias {a}");
            }
            assert!(tomls.insert(d.toml), "duplicate toml path {}", d.toml);
            assert!(d.toml.contains('.'), "{}: toml path needs a section", d.name);
        }
    }

    #[test]
    fn every_default_parses() {
        for d in TABLE {
            let args = protocol_split(d.default);
            let args = if args.is_empty() { vec![String::new()] } else { args };
            let args = if matches!(d.ty, Ty::List) { args } else { vec![args.join(" ")] };
            super::super::value::parse(d.ty, &args).unwrap_or_else(|e| panic!("{}: default {:?}: {e}", d.name, d.default));
        }
    }

    #[test]
    fn mutable_rows_have_a_hook_or_need_none() {
        // Rows read on every use (requirepass, protected-mode, dir, tcp-keepalive, no-effect
        // rows) need no hook; the rest must name one.
        let read_on_use = ["requirepass", "protected-mode", "dir", "tcp-keepalive"];
        for d in TABLE {
            if d.flags & MUTABLE != 0 && d.apply.is_none() && d.flags & NO_EFFECT == 0 {
                assert!(read_on_use.contains(&d.name), "{} is mutable without a hook", d.name);
            }
        }
    }

    fn protocol_split(s: &str) -> Vec<String> {
        hotkv_protocol::split_args(s.as_bytes())
            .unwrap()
            .into_iter()
            .map(|a| String::from_utf8(a).unwrap())
            .collect()
    }
}
