//! The append-only file with the real binary: every type and TTL back after a restart,
//! `appendfsync always` under kill -9, torn tails with `aof-load-truncated` yes and no,
//! BGREWRITEAOF under writers, the manifest's layout, the automatic rewrite, MISCONF while
//! the file cannot be written, `appendonly` turned on at runtime, the first base made from
//! dump.rdb, WAITAOF, DEBUG LOADAOF, and the directives `no-appendfsync-on-rewrite`,
//! `aof-disable-auto-gc`, `aof-rewrite-incremental-fsync` and `rdb-save-incremental-fsync`.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use hotkv_test_support::{Frame, RawClient, SIGKILL, TestServer, wait_for};

use crate::rdb_file::{assert_same, build_on_redis, redis_dataset, wall_ms};
use crate::{assert_err, assert_err_prefix, builder, info, info_field, info_num};

const WAIT: Duration = Duration::from_secs(30);

/// A server with the AOF on, in its own dir or in `dir` (a restart), `extra` on top.
fn node(dir: Option<&Path>, extra: &[(&str, &str)]) -> TestServer {
    let mut b = builder().config("enable-debug-command", "yes").config("save", "\"\"").config("appendonly", "yes");
    if let Some(d) = dir {
        b = b.config("dir", &d.display().to_string());
    }
    b.configs(extra).spawn()
}

/// Waits until no rewrite runs; returns INFO persistence then.
#[track_caller]
fn wait_rewritten(c: &mut RawClient) -> String {
    let mut text = String::new();
    let done = wait_for(
        || {
            text = info(c, "persistence");
            info_field(&text, "aof_rewrite_in_progress").as_deref() == Some("0")
                && info_field(&text, "aof_rewrite_scheduled").as_deref() == Some("0")
        },
        WAIT,
    );
    assert!(done, "the rewrite did not end:\n{text}");
    text
}

/// The manifest's lines.
fn manifest(dir: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("appendonlydir/appendonly.aof.manifest")).expect("manifest");
    text.lines().map(str::to_string).collect()
}

/// Kills `srv` with SIGKILL and waits for it to be gone.
fn kill_9(srv: &mut TestServer) {
    srv.signal(SIGKILL);
    srv.wait_exit(WAIT);
}

#[test]
fn every_type_and_ttl_survives_a_restart() {
    for (fsync, how) in [("always", "kill"), ("everysec", "shutdown")] {
        let mut first = node(None, &[("appendfsync", fsync)]);
        let mut c = first.client();
        build_on_redis(&mut c, wall_ms());
        let want = redis_dataset(&mut c);
        let text = info(&mut c, "persistence");
        assert_eq!(info_field(&text, "aof_enabled").as_deref(), Some("1"), "{text}");
        assert!(info_num(&text, "aof_current_size") > 0, "{text}");
        if how == "kill" {
            kill_9(&mut first);
        } else {
            // No save rules: SHUTDOWN writes no dump.rdb; the AOF alone carries the data.
            let _ = c.try_cmd(&["SHUTDOWN"]);
            first.wait_exit(WAIT);
            assert!(first.log().contains("Calling fsync() on the AOF file."), "{}", first.log());
        }
        assert!(!first.dir().join("dump.rdb").exists());
        let second = node(Some(first.dir()), &[("appendfsync", fsync)]);
        let mut c = second.client();
        assert_same(&redis_dataset(&mut c), &want);
        let log = second.log();
        assert!(log.contains("DB loaded from append only file: "), "{log}");
        assert!(log.contains("Opening AOF incr file appendonly.aof.1.incr.aof on server start"), "{log}");
    }
}

#[test]
fn a_first_start_writes_valkeys_layout() {
    let srv = node(None, &[]);
    let log = srv.log();
    assert!(log.contains("Creating AOF base file appendonly.aof.1.base.rdb on server start"), "{log}");
    assert!(log.contains("Creating AOF incr file appendonly.aof.1.incr.aof on server start"), "{log}");
    assert_eq!(
        manifest(srv.dir()),
        ["file appendonly.aof.1.base.rdb seq 1 type b", "file appendonly.aof.1.incr.aof seq 1 type i"]
    );
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting started"));
    let text = wait_rewritten(&mut c);
    assert_eq!(info_field(&text, "aof_last_bgrewrite_status").as_deref(), Some("ok"), "{text}");
    assert_eq!(info_num(&text, "aof_rewrites"), 1);
    assert_eq!(
        manifest(srv.dir()),
        ["file appendonly.aof.2.base.rdb seq 2 type b", "file appendonly.aof.2.incr.aof seq 2 type i"]
    );
    let mut files: Vec<String> = std::fs::read_dir(srv.dir().join("appendonlydir"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    files.sort();
    assert_eq!(files, ["appendonly.aof.2.base.rdb", "appendonly.aof.2.incr.aof", "appendonly.aof.manifest"]);
}

#[test]
fn kill_9_under_appendfsync_always_keeps_every_acknowledged_write() {
    kill_9_rounds_keep_every_acknowledged_write("always", 20);
}

/// `everysec` can lose up to a second of writes to a crash of the machine, but none to a
/// crash of the process: as in Valkey, the buffer reaches the file (the page cache) before
/// the replies that acknowledge it leave.
#[test]
fn kill_9_under_appendfsync_everysec_keeps_every_acknowledged_write() {
    kill_9_rounds_keep_every_acknowledged_write("everysec", 10);
}

/// Writers INCR their counters while the server is killed with SIGKILL at a random moment,
/// `rounds` times; after each restart every acknowledged INCR is there.
fn kill_9_rounds_keep_every_acknowledged_write(policy: &str, rounds: usize) {
    let mut first = node(None, &[("appendfsync", policy)]);
    let dir = first.dir().to_path_buf();
    kill_9(&mut first);
    // acked[w]: the last value writer w's INCR was acknowledged with, over all rounds.
    let acked: Arc<Vec<AtomicU64>> = Arc::new((0..3).map(|_| AtomicU64::new(0)).collect());
    let mut seed = wall_ms() as u64 | 1;
    for round in 0..rounds {
        let mut srv = node(Some(&dir), &[("appendfsync", policy)]);
        let mut c = srv.client();
        for (w, a) in acked.iter().enumerate() {
            let have = match c.cmd(&["GET", &format!("counter:{w}")]) {
                Frame::Bulk(b) => String::from_utf8(b).unwrap().parse::<u64>().unwrap(),
                _ => 0,
            };
            let want = a.load(Ordering::SeqCst);
            // An INCR may be on disk without its reply having left: one more, never one less.
            assert!(have == want || have == want + 1, "round {round} writer {w}: have {have}, acknowledged {want}");
            a.store(have, Ordering::SeqCst);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let (stop, port, acked) = (stop.clone(), srv.port(), acked.clone());
                std::thread::spawn(move || {
                    // The kill may come before this thread connects.
                    let Ok(mut c) = RawClient::try_connect(port) else { return };
                    while !stop.load(Ordering::Relaxed) {
                        match c.try_cmd(&["INCR", &format!("counter:{w}")]) {
                            Ok(Frame::Integer(n)) => acked[w].store(n as u64, Ordering::SeqCst),
                            _ => return,
                        }
                    }
                })
            })
            .collect();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        std::thread::sleep(Duration::from_millis(20 + seed % 120));
        kill_9(&mut srv);
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
    }
    let srv = node(Some(&dir), &[]);
    let mut c = srv.client();
    for (w, a) in acked.iter().enumerate() {
        let have = c.cmd(&["GET", &format!("counter:{w}")]).text().parse::<u64>().unwrap();
        let want = a.load(Ordering::SeqCst);
        assert!(have == want || have == want + 1, "writer {w}: have {have}, acknowledged {want}");
    }
}

#[test]
fn a_torn_tail_loads_with_aof_load_truncated_and_is_fatal_without() {
    let mut first = node(None, &[("appendfsync", "always")]);
    let mut c = first.client();
    for i in 0..10 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), "v"]), Frame::ok());
    }
    kill_9(&mut first);
    let incr = first.dir().join("appendonlydir/appendonly.aof.1.incr.aof");
    let len = std::fs::metadata(&incr).unwrap().len();
    // Cut the last SET in the middle of its value.
    let f = std::fs::OpenOptions::new().write(true).open(&incr).unwrap();
    f.set_len(len - 3).unwrap();
    drop(f);
    let out = builder()
        .config("dir", &first.dir().display().to_string())
        .config("save", "\"\"")
        .config("appendonly", "yes")
        .config("aof-load-truncated", "no")
        .run_to_exit(WAIT);
    assert_eq!(out.code(), Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains("Unexpected end of file reading the append only file appendonly.aof.1.incr.aof"),
        "{}",
        out.stdout
    );
    let second = node(Some(first.dir()), &[("aof-load-truncated", "yes"), ("appendfsync", "always")]);
    let log = second.log();
    assert!(log.contains("!!! Warning: short read while loading the AOF file"), "{log}");
    assert!(log.contains("loaded anyway because aof-load-truncated is enabled"), "{log}");
    let mut c = second.client();
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(9));
    assert!(c.cmd(&["GET", "k9"]).is_null());
    // Writes after the cut land after whole commands: the next start loads them.
    assert_eq!(c.cmd(&["SET", "after", "1"]), Frame::ok());
    let mut second = second;
    kill_9(&mut second);
    let third = node(Some(first.dir()), &[("aof-load-truncated", "no"), ("appendfsync", "always")]);
    assert_eq!(third.cmd(&["GET", "after"]), Frame::bulk("1"));
}

