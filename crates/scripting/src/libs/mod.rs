//! The four C libraries Valkey links into its Lua (`cjson`, `cmsgpack`, `bit`, `struct`),
//! rewritten in Rust with the same observable behaviour: results, error texts, limits.
//!
//! Errors reach scripts the way `luaL_error` raises them in Valkey: as a plain string, so
//! `pcall(cjson.decode, "x")` returns `false, "Expected value but found invalid token at
//! character 1"`. mlua would instead raise a Rust error as a userdata object, so every library
//! function is a Rust callback that *returns* its failure, behind a two-line Lua wrapper that
//! turns it into `error(msg, 0)` (level 0: like `luaL_error` from a C function, no position
//! prefix). A Rust caller that runs such a script gets `mlua::Error::RuntimeError(msg)`.
//!
//! Nothing here panics on script input; recursion and the values held at once are bounded (see
//! [`NESTING_CAP`]) because mlua keeps every live value in an auxiliary Lua stack that Lua 5.1
//! caps near 8000 slots and panics past it.

mod bit;
mod cjson;
mod cmsgpack;
mod strukt;

use std::cell::RefCell;
use std::rc::Rc;

use mlua::{Function, Lua, MultiValue, Table, Value};

/// Creates the global tables `cjson`, `cmsgpack`, `bit` and `struct` with all their functions,
/// as Valkey's `luaLoadLibraries` does. `bit` and `struct` are also entered in the registry's
/// `_LOADED` table (`package.loaded`), because their C versions register through
/// `luaL_register`; `cjson` and `cmsgpack` set only their global, as in Valkey.
pub fn register(lua: &Lua) -> mlua::Result<()> {
    let wrappers = Wrappers::new(lua)?;
    let globals = lua.globals();
    globals.raw_set("cjson", cjson::module(lua, &wrappers)?)?;
    let strukt = strukt::module(lua, &wrappers)?;
    globals.raw_set("struct", strukt.clone())?;
    globals.raw_set("cmsgpack", cmsgpack::module(lua, &wrappers)?)?;
    let bit = bit::module(lua, &wrappers)?;
    globals.raw_set("bit", bit.clone())?;

    let loaded = match lua.named_registry_value::<Value>("_LOADED")? {
        Value::Table(t) => t,
        _ => {
            let t = lua.create_table()?;
            lua.set_named_registry_value("_LOADED", t.clone())?;
            t
        }
    };
    loaded.raw_set("struct", strukt)?;
    loaded.raw_set("bit", bit)?;
    Ok(())
}

/// Deepest table nesting any library builds or walks. C Lua stops near 4000 levels
/// (`lua_checkstack` against `LUAI_MAXCSTACK`); here each level holds a few mlua references
/// and a native stack frame, so the bound is lower. It equals cjson's default
/// `encode_max_depth`/`decode_max_depth`, so default behaviour is unchanged.
pub(crate) const NESTING_CAP: usize = 1000;

/// `LUAI_MAXCSTACK` of Lua 5.1: the slots one C function may use. cmsgpack's "too many return
/// values" and cjson's nesting errors come from running into it.
pub(crate) const LUAI_MAXCSTACK: usize = 8000;

/// A library function's failure.
pub(crate) enum Fail {
    /// Raised to the script as this exact string, as `luaL_error` would.
    Raise(String),
    /// An mlua failure (out of memory, a metamethod error) passed through unchanged.
    Lua(mlua::Error),
}

impl From<mlua::Error> for Fail {
    fn from(e: mlua::Error) -> Self {
        Fail::Lua(e)
    }
}

/// Result of a library function body.
pub(crate) type LibResult<T> = Result<T, Fail>;

/// Shorthand for a [`Fail::Raise`].
pub(crate) fn raise<T>(msg: impl Into<String>) -> LibResult<T> {
    Err(Fail::Raise(msg.into()))
}

/// A library function's body, as the dispatcher calls it.
type Body = Rc<dyn Fn(&Lua, MultiValue) -> mlua::Result<MultiValue>>;

/// The Lua-side adapters that turn a returned failure into `error(msg, 0)`.
///
/// Every library function is a small Lua closure over its number, calling one Rust dispatcher
/// shared by all of them. A Rust callback of its own per function (mlua's userdata and C
/// closure, and the adapter's two closures) cost about 400 bytes each, 12 KB of every VM for
/// the 31 functions; a VM's size is what each full collection marks (see `Vm`). The tables
/// `cjson.new()` makes at run time are the exception: their functions get callbacks of their
/// own, which Lua collects with the table, where entries in the dispatcher's list would stay
/// for the VM's life.
#[derive(Clone)]
pub(crate) struct Wrappers {
    /// Makes the closure for a function whose dispatcher returns `true, results...` or
    /// `false, msg`.
    plain: Function,
    /// Makes the closure for a function whose dispatcher returns `true, table, n` (results
    /// spread with `unpack`) or `false, msg`; used where a function can return thousands of
    /// values, which mlua could not hold as references at once.
    spread: Function,
    /// The bodies, by the number their closure passes to the dispatcher.
    bodies: Rc<RefCell<Vec<Body>>>,
    /// Whether functions made now belong to a table made at run time (`cjson.new()`).
    at_run_time: bool,
    /// The base library's `next` (raw `lua_next`), which lets an explicit-stack walk resume a
    /// table's traversal from a key.
    pub(crate) next: Function,
}

