//! EVAL / EVALSHA / SCRIPT: Lua scripts run atomically over their keys, with Valkey's
//! conversion rules, sandbox and error texts; busy scripts get BUSY and SCRIPT KILL.

use std::time::{Duration, Instant};

use hotkv_test_support::{Frame, wait_for};

use crate::{assert_err, assert_err_prefix, info, ok, server, server_with};

#[test]
fn eval_runs_commands_with_keys_and_args() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["EVAL", "return redis.call('set', KEYS[1], ARGV[1])", "1", "k", "v"]), Frame::ok());
    assert_eq!(c.cmd(&["EVAL", "return redis.call('get', KEYS[1])", "1", "k"]), Frame::bulk("v"));
    assert_eq!(
        c.cmd(&["EVAL", "return {1, 'two', {3.9, false}, nil, 'gone'}", "0"]),
        Frame::Array(vec![
            Frame::Integer(1),
            Frame::bulk("two"),
            Frame::Array(vec![Frame::Integer(3), Frame::NullBulk])
        ])
    );
    assert_eq!(c.cmd(&["EVAL", "return redis.call('get', 'missing')", "0"]), Frame::NullBulk);
    assert_eq!(c.cmd(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "n"]), Frame::Integer(1));
    assert_eq!(
        c.cmd(&["EVAL", "return redis.pcall('incr', KEYS[1])", "1", "k"]).error_text().as_deref(),
        Some("ERR value is not an integer or out of range")
    );
    assert_err(&c.cmd(&["EVAL", "return 1", "2", "a"]), "ERR Number of keys can't be greater than number of args");
    assert_err(&c.cmd(&["EVAL", "return 1", "-1"]), "ERR Number of keys can't be negative");
    assert_err(&c.cmd(&["EVAL", "return 1", "x"]), "ERR value is not an integer or out of range");
}

#[test]
fn script_errors_name_the_script_and_line() {
    let srv = server();
    let mut c = srv.client();
    let body = "local x = 1\nreturn redis.call('nosuch')";
    let sha = sha1_hex(body);
    assert_err(
        &c.cmd(&["EVAL", body, "0"]),
        &format!("ERR Unknown command called from script script: f_{sha}, on @user_script:2."),
    );
    assert_err_prefix(
        &c.cmd(&["EVAL", "return a", "0"]),
        "ERR user_script:1: Script attempted to access nonexistent global variable 'a'",
    );
    assert_err_prefix(&c.cmd(&["EVAL", "a = 1", "0"]), "ERR user_script:1: Attempt to modify a readonly table");
    assert_err_prefix(&c.cmd(&["EVAL", "return +", "0"]), "ERR Error compiling script (new function): user_script:1:");
    assert_err_prefix(
        &c.cmd(&["EVAL", "return redis.call('multi')", "0"]),
        "ERR This Redis command is not allowed from script",
    );
    assert_err_prefix(
        &c.cmd(&["EVAL", "return redis.call('get')", "0"]),
        "ERR Wrong number of args calling command from script",
    );
    assert_eq!(
        c.cmd(&["EVAL", "return redis.error_reply('MY custom')", "0"]).error_text().as_deref(),
        Some("MY custom")
    );
    assert_eq!(c.cmd(&["EVAL", "return redis.status_reply('FINE')", "0"]), Frame::simple("FINE"));
    // The server is still fine after each of them.
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
    // errorstats counts a script's own error by its code, whatever its message holds.
    ok(&mut c, &["CONFIG", "RESETSTAT"]);
    assert_err_prefix(&c.cmd(&["EVAL", "error('a-b')", "0"]), "ERR user_script:1: a-b");
    let stats = info(&mut c, "errorstats");
    assert!(stats.contains("errorstat_ERR:count=1") && !stats.contains("errorstat_b"), "{stats}");
}

