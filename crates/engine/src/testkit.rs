//! A tiny harness to run engine commands in unit tests, the way the dispatcher does:
//! plan the locks, lock, build a context, call the handler, return the raw reply.

use hotkv_protocol::{Args, Protocol, ReplyBuf};

use std::sync::Mutex;

use crate::cmd::{self, Spec};
use crate::ctx::{Ctx, EngineConfig, Events, LocalStats};
use crate::error::CommandError;
use crate::keyspace::Keyspace;
use crate::plan::{KeyHint, Plan};

/// An events sink that records keyspace notifications, so tests can check that commands
/// send Valkey's events.
#[derive(Default)]
pub struct Recorder {
    log: Mutex<Vec<String>>,
}

impl Recorder {
    /// The notifications since the last call, as `class:event:key@db`, or `*changed@db` for
    /// [`Events::db_changed`].
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.log.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn push(&self, line: String) {
        self.log.lock().unwrap_or_else(|e| e.into_inner()).push(line);
    }
}

impl Events for Recorder {
    fn notify(&self, class: char, event: &str, key: &[u8], db: usize) {
        self.push(format!("{class}:{event}:{}@{db}", String::from_utf8_lossy(key)));
    }

    fn db_changed(&self, db: usize) {
        self.push(format!("*changed@{db}"));
    }
}

/// A keyspace, a clock and a selected database.
pub struct TestKit {
    /// The keyspace.
    pub ks: Keyspace,
    /// Settings passed to handlers.
    pub cfg: EngineConfig,
    /// Counters accumulated by commands.
    pub stats: LocalStats,
    /// The current time in unix milliseconds.
    pub now_ms: i64,
    /// The selected database.
    pub db: usize,
    /// Reply protocol.
    pub proto: Protocol,
    /// Keyspace notifications sent by commands.
    pub events: Recorder,
    /// The client's `CLIENT NO-TOUCH` flag.
    pub no_touch: bool,
    /// How blocking commands behave without data.
    pub block_mode: crate::ctx::BlockMode,
    /// What the last command asked to block on, if it asked.
    pub last_block: Option<crate::ctx::BlockRequest>,
    /// Handed to the next command as the outcome of its request to another node.
    pub resume: Option<crate::remote::RemoteOutcome>,
    /// What the last command asked of another node, if it asked.
    pub last_remote: Option<crate::remote::RemoteRequest>,
    /// Skip the commands' lock-free step, to test a handler reached without it.
    pub skip_prepare: bool,
    /// Record each command's effects for the write stream into [`TestKit::stream`].
    pub record: bool,
    /// The write stream's sink wired into `ks` by [`TestKit::default`].
    pub sink: std::sync::Arc<StreamRecorder>,
    /// The recorded write stream: one line per command, `db: arg arg ...`.
    pub stream: Vec<String>,
    /// How many times a command started over to take undeclared locks up front.
    pub restarts: usize,
}

/// A write-stream sink that keeps what it is given, as `db: arg arg ...` lines.
#[derive(Default)]
pub struct StreamRecorder {
    on: std::sync::atomic::AtomicBool,
    lines: Mutex<Vec<String>>,
}

