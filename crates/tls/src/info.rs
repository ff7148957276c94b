//! Counters and the data behind `INFO tls`. The server prints [`TlsInfo::fields`]; the names
//! are defined once, here.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::inspect::CertInfo;

/// TLS counters, shared by every state and session so that sessions started under an older
/// state still count.
#[derive(Debug, Default)]
pub struct TlsCounters {
    /// Inbound handshakes (client port and bus) that failed.
    pub handshake_failures: AtomicU64,
    /// Outbound handshakes (bus dial-out, replication, MIGRATE) that failed.
    pub outbound_handshake_failures: AtomicU64,
    /// Inbound TLS connections whose handshake completed, since start.
    pub connections_total: AtomicU64,
    /// Inbound TLS connections open now (handshake completed, not yet dropped).
    pub connections_current: AtomicU64,
    /// Successful reloads (CONFIG SET and automatic), the startup load not included.
    pub reloads: AtomicU64,
    /// Failed reloads.
    pub reload_failures: AtomicU64,
}

impl TlsCounters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// One certificate as INFO shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CertSummary {
    /// Uppercase hex serial.
    pub serial: String,
    /// Subject name.
    pub subject: String,
    /// notAfter, Unix seconds.
    pub not_after: i64,
    /// notAfter − now; negative once expired.
    pub expires_in: i64,
}

impl CertSummary {
    pub(crate) fn of(c: &CertInfo, now: i64) -> CertSummary {
        CertSummary { serial: c.serial.clone(), subject: c.subject.clone(), not_after: c.not_after, expires_in: c.expires_in(now) }
    }
}

/// The outcome of the last reload (CONFIG SET or automatic).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReloadRecord {
    /// When, Unix seconds.
    pub at: i64,
    /// `Ok` or the error text.
    pub result: Result<(), String>,
}

/// A snapshot of everything `INFO tls` reports.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TlsInfo {
    /// Whether TLS material is loaded.
    pub enabled: bool,
    /// The server certificate.
    pub server_cert: Option<CertSummary>,
    /// The separate client certificate, if configured.
    pub client_cert: Option<CertSummary>,
    /// The earliest-expiring trusted CA (upstream's choice).
    pub ca_cert: Option<CertSummary>,
    /// Whether the files on disk still hash to what is loaded; `None` until first checked.
    pub files_match_loaded: Option<bool>,
    /// The last reload, if any.
    pub last_reload: Option<ReloadRecord>,
    /// Successful reloads.
    pub reloads: u64,
    /// Failed reloads.
    pub reload_failures: u64,
    /// Failed inbound handshakes.
    pub handshake_failures: u64,
    /// Failed outbound handshakes.
    pub outbound_handshake_failures: u64,
    /// Open inbound TLS connections.
    pub connections_current: u64,
    /// Inbound TLS connections since start.
    pub connections_total: u64,
    /// Generation of the state in force (0 = none).
    pub generation: u64,
}

impl TlsInfo {
    /// `INFO tls` lines as (name, value): first the six upstream fields (Valkey 9.1, exact names
    /// and formats: `none`/`0` when absent), then hotkv's own, prefixed so they cannot clash
    /// with future upstream names.
    pub fn fields(&self) -> Vec<(&'static str, String)> {
        let serial = |c: &Option<CertSummary>| c.as_ref().map_or("none".to_owned(), |c| c.serial.clone());
        let expires = |c: &Option<CertSummary>| c.as_ref().map_or("0".to_owned(), |c| c.expires_in.to_string());
        let not_after = |c: &Option<CertSummary>| c.as_ref().map_or("0".to_owned(), |c| c.not_after.to_string());
        let mut f = vec![
            ("tls_server_cert_serial", serial(&self.server_cert)),
            ("tls_server_cert_expires_in_seconds", expires(&self.server_cert)),
            ("tls_client_cert_serial", serial(&self.client_cert)),
            ("tls_client_cert_expires_in_seconds", expires(&self.client_cert)),
            ("tls_ca_cert_serial", serial(&self.ca_cert)),
            ("tls_ca_cert_expires_in_seconds", expires(&self.ca_cert)),
            ("tls_server_cert_subject", self.server_cert.as_ref().map_or(String::new(), |c| c.subject.clone())),
            ("tls_server_cert_not_after", not_after(&self.server_cert)),
            ("tls_ca_cert_not_after", not_after(&self.ca_cert)),
            (
                "tls_files_match_loaded",
                match self.files_match_loaded {
                    Some(true) => "yes",
                    Some(false) => "no",
                    None => "unknown",
                }
                .to_owned(),
            ),
            ("tls_last_reload_time", self.last_reload.as_ref().map_or(0, |r| r.at).to_string()),
            (
                "tls_last_reload_status",
                match &self.last_reload {
                    None => "none",
                    Some(ReloadRecord { result: Ok(()), .. }) => "ok",
                    Some(_) => "failed",
                }
                .to_owned(),
            ),
        ];
        if let Some(ReloadRecord { result: Err(e), .. }) = &self.last_reload {
            // INFO values are single-line.
            f.push(("tls_last_reload_error", e.replace(['\r', '\n'], " ")));
        }
        f.extend([
            ("tls_reloads", self.reloads.to_string()),
            ("tls_reload_failures", self.reload_failures.to_string()),
            ("tls_handshake_failures", self.handshake_failures.to_string()),
            ("tls_outbound_handshake_failures", self.outbound_handshake_failures.to_string()),
            ("tls_connections_current", self.connections_current.to_string()),
            ("tls_connections_total", self.connections_total.to_string()),
            ("tls_generation", self.generation.to_string()),
        ]);
        f
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn absent_tls_prints_upstream_placeholders() {
        let f = TlsInfo::default().fields();
        let get = |k: &str| f.iter().find(|(n, _)| *n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("tls_server_cert_serial"), Some("none"));
        assert_eq!(get("tls_server_cert_expires_in_seconds"), Some("0"));
        assert_eq!(get("tls_ca_cert_serial"), Some("none"));
        assert_eq!(get("tls_files_match_loaded"), Some("unknown"));
        assert_eq!(get("tls_last_reload_status"), Some("none"));
        assert_eq!(get("tls_last_reload_error"), None);
        assert_eq!(&f[..6].iter().map(|(n, _)| *n).collect::<Vec<_>>(), &[
            "tls_server_cert_serial",
            "tls_server_cert_expires_in_seconds",
            "tls_client_cert_serial",
            "tls_client_cert_expires_in_seconds",
            "tls_ca_cert_serial",
            "tls_ca_cert_expires_in_seconds"
        ]);
    }

    #[test]
    fn failed_reload_shows_its_reason_on_one_line() {
        let info = TlsInfo {
            last_reload: Some(ReloadRecord { at: 5, result: Err("a\nb".into()) }),
            ..TlsInfo::default()
        };
        let f = info.fields();
        assert!(f.contains(&("tls_last_reload_status", "failed".into())));
        assert!(f.contains(&("tls_last_reload_error", "a b".into())));
        assert!(f.contains(&("tls_last_reload_time", "5".into())));
    }
}
