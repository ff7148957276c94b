//! Writing `dump.rdb` safely: the stream goes to `temp-<pid>.rdb` in `dir` (Valkey's name),
//! fsynced every 4 MB with `rdb-save-incremental-fsync yes` and at the end, then renamed over
//! `dbfilename`, and the directory fsynced so the rename itself survives a crash. Until the
//! rename the previous file is untouched, so a crash or kill -9 mid-save leaves it whole; a
//! failed save removes its temp file.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::SyncSender;
use std::time::Duration;

use bytes::Bytes;
use hotkv_engine::rdb::WriteOptions;
use tracing::warn;

use super::StartError;
use crate::config::table as t;
use crate::server::Server;
use crate::snapshot::{StopHook, StreamEnd, StreamOptions, stream_rdb};

/// How a save to the file ended.
pub(crate) enum Outcome {
    /// The file is in place; the write counter read at the cut.
    Saved {
        /// `stats.dirty()` at the cut.
        dirty_at_cut: u64,
    },
    /// The keyspace's snapshot was taken by someone else; nothing was written.
    Busy,
    /// The reason, already logged.
    Failed(String),
}

/// The file `dbfilename` in `dir`, as nodes.conf is found (`cluster::nodes_conf_path`).
pub fn rdb_path(srv: &Server) -> PathBuf {
    let s = srv.settings.load();
    let name = Path::new(s.str(t::DBFILENAME));
    if name.is_absolute() { name.to_path_buf() } else { Path::new(s.str(t::DIR)).join(name) }
}

/// Saves the keyspace into the file; tells `cut` once the image's instant is fixed (or that
/// the snapshot was busy).
pub(crate) fn save(srv: &Server, cut: &SyncSender<Result<(), StartError>>) -> Outcome {
    let settings = srv.settings.load_full();
    let dir = settings.str(t::DIR).to_string();
    let temp_name = format!("temp-{}.rdb", std::process::id());
    let temp = Path::new(&dir).join(&temp_name);
    let dest = rdb_path(srv);
    let file = match File::create(&temp) {
        Ok(f) => f,
        Err(e) => {
            let why = format!(
                "Failed opening the temp RDB file {temp_name} (in server root dir {}) for saving: {}",
                root_dir(&dir),
                os_text(&e)
            );
            warn!("{why}");
            return Outcome::Failed(why);
        }
    };
    let opts = file_write_options(&settings);
    let sync_every = if settings.bool(t::RDB_SAVE_INCREMENTAL_FSYNC) { INCREMENTAL_FSYNC_BYTES } else { 0 };
    let opts = StreamOptions {
        write: opts,
        key_delay: key_save_delay(&settings),
        progress: super::progress(srv),
        at_cut: None,
        aux_at_cut: None,
        stop: srv.arc().map(|s| {
            let weak = Arc::downgrade(&s);
            StopHook(Arc::new(move || weak.upgrade().is_none_or(|s| super::aborted(&s))))
        }),
    };
    let mut out = SyncedFile::new(file, WRITE_BUFFER, sync_every);
    let mut error: Option<io::Error> = None;
    let mut dirty_at_cut = 0;
    let started = |c: &crate::snapshot::Cut| {
        dirty_at_cut = super::cut_taken(srv, c.keys);
        let _ = cut.send(Ok(()));
    };
    let ship = |b: Bytes| {
        if super::aborted(srv) {
            error.get_or_insert_with(|| io::Error::other("the save was abandoned"));
            return false;
        }
        match out.write(&b) {
            Ok(()) => true,
            Err(e) => {
                error = Some(e);
                false
            }
        }
    };
    let end = stream_rdb(srv, &opts, || false, started, ship);
    let written = match end {
        StreamEnd::Busy => {
            let _ = std::fs::remove_file(&temp);
            return Outcome::Busy;
        }
        StreamEnd::Abandoned => Err(("rdbSaveRio", error.unwrap_or_else(|| io::Error::other("abandoned")))),
        StreamEnd::Done { .. } => out.finish(),
    };
    if let Err((op, e)) = written {
        let why = format!("Write error while saving DB to the disk({op}): {}", os_text(&e));
        warn!("{why}");
        let _ = std::fs::remove_file(&temp);
        return Outcome::Failed(why);
    }
    if let Err(e) = std::fs::rename(&temp, &dest) {
        let why = format!(
            "Error moving temp DB file {temp_name} on the final destination {} (in server root dir {}): {}",
            dest.display(),
            root_dir(&dir),
            os_text(&e)
        );
        warn!("{why}");
        let _ = std::fs::remove_file(&temp);
        return Outcome::Failed(why);
    }
    if let Err(e) = sync_dir(&dest) {
        let why = format!("Failed to fsync directory while saving DB: {}", os_text(&e));
        warn!("{why}");
        return Outcome::Failed(why);
    }
    Outcome::Saved { dirty_at_cut }
}

