//! Hash field expiry (Redis 7.4, Valkey 9): HEXPIRE, HPEXPIRE, HEXPIREAT, HPEXPIREAT, HTTL,
//! HPTTL, HEXPIRETIME, HPEXPIRETIME, HPERSIST.
//!
//! Replies, errors and events follow Redis's `t_hash.c`. Every form answers one integer per
//! field named after `FIELDS numfields`: -2 for a field that does not exist (or a key that
//! does not), then per command 0 (condition not met), 1 (done), 2 (deleted: the time is
//! already past), -1 (no TTL). Expired fields are deleted when their key is looked up (see
//! `Ctx::lookup`), so these handlers only ever see live fields.
//!
//! The write stream gets the absolute form: HEXPIRE, HPEXPIRE and HEXPIREAT go out as
//! HPEXPIREAT in milliseconds naming only the fields that got the TTL, each field deleted for
//! a past time as an HDEL of its own, as Redis propagates them.

use hotkv_protocol::{Args, ReplyBuf};

use super::{Spec, int_arg};
use crate::command::{KeySpec, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};

/// Hash field expiry command rows.
pub static COMMANDS: &[Spec] = &[
    set_row("hexpire", "Set expiry for hash field using relative time to expire (seconds)", hexpire),
    set_row("hpexpire", "Set expiry for hash field using relative time to expire (milliseconds)", hpexpire),
    set_row("hexpireat", "Set expiry for hash field using an absolute Unix timestamp (seconds)", hexpireat),
    set_row("hpexpireat", "Set expiry for hash field using an absolute Unix timestamp (milliseconds)", hpexpireat),
    get_row("httl", "Returns the TTL in seconds of a hash field.", httl).with_tips(&["nondeterministic_output"]),
    get_row("hpttl", "Returns the TTL in milliseconds of a hash field.", hpttl).with_tips(&["nondeterministic_output"]),
    get_row("hexpiretime", "Returns the expiration time of a hash field as a Unix timestamp, in seconds.", hexpiretime),
    get_row("hpexpiretime", "Returns the expiration time of a hash field as a Unix timestamp, in msec.", hpexpiretime),
    row(
        "hpersist",
        -5,
        flags::WRITE | flags::FAST,
        RW_UPDATE,
        "Removes the expiration time for each specified field",
        hpersist,
    ),
];

const fn set_row(name: &'static str, summary: &'static str, run: super::EngineFn) -> Spec {
    row(name, -6, flags::WRITE | flags::DENYOOM | flags::FAST, RW_UPDATE, summary, run)
}

const fn get_row(name: &'static str, summary: &'static str, run: super::EngineFn) -> Spec {
    row(name, -5, flags::READONLY | flags::FAST, RO_ACCESS, summary, run)
}

/// A row of a field-expiry command: a hash command row, since 7.4.0.
const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    summary: &'static str,
    run: super::EngineFn,
) -> Spec {
    super::hash::row(name, arity, flags, keys, "7.4.0", summary, "O(N) where N is the number of specified fields", run)
}

const RO_ACCESS: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];
const RW_UPDATE: &[KeySpec] = &[KeySpec::single(1, kf::RW | kf::UPDATE)];

/// The latest absolute expire time a field may get, in unix ms (Redis's
/// `HFE_MAX_ABS_TIME_MSEC`: the 48-bit ebuckets maximum shifted right by two).
pub const MAX_FIELD_EXPIRE_MS: i64 = 0x0000_FFFF_FFFF_FFFF >> 2;

/// A field's reply when it does not exist (every command).
const NO_FIELD: i64 = -2;

/// Which fields HEXPIRE and friends change, as Redis's `NX`, `XX`, `GT`, `LT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Cond {
    Always,
    /// Only fields without a TTL.
    Nx,
    /// Only fields with a TTL.
    Xx,
    /// Only to a later time; a field without a TTL never qualifies (it lives forever).
    Gt,
    /// Only to an earlier time; a field without a TTL always qualifies.
    Lt,
}

