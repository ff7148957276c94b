//! The manifest of a multi-part append-only file (Valkey 7+): which files in `appenddirname`
//! make up the data set, in which order.
//!
//! One line per file, `file <name> seq <n> type <b|h|i>`: the base first (at most one), then
//! history files (left over from a rewrite, to be deleted), then the incr files in increasing
//! sequence. Names that need it are quoted as Valkey's `sdscatrepr` quotes them. The parser
//! accepts exactly what Valkey 8's `aofLoadManifestFromFile` accepts — `#` comment lines, keys
//! in any order and case, unknown key/value pairs after the three it knows — and refuses the
//! rest with Valkey's message, so a manifest either server wrote loads in the other.

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use hotkv_protocol::split_args;

/// One file of the append-only data set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AofFile {
    /// The file's name inside the AOF directory (never a path).
    pub name: Vec<u8>,
    /// Its sequence number: bases and incr files are numbered separately.
    pub seq: i64,
    /// What the file holds.
    pub kind: FileKind,
}

/// The role of a file in the manifest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// The snapshot at the last rewrite (`b`): an RDB file or commands.
    Base,
    /// A base or incr file a rewrite made obsolete (`h`), deleted after the rewrite.
    History,
    /// Commands written after the base (`i`).
    Incr,
}

impl FileKind {
    /// The letter the manifest uses.
    pub fn letter(self) -> char {
        match self {
            FileKind::Base => 'b',
            FileKind::History => 'h',
            FileKind::Incr => 'i',
        }
    }
}

impl AofFile {
    /// The file's path inside `dir`.
    pub fn path(&self, dir: &Path) -> PathBuf {
        dir.join(std::ffi::OsStr::from_bytes(&self.name))
    }

    /// The name as text, for logs (lossy for names that are not UTF-8).
    pub fn display_name(&self) -> String {
        String::from_utf8_lossy(&self.name).into_owned()
    }
}

/// The parsed manifest: a base, history files, incr files, and the sequence counters new
/// files continue from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Manifest {
    /// The base file, if any.
    pub base: Option<AofFile>,
    /// Files to delete, in manifest order.
    pub history: Vec<AofFile>,
    /// Incr files, in increasing sequence order.
    pub incr: Vec<AofFile>,
    /// The sequence of the current base (0 before the first).
    pub base_seq: i64,
    /// The sequence of the last incr file (0 before the first).
    pub incr_seq: i64,
}

/// Why a manifest does not load: Valkey's messages, with the line they concern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ManifestError {
    /// The file could not be read.
    Io(String),
    /// No line at all: `Found an empty AOF manifest`.
    Empty,
    /// A line of 1024 bytes or more (or a last line without a newline).
    TooLongLine {
        /// 1-based line number.
        line: usize,
    },
    /// A blank line, unbalanced quotes, fewer than six fields, an odd field count, or a
    /// missing name, sequence or type.
    Format {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// A name with `/` or `\`.
    NotBaseName {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// A second `type b` line.
    DuplicateBase {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// An incr file whose sequence is not above the previous one's.
    NonMonotonic {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
    /// A type other than `b`, `h` and `i`.
    UnknownType {
        /// 1-based line number.
        line: usize,
        /// The line, trimmed.
        text: String,
    },
}

impl ManifestError {
    /// Valkey's message for the error, without the line (what `aofLoadManifestFromFile` logs
    /// last).
    pub fn message(&self) -> &'static str {
        match self {
            ManifestError::Io(_) => "Read AOF manifest failed",
            ManifestError::Empty => "Found an empty AOF manifest",
            ManifestError::TooLongLine { .. } => "The AOF manifest file contains too long line",
            ManifestError::Format { .. } => "Invalid AOF manifest file format",
            ManifestError::NotBaseName { .. } => "File can't be a path, just a filename",
            ManifestError::DuplicateBase { .. } => "Found duplicate base file information",
            ManifestError::NonMonotonic { .. } => "Found a non-monotonic sequence number",
            ManifestError::UnknownType { .. } => "Unknown AOF file type",
        }
    }

    /// The line number and text the error concerns, when it concerns one.
    pub fn line(&self) -> Option<(usize, &str)> {
        match self {
            ManifestError::Format { line, text }
            | ManifestError::NotBaseName { line, text }
            | ManifestError::DuplicateBase { line, text }
            | ManifestError::NonMonotonic { line, text }
            | ManifestError::UnknownType { line, text } => Some((*line, text)),
            _ => None,
        }
    }
}

impl fmt::Display for ManifestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ManifestError::Io(e) => write!(f, "Read AOF manifest failed: {e}"),
            ManifestError::TooLongLine { line } => write!(f, "{} (line {line})", self.message()),
            _ => match self.line() {
                Some((line, text)) => write!(f, "{} (line {line}: '{text}')", self.message()),
                None => f.write_str(self.message()),
            },
        }
    }
}

