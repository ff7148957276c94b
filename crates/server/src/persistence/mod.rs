//! RDB persistence: `dump.rdb` written from point-in-time snapshots without fork (BGSAVE,
//! SAVE, the `save` rules, SHUTDOWN, DEBUG RELOAD), the state INFO persistence reports, the
//! MISCONF guard on writes after a failed background save, and loading the file at start.
//!
//! A save is the engine's snapshot (see `hotkv_engine::snapshot` and docs/persistence.md)
//! streamed by [`crate::snapshot::stream_rdb`] into a temp file on a thread of its own, then
//! fsynced and renamed over `dbfilename` ([`file`]). Clients keep running throughout: a
//! client that writes a slot not yet written out serialises that slot first. The keyspace has
//! one snapshot at a time, shared with replication's full sync, so a save and a full sync
//! wait for each other (Valkey's "one child at a time").

pub mod file;
pub mod startup;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use parking_lot::Mutex;
use tokio::sync::oneshot;
use tracing::{info, warn};

use crate::config::table as t;
use crate::server::{Server, unix_ms};

/// Who asked for a save; it decides the log lines and what a failure changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaveKind {
    /// BGSAVE, a `save` rule or a scheduled BGSAVE: a failure sets
    /// `rdb_last_bgsave_status:err` (and with it MISCONF).
    Background,
    /// SAVE, SHUTDOWN, DEBUG RELOAD: the caller waits and hears of a failure itself.
    Foreground,
}

/// Why a save did not start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StartError {
    /// A save of ours is running.
    InProgress,
    /// The keyspace's snapshot is taken (a replica's full sync holds it).
    Busy,
}

/// How a save ended: `Err` carries the reason, already logged.
pub type SaveResult = Result<(), String>;

/// The persistence state of the node.
pub struct Persistence {
    /// The save in progress.
    running: Mutex<Option<Running>>,
    /// BGSAVE SCHEDULE (or a BGSAVE inside EXEC) is waiting for the keyspace to be free.
    scheduled: AtomicBool,
    /// `rdb_last_bgsave_status`.
    last_ok: AtomicBool,
    /// Unix seconds of the last background save attempt (the 5-second retry rule).
    last_try: AtomicI64,
    /// `rdb_last_bgsave_time_sec`.
    last_time_sec: AtomicI64,
    /// `rdb_saves`.
    saves: AtomicU64,
    /// The write counter as it was at the cut of the last successful save: the changes since
    /// are the counter minus this.
    dirty_base: AtomicU64,
    /// Set to make the running save give up (SHUTDOWN replaces it with its own).
    abort: AtomicBool,
    /// The file is being loaded (at start, DEBUG RELOAD): commands answer -LOADING.
    /// From before the listeners open until the dataset is in and the AOF is open: clients
    /// get -LOADING rather than an empty keyspace or a write the AOF would miss.
    starting: AtomicBool,
    loading: AtomicBool,
    /// What INFO shows while loading.
    pub(crate) load: Mutex<LoadProgress>,
    /// `rdb_last_load_keys_loaded`, `rdb_last_load_keys_expired`.
    last_load: Mutex<(u64, u64)>,
    /// Full-sync snapshots streaming to replicas (Valkey's replication child): they count as
    /// "a child runs" for `no-appendfsync-on-rewrite`.
    sync_snapshots: AtomicUsize,
}

/// The save in progress.
struct Running {
    kind: SaveKind,
    started: Instant,
    started_unix: i64,
    /// Keys at the cut and keys written so far; 0 until the cut.
    keys_total: u64,
    progress: Arc<AtomicU64>,
}

/// Loading figures for INFO (`loading_*`).
#[derive(Debug, Default, Clone)]
pub struct LoadProgress {
    /// Unix seconds the load started.
    pub start_time: i64,
    /// The file's size.
    pub total_bytes: u64,
    /// Bytes read so far.
    pub loaded_bytes: u64,
}

impl Default for Persistence {
    fn default() -> Persistence {
        Persistence {
            running: Mutex::new(None),
            scheduled: AtomicBool::new(false),
            last_ok: AtomicBool::new(true),
            last_try: AtomicI64::new(0),
            last_time_sec: AtomicI64::new(-1),
            saves: AtomicU64::new(0),
            dirty_base: AtomicU64::new(0),
            abort: AtomicBool::new(false),
            loading: AtomicBool::new(false),
            starting: AtomicBool::new(false),
            load: Mutex::new(LoadProgress::default()),
            last_load: Mutex::new((0, 0)),
            sync_snapshots: AtomicUsize::new(0),
        }
    }
}

