//! One Lua VM, with the redis.* API and Valkey's sandbox, that runs scripts for one thread at a
//! time. Each worker thread keeps its own ([`with_vm`]): a script runs on the thread of the
//! client that called it, under the slot locks that client's command holds.

use foldhash::HashMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use std::ptr::NonNull;

use hotkv_protocol::{Args, Protocol, ReplyBuf};
use mlua::{Function, Lua, LuaOptions, MultiValue, StdLib, Table, Value};

use std::time::Duration;

use crate::body::{Sha, sha1_hex};
use crate::convert;
use crate::functions::{FnDef, Functions, Metadata};
use crate::ldb;

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
    /// Runs `args`, a command the script called; its reply, or the error that refused it, goes
    /// into `reply`, whose protocol the VM has set to the script's (`redis.setresp`).
    fn call(&mut self, args: Args<'_>, reply: &mut ReplyBuf);
    /// `redis.acl_check_cmd`: whether the calling user may run `args`; `None` for an unknown
    /// command.
    fn acl_check(&mut self, args: Args<'_>) -> Option<bool>;
    /// `redis.log`.
    fn log(&mut self, level: LogLevel, msg: &[u8]);
    /// `redis.set_repl`: which of the AOF (1) and replicas (2) the following calls reach.
    fn set_repl(&mut self, flags: u8);
    /// Asked every 100,000 Lua instructions: `Some(text)` stops the script with that error
    /// (SCRIPT KILL, FUNCTION KILL). A run that gets here is a long one.
    fn poll(&mut self) -> Option<String>;
}

/// A script call's keys and arguments.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    /// KEYS.
    pub keys: &'a [&'a [u8]],
    /// ARGV.
    pub args: &'a [&'a [u8]],
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
    /// Declared before `current`, so the state closes first: `redis.call` reaches `current`
    /// through a raw pointer (see [`call`]), and closing may still run a script's finalizer.
    lua: Lua,
    /// The real global table, where KEYS and ARGV are set (scripts see a read-only proxy).
    globals: Table,
    /// The run in progress: what the API functions, registered once, reach.
    current: Rc<Current>,
    make_runner: Function,
    make_fn_runner: Function,
    /// The debug library, which scripts do not see: the debugger reads frames through it.
    dbg: Table,
    intact: Function,
    load_library: Function,
    /// EVAL scripts by SHA, each as its runner (see api.lua's make_runner). SCRIPT FLUSH
    /// replaces the whole VM (see [`reset_all`]), so they never outlive a flush.
    scripts: HashMap<Sha, Function>,
    /// FUNCTION library functions by name, each as its runner, and the registry generation
    /// they were compiled at.
    functions: HashMap<String, Function>,
    functions_generation: u64,
    /// Runs so far, to pace the sandbox check and the memory report.
    runs: u64,
    /// The heap after the last full collection, or lower if it was seen lower since (see
    /// [`Vm::keep_heap_near_live`]).
    gc_floor: usize,
    /// What this VM last added to [`lua_memory`].
    reported: usize,
    /// The generation it was made in (see [`reset_all`]).
    epoch: u64,
}

/// The run in progress on a VM, shared with the API functions and the instruction hook,
/// which are registered once per VM: a run only swaps the host in and out.
struct Current {
    /// The run's host, its lifetime erased: set by [`Vm::invoke`] for the length of the run
    /// and cleared before it returns (see [`HostGuard`]).
    host: Cell<Option<NonNull<dyn Host + 'static>>>,
    /// `redis.setresp`'s choice for this run.
    resp: Cell<u8>,
    /// The run was stopped (SCRIPT KILL): whatever the script catches, it stops.
    killed: Cell<bool>,
    /// The table whose `pending` field carries the error the debugger's hook raises.
    slot: Table,
    /// Buffers reused from call to call: the argument vector and the reply.
    flat: RefCell<Vec<u8>>,
    spans: RefCell<Vec<(usize, usize)>>,
    reply: RefCell<ReplyBuf>,
    /// The debugger's state the API functions log into, during a debugged run.
    ldb: ldb::Shared,
    /// The debugging session of a debugged run, which the line hook takes while stopped.
    session: RefCell<Option<Box<ldb::Session>>>,
}

