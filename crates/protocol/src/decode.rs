//! Request decoding: multibulk (`*N\r\n$len\r\n...`) and inline commands.
//!
//! The decoder is resumable: it remembers how far it got in a partial command, so a large
//! argument arriving in many reads, or a command with a million arguments, is scanned once.
//! Arguments are recorded as byte ranges into the caller's buffer (zero copy); inline
//! commands, whose quoting must be undone, are unquoted into a small scratch buffer.

use std::fmt;

use crate::split::split_args_into;

/// Longest inline command, and longest `*N`/`$N` header line, Valkey accepts
/// (`PROTO_INLINE_MAX_SIZE`).
pub const INLINE_MAX_SIZE: usize = 64 * 1024;

/// Arguments at least this large make the decoder publish a capacity hint so the reader can
/// grow its buffer once instead of many times (`PROTO_MBULK_BIG_ARG`).
pub const BIG_ARG: usize = 32 * 1024;

/// Before authentication Valkey refuses large requests so an unauthenticated peer cannot make
/// it buffer much: at most this many arguments...
const UNAUTH_MAX_ARGS: i64 = 10;
/// ...and arguments of at most this many bytes.
const UNAUTH_MAX_BULK: i64 = 16 * 1024;

/// Limits in force for the next command.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `proto-max-bulk-len`: the largest single argument.
    pub max_bulk_len: u64,
    /// The client has not authenticated yet while a password is required.
    pub auth_required: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_bulk_len: 512 * 1024 * 1024, auth_required: false }
    }
}

/// What one call to [`Decoder::next`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A complete command; read it with [`Decoder::args`].
    Command,
    /// An empty request (`*0\r\n`, `*-1\r\n` or a blank inline line): nothing to run, but
    /// bytes were consumed.
    Empty,
    /// More bytes are needed.
    Incomplete,
}

/// Malformed input. The connection answers `-ERR Protocol error: <Display>` and closes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProtocolError {
    /// An inline request longer than [`INLINE_MAX_SIZE`] without a newline.
    TooBigInline,
    /// A `*N` header line longer than [`INLINE_MAX_SIZE`].
    TooBigMbulkCount,
    /// `*N` with N not an integer or above `i32::MAX`.
    InvalidMultibulkLen,
    /// More than 10 arguments before authentication.
    UnauthenticatedMultibulkLen,
    /// A bulk longer than 16 KiB before authentication.
    UnauthenticatedBulkLen,
    /// A `$N` header line longer than [`INLINE_MAX_SIZE`].
    TooBigBulkCount,
    /// An argument that does not start with `$`.
    ExpectedDollar(u8),
    /// `$N` with N negative, not an integer or above `proto-max-bulk-len`.
    InvalidBulkLen,
    /// An inline request with an unterminated quote.
    UnbalancedQuotes,
}

impl fmt::Display for ProtocolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProtocolError::TooBigInline => f.write_str("too big inline request"),
            ProtocolError::TooBigMbulkCount => f.write_str("too big mbulk count string"),
            ProtocolError::InvalidMultibulkLen => f.write_str("invalid multibulk length"),
            ProtocolError::UnauthenticatedMultibulkLen => f.write_str("unauthenticated multibulk length"),
            ProtocolError::UnauthenticatedBulkLen => f.write_str("unauthenticated bulk length"),
            ProtocolError::TooBigBulkCount => f.write_str("too big bulk count string"),
            ProtocolError::ExpectedDollar(b) => write!(f, "expected '$', got '{}'", *b as char),
            ProtocolError::InvalidBulkLen => f.write_str("invalid bulk length"),
            ProtocolError::UnbalancedQuotes => f.write_str("unbalanced quotes in request"),
        }
    }
}

impl std::error::Error for ProtocolError {}

