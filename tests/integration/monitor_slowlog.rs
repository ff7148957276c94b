//! MONITOR (live command feed) and SLOWLOG (commands over a latency threshold).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hotkv_test_support::{Frame, RawClient, TestServer};

use crate::{ok, server, server_with};

/// Reads MONITOR lines until one contains `needle` (bounded by the client's read timeout and a
/// line count, since other commands may be fed first).
fn monitor_line_with(m: &mut RawClient, needle: &str) -> String {
    for _ in 0..100 {
        let line = match m.read_frame() {
            Frame::Simple(s) => s,
            other => panic!("MONITOR fed {other}, expected a status line"),
        };
        if line.contains(needle) {
            return line;
        }
    }
    panic!("no MONITOR line containing {needle:?} among 100 lines");
}

/// A client of `srv` in MONITOR mode, its reads bounded.
fn monitor(srv: &TestServer) -> RawClient {
    let mut m = srv.client();
    m.set_timeout(Duration::from_secs(5));
    assert_eq!(m.cmd(&["MONITOR"]), Frame::ok());
    m
}

#[test]
fn monitor_sees_commands_of_other_clients() {
    let srv = server();
    let mut m = monitor(&srv);
    let mut c = srv.client();
    ok(&mut c, &["set", "foo", "bar"]);
    let line = monitor_line_with(&mut m, "\"foo\"");
    // `<unix seconds>.<micros> [<db> <client addr>] "arg" ...`
    let (ts, rest) = line.split_once(' ').expect("a timestamp first");
    let (secs, micros) = ts.split_once('.').expect("seconds.micros");
    assert!(secs.parse::<u64>().is_ok() && micros.len() == 6, "timestamp {ts:?}");
    let expected = format!("[0 {}] \"set\" \"foo\" \"bar\"", c.local_addr());
    assert_eq!(rest, expected);
}

#[test]
fn monitor_shows_the_database_and_quotes_arguments() {
    let srv = server();
    let mut m = monitor(&srv);
    let mut c = srv.client();
    ok(&mut c, &["SELECT", "3"]);
    ok(&mut c, &["SET", "a b", "x\ny\"z"]);
    let line = monitor_line_with(&mut m, "\"a b\"");
    assert!(line.ends_with(&format!("[3 {}] \"SET\" \"a b\" \"x\\ny\\\"z\"", c.local_addr())), "{line}");
}

#[test]
fn slowlog_with_a_zero_threshold_records_every_command() {
    let srv = server_with(&[("slowlog-log-slower-than", "0")]);
    let mut c = srv.client();
    ok(&mut c, &["CLIENT", "SETNAME", "slow-client"]);
    ok(&mut c, &["SET", "k", "v"]);
    let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs() as i64;
    let log = c.cmd(&["SLOWLOG", "GET", "10"]);
    let entry = log
        .items()
        .iter()
        .find(|e| e.items().get(3).is_some_and(|a| a.items().iter().map(Frame::text).eq(["SET", "k", "v"])))
        .unwrap_or_else(|| panic!("SET k v not in the slow log: {log}"))
        .items()
        .to_vec();
    assert_eq!(entry.len(), 6, "id, time, duration, args, addr, name");
    assert!(entry[0].int() >= 0);
    assert!((entry[1].int() - now).abs() < 60, "timestamp {} vs now {now}", entry[1]);
    assert!(entry[2].int() >= 0);
    assert_eq!(entry[4].text(), c.local_addr().to_string());
    assert_eq!(entry[5].text(), "slow-client");
    assert!(c.cmd(&["SLOWLOG", "LEN"]).int() >= 2);
}

#[test]
fn slowlog_reset_len_and_max_len() {
    let srv = server_with(&[("slowlog-log-slower-than", "0"), ("slowlog-max-len", "10")]);
    let mut c = srv.client();
    for _ in 0..50 {
        c.cmd(&["PING"]);
    }
    assert_eq!(c.cmd(&["SLOWLOG", "LEN"]), Frame::Integer(10));
    assert_eq!(c.cmd(&["SLOWLOG", "GET", "5"]).items().len(), 5);
    assert_eq!(c.cmd(&["SLOWLOG", "GET", "-1"]).items().len(), 10);
    ok(&mut c, &["SLOWLOG", "RESET"]);
    // The RESET itself may be logged after it ran, but nothing older survives it.
    assert!(c.cmd(&["SLOWLOG", "LEN"]).int() <= 1);
}

