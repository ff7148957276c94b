//! The errors commands reply with, and their exact Valkey texts.

use std::borrow::Cow;
use std::fmt;
use std::sync::Arc;

/// A command failure. [`CommandError::message`] is the reply text, word for word as Valkey
/// sends it (without the leading `-`); [`CommandError::code`] is its first word, which
/// `INFO errorstats` counts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CommandError {
    /// A key holds a value of another type.
    WrongType,
    /// Arguments that do not form a valid call.
    Syntax,
    /// An argument that must be an integer is not, or is out of range.
    NotInteger,
    /// An argument that must be a float is not.
    NotFloat,
    /// INCR/DECR family overflow.
    Overflow,
    /// The key does not exist (RENAME, OBJECT).
    NoSuchKey,
    /// `index out of range`.
    IndexOutOfRange,
    /// The wrong number of arguments for a command (its full name, e.g. `object|encoding`).
    WrongArity(String),
    /// An unknown command: its name and a prefix of its arguments, preformatted.
    UnknownCommand(String),
    /// An unknown subcommand of a container command.
    UnknownSubcommand {
        /// The subcommand as sent.
        sub: String,
        /// The container, upper case.
        container: String,
    },
    /// An invalid expire time in the named command.
    InvalidExpire(&'static str),
    /// `SELECT`/`MOVE`/`SWAPDB` beyond `databases`.
    DbIndexOutOfRange,
    /// A string would grow beyond `proto-max-bulk-len`.
    StringTooLong,
    /// Authentication required.
    NoAuth,
    /// Wrong password or unknown user.
    WrongPass,
    /// Over `maxmemory` and nothing can be evicted.
    OutOfMemory,
    /// `source and destination objects are the same`.
    SameObject,
    /// `BUSYKEY Target key name already exists.`
    BusyKey,
    /// A DUMP payload RESTORE cannot use: `ERR DUMP payload version or checksum are wrong` or
    /// `ERR Bad data format`.
    Payload(crate::rdb::RdbError),
    /// Cluster: the slot is served by another node, for good (`MOVED <slot> <host>:<port>`).
    Moved {
        /// The key's slot.
        slot: u16,
        /// The node's address, `host:port`, with the port for the client's kind (TLS or not).
        addr: Arc<str>,
    },
    /// Cluster: the slot is being migrated and the keys are not here; ask the target node
    /// for this one command (`ASK <slot> <host>:<port>`).
    Ask {
        /// The key's slot.
        slot: u16,
        /// The target node's address, `host:port`.
        addr: Arc<str>,
    },
    /// Cluster: the keys of one request hash to different slots.
    CrossSlot,
    /// Cluster: a multi-key request while its slot is migrating and only some keys are here.
    TryAgain,
    /// Cluster: this node cannot serve the request now.
    ClusterDown(DownReason),
    /// Any other error: the full text including its code (`ERR ...`, `NOPERM ...`).
    Other(Cow<'static, str>),
}

/// Why a cluster node refuses a request with CLUSTERDOWN (Valkey's `CLUSTER_REDIR_DOWN_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DownReason {
    /// The cluster state is fail.
    Down,
    /// No node serves the slot.
    Unbound,
    /// The cluster state is fail and `cluster-allow-reads-when-down` lets only reads through.
    ReadOnly,
}

impl CommandError {
    /// An `ERR <text>` error.
    pub fn err(text: impl Into<Cow<'static, str>>) -> Self {
        let text = text.into();
        CommandError::Other(Cow::Owned(format!("ERR {text}")))
    }

    /// An error whose text already starts with its code.
    pub fn raw(text: impl Into<Cow<'static, str>>) -> Self {
        CommandError::Other(text.into())
    }