#[test]
fn bgrewriteaof_under_writers_keeps_the_data() {
    for preamble in ["yes", "no"] {
        let mut first = node(None, &[("aof-use-rdb-preamble", preamble), ("appendfsync", "everysec")]);
        let mut c = first.client();
        assert_eq!(c.cmd(&["DEBUG", "POPULATE", "20000", "filler"]), Frame::ok());
        assert_eq!(c.cmd(&["RPUSH", "list", "a", "b", "c"]), Frame::Integer(3));
        assert_eq!(c.cmd(&["SET", "ttl", "x", "EX", "1000"]), Frame::ok());
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..3)
            .map(|w| {
                let (stop, port) = (stop.clone(), first.port());
                std::thread::spawn(move || {
                    let mut c = RawClient::connect(port);
                    let mut i = 0u64;
                    while !stop.load(Ordering::Relaxed) {
                        assert_eq!(c.cmd(&["INCR", &format!("c{w}")]), Frame::Integer(i as i64 + 1));
                        assert_eq!(c.cmd(&["SET", &format!("w{w}:{}", i % 500), &i.to_string()]), Frame::ok());
                        i += 1;
                    }
                })
            })
            .collect();
        for _ in 0..3 {
            let r = c.cmd(&["BGREWRITEAOF"]);
            assert_eq!(r, Frame::simple("Background append only file rewriting started"), "{preamble}");
            let again = c.cmd(&["BGREWRITEAOF"]);
            if again.is_error() {
                assert_err(&again, "ERR Background append only file rewriting already in progress");
            }
            let text = wait_rewritten(&mut c);
            assert_eq!(info_field(&text, "aof_last_bgrewrite_status").as_deref(), Some("ok"), "{text}");
        }
        stop.store(true, Ordering::Relaxed);
        for w in writers {
            w.join().unwrap();
        }
        let want = redis_dataset(&mut c);
        let kind = if preamble == "yes" { "rdb" } else { "aof" };
        assert!(manifest(first.dir())[0].contains(&format!(".base.{kind} ")), "{:?}", manifest(first.dir()));
        let _ = c.try_cmd(&["SHUTDOWN"]);
        first.wait_exit(WAIT);
        let second = node(Some(first.dir()), &[]);
        let mut c = second.client();
        assert_same(&redis_dataset(&mut c), &want);
    }
}

#[test]
fn the_cron_rewrites_once_the_file_grew_past_the_minimum() {
    let srv = node(None, &[("auto-aof-rewrite-min-size", "64kb"), ("auto-aof-rewrite-percentage", "100")]);
    let mut c = srv.client();
    let value = "x".repeat(1000);
    for i in 0..200 {
        assert_eq!(c.cmd(&["SET", &format!("k{}", i % 20), &value]), Frame::ok());
    }
    let started = wait_for(|| info_num(&info(&mut c, "persistence"), "aof_rewrites") >= 1, WAIT);
    assert!(started, "no automatic rewrite:\n{}", info(&mut c, "persistence"));
    let text = wait_rewritten(&mut c);
    assert!(srv.log().contains("Starting automatic rewriting of AOF on"), "{}", srv.log());
    assert!(info_num(&text, "aof_base_size") < 64 * 1024, "{text}");
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(20));
}

#[test]
fn misconf_while_the_aof_cannot_be_written_then_recovery() {
    // chmod cannot make an open file fail (and root ignores it): the next incr file is made
    // /dev/full instead, so every write to it fails with ENOSPC, whoever runs the test.
    let srv = node(None, &[("appendfsync", "everysec")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    std::os::unix::fs::symlink("/dev/full", srv.dir().join("appendonlydir/appendonly.aof.2.incr.aof")).unwrap();
    assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting started"));
    wait_rewritten(&mut c);
    assert_eq!(c.cmd(&["SET", "k", "w"]), Frame::ok());
    let misconf = "MISCONF Errors writing to the AOF file: No space left on device";
    let failed =
        wait_for(|| info_field(&info(&mut c, "persistence"), "aof_last_write_status").as_deref() == Some("err"), WAIT);
    assert!(failed, "no write error:\n{}", info(&mut c, "persistence"));
    assert_err(&c.cmd(&["SET", "k", "x"]), misconf);
    assert_err(&c.cmd(&["PING"]), misconf);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("w"));
    // The operator's way out: the AOF off and on again rewrites it from memory.
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "k", "y"]), Frame::ok());
    std::fs::remove_file(srv.dir().join("appendonlydir/appendonly.aof.2.incr.aof")).unwrap();
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), Frame::ok());
    wait_rewritten(&mut c);
    assert_eq!(c.cmd(&["SET", "k", "z"]), Frame::ok());
    assert_eq!(info_field(&info(&mut c, "persistence"), "aof_last_write_status").as_deref(), Some("ok"));
}

