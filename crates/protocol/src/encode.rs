//! Reply encoding into one reused buffer, in the protocol version the client chose.
//!
//! Every reply of a batch of pipelined commands is appended to the same [`ReplyBuf`], which
//! the connection then writes with a single system call (and, under TLS, as one record).

use bytes::BytesMut;

/// The RESP version a client speaks (`HELLO 2` / `HELLO 3`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// RESP2, the default.
    #[default]
    Resp2,
    /// RESP3, after `HELLO 3`.
    Resp3,
}

/// An output buffer plus the protocol to encode in.
#[derive(Debug)]
pub struct ReplyBuf {
    buf: BytesMut,
    proto: Protocol,
    /// Length past which the buffer drops what it holds ([`ReplyBuf::set_limit`]); `usize::MAX`
    /// for none.
    cap: usize,
    /// The part of `cap` that Valkey's static reply buffer would take.
    buffer_room: usize,
    /// The limit was passed since it was set.
    passed: bool,
}

/// Room for a client's pending replies before its output buffer hard limit, as Valkey counts
/// it: the first bytes fill its static reply buffer and do not count, the rest goes to its
/// reply list, which must stay under the limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplyLimit {
    /// Bytes the static reply buffer still takes.
    pub buffer_room: usize,
    /// Bytes the reply list may hold before the hard limit is reached.
    pub list_room: usize,
}

impl Default for ReplyBuf {
    fn default() -> Self {
        ReplyBuf { buf: BytesMut::new(), proto: Protocol::default(), cap: usize::MAX, buffer_room: 0, passed: false }
    }
}

impl ReplyBuf {
    /// An empty buffer for RESP2 replies.
    pub fn new() -> Self {
        Self::default()
    }

    /// The protocol replies are encoded in.
    pub fn protocol(&self) -> Protocol {
        self.proto
    }

    /// Switches the protocol for the following replies.
    pub fn set_protocol(&mut self, proto: Protocol) {
        self.proto = proto;
    }

    /// Whether replies are RESP3.
    pub fn is_resp3(&self) -> bool {
        self.proto == Protocol::Resp3
    }

    /// Bytes waiting to be written.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing is waiting to be written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Applies an output buffer hard limit to the replies appended from now on (`None` for
    /// none), Valkey's check as it adds each reply: once they pass it the buffer drops what it
    /// holds, and again whenever it fills past it, so a client about to be closed for it never
    /// holds more. The caller learns it from [`ReplyBuf::limit_passed`]; a handler that loops
    /// over a huge reply may stop early on it, as Valkey's stop on `CLIENT_CLOSE_ASAP`.
    pub fn set_limit(&mut self, limit: Option<ReplyLimit>) {
        self.passed = false;
        (self.cap, self.buffer_room) = match limit {
            Some(l) => (l.buffer_room.saturating_add(l.list_room), l.buffer_room),
            None => (usize::MAX, 0),
        };
    }

    /// Whether an output buffer limit applies ([`ReplyBuf::set_limit`]).
    pub fn is_limited(&self) -> bool {
        self.cap != usize::MAX
    }

    /// Whether the replies passed the limit since it was set: the client is to be closed.
    pub fn limit_passed(&self) -> bool {
        self.passed
    }

    /// For a reply built apart and appended at once when its length is known (KEYS): whether
    /// `extra` more bytes still fit under the limit. Valkey sends everything after a deferred
    /// length to its reply list, so they count in full. When they do not fit the limit counts
    /// as passed and the caller should stop building.
    pub fn admit(&mut self, extra: usize) -> bool {
        let listed = self.buf.len().saturating_sub(self.buffer_room);
        if self.cap == usize::MAX || listed.saturating_add(extra) <= self.cap - self.buffer_room {
            return true;
        }
        self.drop_replies();
        false
    }

    /// Drops everything after `len`: used to take back a partly written reply.
    pub fn truncate(&mut self, len: usize) {
        self.buf.truncate(len);
    }

    /// The encoded bytes.
    pub fn as_bytes(&self) -> &[u8] {
        &self.buf
    }

    /// The underlying buffer, for the writer.
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Forgets the first `n` bytes (written to the socket).
    pub fn consume(&mut self, n: usize) {
        let _ = self.buf.split_to(n);
    }

    /// Frees the buffer's memory when idle, keeping the protocol setting.
    pub fn release(&mut self) {
        self.buf = BytesMut::new();
    }

    /// Current capacity in bytes (for `CLIENT LIST omem`).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// `+OK`.
    pub fn ok(&mut self) {
        self.buf.extend_from_slice(b"+OK\r\n");
    }

