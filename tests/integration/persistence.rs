//! RDB persistence with the real binary: SAVE/BGSAVE and restarts with every type and TTL,
//! point-in-time images under concurrent writers, the save rules, SHUTDOWN SAVE/NOSAVE and
//! SIGTERM, bad files at startup, a failing disk (MISCONF) and its recovery, kill -9 in the
//! middle of a BGSAVE, DEBUG RELOAD, files exchanged with redis-server 7.0 both ways, and a
//! shutdown that waits for a lagging replica (`shutdown-timeout`, SHUTDOWN NOW and ABORT).

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hotkv_engine::ctx::EngineConfig;
use hotkv_engine::entry::ValueRef;
use hotkv_engine::keyspace::Keyspace;
use hotkv_engine::rdb;
use hotkv_test_support::{Frame, RawClient, SIGCONT, SIGKILL, SIGSTOP, SIGTERM, TestServer, tools, wait_for};

use crate::dump_restore::redis_tool;
use crate::rdb_file::{assert_same, build_on_redis, engine_dataset, redis_dataset, wall_ms};
use crate::{assert_err, builder, info, info_field, info_num};

const WAIT: Duration = Duration::from_secs(30);

/// A server in its own dir, or in `dir` (a restart), with DEBUG allowed and `extra` on top.
fn node(dir: Option<&Path>, extra: &[(&str, &str)]) -> TestServer {
    let mut b = builder().config("enable-debug-command", "yes").config("enable-protected-configs", "yes");
    if let Some(d) = dir {
        b = b.config("dir", &d.display().to_string());
    }
    b.configs(extra).spawn()
}

/// Waits until no save runs; returns INFO persistence then.
#[track_caller]
fn wait_saved(c: &mut RawClient) -> String {
    let mut text = String::new();
    let done = wait_for(
        || {
            text = info(c, "persistence");
            info_field(&text, "rdb_bgsave_in_progress").as_deref() == Some("0")
        },
        WAIT,
    );
    assert!(done, "the save did not end:\n{text}");
    text
}

/// The string value of `key` in database 0 of a keyspace loaded from a file.
fn string_at(ks: &Keyspace, key: &[u8]) -> Option<Vec<u8>> {
    let slot = ks.db(0).slot(hotkv_engine::slot::key_slot(key));
    let t = slot.lock();
    let i = t.find(key, hotkv_engine::hash::key_hash(key))?;
    match t.at(i).value() {
        ValueRef::Str(s) => Some(s.to_vec()),
        ValueRef::Obj(hotkv_engine::object::Object::Str(s)) => Some(s.clone()),
        _ => None,
    }
}

pub(crate) fn load_file(path: &Path) -> Keyspace {
    let ks = Keyspace::new(16);
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    rdb::load(&bytes[..], &ks, &EngineConfig::default(), wall_ms()).expect("the file loads");
    ks
}

#[test]
fn save_and_bgsave_survive_a_restart_with_every_type_and_ttl() {
    for (how, extra) in
        [("SAVE", &[][..]), ("BGSAVE", &[][..]), ("BGSAVE", &[("rdbcompression", "no"), ("rdbchecksum", "no")][..])]
    {
        let mut first = node(None, extra);
        let mut c = first.client();
        build_on_redis(&mut c, wall_ms());
        let want = redis_dataset(&mut c);
        let before = info_num(&info(&mut c, "persistence"), "rdb_saves");
        if how == "SAVE" {
            assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
        } else {
            assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
        }
        let text = wait_saved(&mut c);
        assert_eq!(info_field(&text, "rdb_last_bgsave_status").as_deref(), Some("ok"));
        assert_eq!(info_num(&text, "rdb_saves"), before + 1);
        assert_eq!(info_num(&text, "rdb_changes_since_last_save"), 0);
        assert!(first.log().contains("DB saved on disk"));
        // kill -9: nothing but the file carries the data over.
        first.signal(SIGKILL);
        first.wait_exit(WAIT);
        let second = node(Some(first.dir()), extra);
        let mut c = second.client();
        assert_same(&redis_dataset(&mut c), &want);
        let text = info(&mut c, "persistence");
        assert_eq!(info_num(&text, "rdb_last_load_keys_loaded") as usize, want.len(), "{how} {extra:?}");
        assert_eq!(info_num(&text, "rdb_last_load_keys_expired"), 0);
        let log = second.log();
        assert!(log.contains(&format!("Done loading RDB, keys loaded: {}, keys expired: 0.", want.len())), "{log}");
        assert!(log.contains("DB loaded from disk: "), "{log}");
    }
}

