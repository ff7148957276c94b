//! In-memory handshakes between a `TlsSession` and a rustls client, TLS record counting, and
//! log capture.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};

use bytes::BytesMut;
use hotkv_tls::rustls::pki_types::ServerName;
use hotkv_tls::rustls::{self, ClientConfig, ClientConnection};
use hotkv_tls::{HandshakeError, TlsSession};

/// Both ends of a connection, pumped in memory.
pub(crate) struct Pair {
    pub(crate) server: TlsSession,
    pub(crate) client: ClientConnection,
    /// Plaintext the server has received.
    pub(crate) server_plain: BytesMut,
}

/// How a handshake ended.
#[derive(Debug)]
pub(crate) struct Outcome {
    pub(crate) server: Option<HandshakeError>,
    pub(crate) client: Option<rustls::Error>,
}

impl Outcome {
    pub(crate) fn ok(&self) -> bool {
        self.server.is_none() && self.client.is_none()
    }
}

impl Pair {
    pub(crate) fn new(server: TlsSession, client: Arc<ClientConfig>) -> Pair {
        let name = ServerName::try_from("localhost").unwrap();
        let mut client = ClientConnection::new(client, name).unwrap();
        client.set_buffer_limit(None);
        Pair { server, client, server_plain: BytesMut::new() }
    }

    /// Moves bytes both ways until both ends are done handshaking, one fails, or nothing moves.
    /// Then one more exchange so that TLS 1.3 client-certificate failures reach the client.
    pub(crate) fn handshake(&mut self) -> Outcome {
        let mut out = Outcome { server: None, client: None };
        for _ in 0..20 {
            let moved = self.step(&mut out);
            if out.server.is_some() || out.client.is_some() || !moved {
                break;
            }
        }
        out
    }

    /// One round: client → server, server → client. Returns whether any byte moved.
    pub(crate) fn step(&mut self, out: &mut Outcome) -> bool {
        let mut moved = false;
        let mut buf = Vec::new();
        while self.client.wants_write() {
            self.client.write_tls(&mut buf).unwrap();
        }
        if !buf.is_empty() {
            moved = true;
            if let Err(e) = self.server.feed(&buf, &mut self.server_plain) {
                out.server = Some(e);
            }
        }
        let mut back = Vec::new();
        self.server.take_tls_output(&mut back);
        if !back.is_empty() {
            moved = true;
            if let Err(e) = self.feed_client(&back) {
                out.client = Some(e);
            }
        }
        moved
    }

    fn feed_client(&mut self, mut data: &[u8]) -> Result<(), rustls::Error> {
        while !data.is_empty() {
            self.client.read_tls(&mut data).unwrap();
            self.client.process_new_packets()?;
        }
        Ok(())
    }

    /// Sends `msg` from the client and returns what the server decrypted.
    pub(crate) fn client_says(&mut self, msg: &[u8]) -> Vec<u8> {
        self.client.writer().write_all(msg).unwrap();
        let mut out = Outcome { server: None, client: None };
        self.step(&mut out);
        assert!(out.ok(), "{out:?}");
        self.server_plain.split().to_vec()
    }

    /// Sends `msg` from the server (one batch) and returns what the client decrypted.
    pub(crate) fn server_says(&mut self, msg: &[u8]) -> Result<Vec<u8>, rustls::Error> {
        self.server.write_plaintext(msg);
        let mut back = Vec::new();
        self.server.take_tls_output(&mut back);
        self.feed_client(&back)?;
        let mut got = Vec::new();
        match self.client.reader().read_to_end(&mut got) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Err(e) => panic!("{e}"),
        }
        Ok(got)
    }

    /// The serial of the certificate the server presented.
    pub(crate) fn server_serial(&self) -> String {
        let certs = self.client.peer_certificates().expect("handshake done");
        hotkv_tls::CertInfo::parse(&certs[0]).unwrap().serial
    }
}

/// Counts TLS records in a byte stream (5-byte headers: type, version, length).
pub(crate) fn count_records(mut tls: &[u8]) -> usize {
    let mut n = 0;
    while tls.len() >= 5 {
        let len = u16::from_be_bytes([tls[3], tls[4]]) as usize;
        tls = &tls[5 + len..];
        n += 1;
    }
    assert!(tls.is_empty(), "trailing partial record");
    n
}

/// Captured log output of the current thread.
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl Logs {
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }

    /// How many lines contain `needle`.
    pub(crate) fn count(&self, needle: &str) -> usize {
        self.text().lines().filter(|l| l.contains(needle)).count()
    }
}

/// Writes to the capture buffer of the current thread, if it has one.
pub(crate) struct LogWriter;

impl Write for LogWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        CAPTURE.with(|c| {
            if let Some(b) = &*c.borrow() {
                b.lock().unwrap().extend_from_slice(buf);
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

thread_local! {
    static CAPTURE: std::cell::RefCell<Option<Arc<Mutex<Vec<u8>>>>> = const { std::cell::RefCell::new(None) };
}

/// Stops capturing when dropped.
pub(crate) struct CaptureGuard;

impl Drop for CaptureGuard {
    fn drop(&mut self) {
        CAPTURE.with(|c| *c.borrow_mut() = None);
    }
}

/// Captures this thread's logs (debug and up) until the guard drops. One global subscriber
/// writes to per-thread buffers: per-thread subscribers (`set_default`) race with tracing's
/// global callsite-interest cache when tests run in parallel and lose events.
pub(crate) fn capture() -> (Logs, CaptureGuard) {
    static INSTALL: std::sync::Once = std::sync::Once::new();
    INSTALL.call_once(|| {
        let sub = tracing_subscriber::fmt().with_writer(|| LogWriter).with_max_level(tracing::Level::DEBUG).finish();
        tracing::subscriber::set_global_default(sub).unwrap();
    });
    let logs = Logs::default();
    CAPTURE.with(|c| *c.borrow_mut() = Some(logs.0.clone()));
    (logs, CaptureGuard)
}
