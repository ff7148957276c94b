//! Startup loads: every load error text, the requirements, encrypted keys, the log lines.

use std::os::unix::fs::PermissionsExt;

use hotkv_tls::{ClientAuth, TlsManager, TlsSettings};

use crate::pki::{Ca, Leaf, Setup, TempDir, encrypt_key, settings};
use crate::support::capture;

fn init_err(s: TlsSettings) -> String {
    TlsManager::new().init(s).unwrap_err().to_string()
}

#[test]
fn a_good_configuration_loads_and_logs_what_it_loaded() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let text = logs.text();
    let line = format!("SSL context initialized (cert={}, key={})", t.cert.display(), t.key.display());
    assert!(text.contains(&line), "{text}");
    assert!(text.contains(&format!("TLS certificate in use: subject=CN=node1, serial={}", t.node.serial())), "{text}");
    assert!(text.contains("ca_not_after="), "{text}");
    let state = m.state().unwrap();
    assert_eq!(state.generation(), 1);
    assert_eq!(state.certs().cas.len(), 1);
    assert!(state.bus_server_config().is_some() && state.client_config().is_some());
    let info = m.info();
    assert_eq!(info.server_cert.unwrap().serial, t.node.serial());
    assert_eq!(info.files_match_loaded, Some(true));
}

#[test]
fn tls_not_in_use_loads_nothing() {
    let m = TlsManager::new();
    m.init(TlsSettings { cert_file: Some("/nonexistent".into()), ..TlsSettings::default() }).unwrap();
    assert!(m.state().is_none());
    assert_eq!(m.info().fields()[0], ("tls_server_cert_serial", "none".to_owned()));
}

#[test]
fn missing_directives_use_upstream_texts() {
    let base = TlsSettings { port: 6380, ..TlsSettings::default() };
    assert_eq!(init_err(base.clone()), "No tls-cert-file configured!");
    let t = Setup::new();
    let no_ca = TlsSettings { ca_cert_file: None, cluster: true, port: 0, ..t.settings() };
    assert!(init_err(no_ca).starts_with("Either tls-ca-cert-file or tls-ca-cert-dir must be specified"));
    let repl = TlsSettings {
        ca_cert_file: None,
        replication: true,
        port: 0,
        auth_clients: ClientAuth::NotRequested,
        ..t.settings()
    };
    assert!(init_err(repl).starts_with("Either tls-ca-cert-file"));
    // Client port only, no client certificates asked: no CA needed, no bus or outbound config.
    let m = TlsManager::new();
    m.init(TlsSettings { ca_cert_file: None, auth_clients: ClientAuth::NotRequested, ..t.settings() }).unwrap();
    assert!(m.state().unwrap().client_config().is_none());
}

#[test]
fn unreadable_files_name_the_file_and_the_reason() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let missing = t.dir.path("missing.key");
    let e = init_err(TlsSettings { key_file: Some(missing.clone()), ..t.settings() });
    assert_eq!(e, format!("use_private_key_file: No such file or directory [{}]", missing.display()));
    assert!(logs.text().contains(&format!("Failed to initialize SSL context: {e}")), "{}", logs.text());
    let e = init_err(TlsSettings { cert_file: Some(t.dir.0.clone()), ..t.settings() });
    assert!(e.starts_with("use_certificate_chain_file: Is a directory ["), "{e}");
    let e = init_err(TlsSettings { ca_cert_file: Some(t.dir.path("nope.crt")), ..t.settings() });
    assert!(e.starts_with("Failed to configure CA certificate(s) file/directory: No such file or directory ["), "{e}");
}

#[test]
fn a_key_only_root_can_read_is_permission_denied() {
    let t = Setup::new();
    std::fs::set_permissions(&t.key, std::fs::Permissions::from_mode(0o000)).unwrap();
    if std::fs::read(&t.key).is_ok() {
        // Running as root: permission bits do not stop us. The mapping is unit-tested in
        // error.rs; here only check that the load still works.
        assert!(TlsManager::new().init(t.settings()).is_ok());
        return;
    }
    let (logs, _g) = capture();
    let e = init_err(t.settings());
    assert_eq!(e, format!("use_private_key_file: Permission denied [{}]", t.key.display()));
    assert!(logs.text().contains("Failed to initialize SSL context: use_private_key_file: Permission denied"));
}

