//! Appending the write stream to the current incr file, with `appendfsync always|everysec|no`.
//!
//! [`AofWriter::append`] runs with a call's slot locks held, so it only copies the call's
//! commands (with `SELECT` and `#TS:` annotations as Valkey's `feedAppendOnlyFile` adds them)
//! into a buffer under a short lock. Per policy:
//!
//! - `always`: the call wakes the flusher thread, which takes whatever accumulated, writes it
//!   and `fdatasync`s before publishing the new durable offset, so a connection that waits
//!   for [`AofWriter::wait_durable`] before replying never acknowledges a write a crash could
//!   lose. Writes of many connections share one write and one sync (group commit).
//! - `everysec`: each connection writes the buffer itself before sending a batch's replies
//!   ([`AofWriter::write_through`], Valkey's write in `beforeSleep`); the flusher, waking
//!   every tick, writes what no connection did and hands an fsync to the background fsync
//!   thread once a second (Valkey's bio job). Writing is postponed for up to two seconds
//!   while a background fsync still runs, counting `aof_delayed_fsync` when the flusher gives
//!   up waiting, as Valkey does.
//! - `no`: written as under `everysec`; the kernel flushes when it likes, and the durable
//!   offset stays put.
//!
//! While [`AofWriter::set_fsync_held`] says so (`no-appendfsync-on-rewrite yes` and a rewrite
//! or a save runs, Valkey's `aof_no_fsync_on_rewrite && hasActiveChildProcess()`), the flusher
//! writes but does not fsync: under `always` replies are released once the data is written,
//! and the durable offset (WAITAOF) waits for the first fsync after the hold.
//!
//! Write errors follow Valkey's `flushAppendOnlyFile`: a short write is undone with
//! `ftruncate` when possible, the data stays buffered and is retried, the state shows in
//! `aof_last_write_status:err`, and [`AofWriter::write_error`] gives the `-MISCONF` text the
//! server answers writes with until a write succeeds again. Under `always` a failed write or
//! fsync cannot be recovered (replies may already be out) and ends the process through the
//! fatal hook, as Valkey exits.
//!
//! The buffer is bounded: past `max_buffer` bytes not yet written, the writer reports an error
//! too, so the server refuses new writes until the disk catches up instead of growing without
//! limit.

use std::fs::File;
use std::io::{self, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use hotkv_engine::propagate::{Effects, WriteSink, write_select};
use parking_lot::{Condvar, Mutex};
use tokio::sync::watch;

/// `appendfsync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FsyncPolicy {
    /// Sync before acknowledging.
    Always,
    /// Sync once a second in the background.
    Everysec,
    /// Leave syncing to the kernel.
    No,
}

impl FsyncPolicy {
    /// Parses the directive's value (`always`, `everysec`, `no`).
    pub fn parse(s: &str) -> Option<FsyncPolicy> {
        match s.to_ascii_lowercase().as_str() {
            "always" => Some(FsyncPolicy::Always),
            "everysec" => Some(FsyncPolicy::Everysec),
            "no" => Some(FsyncPolicy::No),
            _ => None,
        }
    }

    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(c: u8) -> FsyncPolicy {
        match c {
            0 => FsyncPolicy::Always,
            1 => FsyncPolicy::Everysec,
            _ => FsyncPolicy::No,
        }
    }
}

/// The file the writer appends to. [`File`] is the real one; tests put failing ones in.
pub trait IncrFile: Send + Sync {
    /// Writes some of `buf`, as `write(2)`.
    fn write(&self, buf: &[u8]) -> io::Result<usize>;
    /// `fdatasync`.
    fn sync(&self) -> io::Result<()>;
    /// `ftruncate`: undoes a short write.
    fn truncate(&self, len: u64) -> io::Result<()>;
}

impl IncrFile for File {
    fn write(&self, buf: &[u8]) -> io::Result<usize> {
        (&mut &*self).write(buf)
    }
    fn sync(&self) -> io::Result<()> {
        self.sync_data()
    }
    fn truncate(&self, len: u64) -> io::Result<()> {
        self.set_len(len)
    }
}

/// How the writer starts.
#[derive(Clone)]
pub struct WriterConfig {
    /// `appendfsync`.
    pub fsync: FsyncPolicy,
    /// `aof-timestamp-enabled`.
    pub timestamps: bool,
    /// Bytes buffered and not yet written past which writes are refused.
    pub max_buffer: usize,
    /// Size of the incr file when opened (appends go after it).
    pub incr_size: u64,
    /// `aof_current_size` at start: base plus incr files, as the load found them.
    pub current_size: u64,
    /// `aof_base_size` at start.
    pub base_size: u64,
    /// Unix seconds, for `#TS:` annotations (a parameter so tests control it).
    pub clock: fn() -> u64,
    /// Called, after logging, when a write or fsync fails under `always`: Valkey exits.
    pub on_fatal: Arc<dyn Fn() + Send + Sync>,
    /// Microseconds to sleep before each write of buffered bytes (`DEBUG AOF-FLUSH-SLEEP`, a
    /// test lever). Shared, so the node's setting reaches every writer it starts.
    pub flush_sleep: Arc<AtomicU64>,
}

impl WriterConfig {
    /// The defaults for `policy`: no timestamps, a 256 MiB buffer bound, the system clock,
    /// and `exit(1)` on a fatal error.
    pub fn new(fsync: FsyncPolicy) -> WriterConfig {
        WriterConfig {
            fsync,
            timestamps: false,
            max_buffer: 256 << 20,
            incr_size: 0,
            current_size: 0,
            base_size: 0,
            clock: unix_secs,
            on_fatal: Arc::new(|| std::process::exit(1)),
            flush_sleep: Arc::new(AtomicU64::new(0)),
        }
    }
}

/// Appends the write stream to the AOF; see the module docs. Dropping it flushes what is
/// buffered and stops its threads.
pub struct AofWriter {
    inner: Arc<Inner>,
    threads: Vec<JoinHandle<()>>,
}