#[test]
fn slowlog_max_len_zero_disables_the_log_and_uses_no_ids() {
    let srv = server_with(&[("slowlog-log-slower-than", "0"), ("slowlog-max-len", "0")]);
    let mut c = srv.client();
    for _ in 0..20 {
        c.cmd(&["PING"]);
    }
    assert_eq!(c.cmd(&["SLOWLOG", "LEN"]), Frame::Integer(0));
    // The CONFIG SET that enables the log is the first entry: id 0, as in Valkey.
    ok(&mut c, &["CONFIG", "SET", "slowlog-max-len", "10"]);
    let log = c.cmd(&["SLOWLOG", "GET", "-1"]);
    let first = log.items().last().unwrap_or_else(|| panic!("empty slow log: {log}")).items().to_vec();
    assert_eq!(first[0], Frame::Integer(0), "{log}");
    assert_eq!(
        first[3].items().iter().map(Frame::text).collect::<Vec<_>>(),
        ["CONFIG", "SET", "slowlog-max-len", "10"]
    );
}

#[test]
fn slowlog_default_threshold_skips_fast_commands() {
    let srv = server();
    let mut c = srv.client();
    for _ in 0..20 {
        c.cmd(&["PING"]);
    }
    assert_eq!(c.cmd(&["SLOWLOG", "LEN"]), Frame::Integer(0));
}

#[test]
fn slowlog_truncates_long_arguments_and_argument_lists() {
    let srv = server_with(&[("slowlog-log-slower-than", "0")]);
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", &"x".repeat(200)]);
    let mut args = vec!["MSET".to_string()];
    for i in 0..20 {
        args.push(format!("k{i}"));
        args.push("v".into());
    }
    ok(&mut c, &args.iter().map(String::as_str).collect::<Vec<_>>());
    let log = c.cmd(&["SLOWLOG", "GET", "-1"]);
    let argv_of = |name: &str| -> Vec<String> {
        log.items()
            .iter()
            .map(|e| e.items()[3].items().iter().map(Frame::text).collect::<Vec<_>>())
            .find(|a| a[0] == name)
            .unwrap_or_else(|| panic!("no {name} entry in {log}"))
    };
    let set = argv_of("SET");
    assert_eq!(set[2], format!("{}... (72 more bytes)", "x".repeat(128)));
    let mset = argv_of("MSET");
    assert_eq!(mset.len(), 32);
    assert_eq!(mset[31], "... (10 more arguments)");
}

/// Flattens a RESP2 array of pairs or a RESP3 map into (key, value) frames.
fn pairs(f: Frame) -> Vec<(Frame, Frame)> {
    match f {
        Frame::Map(kv) => kv,
        Frame::Array(items) => {
            assert!(items.len() % 2 == 0, "odd pair list");
            let mut it = items.into_iter();
            std::iter::from_fn(|| Some((it.next()?, it.next()?))).collect()
        }
        other => panic!("expected a map, got {other}"),
    }
}

