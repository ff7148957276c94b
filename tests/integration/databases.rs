//! Numbered databases: SELECT, MOVE, SWAPDB, FLUSHALL, and the `databases` directive.

use hotkv_test_support::Frame;

use crate::{assert_err, ok, redis_conn_url, server, server_with};

#[test]
fn select_isolates_keyspaces() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "db0"]);
    ok(&mut c, &["SELECT", "1"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk);
    ok(&mut c, &["SET", "k", "db1"]);
    ok(&mut c, &["SELECT", "0"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("db0"));
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(1));
    // Each connection starts in database 0.
    assert_eq!(srv.client().cmd(&["GET", "k"]), Frame::bulk("db0"));
}

#[test]
fn select_rejects_out_of_range_and_non_numeric_indexes() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["SELECT", "16"]), "ERR DB index is out of range");
    assert_err(&c.cmd(&["SELECT", "-1"]), "ERR DB index is out of range");
    assert_err(&c.cmd(&["SELECT", "one"]), "ERR value is not an integer or out of range");
    ok(&mut c, &["SELECT", "15"]);
}

#[test]
fn the_databases_directive_sets_how_many_exist() {
    let srv = server_with(&[("databases", "4")]);
    let mut c = srv.client();
    ok(&mut c, &["SELECT", "3"]);
    assert_err(&c.cmd(&["SELECT", "4"]), "ERR DB index is out of range");
}

#[test]
fn move_transfers_a_key_to_another_database() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "v", "PX", "100000"]);
    assert_eq!(c.cmd(&["MOVE", "k", "1"]), Frame::Integer(1));
    assert_eq!(c.cmd(&["EXISTS", "k"]), Frame::Integer(0));
    ok(&mut c, &["SELECT", "1"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("v"));
    assert!(c.cmd(&["PTTL", "k"]).int() > 0, "MOVE keeps the TTL");
}

#[test]
fn move_refuses_existing_targets_missing_keys_and_bad_indexes() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "k", "src"]);
    ok(&mut c, &["SELECT", "1"]);
    ok(&mut c, &["SET", "k", "dst"]);
    ok(&mut c, &["SELECT", "0"]);
    assert_eq!(c.cmd(&["MOVE", "k", "1"]), Frame::Integer(0), "target exists");
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("src"));
    assert_eq!(c.cmd(&["MOVE", "missing", "1"]), Frame::Integer(0));
    assert_err(&c.cmd(&["MOVE", "k", "0"]), "ERR source and destination objects are the same");
    assert_err(&c.cmd(&["MOVE", "k", "99"]), "ERR DB index is out of range");
    assert_err(&c.cmd(&["MOVE", "k", "x"]), "ERR value is not an integer or out of range");
}

#[test]
fn swapdb_exchanges_contents_for_every_client() {
    let srv = server();
    let mut a = srv.client();
    let mut b = srv.client();
    ok(&mut a, &["SET", "k", "zero"]);
    ok(&mut b, &["SELECT", "1"]);
    ok(&mut b, &["SET", "k", "one"]);
    ok(&mut b, &["SET", "only1", "x"]);
    ok(&mut a, &["SWAPDB", "0", "1"]);
    // Clients keep their index; the data under it changed.
    assert_eq!(a.cmd(&["GET", "k"]), Frame::bulk("one"));
    assert_eq!(a.cmd(&["DBSIZE"]), Frame::Integer(2));
    assert_eq!(b.cmd(&["GET", "k"]), Frame::bulk("zero"));
    assert_eq!(b.cmd(&["EXISTS", "only1"]), Frame::Integer(0));
}

#[test]
fn swapdb_rejects_bad_indexes() {
    let srv = server();
    let mut c = srv.client();
    assert_err(&c.cmd(&["SWAPDB", "0", "16"]), "ERR DB index is out of range");
    assert_err(&c.cmd(&["SWAPDB", "a", "1"]), "ERR invalid first DB index");
    assert_err(&c.cmd(&["SWAPDB", "0", "b"]), "ERR invalid second DB index");
    ok(&mut c, &["SWAPDB", "3", "3"]);
}

#[test]
fn flushall_empties_every_database_and_flushdb_only_one() {
    let srv = server();
    let mut c = srv.client();
    ok(&mut c, &["SET", "a", "1"]);
    ok(&mut c, &["SELECT", "5"]);
    ok(&mut c, &["SET", "b", "2"]);
    ok(&mut c, &["FLUSHDB"]);
    ok(&mut c, &["SELECT", "0"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(1), "FLUSHDB in db 5 left db 0 alone");
    ok(&mut c, &["SELECT", "5"]);
    ok(&mut c, &["SET", "b", "2"]);
    ok(&mut c, &["FLUSHALL"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
    ok(&mut c, &["SELECT", "0"]);
    assert_eq!(c.cmd(&["DBSIZE"]), Frame::Integer(0));
}

#[test]
fn the_redis_crate_selects_the_database_in_the_url() {
    let srv = server();
    let mut con = redis_conn_url(&format!("redis://127.0.0.1:{}/3", srv.port()));
    let () = redis::cmd("SET").arg("k").arg("in3").query(&mut con).unwrap();
    let mut c = srv.client();
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk);
    ok(&mut c, &["SELECT", "3"]);
    assert_eq!(c.cmd(&["GET", "k"]), Frame::bulk("in3"));
}
