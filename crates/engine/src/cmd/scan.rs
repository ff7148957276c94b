//! Commands that walk the whole keyspace of a database: KEYS, SCAN, RANDOMKEY.
//!
//! They hold no locks when called (`LockPlan::PerSlot`) and lock one slot at a time, so a
//! long KEYS never stalls commands on other slots. The price is Valkey's own for SCAN: no
//! snapshot across slots. Logically expired keys are never returned; SCAN and RANDOMKEY also
//! delete those they meet (Valkey's `expireIfNeeded`), KEYS only skips them.

use hotkv_protocol::{Args, ReplyBuf, parse_i64};

use super::keys::{row, type_name};
use super::{LockPlan, Spec, push_bulk};
use crate::command::{acl, flags};
use crate::ctx::{Ctx, Events, LocalStats};
use crate::entry::Entry;
use crate::error::{CmdResult, CommandError};
use crate::glob;
use crate::keyspace::{Db, SlotRef};
use crate::policy::random_u64;
use crate::slot::SLOTS;

/// Keyspace walking command rows.
pub static COMMANDS: &[Spec] = &[
    {
        let mut keys = row(
            "keys",
            2,
            flags::READONLY,
            &[],
            LockPlan::PerSlot,
            "1.0.0",
            "Returns all key names that match a pattern.",
            "O(N) with N being the number of keys in the database, under the assumption that the key names in the \
             database and the given pattern have limited length.",
            keys,
        )
        .with_tips(&["request_policy:all_shards", "nondeterministic_output_order"]);
        keys.acl |= acl::DANGEROUS;
        keys
    },
    row(
        "scan",
        -2,
        flags::READONLY | flags::TOUCHES_ARBITRARY_KEYS,
        &[],
        LockPlan::PerSlot,
        "2.8.0",
        "Iterates over the key names in the database.",
        "O(1) for every call. O(N) for a complete iteration, including enough command calls for the cursor to \
         return back to 0. N is the number of elements inside the collection.",
        scan,
    )
    .with_tips(&["nondeterministic_output", "request_policy:special", "response_policy:special"]),
    row(
        "randomkey",
        1,
        flags::READONLY | flags::TOUCHES_ARBITRARY_KEYS,
        &[],
        LockPlan::PerSlot,
        "1.0.0",
        "Returns a random key name from the database.",
        "O(1)",
        randomkey,
    )
    .with_tips(&["request_policy:all_shards", "response_policy:special", "nondeterministic_output"]),
];

/// Bits of a SCAN cursor that hold the slot; the table cursor sits above them.
const SLOT_BITS: u32 = SLOTS.trailing_zeros();
/// Type names SCAN TYPE accepts (Valkey's `obj_type_name`), whether or not such values exist.
const TYPE_NAMES: &[&str] = &["string", "list", "set", "zset", "hash", "stream"];
/// RANDOMKEY on a replica whose keys all have a TTL gives up looking for an unexpired one
/// after this many expired picks and returns the last (Valkey's `dbRandomKey`).
const RANDOMKEY_REPLICA_TRIES: u32 = 100;

fn keys(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let pattern = args.get(1);
    let all = pattern == b"*";
    let now = ctx.now_ms;
    let mut buf = Vec::new();
    let mut n = 0;
    if let Some(db) = ctx.ks.db_if_used(ctx.db) {
        for slot in candidate_slots(db, pattern, all) {
            let table = ctx.locks.slot_ref(ctx.ks, ctx.db, slot);
            for (_, e) in table.iter() {
                if (all || glob::matches(pattern, e.key(), false)) && !expired(e, now) {
                    push_bulk(&mut buf, e.key());
                    n += 1;
                    // Valkey's KEYS replies with a deferred length, so every key counts
                    // against the output limit as it is added, and stops once past it.
                    if !out.admit(buf.len()) {
                        return Ok(());
                    }
                }
            }
        }
    }
    out.array(n);
    out.raw(&buf);
    Ok(())
}

/// The non-empty slots that can hold keys matching `pattern`: one when its hash tag (or the
/// whole wildcard-free pattern) pins the slot down.
fn candidate_slots<'d>(db: &'d Db, pattern: &[u8], all: bool) -> impl Iterator<Item = u16> + 'd {
    let only = if all { None } else { glob::pattern_slot(pattern) };
    let range = match only {
        Some(s) => usize::from(s)..usize::from(s) + 1,
        None => 0..SLOTS,
    };
    range.filter(move |&s| db.slot(s as u16).keys() > 0).map(|s| s as u16)
}

