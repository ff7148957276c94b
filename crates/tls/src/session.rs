//! A server-side TLS connection driven by the server's own socket code.
//!
//! The server reads raw bytes from its non-blocking socket and writes raw bytes back
//! (`crates/server/src/io.rs`: one `recv` per readable event, one `send` per batch of replies).
//! tokio-rustls would turn every write into a record and a flush; here the server hands a whole
//! batch of replies to [`TlsSession::write_plaintext`], which seals it into as few records as
//! possible (one per 16 KiB), and sends what [`TlsSession::take_tls_output`] gives in one
//! `send`. No buffer is allocated per call: rustls keeps its own, the caller reuses its.
//!
//! ```text
//! read → feed(raw, &mut rbuf)? → parse commands from rbuf → write_plaintext(replies)
//!      → take_tls_output(&mut out) → send(out)
//! ```
//!
//! Links this node opens (cluster bus, replication, MIGRATE) and the bus listener use
//! tokio-rustls instead (bottom of this file), whose stream model suits those long-lived links;
//! callers keep the rule of spec §7 there too: write a whole batch, then flush once.

use std::io::{Read, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use rustls::{ServerConfig, ServerConnection};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

use crate::error::HandshakeError;
use crate::info::TlsCounters;
use crate::inspect::CertInfo;
use crate::manager::TlsManager;
use crate::settings::CertUser;

/// TLS record content type of a handshake message: the first byte of any TLS client's stream.
const HANDSHAKE: u8 = 0x16;
/// Major version byte of every TLS record header (SSL 3.0 / TLS 1.x are all 3.x).
const TLS_MAJOR: u8 = 0x03;

/// One inbound TLS connection.
#[derive(Debug)]
pub struct TlsSession {
    conn: ServerConnection,
    counters: Arc<TlsCounters>,
    /// Bytes received so far, up to 2: enough to tell a TLS record header from plain text.
    seen: u8,
    established: bool,
    failed: bool,
    peer_closed: bool,
}

impl TlsSession {
    /// A session using `config`, which must come from a [`crate::TlsState`]; made by
    /// [`TlsManager::accept`] and [`TlsManager::accept_bus`].
    pub(crate) fn new(config: Arc<ServerConfig>, counters: Arc<TlsCounters>) -> TlsSession {
        // Invariant: every ServerConfig comes from TlsState::build, which has already started a
        // ServerConnection with it (state.rs, server_config), and the constructor depends only
        // on the configuration.
        let mut conn = ServerConnection::new(config).expect("TlsState::build proved this config usable");
        // The server bounds its output buffer itself (client-output-buffer-limit); rustls' own
        // 64 KiB cap would make write_plaintext accept only part of a large reply batch.
        conn.set_buffer_limit(None);
        TlsSession { conn, counters, seen: 0, established: false, failed: false, peer_closed: false }
    }

    /// Decrypts `tls` (bytes just read from the socket) and appends the plaintext to `plain`.
    /// Handshake messages are processed on the way; afterwards [`Self::take_tls_output`] may
    /// have bytes to send even when `plain` got none. On error the connection is dead: send what
    /// `take_tls_output` still gives (the alert that tells the peer why), then close. An error
    /// while [`Self::is_handshaking`] is a refused handshake (counted, and logged by the server
    /// as `TLS handshake failed for client N: <reason>`); after it, a broken connection.
    pub fn feed(&mut self, mut tls: &[u8], plain: &mut BytesMut) -> Result<(), HandshakeError> {
        if self.failed {
            return Err(HandshakeError::Other("TLS connection already failed".into()));
        }
        self.check_record_header(tls)?;
        while !tls.is_empty() {
            let n = match self.conn.read_tls(&mut tls) {
                Ok(n) => n,
                Err(e) => return Err(self.fail(HandshakeError::from_io(&e))),
            };
            let state = match self.conn.process_new_packets() {
                Ok(s) => s,
                Err(e) => return Err(self.fail(HandshakeError::from_rustls(&e))),
            };
            self.peer_closed |= state.peer_has_closed();
            let avail = state.plaintext_bytes_to_read();
            if avail > 0 {
                let start = plain.len();
                plain.resize(start + avail, 0);
                // Exactly `avail` bytes are buffered, so this read cannot come up short.
                let got = self.conn.reader().read(&mut plain[start..]).unwrap_or(0);
                plain.truncate(start + got);
            }
            if n == 0 {
                break; // after close_notify rustls reads nothing more
            }
        }
        if !self.established && !self.conn.is_handshaking() {
            self.established = true;
            TlsCounters::bump(&self.counters.connections_total);
            TlsCounters::bump(&self.counters.connections_current);
        }
        Ok(())
    }

    /// Encrypts a batch of plaintext (all replies of one read batch, concatenated) into as few
    /// records as possible: one per 16 KiB. Before the handshake completes the data waits
    /// inside rustls and leaves with the first output after it.
    pub fn write_plaintext(&mut self, data: &[u8]) {
        // With no buffer limit rustls accepts everything; write_all cannot fail short.
        let _ = self.conn.writer().write_all(data);
    }

    /// Appends every TLS byte waiting to be sent (handshake, records, alerts) to `out` and
    /// returns how many were added.
    pub fn take_tls_output(&mut self, out: &mut Vec<u8>) -> usize {
        let before = out.len();
        while self.conn.wants_write() {
            // Writing into a Vec cannot fail.
            if self.conn.write_tls(out).is_err() {
                break;
            }
        }
        out.len() - before
    }

    /// Whether TLS bytes are waiting to be sent.
    pub fn wants_write(&self) -> bool {
        self.conn.wants_write()
    }

    /// Whether the handshake is still in progress.
    pub fn is_handshaking(&self) -> bool {
        self.conn.is_handshaking()
    }

    /// Whether the peer sent close_notify: no more data will come.
    pub fn peer_closed(&self) -> bool {
        self.peer_closed
    }

    /// Queues a close_notify alert; send it with [`Self::take_tls_output`] before closing.
    pub fn close(&mut self) {
        self.conn.send_close_notify();
    }

    /// What to report when the socket ends: `None` for a connection that never sent a byte (a
    /// port probe) or that finished its handshake; `unexpected eof` in the middle of one.
    pub fn eof_error(&mut self) -> Option<HandshakeError> {
        if self.seen == 0 || self.established || self.failed {
            return None;
        }
        Some(self.fail(HandshakeError::UnexpectedEof))
    }

    /// The peer's verified end-entity certificate, if it sent one.
    pub fn peer_certificate(&self) -> Option<CertInfo> {
        let certs = self.conn.peer_certificates()?;
        CertInfo::parse(certs.first()?).ok()
    }

    /// The name `tls-auth-clients-user` maps to an ACL user: the subject CN (`CN` mode) or the
    /// first URI SAN (`URI` mode). `None` without a certificate, with `Off`, or when the name
    /// is not clean UTF-8 or holds a NUL (compared whole, never truncated; spec P8).
    pub fn peer_certificate_name(&self, mode: CertUser) -> Option<String> {
        self.peer_certificate_names(mode).into_iter().next()
    }

    /// Every candidate name in order: the CN, or each URI SAN (the server picks the first that
    /// names an enabled user, as Valkey's URI mode does).
    pub fn peer_certificate_names(&self, mode: CertUser) -> Vec<String> {
        let Some(cert) = self.peer_certificate() else { return Vec::new() };
        let names = match mode {
            CertUser::Off => return Vec::new(),
            CertUser::CommonName => cert.common_names.into_iter().take(1).collect::<Vec<_>>(),
            CertUser::Uri => cert.uris,
        };
        names.into_iter().filter(|n| !n.contains('\0')).collect()
    }

    /// The negotiated protocol, e.g. `TLSv1.3`.
    pub fn protocol(&self) -> Option<&'static str> {
        Some(match self.conn.protocol_version()? {
            rustls::ProtocolVersion::TLSv1_3 => "TLSv1.3",
            rustls::ProtocolVersion::TLSv1_2 => "TLSv1.2",
            _ => "unknown",
        })
    }

    /// The negotiated cipher suite, in IANA spelling.
    pub fn cipher_suite(&self) -> Option<&'static str> {
        self.conn.negotiated_cipher_suite()?.suite().as_str()
    }

    /// A plain-text client on a TLS port would otherwise show up as some rustls parse error;
    /// OpenSSL says "wrong version number", and so do we, from the first two bytes.
    fn check_record_header(&mut self, tls: &[u8]) -> Result<(), HandshakeError> {
        for &b in tls.iter().take(2usize.saturating_sub(self.seen as usize)) {
            let expected = if self.seen == 0 { HANDSHAKE } else { TLS_MAJOR };
            self.seen += 1;
            if b != expected {
                return Err(self.fail(HandshakeError::WrongVersionNumber));
            }
        }
        Ok(())
    }

    fn fail(&mut self, e: HandshakeError) -> HandshakeError {
        if !self.failed {
            self.failed = true;
            // A failure after the handshake is a broken connection, not a refused handshake.
            if !self.established {
                TlsCounters::bump(&self.counters.handshake_failures);
            }
        }
        e
    }
}