impl Persistence {
    /// CONFIG RESETSTAT: `rdb_saves` starts again from zero.
    pub fn reset_stats(&self) {
        self.saves.store(0, Ordering::Relaxed);
    }

    /// Marks the start-up load (see `starting`).
    pub fn set_starting(&self, on: bool) {
        self.starting.store(on, Ordering::Release);
    }

    /// Whether the dataset is being loaded from the file (or the node is still starting).
    pub fn loading(&self) -> bool {
        self.loading.load(Ordering::Acquire) || self.starting.load(Ordering::Acquire)
    }

    /// Whether the last background save succeeded (`rdb_last_bgsave_status:ok`).
    pub fn last_ok(&self) -> bool {
        self.last_ok.load(Ordering::Acquire)
    }

    /// Whether a snapshot for a replica's full sync is being produced.
    pub fn sync_snapshot_running(&self) -> bool {
        self.sync_snapshots.load(Ordering::Acquire) > 0
    }

    /// Whether a save is running.
    pub fn in_progress(&self) -> bool {
        self.running.lock().is_some()
    }

    /// Whether a BGSAVE is waiting to start.
    pub fn scheduled(&self) -> bool {
        self.scheduled.load(Ordering::Relaxed)
    }

    pub(crate) fn set_loading(&self, on: bool) {
        self.loading.store(on, Ordering::Release);
    }

    pub(crate) fn set_last_load(&self, loaded: u64, expired: u64) {
        *self.last_load.lock() = (loaded, expired);
    }
}

/// The INFO persistence figures of the RDB side.
#[derive(Debug, Clone)]
pub struct Figures {
    /// `rdb_changes_since_last_save`.
    pub changes: u64,
    /// `rdb_bgsave_in_progress`.
    pub bgsave_in_progress: bool,
    /// `rdb_last_bgsave_status` is ok.
    pub last_ok: bool,
    /// `rdb_last_bgsave_time_sec`.
    pub last_time_sec: i64,
    /// `rdb_current_bgsave_time_sec`.
    pub current_time_sec: i64,
    /// `rdb_saves`.
    pub saves: u64,
    /// `current_save_keys_processed`, `current_save_keys_total`.
    pub keys: (u64, u64),
    /// `rdb_last_load_keys_loaded`, `rdb_last_load_keys_expired`.
    pub last_load: (u64, u64),
    /// `loading` and its figures.
    pub loading: Option<LoadProgress>,
}

/// The figures INFO persistence shows.
pub fn figures(srv: &Server) -> Figures {
    let p = &srv.persist;
    let run = p.running.lock();
    let now = unix_ms() / 1000;
    Figures {
        changes: changes_since_save(srv),
        // Valkey's socket-target RDB child (a full sync) counts as a background save too.
        bgsave_in_progress: run.as_ref().is_some_and(|r| r.kind == SaveKind::Background)
            || p.sync_snapshots.load(Ordering::Acquire) > 0,
        last_ok: p.last_ok(),
        last_time_sec: p.last_time_sec.load(Ordering::Relaxed),
        current_time_sec: run.as_ref().filter(|r| r.kind == SaveKind::Background).map_or(-1, |r| now - r.started_unix),
        saves: p.saves.load(Ordering::Relaxed),
        keys: run.as_ref().map_or((0, 0), |r| (r.progress.load(Ordering::Relaxed), r.keys_total)),
        last_load: *p.last_load.lock(),
        loading: p.loading().then(|| p.load.lock().clone()),
    }
}

/// Writes since the last successful save (`rdb_changes_since_last_save`, Valkey's `dirty`).
pub fn changes_since_save(srv: &Server) -> u64 {
    srv.stats.dirty().saturating_sub(srv.persist.dirty_base.load(Ordering::Relaxed))
}

/// Whether writes are refused with MISCONF: `stop-writes-on-bgsave-error yes`, save rules
/// configured, and the last background save failed (Valkey's
/// `writeCommandsDeniedByDiskError`).
pub fn denies_writes(srv: &Server, rt: &crate::server::Runtime) -> bool {
    !srv.persist.last_ok() && rt.stop_writes_on_bgsave_error && rt.save_rules
}

