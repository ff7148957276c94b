//! TLS on the client port, through real clients: redis-cli --tls, redis-py ssl=True, the Rust
//! `redis` crate with rustls, and openssl s_client. Startup lines, refusals, reloads (CONFIG
//! SET and automatic, failing ones included), CA rotation, and `hotkv --check-tls`.

use std::process::Command;
use std::time::Duration;

use hotkv_test_support::tools::{ToolOutput, run_bounded};
use hotkv_test_support::{Builder, Frame, TestServer, free_port, wait_for};
use rcgen::ExtendedKeyUsagePurpose as Eku;

use crate::BIN;
use crate::pki::{Ca, Pki, replace};

const WAIT: Duration = Duration::from_secs(10);

fn builder(pki: &Pki, tls_port: u16) -> Builder {
    let mut b = TestServer::builder(BIN);
    for (k, v) in pki.server_config(tls_port) {
        b = b.config(&k, &v);
    }
    b
}

/// A server with its usual plain port and a TLS port.
fn tls_server(pki: &Pki, extra: &[(&str, &str)]) -> (TestServer, u16) {
    let tls_port = free_port();
    (builder(pki, tls_port).configs(extra).spawn(), tls_port)
}

/// redis-cli over TLS (presenting `identity` if given) against `port`.
fn cli(pki: &Pki, port: u16, identity: Option<(&str, &str)>, args: &[&str]) -> ToolOutput {
    let mut cmd = Command::new("redis-cli");
    cmd.args(["-h", "127.0.0.1", "-p", &port.to_string()]).args(pki.cli_args(identity)).args(args);
    run_bounded(&mut cmd, None, WAIT)
}

/// redis-cli over TLS as the application (`app.crt`), stdout trimmed.
fn app(pki: &Pki, port: u16, args: &[&str]) -> String {
    cli(pki, port, Some(("app.crt", "app.key")), args).stdout.trim_end().to_string()
}

/// `openssl s_client | openssl x509 -serial`: the serial of the certificate the port serves.
fn served_serial(pki: &Pki, port: u16) -> String {
    let script = format!(
        "openssl s_client -connect 127.0.0.1:{port} -CAfile {ca} -cert {c} -key {k} </dev/null 2>/dev/null \
         | openssl x509 -noout -serial",
        ca = pki.dir.s("ca.crt"),
        c = pki.dir.s("app.crt"),
        k = pki.dir.s("app.key")
    );
    let out = run_bounded(Command::new("sh").args(["-c", &script]), None, WAIT);
    out.stdout.trim().strip_prefix("serial=").unwrap_or(out.stdout.trim()).to_string()
}

fn info_field(srv: &TestServer, section: &str, field: &str) -> String {
    let Frame::Bulk(text) = srv.cmd(&["INFO", section]) else { panic!("INFO reply") };
    let text = String::from_utf8(text).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in INFO {section}:\n{text}"))
        .to_string()
}

#[test]
fn tls_only_node_logs_its_setup_and_serves_redis_cli() {
    let pki = Pki::new();
    let tls_port = free_port();
    let srv = builder(&pki, tls_port).config("port", "0").ready_without_ping().spawn();
    let log = srv.log();
    let cert = pki.dir.s("node.crt");
    let key = pki.dir.s("node.key");
    for line in [
        "Plain-text port disabled (port 0), serving TLS only".to_string(),
        format!("SSL context initialized (cert={cert}, key={key})"),
        format!("TLS enabled on 127.0.0.1 ::1:{tls_port}"),
        "Ready to accept connections tls".to_string(),
    ] {
        assert!(log.contains(&line), "missing log line {line:?}:\n{log}");
    }
    let plain = log.find("Plain-text port disabled").unwrap();
    let ctx = log.find("SSL context initialized").unwrap();
    let enabled = log.find("TLS enabled on").unwrap();
    assert!(plain < ctx && ctx < enabled, "startup lines out of order:\n{log}");
    assert!(!log.contains("Ready to accept connections tcp"));

    assert_eq!(app(&pki, tls_port, &["SET", "greeting", "hello"]), "OK");
    assert_eq!(app(&pki, tls_port, &["GET", "greeting"]), "hello");
    assert_eq!(
        app(&pki, tls_port, &["INFO", "server"]).lines().find(|l| l.starts_with("tcp_port:")),
        Some("tcp_port:0")
    );
    // The node's own certificate works as a client certificate too (the reference doc's rcli).
    assert_eq!(cli(&pki, tls_port, Some(("node.crt", "node.key")), &["PING"]).stdout.trim(), "PONG");
}

