//! The files side of BGREWRITEAOF and of opening the AOF at start: new incr files, new
//! bases written under a temp name, the manifest published atomically, history deleted; the
//! command form of a base; the automatic-rewrite rule and the retry limiter; the counters
//! INFO persistence shows.
//!
//! A rewrite, as `rewriteAppendOnlyFileBackground` and `backgroundRewriteDoneHandler` do it
//! without a fork:
//!
//! 1. [`AofFiles::start_rewrite`] opens the next incr file and persists a manifest listing it
//!    (the old files still make up the data set, so a crash now loses nothing);
//! 2. at the snapshot's cut (every slot lock held) the server calls
//!    [`AofWriter::begin_switch`](super::writer::AofWriter::begin_switch) with that file;
//! 3. the snapshot's bytes go into a [`BaseWriter`] (RDB, or commands from
//!    [`write_table_commands`] when `aof-use-rdb-preamble no`), which writes a temp file and
//!    syncs it;
//! 4. [`AofFiles::finish_rewrite`] renames it to the next base name, marks the old base and
//!    every incr file but the current one as history, persists the manifest, and deletes
//!    the history files. [`AofFiles::abort_rewrite`] removes the temp file instead.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};

use hotkv_engine::entry::ValueRef;
use hotkv_engine::object::Object;
use hotkv_engine::propagate::{write_command, write_select};
use hotkv_engine::table::Table;

use super::AofPaths;
use super::manifest::{AofFile, Manifest, TEMP_PREFIX};
use crate::persistence::file::SyncedFile;

/// The manifest and the directory it describes. The server keeps one, behind a lock, for the
/// life of the process.
#[derive(Debug)]
pub struct AofFiles {
    paths: AofPaths,
    manifest: Manifest,
}

/// An incr file opened for appending.
#[derive(Debug)]
pub struct OpenedIncr {
    /// The file (for [`AofWriter`](super::writer::AofWriter)).
    pub file: File,
    /// Its name in the manifest.
    pub name: String,
    /// Its size when opened.
    pub size: u64,
}

/// What a published rewrite left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Published {
    /// The new base's name.
    pub base: String,
    /// Its size (`aof_base_size`; add the current incr file's size for `aof_current_size`).
    pub base_size: u64,
}

impl AofFiles {
    /// Bookkeeping over `paths` with the manifest read at start.
    pub fn new(paths: AofPaths, manifest: Manifest) -> AofFiles {
        AofFiles { paths, manifest }
    }

    /// The manifest as last published.
    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// Where the files live.
    pub fn paths(&self) -> &AofPaths {
        &self.paths
    }

    /// Valkey's `aofOpenIfNeededOnServerStart`, after the data was loaded: with no base and
    /// no incr file yet, writes a base of the loaded data set (`write_base` fills it) so the
    /// AOF alone can rebuild it; then opens the last incr file for appending, or creates the
    /// first, and persists the manifest.
    pub fn open_on_start(
        &mut self,
        rdb_preamble: bool,
        timestamps: bool,
        write_base: impl FnOnce(&mut BaseWriter) -> io::Result<()>,
    ) -> io::Result<OpenedIncr> {
        let dir = self.paths.aof_dir();
        fs::create_dir_all(&dir).inspect_err(|e| {
            tracing::warn!("Can't open or create append-only dir {}: {e}", self.paths.dirname);
        })?;
        let mut next = self.manifest.clone();
        if next.is_empty() {
            let mut base = BaseWriter::create(&dir, "temp-rewriteaof", rdb_preamble, timestamps)?;
            write_base(&mut base)?;
            let done = base.finish()?;
            let name = next.new_base(&self.paths.filename, rdb_preamble);
            fs::rename(&done.path, name.path(&dir))?;
            tracing::info!("Creating AOF base file {} on server start", name.display_name());
        }
        let existed = !next.incr.is_empty();
        let incr = match next.incr.last() {
            Some(f) => f.clone(),
            None => next.add_incr(&self.paths.filename),
        };
        let file = OpenOptions::new().append(true).create(true).open(incr.path(&dir)).inspect_err(|e| {
            tracing::warn!("Can't open the append-only file {}: {e}", incr.display_name());
        })?;
        next.persist(&dir, &self.paths.filename)?;
        self.manifest = next;
        let size = file.metadata()?.len();
        if existed {
            tracing::info!("Opening AOF incr file {} on server start", incr.display_name());
        } else {
            tracing::info!("Creating AOF incr file {} on server start", incr.display_name());
        }
        Ok(OpenedIncr { file, name: incr.display_name(), size })
    }