#[test]
fn appendonly_turned_on_at_runtime_starts_with_a_rewrite() {
    let mut first = builder().config("save", "\"\"").spawn();
    let mut c = first.client();
    assert_eq!(c.cmd(&["SET", "before", "1"]), Frame::ok());
    assert_eq!(info_field(&info(&mut c, "persistence"), "aof_enabled").as_deref(), Some("0"));
    assert_err(
        &c.cmd(&["WAITAOF", "1", "0", "0"]),
        "ERR WAITAOF cannot be used when numlocal is set but appendonly is disabled.",
    );
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), Frame::ok());
    let text = wait_rewritten(&mut c);
    assert_eq!(info_field(&text, "aof_enabled").as_deref(), Some("1"), "{text}");
    assert_eq!(c.cmd(&["SET", "after", "2"]), Frame::ok());
    assert_eq!(c.cmd(&["WAITAOF", "1", "0", "0"]), Frame::Array(vec![Frame::Integer(1), Frame::Integer(0)]));
    kill_9(&mut first);
    let second = node(Some(first.dir()), &[]);
    let mut c = second.client();
    assert_eq!(c.cmd(&["MGET", "before", "after"]), Frame::Array(vec![Frame::bulk("1"), Frame::bulk("2")]));
}

#[test]
fn appendonly_toggled_while_its_rewrite_runs_ends_with_one_whole_aof() {
    // Valkey's integration/aof "Turning appendonly on and off within a transaction": it kills
    // the rewrite of an `appendonly yes` undone by `no`, and a rewrite running at the next
    // `yes`, then starts another. Here a slowed-down BGREWRITEAOF still runs at the `yes`.
    let mut first = builder().config("save", "\"\"").config("enable-debug-command", "yes").spawn();
    let mut c = first.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "50"]), Frame::ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "100000"]), Frame::ok());
    assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting started"));
    assert_eq!(info_field(&info(&mut c, "persistence"), "aof_rewrite_in_progress").as_deref(), Some("1"));
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), Frame::ok());
    assert!(first.wait_for_log("Stopping background AOF and starting a rewrite now.", WAIT), "{}", first.log());
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), Frame::ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), Frame::ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), Frame::ok());
    // And the transaction of Valkey's test, both ways round.
    for (a, b) in [("no", "yes"), ("yes", "no"), ("no", "yes")] {
        assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
        for v in [a, b] {
            assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", v]), Frame::simple("QUEUED"));
        }
        assert_eq!(c.cmd(&["EXEC"]), Frame::Array(vec![Frame::ok(), Frame::ok()]));
    }
    let text = wait_rewritten(&mut c);
    assert_eq!(info_field(&text, "aof_enabled").as_deref(), Some("1"), "{text}");
    assert_eq!(info_field(&text, "aof_last_bgrewrite_status").as_deref(), Some("ok"), "{text}");
    assert_eq!(c.cmd(&["SET", "after", "1"]), Frame::ok());
    assert_eq!(c.cmd(&["WAITAOF", "1", "0", "0"]), Frame::Array(vec![Frame::Integer(1), Frame::Integer(0)]));
    kill_9(&mut first);
    let second = node(Some(first.dir()), &[]);
    let mut c = second.client();
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(51));
    assert_eq!(manifest(first.dir()).len(), 2, "{:?}", manifest(first.dir()));
}

#[test]
fn bgrewriteaof_with_the_aof_off_makes_a_base_and_no_incr_file() {
    // Valkey's aof-multi-part "AOF rewrite doesn't open new aof when AOF turn off".
    let srv = node(None, &[]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting started"));
    wait_rewritten(&mut c);
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "no"]), Frame::ok());
    assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting started"));
    let text = wait_rewritten(&mut c);
    assert_eq!(info_field(&text, "aof_last_bgrewrite_status").as_deref(), Some("ok"), "{text}");
    assert_eq!(manifest(srv.dir()), ["file appendonly.aof.3.base.rdb seq 3 type b"]);
    let dir = srv.dir().join("appendonlydir");
    let names = || {
        let mut v: Vec<String> =
            std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
        v.sort();
        v
    };
    assert!(wait_for(|| names() == ["appendonly.aof.3.base.rdb", "appendonly.aof.manifest"], WAIT), "{:?}", names());
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]), Frame::ok());
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    // Turned on again, the AOF goes on from that base with a first incr file.
    assert_eq!(c.cmd(&["CONFIG", "SET", "appendonly", "yes"]), Frame::ok());
    wait_rewritten(&mut c);
    assert_eq!(
        manifest(srv.dir()),
        ["file appendonly.aof.4.base.rdb seq 4 type b", "file appendonly.aof.1.incr.aof seq 1 type i"]
    );
    assert!(
        wait_for(
            || names() == ["appendonly.aof.1.incr.aof", "appendonly.aof.4.base.rdb", "appendonly.aof.manifest"],
            WAIT
        ),
        "{:?}",
        names()
    );
}

#[test]
fn with_no_aof_yet_dump_rdb_is_loaded_and_becomes_the_base() {
    let mut first = builder().config("save", "\"\"").spawn();
    let mut c = first.client();
    assert_eq!(c.cmd(&["SET", "from-rdb", "1"]), Frame::ok());
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    kill_9(&mut first);
    let second = node(Some(first.dir()), &[]);
    let log = second.log();
    assert!(log.contains("Creating AOF base file appendonly.aof.1.base.rdb on server start"), "{log}");
    assert_eq!(second.cmd(&["GET", "from-rdb"]), Frame::bulk("1"));
    let mut second = second;
    kill_9(&mut second);
    // The RDB goes; the AOF alone has the key.
    std::fs::remove_file(first.dir().join("dump.rdb")).unwrap();
    let third = node(Some(first.dir()), &[]);
    assert_eq!(third.cmd(&["GET", "from-rdb"]), Frame::bulk("1"));
}

