//! The append-only file: Valkey 7+'s multi-part layout (`appenddirname` with a manifest, one
//! base and incr files), fed by the same write stream as replicas, loaded at start, rewritten
//! by BGREWRITEAOF without a fork. Files either server writes load in the other.
//!
//! Pieces, each usable alone (the server wires them; see `docs/persistence-aof.md`):
//!
//! - [`manifest`]: parse and atomically write `<appendfilename>.manifest`.
//! - [`parse`]: the RESP command format of AOF files, for the loader and the fuzzer.
//! - [`load`]: load base and incr files at start ([`load::load_all`]); detect and perform the
//!   upgrade of an old single-file AOF ([`load::needs_upgrade`], [`load::upgrade_legacy`]).
//! - [`writer`]: [`writer::AofWriter`], a `WriteSink` that appends to the current incr file
//!   under `appendfsync always|everysec|no` and tells the server when an offset is durable.
//! - [`rewrite`]: [`rewrite::AofFiles`] (open at start, new incr files, publish a rewritten
//!   base), the command form of a base, the auto-rewrite rule, the rewrite counters.
//! - [`info`]: the AOF lines of INFO persistence.
//! - [`check`]: `hotkv-check-aof`, Valkey's `valkey-check-aof` over the same parser and manifest.
//!
//! How the server calls them:
//!
//! 1. **Start**, with `appendonly yes`, before serving: `paths.read_manifest()`; if
//!    [`load::needs_upgrade`], [`load::upgrade_legacy`]; then [`load::load_all`] with a
//!    callback that runs each `(db, argv)` through the dispatcher as Valkey's fake AOF client
//!    (no reply, no blocking, MULTI/EXEC arrive whole). The AOF is preferred over `dump.rdb`;
//!    the RDB is loaded only when the AOF is off. Then [`rewrite::AofFiles::open_on_start`]
//!    (writes a base of the loaded data when there was no AOF yet) and
//!    [`writer::AofWriter::start`] on the file it returns, with the sizes from the load.
//! 2. **Writes**: the `WriteSink` the keyspace holds fans out to the replication primary and
//!    the writer (both see each call's `Effects` while its slot locks are held). Before
//!    writing a reply, a connection checks [`writer::AofWriter::replies_wait`] and awaits
//!    [`writer::AofWriter::wait_durable`] with the offset `append` returned (or
//!    `appended_offset()` read after the call). Write commands are refused with `-MISCONF`
//!    and [`writer::AofWriter::write_error`]'s text while it returns `Some`.
//! 3. **BGREWRITEAOF**: [`rewrite::AofFiles::start_rewrite`] (new incr file, manifest),
//!    a snapshot whose cut calls [`writer::AofWriter::begin_switch`] with that file, its
//!    chunks into [`rewrite::AofFiles::base_writer`], then
//!    [`rewrite::AofFiles::finish_rewrite`] and `writer.set_sizes(...)`;
//!    [`rewrite::RewriteStats`] counts. The cron checks [`rewrite::auto_rewrite_due`].
//! 4. **Shutdown / `appendonly no`**: [`writer::AofWriter::flush_and_sync`], then drop it.

pub mod check;
#[cfg(test)]
mod fuzz;
pub mod info;
pub mod load;
pub mod manifest;
pub mod parse;
pub mod rewrite;
pub mod wire;
pub mod writer;

use std::path::PathBuf;

/// Where the AOF lives: `dir`, `appenddirname` inside it, `appendfilename` naming the files.
#[derive(Debug, Clone)]
pub struct AofPaths {
    /// The server's working directory (`dir`).
    pub dir: PathBuf,
    /// `appenddirname`, relative to `dir`.
    pub dirname: String,
    /// `appendfilename`: the prefix of every file and the name of the old single file.
    pub filename: String,
}

impl AofPaths {
    /// The directory holding the manifest, base and incr files.
    pub fn aof_dir(&self) -> PathBuf {
        self.dir.join(&self.dirname)
    }

    /// `<aof dir>/<appendfilename>.manifest`.
    pub fn manifest_path(&self) -> PathBuf {
        self.aof_dir().join(manifest::manifest_name(&self.filename))
    }

    /// Where an old single-file AOF (before Valkey 7) lives: `<dir>/<appendfilename>`.
    pub fn legacy_file(&self) -> PathBuf {
        self.dir.join(&self.filename)
    }

    /// The manifest on disk, or an empty one when the directory or the manifest is missing
    /// (a first start, or an old single-file AOF to upgrade), as `aofLoadManifestFromDisk`.
    pub fn read_manifest(&self) -> Result<manifest::Manifest, manifest::ManifestError> {
        let path = self.manifest_path();
        if !path.is_file() {
            return Ok(manifest::Manifest::default());
        }
        manifest::Manifest::load(&path)
    }
}