#[test]
fn script_cache_load_exists_flush_and_evalsha() {
    let srv = server();
    let mut c = srv.client();
    let body = "return 'cached'";
    let sha = sha1_hex(body);
    assert_eq!(c.cmd(&["SCRIPT", "LOAD", body]), Frame::bulk(&sha));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "0"]), Frame::bulk("cached"));
    assert_eq!(c.cmd(&["EVALSHA", &sha.to_uppercase(), "0"]), Frame::bulk("cached"));
    assert_eq!(
        c.cmd(&["SCRIPT", "EXISTS", &sha, "ffffffffffffffffffffffffffffffffffffffff"]),
        Frame::Array(vec![Frame::Integer(1), Frame::Integer(0)])
    );
    assert_eq!(c.cmd(&["SCRIPT", "SHOW", &sha]), Frame::bulk(body));
    ok(&mut c, &["SCRIPT", "FLUSH"]);
    assert_err(&c.cmd(&["EVALSHA", &sha, "0"]), "NOSCRIPT No matching script. Please use EVAL.");
    assert_err(&c.cmd(&["EVALSHA", "short", "0"]), "NOSCRIPT No matching script. Please use EVAL.");
    // EVAL caches what it runs.
    assert_eq!(c.cmd(&["EVAL", body, "0"]), Frame::bulk("cached"));
    assert_eq!(c.cmd(&["EVALSHA", &sha, "0"]), Frame::bulk("cached"));
    assert_err(&c.cmd(&["SCRIPT", "FLUSH", "bogus"]), "ERR SCRIPT FLUSH only support SYNC|ASYNC option");
    assert_err_prefix(&c.cmd(&["SCRIPT", "LOAD", "return +"]), "ERR Error compiling script");
}

#[test]
fn script_flush_gives_a_fresh_lua_vm_and_used_memory_lua_counts_it() {
    let srv = server_with(&[("worker-threads", "1")]);
    let lua = |c: &mut hotkv_test_support::RawClient| -> u64 {
        let text = info(c, "memory");
        text.lines().find_map(|l| l.strip_prefix("used_memory_lua:")).unwrap().trim().parse().unwrap()
    };
    let mut conns: Vec<_> = (0..4).map(|_| srv.client()).collect();
    for c in &mut conns {
        assert!(c.cmd(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "x"]).int() > 0);
    }
    let before = lua(&mut conns[0]);
    assert!(before > 0, "a VM is counted from its first run");
    ok(&mut conns[0], &["SCRIPT", "FLUSH"]);
    assert_eq!(lua(&mut conns[0]), 0, "the old VMs are gone from the count");
    // Valkey's "EVAL does not leak in the Lua stack": after 20,000 runs on one connection (the
    // one VM that thread made anew, with one worker thread) used_memory_lua is under Valkey's
    // 100 KB, and within the collection's slack (a quarter of the live size, see
    // `Vm::keep_heap_near_live`) of the VM after one run. A leak of one byte a run fails this.
    assert_eq!(conns[1].cmd(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "x"]).int(), 5);
    let fresh = lua(&mut conns[1]);
    assert!(fresh > 0);
    for _ in 0..20_000 {
        conns[1].send(&["EVAL", "return redis.call('incr', KEYS[1])", "1", "x"]);
    }
    for _ in 0..20_000 {
        conns[1].read_frame();
    }
    let after = lua(&mut conns[1]);
    assert!(after < 100 * 1024 && after <= fresh + fresh / 4 + 4096, "{after} after 20,000 runs, {fresh} after one");
    assert_eq!(conns[1].cmd(&["GET", "x"]), Frame::bulk("20005"));
}

#[test]
fn shebang_flags_are_enforced() {
    let srv = server();
    let mut c = srv.client();
    assert_err_prefix(
        &c.cmd(&["EVAL", "#!lua flags=no-writes\nreturn redis.call('set','a','b')", "0"]),
        "ERR Write commands are not allowed from read-only scripts.",
    );
    assert_err(
        &c.cmd(&["EVAL_RO", "#!lua\nreturn 1", "0"]),
        "ERR Can not execute a script with write flag using *_ro command.",
    );
    assert_eq!(c.cmd(&["EVAL_RO", "#!lua flags=no-writes\nreturn 1", "0"]), Frame::Integer(1));
    assert_err_prefix(
        &c.cmd(&["EVAL_RO", "return redis.call('del','a')", "0"]),
        "ERR Write commands are not allowed from read-only scripts.",
    );
    assert_err(&c.cmd(&["EVAL", "#!lua flags=bogus\nreturn 1", "0"]), "ERR Unexpected flag in script shebang: bogus");
    assert_err(&c.cmd(&["EVAL", "#!python\nreturn 1", "0"]), "ERR Unexpected engine in script shebang: #!python");
    // Line numbers count the shebang line.
    assert_err_prefix(&c.cmd(&["EVAL", "#!lua\nerror('x')", "0"]), "ERR user_script:2: x");
}

