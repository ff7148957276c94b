//! Generic key commands.

use hotkv_protocol::{Args, ReplyBuf};

use super::{EngineCmd, LockPlan, Spec};
use crate::command::{CommandSpec, KeySpec, acl, flags, key_flags as kf};
use crate::ctx::Ctx;
use crate::error::CmdResult;

const fn row(
    name: &'static str,
    arity: i32,
    flags: u32,
    keys: &'static [KeySpec],
    plan: LockPlan,
    since: &'static str,
    summary: &'static str,
    complexity: &'static str,
    run: super::EngineFn,
) -> Spec {
    CommandSpec::new(name, arity, flags, acl::KEYSPACE, keys, "generic", since, summary, complexity,
        EngineCmd { run, plan })
}

/// Generic key command rows.
pub static COMMANDS: &[Spec] = &[
    row("del", -2, flags::WRITE, &[KeySpec::range(1, -1, 1, kf::RM | kf::DELETE)], LockPlan::Keys, "1.0.0",
        "Deletes one or more keys.", "O(N) where N is the number of keys that will be removed.", del),
];

fn del(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let mut n = 0;
    for key in args.iter().skip(1) {
        if ctx.delete(key)? {
            ctx.events.notify('g', "del", key, ctx.db);
            n += 1;
        }
    }
    out.int(n);
    Ok(())
}
