//! `struct`: Roberto Ierusalimschy's struct library as Valkey embeds it, with the sizes and
//! alignment of x86-64 Linux (short 2, int 4, long and size_t 8, maximum alignment 8) and
//! little-endian as the native order.
//!
//! Formats: `<` `>` (endianness), `!n` (alignment), `b B h H l L T i I` with `iN`/`IN` sizes up
//! to 32, `f d`, `s` (zero-terminated), `cN` (`c0`: the whole string when packing, the length
//! from the previous result when unpacking), `x` (padding), space. This version has no `=`.
//! The format is read as a C string: a NUL byte ends it.

use mlua::{Lua, MultiValue, Table, Value};

use super::{Args, LUAI_MAXCSTACK, LibResult, Wrappers, number_to_integer, raise};

/// Builds the `struct` table.
pub(crate) fn module(lua: &Lua, w: &Wrappers) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    w.set(lua, &t, "pack", pack)?;
    w.set_spread(lua, &t, "unpack", unpack)?;
    w.set(lua, &t, "size", size)?;
    Ok(t)
}

#[derive(Clone, Copy, PartialEq)]
enum Endian {
    Big,
    Little,
}

/// Endianness and alignment in force, changed by the control options.
struct Header {
    endian: Endian,
    align: usize,
}

impl Default for Header {
    fn default() -> Self {
        Header { endian: Endian::Little, align: 1 }
    }
}

/// The format string, read one option at a time.
struct Format<'f> {
    bytes: &'f [u8],
    pos: usize,
}

impl<'f> Format<'f> {
    fn new(bytes: &'f [u8]) -> Self {
        // A C string: whatever follows a NUL is not seen.
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        Format { bytes: &bytes[..end], pos: 0 }
    }

    fn next_opt(&mut self) -> Option<u8> {
        let opt = *self.bytes.get(self.pos)?;
        self.pos += 1;
        Some(opt)
    }

    /// `getnum`: a decimal count after the option, or `default`.
    fn number(&mut self, default: usize) -> LibResult<usize> {
        if !self.bytes.get(self.pos).is_some_and(u8::is_ascii_digit) {
            return Ok(default);
        }
        let mut a: i32 = 0;
        while let Some(&d) = self.bytes.get(self.pos).filter(|d| d.is_ascii_digit()) {
            let d = i32::from(d - b'0');
            a = match a.checked_mul(10).and_then(|a| a.checked_add(d)) {
                Some(a) => a,
                None => return raise("integral size overflow"),
            };
            self.pos += 1;
        }
        Ok(a as usize)
    }

    /// `optsize`: the bytes option `opt` occupies (0 for control options, `s` and `c0`).
    fn size(&mut self, opt: u8) -> LibResult<usize> {
        Ok(match opt {
            b'B' | b'b' | b'x' => 1,
            b'H' | b'h' => 2,
            b'L' | b'l' | b'T' | b'd' => 8,
            b'f' => 4,
            b'c' => self.number(1)?,
            b'i' | b'I' => {
                let sz = self.number(4)?;
                if sz > MAXINTSIZE {
                    return raise(format!("integral size {sz} is larger than limit of {MAXINTSIZE}"));
                }
                sz
            }
            _ => 0,
        })
    }

    /// `controloptions`: endianness, alignment, spaces; anything else is an invalid option.
    fn control(&mut self, a: &Args<'_>, opt: u8, h: &mut Header) -> LibResult<()> {
        match opt {
            b' ' => {}
            b'>' => h.endian = Endian::Big,
            b'<' => h.endian = Endian::Little,
            b'!' => {
                let n = self.number(MAXALIGN)?;
                if !n.is_power_of_two() {
                    return raise(format!("alignment {n} is not a power of 2"));
                }
                h.align = n;
            }
            _ => return a.arg_error(1, &format!("invalid format option '{}'", char::from(opt))),
        }
        Ok(())
    }
}

/// `gettoalign`: padding before an item of `size` bytes at offset `len`. The arithmetic is the
/// C code's, including for sizes that are not powers of two.
fn align_padding(len: usize, h: &Header, opt: u8, size: usize) -> usize {
    if size == 0 || opt == b'c' {
        return 0;
    }
    let size = size.min(h.align);
    let mask = size.wrapping_sub(1);
    size.wrapping_sub(len & mask) & mask
}

fn is_integer_option(opt: u8) -> bool {
    matches!(opt, b'b' | b'B' | b'h' | b'H' | b'l' | b'L' | b'T' | b'i' | b'I')
}

