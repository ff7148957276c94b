//! Loading `dump.rdb` when the server starts, and DEBUG RELOAD's load.
//!
//! Valkey 8.0 opens its listeners first and loads afterwards, answering `-LOADING` to
//! clients meanwhile (`loadDataFromDisk` between `initListeners` and "Ready to accept
//! connections"); hotkv does the same, with `loading:1` and the `loading_*` fields in INFO.
//! A file that does not load is fatal: the log names the file and the byte offset, and the
//! process exits with status 1, as Valkey's "Fatal error loading the DB" does.

use std::fs::File;
use std::io::Read;
use std::path::Path;
use std::time::Instant;

use hotkv_engine::rdb::{LoadStats, Loader, RdbError, RdbReader};
use hotkv_replication::SyncPoint;
use tracing::{info, warn};

use crate::config::table as t;
use crate::server::{Server, unix_ms};

/// Why the file did not load.
#[derive(Debug)]
pub struct LoadError {
    /// The file.
    pub path: String,
    /// The byte offset of the record that failed.
    pub offset: u64,
    /// What was wrong.
    pub cause: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Error loading the RDB file {} at offset {}: {}", self.path, self.offset, self.cause)
    }
}

/// Loads `dbfilename` from `dir` if it exists, with `loading` set meanwhile; `Ok(None)` when
/// there is no file (a first start). Logs Valkey's lines.
pub fn load_file(srv: &Server) -> Result<Option<LoadStats>, LoadError> {
    load_file_with(srv, FunctionsFromFile::Replace)
}

/// What the libraries in a loaded file do to the ones loaded already.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FunctionsFromFile {
    /// They replace them all (a start, DEBUG RELOAD).
    Replace,
    /// They join them; a library loaded already fails the load (DEBUG RELOAD NOFLUSH).
    Append,
    /// They join them; the file's copy of a library wins (DEBUG RELOAD NOFLUSH MERGE).
    Merge,
}

/// [`load_file`], with the file's libraries applied as `functions` says.
pub fn load_file_with(srv: &Server, functions: FunctionsFromFile) -> Result<Option<LoadStats>, LoadError> {
    let path = super::file::rdb_path(srv);
    let file = match File::open(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(LoadError { path: path.display().to_string(), offset: 0, cause: super::file::os_text(&e) });
        }
    };
    let total = file.metadata().map_or(0, |m| m.len());
    let p = &srv.persist;
    *p.load.lock() = super::LoadProgress { start_time: unix_ms() / 1000, total_bytes: total, loaded_bytes: 0 };
    p.set_loading(true);
    let result = read_into(srv, file, &path, functions);
    p.set_loading(false);
    let stats = result?;
    p.set_last_load(stats.loaded, stats.expired);
    info!(
        keys = stats.loaded,
        expired = stats.expired,
        "Done loading RDB, keys loaded: {}, keys expired: {}.",
        stats.loaded,
        stats.expired
    );
    Ok(Some(stats))
}

/// Loads at start: the file, then the replication id and offset it carries, then (in
/// cluster mode) the keys checked against the slots this node serves. The error is what to
/// print before exiting.
pub fn load_at_start(srv: &Server) -> Result<(), String> {
    let start = Instant::now();
    let stats = match load_file(srv) {
        Ok(Some(stats)) => stats,
        Ok(None) => return Ok(()),
        Err(e) => {
            warn!("{e}");
            warn!("Fatal error loading the DB, check server logs. Exiting.");
            return Err(e.to_string());
        }
    };
    info!("DB loaded from disk: {:.3} seconds", start.elapsed().as_secs_f64());
    restore_replication(srv, &stats);
    verify_cluster_slots(srv);
    Ok(())
}