#[test]
fn scripts_are_atomic_with_declared_and_undeclared_keys() {
    let srv = server();
    let (threads, rounds) = (4, 300);
    let port = srv.port();
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let mut c = hotkv_test_support::RawClient::connect(port);
                for i in 0..rounds {
                    // Declared: read-modify-write of two keys in different slots.
                    let r = c.cmd(&[
                        "EVAL",
                        "local v = tonumber(redis.call('get', KEYS[1]) or '0') redis.call('set', KEYS[1], v + 1) redis.call('set', KEYS[2], v + 1) return v",
                        "2",
                        "counter{a}",
                        "mirror{b}",
                    ]);
                    assert!(matches!(r, Frame::Integer(_)), "{r}");
                    // Undeclared keys: the script locks them as it goes.
                    let r = c.cmd(&["EVAL", "local v = redis.call('incr', 'free{c}') redis.call('set', 'free{d}', v) return v", "0"]);
                    assert!(matches!(r, Frame::Integer(_)), "{r}");
                    // Plain commands on the same keys, in other orders, at the same time.
                    if (t + i) % 3 == 0 {
                        let r = c.cmd(&["MSET", "free{d}", "x", "mirror{b}", "y"]);
                        assert_eq!(r, Frame::ok());
                    }
                }
            });
        }
    });
    let mut c = srv.client();
    let total = (threads * rounds).to_string();
    assert_eq!(c.cmd(&["GET", "counter{a}"]), Frame::bulk(&total));
    assert_eq!(c.cmd(&["GET", "free{c}"]), Frame::bulk(&total));
}

#[test]
fn eval_inside_multi_runs_at_exec() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MULTI"]);
    assert_eq!(c.cmd(&["EVAL", "return redis.call('incrby', KEYS[1], 5)", "1", "m"]), Frame::simple("QUEUED"));
    assert_eq!(c.cmd(&["EVAL", "return redis.call('incr', 'undeclared')", "0"]), Frame::simple("QUEUED"));
    assert_eq!(c.cmd(&["EXEC"]), Frame::Array(vec![Frame::Integer(5), Frame::Integer(1)]));
}

#[test]
fn selects_inside_a_script_stay_inside_it() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(
        c.cmd(&[
            "EVAL",
            "redis.call('select', 3) redis.call('set', 'in3', 'y') redis.call('ping') return redis.call('get', 'in3')",
            "0"
        ]),
        Frame::bulk("y")
    );
    assert_eq!(c.cmd(&["GET", "in3"]), Frame::NullBulk, "the client is still in database 0");
    ok(&mut c, &["SELECT", "3"]);
    assert_eq!(c.cmd(&["GET", "in3"]), Frame::bulk("y"));
}

