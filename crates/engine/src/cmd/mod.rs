//! Data commands: one file per family, one function per command, each with its metadata row.
//!
//! A handler parses its arguments into a typed form, does its work through [`Ctx`] and
//! writes its reply into the output buffer. It never locks: the dispatcher locks the slots
//! of the command's keys (found through the row's key specs) before calling it, which is what
//! lets MULTI/EXEC run a whole transaction under one set of locks.

use hotkv_protocol::{Args, ReplyBuf};

use crate::command::{CommandSpec, FindKeys, KeysFound, for_each_key};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::keyspace::{LockId, lock_id};
use crate::slot::key_slot;

pub mod bitfield;
pub mod bitop;
pub mod bitops;
pub mod counter;
pub mod db;
pub mod dump;
pub mod expire;
pub mod hash;
pub mod hash_walk;
pub mod hll;
pub mod keys;
pub mod list;
pub mod list_block;
pub mod object;
pub mod range;
pub mod scan;
pub mod set;
pub mod set_ops;
pub mod string;
pub mod zset;
pub mod zset_pop;
pub mod zset_range;
pub mod zset_scan;
pub mod zset_store;

/// A data command handler.
pub type EngineFn = for<'a, 'b> fn(&mut Ctx<'a>, Args<'b>, &mut ReplyBuf) -> CmdResult;

/// How the dispatcher finds the slots a command needs.
#[derive(Debug, Clone, Copy)]
pub enum LockPlan {
    /// The slots of the keys its key specs name, in the client's database.
    Keys,
    /// Also the same keys in the database given by argument `db_arg` (MOVE).
    KeysAlsoInDbArg(usize),
    /// Also the destination key in the database after a `DB` option (COPY).
    KeysAlsoInDbOption,
    /// No locks: the handler visits slots one at a time itself (KEYS, SCAN, FLUSHDB, ...).
    /// Such a command must not assume atomicity across slots.
    PerSlot,
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
        hash::COMMANDS,
        hash_walk::COMMANDS,
        set::COMMANDS,
        set_ops::COMMANDS,
    ]
    .into_iter()
    .flatten()
}

/// Collects the sorted, unique lock ids for a call into `ids` (cleared first); `keys` is
/// scratch space for key positions.
pub fn plan_locks(
    spec: &Spec,
    args: &Args<'_>,
    db: usize,
    databases: usize,
    keys: &mut Vec<usize>,
    ids: &mut Vec<LockId>,
) -> Result<(), CommandError> {
    plan_locks_hinted(spec, args, db, databases, keys, ids, &mut KeyHint::default())
}

/// The slot of one key argument, and its table hash when known, so that a command computes
/// them once: the connection computes them while prefetching a pipeline, the lock plan uses
/// the slot, and the lock set is seeded with both for the handler's first lookup. Before this,
/// CRC16 ran three times and the table hash twice for every single-key command.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyHint {
    /// The argument index; 0 (the command name) means no hint.
    pub arg: usize,
    /// Address of that argument's first byte, so a hint can never apply to another command.
    pub at: usize,
    /// Its hash slot.
    pub slot: u16,
    /// Its table hash, if computed.
    pub hash: Option<u32>,
}

impl KeyHint {
    /// A hint for argument `arg` of `args`, computing the slot (and the hash if asked).
    pub fn of(args: &Args<'_>, arg: usize, with_hash: bool) -> KeyHint {
        let key = args.get(arg);
        KeyHint {
            arg,
            at: key.as_ptr() as usize,
            slot: key_slot(key),
            hash: with_hash.then(|| crate::hash::key_hash(key)),
        }
    }

    /// Whether it describes argument `arg` of `args`.
    pub fn applies(&self, args: &Args<'_>, arg: usize) -> bool {
        self.arg != 0 && self.arg == arg && arg < args.len() && args.get(arg).as_ptr() as usize == self.at
    }
}

/// [`plan_locks`] using and filling `hint`: a hint for one of the keys saves its CRC16, and
/// with no hint the first key's slot is recorded in it.
pub fn plan_locks_hinted(
    spec: &Spec,
    args: &Args<'_>,
    db: usize,
    databases: usize,
    keys: &mut Vec<usize>,
    ids: &mut Vec<LockId>,
    hint: &mut KeyHint,
) -> Result<(), CommandError> {
    ids.clear();
    keys.clear();
    let Some(cmd) = &spec.handler else { return Ok(()) };
    if let LockPlan::PerSlot = cmd.plan {
        return Ok(());
    }
    if for_each_key(spec, args, false, |pos, _| keys.push(pos)) != Ok(KeysFound::Complete) {
        // A bad key count (SINTERCARD a k, ZUNION 5 k) is the handler's to report, in its own
        // words ("numkeys should be greater than 0"), as Valkey does: lock nothing and let it
        // run. Such a handler validates its count before it looks at any key.
        if spec.key_specs.iter().any(|k| matches!(k.find, FindKeys::Keynum { .. })) {
            keys.clear();
            return Ok(());
        }
        return Err(CommandError::Syntax);
    }
    let other_db = match cmd.plan {
        LockPlan::KeysAlsoInDbArg(i) => args.opt(i).and_then(parse_db).filter(|d| *d < databases),
        LockPlan::KeysAlsoInDbOption => db_option(args).and_then(parse_db).filter(|d| *d < databases),
        _ => None,
    };
    for &k in keys.iter() {
        let slot = if hint.applies(args, k) {
            hint.slot
        } else {
            let key = args.get(k);
            let slot = key_slot(key);
            if hint.arg == 0 {
                *hint = KeyHint { arg: k, at: key.as_ptr() as usize, slot, hash: None };
            }
            slot
        };
        ids.push(lock_id(db, slot));
        if let Some(other) = other_db {
            ids.push(lock_id(other, slot));
        }
    }
    if ids.len() > 1 {
        ids.sort_unstable();
        ids.dedup();
    }
    Ok(())
}

