//! `cjson`: Lua CJSON 2.1.0 as Valkey builds it (`ENABLE_CJSON_GLOBAL`, system `strtod` and
//! `%.14g`), with its configuration functions and error texts.
//!
//! The decoder reads its input as the C library does, as a NUL-terminated string: a NUL byte
//! ends the document (`'[1]\0junk'` decodes), and inside a string it is "unexpected end of
//! string".

use std::cell::Cell;
use std::rc::Rc;

use mlua::{Function, LightUserData, Lua, MultiValue, Table, Value};

use super::{Args, LibResult, NESTING_CAP, Wrappers, as_number, for_each_entry, raise, type_name};

/// Builds a `cjson` table with its own configuration (what `cjson.new()` returns too).
pub(crate) fn module(lua: &Lua, w: &Wrappers) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let cfg = Rc::new(Cell::new(Config::default()));

    let c = cfg.clone();
    let next = w.next.clone();
    w.set(lua, &t, "encode", move |lua, a| {
        if a.len() != 1 {
            return a.arg_error(1, "expected 1 argument");
        }
        let mut enc = Encoder { cfg: c.get(), out: Vec::new(), next: next.clone() };
        enc.encode(a.get(1).clone())?;
        Ok(one(Value::String(lua.create_string(&enc.out)?)))
    })?;
    let c = cfg.clone();
    w.set(lua, &t, "decode", move |lua, a| {
        if a.len() != 1 {
            return a.arg_error(1, "expected 1 argument");
        }
        let s = a.check_string(1)?;
        let data = s.as_bytes();
        Ok(one(decode(lua, &data, c.get())?))
    })?;
    let c = cfg.clone();
    w.set(lua, &t, "encode_sparse_array", move |_, a| {
        arg_init(&a, 3)?;
        let mut v = c.get();
        let convert = enum_option(&a, 1, &mut v.sparse_convert, BOOL_OPTIONS);
        c.set(v);
        let convert = convert?;
        let ratio = integer_option(&a, 2, &mut v.sparse_ratio, 0, i32::MAX);
        c.set(v);
        let ratio = ratio?;
        let safe = integer_option(&a, 3, &mut v.sparse_safe, 0, i32::MAX);
        c.set(v);
        Ok(MultiValue::from_vec(vec![convert, ratio, safe?]))
    })?;
    int_setting(lua, w, &t, &cfg, "encode_max_depth", (1, i32::MAX), |c| &mut c.encode_max_depth)?;
    int_setting(lua, w, &t, &cfg, "decode_max_depth", (1, i32::MAX), |c| &mut c.decode_max_depth)?;
    int_setting(lua, w, &t, &cfg, "encode_number_precision", (1, 14), |c| &mut c.precision)?;
    enum_setting(lua, w, &t, &cfg, "encode_keep_buffer", BOOL_OPTIONS, |c| &mut c.keep_buffer)?;
    enum_setting(lua, w, &t, &cfg, "encode_invalid_numbers", INVALID_NUMBER_OPTIONS, |c| {
        &mut c.encode_invalid_numbers
    })?;
    enum_setting(lua, w, &t, &cfg, "decode_invalid_numbers", BOOL_OPTIONS, |c| &mut c.decode_invalid_numbers)?;
    let wrappers = w.at_run_time();
    w.set(lua, &t, "new", move |lua, _| Ok(one(Value::Table(module(lua, &wrappers)?))))?;

    t.raw_set("null", Value::LightUserData(LightUserData(std::ptr::null_mut())))?;
    t.raw_set("_NAME", "cjson")?;
    t.raw_set("_VERSION", "2.1.0")?;
    Ok(t)
}

/// Per-table settings, defaults as in lua_cjson.c. Enum settings hold the option's index.
#[derive(Clone, Copy)]
struct Config {
    sparse_convert: usize,
    sparse_ratio: i32,
    sparse_safe: i32,
    encode_max_depth: i32,
    decode_max_depth: i32,
    /// 0 "off" (error), 1 "on" (nan/inf), 2 "null".
    encode_invalid_numbers: usize,
    decode_invalid_numbers: usize,
    keep_buffer: usize,
    precision: i32,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            sparse_convert: 0,
            sparse_ratio: 2,
            sparse_safe: 10,
            encode_max_depth: 1000,
            decode_max_depth: 1000,
            encode_invalid_numbers: 0,
            decode_invalid_numbers: 1,
            keep_buffer: 1,
            precision: 14,
        }
    }
}

fn one(v: Value) -> MultiValue {
    MultiValue::from_vec(vec![v])
}

fn int_setting(
    lua: &Lua,
    w: &Wrappers,
    t: &Table,
    cfg: &Rc<Cell<Config>>,
    name: &'static str,
    (min, max): (i32, i32),
    field: fn(&mut Config) -> &mut i32,
) -> mlua::Result<()> {
    let c = cfg.clone();
    w.set(lua, t, name, move |_, a| {
        arg_init(&a, 1)?;
        let mut v = c.get();
        let out = integer_option(&a, 1, field(&mut v), min, max)?;
        c.set(v);
        Ok(one(out))
    })
}

fn enum_setting(
    lua: &Lua,
    w: &Wrappers,
    t: &Table,
    cfg: &Rc<Cell<Config>>,
    name: &'static str,
    options: &'static [&'static str],
    field: fn(&mut Config) -> &mut usize,
) -> mlua::Result<()> {
    let c = cfg.clone();
    w.set(lua, t, name, move |_, a| {
        arg_init(&a, 1)?;
        let mut v = c.get();
        let out = enum_option(&a, 1, field(&mut v), options)?;
        c.set(v);
        Ok(one(out))
    })
}

/// `json_arg_init`: at most `n` arguments.
fn arg_init(a: &Args<'_>, n: usize) -> LibResult<()> {
    if a.len() > n {
        return a.arg_error(n + 1, "found too many arguments");
    }
    Ok(())
}

/// `json_integer_option`: nil leaves the setting; the range error always names argument 1,
/// as the C code does.
fn integer_option(a: &Args<'_>, i: usize, setting: &mut i32, min: i32, max: i32) -> LibResult<Value> {
    if !a.is_none_or_nil(i) {
        // `int value = luaL_checkinteger(...)`: the C assignment keeps the low 32 bits.
        let value = a.check_integer(i)? as i32;
        if value < min || value > max {
            return a.arg_error(1, &format!("expected integer between {min} and {max}"));
        }
        *setting = value;
    }
    Ok(Value::Number(f64::from(*setting)))
}

