//! Certificates for the TLS tests, made fresh by each test (rcgen) so none can expire in the
//! repository: a CA, node certificates (serverAuth + clientAuth, SAN 127.0.0.1 and
//! localhost), client certificates, and the bad ones every refusal needs (expired, from
//! another CA, serverAuth only, a key that belongs to another certificate).

use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose as Eku, IsCa, Issuer, KeyPair,
    KeyUsagePurpose, SanType, SerialNumber,
};
use time::{Duration, OffsetDateTime};

static SERIAL: AtomicU64 = AtomicU64::new(0x10_0000);
static DIRS: AtomicU64 = AtomicU64::new(0);

/// A temp directory for certificate files, removed on drop.
pub struct CertDir(PathBuf);

impl CertDir {
    pub fn new() -> CertDir {
        let n = DIRS.fetch_add(1, Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("hotkv-it-pki-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        CertDir(p)
    }

    /// Writes `name` atomically (by rename, as a renewal job should) and returns its path.
    pub fn write(&self, name: &str, contents: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(name);
        let tmp = self.0.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, contents).unwrap();
        std::fs::rename(&tmp, &p).unwrap();
        p
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }

    /// The path as a string, for configs and command lines.
    pub fn s(&self, name: &str) -> String {
        self.path(name).display().to_string()
    }
}

impl Drop for CertDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn days(n: i64) -> OffsetDateTime {
    OffsetDateTime::now_utc() + Duration::days(n)
}

fn serial() -> SerialNumber {
    SerialNumber::from_slice(&SERIAL.fetch_add(1, Ordering::Relaxed).to_be_bytes())
}

/// A certificate authority.
pub struct Ca {
    params: CertificateParams,
    key: KeyPair,
    pub pem: String,
}

impl Ca {
    pub fn new(cn: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
        p.not_before = days(-1);
        p.not_after = days(3650);
        p.serial_number = Some(serial());
        let pem = p.self_signed(&key).unwrap().pem();
        Ca { params: p, key, pem }
    }

    /// Issues a leaf named `cn` with these key usages, valid from `from` to `to` days from now.
    pub fn issue(&self, cn: &str, eku: &[Eku], from: i64, to: i64, key: Option<&str>) -> Leaf {
        let key = match key {
            Some(pem) => KeyPair::from_pem(pem).unwrap(),
            None => KeyPair::generate().unwrap(),
        };
        let mut p = CertificateParams::default();
        p.distinguished_name.push(DnType::CommonName, cn);
        p.extended_key_usages = eku.to_vec();
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().unwrap()),
            SanType::IpAddress(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        ];
        p.not_before = days(from);
        p.not_after = days(to);
        let sn = serial();
        p.serial_number = Some(sn.clone());
        let cert = p.signed_by(&key, &Issuer::from_params(&self.params, &self.key)).unwrap();
        Leaf { cert: cert.pem(), key: key.serialize_pem(), serial: hex_upper(sn.as_ref()) }
    }

    /// A node certificate: serverAuth + clientAuth, valid for a year.
    pub fn node(&self, cn: &str) -> Leaf {
        self.issue(cn, &[Eku::ServerAuth, Eku::ClientAuth], -1, 365, None)
    }

    /// An application's certificate: clientAuth.
    pub fn client(&self, cn: &str) -> Leaf {
        self.issue(cn, &[Eku::ClientAuth], -1, 365, None)
    }

    /// A clientAuth certificate whose subject has no CN (only an organization).
    pub fn client_without_cn(&self) -> Leaf {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::default();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(DnType::OrganizationName, "no common name");
        p.extended_key_usages = vec![Eku::ClientAuth];
        p.key_usages = vec![KeyUsagePurpose::DigitalSignature];
        p.not_before = days(-1);
        p.not_after = days(365);
        let sn = serial();
        p.serial_number = Some(sn.clone());
        let cert = p.signed_by(&key, &Issuer::from_params(&self.params, &self.key)).unwrap();
        Leaf { cert: cert.pem(), key: key.serialize_pem(), serial: hex_upper(sn.as_ref()) }
    }
}

/// An issued certificate with its key.
pub struct Leaf {
    pub cert: String,
    pub key: String,
    /// As OpenSSL and INFO tls print it: upper-case hex without leading zeros.
    pub serial: String,
}

fn hex_upper(bytes: &[u8]) -> String {
    let s: String = bytes.iter().map(|b| format!("{b:02X}")).collect();
    let t = s.trim_start_matches('0');
    if t.is_empty() { "0".into() } else { t.into() }
}

/// The usual files: `ca.crt`, `node.crt`/`node.key` and `app.crt`/`app.key`.
pub struct Pki {
    pub dir: CertDir,
    pub ca: Ca,
    pub node: Leaf,
}

impl Pki {
    pub fn new() -> Pki {
        let dir = CertDir::new();
        let ca = Ca::new("hotkv test CA");
        let node = ca.node("node1");
        let app = ca.client("app");
        dir.write("ca.crt", &ca.pem);
        dir.write("node.crt", &node.cert);
        dir.write("node.key", &node.key);
        dir.write("app.crt", &app.cert);
        dir.write("app.key", &app.key);
        Pki { dir, ca, node }
    }

    /// The server directives for a TLS port with these files.
    pub fn server_config(&self, tls_port: u16) -> Vec<(String, String)> {
        vec![
            ("tls-port".into(), tls_port.to_string()),
            ("tls-cert-file".into(), self.dir.s("node.crt")),
            ("tls-key-file".into(), self.dir.s("node.key")),
            ("tls-ca-cert-file".into(), self.dir.s("ca.crt")),
        ]
    }

    /// `redis-cli` TLS options presenting `cert`/`key` (names in the dir), or no certificate.
    pub fn cli_args(&self, identity: Option<(&str, &str)>) -> Vec<String> {
        let mut v = vec!["--tls".into(), "--cacert".into(), self.dir.s("ca.crt")];
        if let Some((c, k)) = identity {
            v.extend(["--cert".into(), self.dir.s(c), "--key".into(), self.dir.s(k)]);
        }
        v
    }
}

/// Writes `contents` over `path` atomically.
pub fn replace(path: &Path, contents: &str) {
    let tmp = path.with_extension("tmp-replace");
    std::fs::write(&tmp, contents).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}