/// The argument of COPY's last `DB` option, found the way COPY parses its options (the
/// value after `DB` is never itself an option), so the locks match the database it uses.
fn db_option<'a>(args: &Args<'a>) -> Option<&'a [u8]> {
    let mut found = None;
    let mut i = 3;
    while i < args.len() {
        if args.get(i).eq_ignore_ascii_case(b"db") && i + 1 < args.len() {
            found = Some(args.get(i + 1));
            i += 1;
        }
        i += 1;
    }
    found
}

fn parse_db(arg: &[u8]) -> Option<usize> {
    hotkv_protocol::parse_i64(arg).and_then(|n| usize::try_from(n).ok())
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

/// Largest reply a negative HRANDFIELD/SRANDMEMBER count may ask for. Valkey streams such
/// replies and relies on output buffer limits (unlimited by default for normal clients); a
/// handler here builds the whole reply first, so it refuses counts that would exhaust memory.
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

    use hotkv_protocol::Args;

    use super::*;
    use crate::command::flags;

    fn locks(argv: &[&str], db: usize) -> Result<Vec<LockId>, CommandError> {
        let buf: Vec<u8> = argv.concat().into_bytes();
        let mut spans = Vec::new();
        let mut at = 0;
        for a in argv {
            spans.push((at, at + a.len()));
            at += a.len();
        }
        let args = Args::from_parts(&buf, &spans);
        let name = argv[0].to_ascii_lowercase();
        let spec = commands().find(|s| s.name == name).expect("known command");
        let (mut keys, mut ids) = (Vec::new(), Vec::new());
        plan_locks(spec, &args, db, 16, &mut keys, &mut ids)?;
        Ok(ids)
    }

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

    #[test]
    fn key_commands_lock_their_slots() {
        use crate::keyspace::lock_id;
        use crate::slot::key_slot;
        let id = |db, k: &str| lock_id(db, key_slot(k.as_bytes()));
        let mut want = vec![id(0, "a"), id(0, "b")];
        want.sort_unstable();
        assert_eq!(locks(&["MSET", "a", "1", "b", "2"], 0).unwrap(), want);
        assert_eq!(locks(&["GET", "{x}1"], 3).unwrap(), [id(3, "x")]);
        assert_eq!(locks(&["DEL", "{x}1", "{x}2"], 0).unwrap(), [id(0, "x")]);
        assert!(locks(&["KEYS", "*"], 0).unwrap().is_empty());
        assert!(locks(&["DBSIZE"], 0).unwrap().is_empty());
    }

    #[test]
    fn move_and_copy_also_lock_the_other_database() {
        use crate::keyspace::lock_id;
        use crate::slot::key_slot;
        let id = |db, k: &str| lock_id(db, key_slot(k.as_bytes()));
        assert_eq!(locks(&["MOVE", "k", "2"], 0).unwrap(), [id(0, "k"), id(2, "k")]);
        assert_eq!(locks(&["MOVE", "k", "99"], 0).unwrap(), [id(0, "k")], "the handler rejects it");
        assert_eq!(locks(&["MOVE", "k", "0"], 0).unwrap(), [id(0, "k")]);
        let mut want = vec![id(0, "a"), id(0, "b"), id(5, "a"), id(5, "b")];
        want.sort_unstable();
        assert_eq!(locks(&["COPY", "a", "b", "DB", "5"], 0).unwrap(), want);
        let mut want = vec![id(1, "a"), id(1, "b"), id(3, "a"), id(3, "b")];
        want.sort_unstable();
        assert_eq!(locks(&["COPY", "a", "b", "DB", "5", "REPLACE", "db", "3"], 1).unwrap(), want, "last DB wins");
        let mut want = vec![id(0, "a"), id(0, "b")];
        want.sort_unstable();
        assert_eq!(locks(&["COPY", "a", "b", "REPLACE"], 0).unwrap(), want);
    }
}