#[test]
fn text_instead_of_a_certificate_is_no_start_line() {
    let t = Setup::new();
    let bad = t.dir.write("not-a-cert.crt", "not a certificate\n");
    let e = TlsManager::new().init(TlsSettings { cert_file: Some(bad.clone()), ..t.settings() }).unwrap_err();
    assert_eq!(
        e.config_set_reply(),
        format!(
            "ERR Unable to update TLS configuration: use_certificate_chain_file: no start line (PEM routines) [{}]",
            bad.display()
        )
    );
    let e = init_err(TlsSettings { key_file: Some(bad), ..t.settings() });
    assert!(e.starts_with("use_private_key_file: no start line (PEM routines)"), "{e}");
    let e = init_err(TlsSettings { ca_cert_file: Some(t.key.clone()), ..t.settings() });
    assert!(e.starts_with("Failed to configure CA certificate(s) file/directory: no start line (PEM routines)"), "{e}");
}

#[test]
fn a_key_that_is_not_the_certificates_is_refused() {
    let t = Setup::new();
    let other = t.ca.issue(Leaf::node("other"));
    let wrong = t.dir.write("wrong.key", &other.key_pem);
    let e = init_err(TlsSettings { key_file: Some(wrong.clone()), ..t.settings() });
    assert_eq!(
        e,
        format!(
            "use_private_key_file: key values mismatch (x509 certificate routines) [{} is not the key of {}]",
            wrong.display(),
            t.cert.display()
        )
    );
}

#[test]
fn encrypted_keys_need_the_right_passphrase() {
    let t = Setup::new();
    let enc = encrypt_key(&t.dir, &t.node.key_pem, "1234");
    let s = TlsSettings { key_file: Some(enc.clone()), key_file_pass: Some("1234".into()), ..t.settings() };
    TlsManager::new().init(s.clone()).unwrap();
    let e = init_err(TlsSettings { key_file_pass: Some("wrong".into()), ..s.clone() });
    assert_eq!(e, format!("use_private_key_file: bad decrypt (Provider routines) [{}]", enc.display()));
    let e = init_err(TlsSettings { key_file_pass: None, ..s });
    assert!(e.starts_with("use_private_key_file: bad password read (PEM routines)"), "{e}");
}

#[test]
fn the_client_pair_is_loaded_and_checked_too() {
    let t = Setup::new();
    let client = t.ca.issue(Leaf::client("node1-client"));
    let cc = t.dir.write("client.crt", &client.cert_pem);
    let ck = t.dir.write("client.key", &client.key_pem);
    let m = TlsManager::new();
    let s =
        TlsSettings { client_cert_file: Some(cc.clone()), client_key_file: Some(ck), cluster: true, ..t.settings() };
    m.init(s.clone()).unwrap();
    assert_eq!(m.state().unwrap().outbound_cert().serial, client.serial());
    assert_eq!(m.info().client_cert.unwrap().serial, client.serial());
    let e = init_err(TlsSettings { client_key_file: Some(t.key.clone()), ..s });
    assert!(e.contains("key values mismatch") && e.contains(&cc.display().to_string()), "{e}");
}

#[test]
fn ca_directory_with_any_file_names() {
    let t = Setup::new();
    let dir = TempDir::new();
    dir.write("cluster-ca.pem", &t.ca.pem);
    dir.write("README", "not a certificate");
    dir.write(".hidden", "ignored");
    let m = TlsManager::new();
    m.init(TlsSettings { ca_cert_file: None, ca_cert_dir: Some(dir.0.clone()), ..t.settings() }).unwrap();
    assert_eq!(m.state().unwrap().certs().cas.len(), 1);
    let empty = TempDir::new();
    let e = init_err(TlsSettings { ca_cert_file: None, ca_cert_dir: Some(empty.0.clone()), ..t.settings() });
    assert!(e.contains("no certificate or crl found"), "{e}");
}