#[test]
fn refused_clients_are_logged_with_the_reason_and_others_carry_on() {
    let pki = Pki::new();
    let other = Ca::new("some other CA");
    let stranger = other.client("stranger");
    pki.dir.write("stranger.crt", &stranger.cert);
    pki.dir.write("stranger.key", &stranger.key);
    let expired = pki.ca.issue("old-app", &[Eku::ClientAuth], -30, -1, None);
    pki.dir.write("expired.crt", &expired.cert);
    pki.dir.write("expired.key", &expired.key);
    let (srv, tls_port) = tls_server(&pki, &[]);

    // A client that stays connected through all the refusals.
    let keeper = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{tls_port}/"),
        tls_certs(&pki, Some(("app.crt", "app.key"))),
    )
    .unwrap();
    let mut kept = keeper.get_connection().unwrap();
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut kept).unwrap();

    // A plain-text client on the TLS port.
    let plain = run_bounded(
        Command::new("redis-cli").args(["-h", "127.0.0.1", "-p", &tls_port.to_string(), "PING"]),
        None,
        WAIT,
    );
    assert_eq!(plain.stderr.trim(), "Error: Server closed the connection", "{plain:?}");
    // No certificate while tls-auth-clients is yes.
    let none = cli(&pki, tls_port, None, &["PING"]);
    assert!(!none.stdout.contains("PONG"), "{none:?}");
    // A certificate from a CA the node does not trust, and an expired one.
    let untrusted = cli(&pki, tls_port, Some(("stranger.crt", "stranger.key")), &["PING"]);
    assert!(!untrusted.stdout.contains("PONG"), "{untrusted:?}");
    let old = cli(&pki, tls_port, Some(("expired.crt", "expired.key")), &["PING"]);
    assert!(!old.stdout.contains("PONG"), "{old:?}");

    for reason in [
        "wrong version number (SSL routines)",
        "peer did not return a certificate (SSL routines)",
        "certificate verify failed (SSL routines): unable to get local issuer certificate",
        "certificate verify failed (SSL routines): certificate has expired",
    ] {
        assert!(
            wait_for(
                || srv.log().lines().any(|l| l.contains("TLS handshake failed for client ") && l.ends_with(reason)),
                WAIT
            ),
            "no refusal logged with {reason:?}:\n{}",
            srv.log()
        );
    }
    assert_eq!(info_field(&srv, "tls", "tls_handshake_failures"), "4");
    let v: String = redis::cmd("GET").arg("k").query(&mut kept).unwrap();
    assert_eq!(v, "v");
    assert_eq!(srv.cmd(&["PING"]), Frame::Simple("PONG".into()));
}

fn tls_certs(pki: &Pki, identity: Option<(&str, &str)>) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: identity.map(|(c, k)| redis::ClientTlsConfig {
            client_cert: std::fs::read(pki.dir.path(c)).unwrap(),
            client_key: std::fs::read(pki.dir.path(k)).unwrap(),
        }),
        root_cert: Some(std::fs::read(pki.dir.path("ca.crt")).unwrap()),
    }
}

