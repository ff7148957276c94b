//! The values of every `tls-*` directive as one plain struct.
//!
//! The server crate owns the directive table and its parsing; it converts its typed settings
//! into a [`TlsSettings`] and hands that to the [`crate::TlsManager`]. Only the values that need
//! TLS knowledge to interpret (protocol and cipher lists, peer names) stay strings here: this
//! crate parses them when it builds a configuration, so CONFIG SET reports their errors.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::{FileRole, TlsError};

/// Client certificates on the client port (`tls-auth-clients`).
///
/// The cluster bus ignores this setting: bus peers must always present a certificate.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum ClientAuth {
    /// `yes` (the upstream default): a client must present a certificate the CA trusts.
    #[default]
    Required,
    /// `optional`: a certificate is asked for and verified when sent; none is fine.
    Optional,
    /// `no`: no certificate is asked for.
    NotRequested,
}

impl ClientAuth {
    /// The three modes, in the order [`ClientAuth::index`] numbers them.
    pub const ALL: [ClientAuth; 3] = [ClientAuth::Required, ClientAuth::Optional, ClientAuth::NotRequested];

    /// Position in [`ClientAuth::ALL`] (the per-mode config array of a `TlsState`).
    pub fn index(self) -> usize {
        match self {
            ClientAuth::Required => 0,
            ClientAuth::Optional => 1,
            ClientAuth::NotRequested => 2,
        }
    }

    /// The directive's spelling: `yes`, `optional` or `no`.
    pub fn as_str(self) -> &'static str {
        match self {
            ClientAuth::Required => "yes",
            ClientAuth::Optional => "optional",
            ClientAuth::NotRequested => "no",
        }
    }
}

impl FromStr for ClientAuth {
    type Err = String;

    /// Parses `yes`, `optional` or `no`, in any case, like the config table's enum type.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "yes" => Ok(ClientAuth::Required),
            "optional" => Ok(ClientAuth::Optional),
            "no" => Ok(ClientAuth::NotRequested),
            _ => Err(format!("tls-auth-clients must be 'yes', 'optional' or 'no', not '{s}'")),
        }
    }
}

/// Log in by client certificate (`tls-auth-clients-user`, Valkey 9).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum CertUser {
    /// `off` (default): the certificate does not pick a user.
    #[default]
    Off,
    /// `CN`: the ACL user named exactly like the subject common name.
    CommonName,
    /// `URI`: the first URI subject alternative name that names an enabled user.
    Uri,
}

impl FromStr for CertUser {
    type Err = String;

    /// Parses `off`, `CN` or `URI`, in any case.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "off" => Ok(CertUser::Off),
            "cn" => Ok(CertUser::CommonName),
            "uri" => Ok(CertUser::Uri),
            _ => Err(format!("tls-auth-clients-user must be 'off', 'CN' or 'URI', not '{s}'")),
        }
    }
}

