//! The VM against a fake host: the sandbox, the API and Valkey's error texts.

use std::collections::HashMap;

use hotkv_protocol::{Args, ReplyBuf};

use crate::vm::{Call, Host, LogLevel, Outcome, Vm};

/// A host that knows GET, SET and PING, and records what the script logged.
#[derive(Default)]
struct Fake {
    data: HashMap<Vec<u8>, Vec<u8>>,
    logs: Vec<(LogLevel, Vec<u8>)>,
    calls: usize,
}

impl Host for Fake {
    fn call(&mut self, args: Args<'_>, reply: &mut ReplyBuf) {
        let argv: Vec<&[u8]> = args.iter().collect();
        self.calls += 1;
        match argv[0].to_ascii_lowercase().as_slice() {
            b"get" => match self.data.get(argv[1]) {
                Some(v) => reply.bulk(v),
                None => reply.null(),
            },
            b"set" => {
                self.data.insert(argv[1].to_vec(), argv[2].to_vec());
                reply.ok();
            }
            b"ping" => reply.simple("PONG"),
            b"count" => reply.int(argv.len() as i64 - 1),
            b"hello3" => {
                reply.map(1);
                reply.bulk(b"k");
                reply.double(1.5);
            }
            _ => reply.error("ERR Unknown command called from script"),
        }
    }
    fn acl_check(&mut self, _: Args<'_>) -> Option<bool> {
        Some(true)
    }
    fn poll(&mut self) -> Option<String> {
        None
    }
    fn log(&mut self, level: LogLevel, msg: &[u8]) {
        self.logs.push((level, msg.to_vec()));
    }
    fn set_repl(&mut self, _: u8) {}
}

fn eval(vm: &mut Vm, host: &mut Fake, code: &str, keys: &[&str], args: &[&str]) -> String {
    let sha = crate::sha1_hex(code.as_bytes());
    let f = match vm.script(&sha, code.as_bytes()) {
        Ok(f) => f,
        Err(e) => return format!("-ERR {e}"),
    };
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let args: Vec<&[u8]> = args.iter().map(|k| k.as_bytes()).collect();
    let mut out = ReplyBuf::new();
    let _: Outcome = vm.eval(&f, "f_test", Call { keys: &keys, args: &args }, host, &mut out);
    String::from_utf8_lossy(out.as_bytes()).into_owned()
}

#[test]
fn scripts_call_the_host_and_return_its_replies() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    assert_eq!(eval(&mut vm, &mut h, "return redis.call('set', KEYS[1], ARGV[1])", &["k"], &["v"]), "+OK\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return redis.call('get', KEYS[1])", &["k"], &[]), "$1\r\nv\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return redis.call('get', 'nope')", &[], &[]), "$-1\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return server.call('ping')", &[], &[]), "+PONG\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return {1, 'two', {3}}", &[], &[]), "*3\r\n:1\r\n$3\r\ntwo\r\n*1\r\n:3\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return redis.call('set', 'n', 12.0)", &[], &[]), "+OK\r\n");
    assert_eq!(h.data[&b"n"[..]], b"12");
    assert_eq!(eval(&mut vm, &mut h, "return redis.call('set', 'n', 1.5)", &[], &[]), "+OK\r\n");
    assert_eq!(h.data[&b"n"[..]], b"1.5");
}