fn expired(e: &Entry, now: i64) -> bool {
    e.expire().is_some_and(|when| now > when)
}

/// SCAN's options.
struct ScanArgs<'a> {
    count: u64,
    pattern: Option<&'a [u8]>,
    type_: Option<&'a [u8]>,
}

impl<'a> ScanArgs<'a> {
    fn parse(args: &Args<'a>) -> Result<ScanArgs<'a>, CommandError> {
        let mut a = ScanArgs { count: 10, pattern: None, type_: None };
        let mut i = 2;
        while i < args.len() {
            let opt = args.get(i);
            let value = args.opt(i + 1);
            match value {
                Some(v) if opt.eq_ignore_ascii_case(b"count") => {
                    let n = super::int_arg(v)?;
                    a.count = u64::try_from(n).ok().filter(|&n| n >= 1).ok_or(CommandError::Syntax)?;
                }
                // A lone `*` matches everything: skip matching altogether.
                Some(v) if opt.eq_ignore_ascii_case(b"match") => a.pattern = (v != b"*").then_some(v),
                Some(v) if opt.eq_ignore_ascii_case(b"type") => {
                    if !TYPE_NAMES.iter().any(|t| v.eq_ignore_ascii_case(t.as_bytes())) {
                        let name = String::from_utf8_lossy(v);
                        return Err(CommandError::err(format!("unknown type name '{name}'")));
                    }
                    a.type_ = Some(v);
                }
                _ if opt.eq_ignore_ascii_case(b"novalues") => {
                    return Err(CommandError::err("NOVALUES option can only be used in HSCAN"));
                }
                _ if opt.eq_ignore_ascii_case(b"noscores") => {
                    return Err(CommandError::err("NOSCORES option can only be used in ZSCAN"));
                }
                _ => return Err(CommandError::Syntax),
            }
            i += 2;
        }
        Ok(a)
    }
}

/// Valkey's `string2ull`: a plain integer, else whatever C `strtoull` accepts in full
/// (leading blanks, `+`, leading zeros, even `-` which wraps) up to the first NUL.
pub(super) fn parse_cursor(arg: &[u8]) -> Option<u64> {
    let s = memchr::memchr(0, arg).map_or(arg, |nul| &arg[..nul]);
    if let Some(n) = parse_i64(s) {
        return u64::try_from(n).ok();
    }
    let mut rest = s.trim_ascii_start();
    let negative = rest.first() == Some(&b'-');
    if matches!(rest.first(), Some(b'-' | b'+')) {
        rest = &rest[1..];
    }
    if rest.is_empty() || !rest.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let n = rest.iter().try_fold(0u64, |n, d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))?;
    Some(if negative { n.wrapping_neg() } else { n })
}

fn scan(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let mut cursor = parse_cursor(args.get(1)).ok_or_else(|| CommandError::err("invalid cursor"))?;
    let opts = ScanArgs::parse(&args)?;
    let mut found = Found { buf: Vec::new(), n: 0, sampled: 0 };
    if let Some(db) = ctx.ks.db_if_used(ctx.db) {
        let only = opts.pattern.and_then(glob::pattern_slot);
        // As Valkey: stop at the end, after COUNT keys were looked at, or after 10 x COUNT
        // steps so a sparse table cannot make one call take long.
        let mut budget = opts.count.saturating_mul(10);
        loop {
            cursor = scan_step(ctx, db, cursor, only, &opts, &mut found);
            if cursor == 0 || budget == 0 {
                break;
            }
            budget -= 1;
            if found.sampled >= opts.count {
                break;
            }
        }
    }
    out.array(2);
    out.bulk(itoa::Buffer::new().format(cursor).as_bytes());
    out.array(found.n);
    out.raw(&found.buf);
    Ok(())
}

/// Keys collected by SCAN, already encoded.
struct Found {
    buf: Vec<u8>,
    n: usize,
    /// Keys looked at, matching or not.
    sampled: u64,
}