impl Cond {
    /// The argument spelling, for the rewritten command.
    fn word(self) -> Option<&'static [u8]> {
        match self {
            Cond::Always => None,
            Cond::Nx => Some(b"NX"),
            Cond::Xx => Some(b"XX"),
            Cond::Gt => Some(b"GT"),
            Cond::Lt => Some(b"LT"),
        }
    }

    /// Whether a field whose TTL is `prev` may get `when`.
    fn allows(self, prev: Option<i64>, when: i64) -> bool {
        match (self, prev) {
            (Cond::Always, _) | (Cond::Nx, None) | (Cond::Lt, None) => true,
            (Cond::Nx, Some(_)) | (Cond::Xx | Cond::Gt, None) => false,
            (Cond::Xx, Some(_)) => true,
            (Cond::Gt, Some(p)) => p < when,
            (Cond::Lt, Some(p)) => p > when,
        }
    }
}

/// The time unit of a command's time argument.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Seconds,
    Millis,
}

/// HEXPIRE and friends, parsed.
struct ExpireArgs<'a> {
    /// Absolute unix time in milliseconds.
    when: i64,
    cond: Cond,
    fields: Vec<&'a [u8]>,
}

fn hexpire(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let now = ctx.now_ms;
    set_expire(ctx, args, "hexpire", now, Unit::Seconds, out)
}

fn hpexpire(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let now = ctx.now_ms;
    set_expire(ctx, args, "hpexpire", now, Unit::Millis, out)
}

fn hexpireat(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    set_expire(ctx, args, "hexpireat", 0, Unit::Seconds, out)
}

fn hpexpireat(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    set_expire(ctx, args, "hpexpireat", 0, Unit::Millis, out)
}

/// What one field of HEXPIRE became.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Outcome {
    NoField,
    NotMet,
    Set,
    Deleted,
}

impl Outcome {
    fn code(self) -> i64 {
        match self {
            Outcome::NoField => NO_FIELD,
            Outcome::NotMet => 0,
            Outcome::Set => 1,
            Outcome::Deleted => 2,
        }
    }
}

/// Redis's `hexpireGenericCommand`: `base` is the command's time for the relative forms and 0
/// for the absolute ones.
fn set_expire(ctx: &mut Ctx<'_>, args: Args<'_>, name: &str, base: i64, unit: Unit, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let parsed = parse_expire(&args, name, base, unit);
    let past = parsed.as_ref().is_ok_and(|p| ctx.already_expired(p.when));
    // WRONGTYPE comes before any argument error, as Redis looks the key up first.
    let Some(mut k) = ctx.write(key)? else {
        let parsed = parsed?;
        out.array(parsed.fields.len());
        parsed.fields.iter().for_each(|_| out.int(NO_FIELD));
        return Ok(());
    };
    k.hash()?;
    let ExpireArgs { when, cond, fields } = parsed?;
    let h = k.hash_mut()?;
    let outcomes: Vec<Outcome> = fields
        .iter()
        .map(|&f| {
            if !h.contains(f) {
                Outcome::NoField
            } else if !cond.allows(h.expire_of(f), when) {
                Outcome::NotMet
            } else if past {
                h.remove(f);
                Outcome::Deleted
            } else {
                h.set_expire(f, when);
                Outcome::Set
            }
        })
        .collect();
    let emptied = h.is_empty();
    let file_at = h.min_expire();
    if emptied {
        drop(k.delete());
    }
    // Filed for the active expire cycle under the hash's earliest time (see `Db::field_ttls`).
    if let Some(when) = file_at
        && outcomes.contains(&Outcome::Set)
    {
        ctx.ks.db(ctx.db).watch_field_ttls(key, when);
    }
    out.array(outcomes.len());
    outcomes.iter().for_each(|o| out.int(o.code()));

    let deleted: Vec<&[u8]> =
        fields.iter().zip(&outcomes).filter(|(_, o)| **o == Outcome::Deleted).map(|(f, _)| *f).collect();
    let set: Vec<&[u8]> = fields.iter().zip(&outcomes).filter(|(_, o)| **o == Outcome::Set).map(|(f, _)| *f).collect();
    ctx.effects.suppress();
    if deleted.is_empty() && set.is_empty() {
        return Ok(());
    }
    // Redis counts these in `expired_subkeys` too.
    ctx.stats.expired_fields += deleted.len() as u64;
    let db = ctx.db;
    for f in &deleted {
        ctx.effects.push(db, &[b"HDEL".as_slice(), key, f]);
    }
    if !set.is_empty() {
        let when_text = itoa::Buffer::new().format(when).to_owned();
        let count = itoa::Buffer::new().format(set.len()).to_owned();
        let mut argv: Vec<&[u8]> = vec![b"HPEXPIREAT", key, when_text.as_bytes()];
        argv.extend(cond.word());
        argv.extend([b"FIELDS".as_slice(), count.as_bytes()]);
        argv.extend(&set);
        ctx.propagate_as(&argv);
    }
    ctx.changed(key, 'h', if deleted.is_empty() { "hexpire" } else { "hdel" }, emptied);
    ctx.stats.dirty += (deleted.len() + set.len()) as u64 - 1;
    Ok(())
}

