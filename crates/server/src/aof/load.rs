//! Loading the append-only files at start: the base (an RDB file, or commands), then each
//! incr file in manifest order, as Valkey 8's `loadAppendOnlyFiles`.
//!
//! RDB data goes straight into the keyspace through the engine's [`Loader`]; commands go to
//! the caller's callback, which runs them as Valkey runs them through its fake AOF client.
//! The loader itself follows `SELECT` (each file starts in database 0, as each of Valkey's
//! fake clients does) and hands every command its database; it holds back the commands of a
//! `MULTI` until its `EXEC` arrives, so a transaction cut off by a crash is never applied.
//!
//! A torn tail of the last file (a command the file ends inside, or a `MULTI` without its
//! `EXEC`) is cut off when `aof-load-truncated` is on, with Valkey's log lines; otherwise it
//! is an error naming the file and offset, as is any corruption before the tail.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::path::Path;
use std::time::Instant;

use hotkv_engine::ctx::EngineConfig;
use hotkv_engine::keyspace::Keyspace;
use hotkv_engine::rdb::{self, Loader, RdbError, RdbReader};

use super::AofPaths;
use super::manifest::{AofFile, Manifest};
use super::parse::{self, Parsed};

/// What the loader needs besides the files.
#[derive(Debug, Clone)]
pub struct LoadOptions {
    /// `aof-load-truncated`: cut a torn tail off the last file instead of failing.
    pub load_truncated: bool,
    /// `proto-max-bulk-len`: the longest argument or RDB string accepted.
    pub max_bulk_len: u64,
    /// `databases`: a SELECT of a database at or above this is corruption.
    pub databases: usize,
}

/// Where RDB data (a `.base.rdb` file, or the preamble of an old single-file AOF) goes.
pub struct RdbTarget<'a> {
    /// The keyspace to fill.
    pub ks: &'a Keyspace,
    /// Encoding limits for the loaded values.
    pub cfg: &'a EngineConfig,
    /// Keys whose TTL passed before this time are skipped.
    pub now_ms: i64,
}

/// How a load ended when it did not fail.
#[derive(Debug)]
pub enum Outcome {
    /// The manifest lists no file: nothing to load (Valkey's `AOF_NOT_EXIST`).
    NotExist,
    /// Every listed file is empty (`AOF_EMPTY`).
    Empty,
    /// The files were loaded (`AOF_OK`, or `AOF_TRUNCATED` when `truncated_at` is set).
    Loaded(LoadStats),
}

/// What a load did.
#[derive(Debug, Default)]
pub struct LoadStats {
    /// Commands handed to the callback (SELECT is not; MULTI and EXEC are).
    pub commands: u64,
    /// Sum of the sizes of the base and incr files, as found before loading
    /// (`aof_current_size` after the load).
    pub total_size: u64,
    /// Size of the base file (`aof_base_size` after the load).
    pub base_size: u64,
    /// Per file, in load order.
    pub files: Vec<FileStats>,
    /// What RDB data loaded, when there was some.
    pub rdb: Option<rdb::LoadStats>,
    /// The offset the last file was cut at, when its tail was torn.
    pub truncated_at: Option<u64>,
}

/// One loaded file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileStats {
    /// Its name in the manifest.
    pub name: String,
    /// Its size before loading.
    pub size: u64,
    /// Commands it held.
    pub commands: u64,
    /// Whether it started with RDB data.
    pub rdb: bool,
}

/// Why the files did not load. Every variant names the file; those about its contents, the
/// offset too. `E` is the command callback's error.
#[derive(Debug)]
pub enum LoadError<E> {
    /// A file the manifest lists is not there, or cannot be opened or read.
    Io {
        /// The file.
        file: String,
        /// What failed.
        cause: io::Error,
    },
    /// The RDB data at the start of the file does not load.
    Rdb {
        /// The file.
        file: String,
        /// Where the reader stopped.
        offset: u64,
        /// Why.
        cause: RdbError,
    },
    /// Bytes that are not a command (an inline command, a bad header).
    Format {
        /// The file.
        file: String,
        /// Where the bad command starts.
        offset: u64,
    },
    /// The file ends inside a command or a transaction, and `aof-load-truncated` is off.
    Truncated {
        /// The file.
        file: String,
        /// The end of the last whole command.
        offset: u64,
    },
    /// A file before the last ends inside a command or a transaction.
    TruncatedNotLast {
        /// The file.
        file: String,
        /// The end of the last whole command.
        offset: u64,
    },
    /// `SELECT` with something that is not a database of this server.
    Select {
        /// The file.
        file: String,
        /// Where the SELECT starts.
        offset: u64,
    },
    /// A file the manifest lists is missing or cannot be looked at (already logged with
    /// Valkey's "Unable to obtain the AOF file ... length" line).
    Missing {
        /// The file.
        file: String,
    },
    /// The callback refused a command (an unknown command, for example).
    Command {
        /// The file.
        file: String,
        /// Where the command starts.
        offset: u64,
        /// The callback's error.
        cause: E,
    },
}

