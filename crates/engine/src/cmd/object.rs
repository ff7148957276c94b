//! Introspection of single keys: OBJECT (ENCODING, REFCOUNT, IDLETIME, FREQ, HELP) and
//! MEMORY USAGE / MEMORY HELP. MEMORY's server-wide subcommands (STATS, DOCTOR, PURGE,
//! MALLOC-STATS) belong to the server crate.

use hotkv_protocol::{Args, ReplyBuf, parse_i64};

use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, LookupFlags};
use crate::entry::ValueRef;
use crate::error::{CmdResult, CommandError};
use crate::object::{Object, size_class};
use crate::policy::{self, EvictionPolicy};

/// OBJECT and MEMORY, as containers of their subcommand rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::container(
        "object",
        -2,
        "generic",
        "2.2.3",
        "A container for object introspection commands.",
        OBJECT_SUBCOMMANDS,
    ),
    CommandSpec::container(
        "memory",
        -2,
        "server",
        "4.0.0",
        "A container for memory diagnostics commands.",
        MEMORY_SUBCOMMANDS,
    ),
];

static OBJECT_SUBCOMMANDS: &[Spec] = &[
    object_row("encoding", "Returns the internal encoding of an object.", "2.2.3", encoding),
    object_row("refcount", "Returns the reference count of a value of a key.", "2.2.3", refcount),
    object_row("idletime", "Returns the time since the last access to an object.", "2.2.3", idletime),
    object_row("freq", "Returns the logarithmic access frequency counter of an object.", "4.0.0", freq),
    CommandSpec::new(
        "help",
        2,
        flags::LOADING | flags::STALE,
        acl::KEYSPACE,
        &[],
        "generic",
        "6.2.0",
        "Returns helpful text about the different subcommands.",
        "O(1)",
        EngineCmd { run: object_help, plan: LockPlan::Keys },
    ),
];

static MEMORY_SUBCOMMANDS: &[Spec] = &[
    CommandSpec::new(
        "usage",
        -3,
        flags::READONLY,
        0,
        KEY_AT_2,
        "server",
        "4.0.0",
        "Estimates the memory usage of a key.",
        "O(N) where N is the number of samples.",
        EngineCmd { run: usage, plan: LockPlan::Keys },
    ),
    CommandSpec::new(
        "help",
        2,
        flags::LOADING | flags::STALE,
        0,
        &[],
        "server",
        "4.0.0",
        "Returns helpful text about the different subcommands.",
        "O(1)",
        EngineCmd { run: memory_help, plan: LockPlan::Keys },
    ),
];

const KEY_AT_2: &[KeySpec] = &[KeySpec::single(2, kf::RO)];

const fn object_row(name: &'static str, summary: &'static str, since: &'static str, run: super::EngineFn) -> Spec {
    CommandSpec::new(
        name,
        3,
        flags::READONLY,
        acl::KEYSPACE,
        KEY_AT_2,
        "generic",
        since,
        summary,
        "O(1)",
        EngineCmd { run, plan: LockPlan::Keys },
    )
    .with_tips(&["nondeterministic_output"])
}

/// OBJECT looks without counting as an access and without a keymiss event.
const INSPECT: LookupFlags = LookupFlags { no_touch: true, no_notify: true };

/// Valkey's `OBJ_SHARED_INTEGERS`: values 0..10000 are one shared object each.
const SHARED_INTEGERS: i64 = 10_000;
/// Valkey's `OBJ_ENCODING_EMBSTR_SIZE_LIMIT`.
const EMBSTR_SIZE_LIMIT: usize = 44;

/// What OBJECT ENCODING and REFCOUNT report about a value.
#[derive(Clone, Copy)]
struct Inspected {
    encoding: &'static str,
    /// An integer Valkey would store as one of its shared objects.
    shared_int: bool,
}

impl Inspected {
    fn of(v: ValueRef<'_>) -> Inspected {
        let (encoding, shared_int) = match v {
            ValueRef::Str(s) => match int_value(s) {
                Some(n) => ("int", (0..SHARED_INTEGERS).contains(&n)),
                None if s.len() <= EMBSTR_SIZE_LIMIT => ("embstr", false),
                None => ("raw", false),
            },
            // Strings grown in place are Valkey's "raw" sds strings.
            ValueRef::Obj(Object::Str(_)) => ("raw", false),
            ValueRef::Obj(Object::List(l)) => (l.encoding(), false),
            ValueRef::Obj(Object::ZSet(z)) => (z.encoding(), false),
            ValueRef::Obj(Object::Hash(h)) => (h.encoding(), false),
            ValueRef::Obj(Object::Set(s)) => (s.encoding(), false),
            ValueRef::Obj(Object::Stream(_)) => ("stream", false),
        };
        Inspected { encoding, shared_int }
    }
}