#[test]
fn bgsave_is_a_point_in_time_image_while_writers_run() {
    // A slow snapshot pass over 20000 keys, so writers run throughout it.
    let srv = node(None, &[("save", "\"\""), ("rdb-key-save-delay", "50")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "20000", "filler"]), Frame::ok());
    // Each writer sets w<n>:<i> then c<n> = i, for i = 0, 1, 2, ...: any instant's keyspace
    // holds a prefix w<n>:0..=k of each sequence, and c<n> is k or k - 1.
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (stop, port) = (stop.clone(), srv.port());
            std::thread::spawn(move || {
                let mut c = RawClient::connect(port);
                let mut i = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    assert_eq!(c.cmd(&["SET", &format!("w{w}:{i}"), "x"]), Frame::ok());
                    assert_eq!(c.cmd(&["SET", &format!("c{w}"), &i.to_string()]), Frame::ok());
                    i += 1;
                }
                i
            })
        })
        .collect();
    assert!(wait_for(|| srv.cmd(&["EXISTS", "c0", "c1", "c2"]).int() == 3, WAIT));
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    // The pass is still going: the writers overlap it.
    assert_eq!(info_num(&info(&mut c, "persistence"), "rdb_bgsave_in_progress"), 1);
    wait_saved(&mut c);
    stop.store(true, Ordering::Relaxed);
    let written: Vec<u64> = writers.into_iter().map(|w| w.join().expect("writer")).collect();
    let ks = load_file(&srv.dir().join("dump.rdb"));
    for (w, &total) in written.iter().enumerate() {
        let present: Vec<u64> =
            (0..total).filter(|i| string_at(&ks, format!("w{w}:{i}").as_bytes()).is_some()).collect();
        let k = present.len() as u64;
        assert!(k > 0 && k < total, "writer {w}: {k} of {total} keys in the image: the writes did not overlap");
        assert_eq!(present, (0..k).collect::<Vec<_>>(), "writer {w}: not a prefix, so not one instant");
        let counter: u64 = String::from_utf8(string_at(&ks, format!("c{w}").as_bytes()).expect("counter"))
            .expect("utf8")
            .parse()
            .expect("number");
        assert!(counter + 1 == k || counter + 2 == k, "writer {w}: counter {counter} with keys 0..{k}");
    }
}

#[test]
fn a_save_rule_triggers_a_background_save() {
    let srv = node(None, &[("save", "1 5")]);
    let mut c = srv.client();
    for i in 0..5 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), "v"]), Frame::ok());
    }
    assert!(srv.wait_for_log("5 changes in 1 seconds. Saving...", WAIT), "{}", srv.log());
    let text = wait_saved(&mut c);
    assert!(info_num(&text, "rdb_saves") >= 1, "{text}");
    assert!(srv.wait_for_log("Background saving terminated with success", WAIT));
    let ks = load_file(&srv.dir().join("dump.rdb"));
    assert_eq!(ks.db(0).len(), 5);
}

#[test]
fn bgsave_replies_as_valkey() {
    let srv = node(None, &[("save", "\"\""), ("rdb-key-save-delay", "200")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "5000"]), Frame::ok());
    assert_err(&c.cmd(&["BGSAVE", "NOW"]), "ERR syntax error");
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    assert_err(&c.cmd(&["BGSAVE"]), "ERR Background save already in progress");
    assert_err(&c.cmd(&["BGSAVE", "SCHEDULE"]), "ERR Background save already in progress");
    assert_err(&c.cmd(&["SAVE"]), "ERR Background save already in progress");
    let text = info(&mut c, "persistence");
    assert_eq!(info_num(&text, "current_save_keys_total"), 5000);
    assert!(info_num(&text, "rdb_current_bgsave_time_sec") >= 0);
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "0"]), Frame::ok());
    wait_saved(&mut c);
    // Inside a transaction it is scheduled, and the cron runs it.
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("QUEUED"));
    assert_eq!(c.cmd(&["EXEC"]).items(), [Frame::simple("Background saving scheduled")]);
    assert!(wait_for(|| srv.log().matches("DB saved on disk").count() >= 2, WAIT), "{}", srv.log());
    assert_eq!(c.cmd(&["MULTI"]), Frame::ok());
    assert_err(&c.cmd(&["SAVE"]), "ERR Command not allowed inside a transaction");
    assert_eq!(c.cmd(&["DISCARD"]), Frame::ok());
}

#[test]
fn shutdown_saves_by_the_rules_and_as_told() {
    // Default rules: SHUTDOWN saves; NOSAVE does not.
    for (args, saves) in [(&["SHUTDOWN"][..], true), (&["SHUTDOWN", "NOSAVE"][..], false)] {
        let mut srv = node(None, &[]);
        srv.cmd(&["SET", "k", "v"]);
        let mut c = srv.client();
        let _ = c.try_cmd(args);
        assert!(srv.wait_exit(WAIT).is_some_and(|s| s.success()), "{args:?}");
        assert_eq!(srv.dir().join("dump.rdb").exists(), saves, "{args:?}\n{}", srv.log());
    }
    // No rules: nothing unless SAVE.
    for (args, saves) in [(&["SHUTDOWN"][..], false), (&["SHUTDOWN", "SAVE"][..], true)] {
        let mut srv = node(None, &[("save", "\"\"")]);
        srv.cmd(&["SET", "k", "v"]);
        let _ = srv.client().try_cmd(args);
        assert!(srv.wait_exit(WAIT).is_some_and(|s| s.success()), "{args:?}");
        assert_eq!(srv.dir().join("dump.rdb").exists(), saves, "{args:?}");
    }
    // SIGTERM shuts down as SHUTDOWN does, and the next start has the data.
    let mut srv = node(None, &[]);
    srv.cmd(&["SET", "k", "by sigterm"]);
    srv.signal(SIGTERM);
    assert!(srv.wait_exit(WAIT).is_some_and(|s| s.success()));
    assert!(srv.log().contains("Saving the final RDB snapshot before exiting."), "{}", srv.log());
    let back = node(Some(srv.dir()), &[]);
    assert_eq!(back.cmd(&["GET", "k"]), Frame::bulk("by sigterm"));
}

