//! DEBUG: the test suite's levers (SLEEP, SET-ACTIVE-EXPIRE, OBJECT, DIGEST, ...), refused
//! unless `enable-debug-command` allows it, as in Valkey.

use std::sync::atomic::Ordering;
use std::time::Duration;

use hotkv_engine::CommandError;
use hotkv_engine::command::flags as f;
use hotkv_engine::entry::Entry;
use hotkv_engine::hash::key_hash;
use hotkv_engine::slot::key_slot;
use hotkv_protocol::{Args, ReplyBuf};

use super::debug_value::{ListKnobs, entry_digest, hex, mix_digest, object_line, xor_digest};
use super::{reply_help, row, subcommand_syntax_error, text};
use crate::registry::{Flow, ServerSpec};
use crate::server::{Server, int_of, str_of, unix_ms};
use crate::session::Session;

/// DEBUG's row.
pub static COMMANDS: &[ServerSpec] = &[row(
    "debug",
    -2,
    f::ADMIN | f::NOSCRIPT | f::LOADING | f::STALE | f::PROTECTED,
    0,
    &[],
    "server",
    "1.0.0",
    "A container for debugging commands.",
    "Depends on subcommand.",
    debug,
)];

/// Whether `enable-debug-command` (`no`, `yes` or `local`) lets this client run DEBUG.
pub fn debug_allowed(setting: &str, peer_is_loopback: bool) -> bool {
    match setting.to_ascii_lowercase().as_str() {
        "yes" => true,
        "local" => peer_is_loopback,
        _ => false,
    }
}

fn debug(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let setting = str_of(&srv.settings.load(), "enable-debug-command", "no");
    if !debug_allowed(&setting, sess.info.addr.is_local()) {
        return Err(CommandError::err(
            "DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run it from a \
             local connection, otherwise you need to set this option in the configuration file, and then restart the \
             server.",
        ));
    }
    run(srv, sess, args, out)
}

fn sub_arg(args: &Args<'_>) -> String {
    String::from_utf8_lossy(args.get(2)).to_ascii_lowercase()
}

/// DEBUG PROTOCOL <type>: one sample reply of each RESP type, for client and test authors.
/// DEBUG POPULATE: `<prefix>:<n>` for n below `count`, each `value:<n>` (cut or padded with
/// zero bytes to `size` when given), leaving keys that exist alone; as Valkey, not
/// propagated and blind to cluster slot ownership.
fn populate(srv: &Server, db: usize, count: u64, prefix: &[u8], size: usize) {
    let engine = srv.engine.load();
    let lru = hotkv_engine::policy::initial(engine.policy, unix_ms());
    let mut key = Vec::with_capacity(prefix.len() + 21);
    let mut val = Vec::with_capacity(size.max(26));
    for j in 0..count {
        key.clear();
        key.extend_from_slice(prefix);
        key.push(b':');
        key.extend_from_slice(itoa::Buffer::new().format(j).as_bytes());
        val.clear();
        val.extend_from_slice(b"value:");
        val.extend_from_slice(itoa::Buffer::new().format(j).as_bytes());
        if size > 0 {
            val.resize(size, 0);
        }
        let id = hotkv_engine::keyspace::lock_id(db, key_slot(&key));
        let mut locks = srv.ks.lock(&[id]);
        let Some((table, slot)) = locks.get(id) else { continue };
        let hash = key_hash(&key);
        if table.find(&key, hash).is_none() {
            table.insert_new(Entry::new(&key, hash, hotkv_engine::entry::NewValue::Bytes(&val), None, lru));
            slot.sync(table);
        }
    }
}

fn protocol(name: &str, out: &mut ReplyBuf) -> Result<(), CommandError> {
    match name {
        "string" => out.bulk(b"Hello World"),
        "integer" => out.int(12345),
        // The sample value Valkey sends, not an approximation of pi.
        #[allow(clippy::approx_constant)]
        "double" => out.double(3.141),
        "bignum" => out.big_number(b"1234567999999999999999999999999999999"),
        "null" => out.null(),
        "array" => {
            out.array(3);
            (0..3).for_each(|j| out.int(j));
        }
        "set" => {
            out.set(3);
            (0..3).for_each(|j| out.int(j));
        }
        "map" => {
            out.map(3);
            for j in 0..3 {
                out.int(j);
                out.boolean(j == 1);
            }
        }
        "attrib" => {
            if out.is_resp3() {
                out.attribute(1);
                out.bulk(b"key-popularity");
                out.array(2);
                out.bulk(b"key:123");
                out.int(90);
            }
            // An attribute is not a reply: a real one follows it.
            out.bulk(b"Some real reply following the attribute");
        }
        "push" => {
            if !out.is_resp3() {
                return Err(CommandError::err("RESP2 is not supported by this command"));
            }
            out.push(2);
            out.bulk(b"server-cpu-usage");
            out.int(42);
            out.bulk(b"Some real reply following the push reply");
        }
        "true" => out.boolean(true),
        "false" => out.boolean(false),
        "verbatim" => out.verbatim(b"This is a verbatim\nstring"),
        _ => {
            return Err(CommandError::err(
                "Wrong protocol type name. Please use one of the following: string|integer|double|bignum|null|array|set|map|attrib|push|verbatim|true|false",
            ));
        }
    }
    Ok(())
}