impl<E: fmt::Display> fmt::Display for LoadError<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LoadError::Io { file, cause } => {
                write!(f, "Fatal error: can't open the append log file {file} for reading: {cause}")
            }
            LoadError::Missing { file } => {
                write!(f, "Fatal error: the AOF manifest lists {file}, which cannot be read; see above")
            }
            LoadError::Rdb { file, offset, cause } => {
                write!(f, "Error reading the RDB base file {file}, AOF loading aborted (offset {offset}: {cause})")
            }
            LoadError::Format { file, offset } => write!(
                f,
                "Bad file format reading the append only file {file} at offset {offset}: make a backup of your \
                 AOF file, then use ./valkey-check-aof --fix <filename.manifest>"
            ),
            LoadError::Truncated { file, offset } => write!(
                f,
                "Unexpected end of file reading the append only file {file} (last whole command ends at offset \
                 {offset}). You can: 1) Make a backup of your AOF file, then use ./valkey-check-aof --fix \
                 <filename.manifest>. 2) Alternatively you can set the 'aof-load-truncated' configuration option \
                 to yes and restart the server."
            ),
            LoadError::TruncatedNotLast { file, offset } => write!(
                f,
                "Fatal error: the truncated file is not the last file ({file} ends inside a command after offset \
                 {offset})"
            ),
            LoadError::Select { file, offset } => {
                write!(f, "Invalid SELECT reading the append only file {file} at offset {offset}")
            }
            LoadError::Command { file, offset, cause } => {
                write!(f, "{cause} reading the append only file {file} at offset {offset}")
            }
        }
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for LoadError<E> {}

/// Loads every file `manifest` lists from `paths`' AOF directory. `on_command(db, argv)` runs
/// one command; it is called for SELECT-free commands only, with their database.
pub fn load_all<E>(
    paths: &AofPaths,
    manifest: &Manifest,
    opts: &LoadOptions,
    rdb: &RdbTarget<'_>,
    mut on_command: impl FnMut(usize, &[&[u8]]) -> Result<(), E>,
) -> Result<Outcome, LoadError<E>> {
    if manifest.is_empty() {
        return Ok(Outcome::NotExist);
    }
    let dir = paths.aof_dir();
    let mut stats = LoadStats::default();
    let mut sizes = Vec::new();
    for f in manifest.load_order() {
        // Valkey stats every file before loading any: a listed file that is missing is fatal.
        let size = fs::metadata(f.path(&dir)).map_err(|cause| {
            tracing::warn!("Unable to obtain the AOF file {} length. stat: {cause}", f.display_name());
            LoadError::Missing { file: f.display_name() }
        })?;
        sizes.push(size.len());
    }
    stats.total_size = sizes.iter().sum();
    if stats.total_size == 0 {
        return Ok(Outcome::Empty);
    }
    let total = sizes.len();
    for (i, (f, size)) in manifest.load_order().zip(sizes).enumerate() {
        let last = i + 1 == total;
        let start = Instant::now();
        let old_style = f.name == paths.filename.as_bytes();
        let file = load_file(&f.path(&dir), f, last, old_style, opts, rdb, &mut on_command, &mut stats)?;
        let what = if manifest.base.as_ref() == Some(f) { "base" } else { "incr" };
        if what == "base" {
            stats.base_size = size;
        }
        if size > 0 {
            tracing::info!("DB loaded from {what} file {}: {:.3} seconds", file.name, start.elapsed().as_secs_f64());
        }
        stats.files.push(FileStats { size, ..file });
    }
    Ok(Outcome::Loaded(stats))
}

