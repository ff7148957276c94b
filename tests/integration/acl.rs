//! ACL users through the real binary: rules and NOPERM replies, the ACL log, the default user
//! and requirepass, the ACL file and `user` directives (.conf and hotkv.toml), CLIENT KILL
//! USER, cluster mode refusing before redirecting, a replica logging in as an ACL user, and
//! login by client certificate.

use std::process::Command;
use std::time::Duration;

use hotkv_test_support::tools::run_bounded;
use hotkv_test_support::{Frame, RawClient, free_port, wait_for};

use crate::pki::Pki;
use crate::{assert_err, builder, ok, server, server_with};

const WAIT: Duration = Duration::from_secs(20);
const WRONGPASS: &str = "WRONGPASS invalid username-password pair or user is disabled.";

fn texts(f: &Frame) -> Vec<String> {
    f.items().iter().map(Frame::text).collect()
}

fn login(c: &mut RawClient, user: &str, pass: &str) {
    ok(c, &["AUTH", user, pass]);
}

#[test]
fn a_restricted_user_gets_valkeys_noperm_replies_and_the_log_says_why() {
    let srv = server();
    let mut admin = srv.client();
    ok(
        &mut admin,
        &["ACL", "SETUSER", "app", "on", ">pw", "~app:*", "%R~shared:*", "&news.*", "+@read", "+set", "+publish"],
    );
    let mut c = srv.client();
    assert_err(&c.cmd(&["AUTH", "app", "nope"]), WRONGPASS);
    login(&mut c, "app", "pw");
    assert_eq!(
        c.cmd(&["ACL", "WHOAMI"]),
        Frame::error("NOPERM User app has no permissions to run the 'acl|whoami' command")
    );
    ok(&mut c, &["SET", "app:1", "v"]);
    assert_eq!(c.cmd(&["GET", "app:1"]), Frame::bulk("v"));
    assert_eq!(c.cmd(&["GET", "shared:1"]), Frame::NullBulk);
    assert_err(&c.cmd(&["SET", "shared:1", "v"]), "NOPERM No permissions to access a key");
    assert_err(&c.cmd(&["GET", "other"]), "NOPERM No permissions to access a key");
    assert_err(&c.cmd(&["DEL", "app:1"]), "NOPERM User app has no permissions to run the 'del' command");
    assert_eq!(c.cmd(&["PUBLISH", "news.today", "m"]), Frame::Integer(0));
    assert_err(&c.cmd(&["PUBLISH", "gossip", "m"]), "NOPERM No permissions to access a channel");

    let log = admin.cmd(&["ACL", "LOG"]);
    let newest = &log.items()[0];
    assert_eq!(newest.field("reason").map(|f| f.text()).as_deref(), Some("channel"));
    assert_eq!(newest.field("object").map(|f| f.text()).as_deref(), Some("gossip"));
    assert_eq!(newest.field("username").map(|f| f.text()).as_deref(), Some("app"));
    assert_eq!(newest.field("context").map(|f| f.text()).as_deref(), Some("toplevel"));
    assert!(newest.field("client-info").is_some_and(|f| f.text().contains("user=app")), "{newest}");
    let reasons: Vec<String> = log.items().iter().filter_map(|e| e.field("reason")).map(|f| f.text()).collect();
    assert_eq!(reasons, ["channel", "command", "key", "key", "command", "auth"]);
    let auth = log.items().last().expect("the failed login");
    assert_eq!(auth.field("object").map(|f| f.text()).as_deref(), Some("AUTH"));
    ok(&mut admin, &["ACL", "LOG", "RESET"]);
    assert!(admin.cmd(&["ACL", "LOG"]).items().is_empty());

    let stats = admin.cmd(&["INFO", "stats"]).text();
    assert!(stats.contains("acl_access_denied_auth:1\r\n") && stats.contains("acl_access_denied_key:2\r\n"), "{stats}");
    assert_eq!(
        admin.cmd(&["ACL", "DRYRUN", "app", "SET", "shared:1", "v"]),
        Frame::bulk("User app has no permissions to access the 'shared:1' key")
    );
    assert_eq!(admin.cmd(&["ACL", "DRYRUN", "app", "GET", "app:x"]), Frame::ok());
}