/// The MISCONF reply, without its leading `-`.
pub const MISCONF: &str = "MISCONF Valkey is configured to save RDB snapshots, but it's currently unable to persist to disk. Commands that may modify the data set are disabled, because this instance is configured to report errors during writes if RDB snapshotting fails (stop-writes-on-bgsave-error option). Please check the Valkey logs for details about the RDB error.";

/// Starts a save of the whole keyspace into `dbfilename` on a thread of its own; returns
/// once the cut is fixed (the image is then that instant's), with a receiver for the end.
/// Blocks the caller for as long as taking every slot lock once takes, so it must not be
/// called with a slot lock held.
pub fn start(srv: &Arc<Server>, kind: SaveKind) -> Result<oneshot::Receiver<SaveResult>, StartError> {
    let p = &srv.persist;
    let progress = Arc::new(AtomicU64::new(0));
    {
        let mut run = p.running.lock();
        if run.is_some() {
            return Err(StartError::InProgress);
        }
        *run = Some(Running {
            kind,
            started: Instant::now(),
            started_unix: unix_ms() / 1000,
            keys_total: 0,
            progress: progress.clone(),
        });
    }
    crate::aof::wire::refresh_fsync_hold(srv);
    p.abort.store(false, Ordering::Release);
    if kind == SaveKind::Background {
        p.last_try.store(unix_ms() / 1000, Ordering::Relaxed);
    }
    let (cut_tx, cut_rx) = std::sync::mpsc::sync_channel::<Result<(), StartError>>(1);
    let (done_tx, done_rx) = oneshot::channel();
    let s = srv.clone();
    let spawned = std::thread::Builder::new().name("hotkv-rdb-save".into()).spawn(move || {
        let outcome = file::save(&s, &cut_tx);
        let result = match outcome {
            file::Outcome::Busy => {
                *s.persist.running.lock() = None;
                crate::aof::wire::refresh_fsync_hold(&s);
                let _ = cut_tx.send(Err(StartError::Busy));
                return;
            }
            file::Outcome::Saved { dirty_at_cut } => Ok(dirty_at_cut),
            file::Outcome::Failed(why) => Err(why),
        };
        let result = finish(&s, kind, result);
        let _ = done_tx.send(result);
    });
    if let Err(e) = spawned {
        *p.running.lock() = None;
        crate::aof::wire::refresh_fsync_hold(srv);
        warn!(cause = %e, "Can't save in background: {e}");
        return Err(StartError::Busy);
    }
    match cut_rx.recv() {
        Ok(Ok(())) => {
            p.saves.fetch_add(1, Ordering::Relaxed);
            Ok(done_rx)
        }
        Ok(Err(e)) => Err(e),
        // The thread ended before the cut: it failed to open the file, and said so in the
        // result it sent.
        Err(_) => {
            p.saves.fetch_add(1, Ordering::Relaxed);
            Ok(done_rx)
        }
    }
}

/// Records the cut in the running save (the save thread calls it).
pub(crate) fn cut_taken(srv: &Server, keys: usize) -> u64 {
    if let Some(r) = srv.persist.running.lock().as_mut() {
        r.keys_total = keys as u64;
        // Logged here, on the save's thread, so it comes before the save's own lines.
        if r.kind == SaveKind::Background {
            info!("Background saving started");
        }
    }
    srv.stats.dirty()
}

/// The progress counter of the running save, for the save thread.
pub(crate) fn progress(srv: &Server) -> Arc<AtomicU64> {
    srv.persist.running.lock().as_ref().map_or_else(Arc::default, |r| r.progress.clone())
}

/// Whether the running save was told to give up.
pub(crate) fn aborted(srv: &Server) -> bool {
    srv.persist.abort.load(Ordering::Acquire)
}