/// Loads one file; `last` says whether a torn tail may be cut off.
#[allow(clippy::too_many_arguments)]
fn load_file<E>(
    path: &Path,
    f: &AofFile,
    last: bool,
    old_style: bool,
    opts: &LoadOptions,
    target: &RdbTarget<'_>,
    on_command: &mut impl FnMut(usize, &[&[u8]]) -> Result<(), E>,
    stats: &mut LoadStats,
) -> Result<FileStats, LoadError<E>> {
    let name = f.display_name();
    let io_err = |cause| LoadError::Io { file: name.clone(), cause };
    let mut file = File::open(path).map_err(io_err)?;
    let size = file.metadata().map_err(io_err)?.len();
    let mut out = FileStats { name: name.clone(), size, commands: 0, rdb: false };
    let mut input = Input::new(size);
    input.fill(&mut file, RDB_MAGIC.len()).map_err(io_err)?;
    if input.window().starts_with(RDB_MAGIC) {
        out.rdb = true;
        if old_style {
            tracing::info!("Reading RDB preamble from AOF file...");
        } else {
            tracing::info!("Reading RDB base file on AOF loading...");
        }
        let rdb = load_rdb(&mut file, &mut input, target, opts).map_err(|(offset, cause)| {
            if old_style {
                tracing::warn!("Error reading the RDB preamble of the AOF file {name}, AOF loading aborted");
            } else {
                tracing::warn!("Error reading the RDB base file {name}, AOF loading aborted");
            }
            LoadError::Rdb { file: name.clone(), offset, cause }
        })?;
        stats.rdb = Some(rdb);
        if old_style {
            tracing::info!("Reading the remaining AOF tail...");
        }
    }
    let mut replay = Replay { db: 0, databases: opts.databases, multi: None, on_command, commands: 0 };
    // The end of the last command applied, and where a MULTI still open started.
    let mut valid_up_to = input.offset();
    let torn = loop {
        if input.is_empty() {
            input.fill(&mut file, 1).map_err(io_err)?;
            if input.is_empty() {
                break None;
            }
        }
        let at = input.offset();
        match parse::next(input.window(), input.left_in_file(), opts.max_bulk_len) {
            Parsed::Annotation { len } => input.consume(len),
            Parsed::Command { len, args } => {
                let w = input.window();
                let argv: Vec<&[u8]> = args.iter().map(|&(s, e)| &w[s..e]).collect();
                replay.apply(&argv).map_err(|e| e.at(&name, at))?;
                input.consume(len);
                if replay.multi.is_none() {
                    valid_up_to = input.offset();
                }
            }
            Parsed::Need => {
                let want = input.window().len().max(READ_BLOCK);
                input.fill(&mut file, want).map_err(io_err)?;
            }
            Parsed::Short => break Some(valid_up_to),
            Parsed::Format => {
                tracing::warn!(
                    "Bad file format reading the append only file {name}: make a backup of your AOF file, then use \
                     ./valkey-check-aof --fix <filename.manifest>"
                );
                return Err(LoadError::Format { file: name.clone(), offset: at });
            }
        }
    };
    // The file ended cleanly inside a MULTI: Valkey treats it as a short read.
    let torn = torn.or_else(|| {
        replay.multi.is_some().then(|| {
            tracing::warn!("Revert incomplete MULTI/EXEC transaction in AOF file {name}");
            valid_up_to
        })
    });
    out.commands = replay.commands;
    stats.commands += replay.commands;
    let Some(offset) = torn else { return Ok(out) };
    if !last {
        tracing::warn!("Fatal error: the truncated file is not the last file");
        return Err(LoadError::TruncatedNotLast { file: name.clone(), offset });
    }
    if opts.load_truncated {
        tracing::warn!("!!! Warning: short read while loading the AOF file {name}!!!");
        tracing::warn!("!!! Truncating the AOF {name} at offset {offset} !!!");
        match truncate(path, offset) {
            Ok(()) => {
                tracing::warn!("AOF {name} loaded anyway because aof-load-truncated is enabled");
                stats.truncated_at = Some(offset);
                return Ok(out);
            }
            Err(e) => tracing::warn!("Error truncating the AOF file {name}: {e}"),
        }
    }
    tracing::warn!(
        "Unexpected end of file reading the append only file {name}. You can: 1) Make a backup of your AOF file, \
         then use ./valkey-check-aof --fix <filename.manifest>. 2) Alternatively you can set the \
         'aof-load-truncated' configuration option to yes and restart the server."
    );
    Err(LoadError::Truncated { file: name.clone(), offset })
}

/// Feeds the RDB data at the start of `input` to the engine's loader; leaves `input` at the
/// first byte after it (an old-style AOF continues with commands).
fn load_rdb(
    file: &mut File,
    input: &mut Input,
    target: &RdbTarget<'_>,
    opts: &LoadOptions,
) -> Result<rdb::LoadStats, (u64, RdbError)> {
    let mut reader = RdbReader::new(opts.max_bulk_len);
    // Keys past their TTL stay, unlike in a primary's load of dump.rdb: the commands after
    // the base may still touch them, and Valkey's rdbLoad keeps them for an AOF base
    // (RDBFLAGS_AOF_PREAMBLE). Expiry removes them after the load.
    let mut loader = Loader::new(target.ks, target.cfg, target.now_ms).keep_expired();
    let base = input.offset();
    reader.feed(input.window());
    input.consume(input.window().len());
    loop {
        while let Some(item) = reader.next_item().map_err(|e| (base + reader.offset(), e))? {
            if loader.apply(item).map_err(|e| (base + reader.offset(), e))? {
                input.rewind_to(base + reader.offset(), reader.remainder());
                return Ok(loader.finish());
            }
        }
        let before = input.offset();
        input.fill(file, READ_BLOCK).map_err(|e| (before, RdbError::Io(e.kind())))?;
        if input.is_empty() {
            reader.finish().map_err(|e| (base + reader.offset(), e))?;
            return Err((base + reader.offset(), RdbError::Truncated));
        }
        reader.feed(input.window());
        input.consume(input.window().len());
    }
}

