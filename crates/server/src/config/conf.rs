//! The `.conf` format, read exactly as Valkey's `loadServerConfigFromString` reads it: one
//! directive per line, split with `sdssplitargs` rules, `#` comments, `include` of other files
//! (relative to the working directory, wildcards allowed), names case-insensitive, and the same
//! FATAL CONFIG FILE ERROR block on the first bad line.

use std::path::{Path, PathBuf};

use super::glob::string_match;
use super::load::Loader;
use super::{FatalConfigError, LoadedConfig, os_reason};

/// Deep enough for any real layout; Valkey has no limit and overflows its stack instead when a
/// file includes itself.
const MAX_INCLUDE_DEPTH: usize = 64;

/// Loads `.conf` text over the defaults and runs the whole-configuration checks.
pub fn load_str(text: &str) -> Result<LoadedConfig, FatalConfigError> {
    let mut loader = Loader::new();
    apply_text(&mut loader, text.as_bytes())?;
    loader.finish(None)
}

/// Loads a `.conf` file over the defaults; the file becomes the one CONFIG REWRITE writes.
pub fn load_file(path: &Path) -> Result<LoadedConfig, FatalConfigError> {
    let text = read_file(path)?;
    let mut loader = Loader::new();
    apply_text(&mut loader, &text)?;
    loader.finish(Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())))
}

/// Applies every line of `text`. Line numbers in errors count within `text`, as Valkey counts
/// within each file (an included file reports its own line numbers).
pub fn apply_text(loader: &mut Loader, text: &[u8]) -> Result<(), FatalConfigError> {
    apply_text_at(loader, text, 0)
}

fn apply_text_at(loader: &mut Loader, text: &[u8], depth: usize) -> Result<(), FatalConfigError> {
    for (i, raw) in text.split(|b| *b == b'\n').enumerate() {
        let line = trim(raw);
        if line.is_empty() || line[0] == b'#' {
            continue;
        }
        let fail = |reason: String| FatalConfigError::Line {
            line: i + 1,
            text: String::from_utf8_lossy(line).into_owned(),
            reason,
        };
        let argv = hotkv_protocol::split_args(line).map_err(|e| fail(e.to_string()))?;
        if argv.is_empty() {
            continue;
        }
        let argv: Vec<String> = argv.into_iter().map(|a| String::from_utf8_lossy(&a).into_owned()).collect();
        if argv[0].eq_ignore_ascii_case("include") && argv.len() == 2 {
            include(loader, &argv[1], depth)?;
            continue;
        }
        loader.apply_line(&argv).map_err(fail)?;
    }
    Ok(())
}

/// Valkey's `loadServerConfig` for an `include`: a pattern with `*`, `?` or `[` reads every
/// matching file (none is fine, so an empty conf.d works) as one text; a plain path must open.
fn include(loader: &mut Loader, path: &str, depth: usize) -> Result<(), FatalConfigError> {
    if depth >= MAX_INCLUDE_DEPTH {
        return Err(FatalConfigError::Config {
            reason: format!(
                "include nesting deeper than {MAX_INCLUDE_DEPTH} at '{path}' (does a file include itself?)"
            ),
        });
    }
    let mut text = Vec::new();
    if path.contains(['*', '?', '[']) {
        for file in expand_glob(path) {
            text.extend(read_file(&file)?);
        }
    } else {
        text = read_file(Path::new(path))?;
    }
    apply_text_at(loader, &text, depth + 1)
}

/// Reads a configuration file, failing with Valkey's "can't open config file" message.
pub fn read_file(path: &Path) -> Result<Vec<u8>, FatalConfigError> {
    std::fs::read(path).map_err(|e| FatalConfigError::Open { path: path.display().to_string(), reason: os_reason(&e) })
}

/// `sdstrim(line, " \t\r\n")`.
fn trim(line: &[u8]) -> &[u8] {
    let blank = |b: &u8| matches!(b, b' ' | b'\t' | b'\r' | b'\n');
    let start = line.iter().position(|b| !blank(b)).unwrap_or(line.len());
    let end = line.iter().rposition(|b| !blank(b)).map_or(start, |e| e + 1);
    &line[start..end]
}

/// The files a shell-style pattern names, sorted, as glob(3) without flags: wildcards may sit
/// in any path component and do not match a leading dot.
pub fn expand_glob(pattern: &str) -> Vec<PathBuf> {
    let absolute = pattern.starts_with('/');
    let mut found = vec![if absolute { PathBuf::from("/") } else { PathBuf::new() }];
    for part in pattern.split('/').filter(|p| !p.is_empty()) {
        let wild = part.contains(['*', '?', '[']);
        let mut next = Vec::new();
        for base in &found {
            if !wild {
                next.push(base.join(part));
                continue;
            }
            let dir = if base.as_os_str().is_empty() { Path::new(".") } else { base.as_path() };
            let Ok(entries) = std::fs::read_dir(dir) else { continue };
            for entry in entries.flatten() {
                let name = entry.file_name();
                let name = name.to_string_lossy();
                if name.starts_with('.') && !part.starts_with('.') {
                    continue;
                }
                if string_match(part.as_bytes(), name.as_bytes(), false) {
                    next.push(base.join(name.as_ref()));
                }
            }
        }
        found = next;
    }
    found.retain(|p| p.exists());
    found.sort();
    found
}

