//! The AOF wired into the server: loading at start, the fan-out write sink, the reply gate of
//! `appendfsync always`, MISCONF, BGREWRITEAOF and its cron, `CONFIG SET appendonly`, INFO,
//! and the final flush at shutdown. The pieces it drives are the sibling modules; this file
//! only decides when each runs (see `docs/persistence-aof.md`).

use std::fs::File;
use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwapOption;
use bytes::Bytes;
use hotkv_engine::snapshot::{Chunk, SnapshotError};
use hotkv_engine::{Effects, WriteSink};
use hotkv_protocol::{Args, ReplyBuf};
use parking_lot::Mutex;
use tracing::{info, warn};

use super::AofPaths;
use super::load::{self, LoadOptions, Outcome, RdbTarget};
use super::rewrite::{AofFiles, BaseWriter, RewriteStats, auto_rewrite_due};
use super::writer::{AofWriter, FsyncPolicy, WriterConfig};
use crate::config::Settings;
use crate::config::table as t;
use crate::dispatch::{Batch, Scratch, dispatch};
use crate::server::{Server, unix_ms};
use crate::session::{ClientInfo, Session, flag};
use crate::snapshot::{CutHook, StopHook, StreamEnd, StreamOptions, stream_rdb};

/// The node's AOF state. The writer is present while `appendonly yes` is in force (after the
/// first rewrite when turned on at runtime, as Valkey's `AOF_WAIT_REWRITE`).
#[derive(Default)]
pub struct Aof {
    /// Appends the write stream; `None` while the AOF is off. Set only through
    /// [`Aof::set_writer`], which keeps `has_writer` in step.
    writer: ArcSwapOption<AofWriter>,
    /// Whether `writer` is set: every write asks, and a relaxed load of a flag costs a tenth
    /// of an arc_swap load (which showed as 2.4% of a pipelined SET's CPU with no AOF).
    has_writer: AtomicBool,
    /// Serialises [`Aof::set_writer`].
    setting: Mutex<()>,
    /// The manifest and the directory, once the AOF was opened.
    files: Mutex<Option<AofFiles>>,
    /// Rewrite counters and the retry limiter.
    stats: Mutex<RewriteStats>,
    /// A rewrite thread runs.
    running: AtomicBool,
    /// `appendonly` as last applied (the writer may still be missing: waiting for the rewrite
    /// that turns it on).
    enabled: AtomicBool,
    /// On a replica: what its FACK reports (see [`replica_fsynced`]).
    fack: Mutex<Fack>,
    /// `appendonly yes` at runtime and no rewrite has succeeded since: until one does, the
    /// manifest may still list the files of an earlier AOF, so the cron tries again.
    needs_base: AtomicBool,
    /// Bumped when `appendonly` changes: a rewrite started under another value gives up
    /// (Valkey kills its child, `killAppendOnlyChild`), touching neither the writer nor the
    /// manifest. Changed with `files` locked, where the rewrite checks it before publishing.
    epoch: AtomicU64,
    /// `DEBUG AOF-FLUSH-SLEEP`, in microseconds: kept here, since the AOF may be off when it
    /// is set, and handed to every writer.
    flush_sleep: Arc<AtomicU64>,
}

/// A replica's map from its AOF stream to its primary's: `(AOF offset, replication offset)`
/// samples taken at each ACK, and the replication offset last known fsynced.
#[derive(Default)]
struct Fack {
    samples: std::collections::VecDeque<(u64, u64)>,
    fsynced: u64,
}

impl Aof {
    /// CONFIG RESETSTAT: `aof_rewrites`, `aof_rewrites_consecutive_failures` and
    /// `aof_delayed_fsync` start again from zero, as Valkey's `resetServerStats` has them.
    pub fn reset_stats(&self) {
        let mut st = self.stats.lock();
        st.rewrites = 0;
        st.consecutive_failures = 0;
        drop(st);
        if let Some(w) = self.writer() {
            w.reset_delayed_fsync();
        }
    }

    /// Installs or removes the writer, returning the previous one.
    fn set_writer(&self, w: Option<Arc<AofWriter>>) -> Option<Arc<AofWriter>> {
        // Flag first when installing, last when removing: a write that sees the flag set
        // and then finds no writer only skips (the flag is a hint, the load decides). The
        // lock keeps an install and a removal from interleaving their two steps.
        let _one_at_a_time = self.setting.lock();
        let on = w.is_some();
        if on {
            self.has_writer.store(true, Ordering::Release);
        }
        let old = self.writer.swap(w);
        if !on {
            self.has_writer.store(false, Ordering::Release);
        }
        old
    }

    /// The writer, while the AOF is on.
    pub fn writer(&self) -> Option<Arc<AofWriter>> {
        self.writer.load_full()
    }

    /// Called by a connection once before writing a batch's replies. Under `appendfsync
    /// always` it waits until everything appended so far is on disk, so no reply acknowledges
    /// a write a crash could lose; otherwise it writes the buffer to the file (not synced), so
    /// no reply acknowledges a write a crash of the process could lose. Reading the appended
    /// offset after the batch's calls can only ask for more than they wrote, never less.
    pub async fn wait_replies(&self) {
        // Every connection asks once per batch: a guard, not a clone of the writer's Arc,
        // so the common case (no AOF, or not `always`) bumps no shared count.
        if !self.has_writer.load(Ordering::Relaxed) {
            return;
        }
        let upto = {
            let w = self.writer.load();
            let Some(w) = w.as_ref() else { return };
            if !w.replies_wait() {
                w.write_through();
                return;
            }
            let upto = w.appended_offset();
            if w.released_offset() >= upto {
                return;
            }
            upto
        };
        if let Some(w) = self.writer.load_full() {
            w.wait_released(upto).await;
        }
    }

