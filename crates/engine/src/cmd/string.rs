//! String commands that store or fetch whole values: GET, SET and its older spellings
//! (SETNX, SETEX, PSETEX, GETSET), GETDEL, GETEX, MGET, MSET, MSETNX.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};

/// String command rows of this file.
pub static COMMANDS: &[Spec] = &[
    row("get", 2, flags::READONLY | flags::FAST, RO_ACCESS, "1.0.0", "Returns the string value of a key.", "O(1)", get),
    row(
        "set",
        -3,
        flags::WRITE | flags::DENYOOM,
        SET_KEYS,
        "1.0.0",
        "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.",
        "O(1)",
        set,
    ),
    row(
        "setnx",
        3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        OW_INSERT,
        "1.0.0",
        "Set the string value of a key only when the key doesn't exist.",
        "O(1)",
        setnx,
    ),
    row(
        "setex",
        4,
        flags::WRITE | flags::DENYOOM,
        OW_UPDATE,
        "2.0.0",
        "Sets the string value and expiration time of a key. Creates the key if it doesn't exist.",
        "O(1)",
        setex,
    ),
    row(
        "psetex",
        4,
        flags::WRITE | flags::DENYOOM,
        OW_UPDATE,
        "2.6.0",
        "Sets both string value and expiration time in milliseconds of a key. The key is created if it doesn't exist.",
        "O(1)",
        psetex,
    ),
    row(
        "getset",
        3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        RW_ACCESS_UPDATE,
        "1.0.0",
        "Returns the previous string value of a key after setting it to a new value.",
        "O(1)",
        getset,
    ),
    row(
        "getdel",
        2,
        flags::WRITE | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::DELETE)],
        "6.2.0",
        "Returns the string value of a key after deleting the key.",
        "O(1)",
        getdel,
    ),
    row(
        "getex",
        -2,
        flags::WRITE | flags::FAST,
        RW_ACCESS_UPDATE,
        "6.2.0",
        "Returns the string value of a key after setting its expiration time.",
        "O(1)",
        getex,
    ),
    row(
        "mget",
        -2,
        flags::READONLY | flags::FAST,
        &[KeySpec::range(1, -1, 1, kf::RO | kf::ACCESS)],
        "1.0.0",
        "Atomically returns the string values of one or more keys.",
        "O(N) where N is the number of keys to retrieve.",
        mget,
    )
    .with_tips(&["request_policy:multi_shard"]),
    row(
        "mset",
        -3,
        flags::WRITE | flags::DENYOOM,
        &[KeySpec::range(1, -1, 2, kf::OW | kf::UPDATE)],
        "1.0.1",
        "Atomically creates or modifies the string values of one or more keys.",
        "O(N) where N is the number of keys to set.",
        mset,
    )
    .with_tips(&["request_policy:multi_shard", "response_policy:all_succeeded"]),
    row(
        "msetnx",
        -3,
        flags::WRITE | flags::DENYOOM,
        &[KeySpec::range(1, -1, 2, kf::OW | kf::INSERT)],
        "1.0.1",
        "Atomically modifies the string values of one or more keys only when all keys don't exist.",
        "O(N) where N is the number of keys to set.",
        msetnx,
    ),
];

/// A row of a string command: every one is in the STRING ACL category and `string` group.
#[allow(clippy::too_many_arguments)]
pub(super) const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(
        name,
        arity,
        flags,
        acl::STRING,
        keys,
        "string",
        since,
        summary,
        complexity,
        EngineCmd { run, plan: LockPlan::Keys },
    )
}

/// One read-only key at argument 1 (GET, GETRANGE, ...).
pub(super) const RO_ACCESS: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];
/// One key at argument 1 that is read and updated (GETSET, GETEX, INCR, ...).
pub(super) const RW_ACCESS_UPDATE: &[KeySpec] = &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE)];
const SET_KEYS: &[KeySpec] = &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE | kf::VARIABLE_FLAGS)];
const OW_INSERT: &[KeySpec] = &[KeySpec::single(1, kf::OW | kf::INSERT)];
const OW_UPDATE: &[KeySpec] = &[KeySpec::single(1, kf::OW | kf::UPDATE)];

fn get(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    match ctx.read(args.get(1))? {
        Some(k) => out.bulk(k.str()?),
        None => out.null(),
    }
    Ok(())
}

