//! Data commands: one file per family, one function per command, each with its metadata row.
//!
//! A handler parses its arguments into a typed form, does its work through [`Ctx`] and
//! writes its reply into the output buffer. It never locks: the dispatcher locks the slots
//! of the command's keys (found through the row's key specs) before calling it, which is what
//! lets MULTI/EXEC run a whole transaction under one set of locks.

use hotkv_protocol::{Args, ReplyBuf};

use crate::command::CommandSpec;
use crate::ctx::{Ctx, EngineConfig};
use crate::error::{CmdResult, CommandError};

pub mod bitfield;
pub mod bitop;
pub mod bitops;
pub mod counter;
pub mod db;
pub mod dump;
pub mod expire;
pub mod geo;
pub mod geo_search;
pub mod hash;
pub mod hash_ttl;
pub mod hash_walk;
pub mod hll;
pub mod keys;
pub mod list;
pub mod list_block;
pub mod migrate;
pub mod object;
mod qsort;
pub mod range;
pub mod scan;
pub mod set;
pub mod set_ops;
pub mod sort;
pub mod stream;
pub mod stream_claim;
pub mod stream_group;
pub mod stream_info;
pub mod stream_read;
pub mod string;
pub mod zset;
pub mod zset_pop;
pub mod zset_range;
pub mod zset_scan;
pub mod zset_store;

/// A data command handler.
pub type EngineFn = for<'a, 'b> fn(&mut Ctx<'a>, Args<'b>, &mut ReplyBuf) -> CmdResult;

/// Work a command does from its arguments alone, before the dispatcher takes its locks.
pub type PrepareFn = for<'b> fn(&Args<'b>, &EngineConfig) -> Prepared;

/// What a [`PrepareFn`] hands its command's handler, through [`Ctx::prepared`].
#[derive(Debug)]
pub enum Prepared {
    /// RESTORE's options, TTL and decoded value (see [`dump`]).
    Restore(Box<Result<dump::RestoreInput, CommandError>>),
}

