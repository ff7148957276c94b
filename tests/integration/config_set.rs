//! CONFIG GET/SET/RESETSTAT/REWRITE at runtime, including CONFIG SET's all-or-nothing rule.

use std::net::TcpListener;
use std::time::Duration;

use hotkv_test_support::{ConfigFormat, Frame, RawClient, wait_for};

use crate::{assert_err, assert_err_prefix, builder, config_get, ok, server};

#[test]
fn config_get_returns_name_value_pairs() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["CONFIG", "GET", "maxmemory"]), Frame::Array(vec![Frame::bulk("maxmemory"), Frame::bulk("0")]));
    assert_eq!(config_get(&mut c, "port"), srv.port().to_string());
    assert_eq!(config_get(&mut c, "maxmemory-policy"), "noeviction");
    assert_eq!(config_get(&mut c, "databases"), "16");
    assert_eq!(c.cmd(&["CONFIG", "GET", "no-such-directive"]), Frame::Array(vec![]));
}

#[test]
fn config_get_matches_globs_and_several_patterns() {
    let srv = server();
    let mut c = srv.client();
    let reply = c.cmd(&["CONFIG", "GET", "maxmemory*", "port"]);
    let names: Vec<String> = reply.pairs().iter().map(|(k, _)| k.text()).collect();
    for want in ["maxmemory", "maxmemory-policy", "maxmemory-samples", "port"] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
    let mut dedup = names.clone();
    dedup.sort();
    dedup.dedup();
    assert_eq!(dedup.len(), names.len(), "CONFIG GET returned a name twice: {names:?}");
    let all = c.cmd(&["CONFIG", "GET", "*"]).pairs();
    assert!(all.len() > 20, "CONFIG GET * lists only {} directives", all.len());
}

#[test]
fn config_set_changes_the_value_config_get_reports() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "10mb"]);
    assert_eq!(config_get(&mut c, "maxmemory"), "10485760");
    ok(&mut c, &["CONFIG", "SET", "maxmemory-policy", "ALLKEYS-LRU"]);
    assert_eq!(config_get(&mut c, "maxmemory-policy"), "allkeys-lru");
    ok(&mut c, &["CONFIG", "SET", "hz", "20", "maxmemory-samples", "7"]);
    assert_eq!(config_get(&mut c, "hz"), "20");
    assert_eq!(config_get(&mut c, "maxmemory-samples"), "7");
}

#[test]
fn config_set_is_all_or_nothing() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "10000002"]);
    assert_err_prefix(
        &c.cmd(&["CONFIG", "SET", "maxmemory", "10000001", "maxmemory-policy", "bogus-policy"]),
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory-policy') - argument(s) must be one of the following:",
    );
    assert_eq!(config_get(&mut c, "maxmemory"), "10000002", "the valid half must not have been applied");
    assert_eq!(config_get(&mut c, "maxmemory-policy"), "noeviction");
}

#[test]
fn config_set_rolls_back_when_applying_fails() {
    let srv = server();
    let mut c = srv.client();
    // Hold a port so the server cannot listen on it: the new value parses but cannot apply.
    let holder = TcpListener::bind("127.0.0.1:0").expect("bind a port to hold");
    let taken = holder.local_addr().unwrap().port().to_string();
    assert_err_prefix(
        &c.cmd(&["CONFIG", "SET", "maxmemory", "10000001", "port", &taken]),
        "ERR CONFIG SET failed (possibly related to argument 'port') - Unable to listen on this port",
    );
    assert_eq!(config_get(&mut c, "maxmemory"), "0");
    assert_eq!(config_get(&mut c, "port"), srv.port().to_string());
    assert_eq!(srv.client().cmd(&["PING"]), Frame::simple("PONG"), "still serving on the old port");
}

#[test]
fn config_set_bind_to_an_address_it_cannot_have_keeps_the_old_one() {
    let srv = server();
    let mut c = srv.client();
    let before = config_get(&mut c, "bind");
    // Valkey's networking suite: not an address at all, and an address this host lacks.
    for bad in ["999.999.999.999", "192.0.2.1"] {
        assert_err(
            &c.cmd(&["CONFIG", "SET", "bind", bad]),
            "ERR CONFIG SET failed (possibly related to argument 'bind') - Failed to bind to specified addresses.",
        );
        assert_eq!(config_get(&mut c, "bind"), before);
        assert_eq!(srv.client().cmd(&["PING"]), Frame::simple("PONG"), "still serving on the old address");
    }
}

