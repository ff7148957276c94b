//! Reloads: CONFIG SET, automatic reload, the generation race, CA rotation.

use std::sync::Arc;
use std::time::Duration;

use hotkv_tls::{ClientAuth, CommitOutcome, ReloadOutcome, TlsManager, TlsSettings};

use crate::pki::{Ca, Leaf, Setup, client_config};
use crate::support::{Pair, capture};

fn renew(t: &Setup, cn: &str) -> crate::pki::Issued {
    let node = t.ca.issue(Leaf::node(cn).key_pem(&t.node.key_pem));
    t.dir.write("node.crt", &node.cert_pem);
    node
}

#[test]
fn config_set_same_path_reloads_new_connections_only() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let app = t.ca.issue(Leaf::client("app"));
    let client = client_config(&[&t.ca.pem], Some(&app));
    let mut old = Pair::new(m.accept(ClientAuth::Required).unwrap(), client.clone());
    assert!(old.handshake().ok());
    assert_eq!(old.server_serial(), t.node.serial());

    let renewed = renew(&t, "node1");
    m.apply(t.settings()).unwrap();
    assert!(logs.text().contains(&format!(
        "TLS configuration reloaded (cert={}, key={})",
        t.cert.display(),
        t.key.display()
    )));

    let mut new = Pair::new(m.accept(ClientAuth::Required).unwrap(), client);
    assert!(new.handshake().ok());
    assert_eq!(new.server_serial(), renewed.serial());
    // The open connection keeps its material and keeps working.
    assert_eq!(old.client_says(b"PING\r\n"), b"PING\r\n");
    assert_eq!(old.server_says(b"+PONG\r\n").unwrap(), b"+PONG\r\n");
    let info = m.info();
    assert_eq!(info.server_cert.unwrap().serial, renewed.serial());
    assert_eq!(info.reloads, 1);
    assert_eq!(info.generation, 2);
    assert_eq!(info.last_reload.unwrap().result, Ok(()));
}

#[test]
fn a_failed_config_set_changes_nothing() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let bad = t.dir.write("not-a-cert.crt", "not a certificate\n");
    let e = m.apply(TlsSettings { cert_file: Some(bad), ..t.settings() }).unwrap_err();
    assert!(e.config_set_reply().starts_with(
        "ERR Unable to update TLS configuration: use_certificate_chain_file: no start line (PEM routines) ["
    ));
    let state = m.state().unwrap();
    assert_eq!(state.generation(), 1);
    assert_eq!(state.settings().cert_file.as_deref(), Some(t.cert.as_path()));
    assert_eq!(m.settings().cert_file.as_deref(), Some(t.cert.as_path()));
    let info = m.info();
    assert_eq!(info.reload_failures, 1);
    assert!(info.last_reload.unwrap().result.unwrap_err().contains("no start line"));
}

#[test]
fn a_reload_refuses_a_new_expired_certificate_but_not_the_one_in_use() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let expired = t.ca.issue(Leaf::node("node1").valid(-30, -1).key_pem(&t.node.key_pem));
    let old_file = t.dir.write("old.crt", &expired.cert_pem);
    let e = m.apply(TlsSettings { cert_file: Some(old_file.clone()), ..t.settings() }).unwrap_err();
    assert!(e.to_string().starts_with("use_certificate_chain_file: certificate has expired (notAfter="), "{e}");

    // A node that started with an expired certificate may still change other settings.
    let m = TlsManager::new();
    m.init(TlsSettings { cert_file: Some(old_file.clone()), ..t.settings() }).unwrap();
    m.apply(TlsSettings { cert_file: Some(old_file), prefer_server_ciphers: true, ..t.settings() }).unwrap();
    assert_eq!(m.state().unwrap().generation(), 2);
}

