//! Real handshakes between a `TlsSession` server and a rustls client, in memory.

use std::sync::atomic::Ordering;

use bytes::BytesMut;
use hotkv_tls::rustls::{self, AlertDescription, CertificateError};
use hotkv_tls::{CertUser, ClientAuth, HandshakeError, TlsManager, TlsSettings};

use crate::pki::{Ca, Leaf, Setup, client_config};
use crate::support::{Pair, count_records};

fn manager(s: TlsSettings) -> TlsManager {
    let m = TlsManager::new();
    m.init(s).unwrap();
    m
}

#[test]
fn required_client_auth_with_a_trusted_certificate() {
    let t = Setup::new();
    let m = manager(t.settings());
    let app = t.ca.issue(Leaf::client("app"));
    let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[&t.ca.pem], Some(&app)));
    let out = p.handshake();
    assert!(out.ok(), "{out:?}");
    assert!(!p.server.is_handshaking());
    assert_eq!(p.client_says(b"PING\r\n"), b"PING\r\n");
    assert_eq!(p.server_says(b"+PONG\r\n").unwrap(), b"+PONG\r\n");
    assert_eq!(p.server.peer_certificate_name(CertUser::CommonName).as_deref(), Some("app"));
    assert_eq!(p.server.protocol(), Some("TLSv1.3"));
    assert_eq!(m.counters().connections_current.load(Ordering::Relaxed), 1);
    drop(p);
    assert_eq!(m.counters().connections_current.load(Ordering::Relaxed), 0);
    assert_eq!(m.counters().connections_total.load(Ordering::Relaxed), 1);
}

#[test]
fn required_client_auth_without_a_certificate() {
    let t = Setup::new();
    let m = manager(t.settings());
    let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[&t.ca.pem], None));
    let out = p.handshake();
    assert_eq!(out.server.unwrap().to_string(), "peer did not return a certificate (SSL routines)");
    assert_eq!(out.client, Some(rustls::Error::AlertReceived(AlertDescription::CertificateRequired)));
    assert_eq!(m.counters().handshake_failures.load(Ordering::Relaxed), 1);
    assert_eq!(m.info().handshake_failures, 1);
}

#[test]
fn optional_client_auth_admits_both_and_checks_what_is_sent() {
    let t = Setup::new();
    let m = manager(TlsSettings { auth_clients: ClientAuth::Optional, ..t.settings() });
    let mut p = Pair::new(m.accept(ClientAuth::Optional).unwrap(), client_config(&[&t.ca.pem], None));
    assert!(p.handshake().ok());
    assert_eq!(p.server.peer_certificate_name(CertUser::CommonName), None);
    let app = t.ca.issue(Leaf::client("app"));
    let mut p = Pair::new(m.accept(ClientAuth::Optional).unwrap(), client_config(&[&t.ca.pem], Some(&app)));
    assert!(p.handshake().ok());
    assert_eq!(p.server.peer_certificate_name(CertUser::CommonName).as_deref(), Some("app"));
    let rogue = Ca::root("rogue").issue(Leaf::client("app"));
    let mut p = Pair::new(m.accept(ClientAuth::Optional).unwrap(), client_config(&[&t.ca.pem], Some(&rogue)));
    assert_eq!(p.handshake().server, Some(HandshakeError::VerifyFailed("unable to get local issuer certificate")));
}

#[test]
fn no_client_auth_does_not_ask() {
    let t = Setup::new();
    let m = manager(TlsSettings { auth_clients: ClientAuth::NotRequested, ..t.settings() });
    let app = Ca::root("anything").issue(Leaf::client("app"));
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client_config(&[&t.ca.pem], Some(&app)));
    assert!(p.handshake().ok());
    assert_eq!(p.server.peer_certificate(), None, "a certificate that was not asked for is not examined");
}

#[test]
fn the_mode_is_chosen_per_accept_without_a_reload() {
    let t = Setup::new();
    let m = manager(t.settings());
    let generation = m.state().unwrap().generation();
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client_config(&[&t.ca.pem], None));
    assert!(p.handshake().ok());
    assert_eq!(m.state().unwrap().generation(), generation);
}

#[test]
fn a_plain_text_client_is_wrong_version_number() {
    let t = Setup::new();
    let m = manager(t.settings());
    let mut s = m.accept(ClientAuth::Required).unwrap();
    let mut plain = BytesMut::new();
    let e = s.feed(b"PING\r\n", &mut plain).unwrap_err();
    assert_eq!(e.to_string(), "wrong version number (SSL routines)");
    // One byte at a time: a lone 0x16 is fine, a second byte that is not 3 is not.
    let mut s = m.accept(ClientAuth::Required).unwrap();
    assert!(s.feed(&[0x16], &mut plain).is_ok());
    assert_eq!(s.feed(b"\r", &mut plain), Err(HandshakeError::WrongVersionNumber));
    assert_eq!(m.counters().handshake_failures.load(Ordering::Relaxed), 2);
}

