//! One Lua VM, with the redis.* API and Valkey's sandbox, that runs scripts for one thread at a
//! time. Each worker thread keeps its own ([`with_vm`]): a script runs on the thread of the
//! client that called it, under the slot locks that client's command holds.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use hotkv_protocol::{Protocol, ReplyBuf};
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use std::time::Duration;

use crate::body::{Sha, sha1_hex};
use crate::convert;
use crate::functions::{FnDef, Functions, Metadata};

/// Log levels of `redis.log`, Valkey's `LL_*`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    /// `redis.LOG_DEBUG`
    Debug,
    /// `redis.LOG_VERBOSE`
    Verbose,
    /// `redis.LOG_NOTICE`
    Notice,
    /// `redis.LOG_WARNING`
    Warning,
}

/// What a script reaches of the server, for the length of one run.
pub trait Host {
    /// Runs `argv`, a command the script called; its reply, or the error that refused it, goes
    /// into `reply`, whose protocol the VM has set to the script's (`redis.setresp`).
    fn call(&mut self, argv: &[&[u8]], reply: &mut ReplyBuf);
    /// `redis.acl_check_cmd`: whether the calling user may run `argv`; `None` for an unknown
    /// command.
    fn acl_check(&mut self, argv: &[&[u8]]) -> Option<bool>;
    /// `redis.log`.
    fn log(&mut self, level: LogLevel, msg: &[u8]);
    /// `redis.set_repl`: which of the AOF (1) and replicas (2) the following calls reach.
    fn set_repl(&mut self, flags: u8);
}

/// Why a run must stop, asked every 100,000 instructions.
pub trait Interrupt {
    /// `Some(text)` stops the script with that error (SCRIPT KILL, FUNCTION KILL, shutdown).
    fn poll(&self) -> Option<String>;
}

/// How a run ended.
pub enum Outcome {
    /// The script returned; its reply was written.
    Done,
    /// The script raised an error; the error reply was written. `counted` is false when the
    /// error came from a command the script called, which errorstats already counted.
    Failed {
        /// Whether the caller should count this error in errorstats.
        counted: bool,
    },
}

/// A VM: the Lua state and the pieces of the API it keeps.
pub struct Vm {
    lua: Lua,
    /// The real global table, where KEYS and ARGV are set (scripts see a read-only proxy).
    globals: Table,
    /// The table whose `fn` field is the host dispatcher during a run.
    host_slot: Table,
    /// The real `redis` table, where each run's `call` and `pcall` are set.
    redis: Table,
    run: Function,
    run_with: Function,
    intact: Function,
    load_library: Function,
    /// Compiled EVAL scripts by SHA, and the cache generation they belong to.
    scripts: HashMap<Sha, Function>,
    generation: u64,
    /// Compiled FUNCTION libraries: function name -> Lua function, and the registry
    /// generation they were compiled at.
    functions: HashMap<String, Function>,
    functions_generation: u64,
    killed: Rc<Cell<bool>>,
    /// What this VM last added to [`lua_memory`].
    reported: usize,
}

/// Bytes every thread's Lua VM holds together (INFO used_memory_lua): each VM adds the change
/// in its own size after each run, so reading it takes no lock.
static LUA_MEMORY: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Bytes all Lua VMs hold, as of each one's last run.
pub fn lua_memory() -> usize {
    LUA_MEMORY.load(std::sync::atomic::Ordering::Relaxed)
}

