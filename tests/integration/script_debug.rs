//! SCRIPT DEBUG: the Lua debugger as `redis-cli --ldb` and Valkey's test suite drive it.
//! SYNC keeps what the script did, YES puts it all back; the debugging client talks to the
//! script between its lines; other clients are served meanwhile; a client that leaves, or
//! sends garbage, ends its session without hurting the server.

use std::process::Command;
use std::time::Duration;

use hotkv_test_support::tools::run_bounded;
use hotkv_test_support::{Frame, RawClient, encode_command, free_port};

use crate::pki::Pki;
use crate::{assert_err, info, info_num, server};

const WAIT: Duration = Duration::from_secs(20);

/// The lines of one debugger answer (an array of status strings).
fn lines(f: Frame) -> Vec<String> {
    match f {
        Frame::Array(items) => items
            .into_iter()
            .map(|i| match i {
                Frame::Simple(s) => s,
                other => panic!("not a status line: {other:?}"),
            })
            .collect(),
        other => panic!("not a debugger answer: {other:?}"),
    }
}

/// Sends a debugger command and reads its answer.
fn say(c: &mut RawClient, words: &[&str]) -> Vec<String> {
    c.send(words);
    lines(c.read_frame())
}

#[test]
fn sync_mode_steps_prints_and_keeps_the_changes() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SCRIPT", "DEBUG", "SYNC"]), Frame::ok());
    let body = "local a = redis.call('incr', KEYS[1])\nlocal t = {a, ARGV[1]}\nreturn a";
    c.send(&["EVAL", body, "1", "counter", "x"]);
    assert_eq!(
        lines(c.read_frame()),
        ["* Stopped at 1, stop reason = step over", "-> 1   local a = redis.call('incr', KEYS[1])"]
    );
    assert_eq!(
        say(&mut c, &["s"]),
        [
            "<command> incr counter",
            "<reply> 1",
            "* Stopped at 2, stop reason = step over",
            "-> 2   local t = {a, ARGV[1]}"
        ]
    );
    assert_eq!(say(&mut c, &["print", "a"]), ["<value> 1"]);
    assert_eq!(say(&mut c, &["p", "ARGV"]), ["<value> {\"x\"}"]);
    assert_eq!(say(&mut c, &["p", "nope"]), ["No such variable."]);
    assert_eq!(say(&mut c, &["redis", "get", "counter"]), ["<command> get counter", "<reply> \"1\""]);
    assert_eq!(say(&mut c, &["eval", "2 ^ 10"]), ["<retval> 1024"]);
    assert_eq!(say(&mut c, &["b", "3"]), ["-> 2   local t = {a, ARGV[1]}", "  #3   return a"]);

    // The session holds one thread and the script's keys, not the server.
    let mut other = srv.client();
    assert_eq!(other.cmd(&["PING"]), Frame::Simple("PONG".into()));
    assert_eq!(other.cmd(&["SET", "elsewhere", "1"]), Frame::ok());

    assert_eq!(say(&mut c, &["c"]), ["* Stopped at 3, stop reason = break point", "->#3   return a"]);
    assert_eq!(say(&mut c, &["c"]), ["<endsession>"]);
    assert_eq!(c.read_frame(), Frame::Integer(1));
    assert!(c.closed_within(WAIT), "the session ends with the connection");
    assert_eq!(other.cmd(&["GET", "counter"]), Frame::bulk("1"));
    let log = srv.log();
    assert!(log.contains("Lua debugging session started (sync, changes kept) for client id="), "{log}");
    assert!(log.contains("Lua debugging session ended for client id="), "{log}");
}