#[test]
fn an_auto_reload_never_overrides_a_newer_config_set() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    // The background reload starts from the old settings (old path)...
    let stale = m.prepare_auto_reload().unwrap();
    // ...a CONFIG SET to a new path commits meanwhile...
    let other = t.ca.issue(Leaf::node("node2"));
    let cert2 = t.dir.write("node2.crt", &other.cert_pem);
    let key2 = t.dir.write("node2.key", &other.key_pem);
    m.apply(TlsSettings { cert_file: Some(cert2.clone()), key_file: Some(key2), ..t.settings() }).unwrap();
    // ...and the older build arrives last: it must lose.
    assert_eq!(m.commit(stale), CommitOutcome::Superseded);
    let state = m.state().unwrap();
    assert_eq!(state.certs().server.serial, other.serial());
    assert_eq!(state.settings().cert_file.as_deref(), Some(cert2.as_path()));
}

#[test]
fn an_auto_reload_yields_to_a_config_set_in_flight() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let auto = m.prepare_auto_reload().unwrap();
    let config_set = m.prepare_apply(TlsSettings { prefer_server_ciphers: true, ..t.settings() }).unwrap();
    assert_eq!(m.commit(auto), CommitOutcome::Superseded);
    assert_eq!(m.commit(config_set), CommitOutcome::Applied(2));
    // Nothing in flight any more: the next automatic reload may commit.
    let auto = m.prepare_auto_reload().unwrap();
    assert_eq!(m.commit(auto), CommitOutcome::Applied(3));
    assert!(m.state().unwrap().settings().prefer_server_ciphers, "the auto reload kept the CONFIG SET's settings");
}

#[test]
fn config_sets_committed_out_of_order_keep_the_newest() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let first = m.prepare_apply(TlsSettings { ciphers: "aRSA:aECDSA".into(), ..t.settings() }).unwrap();
    let second = m.prepare_apply(TlsSettings { ciphers: "aECDSA".into(), ..t.settings() }).unwrap();
    assert_eq!(m.commit(second), CommitOutcome::Applied(2));
    assert_eq!(m.commit(first), CommitOutcome::Superseded);
    assert_eq!(m.settings().ciphers, "aECDSA");
    // A dropped (failed) CONFIG SET build does not block automatic reloads.
    drop(m.prepare_apply(t.settings()).unwrap());
    assert_eq!(m.commit(m.prepare_auto_reload().unwrap()), CommitOutcome::Applied(3));
}

#[test]
fn auto_reload_follows_content_not_mtime() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(TlsSettings { auto_reload_interval: 5, ..t.settings() }).unwrap();
    assert!(matches!(m.reload_if_changed(), ReloadOutcome::Unchanged));
    assert!(logs.text().contains("TLS reload skipped: materials unchanged"));

    // Touch: new mtime, same bytes.
    let later = std::time::SystemTime::now() + Duration::from_secs(120);
    std::fs::File::options().write(true).open(&t.cert).unwrap().set_modified(later).unwrap();
    t.dir.write("node.key", &t.node.key_pem);
    assert!(matches!(m.reload_if_changed(), ReloadOutcome::Unchanged));
    assert_eq!(m.state().unwrap().generation(), 1);

    let renewed = renew(&t, "node1");
    assert_eq!(m.info().files_match_loaded, Some(true));
    assert!(matches!(m.reload_if_changed(), ReloadOutcome::Reloaded(2)));
    let text = logs.text();
    assert!(text.contains("TLS materials changed, reloading in background"), "{text}");
    assert!(text.contains(&format!("TLS configuration reloaded (cert={}, key={})", t.cert.display(), t.key.display())));
    assert!(text.contains("TLS materials reloaded successfully"));
    assert_eq!(m.info().server_cert.unwrap().serial, renewed.serial());
}

#[test]
fn auto_reload_sees_a_ca_added_to_the_bundle() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    // Only the second certificate of the bundle changes: a first-certificate digest would miss it.
    let new_ca = Ca::root("second CA");
    t.dir.write("ca.crt", format!("{}{}", t.ca.pem, new_ca.pem));
    assert!(matches!(m.reload_if_changed(), ReloadOutcome::Reloaded(_)));
    assert_eq!(m.state().unwrap().certs().cas.len(), 2);
}