/// The value at argument 2, if any.
fn inspect(ctx: &mut Ctx<'_>, args: &Args<'_>) -> Result<Option<Inspected>, CommandError> {
    Ok(ctx.read_with(args.get(2), INSPECT)?.map(|k| Inspected::of(k.value())))
}

/// The integer an inline string would be stored as by Valkey (`tryObjectEncoding`).
fn int_value(s: &[u8]) -> Option<i64> {
    if s.len() > 20 { None } else { parse_i64(s) }
}

fn encoding(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    match inspect(ctx, &args)? {
        Some(v) => out.bulk(v.encoding.as_bytes()),
        None => out.null(),
    }
    Ok(())
}

fn refcount(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(v) = inspect(ctx, &args)? else {
        out.null();
        return Ok(());
    };
    // Small integers are one shared object in Valkey, with a pinned refcount of INT_MAX,
    // unless an LRU/LFU maxmemory policy needs each key's own access clock.
    let shared = v.shared_int && can_share_integers(ctx);
    out.int(if shared { i64::from(i32::MAX) } else { 1 });
    Ok(())
}

/// Valkey's `canUseSharedObject`.
fn can_share_integers(ctx: &Ctx<'_>) -> bool {
    let p = ctx.cfg.policy;
    let tracks_access = p.is_lfu() || matches!(p, EvictionPolicy::AllKeysLru | EvictionPolicy::VolatileLru);
    ctx.cfg.maxmemory == 0 || !tracks_access
}

fn idletime(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(lru) = access_clock(ctx, &args)? else {
        out.null();
        return Ok(());
    };
    if ctx.cfg.policy.is_lfu() {
        return Err(CommandError::err(
            "An LFU maxmemory policy is selected, idle time not tracked. Please note that when switching between \
             policies at runtime LRU and LFU data will take some time to adjust.",
        ));
    }
    out.int((policy::idle_ms(lru, ctx.now_ms) / 1000) as i64);
    Ok(())
}

fn freq(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(lru) = access_clock(ctx, &args)? else {
        out.null();
        return Ok(());
    };
    if !ctx.cfg.policy.is_lfu() {
        return Err(CommandError::err(
            "An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching \
             between policies at runtime LRU and LFU data will take some time to adjust.",
        ));
    }
    // Decayed for the time since the last access: the stored counter only changes on access.
    out.int(i64::from(policy::lfu_decayed(lru, ctx.now_ms, ctx.cfg.lfu_decay_time)));
    Ok(())
}

/// The LRU/LFU field of the key at argument 2.
fn access_clock(ctx: &mut Ctx<'_>, args: &Args<'_>) -> Result<Option<u32>, CommandError> {
    Ok(ctx.read_with(args.get(2), INSPECT)?.map(|k| k.entry().lru()))
}

fn object_help(_: &mut Ctx<'_>, _: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    help(
        out,
        "OBJECT",
        &[
            "ENCODING <key>",
            "    Return the kind of internal representation used in order to store the value",
            "    associated with a <key>.",
            "FREQ <key>",
            "    Return the access frequency index of the <key>. The returned integer is",
            "    proportional to the logarithm of the recent access frequency of the key.",
            "IDLETIME <key>",
            "    Return the idle time of the <key>, that is the approximated number of",
            "    seconds elapsed since the last access to the key.",
            "REFCOUNT <key>",
            "    Return the number of references of the value associated with the specified",
            "    <key>.",
        ],
    );
    Ok(())
}

fn memory_help(_: &mut Ctx<'_>, _: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    help(
        out,
        "MEMORY",
        &[
            "DOCTOR",
            "    Return memory problems reports.",
            "MALLOC-STATS",
            "    Return internal statistics report from the memory allocator.",
            "PURGE",
            "    Attempt to purge dirty pages for reclamation by the allocator.",
            "STATS",
            "    Return information about the memory usage of the server.",
            "USAGE <key> [SAMPLES <count>]",
            "    Return memory in bytes used by <key> and its value. Nested values are",
            "    sampled up to <count> times (default: 5, 0 means sample all).",
        ],
    );
    Ok(())
}

