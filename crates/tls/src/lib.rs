//! hotkv-tls: TLS for client connections, replication and the cluster bus.
//!
//! Owns everything about TLS that does not need the server: rustls server and client
//! configurations built from PEM files (rustls 0.23 with aws-lc-rs, PEM through
//! rustls-pki-types, encrypted PKCS#8 keys through pkcs8), certificate inspection with
//! x509-parser (INFO data, expiry warnings, the `--check-tls` preflight), atomic reload with
//! generation ordering, and a TLS session the server's own socket code drives. Errors and log
//! lines use OpenSSL's words, as upstream's documentation and tests do.
//!
//! It must not depend on any other hotkv crate: the server converts its directives into a
//! [`TlsSettings`] and wires a [`TlsManager`] into its listeners, CONFIG SET, INFO and startup;
//! cluster and replication get TLS through a connector the server implements with this crate.
//!
//! Entry points:
//! - [`TlsManager::init`] at startup, [`TlsManager::apply`] / [`TlsManager::apply_async`] for
//!   CONFIG SET, [`TlsManager::run_background`] for automatic reloads and expiry checks.
//! - [`TlsManager::accept`] → [`TlsSession`] for each client-port connection;
//!   [`TlsManager::accept_bus`] / [`TlsManager::accept_bus_stream`] for the bus;
//!   [`TlsManager::connect`] for outbound links.
//! - [`TlsManager::info`] for `INFO tls`; [`check`] for `hotkv --check-tls`.
//!
//! Wiring, as the server would do it (every blocking call off the reactor):
//!
//! ```text
//! startup      tls = Arc::new(TlsManager::new())
//!              spawn_blocking(tls.init(settings))       Err ⇒ exit 1 (the reason is logged)
//!              tokio::spawn(tls.clone().run_background())
//! accept       let Some(mut s) = tls.accept(current tls-auth-clients) else { plain only }
//! readable     recv into raw; s.feed(&raw, &mut rbuf)   Err(e) ⇒ log "TLS handshake failed for
//!              client {id}: {e}", send s.take_tls_output(), close
//!              s.take_tls_output(&mut wbuf) and send it (the handshake produces output)
//! replies      s.write_plaintext(whole batch); s.take_tls_output(&mut wbuf); one send
//! end of file  if let Some(e) = s.eof_error() { log it as above }
//! CONFIG SET   tls.apply_async(new settings).await      Err(e) ⇒ reply e.config_set_reply()
//! INFO tls     tls.info().fields()
//! --check-tls  hotkv_tls::check(&settings, &binds)      one line per Problem, exit 1 if any
//! ```

mod check;
mod ciphers;
mod error;
mod info;
mod inspect;
mod manager;
mod material;
mod session;
mod settings;
mod state;
mod verify;

pub use check::{Problem, ProblemKind, check, check_at};
pub use error::{FileProblem, FileRole, HandshakeError, TlsError};
pub use info::{CertSummary, ReloadRecord, TlsCounters, TlsInfo};
pub use inspect::{CertInfo, Eku, fingerprint_text, format_time};
pub use manager::{CommitOutcome, Pending, ReloadOutcome, TlsManager};
pub use material::Fingerprint;
pub use session::TlsSession;
pub use settings::{CertUser, ClientAuth, TlsSettings};
pub use state::{LoadedCerts, TlsState};
pub use verify::PeerNames;

/// rustls itself, for callers that need its types (`ServerConfig`, `ClientConfig`).
pub use rustls;
