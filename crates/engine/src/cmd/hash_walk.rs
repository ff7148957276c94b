//! Hash commands that walk a whole hash or sample it: HGETALL, HKEYS, HVALS, HRANDFIELD,
//! HSCAN.
//!
//! A compact hash is sampled after one pass that records where each pair starts, so every
//! random pick is O(1) afterwards; a table is sampled by position directly.

use hotkv_protocol::{Args, ReplyBuf};

use super::scan::{ElemKind, ElemScanArgs, drive_scan, parse_cursor, scan_reply};
use super::{EngineCmd, LockPlan, MAX_REPEATED_PICKS, Spec, push_bulk, random_count, too_many_picks};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};
use crate::types::lpentry::Elem;
use crate::types::sample;

/// Whole-hash command rows.
pub static COMMANDS: &[Spec] = &[
    row(
        "hgetall",
        2,
        flags::READONLY,
        "2.0.0",
        "Returns all fields and values in a hash.",
        "O(N) where N is the size of the hash.",
        hgetall,
    )
    .with_tips(&["nondeterministic_output_order"]),
    row(
        "hkeys",
        2,
        flags::READONLY,
        "2.0.0",
        "Returns all fields in a hash.",
        "O(N) where N is the size of the hash.",
        hkeys,
    )
    .with_tips(&["nondeterministic_output_order"]),
    row(
        "hvals",
        2,
        flags::READONLY,
        "2.0.0",
        "Returns all values in a hash.",
        "O(N) where N is the size of the hash.",
        hvals,
    )
    .with_tips(&["nondeterministic_output_order"]),
    row(
        "hrandfield",
        -2,
        flags::READONLY,
        "6.2.0",
        "Returns one or more random fields from a hash.",
        "O(N) where N is the number of fields returned",
        hrandfield,
    )
    .with_tips(&["nondeterministic_output"]),
    row(
        "hscan",
        -3,
        flags::READONLY,
        "2.8.0",
        "Iterates over fields and values of a hash.",
        "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to \
         return back to 0. N is the number of elements inside the collection.",
        hscan,
    )
    .with_tips(&["nondeterministic_output"]),
];

/// A row of a read-only hash command on the key at argument 1.
const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(
        name,
        arity,
        flags,
        acl::HASH,
        RO_ACCESS,
        "hash",
        since,
        summary,
        complexity,
        EngineCmd { run, plan: LockPlan::Keys },
    )
}

const RO_ACCESS: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];

/// What HGETALL, HKEYS and HVALS return of each pair.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Parts {
    Both,
    Fields,
    Values,
}

fn hgetall(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    get_all(ctx, args.get(1), Parts::Both, out)
}

fn hkeys(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    get_all(ctx, args.get(1), Parts::Fields, out)
}

fn hvals(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    get_all(ctx, args.get(1), Parts::Values, out)
}

/// Valkey's `genericHgetallCommand`: a map of pairs (a flat array in RESP2), or an array of
/// fields or values.
fn get_all(ctx: &mut Ctx<'_>, key: &[u8], parts: Parts, out: &mut ReplyBuf) -> CmdResult {
    let Some(k) = ctx.read(key)? else {
        if parts == Parts::Both {
            out.map(0)
        } else {
            out.array(0)
        }
        return Ok(());
    };
    let h = k.hash()?;
    if parts == Parts::Both {
        out.map(h.len())
    } else {
        out.array(h.len())
    }
    for (f, v) in h.iter() {
        if parts != Parts::Values {
            f.reply(out);
        }
        if parts != Parts::Fields {
            v.reply(out);
        }
    }
    Ok(())
}

fn hrandfield(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    if args.len() == 2 {
        let Some(k) = ctx.read(args.get(1))? else {
            out.null();
            return Ok(());
        };
        match k.hash()?.random() {
            Some((f, _)) => f.reply(out),
            None => out.null(),
        }
        return Ok(());
    }
    let count = random_count(args.get(2))?;
    let with_values = match args.opt(3) {
        None => false,
        Some(opt) if args.len() == 4 && opt.eq_ignore_ascii_case(b"withvalues") => true,
        Some(_) => return Err(CommandError::Syntax),
    };
    // The reply holds two bulk strings per pick with values: Valkey bounds the count by half.
    if with_values && !(-(i64::MAX / 2)..=i64::MAX / 2).contains(&count) {
        return Err(CommandError::err("value is out of range"));
    }
    let Some(k) = ctx.read(args.get(1))? else {
        out.array(0);
        return Ok(());
    };
    let h = k.hash()?;
    let resp3 = out.is_resp3();
    let emit = |out: &mut ReplyBuf, (f, v): (Elem<'_>, Elem<'_>)| {
        if with_values && resp3 {
            out.array(2);
        }
        f.reply(out);
        if with_values {
            v.reply(out);
        }
    };
    let reply_len = |n: usize| if with_values && !resp3 { 2 * n } else { n };
    if count == 0 {
        out.array(0);
        return Ok(());
    }
    // A negative count repeats picks; 1 needs no uniqueness either.
    if count < 0 || count == 1 {
        let n = count.unsigned_abs();
        if n > MAX_REPEATED_PICKS && !out.is_limited() {
            return Err(too_many_picks());
        }
        let ix = h.indexed();
        out.array(reply_len(n as usize));
        for _ in 0..n {
            // The client is being closed for its output limit: the rest would be dropped.
            if out.limit_passed() {
                break;
            }
            emit(out, ix.get(sample::below(ix.len())));
        }
        return Ok(());
    }
    let count = count as u64;
    if count >= h.len() as u64 {
        out.array(reply_len(h.len()));
        h.iter().for_each(|p| emit(out, p));
        return Ok(());
    }
    let ix = h.indexed();
    out.array(reply_len(count as usize));
    for i in sample::distinct(ix.len(), count as usize) {
        emit(out, ix.get(i));
    }
    Ok(())
}