fn read_into(srv: &Server, mut file: File, path: &Path, functions: FunctionsFromFile) -> Result<LoadStats, LoadError> {
    let engine = srv.engine.load();
    let mut reader = RdbReader::new(srv.rt.load().proto_max_bulk_len);
    // A primary that continues its replication history sends its replicas a DEL for every
    // key it leaves out as expired (they still hold them). Past a backlog's worth the history
    // could not be continued anyway, so the names are kept up to that.
    let mut loader = Loader::new(&srv.ks, &engine, unix_ms());
    if configured_replica(srv) {
        // As a Valkey replica loads them: its primary's stream deletes them.
        loader = loader.keep_expired();
    } else {
        let backlog = srv.settings.load().int(t::REPL_BACKLOG_SIZE).max(0) as usize;
        loader = loader.collect_expired(backlog);
    }
    let mut block = vec![0u8; READ_BLOCK];
    let mut read = 0u64;
    let mut last_log = Instant::now();
    // `key-load-delay`, so tests can watch a load in progress.
    let delay = srv.settings.load().int(t::KEY_LOAD_DELAY);
    let fail = |reader: &RdbReader, e: RdbError| LoadError {
        path: path.display().to_string(),
        offset: reader.offset(),
        cause: match e {
            RdbError::Truncated => "Unexpected EOF reading RDB file (Short read or OOM loading DB)".to_string(),
            // Valkey's lines: its rdbLoad logs the two sums, then reports "RDB CRC error".
            RdbError::Checksum { stored, computed } => {
                warn!("Wrong RDB checksum expected: ({computed:x}) but got ({stored:x}). Aborting now.");
                "RDB CRC error".to_string()
            }
            e => e.to_string(),
        },
    };
    loop {
        loop {
            match reader.next_item() {
                Ok(Some(item)) => {
                    if let hotkv_engine::rdb::Item::Aux { key, value } = &item
                        && key == b"redis-ver"
                    {
                        info!("Loading RDB produced by version {}", String::from_utf8_lossy(value));
                    }
                    if delay != 0 && matches!(item, hotkv_engine::rdb::Item::Entry { .. }) {
                        crate::replication::key_load_delay(delay);
                    }
                    match loader.apply(item) {
                        Ok(true) => {
                            let stats = loader.finish();
                            let installed = match functions {
                                FunctionsFromFile::Replace => {
                                    crate::script::install_functions(srv, &stats.functions);
                                    Ok(())
                                }
                                FunctionsFromFile::Append => crate::script::add_functions(srv, &stats.functions, false),
                                FunctionsFromFile::Merge => crate::script::add_functions(srv, &stats.functions, true),
                            };
                            if let Err(e) = installed {
                                return Err(LoadError {
                                    path: path.display().to_string(),
                                    offset: reader.offset(),
                                    cause: e,
                                });
                            }
                            return Ok(stats);
                        }
                        Ok(false) => {}
                        Err(e) => return Err(fail(&reader, e)),
                    }
                }
                Ok(None) => break,
                Err(e) => return Err(fail(&reader, e)),
            }
        }
        let n = match file.read(&mut block) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(fail(&reader, RdbError::Io(e.kind()))),
        };
        if n == 0 {
            let e = reader.finish().err().unwrap_or(RdbError::Truncated);
            return Err(fail(&reader, e));
        }
        read += n as u64;
        srv.persist.load.lock().loaded_bytes = read;
        reader.feed(&block[..n]);
        if last_log.elapsed().as_secs() >= PROGRESS_LOG_S {
            last_log = Instant::now();
            let total = srv.persist.load.lock().total_bytes.max(1);
            info!(
                keys = loader.stats().loaded,
                "Loading RDB: {} keys, {:.2}% of the file",
                loader.stats().loaded,
                read as f64 * 100.0 / total as f64
            );
        }
    }
}