/// `json_enum_option` with `bool_true == 1`: a boolean or one of `options` by name; answers a
/// boolean for the off/on settings and the option's name otherwise ("null").
fn enum_option(a: &Args<'_>, i: usize, setting: &mut usize, options: &[&str]) -> LibResult<Value> {
    match a.get(i) {
        Value::Nil => {}
        Value::Boolean(b) => *setting = usize::from(*b),
        _ => {
            let name = a.check_string(i)?;
            let name = name.as_bytes();
            match options.iter().position(|o| o.as_bytes() == &name[..]) {
                Some(p) => *setting = p,
                None => {
                    let shown = String::from_utf8_lossy(&name).into_owned();
                    return a.arg_error(i, &format!("invalid option '{shown}'"));
                }
            }
        }
    }
    Ok(match *setting {
        0 | 1 => Value::Boolean(*setting == 1),
        n => Value::String(a.lua().create_string(options[n])?),
    })
}

struct Encoder {
    cfg: Config,
    out: Vec<u8>,
    next: Function,
}

/// A table being written: the explicit stack replaces recursion, whose debug-build frames
/// would not fit a thread's stack at the default depth limit of 1000.
enum Open {
    Array {
        t: Table,
        done: usize,
        len: usize,
    },
    /// `key` is the last key written (nil before the first) for resuming with `next`.
    Object {
        t: Table,
        key: Value,
    },
}

impl Encoder {
    fn encode(&mut self, root: Value) -> LibResult<()> {
        let mut stack: Vec<Open> = Vec::new();
        let mut pending = root;
        loop {
            match pending {
                Value::Table(t) => self.open(t, &mut stack)?,
                other => self.scalar(&other)?,
            }
            pending = loop {
                let Some(top) = stack.last_mut() else { return Ok(()) };
                match top {
                    Open::Array { t, done, len } if *done < *len => {
                        if *done > 0 {
                            self.out.push(b',');
                        }
                        *done += 1;
                        break t.raw_get(*done)?;
                    }
                    Open::Array { .. } => {
                        self.out.push(b']');
                        stack.pop();
                    }
                    Open::Object { t, key } => {
                        let (k, v): (Value, Value) = self.next.call((t.clone(), key.clone()))?;
                        if k.is_nil() {
                            self.out.push(b'}');
                            stack.pop();
                            continue;
                        }
                        if !key.is_nil() {
                            self.out.push(b',');
                        }
                        self.key(&k)?;
                        *key = k;
                        break v;
                    }
                }
            };
        }
    }

    fn open(&mut self, t: Table, stack: &mut Vec<Open>) -> LibResult<()> {
        let depth = stack.len() + 1;
        // C Lua also stops at its stack limit whatever the setting; NESTING_CAP stands for it.
        if depth > self.cfg.encode_max_depth as usize || depth > NESTING_CAP {
            return raise(format!("Cannot serialise, excessive nesting ({depth})"));
        }
        match self.array_length(&t)? {
            Some(len) if len > 0 => {
                self.out.push(b'[');
                stack.push(Open::Array { t, done: 0, len });
            }
            _ => {
                self.out.push(b'{');
                stack.push(Open::Object { t, key: Value::Nil });
            }
        }
        Ok(())
    }

    fn scalar(&mut self, v: &Value) -> LibResult<()> {
        match v {
            Value::String(s) => self.string(&s.as_bytes()),
            Value::Integer(_) | Value::Number(_) => self.number(v)?,
            Value::Boolean(true) => self.out.extend_from_slice(b"true"),
            Value::Boolean(false) => self.out.extend_from_slice(b"false"),
            Value::Nil => self.out.extend_from_slice(b"null"),
            Value::LightUserData(p) if p.0.is_null() => self.out.extend_from_slice(b"null"),
            other => return exception(other, "type not supported"),
        }
        Ok(())
    }

    fn key(&mut self, k: &Value) -> LibResult<()> {
        match k {
            Value::Integer(_) | Value::Number(_) => {
                self.out.push(b'"');
                self.number(k)?;
                self.out.extend_from_slice(b"\":");
            }
            Value::String(s) => {
                self.string(&s.as_bytes());
                self.out.push(b':');
            }
            other => return exception(other, "table key must be a number or string"),
        }
        Ok(())
    }

    /// `lua_array_length`: Some(max index) when every key is a positive integer and the array
    /// is not excessively sparse; None for an object.
    fn array_length(&self, t: &Table) -> LibResult<Option<usize>> {
        // `max` is a C int assigned from a double: beyond the int range x86 stores INT_MIN, so
        // `{[2^31]=1}` is an object and `{[2^31]=1, [1]=2}` encodes as "[2]", as in Valkey.
        let (mut max, mut items, mut array) = (0i32, 0i64, true);
        for_each_entry(t, |k, _| {
            match as_number(&k) {
                Some(n) if array && n != 0.0 && n.floor() == n && n >= 1.0 => {
                    if n > f64::from(max) {
                        max = if n < 2_147_483_648.0 { n as i32 } else { i32::MIN };
                    }
                    items += 1;
                }
                _ => array = false,
            }
            Ok(())
        })?;
        if !array {
            return Ok(None);
        }
        let cfg = &self.cfg;
        let max = i64::from(max);
        let sparse =
            cfg.sparse_ratio > 0 && max > items * i64::from(cfg.sparse_ratio) && max > i64::from(cfg.sparse_safe);
        // Beyond the C library: even with sparse arrays allowed, a few keys must not make us
        // write millions of nulls.
        if sparse || max - items > MAX_ARRAY_HOLES {
            if cfg.sparse_convert == 0 {
                return raise("Cannot serialise table: excessively sparse array");
            }
            return Ok(None);
        }
        Ok(usize::try_from(max).ok())
    }