#[test]
fn waitaof_counts_the_local_fsync() {
    let srv = node(None, &[("appendfsync", "everysec")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    let start = Instant::now();
    assert_eq!(c.cmd(&["WAITAOF", "1", "0", "0"]), Frame::Array(vec![Frame::Integer(1), Frame::Integer(0)]));
    assert!(start.elapsed() < Duration::from_secs(5));
    // No replica: the wait for one ends at the timeout with what there is.
    assert_eq!(c.cmd(&["WAITAOF", "0", "1", "50"]), Frame::Array(vec![Frame::Integer(1), Frame::Integer(0)]));
    assert_err_prefix(&c.cmd(&["WAITAOF", "-1", "0", "0"]), "ERR");
}

#[test]
fn debug_aof_flush_sleep_holds_replies_behind_the_slowed_write() {
    let srv = node(None, &[("appendfsync", "always")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DEBUG", "AOF-FLUSH-SLEEP", "300000"]), Frame::ok());
    let start = Instant::now();
    assert_eq!(c.cmd(&["INCR", "n"]), Frame::Integer(1));
    assert!(start.elapsed() >= Duration::from_millis(300), "{:?}", start.elapsed());
    // A read appends nothing, so nothing is written and nothing sleeps.
    let start = Instant::now();
    assert_eq!(c.cmd(&["GET", "n"]), Frame::bulk("1"));
    assert!(start.elapsed() < Duration::from_millis(250), "{:?}", start.elapsed());
    assert_eq!(c.cmd(&["DEBUG", "AOF-FLUSH-SLEEP", "0"]), Frame::ok());
    let start = Instant::now();
    assert_eq!(c.cmd(&["INCR", "n"]), Frame::Integer(2));
    assert!(start.elapsed() < Duration::from_millis(250), "{:?}", start.elapsed());
}

#[test]
fn a_load_replays_commands_on_keys_whose_ttl_passed_and_expires_them_after() {
    // Valkey's integration/aof "AOF+EXPIRE": nothing expires while the file loads.
    let s = Scratch::new("expire-load");
    std::fs::write(s.aof("appendonly.aof.manifest"), "file appendonly.aof.1.incr.aof seq 1 type i\n").unwrap();
    let cmds: [&[&str]; 8] = [
        &["RPUSH", "list", "foo"],
        &["PEXPIREAT", "list", "1000"],
        &["RPUSH", "list", "bar"],
        &["RPUSH", "kept", "a"],
        &["PEXPIREAT", "kept", "1000"],
        &["PERSIST", "kept"],
        &["RPUSH", "kept", "b"],
        &["SET", "s", "v", "PXAT", "1000"],
    ];
    let incr: String = cmds.iter().map(|argv| resp(argv)).collect();
    std::fs::write(s.aof("appendonly.aof.1.incr.aof"), incr).unwrap();
    let srv = node(Some(&s.0), &[("aof-load-truncated", "no")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["LLEN", "list"]), Frame::Integer(0));
    assert_eq!(c.cmd(&["LRANGE", "kept", "0", "-1"]), Frame::Array(vec![Frame::bulk("a"), Frame::bulk("b")]));
    assert_eq!(c.cmd(&["TTL", "kept"]), Frame::Integer(-1));
    assert!(c.cmd(&["GET", "s"]).is_null());
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(1));
}

#[test]
fn a_replica_with_an_aof_acknowledges_its_fsync_and_keeps_the_synced_data() {
    let primary = node(None, &[("appendfsync", "always")]);
    let mut p = primary.client();
    assert_eq!(p.cmd(&["SET", "before-sync", "1"]), Frame::ok());
    let mut replica = node(None, &[("appendfsync", "always"), ("replicaof", &format!("127.0.0.1 {}", primary.port()))]);
    let mut r = replica.client();
    let up = wait_for(|| info_field(&info(&mut r, "replication"), "master_link_status").as_deref() == Some("up"), WAIT);
    assert!(up, "the link never came up:\n{}", replica.log());
    assert_eq!(p.cmd(&["SET", "after-sync", "2"]), Frame::ok());
    // The replica's FACK comes with its once-a-second ACK.
    let reply = p.cmd(&["WAITAOF", "1", "1", "10000"]);
    assert_eq!(reply, Frame::Array(vec![Frame::Integer(1), Frame::Integer(1)]), "{}", replica.log());
    // The full sync's data reached the replica's AOF through the rewrite that followed it.
    let synced = wait_for(|| info_num(&info(&mut r, "persistence"), "aof_rewrites") >= 1, WAIT);
    assert!(synced, "no rewrite after the full sync:\n{}", replica.log());
    wait_rewritten(&mut r);
    assert_eq!(r.cmd(&["GET", "after-sync"]), Frame::bulk("2"));
    kill_9(&mut replica);
    let alone = node(Some(replica.dir()), &[]);
    let mut c = alone.client();
    assert_eq!(c.cmd(&["MGET", "before-sync", "after-sync"]), Frame::Array(vec![Frame::bulk("1"), Frame::bulk("2")]));
}

#[test]
fn an_old_single_file_aof_is_upgraded_and_loaded() {
    let mut first = builder().config("save", "\"\"").spawn();
    kill_9(&mut first);
    let old = "*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$3\r\nold\r\n$3\r\nyes\r\n\
               *3\r\n$5\r\nRPUSH\r\n$1\r\nl\r\n$1\r\na\r\n";
    std::fs::write(first.dir().join("appendonly.aof"), old).unwrap();
    let srv = node(Some(first.dir()), &[]);
    let log = srv.log();
    assert!(
        log.contains(
            "Successfully migrated an old-style AOF file (appendonly.aof) into the AOF directory (appendonlydir)."
        ),
        "{log}"
    );
    assert_eq!(srv.cmd(&["GET", "old"]), Frame::bulk("yes"));
    assert_eq!(srv.cmd(&["LRANGE", "l", "0", "-1"]), Frame::Array(vec![Frame::bulk("a")]));
    assert!(!first.dir().join("appendonly.aof").exists());
    assert_eq!(
        manifest(first.dir()),
        ["file appendonly.aof seq 1 type b", "file appendonly.aof.1.incr.aof seq 1 type i"]
    );
}

#[test]
fn bgrewriteaof_behind_a_running_save_is_scheduled_and_runs_after_it() {
    let srv = node(None, &[]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "2000"]), Frame::ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "1000"]), Frame::ok());
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting scheduled"));
    assert_eq!(info_field(&info(&mut c, "persistence"), "aof_rewrite_scheduled").as_deref(), Some("1"));
    let text = wait_rewritten(&mut c);
    assert_eq!(info_num(&text, "aof_rewrites"), 1, "{text}");
    assert_eq!(info_field(&text, "aof_last_bgrewrite_status").as_deref(), Some("ok"), "{text}");
}

