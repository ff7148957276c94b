//! Errors, worded the way OpenSSL words them.
//!
//! Operators grep their logs for OpenSSL's texts (`no start line`, `wrong version number`,
//! `certificate verify failed`), and upstream tests match them, so every failure here is
//! displayed in those words whatever produced it (pki-types, pkcs8, rustls, webpki). Load errors
//! end with the file in brackets, so one line names both the reason and the file.

use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use rustls::{AlertDescription, CertificateError, Error as RustlsError, InvalidMessage, PeerIncompatible};

/// Which configured file a load error is about.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileRole {
    /// `tls-cert-file`.
    Cert,
    /// `tls-key-file`.
    Key,
    /// `tls-client-cert-file`.
    ClientCert,
    /// `tls-client-key-file`.
    ClientKey,
    /// `tls-ca-cert-file`.
    CaFile,
    /// `tls-ca-cert-dir` (or a file inside it).
    CaDir,
    /// `tls-dh-params-file`.
    DhParams,
}

impl FileRole {
    /// The directive that names this file.
    pub fn directive(self) -> &'static str {
        match self {
            FileRole::Cert => "tls-cert-file",
            FileRole::Key => "tls-key-file",
            FileRole::ClientCert => "tls-client-cert-file",
            FileRole::ClientKey => "tls-client-key-file",
            FileRole::CaFile => "tls-ca-cert-file",
            FileRole::CaDir => "tls-ca-cert-dir",
            FileRole::DhParams => "tls-dh-params-file",
        }
    }

    /// The OpenSSL step whose error text upstream shows for this file.
    fn operation(self) -> &'static str {
        match self {
            FileRole::Cert | FileRole::ClientCert => "use_certificate_chain_file",
            FileRole::Key | FileRole::ClientKey => "use_private_key_file",
            FileRole::CaFile | FileRole::CaDir => "Failed to configure CA certificate(s) file/directory",
            FileRole::DhParams => "Failed to load DH params file",
        }
    }
}

/// Why a file could not be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileProblem {
    /// The file could not be read; the text is the system's (`Permission denied`).
    Io(String),
    /// No PEM block of the expected kind (OpenSSL: `no start line`).
    NoStartLine,
    /// A PEM block without its END line.
    BadEndLine,
    /// A PEM body that is not base64.
    BadBase64,
    /// DER inside the PEM that is not a certificate.
    BadAsn1(String),
    /// An encrypted key and no passphrase configured.
    NoPassphrase,
    /// The passphrase does not decrypt the key.
    BadDecrypt,
    /// A key encrypted the pre-PKCS#8 OpenSSL way (`Proc-Type: 4,ENCRYPTED`).
    LegacyEncryption,
    /// A key rustls cannot use (type or encoding).
    UnsupportedKey(String),
    /// A CA file or directory with no certificate that can be used as a trust anchor.
    NoCaCertificates,
    /// The certificate's notAfter has passed (refused on reload, see `build.rs`).
    Expired {
        /// notAfter, formatted.
        not_after: String,
    },
    /// The certificate's notBefore is still ahead (refused on reload).
    NotYetValid {
        /// notBefore, formatted.
        not_before: String,
    },
}

impl FileProblem {
    /// The reason for an I/O error, as `strerror` words it (no "(os error 13)" suffix).
    pub fn from_io(e: &io::Error) -> FileProblem {
        FileProblem::Io(io_reason(e))
    }
}