#[test]
fn a_failed_final_save_keeps_the_server_running_unless_forced() {
    let mut srv = node(None, &[]);
    let gone = srv.dir().join("gone");
    std::fs::create_dir(&gone).expect("mkdir");
    let mut c = srv.client();
    assert_eq!(c.cmd(&["CONFIG", "SET", "dir", &gone.display().to_string()]), Frame::ok());
    std::fs::remove_dir(&gone).expect("rmdir");
    assert_err(&c.cmd(&["SHUTDOWN"]), "ERR Errors trying to SHUTDOWN. Check logs.");
    assert!(srv.is_running());
    assert!(srv.log().contains("Error trying to save the DB, can't exit."), "{}", srv.log());
    let _ = c.try_cmd(&["SHUTDOWN", "FORCE"]);
    assert!(srv.wait_exit(WAIT).is_some(), "FORCE exits");
}

#[test]
fn a_corrupt_or_truncated_file_stops_the_start_naming_file_and_offset() {
    let mut srv = node(None, &[("save", "\"\"")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "1000"]), Frame::ok());
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    srv.stop();
    let path = srv.dir().join("dump.rdb");
    let good = std::fs::read(&path).expect("dump.rdb");
    let mut flipped = good.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x5a;
    // Valkey's integration/rdb "Server should not start if RDB is corrupted" writes this
    // over the CRC.
    let mut bad_crc = good.clone();
    bad_crc.truncate(good.len() - 8);
    bad_crc.extend_from_slice(b"foobar00");
    let cases = [("truncated", good[..good.len() / 2].to_vec()), ("corrupt", flipped), ("bad crc", bad_crc)];
    for (what, bytes) in cases {
        std::fs::write(&path, &bytes).expect("write");
        let out = builder().config("dir", &srv.dir().display().to_string()).run_to_exit(WAIT);
        assert_eq!(out.code(), Some(1), "{what}:\n{}", out.stdout);
        let line = out.stdout.lines().find(|l| l.contains("Error loading the RDB file")).unwrap_or_else(|| {
            panic!("{what}: no error line:\n{}\n{}", out.stdout, out.stderr);
        });
        assert!(line.contains(&path.display().to_string()) && line.contains(" at offset "), "{what}: {line}");
        assert!(out.stdout.contains("Fatal error loading the DB, check server logs. Exiting."), "{what}");
        assert!(!out.stderr.contains("panicked"), "{what}: {}", out.stderr);
        if what == "bad crc" {
            assert!(line.ends_with(": RDB CRC error"), "{line}");
            assert!(out.stdout.contains("Wrong RDB checksum expected: ("), "{}", out.stdout);
        }
    }
}

/// `file` with its header saying RDB version `version` and its checksum redone.
fn as_version(file: &[u8], version: u16) -> Vec<u8> {
    let mut f = file.to_vec();
    f[..9].copy_from_slice(format!("REDIS{version:04}").as_bytes());
    let n = f.len();
    let crc = rdb::crc64(0, &f[..n - 8]);
    f[n - 8..].copy_from_slice(&crc.to_le_bytes());
    f
}

#[test]
fn a_redis_7_4_file_loads_and_a_later_version_stops_the_start() {
    let mut srv = node(None, &[("save", "\"\"")]);
    let mut c = srv.client();
    c.cmd(&["HSET", "h", "a", "1", "b", "2"]);
    c.cmd(&["HPEXPIREAT", "h", "4000000000000", "FIELDS", "1", "b"]);
    c.cmd(&["RPUSH", "l", "x", "y"]);
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    srv.stop();
    let path = srv.dir().join("dump.rdb");
    let ours = std::fs::read(&path).expect("dump.rdb");
    assert_eq!(&ours[..9], b"REDIS0010", "hotkv still writes version 10");
    std::fs::write(&path, as_version(&ours, 12)).expect("write");
    let back = node(Some(srv.dir()), &[("save", "\"\"")]);
    let mut c = back.client();
    let times = Frame::Array(vec![Frame::Integer(-1), Frame::Integer(4_000_000_000_000)]);
    assert_eq!(c.cmd(&["HPEXPIRETIME", "h", "FIELDS", "2", "a", "b"]), times);
    assert_eq!(c.cmd(&["LLEN", "l"]), Frame::Integer(2));
    drop(back);
    std::fs::write(&path, as_version(&ours, 13)).expect("write");
    let out = builder().config("dir", &srv.dir().display().to_string()).run_to_exit(WAIT);
    assert_eq!(out.code(), Some(1), "{}", out.stdout);
    assert!(out.stdout.contains("version 13"), "{}", out.stdout);
}

#[test]
fn flushall_abandons_a_running_bgsave_without_an_error() {
    // Valkey's integration/rdb "Test FLUSHALL aborts bgsave": no save rules, so FLUSHALL
    // writes no file of its own, yet the running BGSAVE (5 s at 1 ms a key) is stopped.
    let srv = node(None, &[("save", "\"\""), ("rdb-key-save-delay", "1000")]);
    let mut c = srv.client();
    for i in 0..5000 {
        c.send(&["SET", &format!("k{i}"), "v"]);
    }
    for _ in 0..5000 {
        assert_eq!(c.read_frame(), Frame::ok());
    }
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    assert_eq!(info_field(&info(&mut c, "persistence"), "rdb_bgsave_in_progress").as_deref(), Some("1"));
    assert_eq!(c.cmd(&["FLUSHALL"]), Frame::ok());
    let stopped = wait_for(
        || info_field(&info(&mut c, "persistence"), "rdb_bgsave_in_progress").as_deref() == Some("0"),
        Duration::from_secs(2),
    );
    assert!(stopped, "the BGSAVE still runs:\n{}", info(&mut c, "persistence"));
    let text = info(&mut c, "persistence");
    assert!(info_num(&text, "rdb_changes_since_last_save") >= 999, "{text}");
    assert_eq!(info_field(&text, "rdb_last_bgsave_status").as_deref(), Some("ok"), "{text}");
    assert!(!srv.dir().join("dump.rdb").exists());
    assert_eq!(c.cmd(&["SET", "x", "xx"]), Frame::ok());
}

