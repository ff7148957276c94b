//! The hotkv keyspace engine.
//!
//! Owns the data: databases of 16384 slot tables, compact entries, expiry, eviction, the
//! command metadata table and the handlers of data commands. Depends only on the protocol
//! crate; it must never name the server, cluster, replication or TLS crates — when it needs
//! them (slot ownership, write propagation) it defines a trait they implement.
//!
//! `unsafe` is denied workspace-wide and allowed in two modules: `prefetch` (cache hints) and
//! `entry`, which packs
//! a key and its value into one allocation behind an 8-byte pointer; the memory target
//! (under 94 bytes for a 16-byte key with a 32-byte value) is out of reach otherwise.

pub mod command;
pub mod ctx;
pub mod entry;
pub mod error;
pub mod geohash;
pub mod glob;
pub mod hash;
pub mod hll;
pub mod keyspace;
pub mod object;
pub mod plan;
pub mod policy;
pub mod prefetch;
pub mod propagate;
pub mod rdb;
pub mod remote;
pub mod route;
pub mod slot;
pub mod snapshot;
pub mod table;

pub use ctx::{
    BlockMode, BlockRequest, Ctx, EngineConfig, Events, KeyMut, KeyState, LocalStats, LookupFlags, NoEvents, Ttl,
};
pub use error::{CmdResult, CommandError, DownReason};
pub use keyspace::{AddLock, Keyspace, LockSet};
pub use propagate::{Effects, NoSink, WriteSink};
pub mod cmd;
pub mod evict;
pub mod expire;
pub mod testkit;
pub mod types;
