//! The hot path of a script on Lua's C API: a command's reply pushed as a Lua value while it is
//! parsed, its arguments read off the stack, and the KEYS and ARGV tables. mlua's safe API
//! runs each operation in a protected call of its own and moves a callback's arguments into a
//! vector of references first; on a short script that was most of the time `redis.call` took.
//!
//! A Lua error is a `longjmp`. Any push may raise one (an allocation may run the collector,
//! and the collector a script's finalizer), so the functions here are called only where no
//! Rust value with a destructor is alive in the frames the jump would cross: they hold plain
//! slices and integers, and their callers keep what must be freed in `ManuallyDrop` or drop
//! it before pushing.
#![allow(unsafe_code)]

use std::ffi::c_int;

use hotkv_protocol::{parse_double, parse_i64};
use mlua::ffi::{self, lua_State};

use crate::convert::{BadReply, MAX_DEPTH, bulk, coded_parts, count, nan_or_inf, read_line};

/// Pushes the Lua value of the one RESP reply (RESP2 or RESP3) at `buf[*at..]`, Valkey's
/// `redisProtocolToLuaType`; an error reply becomes the `{err=...}` table of a failed call.
/// On `Err` the stack may hold part of the value: the caller resets it.
///
/// # Safety
/// `l` is a Lua state with room for one more value, running inside a protected call; see the
/// module doc for what may be alive around the call.
pub(crate) unsafe fn push_reply(l: *mut lua_State, buf: &[u8], at: &mut usize, depth: usize) -> Result<(), BadReply> {
    if depth > MAX_DEPTH {
        return Err(BadReply);
    }
    let kind = *buf.get(*at).ok_or(BadReply)?;
    let line = read_line(buf, at)?;
    // SAFETY: for every block below: pushes on `l` (the caller's promise), with the stack
    // grown first where an aggregate needs more than the one slot the caller guarantees. An
    // element pushes up to two values before its own check (a status table and its string),
    // so an array makes room for its table and those two, a map for its two tables, a key and
    // those two.
    unsafe {
        match kind {
            b'+' => {
                ffi::lua_createtable(l, 0, 1);
                push_bytes(l, line);
                ffi::lua_setfield(l, -2, c"ok".as_ptr());
            }
            b'-' => push_error(l, coded_parts(line), true),
            b':' => ffi::lua_pushnumber(l, parse_i64(line).ok_or(BadReply)? as f64),
            b'$' => match parse_i64(line).ok_or(BadReply)? {
                -1 => ffi::lua_pushboolean(l, 0),
                n => push_bytes(l, bulk(buf, at, n)?),
            },
            b'*' | b'>' => match parse_i64(line).ok_or(BadReply)? {
                -1 => ffi::lua_pushboolean(l, 0),
                n => {
                    let n = count(n, buf, *at)?;
                    let narr = c_int::try_from(n).map_err(|_| BadReply)?;
                    room(l, 3)?;
                    ffi::lua_createtable(l, narr, 0);
                    for i in 1..=narr {
                        push_reply(l, buf, at, depth + 1)?;
                        ffi::lua_rawseti_(l, -2, i);
                    }
                }
            },
            b'%' | b'~' => {
                let n = count(parse_i64(line).ok_or(BadReply)?, buf, *at)?;
                let nrec = c_int::try_from(n).map_err(|_| BadReply)?;
                let map = kind == b'%';
                room(l, 5)?;
                ffi::lua_createtable(l, 0, 1);
                ffi::lua_createtable(l, 0, nrec);
                for _ in 0..n {
                    push_reply(l, buf, at, depth + 1)?;
                    if map {
                        push_reply(l, buf, at, depth + 1)?;
                    } else {
                        ffi::lua_pushboolean(l, 1);
                    }
                    // A nil key (a RESP3 null) cannot be stored: the pair is dropped.
                    if ffi::lua_type(l, -2) == ffi::LUA_TNIL {
                        ffi::lua_settop(l, -3);
                    } else {
                        ffi::lua_rawset(l, -3);
                    }
                }
                ffi::lua_setfield(l, -2, if map { c"map" } else { c"set" }.as_ptr());
            }
            b'_' => ffi::lua_pushnil(l),
            b'#' => ffi::lua_pushboolean(l, c_int::from(line == b"t")),
            b',' => {
                let d = parse_double(line).or_else(|| nan_or_inf(line)).ok_or(BadReply)?;
                ffi::lua_createtable(l, 0, 1);
                ffi::lua_pushnumber(l, d);
                ffi::lua_setfield(l, -2, c"double".as_ptr());
            }
            b'(' => {
                ffi::lua_createtable(l, 0, 1);
                push_bytes(l, line);
                ffi::lua_setfield(l, -2, c"big_number".as_ptr());
            }
            b'=' => {
                let n = parse_i64(line).ok_or(BadReply)?;
                let text = bulk(buf, at, n)?;
                if text.len() < 4 || text[3] != b':' {
                    return Err(BadReply);
                }
                room(l, 3)?;
                ffi::lua_createtable(l, 0, 1);
                ffi::lua_createtable(l, 0, 2);
                push_bytes(l, &text[4..]);
                ffi::lua_setfield(l, -2, c"string".as_ptr());
                push_bytes(l, &text[..3]);
                ffi::lua_setfield(l, -2, c"format".as_ptr());
                ffi::lua_setfield(l, -2, c"verbatim_string".as_ptr());
            }
            b'|' => {
                // Attributes are not shown to scripts: skip them, then the reply they annotate.
                let n = count(parse_i64(line).ok_or(BadReply)?, buf, *at)?;
                for _ in 0..2 * n {
                    push_reply(l, buf, at, depth + 1)?;
                    ffi::lua_settop(l, -2);
                }
                return push_reply(l, buf, at, depth + 1);
            }
            _ => return Err(BadReply),
        }
    }
    Ok(())
}