fn pack(lua: &Lua, mut a: Args<'_>) -> LibResult<MultiValue> {
    let fmt_str = a.check_string(1)?;
    // The C function pushes a nil after its arguments, so a missing one reads "got nil".
    a.push_nil();
    let fmt_bytes = fmt_str.as_bytes();
    let mut fmt = Format::new(&fmt_bytes);
    let mut h = Header::default();
    let mut arg = 2;
    let mut out: Vec<u8> = Vec::new();
    while let Some(opt) = fmt.next_opt() {
        let mut size = fmt.size(opt)?;
        let pad = align_padding(out.len(), &h, opt, size);
        out.resize(out.len() + pad, 0);
        match opt {
            _ if is_integer_option(opt) => {
                let n = a.check_number(arg)?;
                arg += 1;
                let mut value = if n < 0.0 { number_to_integer(n) as u64 } else { double_to_u64(n) };
                let mut buf = [0u8; MAXINTSIZE];
                // Past 8 bytes the shifted value is 0: wide fields get zero, not sign, bytes.
                for i in 0..size {
                    let at = if h.endian == Endian::Little { i } else { size - 1 - i };
                    buf[at] = value as u8;
                    value = value.checked_shr(8).unwrap_or(0);
                }
                out.extend_from_slice(&buf[..size]);
            }
            b'x' => out.push(0),
            b'f' => {
                let f = a.check_number(arg)? as f32;
                arg += 1;
                out.extend_from_slice(&if h.endian == Endian::Little { f.to_le_bytes() } else { f.to_be_bytes() });
            }
            b'd' => {
                let d = a.check_number(arg)?;
                arg += 1;
                out.extend_from_slice(&if h.endian == Endian::Little { d.to_le_bytes() } else { d.to_be_bytes() });
            }
            b'c' | b's' => {
                let s = a.check_string(arg)?;
                arg += 1;
                let s = s.as_bytes();
                if size == 0 {
                    size = s.len();
                }
                if s.len() < size {
                    // The C code has already moved past the argument when it checks.
                    return a.arg_error(arg, "string too short");
                }
                out.extend_from_slice(&s[..size]);
                if opt == b's' {
                    out.push(0);
                }
            }
            _ => fmt.control(&a, opt, &mut h)?,
        }
    }
    Ok(MultiValue::from_vec(vec![Value::String(lua.create_string(&out)?)]))
}

fn unpack(lua: &Lua, a: Args<'_>) -> LibResult<(Table, usize)> {
    let fmt_str = a.check_string(1)?;
    let data_str = a.check_string(2)?;
    let start = a.opt_integer(3, 1)?;
    let fmt_bytes = fmt_str.as_bytes();
    let data = data_str.as_bytes();
    let ld = data.len();
    let mut fmt = Format::new(&fmt_bytes);
    // `size_t pos = luaL_optinteger(...)`: a negative offset wraps to a huge one and fails
    // the bounds check below instead of this one.
    let mut pos = start as u64 as usize;
    if pos == 0 {
        return a.arg_error(3, "offset must be 1 or greater");
    }
    pos -= 1;
    let mut h = Header::default();
    let results = lua.create_table()?;
    let mut n = 0usize;
    let mut last = Value::Nil;
    // Three slots held by the wrapper's `unpack(t, 1, n)` instead of the C function's one.
    let base = a.len().max(3);
    while let Some(opt) = fmt.next_opt() {
        let mut size = fmt.size(opt)?;
        pos = pos.wrapping_add(align_padding(pos, &h, opt, size));
        if size > ld || pos > ld - size {
            return a.arg_error(2, "data string too short");
        }
        if base + n + 2 > LUAI_MAXCSTACK {
            return raise("stack overflow (too many results)");
        }
        let item = match opt {
            _ if is_integer_option(opt) => {
                let bytes = &data[pos..pos + size];
                Some(Value::Number(integer(bytes, h.endian, opt.is_ascii_lowercase())))
            }
            b'x' => None,
            b'f' => {
                let b: [u8; 4] = data[pos..pos + 4].try_into().unwrap_or_default();
                let f = if h.endian == Endian::Little { f32::from_le_bytes(b) } else { f32::from_be_bytes(b) };
                Some(Value::Number(f64::from(f)))
            }
            b'd' => {
                let b: [u8; 8] = data[pos..pos + 8].try_into().unwrap_or_default();
                let d = if h.endian == Endian::Little { f64::from_le_bytes(b) } else { f64::from_be_bytes(b) };
                Some(Value::Number(d))
            }
            b'c' => {
                if size == 0 {
                    // The length is the previous result, which it replaces.
                    let prev = if n == 0 { None } else { a.lua().coerce_number(last.clone())? };
                    let Some(len) = prev else {
                        return raise("format 'c0' needs a previous size");
                    };
                    n -= 1;
                    size = double_to_u64(len) as usize;
                    if size > ld || pos > ld - size {
                        return a.arg_error(2, "data string too short");
                    }
                }
                Some(Value::String(lua.create_string(&data[pos..pos + size])?))
            }
            b's' => {
                let Some(len) = data[pos..].iter().position(|&b| b == 0) else {
                    return raise("unfinished string in data");
                };
                size = len + 1;
                Some(Value::String(lua.create_string(&data[pos..pos + len])?))
            }
            _ => {
                fmt.control(&a, opt, &mut h)?;
                None
            }
        };
        if let Some(v) = item {
            n += 1;
            results.raw_set(n, v.clone())?;
            last = v;
        }
        pos += size;
    }
    results.raw_set(n + 1, Value::Number((pos + 1) as f64))?;
    Ok((results, n + 1))
}

