//! HyperLogLog commands: PFADD, PFCOUNT, PFMERGE, PFDEBUG and PFSELFTEST. The sketch format
//! and algorithms live in [`crate::hll`]; this file finds keys, checks types and keeps the
//! cached cardinality and notifications the way Valkey's `hyperloglog.c` does.

use hotkv_protocol::{Args, ReplyBuf};

use super::bitops::raw_mut;
use super::{EngineCmd, LockPlan, Spec};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, KeyMut, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::hll::{self, Encoding, REGISTERS};
use crate::object::Object;

/// HyperLogLog command rows.
pub static COMMANDS: &[Spec] = &[
    row(
        "pfadd",
        -2,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "Adds elements to a HyperLogLog key. Creates the key if it doesn't exist.",
        "O(1) to add every element.",
        pfadd,
    ),
    // A read that may rewrite the cached cardinality: RW key, and it may replicate.
    row(
        "pfcount",
        -2,
        flags::READONLY | flags::MAY_REPLICATE,
        &[KeySpec::range(1, -1, 1, kf::RW | kf::ACCESS)],
        "Returns the approximated cardinality of the set(s) observed by the HyperLogLog key(s).",
        "O(1) with a very small average constant time when called with a single key. O(N) with N being the number \
         of keys, and much bigger constant times, when called with multiple keys.",
        pfcount,
    ),
    row(
        "pfmerge",
        -2,
        flags::WRITE | flags::DENYOOM,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::INSERT), KeySpec::range(2, -1, 1, kf::RO | kf::ACCESS)],
        "Merges one or more HyperLogLog values into a single key.",
        "O(N) to merge N HyperLogLogs, but with high constant times.",
        pfmerge,
    ),
    row(
        "pfdebug",
        3,
        flags::WRITE | flags::DENYOOM | flags::ADMIN,
        &[KeySpec::single(2, kf::RW | kf::ACCESS)],
        "Internal commands for debugging HyperLogLog values.",
        "N/A",
        pfdebug,
    ),
    row("pfselftest", 1, flags::ADMIN, &[], "An internal command for testing HyperLogLog values.", "N/A", pfselftest),
];

/// A row of a HyperLogLog command: the HYPERLOGLOG ACL category and group, all since 2.8.9.
const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(
        name,
        arity,
        flags,
        acl::HYPERLOGLOG,
        keys,
        "hyperloglog",
        "2.8.9",
        summary,
        complexity,
        EngineCmd { run, plan: LockPlan::Keys },
    )
}

/// PFSELFTEST's sizes, as Redis's `HLL_TEST_CYCLES` and its element count.
const SELFTEST_CYCLES: u32 = 1000;
const SELFTEST_ELEMENTS: u64 = 10_000_000;

fn pfadd(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let sparse_max = ctx.cfg.hll_sparse_max_bytes;
    let elements = args.iter().skip(2);
    let updated = match ctx.write(key)? {
        Some(mut k) => {
            hll::check(k.str()?)?;
            let v = raw_mut(&mut k)?;
            let mut updated = 0u64;
            for e in elements {
                updated += u64::from(hll::add(v, e, sparse_max)?);
            }
            if updated > 0 {
                hll::invalidate(v);
                ctx.modified(key);
            }
            updated
        }
        None => {
            let mut v = hll::new_sparse();
            // Creating the key counts as an update, so even `PFADD key` marks the (empty)
            // sketch's cache stale, byte for byte as Redis does.
            let mut updated = 1u64;
            for e in elements {
                updated += u64::from(hll::add(&mut v, e, sparse_max)?);
            }
            hll::invalidate(&mut v);
            ctx.set(key, NewValue::Object(Object::Str(v)), Ttl::Clear)?;
            updated
        }
    };
    if updated > 0 {
        ctx.stats.dirty += updated - 1;
        ctx.events.notify('$', "pfadd", key, ctx.db);
    }
    out.int(i64::from(updated > 0));
    Ok(())
}