fn set(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let opts = parse_ext(&args, Syntax::Set)?;
    let expire = match opts.expire {
        Some((unit, arg)) => Some(expire_at(unit, arg, ctx.now_ms, "set")?),
        None => None,
    };
    let verbatim = matches!(opts.expire, Some((Unit::PxAt, _)));
    let set = SetOpts { nx: opts.nx, xx: opts.xx, get: opts.get, keepttl: opts.keepttl, expire, verbatim };
    set_generic(ctx, out, args.get(1), args.get(2), set, Replies::OK)
}

fn setnx(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let opts = SetOpts { nx: true, ..SetOpts::default() };
    set_generic(ctx, out, args.get(1), args.get(2), opts, Replies::ONE_ZERO)
}

fn setex(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let expire = Some(expire_at(Unit::Ex, args.get(2), ctx.now_ms, "setex")?);
    set_generic(ctx, out, args.get(1), args.get(3), SetOpts { expire, ..SetOpts::default() }, Replies::OK)
}

fn psetex(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let expire = Some(expire_at(Unit::Px, args.get(2), ctx.now_ms, "psetex")?);
    set_generic(ctx, out, args.get(1), args.get(3), SetOpts { expire, ..SetOpts::default() }, Replies::OK)
}

fn getset(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    reply_value(ctx, key, out)?;
    ctx.set(key, NewValue::Bytes(args.get(2)), Ttl::Clear)?;
    // Valkey's getsetCommand propagates as SET.
    if ctx.propagating() {
        ctx.propagate_as(&[b"SET".as_slice(), key, args.get(2)]);
    }
    ctx.events.notify('$', "set", key, ctx.db);
    Ok(())
}

fn getdel(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let Some(k) = ctx.read(key)? else {
        out.null();
        return Ok(());
    };
    out.bulk(k.str()?);
    drop(k.delete());
    ctx.modified(key);
    ctx.events.notify('g', "del", key, ctx.db);
    Ok(())
}

fn getex(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let opts = parse_ext(&args, Syntax::Get)?;
    let key = args.get(1);
    let (now, keep_past) = (ctx.now_ms, ctx.cfg.keeps_past_ttls());
    let Some(mut k) = ctx.read(key)? else {
        out.null();
        return Ok(());
    };
    let value = k.str()?;
    // Valkey validates the expire time only once it knows the key is a string.
    let when = match opts.expire {
        Some((unit, arg)) => Some((unit, expire_at(unit, arg, now, "getex")?)),
        None => None,
    };
    out.bulk(value);
    let event = match when {
        // Only an absolute time can be in the past; a replica keeps the key for its primary
        // (Valkey's checkAlreadyExpired, as EXPIRE).
        Some((Unit::ExAt | Unit::PxAt, t)) if t <= now && !keep_past => {
            drop(k.delete());
            ctx.propagate_expired(key);
            "del"
        }
        Some((_, t)) => {
            k.set_expire(Some(t));
            if ctx.propagating() {
                let at = itoa::Buffer::new().format(t).as_bytes().to_vec();
                ctx.propagate_as(&[b"PEXPIREAT".as_slice(), key, &at]);
            }
            "expire"
        }
        None if opts.persist && k.entry().expire().is_some() => {
            k.set_expire(None);
            ctx.propagate_as(&[b"PERSIST".as_slice(), key]);
            "persist"
        }
        None => return Ok(()),
    };
    ctx.modified(key);
    ctx.events.notify('g', event, key, ctx.db);
    Ok(())
}

fn mget(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    out.array(args.len() - 1);
    for key in args.iter().skip(1) {
        match ctx.read(key)? {
            // A value of another type reads as missing here, not as WRONGTYPE.
            Some(k) => match k.str() {
                Ok(v) => out.bulk(v),
                Err(_) => out.null(),
            },
            None => out.null(),
        }
    }
    Ok(())
}

fn mset(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    mset_generic(ctx, args, false)?;
    out.ok();
    Ok(())
}

fn msetnx(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    out.int(i64::from(mset_generic(ctx, args, true)?));
    Ok(())
}