#[test]
fn appendfsync_and_timestamps_change_on_the_running_writer() {
    let srv = node(None, &[("appendfsync", "no")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["CONFIG", "SET", "aof-timestamp-enabled", "yes", "appendfsync", "always"]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    // Under always the reply waited for the file: the command and its #TS line are there.
    let incr = std::fs::read_to_string(srv.dir().join("appendonlydir/appendonly.aof.1.incr.aof")).unwrap();
    assert!(incr.starts_with("#TS:"), "{incr:?}");
    assert!(incr.ends_with("*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n"), "{incr:?}");
}

/// The size of a file in the AOF directory.
fn aof_file_len(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join("appendonlydir").join(name)).map(|m| m.len()).unwrap_or_else(|e| panic!("{name}: {e}"))
}

#[test]
fn debug_loadaof_reloads_the_files_without_appending_them_again() {
    let primary = node(None, &[("appendfsync", "always"), ("repl-ping-replica-period", "3600")]);
    let replica = node(None, &[("replicaof", &format!("127.0.0.1 {}", primary.port()))]);
    let mut c = primary.client();
    build_on_redis(&mut c, wall_ms());
    assert_eq!(c.cmd(&["SET", "plain", "1"]), Frame::ok());
    let want = redis_dataset(&mut c);
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    let offset = |c: &mut RawClient| info_num(&info(c, "replication"), "master_repl_offset");
    let mut r = replica.client();
    let before = offset(&mut c);
    assert!(
        wait_for(|| offset(&mut r) == before, WAIT),
        "the replica did not catch up:
{}",
        replica.log()
    );
    let incr = "appendonly.aof.1.incr.aof";
    let len = aof_file_len(primary.dir(), incr);
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]), Frame::ok());
    assert!(primary.log().contains("Append Only File loaded by DEBUG LOADAOF"), "{}", primary.log());
    assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest);
    assert_same(&redis_dataset(&mut c), &want);
    // What it replayed reached neither the AOF nor the replicas.
    assert_eq!(aof_file_len(primary.dir(), incr), len);
    assert_eq!(offset(&mut c), before);
    // Writes after it are appended and replicated as before.
    assert_eq!(c.cmd(&["SET", "after", "load"]), Frame::ok());
    assert!(aof_file_len(primary.dir(), incr) > len);
    assert!(wait_for(|| r.cmd(&["GET", "after"]) == Frame::bulk("load"), WAIT));
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]), Frame::ok());
    assert_eq!(c.cmd(&["GET", "after"]), Frame::bulk("load"));
}

#[test]
fn debug_loadaof_reports_a_file_it_cannot_load() {
    let srv = node(None, &[("appendfsync", "always")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    let path = srv.dir().join("appendonlydir/appendonly.aof.1.incr.aof");
    let mut bytes = std::fs::read(&path).expect("incr file");
    bytes.extend_from_slice(b"not a command\r\n");
    std::fs::write(&path, bytes).expect("write");
    assert_err(&c.cmd(&["DEBUG", "LOADAOF"]), "ERR Error trying to load the AOF files, check server logs.");
    assert!(srv.log().contains("Bad file format"), "{}", srv.log());
    // A server without an AOF has nothing to load.
    let plain = builder().config("enable-debug-command", "yes").config("save", "\"\"").spawn();
    assert_err(&plain.cmd(&["DEBUG", "LOADAOF"]), "ERR Error trying to load the AOF files, check server logs.");
}

/// WAITAOF 1 0 `ms`: whether this node's AOF was fsynced past the caller's writes in time.
fn local_fsynced(c: &mut RawClient, ms: &str) -> bool {
    match c.cmd(&["WAITAOF", "1", "0", ms]) {
        Frame::Array(v) => v.first() == Some(&Frame::Integer(1)),
        other => panic!("WAITAOF: {other}"),
    }
}

#[test]
fn no_appendfsync_on_rewrite_holds_fsyncs_while_a_rewrite_or_save_runs() {
    // 100 keys at 50 ms each: the rewrite (and the save) outlast the test's steps by far.
    let srv = node(None, &[("appendfsync", "always"), ("no-appendfsync-on-rewrite", "yes")]);
    let mut c = srv.client();
    for i in 0..100 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), "v"]), Frame::ok());
    }
    assert!(local_fsynced(&mut c, "0"), "synced before any rewrite");
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "50000"]), Frame::ok());
    for job in ["BGREWRITEAOF", "BGSAVE"] {
        assert!(!c.cmd(&[job]).is_error());
        // The reply comes although `always` cannot fsync now. A rewrite fsyncs the old incr
        // file once at its cut (as Valkey closes it), so look past the cut: a write that
        // reached the new incr file.
        assert_eq!(c.cmd(&["SET", "during", job]), Frame::ok());
        if job == "BGREWRITEAOF" {
            let past_cut = wait_for(
                || {
                    assert_eq!(c.cmd(&["SET", "during", job]), Frame::ok());
                    aof_file_len(srv.dir(), "appendonly.aof.2.incr.aof") > 0
                },
                WAIT,
            );
            assert!(past_cut, "no write reached the rewrite's new incr file");
        }
        assert!(!local_fsynced(&mut c, "300"), "{job}: fsynced while held");
        let text = info(&mut c, "persistence");
        let running = if job == "BGSAVE" { "rdb_bgsave_in_progress" } else { "aof_rewrite_in_progress" };
        assert_eq!(info_field(&text, running).as_deref(), Some("1"), "{job} ended too soon:\n{text}");
        // Turned off at runtime: the held data is fsynced at once.
        assert_eq!(c.cmd(&["CONFIG", "SET", "no-appendfsync-on-rewrite", "no"]), Frame::ok());
        assert!(local_fsynced(&mut c, "10000"), "{job}: not fsynced after the hold");
        assert_eq!(c.cmd(&["CONFIG", "SET", "no-appendfsync-on-rewrite", "yes"]), Frame::ok());
        assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), Frame::ok());
        wait_rewritten(&mut c);
        assert!(wait_for(
            || info_field(&info(&mut c, "persistence"), "rdb_bgsave_in_progress").as_deref() == Some("0"),
            WAIT
        ));
        assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "50000"]), Frame::ok());
    }
    // With no rewrite or save running nothing is held.
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "after", "1"]), Frame::ok());
    assert!(local_fsynced(&mut c, "10000"));
}

