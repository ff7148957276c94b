//! Sorted set algebra: ZUNION, ZINTER, ZDIFF, ZINTERCARD and the STORE forms, with WEIGHTS
//! and AGGREGATE SUM|MIN|MAX (Valkey's `zunionInterDiffGenericCommand`). Plain sets are
//! accepted as inputs, each member with score 1.

use std::collections::HashMap;

use hotkv_protocol::{Args, ReplyBuf};

use super::list::positive_arg;
use super::zset::reply_members;
use super::zset_range::store_result;
use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::entry::ValueRef;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::types::lpentry::Elem;

/// Set algebra command rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new(
        "zunion",
        -3,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec {
            flags: kf::RO | kf::ACCESS,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "sorted_set",
        "6.2.0",
        "Returns the union of multiple sorted sets.",
        "O(N)+O(M*log(M)) with N being the sum of the sizes of the input sorted sets, and M being the number of elements in the resulting sorted set.",
        EngineCmd { run: zunion, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zinter",
        -3,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec {
            flags: kf::RO | kf::ACCESS,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "sorted_set",
        "6.2.0",
        "Returns the intersect of multiple sorted sets.",
        "O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number of input sorted sets and M being the number of elements in the resulting sorted set.",
        EngineCmd { run: zinter, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zdiff",
        -3,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec {
            flags: kf::RO | kf::ACCESS,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "sorted_set",
        "6.2.0",
        "Returns the difference between multiple sorted sets.",
        "O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is the size of the first set, and K is the size of the result set.",
        EngineCmd { run: zdiff, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zintercard",
        -3,
        flags::READONLY,
        acl::SORTEDSET,
        &[KeySpec {
            flags: kf::RO | kf::ACCESS,
            begin: BeginSearch::Index(1),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        }],
        "sorted_set",
        "7.0.0",
        "Returns the number of members of the intersect of multiple sorted sets.",
        "O(N*K) worst case with N being the smallest input sorted set, K being the number of input sorted sets.",
        EngineCmd { run: zintercard, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zunionstore",
        -4,
        flags::WRITE | flags::DENYOOM,
        acl::SORTEDSET,
        &[
            KeySpec::single(1, kf::OW | kf::UPDATE),
            KeySpec {
                flags: kf::RO | kf::ACCESS,
                begin: BeginSearch::Index(2),
                find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
            },
        ],
        "sorted_set",
        "2.0.0",
        "Stores the union of multiple sorted sets in a key.",
        "O(N)+O(M log(M)) with N being the sum of the sizes of the input sorted sets, and M being the number of elements in the resulting sorted set.",
        EngineCmd { run: zunionstore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zinterstore",
        -4,
        flags::WRITE | flags::DENYOOM,
        acl::SORTEDSET,
        &[
            KeySpec::single(1, kf::OW | kf::UPDATE),
            KeySpec {
                flags: kf::RO | kf::ACCESS,
                begin: BeginSearch::Index(2),
                find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
            },
        ],
        "sorted_set",
        "2.0.0",
        "Stores the intersect of multiple sorted sets in a key.",
        "O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number of input sorted sets and M being the number of elements in the resulting sorted set.",
        EngineCmd { run: zinterstore, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "zdiffstore",
        -4,
        flags::WRITE | flags::DENYOOM,
        acl::SORTEDSET,
        &[
            KeySpec::single(1, kf::OW | kf::UPDATE),
            KeySpec {
                flags: kf::RO | kf::ACCESS,
                begin: BeginSearch::Index(2),
                find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
            },
        ],
        "sorted_set",
        "6.2.0",
        "Stores the difference of multiple sorted sets in a key.",
        "O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is the size of the first set, and K is the size of the result set.",
        EngineCmd { run: zdiffstore, plan: LockPlan::Keys },
    ),
];

/// Which operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Union,
    Inter,
    Diff,
}

/// How scores of a member found in several inputs combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Aggregate {
    Sum,
    Min,
    Max,
}

impl Aggregate {
    /// `zunionInterAggregate`: a sum of `inf` and `-inf` is 0, not NaN.
    fn apply(self, target: &mut f64, v: f64) {
        match self {
            Aggregate::Sum => {
                *target += v;
                if target.is_nan() {
                    *target = 0.0;
                }
            }
            Aggregate::Min => *target = if v < *target { v } else { *target },
            Aggregate::Max => *target = if v > *target { v } else { *target },
        }
    }
}

/// One input: its members in order, an index for lookups, and its weight.
struct Source {
    items: Vec<(Vec<u8>, f64)>,
    index: HashMap<Vec<u8>, f64>,
    weight: f64,
}

/// What the caller wants back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Output<'a> {
    Reply,
    Store(&'a [u8]),
    Cardinality,
}

fn zunion(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    generic(ctx, &args, out, 1, Op::Union, Output::Reply)
}

fn zinter(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    generic(ctx, &args, out, 1, Op::Inter, Output::Reply)
}

fn zdiff(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    generic(ctx, &args, out, 1, Op::Diff, Output::Reply)
}

fn zintercard(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    generic(ctx, &args, out, 1, Op::Inter, Output::Cardinality)
}

fn zunionstore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    generic(ctx, &args, out, 2, Op::Union, Output::Store(args.get(1)))
}

fn zinterstore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    generic(ctx, &args, out, 2, Op::Inter, Output::Store(args.get(1)))
}

fn zdiffstore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    generic(ctx, &args, out, 2, Op::Diff, Output::Store(args.get(1)))
}

/// Reads input `key`: a sorted set, a set (scores 1), or nothing; another type is WRONGTYPE.
fn load(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Vec<(Vec<u8>, f64)>, CommandError> {
    let Some(k) = ctx.read(key)? else { return Ok(Vec::new()) };
    match k.value() {
        ValueRef::Obj(Object::ZSet(z)) => Ok(z.iter().iter().map(|(m, s)| (m.to_vec(), *s)).collect()),
        ValueRef::Obj(o) => match o.set_members() {
            Some(members) => Ok(members.into_iter().map(|m| (m, 1.0)).collect()),
            None => Err(CommandError::WrongType),
        },
        ValueRef::Str(_) => Err(CommandError::WrongType),
    }
}

/// `zunionInterDiffGenericCommand`; `numkeys_idx` is the index of numkeys.
fn generic(
    ctx: &mut Ctx<'_>,
    args: &Args<'_>,
    out: &mut ReplyBuf,
    numkeys_idx: usize,
    op: Op,
    output: Output<'_>,
) -> CmdResult {
    let setnum = int_arg(args.get(numkeys_idx))?;
    if setnum < 1 {
        let name = String::from_utf8_lossy(args.get(0)).to_ascii_lowercase();
        return Err(CommandError::err(format!("at least 1 input key is needed for '{name}' command")));
    }
    let first = numkeys_idx + 1;
    let setnum = usize::try_from(setnum).ok().filter(|&n| n <= args.len() - first).ok_or(CommandError::Syntax)?;
    // Valkey reads (and type-checks) every input before it parses the options.
    let mut sources = Vec::with_capacity(setnum);
    for i in 0..setnum {
        let items = load(ctx, args.get(first + i))?;
        sources.push(Source { items, index: HashMap::new(), weight: 1.0 });
    }
    let card = output == Output::Cardinality;
    let (mut aggregate, mut withscores, mut limit) = (Aggregate::Sum, false, 0usize);
    let mut j = first + setnum;
    while j < args.len() {
        let (opt, remaining) = (args.get(j), args.len() - j);
        if op != Op::Diff && !card && remaining > setnum && opt.eq_ignore_ascii_case(b"weights") {
            for (i, s) in sources.iter_mut().enumerate() {
                s.weight = hotkv_protocol::parse_double(args.get(j + 1 + i))
                    .ok_or_else(|| CommandError::err("weight value is not a float"))?;
            }
            j += 1 + setnum;
        } else if op != Op::Diff && !card && remaining >= 2 && opt.eq_ignore_ascii_case(b"aggregate") {
            aggregate = match args.get(j + 1).to_ascii_lowercase().as_slice() {
                b"sum" => Aggregate::Sum,
                b"min" => Aggregate::Min,
                b"max" => Aggregate::Max,
                _ => return Err(CommandError::Syntax),
            };
            j += 2;
        } else if output == Output::Reply && opt.eq_ignore_ascii_case(b"withscores") {
            withscores = true;
            j += 1;
        } else if card && remaining >= 2 && opt.eq_ignore_ascii_case(b"limit") {
            limit = positive_arg(args.get(j + 1), Some("LIMIT can't be negative"))? as usize;
            j += 2;
        } else {
            return Err(CommandError::Syntax);
        }
    }
    if op != Op::Diff {
        // Smallest first: an intersection walks the smallest input and probes the others.
        sources.sort_by_key(|s| s.items.len());
    }
    for s in sources.iter_mut().skip(1) {
        s.index = s.items.iter().cloned().collect();
    }
    let mut result = match op {
        Op::Union => union(&sources, aggregate),
        Op::Inter => inter(&sources, aggregate, if card { limit } else { 0 }),
        Op::Diff => diff(&sources),
    };
    match output {
        Output::Cardinality => out.int(result.len() as i64),
        Output::Store(dst) => {
            let event = match op {
                Op::Union => "zunionstore",
                Op::Inter => "zinterstore",
                Op::Diff => "zdiffstore",
            };
            store_result(ctx, out, dst, &mut result, event)?;
        }
        Output::Reply => {
            result.sort_by(|(am, a), (bm, b)| a.total_cmp(b).then_with(|| am.cmp(bm)));
            let items: Vec<(Elem<'_>, f64)> = result.iter().map(|(m, s)| (Elem::Str(m), *s)).collect();
            reply_members(out, &items, withscores);
        }
    }
    Ok(())
}

/// A weighted score; NaN (0 times infinity) counts as 0.
fn weighted(weight: f64, score: f64) -> f64 {
    let v = weight * score;
    if v.is_nan() { 0.0 } else { v }
}

fn union(sources: &[Source], aggregate: Aggregate) -> Vec<(Vec<u8>, f64)> {
    let mut acc: HashMap<&[u8], f64> = HashMap::new();
    for s in sources {
        for (m, score) in &s.items {
            let v = weighted(s.weight, *score);
            match acc.get_mut(m.as_slice()) {
                Some(t) => aggregate.apply(t, v),
                None => {
                    acc.insert(m, v);
                }
            }
        }
    }
    acc.into_iter().map(|(m, s)| (m.to_vec(), s)).collect()
}

/// Members of the first (smallest) input found in all others; stops after `limit` members
/// when non-zero (ZINTERCARD LIMIT).
fn inter(sources: &[Source], aggregate: Aggregate, limit: usize) -> Vec<(Vec<u8>, f64)> {
    let mut out = Vec::new();
    let Some((first, rest)) = sources.split_first() else { return out };
    'members: for (m, score) in &first.items {
        let mut acc = weighted(first.weight, *score);
        for s in rest {
            // Valkey only resets NaN for the first input; a later weight product may be NaN
            // and then aggregates as such.
            let Some(v) = s.index.get(m) else { continue 'members };
            aggregate.apply(&mut acc, v * s.weight);
        }
        out.push((m.clone(), acc));
        if limit > 0 && out.len() >= limit {
            break;
        }
    }
    out
}

fn diff(sources: &[Source]) -> Vec<(Vec<u8>, f64)> {
    let Some((first, rest)) = sources.split_first() else { return Vec::new() };
    first.items.iter().filter(|(m, _)| !rest.iter().any(|s| s.index.contains_key(m))).cloned().collect()
}

#[cfg(test)]
mod tests {
    use crate::testkit::arr;
    use hotkv_protocol::Protocol;

    use crate::testkit::TestKit;

    fn setup() -> TestKit {
        let mut t = TestKit::default();
        t.run(&["ZADD", "{s}1", "1", "a", "2", "b", "3", "c"]);
        t.run(&["ZADD", "{s}2", "10", "b", "20", "c", "30", "d"]);
        t
    }

    #[test]
    fn union_inter_diff() {
        let mut t = setup();
        assert_eq!(
            t.run(&["ZUNION", "2", "{s}1", "{s}2", "WITHSCORES"]),
            arr(&["a", "1", "b", "12", "c", "23", "d", "30"])
        );
        assert_eq!(t.run(&["ZINTER", "2", "{s}1", "{s}2", "WITHSCORES"]), arr(&["b", "12", "c", "23"]));
        assert_eq!(t.run(&["ZINTER", "2", "{s}1", "{s}2", "AGGREGATE", "MIN"]), arr(&["b", "c"]));
        assert_eq!(
            t.run(&["ZINTER", "2", "{s}1", "{s}2", "WEIGHTS", "2", "0.5", "AGGREGATE", "max", "WITHSCORES"]),
            arr(&["b", "5", "c", "10"])
        );
        assert_eq!(t.run(&["ZDIFF", "2", "{s}1", "{s}2", "WITHSCORES"]), arr(&["a", "1"]));
        assert_eq!(t.run(&["ZDIFF", "1", "{s}nope"]), "*0\r\n");
        assert_eq!(t.run(&["ZINTER", "2", "{s}1", "{s}nope"]), "*0\r\n");
        assert_eq!(t.run(&["ZINTERCARD", "2", "{s}1", "{s}2"]), ":2\r\n");
        assert_eq!(t.run(&["ZINTERCARD", "2", "{s}1", "{s}2", "LIMIT", "1"]), ":1\r\n");
        assert_eq!(t.run(&["ZINTERCARD", "2", "{s}1", "{s}2", "LIMIT", "-1"]), "-ERR LIMIT can't be negative\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["ZDIFF", "2", "{s}1", "{s}2", "WITHSCORES"]), "*1\r\n*2\r\n$1\r\na\r\n,1\r\n");
    }

    #[test]
    fn infinities_and_nan_aggregation() {
        let mut t = TestKit::default();
        t.run(&["ZADD", "{s}a", "inf", "x"]);
        t.run(&["ZADD", "{s}b", "-inf", "x"]);
        assert_eq!(t.run(&["ZUNION", "2", "{s}a", "{s}b", "WITHSCORES"]), arr(&["x", "0"]), "inf + -inf = 0");
        assert_eq!(t.run(&["ZUNION", "1", "{s}a", "WEIGHTS", "0", "WITHSCORES"]), arr(&["x", "0"]), "inf * 0 = 0");
        assert_eq!(t.run(&["ZINTER", "2", "{s}a", "{s}b", "AGGREGATE", "MAX", "WITHSCORES"]), arr(&["x", "inf"]));
    }

    #[test]
    fn store_forms() {
        let mut t = setup();
        t.events.take();
        assert_eq!(t.run(&["ZUNIONSTORE", "{s}d", "2", "{s}1", "{s}2"]), ":4\r\n");
        assert_eq!(
            t.run(&["ZRANGE", "{s}d", "0", "-1", "WITHSCORES"]),
            arr(&["a", "1", "b", "12", "c", "23", "d", "30"])
        );
        assert_eq!(t.run(&["ZINTERSTORE", "{s}d", "2", "{s}1", "{s}2", "WEIGHTS", "1", "0"]), ":2\r\n");
        assert_eq!(t.run(&["ZRANGE", "{s}d", "0", "-1", "WITHSCORES"]), arr(&["b", "2", "c", "3"]));
        assert_eq!(t.run(&["ZDIFFSTORE", "{s}d", "1", "{s}2"]), ":3\r\n");
        assert_eq!(
            t.events.take(),
            ["n:new:{s}d@0", "z:zunionstore:{s}d@0", "z:zinterstore:{s}d@0", "z:zdiffstore:{s}d@0"]
        );
        assert_eq!(t.run(&["ZINTERSTORE", "{s}d", "2", "{s}1", "{s}none"]), ":0\r\n");
        assert_eq!(t.events.take(), ["m:keymiss:{s}none@0", "g:del:{s}d@0"]);
        assert_eq!(t.run(&["EXISTS", "{s}d"]), ":0\r\n");
        assert_eq!(t.run(&["ZUNIONSTORE", "{s}1", "2", "{s}1", "{s}1"]), ":3\r\n", "the destination may be an input");
        assert_eq!(t.run(&["ZSCORE", "{s}1", "c"]), "$1\r\n6\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "{s}1"]), "$8\r\nlistpack\r\n");
    }

    #[test]
    fn argument_errors() {
        let mut t = setup();
        assert_eq!(t.run(&["ZUNION", "0", "{s}1"]), "-ERR at least 1 input key is needed for 'zunion' command\r\n");
        assert_eq!(
            t.run(&["ZUNIONSTORE", "{s}d", "0", "{s}1"]),
            "-ERR at least 1 input key is needed for 'zunionstore' command\r\n"
        );
        assert_eq!(t.run(&["ZUNION", "1", "{s}1", "WEIGHTS"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZUNION", "1", "{s}1", "WEIGHTS", "x"]), "-ERR weight value is not a float\r\n");
        assert_eq!(t.run(&["ZUNION", "1", "{s}1", "AGGREGATE", "avg"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZDIFF", "1", "{s}1", "WEIGHTS", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZUNIONSTORE", "{s}d", "1", "{s}1", "WITHSCORES"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZINTERCARD", "1", "{s}1", "WITHSCORES"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZUNION", "x", "{s}1"]), "-ERR value is not an integer or out of range\r\n");
    }
}