#[test]
fn a_client_from_another_ca_is_unknown_and_the_client_hears_unknown_ca() {
    let t = Setup::new();
    let m = manager(t.settings());
    let rogue = Ca::root("rogue CA").issue(Leaf::client("intruder"));
    let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[&t.ca.pem], Some(&rogue)));
    let out = p.handshake();
    assert_eq!(
        out.server.unwrap().to_string(),
        "certificate verify failed (SSL routines): unable to get local issuer certificate"
    );
    let client = hotkv_tls::HandshakeError::from_rustls(&out.client.unwrap());
    assert_eq!(client.to_string(), "tlsv1 alert unknown ca (SSL routines)");
}

#[test]
fn an_expired_client_certificate_is_certificate_has_expired() {
    let t = Setup::new();
    let m = manager(t.settings());
    let old = t.ca.issue(Leaf::client("old").valid(-60, -1));
    let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[&t.ca.pem], Some(&old)));
    let out = p.handshake();
    assert_eq!(out.server.unwrap().to_string(), "certificate verify failed (SSL routines): certificate has expired");
    let client = HandshakeError::from_rustls(&out.client.unwrap());
    assert_eq!(client.to_string(), "ssl/tls alert certificate expired (SSL routines)");
}

#[test]
fn a_server_certificate_from_an_unknown_ca_fails_on_the_client() {
    let t = Setup::new();
    let m = manager(TlsSettings { auth_clients: ClientAuth::NotRequested, ..t.settings() });
    let other = Ca::root("other CA");
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client_config(&[&other.pem], None));
    let out = p.handshake();
    assert_eq!(out.client, Some(rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer)));
    assert_eq!(
        HandshakeError::from_rustls(out.client.as_ref().unwrap()).to_string(),
        "certificate verify failed (SSL routines): unable to get local issuer certificate"
    );
}

#[test]
fn a_batch_of_small_replies_is_one_record() {
    let t = Setup::new();
    let m = manager(TlsSettings { auth_clients: ClientAuth::NotRequested, ..t.settings() });
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client_config(&[&t.ca.pem], None));
    assert!(p.handshake().ok());
    // Drain session tickets and anything else the handshake left.
    let mut out = Vec::new();
    p.server.take_tls_output(&mut out);
    out.clear();

    let batch: Vec<u8> = (0..200).flat_map(|_| b"+OK\r\n".iter().copied()).collect();
    p.server.write_plaintext(&batch);
    assert!(p.server.take_tls_output(&mut out) > 0);
    assert_eq!(count_records(&out), 1, "200 replies in one batch → one record");

    // What a write per reply would cost (tokio-rustls' model): one record each.
    out.clear();
    for _ in 0..200 {
        p.server.write_plaintext(b"+OK\r\n");
    }
    p.server.take_tls_output(&mut out);
    assert_eq!(count_records(&out), 200);

    // Large batches are cut at 16 KiB records only.
    out.clear();
    p.server.write_plaintext(&vec![b'x'; 40 * 1024]);
    p.server.take_tls_output(&mut out);
    assert_eq!(count_records(&out), 3);
}

#[test]
fn replies_written_during_the_handshake_leave_after_it() {
    let t = Setup::new();
    let m = manager(TlsSettings { auth_clients: ClientAuth::NotRequested, ..t.settings() });
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client_config(&[&t.ca.pem], None));
    p.server.write_plaintext(b"+early\r\n");
    assert!(p.handshake().ok());
    assert_eq!(p.server_says(b"").unwrap(), b"+early\r\n");
}

#[test]
fn pipelined_commands_across_many_records_arrive_whole() {
    let t = Setup::new();
    let m = manager(TlsSettings { auth_clients: ClientAuth::NotRequested, ..t.settings() });
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client_config(&[&t.ca.pem], None));
    assert!(p.handshake().ok());
    // 100 KiB in one feed: more than rustls buffers at once, so feed must drain as it goes.
    let big: Vec<u8> = (0..100 * 1024).map(|i| (i % 251) as u8).collect();
    assert_eq!(p.client_says(&big), big);
}

