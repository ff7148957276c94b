//! Configuration: the directive table, typed values, and the loaders that feed them.
//!
//! Only this crate knows directive names; sub-crates receive plain settings structs.
//!
//! - [`table`] declares every directive once; [`value`] and [`special`] parse and print
//!   values with Valkey's rules and error texts.
//! - [`conf`] reads `.conf` text (Valkey's `loadServerConfigFromString`), [`toml`] reads
//!   hotkv.toml, [`cli`] turns `hotkv [file] [--name value...]` into a [`LoadedConfig`]; all three
//!   feed one [`load::Loader`], so a directive means the same wherever it is written.
//! - [`runtime`] implements CONFIG GET/SET/REWRITE as pure functions over [`Settings`];
//!   [`rewrite`] keeps the file-editing part.
//! - [`docs`] generates docs/configuration.md from the table.

pub mod cli;
pub mod conf;
pub mod docs;
pub mod glob;
pub mod load;
pub mod rewrite;
pub mod runtime;
pub mod special;
pub mod table;
pub mod toml;
pub mod value;

use std::fmt;
use std::path::PathBuf;
use std::sync::LazyLock;

use hotkv_engine::EngineConfig;
use hotkv_engine::policy::EvictionPolicy;

use table::{DirId, TABLE};
use value::Value;

/// The version printed in FATAL CONFIG FILE ERROR blocks and by `--version`.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Every directive's current value, indexed by [`DirId`].
#[derive(Debug, Clone, PartialEq)]
pub struct Settings {
    values: Vec<Value>,
}

/// Parsed once: CONFIG REWRITE and the loaders compare against the defaults often.
static DEFAULTS: LazyLock<Settings> = LazyLock::new(|| Settings { values: TABLE.iter().map(default_value).collect() });

/// Parses a row's default text as the `.conf` parser would read it after the name; an empty
/// default is the type's empty value (no address, no password, no save point...).
fn default_value(d: &table::Directive) -> Value {
    if d.default.is_empty() {
        return d.ty.empty();
    }
    let args: Vec<String> = hotkv_protocol::split_args(d.default.as_bytes())
        .unwrap_or_default()
        .into_iter()
        .map(|a| String::from_utf8_lossy(&a).into_owned())
        .collect();
    // The table's own unit test proves every default parses; a broken row must not start.
    value::parse(d, &args, &d.ty.empty()).unwrap_or_else(|e| panic!("default of {} does not parse: {e}", d.name))
}

impl Settings {
    /// All defaults, parsed from the table's default texts.
    pub fn defaults() -> Settings {
        DEFAULTS.clone()
    }

    /// The value of directive `id`.
    pub fn get(&self, id: DirId) -> &Value {
        &self.values[id]
    }

    /// Replaces the value of directive `id` (already validated).
    pub fn set(&mut self, id: DirId, v: Value) {
        self.values[id] = v;
    }

    /// Whether directive `id` holds its default value.
    pub fn is_default(&self, id: DirId) -> bool {
        self.values[id] == DEFAULTS.values[id]
    }

