//! Parsers for the single-line replies a replica reads from its primary during the handshake:
//! the PSYNC reply and the header of the snapshot bulk. Pure functions over one line (without
//! its line ending), so they can be fuzzed: whatever a primary sends, they return a value.

use crate::{ProtocolViolation, REPLID_LEN};

/// The primary's answer to `PSYNC`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PsyncReply {
    /// `+FULLRESYNC <replid> <offset>`.
    FullResync {
        /// The id of the history the snapshot starts.
        replid: String,
        /// The offset the snapshot is consistent with.
        offset: u64,
    },
    /// `+CONTINUE [<replid>]`: partial resync accepted, maybe under a new id.
    Continue {
        /// The primary's current id when it sent one.
        replid: Option<String>,
    },
    /// `-NOMASTERLINK ...` or `-LOADING ...`: the primary cannot serve now but will later.
    TryLater(String),
    /// Any other error reply.
    Error(String),
    /// An empty line: the primary keeps the link alive while it prepares its answer.
    KeepAlive,
}

/// What announces the snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BulkHeader {
    /// `$<len>`: exactly `len` bytes of RDB follow.
    Len(u64),
    /// `$EOF:<40 bytes>`: the RDB ends with the same 40 bytes (diskless transfer).
    EofMark([u8; REPLID_LEN]),
    /// An empty line: a keepalive while the primary produces the snapshot.
    KeepAlive,
    /// `-<error>`: the primary aborted the transfer.
    Error(String),
}

/// Parses the reply to `PSYNC` (`replicaTryPartialResynchronization`'s reading half).
pub fn parse_psync_reply(line: &[u8]) -> Result<PsyncReply, ProtocolViolation> {
    if line.is_empty() {
        return Ok(PsyncReply::KeepAlive);
    }
    if let Some(rest) = line.strip_prefix(b"+FULLRESYNC") {
        let text = std::str::from_utf8(rest).map_err(|_| bad(line))?;
        let mut parts = text.split(' ');
        let (Some(""), Some(replid), Some(offset), None) = (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad(line));
        };
        if !is_replid(replid) {
            return Err(bad(line));
        }
        let offset =
            hotkv_protocol::parse_u64(offset.as_bytes()).filter(|&o| o <= i64::MAX as u64).ok_or_else(|| bad(line))?;
        return Ok(PsyncReply::FullResync { replid: replid.to_string(), offset });
    }
    if let Some(rest) = line.strip_prefix(b"+CONTINUE") {
        // Like Valkey, an id that is not exactly 40 characters is ignored rather than fatal:
        // old primaries send a bare +CONTINUE.
        let id = rest.strip_prefix(b" ").and_then(|r| std::str::from_utf8(r).ok()).filter(|r| is_replid(r));
        if !rest.is_empty() && !rest.starts_with(b" ") {
            return Err(bad(line));
        }
        return Ok(PsyncReply::Continue { replid: id.map(str::to_string) });
    }
    if line[0] == b'-' {
        let msg = String::from_utf8_lossy(&line[1..]).into_owned();
        if line.starts_with(b"-NOMASTERLINK") || line.starts_with(b"-LOADING") {
            return Ok(PsyncReply::TryLater(msg));
        }
        return Ok(PsyncReply::Error(msg));
    }
    Err(bad(line))
}

/// Parses the line that announces the snapshot (`readSyncBulkPayload`'s first read).
pub fn parse_bulk_header(line: &[u8]) -> Result<BulkHeader, ProtocolViolation> {
    match line.first() {
        None => Ok(BulkHeader::KeepAlive),
        Some(b'-') => Ok(BulkHeader::Error(String::from_utf8_lossy(&line[1..]).into_owned())),
        Some(b'$') => {
            let rest = &line[1..];
            if let Some(mark) = rest.strip_prefix(b"EOF:") {
                let mark: [u8; REPLID_LEN] =
                    mark.get(..REPLID_LEN).and_then(|m| m.try_into().ok()).ok_or_else(|| bad(line))?;
                return Ok(BulkHeader::EofMark(mark));
            }
            let len = hotkv_protocol::parse_u64(rest).filter(|&n| n <= i64::MAX as u64).ok_or_else(|| bad(line))?;
            Ok(BulkHeader::Len(len))
        }
        Some(_) => Err(bad(line)),
    }
}

/// Whether a reply to PING lets the handshake go on: `+PONG` (any status reply), or an
/// authentication error, after which AUTH follows (`syncWithPrimary`).
pub(crate) fn ping_reply_ok(line: &[u8]) -> bool {
    line.first() == Some(&b'+')
        || line.starts_with(b"-NOAUTH")
        || line.starts_with(b"-NOPERM")
        || line.starts_with(b"-ERR operation not permitted")
}