/// The writer's state as INFO persistence shows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriterStats {
    /// `aof_last_write_status` (and the fsync thread's status) is ok.
    pub write_ok: bool,
    /// `aof_current_size`.
    pub current_size: u64,
    /// `aof_base_size`.
    pub base_size: u64,
    /// `aof_buffer_length`: bytes appended and not yet written.
    pub buffer_length: u64,
    /// `aof_pending_bio_fsync`.
    pub pending_bio_fsync: u64,
    /// `aof_delayed_fsync`.
    pub delayed_fsync: u64,
}

impl AofWriter {
    /// Starts appending to `file` (the current incr file, opened for append).
    pub fn start(file: Arc<dyn IncrFile>, cfg: WriterConfig) -> io::Result<AofWriter> {
        let (durable_tx, _) = watch::channel(0u64);
        let (released_tx, _) = watch::channel(0u64);
        let (bio_tx, bio_rx) = mpsc::channel::<FsyncJob>();
        let inner = Arc::new(Inner {
            pending: Mutex::new(Pending { buf: Vec::new(), seldb: None, last_ts: 0 }),
            wake: Condvar::new(),
            file: Mutex::new(Current { file, incr_size: cfg.incr_size, last_fsync: Instant::now() }),
            policy: AtomicU8::new(cfg.fsync.code()),
            timestamps: AtomicBool::new(cfg.timestamps),
            max_buffer: cfg.max_buffer,
            clock: cfg.clock,
            on_fatal: cfg.on_fatal,
            flush_sleep: cfg.flush_sleep,
            appended: AtomicU64::new(0),
            written: AtomicU64::new(0),
            durable: durable_tx,
            released: released_tx,
            hold_fsync: AtomicBool::new(false),
            carry_len: AtomicUsize::new(0),
            pending_len: AtomicUsize::new(0),
            write_errno: AtomicI32::new(0),
            fsync_errno: AtomicI32::new(0),
            over_limit: AtomicBool::new(false),
            delayed_fsync: AtomicU64::new(0),
            bio_pending: AtomicU64::new(0),
            current_size: AtomicU64::new(cfg.current_size),
            base_size: AtomicU64::new(cfg.base_size),
            stop: AtomicBool::new(false),
            bio: Mutex::new(Some(bio_tx)),
            carry: Mutex::new(Vec::new()),
            switch: Mutex::new(None),
        });
        let flusher = {
            let inner = inner.clone();
            std::thread::Builder::new().name("aof-flush".into()).spawn(move || inner.flush_loop())?
        };
        let bio = {
            let inner = inner.clone();
            std::thread::Builder::new().name("aof-fsync".into()).spawn(move || inner.fsync_loop(bio_rx))?
        };
        Ok(AofWriter { inner, threads: vec![flusher, bio] })
    }

    /// Appends one call's commands; returns the stream offset just past them. Called with
    /// the call's slot locks held: copies under a short lock and never touches the disk.
    pub fn append(&self, effects: &Effects) -> u64 {
        self.append_cmds(effects.iter())
    }