/// Pushes the `{err="CODE message"}` table of an error text in its three `parts` (see
/// [`crate::convert::error_parts`]); `from_call` marks an error errorstats counted already, when the command
/// failed.
///
/// # Safety
/// As [`push_reply`].
pub(crate) unsafe fn push_error(l: *mut lua_State, parts: [&[u8]; 3], from_call: bool) {
    // SAFETY: the caller's promise. The text is joined on the stack rather than in a Rust
    // buffer, which a raise would leak; the table and the three pieces need four slots.
    unsafe {
        ffi::lua_checkstack(l, 4);
        ffi::lua_createtable(l, 0, 2);
        for piece in parts {
            push_bytes(l, piece);
        }
        ffi::lua_concat(l, 3);
        ffi::lua_setfield(l, -2, c"err".as_ptr());
        if from_call {
            ffi::lua_pushboolean(l, 1);
            ffi::lua_setfield(l, -2, c"ignore_error_stats_update".as_ptr());
        }
    }
}

/// Pushes a Lua array of `items` (KEYS, ARGV), Valkey's `luaCreateArray`.
///
/// # Safety
/// As [`push_reply`], with room for two values.
pub(crate) unsafe fn push_list(l: *mut lua_State, items: &[&[u8]]) {
    // SAFETY: the caller's promise; a command's argument count fits a C int.
    unsafe {
        ffi::lua_createtable(l, c_int::try_from(items.len()).unwrap_or(c_int::MAX), 0);
        for (i, item) in (1..).zip(items) {
            push_bytes(l, item);
            ffi::lua_rawseti_(l, -2, i);
        }
    }
}

/// The most entries a KEYS or ARGV table may hold to be refilled for the next run rather than
/// replaced: beyond it, clearing costs more than a new table, and a table a script filled
/// would keep its size.
const REFILL_MAX: usize = 32;