impl Drop for TlsSession {
    fn drop(&mut self) {
        if self.established {
            self.counters.connections_current.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl TlsManager {
    /// Opens TLS over `stream` to a peer known as `host` (a host name, which is also sent as
    /// SNI like upstream, or an IP literal, which sends none). The peer's certificate must chain
    /// to the configured CA and, when `tls-expected-peer-name` is set, carry one of those names;
    /// the address dialled is never checked (upstream behaviour). Failures are counted in
    /// `outbound_handshake_failures` and worded like OpenSSL's.
    ///
    /// Under TLS 1.3 a peer that rejects *our* certificate does so after our handshake ended:
    /// the error shows on the first read. Map it with [`HandshakeError::from_io`].
    pub async fn connect<S>(&self, host: &str, stream: S) -> Result<client::TlsStream<S>, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self
            .state()
            .and_then(|s| s.client_config().cloned())
            .ok_or_else(|| HandshakeError::Other("TLS is not configured for outgoing links (no CA)".into()))?;
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| HandshakeError::Other(format!("invalid peer name '{host}'")))?;
        TlsConnector::from(config).connect(name, stream).await.map_err(|e| {
            TlsCounters::bump(&self.counters().outbound_handshake_failures);
            HandshakeError::from_io(&e)
        })
    }

    /// Accepts an inbound cluster bus connection: a client certificate from the configured CA
    /// is mandatory whatever `tls-auth-clients` says, plus the expected names if set.
    pub async fn accept_bus_stream<S>(&self, stream: S) -> Result<server::TlsStream<S>, HandshakeError>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let config = self
            .state()
            .and_then(|s| s.bus_server_config().cloned())
            .ok_or_else(|| HandshakeError::Other("TLS is not configured for the cluster bus (no CA)".into()))?;
        let counters: Arc<TlsCounters> = self.counters().clone();
        match TlsAcceptor::from(config).accept(stream).await {
            Ok(s) => {
                TlsCounters::bump(&counters.connections_total);
                Ok(s)
            }
            Err(e) => {
                counters.handshake_failures.fetch_add(1, Ordering::Relaxed);
                Err(HandshakeError::from_io(&e))
            }
        }
    }
}
