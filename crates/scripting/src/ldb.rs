//! The Lua debugger (SCRIPT DEBUG, `redis-cli --ldb`), as Valkey's LDB speaks it: the script
//! stops between lines, the debugging client's commands (`step`, `continue`, `print`,
//! `break`, `eval`, `redis`, ...) are read straight from its connection, and what the debugger
//! has to say goes back as an array of status strings. The session is synchronous: the thread
//! that runs the script waits on the client, so the I/O goes through [`DebugIo`], blocking
//! calls the server implements on the client's socket.
//!
//! What the API functions and the hook share lives in [`Shared`] (cells in the VM's run
//! state), so that `redis.call`, `redis.debug` and `redis.breakpoint` can log and flag while
//! the hook holds the [`Session`] itself.

use std::any::Any;
use std::cell::{Cell, RefCell};
use std::io;
use std::time::{Duration, Instant};

use mlua::{Function, Lua, MultiValue, Table, Value};

/// Breakpoints a session can hold (Valkey's `LDB_BREAKPOINTS_MAX`).
const MAX_BREAKPOINTS: usize = 64;
/// Default length at which logged replies and values are cut.
const DEFAULT_MAXLEN: usize = 256;
/// How deep nested tables are shown (Valkey's `LUA_MINSTACK / 2`).
const MAX_DEPTH: usize = 10;
/// A client that sends this much without one complete command ends the session.
const MAX_INPUT: usize = 1 << 20;

/// Blocking I/O on the debugging client's connection.
pub trait DebugIo: Send {
    /// Writes all of `bytes`.
    fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Waits for bytes from the client and appends them to `buf`; `Ok(0)` once it closed.
    fn recv(&mut self, buf: &mut Vec<u8>) -> io::Result<usize>;
    /// The implementation back, for the caller to take its socket state back.
    fn into_any(self: Box<Self>) -> Box<dyn Any>;
}

/// One debugging session: the client's connection, the script's source by line, and the
/// breakpoints.
pub struct Session {
    io: Box<dyn DebugIo>,
    src: Vec<Vec<u8>>,
    bp: Vec<i64>,
    /// Bytes read from the client and not yet parsed into a command.
    input: Vec<u8>,
    /// How long the script may run between stops before the debugger stops it anyway
    /// (`busy-reply-threshold`, or 5 s when that is 0).
    timeout: Duration,
    started: Instant,
    /// The end mark was sent.
    ended: bool,
}

impl Session {
    /// A session for a script whose body is `body`. `input` is what the client already sent
    /// after its EVAL.
    pub fn new(io: Box<dyn DebugIo>, body: &[u8], busy_threshold: Duration, input: Vec<u8>) -> Session {
        let mut body = body;
        while let [rest @ .., b'\r' | b'\n'] = body {
            body = rest;
        }
        Session {
            io,
            src: body.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect(),
            bp: Vec::new(),
            input,
            timeout: if busy_threshold.is_zero() { Duration::from_secs(5) } else { busy_threshold },
            started: Instant::now(),
            ended: false,
        }
    }

    /// Ends a session whose script never ran (it did not compile): the client still gets
    /// the end mark before the reply.
    pub fn close(&mut self) {
        if !self.ended {
            self.ended = true;
            let _ = self.io.send(b"*1\r\n+<endsession>\r\n");
        }
    }

    /// The connection back.
    pub fn into_io(self) -> Box<dyn DebugIo> {
        self.io
    }

    fn source_line(&self, line: i64) -> &[u8] {
        match usize::try_from(line - 1).ok().and_then(|i| self.src.get(i)) {
            Some(l) => l,
            None => b"<out of range source code line>",
        }
    }

    /// Sends the pending log entries as one array of status strings.
    fn send_logs(&mut self, shared: &Shared) {
        let logs = std::mem::take(&mut *shared.logs.borrow_mut());
        let mut proto = format!("*{}\r\n", logs.len()).into_bytes();
        for entry in logs {
            proto.push(b'+');
            proto.extend(entry.iter().map(|&c| if c == b'\r' || c == b'\n' { b' ' } else { c }));
            proto.extend_from_slice(b"\r\n");
        }
        // A failed write is found by the next read, which ends the session.
        let _ = self.io.send(&proto);
    }
}

