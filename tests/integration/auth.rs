//! requirepass, AUTH, NOAUTH, WRONGPASS, HELLO AUTH, and authenticating through real clients.

use hotkv_test_support::{Frame, tools};

use crate::{assert_err, ok, redis_conn_url, server, server_with};

const PASS: &str = "s3cret";
const NOAUTH: &str = "NOAUTH Authentication required.";
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

#[test]
fn auth_without_a_configured_password_is_an_error() {
    let srv = server();
    let mut c = srv.client();
    assert_err(
        &c.cmd(&["AUTH", "foo"]),
        "ERR AUTH <password> called without any password configured for the default user. Are you sure your configuration is correct?",
    );
    assert_err(&c.cmd(&["AUTH", "a", "b", "c"]), "ERR syntax error");
}

#[test]
fn commands_are_refused_until_the_client_authenticates() {
    let srv = server_with(&[("requirepass", PASS)]);
    let mut c = srv.client();
    assert_err(&c.cmd(&["GET", "k"]), NOAUTH);
    assert_err(&c.cmd(&["SET", "k", "v"]), NOAUTH);
    assert_err(&c.cmd(&["PING"]), NOAUTH);
    ok(&mut c, &["AUTH", PASS]);
    ok(&mut c, &["SET", "k", "v"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("v"));
}

#[test]
fn a_wrong_password_is_wrongpass_and_changes_nothing() {
    let srv = server_with(&[("requirepass", PASS)]);
    let mut c = srv.client();
    assert_err(&c.cmd(&["AUTH", "wrong!"]), WRONGPASS);
    assert_err(&c.cmd(&["AUTH", "default", "wrong!"]), WRONGPASS);
    assert_err(&c.cmd(&["AUTH", "nobody", PASS]), WRONGPASS);
    assert_err(&c.cmd(&["GET", "k"]), NOAUTH);
}

#[test]
fn auth_accepts_the_default_user_form() {
    let srv = server_with(&[("requirepass", PASS)]);
    let mut c = srv.client();
    ok(&mut c, &["AUTH", "default", PASS]);
    assert_eq!(c.cmd(&["PING"]), Frame::simple("PONG"));
}

#[test]
fn hello_auth_authenticates_and_switches_protocol_at_once() {
    let srv = server_with(&[("requirepass", PASS)]);
    let mut c = srv.client();
    assert_err(
        &c.cmd(&["HELLO", "3"]),
        "NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO <proto> AUTH <user> <pass> option can be used to authenticate the client and select the RESP protocol version at the same time",
    );
    assert_err(&c.cmd(&["HELLO", "3", "AUTH", "default", "wrong"]), WRONGPASS);
    let reply = c.cmd(&["HELLO", "3", "AUTH", "default", PASS]);
    assert_eq!(reply.field("proto"), Some(Frame::Integer(3)), "HELLO 3 AUTH reply: {reply}");
    assert_eq!(c.cmd(&["GET", "missing"]), Frame::Null, "now authenticated and speaking RESP3");
}

#[test]
fn reset_logs_the_client_out_again() {
    let srv = server_with(&[("requirepass", PASS)]);
    let mut c = srv.client();
    ok(&mut c, &["AUTH", PASS]);
    assert_eq!(c.cmd(&["RESET"]), Frame::simple("RESET"));
    assert_err(&c.cmd(&["GET", "k"]), NOAUTH);
}

#[test]
fn quit_needs_no_authentication() {
    let srv = server_with(&[("requirepass", PASS)]);
    let mut c = srv.client();
    assert_eq!(c.cmd(&["QUIT"]), Frame::ok());
    assert!(c.closed_within(std::time::Duration::from_secs(5)));
}

#[test]
fn the_redis_crate_authenticates_from_the_url() {
    let srv = server_with(&[("requirepass", PASS)]);
    let port = srv.port();
    let mut con = redis_conn_url(&format!("redis://:{PASS}@127.0.0.1:{port}/"));
    let () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let mut con = redis_conn_url(&format!("redis://default:{PASS}@127.0.0.1:{port}/?protocol=resp3"));
    let v: String = redis::cmd("GET").arg("k").query(&mut con).unwrap();
    assert_eq!(v, "v");
    // A wrong password fails the connection, not a later command.
    let client = redis::Client::open(format!("redis://:wrong@127.0.0.1:{port}/")).unwrap();
    let err = client.get_connection_with_timeout(std::time::Duration::from_secs(10)).err().expect("must fail");
    assert_eq!(err.kind(), redis::ErrorKind::AuthenticationFailed, "unexpected error: {err}");
}

#[test]
fn redis_cli_authenticates_with_dash_a() {
    let srv = server_with(&[("requirepass", PASS)]);
    assert_eq!(tools::redis_cli(srv.port(), &["-a", PASS, "--no-auth-warning", "PING"]), "PONG\n");
    let denied = tools::redis_cli(srv.port(), &["PING"]);
    assert!(denied.contains("NOAUTH"), "redis-cli without -a: {denied:?}");
}

#[test]
fn redis_py_authenticates_with_a_password() {
    let srv = server_with(&[("requirepass", PASS)]);
    let out = tools::python(
        srv.port(),
        &format!(
            "r = redis.Redis(port=PORT, password={PASS:?})\nprint(r.ping())\n\
             try:\n    redis.Redis(port=PORT, password='bad').ping()\nexcept redis.AuthenticationError:\n    print('denied')"
        ),
    );
    assert_eq!(out, "True\ndenied\n");
}

#[test]
fn config_set_requirepass_applies_to_new_connections() {
    let srv = server();
    let mut admin = srv.client();
    ok(&mut admin, &["CONFIG", "SET", "requirepass", PASS]);
    // Already connected clients stay authenticated, as in Valkey.
    assert_eq!(admin.cmd(&["PING"]), Frame::simple("PONG"));
    let mut fresh = srv.client();
    assert_err(&fresh.cmd(&["GET", "k"]), NOAUTH);
    ok(&mut fresh, &["AUTH", PASS]);
    ok(&mut admin, &["CONFIG", "SET", "requirepass", ""]);
    assert_eq!(srv.client().cmd(&["PING"]), Frame::simple("PONG"));
}
