//! Against OpenSSL itself: `openssl s_client` talks to a `TlsSession` over loopback TCP, and
//! the outbound connector talks to `openssl s_server`. Every process is bounded in time and
//! killed at the end of its test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use bytes::BytesMut;
use hotkv_tls::{ClientAuth, HandshakeError, TlsManager, TlsSession, TlsSettings};

use crate::pki::{Ca, Leaf, Setup};

/// Kills the child when dropped, so a failing test leaves nothing running.
struct Proc(Child);

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The session's result and the plaintext it received.
type Served = (Result<(), HandshakeError>, Vec<u8>);

/// Serves one connection on a loopback port with `session`, answering `+PONG` to `PING`.
fn serve_one(mut session: TlsSession) -> (u16, thread::JoinHandle<Served>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let h = thread::spawn(move || {
        let (mut sock, _) = listener.accept().unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (mut plain, mut out, mut buf) = (BytesMut::new(), Vec::new(), vec![0u8; 16 * 1024]);
        let mut seen = Vec::new();
        loop {
            let n = match sock.read(&mut buf) {
                Ok(0) | Err(_) => return (session.eof_error().map_or(Ok(()), Err), seen),
                Ok(n) => n,
            };
            let r = session.feed(&buf[..n], &mut plain);
            if !plain.is_empty() {
                seen.extend_from_slice(&plain.split());
                session.write_plaintext(b"+PONG\r\n");
            }
            session.take_tls_output(&mut out);
            let _ = sock.write_all(&out);
            out.clear();
            if let Err(e) = r {
                return (Err(e), seen);
            }
        }
    });
    (port, h)
}

/// Runs `openssl s_client` with `args` against `port`, feeding `PING` on stdin; returns its
/// combined output.
fn s_client(port: u16, args: &[&str]) -> String {
    let mut child = Proc(
        Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{port}"), "-servername", "localhost"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("openssl CLI"),
    );
    let mut stdin = child.0.stdin.take().unwrap();
    let _ = stdin.write_all(b"PING\r\n");
    thread::sleep(Duration::from_millis(300));
    drop(stdin);
    let (tx, rx) = mpsc::channel();
    let mut stdout = child.0.stdout.take().unwrap();
    let mut stderr = child.0.stderr.take().unwrap();
    thread::spawn(move || {
        let (mut o, mut e) = (String::new(), String::new());
        let _ = stdout.read_to_string(&mut o);
        let _ = stderr.read_to_string(&mut e);
        let _ = tx.send(o + &e);
    });
    rx.recv_timeout(Duration::from_secs(10)).unwrap_or_else(|_| "s_client timed out".into())
}

fn path(p: &Path) -> &str {
    p.to_str().unwrap()
}

#[test]
fn openssl_client_with_a_certificate_talks_to_a_session() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let app = t.ca.issue(Leaf::client("app"));
    let (cert, key) = (t.dir.write("app.crt", &app.cert_pem), t.dir.write("app.key", &app.key_pem));
    let (port, h) = serve_one(m.accept(ClientAuth::Required).unwrap());
    let out = s_client(
        port,
        &["-CAfile", path(&t.ca_file), "-cert", path(&cert), "-key", path(&key), "-verify_return_error"],
    );
    let (result, seen) = h.join().unwrap();
    assert_eq!(result, Ok(()), "{out}");
    assert_eq!(seen, b"PING\r\n", "{out}");
    assert!(out.contains("Verify return code: 0 (ok)"), "{out}");
}

#[test]
fn openssl_client_without_a_certificate_is_refused() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(t.settings()).unwrap();
    let (port, h) = serve_one(m.accept(ClientAuth::Required).unwrap());
    let out = s_client(port, &["-CAfile", path(&t.ca_file)]);
    let (result, seen) = h.join().unwrap();
    assert_eq!(result.unwrap_err().to_string(), "peer did not return a certificate (SSL routines)", "{out}");
    assert!(seen.is_empty());
    assert!(out.contains("alert certificate required"), "{out}");
}

#[test]
fn an_openssl_only_cipher_is_no_shared_cipher() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(TlsSettings { auth_clients: ClientAuth::NotRequested, ..t.settings() }).unwrap();
    let (port, h) = serve_one(m.accept(ClientAuth::NotRequested).unwrap());
    let out = s_client(port, &["-tls1_2", "-cipher", "AES128-SHA256"]);
    let (result, _) = h.join().unwrap();
    assert_eq!(result.unwrap_err().to_string(), "no shared cipher (SSL routines)", "{out}");
    assert!(out.contains("handshake failure"), "{out}");
}

#[test]
fn a_tls11_client_is_unsupported_protocol() {
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(TlsSettings { auth_clients: ClientAuth::NotRequested, ..t.settings() }).unwrap();
    let (port, h) = serve_one(m.accept(ClientAuth::NotRequested).unwrap());
    let out = s_client(port, &["-tls1_1", "-cipher", "DEFAULT@SECLEVEL=0"]);
    let (result, _) = h.join().unwrap();
    if out.contains("no protocols available") {
        return; // this OpenSSL build cannot speak TLS 1.1 at all: nothing reached the server
    }
    assert_eq!(result.unwrap_err().to_string(), "unsupported protocol (SSL routines)", "{out}");
}

/// Starts `openssl s_server` for one connection and waits until it accepts.
fn s_server(cert: &Path, key: &Path, ca: &Path) -> (u16, Proc, mpsc::Receiver<String>) {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let mut child = Proc(
        Command::new("openssl")
            .args(["s_server", "-accept", &format!("127.0.0.1:{port}"), "-naccept", "1", "-Verify", "1"])
            .args(["-cert", path(cert), "-key", path(key), "-CAfile", path(ca)])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("openssl CLI"),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    loop {
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l.contains("ACCEPT") => break,
            Ok(_) => {}
            Err(_) => panic!("s_server did not start"),
        }
    }
    (port, child, rx)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connector_talks_to_openssl_and_refuses_another_ca() {
    use tokio::io::AsyncWriteExt;
    let t = Setup::new();
    let m = TlsManager::new();
    m.init(TlsSettings { replication: true, ..t.settings() }).unwrap();
    let peer = t.ca.issue(Leaf::node("peer"));
    let (pc, pk) = (t.dir.write("peer.crt", &peer.cert_pem), t.dir.write("peer.key", &peer.key_pem));

    let (port, _server, lines) = s_server(&pc, &pk, &t.ca_file);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let mut s = m.connect("127.0.0.1", tcp).await.expect("handshake with s_server");
    s.write_all(b"REPLCONF hello\n").await.unwrap();
    s.flush().await.unwrap();
    let got = tokio::task::spawn_blocking(move || {
        loop {
            match lines.recv_timeout(Duration::from_secs(10)) {
                Ok(l) if l.contains("REPLCONF hello") => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
    });
    assert!(got.await.unwrap(), "s_server did not receive the data");

    let other = Ca::root("other CA").issue(Leaf::node("peer"));
    let (oc, ok) = (t.dir.write("other.crt", &other.cert_pem), t.dir.write("other.key", &other.key_pem));
    let (port, _server, _lines) = s_server(&oc, &ok, &t.ca_file);
    let tcp = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    let e = m.connect("127.0.0.1", tcp).await.unwrap_err();
    assert_eq!(e.to_string(), "certificate verify failed (SSL routines): unable to get local issuer certificate");
}