#[cfg(test)]
mod tests {
    use super::super::table;
    use super::super::test_util::TempDir;
    use super::*;

    fn err(text: &str) -> String {
        load_str(text).unwrap_err().to_string()
    }

    fn block(line: usize, text: &str, reason: &str) -> String {
        FatalConfigError::Line { line, text: text.into(), reason: reason.into() }.to_string()
    }

    #[test]
    fn comments_blanks_quotes_and_case() {
        let c = load_str("# comment\n\n   \nPORT 7000\r\n  requirepass \"a b\\n\"  \nlogfile 'x y'\n").unwrap();
        assert_eq!(c.settings.int(table::PORT), 7000);
        assert_eq!(c.settings.str(table::REQUIREPASS), "a b\n");
        assert_eq!(c.settings.str(table::LOGFILE), "x y");
        let c = load_str("bind 10.0.0.1 127.0.0.1\nsave 900 1 300 10\nport 1\nport 2\n").unwrap();
        assert_eq!(c.settings.list(table::BIND), ["10.0.0.1", "127.0.0.1"]);
        assert_eq!(c.settings.ints(table::SAVE), [900, 1, 300, 10]);
        assert_eq!(c.settings.int(table::PORT), 2);
    }

    #[test]
    fn fatal_errors_are_valkeys_block() {
        assert_eq!(
            err("daemonize no\nport \"abc\"\n"),
            block(2, "port \"abc\"", "argument couldn't be parsed into an integer")
        );
        assert_eq!(err("nosuch 1"), block(1, "nosuch 1", "Bad directive or wrong number of arguments"));
        assert_eq!(err("port 1 2"), block(1, "port 1 2", "wrong number of arguments"));
        assert_eq!(
            err("  loglevel loud  "),
            block(
                1,
                "loglevel loud",
                "argument(s) must be one of the following: debug, verbose, notice, warning, nothing"
            )
        );
        assert_eq!(err("maxmemory 1xb"), block(1, "maxmemory 1xb", "argument must be a memory value"));
        assert_eq!(err("port 70000"), block(1, "port 70000", "argument must be between 0 and 65535 inclusive"));
        assert_eq!(err("requirepass \"abc"), block(1, "requirepass \"abc", "Unbalanced quotes in configuration line"));
        assert_eq!(err("daemonize maybe"), block(1, "daemonize maybe", "argument must be 'yes' or 'no'"));
    }

    #[test]
    fn includes_recurse_and_report_their_own_lines() {
        let dir = TempDir::new("include");
        let inner = dir.file("inner.conf", "port 7001\nmaxmemory 10mb\n");
        let outer = dir.file("outer.conf", &format!("port 7000\ninclude {}\ntimeout 5\n", inner.display()));
        let c = load_file(&outer).unwrap();
        assert_eq!(c.settings.int(table::PORT), 7001);
        assert_eq!(c.settings.int(table::MAXMEMORY), 10 << 20);
        assert_eq!(c.settings.int(table::TIMEOUT), 5);
        assert_eq!(c.config_file.as_deref(), Some(outer.as_path()));

        dir.file("bad.conf", "\n\nport x\n");
        let e = load_str(&format!("include {}/bad.conf", dir.0.display())).unwrap_err();
        assert_eq!(
            e,
            FatalConfigError::Line {
                line: 3,
                text: "port x".into(),
                reason: "argument couldn't be parsed into an integer".into()
            }
        );

        let missing = dir.0.join("missing.conf");
        let e = load_str(&format!("include {}", missing.display())).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("Fatal error, can't open config file '{}': No such file or directory", missing.display())
        );