    fn number(&mut self, v: &Value) -> LibResult<()> {
        let n = as_number(v).unwrap_or(0.0);
        match self.cfg.encode_invalid_numbers {
            0 if !n.is_finite() => return exception(v, "must not be NaN or Inf"),
            1 if n.is_nan() => {
                self.out.extend_from_slice(b"nan");
                return Ok(());
            }
            2 if !n.is_finite() => {
                self.out.extend_from_slice(b"null");
                return Ok(());
            }
            _ => {}
        }
        self.out.extend_from_slice(format_g(n, self.cfg.precision as usize).as_bytes());
        Ok(())
    }

    fn string(&mut self, s: &[u8]) {
        self.out.reserve(s.len() + 2);
        self.out.push(b'"');
        for &c in s {
            match c {
                b'"' => self.out.extend_from_slice(b"\\\""),
                b'\\' => self.out.extend_from_slice(b"\\\\"),
                b'/' => self.out.extend_from_slice(b"\\/"),
                b'\x08' => self.out.extend_from_slice(b"\\b"),
                b'\t' => self.out.extend_from_slice(b"\\t"),
                b'\n' => self.out.extend_from_slice(b"\\n"),
                b'\x0c' => self.out.extend_from_slice(b"\\f"),
                b'\r' => self.out.extend_from_slice(b"\\r"),
                0..=0x1f | 0x7f => {
                    self.out.extend_from_slice(b"\\u00");
                    self.out.push(HEX[usize::from(c >> 4)]);
                    self.out.push(HEX[usize::from(c & 15)]);
                }
                _ => self.out.push(c),
            }
        }
        self.out.push(b'"');
    }
}

/// `json_encode_exception`: "Cannot serialise <type>: <reason>".
fn exception<T>(v: &Value, reason: &str) -> LibResult<T> {
    raise(format!("Cannot serialise {}: {reason}", type_name(v)))
}

/// `printf("%.<precision>g", x)` as glibc prints it: `precision` significant digits, exponent
/// form below 1e-4 or from 10^precision, trailing zeros dropped.
pub(crate) fn format_g(x: f64, precision: usize) -> String {
    if x.is_nan() {
        return if x.is_sign_negative() { "-nan" } else { "nan" }.to_string();
    }
    if x.is_infinite() {
        return if x < 0.0 { "-inf" } else { "inf" }.to_string();
    }
    let p = precision.max(1);
    if x == 0.0 {
        return if x.is_sign_negative() { "-0" } else { "0" }.to_string();
    }
    // Rust's exact formatting rounds half to even on the exact binary value, as glibc does.
    let sci = format!("{:.*e}", p - 1, x);
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if exp < -4 || exp >= p as i32 {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip_fraction_zeros(mantissa), exp.unsigned_abs())
    } else {
        let decimals = (p as i32 - 1 - exp).max(0) as usize;
        strip_fraction_zeros(&format!("{x:.decimals$}")).to_string()
    }
}

fn strip_fraction_zeros(s: &str) -> &str {
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.') } else { s }
}

/// Decodes one JSON document.
fn decode(lua: &Lua, data: &[u8], cfg: Config) -> LibResult<Value> {
    if data.len() >= 2 && (data[0] == 0 || data[1] == 0) {
        return raise("JSON parser does not support UTF-16 or UTF-32");
    }
    let mut p = Parser { lua, data, pos: 0, cfg, depth: 0 };
    let tok = p.next_token();
    let v = p.value(tok)?;
    let tok = p.next_token();
    if !matches!(tok.kind, Tok::End) {
        return p.expected("the end", &tok);
    }
    Ok(v)
}

struct Parser<'a> {
    lua: &'a Lua,
    data: &'a [u8],
    pos: usize,
    cfg: Config,
    depth: usize,
}

enum Tok {
    ObjBegin,
    ObjEnd,
    ArrBegin,
    ArrEnd,
    Str(Vec<u8>),
    Num(f64),
    Bool(bool),
    Null,
    Colon,
    Comma,
    End,
    Error(&'static str),
}

struct Token {
    kind: Tok,
    /// 0-based offset the error messages report (plus one).
    index: usize,
}

impl Tok {
    fn name(&self) -> &'static str {
        match self {
            Tok::ObjBegin => "T_OBJ_BEGIN",
            Tok::ObjEnd => "T_OBJ_END",
            Tok::ArrBegin => "T_ARR_BEGIN",
            Tok::ArrEnd => "T_ARR_END",
            Tok::Str(_) => "T_STRING",
            Tok::Num(_) => "T_NUMBER",
            Tok::Bool(_) => "T_BOOLEAN",
            Tok::Null => "T_NULL",
            Tok::Colon => "T_COLON",
            Tok::Comma => "T_COMMA",
            Tok::End => "T_END",
            Tok::Error(reason) => reason,
        }
    }
}