impl Drop for Vm {
    fn drop(&mut self) {
        LUA_MEMORY.fetch_sub(self.reported, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The version scripts see in `redis.REDIS_VERSION` (and Valkey's names for it).
const VERSION: &str = "8.0.1";
const VERSION_NUM: u32 = 0x0008_0001;

impl Vm {
    /// A fresh VM with the libraries, the API and the sandbox in place.
    pub fn new() -> mlua::Result<Vm> {
        let lua = lua_with_debug();
        let globals = lua.globals();
        crate::libs::register(&lua)?;
        let host_slot = lua.create_table()?;
        let killed = Rc::new(Cell::new(false));
        let statics = statics(&lua, &killed)?;
        let api: Function = lua.load(include_str!("api.lua")).set_name("=api").into_function()?;
        let (env, run, run_with, intact, load_library, redis): (Table, Function, Function, Function, Function, Table) =
            api.call((host_slot.clone(), statics))?;
        lua.set_globals(env)?;
        // What setting up left behind (the API chunk, library tables' temporaries) goes now,
        // so a fresh VM reports what it keeps.
        lua.gc_collect()?;
        Ok(Vm {
            lua,
            globals,
            host_slot,
            redis,
            run,
            run_with,
            intact,
            load_library,
            scripts: HashMap::new(),
            generation: 0,
            functions: HashMap::new(),
            functions_generation: u64::MAX,
            killed,
            reported: 0,
        })
    }

    /// Runs a library's code to collect the functions it registers (FUNCTION LOAD and every
    /// VM's recompilation). The load may run for `limit` at most, as Valkey's 500 ms.
    pub fn load_library(
        &mut self,
        code: &[u8],
        md: &Metadata,
        limit: Duration,
    ) -> Result<Vec<(FnDef, Function)>, String> {
        // The metadata line is blanked, its newline kept, so line numbers stay the user's.
        let body = &code[md.len..];
        let chunk = self
            .lua
            .load(body)
            .set_name("@user_function")
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| format!("Error compiling function: {}", lua_message(&e)))?;
        let started = std::time::Instant::now();
        let timed_out = Rc::new(Cell::new(false));
        let flag = timed_out.clone();
        let _ = self.lua.set_hook(mlua::HookTriggers::new().every_nth_instruction(100_000), move |_, _| {
            if started.elapsed() >= limit {
                flag.set(true);
                return Err(mlua::Error::runtime("FUNCTION LOAD timeout"));
            }
            Ok(mlua::VmState::Continue)
        });
        let result = self.load_library.call::<(bool, Value)>(chunk);
        self.lua.remove_hook();
        let (ok, v) = result.map_err(|e| format!("Error registering functions: {}", lua_message(&e)))?;
        if timed_out.get() {
            return Err("Error registering functions: FUNCTION LOAD timeout".into());
        }
        let Value::Table(t) = v else { return Err("Error registering functions: no result".into()) };
        if !ok {
            let msg = t.raw_get::<String>("err").unwrap_or_default();
            return Err(format!("Error registering functions: {msg}"));
        }
        let mut out = Vec::new();
        for def in t.sequence_values::<Table>() {
            let def = def.map_err(|e| lua_message(&e))?;
            let name: String = def.raw_get("name").map_err(|e| lua_message(&e))?;
            let description: Option<String> = def.raw_get("description").map_err(|e| lua_message(&e))?;
            let callback: Function = def.raw_get("callback").map_err(|e| lua_message(&e))?;
            let mut flags = 0;
            for f in def.raw_get::<Table>("flags").map_err(|e| lua_message(&e))?.sequence_values::<String>() {
                flags |= f.ok().and_then(|f| crate::flag::by_name(f.as_bytes())).unwrap_or(0);
            }
            out.push((FnDef { name, description, flags }, callback));
        }
        Ok(out)
    }

    /// The compiled function `name`, recompiling every library of `registry` first when it
    /// changed since this VM last looked.
    pub fn function(&mut self, name: &str, registry: &Functions) -> Option<Function> {
        let generation = registry.generation();
        if generation != self.functions_generation {
            self.functions.clear();
            for lib in registry.libraries() {
                let Ok(md) = crate::functions::metadata(&lib.code) else { continue };
                match self.load_library(&lib.code, &md, Duration::from_secs(5)) {
                    Ok(fns) => self.functions.extend(fns.into_iter().map(|(d, f)| (d.name, f))),
                    Err(e) => tracing::warn!("Library {} failed to load in a Lua VM: {e}", lib.name),
                }
            }
            self.functions_generation = generation;
            self.report_memory();
        }
        self.functions.get(name).cloned()
    }

    /// Compiles an EVAL script's code (the body after its shebang line, which is kept as an
    /// empty line so line numbers stay right). The error text is Valkey's.
    pub fn compile(&self, code: &[u8]) -> Result<Function, String> {
        if code.first() == Some(&27) {
            return Err("Error compiling script (new function): user_script: cannot load binary chunk".into());
        }
        self.lua
            .load(code)
            .set_name("@user_script")
            .set_mode(mlua::ChunkMode::Text)
            .into_function()
            .map_err(|e| format!("Error compiling script (new function): {}", lua_message(&e)))
    }

    /// The compiled function of the script `sha`, compiling `code` on first use in this VM.
    /// Compiled scripts are dropped when the cache `generation` moves on (SCRIPT FLUSH).
    pub fn script(&mut self, sha: &Sha, code: &[u8], generation: u64) -> Result<Function, String> {
        if generation != self.generation {
            self.scripts.clear();
            self.generation = generation;
            // What the flushed scripts held goes now, as Valkey's new Lua state would.
            let _ = self.lua.gc_collect();
        }
        if let Some(f) = self.scripts.get(sha) {
            return Ok(f.clone());
        }
        let f = self.compile(code)?;
        self.scripts.insert(*sha, f.clone());
        Ok(f)
    }

    /// Runs an EVAL script: KEYS and ARGV are set as globals, the script's reply goes to `out`
    /// in `out`'s protocol. `name` is the `f_<sha>` the error texts name.
    #[allow(clippy::too_many_arguments)]
    pub fn eval(
        &mut self,
        f: &Function,
        name: &str,
        keys: &[&[u8]],
        args: &[&[u8]],
        host: &mut dyn Host,
        interrupt: Option<Rc<dyn Interrupt>>,
        out: &mut ReplyBuf,
    ) -> Outcome {
        let set = |name: &str, items: &[&[u8]]| -> mlua::Result<()> {
            let t = self.lua.create_table_with_capacity(items.len(), 0)?;
            for (i, it) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(it)?)?;
            }
            self.globals.raw_set(name, t)
        };
        if let Err(e) = set("KEYS", keys).and_then(|()| set("ARGV", args)) {
            out.error(&format!("ERR {}", lua_message(&e)));
            return Outcome::Failed { counted: true };
        }
        let runner = self.run.clone();
        self.invoke(name, host, interrupt, out, |_| runner.call::<MultiValue>(f.clone()))
    }

    /// Runs a library function for FCALL: it gets KEYS and ARGV as its two arguments.
    #[allow(clippy::too_many_arguments)]
    pub fn fcall(
        &mut self,
        f: &Function,
        name: &str,
        keys: &[&[u8]],
        args: &[&[u8]],
        host: &mut dyn Host,
        interrupt: Option<Rc<dyn Interrupt>>,
        out: &mut ReplyBuf,
    ) -> Outcome {
        let list = |items: &[&[u8]]| -> mlua::Result<Table> {
            let t = self.lua.create_table_with_capacity(items.len(), 0)?;
            for (i, it) in items.iter().enumerate() {
                t.raw_set(i + 1, self.lua.create_string(it)?)?;
            }
            Ok(t)
        };
        let (k, a) = match (list(keys), list(args)) {
            (Ok(k), Ok(a)) => (k, a),
            (Err(e), _) | (_, Err(e)) => {
                out.error(&format!("ERR {}", lua_message(&e)));
                return Outcome::Failed { counted: true };
            }
        };
        let runner = self.run_with.clone();
        self.invoke(name, host, interrupt, out, |_| runner.call::<MultiValue>((f.clone(), k.clone(), a.clone())))
    }

    /// The common part of a run: the host dispatcher in place for its length, the interrupt
    /// hook, the conversion of the result or error, and the sandbox check after it.
    fn invoke(
        &mut self,
        name: &str,
        host: &mut dyn Host,
        interrupt: Option<Rc<dyn Interrupt>>,
        out: &mut ReplyBuf,
        go: impl FnOnce(&Lua) -> mlua::Result<MultiValue>,
    ) -> Outcome {
        let resp = Cell::new(2u8);
        let host = RefCell::new(host);
        let killed = self.killed.clone();
        killed.set(false);
        if let Some(int) = interrupt {
            let killed = killed.clone();
            let _ = self.lua.set_hook(mlua::HookTriggers::new().every_nth_instruction(100_000), move |_, _| {
                if let Some(text) = int.poll() {
                    killed.set(true);
                    return Err(mlua::Error::runtime(text));
                }
                Ok(mlua::VmState::Continue)
            });
        }
        let lua = &self.lua;
        let (slot, redis) = (&self.host_slot, &self.redis);
        let result = lua.scope(|scope| {
            let dispatcher = scope.create_function(|lua, args: MultiValue| dispatch(lua, &host, &resp, args))?;
            let call = scope.create_function(|lua, args: MultiValue| {
                let (v, failed) = call_command(lua, &host, &resp, args)?;
                if failed {
                    slot.raw_set("pending", v)?;
                    return Err(mlua::Error::runtime("redis.call failed"));
                }
                Ok(v)
            })?;
            let pcall = scope.create_function(|lua, args: MultiValue| Ok(call_command(lua, &host, &resp, args)?.0))?;
            slot.raw_set("fn", dispatcher)?;
            redis.raw_set("call", call)?;
            redis.raw_set("pcall", pcall)?;
            let r = go(lua);
            slot.raw_set("fn", Value::Nil)?;
            slot.raw_set("pending", Value::Nil)?;
            redis.raw_set("call", Value::Nil)?;
            redis.raw_set("pcall", Value::Nil)?;
            r
        });
        self.lua.remove_hook();
        let outcome = match result {
            Ok(values) => {
                let mut it = values.into_iter();
                let ok = matches!(it.next(), Some(Value::Boolean(true)));
                let v = it.next().unwrap_or(Value::Nil);
                if ok {
                    convert::lua_to_reply(&v, resp.get(), out);
                    Outcome::Done
                } else {
                    self.error_reply(name, &v, out)
                }
            }
            Err(e) => {
                out.error(&format!("ERR Error running script {name}, {}", lua_message(&e)));
                Outcome::Failed { counted: true }
            }
        };
        self.report_memory();
        if !matches!(self.intact.call::<bool>(()), Ok(true)) {
            tracing::warn!("A script wrote into a read-only table of the Lua VM: the VM is rebuilt");
            if let Ok(fresh) = Vm::new() {
                *self = fresh;
            }
        }
        outcome
    }

    /// The error reply of a failed run (the end of Valkey's `luaCallFunction`).
    fn error_reply(&self, name: &str, err: &Value, out: &mut ReplyBuf) -> Outcome {
        if self.killed.get() {
            // The hook's error reaches the handler as mlua's wrapped error: say it plainly.
            let text = match err {
                Value::Table(t) => t.raw_get::<String>("err").unwrap_or_default(),
                _ => String::new(),
            };
            let text = text.strip_prefix("ERR runtime error: ").unwrap_or(&text).to_string();
            out.error(&format!("ERR {}", text.trim_start_matches("ERR ")));
            return Outcome::Failed { counted: true };
        }
        let Value::Table(t) = err else {
            let msg = match err {
                Value::String(s) => s.to_string_lossy(),
                _ => "execution failure".to_string(),
            };
            let msg: String = msg.chars().take(100).collect();
            out.error(&format!("ERR Error running script {name}, {msg}"));
            return Outcome::Failed { counted: true };
        };
        let msg = t.raw_get::<mlua::String>("err").map(|s| s.as_bytes().to_vec()).unwrap_or_default();
        let msg = String::from_utf8_lossy(&msg).into_owned();
        let source = t.raw_get::<Option<String>>("source").ok().flatten();
        let line = t.raw_get::<Value>("line").ok().and_then(|v| match v {
            Value::Integer(n) => Some(n.to_string()),
            Value::Number(n) => Some((n as i64).to_string()),
            Value::String(s) => Some(s.to_string_lossy()),
            _ => None,
        });
        let counted = !matches!(t.raw_get::<Value>("ignore_error_stats_update"), Ok(Value::Boolean(true)));
        let mut text = msg.strip_prefix('-').unwrap_or(&msg).to_string();
        if let (Some(source), Some(line)) = (source, line) {
            text.push_str(&format!(" script: {name}, on {source}:{line}."));
        }
        out.error(&text);
        Outcome::Failed { counted }
    }

    /// Memory the VM uses.
    pub fn used_memory(&self) -> usize {
        self.lua.used_memory()
    }

    /// Brings [`lua_memory`] up to date with this VM's size.
    fn report_memory(&mut self) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.lua.used_memory();
        if now >= self.reported {
            LUA_MEMORY.fetch_add(now - self.reported, Relaxed);
        } else {
            LUA_MEMORY.fetch_sub(self.reported - now, Relaxed);
        }
        self.reported = now;
    }
}