    /// `DEBUG AOF-FLUSH-SLEEP <microseconds>`: every later write of the AOF buffer sleeps
    /// this long first (0: never), as Valkey's `server.aof_flush_sleep`.
    pub fn set_flush_sleep(&self, micros: u64) {
        self.flush_sleep.store(micros, Ordering::Relaxed);
    }

    /// Whether replies wait for their writes to be on disk (`appendfsync always`).
    pub fn holds_replies(&self) -> bool {
        self.has_writer.load(Ordering::Relaxed) && self.writer.load().as_ref().is_some_and(|w| w.replies_wait())
    }

    /// The `-MISCONF` reply while the writer reports a write or fsync error (Valkey's
    /// `writeCommandsDeniedByDiskError`, `DISK_ERROR_TYPE_AOF`).
    pub fn misconf(&self) -> Option<String> {
        // Asked before every write command: no load of the writer while there is none.
        if !self.has_writer.load(Ordering::Relaxed) {
            return None;
        }
        let w = self.writer.load();
        w.as_ref().and_then(|w| w.write_error()).map(|e| format!("MISCONF {e}"))
    }
}

/// The keyspace's sink: replication's (muted on a replica), then the AOF writer, both while
/// the call's slot locks are held so both see calls in the same order. A replica's AOF gets
/// what its primary's stream applied, as Valkey's does.
pub fn fan_out(srv: &Server) -> Arc<dyn WriteSink> {
    Arc::new(FanOut { repl: srv.repl.sink(), aof: srv.aof.clone() })
}

struct FanOut {
    repl: crate::replication::Sink,
    aof: Arc<Aof>,
}

impl WriteSink for FanOut {
    fn active(&self) -> bool {
        !LOADING_HERE.get() && (self.repl.active() || self.aof.has_writer.load(Ordering::Relaxed))
    }

    fn append(&self, effects: &Effects) {
        if LOADING_HERE.get() {
            return;
        }
        // A script's redis.set_repl may have kept some commands from one of the two.
        use hotkv_engine::propagate::target;
        let for_repl = effects.only_for(target::REPLICAS);
        self.repl.append(for_repl.as_ref().unwrap_or(effects));
        // PUBLISH rides the stream for standalone replicas only: Valkey propagates it with
        // PROPAGATE_REPL, never to the AOF, so a load does not publish old messages again.
        if self.aof.has_writer.load(Ordering::Relaxed)
            && let Some(w) = self.aof.writer.load().as_ref()
            && !effects.iter().all(|(_, bytes)| bytes.starts_with(PUBLISH))
        {
            let for_aof = effects.only_for(target::AOF);
            WriteSink::append(&**w, for_aof.as_ref().unwrap_or(effects));
        }
    }

    fn append_resp(&self, db: usize, resp: &[u8]) {
        if LOADING_HERE.get() {
            return;
        }
        self.repl.append_resp(db, resp);
        if self.aof.has_writer.load(Ordering::Relaxed)
            && let Some(w) = self.aof.writer.load().as_ref()
            && !resp.starts_with(PUBLISH)
        {
            w.append_resp(db, resp);
        }
    }
}