    /// Valkey's `openNewIncrAofForAppend`: creates the next incr file and persists a manifest
    /// listing it. On failure nothing changed (the manifest on disk and here are the old).
    pub fn start_rewrite(&mut self) -> io::Result<OpenedIncr> {
        let dir = self.paths.aof_dir();
        fs::create_dir_all(&dir)?;
        let mut next = self.manifest.clone();
        let incr = next.add_incr(&self.paths.filename);
        let path = incr.path(&dir);
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(&path).inspect_err(|e| {
            tracing::warn!("Can't open the append-only file {}: {e}", incr.display_name());
        })?;
        if let Err(e) = next.persist(&dir, &self.paths.filename) {
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        self.manifest = next;
        tracing::info!("Creating AOF incr file {} on background rewrite", incr.display_name());
        Ok(OpenedIncr { file, name: incr.display_name(), size: 0 })
    }

    /// Prepares a rewrite with the AOF off, which opens no incr file: only the directory.
    pub fn start_base_only(&self) -> io::Result<()> {
        fs::create_dir_all(self.paths.aof_dir())
    }

    /// A writer for the rewrite's new base, under a temp name in the AOF directory.
    pub fn base_writer(&self, rdb_preamble: bool, timestamps: bool) -> io::Result<BaseWriter> {
        BaseWriter::create(&self.paths.aof_dir(), "temp-rewriteaof-bg", rdb_preamble, timestamps)
    }

    /// Valkey's `backgroundRewriteDoneHandler` on success: publishes `base` as the new base,
    /// retires the old base and every incr file but the last `keep_incr` (1 while the AOF is
    /// on: the file being written), persists the manifest and, with `auto_gc` (not
    /// `aof-disable-auto-gc`), deletes the history files. On failure the old manifest stays in
    /// force and the new base is removed.
    pub fn finish_rewrite(&mut self, base: FinishedBase, keep_incr: usize, auto_gc: bool) -> io::Result<Published> {
        let dir = self.paths.aof_dir();
        let mut next = self.manifest.clone();
        let name = next.new_base(&self.paths.filename, base.rdb);
        let target = name.path(&dir);
        let tmp_name = base.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if let Err(e) = fs::rename(&base.path, &target) {
            tracing::warn!(
                "Error trying to rename the temporary AOF base file {tmp_name} into {}: {e}",
                name.display_name()
            );
            let _ = fs::remove_file(&base.path);
            return Err(e);
        }
        tracing::info!("Successfully renamed the temporary AOF base file {tmp_name} into {}", name.display_name());
        next.retire_incr(keep_incr);
        if let Err(e) = next.persist(&dir, &self.paths.filename) {
            let _ = fs::remove_file(&target);
            return Err(e);
        }
        self.manifest = next;
        // The rewrite succeeded; a history file left behind costs only disk.
        if auto_gc && let Err(e) = self.delete_history() {
            tracing::warn!("can't delete the AOF history files: {e}");
        }
        tracing::info!("Background AOF rewrite finished successfully");
        Ok(Published { base: name.display_name(), base_size: base.size })
    }

    /// Reads the manifest again from disk (DEBUG LOADAOF, Valkey's `aofLoadManifestFromDisk`).
    pub fn reload_manifest(&mut self) -> Result<(), super::manifest::ManifestError> {
        self.manifest = self.paths.read_manifest()?;
        Ok(())
    }

    /// Removes a rewrite's temp base after a failure.
    pub fn abort_rewrite(&self, base: &Path) {
        if let Err(e) = fs::remove_file(base)
            && e.kind() != io::ErrorKind::NotFound
        {
            tracing::warn!(file = %base.display(), cause = %e, "can't remove the temp AOF base");
        }
    }

    /// Valkey's `aofDelHistoryFiles`: deletes the history files and persists a manifest
    /// without them.
    pub fn delete_history(&mut self) -> io::Result<()> {
        if self.manifest.history.is_empty() {
            return Ok(());
        }
        let dir = self.paths.aof_dir();
        for f in &self.manifest.history {
            tracing::info!("Removing the history file {} in the background", f.display_name());
            if let Err(e) = fs::remove_file(f.path(&dir))
                && e.kind() != io::ErrorKind::NotFound
            {
                tracing::warn!(file = %f.display_name(), cause = %e, "can't remove an AOF history file");
            }
        }
        let mut next = self.manifest.clone();
        next.history.clear();
        next.persist(&dir, &self.paths.filename)?;
        self.manifest = next;
        Ok(())
    }

    /// Sizes of the base and of every incr file (`aof_base_size`, `aof_current_size`).
    pub fn sizes(&self) -> (u64, u64) {
        let dir = self.paths.aof_dir();
        let size = |f: &AofFile| fs::metadata(f.path(&dir)).map_or(0, |m| m.len());
        let base = self.manifest.base.as_ref().map_or(0, size);
        (base, base + self.manifest.incr.iter().map(size).sum::<u64>())
    }
}

/// A new base being written under a temp name: RDB bytes as they come, or commands grouped
/// by database.
pub struct BaseWriter {
    out: SyncedFile,
    path: PathBuf,
    rdb: bool,
    seldb: Option<usize>,
    size: u64,
}

/// A base written and synced, waiting to be published.
#[derive(Debug)]
pub struct FinishedBase {
    /// The temp file.
    pub path: PathBuf,
    /// Whether it is an RDB file (`.base.rdb`) rather than commands (`.base.aof`).
    pub rdb: bool,
    /// Its size.
    pub size: u64,
}

impl BaseWriter {
    fn create(dir: &Path, stem: &str, rdb: bool, timestamps: bool) -> io::Result<BaseWriter> {
        debug_assert!(stem.starts_with(TEMP_PREFIX));
        let path = dir.join(format!("{stem}-{}.aof", std::process::id()));
        let file = OpenOptions::new().write(true).create(true).truncate(true).open(&path).inspect_err(|e| {
            tracing::warn!("Opening the temp file for AOF rewrite in rewriteAppendOnlyFile(): {e}");
        })?;
        let mut w = BaseWriter { out: SyncedFile::new(file, 1 << 16, 0), path, rdb, seldb: None, size: 0 };
        // A command base starts with the time it was made (`rewriteAppendOnlyFileRio`).
        if timestamps && !rdb {
            w.write(format!("#TS:{}\r\n", super::writer::unix_secs()).as_bytes())?;
        }
        Ok(w)
    }

