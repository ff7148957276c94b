//! String commands.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};

const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(name, arity, flags, acl::STRING, keys, "string", since, summary, complexity,
        EngineCmd { run, plan: LockPlan::Keys })
}

const RO: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];
const SET_KEYS: &[KeySpec] = &[KeySpec::single(1, kf::RW | kf::ACCESS | kf::UPDATE | kf::VARIABLE_FLAGS)];

/// String command rows.
pub static COMMANDS: &[Spec] = &[
    row("get", 2, flags::READONLY | flags::FAST, RO, "1.0.0", "Returns the string value of a key.", "O(1)", get),
    row("set", -3, flags::WRITE | flags::DENYOOM, SET_KEYS, "1.0.0",
        "Sets the string value of a key, ignoring its type. The key is created if it doesn't exist.", "O(1)", set),
];

fn get(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    match ctx.read(args.get(1))? {
        Some(k) => out.bulk(k.str()?),
        None => out.null(),
    }
    Ok(())
}

/// When a SET-like command makes the key expire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expiry {
    /// No expire option: remove any TTL.
    None,
    /// KEEPTTL.
    Keep,
    /// EX/PX/EXAT/PXAT resolved to an absolute unix time in milliseconds.
    At(i64),
}

/// SET's options, parsed once.
#[derive(Debug, Clone, Copy)]
struct SetArgs {
    nx: bool,
    xx: bool,
    get: bool,
    expiry: Expiry,
}

/// Which expire option was given, and its argument.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Unit {
    Ex,
    Px,
    ExAt,
    PxAt,
}

fn parse_set(args: &Args<'_>, now_ms: i64) -> Result<SetArgs, CommandError> {
    let mut a = SetArgs { nx: false, xx: false, get: false, expiry: Expiry::None };
    let mut expire: Option<(Unit, &[u8])> = None;
    let mut keepttl = false;
    let mut i = 3;
    while i < args.len() {
        let opt = args.get(i);
        let next = args.opt(i + 1);
        let unit = |u: Unit| if opt.eq_ignore_ascii_case(u.name().as_bytes()) { Some(u) } else { None };
        if opt.eq_ignore_ascii_case(b"nx") && !a.xx {
            a.nx = true;
        } else if opt.eq_ignore_ascii_case(b"xx") && !a.nx {
            a.xx = true;
        } else if opt.eq_ignore_ascii_case(b"get") {
            a.get = true;
        } else if opt.eq_ignore_ascii_case(b"keepttl") && expire.is_none() {
            keepttl = true;
        } else if let Some(u) = [Unit::Ex, Unit::Px, Unit::ExAt, Unit::PxAt].into_iter().find_map(unit) {
            // One expire option only, never with KEEPTTL, and it needs its argument.
            match (keepttl, expire, next) {
                (false, None, Some(v)) => {
                    expire = Some((u, v));
                    i += 1;
                }
                _ => return Err(CommandError::Syntax),
            }
        } else {
            return Err(CommandError::Syntax);
        }
        i += 1;
    }
    a.expiry = match expire {
        Some((u, v)) => Expiry::At(expire_at(u, v, now_ms, "set")?),
        None if keepttl => Expiry::Keep,
        None => Expiry::None,
    };
    Ok(a)
}

impl Unit {
    fn name(self) -> &'static str {
        match self {
            Unit::Ex => "ex",
            Unit::Px => "px",
            Unit::ExAt => "exat",
            Unit::PxAt => "pxat",
        }
    }
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

fn set(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let opts = parse_set(&args, ctx.now_ms)?;
    let (key, value) = (args.get(1), args.get(2));
    let found = match ctx.write(key)? {
        Some(k) => {
            if opts.get {
                out.bulk(k.str()?);
            }
            true
        }
        None => {
            if opts.get {
                out.null();
            }
            false
        }
    };
    if (opts.nx && found) || (opts.xx && !found) {
        if !opts.get {
            out.null();
        }
        return Ok(());
    }
    let ttl = match opts.expiry {
        Expiry::None => Ttl::Clear,
        Expiry::Keep => Ttl::Keep,
        // Already in the past: the key would be deleted at once, so just delete it.
        Expiry::At(t) if t <= ctx.now_ms => {
            if found {
                ctx.delete(key)?;
            }
            if !opts.get {
                out.ok();
            }
            return Ok(());
        }
        Expiry::At(t) => Ttl::At(t),
    };
    ctx.set(key, NewValue::Bytes(value), ttl)?;
    ctx.events.notify('$', "set", key, ctx.db);
    if matches!(ttl, Ttl::At(_)) {
        ctx.events.notify('g', "expire", key, ctx.db);
    }
    if !opts.get {
        out.ok();
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::TestKit;

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
    }

    #[test]
    fn set_options_are_validated() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SET", "k", "v", "NX", "XX"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "1", "PX", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "1", "KEEPTTL"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SET", "k", "v", "EX", "0"]), "-ERR invalid expire time in 'set' command\r\n");
        assert_eq!(
            t.run(&["SET", "k", "v", "EX", "9223372036854775807"]),
            "-ERR invalid expire time in 'set' command\r\n"
        );
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
        assert_eq!(t.run(&["SET", "k", "v", "PXAT", "1"]), "+OK\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$-1\r\n");
    }
}
