//! EVAL/EVALSHA/FCALL rows and SCRIPT. The scripts themselves run in `crate::script`, which
//! dispatch and EXEC call directly (they need the slot locks); these rows give the commands
//! their metadata and the handlers that never run a script.

use hotkv_engine::CommandError;
use hotkv_engine::command::{BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags as f, key_flags as kf};
use hotkv_protocol::{Args, ReplyBuf};

use super::{reply_help, row, subcommand_syntax_error};
use crate::registry::{Flow, ServerSpec};
use crate::server::Server;
use crate::session::Session;

const S: u32 = acl::SCRIPTING;
const RUN: u32 = f::NOSCRIPT | f::SKIP_MONITOR | f::MAY_REPLICATE | f::NO_MANDATORY_KEYS | f::STALE | f::MOVABLE_KEYS;
const RUN_RO: u32 = f::NOSCRIPT | f::SKIP_MONITOR | f::NO_MANDATORY_KEYS | f::STALE | f::READONLY | f::MOVABLE_KEYS;
const KEYS_RW: &[KeySpec] = &[KeySpec {
    flags: kf::RW | kf::ACCESS | kf::UPDATE,
    begin: BeginSearch::Index(2),
    find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
}];
const KEYS_RO: &[KeySpec] = &[KeySpec {
    flags: kf::RO | kf::ACCESS,
    begin: BeginSearch::Index(2),
    find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
}];

/// Script command rows.
pub static COMMANDS: &[ServerSpec] = &[
    row(
        "eval",
        -3,
        RUN,
        S,
        KEYS_RW,
        "scripting",
        "2.6.0",
        "Executes a server-side Lua script.",
        "Depends on the script that is executed.",
        by_dispatch,
    ),
    row(
        "evalsha",
        -3,
        RUN,
        S,
        KEYS_RW,
        "scripting",
        "2.6.0",
        "Executes a server-side Lua script by SHA1 digest.",
        "Depends on the script that is executed.",
        by_dispatch,
    ),
    row(
        "eval_ro",
        -3,
        RUN_RO,
        S,
        KEYS_RO,
        "scripting",
        "7.0.0",
        "Executes a read-only server-side Lua script.",
        "Depends on the script that is executed.",
        by_dispatch,
    ),
    row(
        "evalsha_ro",
        -3,
        RUN_RO,
        S,
        KEYS_RO,
        "scripting",
        "7.0.0",
        "Executes a read-only server-side Lua script by SHA1 digest.",
        "Depends on the script that is executed.",
        by_dispatch,
    ),
    CommandSpec::container(
        "script",
        -2,
        "scripting",
        "2.6.0",
        "A container for Lua scripts management commands.",
        &[
            row(
                "exists",
                -3,
                f::NOSCRIPT,
                S,
                &[],
                "scripting",
                "2.6.0",
                "Determines whether server-side Lua scripts exist in the script cache.",
                "O(N) with N being the number of scripts to check (so checking a single script is an O(1) operation).",
                script_exists,
            )
            .with_tips(&["request_policy:all_shards", "response_policy:agg_logical_and"]),
            row(
                "flush",
                -2,
                f::NOSCRIPT,
                S,
                &[],
                "scripting",
                "2.6.0",
                "Removes all server-side Lua scripts from the script cache.",
                "O(N) with N being the number of scripts in cache",
                script_flush,
            )
            .with_tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
            row(
                "help",
                2,
                f::LOADING | f::STALE,
                S,
                &[],
                "scripting",
                "5.0.0",
                "Returns helpful text about the different subcommands.",
                "O(1)",
                script_help,
            ),
            row(
                "kill",
                2,
                f::NOSCRIPT | f::ALLOW_BUSY,
                S,
                &[],
                "scripting",
                "2.6.0",
                "Terminates a server-side Lua script during execution.",
                "O(1)",
                script_kill,
            )
            .with_tips(&["request_policy:all_shards", "response_policy:one_succeeded"]),
            row(
                "load",
                3,
                f::NOSCRIPT | f::STALE,
                S,
                &[],
                "scripting",
                "2.6.0",
                "Loads a server-side Lua script to the script cache.",
                "O(N) with N being the length in bytes of the script body.",
                script_load,
            )
            .with_tips(&["request_policy:all_nodes", "response_policy:all_succeeded"]),
            row(
                "show",
                3,
                f::NOSCRIPT,
                S,
                &[],
                "scripting",
                "8.0.0",
                "Show server-side Lua script in the script cache.",
                "O(1).",
                script_show,
            ),
        ],
    ),
];

/// The EVAL family runs from dispatch and EXEC, which hold the locks a script needs; a row
/// handler is reached only if that wiring is missing.
fn by_dispatch(_: &Server, _: &mut Session, args: Args<'_>, _: &mut ReplyBuf) -> Result<Flow, CommandError> {
    Err(CommandError::err(format!("internal error: {} must be run by dispatch", String::from_utf8_lossy(args.get(0)))))
}

fn script_help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    reply_help(
        out,
        &args,
        &[
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache. Very dangerous on replicas.",
            "    When called without the optional mode argument, the behavior is determined",
            "     by the lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the scripts cache.",
            "    * SYNC: Synchronously flush the scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script.",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "SHOW <sha1>",
            "    Show a script from the scripts cache.",
        ],
    );
    Ok(Flow::Continue)
}

fn script_exists(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.array(args.len() - 2);
    for sha in args.iter().skip(2) {
        out.int(i64::from(srv.scripts.get(sha).is_some()));
    }
    Ok(Flow::Continue)
}

fn script_flush(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    match args.len() {
        2 => {}
        3 if args.get(2).eq_ignore_ascii_case(b"sync") || args.get(2).eq_ignore_ascii_case(b"async") => {}
        _ => return Err(CommandError::err("SCRIPT FLUSH only support SYNC|ASYNC option")),
    }
    srv.scripts.flush();
    out.ok();
    Ok(Flow::Continue)
}

fn script_kill(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    srv.script_runs.kill(false)?;
    out.ok();
    Ok(Flow::Continue)
}

fn script_load(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let script = crate::script::add_script(srv, args.get(2), false)?;
    out.bulk(&script.sha);
    Ok(Flow::Continue)
}

fn script_show(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if args.len() != 3 {
        return Err(subcommand_syntax_error(&args));
    }
    let script = srv.scripts.get(args.get(2)).ok_or_else(|| CommandError::raw("NOSCRIPT No matching script"))?;
    out.bulk(&script.body);
    Ok(Flow::Continue)
}