    /// [`AofWriter::append`] of commands given as (database, RESP bytes).
    #[inline]
    fn append_cmds<'c>(&self, cmds: impl Iterator<Item = (usize, &'c [u8])>) -> u64 {
        let inner = &self.inner;
        let mut p = inner.pending.lock();
        let before = p.buf.len();
        if inner.timestamps.load(Ordering::Relaxed) {
            let now = (inner.clock)();
            if now > p.last_ts {
                p.last_ts = now;
                p.buf.extend_from_slice(format!("#TS:{now}\r\n").as_bytes());
            }
        }
        for (db, bytes) in cmds {
            if db != hotkv_engine::propagate::NO_DB && p.seldb != Some(db) {
                write_select(&mut p.buf, db);
                p.seldb = Some(db);
            }
            p.buf.extend_from_slice(bytes);
        }
        let added = (p.buf.len() - before) as u64;
        let end = inner.appended.fetch_add(added, Ordering::AcqRel) + added;
        inner.pending_len.store(p.buf.len(), Ordering::Relaxed);
        if p.buf.len() + inner.carry_len.load(Ordering::Relaxed) > inner.max_buffer {
            inner.over_limit.store(true, Ordering::Relaxed);
        }
        drop(p);
        // Under `everysec` and `no` the connection writes the buffer itself before its
        // replies ([`AofWriter::write_through`]); the flusher's tick collects the rest (cron
        // expiry, a replica's applied stream). Waking it per call cost a context switch per
        // batch: about a microsecond per SET at -P16.
        if self.replies_wait() {
            inner.wake.notify_one();
        }
        end
    }

    /// Writes the buffer to the file on the caller's thread, under `everysec` and `no`. A
    /// connection calls it before sending a batch's replies, as Valkey writes its AOF buffer
    /// in `beforeSleep` before any reply goes out: a crash of the process then loses no write
    /// a client saw acknowledged; only a crash of the machine can, up to a second's worth
    /// under `everysec`. Left to the flusher while a background fsync runs (Valkey postpones
    /// the write then, since write(2) would wait behind the fsync), while a switch of file is
    /// pending, and while writes are failing (the flusher retries and logs).
    pub fn write_through(&self) {
        let inner = &self.inner;
        if inner.written.load(Ordering::Acquire) >= inner.appended.load(Ordering::Acquire)
            || inner.bio_pending.load(Ordering::Acquire) > 0
            || inner.write_errno.load(Ordering::Relaxed) != 0
        {
            return;
        }
        let mut cur = inner.file.lock();
        let (buf, upto) = {
            let mut p = inner.pending.lock();
            // Checked under the buffer's lock, which `begin_switch` holds while it marks a
            // switch: what is taken here was appended before any switch, so it belongs to the
            // current file.
            if inner.switch.lock().is_some() {
                return;
            }
            inner.pending_len.store(0, Ordering::Relaxed);
            (std::mem::take(&mut p.buf), inner.appended.load(Ordering::Acquire))
        };
        let mut carry = inner.behind_carry(buf);
        // A failure keeps the bytes as carry and shows in `write_error`; the flusher retries.
        if inner.write_out(&mut cur, &mut carry, upto).is_ok() {
            inner.over_limit.store(false, Ordering::Relaxed);
        }
    }

    /// The stream offset just past everything appended so far.
    pub fn appended_offset(&self) -> u64 {
        self.inner.appended.load(Ordering::Acquire)
    }

    /// The stream offset up to which the file holds the stream (written, maybe not synced).
    pub fn written_offset(&self) -> u64 {
        self.inner.written.load(Ordering::Acquire)
    }

    /// The stream offset up to which the file is synced (WAITAOF's local count). Under `no`
    /// it never advances.
    pub fn durable_offset(&self) -> u64 {
        *self.inner.durable.borrow()
    }

    /// A receiver of the durable offset, for waiting without a writer reference.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.inner.durable.subscribe()
    }

    /// Waits until the file is synced up to `offset`.
    pub async fn wait_durable(&self, offset: u64) {
        let mut rx = self.subscribe();
        // The sender lives as long as `self`; an error cannot happen while we borrow it.
        let _ = rx.wait_for(|&d| d >= offset).await;
    }

    /// The stream offset up to which replies may acknowledge writes under `appendfsync
    /// always`: the durable offset, or the written one while fsyncs are held.
    pub fn released_offset(&self) -> u64 {
        *self.inner.released.borrow()
    }

    /// Waits until replies may acknowledge everything up to `offset`. Under `appendfsync
    /// always` the server awaits this with the offset [`AofWriter::append`] returned (or
    /// [`AofWriter::appended_offset`] read after the call) before writing the call's reply.
    pub async fn wait_released(&self, offset: u64) {
        let mut rx = self.inner.released.subscribe();
        // The sender lives as long as `self`; an error cannot happen while we borrow it.
        let _ = rx.wait_for(|&d| d >= offset).await;
    }

    /// Holds fsyncs back (`true`) or lets them happen again; see the module docs.
    pub fn set_fsync_held(&self, held: bool) {
        if self.inner.hold_fsync.swap(held, Ordering::Relaxed) && !held {
            self.inner.wake.notify_one();
        }
    }

    /// Whether fsyncs are held back.
    pub fn fsync_held(&self) -> bool {
        self.inner.hold_fsync.load(Ordering::Relaxed)
    }

    /// Whether replies must wait for [`AofWriter::wait_durable`] (`appendfsync always`).
    pub fn replies_wait(&self) -> bool {
        self.policy() == FsyncPolicy::Always
    }

    /// The current `appendfsync`.
    pub fn policy(&self) -> FsyncPolicy {
        FsyncPolicy::from_code(self.inner.policy.load(Ordering::Relaxed))
    }

    /// CONFIG SET appendfsync.
    pub fn set_policy(&self, p: FsyncPolicy) {
        self.inner.policy.store(p.code(), Ordering::Relaxed);
        self.inner.wake.notify_one();
    }

    /// CONFIG SET aof-timestamp-enabled.
    pub fn set_timestamps(&self, on: bool) {
        self.inner.timestamps.store(on, Ordering::Relaxed);
    }

    /// Why writes must be refused, as the text after `-MISCONF ` (`Errors writing to the AOF
    /// file: No space left on device`), or `None` when writing works: Valkey's
    /// `writeCommandsDeniedByDiskError`, which its `processCommand` checks for write commands.
    pub fn write_error(&self) -> Option<String> {
        let inner = &self.inner;
        let errno = match inner.write_errno.load(Ordering::Relaxed) {
            0 => inner.fsync_errno.load(Ordering::Relaxed),
            e => e,
        };
        if errno != 0 {
            return Some(format!("Errors writing to the AOF file: {}", strerror(errno)));
        }
        inner
            .over_limit
            .load(Ordering::Relaxed)
            .then(|| "Errors writing to the AOF file: the AOF buffer is full (the disk is too slow)".to_string())
    }

    /// CONFIG RESETSTAT: `aof_delayed_fsync` starts again from zero.
    pub fn reset_delayed_fsync(&self) {
        self.inner.delayed_fsync.store(0, Ordering::Relaxed);
    }

    /// What INFO persistence shows of the writer.
    pub fn stats(&self) -> WriterStats {
        let i = &self.inner;
        WriterStats {
            write_ok: i.write_errno.load(Ordering::Relaxed) == 0 && i.fsync_errno.load(Ordering::Relaxed) == 0,
            current_size: i.current_size.load(Ordering::Relaxed),
            base_size: i.base_size.load(Ordering::Relaxed),
            buffer_length: (i.pending_len.load(Ordering::Relaxed) + i.carry_len.load(Ordering::Relaxed)) as u64,
            pending_bio_fsync: i.bio_pending.load(Ordering::Relaxed),
            delayed_fsync: i.delayed_fsync.load(Ordering::Relaxed),
        }
    }

    /// Sets `aof_current_size` and `aof_base_size` after a rewrite published a new base.
    pub fn set_sizes(&self, current: u64, base: u64) {
        self.inner.current_size.store(current, Ordering::Relaxed);
        self.inner.base_size.store(base, Ordering::Relaxed);
    }

    /// Size of the current incr file as written so far.
    pub fn incr_size(&self) -> u64 {
        self.inner.file.lock().incr_size
    }

    /// Marks the switch to a new incr file (a rewrite starts): everything appended before
    /// this call belongs to the old file, everything after to `file`, starting with a SELECT.
    /// Cheap and disk-free, so the server calls it at the snapshot's cut, with every slot
    /// lock held: the new base then holds exactly what the old files hold. The flusher
    /// writes and syncs the old file's rest before it writes anything to the new one.
    pub fn begin_switch(&self, file: Arc<dyn IncrFile>) {
        let inner = &self.inner;
        let mut p = inner.pending.lock();
        p.seldb = None;
        inner.pending_len.store(0, Ordering::Relaxed);
        let rest = std::mem::take(&mut p.buf);
        let upto = inner.appended.load(Ordering::Acquire);
        let mut sw = inner.switch.lock();
        match sw.as_mut() {
            // A second switch before the first was applied: the middle file stays empty and
            // the bytes of both go to the old file.
            Some(prev) => {
                prev.rest.extend_from_slice(&rest);
                prev.upto = upto;
                prev.file = file;
            }
            None => *sw = Some(Switch { file, rest, upto }),
        }
        drop(sw);
        drop(p);
        inner.wake.notify_one();
    }

    /// [`AofWriter::begin_switch`], then writes and syncs the old file's rest now.
    pub fn switch_to(&self, file: Arc<dyn IncrFile>) -> io::Result<()> {
        self.begin_switch(file);
        let mut cur = self.inner.file.lock();
        self.inner.apply_switch(&mut cur)
    }

    /// Writes and syncs everything appended so far (SHUTDOWN, `appendonly no`): what
    /// Valkey's `flushAppendOnlyFile(1)` and the fsync after it do.
    pub fn flush_and_sync(&self) -> io::Result<()> {
        let inner = &self.inner;
        let mut cur = inner.file.lock();
        inner.apply_switch(&mut cur)?;
        let (buf, upto) = {
            let mut p = inner.pending.lock();
            inner.pending_len.store(0, Ordering::Relaxed);
            (std::mem::take(&mut p.buf), inner.appended.load(Ordering::Acquire))
        };
        let mut carry = inner.take_carry();
        carry.extend_from_slice(&buf);
        inner.write_out(&mut cur, &mut carry, upto)?;
        cur.file.sync()?;
        inner.publish_durable(upto);
        Ok(())
    }
}