impl Current {
    /// Runs `f` with the run's host; `None` outside a run (or from inside a host call).
    fn with_host<R>(&self, f: impl FnOnce(&mut dyn Host) -> R) -> Option<R> {
        let ptr = self.host.take()?;
        #[allow(unsafe_code)]
        // SAFETY: `ptr` comes from the `&mut dyn Host` that `Vm::invoke` holds, unused, for the
        // whole run, and is cleared (by `HostGuard`) before invoke returns, so it points to a
        // live host. It is out of the cell while `f` runs, so no second `&mut` can be made from
        // it meanwhile: a call that came back here through Lua would find `None`.
        let host = unsafe { &mut *ptr.as_ptr() };
        let r = f(host);
        self.host.set(Some(ptr));
        Some(r)
    }
}

/// Clears the run's host when the run ends, however it ends.
struct HostGuard<'c>(&'c Current);

impl Drop for HostGuard<'_> {
    fn drop(&mut self) {
        self.0.host.set(None);
    }
}

/// INFO used_memory_lua and the VM generation in one word, so that a reset and a VM's report
/// never cross: the top 16 bits count resets (SCRIPT FLUSH), the rest are the bytes held by
/// the VMs of the current generation. Each VM adds the change in its own size now and then,
/// so reading it takes no lock.
static LUA_MEMORY: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
const EPOCH_SHIFT: u32 = 48;
const BYTES: u64 = (1 << EPOCH_SHIFT) - 1;

/// Bytes the Lua VMs of the current generation hold, as of each one's last report.
pub fn lua_memory() -> usize {
    (LUA_MEMORY.load(std::sync::atomic::Ordering::Relaxed) & BYTES) as usize
}

/// The current VM generation.
fn vm_epoch() -> u64 {
    LUA_MEMORY.load(std::sync::atomic::Ordering::Acquire) >> EPOCH_SHIFT
}

/// Adds `add` and removes `sub` bytes for a VM of generation `epoch`; false (nothing
/// changed) when a reset came since: that VM's bytes no longer count.
fn account(epoch: u64, add: usize, sub: usize) -> bool {
    account_in(&LUA_MEMORY, epoch, add, sub)
}

fn account_in(word: &std::sync::atomic::AtomicU64, epoch: u64, add: usize, sub: usize) -> bool {
    use std::sync::atomic::Ordering::{AcqRel, Acquire};
    word.fetch_update(AcqRel, Acquire, |w| {
        (w >> EPOCH_SHIFT == epoch).then(|| {
            let bytes = ((w & BYTES) + add as u64).saturating_sub(sub as u64) & BYTES;
            (w & !BYTES) | bytes
        })
    })
    .is_ok()
}

/// SCRIPT FLUSH: Valkey starts a fresh Lua state. Every thread's VM is replaced before its
/// next run, and the memory count starts over from the VMs made from now on (a VM left on
/// a thread that runs no script stays allocated until it does, uncounted).
pub fn reset_all() {
    reset_in(&LUA_MEMORY);
}

fn reset_in(word: &std::sync::atomic::AtomicU64) {
    use std::sync::atomic::Ordering::{AcqRel, Acquire};
    let _ = word.fetch_update(AcqRel, Acquire, |w| {
        Some((((w >> EPOCH_SHIFT) + 1) & ((1 << (64 - EPOCH_SHIFT)) - 1)) << EPOCH_SHIFT)
    });
}