#[test]
fn whole_keyspace_commands_work_inside_scripts() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["MSET", "a", "1", "b", "2", "c", "3"]);
    assert_eq!(c.cmd(&["EVAL", "return #redis.call('keys', '*')", "0"]), Frame::Integer(3));
    assert_eq!(
        c.cmd(&["EVAL", "redis.call('set', KEYS[1], 'x') return redis.call('dbsize')", "1", "d"]),
        Frame::Integer(4)
    );
    ok(&mut c, &["EVAL", "return redis.call('flushdb')", "0"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
}

#[test]
fn a_busy_script_makes_others_wait_and_script_kill_stops_it() {
    let srv = server_with(&[("busy-reply-threshold", "100")]);
    let mut runner = srv.client();
    runner.set_timeout(Duration::from_secs(30));
    runner.send(&["EVAL", "local i = 0 while true do i = i + 1 end", "0"]);
    let mut other = srv.client();
    assert!(
        wait_for(|| other.cmd(&["PING"]).is_error(), Duration::from_secs(10)),
        "PING gets BUSY while the script runs"
    );
    assert_err(
        &other.cmd(&["GET", "x"]),
        "BUSY Valkey is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.",
    );
    ok(&mut other, &["SCRIPT", "KILL"]);
    let reply = runner.read_frame();
    assert_err_prefix(&reply, "ERR Script killed by user with SCRIPT KILL.");
    assert_eq!(other.cmd(&["PING"]), Frame::simple("PONG"));
    assert_err(&other.cmd(&["SCRIPT", "KILL"]), "NOTBUSY No scripts in execution right now.");
}

#[test]
fn a_busy_script_on_the_only_event_loop_leaves_its_other_clients_served() {
    // One worker thread, so one event loop: the client connected before the script shares
    // the script's thread and is only answered if the loop hands it over; the one connected
    // during the script must not be given to the held loop.
    let srv = server_with(&[("worker-threads", "1"), ("busy-reply-threshold", "100")]);
    let mut early = srv.client();
    early.set_timeout(Duration::from_secs(20));
    ok(&mut early, &["SET", "k", "v"]);
    let mut runner = srv.client();
    runner.set_timeout(Duration::from_secs(30));
    runner.send(&["EVAL", "local i = 0 while true do i = i + 1 end", "0"]);
    assert!(
        wait_for(|| early.cmd(&["PING"]).is_error(), Duration::from_secs(10)),
        "a client of the script's loop gets BUSY while the script runs"
    );
    let mut late = srv.client();
    late.set_timeout(Duration::from_secs(20));
    assert_err_prefix(&late.cmd(&["GET", "k"]), "BUSY ");
    ok(&mut late, &["SCRIPT", "KILL"]);
    assert_err_prefix(&runner.read_frame(), "ERR Script killed by user with SCRIPT KILL.");
    assert_eq!(early.cmd(&["GET", "k"]), Frame::bulk("v"));
    assert_eq!(runner.cmd(&["GET", "k"]), Frame::bulk("v"));
    assert_eq!(late.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn a_script_that_wrote_cannot_be_killed() {
    let srv = server_with(&[("busy-reply-threshold", "100")]);
    let mut runner = srv.client();
    runner.set_timeout(Duration::from_secs(30));
    // Writes, then spins until ARGV's deadline: bounded, so the test ends on its own.
    runner.send(&[
        "EVAL",
        "redis.call('set', 'w', 1) local t = os.clock() while os.clock() - t < 1.5 do end return 'done'",
        "0",
    ]);
    let mut other = srv.client();
    let start = Instant::now();
    assert!(wait_for(|| other.cmd(&["PING"]).is_error(), Duration::from_secs(10)), "BUSY while the script runs");
    assert_err_prefix(&other.cmd(&["SCRIPT", "KILL"]), "UNKILLABLE Sorry the script already executed write commands");
    assert_eq!(runner.read_frame(), Frame::bulk("done"));
    assert!(start.elapsed() < Duration::from_secs(20));
    assert_eq!(other.cmd(&["GET", "w"]), Frame::bulk("1"));
}

#[test]
fn script_effects_reach_the_aof_as_a_transaction_not_as_the_script() {
    let srv = server_with(&[("appendonly", "yes"), ("appendfsync", "always")]);
    let mut c = srv.client();
    assert_eq!(
        c.cmd(&["EVAL", "redis.call('set', KEYS[1], 'a') redis.call('incr', KEYS[2]) return 1", "2", "e1", "e2"]),
        Frame::Integer(1)
    );
    let dir = srv.dir().join("appendonlydir");
    assert!(wait_for(|| aof_text(&dir).contains("e2"), Duration::from_secs(10)), "the script's effects are in the AOF");
    let text = aof_text(&dir);
    assert!(!text.to_ascii_lowercase().contains("eval"), "{text}");
    let multi = text.find("MULTI").expect("MULTI in the AOF");
    let exec = text.find("EXEC").expect("EXEC in the AOF");
    let (set, incr) = (text.find("e1").unwrap(), text.find("e2").unwrap());
    assert!(multi < set && set < incr && incr < exec, "{text}");
}

fn aof_text(dir: &std::path::Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        if e.path().to_string_lossy().ends_with(".incr.aof") {
            out.push_str(&String::from_utf8_lossy(&std::fs::read(e.path()).unwrap_or_default()));
        }
    }
    out
}

/// SHA1 in hex, as the server names scripts (computed with the system's sha1sum).
fn sha1_hex(body: &str) -> String {
    use std::io::Write;
    let mut child = std::process::Command::new("sha1sum")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("sha1sum");
    child.stdin.take().unwrap().write_all(body.as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&out.stdout).split_whitespace().next().unwrap().to_string()
}

const LIB: &str = "#!lua name=mylib\n\
redis.register_function('setit', function(keys, args) return redis.call('set', keys[1], args[1]) end)\n\
redis.register_function{function_name='getit', callback=function(keys) return redis.call('get', keys[1]) end, flags={'no-writes'}, description='reads a key'}";

#[test]
fn functions_load_call_list_and_delete() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(
        c.cmd(&["FUNCTION", "LIST"]),
        Frame::Array(vec![]),
        "an empty list, as redis-cli --cluster add-node expects"
    );
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIB]), Frame::bulk("mylib"));
    assert_eq!(c.cmd(&["FCALL", "setit", "1", "fk", "fv"]), Frame::ok());
    assert_eq!(c.cmd(&["FCALL_RO", "getit", "1", "fk"]), Frame::bulk("fv"));
    assert_err(
        &c.cmd(&["FCALL_RO", "setit", "1", "fk", "x"]),
        "ERR Can not execute a script with write flag using *_ro command.",
    );
    assert_err(&c.cmd(&["FCALL", "nosuch", "0"]), "ERR Function not found");
    assert_err(&c.cmd(&["FCALL", "setit", "x"]), "ERR Bad number of keys provided");
    assert_err(&c.cmd(&["FUNCTION", "LOAD", LIB]), "ERR Library 'mylib' already exists");
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", "REPLACE", LIB]), Frame::bulk("mylib"));
    let list = c.cmd(&["FUNCTION", "LIST", "WITHCODE"]).to_string();
    for want in ["library_name", "mylib", "LUA", "getit", "reads a key", "no-writes", "library_code"] {
        assert!(list.contains(want), "{want} missing from {list}");
    }
    assert_eq!(c.cmd(&["FUNCTION", "LIST", "LIBRARYNAME", "nomatch*"]), Frame::Array(vec![]));
    assert_err(&c.cmd(&["FUNCTION", "LOAD", "#!lua name=x\nreturn 1"]), "ERR No functions registered");
    assert_err(&c.cmd(&["FUNCTION", "LOAD", "return 1"]), "ERR Missing library metadata");
    assert_err_prefix(
        &c.cmd(&["FUNCTION", "LOAD", "#!lua name=x\nredis.call('ping')"]),
        "ERR Error registering functions: ERR user_function:2: Script attempted to access nonexistent global variable 'call'",
    );
    assert_err(
        &c.cmd(&["FUNCTION", "LOAD", "#!lua name=x\nlocal a = 1 while true do a = a + 1 end"]),
        "ERR Error registering functions: FUNCTION LOAD timeout",
    );
    ok(&mut c, &["FUNCTION", "DELETE", "mylib"]);
    assert_err(&c.cmd(&["FUNCTION", "DELETE", "mylib"]), "ERR Library not found");
    assert_err(&c.cmd(&["FCALL", "setit", "1", "fk", "x"]), "ERR Function not found");
}