/// The debugger state the API functions reach too.
#[derive(Default)]
pub(crate) struct Shared {
    /// A debugging session is running.
    active: Cell<bool>,
    /// Stop at the next line (and, while set, log the commands the script calls).
    step: Cell<bool>,
    /// `redis.breakpoint()` was called: stop at the next line.
    luabp: Cell<bool>,
    line: Cell<i64>,
    maxlen: Cell<usize>,
    hint_sent: Cell<bool>,
    logs: RefCell<Vec<Vec<u8>>>,
}

impl Shared {
    /// Starts a session's state afresh.
    pub(crate) fn begin(&self) {
        self.active.set(true);
        self.step.set(true);
        self.luabp.set(false);
        self.line.set(0);
        self.maxlen.set(DEFAULT_MAXLEN);
        self.hint_sent.set(false);
        self.logs.borrow_mut().clear();
    }

    /// Ends the session: the last entries and the end mark go to the client.
    pub(crate) fn end(&self, session: &mut Session) {
        self.log(b"<endsession>".to_vec());
        session.send_logs(self);
        session.ended = true;
        self.active.set(false);
        self.step.set(false);
    }

    /// Whether the commands a script calls are logged now (Valkey's `ldbIsEnabled`).
    pub(crate) fn logging(&self) -> bool {
        self.active.get() && self.step.get()
    }

    pub(crate) fn log(&self, entry: Vec<u8>) {
        self.logs.borrow_mut().push(entry);
    }

    /// Logs `entry` cut at `maxlen`, with a hint the first time something is cut.
    fn log_max(&self, mut entry: Vec<u8>) {
        let max = self.maxlen.get();
        let cut = max != 0 && entry.len() > max;
        if cut {
            entry.truncate(max);
            entry.extend_from_slice(b" ...");
        }
        self.log(entry);
        if cut && !self.hint_sent.get() {
            self.hint_sent.set(true);
            self.log(b"<hint> The above reply was trimmed. Use 'maxlen 0' to disable trimming.".to_vec());
        }
    }

    /// Logs the command a script calls, its first ten arguments shown.
    pub(crate) fn log_command(&self, args: hotkv_protocol::Args<'_>) {
        let mut line = b"<command>".to_vec();
        for (i, a) in args.iter().enumerate() {
            if i == 10 {
                line.extend_from_slice(format!(" ... ({} more)", args.len() - i - 1).as_bytes());
                break;
            }
            line.push(b' ');
            line.extend_from_slice(a);
        }
        self.log(line);
    }

    /// Logs a command's reply in readable form; an error reply is logged as the error first.
    pub(crate) fn log_reply(&self, reply: &[u8]) {
        if reply.first() == Some(&b'-') {
            let end = reply.iter().position(|&c| c == b'\r').unwrap_or(reply.len());
            self.log([b"<error> ".as_slice(), &reply[..end]].concat());
        }
        let mut line = b"<reply> ".to_vec();
        human(reply, &mut 0, &mut line);
        self.log_max(line);
    }

    /// `redis.breakpoint()`: true (and a stop at the next line) during a session.
    pub(crate) fn breakpoint(&self) -> bool {
        if self.active.get() {
            self.luabp.set(true);
        }
        self.active.get()
    }

    /// `redis.debug(...)`: logs its arguments during a session.
    pub(crate) fn debug(&self, args: &MultiValue) {
        if !self.active.get() {
            return;
        }
        let mut line = format!("<debug> line {}: ", self.line.get()).into_bytes();
        for (i, v) in args.iter().enumerate() {
            if i > 0 {
                line.extend_from_slice(b", ");
            }
            repr(v, 0, &mut line);
        }
        self.log(line);
    }
}

/// What the debugger reads the stopped script's state through.
pub(crate) struct Frames<'a> {
    /// The debug library (scripts do not see it).
    pub dbg: &'a Table,
    /// The real global table, where KEYS and ARGV are (scripts see a read-only proxy).
    pub globals: &'a Table,
}

/// Why the command loop gave the script back.
enum Resume {
    /// Run on (`step`, `continue`).
    Run,
    /// The client is gone.
    Closed,
}

