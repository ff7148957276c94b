//! Sorted set range reads: ZRANGE (by rank, BYSCORE, BYLEX, REV, LIMIT, WITHSCORES),
//! ZRANGESTORE and the older ZRANGEBYSCORE, ZREVRANGEBYSCORE, ZRANGEBYLEX, ZREVRANGEBYLEX
//! and ZREVRANGE, all through one parser and one range walk as Valkey's
//! `zrangeGenericCommand`.

use hotkv_protocol::{Args, ReplyBuf};

use super::list::clamp_range;
use super::zset::{LexRange, ScoreRange, limits, reply_members, store};
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::types::zset::ZSet;

/// Range command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "zrange",
        -4,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "1.2.0",
        "Returns members in a sorted set within a range of indexes.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
        EngineCmd { run: zrange, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrangestore",
        -5,
        flags::WRITE | flags::DENYOOM,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::OW | kf::UPDATE), KeySpec::single(2, kf::RO | kf::ACCESS)],
        "sorted_set",
        "6.2.0",
        "Stores a range of members from sorted set in a key.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements stored into the destination key.",
        EngineCmd { run: zrangestore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrangebyscore",
        -4,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "1.0.5",
        "Returns members in a sorted set within a range of scores.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrangebyscore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrevrangebyscore",
        -4,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "2.2.0",
        "Returns members in a sorted set within a range of scores in reverse order.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrevrangebyscore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrangebylex",
        -4,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "2.8.9",
        "Returns members in a sorted set within a lexicographical range.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrangebylex, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrevrangebylex",
        -4,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "2.8.9",
        "Returns members in a sorted set within a lexicographical range in reverse order.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements being returned. If M is constant (e.g. always asking for the first 10 elements with LIMIT), you can consider it O(log(N)).",
        EngineCmd { run: zrevrangebylex, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zrevrange",
        -4,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set",
        "1.2.0",
        "Returns members in a sorted set within a range of indexes in reverse order.",
        "O(log(N)+M) with N being the number of elements in the sorted set and M the number of elements returned.",
        EngineCmd { run: zrevrange, plan: LockPlan::Keys },
    ),
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
fn parse(
    args: &Args<'_>,
    src: usize,
    store: bool,
    by: Option<By>,
    rev: Option<bool>,
) -> Result<RangeArgs, CommandError> {
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
    ctx.changed(dst, 'z', event, false);
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

#[cfg(test)]
mod tests {
    use crate::testkit::arr;
    use std::collections::BTreeMap;

    use hotkv_protocol::Protocol;
    use proptest::prelude::*;

    use crate::testkit::TestKit;

    fn setup() -> TestKit {
        let mut t = TestKit::default();
        t.run(&["ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"]);
        t
    }

    #[test]
    fn by_rank() {
        let mut t = setup();
        assert_eq!(t.run(&["ZRANGE", "z", "0", "-1"]), arr(&["a", "b", "c", "d", "e"]));
        assert_eq!(t.run(&["ZRANGE", "z", "-2", "100"]), arr(&["d", "e"]));
        assert_eq!(t.run(&["ZRANGE", "z", "3", "1"]), "*0\r\n");
        assert_eq!(t.run(&["ZRANGE", "z", "0", "1", "REV"]), arr(&["e", "d"]));
        assert_eq!(t.run(&["ZREVRANGE", "z", "1", "2"]), arr(&["d", "c"]));
        assert_eq!(t.run(&["ZREVRANGE", "z", "0", "0", "WITHSCORES"]), arr(&["e", "5"]));
        assert_eq!(t.run(&["ZRANGE", "z", "0", "1", "WITHSCORES"]), arr(&["a", "1", "b", "2"]));
        assert_eq!(t.run(&["ZRANGE", "nope", "0", "-1"]), "*0\r\n");
        assert_eq!(t.run(&["ZRANGE", "z", "0", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(
            t.run(&["ZRANGE", "z", "0", "1", "LIMIT", "0", "1"]),
            "-ERR syntax error, LIMIT is only supported in combination with either BYSCORE or BYLEX\r\n"
        );
        assert_eq!(t.run(&["ZREVRANGE", "z", "0", "1", "REV"]), "-ERR syntax error\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["ZRANGE", "z", "0", "0", "WITHSCORES"]), "*1\r\n*2\r\n$1\r\na\r\n,1\r\n");
    }

    #[test]
    fn by_score() {
        let mut t = setup();
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "(1", "3"]), arr(&["b", "c"]));
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "1", "2"]), arr(&["b", "c"]));
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "4", "-1"]), arr(&["e"]));
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "5", "1"]), "*0\r\n");
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "-1", "1"]), "*0\r\n");
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "-inf", "+inf", "LIMIT", "0", "0"]), "*0\r\n");
        assert_eq!(t.run(&["ZREVRANGEBYSCORE", "z", "4", "(2", "WITHSCORES"]), arr(&["d", "4", "c", "3"]));
        assert_eq!(t.run(&["ZREVRANGEBYSCORE", "z", "+inf", "-inf", "LIMIT", "1", "1"]), arr(&["d"]));
        assert_eq!(t.run(&["ZRANGE", "z", "(4", "+inf", "BYSCORE"]), arr(&["e"]));
        assert_eq!(t.run(&["ZRANGE", "z", "+inf", "(4", "BYSCORE", "REV"]), arr(&["e"]));
        assert_eq!(t.run(&["ZRANGE", "z", "5", "1", "BYSCORE"]), "*0\r\n");
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "a", "1"]), "-ERR min or max is not a float\r\n");
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "1", "2", "BYSCORE"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZRANGEBYSCORE", "z", "1", "2", "LIMIT", "1"]), "-ERR syntax error\r\n");
    }

    #[test]
    fn by_lex() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "z", "0", "alpha", "0", "bar", "0", "cool", "0", "down", "0", "elephant", "0", "foo"]);
        assert_eq!(t.run(&["ZRANGEBYLEX", "z", "-", "[cool"]), arr(&["alpha", "bar", "cool"]));
        assert_eq!(t.run(&["ZRANGEBYLEX", "z", "(bar", "(down"]), arr(&["cool"]));
        assert_eq!(t.run(&["ZRANGEBYLEX", "z", "[c", "+", "LIMIT", "1", "2"]), arr(&["down", "elephant"]));
        assert_eq!(t.run(&["ZREVRANGEBYLEX", "z", "+", "(d"]), arr(&["foo", "elephant", "down"]));
        assert_eq!(t.run(&["ZRANGE", "z", "[foo", "-", "BYLEX", "REV", "LIMIT", "0", "2"]), arr(&["foo", "elephant"]));
        assert_eq!(
            t.run(&["ZRANGE", "z", "-", "+", "BYLEX", "WITHSCORES"]),
            "-ERR syntax error, WITHSCORES not supported in combination with BYLEX\r\n"
        );
        assert_eq!(t.run(&["ZRANGEBYLEX", "z", "a", "+"]), "-ERR min or max not valid string range item\r\n");
    }

    #[test]
    fn zrangestore() {
        let mut t = setup();
        assert_eq!(t.run(&["ZRANGESTORE", "d", "z", "1", "3"]), ":3\r\n");
        assert_eq!(t.run(&["ZRANGE", "d", "0", "-1", "WITHSCORES"]), arr(&["b", "2", "c", "3", "d", "4"]));
        assert_eq!(t.run(&["ZRANGESTORE", "d", "z", "5", "+inf", "BYSCORE", "REV", "LIMIT", "0", "2"]), ":0\r\n");
        assert_eq!(t.run(&["ZRANGESTORE", "d", "z", "+inf", "3", "BYSCORE", "REV", "LIMIT", "0", "2"]), ":2\r\n");
        assert_eq!(t.run(&["ZRANGE", "d", "0", "-1"]), arr(&["d", "e"]));
        t.events.take();
        assert_eq!(t.run(&["ZRANGESTORE", "d", "nope", "0", "-1"]), ":0\r\n");
        assert_eq!(t.events.take(), ["m:keymiss:nope@0", "g:del:d@0"]);
        assert_eq!(t.run(&["EXISTS", "d"]), ":0\r\n");
        assert_eq!(t.run(&["ZRANGESTORE", "d", "z", "0", "1", "WITHSCORES"]), "-ERR syntax error\r\n");
        t.run(&["SET", "s", "v", "EX", "100"]);
        t.events.take();
        assert_eq!(t.run(&["ZRANGESTORE", "s", "z", "0", "0"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "s"]), ":-1\r\n", "the destination is replaced with its TTL");
        assert_eq!(t.events.take(), ["z:zrangestore:s@0"]);
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        /// Random ZADD/ZREM/ZINCRBY/ZREMRANGEBYSCORE against a BTreeMap model, at two
        /// thresholds so both encodings (and conversions between them) are exercised.
        #[test]
        fn behaves_like_a_sorted_model(
            ops in prop::collection::vec((0u8..5, 0u8..40, -20i32..20, -20i32..20), 1..120),
            max_entries in prop_oneof![Just(128usize), Just(8)],
        ) {
            let mut t = TestKit::default();
            t.cfg.zset_max_listpack_entries = max_entries;
            let mut m: BTreeMap<String, f64> = BTreeMap::new();
            for (op, member, a, b) in ops {
                let member = format!("m{member}");
                let (a, b) = (f64::from(a) / 2.0, f64::from(b) / 2.0);
                match op {
                    0 => {
                        t.run(&["ZADD", "z", &a.to_string(), &member]);
                        m.insert(member, a);
                    }
                    1 => {
                        t.run(&["ZREM", "z", &member]);
                        m.remove(&member);
                    }
                    2 => {
                        t.run(&["ZINCRBY", "z", &a.to_string(), &member]);
                        *m.entry(member).or_insert(0.0) += a;
                    }
                    3 => {
                        let (lo, hi) = (a.min(b), a.max(b));
                        t.run(&["ZREMRANGEBYSCORE", "z", &lo.to_string(), &format!("({hi}")]);
                        m.retain(|_, s| !(*s >= lo && *s < hi));
                    }
                    _ => {
                        let mut sorted: Vec<(f64, String)> = m.iter().map(|(k, v)| (*v, k.clone())).collect();
                        sorted.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
                        if let Some(r) = sorted.iter().position(|(_, k)| *k == member) {
                            prop_assert_eq!(t.run(&["ZRANK", "z", &member]), format!(":{r}\r\n"));
                        }
                        let want: Vec<&str> = sorted.iter().filter(|(s, _)| *s > a).map(|(_, k)| k.as_str()).collect();
                        prop_assert_eq!(t.run(&["ZRANGEBYSCORE", "z", &format!("({a}"), "+inf"]), arr(&want));
                    }
                }
                prop_assert_eq!(t.run(&["ZCARD", "z"]), format!(":{}\r\n", m.len()));
            }
            let mut sorted: Vec<(f64, String)> = m.iter().map(|(k, v)| (*v, k.clone())).collect();
            sorted.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1)));
            let want: Vec<String> = sorted.iter().flat_map(|(s, k)| {
                let mut f = Vec::new();
                hotkv_protocol::format_double(*s, &mut f);
                [k.clone(), String::from_utf8(f).unwrap()]
            }).collect();
            let want: Vec<&str> = want.iter().map(String::as_str).collect();
            prop_assert_eq!(t.run(&["ZRANGE", "z", "0", "-1", "WITHSCORES"]), arr(&want));
            let rev: Vec<&str> = sorted.iter().rev().map(|(_, k)| k.as_str()).collect();
            prop_assert_eq!(t.run(&["ZREVRANGE", "z", "0", "-1"]), arr(&rev));
        }
    }
}
