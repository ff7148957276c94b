//! Server-to-server links: one node dials another's bus (async, tokio-rustls) in memory.

use std::sync::atomic::Ordering;

use hotkv_tls::{HandshakeError, TlsManager, TlsSettings};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::pki::{Ca, Issued, Leaf, TempDir, settings};

/// A node with its own certificate, trusting `ca`.
fn node(dir: &TempDir, name: &str, ca_pem: &str, cert: &Issued) -> TlsManager {
    let c = dir.write(&format!("{name}.crt"), &cert.cert_pem);
    let k = dir.write(&format!("{name}.key"), &cert.key_pem);
    let ca = dir.write(&format!("{name}-ca.crt"), ca_pem);
    let m = TlsManager::new();
    m.init(TlsSettings { cluster: true, port: 0, ..settings(&c, &k, &ca) }).unwrap();
    m
}

/// `a` dials `b` as `host`; returns both ends' results after one message each way.
async fn link(a: &TlsManager, b: &TlsManager, host: &str) -> (Result<(), HandshakeError>, Result<(), HandshakeError>) {
    let (ca, cb) = tokio::io::duplex(64 * 1024);
    let dial = async {
        let mut s = a.connect(host, ca).await?;
        s.write_all(b"PING").await.map_err(|e| HandshakeError::from_io(&e))?;
        s.flush().await.map_err(|e| HandshakeError::from_io(&e))?;
        let mut buf = [0u8; 4];
        // Under TLS 1.3 a refusal of our certificate arrives here, on the first read.
        s.read_exact(&mut buf).await.map_err(|e| HandshakeError::from_io(&e))?;
        assert_eq!(&buf, b"PONG");
        Ok(())
    };
    let accept = async {
        let mut s = b.accept_bus_stream(cb).await?;
        let mut buf = [0u8; 4];
        s.read_exact(&mut buf).await.map_err(|e| HandshakeError::from_io(&e))?;
        s.write_all(b"PONG").await.map_err(|e| HandshakeError::from_io(&e))?;
        s.flush().await.map_err(|e| HandshakeError::from_io(&e))?;
        Ok(())
    };
    tokio::join!(dial, accept)
}

struct Cluster {
    dir: TempDir,
    ca: Ca,
    a: TlsManager,
    b: TlsManager,
}

fn cluster() -> Cluster {
    let dir = TempDir::new();
    let ca = Ca::root("cluster CA");
    let a = node(&dir, "a", &ca.pem, &ca.issue(Leaf::node("node1.example.com").dns("node1.example.com")));
    let b = node(&dir, "b", &ca.pem, &ca.issue(Leaf::node("node2.example.com").dns("node2.example.com")));
    Cluster { dir, ca, a, b }
}

#[tokio::test]
async fn nodes_of_one_ca_link_by_ip_without_name_checks() {
    let c = cluster();
    // 10.0.0.2 is in neither certificate: upstream never checks the dialled address.
    let (dial, accept) = link(&c.a, &c.b, "10.0.0.2").await;
    assert_eq!((dial, accept), (Ok(()), Ok(())));
    let (dial, accept) = link(&c.b, &c.a, "node1.example.com").await;
    assert_eq!((dial, accept), (Ok(()), Ok(())));
}

#[tokio::test]
async fn a_node_from_another_ca_is_refused_on_both_ends() {
    let c = cluster();
    let other = Ca::root("other CA");
    let rogue = node(&c.dir, "rogue", &other.pem, &other.issue(Leaf::node("rogue")));
    // The rogue node is met: our dial-out refuses its server certificate.
    let (dial, accept) = link(&c.a, &rogue, "10.0.0.9").await;
    assert_eq!(
        dial.unwrap_err().to_string(),
        "certificate verify failed (SSL routines): unable to get local issuer certificate"
    );
    assert_eq!(accept.unwrap_err().to_string(), "tlsv1 alert unknown ca (SSL routines)");
    assert_eq!(c.a.counters().outbound_handshake_failures.load(Ordering::Relaxed), 1);
    assert_eq!(rogue.counters().handshake_failures.load(Ordering::Relaxed), 1);
    // A rogue node that trusts our CA dials us: our bus refuses its client certificate.
    let both = format!("{}{}", other.pem, c.ca.pem);
    let rogue = node(&c.dir, "rogue2", &both, &other.issue(Leaf::node("rogue2")));
    let (_, accept) = link(&rogue, &c.a, "10.0.0.1").await;
    assert_eq!(
        accept.unwrap_err().to_string(),
        "certificate verify failed (SSL routines): unable to get local issuer certificate"
    );
}