/// A Lua state with the standard libraries Valkey opens, the debug library among them.
#[allow(unsafe_code)]
fn lua_with_debug() -> Lua {
    // SAFETY: the debug library is needed by the error handler only; the API chunk keeps it in
    // a local and removes it from the globals before any script can run, so no script reaches
    // the functions that could break mlua's invariants.
    unsafe {
        Lua::unsafe_new_with(
            StdLib::TABLE | StdLib::STRING | StdLib::MATH | StdLib::OS | StdLib::DEBUG,
            LuaOptions::new(),
        )
    }
}

/// The host dispatcher behind `redis.call` & co (see api.lua): `op` 1 call, 2 setresp,
/// 3 set_repl, 4 log, 5 acl_check_cmd. Returns the result and whether it is an error.
fn dispatch(lua: &Lua, host: &RefCell<&mut dyn Host>, resp: &Cell<u8>, args: MultiValue) -> mlua::Result<MultiValue> {
    let mut it = args.into_iter();
    let op = match it.next() {
        Some(Value::Integer(n)) => n,
        Some(Value::Number(n)) => n as i64,
        _ => 0,
    };
    let rest: Vec<Value> = it.collect();
    let fail = |text: &str| -> mlua::Result<MultiValue> {
        let t = convert::error_table(lua, text.as_bytes(), false).map_err(|_| mlua::Error::runtime("out of memory"))?;
        Ok(MultiValue::from_iter([t, Value::Boolean(true)]))
    };
    match op {
        5 => {
            let argv = match to_argv(&rest) {
                Ok(a) => a,
                Err(e) => return fail(e),
            };
            let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
            match host.borrow_mut().acl_check(&refs) {
                Some(ok) => Ok(MultiValue::from_iter([Value::Boolean(ok), Value::Boolean(false)])),
                None => fail("Invalid command passed to server.acl_check_cmd()"),
            }
        }
        2 => {
            if rest.len() != 1 {
                return raise(lua, "server.setresp() requires one argument.");
            }
            match number(&rest[0]) {
                Some(n) if n == 2.0 || n == 3.0 => {
                    resp.set(n as u8);
                    Ok(MultiValue::new())
                }
                _ => raise(lua, "RESP version must be 2 or 3."),
            }
        }
        3 => {
            if rest.len() != 1 {
                return raise(lua, "server.set_repl() requires one argument.");
            }
            let flags = number(&rest[0]).unwrap_or(0.0) as i64;
            if flags & !3 != 0 {
                return raise(lua, "Invalid replication flags. Use REPL_AOF, REPL_REPLICA, REPL_ALL or REPL_NONE.");
            }
            host.borrow_mut().set_repl(flags as u8);
            Ok(MultiValue::new())
        }
        4 => {
            if rest.len() < 2 {
                return raise(lua, "server.log() requires two arguments or more.");
            }
            let Some(level) = number(&rest[0]) else {
                return raise(lua, "First argument must be a number (log level).");
            };
            let level = match level as i64 {
                0 => LogLevel::Debug,
                1 => LogLevel::Verbose,
                2 => LogLevel::Notice,
                3 => LogLevel::Warning,
                _ => return raise(lua, "Invalid log level."),
            };
            let mut msg = Vec::new();
            for (i, v) in rest[1..].iter().enumerate() {
                if let Some(s) = lua_string(v) {
                    if i > 0 {
                        msg.push(b' ');
                    }
                    msg.extend_from_slice(&s);
                }
            }
            host.borrow_mut().log(level, &msg);
            Ok(MultiValue::new())
        }
        _ => raise(lua, "unknown host operation"),
    }
}

