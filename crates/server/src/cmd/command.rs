//! COMMAND and its subcommands: the command table as clients and cluster proxies read it
//! (COMMAND INFO/DOCS/LIST/COUNT/GETKEYS), with Valkey 8.0's reply shapes in RESP2 and RESP3.

use hotkv_engine::CommandError;
use hotkv_engine::command::{ArgSpec, BeginSearch, CommandSpec, FindKeys, KeySpec, acl, flags as f, key_flags};
use hotkv_protocol::{Args, ReplyBuf};

use super::{reply_help, row, subcommand_syntax_error};
use crate::registry::{Flow, Lookup, Registry, ServerSpec, Spec};
use crate::server::Server;
use crate::session::Session;

const RO: u32 = f::LOADING | f::STALE;
const CONN: u32 = acl::CONNECTION;

/// COMMAND rows: a command with its own handler (bare COMMAND) and subcommands.
pub static COMMANDS: &[ServerSpec] = &[CommandSpec {
    subcommands: &[
        row("count", 2, RO, CONN, &[], "server", "2.8.13", "Returns a count of commands.", "O(1)", count),
        row(
            "docs",
            -2,
            RO,
            CONN,
            &[],
            "server",
            "7.0.0",
            "Returns documentary information about one, multiple or all commands.",
            "O(N) where N is the number of commands to look up",
            docs,
        )
        .with_tips(&["nondeterministic_output_order"]),
        row(
            "getkeys",
            -3,
            RO,
            CONN,
            &[],
            "server",
            "2.8.13",
            "Extracts the key names from an arbitrary command.",
            "O(N) where N is the number of arguments to the command",
            getkeys,
        ),
        row(
            "getkeysandflags",
            -3,
            RO,
            CONN,
            &[],
            "server",
            "7.0.0",
            "Extracts the key names and access flags for an arbitrary command.",
            "O(N) where N is the number of arguments to the command",
            getkeysandflags,
        ),
        row(
            "help",
            2,
            RO,
            CONN,
            &[],
            "server",
            "5.0.0",
            "Returns helpful text about the different subcommands.",
            "O(1)",
            help,
        ),
        row(
            "info",
            -2,
            RO,
            CONN,
            &[],
            "server",
            "2.8.13",
            "Returns information about one, multiple or all commands.",
            "O(N) where N is the number of commands to look up",
            info,
        )
        .with_tips(&["nondeterministic_output_order"]),
        row(
            "list",
            -2,
            RO,
            CONN,
            &[],
            "server",
            "7.0.0",
            "Returns a list of command names.",
            "O(N) where N is the total number of commands",
            list,
        )
        .with_tips(&["nondeterministic_output_order"]),
    ],
    ..row(
        "command",
        -1,
        RO,
        CONN,
        &[],
        "server",
        "2.8.13",
        "Returns detailed information about all commands.",
        "O(N) where N is the total number of commands",
        all,
    )
    .with_tips(&["nondeterministic_output_order"])
}];

/// The legacy (first, last, step) triple and whether key positions are "movable", derived
/// from the key specs exactly as Valkey's `populateCommandLegacyRangeSpec` does (INCOMPLETE
/// specs, steps other than 1 and non-adjacent ranges all make a command movable).
pub fn legacy_range(specs: &[KeySpec]) -> ((i32, i32, i32), bool) {
    let abs_last = |pos: i32, last_key: i32| if last_key >= 0 { pos + last_key } else { last_key };
    if specs.is_empty() {
        return ((0, 0, 0), false);
    }
    // The quick case: exactly one index/range spec is the legacy range as it is.
    if let [ks] = specs
        && let (BeginSearch::Index(pos), FindKeys::Range { last_key, step, .. }) = (ks.begin, ks.find)
    {
        return ((pos, abs_last(pos, last_key), step), ks.flags & key_flags::INCOMPLETE != 0);
    }
    let (mut first, mut last, mut prev_last, mut movable) = (i32::MAX, 0i32, 0i32, false);
    for ks in specs {
        let (BeginSearch::Index(pos), FindKeys::Range { last_key, step, .. }) = (ks.begin, ks.find) else {
            movable = true;
            continue;
        };
        if step != 1 || (prev_last != 0 && prev_last != pos - 1) {
            movable = true;
            continue;
        }
        movable |= ks.flags & key_flags::INCOMPLETE != 0;
        first = first.min(pos);
        // Valkey compares as unsigned so that a negative (from the end) last key wins.
        last = (last as u32).max(abs_last(pos, last_key) as u32) as i32;
        prev_last = last;
    }
    if first == i32::MAX { ((0, 0, 0), true) } else { ((first, last, 1), movable) }
}