impl Parser<'_> {
    /// The byte at `i`, with 0 past the end: the C parser sees a NUL-terminated string.
    fn byte(&self, i: usize) -> u8 {
        self.data.get(i).copied().unwrap_or(0)
    }

    fn starts_with(&self, word: &[u8]) -> bool {
        self.data.get(self.pos..).is_some_and(|rest| rest.starts_with(word))
    }

    fn error_at(&self, reason: &'static str) -> Token {
        Token { kind: Tok::Error(reason), index: self.pos }
    }

    fn next_token(&mut self) -> Token {
        while matches!(self.byte(self.pos), b' ' | b'\t' | b'\n' | b'\r') {
            self.pos += 1;
        }
        let index = self.pos;
        let single = |kind| Token { kind, index };
        let ch = self.byte(self.pos);
        let kind = match ch {
            b'{' => Tok::ObjBegin,
            b'}' => Tok::ObjEnd,
            b'[' => Tok::ArrBegin,
            b']' => Tok::ArrEnd,
            b',' => Tok::Comma,
            b':' => Tok::Colon,
            0 => return single(Tok::End),
            b'"' => return self.string_token(),
            b'-' | b'0'..=b'9' => {
                if self.cfg.decode_invalid_numbers == 0 && self.is_invalid_number() {
                    return self.error_at("invalid number");
                }
                return self.number_token();
            }
            b'f' | b'i' | b'I' | b'n' | b'N' | b't' | b'+' => return self.word_token(),
            _ => return self.error_at("invalid token"),
        };
        self.pos += 1;
        single(kind)
    }

    fn word_token(&mut self) -> Token {
        let index = self.pos;
        for (word, kind) in [(&b"true"[..], Tok::Bool(true)), (b"false", Tok::Bool(false)), (b"null", Tok::Null)] {
            if self.starts_with(word) {
                self.pos += word.len();
                return Token { kind, index };
            }
        }
        // Only "numbers" that strict JSON rejects (inf, nan, +1, hex) get here.
        if self.cfg.decode_invalid_numbers != 0 && self.is_invalid_number() {
            return self.number_token();
        }
        self.error_at("invalid token")
    }

    /// `json_is_invalid_number`: what `strtod` accepts but JSON does not.
    fn is_invalid_number(&self) -> bool {
        let mut p = self.pos;
        match self.byte(p) {
            b'+' => return true,
            b'-' => p += 1,
            _ => {}
        }
        let c = self.byte(p);
        if c == b'0' {
            let c2 = self.byte(p + 1);
            return c2 | 0x20 == b'x' || c2.is_ascii_digit();
        }
        // `*p <= '9'` on a signed char: bytes from 0x80 count as ordinary numbers too.
        if c <= b'9' || c >= 0x80 {
            return false;
        }
        let word = |w: &[u8]| (0..3).all(|i| self.byte(p + i).eq_ignore_ascii_case(&w[i]));
        word(b"inf") || word(b"nan")
    }

    fn number_token(&mut self) -> Token {
        let index = self.pos;
        match strtod(self.data, self.pos) {
            Some((n, end)) => {
                self.pos = end;
                Token { kind: Tok::Num(n), index }
            }
            None => self.error_at("invalid number"),
        }
    }

    fn string_token(&mut self) -> Token {
        let index = self.pos;
        self.pos += 1;
        let mut out = Vec::new();
        loop {
            let ch = self.byte(self.pos);
            match ch {
                b'"' => break,
                0 => return self.error_at("unexpected end of string"),
                b'\\' => {
                    let unescaped = match self.byte(self.pos + 1) {
                        b'"' => b'"',
                        b'\\' => b'\\',
                        b'/' => b'/',
                        b'b' => b'\x08',
                        b't' => b'\t',
                        b'n' => b'\n',
                        b'f' => b'\x0c',
                        b'r' => b'\r',
                        b'u' => {
                            if self.unicode_escape(&mut out) {
                                continue;
                            }
                            return self.error_at("invalid unicode escape code");
                        }
                        _ => return self.error_at("invalid escape code"),
                    };
                    out.push(unescaped);
                    self.pos += 2;
                }
                _ => {
                    out.push(ch);
                    self.pos += 1;
                }
            }
        }
        self.pos += 1;
        Token { kind: Tok::Str(out), index }
    }

    /// `\uXXXX`, or a high+low surrogate pair of them, appended as UTF-8; false when invalid.
    fn unicode_escape(&mut self, out: &mut Vec<u8>) -> bool {
        let Some(mut cp) = self.hex4(self.pos + 2) else { return false };
        let mut len = 6;
        if cp & 0xF800 == 0xD800 {
            if cp & 0x400 != 0 || self.byte(self.pos + 6) != b'\\' || self.byte(self.pos + 7) != b'u' {
                return false;
            }
            let Some(low) = self.hex4(self.pos + 8) else { return false };
            if low & 0xFC00 != 0xDC00 {
                return false;
            }
            cp = (((cp & 0x3FF) << 10) | (low & 0x3FF)) + 0x10000;
            len = 12;
        }
        // Every value here is at most 0x10FFFF, which the C encoder writes as UTF-8 bytes too;
        // lone surrogates never reach this point.
        let mut buf = [0u8; 4];
        match char::from_u32(cp) {
            Some(c) => out.extend_from_slice(c.encode_utf8(&mut buf).as_bytes()),
            None => return false,
        }
        self.pos += len;
        true
    }

    fn hex4(&self, at: usize) -> Option<u32> {
        (0..4).try_fold(0u32, |acc, i| Some(acc << 4 | char::from(self.byte(at + i)).to_digit(16)?))
    }

    fn expected<T>(&self, what: &str, tok: &Token) -> LibResult<T> {
        raise(format!("Expected {what} but found {} at character {}", tok.kind.name(), tok.index + 1))
    }

    /// Parses one value starting at `tok`. Containers are kept on an explicit stack rather
    /// than by recursion, for the same stack-size reason as the encoder.
    fn value(&mut self, mut tok: Token) -> LibResult<Value> {
        let mut stack: Vec<Pending> = Vec::new();
        loop {
            let mut value = match tok.kind {
                Tok::Str(s) => Value::String(self.lua.create_string(&s)?),
                Tok::Num(n) => Value::Number(n),
                Tok::Bool(b) => Value::Boolean(b),
                Tok::Null => Value::LightUserData(LightUserData(std::ptr::null_mut())),
                Tok::ObjBegin => {
                    self.descend()?;
                    let t = self.lua.create_table()?;
                    let first = self.next_token();
                    if matches!(first.kind, Tok::ObjEnd) {
                        self.depth -= 1;
                        Value::Table(t)
                    } else {
                        let key = self.object_key(first)?;
                        stack.push(Pending::Object { t, key });
                        tok = self.next_token();
                        continue;
                    }
                }
                Tok::ArrBegin => {
                    self.descend()?;
                    let t = self.lua.create_table()?;
                    let first = self.next_token();
                    if matches!(first.kind, Tok::ArrEnd) {
                        self.depth -= 1;
                        Value::Table(t)
                    } else {
                        stack.push(Pending::Array { t, next: 1 });
                        tok = first;
                        continue;
                    }
                }
                _ => return self.expected("value", &tok),
            };
            // Store the finished value in its container; close containers whose end follows.
            tok = loop {
                let Some(top) = stack.last_mut() else { return Ok(value) };
                let sep = match top {
                    Pending::Array { t, next } => {
                        t.raw_set(*next, value)?;
                        *next += 1;
                        let sep = self.next_token();
                        match sep.kind {
                            Tok::ArrEnd => sep,
                            Tok::Comma => break self.next_token(),
                            _ => return self.expected("comma or array end", &sep),
                        }
                    }
                    Pending::Object { t, key } => {
                        t.raw_set(key.clone(), value)?;
                        let sep = self.next_token();
                        match sep.kind {
                            Tok::ObjEnd => sep,
                            Tok::Comma => {
                                let next = self.next_token();
                                *key = self.object_key(next)?;
                                break self.next_token();
                            }
                            _ => return self.expected("comma or object end", &sep),
                        }
                    }
                };
                debug_assert!(matches!(sep.kind, Tok::ArrEnd | Tok::ObjEnd));
                self.depth -= 1;
                value = match stack.pop() {
                    Some(Pending::Array { t, .. } | Pending::Object { t, .. }) => Value::Table(t),
                    None => Value::Nil,
                };
            };
        }
    }

    /// An object key and the colon after it.
    fn object_key(&mut self, tok: Token) -> LibResult<mlua::String> {
        let Tok::Str(key) = &tok.kind else {
            return self.expected("object key string", &tok);
        };
        let key = self.lua.create_string(key)?;
        let colon = self.next_token();
        if !matches!(colon.kind, Tok::Colon) {
            return self.expected("colon", &colon);
        }
        Ok(key)
    }

    fn descend(&mut self) -> LibResult<()> {
        self.depth += 1;
        if self.depth > self.cfg.decode_max_depth as usize || self.depth > NESTING_CAP {
            // Unlike the token errors, the C code reports this offset 0-based.
            return raise(format!("Found too many nested data structures ({}) at character {}", self.depth, self.pos));
        }
        Ok(())
    }
}