/// Valkey's `addReplyHelp`: a header line, the lines, and the HELP entry, as simple strings.
pub(crate) fn help(out: &mut ReplyBuf, container: &str, lines: &[&str]) {
    out.array(lines.len() + 3);
    out.simple(&format!("{container} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"));
    for line in lines {
        out.simple(line);
    }
    out.simple("HELP");
    out.simple("    Print this help.");
}

fn usage(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    // SAMPLES bounds how many elements of a collection are measured; strings have none,
    // but the option is still validated as Valkey does.
    let mut i = 3;
    while i < args.len() {
        if !args.get(i).eq_ignore_ascii_case(b"samples") || i + 1 >= args.len() {
            return Err(CommandError::Syntax);
        }
        if int_arg(args.get(i + 1))? < 0 {
            return Err(CommandError::Syntax);
        }
        i += 2;
    }
    let (db, now) = (ctx.db, ctx.now_ms);
    let key = args.get(2);
    // A peek, like Valkey's dbFind: no expiry deletion, no access, no stats. A logically
    // expired key is reported as missing all the same.
    let (table, _, hash) = ctx.table(db, key)?;
    let Some(e) = table.find(key, hash).map(|i| table.at(i)).filter(|e| e.expire().is_none_or(|w| now <= w)) else {
        out.null();
        return Ok(());
    };
    let bucket = table.overhead_bytes() / table.capacity().max(1);
    let value = match e.value() {
        ValueRef::Str(_) => 0,
        ValueRef::Obj(o) => object_usage(o),
    };
    out.int((size_class(e.alloc_size()) + value + bucket) as i64);
    Ok(())
}

/// Heap bytes of an object outside its entry (which holds the object itself), in allocator
/// size classes.
fn object_usage(o: &Object) -> usize {
    match o {
        Object::Str(v) if v.capacity() == 0 => 0,
        Object::Str(v) => size_class(v.capacity()),
        Object::List(l) => l.heap_size(),
        Object::ZSet(z) => z.heap_size(),
        // Exact in O(1) (tables keep a running total), so SAMPLES has nothing to sample.
        Object::Hash(h) => h.heap_bytes(),
        Object::Set(s) => s.heap_bytes(),
        Object::Stream(s) => s.heap_size(),
    }
}

#[cfg(test)]
mod tests {
    use crate::policy::EvictionPolicy;
    use crate::testkit::TestKit;