    /// The reply text without the leading `-`.
    pub fn message(&self) -> Cow<'_, str> {
        match self {
            CommandError::WrongType => "WRONGTYPE Operation against a key holding the wrong kind of value".into(),
            CommandError::Syntax => "ERR syntax error".into(),
            CommandError::NotInteger => "ERR value is not an integer or out of range".into(),
            CommandError::NotFloat => "ERR value is not a valid float".into(),
            CommandError::Overflow => "ERR increment or decrement would overflow".into(),
            CommandError::NoSuchKey => "ERR no such key".into(),
            CommandError::IndexOutOfRange => "ERR index out of range".into(),
            CommandError::WrongArity(cmd) => format!("ERR wrong number of arguments for '{cmd}' command").into(),
            CommandError::UnknownCommand(text) => text.as_str().into(),
            CommandError::UnknownSubcommand { sub, container } => {
                format!("ERR unknown subcommand '{sub}'. Try {container} HELP.").into()
            }
            CommandError::InvalidExpire(cmd) => format!("ERR invalid expire time in '{cmd}' command").into(),
            CommandError::DbIndexOutOfRange => "ERR DB index is out of range".into(),
            CommandError::StringTooLong => "ERR string exceeds maximum allowed size (proto-max-bulk-len)".into(),
            CommandError::NoAuth => "NOAUTH Authentication required.".into(),
            CommandError::WrongPass => "WRONGPASS invalid username-password pair or user is disabled.".into(),
            CommandError::OutOfMemory => "OOM command not allowed when used memory > 'maxmemory'.".into(),
            CommandError::SameObject => "ERR source and destination objects are the same".into(),
            CommandError::BusyKey => "BUSYKEY Target key name already exists.".into(),
            CommandError::Payload(e) => format!("ERR {e}").into(),
            CommandError::Moved { slot, addr } => format!("MOVED {slot} {addr}").into(),
            CommandError::Ask { slot, addr } => format!("ASK {slot} {addr}").into(),
            CommandError::CrossSlot => "CROSSSLOT Keys in request don't hash to the same slot".into(),
            CommandError::TryAgain => "TRYAGAIN Multiple keys request during rehashing of slot".into(),
            CommandError::ClusterDown(DownReason::Down) => "CLUSTERDOWN The cluster is down".into(),
            CommandError::ClusterDown(DownReason::Unbound) => "CLUSTERDOWN Hash slot not served".into(),
            CommandError::ClusterDown(DownReason::ReadOnly) => {
                "CLUSTERDOWN The cluster is down and only accepts read commands".into()
            }
            CommandError::Other(text) => text.as_ref().into(),
        }
    }

    /// The error code: the first word of the message (`ERR`, `WRONGTYPE`, ...).
    pub fn code(&self) -> String {
        let msg = self.message();
        msg.split(' ').next().unwrap_or("ERR").to_string()
    }

    /// The unknown-command error for `name` called with `args`, as Valkey words it.
    pub fn unknown_command<'a>(name: &[u8], args: impl Iterator<Item = &'a [u8]>) -> Self {
        let mut list = String::new();
        for a in args {
            if list.len() >= 128 {
                break;
            }
            let room = 128 - list.len();
            let a = String::from_utf8_lossy(a);
            let a: String = a.chars().take(room).collect();
            list.push('\'');
            list.push_str(&a);
            list.push_str("' ");
        }
        let name = String::from_utf8_lossy(name);
        let name: String = name.chars().take(128).collect();
        CommandError::UnknownCommand(format!("ERR unknown command '{name}', with args beginning with: {list}"))
    }
}

impl From<crate::rdb::RdbError> for CommandError {
    fn from(e: crate::rdb::RdbError) -> Self {
        CommandError::Payload(e)
    }
}

impl fmt::Display for CommandError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message())
    }
}

impl std::error::Error for CommandError {}

/// Result of a command handler: the reply is already in the output buffer on `Ok`.
pub type CmdResult = Result<(), CommandError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn texts_and_codes() {
        assert_eq!(CommandError::WrongType.code(), "WRONGTYPE");
        assert_eq!(CommandError::WrongArity("get".into()).message(), "ERR wrong number of arguments for 'get' command");
        let e = CommandError::unknown_command(b"foo", [&b"a"[..], b"b"].into_iter());
        assert_eq!(e.message(), "ERR unknown command 'foo', with args beginning with: 'a' 'b' ");
        assert_eq!(CommandError::err("x").message(), "ERR x");
    }

    #[test]
    fn cluster_texts_are_valkeys() {
        let addr: Arc<str> = "127.0.0.1:7001".into();
        let moved = CommandError::Moved { slot: 3999, addr: addr.clone() };
        assert_eq!((moved.message(), moved.code()), ("MOVED 3999 127.0.0.1:7001".into(), "MOVED".into()));
        let ask = CommandError::Ask { slot: 0, addr };
        assert_eq!((ask.message(), ask.code()), ("ASK 0 127.0.0.1:7001".into(), "ASK".into()));
        assert_eq!(CommandError::CrossSlot.message(), "CROSSSLOT Keys in request don't hash to the same slot");
        assert_eq!(CommandError::TryAgain.message(), "TRYAGAIN Multiple keys request during rehashing of slot");
        assert_eq!(CommandError::ClusterDown(DownReason::Down).message(), "CLUSTERDOWN The cluster is down");
        assert_eq!(CommandError::ClusterDown(DownReason::Unbound).message(), "CLUSTERDOWN Hash slot not served");
        assert_eq!(
            CommandError::ClusterDown(DownReason::ReadOnly).message(),
            "CLUSTERDOWN The cluster is down and only accepts read commands"
        );
        assert_eq!(CommandError::ClusterDown(DownReason::Unbound).code(), "CLUSTERDOWN");
    }
}