/// The line hook of a debugged run: stops at the next line when stepping, at breakpoints,
/// and when the script ran `timeout` without a stop (an endless loop). `Err(text)` ends the
/// script with that error.
pub(crate) fn on_line(
    lua: &Lua,
    shared: &Shared,
    session: &mut Session,
    frames: &Frames<'_>,
    line: i64,
    counted: bool,
) -> Result<(), String> {
    shared.line.set(line);
    let bp = session.bp.contains(&line) || shared.luabp.get();
    let mut timeout = false;
    if counted && !shared.step.get() && !bp {
        if session.started.elapsed() < session.timeout {
            return Ok(());
        }
        timeout = true;
        shared.step.set(true);
    }
    if !shared.step.get() && !bp {
        return Ok(());
    }
    let reason = if bp {
        if shared.luabp.get() { "redis.breakpoint() called" } else { "break point" }
    } else if timeout {
        "timeout reached, infinite loop?"
    } else {
        "step over"
    };
    shared.step.set(false);
    shared.luabp.set(false);
    shared.log(format!("* Stopped at {line}, stop reason = {reason}").into_bytes());
    log_source_line(shared, session, line);
    session.send_logs(shared);
    if let Resume::Closed = repl(lua, shared, session, frames)?
        && timeout
    {
        return Err("timeout during Lua debugging with client closing connection".into());
    }
    session.started = Instant::now();
    Ok(())
}

/// Reads and runs the client's debugger commands until one gives the script back.
fn repl(lua: &Lua, shared: &Shared, s: &mut Session, frames: &Frames<'_>) -> Result<Resume, String> {
    loop {
        let argv = loop {
            match parse_command(&s.input) {
                Parsed::Command(argv, used) => {
                    s.input.drain(..used);
                    break argv;
                }
                Parsed::Error => return Err("protocol error".into()),
                Parsed::Incomplete => {}
            }
            match s.io.recv(&mut s.input) {
                Ok(n) if n > 0 => {}
                _ => {
                    // The script runs on to its end with nobody to stop for.
                    shared.step.set(false);
                    s.bp.clear();
                    return Ok(Resume::Closed);
                }
            }
            if s.input.len() > MAX_INPUT {
                s.input = Vec::new();
                return Err("max client buffer reached".into());
            }
        };
        let name = argv[0].to_ascii_lowercase();
        match name.as_slice() {
            b"h" | b"help" => {
                for l in HELP {
                    shared.log(l.as_bytes().to_vec());
                }
            }
            b"s" | b"step" | b"n" | b"next" => {
                shared.step.set(true);
                return Ok(Resume::Run);
            }
            b"c" | b"continue" => return Ok(Resume::Run),
            b"t" | b"trace" => trace(shared, s, frames.dbg),
            b"m" | b"maxlen" => maxlen(shared, &argv),
            b"b" | b"break" => breakpoints(shared, s, &argv),
            b"e" | b"eval" if argv.len() > 1 => eval(lua, shared, &argv),
            b"a" | b"abort" => return Err("script aborted for user request".into()),
            b"r" | b"redis" | b"v" | b"valkey" | b"server" if argv.len() > 1 => call(lua, shared, &argv),
            b"p" | b"print" => {
                if argv.len() == 2 {
                    print_var(shared, frames, &argv[1]);
                } else {
                    print_all(shared, frames.dbg);
                }
            }
            b"l" | b"list" => {
                let mut around = shared.line.get();
                let mut ctx = 5;
                if let Some(n) = argv.get(1).map(|a| atoi(a)).filter(|&n| n > 0) {
                    around = n;
                }
                if let Some(c) = argv.get(2) {
                    ctx = atoi(c);
                }
                list(shared, s, around, ctx);
            }
            b"w" | b"whole" => list(shared, s, 1, 1_000_000),
            _ => shared.log(b"<error> Unknown Lua debugger command or wrong number of arguments.".to_vec()),
        }
        s.send_logs(shared);
    }
}