thread_local! {
    /// Set while this thread replays AOF files: what it loads is already in the AOF, and
    /// replicas and the AOF must not get it again (Valkey propagates nothing while loading).
    /// Per thread, so a write another client runs meanwhile still reaches both.
    static LOADING_HERE: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Mutes the fan-out sink for the calls this thread makes until it is dropped.
struct MuteHere;

impl MuteHere {
    fn new() -> MuteHere {
        LOADING_HERE.set(true);
        MuteHere
    }
}

impl Drop for MuteHere {
    fn drop(&mut self) {
        LOADING_HERE.set(false);
    }
}

/// How the PUBLISH of the write stream starts (`pubsub::publish` writes it so).
const PUBLISH: &[u8] = b"*3\r\n$7\r\nPUBLISH\r\n";

/// Where the AOF of these settings lives.
pub fn paths(s: &Settings) -> AofPaths {
    AofPaths {
        dir: std::path::PathBuf::from(s.str(t::DIR)),
        dirname: s.str(t::APPENDDIRNAME).to_string(),
        filename: s.str(t::APPENDFILENAME).to_string(),
    }
}

/// Loads the dataset at start: with `appendonly yes` from the AOF (upgrading an old single
/// file first), otherwise from `dump.rdb`. With the AOF on but no AOF yet, loads `dump.rdb`
/// and makes the AOF's first base from it, as Valkey 7+ does. The error is what to print
/// before exiting; its log lines are written.
pub fn load_at_start(srv: &Arc<Server>) -> Result<(), String> {
    let s = srv.settings.load_full();
    if !s.bool(t::APPENDONLY) {
        return crate::persistence::startup::load_at_start(srv);
    }
    srv.aof.enabled.store(true, Ordering::Release);
    let paths = paths(&s);
    let fatal = |e: String| {
        warn!("{e}");
        warn!("Fatal error loading the DB, check server logs. Exiting.");
        e
    };
    let mut manifest =
        paths.read_manifest().map_err(|e| fatal(format!("{e} ({})", paths.manifest_path().display())))?;
    if load::needs_upgrade(&paths, &manifest) {
        load::upgrade_legacy(&paths, &mut manifest)
            .map_err(|e| fatal(format!("Failed to upgrade the old-style AOF {}: {e}", paths.filename)))?;
    }
    let start = Instant::now();
    let outcome = load_files(srv, &paths, &manifest);
    let fresh = match outcome {
        Ok(Outcome::NotExist) => {
            crate::persistence::startup::load_at_start(srv)?;
            true
        }
        Ok(Outcome::Empty) => {
            info!("DB loaded from append only file: {:.3} seconds", start.elapsed().as_secs_f64());
            false
        }
        Ok(Outcome::Loaded(stats)) => {
            if let Some(rdb) = &stats.rdb {
                srv.persist.set_last_load(rdb.loaded, rdb.expired);
                crate::script::install_functions(srv, &rdb.functions);
            }
            info!("DB loaded from append only file: {:.3} seconds", start.elapsed().as_secs_f64());
            false
        }
        Err(e) => return Err(fatal(e)),
    };
    if !fresh {
        // As after an RDB load: keys of slots this node does not serve (cluster mode).
        crate::persistence::startup::verify_cluster_slots(srv);
    }
    open_at_start(srv, &s, paths, manifest, fresh)
        .map_err(|e| fatal(format!("Can't open the append-only file at start: {e}")))
}

/// Runs the files through the dispatcher as Valkey's fake AOF client, with `loading` set
/// for everyone else.
fn load_files(srv: &Arc<Server>, paths: &AofPaths, manifest: &super::manifest::Manifest) -> Result<Outcome, String> {
    let s = srv.settings.load_full();
    let opts = LoadOptions {
        load_truncated: s.bool(t::AOF_LOAD_TRUNCATED),
        max_bulk_len: srv.rt.load().proto_max_bulk_len,
        databases: srv.ks.databases(),
    };
    let engine = srv.engine.load_full();
    let target = RdbTarget { ks: &srv.ks, cfg: &engine, now_ms: unix_ms() };
    let total: u64 = AofFiles::new(paths.clone(), manifest.clone()).sizes().1;
    let p = &srv.persist;
    *p.load.lock() =
        crate::persistence::LoadProgress { start_time: unix_ms() / 1000, total_bytes: total, loaded_bytes: 0 };
    p.set_loading(true);
    let mut client = FakeClient::new(srv);
    let muted = MuteHere::new();
    let result = load::load_all(paths, manifest, &opts, &target, |db, argv| client.run(db, argv));
    drop(muted);
    p.set_loading(false);
    result.map_err(|e| e.to_string())
}

/// DEBUG LOADAOF: writes out what the AOF writer holds, empties the keyspace and loads the
/// AOF files the manifest on disk lists (after deleting its history files), as Valkey's. The
/// load does not reach the AOF again nor the replicas. The error is the reply.
pub fn debug_loadaof(srv: &Arc<Server>) -> Result<(), &'static str> {
    const FAILED: &str = "ERR Error trying to load the AOF files, check server logs.";
    if let Some(w) = srv.aof.writer()
        && let Err(e) = w.flush_and_sync()
    {
        warn!("Fail to fsync the AOF file: {e}");
    }
    crate::persistence::flush_all(srv);
    let paths = paths(&srv.settings.load());
    let manifest = {
        let mut open = srv.aof.files.lock();
        let mut off = None;
        let files = match open.as_mut() {
            Some(f) => f,
            // `appendonly no`: the files of an earlier AOF load all the same, as in Valkey.
            None => off.insert(AofFiles::new(paths.clone(), Default::default())),
        };
        if let Err(e) = files.reload_manifest() {
            warn!("{e} ({})", paths.manifest_path().display());
            return Err(FAILED);
        }
        gc_history(srv.settings.load().bool(t::AOF_DISABLE_AUTO_GC), files);
        files.manifest().clone()
    };
    let start = Instant::now();
    match load_files(srv, &paths, &manifest) {
        Ok(Outcome::Loaded(stats)) => {
            if let Some(w) = srv.aof.writer() {
                w.set_sizes(stats.total_size, stats.base_size);
            }
        }
        Ok(Outcome::Empty) => {}
        // Valkey's AOF_NOT_EXIST: a manifest that lists nothing is an error here.
        Ok(Outcome::NotExist) => {
            warn!("The AOF manifest lists no file to load");
            return Err(FAILED);
        }
        Err(e) => {
            warn!("{e}");
            return Err(FAILED);
        }
    }
    info!("DB loaded from append only file: {:.3} seconds", start.elapsed().as_secs_f64());
    info!("Append Only File loaded by DEBUG LOADAOF");
    Ok(())
}

/// Deletes the history files the manifest lists unless `aof-disable-auto-gc` keeps them
/// (Valkey's `aofDelHistoryFiles`).
fn gc_history(disabled: bool, files: &mut AofFiles) {
    if disabled {
        return;
    }
    if let Err(e) = files.delete_history() {
        warn!("can't delete the AOF history files: {e}");
    }
}

/// Valkey's fake AOF client: a session with the MASTER flag (no routing, no pause, no
/// replica or memory checks, expired keys left for the primary's DEL) whose replies are
/// dropped; an unknown command is fatal.
struct FakeClient<'a> {
    srv: &'a Arc<Server>,
    sess: Session,
    scratch: Scratch,
    out: ReplyBuf,
}

