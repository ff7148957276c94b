//! Bitmap commands over string values: SETBIT, GETBIT, BITCOUNT and BITPOS, and the helpers
//! the other bitmap files share (BITOP is in `bitop.rs`, BITFIELD in `bitfield.rs`).
//!
//! Bit 0 is the most significant bit of the first byte. Reads treat a missing key, and every
//! byte past the end of a string, as zeros. Writes grow the string with zero bytes and leave
//! it a "raw" string (an `Object::Str` with room to grow), as Valkey's
//! `lookupStringForBitCommand` does. Counting and searching work on 64-bit words.

use hotkv_protocol::{Args, ReplyBuf, parse_i64};

use super::range::prealloc;
use super::{EngineCmd, EngineFn, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, KeyMut, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;

/// Bitmap command rows of this file.
pub static COMMANDS: &[Spec] = &[
    row(
        "setbit",
        4,
        flags::WRITE | flags::DENYOOM,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE)],
        "2.2.0",
        "Sets or clears the bit at offset of the string value. Creates the key if it doesn't exist.",
        "O(1)",
        setbit,
    ),
    row(
        "getbit",
        3,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        "2.2.0",
        "Returns a bit value by offset.",
        "O(1)",
        getbit,
    ),
    row(
        "bitcount",
        -2,
        flags::READONLY,
        RO_ACCESS,
        "2.6.0",
        "Counts the number of set bits (population counting) in a string.",
        "O(N)",
        bitcount,
    ),
    row(
        "bitpos",
        -3,
        flags::READONLY,
        RO_ACCESS,
        "2.8.7",
        "Finds the first set (1) or clear (0) bit in a string.",
        "O(N)",
        bitpos,
    ),
];

/// A row of a bitmap command: the BITMAP ACL category and the `bitmap` group.
#[allow(clippy::too_many_arguments)]
pub(super) const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: EngineFn,
) -> Spec {
    CommandSpec::new(
        name,
        arity,
        flags,
        acl::BITMAP,
        keys,
        "bitmap",
        since,
        summary,
        complexity,
        EngineCmd { run, plan: LockPlan::Keys },
    )
}

/// One read-only key at argument 1.
pub(super) const RO_ACCESS: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];

/// How a bit write found its string.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Growth {
    /// The key did not exist; it was created zero-filled (and counted as a change).
    Created,
    /// The string grew with zero bytes.
    Grew,
    /// The string was long enough.
    Kept,
}

/// Valkey's `lookupStringForBitCommand`: runs `f` on the string at `key` made at least `len`
/// bytes long (zero padded), creating the key if it is missing. Fails with WRONGTYPE before
/// changing anything. A created key is stored (and counted as modified) here; the caller
/// signals other changes with [`signal_setbit`].
pub(super) fn with_bits<R>(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    len: usize,
    f: impl FnOnce(&mut [u8], Growth) -> R,
) -> Result<(R, Growth), CommandError> {
    if let Some(mut k) = ctx.write(key)? {
        let v = raw_mut(&mut k)?;
        let growth = if len > v.len() {
            if v.capacity() < len {
                v.reserve_exact(prealloc(len) - v.len());
            }
            v.resize(len, 0);
            Growth::Grew
        } else {
            Growth::Kept
        };
        return Ok((f(v, growth), growth));
    }
    let mut v = vec![0; len];
    let r = f(&mut v, Growth::Created);
    ctx.set(key, NewValue::Object(Object::Str(v)), Ttl::Clear)?;
    Ok((r, Growth::Created))
}

/// Records `changes` changes to a bit string (WATCH, dirty count) and sends `setbit`.
pub(super) fn signal_setbit(ctx: &mut Ctx<'_>, key: &[u8], growth: Growth, changes: u64) {
    if changes == 0 {
        return;
    }
    // A created key was already counted once when it was stored.
    if growth != Growth::Created {
        ctx.modified(key);
    }
    ctx.stats.dirty += changes - 1;
    ctx.events.notify('$', "setbit", key, ctx.db);
}