const HELP: &[&str] = &[
    "Lua debugger help:",
    "[h]elp               Show this help.",
    "[s]tep               Run current line and stop again.",
    "[n]ext               Alias for step.",
    "[c]ontinue           Run till next breakpoint.",
    "[l]ist               List source code around current line.",
    "[l]ist [line]        List source code around [line].",
    "                     line = 0 means: current position.",
    "[l]ist [line] [ctx]  In this form [ctx] specifies how many lines",
    "                     to show before/after [line].",
    "[w]hole              List all source code. Alias for 'list 1 1000000'.",
    "[p]rint              Show all the local variables.",
    "[p]rint <var>        Show the value of the specified variable.",
    "                     Can also show global vars KEYS and ARGV.",
    "[b]reak              Show all breakpoints.",
    "[b]reak <line>       Add a breakpoint to the specified line.",
    "[b]reak -<line>      Remove breakpoint from the specified line.",
    "[b]reak 0            Remove all breakpoints.",
    "[t]race              Show a backtrace.",
    "[e]val <code>        Execute some Lua code (in a different callframe).",
    "[r]edis <cmd>        Execute a command ([v]alkey and server work too).",
    "[m]axlen [len]       Trim logged replies and Lua var dumps to len.",
    "                     Specifying zero as <len> means unlimited.",
    "[a]bort              Stop the execution of the script. In sync",
    "                     mode dataset changes will be retained.",
    "",
    "Debugger functions you can call from Lua scripts:",
    "redis.debug()        Produce logs in the debugger console.",
    "redis.breakpoint()   Stop execution like if there was a breakpoint in the",
    "                     next line of code.",
];

enum Parsed {
    Command(Vec<Vec<u8>>, usize),
    Incomplete,
    Error,
}

/// One command of the client's input, as Valkey's LDB reads it: an array of 1 to 1024 bulk
/// strings of 1 to 1024 bytes each.
fn parse_command(buf: &[u8]) -> Parsed {
    if buf.is_empty() {
        return Parsed::Incomplete;
    }
    let Some(star) = buf.iter().position(|&c| c == b'*') else { return Parsed::Error };
    let line_end = |from: usize| buf[from..].windows(2).position(|w| w == b"\r\n").map(|i| from + i);
    let Some(end) = line_end(star + 1) else { return Parsed::Incomplete };
    let argc = atoi(&buf[star + 1..end]);
    if !(1..=1024).contains(&argc) {
        return Parsed::Error;
    }
    let mut at = end + 2;
    let mut argv = Vec::with_capacity(argc as usize);
    while argv.len() < argc as usize {
        match buf.get(at) {
            None => return Parsed::Incomplete,
            Some(b'$') => {}
            Some(_) => return Parsed::Error,
        }
        let Some(end) = line_end(at + 1) else { return Parsed::Incomplete };
        let len = atoi(&buf[at + 1..end]);
        if !(1..=1024).contains(&len) {
            return Parsed::Error;
        }
        let start = end + 2;
        let stop = start + len as usize;
        if stop + 2 > buf.len() {
            return Parsed::Incomplete;
        }
        if &buf[stop..stop + 2] != b"\r\n" {
            return Parsed::Error;
        }
        argv.push(buf[start..stop].to_vec());
        at = stop + 2;
    }
    Parsed::Command(argv, at)
}

/// C's `atoi`: leading blanks, a sign, then digits, whatever follows ignored.
fn atoi(b: &[u8]) -> i64 {
    let s = std::str::from_utf8(b).unwrap_or("").trim_start();
    let (neg, digits) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let n = digits
        .bytes()
        .take_while(u8::is_ascii_digit)
        .fold(0i64, |n, d| n.saturating_mul(10).saturating_add(i64::from(d - b'0')));
    if neg { -n } else { n }
}

fn log_source_line(shared: &Shared, s: &Session, line: i64) {
    let bp = s.bp.contains(&line);
    let prefix = match (shared.line.get() == line, bp) {
        (true, true) => "->#",
        (true, false) => "-> ",
        (false, true) => "  #",
        (false, false) => "   ",
    };
    let mut entry = format!("{prefix}{line:<3} ").into_bytes();
    entry.extend_from_slice(s.source_line(line));
    shared.log(entry);
}

