//! `bit`: LuaBitOp 1.0.2, 32-bit operations on Lua numbers.
//!
//! Every argument is normalised the way LuaBitOp does it on a double-number Lua: add 2^52+2^51
//! and keep the low 32 bits of the IEEE representation. That rounds to nearest-even and wraps
//! modulo 2^32, so `bit.tobit(2^32 + 1) == 1`, `bit.tobit(-1) == -1` and `bit.tobit(1.5) == 2`.
//! Results are signed 32-bit numbers.

use mlua::{Lua, MultiValue, Table, Value};

use super::{Args, LibResult, Wrappers};

/// Builds the `bit` table.
pub(crate) fn module(lua: &Lua, w: &Wrappers) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    w.set(lua, &t, "tobit", |_, a| ret(barg(&a, 1)?))?;
    w.set(lua, &t, "bnot", |_, a| ret(!barg(&a, 1)?))?;
    w.set(lua, &t, "band", |_, a| fold(&a, |x, y| x & y))?;
    w.set(lua, &t, "bor", |_, a| fold(&a, |x, y| x | y))?;
    w.set(lua, &t, "bxor", |_, a| fold(&a, |x, y| x ^ y))?;
    w.set(lua, &t, "lshift", |_, a| shift(&a, |b, n| b << n))?;
    w.set(lua, &t, "rshift", |_, a| shift(&a, |b, n| b >> n))?;
    w.set(lua, &t, "arshift", |_, a| shift(&a, |b, n| ((b as i32) >> n) as u32))?;
    w.set(lua, &t, "rol", |_, a| shift(&a, u32::rotate_left))?;
    w.set(lua, &t, "ror", |_, a| shift(&a, u32::rotate_right))?;
    w.set(lua, &t, "bswap", |_, a| ret(barg(&a, 1)?.swap_bytes()))?;
    w.set(lua, &t, "tohex", tohex)?;
    Ok(t)
}

/// `barg`: argument `i` as 32 bits. A non-number is an error only when it also normalises to
/// 0, which for Lua 5.1 means every non-number.
fn barg(a: &Args<'_>, i: usize) -> LibResult<u32> {
    match a.to_number(i)? {
        Some(n) => Ok(normalise(n)),
        None => a.type_error(i, "number"),
    }
}

/// The 2^52+2^51 trick: after the addition the integer part sits in the low mantissa bits.
fn normalise(n: f64) -> u32 {
    (n + 6_755_399_441_055_744.0).to_bits() as u32
}

fn ret(b: u32) -> LibResult<MultiValue> {
    Ok(MultiValue::from_vec(vec![Value::Number(f64::from(b as i32))]))
}

/// band/bor/bxor: the first argument, then the others from the last one down, as LuaBitOp
/// reads them (which decides the argument an error names).
fn fold(a: &Args<'_>, op: fn(u32, u32) -> u32) -> LibResult<MultiValue> {
    let mut b = barg(a, 1)?;
    for i in (2..=a.len()).rev() {
        b = op(b, barg(a, i)?);
    }
    ret(b)
}

fn shift(a: &Args<'_>, op: fn(u32, u32) -> u32) -> LibResult<MultiValue> {
    let b = barg(a, 1)?;
    let n = barg(a, 2)? & 31;
    ret(op(b, n))
}

/// `tohex(x [, n])`: n hex digits (default 8, at most 8), upper case when n is negative.
fn tohex(lua: &Lua, a: Args<'_>) -> LibResult<MultiValue> {
    let mut b = barg(&a, 1)?;
    let mut n = if a.is_none(2) { 8 } else { barg(&a, 2)? as i32 };
    let mut digits = b"0123456789abcdef";
    // Negating i32::MIN would overflow; LuaBitOp clamps it first (the "bit.tohex bug" test).
    if n == i32::MIN {
        n = i32::MIN + 1;
    }
    if n < 0 {
        n = -n;
        digits = b"0123456789ABCDEF";
    }
    let n = n.min(8) as usize;
    let mut buf = [0u8; 8];
    for slot in buf[..n].iter_mut().rev() {
        *slot = digits[(b & 15) as usize];
        b >>= 4;
    }
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&buf[..n])?)]))
}

#[cfg(test)]
mod tests {
    use crate::libs::tests::{eval, eval_err};