impl fmt::Display for FileProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FileProblem::Io(s) => f.write_str(s),
            FileProblem::NoStartLine => f.write_str("no start line (PEM routines)"),
            FileProblem::BadEndLine => f.write_str("bad end line (PEM routines)"),
            FileProblem::BadBase64 => f.write_str("bad base64 decode (PEM routines)"),
            FileProblem::BadAsn1(d) => write!(f, "nested asn1 error (asn1 encoding routines): {d}"),
            FileProblem::NoPassphrase => {
                f.write_str("bad password read (PEM routines): the key is encrypted and no passphrase is set")
            }
            FileProblem::BadDecrypt => f.write_str("bad decrypt (Provider routines)"),
            FileProblem::LegacyEncryption => f.write_str(
                "unsupported encryption (PEM routines): convert the key with 'openssl pkcs8 -topk8 -v2 aes-256-cbc'",
            ),
            FileProblem::UnsupportedKey(d) => write!(f, "unsupported private key (decoder routines): {d}"),
            FileProblem::NoCaCertificates => f.write_str("no certificate or crl found (x509 certificate routines)"),
            FileProblem::Expired { not_after } => write!(f, "certificate has expired (notAfter={not_after})"),
            FileProblem::NotYetValid { not_before } => {
                write!(f, "certificate is not yet valid (notBefore={not_before})")
            }
        }
    }
}

/// A TLS configuration that cannot be loaded. Display gives the reason in OpenSSL words;
/// [`TlsError::config_set_reply`] gives the CONFIG SET error.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TlsError {
    /// TLS is in use and `tls-cert-file` is not set.
    NoCertFile,
    /// TLS is in use and `tls-key-file` is not set.
    NoKeyFile,
    /// A peer certificate must be verified and no CA file or directory is set.
    NoCaConfigured,
    /// A file could not be read or parsed.
    File {
        /// Which directive names the file.
        role: FileRole,
        /// The file (for `CaDir`, the file inside the directory when one is at fault).
        path: PathBuf,
        /// Why.
        problem: FileProblem,
    },
    /// The private key is not the key of the certificate.
    KeyMismatch {
        /// `Key` or `ClientKey`.
        role: FileRole,
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
    },
    /// `tls-protocols` asks for something rustls cannot do, or is not a protocol list.
    Protocols(String),
    /// `tls-ciphers` leaves no usable suite or names one rustls lacks.
    Ciphers(String),
    /// `tls-ciphersuites` leaves no usable suite or names one rustls lacks.
    Ciphersuites(String),
    /// `tls-expected-peer-name` is malformed.
    PeerNames(String),
    /// rustls refused the assembled configuration.
    Config(String),
}

impl TlsError {
    /// The file this error is about, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            TlsError::File { path, .. } => Some(path),
            TlsError::KeyMismatch { key, .. } => Some(key),
            _ => None,
        }
    }

    /// The CONFIG SET error reply text (without the leading `-`).
    pub fn config_set_reply(&self) -> String {
        format!("ERR Unable to update TLS configuration: {self}")
    }

    pub(crate) fn file(role: FileRole, path: &Path, problem: FileProblem) -> TlsError {
        TlsError::File { role, path: path.to_path_buf(), problem }
    }
}

impl fmt::Display for TlsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TlsError::NoCertFile => f.write_str("No tls-cert-file configured!"),
            TlsError::NoKeyFile => f.write_str("No tls-key-file configured!"),
            TlsError::NoCaConfigured => f.write_str(
                "Either tls-ca-cert-file or tls-ca-cert-dir must be specified when tls-cluster, \
                 tls-replication or tls-auth-clients are enabled!",
            ),
            TlsError::File { role, path, problem } => {
                write!(f, "{}: {problem} [{}]", role.operation(), path.display())
            }
            TlsError::KeyMismatch { cert, key, .. } => write!(
                f,
                "use_private_key_file: key values mismatch (x509 certificate routines) [{} is not the key of {}]",
                key.display(),
                cert.display()
            ),
            TlsError::Protocols(s) | TlsError::PeerNames(s) | TlsError::Config(s) => f.write_str(s),
            TlsError::Ciphers(s) => write!(f, "Failed to configure ciphers: {s}"),
            TlsError::Ciphersuites(s) => write!(f, "Failed to configure ciphersuites: {s}"),
        }
    }
}

impl std::error::Error for TlsError {}

