//! `hotkv --check-tls <config>`: every problem with the TLS files a configuration names, found
//! before a deployment instead of by the first peer that refuses it.
//!
//! Unlike a load, which stops at the first error, the check goes on and reports everything it
//! can: unreadable files, a key that is not the certificate's, a chain that does not reach the
//! CA (a missing intermediate), certificates expired or expiring within 30 days, key usages that
//! other nodes will refuse, and subject alternative names that do not cover the addresses the
//! node listens on. The server parses the configuration and prints one line per problem.

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

use rustls::RootCertStore;
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::{ParsedCertificate, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{CertificateError, Error};

use crate::ciphers;
use crate::error::{FileRole, TlsError, x509_reason};
use crate::inspect::{CertInfo, format_time};
use crate::material::{self, FileBytes};
use crate::settings::TlsSettings;
use crate::verify::PeerNames;

/// Certificates expiring within this many seconds are reported.
const SOON: i64 = 30 * 86_400;

/// What kind of problem a [`Problem`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProblemKind {
    /// A required directive is missing or a setting is invalid.
    Config,
    /// A file cannot be read or parsed.
    Unreadable,
    /// The key does not match the certificate.
    KeyMismatch,
    /// The chain does not verify against the CA.
    ChainUnverified,
    /// A certificate has expired.
    Expired,
    /// A certificate expires within 30 days.
    ExpiringSoon,
    /// A certificate is not valid yet.
    NotYetValid,
    /// The outbound certificate lacks clientAuth while tls-cluster or tls-replication is on.
    NoClientAuth,
    /// The server certificate lacks serverAuth.
    NoServerAuth,
    /// A bind address is not among the certificate's subject alternative names.
    NameNotCovered,
    /// An X.509 v1 certificate (rustls refuses them).
    Version1,
}

/// One problem, printed as one line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// What kind.
    pub kind: ProblemKind,
    /// The directive concerned.
    pub directive: &'static str,
    /// The file concerned, if any.
    pub path: Option<PathBuf>,
    /// What is wrong, for an operator.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.path {
            Some(p) => write!(f, "{} {}: {}", self.directive, p.display(), self.message),
            None => write!(f, "{}: {}", self.directive, self.message),
        }
    }
}

/// Checks the TLS files of `settings` against each other and against `binds` (the `bind`
/// addresses; wildcards and `-` prefixes are handled). Empty = nothing wrong, or TLS not in use.
pub fn check(settings: &TlsSettings, binds: &[&str]) -> Vec<Problem> {
    check_at(settings, binds, crate::manager::unix_now())
}

/// [`check`] at a given time (Unix seconds).
pub fn check_at(settings: &TlsSettings, binds: &[&str], now: i64) -> Vec<Problem> {
    let mut c = Checker { s: settings, now, out: Vec::new() };
    if settings.in_use() {
        c.run(binds);
    }
    c.out
}

struct Checker<'a> {
    s: &'a TlsSettings,
    now: i64,
    out: Vec<Problem>,
}

/// A parsed certificate file with its key, when both loaded.
struct Pair {
    chain: Vec<CertificateDer<'static>>,
    leaf: CertInfo,
    path: PathBuf,
    role: FileRole,
}