/// Every `tls-*` directive's value. Paths are `None` when the directive is unset (empty).
///
/// `Default` gives the upstream defaults (Valkey 9 / Redis 8).
#[derive(Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// `tls-port`: 0 = no TLS listener.
    pub port: u16,
    /// `tls-cert-file`: PEM chain, leaf first. Also the outbound certificate unless both client
    /// files are set.
    pub cert_file: Option<PathBuf>,
    /// `tls-key-file`: PEM private key of `cert_file`.
    pub key_file: Option<PathBuf>,
    /// `tls-key-file-pass`: passphrase of an encrypted (PKCS#8) `key_file`. Sensitive.
    pub key_file_pass: Option<String>,
    /// `tls-client-cert-file`: certificate for outbound links (replication, bus, MIGRATE).
    pub client_cert_file: Option<PathBuf>,
    /// `tls-client-key-file`: key of `client_cert_file`.
    pub client_key_file: Option<PathBuf>,
    /// `tls-client-key-file-pass`: passphrase of `client_key_file`. Sensitive.
    pub client_key_file_pass: Option<String>,
    /// `tls-ca-cert-file`: CA bundle that verifies every peer; all CAs in it are trusted.
    pub ca_cert_file: Option<PathBuf>,
    /// `tls-ca-cert-dir`: directory whose regular files hold CA certificates.
    pub ca_cert_dir: Option<PathBuf>,
    /// `tls-auth-clients`.
    pub auth_clients: ClientAuth,
    /// `tls-auth-clients-user`.
    pub auth_clients_user: CertUser,
    /// `tls-protocols`: space separated; empty = `TLSv1.2 TLSv1.3`.
    pub protocols: String,
    /// `tls-ciphers`: OpenSSL cipher list for TLS 1.2; empty = every suite rustls offers.
    pub ciphers: String,
    /// `tls-ciphersuites`: TLS 1.3 suites, colon separated; empty = all three.
    pub ciphersuites: String,
    /// `tls-prefer-server-ciphers`: pick the suite in the server's order.
    pub prefer_server_ciphers: bool,
    /// `tls-session-caching`: server-side session cache for resumption.
    pub session_caching: bool,
    /// `tls-session-cache-size`: sessions kept; 0 = unlimited (capped, see `cache.rs`).
    pub session_cache_size: u32,
    /// `tls-session-cache-timeout`: seconds a cached session may be resumed.
    pub session_cache_timeout: u32,
    /// `tls-dh-params-file`: must be a readable DH PARAMETERS PEM; rustls has no DHE, so the
    /// content is otherwise unused.
    pub dh_params_file: Option<PathBuf>,
    /// `tls-replication`: dial the primary over TLS.
    pub replication: bool,
    /// `tls-cluster`: TLS with mutual authentication on the cluster bus.
    pub cluster: bool,
    /// `tls-auto-reload-interval`: seconds between checks of the files; 0 = off.
    pub auto_reload_interval: u64,
    /// `tls-expected-peer-name` (Redis): names a server-to-server peer's certificate must carry;
    /// empty = no name check. Space separated, as the directive is written.
    pub expected_peer_names: String,
}

impl Default for TlsSettings {
    fn default() -> Self {
        TlsSettings {
            port: 0,
            cert_file: None,
            key_file: None,
            key_file_pass: None,
            client_cert_file: None,
            client_key_file: None,
            client_key_file_pass: None,
            ca_cert_file: None,
            ca_cert_dir: None,
            auth_clients: ClientAuth::Required,
            auth_clients_user: CertUser::Off,
            protocols: String::new(),
            ciphers: String::new(),
            ciphersuites: String::new(),
            prefer_server_ciphers: false,
            session_caching: true,
            session_cache_size: 20480,
            session_cache_timeout: 300,
            dh_params_file: None,
            replication: false,
            cluster: false,
            auto_reload_interval: 0,
            expected_peer_names: String::new(),
        }
    }
}

impl TlsSettings {
    /// Turns a directive's string value into an optional path: the config table stores an
    /// unset path as the empty string.
    pub fn path(value: &str) -> Option<PathBuf> {
        (!value.is_empty()).then(|| PathBuf::from(value))
    }

    /// Whether TLS material must be loaded: a TLS listener, or TLS on replication or the bus
    /// (upstream rule). Otherwise the values are only stored.
    pub fn in_use(&self) -> bool {
        self.port != 0 || self.cluster || self.replication
    }

    /// Whether a CA is required: some peer's certificate has to be verified.
    pub fn needs_ca(&self) -> bool {
        self.auth_clients != ClientAuth::NotRequested || self.cluster || self.replication
    }

    /// Whether outbound links present the separate client pair: upstream uses it only when
    /// both the client certificate and the client key are set.
    pub fn has_client_pair(&self) -> bool {
        self.client_cert_file.is_some() && self.client_key_file.is_some()
    }

    /// The upstream start/CONFIG SET requirements: certificate, key, and a CA whenever a peer
    /// certificate must be verified.
    pub fn check_required(&self) -> Result<(), TlsError> {
        if self.cert_file.is_none() {
            return Err(TlsError::NoCertFile);
        }
        if self.key_file.is_none() {
            return Err(TlsError::NoKeyFile);
        }
        if self.needs_ca() && self.ca_cert_file.is_none() && self.ca_cert_dir.is_none() {
            return Err(TlsError::NoCaConfigured);
        }
        Ok(())
    }

