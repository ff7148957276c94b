//! `hotkv-check-aof`: Valkey's `valkey-check-aof`, run when the `hotkv` binary is started under
//! that name (or `valkey-check-aof`, `redis-check-aof`: redis-server picks its tools by
//! `argv[0]` the same way, and Valkey's Tcl suite calls `src/valkey-check-aof`).
//!
//! ```text
//! hotkv-check-aof [--fix|--truncate-to-timestamp <unix seconds>] <file.manifest|file.aof>
//! ```
//!
//! A manifest is checked file by file in load order, an old single-file AOF (with or without
//! an RDB preamble) as one file. Every line printed, the exit codes (0 valid or fixed, 1
//! otherwise) and what may be cut (only the last file, only after `y` on stdin with `--fix`)
//! are Valkey 8.0's. The commands are read by [`super::parse::next`], the manifest by
//! [`Manifest::load`] and an RDB preamble by the engine's [`RdbReader`]: the checker judges
//! a file as the loader would.
//!
//! Differences: an error inside a command is reported as `Bad file format` or `Unexpected end
//! of file` at the command's offset rather than Valkey's byte-level reason, and
//! `ok_up_to_line` counts the lines of whole commands (Valkey also counts those of the
//! broken command's complete parts).

use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, Read, Write};
use std::path::Path;

use hotkv_engine::rdb::{Item, RdbReader};

use super::load::{Input, READ_BLOCK, truncate};
use super::manifest::Manifest;
use super::parse::{self, Parsed};
use crate::config::os_reason;

/// The `argv[0]` names the binary runs the checker under.
pub const NAMES: [&str; 3] = ["hotkv-check-aof", "valkey-check-aof", "redis-check-aof"];

/// Whether `argv0`'s file name is one of [`NAMES`].
pub fn invoked_as_checker(argv0: &str) -> bool {
    let base = Path::new(argv0).file_name().and_then(|n| n.to_str()).unwrap_or("");
    NAMES.contains(&base)
}

/// Runs the checker with the process's arguments (without `argv[0]`) on stdin and stdout;
/// returns the exit code.
pub fn main(argv0: &str, args: &[String]) -> i32 {
    let stdin = io::stdin();
    let mut out = io::stdout().lock();
    let code = run(argv0, args, &mut stdin.lock(), &mut out);
    let _ = out.flush();
    code
}

/// The checker over any input and output (tests drive it directly).
pub fn run(argv0: &str, args: &[String], stdin: &mut impl BufRead, out: &mut impl Write) -> i32 {
    let Some(cmd) = parse_args(args) else {
        let _ = writeln!(out, "Usage: {argv0} [--fix|--truncate-to-timestamp $timestamp] <file.manifest|file.aof>");
        return 1;
    };
    let mut c = Checker { out, stdin, line: 1, fix: false, to_timestamp: None };
    let path = match cmd {
        Cmd::Version => {
            let name = Path::new(argv0).file_name().and_then(|n| n.to_str()).unwrap_or(NAMES[0]);
            let _ = writeln!(c.out, "{name} {}", crate::VERSION);
            return 0;
        }
        Cmd::InvalidTimestamp => {
            let _ = writeln!(c.out, "Invalid timestamp, aborting...");
            return 1;
        }
        Cmd::Check { path, fix, to_timestamp } => {
            c.fix = fix;
            c.to_timestamp = to_timestamp;
            path
        }
    };
    let result = c.check_path(Path::new(&path));
    let _ = c.out.flush();
    match result {
        Ok(()) => 0,
        Err(Abort) => 1,
    }
}

/// What the arguments ask for (Valkey accepts exactly these shapes).
enum Cmd {
    Version,
    InvalidTimestamp,
    Check { path: String, fix: bool, to_timestamp: Option<i64> },
}

