//! The conversion rules between RESP replies and Lua values, as Valkey's `script_lua.c`
//! applies them: a command's reply becomes a Lua value for the script, and the script's
//! return value becomes the client's reply.

use hotkv_protocol::ReplyBuf;
use mlua::{Lua, Table, Value};

/// How deep a returned table may nest before the reply says so instead of recursing on
/// (a table may even contain itself).
pub(crate) const MAX_DEPTH: usize = 200;

/// A reply the server wrote that does not parse: never expected, reported rather than trusted.
#[derive(Debug)]
pub struct BadReply;

/// An aggregate's element count, checked against what the rest of the buffer can hold (each
/// element takes at least three bytes) before anything is allocated for it.
pub(crate) fn count(n: i64, buf: &[u8], at: usize) -> Result<usize, BadReply> {
    let n = usize::try_from(n).map_err(|_| BadReply)?;
    if n > (buf.len() - at) / 3 + 1 {
        return Err(BadReply);
    }
    Ok(n)
}

pub(crate) fn read_line<'b>(buf: &'b [u8], at: &mut usize) -> Result<&'b [u8], BadReply> {
    let start = *at + 1;
    let rest = buf.get(start..).ok_or(BadReply)?;
    let end = memchr_crlf(rest).ok_or(BadReply)?;
    *at = start + end + 2;
    Ok(&rest[..end])
}

fn memchr_crlf(b: &[u8]) -> Option<usize> {
    b.windows(2).position(|w| w == b"\r\n")
}

pub(crate) fn bulk<'b>(buf: &'b [u8], at: &mut usize, n: i64) -> Result<&'b [u8], BadReply> {
    let n = usize::try_from(n).map_err(|_| BadReply)?;
    let body = buf.get(*at..*at + n).ok_or(BadReply)?;
    if buf.get(*at + n..*at + n + 2) != Some(b"\r\n") {
        return Err(BadReply);
    }
    *at += n + 2;
    Ok(body)
}

pub(crate) fn nan_or_inf(line: &[u8]) -> Option<f64> {
    match line {
        b"inf" => Some(f64::INFINITY),
        b"-inf" => Some(f64::NEG_INFINITY),
        b"nan" => Some(f64::NAN),
        _ => None,
    }
}

/// The `{err="CODE message"}` table of an error reply or of an error text (Valkey's
/// `luaPushErrorBuff`): a text starting with `-` has its code; one without gets `ERR`.
/// `from_call` marks errors already counted in errorstats when the command failed.
pub fn error_table(lua: &Lua, text: &[u8], from_call: bool) -> Result<Value, BadReply> {
    #[allow(unsafe_code)]
    // SAFETY: inside mlua's protected call, which has room for what push_error checks for;
    // the closure holds nothing with a destructor.
    let t = unsafe { lua.exec_raw::<Value>((), |l| crate::raw::push_error(l, error_parts(text), from_call)) };
    t.map_err(|_| BadReply)
}

/// An error text as `CODE message` (the body of Valkey's `luaPushErrorBuff`), in three pieces
/// to be joined, borrowed from `text`: newlines trimmed, `-CODE message` keeps its code, a bare
/// message gets `ERR`.
pub fn error_parts(text: &[u8]) -> [&[u8]; 3] {
    let text = trim_newlines(text);
    match text.strip_prefix(b"-") {
        Some(rest) => coded_parts(rest),
        None => [b"ERR ", text, b""],
    }
}

/// The pieces of an error reply's line (`CODE message`, after its `-`).
pub fn coded_parts(line: &[u8]) -> [&[u8]; 3] {
    match line.iter().position(|&c| c == b' ') {
        Some(sp) => [&line[..sp], b" ", trim_newlines(&line[sp + 1..])],
        None => [b"ERR ", line, b""],
    }
}

fn trim_newlines(mut b: &[u8]) -> &[u8] {
    while let [rest @ .., b'\r' | b'\n'] = b {
        b = rest;
    }
    while let [b'\r' | b'\n', rest @ ..] = b {
        b = rest;
    }
    b
}