/// DEBUG once allowed.
fn run(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let sub = String::from_utf8_lossy(args.get(1)).to_ascii_lowercase();
    let argc = args.len();
    match (sub.as_str(), argc) {
        ("help", 2) => help(&args, out),
        ("sleep", 3) => {
            // strtod semantics: what does not parse sleeps for 0 seconds.
            let secs: f64 = text(args.get(2)).trim().parse().unwrap_or(0.0);
            let micros = (secs * 1_000_000.0) as i64;
            sess.thaw_after_reply = sleep(srv, Duration::from_micros(micros.max(0) as u64));
            out.ok();
        }
        ("segfault", _) => crate::crash::segfault(),
        ("assert", _) => {
            // Valkey's serverAssertWithInfo(c, c->argv[0], 1 == 2): a report, then the end.
            std::panic::panic_any(crate::crash::Assertion { expr: "1 == 2", file: file!(), line: line!() })
        }
        ("protocol", 3) => protocol(&sub_arg(&args), out)?,
        ("aof-flush-sleep", 3) => {
            // atoi semantics, as Valkey: what does not parse is 0; a negative value, which
            // usleep would take as huge, sleeps not at all here.
            let micros = hotkv_protocol::parse_i64(args.get(2)).unwrap_or(0).max(0) as u64;
            srv.aof.set_flush_sleep(micros);
            out.ok();
        }
        ("replicate", n) if n >= 3 => {
            // Straight into the write stream, as Valkey's DEBUG REPLICATE (tests feed
            // replicas and the AOF a command the primary never ran).
            if srv.ks.sink().active() {
                let mut e = hotkv_engine::Effects::default();
                e.begin(true);
                e.push_parts(sess.db, args.iter().skip(2));
                srv.ks.sink().append(&e);
            }
            out.ok();
        }
        ("set-disable-deny-scripts", 3) => {
            let on = hotkv_protocol::parse_i64(args.get(2)).unwrap_or(0) != 0;
            srv.script_runs.allow_noscript.store(on, Ordering::Relaxed);
            out.ok();
        }
        ("pause-cron", 3) => {
            let on = hotkv_protocol::parse_i64(args.get(2)).unwrap_or(0) != 0;
            srv.cron_paused.store(on, Ordering::Relaxed);
            out.ok();
        }
        ("replybuffer", 4) => {
            replybuffer(srv, &args)?;
            out.ok();
        }
        ("set-active-expire", 3) => {
            let on = hotkv_protocol::parse_i64(args.get(2)).unwrap_or(0) != 0;
            srv.active_expire.store(on, Ordering::Relaxed);
            out.ok();
        }
        ("object", 3 | 4) => {
            let fast = argc == 4 && args.get(3).eq_ignore_ascii_case(b"fast");
            let now = unix_ms();
            let engine = srv.engine.load();
            let knobs = list_knobs(srv);
            let line =
                with_entry(srv, sess.db, args.get(2), |e| object_line(e, fast, now, engine.lfu_decay_time, knobs))
                    .ok_or(CommandError::NoSuchKey)?;
            out.simple(&line);
        }
        ("populate", 3..=5) => {
            let count = super::int_arg(args.get(2), None)?;
            let count = u64::try_from(count).map_err(|_| CommandError::err("count must be positive"))?;
            let prefix = args.opt(3).unwrap_or(b"key");
            let size = match args.opt(4) {
                Some(a) => usize::try_from(super::int_arg(a, None)?)
                    .map_err(|_| CommandError::err("value size must be positive"))?,
                None => 0,
            };
            populate(srv, sess.db, count, prefix, size);
            out.ok();
        }
        ("change-repl-id", 2) => {
            tracing::info!("Changing replication IDs after receiving DEBUG change-repl-id");
            srv.repl.primary.change_replid();
            out.ok();
        }
        ("reload", _) => {
            for opt in args.iter().skip(2) {
                if ![&b"merge"[..], b"noflush", b"nosave"].iter().any(|o| opt.eq_ignore_ascii_case(o)) {
                    return Err(CommandError::err("DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options."));
                }
            }
            let has = |o: &[u8]| args.iter().skip(2).any(|a| a.eq_ignore_ascii_case(o));
            let (save, flush) = (!has(b"nosave"), !has(b"noflush") && !has(b"merge"));
            use crate::persistence::startup::FunctionsFromFile;
            let functions = match (flush, has(b"merge")) {
                (true, _) => FunctionsFromFile::Replace,
                (false, false) => FunctionsFromFile::Append,
                (false, true) => FunctionsFromFile::Merge,
            };
            // Inside EXEC the transaction's locks are held: the save's cut could never be taken.
            if sess.in_exec {
                return Err(CommandError::err("DEBUG RELOAD is not allowed inside a transaction"));
            }
            let Some(srv) = srv.arc() else { return Err(CommandError::err("server is not running")) };
            return Ok(Flow::Await(Box::pin(async move {
                match crate::persistence::debug_reload(&srv, save, flush, functions).await {
                    Ok(()) => b"+OK\r\n".to_vec(),
                    Err(e) => format!("-{e}\r\n").into_bytes(),
                }
            })));
        }
        ("loadaof", 2) => {
            if sess.in_exec {
                return Err(CommandError::err("DEBUG LOADAOF is not allowed inside a transaction"));
            }
            let Some(srv) = srv.arc() else { return Err(CommandError::err("server is not running")) };
            // The load runs off the worker threads; other clients get -LOADING meanwhile
            // (Valkey blocks them instead).
            return Ok(Flow::Await(Box::pin(async move {
                let loaded = tokio::task::spawn_blocking(move || crate::aof::wire::debug_loadaof(&srv)).await;
                match loaded {
                    Ok(Ok(())) => b"+OK\r\n".to_vec(),
                    Ok(Err(e)) => format!("-{e}\r\n").into_bytes(),
                    Err(_) => b"-ERR Error trying to load the AOF files, check server logs.\r\n".to_vec(),
                }
            })));
        }
        // hotkv only: proves a bug in one command costs only its connection (the boundary in
        // connection::serve), not the server as Valkey's DEBUG PANIC does.
        ("client-panic", 2) => panic!("DEBUG CLIENT-PANIC"),
        ("log", 3) => {
            tracing::warn!("DEBUG LOG: {}", text(args.get(2)));
            out.ok();
        }
        ("drop-cluster-packet-filter", 3) => {
            let kind = hotkv_protocol::parse_i64(args.get(2)).ok_or(CommandError::NotInteger)?;
            if let Some(c) = srv.cluster.as_ref() {
                c.bus.set_drop_filter(kind);
            }
            out.ok();
        }
        ("close-cluster-link-on-packet-drop", 3) => {
            // atoi semantics, as Valkey: what does not parse is 0.
            let on = hotkv_protocol::parse_i64(args.get(2)).unwrap_or(0) != 0;
            if let Some(c) = srv.cluster.as_ref() {
                c.bus.set_close_on_drop(on);
            }
            out.ok();
        }
        ("clusterlink", 5) if args.get(2).eq_ignore_ascii_case(b"kill") => cluster_link_kill(srv, &args, out)?,
        ("digest", 2) => out.simple(&hex(&dataset_digest(srv))),
        ("digest-value", _) => {
            out.array(argc - 2);
            for key in args.iter().skip(2) {
                let digest = with_entry(srv, sess.db, key, |e| {
                    let mut d = [0u8; 20];
                    entry_digest(e, &mut d);
                    d
                });
                out.simple(&hex(&digest.unwrap_or([0; 20])));
            }
        }
        _ => return Err(subcommand_syntax_error(&args)),
    }
    Ok(Flow::Continue)
}