/// `redis.call` / `redis.pcall`: runs the command through the host and converts its reply;
/// also says whether that reply is an error (which `redis.call` raises).
fn call_command(
    lua: &Lua,
    host: &RefCell<&mut dyn Host>,
    resp: &Cell<u8>,
    args: MultiValue,
) -> mlua::Result<(Value, bool)> {
    let args: Vec<Value> = args.into_iter().collect();
    let argv = match to_argv(&args) {
        Ok(a) => a,
        Err(e) => {
            let t =
                convert::error_table(lua, e.as_bytes(), false).map_err(|_| mlua::Error::runtime("out of memory"))?;
            return Ok((t, true));
        }
    };
    let refs: Vec<&[u8]> = argv.iter().map(Vec::as_slice).collect();
    let mut reply = ReplyBuf::new();
    reply.set_protocol(if resp.get() == 3 { Protocol::Resp3 } else { Protocol::Resp2 });
    host.borrow_mut().call(&refs, &mut reply);
    let bytes = reply.as_bytes();
    let failed = bytes.first() == Some(&b'-');
    Ok((convert::reply_to_lua(lua, bytes)?, failed))
}

/// Raises a `{err="ERR text"}` error from a Rust function of the API.
fn raise(lua: &Lua, text: &str) -> mlua::Result<MultiValue> {
    let t = convert::error_table(lua, text.as_bytes(), false).map_err(|_| mlua::Error::runtime("out of memory"))?;
    // Returned as a failed result, which the Lua side raises (a Rust error could not carry a
    // table to the handler).
    Ok(MultiValue::from_iter([t, Value::Boolean(true)]))
}