/// Writes the script's return value `v` as the reply to the client (Valkey's
/// `luaReplyToServerReply`). `script_resp` is the protocol the script chose with
/// `redis.setresp`, which decides how booleans go out; `out`'s own protocol decides the rest.
pub fn lua_to_reply(v: &Value, script_resp: u8, out: &mut ReplyBuf) {
    write_value(v, script_resp, out, 0);
}

fn write_value(v: &Value, script_resp: u8, out: &mut ReplyBuf, depth: usize) {
    if depth > MAX_DEPTH {
        out.error("ERR reached lua stack limit");
        return;
    }
    match v {
        Value::String(s) => out.bulk(&s.as_bytes()),
        Value::Boolean(b) => {
            if script_resp == 2 {
                if *b { out.int(1) } else { out.null() }
            } else {
                out.boolean(*b);
            }
        }
        Value::Integer(n) => out.int(*n),
        // C's (long long) cast, saturating where C would be undefined.
        Value::Number(n) => out.int(*n as i64),
        Value::Table(t) => write_table(t, script_resp, out, depth),
        _ => out.null(),
    }
}

fn write_table(t: &Table, script_resp: u8, out: &mut ReplyBuf, depth: usize) {
    if let Ok(Value::String(e)) = t.raw_get::<Value>("err") {
        let msg = e.as_bytes();
        out.error(&String::from_utf8_lossy(&msg));
        return;
    }
    if let Ok(Value::String(ok)) = t.raw_get::<Value>("ok") {
        let text: Vec<u8> = ok.as_bytes().iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }).collect();
        out.simple_bytes(&text);
        return;
    }
    if let Ok(Value::Number(d)) = t.raw_get::<Value>("double") {
        out.double(d);
        return;
    }
    if let Ok(Value::Integer(d)) = t.raw_get::<Value>("double") {
        out.double(d as f64);
        return;
    }
    if let Ok(Value::String(n)) = t.raw_get::<Value>("big_number") {
        let digits: Vec<u8> = n.as_bytes().iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }).collect();
        out.big_number(&digits);
        return;
    }
    if let Ok(Value::Table(vt)) = t.raw_get::<Value>("verbatim_string")
        && let (Ok(Value::String(format)), Ok(Value::String(text))) =
            (vt.raw_get::<Value>("format"), vt.raw_get::<Value>("string"))
    {
        let text = text.as_bytes();
        if !out.is_resp3() {
            out.bulk(&text);
            return;
        }
        let mut format = format.as_bytes().to_vec();
        format.resize(3, b' ');
        out.raw(format!("={}\r\n", text.len() + 4).as_bytes());
        out.raw(&format);
        out.raw(b":");
        out.raw(&text);
        out.crlf();
        return;
    }
    if let Ok(Value::Table(m)) = t.raw_get::<Value>("map") {
        let pairs: Vec<(Value, Value)> = m.pairs::<Value, Value>().filter_map(Result::ok).collect();
        out.map(pairs.len());
        for (k, v) in &pairs {
            write_value(k, script_resp, out, depth + 1);
            write_value(v, script_resp, out, depth + 1);
        }
        return;
    }
    if let Ok(Value::Table(s)) = t.raw_get::<Value>("set") {
        let keys: Vec<Value> = s.pairs::<Value, Value>().filter_map(|p| p.ok().map(|(k, _)| k)).collect();
        out.set(keys.len());
        for k in &keys {
            write_value(k, script_resp, out, depth + 1);
        }
        return;
    }
    let mut n = 0usize;
    while !matches!(t.raw_get::<Value>(n + 1), Ok(Value::Nil) | Err(_)) {
        n += 1;
    }
    out.array(n);
    for i in 1..=n {
        let v = t.raw_get::<Value>(i).unwrap_or(Value::Nil);
        write_value(&v, script_resp, out, depth + 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use hotkv_protocol::Protocol;

    /// One RESP reply as the Lua value a script sees, through `redis.call`'s own conversion.
    fn reply_to_lua(lua: &Lua, reply: &[u8]) -> mlua::Result<Value> {
        let mut bad = false;
        #[allow(unsafe_code)]
        // SAFETY: inside mlua's protected call with room for a value; nothing here has a
        // destructor (see the `raw` module doc).
        let v = unsafe {
            lua.exec_raw::<Value>((), |l| {
                if crate::raw::push_reply(l, reply, &mut 0, 0).is_err() {
                    bad = true;
                    mlua::ffi::lua_settop(l, 0);
                }
            })
        }?;
        if bad {
            return Err(mlua::Error::runtime("malformed reply from command"));
        }
        Ok(v)
    }

    fn roundtrip(reply: &[u8], resp3: bool) -> Vec<u8> {
        let lua = Lua::new();
        let v = reply_to_lua(&lua, reply).unwrap();
        let mut out = ReplyBuf::new();
        if resp3 {
            out.set_protocol(Protocol::Resp3);
        }
        lua_to_reply(&v, if resp3 { 3 } else { 2 }, &mut out);
        out.as_bytes().to_vec()
    }

    #[test]
    fn replies_survive_the_trip_through_lua() {
        for r in [
            &b"+OK\r\n"[..],
            b"-ERR bad thing\r\n",
            b":42\r\n",
            b"$3\r\nfoo\r\n",
            b"*2\r\n$1\r\na\r\n:1\r\n",
            b"*0\r\n",
        ] {
            assert_eq!(roundtrip(r, false), r, "{}", String::from_utf8_lossy(r));
        }
        // Nulls become false, which goes back as a null bulk.
        assert_eq!(roundtrip(b"$-1\r\n", false), b"$-1\r\n");
        assert_eq!(roundtrip(b"*-1\r\n", false), b"$-1\r\n");
        // RESP3 types keep their shape for a RESP3 client and script.
        for r in [&b"%1\r\n$1\r\na\r\n:1\r\n"[..], b"~1\r\n$1\r\na\r\n", b",3.5\r\n", b"#t\r\n", b"(123\r\n", b"_\r\n"]
        {
            assert_eq!(roundtrip(r, true), r, "{}", String::from_utf8_lossy(r));
        }
        assert_eq!(roundtrip(b"=8\r\ntxt:abcd\r\n", true), b"=8\r\ntxt:abcd\r\n");
        // An attribute is dropped, the reply it annotates kept.
        assert_eq!(roundtrip(b"|1\r\n+a\r\n+b\r\n:7\r\n", false), b":7\r\n");
    }

    #[test]
    fn lua_values_reply_as_valkey() {
        let lua = Lua::new();
        let reply = |code: &str, resp: u8| {
            let v: Value = lua.load(code).eval().unwrap();
            let mut out = ReplyBuf::new();
            lua_to_reply(&v, resp, &mut out);
            String::from_utf8(out.as_bytes().to_vec()).unwrap()
        };
        assert_eq!(reply("return 3.99", 2), ":3\r\n");
        assert_eq!(reply("return -3.99", 2), ":-3\r\n");
        assert_eq!(reply("return true", 2), ":1\r\n");
        assert_eq!(reply("return false", 2), "$-1\r\n");
        assert_eq!(reply("return nil", 2), "$-1\r\n");
        assert_eq!(reply("return {1,2,nil,4}", 2), "*2\r\n:1\r\n:2\r\n");
        assert_eq!(reply("return {err='My Error'}", 2), "-My Error\r\n");
        assert_eq!(reply("return {ok='fine\\nday'}", 2), "+fine day\r\n");
        assert_eq!(reply("return {double=3.5}", 2), "$3\r\n3.5\r\n");
        let selfref = reply("local t = {} t[1] = t return t", 2);
        assert!(selfref.contains("reached lua stack limit"));
    }

    #[test]
    fn malformed_replies_are_refused_not_trusted() {
        let lua = Lua::new();
        for bad in [&b""[..], b"*5\r\n", b"$10\r\nabc\r\n", b"*99999999999\r\n", b"?x\r\n", b":x\r\n"] {
            assert!(reply_to_lua(&lua, bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn error_texts_get_a_code() {
        let text = |t: &[u8]| error_parts(t).concat();
        assert_eq!(text(b"-WRONGTYPE bad\r\n"), b"WRONGTYPE bad");
        assert_eq!(text(b"-oops"), b"ERR oops");
        assert_eq!(text(b"plain text"), b"ERR plain text");
    }
}
