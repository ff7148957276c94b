//! INFO: the sections and fields that redis-cli, redis-py and monitoring tools read.

use hotkv_test_support::Frame;

use crate::{info, info_field, info_num, ok, server, server_with};

#[test]
fn info_server_reports_version_mode_and_identity() {
    let srv = server();
    let mut c = srv.client();
    let text = info(&mut c, "server");
    assert!(text.starts_with("# Server\r\n"), "INFO server must open with its header:\n{text}");
    let version = info_field(&text, "redis_version").expect("redis_version");
    let parts: Vec<u32> = version.split('.').map(|p| p.parse().expect("numeric version part")).collect();
    assert_eq!(parts.len(), 3, "redis_version {version}");
    assert!(parts[0] >= 7, "clients gate RESP3 and newer commands on redis_version >= 7: {version}");
    // Valkey 8 says server_mode unless extended-redis-compatibility is on; either will do.
    let mode = info_field(&text, "redis_mode").or_else(|| info_field(&text, "server_mode"));
    assert_eq!(mode.as_deref(), Some("standalone"), "{text}");
    assert_eq!(info_num(&text, "process_id"), i64::from(srv.pid()));
    assert_eq!(info_num(&text, "tcp_port"), i64::from(srv.port()));
    assert_eq!(info_num(&text, "arch_bits"), 64);
    let run_id = info_field(&text, "run_id").expect("run_id");
    assert!(run_id.len() == 40 && run_id.chars().all(|c| c.is_ascii_hexdigit()), "run_id {run_id}");
    assert!(info_num(&text, "uptime_in_seconds") >= 0);
    let conf = info_field(&text, "config_file").expect("config_file");
    assert_eq!(conf, srv.dir().join("hotkv.conf").display().to_string());
}

#[test]
fn info_lines_are_crlf_terminated_fields() {
    let srv = server();
    let mut c = srv.client();
    let text = info(&mut c, "default");
    for line in text.split_terminator("\r\n") {
        assert!(!line.contains('\n'), "bare LF in INFO line {line:?}");
        assert!(line.is_empty() || line.starts_with("# ") || line.contains(':'), "malformed INFO line {line:?}");
    }
}

#[test]
fn info_cluster_reports_cluster_disabled() {
    let srv = server();
    let mut c = srv.client();
    let text = info(&mut c, "cluster");
    assert_eq!(info_num(&text, "cluster_enabled"), 0, "{text}");
}

#[test]
fn info_keyspace_lists_only_non_empty_databases() {
    let srv = server();
    let mut c = srv.client();
    let empty = info(&mut c, "keyspace");
    assert!(!empty.contains("db0:"), "an empty db0 must not be listed:\n{empty}");
    ok(&mut c, &["SET", "a", "1"]);
    ok(&mut c, &["SELECT", "2"]);
    ok(&mut c, &["SET", "b", "2", "EX", "1000"]);
    ok(&mut c, &["SET", "c", "3"]);
    let text = info(&mut c, "keyspace");
    assert_eq!(info_field(&text, "db0").as_deref(), Some("keys=1,expires=0,avg_ttl=0"), "{text}");
    let db2 = info_field(&text, "db2").expect("db2 line");
    assert!(db2.starts_with("keys=2,expires=1,avg_ttl="), "{db2}");
    assert!(!text.contains("db1:"));
    ok(&mut c, &["FLUSHDB"]);
    let text = info(&mut c, "keyspace");
    assert!(!text.contains("db2:"), "a flushed db must disappear:\n{text}");
}

