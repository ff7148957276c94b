//! Sorted set commands on single members and counts: ZADD, ZINCRBY, ZREM, ZCARD, ZSCORE,
//! ZMSCORE, ZRANK, ZREVRANK, ZCOUNT, ZLEXCOUNT and ZREMRANGEBY{RANK,SCORE,LEX}, plus what the other sorted-set files share: score and lex range parsing, replies
//! and notifications (Valkey's `t_zset.c`). Ranges read in `zset_range.rs`, pops in
//! `zset_pop.rs`, set algebra in `zset_store.rs`, sampling and iteration in `zset_scan.rs`.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, float_arg, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::types::lpentry::Elem;
use crate::types::zset::{Limits, ZSet};

/// Single-member and counting sorted set command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "zadd",
        -4,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "sorted_set",
        "1.2.0",
        "Adds one or more members to a sorted set, or updates their scores. Creates the key if it doesn't exist.",
        "O(log(N)) for each item added, where N is the number of elements in the sorted set.",
        EngineCmd { run: zadd, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zincrby",
        4,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE)],
        "sorted_set",
        "1.2.0",
        "Increments the score of a member in a sorted set.",
        "O(log(N)) where N is the number of elements in the sorted set.",
        EngineCmd { run: zincrby, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrem",
        -3,
        flags::WRITE | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "sorted_set",
        "1.2.0",
        "Removes one or more members from a sorted set. Deletes the sorted set if all members were removed.",
        "O(M*log(N)) with N being the number of elements in the sorted set and M the number of elements to be removed.",
        EngineCmd { run: zrem, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zcard",
        2,
        flags::READONLY | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO)],
        "sorted_set",
        "1.2.0",
        "Returns the number of members in a sorted set.",
        "O(1)",
        EngineCmd { run: zcard, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zscore",
        3,
        flags::READONLY | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "1.2.0",
        "Returns the score of a member in a sorted set.",
        "O(1)",
        EngineCmd { run: zscore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zmscore",
        -3,
        flags::READONLY | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "6.2.0",
        "Returns the score of one or more members in a sorted set.",
        "O(N) where N is the number of members being requested.",
        EngineCmd { run: zmscore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrank",
        -3,
        flags::READONLY | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "2.0.0",
        "Returns the index of a member in a sorted set ordered by ascending scores.",
        "O(log(N))",
        EngineCmd { run: zrank, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrevrank",
        -3,
        flags::READONLY | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "2.0.0",
        "Returns the index of a member in a sorted set ordered by descending scores.",
        "O(log(N))",
        EngineCmd { run: zrevrank, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zcount",
        4,
        flags::READONLY | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "2.0.0",
        "Returns the count of members in a sorted set that have scores within a range.",
        "O(log(N)) with N being the number of elements in the sorted set.",
        EngineCmd { run: zcount, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zlexcount",
        4,
        flags::READONLY | flags::FAST,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "2.8.9",
        "Returns the number of members in a sorted set within a lexicographical range.",
        "O(log(N)) with N being the number of elements in the sorted set.",
        EngineCmd { run: zlexcount, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zremrangebyrank",
        4,
        flags::WRITE,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "sorted_set",
        "2.0.0",
        "Removes members in a sorted set within a range of indexes. Deletes the sorted set if all members were removed.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
        EngineCmd { run: zremrangebyrank, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zremrangebyscore",
        4,
        flags::WRITE,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "sorted_set",
        "1.2.0",
        "Removes members in a sorted set within a range of scores. Deletes the sorted set if all members were removed.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
        EngineCmd { run: zremrangebyscore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zremrangebylex",
        4,
        flags::WRITE,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RW | kf::DELETE)],
        "sorted_set",
        "2.8.9",
        "Removes members in a sorted set within a lexicographical range. Deletes the sorted set if all members were removed.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements removed by the operation.",
        EngineCmd { run: zremrangebylex, plan: LockPlan::Keys },
    ),
];

/// The error of a score that became NaN (`ZINCRBY`, `ZADD INCR` of `inf` and `-inf`).
pub(super) const NAN_ERROR: &str = "resulting score is not a number (NaN)";

/// The listpack thresholds from the configuration.
pub(super) fn limits(ctx: &Ctx<'_>) -> Limits {
    Limits { max_entries: ctx.cfg.zset_max_listpack_entries, max_value: ctx.cfg.zset_max_listpack_value }
}

/// Stores a new sorted set at `key`, replacing whatever was there (and its TTL).
pub(super) fn store(ctx: &mut Ctx<'_>, key: &[u8], z: ZSet) -> CmdResult {
    ctx.set(key, NewValue::Object(Object::ZSet(z)), Ttl::Clear)
}

/// Writes members, with scores when asked: a flat array in RESP2, `[member, score]` pairs
/// in RESP3 (Valkey's `zrangeResultEmit*`).
pub(super) fn reply_members(out: &mut ReplyBuf, items: &[(Elem<'_>, f64)], withscores: bool) {
    let pairs = withscores && out.is_resp3();
    out.array(if withscores && !pairs { items.len() * 2 } else { items.len() });
    for (m, s) in items {
        if pairs {
            out.array(2);
        }
        m.reply(out);
        if withscores {
            out.double(*s);
        }
    }
}

/// C `strtod` over the whole argument, as `zslParseRange` uses it: leading blanks allowed,
/// an empty string reads as 0, NaN refused. (Hexadecimal floats are not accepted.)
fn strtod(s: &[u8]) -> Option<f64> {
    if s.is_empty() {
        return Some(0.0);
    }
    let t = std::str::from_utf8(s).ok()?;
    let t = t.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let v: f64 = t.parse().ok()?;
    (!v.is_nan()).then_some(v)
}

/// A score interval, `(` marking an exclusive end (`zrangespec`).
#[derive(Debug, Clone, Copy)]
pub(super) struct ScoreRange {
    min: f64,
    minex: bool,
    max: f64,
    maxex: bool,
}

impl ScoreRange {
    /// Parses `min` and `max`, failing with Valkey's "min or max is not a float".
    pub(super) fn parse(min: &[u8], max: &[u8]) -> Result<ScoreRange, CommandError> {
        let bound = |a: &[u8]| match a.first() {
            Some(b'(') => strtod(&a[1..]).map(|v| (v, true)),
            _ => strtod(a).map(|v| (v, false)),
        };
        let err = || CommandError::err("min or max is not a float");
        let (min, minex) = bound(min).ok_or_else(err)?;
        let (max, maxex) = bound(max).ok_or_else(err)?;
        Ok(ScoreRange { min, minex, max, maxex })
    }

    /// The ranks `[lo, hi)` of the members inside the interval.
    pub(super) fn ranks(&self, z: &ZSet) -> (usize, usize) {
        let lo = z.count_before(|s, _| s < self.min || (self.minex && s == self.min));
        let hi = z.count_before(|s, _| s < self.max || (!self.maxex && s == self.max));
        (lo, hi.max(lo))
    }
}

/// One end of a lex interval.
#[derive(Debug, Clone, PartialEq, Eq)]
enum LexBound {
    /// `-`: below every string.
    Lowest,
    /// `+`: above every string.
    Highest,
    /// `[x` (inclusive) or `(x` (exclusive).
    Value(Vec<u8>, bool),
}

/// A member interval in lexicographic order (`zlexrangespec`).
#[derive(Debug, Clone)]
pub(super) struct LexRange {
    min: LexBound,
    max: LexBound,
}

impl LexRange {
    /// Parses `min` and `max`, failing with "min or max not valid string range item".
    pub(super) fn parse(min: &[u8], max: &[u8]) -> Result<LexRange, CommandError> {
        let bound = |a: &[u8]| match a {
            b"-" => Some(LexBound::Lowest),
            b"+" => Some(LexBound::Highest),
            [b'[', rest @ ..] => Some(LexBound::Value(rest.to_vec(), false)),
            [b'(', rest @ ..] => Some(LexBound::Value(rest.to_vec(), true)),
            _ => None,
        };
        let err = || CommandError::err("min or max not valid string range item");
        Ok(LexRange { min: bound(min).ok_or_else(err)?, max: bound(max).ok_or_else(err)? })
    }

    /// The ranks `[lo, hi)` of the members inside the interval (meaningful when all scores
    /// are equal, as Valkey documents).
    pub(super) fn ranks(&self, z: &ZSet) -> (usize, usize) {
        let lo = z.count_before(|_, m| match &self.min {
            LexBound::Lowest => false,
            LexBound::Highest => true,
            LexBound::Value(v, ex) => m < v.as_slice() || (*ex && m == v.as_slice()),
        });
        let hi = z.count_before(|_, m| match &self.max {
            LexBound::Lowest => false,
            LexBound::Highest => true,
            LexBound::Value(v, ex) => m < v.as_slice() || (!*ex && m == v.as_slice()),
        });
        (lo, hi.max(lo))
    }
}

/// ZADD's flags (`ZADD_IN_*`).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct AddFlags {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
    incr: bool,
}

/// What one `zsetAdd` did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) enum Added {
    /// A new member.
    New(f64),
    /// An existing member; the score it has now, and whether it changed.
    Updated(f64, bool),
    /// Nothing, because of NX, XX, GT or LT.
    Nop,
}

/// Valkey's `zsetAdd`: adds or updates one member under `flags`.
pub(super) fn zset_add(
    z: &mut ZSet,
    member: &[u8],
    score: f64,
    flags: AddFlags,
    limits: Limits,
) -> Result<Added, CommandError> {
    match z.score(member) {
        Some(_) if flags.nx => Ok(Added::Nop),
        Some(cur) => {
            let score = if flags.incr { score + cur } else { score };
            if score.is_nan() {
                return Err(CommandError::err(NAN_ERROR));
            }
            if (flags.lt && score >= cur) || (flags.gt && score <= cur) {
                return Ok(Added::Nop);
            }
            if score != cur {
                z.update(member, score);
            }
            Ok(Added::Updated(score, score != cur))
        }
        None if flags.xx => Ok(Added::Nop),
        None => {
            z.insert(member, score, limits);
            Ok(Added::New(score))
        }
    }
}

fn zadd(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    zadd_generic(ctx, args, out, AddFlags::default())
}

fn zincrby(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    zadd_generic(ctx, args, out, AddFlags { incr: true, ..AddFlags::default() })
}

/// ZADD and ZINCRBY (`zaddGenericCommand`); GEOADD runs it with the arguments of a ZADD.
pub(super) fn zadd_generic(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, mut f: AddFlags) -> CmdResult {
    let mut ch = false;
    let mut idx = 2;
    while idx < args.len() {
        let opt = args.get(idx);
        match opt.to_ascii_lowercase().as_slice() {
            b"nx" => f.nx = true,
            b"xx" => f.xx = true,
            b"ch" => ch = true,
            b"incr" => f.incr = true,
            b"gt" => f.gt = true,
            b"lt" => f.lt = true,
            _ => break,
        }
        idx += 1;
    }
    let rest = args.len() - idx;
    if rest == 0 || rest % 2 == 1 {
        return Err(CommandError::Syntax);
    }
    if f.nx && f.xx {
        return Err(CommandError::err("XX and NX options at the same time are not compatible"));
    }
    if (f.nx && (f.gt || f.lt)) || (f.gt && f.lt) {
        return Err(CommandError::err("GT, LT, and/or NX options at the same time are not compatible"));
    }
    if f.incr && rest > 2 {
        return Err(CommandError::err("INCR option supports a single increment-element pair"));
    }
    let mut pairs = Vec::with_capacity(rest / 2);
    for j in (idx..args.len()).step_by(2) {
        pairs.push((float_arg(args.get(j))?, args.get(j + 1)));
    }
    let max_len = pairs.iter().map(|(_, m)| m.len()).max().unwrap_or(0);
    let key = args.get(1);
    let limits = limits(ctx);
    let (mut added, mut updated, mut processed, mut last) = (0, 0, 0, 0.0);
    let mut apply = |z: &mut ZSet| -> CmdResult {
        for &(score, member) in &pairs {
            match zset_add(z, member, score, f, limits)? {
                Added::New(s) => (added, processed, last) = (added + 1, processed + 1, s),
                Added::Updated(s, moved) => {
                    (updated, processed, last) = (updated + usize::from(moved), processed + 1, s)
                }
                Added::Nop => {}
            }
        }
        Ok(())
    };
    match ctx.write(key)? {
        Some(mut k) => {
            let z = k.zset_mut()?;
            z.maybe_convert(pairs.len(), max_len, limits);
            apply(z)?;
        }
        None if f.xx => {}
        None => {
            let mut z = ZSet::new(pairs.len(), max_len, limits);
            apply(&mut z)?;
            if !z.is_empty() {
                store(ctx, key, z)?;
            }
        }
    }
    if f.incr {
        if processed > 0 { out.double(last) } else { out.null() }
    } else {
        out.int(if ch { added + updated } else { added } as i64);
    }
    if added + updated > 0 {
        ctx.changed(key, 'z', if f.incr { "zincr" } else { "zadd" }, false);
    }
    Ok(())
}

fn zrem(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let z = k.zset_mut()?;
    let mut removed = 0;
    for m in args.iter().skip(2) {
        removed += i64::from(z.remove(m));
        if z.is_empty() {
            break;
        }
    }
    let deleted = z.is_empty();
    if deleted {
        drop(k.delete());
    }
    out.int(removed);
    if removed > 0 {
        ctx.changed(key, 'z', "zrem", deleted);
    }
    Ok(())
}

fn zcard(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let n = match ctx.read(args.get(1))? {
        Some(k) => k.zset()?.len(),
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn zscore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let score = match ctx.read(args.get(1))? {
        Some(k) => k.zset()?.score(args.get(2)),
        None => None,
    };
    match score {
        Some(s) => out.double(s),
        None => out.null(),
    }
    Ok(())
}

fn zmscore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let k = ctx.read(args.get(1))?;
    let z = match &k {
        Some(k) => Some(k.zset()?),
        None => None,
    };
    out.array(args.len() - 2);
    for m in args.iter().skip(2) {
        match z.and_then(|z| z.score(m)) {
            Some(s) => out.double(s),
            None => out.null(),
        }
    }
    Ok(())
}

fn zrank(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    rank_generic(ctx, args, out, false)
}

fn zrevrank(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    rank_generic(ctx, args, out, true)
}

/// ZRANK and ZREVRANK, optionally WITHSCORE (`zrankGenericCommand`).
fn rank_generic(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, rev: bool) -> CmdResult {
    if args.len() > 4 {
        return Err(CommandError::WrongArity(if rev { "zrevrank" } else { "zrank" }.into()));
    }
    let withscore = match args.opt(3) {
        Some(o) if o.eq_ignore_ascii_case(b"withscore") => true,
        Some(_) => return Err(CommandError::Syntax),
        None => false,
    };
    let found = match ctx.read(args.get(1))? {
        Some(k) => {
            let z = k.zset()?;
            z.rank(args.get(2)).map(|(r, s)| (if rev { z.len() - 1 - r } else { r }, s))
        }
        None => None,
    };
    match (found, withscore) {
        (Some((r, s)), true) => {
            out.array(2);
            out.int(r as i64);
            out.double(s);
        }
        (Some((r, _)), false) => out.int(r as i64),
        (None, true) => out.null_array(),
        (None, false) => out.null(),
    }
    Ok(())
}

fn zcount(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let range = ScoreRange::parse(args.get(2), args.get(3))?;
    let n = match ctx.read(args.get(1))? {
        Some(k) => {
            let (lo, hi) = range.ranks(k.zset()?);
            hi - lo
        }
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

fn zlexcount(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let range = LexRange::parse(args.get(2), args.get(3))?;
    let n = match ctx.read(args.get(1))? {
        Some(k) => {
            let (lo, hi) = range.ranks(k.zset()?);
            hi - lo
        }
        None => 0,
    };
    out.int(n as i64);
    Ok(())
}

/// The interval of a ZREMRANGEBY* command.
enum RemRange {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

fn zremrangebyrank(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let r = RemRange::Rank(int_arg(args.get(2))?, int_arg(args.get(3))?);
    remrange(ctx, args, out, r, "zremrangebyrank")
}

fn zremrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let r = RemRange::Score(ScoreRange::parse(args.get(2), args.get(3))?);
    remrange(ctx, args, out, r, "zremrangebyscore")
}

fn zremrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let r = RemRange::Lex(LexRange::parse(args.get(2), args.get(3))?);
    remrange(ctx, args, out, r, "zremrangebylex")
}

/// `zremrangeGenericCommand`.
fn remrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, range: RemRange, event: &str) -> CmdResult {
    let key = args.get(1);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    let z = k.zset_mut()?;
    let (lo, hi) = match &range {
        RemRange::Rank(start, end) => match super::list::clamp_range(*start, *end, z.len()) {
            Some((first, n)) => (first, first + n),
            None => (0, 0),
        },
        RemRange::Score(r) => r.ranks(z),
        RemRange::Lex(r) => r.ranks(z),
    };
    let removed = z.remove_range(lo, hi - lo);
    let deleted = z.is_empty();
    if deleted {
        drop(k.delete());
    }
    out.int(removed as i64);
    if removed > 0 {
        ctx.changed(key, 'z', event, deleted);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use hotkv_protocol::Protocol;

    use crate::testkit::TestKit;

    const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

    fn bulk(s: &str) -> String {
        format!("${}\r\n{s}\r\n", s.len())
    }

    #[test]
    fn zadd_options_and_replies() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["ZADD", "z", "1", "a", "2", "b"]), ":2\r\n");
        assert_eq!(t.run(&["ZADD", "z", "5", "a", "3", "c"]), ":1\r\n");
        assert_eq!(t.run(&["ZADD", "z", "CH", "6", "a", "3", "c", "9", "d"]), ":2\r\n");
        assert_eq!(t.run(&["ZADD", "z", "NX", "100", "a", "1", "e"]), ":1\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "a"]), bulk("6"));
        assert_eq!(t.run(&["ZADD", "z", "XX", "CH", "7", "a", "1", "new"]), ":1\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "new"]), "$-1\r\n");
        assert_eq!(t.run(&["ZADD", "z", "GT", "CH", "1", "a", "8", "b"]), ":1\r\n");
        assert_eq!(t.run(&["ZADD", "z", "LT", "CH", "100", "a", "0", "b"]), ":1\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "a"]), bulk("7"));
        assert_eq!(t.run(&["ZSCORE", "z", "b"]), bulk("0"));
        assert_eq!(t.run(&["ZADD", "z", "INCR", "2.5", "a"]), bulk("9.5"));
        assert_eq!(t.run(&["ZADD", "z", "NX", "INCR", "1", "a"]), "$-1\r\n");
        assert_eq!(t.run(&["ZADD", "z", "GT", "INCR", "-1", "a"]), "$-1\r\n");
        assert_eq!(t.run(&["ZADD", "nope", "XX", "INCR", "1", "a"]), "$-1\r\n");
        assert_eq!(t.run(&["ZADD", "nope", "XX", "1", "a"]), ":0\r\n");
        assert_eq!(t.run(&["EXISTS", "nope"]), ":0\r\n", "XX never creates the key");
        assert_eq!(
            t.run(&["ZADD", "z", "NX", "XX", "1", "a"]),
            "-ERR XX and NX options at the same time are not compatible\r\n"
        );
        for opts in [["GT", "NX"], ["LT", "NX"], ["GT", "LT"]] {
            assert_eq!(
                t.run(&["ZADD", "z", opts[0], opts[1], "1", "a"]),
                "-ERR GT, LT, and/or NX options at the same time are not compatible\r\n"
            );
        }
        assert_eq!(
            t.run(&["ZADD", "z", "INCR", "1", "a", "2", "b"]),
            "-ERR INCR option supports a single increment-element pair\r\n"
        );
        assert_eq!(t.run(&["ZADD", "z", "1", "a", "2"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZADD", "z", "NX", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZADD", "z", "x", "a"]), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run(&["ZADD", "z", "nan", "a"]), "-ERR value is not a valid float\r\n");
        assert_eq!(t.run(&["ZADD", "z", "inf", "x", "-inf", "y"]), ":2\r\n");
        assert_eq!(t.run(&["ZINCRBY", "z", "-inf", "x"]), "-ERR resulting score is not a number (NaN)\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "x"]), bulk("inf"));
        assert_eq!(t.run(&["ZINCRBY", "z", "1.5", "fresh"]), bulk("1.5"));
        assert_eq!(t.run(&["ZINCRBY", "z", "x", "fresh"]), "-ERR value is not a valid float\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["ZINCRBY", "z", "1", "fresh"]), ",2.5\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "x"]), ",inf\r\n");
        assert_eq!(t.run(&["ZSCORE", "z", "nobody"]), "_\r\n");
    }

    #[test]
    fn rem_card_score_rank() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]);
        assert_eq!(t.run(&["ZCARD", "z"]), ":3\r\n");
        assert_eq!(t.run(&["ZCARD", "nope"]), ":0\r\n");
        assert_eq!(t.run(&["ZMSCORE", "z", "a", "x", "c"]), "*3\r\n$1\r\n1\r\n$-1\r\n$1\r\n3\r\n");
        assert_eq!(t.run(&["ZMSCORE", "nope", "a"]), "*1\r\n$-1\r\n");
        assert_eq!(t.run(&["ZRANK", "z", "c"]), ":2\r\n");
        assert_eq!(t.run(&["ZREVRANK", "z", "c"]), ":0\r\n");
        assert_eq!(t.run(&["ZRANK", "z", "b", "WITHSCORE"]), "*2\r\n:1\r\n$1\r\n2\r\n");
        assert_eq!(t.run(&["ZREVRANK", "z", "a", "withscore"]), "*2\r\n:2\r\n$1\r\n1\r\n");
        assert_eq!(t.run(&["ZRANK", "z", "x"]), "$-1\r\n");
        assert_eq!(t.run(&["ZRANK", "z", "x", "WITHSCORE"]), "*-1\r\n");
        assert_eq!(t.run(&["ZRANK", "nope", "x", "WITHSCORE"]), "*-1\r\n");
        assert_eq!(t.run(&["ZRANK", "z", "a", "WITHSCORES"]), "-ERR syntax error\r\n");
        assert_eq!(
            t.run(&["ZRANK", "z", "a", "WITHSCORE", "x"]),
            "-ERR wrong number of arguments for 'zrank' command\r\n"
        );
        assert_eq!(t.run(&["ZREM", "z", "a", "x", "a"]), ":1\r\n");
        assert_eq!(t.run(&["ZREM", "nope", "a"]), ":0\r\n");
        t.events.take();
        assert_eq!(t.run(&["ZREM", "z", "b", "c", "d"]), ":2\r\n");
        assert_eq!(t.events.take(), ["z:zrem:z@0", "g:del:z@0"]);
        assert_eq!(t.run(&["EXISTS", "z"]), ":0\r\n");
        t.proto = Protocol::Resp3;
        t.run(&["ZADD", "z", "1.5", "a"]);
        assert_eq!(t.run(&["ZRANK", "z", "a", "WITHSCORE"]), "*2\r\n:0\r\n,1.5\r\n");
        assert_eq!(t.run(&["ZRANK", "z", "x", "WITHSCORE"]), "_\r\n");
        assert_eq!(t.run(&["ZMSCORE", "z", "a", "x"]), "*2\r\n,1.5\r\n_\r\n");
    }

    #[test]
    fn counts_and_range_parsing() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "z", "-inf", "a", "1", "b", "2", "c", "3", "d", "inf", "e"]);
        assert_eq!(t.run(&["ZCOUNT", "z", "-inf", "+inf"]), ":5\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", "1", "3"]), ":3\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", "(1", "(3"]), ":1\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", "(1", "1"]), ":0\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", "3", "1"]), ":0\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", "(-inf", "(inf"]), ":3\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", " 2", "2.0"]), ":1\r\n", "strtod skips leading blanks");
        assert_eq!(t.run(&["ZCOUNT", "z", "x", "1"]), "-ERR min or max is not a float\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", "1", "nan"]), "-ERR min or max is not a float\r\n");
        assert_eq!(t.run(&["ZCOUNT", "z", "1", "(x"]), "-ERR min or max is not a float\r\n");
        assert_eq!(t.run(&["ZCOUNT", "nope", "x", "1"]), "-ERR min or max is not a float\r\n");
        assert_eq!(t.run(&["ZCOUNT", "nope", "0", "1"]), ":0\r\n");
        t.run(&["ZADD", "l", "0", "a", "0", "b", "0", "c", "0", "d", "0", "e"]);
        assert_eq!(t.run(&["ZLEXCOUNT", "l", "-", "+"]), ":5\r\n");
        assert_eq!(t.run(&["ZLEXCOUNT", "l", "[b", "(d"]), ":2\r\n");
        assert_eq!(t.run(&["ZLEXCOUNT", "l", "(b", "[d"]), ":2\r\n");
        assert_eq!(t.run(&["ZLEXCOUNT", "l", "+", "-"]), ":0\r\n");
        assert_eq!(t.run(&["ZLEXCOUNT", "l", "[d", "[b"]), ":0\r\n");
        assert_eq!(t.run(&["ZLEXCOUNT", "l", "b", "[d"]), "-ERR min or max not valid string range item\r\n");
        assert_eq!(t.run(&["ZLEXCOUNT", "l", "-x", "+"]), "-ERR min or max not valid string range item\r\n");
    }

    #[test]
    fn remrange_by_rank_score_lex() {
        let mut t = TestKit::default();
        let fill = |t: &mut TestKit| {
            t.run(&["DEL", "z"]);
            t.run(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"]);
        };
        fill(&mut t);
        assert_eq!(t.run(&["ZREMRANGEBYRANK", "z", "1", "-2"]), ":3\r\n");
        assert_eq!(t.run(&["ZRANGE", "z", "0", "-1"]), "*2\r\n$1\r\na\r\n$1\r\ne\r\n");
        assert_eq!(t.run(&["ZREMRANGEBYRANK", "z", "5", "10"]), ":0\r\n");
        assert_eq!(t.run(&["ZREMRANGEBYRANK", "z", "x", "10"]), "-ERR value is not an integer or out of range\r\n");
        fill(&mut t);
        assert_eq!(t.run(&["ZREMRANGEBYSCORE", "z", "(1", "3"]), ":2\r\n");
        assert_eq!(t.run(&["ZREMRANGEBYSCORE", "z", "10", "20"]), ":0\r\n");
        fill(&mut t);
        assert_eq!(t.run(&["ZREMRANGEBYLEX", "z", "[b", "(e"]), ":3\r\n", "scores in member order: lex works");
        t.run(&["DEL", "z"]);
        t.run(&["ZADD", "z", "0", "a", "0", "b", "0", "c"]);
        t.events.take();
        assert_eq!(t.run(&["ZREMRANGEBYLEX", "z", "-", "+"]), ":3\r\n");
        assert_eq!(t.events.take(), ["z:zremrangebylex:z@0", "g:del:z@0"]);
        assert_eq!(t.run(&["ZREMRANGEBYLEX", "z", "-", "+"]), ":0\r\n");
    }

    #[test]
    fn wrongtype_everywhere() {
        let mut t = TestKit::default();
        t.run(&["RPUSH", "l", "x"]);
        for cmd in [
            &["ZADD", "l", "1", "a"][..],
            &["ZINCRBY", "l", "1", "a"],
            &["ZREM", "l", "a"],
            &["ZCARD", "l"],
            &["ZSCORE", "l", "a"],
            &["ZMSCORE", "l", "a"],
            &["ZRANK", "l", "a"],
            &["ZREVRANK", "l", "a"],
            &["ZCOUNT", "l", "0", "1"],
            &["ZLEXCOUNT", "l", "-", "+"],
            &["ZREMRANGEBYRANK", "l", "0", "1"],
            &["ZREMRANGEBYSCORE", "l", "0", "1"],
            &["ZREMRANGEBYLEX", "l", "-", "+"],
            &["ZRANDMEMBER", "l"],
            &["ZRANDMEMBER", "l", "2"],
            &["ZSCAN", "l", "0"],
            &["ZRANGE", "l", "0", "1"],
            &["ZRANGESTORE", "d", "l", "0", "1"],
            &["ZRANGEBYSCORE", "l", "0", "1"],
            &["ZREVRANGEBYSCORE", "l", "0", "1"],
            &["ZRANGEBYLEX", "l", "-", "+"],
            &["ZREVRANGEBYLEX", "l", "+", "-"],
            &["ZREVRANGE", "l", "0", "1"],
            &["ZPOPMIN", "l"],
            &["ZPOPMAX", "l", "0"],
            &["ZMPOP", "1", "l", "MIN"],
            &["BZPOPMIN", "l", "0"],
            &["BZMPOP", "0", "1", "l", "MAX"],
            &["ZUNION", "1", "l"],
            &["ZINTER", "2", "nope", "l"],
            &["ZDIFF", "1", "l"],
            &["ZINTERCARD", "1", "l"],
            &["ZUNIONSTORE", "d", "1", "l"],
        ] {
            assert_eq!(t.run(cmd), WRONGTYPE, "{cmd:?}");
        }
        t.run(&["ZADD", "z", "1", "a"]);
        assert_eq!(t.run(&["LLEN", "z"]), WRONGTYPE);
        assert_eq!(t.run(&["TYPE", "z"]), "+zset\r\n");
    }

    #[test]
    fn encodings_follow_the_thresholds() {
        let mut t = TestKit::default();
        let enc = |t: &mut TestKit, k: &str| t.run(&["OBJECT", "ENCODING", k]);
        let mut argv: Vec<String> = vec!["ZADD".into(), "z".into()];
        for i in 0..128 {
            argv.push(i.to_string());
            argv.push(format!("m{i}"));
        }
        let refs: Vec<&str> = argv.iter().map(String::as_str).collect();
        t.run(&refs);
        assert_eq!(enc(&mut t, "z"), "$8\r\nlistpack\r\n");
        t.run(&["ZADD", "z", "1", "one-more"]);
        assert_eq!(enc(&mut t, "z"), "$8\r\nskiplist\r\n");
        t.run(&["ZREMRANGEBYRANK", "z", "0", "100"]);
        assert_eq!(enc(&mut t, "z"), "$8\r\nskiplist\r\n", "no conversion back on removal, as Valkey");
        t.run(&["ZADD", "v", "1", &"x".repeat(64)]);
        assert_eq!(enc(&mut t, "v"), "$8\r\nlistpack\r\n");
        t.run(&["ZADD", "v", "1", &"x".repeat(65)]);
        assert_eq!(enc(&mut t, "v"), "$8\r\nskiplist\r\n");
        t.run(&["ZADD", "w", "1", &"x".repeat(65)]);
        assert_eq!(enc(&mut t, "w"), "$8\r\nskiplist\r\n", "created as a skip list");
        // ZADD converts on the batch size alone, even when every member exists.
        t.run(&refs.iter().map(|s| if *s == "z" { "y" } else { s }).collect::<Vec<_>>());
        t.run(&["ZREMRANGEBYRANK", "y", "0", "0"]);
        t.cfg.zset_max_listpack_entries = 4;
        t.run(&["ZADD", "small", "1", "a", "2", "b", "3", "c", "4", "d"]);
        assert_eq!(enc(&mut t, "small"), "$8\r\nlistpack\r\n");
        t.run(&["ZADD", "small", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"]);
        assert_eq!(enc(&mut t, "small"), "$8\r\nskiplist\r\n");
    }

    #[test]
    fn events_copy_rename_and_memory() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "z", "1", "a"]);
        t.run(&["ZADD", "z", "1", "a"]);
        t.run(&["ZINCRBY", "z", "1", "a"]);
        t.run(&["ZADD", "z", "INCR", "0", "a"]);
        assert_eq!(t.events.take(), ["n:new:z@0", "z:zadd:z@0", "z:zincr:z@0"], "no event without a change");
        for i in 0..200 {
            t.run(&["ZADD", "big", &i.to_string(), &format!("m{i}")]);
        }
        assert_eq!(t.run(&["COPY", "big", "copy"]), ":1\r\n");
        assert_eq!(t.run(&["RENAME", "copy", "moved"]), "+OK\r\n");
        t.run(&["ZREM", "big", "m5"]);
        assert_eq!(t.run(&["ZCARD", "moved"]), ":200\r\n", "COPY made an independent value");
        assert_eq!(t.run(&["ZRANK", "moved", "m150"]), ":150\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "moved"]), "$8\r\nskiplist\r\n");
        let usage = |t: &mut TestKit, k: &str| -> usize {
            let r = t.run(&["MEMORY", "USAGE", k]);
            r[1..r.len() - 2].parse().unwrap()
        };
        let (small, large) = (usage(&mut t, "z"), usage(&mut t, "moved"));
        assert!(small < 100 && large > 200 * 20, "{small} {large}");
    }
}