/// Sets every pair unless `nx` and one of the keys exists; returns whether it set them.
fn mset_generic(ctx: &mut Ctx<'_>, args: Args<'_>, nx: bool) -> Result<bool, CommandError> {
    if args.len().is_multiple_of(2) {
        let name = if nx { "msetnx" } else { "mset" };
        return Err(CommandError::WrongArity(name.into()));
    }
    if nx {
        for i in (1..args.len()).step_by(2) {
            if ctx.write(args.get(i))?.is_some() {
                return Ok(false);
            }
        }
    }
    for i in (1..args.len()).step_by(2) {
        let key = args.get(i);
        ctx.set(key, NewValue::Bytes(args.get(i + 1)), Ttl::Clear)?;
        ctx.events.notify('$', "set", key, ctx.db);
    }
    Ok(true)
}

/// Replies with the string at `key` or null (GET's reply), failing on another type.
fn reply_value(ctx: &mut Ctx<'_>, key: &[u8], out: &mut ReplyBuf) -> CmdResult {
    match ctx.read(key)? {
        Some(k) => out.bulk(k.str()?),
        None => out.null(),
    }
    Ok(())
}

/// What SET-like commands do, after parsing: Valkey's `setGenericCommand`.
#[derive(Debug, Clone, Copy, Default)]
struct SetOpts {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    /// Absolute expire time in unix milliseconds.
    expire: Option<i64>,
    /// The time was given as PXAT: already what a replica needs, so the command goes to the
    /// stream as the client sent it (Valkey rewrites only EX, PX and EXAT).
    verbatim: bool,
}

/// The replies for "done" and "not done because of NX/XX".
#[derive(Clone, Copy)]
struct Replies {
    int: bool,
}

impl Replies {
    /// `+OK` or null (SET, SETEX, PSETEX).
    const OK: Replies = Replies { int: false };
    /// `:1` or `:0` (SETNX).
    const ONE_ZERO: Replies = Replies { int: true };

    fn done(self, out: &mut ReplyBuf) {
        if self.int { out.int(1) } else { out.ok() }
    }

    fn aborted(self, out: &mut ReplyBuf) {
        if self.int { out.int(0) } else { out.null() }
    }
}

fn set_generic(
    ctx: &mut Ctx<'_>,
    out: &mut ReplyBuf,
    key: &[u8],
    value: &[u8],
    opts: SetOpts,
    replies: Replies,
) -> CmdResult {
    if opts.get {
        reply_value(ctx, key, out)?;
    }
    let found = ctx.write(key)?.is_some();
    if (opts.nx && found) || (opts.xx && !found) {
        if !opts.get {
            replies.aborted(out);
        }
        return Ok(());
    }
    let ttl = match opts.expire {
        // Already in the past: storing it would only have it deleted at once. A replica
        // stores it anyway and waits for its primary's DEL, and an AOF load replays it as
        // written (Valkey's checkAlreadyExpired).
        Some(t) if ctx.already_expired(t) => {
            if found {
                ctx.delete(key)?;
                ctx.propagate_expired(key);
                ctx.events.notify('g', "del", key, ctx.db);
            }
            if !opts.get {
                replies.done(out);
            }
            return Ok(());
        }
        Some(t) => Ttl::At(t),
        None if opts.keepttl => Ttl::Keep,
        None => Ttl::Clear,
    };
    ctx.set(key, NewValue::Bytes(value), ttl)?;
    // A relative TTL replays to another time on a replica or from the AOF: the stream gets
    // the absolute one.
    if let Some(t) = opts.expire
        && !opts.verbatim
        && ctx.propagating()
    {
        let at = itoa::Buffer::new().format(t).as_bytes().to_vec();
        ctx.propagate_as(&[b"SET".as_slice(), key, value, b"PXAT", &at]);
    }
    ctx.events.notify('$', "set", key, ctx.db);
    if opts.expire.is_some() {
        ctx.events.notify('g', "expire", key, ctx.db);
    }
    if !opts.get {
        replies.done(out);
    }
    Ok(())
}

/// Which command's options are being parsed: SET's (NX XX GET KEEPTTL) or GETEX's (PERSIST);
/// both take EX PX EXAT PXAT.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Syntax {
    Set,
    Get,
}

/// SET's or GETEX's options as given, before the expire argument is checked.
#[derive(Clone, Copy, Default)]
struct ExtArgs<'a> {
    nx: bool,
    xx: bool,
    get: bool,
    keepttl: bool,
    persist: bool,
    expire: Option<(Unit, &'a [u8])>,
}

/// An expire option.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