fn number(v: &Value) -> Option<f64> {
    match v {
        Value::Integer(n) => Some(*n as f64),
        Value::Number(n) => Some(*n),
        Value::String(s) => std::str::from_utf8(&s.as_bytes()).ok()?.trim().parse().ok(),
        _ => None,
    }
}

fn lua_string(v: &Value) -> Option<Vec<u8>> {
    match v {
        Value::String(s) => Some(s.as_bytes().to_vec()),
        Value::Integer(n) => Some(n.to_string().into_bytes()),
        Value::Number(n) => Some(format_lua_number(*n).into_bytes()),
        _ => None,
    }
}

/// The arguments of `redis.call`: strings as they are, numbers as Valkey prints them (an
/// integer when the double is one, else the shortest round-trip form).
fn to_argv(vals: &[Value]) -> Result<Vec<Vec<u8>>, &'static str> {
    if vals.is_empty() {
        return Err("Please specify at least one argument for this call");
    }
    vals.iter()
        .map(|v| match v {
            Value::String(s) => Ok(s.as_bytes().to_vec()),
            Value::Integer(n) => Ok(n.to_string().into_bytes()),
            Value::Number(n) => Ok(number_arg(*n).into_bytes()),
            _ => Err("Command arguments must be strings or integers"),
        })
        .collect()
}

