//! `cmsgpack`: lua-cmsgpack 0.4.0 as Valkey embeds it, MessagePack for Lua 5.1 numbers.
//!
//! Packing: a number that an int64 holds exactly is an integer (smallest encoding), any other
//! a float32 when that is exact, else a float64; a table whose keys are exactly 1..n is an
//! array, any other a map; tables nested 16 deep and non-serialisable values become nil.
//! Unpacking checks every declared length against the bytes left before building anything, and
//! never pre-sizes a table beyond what the remaining input could fill.

use mlua::{Lua, MultiValue, Table, Value};

use super::{Args, LUAI_MAXCSTACK, LibResult, NESTING_CAP, Wrappers, for_each_entry, number_to_integer, raise};

/// Builds the `cmsgpack` table.
pub(crate) fn module(lua: &Lua, w: &Wrappers) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    w.set(lua, &t, "pack", pack)?;
    w.set_spread(lua, &t, "unpack", |lua, a| unpack(lua, &a, 0, 0))?;
    w.set_spread(lua, &t, "unpack_one", |lua, a| {
        let offset = a.opt_integer(2, 0)?;
        unpack(lua, &a, 1, offset)
    })?;
    w.set_spread(lua, &t, "unpack_limit", |lua, a| {
        let limit = a.check_integer(2)?;
        let offset = a.opt_integer(3, 0)?;
        unpack(lua, &a, limit, offset)
    })?;
    t.raw_set("_NAME", "cmsgpack")?;
    t.raw_set("_VERSION", "lua-cmsgpack 0.4.0")?;
    t.raw_set("_COPYRIGHT", "Copyright (C) 2012, Redis Ltd.")?;
    t.raw_set("_DESCRIPTION", "MessagePack C implementation for Lua")?;
    Ok(t)
}

/// `mp_pack`: every argument encoded, concatenated.
fn pack(lua: &Lua, a: Args<'_>) -> LibResult<MultiValue> {
    if a.len() == 0 {
        return a.arg_error(0, "MessagePack pack needs input.");
    }
    // `lua_checkstack(L, nargs)` with nargs already on the stack.
    if 2 * a.len() > LUAI_MAXCSTACK {
        return a.arg_error(0, "Too many arguments for MessagePack pack.");
    }
    let mut out = Vec::new();
    for i in 1..=a.len() {
        encode(&mut out, a.get(i), 0)?;
    }
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&out)?)]))
}

fn encode(out: &mut Vec<u8>, v: &Value, level: usize) -> LibResult<()> {
    match v {
        // Cuts cycles: a table at this depth is written as nil.
        Value::Table(_) if level == MAX_NESTING => out.push(0xc0),
        Value::Table(t) => encode_table(out, t, level)?,
        Value::String(s) => encode_bytes(out, &s.as_bytes()),
        Value::Boolean(b) => out.push(if *b { 0xc3 } else { 0xc2 }),
        Value::Integer(n) => encode_int(out, *n),
        Value::Number(n) => {
            // IS_INT64_EQUIVALENT with x86's conversion of out-of-range doubles.
            let i = number_to_integer(*n);
            if n.is_finite() && i as f64 == *n { encode_int(out, i) } else { encode_double(out, *n) }
        }
        _ => out.push(0xc0),
    }
    Ok(())
}

fn encode_table(out: &mut Vec<u8>, t: &Table, level: usize) -> LibResult<()> {
    if is_array(t)? {
        let len = t.raw_len();
        header(out, len as u64, 0x90, 0xdc, 0xdd);
        for j in 1..=len {
            let v: Value = t.get(j)?;
            encode(out, &v, level + 1)?;
        }
        return Ok(());
    }
    let mut count = 0u64;
    for_each_entry(t, |_, _| {
        count += 1;
        Ok(())
    })?;
    header(out, count, 0x80, 0xde, 0xdf);
    for_each_entry(t, |k, v| {
        encode(out, &k, level + 1)?;
        encode(out, &v, level + 1)
    })
}