#[test]
fn bgsave_cancel_stops_a_running_save_or_drops_a_scheduled_one() {
    // Valkey 8.1's BGSAVE CANCEL (its integration/rdb "bgsave cancel aborts save", "bgsave cancel
    // schedulled request").
    let srv = node(None, &[("save", "\"\""), ("rdb-key-save-delay", "1000000")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "100", "", "16"]), Frame::ok());
    let nothing = "ERR Background saving is currently not in progress or scheduled";
    assert_err(&c.cmd(&["BGSAVE", "CANCEL"]), nothing);
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    assert_eq!(c.cmd(&["BGSAVE", "CANCEL"]), Frame::simple("Background saving cancelled"));
    let text = wait_saved(&mut c);
    assert_eq!(info_field(&text, "rdb_last_bgsave_status").as_deref(), Some("ok"), "{text}");
    let temps: Vec<_> = std::fs::read_dir(srv.dir())
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.file_name().to_string_lossy().into_owned()))
        .filter(|n| n.starts_with("temp-") || n == "dump.rdb")
        .collect();
    assert!(temps.is_empty(), "{temps:?}");
    assert_err(&c.cmd(&["BGSAVE", "CANCEL"]), nothing);
    // Behind a slow AOF rewrite a BGSAVE is refused as Valkey's, or scheduled, then dropped.
    assert_eq!(c.cmd(&["BGREWRITEAOF"]), Frame::simple("Background append only file rewriting started"));
    assert_err(
        &c.cmd(&["BGSAVE"]),
        "ERR Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to schedule \
         a BGSAVE whenever possible.",
    );
    assert_eq!(c.cmd(&["BGSAVE", "SCHEDULE"]), Frame::simple("Background saving scheduled"));
    assert_eq!(c.cmd(&["BGSAVE", "CANCEL"]), Frame::simple("Scheduled background saving cancelled"));
    assert_err(&c.cmd(&["BGSAVE", "CANCEL"]), nothing);
    assert_err(&c.cmd(&["BGSAVE", "NOW"]), "ERR syntax error");
}

#[test]
fn a_failing_disk_answers_misconf_until_a_save_succeeds() {
    let srv = node(None, &[]);
    let mut c = srv.client();
    let sub = srv.dir().join("data");
    std::fs::create_dir(&sub).expect("mkdir");
    assert_eq!(c.cmd(&["CONFIG", "SET", "dir", &sub.display().to_string()]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    std::fs::remove_dir(&sub).expect("rmdir");
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    let text = wait_saved(&mut c);
    assert_eq!(info_field(&text, "rdb_last_bgsave_status").as_deref(), Some("err"), "{text}");
    assert!(srv.log().contains("Background saving error"), "{}", srv.log());
    assert!(srv.log().contains("Failed opening the temp RDB file temp-"), "{}", srv.log());
    let misconf = "MISCONF Valkey is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Valkey logs for details about the RDB error.";
    assert_err(&c.cmd(&["SET", "k", "w"]), misconf);
    assert_err(&c.cmd(&["PING"]), misconf);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("v"));
    // Turned off, writes go through; back on, they are refused again.
    assert_eq!(c.cmd(&["CONFIG", "SET", "stop-writes-on-bgsave-error", "no"]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "k", "w"]), Frame::ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "stop-writes-on-bgsave-error", "yes"]), Frame::ok());
    assert_err(&c.cmd(&["SET", "k", "x"]), misconf);
    // The disk is back: a successful save lifts it.
    std::fs::create_dir(&sub).expect("mkdir again");
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    let text = wait_saved(&mut c);
    assert_eq!(info_field(&text, "rdb_last_bgsave_status").as_deref(), Some("ok"), "{text}");
    assert_eq!(c.cmd(&["SET", "k", "x"]), Frame::ok());
    assert!(sub.join("dump.rdb").exists());
}

#[test]
fn kill_9_during_bgsave_leaves_the_previous_file_whole() {
    let mut srv = node(None, &[("save", "\"\"")]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "generation", "1"]), Frame::ok());
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    let path = srv.dir().join("dump.rdb");
    let before = std::fs::read(&path).expect("first file");
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "20000"]), Frame::ok());
    assert_eq!(c.cmd(&["SET", "generation", "2"]), Frame::ok());
    assert_eq!(c.cmd(&["CONFIG", "SET", "rdb-key-save-delay", "1000"]), Frame::ok());
    assert_eq!(c.cmd(&["BGSAVE"]), Frame::simple("Background saving started"));
    let temp = srv.dir().join(format!("temp-{}.rdb", srv.pid()));
    assert!(wait_for(|| std::fs::metadata(&temp).is_ok_and(|m| m.len() > 0), WAIT), "no temp file");
    srv.signal(SIGKILL);
    srv.wait_exit(WAIT);
    assert_eq!(std::fs::read(&path).expect("file still there"), before, "dump.rdb changed");
    let back = node(Some(srv.dir()), &[("save", "\"\"")]);
    assert_eq!(back.cmd(&["GET", "generation"]), Frame::bulk("1"));
    assert_eq!(back.cmd(&["DBSIZE"]), Frame::Integer(1));
}