#[test]
fn function_dump_and_restore_move_libraries_between_servers() {
    let (a, b) = (server(), server());
    let (mut ca, mut cb) = (a.client(), b.client());
    assert_eq!(ca.cmd(&["FUNCTION", "LOAD", LIB]), Frame::bulk("mylib"));
    let Frame::Bulk(payload) = ca.cmd(&["FUNCTION", "DUMP"]) else { panic!("DUMP is not a bulk") };
    let raw = |c: &mut hotkv_test_support::RawClient, args: &[&[u8]]| c.cmd(args);
    assert_eq!(raw(&mut cb, &[b"FUNCTION", b"RESTORE", &payload]), Frame::ok());
    assert_eq!(cb.cmd(&["FCALL", "setit", "1", "k", "restored"]), Frame::ok());
    assert_err(&raw(&mut cb, &[b"FUNCTION", b"RESTORE", &payload]), "ERR Library mylib already exists");
    assert_eq!(raw(&mut cb, &[b"FUNCTION", b"RESTORE", &payload, b"REPLACE"]), Frame::ok());
    let mut broken = payload.clone();
    broken[4] ^= 0xff;
    assert_err(&raw(&mut cb, &[b"FUNCTION", b"RESTORE", &broken]), "ERR DUMP payload version or checksum are wrong");
    assert_err(
        &raw(&mut cb, &[b"FUNCTION", b"RESTORE", &payload, b"bogus"]),
        "ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
    );
    ok(&mut cb, &["FUNCTION", "FLUSH"]);
    assert_eq!(cb.cmd(&["FUNCTION", "LIST"]), Frame::Array(vec![]));
}