/// DEBUG SLEEP: stops the whole server for `dur`, as Valkey's sleep in its one event loop
/// ([`crate::freeze`]), blocking this worker meanwhile (so the software watchdog sees a command
/// that runs long). A SIGALRM ends it early, as it interrupts Valkey's nanosleep.
///
/// Returns the stop, to be held until this client's reply is written (the connection drops
/// it then), so that no other client hears back before the sleeper.
fn sleep(srv: &Server, dur: Duration) -> Option<crate::freeze::Held> {
    if dur.is_zero() {
        return None;
    }
    let (held, _scoped) = match srv.arc() {
        Some(arc) => (Some(crate::freeze::Held::begin(arc)), None),
        None => (None, Some(srv.freeze.begin())),
    };
    if let Some(node) = &srv.cluster {
        node.bus.nudge();
    }
    tracing::debug!("DEBUG SLEEP: the server stops for {:.3} s", dur.as_secs_f64());
    let alarms = crate::crash::alarms();
    let end = std::time::Instant::now() + dur;
    let nap = || loop {
        let left = end.saturating_duration_since(std::time::Instant::now());
        if left.is_zero() || crate::crash::alarms() != alarms {
            return;
        }
        // nanosleep, not thread::sleep (which resumes after a signal): the SIGALRM handler
        // runs on this thread when it is the watchdog's or forwarded here.
        sleep_once(left);
    };
    // The tasks this worker has queued (the replica link a CLIENT KILL just before in the
    // same EXEC woke, say) move to another thread meanwhile: they must reach their gate (or
    // finish closing a killed link) rather than wait out the sleep behind it.
    let multi_thread = tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
    if multi_thread {
        tokio::task::block_in_place(nap);
    } else {
        nap();
    }
    held
}