fn pfcount(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    if args.len() > 2 {
        // Several keys: the cardinality of their union, computed on a temporary sketch of
        // one byte per register; no key's cache is touched.
        let mut max = [0u8; REGISTERS];
        for key in args.iter().skip(1) {
            if let Some(k) = ctx.read(key)? {
                hll::merge_into(&mut max, checked(&k)?.0)?;
            }
        }
        out.int(hll::count_registers(&max) as i64);
        return Ok(());
    }
    let key = args.get(1);
    let Some(mut k) = ctx.read(key)? else {
        out.int(0);
        return Ok(());
    };
    let s = checked(&k)?.0;
    if let Some(card) = hll::cached(s) {
        out.int(card as i64);
        return Ok(());
    }
    let card = hll::count(s)?;
    // The cache lives in the value, so refreshing it is a (replicated) write, done in place.
    if let Some(bytes) = value_mut(&mut k) {
        hll::set_cached(bytes, card);
    }
    ctx.modified(key);
    out.int(card as i64);
    Ok(())
}

fn pfmerge(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let sparse_max = ctx.cfg.hll_sparse_max_bytes;
    // The destination is itself one of the inputs (argument 1 onwards).
    let mut max = [0u8; REGISTERS];
    let mut dense = false;
    for key in args.iter().skip(1) {
        if let Some(k) = ctx.read(key)? {
            let (s, enc) = checked(&k)?;
            dense |= enc == Encoding::Dense;
            hll::merge_into(&mut max, s)?;
        }
    }
    let dest = args.get(1);
    match ctx.write(dest)? {
        Some(mut k) => {
            store_union(raw_mut(&mut k)?, &max, dense, sparse_max)?;
            ctx.modified(dest);
        }
        None => {
            let mut v = hll::new_sparse();
            store_union(&mut v, &max, dense, sparse_max)?;
            ctx.set(dest, NewValue::Object(Object::Str(v)), Ttl::Clear)?;
        }
    }
    // A merge is a mass add, so it sends the same event as PFADD.
    ctx.events.notify('$', "pfadd", dest, ctx.db);
    out.ok();
    Ok(())
}

/// Writes merged registers into the destination sketch: dense at once when any input was
/// dense (saving a later conversion), otherwise register by register, which may promote.
fn store_union(v: &mut Vec<u8>, max: &[u8], dense: bool, sparse_max: usize) -> Result<(), CommandError> {
    if dense {
        hll::to_dense(v)?;
    }
    for (i, &m) in max.iter().enumerate() {
        if m > 0 {
            hll::set_register(v, i, m, sparse_max)?;
        }
    }
    hll::invalidate(v);
    Ok(())
}

fn pfdebug(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (sub, key) = (args.get(1), args.get(2));
    // Valkey looks the key up and checks it before it reads the subcommand.
    let Some(mut k) = ctx.write(key)? else {
        return Err(CommandError::err("The specified key does not exist"));
    };
    let enc = checked(&k)?.1;
    if sub.eq_ignore_ascii_case(b"getreg") {
        let v = raw_mut(&mut k)?;
        let converted = hll::to_dense(v)?;
        let regs = hll::dense_registers(v);
        if converted {
            // An encoding change must reach replicas, as Valkey forces with `server.dirty++`.
            ctx.stats.dirty += 1;
        }
        out.array(regs.len());
        for r in regs {
            out.int(i64::from(r));
        }
    } else if sub.eq_ignore_ascii_case(b"decode") {
        if enc != Encoding::Sparse {
            return Err(CommandError::err("HLL encoding is not sparse"));
        }
        out.bulk(hll::decode_sparse(k.str()?).as_bytes());
    } else if sub.eq_ignore_ascii_case(b"encoding") {
        out.simple(enc.name());
    } else if sub.eq_ignore_ascii_case(b"todense") {
        let converted = enc == Encoding::Sparse && hll::to_dense(raw_mut(&mut k)?)?;
        if converted {
            ctx.stats.dirty += 1;
        }
        out.int(i64::from(converted));
    } else {
        return Err(CommandError::err(format!("Unknown PFDEBUG subcommand '{}'", String::from_utf8_lossy(sub))));
    }
    Ok(())
}

fn pfselftest(ctx: &mut Ctx<'_>, _args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let seed = ctx.now_ms as u64 ^ 0x9e37_79b9_7f4a_7c15;
    hll::selftest(SELFTEST_CYCLES, SELFTEST_ELEMENTS, ctx.cfg.hll_sparse_max_bytes, seed).map_err(CommandError::err)?;
    out.ok();
    Ok(())
}

/// The string at `k` checked to be a sketch (WRONGTYPE for other types and other strings),
/// with its encoding.
fn checked<'k>(k: &'k KeyMut<'_>) -> Result<(&'k [u8], Encoding), CommandError> {
    let s = k.str()?;
    Ok((s, hll::check(s)?))
}