fn number_arg(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 9.007_199_254_740_992e15 {
        return (n as i64).to_string();
    }
    let s = format!("{n}");
    if n.is_infinite() {
        return if n > 0.0 { "inf".into() } else { "-inf".into() };
    }
    s
}

/// Lua's own `%.14g` printing of a number, for `redis.log` and `tostring`-like joins.
fn format_lua_number(n: f64) -> String {
    if n.fract() == 0.0 && n.abs() < 1e15 {
        return (n as i64).to_string();
    }
    format!("{n}")
}

/// The message of an mlua error, as Lua itself would print it.
pub(crate) fn lua_message(e: &mlua::Error) -> String {
    match e {
        mlua::Error::SyntaxError { message, .. } => message.clone(),
        mlua::Error::RuntimeError(m) => m.clone(),
        mlua::Error::CallbackError { cause, .. } => lua_message(cause),
        other => other.to_string(),
    }
}

/// The Rust functions the API chunk installs once: they need no host.
fn statics(lua: &Lua, killed: &Rc<Cell<bool>>) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let k = killed.clone();
    t.raw_set("killed", lua.create_function(move |_, ()| Ok(k.get()))?)?;
    t.raw_set(
        "sha1hex",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Ok((false, Value::String(lua.create_string("wrong number of arguments")?)));
            }
            let s = lua_string(&args[0]).unwrap_or_default();
            Ok((true, Value::String(lua.create_string(sha1_hex(&s))?)))
        })?,
    )?;
    t.raw_set(
        "error_reply",
        lua.create_function(|lua, args: MultiValue| {
            let text = match (args.len(), args.front()) {
                (1, Some(Value::String(s))) => s.as_bytes().to_vec(),
                _ => b"-ERR wrong number or type of arguments".to_vec(),
            };
            let text = if text.first() == Some(&b'-') { text } else { [b"-".as_slice(), &text].concat() };
            convert::error_table(lua, &text, false).map_err(|_| mlua::Error::runtime("out of memory"))
        })?,
    )?;
    let rng = Rc::new(Cell::new(rand48_seed(seed_from_clock())));
    let r = rng.clone();
    t.raw_set(
        "random",
        lua.create_function(move |lua, args: MultiValue| -> mlua::Result<(bool, Value)> {
            let x = rand48_next(&r);
            let max = i32::MAX as f64;
            let f = ((x % i32::MAX as u64) as f64) / max;
            let int = |v: &Value| number(v).map(|n| n as i64 as f64);
            let (ok, v) = match args.len() {
                0 => (true, f),
                1 => match int(&args[0]) {
                    None => return bad_arg(lua, "bad argument #1 to 'random' (number expected, got no value)"),
                    Some(u) if u < 1.0 => return bad_arg(lua, "bad argument #1 to 'random' (interval is empty)"),
                    Some(u) => (true, (f * u).floor() + 1.0),
                },
                2 => match (int(&args[0]), int(&args[1])) {
                    (Some(l), Some(u)) if l <= u => (true, (f * (u - l + 1.0)).floor() + l),
                    (Some(_), Some(_)) => return bad_arg(lua, "bad argument #2 to 'random' (interval is empty)"),
                    _ => return bad_arg(lua, "bad argument to 'random' (number expected)"),
                },
                _ => return bad_arg(lua, "wrong number of arguments"),
            };
            Ok((ok, Value::Number(v)))
        })?,
    )?;
    t.raw_set(
        "randomseed",
        lua.create_function(move |lua, seed: Value| -> mlua::Result<(bool, Value)> {
            let Some(s) = number(&seed) else {
                return bad_arg(lua, "bad argument #1 to 'randomseed' (number expected)");
            };
            rng.set(rand48_seed(s as i64 as i32 as u64));
            Ok((true, Value::Nil))
        })?,
    )?;
    t.raw_set(
        "log",
        lua.create_function(|_, args: MultiValue| {
            // The library-loading API's redis.log: no host then, so straight to the log.
            let mut it = args.iter();
            let level = it.next().and_then(number).unwrap_or(-1.0) as i64;
            let msg: Vec<Vec<u8>> = it.filter_map(lua_string).collect();
            let text = String::from_utf8_lossy(&msg.join(&b' ')).into_owned();
            match level {
                0 => tracing::trace!(target: "hotkv::script", "{text}"),
                1 => tracing::debug!(target: "hotkv::script", "{text}"),
                2 => tracing::info!(target: "hotkv::script", "{text}"),
                _ => tracing::warn!(target: "hotkv::script", "{text}"),
            }
            Ok(())
        })?,
    )?;
    t.raw_set(
        "is_flag",
        lua.create_function(|_, name: mlua::String| {
            Ok(crate::flag::by_name(&name.as_bytes().to_ascii_lowercase()).is_some())
        })?,
    )?;
    t.raw_set(
        "check_function",
        lua.create_function(|_, name: String| {
            Ok(if crate::functions::valid_name(&name) {
                (true, None)
            } else {
                (false, Some(crate::functions::NAME_RULE))
            })
        })?,
    )?;
    t.raw_set("version", VERSION)?;
    t.raw_set("version_num", VERSION_NUM)?;
    Ok(t)
}

