//! Certificate awareness: log the certificates in use at every load, warn before they expire.
//!
//! Rules (the issue's): warn when a certificate has 30 and then 7 days left, error when it has
//! less than a day, error once it has expired and again every 24 hours, error at startup when it
//! is not valid yet. Each threshold is logged once per certificate (role + serial), so reloads
//! of the same file and the hourly check do not repeat themselves; a renewed certificate (new
//! serial) starts afresh. The CA lines cover every trusted CA.

use std::collections::HashMap;

use crate::inspect::{CertInfo, format_time};
use crate::state::LoadedCerts;

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
    last_expired_notice: Option<i64>,
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
        let ids = format!("subject={}, serial={}", c.subject, c.serial);
        if now < c.not_before {
            if !seen.not_yet_valid_noticed {
                seen.not_yet_valid_noticed = true;
                out.push((Level::Error, format!("{what} is not valid yet ({ids}, not_before={})", format_time(c.not_before))));
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
        if stage == 4 {
            let due = seen.last_expired_notice.is_none_or(|t| now - t >= DAY);
            if due {
                seen.last_expired_notice = Some(now);
                out.push((Level::Error, format!("{what} has expired ({ids}, not_after={not_after}): renew it now")));
            }
            seen.stage = 4;
            return;
        }
        if stage <= seen.stage {
            return;
        }
        seen.stage = stage;
        let (level, span) = match stage {
            3 => (Level::Error, "less than a day"),
            2 => (Level::Warn, "less than 7 days"),
            _ => (Level::Warn, "less than 30 days"),
        };
        out.push((level, format!("{what} expires in {span} ({ids}, not_after={not_after})")));
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
        assert!(w.check(&c, end - 6 * DAY)[0].1.contains("less than 7 days"));
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