#[test]
fn a_call_takes_as_many_arguments_as_the_stack_holds_and_numbers_as_valkey_prints_them() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    // Valkey's "Script check unpack with massive arguments": the 7999 arguments fill the
    // stack, and the reply still has room.
    let code = "local a = {} for i=1,7999 do a[i] = 1 end return redis.call('count', unpack(a))";
    assert_eq!(eval(&mut vm, &mut h, code, &[], &[]), ":7999\r\n");
    // double2ll: an integer within half the range of a long long, else the shortest form.
    for (n, text) in [
        ("-0.0", "0"),
        ("2^53", "9007199254740992"),
        ("2^62", "4611686018427387904"),
        ("-2^62", "-4611686018427387904"),
        ("2^63", "9223372036854776000"),
        ("1e22", "1e+22"),
        ("0.1", "0.1"),
        ("1/0", "inf"),
    ] {
        let code = format!("return redis.call('set', 'n', {n})");
        assert_eq!(eval(&mut vm, &mut h, &code, &[], &[]), "+OK\r\n", "{n}");
        assert_eq!(String::from_utf8_lossy(&h.data[&b"n"[..]]), text, "{n}");
    }
    for bad in ["nil", "true", "{}", "redis.call"] {
        let code = format!("return redis.pcall('set', 'n', {bad})");
        assert_eq!(eval(&mut vm, &mut h, &code, &[], &[]), "-ERR Command arguments must be strings or integers\r\n");
    }
    assert_eq!(
        eval(&mut vm, &mut h, "return redis.pcall()", &[], &[]),
        "-ERR Please specify at least one argument for this call\r\n"
    );
}

#[test]
fn a_call_from_a_finalizer_while_a_reply_is_pushed_gets_its_own_buffer() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    eval(&mut vm, &mut h, "return redis.call('set', 'big', string.rep('x', 100000))", &[], &[]);
    // Proxies whose finalizers call the host run whenever the collector gets to them: during
    // the pushes of the replies below among other times. Every reply must still be whole.
    let code = "
        for i = 1, 200 do
          local p = newproxy(true)
          getmetatable(p).__gc = function() redis.pcall('set', 'gc', 'y') end
        end
        local n = 0
        for i = 1, 50 do n = n + #redis.call('get', 'big') end
        collectgarbage()
        return n";
    assert_eq!(eval(&mut vm, &mut h, code, &[], &[]), ":5000000\r\n");
    assert_eq!(h.data[&b"gc"[..]], b"y");
}

#[test]
fn command_errors_raise_or_come_back_as_tables() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let e = eval(&mut vm, &mut h, "return redis.call('nosuch')", &[], &[]);
    assert_eq!(e, "-ERR Unknown command called from script script: f_test, on @user_script:1.\r\n");
    let e = eval(&mut vm, &mut h, "local r = redis.pcall('nosuch') return r['err']", &[], &[]);
    assert_eq!(e, "$38\r\nERR Unknown command called from script\r\n");
    let e = eval(&mut vm, &mut h, "return redis.pcall('nosuch')", &[], &[]);
    assert_eq!(e, "-ERR Unknown command called from script\r\n");
    let e = eval(&mut vm, &mut h, "local ok, e = pcall(redis.call, 'nosuch') return e", &[], &[]);
    assert_eq!(e, "$38\r\nERR Unknown command called from script\r\n");
    let e = eval(&mut vm, &mut h, "return redis.call()", &[], &[]);
    assert!(e.starts_with("-ERR Please specify at least one argument for this call script:"), "{e}");
    let e = eval(&mut vm, &mut h, "return redis.call('get', {})", &[], &[]);
    assert!(e.starts_with("-ERR Command arguments must be strings or integers"), "{e}");
    let e = eval(&mut vm, &mut h, "error('boom')", &[], &[]);
    assert_eq!(e, "-ERR user_script:1: boom script: f_test, on @user_script:1.\r\n");
    let e = eval(&mut vm, &mut h, "return redis.error_reply('MY bad')", &[], &[]);
    assert_eq!(e, "-MY bad\r\n");
    let e = eval(&mut vm, &mut h, "return redis.error_reply('plain')", &[], &[]);
    assert_eq!(e, "-ERR plain\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return redis.status_reply('FINE')", &[], &[]), "+FINE\r\n");
    let e = eval(&mut vm, &mut h, "return {err='x'}", &[], &[]);
    assert_eq!(e, "-x\r\n");
}

