//! The server's side of TLS: turns the tls-* directives into the TLS crate's settings, loads
//! them at startup, applies CONFIG SET, and runs `hotkv --check-tls`.
//!
//! Everything about certificates, handshakes and reloads lives in `hotkv-tls`; this module only
//! knows where the values come from and what the server logs and answers.

use std::sync::Arc;

use hotkv_tls::{ClientAuth, TlsError, TlsManager, TlsSettings};

use crate::config::Settings;
use crate::config::table as t;

/// The TLS crate's view of the tls-* directives.
pub fn settings_of(s: &Settings) -> TlsSettings {
    let path = |id| TlsSettings::path(s.str(id));
    let text = |id| {
        let v = s.str(id);
        (!v.is_empty()).then(|| v.to_string())
    };
    TlsSettings {
        port: s.int(t::TLS_PORT) as u16,
        cert_file: path(t::TLS_CERT_FILE),
        key_file: path(t::TLS_KEY_FILE),
        key_file_pass: text(t::TLS_KEY_FILE_PASS),
        client_cert_file: path(t::TLS_CLIENT_CERT_FILE),
        client_key_file: path(t::TLS_CLIENT_KEY_FILE),
        client_key_file_pass: text(t::TLS_CLIENT_KEY_FILE_PASS),
        ca_cert_file: path(t::TLS_CA_CERT_FILE),
        ca_cert_dir: path(t::TLS_CA_CERT_DIR),
        auth_clients: client_auth(s),
        // The table only admits the three spellings the crate parses.
        auth_clients_user: s.str(t::TLS_AUTH_CLIENTS_USER).parse().unwrap_or_default(),
        protocols: s.str(t::TLS_PROTOCOLS).to_string(),
        ciphers: s.str(t::TLS_CIPHERS).to_string(),
        ciphersuites: s.str(t::TLS_CIPHERSUITES).to_string(),
        prefer_server_ciphers: s.bool(t::TLS_PREFER_SERVER_CIPHERS),
        session_caching: s.bool(t::TLS_SESSION_CACHING),
        session_cache_size: s.int(t::TLS_SESSION_CACHE_SIZE).clamp(0, u32::MAX as i64) as u32,
        session_cache_timeout: s.int(t::TLS_SESSION_CACHE_TIMEOUT).clamp(0, u32::MAX as i64) as u32,
        dh_params_file: path(t::TLS_DH_PARAMS_FILE),
        replication: s.bool(t::TLS_REPLICATION),
        cluster: s.bool(t::TLS_CLUSTER),
        auto_reload_interval: s.int(t::TLS_AUTO_RELOAD_INTERVAL).max(0) as u64,
        expected_peer_names: s.str(t::TLS_EXPECTED_PEER_NAME).to_string(),
    }
}

/// `tls-auth-clients`, read at every accept.
pub fn client_auth(s: &Settings) -> ClientAuth {
    s.str(t::TLS_AUTH_CLIENTS).parse().unwrap_or_default()
}

/// The startup load (blocking: reads and parses the files). On failure the TLS crate has
/// logged `Failed to initialize SSL context: <reason> [file]` and the server must exit.
pub fn init(tls: &TlsManager, s: &Settings) -> Result<(), TlsError> {
    let settings = settings_of(s);
    if settings.port != 0 && s.int(t::PORT) == 0 {
        tracing::info!("Plain-text port disabled (port 0), serving TLS only");
    }
    tls.init(settings)
}

/// CONFIG SET of a file, protocol, cipher or session directive: rebuild from the files, even
/// when the paths are the same (that is how an operator reloads a renewed certificate). Runs
/// on a runtime worker that CONFIG SET already holds, so the build blocks in place rather than
/// stalling the other connections of this worker.
pub fn apply(tls: &Arc<TlsManager>, new: &Settings) -> Result<(), TlsError> {
    let settings = settings_of(new);
    tokio::task::block_in_place(|| tls.apply(settings))
}

/// CONFIG SET of the settings that need no rebuild.
pub fn apply_live(tls: &TlsManager, new: &Settings) -> Result<(), TlsError> {
    tls.set_expected_peer_names(new.str(t::TLS_EXPECTED_PEER_NAME))?;
    tls.set_auto_reload_interval(new.int(t::TLS_AUTO_RELOAD_INTERVAL).max(0) as u64);
    Ok(())
}

/// The bind addresses as the TLS log line shows them: `10.0.0.1 127.0.0.1`, without the `-`
/// that marks an optional address.
pub fn binds_text(bind: &[String]) -> String {
    bind.iter().map(|b| b.strip_prefix('-').unwrap_or(b)).collect::<Vec<_>>().join(" ")
}

/// `hotkv --check-tls <config>`: prints one line per problem with the TLS files the
/// configuration names and returns the exit code (1 if anything is wrong).
pub fn check_main(s: &Settings, config: &str) -> i32 {
    let settings = settings_of(s);
    if !settings.in_use() {
        println!("{config}: TLS is not in use (tls-port 0, tls-cluster no, tls-replication no): nothing to check");
        return 0;
    }
    let binds: Vec<&str> = s.list(t::BIND).iter().map(String::as_str).collect();
    let problems = hotkv_tls::check(&settings, &binds);
    for p in &problems {
        println!("{p}");
    }
    if problems.is_empty() {
        let cert = settings.cert_file.as_deref().map_or(String::new(), |p| p.display().to_string());
        println!("{config}: TLS files OK (certificate {cert})");
        0
    } else {
        println!("{config}: {} TLS problem{} found", problems.len(), if problems.len() == 1 { "" } else { "s" });
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::runtime;

    #[test]
    fn directives_map_to_the_tls_settings() {
        let d = Settings::defaults();
        let tls = settings_of(&d);
        assert_eq!(tls, TlsSettings::default(), "the table's defaults are upstream's");
        let pairs: &[(&[u8], &[u8])] = &[
            (b"tls-port", b"7000"),
            (b"tls-cert-file", b"/etc/n.crt"),
            (b"tls-key-file-pass", b"secret"),
            (b"tls-auth-clients", b"optional"),
            (b"tls-auth-clients-user", b"CN"),
            (b"tls-session-cache-size", b"5"),
            (b"tls-auto-reload-interval", b"9"),
            (b"tls-expected-peer-name", b"a.example b.example"),
        ];
        let (s, _) = runtime::set(&d, pairs).unwrap();
        let tls = settings_of(&s);
        assert_eq!(tls.port, 7000);
        assert_eq!(tls.cert_file.as_deref(), Some(std::path::Path::new("/etc/n.crt")));
        assert_eq!(tls.key_file, None);
        assert_eq!(tls.key_file_pass.as_deref(), Some("secret"));
        assert_eq!(tls.auth_clients, ClientAuth::Optional);
        assert_eq!(tls.auth_clients_user, hotkv_tls::CertUser::CommonName);
        assert_eq!(tls.session_cache_size, 5);
        assert_eq!(tls.auto_reload_interval, 9);
        assert_eq!(tls.expected_peer_names, "a.example b.example");
    }

    #[test]
    fn bind_text_drops_the_optional_marker() {
        assert_eq!(binds_text(&["10.0.0.1".into(), "-::1".into()]), "10.0.0.1 ::1");
    }
}