#[test]
fn latency_histogram_reports_calls_and_a_cumulative_distribution() {
    let srv = server();
    let mut c = srv.client();
    for i in 0..50 {
        ok(&mut c, &["set", &format!("k{i}"), "v"]);
    }
    c.cmd(&["config", "get", "maxmemory"]);
    for resp3 in [false, true] {
        if resp3 {
            c.cmd(&["hello", "3"]);
        }
        let all = pairs(c.cmd(&["latency", "histogram", "set", "config", "no-such-command"]));
        let names: Vec<Frame> = all.iter().map(|(k, _)| k.clone()).collect();
        assert!(names.contains(&Frame::bulk("set")), "{names:?}");
        assert!(names.contains(&Frame::bulk("config|get")), "a container covers its subcommands: {names:?}");
        assert_eq!(names.len(), 2, "unknown and never-run commands are left out: {names:?}");
        let (_, set) = all.into_iter().find(|(k, _)| *k == Frame::bulk("set")).unwrap();
        let fields = pairs(set);
        assert_eq!(fields[0], (Frame::bulk("calls"), Frame::Integer(50)));
        assert_eq!(fields[1].0, Frame::bulk("histogram_usec"));
        let buckets: Vec<(i64, i64)> = pairs(fields[1].1.clone())
            .into_iter()
            .map(|(b, n)| match (b, n) {
                (Frame::Integer(b), Frame::Integer(n)) => (b, n),
                other => panic!("bucket {other:?}"),
            })
            .collect();
        assert!(!buckets.is_empty());
        assert!(buckets.windows(2).all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1), "{buckets:?}");
        assert_eq!(buckets.last().unwrap().1, 50, "the last bucket counts every call");
    }
    ok(&mut c, &["config", "resetstat"]);
    assert_eq!(pairs(c.cmd(&["latency", "histogram", "set"])), vec![], "RESETSTAT empties the histograms");
    assert!(
        matches!(c.cmd(&["latency", "help"]), Frame::Array(lines) if lines.contains(&Frame::simple("HISTOGRAM [COMMAND ...]")))
    );
}

/// Valkey's introspection suite: a blocked command shows in MONITOR when it is called, once,
/// not again when another client's push serves it or when it times out and runs again.
#[test]
fn monitor_shows_a_blocked_command_once_when_it_is_called() {
    let srv = server();
    let mut m = monitor(&srv);
    let mut blocked = srv.client();
    let mut pusher = srv.client();
    blocked.send(&["blpop", "mylist", "0"]);
    assert!(monitor_line_with(&mut m, "\"blpop\"").contains("\"mylist\" \"0\""));
    assert_eq!(pusher.cmd(&["lpush", "mylist", "1"]), Frame::Integer(1));
    assert_eq!(blocked.read_frame(), Frame::Array(vec![Frame::bulk("mylist"), Frame::bulk("1")]));
    assert_eq!(pusher.cmd(&["lpush", "mylist", "2"]), Frame::Integer(1));
    let lines: Vec<String> = (0..2).map(|_| monitor_line_with(&mut m, "\"")).collect();
    assert!(lines[0].contains("\"lpush\" \"mylist\" \"1\""), "{lines:?}");
    assert!(lines[1].contains("\"lpush\" \"mylist\" \"2\""), "served, the BLPOP is not shown again: {lines:?}");
    // A timeout runs the command again to reply; MONITOR does not show it twice.
    assert_eq!(blocked.cmd(&["blpop", "empty", "0.05"]), Frame::NullArray);
    assert_eq!(pusher.cmd(&["set", "marker", "x"]), Frame::ok());
    let lines: Vec<String> = (0..2).map(|_| monitor_line_with(&mut m, "\"")).collect();
    assert!(lines[0].contains("\"blpop\" \"empty\""), "{lines:?}");
    assert!(lines[1].contains("\"set\" \"marker\""), "{lines:?}");
}