impl Wrappers {
    fn new(lua: &Lua) -> mlua::Result<Self> {
        let globals = lua.globals();
        let error: Function = globals.raw_get("error")?;
        let unpack: Function = globals.raw_get("unpack")?;
        let next: Function = globals.raw_get("next")?;
        let bodies: Rc<RefCell<Vec<Body>>> = Rc::default();
        let all = bodies.clone();
        let dispatch = lua.create_function(move |lua, mut args: MultiValue| {
            let body = match args.pop_front() {
                Some(Value::Integer(i)) => usize::try_from(i).ok(),
                Some(Value::Number(n)) => Some(n as usize),
                _ => None,
            }
            .and_then(|i| all.borrow().get(i).cloned());
            // A body may run Lua (cjson's walk calls `next`), so no borrow is held through it.
            match body {
                Some(body) => body(lua, args),
                None => Err(mlua::Error::runtime("no such library function")),
            }
        })?;
        let plain = lua
            .load(WRAP_PLAIN)
            .set_name("=libs")
            .into_function()?
            .call::<Function>((error.clone(), dispatch.clone()))?;
        let spread =
            lua.load(WRAP_SPREAD).set_name("=libs").into_function()?.call::<Function>((error, unpack, dispatch))?;
        Ok(Wrappers { plain, spread, bodies, at_run_time: false, next })
    }

    /// These wrappers, for a table a script makes at run time (see the type's doc).
    pub(crate) fn at_run_time(&self) -> Wrappers {
        Wrappers { at_run_time: true, ..self.clone() }
    }

    /// How many bodies the dispatcher holds.
    #[cfg(test)]
    pub(crate) fn bodies(&self) -> usize {
        self.bodies.borrow().len()
    }

    /// The closure `make` returns for a new body.
    fn closure(&self, lua: &Lua, make: &Function, body: Body) -> mlua::Result<Function> {
        if self.at_run_time {
            return make.call::<Function>(lua.create_function(move |lua, args: MultiValue| body(lua, args))?);
        }
        let mut bodies = self.bodies.borrow_mut();
        let id = bodies.len();
        bodies.push(body);
        drop(bodies);
        make.call::<Function>(id)
    }