impl<'a> FakeClient<'a> {
    fn new(srv: &'a Arc<Server>) -> FakeClient<'a> {
        let addr = std::net::SocketAddr::from(([0, 0, 0, 0], 0));
        let info = Arc::new(ClientInfo::new(srv.clients.next_id(), addr, addr, -1, unix_ms()));
        info.flags.fetch_or(flag::MASTER, Ordering::Relaxed);
        FakeClient { srv, sess: Session::new(info, true), scratch: Scratch::default(), out: ReplyBuf::new() }
    }

    fn run(&mut self, db: usize, argv: &[&[u8]]) -> Result<(), String> {
        let Some(name) = argv.first() else { return Ok(()) };
        if self.srv.registry.by_name(&String::from_utf8_lossy(name).to_ascii_lowercase()).is_none() {
            return Err(format!("Unknown command '{}'", String::from_utf8_lossy(name)));
        }
        let owned: Vec<Vec<u8>> = argv.iter().map(|a| a.to_vec()).collect();
        let (flat, spans) = crate::dispatch::flatten(&owned);
        let engine = self.srv.engine.load();
        let rt = self.srv.rt.load();
        let b = Batch { srv: self.srv, engine: &engine, rt: &rt, now_ms: unix_ms() };
        self.sess.db = db;
        self.out.truncate(0);
        let _ = dispatch(&b, &mut self.sess, Args::from_parts(&flat, &spans), &mut self.out, &mut self.scratch);
        self.out.truncate(0);
        Ok(())
    }
}

/// Valkey's `aofOpenIfNeededOnServerStart`: a base of the loaded data when there was no AOF
/// (`fresh`), the last incr file opened for appending, then the writer on it.
fn open_at_start(
    srv: &Arc<Server>,
    s: &Settings,
    paths: AofPaths,
    manifest: super::manifest::Manifest,
    fresh: bool,
) -> io::Result<()> {
    let mut files = AofFiles::new(paths, manifest);
    let (preamble, ts) = (s.bool(t::AOF_USE_RDB_PREAMBLE), s.bool(t::AOF_TIMESTAMP_ENABLED));
    // With no AOF yet (`fresh`) this writes the base from what was just loaded.
    let opened = files.open_on_start(preamble, ts, |base| fill_base(srv, base, None, None))?;
    debug_assert!(fresh || !files.manifest().is_empty());
    // History a crash or `aof-disable-auto-gc` left, as Valkey deletes at start.
    gc_history(s.bool(t::AOF_DISABLE_AUTO_GC), &mut files);
    let (base, current) = files.sizes();
    let writer = start_writer(s, &srv.aof, opened.file, opened.size, current, base)?;
    *srv.aof.files.lock() = Some(files);
    srv.aof.set_writer(Some(Arc::new(writer)));
    refresh_fsync_hold(srv);
    Ok(())
}

fn start_writer(s: &Settings, aof: &Aof, file: File, incr_size: u64, current: u64, base: u64) -> io::Result<AofWriter> {
    let policy = FsyncPolicy::parse(s.str(t::APPENDFSYNC)).unwrap_or(FsyncPolicy::Everysec);
    let cfg = WriterConfig {
        timestamps: s.bool(t::AOF_TIMESTAMP_ENABLED),
        incr_size,
        current_size: current,
        base_size: base,
        flush_sleep: aof.flush_sleep.clone(),
        ..WriterConfig::new(policy)
    };
    AofWriter::start(Arc::new(file), cfg)
}

/// Writes the keyspace into `base` from a snapshot: RDB bytes through `stream_rdb`, or the
/// commands of `write_table_commands` with `aof-use-rdb-preamble no`. `at_cut` runs at the
/// snapshot's cut. A snapshot another job holds is waited for, up to [`SNAPSHOT_WAIT`].
/// Once `stop` says so, the RDB form ends early with an error.
fn fill_base(srv: &Server, base: &mut BaseWriter, at_cut: Option<CutHook>, stop: Option<StopHook>) -> io::Result<()> {
    let stopped = || stop.as_ref().is_some_and(|h| (h.0)());
    let deadline = Instant::now() + SNAPSHOT_WAIT;
    let retry = || {
        std::thread::sleep(Duration::from_millis(20));
        Instant::now() < deadline && !stopped()
    };
    let settings = srv.settings.load();
    // `rdb-key-save-delay` slows rewrites too, as Valkey's (tests use it to catch one running).
    let key_delay = crate::persistence::file::key_save_delay(&settings);
    let incremental = settings.bool(t::AOF_REWRITE_INCREMENTAL_FSYNC);
    base.set_sync_every(if incremental { crate::persistence::file::INCREMENTAL_FSYNC_BYTES } else { 0 });
    // The preamble is an RDB file on disk: compressed and checksummed as `dump.rdb` is (it was
    // written uncompressed, 1.4x the size of dump.rdb for 1M small strings).
    let write = crate::persistence::file::file_write_options(&settings);
    drop(settings);
    if base.is_rdb() {
        let opts = StreamOptions { at_cut, key_delay, write, stop: stop.clone(), ..StreamOptions::default() };
        let mut error = None;
        let ship = |b: Bytes| {
            if stopped() {
                error.get_or_insert_with(|| io::Error::other(ABANDONED));
                return false;
            }
            match base.write(&b) {
                Ok(()) => true,
                Err(e) => {
                    error = Some(e);
                    false
                }
            }
        };
        return match stream_rdb(srv, &opts, retry, |_| {}, ship) {
            StreamEnd::Done { .. } => Ok(()),
            StreamEnd::Busy => Err(io::Error::other("the keyspace's snapshot stayed busy")),
            StreamEnd::Abandoned => Err(error.unwrap_or_else(|| io::Error::other("abandoned"))),
        };
    }
    let ready: Arc<Mutex<Vec<DbChunk>>> = Arc::default();
    let keys = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let snap = loop {
        let r = ready.clone();
        let sink = Box::new(move |c: Chunk| {
            if let Chunk::Data { db, bytes } = c {
                r.lock().push((db, bytes));
            }
        });
        let hook = at_cut.clone();
        let counted = keys.clone();
        let write = Box::new(move |db: usize, table: &hotkv_engine::table::Table, out: &mut Vec<u8>| {
            counted.fetch_add(table.len() as u64, Ordering::Relaxed);
            super::rewrite::write_table_commands(db, table, out);
        });
        let begun = srv.ks.begin_snapshot(write, sink, move || {
            if let Some(h) = hook {
                (h.0)();
            }
        });
        match begun {
            Ok(s) => break s,
            Err(SnapshotError::Busy) if retry() => {}
            Err(SnapshotError::Busy) => return Err(io::Error::other("the keyspace's snapshot stayed busy")),
        }
    };
    let mut error = None;
    let mut drain = |base: &mut BaseWriter| {
        for (db, bytes) in std::mem::take(&mut *ready.lock()) {
            if let Err(e) = base.write_commands(db, &bytes) {
                error.get_or_insert(e);
            }
        }
    };
    let mut paced = 0;
    srv.ks.drive_snapshot(&snap, || {
        drain(base);
        if !key_delay.is_zero() {
            let done = keys.load(Ordering::Relaxed);
            std::thread::sleep(key_delay * (done - paced).min(u64::from(u32::MAX)) as u32);
            paced = done;
        }
        true
    });
    drain(base);
    error.map_or(Ok(()), Err)
}

/// A replica's FACK (Valkey's `fsynced_reploff` on a replica): everything up to the stream's
/// `applied` was applied, so its commands are in the AOF up to the writer's appended offset
/// now; once the writer's durable offset passes a sample, that sample's replication offset
/// is fsynced. `None` without an AOF.
pub fn replica_fsynced(srv: &Server, applied: u64) -> Option<u64> {
    let w = srv.aof.writer()?;
    let mut f = srv.aof.fack.lock();
    // A new history (a full sync) may start lower: the old samples say nothing about it.
    if f.samples.back().is_some_and(|&(_, r)| r > applied) || f.fsynced > applied {
        *f = Fack::default();
    }
    if f.samples.back().is_none_or(|&(_, r)| r < applied) {
        f.samples.push_back((w.appended_offset(), applied));
        if f.samples.len() > FACK_SAMPLES {
            f.samples.pop_front();
        }
    }
    let durable = w.durable_offset();
    while let Some(&(a, r)) = f.samples.front() {
        if a > durable {
            break;
        }
        f.fsynced = r;
        f.samples.pop_front();
    }
    Some(f.fsynced)
}

/// After a replica's full sync: the snapshot was loaded straight into the keyspace, so the AOF
/// no longer describes the data set; a rewrite makes a base of it (Valkey's
/// `restartAOFAfterSYNC`). A rewrite already running is followed by another.
pub fn after_full_sync(srv: &Arc<Server>) {
    if srv.aof.writer().is_none() {
        return;
    }
    if srv.aof.running.load(Ordering::Acquire) || start_rewrite(srv).is_err() {
        srv.aof.stats.lock().schedule();
    }
}

/// What BGREWRITEAOF answers.
pub fn bgrewriteaof(srv: &Arc<Server>, in_exec: bool) -> Result<&'static str, String> {
    let aof = &srv.aof;
    if aof.running.load(Ordering::Acquire) {
        return Err("Background append only file rewriting already in progress".into());
    }
    // Valkey's "one child at a time": behind a running save, the rewrite waits for the cron;
    // so it does inside EXEC, whose slot locks the rewrite's cut would wait for.
    if srv.persist.in_progress() || in_exec {
        aof.stats.lock().schedule();
        return Ok("Background append only file rewriting scheduled");
    }
    start_rewrite(srv).map(|()| "Background append only file rewriting started")
}