/// Why a TLS handshake (or a TLS connection) failed, in OpenSSL's words.
///
/// The server logs `TLS handshake failed for client N: {err}`; the cluster code appends its own
/// reminder. The texts are exact so those lines match the documentation word for word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HandshakeError {
    /// The first bytes are not a TLS record: a plain-text client on a TLS port.
    WrongVersionNumber,
    /// Client authentication is required and the client sent no certificate.
    NoPeerCertificate,
    /// The peer's certificate was rejected here; the text is X509's reason
    /// (`unable to get local issuer certificate`, `certificate has expired`, `hostname mismatch`).
    VerifyFailed(&'static str),
    /// The peer sent a fatal alert, typically because it rejected our certificate.
    AlertReceived(String),
    /// No cipher suite, group or signature scheme in common.
    NoSharedCipher,
    /// No protocol version in common (e.g. a TLS 1.0 client).
    UnsupportedProtocol,
    /// The connection ended in the middle of the handshake.
    UnexpectedEof,
    /// A socket error.
    Io(String),
    /// Anything else, in rustls' words.
    Other(String),
}

impl HandshakeError {
    /// Maps a rustls error to OpenSSL's words.
    pub fn from_rustls(e: &RustlsError) -> HandshakeError {
        match e {
            RustlsError::NoCertificatesPresented => HandshakeError::NoPeerCertificate,
            RustlsError::InvalidCertificate(c) => HandshakeError::VerifyFailed(x509_reason(c)),
            RustlsError::AlertReceived(a) => HandshakeError::AlertReceived(alert_text(*a)),
            RustlsError::InvalidMessage(
                InvalidMessage::InvalidContentType | InvalidMessage::UnknownProtocolVersion,
            ) => HandshakeError::WrongVersionNumber,
            RustlsError::PeerIncompatible(p) => match p {
                PeerIncompatible::NoCipherSuitesInCommon
                | PeerIncompatible::NoKxGroupsInCommon
                | PeerIncompatible::NoSignatureSchemesInCommon
                | PeerIncompatible::NoCertificateRequestSignatureSchemesInCommon
                | PeerIncompatible::NoEcPointFormatsInCommon => HandshakeError::NoSharedCipher,
                // TLS 1.0/1.1 clients send no signature_algorithms: that is how an old
                // protocol version shows up here.
                PeerIncompatible::SupportedVersionsExtensionRequired
                | PeerIncompatible::SignatureAlgorithmsExtensionRequired
                | PeerIncompatible::Tls12NotOffered
                | PeerIncompatible::Tls12NotOfferedOrEnabled
                | PeerIncompatible::ServerDoesNotSupportTls12Or13
                | PeerIncompatible::ServerTlsVersionIsDisabledByOurConfig => HandshakeError::UnsupportedProtocol,
                other => HandshakeError::Other(format!("peer is incompatible: {other:?}")),
            },
            other => HandshakeError::Other(other.to_string()),
        }
    }

    /// Maps an I/O error from a tokio-rustls stream, which wraps rustls errors in `io::Error`.
    pub fn from_io(e: &io::Error) -> HandshakeError {
        if let Some(inner) = e.get_ref().and_then(|i| i.downcast_ref::<RustlsError>()) {
            return HandshakeError::from_rustls(inner);
        }
        match e.kind() {
            io::ErrorKind::UnexpectedEof => HandshakeError::UnexpectedEof,
            _ => HandshakeError::Io(io_reason(e)),
        }
    }
}

impl fmt::Display for HandshakeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HandshakeError::WrongVersionNumber => f.write_str("wrong version number (SSL routines)"),
            HandshakeError::NoPeerCertificate => f.write_str("peer did not return a certificate (SSL routines)"),
            HandshakeError::VerifyFailed(r) => write!(f, "certificate verify failed (SSL routines): {r}"),
            HandshakeError::AlertReceived(a) => write!(f, "{a} (SSL routines)"),
            HandshakeError::NoSharedCipher => f.write_str("no shared cipher (SSL routines)"),
            HandshakeError::UnsupportedProtocol => f.write_str("unsupported protocol (SSL routines)"),
            HandshakeError::UnexpectedEof => f.write_str("unexpected eof while reading (SSL routines)"),
            HandshakeError::Io(s) | HandshakeError::Other(s) => f.write_str(s),
        }
    }
}