fn parse_args(args: &[String]) -> Option<Cmd> {
    match args {
        [v] if v == "-v" || v == "--version" => Some(Cmd::Version),
        [path] => Some(Cmd::Check { path: path.clone(), fix: false, to_timestamp: None }),
        [fix, path] if fix == "--fix" => Some(Cmd::Check { path: path.clone(), fix: true, to_timestamp: None }),
        [opt, ts, path] if opt == "--truncate-to-timestamp" => Some(match ts.parse::<i64>() {
            // `strtol` with a check of the whole argument: 0 is accepted and means "none".
            Ok(t) => Cmd::Check { path: path.clone(), fix: false, to_timestamp: (t != 0).then_some(t) },
            Err(_) => Cmd::InvalidTimestamp,
        }),
        _ => None,
    }
}

/// The checker stopped with exit status 1; what it had to say is printed.
struct Abort;

/// How one file's check ended (Valkey's `AOF_CHECK_*`).
enum Checked {
    Valid,
    Empty,
    Truncated,
    TimestampTruncated,
}

struct Checker<'a, R, W> {
    out: &'a mut W,
    stdin: &'a mut R,
    /// Valkey's `line`: counted across every file checked, from 1.
    line: u64,
    fix: bool,
    to_timestamp: Option<i64>,
}

macro_rules! say {
    ($c:expr, $($arg:tt)*) => {
        let _ = writeln!($c.out, $($arg)*);
    };
}