/// A container the decoder is filling.
enum Pending {
    Array { t: Table, next: i64 },
    Object { t: Table, key: mlua::String },
}

/// glibc `strtod` at `start` of a NUL-terminated view of `data`: the value and the offset just
/// past it, or None when nothing converts. Accepts what glibc does: a sign, decimal with
/// optional exponent, hex floats (`0x1.8p3`), `inf`/`infinity`, `nan`/`nan(chars)`, any case.
pub(crate) fn strtod(data: &[u8], start: usize) -> Option<(f64, usize)> {
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let word = |at: usize, w: &[u8]| w.iter().enumerate().all(|(i, c)| b(at + i).eq_ignore_ascii_case(c));
    let mut p = start;
    let negative = b(p) == b'-';
    if matches!(b(p), b'+' | b'-') {
        p += 1;
    }
    let signed = |x: f64| if negative { -x } else { x };
    if word(p, b"inf") {
        p += if word(p + 3, b"inity") { 8 } else { 3 };
        return Some((signed(f64::INFINITY), p));
    }
    if word(p, b"nan") {
        p += 3;
        if b(p) == b'(' {
            let mut q = p + 1;
            while b(q).is_ascii_alphanumeric() || b(q) == b'_' {
                q += 1;
            }
            if b(q) == b')' {
                p = q + 1;
            }
        }
        return Some((signed(f64::NAN), p));
    }
    if b(p) == b'0' && b(p + 1) | 0x20 == b'x' {
        return Some(match hex_float(data, p + 2) {
            Some((x, end)) => (signed(x), end),
            // "0x" without digits converts the "0" alone.
            None => (signed(0.0), p + 1),
        });
    }
    let digits_from = |mut q: usize| {
        while b(q).is_ascii_digit() {
            q += 1;
        }
        q
    };
    let int_end = digits_from(p);
    let (mut q, mut frac) = (int_end, &data[int_end..int_end]);
    if b(q) == b'.' {
        let frac_end = digits_from(q + 1);
        frac = &data[q + 1..frac_end.min(data.len())];
        q = frac_end;
    }
    if int_end == p && frac.is_empty() {
        return None;
    }
    let mut exponent = &data[q..q];
    if b(q) | 0x20 == b'e' {
        let mut e = q + 1;
        if matches!(b(e), b'+' | b'-') {
            e += 1;
        }
        let e_end = digits_from(e);
        if e_end > e {
            exponent = &data[q + 1..e_end];
            q = e_end;
        }
    }
    // Rebuilt in one shape Rust's parser takes ("1." and ".5" are strtod forms); Rust's
    // conversion is correctly rounded, like glibc's.
    let text = format!("{}.{}e{}", as_ascii(&data[p..int_end], "0"), as_ascii(frac, "0"), as_ascii(exponent, "0"));
    let x: f64 = text.parse().ok()?;
    Some((signed(x), q))
}

fn as_ascii<'a>(digits: &'a [u8], empty: &'a str) -> &'a str {
    match std::str::from_utf8(digits) {
        Ok(s) if !s.is_empty() => s,
        _ => empty,
    }
}

/// The digits of a hex float after "0x": mantissa `h*[.h*]` with at least one digit, then an
/// optional binary exponent `p[+-]d+`.
fn hex_float(data: &[u8], start: usize) -> Option<(f64, usize)> {
    let b = |i: usize| data.get(i).copied().unwrap_or(0);
    let hex = |c: u8| char::from(c).to_digit(16);
    let (mut mant, mut exp, mut sticky, mut any, mut seen_dot) = (0u64, 0i64, false, false, false);
    let mut q = start;
    loop {
        let c = b(q);
        if c == b'.' && !seen_dot {
            seen_dot = true;
        } else if let Some(d) = hex(c) {
            any = true;
            if mant >> 60 == 0 {
                mant = mant << 4 | u64::from(d);
                if seen_dot {
                    exp -= 4;
                }
            } else {
                // Beyond 64 bits of mantissa only "was anything non-zero" matters for rounding.
                sticky |= d != 0;
                if !seen_dot {
                    exp += 4;
                }
            }
        } else {
            break;
        }
        q += 1;
    }
    if !any {
        return None;
    }
    if b(q) | 0x20 == b'p' {
        let mut e = q + 1;
        let neg = b(e) == b'-';
        if matches!(b(e), b'+' | b'-') {
            e += 1;
        }
        if b(e).is_ascii_digit() {
            let mut v: i64 = 0;
            while b(e).is_ascii_digit() {
                v = (v * 10 + i64::from(b(e) - b'0')).min(1 << 20);
                e += 1;
            }
            exp += if neg { -v } else { v };
            q = e;
        }
    }
    if sticky {
        mant |= 1;
    }
    let mut x = mant as f64;
    let mut exp = exp.clamp(-1 << 21, 1 << 21);
    while exp != 0 && x != 0.0 && x.is_finite() {
        let step = exp.clamp(-1000, 1000);
        x *= 2f64.powi(step as i32);
        exp -= step;
    }
    Some((x, q))
}