fn list(shared: &Shared, s: &Session, around: i64, ctx: i64) {
    for line in 1..=s.src.len() as i64 {
        if around != 0 && (around - line).abs() > ctx {
            continue;
        }
        log_source_line(shared, s, line);
    }
}

fn breakpoints(shared: &Shared, s: &mut Session, argv: &[Vec<u8>]) {
    if argv.len() == 1 {
        if s.bp.is_empty() {
            shared.log(b"No breakpoints set. Use 'b <line>' to add one.".to_vec());
        } else {
            shared.log(format!("{} breakpoints set:", s.bp.len()).into_bytes());
            for line in s.bp.clone() {
                log_source_line(shared, s, line);
            }
        }
        return;
    }
    for arg in &argv[1..] {
        let Some(line) = std::str::from_utf8(arg).ok().and_then(|a| a.parse::<i64>().ok()) else {
            shared.log([b"Invalid argument:'".as_slice(), arg, b"'"].concat());
            continue;
        };
        if line == 0 {
            s.bp.clear();
            shared.log(b"All breakpoints removed.".to_vec());
        } else if line > 0 {
            if s.bp.len() == MAX_BREAKPOINTS {
                shared.log(b"Too many breakpoints set.".to_vec());
            } else if line as usize <= s.src.len() {
                if !s.bp.contains(&line) {
                    s.bp.push(line);
                }
                list(shared, s, line, 1);
            } else {
                shared.log(b"Wrong line number.".to_vec());
            }
        } else if let Some(i) = s.bp.iter().position(|&b| b == -line) {
            s.bp.remove(i);
            shared.log(b"Breakpoint removed.".to_vec());
        } else {
            shared.log(b"No breakpoint in the specified line.".to_vec());
        }
    }
}

fn maxlen(shared: &Shared, argv: &[Vec<u8>]) {
    if argv.len() == 2 {
        let mut n = atoi(&argv[1]).max(0) as usize;
        shared.hint_sent.set(true);
        if n != 0 && n <= 60 {
            n = 60;
        }
        shared.maxlen.set(n);
    }
    let text = match shared.maxlen.get() {
        0 => "<value> replies are unlimited.".to_string(),
        n => format!("<value> replies are truncated at {n} bytes."),
    };
    shared.log(text.into_bytes());
}

/// `eval <code>`: the code as an expression, else as a statement, in a frame of its own.
fn eval(lua: &Lua, shared: &Shared, argv: &[Vec<u8>]) {
    let code = argv[1..].join(&b' ');
    let expr = [b"return ".as_slice(), &code].concat();
    let chunk = match lua.load(&expr[..]).set_name("@ldb_eval").into_function() {
        Ok(f) => f,
        Err(_) => match lua.load(&code[..]).set_name("@ldb_eval").into_function() {
            Ok(f) => f,
            Err(e) => {
                shared.log(format!("<error> {}", crate::vm::lua_message(&e)).into_bytes());
                return;
            }
        },
    };
    match chunk.call::<Value>(()) {
        Ok(v) => {
            let mut line = b"<retval> ".to_vec();
            repr(&v, 0, &mut line);
            shared.log_max(line);
        }
        Err(e) => {
            let msg = crate::vm::lua_message(&e);
            // mlua adds a traceback of its own frames, which Lua's message does not have.
            let msg = msg.split("\nstack traceback:").next().unwrap_or_default();
            shared.log(format!("<error> {msg}").into_bytes());
        }
    }
}

/// `redis <cmd> ...`: runs the command through `redis.call`, logged as the script's own
/// calls are while stepping.
fn call(lua: &Lua, shared: &Shared, argv: &[Vec<u8>]) {
    let f = lua.globals().get::<Table>("redis").and_then(|r| r.get::<Function>("call"));
    let Ok(f) = f else {
        shared.log(b"<error> redis.call is not available".to_vec());
        return;
    };
    let mut args = MultiValue::new();
    for a in &argv[1..] {
        match lua.create_string(a) {
            Ok(s) => args.push_back(Value::String(s)),
            Err(_) => return,
        }
    }
    shared.step.set(true);
    // An error reply was logged already; the raised error itself goes nowhere.
    let _ = f.call::<Value>(args);
    shared.step.set(false);
}