    #[test]
    fn encodings() {
        let mut t = TestKit::default();
        let enc = |t: &mut TestKit, k: &str| t.run(&["OBJECT", "ENCODING", k]);
        t.run(&["SET", "i", "12345"]);
        t.run(&["SET", "neg", "-9223372036854775808"]);
        t.run(&["SET", "big", "99999999999999999999"]);
        t.run(&["SET", "lead", "0123"]);
        t.run(&["SET", "e44", &"x".repeat(44)]);
        t.run(&["SET", "r45", &"x".repeat(45)]);
        assert_eq!(enc(&mut t, "i"), "$3\r\nint\r\n");
        assert_eq!(enc(&mut t, "neg"), "$3\r\nint\r\n");
        assert_eq!(enc(&mut t, "big"), "$6\r\nembstr\r\n");
        assert_eq!(enc(&mut t, "lead"), "$6\r\nembstr\r\n");
        assert_eq!(enc(&mut t, "e44"), "$6\r\nembstr\r\n");
        assert_eq!(enc(&mut t, "r45"), "$3\r\nraw\r\n");
        assert_eq!(enc(&mut t, "nope"), "$-1\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING"]), "-ERR wrong number of arguments for 'object' command\r\n");
        assert!(t.events.take().iter().all(|e| !e.starts_with("m:")), "OBJECT sends no keymiss");
    }

    #[test]
    fn refcount() {
        let mut t = TestKit::default();
        t.run(&["SET", "small", "9999"]);
        t.run(&["SET", "large", "10000"]);
        t.run(&["SET", "s", "abc"]);
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "small"]), ":2147483647\r\n");
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "large"]), ":1\r\n");
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "s"]), ":1\r\n");
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "nope"]), "$-1\r\n");
        t.cfg.maxmemory = 1 << 30;
        t.cfg.policy = EvictionPolicy::AllKeysLru;
        assert_eq!(t.run(&["OBJECT", "REFCOUNT", "small"]), ":1\r\n", "LRU needs private objects");
    }

    #[test]
    fn idletime_and_freq() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        t.now_ms += 3_500;
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "k"]), ":3\r\n");
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "k"]), ":3\r\n", "OBJECT does not touch");
        assert_eq!(t.run(&["OBJECT", "IDLETIME", "nope"]), "$-1\r\n");
        assert!(t.run(&["OBJECT", "FREQ", "k"]).starts_with("-ERR An LFU maxmemory policy is not selected, access"));
        assert_eq!(t.run(&["OBJECT", "FREQ", "nope"]), "$-1\r\n");
        t.cfg.policy = EvictionPolicy::AllKeysLfu;
        t.run(&["SET", "f", "v"]);
        assert_eq!(t.run(&["OBJECT", "FREQ", "f"]), ":5\r\n", "LFU_INIT_VAL");
        t.now_ms += 3 * 60_000;
        assert_eq!(t.run(&["OBJECT", "FREQ", "f"]), ":2\r\n", "decays one per minute");
        assert!(t.run(&["OBJECT", "IDLETIME", "f"]).starts_with("-ERR An LFU maxmemory policy is selected, idle time"));
    }

    #[test]
    fn help_and_unknown_subcommands() {
        let mut t = TestKit::default();
        let help = t.run(&["OBJECT", "HELP"]);
        assert!(help.starts_with("*15\r\n+OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:\r\n"));
        assert!(help.ends_with("+HELP\r\n+    Print this help.\r\n"));
        let help = t.run(&["MEMORY", "help"]);
        assert!(help.starts_with("*14\r\n+MEMORY <subcommand>"));
        assert!(help.contains("+USAGE <key> [SAMPLES <count>]\r\n"));
        assert!(t.run(&["OBJECT", "FOO", "k"]).starts_with("-ERR unknown subcommand"));
    }

    #[test]
    fn memory_usage() {
        let mut t = TestKit::default();
        // 16-byte key, 32-byte value: one 64-byte entry, alone in its slot (no group).
        t.run(&["SET", &"k".repeat(16), &"v".repeat(32)]);
        assert_eq!(t.run(&["MEMORY", "USAGE", &"k".repeat(16)]), ":64\r\n");
        // A second key in the same slot: both live in a 64-byte group of 7 buckets.
        t.run(&["SET", "{zz}x", "x"]);
        t.run(&["SET", "{zz}0123456789ab", &"v".repeat(32)]);
        assert_eq!(t.run(&["MEMORY", "USAGE", "{zz}0123456789ab"]), ":73\r\n");
        t.run(&["SET", "ttl", &"v".repeat(32), "EX", "100"]);
        assert_eq!(t.run(&["MEMORY", "USAGE", "ttl", "SAMPLES", "0"]), ":64\r\n", "16+8+3+32 = 59 -> 64");
        // An appended string: entry header, key and object pointer, plus the box and buffer.
        t.run(&["APPEND", "a", "hello"]);
        t.run(&["APPEND", "a", "!"]);
        let boxed = crate::object::size_class(std::mem::size_of::<crate::object::Object>());
        assert_eq!(t.run(&["MEMORY", "USAGE", "a"]), format!(":{}\r\n", 32 + boxed + 16));
        assert_eq!(t.run(&["MEMORY", "USAGE", "nope"]), "$-1\r\n");
        assert_eq!(t.run(&["MEMORY", "USAGE", "a", "SAMPLES"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["MEMORY", "USAGE", "a", "SAMPLES", "-1"]), "-ERR syntax error\r\n");
        assert_eq!(
            t.run(&["MEMORY", "USAGE", "a", "SAMPLES", "x"]),
            "-ERR value is not an integer or out of range\r\n"
        );
        assert_eq!(t.run(&["MEMORY", "USAGE", "a", "FOO", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.stats.hits + t.stats.misses, 0, "MEMORY USAGE is not a read");
        t.now_ms += 100_001;
        assert_eq!(t.run(&["MEMORY", "USAGE", "ttl"]), "$-1\r\n", "expired keys are invisible");
        assert_eq!(t.ks.db(0).len(), 5, "but not deleted by a peek");
    }
}