#[test]
fn expired_cas_are_dropped_with_a_warning_not_fatal() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let old = Ca::root_valid(
        "old CA",
        time::OffsetDateTime::now_utc() - time::Duration::days(400),
        time::OffsetDateTime::now_utc() - time::Duration::days(1),
    );
    let bundle = t.dir.write("bundle.crt", format!("{}{}", t.ca.pem, old.pem));
    let m = TlsManager::new();
    m.init(TlsSettings { ca_cert_file: Some(bundle), ..t.settings() }).unwrap();
    let state = m.state().unwrap();
    assert_eq!(state.certs().cas.len(), 1);
    assert_eq!(state.certs().dropped_cas.len(), 1);
    assert!(logs.text().contains("TLS CA certificate has expired, not trusted"), "{}", logs.text());
}

#[test]
fn startup_loads_an_expired_or_future_certificate_but_says_so() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let expired = t.ca.issue(Leaf::node("expired").valid(-30, -1));
    let cert = t.dir.write("expired.crt", &expired.cert_pem);
    let key = t.dir.write("expired.key", &expired.key_pem);
    TlsManager::new().init(settings(&cert, &key, &t.ca_file)).unwrap();
    assert!(logs.text().contains("TLS server certificate has expired"), "{}", logs.text());
    let future = t.ca.issue(Leaf::node("future").valid(2, 30));
    let cert = t.dir.write("future.crt", &future.cert_pem);
    let key = t.dir.write("future.key", &future.key_pem);
    TlsManager::new().init(settings(&cert, &key, &t.ca_file)).unwrap();
    let text = logs.text();
    assert!(text.contains("ERROR") && text.contains("TLS server certificate is not valid yet"), "{text}");
}

#[test]
fn protocols_and_ciphers_rustls_lacks_fail_the_load() {
    let t = Setup::new();
    let e = init_err(TlsSettings { protocols: "TLSv1 TLSv1.2".into(), ..t.settings() });
    assert!(e.contains("TLSv1 is not supported"), "{e}");
    let e = init_err(TlsSettings { ciphers: "AES128-SHA256".into(), ..t.settings() });
    assert!(e.starts_with("Failed to configure ciphers: 'AES128-SHA256' is not supported by rustls"), "{e}");
    let e = init_err(TlsSettings { ciphersuites: "TLS_AES_128_CCM_8_SHA256".into(), ..t.settings() });
    assert!(e.starts_with("Failed to configure ciphersuites:"), "{e}");
    let e = init_err(TlsSettings { expected_peer_names: " ".into(), ..t.settings() });
    assert!(e.contains("at least one name"), "{e}");
}

#[test]
fn dh_params_file_must_be_dh_params() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let dh = t.dir.write("dh.pem", "-----BEGIN DH PARAMETERS-----\nMAA=\n-----END DH PARAMETERS-----\n");
    TlsManager::new().init(TlsSettings { dh_params_file: Some(dh), ..t.settings() }).unwrap();
    assert!(logs.text().contains("tls-dh-params-file is ignored: DHE is not supported, ECDHE is used"));
    let e = init_err(TlsSettings { dh_params_file: Some(t.cert.clone()), ..t.settings() });
    assert!(e.starts_with("Failed to load DH params file: no start line (PEM routines)"), "{e}");
}

#[test]
fn a_server_only_certificate_with_tls_cluster_is_an_error_line() {
    let (logs, _g) = capture();
    let t = Setup::new();
    let srv = t.ca.issue(Leaf::server_only("srv"));
    let cert = t.dir.write("srv.crt", &srv.cert_pem);
    let key = t.dir.write("srv.key", &srv.key_pem);
    TlsManager::new().init(TlsSettings { cluster: true, ..settings(&cert, &key, &t.ca_file) }).unwrap();
    assert!(logs.text().contains("has no clientAuth extended key usage"), "{}", logs.text());
}
