//! Sorted set sampling and iteration: ZRANDMEMBER and ZSCAN.

use hotkv_protocol::{Args, ReplyBuf};

use super::list::range_arg;
use super::{EngineCmd, LockPlan, Spec, int_arg, push_bulk};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::glob;
use crate::policy::random_u64;
use crate::types::zset::ZSet;

/// ZRANDMEMBER and ZSCAN rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new("zrandmember", -2, flags::READONLY, acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set", "6.2.0", "Returns one or more random members from a sorted set.",
        "O(N) where N is the number of members returned",
        EngineCmd { run: zrandmember, plan: LockPlan::Keys })
        .with_tips(&["nondeterministic_output"]),
    CommandSpec::new("zscan", -3, flags::READONLY, acl::SORTEDSET,
        &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "sorted_set", "2.8.0", "Iterates over members and scores of a sorted set.",
        "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to return back to 0. N is the number of elements inside the collection.",
        EngineCmd { run: zscan, plan: LockPlan::Keys })
        .with_tips(&["nondeterministic_output"]),
];

fn zrandmember(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(count) = args.opt(2) else {
        let Some(k) = ctx.read(args.get(1))? else {
            out.null();
            return Ok(());
        };
        let z = k.zset()?;
        let pick = random_u64() as usize % z.len();
        z.range(pick, 1, false)[0].0.reply(out);
        return Ok(());
    };
    let count = range_arg(count, -i64::MAX, i64::MAX, None)?;
    let withscores = match args.opt(3) {
        _ if args.len() > 4 => return Err(CommandError::Syntax),
        Some(o) if o.eq_ignore_ascii_case(b"withscores") => true,
        Some(_) => return Err(CommandError::Syntax),
        None => false,
    };
    if withscores && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err(CommandError::err("value is out of range"));
    }
    let Some(k) = ctx.read(args.get(1))? else {
        out.array(0);
        return Ok(());
    };
    let z = k.zset()?;
    let len = z.len();
    let pairs = withscores && out.is_resp3();
    let emit = |out: &mut ReplyBuf, r: usize| {
        let (m, s) = z.range(r, 1, false)[0];
        if pairs {
            out.array(2);
        }
        m.reply(out);
        if withscores {
            out.double(s);
        }
    };
    let header = |out: &mut ReplyBuf, n: usize| out.array(if withscores && !pairs { 2 * n } else { n });
    if count < 0 {
        // Repeats allowed: independent picks, streamed (a huge count is bounded by the
        // client's output buffer limit, as in Valkey, not by a list built here).
        let n = count.unsigned_abs() as usize;
        header(out, n);
        for _ in 0..n {
            if out.limit_passed() {
                break;
            }
            emit(out, random_u64() as usize % len);
        }
        return Ok(());
    }
    // The whole set comes highest first: Valkey walks sorted-set sources from the tail.
    let ranks = if count as usize >= len { (0..len).rev().collect() } else { distinct_sample(len, count as usize) };
    header(out, ranks.len());
    for r in ranks {
        emit(out, r);
    }
    Ok(())
}

/// `n` distinct ranks out of `len` in random order (partial Fisher-Yates over the smaller
/// side, so a sample close to the whole set costs no more than the set).
fn distinct_sample(len: usize, n: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..len).collect();
    for i in 0..n {
        let j = i + random_u64() as usize % (len - i);
        all.swap(i, j);
    }
    all.truncate(n);
    all
}

fn zscan(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let cursor = super::scan::parse_cursor(args.get(2)).ok_or_else(|| CommandError::err("invalid cursor"))?;
    let Some(k) = ctx.read(args.get(1))? else {
        out.array(2);
        out.bulk(b"0");
        out.array(0);
        return Ok(());
    };
    let z = k.zset()?;
    let (mut count, mut pattern, mut noscores) = (10i64, None, false);
    let mut i = 3;
    while i < args.len() {
        let (opt, more) = (args.get(i), args.len() - i >= 2);
        if opt.eq_ignore_ascii_case(b"count") && more {
            count = int_arg(args.get(i + 1))?;
            if count < 1 {
                return Err(CommandError::Syntax);
            }
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"match") && more {
            pattern = Some(args.get(i + 1)).filter(|p| *p != b"*");
            i += 2;
        } else if opt.eq_ignore_ascii_case(b"noscores") {
            noscores = true;
            i += 1;
        } else if opt.eq_ignore_ascii_case(b"novalues") {
            return Err(CommandError::err("NOVALUES option can only be used in HSCAN"));
        } else {
            return Err(CommandError::Syntax);
        }
    }
    let mut buf = Vec::new();
    let mut n = 0;
    let mut emit = |m: &[u8], score: &[u8]| {
        if pattern.is_some_and(|p| !glob::matches(p, m, false)) {
            return;
        }
        push_bulk(&mut buf, m);
        n += 1;
        if !noscores {
            push_bulk(&mut buf, score);
            n += 1;
        }
    };
    let next = match z {
        // A listpack is returned whole, its scores as stored (Valkey does the same).
        ZSet::Packed(lp) => {
            let mut p = lp.first();
            while let Some(m) = p {
                let Some(sp) = lp.next(m) else { break };
                lp.get(m).with_bytes(|mb| lp.get(sp).with_bytes(|sb| emit(mb, sb)));
                p = lp.next(sp);
            }
            0
        }
        ZSet::Skip(s) => {
            let (next, items) = s.scan(cursor, count as usize);
            for (m, score) in items {
                emit(m, format_g17(score).as_bytes());
            }
            next
        }
    };
    out.array(2);
    out.bulk(itoa::Buffer::new().format(next).as_bytes());
    out.array(n);
    out.raw(&buf);
    Ok(())
}