#[test]
fn no_appendfsync_on_rewrite_holds_fsyncs_while_a_full_sync_snapshot_runs() {
    // Valkey holds fsyncs while any child runs, the one that feeds a replica included. A
    // replica that asks for a full sync and never reads keeps hotkv's snapshot for it going:
    // 36 MB of RDB fill the socket buffers and the snapshot's queue, and its pass waits.
    let srv = node(None, &[("appendfsync", "always"), ("no-appendfsync-on-rewrite", "yes")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "300000", "key", "100"]), Frame::ok());
    assert!(local_fsynced(&mut c, "0"), "synced before the full sync");
    let mut replica = srv.client();
    assert_eq!(replica.cmd(&["REPLCONF", "capa", "eof", "capa", "psync2"]), Frame::ok());
    replica.send(&["PSYNC", "?", "-1"]);
    let syncing = wait_for(|| info_num(&info(&mut c, "replication"), "connected_slaves") == 1, WAIT);
    assert!(syncing, "{}", info(&mut c, "replication"));
    // The snapshot's thread starts a moment after the replica is listed: wait for the hold.
    let held = wait_for(
        || {
            assert_eq!(c.cmd(&["SET", "during", "sync"]), Frame::ok());
            !local_fsynced(&mut c, "100")
        },
        WAIT,
    );
    assert!(held, "fsyncs not held during the full sync:\n{}", srv.log());
    assert_eq!(c.cmd(&["SET", "during", "again"]), Frame::ok());
    assert!(!local_fsynced(&mut c, "300"), "fsynced while a full sync was being produced");
    let text = info(&mut c, "persistence");
    // The full sync's snapshot counts as a background save, as Valkey's socket child does;
    // no AOF rewrite runs.
    assert_eq!(info_field(&text, "rdb_bgsave_in_progress").as_deref(), Some("1"), "{text}");
    assert_eq!(
        info_field(&text, "aof_rewrite_in_progress").as_deref(),
        Some("0"),
        "only the full sync may hold:\n{text}"
    );
    // The replica goes away: its snapshot is abandoned and the held data fsynced.
    drop(replica);
    assert!(local_fsynced(&mut c, "10000"), "not fsynced after the full sync ended");
    // And with the directive off, a full sync holds nothing.
    assert_eq!(c.cmd(&["CONFIG", "SET", "no-appendfsync-on-rewrite", "no"]), Frame::ok());
    let mut replica = srv.client();
    assert_eq!(replica.cmd(&["REPLCONF", "capa", "eof"]), Frame::ok());
    replica.send(&["PSYNC", "?", "-1"]);
    assert!(wait_for(|| info_num(&info(&mut c, "replication"), "connected_slaves") == 1, WAIT));
    assert_eq!(c.cmd(&["SET", "during", "second"]), Frame::ok());
    assert!(local_fsynced(&mut c, "10000"), "held without the directive");
}

#[test]
fn aof_disable_auto_gc_keeps_history_until_turned_off() {
    let srv = node(None, &[("aof-disable-auto-gc", "yes")]);
    let mut c = srv.client();
    for round in 0..2 {
        assert_eq!(c.cmd(&["SET", "k", &round.to_string()]), Frame::ok());
        assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting started"));
        wait_rewritten(&mut c);
    }
    let kept = [
        "file appendonly.aof.3.base.rdb seq 3 type b",
        "file appendonly.aof.2.incr.aof seq 2 type h",
        "file appendonly.aof.2.base.rdb seq 2 type h",
        "file appendonly.aof.1.incr.aof seq 1 type h",
        "file appendonly.aof.1.base.rdb seq 1 type h",
        "file appendonly.aof.3.incr.aof seq 3 type i",
    ];
    assert_eq!(manifest(srv.dir()), kept);
    let dir = srv.dir().join("appendonlydir");
    for f in [
        "appendonly.aof.1.base.rdb",
        "appendonly.aof.1.incr.aof",
        "appendonly.aof.2.base.rdb",
        "appendonly.aof.2.incr.aof",
    ] {
        assert!(dir.join(f).exists(), "{f} was deleted");
    }
    // DEBUG LOADAOF keeps them too while auto gc is off, and loads only what the manifest uses.
    assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]), Frame::ok());
    assert_eq!(manifest(srv.dir()), kept);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("1"));
    // Turned back on, the history goes at once, as Valkey's config hook does.
    assert_eq!(c.cmd(&["CONFIG", "SET", "aof-disable-auto-gc", "no"]), Frame::ok());
    assert_eq!(manifest(srv.dir()), [kept[0], kept[5]]);
    for f in [
        "appendonly.aof.1.base.rdb",
        "appendonly.aof.1.incr.aof",
        "appendonly.aof.2.base.rdb",
        "appendonly.aof.2.incr.aof",
    ] {
        assert!(!dir.join(f).exists(), "{f} was kept");
    }
}

#[test]
fn rewrites_and_saves_larger_than_the_fsync_step_are_whole_with_incremental_fsync_on_and_off() {
    // 12 MB of values: three 4 MB fsync steps with the directives on.
    let srv = node(None, &[]);
    let mut c = srv.client();
    let value = "x".repeat(64 * 1024);
    for i in 0..192 {
        assert_eq!(c.cmd(&["SET", &format!("big{i}"), &value]), Frame::ok());
    }
    let digest = c.cmd(&["DEBUG", "DIGEST"]);
    for on in ["yes", "no"] {
        assert_eq!(c.cmd(&["CONFIG", "SET", "aof-rewrite-incremental-fsync", on]), Frame::ok());
        assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-save-incremental-fsync", on]), Frame::ok());
        assert!(!c.cmd(&["BGREWRITEAOF"]).is_error());
        wait_rewritten(&mut c);
        assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
        assert_eq!(c.cmd(&["DEBUG", "LOADAOF"]), Frame::ok(), "incremental {on}");
        assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest, "the base, incremental {on}");
        assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE"]), Frame::ok());
        assert_eq!(c.cmd(&["DEBUG", "DIGEST"]), digest, "the RDB file, incremental {on}");
    }
}

/// The RDB preamble of an AOF base is a file like dump.rdb: compressed and checksummed by
/// `rdbcompression` and `rdbchecksum`, as Valkey writes it.
#[test]
fn the_rdb_preamble_follows_rdbcompression() {
    for (compression, small) in [("yes", true), ("no", false)] {
        let srv = node(None, &[("rdbcompression", compression)]);
        let mut c = srv.client();
        assert_eq!(c.cmd(&["SET", "big", &"a".repeat(20_000)]), Frame::ok());
        assert!(matches!(c.cmd(&["BGREWRITEAOF"]), Frame::Simple(_)));
        wait_rewritten(&mut c);
        let base = manifest(srv.dir())
            .iter()
            .find_map(|l| l.split(' ').nth(1).filter(|_| l.ends_with("type b")).map(str::to_string))
            .expect("a base in the manifest");
        let size = std::fs::metadata(srv.dir().join("appendonlydir").join(&base)).unwrap().len();
        assert_eq!(size < 2_000, small, "rdbcompression {compression}: base {base} is {size} bytes");
        assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Frame::ok());
        assert_eq!(c.cmd(&["STRLEN", "big"]), Frame::Integer(20_000));
    }
}