impl std::error::Error for ManifestError {}

impl Manifest {
    /// Parses a manifest as Valkey does, reading it in `fgets` pieces of at most
    /// [`MAX_LINE`] bytes: a piece without a newline is a line too long, except a comment,
    /// whose remainder is then read as the next line (Valkey's quirk, kept so both servers
    /// judge a file alike).
    pub fn parse(text: &[u8]) -> Result<Manifest, ManifestError> {
        let mut am = Manifest::default();
        let mut maxseq = 0i64;
        let mut linenum = 0usize;
        let mut rest = text;
        while !rest.is_empty() {
            let take = match memchr::memchr(b'\n', &rest[..rest.len().min(MAX_LINE)]) {
                Some(i) => i + 1,
                None => rest.len().min(MAX_LINE),
            };
            let (piece, tail) = rest.split_at(take);
            rest = tail;
            linenum += 1;
            // fgets stores a NUL the C string functions stop at.
            let piece = match memchr::memchr(0, piece) {
                Some(i) => &piece[..i],
                None => piece,
            };
            if piece.first() == Some(&b'#') {
                continue;
            }
            if !piece.contains(&b'\n') {
                return Err(ManifestError::TooLongLine { line: linenum });
            }
            let line = trim(piece);
            let text = String::from_utf8_lossy(line).into_owned();
            let format = |text: &str| ManifestError::Format { line: linenum, text: text.to_string() };
            if line.is_empty() {
                return Err(format(&text));
            }
            let argv = split_args(line).map_err(|_| format(&text))?;
            // Fewer than six is an error; more are allowed for keys a later version adds.
            if argv.len() < 6 || argv.len() % 2 != 0 {
                return Err(format(&text));
            }
            let (mut name, mut seq, mut kind) = (None, 0i64, 0u8);
            for pair in argv.chunks_exact(2) {
                let (key, value) = (&pair[0], &pair[1]);
                if key.eq_ignore_ascii_case(KEY_FILE) {
                    // sdsnew() stops at a NUL a quoted name may hold.
                    let v = match memchr::memchr(0, value) {
                        Some(i) => &value[..i],
                        None => value,
                    };
                    if v.contains(&b'/') || v.contains(&b'\\') {
                        return Err(ManifestError::NotBaseName { line: linenum, text });
                    }
                    name = Some(v.to_vec());
                } else if key.eq_ignore_ascii_case(KEY_SEQ) {
                    seq = atoll(value);
                } else if key.eq_ignore_ascii_case(KEY_TYPE) {
                    kind = value.first().copied().unwrap_or(0);
                }
            }
            // Valkey takes an empty name (`file ""`) and fails later, opening the directory as
            // the file; refusing it here says what is wrong sooner.
            let Some(name) = name.filter(|n| !n.is_empty()) else { return Err(format(&text)) };
            if seq == 0 || kind == 0 {
                return Err(format(&text));
            }
            match kind {
                b'b' => {
                    if am.base.is_some() {
                        return Err(ManifestError::DuplicateBase { line: linenum, text });
                    }
                    am.base = Some(AofFile { name, seq, kind: FileKind::Base });
                    am.base_seq = seq;
                }
                b'h' => am.history.push(AofFile { name, seq, kind: FileKind::History }),
                b'i' => {
                    if seq <= maxseq {
                        return Err(ManifestError::NonMonotonic { line: linenum, text });
                    }
                    am.incr.push(AofFile { name, seq, kind: FileKind::Incr });
                    am.incr_seq = seq;
                    maxseq = seq;
                }
                _ => return Err(ManifestError::UnknownType { line: linenum, text }),
            }
        }
        if linenum == 0 {
            return Err(ManifestError::Empty);
        }
        Ok(am)
    }

    /// Reads and parses the manifest file at `path`.
    pub fn load(path: &Path) -> Result<Manifest, ManifestError> {
        let text = read_bounded(path).map_err(|e| ManifestError::Io(e.to_string()))?;
        Manifest::parse(&text)
    }