impl WriteSink for AofWriter {
    fn active(&self) -> bool {
        true
    }

    fn append(&self, effects: &Effects) {
        if !effects.is_empty() {
            AofWriter::append(self, effects);
        }
    }

    fn append_resp(&self, db: usize, resp: &[u8]) {
        self.append_cmds(std::iter::once((db, resp)));
    }
}

impl Drop for AofWriter {
    fn drop(&mut self) {
        if let Err(e) = self.flush_and_sync() {
            tracing::warn!("Fail to fsync the AOF file: {e}");
        }
        self.inner.stop.store(true, Ordering::Release);
        self.inner.bio.lock().take();
        self.inner.wake.notify_all();
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

/// State shared by the writer handle and its threads.
struct Inner {
    pending: Mutex<Pending>,
    wake: Condvar,
    /// Held by the flusher while it writes, and by a switch.
    file: Mutex<Current>,
    policy: AtomicU8,
    timestamps: AtomicBool,
    max_buffer: usize,
    clock: fn() -> u64,
    on_fatal: Arc<dyn Fn() + Send + Sync>,
    flush_sleep: Arc<AtomicU64>,
    /// Stream offsets: appended to the buffer, written to the file.
    appended: AtomicU64,
    written: AtomicU64,
    durable: watch::Sender<u64>,
    /// What replies may acknowledge: under `always` `durable`, or `written` while fsyncs are
    /// held; under the other policies `written`.
    released: watch::Sender<u64>,
    /// `no-appendfsync-on-rewrite` and a rewrite or save runs: write, do not fsync.
    hold_fsync: AtomicBool,
    /// Bytes taken from the buffer and not written yet (a failed write keeps them).
    carry: Mutex<Vec<u8>>,
    carry_len: AtomicUsize,
    pending_len: AtomicUsize,
    /// The errno of the last failed write, 0 once one succeeds (`aof_last_write_status`).
    write_errno: AtomicI32,
    /// The errno of the last failed background fsync, 0 once one succeeds.
    fsync_errno: AtomicI32,
    over_limit: AtomicBool,
    delayed_fsync: AtomicU64,
    bio_pending: AtomicU64,
    current_size: AtomicU64,
    base_size: AtomicU64,
    stop: AtomicBool,
    bio: Mutex<Option<mpsc::Sender<FsyncJob>>>,
    switch: Mutex<Option<Switch>>,
}

struct Pending {
    buf: Vec<u8>,
    /// The database of the last command appended; `None` forces a SELECT.
    seldb: Option<usize>,
    last_ts: u64,
}

struct Current {
    file: Arc<dyn IncrFile>,
    incr_size: u64,
    last_fsync: Instant,
}

/// A switch of incr file, marked and not applied yet.
struct Switch {
    /// The file to write to after the switch.
    file: Arc<dyn IncrFile>,
    /// Bytes appended before the switch and not yet written: they go to the old file.
    rest: Vec<u8>,
    /// The stream offset at the switch.
    upto: u64,
}

struct FsyncJob {
    file: Arc<dyn IncrFile>,
    upto: u64,
}

impl Inner {
    fn flush_loop(self: Arc<Self>) {
        let mut postponed: Option<Instant> = None;
        loop {
            {
                let mut p = self.pending.lock();
                let idle = p.buf.is_empty() && self.carry_len.load(Ordering::Relaxed) == 0;
                if idle && !self.stop.load(Ordering::Acquire) {
                    // Wake at least every TICK: everysec syncs even without new writes, and a
                    // failed write is retried.
                    self.wake.wait_for(&mut p, TICK);
                }
            }
            if self.stop.load(Ordering::Acquire) {
                return;
            }
            let policy = FsyncPolicy::from_code(self.policy.load(Ordering::Relaxed));
            // Valkey postpones the write (up to two seconds) while a background fsync runs:
            // write(2) would block behind it anyway.
            if policy == FsyncPolicy::Everysec && self.bio_pending.load(Ordering::Acquire) > 0 {
                let since = *postponed.get_or_insert_with(Instant::now);
                if since.elapsed() < MAX_POSTPONE {
                    std::thread::sleep(POSTPONE_STEP);
                    continue;
                }
                self.delayed_fsync.fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    "Asynchronous AOF fsync is taking too long (disk is busy?). Writing the AOF buffer without \
                     waiting for fsync to complete, this may slow down the server."
                );
            }
            postponed = None;
            // The file lock first, then the buffer: a switch to a new file takes them in the
            // same order, so no byte appended before a switch can land after it.
            let mut cur = self.file.lock();
            if let Err(e) = self.apply_switch(&mut cur) {
                if policy == FsyncPolicy::Always {
                    tracing::warn!(
                        "Can't persist AOF for fsync error when the AOF fsync policy is 'always': {e}. Exiting..."
                    );
                    (self.on_fatal)();
                    return;
                }
                drop(cur);
                let mut p = self.pending.lock();
                self.wake.wait_for(&mut p, TICK);
                continue;
            }
            let (buf, upto) = {
                let mut p = self.pending.lock();
                self.pending_len.store(0, Ordering::Relaxed);
                (std::mem::take(&mut p.buf), self.appended.load(Ordering::Acquire))
            };
            let mut carry = self.behind_carry(buf);
            let result = self.write_out(&mut cur, &mut carry, upto);
            let policy = FsyncPolicy::from_code(self.policy.load(Ordering::Relaxed));
            match result {
                Err(_) if policy == FsyncPolicy::Always => {
                    tracing::warn!(
                        "Can't recover from AOF write error when the AOF fsync policy is 'always'. Exiting..."
                    );
                    (self.on_fatal)();
                    return;
                }
                // The data stays in `carry` for the next turn; wait a tick before retrying.
                Err(_) => {
                    drop(cur);
                    let mut p = self.pending.lock();
                    self.wake.wait_for(&mut p, TICK);
                    continue;
                }
                Ok(()) => {}
            }
            self.over_limit.store(false, Ordering::Relaxed);
            let held = self.hold_fsync.load(Ordering::Relaxed);
            // Replies wait for the fsync only under `always` when fsyncs are not held (a
            // reply waiting while the policy changed away from `always` is released here).
            if policy != FsyncPolicy::Always || held {
                self.publish(&self.released, upto);
            }
            match policy {
                FsyncPolicy::Always if held => {}
                FsyncPolicy::Always => match cur.file.sync() {
                    Ok(()) => {
                        cur.last_fsync = Instant::now();
                        self.publish_durable(upto);
                    }
                    Err(e) => {
                        tracing::warn!(
                            "Can't persist AOF for fsync error when the AOF fsync policy is 'always': {e}. Exiting..."
                        );
                        (self.on_fatal)();
                        return;
                    }
                },
                FsyncPolicy::Everysec => {
                    if !held
                        && cur.last_fsync.elapsed() >= Duration::from_secs(1)
                        && self.durable_value() < upto
                        && self.bio_pending.load(Ordering::Acquire) == 0
                    {
                        cur.last_fsync = Instant::now();
                        if let Some(tx) = self.bio.lock().as_ref() {
                            self.bio_pending.fetch_add(1, Ordering::AcqRel);
                            if tx.send(FsyncJob { file: cur.file.clone(), upto }).is_err() {
                                self.bio_pending.fetch_sub(1, Ordering::AcqRel);
                            }
                        }
                    }
                }
                FsyncPolicy::No => {}
            }
        }
    }

    /// Finishes a switch [`AofWriter::begin_switch`] marked: writes what belongs to the old
    /// file, syncs it (unless `appendfsync no`), then makes the new file current. On failure
    /// the switch stays pending with its bytes, to be retried.
    fn apply_switch(&self, cur: &mut Current) -> io::Result<()> {
        let Some(mut sw) = self.switch.lock().take() else { return Ok(()) };
        let mut carry = self.take_carry();
        carry.extend_from_slice(&sw.rest);
        let result = self.write_out(cur, &mut carry, sw.upto).and_then(|()| {
            if FsyncPolicy::from_code(self.policy.load(Ordering::Relaxed)) != FsyncPolicy::No {
                cur.file.sync()?;
                self.publish_durable(sw.upto);
            }
            Ok(())
        });
        if let Err(e) = result {
            // write_out kept the unwritten part as carry; put it back into the switch.
            sw.rest = self.take_carry();
            let mut slot = self.switch.lock();
            if let Some(newer) = slot.take() {
                sw.rest.extend_from_slice(&newer.rest);
                sw.upto = newer.upto;
                sw.file = newer.file;
            }
            *slot = Some(sw);
            return Err(e);
        }
        tracing::debug!(offset = sw.upto, "aof switched incr file");
        cur.file = sw.file;
        cur.incr_size = 0;
        Ok(())
    }

    /// The background fsync thread (Valkey's `BIO_AOF_FSYNC`).
    fn fsync_loop(self: Arc<Self>, jobs: mpsc::Receiver<FsyncJob>) {
        for job in jobs {
            match job.file.sync() {
                Ok(()) => {
                    self.fsync_errno.store(0, Ordering::Relaxed);
                    self.publish_durable(job.upto);
                }
                Err(e) => {
                    tracing::warn!("Fail to fsync the AOF file: {e}");
                    self.fsync_errno.store(e.raw_os_error().unwrap_or(libc::EIO), Ordering::Relaxed);
                }
            }
            self.bio_pending.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Writes `buf` (stream bytes ending at offset `upto`) to the current file, as Valkey's
    /// `aofWrite` and the error handling after it. On failure the unwritten part is kept for
    /// the next attempt.
    fn write_out(&self, cur: &mut Current, buf: &mut Vec<u8>, upto: u64) -> io::Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        // Valkey's `flushAppendOnlyFile` sleeps here, only when there is something to write:
        // tests use it to hold replies back behind a slow AOF under `appendfsync always`.
        let sleep = self.flush_sleep.load(Ordering::Relaxed);
        if sleep > 0 {
            std::thread::sleep(Duration::from_micros(sleep));
        }
        let mut done = 0usize;
        let mut failure = None;
        while done < buf.len() {
            match cur.file.write(&buf[done..]) {
                Ok(0) => {
                    failure = Some(io::Error::from_raw_os_error(libc::ENOSPC));
                    break;
                }
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let Some(err) = failure else {
            if self.write_errno.swap(0, Ordering::Relaxed) != 0 {
                tracing::info!("AOF write error looks solved. The server can write again.");
            }
            cur.incr_size += done as u64;
            self.current_size.fetch_add(done as u64, Ordering::Relaxed);
            self.written.store(upto, Ordering::Release);
            buf.clear();
            self.store_carry(std::mem::take(buf));
            return Ok(());
        };
        let errno = if done > 0 {
            tracing::warn!("Short write while writing to the AOF file: (nwritten={done}, expected={})", buf.len());
            // Undo the partial command so the file still ends on a whole one.
            match cur.file.truncate(cur.incr_size) {
                Ok(()) => done = 0,
                Err(e) => tracing::warn!(
                    "Could not remove short write from the append-only file. The server may refuse to load the AOF \
                     the next time it starts.  ftruncate: {e}"
                ),
            }
            libc::ENOSPC
        } else {
            if self.write_errno.load(Ordering::Relaxed) == 0 {
                tracing::warn!("Error writing to the AOF file: {err}");
            }
            err.raw_os_error().unwrap_or(libc::EIO)
        };
        self.write_errno.store(errno, Ordering::Relaxed);
        if done > 0 {
            cur.incr_size += done as u64;
            self.current_size.fetch_add(done as u64, Ordering::Relaxed);
            buf.drain(..done);
        }
        self.store_carry(std::mem::take(buf));
        Err(err)
    }

    /// `buf` behind what an earlier failed write left, as one buffer to write.
    fn behind_carry(&self, buf: Vec<u8>) -> Vec<u8> {
        let mut carry = self.take_carry();
        if carry.is_empty() {
            return buf;
        }
        carry.extend_from_slice(&buf);
        carry
    }

    fn take_carry(&self) -> Vec<u8> {
        let v = std::mem::take(&mut *self.carry.lock());
        self.carry_len.store(0, Ordering::Relaxed);
        v
    }

    /// Keeps bytes a failed write left.
    fn store_carry(&self, v: Vec<u8>) {
        if v.is_empty() {
            return;
        }
        self.carry_len.store(v.len(), Ordering::Relaxed);
        *self.carry.lock() = v;
    }

    fn durable_value(&self) -> u64 {
        *self.durable.borrow()
    }

    fn publish_durable(&self, upto: u64) {
        self.publish(&self.durable, upto);
        self.publish(&self.released, upto);
    }

    /// Moves an offset forward (never back).
    fn publish(&self, offset: &watch::Sender<u64>, upto: u64) {
        offset.send_if_modified(|d| {
            let advance = upto > *d;
            if advance {
                *d = upto;
            }
            advance
        });
    }
}

/// Seconds since the Unix epoch.
pub fn unix_secs() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

/// `strerror(errno)`: the OS text without the ` (os error N)` std appends.
fn strerror(errno: i32) -> String {
    let s = io::Error::from_raw_os_error(errno).to_string();
    match s.rfind(" (os error ") {
        Some(i) => s[..i].to_string(),
        None => s,
    }
}

/// How often the flusher wakes without new data (Valkey's cron retries at 10 Hz).
const TICK: Duration = Duration::from_millis(100);
/// How long a write may wait for a running background fsync.
const MAX_POSTPONE: Duration = Duration::from_secs(2);
/// How often a postponed write looks whether the background fsync finished.
const POSTPONE_STEP: Duration = Duration::from_millis(10);

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;
    use crate::aof::manifest::tests::tempdir;

    /// An incr file in memory that fails, writes short or blocks on demand.
    #[derive(Default)]
    struct Fake {
        data: Mutex<Vec<u8>>,
        fail_writes: AtomicUsize,
        short_writes: AtomicUsize,
        fail_syncs: AtomicUsize,
        syncs: AtomicUsize,
        truncates: AtomicUsize,
        gate: Mutex<()>,
    }

    impl IncrFile for Fake {
        fn write(&self, buf: &[u8]) -> io::Result<usize> {
            let _open = self.gate.lock();
            if take_one(&self.fail_writes) {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
            let n = if take_one(&self.short_writes) { buf.len() / 2 } else { buf.len() };
            self.data.lock().extend_from_slice(&buf[..n]);
            if n < buf.len() {
                // The next call fails, as a full disk does after a short write.
                self.fail_writes.fetch_add(1, Ordering::Relaxed);
            }
            Ok(n)
        }
        fn sync(&self) -> io::Result<()> {
            if take_one(&self.fail_syncs) {
                return Err(io::Error::from_raw_os_error(libc::EIO));
            }
            self.syncs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        }
        fn truncate(&self, len: u64) -> io::Result<()> {
            self.truncates.fetch_add(1, Ordering::Relaxed);
            self.data.lock().truncate(len as usize);
            Ok(())
        }
    }

    fn take_one(n: &AtomicUsize) -> bool {
        n.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |v| v.checked_sub(1)).is_ok()
    }

    fn effects(cmds: &[(usize, &[&str])]) -> Effects {
        let mut e = Effects::default();
        e.begin(true);
        for (db, argv) in cmds {
            e.push(*db, argv);
        }
        e
    }

    fn resp(cmds: &[&[&str]]) -> Vec<u8> {
        let mut out = Vec::new();
        for argv in cmds {
            hotkv_engine::propagate::write_command(&mut out, argv.iter().map(|a| a.as_bytes()), argv.len());
        }
        out
    }

    fn wait(what: &str, cond: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !cond() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn cfg(policy: FsyncPolicy) -> WriterConfig {
        WriterConfig { on_fatal: Arc::new(|| panic!("unexpected fatal AOF error")), ..WriterConfig::new(policy) }
    }

    #[test]
    fn everysec_writes_select_only_when_the_db_changes_and_syncs_within_seconds() {
        let dir = tempdir("everysec");
        let path = dir.join("appendonly.aof.1.incr.aof");
        let file = File::options().create(true).append(true).open(&path).unwrap();
        let w = AofWriter::start(Arc::new(file), cfg(FsyncPolicy::Everysec)).unwrap();
        w.append(&effects(&[(0, &["SET", "a", "1"]), (0, &["SET", "b", "2"])]));
        let end = w.append(&effects(&[(2, &["DEL", "a"])]));
        assert_eq!(end, w.appended_offset());
        wait("the write", || w.written_offset() == end);
        let want = resp(&[&["SELECT", "0"], &["SET", "a", "1"], &["SET", "b", "2"], &["SELECT", "2"], &["DEL", "a"]]);
        assert_eq!(std::fs::read(&path).unwrap(), want);
        assert_eq!(end, want.len() as u64);
        wait("the background fsync", || w.durable_offset() == end);
        let s = w.stats();
        assert!(s.write_ok);
        assert_eq!((s.current_size, s.buffer_length), (want.len() as u64, 0));
        assert_eq!(w.incr_size(), want.len() as u64);
        drop(w);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn always_publishes_the_durable_offset_only_after_a_sync() {
        let fake = Arc::new(Fake::default());
        let w = AofWriter::start(fake.clone(), cfg(FsyncPolicy::Always)).unwrap();
        assert!(w.replies_wait());
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for i in 0..20 {
            let end = w.append(&effects(&[(0, &["INCR", "n"])]));
            rt.block_on(w.wait_durable(end));
            assert!(w.durable_offset() >= end, "round {i}");
            assert!(fake.data.lock().len() as u64 >= end);
            assert!(fake.syncs.load(Ordering::Relaxed) >= 1);
        }
    }

    #[test]
    fn always_on_a_real_file_has_every_acknowledged_write_on_disk() {
        let dir = tempdir("always");
        let path = dir.join("appendonly.aof.1.incr.aof");
        let file = File::options().create(true).append(true).open(&path).unwrap();
        let w = AofWriter::start(Arc::new(file), cfg(FsyncPolicy::Always)).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let mut want = resp(&[&["SELECT", "0"]]);
        for i in 0..50 {
            let k = format!("k{i}");
            let end = w.append(&effects(&[(0, &["SET", &k, "v"])]));
            rt.block_on(w.wait_durable(end));
            want.extend(resp(&[&["SET", &k, "v"]]));
            // Acknowledged: the bytes are in the file, read back through another handle.
            assert_eq!(std::fs::read(&path).unwrap(), want, "write {i}");
        }
        drop(w);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn flush_sleep_holds_back_writes_of_buffered_bytes_only() {
        let fake = Arc::new(Fake::default());
        let sleep = Arc::new(AtomicU64::new(0));
        let w = AofWriter::start(fake.clone(), WriterConfig { flush_sleep: sleep.clone(), ..cfg(FsyncPolicy::Always) })
            .unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        sleep.store(300_000, Ordering::Relaxed);
        let t = Instant::now();
        let end = w.append(&effects(&[(0, &["INCR", "n"])]));
        rt.block_on(w.wait_released(end));
        assert!(t.elapsed() >= Duration::from_millis(300), "released after {:?}", t.elapsed());
        // Nothing buffered: an idle flusher, and a write-through of nothing, never sleep.
        let t = Instant::now();
        w.write_through();
        rt.block_on(w.wait_released(end));
        assert!(t.elapsed() < Duration::from_millis(250), "{:?}", t.elapsed());
        sleep.store(0, Ordering::Relaxed);
        let t = Instant::now();
        let end = w.append(&effects(&[(0, &["INCR", "n"])]));
        rt.block_on(w.wait_released(end));
        assert!(t.elapsed() < Duration::from_millis(250), "{:?}", t.elapsed());
    }

    #[test]
    fn no_writes_but_never_claims_durability() {
        let fake = Arc::new(Fake::default());
        let w = AofWriter::start(fake.clone(), cfg(FsyncPolicy::No)).unwrap();
        assert!(!w.replies_wait());
        let end = w.append(&effects(&[(0, &["SET", "k", "v"])]));
        wait("the write", || w.written_offset() == end);
        std::thread::sleep(TICK * 2);
        assert_eq!(w.durable_offset(), 0);
        assert_eq!(fake.syncs.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn held_fsyncs_release_replies_but_sync_only_after_the_hold() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for policy in [FsyncPolicy::Always, FsyncPolicy::Everysec] {
            let fake = Arc::new(Fake::default());
            let w = AofWriter::start(fake.clone(), cfg(policy)).unwrap();
            w.set_fsync_held(true);
            assert!(w.fsync_held());
            let end = w.append(&effects(&[(0, &["SET", "k", "v"])]));
            // Under `always` the reply goes once the data is written, without an fsync
            // (under `everysec` replies never wait).
            if policy == FsyncPolicy::Always {
                rt.block_on(w.wait_released(end));
            }
            wait("the write", || w.written_offset() == end);
            // Longer than everysec's second and many flusher ticks: no fsync covers the write.
            std::thread::sleep(Duration::from_millis(1300));
            assert_eq!(w.durable_offset(), 0, "{policy:?}: synced while held");
            w.set_fsync_held(false);
            wait("the fsync after the hold", || w.durable_offset() == end);
            assert!(fake.syncs.load(Ordering::Relaxed) >= 1);
        }
    }

    #[test]
    fn outside_always_replies_are_released_once_written() {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        for policy in [FsyncPolicy::Everysec, FsyncPolicy::No] {
            let fake = Arc::new(Fake::default());
            let w = AofWriter::start(fake.clone(), cfg(policy)).unwrap();
            let end = w.append(&effects(&[(0, &["SET", "k", "v"])]));
            // A reply that started waiting under `always` is not left hanging by the change.
            rt.block_on(w.wait_released(end));
            assert!(w.written_offset() >= end, "{policy:?}");
        }
    }

    static CLOCK: AtomicU64 = AtomicU64::new(1_700_000_000);

    #[test]
    fn timestamps_are_annotated_once_per_second_change() {
        let fake = Arc::new(Fake::default());
        let w = AofWriter::start(
            fake.clone(),
            WriterConfig { timestamps: true, clock: || CLOCK.load(Ordering::Relaxed), ..cfg(FsyncPolicy::No) },
        )
        .unwrap();
        w.append(&effects(&[(0, &["SET", "a", "1"])]));
        w.append(&effects(&[(0, &["SET", "b", "1"])]));
        CLOCK.store(1_700_000_001, Ordering::Relaxed);
        let end = w.append(&effects(&[(0, &["SET", "c", "1"])]));
        w.set_timestamps(false);
        CLOCK.store(1_700_000_002, Ordering::Relaxed);
        let end = end.max(w.append(&effects(&[(0, &["SET", "d", "1"])])));
        wait("the write", || w.written_offset() == end);
        let mut want = b"#TS:1700000000\r\n".to_vec();
        want.extend(resp(&[&["SELECT", "0"], &["SET", "a", "1"], &["SET", "b", "1"]]));
        want.extend_from_slice(b"#TS:1700000001\r\n");
        want.extend(resp(&[&["SET", "c", "1"], &["SET", "d", "1"]]));
        assert_eq!(*fake.data.lock(), want);
    }

    #[test]
    fn write_errors_refuse_writes_and_clear_once_a_retry_succeeds() {
        let fake = Arc::new(Fake::default());
        fake.fail_writes.store(3, Ordering::Relaxed);
        let w = AofWriter::start(fake.clone(), cfg(FsyncPolicy::Everysec)).unwrap();
        w.append(&effects(&[(0, &["SET", "a", "1"])]));
        wait("the error", || w.write_error().is_some());
        assert_eq!(w.write_error().unwrap(), "Errors writing to the AOF file: No space left on device");
        assert!(!w.stats().write_ok);
        let end = w.append(&effects(&[(0, &["SET", "b", "2"])]));
        wait("the retry", || w.written_offset() == end);
        assert_eq!(w.write_error(), None);
        assert!(w.stats().write_ok);
        assert_eq!(*fake.data.lock(), resp(&[&["SELECT", "0"], &["SET", "a", "1"], &["SET", "b", "2"]]));
    }

    #[test]
    fn a_short_write_is_undone_so_the_file_ends_on_a_whole_command() {
        let fake = Arc::new(Fake::default());
        fake.short_writes.store(1, Ordering::Relaxed);
        let w = AofWriter::start(fake.clone(), cfg(FsyncPolicy::No)).unwrap();
        let end = w.append(&effects(&[(0, &["SET", "key", "value"])]));
        wait("the retry", || w.written_offset() == end);
        assert_eq!(fake.truncates.load(Ordering::Relaxed), 1);
        assert_eq!(*fake.data.lock(), resp(&[&["SELECT", "0"], &["SET", "key", "value"]]));
    }

    #[test]
    fn under_always_a_failed_write_or_sync_is_fatal() {
        for (writes, syncs) in [(1, 0), (0, 1)] {
            let fake = Arc::new(Fake::default());
            fake.fail_writes.store(writes, Ordering::Relaxed);
            fake.fail_syncs.store(syncs, Ordering::Relaxed);
            let fatal = Arc::new(AtomicBool::new(false));
            let flag = fatal.clone();
            let w = AofWriter::start(
                fake.clone(),
                WriterConfig {
                    on_fatal: Arc::new(move || flag.store(true, Ordering::Relaxed)),
                    ..cfg(FsyncPolicy::Always)
                },
            )
            .unwrap();
            w.append(&effects(&[(0, &["SET", "a", "1"])]));
            wait("the fatal hook", || fatal.load(Ordering::Relaxed));
            assert_eq!(w.durable_offset(), 0, "nothing acknowledged");
            std::mem::forget(w); // its flusher is gone, as the process would be
        }
    }

    #[test]
    fn a_switch_sends_earlier_appends_to_the_old_file_and_reselects() {
        let (old, new) = (Arc::new(Fake::default()), Arc::new(Fake::default()));
        let w = AofWriter::start(old.clone(), cfg(FsyncPolicy::Everysec)).unwrap();
        w.append(&effects(&[(1, &["SET", "a", "1"])]));
        w.switch_to(new.clone()).unwrap();
        assert_eq!(*old.data.lock(), resp(&[&["SELECT", "1"], &["SET", "a", "1"]]));
        assert!(old.syncs.load(Ordering::Relaxed) >= 1, "the old file is synced before it is left");
        assert_eq!(w.incr_size(), 0);
        let end = w.append(&effects(&[(1, &["SET", "b", "2"])]));
        wait("the write", || w.written_offset() == end);
        assert_eq!(*new.data.lock(), resp(&[&["SELECT", "1"], &["SET", "b", "2"]]));
    }

    #[test]
    fn a_switch_marked_under_the_cut_is_applied_by_the_flusher_in_order() {
        let (old, new) = (Arc::new(Fake::default()), Arc::new(Fake::default()));
        let gate = old.gate.lock();
        let w = AofWriter::start(old.clone(), cfg(FsyncPolicy::Always)).unwrap();
        w.append(&effects(&[(0, &["SET", "a", "1"])]));
        wait("the flusher to block", || w.stats().buffer_length == 0);
        w.append(&effects(&[(0, &["SET", "b", "2"])]));
        w.begin_switch(new.clone());
        let end = w.append(&effects(&[(0, &["SET", "c", "3"])]));
        drop(gate);
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(w.wait_durable(end));
        assert_eq!(*old.data.lock(), resp(&[&["SELECT", "0"], &["SET", "a", "1"], &["SET", "b", "2"]]));
        assert_eq!(*new.data.lock(), resp(&[&["SELECT", "0"], &["SET", "c", "3"]]));
    }

    #[test]
    fn a_buffer_over_its_bound_refuses_writes_until_it_drains() {
        let fake = Arc::new(Fake::default());
        let gate = fake.gate.lock();
        let w = AofWriter::start(fake.clone(), WriterConfig { max_buffer: 64, ..cfg(FsyncPolicy::No) }).unwrap();
        w.append(&effects(&[(0, &["SET", "a", "1"])]));
        wait("the flusher to block", || w.stats().buffer_length == 0);
        assert_eq!(w.write_error(), None);
        let end = w.append(&effects(&[(0, &["SET", "big", &"x".repeat(100)])]));
        assert!(w.write_error().unwrap().contains("AOF buffer is full"));
        assert!(w.stats().buffer_length > 64);
        drop(gate);
        wait("the drain", || w.written_offset() == end && w.write_error().is_none());
    }

    #[test]
    fn strerror_drops_the_os_error_suffix() {
        assert_eq!(strerror(libc::ENOSPC), "No space left on device");
        assert_eq!(FsyncPolicy::parse("EverySec"), Some(FsyncPolicy::Everysec));
        assert_eq!(FsyncPolicy::parse("sometimes"), None);
    }
}