/// How the dispatcher finds the slots a command needs.
#[derive(Debug, Clone, Copy)]
pub enum LockPlan {
    /// The slots of the keys its key specs name, in the client's database.
    Keys,
    /// [`LockPlan::Keys`], taken only after the [`PrepareFn`] ran without any lock: RESTORE
    /// verifies and decodes its payload there, so decoding a large value never holds a slot
    /// that other clients wait for. A handler must still work when called without the
    /// prepared input (it then prepares under the locks).
    KeysAfter(PrepareFn),
    /// Also the same keys in the database given by argument `db_arg` (MOVE).
    KeysAlsoInDbArg(usize),
    /// Also the destination key in the database after a `DB` option (COPY).
    KeysAlsoInDbOption,
    /// No locks: the handler visits the slots of its database one at a time itself (KEYS,
    /// SCAN, FLUSHDB, ...). Such a command must not assume atomicity across slots; inside a
    /// transaction it runs under every slot lock of its database.
    PerSlot,
    /// [`LockPlan::PerSlot`] over every database (FLUSHALL, SWAPDB): inside a transaction it
    /// runs under every slot lock of every database.
    PerSlotAllDbs,
    /// [`LockPlan::Keys`] for a command that may also read keys its arguments do not name
    /// (SORT's BY and GET patterns name keys made from the values it sorts), when the function
    /// says this call may. Dispatched alone, the handler adds those keys' locks as it finds
    /// them ([`Ctx::lock_undeclared`], which may ask the dispatcher to run it again with them
    /// taken up front); inside a transaction or a script, where nothing can start over, such
    /// a call runs under every slot lock of its database, as a whole-keyspace command does.
    KeysAndUndeclared(fn(&Args<'_>) -> bool),
}

impl LockPlan {
    /// The lock-free step to run before taking the locks, if the command has one.
    pub fn prepare(self) -> Option<PrepareFn> {
        match self {
            LockPlan::KeysAfter(f) => Some(f),
            _ => None,
        }
    }
}

/// The engine's part of a command row.
#[derive(Debug)]
pub struct EngineCmd {
    /// The handler.
    pub run: EngineFn,
    /// Which slots to lock.
    pub plan: LockPlan,
}

/// A row of an engine command.
pub type Spec = CommandSpec<EngineCmd>;

/// Every engine command row.
pub fn commands() -> impl Iterator<Item = &'static Spec> {
    [
        string::COMMANDS,
        counter::COMMANDS,
        range::COMMANDS,
        keys::COMMANDS,
        expire::COMMANDS,
        scan::COMMANDS,
        db::COMMANDS,
        object::COMMANDS,
        dump::COMMANDS,
        migrate::COMMANDS,
        bitops::COMMANDS,
        bitop::COMMANDS,
        bitfield::COMMANDS,
        hll::COMMANDS,
        list::COMMANDS,
        list_block::COMMANDS,
        zset::COMMANDS,
        zset_range::COMMANDS,
        zset_pop::COMMANDS,
        zset_store::COMMANDS,
        zset_scan::COMMANDS,
        geo::COMMANDS,
        geo_search::COMMANDS,
        hash::COMMANDS,
        hash_walk::COMMANDS,
        hash_ttl::COMMANDS,
        set::COMMANDS,
        set_ops::COMMANDS,
        sort::COMMANDS,
        stream::COMMANDS,
        stream_group::COMMANDS,
        stream_claim::COMMANDS,
        stream_info::COMMANDS,
        stream_read::COMMANDS,
    ]
    .into_iter()
    .flatten()
}

/// Parses a blocking command's timeout in seconds (a float) as Valkey's
/// `getTimeoutFromObjectOrReply`: returns the absolute deadline in unix milliseconds, or `None`
/// for 0 (wait forever).
pub fn parse_timeout(arg: &[u8], now_ms: i64) -> Result<Option<i64>, CommandError> {
    // `string2ld`, not `string2d`: a hex timeout parses, and may then be out of range.
    let secs = hotkv_protocol::parse_long_double(arg)
        .ok_or_else(|| CommandError::err("timeout is not a float or out of range"))?;
    let ms = (secs * 1000.0).ceil();
    if ms > i64::MAX as f64 {
        return Err(CommandError::err("timeout is out of range"));
    }
    if ms < 0.0 {
        return Err(CommandError::err("timeout is negative"));
    }
    let ms = ms as i64;
    if ms == 0 {
        return Ok(None);
    }
    now_ms.checked_add(ms).map(Some).ok_or_else(|| CommandError::err("timeout is out of range"))
}

/// Parses an integer argument or fails with the standard error.
pub(crate) fn int_arg(arg: &[u8]) -> Result<i64, CommandError> {
    hotkv_protocol::parse_i64(arg).ok_or(CommandError::NotInteger)
}

/// Parses an argument Valkey reads as a C `int` (`getIntFromObjectOrReply`).
pub(crate) fn int32_arg(arg: &[u8]) -> Result<i32, CommandError> {
    int_arg(arg).and_then(|n| i32::try_from(n).map_err(|_| CommandError::NotInteger))
}

/// Largest reply a negative HRANDFIELD/SRANDMEMBER count may ask for from a client without an
/// output buffer hard limit. Valkey takes any count and relies on that limit, which stops the
/// reply as it passes it (so does `ReplyBuf::set_limit` here); with none, unlimited by default
/// for normal clients, a count that would exhaust memory is refused instead.
pub(crate) const MAX_REPEATED_PICKS: u64 = 1 << 24;

/// The count of HRANDFIELD/SRANDMEMBER: a `long` from -LONG_MAX to LONG_MAX, as Valkey's
/// `getRangeLongFromObjectOrReply` words its errors.
pub(crate) fn random_count(arg: &[u8]) -> Result<i64, CommandError> {
    let n = int_arg(arg)?;
    if n == i64::MIN {
        return Err(CommandError::err(format!(
            "value is out of range, value must between {} and {}",
            -i64::MAX,
            i64::MAX
        )));
    }
    Ok(n)
}

/// The error for a negative count beyond [`MAX_REPEATED_PICKS`].
pub(crate) fn too_many_picks() -> CommandError {
    CommandError::err(format!(
        "value is out of range, a negative count may ask for at most {MAX_REPEATED_PICKS} elements"
    ))
}

/// Appends a bulk string to `buf`: replies whose length is known only at the end (KEYS, SCAN)
/// collect their elements here, then write the array header and the bytes.
pub(crate) fn push_bulk(buf: &mut Vec<u8>, b: &[u8]) {
    buf.push(b'$');
    buf.extend_from_slice(itoa::Buffer::new().format(b.len()).as_bytes());
    buf.extend_from_slice(b"\r\n");
    buf.extend_from_slice(b);
    buf.extend_from_slice(b"\r\n");
}

/// Parses a float argument or fails with the standard error.
pub(crate) fn float_arg(arg: &[u8]) -> Result<f64, CommandError> {
    hotkv_protocol::parse_double(arg).ok_or(CommandError::NotFloat)
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use super::*;
    use crate::command::flags;

    #[test]
    fn rows_are_well_formed() {
        let mut names = HashSet::new();
        for spec in commands() {
            assert!(names.insert(spec.name), "{} registered twice", spec.name);
            assert_eq!(spec.name, spec.name.to_ascii_lowercase());
            assert_ne!(spec.arity, 0);
            assert_eq!(spec.handler.is_none(), !spec.subcommands.is_empty(), "{}", spec.name);
            for sub in spec.subcommands {
                assert!(sub.handler.is_some() && sub.arity != 0, "{}|{}", spec.name, sub.name);
            }
            for s in std::iter::once(spec).chain(spec.subcommands) {
                let rw = s.flags & (flags::WRITE | flags::READONLY);
                assert_ne!(rw, flags::WRITE | flags::READONLY, "{}", s.name);
            }
        }
    }
}