#[test]
fn debug_reload_saves_flushes_and_loads() {
    let srv = node(None, &[("save", "\"\"")]);
    let mut c = srv.client();
    build_on_redis(&mut c, wall_ms());
    let want = redis_dataset(&mut c);
    assert_eq!(c.cmd(&["DEBUG", "RELOAD"]), Frame::ok());
    assert_same(&redis_dataset(&mut c), &want);
    // NOSAVE loads the file as it is: a key set since is gone.
    assert_eq!(c.cmd(&["SET", "later", "x"]), Frame::ok());
    assert_eq!(c.cmd(&["DEBUG", "RELOAD", "NOSAVE"]), Frame::ok());
    assert_eq!(c.cmd(&["EXISTS", "later"]), Frame::Integer(0));
    std::fs::remove_file(srv.dir().join("dump.rdb")).expect("rm");
    assert_err(&c.cmd(&["DEBUG", "RELOAD", "NOSAVE"]), "ERR Error trying to load the RDB dump, check server logs.");
    assert!(srv.log().contains("DB reloaded by DEBUG RELOAD"));
}

#[test]
fn info_persistence_has_valkeys_fields_in_order() {
    let srv = node(None, &[]);
    let text = info(&mut srv.client(), "persistence");
    let names: Vec<&str> = text.lines().filter_map(|l| l.split_once(':').map(|(k, _)| k)).collect();
    let want = [
        "loading",
        "async_loading",
        "current_cow_peak",
        "current_cow_size",
        "current_cow_size_age",
        "current_fork_perc",
        "current_save_keys_processed",
        "current_save_keys_total",
        "rdb_changes_since_last_save",
        "rdb_bgsave_in_progress",
        "rdb_last_save_time",
        "rdb_last_bgsave_status",
        "rdb_last_bgsave_time_sec",
        "rdb_current_bgsave_time_sec",
        "rdb_saves",
        "rdb_last_cow_size",
        "rdb_last_load_keys_expired",
        "rdb_last_load_keys_loaded",
        "aof_enabled",
        "aof_rewrite_in_progress",
        "aof_rewrite_scheduled",
        "aof_last_rewrite_time_sec",
        "aof_current_rewrite_time_sec",
        "aof_last_bgrewrite_status",
        "aof_rewrites",
        "aof_rewrites_consecutive_failures",
        "aof_last_write_status",
        "aof_last_cow_size",
        "module_fork_in_progress",
        "module_fork_last_cow_size",
    ];
    assert_eq!(names, want);
}

#[test]
fn a_file_hotkv_saved_loads_in_redis_server() {
    let Some(bin) = redis_tool("redis-server", "load a dump.rdb hotkv saved") else { return };
    let srv = node(None, &[("save", "\"\"")]);
    let mut c = srv.client();
    build_on_redis(&mut c, wall_ms());
    let want = redis_dataset(&mut c);
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    let file = std::fs::read(srv.dir().join("dump.rdb")).expect("dump.rdb");
    // Compressed (rdbcompression yes): the 21000-byte string alone is larger than the file.
    assert!(file.len() < 21_000, "{} bytes", file.len());
    let redis = TestServer::builder(bin)
        .config_file("redis.conf", move |port, dir| {
            std::fs::write(dir.join("dump.rdb"), &file).expect("write");
            format!("port {port}\nbind 127.0.0.1\ndir {}\nsave \"\"\nappendonly no\n", dir.display())
        })
        .spawn();
    assert_same(&redis_dataset(&mut redis.client()), &want);
    if let Some(check) = redis_tool("redis-check-rdb", "check hotkv's dump.rdb") {
        let out = tools::run_bounded(
            std::process::Command::new(check).arg(redis.dir().join("dump.rdb")),
            None,
            Duration::from_secs(30),
        );
        assert!(out.stdout.contains("RDB looks OK"), "redis-check-rdb:\n{}\n{}", out.stdout, out.stderr);
    }
}

#[test]
fn a_file_redis_server_saved_loads_in_hotkv_at_startup() {
    let Some(bin) = redis_tool("redis-server", "save a dump.rdb for hotkv to load") else { return };
    let redis = TestServer::builder(bin).configs(&[("save", "\"\""), ("appendonly", "no")]).spawn();
    let mut r = redis.client();
    build_on_redis(&mut r, wall_ms());
    let want = redis_dataset(&mut r);
    assert_eq!(r.cmd(&["SAVE"]), Frame::ok());
    let srv = node(Some(redis.dir()), &[("save", "\"\"")]);
    assert_same(&redis_dataset(&mut srv.client()), &want);
    assert!(srv.log().contains("Loading RDB produced by version 7."), "{}", srv.log());
    // And what this node holds is what its own engine reads from the file.
    let ks = load_file(&redis.dir().join("dump.rdb"));
    assert_eq!(engine_dataset(&ks).len(), want.len());
}