/// The string at `k` as Valkey's "raw" string (an `Object::Str` with room to grow),
/// converting an inline value first, as `dbUnshareStringValue` does before an in-place edit.
/// WRONGTYPE for other types.
pub(super) fn raw_mut<'k>(k: &'k mut KeyMut<'_>) -> Result<&'k mut Vec<u8>, CommandError> {
    if k.entry_mut().object_mut().is_none() {
        let v = k.str()?.to_vec();
        k.set_value(NewValue::Object(Object::Str(v)));
    }
    match k.entry_mut().object_mut() {
        Some(Object::Str(v)) => Ok(v),
        _ => Err(CommandError::WrongType),
    }
}

/// Parses a bit offset as Valkey's `getBitOffsetFromArgument`. With `hash_bits` (BITFIELD),
/// `#n` means `n * hash_bits`. The byte holding the bit must lie below `proto-max-bulk-len`.
pub(super) fn bit_offset(arg: &[u8], max_bulk: u64, hash_bits: Option<u32>) -> Result<u64, CommandError> {
    let bad = || CommandError::err("bit offset is not an integer or out of range");
    let (digits, scale) = match (hash_bits, arg.split_first()) {
        (Some(bits), Some((b'#', rest))) => (rest, i64::from(bits)),
        _ => (arg, 1),
    };
    let n = parse_i64(digits).and_then(|n| n.checked_mul(scale)).ok_or_else(bad)?;
    if n < 0 || (n >> 3) as u64 >= max_bulk {
        return Err(bad());
    }
    Ok(n as u64)
}

fn setbit(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let offset = bit_offset(args.get(2), ctx.cfg.proto_max_bulk_len, None)?;
    let on = match parse_i64(args.get(3)) {
        Some(0) => false,
        Some(1) => true,
        _ => return Err(CommandError::err("bit is not an integer or out of range")),
    };
    let key = args.get(1);
    let byte = (offset >> 3) as usize;
    let mask = 0x80u8 >> (offset & 7);
    let ((old, changed), growth) = with_bits(ctx, key, byte + 1, |v, growth| {
        let old = v[byte] & mask != 0;
        if on {
            v[byte] |= mask;
        } else {
            v[byte] &= !mask;
        }
        (old, growth != Growth::Kept || old != on)
    })?;
    signal_setbit(ctx, key, growth, u64::from(changed));
    out.int(i64::from(old));
    Ok(())
}

fn getbit(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let offset = bit_offset(args.get(2), ctx.cfg.proto_max_bulk_len, None)?;
    let bit = match ctx.read(args.get(1))? {
        Some(k) => {
            let s = k.str()?;
            s.get((offset >> 3) as usize).is_some_and(|b| b & (0x80 >> (offset & 7)) != 0)
        }
        None => false,
    };
    out.int(i64::from(bit));
    Ok(())
}

/// Whether BITCOUNT/BITPOS indexes count bytes or bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Byte,
    Bit,
}

/// BITCOUNT/BITPOS's `start [end [BYTE|BIT]]`.
#[derive(Debug, Clone, Copy)]
struct Span {
    start: i64,
    end: Option<i64>,
    unit: Unit,
}

impl Span {
    /// Parses the range starting at argument `at`, in Valkey's order: start, then the unit
    /// (so a bad unit is a syntax error even when `end` is not a number), then end.
    fn parse(args: &Args<'_>, at: usize) -> Result<Span, CommandError> {
        let start = int_arg(args.get(at))?;
        let unit = match args.opt(at + 2) {
            None => Unit::Byte,
            Some(u) if u.eq_ignore_ascii_case(b"bit") => Unit::Bit,
            Some(u) if u.eq_ignore_ascii_case(b"byte") => Unit::Byte,
            Some(_) => return Err(CommandError::Syntax),
        };
        let end = args.opt(at + 1).map(int_arg).transpose()?;
        Ok(Span { start, end, unit })
    }