/// The bytes of the string at `k`, for a same-length change in place (inline or raw).
fn value_mut<'k>(k: &'k mut KeyMut<'_>) -> Option<&'k mut [u8]> {
    let e = k.entry_mut();
    if e.object_mut().is_none() {
        return e.inline_mut();
    }
    match e.object_mut() {
        Some(Object::Str(v)) => Some(v),
        _ => None,
    }
}

/// Byte-for-byte compatibility with sketches recorded from Redis 7.0.15.
#[cfg(test)]
#[path = "hll_compat.rs"]
mod compat;

#[cfg(test)]
mod tests {
    use crate::cmd::bitops::tests::non_string;
    use crate::testkit::TestKit;

    const NOT_HLL: &str = "-WRONGTYPE Key is not a valid HyperLogLog string value.\r\n";
    const CORRUPT: &str = "-INVALIDOBJ Corrupted HLL object detected\r\n";

    fn get(t: &mut TestKit, key: &str) -> Vec<u8> {
        let reply = t.run_raw(&[b"GET".to_vec(), key.into()]);
        let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
        reply[start..reply.len() - 2].to_vec()
    }

    fn int(t: &mut TestKit, argv: &[&str]) -> i64 {
        let r = t.run(argv);
        r.strip_prefix(':')
            .and_then(|r| r.strip_suffix("\r\n"))
            .and_then(|r| r.parse().ok())
            .unwrap_or_else(|| panic!("{argv:?} replied {r:?}"))
    }

    /// PFADDs `n` distinct elements named after `prefix`, 1000 per call.
    fn add_many(t: &mut TestKit, key: &str, prefix: &str, n: usize) {
        let names: Vec<String> = (0..n).map(|i| format!("{prefix}{i}")).collect();
        for chunk in names.chunks(1000) {
            let mut argv = vec!["PFADD", key];
            argv.extend(chunk.iter().map(String::as_str));
            t.run(&argv);
        }
    }