#[test]
fn both_ports_serve_the_same_data_to_every_client() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[]);
    assert_eq!(srv.cmd(&["SET", "from-plain", "1"]), Frame::Simple("OK".into()));

    // The Rust client over TLS, with a client certificate: pipelines and a large value.
    let client = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{tls_port}/"),
        tls_certs(&pki, Some(("app.crt", "app.key"))),
    )
    .unwrap();
    let mut con = client.get_connection().unwrap();
    let got: String = redis::cmd("GET").arg("from-plain").query(&mut con).unwrap();
    assert_eq!(got, "1");
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.cmd("SET").arg(format!("k{i}")).arg(i).ignore();
    }
    pipe.cmd("DBSIZE");
    let (n,): (u64,) = pipe.query(&mut con).unwrap();
    assert_eq!(n, 2001);
    // Bigger than many TLS records each way.
    let big = "x".repeat(3 << 20);
    let _: () = redis::cmd("SET").arg("big").arg(&big).query(&mut con).unwrap();
    let back: String = redis::cmd("GET").arg("big").query(&mut con).unwrap();
    assert_eq!(back.len(), big.len());
    assert_eq!(srv.cmd(&["STRLEN", "big"]), Frame::Integer(3 << 20));

    // redis-py with ssl=True.
    let code = format!(
        r#"
r = redis.Redis(host="127.0.0.1", port={tls_port}, ssl=True, ssl_ca_certs="{ca}", ssl_certfile="{c}", ssl_keyfile="{k}", decode_responses=True)
print(r.ping(), r.get("from-plain"), r.dbsize())
p = r.pipeline(transaction=True)
p.incr("n"); p.incr("n"); p.get("n")
print(p.execute())
print(r.connection_pool.get_connection("PING").__class__.__name__)
"#,
        ca = pki.dir.s("ca.crt"),
        c = pki.dir.s("app.crt"),
        k = pki.dir.s("app.key"),
    );
    let out = hotkv_test_support::tools::python(srv.port(), &code);
    assert_eq!(out, "True 1 2002\n[1, 2, '2']\nSSLConnection\n");
    assert_eq!(info_field(&srv, "tls", "tls_handshake_failures"), "0");
}

#[test]
fn client_certificates_optional_or_not_asked_for() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[("tls-auth-clients", "optional")]);
    assert_eq!(cli(&pki, tls_port, None, &["PING"]).stdout.trim(), "PONG");
    assert_eq!(app(&pki, tls_port, &["PING"]), "PONG");
    // Optional still verifies a certificate that is sent.
    let other = Ca::new("other");
    let s = other.client("x");
    pki.dir.write("x.crt", &s.cert);
    pki.dir.write("x.key", &s.key);
    assert!(!cli(&pki, tls_port, Some(("x.crt", "x.key")), &["PING"]).stdout.contains("PONG"));
    // `yes` again applies to new connections at once.
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-auth-clients", "yes"]), Frame::Simple("OK".into()));
    assert!(!cli(&pki, tls_port, None, &["PING"]).stdout.contains("PONG"));
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-auth-clients", "no"]), Frame::Simple("OK".into()));
    assert_eq!(cli(&pki, tls_port, None, &["PING"]).stdout.trim(), "PONG");
}

