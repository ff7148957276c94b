//! Key expiry commands: EXPIRE, PEXPIRE, EXPIREAT, PEXPIREAT (with NX XX GT LT), TTL, PTTL,
//! EXPIRETIME, PEXPIRETIME, PERSIST.

use hotkv_protocol::{Args, ReplyBuf};

use super::keys::row;
use super::{LockPlan, Spec, int_arg};
use crate::command::{KeySpec, flags, key_flags as kf};
use crate::ctx::{Ctx, LookupFlags};
use crate::error::{CmdResult, CommandError};

/// Expiry command rows.
pub static COMMANDS: &[Spec] = &[
    row(
        "expire",
        -3,
        flags::WRITE | flags::FAST,
        RW_UPDATE,
        LockPlan::Keys,
        "1.0.0",
        "Sets the expiration time of a key in seconds.",
        "O(1)",
        expire,
    ),
    row(
        "pexpire",
        -3,
        flags::WRITE | flags::FAST,
        RW_UPDATE,
        LockPlan::Keys,
        "2.6.0",
        "Sets the expiration time of a key in milliseconds.",
        "O(1)",
        pexpire,
    ),
    row(
        "expireat",
        -3,
        flags::WRITE | flags::FAST,
        RW_UPDATE,
        LockPlan::Keys,
        "1.2.0",
        "Sets the expiration time of a key to a Unix timestamp.",
        "O(1)",
        expireat,
    ),
    row(
        "pexpireat",
        -3,
        flags::WRITE | flags::FAST,
        RW_UPDATE,
        LockPlan::Keys,
        "2.6.0",
        "Sets the expiration time of a key to a Unix milliseconds timestamp.",
        "O(1)",
        pexpireat,
    ),
    row(
        "ttl",
        2,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        LockPlan::Keys,
        "1.0.0",
        "Returns the expiration time in seconds of a key.",
        "O(1)",
        ttl,
    )
    .with_tips(&["nondeterministic_output"]),
    row(
        "pttl",
        2,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        LockPlan::Keys,
        "2.6.0",
        "Returns the expiration time in milliseconds of a key.",
        "O(1)",
        pttl,
    )
    .with_tips(&["nondeterministic_output"]),
    row(
        "expiretime",
        2,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        LockPlan::Keys,
        "7.0.0",
        "Returns the expiration time of a key as a Unix timestamp.",
        "O(1)",
        expiretime,
    ),
    row(
        "pexpiretime",
        2,
        flags::READONLY | flags::FAST,
        RO_ACCESS,
        LockPlan::Keys,
        "7.0.0",
        "Returns the expiration time of a key as a Unix milliseconds timestamp.",
        "O(1)",
        pexpiretime,
    ),
    row(
        "persist",
        2,
        flags::WRITE | flags::FAST,
        RW_UPDATE,
        LockPlan::Keys,
        "2.2.0",
        "Removes the expiration time of a key.",
        "O(1)",
        persist,
    ),
];

const RW_UPDATE: &[KeySpec] = &[KeySpec::single(1, kf::RW | kf::UPDATE)];
const RO_ACCESS: &[KeySpec] = &[KeySpec::single(1, kf::RO | kf::ACCESS)];

fn expire(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    expire_generic(ctx, args, Form { relative: true, seconds: true, name: "expire" }, out)
}

fn pexpire(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    expire_generic(ctx, args, Form { relative: true, seconds: false, name: "pexpire" }, out)
}

fn expireat(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    expire_generic(ctx, args, Form { relative: false, seconds: true, name: "expireat" }, out)
}

fn pexpireat(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    expire_generic(ctx, args, Form { relative: false, seconds: false, name: "pexpireat" }, out)
}

/// How an expire command reads its time argument.
#[derive(Clone, Copy)]
struct Form {
    /// Relative to now (EXPIRE, PEXPIRE) or absolute (the *AT forms).
    relative: bool,
    /// Seconds (EXPIRE, EXPIREAT) or milliseconds.
    seconds: bool,
    /// The name errors quote.
    name: &'static str,
}

/// The NX XX GT LT conditions.
#[derive(Debug, Clone, Copy, Default)]
struct Cond {
    nx: bool,
    xx: bool,
    gt: bool,
    lt: bool,
}

