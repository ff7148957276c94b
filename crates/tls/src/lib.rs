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
pub use inspect::{CertInfo, Eku, format_time};
pub use manager::{CommitOutcome, Pending, ReloadOutcome, TlsManager};
pub use material::Fingerprint;
pub use session::TlsSession;
pub use settings::{CertUser, ClientAuth, TlsSettings};
pub use state::{LoadedCerts, TlsState};
pub use verify::PeerNames;

/// rustls itself, for callers that need its types (`ServerConfig`, `ClientConfig`).
pub use rustls;
