//! What a certificate says, read with x509-parser: the facts INFO, the logs and the preflight
//! check report (subject, serial, validity, names, key usages).

use std::fmt;
use std::net::IpAddr;
use std::path::PathBuf;

use rustls::pki_types::CertificateDer;
use x509_parser::extensions::GeneralName;
use x509_parser::prelude::X509Certificate;

/// Netscape cert type (`nsCertType`): OpenSSL peers enforce it, rustls ignores it.
const NS_CERT_TYPE: &str = "2.16.840.1.113730.1.1";

/// The facts of one certificate.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertInfo {
    /// Subject, e.g. `CN=node1.example.com`.
    pub subject: String,
    /// Issuer's name.
    pub issuer: String,
    /// Serial as upstream INFO prints it: uppercase hex, no separators (OpenSSL `BN_bn2hex`).
    pub serial: String,
    /// notBefore, Unix seconds.
    pub not_before: i64,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    /// X.509 version (1 or 3; webpki refuses version 1).
    pub version: u32,
    /// Subject common names, in order.
    pub common_names: Vec<String>,
    /// DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// IP address subject alternative names.
    pub ip_addresses: Vec<IpAddr>,
    /// URI subject alternative names (`tls-auth-clients-user URI`).
    pub uris: Vec<String>,
    /// Extended key usage, `None` when the extension is absent (any use allowed).
    pub eku: Option<Eku>,
    /// basicConstraints CA:TRUE.
    pub is_ca: bool,
    /// Carries a Netscape nsCertType extension.
    pub has_ns_cert_type: bool,
    /// SHA-256 of the DER, as `openssl x509 -fingerprint -sha256` computes it.
    pub fingerprint: [u8; 32],
    /// The file it was read from (`None` when parsed from bytes alone), for log lines that
    /// must say which file to renew.
    pub file: Option<PathBuf>,
}

/// The extended key usages that matter for TLS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Eku {
    /// TLS Web Server Authentication.
    pub server_auth: bool,
    /// TLS Web Client Authentication.
    pub client_auth: bool,
    /// anyExtendedKeyUsage.
    pub any: bool,
}

impl CertInfo {
    /// Reads a DER certificate.
    pub fn parse(der: &CertificateDer<'_>) -> Result<CertInfo, String> {
        let (_, x) = x509_parser::parse_x509_certificate(der).map_err(|e| e.to_string())?;
        Ok(CertInfo::from_x509(&x, crate::material::sha256(der)))
    }

    /// The SHA-256 fingerprint as OpenSSL prints it: uppercase hex pairs joined by colons.
    pub fn fingerprint_text(&self) -> String {
        fingerprint_text(&self.fingerprint)
    }

    fn from_x509(x: &X509Certificate<'_>, fingerprint: [u8; 32]) -> CertInfo {
        let mut info = CertInfo {
            subject: x.subject().to_string(),
            issuer: x.issuer().to_string(),
            serial: serial_hex(x.raw_serial()),
            not_before: x.validity().not_before.timestamp(),
            not_after: x.validity().not_after.timestamp(),
            version: x.version().0 + 1,
            common_names: x.subject().iter_common_name().filter_map(|cn| cn.as_str().ok().map(str::to_owned)).collect(),
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            uris: Vec::new(),
            eku: None,
            is_ca: x.is_ca(),
            has_ns_cert_type: x.extensions().iter().any(|e| e.oid.to_id_string() == NS_CERT_TYPE),
            fingerprint,
            file: None,
        };
        if let Ok(Some(san)) = x.subject_alternative_name() {
            for name in &san.value.general_names {
                match name {
                    GeneralName::DNSName(d) => info.dns_names.push((*d).to_owned()),
                    GeneralName::URI(u) => info.uris.push((*u).to_owned()),
                    GeneralName::IPAddress(b) => {
                        if let Some(ip) = ip_from_bytes(b) {
                            info.ip_addresses.push(ip);
                        }
                    }
                    _ => {}
                }
            }
        }
        if let Ok(Some(eku)) = x.extended_key_usage() {
            let v = eku.value;
            info.eku = Some(Eku { server_auth: v.server_auth, client_auth: v.client_auth, any: v.any });
        }
        info
    }