#[test]
fn rules_take_effect_on_logged_in_clients_and_bad_rules_change_nothing() {
    let srv = server();
    let mut admin = srv.client();
    ok(&mut admin, &["ACL", "SETUSER", "u", "on", "nopass", "allkeys", "+get"]);
    let mut c = srv.client();
    login(&mut c, "u", "x");
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk);
    assert_err(
        &admin.cmd(&["ACL", "SETUSER", "u", "-get", "+nosuch"]),
        "ERR Error in ACL SETUSER modifier '+nosuch': Unknown command or category name in ACL",
    );
    assert_eq!(c.cmd(&["GET", "k"]), Frame::NullBulk, "the failed SETUSER changed nothing");
    ok(&mut admin, &["ACL", "SETUSER", "u", "-get"]);
    assert_err(&c.cmd(&["GET", "k"]), "NOPERM User u has no permissions to run the 'get' command");
    let user = admin.cmd(&["ACL", "GETUSER", "u"]);
    assert_eq!(user.field("commands").map(|f| f.text()).as_deref(), Some("-@all -get"));
    assert_eq!(user.field("keys").map(|f| f.text()).as_deref(), Some("~*"));
    assert_eq!(texts(&admin.cmd(&["ACL", "USERS"])), ["default", "u"]);
    assert_eq!(admin.cmd(&["ACL", "DELUSER", "u", "ghost"]), Frame::Integer(1));
    assert!(c.closed_within(WAIT), "a deleted user's connections are closed");
    assert_err(&admin.cmd(&["ACL", "DELUSER", "default"]), "ERR The 'default' user cannot be removed");
    assert_eq!(admin.cmd(&["ACL", "GENPASS", "32"]).text().len(), 8);
}

#[test]
fn the_default_user_follows_requirepass() {
    let srv = server();
    let mut admin = srv.client();
    assert_eq!(texts(&admin.cmd(&["ACL", "LIST"])), ["user default on nopass sanitize-payload ~* &* +@all"]);
    ok(&mut admin, &["CONFIG", "SET", "requirepass", "s3cret"]);
    let sha = Command::new("sh").args(["-c", "printf s3cret | sha256sum"]).output().expect("sha256sum");
    let hash = String::from_utf8_lossy(&sha.stdout).split_whitespace().next().unwrap_or_default().to_string();
    assert_eq!(hash.len(), 64);
    let list = texts(&admin.cmd(&["ACL", "LIST"]));
    assert_eq!(list, [format!("user default on sanitize-payload #{hash} ~* &* +@all")]);
    let mut c = srv.client();
    assert_err(&c.cmd(&["GET", "k"]), "NOAUTH Authentication required.");
    ok(&mut c, &["AUTH", "s3cret"]);
    ok(&mut admin, &["CONFIG", "SET", "requirepass", ""]);
    let mut fresh = srv.client();
    assert_eq!(fresh.cmd(&["GET", "k"]), Frame::NullBulk);
}

#[test]
fn client_kill_user_closes_that_users_connections() {
    let srv = server();
    let mut admin = srv.client();
    ok(&mut admin, &["ACL", "SETUSER", "bob", "on", "nopass", "+@all", "~*"]);
    let mut a = srv.client();
    let mut b = srv.client();
    login(&mut a, "bob", "");
    login(&mut b, "bob", "");
    assert!(a.cmd(&["CLIENT", "INFO"]).text().contains(" user=bob "));
    assert_err(&admin.cmd(&["CLIENT", "KILL", "USER", "nobody"]), "ERR No such user 'nobody'");
    assert_eq!(admin.cmd(&["CLIENT", "KILL", "USER", "bob"]), Frame::Integer(2));
    assert!(a.closed_within(WAIT) && b.closed_within(WAIT));
}

#[test]
fn a_cluster_node_refuses_keys_before_it_says_where_they_live() {
    let srv = server_with(&[("cluster-enabled", "yes")]);
    let mut admin = srv.client();
    ok(&mut admin, &["ACL", "SETUSER", "app", "on", "nopass", "+@all", "~mine:*"]);
    let mut c = srv.client();
    login(&mut c, "app", "");
    // No slot is served: an allowed key hears CLUSTERDOWN, a forbidden one only NOPERM.
    assert_err(&c.cmd(&["GET", "mine:1"]), "CLUSTERDOWN Hash slot not served");
    assert_err(&c.cmd(&["GET", "theirs"]), "NOPERM No permissions to access a key");
}