/// Puts the file's replication id and offset back (Valkey's `loadDataFromDisk`). A primary
/// keeps the file's id as its second one, valid up to the offset, and draws a new one, as
/// after a promotion, so its replicas can continue with a partial resync. A replica takes
/// them as its cached primary's and asks its primary to continue from there.
fn restore_replication(srv: &Server, stats: &LoadStats) {
    let aux = |name: &[u8]| stats.aux.iter().find(|(k, _)| k == name).map(|(_, v)| String::from_utf8_lossy(v));
    let (Some(replid), Some(offset)) = (aux(b"repl-id"), aux(b"repl-offset")) else { return };
    let Ok(offset) = offset.parse::<i64>() else { return };
    let stream_db = aux(b"repl-stream-db").and_then(|d| d.parse::<i64>().ok());
    // Older servers may save -1 for the database or the offset: no usable history then.
    if replid.len() != 40 || offset < 0 || stream_db == Some(-1) {
        return;
    }
    let point = SyncPoint { replid: replid.to_string(), offset: offset as u64 };
    if configured_replica(srv) {
        // The file is this replica's copy of its primary's stream up to `offset` (the cut
        // reads the offset and the data together, see `Primary::apply_gate`): the first
        // PSYNC asks to continue from there, as Valkey's replicationCachePrimaryUsingMyself.
        srv.repl.primary.upstream_full_sync_done(&point);
        return;
    }
    if stats.expired_overflow {
        // Valkey would append the DELs and trim its backlog past the history: replicas resync
        // in full either way.
        info!(
            "Too many keys expired while loading ({}) for the replication backlog: replicas will resynchronize in full.",
            stats.expired
        );
        return;
    }
    srv.repl.primary.upstream_full_sync_done(&point);
    srv.repl.primary.shift_replid();
    // The replicas still hold what expired while this node was down: delete it there, in the
    // stream that continues the history (Valkey propagates these DELs during the load). The
    // keyspace's sink is not installed yet at this point: straight into the stream.
    if !stats.expired_keys.is_empty() {
        let mut dels = hotkv_engine::propagate::Effects::default();
        dels.begin(true);
        let verb = hotkv_engine::propagate::del_verb(srv.engine.load().lazy_expire);
        for (db, key) in &stats.expired_keys {
            dels.push(*db, &[verb, key]);
        }
        hotkv_engine::propagate::WriteSink::append(&*srv.repl.primary, &dels);
    }
}

/// Whether this node starts as a replica (`replicaof`, or a replica in its nodes.conf).
fn configured_replica(srv: &Server) -> bool {
    match &srv.cluster {
        Some(c) => c.state().myself().primary.is_some(),
        None => !srv.settings.load().list(t::REPLICAOF).is_empty(),
    }
}

/// In cluster mode, keys of slots this node neither serves nor imports are dealt with as
/// Valkey's `verifyClusterConfigWithData` does: an unassigned slot is claimed, a slot another
/// node serves is emptied. A replica is left alone: its primary's stream decides.
pub(crate) fn verify_cluster_slots(srv: &Server) {
    let Some(node) = &srv.cluster else { return };
    let mut changed = false;
    {
        let mut st = node.state();
        if st.myself().primary.is_some() {
            return;
        }
        let me = st.myself_id();
        for slot in 0..hotkv_engine::slot::SLOTS as u16 {
            if srv.ks.db(0).slot(slot).keys() == 0 {
                continue;
            }
            let owner = st.owner(slot).map(|n| n.id);
            if owner == Some(me) || st.importing().contains_key(&slot) {
                continue;
            }
            changed = true;
            if owner.is_none() {
                info!(slot, "I have keys for unassigned slot {slot}. Taking responsibility for it.");
                let _ = st.add_slots(&[slot]);
            } else {
                info!(
                    slot,
                    "I have keys for slot {slot}, but the slot is assigned to another node. Deleting keys in the slot."
                );
                let mut table = srv.ks.lock_slot(0, slot);
                drop(table.take_all());
                srv.ks.db(0).slot(slot).sync(&table);
            }
        }
    }
    if changed {
        node.changed();
    }
}

/// How much is read from the file at a time.
const READ_BLOCK: usize = 256 * 1024;
/// Seconds between progress lines while loading.
const PROGRESS_LOG_S: u64 = 2;