/// A directory of its own for hand-made AOF files, removed when dropped.
struct Scratch(std::path::PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hotkv-check-aof-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("appendonlydir")).expect("scratch dir");
        Scratch(dir)
    }

    fn aof(&self, name: &str) -> std::path::PathBuf {
        self.0.join("appendonlydir").join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Runs the `hotkv` binary through a link named `tool` (its `argv[0]` picks the checker) with
/// `args` and `stdin`; returns the exit code and stdout.
fn check_aof(tool: &str, args: &[&str], stdin: &str) -> (i32, String) {
    use std::io::Write;
    use std::process::{Command, Stdio};
    // A link of its own per call, in a directory removed when the call returns.
    let links = Scratch::new("bin");
    let link = links.0.join(tool);
    std::os::unix::fs::symlink(crate::BIN, &link).expect("link the binary");
    let mut child = Command::new(&link)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start the checker");
    // The checker reads stdin only when it asks a question; one that finished without asking
    // has closed the pipe, and the write fails with EPIPE.
    let _ = child.stdin.take().expect("stdin").write_all(stdin.as_bytes());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(child.wait_with_output());
    });
    let out = rx.recv_timeout(WAIT).expect("the checker did not finish").expect("checker output");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A command as the AOF holds it.
fn resp(argv: &[&str]) -> String {
    let mut s = format!("*{}\r\n", argv.len());
    for a in argv {
        s.push_str(&format!("${}\r\n{a}\r\n", a.len()));
    }
    s
}

/// Whether `text` holds each of `parts` in order (Tcl's `assert_match "*a*b*"`).
#[track_caller]
fn assert_in_order(text: &str, parts: &[&str]) {
    let mut rest = text;
    for p in parts {
        match rest.find(p) {
            Some(i) => rest = &rest[i + p.len()..],
            None => panic!("{p:?} missing (in order) from:\n{text}"),
        }
    }
}

#[test]
fn check_aof_passes_what_a_server_wrote_with_an_rdb_base() {
    let mut srv = node(None, &[("aof-timestamp-enabled", "yes")]);
    let mut c = srv.client();
    for i in 0..50 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), "v"]), Frame::ok());
    }
    assert!(!c.cmd(&["BGREWRITEAOF"]).is_error());
    wait_rewritten(&mut c);
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    c.cmd(&["INCR", "n"]);
    c.cmd(&["SET", "after", "rewrite"]);
    assert!(matches!(c.cmd(&["EXEC"]), Frame::Array(_)));
    let dir = srv.dir().to_path_buf();
    kill_9(&mut srv);
    let manifest = dir.join("appendonlydir/appendonly.aof.manifest");
    let (code, out) = check_aof("hotkv-check-aof", &[manifest.to_str().unwrap()], "");
    assert_eq!(code, 0, "{out}");
    assert_in_order(
        &out,
        &[
            "Start checking Multi Part AOF",
            "Start to check BASE AOF (RDB format).",
            "[offset 0] Checking RDB file",
            "\\o/ RDB looks OK! \\o/",
            "[info] 50 keys read",
            "RDB preamble is OK, proceeding with AOF tail...",
            "BASE AOF appendonly.aof.2.base.rdb is valid",
            "Start to check INCR files.",
            "INCR AOF appendonly.aof.2.incr.aof is valid",
            "All AOF files and manifest are valid",
        ],
    );
    // The same tool under Valkey's and Redis's names, and its version.
    for tool in ["valkey-check-aof", "redis-check-aof"] {
        let (code, again) = check_aof(tool, &[manifest.to_str().unwrap()], "");
        assert_eq!((code, &again), (0, &out), "{tool}");
    }
    let (code, version) = check_aof("valkey-check-aof", &["--version"], "");
    assert_eq!(code, 0);
    assert!(version.starts_with("valkey-check-aof "), "{version}");
    let (code, usage) = check_aof("hotkv-check-aof", &[], "");
    assert_eq!(code, 1);
    assert!(usage.starts_with("Usage: ") && usage.contains("[--fix|--truncate-to-timestamp $timestamp]"), "{usage}");
}

#[test]
fn check_aof_finds_a_torn_tail_and_fixes_it_after_a_yes() {
    let s = Scratch::new("torn");
    let manifest = s.aof("appendonly.aof.manifest");
    std::fs::write(
        &manifest,
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n",
    )
    .unwrap();
    std::fs::write(s.aof("appendonly.aof.1.base.aof"), resp(&["SET", "base", "1"])).unwrap();
    let whole = resp(&["SET", "foo", "hello"]);
    std::fs::write(s.aof("appendonly.aof.1.incr.aof"), format!("{whole}!!!")).unwrap();
    let m = manifest.to_str().unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &[m], "");
    assert_eq!(code, 1, "{out}");
    // Valkey's line count goes on across files: 7 lines of base, 7 of incr, from line 1.
    assert_in_order(
        &out,
        &[
            "Start to check BASE AOF (RESP format).",
            "BASE AOF appendonly.aof.1.base.aof is valid",
            "AOF appendonly.aof.1.incr.aof format error",
            &format!("ok_up_to={}, ok_up_to_line=15, diff=3", whole.len()),
            "AOF appendonly.aof.1.incr.aof is not valid. Use the --fix option to try fixing it.",
        ],
    );
    // Without a yes nothing is cut.
    let (code, out) = check_aof("hotkv-check-aof", &["--fix", m], "n\n");
    assert_eq!(code, 1);
    assert_in_order(&out, &["This will shrink the AOF appendonly.aof.1.incr.aof from", "Continue? [y/N]: Aborting..."]);
    let (code, out) = check_aof("hotkv-check-aof", &["--fix", m], "y\n");
    assert_eq!(code, 0, "{out}");
    assert_in_order(
        &out,
        &["Successfully truncated AOF appendonly.aof.1.incr.aof", "All AOF files and manifest are valid"],
    );
    assert_eq!(std::fs::read(s.aof("appendonly.aof.1.incr.aof")).unwrap(), whole.as_bytes());
    // A server loads the fixed files with aof-load-truncated off.
    let srv = node(Some(&s.0), &[("aof-load-truncated", "no")]);
    assert_eq!(srv.cmd(&["GET", "foo"]), Frame::bulk("hello"));
    assert_eq!(srv.cmd(&["GET", "base"]), Frame::bulk("1"));
}

