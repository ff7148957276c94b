//! Commands that wait on another node (MIGRATE now; WAIT and CLUSTER FAILOVER later).
//!
//! The engine never does network I/O and never holds a slot lock across a wait. A handler
//! that needs another node runs in two turns: the first, under its slot locks, reads what it
//! needs and hands the dispatcher a [`RemoteRequest`] (instead of a reply); the dispatcher
//! releases the locks, the connection performs the request without blocking a worker thread,
//! and runs the same command again with the [`RemoteOutcome`] in `Ctx::resume`, under the
//! same plan's locks, to finish and reply. Replies stay in order because the connection
//! runs nothing else of that client meanwhile, as it does for a blocked command.

/// What a command asks of another node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteRequest {
    /// Send values to a target instance (MIGRATE).
    Migrate(MigrateRequest),
}

/// What came back, handed to the command's second turn.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteOutcome {
    /// The MIGRATE request as sent, with what the target answered.
    Migrate(MigrateRequest, MigrateReply),
}

/// Values to send to a target instance, with everything needed to talk to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrateRequest {
    /// Target host, as given.
    pub host: String,
    /// Target port, as given (the connection cache is keyed by `host:port` text, as Valkey's).
    pub port: String,
    /// Target database.
    pub db: i64,
    /// Per-operation timeout (connect, each write, each read), milliseconds.
    pub timeout_ms: u64,
    /// `AUTH password` or `AUTH2 user password`.
    pub auth: Option<(Option<Vec<u8>>, Vec<u8>)>,
    /// RESTORE-ASKING rather than RESTORE (a cluster node's target imports the slot).
    pub asking: bool,
    /// What to send, in order.
    pub ops: Vec<MigrateOp>,
    /// How many times keys written during the move were sent again already.
    pub round: usize,
}

/// One step of a migration.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrateOp {
    /// RESTORE `key` with a relative `ttl_ms` (0: none) and a DUMP `payload`.
    Restore {
        /// The key.
        key: Vec<u8>,
        /// Milliseconds to live, 0 for no expiry.
        ttl_ms: i64,
        /// The value in DUMP format.
        payload: Vec<u8>,
        /// The absolute expiry the value had when it was read (to tell whether the key
        /// changed before it is deleted here).
        expire: Option<i64>,
        /// Add REPLACE.
        replace: bool,
    },
    /// DEL `key` on the target: the key was deleted here after its value was sent.
    Delete {
        /// The key.
        key: Vec<u8>,
    },
}

impl MigrateOp {
    /// The key this step is about.
    pub fn key(&self) -> &[u8] {
        match self {
            MigrateOp::Restore { key, .. } | MigrateOp::Delete { key } => key,
        }
    }
}

/// What the target answered to a [`MigrateRequest`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MigrateReply {
    /// One entry per op, in order, for the ops whose reply was read: whether it succeeded.
    pub acked: Vec<bool>,
    /// The first failure, if any.
    pub error: Option<MigrateError>,
}

/// Why a migration failed, with Valkey's texts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MigrateError {
    /// No connection could be made in time.
    Connect,
    /// Writing the request failed or timed out.
    Write,
    /// Reading a reply failed or timed out.
    Read,
    /// The target answered an error (its text, without the leading `-`).
    Target(String),
}

impl MigrateError {
    /// The error reply, as Valkey words it.
    pub fn reply(&self) -> String {
        match self {
            MigrateError::Connect => "IOERR error or timeout connecting to the client".into(),
            MigrateError::Write => "IOERR error or timeout writing to target instance".into(),
            MigrateError::Read => "IOERR error or timeout reading to target instance".into(),
            MigrateError::Target(e) => format!("ERR Target instance replied with error: {e}"),
        }
    }
}