fn size(_: &Lua, a: Args<'_>) -> LibResult<MultiValue> {
    let fmt_str = a.check_string(1)?;
    let fmt_bytes = fmt_str.as_bytes();
    let mut fmt = Format::new(&fmt_bytes);
    let mut h = Header::default();
    let mut pos = 0usize;
    while let Some(opt) = fmt.next_opt() {
        let size = fmt.size(opt)?;
        pos = pos.wrapping_add(align_padding(pos, &h, opt, size));
        if opt == b's' {
            return a.arg_error(1, "option 's' has no fixed size");
        }
        if opt == b'c' && size == 0 {
            return a.arg_error(1, "option 'c0' has no fixed size");
        }
        // Unknown letters and digits are skipped here, unlike in pack and unpack.
        if !opt.is_ascii_alphanumeric() {
            fmt.control(&a, opt, &mut h)?;
        }
        pos = pos.wrapping_add(size);
    }
    Ok(MultiValue::from_vec(vec![Value::Number(pos as f64)]))
}

/// `getinteger`: `size` bytes into a 64-bit value (earlier bytes shift out when wider), sign
/// extended from the field's top bit for lower-case options.
fn integer(bytes: &[u8], endian: Endian, signed: bool) -> f64 {
    let mut l: u64 = 0;
    let mut push = |b: u8| l = (l << 8) | u64::from(b);
    if endian == Endian::Big {
        bytes.iter().for_each(|&b| push(b));
    } else {
        bytes.iter().rev().for_each(|&b| push(b));
    }
    if !signed {
        return l as f64;
    }
    // x86 masks the shift count to 6 bits, which is what the C shift does for wide fields.
    let shift = (bytes.len() as u32).wrapping_mul(8).wrapping_sub(1) & 63;
    let mask = u64::MAX << shift;
    if l & mask != 0 {
        l |= mask;
    }
    l as i64 as f64
}

/// `(unsigned long)d` as gcc compiles it for x86-64.
fn double_to_u64(d: f64) -> u64 {
    const TWO_63: f64 = 9_223_372_036_854_775_808.0;
    if d < TWO_63 { number_to_integer(d) as u64 } else { (number_to_integer(d - TWO_63) as u64) ^ (1 << 63) }
}

/// `MAXINTSIZE`: the widest `i`/`I` field.
const MAXINTSIZE: usize = 32;

/// `MAXALIGN` on x86-64: a double's alignment.
const MAXALIGN: usize = 8;

#[cfg(test)]
mod tests {
    use crate::libs::tests::{eval, eval_err, fails_cleanly, hex};

    fn packed(args: &str) -> String {
        hex(&format!("struct.pack({args})"))
    }

    #[test]
    fn packs_every_option() {
        assert_eq!(
            packed("'>i2<i2bBhHlLT', 1, 2, -1, 255, -2, 65535, -3, 4, 5"),
            "00010200fffffefffffffdffffffffffffff04000000000000000500000000000000"
        );
        assert_eq!(packed("'!4bi', 1, 2"), "0100000002000000");
        assert_eq!(packed("'!bd', 1, 1.5"), "0100000000000000000000000000f83f");
        assert_eq!(packed("'>fd', 1.5, -2.25"), "3fc00000c002000000000000");
        assert_eq!(packed("'sc3c0x', 'ab', 'xyz', 'q'"), "61620078797a7100");
        assert_eq!(packed("'<i12', -1"), "ffffffffffffffff00000000");
        assert_eq!(packed("'>I3', 2^24+5"), "000005");
        assert_eq!(packed("'I8', 2^64"), "0000000000000000");
        assert_eq!(packed("' b b', 1, 2"), "0102");
        assert_eq!(packed("'i\\0i', 1, 2"), "01000000");
    }