#[test]
fn check_aof_cuts_only_the_last_file() {
    let s = Scratch::new("notlast");
    let manifest = s.aof("appendonly.aof.manifest");
    std::fs::write(
        &manifest,
        "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n",
    )
    .unwrap();
    let incr = resp(&["SET", "foo", "hello"]);
    std::fs::write(s.aof("appendonly.aof.1.incr.aof"), &incr).unwrap();
    let m = manifest.to_str().unwrap();
    // An open MULTI at the end of the base.
    let base = format!("{}{}{}", resp(&["SET", "foo", "hello"]), resp(&["MULTI"]), resp(&["SET", "bar", "world"]));
    std::fs::write(s.aof("appendonly.aof.1.base.aof"), &base).unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &[m], "");
    assert_eq!(code, 1);
    assert_in_order(&out, &["Reached EOF before reading EXEC for MULTI", "not valid"]);
    let (code, out) = check_aof("hotkv-check-aof", &["--fix", m], "y\n");
    assert_eq!(code, 1);
    assert_in_order(&out, &["Failed to truncate AOF appendonly.aof.1.base.aof because it is not the last file"]);
    // Timestamps past the cut in a file before the last.
    let stamped =
        format!("#TS:1628217470\r\n{}#TS:1628217474\r\n{}", resp(&["SET", "a", "1"]), resp(&["SET", "b", "2"]));
    std::fs::write(s.aof("appendonly.aof.1.base.aof"), &stamped).unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &["--truncate-to-timestamp", "1628217473", m], "");
    assert_eq!(code, 1);
    assert_in_order(&out, &["Failed to truncate AOF", "to timestamp 1628217473", "because it is not the last file."]);
    // A manifest line that is not one.
    std::fs::write(&manifest, "file appendonly.aof.1.base.aof seq 1 type b\n!!!\n").unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &[m], "");
    assert_eq!(code, 1);
    assert_in_order(&out, &["Start checking Multi Part AOF", "Invalid AOF manifest file format"]);
    assert_eq!(std::fs::read(s.aof("appendonly.aof.1.incr.aof")).unwrap(), incr.as_bytes(), "nothing cut");
}

#[test]
fn check_aof_truncates_to_a_timestamp() {
    let s = Scratch::new("ts");
    let manifest = s.aof("appendonly.aof.manifest");
    std::fs::write(&manifest, "file appendonly.aof.1.incr.aof seq 1 type i\n").unwrap();
    let part = |ts: u64, k: &str| format!("#TS:{ts}\r\n{}", resp(&["SET", k, "v"]));
    let file = s.aof("appendonly.aof.1.incr.aof");
    std::fs::write(&file, [part(1628217470, "a"), part(1628217471, "b"), part(1628217473, "c")].concat()).unwrap();
    let m = manifest.to_str().unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &["--truncate-to-timestamp", "1628217473", m], "");
    assert_eq!(code, 0, "{out}");
    assert_in_order(&out, &["Truncate nothing in AOF appendonly.aof.1.incr.aof to timestamp 1628217473", "is valid"]);
    let (code, out) = check_aof("hotkv-check-aof", &["--truncate-to-timestamp", "1628217471", m], "");
    assert_eq!(code, 0, "{out}");
    assert_in_order(&out, &["Successfully truncated AOF appendonly.aof.1.incr.aof to timestamp 1628217471"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), [part(1628217470, "a"), part(1628217471, "b")].concat());
    let (code, out) = check_aof("hotkv-check-aof", &["--truncate-to-timestamp", "1628217469", m], "");
    assert_eq!(code, 1);
    assert!(out.contains("has nothing before timestamp 1628217469, aborting..."), "{out}");
    let (code, out) = check_aof("hotkv-check-aof", &["--truncate-to-timestamp", "soon", m], "");
    assert_eq!((code, out.as_str()), (1, "Invalid timestamp, aborting...\n"));
}

#[test]
fn check_aof_reads_old_single_files_with_and_without_a_preamble() {
    let s = Scratch::new("old");
    let plain = s.0.join("appendonly.aof");
    // Commands that look like manifest lines are still commands.
    let text = format!("{}{}", resp(&["SET", "file", "file"]), resp(&["SET", "file a seq 2 type b", "x"]));
    std::fs::write(&plain, &text).unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &[plain.to_str().unwrap()], "");
    assert_eq!(code, 0, "{out}");
    assert_in_order(&out, &["Start checking Old-Style AOF", &format!("AOF {} is valid", plain.display())]);
    // An RDB preamble from a server's own rewrite, then commands.
    let srv = node(None, &[]);
    assert_eq!(srv.cmd(&["SET", "k", "v"]), Frame::ok());
    assert!(!srv.cmd(&["BGREWRITEAOF"]).is_error());
    wait_rewritten(&mut srv.client());
    let base = std::fs::read(srv.dir().join("appendonlydir/appendonly.aof.2.base.rdb")).expect("base");
    let pre = s.0.join("preamble.aof");
    std::fs::write(&pre, [base.clone(), text.into_bytes()].concat()).unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &[pre.to_str().unwrap()], "");
    assert_eq!(code, 0, "{out}");
    assert_in_order(
        &out,
        &["Start checking Old-Style AOF", "RDB preamble is OK, proceeding with AOF tail...", "is valid"],
    );
    // A damaged preamble.
    let mut bad = base;
    let mid = bad.len() / 2;
    bad[mid] ^= 0xFF;
    std::fs::write(&pre, &bad).unwrap();
    let (code, out) = check_aof("hotkv-check-aof", &[pre.to_str().unwrap()], "");
    assert_eq!(code, 1, "{out}");
    assert_in_order(&out, &["--- RDB ERROR DETECTED ---", "RDB preamble of AOF file is not sane, aborting."]);
}

/// Inside EXEC a rewrite is scheduled rather than started (its cut would wait for the
/// transaction's locks); the cron then runs it, with the AOF off (BGREWRITEAOF makes a base)
/// and on (`appendonly yes`, with Valkey's log line). Each background job counts in INFO
/// `total_forks`, hotkv's snapshot cuts standing for Valkey's forks.
#[test]
fn rewrites_asked_for_inside_exec_are_scheduled_and_then_run() {
    let srv = node(None, &[("appendonly", "no")]);
    let mut c = srv.client();
    let forks = |c: &mut RawClient| info_num(&info(c, "stats"), "total_forks");
    let rewrites = |c: &mut RawClient| info_num(&info(c, "persistence"), "aof_rewrites");
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    c.cmd(&["SET", "foo", "bar"]);
    c.cmd(&["BGREWRITEAOF"]);
    match c.cmd(&["EXEC"]) {
        Frame::Array(r) => assert_eq!(r[1], Frame::Simple("Background append only file rewriting scheduled".into())),
        other => panic!("{other:?}"),
    }
    assert!(wait_for(|| rewrites(&mut c) == 1, WAIT), "the scheduled rewrite never ran with the AOF off");
    // The count moves when a rewrite starts, before its cut: this one must be over, for the
    // cut to be counted and for the next request not to find it running.
    wait_rewritten(&mut c);
    assert!(forks(&mut c) >= 1);
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    c.cmd(&["CONFIG", "SET", "appendonly", "yes"]);
    assert!(matches!(c.cmd(&["EXEC"]), Frame::Array(_)));
    assert!(wait_for(|| rewrites(&mut c) == 2, WAIT), "appendonly yes in EXEC never got its base");
    assert!(
        srv.log()
            .contains("AOF was enabled during a transaction. An AOF background was scheduled to start when possible.")
    );
    assert_eq!(info_field(&info(&mut c, "persistence"), "aof_enabled").as_deref(), Some("1"));
}