#[test]
fn config_set_reloads_the_certificate_and_open_connections_keep_theirs() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[]);
    assert_eq!(served_serial(&pki, tls_port), pki.node.serial);
    let client = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{tls_port}/"),
        tls_certs(&pki, Some(("app.crt", "app.key"))),
    )
    .unwrap();
    let mut open = client.get_connection().unwrap();
    let _: () = redis::cmd("SET").arg("before").arg("1").query(&mut open).unwrap();

    // Renew from the same key, replace the file: nothing changes until the reload.
    let renewed = pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -1, 400, Some(&pki.node.key));
    replace(&pki.dir.path("node.crt"), &renewed.cert);
    assert_eq!(served_serial(&pki, tls_port), pki.node.serial);
    assert_eq!(info_field(&srv, "tls", "tls_files_match_loaded"), "yes", "checked only every minute");
    let cert = pki.dir.s("node.crt");
    assert_eq!(app(&pki, tls_port, &["CONFIG", "SET", "tls-cert-file", &cert]), "OK");
    assert_eq!(served_serial(&pki, tls_port), renewed.serial);
    assert_eq!(info_field(&srv, "tls", "tls_server_cert_serial"), renewed.serial);
    assert_eq!(info_field(&srv, "tls", "tls_last_reload_status"), "ok");
    assert!(srv.log().contains(&format!("TLS configuration reloaded (cert={cert}, key={})", pki.dir.s("node.key"))));
    // The connection opened before the reload is still up.
    let v: String = redis::cmd("GET").arg("before").query(&mut open).unwrap();
    assert_eq!(v, "1");

    // A file that is not a certificate: the command fails and the node keeps what it had.
    let bad = pki.dir.write("not-a-cert.crt", "not a certificate\n");
    let reply = srv.cmd(&["CONFIG", "SET", "tls-cert-file", &bad.display().to_string()]);
    let Frame::Error(e) = reply else { panic!("{reply:?}") };
    assert_eq!(
        e,
        format!(
            "ERR Unable to update TLS configuration: use_certificate_chain_file: no start line (PEM routines) [{}]",
            bad.display()
        )
    );
    assert_eq!(
        srv.cmd(&["CONFIG", "GET", "tls-cert-file"]),
        Frame::Array(vec![Frame::Bulk(b"tls-cert-file".to_vec()), Frame::Bulk(cert.clone().into_bytes())])
    );
    assert_eq!(served_serial(&pki, tls_port), renewed.serial);
    assert_eq!(info_field(&srv, "tls", "tls_last_reload_status"), "failed");
    // A key that is not the certificate's.
    let stray = pki.ca.node("stray");
    let stray_key = pki.dir.write("stray.key", &stray.key);
    let Frame::Error(e) = srv.cmd(&["CONFIG", "SET", "tls-key-file", &stray_key.display().to_string()]) else {
        panic!()
    };
    assert!(e.starts_with("ERR Unable to update TLS configuration: use_private_key_file: key values mismatch"), "{e}");
    // A missing CA file.
    let Frame::Error(e) = srv.cmd(&["CONFIG", "SET", "tls-ca-cert-file", "/nonexistent/ca.crt"]) else { panic!() };
    assert!(e.contains("No such file or directory") && e.contains("/nonexistent/ca.crt"), "{e}");
    // Protocols rustls cannot do fail loudly, not silently.
    let Frame::Error(e) = srv.cmd(&["CONFIG", "SET", "tls-protocols", "TLSv1.1"]) else { panic!() };
    assert!(e.starts_with("ERR Unable to update TLS configuration: Invalid tls-protocols"), "{e}");
    assert_eq!(served_serial(&pki, tls_port), renewed.serial);
    assert_eq!(app(&pki, tls_port, &["PING"]), "PONG");
    // tls-protocols that rustls can do take effect.
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-protocols", "TLSv1.3"]), Frame::Simple("OK".into()));
    let v12 = run_bounded(
        Command::new("openssl").args([
            "s_client",
            "-connect",
            &format!("127.0.0.1:{tls_port}"),
            "-tls1_2",
            "-CAfile",
            &pki.dir.s("ca.crt"),
            "-cert",
            &pki.dir.s("app.crt"),
            "-key",
            &pki.dir.s("app.key"),
            "-brief",
        ]),
        Some(b""),
        WAIT,
    );
    assert!(!v12.status.success(), "TLS 1.2 still accepted: {v12:?}");
}