#[test]
fn the_sandbox_holds() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    for (code, want) in [
        ("return a", "Script attempted to access nonexistent global variable 'a'"),
        ("a = 10", "Attempt to modify a readonly table"),
        ("setmetatable(_G, {})", "Attempt to modify a readonly table"),
        ("local g = getmetatable(_G) g.__index = {}", "Attempt to modify a readonly table"),
        ("redis = function() return 1 end", "Attempt to modify a readonly table"),
        ("_G = {}", "Attempt to modify a readonly table"),
        ("redis.call = function() return 1 end", "Attempt to modify a readonly table"),
        ("rawset(redis, 'call', 1)", "Attempt to modify a readonly table"),
        ("table.insert(redis, 1)", "Attempt to modify a readonly table"),
        ("string.upper = nil", "Attempt to modify a readonly table"),
        ("getmetatable('').__index = {}", "Attempt to modify a readonly table"),
        ("setfenv(0, {})", "Attempt to modify a readonly table"),
        ("loadfile('x')", "Script attempted to access nonexistent global variable 'loadfile'"),
        ("dofile('x')", "Script attempted to access nonexistent global variable 'dofile'"),
        ("print('x')", "Script attempted to access nonexistent global variable 'print'"),
        ("os.execute('ls')", "attempt to call field 'execute'"),
        ("return loadstring(string.dump(function() return 1 end))()", "attempt to call a nil value"),
        ("return debug.getinfo(1)", "Script attempted to access nonexistent global variable 'debug'"),
        ("loadstring('x = 1')()", "Attempt to modify a readonly table"),
        ("cjson.encode = function() return 1 end", "Attempt to modify a readonly table"),
        ("cmsgpack.pack = function() return 1 end", "Attempt to modify a readonly table"),
        ("bit.lshift = function() return 1 end", "Attempt to modify a readonly table"),
        ("struct.pack = nil", "Attempt to modify a readonly table"),
    ] {
        let e = eval(&mut vm, &mut h, code, &[], &[]);
        assert!(e.starts_with("-ERR ") && e.contains(want), "{code}: {e}");
    }
    // Whatever a script tried, the API is still whole.
    assert_eq!(eval(&mut vm, &mut h, "return redis.call('ping')", &[], &[]), "+PONG\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return ('abc'):upper()", &[], &[]), "$3\r\nABC\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return os.clock() >= 0", &[], &[]), ":1\r\n");
    // Library tables list their contents through pairs, as Valkey's do.
    let r = eval(&mut vm, &mut h, "local n = {} for k in pairs(os) do n[#n+1] = k end return n", &[], &[]);
    assert_eq!(r, "*1\r\n$5\r\nclock\r\n");
    let r = eval(&mut vm, &mut h, "local n = 0 for k, v in pairs(redis) do n = n + 1 end return n > 10", &[], &[]);
    assert_eq!(r, ":1\r\n");
    // KEYS and ARGV are per run, and local state does not survive a run.
    assert_eq!(eval(&mut vm, &mut h, "return #KEYS + #ARGV", &["a", "b"], &["c"]), ":3\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return #KEYS", &[], &[]), ":0\r\n");
}

