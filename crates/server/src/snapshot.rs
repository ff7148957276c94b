//! One RDB stream from an engine snapshot, for everything that needs the dataset as a file:
//! a replica's full sync and `dump.rdb` (BGSAVE, SAVE, the save rules, SHUTDOWN, DEBUG
//! RELOAD).
//!
//! The caller runs [`stream_rdb`] on a thread of its own. It starts a point-in-time snapshot
//! (`hotkv_engine::snapshot`: every slot pending at the cut, each written out by whoever locks
//! it first), reads the replication offset at the cut for the AUX fields, and hands the file's
//! bytes, in order, to the caller's `ship`. Slots that clients write meanwhile are serialised
//! by the writing client's thread into the same ordered buffer, so the consumer's pace only
//! decides when the snapshot's own pass moves on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use hotkv_engine::rdb::{AuxValue, RdbWriter, WriteOptions};
use hotkv_engine::snapshot::{Chunk, SnapshotError};
use hotkv_replication::SyncPoint;
use parking_lot::Mutex;

use crate::server::{Server, unix_ms};

/// How a stream ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StreamEnd {
    /// The whole file was shipped; it holds this many keys.
    Done {
        /// Keys at the cut.
        keys: usize,
    },
    /// Another snapshot held the keyspace and `retry_busy` said not to wait.
    Busy,
    /// `ship` refused bytes (its consumer went away or failed); the file is incomplete.
    Abandoned,
}

/// What the caller learns once the cut is fixed.
#[derive(Debug, Clone)]
pub struct Cut {
    /// The replication stream's id and offset at the cut (also in the file's AUX fields).
    pub point: SyncPoint,
    /// Keys the image holds.
    pub keys: usize,
}

/// How to produce the stream.
#[derive(Debug, Clone, Default)]
pub struct StreamOptions {
    /// Compression and checksum.
    pub write: WriteOptions,
    /// Slows the snapshot's own pass by this much per key it writes (`rdb-key-save-delay`,
    /// for tests).
    pub key_delay: Duration,
    /// Counts the keys written out (INFO `current_save_keys_processed`).
    pub progress: Arc<AtomicU64>,
    /// Runs at the cut, with every slot lock held (an AOF rewrite switches its incr file
    /// there, so the file and the image split the write stream at the same call).
    pub at_cut: Option<CutHook>,
    /// Extra AUX fields, computed at the cut (a full sync's `cluster-slot-states`).
    pub aux_at_cut: Option<AuxHook>,
    /// Asked between slots and during `key_delay` sleeps: true abandons the stream (a save
    /// that FLUSHALL or SHUTDOWN replaces, as Valkey kills its child).
    pub stop: Option<StopHook>,
}

/// Whether a stream should be abandoned: must be cheap and must not take a slot lock.
#[derive(Clone)]
pub struct StopHook(pub Arc<dyn Fn() -> bool + Send + Sync>);

impl std::fmt::Debug for StopHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StopHook")
    }
}

/// AUX fields: name and value.
pub type AuxFields = Vec<(&'static str, Vec<u8>)>;

/// Computes AUX fields at a snapshot's cut: must be short and must not take a slot lock.
#[derive(Clone)]
pub struct AuxHook(pub Arc<dyn Fn() -> AuxFields + Send + Sync>);

impl std::fmt::Debug for AuxHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AuxHook")
    }
}

/// Code run at a snapshot's cut: must be short and must not take a slot lock.
#[derive(Clone)]
pub struct CutHook(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for CutHook {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CutHook")
    }
}