#[test]
fn yes_mode_puts_everything_back_and_tells_no_one() {
    let srv = server();
    let mut setup = srv.client();
    assert_eq!(setup.cmd(&["SET", "k", "10"]), Frame::ok());
    assert_eq!(setup.cmd(&["RPUSH", "list", "a"]), Frame::Integer(1));
    let dirty = info_num(&info(&mut setup, "persistence"), "rdb_changes_since_last_save");
    let mut events = srv.client();
    events.cmd(&["CONFIG", "SET", "notify-keyspace-events", "KEA"]);
    assert!(matches!(events.cmd(&["PSUBSCRIBE", "*"]), Frame::Array(a) if a.len() == 3));

    let mut c = srv.client();
    assert_eq!(c.cmd(&["SCRIPT", "DEBUG", "YES"]), Frame::ok());
    let body = "redis.call('incr', KEYS[1])\nredis.call('set', 'fresh', 'v')\nredis.call('lpush', 'list', 'b')\nredis.call('del', 'list')\nreturn redis.call('get', KEYS[1])";
    c.send(&["EVAL", body, "1", "k"]);
    assert_eq!(lines(c.read_frame())[0], "* Stopped at 1, stop reason = step over");
    // What cannot be undone is refused.
    let refused = say(&mut c, &["r", "flushall"]);
    assert_eq!(
        refused[1],
        "<error> -ERR 'flushall' cannot be undone at the end of a SCRIPT DEBUG YES session: use SCRIPT DEBUG SYNC"
    );
    assert!(say(&mut c, &["r", "publish", "ch", "m"])[1].starts_with("<error> -ERR 'publish' cannot be undone"));
    assert_eq!(say(&mut c, &["c"]), ["<endsession>"]);
    assert_eq!(c.read_frame(), Frame::bulk("11"), "the script saw its own writes");
    assert!(c.closed_within(WAIT));

    assert_eq!(setup.cmd(&["GET", "k"]), Frame::bulk("10"));
    assert_eq!(setup.cmd(&["EXISTS", "fresh"]), Frame::Integer(0));
    assert_eq!(setup.cmd(&["LRANGE", "list", "0", "-1"]), Frame::Array(vec![Frame::bulk("a")]));
    assert_eq!(info_num(&info(&mut setup, "persistence"), "rdb_changes_since_last_save"), dirty);
    // No keyspace event left the session: the next one a subscriber sees is this SET's.
    assert_eq!(setup.cmd(&["SET", "marker", "1"]), Frame::ok());
    let channel = match events.read_frame() {
        Frame::Array(parts) => match &parts[2] {
            Frame::Bulk(b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    };
    assert_eq!(channel, "__keyspace@0__:marker", "an event of the debugged script leaked");
}

#[test]
fn refusals_and_clients_that_leave_or_send_garbage() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["SCRIPT", "DEBUG", "MAYBE"]), "ERR Use SCRIPT DEBUG YES/SYNC/NO");
    // In one write, so both are in one batch: PING's reply is pending when SCRIPT DEBUG runs.
    let mut both = encode_command(&["PING"]);
    both.extend(encode_command(&["SCRIPT", "DEBUG", "SYNC"]));
    c.send_raw(&both);
    assert_eq!(c.read_frame(), Frame::Simple("PONG".into()));
    assert_err(&c.read_frame(), "ERR SCRIPT DEBUG must be called outside a pipeline");
    assert_eq!(c.cmd(&["SCRIPT", "DEBUG", "SYNC"]), Frame::ok());
    assert_err(&c.cmd(&["EVALSHA", "x", "0"]), "NOSCRIPT No matching script. Please use EVAL.");
    assert_err(&c.cmd(&["EVALSHA", &"a".repeat(40), "0"]), "ERR Please use EVAL instead of EVALSHA for debugging");
    assert_eq!(c.cmd(&["SCRIPT", "DEBUG", "NO"]), Frame::ok());
    assert_eq!(c.cmd(&["EVAL", "return 7", "0"]), Frame::Integer(7));

    // Valkey's parsing tests: unknown commands, NUL bytes included, are answered.
    assert_eq!(c.cmd(&["SCRIPT", "DEBUG", "SYNC"]), Frame::ok());
    c.send(&["EVAL", "return 'hello'", "0"]);
    c.read_frame();
    for bad in ["'hello\0world'", "'hello\0'", "'\0hello'", "'\0hello\0'"] {
        assert_eq!(say(&mut c, &[bad]), ["<error> Unknown Lua debugger command or wrong number of arguments."]);
    }
    // A command with a hundred arguments runs (and fails) as the script's own call would.
    let mut words = vec!["redis"];
    words.extend(std::iter::repeat_n("test", 100));
    let answer = say(&mut c, &words);
    assert!(answer.iter().any(|l| l.contains("Unknown command called from script")), "{answer:?}");
    assert_eq!(say(&mut c, &["server", "ping"]), ["<command> ping", "<reply> \"+PONG\""]);
    // Leaving mid-session: the script runs to its end and the server carries on.
    drop(c);
    let mut d = srv.client();
    assert_eq!(d.cmd(&["PING"]), Frame::Simple("PONG".into()));

    // Bytes that are no command end the script with an error.
    assert_eq!(d.cmd(&["SCRIPT", "DEBUG", "SYNC"]), Frame::ok());
    d.send(&["EVAL", "redis.call('set', 'after', '1')\nreturn 1", "0"]);
    d.read_frame();
    d.send_raw(b"garbage\r\n");
    assert_eq!(lines(d.read_frame()), ["<endsession>"]);
    match d.read_frame() {
        Frame::Error(e) => assert!(e.starts_with("ERR protocol error"), "{e}"),
        other => panic!("expected the script's error, got {other:?}"),
    }
    let mut e = srv.client();
    assert_eq!(e.cmd(&["EXISTS", "after"]), Frame::Integer(0), "the script stopped before its first line");

    // A script that does not compile still ends its session before the error.
    assert_eq!(e.cmd(&["SCRIPT", "DEBUG", "SYNC"]), Frame::ok());
    e.send(&["EVAL", "return +", "0"]);
    assert_eq!(lines(e.read_frame()), ["<endsession>"]);
    assert!(matches!(e.read_frame(), Frame::Error(t) if t.starts_with("ERR Error compiling script")));
    assert!(e.closed_within(WAIT));
}