/// The ways around a read-only proxy to the table behind it: its metatable, the state pairs and
/// ipairs return, the environment of a built-in function. Each must fail or find nothing to
/// write, and no later script may see a change.
#[test]
fn the_tables_behind_the_read_only_globals_cannot_be_reached() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let evil = "function() return 'pwned' end";
    for trick in [
        format!("getmetatable(redis).__index.call = {evil}"),
        format!("rawset(getmetatable(redis).__index, 'call', {evil})"),
        format!("getmetatable(_G).__index.redis = {{call = {evil}}}"),
        format!("local _, t = pairs(redis) t.call = {evil}"),
        format!("local _, t = ipairs(redis) t.call = {evil}"),
        format!("local _, t = pairs(_G) t.redis = {{call = {evil}}}"),
        format!("getfenv(pairs).redis = {{call = {evil}}}"),
        format!("getfenv(redis.status_reply).redis = {{call = {evil}}}"),
        format!("getfenv(cjson.encode).redis = {{call = {evil}}}"),
        format!("getfenv(redis.call).redis = {{call = {evil}}}"),
        format!("setfenv(redis.status_reply, {{select = {evil}}})"),
        "setfenv(pairs, {})".to_string(),
    ] {
        let _ = eval(&mut vm, &mut h, &trick, &[], &[]);
        assert_eq!(eval(&mut vm, &mut h, "return redis.call('ping')", &[], &[]), "+PONG\r\n", "after {trick}");
        assert_eq!(eval(&mut vm, &mut h, "return redis.status_reply('x')", &[], &[]), "+x\r\n", "after {trick}");
        let r = eval(&mut vm, &mut h, "local n = 0 for k in pairs(redis) do n = n + 1 end return n", &[], &[]);
        assert!(r.starts_with(':') && r != ":0\r\n", "after {trick}: {r}");
    }
    // What the metatables show: _G's reports a missing global, as Valkey's does; the others
    // show nothing, and none can be written.
    let r = eval(&mut vm, &mut h, "return type(getmetatable(_G).__index)", &[], &[]);
    assert_eq!(r, "$8\r\nfunction\r\n");
    let r = eval(&mut vm, &mut h, "return getmetatable(_G).__index(nil, 'zz')", &[], &[]);
    assert!(r.contains("Script attempted to access nonexistent global variable 'zz'"), "{r}");
    assert_eq!(eval(&mut vm, &mut h, "return getmetatable(redis).__index == nil", &[], &[]), ":1\r\n");
    let r = eval(&mut vm, &mut h, "getmetatable(redis).x = 1", &[], &[]);
    assert!(r.contains("Attempt to modify a readonly table"), "{r}");
    let r = eval(&mut vm, &mut h, "rawset(getmetatable(cjson), 'x', 1)", &[], &[]);
    assert!(r.contains("Attempt to modify a readonly table"), "{r}");
    // Iterating a library still lists it, with ipairs and next as well as pairs.
    let r = eval(&mut vm, &mut h, "local n = 0 for k in pairs(_G) do n = n + 1 end return n > 10", &[], &[]);
    assert_eq!(r, ":1\r\n");
    let r = eval(&mut vm, &mut h, "return next(os)", &[], &[]);
    assert_eq!(r, "$5\r\nclock\r\n");
    let r = eval(&mut vm, &mut h, "local n = 0 for i in ipairs(redis) do n = n + 1 end return n", &[], &[]);
    assert_eq!(r, ":0\r\n");
    let r = eval(&mut vm, &mut h, "local n = 0 for i, v in ipairs({5, 6, 7}) do n = n + v end return n", &[], &[]);
    assert_eq!(r, ":18\r\n");
    // A script's own functions keep their environment to change.
    let r = eval(&mut vm, &mut h, "local function f() return x end setfenv(f, {x = 3}) return f()", &[], &[]);
    assert_eq!(r, ":3\r\n");
    let r = eval(&mut vm, &mut h, "return getfenv(1) == _G and getfenv(0) == _G and getfenv(pairs) == _G", &[], &[]);
    assert_eq!(r, ":1\r\n");
}