/// The flags COMMAND INFO shows: the row's flags plus `movablekeys`.
pub fn info_flags(spec: &Spec) -> u32 {
    let movable = legacy_range(spec.key_specs()).1;
    spec.flags() | if movable { f::MOVABLE_KEYS } else { 0 }
}

/// Writes a set of status replies for the bits of `bits` named in `names`, in that order.
fn reply_flag_set(out: &mut ReplyBuf, bits: u32, names: &[(u32, &str)], prefix: &str) {
    let n = names.iter().filter(|(b, _)| bits & b != 0).count();
    out.set(n);
    for (b, name) in names {
        if bits & b != 0 {
            out.simple(&format!("{prefix}{name}"));
        }
    }
}

fn reply_key_specs(out: &mut ReplyBuf, specs: &[KeySpec]) {
    out.set(specs.len());
    for ks in specs {
        out.map(3);
        out.bulk(b"flags");
        reply_flag_set(out, ks.flags, key_flags::NAMES, "");
        out.bulk(b"begin_search");
        out.map(2);
        out.bulk(b"type");
        match ks.begin {
            BeginSearch::Index(pos) => {
                out.bulk(b"index");
                out.bulk(b"spec");
                out.map(1);
                out.bulk(b"index");
                out.int(i64::from(pos));
            }
            BeginSearch::Keyword { keyword, start_from } => {
                out.bulk(b"keyword");
                out.bulk(b"spec");
                out.map(2);
                out.bulk(b"keyword");
                out.bulk(keyword.as_bytes());
                out.bulk(b"startfrom");
                out.int(i64::from(start_from));
            }
            BeginSearch::Unknown => {
                out.bulk(b"unknown");
                out.bulk(b"spec");
                out.map(0);
            }
        }
        out.bulk(b"find_keys");
        out.map(2);
        out.bulk(b"type");
        let fields: [(&str, i32); 3] = match ks.find {
            FindKeys::Range { last_key, step, limit } => {
                out.bulk(b"range");
                [("lastkey", last_key), ("keystep", step), ("limit", limit)]
            }
            FindKeys::Keynum { keynum_idx, first_key, step } => {
                out.bulk(b"keynum");
                [("keynumidx", keynum_idx), ("firstkey", first_key), ("keystep", step)]
            }
            FindKeys::Unknown => {
                out.bulk(b"unknown");
                out.bulk(b"spec");
                out.map(0);
                continue;
            }
        };
        out.bulk(b"spec");
        out.map(3);
        for (name, v) in fields {
            out.bulk(name.as_bytes());
            out.int(i64::from(v));
        }
    }
}

/// One COMMAND INFO entry (Valkey's `addReplyCommandInfo`), subcommands included.
pub fn reply_info(out: &mut ReplyBuf, reg: &Registry, id: usize) {
    let cmd = reg.get(id);
    let spec = &cmd.spec;
    let ((first, last, step), _) = legacy_range(spec.key_specs());
    out.array(10);
    out.bulk(cmd.full_name.as_bytes());
    out.int(i64::from(spec.arity()));
    reply_flag_set(out, info_flags(spec), f::NAMES, "");
    out.int(i64::from(first));
    out.int(i64::from(last));
    out.int(i64::from(step));
    reply_flag_set(out, spec.effective_acl(), acl::NAMES, "@");
    out.set(spec.tips().len());
    for t in spec.tips() {
        out.bulk(t.as_bytes());
    }
    reply_key_specs(out, spec.key_specs());
    if cmd.subs.is_empty() {
        // Valkey replies an empty *set* here but an *array* when there are subcommands.
        out.set(0);
    } else {
        out.array(cmd.subs.len());
        for &sub in &cmd.subs {
            reply_info(out, reg, sub);
        }
    }
}