#[test]
fn config_set_rejects_unknown_immutable_duplicate_and_malformed_values() {
    let srv = server();
    let mut c = srv.client();
    assert_err(
        &c.cmd(&["CONFIG", "SET", "no-such-directive", "1"]),
        "ERR Unknown option or number of arguments for CONFIG SET - 'no-such-directive'",
    );
    assert_err(
        &c.cmd(&["CONFIG", "SET", "daemonize", "yes"]),
        "ERR CONFIG SET failed (possibly related to argument 'daemonize') - can't set immutable config",
    );
    assert_err(
        &c.cmd(&["CONFIG", "SET", "maxmemory", "1000", "maxmemory", "2000"]),
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - duplicate parameter",
    );
    assert_err(
        &c.cmd(&["CONFIG", "SET", "maxmemory", "lots"]),
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory') - argument must be a memory value",
    );
    assert_err(
        &c.cmd(&["CONFIG", "SET", "hz", "x"]),
        "ERR CONFIG SET failed (possibly related to argument 'hz') - argument couldn't be parsed into an integer",
    );
    assert_err(
        &c.cmd(&["CONFIG", "SET", "maxmemory-samples", "0"]),
        "ERR CONFIG SET failed (possibly related to argument 'maxmemory-samples') - argument must be between 1 and 64 inclusive",
    );
    assert_err(&c.cmd(&["CONFIG", "SET", "maxmemory"]), "ERR wrong number of arguments for 'config|set' command");
    assert_eq!(config_get(&mut c, "maxmemory"), "0");
}

#[test]
fn config_set_port_moves_the_listener() {
    let srv = server();
    let mut c = srv.client();
    let new_port = {
        let l = TcpListener::bind("127.0.0.1:0").expect("find a free port");
        l.local_addr().unwrap().port()
    };
    ok(&mut c, &["CONFIG", "SET", "port", &new_port.to_string()]);
    let mut moved = RawClient::connect(new_port);
    assert_eq!(moved.cmd(&["PING"]), Frame::simple("PONG"));
    assert!(
        wait_for(|| RawClient::try_connect(srv.port()).is_err(), Duration::from_secs(5)),
        "the old port still accepts connections"
    );
    // The connection made before the change keeps working.
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn config_resetstat_clears_counters() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v"]);
    assert_err_prefix(&c.cmd(&["NOSUCHCOMMAND"]), "ERR unknown command");
    ok(&mut c, &["SAVE"]);
    assert_eq!(crate::info_num(&crate::info(&mut c, "persistence"), "rdb_saves"), 1);
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert_eq!(crate::info_num(&crate::info(&mut c, "persistence"), "rdb_saves"), 0);
    let stats = crate::info(&mut c, "stats");
    assert!(crate::info_num(&stats, "total_commands_processed") <= 2, "{stats}");
    assert_eq!(crate::info_num(&stats, "total_error_replies"), 0);
    assert!(!crate::info(&mut c, "commandstats").contains("cmdstat_set:"));
}

#[test]
fn config_rewrite_persists_runtime_changes_to_the_file() {
    let srv = builder().config("maxmemory", "1mb").spawn();
    let mut c = srv.client();
    ok(&mut c, &["CONFIG", "SET", "maxmemory", "7mb", "maxmemory-policy", "allkeys-lru"]);
    ok(&mut c, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(srv.dir().join("hotkv.conf")).expect("read the rewritten file");
    assert!(text.lines().any(|l| l == "maxmemory 7mb"), "rewritten file:\n{text}");
    assert!(text.lines().any(|l| l == "maxmemory-policy allkeys-lru"), "rewritten file:\n{text}");
    assert!(text.lines().any(|l| l == format!("port {}", srv.port())), "rewritten file:\n{text}");
    assert!(!text.lines().any(|l| l == "maxmemory 1mb"), "the old value must be replaced:\n{text}");
}

#[test]
fn config_rewrite_without_a_file_is_an_error() {
    let srv = builder().format(ConfigFormat::Flags).spawn();
    let mut c = srv.client();
    assert_err(&c.cmd(&["CONFIG", "REWRITE"]), "ERR The server is running without a config file");
}

#[test]
fn unknown_config_subcommands_point_to_help() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["CONFIG", "BOGUS"]), "ERR unknown subcommand 'BOGUS'. Try CONFIG HELP.");
}