    /// The default value of directive `id`.
    pub fn default_of(id: DirId) -> &'static Value {
        &DEFAULTS.values[id]
    }

    /// An integer or memory directive.
    pub fn int(&self, id: DirId) -> i64 {
        self.values[id].as_int()
    }

    /// A yes/no directive.
    pub fn bool(&self, id: DirId) -> bool {
        self.values[id].as_bool()
    }

    /// A string or enum directive.
    pub fn str(&self, id: DirId) -> &str {
        self.values[id].as_str()
    }

    /// A list directive (`bind` addresses, `replicaof` host and port).
    pub fn list(&self, id: DirId) -> &[String] {
        self.values[id].as_list()
    }

    /// An integer-list directive (`save` pairs, `client-output-buffer-limit`,
    /// `oom-score-adj-values`).
    pub fn ints(&self, id: DirId) -> &[i64] {
        self.values[id].as_ints()
    }

    /// The occurrences of a file-only repeated directive (`user`, `rename-command`).
    pub fn lines(&self, id: DirId) -> &[Vec<String>] {
        self.values[id].as_lines()
    }

    /// The text CONFIG GET shows for directive `id`.
    pub fn display(&self, id: DirId) -> String {
        value::format(TABLE[id].ty, &self.values[id])
    }

    /// The engine's settings snapshot (rebuilt by the [`table::Hook::Engine`] and
    /// [`table::Hook::Maxmemory`] hooks).
    pub fn engine_config(&self) -> EngineConfig {
        let small = |id| u32::try_from(self.int(id)).unwrap_or(u32::MAX);
        EngineConfig {
            maxmemory: self.int(table::MAXMEMORY) as u64,
            policy: EvictionPolicy::parse(self.str(table::MAXMEMORY_POLICY)).unwrap_or_default(),
            samples: self.int(table::MAXMEMORY_SAMPLES) as usize,
            eviction_tenacity: small(table::MAXMEMORY_EVICTION_TENACITY),
            lfu_log_factor: small(table::LFU_LOG_FACTOR),
            lfu_decay_time: small(table::LFU_DECAY_TIME),
            proto_max_bulk_len: self.int(table::PROTO_MAX_BULK_LEN) as u64,
            active_expire_effort: small(table::ACTIVE_EXPIRE_EFFORT),
            hz: small(table::HZ),
            replica: !self.list(table::REPLICAOF).is_empty(),
            from_primary: false,
            cluster: self.bool(table::CLUSTER_ENABLED),
            hll_sparse_max_bytes: usize::try_from(self.int(table::HLL_SPARSE_MAX_BYTES)).unwrap_or(usize::MAX),
            list_max_listpack_size: self.int(table::LIST_MAX_LISTPACK_SIZE),
            zset_max_listpack_entries: usize::try_from(self.int(table::ZSET_MAX_LISTPACK_ENTRIES))
                .unwrap_or(usize::MAX),
            zset_max_listpack_value: usize::try_from(self.int(table::ZSET_MAX_LISTPACK_VALUE)).unwrap_or(usize::MAX),
            hash_max_listpack_entries: usize::try_from(self.int(table::HASH_MAX_LISTPACK_ENTRIES))
                .unwrap_or(usize::MAX),
            hash_max_listpack_value: usize::try_from(self.int(table::HASH_MAX_LISTPACK_VALUE)).unwrap_or(usize::MAX),
            set_max_intset_entries: usize::try_from(self.int(table::SET_MAX_INTSET_ENTRIES)).unwrap_or(usize::MAX),
            set_max_listpack_entries: usize::try_from(self.int(table::SET_MAX_LISTPACK_ENTRIES)).unwrap_or(usize::MAX),
            set_max_listpack_value: usize::try_from(self.int(table::SET_MAX_LISTPACK_VALUE)).unwrap_or(usize::MAX),
            stream_node_max_bytes: usize::try_from(self.int(table::STREAM_NODE_MAX_BYTES)).unwrap_or(usize::MAX),
            stream_node_max_entries: usize::try_from(self.int(table::STREAM_NODE_MAX_ENTRIES)).unwrap_or(usize::MAX),
            rdb_compression: self.bool(table::RDBCOMPRESSION),
            lazy_expire: self.bool(table::LAZYFREE_LAZY_EXPIRE),
            lazy_eviction: self.bool(table::LAZYFREE_LAZY_EVICTION),
            lazy_server_del: self.bool(table::LAZYFREE_LAZY_SERVER_DEL),
        }
    }
}

/// A configuration loaded at startup.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadedConfig {
    /// Every directive's value.
    pub settings: Settings,
    /// The configuration file, made absolute (CONFIG REWRITE writes it); `None` when the
    /// configuration came only from stdin and the command line.
    pub config_file: Option<PathBuf>,
    /// Directives set to a non-default value that hotkv does not act on yet, in table order;
    /// the server names them once in its startup log.
    pub no_effect: Vec<&'static str>,
    /// Things Valkey logs as warnings while loading (`databases` forced to 1 in cluster mode).
    pub warnings: Vec<String>,
}

