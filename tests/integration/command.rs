//! COMMAND COUNT/INFO/GETKEYS/DOCS/LIST (what cluster clients and redis-cli read) and the
//! unknown-command errors.

use std::collections::BTreeSet;

use hotkv_test_support::Frame;

use crate::{assert_err, server};

/// The names of a reply's array of commands (COMMAND, COMMAND LIST).
fn names(reply: &Frame) -> BTreeSet<String> {
    reply
        .items()
        .iter()
        .map(|f| match f {
            Frame::Array(row) => row[0].text(),
            other => other.text(),
        })
        .collect()
}

fn texts(f: &Frame) -> Vec<String> {
    f.items().iter().map(Frame::text).collect()
}

#[test]
fn command_count_matches_the_command_table() {
    let srv = server();
    let mut c = srv.client();
    let count = c.cmd(&["COMMAND", "COUNT"]).int();
    let all = c.cmd(&["COMMAND"]);
    assert_eq!(all.items().len() as i64, count);
    let all = names(&all);
    for cmd in ["get", "set", "del", "scan", "ping", "config", "info", "client", "command"] {
        assert!(all.contains(cmd), "COMMAND lacks {cmd}");
    }
}

#[test]
fn command_info_describes_arity_flags_and_key_positions() {
    let srv = server();
    let mut c = srv.client();
    let reply = c.cmd(&["COMMAND", "INFO", "get", "set", "mset", "nosuchcommand"]);
    let rows = reply.items();
    assert_eq!(rows.len(), 4);
    let get = rows[0].items();
    assert_eq!(get[0], Frame::bulk("get"));
    assert_eq!(get[1], Frame::Integer(2));
    let flags = texts(&get[2]);
    assert!(flags.contains(&"readonly".into()) && flags.contains(&"fast".into()), "get flags {flags:?}");
    assert_eq!(&get[3..6], &[Frame::Integer(1), Frame::Integer(1), Frame::Integer(1)]);
    let acl = texts(&get[6]);
    assert!(acl.contains(&"@read".into()) && acl.contains(&"@string".into()), "get ACL categories {acl:?}");
    assert_eq!(get.len(), 10, "Valkey 7+ rows have 10 fields: {}", rows[0]);

    let set = rows[1].items();
    assert_eq!(set[1], Frame::Integer(-3));
    let flags = texts(&set[2]);
    assert!(flags.contains(&"write".into()) && flags.contains(&"denyoom".into()), "set flags {flags:?}");

    let mset = rows[2].items();
    assert_eq!(&mset[3..6], &[Frame::Integer(1), Frame::Integer(-1), Frame::Integer(2)]);
    assert_eq!(rows[3], Frame::NullBulk, "an unknown command is a null entry");
}

#[test]
fn command_getkeys_extracts_the_keys_of_a_call() {
    let srv = server();
    let mut c = srv.client();
    let keys = |c: &mut hotkv_test_support::RawClient, args: &[&str]| {
        let mut full = vec!["COMMAND", "GETKEYS"];
        full.extend_from_slice(args);
        texts(&c.cmd(&full))
    };
    assert_eq!(keys(&mut c, &["SET", "k", "v"]), ["k"]);
    assert_eq!(keys(&mut c, &["MSET", "a", "1", "b", "2"]), ["a", "b"]);
    assert_eq!(keys(&mut c, &["DEL", "x", "y", "z"]), ["x", "y", "z"]);
    assert_eq!(keys(&mut c, &["COPY", "src", "dst"]), ["src", "dst"]);
}

#[test]
fn command_getkeys_rejects_bad_calls() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["COMMAND", "GETKEYS", "nosuch", "k"]), "ERR Invalid command specified");
    assert_err(&c.cmd(&["COMMAND", "GETKEYS", "PING"]), "ERR The command has no key arguments");
    assert_err(&c.cmd(&["COMMAND", "GETKEYS", "GET"]), "ERR Invalid number of arguments specified for command");
}

#[test]
fn command_docs_give_a_summary() {
    let srv = server();
    let mut c = srv.client();
    let reply = c.cmd(&["COMMAND", "DOCS", "get"]);
    let doc = reply.field("get").unwrap_or_else(|| panic!("COMMAND DOCS get: {reply}"));
    assert!(doc.field("summary").is_some_and(|s| !s.text().is_empty()), "no summary in {doc}");
    assert_eq!(doc.field("group"), Some(Frame::bulk("string")));
}

#[test]
fn command_list_filters_by_pattern() {
    let srv = server();
    let mut c = srv.client();
    let all = names(&c.cmd(&["COMMAND", "LIST"]));
    assert!(all.contains("get") && all.contains("set"));
    let s = names(&c.cmd(&["COMMAND", "LIST", "FILTERBY", "PATTERN", "s*"]));
    assert!(s.contains("set") && s.contains("scan"));
    assert!(s.iter().all(|n| n.starts_with('s')), "{s:?}");
}

#[test]
fn unknown_commands_quote_the_first_arguments() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["NOSUCHCMD", "a", "b"]), "ERR unknown command 'NOSUCHCMD', with args beginning with: 'a' 'b' ");
    assert_err(&c.cmd(&["nosuchcmd"]), "ERR unknown command 'nosuchcmd', with args beginning with: ");
}

#[test]
fn command_names_are_case_insensitive() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["sEt", "k", "v"]), Frame::ok());
    assert_eq!(c.cmd(&["gEt", "k"]), Frame::bulk("v"));
    assert_eq!(c.cmd(&["pInG"]), Frame::simple("PONG"));
}
