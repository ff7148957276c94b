//! redis-cli (Debian redis-tools) against hotkv: plain and `--no-raw` output, databases, SCAN
//! mode, pipe mode, RESP3, and the big-keys report.

use hotkv_test_support::{Frame, tools::redis_cli, tools::redis_cli_output};

use crate::{ok, server, set_all};

#[test]
fn redis_cli_sets_and_gets() {
    let srv = server();
    let port = srv.port();
    assert_eq!(redis_cli(port, &["SET", "k", "hello world"]), "OK\n");
    assert_eq!(redis_cli(port, &["GET", "k"]), "hello world\n");
    assert_eq!(redis_cli(port, &["PING"]), "PONG\n");
}

#[test]
fn redis_cli_no_raw_formats_each_reply_type() {
    let srv = server();
    let port = srv.port();
    let cli = |args: &[&str]| {
        let mut full = vec!["--no-raw"];
        full.extend_from_slice(args);
        redis_cli(port, &full)
    };
    assert_eq!(cli(&["SET", "k", "v"]), "OK\n");
    assert_eq!(cli(&["GET", "k"]), "\"v\"\n");
    assert_eq!(cli(&["GET", "missing"]), "(nil)\n");
    assert_eq!(cli(&["INCR", "n"]), "(integer) 1\n");
    assert_eq!(cli(&["MGET", "k", "missing"]), "1) \"v\"\n2) (nil)\n");
    assert_eq!(cli(&["PING"]), "PONG\n");
    assert_eq!(cli(&["NOSUCH", "a"]), "(error) ERR unknown command 'NOSUCH', with args beginning with: 'a' \n");
}

#[test]
fn redis_cli_selects_a_database_with_dash_n() {
    let srv = server();
    assert_eq!(redis_cli(srv.port(), &["-n", "2", "SET", "k", "in2"]), "OK\n");
    let mut c = srv.client();
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk);
    ok(&mut c, &["SELECT", "2"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("in2"));
}

#[test]
fn redis_cli_scan_mode_lists_matching_keys() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("user:1", "a"), ("user:2", "b"), ("order:1", "c")]);
    let out = redis_cli(srv.port(), &["--scan", "--pattern", "user:*"]);
    let mut keys: Vec<&str> = out.lines().collect();
    keys.sort();
    assert_eq!(keys, ["user:1", "user:2"]);
}

#[test]
fn redis_cli_pipe_mode_loads_commands() {
    let srv = server();
    let mut input = Vec::new();
    for i in 0..100 {
        let (k, v) = (format!("k{i}"), format!("v{i}"));
        input.extend(format!("*3\r\n$3\r\nSET\r\n${}\r\n{k}\r\n${}\r\n{v}\r\n", k.len(), v.len()).into_bytes());
    }
    let out = redis_cli_output(srv.port(), &["--pipe"], Some(&input));
    assert!(out.status.success(), "redis-cli --pipe failed:\n{}\n{}", out.stdout, out.stderr);
    assert!(out.stdout.contains("errors: 0, replies: 100"), "{}", out.stdout);
    assert_eq!(srv.cmd(&["DBSIZE"]), Frame::Integer(100));
}

#[test]
fn redis_cli_speaks_resp3_with_dash_3() {
    let srv = server();
    let port = srv.port();
    assert_eq!(redis_cli(port, &["-3", "--no-raw", "GET", "missing"]), "(nil)\n");
    let hello = redis_cli(port, &["-3", "--no-raw", "HELLO", "3"]);
    assert!(hello.contains("\"proto\" => (integer) 3"), "{hello}");
}

#[test]
fn redis_cli_reads_info() {
    let srv = server();
    let out = redis_cli(srv.port(), &["INFO", "server"]);
    assert!(out.contains("redis_version:"), "{out}");
}

#[test]
fn redis_cli_bigkeys_report_finds_the_biggest_string() {
    let srv = server();
    let mut c = srv.client();
    set_all(&mut c, &[("small", "x"), ("large", &"y".repeat(500))]);
    let out = redis_cli(srv.port(), &["--bigkeys"]);
    assert!(out.contains("Biggest string found '\"large\"' has 500 bytes"), "{out}");
    assert!(out.contains("Sampled 2 keys in the keyspace!"), "{out}");
}