    #[test]
    fn tobit_normalises_like_luabitop() {
        assert_eq!(eval("return bit.tobit(1)"), "1");
        assert_eq!(eval("return bit.tobit(0xffffffff)"), "-1");
        assert_eq!(eval("return bit.tobit(2^32 + 1)"), "1");
        assert_eq!(eval("return bit.tobit(-1)"), "-1");
        assert_eq!(eval("return bit.tobit(2^31)"), "-2147483648");
        // Round to nearest even, as the FPU addition does.
        assert_eq!(eval("return bit.tobit(1.5)"), "2");
        assert_eq!(eval("return bit.tobit(2.5)"), "2");
        assert_eq!(eval("return bit.tobit(-1.5)"), "-2");
        assert_eq!(eval("return bit.tobit('0x10')"), "16");
        assert_eq!(eval("return bit.tobit(' 12 ')"), "12");
        assert_eq!(eval("return bit.tobit(0/0)"), "0");
    }

    #[test]
    fn minimal_bitop_functionality_from_scripting_tcl() {
        eval(
            "assert(bit.tobit(1) == 1); assert(bit.band(1) == 1); assert(bit.bxor(1,2) == 3);
             assert(bit.bor(1,2,4,8,16,32,64,128) == 255)",
        );
    }

    #[test]
    fn logic_and_shifts() {
        assert_eq!(eval("return bit.bnot(0)"), "-1");
        assert_eq!(eval("return bit.band(0x12345678, 0xff)"), "120");
        assert_eq!(eval("return bit.bor(1, 2, 4)"), "7");
        assert_eq!(eval("return bit.bxor(0xf0, 0xff)"), "15");
        assert_eq!(eval("return bit.lshift(1, 31)"), "-2147483648");
        assert_eq!(eval("return bit.lshift(1, 32)"), "1");
        assert_eq!(eval("return bit.lshift(1, 33)"), "2");
        assert_eq!(eval("return bit.rshift(-1, 28)"), "15");
        assert_eq!(eval("return bit.arshift(-256, 4)"), "-16");
        assert_eq!(eval("return bit.rshift(0x80000000, 0)"), "-2147483648");
        assert_eq!(eval("return bit.rol(0x12345678, 12)"), "1164411171");
        assert_eq!(eval("return bit.ror(0x12345678, 12)"), "1736516421");
        assert_eq!(eval("return bit.rol(5, 0)"), "5");
        assert_eq!(eval("return bit.ror(5, 32)"), "5");
        assert_eq!(eval("return bit.bswap(0x12345678)"), "2018915346");
        assert_eq!(eval("return bit.bswap(0xff)"), "-16777216");
    }

    #[test]
    fn tohex_widths_and_case() {
        assert_eq!(eval("return bit.tohex(1)"), "00000001");
        assert_eq!(eval("return bit.tohex(-1)"), "ffffffff");
        assert_eq!(eval("return bit.tohex(0xff, 2)"), "ff");
        assert_eq!(eval("return bit.tohex(0xff, -2)"), "FF");
        assert_eq!(eval("return bit.tohex(0x1234, 12)"), "00001234");
        assert_eq!(eval("return bit.tohex(0x1234, 0)"), "");
        assert_eq!(eval("return bit.tohex(65535, -2147483648)"), "0000FFFF");
    }

    #[test]
    fn functions_used_by_functions_tcl() {
        assert_eq!(
            eval(
                "local version = 0x080001
                 return string.format('%d.%d.%d', bit.band(bit.rshift(version, 16), 0x000000ff),
                   bit.band(bit.rshift(version, 8), 0x000000ff), bit.band(version, 0x000000ff))"
            ),
            "8.0.1"
        );
    }

    #[test]
    fn non_numbers_are_argument_errors() {
        assert_eq!(eval_err("return bit.tobit('x')"), "bad argument #1 to 'tobit' (number expected, got string)");
        assert_eq!(eval_err("return bit.band()"), "bad argument #1 to 'band' (number expected, got no value)");
        assert_eq!(eval_err("return bit.bor(1, {}, nil)"), "bad argument #3 to 'bor' (number expected, got nil)");
        assert_eq!(eval_err("return bit.lshift(1)"), "bad argument #2 to 'lshift' (number expected, got no value)");
        assert_eq!(eval_err("return bit.tohex(1, nil)"), "bad argument #2 to 'tohex' (number expected, got nil)");
        assert_eq!(eval("local ok, e = pcall(bit.bnot, {}) return tostring(ok) .. ' ' .. type(e)"), "false string");
    }
}
