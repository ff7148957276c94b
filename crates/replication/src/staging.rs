//! A full sync received to disk before it loads (Valkey's disk-based load, what
//! `repl-diskless-load disabled` asks for): the replica keeps serving its old data, and keeps
//! its replication history, until the whole snapshot is in a file; a primary that dies or a
//! link that breaks mid-transfer costs nothing but the temp file. Only then is the file made
//! durable and renamed over `dbfilename`, and loaded.
//!
//! The file is read back through the descriptor it was written with, not by name: a save of
//! the old data renaming its own file over `dbfilename` meanwhile cannot swap what loads.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// Where a full sync's snapshot is written before it loads; the server's answer to
/// [`crate::Applier::staging`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Staging {
    /// The temporary file, created new (`temp-<time>.<pid>.rdb` in `dir`).
    pub temp: PathBuf,
    /// What it is renamed to once whole (`dbfilename`).
    pub target: PathBuf,
    /// Remove `target` once loaded (`rdb-del-sync-files` on a node that persists nothing).
    pub remove_after_load: bool,
}

/// Why a staged file could not be put in place; each is one of Valkey's log lines.
#[derive(Debug)]
pub(crate) enum StageError {
    Open(io::Error),
    Write(io::Error),
    Sync(io::Error),
    Rename(PathBuf, io::Error),
    SyncDir(PathBuf, io::Error),
    /// The link stopped before the rename.
    Abandoned,
}

impl std::fmt::Display for StageError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StageError::Open(e) => {
                write!(f, "Opening the temp file needed for PRIMARY <-> REPLICA synchronization: {e}")
            }
            StageError::Write(e) => write!(
                f,
                "Write error or short write writing to the DB dump file needed for PRIMARY <-> REPLICA synchronization: {e}"
            ),
            StageError::Sync(e) => {
                write!(f, "Failed trying to sync the temp DB to disk in PRIMARY <-> REPLICA synchronization: {e}")
            }
            StageError::Rename(to, e) => write!(
                f,
                "Failed trying to rename the temp DB into {} in PRIMARY <-> REPLICA synchronization: {e}",
                to.file_name().map_or_else(|| to.display().to_string(), |n| n.to_string_lossy().into_owned())
            ),
            StageError::Abandoned => write!(f, "Replication stopped before the synced DB was put in place"),
            StageError::SyncDir(to, e) => {
                write!(
                    f,
                    "Failed trying to sync DB directory {} in PRIMARY <-> REPLICA synchronization: {e}",
                    to.display()
                )
            }
        }
    }
}

/// The temp file while the snapshot arrives. Dropped before [`StagedFile::install`], it
/// removes the file.
pub(crate) struct StagedFile {
    file: Option<File>,
    stage: Staging,
}

impl StagedFile {
    pub(crate) fn create(stage: Staging) -> Result<StagedFile, StageError> {
        let file =
            OpenOptions::new().read(true).write(true).create_new(true).open(&stage.temp).map_err(StageError::Open)?;
        Ok(StagedFile { file: Some(file), stage })
    }

    /// Appends snapshot bytes (the page cache takes them: no wait worth a thread).
    pub(crate) fn write(&mut self, bytes: &[u8]) -> Result<(), StageError> {
        let file = self.file.as_mut().expect("a staged file is open until installed");
        file.write_all(bytes).map_err(StageError::Write)
    }

    /// Starts making the whole file durable and renaming it over the target, the directory
    /// synced too, on a thread of its own (an fsync of a large snapshot takes a while);
    /// [`Installing::finish`] gives the file, positioned at its start, to load from.
    pub(crate) fn install(mut self) -> Installing {
        let file = self.file.take().expect("installed once");
        let stage = self.stage.clone();
        let abandoned = Arc::new(AtomicBool::new(false));
        let seen = abandoned.clone();
        let task = tokio::task::spawn_blocking(move || {
            let mut file = file;
            let cleanup = |e| {
                let _ = std::fs::remove_file(&stage.temp);
                e
            };
            file.sync_all().map_err(|e| cleanup(StageError::Sync(e)))?;
            if seen.load(Ordering::SeqCst) {
                return Err(cleanup(StageError::Abandoned));
            }
            std::fs::rename(&stage.temp, &stage.target)
                .map_err(|e| cleanup(StageError::Rename(stage.target.clone(), e)))?;
            sync_parent(&stage.target).map_err(|e| StageError::SyncDir(stage.target.clone(), e))?;
            file.seek(SeekFrom::Start(0)).map_err(StageError::Sync)?;
            Ok(Installed { file, stage })
        });
        Installing { task: Some(task), abandoned }
    }
}

/// An install under way on a blocking thread. The link keeps it outside its session, so a
/// stop that drops the session mid-install can abandon it and wait for the thread: when the
/// stop returns the temp file is gone, or was already renamed, never renamed later over a
/// `dbfilename` the node has moved on from.
pub(crate) struct Installing {
    /// None once finished.
    task: Option<tokio::task::JoinHandle<Result<Installed, StageError>>>,
    abandoned: Arc<AtomicBool>,
}