    /// The inclusive bit range selected in a string of `len` bytes: negative indexes count
    /// from the end, both ends are clamped into the string; `None` when nothing is selected.
    fn bits(self, len: usize) -> Option<(u64, u64)> {
        let bytes = len as i64;
        let total = if self.unit == Unit::Bit { bytes * 8 } else { bytes };
        let (mut start, mut end) = (self.start, self.end.unwrap_or(bytes - 1));
        if start < 0 {
            start += total;
        }
        if end < 0 {
            end += total;
        }
        let (start, end) = (start.max(0), end.max(0).min(total - 1));
        if start > end {
            return None;
        }
        let (start, end) = (start as u64, end as u64);
        match self.unit {
            Unit::Byte => Some((start * 8, end * 8 + 7)),
            Unit::Bit => Some((start, end)),
        }
    }
}

/// The whole string as a bit range, `None` when empty.
fn whole(len: usize) -> Option<(u64, u64)> {
    (len > 0).then(|| (0, len as u64 * 8 - 1))
}

fn bitcount(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    if args.len() > 5 {
        return Err(CommandError::Syntax);
    }
    let span = if args.len() > 2 { Some(Span::parse(&args, 2)?) } else { None };
    let Some(k) = ctx.read(args.get(1))? else {
        out.int(0);
        return Ok(());
    };
    let s = k.str()?;
    let bits = match span {
        // Two negative indexes in the wrong order select nothing, before they are clamped
        // into the string (where they could both land on the first byte).
        Some(Span { start, end: Some(end), .. }) if start < 0 && end < 0 && start > end => None,
        Some(span) => span.bits(s.len()),
        None => whole(s.len()),
    };
    out.int(bits.map_or(0, |(first, last)| count_bits(s, first, last)) as i64);
    Ok(())
}

fn bitpos(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let bit = match parse_i64(args.get(2)) {
        Some(b @ (0 | 1)) => b == 1,
        Some(_) => return Err(CommandError::err("The bit argument must be 1 or 0.")),
        None => return Err(CommandError::NotInteger),
    };
    if args.len() > 6 {
        return Err(CommandError::Syntax);
    }
    let span = if args.len() > 3 { Some(Span::parse(&args, 3)?) } else { None };
    let Some(k) = ctx.read(args.get(1))? else {
        // A missing key is an endless run of zeros.
        out.int(if bit { -1 } else { 0 });
        return Ok(());
    };
    let s = k.str()?;
    let bits = match span {
        Some(span) => span.bits(s.len()),
        None => whole(s.len()),
    };
    let end_given = span.is_some_and(|s| s.end.is_some());
    let pos = match bits {
        None => -1,
        Some((first, last)) => match find_bit(s, first, last, bit) {
            Some(p) => p as i64,
            // Looking for a 0 without an explicit end, the string counts as padded with zeros
            // on the right, so the answer is the first bit past it.
            None if !bit && !end_given => last as i64 + 1,
            None => -1,
        },
    };
    out.int(pos);
    Ok(())
}

/// Eight bytes as a native-endian word (the caller passes exact 8-byte chunks).
pub(super) fn word(b: &[u8]) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(b);
    u64::from_ne_bytes(w)
}

/// Set bits of `s`, a word at a time.
pub(super) fn popcount(s: &[u8]) -> u64 {
    let mut words = s.chunks_exact(8);
    let mut n: u64 = (&mut words).map(|w| u64::from(word(w).count_ones())).sum();
    n += words.remainder().iter().map(|b| u64::from(b.count_ones())).sum::<u64>();
    n
}