    #[test]
    fn pfadd_creates_and_reports_register_changes() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["PFADD", "hll"]), ":1\r\n", "no elements still creates the key");
        assert_eq!(t.run(&["EXISTS", "hll"]), ":1\r\n");
        assert_eq!(t.run(&["PFCOUNT", "hll"]), ":0\r\n");
        assert_eq!(t.run(&["PFADD", "hll"]), ":0\r\n");
        assert_eq!(t.run(&["PFADD", "hll", "a", "b", "c"]), ":1\r\n");
        assert_eq!(t.run(&["PFADD", "hll", "a", "b", "c"]), ":0\r\n");
        assert_eq!(t.run(&["PFADD", "hll", ""]), ":1\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "hll"]), "$3\r\nraw\r\n");
        assert_eq!(t.run(&["TYPE", "hll"]), "+string\r\n");
        assert_eq!(t.events.take(), ["n:new:hll@0", "$:pfadd:hll@0", "$:pfadd:hll@0", "$:pfadd:hll@0"]);
        t.run(&["DEL", "h2"]);
        t.stats.dirty = 0;
        t.run(&["PFADD", "h2", "x", "y"]);
        assert_eq!(t.stats.dirty, 3, "creation plus one per changed register, as Valkey counts");
        t.run(&["PFADD", "h2", "x", "z"]);
        assert_eq!(t.stats.dirty, 4);
    }

    #[test]
    fn pfcount_caches_until_a_register_changes() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["PFCOUNT", "nokey"]), ":0\r\n");
        t.run(&["PFADD", "hll", "1", "2", "3", "4", "5"]);
        assert_eq!(t.run(&["PFCOUNT", "hll"]), ":5\r\n");
        t.run(&["PFADD", "hll", "6", "7", "8", "8", "9", "10"]);
        assert_eq!(t.run(&["PFCOUNT", "hll"]), ":10\r\n");
        t.run(&["DEL", "hll"]);
        t.run(&["PFADD", "hll", "a", "b", "c"]);
        assert_eq!(get(&mut t, "hll")[15], 0x80, "stale after adds");
        t.stats.dirty = 0;
        t.run(&["PFCOUNT", "hll"]);
        assert_eq!(t.stats.dirty, 1, "refreshing the cache is a write");
        assert_eq!(&get(&mut t, "hll")[8..16], &[3, 0, 0, 0, 0, 0, 0, 0]);
        t.run(&["PFADD", "hll", "a", "b", "c"]);
        assert_eq!(get(&mut t, "hll")[15], 0, "no register changed");
        t.run(&["PFCOUNT", "hll"]);
        assert_eq!(t.stats.dirty, 1, "a valid cache is just read");
        t.run(&["PFADD", "hll", "1", "2", "3"]);
        assert_eq!(get(&mut t, "hll")[15], 0x80);
        // A cached count is trusted as Redis trusts it.
        let mut forged = get(&mut t, "hll");
        forged[8..16].copy_from_slice(&1234u64.to_le_bytes());
        t.run_bytes(&[b"SET".to_vec(), b"forged".to_vec(), forged]);
        assert_eq!(t.run(&["PFCOUNT", "forged"]), ":1234\r\n");
        // A sketch stored inline by SET gets its cache refreshed in place.
        let mut stale = get(&mut t, "hll");
        stale[15] |= 0x80;
        t.run_bytes(&[b"SET".to_vec(), b"inline".to_vec(), stale]);
        assert_eq!(t.run(&["PFCOUNT", "inline"]), ":6\r\n");
        assert_eq!(get(&mut t, "inline")[8], 6);
    }

    #[test]
    fn counts_stay_within_the_standard_error() {
        let mut t = TestKit::default();
        add_many(&mut t, "big", "element:", 100_000);
        let card = int(&mut t, &["PFCOUNT", "big"]) as f64;
        let err = (card - 100_000.0).abs() / 100_000.0;
        // 1.04 / sqrt(16384) = 0.81% is one standard error.
        assert!(err < 0.0081, "PFCOUNT {card} for 100000 elements: {:.3}% off", err * 100.0);
        // Across cardinalities, errors stay within three standard errors.
        let mut n = 0;
        for target in [10, 100, 1000, 5000, 20_000, 60_000] {
            add_many(&mut t, "steps", &format!("s{n}:"), target - n);
            n = target;
            let card = int(&mut t, &["PFCOUNT", "steps"]) as f64;
            assert!((card - n as f64).abs() <= (0.0243 * n as f64).max(1.0), "{card} for {n}");
        }
        assert_eq!(t.run(&["PFDEBUG", "ENCODING", "big"]), "+dense\r\n");
    }

    #[test]
    fn sparse_sketches_promote_at_the_configured_size() {
        let mut t = TestKit::default();
        t.run(&["PFADD", "hll", "a", "b", "c", "d", "e", "d", "g", "h", "i", "j", "k"]);
        assert_eq!(t.run(&["PFDEBUG", "ENCODING", "hll"]), "+sparse\r\n");
        t.cfg.hll_sparse_max_bytes = 30;
        t.run(&["PFADD", "hll", "new_element"]);
        assert_eq!(t.run(&["PFDEBUG", "ENCODING", "hll"]), "+dense\r\n");
        for max in [100, 500, 3000] {
            t.cfg.hll_sparse_max_bytes = max;
            t.run(&["DEL", "hll"]);
            t.run(&["PFADD", "hll"]);
            let mut n = 0;
            while t.run(&["PFDEBUG", "ENCODING", "hll"]) == "+sparse\r\n" {
                assert!(int(&mut t, &["STRLEN", "hll"]) <= max as i64);
                add_many(&mut t, "hll", &format!("{n}:"), 10);
                n += 1;
            }
            assert_eq!(t.run(&["STRLEN", "hll"]), ":12304\r\n");
        }
    }

    #[test]
    fn invalid_and_corrupt_sketches_are_refused() {
        let mut t = TestKit::default();
        t.run(&["SET", "foo", "bar"]);
        assert_eq!(t.run(&["PFADD", "foo", "1"]), NOT_HLL);
        assert_eq!(t.run(&["PFCOUNT", "foo"]), NOT_HLL);
        assert_eq!(t.run(&["PFCOUNT", "nokey", "foo"]), NOT_HLL);
        assert_eq!(t.run(&["PFMERGE", "bar", "foo"]), NOT_HLL);
        assert_eq!(t.run(&["PFMERGE", "foo", "bar"]), NOT_HLL);
        assert_eq!(t.run(&["PFDEBUG", "ENCODING", "foo"]), NOT_HLL);
        assert_eq!(t.run(&["EXISTS", "bar"]), ":0\r\n");
        let corrupt = |t: &mut TestKit, cmd: &[&str]| {
            t.run(&["DEL", "hll"]);
            t.run(&["PFADD", "hll", "a", "b", "c"]);
            t.run(cmd);
            t.run(&["PFCOUNT", "hll"])
        };
        assert_eq!(corrupt(&mut t, &["APPEND", "hll", "hello"]), CORRUPT, "additional bytes at the tail");
        assert_eq!(corrupt(&mut t, &["SETRANGE", "hll", "0", "0123"]), NOT_HLL, "broken magic");
        assert_eq!(corrupt(&mut t, &["SETRANGE", "hll", "4", "x"]), NOT_HLL, "invalid encoding");
        assert_eq!(corrupt(&mut t, &["SETRANGE", "hll", "4", "\0"]), NOT_HLL, "dense of the wrong length");
        t.run(&["DEL", "hll"]);
        t.run(&["PFADD", "hll", "a"]);
        t.run(&["APPEND", "hll", "hello"]);
        // Adds only walk up to their register, so this one succeeds, as in Redis 7.0.15.
        assert_eq!(t.run(&["PFADD", "hll", "zzz"]), ":1\r\n");
        assert_eq!(t.run(&["PFCOUNT", "hll", "nokey"]), CORRUPT);
        assert_eq!(t.run(&["PFMERGE", "dest", "hll"]), CORRUPT);
        assert_eq!(t.run(&["PFDEBUG", "GETREG", "hll"]), CORRUPT);
        assert_eq!(t.run(&["PFDEBUG", "TODENSE", "hll"]), CORRUPT);
    }

    #[test]
    fn random_corruption_is_detected_or_tolerated_never_fatal() {
        let mut t = TestKit::default();
        let mut x: u64 = 0x2545_F491_4F6C_DD1D;
        for round in 0..150 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            t.run(&["DEL", "hll"]);
            add_many(&mut t, "hll", &format!("{round}:"), (x % 3000) as usize);
            let len = int(&mut t, &["STRLEN", "hll"]) as u64;
            for i in 0..1 + x % 5 {
                let pos = (x >> (i * 8)) % len;
                let byte = vec![(x >> 20 >> i) as u8];
                t.run_bytes(&[b"SETRANGE".to_vec(), b"hll".to_vec(), pos.to_string().into(), byte]);
            }
            let r = t.run(&["PFCOUNT", "hll"]);
            assert!(r.starts_with(':') || r == CORRUPT || r == NOT_HLL, "{r}");
            let _ = t.run(&["PFADD", "hll", "again"]);
        }
    }

    #[test]
    fn pfmerge_unions_and_creates_the_destination() {
        let mut t = TestKit::default();
        t.run(&["PFADD", "hll1", "a", "b", "c"]);
        t.run(&["PFADD", "hll2", "b", "c", "d"]);
        t.run(&["PFADD", "hll3", "c", "d", "e"]);
        assert_eq!(t.run(&["PFMERGE", "hll", "hll1", "hll2", "hll3"]), "+OK\r\n");
        assert_eq!(t.run(&["PFCOUNT", "hll"]), ":5\r\n");
        assert_eq!(t.run(&["PFMERGE", "dest", "nosrc"]), "+OK\r\n");
        assert_eq!(t.run(&["PFCOUNT", "dest"]), ":0\r\n");
        assert_eq!(t.run(&["PFMERGE", "dest2", "nosrc", "nosrc2"]), "+OK\r\n");
        assert_eq!(t.run(&["EXISTS", "dest2"]), ":1\r\n");
        assert_eq!(t.run(&["PFMERGE", "alone"]), "+OK\r\n", "no sources at all");
        assert_eq!(t.run(&["PFCOUNT", "alone"]), ":0\r\n");
        t.run(&["PFADD", "self", "a", "b", "c"]);
        assert_eq!(t.run(&["PFMERGE", "self"]), "+OK\r\n", "the destination is an input too");
        assert_eq!(t.run(&["PFCOUNT", "self"]), ":3\r\n");
        t.run(&["PFMERGE", "hll1", "hll3"]);
        assert_eq!(t.run(&["PFCOUNT", "hll1"]), ":5\r\n");
        t.events.take();
        t.run(&["PFMERGE", "hll1", "hll3"]);
        assert_eq!(t.events.take(), ["$:pfadd:hll1@0"]);
    }

    #[test]
    fn pfmerge_locks_its_destination_without_sources() {
        use hotkv_protocol::Args;
        let buf = b"PFMERGEd".to_vec();
        let args = Args::from_parts(&buf, &[(0, 7), (7, 8)]);
        let spec = crate::cmd::commands().find(|s| s.name == "pfmerge").unwrap();
        let mut plan = crate::plan::Plan::default();
        let hint = crate::plan::KeyHint::default();
        plan.compute(spec, crate::cmd::LockPlan::Keys, &args, 0, 16, &hint);
        assert_eq!(plan.keys().iter().map(|k| k.pos).collect::<Vec<_>>(), [1]);
        assert_eq!(plan.locks().len(), 1);
    }

    #[test]
    fn pfcount_of_several_keys_is_the_union() {
        let mut t = TestKit::default();
        for i in 0..3000 {
            t.run(&["PFADD", "h1", &format!("foo-{i}")]);
            t.run(&["PFADD", "h2", &format!("bar-{i}")]);
            t.run(&["PFADD", "h3", &format!("zap-{i}")]);
        }
        let card = int(&mut t, &["PFCOUNT", "h1", "h2", "h3", "nokey"]);
        assert!((card - 9000).abs() < 9000 * 3 / 100, "{card}");
        let before = (get(&mut t, "h1"), t.stats.dirty);
        assert_eq!(int(&mut t, &["PFCOUNT", "h1", "h1"]), int(&mut t, &["PFCOUNT", "h1"]));
        assert_ne!(get(&mut t, "h1"), before.0, "only the single-key form writes the cache");
        t.run(&["PFMERGE", "all", "h1", "h2", "h3"]);
        assert_eq!(int(&mut t, &["PFCOUNT", "all"]), card);
    }

    #[test]
    fn pfdebug_subcommands() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["PFDEBUG", "GETREG", "nokey"]), "-ERR The specified key does not exist\r\n");
        assert_eq!(t.run(&["PFDEBUG", "BOGUS", "nokey"]), "-ERR The specified key does not exist\r\n");
        t.run(&["PFADD", "hll", "1", "2", "3"]);
        assert_eq!(t.run(&["PFDEBUG", "bogus", "hll"]), "-ERR Unknown PFDEBUG subcommand 'bogus'\r\n");
        assert_eq!(t.run(&["PFDEBUG", "encoding", "hll"]), "+sparse\r\n");
        assert!(t.run(&["PFDEBUG", "DECODE", "hll"]).starts_with("$"));
        t.run(&["PFADD", "h2", "1", "2", "3"]);
        assert_eq!(t.run(&["PFDEBUG", "TODENSE", "h2"]), ":1\r\n");
        assert_eq!(t.run(&["PFDEBUG", "TODENSE", "h2"]), ":0\r\n");
        assert_eq!(t.run(&["PFDEBUG", "DECODE", "h2"]), "-ERR HLL encoding is not sparse\r\n");
        let regs = t.run(&["PFDEBUG", "GETREG", "hll"]);
        assert!(regs.starts_with("*16384\r\n"));
        assert_eq!(regs.matches(":0\r\n").count(), 16384 - 3);
        assert_eq!(t.run(&["PFDEBUG", "ENCODING", "hll"]), "+dense\r\n", "GETREG converts");
        assert_eq!(regs, t.run(&["PFDEBUG", "GETREG", "h2"]), "same elements, same registers");
        assert_eq!(t.run(&["PFCOUNT", "hll", "h2"]), ":3\r\n");
        assert_eq!(t.run(&["PFDEBUG", "GETREG"]), "-ERR wrong number of arguments for 'pfdebug' command\r\n");
    }

    #[test]
    fn pfselftest_passes_at_a_reduced_size() {
        assert_eq!(crate::hll::selftest(2, 200_000, 3000, 7), Ok(()));
        assert_eq!(crate::hll::selftest(1, 2_000, 100, 8), Ok(()), "a small sparse limit promotes early");
    }

    #[test]
    fn non_string_values_are_wrongtype() {
        let mut t = TestKit::default();
        if !non_string(&mut t, "l") {
            return;
        }
        let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
        for argv in [
            &["PFADD", "l", "a"][..],
            &["PFCOUNT", "l"],
            &["PFCOUNT", "x", "l"],
            &["PFMERGE", "d", "l"],
            &["PFMERGE", "l"],
            &["PFDEBUG", "ENCODING", "l"],
        ] {
            assert_eq!(t.run(argv), wrongtype, "{argv:?}");
        }
    }
}