#[test]
fn functions_survive_a_restart_through_the_rdb_file() {
    let mut first = server_with(&[("save", "")]);
    let mut c = first.client();
    assert_eq!(c.cmd(&["FUNCTION", "LOAD", LIB]), Frame::bulk("mylib"));
    ok(&mut c, &["SAVE"]);
    drop(c);
    first.stop();
    // A second server in the first one's directory loads its dump.rdb.
    let second = crate::builder().config("dir", &first.dir().display().to_string()).config("save", "").spawn();
    let mut c = second.client();
    assert_eq!(c.cmd(&["FCALL", "setit", "1", "after", "restart"]), Frame::ok());
    assert_eq!(c.cmd(&["GET", "after"]), Frame::bulk("restart"));
}

#[test]
fn functions_reach_a_replica_and_its_full_sync() {
    let primary = server();
    let mut p = primary.client();
    // One library before the replica connects (full sync), one after (the stream).
    assert_eq!(p.cmd(&["FUNCTION", "LOAD", LIB]), Frame::bulk("mylib"));
    let replica = server();
    let mut r = replica.client();
    ok(&mut r, &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    assert!(
        wait_for(|| r.cmd(&["FCALL_RO", "getit", "1", "k"]) == Frame::NullBulk, Duration::from_secs(20)),
        "the snapshot carried the library"
    );
    let two = "#!lua name=two\nredis.register_function{function_name='two', callback=function() return 2 end, flags={'no-writes'}}";
    assert_eq!(p.cmd(&["FUNCTION", "LOAD", two]), Frame::bulk("two"));
    assert!(
        wait_for(|| r.cmd(&["FCALL_RO", "two", "0"]) == Frame::Integer(2), Duration::from_secs(20)),
        "the stream carried the second library"
    );
    // A script with writes is refused on a read-only replica, as Valkey refuses it.
    assert_err(&r.cmd(&["FCALL", "setit", "1", "k", "v"]), "READONLY You can't write against a read only replica.");
    // A script's writes reach the replica as their effects.
    assert_eq!(p.cmd(&["FCALL", "setit", "1", "k", "from-function"]), Frame::ok());
    assert!(
        wait_for(|| r.cmd(&["GET", "k"]) == Frame::bulk("from-function"), Duration::from_secs(20)),
        "the effect was replicated"
    );
    ok(&mut p, &["FUNCTION", "DELETE", "two"]);
    assert!(
        wait_for(|| !r.cmd(&["FUNCTION", "LIST"]).to_string().contains("two"), Duration::from_secs(20)),
        "the delete was replicated"
    );
}