        let looped = dir.file("loop.conf", "");
        std::fs::write(&looped, format!("include {}\n", looped.display())).unwrap();
        assert!(load_file(&looped).unwrap_err().to_string().contains("include nesting"));
    }

    #[test]
    fn include_patterns_read_matches_in_order() {
        let dir = TempDir::new("glob");
        std::fs::create_dir(dir.0.join("conf.d")).unwrap();
        dir.file("conf.d/a.conf", "port 1\n");
        dir.file("conf.d/b.conf", "port 2\ntimeout 9\n");
        dir.file("conf.d/.hidden.conf", "port 3\n");
        let c = load_str(&format!("include {}/conf.d/*.conf", dir.0.display())).unwrap();
        assert_eq!(c.settings.int(table::PORT), 2);
        assert_eq!(c.settings.int(table::TIMEOUT), 9);
        assert!(load_str(&format!("include {}/empty.d/*.conf", dir.0.display())).is_ok());
    }

    #[test]
    fn valkey_test_suite_and_sample_configs_load() {
        let c = load_str(VALKEY_DEFAULT_CONF).unwrap();
        assert!(c.settings.ints(table::SAVE).is_empty());
        assert_eq!(c.settings.str(table::NOTIFY_KEYSPACE_EVENTS), "AKE");
        assert_eq!(c.settings.str(table::SHUTDOWN_ON_SIGTERM), "force");
        let c = load_str(VALKEY_CONF_EXCERPT).unwrap();
        assert_eq!(c.settings.list(table::BIND), ["127.0.0.1", "-::1"]);
        assert_eq!(
            c.settings.display(table::CLIENT_OUTPUT_BUFFER_LIMIT),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60"
        );
    }

    /// Valkey 8.0.1's tests/assets/default.conf, which its test suite starts every server with.
    const VALKEY_DEFAULT_CONF: &str = "# Server configuration for testing.\n\nalways-show-logo yes\n\
        notify-keyspace-events KEA\ndaemonize no\npidfile /var/run/valkey.pid\nport 6379\ntimeout 0\nbind 127.0.0.1\n\
        loglevel verbose\nlogfile ''\ndatabases 16\nlatency-monitor-threshold 1\nrepl-diskless-sync-delay 0\n\n\
        # Turn off RDB by default (to speedup tests)\nsave ''\n\nrdbcompression yes\ndbfilename dump.rdb\ndir ./\n\n\
        slave-serve-stale-data yes\nappendonly no\nappendfsync everysec\nno-appendfsync-on-rewrite no\n\
        activerehashing yes\n\nenable-protected-configs yes\nenable-debug-command yes\nenable-module-command yes\n\n\
        propagation-error-behavior panic\n\n# Make sure shutdown doesn't fail if there's an initial AOFRW\n\
        shutdown-on-sigterm force\n\nenable-debug-assert yes\n\nhide-user-data-from-log no\n";

    /// The active lines of Valkey 8.0.1's sample valkey.conf.
    const VALKEY_CONF_EXCERPT: &str = "bind 127.0.0.1 -::1\nprotected-mode yes\nport 6379\ntcp-backlog 511\n\
        timeout 0\ntcp-keepalive 300\ndaemonize no\npidfile /var/run/valkey_6379.pid\nloglevel notice\nlogfile \"\"\n\
        databases 16\nalways-show-logo no\nhide-user-data-from-log yes\nset-proc-title yes\n\
        proc-title-template \"{title} {listen-addr} {server-mode}\"\nlocale-collate \"\"\n\
        stop-writes-on-bgsave-error yes\nrdbcompression yes\nrdbchecksum yes\ndbfilename dump.rdb\n\
        rdb-del-sync-files no\ndir ./\nreplica-serve-stale-data yes\nreplica-read-only yes\nrepl-diskless-sync yes\n\
        repl-diskless-sync-delay 5\nrepl-diskless-sync-max-replicas 0\nrepl-diskless-load disabled\n\
        dual-channel-replication-enabled no\nrepl-disable-tcp-nodelay no\nreplica-priority 100\nacllog-max-len 128\n\
        lazyfree-lazy-eviction yes\nlazyfree-lazy-expire yes\nlazyfree-lazy-server-del yes\nreplica-lazy-flush yes\n\
        lazyfree-lazy-user-del yes\nlazyfree-lazy-user-flush yes\noom-score-adj no\noom-score-adj-values 0 200 800\n\
        disable-thp yes\nappendonly no\nappendfilename \"appendonly.aof\"\nappenddirname \"appendonlydir\"\n\
        appendfsync everysec\nno-appendfsync-on-rewrite no\nauto-aof-rewrite-percentage 100\n\
        auto-aof-rewrite-min-size 64mb\naof-load-truncated yes\naof-use-rdb-preamble yes\naof-timestamp-enabled no\n \n\
        slowlog-log-slower-than 10000\nslowlog-max-len 128\nlatency-monitor-threshold 0\nnotify-keyspace-events \"\"\n\
        hash-max-listpack-entries 512\nhash-max-listpack-value 64\nlist-max-listpack-size -2\nlist-compress-depth 0\n\
        set-max-intset-entries 512\nset-max-listpack-entries 128\nset-max-listpack-value 64\n\
        zset-max-listpack-entries 128\nzset-max-listpack-value 64\nhll-sparse-max-bytes 3000\n\
        stream-node-max-bytes 4096\nstream-node-max-entries 100\nactiverehashing yes\n\
        client-output-buffer-limit normal 0 0 0\nclient-output-buffer-limit replica 256mb 64mb 60\n\
        client-output-buffer-limit pubsub 32mb 8mb 60\nhz 10\ndynamic-hz yes\naof-rewrite-incremental-fsync yes\n\
        rdb-save-incremental-fsync yes\njemalloc-bg-thread yes\n";
}