#[test]
fn a_restarted_primary_lets_its_replica_continue_from_the_file() {
    let mut primary = node(None, &[]);
    let port = primary.port();
    let replica = node(None, &[("replicaof", &format!("127.0.0.1 {port}"))]);
    let mut p = primary.client();
    for i in 0..100 {
        assert_eq!(p.cmd(&["SET", &format!("k{i}"), &i.to_string()]), Frame::ok());
    }
    // Keys that expire before the restart, in two databases, left to lazy expiry here: the
    // replica holds them until its primary says otherwise.
    assert_eq!(p.cmd(&["DEBUG", "SET-ACTIVE-EXPIRE", "0"]), Frame::ok());
    for db in ["0", "3"] {
        assert_eq!(p.cmd(&["SELECT", db]), Frame::ok());
        for i in 0..25 {
            assert_eq!(p.cmd(&["SET", &format!("e{i}"), "v", "PX", "1"]), Frame::ok());
        }
    }
    assert_eq!(p.cmd(&["SELECT", "0"]), Frame::ok());
    let offset = |c: &mut RawClient| info_num(&info(c, "replication"), "master_repl_offset");
    let want = offset(&mut p);
    assert!(wait_for(|| offset(&mut replica.client()) == want, WAIT), "the replica did not catch up");
    let mut r = replica.client();
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(125));
    // A clean shutdown saves the file with the stream's id and offset; the primary comes back
    // on the same port and the replica continues instead of loading everything again.
    let _ = p.try_cmd(&["SHUTDOWN"]);
    assert!(primary.wait_exit(WAIT).is_some());
    let back = builder()
        .config("enable-debug-command", "yes")
        .config("dir", &primary.dir().display().to_string())
        .port_hint(port)
        .spawn();
    if back.port() != port {
        eprintln!("port {port} was taken meanwhile: skipping the partial resync check");
        return;
    }
    let mut b = back.client();
    assert!(
        wait_for(|| info_num(&info(&mut b, "stats"), "sync_partial_ok") == 1, WAIT),
        "{}\n{}",
        info(&mut b, "stats"),
        back.log()
    );
    assert_eq!(info_num(&info(&mut b, "stats"), "sync_full"), 0);
    assert_eq!(b.cmd(&["SET", "after", "restart"]), Frame::ok());
    assert!(wait_for(|| replica.cmd(&["GET", "after"]) == Frame::bulk("restart"), WAIT));
    // The expired keys were in the file, left out of the load, and deleted on the replica by
    // the DELs the restarted primary put at the head of the continued stream.
    assert_eq!(info_num(&info(&mut b, "persistence"), "rdb_last_load_keys_expired"), 50);
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(101));
    assert_eq!(r.cmd(&["SELECT", "3"]), Frame::ok());
    assert_eq!(r.cmd(&["DBSIZE"]), Frame::Integer(0));
    assert_eq!(offset(&mut b), offset(&mut replica.client()));
}

#[test]
fn clients_get_loading_while_the_file_loads_at_start() {
    let mut first = node(None, &[("save", "\"\"")]);
    let mut c = first.client();
    assert_eq!(c.cmd(&["DEBUG", "POPULATE", "3000"]), Frame::ok());
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    first.stop();
    // 3000 keys at 1 ms each: the load takes about three seconds, and the listener is open
    // the whole time.
    let port = hotkv_test_support::free_port();
    let dir = first.dir().display().to_string();
    let starting = std::thread::spawn(move || {
        builder().config("dir", &dir).config("save", "\"\"").config("key-load-delay", "1000").port_hint(port).spawn()
    });
    let mut seen = None;
    let mut config = None;
    let loading = wait_for(
        || {
            let Ok(mut c) = RawClient::try_connect(port) else { return false };
            c.set_timeout(Duration::from_secs(5));
            let Ok(reply) = c.try_cmd(&["GET", "key:1"]) else { return false };
            if reply.error_text().as_deref() != Some("LOADING Valkey is loading the dataset in memory") {
                return false;
            }
            // The first clients are accepted before the loader has opened the file (its size
            // is not known yet): wait for the figures rather than catch that instant.
            let text = info(&mut c, "persistence");
            let sized = info_num(&text, "loading_total_bytes") > 0;
            seen = Some(text);
            if sized {
                // Some directives may change while loading, others not (Valkey's
                // DENY_LOADING_CONFIG): the directory the file loads from is one.
                config = Some((
                    c.try_cmd(&["CONFIG", "SET", "loglevel", "debug"]).ok(),
                    c.try_cmd(&["CONFIG", "SET", "dir", "/tmp"]).ok(),
                ));
            }
            sized
        },
        WAIT,
    );
    let srv = starting.join().expect("the server starts");
    if srv.port() != port {
        eprintln!("port {port} was taken meanwhile: skipping the LOADING check");
        return;
    }
    assert!(loading, "no -LOADING reply while loading");
    let text = seen.expect("INFO while loading");
    assert_eq!(info_field(&text, "loading").as_deref(), Some("1"), "{text}");
    assert!(info_num(&text, "loading_total_bytes") > 0, "{text}");
    assert!(info_field(&text, "loading_eta_seconds").is_some(), "{text}");
    let (loglevel, dir) = config.expect("CONFIG SET while loading");
    assert_eq!(loglevel, Some(Frame::ok()));
    assert_eq!(dir.and_then(|f| f.error_text()).as_deref(), Some("LOADING Valkey is loading the dataset in memory"));
    assert_eq!(srv.cmd(&["DBSIZE"]), Frame::Integer(3000));
    assert_eq!(info_field(&info(&mut srv.client(), "persistence"), "loading").as_deref(), Some("0"));
}