/// The stack level, as the debug library counts it from here, of the frame the script was
/// stopped in: the first one running the script's own code.
fn script_level(dbg: &Table) -> Option<i64> {
    (1..64).find(|&level| is_script_frame(dbg, level) == Some(true))
}

/// The locals of the frame `level` levels up, in order: (name, value).
fn locals(dbg: &Table, level: i64) -> Vec<(String, Value)> {
    let Ok(getlocal) = dbg.get::<Function>("getlocal") else { return Vec::new() };
    let mut out = Vec::new();
    for i in 1.. {
        match getlocal.call::<(Option<String>, Value)>((level, i)) {
            Ok((Some(name), v)) => out.push((name, v)),
            _ => break,
        }
    }
    out
}

/// Whether frame `level` runs the script's code (a function it defined included).
fn is_script_frame(dbg: &Table, level: i64) -> Option<bool> {
    let getinfo: Function = dbg.get("getinfo").ok()?;
    let info = getinfo.call::<Option<Table>>((level, "S")).ok()??;
    Some(info.get::<String>("source").is_ok_and(|s| s == "@user_script"))
}

fn print_var(shared: &Shared, frames: &Frames<'_>, name: &[u8]) {
    let dbg = frames.dbg;
    if let Some(base) = script_level(dbg) {
        let mut level = base;
        while let Some(own) = is_script_frame(dbg, level) {
            if own && let Some((_, v)) = locals(dbg, level).into_iter().find(|(n, _)| n.as_bytes() == name) {
                let mut line = b"<value> ".to_vec();
                repr(&v, 0, &mut line);
                shared.log_max(line);
                return;
            }
            level += 1;
        }
    }
    if name == b"KEYS" || name == b"ARGV" {
        let v = frames.globals.raw_get::<Value>(mlua::String::wrap(name)).unwrap_or(Value::Nil);
        let mut line = b"<value> ".to_vec();
        repr(&v, 0, &mut line);
        shared.log_max(line);
    } else {
        shared.log(b"No such variable.".to_vec());
    }
}

fn print_all(shared: &Shared, dbg: &Table) {
    let mut shown = 0;
    if let Some(level) = script_level(dbg) {
        for (name, v) in locals(dbg, level) {
            if name.contains("(*temporary)") {
                continue;
            }
            let mut line = format!("<value> {name} = ").into_bytes();
            repr(&v, 0, &mut line);
            shared.log_max(line);
            shown += 1;
        }
    }
    if shown == 0 {
        shared.log(b"No local variables in the current context.".to_vec());
    }
}

fn trace(shared: &Shared, s: &Session, dbg: &Table) {
    let Ok(getinfo) = dbg.get::<Function>("getinfo") else { return };
    let Some(base) = script_level(dbg) else {
        shared.log(b"<error> Can't retrieve Lua stack.".to_vec());
        return;
    };
    let mut level = base;
    while let Ok(Some(info)) = getinfo.call::<Option<Table>>((level, "Snl")) {
        let short: String = info.get("short_src").unwrap_or_default();
        if short.contains("user_script") {
            let name: Option<String> = info.get("name").ok().flatten();
            let what = if level == base { "In" } else { "From" };
            shared.log(format!("{what} {}:", name.as_deref().unwrap_or("top level")).into_bytes());
            log_source_line(shared, s, info.get::<i64>("currentline").unwrap_or(-1));
        }
        level += 1;
    }
}