/// Parses `key time [NX|XX|GT|LT] FIELDS numfields field...` in Redis's order and words.
fn parse_expire<'a>(args: &Args<'a>, name: &str, base: i64, unit: Unit) -> Result<ExpireArgs<'a>, CommandError> {
    let invalid = || CommandError::err(format!("invalid expire time in '{name}' command"));
    let mut when = int_arg(args.get(2))?;
    if when < 0 {
        return Err(CommandError::err("invalid expire time, must be >= 0"));
    }
    if unit == Unit::Seconds {
        if when > MAX_FIELD_EXPIRE_MS / 1000 {
            return Err(invalid());
        }
        when *= 1000;
    }
    if when > MAX_FIELD_EXPIRE_MS - base {
        return Err(invalid());
    }
    when += base;
    let word = args.get(3);
    let cond = [(b"nx", Cond::Nx), (b"xx", Cond::Xx), (b"gt", Cond::Gt), (b"lt", Cond::Lt)]
        .into_iter()
        .find(|(w, _)| word.eq_ignore_ascii_case(*w))
        .map_or(Cond::Always, |(_, c)| c);
    let at = if cond == Cond::Always { 4 } else { 5 };
    let fields = parse_fields(args, at, "Parameter `numFields` should be greater than 0")?;
    Ok(ExpireArgs { when, cond, fields })
}

/// Parses `FIELDS numfields field...` with FIELDS at argument `at - 1`; `bad_count` is the
/// command's message for a count that is not a positive integer.
fn parse_fields<'a>(args: &Args<'a>, at: usize, bad_count: &'static str) -> Result<Vec<&'a [u8]>, CommandError> {
    if at >= args.len() || !args.get(at - 1).eq_ignore_ascii_case(b"FIELDS") {
        return Err(CommandError::err("Mandatory argument FIELDS is missing or not at the right position"));
    }
    let n = hotkv_protocol::parse_i64(args.get(at)).filter(|&n| n >= 1).ok_or_else(|| CommandError::err(bad_count))?;
    if n as u64 != (args.len() - at - 1) as u64 {
        return Err(CommandError::err("The `numfields` parameter must match the number of arguments"));
    }
    Ok(args.iter().skip(at + 1).collect())
}

fn httl(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let now = ctx.now_ms;
    ttl(ctx, args, now, Unit::Seconds, out)
}

fn hpttl(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let now = ctx.now_ms;
    ttl(ctx, args, now, Unit::Millis, out)
}

fn hexpiretime(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    ttl(ctx, args, 0, Unit::Seconds, out)
}

fn hpexpiretime(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    ttl(ctx, args, 0, Unit::Millis, out)
}