impl std::error::Error for HandshakeError {}

/// X509_verify_cert_error_string's words for a webpki verdict.
pub(crate) fn x509_reason(e: &CertificateError) -> &'static str {
    match e {
        CertificateError::UnknownIssuer => "unable to get local issuer certificate",
        CertificateError::BadSignature => "certificate signature failure",
        CertificateError::Expired | CertificateError::ExpiredContext { .. } => "certificate has expired",
        CertificateError::NotValidYet | CertificateError::NotValidYetContext { .. } => "certificate is not yet valid",
        CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. } => "hostname mismatch",
        CertificateError::InvalidPurpose | CertificateError::InvalidPurposeContext { .. } => {
            "unsupported certificate purpose"
        }
        CertificateError::Revoked => "certificate revoked",
        CertificateError::UnknownRevocationStatus => "unable to get certificate CRL",
        CertificateError::ExpiredRevocationList | CertificateError::ExpiredRevocationListContext { .. } => {
            "CRL has expired"
        }
        CertificateError::UnhandledCriticalExtension => "unhandled critical extension",
        CertificateError::BadEncoding => "bad certificate encoding",
        #[allow(deprecated)] // older webpki versions still produce the unit variant
        CertificateError::UnsupportedSignatureAlgorithm
        | CertificateError::UnsupportedSignatureAlgorithmContext { .. }
        | CertificateError::UnsupportedSignatureAlgorithmForPublicKeyContext { .. } => {
            "unsupported signature algorithm"
        }
        CertificateError::ApplicationVerificationFailure => "application verification failure",
        // webpki reports X.509 v1 certificates (and other structural problems) as `Other`.
        _ => "certificate rejected (unsupported or malformed, X.509 v1 certificates are not accepted)",
    }
}

/// OpenSSL 3's text for an alert received from the peer (`SSL_R_*_ALERT_*`).
fn alert_text(a: AlertDescription) -> String {
    let s = match a {
        AlertDescription::CloseNotify => "ssl/tls alert close notify",
        AlertDescription::UnexpectedMessage => "ssl/tls alert unexpected message",
        AlertDescription::BadRecordMac => "ssl/tls alert bad record mac",
        AlertDescription::DecryptionFailed => "tlsv1 alert decryption failed",
        AlertDescription::RecordOverflow => "tlsv1 alert record overflow",
        AlertDescription::DecompressionFailure => "ssl/tls alert decompression failure",
        AlertDescription::HandshakeFailure => "ssl/tls alert handshake failure",
        AlertDescription::NoCertificate => "ssl/tls alert no certificate",
        AlertDescription::BadCertificate => "ssl/tls alert bad certificate",
        AlertDescription::UnsupportedCertificate => "ssl/tls alert unsupported certificate",
        AlertDescription::CertificateRevoked => "ssl/tls alert certificate revoked",
        AlertDescription::CertificateExpired => "ssl/tls alert certificate expired",
        AlertDescription::CertificateUnknown => "ssl/tls alert certificate unknown",
        AlertDescription::IllegalParameter => "ssl/tls alert illegal parameter",
        AlertDescription::UnknownCA => "tlsv1 alert unknown ca",
        AlertDescription::AccessDenied => "tlsv1 alert access denied",
        AlertDescription::DecodeError => "tlsv1 alert decode error",
        AlertDescription::DecryptError => "tlsv1 alert decrypt error",
        AlertDescription::ProtocolVersion => "tlsv1 alert protocol version",
        AlertDescription::InsufficientSecurity => "tlsv1 alert insufficient security",
        AlertDescription::InternalError => "tlsv1 alert internal error",
        AlertDescription::InappropriateFallback => "tlsv1 alert inappropriate fallback",
        AlertDescription::UserCanceled => "tlsv1 alert user cancelled",
        AlertDescription::NoRenegotiation => "tlsv1 alert no renegotiation",
        AlertDescription::MissingExtension => "tlsv13 alert missing extension",
        AlertDescription::UnsupportedExtension => "tlsv1 unsupported extension",
        AlertDescription::UnrecognisedName => "tlsv1 unrecognized name",
        AlertDescription::CertificateRequired => "tlsv13 alert certificate required",
        AlertDescription::NoApplicationProtocol => "tlsv1 alert no application protocol",
        other => return format!("tls alert {}", u8::from(other)),
    };
    s.to_owned()
}

