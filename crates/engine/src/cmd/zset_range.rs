//! Sorted set range reads: ZRANGE (by rank, BYSCORE, BYLEX, REV, LIMIT, WITHSCORES),
//! ZRANGESTORE and the older ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX
//! and ZREVRANGE, all through one parser and one range walk as Valkey's
//! `zrangeGenericCommand`.

use hotkv_protocol::{Args, ReplyBuf};

use super::list::clamp_range;
use super::zset::{LexRange, ScoreRange, changed, limits, reply_members, store};
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::types::zset::ZSet;

/// Range command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new("zrange", -4, flags::READONLY, acl::SORTEDSET,
        &[KeySpec { flags: kf::RO | kf::ACCESS, begin: BeginSearch::Index(1), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }],
        "sorted_set", "1.2.0", "Returns members in a sorted set within a range of indexes.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
        EngineCmd { run: zrange, plan: LockPlan::Keys }),
    CommandSpec::new("zrangestore", -5, flags::WRITE | flags::DENYOOM, acl::SORTEDSET,
        &[KeySpec { flags: kf::OW | kf::UPDATE, begin: BeginSearch::Index(1), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }, KeySpec { flags: kf::RO | kf::ACCESS, begin: BeginSearch::Index(2), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }],
        "sorted_set", "6.2.0", "Stores a range of members from sorted set in a key.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements stored into the destination key.",
        EngineCmd { run: zrangestore, plan: LockPlan::Keys }),
    CommandSpec::new("zrangebyscore", -4, flags::READONLY, acl::SORTEDSET,
        &[KeySpec { flags: kf::RO | kf::ACCESS, begin: BeginSearch::Index(1), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }],
        "sorted_set", "1.0.5", "Returns members in a sorted set within a range of scores.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrangebyscore, plan: LockPlan::Keys }),
    CommandSpec::new("zrevrangebyscore", -4, flags::READONLY, acl::SORTEDSET,
        &[KeySpec { flags: kf::RO | kf::ACCESS, begin: BeginSearch::Index(1), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }],
        "sorted_set", "2.2.0", "Returns members in a sorted set within a range of scores in reverse order.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrevrangebyscore, plan: LockPlan::Keys }),
    CommandSpec::new("zrangebylex", -4, flags::READONLY, acl::SORTEDSET,
        &[KeySpec { flags: kf::RO | kf::ACCESS, begin: BeginSearch::Index(1), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }],
        "sorted_set", "2.8.9", "Returns members in a sorted set within a lexicographical range.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrangebylex, plan: LockPlan::Keys }),
    CommandSpec::new("zrevrangebylex", -4, flags::READONLY, acl::SORTEDSET,
        &[KeySpec { flags: kf::RO | kf::ACCESS, begin: BeginSearch::Index(1), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }],
        "sorted_set", "2.8.9", "Returns members in a sorted set within a lexicographical range in reverse order.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrevrangebylex, plan: LockPlan::Keys }),
    CommandSpec::new("zrevrange", -4, flags::READONLY, acl::SORTEDSET,
        &[KeySpec { flags: kf::RO | kf::ACCESS, begin: BeginSearch::Index(1), find: FindKeys::Range { last_key: 0, step: 1, limit: 0 } }],
        "sorted_set", "1.2.0", "Returns members in a sorted set within a range of indexes in reverse order.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
        EngineCmd { run: zrevrange, plan: LockPlan::Keys }),
];

/// How the interval is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Rank,
    Score,
    Lex,
}

/// A parsed range request.
struct RangeArgs {
    by: By,
    rev: bool,
    withscores: bool,
    /// `LIMIT offset count`; count < 0 means no limit.
    limit: Option<(i64, i64)>,
}

/// The interval itself, parsed after the options as Valkey does.
enum Interval {
    Rank(i64, i64),
    Score(ScoreRange),
    Lex(LexRange),
}

fn zrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, &args, out, 1, None, None)
}

fn zrangestore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, &args, out, 2, None, None)
}

fn zrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, &args, out, 1, Some(By::Score), Some(false))
}

fn zrevrangebyscore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, &args, out, 1, Some(By::Score), Some(true))
}

fn zrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, &args, out, 1, Some(By::Lex), Some(false))
}

fn zrevrangebylex(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, &args, out, 1, Some(By::Lex), Some(true))
}

fn zrevrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    range_generic(ctx, &args, out, 1, Some(By::Rank), Some(true))
}

