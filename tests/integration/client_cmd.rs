//! CLIENT SETNAME/GETNAME/ID/INFO/LIST/KILL as clients and operators use them.

use std::time::Duration;

use hotkv_test_support::{Frame, RawClient, wait_for};

use crate::{assert_err, ok, server};

/// The CLIENT LIST line whose `addr=` is `c`'s local address.
fn line_of(list: &str, c: &RawClient) -> Option<String> {
    let addr = format!("addr={} ", c.local_addr());
    list.lines().find(|l| l.contains(&addr)).map(str::to_string)
}

/// The value of `field=` in a CLIENT LIST line.
fn field(line: &str, name: &str) -> String {
    let prefix = format!("{name}=");
    line.split(' ')
        .find_map(|kv| kv.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {name}= in {line:?}"))
        .to_string()
}

#[test]
fn setname_and_getname() {
    let srv = server();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), Frame::NullBulk);
    ok(&mut c, &["CLIENT", "SETNAME", "worker-1"]);
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), Frame::bulk("worker-1"));
    // An empty name clears it.
    ok(&mut c, &["CLIENT", "SETNAME", ""]);
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), Frame::NullBulk);
}

#[test]
fn setname_refuses_spaces_and_newlines() {
    let srv = server();
    let mut c = srv.client();
    for bad in ["foo bar", "foo\nbar"] {
        assert_err(
            &c.cmd(&["CLIENT", "SETNAME", bad]),
            "ERR Client names cannot contain spaces, newlines or special characters.",
        );
    }
}

#[test]
fn client_list_describes_each_connection() {
    let srv = server();
    let mut c = srv.client();
    let mut other = srv.client();
    // A round trip proves the server has accepted it before we list clients.
    assert_eq!(other.cmd(&["PING"]), Frame::simple("PONG"));
    ok(&mut c, &["CLIENT", "SETNAME", "lister"]);
    ok(&mut c, &["SELECT", "2"]);
    let id = c.cmd(&["CLIENT", "ID"]).int();
    let list = c.cmd(&["CLIENT", "LIST"]).text();
    let mine = line_of(&list, &c).unwrap_or_else(|| panic!("own connection missing from CLIENT LIST:\n{list}"));
    assert_eq!(field(&mine, "id"), id.to_string());
    assert_eq!(field(&mine, "name"), "lister");
    assert_eq!(field(&mine, "db"), "2");
    assert_eq!(field(&mine, "cmd"), "client|list");
    assert_eq!(field(&mine, "flags"), "N");
    assert_eq!(field(&mine, "resp"), "2");
    assert_eq!(field(&mine, "laddr"), format!("127.0.0.1:{}", srv.port()));
    let theirs = line_of(&list, &other).expect("the other connection is listed");
    assert_eq!(field(&theirs, "name"), "", "an unnamed client shows an empty name=");
    // CLIENT INFO is the same line for the calling connection.
    let info = c.cmd(&["CLIENT", "INFO"]).text();
    assert_eq!(field(&info, "id"), id.to_string());
    assert_eq!(field(&info, "cmd"), "client|info");
}

#[test]
fn client_list_filters_by_id_and_type() {
    let srv = server();
    let mut c = srv.client();
    let mut other = srv.client();
    // A round trip proves the server has accepted it before we list clients.
    assert_eq!(other.cmd(&["PING"]), Frame::simple("PONG"));
    let id = c.cmd(&["CLIENT", "ID"]).int();
    let list = c.cmd(&["CLIENT", "LIST", "ID", &id.to_string()]).text();
    assert_eq!(list.lines().count(), 1, "CLIENT LIST ID {id}:\n{list}");
    assert!(line_of(&list, &other).is_none());
    let normal = c.cmd(&["CLIENT", "LIST", "TYPE", "normal"]).text();
    assert!(normal.lines().count() >= 2);
    assert_err(&c.cmd(&["CLIENT", "LIST", "TYPE", "bogus"]), "ERR Unknown client type 'bogus'");
}