impl Checker<'_> {
    fn run(&mut self, binds: &[&str]) {
        if let Err(e) = self.s.check_required() {
            let directive = match e {
                TlsError::NoCertFile => "tls-cert-file",
                TlsError::NoKeyFile => "tls-key-file",
                _ => "tls-ca-cert-file",
            };
            self.push(ProblemKind::Config, directive, None, e.to_string());
        }
        if let Err(e) = ciphers::policy(&self.s.protocols, &self.s.ciphers, &self.s.ciphersuites) {
            self.push(ProblemKind::Config, "tls-protocols/tls-ciphers", None, e.to_string());
        }
        if let Err(e) = PeerNames::parse(&self.s.expected_peer_names) {
            self.push(ProblemKind::Config, "tls-expected-peer-name", None, e.to_string());
        }
        let server =
            self.pair(FileRole::Cert, &self.s.cert_file, FileRole::Key, &self.s.key_file, &self.s.key_file_pass);
        let client = if self.s.has_client_pair() {
            self.pair(
                FileRole::ClientCert,
                &self.s.client_cert_file,
                FileRole::ClientKey,
                &self.s.client_key_file,
                &self.s.client_key_file_pass,
            )
        } else {
            None
        };
        if let Some(dh) = self.s.dh_params_file.as_deref().and_then(|p| self.read(FileRole::DhParams, p))
            && let Err(e) = material::check_dh(&dh)
        {
            self.push_err(ProblemKind::Unreadable, FileRole::DhParams, e);
        }
        let roots = self.roots();
        let outbound_needed = self.s.cluster || self.s.replication;
        if let Some(p) = &server {
            self.leaf(p, true, outbound_needed && client.is_none());
            if let Some(roots) = &roots {
                self.chain(p, roots, false);
                if outbound_needed && client.is_none() {
                    self.chain(p, roots, true);
                }
            }
            self.names(p, binds);
        }
        if let Some(p) = &client {
            self.leaf(p, false, outbound_needed);
            if let Some(roots) = &roots {
                self.chain(p, roots, true);
            }
        }
    }

    fn read(&mut self, role: FileRole, path: &std::path::Path) -> Option<FileBytes> {
        match material::read_file(role, path) {
            Ok(f) => Some(f),
            Err(e) => {
                let what = if matches!(role, FileRole::Key | FileRole::ClientKey) {
                    "key file not readable"
                } else {
                    "not readable"
                };
                self.push(ProblemKind::Unreadable, role.directive(), Some(path.into()), format!("{what}: {e}"));
                None
            }
        }
    }

    fn pair(
        &mut self,
        cert_role: FileRole,
        cert: &Option<PathBuf>,
        key_role: FileRole,
        key: &Option<PathBuf>,
        pass: &Option<String>,
    ) -> Option<Pair> {
        let cert_bytes = cert.as_deref().and_then(|p| self.read(cert_role, p));
        let key_bytes = key.as_deref().and_then(|p| self.read(key_role, p));
        let chain = match cert_bytes.as_ref().map(|f| material::parse_chain(cert_role, f)) {
            Some(Ok(c)) => c,
            Some(Err(e)) => {
                self.push_err(ProblemKind::Unreadable, cert_role, e);
                return None;
            }
            None => return None,
        };
        let leaf = match CertInfo::parse(&chain[0]) {
            Ok(l) => l,
            Err(e) => {
                self.push(ProblemKind::Unreadable, cert_role.directive(), cert.clone(), e);
                return None;
            }
        };
        let cert_path = cert.clone().unwrap_or_default();
        let pair = Pair { chain: chain.clone(), leaf, path: cert_path.clone(), role: cert_role };
        let Some(key_bytes) = key_bytes else { return Some(pair) };
        match material::parse_key(key_role, &key_bytes, pass.as_deref()) {
            Ok(der) => {
                let provider = rustls::crypto::aws_lc_rs::default_provider();
                match CertifiedKey::from_der(chain, der, &provider) {
                    Ok(_) => {}
                    Err(Error::InconsistentKeys(_)) => self.push(
                        ProblemKind::KeyMismatch,
                        key_role.directive(),
                        Some(key_bytes.path.clone()),
                        format!("key does not match the certificate {}", cert_path.display()),
                    ),
                    Err(e) => self.push(
                        ProblemKind::Unreadable,
                        key_role.directive(),
                        Some(key_bytes.path.clone()),
                        e.to_string(),
                    ),
                }
            }
            Err(e) => {
                self.push_err(ProblemKind::Unreadable, key_role, e);
            }
        }
        Some(pair)
    }

    fn roots(&mut self) -> Option<Arc<RootCertStore>> {
        if self.s.ca_cert_file.is_none() && self.s.ca_cert_dir.is_none() {
            return None;
        }
        let before = self.out.len();
        let ca_file = self.s.ca_cert_file.as_deref().and_then(|p| self.read(FileRole::CaFile, p));
        let ca_dir = match self.s.ca_cert_dir.as_deref().map(material::read_dir) {
            Some(Ok(files)) => files,
            Some(Err(e)) => {
                self.push_err(ProblemKind::Unreadable, FileRole::CaDir, e);
                Vec::new()
            }
            None => Vec::new(),
        };
        let mut cas = Vec::new();
        if let Some(f) = &ca_file {
            match material::parse_chain(FileRole::CaFile, f) {
                Ok(c) => cas.extend(c),
                Err(e) => {
                    self.push_err(ProblemKind::Unreadable, FileRole::CaFile, e);
                }
            }
        }
        for f in &ca_dir {
            cas.extend(material::parse_chain(FileRole::CaDir, f).unwrap_or_default());
        }
        let mut store = RootCertStore::empty();
        for der in cas {
            if let Ok(info) = CertInfo::parse(&der) {
                let directive = if self.s.ca_cert_file.is_some() { "tls-ca-cert-file" } else { "tls-ca-cert-dir" };
                let path = self.s.ca_cert_file.clone().or_else(|| self.s.ca_cert_dir.clone());
                self.validity(&info, directive, path, "CA certificate");
            }
            let _ = store.add(der);
        }
        if store.is_empty() {
            if self.out.len() > before {
                return None; // the reason is already reported
            }
            let (directive, path) = match &self.s.ca_cert_file {
                Some(p) => ("tls-ca-cert-file", p.clone()),
                None => ("tls-ca-cert-dir", self.s.ca_cert_dir.clone().unwrap_or_default()),
            };
            self.push(ProblemKind::Unreadable, directive, Some(path), "no usable CA certificate".into());
            return None;
        }
        Some(Arc::new(store))
    }

    /// Validity, version and key usages of a leaf.
    fn leaf(&mut self, p: &Pair, is_server: bool, used_outbound: bool) {
        let directive = p.role.directive();
        self.validity(&p.leaf, directive, Some(p.path.clone()), "certificate");
        if p.leaf.version < 3 {
            self.push(
                ProblemKind::Version1,
                directive,
                Some(p.path.clone()),
                "X.509 v1 certificate: rustls peers refuse it; reissue it as v3".into(),
            );
        }
        if is_server && !p.leaf.allows_server_auth() {
            self.push(
                ProblemKind::NoServerAuth,
                directive,
                Some(p.path.clone()),
                "extended key usage lacks serverAuth: clients and nodes will refuse it".into(),
            );
        }
        if used_outbound && !p.leaf.allows_client_auth() {
            let why = if self.s.cluster { "tls-cluster" } else { "tls-replication" };
            self.push(
                ProblemKind::NoClientAuth,
                directive,
                Some(p.path.clone()),
                format!(
                    "extended key usage lacks clientAuth while {why} is on: other nodes will refuse this certificate \
                     on the links this node opens (issue it with serverAuth and clientAuth, or set tls-client-cert-file)"
                ),
            );
        }
    }

    fn validity(&mut self, c: &CertInfo, directive: &'static str, path: Option<PathBuf>, what: &str) {
        let subject = &c.subject;
        if c.not_after < self.now {
            self.push(
                ProblemKind::Expired,
                directive,
                path,
                format!("{what} {subject} expired on {}", format_time(c.not_after)),
            );
        } else if c.not_after - self.now < SOON {
            let days = (c.not_after - self.now) / 86_400;
            self.push(
                ProblemKind::ExpiringSoon,
                directive,
                path,
                format!("{what} {subject} expires in {days} days ({})", format_time(c.not_after)),
            );
        } else if c.not_before > self.now {
            self.push(
                ProblemKind::NotYetValid,
                directive,
                path,
                format!("{what} {subject} is not valid before {}", format_time(c.not_before)),
            );
        }
    }

    /// The chain against the CA, as a peer verifying us would: as a server certificate, or as a
    /// client certificate for the links we open.
    fn chain(&mut self, p: &Pair, roots: &Arc<RootCertStore>, as_client: bool) {
        let Ok(parsed) = ParsedCertificate::try_from(&p.chain[0]) else { return };
        let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
        let now = UnixTime::since_unix_epoch(std::time::Duration::from_secs(self.now.max(0) as u64));
        let result = if as_client {
            WebPkiClientVerifier::builder_with_provider(roots.clone(), provider)
                .build()
                .map_err(|e| Error::General(e.to_string()))
                .and_then(|v| v.verify_client_cert(&p.chain[0], &p.chain[1..], now).map(|_| ()))
        } else {
            let algs = provider.signature_verification_algorithms.all;
            verify_server_cert_signed_by_trust_anchor(&parsed, roots, &p.chain[1..], now, algs)
        };
        let reason = match result {
            Ok(()) => return,
            // Reported on their own, in plainer words.
            Err(Error::InvalidCertificate(
                CertificateError::Expired
                | CertificateError::ExpiredContext { .. }
                | CertificateError::NotValidYet
                | CertificateError::NotValidYetContext { .. }
                | CertificateError::InvalidPurpose
                | CertificateError::InvalidPurposeContext { .. },
            )) => return,
            Err(Error::InvalidCertificate(CertificateError::UnknownIssuer)) => format!(
                "{}: is an intermediate certificate missing from the file (the chain holds {} certificate(s)), or \
                 was it issued by another CA?",
                x509_reason(&CertificateError::UnknownIssuer),
                p.chain.len()
            ),
            Err(Error::InvalidCertificate(e)) => x509_reason(&e).to_owned(),
            Err(e) => e.to_string(),
        };
        let role = if as_client { " as a client certificate" } else { "" };
        self.push(
            ProblemKind::ChainUnverified,
            p.role.directive(),
            Some(p.path.clone()),
            format!("chain does not verify against the CA{role}: {reason}"),
        );
    }

    /// Each specific bind address must be a subject alternative name: clients check it.
    fn names(&mut self, p: &Pair, binds: &[&str]) {
        let Ok(parsed) = ParsedCertificate::try_from(&p.chain[0]) else { return };
        for bind in binds {
            let addr = bind.trim_start_matches('-');
            if matches!(addr, "*" | "::*" | "0.0.0.0" | "::" | "") {
                continue;
            }
            let Ok(name) = ServerName::try_from(addr) else { continue };
            if let ServerName::IpAddress(_) = name
                && addr.parse::<IpAddr>().is_ok_and(|ip| ip.is_unspecified())
            {
                continue;
            }
            if verify_server_name(&parsed, &name).is_err() {
                self.push(
                    ProblemKind::NameNotCovered,
                    p.role.directive(),
                    Some(p.path.clone()),
                    format!(
                        "subject alternative names do not cover bind address {addr} (the certificate has: {})",
                        p.leaf.san_text()
                    ),
                );
            }
        }
    }

    fn push(&mut self, kind: ProblemKind, directive: &'static str, path: Option<PathBuf>, message: String) {
        let p = Problem { kind, directive, path, message };
        if !self.out.contains(&p) {
            self.out.push(p);
        }
    }

    fn push_err(&mut self, kind: ProblemKind, role: FileRole, e: TlsError) {
        let path = e.path().map(PathBuf::from);
        self.push(kind, role.directive(), path, e.to_string());
    }
}
