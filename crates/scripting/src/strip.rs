//! Lua 5.1 bytecode without its debug information, as `luac -s` writes it.
//!
//! Every VM holds the API chunk's function prototypes (api.lua) for as long as it lives. Their
//! line table (one int per instruction), local variable names and upvalue names are only read
//! by error messages raised inside the API itself and by the debug library, which scripts do
//! not get; Lua 5.1's `lua_dump` has no option to leave them out, so the dump is rewritten here
//! with the three lists empty. Errors the API raises for the script's caller (`error(msg, 2)`)
//! still name the script's line: that comes from the script's own prototypes.
//!
//! The format (`ldump.c`): a 12-byte header, then per function its source, line range, four
//! byte-sized counts, code, constants, nested functions, and the debug lists.

/// What a dump that does not parse as expected says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Malformed(&'static str);

/// `chunk` (a Lua 5.1 dump made on this machine) without its debug lists.
pub(crate) fn strip(chunk: &[u8]) -> Result<Vec<u8>, Malformed> {
    const HEADER: usize = 12;
    let header = chunk.get(..HEADER).ok_or(Malformed("short header"))?;
    if &header[..5] != b"\x1bLua\x51" {
        return Err(Malformed("not a Lua 5.1 chunk"));
    }
    // int, size_t and Instruction as this build has them; anything else is another machine's.
    if header[7..11] != [4, 8, 4, 8] || header[6] != 1 {
        return Err(Malformed("unexpected sizes or byte order"));
    }
    let mut r = Reader { buf: chunk, at: HEADER };
    let mut out = header.to_vec();
    function(&mut r, &mut out)?;
    if r.at != chunk.len() {
        return Err(Malformed("trailing bytes"));
    }
    Ok(out)
}

struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8], Malformed> {
        let end = self.at.checked_add(n).ok_or(Malformed("length overflow"))?;
        let s = self.buf.get(self.at..end).ok_or(Malformed("truncated"))?;
        self.at = end;
        Ok(s)
    }

    fn int(&mut self) -> Result<usize, Malformed> {
        let b = self.take(4)?;
        let n = i32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        usize::try_from(n).map_err(|_| Malformed("negative count"))
    }

    /// A string: its size_t length (with the terminating NUL, 0 for none), then its bytes.
    fn string(&mut self) -> Result<&[u8], Malformed> {
        let b = self.take(8)?;
        let len = u64::from_le_bytes(b.try_into().map_err(|_| Malformed("truncated"))?);
        let len = usize::try_from(len).map_err(|_| Malformed("length overflow"))?;
        let start = self.at - 8;
        self.take(len)?;
        Ok(&self.buf[start..self.at])
    }
}

fn function(r: &mut Reader<'_>, out: &mut Vec<u8>) -> Result<(), Malformed> {
    out.extend_from_slice(r.string()?); // source
    out.extend_from_slice(r.take(4 + 4 + 4)?); // linedefined, lastlinedefined, 4 counts
    let code = r.int()?;
    out.extend_from_slice(&(code as i32).to_le_bytes());
    out.extend_from_slice(r.take(code.checked_mul(4).ok_or(Malformed("length overflow"))?)?);
    let constants = r.int()?;
    out.extend_from_slice(&(constants as i32).to_le_bytes());
    for _ in 0..constants {
        let kind = r.take(1)?[0];
        out.push(kind);
        match kind {
            0 => {}                                  // nil
            1 => out.push(r.take(1)?[0]),            // boolean
            3 => out.extend_from_slice(r.take(8)?),  // number
            4 => out.extend_from_slice(r.string()?), // string
            _ => return Err(Malformed("unknown constant type")),
        }
    }
    let protos = r.int()?;
    out.extend_from_slice(&(protos as i32).to_le_bytes());
    for _ in 0..protos {
        function(r, out)?;
    }
    // The debug lists, read past and written empty.
    let lines = r.int()?;
    r.take(lines.checked_mul(4).ok_or(Malformed("length overflow"))?)?;
    for _ in 0..r.int()? {
        r.string()?;
        r.take(8)?;
    }
    for _ in 0..r.int()? {
        r.string()?;
    }
    out.extend_from_slice(&[0; 12]);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dump(lua: &mlua::Lua, src: &str) -> Vec<u8> {
        lua.load(src).set_name("=t").into_function().unwrap().dump(false)
    }

    #[test]
    fn a_stripped_chunk_runs_the_same_and_is_smaller() {
        let lua = mlua::Lua::new();
        let src = "local function f(a, b) local c = a * b; return function(x) return c + x end end\n\
                   local t = {1, 'two', true, 3.5, nil}\n return f(6, 7)(t[1]), t[2], t[3], t[4]";
        let full = dump(&lua, src);
        let stripped = strip(&full).unwrap();
        assert!(stripped.len() < full.len(), "{} !< {}", stripped.len(), full.len());
        let f: mlua::Function = lua.load(&stripped[..]).set_mode(mlua::ChunkMode::Binary).into_function().unwrap();
        let got: (i64, String, bool, f64) = f.call(()).unwrap();
        assert_eq!(got, (43, "two".to_string(), true, 3.5));
        // Stripping twice changes nothing more.
        assert_eq!(strip(&stripped).unwrap(), stripped);
    }

    #[test]
    fn what_is_not_a_dump_is_refused_not_trusted() {
        let lua = mlua::Lua::new();
        let full = dump(&lua, "return 1");
        for cut in 0..full.len() {
            assert!(strip(&full[..cut]).is_err(), "a dump cut at {cut} was accepted");
        }
        let mut bad = full.clone();
        bad[4] = 0x52;
        assert_eq!(strip(&bad), Err(Malformed("not a Lua 5.1 chunk")));
        let mut extra = full;
        extra.push(0);
        assert_eq!(strip(&extra), Err(Malformed("trailing bytes")));
    }
}