    /// Sets `table[name]` to a Lua function running `body`; `body` returns its results.
    pub(crate) fn set<F>(&self, lua: &Lua, table: &Table, name: &'static str, body: F) -> mlua::Result<()>
    where
        F: Fn(&Lua, Args<'_>) -> LibResult<MultiValue> + 'static,
    {
        let body: Body = Rc::new(move |lua: &Lua, args: MultiValue| {
            let mut out = match body(lua, Args::new(lua, args, name)) {
                Ok(values) => values,
                Err(fail) => return failure(lua, fail),
            };
            out.push_front(Value::Boolean(true));
            Ok(out)
        });
        table.raw_set(name, self.closure(lua, &self.plain, body)?)
    }

    /// Like [`Wrappers::set`] for a body that returns its results in a table of `n` entries.
    pub(crate) fn set_spread<F>(&self, lua: &Lua, table: &Table, name: &'static str, body: F) -> mlua::Result<()>
    where
        F: Fn(&Lua, Args<'_>) -> LibResult<(Table, usize)> + 'static,
    {
        let body: Body = Rc::new(move |lua: &Lua, args: MultiValue| match body(lua, Args::new(lua, args, name)) {
            Ok((t, n)) => {
                Ok(MultiValue::from_vec(vec![Value::Boolean(true), Value::Table(t), Value::Number(n as f64)]))
            }
            Err(fail) => failure(lua, fail),
        });
        table.raw_set(name, self.closure(lua, &self.spread, body)?)
    }
}

fn failure(lua: &Lua, fail: Fail) -> mlua::Result<MultiValue> {
    match fail {
        Fail::Raise(msg) => {
            Ok(MultiValue::from_vec(vec![Value::Boolean(false), Value::String(lua.create_string(msg)?)]))
        }
        Fail::Lua(e) => Err(e),
    }
}

/// A library function's arguments with the `lauxlib` checks (`luaL_checknumber`, ...) and their
/// exact messages. Indexes are 1-based like the Lua stack.
pub(crate) struct Args<'a> {
    lua: &'a Lua,
    values: Vec<Value>,
    name: &'static str,
}

impl<'a> Args<'a> {
    fn new(lua: &'a Lua, values: MultiValue, name: &'static str) -> Self {
        Args { lua, values: values.into_vec(), name }
    }

    /// The state the function runs in.
    pub(crate) fn lua(&self) -> &'a Lua {
        self.lua
    }

    /// Appends a nil argument: for a C function that pushes one before reading its arguments.
    pub(crate) fn push_nil(&mut self) {
        self.values.push(Value::Nil);
    }

    /// `lua_gettop`: how many arguments were passed, trailing nils included.
    pub(crate) fn len(&self) -> usize {
        self.values.len()
    }

    /// Argument `i`, or nil when absent.
    pub(crate) fn get(&self, i: usize) -> &Value {
        i.checked_sub(1).and_then(|j| self.values.get(j)).unwrap_or(&Value::Nil)
    }

    /// `lua_isnone`.
    pub(crate) fn is_none(&self, i: usize) -> bool {
        i == 0 || i > self.values.len()
    }

    /// `lua_isnoneornil`.
    pub(crate) fn is_none_or_nil(&self, i: usize) -> bool {
        matches!(self.get(i), Value::Nil)
    }

    /// `luaL_argerror`: "bad argument #i to 'name' (msg)". C Lua takes the name from the call
    /// site (so `pcall(f, ...)` says '?'); here it is always the library's name for the function.
    pub(crate) fn arg_error<T>(&self, i: usize, msg: &str) -> LibResult<T> {
        raise(format!("bad argument #{i} to '{}' ({msg})", self.name))
    }

    /// `luaL_typerror`: "<expected> expected, got <type>".
    pub(crate) fn type_error<T>(&self, i: usize, expected: &str) -> LibResult<T> {
        let got = if self.is_none(i) { "no value" } else { type_name(self.get(i)) };
        self.arg_error(i, &format!("{expected} expected, got {got}"))
    }

    /// `lua_tonumber` + `lua_isnumber`: numbers and numeric strings convert, the rest is None.
    pub(crate) fn to_number(&self, i: usize) -> LibResult<Option<f64>> {
        Ok(match self.get(i) {
            Value::Number(n) => Some(*n),
            Value::Integer(n) => Some(*n as f64),
            Value::String(_) => self.lua.coerce_number(self.get(i).clone())?,
            _ => None,
        })
    }

    /// `luaL_checknumber`.
    pub(crate) fn check_number(&self, i: usize) -> LibResult<f64> {
        match self.to_number(i)? {
            Some(n) => Ok(n),
            None => self.type_error(i, "number"),
        }
    }

    /// `luaL_checkinteger`: the number truncated as `(lua_Integer)d` does on x86-64.
    pub(crate) fn check_integer(&self, i: usize) -> LibResult<i64> {
        self.check_number(i).map(number_to_integer)
    }

    /// `luaL_optinteger`.
    pub(crate) fn opt_integer(&self, i: usize, default: i64) -> LibResult<i64> {
        if self.is_none_or_nil(i) { Ok(default) } else { self.check_integer(i) }
    }

    /// `luaL_checklstring`: strings, and numbers formatted as Lua formats them.
    pub(crate) fn check_string(&self, i: usize) -> LibResult<mlua::String> {
        match self.get(i) {
            Value::String(s) => Ok(s.clone()),
            v @ (Value::Number(_) | Value::Integer(_)) => match self.lua.coerce_string(v.clone())? {
                Some(s) => Ok(s),
                None => self.type_error(i, "string"),
            },
            _ => self.type_error(i, "string"),
        }
    }
}

/// Raw `lua_next` iteration over `t` (no `__pairs`), stopping at the first failure. Entries are
/// visited one at a time so a huge table never holds more than two mlua references.
pub(crate) fn for_each_entry(t: &Table, mut f: impl FnMut(Value, Value) -> LibResult<()>) -> LibResult<()> {
    let mut failed = None;
    let walked = t.for_each(|k: Value, v: Value| {
        f(k, v).map_err(|e| {
            failed = Some(e);
            // Only stops the walk; `failed` carries the real error out.
            mlua::Error::RuntimeError(String::new())
        })
    });
    match failed {
        Some(e) => Err(e),
        None => walked.map_err(Fail::Lua),
    }
}

/// `lua_typename(lua_type(v))` as Lua 5.1 spells it.
pub(crate) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Nil => "nil",
        Value::Boolean(_) => "boolean",
        Value::Integer(_) | Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Table(_) => "table",
        Value::Function(_) => "function",
        Value::Thread(_) => "thread",
        _ => "userdata",
    }
}

/// The number a Lua 5.1 value holds, if it is a number (no string coercion).
pub(crate) fn as_number(v: &Value) -> Option<f64> {
    match v {
        Value::Number(n) => Some(*n),
        Value::Integer(n) => Some(*n as f64),
        _ => None,
    }
}