/// `%.17g`, as Valkey's `ld2string(LD_STR_AUTO)` prints skip-list scores in ZSCAN.
fn format_g17(v: f64) -> String {
    if v.is_infinite() {
        return if v > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    let sci = format!("{v:.16e}");
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if !(-4..17).contains(&exp) {
        let mant = mant.trim_end_matches('0').trim_end_matches('.');
        return format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    let decimals = (16 - exp).max(0) as usize;
    let fixed = format!("{v:.decimals$}");
    if fixed.contains('.') { fixed.trim_end_matches('0').trim_end_matches('.').to_string() } else { fixed }
}

#[cfg(test)]
mod tests {
    use hotkv_protocol::Protocol;

    use super::format_g17;
    use crate::testkit::TestKit;

    #[test]
    fn zrandmember() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["ZRANDMEMBER", "nope"]), "$-1\r\n");
        assert_eq!(t.run(&["ZRANDMEMBER", "nope", "5"]), "*0\r\n");
        t.run(&["ZADD", "z", "1", "a", "2", "b", "3", "c"]);
        assert!(["$1\r\na\r\n", "$1\r\nb\r\n", "$1\r\nc\r\n"].contains(&t.run(&["ZRANDMEMBER", "z"]).as_str()));
        assert_eq!(t.run(&["ZRANDMEMBER", "z", "0"]), "*0\r\n");
        assert_eq!(t.run(&["ZRANDMEMBER", "z", "10"]), "*3\r\n$1\r\nc\r\n$1\r\nb\r\n$1\r\na\r\n");
        assert_eq!(t.run(&["ZRANDMEMBER", "z", "9223372036854775807"]).lines().next(), Some("*3"));
        let two = t.run(&["ZRANDMEMBER", "z", "2", "WITHSCORES"]);
        assert!(two.starts_with("*4\r\n"));
        let neg = t.run(&["ZRANDMEMBER", "z", "-7"]);
        assert_eq!(neg.matches("\r\n$1\r\n").count() + 1, 8, "{neg}");
        assert_eq!(
            t.run(&["ZRANDMEMBER", "z", "-9223372036854770000", "WITHSCORES"]),
            "-ERR value is out of range\r\n"
        );
        assert!(t.run(&["ZRANDMEMBER", "z", "-9223372036854775808"]).starts_with("-ERR value is out of range"));
        assert_eq!(t.run(&["ZRANDMEMBER", "z", "1", "WITHSCORE"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZRANDMEMBER", "z", "1", "WITHSCORES", "x"]), "-ERR syntax error\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["ZRANDMEMBER", "z", "-1", "WITHSCORES"]).lines().next(), Some("*1"));
        assert!(t.run(&["ZRANDMEMBER", "z", "-1", "WITHSCORES"]).contains("*2\r\n$1\r\n"));
    }

    #[test]
    fn zscan_both_encodings() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["ZSCAN", "nope", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
        t.run(&["ZADD", "z", "1", "a", "1.5", "b", "2", "c"]);
        assert_eq!(
            t.run(&["ZSCAN", "z", "0"]),
            "*2\r\n$1\r\n0\r\n*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\n1.5\r\n$1\r\nc\r\n$1\r\n2\r\n"
        );
        assert_eq!(t.run(&["ZSCAN", "z", "0", "MATCH", "b*", "NOSCORES"]), "*2\r\n$1\r\n0\r\n*1\r\n$1\r\nb\r\n");
        assert_eq!(t.run(&["ZSCAN", "z", "x"]), "-ERR invalid cursor\r\n");
        assert_eq!(t.run(&["ZSCAN", "z", "0", "COUNT", "0"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["ZSCAN", "z", "0", "NOVALUES"]), "-ERR NOVALUES option can only be used in HSCAN\r\n");
        for i in 0..300 {
            t.run(&["ZADD", "big", &format!("{}.1", i), &format!("m{i}")]);
        }
        let mut cursor = "0".to_string();
        let mut seen = std::collections::BTreeSet::new();
        loop {
            let r = t.run(&["ZSCAN", "big", &cursor, "COUNT", "7"]);
            let lines: Vec<&str> = r.split("\r\n").collect();
            cursor = lines[2].to_string();
            let n: usize = lines[3][1..].parse().unwrap();
            for i in (0..n).step_by(2) {
                seen.insert((lines[5 + 2 * i].to_string(), lines[7 + 2 * i].to_string()));
            }
            // Members removed and re-added mid-scan keep being found.
            t.run(&["ZINCRBY", "big", "1000", "m5"]);
            if cursor == "0" {
                break;
            }
        }
        assert_eq!(seen.iter().map(|(m, _)| m.clone()).collect::<std::collections::BTreeSet<_>>().len(), 300);
        assert!(seen.contains(&("m7".to_string(), "7.0999999999999996".to_string())), "%.17g scores");
    }

    #[test]
    fn g17_formatting() {
        assert_eq!(format_g17(1.0), "1");
        assert_eq!(format_g17(1.5), "1.5");
        assert_eq!(format_g17(0.1), "0.10000000000000001");
        assert_eq!(format_g17(-2.5e-7), "-2.4999999999999999e-07");
        assert_eq!(format_g17(1e20), "1e+20");
        assert_eq!(format_g17(123456789.0), "123456789");
        assert_eq!(format_g17(f64::NEG_INFINITY), "-inf");
    }
}