/// Redis's `httlGenericCommand`: per field -2, -1, or the time left after `base` (0 for the
/// absolute forms), seconds rounded up.
fn ttl(ctx: &mut Ctx<'_>, args: Args<'_>, base: i64, unit: Unit, out: &mut ReplyBuf) -> CmdResult {
    let now = ctx.now_ms;
    let k = ctx.read(args.get(1))?;
    let h = match &k {
        Some(k) => Some(k.hash()?),
        None => None,
    };
    let fields = parse_fields(&args, 3, "Number of fields must be a positive integer")?;
    out.array(fields.len());
    for f in fields {
        let code = match h.filter(|h| h.contains(f)).map(|h| h.expire_of(f)) {
            None => NO_FIELD,
            Some(None) => -1,
            // Only a replica, which waits for its primary's HDEL, still holds it.
            Some(Some(when)) if when < now => NO_FIELD,
            Some(Some(when)) if unit == Unit::Seconds => (when + 999 - base) / 1000,
            Some(Some(when)) => when - base,
        };
        out.int(code);
    }
    Ok(())
}

/// HPERSIST: per field -2, -1 (no TTL) or 1 (TTL removed).
fn hpersist(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let now = ctx.now_ms;
    let mut k = ctx.write(key)?;
    if let Some(k) = &k {
        k.hash()?;
    }
    let fields = parse_fields(&args, 3, "Number of fields must be a positive integer")?;
    let mut codes = Vec::with_capacity(fields.len());
    if let Some(k) = &mut k {
        let h = k.hash_mut()?;
        for f in &fields {
            codes.push(match h.expire_of(f) {
                _ if !h.contains(f) => NO_FIELD,
                None => -1,
                Some(when) if when < now => NO_FIELD,
                Some(_) => i64::from(h.persist(f)),
            });
        }
    } else {
        codes.resize(fields.len(), NO_FIELD);
    }
    out.array(codes.len());
    codes.iter().for_each(|&c| out.int(c));
    if codes.contains(&1) {
        ctx.changed(key, 'h', "hpersist", false);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::{Resp, TestKit};

    const NOW: i64 = 1_700_000_000_000;

    fn ints(codes: &[i64]) -> String {
        let mut s = format!("*{}\r\n", codes.len());
        for c in codes {
            s.push_str(&format!(":{c}\r\n"));
        }
        s
    }

    /// Runs `argv` with the write stream recorded and returns what it recorded.
    fn stream(t: &mut TestKit, argv: &[&str]) -> (String, Vec<String>) {
        t.record = true;
        t.stream.clear();
        let reply = t.run(argv);
        (reply, std::mem::take(&mut t.stream))
    }

    #[test]
    fn every_reply_code_of_hexpire() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
        assert_eq!(t.run(&["HEXPIRE", "h", "100", "FIELDS", "2", "a", "nope"]), ints(&[1, -2]));
        assert_eq!(t.run(&["HEXPIRE", "h", "100", "NX", "FIELDS", "2", "a", "b"]), ints(&[0, 1]));
        assert_eq!(t.run(&["HEXPIRE", "h", "50", "XX", "FIELDS", "2", "a", "c"]), ints(&[1, 0]));
        assert_eq!(t.run(&["HEXPIRE", "h", "40", "GT", "FIELDS", "2", "a", "c"]), ints(&[0, 0]));
        assert_eq!(t.run(&["HEXPIRE", "h", "60", "gt", "FIELDS", "1", "a"]), ints(&[1]));
        assert_eq!(t.run(&["HEXPIRE", "h", "70", "LT", "FIELDS", "2", "a", "c"]), ints(&[0, 1]));
        assert_eq!(t.run(&["HTTL", "h", "FIELDS", "4", "a", "b", "c", "nope"]), ints(&[60, 100, 70, -2]));
        assert_eq!(t.run(&["HPTTL", "h", "FIELDS", "1", "a"]), ints(&[60_000]));
        assert_eq!(t.run(&["HEXPIRETIME", "h", "FIELDS", "1", "a"]), ints(&[NOW / 1000 + 60]));
        assert_eq!(t.run(&["HPEXPIRETIME", "h", "FIELDS", "1", "a"]), ints(&[NOW + 60_000]));
        // A time already past deletes the field, and the key with its last field.
        assert_eq!(t.run(&["HPEXPIREAT", "h", "1", "FIELDS", "2", "a", "b"]), ints(&[2, 2]));
        assert_eq!(t.run(&["HGETALL", "h"]), "*2\r\n$1\r\nc\r\n$1\r\n3\r\n");
        t.events.take();
        assert_eq!(t.run(&["HEXPIREAT", "h", "0", "FIELDS", "2", "c", "c"]), ints(&[2, -2]));
        assert_eq!(t.events.take(), ["h:hdel:h@0", "g:del:h@0"]);
        assert_eq!(t.run(&["EXISTS", "h"]), ":0\r\n");
        assert_eq!(t.run(&["HEXPIRE", "h", "10", "FIELDS", "2", "a", "b"]), ints(&[-2, -2]));
        assert_eq!(t.run(&["HTTL", "h", "FIELDS", "1", "a"]), ints(&[-2]));
    }

    #[test]
    fn ttl_reads_and_hpersist() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2"]);
        assert_eq!(t.run(&["HTTL", "h", "FIELDS", "2", "a", "x"]), ints(&[-1, -2]));
        assert_eq!(t.run(&["HPERSIST", "h", "FIELDS", "2", "a", "x"]), ints(&[-1, -2]));
        t.run(&["HPEXPIRE", "h", "1500", "FIELDS", "1", "a"]);
        assert_eq!(t.run(&["HTTL", "h", "FIELDS", "1", "a"]), ints(&[2]), "seconds round up");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "h"]), "$10\r\nlistpackex\r\n");
        t.events.take();
        assert_eq!(t.run(&["HPERSIST", "h", "FIELDS", "2", "a", "a"]), ints(&[1, -1]));
        assert_eq!(t.events.take(), ["h:hpersist:h@0"]);
        assert_eq!(t.run(&["HTTL", "h", "FIELDS", "1", "a"]), ints(&[-1]));
        assert_eq!(t.run(&["OBJECT", "ENCODING", "h"]), "$8\r\nlistpack\r\n", "no TTL left, plain again");
        assert_eq!(t.run(&["HPERSIST", "nokey", "FIELDS", "1", "a"]), ints(&[-2]));
    }

    #[test]
    fn errors_word_for_word() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1"]);
        t.run(&["SET", "s", "v"]);
        let cases: &[(&[&str], &str)] = &[
            (&["HEXPIRE", "h", "10", "FIELDS", "0", "a"], "ERR Parameter `numFields` should be greater than 0"),
            (&["HEXPIRE", "h", "10", "FIELDS", "x", "a"], "ERR Parameter `numFields` should be greater than 0"),
            (
                &["HEXPIRE", "h", "10", "FIELDS", "2", "a"],
                "ERR The `numfields` parameter must match the number of arguments",
            ),
            (
                &["HEXPIRE", "h", "10", "FIELDS", "1", "a", "b"],
                "ERR The `numfields` parameter must match the number of arguments",
            ),
            (
                &["HEXPIRE", "h", "10", "FELDS", "1", "a"],
                "ERR Mandatory argument FIELDS is missing or not at the right position",
            ),
            (
                &["HEXPIRE", "h", "10", "NX", "XX", "FIELDS", "1", "a"],
                "ERR Mandatory argument FIELDS is missing or not at the right position",
            ),
            (&["HEXPIRE", "h", "-1", "FIELDS", "1", "a"], "ERR invalid expire time, must be >= 0"),
            (&["HEXPIRE", "h", "x", "FIELDS", "1", "a"], "ERR value is not an integer or out of range"),
            (&["HEXPIRE", "h", "70368744178", "FIELDS", "1", "a"], "ERR invalid expire time in 'hexpire' command"),
            (
                &["HPEXPIREAT", "h", "70368744177664", "FIELDS", "1", "a"],
                "ERR invalid expire time in 'hpexpireat' command",
            ),
            (&["HPEXPIRE", "h", "70368744177663", "FIELDS", "1", "a"], "ERR invalid expire time in 'hpexpire' command"),
            (&["HTTL", "h", "FIELDS", "0", "a"], "ERR Number of fields must be a positive integer"),
            (
                &["HPERSIST", "h", "FIELDS", "2", "a"],
                "ERR The `numfields` parameter must match the number of arguments",
            ),
            (
                &["HTTL", "h", "FIELD", "1", "a"],
                "ERR Mandatory argument FIELDS is missing or not at the right position",
            ),
            (
                &["HEXPIRE", "s", "x", "FIELDS", "1", "a"],
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            (&["HTTL", "s", "FIELDS", "1", "a"], "WRONGTYPE Operation against a key holding the wrong kind of value"),
            (
                &["HPERSIST", "s", "FIELDS", "1", "a"],
                "WRONGTYPE Operation against a key holding the wrong kind of value",
            ),
            (&["HEXPIRE", "nokey", "10", "FIELDS", "0", "a"], "ERR Parameter `numFields` should be greater than 0"),
            (&["HEXPIRE", "h", "10", "FIELDS", "1"], "ERR wrong number of arguments for 'hexpire' command"),
        ];
        for (argv, want) in cases {
            assert_eq!(t.run(argv), format!("-{want}\r\n"), "{argv:?}");
        }
        assert_eq!(t.run(&["HEXPIREAT", "h", "70368744177", "FIELDS", "1", "a"]), ints(&[1]), "the largest time");
    }

    #[test]
    fn expired_fields_are_never_seen_and_go_lazily() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
        t.run(&["HPEXPIRE", "h", "10", "FIELDS", "2", "a", "b"]);
        t.now_ms += 10;
        assert_eq!(t.run(&["HLEN", "h"]), ":3\r\n", "alive through its last millisecond");
        t.now_ms += 1;
        t.events.take();
        let (reply, lines) = stream(&mut t, &["HGET", "h", "a"]);
        assert_eq!(reply, "$-1\r\n");
        // Fields go in their order, each as an HDEL, wrapped as one unit for a replica.
        assert_eq!(lines, ["4294967295: MULTI", "0: HDEL h a", "0: HDEL h b", "4294967295: EXEC"]);
        assert_eq!(t.events.take(), ["h:hexpired:h@0"]);
        assert_eq!(t.run(&["HEXISTS", "h", "b"]), ":0\r\n");
        assert_eq!(t.run(&["HSTRLEN", "h", "a"]), ":0\r\n");
        for argv in [&["HKEYS", "h"][..], &["HGETALL", "h"], &["HRANDFIELD", "h", "-5"], &["HSCAN", "h", "0"]] {
            let r = t.run(argv);
            assert!(!r.contains("\r\na\r\n") && !r.contains("\r\nb\r\n"), "{argv:?}: {r}");
        }
        assert_eq!(t.run(&["HLEN", "h"]), ":1\r\n");
        // The last field going deletes the key.
        t.run(&["HPEXPIRE", "h", "5", "FIELDS", "1", "c"]);
        t.now_ms += 6;
        t.events.take();
        assert_eq!(t.run(&["HGETALL", "h"]), "*0\r\n");
        assert_eq!(t.events.take(), ["h:hexpired:h@0", "g:del:h@0", "m:keymiss:h@0"]);
        assert_eq!(t.run(&["EXISTS", "h"]), ":0\r\n");
        assert_eq!(t.stats.expired_fields, 3);
    }

    #[test]
    fn writes_clear_a_fields_ttl_but_increments_keep_it() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2", "n", "5", "x", "1.5"]);
        t.run(&["HEXPIRE", "h", "100", "FIELDS", "4", "a", "b", "n", "x"]);
        t.run(&["HSET", "h", "a", "9"]);
        t.run(&["HSETNX", "h", "b", "9"]);
        t.run(&["HINCRBY", "h", "n", "1"]);
        let (_, lines) = stream(&mut t, &["HINCRBYFLOAT", "h", "x", "1"]);
        assert_eq!(t.run(&["HTTL", "h", "FIELDS", "4", "a", "b", "n", "x"]), ints(&[-1, 100, 100, 100]));
        let at = NOW + 100_000;
        assert_eq!(
            lines,
            ["4294967295: MULTI", "0: HSET h x 2.5", &format!("0: HPEXPIREAT h {at} FIELDS 1 x"), "4294967295: EXEC"]
        );
        t.run(&["HDEL", "h", "b"]);
        t.run(&["HSET", "h", "b", "new"]);
        assert_eq!(t.run(&["HTTL", "h", "FIELDS", "1", "b"]), ints(&[-1]), "a deleted field's TTL goes with it");
    }

    #[test]
    fn propagates_absolute_times_and_hdels() {
        let mut t = TestKit::default();
        t.run(&["HSET", "h", "a", "1", "b", "2", "c", "3"]);
        let at = NOW + 5_000;
        let (_, lines) = stream(&mut t, &["HEXPIRE", "h", "5", "FIELDS", "3", "a", "nope", "b"]);
        assert_eq!(lines, [format!("0: HPEXPIREAT h {at} FIELDS 2 a b")]);
        let (_, lines) = stream(&mut t, &["HPEXPIRE", "h", "5000", "NX", "FIELDS", "2", "a", "c"]);
        assert_eq!(lines, [format!("0: HPEXPIREAT h {at} NX FIELDS 1 c")]);
        let (_, lines) = stream(&mut t, &["HPEXPIRE", "h", "5000", "NX", "FIELDS", "1", "a"]);
        assert!(lines.is_empty(), "nothing changed: {lines:?}");
        let (_, lines) = stream(&mut t, &["HEXPIREAT", "h", "1", "FIELDS", "2", "a", "b"]);
        assert_eq!(lines, ["4294967295: MULTI", "0: HDEL h a", "0: HDEL h b", "4294967295: EXEC"]);
        let (_, lines) = stream(&mut t, &["HPERSIST", "h", "FIELDS", "1", "c"]);
        assert_eq!(lines, ["0: HPERSIST h FIELDS 1 c"]);
        let (_, lines) = stream(&mut t, &["HPERSIST", "h", "FIELDS", "1", "c"]);
        assert!(lines.is_empty());
    }

    #[test]
    fn a_replica_keeps_past_times_and_waits_for_hdel() {
        let mut t = TestKit::default();
        t.cfg.from_primary = true;
        t.run(&["HSET", "h", "a", "1"]);
        assert_eq!(t.run(&["HPEXPIREAT", "h", "1", "FIELDS", "1", "a"]), ints(&[1]));
        assert_eq!(t.run(&["HLEN", "h"]), ":1\r\n", "the primary's HDEL removes it");
        assert_eq!(t.run(&["HDEL", "h", "a"]), ":1\r\n");
    }

    #[test]
    fn a_replicas_readers_do_not_see_expired_fields_it_keeps() {
        for limits in [["64", "64"], ["0", "0"]] {
            let mut t = TestKit::default();
            t.cfg.hash_max_listpack_entries = limits[0].parse().unwrap();
            t.cfg.hash_max_listpack_value = limits[1].parse().unwrap();
            t.run(&["HSET", "h", "a", "1", "b", "22", "c", "3"]);
            t.run(&["HPEXPIRE", "h", "10", "FIELDS", "2", "a", "b"]);
            t.run(&["HSET", "gone", "x", "1"]);
            t.run(&["HPEXPIRE", "gone", "10", "FIELDS", "1", "x"]);
            t.cfg.replica = true;
            t.now_ms += 11;
            let (reply, lines) = stream(&mut t, &["HGET", "h", "a"]);
            assert_eq!((reply.as_str(), lines.len()), ("$-1\r\n", 0), "hidden, and no HDEL of its own");
            assert_eq!(t.run(&["HMGET", "h", "a", "c"]), "*2\r\n$-1\r\n$1\r\n3\r\n");
            assert_eq!(t.run(&["HEXISTS", "h", "b"]), ":0\r\n");
            assert_eq!(t.run(&["HSTRLEN", "h", "b"]), ":0\r\n");
            assert_eq!(t.run(&["HLEN", "h"]), ":1\r\n", "hotkv's HLEN counts live fields (docs/)");
            assert_eq!(t.run(&["HGETALL", "h"]), "*2\r\n$1\r\nc\r\n$1\r\n3\r\n");
            assert_eq!(t.run(&["HKEYS", "h"]), "*1\r\n$1\r\nc\r\n");
            assert_eq!(t.run(&["HVALS", "h"]), "*1\r\n$1\r\n3\r\n");
            assert_eq!(t.run(&["HRANDFIELD", "h", "-4"]), "*4\r\n$1\r\nc\r\n$1\r\nc\r\n$1\r\nc\r\n$1\r\nc\r\n");
            assert_eq!(t.run(&["HRANDFIELD", "h"]), "$1\r\nc\r\n");
            assert_eq!(t.run(&["HSCAN", "h", "0"]), "*2\r\n$1\r\n0\r\n*2\r\n$1\r\nc\r\n$1\r\n3\r\n");
            assert_eq!(t.run(&["HPTTL", "h", "FIELDS", "3", "a", "b", "c"]), ints(&[-2, -2, -1]));
            // A hash all of whose fields are due reads as missing.
            assert_eq!(t.run(&["HGETALL", "gone"]), "*0\r\n");
            assert_eq!(t.run(&["HRANDFIELD", "gone", "-3"]), "*0\r\n");
            assert_eq!(t.run(&["HLEN", "gone"]), ":0\r\n");
            // Nothing was deleted: the primary's HDELs find the fields.
            t.cfg.replica = false;
            t.cfg.from_primary = true;
            assert_eq!(t.run(&["HLEN", "h"]), ":3\r\n");
            assert_eq!(t.run(&["HDEL", "h", "a", "b"]), ":2\r\n");
            assert_eq!(t.run(&["HDEL", "gone", "x"]), ":1\r\n");
            assert_eq!(t.stats.expired_fields, 0);
        }
    }

    #[test]
    fn table_encoding_memory_and_copies() {
        let mut t = TestKit::default();
        t.cfg.hash_max_listpack_entries = 1;
        t.run(&["HSET", "h", "a", "1", "b", "2"]);
        let before: i64 = t.run(&["MEMORY", "USAGE", "h"])[1..].trim().parse().unwrap();
        t.run(&["HEXPIRE", "h", "100", "FIELDS", "1", "a"]);
        let after: i64 = t.run(&["MEMORY", "USAGE", "h"])[1..].trim().parse().unwrap();
        assert!(after > before, "{before} {after}");
        assert_eq!(Resp::parse(&t.run(&["OBJECT", "ENCODING", "h"])).text(), "hashtable");
        assert_eq!(t.run(&["COPY", "h", "c"]), ":1\r\n");
        t.run(&["RENAME", "c", "d"]);
        assert_eq!(t.run(&["HTTL", "d", "FIELDS", "2", "a", "b"]), ints(&[100, -1]));
        t.run(&["HSET", "h", "c", "3", "d", "4"]);
        t.now_ms += 100_001;
        assert_eq!(t.run(&["HLEN", "h"]), ":3\r\n");
        assert_eq!(t.run(&["HLEN", "d"]), ":1\r\n");
    }
}