impl<R: BufRead, W: Write> Checker<'_, R, W> {
    /// Picks the check by what the file holds: a manifest, an RDB-preamble AOF, or commands.
    fn check_path(&mut self, path: &Path) -> Result<(), Abort> {
        let shown = path.display().to_string();
        let head = self.head(path)?;
        if is_manifest(&head) {
            return self.check_multi_part(path);
        }
        say!(self, "Start checking Old-Style AOF");
        let checked = self.check_file(&shown, path, true, head.len() >= 8 && head.starts_with(b"REDIS"))?;
        self.report(checked, &shown, "AOF");
        Ok(())
    }

    /// The first bytes of `path`: enough to tell a manifest (its first line that is not a
    /// comment starts with `file`) or an RDB from commands.
    fn head(&mut self, path: &Path) -> Result<Vec<u8>, Abort> {
        let data = std::fs::File::open(path).and_then(|f| {
            let mut head = Vec::new();
            f.take(HEAD_BYTES).read_to_end(&mut head)?;
            Ok(head)
        });
        data.map_err(|e| {
            say!(self, "Cannot open file {}: {}", path.display(), os_reason(&e));
            Abort
        })
    }

    fn check_multi_part(&mut self, manifest_path: &Path) -> Result<(), Abort> {
        say!(self, "Start checking Multi Part AOF");
        let manifest = Manifest::load(manifest_path).map_err(|e| {
            say!(self, "{e}");
            Abort
        })?;
        let dir = manifest_path.parent().unwrap_or(Path::new("."));
        let files: Vec<_> = manifest.load_order().cloned().collect();
        for (i, f) in files.iter().enumerate() {
            let path = f.path(dir);
            let name = f.display_name();
            let last = i + 1 == files.len();
            if i == 0 && manifest.base.is_some() {
                let rdb = self.head(&path)?;
                let rdb = rdb.len() >= 8 && rdb.starts_with(b"REDIS");
                say!(self, "Start to check BASE AOF ({} format).", if rdb { "RDB" } else { "RESP" });
                let checked = self.check_file(&name, &path, last, rdb)?;
                self.report(checked, &name, "BASE AOF");
                continue;
            }
            if i == usize::from(manifest.base.is_some()) {
                say!(self, "Start to check INCR files.");
            }
            let checked = self.check_file(&name, &path, last, false)?;
            self.report(checked, &name, "INCR AOF");
        }
        say!(self, "All AOF files and manifest are valid");
        Ok(())
    }

    fn report(&mut self, checked: Checked, name: &str, kind: &str) {
        match checked {
            Checked::Valid => {
                say!(self, "{kind} {name} is valid");
            }
            Checked::Empty => {
                say!(self, "{kind} {name} is empty");
            }
            Checked::TimestampTruncated => {
                say!(self, "Successfully truncated AOF {name} to timestamp {}", self.to_timestamp.unwrap_or(0));
            }
            Checked::Truncated => {
                say!(self, "Successfully truncated AOF {name}");
            }
        }
    }

    /// Valkey's `checkSingleAof`: `name` is what the messages call the file, `last` whether
    /// it may be cut, `preamble` whether it starts with RDB data.
    fn check_file(&mut self, name: &str, path: &Path, last: bool, preamble: bool) -> Result<Checked, Abort> {
        let shown = path.display().to_string();
        let opened = OpenOptions::new().read(true).write(true).open(path).and_then(|f| {
            let size = f.metadata()?.len();
            Ok((f, size))
        });
        let (mut file, size) = opened.map_err(|e| {
            say!(self, "Cannot open file {shown}: {}, aborting...", os_reason(&e));
            Abort
        })?;
        if size == 0 {
            return Ok(Checked::Empty);
        }
        let mut input = Input::new(size);
        let io_abort = |c: &mut Self, e: io::Error| {
            say!(c, "Failed to read from AOF {name}, aborting... ({})", os_reason(&e));
            Abort
        };
        if preamble {
            self.check_rdb(&shown, &mut file, &mut input)?;
            say!(self, "RDB preamble is OK, proceeding with AOF tail...");
        }
        let mut multi = false;
        // Where the data is known good: the start of the item being read outside a MULTI.
        let mut pos = input.offset();
        let mut error = None;
        let mut at_eof = false;
        loop {
            if !multi {
                pos = input.offset();
            }
            if input.is_empty() {
                input.fill(&mut file, READ_BLOCK).map_err(|e| io_abort(self, e))?;
                if input.is_empty() {
                    at_eof = true;
                    break;
                }
            }
            let at = input.offset();
            match parse::next(input.window(), input.left_in_file(), MAX_ARG) {
                Parsed::Annotation { len } => {
                    if let Some(to) = self.to_timestamp
                        && let Some(ts) = timestamp(&input.window()[..len])
                    {
                        let Some(ts) = ts else {
                            say!(self, "Invalid timestamp annotation");
                            return Err(Abort);
                        };
                        if ts > to {
                            return self.cut_at_timestamp(&shown, path, at, last, to);
                        }
                    }
                    input.consume(len);
                }
                Parsed::Command { len, args } => {
                    let (s, e) = args[0];
                    let first = &input.window()[s..e];
                    if first.eq_ignore_ascii_case(b"multi") {
                        if multi {
                            error = Some((at, format!("Unexpected MULTI in AOF {shown}")));
                            break;
                        }
                        multi = true;
                    } else if first.eq_ignore_ascii_case(b"exec") {
                        if !multi {
                            error = Some((at, format!("Unexpected EXEC in AOF {shown}")));
                            break;
                        }
                        multi = false;
                    }
                    // `*<n>` and then `$<len>` and the bytes of each argument: one line each.
                    self.line += 1 + 2 * args.len() as u64;
                    input.consume(len);
                }
                Parsed::Need => {
                    let want = input.window().len().max(READ_BLOCK);
                    input.fill(&mut file, want).map_err(|e| io_abort(self, e))?;
                }
                Parsed::Short => {
                    error = Some((at, "Unexpected end of file".to_string()));
                    at_eof = true;
                    break;
                }
                Parsed::Format if !matches!(input.window()[0], b'*' | b'#') => {
                    say!(self, "AOF {name} format error");
                    break;
                }
                Parsed::Format => {
                    error = Some((at, "Bad file format".to_string()));
                    break;
                }
            }
        }
        if at_eof && multi && error.is_none() {
            error = Some((size, "Reached EOF before reading EXEC for MULTI".to_string()));
        }
        if let Some((at, e)) = error {
            say!(self, "0x{at:16x}: {e}");
        }
        let diff = size - pos;
        if diff == 0
            && let Some(to) = self.to_timestamp
        {
            say!(self, "Truncate nothing in AOF {name} to timestamp {to}");
            return Ok(Checked::Valid);
        }
        say!(
            self,
            "AOF analyzed: filename={name}, size={size}, ok_up_to={pos}, ok_up_to_line={}, diff={diff}",
            self.line
        );
        if diff == 0 {
            return Ok(Checked::Valid);
        }
        if !self.fix {
            say!(self, "AOF {name} is not valid. Use the --fix option to try fixing it.");
            return Err(Abort);
        }
        if !last {
            say!(self, "Failed to truncate AOF {name} because it is not the last file");
            return Err(Abort);
        }
        say!(self, "This will shrink the AOF {name} from {size} bytes, with {diff} bytes, to {pos} bytes");
        let _ = write!(self.out, "Continue? [y/N]: ");
        let _ = self.out.flush();
        let mut answer = String::new();
        if self.stdin.read_line(&mut answer).is_err() || !answer.starts_with(['y', 'Y']) {
            say!(self, "Aborting...");
            return Err(Abort);
        }
        drop(file);
        if truncate(path, pos).is_err() {
            say!(self, "Failed to truncate AOF {name}");
            return Err(Abort);
        }
        Ok(Checked::Truncated)
    }

    /// `--truncate-to-timestamp`: the first `#TS:` annotation past the timestamp, at `at`.
    fn cut_at_timestamp(&mut self, shown: &str, path: &Path, at: u64, last: bool, to: i64) -> Result<Checked, Abort> {
        if at == 0 {
            say!(self, "AOF {shown} has nothing before timestamp {to}, aborting...");
            return Err(Abort);
        }
        if !last {
            say!(
                self,
                "Failed to truncate AOF {shown} to timestamp {to} to offset {at} because it is not the last file."
            );
            say!(
                self,
                "If you insist, please delete all files after this file according to the manifest file and delete \
                 the corresponding records in manifest file manually. Then re-run valkey-check-aof."
            );
            return Err(Abort);
        }
        if truncate(path, at).is_err() {
            say!(self, "Failed to truncate AOF {shown} to timestamp {to}");
            return Err(Abort);
        }
        Ok(Checked::TimestampTruncated)
    }

    /// Reads the RDB data at the start of the file through the engine's reader, printing what
    /// Valkey's `valkey-check-rdb` prints; leaves `input` at the first byte after it.
    fn check_rdb(&mut self, shown: &str, file: &mut File, input: &mut Input) -> Result<(), Abort> {
        say!(self, "[offset 0] Checking RDB file {shown}");
        let mut reader = RdbReader::new(MAX_ARG);
        let now_ms = crate::server::unix_ms();
        let (mut keys, mut expires, mut expired) = (0u64, 0u64, 0u64);
        loop {
            loop {
                let item = match reader.next_item() {
                    Ok(Some(item)) => item,
                    Ok(None) => break,
                    Err(e) => return Err(self.rdb_error(reader.offset(), &e.to_string())),
                };
                let off = reader.offset();
                match item {
                    Item::Aux { key, value } => {
                        say!(
                            self,
                            "[offset {off}] AUX FIELD {} = '{}'",
                            String::from_utf8_lossy(&key),
                            String::from_utf8_lossy(&value)
                        );
                    }
                    Item::SelectDb(db) => {
                        say!(self, "[offset {off}] Selecting DB ID {db}");
                    }
                    Item::Entry { expire_ms, .. } => {
                        keys += 1;
                        if let Some(at) = expire_ms {
                            expires += 1;
                            expired += u64::from(at < now_ms);
                        }
                    }
                    Item::Eof => {
                        say!(self, "[offset {off}] Checksum OK");
                        say!(self, "[offset {off}] \\o/ RDB looks OK! \\o/");
                        say!(self, "[info] {keys} keys read");
                        say!(self, "[info] {expires} expires");
                        say!(self, "[info] {expired} already expired");
                        input.rewind_to(off, reader.remainder());
                        return Ok(());
                    }
                    Item::ResizeDb { .. } | Item::SlotInfo { .. } | Item::FunctionLib(_) => {}
                }
            }
            let fed = input.offset();
            if let Err(e) = input.fill(file, READ_BLOCK) {
                return Err(self.rdb_error(fed, &os_reason(&e)));
            }
            if input.is_empty() {
                return Err(self.rdb_error(reader.offset(), "Unexpected EOF reading RDB file"));
            }
            reader.feed(input.window());
            input.consume(input.window().len());
        }
    }

    fn rdb_error(&mut self, offset: u64, why: &str) -> Abort {
        say!(self, "--- RDB ERROR DETECTED ---");
        say!(self, "[offset {offset}] {why}");
        say!(self, "RDB preamble of AOF file is not sane, aborting.");
        Abort
    }
}