/// Why the configuration could not be loaded. `Display` gives the text to print on stderr
/// before exiting with status 1; for `.conf` lines it is Valkey's block, byte for byte, with
/// hotkv's version.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FatalConfigError {
    /// A line of `.conf` text (a file, stdin or the command line options) was refused.
    Line {
        /// 1-based line number within the text that held it.
        line: usize,
        /// The line, trimmed.
        text: String,
        /// Valkey's reason.
        reason: String,
    },
    /// A key of a hotkv.toml file was refused.
    Toml {
        /// The file.
        file: PathBuf,
        /// 1-based line of the key (0 when the file did not parse at all).
        line: usize,
        /// That line, trimmed.
        text: String,
        /// The reason.
        reason: String,
    },
    /// A check over the whole configuration failed (`replicaof` in cluster mode...).
    Config {
        /// The reason.
        reason: String,
    },
    /// A configuration hotkv refuses to run with because it would be unsafe (a cluster bus
    /// any host could join). The banner is the product documentation's, without a version:
    /// the reason is the whole story.
    Unsafe {
        /// What is unsafe and how to fix it.
        reason: &'static str,
    },
    /// A configuration file could not be read.
    Open {
        /// The path as given.
        path: String,
        /// The system's reason.
        reason: String,
    },
    /// The command line itself is malformed.
    Usage(String),
}

impl fmt::Display for FatalConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let banner = format!("\n*** FATAL CONFIG FILE ERROR (Version {VERSION}) ***\n");
        match self {
            FatalConfigError::Line { line, text, reason } => {
                write!(f, "{banner}Reading the configuration file, at line {line}\n>>> '{text}'\n{reason}")
            }
            FatalConfigError::Toml { file, line: 0, reason, .. } => {
                write!(f, "{banner}Reading the configuration file {}\n{reason}", file.display())
            }
            FatalConfigError::Toml { file, line, text, reason } => write!(
                f,
                "{banner}Reading the configuration file {}, at line {line}\n>>> '{text}'\n{reason}",
                file.display()
            ),
            FatalConfigError::Config { reason } => write!(f, "{banner}{reason}"),
            FatalConfigError::Unsafe { reason } => write!(f, "\n*** FATAL CONFIG FILE ERROR ***\n{reason}"),
            FatalConfigError::Open { path, reason } => {
                write!(f, "Fatal error, can't open config file '{path}': {reason}")
            }
            FatalConfigError::Usage(reason) => f.write_str(reason),
        }
    }
}

impl std::error::Error for FatalConfigError {}

/// The system's reason for an I/O error as C's `strerror` words it (without Rust's
/// " (os error N)" suffix), for messages that mirror Valkey's.
pub fn os_reason(e: &std::io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

#[cfg(test)]
pub(crate) mod fuzz;

/// Helpers shared by the unit tests of the config modules.
#[cfg(test)]
pub(crate) mod test_util {
    use std::path::PathBuf;

    /// A fresh directory under the system temp dir, removed on drop.
    pub(crate) struct TempDir(pub(crate) PathBuf);

    impl TempDir {
        pub(crate) fn new(tag: &str) -> TempDir {
            use std::sync::atomic::{AtomicUsize, Ordering};
            static N: AtomicUsize = AtomicUsize::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("hotkv-config-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        pub(crate) fn file(&self, name: &str, text: &str) -> PathBuf {
            let p = self.0.join(name);
            std::fs::write(&p, text).unwrap();
            p
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fatal_error_block_is_valkeys() {
        let e = FatalConfigError::Line {
            line: 2,
            text: "port \"abc\"".into(),
            reason: "argument couldn't be parsed into an integer".into(),
        };
        let want = format!(
            "\n*** FATAL CONFIG FILE ERROR (Version {VERSION}) ***\nReading the configuration file, at line 2\n\
             >>> 'port \"abc\"'\nargument couldn't be parsed into an integer"
        );
        assert_eq!(e.to_string(), want);
        let e = FatalConfigError::Config { reason: "replicaof directive not allowed in cluster mode".into() };
        assert!(e.to_string().ends_with("***\nreplicaof directive not allowed in cluster mode"));
    }

    #[test]
    fn defaults_feed_the_engine() {
        let s = Settings::defaults();
        let e = s.engine_config();
        assert_eq!(e.maxmemory, 0);
        assert_eq!(e.policy, EvictionPolicy::NoEviction);
        assert_eq!(e.proto_max_bulk_len, 512 * 1024 * 1024);
        assert_eq!(e.hz, 10);
        assert!(!e.replica);
        assert!(s.is_default(table::PORT));
        assert_eq!(
            s.display(table::CLIENT_OUTPUT_BUFFER_LIMIT),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
        assert_eq!(s.display(table::SAVE), "3600 1 300 100 60 10000");
        assert_eq!(s.display(table::BIND), "* -::*");
        assert_eq!(s.display(table::LATENCY_TRACKING_INFO_PERCENTILES), "50 99 99.9");
    }
}