    /// The manifest as Valkey writes it: base, history, incr, one line each.
    pub fn render(&self) -> Vec<u8> {
        let mut out = Vec::new();
        for f in self.base.iter().chain(&self.history).chain(&self.incr) {
            out.extend_from_slice(b"file ");
            if needs_repr(&f.name) {
                let mut s = String::new();
                hotkv_protocol::repr(&mut s, &f.name);
                out.extend_from_slice(s.as_bytes());
            } else {
                out.extend_from_slice(&f.name);
            }
            out.extend_from_slice(format!(" seq {} type {}\n", f.seq, f.kind.letter()).as_bytes());
        }
        out
    }

    /// Writes the manifest to `<dir>/<filename>.manifest` atomically: a temp file
    /// (`temp-<filename>.manifest`), fsync, rename over the old one, fsync of the directory.
    /// A crash at any point leaves either the old manifest or the new one.
    pub fn persist(&self, dir: &Path, filename: &str) -> io::Result<()> {
        let tmp = dir.join(format!("{TEMP_PREFIX}{filename}{MANIFEST_SUFFIX}"));
        let target = dir.join(manifest_name(filename));
        let result = (|| {
            let mut f = OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
            f.write_all(&self.render())?;
            f.sync_all()?;
            drop(f);
            fs::rename(&tmp, &target)?;
            sync_dir(dir)
        })();
        if let Err(e) = &result {
            tracing::warn!(file = %tmp.display(), cause = %e, "can't write the AOF manifest");
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Whether the manifest lists no base and no incr file (nothing to load).
    pub fn is_empty(&self) -> bool {
        self.base.is_none() && self.incr.is_empty()
    }

    /// The base and incr files, in load order.
    pub fn load_order(&self) -> impl Iterator<Item = &AofFile> {
        self.base.iter().chain(&self.incr)
    }

    /// Adds a new incr file after the last (`<filename>.<seq>.incr.aof`) and returns it.
    pub fn add_incr(&mut self, filename: &str) -> AofFile {
        self.incr_seq += 1;
        let f = AofFile {
            name: format!("{filename}.{}{INCR_SUFFIX}{AOF_SUFFIX}", self.incr_seq).into_bytes(),
            seq: self.incr_seq,
            kind: FileKind::Incr,
        };
        self.incr.push(f.clone());
        f
    }

    /// Names a new base (`<filename>.<seq>.base.rdb` or `.base.aof`), moving the old base to
    /// the front of the history, and returns it.
    pub fn new_base(&mut self, filename: &str, rdb_preamble: bool) -> AofFile {
        if let Some(mut old) = self.base.take() {
            old.kind = FileKind::History;
            self.history.insert(0, old);
        }
        self.base_seq += 1;
        let format = if rdb_preamble { RDB_SUFFIX } else { AOF_SUFFIX };
        let f = AofFile {
            name: format!("{filename}.{}{BASE_SUFFIX}{format}", self.base_seq).into_bytes(),
            seq: self.base_seq,
            kind: FileKind::Base,
        };
        self.base = Some(f.clone());
        f
    }

    /// Moves every incr file but the last `keep` to the history (the files a rewrite's new
    /// base covers; the newest is the one being written).
    pub fn retire_incr(&mut self, keep: usize) {
        let n = self.incr.len().saturating_sub(keep);
        // Valkey adds each to the head walking from the tail, which keeps their order.
        let retired: Vec<AofFile> = self.incr.drain(..n).map(|f| AofFile { kind: FileKind::History, ..f }).collect();
        self.history.splice(0..0, retired);
    }
}

/// `<filename>.manifest`.
pub fn manifest_name(filename: &str) -> String {
    format!("{filename}{MANIFEST_SUFFIX}")
}

/// Fsyncs a directory, so a rename or a new file in it survives a crash.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Whether Valkey's `sdsneedsrepr` would quote the name.
fn needs_repr(s: &[u8]) -> bool {
    s.iter().any(|&c| matches!(c, b'\\' | b'"') || !(0x21..=0x7e).contains(&c))
}

/// `sdstrim(s, " \t\r\n")`.
fn trim(s: &[u8]) -> &[u8] {
    let blank = |c: &u8| matches!(c, b' ' | b'\t' | b'\r' | b'\n');
    let start = s.iter().position(|c| !blank(c)).unwrap_or(s.len());
    let end = s.iter().rposition(|c| !blank(c)).map_or(start, |i| i + 1);
    &s[start..end.max(start)]
}

/// C's `atoll` on glibc: blanks, a sign, digits up to the first other byte; saturates.
fn atoll(s: &[u8]) -> i64 {
    let mut i = s.iter().take_while(|c| c.is_ascii_whitespace()).count();
    let neg = match s.get(i) {
        Some(b'-') => {
            i += 1;
            true
        }
        Some(b'+') => {
            i += 1;
            false
        }
        _ => false,
    };
    let mut v: i64 = 0;
    for &c in s[i..].iter().take_while(|c| c.is_ascii_digit()) {
        let d = i64::from(c - b'0');
        v = if neg { v.saturating_mul(10).saturating_sub(d) } else { v.saturating_mul(10).saturating_add(d) };
    }
    v
}

/// Reads a manifest, refusing one larger than any sane manifest could be before reading it
/// whole (a directory, a device or a huge file named like one must not exhaust memory).
fn read_bounded(path: &Path) -> io::Result<Vec<u8>> {
    use std::io::Read;
    let f = File::open(path)?;
    let mut out = Vec::new();
    f.take(MAX_MANIFEST_BYTES + 1).read_to_end(&mut out)?;
    if out.len() as u64 > MAX_MANIFEST_BYTES {
        return Err(io::Error::other(format!("manifest larger than {MAX_MANIFEST_BYTES} bytes")));
    }
    Ok(out)
}

/// Valkey's `MANIFEST_MAX_LINE`: a line must end within this many bytes.
pub const MAX_LINE: usize = 1024;
/// A manifest lists a few files; this much would be a million of them.
const MAX_MANIFEST_BYTES: u64 = 64 << 20;
const KEY_FILE: &[u8] = b"file";
const KEY_SEQ: &[u8] = b"seq";
const KEY_TYPE: &[u8] = b"type";
const BASE_SUFFIX: &str = ".base";
const INCR_SUFFIX: &str = ".incr";
const RDB_SUFFIX: &str = ".rdb";
const AOF_SUFFIX: &str = ".aof";
const MANIFEST_SUFFIX: &str = ".manifest";
/// Prefix of the files Valkey writes before renaming them into place.
pub const TEMP_PREFIX: &str = "temp-";

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn parse(s: &str) -> Result<Manifest, ManifestError> {
        Manifest::parse(s.as_bytes())
    }

    fn err(s: &str) -> &'static str {
        parse(s).unwrap_err().message()
    }