/// Starts a rewrite on a thread of its own; with the AOF waiting to be turned on, the writer
/// starts at the cut on the new incr file. With the AOF off (a BGREWRITEAOF) no incr file is
/// opened, as Valkey's `openNewIncrAofForAppend` opens none then: the rewrite makes a base
/// and retires every incr file. Valkey's `rewriteAppendOnlyFileBackground`.
fn start_rewrite(srv: &Arc<Server>) -> Result<(), String> {
    let aof = &srv.aof;
    if aof.running.swap(true, Ordering::AcqRel) {
        return Err("Background append only file rewriting already in progress".into());
    }
    let (opened, epoch) = {
        let mut files = aof.files.lock();
        let epoch = aof.epoch.load(Ordering::Acquire);
        let files = files.get_or_insert_with(|| {
            let paths = paths(&srv.settings.load());
            let manifest = paths.read_manifest().unwrap_or_default();
            AofFiles::new(paths, manifest)
        });
        let opened = match aof.enabled.load(Ordering::Acquire) {
            true => files.start_rewrite().map(Some),
            false => files.start_base_only().map(|()| None),
        };
        (opened, epoch)
    };
    let opened = match opened {
        Ok(o) => o,
        Err(e) => {
            aof.running.store(false, Ordering::Release);
            aof.stats.lock().failed_to_start();
            let why = format!("Can't open the new incr AOF file for the rewrite: {e}");
            warn!("{why}");
            return Err(why);
        }
    };
    aof.stats.lock().started(unix_ms() as u64 / 1000);
    refresh_fsync_hold(srv);
    info!("Background append only file rewriting started");
    let s = srv.clone();
    let spawned = std::thread::Builder::new().name("hotkv-aof-rewrite".into()).spawn(move || {
        let result = rewrite(&s, opened.map(|o| (o.file, o.size)), epoch);
        let now = unix_ms() as u64 / 1000;
        match result {
            Ok(()) => {
                s.aof.needs_base.store(false, Ordering::Release);
                s.aof.stats.lock().finished(true, now);
            }
            // Given up for a change of `appendonly`: not a failure, as Valkey does not count
            // a child it killed with SIGUSR1.
            Err(_) if s.aof.epoch.load(Ordering::Acquire) != epoch => {
                info!("Background AOF rewrite stopped: appendonly changed while it ran");
                s.aof.stats.lock().abandoned(now);
            }
            Err(e) => {
                warn!("Background AOF rewrite failed: {e}");
                s.aof.stats.lock().finished(false, now);
            }
        }
        s.aof.running.store(false, Ordering::Release);
        refresh_fsync_hold(&s);
    });
    if let Err(e) = spawned {
        aof.running.store(false, Ordering::Release);
        aof.stats.lock().finished(false, unix_ms() as u64 / 1000);
        return Err(format!("Can't rewrite append only file in background: {e}"));
    }
    Ok(())
}