/// Ends the running save: state, figures, log lines.
fn finish(srv: &Server, kind: SaveKind, result: Result<u64, String>) -> SaveResult {
    let p = &srv.persist;
    let took = p.running.lock().as_ref().map_or(0, |r| r.started.elapsed().as_secs() as i64);
    // The save shows as running until its figures are in: INFO must not show it done with
    // the changes it wrote still counted as unsaved.
    let _done = SaveDone(srv);
    // Abandoned on purpose (SHUTDOWN, FLUSHALL): not a disk error, so no MISCONF, as Valkey
    // ignores a child it killed itself.
    if result.is_err() && p.abort.load(Ordering::Acquire) {
        warn!("Background saving abandoned: cancelled, or a FLUSHALL or a newer save replaced its data");
        return result.map(|_| ());
    }
    match result {
        Ok(dirty_at_cut) => {
            info!("DB saved on disk");
            p.dirty_base.store(dirty_at_cut, Ordering::Relaxed);
            srv.lastsave.store(unix_ms() / 1000, Ordering::Relaxed);
            p.last_ok.store(true, Ordering::Release);
            if kind == SaveKind::Background {
                info!("Background saving terminated with success");
                p.last_time_sec.store(took, Ordering::Relaxed);
            }
            Ok(())
        }
        Err(why) => {
            if kind == SaveKind::Background {
                warn!("Background saving error");
                p.last_ok.store(false, Ordering::Release);
                p.last_time_sec.store(took, Ordering::Relaxed);
            }
            Err(why)
        }
    }
}

/// Marks a full-sync snapshot as running for as long as it lives (from the wait for the
/// keyspace's snapshot until the transfer is done with its last byte or the replica went
/// away), so the AOF holds its fsyncs meanwhile under `no-appendfsync-on-rewrite yes`, and
/// INFO says `rdb_bgsave_in_progress:1`, as Valkey does for its replication child until the
/// last byte left its pipe.
pub struct SyncSnapshot(Arc<Server>);

impl SyncSnapshot {
    /// Counts one more full-sync snapshot.
    pub fn begin(srv: Arc<Server>) -> SyncSnapshot {
        srv.persist.sync_snapshots.fetch_add(1, Ordering::AcqRel);
        crate::aof::wire::refresh_fsync_hold(&srv);
        SyncSnapshot(srv)
    }
}

impl Drop for SyncSnapshot {
    fn drop(&mut self) {
        self.0.persist.sync_snapshots.fetch_sub(1, Ordering::AcqRel);
        crate::aof::wire::refresh_fsync_hold(&self.0);
    }
}

/// Clears the running save when dropped: at the end of [`finish`], after its figures.
struct SaveDone<'a>(&'a Server);

impl Drop for SaveDone<'_> {
    fn drop(&mut self) {
        self.0.persist.running.lock().take();
        crate::aof::wire::refresh_fsync_hold(self.0);
    }
}

/// The `save` rules, the scheduled BGSAVE and their retry delay; once a second from the cron
/// thread (Valkey's `serverCron`).
pub fn cron(srv: &Arc<Server>) {
    let p = &srv.persist;
    // Valkey's cron starts no save while any child runs, an AOF rewrite included, nor while
    // the dataset loads: from the file, or a replica's full sync, whose half-loaded data
    // saved with the new primary's id and offset would let a restart continue partially
    // with keys missing (Valkey's load blocks its cron).
    let rewriting = crate::aof::wire::rewrite_in_progress(srv).is_some();
    if p.in_progress() || rewriting || p.loading() || srv.repl.loading() || srv.is_shutting_down() {
        return;
    }
    let now = unix_ms() / 1000;
    // After a failure, wait CONFIG_BGSAVE_RETRY_DELAY before trying again.
    let may_try = p.last_ok() || now - p.last_try.load(Ordering::Relaxed) > BGSAVE_RETRY_DELAY_S;
    if !may_try {
        return;
    }
    if p.scheduled() {
        if start(srv, SaveKind::Background).is_ok() {
            p.scheduled.store(false, Ordering::Relaxed);
        }
        return;
    }
    let rules = srv.settings.load().ints(t::SAVE).to_vec();
    let changes = changes_since_save(srv);
    let since = now - srv.lastsave.load(Ordering::Relaxed);
    for rule in rules.chunks_exact(2) {
        let (secs, want) = (rule[0], rule[1].max(0) as u64);
        if changes >= want && since > secs {
            info!("{want} changes in {secs} seconds. Saving...");
            let _ = start(srv, SaveKind::Background);
            return;
        }
    }
}

