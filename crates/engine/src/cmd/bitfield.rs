//! BITFIELD and BITFIELD_RO: signed and unsigned integers of 1 to 64 bits at any bit offset
//! of a string, read, written and incremented with a chosen overflow rule.
//!
//! The whole argument list is parsed (and every error reported) before the key is touched;
//! then the string is grown once to the farthest bit any write reaches, and the operations run
//! in order, each replying with one integer (or a null when `OVERFLOW FAIL` refuses a write).

use hotkv_protocol::{Args, ReplyBuf};

use super::bitops::{Growth, RO_ACCESS, bit_offset, row, signal_setbit, with_bits};
use super::{Spec, int_arg};
use crate::command::{KeySpec, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::{CmdResult, CommandError};

/// BITFIELD rows.
pub static COMMANDS: &[Spec] = &[
    // Whether the key is written depends on the subcommands: the server resolves the
    // `variable_flags` spec for COMMAND GETKEYSANDFLAGS (Valkey's `bitfieldGetKeys`).
    row(
        "bitfield",
        -2,
        flags::WRITE | flags::DENYOOM,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE | kf::VARIABLE_FLAGS)],
        "3.2.0",
        "Performs arbitrary bitfield integer operations on strings.",
        "O(1) for each subcommand specified",
        bitfield,
    ),
    row(
        "bitfield_ro",
        -2,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        "6.0.0",
        "Performs arbitrary read-only bitfield integer operations on strings.",
        "O(1) for each subcommand specified",
        bitfield_ro,
    ),
];

/// What happens when SET or INCRBY leaves the type's range.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Overflow {
    /// Modular arithmetic (the default).
    Wrap,
    /// Clamp to the type's minimum or maximum.
    Sat,
    /// Do nothing and reply null.
    Fail,
}

/// An integer type: `i1`..`i64` or `u1`..`u63` (u64 replies would not fit RESP integers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Field {
    signed: bool,
    bits: u32,
}

impl Field {
    fn parse(arg: &[u8]) -> Result<Field, CommandError> {
        let bad = || {
            CommandError::err(
                "Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.",
            )
        };
        let (signed, max) = match arg.first() {
            Some(b'i') => (true, 64),
            Some(b'u') => (false, 63),
            _ => return Err(bad()),
        };
        match hotkv_protocol::parse_i64(&arg[1..]) {
            Some(bits) if (1..=max).contains(&bits) => Ok(Field { signed, bits: bits as u32 }),
            _ => Err(bad()),
        }
    }

    fn min(self) -> i128 {
        if self.signed { -(1i128 << (self.bits - 1)) } else { 0 }
    }

    fn max(self) -> i128 {
        if self.signed { (1i128 << (self.bits - 1)) - 1 } else { (1i128 << self.bits) - 1 }
    }

    /// `v` reduced modulo 2^bits into the type's range.
    fn wrap(self, v: i128) -> i128 {
        let m = (v as u128) & ((1u128 << self.bits) - 1);
        if self.signed && m >> (self.bits - 1) == 1 { m as i128 - (1i128 << self.bits) } else { m as i128 }
    }
}

/// One subcommand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Get,
    Set(i64),
    IncrBy(i64),
}

/// One parsed operation, with the overflow rule in force where it appeared.
#[derive(Debug, Clone, Copy)]
struct FieldOp {
    action: Action,
    field: Field,
    offset: u64,
    overflow: Overflow,
}

impl FieldOp {
    /// The last bit this operation writes, if it writes.
    fn last_written_bit(&self) -> Option<u64> {
        (self.action != Action::Get).then(|| self.offset + u64::from(self.field.bits) - 1)
    }
}

fn bitfield(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    run(ctx, args, out, false)
}

fn bitfield_ro(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    run(ctx, args, out, true)
}

