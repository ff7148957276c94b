//! The `--check-tls` preflight.

use hotkv_tls::{ProblemKind, TlsSettings, check};

use crate::pki::{Ca, Leaf, Setup, TempDir, settings};

fn kinds(s: &TlsSettings, binds: &[&str]) -> Vec<ProblemKind> {
    check(s, binds).into_iter().map(|p| p.kind).collect()
}

#[test]
fn a_sound_setup_has_no_problem() {
    let t = Setup::new();
    let s = TlsSettings { cluster: true, replication: true, ..t.settings() };
    assert_eq!(check(&s, &["127.0.0.1", "-::1", "*"]).len(), 1, "::1 is not in the SAN");
    assert!(check(&s, &["127.0.0.1", "localhost", "0.0.0.0"]).is_empty(), "{:?}", check(&s, &["127.0.0.1"]));
    assert!(check(&TlsSettings::default(), &[]).is_empty(), "TLS off: nothing to check");
}

#[test]
fn key_mismatch_and_unreadable_key() {
    let t = Setup::new();
    let other = t.ca.issue(Leaf::node("x"));
    let wrong = t.dir.write("wrong.key", &other.key_pem);
    let problems = check(&TlsSettings { key_file: Some(wrong.clone()), ..t.settings() }, &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].kind, ProblemKind::KeyMismatch);
    assert_eq!(
        problems[0].to_string(),
        format!("tls-key-file {}: key does not match the certificate {}", wrong.display(), t.cert.display())
    );
    let gone = t.dir.path("gone.key");
    let problems = check(&TlsSettings { key_file: Some(gone.clone()), ..t.settings() }, &[]);
    assert_eq!(problems.len(), 1);
    assert_eq!(problems[0].kind, ProblemKind::Unreadable);
    assert!(problems[0].to_string().starts_with(&format!("tls-key-file {}: key file not readable: ", gone.display())));
}

#[test]
fn a_missing_intermediate_is_found_and_the_full_chain_passes() {
    let dir = TempDir::new();
    let root = Ca::root("root");
    let inter = root.intermediate("intermediate");
    let node = inter.issue(Leaf::node("node1"));
    let ca = dir.write("ca.crt", &root.pem);
    let key = dir.write("node.key", &node.key_pem);
    let leaf_only = dir.write("leaf.crt", &node.cert_pem);
    let full = dir.write("full.crt", format!("{}{}", node.cert_pem, inter.pem));
    let problems = check(&settings(&leaf_only, &key, &ca), &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].kind, ProblemKind::ChainUnverified);
    let text = problems[0].to_string();
    assert!(text.contains("chain does not verify against the CA: unable to get local issuer certificate"), "{text}");
    assert!(text.contains("intermediate certificate missing"), "{text}");
    assert!(check(&settings(&full, &key, &ca), &[]).is_empty());
    // Loading works with the full chain and presents the intermediate.
    let m = hotkv_tls::TlsManager::new();
    m.init(settings(&full, &key, &ca)).unwrap();
    assert_eq!(m.state().unwrap().certs().issuer.as_ref().unwrap().subject, "CN=root");
}

#[test]
fn a_certificate_from_another_ca() {
    let t = Setup::new();
    let other = Ca::root("other").issue(Leaf::node("node1"));
    let cert = t.dir.write("o.crt", &other.cert_pem);
    let key = t.dir.write("o.key", &other.key_pem);
    assert_eq!(kinds(&settings(&cert, &key, &t.ca_file), &[]), [ProblemKind::ChainUnverified]);
}

#[test]
fn expired_and_expiring_certificates() {
    let t = Setup::new();
    for (from, to, kind) in
        [(-30, -1, ProblemKind::Expired), (-30, 10, ProblemKind::ExpiringSoon), (1, 90, ProblemKind::NotYetValid)]
    {
        let c = t.ca.issue(Leaf::node("n").valid(from, to));
        let cert = t.dir.write("c.crt", &c.cert_pem);
        let key = t.dir.write("c.key", &c.key_pem);
        let problems = check(&settings(&cert, &key, &t.ca_file), &[]);
        assert_eq!(problems.iter().map(|p| p.kind).collect::<Vec<_>>(), [kind], "{problems:?}");
    }
    let soon = Ca::root_valid(
        "short CA",
        time::OffsetDateTime::now_utc() - time::Duration::days(1),
        time::OffsetDateTime::now_utc() + time::Duration::days(5),
    );
    let ca = t.dir.write("soon-ca.crt", &soon.pem);
    let n = soon.issue(Leaf::node("n"));
    let cert = t.dir.write("n.crt", &n.cert_pem);
    let key = t.dir.write("n.key", &n.key_pem);
    let problems = check(&settings(&cert, &key, &ca), &[]);
    assert!(
        problems
            .iter()
            .any(|p| p.kind == ProblemKind::ExpiringSoon && p.message.starts_with("CA certificate CN=short CA")),
        "{problems:?}"
    );
}

#[test]
fn server_only_certificates_break_the_bus() {
    let t = Setup::new();
    let srv = t.ca.issue(Leaf::server_only("srv"));
    let cert = t.dir.write("srv.crt", &srv.cert_pem);
    let key = t.dir.write("srv.key", &srv.key_pem);
    let s = settings(&cert, &key, &t.ca_file);
    assert!(check(&s, &[]).is_empty(), "fine for the client port alone");
    let problems = check(&TlsSettings { cluster: true, ..s.clone() }, &[]);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert_eq!(problems[0].kind, ProblemKind::NoClientAuth);
    assert!(problems[0].message.contains("lacks clientAuth while tls-cluster is on"));
    // A separate client certificate fixes it.
    let client = t.ca.issue(Leaf::client("srv-client"));
    let cc = t.dir.write("cc.crt", &client.cert_pem);
    let ck = t.dir.write("cc.key", &client.key_pem);
    let fixed = TlsSettings { cluster: true, client_cert_file: Some(cc), client_key_file: Some(ck), ..s };
    assert!(check(&fixed, &[]).is_empty(), "{:?}", check(&fixed, &[]));
}

#[test]
fn subject_alternative_names_must_cover_the_bind_addresses() {
    let t = Setup::new();
    let problems = check(&t.settings(), &["10.0.0.1", "127.0.0.1", "node1.example.com"]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(problems.iter().all(|p| p.kind == ProblemKind::NameNotCovered));
    assert_eq!(
        problems[0].message,
        "subject alternative names do not cover bind address 10.0.0.1 (the certificate has: DNS:localhost, IP Address:127.0.0.1)"
    );
}

#[test]
fn every_problem_is_reported_not_just_the_first() {
    let t = Setup::new();
    let s = TlsSettings {
        key_file: Some(t.dir.path("nope.key")),
        ca_cert_file: Some(t.dir.path("nope-ca.crt")),
        ciphers: "RC4-SHA".into(),
        ..t.settings()
    };
    let k = kinds(&s, &["10.9.9.9"]);
    assert!(k.contains(&ProblemKind::Config));
    assert_eq!(k.iter().filter(|k| **k == ProblemKind::Unreadable).count(), 2, "{k:?}");
    assert!(k.contains(&ProblemKind::NameNotCovered));
    let missing = check(&TlsSettings { port: 1, ..TlsSettings::default() }, &[]);
    assert_eq!(missing[0].to_string(), "tls-cert-file: No tls-cert-file configured!");
}