/// A replication id as Valkey checks it: 40 characters. We also want them printable so they
/// can be logged and echoed in PSYNC.
fn is_replid(s: &str) -> bool {
    s.len() == REPLID_LEN && s.bytes().all(|b| b.is_ascii_alphanumeric())
}

/// A protocol violation quoting (at most 64 bytes of) the offending line.
pub(crate) fn bad(line: &[u8]) -> ProtocolViolation {
    let shown = &line[..line.len().min(64)];
    ProtocolViolation::BadReply(String::from_utf8_lossy(shown).into_owned())
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const ID: &str = "0123456789abcdef0123456789abcdef01234567";

    #[test]
    fn psync_replies() {
        assert_eq!(
            parse_psync_reply(format!("+FULLRESYNC {ID} 1234").as_bytes()),
            Ok(PsyncReply::FullResync { replid: ID.into(), offset: 1234 })
        );
        assert_eq!(parse_psync_reply(b"+CONTINUE"), Ok(PsyncReply::Continue { replid: None }));
        assert_eq!(
            parse_psync_reply(format!("+CONTINUE {ID}").as_bytes()),
            Ok(PsyncReply::Continue { replid: Some(ID.into()) })
        );
        assert_eq!(parse_psync_reply(b"+CONTINUE short"), Ok(PsyncReply::Continue { replid: None }));
        assert_eq!(parse_psync_reply(b""), Ok(PsyncReply::KeepAlive));
        assert!(matches!(
            parse_psync_reply(b"-NOMASTERLINK Can't SYNC while not connected with my master"),
            Ok(PsyncReply::TryLater(_))
        ));
        assert!(matches!(parse_psync_reply(b"-LOADING loading"), Ok(PsyncReply::TryLater(_))));
        assert_eq!(parse_psync_reply(b"-ERR nope"), Ok(PsyncReply::Error("ERR nope".into())));
        for bad_line in [
            "+FULLRESYNC".to_string(),
            format!("+FULLRESYNC {ID}"),
            format!("+FULLRESYNC {ID} -1"),
            format!("+FULLRESYNC {ID} 99999999999999999999"),
            format!("+FULLRESYNC {ID} 1 2"),
            "+FULLRESYNC short 1".into(),
            "+CONTINUEX".into(),
            "+OK".into(),
            ":1".into(),
        ] {
            assert!(parse_psync_reply(bad_line.as_bytes()).is_err(), "{bad_line}");
        }
    }

    #[test]
    fn bulk_headers() {
        assert_eq!(parse_bulk_header(b"$0"), Ok(BulkHeader::Len(0)));
        assert_eq!(parse_bulk_header(b"$175"), Ok(BulkHeader::Len(175)));
        assert_eq!(parse_bulk_header(b""), Ok(BulkHeader::KeepAlive));
        assert_eq!(parse_bulk_header(b"-ERR oops"), Ok(BulkHeader::Error("ERR oops".into())));
        let mut mark = [0u8; 40];
        mark.copy_from_slice(ID.as_bytes());
        assert_eq!(parse_bulk_header(format!("$EOF:{ID}").as_bytes()), Ok(BulkHeader::EofMark(mark)));
        for bad_line in ["$-1", "$", "$EOF:short", "$12x", "+OK", "$99999999999999999999"] {
            assert!(parse_bulk_header(bad_line.as_bytes()).is_err(), "{bad_line}");
        }
    }

    #[test]
    fn ping_replies() {
        assert!(ping_reply_ok(b"+PONG"));
        assert!(ping_reply_ok(b"-NOAUTH Authentication required."));
        assert!(ping_reply_ok(b"-NOPERM this user has no permissions"));
        assert!(!ping_reply_ok(b"-ERR unknown command"));
        assert!(!ping_reply_ok(b""));
    }

    proptest! {
        /// Whatever a primary sends, the parsers answer without panicking, and what they
        /// accept round-trips to the same meaning.
        #[test]
        fn psync_reply_parser_never_panics(line in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(PsyncReply::FullResync { replid, offset }) = parse_psync_reply(&line) {
                prop_assert_eq!(replid.len(), 40);
                prop_assert!(offset <= i64::MAX as u64);
            }
            let _ = parse_bulk_header(&line);
            let _ = ping_reply_ok(&line);
        }

        #[test]
        fn psync_reply_parser_on_near_misses(
            prefix in prop_oneof![Just("+FULLRESYNC"), Just("+CONTINUE"), Just("$"), Just("$EOF:"), Just("-")],
            rest in "[ -~]{0,80}",
        ) {
            let line = format!("{prefix}{rest}");
            let _ = parse_psync_reply(line.as_bytes());
            if let Ok(BulkHeader::Len(n)) = parse_bulk_header(line.as_bytes()) {
                prop_assert!(n <= i64::MAX as u64);
            }
        }
    }
}
