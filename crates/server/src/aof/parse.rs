//! The command format of AOF files: RESP multibulk commands and `#` annotation lines, read
//! from a buffer that may hold only part of the file.
//!
//! [`next`] never allocates for a declared length: every count and length is checked against
//! the bytes the file still holds before anything is read, so a corrupt header cannot turn
//! into a large allocation, only into [`Parsed::Short`] (the file ends before the command
//! does) or [`Parsed::Format`].

/// What the bytes at the start of a buffer hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// A whole command of `len` bytes; `args` are the argument ranges within the buffer.
    Command {
        /// Bytes the command takes, header to last CRLF.
        len: usize,
        /// Each argument's `start..end` in the buffer.
        args: Vec<(usize, usize)>,
    },
    /// An annotation line (`#TS:...`) of `len` bytes, newline included; skipped by loaders.
    Annotation {
        /// Bytes the line takes.
        len: usize,
    },
    /// The buffer ends inside the item and the file holds more: read more and call again.
    Need,
    /// The file ends inside the item: a torn tail (Valkey's "short read").
    Short,
    /// Bytes that are not an AOF command: an inline command, a bad header, a missing CRLF.
    Format,
}

/// Parses the item at the start of `buf`. `in_file` is how many bytes the file holds from
/// `buf`'s start to its end (at least `buf.len()`); `max_bulk` bounds an argument's length
/// (`proto-max-bulk-len`). `buf` must not be empty.
pub fn next(buf: &[u8], in_file: u64, max_bulk: u64) -> Parsed {
    debug_assert!(!buf.is_empty() && in_file >= buf.len() as u64);
    let more = in_file > buf.len() as u64;
    match buf[0] {
        b'#' => match memchr::memchr(b'\n', &buf[..buf.len().min(LINE_MAX)]) {
            Some(i) => Parsed::Annotation { len: i + 1 },
            None if buf.len() >= LINE_MAX => Parsed::Format,
            None if more => Parsed::Need,
            // Valkey's fgets returns the unterminated last line and the loader skips it.
            None => Parsed::Annotation { len: buf.len() },
        },
        b'*' => command(buf, in_file, max_bulk),
        // Inline commands (`SET k v`) and anything else: Valkey's "Bad file format".
        _ => Parsed::Format,
    }
}

fn command(buf: &[u8], in_file: u64, max_bulk: u64) -> Parsed {
    let (argc, mut p) = match header(buf, 0, b'*', in_file) {
        Header::Value(n, end) => (n, end),
        Header::Other(p) => return p,
    };
    if argc < 1 {
        return Parsed::Format;
    }
    // Every argument takes at least `$0\r\n\r\n`: the vector is sized for what the file can
    // hold, not for what the header claims.
    let fits = in_file.saturating_sub(p as u64) / MIN_ARG;
    let mut args = Vec::with_capacity(argc.min(fits).min(PREALLOC_MAX) as usize);
    for _ in 0..argc {
        if p == buf.len() {
            return if (p as u64) < in_file { Parsed::Need } else { Parsed::Short };
        }
        let (len, start) = match header(buf, p, b'$', in_file) {
            Header::Value(n, end) => (n, end),
            Header::Other(p) => return p,
        };
        if len > max_bulk {
            return Parsed::Format;
        }
        let end = start as u64 + len;
        if end + 2 > in_file {
            return Parsed::Short;
        }
        if end + 2 > buf.len() as u64 {
            return Parsed::Need;
        }
        let end = end as usize;
        if &buf[end..end + 2] != b"\r\n" {
            return Parsed::Format;
        }
        args.push((start, end));
        p = end + 2;
    }
    Parsed::Command { len: p, args }
}

enum Header {
    /// The number and where the line after it starts.
    Value(u64, usize),
    Other(Parsed),
}

/// Reads `<sigil><digits>\r\n` at `p`.
fn header(buf: &[u8], p: usize, sigil: u8, in_file: u64) -> Header {
    if buf[p] != sigil {
        return Header::Other(Parsed::Format);
    }
    let window = &buf[p..buf.len().min(p + LINE_MAX)];
    let Some(nl) = memchr::memchr(b'\n', window) else {
        if window.len() >= LINE_MAX {
            return Header::Other(Parsed::Format);
        }
        let more = in_file > buf.len() as u64;
        return Header::Other(if more { Parsed::Need } else { Parsed::Short });
    };
    let digits = window[1..nl].strip_suffix(b"\r").unwrap_or(&window[1..nl]);
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Header::Other(Parsed::Format);
    }
    let n = digits.iter().fold(0u64, |v, &d| v * 10 + u64::from(d - b'0'));
    Header::Value(n, p + nl + 1)
}

/// Valkey's `AOF_ANNOTATION_LINE_MAX_LEN`: the `fgets` buffer every header and annotation
/// line must fit in.
pub const LINE_MAX: usize = 1024;
/// The shortest argument, `$0\r\n\r\n`.
const MIN_ARG: u64 = 6;
/// Arguments reserved up front; a longer command grows the vector as its arguments parse.
const PREALLOC_MAX: u64 = 1024;

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(buf: &[u8]) -> Parsed {
        next(buf, buf.len() as u64, 512 << 20)
    }

    #[test]
    fn commands_annotations_and_what_is_refused() {
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        assert_eq!(whole(set), Parsed::Command { len: set.len(), args: vec![(8, 11), (17, 18), (24, 25)] });
        assert_eq!(whole(b"#TS:1700000000\r\n*1"), Parsed::Annotation { len: 16 });
        assert_eq!(whole(b"#TS:17"), Parsed::Annotation { len: 6 }, "a torn annotation is skipped");
        assert_eq!(whole(b"SET k v\r\n"), Parsed::Format, "inline");
        assert_eq!(whole(b"*0\r\n"), Parsed::Format);
        assert_eq!(whole(b"*-1\r\n"), Parsed::Format);
        assert_eq!(whole(b"*x\r\n$1\r\na\r\n"), Parsed::Format);
        assert_eq!(whole(b"*1\r\n:1\r\n"), Parsed::Format);
        assert_eq!(whole(b"*1\r\n$1\r\nab\r\n"), Parsed::Format, "no CRLF after the argument");
        assert_eq!(whole(b"*1\r\n$-1\r\n"), Parsed::Format);
        assert_eq!(next(b"*1\r\n$9\r\n123456789\r\n", 19, 8), Parsed::Format, "over proto-max-bulk-len");
        let long = format!("#{}\n", "x".repeat(LINE_MAX));
        assert_eq!(whole(long.as_bytes()), Parsed::Format);
    }

    #[test]
    fn every_cut_of_a_command_is_short_or_needs_more() {
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1\r\nv\r\n";
        for cut in 1..set.len() {
            assert_eq!(whole(&set[..cut]), Parsed::Short, "cut at {cut}");
            assert_eq!(next(&set[..cut], set.len() as u64, 1 << 20), Parsed::Need, "cut at {cut}");
        }
    }

    #[test]
    fn declared_sizes_the_file_cannot_hold_allocate_nothing() {
        // A count of 2^60 arguments in a 20-byte file: torn, not a 2^63-byte vector.
        assert_eq!(whole(b"*1152921504606846976\r\n"), Parsed::Short);
        assert_eq!(whole(b"*1\r\n$100000000\r\nab"), Parsed::Short);
        assert_eq!(whole(b"*99999999999999999999\r\n"), Parsed::Format, "more than 19 digits");
    }
}