impl Installing {
    /// Waits for the install; cancel-safe (the link abandons what a stop left here).
    pub(crate) async fn finish(&mut self) -> Result<Installed, StageError> {
        let Some(task) = self.task.as_mut() else { return Err(StageError::Abandoned) };
        let done = task.await;
        self.task = None;
        match done {
            Ok(r) => r,
            Err(join) => Err(StageError::Sync(io::Error::other(join.to_string()))),
        }
    }

    /// Stops the install before its rename if it has not got there, and waits for its thread.
    pub(crate) async fn abandon(self) {
        self.abandoned.store(true, Ordering::SeqCst);
        if let Some(task) = self.task {
            let _ = task.await;
        }
    }
}

impl Drop for StagedFile {
    fn drop(&mut self) {
        if self.file.take().is_some() {
            let _ = std::fs::remove_file(&self.stage.temp);
        }
    }
}

/// The snapshot in place as `dbfilename`, open for loading.
pub(crate) struct Installed {
    file: File,
    pub(crate) stage: Staging,
}

impl Installed {
    /// The next `buf.len()` bytes at most; 0 at the end.
    pub(crate) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.file.read(buf)
    }
}

fn sync_parent(path: &Path) -> io::Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testkit::TempDir as Dir;

    fn stage_in(dir: &Path) -> Staging {
        Staging { temp: dir.join("temp-1.2.rdb"), target: dir.join("dump.rdb"), remove_after_load: false }
    }

    /// A directory holding an old dump.rdb, and a staged file over it with `bytes` written.
    fn staged_over_old(name: &str, bytes: &[u8]) -> (Dir, StagedFile) {
        let dir = Dir::new(name);
        std::fs::write(dir.path().join("dump.rdb"), b"old").unwrap();
        let mut f = StagedFile::create(stage_in(dir.path())).unwrap();
        f.write(bytes).unwrap();
        (dir, f)
    }

    #[tokio::test]
    async fn a_whole_file_replaces_the_target_and_reads_back_from_its_start() {
        let (dir, mut f) = staged_over_old("whole", b"REDIS0011");
        f.write(b"-rest").unwrap();
        let mut installed = f.install().finish().await.unwrap();
        assert!(!dir.path().join("temp-1.2.rdb").exists());
        assert_eq!(std::fs::read(dir.path().join("dump.rdb")).unwrap(), b"REDIS0011-rest");
        // A save renaming its own file over the target now cannot change what loads.
        std::fs::write(dir.path().join("temp-9.rdb"), b"someone else's").unwrap();
        std::fs::rename(dir.path().join("temp-9.rdb"), dir.path().join("dump.rdb")).unwrap();
        let mut got = Vec::new();
        let mut buf = [0u8; 4];
        loop {
            let n = installed.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            got.extend_from_slice(&buf[..n]);
        }
        assert_eq!(got, b"REDIS0011-rest");
    }

    #[tokio::test]
    async fn an_abandoned_transfer_leaves_no_file_and_the_old_target() {
        let (dir, f) = staged_over_old("abandoned", b"REDIS00");
        drop(f);
        assert!(!dir.path().join("temp-1.2.rdb").exists());
        assert_eq!(std::fs::read(dir.path().join("dump.rdb")).unwrap(), b"old");
    }

    #[tokio::test]
    async fn an_abandoned_install_has_ended_when_abandon_returns() {
        // Abandoned at once (before its fsync ends) or after its thread got to the rename:
        // either way, once `abandon` returns nothing is left to happen to the files.
        for round in 0..20 {
            let (dir, f) = staged_over_old(&format!("abandon-install-{round}"), b"REDIS0011");
            let installing = f.install();
            if round % 2 == 1 {
                tokio::task::yield_now().await;
            }
            installing.abandon().await;
            assert!(!dir.path().join("temp-1.2.rdb").exists());
            let target = std::fs::read(dir.path().join("dump.rdb")).unwrap();
            assert!(target == b"old" || target == b"REDIS0011", "{target:?}");
        }
        let (dir, f) = staged_over_old("abandon-install-late", b"REDIS0011");
        let mut installing = f.install();
        installing.finish().await.unwrap();
        installing.abandon().await;
        assert_eq!(std::fs::read(dir.path().join("dump.rdb")).unwrap(), b"REDIS0011");
    }

    #[tokio::test]
    async fn a_target_that_cannot_be_replaced_is_valkeys_rename_error_and_no_temp_file() {
        let dir = Dir::new("rename");
        // Valkey's test: a directory where dump.rdb should be.
        std::fs::create_dir(dir.path().join("dump.rdb")).unwrap();
        std::fs::write(dir.path().join("dump.rdb").join("x"), b"x").unwrap();
        let mut f = StagedFile::create(stage_in(dir.path())).unwrap();
        f.write(b"REDIS0011").unwrap();
        let err = f.install().finish().await.err().expect("the rename fails");
        assert!(
            err.to_string().starts_with(
                "Failed trying to rename the temp DB into dump.rdb in PRIMARY <-> REPLICA synchronization: "
            ),
            "{err}"
        );
        assert!(!dir.path().join("temp-1.2.rdb").exists());
        // A temp file of the same name exists: a second transfer cannot clobber it.
        std::fs::write(dir.path().join("temp-1.2.rdb"), b"x").unwrap();
        let err = StagedFile::create(stage_in(dir.path())).err().expect("create_new");
        assert!(err.to_string().starts_with("Opening the temp file needed for PRIMARY <-> REPLICA synchronization"));
    }
}