#[allow(unsafe_code)]
fn sleep_once(d: Duration) {
    let ts = libc::timespec { tv_sec: d.as_secs() as libc::time_t, tv_nsec: d.subsec_nanos() as libc::c_long };
    // SAFETY: nanosleep reads the timespec; the remainder is not asked for.
    unsafe {
        libc::nanosleep(&ts, std::ptr::null_mut());
    }
}

/// DEBUG CLUSTERLINK KILL <to|from|all> <node-id>: closes bus links with a node, as Valkey's
/// `handleDebugClusterCommand`, with its error texts.
fn cluster_link_kill(srv: &Server, args: &Args<'_>, out: &mut ReplyBuf) -> Result<(), CommandError> {
    let Some(cluster) = srv.cluster.as_ref() else {
        return Err(CommandError::err("Debug option only available for cluster mode enabled setup!"));
    };
    let unknown = || CommandError::err(format!("Unknown node {}", text(args.get(4))));
    let node = hotkv_cluster::NodeId::parse(args.get(4)).ok_or_else(unknown)?;
    if cluster.state().node(&node).is_none() {
        return Err(unknown());
    }
    let (to, from) = match text(args.get(3)).to_ascii_lowercase().as_str() {
        "to" => (true, false),
        "from" => (false, true),
        "all" => (true, true),
        _ => return Err(CommandError::err(format!("Unknown direction {}", text(args.get(3))))),
    };
    cluster.bus.kill_links(&node, to, from);
    out.ok();
    Ok(())
}

/// The list settings DEBUG OBJECT reports for quicklists.
fn list_knobs(srv: &Server) -> ListKnobs {
    let settings = srv.settings.load();
    ListKnobs {
        fill: int_of(&settings, "list-max-listpack-size", -2),
        compress_depth: int_of(&settings, "list-compress-depth", 0),
    }
}

/// Runs `f` on the entry of `key` in `db` under its slot's lock, expired or not (DEBUG looks
/// at what is stored, as Valkey's `dbFind`).
fn with_entry<T>(srv: &Server, db: usize, key: &[u8], f: impl FnOnce(&Entry) -> T) -> Option<T> {
    let table = busy_lock(srv.ks.db(db).slot(key_slot(key)))?;
    let i = table.find(key, key_hash(key))?;
    Some(f(table.at(i)))
}

/// Locks a slot without risking a deadlock when DEBUG runs inside a transaction that already
/// holds it: tries for a moment, then treats the key as unavailable.
fn busy_lock(slot: &hotkv_engine::keyspace::Slot) -> Option<parking_lot::MutexGuard<'_, hotkv_engine::table::Table>> {
    for _ in 0..1000 {
        if let Some(g) = slot.try_lock() {
            return Some(g);
        }
        std::thread::yield_now();
    }
    None
}

/// Valkey's `computeDatasetDigest`: per database its id, then the XOR of every key/value
/// digest; all zeros for an empty dataset.
fn dataset_digest(srv: &Server) -> [u8; 20] {
    let mut total = [0u8; 20];
    for i in 0..srv.ks.databases() {
        let Some(db) = srv.ks.db_if_used(i) else { continue };
        if db.is_empty() {
            continue;
        }
        mix_digest(&mut total, &(i as u32).to_be_bytes());
        for slot in db.slots() {
            let Some(table) = busy_lock(slot) else { continue };
            for (_, e) in table.iter() {
                let mut d = [0u8; 20];
                mix_digest(&mut d, e.key());
                entry_digest(e, &mut d);
                xor_digest(&mut total, &d);
            }
        }
    }
    total
}