fn reply_args(out: &mut ReplyBuf, args: &[ArgSpec]) {
    const ARG_FLAGS: &[(u32, &str)] = &[(1, "optional"), (2, "multiple"), (4, "multiple_token")];
    out.array(args.len());
    for a in args {
        let nested = matches!(a.kind, "oneof" | "block");
        let len = 2
            + usize::from(!nested)
            + usize::from(a.key_spec_index.is_some())
            + usize::from(a.token.is_some())
            + usize::from(a.flags != 0)
            + usize::from(nested);
        out.map(len);
        out.bulk(b"name");
        out.bulk(a.name.as_bytes());
        out.bulk(b"type");
        out.bulk(a.kind.as_bytes());
        if !nested {
            out.bulk(b"display_text");
            out.bulk(a.name.as_bytes());
        }
        if let Some(i) = a.key_spec_index {
            out.bulk(b"key_spec_index");
            out.int(i64::from(i));
        }
        if let Some(t) = a.token {
            out.bulk(b"token");
            out.bulk(t.as_bytes());
        }
        if a.flags != 0 {
            out.bulk(b"flags");
            reply_flag_set(out, a.flags, ARG_FLAGS, "");
        }
        if nested {
            out.bulk(b"arguments");
            reply_args(out, a.children);
        }
    }
}

/// One COMMAND DOCS value (Valkey's `addReplyCommandDocs`): empty fields are left out.
pub fn reply_docs(out: &mut ReplyBuf, reg: &Registry, id: usize) {
    let cmd = reg.get(id);
    let s = &cmd.spec;
    let text = [("summary", s.summary()), ("since", s.since()), ("group", s.group()), ("complexity", s.complexity())];
    let present = |(k, v): &(&str, &str)| *k == "group" || !v.is_empty();
    let len = text.iter().filter(|t| present(t)).count()
        + usize::from(!s.args().is_empty())
        + usize::from(!cmd.subs.is_empty());
    out.map(len);
    for t in text.iter().filter(|t| present(t)) {
        out.bulk(t.0.as_bytes());
        out.bulk(t.1.as_bytes());
    }
    if !s.args().is_empty() {
        out.bulk(b"arguments");
        reply_args(out, s.args());
    }
    if !cmd.subs.is_empty() {
        out.bulk(b"subcommands");
        out.map(cmd.subs.len());
        for &sub in &cmd.subs {
            out.bulk(reg.get(sub).full_name.as_bytes());
            reply_docs(out, reg, sub);
        }
    }
}

fn all(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let reg = &srv.registry;
    out.array(reg.top_level().count());
    for c in reg.top_level() {
        reply_info(out, reg, c.id);
    }
    Ok(Flow::Continue)
}

fn count(srv: &Server, _: &mut Session, _: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    out.int(srv.registry.top_level().count() as i64);
    Ok(Flow::Continue)
}

fn info(srv: &Server, sess: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if args.len() == 2 {
        return all(srv, sess, args, out);
    }
    let reg = &srv.registry;
    out.array(args.len() - 2);
    for name in args.iter().skip(2) {
        match reg.by_name(&String::from_utf8_lossy(name)) {
            Some(id) => reply_info(out, reg, id),
            None => out.null(),
        }
    }
    Ok(Flow::Continue)
}

fn docs(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let reg = &srv.registry;
    let ids: Vec<usize> = if args.len() == 2 {
        reg.top_level().map(|c| c.id).collect()
    } else {
        // Unknown names are skipped, not answered with nil as in COMMAND INFO.
        args.iter().skip(2).filter_map(|n| reg.by_name(&String::from_utf8_lossy(n))).collect()
    };
    out.map(ids.len());
    for id in ids {
        out.bulk(reg.get(id).full_name.as_bytes());
        reply_docs(out, reg, id);
    }
    Ok(Flow::Continue)
}

/// A COMMAND LIST filter.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Filter {
    None,
    Module,
    AclCat(Option<u32>),
    Pattern(Vec<u8>),
}

fn parse_list_filter(args: &Args<'_>) -> Result<Filter, CommandError> {
    let mut filter = Filter::None;
    let mut i = 2;
    while i < args.len() {
        if !args.get(i).eq_ignore_ascii_case(b"filterby") || args.len() - 1 - i != 2 {
            return Err(CommandError::Syntax);
        }
        let kind = args.get(i + 1);
        let value = args.get(i + 2);
        filter = if kind.eq_ignore_ascii_case(b"module") {
            Filter::Module
        } else if kind.eq_ignore_ascii_case(b"aclcat") {
            Filter::AclCat(acl::NAMES.iter().find(|(_, n)| n.as_bytes().eq_ignore_ascii_case(value)).map(|(b, _)| *b))
        } else if kind.eq_ignore_ascii_case(b"pattern") {
            Filter::Pattern(value.to_vec())
        } else {
            return Err(CommandError::Syntax);
        };
        i += 3;
    }
    Ok(filter)
}