    #[test]
    fn valkey_written_manifest_loads_and_renders_back_byte_for_byte() {
        // From the comment in Valkey's aof.c, and as a rewrite with history leaves it.
        let text = "file appendonly.aof.2.base.rdb seq 2 type b\n\
                    file appendonly.aof.1.incr.aof seq 1 type h\n\
                    file appendonly.aof.2.incr.aof seq 2 type h\n\
                    file appendonly.aof.3.incr.aof seq 3 type h\n\
                    file appendonly.aof.4.incr.aof seq 4 type i\n\
                    file appendonly.aof.5.incr.aof seq 5 type i\n";
        let m = parse(text).unwrap();
        assert_eq!(m.base.as_ref().unwrap().name, b"appendonly.aof.2.base.rdb");
        assert_eq!((m.base_seq, m.incr_seq), (2, 5));
        assert_eq!(m.history.len(), 3);
        assert_eq!(m.incr.iter().map(|f| f.seq).collect::<Vec<_>>(), [4, 5]);
        assert_eq!(String::from_utf8(m.render()).unwrap(), text);
        let names: Vec<_> = m.load_order().map(AofFile::display_name).collect();
        assert_eq!(names, ["appendonly.aof.2.base.rdb", "appendonly.aof.4.incr.aof", "appendonly.aof.5.incr.aof"]);
    }

    #[test]
    fn loader_accepts_what_valkey_accepts() {
        // Comments, CRLF, blanks around, keys in any order and case, extra pairs.
        let m = parse(
            "# a comment\r\n  TYPE b SEQ 1 FILE x.base.aof  \r\nfile y seq 3 type i newkey v\n#\nfile z seq 7 type i\n",
        )
        .unwrap();
        assert_eq!(m.base.unwrap().name, b"x.base.aof");
        assert_eq!(m.incr.len(), 2);
        // Only comments: an empty manifest, which is fine (not "empty").
        assert!(parse("# nothing\n").unwrap().is_empty());
        // atoll: trailing garbage after digits is ignored; negative numbers pass.
        assert_eq!(parse("file a seq 12abc type i\n").unwrap().incr[0].seq, 12);
        assert_eq!(parse("file a seq -3 type h\n").unwrap().history[0].seq, -3);
        // Only the first letter of the type counts.
        assert_eq!(parse("file a seq 1 type incr\n").unwrap().incr.len(), 1);
        // Quoted names with spaces and escapes.
        let m = parse("file \"my file\\x41\\n\" seq 1 type b\n").unwrap();
        assert_eq!(m.base.unwrap().name, b"my fileA\n");
    }