    #[test]
    fn unpacks_every_option() {
        assert_eq!(eval("return struct.unpack('>i2<i2bB', struct.pack('>i2<i2bB', 1, 2, -1, 255))"), "1 2 -1 255 7");
        assert_eq!(eval("return struct.unpack('<i12', struct.pack('<i12', -1))"), "-1 13");
        assert_eq!(eval(r"return struct.unpack('<i3', '\255\255\255')"), "-1 4");
        assert_eq!(eval(r"return struct.unpack('<I3', '\255\255\255')"), "16777215 4");
        assert_eq!(eval(r"return struct.unpack('b c0', '\3abcd')"), "abc 5");
        assert_eq!(eval(r"return struct.unpack('s', 'ab\0cd')"), "ab 4");
        assert_eq!(eval("return struct.unpack('x c2', 'zab', 1)"), "ab 4");
        assert_eq!(eval("return struct.unpack('c1', 'abc', 3)"), "c 4");
        assert_eq!(eval("return struct.unpack('c1c0', '2abc')"), "ab 4");
        assert_eq!(eval("return struct.unpack('>d<f', struct.pack('>d<f', 0.1, 0.5))"), "0.1 0.5 13");
        assert_eq!(eval("return struct.unpack('!4bi', struct.pack('!4bi', 1, -7))"), "1 -7 9");
        assert_eq!(eval("return struct.size('!bdi3z'), struct.size('bhi'), struct.size('')"), "21 7 0");
    }

    #[test]
    fn errors_match_the_c_library() {
        for (src, err) in [
            ("struct.unpack('c1', 'abc', 4)", "bad argument #2 to 'unpack' (data string too short)"),
            ("struct.unpack('i', 'abc')", "bad argument #2 to 'unpack' (data string too short)"),
            ("struct.unpack('s', 'abc')", "unfinished string in data"),
            ("struct.unpack('c0', 'abc')", "format 'c0' needs a previous size"),
            ("struct.unpack('c1', 'abc', 0)", "bad argument #3 to 'unpack' (offset must be 1 or greater)"),
            ("struct.unpack('c1', 'abc', -1)", "bad argument #2 to 'unpack' (data string too short)"),
            ("struct.unpack('c2c0', '12ab')", "bad argument #2 to 'unpack' (data string too short)"),
            ("struct.unpack('b c0', '\\255ab')", "bad argument #2 to 'unpack' (data string too short)"),
            ("struct.unpack()", "bad argument #1 to 'unpack' (string expected, got no value)"),
            ("struct.unpack('i', 'abcd', 'x')", "bad argument #3 to 'unpack' (number expected, got string)"),
            ("struct.pack('c5', 'ab')", "bad argument #3 to 'pack' (string too short)"),
            ("struct.pack('i33', 1)", "integral size 33 is larger than limit of 32"),
            ("struct.pack('!3i', 1)", "alignment 3 is not a power of 2"),
            ("struct.pack('z', 1)", "bad argument #1 to 'pack' (invalid format option 'z')"),
            ("struct.pack('=i', 1)", "bad argument #1 to 'pack' (invalid format option '=')"),
            ("struct.pack('i')", "bad argument #2 to 'pack' (number expected, got nil)"),
            ("struct.pack('ii', 1)", "bad argument #3 to 'pack' (number expected, got nil)"),
            ("struct.pack('c99999999999', 'a')", "integral size overflow"),
            ("struct.pack('c2147483647', 'a')", "bad argument #3 to 'pack' (string too short)"),
            ("struct.size('s')", "bad argument #1 to 'size' (option 's' has no fixed size)"),
            ("struct.size('c0')", "bad argument #1 to 'size' (option 'c0' has no fixed size)"),
            ("struct.size('?')", "bad argument #1 to 'size' (invalid format option '?')"),
        ] {
            assert_eq!(eval_err(&format!("return {src}")), err, "{src}");
        }
    }

    #[test]
    fn many_results_stop_at_the_stack_limit() {
        assert_eq!(eval("return select('#', struct.unpack(string.rep('b', 7996), string.rep('a', 7996)))"), "7997");
        assert_eq!(
            eval_err("return struct.unpack(string.rep('b', 8000), string.rep('a', 8000))"),
            "stack overflow (too many results)"
        );
    }

    #[test]
    fn hostile_formats_do_not_panic_or_allocate() {
        // Huge counts and offsets are checked against the data before anything is built.
        for src in [
            "struct.unpack('c2147483647', 'a')",
            "struct.unpack('!2147483648', 'a')",
            "struct.unpack('i32', 'a', 2^62)",
            "struct.unpack('d', 'a', -2^63)",
            "struct.pack('!1073741824i32', 1)",
            "struct.unpack('i0', '')",
        ] {
            assert!(fails_cleanly(src, b""), "{src}");
        }
    }
}