#[test]
fn resp3_and_api_helpers() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let r = eval(
        &mut vm,
        &mut h,
        "redis.setresp(3) local m = redis.call('hello3') return m['map']['k']['double']",
        &[],
        &[],
    );
    assert_eq!(r, ":1\r\n");
    let r = eval(&mut vm, &mut h, "return redis.setresp(4)", &[], &[]);
    assert!(r.contains("RESP version must be 2 or 3."), "{r}");
    assert_eq!(
        eval(&mut vm, &mut h, "return redis.sha1hex('')", &[], &[]),
        "$40\r\nda39a3ee5e6b4b0d3255bfef95601890afd80709\r\n"
    );
    eval(&mut vm, &mut h, "redis.log(redis.LOG_WARNING, 'hello', 'world', 3)", &[], &[]);
    assert_eq!(h.logs, vec![(LogLevel::Warning, b"hello world 3".to_vec())]);
    let r = eval(&mut vm, &mut h, "redis.log(9, 'x')", &[], &[]);
    assert!(r.contains("Invalid log level."), "{r}");
    assert_eq!(eval(&mut vm, &mut h, "return redis.REDIS_VERSION", &[], &[]), "$5\r\n8.0.1\r\n");
    let seeded = "math.randomseed(ARGV[1]) return tostring(math.random())";
    let a = eval(&mut vm, &mut h, seeded, &[], &["10"]);
    assert_eq!(a, eval(&mut vm, &mut h, seeded, &[], &["10"]));
    assert_ne!(a, eval(&mut vm, &mut h, seeded, &[], &["20"]));
    let r = eval(&mut vm, &mut h, "return math.random(1, 6) <= 6", &[], &[]);
    assert_eq!(r, ":1\r\n");
}

#[test]
fn compile_errors_say_so() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let e = eval(&mut vm, &mut h, "return +", &[], &[]);
    assert!(e.starts_with("-ERR Error compiling script (new function): user_script:1:"), "{e}");
    assert_eq!(h.calls, 0);
}

#[test]
fn the_libraries_are_there() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    assert_eq!(eval(&mut vm, &mut h, "return cjson.encode({a=1})", &[], &[]), "$7\r\n{\"a\":1}\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return cjson.decode('[1,2]')[2]", &[], &[]), ":2\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return bit.tohex(65535, -2147483648)", &[], &[]), "$8\r\n0000FFFF\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return cmsgpack.unpack(cmsgpack.pack({1,2,3}))[3]", &[], &[]), ":3\r\n");
    assert_eq!(eval(&mut vm, &mut h, "return struct.unpack('>I2', struct.pack('>I2', 258))", &[], &[]), ":258\r\n");
    let e = eval(&mut vm, &mut h, "return cjson.decode('x')", &[], &[]);
    assert!(e.starts_with("-ERR Expected value but found invalid token at character 1"), "{e}");
}

#[test]
fn many_results_do_not_overflow_the_stack() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let r = eval(&mut vm, &mut h, "local t = {pcall(string.byte, string.rep('a', 200), 1, 200)} return #t", &[], &[]);
    assert_eq!(r, ":201\r\n");
    let r = eval(&mut vm, &mut h, "return string.byte(string.rep('a', 200), 1, 200)", &[], &[]);
    assert_eq!(r, ":97\r\n");
    let r = eval(
        &mut vm,
        &mut h,
        "local t = {xpcall(function() return string.byte(string.rep('a', 200), 1, 200) end, tostring)} return #t",
        &[],
        &[],
    );
    assert_eq!(r, ":201\r\n");
    let r = eval(&mut vm, &mut h, "local ok, e = pcall(error, 'x', 0) return e", &[], &[]);
    assert_eq!(r, "$1\r\nx\r\n");
}

/// A debugging client that sends its commands one per read, as a person typing does, and
/// keeps what the debugger sent back as the arrays of lines it reads.
struct Typist {
    commands: std::collections::VecDeque<Vec<u8>>,
    seen: std::sync::Arc<parking_lot::Mutex<Vec<Vec<String>>>>,
}

impl crate::ldb::DebugIo for Typist {
    fn send(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        let text = String::from_utf8_lossy(bytes).into_owned();
        let mut lines = text.split("\r\n");
        let n: usize = lines.next().unwrap().trim_start_matches('*').parse().unwrap();
        let entries: Vec<String> = lines.take(n).map(|l| l.trim_start_matches('+').to_string()).collect();
        self.seen.lock().push(entries);
        Ok(())
    }
    fn recv(&mut self, buf: &mut Vec<u8>) -> std::io::Result<usize> {
        match self.commands.pop_front() {
            Some(c) => {
                buf.extend_from_slice(&c);
                Ok(c.len())
            }
            None => Ok(0),
        }
    }
    fn into_any(self: Box<Self>) -> Box<dyn std::any::Any> {
        self
    }
}