#[cfg(test)]
mod accounting_tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use super::*;

    #[test]
    fn a_reset_starts_the_count_over_and_stale_vms_no_longer_count() {
        let w = AtomicU64::new(0);
        let bytes = |w: &AtomicU64| w.load(Ordering::Relaxed) & BYTES;
        assert!(account_in(&w, 0, 80_000, 0));
        assert!(account_in(&w, 0, 90_000, 80_000), "a VM reports its growth");
        assert!(account_in(&w, 0, 70_000, 0), "a second VM");
        assert_eq!(bytes(&w), 160_000);
        reset_in(&w);
        assert_eq!((bytes(&w), w.load(Ordering::Relaxed) >> EPOCH_SHIFT), (0, 1));
        // The old VMs report and drop: nothing moves.
        assert!(!account_in(&w, 0, 95_000, 90_000));
        assert!(!account_in(&w, 0, 0, 70_000));
        assert_eq!(bytes(&w), 0);
        assert!(account_in(&w, 1, 80_000, 0), "a VM of the new generation");
        assert_eq!(bytes(&w), 80_000);
        // Generations wrap without touching the bytes.
        w.store(((1 << (64 - EPOCH_SHIFT)) - 1) << EPOCH_SHIFT | 5, Ordering::Relaxed);
        reset_in(&w);
        assert_eq!(w.load(Ordering::Relaxed), 0);
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        account(self.epoch, 0, self.reported);
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
        let current = Rc::new(Current {
            host: Cell::new(None),
            resp: Cell::new(2),
            killed: Cell::new(false),
            slot: lua.create_table()?,
            flat: RefCell::new(Vec::new()),
            spans: RefCell::new(Vec::new()),
            reply: RefCell::new(ReplyBuf::new()),
            ldb: ldb::Shared::default(),
            session: RefCell::new(None),
        });
        let statics = statics(&lua, &current)?;
        let ptr = Rc::as_ptr(&current).cast_mut().cast::<std::ffi::c_void>();
        #[allow(unsafe_code)]
        // SAFETY: two C closures over a pointer to `current`, which outlives the state (see
        // `Vm::lua`); the pushes run inside mlua's protected call, which has room for them.
        let (call_fn, pcall_fn): (Function, Function) = unsafe {
            lua.exec_raw((), |l| {
                mlua::ffi::lua_pushlightuserdata(l, ptr);
                mlua::ffi::lua_pushcclosure(l, call, 1);
                mlua::ffi::lua_pushlightuserdata(l, ptr);
                mlua::ffi::lua_pushcclosure(l, pcall, 1);
            })
        }?;
        statics.raw_set("call", call_fn)?;
        statics.raw_set("pcall", pcall_fn)?;
        let api = api_chunk(&lua)?;
        type Api = (Table, Function, Function, Function, Function, Table);
        let (env, make_runner, make_fn_runner, intact, load_library, dbg): Api =
            api.call((current.slot.clone(), statics))?;
        lua.set_globals(env)?;
        // What setting up left behind (the API chunk's main function, 4.5 KB, and library
        // tables' temporaries) goes now, so a fresh VM reports what it keeps.
        drop(api);
        lua.gc_collect()?;
        let epoch = vm_epoch();
        let mut vm = Vm {
            lua,
            globals,
            current,
            make_runner,
            make_fn_runner,
            dbg,
            intact,
            load_library,
            scripts: HashMap::default(),
            functions: HashMap::default(),
            functions_generation: u64::MAX,
            runs: 0,
            gc_floor: 0,
            reported: 0,
            epoch,
        };
        vm.install_hook();
        vm.gc_floor = vm.lua.used_memory();
        vm.report_memory();
        Ok(vm)
    }

    /// The hook every run has: every 100,000 instructions it asks the host whether to stop.
    /// Outside a run there is no host and it does nothing.
    fn install_hook(&self) {
        let cur = self.current.clone();
        let _ = self.lua.set_hook(mlua::HookTriggers::new().every_nth_instruction(100_000), move |_, _| {
            if let Some(Some(text)) = cur.with_host(|h| h.poll()) {
                cur.killed.set(true);
                return Err(mlua::Error::runtime(text));
            }
            Ok(mlua::VmState::Continue)
        });
    }

    /// The hook of a debugged run: the debugger's, on every line of the script and every
    /// 100,000 instructions (to stop an endless loop).
    fn install_debug_hook(&self) {
        let cur = self.current.clone();
        let (dbg, globals) = (self.dbg.clone(), self.globals.clone());
        let triggers = mlua::HookTriggers::new().every_line().every_nth_instruction(100_000);
        let _ = self.lua.set_hook(triggers, move |lua, ar| {
            let counted = matches!(ar.event(), mlua::DebugEvent::Count);
            // Lines of the API's own Lua code are not the user's to step through.
            if !ar.source().short_src.as_deref().is_some_and(|s| s.contains("user_script")) {
                return Ok(mlua::VmState::Continue);
            }
            let line = ar.current_line().map_or(-1, |l| l as i64);
            let Some(mut session) = cur.session.borrow_mut().take() else {
                return Ok(mlua::VmState::Continue);
            };
            let frames = ldb::Frames { dbg: &dbg, globals: &globals };
            let stopped = ldb::on_line(lua, &cur.ldb, &mut session, &frames, line, counted);
            *cur.session.borrow_mut() = Some(session);
            match stopped {
                Ok(()) => Ok(mlua::VmState::Continue),
                Err(text) => {
                    // As redis.call's errors: the table reaches the handler by `pending`.
                    if let Ok(t) = convert::error_table(lua, text.as_bytes(), false) {
                        cur.slot.raw_set("pending", t)?;
                    }
                    Err(mlua::Error::runtime(text))
                }
            }
        });
    }

    /// Runs an EVAL script under the debugger (SCRIPT DEBUG): it stops before its first line
    /// and at every stop reads the client's commands through `session`'s connection. The
    /// session's end mark is sent before this returns; the script's reply goes to `out`, as
    /// [`Vm::eval`]'s does.
    #[allow(clippy::too_many_arguments)]
    pub fn eval_debug(
        &mut self,
        f: &Function,
        name: &str,
        call: Call<'_>,
        host: &mut dyn Host,
        out: &mut ReplyBuf,
        session: Box<ldb::Session>,
    ) -> (Outcome, Box<ldb::Session>) {
        self.current.ldb.begin();
        *self.current.session.borrow_mut() = Some(session);
        self.install_debug_hook();
        let outcome = self.eval(f, name, call, host, out);
        // Only the debugger's hook leaves an error there; one nothing picked up must not
        // reach a later run's handler.
        let _ = self.current.slot.raw_set("pending", Value::Nil);
        self.install_hook();
        let mut session = self.current.session.borrow_mut().take().expect("the hook gives the session back");
        self.current.ldb.end(&mut session);
        (outcome, session)
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
        self.install_hook();
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
            let callback: Function = self.make_fn_runner.call(callback).map_err(|e| lua_message(&e))?;
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

    /// The runner of the script `sha`, compiling `code` on first use in this VM.
    pub fn script(&mut self, sha: &Sha, code: &[u8]) -> Result<Function, String> {
        if let Some(f) = self.scripts.get(sha) {
            return Ok(f.clone());
        }
        let chunk = self.compile(code)?;
        let f: Function = self.make_runner.call(chunk).map_err(|e| lua_message(&e))?;
        self.scripts.insert(*sha, f.clone());
        Ok(f)
    }

    /// Runs an EVAL script (its runner, from [`Vm::script`]): KEYS and ARGV are set as
    /// globals, the script's reply goes to `out` in `out`'s protocol. `name` is the
    /// `f_<sha>` the error texts name.
    pub fn eval(
        &mut self,
        f: &Function,
        name: &str,
        call: Call<'_>,
        host: &mut dyn Host,
        out: &mut ReplyBuf,
    ) -> Outcome {
        let (lua, globals) = (self.lua.clone(), self.globals.clone());
        // One protected call sets KEYS and ARGV (refilling last run's tables) and runs the
        // runner: mlua's own calls each cost a protected call of their own (and, on Lua 5.1, a
        // C closure to collect).
        #[allow(unsafe_code)]
        // SAFETY: inside mlua's protected call, with the real global table at index 1 and the
        // runner at 2, the stack grown for what is pushed at once. The runner catches the
        // script's errors itself; nothing in this closure has a destructor for an error that
        // escaped it to skip.
        let run = || unsafe {
            lua.exec_raw::<(bool, Value)>((globals, f), |l| {
                mlua::ffi::lua_checkstack(l, 4);
                crate::raw::set_list(l, 1, c"KEYS", call.keys);
                crate::raw::set_list(l, 1, c"ARGV", call.args);
                mlua::ffi::lua_call(l, 0, 2);
                mlua::ffi::lua_remove(l, 1);
            })
        };
        self.invoke(name, host, out, run)
    }

    /// Runs a library function (its runner, from [`Vm::function`]) for FCALL: it gets KEYS
    /// and ARGV as its two arguments.
    pub fn fcall(
        &mut self,
        f: &Function,
        name: &str,
        call: Call<'_>,
        host: &mut dyn Host,
        out: &mut ReplyBuf,
    ) -> Outcome {
        // As in `eval`: the lists are made and the runner called in one protected call. The
        // KEYS and ARGV an EVAL left as globals go first: Valkey's functions run in a Lua
        // state of their own, where reading the global KEYS is a missing-global error.
        let (lua, globals) = (self.lua.clone(), self.globals.clone());
        #[allow(unsafe_code)]
        // SAFETY: inside mlua's protected call, with the real global table at index 1, the
        // runner at 2 and the stack grown for what is pushed at once; the runner catches the
        // function's errors itself, and nothing in this closure has a destructor.
        let run = || unsafe {
            lua.exec_raw::<(bool, Value)>((globals, f), |l| {
                mlua::ffi::lua_checkstack(l, 4);
                for name in [c"KEYS", c"ARGV"] {
                    mlua::ffi::lua_pushstring_(l, name.as_ptr());
                    mlua::ffi::lua_pushnil(l);
                    mlua::ffi::lua_rawset(l, 1);
                }
                crate::raw::push_list(l, call.keys);
                crate::raw::push_list(l, call.args);
                mlua::ffi::lua_call(l, 2, 2);
                mlua::ffi::lua_remove(l, 1);
            })
        };
        self.invoke(name, host, out, run)
    }

    /// The common part of a run: the host in place for its length, the conversion of the
    /// result or error, and, now and then, the sandbox check and the memory report.
    fn invoke(
        &mut self,
        name: &str,
        host: &mut dyn Host,
        out: &mut ReplyBuf,
        go: impl FnOnce() -> mlua::Result<(bool, Value)>,
    ) -> Outcome {
        let cur = &*self.current;
        cur.resp.set(2);
        cur.killed.set(false);
        let ptr: NonNull<dyn Host + '_> = NonNull::from(host);
        #[allow(unsafe_code)]
        // SAFETY: only the lifetime is erased; `HostGuard` clears the pointer before this
        // function returns, and `host` is not used otherwise until then (see `with_host`).
        let ptr: NonNull<dyn Host + 'static> = unsafe { std::mem::transmute(ptr) };
        cur.host.set(Some(ptr));
        let guard = HostGuard(cur);
        let result = go();
        drop(guard);
        // A script that raised (not one that returned an error reply, as rate limiters do
        // every time they refuse) may have been probing the sandbox.
        let raised = !matches!(result, Ok((true, _)));
        let outcome = match result {
            Ok((true, v)) => {
                convert::lua_to_reply(&v, self.current.resp.get(), out);
                // A returned error table is the script's error reply: counted in errorstats
                // unless it is a failed call's own error, counted when the call failed.
                match &v {
                    Value::Table(t) if matches!(t.raw_get::<Value>("err"), Ok(Value::String(_))) => {
                        let counted =
                            !matches!(t.raw_get::<Value>("ignore_error_stats_update"), Ok(Value::Boolean(true)));
                        Outcome::Failed { counted }
                    }
                    _ => Outcome::Done,
                }
            }
            Ok((false, v)) => self.error_reply(name, &v, out),
            Err(e) => {
                out.error(&format!("ERR Error running script {name}, {}", lua_message(&e)));
                Outcome::Failed { counted: true }
            }
        };
        self.runs += 1;
        self.keep_heap_near_live();
        // Every proxy was written through a refusing path unless something was missed: the
        // check is defense in depth, cheap enough every 64 runs and after every raised error
        // (where a probing script would show itself).
        if self.runs.is_multiple_of(64) || self.runs < 4 || raised {
            // EVAL refills KEYS and ARGV (see `raw::set_list`), but a run that filled one and
            // emptied it again leaves its array as large as it grew, and each refill scans it:
            // the next run makes new ones.
            let _ = self.globals.raw_set("KEYS", Value::Nil);
            let _ = self.globals.raw_set("ARGV", Value::Nil);
            self.report_memory();
            if !matches!(self.intact.call::<bool>(()), Ok(true)) {
                tracing::warn!("A script wrote into a read-only table of the Lua VM: the VM is rebuilt");
                if let Ok(fresh) = Vm::new() {
                    *self = fresh;
                }
            }
        }
        outcome
    }

    /// The error reply of a failed run (the end of Valkey's `luaCallFunction`).
    fn error_reply(&self, name: &str, err: &Value, out: &mut ReplyBuf) -> Outcome {
        if self.current.killed.get() {
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

    /// Collects the VM's garbage once its heap has grown past what the last full collection
    /// left (`gc_floor`) by a quarter, at least [`GC_SLACK_MIN`]: so a VM stays near its live
    /// size, as Valkey's does with its forced step (`LUA_GC_CYCLE_PERIOD`, 50 KB every 50 runs),
    /// but pays for a collection only when runs leave garbage. That forced step finished a whole
    /// cycle each time, marking every live object every 50 runs however little the runs left:
    /// 12% of a short EVALSHA's instructions. Lua 5.1's own pacing (a cycle once the heap is
    /// twice the live size) let `used_memory_lua` reach 2.5 times the live size. A VM holding
    /// more than [`GC_FULL_MAX`] is left to that incremental collector, so no run waits for a
    /// whole large heap to be marked. A quarter rather than less: at an eighth (8 KiB), a short
    /// EVALSHA on random keys collected every ~50 runs and cost 5% more instructions.
    fn keep_heap_near_live(&mut self) {
        let used = self.lua.used_memory();
        self.gc_floor = self.gc_floor.min(used);
        if self.gc_floor > GC_FULL_MAX || used <= self.gc_floor + (self.gc_floor / 4).max(GC_SLACK_MIN) {
            return;
        }
        if self.lua.gc_collect().is_ok() {
            self.gc_floor = self.lua.used_memory();
            self.report_memory();
        }
    }

    /// The bytes the VM's heap holds now.
    #[cfg(test)]
    pub(crate) fn heap(&self) -> usize {
        self.lua.used_memory()
    }

    /// The bytes the VM's heap holds after a full collection.
    #[cfg(test)]
    pub(crate) fn live(&self) -> usize {
        let _ = self.lua.gc_collect();
        self.lua.used_memory()
    }

    /// Brings [`lua_memory`] up to date with this VM's size.
    fn report_memory(&mut self) {
        let now = self.lua.used_memory();
        if account(self.epoch, now, self.reported) {
            self.reported = now;
        }
    }
}

/// The API chunk (api.lua), compiled once per process and kept without its debug information
/// (see `strip`): its prototypes live as long as each VM, and the line table and names were
/// a third of them.
fn api_chunk(lua: &Lua) -> mlua::Result<Function> {
    static STRIPPED: std::sync::OnceLock<Option<Vec<u8>>> = std::sync::OnceLock::new();
    let text = || lua.load(include_str!("api.lua")).set_name("=api").into_function();
    let stripped = match STRIPPED.get() {
        Some(s) => s,
        None => {
            let made = crate::strip::strip(&text()?.dump(false))
                .inspect_err(|e| tracing::warn!("Lua API chunk kept with its debug information: {e:?}"))
                .ok();
            STRIPPED.get_or_init(|| made)
        }
    };
    match stripped {
        Some(bytes) => lua.load(&bytes[..]).set_name("=api").set_mode(mlua::ChunkMode::Binary).into_function(),
        None => text(),
    }
}

/// The least growth of a VM's heap that makes it collect (see [`Vm::keep_heap_near_live`]).
const GC_SLACK_MIN: usize = 16 << 10;
/// The largest heap [`Vm::keep_heap_near_live`] collects whole after a run.
const GC_FULL_MAX: usize = 1 << 20;

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

/// The host operations behind `redis.setresp`, `set_repl`, `log` and `acl_check_cmd` (see
/// api.lua): `op` 2 setresp, 3 set_repl, 4 log, 5 acl_check_cmd. Returns the result and
/// whether it is an error, which the Lua side raises.
fn dispatch(lua: &Lua, cur: &Current, args: MultiValue) -> mlua::Result<MultiValue> {
    let mut it = args.into_iter();
    let op = match it.next() {
        Some(Value::Integer(n)) => n,
        Some(Value::Number(n)) => n as i64,
        _ => 0,
    };
    let rest: Vec<Value> = it.collect();
    let outside = || raise(lua, "This function can only be called from inside a script");
    match op {
        5 => {
            if let Err(e) = cur.set_argv(&rest) {
                return raise(lua, e);
            }
            let (flat, spans) = (cur.flat.borrow(), cur.spans.borrow());
            match cur.with_host(|h| h.acl_check(Args::from_parts(&flat, &spans))) {
                Some(Some(ok)) => Ok(MultiValue::from_iter([Value::Boolean(ok), Value::Boolean(false)])),
                Some(None) => raise(lua, "Invalid command passed to server.acl_check_cmd()"),
                None => outside(),
            }
        }
        2 => {
            if rest.len() != 1 {
                return raise(lua, "server.setresp() requires one argument.");
            }
            match number(&rest[0]) {
                Some(n) if n == 2.0 || n == 3.0 => {
                    cur.resp.set(n as u8);
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
            match cur.with_host(|h| h.set_repl(flags as u8)) {
                Some(()) => Ok(MultiValue::new()),
                None => outside(),
            }
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
                if let Some(s) = lua_string(lua, v) {
                    if i > 0 {
                        msg.push(b' ');
                    }
                    msg.extend_from_slice(&s);
                }
            }
            match cur.with_host(|h| h.log(level, &msg)) {
                Some(()) => Ok(MultiValue::new()),
                None => outside(),
            }
        }
        _ => raise(lua, "unknown host operation"),
    }
}

impl Current {
    /// The arguments of a call, into the reused argument buffers: strings as they are,
    /// numbers as Valkey prints them (an integer when the double is one, else the shortest
    /// round-trip form).
    fn set_argv(&self, vals: &[Value]) -> Result<(), &'static str> {
        if vals.is_empty() {
            return Err("Please specify at least one argument for this call");
        }
        let (mut flat, mut spans) = (self.flat.borrow_mut(), self.spans.borrow_mut());
        flat.clear();
        spans.clear();
        for v in vals {
            let start = flat.len();
            match v {
                Value::String(s) => flat.extend_from_slice(&s.as_bytes()),
                // Lua 5.1 has only doubles: mlua's integers are those that are whole.
                Value::Integer(n) => crate::raw::number_arg(*n as f64, &mut flat),
                Value::Number(n) => crate::raw::number_arg(*n, &mut flat),
                _ => return Err("Command arguments must be strings or integers"),
            }
            spans.push((start, flat.len()));
        }
        Ok(())
    }

    /// The Rust part of `redis.call` / `redis.pcall` (see [`call`]): reads the arguments off
    /// `l`'s stack, runs the command through the host, and returns the buffer holding its
    /// reply, taken out of `reply` (a call made while the reply is pushed, from a finalizer,
    /// finds a buffer of its own). Pushes nothing.
    ///
    /// # Safety
    /// `l` is the running state of a call, its arguments on the stack.
    #[allow(unsafe_code)]
    unsafe fn raw_call(&self, l: *mut mlua::lua_State) -> Result<ReplyBuf, &'static str> {
        // SAFETY: `l` is live (the caller's promise).
        let n = unsafe { mlua::ffi::lua_gettop(l) };
        if n == 0 {
            return Err(self.failed("Please specify at least one argument for this call"));
        }
        {
            let (mut flat, mut spans) = (self.flat.borrow_mut(), self.spans.borrow_mut());
            flat.clear();
            spans.clear();
            for i in 1..=n {
                let start = flat.len();
                // SAFETY: `i` is within the stack (the caller's promise).
                if !unsafe { crate::raw::read_arg(l, i, &mut flat) } {
                    drop((flat, spans));
                    return Err(self.failed("Command arguments must be strings or integers"));
                }
                spans.push((start, flat.len()));
            }
        }
        let mut reply = self.reply.take();
        reply.truncate(0);
        reply.set_protocol(if self.resp.get() == 3 { Protocol::Resp3 } else { Protocol::Resp2 });
        let ran = {
            let (flat, spans) = (self.flat.borrow(), self.spans.borrow());
            let args = Args::from_parts(&flat, &spans);
            if self.ldb.logging() {
                self.ldb.log_command(args);
            }
            self.with_host(|h| h.call(args, &mut reply))
        };
        if ran.is_none() {
            self.reply.replace(reply);
            return Err(self.failed("This function can only be called from inside a script"));
        }
        if self.ldb.logging() {
            self.ldb.log_reply(reply.as_bytes());
        }
        Ok(reply)
    }

    /// A call refused before it ran: logged for the debugger, returned as the error text.
    fn failed(&self, text: &'static str) -> &'static str {
        if self.ldb.logging() {
            self.ldb.log(format!("<error> {text}").into_bytes());
        }
        text
    }
}

/// `redis.call` / `server.call`: a command whose reply is an error raises it.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn call(l: *mut mlua::lua_State) -> std::ffi::c_int {
    // SAFETY: Lua calls this closure with its upvalue (see `Vm::new`). Nothing in this frame
    // has a destructor, so the raise (a longjmp) crosses none.
    unsafe {
        if run_call(l) {
            mlua::ffi::lua_error(l);
        }
    }
    1
}

/// `redis.pcall` / `server.pcall`: an error reply is returned as its error table.
#[allow(unsafe_code)]
unsafe extern "C-unwind" fn pcall(l: *mut mlua::lua_State) -> std::ffi::c_int {
    // SAFETY: as `call`.
    unsafe { run_call(l) };
    1
}

/// Runs the call whose arguments are on `l`'s stack and leaves its result there alone: the
/// reply as a Lua value, or an error table. Returns whether it is an error.
///
/// # Safety
/// `l` is running a C closure made in `Vm::new`, whose first upvalue points to its VM's
/// `Current`.
#[allow(unsafe_code)]
unsafe fn run_call(l: *mut mlua::lua_State) -> bool {
    use std::mem::ManuallyDrop;
    // SAFETY: the upvalue is the pointer `Vm::new` stored, to a `Current` that outlives the
    // state; only shared references to it are ever made.
    let cur = unsafe { &*mlua::ffi::lua_touserdata(l, mlua::ffi::lua_upvalueindex(1)).cast::<Current>() };
    // A panic in the server must not unwind through Lua's C frames.
    // SAFETY: the arguments are on the stack (our caller's promise).
    let ran = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| unsafe { cur.raw_call(l) }));
    let ran = match ran {
        Ok(Ok(reply)) => Ok(ManuallyDrop::new(reply)),
        Ok(Err(text)) => Err(text),
        Err(_) => Err("internal error while running the command"),
    };
    // From here on every push may raise, so what needs freeing is in `ManuallyDrop` (a raise
    // leaks it, once, rather than skipping its destructor). The arguments were copied: the
    // stack is emptied first, since a call may come with as many as it holds (8000).
    // SAFETY: `l` is live.
    unsafe { mlua::ffi::lua_settop(l, 0) };
    match ran {
        Err(text) => {
            // SAFETY: an empty stack with room for the table (LUA_MINSTACK).
            unsafe { crate::raw::push_error(l, convert::error_parts(text.as_bytes()), false) };
            true
        }
        Ok(reply) => {
            let bytes = reply.as_bytes();
            let mut at = 0;
            // SAFETY: as above.
            let failed = match unsafe { crate::raw::push_reply(l, bytes, &mut at, 0) } {
                Ok(()) => bytes.first() == Some(&b'-'),
                Err(_) => {
                    // SAFETY: as above.
                    unsafe {
                        mlua::ffi::lua_settop(l, 0);
                        crate::raw::push_error(l, convert::error_parts(b"malformed reply from command"), false);
                    }
                    true
                }
            };
            // The buffer goes back for the next call; what a call from a finalizer used
            // meanwhile is dropped.
            drop(cur.reply.replace(ManuallyDrop::into_inner(reply)));
            failed
        }
    }
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