    #[test]
    fn names_that_need_it_are_quoted_and_read_back() {
        for name in [&b"plain.aof"[..], b"with space", b"quote\"d", b"back\\slash-less", b"tab\there", b"\xff\x01bin"] {
            let name = name.to_vec();
            if name.contains(&b'\\') {
                continue; // refused as a path, see below
            }
            let m = Manifest {
                base: Some(AofFile { name: name.clone(), seq: 1, kind: FileKind::Base }),
                base_seq: 1,
                ..Manifest::default()
            };
            let text = m.render();
            assert_eq!(Manifest::parse(&text).unwrap(), m, "{}", String::from_utf8_lossy(&text));
        }
        let m = Manifest {
            incr: vec![AofFile { name: b"a b".to_vec(), seq: 1, kind: FileKind::Incr }],
            incr_seq: 1,
            ..Manifest::default()
        };
        assert_eq!(m.render(), b"file \"a b\" seq 1 type i\n");
    }

    #[test]
    fn every_malformed_case_gets_valkeys_message() {
        assert_eq!(err(""), "Found an empty AOF manifest");
        assert_eq!(err("\n"), "Invalid AOF manifest file format");
        assert_eq!(err("   \t\r\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file a seq 1\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file a seq 1 type\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file a seq 1 type b x\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file \"a seq 1 type b\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file a seq 0 type b\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file a seq x type b\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file a seq 1 type \"\"\n"), "Invalid AOF manifest file format");
        assert_eq!(err("name a seq 1 type b\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file \"\" seq 1 type b\n"), "Invalid AOF manifest file format");
        assert_eq!(err("file a/b seq 1 type b\n"), "File can't be a path, just a filename");
        assert_eq!(err("file ..\\b seq 1 type b\n"), "File can't be a path, just a filename");
        assert_eq!(err("file a seq 1 type b\nfile b seq 2 type b\n"), "Found duplicate base file information");
        assert_eq!(err("file a seq 2 type i\nfile b seq 2 type i\n"), "Found a non-monotonic sequence number");
        assert_eq!(err("file a seq 3 type i\nfile b seq 1 type i\n"), "Found a non-monotonic sequence number");
        assert_eq!(err("file a seq 1 type x\n"), "Unknown AOF file type");
        // The last line must end with a newline, as fgets sees it.
        assert_eq!(err("file a seq 1 type b"), "The AOF manifest file contains too long line");
        let long = format!("file {} seq 1 type b\n", "a".repeat(MAX_LINE));
        assert_eq!(err(&long), "The AOF manifest file contains too long line");
        // A NUL ends the line for the C string functions.
        assert_eq!(err("file a seq 1 type b\0\n"), "The AOF manifest file contains too long line");
        // Errors name the line.
        let e = parse("# c\nfile a seq 1 type b\nfile a seq 1 type q\n").unwrap_err();
        assert_eq!(e.line(), Some((3, "file a seq 1 type q")));
        assert_eq!(e.to_string(), "Unknown AOF file type (line 3: 'file a seq 1 type q')");
    }