/// Sets the global `name` (the real global table at stack index `g`, an absolute index) to a
/// list of `items`, Valkey's `luaCreateArray` + `lua_setglobal`, refilling the list the previous
/// run left there when it is still a plain table of at most [`REFILL_MAX`] entries. An EVAL
/// script cannot keep a reference to KEYS or ARGV past its run (the globals are read-only), so
/// a refilled table is as good as a new one, and a short script no longer leaves two tables
/// for the collector each run. Whatever the last run put in it, it is emptied first. The
/// emptying walks the table's array part, which a script may have grown and emptied: the VM
/// drops both tables every 64 runs (see `Vm::invoke`), so such a table is not kept for long.
///
/// # Safety
/// As [`push_reply`], with room for four values.
pub(crate) unsafe fn set_list(l: *mut lua_State, g: c_int, name: &std::ffi::CStr, items: &[&[u8]]) {
    // SAFETY: the caller's promise; every access is raw, so no metamethod runs, and the
    // traversal only clears fields that exist (which `lua_next` allows).
    unsafe {
        ffi::lua_pushstring_(l, name.as_ptr());
        ffi::lua_rawget(l, g);
        if items.len() <= REFILL_MAX && emptied(l) {
            for (i, item) in (1..).zip(items) {
                push_bytes(l, item);
                ffi::lua_rawseti_(l, -2, i);
            }
            ffi::lua_pop(l, 1);
            return;
        }
        ffi::lua_pop(l, 1);
        ffi::lua_pushstring_(l, name.as_ptr());
        push_list(l, items);
        ffi::lua_rawset(l, g);
    }
}

/// Whether the value on top is a table with no metatable and at most [`REFILL_MAX`] entries,
/// which are then cleared. The value stays on the stack either way.
unsafe fn emptied(l: *mut lua_State) -> bool {
    // SAFETY: the caller's promise of three free slots beyond the value; `lua_next` is given
    // only keys it returned itself.
    unsafe {
        if ffi::lua_type(l, -1) != ffi::LUA_TTABLE {
            return false;
        }
        if ffi::lua_getmetatable(l, -1) != 0 {
            ffi::lua_pop(l, 1);
            return false;
        }
        let mut seen = 0;
        ffi::lua_pushnil(l);
        while ffi::lua_next(l, -2) != 0 {
            ffi::lua_pop(l, 1);
            seen += 1;
            if seen > REFILL_MAX {
                ffi::lua_pop(l, 1);
                return false;
            }
            ffi::lua_pushvalue(l, -1);
            ffi::lua_pushnil(l);
            ffi::lua_rawset(l, -4);
        }
        true
    }
}

/// Appends the call argument at stack index `i` to `out` as Valkey's `luaRedisGenericCommand`
/// takes it: a string as it is, a number as an integer when it is one (Valkey's `double2ll`),
/// else in its shortest round-trip form. `false` for any other type.
///
/// # Safety
/// `i` is a valid index of `l`'s stack. Nothing here allocates in Lua, so nothing raises.
pub(crate) unsafe fn read_arg(l: *mut lua_State, i: c_int, out: &mut Vec<u8>) -> bool {
    // SAFETY: the caller's promise; a string is read in place (lua_tolstring converts only
    // numbers, which are not read that way here).
    unsafe {
        match ffi::lua_type(l, i) {
            ffi::LUA_TSTRING => {
                let mut len = 0;
                let p = ffi::lua_tolstring(l, i, &mut len);
                out.extend_from_slice(std::slice::from_raw_parts(p.cast::<u8>(), len));
            }
            ffi::LUA_TNUMBER => number_arg(ffi::lua_tonumber(l, i), out),
            _ => return false,
        }
    }
    true
}

/// A number as a command argument (see [`read_arg`]).
pub(crate) fn number_arg(d: f64, out: &mut Vec<u8>) {
    // d2string is double2ll then fpconv_dtoa, as here, except for -0, which double2ll takes
    // for the integer 0.
    if d == 0.0 {
        out.push(b'0');
    } else {
        hotkv_protocol::format_double(d, out);
    }
}

/// Pushes a Lua string of `b`.
///
/// # Safety
/// As [`push_reply`].
unsafe fn push_bytes(l: *mut lua_State, b: &[u8]) {
    // SAFETY: the caller's promise; Lua copies the bytes.
    unsafe { ffi::lua_pushlstring_(l, b.as_ptr().cast(), b.len()) }
}

/// Grows the stack by `n` slots, or says the reply nests too deep for it.
///
/// # Safety
/// `l` is a live Lua state.
unsafe fn room(l: *mut lua_State, n: c_int) -> Result<(), BadReply> {
    // SAFETY: the caller's promise.
    if unsafe { ffi::lua_checkstack(l, n) } == 0 { Err(BadReply) } else { Ok(()) }
}