    /// `aof-rewrite-incremental-fsync`: fsyncs every `bytes` while writing (0: only at the
    /// end).
    pub fn set_sync_every(&mut self, bytes: usize) {
        self.out.set_sync_every(bytes);
    }

    /// The incremental fsyncs done so far.
    pub fn syncs(&self) -> u64 {
        self.out.syncs()
    }

    /// Whether this base is an RDB file: the caller then writes the snapshot's RDB bytes.
    pub fn is_rdb(&self) -> bool {
        self.rdb
    }

    /// Appends bytes as they are (RDB data).
    pub fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.out.write(bytes)?;
        self.size += bytes.len() as u64;
        Ok(())
    }

    /// Appends commands of database `db` (a chunk [`write_table_commands`] made), preceded by
    /// a SELECT when the database differs from the previous chunk's.
    pub fn write_commands(&mut self, db: usize, commands: &[u8]) -> io::Result<()> {
        if commands.is_empty() {
            return Ok(());
        }
        if self.seldb != Some(db) {
            let mut select = Vec::with_capacity(24);
            write_select(&mut select, db);
            self.write(&select)?;
            self.seldb = Some(db);
        }
        self.write(commands)
    }

    /// Flushes and syncs the file (`rewriteAppendOnlyFile`'s fflush and fsync).
    pub fn finish(self) -> io::Result<FinishedBase> {
        let BaseWriter { out, path, rdb, size, .. } = self;
        if let Err((_, e)) = out.finish() {
            tracing::warn!("Write error writing append only file on disk: {e}");
            let _ = fs::remove_file(&path);
            return Err(e);
        }
        Ok(FinishedBase { path, rdb, size })
    }
}

/// Writes the keys of `table` as the commands that rebuild them, as Valkey's
/// `rewriteAppendOnlyFileRio`: SET for strings, RPUSH/SADD/ZADD/HMSET with at most 64 items
/// per command for collections, then PEXPIREAT for a key with a TTL. The signature is the
/// snapshot's `SlotWriter`, so a snapshot can produce a command base directly.
pub fn write_table_commands(_db: usize, table: &Table, out: &mut Vec<u8>) {
    for (_, e) in table.iter() {
        write_key(out, e.key(), e.value());
        if let Some(when) = e.expire() {
            let ms = itoa::Buffer::new().format(when).to_string();
            write_command(out, [&b"PEXPIREAT"[..], e.key(), ms.as_bytes()].into_iter(), 3);
        }
    }
}

fn write_key(out: &mut Vec<u8>, key: &[u8], value: ValueRef<'_>) {
    let obj = match value {
        ValueRef::Str(s) => return write_command(out, [&b"SET"[..], key, s].into_iter(), 3),
        ValueRef::Obj(o) => o,
    };
    match obj {
        Object::Str(s) => write_command(out, [&b"SET"[..], key, s.as_slice()].into_iter(), 3),
        Object::List(l) => batched(out, b"RPUSH", key, l.len(), 1, l.iter().map(|v| vec![v.to_vec()])),
        Object::Set(s) => batched(out, b"SADD", key, s.len(), 1, s.iter().map(|m| vec![m.with_bytes(<[u8]>::to_vec)])),
        Object::Hash(h) => {
            batched(
                out,
                b"HMSET",
                key,
                h.len(),
                2,
                h.iter().map(|(f, v)| vec![f.with_bytes(<[u8]>::to_vec), v.with_bytes(<[u8]>::to_vec)]),
            );
            // Field TTLs follow, one HPEXPIREAT per field, as Redis 7.4's rewriteHashObject.
            for (field, when) in h.field_ttls() {
                let ms = itoa::Buffer::new().format(when).to_string();
                let argv = [&b"HPEXPIREAT"[..], key, ms.as_bytes(), b"FIELDS", b"1", field];
                write_command(out, argv.into_iter(), 6);
            }
        }
        Object::Stream(st) => write_stream(out, key, st),
        Object::ZSet(z) => {
            let members = z.iter();
            batched(
                out,
                b"ZADD",
                key,
                members.len(),
                2,
                members.iter().map(|(m, score)| {
                    let mut s = Vec::with_capacity(24);
                    hotkv_protocol::fpconv_dtoa(*score, &mut s);
                    vec![s, m.to_vec()]
                }),
            )
        }
    }
}