/// Set bits of `s` between bit `first` and bit `last` (inclusive, both inside `s`).
fn count_bits(s: &[u8], first: u64, last: u64) -> u64 {
    let (fb, lb) = ((first / 8) as usize, (last / 8) as usize);
    let before = s[fb] & !(0xFFu8 >> (first % 8));
    let after = s[lb] & (0xFFu16 >> (last % 8 + 1)) as u8;
    popcount(&s[fb..=lb]) - u64::from(before.count_ones()) - u64::from(after.count_ones())
}

/// The first bit equal to `bit` between bit `first` and bit `last` (inclusive, inside `s`).
fn find_bit(s: &[u8], first: u64, last: u64, bit: bool) -> Option<u64> {
    let (fb, lb) = ((first / 8) as usize, (last / 8) as usize);
    // After flipping, the bits we look for are the ones.
    let flip = if bit { 0 } else { 0xFF };
    let head = 0xFFu8 >> (first % 8);
    let tail = !((0xFFu16 >> (last % 8 + 1)) as u8);
    let hit = |i: usize, mask: u8| {
        let m = (s[i] ^ flip) & mask;
        (m != 0).then(|| i as u64 * 8 + u64::from(m.leading_zeros()))
    };
    if fb == lb {
        return hit(fb, head & tail);
    }
    if let Some(p) = hit(fb, head) {
        return Some(p);
    }
    if let Some(i) = first_byte_not(&s[fb + 1..lb], flip) {
        return hit(fb + 1 + i, 0xFF);
    }
    hit(lb, tail)
}

/// Index of the first byte that is not `skip`, skipping whole words first.
fn first_byte_not(s: &[u8], skip: u8) -> Option<usize> {
    let skip_word = u64::from_ne_bytes([skip; 8]);
    let mut base = 0;
    for w in s.chunks_exact(8) {
        if word(w) != skip_word {
            break;
        }
        base += 8;
    }
    s[base..].iter().position(|&b| b != skip).map(|i| base + i)
}

#[cfg(test)]
pub(super) mod tests {
    use proptest::prelude::*;

    use super::{count_bits, find_bit, popcount};
    use crate::testkit::TestKit;

    const NOT_OFFSET: &str = "-ERR bit offset is not an integer or out of range\r\n";
    const WRONGTYPE: &str = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";

    /// Stores binary `value` at `key`.
    pub(in crate::cmd) fn set(t: &mut TestKit, key: &str, value: &[u8]) {
        assert_eq!(t.run_bytes(&[b"SET".to_vec(), key.into(), value.to_vec()]), "+OK\r\n");
    }