fn hscan(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let cursor = parse_cursor(args.get(2)).ok_or_else(|| CommandError::err("invalid cursor"))?;
    let Some(k) = ctx.read(args.get(1))? else {
        scan_reply(out, 0, 0, &[]);
        return Ok(());
    };
    let h = k.hash()?;
    let opts = ElemScanArgs::parse(&args, ElemKind::Hash)?;
    let (mut buf, mut n) = (Vec::new(), 0);
    let next = drive_scan(cursor, opts.count, |c, sampled| {
        h.scan(c, |f, v| {
            *sampled += 1;
            if !f.with_bytes(|f| opts.matches(f)) {
                return;
            }
            f.with_bytes(|f| push_bulk(&mut buf, f));
            n += 1;
            if !opts.only_keys {
                v.with_bytes(|v| push_bulk(&mut buf, v));
                n += 1;
            }
        })
    });
    scan_reply(out, next, n, &buf);
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, BTreeSet, HashMap};

    use hotkv_protocol::Protocol;

    use crate::testkit::{Resp, TestKit};

    fn strings(r: &Resp) -> Vec<String> {
        r.items().iter().map(|x| x.text().to_string()).collect()
    }

    fn encoding(t: &mut TestKit, key: &str) -> String {
        Resp::parse(&t.run(&["OBJECT", "ENCODING", key])).text().to_string()
    }

    #[test]
    fn hgetall_hkeys_hvals_in_both_protocols() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["HGETALL", "nokey"]), "*0\r\n");
        assert_eq!(t.run(&["HKEYS", "nokey"]), "*0\r\n");
        t.run(&["HSET", "h", "a", "1", "b", "xyz"]);
        assert_eq!(t.run(&["HGETALL", "h"]), "*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\nxyz\r\n");
        assert_eq!(t.run(&["HKEYS", "h"]), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(t.run(&["HVALS", "h"]), "*2\r\n$1\r\n1\r\n$3\r\nxyz\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["HGETALL", "h"]), "%2\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$3\r\nxyz\r\n");
        assert_eq!(t.run(&["HGETALL", "nokey"]), "%0\r\n");
        assert_eq!(t.run(&["HKEYS", "nokey"]), "*0\r\n");
        assert_eq!(t.run(&["HVALS", "h"]), "*2\r\n$1\r\n1\r\n$3\r\nxyz\r\n");
    }

    #[test]
    fn hrandfield_edge_cases() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["HRANDFIELD", "nokey"]), "$-1\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "nokey", "100"]), "*0\r\n");
        t.run(&["HSET", "h", "a", "1"]);
        assert_eq!(t.run(&["HRANDFIELD", "h"]), "$1\r\na\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "h", "0"]), "*0\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "h", "-3"]), "*3\r\n$1\r\na\r\n$1\r\na\r\n$1\r\na\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "h", "5", "WITHVALUES"]), "*2\r\n$1\r\na\r\n$1\r\n1\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "h", "1", "bogus"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "h", "1", "withvalues", "x"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "h", "x"]), "-ERR value is not an integer or out of range\r\n");
        for argv in [
            &["HRANDFIELD", "h", "-9223372036854770000", "WITHVALUES"][..],
            &["HRANDFIELD", "h", "-9223372036854775808", "WITHVALUES"],
            &["HRANDFIELD", "h", "-9223372036854775808"],
            &["HRANDFIELD", "h", "-9223372036854775807"],
        ] {
            assert!(t.run(argv).starts_with("-ERR value is out of range"), "{argv:?}");
        }
        assert!(
            t.run(&["HRANDFIELD", "h", "9223372036854775807"]).starts_with("*1\r\n"),
            "huge positive: the whole hash"
        );
        t.proto = Protocol::Resp3;
        assert_eq!(
            t.run(&["HRANDFIELD", "h", "-2", "WITHVALUES"]),
            "*2\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n*2\r\n$1\r\na\r\n$1\r\n1\r\n"
        );
        assert_eq!(t.run(&["HRANDFIELD", "h", "1"]), "*1\r\n$1\r\na\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "nokey", "1", "WITHVALUES"]), "*0\r\n");
        assert_eq!(t.run(&["HRANDFIELD", "nokey"]), "_\r\n");
    }

    #[test]
    fn hrandfield_samples_fairly_in_both_encodings() {
        for big in [false, true] {
            let mut t = TestKit::default();
            if big {
                t.cfg.hash_max_listpack_entries = 0;
            }
            for i in 0..10 {
                t.run(&["HSET", "h", &format!("f{i}"), &i.to_string()]);
            }
            assert_eq!(encoding(&mut t, "h"), if big { "hashtable" } else { "listpack" });
            // Repeated picks: every field about 1000 times out of 10000.
            let mut hits: HashMap<String, u32> = HashMap::new();
            for f in strings(&Resp::parse(&t.run(&["HRANDFIELD", "h", "-10000"]))) {
                *hits.entry(f).or_default() += 1;
            }
            assert_eq!(hits.len(), 10);
            assert!(hits.values().all(|&n| (700..1300).contains(&n)), "{hits:?}");
            // Distinct picks: no repeats, values belong to their fields.
            for count in [1, 3, 9, 10] {
                let r = Resp::parse(&t.run(&["HRANDFIELD", "h", &count.to_string(), "WITHVALUES"]));
                let flat = strings(&r);
                assert_eq!(flat.len(), 2 * count);
                let fields: BTreeSet<&String> = flat.iter().step_by(2).collect();
                assert_eq!(fields.len(), count);
                for pair in flat.chunks(2) {
                    assert_eq!(format!("f{}", pair[1]), pair[0]);
                }
            }
            // Single picks cover every field eventually.
            let mut seen = BTreeSet::new();
            for _ in 0..300 {
                seen.insert(Resp::parse(&t.run(&["HRANDFIELD", "h"])).text().to_string());
            }
            assert_eq!(seen.len(), 10);
        }
    }

    #[test]
    fn hscan_compact_hashes_in_one_call() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["HSCAN", "nokey", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
        assert_eq!(t.run(&["HSCAN", "nokey", "0", "BOGUS"]), "*2\r\n$1\r\n0\r\n*0\r\n", "options parsed after lookup");
        t.run(&["HSET", "h", "a", "1", "b", "2", "ab", "3"]);
        assert_eq!(
            t.run(&["HSCAN", "h", "0"]),
            "*2\r\n$1\r\n0\r\n*6\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n$2\r\nab\r\n$1\r\n3\r\n"
        );
        assert_eq!(
            t.run(&["HSCAN", "h", "0", "MATCH", "a*", "NOVALUES"]),
            "*2\r\n$1\r\n0\r\n*2\r\n$1\r\na\r\n$2\r\nab\r\n"
        );
        assert_eq!(t.run(&["HSCAN", "h", "123", "COUNT", "1"]).len(), t.run(&["HSCAN", "h", "0"]).len(), "any cursor");
        assert_eq!(t.run(&["HSCAN", "h", "x"]), "-ERR invalid cursor\r\n");
        assert_eq!(t.run(&["HSCAN", "h", "0", "COUNT", "0"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["HSCAN", "h", "0", "COUNT", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["HSCAN", "h", "0", "MATCH"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["HSCAN", "h", "0", "TYPE", "hash"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["HSCAN", "h", "0", "NOSCORES"]), "-ERR NOSCORES option can only be used in ZSCAN\r\n");
    }

    #[test]
    fn hscan_walks_a_table_in_steps() {
        let mut t = TestKit::default();
        t.cfg.hash_max_listpack_entries = 16;
        let mut want = BTreeMap::new();
        for i in 0..1000 {
            t.run(&["HSET", "h", &format!("field:{i}"), &i.to_string()]);
            want.insert(format!("field:{i}"), i.to_string());
        }
        let first = Resp::parse(&t.run(&["HSCAN", "h", "0"]));
        assert_ne!(first.items()[0].text(), "0", "a table is walked in several calls");
        let flat = hscan_all(&mut t, "h", &["COUNT", "7"]);
        let got: BTreeMap<String, String> = flat.chunks(2).map(|p| (p[0].clone(), p[1].clone())).collect();
        assert_eq!(got, want);
        let keys = hscan_all(&mut t, "h", &["MATCH", "field:1??", "NOVALUES", "COUNT", "100"]);
        assert_eq!(keys.into_iter().collect::<BTreeSet<_>>().len(), 100);
    }

    fn hscan_all(t: &mut TestKit, key: &str, extra: &[&str]) -> Vec<String> {
        let mut cursor = "0".to_string();
        let mut all = Vec::new();
        loop {
            let mut argv = vec!["HSCAN", key, cursor.as_str()];
            argv.extend_from_slice(extra);
            let r = Resp::parse(&t.run(&argv));
            all.extend(strings(&r.items()[1]));
            cursor = r.items()[0].text().to_string();
            if cursor == "0" {
                return all;
            }
        }
    }
}