/// Resumable request decoder. One per connection; its vectors are reused for every command.
#[derive(Debug, Default)]
pub struct Decoder {
    /// End of the last complete command: everything before it may be discarded.
    consumed: usize,
    /// How far the partial command has been parsed.
    cursor: usize,
    /// Arguments still expected by the partial multibulk command; 0 when between commands.
    remaining: usize,
    /// Length of the bulk whose `$N` header has been read but whose payload has not.
    bulk_len: Option<usize>,
    /// Ranges of the current command's arguments, in the read buffer or in `scratch`.
    spans: Vec<(usize, usize)>,
    /// Unquoted inline arguments.
    scratch: Vec<u8>,
    /// Whether the current command is inline (its spans point into `scratch`).
    inline: bool,
    /// Total buffer length needed to finish the big argument being read, if any.
    want: usize,
    /// Where the multibulk command being decoded starts (its `*`).
    frame_start: usize,
    /// Whether every byte of that command so far is what a canonical encoder writes: headers
    /// taken by `quick_header` and followed by `\n`, payloads followed by `\r\n` (the parser
    /// itself tolerates other forms, as Valkey's does). Noted while parsing, so the write
    /// stream can take the request's bytes as they are without checking them again.
    canonical: bool,
}

impl Decoder {
    /// A decoder positioned at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Decodes the next command from `buf`, which must hold the same bytes as on the previous
    /// call, possibly with more appended (after [`Decoder::discard_consumed`], minus the
    /// discarded prefix).
    pub fn next(&mut self, buf: &[u8], limits: Limits) -> Result<Step, ProtocolError> {
        if self.remaining == 0 {
            // Between commands: the previous command's arguments are no longer needed.
            self.spans.clear();
            self.inline = false;
            self.cursor = self.consumed;
            let Some(&first) = buf.get(self.consumed) else {
                return Ok(Step::Incomplete);
            };
            if first != b'*' {
                return self.inline_command(buf);
            }
            self.frame_start = self.cursor;
            self.canonical = true;
            match self.multibulk_header(buf, limits)? {
                Some(0) => {
                    self.consumed = self.cursor;
                    return Ok(Step::Empty);
                }
                Some(n) => {
                    self.remaining = n;
                    self.spans.reserve(n.min(1024));
                }
                None => return Ok(Step::Incomplete),
            }
        }
        while self.remaining > 0 {
            let len = match self.bulk_len {
                Some(len) => len,
                None => match self.bulk_header(buf, limits)? {
                    Some(len) => len,
                    None => return Ok(Step::Incomplete),
                },
            };
            if buf.len() - self.cursor < len.saturating_add(2) {
                return Ok(Step::Incomplete);
            }
            // Like Valkey, the two bytes after the payload are skipped, not refused; they only
            // decide whether the request is canonical.
            let end = self.cursor + len;
            self.canonical &= buf[end] == b'\r' && buf[end + 1] == b'\n';
            self.spans.push((self.cursor, end));
            self.cursor += len + 2;
            self.bulk_len = None;
            self.remaining -= 1;
        }
        self.want = 0;
        self.consumed = self.cursor;
        Ok(Step::Command)
    }

    /// The arguments of the command last returned as [`Step::Command`]. `buf` must be the
    /// buffer passed to that call.
    pub fn args<'a>(&'a self, buf: &'a [u8]) -> Args<'a> {
        let buf = if self.inline { &self.scratch[..] } else { buf };
        Args::decoded(buf, &self.spans, self.frame_start())
    }

    /// Where the command last returned as [`Step::Command`] starts in the buffer, when its
    /// bytes are canonical RESP (see [`Args::resp_frame`]); `None` for anything else.
    pub fn frame_start(&self) -> Option<usize> {
        (!self.inline && self.canonical).then_some(self.frame_start)
    }

    /// Bytes at the front of the buffer that belong to complete commands.
    pub fn consumed(&self) -> usize {
        self.consumed
    }

    /// Forgets the consumed prefix: the caller must drop exactly the returned number of bytes
    /// from the front of its buffer before the next call.
    pub fn discard_consumed(&mut self) -> usize {
        let n = self.consumed;
        if n == 0 {
            return 0;
        }
        self.consumed = 0;
        self.cursor -= n;
        if self.remaining > 0 && !self.inline {
            self.frame_start -= n;
            for span in &mut self.spans {
                span.0 -= n;
                span.1 -= n;
            }
        }
        if self.want > 0 {
            self.want -= n;
        }
        n
    }

    /// When a big argument is being received, the total buffer length that will hold it:
    /// the reader reserves this much at once.
    pub fn wanted_capacity(&self) -> usize {
        self.want
    }