/// Scans one home bucket of one slot (Valkey's `kvstoreScan`): the low [`SLOT_BITS`] of the
/// cursor are the slot, the rest the table's own cursor. When a slot is done the cursor
/// moves to the next non-empty slot; 0 means the whole database is done.
fn scan_step(
    ctx: &mut Ctx<'_>,
    db: &Db,
    cursor: u64,
    only: Option<u16>,
    opts: &ScanArgs<'_>,
    found: &mut Found,
) -> u64 {
    let mut slot = (cursor & (SLOTS as u64 - 1)) as u16;
    let mut inner = cursor >> SLOT_BITS;
    if let Some(only) = only {
        if slot > only {
            return 0;
        }
        if slot < only {
            (slot, inner) = (only, 0);
        }
    }
    let next = {
        let (replica, dbi, now) = (ctx.cfg.replica, ctx.db, ctx.now_ms);
        let (stats, events, ks, lazy) = (&mut *ctx.stats, ctx.events, ctx.ks, ctx.cfg.lazy_expire);
        let mut table = ctx.locks.slot_ref(ctx.ks, dbi, slot);
        let mut stale: Vec<Vec<u8>> = Vec::new();
        let next = table.scan(inner, |e| {
            found.sampled += 1;
            if opts.type_.is_some_and(|t| !t.eq_ignore_ascii_case(type_name(e.value()).as_bytes())) {
                return;
            }
            if opts.pattern.is_some_and(|p| !glob::matches(p, e.key(), false)) {
                return;
            }
            if expired(e, now) {
                stale.push(e.key().to_vec());
            } else {
                push_bulk(&mut found.buf, e.key());
                found.n += 1;
            }
        });
        for key in stale {
            expire_now(Expiring { ks, replica, lazy, stats, events, db: dbi }, &mut table, &key);
        }
        next
    };
    if next != 0 {
        return (next << SLOT_BITS) | u64::from(slot);
    }
    if only.is_some() {
        return 0;
    }
    let later = &db.slots()[usize::from(slot) + 1..];
    match later.iter().position(|s| s.keys() > 0) {
        Some(i) => (usize::from(slot) + 1 + i) as u64,
        None => 0,
    }
}

/// What [`expire_now`] needs of the command's context, whose slot lock the caller holds.
struct Expiring<'a, 'k> {
    ks: &'k crate::Keyspace,
    replica: bool,
    /// `lazyfree-lazy-expire`: UNLINK rather than DEL in the stream.
    lazy: bool,
    stats: &'a mut LocalStats,
    events: &'a dyn Events,
    db: usize,
}

/// Deletes a logically expired key met while walking a locked table, with the side effects
/// of a lazy expiry on lookup. A replica leaves it for its primary's DEL.
///
/// The deletion goes to the stream at once, under the slot lock, and on its own: SCAN and
/// RANDOMKEY write nothing else, and Valkey sends these unwrapped (its "Lazy-expire should
/// not be wrapped in MULTI/EXEC" tests). Before, nothing was sent at all, so a replica kept
/// every key that a SCAN found expired on its primary.
fn expire_now(x: Expiring<'_, '_>, table: &mut SlotRef<'_, '_>, key: &[u8]) {
    let Expiring { ks, replica, lazy, stats, events, db } = x;
    if replica {
        return;
    }
    let hash = crate::hash::key_hash(key);
    let Some(i) = table.find(key, hash) else { return };
    drop(table.remove_at(i));
    table.sync();
    crate::propagate::record_del(ks, db, &[key], lazy);
    stats.expired += 1;
    events.notify('x', "expired", key, db);
    events.key_touched(db, key);
}

fn randomkey(ctx: &mut Ctx<'_>, _: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(db) = ctx.ks.db_if_used(ctx.db) else {
        out.null();
        return Ok(());
    };
    let now = ctx.now_ms;
    let mut replica_tries = RANDOMKEY_REPLICA_TRIES;
    // Counters read without locks may be a command behind; give up on a database that keeps
    // looking non-empty while every table we lock is empty.
    let mut stale_counts = 0;
    loop {
        let total = db.len();
        if total == 0 || stale_counts > 1000 {
            out.null();
            return Ok(());
        }
        let all_volatile = db.volatile() == total;
        let Some(s) = nth_key_slot(db, random_u64() % total as u64) else {
            stale_counts += 1;
            continue;
        };
        let (replica, dbi) = (ctx.cfg.replica, ctx.db);
        let (stats, events, ks, lazy) = (&mut *ctx.stats, ctx.events, ctx.ks, ctx.cfg.lazy_expire);
        let mut table = ctx.locks.slot_ref(ctx.ks, dbi, s);
        let Some(i) = table.occupied_from(random_u64() as usize) else {
            stale_counts += 1;
            continue;
        };
        let e = table.at(i);
        if expired(e, now) {
            if replica {
                // The replica cannot delete it; when everything has a TTL, everything may be
                // expired, so stop looking eventually.
                replica_tries -= u32::from(all_volatile);
                if replica_tries > 0 {
                    continue;
                }
            } else {
                let key = e.key().to_vec();
                expire_now(Expiring { ks, replica, lazy, stats, events, db: dbi }, &mut table, &key);
                continue;
            }
        }
        out.bulk(table.at(i).key());
        return Ok(());
    }
}

