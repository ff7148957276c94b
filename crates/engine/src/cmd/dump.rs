//! DUMP and RESTORE.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec, int_arg};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::{NewValue, ValueRef};
use crate::error::{CmdResult, CommandError};
use crate::object::Object;
use crate::policy;
use crate::rdb::{self, Loaded};

/// DUMP and RESTORE rows.
pub static COMMANDS: &[Spec] = &[
    CommandSpec::new("dump", 2, flags::READONLY, acl::KEYSPACE, &[KeySpec::single(1, kf::RO | kf::ACCESS)],
        "generic", "2.6.0", "Returns a serialized representation of the value stored at a key.",
        "O(1) to access the key and additional O(N*M) to serialize it, where N is the number of objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).",
        EngineCmd { run: dump, plan: LockPlan::Keys })
        .with_tips(&["nondeterministic_output"]),
    CommandSpec::new("restore", -4, flags::WRITE | flags::DENYOOM, acl::KEYSPACE | acl::DANGEROUS,
        &[KeySpec::single(1, kf::OW | kf::UPDATE)], "generic", "2.6.0",
        "Creates a key from the serialized representation of a value.",
        "O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, where N is the number of objects composing the value and M their average size. For small string values the time complexity is thus O(1)+O(1*M) where M is small, so simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because inserting values into sorted sets is O(log(N)).",
        EngineCmd { run: restore, plan: LockPlan::Keys }),
];

fn dump(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let Some(k) = ctx.read(args.get(1))? else {
        out.null();
        return Ok(());
    };
    let payload = match k.value() {
        ValueRef::Str(s) => rdb::dump_string(s),
        ValueRef::Obj(Object::Str(s)) => rdb::dump_string(s),
        #[allow(unreachable_patterns)]
        ValueRef::Obj(_) => return Err(CommandError::err("DUMP of this type is not supported yet")),
    };
    out.bulk(&payload);
    Ok(())
}

/// RESTORE's options, parsed once.
struct RestoreArgs {
    replace: bool,
    absttl: bool,
    idle: Option<i64>,
    freq: Option<i64>,
}

fn parse_restore(args: &Args<'_>) -> Result<RestoreArgs, CommandError> {
    let mut a = RestoreArgs { replace: false, absttl: false, idle: None, freq: None };
    let mut j = 4;
    while j < args.len() {
        let opt = args.get(j);
        let more = args.len() - j - 1;
        if opt.eq_ignore_ascii_case(b"replace") {
            a.replace = true;
        } else if opt.eq_ignore_ascii_case(b"absttl") {
            a.absttl = true;
        } else if opt.eq_ignore_ascii_case(b"idletime") && more >= 1 && a.freq.is_none() {
            let v = int_arg(args.get(j + 1))?;
            if v < 0 {
                return Err(CommandError::err("Invalid IDLETIME value, must be >= 0"));
            }
            a.idle = Some(v);
            j += 1;
        } else if opt.eq_ignore_ascii_case(b"freq") && more >= 1 && a.idle.is_none() {
            let v = int_arg(args.get(j + 1))?;
            if !(0..=255).contains(&v) {
                return Err(CommandError::err("Invalid FREQ value, must be >= 0 and <= 255"));
            }
            a.freq = Some(v);
            j += 1;
        } else {
            return Err(CommandError::Syntax);
        }
        j += 1;
    }
    Ok(a)
}

fn restore(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let opts = parse_restore(&args)?;
    let key = args.get(1);
    // Valkey checks the target before the TTL and the payload.
    if !opts.replace && ctx.write(key)?.is_some() {
        return Err(CommandError::BusyKey);
    }
    let ttl = int_arg(args.get(2))?;
    if ttl < 0 {
        return Err(CommandError::err("Invalid TTL value, must be >= 0"));
    }
    let value = rdb::restore(args.get(3)).map_err(|e| CommandError::err(e.to_string()))?;
    let deleted = opts.replace && ctx.delete(key)?;
    let when = match (ttl, opts.absttl) {
        (0, _) => None,
        (t, true) => Some(t),
        (t, false) => Some(t.saturating_add(ctx.now_ms)),
    };
    if let Some(when) = when
        && when <= ctx.now_ms
    {
        if deleted {
            ctx.events.notify('g', "del", key, ctx.db);
        }
        out.ok();
        return Ok(());
    }
    let ttl = when.map_or(Ttl::Clear, Ttl::At);
    match value {
        Loaded::Str(s) => ctx.set(key, NewValue::Bytes(&s), ttl)?,
        Loaded::Object(o) => ctx.set(key, NewValue::Object(Box::new(o)), ttl)?,
    }
    if opts.idle.is_some() || opts.freq.is_some() {
        let (now, p) = (ctx.now_ms, ctx.cfg.policy);
        if let Some(mut k) = ctx.write(key)? {
            let lru = match (opts.freq, opts.idle) {
                (Some(f), _) if p.is_lfu() => (policy::initial(p, now) & !0xFF) | f as u32,
                (_, Some(idle)) if !p.is_lfu() => policy::lru_clock(now - idle.saturating_mul(1000)),
                _ => k.entry().lru(),
            };
            k.entry_mut().set_lru(lru);
        }
    }
    ctx.events.notify('g', "restore", key, ctx.db);
    out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::testkit::TestKit;

    fn bulk(reply: &[u8]) -> Vec<u8> {
        let start = reply.iter().position(|&b| b == b'\n').unwrap() + 1;
        reply[start..reply.len() - 2].to_vec()
    }

    #[test]
    fn dump_restore_round_trip() {
        let mut t = TestKit::default();
        t.run(&["SET", "k", "hello"]);
        let payload = bulk(&t.run_raw(&[b"DUMP".to_vec(), b"k".to_vec()]));
        let args: Vec<Vec<u8>> = vec![b"RESTORE".to_vec(), b"k".to_vec(), b"0".to_vec(), payload.clone()];
        assert_eq!(t.run_bytes(&args), "-BUSYKEY Target key name already exists.\r\n");
        let mut args2 = args.clone();
        args2[1] = b"k2".to_vec();
        args2[2] = b"5000".to_vec();
        assert_eq!(t.run_bytes(&args2), "+OK\r\n");
        assert_eq!(t.run(&["GET", "k2"]), "$5\r\nhello\r\n");
        assert_eq!(t.run(&["PTTL", "k2"]), ":5000\r\n");
        let mut args3 = args.clone();
        args3.push(b"REPLACE".to_vec());
        assert_eq!(t.run_bytes(&args3), "+OK\r\n");
        assert_eq!(t.run(&["DUMP", "nokey"]), "$-1\r\n");
    }

    #[test]
    fn restore_errors_are_valkeys() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["RESTORE", "k", "-1", "x"]), "-ERR Invalid TTL value, must be >= 0\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "garbage-payload"]), "-ERR DUMP payload version or checksum are wrong\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "IDLETIME", "-1"]), "-ERR Invalid IDLETIME value, must be >= 0\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "FREQ", "256"]), "-ERR Invalid FREQ value, must be >= 0 and <= 255\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "IDLETIME", "1", "FREQ", "1"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["RESTORE", "k", "0", "x", "BOGUS"]), "-ERR syntax error\r\n");
    }
}