/// A temp file being written (an RDB save, an AOF rewrite's base), fsynced every
/// `sync_every` bytes (0: only at the end), as Valkey's rio autosync does with
/// `rdb-save-incremental-fsync` / `aof-rewrite-incremental-fsync`, so the kernel never holds a
/// whole file's worth of dirty pages and the final fsync does not stall the disk.
pub(crate) struct SyncedFile {
    file: io::BufWriter<File>,
    unsynced: usize,
    sync_every: usize,
    syncs: u64,
}

impl SyncedFile {
    /// Writes to `file` through a buffer of `buffer` bytes.
    pub(crate) fn new(file: File, buffer: usize, sync_every: usize) -> SyncedFile {
        SyncedFile { file: io::BufWriter::with_capacity(buffer, file), unsynced: 0, sync_every, syncs: 0 }
    }

    /// Fsyncs every `bytes` from now on (0: only at the end).
    pub(crate) fn set_sync_every(&mut self, bytes: usize) {
        self.sync_every = bytes;
    }

    /// The incremental fsyncs done so far.
    pub(crate) fn syncs(&self) -> u64 {
        self.syncs
    }

    pub(crate) fn write(&mut self, b: &[u8]) -> io::Result<()> {
        self.file.write_all(b)?;
        self.unsynced += b.len();
        if self.sync_every > 0 && self.unsynced >= self.sync_every {
            self.file.flush()?;
            self.file.get_ref().sync_data()?;
            self.unsynced = 0;
            self.syncs += 1;
        }
        Ok(())
    }

    /// Flushes and fsyncs; the error names the step, as Valkey's log does.
    pub(crate) fn finish(mut self) -> Result<(), (&'static str, io::Error)> {
        self.file.flush().map_err(|e| ("fflush", e))?;
        self.file.get_ref().sync_all().map_err(|e| ("fsync", e))
    }
}

/// Fsyncs the directory holding `path`, so a rename into it is durable.
fn sync_dir(path: &Path) -> io::Result<()> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

/// The directory as Valkey's messages name it (the absolute working dir).
fn root_dir(dir: &str) -> String {
    std::fs::canonicalize(dir).map_or_else(|_| dir.to_string(), |p| p.display().to_string())
}

/// The OS error's text without Rust's " (os error N)" suffix, as strerror() says it.
pub(crate) fn os_text(e: &io::Error) -> String {
    crate::listener::os_text(e)
}

/// Valkey's REDIS_AUTOSYNC_BYTES: the step of `rdb-save-incremental-fsync` and
/// `aof-rewrite-incremental-fsync`.
pub(crate) const INCREMENTAL_FSYNC_BYTES: usize = 4 * 1024 * 1024;
/// Writes reach the file in blocks of this size.
const WRITE_BUFFER: usize = 256 * 1024;

/// How RDB bytes are written (`dump.rdb`, an AOF base with the RDB preamble, and the
/// snapshot of a full sync, as Valkey writes all three with `rdbSaveRio`): `rdbcompression`
/// and `rdbchecksum`.
pub(crate) fn file_write_options(settings: &crate::config::Settings) -> WriteOptions {
    WriteOptions { compress: settings.bool(t::RDBCOMPRESSION), checksum: settings.bool(t::RDBCHECKSUM) }
}

/// `rdb-key-save-delay` (a test lever): how long an RDB snapshot's own pass sleeps per key
/// it writes. Valkey sleeps in `rdbSaveKeyValuePair`, so it slows every RDB it produces:
/// saves, AOF rewrites with the preamble, and the snapshot a full sync streams.
pub(crate) fn key_save_delay(settings: &crate::config::Settings) -> Duration {
    Duration::from_micros(settings.int(t::RDB_KEY_SAVE_DELAY).max(0) as u64)
}
