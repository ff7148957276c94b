//! Peer verification for server-to-server links, with Redis' `tls-expected-peer-name`.
//!
//! Upstream never checks a peer's name: any certificate the CA signed is a valid node, and
//! clusters dial IP addresses that their certificates often do not list. So the outbound
//! verifier checks the chain, validity and key usage against the configured CA, and checks a
//! name only when `tls-expected-peer-name` is set — against whatever name the operator
//! configured, not the address dialled. The inbound bus verifier adds the same name check to the
//! client-certificate verifier. The names live behind an `ArcSwap` shared by every
//! configuration, so changing them takes effect at the next handshake without a rebuild.

use std::sync::Arc;

use arc_swap::ArcSwap;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{verify_server_cert_signed_by_trust_anchor, verify_server_name};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::ParsedCertificate;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{CertificateError, DigitallySignedStruct, DistinguishedName, Error, RootCertStore, SignatureScheme};

use crate::error::TlsError;
use crate::inspect::CertInfo;

/// `tls-expected-peer-name`: names one of which a peer's certificate must carry. Empty = no
/// name check (upstream behaviour).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PeerNames(Vec<String>);

impl PeerNames {
    /// Parses the directive's value with Redis' rules: space-separated names, any may match;
    /// an empty value clears the check; whitespace only or control characters are refused.
    pub fn parse(value: &str) -> Result<PeerNames, TlsError> {
        if value.is_empty() {
            return Ok(PeerNames::default());
        }
        if value.chars().any(|c| c.is_control()) {
            return Err(TlsError::PeerNames("tls-expected-peer-name must not contain control characters".into()));
        }
        let names: Vec<String> = value.split(' ').filter(|n| !n.is_empty()).map(str::to_owned).collect();
        if names.is_empty() {
            return Err(TlsError::PeerNames("tls-expected-peer-name must contain at least one name".into()));
        }
        Ok(PeerNames(names))
    }

    /// The configured names.
    pub fn names(&self) -> &[String] {
        &self.0
    }

    /// Whether no name check is configured.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the certificate carries one of the names. Plain names follow the host-name rules
    /// (DNS SAN, full-label wildcards in the certificate, IP literals against IP SANs); a name
    /// with a leading dot matches any subdomain at any depth, not the apex; when the certificate
    /// has no DNS SAN its subject CN is compared instead (OpenSSL's fallback, which webpki lacks).
    pub fn matches(&self, end_entity: &CertificateDer<'_>) -> bool {
        if self.0.is_empty() {
            return true;
        }
        let Ok(info) = CertInfo::parse(end_entity) else { return false };
        let parsed = ParsedCertificate::try_from(end_entity).ok();
        self.0.iter().any(|name| name_matches(name, &info, parsed.as_ref()))
    }
}

fn name_matches(name: &str, info: &CertInfo, parsed: Option<&ParsedCertificate<'_>>) -> bool {
    if let Some(suffix) = name.strip_prefix('.') {
        let suffix = format!(".{}", suffix.to_ascii_lowercase());
        if info.dns_names.is_empty() {
            return info.common_names.iter().any(|cn| cn.to_ascii_lowercase().ends_with(&suffix));
        }
        return info.dns_names.iter().any(|d| d.to_ascii_lowercase().ends_with(&suffix));
    }
    let Ok(server_name) = ServerName::try_from(name) else { return false };
    if let Some(p) = parsed
        && verify_server_name(p, &server_name).is_ok()
    {
        return true;
    }
    let is_ip = matches!(server_name, ServerName::IpAddress(_));
    !is_ip && info.dns_names.is_empty() && info.common_names.iter().any(|cn| cn.eq_ignore_ascii_case(name))
}

/// Verifies the server certificate of a node we dial (bus, replication, MIGRATE): chain to the
/// configured CA, validity, serverAuth usage, then the expected names if any.
#[derive(Debug)]
pub(crate) struct PeerServerVerifier {
    pub(crate) roots: Arc<RootCertStore>,
    pub(crate) provider: Arc<CryptoProvider>,
    pub(crate) names: Arc<ArcSwap<PeerNames>>,
}

impl ServerCertVerifier for PeerServerVerifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let cert = ParsedCertificate::try_from(end_entity)?;
        let algs = self.provider.signature_verification_algorithms;
        verify_server_cert_signed_by_trust_anchor(&cert, &self.roots, intermediates, now, algs.all)?;
        if !self.names.load().matches(end_entity) {
            return Err(Error::InvalidCertificate(CertificateError::NotValidForName));
        }
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// The inbound bus verifier: the mandatory client-certificate verifier plus the name check.
#[derive(Debug)]
pub(crate) struct BusClientVerifier {
    pub(crate) inner: Arc<dyn ClientCertVerifier>,
    pub(crate) names: Arc<ArcSwap<PeerNames>>,
}

impl ClientCertVerifier for BusClientVerifier {
    fn offer_client_auth(&self) -> bool {
        true
    }

    fn client_auth_mandatory(&self) -> bool {
        true
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        self.inner.verify_client_cert(end_entity, intermediates, now)?;
        if !self.names.load().matches(end_entity) {
            return Err(Error::InvalidCertificate(CertificateError::NotValidForName));
        }
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_follows_redis_rules() {
        assert!(PeerNames::parse("").unwrap().is_empty());
        assert_eq!(PeerNames::parse("a.example.com  .example.org").unwrap().names(), ["a.example.com", ".example.org"]);
        assert!(PeerNames::parse("   ").unwrap_err().to_string().contains("at least one name"));
        assert!(PeerNames::parse("a\tb").unwrap_err().to_string().contains("control characters"));
    }

    fn info(dns: &[&str], cn: &[&str]) -> CertInfo {
        CertInfo {
            subject: String::new(),
            issuer: String::new(),
            serial: "1".into(),
            not_before: 0,
            not_after: 0,
            version: 3,
            common_names: cn.iter().map(|s| s.to_string()).collect(),
            dns_names: dns.iter().map(|s| s.to_string()).collect(),
            ip_addresses: Vec::new(),
            uris: Vec::new(),
            eku: None,
            is_ca: false,
            has_ns_cert_type: false,
            fingerprint: [0; 32],
            file: None,
        }
    }

    #[test]
    fn leading_dot_matches_subdomains_not_the_apex() {
        let i = info(&["node1.example.com"], &[]);
        assert!(name_matches(".example.com", &i, None));
        assert!(!name_matches(".other.com", &i, None));
        let apex = info(&["example.com"], &[]);
        assert!(!name_matches(".example.com", &apex, None));
    }

    #[test]
    fn common_name_only_when_no_dns_san() {
        let cn_only = info(&[], &["Node1.Example.com"]);
        assert!(name_matches("node1.example.com", &cn_only, None));
        let with_san = info(&["other.example.com"], &["node1.example.com"]);
        assert!(!name_matches("node1.example.com", &with_san, None));
        assert!(!name_matches("10.0.0.1", &info(&[], &["10.0.0.1"]), None), "IP names need an IP SAN");
    }
}