/// Beyond this many `null`s to pad, an array is treated as excessively sparse whatever the
/// ratio setting (see [`Encoder::array_length`]).
const MAX_ARRAY_HOLES: i64 = 1 << 24;

const HEX: &[u8; 16] = b"0123456789abcdef";

const BOOL_OPTIONS: &[&str] = &["off", "on"];

const INVALID_NUMBER_OPTIONS: &[&str] = &["off", "on", "null"];

#[cfg(test)]
mod tests {
    use super::{format_g, strtod};
    use crate::libs::tests::{eval, eval_err, eval_in, state};

    fn encode(lua_value: &str) -> String {
        eval(&format!("return cjson.encode({lua_value})"))
    }

    fn decode_err(json: &str) -> String {
        eval_err(&format!("return cjson.decode({json:?})"))
    }

    #[test]
    fn encodes_scalars_and_strings() {
        assert_eq!(encode("nil"), "null");
        assert_eq!(encode("cjson.null"), "null");
        assert_eq!(encode("true"), "true");
        assert_eq!(encode("'a/b'"), r#""a\/b""#);
        assert_eq!(
            encode("string.char(0,1,8,9,10,12,13,31,34,47,92,127,65)"),
            r#""\u0000\u0001\b\t\n\f\r\u001f\"\/\\\u007fA""#
        );
        // Bytes from 0x80 pass through untouched, valid UTF-8 or not.
        assert_eq!(eval("return cjson.encode(string.char(128, 255)) == '\"' .. string.char(128, 255) .. '\"'"), "true");
    }

    #[test]
    fn numbers_use_percent_14g() {
        for (lua, json) in [
            ("0.1", "0.1"),
            ("1/3", "0.33333333333333"),
            ("1e15", "1e+15"),
            ("123456789012345", "1.2345678901234e+14"),
            ("-0.0", "-0"),
            ("1e-5", "1e-05"),
            ("0.0001", "0.0001"),
            ("2^53", "9.007199254741e+15"),
            ("1e100", "1e+100"),
            ("100", "100"),
            ("-1.5", "-1.5"),
        ] {
            assert_eq!(encode(lua), json, "{lua}");
        }
        assert_eq!(eval("cjson.encode_number_precision(3) return cjson.encode(3.14159)"), "3.14");
    }

    #[test]
    fn format_g_matches_printf() {
        assert_eq!(format_g(0.125, 2), "0.12");
        assert_eq!(format_g(0.375, 2), "0.38");
        assert_eq!(format_g(2.5, 1), "2");
        assert_eq!(format_g(99999.5, 5), "1e+05");
        assert_eq!(format_g(1e-320, 14), "9.9998886718268e-321");
        assert_eq!(format_g(f64::INFINITY, 14), "inf");
        assert_eq!(format_g(f64::NEG_INFINITY, 14), "-inf");
    }

    #[test]
    fn tables_are_arrays_or_objects_as_lua_cjson_decides() {
        assert_eq!(encode("{}"), "{}");
        assert_eq!(encode("{1, 2, 'x'}"), r#"[1,2,"x"]"#);
        assert_eq!(encode("{[1]=1,[3]=3}"), "[1,null,3]");
        assert_eq!(encode("{[1]=1,[4]=3}"), "[1,null,null,3]");
        assert_eq!(encode("{[0]=1}"), r#"{"0":1}"#);
        assert_eq!(encode("{[1.5]=1}"), r#"{"1.5":1}"#);
        assert_eq!(encode("{[-1]=1}"), r#"{"-1":1}"#);
        assert_eq!(encode("{1, 2, x=3}").len(), r#"{"1":1,"2":2,"x":3}"#.len());
        assert_eq!(encode("{a={b={}}}"), r#"{"a":{"b":{}}}"#);
        assert_eq!(encode("{cjson.null, false}"), "[null,false]");
    }

    #[test]
    fn sparse_arrays_follow_the_settings() {
        assert_eq!(eval_err("return cjson.encode({[1]=1,[30]=3})"), "Cannot serialise table: excessively sparse array");
        // max <= safe (10) is always an array.
        assert_eq!(encode("{[10]=1}"), "[null,null,null,null,null,null,null,null,null,1]");
        assert_eq!(eval("return cjson.encode_sparse_array()"), "false 2 10");
        assert_eq!(eval("return cjson.encode_sparse_array(true, 3, 5)"), "true 3 5");
        assert_eq!(
            eval("cjson.encode_sparse_array(true) return cjson.encode({[1]=1,[100]=2})").len(),
            r#"{"1":1,"100":2}"#.len()
        );
        assert_eq!(eval("cjson.encode_sparse_array(false, 0) return #cjson.encode({[1]=1,[100]=2})"), "495");
        // A handful of keys may not make us write millions of nulls, even with ratio 0.
        assert_eq!(eval("return cjson.encode({[2^31]=1})"), r#"{"2147483648":1}"#);
        assert_eq!(eval("return cjson.encode({[2^31]=1, [1]=2})"), "[2]");
        assert_eq!(
            eval_err("cjson.encode_sparse_array(false, 0) return cjson.encode({[2^30]=1})"),
            "Cannot serialise table: excessively sparse array"
        );
    }

    #[test]
    fn encode_errors() {
        assert_eq!(eval_err("return cjson.encode(function() end)"), "Cannot serialise function: type not supported");
        assert_eq!(
            eval_err("return cjson.encode({coroutine.create(function() end)})"),
            "Cannot serialise thread: type not supported"
        );
        assert_eq!(
            eval_err("return cjson.encode({[true]=1})"),
            "Cannot serialise boolean: table key must be a number or string"
        );
        assert_eq!(eval_err("return cjson.encode(0/0)"), "Cannot serialise number: must not be NaN or Inf");
        assert_eq!(eval_err("return cjson.encode({[1/0]=1})"), "Cannot serialise number: must not be NaN or Inf");
        assert_eq!(eval_err("return cjson.encode()"), "bad argument #1 to 'encode' (expected 1 argument)");
        assert_eq!(eval_err("return cjson.encode(1, 2)"), "bad argument #1 to 'encode' (expected 1 argument)");
        assert_eq!(
            eval_err("cjson.encode_max_depth(2) return cjson.encode({{{1}}})"),
            "Cannot serialise, excessive nesting (3)"
        );
        assert_eq!(
            eval_err("local a = {} a[1] = a return cjson.encode(a)"),
            "Cannot serialise, excessive nesting (1001)"
        );
        // Raising the setting does not lift the built-in bound on recursion.
        assert_eq!(
            eval_err("cjson.encode_max_depth(5000) local a = {} a[1] = a return cjson.encode(a)"),
            "Cannot serialise, excessive nesting (1001)"
        );
    }

    #[test]
    fn invalid_numbers_settings() {
        assert_eq!(eval("cjson.encode_invalid_numbers(true) return cjson.encode({1/0, -1/0, 0/0})"), "[inf,-inf,nan]");
        assert_eq!(
            eval("cjson.encode_invalid_numbers('null') return cjson.encode({1/0, -1/0, 0/0})"),
            "[null,null,null]"
        );
        assert_eq!(eval("return cjson.encode_invalid_numbers('null')"), "null");
        assert_eq!(eval("return cjson.encode_invalid_numbers('on')"), "true");
        assert_eq!(eval("return cjson.encode_invalid_numbers(false)"), "false");
        assert_eq!(eval("return cjson.encode_invalid_numbers()"), "false");
        assert_eq!(
            eval_err("return cjson.encode_invalid_numbers('x')"),
            "bad argument #1 to 'encode_invalid_numbers' (invalid option 'x')"
        );
        assert_eq!(
            eval_err("return cjson.encode_invalid_numbers(1, 2)"),
            "bad argument #2 to 'encode_invalid_numbers' (found too many arguments)"
        );
        assert_eq!(eval("return cjson.decode_invalid_numbers()"), "true");
        assert_eq!(
            eval_err("return cjson.decode_invalid_numbers({})"),
            "bad argument #1 to 'decode_invalid_numbers' (string expected, got table)"
        );
    }

    #[test]
    fn integer_settings() {
        assert_eq!(eval("return cjson.encode_max_depth()"), "1000");
        assert_eq!(eval("return cjson.encode_max_depth(7)"), "7");
        assert_eq!(eval("return cjson.decode_max_depth('12')"), "12");
        assert_eq!(eval("return cjson.encode_keep_buffer(false)"), "false");
        assert_eq!(
            eval_err("return cjson.encode_max_depth(0)"),
            "bad argument #1 to 'encode_max_depth' (expected integer between 1 and 2147483647)"
        );
        assert_eq!(
            eval_err("return cjson.encode_number_precision(15)"),
            "bad argument #1 to 'encode_number_precision' (expected integer between 1 and 14)"
        );
        assert_eq!(
            eval_err("return cjson.encode_max_depth('x')"),
            "bad argument #1 to 'encode_max_depth' (number expected, got string)"
        );
        assert_eq!(
            eval_err("return cjson.encode_sparse_array(nil, -1)"),
            "bad argument #1 to 'encode_sparse_array' (expected integer between 0 and 2147483647)"
        );
    }

    #[test]
    fn decodes_values() {
        assert_eq!(
            eval(r#"return table.concat(cjson.decode("[0.0, -5e3, -1, 0.3e-3, 1023.2, 0e10]"), " ")"#),
            "0 -5000 -1 0.0003 1023.2 0"
        );
        assert_eq!(eval(r#"local d = cjson.decode('{"keya": "a", "keyb": "b"}') return d.keya, d.keyb"#), "a b");
        assert_eq!(
            eval(r#"return cjson.decode('"\\u00e9\\ud83d\\ude00\\/\\n"') == "\195\169\240\159\152\128/\n""#),
            "true"
        );
        assert_eq!(eval("return cjson.decode('null') == cjson.null, type(cjson.null)"), "true userdata");
        assert_eq!(eval("local t = cjson.decode('[1, null, 3]') return #t, t[2] == cjson.null"), "3 true");
        assert_eq!(eval("return cjson.decode(123)"), "123");
        assert_eq!(eval("return cjson.decode(' true ')"), "true");
        assert_eq!(eval("return cjson.decode('[1]\\0zz')[1]"), "1");
        assert_eq!(eval("return next(cjson.decode('{}')), #cjson.decode('[]')"), "nil 0");
        assert_eq!(eval(r#"return cjson.decode('{"a":1,"a":2}').a"#), "2");
    }

    #[test]
    fn decodes_numbers_the_way_strtod_does() {
        for (json, shown) in [
            ("+1", "1"),
            ("01", "1"),
            ("0x10", "16"),
            ("0x1.8p1", "3"),
            ("1.e2", "100"),
            ("-Infinity", "-inf"),
            ("inf", "inf"),
            ("nan", "nan"),
            ("1e999", "inf"),
            ("-0", "-0"),
        ] {
            assert_eq!(eval(&format!("return tostring(cjson.decode({json:?}))")), shown, "{json}");
        }
        assert_eq!(strtod(b"12.5e-1x", 0), Some((1.25, 7)));
        assert_eq!(strtod(b"0x", 0), Some((0.0, 1)));
        assert_eq!(strtod(b"-", 0), None);
        assert_eq!(strtod(b"nan(abc)]", 0).map(|(_, end)| end), Some(8));
        assert_eq!(strtod(b"infinity", 0), Some((f64::INFINITY, 8)));
    }

    #[test]
    fn decode_errors_match_lua_cjson() {
        for (json, err) in [
            ("x", "Expected value but found invalid token at character 1"),
            ("", "Expected value but found T_END at character 1"),
            (" ", "Expected value but found T_END at character 2"),
            ("[1,2", "Expected comma or array end but found T_END at character 5"),
            ("[1 2]", "Expected comma or array end but found T_NUMBER at character 4"),
            ("{1:2}", "Expected object key string but found T_NUMBER at character 2"),
            (r#"{"a" 2}"#, "Expected colon but found T_NUMBER at character 6"),
            (r#"{"a":2 "b"}"#, "Expected comma or object end but found T_STRING at character 8"),
            ("[1] x", "Expected the end but found invalid token at character 5"),
            ("\"abc", "Expected value but found unexpected end of string at character 5"),
            (r#""a\qb""#, "Expected value but found invalid escape code at character 3"),
            (r#""\u12""#, "Expected value but found invalid unicode escape code at character 2"),
            (r#""\udc00""#, "Expected value but found invalid unicode escape code at character 2"),
            (r#""\ud800x""#, "Expected value but found invalid unicode escape code at character 2"),
            ("nul", "Expected value but found invalid token at character 1"),
            ("tru", "Expected value but found invalid token at character 1"),
            ("-", "Expected value but found invalid number at character 1"),
            (".5", "Expected value but found invalid token at character 1"),
            ("[1,]", "Expected value but found T_ARR_END at character 4"),
            (r#"{"a":1,}"#, "Expected object key string but found T_OBJ_END at character 8"),
            ("1e", "Expected the end but found invalid token at character 2"),
            ("1e5x", "Expected the end but found invalid token at character 4"),
            ("a\0", "JSON parser does not support UTF-16 or UTF-32"),
            ("\"a\0b\"", "Expected value but found unexpected end of string at character 3"),
        ] {
            assert_eq!(decode_err(json), err, "{json:?}");
        }
        assert_eq!(eval_err("return cjson.decode()"), "bad argument #1 to 'decode' (expected 1 argument)");
        assert_eq!(eval_err("return cjson.decode({})"), "bad argument #1 to 'decode' (string expected, got table)");
    }

    #[test]
    fn strict_numbers_when_invalid_numbers_are_off() {
        let lua = state();
        eval_in(&lua, "cjson.decode_invalid_numbers(false)");
        for (json, err) in [
            ("inf", "Expected value but found invalid token at character 1"),
            ("-01", "Expected value but found invalid number at character 1"),
            ("+1", "Expected value but found invalid token at character 1"),
            ("0x1", "Expected value but found invalid number at character 1"),
        ] {
            let got = crate::libs::tests::eval_err_in(&lua, &format!("return cjson.decode({json:?})"));
            assert_eq!(got, err, "{json}");
        }
        assert_eq!(eval_in(&lua, "return cjson.decode('-0.5e1')"), "-5");
    }

    #[test]
    fn nesting_limits() {
        assert_eq!(eval("return cjson.decode('[[[[1]]]]')[1][1][1][1]"), "1");
        assert_eq!(
            eval_err("cjson.decode_max_depth(2) return cjson.decode('[[[1]]]')"),
            "Found too many nested data structures (3) at character 3"
        );
        assert_eq!(
            eval_err(r#"cjson.decode_max_depth(2) return cjson.decode('{"a":{"b":{}}}')"#),
            "Found too many nested data structures (3) at character 11"
        );
        assert_eq!(
            eval_err("cjson.decode_max_depth(100000) return cjson.decode(string.rep('[', 100000))"),
            "Found too many nested data structures (1001) at character 1001"
        );
        // 1000 levels each way is the default limit and must fit a test thread's stack.
        assert_eq!(
            eval("local s = string.rep('[', 1000) .. string.rep(']', 1000) return #cjson.encode(cjson.decode(s))"),
            "2000"
        );
    }

    #[test]
    fn json_smoke_test_from_scripting_tcl() {
        eval(
            r#"
            local some_map = {
                s1="Some string", n1=100, a1={"Some","String","Array"}, nil1=nil, b1=true, b2=false}
            local encoded = cjson.encode(some_map)
            local decoded = cjson.decode(encoded)
            assert(table.concat(some_map) == table.concat(decoded))

            cjson.encode_keep_buffer(false)
            encoded = cjson.encode(some_map)
            decoded = cjson.decode(encoded)
            assert(table.concat(some_map) == table.concat(decoded))

            local table1 = {one="one", [1]="one"}
            encoded = cjson.encode(table1)
            decoded = cjson.decode(encoded)
            assert(decoded["one"] == table1["one"])
            assert(decoded["1"] == table1[1])

            local array1 = {[1]="one", [2]="two"}
            encoded = cjson.encode(array1)
            decoded = cjson.decode(encoded)
            assert(table.concat(array1) == table.concat(decoded))

            local invalid_map = {}
            invalid_map[false] = "false"
            local ok, encoded = pcall(cjson.encode, invalid_map)
            assert(ok == false)

            cjson.encode_max_depth(1)
            ok, encoded = pcall(cjson.encode, some_map)
            assert(ok == false)

            cjson.decode_max_depth(1)
            ok, decoded = pcall(cjson.decode, '{"obj": {"array": [1,2,3,4]}}')
            assert(ok == false)

            ok, encoded = pcall(cjson.encode, {num1=0/0})
            assert(ok == false)
            cjson.encode_invalid_numbers(true)
            ok, encoded = pcall(cjson.encode, {num1=0/0})
            assert(ok == true)
            "#,
        );
    }

    #[test]
    fn new_tables_have_their_own_settings() {
        assert_eq!(
            eval(
                "local c = cjson.new() c.encode_max_depth(3) return cjson.encode_max_depth(), c.encode_max_depth(), c.null == cjson.null, c._NAME, c._VERSION"
            ),
            "1000 3 true cjson 2.1.0"
        );
        assert_eq!(eval("return type(cjson.new().new().encode)"), "function");
    }

    /// A script may call `cjson.new()` on every run: what each call makes goes with its table,
    /// none of it into the dispatcher's list, which lives as long as the VM.
    #[test]
    fn new_tables_leave_nothing_behind() {
        let lua = mlua::Lua::new();
        let w = super::super::Wrappers::new(&lua).unwrap();
        lua.globals().set("cjson", super::module(&lua, &w).unwrap()).unwrap();
        let made = w.bodies();
        let r = crate::libs::tests::eval_in(
            &lua,
            "local n = 0 for i = 1, 200 do local c = cjson.new() c.encode_max_depth(2) \
             n = n + #c.encode({i}) + (pcall(c.encode, {{{}}}) and 0 or 1) end return n",
        );
        assert_eq!(r, (1..=200).map(|i: usize| i.to_string().len() + 2 + 1).sum::<usize>().to_string());
        assert_eq!(w.bodies(), made);
    }
}