/// A Lua value as the debugger shows it (Valkey's `ldbCatStackValue`).
pub(crate) fn repr(v: &Value, depth: usize, out: &mut Vec<u8>) {
    if depth == MAX_DEPTH {
        out.extend_from_slice(b"<max recursion level reached! Nested table?>");
        return;
    }
    match v {
        Value::String(s) => quoted(&s.as_bytes(), out),
        Value::Boolean(b) => out.extend_from_slice(if *b { b"true" } else { b"false" }),
        Value::Integer(n) => out.extend_from_slice(fmt_g(*n as f64).as_bytes()),
        Value::Number(n) => out.extend_from_slice(fmt_g(*n).as_bytes()),
        Value::Nil => out.extend_from_slice(b"nil"),
        Value::Table(t) => {
            let (mut list, mut full) = (Vec::new(), Vec::new());
            let mut is_array = true;
            let mut expected = 1.0;
            for pair in t.clone().pairs::<Value, Value>() {
                let Ok((k, val)) = pair else { break };
                let key_num = match &k {
                    Value::Integer(n) => Some(*n as f64),
                    Value::Number(n) => Some(*n),
                    _ => None,
                };
                if is_array && key_num != Some(expected) {
                    is_array = false;
                }
                repr(&val, depth + 1, &mut list);
                list.extend_from_slice(b"; ");
                full.push(b'[');
                repr(&k, depth + 1, &mut full);
                full.extend_from_slice(b"]=");
                repr(&val, depth + 1, &mut full);
                full.extend_from_slice(b"; ");
                expected += 1.0;
            }
            let chosen = if is_array { &mut list } else { &mut full };
            chosen.truncate(chosen.len().saturating_sub(2));
            out.push(b'{');
            out.extend_from_slice(chosen);
            out.push(b'}');
        }
        Value::Function(_) => pointer("function", v, out),
        Value::Thread(_) => pointer("thread", v, out),
        Value::UserData(_) | Value::Error(_) => pointer("userdata", v, out),
        Value::LightUserData(_) => pointer("light-userdata", v, out),
        _ => out.extend_from_slice(b"\"<unknown-lua-type>\""),
    }
}

fn pointer(kind: &str, v: &Value, out: &mut Vec<u8>) {
    out.extend_from_slice(format!("\"{kind}@{:p}\"", v.to_pointer()).as_bytes());
}

/// Valkey's `sdscatrepr` of `s`, appended to `out`.
fn quoted(s: &[u8], out: &mut Vec<u8>) {
    let mut text = String::with_capacity(s.len() + 2);
    hotkv_protocol::repr(&mut text, s);
    out.extend_from_slice(text.as_bytes());
}

/// C's `%g`: six significant digits, fixed or exponent notation, trailing zeros dropped.
pub(crate) fn fmt_g(n: f64) -> String {
    if n.is_nan() {
        return if n.is_sign_negative() { "-nan" } else { "nan" }.into();
    }
    if n.is_infinite() {
        return if n < 0.0 { "-inf" } else { "inf" }.into();
    }
    if n == 0.0 {
        return if n.is_sign_negative() { "-0" } else { "0" }.into();
    }
    let sci = format!("{n:.5e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let trim = |s: &str| -> String {
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s.to_string() }
    };
    if !(-4..6).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", trim(mantissa), exp.abs())
    } else {
        trim(&format!("{n:.*}", (5 - exp) as usize))
    }
}

