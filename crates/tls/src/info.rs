//! Certificate awareness: counters and the data behind `INFO tls` (the server prints
//! [`TlsInfo::fields`]; the names are defined once, here), and the expiry watch.
//!
//! Expiry rules (the issue's): warn when a certificate has 30 days left; from 7 days left,
//! warn once a day until it expires (an error once less than a day is left); error once it has
//! expired and again every 24 hours; error at startup when it is not valid yet. Each line names
//! the file to renew, the serial and the expiry. The 30-day notice is given once per
//! certificate (role + issuer + serial), so reloads of the same file and the hourly check do
//! not repeat it; a renewed certificate (new serial) starts afresh. The CA lines cover every
//! trusted CA.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::inspect::{CertInfo, format_time};
use crate::state::LoadedCerts;

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
        CertSummary {
            serial: c.serial.clone(),
            subject: c.subject.clone(),
            not_after: c.not_after,
            expires_in: c.expires_in(now),
        }
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

const DAY: i64 = 86_400;

/// How loud a notice is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Level {
    Warn,
    Error,
}

/// Remembers which notices were given for which certificate.
#[derive(Debug, Default)]
pub(crate) struct ExpiryWatch {
    seen: HashMap<(&'static str, String), Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// 0 none, 1 = 30 days, 2 = 7 days, 3 = 1 day, 4 = expired.
    stage: u8,
    /// When the last notice of the 7-day, 1-day or expired stages was given: those repeat
    /// daily, so a certificate nobody renewed keeps showing up in the log.
    last_daily_notice: Option<i64>,
    not_yet_valid_noticed: bool,
}

impl ExpiryWatch {
    /// The notices due now for every certificate in `certs`, and logs them.
    pub(crate) fn check(&mut self, certs: &LoadedCerts, now: i64) -> Vec<(Level, String)> {
        let mut out = Vec::new();
        self.observe("server", &certs.server, now, &mut out);
        if let Some(c) = &certs.client {
            self.observe("client", c, now, &mut out);
        }
        for ca in &certs.cas {
            self.observe("CA", ca, now, &mut out);
        }
        for (level, msg) in &out {
            match level {
                Level::Warn => tracing::warn!("{msg}"),
                Level::Error => tracing::error!("{msg}"),
            }
        }
        out
    }

    fn observe(&mut self, role: &'static str, c: &CertInfo, now: i64, out: &mut Vec<(Level, String)>) {
        let seen = self.seen.entry((role, format!("{}/{}", c.issuer, c.serial))).or_default();
        let what = format!("TLS {role} certificate");
        let file = c.file.as_ref().map_or_else(String::new, |f| format!("file={}, ", f.display()));
        let ids = format!("{file}subject={}, serial={}", c.subject, c.serial);
        if now < c.not_before {
            if !seen.not_yet_valid_noticed {
                seen.not_yet_valid_noticed = true;
                out.push((
                    Level::Error,
                    format!("{what} is not valid yet ({ids}, not_before={})", format_time(c.not_before)),
                ));
            }
            return;
        }
        let left = c.not_after - now;
        let stage = match left {
            l if l < 0 => 4,
            l if l < DAY => 3,
            l if l < 7 * DAY => 2,
            l if l < 30 * DAY => 1,
            _ => 0,
        };
        let not_after = format_time(c.not_after);
        let daily_due = seen.last_daily_notice.is_none_or(|t| now - t >= DAY);
        // The 30-day notice once; from 7 days on, a notice at every new stage and once a day.
        if stage < seen.stage || (stage == seen.stage && (stage < 2 || !daily_due)) {
            return;
        }
        seen.stage = stage;
        if stage >= 2 {
            seen.last_daily_notice = Some(now);
        }
        let msg = match stage {
            4 => (Level::Error, format!("{what} has expired ({ids}, not_after={not_after}): renew it now")),
            3 => (Level::Error, format!("{what} expires in less than a day ({ids}, not_after={not_after})")),
            2 => (Level::Warn, format!("{what} expires in less than 7 days ({ids}, not_after={not_after})")),
            1 => (Level::Warn, format!("{what} expires in less than 30 days ({ids}, not_after={not_after})")),
            _ => return,
        };
        out.push(msg);
    }
}

/// The info line for each certificate in use, logged at every load.
pub(crate) fn log_in_use(certs: &LoadedCerts) {
    let ca = certs.issuer.as_ref().map_or_else(|| "unknown".to_owned(), |c| format_time(c.not_after));
    tracing::info!("TLS certificate in use: {}, ca_not_after={ca}", certs.server);
    if let Some(c) = &certs.client {
        tracing::info!("TLS client certificate in use: {c}");
    }
    let earliest = certs.earliest_ca().map_or_else(|| "none".to_owned(), |c| format!("{c}"));
    tracing::info!("TLS CA certificates trusted: {}, earliest to expire: {earliest}", certs.cas.len());
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
        assert_eq!(
            &f[..6].iter().map(|(n, _)| *n).collect::<Vec<_>>(),
            &[
                "tls_server_cert_serial",
                "tls_server_cert_expires_in_seconds",
                "tls_client_cert_serial",
                "tls_client_cert_expires_in_seconds",
                "tls_ca_cert_serial",
                "tls_ca_cert_expires_in_seconds"
            ]
        );
    }