#[test]
fn a_broken_file_is_reported_once_and_the_certificate_stays() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    t.dir.write("node.crt", "not a certificate\n");
    for _ in 0..3 {
        assert!(matches!(m.reload_if_changed(), ReloadOutcome::Failed(_)));
    }
    let line =
        "TLS reload failed, keeping the current certificate: use_certificate_chain_file: no start line (PEM routines)";
    assert_eq!(logs.count(line), 1, "{}", logs.text());
    assert_eq!(m.state().unwrap().generation(), 1);
    assert_eq!(m.info().files_match_loaded, Some(false));
    // Half-rotated: a new certificate with the old key is a mismatch; skipped, retried.
    let other = t.ca.issue(Leaf::node("node1"));
    t.dir.write("node.crt", &other.cert_pem);
    assert!(matches!(m.reload_if_changed(), ReloadOutcome::Failed(e) if e.to_string().contains("key values mismatch")));
    t.dir.write("node.key", &other.key_pem);
    assert!(matches!(m.reload_if_changed(), ReloadOutcome::Reloaded(_)));
    assert_eq!(m.info().server_cert.unwrap().serial, other.serial());
}

#[test]
fn ca_rotation_with_reloads_only() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let new_ca = Ca::root("new cluster CA");
    let old_app = t.ca.issue(Leaf::client("app-old"));
    let new_app = new_ca.issue(Leaf::client("app-new"));
    let accepts = |m: &TlsManager, trusted_server_ca: &str, app: &crate::pki::Issued| {
        let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[trusted_server_ca], Some(app)));
        p.handshake().ok()
    };
    assert!(accepts(&m, &t.ca.pem, &old_app));
    assert!(!accepts(&m, &t.ca.pem, &new_app));

    // 1. Trust both.
    t.dir.write("ca.crt", format!("{}{}", t.ca.pem, new_ca.pem));
    m.apply(t.settings()).unwrap();
    assert!(accepts(&m, &t.ca.pem, &old_app));
    assert!(accepts(&m, &t.ca.pem, &new_app));
    // 2. Move the node to a certificate from the new CA.
    let node = new_ca.issue(Leaf::node("node1"));
    t.dir.write("node.crt", &node.cert_pem);
    t.dir.write("node.key", &node.key_pem);
    m.apply(t.settings()).unwrap();
    assert!(accepts(&m, &new_ca.pem, &old_app));
    assert!(accepts(&m, &new_ca.pem, &new_app));
    // 3. Drop the old CA.
    t.dir.write("ca.crt", &new_ca.pem);
    m.apply(t.settings()).unwrap();
    assert!(!accepts(&m, &new_ca.pem, &old_app));
    assert!(accepts(&m, &new_ca.pem, &new_app));
}