fn command(words: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", words.len()).into_bytes();
    for w in words {
        out.extend_from_slice(format!("${}\r\n{w}\r\n", w.len()).as_bytes());
    }
    out
}

/// Runs `code` under the debugger with `typed` as the client's commands; returns the
/// script's reply and every array of lines the debugger sent.
fn debug(code: &str, keys: &[&str], typed: &[&[&str]]) -> (String, Vec<Vec<String>>) {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let io = Typist { commands: typed.iter().map(|w| command(w)).collect(), seen: seen.clone() };
    let session = crate::ldb::Session::new(Box::new(io), code.as_bytes(), std::time::Duration::ZERO, Vec::new());
    let sha = crate::sha1_hex(code.as_bytes());
    let f = vm.script(&sha, code.as_bytes()).unwrap();
    let keys: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
    let mut out = ReplyBuf::new();
    let (_, _session) =
        vm.eval_debug(&f, "f_test", Call { keys: &keys, args: &[] }, &mut h, &mut out, Box::new(session));
    // The VM runs plain scripts as before afterwards.
    assert_eq!(eval(&mut vm, &mut h, "return 1", &[], &[]), ":1\r\n");
    let seen = seen.lock().clone();
    (String::from_utf8_lossy(out.as_bytes()).into_owned(), seen)
}

#[test]
fn the_debugger_steps_prints_and_calls_commands() {
    let code = "local a = 1\nlocal t = {1, 'x', k = true}\nredis.call('set', KEYS[1], 'v')\nreturn a + 1";
    let (reply, seen) = debug(
        code,
        &["key"],
        &[
            &["s"],
            &["p"],
            &["s"],
            &["p", "t"],
            &["p", "KEYS"],
            &["r", "get", "key"],
            &["e", "1 + 9"],
            &["e", "a"],
            &["c"],
        ],
    );
    assert_eq!(reply, ":2\r\n");
    assert_eq!(seen[0], ["* Stopped at 1, stop reason = step over", "-> 1   local a = 1"]);
    assert_eq!(seen[1][0], "* Stopped at 2, stop reason = step over");
    assert_eq!(seen[2], ["<value> a = 1"]);
    assert_eq!(seen[3][0], "* Stopped at 3, stop reason = step over");
    assert_eq!(seen[4], ["<value> {1; \"x\"; [\"k\"]=true}".replace("{1; \"x\"; ", "{[1]=1; [2]=\"x\"; ")]);
    assert_eq!(seen[5], ["<value> {\"key\"}"]);
    assert_eq!(seen[6], ["<command> get key", "<reply> NULL"]);
    assert_eq!(seen[7], ["<retval> 10"]);
    // The code runs in a frame of its own: the script's locals are not there.
    assert_eq!(seen[8], ["<error> ldb_eval:1: Script attempted to access nonexistent global variable 'a'"]);
    // Continuing logs nothing more until the end: the script's own calls are not logged
    // when not stepping.
    assert_eq!(seen.last().unwrap(), &["<endsession>"]);
    assert_eq!(seen.len(), 10);
}

#[test]
fn breakpoints_lists_and_unknown_commands() {
    let code = "local a = 1\nlocal b = 2\nlocal c = 3\nreturn c";
    let (reply, seen) = debug(
        code,
        &[],
        &[&["b", "3"], &["b"], &["l", "2", "0"], &["nope"], &["hello\0world"], &["c"], &["w"], &["c"]],
    );
    assert_eq!(reply, ":3\r\n");
    assert_eq!(seen[1], ["   2   local b = 2", "  #3   local c = 3", "   4   return c"]);
    assert_eq!(seen[2], ["1 breakpoints set:", "  #3   local c = 3"]);
    assert_eq!(seen[3], ["   2   local b = 2"]);
    assert_eq!(seen[4], ["<error> Unknown Lua debugger command or wrong number of arguments."]);
    assert_eq!(seen[5], seen[4]);
    assert_eq!(seen[6], ["* Stopped at 3, stop reason = break point", "->#3   local c = 3"]);
    assert_eq!(seen[7].len(), 4);
    assert_eq!(seen[7][2], "->#3   local c = 3");
}