/// Whether a file starting with `head` is a manifest: its first line that is not a comment
/// starts with `file` (Valkey's `fileIsManifest`).
fn is_manifest(head: &[u8]) -> bool {
    head.split(|&b| b == b'\n').find(|l| !l.starts_with(b"#")).is_some_and(|l| l.starts_with(b"file"))
}

/// The time of a `#TS:<seconds>` annotation line: `None` for another annotation, `Some(None)`
/// for a `#TS:` whose number does not end at the line's `\r` (Valkey's "Invalid timestamp
/// annotation").
fn timestamp(line: &[u8]) -> Option<Option<i64>> {
    let rest = line.strip_prefix(b"#TS:")?;
    let end = rest.iter().position(|&b| !(b.is_ascii_digit() || b == b'-')).unwrap_or(rest.len());
    if rest.get(end) != Some(&b'\r') {
        return Some(None);
    }
    Some(std::str::from_utf8(&rest[..end]).ok().and_then(|s| s.parse().ok()))
}

/// Bytes read to tell a manifest from an AOF (a manifest's first line is at most 1024).
const HEAD_BYTES: u64 = 4096;
/// No argument limit beyond what the file holds (Valkey's checker has none either).
const MAX_ARG: u64 = u64::MAX / 4;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments_are_valkeys_shapes() {
        let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert!(matches!(parse_args(&s(&["-v"])), Some(Cmd::Version)));
        assert!(matches!(parse_args(&s(&["f"])), Some(Cmd::Check { fix: false, to_timestamp: None, .. })));
        assert!(matches!(parse_args(&s(&["--fix", "f"])), Some(Cmd::Check { fix: true, .. })));
        assert!(matches!(
            parse_args(&s(&["--truncate-to-timestamp", "12", "f"])),
            Some(Cmd::Check { to_timestamp: Some(12), .. })
        ));
        assert!(matches!(parse_args(&s(&["--truncate-to-timestamp", "x", "f"])), Some(Cmd::InvalidTimestamp)));
        assert!(parse_args(&s(&[])).is_none());
        assert!(parse_args(&s(&["--bogus", "f"])).is_none());
        assert!(invoked_as_checker("/usr/local/bin/valkey-check-aof"));
        assert!(invoked_as_checker("hotkv-check-aof"));
        assert!(!invoked_as_checker("/usr/bin/hotkv"));
    }

    #[test]
    fn manifests_and_timestamps_are_told_apart() {
        assert!(is_manifest(b"# comment\nfile a seq 1 type b\n"));
        assert!(!is_manifest(b"*2\r\n$3\r\nset\r\n"));
        assert_eq!(timestamp(b"#TS:1628217470\r\n"), Some(Some(1_628_217_470)));
        assert_eq!(timestamp(b"#TS:16x\r\n"), Some(None));
        assert_eq!(timestamp(b"#other\r\n"), None);
    }
}