impl StreamRecorder {
    /// Turns recording on or off.
    pub fn set_active(&self, on: bool) {
        self.on.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// The lines recorded since the last call.
    pub fn take(&self) -> Vec<String> {
        std::mem::take(&mut *self.lines.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

impl crate::propagate::WriteSink for StreamRecorder {
    fn active(&self) -> bool {
        self.on.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn append(&self, effects: &crate::propagate::Effects) {
        let mut lines = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        for (db, cmd) in effects.iter() {
            lines.push(format!("{db}: {}", stream_line(cmd)));
        }
    }
}

impl Default for TestKit {
    fn default() -> Self {
        let ks = Keyspace::new(16);
        let sink = std::sync::Arc::new(StreamRecorder::default());
        ks.set_sink(sink.clone());
        TestKit {
            sink,
            ks,
            cfg: EngineConfig::default(),
            stats: LocalStats::default(),
            now_ms: 1_700_000_000_000,
            db: 0,
            proto: Protocol::Resp2,
            events: Recorder::default(),
            no_touch: false,
            block_mode: crate::ctx::BlockMode::Normal,
            last_block: None,
            resume: None,
            last_remote: None,
            skip_prepare: false,
            record: false,
            stream: Vec::new(),
            restarts: 0,
        }
    }
}

impl TestKit {
    /// Runs one command and returns its reply as text (RESP, with `\r\n`). Arity is checked
    /// like the dispatcher does.
    pub fn run(&mut self, argv: &[&str]) -> String {
        let bytes: Vec<Vec<u8>> = argv.iter().map(|a| a.as_bytes().to_vec()).collect();
        self.run_bytes(&bytes)
    }

    /// Runs a command that may ask another node for something: its reply, and its request.
    pub fn run_remote(&mut self, argv: &[&str]) -> (String, Option<crate::remote::RemoteRequest>) {
        let reply = self.run(argv);
        (reply, self.last_remote.take())
    }

    /// Runs a command's second turn with the outcome of its request to another node.
    pub fn resume(
        &mut self,
        argv: &[&str],
        outcome: crate::remote::RemoteOutcome,
    ) -> (String, Option<crate::remote::RemoteRequest>) {
        self.resume = Some(outcome);
        self.run_remote(argv)
    }

    /// [`TestKit::run`] with binary arguments.
    pub fn run_bytes(&mut self, argv: &[Vec<u8>]) -> String {
        String::from_utf8_lossy(&self.run_raw(argv)).into_owned()
    }

    /// [`TestKit::run_bytes`] returning the reply's exact bytes (binary payloads).
    pub fn run_raw(&mut self, argv: &[Vec<u8>]) -> Vec<u8> {
        with_args(argv, |args| self.run_args(*args))
    }

    fn run_args(&mut self, args: Args<'_>) -> Vec<u8> {
        let mut out = ReplyBuf::new();
        out.set_protocol(self.proto);
        let name = String::from_utf8_lossy(args.get(0)).to_ascii_lowercase();
        let Some(spec) = cmd::commands().find(|s| s.name == name) else {
            return format!("-ERR unknown command '{name}'\r\n").into_bytes();
        };
        let spec: &Spec = match spec.subcommands {
            [] => spec,
            subs => {
                let sub = String::from_utf8_lossy(args.opt(1).unwrap_or(b"")).to_ascii_lowercase();
                match subs.iter().find(|s| s.name == sub) {
                    Some(s) => s,
                    None => return format!("-ERR unknown subcommand '{sub}'\r\n").into_bytes(),
                }
            }
        };
        let argc = args.len() as i32;
        if (spec.arity > 0 && argc != spec.arity) || argc < -spec.arity {
            return format!("-ERR wrong number of arguments for '{name}' command\r\n").into_bytes();
        }
        let handler = spec.handler.as_ref().expect("leaf command has a handler");
        let mut plan = Plan::default();
        plan.compute(spec, handler.plan, &args, self.db, self.ks.databases(), &KeyHint::default());
        if plan.keys_invalid() {
            return format!("-{}\r\n", CommandError::Syntax.message()).into_bytes();
        }
        // As the dispatcher does: the lock-free step first, then the locks.
        let prepared = handler.plan.prepare().filter(|_| !self.skip_prepare).map(|f| f(&args, &self.cfg));
        // As the dispatcher: a call that meets a busy lock of a key it did not declare runs
        // again with that key's lock taken up front.
        let mut extra: Vec<crate::keyspace::LockId> = Vec::new();
        let mut prepared = prepared;
        loop {
            let mut ids: Vec<_> = plan.locks().iter().chain(&extra).copied().collect();
            ids.sort_unstable();
            ids.dedup();
            let locks = self.ks.lock(&ids);
            let mut ctx = Ctx::new(
                &self.ks,
                self.db,
                self.now_ms,
                &self.cfg,
                &mut self.stats,
                self.no_touch,
                &self.events,
                locks,
            );
            ctx.block_mode = self.block_mode;
            ctx.resume = self.resume.take();
            ctx.prepared = prepared.take();
            ctx.may_restart = true;
            self.sink.set_active(self.record);
            ctx.effects.begin(self.record);
            let dirty = ctx.stats.dirty;
            let before = out.len();
            if let Err(e) = (handler.run)(&mut ctx, args, &mut out) {
                out.truncate(before);
                out.error(&e.message());
            }
            let restart = ctx.restart.take();
            // As the dispatcher: the call's effects reach the stream before its locks go.
            if restart.is_none() {
                ctx.finish_call(self.db, &args, dirty);
            } else {
                ctx.emit();
            }
            if let Some(more) = restart {
                out.truncate(before);
                extra.extend(more);
                self.restarts += 1;
                continue;
            }
            let new_db = ctx.db;
            let block = ctx.block.take();
            self.last_remote = ctx.remote.take();
            drop(ctx);
            self.db = new_db;
            self.last_block = block;
            break;
        }
        self.stream.extend(self.sink.take());
        out.as_bytes().to_vec()
    }
}

/// A parsed reply, for tests that look inside arrays (random and scan commands).
#[derive(Debug, Clone, PartialEq)]
pub enum Resp {
    /// A simple or bulk string.
    Str(String),
    /// An error line, without the `-`.
    Err(String),
    /// An integer.
    Int(i64),
    /// A null (`$-1`, `*-1`, `_`).
    Nil,
    /// An array, set (`~`) or push; RESP3 maps (`%`) flatten into key, value, key, value.
    Array(Vec<Resp>),
}

impl Resp {
    /// Parses one complete reply; panics on malformed input (test helper).
    pub fn parse(text: &str) -> Resp {
        let mut lines = text.split("\r\n");
        let r = Resp::next(&mut lines);
        assert_eq!(lines.collect::<Vec<_>>(), [""], "one reply and nothing after it: {text:?}");
        r
    }

    /// The elements of an array reply.
    pub fn items(&self) -> &[Resp] {
        match self {
            Resp::Array(v) => v,
            other => panic!("not an array: {other:?}"),
        }
    }

    /// The text of a string reply.
    pub fn text(&self) -> &str {
        match self {
            Resp::Str(s) => s,
            other => panic!("not a string: {other:?}"),
        }
    }

    fn next<'a>(lines: &mut impl Iterator<Item = &'a str>) -> Resp {
        let line = lines.next().expect("a reply line");
        let (tag, rest) = line.split_at(1);
        let n = || rest.parse::<i64>().expect("a length");
        match tag {
            "+" => Resp::Str(rest.to_string()),
            "-" => Resp::Err(rest.to_string()),
            ":" => Resp::Int(n()),
            "_" => Resp::Nil,
            "$" if n() < 0 => Resp::Nil,
            "$" => Resp::Str(lines.next().expect("bulk bytes").to_string()),
            "*" if n() < 0 => Resp::Nil,
            "*" | "~" | ">" => Resp::Array((0..n()).map(|_| Resp::next(lines)).collect()),
            "%" => Resp::Array((0..2 * n()).map(|_| Resp::next(lines)).collect()),
            other => panic!("unexpected reply type {other:?} in {line:?}"),
        }
    }
}

/// A RESP command as written by [`crate::propagate::write_command`], as its arguments joined
/// by spaces (test output).
pub fn stream_line(cmd: &[u8]) -> String {
    let text = String::from_utf8_lossy(cmd);
    let mut lines = text.split("\r\n");
    let n: usize = lines.next().and_then(|l| l.strip_prefix('*')).and_then(|l| l.parse().ok()).unwrap_or(0);
    let mut args = Vec::with_capacity(n);
    for _ in 0..n {
        let _len = lines.next();
        args.push(lines.next().unwrap_or("").to_string());
    }
    args.join(" ")
}

/// Calls `f` with `argv` laid out as a decoded command's arguments.
pub fn with_args<A: AsRef<[u8]>, R>(argv: &[A], f: impl FnOnce(&Args<'_>) -> R) -> R {
    let mut buf = Vec::new();
    let mut spans = Vec::with_capacity(argv.len());
    for a in argv {
        let a = a.as_ref();
        spans.push((buf.len(), buf.len() + a.len()));
        buf.extend_from_slice(a);
    }
    f(&Args::from_parts(&buf, &spans))
}

/// The plan dispatch would make for the engine command `argv` in database `db` of a
/// keyspace with `databases` databases.
pub fn plan_of(argv: &[&str], db: usize, databases: usize) -> crate::plan::Plan {
    let name = argv[0].to_ascii_lowercase();
    let spec = cmd::commands().find(|s| s.name == name).expect("known command");
    let lock = spec.handler.as_ref().expect("leaf command").plan;
    let mut p = crate::plan::Plan::default();
    with_args(argv, |args| p.compute(spec, lock, args, db, databases, &crate::plan::KeyHint::default()));
    p
}

/// The RESP2 encoding of an array of bulk strings, as a test expects a reply.
pub fn arr(items: &[&str]) -> String {
    let mut s = format!("*{}\r\n", items.len());
    for i in items {
        s.push_str(&format!("${}\r\n{i}\r\n", i.len()));
    }
    s
}