#[test]
fn automatic_reload_follows_the_files_and_keeps_the_old_material_on_failure() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[]);
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-auto-reload-interval", "1"]), Frame::Simple("OK".into()));
    assert_eq!(
        srv.cmd(&["CONFIG", "GET", "tls-auto-reload-interval"]),
        Frame::Array(vec![Frame::Bulk(b"tls-auto-reload-interval".to_vec()), Frame::Bulk(b"1".to_vec())])
    );
    assert_eq!(info_field(&srv, "tls", "tls_reloads"), "0", "changing the interval is not a reload");

    let renewed = pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -1, 400, Some(&pki.node.key));
    replace(&pki.dir.path("node.crt"), &renewed.cert);
    assert!(wait_for(|| info_field(&srv, "tls", "tls_server_cert_serial") == renewed.serial, WAIT), "{}", srv.log());
    assert_eq!(served_serial(&pki, tls_port), renewed.serial);
    let log = srv.log();
    assert!(
        log.contains(&format!(
            "TLS configuration reloaded (cert={}, key={})",
            pki.dir.s("node.crt"),
            pki.dir.s("node.key")
        )),
        "{log}"
    );
    assert!(log.contains("TLS materials reloaded successfully"), "{log}");

    // A broken file is reported (once) and the certificate in use stays.
    replace(&pki.dir.path("node.crt"), "not a certificate\n");
    assert!(
        wait_for(
            || {
                srv.log().contains("TLS reload failed, keeping the current certificate: use_certificate_chain_file: no start line (PEM routines)")
            },
            WAIT
        ),
        "{}",
        srv.log()
    );
    assert_eq!(served_serial(&pki, tls_port), renewed.serial);
    assert_eq!(info_field(&srv, "tls", "tls_files_match_loaded"), "no");

    // Race: a CONFIG SET to another path while automatic reloads run. Whatever the timing,
    // the certificate the CONFIG SET installed is the one that stays.
    let third = pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -1, 500, Some(&pki.node.key));
    let other = pki.dir.write("other.crt", &third.cert);
    for _ in 0..5 {
        replace(&pki.dir.path("node.crt"), &renewed.cert);
        assert_eq!(
            srv.cmd(&["CONFIG", "SET", "tls-cert-file", &other.display().to_string()]),
            Frame::Simple("OK".into())
        );
        replace(&pki.dir.path("node.crt"), "garbage\n");
    }
    std::thread::sleep(Duration::from_millis(2500)); // two more automatic checks
    assert_eq!(info_field(&srv, "tls", "tls_server_cert_serial"), third.serial);
    assert_eq!(served_serial(&pki, tls_port), third.serial);

    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-auto-reload-interval", "0"]), Frame::Simple("OK".into()));
}

#[test]
fn a_two_ca_bundle_rotates_the_ca_without_a_restart() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[]);
    let new_ca = Ca::new("hotkv test CA 2027");
    let app2 = new_ca.client("app2");
    pki.dir.write("app2.crt", &app2.cert);
    pki.dir.write("app2.key", &app2.key);
    let ca_file = pki.dir.s("ca.crt");
    assert!(!cli(&pki, tls_port, Some(("app2.crt", "app2.key")), &["PING"]).stdout.contains("PONG"));

    // Step 1: trust both.
    replace(&pki.dir.path("ca.crt"), &format!("{}{}", pki.ca.pem, new_ca.pem));
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-ca-cert-file", &ca_file]), Frame::Simple("OK".into()));
    assert_eq!(app(&pki, tls_port, &["PING"]), "PONG");
    assert_eq!(cli(&pki, tls_port, Some(("app2.crt", "app2.key")), &["PING"]).stdout.trim(), "PONG");

    // Step 2: the node moves to a certificate from the new CA; clients trust both.
    let node2 = new_ca.node("node1");
    replace(&pki.dir.path("node.crt"), &node2.cert);
    replace(&pki.dir.path("node.key"), &node2.key);
    assert_eq!(
        srv.cmd(&["CONFIG", "SET", "tls-cert-file", &pki.dir.s("node.crt"), "tls-key-file", &pki.dir.s("node.key")]),
        Frame::Simple("OK".into())
    );
    assert_eq!(served_serial(&pki, tls_port), node2.serial);

    // Step 3: drop the old CA: its clients are refused, the new ones are not.
    replace(&pki.dir.path("ca.crt"), &new_ca.pem);
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-ca-cert-file", &ca_file]), Frame::Simple("OK".into()));
    assert_eq!(cli(&pki, tls_port, Some(("app2.crt", "app2.key")), &["PING"]).stdout.trim(), "PONG");
    assert!(!cli(&pki, tls_port, Some(("app.crt", "app.key")), &["PING"]).stdout.contains("PONG"));
}