/// A string or number as Lua itself turns it into a string (a number as `%.14g`).
fn lua_string(lua: &Lua, v: &Value) -> Option<Vec<u8>> {
    lua.coerce_string(v.clone()).ok().flatten().map(|s| s.as_bytes().to_vec())
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
fn statics(lua: &Lua, current: &Rc<Current>) -> mlua::Result<Table> {
    let t = lua.create_table()?;
    let cur = current.clone();
    t.raw_set("killed", lua.create_function(move |_, ()| Ok(cur.killed.get()))?)?;
    let cur = current.clone();
    t.raw_set("breakpoint", lua.create_function(move |_, ()| Ok(cur.ldb.breakpoint()))?)?;
    let cur = current.clone();
    t.raw_set(
        "debug",
        lua.create_function(move |_, args: MultiValue| {
            cur.ldb.debug(&args);
            Ok(())
        })?,
    )?;
    let cur = current.clone();
    t.raw_set("host", lua.create_function(move |lua, args: MultiValue| dispatch(lua, &cur, args))?)?;
    t.raw_set(
        "sha1hex",
        lua.create_function(|lua, args: MultiValue| {
            if args.len() != 1 {
                return Ok((false, Value::String(lua.create_string("wrong number of arguments")?)));
            }
            let s = lua_string(lua, &args[0]).unwrap_or_default();
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
        lua.create_function(|lua, args: MultiValue| {
            // The library-loading API's redis.log: no host then, so straight to the log.
            let mut it = args.iter();
            let level = it.next().and_then(number).unwrap_or(-1.0) as i64;
            let msg: Vec<Vec<u8>> = it.filter_map(|v| lua_string(lua, v)).collect();
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
        if slot.as_ref().is_some_and(|vm| vm.epoch != vm_epoch()) {
            *slot = None;
        }
        if slot.is_none() {
            *slot = Some(Vm::new().map_err(|e| tracing::warn!("Lua VM not created: {e}")).ok()?);
        }
        slot.as_mut().map(f)
    })
}