    /// Seconds until notAfter (negative once expired), as upstream's `*_expires_in_seconds`.
    pub fn expires_in(&self, now: i64) -> i64 {
        self.not_after - now
    }

    /// Whether `now` lies within notBefore..=notAfter.
    pub fn is_valid_at(&self, now: i64) -> bool {
        self.not_before <= now && now <= self.not_after
    }

    /// Whether the certificate may authenticate a TLS client (no EKU extension = any use).
    pub fn allows_client_auth(&self) -> bool {
        self.eku.is_none_or(|e| e.client_auth || e.any)
    }

    /// Whether the certificate may authenticate a TLS server.
    pub fn allows_server_auth(&self) -> bool {
        self.eku.is_none_or(|e| e.server_auth || e.any)
    }

    /// The subject alternative names, OpenSSL style (`DNS:a, IP Address:1.2.3.4`), for messages.
    pub fn san_text(&self) -> String {
        let mut parts: Vec<String> = self.dns_names.iter().map(|d| format!("DNS:{d}")).collect();
        parts.extend(self.ip_addresses.iter().map(|ip| format!("IP Address:{ip}")));
        parts.extend(self.uris.iter().map(|u| format!("URI:{u}")));
        if parts.is_empty() { "none".into() } else { parts.join(", ") }
    }
}

/// One line for the logs: `subject=…, serial=…, not_before=…, not_after=…`.
impl fmt::Display for CertInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "subject={}, serial={}, not_before={}, not_after={}",
            self.subject,
            self.serial,
            format_time(self.not_before),
            format_time(self.not_after)
        )
    }
}

/// Formats Unix seconds as RFC 3339 UTC (`2028-01-01T00:00:00Z`).
pub fn format_time(unix: i64) -> String {
    let days = unix.div_euclid(86_400);
    let secs = unix.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!("{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z", secs / 3600, secs / 60 % 60, secs % 60)
}

/// A SHA-256 fingerprint as `openssl x509 -noout -fingerprint -sha256` prints it
/// (`AB:CD:…`), so an operator can compare what a node reports with the file in hand.
pub fn fingerprint_text(fp: &[u8; 32]) -> String {
    let mut s = String::with_capacity(95);
    for (i, b) in fp.iter().enumerate() {
        if i > 0 {
            s.push(':');
        }
        s.push_str(&format!("{b:02X}"));
    }
    s
}

/// OpenSSL `BN_bn2hex` of a positive serial: leading zero bytes dropped, uppercase.
fn serial_hex(raw: &[u8]) -> String {
    let start = raw.iter().position(|b| *b != 0).unwrap_or(raw.len());
    if start == raw.len() {
        return "0".into();
    }
    raw[start..].iter().map(|b| format!("{b:02X}")).collect()
}

fn ip_from_bytes(b: &[u8]) -> Option<IpAddr> {
    match b.len() {
        4 => Some(IpAddr::from(<[u8; 4]>::try_from(b).ok()?)),
        16 => Some(IpAddr::from(<[u8; 16]>::try_from(b).ok()?)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_format_as_rfc3339() {
        assert_eq!(format_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_time(1_830_297_600), "2028-01-01T00:00:00Z");
        assert_eq!(format_time(951_782_400 + 3661), "2000-02-29T01:01:01Z");
        assert_eq!(format_time(-1), "1969-12-31T23:59:59Z");
    }

    #[test]
    fn fingerprints_print_like_openssl() {
        let mut fp = [0u8; 32];
        fp[0] = 0xAB;
        fp[31] = 0x0c;
        let t = fingerprint_text(&fp);
        assert!(t.starts_with("AB:00:00:") && t.ends_with(":00:0C"), "{t}");
        assert_eq!(t.len(), 32 * 3 - 1);
    }

    #[test]
    fn serials_print_like_openssl() {
        assert_eq!(serial_hex(&[0x00, 0x9A, 0x0B]), "9A0B");
        assert_eq!(serial_hex(&[0x1A, 0x2B]), "1A2B");
        assert_eq!(serial_hex(&[0, 0]), "0");
    }
}
