//! RESP2 and RESP3 reply frames and a blocking parser for them.
//!
//! The parser keeps every distinction a protocol test may assert on: `$-1` vs `*-1` vs `_`,
//! a simple string vs a bulk string, an array vs a set vs a push.

use std::fmt;
use std::io::{self, BufRead};

/// One reply as the server sent it.
#[derive(Debug, Clone, PartialEq)]
pub enum Frame {
    /// `+text`
    Simple(String),
    /// `-text` (the whole line, including the code: `ERR ...`, `WRONGTYPE ...`).
    Error(String),
    /// `:n`
    Integer(i64),
    /// `$n` followed by n bytes.
    Bulk(Vec<u8>),
    /// `$-1`: RESP2's null bulk string.
    NullBulk,
    /// `*-1`: RESP2's null array.
    NullArray,
    /// `*n`
    Array(Vec<Frame>),
    /// `_`: RESP3 null.
    Null,
    /// `,text`: RESP3 double, kept as the text the server wrote (`1.5`, `inf`, `nan`).
    Double(String),
    /// `#t` / `#f`: RESP3 boolean.
    Boolean(bool),
    /// `(digits`: RESP3 big number.
    BigNumber(String),
    /// `!n`: RESP3 blob error.
    BlobError(Vec<u8>),
    /// `=n` with a three-letter format (`txt`, `mkd`) and the text after `xxx:`.
    Verbatim(String, Vec<u8>),
    /// `%n`: RESP3 map, pairs in the order sent.
    Map(Vec<(Frame, Frame)>),
    /// `~n`: RESP3 set.
    Set(Vec<Frame>),
    /// `>n`: RESP3 push (pub/sub messages, invalidations).
    Push(Vec<Frame>),
    /// `|n` attribute map and the reply it decorates.
    Attribute(Vec<(Frame, Frame)>, Box<Frame>),
}

impl Frame {
    /// `+OK`
    pub fn ok() -> Frame {
        Frame::Simple("OK".into())
    }

    /// A simple string.
    pub fn simple(s: &str) -> Frame {
        Frame::Simple(s.into())
    }

    /// A bulk string.
    pub fn bulk(s: impl AsRef<[u8]>) -> Frame {
        Frame::Bulk(s.as_ref().to_vec())
    }

    /// An error line such as `ERR syntax error`.
    pub fn error(s: &str) -> Frame {
        Frame::Error(s.into())
    }

    /// Whether this is any kind of null (`$-1`, `*-1`, `_`).
    pub fn is_null(&self) -> bool {
        matches!(self, Frame::NullBulk | Frame::NullArray | Frame::Null)
    }

    /// Whether this is an error reply (simple or blob).
    pub fn is_error(&self) -> bool {
        matches!(self, Frame::Error(_) | Frame::BlobError(_))
    }

    /// The error text, or `None` for a non-error.
    pub fn error_text(&self) -> Option<String> {
        match self {
            Frame::Error(s) => Some(s.clone()),
            Frame::BlobError(b) => Some(String::from_utf8_lossy(b).into_owned()),
            _ => None,
        }
    }

    /// The text of a simple, bulk, verbatim, double or big-number reply; panics otherwise so
    /// a test fails with the unexpected frame in the message.
    #[track_caller]
    pub fn text(&self) -> String {
        match self {
            Frame::Simple(s) | Frame::Double(s) | Frame::BigNumber(s) => s.clone(),
            Frame::Bulk(b) | Frame::Verbatim(_, b) => String::from_utf8_lossy(b).into_owned(),
            other => panic!("expected a string reply, got {other}"),
        }
    }

    /// The value of an integer reply; panics otherwise.
    #[track_caller]
    pub fn int(&self) -> i64 {
        match self {
            Frame::Integer(n) => *n,
            other => panic!("expected an integer reply, got {other}"),
        }
    }

    /// The elements of an array, set or push reply; panics otherwise.
    #[track_caller]
    pub fn items(&self) -> &[Frame] {
        match self {
            Frame::Array(v) | Frame::Set(v) | Frame::Push(v) => v,
            other => panic!("expected an array reply, got {other}"),
        }
    }

    /// The pairs of a RESP3 map, or of a RESP2 flat array of alternating keys and values.
    #[track_caller]
    pub fn pairs(&self) -> Vec<(Frame, Frame)> {
        match self {
            Frame::Map(p) => p.clone(),
            Frame::Array(v) if v.len() % 2 == 0 => v.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect(),
            other => panic!("expected a map reply, got {other}"),
        }
    }

    /// In a map (or flat key/value array), the value whose key's text is `key`.
    pub fn field(&self, key: &str) -> Option<Frame> {
        self.pairs().into_iter().find(|(k, _)| k.text_lossy() == key).map(|(_, v)| v)
    }