/// MIGRATE's passwords never reach MONITOR or SLOWLOG: `AUTH password` and `AUTH2 username
/// password` show as `(redacted)`, as in Valkey; key names after KEYS are shown.
#[test]
fn migrate_passwords_are_redacted_in_monitor_and_slowlog() {
    let srv = server_with(&[("slowlog-log-slower-than", "0")]);
    let port = srv.port().to_string();
    let mut m = monitor(&srv);
    let mut c = srv.client();
    // No such key: MIGRATE answers NOKEY without connecting anywhere.
    let calls: [&[&str]; 3] = [
        &["MIGRATE", "127.0.0.1", &port, "k1", "9", "5000", "AUTH", "pw-one"],
        &["MIGRATE", "127.0.0.1", &port, "k2", "9", "5000", "COPY", "AUTH2", "user-two", "pw-two"],
        &["MIGRATE", "127.0.0.1", &port, "", "9", "5000", "AUTH", "pw-three", "KEYS", "auth", "k3"],
    ];
    for call in calls {
        assert_eq!(c.cmd(call), Frame::Simple("NOKEY".into()), "{call:?}");
    }
    let one = monitor_line_with(&mut m, "\"k1\"");
    assert!(one.ends_with("\"5000\" \"AUTH\" \"(redacted)\""), "{one}");
    let two = monitor_line_with(&mut m, "\"k2\"");
    assert!(two.ends_with("\"COPY\" \"AUTH2\" \"(redacted)\" \"(redacted)\""), "{two}");
    let three = monitor_line_with(&mut m, "\"k3\"");
    assert!(three.ends_with("\"AUTH\" \"(redacted)\" \"KEYS\" \"auth\" \"k3\""), "{three}");
    let log = c.cmd(&["SLOWLOG", "GET", "-1"]).to_string();
    assert!(!log.contains("pw-") && !log.contains("user-two"), "{log}");
    assert_eq!(log.matches("(redacted)").count(), 4, "{log}");
}

/// Passwords and user rules never reach MONITOR or SLOWLOG, as Valkey redacts them: AUTH's
/// arguments, HELLO's `AUTH user password`, ACL SETUSER's and DELUSER's arguments, and what
/// CONFIG SET gives a secret directive.
#[test]
fn passwords_and_user_rules_are_redacted_in_monitor_and_slowlog() {
    let srv = server_with(&[("slowlog-log-slower-than", "0")]);
    let mut m = monitor(&srv);
    let mut c = srv.client();
    c.cmd(&["AUTH", "pw-a"]);
    c.cmd(&["AUTH", "user-b", "pw-b"]);
    c.cmd(&["HELLO", "2", "AUTH", "user-c", "pw-c", "SETNAME", "shown"]);
    assert_eq!(c.cmd(&["ACL", "SETUSER", "user-d", "on", ">pw-d", "~*", "+@all"]), Frame::ok());
    assert_eq!(c.cmd(&["ACL", "DELUSER", "user-d"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["CONFIG", "SET", "masterauth", "pw-e", "maxmemory-policy", "noeviction"]), Frame::ok());
    assert!(monitor_line_with(&mut m, "\"AUTH\"").ends_with("\"AUTH\" \"(redacted)\""));
    assert!(monitor_line_with(&mut m, "\"AUTH\"").ends_with("\"AUTH\" \"(redacted)\" \"(redacted)\""));
    let hello = monitor_line_with(&mut m, "\"HELLO\"");
    assert!(hello.ends_with("\"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"shown\""), "{hello}");
    let log = c.cmd(&["SLOWLOG", "GET", "-1"]).to_string();
    assert!(!log.contains("pw-") && !log.contains("user-"), "{log}");
    assert!(log.contains("noeviction") && log.contains("masterauth"), "only the secret value goes: {log}");
}

/// MONITOR shows EVAL and FCALL before the commands they run, those from `lua`, as Valkey.
#[test]
fn monitor_shows_a_script_then_its_commands_from_lua() {
    let srv = server();
    let mut m = monitor(&srv);
    let mut c = srv.client();
    c.cmd(&["EVAL", "redis.call('set', KEYS[1], ARGV[1])", "1", "foo", "bar"]);
    let lib = "#!lua name=t\nredis.register_function('t', function() return redis.call('set', 'fn', 'x') end)";
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", lib]), Frame::bulk("t"));
    c.cmd(&["FCALL", "t", "0"]);
    let lines: Vec<String> = (0..5).map(|_| monitor_line_with(&mut m, "\"")).collect();
    assert!(lines[0].contains("\"EVAL\""), "{lines:?}");
    assert!(lines[1].contains(" lua] \"set\" \"foo\" \"bar\""), "{lines:?}");
    assert!(lines[2].contains("\"FUNCTION\" \"LOAD\""), "{lines:?}");
    assert!(lines[3].contains("\"FCALL\" \"t\""), "{lines:?}");
    assert!(lines[4].contains(" lua] \"set\" \"fn\" \"x\""), "{lines:?}");
}