/// FLUSHALL with save rules configured writes the emptied dataset at once, replacing any
/// save in progress, so a restart does not bring back what was flushed (Valkey's
/// `flushAllDataAndResetRDB`). The save runs on a thread of its own: the caller may hold
/// slot locks (inside EXEC).
pub fn after_flushall(srv: &Server) {
    // A replica's full sync empties the keyspace with a FLUSHALL before loading the primary's
    // snapshot: that is not a user's flush (Valkey empties it directly), so nothing is saved.
    if srv.repl.loading() || srv.persist.loading() {
        return;
    }
    // A running BGSAVE writes data that no longer exists: Valkey kills its child whether or
    // not save rules call for a new save (integration/rdb "Test FLUSHALL aborts bgsave"). A
    // SAVE is left to finish, as Valkey's blocks FLUSHALL until it is done.
    let background = srv.persist.running.lock().as_ref().is_some_and(|r| r.kind == SaveKind::Background);
    if background {
        srv.persist.abort.store(true, Ordering::Release);
    }
    if srv.settings.load().ints(t::SAVE).is_empty() {
        return;
    }
    let Some(srv) = srv.arc() else { return };
    let spawned = std::thread::Builder::new().name("hotkv-flush-save".into()).spawn(move || {
        let deadline = Instant::now() + FINAL_SAVE_WAIT;
        while Instant::now() < deadline && !srv.is_shutting_down() {
            match start(&srv, SaveKind::Foreground) {
                Ok(done) => {
                    let _ = done.blocking_recv();
                    return;
                }
                Err(_) => std::thread::sleep(Duration::from_millis(10)),
            }
        }
    });
    if let Err(e) = spawned {
        warn!(cause = %e, "cannot save after FLUSHALL");
    }
}

/// BGSAVE: the reply text, or the error.
pub fn bgsave(srv: &Arc<Server>, schedule: bool, in_exec: bool) -> Result<&'static str, String> {
    let p = &srv.persist;
    if p.in_progress() {
        return Err("Background save already in progress".into());
    }
    // Inside EXEC the transaction's slot locks may be held: the cut could not be taken, so
    // the save waits for the cron, as Valkey schedules a BGSAVE issued inside MULTI.
    if in_exec {
        p.scheduled.store(true, Ordering::Relaxed);
        return Ok("Background saving scheduled");
    }
    // A running AOF rewrite is Valkey's other child: its snapshot may not be cut yet, so ask
    // the AOF rather than the keyspace.
    if crate::aof::wire::rewrite_in_progress(srv).is_some() {
        if schedule {
            p.scheduled.store(true, Ordering::Relaxed);
            return Ok("Background saving scheduled");
        }
        return Err("Another child process is active (AOF?): can't BGSAVE right now. Use BGSAVE SCHEDULE in order to \
                    schedule a BGSAVE whenever possible."
            .into());
    }
    match start(srv, SaveKind::Background) {
        Ok(_) => Ok("Background saving started"),
        Err(StartError::InProgress) => Err("Background save already in progress".into()),
        Err(StartError::Busy) if schedule => {
            p.scheduled.store(true, Ordering::Relaxed);
            Ok("Background saving scheduled")
        }
        // A replica's full sync holds the snapshot: in Valkey that is an RDB child too.
        Err(StartError::Busy) => Err("Background save already in progress".into()),
    }
}

/// A replica is about to put the snapshot its primary sent in place of `dbfilename`: a
/// background save of the old data would rename its own file over it when done, so it is
/// abandoned, as Valkey kills its RDB child at that point. Returns whether one was running
/// (the caller waits for [`Persistence::in_progress`] to end).
pub fn abort_for_synced_file(srv: &Server) -> bool {
    let p = &srv.persist;
    let background = p.running.lock().as_ref().is_some_and(|r| r.kind == SaveKind::Background);
    if background {
        info!(
            "Replica is about to load the RDB file received from the primary, but there is a background save running. Aborting it and removing its temp file to avoid any race"
        );
        p.abort.store(true, Ordering::Release);
    }
    background
}