/// Writes `items` (each `per` arguments) as `cmd key ...` commands of at most
/// [`ITEMS_PER_CMD`] items each.
fn batched(
    out: &mut Vec<u8>,
    cmd: &[u8],
    key: &[u8],
    len: usize,
    per: usize,
    items: impl Iterator<Item = Vec<Vec<u8>>>,
) {
    let mut left = len;
    let mut in_cmd = 0usize;
    for item in items {
        if in_cmd == 0 {
            let n = left.min(ITEMS_PER_CMD);
            header(out, 2 + n * per);
            bulk(out, cmd);
            bulk(out, key);
        }
        for a in &item {
            bulk(out, a);
        }
        in_cmd += 1;
        left = left.saturating_sub(1);
        if in_cmd == ITEMS_PER_CMD {
            in_cmd = 0;
        }
    }
}

fn header(out: &mut Vec<u8>, n: usize) {
    out.push(b'*');
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
    out.extend_from_slice(b"\r\n");
}

fn bulk(out: &mut Vec<u8>, b: &[u8]) {
    out.push(b'$');
    out.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(b);
    out.extend_from_slice(b"\r\n");
}

/// Valkey's automatic-rewrite rule (`serverCron`): with `auto-aof-rewrite-percentage` on
/// (non-zero) and the AOF over `auto-aof-rewrite-min-size`, a rewrite starts once it grew by
/// the percentage over its size after the last rewrite. Returns the growth in percent when
/// a rewrite is due. The caller also checks that the AOF is on, nothing else is rewriting
/// or saving, and [`RewriteStats::limited`].
pub fn auto_rewrite_due(current_size: u64, base_size: u64, percentage: u64, min_size: u64) -> Option<u64> {
    if percentage == 0 || current_size <= min_size {
        return None;
    }
    let base = base_size.max(1);
    let growth = (u128::from(current_size) * 100 / u128::from(base)).saturating_sub(100);
    let growth = u64::try_from(growth).unwrap_or(u64::MAX);
    (growth >= percentage).then_some(growth)
}

/// The rewrite counters of INFO persistence, and the limiter that spaces out retries after
/// repeated failures (`aofRewriteLimited`).
#[derive(Debug, Clone)]
pub struct RewriteStats {
    /// Unix seconds the running rewrite started at (`aof_current_rewrite_time_sec`).
    pub started_at: Option<u64>,
    /// `aof_rewrite_scheduled`: a rewrite waits for another background job to end.
    pub scheduled: bool,
    /// `aof_last_rewrite_time_sec` (-1 before the first).
    pub last_time_sec: i64,
    /// `aof_last_bgrewrite_status`.
    pub last_ok: bool,
    /// `aof_rewrites`: rewrites started.
    pub rewrites: u64,
    /// `aof_rewrites_consecutive_failures`.
    pub consecutive_failures: u64,
    next_delay_minutes: u64,
    next_rewrite_time: u64,
}

impl Default for RewriteStats {
    fn default() -> RewriteStats {
        RewriteStats {
            started_at: None,
            scheduled: false,
            last_time_sec: -1,
            last_ok: true,
            rewrites: 0,
            consecutive_failures: 0,
            next_delay_minutes: 0,
            next_rewrite_time: 0,
        }
    }
}

impl RewriteStats {
    /// A rewrite started at `now` (unix seconds).
    pub fn started(&mut self, now: u64) {
        self.rewrites += 1;
        self.scheduled = false;
        self.started_at = Some(now);
    }

    /// The running rewrite ended at `now`, well or not.
    pub fn finished(&mut self, ok: bool, now: u64) {
        let start = self.started_at.take().unwrap_or(now);
        self.last_time_sec = i64::try_from(now.saturating_sub(start)).unwrap_or(i64::MAX);
        self.last_ok = ok;
        if ok {
            self.consecutive_failures = 0;
        } else {
            self.consecutive_failures += 1;
        }
    }

    /// The running rewrite gave up at `now` because `appendonly` changed: its time counts,
    /// its end is no failure (Valkey's rewrite child killed with SIGUSR1).
    pub fn abandoned(&mut self, now: u64) {
        let start = self.started_at.take().unwrap_or(now);
        self.last_time_sec = i64::try_from(now.saturating_sub(start)).unwrap_or(i64::MAX);
    }

    /// A rewrite could not even start (no directory, no incr file).
    pub fn failed_to_start(&mut self) {
        self.last_ok = false;
    }

    /// BGREWRITEAOF while another job runs: the rewrite waits, and a manual request resets
    /// the failure count so it is not limited.
    pub fn schedule(&mut self) {
        self.scheduled = true;
        self.consecutive_failures = 0;
    }