/// A failed helper call, which the Lua side raises at the caller's line.
fn bad_arg(lua: &Lua, text: &str) -> mlua::Result<(bool, Value)> {
    Ok((false, Value::String(lua.create_string(text)?)))
}

/// `srand48`: the 48-bit state from a 32-bit seed.
fn rand48_seed(seed: u64) -> u64 {
    ((seed & 0xffff_ffff) << 16) | 0x330e
}

/// `lrand48`: the next 31-bit value.
fn rand48_next(state: &Cell<u64>) -> u64 {
    let x = state.get().wrapping_mul(0x5_deec_e66d).wrapping_add(0xb) & ((1 << 48) - 1);
    state.set(x);
    x >> 17
}

fn seed_from_clock() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos() as u64)
}

thread_local! {
    static VM: RefCell<Option<Vm>> = const { RefCell::new(None) };
}

/// Runs `f` with this thread's VM, made on first use. `None` if a VM cannot be made (out of
/// memory), or when called from inside a run on this thread.
pub fn with_vm<R>(f: impl FnOnce(&mut Vm) -> R) -> Option<R> {
    VM.with(|cell| {
        let mut slot = cell.try_borrow_mut().ok()?;
        if slot.is_none() {
            *slot = Some(Vm::new().map_err(|e| tracing::warn!("Lua VM not created: {e}")).ok()?);
        }
        slot.as_mut().map(f)
    })
}

/// Drops this thread's VM (SCRIPT FLUSH makes every thread's VM anew on its next use).
pub fn reset_vm() {
    VM.with(|cell| {
        if let Ok(mut slot) = cell.try_borrow_mut() {
            *slot = None;
        }
    });
}