#[test]
fn at_load_a_cluster_node_claims_unassigned_slots_and_drops_keys_of_slots_others_serve() {
    let _one = crate::cluster::one_cluster_at_a_time();
    // A file with keys all over the slot space, saved by a standalone node.
    let src = node(None, &[("save", "\"\"")]);
    let mut c = src.client();
    for i in 0..200 {
        assert_eq!(c.cmd(&["SET", &format!("k{i}"), "v"]), Frame::ok());
    }
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    let file = std::fs::read(src.dir().join("dump.rdb")).expect("dump.rdb");
    let slots: Vec<i64> =
        (0..200).map(|i| i64::from(hotkv_engine::slot::key_slot(format!("k{i}").as_bytes()))).collect();

    // A lone node that serves nothing takes every slot it has keys for.
    let lone_dir = src.dir().join("lone");
    std::fs::create_dir(&lone_dir).expect("mkdir");
    std::fs::write(lone_dir.join("dump.rdb"), &file).expect("write");
    let lone = builder().config("cluster-enabled", "yes").config("dir", &lone_dir.display().to_string()).spawn();
    assert_eq!(lone.cmd(&["DBSIZE"]), Frame::Integer(200));
    assert!(
        lone.log().contains(&format!("I have keys for unassigned slot {}. Taking responsibility for it.", slots[0]))
    );
    for &s in &slots {
        assert!(lone.cmd(&["CLUSTER", "COUNTKEYSINSLOT", &s.to_string()]).int() > 0, "slot {s}");
    }
    assert!(!lone.cmd(&["CLUSTER", "SLOTS"]).items().is_empty());

    // A node of a formed cluster keeps only the keys of its own slots.
    let mut ns = crate::cluster::nodes(3, &[]);
    crate::cluster::create(&ns, 0);
    let ranges = ns[0].cmd(&["CLUSTER", "SLOTS"]);
    let port0 = ns[0].port() as i64;
    let owns = |s: i64| {
        ranges.items().iter().any(|r| {
            let it = r.items();
            it[0].int() <= s && s <= it[1].int() && it[2].items()[1].int() == port0
        })
    };
    let keep = slots.iter().filter(|&&s| owns(s)).count() as i64;
    assert!(keep > 0 && keep < 200);
    let _ = ns[0].client().try_cmd(&["SHUTDOWN", "NOSAVE"]);
    assert!(ns[0].wait_exit(WAIT).is_some());
    std::fs::write(ns[0].dir().join("dump.rdb"), &file).expect("write");
    let back = builder()
        .config("cluster-enabled", "yes")
        .config("cluster-node-timeout", crate::cluster::NODE_TIMEOUT)
        .config("dir", &ns[0].dir().display().to_string())
        .spawn();
    assert_eq!(back.cmd(&["DBSIZE"]), Frame::Integer(keep), "{}", back.log());
    assert!(back.log().contains("but the slot is assigned to another node. Deleting keys in the slot."));
    ns.push(back);
}

#[test]
fn flushall_with_save_rules_empties_the_file_too() {
    let mut srv = node(None, &[]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["SET", "k", "v"]), Frame::ok());
    assert_eq!(c.cmd(&["SAVE"]), Frame::ok());
    assert_eq!(c.cmd(&["FLUSHALL"]), Frame::ok());
    let path = srv.dir().join("dump.rdb");
    assert!(wait_for(|| std::fs::metadata(&path).is_ok() && load_file(&path).db(0).is_empty(), WAIT));
    srv.signal(SIGKILL);
    srv.wait_exit(WAIT);
    let back = node(Some(srv.dir()), &[]);
    assert_eq!(back.cmd(&["DBSIZE"]), Frame::Integer(0));
}

#[test]
fn a_restarted_replica_continues_from_its_own_file() {
    let primary = node(None, &[]);
    let port = primary.port();
    let mut replica = node(None, &[("replicaof", &format!("127.0.0.1 {port}"))]);
    let mut p = primary.client();
    for i in 0..200 {
        assert_eq!(p.cmd(&["INCR", &format!("c{}", i % 20)]), Frame::Integer(i / 20 + 1));
    }
    let offset = |c: &mut RawClient| info_num(&info(c, "replication"), "master_repl_offset");
    let want = offset(&mut p);
    assert!(wait_for(|| offset(&mut replica.client()) == want, WAIT), "the replica did not catch up");
    // The replica saves its copy with its primary's id and its offset on the way down, then
    // comes back from the file and asks to continue: no full sync, nothing applied twice.
    let _ = replica.client().try_cmd(&["SHUTDOWN", "SAVE"]);
    assert!(replica.wait_exit(WAIT).is_some());
    for i in 0..20 {
        assert_eq!(p.cmd(&["INCR", &format!("c{i}")]), Frame::Integer(11));
    }
    let back = builder()
        .config("dir", &replica.dir().display().to_string())
        .config("save", "\"\"")
        .config("replicaof", &format!("127.0.0.1 {port}"))
        .spawn();
    let mut b = back.client();
    let want = offset(&mut p);
    assert!(wait_for(|| offset(&mut b) == want, WAIT), "{}", back.log());
    let stats = info(&mut p, "stats");
    assert_eq!((info_num(&stats, "sync_full"), info_num(&stats, "sync_partial_ok")), (1, 1), "{stats}");
    for i in 0..20 {
        assert_eq!(b.cmd(&["GET", &format!("c{i}")]), Frame::bulk("11"), "{}", back.log());
    }
    assert!(back.log().contains("Successful partial resynchronization with primary."), "{}", back.log());
}