/// redis-cli's own debugger front end, in plain text and over TLS, with the commands a user
/// types on its standard input.
#[test]
fn redis_cli_ldb_over_plain_text_and_tls() {
    let pki = Pki::new();
    let tls_port = free_port();
    let mut b = hotkv_test_support::TestServer::builder(crate::BIN);
    for (k, v) in pki.server_config(tls_port) {
        b = b.config(&k, &v);
    }
    let srv = b.spawn();
    let script = pki.dir.s("s.lua");
    std::fs::write(&script, "local v = redis.call('incr', KEYS[1])\nredis.debug('v is', v)\nreturn v\n").unwrap();
    let run = |tls: bool, mode: &str| {
        let mut cmd = Command::new("redis-cli");
        cmd.args(["-h", "127.0.0.1"]);
        if tls {
            cmd.args(["-p", &tls_port.to_string()]).args(pki.cli_args(Some(("app.crt", "app.key"))));
        } else {
            cmd.args(["-p", &srv.port().to_string()]);
        }
        cmd.arg(mode).arg("--eval").arg(&script).args(["n"]);
        run_bounded(&mut cmd, Some(b"s\np v\nc\n"), WAIT)
    };
    for tls in [false, true] {
        let out = run(tls, "--ldb-sync-mode");
        assert!(out.stdout.contains("* Stopped at 1, stop reason = step over"), "{}", out.stdout);
        assert!(out.stdout.contains("<command> incr n"), "{}", out.stdout);
        assert!(out.stdout.contains("<value> 1") || out.stdout.contains("<value> 2"), "{}", out.stdout);
        assert!(out.stdout.contains("<debug> line 2: \"v is\", "), "{}", out.stdout);
        let out = run(tls, "--ldb");
        assert!(out.stdout.contains("dataset changes rolled back"), "{}", out.stdout);
    }
    // Two SYNC sessions counted; the YES ones left nothing.
    let mut c = srv.client();
    assert_eq!(c.cmd(&["GET", "n"]), Frame::bulk("2"));
}

/// A shutdown closes a debugging session instead of waiting for its client: the script runs
/// to its end, its keys are free for the final save, and the process exits.
#[test]
fn shutdown_ends_a_session_stopped_in_the_debugger() {
    let mut srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SCRIPT", "DEBUG", "SYNC"]), Frame::ok());
    c.send(&["EVAL", "redis.call('set', KEYS[1], 'v')\nreturn 1", "1", "k"]);
    assert_eq!(lines(c.read_frame())[0], "* Stopped at 1, stop reason = step over");
    srv.client().send(&["SHUTDOWN"]);
    assert!(srv.wait_exit(WAIT).is_some(), "the node waited for the debugging client");
    let log = srv.log();
    assert!(log.contains("Killing debugging session of client id="), "{log}");
    assert!(log.find("Lua debugging session ended").unwrap() < log.find("DB saved on disk").unwrap(), "{log}");
}
