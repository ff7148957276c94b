//! The three configuration sources (a .conf file, a .toml file, flags alone), their precedence
//! (flags override the file), fatal configuration errors, and daemonize + pidfile + logfile.

use std::path::Path;
use std::time::Duration;

use hotkv_test_support::{ConfigFormat, Exited, Frame, ProcessGuard, RawClient, SIGTERM, TestServer, wait_for};

use crate::{assert_err, builder, config_get, ok};

const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";
const EXIT_WAIT: Duration = Duration::from_secs(10);

/// Asserts that the server requires `pass`: NOAUTH before, OK after.
#[track_caller]
fn assert_requires_password(srv: &TestServer, pass: &str) {
    let mut c = srv.client();
    assert_err(&c.cmd(&["GET", "k"]), "NOAUTH Authentication required.");
    ok(&mut c, &["AUTH", pass]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

fn toml_text(port: u16, extra: &str) -> String {
    format!("[network]\nport = {port}\nbind = [\"127.0.0.1\"]\n\n{extra}")
}

#[test]
fn a_conf_file_with_comments_quotes_and_any_case_is_read() {
    let srv = builder()
        .config_file("hotkv.conf", |port, _| {
            format!(
                "# A hand-written file.\n\nport {port}\n   bind 127.0.0.1\n\n# Quoted values keep their spaces.\nREQUIREPASS \"pass with spaces\"\n"
            )
        })
        .spawn();
    assert_requires_password(&srv, "pass with spaces");
}

#[test]
fn conf_file_values_show_in_config_get() {
    let srv = builder().configs(&[("maxmemory", "3mb"), ("databases", "4"), ("hz", "25")]).spawn();
    let mut c = srv.client();
    assert_eq!(config_get(&mut c, "maxmemory"), "3145728");
    assert_eq!(config_get(&mut c, "databases"), "4");
    assert_eq!(config_get(&mut c, "hz"), "25");
}

#[test]
fn a_toml_file_configures_the_server() {
    let srv = builder()
        .config_file("hotkv.toml", |port, _| toml_text(port, "[security]\nrequirepass = \"from-toml\"\n"))
        .spawn();
    assert_requires_password(&srv, "from-toml");
}

#[test]
fn toml_file_values_show_in_config_get() {
    let srv = builder()
        .config_file("hotkv.toml", |port, _| {
            toml_text(
                port,
                "[memory]\nmaxmemory = \"3mb\"\nmaxmemory_policy = \"allkeys-lru\"\n\n[general]\ndatabases = 4\n",
            )
        })
        .spawn();
    let mut c = srv.client();
    assert_eq!(config_get(&mut c, "maxmemory"), "3145728");
    assert_eq!(config_get(&mut c, "maxmemory-policy"), "allkeys-lru");
    assert_eq!(config_get(&mut c, "databases"), "4");
}

#[test]
fn flags_alone_configure_the_server() {
    let srv = builder().format(ConfigFormat::Flags).config("requirepass", "from-flags").spawn();
    assert_requires_password(&srv, "from-flags");
}

#[test]
fn flags_override_the_conf_file() {
    let srv = builder().config("requirepass", "from-file").args(&["--requirepass", "from-flags"]).spawn();
    assert_requires_password(&srv, "from-flags");
    assert_err(&srv.client().cmd(&["AUTH", "from-file"]), WRONGPASS);
}

#[test]
fn flags_override_the_toml_file() {
    let srv = builder()
        .config_file("hotkv.toml", |port, _| toml_text(port, "[security]\nrequirepass = \"from-file\"\n"))
        .args(&["--requirepass", "from-flags"])
        .spawn();
    assert_requires_password(&srv, "from-flags");
    assert_err(&srv.client().cmd(&["AUTH", "from-file"]), WRONGPASS);
}

/// Runs the server with a .conf file whose second line is `line`; it must refuse to start.
fn run_with_bad_line(line: &str) -> Exited {
    let line = line.to_string();
    builder()
        .config_file("hotkv.conf", move |port, _| format!("port {port}\n{line}\nbind 127.0.0.1\n"))
        .run_to_exit(EXIT_WAIT)
}

/// Asserts Valkey's fatal config block on stderr and exit code 1.
#[track_caller]
fn assert_fatal(run: &Exited, line: Option<(usize, &str)>, reason: &str) {
    assert_eq!(run.code(), Some(1), "exit code; stderr:\n{}", run.stderr);
    assert!(
        run.stderr.contains("\n*** FATAL CONFIG FILE ERROR (Version "),
        "no fatal banner on stderr:\n{}",
        run.stderr
    );
    if let Some((n, text)) = line {
        assert!(run.stderr.contains(&format!("Reading the configuration file, at line {n}\n")), "{}", run.stderr);
        assert!(run.stderr.contains(&format!(">>> '{text}'\n")), "{}", run.stderr);
    }
    assert!(run.stderr.contains(reason), "stderr lacks {reason:?}:\n{}", run.stderr);
}

#[test]
fn an_unknown_directive_in_the_file_is_fatal() {
    let run = run_with_bad_line("no-such-directive yes");
    assert_fatal(&run, Some((2, "no-such-directive yes")), "Bad directive or wrong number of arguments");
}

#[test]
fn an_invalid_enum_value_is_fatal() {
    let run = run_with_bad_line("maxmemory-policy sometimes");
    assert_fatal(&run, Some((2, "maxmemory-policy sometimes")), "argument(s) must be one of the following:");
}

#[test]
fn a_non_numeric_port_is_fatal() {
    let run = run_with_bad_line("port notaport");
    assert_fatal(&run, Some((2, "port notaport")), "argument couldn't be parsed into an integer");
}

#[test]
fn an_out_of_range_value_is_fatal() {
    let run = run_with_bad_line("databases 0");
    assert_fatal(&run, Some((2, "databases 0")), "argument must be between 1 and 2147483647 inclusive");
}

#[test]
fn an_unknown_flag_is_fatal() {
    let run = builder().format(ConfigFormat::Flags).args(&["--no-such-directive", "1"]).run_to_exit(EXIT_WAIT);
    assert_fatal(&run, None, "Bad directive or wrong number of arguments");
}

#[test]
fn an_unknown_toml_key_is_fatal() {
    let run = builder()
        .config_file("hotkv.toml", |port, _| toml_text(port, "[memory]\nno_such_key = 1\n"))
        .run_to_exit(EXIT_WAIT);
    assert_fatal(&run, None, "no_such_key");
}

#[test]
fn a_missing_config_file_is_fatal() {
    let missing = missing_file_run();
    // Valkey logs this one (to stdout before a log file is set up); either stream will do.
    let output = format!("{}{}", missing.stdout, missing.stderr);
    assert_eq!(missing.status.code(), Some(1), "output:\n{output}");
    assert!(
        output.contains("Fatal error, can't open config file '/nonexistent/hotkv.conf': No such file or directory"),
        "output:\n{output}"
    );
}

/// Runs the binary directly with a config path that does not exist.
fn missing_file_run() -> hotkv_test_support::tools::ToolOutput {
    let bin = std::env::var("HOTKV_TEST_BIN").unwrap_or_else(|_| crate::BIN.to_string());
    let mut cmd = std::process::Command::new(bin);
    cmd.arg("/nonexistent/hotkv.conf");
    hotkv_test_support::tools::run_bounded(&mut cmd, None, EXIT_WAIT)
}

#[test]
fn daemonize_writes_the_pidfile_and_logfile_and_sigterm_removes_the_pidfile() {
    let run = builder()
        .configs(&[("daemonize", "yes"), ("pidfile", "hotkv.pid"), ("logfile", "hotkv.log")])
        .run_to_exit(EXIT_WAIT);
    assert_eq!(run.code(), Some(0), "the foreground process exits 0 once the daemon is forked");
    let pidfile = run.dir().join("hotkv.pid");
    assert!(wait_for(|| read_pid(&pidfile).is_some(), EXIT_WAIT), "no pid in {}", pidfile.display());
    let pid = read_pid(&pidfile).expect("pid");
    let daemon = ProcessGuard::new(pid);
    let log = run.dir().join("hotkv.log");
    assert!(
        wait_for(|| std::fs::read_to_string(&log).is_ok_and(|t| t.contains("Ready to accept connections")), EXIT_WAIT),
        "the log file lacks the ready line:\n{}",
        std::fs::read_to_string(&log).unwrap_or_default()
    );
    let mut c = RawClient::connect(run.port);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    daemon.signal(SIGTERM).expect("signal the daemon");
    assert!(wait_for(|| !pidfile.exists(), EXIT_WAIT), "the pid file survived SIGTERM");
    assert!(daemon.wait_gone(EXIT_WAIT), "the daemon is still running after SIGTERM");
}

fn read_pid(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

#[test]
fn bus_protection_without_tls_refuses_to_start_with_the_docs_words() {
    // The doc's command: cluster mode, protection on, no TLS on the bus.
    let run = builder()
        .configs(&[("cluster-enabled", "yes"), ("cluster-bus-port-protected-mode", "yes")])
        .run_to_exit(EXIT_WAIT);
    assert_eq!(run.code(), Some(1), "{}", run.stderr);
    let lines: Vec<&str> = run.stderr.lines().filter(|l| !l.is_empty()).take(2).collect();
    assert_eq!(
        lines,
        [
            "*** FATAL CONFIG FILE ERROR ***",
            "cluster-bus-port-protected-mode is enabled but tls-cluster is disabled: the cluster bus port of this node \
             would take any host that reaches it as a node of the cluster. Set 'tls-cluster yes', so that the other \
             nodes must show a certificate tls-ca-cert-file trusts, or set 'cluster-bus-port-protected-mode no' if \
             only trusted hosts can reach the port (a firewall, say)",
        ]
    );
}

#[test]
fn the_shutdown_and_fsync_directives_refuse_bad_values_from_files_and_config_set() {
    let cases = [
        ("shutdown-timeout", "soon", "argument couldn't be parsed into an integer"),
        ("shutdown-timeout", "-1", "argument must be between 0 and 2147483647 inclusive"),
        ("no-appendfsync-on-rewrite", "maybe", "argument must be 'yes' or 'no'"),
        ("aof-disable-auto-gc", "2", "argument must be 'yes' or 'no'"),
        ("aof-rewrite-incremental-fsync", "on", "argument must be 'yes' or 'no'"),
        ("rdb-save-incremental-fsync", "", "argument must be 'yes' or 'no'"),
    ];
    let srv = crate::server();
    let mut c = srv.client();
    for (name, value, reason) in cases {
        let line = format!("{name} \"{value}\"");
        assert_fatal(&run_with_bad_line(&line), Some((2, &line)), reason);
        let reply = c.cmd(&["CONFIG", "SET", name, value]);
        assert_err(&reply, &format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}"));
    }
}

/// rename-command: the old name is unknown, the new one runs the command, "" removes it, the
/// server's own use of a renamed command is unaffected, and CONFIG REWRITE keeps the lines.
#[test]
fn rename_command_renames_removes_and_survives_a_rewrite() {
    let srv = builder()
        .config_file("hotkv.conf", |port, _| {
            format!("port {port}\nbind 127.0.0.1\nrename-command flushdb badger\nrename-command KEYS \"\"\n")
        })
        .spawn();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    assert_err(&c.cmd(&["FLUSHDB"]), "ERR unknown command 'FLUSHDB', with args beginning with: ");
    assert_err(&c.cmd(&["KEYS", "*"]), "ERR unknown command 'KEYS', with args beginning with: '*' ");
    ok(&mut c, &["BADGER"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
    // Scripts reach commands by their client names too.
    assert!(c.cmd(&["EVAL", "return redis.pcall('flushdb')", "0"]).error_text().is_some());
    ok(&mut c, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(srv.dir().join("hotkv.conf")).unwrap();
    assert!(text.contains("rename-command flushdb badger"), "{text}");
}

#[test]
fn rename_command_of_an_unknown_command_or_onto_a_taken_name_is_fatal() {
    let run = run_with_bad_line("rename-command nosuch other");
    assert_fatal(&run, None, "No such command in rename-command");
    let run = run_with_bad_line("rename-command get set");
    assert_fatal(&run, None, "Target command name already exists");
}