#[test]
fn a_closed_connection_leaves_client_list() {
    let srv = server();
    let mut c = srv.client();
    {
        let mut gone = srv.client();
        ok(&mut gone, &["CLIENT", "SETNAME", "leaving"]);
    }
    assert!(
        wait_for(|| !c.cmd(&["CLIENT", "LIST"]).text().contains("name=leaving "), Duration::from_secs(5)),
        "a disconnected client is still listed"
    );
}

#[test]
fn client_kill_by_address_closes_that_connection() {
    let srv = server();
    let mut admin = srv.client();
    let mut victim = srv.client();
    assert_eq!(victim.cmd(&["PING"]), Frame::simple("PONG"));
    let addr = victim.local_addr().to_string();
    ok(&mut admin, &["CLIENT", "KILL", &addr]);
    assert!(victim.closed_within(Duration::from_secs(5)), "the killed client is still connected");
    assert_err(&admin.cmd(&["CLIENT", "KILL", &addr]), "ERR No such client");
    assert_err(&admin.cmd(&["CLIENT", "KILL", "127.0.0.1:"]), "ERR No such client");
}

#[test]
fn client_kill_with_filters_counts_the_killed() {
    let srv = server();
    let mut admin = srv.client();
    let mut victim = srv.client();
    let id = victim.cmd(&["CLIENT", "ID"]).int();
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", &id.to_string()]), Frame::Integer(1));
    assert!(victim.closed_within(Duration::from_secs(5)));
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ID", &id.to_string()]), Frame::Integer(0));
    let mut other = srv.client();
    // A round trip proves the server has accepted the connection before we kill it.
    assert_eq!(other.cmd(&["PING"]), Frame::simple("PONG"));
    let addr = other.local_addr().to_string();
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "ADDR", &addr, "SKIPME", "yes"]), Frame::Integer(1));
    assert!(other.closed_within(Duration::from_secs(5)));
    assert_eq!(admin.cmd(&["PING"]), Frame::simple("PONG"), "the admin connection survives");
}

#[test]
fn client_kill_rejects_illegal_arguments() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["CLIENT", "KILL"]), "ERR wrong number of arguments for 'client|kill' command");
    assert_err(&c.cmd(&["CLIENT", "KILL", "ID", "10", "wrong_arg"]), "ERR syntax error");
    assert_err(&c.cmd(&["CLIENT", "KILL", "ID", "str"]), "ERR client-id should be greater than 0");
    assert_err(&c.cmd(&["CLIENT", "KILL", "ID", "0"]), "ERR client-id should be greater than 0");
    assert_err(&c.cmd(&["CLIENT", "KILL", "TYPE", "wrong_type"]), "ERR Unknown client type 'wrong_type'");
    assert_err(&c.cmd(&["CLIENT", "KILL", "SKIPME", "maybe"]), "ERR syntax error");
}

#[test]
fn client_ids_increase() {
    let srv = server();
    let a = srv.client().cmd(&["CLIENT", "ID"]).int();
    let b = srv.client().cmd(&["CLIENT", "ID"]).int();
    assert!(b > a, "CLIENT ID {b} after {a}");
}

#[test]
fn hello_setname_names_the_connection() {
    let srv = server();
    let mut c = srv.client();
    let reply = c.cmd(&["HELLO", "2", "SETNAME", "via-hello"]);
    assert!(!reply.is_error(), "HELLO 2 SETNAME: {reply}");
    assert_eq!(c.cmd(&["CLIENT", "GETNAME"]), Frame::bulk("via-hello"));
}

#[test]
fn unknown_client_subcommands_point_to_help() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["CLIENT", "BOGUS"]), "ERR unknown subcommand 'BOGUS'. Try CLIENT HELP.");
    assert!(c.cmd(&["CLIENT", "HELP"]).items().len() > 5);
}