    /// Where the payload of the big argument being received starts in the buffer, if one is:
    /// Valkey's query buffer holds only that payload then (CLIENT LIST `qbuf`).
    pub fn big_arg_start(&self) -> Option<usize> {
        matches!(self.bulk_len, Some(n) if n >= BIG_ARG).then_some(self.cursor)
    }

    /// Whether the last command was inline: its arguments live in the decoder's own scratch
    /// buffer and are overwritten by the next inline command.
    pub fn is_inline(&self) -> bool {
        self.inline
    }

    /// Moves back to `offset`, the end of an earlier complete command, so the commands after
    /// it are decoded again (a batch stopped early: a blocked client, a closing connection).
    pub fn rewind_to(&mut self, offset: usize) {
        debug_assert!(offset <= self.consumed);
        self.consumed = offset;
        self.cursor = offset;
        self.remaining = 0;
        self.bulk_len = None;
        self.spans.clear();
        self.inline = false;
        self.want = 0;
    }

    /// Whether a command is partially received (used to tell a clean EOF from a cut one).
    pub fn in_command(&self) -> bool {
        self.remaining > 0
    }

    fn inline_command(&mut self, buf: &[u8]) -> Result<Step, ProtocolError> {
        let rest = &buf[self.consumed..];
        let Some(nl) = memchr::memchr(b'\n', rest) else {
            if rest.len() > INLINE_MAX_SIZE {
                return Err(ProtocolError::TooBigInline);
            }
            return Ok(Step::Incomplete);
        };
        let line = if nl > 0 && rest[nl - 1] == b'\r' { &rest[..nl - 1] } else { &rest[..nl] };
        self.scratch.clear();
        self.spans.clear();
        split_args_into(line, &mut self.scratch, &mut self.spans).map_err(|_| ProtocolError::UnbalancedQuotes)?;
        self.consumed += nl + 1;
        self.cursor = self.consumed;
        if self.spans.is_empty() {
            return Ok(Step::Empty);
        }
        self.inline = true;
        Ok(Step::Command)
    }

    /// Parses `*N\r\n` at the cursor; `Some(0)` for an empty or negative count.
    fn multibulk_header(&mut self, buf: &[u8], limits: Limits) -> Result<Option<usize>, ProtocolError> {
        let (n, line) = match quick_header(buf, self.cursor) {
            Some((n, line)) => {
                self.canonical &= buf[line + 1] == b'\n';
                (n as i64, line)
            }
            None => {
                let Some(line) = header_line(buf, self.cursor, ProtocolError::TooBigMbulkCount)? else {
                    return Ok(None);
                };
                // A whole header quick_header did not take: not as an encoder writes it.
                self.canonical = false;
                (crate::number::parse_i64(&buf[self.cursor + 1..line]).ok_or(ProtocolError::InvalidMultibulkLen)?, line)
            }
        };
        if n > i32::MAX as i64 {
            return Err(ProtocolError::InvalidMultibulkLen);
        }
        if n > UNAUTH_MAX_ARGS && limits.auth_required {
            return Err(ProtocolError::UnauthenticatedMultibulkLen);
        }
        self.cursor = line + 2;
        Ok(Some(n.max(0) as usize))
    }

    /// Parses `$N\r\n` at the cursor.
    fn bulk_header(&mut self, buf: &[u8], limits: Limits) -> Result<Option<usize>, ProtocolError> {
        let (n, line) = match quick_header(buf, self.cursor) {
            Some((n, line)) if buf[self.cursor] == b'$' => {
                self.canonical &= buf[line + 1] == b'\n';
                (n as i64, line)
            }
            _ => {
                let Some(line) = header_line(buf, self.cursor, ProtocolError::TooBigBulkCount)? else {
                    return Ok(None);
                };
                self.canonical = false;
                if buf[self.cursor] != b'$' {
                    return Err(ProtocolError::ExpectedDollar(buf[self.cursor]));
                }
                (crate::number::parse_i64(&buf[self.cursor + 1..line]).ok_or(ProtocolError::InvalidBulkLen)?, line)
            }
        };
        if n < 0 || (n as u64) > limits.max_bulk_len {
            return Err(ProtocolError::InvalidBulkLen);
        }
        if n > UNAUTH_MAX_BULK && limits.auth_required {
            return Err(ProtocolError::UnauthenticatedBulkLen);
        }
        let len = usize::try_from(n).map_err(|_| ProtocolError::InvalidBulkLen)?;
        self.cursor = line + 2;
        self.bulk_len = Some(len);
        if len >= BIG_ARG {
            self.want = self.cursor.saturating_add(len).saturating_add(2);
        }
        Ok(Some(len))
    }
}