#[test]
fn dropping_a_ca_also_drops_sessions_it_admitted() {
    let t = Setup::new();
    let new_ca = Ca::root("new CA");
    t.dir.write("ca.crt", format!("{}{}", t.ca.pem, new_ca.pem));
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let old_app = t.ca.issue(Leaf::client("app-old"));
    let client = client_config(&[&t.ca.pem], Some(&old_app));
    let mut first = Pair::new(m.accept(ClientAuth::Required).unwrap(), client.clone());
    assert!(first.handshake().ok());
    assert_eq!(first.server_says(b"+x\r\n").unwrap(), b"+x\r\n");
    // Same files: the cache survives a reload and the session resumes.
    m.apply(t.settings()).unwrap();
    let mut again = Pair::new(m.accept(ClientAuth::Required).unwrap(), client.clone());
    assert!(again.handshake().ok());
    assert_eq!(again.client.handshake_kind(), Some(hotkv_tls::rustls::HandshakeKind::Resumed));
    assert_eq!(again.server_says(b"+x\r\n").unwrap(), b"+x\r\n");
    // The old CA goes: its client cannot come back by resumption.
    t.dir.write("ca.crt", &new_ca.pem);
    m.apply(t.settings()).unwrap();
    let mut after = Pair::new(m.accept(ClientAuth::Required).unwrap(), client);
    assert!(!after.handshake().ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_background_task_reloads_a_renewed_certificate() {
    let t = Setup::new();
    let m = Arc::new(TlsManager::new());
    m.init(TlsSettings { auto_reload_interval: 1, ..t.settings() }).unwrap();
    let task = tokio::spawn(m.clone().run_background());
    let renewed = renew(&t, "node1");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while m.info().server_cert.unwrap().serial != renewed.serial() {
        assert!(tokio::time::Instant::now() < deadline, "not reloaded within 10 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Turning the interval off needs no rebuild; CONFIG SET goes through the blocking pool.
    let generation = m.state().unwrap().generation();
    m.set_auto_reload_interval(0);
    assert_eq!(m.settings().auto_reload_interval, 0);
    assert_eq!(m.state().unwrap().generation(), generation);
    // Let a check that was already running when the interval changed finish first.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let again = renew(&t, "node1");
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_ne!(m.info().server_cert.unwrap().serial, again.serial(), "no automatic reload once off");
    m.apply_async(TlsSettings { auto_reload_interval: 0, ..t.settings() }).await.unwrap();
    assert_eq!(m.info().server_cert.unwrap().serial, again.serial());
    task.abort();
}

#[test]
fn a_rotation_to_a_ca_of_the_same_name_reports_the_ca_that_signed() {
    // Rotations often reissue the CA under the same name; while both are trusted, the issuer
    // reported (and gossiped by the cluster) must be the one whose key signed the certificate.
    let t = Setup::new();
    let new_ca = Ca::root("hotkv test CA");
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let issuer = || m.state().unwrap().certs().issuer.clone().unwrap();
    let old_fp = issuer().fingerprint;
    assert_eq!(issuer().file.as_deref(), Some(t.ca_file.as_path()));
    t.dir.write("ca.crt", format!("{}{}", t.ca.pem, new_ca.pem));
    m.apply(t.settings()).unwrap();
    assert_eq!(m.state().unwrap().certs().cas.len(), 2);
    assert_eq!(issuer().fingerprint, old_fp, "the old CA still signs the certificate in use");
    let node = new_ca.issue(Leaf::node("node1"));
    t.dir.write("node.crt", &node.cert_pem);
    t.dir.write("node.key", &node.key_pem);
    m.apply(t.settings()).unwrap();
    assert_ne!(issuer().fingerprint, old_fp, "the new CA signs the new certificate");
    assert_eq!(
        m.state().unwrap().certs().server.fingerprint,
        hotkv_tls::CertInfo::parse(&node.der).unwrap().fingerprint
    );
}

#[test]
fn listeners_hear_of_every_commit_automatic_reloads_included() {
    let t = Setup::new();
    let m = TlsManager::new();
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let log = seen.clone();
    m.on_commit(move |st| log.lock().unwrap().push(st.map(|s| s.certs().server.serial.clone())));
    assert_eq!(*seen.lock().unwrap(), [None], "called at once with the state in force");
    m.init(t.settings()).unwrap();
    let renewed = renew(&t, "node1");
    assert!(matches!(m.reload_if_changed(), ReloadOutcome::Reloaded(_)));
    m.apply(TlsSettings { cluster: false, port: 0, replication: false, ..t.settings() }).unwrap();
    assert_eq!(*seen.lock().unwrap(), [None, Some(t.node.serial()), Some(renewed.serial()), None]);
    // A failed reload commits nothing, and tells nobody.
    t.dir.write("node.crt", "not a certificate\n");
    assert!(m.apply(t.settings()).is_err());
    assert_eq!(seen.lock().unwrap().len(), 4);
}