/// `table_is_an_array`: all keys positive numbers an `int` holds exactly, as many as the
/// largest one. The empty table counts as an array.
fn is_array(t: &Table) -> LibResult<bool> {
    let (mut max, mut count, mut array) = (0f64, 0f64, true);
    for_each_entry(t, |k, _| {
        match k {
            Value::Integer(n) if array && n > 0 && n <= i64::from(i32::MAX) => max = max.max(n as f64),
            Value::Number(n) if array && n > 0.0 && n <= f64::from(i32::MAX) && n.fract() == 0.0 => max = max.max(n),
            _ => array = false,
        }
        count += 1.0;
        Ok(())
    })?;
    Ok(array && max == count)
}

/// Fix/16/32-bit headers shared by arrays and maps.
fn header(out: &mut Vec<u8>, n: u64, fix: u8, b16: u8, b32: u8) {
    if n <= 15 {
        out.push(fix | n as u8);
    } else if n <= 0xffff {
        out.push(b16);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(b32);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

fn encode_bytes(out: &mut Vec<u8>, s: &[u8]) {
    let len = s.len();
    if len < 32 {
        out.push(0xa0 | len as u8);
    } else if len <= 0xff {
        out.extend_from_slice(&[0xd9, len as u8]);
    } else if len <= 0xffff {
        out.push(0xda);
        out.extend_from_slice(&(len as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    }
    out.extend_from_slice(s);
}

fn encode_double(out: &mut Vec<u8>, d: f64) {
    let f = d as f32;
    if f64::from(f) == d {
        out.push(0xca);
        out.extend_from_slice(&f.to_be_bytes());
    } else {
        out.push(0xcb);
        out.extend_from_slice(&d.to_be_bytes());
    }
}

fn encode_int(out: &mut Vec<u8>, n: i64) {
    if n >= 0 {
        if n <= 127 {
            out.push(n as u8);
        } else if n <= 0xff {
            out.extend_from_slice(&[0xcc, n as u8]);
        } else if n <= 0xffff {
            out.push(0xcd);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        } else if n <= 0xffff_ffff {
            out.push(0xce);
            out.extend_from_slice(&(n as u32).to_be_bytes());
        } else {
            out.push(0xcf);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    } else if n >= -32 {
        out.push(n as i8 as u8);
    } else if n >= -128 {
        out.extend_from_slice(&[0xd0, n as i8 as u8]);
    } else if n >= -32768 {
        out.push(0xd1);
        out.extend_from_slice(&(n as i16).to_be_bytes());
    } else if n >= -2_147_483_648 {
        out.push(0xd2);
        out.extend_from_slice(&(n as i32).to_be_bytes());
    } else {
        out.push(0xd3);
        out.extend_from_slice(&n.to_be_bytes());
    }
}

/// `mp_unpack_full`: up to `limit` values from `offset` (both 0: all values, no offset
/// returned). Results go into a table, spread by the Lua wrapper.
fn unpack(lua: &Lua, a: &Args<'_>, limit: i64, offset: i64) -> LibResult<(Table, usize)> {
    let s = a.check_string(1)?;
    let data = s.as_bytes();
    let len = data.len();
    let decode_all = limit == 0 && offset == 0;
    if offset < 0 || limit < 0 {
        // The C code prints the input length where it means the limit; kept for fidelity.
        return raise(format!(
            "Invalid request to unpack with offset of {} and limit of {}.",
            offset as i32, len as i32
        ));
    }
    if offset as u64 > len as u64 {
        return raise(format!("Start offset {} greater than input length {}.", offset as i32, len as i32));
    }
    let limit = if decode_all { i64::from(i32::MAX) } else { limit };
    let results = lua.create_table()?;
    let first = if decode_all { 1 } else { 2 };
    let mut cur = Cursor { data: &data, pos: offset as usize };
    let mut count = 0usize;
    while cur.pos < len && (count as i64) < limit {
        // Slots on the C stack: the input string plus the values decoded so far, plus two:
        // the wrapper's `unpack(t, 1, n)` holds three arguments where the C function held one,
        // so 7997 values is the most it can return (C: 7999).
        let v = decode(lua, &mut cur, 3 + count)?;
        results.raw_set(first + count, v)?;
        count += 1;
    }
    if decode_all {
        return Ok((results, count));
    }
    let next = if cur.pos == len { -1 } else { cur.pos as i64 };
    results.raw_set(1, next)?;
    Ok((results, count + 1))
}

struct Cursor<'a> {
    data: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    /// The next `n` bytes, consumed, or the "Missing bytes" error when fewer are left.
    fn take(&mut self, n: usize) -> LibResult<&[u8]> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.data.len());
        match end {
            Some(end) => {
                let bytes = &self.data[self.pos..end];
                self.pos = end;
                Ok(bytes)
            }
            None => raise(MISSING_BYTES),
        }
    }

    fn array<const N: usize>(&mut self) -> LibResult<[u8; N]> {
        let mut buf = [0u8; N];
        buf.copy_from_slice(self.take(N)?);
        Ok(buf)
    }
}

/// What one type byte introduces.
enum Item {
    Value(Value),
    Array(u64),
    Map(u64),
}

/// A container being filled; an explicit stack instead of recursion, as in the cjson decoder.
enum Open {
    Array { t: Table, next: i64, left: u64 },
    Map { t: Table, left: u64, key: Option<Value> },
}

/// `mp_decode_to_lua_type` for one top-level value. `slots` counts what the C decoder would
/// have on the Lua stack, to fail where its `luaL_checkstack` calls fail.
fn decode(lua: &Lua, cur: &mut Cursor<'_>, mut slots: usize) -> LibResult<Value> {
    let mut stack: Vec<Open> = Vec::new();
    loop {
        if cur.pos >= cur.data.len() {
            return raise(MISSING_BYTES);
        }
        if slots + 1 > LUAI_MAXCSTACK {
            return raise(TOO_MANY_VALUES);
        }
        let mut value = match read_item(lua, cur)? {
            Item::Value(v) => v,
            Item::Array(len) => {
                if stack.len() >= NESTING_CAP || slots + 2 > LUAI_MAXCSTACK {
                    return raise(ARRAY_STACK_OVERFLOW);
                }
                // Each element takes at least one byte: never pre-size beyond the input left.
                let left_bytes = (cur.data.len() - cur.pos) as u64;
                let t = lua.create_table_with_capacity(len.min(left_bytes) as usize, 0)?;
                if len == 0 {
                    Value::Table(t)
                } else {
                    stack.push(Open::Array { t, next: 1, left: len });
                    slots += 2;
                    continue;
                }
            }
            Item::Map(len) => {
                if stack.len() >= NESTING_CAP {
                    return raise(TOO_MANY_VALUES);
                }
                let left_bytes = (cur.data.len() - cur.pos) as u64;
                let t = lua.create_table_with_capacity(0, (len.min(left_bytes / 2)) as usize)?;
                if len == 0 {
                    Value::Table(t)
                } else {
                    stack.push(Open::Map { t, left: len, key: None });
                    slots += 1;
                    continue;
                }
            }
        };
        loop {
            let Some(top) = stack.last_mut() else { return Ok(value) };
            match top {
                Open::Array { t, next, left } => {
                    t.raw_set(*next, value)?;
                    *next += 1;
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    slots -= 2;
                }
                Open::Map { t, left, key } => {
                    let Some(k) = key.take() else {
                        *key = Some(value);
                        slots += 1;
                        break;
                    };
                    slots -= 1;
                    // `lua_settable` refuses these keys with Lua's own messages.
                    match &k {
                        Value::Nil => return raise("table index is nil"),
                        Value::Number(n) if n.is_nan() => return raise("table index is NaN"),
                        _ => {}
                    }
                    t.raw_set(k, value)?;
                    *left -= 1;
                    if *left > 0 {
                        break;
                    }
                    slots -= 1;
                }
            }
            value = match stack.pop() {
                Some(Open::Array { t, .. } | Open::Map { t, .. }) => Value::Table(t),
                None => Value::Nil,
            };
        }
    }
}

fn read_item(lua: &Lua, cur: &mut Cursor<'_>) -> LibResult<Item> {
    let [b] = cur.array::<1>()?;
    // 64-bit values go through `lua_pushinteger` (signed) before becoming a double, so
    // 0xcf with the top bit set reads back negative, as in Valkey.
    let num = |n: f64| Ok(Item::Value(Value::Number(n)));
    match b {
        0xc0 => Ok(Item::Value(Value::Nil)),
        0xc2 => Ok(Item::Value(Value::Boolean(false))),
        0xc3 => Ok(Item::Value(Value::Boolean(true))),
        0xcc => num(f64::from(cur.array::<1>()?[0])),
        0xcd => num(f64::from(u16::from_be_bytes(cur.array()?))),
        0xce => num(f64::from(u32::from_be_bytes(cur.array()?))),
        0xcf => num(u64::from_be_bytes(cur.array()?) as i64 as f64),
        0xd0 => num(f64::from(cur.array::<1>()?[0] as i8)),
        0xd1 => num(f64::from(i16::from_be_bytes(cur.array()?))),
        0xd2 => num(f64::from(i32::from_be_bytes(cur.array()?))),
        0xd3 => num(i64::from_be_bytes(cur.array()?) as f64),
        0xca => num(f64::from(f32::from_be_bytes(cur.array()?))),
        0xcb => num(f64::from_be_bytes(cur.array()?)),
        0xd9 => {
            let len = cur.array::<1>()?[0] as usize;
            string(lua, cur, len)
        }
        0xda => {
            let len = u16::from_be_bytes(cur.array()?) as usize;
            string(lua, cur, len)
        }
        0xdb => {
            let len = u32::from_be_bytes(cur.array()?) as usize;
            string(lua, cur, len)
        }
        0xdc => Ok(Item::Array(u64::from(u16::from_be_bytes(cur.array()?)))),
        0xdd => Ok(Item::Array(u64::from(u32::from_be_bytes(cur.array()?)))),
        0xde => Ok(Item::Map(u64::from(u16::from_be_bytes(cur.array()?)))),
        0xdf => Ok(Item::Map(u64::from(u32::from_be_bytes(cur.array()?)))),
        0x00..=0x7f => num(f64::from(b)),
        0xe0..=0xff => num(f64::from(b as i8)),
        0xa0..=0xbf => string(lua, cur, usize::from(b & 0x1f)),
        0x90..=0x9f => Ok(Item::Array(u64::from(b & 0xf))),
        0x80..=0x8f => Ok(Item::Map(u64::from(b & 0xf))),
        // bin, ext, fixext and the never-used 0xc1.
        _ => raise("Bad data format in input."),
    }
}

fn string(lua: &Lua, cur: &mut Cursor<'_>, len: usize) -> LibResult<Item> {
    let bytes = cur.take(len)?;
    Ok(Item::Value(Value::String(lua.create_string(bytes)?)))
}

/// `LUACMSGPACK_MAX_NESTING`.
const MAX_NESTING: usize = 16;

const MISSING_BYTES: &str = "Missing bytes in input.";

/// `luaL_checkstack`'s message in `mp_decode_to_lua_type`.
const TOO_MANY_VALUES: &str =
    "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)";

/// `luaL_checkstack`'s message in `mp_decode_to_lua_array`.
const ARRAY_STACK_OVERFLOW: &str = "stack overflow (in function mp_decode_to_lua_array)";

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use crate::libs::tests::{eval, eval_err, fails_cleanly, hex};

    fn packed(args: &str) -> String {
        hex(&format!("cmsgpack.pack({args})"))
    }

    #[test]
    fn packs_like_scripting_tcl_expects() {
        assert_eq!(packed("0.1"), "cb3fb999999999999a");
        assert_eq!(packed("-1099511627776"), "d3ffffff0000000000");
    }

    #[test]
    fn packs_each_type_with_the_smallest_encoding() {
        assert_eq!(
            packed("{}, {1,2}, {a=1}, 0.5, -0.0, 1/0, 0/0, 2^63, -2^63, 2^64, true, nil, 'abc', -33, 255, 65536, 2^32"),
            "9092010281a16101ca3f00000000caff800000cbfff8000000000000ca5f000000d38000000000000000ca5f800000c3c0a3616263d0dfccffce00010000cf0000000100000000"
        );
        assert_eq!(packed("{[1]=1,[3]=3}"), "8201010303");
        assert_eq!(packed("string.rep('x', 32)"), format!("d920{}", "78".repeat(32)));
        assert_eq!(
            packed("127, 128, -32, -128, -129, -32768, -32769, 65535"),
            "7fcc80e0d080d1ff7fd18000d2ffff7fffcdffff"
        );
        assert_eq!(packed("print or function() end"), "c0");
    }

    #[test]
    fn circular_references_from_scripting_tcl() {
        const CYCLE: &str = "local a = {x=nil,y=5} local b = {x=a} a['x'] = b";
        assert_eq!(
            hex(&format!("(function() {CYCLE} return cmsgpack.pack(a) end)()")),
            "82a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a17882a17905a17881a178c0"
        );
        assert_eq!(
            eval(&format!(
                "{CYCLE} local re = cmsgpack.unpack(cmsgpack.pack(a))
                 assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.y == re.y)
                 assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x)
                 assert(re.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x.x == nil)
                 return re.x.x.x.x.x.x.x.x.y == re.y, re.y == 5"
            )),
            "true true"
        );
    }

    #[test]
    fn smoke_test_from_scripting_tcl() {
        eval(
            r#"
            local str_lt_32 = string.rep("x", 30)
            local str_lt_255 = string.rep("x", 250)
            local str_lt_65535 = string.rep("x", 65530)
            local str_long = string.rep("x", 100000)
            local array_big = {}
            for i=1, 100000 do array_big[i] = i end
            local map_big = {}
            for i=1, 100000 do map_big[tostring(i)] = i end
            local some_map = {
                s1=str_lt_32, s2=str_lt_255, s3=str_lt_65535, s4=str_long, d1=0.1, i1=1, i2=250,
                i3=65530, i4=100000, i5=2^40, i6=-1, i7=-120, i8=-32000, i9=-100000,
                i10=-3147483648, a1={1, 2, 3, 4, 5},
                a2={1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18},
                a3=array_big, m1={a=1, b=2}, m2=map_big, b1=false, b2=true, n=nil }
            local encoded = cmsgpack.pack(some_map)
            local decoded = cmsgpack.unpack(encoded)
            assert(table.concat(some_map) == table.concat(decoded))
            assert(decoded.m2["99999"] == 99999 and decoded.a3[100000] == 100000)
            assert(decoded.i10 == -3147483648 and decoded.d1 == 0.1 and decoded.s4 == str_long)
            local offset, decoded_one = cmsgpack.unpack_one(encoded, 0)
            assert(table.concat(some_map) == table.concat(decoded_one))
            assert(offset == -1)

            local encoded_multiple = cmsgpack.pack(str_lt_32, str_lt_255, str_lt_65535, str_long)
            local offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, 0)
            assert(obj == str_lt_32)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_lt_255)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_lt_65535)
            offset, obj = cmsgpack.unpack_limit(encoded_multiple, 1, offset)
            assert(obj == str_long)
            assert(offset == -1)
            "#,
        );
    }

    #[test]
    fn unpack_variants_and_offsets() {
        assert_eq!(eval(r"return cmsgpack.unpack('\1\2\3')"), "1 2 3");
        assert_eq!(eval(r"return cmsgpack.unpack_one('\1\2\3')"), "1 1");
        assert_eq!(eval(r"return cmsgpack.unpack_limit('\1\2\3', 2, 1)"), "-1 2 3");
        assert_eq!(eval(r"return cmsgpack.unpack_limit('\1\2\3', 0, 0)"), "1 2 3");
        assert_eq!(eval(r"return cmsgpack.unpack_one('\1\2\3', 3)"), "-1");
        assert_eq!(eval(r"return cmsgpack.unpack_one('\1\2\3', 2)"), "-1 3");
        assert_eq!(eval(r"return select('#', cmsgpack.unpack(''))"), "0");
        assert_eq!(eval(r"return cmsgpack.unpack('\207\255\255\255\255\255\255\255\255')"), "-1");
        assert_eq!(eval(r"return cmsgpack.unpack('\203\127\248\0\0\0\0\0\0')"), "nan");
        assert_eq!(eval(r"return cmsgpack.unpack('\209\255\254', '\210\128\0\0\0')"), "-2");
        // A number argument is read as its string form, "12".
        assert_eq!(eval(r"return cmsgpack.unpack(12)"), "49 50");
        assert_eq!(eval("return #{cmsgpack.unpack(string.rep('\\1', 7997))}"), "7997");
    }

    #[test]
    fn unpack_errors() {
        for (input, err) in [
            (r"\193", "Bad data format in input."),
            (r"\196\1a", "Bad data format in input."),
            (r"\221\255\255\255\255", "Missing bytes in input."),
            (r"\219\255\255\255\255", "Missing bytes in input."),
            (r"\146\1", "Missing bytes in input."),
            (r"\205\1", "Missing bytes in input."),
            (r"\129\192\1", "table index is nil"),
            (r"\129\203\127\248\0\0\0\0\0\0\1", "table index is NaN"),
        ] {
            assert_eq!(eval_err(&format!("return cmsgpack.unpack('{input}')")), err, "{input}");
        }
        assert_eq!(
            eval_err("return cmsgpack.unpack(string.rep('\\1', 7998))"),
            "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"
        );
        assert_eq!(
            eval_err("return cmsgpack.unpack(string.rep('\\145', 4000) .. '\\1')"),
            "stack overflow (in function mp_decode_to_lua_array)"
        );
        assert_eq!(
            eval_err("return cmsgpack.unpack(string.rep('\\129\\1', 4000) .. '\\1')"),
            "stack overflow (too many return values at once; use unpack_one or unpack_limit instead.)"
        );
        assert_eq!(
            eval_err("return cmsgpack.unpack_one('a', -1)"),
            "Invalid request to unpack with offset of -1 and limit of 1."
        );
        assert_eq!(eval_err("return cmsgpack.unpack_one('abc', 5)"), "Start offset 5 greater than input length 3.");
        assert_eq!(
            eval_err("return cmsgpack.unpack_limit('abc', -1)"),
            "Invalid request to unpack with offset of 0 and limit of 3."
        );
        assert_eq!(
            eval_err("return cmsgpack.unpack_limit('abc')"),
            "bad argument #2 to 'unpack_limit' (number expected, got no value)"
        );
        assert_eq!(
            eval_err("return cmsgpack.unpack_one({})"),
            "bad argument #1 to 'unpack_one' (string expected, got table)"
        );
        assert_eq!(
            eval_err("return cmsgpack.unpack_one('a', 'x')"),
            "bad argument #2 to 'unpack_one' (number expected, got string)"
        );
        assert_eq!(eval_err("return cmsgpack.pack()"), "bad argument #0 to 'pack' (MessagePack pack needs input.)");
        assert_eq!(
            eval_err("local t = {} for i = 1, 4001 do t[i] = i end return cmsgpack.pack(unpack(t))"),
            "bad argument #0 to 'pack' (Too many arguments for MessagePack pack.)"
        );
    }

    #[test]
    fn metadata() {
        assert_eq!(eval("return cmsgpack._NAME, cmsgpack._VERSION"), "cmsgpack lua-cmsgpack 0.4.0");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Arbitrary input never panics or aborts: it decodes or raises a string error.
        #[test]
        fn unpack_survives_random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            prop_assert!(fails_cleanly("cmsgpack.unpack(s)", &bytes));
            prop_assert!(fails_cleanly("cmsgpack.unpack_limit(s, 2, 1)", &bytes));
        }

        /// Containers declaring huge sizes over random tails fail cleanly, without allocating
        /// by the declared size.
        #[test]
        fn huge_declared_lengths_fail_cleanly(
            kind in prop::sample::select(vec![0xdbu8, 0xdd, 0xdf, 0xdc, 0xde, 0xda]),
            tail in proptest::collection::vec(any::<u8>(), 0..32),
        ) {
            let mut bytes = vec![kind, 0xff, 0xff, 0xff, 0xff];
            bytes.extend(tail);
            prop_assert!(fails_cleanly("cmsgpack.unpack(s)", &bytes));
        }
    }
}