/// A primary with `extra` and a replica of it that has caught up, then stopped (SIGSTOP), and
/// one write on the primary the replica has not acknowledged: the primary's replica lags.
fn primary_with_stopped_replica(extra: &[(&str, &str)]) -> (TestServer, TestServer) {
    let primary = node(None, &[&[("save", "\"\"")][..], extra].concat());
    let replica = node(None, &[("save", "\"\""), ("replicaof", &format!("127.0.0.1 {}", primary.port()))]);
    let mut p = primary.client();
    assert_eq!(p.cmd(&["SET", "k", "1"]), Frame::ok());
    let offset = |c: &mut RawClient| info_num(&info(c, "replication"), "master_repl_offset");
    let want = offset(&mut p);
    assert!(wait_for(|| offset(&mut replica.client()) == want, WAIT), "the replica did not catch up");
    // The primary's view: the replica's last ACK (`slave0:...,offset=N,...`).
    let acked = |c: &mut RawClient| {
        let text = info(c, "replication");
        let line = text.lines().find(|l| l.starts_with("slave0:")).unwrap_or_default().to_string();
        let field = line.split(',').find_map(|f| f.strip_prefix("offset=")).and_then(|v| v.parse::<i64>().ok());
        field.is_some_and(|o| o >= want)
    };
    assert!(wait_for(|| acked(&mut p), WAIT), "the replica never acknowledged:\n{}", info(&mut p, "replication"));
    replica.signal(SIGSTOP);
    assert_eq!(p.cmd(&["INCR", "k"]), Frame::Integer(2));
    (primary, replica)
}

/// INFO's `shutdown_in_milliseconds`, while a shutdown waits for replicas.
fn shutdown_in_ms(c: &mut RawClient) -> Option<i64> {
    info_field(&info(c, "server"), "shutdown_in_milliseconds").and_then(|v| v.parse().ok())
}

#[test]
fn shutdown_waits_for_a_lagging_replica_to_catch_up() {
    for by_signal in [false, true] {
        let (mut primary, replica) = primary_with_stopped_replica(&[("shutdown-timeout", "300")]);
        let mut asker = primary.client();
        if by_signal {
            primary.signal(SIGTERM);
        } else {
            asker.send(&["SHUTDOWN"]);
        }
        let mut c = primary.client();
        assert!(wait_for(|| shutdown_in_ms(&mut c).is_some_and(|ms| ms > 0), WAIT), "{}", primary.log());
        if !by_signal {
            assert_eq!(info_num(&info(&mut c, "clients"), "blocked_clients"), 1);
        }
        assert!(primary.is_running(), "exited before its replica caught up");
        // The replica wakes up, takes the INCR, acknowledges it: then the primary exits.
        replica.signal(SIGCONT);
        assert!(primary.wait_exit(WAIT).is_some_and(|s| s.success()), "{}", primary.log());
        assert_eq!(replica.cmd(&["GET", "k"]), Frame::bulk("2"));
        let log = primary.log();
        assert!(log.contains("Waiting for replicas before shutting down."), "{log}");
        assert!(log.contains("1 of 1 replicas are in sync when shutting down."), "{log}");
        assert!(!log.contains("Lagging replica"), "{log}");
    }
}

#[test]
fn shutdown_gives_up_on_a_stopped_replica_after_shutdown_timeout() {
    let (mut primary, replica) = primary_with_stopped_replica(&[("shutdown-timeout", "1")]);
    primary.signal(SIGTERM);
    assert!(primary.wait_exit(WAIT).is_some_and(|s| s.success()), "{}", primary.log());
    let log = primary.log();
    assert!(log.contains("Lagging replica 127.0.0.1:"), "{log}");
    assert!(log.contains("0 of 1 replicas are in sync when shutting down."), "{log}");
    replica.signal(SIGCONT);
    // The INCR never left the primary's buffers (or never got acknowledged); either way the
    // replica is alive and answers.
    assert!(matches!(replica.cmd(&["GET", "k"]), Frame::Bulk(_)));
}

#[test]
fn shutdown_abort_answers_every_waiter_and_lets_writes_through() {
    let (mut primary, replica) = primary_with_stopped_replica(&[("shutdown-timeout", "300")]);
    let (mut a, mut b) = (primary.client(), primary.client());
    a.send(&["SHUTDOWN"]);
    b.send(&["SHUTDOWN", "NOSAVE"]);
    let mut c = primary.client();
    assert!(wait_for(|| info_num(&info(&mut c, "clients"), "blocked_clients") == 2, WAIT));
    assert!(shutdown_in_ms(&mut c).is_some_and(|ms| ms > 0));
    // Writes wait while the shutdown does; reads do not.
    let mut writer = primary.client();
    writer.send(&["SET", "during", "wait"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("2"));
    assert_eq!(c.cmd(&["SHUTDOWN", "ABORT"]), Frame::ok());
    for w in [&mut a, &mut b] {
        assert_err(&w.read_frame(), "ERR Errors trying to SHUTDOWN. Check logs.");
    }
    assert_eq!(writer.read_frame(), Frame::ok(), "the paused write ran after the abort");
    assert_eq!(shutdown_in_ms(&mut c), None);
    assert_err(&c.cmd(&["SHUTDOWN", "ABORT"]), "ERR No shutdown in progress.");
    assert!(primary.is_running());
    assert!(primary.log().contains("Shutdown manually aborted."), "{}", primary.log());
    // NOW does not wait for the replica, which is still stopped (300 s of timeout otherwise).
    let _ = c.try_cmd(&["SHUTDOWN", "NOW"]);
    assert!(primary.wait_exit(WAIT).is_some_and(|s| s.success()), "{}", primary.log());
    assert!(primary.log().contains("0 of 1 replicas are in sync when shutting down."));
    replica.signal(SIGCONT);
}