#[test]
fn uri_mode_lists_every_uri_san_and_cn_mode_refuses_embedded_nul() {
    let t = Setup::new();
    let m = manager(t.settings());
    let app = t.ca.issue(Leaf::client("app").uri("spiffe://cluster/app").uri("urn:user:alice"));
    let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[&t.ca.pem], Some(&app)));
    assert!(p.handshake().ok());
    assert_eq!(p.server.peer_certificate_names(CertUser::Uri), ["spiffe://cluster/app", "urn:user:alice"]);
    assert_eq!(p.server.peer_certificate_name(CertUser::Off), None);
    let nul = t.ca.issue(Leaf::client("admin\0evil"));
    let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[&t.ca.pem], Some(&nul)));
    assert!(p.handshake().ok());
    assert_eq!(p.server.peer_certificate_name(CertUser::CommonName), None);
}

#[test]
fn eof_mid_handshake_is_reported_but_a_silent_probe_is_not() {
    let t = Setup::new();
    let m = manager(t.settings());
    let mut probe = m.accept(ClientAuth::Required).unwrap();
    assert_eq!(probe.eof_error(), None);
    let mut p = Pair::new(m.accept(ClientAuth::Required).unwrap(), client_config(&[&t.ca.pem], None));
    let mut out = crate::support::Outcome { server: None, client: None };
    p.step(&mut out);
    assert_eq!(p.server.eof_error().unwrap().to_string(), "unexpected eof while reading (SSL routines)");
}

#[test]
fn tls12_only_and_cipher_selection() {
    let t = Setup::new();
    let s = TlsSettings {
        auth_clients: ClientAuth::NotRequested,
        protocols: "TLSv1.2".into(),
        ciphers: "ECDHE-ECDSA-CHACHA20-POLY1305".into(),
        ..t.settings()
    };
    let m = manager(s);
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client_config(&[&t.ca.pem], None));
    assert!(p.handshake().ok());
    assert_eq!(p.server.protocol(), Some("TLSv1.2"));
    assert_eq!(p.server.cipher_suite(), Some("TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"));
}

#[test]
fn prefer_server_ciphers_picks_the_servers_order() {
    let t = Setup::new();
    let client = {
        use hotkv_tls::rustls::crypto::aws_lc_rs::{cipher_suite as cs, default_provider};
        let provider = rustls::crypto::CryptoProvider {
            cipher_suites: vec![cs::TLS13_CHACHA20_POLY1305_SHA256, cs::TLS13_AES_256_GCM_SHA384],
            ..default_provider()
        };
        let roots = {
            let mut r = rustls::RootCertStore::empty();
            use hotkv_tls::rustls::pki_types::{CertificateDer, pem::PemObject};
            r.add(CertificateDer::from_pem_slice(t.ca.pem.as_bytes()).unwrap()).unwrap();
            r
        };
        std::sync::Arc::new(
            rustls::ClientConfig::builder_with_provider(std::sync::Arc::new(provider))
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_root_certificates(roots)
                .with_no_client_auth(),
        )
    };
    let base = TlsSettings {
        auth_clients: ClientAuth::NotRequested,
        ciphersuites: "TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256".into(),
        ..t.settings()
    };
    let m = manager(base.clone());
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client.clone());
    assert!(p.handshake().ok());
    assert_eq!(p.server.cipher_suite(), Some("TLS13_CHACHA20_POLY1305_SHA256"), "client order by default");
    let m = manager(TlsSettings { prefer_server_ciphers: true, ..base });
    let mut p = Pair::new(m.accept(ClientAuth::NotRequested).unwrap(), client);
    assert!(p.handshake().ok());
    assert_eq!(p.server.cipher_suite(), Some("TLS13_AES_256_GCM_SHA384"));
}

#[test]
fn sessions_resume_from_the_cache_and_not_when_caching_is_off() {
    let t = Setup::new();
    let app = t.ca.issue(Leaf::client("app"));
    for (caching, expect) in [(true, true), (false, false)] {
        let m = manager(TlsSettings { session_caching: caching, ..t.settings() });
        let client = client_config(&[&t.ca.pem], Some(&app));
        let mut first = Pair::new(m.accept(ClientAuth::Required).unwrap(), client.clone());
        assert!(first.handshake().ok());
        // Let the client take the session ticket.
        assert_eq!(first.server_says(b"+x\r\n").unwrap(), b"+x\r\n");
        let mut second = Pair::new(m.accept(ClientAuth::Required).unwrap(), client);
        assert!(second.handshake().ok());
        let resumed = second.client.handshake_kind() == Some(rustls::HandshakeKind::Resumed);
        assert_eq!(resumed, expect, "session_caching {caching}");
        assert_eq!(second.server.peer_certificate_name(CertUser::CommonName).as_deref(), Some("app"));
    }
}