/// The rewrite itself: the new incr file takes over at the snapshot's cut (or the writer
/// starts on it, when the AOF is being turned on), the image becomes the new base, and the
/// manifest is published. Without an incr file (the AOF is off) only the base is made.
fn rewrite(srv: &Arc<Server>, incr: Option<(File, u64)>, epoch: u64) -> io::Result<()> {
    let (incr, incr_size) = match incr {
        Some((file, size)) => (Some(file), size),
        None => (None, 0),
    };
    let s = srv.settings.load_full();
    let (preamble, ts) = (s.bool(t::AOF_USE_RDB_PREAMBLE), s.bool(t::AOF_TIMESTAMP_ENABLED));
    let mut base = match srv.aof.files.lock().as_ref() {
        Some(f) => f.base_writer(preamble, ts)?,
        None => return Err(io::Error::other("the AOF is not open")),
    };
    let incr = Arc::new(Mutex::new(incr));
    let failed_start = Arc::new(Mutex::new(None::<io::Error>));
    let hook = {
        let (aof, incr, failed, s) = (srv.aof.clone(), incr.clone(), failed_start.clone(), s.clone());
        CutHook(Arc::new(move || {
            let Some(file) = incr.lock().take() else { return };
            if aof.epoch.load(Ordering::Acquire) != epoch {
                return;
            }
            match aof.writer.load_full() {
                Some(w) => w.begin_switch(Arc::new(file)),
                // Turning the AOF on: from this call on, every write goes to the new file.
                None if aof.enabled.load(Ordering::Acquire) => match start_writer(&s, &aof, file, incr_size, 0, 0) {
                    Ok(w) => {
                        // This rewrite runs: the hold applies from the first write.
                        w.set_fsync_held(s.bool(t::NO_APPENDFSYNC_ON_REWRITE));
                        aof.set_writer(Some(Arc::new(w)));
                    }
                    Err(e) => *failed.lock() = Some(e),
                },
                None => {}
            }
        }))
    };
    let stopped = || srv.aof.epoch.load(Ordering::Acquire) != epoch;
    let stop = {
        let aof = srv.aof.clone();
        StopHook(Arc::new(move || aof.epoch.load(Ordering::Acquire) != epoch))
    };
    let filled = fill_base(srv, &mut base, Some(hook), Some(stop));
    let done = match base.finish() {
        Ok(d) => d,
        Err(e) => return Err(filled.err().unwrap_or(e)),
    };
    let mut files = srv.aof.files.lock();
    let Some(files) = files.as_mut().filter(|_| !stopped()) else {
        // `appendonly` changed while the base was written.
        let _ = std::fs::remove_file(&done.path);
        return Err(io::Error::other(ABANDONED));
    };
    if let Some(e) = failed_start.lock().take() {
        files.abort_rewrite(&done.path);
        return Err(e);
    }
    if let Err(e) = filled {
        files.abort_rewrite(&done.path);
        return Err(e);
    }
    // The incr file being written stays; with the AOF off every incr file is history
    // (Valkey's markRewrittenIncrAofAsHistory keeps the last one only while aof_fd is open).
    let writer = srv.aof.writer.load_full();
    let keep_incr = usize::from(writer.is_some());
    let published = files.finish_rewrite(done, keep_incr, !s.bool(t::AOF_DISABLE_AUTO_GC))?;
    if let Some(w) = writer {
        w.set_sizes(published.base_size + w.incr_size(), published.base_size);
    }
    Ok(())
}

/// The AOF's part of the once-a-second cron: a scheduled rewrite once nothing else runs, and
/// the automatic rewrite (`auto-aof-rewrite-percentage`, `auto-aof-rewrite-min-size`).
pub fn cron(srv: &Arc<Server>) {
    refresh_fsync_hold(srv);
    let aof = &srv.aof;
    if aof.running.load(Ordering::Acquire) || srv.persist.in_progress() || srv.is_shutting_down() {
        return;
    }
    if srv.persist.loading() {
        return;
    }
    // A scheduled BGREWRITEAOF runs with the AOF off too (it makes a base), as Valkey's cron
    // starts any scheduled rewrite.
    if aof.stats.lock().scheduled {
        let _ = start_rewrite(srv);
        return;
    }
    if !aof.enabled.load(Ordering::Acquire) {
        return;
    }
    if aof.needs_base.load(Ordering::Acquire) {
        if !aof.stats.lock().limited(unix_ms() as u64 / 1000) {
            let _ = start_rewrite(srv);
        }
        return;
    }
    let Some(w) = aof.writer() else { return };
    let s = srv.settings.load();
    let (pct, min) = (s.int(t::AUTO_AOF_REWRITE_PERCENTAGE).max(0) as u64, s.int(t::AUTO_AOF_REWRITE_MIN_SIZE).max(0));
    let st = w.stats();
    let Some(growth) = auto_rewrite_due(st.current_size, st.base_size, pct, min as u64) else { return };
    if aof.stats.lock().limited(unix_ms() as u64 / 1000) {
        return;
    }
    info!("Starting automatic rewriting of AOF on {growth}% growth");
    let _ = start_rewrite(srv);
}