/// Follows SELECT and MULTI/EXEC and hands the rest to the callback.
struct Replay<'c, C> {
    db: usize,
    databases: usize,
    /// The commands of an open MULTI, with their databases; MULTI itself is the first.
    multi: Option<Vec<(usize, Vec<Vec<u8>>)>>,
    on_command: &'c mut C,
    commands: u64,
}

/// A command the replay could not apply, before the file and offset are known.
enum ApplyError<E> {
    Select,
    Format,
    Command(E),
}

impl<E> ApplyError<E> {
    fn at(self, file: &str, offset: u64) -> LoadError<E> {
        let file = file.to_string();
        match self {
            ApplyError::Select => LoadError::Select { file, offset },
            ApplyError::Format => LoadError::Format { file, offset },
            ApplyError::Command(cause) => LoadError::Command { file, offset, cause },
        }
    }
}

impl<C, E> Replay<'_, C>
where
    C: FnMut(usize, &[&[u8]]) -> Result<(), E>,
{
    fn apply(&mut self, argv: &[&[u8]]) -> Result<(), ApplyError<E>> {
        let name = argv[0];
        if name.eq_ignore_ascii_case(b"SELECT") {
            // Valkey's fake client would get an error reply nobody reads and carry on in the
            // old database; a SELECT that cannot be right is corruption, so it stops here.
            let db = argv.get(1).and_then(|a| std::str::from_utf8(a).ok()).and_then(|s| s.parse::<usize>().ok());
            self.db = match (argv.len(), db) {
                (2, Some(db)) if db < self.databases => db,
                _ => return Err(ApplyError::Select),
            };
            return Ok(());
        }
        if name.eq_ignore_ascii_case(b"MULTI") {
            if self.multi.is_some() {
                return Err(ApplyError::Format);
            }
            self.multi = Some(vec![(self.db, argv.iter().map(|a| a.to_vec()).collect())]);
            return Ok(());
        }
        if let Some(queued) = &mut self.multi {
            if !name.eq_ignore_ascii_case(b"EXEC") {
                queued.push((self.db, argv.iter().map(|a| a.to_vec()).collect()));
                return Ok(());
            }
            let queued = self.multi.take().unwrap_or_default();
            for (db, args) in &queued {
                let args: Vec<&[u8]> = args.iter().map(Vec::as_slice).collect();
                self.run(*db, &args)?;
            }
        } else if name.eq_ignore_ascii_case(b"EXEC") {
            return Err(ApplyError::Format);
        }
        self.run(self.db, argv)
    }

    fn run(&mut self, db: usize, argv: &[&[u8]]) -> Result<(), ApplyError<E>> {
        self.commands += 1;
        (self.on_command)(db, argv).map_err(ApplyError::Command)
    }
}

/// A window over a file read in blocks: the bytes read and not consumed, and where they sit
/// in the file.
pub(crate) struct Input {
    buf: Vec<u8>,
    start: usize,
    /// File offset of `buf[0]`.
    base: u64,
    /// Bytes read from the file so far.
    read: u64,
    size: u64,
}

impl Input {
    pub(crate) fn new(size: u64) -> Input {
        Input { buf: Vec::new(), start: 0, base: 0, read: 0, size }
    }

    pub(crate) fn window(&self) -> &[u8] {
        &self.buf[self.start..]
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.start == self.buf.len()
    }

    /// File offset of the window's first byte.
    pub(crate) fn offset(&self) -> u64 {
        self.base + self.start as u64
    }

    /// Bytes from the window's start to the end of the file.
    pub(crate) fn left_in_file(&self) -> u64 {
        self.size.max(self.read) - self.offset()
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
    }

    /// Puts `rest` back as the window, at file offset `at` (what followed the RDB data).
    pub(crate) fn rewind_to(&mut self, at: u64, rest: &[u8]) {
        self.buf.clear();
        self.buf.extend_from_slice(rest);
        self.start = 0;
        self.base = at;
    }