/// The common header, parsed in one pass: a type byte, 1 to 18 decimal digits without a
/// superfluous leading zero, `\r`, and one more byte present. Anything else (signs, long or
/// malformed numbers, an incomplete line) returns `None` and takes the general path, which
/// finds the line end with memchr and reports errors; headers are a few bytes long, so
/// memchr's setup cost per call dominated decoding.
#[inline]
fn quick_header(buf: &[u8], start: usize) -> Option<(u64, usize)> {
    let digits = buf.get(start + 1..)?;
    let mut v: u64 = 0;
    for (i, &c) in digits.iter().take(19).enumerate() {
        if c == b'\r' {
            let leading_zero = i > 1 && digits[0] == b'0';
            return (i > 0 && !leading_zero && start + 1 + i + 1 < buf.len()).then_some((v, start + 1 + i));
        }
        let d = c.wrapping_sub(b'0');
        if d > 9 {
            return None;
        }
        v = v * 10 + u64::from(d);
    }
    None
}

/// Finds the `\r` ending the header line that starts at `start`, requiring the byte after it
/// to be present too (Valkey does not check that it is `\n`).
fn header_line(buf: &[u8], start: usize, too_big: ProtocolError) -> Result<Option<usize>, ProtocolError> {
    let rest = &buf[start..];
    match memchr::memchr(b'\r', rest) {
        Some(i) if i + 1 < rest.len() => Ok(Some(start + i)),
        Some(_) => Ok(None),
        None if rest.len() > INLINE_MAX_SIZE => Err(too_big),
        None => Ok(None),
    }
}

/// The arguments of one command, borrowed from the read buffer.
#[derive(Clone, Copy)]
pub struct Args<'a> {
    buf: &'a [u8],
    spans: &'a [(usize, usize)],
    frame: Frame,
}

/// What the decoder knows of the bytes around a command's arguments (see
/// [`Args::resp_frame`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Frame {
    /// Nothing: arguments put together by a caller; [`Args::resp_frame`] checks the bytes.
    Unchecked,
    /// A canonical multibulk request starting at this offset of the buffer.
    At(usize),
    /// Not canonical RESP (an inline request, or one the parser tolerated).
    Not,
}

impl<'a> Args<'a> {
    /// Arguments built from separately owned slices' backing buffer and ranges; used by
    /// callers that replay stored commands (MULTI queues, tests).
    pub fn from_parts(buf: &'a [u8], spans: &'a [(usize, usize)]) -> Self {
        Args { buf, spans, frame: Frame::Unchecked }
    }

    /// Arguments a decoder returned, kept as ranges of its buffer for a batch: `frame_start`
    /// is what [`Decoder::frame_start`] said of them.
    pub fn decoded(buf: &'a [u8], spans: &'a [(usize, usize)], frame_start: Option<usize>) -> Self {
        let frame = match frame_start {
            Some(at) => Frame::At(at),
            None => Frame::Not,
        };
        Args { buf, spans, frame }
    }

    /// Number of arguments, the command name included.
    pub fn len(&self) -> usize {
        self.spans.len()
    }

    /// Whether there are no arguments (never true for a decoded command).
    pub fn is_empty(&self) -> bool {
        self.spans.is_empty()
    }