thread_local! {
    /// The CONFIG SET running on this thread was queued in a transaction.
    static IN_EXEC: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Marks, for its life, that the CONFIG SET on this thread runs inside EXEC: `appendonly
/// yes` then schedules its rewrite, whose cut would wait for the transaction's own locks
/// (Valkey schedules it too, with its own log line).
pub struct ExecMark(bool);

impl ExecMark {
    /// Marks the thread (`in_exec`) until the mark is dropped.
    pub fn new(in_exec: bool) -> ExecMark {
        ExecMark(IN_EXEC.replace(in_exec))
    }
}

impl Drop for ExecMark {
    fn drop(&mut self) {
        IN_EXEC.set(self.0);
    }
}

/// The `Hook::Aof` of CONFIG SET: `appendfsync` and `aof-timestamp-enabled` live, and
/// `appendonly` on (a rewrite whose cut starts the writer) or off (flush, sync, stop).
pub fn apply_config(srv: &Server, new: &Settings) -> Result<(), String> {
    let aof = &srv.aof;
    if let Some(w) = aof.writer() {
        w.set_policy(FsyncPolicy::parse(new.str(t::APPENDFSYNC)).unwrap_or(FsyncPolicy::Everysec));
        w.set_timestamps(new.bool(t::AOF_TIMESTAMP_ENABLED));
    }
    hold_fsync(srv, new.bool(t::NO_APPENDFSYNC_ON_REWRITE));
    // `aof-disable-auto-gc no` deletes the history kept meanwhile (`updateAofAutoGCEnabled`).
    if let Some(files) = aof.files.lock().as_mut() {
        gc_history(new.bool(t::AOF_DISABLE_AUTO_GC), files);
    }
    let want = new.bool(t::APPENDONLY);
    if want == aof.enabled.load(Ordering::Acquire) {
        return Ok(());
    }
    if !want {
        stop(srv);
        return Ok(());
    }
    let Some(arc) = srv.arc() else { return Err("server is not running".into()) };
    // Valkey's startAppendOnly: the AOF exists once a rewrite made its base.
    let running = {
        let mut files = aof.files.lock();
        let running = aof.running.load(Ordering::Acquire);
        if running {
            // A rewrite that started earlier (BGREWRITEAOF, or an `appendonly yes` undone
            // since) does not accumulate what the new AOF needs: Valkey kills it and starts
            // another. Ours cannot be cut short, so it gives up and the cron starts the new
            // one once it is gone.
            aof.epoch.fetch_add(1, Ordering::AcqRel);
        }
        *files = None;
        running
    };
    aof.enabled.store(true, Ordering::Release);
    aof.needs_base.store(true, Ordering::Release);
    if running {
        info!(
            "AOF was enabled but there is already an AOF rewriting in background. Stopping background AOF and \
             starting a rewrite now."
        );
        aof.stats.lock().schedule();
        return Ok(());
    }
    // Valkey's startAppendOnly: the rewrite waits for the cron behind another background
    // job, or after the transaction that asked for it.
    if srv.persist.in_progress() {
        info!(
            "AOF was enabled but there is already another background operation. An AOF background was scheduled \
             to start when possible."
        );
        aof.stats.lock().schedule();
        return Ok(());
    }
    if IN_EXEC.get() {
        info!("AOF was enabled during a transaction. An AOF background was scheduled to start when possible.");
        aof.stats.lock().schedule();
        return Ok(());
    }
    if let Err(e) = start_rewrite(&arc) {
        aof.enabled.store(false, Ordering::Release);
        aof.needs_base.store(false, Ordering::Release);
        return Err(e);
    }
    Ok(())
}

/// `appendonly no`: Valkey's `stopAppendOnly` (flush, fsync, close).
fn stop(srv: &Server) {
    let aof = &srv.aof;
    aof.enabled.store(false, Ordering::Release);
    aof.needs_base.store(false, Ordering::Release);
    if let Some(w) = aof.set_writer(None)
        && let Err(e) = w.flush_and_sync()
    {
        warn!("Fail to fsync the AOF file: {e}");
    }
    {
        let mut stats = aof.stats.lock();
        if stats.scheduled {
            stats.scheduled = false;
            info!("AOF was disabled but there is a scheduled AOF background, cancel it.");
        }
    }
    // A running rewrite gives up, as Valkey's killAppendOnlyChild ends it.
    let mut files = aof.files.lock();
    aof.epoch.fetch_add(1, Ordering::AcqRel);
    *files = None;
}

/// What a rewrite running now means to a shutdown: `None` when none runs, `Some(true)` when it
/// writes the first base after `appendonly yes` at runtime (Valkey's `AOF_WAIT_REWRITE`: until
/// it is done the data set is in no AOF, so a shutdown refuses to exit without FORCE).
pub fn rewrite_in_progress(srv: &Server) -> Option<bool> {
    let aof = &srv.aof;
    aof.running.load(Ordering::Acquire).then(|| aof.needs_base.load(Ordering::Acquire))
}

/// `no-appendfsync-on-rewrite`: holds the writer's fsyncs back while a rewrite, a save or a
/// replica's full-sync snapshot runs (Valkey's "no fsync while a child does I/O": any child,
/// the replication one included). Called where any of them starts or ends, on CONFIG SET, and
/// by the cron as a safety net.
pub fn refresh_fsync_hold(srv: &Server) {
    hold_fsync(srv, srv.settings.load().bool(t::NO_APPENDFSYNC_ON_REWRITE));
}

fn hold_fsync(srv: &Server, no_fsync_on_rewrite: bool) {
    let Some(w) = srv.aof.writer() else { return };
    let busy =
        srv.aof.running.load(Ordering::Acquire) || srv.persist.in_progress() || srv.persist.sync_snapshot_running();
    w.set_fsync_held(no_fsync_on_rewrite && busy);
}

/// At shutdown: writes and syncs everything appended (Valkey's `prepareForShutdown`).
pub fn shutdown(srv: &Server) {
    if let Some(w) = srv.aof.writer() {
        info!("Calling fsync() on the AOF file.");
        if let Err(e) = w.flush_and_sync() {
            warn!("Fail to fsync the AOF file: {e}");
        }
    }
}

/// INFO persistence's AOF lines before `module_fork_in_progress`.
pub fn info_head(srv: &Server, out: &mut String) {
    gather(srv).render_head(out);
}

/// INFO persistence's AOF lines after `module_fork_last_cow_size` (only with the AOF on).
pub fn info_tail(srv: &Server, out: &mut String) {
    gather(srv).render_tail(out);
}

fn gather(srv: &Server) -> super::info::AofInfo {
    let w = srv.aof.writer().map(|w| w.stats());
    let enabled = srv.aof.enabled.load(Ordering::Acquire);
    super::info::AofInfo::gather(enabled, w.as_ref(), &srv.aof.stats.lock(), unix_ms() as u64 / 1000)
}

/// WAITAOF numlocal numreplicas timeout: waits until this node's AOF is synced past what it
/// held at the call (numlocal) and `numreplicas` replicas acknowledged an fsync past the
/// replication offset (their `REPLCONF ACK <off> FACK <aofoff>`); replies `[local, replicas]`.
pub async fn waitaof(
    srv: Arc<Server>,
    targets: WaitTargets,
    numlocal: u64,
    numreplicas: usize,
    timeout: Option<Duration>,
) -> Vec<u8> {
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    loop {
        let (local, replicas) = targets.reached(&srv);
        let done = local >= numlocal && replicas >= numreplicas;
        if done || deadline.is_some_and(|d| tokio::time::Instant::now() >= d) || srv.is_shutting_down() {
            let mut reply = ReplyBuf::new();
            reply.array(2);
            reply.int(local as i64);
            reply.int(replicas as i64);
            return reply.as_bytes().to_vec();
        }
        tokio::time::sleep(WAITAOF_POLL).await;
    }
}

/// The offsets a WAITAOF waits for: this node's AOF stream and the replication stream, as
/// they were when it was called.
#[derive(Debug, Clone, Copy)]
pub struct WaitTargets {
    local: Option<u64>,
    repl: u64,
}

impl WaitTargets {
    /// The offsets now.
    pub fn now(srv: &Server) -> WaitTargets {
        WaitTargets { local: srv.aof.writer().map(|w| w.appended_offset()), repl: srv.repl.primary.offset() }
    }

    /// `(1 if this node's AOF is synced past its target else 0, replicas that fsynced past
    /// theirs)`.
    pub fn reached(&self, srv: &Server) -> (u64, usize) {
        let local = match (self.local, srv.aof.writer()) {
            (Some(t), Some(w)) => u64::from(w.durable_offset() >= t),
            _ => 0,
        };
        (local, srv.repl.primary.count_aof_acked(self.repl))
    }
}

/// Commands of one database, as a command-form base is written.
type DbChunk = (usize, Vec<u8>);

/// How long a rewrite waits for a snapshot another job (a save, a full sync) holds.
const SNAPSHOT_WAIT: Duration = Duration::from_secs(60);
/// Why a rewrite gave up: `appendonly` changed while it ran.
const ABANDONED: &str = "appendonly changed while the AOF was rewritten";
/// Samples a replica keeps for its FACK (one per ACK, a second apart).
const FACK_SAMPLES: usize = 64;
/// How often WAITAOF looks again at the offsets.
const WAITAOF_POLL: Duration = Duration::from_millis(5);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;
    use crate::registry::Registry;

    /// A server whose AOF writer (`appendfsync always`) appends to a file in a fresh temp dir.
    fn server_with_writer(tag: &str) -> (Arc<Server>, std::path::PathBuf) {
        let dir = crate::aof::manifest::tests::tempdir(tag);
        let mut s = crate::default_settings();
        s.set(t::DIR, Value::Str(dir.display().to_string()));
        s.set(t::APPENDFSYNC, Value::Str("always".into()));
        let file = File::create(dir.join("incr.aof")).unwrap();
        let srv = Server::new(s.clone(), None, Registry::new(crate::cmd::commands())).into_arc();
        let writer = start_writer(&s, &srv.aof, file, 0, 0, 0).unwrap();
        srv.aof.set_writer(Some(Arc::new(writer)));
        (srv, dir)
    }

    fn effects(argv: &[&[u8]]) -> Effects {
        let mut e = Effects::default();
        e.begin(true);
        e.push(0, argv);
        e
    }

    fn wait_synced(srv: &Server) {
        let w = srv.aof.writer().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while w.durable_offset() < w.appended_offset() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert!(w.durable_offset() >= w.appended_offset(), "the writer never synced");
    }

    #[test]
    fn the_fan_out_feeds_the_writer_but_not_with_publish() {
        let (srv, dir) = server_with_writer("wire-fanout");
        let sink = fan_out(&srv);
        assert!(sink.active(), "the AOF alone makes the stream active");
        let w = srv.aof.writer().unwrap();
        sink.append(&effects(&[b"SET", b"k", b"v"]));
        let after_set = w.appended_offset();
        assert!(after_set > 0);
        sink.append(&effects(&[b"PUBLISH", b"ch", b"msg"]));
        assert_eq!(w.appended_offset(), after_set, "PUBLISH stays out of the AOF");
        wait_synced(&srv);
        let text = std::fs::read(dir.join("incr.aof")).unwrap();
        assert_eq!(text, b"*2\r\n$6\r\nSELECT\r\n$1\r\n0\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_thread_replaying_the_aof_feeds_neither_the_writer_nor_replicas() {
        let (srv, dir) = server_with_writer("wire-mute");
        let sink = fan_out(&srv);
        let w = srv.aof.writer().unwrap();
        let muted = MuteHere::new();
        assert!(!sink.active(), "calls skip recording while muted");
        sink.append(&effects(&[b"SET", b"k", b"v"]));
        assert_eq!(w.appended_offset(), 0);
        // Another thread (another client) is not muted.
        std::thread::scope(|s| {
            s.spawn(|| sink.append(&effects(&[b"SET", b"other", b"v"])));
        });
        let other = w.appended_offset();
        assert!(other > 0);
        drop(muted);
        assert!(sink.active());
        sink.append(&effects(&[b"SET", b"k", b"v"]));
        assert!(w.appended_offset() > other);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_replicas_fack_is_the_replication_offset_its_aof_synced() {
        let (srv, dir) = server_with_writer("wire-fack");
        let sink = fan_out(&srv);
        sink.append(&effects(&[b"SET", b"k", b"v"]));
        // Sampled now; synced only later.
        let first = replica_fsynced(&srv, 500).unwrap();
        assert!(first == 0 || first == 500);
        wait_synced(&srv);
        assert_eq!(replica_fsynced(&srv, 500), Some(500));
        // A new history that starts lower (a full sync) starts the map again.
        sink.append(&effects(&[b"SET", b"k", b"w"]));
        wait_synced(&srv);
        let _ = replica_fsynced(&srv, 40);
        assert_eq!(replica_fsynced(&srv, 40), Some(40));
        // Without an AOF: no FACK.
        srv.aof.set_writer(None);
        assert_eq!(replica_fsynced(&srv, 40), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