/// The slot holding the `n`th key when keys are counted slot by slot, so every key is
/// equally likely whichever slot it is in.
fn nth_key_slot(db: &Db, mut n: u64) -> Option<u16> {
    for (i, s) in db.slots().iter().enumerate() {
        let keys = s.keys() as u64;
        if n < keys {
            return Some(i as u16);
        }
        n -= keys;
    }
    None
}

/// Which collection an element scan (HSCAN, SSCAN, ZSCAN) walks: options differ slightly.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ElemKind {
    /// HSCAN: accepts NOVALUES.
    Hash,
    /// SSCAN.
    Set,
    /// ZSCAN: accepts NOSCORES.
    Zset,
}

/// The options of an element scan, after the key and the cursor (Valkey's
/// `scanGenericCommand` for an object).
pub(super) struct ElemScanArgs<'a> {
    /// COUNT: elements to look at per call, a hint.
    pub count: u64,
    /// MATCH, unless it is a lone `*`.
    pub pattern: Option<&'a [u8]>,
    /// NOVALUES (HSCAN) or NOSCORES (ZSCAN): return only fields or members.
    pub only_keys: bool,
}

impl<'a> ElemScanArgs<'a> {
    /// Parses the options from argument 3 on. Valkey parses them only once the key was found
    /// with the right type, so callers do too.
    pub(super) fn parse(args: &Args<'a>, kind: ElemKind) -> Result<ElemScanArgs<'a>, CommandError> {
        let mut a = ElemScanArgs { count: 10, pattern: None, only_keys: false };
        let mut i = 3;
        while i < args.len() {
            let opt = args.get(i);
            match args.opt(i + 1) {
                Some(v) if opt.eq_ignore_ascii_case(b"count") => {
                    let n = super::int_arg(v)?;
                    a.count = u64::try_from(n).ok().filter(|&n| n >= 1).ok_or(CommandError::Syntax)?;
                    i += 2;
                    continue;
                }
                Some(v) if opt.eq_ignore_ascii_case(b"match") => {
                    a.pattern = (v != b"*").then_some(v);
                    i += 2;
                    continue;
                }
                _ => {}
            }
            if opt.eq_ignore_ascii_case(b"novalues") {
                if kind != ElemKind::Hash {
                    return Err(CommandError::err("NOVALUES option can only be used in HSCAN"));
                }
                a.only_keys = true;
            } else if opt.eq_ignore_ascii_case(b"noscores") {
                if kind != ElemKind::Zset {
                    return Err(CommandError::err("NOSCORES option can only be used in ZSCAN"));
                }
                a.only_keys = true;
            } else {
                return Err(CommandError::Syntax);
            }
            i += 1;
        }
        Ok(a)
    }

    /// Whether an element (a field, a member) passes MATCH.
    pub(super) fn matches(&self, elem: &[u8]) -> bool {
        self.pattern.is_none_or(|p| glob::matches(p, elem, false))
    }
}

/// Runs `step` from `cursor` the way SCAN does for one call: until the walk ends (cursor 0),
/// COUNT elements were looked at, or 10 x COUNT steps passed. `step` gets the cursor and the
/// count of elements looked at so far, and returns the next cursor.
pub(super) fn drive_scan(mut cursor: u64, count: u64, mut step: impl FnMut(u64, &mut u64) -> u64) -> u64 {
    let mut budget = count.saturating_mul(10);
    let mut sampled = 0;
    loop {
        cursor = step(cursor, &mut sampled);
        if cursor == 0 || budget == 0 || sampled >= count {
            return cursor;
        }
        budget -= 1;
    }
}

/// Writes a scan reply: the next cursor as a bulk string, then the `n` elements in `buf`.
pub(super) fn scan_reply(out: &mut ReplyBuf, cursor: u64, n: usize, buf: &[u8]) {
    out.array(2);
    out.bulk(itoa::Buffer::new().format(cursor).as_bytes());
    out.array(n);
    out.raw(buf);
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::parse_cursor;
    use crate::testkit::TestKit;

    /// Parses a SCAN reply into (cursor, keys).
    fn parse(reply: &str) -> (String, Vec<String>) {
        let lines: Vec<&str> = reply.split("\r\n").collect();
        assert_eq!(lines[0], "*2");
        let cursor = lines[2].to_string();
        let n: usize = lines[3][1..].parse().unwrap();
        let keys = (0..n).map(|i| lines[5 + 2 * i].to_string()).collect();
        (cursor, keys)
    }

    fn scan_all(t: &mut TestKit, extra: &[&str]) -> Vec<String> {
        let mut cursor = "0".to_string();
        let mut all = Vec::new();
        loop {
            let mut argv = vec!["SCAN", cursor.as_str()];
            argv.extend_from_slice(extra);
            let (next, keys) = parse(&t.run(&argv));
            all.extend(keys);
            if next == "0" {
                return all;
            }
            cursor = next;
        }
    }

    fn sorted(mut v: Vec<String>) -> Vec<String> {
        v.sort();
        v
    }

    #[test]
    fn keys_with_patterns() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["KEYS", "*"]), "*0\r\n");
        for k in ["key_x", "key_y", "key_z", "foo_a", "foo_b", "foo_c"] {
            t.run(&["SET", k, "hello"]);
        }
        let keys = |t: &mut TestKit, p: &str| sorted(parse_array(&t.run(&["KEYS", p])));
        assert_eq!(keys(&mut t, "foo*"), ["foo_a", "foo_b", "foo_c"]);
        assert_eq!(keys(&mut t, "*"), ["foo_a", "foo_b", "foo_c", "key_x", "key_y", "key_z"]);
        assert_eq!(keys(&mut t, "*_[ab]"), ["foo_a", "foo_b"]);
        assert_eq!(keys(&mut t, "key_?"), ["key_x", "key_y", "key_z"]);
        assert_eq!(keys(&mut t, "key_x"), ["key_x"]);
        assert_eq!(keys(&mut t, "nothing*"), Vec::<String>::new());
        for k in ["{a}x", "{a}y", "{a}z", "{b}a", "{b}b", "{b}c"] {
            t.run(&["SET", k, "hello"]);
        }
        assert_eq!(keys(&mut t, "{a}*"), ["{a}x", "{a}y", "{a}z"]);
        assert_eq!(keys(&mut t, "*{b}*"), ["{b}a", "{b}b", "{b}c"]);
        t.run(&["SELECT", "1"]);
        assert_eq!(t.run(&["KEYS", "*"]), "*0\r\n");
    }

    #[test]
    fn keys_skips_expired_without_deleting() {
        let mut t = TestKit::default();
        t.run(&["SET", "live", "1"]);
        t.run(&["SET", "dead", "1", "PX", "10"]);
        t.now_ms += 11;
        assert_eq!(parse_array(&t.run(&["KEYS", "*"])), ["live"]);
        assert_eq!(t.ks.db(0).len(), 2);
    }

    #[test]
    fn keys_with_pathological_patterns() {
        let mut t = TestKit::default();
        t.run(&["SET", &"a".repeat(40), "1"]);
        assert_eq!(t.run(&["KEYS", &format!("{}b", "a*".repeat(20))]), "*0\r\n");
        t.run(&["FLUSHDB"]);
        t.run(&["SET", &"a".repeat(50_000), "1"]);
        assert_eq!(t.run(&["KEYS", &"*?".repeat(50_000)]), "*0\r\n");
    }

    fn parse_array(reply: &str) -> Vec<String> {
        let lines: Vec<&str> = reply.split("\r\n").collect();
        let n: usize = lines[0][1..].parse().unwrap();
        (0..n).map(|i| lines[2 + 2 * i].to_string()).collect()
    }

    #[test]
    fn scan_returns_every_key_once() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SCAN", "0"]), "*2\r\n$1\r\n0\r\n*0\r\n");
        let mut want = BTreeSet::new();
        for i in 0..1000 {
            t.run(&["SET", &format!("key:{i}"), "v"]);
            want.insert(format!("key:{i}"));
        }
        let got = scan_all(&mut t, &[]);
        assert_eq!(got.len(), 1000, "no duplicates without rehashing in between");
        assert_eq!(got.into_iter().collect::<BTreeSet<_>>(), want);
        let got = scan_all(&mut t, &["COUNT", "1000"]);
        assert_eq!(got.len(), 1000);
        let (cursor, keys) = parse(&t.run(&["SCAN", "0", "COUNT", "100000"]));
        assert_eq!((cursor.as_str(), keys.len()), ("0", 1000), "a big COUNT finishes in one call");
        let (cursor, keys) = parse(&t.run(&["SCAN", "0", "COUNT", "9223372036854775807"]));
        assert_eq!((cursor.as_str(), keys.len()), ("0", 1000), "the step budget saturates");
        t.proto = hotkv_protocol::Protocol::Resp3;
        let (_, keys) = parse(&t.run(&["SCAN", "0", "MATCH", "key:999"]));
        assert!(keys.len() <= 1, "RESP3 uses the same arrays");
    }

    #[test]
    fn scan_match_and_type() {
        let mut t = TestKit::default();
        for i in 0..200 {
            t.run(&["SET", &format!("key:{i}"), "v"]);
            t.run(&["SET", &format!("other:{i}"), "v"]);
        }
        let got = scan_all(&mut t, &["MATCH", "key:1?"]);
        assert_eq!(sorted(got), (10..20).map(|i| format!("key:{i}")).collect::<Vec<_>>());
        assert_eq!(scan_all(&mut t, &["MATCH", "*"]).len(), 400);
        assert_eq!(scan_all(&mut t, &["TYPE", "string"]).len(), 400);
        assert_eq!(scan_all(&mut t, &["TYPE", "LIST", "MATCH", "key*"]).len(), 0);
        assert_eq!(scan_all(&mut t, &["type", "string", "match", "other:199", "count", "5"]), ["other:199"]);
        for k in ["{tag}a", "{tag}b", "x{tag}"] {
            t.run(&["SET", k, "v"]);
        }
        assert_eq!(sorted(scan_all(&mut t, &["MATCH", "{tag}*"])), ["{tag}a", "{tag}b"]);
        // A pattern pinned to one slot jumps straight there and ends after it.
        let (cursor, keys) = parse(&t.run(&["SCAN", "0", "MATCH", "{tag}*", "COUNT", "1000"]));
        assert_eq!((cursor.as_str(), keys.len()), ("0", 2));
        let past = (crate::slot::key_slot(b"tag") + 1).to_string();
        assert_eq!(t.run(&["SCAN", &past, "MATCH", "{tag}*"]), "*2\r\n$1\r\n0\r\n*0\r\n");
    }

    #[test]
    fn scan_errors() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SCAN", "x"]), "-ERR invalid cursor\r\n");
        assert_eq!(t.run(&["SCAN", "-1"]), "-ERR invalid cursor\r\n");
        assert_eq!(t.run(&["SCAN", "18446744073709551616"]), "-ERR invalid cursor\r\n");
        assert_eq!(t.run(&["SCAN", "0", "COUNT", "0"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SCAN", "0", "COUNT", "-1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SCAN", "0", "COUNT", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SCAN", "0", "COUNT"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SCAN", "0", "MATCH"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SCAN", "0", "FOO", "bar"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SCAN", "0", "TYPE", "blob"]), "-ERR unknown type name 'blob'\r\n");
        assert_eq!(t.run(&["SCAN", "0", "NOVALUES"]), "-ERR NOVALUES option can only be used in HSCAN\r\n");
        assert_eq!(t.run(&["SCAN", "0", "NOSCORES"]), "-ERR NOSCORES option can only be used in ZSCAN\r\n");
        assert_eq!(t.run(&["SCAN"]), "-ERR wrong number of arguments for 'scan' command\r\n");
        assert_eq!(t.run(&["SCAN", "18446744073709551615"]), "*2\r\n$1\r\n0\r\n*0\r\n", "any cursor is valid");
    }

    #[test]
    fn cursor_parsing_follows_string2ull() {
        assert_eq!(parse_cursor(b"0"), Some(0));
        assert_eq!(parse_cursor(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(parse_cursor(b"18446744073709551616"), None);
        assert_eq!(parse_cursor(b"+5"), Some(5));
        assert_eq!(parse_cursor(b" 5"), Some(5));
        assert_eq!(parse_cursor(b"007"), Some(7));
        assert_eq!(parse_cursor(b"-05"), Some(u64::MAX - 4), "strtoull wraps negatives");
        assert_eq!(parse_cursor(b"-5"), None, "but a plain negative integer is refused");
        assert_eq!(parse_cursor(b"12\0junk"), Some(12), "C strings end at NUL");
        for bad in [&b""[..], b" ", b"5 ", b"0x10", b"1e3", b"+", b"-"] {
            assert_eq!(parse_cursor(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn scan_is_consistent_while_keys_are_added() {
        let mut t = TestKit::default();
        let mut present = BTreeSet::new();
        // Most keys share one slot, so the table being scanned grows many times mid-scan.
        for i in 0..600 {
            let k = if i % 4 == 0 { format!("old:{i}") } else { format!("{{t}}old:{i}") };
            t.run(&["SET", &k, "v"]);
            present.insert(k);
        }
        let mut cursor = "0".to_string();
        let mut seen = BTreeSet::new();
        let mut added = 0;
        loop {
            let (next, keys) = parse(&t.run(&["SCAN", &cursor, "COUNT", "7"]));
            seen.extend(keys);
            // Grow the tables a lot between the first calls, forcing rehashes mid-scan (then
            // stop, or the scan would never catch up).
            if added < 20_000 {
                for _ in 0..200 {
                    t.run(&["SET", &format!("new:{added}"), "v"]);
                    t.run(&["SET", &format!("{{t}}new:{added}"), "v"]);
                    added += 2;
                }
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        assert!(t.ks.db(0).slot(crate::slot::key_slot(b"t")).keys() > 10_000);
        for k in &present {
            assert!(seen.contains(k), "{k} present for the whole scan but never returned");
        }
    }

    #[test]
    fn scan_skips_and_deletes_expired_keys() {
        let mut t = TestKit::default();
        t.run(&["SET", "live", "1"]);
        t.run(&["SET", "dead", "1", "PX", "10"]);
        t.run(&["SET", "dead2", "1", "PX", "10"]);
        t.now_ms += 11;
        t.events.take();
        assert_eq!(scan_all(&mut t, &["MATCH", "dead"]), Vec::<String>::new());
        assert_eq!(t.events.take(), ["x:expired:dead@0"], "only keys that passed the filters");
        assert_eq!(scan_all(&mut t, &[]), ["live"]);
        assert_eq!((t.ks.db(0).len(), t.stats.expired), (1, 2));
        t.cfg.replica = true;
        t.run(&["SET", "r", "1", "PX", "10"]);
        t.now_ms += 11;
        assert_eq!(scan_all(&mut t, &[]), ["live"]);
        assert_eq!(t.ks.db(0).len(), 2, "a replica only hides them");
    }

    #[test]
    fn randomkey() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["RANDOMKEY"]), "$-1\r\n");
        t.run(&["SET", "x", "10"]);
        t.run(&["DEL", "x"]);
        assert_eq!(t.run(&["RANDOMKEY"]), "$-1\r\n");
        for i in 0..50 {
            t.run(&["SET", &format!("k{i}"), "v"]);
        }
        let mut seen = BTreeSet::new();
        for _ in 0..500 {
            let r = t.run(&["RANDOMKEY"]);
            assert!(r.starts_with("$2\r\nk") || r.starts_with("$3\r\nk"), "{r}");
            seen.insert(r);
        }
        assert!(seen.len() > 30, "spread over keys: {}", seen.len());
    }

    #[test]
    fn randomkey_skips_expired_keys() {
        let mut t = TestKit::default();
        for i in 0..20 {
            t.run(&["SET", &format!("dead{i}"), "v", "PX", "5"]);
        }
        t.run(&["SET", "live", "v"]);
        t.now_ms += 6;
        assert_eq!(t.run(&["RANDOMKEY"]), "$4\r\nlive\r\n");
        t.run(&["PEXPIRE", "live", "1"]);
        t.now_ms += 2;
        assert_eq!(t.run(&["RANDOMKEY"]), "$-1\r\n", "all expired: deleted along the way");
        assert_eq!(t.ks.db(0).len(), 0);
        t.cfg.replica = true;
        t.run(&["SET", "r", "v", "PX", "1"]);
        t.now_ms += 2;
        assert_eq!(t.run(&["RANDOMKEY"]), "$1\r\nr\r\n", "a replica of only expired keys gives up");
    }
}