impl Unit {
    fn parse(opt: &[u8]) -> Option<Unit> {
        [(Unit::Ex, "ex"), (Unit::Px, "px"), (Unit::ExAt, "exat"), (Unit::PxAt, "pxat")]
            .into_iter()
            .find(|(_, name)| opt.eq_ignore_ascii_case(name.as_bytes()))
            .map(|(u, _)| u)
    }
}

/// Valkey's `parseExtendedStringArgumentsOrReply`. Its exclusions are asymmetric on purpose
/// (clients rely on them): NX and XX exclude each other, KEEPTTL and PERSIST exclude any
/// expire option, two different expire options are an error but repeating the same one is
/// accepted (the last value wins), GET and NX may be combined.
fn parse_ext<'a>(args: &Args<'a>, syntax: Syntax) -> Result<ExtArgs<'a>, CommandError> {
    let set = syntax == Syntax::Set;
    let mut a = ExtArgs::default();
    let mut i = if set { 3 } else { 2 };
    while i < args.len() {
        let opt = args.get(i);
        let is = |word: &str| opt.eq_ignore_ascii_case(word.as_bytes());
        let unit_ok = |u: Unit| !a.keepttl && !a.persist && a.expire.is_none_or(|(prev, _)| prev == u);
        if set && is("nx") && !a.xx {
            a.nx = true;
        } else if set && is("xx") && !a.nx {
            a.xx = true;
        } else if set && is("get") {
            a.get = true;
        } else if set && is("keepttl") && a.expire.is_none() {
            a.keepttl = true;
        } else if !set && is("persist") && a.expire.is_none() {
            a.persist = true;
        } else if let Some(u) = Unit::parse(opt)
            && unit_ok(u)
            && let Some(v) = args.opt(i + 1)
        {
            a.expire = Some((u, v));
            i += 1;
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    Ok(a)
}

/// Resolves an expire argument to unix milliseconds, with Valkey's checks: not an integer is
/// NotInteger; zero, negative or overflowing is "invalid expire time in '<cmd>' command".
fn expire_at(unit: Unit, arg: &[u8], now_ms: i64, cmd: &'static str) -> Result<i64, CommandError> {
    let n = int_arg(arg)?;
    let seconds = matches!(unit, Unit::Ex | Unit::ExAt);
    if n <= 0 || (seconds && n > i64::MAX / 1000) {
        return Err(CommandError::InvalidExpire(cmd));
    }
    let ms = if seconds { n * 1000 } else { n };
    let at = if matches!(unit, Unit::Ex | Unit::Px) { ms.checked_add(now_ms) } else { Some(ms) };
    match at {
        Some(t) if t > 0 => Ok(t),
        _ => Err(CommandError::InvalidExpire(cmd)),
    }
}

#[cfg(test)]
mod tests {
    use hotkv_protocol::Protocol;

    use crate::testkit::TestKit;

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn set_and_get() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
        assert_eq!(t.run(&["SET", "k", "v"]), "+OK\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["SET", "k", "w", "NX"]), "$-1\r\n");
        assert_eq!(t.run(&["SET", "k", "w", "XX", "GET"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["SET", "j", "w", "XX", "GET"]), "$-1\r\n");
        assert_eq!(t.run(&["GET", "j"]), "$-1\r\n");
        assert_eq!(t.run(&["SET", "e", ""]), "+OK\r\n");
        assert_eq!(t.run(&["GET", "e"]), "$0\r\n\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["GET", "nope"]), "_\r\n");
    }

    #[test]
    fn set_nx_with_get() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SET", "k", "v", "NX", "GET"]), "$-1\r\n");
        assert_eq!(t.run(&["SET", "k", "w", "GET", "NX"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["SET", "k", "x", "nx", "nx"]), "$-1\r\n", "repeating a flag is fine");
    }

    #[test]
    fn set_options_are_validated() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SET", "k", "v", "NX", "XX"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "1", "PX", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "1", "KEEPTTL"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "KEEPTTL", "EX", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "PERSIST"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "0"]), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "PX", "-5"]), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(
            t.run(&["SET", "k", "v", "EX", "9223372036854775807"]),
            "-ERR invalid expire time in 'set' command\r\n"
        );
        assert_eq!(
            t.run(&["SET", "k", "v", "PX", "9223372036854775807"]),
            "-ERR invalid expire time in 'set' command\r\n",
            "now + PX overflows"
        );
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n", "nothing was set by a failed SET");
    }

    #[test]
    fn set_repeated_expire_option_last_wins() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SET", "k", "v", "EX", "100", "ex", "5"]), "+OK\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":5000\r\n");
    }

    #[test]
    fn set_ttl_handling() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SET", "k", "v", "EX", "100"]), "+OK\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":100\r\n");
        assert_eq!(t.run(&["SET", "k", "w", "KEEPTTL"]), "+OK\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":100\r\n");
        assert_eq!(t.run(&["SET", "k", "x"]), "+OK\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n", "plain SET clears the TTL");
        let at = (NOW / 1000 + 50).to_string();
        assert_eq!(t.run(&["SET", "k", "y", "EXAT", &at]), "+OK\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":50\r\n");
        let at = (NOW + 1234).to_string();
        assert_eq!(t.run(&["SET", "k", "y", "PXAT", &at]), "+OK\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":1234\r\n");
        assert_eq!(t.events.take().iter().filter(|e| e.starts_with("g:expire")).count(), 3);
    }

    #[test]
    fn expiry_is_lazy_and_exact() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SET", "k", "v", "PX", "100"]), "+OK\r\n");
        t.now_ms += 100;
        assert_eq!(t.run(&["GET", "k"]), "$1\r\nv\r\n");
        t.now_ms += 1;
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
        assert_eq!(t.stats.expired, 1);
        // An absolute time in the past deletes the key at once.
        assert_eq!(t.run(&["SET", "k", "v"]), "+OK\r\n");
        t.events.take();
        assert_eq!(t.run(&["SET", "k", "v", "PXAT", "1"]), "+OK\r\n");
        assert_eq!(t.events.take(), ["g:del:k@0"]);
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "PXAT", "1", "GET"]), "$-1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
    }

    #[test]
    fn replica_keeps_keys_set_in_the_past() {
        let mut t = TestKit::default();
        t.cfg.replica = true;
        assert_eq!(t.run(&["SET", "k", "v", "PXAT", "1"]), "+OK\r\n");
        assert_eq!(t.ks.db(0).len(), 1);
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n", "but it reads as expired");
    }

    #[test]
    fn set_notifies() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        t.run(&["SET", "k", "v", "EX", "5"]);
        assert_eq!(t.events.take(), ["n:new:k@0", "$:set:k@0", "$:set:k@0", "g:expire:k@0"]);
        t.run(&["GET", "missing"]);
        assert_eq!(t.events.take(), ["m:keymiss:missing@0"]);
    }

    #[test]
    fn setnx_setex_psetex() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SETNX", "k", "a"]), ":1\r\n");
        assert_eq!(t.run(&["SETNX", "k", "b"]), ":0\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$1\r\na\r\n");
        assert_eq!(t.run(&["SETEX", "k", "10", "c"]), "+OK\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":10000\r\n");
        assert_eq!(t.run(&["SETNX", "k", "d"]), ":0\r\n", "not-expired volatile key");
        t.now_ms += 10_001;
        assert_eq!(t.run(&["SETNX", "k", "d"]), ":1\r\n", "expired volatile key");
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
        assert_eq!(t.run(&["PSETEX", "k", "1500", "e"]), "+OK\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":1500\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$1\r\ne\r\n");
        assert_eq!(t.run(&["SETEX", "k", "0", "x"]), "-ERR invalid expire time in 'setex' command\r\n");
        assert_eq!(t.run(&["PSETEX", "k", "-1", "x"]), "-ERR invalid expire time in 'psetex' command\r\n");
        assert_eq!(t.run(&["SETEX", "k", "1.5", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SETEX", "k", "10"]), "-ERR wrong number of arguments for 'setex' command\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$1\r\ne\r\n");
    }

    #[test]
    fn getset_replaces_and_clears_ttl() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["GETSET", "k", "a"]), "$-1\r\n");
        assert_eq!(t.run(&["SET", "k", "b", "EX", "100"]), "+OK\r\n");
        assert_eq!(t.run(&["GETSET", "k", "c"]), "$1\r\nb\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$1\r\nc\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
    }

    #[test]
    fn getdel() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        t.events.take();
        assert_eq!(t.run(&["GETDEL", "k"]), "$1\r\nv\r\n");
        assert_eq!(t.events.take(), ["g:del:k@0"]);
        assert_eq!(t.run(&["GETDEL", "k"]), "$-1\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
    }

    #[test]
    fn getex_options() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["GETEX", "k"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
        assert_eq!(t.run(&["GETEX", "k", "EX", "10"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":10000\r\n");
        assert_eq!(t.run(&["GETEX", "k", "PX", "500"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":500\r\n");
        let at = (NOW / 1000 + 30).to_string();
        assert_eq!(t.run(&["GETEX", "k", "EXAT", &at]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":30\r\n");
        let at = (NOW + 777).to_string();
        assert_eq!(t.run(&["GETEX", "k", "PXAT", &at]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":777\r\n");
        t.events.take();
        assert_eq!(t.run(&["GETEX", "k", "PERSIST"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
        assert_eq!(t.run(&["GETEX", "k", "PERSIST"]), "$1\r\nv\r\n");
        assert_eq!(t.events.take(), ["g:persist:k@0"], "only an actual change notifies");
        // An absolute time in the past deletes the key, after replying with its value.
        assert_eq!(t.run(&["GETEX", "k", "PXAT", "1"]), "$1\r\nv\r\n");
        assert_eq!(t.events.take(), ["g:del:k@0"]);
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
    }

    #[test]
    fn getex_errors() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["GETEX", "k", "bogus"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["GETEX", "k", "EX", "1", "PERSIST"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["GETEX", "k", "PERSIST", "EX", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["GETEX", "k", "NX"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["GETEX", "k", "KEEPTTL"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["GETEX", "k", "EX"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["GETEX"]), "-ERR wrong number of arguments for 'getex' command\r\n");
        // The expire time is only checked when the key exists.
        assert_eq!(t.run(&["GETEX", "k", "EX", "0"]), "$-1\r\n");
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["GETEX", "k", "EX", "0"]), "-ERR invalid expire time in 'getex' command\r\n");
        assert_eq!(t.run(&["GETEX", "k", "EX", "zz"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
    }

    #[test]
    fn getex_of_expired_key() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v", "PX", "1"]);
        t.now_ms += 2;
        assert_eq!(t.run(&["GETEX", "k"]), "$-1\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
    }

    #[test]
    fn mget_and_mset() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["MSET", "a", "1", "b", "2", "a", "3"]), "+OK\r\n");
        assert_eq!(t.run(&["MGET", "a", "b", "c"]), "*3\r\n$1\r\n3\r\n$1\r\n2\r\n$-1\r\n");
        assert_eq!(t.run(&["MSET", "a", "1", "b"]), "-ERR wrong number of arguments for 'mset' command\r\n");
        assert_eq!(t.run(&["MSET", "a"]), "-ERR wrong number of arguments for 'mset' command\r\n");
        t.run(&["SET", "v", "x", "EX", "5"]);
        t.run(&["MSET", "v", "y"]);
        assert_eq!(t.run(&["TTL", "v"]), ":-1\r\n", "MSET clears TTLs like SET");
        t.proto = Protocol::Resp3;
        assert_eq!(t.run(&["MGET", "nope", "a"]), "*2\r\n_\r\n$1\r\n3\r\n");
    }

    #[test]
    fn msetnx() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["MSETNX", "x1", "a", "x2", "b"]), ":1\r\n");
        assert_eq!(t.run(&["MSETNX", "x2", "c", "x3", "d"]), ":0\r\n");
        assert_eq!(t.run(&["MGET", "x1", "x2", "x3"]), "*3\r\n$1\r\na\r\n$1\r\nb\r\n$-1\r\n");
        assert_eq!(t.run(&["MSETNX", "y", "1", "y", "2"]), ":1\r\n", "same key twice: the last wins");
        assert_eq!(t.run(&["GET", "y"]), "$1\r\n2\r\n");
        assert_eq!(t.run(&["MSETNX", "y", "1", "z"]), "-ERR wrong number of arguments for 'msetnx' command\r\n");
    }

    #[test]
    fn hits_and_misses() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        t.run(&["GET", "k"]);
        t.run(&["GET", "nope"]);
        t.run(&["MGET", "k", "k", "nope"]);
        assert_eq!((t.stats.hits, t.stats.misses), (3, 2));
        t.run(&["SET", "k", "w", "GET"]);
        assert_eq!(t.stats.hits, 4, "SET GET reads like GET");
    }
}