/// Streams the keyspace of `srv` as one RDB file (see the module documentation). On a busy
/// keyspace `retry_busy` is asked whether to wait and try again (it may sleep); `started` is
/// called once the cut is fixed, before any byte is shipped; `ship` gets the bytes in file
/// order and returns false to abandon.
pub fn stream_rdb(
    srv: &Server,
    opts: &StreamOptions,
    mut retry_busy: impl FnMut() -> bool,
    started: impl FnOnce(&Cut),
    mut ship: impl FnMut(Bytes) -> bool,
) -> StreamEnd {
    let out = Arc::new(Mutex::new(RdbOut { writer: None, db: None, ready: Vec::new() }));
    let (progress, key_delay, write_opts) = (&opts.progress, opts.key_delay, opts.write);
    let mut started = Some(started);
    let snap = loop {
        let write = slot_writer(out.clone(), progress.clone());
        let mut point = None;
        let o = out.clone();
        let primary = srv.repl.primary.clone();
        // A replica applying its primary's stream must not be halfway between applying a batch
        // and counting it in the offset the cut reads.
        let gate = srv.repl.primary.cut_gate();
        let begun = srv.ks.begin_snapshot(write, Box::new(|_: Chunk| {}), || {
            if let Some(hook) = &opts.at_cut {
                (hook.0)();
            }
            let p = primary.snapshot_point();
            let mut head = Vec::with_capacity(256);
            let extra = opts.aux_at_cut.as_ref().map(|h| (h.0)()).unwrap_or_default();
            let mut aux = vec![
                ("redis-ver", AuxValue::Str(crate::cmd::conn::REDIS_VERSION.as_bytes())),
                ("redis-bits", AuxValue::Int(64)),
                ("ctime", AuxValue::Int(unix_ms() / 1000)),
                ("used-mem", AuxValue::Int(srv.memory.used() as i64)),
                ("repl-stream-db", AuxValue::Int(0)),
                ("repl-id", AuxValue::Str(p.replid.as_bytes())),
                ("repl-offset", AuxValue::Int(p.offset as i64)),
                ("aof-base", AuxValue::Int(0)),
            ];
            aux.extend(extra.iter().map(|(k, v)| (*k, AuxValue::Str(v))));
            let mut writer = RdbWriter::with_options(&mut head, &aux, write_opts);
            // Libraries at the cut too: FUNCTION LOAD goes through the write stream, so the
            // image and the stream after it agree on them.
            for lib in srv.functions.libraries() {
                writer.function(&mut head, &lib.code);
            }
            let mut o = o.lock();
            o.writer = Some(writer);
            o.ready.push(Bytes::from(head));
            point = Some(p);
        });
        drop(gate);
        match begun {
            Ok(s) => {
                if let (Some(point), Some(f)) = (point, started.take()) {
                    f(&Cut { point, keys: s.keys() });
                }
                break s;
            }
            Err(SnapshotError::Busy) if retry_busy() => {}
            Err(SnapshotError::Busy) => return StreamEnd::Busy,
        }
    };
    let mut ship_ready = |out: &Mutex<RdbOut>| -> bool {
        let ready = std::mem::take(&mut out.lock().ready);
        ready.into_iter().all(&mut ship)
    };
    let mut alive = true;
    let mut paced = 0;
    let stopped = || opts.stop.as_ref().is_some_and(|h| (h.0)());
    srv.ks.drive_snapshot(&snap, || {
        if !key_delay.is_zero() {
            let done = progress.load(Ordering::Relaxed);
            let owed = key_delay * (done - paced).min(u64::from(u32::MAX)) as u32;
            paced = done;
            // In steps: keys a writer serialised count too, so one slot's turn may owe
            // seconds, and a stop must not wait for them.
            let until = std::time::Instant::now() + owed;
            while !stopped() {
                let left = until.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    break;
                }
                std::thread::sleep(left.min(STOP_CHECK));
            }
        }
        alive = alive && !stopped() && ship_ready(&out);
        alive
    });
    if !alive {
        return StreamEnd::Abandoned;
    }
    {
        let mut o = out.lock();
        let mut tail = Vec::with_capacity(16);
        if let Some(w) = o.writer.take() {
            w.finish(&mut tail);
        }
        o.ready.push(Bytes::from(tail));
    }
    if !ship_ready(&out) {
        return StreamEnd::Abandoned;
    }
    StreamEnd::Done { keys: snap.keys() }
}

/// How often a paced stream looks at its stop hook while it sleeps.
const STOP_CHECK: Duration = Duration::from_millis(10);

/// The file being produced, behind one lock: chunks leave in the order the checksum saw
/// them, whichever thread wrote each slot.
struct RdbOut {
    writer: Option<RdbWriter>,
    db: Option<usize>,
    ready: Vec<Bytes>,
}

/// The engine's slot writer: appends the slot's keys to the ordered buffer. Runs with the
/// slot's lock held, on whichever thread locked it first.
fn slot_writer(out: Arc<Mutex<RdbOut>>, progress: Arc<AtomicU64>) -> Box<hotkv_engine::snapshot::SlotWriter> {
    Box::new(move |db: usize, table: &hotkv_engine::table::Table, _: &mut Vec<u8>| {
        let mut o = out.lock();
        let RdbOut { writer, db: at, ready } = &mut *o;
        let Some(w) = writer.as_mut() else { return };
        let mut buf = Vec::with_capacity(table.len() * 48 + 16);
        if *at != Some(db) {
            w.select_db(&mut buf, db);
            *at = Some(db);
        }
        let n = w.table(&mut buf, table);
        ready.push(Bytes::from(buf));
        progress.fetch_add(n as u64, Ordering::Relaxed);
    })
}