    /// Reads up to `want` more bytes (fewer at the end of the file).
    pub(crate) fn fill(&mut self, file: &mut File, want: usize) -> io::Result<()> {
        if self.start > 0 {
            self.buf.drain(..self.start);
            self.base += self.start as u64;
            self.start = 0;
        }
        let old = self.buf.len();
        // Never more than the file holds: a declared length cannot grow the buffer past it.
        let want = want.min(usize::try_from(self.size.saturating_sub(self.read)).unwrap_or(usize::MAX)).max(1);
        self.buf.resize(old + want, 0);
        let mut got = 0;
        while got < want {
            match file.read(&mut self.buf[old + got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.buf.truncate(old + got);
                    return Err(e);
                }
            }
        }
        self.buf.truncate(old + got);
        self.read += got as u64;
        Ok(())
    }
}

/// Cuts `path` at `len` and makes the cut durable.
pub(crate) fn truncate(path: &Path, len: u64) -> io::Result<()> {
    let f = OpenOptions::new().write(true).open(path)?;
    f.set_len(len)?;
    f.sync_all()
}

/// Whether Valkey would upgrade an old single-file AOF on this start (`loadAppendOnlyFiles`):
/// `<dir>/<appendfilename>` exists and either the AOF directory does not, or its manifest
/// lists nothing, or it lists only a base of that name which is not in the directory yet (a
/// crash between the two steps of a previous upgrade).
pub fn needs_upgrade(paths: &AofPaths, manifest: &Manifest) -> bool {
    if !paths.legacy_file().is_file() {
        return false;
    }
    let aof_dir = paths.aof_dir();
    !aof_dir.is_dir()
        || manifest.is_empty()
        || (manifest.incr.is_empty()
            && manifest.base.as_ref().is_some_and(|b| b.name == paths.filename.as_bytes())
            && !aof_dir.join(&paths.filename).is_file())
}

/// Moves an old single-file AOF into the multi-part layout, as Valkey's `aofUpgradePrepare`:
/// creates the directory, writes a manifest naming the old file as base 1, then moves the file
/// in. A crash between the steps leaves a state [`needs_upgrade`] recognises and this redoes.
pub fn upgrade_legacy(paths: &AofPaths, manifest: &mut Manifest) -> io::Result<()> {
    let aof_dir = paths.aof_dir();
    fs::create_dir_all(&aof_dir).inspect_err(|e| {
        tracing::warn!("Can't open or create append-only dir {}: {e}", paths.dirname);
    })?;
    manifest.base =
        Some(AofFile { name: paths.filename.as_bytes().to_vec(), seq: 1, kind: super::manifest::FileKind::Base });
    manifest.base_seq = 1;
    manifest.persist(&aof_dir, &paths.filename)?;
    fs::rename(paths.legacy_file(), aof_dir.join(&paths.filename)).inspect_err(|e| {
        tracing::warn!("Error trying to move the old AOF file {} into dir {}: {e}", paths.filename, paths.dirname);
    })?;
    super::manifest::sync_dir(&paths.dir)?;
    tracing::info!(
        "Successfully migrated an old-style AOF file ({}) into the AOF directory ({}).",
        paths.filename,
        paths.dirname
    );
    Ok(())
}

/// `REDIS`: the start of an RDB file, which Valkey looks for at the start of every AOF file.
const RDB_MAGIC: &[u8] = b"REDIS";
pub(crate) const READ_BLOCK: usize = 64 * 1024;

#[cfg(test)]
mod tests {
    use hotkv_engine::propagate::{write_command, write_select};
    use hotkv_engine::testkit::TestKit;

    use super::*;
    use crate::aof::manifest::tests::tempdir;

    const NOW: i64 = 1_700_000_000_000;

    fn cmd(out: &mut Vec<u8>, argv: &[&str]) {
        write_command(out, argv.iter().map(|a| a.as_bytes()), argv.len());
    }

    fn paths(tag: &str) -> AofPaths {
        let dir = tempdir(tag);
        AofPaths { dir, dirname: "appendonlydir".into(), filename: "appendonly.aof".into() }
    }

    /// Writes `files` (name, bytes) into the AOF directory with a manifest listing them: a
    /// name with `.base.` is the base, the others incr files in order.
    fn setup(p: &AofPaths, files: &[(&str, &[u8])]) -> Manifest {
        let dir = p.aof_dir();
        fs::create_dir_all(&dir).unwrap();
        let mut m = Manifest::default();
        for (name, bytes) in files {
            fs::write(dir.join(name), bytes).unwrap();
            if name.contains(".base.") {
                m.base = Some(AofFile { name: name.as_bytes().to_vec(), seq: 1, kind: FileKind::Base });
                m.base_seq = 1;
            } else {
                m.incr_seq += 1;
                m.incr.push(AofFile { name: name.as_bytes().to_vec(), seq: m.incr_seq, kind: FileKind::Incr });
            }
        }
        m
    }