    #[test]
    fn failed_reload_shows_its_reason_on_one_line() {
        let info =
            TlsInfo { last_reload: Some(ReloadRecord { at: 5, result: Err("a\nb".into()) }), ..TlsInfo::default() };
        let f = info.fields();
        assert!(f.contains(&("tls_last_reload_status", "failed".into())));
        assert!(f.contains(&("tls_last_reload_error", "a b".into())));
        assert!(f.contains(&("tls_last_reload_time", "5".into())));
    }

    fn cert(serial: &str, not_before: i64, not_after: i64) -> CertInfo {
        CertInfo {
            subject: "CN=n".into(),
            issuer: "CN=ca".into(),
            serial: serial.into(),
            not_before,
            not_after,
            version: 3,
            common_names: vec!["n".into()],
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            uris: Vec::new(),
            eku: None,
            is_ca: false,
            has_ns_cert_type: false,
            fingerprint: [0; 32],
            file: None,
        }
    }

    fn loaded(server: CertInfo) -> LoadedCerts {
        LoadedCerts { server, client: None, cas: Vec::new(), dropped_cas: Vec::new(), issuer: None }
    }

    #[test]
    fn thresholds_fire_once_each_and_expiry_repeats_daily() {
        let mut w = ExpiryWatch::default();
        let end = 100 * DAY;
        let c = loaded(cert("01", 0, end));
        assert!(w.check(&c, end - 40 * DAY).is_empty());
        let n = w.check(&c, end - 29 * DAY);
        assert_eq!(n.len(), 1);
        assert_eq!(n[0].0, Level::Warn);
        assert!(n[0].1.starts_with("TLS server certificate expires in less than 30 days"), "{}", n[0].1);
        assert!(w.check(&c, end - 20 * DAY).is_empty(), "once per threshold");
        let n = w.check(&c, end - 6 * DAY);
        assert_eq!(n[0].0, Level::Warn);
        assert!(n[0].1.contains("less than 7 days"));
        assert!(w.check(&c, end - 6 * DAY + 3600).is_empty(), "the hourly check does not repeat it");
        let n = w.check(&c, end - 5 * DAY);
        assert_eq!(n.len(), 1, "within 7 days, once a day");
        assert!(n[0].1.contains("less than 7 days"));
        let n = w.check(&c, end - 3600);
        assert_eq!(n[0].0, Level::Error);
        assert!(n[0].1.contains("less than a day"));
        let n = w.check(&c, end + 1);
        assert!(n[0].1.starts_with("TLS server certificate has expired"));
        assert!(w.check(&c, end + 3600).is_empty());
        assert_eq!(w.check(&c, end + 1 + DAY).len(), 1, "again after 24 hours");
    }

    #[test]
    fn a_renewed_certificate_starts_afresh_and_late_starts_skip_stages() {
        let mut w = ExpiryWatch::default();
        let c = loaded(cert("01", 0, 10 * DAY));
        let n = w.check(&c, 5 * DAY);
        assert_eq!(n.len(), 1, "only the tightest threshold: {n:?}");
        assert!(n[0].1.contains("7 days"));
        let renewed = loaded(cert("02", 0, 20 * DAY));
        assert!(w.check(&renewed, 5 * DAY)[0].1.contains("30 days"));
    }

    #[test]
    fn a_notice_names_the_file_serial_and_expiry() {
        let mut w = ExpiryWatch::default();
        let mut c = cert("1A2B", 0, 10 * DAY);
        c.file = Some("/etc/hotkv/tls/node.crt".into());
        let n = w.check(&loaded(c), 5 * DAY);
        assert_eq!(
            n[0].1,
            "TLS server certificate expires in less than 7 days (file=/etc/hotkv/tls/node.crt, subject=CN=n, \
             serial=1A2B, not_after=1970-01-11T00:00:00Z)"
        );
    }

    #[test]
    fn not_yet_valid_is_an_error_once() {
        let mut w = ExpiryWatch::default();
        let c = loaded(cert("01", 1000, 10 * DAY));
        let n = w.check(&c, 10);
        assert_eq!(n[0].0, Level::Error);
        assert!(n[0].1.starts_with("TLS server certificate is not valid yet"));
        assert!(w.check(&c, 20).is_empty());
    }

    #[test]
    fn cas_are_watched_too() {
        let mut w = ExpiryWatch::default();
        let mut c = loaded(cert("01", 0, 1000 * DAY));
        c.cas.push(cert("AA", 0, 10 * DAY));
        let n = w.check(&c, 5 * DAY);
        assert!(n[0].1.starts_with("TLS CA certificate expires in less than 7 days"), "{n:?}");
    }
}