#[test]
fn abort_breakpoint_and_a_client_that_leaves() {
    let (reply, _) = debug("local a = 1\nreturn a", &[], &[&["a"]]);
    assert!(reply.starts_with("-ERR script aborted for user request"), "{reply}");
    let code = "redis.debug('x', 1, {2})\nredis.breakpoint()\nlocal z = 5\nreturn z";
    let (reply, seen) = debug(code, &[], &[&["c"], &["c"]]);
    assert_eq!(reply, ":5\r\n");
    assert_eq!(
        seen[1],
        [
            "<debug> line 1: \"x\", 1, {2}",
            "* Stopped at 3, stop reason = redis.breakpoint() called",
            "-> 3   local z = 5"
        ]
    );
    // Nobody left to answer: the script runs to its end.
    let (reply, seen) = debug("local a = 1\nreturn a", &[], &[]);
    assert_eq!(reply, ":1\r\n");
    assert_eq!(seen.last().unwrap(), &["<endsession>"]);
}

#[test]
fn a_malformed_debugger_command_ends_the_script() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let seen = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
    let io = Typist { commands: [b"garbage".to_vec()].into(), seen };
    let code = "return 1";
    let session = crate::ldb::Session::new(Box::new(io), code.as_bytes(), std::time::Duration::ZERO, Vec::new());
    let f = vm.script(&crate::sha1_hex(code.as_bytes()), code.as_bytes()).unwrap();
    let mut out = ReplyBuf::new();
    let _ = vm.eval_debug(&f, "f_test", Call { keys: &[], args: &[] }, &mut h, &mut out, Box::new(session));
    assert!(String::from_utf8_lossy(out.as_bytes()).starts_with("-ERR protocol error"));
}

/// Valkey's "EVAL does not leak in the Lua stack": 10,000 runs of a short script, by EVAL and
/// by FCALL, leave the heap within a collection's slack of its live size (Valkey's test wants
/// `used_memory_lua` under 100 KB), where Lua's own pacing let it reach 2.5 times that.
#[test]
fn many_short_runs_leave_the_heap_near_its_live_size() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let code = "return redis.call('count', KEYS[1], ARGV[1])";
    assert_eq!(eval(&mut vm, &mut h, code, &["x"], &["1"]), ":2\r\n");
    let lib = b"#!lua name=leak\nserver.register_function('f', function(keys, args) return server.call('count', keys[1], args[1]) end)";
    let md = crate::functions::metadata(lib).unwrap();
    let fns = vm.load_library(lib, &md, std::time::Duration::from_secs(5)).unwrap();
    let f = fns.into_iter().next().unwrap().1;
    let start = vm.heap();
    let mut most = 0;
    for i in 0..10_000 {
        if i % 2 == 0 {
            assert_eq!(eval(&mut vm, &mut h, code, &["x"], &["1"]), ":2\r\n");
        } else {
            let mut out = ReplyBuf::new();
            let _ = vm.fcall(&f, "f", Call { keys: &[b"x"], args: &[b"1"] }, &mut h, &mut out);
            assert_eq!(out.as_bytes(), b":2\r\n");
        }
        most = most.max(vm.heap());
    }
    // The slack is a quarter of the live size, at least 16 KiB; one run adds a few hundred
    // bytes.
    assert!(most <= start + start / 4 + 4096, "heap reached {most} from {start}");
}