    fn opts(load_truncated: bool) -> LoadOptions {
        LoadOptions { load_truncated, max_bulk_len: 512 << 20, databases: 16 }
    }

    /// Loads and returns the commands the callback saw, as `db: ARGS`.
    fn run(p: &AofPaths, m: &Manifest, truncated: bool, ks: &Keyspace) -> Result<(Outcome, Vec<String>), String> {
        let cfg = EngineConfig::default();
        let mut seen = Vec::new();
        let target = RdbTarget { ks, cfg: &cfg, now_ms: NOW };
        let out = load_all(p, m, &opts(truncated), &target, |db, argv| {
            if argv[0] == b"BOOM" {
                return Err("Unknown command 'BOOM'".to_string());
            }
            let args: Vec<String> = argv.iter().map(|a| String::from_utf8_lossy(a).into_owned()).collect();
            seen.push(format!("{db}: {}", args.join(" ")));
            Ok(())
        })
        .map_err(|e| e.to_string())?;
        Ok((out, seen))
    }

    use crate::aof::manifest::FileKind;

    /// A small incr file and the end offset of each unit a cut may fall after (commands, a
    /// whole transaction), with the commands loaded up to there.
    fn sample() -> (Vec<u8>, Vec<(usize, Vec<&'static str>)>) {
        let mut f = Vec::new();
        let mut ends = vec![(0, vec![])];
        f.extend_from_slice(b"#TS:1700000000\r\n");
        // SELECT is a command the loader applies: a cut after it keeps it, as Valkey's does.
        write_select(&mut f, 0);
        ends.push((f.len(), vec![]));
        cmd(&mut f, &["SET", "a", "1"]);
        ends.push((f.len(), vec!["0: SET a 1"]));
        write_select(&mut f, 3);
        ends.push((f.len(), vec!["0: SET a 1"]));
        cmd(&mut f, &["MULTI"]);
        cmd(&mut f, &["SET", "b", "2"]);
        cmd(&mut f, &["INCR", "c"]);
        cmd(&mut f, &["EXEC"]);
        ends.push((f.len(), vec!["0: SET a 1", "3: MULTI", "3: SET b 2", "3: INCR c", "3: EXEC"]));
        f.extend_from_slice(b"#TS:1700000001\r\n");
        cmd(&mut f, &["DEL", "a"]);
        let all = vec!["0: SET a 1", "3: MULTI", "3: SET b 2", "3: INCR c", "3: EXEC", "3: DEL a"];
        ends.push((f.len(), all));
        (f, ends)
    }

    #[test]
    fn a_torn_tail_at_every_byte_offset_is_cut_to_the_last_whole_command() {
        let (file, ends) = sample();
        let p = paths("torn");
        let ks = Keyspace::new(16);
        for cut in 0..=file.len() {
            let (good_end, want) = ends.iter().rev().find(|(end, _)| *end <= cut).unwrap().clone();
            // Annotations and SELECTs after a unit end do not make the cut torn.
            let clean = ends.iter().any(|(end, _)| *end == cut) || is_only_annotations(&file[good_end..cut]);
            let m = setup(&p, &[("appendonly.aof.1.incr.aof", &file[..cut])]);
            let path = p.aof_dir().join("appendonly.aof.1.incr.aof");
            match run(&p, &m, false, &ks) {
                Ok((_, seen)) => {
                    assert!(clean, "cut {cut} loaded without aof-load-truncated");
                    assert_eq!(seen, want, "cut {cut}");
                }
                Err(e) => {
                    assert!(!clean, "cut {cut}: {e}");
                    assert!(
                        e.starts_with("Unexpected end of file reading the append only file appendonly.aof.1.incr.aof")
                    );
                    assert!(e.contains(&format!("offset {good_end}")), "{e}");
                    assert_eq!(fs::metadata(&path).unwrap().len(), cut as u64, "untouched without the option");
                }
            }
            let m = setup(&p, &[("appendonly.aof.1.incr.aof", &file[..cut])]);
            let Ok((out, seen)) = run(&p, &m, true, &ks) else { panic!("cut {cut} refused with the option") };
            assert_eq!(seen, want, "cut {cut}");
            if !clean {
                assert_eq!(fs::metadata(&path).unwrap().len(), good_end as u64, "cut {cut} truncated");
                let Outcome::Loaded(stats) = out else { panic!("cut {cut}: {out:?}") };
                assert_eq!(stats.truncated_at, Some(good_end as u64));
            }
        }
        fs::remove_dir_all(&p.dir).unwrap();
    }

    fn is_only_annotations(mut b: &[u8]) -> bool {
        while !b.is_empty() {
            match parse::next(b, b.len() as u64, 1 << 20) {
                Parsed::Annotation { len } => b = &b[len..],
                _ => return false,
            }
        }
        true
    }

    #[test]
    fn a_torn_file_before_the_last_is_fatal_even_with_the_option() {
        let (file, _) = sample();
        let p = paths("notlast");
        let mut second = Vec::new();
        cmd(&mut second, &["SET", "z", "9"]);
        let m = setup(
            &p,
            &[("appendonly.aof.1.incr.aof", &file[..file.len() - 3]), ("appendonly.aof.2.incr.aof", &second)],
        );
        let e = run(&p, &m, true, &Keyspace::new(16)).unwrap_err();
        assert!(
            e.starts_with("Fatal error: the truncated file is not the last file (appendonly.aof.1.incr.aof"),
            "{e}"
        );
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn corruption_in_the_middle_names_file_and_offset() {
        let p = paths("corrupt");
        let mut f = Vec::new();
        cmd(&mut f, &["SET", "a", "1"]);
        let at = f.len();
        f.extend_from_slice(b"SET b 2\r\n");
        cmd(&mut f, &["SET", "c", "3"]);
        let m = setup(&p, &[("appendonly.aof.1.incr.aof", &f)]);
        let e = run(&p, &m, true, &Keyspace::new(16)).unwrap_err();
        assert!(
            e.starts_with(&format!(
                "Bad file format reading the append only file appendonly.aof.1.incr.aof at offset {at}"
            )),
            "{e}"
        );
        // A bad SELECT, a nested MULTI, an EXEC without MULTI, and the callback's refusal.
        for (bad, want) in [
            (&["SELECT", "16"][..], "Invalid SELECT"),
            (&["SELECT", "x"], "Invalid SELECT"),
            (&["EXEC"], "Bad file format"),
            (&["BOOM"], "Unknown command 'BOOM' reading the append only file appendonly.aof.1.incr.aof at offset"),
        ] {
            let mut f = Vec::new();
            cmd(&mut f, &["SET", "a", "1"]);
            cmd(&mut f, bad);
            let m = setup(&p, &[("appendonly.aof.1.incr.aof", &f)]);
            let e = run(&p, &m, true, &Keyspace::new(16)).unwrap_err();
            assert!(e.starts_with(want), "{bad:?}: {e}");
        }
        let mut f = Vec::new();
        cmd(&mut f, &["MULTI"]);
        cmd(&mut f, &["MULTI"]);
        let m = setup(&p, &[("appendonly.aof.1.incr.aof", &f)]);
        assert!(run(&p, &m, true, &Keyspace::new(16)).unwrap_err().starts_with("Bad file format"));
        fs::remove_dir_all(&p.dir).unwrap();
    }

    fn rdb_of(t: &TestKit) -> Vec<u8> {
        let mut out = Vec::new();
        rdb::snapshot(&t.ks, &[], |c| {
            out.extend_from_slice(c);
            Ok::<(), ()>(())
        })
        .unwrap();
        out
    }

    #[test]
    fn an_rdb_base_then_incr_files_in_order() {
        let mut t = TestKit::default();
        t.run(&["SET", "k1", "v1"]);
        t.run(&["RPUSH", "l", "a", "b"]);
        let p = paths("rdbbase");
        let (mut i1, mut i2) = (Vec::new(), Vec::new());
        write_select(&mut i1, 2);
        cmd(&mut i1, &["SET", "x", "1"]);
        cmd(&mut i2, &["SET", "y", "2"]);
        let base = rdb_of(&t);
        let m = setup(
            &p,
            &[
                ("appendonly.aof.1.base.rdb", &base),
                ("appendonly.aof.1.incr.aof", &i1),
                ("appendonly.aof.2.incr.aof", &[]),
                ("appendonly.aof.3.incr.aof", &i2),
            ],
        );
        let ks = Keyspace::new(16);
        let (out, seen) = run(&p, &m, false, &ks).unwrap();
        assert_eq!(seen, ["2: SET x 1", "0: SET y 2"], "each file starts in db 0");
        assert_eq!(ks.total_keys(), 2);
        let Outcome::Loaded(stats) = out else { panic!() };
        assert_eq!(stats.commands, 2);
        assert_eq!(stats.base_size, base.len() as u64);
        assert_eq!(stats.total_size, (base.len() + i1.len() + i2.len()) as u64);
        assert_eq!(stats.rdb.as_ref().unwrap().loaded, 2);
        assert_eq!(
            stats.files.iter().map(|f| (f.rdb, f.commands)).collect::<Vec<_>>(),
            [(true, 0), (false, 1), (false, 0), (false, 1)]
        );
        // A broken RDB base is fatal, never truncated.
        let m = setup(&p, &[("appendonly.aof.1.base.rdb", &base[..base.len() - 4])]);
        let e = run(&p, &m, true, &Keyspace::new(16)).unwrap_err();
        assert!(e.starts_with("Error reading the RDB base file appendonly.aof.1.base.rdb"), "{e}");
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn an_rdb_base_keeps_keys_past_their_ttl_for_the_commands_after_it() {
        let mut t = TestKit::default();
        t.cfg.from_primary = true;
        t.run(&["RPUSH", "l", "a"]);
        t.run(&["PEXPIREAT", "l", "1"]);
        let p = paths("rdbexpired");
        let mut incr = Vec::new();
        cmd(&mut incr, &["RPUSH", "l", "b"]);
        let base = rdb_of(&t);
        let m = setup(&p, &[("appendonly.aof.1.base.rdb", &base), ("appendonly.aof.1.incr.aof", &incr)]);
        let ks = Keyspace::new(16);
        let (out, _) = run(&p, &m, false, &ks).unwrap();
        assert_eq!(ks.total_keys(), 1);
        let Outcome::Loaded(stats) = out else { panic!() };
        let rdb = stats.rdb.as_ref().unwrap();
        assert_eq!((rdb.loaded, rdb.expired), (1, 0));
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn nothing_to_load_empty_files_and_missing_files() {
        let p = paths("empty");
        let ks = Keyspace::new(16);
        assert!(matches!(run(&p, &Manifest::default(), false, &ks).unwrap().0, Outcome::NotExist));
        let m = setup(&p, &[("appendonly.aof.1.base.aof", &[]), ("appendonly.aof.1.incr.aof", &[])]);
        assert!(matches!(run(&p, &m, false, &ks).unwrap().0, Outcome::Empty));
        fs::remove_file(p.aof_dir().join("appendonly.aof.1.incr.aof")).unwrap();
        let e = run(&p, &m, false, &ks).unwrap_err();
        assert!(e.contains("appendonly.aof.1.incr.aof"), "{e}");
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn an_old_single_file_aof_with_an_rdb_preamble_is_upgraded_then_loaded() {
        let mut t = TestKit::default();
        t.run(&["SET", "pre", "amble"]);
        let p = paths("legacy");
        let mut file = rdb_of(&t);
        cmd(&mut file, &["SET", "tail", "1"]);
        fs::write(p.legacy_file(), &file).unwrap();
        let mut m = p.read_manifest().unwrap();
        assert!(needs_upgrade(&p, &m));
        upgrade_legacy(&p, &mut m).unwrap();
        assert!(!p.legacy_file().exists());
        assert!(!needs_upgrade(&p, &m));
        assert_eq!(p.read_manifest().unwrap(), m);
        assert_eq!(String::from_utf8(m.render()).unwrap(), "file appendonly.aof seq 1 type b\n");
        let ks = Keyspace::new(16);
        let (_, seen) = run(&p, &m, false, &ks).unwrap();
        assert_eq!(seen, ["0: SET tail 1"]);
        assert_eq!(ks.total_keys(), 1);
        // A crash after the manifest was written but before the move: the upgrade is redone.
        fs::rename(p.aof_dir().join("appendonly.aof"), p.legacy_file()).unwrap();
        assert!(needs_upgrade(&p, &p.read_manifest().unwrap()));
        // Not when the AOF directory holds the old name too: that copy is the data set, and
        // the one in `dir` is left alone (Valkey's aof-multi-part "both dirs" case).
        fs::copy(p.legacy_file(), p.aof_dir().join("appendonly.aof")).unwrap();
        assert!(!needs_upgrade(&p, &p.read_manifest().unwrap()));
        // Not when the directory already holds a real data set.
        let mut m2 = Manifest::default();
        m2.add_incr(&p.filename);
        assert!(!needs_upgrade(&p, &m2));
        fs::remove_dir_all(&p.dir).unwrap();
    }

    #[test]
    fn big_arguments_across_read_blocks() {
        let p = paths("big");
        let big = "x".repeat(3 * READ_BLOCK + 17);
        let mut f = Vec::new();
        for i in 0..3 {
            cmd(&mut f, &["SET", &format!("k{i}"), &big]);
        }
        let m = setup(&p, &[("appendonly.aof.1.incr.aof", &f)]);
        let (_, seen) = run(&p, &m, false, &Keyspace::new(16)).unwrap();
        assert_eq!(seen.len(), 3);
        assert!(seen.iter().all(|s| s.len() > 3 * READ_BLOCK));
        fs::remove_dir_all(&p.dir).unwrap();
    }
}