    /// The exact bytes of the string at `key`.
    pub(in crate::cmd) fn get(t: &mut TestKit, key: &str) -> Vec<u8> {
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

    /// Makes `key` hold a non-string value with whichever container command this build has
    /// (lists, sets and hashes arrive from other branches). Returns false while there is none,
    /// so WRONGTYPE checks start running as soon as a second type exists.
    pub(in crate::cmd) fn non_string(t: &mut TestKit, key: &str) -> bool {
        let tries: [&[&str]; 4] =
            [&["RPUSH", key, "x"], &["SADD", key, "x"], &["HSET", key, "f", "v"], &["ZADD", key, "1", "x"]];
        tries.iter().any(|argv| t.run(argv).starts_with(':'))
    }

    #[test]
    fn non_string_values_are_wrongtype() {
        let mut t = TestKit::default();
        if !non_string(&mut t, "l") {
            return;
        }
        for argv in [
            &["SETBIT", "l", "0", "1"][..],
            &["GETBIT", "l", "0"],
            &["BITCOUNT", "l"],
            &["BITCOUNT", "l", "-6", "-7"],
            &["BITCOUNT", "l", "-6", "-15", "BIT"],
            &["BITPOS", "l", "0"],
            &["BITPOS", "l", "1", "10", "100"],
            &["BITOP", "XOR", "d", "a", "l", "b"],
        ] {
            assert_eq!(t.run(argv), WRONGTYPE, "{argv:?}");
        }
        assert_eq!(t.run(&["EXISTS", "d"]), ":0\r\n");
        assert_eq!(t.run(&["BITCOUNT", "l", "a", "b"]), "-ERR value is not an integer or out of range\r\n");
    }

    #[test]
    fn setbit_grows_zero_padded_and_returns_the_old_bit() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SETBIT", "k", "7", "1"]), ":0\r\n");
        assert_eq!(get(&mut t, "k"), [0x01]);
        assert_eq!(t.run(&["SETBIT", "k", "7", "1"]), ":1\r\n");
        assert_eq!(t.run(&["SETBIT", "k", "0", "1"]), ":0\r\n");
        assert_eq!(get(&mut t, "k"), [0x81]);
        assert_eq!(t.run(&["SETBIT", "k", "23", "1"]), ":0\r\n");
        assert_eq!(get(&mut t, "k"), [0x81, 0, 0x01]);
        assert_eq!(t.run(&["SETBIT", "k", "7", "0"]), ":1\r\n");
        assert_eq!(get(&mut t, "k"), [0x80, 0, 0x01]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "k"]), "$3\r\nraw\r\n");
        // An inline string becomes raw and keeps its TTL.
        t.run(&["SET", "s", "@", "EX", "100"]);
        assert_eq!(t.run(&["SETBIT", "s", "6", "1"]), ":0\r\n");
        assert_eq!(t.run(&["GET", "s"]), "$1\r\nB\r\n");
        assert_eq!(t.run(&["TTL", "s"]), ":100\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "s"]), "$3\r\nraw\r\n");
    }

    #[test]
    fn setbit_signals_only_real_changes() {
        let mut t = TestKit::default();
        let dirty = |t: &TestKit| t.stats.dirty;
        t.run(&["SETBIT", "k", "0", "0"]);
        assert_eq!(dirty(&t), 1, "creating the key is a change");
        assert_eq!(t.events.take(), ["n:new:k@0", "$:setbit:k@0"]);
        t.run(&["SETBIT", "k", "0", "0"]);
        assert_eq!((dirty(&t), t.events.take().len()), (1, 0), "same bit, same length");
        t.run(&["SETBIT", "k", "0", "1"]);
        t.run(&["SETBIT", "k", "0", "1"]);
        assert_eq!(dirty(&t), 2);
        t.run(&["SETBIT", "k", "90", "0"]);
        assert_eq!(dirty(&t), 3, "growing is a change even when the bit stays 0");
        assert_eq!(t.events.take(), ["$:setbit:k@0", "$:setbit:k@0"]);
    }

    #[test]
    fn setbit_and_getbit_errors() {
        let mut t = TestKit::default();
        let bad_bit = "-ERR bit is not an integer or out of range\r\n";
        assert_eq!(t.run(&["SETBIT", "k", "0", "2"]), bad_bit);
        assert_eq!(t.run(&["SETBIT", "k", "0", "-1"]), bad_bit);
        assert_eq!(t.run(&["SETBIT", "k", "0", "x"]), bad_bit);
        assert_eq!(t.run(&["SETBIT", "k", "-1", "1"]), NOT_OFFSET);
        assert_eq!(t.run(&["SETBIT", "k", "x", "1"]), NOT_OFFSET);
        assert_eq!(t.run(&["SETBIT", "k", "#1", "1"]), NOT_OFFSET, "# is BITFIELD-only");
        assert_eq!(t.run(&["SETBIT", "k", "4294967296", "1"]), NOT_OFFSET, "byte 512MB is past the limit");
        assert_eq!(t.run(&["GETBIT", "k", "4294967296"]), NOT_OFFSET);
        assert_eq!(t.run(&["GETBIT", "k", "-1"]), NOT_OFFSET);
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
        assert_eq!(t.run(&["SETBIT", "k"]), "-ERR wrong number of arguments for 'setbit' command\r\n");
    }

    #[test]
    fn offsets_at_the_proto_max_bulk_len_limit() {
        let mut t = TestKit::default();
        t.cfg.proto_max_bulk_len = 16;
        assert_eq!(t.run(&["SETBIT", "k", "127", "1"]), ":0\r\n", "last bit of byte 15");
        assert_eq!(t.run(&["STRLEN", "k"]), ":16\r\n");
        assert_eq!(t.run(&["SETBIT", "k", "128", "1"]), NOT_OFFSET);
        assert_eq!(t.run(&["GETBIT", "k", "127"]), ":1\r\n");
        assert_eq!(t.run(&["GETBIT", "k", "128"]), NOT_OFFSET);
        // The default limit allows the last bit of 512MB; reading it allocates nothing.
        t.cfg = Default::default();
        assert_eq!(t.run(&["GETBIT", "k", "4294967295"]), ":0\r\n");
    }

    #[test]
    fn getbit_reads_past_the_end_and_missing_keys_as_zero() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["GETBIT", "nokey", "0"]), ":0\r\n");
        t.run(&["SET", "k", "`"]);
        let bits: Vec<i64> = (0..8).map(|i| int(&mut t, &["GETBIT", "k", &i.to_string()])).collect();
        assert_eq!(bits, [0, 1, 1, 0, 0, 0, 0, 0]);
        assert_eq!(t.run(&["GETBIT", "k", "8"]), ":0\r\n");
        assert_eq!(t.run(&["GETBIT", "k", "10000"]), ":0\r\n");
        t.run(&["SET", "n", "1"]);
        assert_eq!(t.run(&["GETBIT", "n", "7"]), ":1\r\n", "integers are read as their digits");
    }

    #[test]
    fn bitcount_vectors_and_ranges() {
        let mut t = TestKit::default();
        for (v, n) in [(&b""[..], 0), (b"\xaa", 4), (b"\x00\x00\xff", 8), (b"foobar", 26), (b"123", 10)] {
            set(&mut t, "s", v);
            assert_eq!(int(&mut t, &["BITCOUNT", "s"]), n);
            assert_eq!(int(&mut t, &["BITCOUNT", "s", "0", "-1", "BIT"]), n);
        }
        set(&mut t, "s", b"foobar");
        let c = |t: &mut TestKit, a: &[&str]| int(t, &[&["BITCOUNT", "s"], a].concat());
        assert_eq!(c(&mut t, &["1"]), 22, "just a start (Valkey 8)");
        assert_eq!(c(&mut t, &["-1"]), 4);
        assert_eq!(c(&mut t, &["1000"]), 0);
        assert_eq!(c(&mut t, &["1", "-2"]), 18);
        assert_eq!(c(&mut t, &["-2", "1"]), 0);
        assert_eq!(c(&mut t, &["-1000", "0"]), 4);
        assert_eq!(c(&mut t, &["-6", "-7"]), 0, "two negatives in the wrong order");
        assert_eq!(c(&mut t, &["-7", "-6"]), 4, "both clamp to the first byte");
        assert_eq!(c(&mut t, &["10", "14", "BIT"]), 4);
        assert_eq!(c(&mut t, &["3", "29", "bit"]), 16);
        assert_eq!(c(&mut t, &["3", "-19", "BIT"]), 16);
        assert_eq!(c(&mut t, &["-2", "1", "BIT"]), 0);
        assert_eq!(c(&mut t, &["0", "1000", "byte"]), 26);
        set(&mut t, "s", b"ab");
        assert_eq!(c(&mut t, &["1", "-1"]), 3);
        set(&mut t, "s", b"__PPxxxxxxxxxxxxxxxxRR__");
        assert_eq!(c(&mut t, &["2", "-3"]), 74, "misaligned prefix, full words, remainder");
        assert_eq!(int(&mut t, &["BITCOUNT", "nokey", "0", "1000", "BIT"]), 0);
        assert_eq!(int(&mut t, &["BITCOUNT", "nokey", "-6", "-7"]), 0);
    }

    #[test]
    fn bitcount_errors_in_valkeys_order() {
        let mut t = TestKit::default();
        for key_exists in [false, true] {
            if key_exists {
                t.run(&["SET", "s", "1"]);
            }
            assert_eq!(t.run(&["BITCOUNT", "s", "0", "1", "hello"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["BITCOUNT", "s", "0", "1", "hello", "x"]), "-ERR syntax error\r\n");
            assert_eq!(t.run(&["BITCOUNT", "s", "0", "x", "hello"]), "-ERR syntax error\r\n", "unit before end");
            assert_eq!(t.run(&["BITCOUNT", "s", "a", "b"]), "-ERR value is not an integer or out of range\r\n");
            assert_eq!(t.run(&["BITCOUNT", "s", "0", "b", "BIT"]), "-ERR value is not an integer or out of range\r\n");
        }
    }

    #[test]
    fn bitpos_without_and_with_an_end() {
        let mut t = TestKit::default();
        let p = |t: &mut TestKit, a: &[&str]| int(t, &[&["BITPOS", "s"], a].concat());
        assert_eq!(p(&mut t, &["0"]), 0, "missing key: endless zeros");
        assert_eq!(p(&mut t, &["1"]), -1);
        assert_eq!(p(&mut t, &["0", "0", "-1", "BIT"]), 0);
        set(&mut t, "s", b"\xff\xf0\x00");
        assert_eq!(p(&mut t, &["0"]), 12);
        assert_eq!(p(&mut t, &["0", "1"]), 12);
        assert_eq!(p(&mut t, &["0", "1", "-1", "bit"]), 12);
        set(&mut t, "s", b"\x00\x0f\xff");
        assert_eq!(p(&mut t, &["1"]), 12);
        assert_eq!(p(&mut t, &["1", "1", "-1", "BIT"]), 12);
        set(&mut t, "s", b"\xff\xff\xff");
        assert_eq!(p(&mut t, &["0"]), 24, "no end: the string is padded with zeros");
        assert_eq!(p(&mut t, &["0", "0"]), 24);
        assert_eq!(p(&mut t, &["0", "0", "-1"]), -1, "an explicit end stops there");
        assert_eq!(p(&mut t, &["0", "0", "-1", "BIT"]), -1);
        set(&mut t, "s", b"\x00\xff\x00");
        assert_eq!(p(&mut t, &["0", "1", "-1"]), 16);
        assert_eq!(p(&mut t, &["0", "2", "200"]), 16);
        assert_eq!(p(&mut t, &["0", "1", "1"]), -1);
        assert_eq!(p(&mut t, &["0", "8", "8", "BIT"]), -1);
        assert_eq!(p(&mut t, &["1", "0", "-1"]), 8);
        assert_eq!(p(&mut t, &["1", "2", "-1"]), -1);
        assert_eq!(p(&mut t, &["1", "16", "200", "BIT"]), -1);
        assert_eq!(p(&mut t, &["1", "8", "8", "BIT"]), 8);
        assert_eq!(p(&mut t, &["1", "9", "14", "BIT"]), 9);
        assert_eq!(p(&mut t, &["0", "9", "14", "BIT"]), -1);
        assert_eq!(p(&mut t, &["1", "-6", "-7"]), -1, "no BITCOUNT-style shortcut; byte 0 is searched");
        assert_eq!(p(&mut t, &["0", "3", "1"]), -1, "empty range");
        set(&mut t, "s", b"");
        assert_eq!(p(&mut t, &["0"]), -1, "an empty string has no bits at all");
        assert_eq!(p(&mut t, &["1"]), -1);
    }

    #[test]
    fn bitpos_across_words() {
        let mut t = TestKit::default();
        for (fill, last, bit) in [(0xffu8, 0x0fu8, "0"), (0x00, 0xf0, "1")] {
            let mut v = vec![fill; 27];
            v.push(last);
            set(&mut t, "s", &v);
            for start in 0..9 {
                assert_eq!(int(&mut t, &["BITPOS", "s", bit, &start.to_string()]), 216);
                let start = (start * 8 + 1).to_string();
                assert_eq!(int(&mut t, &["BITPOS", "s", bit, &start, "-1", "BIT"]), 216);
            }
        }
        let zeros = [0u8; 100];
        for n in [0, 1, 7, 8, 9, 17, 100] {
            set(&mut t, "s", &zeros[..n]);
            assert_eq!(int(&mut t, &["BITPOS", "s", "1"]), -1);
            assert_eq!(int(&mut t, &["BITPOS", "s", "1", "0", "-1", "BIT"]), -1);
        }
    }

    #[test]
    fn bitpos_errors() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["BITPOS", "s", "2"]), "-ERR The bit argument must be 1 or 0.\r\n");
        assert_eq!(t.run(&["BITPOS", "s", "a"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["BITPOS", "s", "0", "a", "b"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["BITPOS", "s", "0", "1", "hello", "hello2"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["BITPOS", "s", "0", "0", "1", "hello"]), "-ERR syntax error\r\n");
    }

    #[test]
    fn word_helpers_match_bit_by_bit_loops() {
        let s: Vec<u8> = (0..67u32).map(|i| (i.wrapping_mul(0x9d) ^ (i >> 2)) as u8).collect();
        let bit = |i: u64| s[(i / 8) as usize] & (0x80 >> (i % 8)) != 0;
        assert_eq!(popcount(&s), (0..s.len() as u64 * 8).filter(|&i| bit(i)).count() as u64);
        for first in (0..536).step_by(7) {
            for last in (first..536).step_by(11) {
                assert_eq!(count_bits(&s, first, last), (first..=last).filter(|&i| bit(i)).count() as u64);
                for want in [false, true] {
                    assert_eq!(find_bit(&s, first, last, want), (first..=last).find(|&i| bit(i) == want));
                }
            }
        }
    }

    proptest! {
        #[test]
        fn setbit_getbit_bitcount_agree_with_a_bool_model(
            writes in proptest::collection::vec((0u64..300, any::<bool>()), 1..60),
            ranges in proptest::collection::vec((-50i64..50, -50i64..50, any::<bool>()), 1..8),
        ) {
            let mut t = TestKit::default();
            let mut model: Vec<bool> = Vec::new();
            for (offset, on) in writes {
                let old = model.get(offset as usize).copied().unwrap_or(false);
                let want = format!(":{}\r\n", u8::from(old));
                prop_assert_eq!(t.run(&["SETBIT", "k", &offset.to_string(), if on { "1" } else { "0" }]), want);
                let len = (offset as usize / 8 + 1) * 8;
                if model.len() < len {
                    model.resize(len, false);
                }
                model[offset as usize] = on;
            }
            for (i, &b) in model.iter().enumerate() {
                prop_assert_eq!(int(&mut t, &["GETBIT", "k", &i.to_string()]), i64::from(b));
            }
            prop_assert_eq!(int(&mut t, &["BITCOUNT", "k"]), model.iter().filter(|&&b| b).count() as i64);
            for (start, end, bits) in ranges {
                let unit = if bits { 1 } else { 8 };
                let total = (model.len() / unit) as i64;
                let norm = |i: i64| if i < 0 { (i + total).max(0) } else { i };
                let (s, e) = (norm(start), norm(end).min(total - 1));
                let want = if (start < 0 && end < 0 && start > end) || s > e {
                    0
                } else {
                    model[s as usize * unit..(e as usize + 1) * unit].iter().filter(|&&b| b).count() as i64
                };
                let unit_arg = if bits { "BIT" } else { "BYTE" };
                prop_assert_eq!(int(&mut t, &["BITCOUNT", "k", &start.to_string(), &end.to_string(), unit_arg]), want);
            }
        }
    }
}