/// BGSAVE CANCEL (Valkey 8.1; 8.0 has none): the running background save gives up (no file, no error), or
/// the scheduled one is dropped; the reply text, or the error.
pub fn bgsave_cancel(srv: &Server) -> Result<&'static str, String> {
    let p = &srv.persist;
    let background = p.running.lock().as_ref().is_some_and(|r| r.kind == SaveKind::Background);
    if background {
        info!("Background saving will be aborted due to user request");
        p.abort.store(true, Ordering::Release);
        return Ok("Background saving cancelled");
    }
    if p.scheduled.swap(false, Ordering::Relaxed) {
        info!("Scheduled background saving will be cancelled due to user request");
        return Ok("Scheduled background saving cancelled");
    }
    Err("Background saving is currently not in progress or scheduled".into())
}

/// Saves now and waits for the end, for SHUTDOWN and the signals: a running save of ours is
/// abandoned (Valkey kills its child) and a full sync holding the snapshot is waited for, up
/// to [`FINAL_SAVE_WAIT`].
pub async fn save_and_wait(srv: &Arc<Server>) -> SaveResult {
    let deadline = Instant::now() + FINAL_SAVE_WAIT;
    loop {
        if srv.persist.in_progress() {
            warn!("There is a child saving an .rdb. Killing it!");
            srv.persist.abort.store(true, Ordering::Release);
        }
        let s = srv.clone();
        let started = tokio::task::spawn_blocking(move || start(&s, SaveKind::Foreground)).await;
        match started {
            Ok(Ok(done)) => return done.await.unwrap_or_else(|_| Err("the save thread ended".into())),
            Ok(Err(_)) if Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            Ok(Err(e)) => return Err(format!("{e:?}")),
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Seconds between background save attempts after a failure (CONFIG_BGSAVE_RETRY_DELAY).
const BGSAVE_RETRY_DELAY_S: i64 = 5;

/// How long a final save waits for the keyspace's snapshot to be free.
const FINAL_SAVE_WAIT: Duration = Duration::from_secs(60);

/// The final save of a shutdown (Valkey's `finishShutdown`, its RDB part): saves when `save`
/// has rules and NOSAVE was not given, or when SAVE was. `Err` when the save failed and FORCE
/// was not given: the server then keeps running, as Valkey's does.
pub async fn final_save(srv: &Arc<Server>, nosave: bool, save: bool, force: bool) -> Result<(), ()> {
    let rules = !srv.settings.load().ints(t::SAVE).is_empty();
    if !((rules && !nosave) || save) {
        return Ok(());
    }
    // A half-loaded dataset must not replace the file it is being loaded from.
    if srv.persist.loading() {
        warn!("Not saving the final RDB snapshot: the dataset is still loading");
        return Ok(());
    }
    info!("Saving the final RDB snapshot before exiting.");
    match save_and_wait(srv).await {
        Ok(()) => Ok(()),
        Err(_) if force => {
            warn!("Error trying to save the DB. Exit anyway.");
            Ok(())
        }
        Err(_) => {
            warn!("Error trying to save the DB, can't exit.");
            Err(())
        }
    }
}

/// DEBUG RELOAD: saves (unless NOSAVE), empties the keyspace (unless NOFLUSH) and loads the
/// file back; the error is the reply. Other clients keep running and see -LOADING while
/// the file loads (Valkey blocks them instead).
pub async fn debug_reload(
    srv: &Arc<Server>,
    save: bool,
    flush: bool,
    functions: startup::FunctionsFromFile,
) -> Result<(), &'static str> {
    if save {
        let s = srv.clone();
        let done = tokio::task::spawn_blocking(move || start(&s, SaveKind::Foreground))
            .await
            .map_err(|_| "ERR")?
            .map_err(|_| "ERR")?;
        done.await.map_err(|_| "ERR")?.map_err(|_| "ERR")?;
    }
    let s = srv.clone();
    let loaded = tokio::task::spawn_blocking(move || {
        if flush {
            flush_all(&s);
        }
        startup::load_file_with(&s, functions)
    })
    .await;
    match loaded {
        Ok(Ok(Some(_))) => {
            info!("DB reloaded by DEBUG RELOAD");
            Ok(())
        }
        Ok(Err(e)) => {
            warn!("{e}");
            Err("ERR Error trying to load the RDB dump, check server logs.")
        }
        _ => Err("ERR Error trying to load the RDB dump, check server logs."),
    }
}

/// Empties every database, one slot lock at a time (a pending snapshot slot is written out
/// first, so a save in progress keeps its image). Tracking clients drop their caches, as after
/// Valkey's `emptyData`.
pub(crate) fn flush_all(srv: &Server) {
    if srv.tracking.active() || srv.tracking.total_keys() > 0 {
        srv.tracking.flushed(&srv.clients.snapshot());
    }
    for db in 0..srv.ks.databases() {
        if srv.ks.db_if_used(db).is_none() {
            continue;
        }
        for slot in 0..hotkv_engine::slot::SLOTS as u16 {
            if srv.ks.db(db).slot(slot).keys() == 0 {
                continue;
            }
            let mut table = srv.ks.lock_slot(db, slot);
            drop(table.take_all());
            srv.ks.db(db).slot(slot).sync(&table);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::value::Value;
    use crate::registry::Registry;

    /// A running-shaped server (an `Arc` of itself) saving into a fresh temp dir.
    fn server_in_temp_dir() -> (Arc<Server>, std::path::PathBuf) {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "hotkv-persist-unit-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut s = crate::default_settings();
        s.set(t::DIR, Value::Str(dir.display().to_string()));
        let srv = Server::new(s, None, Registry::new(crate::cmd::commands())).into_arc();
        (srv, dir)
    }

    fn wait_idle(srv: &Server) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while srv.persist.in_progress() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!srv.persist.in_progress(), "the save did not end");
    }

    #[test]
    fn bgsave_waits_for_a_snapshot_a_full_sync_holds_and_the_cron_starts_it() {
        let (srv, dir) = server_in_temp_dir();
        // What a replica's full sync does: holds the keyspace's one snapshot.
        let held = srv.ks.begin_snapshot(Box::new(|_, _, _| {}), Box::new(|_| {}), || {}).unwrap();
        assert_eq!(bgsave(&srv, false, false), Err("Background save already in progress".to_string()));
        assert_eq!(bgsave(&srv, true, false), Ok("Background saving scheduled"));
        cron(&srv);
        assert!(srv.persist.scheduled(), "still held: still scheduled");
        assert!(!dir.join("dump.rdb").exists());
        assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0, "a busy start leaves no temp file");
        srv.ks.drive_snapshot(&held, || true);
        cron(&srv);
        assert!(!srv.persist.scheduled());
        wait_idle(&srv);
        assert!(srv.persist.last_ok() && dir.join("dump.rdb").exists());
        assert_eq!(figures(&srv).saves, 1);
        // Inside EXEC: scheduled without trying.
        assert_eq!(bgsave(&srv, false, true), Ok("Background saving scheduled"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_save_rules_wait_for_a_full_sync_to_finish_loading() {
        let (srv, dir) = server_in_temp_dir();
        let mut s = (**srv.settings.load()).clone();
        s.set(t::SAVE, Value::Ints(vec![1, 1]));
        srv.install_settings(s);
        let mut c = crate::cmd::testutil::client(&srv, 40001);
        assert_eq!(c.run(&srv, &["SET", "k", "v"]), "+OK\r\n");
        srv.lastsave.store(0, Ordering::Relaxed);
        srv.repl.set_loading_for_test(true);
        cron(&srv);
        assert!(!srv.persist.in_progress(), "a save started while a full sync loads");
        srv.repl.set_loading_for_test(false);
        cron(&srv);
        wait_idle(&srv);
        assert!(dir.join("dump.rdb").exists(), "the rule's save once the load is over");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_failed_background_save_denies_writes_only_with_rules_and_the_directive() {
        let (srv, dir) = server_in_temp_dir();
        std::fs::remove_dir_all(&dir).unwrap();
        let done = start(&srv, SaveKind::Background).expect("started");
        let failed = done.blocking_recv().unwrap();
        assert!(failed.unwrap_err().starts_with("Failed opening the temp RDB file temp-"));
        assert!(!srv.persist.last_ok());
        let mut rt = (**srv.rt.load()).clone();
        assert!(denies_writes(&srv, &rt));
        rt.save_rules = false;
        assert!(!denies_writes(&srv, &rt));
        rt.save_rules = true;
        rt.stop_writes_on_bgsave_error = false;
        assert!(!denies_writes(&srv, &rt));
        // A successful SAVE clears it, as Valkey's rdbSave does.
        std::fs::create_dir_all(&dir).unwrap();
        let ok = start(&srv, SaveKind::Foreground).unwrap().blocking_recv().unwrap();
        assert!(ok.is_ok() && srv.persist.last_ok());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
