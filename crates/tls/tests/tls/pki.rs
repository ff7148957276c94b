//! A throwaway PKI for the tests: CAs, intermediates and leaves made with rcgen into a temp dir
//! that is removed on drop. Serials are unique per test process so that a renewed certificate
//! is always distinguishable from the one it replaces.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use hotkv_tls::rustls::pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use hotkv_tls::rustls::{self, ClientConfig, RootCertStore};
use hotkv_tls::{ClientAuth, TlsSettings};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    SanType, SerialNumber,
};
use time::{Duration, OffsetDateTime};

static SERIAL: AtomicU64 = AtomicU64::new(0x1000);
static DIRS: AtomicU64 = AtomicU64::new(0);

/// A temp directory removed on drop.
pub(crate) struct TempDir(pub(crate) PathBuf);

impl TempDir {
    pub(crate) fn new() -> TempDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("hotkv-tls-test-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }

    /// Writes `contents` to `name` (atomically, by rename, as a renewal job should).
    pub(crate) fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, contents).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }

    pub(crate) fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn next_serial() -> SerialNumber {
    SerialNumber::from_slice(&SERIAL.fetch_add(1, Ordering::Relaxed).to_be_bytes())
}

fn days(n: i64) -> OffsetDateTime {
    OffsetDateTime::now_utc() + Duration::days(n)
}

/// A certificate authority (root or intermediate).
pub(crate) struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pub(crate) pem: String,
}

impl Ca {
    /// A self-signed root valid from yesterday for ten years.
    pub(crate) fn root(cn: &str) -> Ca {
        Ca::root_valid(cn, days(-1), days(3650))
    }

    pub(crate) fn root_valid(cn: &str, not_before: OffsetDateTime, not_after: OffsetDateTime) -> Ca {
        let key = KeyPair::generate().unwrap();
        let params = ca_params(cn, not_before, not_after);
        let pem = params.self_signed(&key).unwrap().pem();
        Ca { params, key, pem }
    }

    /// An intermediate CA signed by this one.
    pub(crate) fn intermediate(&self, cn: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let params = ca_params(cn, days(-1), days(3000));
        let pem = params.signed_by(&key, &Issuer::from_params(&self.params, &self.key)).unwrap().pem();
        Ca { params, key, pem }
    }

    /// Issues a leaf.
    pub(crate) fn issue(&self, leaf: Leaf) -> Issued {
        let key = match leaf.key {
            Some(k) => k,
            None => KeyPair::generate().unwrap(),
        };
        self.issue_with_key(&leaf.params, key)
    }

    fn issue_with_key(&self, params: &CertificateParams, key: KeyPair) -> Issued {
        let cert = params.signed_by(&key, &Issuer::from_params(&self.params, &self.key)).unwrap();
        Issued { cert_pem: cert.pem(), key_pem: key.serialize_pem(), der: cert.der().clone() }
    }
}

fn ca_params(cn: &str, not_before: OffsetDateTime, not_after: OffsetDateTime) -> CertificateParams {
    let mut p = CertificateParams::default();
    p.distinguished_name.remove(DnType::CommonName);
    p.distinguished_name.push(DnType::CommonName, cn);
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    p.not_before = not_before;
    p.not_after = not_after;
    p.serial_number = Some(next_serial());
    p
}

/// What a leaf should look like.
pub(crate) struct Leaf {
    params: CertificateParams,
    key: Option<KeyPair>,
}

impl Leaf {
    fn new(cn: &str, eku: &[ExtendedKeyUsagePurpose]) -> Leaf {
        let mut p = CertificateParams::default();
        p.distinguished_name.remove(DnType::CommonName);
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = eku.to_vec();
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.not_before = days(-1);
        p.not_after = days(365);
        p.serial_number = Some(next_serial());
        Leaf { params: p, key: None }
    }

    /// A node certificate: serverAuth + clientAuth, SAN localhost and 127.0.0.1.
    pub(crate) fn node(cn: &str) -> Leaf {
        Leaf::new(cn, &[ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth])
            .dns("localhost")
            .ip("127.0.0.1".parse().unwrap())
    }

    /// A node certificate with serverAuth only.
    pub(crate) fn server_only(cn: &str) -> Leaf {
        Leaf::new(cn, &[ExtendedKeyUsagePurpose::ServerAuth]).dns("localhost").ip("127.0.0.1".parse().unwrap())
    }