/// `(lua_Integer)d` on x86-64: truncation, and the "integer indefinite" value for NaN and
/// out-of-range doubles (what `cvttsd2si` yields) instead of Rust's saturation.
pub(crate) fn number_to_integer(d: f64) -> i64 {
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&d) { d as i64 } else { i64::MIN }
}

/// Adapter for a dispatcher returning `true, results...` or `false, msg`. A tail call keeps it
/// cheap; `error` is an upvalue so a script reassigning the global cannot change it.
const WRAP_PLAIN: &str = r#"
local error, dispatch = ...
local function finish(ok, ...)
  if ok then return ... end
  error((...), 0)
end
-- `impl`: the body's number for the dispatcher, or a callback of its own.
return function(impl)
  if type(impl) == 'number' then
    return function(...) return finish(dispatch(impl, ...)) end
  end
  return function(...) return finish(impl(...)) end
end
"#;

/// Adapter for a dispatcher returning `true, table, n`: the results are spread from the table.
const WRAP_SPREAD: &str = r#"
local error, unpack, dispatch = ...
local function finish(ok, t, n)
  if ok then return unpack(t, 1, n) end
  error(t, 0)
end
return function(impl)
  if type(impl) == 'number' then
    return function(...) return finish(dispatch(impl, ...)) end
  end
  return function(...) return finish(impl(...)) end
end
"#;

#[cfg(test)]
pub(crate) mod tests {
    use mlua::{Lua, MultiValue, Value};

    /// A fresh state with the libraries registered, as the tests' scripts see it.
    pub(crate) fn state() -> Lua {
        let lua = Lua::new();
        super::register(&lua).expect("register");
        lua
    }

    /// Runs `src` and joins its results with spaces, each converted by Lua's `tostring`.
    pub(crate) fn eval(src: &str) -> String {
        eval_in(&state(), src)
    }

    pub(crate) fn eval_in(lua: &Lua, src: &str) -> String {
        let out: MultiValue = lua.load(src).call(()).unwrap_or_else(|e| panic!("{src}: {e}"));
        let tostring: mlua::Function = lua.globals().get("tostring").expect("tostring");
        out.into_iter().map(|v| tostring.call::<String>(v).expect("tostring")).collect::<Vec<_>>().join(" ")
    }

    /// Runs `expr` (a Lua expression giving a string) and returns that string in hex.
    pub(crate) fn hex(expr: &str) -> String {
        eval(&format!(
            "local s = {expr} local h = '' for i = 1, #s do h = h .. string.format('%02x', s:byte(i)) end return h"
        ))
    }

    /// Whether the call `call` (Lua source, seeing the argument as `s`) returns or raises a
    /// string error, never anything else. Results are counted inside the protected function:
    /// mlua's `pcall` trips a Lua API assertion when a callee returns more than ~20 values.
    pub(crate) fn fails_cleanly(call: &str, s: &[u8]) -> bool {
        let lua = state();
        let s = lua.create_string(s).expect("string");
        let src = format!(
            "local s = ... local ok, e = pcall(function() return select('#', {call}) end) return ok or type(e) == 'string'"
        );
        lua.load(src).into_function().and_then(|f| f.call::<bool>(s)).unwrap_or(false)
    }

    /// Runs `src` expecting an error and returns the error value, which must be a string (what
    /// `pcall` hands a script).
    pub(crate) fn eval_err(src: &str) -> String {
        eval_err_in(&state(), src)
    }

    pub(crate) fn eval_err_in(lua: &Lua, src: &str) -> String {
        let f = lua.load(src).into_function().expect("compile");
        let pcall: mlua::Function = lua.globals().get("pcall").expect("pcall");
        let (ok, err): (bool, Value) = pcall.call(f).expect("pcall");
        assert!(!ok, "{src}: expected an error");
        match err {
            Value::String(s) => s.to_string_lossy(),
            other => panic!("{src}: error is a {}, not a string", other.type_name()),
        }
    }

    #[test]
    fn registers_globals_and_loaded_entries() {
        assert_eq!(eval("return type(cjson), type(cmsgpack), type(bit), type(struct)"), "table table table table");
        assert_eq!(eval("return package.loaded.bit == bit, package.loaded.struct == struct"), "true true");
    }

    #[test]
    fn errors_reach_rust_callers_as_runtime_errors() {
        let lua = state();
        match lua.load("bit.tobit()").exec() {
            // mlua appends a traceback to the message the script raised.
            Err(mlua::Error::RuntimeError(msg)) => {
                assert!(msg.starts_with("bad argument #1 to 'tobit' (number expected, got no value)\n"), "{msg}")
            }
            other => panic!("{other:?}"),
        }
    }
}