#[test]
fn default_info_has_the_standard_sections() {
    let srv = server();
    let mut c = srv.client();
    let text = c.cmd(&["INFO"]).text();
    for section in
        ["# Server", "# Clients", "# Memory", "# Persistence", "# Stats", "# Replication", "# CPU", "# Keyspace"]
    {
        assert!(text.contains(section), "INFO lacks {section}");
    }
    let everything = info(&mut c, "everything");
    assert!(everything.contains("# Commandstats"), "INFO everything lacks commandstats");
    // Several sections at once, and an unknown one adds nothing.
    let two = c.cmd(&["INFO", "server", "clients"]).text();
    assert!(two.contains("# Server") && two.contains("# Clients") && !two.contains("# Memory"));
    assert_eq!(c.cmd(&["INFO", "nosuchsection"]), Frame::bulk(""));
}

#[test]
fn info_memory_reports_usage_and_limits() {
    let srv = server_with(&[("maxmemory", "64mb"), ("maxmemory-policy", "allkeys-lru")]);
    let mut c = srv.client();
    let text = info(&mut c, "memory");
    assert!(info_num(&text, "used_memory") > 0);
    assert!(info_num(&text, "used_memory_rss") > 0);
    assert!(info_num(&text, "used_memory_peak") >= info_num(&text, "used_memory") / 2);
    assert!(info_field(&text, "used_memory_human").is_some_and(|h| h.ends_with(['B', 'K', 'M', 'G'])));
    assert_eq!(info_num(&text, "maxmemory"), 64 * 1024 * 1024);
    assert_eq!(info_field(&text, "maxmemory_human").as_deref(), Some("64.00M"));
    assert_eq!(info_field(&text, "maxmemory_policy").as_deref(), Some("allkeys-lru"));
    assert!(info_field(&text, "mem_fragmentation_ratio").is_some());
}

#[test]
fn info_stats_count_commands_hits_and_misses() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    c.cmd(&["GET", "k"]);
    c.cmd(&["GET", "k"]);
    c.cmd(&["GET", "missing"]);
    let text = info(&mut c, "stats");
    assert_eq!(info_num(&text, "keyspace_hits"), 2, "{text}");
    assert_eq!(info_num(&text, "keyspace_misses"), 1, "{text}");
    assert!(info_num(&text, "total_commands_processed") >= 4);
    assert!(info_num(&text, "total_connections_received") >= 1);
    assert_eq!(info_num(&text, "expired_keys"), 0);
    assert_eq!(info_num(&text, "evicted_keys"), 0);
}

#[test]
fn info_clients_counts_connections() {
    let srv = server();
    let mut c = srv.client();
    // A connection counts once the server has accepted it: a round trip proves that.
    let mut other = srv.client();
    assert_eq!(other.cmd(&["PING"]), hotkv_test_support::Frame::Simple("PONG".into()));
    let text = info(&mut c, "clients");
    assert_eq!(info_num(&text, "connected_clients"), 2, "{text}");
    assert_eq!(info_num(&text, "blocked_clients"), 0);
    assert_eq!(info_num(&text, "maxclients"), 10000);
}

#[test]
fn info_replication_says_master() {
    let srv = server();
    let mut c = srv.client();
    let text = info(&mut c, "replication");
    assert_eq!(info_field(&text, "role").as_deref(), Some("master"));
    assert_eq!(info_num(&text, "connected_slaves"), 0);
}

#[test]
fn info_commandstats_and_errorstats_count_calls_and_errors() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    ok(&mut c, &["SET", "k", "w"]);
    c.cmd(&["NOSUCHCOMMAND"]);
    c.cmd(&["INCR", "k"]);
    let cmds = info(&mut c, "commandstats");
    let set = info_field(&cmds, "cmdstat_set").unwrap_or_else(|| panic!("no cmdstat_set:\n{cmds}"));
    assert!(set.starts_with("calls=2,usec="), "{set}");
    let incr = info_field(&cmds, "cmdstat_incr").expect("cmdstat_incr");
    assert!(incr.contains("failed_calls=1"), "{incr}");
    let errs = info(&mut c, "errorstats");
    assert_eq!(info_field(&errs, "errorstat_ERR").as_deref(), Some("count=2"), "{errs}");
}