#[test]
fn users_come_from_the_conf_and_the_toml() {
    let srv = server_with(&[("user", "alice on >pw ~a:* +get"), ("user", "default on nopass ~* +@all -flushall")]);
    let mut c = srv.client();
    assert_eq!(texts(&c.cmd(&["ACL", "USERS"])), ["alice", "default"]);
    assert_err(&c.cmd(&["FLUSHALL"]), "NOPERM User default has no permissions to run the 'flushall' command");
    login(&mut c, "alice", "pw");
    assert_err(&c.cmd(&["GET", "b"]), "NOPERM No permissions to access a key");

    let port = free_port();
    let toml = builder()
        .config_file("hotkv.toml", move |_, dir| {
            format!(
                "[network]\nport = {port}\nbind = \"127.0.0.1\"\n[persistence]\ndir = \"{}\"\n\
                 [security]\nuser = [\"carol on >pw ~* +@all\"]\n",
                dir.display()
            )
        })
        .port_hint(port)
        .spawn();
    let mut c = toml.client();
    login(&mut c, "carol", "pw");
}

#[test]
fn config_rewrite_writes_the_users_as_they_are_now() {
    let srv = builder()
        .config_file("hotkv.conf", |port, dir| {
            format!("port {port}\nbind 127.0.0.1\ndir {}\n# the team\nuser alice on >pw ~a:* +get\n", dir.display())
        })
        .spawn();
    let mut c = srv.client();
    ok(&mut c, &["ACL", "SETUSER", "bob", "on", ">secret", "~b:*", "+get", "(~c:*", "+set)"]);
    assert_eq!(c.cmd(&["ACL", "DELUSER", "alice"]).int(), 1);
    ok(&mut c, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(srv.dir().join("hotkv.conf")).unwrap();
    let users: Vec<&str> = text.lines().filter(|l| l.starts_with("user ")).collect();
    assert_eq!(users.len(), 2, "{text}");
    assert!(
        users[0].starts_with("user bob on sanitize-payload #")
            && users[0].ends_with("~b:* resetchannels -@all +get (~c:* resetchannels -@all +set)"),
        "{text}"
    );
    assert!(users[1].starts_with("user default on nopass"), "{text}");
    assert!(text.contains("# the team\n"), "comments stay: {text}");
    // The lines read back as the same users.
    let lines = users.join("\n");
    let again = builder()
        .config_file("hotkv.conf", move |port, dir| {
            format!("port {port}\nbind 127.0.0.1\ndir {}\n{lines}\n", dir.display())
        })
        .spawn();
    let mut c2 = again.client();
    assert_eq!(texts(&c2.cmd(&["ACL", "LIST"])), texts(&c.cmd(&["ACL", "LIST"])));
    login(&mut c2, "bob", "secret");
    ok(&mut c2, &["SET", "c:1", "x"]);
    assert_err(&c2.cmd(&["SET", "b:1", "x"]), "NOPERM No permissions to access a key");
    // With an aclfile, users stay out of the config file.
    let filed = builder()
        .config_file("hotkv.conf", |port, dir| {
            std::fs::write(dir.join("users.acl"), "user dave on >pw ~* +@all\n").unwrap();
            format!("port {port}\nbind 127.0.0.1\ndir {}\naclfile users.acl\n", dir.display())
        })
        .spawn();
    let mut c3 = filed.client();
    ok(&mut c3, &["CONFIG", "REWRITE"]);
    let text = std::fs::read_to_string(filed.dir().join("hotkv.conf")).unwrap();
    assert!(!text.contains("user "), "{text}");
}

#[test]
fn the_acl_file_loads_saves_and_refuses_bad_lines_whole() {
    let srv = builder()
        .config("aclfile", "users.acl")
        .config_file("hotkv.conf", |port, dir| {
            std::fs::write(dir.join("users.acl"), "user dave on >pw ~* +@all\n").unwrap();
            format!("port {port}\nbind 127.0.0.1\ndir {}\naclfile users.acl\n", dir.display())
        })
        .spawn();
    let mut c = srv.client();
    assert_eq!(texts(&c.cmd(&["ACL", "USERS"])), ["dave", "default"]);
    ok(&mut c, &["ACL", "SETUSER", "erin", "on", "nopass", "+ping"]);
    ok(&mut c, &["ACL", "SAVE"]);
    let saved = std::fs::read_to_string(srv.dir().join("users.acl")).unwrap();
    assert!(saved.contains("user erin on nopass sanitize-payload resetchannels -@all +ping\n"), "{saved}");
    std::fs::write(srv.dir().join("users.acl"), "user frank on +nosuch\nbogus\n").unwrap();
    assert_err(
        &c.cmd(&["ACL", "LOAD"]),
        "ERR users.acl:1: Error in applying operation '+nosuch': Unknown command or category name in ACL. \
         users.acl:2 should start with user keyword followed by the username. \
         WARNING: ACL errors detected, no change to the previously active ACL rules was performed",
    );
    assert_eq!(texts(&c.cmd(&["ACL", "USERS"])), ["dave", "default", "erin"]);
    std::fs::write(srv.dir().join("users.acl"), "user dave on >pw ~* +@all\n").unwrap();
    ok(&mut c, &["ACL", "LOAD"]);
    assert_eq!(texts(&c.cmd(&["ACL", "USERS"])), ["dave", "default"]);

    let plain = server();
    let refused = plain.cmd(&["ACL", "LOAD"]).error_text().unwrap_or_default();
    assert!(refused.contains("not configured to use an ACL file"), "{refused}");

    let bad = builder()
        .config_file("hotkv.conf", |port, dir| {
            std::fs::write(dir.join("bad.acl"), "user x on (+get\n").unwrap();
            format!("port {port}\nbind 127.0.0.1\ndir {}\naclfile bad.acl\n", dir.display())
        })
        .run_to_exit(WAIT);
    assert_eq!(bad.status.code(), Some(1));
    assert!(bad.stdout.contains("Aborting Valkey startup because of ACL errors"), "{}", bad.stdout);
    let both = builder().configs(&[("aclfile", "x.acl"), ("user", "y on")]).run_to_exit(WAIT);
    assert_eq!(both.status.code(), Some(1));
    assert!(both.stdout.contains("define either an ACL file or declare users"), "{}", both.stdout);
    let bad_rule = builder().configs(&[("user", "z on bogus")]).run_to_exit(WAIT);
    assert_eq!(bad_rule.status.code(), Some(1));
    assert!(
        bad_rule.stdout.contains("Error loading ACL rule 'bogus' for the user named 'z': Syntax error"),
        "{}",
        bad_rule.stdout
    );
}

#[test]
fn a_replica_logs_in_as_an_acl_user() {
    let primary = server_with(&[("user", "repl on >rpw +psync +replconf +ping ~*"), ("requirepass", "x")]);
    let replica = server_with(&[("masteruser", "repl"), ("masterauth", "rpw")]);
    let mut p = primary.client();
    ok(&mut p, &["AUTH", "x"]);
    ok(&mut p, &["SET", "k", "v"]);
    let mut r = replica.client();
    ok(&mut r, &["REPLICAOF", "127.0.0.1", &primary.port().to_string()]);
    let link_up = wait_for(|| r.cmd(&["INFO", "replication"]).text().contains("master_link_status:up"), WAIT);
    assert!(link_up, "replica log:\n{}", replica.log());
    let mut r2 = replica.client();
    assert!(wait_for(|| r2.cmd(&["GET", "k"]) == Frame::bulk("v"), WAIT));
    let clients = p.cmd(&["CLIENT", "LIST"]).text();
    assert!(clients.lines().any(|l| l.contains("flags=S") && l.contains("user=repl")), "{clients}");
}

/// redis-cli over TLS with `name`'s certificate: the reply of CLIENT INFO, or the error.
fn as_certificate(pki: &Pki, port: u16, name: &str, args: &[&str]) -> String {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(pki.cli_args(Some((&format!("{name}.crt"), &format!("{name}.key")))))
        .args(args);
    run_bounded(&mut cmd, None, WAIT).stdout.trim().to_string()
}

#[test]
fn a_client_certificate_logs_in_as_the_enabled_user_it_names() {
    let pki = Pki::new();
    for cn in ["alice", "mallory", "nobody"] {
        let leaf = pki.ca.client(cn);
        pki.dir.write(&format!("{cn}.crt"), &leaf.cert);
        pki.dir.write(&format!("{cn}.key"), &leaf.key);
    }
    let anon = pki.ca.client_without_cn();
    pki.dir.write("anon.crt", &anon.cert);
    pki.dir.write("anon.key", &anon.key);
    let tls_port = free_port();
    let mut b = builder().config("tls-auth-clients-user", "CN").config("requirepass", "pw");
    b = b.config("user", "alice on nopass ~* +@all").config("user", "mallory off nopass ~* +@all");
    for (k, v) in pki.server_config(tls_port) {
        b = b.config(&k, &v);
    }
    let srv = b.spawn();
    let info = as_certificate(&pki, tls_port, "alice", &["CLIENT", "INFO"]);
    assert!(info.contains(" user=alice "), "{info}");
    for stays_default in ["mallory", "nobody", "anon"] {
        let out = as_certificate(&pki, tls_port, stays_default, &["GET", "k"]);
        assert!(out.contains("NOAUTH"), "{stays_default}: {out}");
        let info = as_certificate(&pki, tls_port, stays_default, &["-a", "pw", "--no-auth-warning", "CLIENT", "INFO"]);
        assert!(info.contains(" user=default "), "{stays_default}: {info}");
    }
    drop(srv);
}