fn list(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    let filter = parse_list_filter(&args)?;
    let names: Vec<&str> = srv
        .registry
        .all()
        .filter(|c| match &filter {
            Filter::None => true,
            // hotkv loads no modules, so no command belongs to one.
            Filter::Module => false,
            Filter::AclCat(cat) => cat.is_some_and(|cat| c.spec.effective_acl() & cat != 0),
            Filter::Pattern(p) => glob_match(p, c.full_name.as_bytes(), true),
        })
        .map(|c| c.full_name.as_str())
        .collect();
    out.array(names.len());
    for n in names {
        out.bulk(n.as_bytes());
    }
    Ok(Flow::Continue)
}

/// Valkey's `stringmatchlen`: glob matching with `*`, `?`, `[...]` (ranges, `^` negation)
/// and `\` escapes.
pub fn glob_match(pattern: &[u8], s: &[u8], nocase: bool) -> bool {
    let eq = |a: u8, b: u8| if nocase { a.eq_ignore_ascii_case(&b) } else { a == b };
    let (mut p, mut i) = (0, 0);
    while p < pattern.len() {
        match pattern[p] {
            b'*' => {
                while p + 1 < pattern.len() && pattern[p + 1] == b'*' {
                    p += 1;
                }
                if p + 1 == pattern.len() {
                    return true;
                }
                return (i..=s.len()).any(|k| glob_match(&pattern[p + 1..], &s[k..], nocase));
            }
            b'?' => {
                if i >= s.len() {
                    return false;
                }
                i += 1;
            }
            b'[' => {
                if i >= s.len() {
                    return false;
                }
                p += 1;
                let negate = p < pattern.len() && pattern[p] == b'^';
                if negate {
                    p += 1;
                }
                let mut matched = false;
                loop {
                    if p >= pattern.len() {
                        p -= 1; // an unterminated class ends the pattern, as in Valkey
                        break;
                    }
                    match pattern[p] {
                        b'\\' if p + 1 < pattern.len() => {
                            p += 1;
                            matched |= eq(pattern[p], s[i]);
                        }
                        b']' => break,
                        c if p + 2 < pattern.len() && pattern[p + 1] == b'-' => {
                            let fold = |b: u8| if nocase { b.to_ascii_lowercase() } else { b };
                            let (mut lo, mut hi) = (fold(c), fold(pattern[p + 2]));
                            if lo > hi {
                                std::mem::swap(&mut lo, &mut hi);
                            }
                            matched |= (lo..=hi).contains(&fold(s[i]));
                            p += 2;
                        }
                        c => matched |= eq(c, s[i]),
                    }
                    p += 1;
                }
                if matched == negate {
                    return false;
                }
                i += 1;
            }
            b'\\' if p + 1 < pattern.len() => {
                p += 1;
                if i >= s.len() || !eq(pattern[p], s[i]) {
                    return false;
                }
                i += 1;
            }
            c => {
                if i >= s.len() || !eq(c, s[i]) {
                    return false;
                }
                i += 1;
            }
        }
        p += 1;
    }
    i == s.len()
}

fn getkeys_impl(srv: &Server, args: &Args<'_>, out: &mut ReplyBuf, with_flags: bool) -> Result<Flow, CommandError> {
    let mut buf = Vec::new();
    let mut spans = Vec::new();
    for a in args.iter().skip(2) {
        spans.push((buf.len(), buf.len() + a.len()));
        buf.extend_from_slice(a);
    }
    let inner = Args::from_parts(&buf, &spans);
    let reg = &srv.registry;
    let Lookup::Found(id) = reg.lookup(&inner) else {
        return Err(CommandError::err("Invalid command specified"));
    };
    let spec = reg.get(id).spec;
    let specs = spec.key_specs();
    if !specs.iter().any(|ks| ks.flags & key_flags::NOT_KEY == 0) {
        return Err(CommandError::err("The command has no key arguments"));
    }
    let (arity, argc) = (spec.arity(), inner.len() as i32);
    if (arity > 0 && arity != argc) || argc < -arity {
        return Err(CommandError::err("Invalid number of arguments specified for command"));
    }
    // Valkey's `getKeysFromCommandWithSpecs`: the row's key specs, through the same function
    // dispatch plans with; an incomplete spec still names the keys it found.
    let mut found = Vec::new();
    let keys = match spec.for_each_key(&inner, |pos, flags| found.push((pos, flags))) {
        Ok(_) if !found.is_empty() => Some(found),
        _ => None,
    };
    let Some(keys) = keys else {
        if spec.flags() & f::NO_MANDATORY_KEYS != 0 {
            out.array(0);
            return Ok(Flow::Continue);
        }
        return Err(CommandError::err("Invalid arguments specified for command"));
    };
    let keys = resolve_variable_flags(spec.name(), &inner, keys);
    out.array(keys.len());
    for (pos, flags) in keys {
        if with_flags {
            out.array(2);
            out.bulk(inner.get(pos));
            reply_flag_set(out, flags, key_flags::NAMES, "");
        } else {
            out.bulk(inner.get(pos));
        }
    }
    Ok(Flow::Continue)
}