fn run(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf, read_only: bool) -> CmdResult {
    let ops = parse(&args, ctx.cfg.proto_max_bulk_len)?;
    let key = args.get(1);
    let Some(highest) = ops.iter().filter_map(FieldOp::last_written_bit).max() else {
        // Only GETs (or nothing): a plain read, which still rejects other types.
        let k = ctx.read(key)?;
        let s = match &k {
            Some(k) => k.str()?,
            None => &[],
        };
        out.array(ops.len());
        for op in &ops {
            out.int(get(s, op.offset, op.field));
        }
        return Ok(());
    };
    if read_only {
        return Err(CommandError::err("BITFIELD_RO only supports the GET subcommand"));
    }
    let len = (highest >> 3) as usize + 1;
    let (changes, growth) = with_bits(ctx, key, len, |v, growth| {
        out.array(ops.len());
        let mut changes = 0;
        for op in &ops {
            let old = get(v, op.offset, op.field);
            let (reply, new) = match op.action {
                Action::Get => {
                    out.int(old);
                    continue;
                }
                // An unsigned field takes the value's 64-bit pattern, as Valkey casts it: a
                // negative SET overflows an unsigned type upwards.
                Action::Set(value) => (old, apply(op, value as u64, 0)),
                Action::IncrBy(by) => {
                    let new = apply(op, old as u64, by);
                    (new.unwrap_or(0), new)
                }
            };
            let Some(new) = new else {
                out.null();
                continue;
            };
            out.int(reply);
            put(v, op.offset, op.field, new as u64);
            if growth != Growth::Kept || old != new {
                changes += 1;
            }
        }
        changes
    })?;
    signal_setbit(ctx, key, growth, changes);
    Ok(())
}

/// The value to store for `value + incr` (`value` is the field's 64-bit pattern: signed or
/// unsigned as the field is): itself when it fits, otherwise what the overflow rule makes of
/// it (`None` for FAIL).
fn apply(op: &FieldOp, value: u64, incr: i64) -> Option<i64> {
    let f = op.field;
    let base = if f.signed { i128::from(value as i64) } else { i128::from(value) };
    let exact = base + i128::from(incr);
    let Some(upwards) = overflow(f, value, incr) else {
        // Within the field's range, so within i64.
        return Some(exact as i64);
    };
    let v = match op.overflow {
        Overflow::Fail => return None,
        Overflow::Sat if upwards => f.max(),
        Overflow::Sat => f.min(),
        Overflow::Wrap => f.wrap(exact),
    };
    Some(v as i64)
}

