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