/// Key specs marked `variable_flags` have flags that depend on the arguments; Valkey resolves
/// them per command (`setGetKeys`, `bitfieldGetKeys`).
fn resolve_variable_flags(name: &str, args: &Args<'_>, mut keys: Vec<(usize, u32)>) -> Vec<(usize, u32)> {
    match name {
        "set" => {
            let get = args.iter().skip(3).any(|a| a.eq_ignore_ascii_case(b"get"));
            for k in &mut keys {
                k.1 = if get {
                    key_flags::RW | key_flags::ACCESS | key_flags::UPDATE
                } else {
                    key_flags::OW | key_flags::UPDATE
                };
            }
        }
        "bitfield" => {
            let mut i = 2;
            let mut readonly = true;
            while i < args.len() {
                let a = args.get(i);
                if a.eq_ignore_ascii_case(b"set") || a.eq_ignore_ascii_case(b"incrby") {
                    readonly = false;
                    break;
                }
                i += 1;
            }
            for k in &mut keys {
                k.1 = if readonly {
                    key_flags::RO | key_flags::ACCESS
                } else {
                    key_flags::RW | key_flags::ACCESS | key_flags::UPDATE
                };
            }
        }
        _ => {}
    }
    keys
}

fn getkeys(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    getkeys_impl(srv, &args, out, false)
}

fn getkeysandflags(srv: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    getkeys_impl(srv, &args, out, true)
}