    /// A simple string `+s`. `s` must not contain `\r` or `\n`.
    pub fn simple(&mut self, s: &str) {
        self.simple_bytes(s.as_bytes());
    }

    /// A simple string from bytes. Newlines are replaced by spaces, as Valkey does.
    pub fn simple_bytes(&mut self, s: &[u8]) {
        self.buf.extend_from_slice(b"+");
        self.extend_sanitized(s);
        self.buf.extend_from_slice(b"\r\n");
        self.check();
    }

    /// An error `-CODE message`; `msg` must include the code (`ERR ...`, `WRONGTYPE ...`).
    pub fn error(&mut self, msg: &str) {
        self.buf.extend_from_slice(b"-");
        self.extend_sanitized(msg.as_bytes());
        self.buf.extend_from_slice(b"\r\n");
        self.check();
    }

    /// An integer `:n`.
    pub fn int(&mut self, n: i64) {
        match n {
            0 => self.buf.extend_from_slice(b":0\r\n"),
            1 => self.buf.extend_from_slice(b":1\r\n"),
            _ => self.prefixed(b':', n),
        }
    }

    /// A bulk string.
    pub fn bulk(&mut self, b: &[u8]) {
        // Room for the whole reply first: growing after the header would copy what is
        // already there (perf showed a fifth of a 16 KiB GET's copying in that realloc).
        self.buf.reserve(b.len() + 24);
        self.prefixed(b'$', b.len() as i64);
        self.buf.extend_from_slice(b);
        self.buf.extend_from_slice(b"\r\n");
        self.check();
    }

    /// A bulk string holding the decimal form of `n`.
    pub fn bulk_int(&mut self, n: i64) {
        let mut ib = itoa::Buffer::new();
        self.bulk(ib.format(n).as_bytes());
    }

    /// The header of a bulk string whose `len` bytes the caller appends with
    /// [`ReplyBuf::raw`], followed by [`ReplyBuf::crlf`].
    pub fn bulk_header(&mut self, len: usize) {
        self.prefixed(b'$', len as i64);
    }