    /// Text of string-like frames, the Display form of anything else; never panics.
    pub fn text_lossy(&self) -> String {
        match self {
            Frame::Simple(s) | Frame::Error(s) | Frame::Double(s) | Frame::BigNumber(s) => s.clone(),
            Frame::Bulk(b) | Frame::Verbatim(_, b) | Frame::BlobError(b) => String::from_utf8_lossy(b).into_owned(),
            other => other.to_string(),
        }
    }
}

impl fmt::Display for Frame {
    /// A compact, readable rendering for assertion messages, e.g. `["a", 1, nil]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fn list(f: &mut fmt::Formatter<'_>, open: &str, items: &[Frame]) -> fmt::Result {
            f.write_str(open)?;
            for (i, it) in items.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{it}")?;
            }
            f.write_str("]")
        }
        fn map(f: &mut fmt::Formatter<'_>, pairs: &[(Frame, Frame)]) -> fmt::Result {
            f.write_str("{")?;
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    f.write_str(", ")?;
                }
                write!(f, "{k}: {v}")?;
            }
            f.write_str("}")
        }
        match self {
            Frame::Simple(s) => write!(f, "+{s}"),
            Frame::Error(s) => write!(f, "-{s}"),
            Frame::Integer(n) => write!(f, "{n}"),
            Frame::Bulk(b) => write!(f, "{:?}", String::from_utf8_lossy(b)),
            Frame::NullBulk => f.write_str("nil($-1)"),
            Frame::NullArray => f.write_str("nil(*-1)"),
            Frame::Null => f.write_str("null(_)"),
            Frame::Double(s) => write!(f, ",{s}"),
            Frame::Boolean(b) => write!(f, "#{}", if *b { 't' } else { 'f' }),
            Frame::BigNumber(s) => write!(f, "({s}"),
            Frame::BlobError(b) => write!(f, "!{:?}", String::from_utf8_lossy(b)),
            Frame::Verbatim(fmt_, b) => write!(f, "={fmt_}:{:?}", String::from_utf8_lossy(b)),
            Frame::Array(v) => list(f, "[", v),
            Frame::Set(v) => list(f, "~[", v),
            Frame::Push(v) => list(f, ">[", v),
            Frame::Map(p) => map(f, p),
            Frame::Attribute(p, inner) => {
                f.write_str("|")?;
                map(f, p)?;
                write!(f, " {inner}")
            }
        }
    }
}

/// Reads one complete frame. An EOF before the first byte is `UnexpectedEof`; malformed
/// input is `InvalidData` naming what was wrong.
pub fn read_frame(r: &mut impl BufRead) -> io::Result<Frame> {
    let line = read_line(r)?;
    let (&kind, rest) = line.split_first().ok_or_else(|| bad("empty reply line"))?;
    let text = || String::from_utf8_lossy(rest).into_owned();
    Ok(match kind {
        b'+' => Frame::Simple(text()),
        b'-' => Frame::Error(text()),
        b':' => Frame::Integer(parse_int(rest)?),
        b',' => Frame::Double(text()),
        b'(' => Frame::BigNumber(text()),
        b'_' => Frame::Null,
        b'#' => match rest {
            b"t" => Frame::Boolean(true),
            b"f" => Frame::Boolean(false),
            _ => return Err(bad(&format!("bad boolean {:?}", text()))),
        },
        b'$' => match parse_int(rest)? {
            -1 => Frame::NullBulk,
            n => Frame::Bulk(read_payload(r, n)?),
        },
        b'!' => Frame::BlobError(read_payload(r, parse_int(rest)?)?),
        b'=' => {
            let body = read_payload(r, parse_int(rest)?)?;
            if body.len() < 4 || body[3] != b':' {
                return Err(bad("verbatim string without a format prefix"));
            }
            Frame::Verbatim(String::from_utf8_lossy(&body[..3]).into_owned(), body[4..].to_vec())
        }
        b'*' => match parse_int(rest)? {
            -1 => Frame::NullArray,
            n => Frame::Array(read_items(r, n)?),
        },
        b'~' => Frame::Set(read_items(r, parse_int(rest)?)?),
        b'>' => Frame::Push(read_items(r, parse_int(rest)?)?),
        b'%' => Frame::Map(read_pairs(r, parse_int(rest)?)?),
        b'|' => {
            let attrs = read_pairs(r, parse_int(rest)?)?;
            Frame::Attribute(attrs, Box::new(read_frame(r)?))
        }
        other => {
            return Err(bad(&format!(
                "unknown reply type byte {:?} in line {:?}",
                other as char,
                String::from_utf8_lossy(&line)
            )));
        }
    })
}