    /// Every configured file with its role, in a fixed order (the fingerprint order).
    pub fn files(&self) -> Vec<(FileRole, &Path)> {
        let client = self.has_client_pair();
        [
            (FileRole::Cert, &self.cert_file),
            (FileRole::Key, &self.key_file),
            (FileRole::ClientCert, if client { &self.client_cert_file } else { &None }),
            (FileRole::ClientKey, if client { &self.client_key_file } else { &None }),
            (FileRole::CaFile, &self.ca_cert_file),
            (FileRole::CaDir, &self.ca_cert_dir),
            (FileRole::DhParams, &self.dh_params_file),
        ]
        .into_iter()
        .filter_map(|(role, p)| p.as_deref().map(|p| (role, p)))
        .collect()
    }
}

/// Passphrases are redacted: settings end up in debug logs and panic messages.
impl fmt::Debug for TlsSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let redact = |p: &Option<String>| p.as_ref().map(|_| "<redacted>");
        f.debug_struct("TlsSettings")
            .field("port", &self.port)
            .field("cert_file", &self.cert_file)
            .field("key_file", &self.key_file)
            .field("key_file_pass", &redact(&self.key_file_pass))
            .field("client_cert_file", &self.client_cert_file)
            .field("client_key_file", &self.client_key_file)
            .field("client_key_file_pass", &redact(&self.client_key_file_pass))
            .field("ca_cert_file", &self.ca_cert_file)
            .field("ca_cert_dir", &self.ca_cert_dir)
            .field("auth_clients", &self.auth_clients)
            .field("auth_clients_user", &self.auth_clients_user)
            .field("protocols", &self.protocols)
            .field("ciphers", &self.ciphers)
            .field("ciphersuites", &self.ciphersuites)
            .field("prefer_server_ciphers", &self.prefer_server_ciphers)
            .field("session_caching", &self.session_caching)
            .field("session_cache_size", &self.session_cache_size)
            .field("session_cache_timeout", &self.session_cache_timeout)
            .field("dh_params_file", &self.dh_params_file)
            .field("replication", &self.replication)
            .field("cluster", &self.cluster)
            .field("auto_reload_interval", &self.auto_reload_interval)
            .field("expected_peer_names", &self.expected_peer_names)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enums_parse_directive_spellings() {
        assert_eq!("YES".parse::<ClientAuth>(), Ok(ClientAuth::Required));
        assert_eq!("optional".parse::<ClientAuth>(), Ok(ClientAuth::Optional));
        assert_eq!("no".parse::<ClientAuth>(), Ok(ClientAuth::NotRequested));
        assert!("maybe".parse::<ClientAuth>().is_err());
        assert_eq!("cn".parse::<CertUser>(), Ok(CertUser::CommonName));
        assert_eq!("URI".parse::<CertUser>(), Ok(CertUser::Uri));
        for m in ClientAuth::ALL {
            assert_eq!(ClientAuth::ALL[m.index()], m);
            assert_eq!(m.as_str().parse::<ClientAuth>(), Ok(m));
        }
    }

    #[test]
    fn requirements_follow_upstream() {
        let mut s = TlsSettings { port: 6380, ..TlsSettings::default() };
        assert!(s.in_use());
        assert_eq!(s.check_required().unwrap_err().to_string(), "No tls-cert-file configured!");
        s.cert_file = Some("c".into());
        assert_eq!(s.check_required().unwrap_err().to_string(), "No tls-key-file configured!");
        s.key_file = Some("k".into());
        assert!(s.check_required().unwrap_err().to_string().starts_with("Either tls-ca-cert-file or tls-ca-cert-dir"));
        s.auth_clients = ClientAuth::NotRequested;
        assert!(s.check_required().is_ok());
        s.cluster = true;
        assert!(s.check_required().is_err(), "the bus always verifies peers");
        s.ca_cert_dir = Some("d".into());
        assert!(s.check_required().is_ok());
    }

    #[test]
    fn debug_redacts_passphrases() {
        let s = TlsSettings { key_file_pass: Some("hunter2".into()), ..TlsSettings::default() };
        let d = format!("{s:?}");
        assert!(!d.contains("hunter2") && d.contains("<redacted>"), "{d}");
    }

    #[test]
    fn client_pair_needs_both_files() {
        let mut s = TlsSettings { client_cert_file: Some("c".into()), ..TlsSettings::default() };
        assert!(!s.has_client_pair());
        s.client_key_file = Some("k".into());
        assert!(s.has_client_pair());
        assert_eq!(TlsSettings::path(""), None);
        assert_eq!(TlsSettings::path("/x"), Some(PathBuf::from("/x")));
    }
}