/// Whether `value + incr` leaves the field upwards (`Some(true)`) or downwards, decided with
/// the 64-bit arithmetic of Valkey's `checkSignedBitfieldOverflow` and
/// `checkUnsignedBitfieldOverflow`. It is exact except for one quirk kept for compatibility:
/// there `max - value` wraps for a signed SET far below the range (e.g. `SET i56` of
/// -2^63), which then counts as overflowing upwards, so SAT stores the maximum.
fn overflow(f: Field, value: u64, incr: i64) -> Option<bool> {
    if f.signed {
        let value = value as i64;
        let max = if f.bits == 64 { i64::MAX } else { (1i64 << (f.bits - 1)) - 1 };
        let min = -max - 1;
        let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
        let min_incr = min.wrapping_sub(value);
        let narrow = f.bits != 64;
        if value > max || (narrow && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr) {
            return Some(true);
        }
        if value < min || (narrow && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr) {
            return Some(false);
        }
        return None;
    }
    let max = (1u64 << f.bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = value.wrapping_neg() as i64;
    if value > max || (incr > 0 && incr > max_incr) {
        Some(true)
    } else if incr < 0 && incr < min_incr {
        Some(false)
    } else {
        None
    }
}

/// Parses every operation; errors come in Valkey's order (per operation: name, type, offset,
/// value).
fn parse(args: &Args<'_>, max_bulk: u64) -> Result<Vec<FieldOp>, CommandError> {
    let mut ops = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut j = 2;
    while j < args.len() {
        let left = args.len() - j - 1;
        let sub = args.get(j);
        let is = |name: &str, need: usize| sub.eq_ignore_ascii_case(name.as_bytes()) && left >= need;
        let action = if is("get", 2) {
            Action::Get
        } else if is("set", 3) {
            Action::Set(0)
        } else if is("incrby", 3) {
            Action::IncrBy(0)
        } else if is("overflow", 1) {
            let kind = args.get(j + 1);
            overflow = [(b"wrap".as_slice(), Overflow::Wrap), (b"sat", Overflow::Sat), (b"fail", Overflow::Fail)]
                .into_iter()
                .find(|(n, _)| kind.eq_ignore_ascii_case(n))
                .map(|(_, o)| o)
                .ok_or_else(|| CommandError::err("Invalid OVERFLOW type specified"))?;
            j += 2;
            continue;
        } else {
            return Err(CommandError::Syntax);
        };
        let field = Field::parse(args.get(j + 1))?;
        let offset = bit_offset(args.get(j + 2), max_bulk, Some(field.bits))?;
        let action = match action {
            Action::Get => Action::Get,
            Action::Set(_) => Action::Set(int_arg(args.get(j + 3))?),
            Action::IncrBy(_) => Action::IncrBy(int_arg(args.get(j + 3))?),
        };
        ops.push(FieldOp { action, field, offset, overflow });
        j += if action == Action::Get { 3 } else { 4 };
    }
    Ok(ops)
}

/// Reads a field; bytes past the end of `s` read as zeros. The field spans at most nine
/// bytes, loaded big-endian into a 128-bit window.
fn get(s: &[u8], offset: u64, f: Field) -> i64 {
    let byte = (offset / 8) as usize;
    let mut window = [0u8; 16];
    if byte < s.len() {
        let n = (s.len() - byte).min(9);
        window[..n].copy_from_slice(&s[byte..byte + n]);
    }
    let w = u128::from_be_bytes(window) << (offset % 8);
    let raw = (w >> (128 - f.bits)) as u64;
    if f.signed && f.bits < 64 && raw >> (f.bits - 1) == 1 {
        // Sign-extend.
        (raw | (u64::MAX << f.bits)) as i64
    } else {
        raw as i64
    }
}

/// Writes the low `f.bits` bits of `value` at `offset`; `s` must already hold the field.
fn put(s: &mut [u8], offset: u64, f: Field, value: u64) {
    let byte = (offset / 8) as usize;
    let shift = (offset % 8) as u32;
    let n = (shift + f.bits).div_ceil(8) as usize;
    let mut window = [0u8; 16];
    window[..n].copy_from_slice(&s[byte..byte + n]);
    let low = (1u128 << f.bits) - 1;
    let at = 128 - shift - f.bits;
    let w = (u128::from_be_bytes(window) & !(low << at)) | ((u128::from(value) & low) << at);
    s[byte..byte + n].copy_from_slice(&w.to_be_bytes()[..n]);
}

#[cfg(test)]
mod tests {
    use super::{Field, get, put};
    use crate::cmd::bitops::tests::non_string;
    use crate::testkit::TestKit;

    fn bf(t: &mut TestKit, argv: &[&str]) -> String {
        t.run(&[&["BITFIELD", "bits"], argv].concat())
    }

    /// The RESP array of integers (`None` for null) BITFIELD replies with.
    fn ints(vals: &[Option<i64>]) -> String {
        let mut s = format!("*{}\r\n", vals.len());
        for v in vals {
            match v {
                Some(v) => s += &format!(":{v}\r\n"),
                None => s += "$-1\r\n",
            }
        }
        s
    }

    #[test]
    fn set_get_and_incrby_basics() {
        let mut t = TestKit::default();
        assert_eq!(bf(&mut t, &["set", "i8", "0", "-100"]), ints(&[Some(0)]));
        assert_eq!(bf(&mut t, &["SET", "i8", "0", "101"]), ints(&[Some(-100)]));
        assert_eq!(bf(&mut t, &["get", "i8", "0"]), ints(&[Some(101)]));
        t.run(&["DEL", "bits"]);
        assert_eq!(
            bf(&mut t, &["set", "i8", "0", "255", "set", "i8", "0", "100", "get", "i8", "0"]),
            ints(&[Some(0), Some(-1), Some(100)])
        );
        t.run(&["DEL", "bits"]);
        assert_eq!(
            bf(&mut t, &["set", "u8", "0", "255", "incrby", "u8", "0", "100", "get", "u8", "0"]),
            ints(&[Some(0), Some(99), Some(99)])
        );
        assert_eq!(bf(&mut t, &[]), "*0\r\n");
        assert_eq!(t.run(&["BITFIELD", "nokey", "GET", "u8", "0"]), ints(&[Some(0)]));
        assert_eq!(t.run(&["EXISTS", "nokey"]), ":0\r\n", "reads create nothing");
        assert_eq!(t.run(&["BITFIELD", "nokey", "OVERFLOW", "SAT"]), "*0\r\n");
    }

    #[test]
    fn hash_offsets_and_unaligned_fields() {
        let mut t = TestKit::default();
        for (i, v) in ["65", "66", "67"].iter().enumerate() {
            bf(&mut t, &["set", "u8", &format!("#{i}"), v]);
        }
        assert_eq!(t.run(&["GET", "bits"]), "$3\r\nABC\r\n");
        assert_eq!(
            bf(&mut t, &["get", "u4", "#1", "get", "u12", "4", "get", "i3", "5"]),
            ints(&[Some(1), Some(0x142), Some(1)])
        );
        // Valkey's example: u5 = 23 at offset 7 is 00000001|01110000.
        t.run(&["DEL", "bits"]);
        bf(&mut t, &["set", "u5", "7", "23"]);
        assert_eq!(t.run(&["GET", "bits"]), "$2\r\n\x01\x70\r\n");
        t.run(&["DEL", "bits"]);
        assert_eq!(
            bf(&mut t, &["SET", "i8", "0", "10", "SET", "i8", "64", "10", "INCRBY", "i8", "10", "99900"]),
            ints(&[Some(0), Some(0), Some(60)]),
            "regression #3564"
        );
        t.run(&["SET", "bits", "1"]);
        assert_eq!(bf(&mut t, &["get", "u1", "0"]), ints(&[Some(0)]), "regression #3221");
    }

    #[test]
    fn sixty_four_bit_fields_at_odd_offsets() {
        let mut t = TestKit::default();
        let (min, max) = (i64::MIN.to_string(), i64::MAX.to_string());
        assert_eq!(bf(&mut t, &["set", "i64", "3", &min, "get", "i64", "3"]), ints(&[Some(0), Some(i64::MIN)]));
        assert_eq!(t.run(&["STRLEN", "bits"]), ":9\r\n");
        assert_eq!(bf(&mut t, &["set", "i64", "3", &max, "get", "u63", "4"]), ints(&[Some(i64::MIN), Some(i64::MAX)]));
        assert_eq!(
            bf(&mut t, &["get", "u3", "0", "get", "u1", "3", "get", "u5", "64", "get", "u5", "67"]),
            ints(&[Some(0), Some(0), Some(0b11100), Some(0)])
        );
        let mut buf = [0u8; 10];
        for offset in 0..16 {
            for bits in [1, 7, 8, 33, 63, 64] {
                let f = Field { signed: bits == 64, bits };
                buf.fill(0xA5);
                put(&mut buf, offset, f, 0x0123_4567_89AB_CDEF);
                let pattern = 0x0123_4567_89AB_CDEFu64;
                let want = if bits == 64 { pattern as i64 } else { (pattern & ((1 << bits) - 1)) as i64 };
                assert_eq!(get(&buf, offset, f), want, "offset {offset} bits {bits}");
                let bit = |i: u64| buf[(i / 8) as usize] >> (7 - i % 8) & 1;
                for i in (0..80).filter(|&i| i < offset || i >= offset + u64::from(bits)) {
                    assert_eq!(bit(i), 0xA5 >> (7 - i % 8) & 1, "bit {i} outside the field changed");
                }
            }
        }
    }

    #[test]
    fn overflow_wrap_sat_fail_at_the_boundaries() {
        let mut t = TestKit::default();
        bf(&mut t, &["set", "u8", "#0", "100"]);
        assert_eq!(bf(&mut t, &["overflow", "wrap", "incrby", "u8", "#0", "257"]), ints(&[Some(101)]));
        assert_eq!(bf(&mut t, &["overflow", "wrap", "incrby", "u8", "#0", "255"]), ints(&[Some(100)]));
        assert_eq!(bf(&mut t, &["overflow", "sat", "incrby", "u8", "#0", "257"]), ints(&[Some(255)]));
        assert_eq!(bf(&mut t, &["overflow", "sat", "incrby", "u8", "#0", "-256"]), ints(&[Some(0)]));
        assert_eq!(
            bf(&mut t, &["overflow", "fail", "incrby", "u8", "#0", "-1", "get", "u8", "#0"]),
            ints(&[None, Some(0)])
        );
        let sat = ["set", "u8", "#0", "100", "overflow", "sat", "incrby", "i8", "#0", "257", "incrby", "i8", "#0"];
        assert_eq!(bf(&mut t, &[&sat[..], &["-300"]].concat()), ints(&[Some(0), Some(127), Some(-128)]));
        assert_eq!(bf(&mut t, &["overflow", "wrap", "incrby", "i8", "#0", "-1"]), ints(&[Some(127)]));
        assert_eq!(bf(&mut t, &["incrby", "i8", "#0", "1"]), ints(&[Some(-128)]), "WRAP is the default");
        // SET beyond the range: an unsigned field sees a negative value as huge.
        assert_eq!(bf(&mut t, &["set", "u8", "#1", "-1", "get", "u8", "#1"]), ints(&[Some(0), Some(255)]));
        assert_eq!(
            bf(&mut t, &["overflow", "sat", "set", "u8", "#1", "-5", "get", "u8", "#1"]),
            ints(&[Some(255), Some(255)])
        );
        // i4 #1 is the low nibble of byte 0, which holds -128 (0x80) from above.
        assert_eq!(
            bf(&mut t, &["overflow", "sat", "set", "i4", "#1", "-9", "set", "i4", "#1", "8", "get", "i4", "#1"]),
            ints(&[Some(0), Some(-8), Some(7)])
        );
        assert_eq!(
            bf(&mut t, &["overflow", "fail", "set", "u2", "0", "4", "set", "u2", "0", "3"]),
            ints(&[None, Some(2)])
        );
        // Valkey's quirk: a signed SET far below the range saturates to the maximum (its
        // `max - value` wraps around), and for i63 every underflowing SET does.
        let far = (i64::MIN + 5).to_string();
        assert_eq!(
            bf(&mut t, &["overflow", "sat", "set", "i56", "16", &far, "get", "i56", "16"]),
            ints(&[Some(0), Some((1 << 55) - 1)])
        );
        assert_eq!(
            bf(&mut t, &["overflow", "sat", "set", "i56", "16", "-36028797018963969", "get", "i56", "16"]),
            ints(&[Some((1 << 55) - 1), Some(-(1 << 55))]),
            "just below the minimum is still a plain underflow"
        );
        t.run(&["DEL", "bits"]);
        assert_eq!(
            bf(&mut t, &["overflow", "sat", "set", "i63", "0", "-4611686018427387905", "get", "i63", "0"]),
            ints(&[Some(0), Some((1 << 62) - 1)])
        );
        // 64-bit signed: i64 arithmetic overflows exactly at the edges.
        t.run(&["DEL", "bits"]);
        let (min, max) = (i64::MIN.to_string(), i64::MAX.to_string());
        assert_eq!(
            bf(&mut t, &["set", "i64", "0", &max, "overflow", "fail", "incrby", "i64", "0", "1"]),
            ints(&[Some(0), None])
        );
        assert_eq!(bf(&mut t, &["overflow", "wrap", "incrby", "i64", "0", "1"]), ints(&[Some(i64::MIN)]));
        assert_eq!(bf(&mut t, &["overflow", "sat", "incrby", "i64", "0", "-1"]), ints(&[Some(i64::MIN)]));
        assert_eq!(bf(&mut t, &["overflow", "sat", "incrby", "i64", "0", &min]), ints(&[Some(i64::MIN)]));
        assert_eq!(bf(&mut t, &["overflow", "sat", "incrby", "i64", "0", &max]), ints(&[Some(-1)]));
        assert_eq!(bf(&mut t, &["overflow", "wrap", "incrby", "i64", "0", &min]), ints(&[Some(i64::MAX)]));
        // u63 (the widest unsigned type) and u1/i1.
        t.run(&["DEL", "bits"]);
        assert_eq!(
            bf(&mut t, &["set", "u63", "0", &max, "overflow", "wrap", "incrby", "u63", "0", "2"]),
            ints(&[Some(0), Some(1)])
        );
        assert_eq!(bf(&mut t, &["overflow", "sat", "incrby", "u63", "0", &min]), ints(&[Some(0)]));
        let tiny = ["overflow", "sat", "incrby", "u1", "0", "5", "incrby", "i1", "0", "-5", "incrby", "i1", "0", "1"];
        assert_eq!(bf(&mut t, &tiny), ints(&[Some(1), Some(-1), Some(0)]));
    }

    #[test]
    fn wrap_and_fail_match_modular_arithmetic_for_every_width() {
        let mut t = TestKit::default();
        let mut x: u64 = 0x243F_6A88_85A3_08D3;
        for _ in 0..400 {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            let bits = (x >> 58) as u32 + 1;
            let signed = bits == 64 || x & 1 == 1;
            let (value, incr) = ((x as i64) >> (x % 64), (x.rotate_left(17) as i64) >> (x.rotate_left(9) % 64));
            let ty = format!("{}{bits}", if signed { 'i' } else { 'u' });
            let range = 1i128 << bits;
            let min = if signed { -(range / 2) } else { 0 };
            let norm = |v: i128| (v - min).rem_euclid(range) + min;
            let as_stored = if signed { i128::from(value) } else { i128::from(value as u64) };
            t.run(&["DEL", "bits"]);
            bf(&mut t, &["set", &ty, "5", &value.to_string()]);
            let reply = bf(&mut t, &["incrby", &ty, "5", &incr.to_string()]);
            let want = norm(norm(as_stored) + i128::from(incr));
            assert_eq!(reply, ints(&[Some(want as i64)]), "WRAP {ty} {value} + {incr}");
            // FAIL refuses exactly the SETs and INCRBYs that leave the range.
            t.run(&["DEL", "bits"]);
            let set = bf(&mut t, &["overflow", "fail", "set", &ty, "0", &value.to_string()]);
            let stored = if set == ints(&[None]) { 0 } else { as_stored };
            assert_eq!(set == ints(&[None]), norm(as_stored) != as_stored, "FAIL set {ty} {value}");
            let inc = bf(&mut t, &["overflow", "fail", "incrby", &ty, "0", &incr.to_string()]);
            let sum = stored + i128::from(incr);
            assert_eq!(inc == ints(&[None]), norm(sum) != sum, "FAIL {ty} {stored} + {incr}");
        }
    }

    #[test]
    fn parse_errors_come_before_any_change() {
        let mut t = TestKit::default();
        let bad_type =
            "-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n";
        assert_eq!(bf(&mut t, &["set", "u64", "0", "1"]), bad_type);
        assert_eq!(bf(&mut t, &["get", "i65", "0"]), bad_type);
        assert_eq!(bf(&mut t, &["get", "i0", "0"]), bad_type);
        assert_eq!(bf(&mut t, &["get", "I8", "0"]), bad_type, "the sign letter is case-sensitive");
        assert_eq!(bf(&mut t, &["get", "", "0"]), bad_type);
        assert_eq!(bf(&mut t, &["set", "u8", "0", "1", "get", "x8", "0"]), bad_type);
        assert_eq!(t.run(&["EXISTS", "bits"]), ":0\r\n", "nothing ran");
        let bad_offset = "-ERR bit offset is not an integer or out of range\r\n";
        assert_eq!(bf(&mut t, &["get", "u8", "-1"]), bad_offset);
        assert_eq!(bf(&mut t, &["get", "u8", "#"]), bad_offset);
        assert_eq!(bf(&mut t, &["get", "u8", "#-1"]), bad_offset);
        assert_eq!(bf(&mut t, &["get", "i64", "#9223372036854775807"]), bad_offset, "n * bits overflows");
        assert_eq!(bf(&mut t, &["get", "u8", "4294967296"]), bad_offset);
        assert_eq!(bf(&mut t, &["get", "u8", "4294967295"]), ints(&[Some(0)]), "a read at the limit is fine");
        assert_eq!(bf(&mut t, &["set", "u8", "0", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(bf(&mut t, &["overflow", "maybe", "get", "u8", "0"]), "-ERR Invalid OVERFLOW type specified\r\n");
        assert_eq!(bf(&mut t, &["get", "u8"]), "-ERR syntax error\r\n");
        assert_eq!(bf(&mut t, &["set", "u8", "0"]), "-ERR syntax error\r\n");
        assert_eq!(bf(&mut t, &["overflow"]), "-ERR syntax error\r\n");
        assert_eq!(bf(&mut t, &["bogus", "u8", "0"]), "-ERR syntax error\r\n");
        t.cfg.proto_max_bulk_len = 2;
        assert_eq!(bf(&mut t, &["set", "u8", "#2", "1"]), bad_offset);
        assert_eq!(bf(&mut t, &["set", "u16", "15", "1"]), ints(&[Some(0)]), "a field may end past the limit");
        assert_eq!(t.run(&["STRLEN", "bits"]), ":4\r\n");
    }

    #[test]
    fn bitfield_ro_only_reads() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["BITFIELD_RO", "bits"]), "*0\r\n");
        bf(&mut t, &["set", "u8", "0", "255"]);
        assert_eq!(t.run(&["BITFIELD_RO", "bits", "GET", "u8", "0", "get", "i4", "4"]), ints(&[Some(255), Some(-1)]));
        assert_eq!(
            t.run(&["BITFIELD_RO", "bits", "set", "u8", "0", "100", "get", "u8", "0"]),
            "-ERR BITFIELD_RO only supports the GET subcommand\r\n"
        );
        assert_eq!(
            t.run(&["BITFIELD_RO", "bits", "get", "u64", "0"]),
            "-ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.\r\n",
            "parse errors first"
        );
        assert_eq!(bf(&mut t, &["get", "u8", "0"]), ints(&[Some(255)]));
    }

    #[test]
    fn only_changes_count_as_writes() {
        let mut t = TestKit::default();
        bf(&mut t, &["set", "i5", "0", "0"]);
        assert_eq!(t.stats.dirty, 1, "creating the key");
        assert_eq!(t.events.take(), ["n:new:bits@0", "$:setbit:bits@0"]);
        bf(&mut t, &["set", "i5", "0", "0"]);
        assert_eq!((t.stats.dirty, t.events.take().len()), (1, 0));
        bf(&mut t, &["set", "i5", "0", "1", "set", "i5", "0", "1", "set", "i5", "0", "0"]);
        assert_eq!(t.stats.dirty, 3, "two of the three SETs changed the field");
        bf(&mut t, &["set", "i5", "90", "0"]);
        assert_eq!(t.stats.dirty, 4, "growing counts");
        bf(&mut t, &["overflow", "fail", "incrby", "u2", "0", "9"]);
        assert_eq!(t.stats.dirty, 4, "a refused write changes nothing");
        assert_eq!(t.events.take(), ["$:setbit:bits@0", "$:setbit:bits@0"]);
    }

    #[test]
    fn non_strings_are_wrongtype() {
        let mut t = TestKit::default();
        if !non_string(&mut t, "bits") {
            return;
        }
        let wrongtype = "-WRONGTYPE Operation against a key holding the wrong kind of value\r\n";
        assert_eq!(bf(&mut t, &[]), wrongtype);
        assert_eq!(bf(&mut t, &["get", "u8", "0"]), wrongtype);
        assert_eq!(bf(&mut t, &["set", "u8", "0", "1"]), wrongtype);
        assert_eq!(t.run(&["BITFIELD_RO", "bits", "get", "u8", "0"]), wrongtype);
    }
}