/// Parses the options after `key min max` (`src` is the key's index; ZRANGESTORE stores).
fn parse(args: &Args<'_>, src: usize, store: bool, by: Option<By>, rev: Option<bool>) -> Result<RangeArgs, CommandError> {
    let (mut by_opt, mut rev_opt) = (by, rev);
    let mut a = RangeArgs { by: By::Rank, rev: false, withscores: false, limit: None };
    let mut j = src + 3;
    while j < args.len() {
        let opt = args.get(j);
        let left = args.len() - j - 1;
        if !store && opt.eq_ignore_ascii_case(b"withscores") {
            a.withscores = true;
        } else if opt.eq_ignore_ascii_case(b"limit") && left >= 2 {
            a.limit = Some((int_arg(args.get(j + 1))?, int_arg(args.get(j + 2))?));
            j += 2;
        } else if rev.is_none() && opt.eq_ignore_ascii_case(b"rev") {
            rev_opt = Some(true);
        } else if by.is_none() && by_opt.is_none() && opt.eq_ignore_ascii_case(b"bylex") {
            by_opt = Some(By::Lex);
        } else if by.is_none() && by_opt.is_none() && opt.eq_ignore_ascii_case(b"byscore") {
            by_opt = Some(By::Score);
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    a.by = by_opt.unwrap_or(By::Rank);
    a.rev = rev_opt.unwrap_or(false);
    if a.limit.is_some() && a.by == By::Rank {
        return Err(CommandError::err(
            "syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX",
        ));
    }
    if a.withscores && a.by == By::Lex {
        return Err(CommandError::err("syntax error, WITHSCORES not supported in combination with BYLEX"));
    }
    Ok(a)
}

/// `zrangeGenericCommand`: `src` is the index of the source key; a store command has its
/// destination just before it.
fn range_generic(
    ctx: &mut Ctx<'_>,
    args: &Args<'_>,
    out: &mut ReplyBuf,
    src: usize,
    by: Option<By>,
    rev: Option<bool>,
) -> CmdResult {
    let storing = src == 2;
    let a = parse(args, src, storing, by, rev)?;
    // BYSCORE/BYLEX in reverse take max before min.
    let (lo_arg, hi_arg) = if a.rev && a.by != By::Rank {
        (args.get(src + 2), args.get(src + 1))
    } else {
        (args.get(src + 1), args.get(src + 2))
    };
    let interval = match a.by {
        By::Rank => Interval::Rank(int_arg(lo_arg)?, int_arg(hi_arg)?),
        By::Score => Interval::Score(ScoreRange::parse(lo_arg, hi_arg)?),
        By::Lex => Interval::Lex(LexRange::parse(lo_arg, hi_arg)?),
    };
    let key = args.get(src);
    if !storing {
        let Some(k) = ctx.read(key)? else {
            out.array(0);
            return Ok(());
        };
        let z = k.zset()?;
        let (start, n) = select(z, &interval, &a);
        reply_members(out, &z.range(start, n, a.rev), a.withscores);
        return Ok(());
    }
    let mut items: Vec<(Vec<u8>, f64)> = match ctx.read(key)? {
        Some(k) => {
            let z = k.zset()?;
            let (start, n) = select(z, &interval, &a);
            z.range(start, n, a.rev).iter().map(|(m, s)| (m.to_vec(), *s)).collect()
        }
        None => Vec::new(),
    };
    let dst = args.get(1);
    store_result(ctx, out, dst, &mut items, "zrangestore")
}

/// Stores a computed result at `dst` (replacing it) and replies with its size; an empty
/// result deletes `dst` instead (`zrangeResultFinalizeStore`, the ZUNIONSTORE family).
pub(super) fn store_result(
    ctx: &mut Ctx<'_>,
    out: &mut ReplyBuf,
    dst: &[u8],
    items: &mut [(Vec<u8>, f64)],
    event: &str,
) -> CmdResult {
    if items.is_empty() {
        out.int(0);
        if ctx.delete(dst)? {
            ctx.events.notify('g', "del", dst, ctx.db);
        }
        return Ok(());
    }
    items.sort_by(|(am, a_s), (bm, bs)| a_s.total_cmp(bs).then_with(|| am.cmp(bm)));
    let n = items.len();
    let z = ZSet::from_sorted(items, limits(ctx));
    store(ctx, dst, z)?;
    out.int(n as i64);
    changed(ctx, dst, event, false);
    Ok(())
}

/// The first rank to read and how many, for the interval, direction and LIMIT. In reverse
/// the first rank is the highest one and reading goes down.
fn select(z: &ZSet, interval: &Interval, a: &RangeArgs) -> (usize, usize) {
    let len = z.len();
    let (lo, hi) = match interval {
        Interval::Rank(start, end) => {
            return match clamp_range(*start, *end, len) {
                // In reverse, rank r counts from the top: forward rank len - 1 - r.
                Some((first, n)) if a.rev => (len - 1 - first, n),
                Some((first, n)) => (first, n),
                None => (0, 0),
            };
        }
        Interval::Score(r) => r.ranks(z),
        Interval::Lex(r) => r.ranks(z),
    };
    let (offset, count) = a.limit.unwrap_or((0, -1));
    // A negative offset selects nothing (Valkey's listpack walk); a negative count is "all".
    let Ok(offset) = usize::try_from(offset) else { return (0, 0) };
    let avail = (hi - lo).saturating_sub(offset);
    let n = usize::try_from(count).map_or(avail, |c| c.min(avail));
    if n == 0 {
        return (0, 0);
    }
    if a.rev { (hi - 1 - offset, n) } else { (lo + offset, n) }
}