    /// An application's client certificate.
    pub(crate) fn client(cn: &str) -> Leaf {
        Leaf::new(cn, &[ExtendedKeyUsagePurpose::ClientAuth])
    }

    pub(crate) fn dns(mut self, name: &str) -> Leaf {
        self.params.subject_alt_names.push(SanType::DnsName(name.try_into().unwrap()));
        self
    }

    pub(crate) fn ip(mut self, ip: IpAddr) -> Leaf {
        self.params.subject_alt_names.push(SanType::IpAddress(ip));
        self
    }

    pub(crate) fn uri(mut self, uri: &str) -> Leaf {
        self.params.subject_alt_names.push(SanType::URI(uri.try_into().unwrap()));
        self
    }

    /// Validity relative to now, in days.
    pub(crate) fn valid(mut self, from: i64, to: i64) -> Leaf {
        self.params.not_before = days(from);
        self.params.not_after = days(to);
        self
    }

    /// Reuse a key (renewal with the same key).
    pub(crate) fn key_pem(mut self, pem: &str) -> Leaf {
        self.key = Some(KeyPair::from_pem(pem).unwrap());
        self
    }
}

/// An issued leaf.
#[derive(Clone)]
pub(crate) struct Issued {
    pub(crate) cert_pem: String,
    pub(crate) key_pem: String,
    pub(crate) der: CertificateDer<'static>,
}

impl Issued {
    /// The serial as INFO prints it.
    pub(crate) fn serial(&self) -> String {
        hotkv_tls::CertInfo::parse(&self.der).unwrap().serial
    }
}

/// Settings for a TLS client port using these files.
pub(crate) fn settings(cert: &Path, key: &Path, ca: &Path) -> TlsSettings {
    TlsSettings {
        port: 6380,
        cert_file: Some(cert.into()),
        key_file: Some(key.into()),
        ca_cert_file: Some(ca.into()),
        auth_clients: ClientAuth::Required,
        ..TlsSettings::default()
    }
}

/// A standard setup: CA, node certificate, files written.
pub(crate) struct Setup {
    pub(crate) dir: TempDir,
    pub(crate) ca: Ca,
    pub(crate) node: Issued,
    pub(crate) cert: PathBuf,
    pub(crate) key: PathBuf,
    pub(crate) ca_file: PathBuf,
}

impl Setup {
    pub(crate) fn new() -> Setup {
        let dir = TempDir::new();
        let ca = Ca::root("hotkv test CA");
        let node = ca.issue(Leaf::node("node1"));
        let cert = dir.write("node.crt", &node.cert_pem);
        let key = dir.write("node.key", &node.key_pem);
        let ca_file = dir.write("ca.crt", &ca.pem);
        Setup { dir, ca, node, cert, key, ca_file }
    }

    pub(crate) fn settings(&self) -> TlsSettings {
        settings(&self.cert, &self.key, &self.ca_file)
    }
}

/// A rustls client config trusting `ca_pems`, presenting `identity` if given.
pub(crate) fn client_config(ca_pems: &[&str], identity: Option<&Issued>) -> Arc<ClientConfig> {
    let mut roots = RootCertStore::empty();
    for pem in ca_pems {
        for c in CertificateDer::pem_slice_iter(pem.as_bytes()) {
            roots.add(c.unwrap()).unwrap();
        }
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let b = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let cfg = match identity {
        Some(id) => {
            let chain: Vec<_> = CertificateDer::pem_slice_iter(id.cert_pem.as_bytes()).map(|c| c.unwrap()).collect();
            let key = PrivateKeyDer::from_pem_slice(id.key_pem.as_bytes()).unwrap();
            b.with_client_auth_cert(chain, key).unwrap()
        }
        None => b.with_no_client_auth(),
    };
    Arc::new(cfg)
}

/// Encrypts a PEM key as PKCS#8 with `pass`, the way OpenSSL 3 does (`-v2 aes-256-cbc`).
pub(crate) fn encrypt_key(dir: &TempDir, key_pem: &str, pass: &str) -> PathBuf {
    let plain = dir.write("plain.key", key_pem);
    let out = dir.path("enc.key");
    let st = std::process::Command::new("openssl")
        .args(["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout"])
        .arg(format!("pass:{pass}"))
        .arg("-in")
        .arg(&plain)
        .arg("-out")
        .arg(&out)
        .status()
        .expect("openssl CLI");
    assert!(st.success());
    out
}