#[test]
fn a_tls_port_can_be_opened_moved_and_closed_at_runtime() {
    let pki = Pki::new();
    let srv = crate::server();
    // Files first (TLS not in use yet: stored, not loaded), then the port.
    for (k, v) in pki.server_config(0).into_iter().skip(1) {
        assert_eq!(srv.cmd(&["CONFIG", "SET", &k, &v]), Frame::Simple("OK".into()));
    }
    let tls_port = free_port();
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-port", &tls_port.to_string()]), Frame::Simple("OK".into()));
    assert_eq!(app(&pki, tls_port, &["PING"]), "PONG");
    let moved = free_port();
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-port", &moved.to_string()]), Frame::Simple("OK".into()));
    assert_eq!(app(&pki, moved, &["PING"]), "PONG");
    assert!(!app(&pki, tls_port, &["PING"]).contains("PONG"));
    assert_eq!(srv.cmd(&["CONFIG", "SET", "tls-port", "0"]), Frame::Simple("OK".into()));
    assert!(!app(&pki, moved, &["PING"]).contains("PONG"));
    assert_eq!(srv.cmd(&["PING"]), Frame::Simple("PONG".into()));

    // A TLS port with files that do not load is refused, and nothing listens.
    let srv2 = crate::server();
    let p = free_port();
    let reply = srv2.cmd(&[
        "CONFIG",
        "SET",
        "tls-port",
        &p.to_string(),
        "tls-cert-file",
        "/nonexistent.crt",
        "tls-key-file",
        "/nonexistent.key",
    ]);
    let Frame::Error(e) = reply else { panic!("{reply:?}") };
    assert!(e.starts_with("ERR Unable to update TLS configuration: "), "{e}");
    assert_eq!(
        srv2.cmd(&["CONFIG", "GET", "tls-port"]),
        Frame::Array(vec![Frame::Bulk(b"tls-port".to_vec()), Frame::Bulk(b"0".to_vec())])
    );
    assert!(std::net::TcpStream::connect(("127.0.0.1", p)).is_err());
}

#[test]
fn a_node_with_bad_tls_files_does_not_start_and_names_the_file() {
    let pki = Pki::new();
    let missing = pki.dir.s("missing.key");
    let out = builder(&pki, free_port()).config("tls-key-file", &missing).run_to_exit(WAIT);
    assert_eq!(out.status.code(), Some(1), "{}", out.stdout);
    assert!(
        out.stdout.contains(&format!(
            "Failed to initialize SSL context: use_private_key_file: No such file or directory [{missing}]"
        )),
        "{}",
        out.stdout
    );

    // A directory where the key should be: the system's reason, the file named.
    let out =
        builder(&pki, free_port()).config("tls-key-file", &pki.dir.path("").display().to_string()).run_to_exit(WAIT);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.contains("Failed to initialize SSL context: use_private_key_file: "), "{}", out.stdout);

    // tls-cluster or tls-replication without the files.
    for directive in ["tls-cluster", "tls-replication"] {
        let out = TestServer::builder(BIN).config(directive, "yes").run_to_exit(WAIT);
        assert_eq!(out.status.code(), Some(1), "{directive}: {}", out.stdout);
        assert!(
            out.stdout.contains("Failed to initialize SSL context: No tls-cert-file configured!"),
            "{}",
            out.stdout
        );
    }
    let out = TestServer::builder(BIN)
        .configs(&[
            ("tls-cluster", "yes"),
            ("tls-cert-file", &pki.dir.s("node.crt")),
            ("tls-key-file", &pki.dir.s("node.key")),
        ])
        .run_to_exit(WAIT);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.contains("Either tls-ca-cert-file or tls-ca-cert-dir must be specified"), "{}", out.stdout);

    // An expired server certificate loads (upstream does) but says so loudly.
    let old = pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -60, -2, None);
    pki.dir.write("old.crt", &old.cert);
    pki.dir.write("old.key", &old.key);
    let srv = builder(&pki, free_port())
        .configs(&[("tls-cert-file", &pki.dir.s("old.crt")), ("tls-key-file", &pki.dir.s("old.key"))])
        .spawn();
    assert!(srv.log().lines().any(|l| l.contains(" # ") && l.contains("expired")), "{}", srv.log());
}