/// `strerror` text of an I/O error, without Rust's " (os error N)" suffix.
pub(crate) fn io_reason(e: &io::Error) -> String {
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn io_reasons_read_like_strerror() {
        let e = io::Error::from_raw_os_error(13);
        assert_eq!(FileProblem::from_io(&e).to_string(), "Permission denied");
        let e = io::Error::from_raw_os_error(2);
        assert_eq!(io_reason(&e), "No such file or directory");
    }

    #[test]
    fn load_errors_use_openssl_words_and_name_the_file() {
        let e = TlsError::file(
            FileRole::Key,
            Path::new("/etc/hotkv/tls/node.key"),
            FileProblem::Io("Permission denied".into()),
        );
        assert_eq!(e.to_string(), "use_private_key_file: Permission denied [/etc/hotkv/tls/node.key]");
        let e = TlsError::file(FileRole::Cert, Path::new("/tmp/not-a-cert.crt"), FileProblem::NoStartLine);
        assert_eq!(
            e.config_set_reply(),
            "ERR Unable to update TLS configuration: use_certificate_chain_file: no start line (PEM routines) [/tmp/not-a-cert.crt]"
        );
        assert_eq!(e.path(), Some(Path::new("/tmp/not-a-cert.crt")));
    }

    #[test]
    fn handshake_reasons_match_the_reference_texts() {
        let t = |e: RustlsError| HandshakeError::from_rustls(&e).to_string();
        assert_eq!(t(RustlsError::NoCertificatesPresented), "peer did not return a certificate (SSL routines)");
        assert_eq!(
            t(RustlsError::InvalidCertificate(CertificateError::UnknownIssuer)),
            "certificate verify failed (SSL routines): unable to get local issuer certificate"
        );
        assert_eq!(
            t(RustlsError::InvalidCertificate(CertificateError::Expired)),
            "certificate verify failed (SSL routines): certificate has expired"
        );
        assert_eq!(
            t(RustlsError::InvalidCertificate(CertificateError::NotValidForName)),
            "certificate verify failed (SSL routines): hostname mismatch"
        );
        assert_eq!(t(RustlsError::AlertReceived(AlertDescription::UnknownCA)), "tlsv1 alert unknown ca (SSL routines)");
        assert_eq!(
            t(RustlsError::AlertReceived(AlertDescription::CertificateExpired)),
            "ssl/tls alert certificate expired (SSL routines)"
        );
        assert_eq!(
            t(RustlsError::InvalidMessage(InvalidMessage::InvalidContentType)),
            "wrong version number (SSL routines)"
        );
        assert_eq!(t(PeerIncompatible::NoCipherSuitesInCommon.into()), "no shared cipher (SSL routines)");
        assert_eq!(
            t(PeerIncompatible::SupportedVersionsExtensionRequired.into()),
            "unsupported protocol (SSL routines)"
        );
    }

    #[test]
    fn io_errors_from_tokio_rustls_unwrap_the_rustls_error() {
        let e =
            io::Error::new(io::ErrorKind::InvalidData, RustlsError::AlertReceived(AlertDescription::BadCertificate));
        assert_eq!(HandshakeError::from_io(&e).to_string(), "ssl/tls alert bad certificate (SSL routines)");
        let e = io::Error::new(io::ErrorKind::UnexpectedEof, "eof");
        assert_eq!(HandshakeError::from_io(&e), HandshakeError::UnexpectedEof);
        assert_eq!(HandshakeError::from_io(&io::Error::from_raw_os_error(104)).to_string(), "Connection reset by peer");
    }
}