impl Cond {
    fn parse(args: &Args<'_>) -> Result<Cond, CommandError> {
        let mut c = Cond::default();
        for opt in args.iter().skip(3) {
            let flag = if opt.eq_ignore_ascii_case(b"nx") {
                &mut c.nx
            } else if opt.eq_ignore_ascii_case(b"xx") {
                &mut c.xx
            } else if opt.eq_ignore_ascii_case(b"gt") {
                &mut c.gt
            } else if opt.eq_ignore_ascii_case(b"lt") {
                &mut c.lt
            } else {
                let opt = String::from_utf8_lossy(opt);
                return Err(CommandError::err(format!("Unsupported option {opt}")));
            };
            *flag = true;
        }
        if c.nx && (c.xx || c.gt || c.lt) {
            return Err(CommandError::err("NX and XX, GT or LT options at the same time are not compatible"));
        }
        if c.gt && c.lt {
            return Err(CommandError::err("GT and LT options at the same time are not compatible"));
        }
        Ok(c)
    }

    /// Whether the condition allows replacing `current` (None: no TTL) with `when`.
    /// A key without a TTL counts as expiring never: GT always fails, LT always passes.
    fn allows(self, current: Option<i64>, when: i64) -> bool {
        !(self.nx && current.is_some()
            || self.xx && current.is_none()
            || self.gt && current.is_none_or(|c| when <= c)
            || self.lt && current.is_some_and(|c| when >= c))
    }
}

fn expire_generic(ctx: &mut Ctx<'_>, args: Args<'_>, form: Form, out: &mut ReplyBuf) -> CmdResult {
    let cond = Cond::parse(&args)?;
    let key = args.get(1);
    let now = ctx.now_ms;
    let invalid = CommandError::InvalidExpire(form.name);
    let mut when = int_arg(args.get(2))?;
    // Negative times are allowed (they delete the key); only overflow is an error.
    if form.seconds {
        when = when.checked_mul(1000).ok_or(invalid.clone())?;
    }
    if form.relative {
        when = when.checked_add(now).ok_or(invalid)?;
    }
    // A replica keeps a key with a past expire time and waits for its primary's DEL.
    let past = ctx.already_expired(when);
    let Some(mut k) = ctx.write(key)? else {
        out.int(0);
        return Ok(());
    };
    if !cond.allows(k.entry().expire(), when) {
        out.int(0);
        return Ok(());
    }
    let event = if past {
        drop(k.delete());
        ctx.propagate_expired(key);
        "del"
    } else {
        k.set_expire(Some(when));
        // Relative and second forms replay to another time: the stream gets milliseconds
        // since the epoch.
        if ctx.propagating() {
            let at = itoa::Buffer::new().format(when).as_bytes().to_vec();
            ctx.propagate_as(&[b"PEXPIREAT".as_slice(), key, &at]);
        }
        "expire"
    };
    ctx.modified(key);
    ctx.events.notify('g', event, key, ctx.db);
    out.int(1);
    Ok(())
}

fn ttl(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    ttl_generic(ctx, args, false, false, out)
}

fn pttl(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    ttl_generic(ctx, args, true, false, out)
}

fn expiretime(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    ttl_generic(ctx, args, false, true, out)
}

fn pexpiretime(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    ttl_generic(ctx, args, true, true, out)
}

/// -2 for a missing key, -1 for no TTL, else the time left (or the deadline with `absolute`),
/// in milliseconds or rounded to the nearest second.
fn ttl_generic(ctx: &mut Ctx<'_>, args: Args<'_>, ms: bool, absolute: bool, out: &mut ReplyBuf) -> CmdResult {
    let now = ctx.now_ms;
    let no_touch = LookupFlags { no_touch: true, no_notify: false };
    let Some(k) = ctx.read_with(args.get(1), no_touch)? else {
        out.int(-2);
        return Ok(());
    };
    let Some(when) = k.entry().expire() else {
        out.int(-1);
        return Ok(());
    };
    let left = if absolute { when } else { when - now }.max(0);
    out.int(if ms { left } else { left.wrapping_add(500) / 1000 });
    Ok(())
}