/// Reads up to and including `\r\n`; returns the line without it.
fn read_line(r: &mut impl BufRead) -> io::Result<Vec<u8>> {
    let mut line = Vec::new();
    let n = r.read_until(b'\n', &mut line)?;
    if n == 0 {
        return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed by server"));
    }
    if !line.ends_with(b"\r\n") {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("connection closed mid-line: {:?}", String::from_utf8_lossy(&line)),
        ));
    }
    line.truncate(line.len() - 2);
    Ok(line)
}

fn read_payload(r: &mut impl BufRead, len: i64) -> io::Result<Vec<u8>> {
    let len = usize::try_from(len).map_err(|_| bad(&format!("bad length {len}")))?;
    let mut buf = vec![0; len + 2];
    r.read_exact(&mut buf)?;
    if &buf[len..] != b"\r\n" {
        return Err(bad("payload not followed by CRLF"));
    }
    buf.truncate(len);
    Ok(buf)
}

fn read_items(r: &mut impl BufRead, n: i64) -> io::Result<Vec<Frame>> {
    let n = usize::try_from(n).map_err(|_| bad(&format!("bad element count {n}")))?;
    (0..n).map(|_| read_frame(r)).collect()
}

fn read_pairs(r: &mut impl BufRead, n: i64) -> io::Result<Vec<(Frame, Frame)>> {
    let n = usize::try_from(n).map_err(|_| bad(&format!("bad pair count {n}")))?;
    (0..n).map(|_| Ok((read_frame(r)?, read_frame(r)?))).collect()
}

fn parse_int(b: &[u8]) -> io::Result<i64> {
    std::str::from_utf8(b)
        .ok()
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| bad(&format!("bad integer {:?}", String::from_utf8_lossy(b))))
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_string())
}

/// Encodes a command as a RESP multibulk request.
pub fn encode_command<A: AsRef<[u8]>>(args: &[A]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        let a = a.as_ref();
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(b: &[u8]) -> Frame {
        read_frame(&mut &b[..]).unwrap()
    }

    #[test]
    fn parses_resp2_shapes() {
        assert_eq!(parse(b"+OK\r\n"), Frame::ok());
        assert_eq!(parse(b"-ERR x\r\n"), Frame::error("ERR x"));
        assert_eq!(parse(b":-7\r\n"), Frame::Integer(-7));
        assert_eq!(parse(b"$3\r\na\r\n\r\n"), Frame::bulk("a\r\n"));
        assert_eq!(parse(b"$-1\r\n"), Frame::NullBulk);
        assert_eq!(parse(b"*-1\r\n"), Frame::NullArray);
        assert_eq!(
            parse(b"*2\r\n$1\r\na\r\n*1\r\n:1\r\n"),
            Frame::Array(vec![Frame::bulk("a"), Frame::Array(vec![Frame::Integer(1)])])
        );
    }

    #[test]
    fn parses_resp3_shapes() {
        assert_eq!(parse(b"_\r\n"), Frame::Null);
        assert_eq!(parse(b",1.5\r\n"), Frame::Double("1.5".into()));
        assert_eq!(parse(b"#t\r\n"), Frame::Boolean(true));
        assert_eq!(parse(b"(123\r\n"), Frame::BigNumber("123".into()));
        assert_eq!(parse(b"=7\r\ntxt:abc\r\n"), Frame::Verbatim("txt".into(), b"abc".to_vec()));
        assert_eq!(parse(b"!3\r\nERR\r\n"), Frame::BlobError(b"ERR".to_vec()));
        let m = parse(b"%1\r\n+k\r\n:1\r\n");
        assert_eq!(m.field("k"), Some(Frame::Integer(1)));
        assert_eq!(parse(b"~1\r\n:1\r\n"), Frame::Set(vec![Frame::Integer(1)]));
        assert_eq!(parse(b">1\r\n:1\r\n"), Frame::Push(vec![Frame::Integer(1)]));
        let a = parse(b"|1\r\n+a\r\n:1\r\n+OK\r\n");
        assert!(matches!(a, Frame::Attribute(_, inner) if *inner == Frame::ok()));
    }

    #[test]
    fn reports_truncated_and_malformed_input() {
        assert_eq!(read_frame(&mut &b""[..]).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(read_frame(&mut &b"+OK"[..]).unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(read_frame(&mut &b"?\r\n"[..]).unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert!(read_frame(&mut &b"$5\r\nab\r\n"[..]).is_err());
    }

    #[test]
    fn encodes_multibulk() {
        assert_eq!(encode_command(&["GET", "k"]), b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n");
    }
}
