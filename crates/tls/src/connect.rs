//! Async TLS for links this node opens (cluster bus, replication, MIGRATE) and, for the bus,
//! accepts — with tokio-rustls, whose stream model suits these long-lived links. Callers keep
//! the rule of spec §7: write a whole batch into the stream, then flush once.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::{TlsAcceptor, TlsConnector, client, server};

use crate::error::HandshakeError;
use crate::info::TlsCounters;
use crate::manager::TlsManager;

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