/// A RESP reply in readable form (Valkey's `ldbRespToHuman`).
fn human(r: &[u8], at: &mut usize, out: &mut Vec<u8>) {
    let Some(&kind) = r.get(*at) else { return };
    let Some(end) = r[*at..].windows(2).position(|w| w == b"\r\n").map(|i| *at + i) else {
        *at = r.len();
        return;
    };
    let head = &r[*at + 1..end];
    *at = end + 2;
    let count = || std::str::from_utf8(head).ok().and_then(|h| h.parse::<i64>().ok()).unwrap_or(0);
    match kind {
        b':' | b'(' => out.extend_from_slice(head),
        b'$' | b'=' => {
            let n = count();
            if n < 0 {
                out.extend_from_slice(b"NULL");
                return;
            }
            let stop = (*at + n as usize).min(r.len());
            quoted(&r[*at..stop], out);
            *at = stop + 2;
        }
        b'+' | b'-' => quoted(&r[end - head.len() - 1..end], out),
        b'*' | b'~' | b'>' => {
            let n = count();
            if n < 0 {
                out.extend_from_slice(b"NULL");
                return;
            }
            out.extend_from_slice(if kind == b'~' { b"~(" } else { b"[" });
            for i in 0..n {
                human(r, at, out);
                if i != n - 1 {
                    out.push(b',');
                }
            }
            out.push(if kind == b'~' { b')' } else { b']' });
        }
        b'%' => {
            let n = count();
            out.push(b'{');
            for i in 0..n {
                human(r, at, out);
                out.extend_from_slice(b" => ");
                human(r, at, out);
                if i != n - 1 {
                    out.push(b',');
                }
            }
            out.push(b'}');
        }
        b'_' => out.extend_from_slice(b"(null)"),
        b'#' => out.extend_from_slice(if head.first() == Some(&b't') { b"#true" } else { b"#false" }),
        b',' => {
            out.extend_from_slice(b"(double) ");
            out.extend_from_slice(head);
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_parse_as_valkey_reads_them() {
        let ok = |b: &[u8]| match parse_command(b) {
            Parsed::Command(argv, used) => (argv, used),
            _ => panic!("not a command: {b:?}"),
        };
        assert_eq!(ok(b"*1\r\n$1\r\ns\r\n"), (vec![b"s".to_vec()], 11));
        let (argv, _) = ok(b"*2\r\n$5\r\nhello\r\n$3\r\na\0b\r\n*1");
        assert_eq!(argv, vec![b"hello".to_vec(), b"a\0b".to_vec()]);
        assert!(matches!(parse_command(b""), Parsed::Incomplete));
        assert!(matches!(parse_command(b"*2\r\n$1\r\ns\r\n"), Parsed::Incomplete));
        assert!(matches!(parse_command(b"*1\r\n$4\r\nab"), Parsed::Incomplete));
        assert!(matches!(parse_command(b"hello"), Parsed::Error));
        assert!(matches!(parse_command(b"*0\r\n"), Parsed::Error));
        assert!(matches!(parse_command(b"*1025\r\n"), Parsed::Error));
        assert!(matches!(parse_command(b"*1\r\n$0\r\n\r\n"), Parsed::Error));
        assert!(matches!(parse_command(b"*1\r\n$2000\r\n"), Parsed::Error));
        assert!(matches!(parse_command(b"*1\r\n+s\r\n"), Parsed::Error));
        assert!(matches!(parse_command(b"*1\r\n$1\r\nsXY"), Parsed::Error));
    }

    #[test]
    fn numbers_print_as_c_prints_percent_g() {
        for (n, s) in [
            (1.0, "1"),
            (-2.5, "-2.5"),
            (1.23456789, "1.23457"),
            (100000.0, "100000"),
            (1000000.0, "1e+06"),
            (0.0001, "0.0001"),
            (0.00001234, "1.234e-05"),
            (123456789.0, "1.23457e+08"),
            (0.0, "0"),
            (1e300, "1e+300"),
        ] {
            assert_eq!(fmt_g(n), s, "{n}");
        }
    }

    #[test]
    fn replies_read_as_valkey_shows_them() {
        let h = |r: &[u8]| {
            let mut out = Vec::new();
            human(r, &mut 0, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(h(b"+OK\r\n"), "\"+OK\"");
        assert_eq!(h(b"-ERR no\r\n"), "\"-ERR no\"");
        assert_eq!(h(b":12\r\n"), "12");
        assert_eq!(h(b"$-1\r\n"), "NULL");
        assert_eq!(h(b"$3\r\na\nb\r\n"), "\"a\\nb\"");
        assert_eq!(h(b"*2\r\n$1\r\na\r\n:1\r\n"), "[\"a\",1]");
        assert_eq!(h(b"%1\r\n+k\r\n,1.5\r\n"), "{\"+k\" => (double) 1.5}");
        assert_eq!(h(b"~1\r\n#t\r\n"), "~(#true)");
        assert_eq!(h(b"_\r\n"), "(null)");
        // A truncated reply shows what there is, without reading past the end.
        assert_eq!(h(b"*3\r\n:1\r\n"), "[1,,]");
    }

    #[test]
    fn a_long_reply_is_cut_and_the_hint_given_once() {
        let shared = Shared::default();
        shared.begin();
        shared.log_max(vec![b'x'; 300]);
        shared.log_max(vec![b'y'; 300]);
        let logs = shared.logs.borrow();
        assert_eq!(logs.len(), 3);
        assert_eq!(logs[0].len(), 256 + 4);
        assert!(logs[1].starts_with(b"<hint>"));
        assert!(logs[2].ends_with(b" ..."));
    }
}