fn persist(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let key = args.get(1);
    let removed = match ctx.write(key)? {
        Some(mut k) if k.entry().expire().is_some() => {
            k.set_expire(None);
            true
        }
        _ => false,
    };
    if removed {
        ctx.modified(key);
        ctx.events.notify('g', "persist", key, ctx.db);
    }
    out.int(i64::from(removed));
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::TestKit;

    const NOW: i64 = 1_700_000_000_000;

    #[test]
    fn expire_family_sets_deadlines() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["EXPIRE", "k", "100"]), ":1\r\n");
        assert_eq!(t.run(&["PEXPIRETIME", "k"]), format!(":{}\r\n", NOW + 100_000));
        assert_eq!(t.run(&["PEXPIRE", "k", "1500"]), ":1\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":1500\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":2\r\n", "1.5 s rounds to 2");
        assert_eq!(t.run(&["EXPIREAT", "k", &(NOW / 1000 + 60).to_string()]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRETIME", "k"]), format!(":{}\r\n", NOW / 1000 + 60));
        assert_eq!(t.run(&["TTL", "k"]), ":60\r\n");
        assert_eq!(t.run(&["PEXPIREAT", "k", &(NOW + 1).to_string()]), ":1\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "nope", "100"]), ":0\r\n");
        assert_eq!(t.events.take().iter().filter(|e| *e == "g:expire:k@0").count(), 4);
    }

    #[test]
    fn past_times_delete_the_key() {
        let mut t = TestKit::default();
        for (cmd, arg) in [("EXPIRE", "-1"), ("PEXPIRE", "0"), ("EXPIREAT", "1"), ("PEXPIREAT", "0")] {
            t.run(&["SET", "k", "v"]);
            t.events.take();
            assert_eq!(t.run(&[cmd, "k", arg]), ":1\r\n", "{cmd}");
            assert_eq!(t.events.take(), ["g:del:k@0"]);
            assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n");
        }
        t.cfg.replica = true;
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["EXPIRE", "k", "-1"]), ":1\r\n");
        assert_eq!(t.ks.db(0).len(), 1, "a replica keeps it for its primary's DEL");
    }

    #[test]
    fn an_aof_load_keeps_a_key_its_pexpireat_made_past_and_later_commands_find_it() {
        // Valkey's integration/aof "AOF+EXPIRE": RPUSH, PEXPIREAT 1000, RPUSH while loading
        // leaves one list of two elements with a past TTL, gone at the first read after.
        let mut t = TestKit::default();
        t.cfg.from_primary = true;
        assert_eq!(t.run(&["RPUSH", "list", "foo"]), ":1\r\n");
        assert_eq!(t.run(&["PEXPIREAT", "list", "1000"]), ":1\r\n");
        assert_eq!(t.run(&["RPUSH", "list", "bar"]), ":2\r\n");
        assert_eq!(t.run(&["RPUSH", "kept", "a"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIREAT", "kept", "1"]), ":1\r\n");
        assert_eq!(t.run(&["PERSIST", "kept"]), ":1\r\n");
        assert_eq!(t.run(&["SET", "s", "v", "PXAT", "1"]), "+OK\r\n");
        assert_eq!(t.run(&["GETEX", "s", "EXAT", "1"]), "$1\r\nv\r\n");
        assert_eq!(t.run(&["APPEND", "s", "w"]), ":2\r\n");
        assert_eq!(t.ks.db(0).len(), 3);
        t.cfg.from_primary = false;
        assert_eq!(t.run(&["LLEN", "list"]), ":0\r\n");
        assert_eq!(t.run(&["GET", "s"]), "$-1\r\n");
        assert_eq!(t.run(&["LRANGE", "kept", "0", "-1"]), "*1\r\n$1\r\na\r\n");
        assert_eq!(t.ks.db(0).len(), 1);
    }

    #[test]
    fn expire_conditions() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["EXPIRE", "k", "100", "XX"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "GT"]), ":0\r\n", "no TTL is infinite");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "NX"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "50", "NX"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "50", "GT"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "100", "GT"]), ":0\r\n", "equal is not greater");
        assert_eq!(t.run(&["EXPIRE", "k", "200", "gt"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "300", "LT"]), ":0\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "150", "lt", "xx"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":150\r\n");
        t.run(&["PERSIST", "k"]);
        assert_eq!(t.run(&["EXPIRE", "k", "10", "LT"]), ":1\r\n", "any TTL is less than none");
        assert_eq!(t.run(&["EXPIRE", "k", "20", "XX", "GT"]), ":1\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "-5", "GT"]), ":0\r\n", "a failed condition keeps the key");
        assert_eq!(t.run(&["TTL", "k"]), ":20\r\n");
    }

    #[test]
    fn expire_errors() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "v"]);
        let nx = "-ERR NX and XX, GT or LT options at the same time are not compatible\r\n";
        assert_eq!(t.run(&["EXPIRE", "k", "10", "NX", "XX"]), nx);
        assert_eq!(t.run(&["EXPIRE", "k", "10", "GT", "NX"]), nx);
        assert_eq!(t.run(&["EXPIRE", "k", "10", "NX", "LT"]), nx);
        assert_eq!(
            t.run(&["EXPIRE", "k", "10", "GT", "LT"]),
            "-ERR GT and LT options at the same time are not compatible\r\n"
        );
        assert_eq!(t.run(&["EXPIRE", "k", "10", "FOO"]), "-ERR Unsupported option FOO\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "ten"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "1.5"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["EXPIRE", "k", "9223372036854775807"]), "-ERR invalid expire time in 'expire' command\r\n");
        assert_eq!(
            t.run(&["EXPIREAT", "k", "-9223372036854775808"]),
            "-ERR invalid expire time in 'expireat' command\r\n"
        );
        assert_eq!(
            t.run(&["PEXPIRE", "k", "9223372036854775807"]),
            "-ERR invalid expire time in 'pexpire' command\r\n"
        );
        assert_eq!(t.run(&["PEXPIREAT", "k", "9223372036854775807"]), ":1\r\n", "no overflow: allowed");
        assert_eq!(t.run(&["PTTL", "k"]), format!(":{}\r\n", i64::MAX - NOW));
        assert_eq!(t.run(&["EXPIRE", "k"]), "-ERR wrong number of arguments for 'expire' command\r\n");
        // Option errors come before the missing key and the bad number.
        assert_eq!(t.run(&["EXPIRE", "nope", "x", "bad"]), "-ERR Unsupported option bad\r\n");
    }

    #[test]
    fn ttl_replies() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["TTL", "k"]), ":-2\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":-2\r\n");
        assert_eq!(t.run(&["EXPIRETIME", "k"]), ":-2\r\n");
        assert_eq!(t.run(&["PEXPIRETIME", "k"]), ":-2\r\n");
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
        assert_eq!(t.run(&["PTTL", "k"]), ":-1\r\n");
        assert_eq!(t.run(&["EXPIRETIME", "k"]), ":-1\r\n");
        assert_eq!(t.run(&["PEXPIRETIME", "k"]), ":-1\r\n");
        t.run(&["PEXPIRE", "k", "2499"]);
        assert_eq!(t.run(&["TTL", "k"]), ":2\r\n");
        t.now_ms += 2499;
        assert_eq!(t.run(&["PTTL", "k"]), ":0\r\n", "due now but not yet expired");
        assert_eq!(t.run(&["TTL", "k"]), ":0\r\n");
        t.now_ms += 1;
        assert_eq!(t.run(&["TTL", "k"]), ":-2\r\n");
    }

    #[test]
    fn persist() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["PERSIST", "k"]), ":0\r\n");
        t.run(&["SET", "k", "v"]);
        assert_eq!(t.run(&["PERSIST", "k"]), ":0\r\n");
        t.run(&["EXPIRE", "k", "10"]);
        t.events.take();
        assert_eq!(t.run(&["PERSIST", "k"]), ":1\r\n");
        assert_eq!(t.events.take(), ["g:persist:k@0"]);
        assert_eq!(t.run(&["TTL", "k"]), ":-1\r\n");
        assert_eq!(t.ks.db(0).volatile(), 0);
    }

    #[test]
    fn ttl_survives_value_changes() {
        let mut t = TestKit::default();
        t.run(&["SET", "n", "1", "EX", "100"]);
        t.run(&["INCR", "n"]);
        t.run(&["INCRBYFLOAT", "n", "0.5"]);
        assert_eq!(t.run(&["TTL", "n"]), ":100\r\n");
        t.run(&["APPEND", "n", "abc"]);
        t.run(&["SETRANGE", "n", "10", "x"]);
        assert_eq!(t.run(&["TTL", "n"]), ":100\r\n");
        assert_eq!(t.ks.db(0).volatile(), 1);
    }
}