    /// Valkey's `aofRewriteLimited`: after three consecutive failures, automatic rewrites
    /// wait 1, 2, 4 ... up to 60 minutes between attempts. Logs when it starts a wait.
    pub fn limited(&mut self, now: u64) -> bool {
        if self.consecutive_failures < LIMIT_THRESHOLD {
            self.next_delay_minutes = 0;
            self.next_rewrite_time = 0;
            return false;
        }
        if self.next_rewrite_time != 0 {
            if now < self.next_rewrite_time {
                return true;
            }
            self.next_rewrite_time = 0;
            return false;
        }
        self.next_delay_minutes = if self.next_delay_minutes == 0 { 1 } else { self.next_delay_minutes * 2 };
        self.next_delay_minutes = self.next_delay_minutes.min(LIMIT_MAX_MINUTES);
        self.next_rewrite_time = now + self.next_delay_minutes * 60;
        tracing::warn!(
            "Background AOF rewrite has repeatedly failed and triggered the limit, will retry in {} minutes",
            self.next_delay_minutes
        );
        true
    }
}

/// Valkey's `AOF_REWRITE_ITEMS_PER_CMD`.
pub const ITEMS_PER_CMD: usize = 64;
const LIMIT_THRESHOLD: u64 = 3;
const LIMIT_MAX_MINUTES: u64 = 60;

