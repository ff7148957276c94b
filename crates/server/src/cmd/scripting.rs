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
    row(
        "fcall",
        -3,
        RUN,
        S,
        KEYS_RW,
        "scripting",
        "7.0.0",
        "Invokes a function.",
        "Depends on the function that is executed.",
        by_dispatch,
    ),
    row(
        "fcall_ro",
        -3,
        RUN_RO,
        S,
        KEYS_RO,
        "scripting",
        "7.0.0",
        "Invokes a read-only function.",
        "Depends on the function that is executed.",
        by_dispatch,
    ),
    CommandSpec::container(
        "function",
        -2,
        "scripting",
        "7.0.0",
        "A container for function commands.",
        &[
            row(
                "delete",
                3,
                f::NOSCRIPT | f::WRITE,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Deletes a library and its functions.",
                "O(1)",
                function_delete,
            )
            .with_tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
            row(
                "dump",
                2,
                f::NOSCRIPT,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Dumps all libraries into a serialized binary payload.",
                "O(N) where N is the number of functions",
                function_dump,
            ),
            row(
                "flush",
                -2,
                f::NOSCRIPT | f::WRITE,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Deletes all libraries and functions.",
                "O(N) where N is the number of functions deleted",
                function_flush,
            )
            .with_tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
            row(
                "help",
                2,
                f::LOADING | f::STALE,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Returns helpful text about the different subcommands.",
                "O(1)",
                function_help,
            ),
            row(
                "kill",
                2,
                f::NOSCRIPT | f::ALLOW_BUSY,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Terminates a function during execution.",
                "O(1)",
                function_kill,
            )
            .with_tips(&["request_policy:all_shards", "response_policy:one_succeeded"]),
            row(
                "list",
                -2,
                f::NOSCRIPT,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Returns information about all libraries.",
                "O(N) where N is the number of functions",
                function_list,
            )
            .with_tips(&["nondeterministic_output_order"]),
            row(
                "load",
                -3,
                f::NOSCRIPT | f::WRITE | f::DENYOOM,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Creates a library.",
                "O(1) (considering compilation time is redundant)",
                function_load,
            )
            .with_tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
            row(
                "restore",
                -3,
                f::NOSCRIPT | f::WRITE | f::DENYOOM,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Restores all libraries from a payload.",
                "O(N) where N is the number of functions on the payload",
                function_restore,
            )
            .with_tips(&["request_policy:all_shards", "response_policy:all_succeeded"]),
            row(
                "stats",
                2,
                f::NOSCRIPT | f::ALLOW_BUSY,
                S,
                &[],
                "scripting",
                "7.0.0",
                "Returns information about a function during execution.",
                "O(1)",
                function_stats,
            )
            .with_tips(&[
                "nondeterministic_output",
                "request_policy:all_shards",
                "response_policy:special",
            ]),
        ],
    ),
    CommandSpec::container(
        "script",
        -2,
        "scripting",
        "2.6.0",
        "A container for Lua scripts management commands.",
        &[
            row(
                "debug",
                3,
                f::NOSCRIPT,
                S,
                &[],
                "scripting",
                "3.2.0",
                "Sets the debug mode of server-side Lua scripts.",
                "O(1)",
                script_debug,
            ),
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
            "DEBUG (YES|SYNC|NO)",
            "    Set the debug mode for subsequent scripts executed.",
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

/// SCRIPT DEBUG: the client's next EVAL runs under the Lua debugger, which then talks to
/// the client directly; so nothing may be waiting for the client in between.
fn script_debug(_: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    use crate::script::DebugMode;
    if !out.is_empty() {
        return Err(CommandError::err("SCRIPT DEBUG must be called outside a pipeline"));
    }
    let mode = args.get(2);
    sess.debug_scripts = if mode.eq_ignore_ascii_case(b"no") {
        None
    } else if mode.eq_ignore_ascii_case(b"yes") {
        Some(DebugMode::RolledBack)
    } else if mode.eq_ignore_ascii_case(b"sync") {
        Some(DebugMode::Sync)
    } else {
        return Err(CommandError::err("Use SCRIPT DEBUG YES/SYNC/NO"));
    };
    out.ok();
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

/// Hands a FUNCTION command that changed the libraries to replicas and the AOF, verbatim, as
/// Valkey propagates it.
fn propagate(srv: &Server, sess: &Session, args: &Args<'_>) {
    if srv.ks.sink().active() {
        let mut e = hotkv_engine::Effects::default();
        e.begin(true);
        e.push_parts(sess.db, args.iter());
        srv.ks.sink().append(&e);
    }
}

fn function_help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    reply_help(
        out,
        &args,
        &[
            "LOAD [REPLACE] <FUNCTION CODE>",
            "    Create a new library with the given library name and code.",
            "DELETE <LIBRARY NAME>",
            "    Delete the given library.",
            "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
            "    Return general information on all the libraries:",
            "    * Library name",
            "    * The engine used to run the Library",
            "    * Library description",
            "    * Functions list",
            "    * Library code (if WITHCODE is given)",
            "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
            "STATS",
            "    Return information about the current function running:",
            "    * Function name",
            "    * Command used to run the function",
            "    * Duration in MS that the function is running",
            "    If no function is running, return nil",
            "    In addition, returns a list of available engines.",
            "KILL",
            "    Kill the current running function.",
            "FLUSH [ASYNC|SYNC]",
            "    Delete all the libraries.",
            "    When called without the optional mode argument, the behavior is determined by the",
            "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
            "    * ASYNC: Asynchronously flush the libraries.",
            "    * SYNC: Synchronously flush the libraries.",
            "DUMP",
            "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE command",
            "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
            "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
            "    control how to handle existing libraries (default APPEND):",
            "    * FLUSH: delete all existing libraries.",
            "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
            "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
            "      libraries with the new libraries (notice that even on this option there is a chance of failure",
            "      in case of functions name collision with another library).",
        ],
    );
    Ok(Flow::Continue)
}

fn function_load(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let mut replace = false;
    let mut at = 2;
    while at < args.len() - 1 {
        if args.get(at).eq_ignore_ascii_case(b"replace") {
            replace = true;
            at += 1;
            continue;
        }
        return Err(CommandError::err(format!("Unknown option given: {}", String::from_utf8_lossy(args.get(at)))));
    }
    if at >= args.len() {
        return Err(CommandError::err("Function code is missing"));
    }
    let name = srv.functions.load(args.get(at), replace, crate::script::compile_library).map_err(CommandError::err)?;
    propagate(srv, sess, &args);
    out.bulk(name.as_bytes());
    Ok(Flow::Continue)
}

fn function_delete(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let name = String::from_utf8_lossy(args.get(2));
    if !srv.functions.delete(&name) {
        return Err(CommandError::err("Library not found"));
    }
    propagate(srv, sess, &args);
    out.ok();
    Ok(Flow::Continue)
}

fn function_flush(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    match args.len() {
        2 => {}
        3 if args.get(2).eq_ignore_ascii_case(b"sync") || args.get(2).eq_ignore_ascii_case(b"async") => {}
        3 => return Err(CommandError::err("FUNCTION FLUSH only supports SYNC|ASYNC option")),
        _ => return Err(subcommand_syntax_error(&args)),
    }
    srv.functions.flush();
    propagate(srv, sess, &args);
    out.ok();
    Ok(Flow::Continue)
}

fn function_kill(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    srv.script_runs.kill(true)?;
    out.ok();
    Ok(Flow::Continue)
}

fn function_list(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let (mut with_code, mut pattern): (bool, Option<&[u8]>) = (false, None);
    let mut i = 2;
    while i < args.len() {
        let a = args.get(i);
        if !with_code && a.eq_ignore_ascii_case(b"withcode") {
            with_code = true;
        } else if pattern.is_none() && a.eq_ignore_ascii_case(b"libraryname") {
            if i + 1 >= args.len() {
                return Err(CommandError::err("library name argument was not given"));
            }
            i += 1;
            pattern = Some(args.get(i));
        } else {
            return Err(CommandError::err(format!("Unknown argument {}", String::from_utf8_lossy(a))));
        }
        i += 1;
    }
    let libs: Vec<_> = srv
        .functions
        .libraries()
        .into_iter()
        .filter(|l| pattern.is_none_or(|p| hotkv_engine::glob::matches(p, l.name.as_bytes(), true)))
        .collect();
    out.array(libs.len());
    for lib in libs {
        out.map(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(lib.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array(lib.functions.len());
        for f in &lib.functions {
            out.map(3);
            out.bulk(b"name");
            out.bulk(f.name.as_bytes());
            out.bulk(b"description");
            match &f.description {
                Some(d) => out.bulk(d.as_bytes()),
                None => out.null(),
            }
            out.bulk(b"flags");
            let names: Vec<&str> =
                hotkv_scripting::flag::NAMES.iter().filter(|(bit, _)| f.flags & bit != 0).map(|(_, n)| *n).collect();
            out.set(names.len());
            for n in names {
                out.bulk(n.as_bytes());
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&lib.code);
        }
    }
    Ok(Flow::Continue)
}

fn function_dump(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let libs = srv.functions.libraries();
    out.bulk(&hotkv_engine::rdb::dump_functions(libs.iter().map(|l| &*l.code)));
    Ok(Flow::Continue)
}

fn function_restore(
    srv: &Server,
    sess: &mut Session,
    args: Args<'_>,
    out: &mut ReplyBuf,
) -> Result<Flow, CommandError> {
    use hotkv_scripting::RestorePolicy;
    let policy = match args.len() {
        3 => RestorePolicy::Append,
        4 => match args.get(3).to_ascii_lowercase().as_slice() {
            b"append" => RestorePolicy::Append,
            b"replace" => RestorePolicy::Replace,
            b"flush" => RestorePolicy::Flush,
            _ => {
                return Err(CommandError::err(
                    "Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.",
                ));
            }
        },
        _ => return Err(subcommand_syntax_error(&args)),
    };
    let max = srv.rt.load().proto_max_bulk_len;
    let codes = hotkv_engine::rdb::restore_functions(args.get(2), max).map_err(|e| CommandError::err(e.to_string()))?;
    srv.functions.restore(&codes, policy, crate::script::compile_library).map_err(CommandError::err)?;
    propagate(srv, sess, &args);
    out.ok();
    Ok(Flow::Continue)
}

fn function_stats(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.map(2);
    out.bulk(b"running_script");
    match srv.script_runs.running() {
        None => out.null(),
        Some((name, command, ms)) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(name.as_bytes());
            out.bulk(b"command");
            out.array(command.len());
            for a in &command {
                out.bulk(a);
            }
            out.bulk(b"duration_ms");
            out.int(ms as i64);
        }
    }
    let (libraries, functions) = srv.functions.counts();
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(libraries as i64);
    out.bulk(b"functions_count");
    out.int(functions as i64);
    Ok(Flow::Continue)
}