#[test]
fn login_by_certificate_name() {
    let pki = Pki::new();
    let default_user = pki.ca.client("default");
    pki.dir.write("default.crt", &default_user.cert);
    pki.dir.write("default.key", &default_user.key);
    let (srv, tls_port) = tls_server(&pki, &[("requirepass", "secret"), ("tls-auth-clients-user", "CN")]);
    assert_eq!(cli(&pki, tls_port, Some(("default.crt", "default.key")), &["GET", "x"]).stdout.trim(), "");
    let other = cli(&pki, tls_port, Some(("app.crt", "app.key")), &["GET", "x"]);
    assert!(other.stdout.contains("NOAUTH"), "{other:?}");
    assert_eq!(
        cli(&pki, tls_port, Some(("app.crt", "app.key")), &["-a", "secret", "--no-auth-warning", "PING"]).stdout.trim(),
        "PONG"
    );
    drop(srv);
}

#[test]
fn refusals_over_tls_are_readable_by_the_client() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[("maxclients", "1")]);
    let _hold = srv.client();
    assert!(wait_for(|| srv.open_connections() >= 1, WAIT));
    let out = app(&pki, tls_port, &["PING"]);
    assert!(out.contains("max number of clients reached"), "{out}");
}

#[test]
fn check_tls_reports_every_problem_before_deployment() {
    let pki = Pki::new();
    let run = |pairs: &[(&str, String)]| -> ToolOutput {
        let mut cmd = Command::new(BIN);
        cmd.args(["--check-tls", "/dev/null", "--bind", "127.0.0.1"]);
        for (k, v) in pairs {
            cmd.arg(format!("--{k}")).arg(v);
        }
        run_bounded(&mut cmd, None, WAIT)
    };
    let base = |cert: &str, key: &str| -> Vec<(&'static str, String)> {
        vec![
            ("tls-port", "7000".into()),
            ("tls-cert-file", pki.dir.s(cert)),
            ("tls-key-file", pki.dir.s(key)),
            ("tls-ca-cert-file", pki.dir.s("ca.crt")),
        ]
    };
    let good = run(&base("node.crt", "node.key"));
    assert_eq!(good.status.code(), Some(0), "{good:?}");
    assert!(good.stdout.contains("TLS files OK"), "{good:?}");

    // A key that is not the certificate's.
    let out = run(&base("node.crt", "app.key"));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.contains("key values mismatch") || out.stdout.contains("does not match"), "{}", out.stdout);

    // From another CA (the chain does not verify), expired, expiring soon.
    let other = Ca::new("other CA");
    let foreign = other.node("node1");
    pki.dir.write("foreign.crt", &foreign.cert);
    pki.dir.write("foreign.key", &foreign.key);
    let expired = pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -60, -1, None);
    pki.dir.write("expired.crt", &expired.cert);
    pki.dir.write("expired.key", &expired.key);
    let soon = pki.ca.issue("node1", &[Eku::ServerAuth, Eku::ClientAuth], -60, 10, None);
    pki.dir.write("soon.crt", &soon.cert);
    pki.dir.write("soon.key", &soon.key);
    for (cert, key, words) in [
        ("foreign.crt", "foreign.key", "unable to get local issuer certificate"),
        ("expired.crt", "expired.key", "expired"),
        ("soon.crt", "soon.key", "expires in"),
    ] {
        let out = run(&base(cert, key));
        assert_eq!(out.status.code(), Some(1), "{cert}: {out:?}");
        assert!(out.stdout.contains(words), "{cert}: {}", out.stdout);
        assert!(out.stdout.contains(&pki.dir.s(cert)), "names the file: {}", out.stdout);
    }

    // serverAuth only, while the bus needs clientAuth too.
    let server_only = pki.ca.issue("node1", &[Eku::ServerAuth], -1, 365, None);
    pki.dir.write("so.crt", &server_only.cert);
    pki.dir.write("so.key", &server_only.key);
    let mut pairs = base("so.crt", "so.key");
    pairs.push(("tls-cluster", "yes".into()));
    let out = run(&pairs);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.contains("clientAuth"), "{}", out.stdout);

    // A bind address the certificate does not name.
    let mut pairs = base("node.crt", "node.key");
    pairs.push(("bind", "127.0.0.1 10.0.0.1".into()));
    let out = run(&pairs);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.contains("10.0.0.1"), "{}", out.stdout);

    // An unreadable key file.
    let out = run(&base("node.crt", "nope.key"));
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stdout.contains("No such file or directory"), "{}", out.stdout);

    // Usage errors.
    let out = run_bounded(Command::new(BIN).arg("--check-tls"), None, WAIT);
    assert_eq!(out.status.code(), Some(1));
    assert!(out.stderr.contains("--check-tls needs a configuration file"), "{out:?}");
}