    #[test]
    fn the_manifests_of_valkeys_multi_part_suite_get_its_messages() {
        // tests/integration/aof-multi-part.tcl in Valkey 8.0.1, the manifest of each case.
        let cases = [
            (
                "file appendonly.aof.2.incr.aof seq 2 type i\nfile appendonly.aof.1.incr.aof seq 1 type i\n",
                "Found a non-monotonic sequence number",
            ),
            (
                "file appendonly.aof.1.incr.aof seq 1 type i\n\nfile appendonly.aof.3.incr.aof seq 3 type i\n",
                "Invalid AOF manifest file format",
            ),
            (
                "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.2.base.aof seq 2 type b\n",
                "Found duplicate base file information",
            ),
            ("file appendonly.aof.1.base.aof seq 1 type x\n", "Unknown AOF file type"),
            ("filx appendonly.aof.1.base.aof seq 1 type b\n", "Invalid AOF manifest file format"),
            (
                "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof type i\n",
                "Invalid AOF manifest file format",
            ),
            (
                "file appendonly.aof.1.base.aof seq 1 type b\nfile appendonly.aof.1.incr.aof seq 1 type i newkey\n",
                "Invalid AOF manifest file format",
            ),
            ("", "Found an empty AOF manifest"),
        ];
        for (text, want) in cases {
            assert_eq!(err(text), want, "{text:?}");
        }
        let long = "file appendonly.aof.1.base.aof seq 1 type b ".repeat(45) + "\n";
        assert_eq!(err(&long), "The AOF manifest file contains too long line");
        // And what it loads: new keys, discontinuous sequences.
        let m = parse("file appendonly.aof.1.base.aof seq 1 type b newkey newvalue\nfile appendonly.aof.1.incr.aof seq 1 type i\nfile appendonly.aof.3.incr.aof seq 3 type i\n").unwrap();
        assert_eq!((m.base_seq, m.incr_seq, m.incr.len()), (1, 3, 2));
    }

    #[test]
    fn a_long_comment_is_read_on_as_the_next_line() {
        // Valkey reads 1024 bytes of the comment, skips them, and parses the rest as a line.
        let tail = "file a seq 1 type b\n";
        let text = format!("#{}{tail}", "x".repeat(MAX_LINE - 1));
        assert_eq!(parse(&text).unwrap().base.unwrap().name, b"a");
        // A line of exactly 1023 bytes plus its newline fits.
        let name = "n".repeat(MAX_LINE - 1 - "file  seq 1 type b".len());
        assert!(parse(&format!("file {name} seq 1 type b\n")).is_ok());
        let name = format!("{name}n");
        assert_eq!(err(&format!("file {name} seq 1 type b\n")), "The AOF manifest file contains too long line");
    }

    #[test]
    fn new_files_are_named_and_retired_as_valkey_does() {
        let mut m = Manifest::default();
        let i1 = m.add_incr("appendonly.aof");
        assert_eq!(i1.name, b"appendonly.aof.1.incr.aof");
        let b = m.new_base("appendonly.aof", true);
        assert_eq!(b.name, b"appendonly.aof.1.base.rdb");
        m.add_incr("appendonly.aof");
        m.add_incr("appendonly.aof");
        m.retire_incr(1);
        let b2 = m.new_base("appendonly.aof", false);
        assert_eq!(b2.name, b"appendonly.aof.2.base.aof");
        assert_eq!(
            String::from_utf8(m.render()).unwrap(),
            "file appendonly.aof.2.base.aof seq 2 type b\n\
             file appendonly.aof.1.base.rdb seq 1 type h\n\
             file appendonly.aof.1.incr.aof seq 1 type h\n\
             file appendonly.aof.2.incr.aof seq 2 type h\n\
             file appendonly.aof.3.incr.aof seq 3 type i\n"
        );
    }

    #[test]
    fn persist_is_atomic_and_leaves_no_temp_file() {
        let dir = tempdir("persist");
        let mut m = Manifest::default();
        m.add_incr("appendonly.aof");
        m.persist(&dir, "appendonly.aof").unwrap();
        assert_eq!(Manifest::load(&dir.join("appendonly.aof.manifest")).unwrap(), m);
        assert!(!dir.join("temp-appendonly.aof.manifest").exists());
        // A failing write (no such directory) is an error, not a panic, and leaves nothing.
        assert!(m.persist(&dir.join("missing"), "appendonly.aof").is_err());
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn parser_never_panics_on_short_garbage() {
        let alphabet = [&b"file"[..], b" ", b"seq", b"type", b"\n", b"\"", b"'", b"1", b"b", b"#", b"\0", b"\\x4"];
        let mut state = 7u64;
        for _ in 0..20_000 {
            let mut s = Vec::new();
            for _ in 0..(state % 24) {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                s.extend_from_slice(alphabet[(state >> 33) as usize % alphabet.len()]);
            }
            if let Ok(m) = Manifest::parse(&s) {
                // Whatever loads renders to something that loads to the same.
                let text = m.render();
                if !text.is_empty() {
                    assert_eq!(Manifest::parse(&text).unwrap(), m);
                }
            }
        }
    }

    pub(crate) fn tempdir(tag: &str) -> PathBuf {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("hotkv-aof-{tag}-{}-{n}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        dir
    }
}