#[tokio::test]
async fn an_expired_node_certificate() {
    let c = cluster();
    let old = node(&c.dir, "old", &c.ca.pem, &c.ca.issue(Leaf::node("old").valid(-60, -1)));
    let (dial, accept) = link(&c.a, &old, "10.0.0.3").await;
    assert_eq!(dial.unwrap_err().to_string(), "certificate verify failed (SSL routines): certificate has expired");
    assert_eq!(accept.unwrap_err().to_string(), "ssl/tls alert certificate expired (SSL routines)");
}

#[tokio::test]
async fn expected_peer_names_are_checked_both_ways_and_change_without_reload() {
    let c = cluster();
    c.a.set_expected_peer_names("node2.example.com").unwrap();
    assert_eq!(link(&c.a, &c.b, "10.0.0.2").await, (Ok(()), Ok(())));
    c.a.set_expected_peer_names(".example.com").unwrap();
    assert_eq!(link(&c.a, &c.b, "10.0.0.2").await, (Ok(()), Ok(())));
    c.a.set_expected_peer_names("other.example.com").unwrap();
    let generation = c.a.state().unwrap().generation();
    let (dial, _) = link(&c.a, &c.b, "10.0.0.2").await;
    assert_eq!(dial.unwrap_err().to_string(), "certificate verify failed (SSL routines): hostname mismatch");
    // Inbound: a's bus now refuses b's client certificate too.
    let (_, accept) = link(&c.b, &c.a, "10.0.0.1").await;
    assert_eq!(accept.unwrap_err().to_string(), "certificate verify failed (SSL routines): hostname mismatch");
    assert_eq!(c.a.state().unwrap().generation(), generation, "no rebuild");
    c.a.set_expected_peer_names("").unwrap();
    assert_eq!(link(&c.b, &c.a, "10.0.0.1").await, (Ok(()), Ok(())));
}

#[tokio::test]
async fn a_server_only_certificate_cannot_dial_the_bus() {
    let c = cluster();
    let srv = node(&c.dir, "srv", &c.ca.pem, &c.ca.issue(Leaf::server_only("srv")));
    let (_, accept) = link(&srv, &c.a, "10.0.0.1").await;
    assert_eq!(
        accept.unwrap_err().to_string(),
        "certificate verify failed (SSL routines): unsupported certificate purpose"
    );
    // A separate clientAuth certificate fixes it.
    let client = c.ca.issue(Leaf::client("srv-client"));
    let s = srv.settings();
    let fixed = TlsSettings {
        client_cert_file: Some(c.dir.write("srv-client.crt", &client.cert_pem)),
        client_key_file: Some(c.dir.write("srv-client.key", &client.key_pem)),
        ..s
    };
    srv.apply(fixed).unwrap();
    assert_eq!(link(&srv, &c.a, "10.0.0.1").await, (Ok(()), Ok(())));
}

#[tokio::test]
async fn no_ca_means_no_outbound_tls() {
    let dir = TempDir::new();
    let ca = Ca::root("ca");
    let n = ca.issue(Leaf::node("n"));
    let m = TlsManager::new();
    let s = settings(&dir.write("n.crt", &n.cert_pem), &dir.write("n.key", &n.key_pem), &dir.path("none"));
    m.init(TlsSettings { ca_cert_file: None, auth_clients: hotkv_tls::ClientAuth::NotRequested, ..s }).unwrap();
    let (x, _y) = tokio::io::duplex(1024);
    let e = m.connect("10.0.0.1", x).await.unwrap_err();
    assert!(e.to_string().contains("no CA"), "{e}");
    assert!(m.accept_bus().is_none());
}