fn help(_: &Server, _: &mut Session, args: Args<'_>, out: &mut ReplyBuf) -> Result<Flow, CommandError> {
    if args.len() != 2 {
        return Err(subcommand_syntax_error(&args));
    }
    reply_help(
        out,
        &args,
        &[
            "(no subcommand)",
            "    Return details about all commands.",
            "COUNT",
            "    Return the total number of commands in this server.",
            "LIST",
            "    Return a list of all commands in this server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full command.",
        ],
    );
    Ok(Flow::Continue)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::testutil::{client, server};
    use hotkv_engine::command::key_flags as kf;

    const GET_INFO: &str = "*10\r\n$3\r\nget\r\n:2\r\n*2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@read\r\n+@string\r\n+@fast\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n*2\r\n+RO\r\n+access\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n";
    // Valkey's reply for SET, less the key spec's `notes` field hotkv rows do not carry.
    const SET_INFO: &str = "*10\r\n$3\r\nset\r\n:-3\r\n*2\r\n+write\r\n+denyoom\r\n:1\r\n:1\r\n:1\r\n*3\r\n+@write\r\n+@string\r\n+@slow\r\n*0\r\n*1\r\n*6\r\n$5\r\nflags\r\n*4\r\n+RW\r\n+access\r\n+update\r\n+variable_flags\r\n$12\r\nbegin_search\r\n*4\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n*2\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n*4\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n*6\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n*0\r\n";
    const GET_INFO_RESP3: &str = "*1\r\n*10\r\n$3\r\nget\r\n:2\r\n~2\r\n+readonly\r\n+fast\r\n:1\r\n:1\r\n:1\r\n~3\r\n+@read\r\n+@string\r\n+@fast\r\n~0\r\n~1\r\n%3\r\n$5\r\nflags\r\n~2\r\n+RO\r\n+access\r\n$12\r\nbegin_search\r\n%2\r\n$4\r\ntype\r\n$5\r\nindex\r\n$4\r\nspec\r\n%1\r\n$5\r\nindex\r\n:1\r\n$9\r\nfind_keys\r\n%2\r\n$4\r\ntype\r\n$5\r\nrange\r\n$4\r\nspec\r\n%3\r\n$7\r\nlastkey\r\n:0\r\n$7\r\nkeystep\r\n:1\r\n$5\r\nlimit\r\n:0\r\n~0\r\n";

    #[test]
    fn info_bytes_equal_valkeys() {
        let srv = server();
        let mut c = client(&srv, 45000);
        assert_eq!(
            c.run(&srv, &["command", "info", "get", "SET", "nosuch"]),
            format!("*3\r\n{GET_INFO}{SET_INFO}$-1\r\n")
        );
        c.run(&srv, &["hello", "3"]);
        assert_eq!(c.run(&srv, &["command", "info", "get"]), GET_INFO_RESP3);
        assert_eq!(c.run(&srv, &["command", "info", "nosuch"]), "*1\r\n_\r\n");
    }

    #[test]
    fn containers_list_their_subcommands() {
        let srv = server();
        let mut c = client(&srv, 45001);
        let r = c.run(&srv, &["command", "info", "client"]);
        assert!(
            r.starts_with("*1\r\n*10\r\n$6\r\nclient\r\n:-2\r\n*0\r\n:0\r\n:0\r\n:0\r\n*1\r\n+@slow\r\n*0\r\n*0\r\n*"),
            "{r}"
        );
        assert!(r.contains("$11\r\nclient|list\r\n:-2\r\n*4\r\n+admin\r\n+noscript\r\n+loading\r\n+stale\r\n"), "{r}");
        assert!(
            r.contains(
                "*4\r\n+@admin\r\n+@slow\r\n+@dangerous\r\n+@connection\r\n*1\r\n$23\r\nnondeterministic_output\r\n"
            ),
            "{r}"
        );
        let r = c.run(&srv, &["command", "info", "client|id"]);
        assert!(r.starts_with("*1\r\n*10\r\n$9\r\nclient|id\r\n:2\r\n"), "{r}");
        let n = srv.registry.top_level().count();
        assert_eq!(c.run(&srv, &["command", "count"]), format!(":{n}\r\n"));
        assert!(c.run(&srv, &["command"]).starts_with(&format!("*{n}\r\n*10\r\n")));
    }

    #[test]
    fn docs_shape() {
        let srv = server();
        let mut c = client(&srv, 45002);
        assert_eq!(c.run(&srv, &["command", "docs", "nosuch"]), "*0\r\n");
        let r = c.run(&srv, &["command", "docs", "time"]);
        assert_eq!(
            r,
            "*2\r\n$4\r\ntime\r\n*8\r\n$7\r\nsummary\r\n$24\r\nReturns the server time.\r\n$5\r\nsince\r\n$5\r\n2.6.0\r\n$5\r\ngroup\r\n$6\r\nserver\r\n$10\r\ncomplexity\r\n$4\r\nO(1)\r\n"
        );
        c.run(&srv, &["hello", "3"]);
        let r = c.run(&srv, &["command", "docs", "slowlog"]);
        assert!(r.starts_with("%1\r\n$7\r\nslowlog\r\n%5\r\n"), "{r}");
        assert!(r.contains("$11\r\nsubcommands\r\n%4\r\n$11\r\nslowlog|get\r\n%4\r\n"), "{r}");
        // MONITOR has no complexity in Valkey's table, so the field is left out.
        assert!(c.run(&srv, &["command", "docs", "monitor"]).starts_with("%1\r\n$7\r\nmonitor\r\n%3\r\n"));
    }

    #[test]
    fn list_and_filters() {
        let srv = server();
        let mut c = client(&srv, 45003);
        let all = c.run(&srv, &["command", "list"]);
        assert!(all.starts_with(&format!("*{}\r\n", srv.registry.len())) && all.contains("$11\r\nclient|list\r\n"));
        assert_eq!(
            c.run(&srv, &["command", "list", "filterby", "pattern", "CLIENT|L*"]),
            "*1\r\n$11\r\nclient|list\r\n"
        );
        let r = c.run(&srv, &["command", "list", "filterby", "aclcat", "STRING"]);
        assert!(r.contains("$3\r\nget\r\n") && !r.contains("ping"), "{r}");
        assert_eq!(c.run(&srv, &["command", "list", "filterby", "aclcat", "nosuch"]), "*0\r\n");
        assert_eq!(c.run(&srv, &["command", "list", "filterby", "module", "x"]), "*0\r\n");
        assert_eq!(c.run(&srv, &["command", "list", "filterby", "other", "x"]), "-ERR syntax error\r\n");
        assert_eq!(c.run(&srv, &["command", "list", "filterby", "pattern"]), "-ERR syntax error\r\n");
    }

    #[test]
    fn getkeys_errors_and_flags() {
        let srv = server();
        let mut c = client(&srv, 45004);
        assert_eq!(c.run(&srv, &["command", "getkeys", "get", "k"]), "*1\r\n$1\r\nk\r\n");
        assert_eq!(c.run(&srv, &["command", "getkeys", "del", "a", "b"]), "*2\r\n$1\r\na\r\n$1\r\nb\r\n");
        assert_eq!(
            c.run(&srv, &["command", "getkeysandflags", "set", "k", "v"]),
            "*1\r\n*2\r\n$1\r\nk\r\n*2\r\n+OW\r\n+update\r\n"
        );
        assert_eq!(
            c.run(&srv, &["command", "getkeysandflags", "set", "k", "v", "get"]),
            "*1\r\n*2\r\n$1\r\nk\r\n*3\r\n+RW\r\n+access\r\n+update\r\n"
        );
        assert_eq!(c.run(&srv, &["command", "getkeys", "nosuch", "k"]), "-ERR Invalid command specified\r\n");
        assert_eq!(c.run(&srv, &["command", "getkeys", "client", "nosuch"]), "-ERR Invalid command specified\r\n");
        assert_eq!(c.run(&srv, &["command", "getkeys", "ping", "x"]), "-ERR The command has no key arguments\r\n");
        assert_eq!(
            c.run(&srv, &["command", "getkeys", "get", "a", "b"]),
            "-ERR Invalid number of arguments specified for command\r\n"
        );
        assert_eq!(
            c.run(&srv, &["command", "getkeys"]),
            "-ERR wrong number of arguments for 'command|getkeys' command\r\n"
        );
        assert_eq!(c.run(&srv, &["command", "nosuch"]), "-ERR unknown subcommand 'nosuch'. Try COMMAND HELP.\r\n");
        assert!(c.run(&srv, &["command", "help"]).starts_with("*21\r\n+COMMAND <subcommand>"));
    }

    #[test]
    fn legacy_ranges_follow_valkey() {
        let one = |i| KeySpec::single(i, kf::RW);
        static MSET: [KeySpec; 1] = [KeySpec::range(1, -1, 2, kf::OW)];
        assert_eq!(legacy_range(&MSET), ((1, -1, 2), false));
        assert_eq!(legacy_range(&[one(1), one(2)]), ((1, 2, 1), false));
        // Not adjacent: the second spec is skipped and the command is movable.
        assert_eq!(legacy_range(&[one(1), one(3)]), ((1, 1, 1), true));
        let kw = KeySpec {
            flags: kf::RO,
            begin: BeginSearch::Keyword { keyword: "STREAMS", start_from: 1 },
            find: FindKeys::Range { last_key: -1, step: 1, limit: 2 },
        };
        assert_eq!(legacy_range(&[kw]), ((0, 0, 0), true));
        let numkeys = KeySpec {
            flags: kf::RO,
            begin: BeginSearch::Index(2),
            find: FindKeys::Keynum { keynum_idx: 0, first_key: 1, step: 1 },
        };
        assert_eq!(legacy_range(&[one(1), numkeys]), ((1, 1, 1), true));
        let incomplete = KeySpec::single(1, kf::RO | kf::INCOMPLETE);
        assert_eq!(legacy_range(&[incomplete]), ((1, 1, 1), true));
    }

    #[test]
    fn globs() {
        assert!(glob_match(b"*", b"", false));
        assert!(glob_match(b"h?llo", b"hello", false));
        assert!(glob_match(b"h[ae]llo", b"hallo", false) && !glob_match(b"h[ae]llo", b"hillo", false));
        assert!(glob_match(b"h[^e]llo", b"hallo", false) && !glob_match(b"h[^e]llo", b"hello", false));
        assert!(glob_match(b"h[a-b]llo", b"hbllo", false));
        assert!(glob_match(b"CONFIG|*", b"config|get", true) && !glob_match(b"CONFIG|*", b"config|get", false));
        assert!(glob_match(b"a\\*b", b"a*b", false) && !glob_match(b"a\\*b", b"axb", false));
        assert!(glob_match(b"*a*b*", b"xxaxxbxx", false));
    }
}