#[test]
fn redis_benchmark_over_tls_runs_without_errors() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[("tls-auth-clients", "no")]);
    let mut cmd = Command::new("redis-benchmark");
    cmd.args(["-h", "127.0.0.1", "-p", &tls_port.to_string(), "--tls", "--cacert", &pki.dir.s("ca.crt")])
        .args(["-t", "set,get", "-n", "20000", "-P", "16", "-c", "20", "-r", "1000", "--csv"]);
    let out = run_bounded(&mut cmd, None, Duration::from_secs(60));
    assert!(out.status.success(), "{out:?}");
    assert!(out.stdout.contains("\"SET\"") && out.stdout.contains("\"GET\""), "{out:?}");
    assert!(!out.stderr.to_lowercase().contains("error"), "{out:?}");
    // Every request reached the server.
    let Frame::Bulk(stats) = srv.cmd(&["INFO", "commandstats"]) else { panic!() };
    let stats = String::from_utf8(stats).unwrap();
    for c in ["set", "get"] {
        let calls: u64 = stats
            .lines()
            .find_map(|l| l.strip_prefix(&format!("cmdstat_{c}:calls=")))
            .and_then(|r| r.split(',').next())
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        assert!(calls >= 20000, "{c}: {calls} calls\n{stats}");
    }
    assert_eq!(info_field(&srv, "tls", "tls_handshake_failures"), "0");
}

/// A TLS client served on an event loop moves to a task of its own with its session when a
/// command blocks or it subscribes, and the session carries on there: no renegotiation, no
/// lost record, replies in order.
#[test]
fn a_tls_client_that_blocks_or_subscribes_keeps_its_session() {
    let pki = Pki::new();
    let (srv, tls_port) = tls_server(&pki, &[]);
    let client = redis::Client::build_with_tls(
        format!("rediss://127.0.0.1:{tls_port}/"),
        tls_certs(&pki, Some(("app.crt", "app.key"))),
    )
    .unwrap();
    let blocker = {
        let client = client.clone();
        std::thread::spawn(move || {
            let mut con = client.get_connection().unwrap();
            let _: () = redis::cmd("SET").arg("before").arg("1").query(&mut con).unwrap();
            let got: (String, String) = redis::cmd("BLPOP").arg("q").arg(20).query(&mut con).unwrap();
            let big = "y".repeat(1 << 20);
            let _: () = redis::cmd("SET").arg("big").arg(&big).query(&mut con).unwrap();
            let back: String = redis::cmd("GET").arg("big").query(&mut con).unwrap();
            (got, back.len())
        })
    };
    let blocked = || info_field(&srv, "clients", "blocked_clients") == "1";
    assert!(wait_for(blocked, Duration::from_secs(20)), "the TLS client never blocked");
    assert_eq!(srv.cmd(&["RPUSH", "q", "x"]), Frame::Integer(1));
    let (got, len) = blocker.join().unwrap();
    assert_eq!(got, ("q".to_string(), "x".to_string()));
    assert_eq!(len, 1 << 20);

    let mut con = client.get_connection().unwrap();
    let mut sub = con.as_pubsub();
    sub.subscribe("ch").unwrap();
    sub.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert!(wait_for(|| srv.cmd(&["PUBLISH", "ch", "m"]) == Frame::Integer(1), Duration::from_secs(20)));
    let msg = sub.get_message().unwrap();
    assert_eq!(msg.get_payload::<String>().unwrap(), "m");
    assert_eq!(info_field(&srv, "tls", "tls_handshake_failures"), "0");
}