/// DEBUG REPLYBUFFER PEAK-RESET-TIME <NEVER|RESET|ms> and RESIZING <0|1>, as Valkey 8.0: a
/// RESIZING argument that is not a number is 0 (Valkey reads it with `atoi`).
fn replybuffer(srv: &Server, args: &Args<'_>) -> Result<(), CommandError> {
    let (what, value) = (args.get(2), args.get(3));
    let tuning = &srv.reply_buffers;
    if what.eq_ignore_ascii_case(b"peak-reset-time") {
        let ms = if value.eq_ignore_ascii_case(b"never") {
            -1
        } else if value.eq_ignore_ascii_case(b"reset") {
            crate::reply_buffer::DEFAULT_PEAK_RESET_MS
        } else {
            super::int_arg(value, None)?
        };
        tuning.peak_reset_ms.store(ms, Ordering::Relaxed);
    } else if what.eq_ignore_ascii_case(b"resizing") {
        let on = hotkv_protocol::parse_i64(value).unwrap_or(0) != 0;
        tuning.resizing.store(on, Ordering::Relaxed);
    } else {
        return Err(subcommand_syntax_error(args));
    }
    Ok(())
}

fn help(args: &Args<'_>, out: &mut ReplyBuf) {
    reply_help(
        out,
        args,
        &[
            "AOF-FLUSH-SLEEP <microsec>",
            "    Server will sleep before flushing the AOF, this is used for testing.",
            "ASSERT",
            "    Crash by assertion failed.",
            "CHANGE-REPL-ID",
            "    Change the replication IDs of the instance.",
            "    Dangerous: should be used only for testing the replication subsystem.",
            "CLIENT-PANIC",
            "    Panic while running this command: the connection closes, the server stays up.",
            "CLOSE-CLUSTER-LINK-ON-PACKET-DROP <0|1>",
            "    A cluster bus frame dropped by DROP-CLUSTER-PACKET-FILTER closes its link too.",
            "CLUSTERLINK KILL <to|from|all> <node-id>",
            "    Close the cluster bus links to, from, or both ways with a node.",
            "DIGEST",
            "    Output a hex signature representing the current DB content.",
            "DIGEST-VALUE <key> [<key> ...]",
            "    Output a hex signature of the values of all the specified keys.",
            "DROP-CLUSTER-PACKET-FILTER <type>",
            "    Drop received cluster bus frames of this type (-1: none, -2: all).",
            "POPULATE <count> [<prefix>] [<size>]",
            "    Create <count> string keys named key:<num>. If <prefix> is specified then",
            "    it is used instead of the 'key' prefix. These are not propagated to",
            "    replicas. Cluster slots are not respected so keys not belonging to the",
            "    current node can be created in cluster mode.",
            "LOADAOF",
            "    Flush the AOF buffers on disk and reload the AOF in memory.",
            "LOG <message>",
            "    Write <message> to the server log.",
            "OBJECT <key> [fast]",
            "    Show low level info about `key` and associated value.",
            "    Some fields of the default behavior may be time consuming to fetch,",
            "    and `fast` can be passed to avoid fetching them.",
            "RELOAD [option ...]",
            "    Save the RDB on disk and reload it back to memory. Valid <option> values:",
            "    * MERGE: conflicting keys will be loaded from RDB.",
            "    * NOFLUSH: the existing database will not be removed before load, but",
            "      conflicting keys will generate an exception and kill the server.",
            "    * NOSAVE: the database will be loaded from an existing RDB file.",
            "PAUSE-CRON <0|1>",
            "    Stop periodic cron job processing.",
            "REPLYBUFFER PEAK-RESET-TIME <NEVER||RESET|time>",
            "    Sets the time (in milliseconds) to wait between client reply buffer peak resets.",
            "    In case NEVER is provided the last observed peak will never be reset",
            "    In case RESET is provided the peak reset time will be restored to the default value",
            "REPLYBUFFER RESIZING <0|1>",
            "    Enable or disable the reply buffer resize cron job",
            "REPLICATE <command> [<arg> ...]",
            "    Propagate the given command to replicas and the AOF, without running it.",
            "SEGFAULT",
            "    Crash the server with sigsegv.",
            "SET-ACTIVE-EXPIRE <0|1>",
            "    Setting it to 0 disables expiring keys in background when they are not",
            "    accessed (otherwise the behavior). Setting it to 1 reenables back the",
            "    default.",
            "SET-DISABLE-DENY-SCRIPTS <0|1>",
            "    Setting it to 1 lets scripts call commands flagged noscript (tests only).",
            "SLEEP <seconds>",
            "    Stop the server for <seconds>. Decimals allowed.",
        ],
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};

    #[test]
    fn refused_by_default() {
        assert!(!debug_allowed("no", true));
        assert!(debug_allowed("local", true) && !debug_allowed("local", false));
        assert!(debug_allowed("yes", false));
        let srv = server();
        let mut c = client(&srv, 44000);
        if str_of(&srv.settings.load(), "enable-debug-command", "no") == "no" {
            assert!(c.run(&srv, &["debug", "sleep", "0"]).starts_with(
                "-ERR DEBUG command not allowed. If the enable-debug-command option is set to \"local\", you can run"
            ));
        }
    }

    /// Runs DEBUG past the permission check.
    fn debug(srv: &Server, c: &mut crate::cmd::testutil::TestClient, argv: &[&str]) -> String {
        let mut out = ReplyBuf::new();
        crate::cmd::testutil::with_args(argv, |args| match run(srv, &mut c.sess, args, &mut out) {
            Ok(_) => String::from_utf8_lossy(out.as_bytes()).into_owned(),
            Err(e) => format!("-{}\r\n", e.message()),
        })
    }

    #[test]
    fn populate_creates_missing_keys_only() {
        let srv = server();
        let mut c = client(&srv, 44003);
        c.run(&srv, &["set", "key:3", "mine"]);
        assert_eq!(debug(&srv, &mut c, &["debug", "populate", "10"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["dbsize"]), ":10\r\n");
        assert_eq!(c.run(&srv, &["get", "key:7"]), "$7\r\nvalue:7\r\n");
        assert_eq!(c.run(&srv, &["get", "key:3"]), "$4\r\nmine\r\n");
        assert_eq!(debug(&srv, &mut c, &["debug", "populate", "2", "p", "12"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["get", "p:1"]), "$12\r\nvalue:1\0\0\0\0\0\r\n");
        assert_eq!(debug(&srv, &mut c, &["debug", "populate", "1", "q", "3"]), "+OK\r\n");
        assert_eq!(c.run(&srv, &["get", "q:0"]), "$3\r\nval\r\n");
        assert_eq!(debug(&srv, &mut c, &["debug", "populate", "-1"]), "-ERR count must be positive\r\n");
    }

    #[test]
    fn subcommands() {
        let srv = server();
        let mut c = client(&srv, 44002);
        let start = std::time::Instant::now();
        assert_eq!(debug(&srv, &mut c, &["debug", "sleep", "0.05"]), "+OK\r\n");
        assert!(start.elapsed() >= Duration::from_millis(50));
        assert_eq!(debug(&srv, &mut c, &["debug", "sleep", "nonsense"]), "+OK\r\n");
        assert_eq!(debug(&srv, &mut c, &["debug", "set-active-expire", "0"]), "+OK\r\n");
        assert!(!srv.active_expire.load(Ordering::Relaxed));
        assert_eq!(debug(&srv, &mut c, &["debug", "set-active-expire", "1"]), "+OK\r\n");
        assert_eq!(debug(&srv, &mut c, &["debug", "pause-cron", "1"]), "+OK\r\n");
        assert!(srv.cron_paused.load(Ordering::Relaxed));
        assert_eq!(debug(&srv, &mut c, &["debug", "pause-cron", "0"]), "+OK\r\n");
        assert!(!srv.cron_paused.load(Ordering::Relaxed));
        assert!(srv.active_expire.load(Ordering::Relaxed));
        assert_eq!(debug(&srv, &mut c, &["debug", "object", "nokey"]), "-ERR no such key\r\n");
        c.run(&srv, &["set", "n", "12345"]);
        let r = debug(&srv, &mut c, &["debug", "object", "n", "fast"]);
        assert!(r.starts_with("+Value at:0x") && r.contains(" refcount:1 encoding:int lru:"), "{r}");
        assert!(!r.contains("serializedlength"), "{r}");
        let old = srv.repl.primary.replid();
        assert_eq!(debug(&srv, &mut c, &["debug", "change-repl-id"]), "+OK\r\n");
        assert_ne!(srv.repl.primary.replid(), old);
        // DEBUG RELOAD itself saves and loads a file: tests/integration/persistence.rs.
        assert_eq!(
            debug(&srv, &mut c, &["debug", "reload", "x"]),
            "-ERR DEBUG RELOAD only supports the MERGE, NOFLUSH and NOSAVE options.\r\n"
        );
        assert_eq!(debug(&srv, &mut c, &["debug", "log", "hello"]), "+OK\r\n");
        let d = debug(&srv, &mut c, &["debug", "digest"]);
        assert!(d.len() == 43 && d != format!("+{}\r\n", "0".repeat(40)), "{d}");
        let v = debug(&srv, &mut c, &["debug", "digest-value", "n", "nokey"]);
        assert!(v.starts_with("*2\r\n+") && v.ends_with(&format!("+{}\r\n", "0".repeat(40))), "{v}");
        assert_eq!(
            debug(&srv, &mut c, &["debug", "nosuch"]),
            "-ERR unknown subcommand or wrong number of arguments for 'nosuch'. Try DEBUG HELP.\r\n"
        );
        assert!(debug(&srv, &mut c, &["debug", "help"]).starts_with("*61\r\n+DEBUG <subcommand>"));
    }

    #[test]
    fn replybuffer_sets_the_peak_reset_time_and_resizing() {
        let srv = server();
        let mut c = client(&srv, 44002);
        let tuning = &srv.reply_buffers;
        let reset = || tuning.peak_reset_ms.load(Ordering::Relaxed);
        assert_eq!(debug(&srv, &mut c, &["debug", "replybuffer", "peak-reset-time", "100"]), "+OK\r\n");
        assert_eq!(reset(), 100);
        assert_eq!(debug(&srv, &mut c, &["debug", "replybuffer", "PEAK-RESET-TIME", "never"]), "+OK\r\n");
        assert_eq!(reset(), -1);
        assert_eq!(debug(&srv, &mut c, &["debug", "replybuffer", "peak-reset-time", "reset"]), "+OK\r\n");
        assert_eq!(reset(), crate::reply_buffer::DEFAULT_PEAK_RESET_MS);
        assert_eq!(
            debug(&srv, &mut c, &["debug", "replybuffer", "peak-reset-time", "soon"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(debug(&srv, &mut c, &["debug", "replybuffer", "resizing", "0"]), "+OK\r\n");
        assert!(!tuning.resizing.load(Ordering::Relaxed));
        assert_eq!(debug(&srv, &mut c, &["debug", "replybuffer", "resizing", "1"]), "+OK\r\n");
        assert!(tuning.resizing.load(Ordering::Relaxed));
        let err = "-ERR unknown subcommand or wrong number of arguments for 'replybuffer'. Try DEBUG HELP.\r\n";
        assert_eq!(debug(&srv, &mut c, &["debug", "replybuffer", "bogus", "1"]), err);
        assert_eq!(debug(&srv, &mut c, &["debug", "replybuffer", "resizing"]), err);
    }

    #[test]
    fn digests_follow_valkeys_mixing() {
        let srv = server();
        assert_eq!(hex(&dataset_digest(&srv)), "0".repeat(40));
        let mut c = client(&srv, 44001);
        c.run(&srv, &["set", "k", "v"]);
        let one = dataset_digest(&srv);
        c.run(&srv, &["set", "k2", "v"]);
        assert_ne!(dataset_digest(&srv), one);
        c.run(&srv, &["del", "k2"]);
        assert_eq!(dataset_digest(&srv), one);
        let knobs = list_knobs(&srv);
        let line = with_entry(&srv, 0, b"k", |e| object_line(e, false, unix_ms(), 1, knobs)).unwrap();
        assert!(
            line.starts_with("Value at:0x") && line.contains(" refcount:1 encoding:embstr serializedlength:2 lru:"),
            "{line}"
        );
        // Just written: idle for no whole second, or one when the clock's second turned
        // between the write and the look (a loaded machine saw 1); far less than ten.
        let idle = line
            .split(" lru_seconds_idle:")
            .nth(1)
            .and_then(|r| r.split(' ').next())
            .and_then(|n| n.parse::<u64>().ok());
        assert!(idle.is_some_and(|n| n < 10) && line.contains(" lfu_freq:"), "{line}");
    }

    /// DEBUG DIGEST-VALUE of one key, as the hex text.
    fn digest_of(srv: &Server, c: &mut crate::cmd::testutil::TestClient, key: &str) -> String {
        let r = debug(srv, c, &["debug", "digest-value", key]);
        r.trim_start_matches("*1\r\n+").trim_end().to_string()
    }

    /// The values below were read from redis-server 7.0.15, whose `xorObjectDigest` is
    /// Valkey's for these types (its scores here print the same under `%.17g` and fpconv).
    #[test]
    fn every_type_digests_as_the_reference_server() {
        let srv = server();
        let mut c = client(&srv, 44003);
        c.run(&srv, &["rpush", "l", "a", "b", "3", "-17"]);
        c.run(&srv, &["sadd", "s", "x", "y", "5"]);
        c.run(&srv, &["sadd", "si", "1", "2", "300"]);
        c.run(&srv, &["hset", "h", "f", "v", "n", "12"]);
        c.run(&srv, &["zadd", "z", "1", "a", "2.5", "b", "-3", "c"]);
        c.run(&srv, &["set", "str", "hello"]);
        c.run(&srv, &["set", "n", "12345"]);
        for (key, want) in [
            ("l", "5de2061c8bde4dec3dba7826415e6bba2f876011"),
            ("s", "9ab0175c08c7ea91e0aa7ce3701a4de6bb59341a"),
            ("si", "bff1310353f341fe4488c7323df3673679c04f02"),
            ("h", "76d7ce7d8cb69c65ddb54b94589fa9396351461b"),
            ("z", "2dd2ef669bd842b340aed0cb20be587954151e2b"),
            ("str", "36b23a1456b2dce2c3ed252c456761301dba8060"),
            ("n", "e1cf90774e995ae03de66e8109dc5cb9d9c2dc83"),
        ] {
            assert_eq!(digest_of(&srv, &mut c, key), want, "{key}");
        }
        c.run(&srv, &["expire", "h", "100"]);
        assert_eq!(digest_of(&srv, &mut c, "h"), "90523082508f76311ca3a06c1df566a279ff0798");
        // The same values in the big encodings digest the same: order never leaks in.
        for cfg in [
            "set-max-intset-entries",
            "set-max-listpack-entries",
            "hash-max-listpack-entries",
            "zset-max-listpack-entries",
        ] {
            c.run(&srv, &["config", "set", cfg, "0"]);
        }
        c.run(&srv, &["config", "set", "list-max-listpack-size", "1"]);
        for key in ["l", "s", "si", "z"] {
            let before = digest_of(&srv, &mut c, key);
            let r = debug(&srv, &mut c, &["debug", "digest-value", key]);
            c.run(&srv, &["copy", key, "tmp"]);
            c.run(&srv, &["del", key]);
            c.run(&srv, &["copy", "tmp", key]);
            c.run(&srv, &["del", "tmp"]);
            assert_eq!(digest_of(&srv, &mut c, key), before, "{key} after re-encoding ({r})");
        }
        c.run(&srv, &["del", "si", "n"]);
        assert_eq!(hex(&dataset_digest(&srv)), "f084058469b99c437580865f2d7c6155462df2a7");
        c.run(&srv, &["select", "3"]);
        c.run(&srv, &["sadd", "s3", "1", "2", "3"]);
        assert_eq!(hex(&dataset_digest(&srv)), "b7f370f4bd704c39b7bc9e0c3477fa61e919b703");
    }

    #[test]
    fn debug_object_names_every_encoding_and_quicklist_nodes() {
        let srv = server();
        let mut c = client(&srv, 44004);
        c.run(&srv, &["hset", "h", "f", "v"]);
        c.run(&srv, &["sadd", "si", "1"]);
        c.run(&srv, &["sadd", "sp", "x"]);
        c.run(&srv, &["zadd", "z", "1", "a"]);
        c.run(&srv, &["rpush", "l", "a"]);
        for (key, enc) in
            [("h", "listpack"), ("si", "intset"), ("sp", "listpack"), ("z", "listpack"), ("l", "listpack")]
        {
            let r = debug(&srv, &mut c, &["debug", "object", key]);
            assert!(r.contains(&format!(" encoding:{enc} serializedlength:")), "{key}: {r}");
            assert!(!r.contains("ql_nodes"), "{key}: {r}");
        }
        c.run(&srv, &["config", "set", "list-max-listpack-size", "2"]);
        c.run(&srv, &["rpush", "ql", "a", "b", "c", "d", "e"]);
        // redis-server 7.0.15 prints these fields for the same list and setting.
        let r = debug(&srv, &mut c, &["debug", "object", "ql"]);
        assert!(r.contains(" encoding:quicklist serializedlength:"), "{r}");
        assert!(
            r.ends_with(" ql_nodes:3 ql_avg_node:1.67 ql_listpack_max:2 ql_compressed:0 ql_uncompressed_size:36\r\n"),
            "{r}"
        );
        let r = debug(&srv, &mut c, &["debug", "object", "ql", "fast"]);
        assert!(r.ends_with(" ql_compressed:0\r\n") && !r.contains("serializedlength"), "{r}");
        for cfg in [
            "hash-max-listpack-entries",
            "set-max-intset-entries",
            "set-max-listpack-entries",
            "zset-max-listpack-entries",
        ] {
            c.run(&srv, &["config", "set", cfg, "0"]);
        }
        c.run(&srv, &["hset", "h", "g", "w"]);
        c.run(&srv, &["sadd", "si", "2"]);
        c.run(&srv, &["zadd", "z", "2", "b"]);
        for (key, enc) in [("h", "hashtable"), ("si", "hashtable"), ("z", "skiplist")] {
            let r = debug(&srv, &mut c, &["debug", "object", key]);
            assert!(r.contains(&format!(" encoding:{enc} ")), "{key}: {r}");
        }
    }
}