/// A library function gets its keys and arguments as its parameters only: the globals an EVAL
/// set are gone, as in Valkey, whose functions have a Lua state of their own.
#[test]
fn a_function_does_not_see_the_globals_an_eval_set() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let lib = b"#!lua name=g\nserver.register_function('f', function(keys, args) return {keys[1], KEYS} end)";
    let md = crate::functions::metadata(lib).unwrap();
    let f = vm.load_library(lib, &md, std::time::Duration::from_secs(5)).unwrap().into_iter().next().unwrap().1;
    for _ in 0..3 {
        assert_eq!(eval(&mut vm, &mut h, "return KEYS[1]", &["from-eval"], &[]), "$9\r\nfrom-eval\r\n");
        let mut out = ReplyBuf::new();
        let _ = vm.fcall(&f, "f", Call { keys: &[b"mine"], args: &[] }, &mut h, &mut out);
        let text = String::from_utf8_lossy(out.as_bytes()).into_owned();
        assert!(text.contains("Script attempted to access nonexistent global variable 'KEYS'"), "{text}");
    }
}

/// KEYS and ARGV are refilled for the next run, not replaced: whatever a run did to them, the
/// next one sees exactly its own keys and arguments.
#[test]
fn each_run_sees_only_its_own_keys_and_arguments() {
    let (mut vm, mut h) = (Vm::new().unwrap(), Fake::default());
    let count = "local n = 0 for k, v in pairs(KEYS) do n = n + 1 end for k, v in pairs(ARGV) do n = n + 1 end \
                 return {n, #KEYS, #ARGV, tostring(getmetatable(KEYS)), KEYS[1] or 'none', ARGV[2] or 'none'}";
    let see = |vm: &mut Vm, h: &mut Fake, keys: &[&str], args: &[&str]| eval(vm, h, count, keys, args);
    assert_eq!(
        see(&mut vm, &mut h, &["a", "b"], &["c"]),
        "*6\r\n:3\r\n:2\r\n:1\r\n$3\r\nnil\r\n$1\r\na\r\n$4\r\nnone\r\n"
    );
    for tamper in [
        "KEYS.extra = 1 ARGV[7] = 2",
        "KEYS[1] = nil table.insert(ARGV, 'z')",
        "setmetatable(KEYS, {__index = function() return 'meta' end})",
        "for i = 1, 100 do KEYS[i] = i end",
        "KEYS[1] = 'changed' ARGV[1] = 'changed'",
    ] {
        let _ = eval(&mut vm, &mut h, tamper, &["k"], &["v"]);
        assert_eq!(
            see(&mut vm, &mut h, &["p"], &["q", "r"]),
            "*6\r\n:3\r\n:1\r\n:2\r\n$3\r\nnil\r\n$1\r\np\r\n$1\r\nr\r\n",
            "after {tamper}"
        );
        assert_eq!(
            see(&mut vm, &mut h, &[], &[]),
            "*6\r\n:0\r\n:0\r\n:0\r\n$3\r\nnil\r\n$4\r\nnone\r\n$4\r\nnone\r\n",
            "after {tamper}"
        );
    }
    // A run that grows KEYS and empties it again leaves the table small in entries and large
    // in size; within 64 runs it is replaced, and the memory goes with it.
    let fresh = vm.live();
    let grow = "for i = 1, 100000 do KEYS[i] = i end for i = 1, 100000 do KEYS[i] = nil end return #KEYS";
    assert_eq!(eval(&mut vm, &mut h, grow, &["k"], &[]), ":0\r\n");
    assert!(vm.live() > fresh + 1_000_000);
    for _ in 0..64 {
        assert!(see(&mut vm, &mut h, &["p"], &["q", "r"]).starts_with("*6\r\n:3\r\n"));
    }
    assert!(vm.live() < fresh + 16_384, "{} from {fresh}", vm.live());
    let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    assert!(see(&mut vm, &mut h, &many, &many).starts_with("*6\r\n:80\r\n:40\r\n:40\r\n"));
    assert!(see(&mut vm, &mut h, &["p"], &[]).starts_with("*6\r\n:1\r\n:1\r\n:0\r\n"));
}