    /// Raw bytes, appended as they are.
    pub fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
        self.check();
    }

    /// `\r\n`.
    pub fn crlf(&mut self) {
        self.buf.extend_from_slice(b"\r\n");
    }

    /// The null reply: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.extend_from_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
        self.check();
    }

    /// The null array: `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        match self.proto {
            Protocol::Resp2 => self.buf.extend_from_slice(b"*-1\r\n"),
            Protocol::Resp3 => self.buf.extend_from_slice(b"_\r\n"),
        }
    }

    /// An array header for `n` elements.
    pub fn array(&mut self, n: usize) {
        self.prefixed(b'*', n as i64);
    }

    /// A map header for `n` key/value pairs (a flat array of `2n` in RESP2).
    pub fn map(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.prefixed(b'*', 2 * n as i64),
            Protocol::Resp3 => self.prefixed(b'%', n as i64),
        }
    }

    /// A set header for `n` elements (an array in RESP2).
    pub fn set(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.prefixed(b'*', n as i64),
            Protocol::Resp3 => self.prefixed(b'~', n as i64),
        }
    }

    /// A push header for `n` elements (an array in RESP2), for pub/sub messages.
    pub fn push(&mut self, n: usize) {
        match self.proto {
            Protocol::Resp2 => self.prefixed(b'*', n as i64),
            Protocol::Resp3 => self.prefixed(b'>', n as i64),
        }
    }

    /// A double: `,v` in RESP3, a bulk string in RESP2, formatted as Valkey formats it.
    pub fn double(&mut self, v: f64) {
        let mut tmp = Vec::with_capacity(24);
        crate::number::format_double(v, &mut tmp);
        match self.proto {
            Protocol::Resp2 => self.bulk(&tmp),
            Protocol::Resp3 => {
                self.buf.extend_from_slice(b",");
                self.buf.extend_from_slice(&tmp);
                self.buf.extend_from_slice(b"\r\n");
                self.check();
            }
        }
    }

    /// A boolean: `#t`/`#f` in RESP3, `:1`/`:0` in RESP2.
    pub fn boolean(&mut self, v: bool) {
        match (self.proto, v) {
            (Protocol::Resp2, true) => self.buf.extend_from_slice(b":1\r\n"),
            (Protocol::Resp2, false) => self.buf.extend_from_slice(b":0\r\n"),
            (Protocol::Resp3, true) => self.buf.extend_from_slice(b"#t\r\n"),
            (Protocol::Resp3, false) => self.buf.extend_from_slice(b"#f\r\n"),
        }
        self.check();
    }

    /// A big number: `(digits` in RESP3, a bulk string in RESP2.
    pub fn big_number(&mut self, digits: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(digits),
            Protocol::Resp3 => {
                self.buf.extend_from_slice(b"(");
                self.buf.extend_from_slice(digits);
                self.buf.extend_from_slice(b"\r\n");
                self.check();
            }
        }
    }

    /// An attribute header for `n` pairs (RESP3 only: in RESP2 attributes are not sent, and
    /// the caller must skip the pairs).
    pub fn attribute(&mut self, n: usize) {
        self.prefixed(b'|', n as i64);
    }

    /// Verbatim text (`=len\r\ntxt:...` in RESP3, a bulk string in RESP2), as INFO and
    /// CLIENT LIST reply.
    pub fn verbatim(&mut self, text: &[u8]) {
        match self.proto {
            Protocol::Resp2 => self.bulk(text),
            Protocol::Resp3 => {
                self.prefixed(b'=', text.len() as i64 + 4);
                self.buf.extend_from_slice(b"txt:");
                self.buf.extend_from_slice(text);
                self.buf.extend_from_slice(b"\r\n");
                self.check();
            }
        }
    }

    fn prefixed(&mut self, tag: u8, n: i64) {
        let mut ib = itoa::Buffer::new();
        let digits = ib.format(n).as_bytes();
        self.buf.reserve(digits.len() + 3);
        self.buf.extend_from_slice(&[tag]);
        self.buf.extend_from_slice(digits);
        self.buf.extend_from_slice(b"\r\n");
        self.check();
    }

    /// The limit check after an append: one compare while under it.
    #[inline]
    fn check(&mut self) {
        if self.buf.len() > self.cap {
            self.drop_replies();
        }
    }

    #[cold]
    fn drop_replies(&mut self) {
        self.buf.truncate(0);
        self.passed = true;
    }

    fn extend_sanitized(&mut self, s: &[u8]) {
        if memchr::memchr2(b'\r', b'\n', s).is_none() {
            self.buf.extend_from_slice(s);
        } else {
            self.buf.extend(s.iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_resp2_and_resp3() {
        let mut r = ReplyBuf::new();
        r.ok();
        r.int(42);
        r.bulk(b"hi");
        r.null();
        r.map(1);
        r.double(1.5);
        r.boolean(true);
        assert_eq!(r.as_bytes(), b"+OK\r\n:42\r\n$2\r\nhi\r\n$-1\r\n*2\r\n$3\r\n1.5\r\n:1\r\n");
        let mut r = ReplyBuf::new();
        r.set_protocol(Protocol::Resp3);
        r.null();
        r.map(1);
        r.double(1.5);
        r.boolean(false);
        r.verbatim(b"a");
        assert_eq!(r.as_bytes(), b"_\r\n%1\r\n,1.5\r\n#f\r\n=5\r\ntxt:a\r\n");
    }

    #[test]
    fn a_limited_buffer_drops_its_replies_once_past_the_limit() {
        let mut r = ReplyBuf::new();
        assert!(!r.is_limited());
        r.set_limit(Some(ReplyLimit { buffer_room: 10, list_room: 20 }));
        r.bulk(b"0123456789");
        r.bulk(b"0123456789");
        assert!(r.limit_passed() && r.is_empty(), "the first reply past 30 bytes drops all");
        r.set_limit(Some(ReplyLimit { buffer_room: 10, list_room: 20 }));
        r.truncate(0);
        r.raw(&[b'x'; 30]);
        assert!(!r.limit_passed(), "exactly at the limit");
        r.int(7);
        assert!(r.limit_passed() && r.is_empty());
        for _ in 0..100 {
            r.bulk(b"0123456789");
        }
        assert!(r.len() <= 30, "it never holds more than the limit");
        r.set_limit(None);
        assert!(!r.limit_passed() && !r.is_limited());
    }

    #[test]
    fn a_reply_built_apart_counts_in_full() {
        let mut r = ReplyBuf::new();
        assert!(r.admit(usize::MAX), "no limit");
        r.set_limit(Some(ReplyLimit { buffer_room: 16, list_room: 100 }));
        r.raw(&[b'x'; 10]);
        assert!(r.admit(100), "the buffer's room does not count for it");
        assert!(!r.limit_passed());
        assert!(!r.admit(101));
        assert!(r.limit_passed() && r.is_empty());
    }

    #[test]
    fn errors_never_break_framing() {
        let mut r = ReplyBuf::new();
        r.error("ERR bad\r\nthing");
        assert_eq!(r.as_bytes(), b"-ERR bad  thing\r\n");
    }
}