    /// Argument `i`; panics when out of range, so check [`Args::len`] (arity) first.
    pub fn get(&self, i: usize) -> &'a [u8] {
        let (s, e) = self.spans[i];
        &self.buf[s..e]
    }

    /// Argument `i`, or `None` past the end.
    pub fn opt(&self, i: usize) -> Option<&'a [u8]> {
        self.spans.get(i).map(|&(s, e)| &self.buf[s..e])
    }

    /// All arguments in order.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + 'a {
        let buf = self.buf;
        self.spans.iter().map(move |&(s, e)| &buf[s..e])
    }

    /// The argument ranges (into the buffer these arguments borrow).
    pub fn spans(&self) -> &'a [(usize, usize)] {
        self.spans
    }

    /// Total bytes of all arguments.
    pub fn total_len(&self) -> usize {
        self.spans.iter().map(|(s, e)| e - s).sum()
    }

    /// The command as canonical RESP (`*N\r\n` then `$len\r\narg\r\n` per argument),
    /// borrowed from the buffer, when the bytes around the arguments are exactly that: a
    /// multibulk request as clients send it. It is then byte for byte what encoding the
    /// arguments again would give, without the work (the write stream records most calls
    /// this way). None for anything else: inline requests and stored commands, whose
    /// arguments sit side by side, and requests the decoder tolerated but that are not
    /// canonical (`$03`, or other bytes where a `\r\n` belongs after a payload).
    pub fn resp_frame(&self) -> Option<&'a [u8]> {
        let frame = match self.frame {
            Frame::At(start) => {
                let &(_, last) = self.spans.last()?;
                self.buf.get(start..last + 2)
            }
            Frame::Not => None,
            Frame::Unchecked => self.checked_frame(),
        };
        debug_assert_eq!(frame, self.checked_frame(), "the decoder's account of a request's bytes");
        frame
    }

    /// [`Args::resp_frame`] found by checking every byte around the arguments.
    fn checked_frame(&self) -> Option<&'a [u8]> {
        let &(first, _) = self.spans.first()?;
        let &(_, last) = self.spans.last()?;
        let buf = self.buf;
        // Checked a byte at a time: slice compares of one- to three-byte strings went through
        // memcmp calls, 1.5% of a primary's CPU with a replica attached (SET -P16).
        let header = 1 + decimal_len(self.spans.len()) + 2 + 1 + decimal_len(self.spans[0].1 - first) + 2;
        let start = first.checked_sub(header)?;
        let frame = buf.get(start..last.checked_add(2)?)?;
        let mut pos = canonical_number(buf, start, b'*', self.spans.len())?;
        for &(s, e) in self.spans {
            pos = canonical_number(buf, pos, b'$', e - s)?;
            if pos != s || buf.get(e) != Some(&b'\r') || buf.get(e + 1) != Some(&b'\n') {
                return None;
            }
            pos = e + 2;
        }
        Some(frame)
    }
}

/// How many decimal digits `n` takes.
fn decimal_len(mut n: usize) -> usize {
    let mut len = 1;
    while n >= 10 {
        n /= 10;
        len += 1;
    }
    len
}

/// Whether `buf` holds `<mark><n>\r\n` at `pos`, with `n` written as a canonical encoder
/// writes it (no sign, no leading zero); the position after it.
fn canonical_number(buf: &[u8], pos: usize, mark: u8, n: usize) -> Option<usize> {
    if buf.get(pos) != Some(&mark) {
        return None;
    }
    let first = pos + 1;
    let mut at = first;
    let mut value: usize = 0;
    while let Some(&d) = buf.get(at).filter(|d| d.is_ascii_digit()) {
        value = value.checked_mul(10)?.checked_add(usize::from(d - b'0'))?;
        at += 1;
    }
    let digits = at - first;
    if digits == 0 || value != n || (digits > 1 && buf[first] == b'0') {
        return None;
    }
    if buf.get(at) != Some(&b'\r') || buf.get(at + 1) != Some(&b'\n') {
        return None;
    }
    Some(at + 2)
}