/// A stream as Valkey's `rewriteStreamObject` writes it: XADD per entry (or `XADD key MAXLEN 0
/// 0-1 x y` for an empty stream), XSETID with its counters, then per group XGROUP CREATE, an
/// XCLAIM per pending entry and XGROUP CREATECONSUMER per consumer without any.
fn write_stream(out: &mut Vec<u8>, key: &[u8], s: &hotkv_engine::types::stream::Stream) {
    use hotkv_engine::types::stream::StreamId;
    if s.is_empty() {
        let argv: [&[u8]; 7] = [b"XADD", key, b"MAXLEN", b"0", b"0-1", b"x", b"y"];
        write_command(out, argv.into_iter(), 7);
    } else {
        s.range(StreamId::MIN, StreamId::MAX, false, |e| {
            let mut argv: Vec<Vec<u8>> = vec![b"XADD".to_vec(), key.to_vec(), e.id.to_bytes()];
            for (f, v) in &e.fields {
                argv.push(f.to_vec());
                argv.push(v.to_vec());
            }
            write_command(out, argv.iter().map(Vec::as_slice), argv.len());
            true
        });
    }
    let (last, added, maxdel) = (s.last_id.to_bytes(), s.entries_added.to_string(), s.max_deleted.to_bytes());
    let argv: [&[u8]; 7] = [b"XSETID", key, &last, b"ENTRIESADDED", added.as_bytes(), b"MAXDELETEDID", &maxdel];
    write_command(out, argv.into_iter(), 7);
    for (name, g) in &s.groups {
        let (last, read) = (g.last_id.to_bytes(), g.entries_read.to_string());
        let argv: [&[u8]; 7] = [b"XGROUP", b"CREATE", key, name, &last, b"ENTRIESREAD", read.as_bytes()];
        write_command(out, argv.into_iter(), 7);
        for c in g.consumers.values() {
            if c.pel.is_empty() {
                let argv: [&[u8]; 5] = [b"XGROUP", b"CREATECONSUMER", key, name, &c.name];
                write_command(out, argv.into_iter(), 5);
                continue;
            }
            for id in &c.pel {
                let n = &g.pel[id];
                let (id, time, count) = (id.to_bytes(), n.delivery_time.to_string(), n.delivery_count.to_string());
                let argv: [&[u8]; 12] = [
                    b"XCLAIM",
                    key,
                    name,
                    &c.name,
                    b"0",
                    &id,
                    b"TIME",
                    time.as_bytes(),
                    b"RETRYCOUNT",
                    count.as_bytes(),
                    b"JUSTID",
                    b"FORCE",
                ];
                write_command(out, argv.into_iter(), 12);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::sync::Arc;

    use hotkv_engine::ctx::EngineConfig;
    use hotkv_engine::keyspace::Keyspace;
    use hotkv_engine::propagate::Effects;
    use hotkv_engine::rdb;
    use hotkv_engine::testkit::TestKit;

    use super::*;
    use crate::aof::load::{self, LoadOptions, Outcome, RdbTarget};
    use crate::aof::manifest::tests::tempdir;
    use crate::aof::parse::{self, Parsed};
    use crate::aof::writer::{AofWriter, FsyncPolicy, WriterConfig};

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn auto_rewrite_follows_valkeys_growth_rule() {
        assert_eq!(auto_rewrite_due(1000, 100, 0, 0), None, "percentage 0 disables");
        assert_eq!(auto_rewrite_due(64 << 20, 1, 100, 64 << 20), None, "not over the minimum size");
        assert_eq!(auto_rewrite_due(200, 100, 100, 0), Some(100));
        assert_eq!(auto_rewrite_due(199, 100, 100, 0), None);
        assert_eq!(auto_rewrite_due(300, 0, 100, 0), Some(29_900), "a base of 0 counts as 1");
        assert_eq!(auto_rewrite_due(u64::MAX, 1, 100, 0), Some(u64::MAX), "no overflow");
    }

    #[test]
    fn repeated_failures_space_out_automatic_rewrites() {
        let mut s = RewriteStats::default();
        assert_eq!((s.last_time_sec, s.last_ok), (-1, true));
        for i in 0..3 {
            s.started(100 + i);
            s.finished(false, 102 + i);
        }
        assert_eq!((s.rewrites, s.consecutive_failures, s.last_time_sec, s.last_ok), (3, 3, 2, false));
        let t = 1000;
        assert!(s.limited(t), "third failure: wait a minute");
        assert!(s.limited(t + 59));
        assert!(!s.limited(t + 60), "the minute passed: one try");
        assert!(s.limited(t + 61), "still failing: two minutes now");
        assert!(s.limited(t + 61 + 119));
        assert!(!s.limited(t + 61 + 120));
        s.schedule();
        assert!(!s.limited(t + 200), "a manual BGREWRITEAOF resets the count");
        s.started(5000);
        assert!(!s.scheduled);
        s.finished(true, 5003);
        assert_eq!((s.last_ok, s.consecutive_failures, s.last_time_sec), (true, 0, 3));
    }

    fn sample() -> TestKit {
        let mut t = TestKit { now_ms: NOW, ..TestKit::default() };
        t.run(&["SET", "s", "hello world"]);
        t.run(&["SET", "n", "12345"]);
        t.run(&["APPEND", "grown", "abc"]);
        let items: Vec<String> = (0..130).map(|i| format!("i{i}")).collect();
        let mut argv = vec!["RPUSH", "list"];
        argv.extend(items.iter().map(String::as_str));
        t.run(&argv);
        let mut argv = vec!["SADD", "bigset"];
        argv.extend(items.iter().map(String::as_str));
        t.run(&argv);
        t.run(&["SADD", "ints", "1", "2", "3"]);
        t.run(&["HSET", "h", "f1", "v1", "f2", "2"]);
        t.run(&["ZADD", "z", "1.5", "a", "-2", "b", "0.1", "c", "inf", "d"]);
        t.run(&["SET", "ttl", "v", "PXAT", &(NOW + 100_000).to_string()]);
        t.run(&["SELECT", "5"]);
        t.run(&["SET", "other", "db"]);
        t.run(&["SELECT", "0"]);
        t
    }

    /// Every key as the replies of commands that read it whole, sorted.
    fn contents(t: &mut TestKit) -> Vec<String> {
        let mut out = Vec::new();
        for db in [0, 5] {
            t.run(&["SELECT", &db.to_string()]);
            let keys = t.run(&["KEYS", "*"]);
            let mut names: Vec<&str> =
                keys.split("\r\n").filter(|l| !l.is_empty() && !l.starts_with(['*', '$'])).collect();
            names.sort();
            for k in names {
                let ty = t.run(&["TYPE", k]);
                let body = match ty.as_str() {
                    "+string\r\n" => t.run(&["GET", k]),
                    "+list\r\n" => t.run(&["LRANGE", k, "0", "-1"]),
                    "+set\r\n" => t.run(&["SORT", k, "ALPHA"]),
                    "+hash\r\n" => t.run(&["HGET", k, "f1"]) + &t.run(&["HGET", k, "f2"]) + &t.run(&["HLEN", k]),
                    "+zset\r\n" => t.run(&["ZRANGE", k, "0", "-1", "WITHSCORES"]),
                    other => other.to_string(),
                };
                out.push(format!("{db} {k} {ty} {body} {}", t.run(&["PEXPIRETIME", k])));
            }
        }
        t.run(&["SELECT", "0"]);
        out
    }

    /// The command base of a keyspace, as a rewrite writes it slot by slot.
    fn command_base(ks: &Keyspace) -> Vec<(usize, Vec<u8>)> {
        let mut chunks = Vec::new();
        for db in 0..ks.databases() {
            for slot in ks.db(db).slots() {
                let mut buf = Vec::new();
                write_table_commands(db, &slot.lock(), &mut buf);
                if !buf.is_empty() {
                    chunks.push((db, buf));
                }
            }
        }
        chunks
    }

    fn replay(t: &mut TestKit, mut bytes: &[u8]) -> Vec<String> {
        let mut names = Vec::new();
        while !bytes.is_empty() {
            let Parsed::Command { len, args } = parse::next(bytes, bytes.len() as u64, 1 << 30) else {
                panic!("not a command: {:?}", String::from_utf8_lossy(&bytes[..bytes.len().min(40)]))
            };
            let argv: Vec<Vec<u8>> = args.iter().map(|&(s, e)| bytes[s..e].to_vec()).collect();
            names.push(String::from_utf8_lossy(&argv[0]).into_owned());
            if argv[0] == b"SELECT" {
                t.db = std::str::from_utf8(&argv[1]).unwrap().parse().unwrap();
            } else {
                let reply = t.run_bytes(&argv);
                assert!(!reply.starts_with('-'), "{reply}");
            }
            bytes = &bytes[len..];
        }
        names
    }

    #[test]
    fn a_command_base_rebuilds_every_type_with_its_ttl() {
        let mut t = sample();
        let want = contents(&mut t);
        let mut all = Vec::new();
        let mut w = None::<usize>;
        for (db, chunk) in command_base(&t.ks) {
            if w != Some(db) {
                write_select(&mut all, db);
                w = Some(db);
            }
            all.extend_from_slice(&chunk);
        }
        let mut fresh = TestKit { now_ms: NOW, ..TestKit::default() };
        let names = replay(&mut fresh, &all);
        assert_eq!(contents(&mut fresh), want);
        // 130 items at 64 a command: three RPUSH and three SADD.
        assert_eq!(names.iter().filter(|n| *n == "RPUSH").count(), 3);
        assert_eq!(names.iter().filter(|n| *n == "SADD").count(), 4);
        assert_eq!(names.iter().filter(|n| *n == "PEXPIREAT").count(), 1);
        assert!(names.contains(&"HMSET".to_string()) && names.contains(&"ZADD".to_string()));
    }

    #[test]
    fn a_command_base_keeps_hash_field_ttls() {
        let mut t = TestKit { now_ms: NOW, ..TestKit::default() };
        t.run(&["HSET", "h", "a", "1", "b", "2"]);
        t.run(&["HPEXPIRE", "h", "5000", "FIELDS", "1", "b"]);
        let mut all = Vec::new();
        for (_, chunk) in command_base(&t.ks) {
            all.extend_from_slice(&chunk);
        }
        let mut fresh = TestKit { now_ms: NOW, ..TestKit::default() };
        let names = replay(&mut fresh, &all);
        assert_eq!(names, ["HMSET", "HPEXPIREAT"]);
        assert_eq!(fresh.run(&["HPTTL", "h", "FIELDS", "2", "a", "b"]), "*2\r\n:-1\r\n:5000\r\n");
    }

    fn paths(tag: &str) -> AofPaths {
        AofPaths { dir: tempdir(tag), dirname: "appendonlydir".into(), filename: "appendonly.aof".into() }
    }

    fn effects(db: usize, argv: &[&str]) -> Effects {
        let mut e = Effects::default();
        e.begin(true);
        e.push(db, argv);
        e
    }

    fn load_into(p: &AofPaths) -> TestKit {
        let mut t = TestKit { now_ms: NOW, ..TestKit::default() };
        let m = p.read_manifest().unwrap();
        let cfg = EngineConfig::default();
        let ks = std::mem::replace(&mut t.ks, Keyspace::new(16));
        let mut cmds = Vec::new();
        let target = RdbTarget { ks: &ks, cfg: &cfg, now_ms: NOW };
        let opts = LoadOptions { load_truncated: false, max_bulk_len: 1 << 30, databases: 16 };
        let out = load::load_all(p, &m, &opts, &target, |db, argv| {
            cmds.push((db, argv.iter().map(|a| a.to_vec()).collect::<Vec<_>>()));
            Ok::<(), String>(())
        })
        .unwrap();
        assert!(matches!(out, Outcome::Loaded(_)), "{out:?}");
        t.ks = ks;
        for (db, argv) in cmds {
            t.db = db;
            t.run_bytes(&argv);
        }
        t.db = 0;
        t
    }

    #[test]
    fn start_then_rewrite_publishes_a_new_base_and_deletes_history() {
        for rdb_preamble in [true, false] {
            let p = paths("flow");
            let mut files = AofFiles::new(p.clone(), p.read_manifest().unwrap());
            // First start, nothing on disk: a base of the (empty) data set, then incr 1.
            let opened = files
                .open_on_start(rdb_preamble, false, |b| {
                    if b.is_rdb() {
                        rdb::snapshot(&Keyspace::new(1), &[], |c| b.write(c))?;
                    }
                    Ok(())
                })
                .unwrap();
            assert_eq!(opened.name, "appendonly.aof.1.incr.aof");
            let suffix = if rdb_preamble { "rdb" } else { "aof" };
            let m = files.manifest().render();
            assert_eq!(
                String::from_utf8(m).unwrap(),
                format!(
                    "file appendonly.aof.1.base.{suffix} seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i\n"
                )
            );
            let writer = AofWriter::start(Arc::new(opened.file), WriterConfig::new(FsyncPolicy::Always)).unwrap();
            let mut t = sample();
            // The sample's writes as a primary would have streamed them.
            writer.append(&effects(0, &["SET", "before", "rewrite"]));
            // The rewrite: new incr, switch at the cut, base of the keyspace, publish.
            let incr = files.start_rewrite().unwrap();
            assert_eq!(incr.name, "appendonly.aof.2.incr.aof");
            t.run(&["SET", "before", "rewrite"]);
            writer.begin_switch(Arc::new(incr.file));
            let mut base = files.base_writer(rdb_preamble, true).unwrap();
            if rdb_preamble {
                rdb::snapshot(&t.ks, &[], |c| base.write(c)).unwrap();
            } else {
                for (db, chunk) in command_base(&t.ks) {
                    base.write_commands(db, &chunk).unwrap();
                }
            }
            let end = writer.append(&effects(5, &["SET", "after", "rewrite"]));
            t.run(&["SELECT", "5"]);
            t.run(&["SET", "after", "rewrite"]);
            t.run(&["SELECT", "0"]);
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
            rt.block_on(writer.wait_durable(end));
            let done = base.finish().unwrap();
            let published = files.finish_rewrite(done, 1, true).unwrap();
            assert_eq!(published.base, format!("appendonly.aof.2.base.{suffix}"));
            assert_eq!(
                String::from_utf8(files.manifest().render()).unwrap(),
                format!(
                    "file appendonly.aof.2.base.{suffix} seq 2 type b\nfile appendonly.aof.2.incr.aof seq 2 type i\n"
                )
            );
            assert_eq!(p.read_manifest().unwrap(), *files.manifest());
            let mut on_disk: Vec<String> = fs::read_dir(p.aof_dir())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            on_disk.sort();
            assert_eq!(
                on_disk,
                [
                    format!("appendonly.aof.2.base.{suffix}"),
                    "appendonly.aof.2.incr.aof".into(),
                    "appendonly.aof.manifest".into()
                ]
            );
            let (base_size, total) = files.sizes();
            assert_eq!(base_size, published.base_size);
            assert!(total > base_size);
            drop(writer);
            let mut loaded = load_into(&p);
            assert_eq!(contents(&mut loaded), contents(&mut t), "preamble {rdb_preamble}");
            fs::remove_dir_all(&p.dir).unwrap();
        }
    }

    #[test]
    fn a_base_is_fsynced_every_so_many_bytes_with_incremental_fsync() {
        let p = paths("incremental");
        let files = AofFiles::new(p.clone(), Manifest::default());
        fs::create_dir_all(p.aof_dir()).unwrap();
        for (every, want) in [(0, 0), (1000, 3)] {
            let mut base = files.base_writer(true, false).unwrap();
            base.set_sync_every(every);
            for _ in 0..7 {
                base.write(&[b'x'; 500]).unwrap();
            }
            assert_eq!(base.syncs(), want, "every {every}");
            let done = base.finish().unwrap();
            assert_eq!(fs::metadata(&done.path).unwrap().len(), 3500, "every byte reaches the file");
            files.abort_rewrite(&done.path);
        }
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn history_stays_with_auto_gc_off_and_goes_when_it_is_on_again() {
        let p = paths("autogc");
        let mut files = AofFiles::new(p.clone(), Manifest::default());
        files.open_on_start(true, false, |_| Ok(())).unwrap();
        for _ in 0..2 {
            files.start_rewrite().unwrap();
            let base = files.base_writer(true, false).unwrap().finish().unwrap();
            files.finish_rewrite(base, 1, false).unwrap();
        }
        // Valkey's layout: the base, the history newest first, then the incr file written.
        let want = [
            "file appendonly.aof.3.base.rdb seq 3 type b",
            "file appendonly.aof.2.incr.aof seq 2 type h",
            "file appendonly.aof.2.base.rdb seq 2 type h",
            "file appendonly.aof.1.incr.aof seq 1 type h",
            "file appendonly.aof.1.base.rdb seq 1 type h",
            "file appendonly.aof.3.incr.aof seq 3 type i",
        ];
        let on_disk = fs::read_to_string(p.manifest_path()).unwrap();
        assert_eq!(on_disk.lines().collect::<Vec<_>>(), want);
        for name in ["appendonly.aof.1.base.rdb", "appendonly.aof.1.incr.aof", "appendonly.aof.2.base.rdb"] {
            assert!(p.aof_dir().join(name).exists(), "{name} kept");
        }
        files.delete_history().unwrap();
        let on_disk = fs::read_to_string(p.manifest_path()).unwrap();
        assert_eq!(on_disk.lines().collect::<Vec<_>>(), [want[0], want[5]]);
        assert!(!p.aof_dir().join("appendonly.aof.1.base.rdb").exists());
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn a_failed_publish_keeps_the_old_manifest_and_removes_the_temp_base() {
        let p = paths("fail");
        let mut files = AofFiles::new(p.clone(), Manifest::default());
        files.open_on_start(false, false, |_| Ok(())).unwrap();
        let before = files.manifest().clone();
        let base = files.base_writer(false, false).unwrap().finish().unwrap();
        let tmp = base.path.clone();
        fs::remove_file(&tmp).unwrap();
        assert!(files.finish_rewrite(base, 1, true).is_err());
        assert_eq!(*files.manifest(), before);
        assert_eq!(p.read_manifest().unwrap(), before);
        let base = files.base_writer(false, false).unwrap().finish().unwrap();
        files.abort_rewrite(&base.path);
        assert!(!base.path.exists());
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn start_reopens_the_last_incr_file_and_appends() {
        let p = paths("reopen");
        let mut files = AofFiles::new(p.clone(), Manifest::default());
        let first = files.open_on_start(false, false, |_| Ok(())).unwrap();
        (&first.file).write_all(b"*1\r\n$4\r\nPING\r\n").unwrap();
        drop(first);
        let mut again = AofFiles::new(p.clone(), p.read_manifest().unwrap());
        let opened = again.open_on_start(false, false, |_| panic!("no new base")).unwrap();
        assert_eq!((opened.name.as_str(), opened.size), ("appendonly.aof.1.incr.aof", 14));
        assert_eq!(again.manifest(), files.manifest());
        fs::remove_dir_all(&p.dir).unwrap();
    }
}