impl fmt::Debug for Args<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter().map(String::from_utf8_lossy)).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_canonical_request_is_its_own_frame_and_nothing_else_is() {
        let frame_of = |wire: &[u8]| {
            let mut d = Decoder::new();
            // A request the decoder refuses never reaches the stream.
            if !matches!(d.next(wire, Limits::default()), Ok(Step::Command)) {
                return None;
            }
            let args = d.args(wire);
            let mut again = Vec::new();
            again.push(b'*');
            again.extend_from_slice(args.len().to_string().as_bytes());
            again.extend_from_slice(b"\r\n");
            for a in args.iter() {
                again.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
                again.extend_from_slice(a);
                again.extend_from_slice(b"\r\n");
            }
            args.resp_frame().map(|f| {
                assert_eq!(f, &again[..], "a frame is what encoding gives");
                f.to_vec()
            })
        };
        let set = b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n*1\r\n$4\r\nPING\r\n";
        assert_eq!(frame_of(set).as_deref(), Some(&set[..26]));
        // The second command of a buffer.
        let mut d = Decoder::new();
        d.next(set, Limits::default()).unwrap();
        d.next(set, Limits::default()).unwrap();
        assert_eq!(d.args(set).resp_frame(), Some(&set[26..]));
        // Tolerated but not canonical: the decoder's view is not what the stream must carry.
        assert_eq!(frame_of(b"*1\r\n$4\r\nPINGxx"), None);
        assert_eq!(frame_of(b"*2\r\n$3\r\nGET\r\n$01\r\nk\r\n"), None);
        assert_eq!(frame_of(b"*01\r\n$4\r\nPING\r\n"), None);
        assert_eq!(frame_of(b"SET k v\r\n"), None, "inline");
        // A header or a payload followed by `\r` and some other byte (Valkey skips both).
        assert_eq!(frame_of(b"*2\r\n$3\r\nGET\r\n$1\r\nk\rX"), None);
        assert_eq!(frame_of(b"*2\r\n$3\r\nGET\r\n$1\rXk\r\n"), None);
        assert_eq!(frame_of(b"*1\rX$4\r\nPING\r\n"), None);
        let flat = b"SETkv";
        let spans = [(0, 3), (3, 4), (4, 5)];
        assert_eq!(Args::from_parts(flat, &spans).resp_frame(), None, "stored");
    }

    fn decode_all(input: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut d = Decoder::new();
        let mut out = Vec::new();
        loop {
            match d.next(input, Limits::default())? {
                Step::Command => out.push(d.args(input).iter().map(<[u8]>::to_vec).collect()),
                Step::Empty => {}
                Step::Incomplete => return Ok(out),
            }
        }
    }

    fn strs(v: &[&str]) -> Vec<Vec<u8>> {
        v.iter().map(|s| s.as_bytes().to_vec()).collect()
    }

    #[test]
    fn multibulk_and_pipeline() {
        let got = decode_all(b"*1\r\n$4\r\nPING\r\n*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n").unwrap();
        assert_eq!(got, vec![strs(&["PING"]), strs(&["SET", "k", ""])]);
    }

    #[test]
    fn inline_with_quotes() {
        let got = decode_all(b"set \"a b\" 'c\\'d'\r\nPING\n\r\n").unwrap();
        assert_eq!(got, vec![strs(&["set", "a b", "c'd"]), strs(&["PING"])]);
    }

    #[test]
    fn empty_multibulk_is_skipped() {
        assert_eq!(decode_all(b"*0\r\n*-1\r\n*1\r\n$1\r\nx\r\n").unwrap(), vec![strs(&["x"])]);
    }

    #[test]
    fn byte_at_a_time_is_resumable() {
        let input = b"*2\r\n$4\r\nECHO\r\n$11\r\nhello world\r\nPING\r\n";
        let mut d = Decoder::new();
        let mut buf = Vec::new();
        let mut got = Vec::new();
        for &b in input.iter() {
            buf.push(b);
            loop {
                match d.next(&buf, Limits::default()).unwrap() {
                    Step::Command => got.push(d.args(&buf).iter().map(<[u8]>::to_vec).collect::<Vec<_>>()),
                    Step::Empty => {}
                    Step::Incomplete => break,
                }
            }
            let n = d.discard_consumed();
            buf.drain(..n);
        }
        assert_eq!(got, vec![strs(&["ECHO", "hello world"]), strs(&["PING"])]);
        assert!(buf.is_empty());
    }

    #[test]
    fn errors_match_valkey() {
        assert_eq!(decode_all(b"*x\r\n").unwrap_err().to_string(), "invalid multibulk length");
        assert_eq!(decode_all(b"*3000000000\r\n").unwrap_err(), ProtocolError::InvalidMultibulkLen);
        assert_eq!(decode_all(b"*1\r\nfoo\r\n").unwrap_err().to_string(), "expected '$', got 'f'");
        assert_eq!(decode_all(b"*1\r\n$-1\r\n").unwrap_err().to_string(), "invalid bulk length");
        assert_eq!(decode_all(b"*1\r\n$600000000\r\n").unwrap_err().to_string(), "invalid bulk length");
        assert_eq!(decode_all(b"\"abc\r\n").unwrap_err().to_string(), "unbalanced quotes in request");
        let long = vec![b'a'; INLINE_MAX_SIZE + 1];
        assert_eq!(decode_all(&long).unwrap_err().to_string(), "too big inline request");
        let mut long = b"*1\r\n$".to_vec();
        long.extend(std::iter::repeat_n(b'1', INLINE_MAX_SIZE + 1));
        assert_eq!(decode_all(&long).unwrap_err().to_string(), "too big bulk count string");
    }

    #[test]
    fn unauthenticated_limits() {
        let limits = Limits { auth_required: true, ..Limits::default() };
        let mut d = Decoder::new();
        assert_eq!(d.next(b"*11\r\n", limits).unwrap_err(), ProtocolError::UnauthenticatedMultibulkLen);
        let mut d = Decoder::new();
        assert_eq!(d.next(b"*1\r\n$16385\r\n", limits).unwrap_err(), ProtocolError::UnauthenticatedBulkLen);
    }

    #[test]
    fn quick_header_agrees_with_the_general_parser() {
        for text in [
            "0",
            "1",
            "3",
            "16",
            "100",
            "01",
            "00",
            "-1",
            "+1",
            " 1",
            "1 ",
            "",
            "x",
            "999999999999999999",
            "9999999999999999999",
            "12a",
        ] {
            let line = format!("${text}\r\n");
            let buf = line.as_bytes();
            let general = crate::number::parse_i64(text.as_bytes()).filter(|n| *n >= 0);
            // Refusing (None) is always allowed: the general path then decides.
            if let Some((v, end)) = quick_header(buf, 0) {
                assert_eq!(Some(v as i64), general, "{text:?}");
                assert_eq!(end, 1 + text.len());
            }
        }
        assert_eq!(quick_header(b"$5\r", 0), None, "the byte after \\r must be there");
    }

    #[test]
    fn big_argument_publishes_wanted_capacity() {
        let mut d = Decoder::new();
        let buf = b"*1\r\n$100000\r\nabc";
        assert_eq!(d.next(buf, Limits::default()).unwrap(), Step::Incomplete);
        assert_eq!(d.wanted_capacity(), 13 + 100_000 + 2);
    }

    #[test]
    fn big_argument_start_skips_the_headers_before_it() {
        let mut d = Decoder::new();
        // A complete command first: after it is discarded, offsets are the partial one's.
        let mut buf = b"*1\r\n$4\r\nPING\r\n*2\r\n$3\r\nSET\r\n$40000\r\nabc".to_vec();
        assert_eq!(d.next(&buf, Limits::default()).unwrap(), Step::Command);
        assert_eq!(d.big_arg_start(), None);
        assert_eq!(d.next(&buf, Limits::default()).unwrap(), Step::Incomplete);
        let n = d.discard_consumed();
        buf.drain(..n);
        let start = d.big_arg_start().expect("a big argument is being read");
        assert_eq!(&buf[start..], b"abc");
        let mut small = Decoder::new();
        assert_eq!(small.next(b"*1\r\n$30000\r\nab", Limits::default()).unwrap(), Step::Incomplete);
        assert_eq!(small.big_arg_start(), None, "under 32 KiB Valkey keeps the whole query");
        buf.extend(std::iter::repeat_n(b'x', 40_000 - 3));
        buf.extend_from_slice(b"\r\n");
        assert_eq!(d.next(&buf, Limits::default()).unwrap(), Step::Command);
        assert_eq!(d.big_arg_start(), None);
    }

    proptest::proptest! {
        #[test]
        fn never_panics_on_garbage(data in proptest::collection::vec(proptest::num::u8::ANY, 0..512)) {
            let _ = decode_all(&data);
        }

        #[test]
        fn never_panics_on_resp_like_garbage(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b"*".to_vec()),
                    proptest::strategy::Just(b"$".to_vec()),
                    proptest::strategy::Just(b"\r\n".to_vec()),
                    proptest::strategy::Just(b"-1".to_vec()),
                    proptest::strategy::Just(b"3".to_vec()),
                    proptest::strategy::Just(b"\"".to_vec()),
                    proptest::collection::vec(proptest::num::u8::ANY, 0..4),
                ],
                0..64,
            )
        ) {
            let data: Vec<u8> = parts.concat();
            let _ = decode_all(&data);
        }

        #[test]
        fn round_trips_any_arguments(args in proptest::collection::vec(
            proptest::collection::vec(proptest::num::u8::ANY, 0..40), 1..8)) {
            let mut wire = format!("*{}\r\n", args.len()).into_bytes();
            for a in &args {
                wire.extend(format!("${}\r\n", a.len()).bytes());
                wire.extend(a);
                wire.extend(b"\r\n");
            }
            proptest::prop_assert_eq!(decode_all(&wire).unwrap(), vec![args]);
            let mut d = Decoder::new();
            proptest::prop_assert_eq!(d.next(&wire, Limits::default()).unwrap(), Step::Command);
            proptest::prop_assert_eq!(d.args(&wire).resp_frame(), Some(&wire[..]));
        }

        /// Fed in pieces, with the consumed prefix discarded between them, the decoder's
        /// account of each request's bytes (what a batch keeps, `Decoder::frame_start`) gives
        /// the frame that checking the bytes gives.
        #[test]
        fn the_decoders_account_of_a_frame_holds_across_reads(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n".to_vec()),
                    proptest::strategy::Just(b"*1\r\n$4\r\nPING\r\n".to_vec()),
                    proptest::strategy::Just(b"*2\r\n$3\r\nGET\r\n$1\rXk\r\n".to_vec()),
                    proptest::strategy::Just(b"*2\r\n$3\r\nGET\r\n$1\r\nk\rX".to_vec()),
                    proptest::strategy::Just(b"*1\r\n$4\r\nPINGxx".to_vec()),
                    proptest::strategy::Just(b"PING\r\n".to_vec()),
                    proptest::strategy::Just(b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$40\r\n0123456789012345678901234567890123456789\r\n".to_vec()),
                ],
                1..12,
            ),
            cuts in proptest::collection::vec(1usize..40, 1..40),
        ) {
            let wire: Vec<u8> = parts.concat();
            let (mut d, mut buf, mut fed, mut seen) = (Decoder::new(), Vec::new(), 0, 0);
            let mut cuts = cuts.into_iter().cycle();
            while fed < wire.len() {
                let n = cuts.next().unwrap_or(1).min(wire.len() - fed);
                buf.extend_from_slice(&wire[fed..fed + n]);
                fed += n;
                while let Ok(Step::Command) = d.next(&buf, Limits::default()) {
                    seen += 1;
                    let args = d.args(&buf);
                    let kept = Args::decoded(&buf, args.spans(), d.frame_start());
                    let checked = Args::from_parts(&buf, args.spans()).resp_frame();
                    proptest::prop_assert_eq!(args.resp_frame(), checked);
                    proptest::prop_assert_eq!(kept.resp_frame(), checked);
                }
                let n = d.discard_consumed();
                buf.drain(..n);
            }
            proptest::prop_assert_eq!(seen, parts.len());
        }

        /// Whatever the decoder accepts, a frame it vouches for is the canonical encoding.
        #[test]
        fn a_frame_is_always_the_canonical_encoding(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::strategy::Just(b"*2\r\n".to_vec()),
                    proptest::strategy::Just(b"$1\r\n".to_vec()),
                    proptest::strategy::Just(b"$01\r\n".to_vec()),
                    proptest::strategy::Just(b"\r\n".to_vec()),
                    proptest::strategy::Just(b"x\r\n".to_vec()),
                    proptest::collection::vec(proptest::num::u8::ANY, 0..3),
                ],
                0..24,
            )
        ) {
            let data: Vec<u8> = parts.concat();
            let mut d = Decoder::new();
            while let Ok(Step::Command) = d.next(&data, Limits::default()) {
                let args = d.args(&data);
                if let Some(frame) = args.resp_frame() {
                    let mut again = format!("*{}\r\n", args.len()).into_bytes();
                    for a in args.iter() {
                        again.extend(format!("${}\r\n", a.len()).bytes());
                        again.extend(a);
                        again.extend(b"\r\n");
                    }
                    proptest::prop_assert_eq!(frame, &again[..]);
                }
            }
        }
    }
}
