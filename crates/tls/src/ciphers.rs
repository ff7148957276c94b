//! `tls-protocols`, `tls-ciphers` and `tls-ciphersuites` → rustls protocol versions and a
//! `CryptoProvider` with the chosen suites.
//!
//! rustls speaks TLS 1.2 and 1.3 with AEAD suites only: six TLS 1.2 suites (ECDHE with AES-GCM
//! or ChaCha20) and three TLS 1.3 suites. Where a directive asks for something outside that
//! (TLSv1, TLSv1.1, a CBC or RSA-key-exchange suite by name, a CCM suite) the configuration
//! fails with a message saying so, rather than quietly serving something else. OpenSSL's class
//! keywords (`HIGH`, `DEFAULT`, `ECDHE`, `aRSA`…) select the suites of that class rustls has;
//! which suites each keyword covers was read off `openssl ciphers -tls1_2 <keyword>` (3.0).

use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::crypto::aws_lc_rs::{self, cipher_suite as cs};
use rustls::{SupportedCipherSuite, SupportedProtocolVersion};

use crate::error::TlsError;

/// The protocol versions, cipher suites and preference a configuration uses.
#[derive(Clone, Debug)]
pub(crate) struct CipherPolicy {
    pub(crate) versions: Vec<&'static SupportedProtocolVersion>,
    pub(crate) provider: Arc<CryptoProvider>,
}

/// Parses the three directives into a provider (aws-lc-rs, with only the chosen suites).
pub(crate) fn policy(protocols: &str, ciphers: &str, ciphersuites: &str) -> Result<CipherPolicy, TlsError> {
    let (tls12, tls13) = parse_protocols(protocols)?;
    // Both lists are checked even when their version is off, so a typo fails now and not on
    // the day someone enables that version.
    let suites12 = parse_ciphers(ciphers)?;
    let suites13 = parse_ciphersuites(ciphersuites)?;
    if tls12 && suites12.is_empty() {
        return Err(TlsError::Ciphers(format!("no cipher match for '{ciphers}'")));
    }
    if tls13 && suites13.is_empty() {
        return Err(TlsError::Ciphersuites(format!("no cipher match for '{ciphersuites}'")));
    }
    let mut versions = Vec::new();
    let mut cipher_suites = Vec::new();
    if tls13 {
        versions.push(&rustls::version::TLS13);
        cipher_suites.extend(suites13);
    }
    if tls12 {
        versions.push(&rustls::version::TLS12);
        cipher_suites.extend(suites12);
    }
    let provider = CryptoProvider { cipher_suites, ..aws_lc_rs::default_provider() };
    Ok(CipherPolicy { versions, provider: Arc::new(provider) })
}

/// `tls-protocols`: which of TLS 1.2 / 1.3 are on. Empty = both.
fn parse_protocols(value: &str) -> Result<(bool, bool), TlsError> {
    if value.trim().is_empty() {
        return Ok((true, true));
    }
    let (mut tls12, mut tls13) = (false, false);
    for token in value.split_ascii_whitespace() {
        match token.to_ascii_lowercase().as_str() {
            "tlsv1.2" => tls12 = true,
            "tlsv1.3" => tls13 = true,
            "tlsv1" | "tlsv1.1" => {
                return Err(TlsError::Protocols(format!(
                    "Invalid tls-protocols specified: {token} is not supported, only TLSv1.2 and TLSv1.3 are \
                     (TLSv1 and TLSv1.1 are obsolete and rustls does not implement them)"
                )));
            }
            _ => {
                return Err(TlsError::Protocols(
                    "Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and \
                     'TLSv1.3'."
                        .into(),
                ));
            }
        }
    }
    Ok((tls12, tls13))
}

/// One TLS 1.2 suite rustls offers, with its OpenSSL name.
struct Suite12 {
    openssl: &'static str,
    suite: SupportedCipherSuite,
}

/// The six TLS 1.2 suites, in rustls' default preference order.
fn suites12() -> [Suite12; 6] {
    [
        Suite12 { openssl: "ECDHE-ECDSA-AES256-GCM-SHA384", suite: cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384 },
        Suite12 { openssl: "ECDHE-ECDSA-AES128-GCM-SHA256", suite: cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256 },
        Suite12 { openssl: "ECDHE-ECDSA-CHACHA20-POLY1305", suite: cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256 },
        Suite12 { openssl: "ECDHE-RSA-AES256-GCM-SHA384", suite: cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384 },
        Suite12 { openssl: "ECDHE-RSA-AES128-GCM-SHA256", suite: cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256 },
        Suite12 { openssl: "ECDHE-RSA-CHACHA20-POLY1305", suite: cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256 },
    ]
}

// Bits of the six suites above, for keyword sets.
const ECDSA: u8 = 0b000_111;
const RSA: u8 = 0b111_000;
const AES256: u8 = 0b001_001;
const AES128: u8 = 0b010_010;
const CHACHA: u8 = 0b100_100;
const ALL: u8 = 0b111_111;

/// The suites an OpenSSL keyword covers among ours; `None` for a word that is not a keyword.
fn keyword(word: &str) -> Option<u8> {
    Some(match word {
        "DEFAULT" | "ALL" | "HIGH" | "ECDHE" | "EECDH" | "kECDHE" | "kEECDH" | "ECDH" | "TLSv1.2" => ALL,
        "aRSA" => RSA,
        "aECDSA" | "ECDSA" => ECDSA,
        "AESGCM" | "AES" | "FIPS" => AES128 | AES256,
        "AES128" => AES128,
        "AES256" => AES256,
        "CHACHA20" => CHACHA,
        // Classes rustls has no member of: fine to exclude, empty when asked for.
        "MEDIUM"
        | "LOW"
        | "EXP"
        | "EXPORT"
        | "COMPLEMENTOFDEFAULT"
        | "COMPLEMENTOFALL"
        | "RSA"
        | "kRSA"
        | "SHA"
        | "SHA1"
        | "SHA256"
        | "SHA384"
        | "MD5"
        | "aNULL"
        | "eNULL"
        | "NULL"
        | "ADH"
        | "AECDH"
        | "RC4"
        | "DES"
        | "3DES"
        | "IDEA"
        | "SEED"
        | "CAMELLIA"
        | "ARIA"
        | "CCM"
        | "CCM8"
        | "CBC"
        | "DHE"
        | "EDH"
        | "kDHE"
        | "kEDH"
        | "DH"
        | "PSK"
        | "kPSK"
        | "aPSK"
        | "ECDHEPSK"
        | "DHEPSK"
        | "RSAPSK"
        | "SRP"
        | "kSRP"
        | "DSS"
        | "aDSS"
        | "GOST"
        | "AEAD"
        | "SSLv3"
        | "TLSv1"
        | "TLSv1.0" => 0,
        _ => return None,
    })
}

/// `tls-ciphers` in OpenSSL's cipher-list syntax: items separated by `:`, `,` or spaces;
/// `A+B` is the suites in both A and B; a leading `!` removes for good, `-` removes, `+` moves to
/// the end; `@STRENGTH` / `@SECLEVEL=n` are accepted and ignored (rustls' suites are all strong).
/// Empty = every suite. A suite named outright that rustls lacks is an error.
fn parse_ciphers(value: &str) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    let table = suites12();
    if value.trim().is_empty() {
        return Ok(table.iter().map(|s| s.suite).collect());
    }
    let mut order: Vec<usize> = Vec::new();
    let mut banned = 0u8;
    for item in value.split([':', ',', ' ']).filter(|s| !s.is_empty()) {
        if item.starts_with('@') {
            continue;
        }
        let (op, body) = match item.as_bytes()[0] {
            b'!' | b'-' | b'+' => (item.as_bytes()[0], &item[1..]),
            _ => (b' ', item),
        };
        let Some(set) = select(&table, body) else {
            if op == b'!' || op == b'-' {
                continue; // removing something we never had
            }
            return Err(TlsError::Ciphers(unsupported_cipher(body)));
        };
        let members = (0..table.len()).filter(|i| set & (1 << i) != 0);
        match op {
            b'!' => {
                banned |= set;
                order.retain(|i| set & (1 << i) == 0);
            }
            b'-' => order.retain(|i| set & (1 << i) == 0),
            b'+' => {
                let (moved, kept): (Vec<usize>, Vec<usize>) = order.iter().partition(|i| set & (1 << *i) != 0);
                order = kept.into_iter().chain(moved).collect();
            }
            _ => {
                for i in members {
                    if banned & (1 << i) == 0 && !order.contains(&i) {
                        order.push(i);
                    }
                }
            }
        }
    }
    Ok(order.into_iter().map(|i| table[i].suite).collect())
}

/// The set an item body (`ECDHE-RSA-AES128-GCM-SHA256`, `HIGH`, `kEECDH+aRSA`) selects.
fn select(table: &[Suite12; 6], body: &str) -> Option<u8> {
    let mut set = ALL;
    for part in body.split('+') {
        let bits = match table.iter().position(|s| s.openssl == part) {
            Some(i) => 1 << i,
            None => keyword(part)?,
        };
        set &= bits;
    }
    Some(set)
}

fn unsupported_cipher(name: &str) -> String {
    let offered: Vec<&str> = suites12().iter().map(|s| s.openssl).collect();
    if name.starts_with("TLS_") {
        return format!("{name} is a TLS 1.3 suite: set it with tls-ciphersuites");
    }
    let what = if name.contains('-') { "is not supported by rustls" } else { "is not a cipher or class name" };
    format!("'{name}' {what}; TLS 1.2 suites available: {}", offered.join(":"))
}

/// `tls-ciphersuites`: TLS 1.3 names separated by `:`. Empty = all three.
fn parse_ciphersuites(value: &str) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    let all = [
        ("TLS_AES_256_GCM_SHA384", cs::TLS13_AES_256_GCM_SHA384),
        ("TLS_AES_128_GCM_SHA256", cs::TLS13_AES_128_GCM_SHA256),
        ("TLS_CHACHA20_POLY1305_SHA256", cs::TLS13_CHACHA20_POLY1305_SHA256),
    ];
    if value.trim().is_empty() {
        return Ok(all.iter().map(|(_, s)| *s).collect());
    }
    let mut out = Vec::new();
    for name in value.split(':').map(str::trim).filter(|s| !s.is_empty()) {
        match all.iter().find(|(n, _)| *n == name) {
            Some((_, s)) if !out.contains(s) => out.push(*s),
            Some(_) => {}
            None => {
                let names: Vec<&str> = all.iter().map(|(n, _)| *n).collect();
                return Err(TlsError::Ciphersuites(format!(
                    "'{name}' is not supported by rustls; TLS 1.3 suites available: {}",
                    names.join(":")
                )));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(v: &[SupportedCipherSuite]) -> Vec<String> {
        v.iter().map(|s| format!("{:?}", s.suite())).collect()
    }

    #[test]
    fn protocols() {
        assert_eq!(parse_protocols("").unwrap(), (true, true));
        assert_eq!(parse_protocols("TLSv1.2 tlsv1.3").unwrap(), (true, true));
        assert_eq!(parse_protocols("TLSv1.3").unwrap(), (false, true));
        let e = parse_protocols("TLSv1.1 TLSv1.2").unwrap_err().to_string();
        assert!(e.contains("TLSv1.1 is not supported"), "{e}");
        let e = parse_protocols("SSLv3").unwrap_err().to_string();
        assert!(e.starts_with("Invalid tls-protocols specified. Use a combination of"), "{e}");
    }

    #[test]
    fn cipher_lists_select_by_class_and_name() {
        assert_eq!(parse_ciphers("").unwrap().len(), 6);
        assert_eq!(parse_ciphers("DEFAULT:!MEDIUM").unwrap().len(), 6);
        assert_eq!(parse_ciphers("HIGH:!aNULL:!MD5:!RC4").unwrap().len(), 6);
        assert_eq!(
            names(&parse_ciphers("ECDHE-RSA-AES128-GCM-SHA256").unwrap()),
            ["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"]
        );
        assert_eq!(names(&parse_ciphers("kEECDH+aRSA+AES256").unwrap()), ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]);
        assert_eq!(parse_ciphers("ALL:!CHACHA20").unwrap().len(), 4);
        // `-` removes but allows a later re-add, `!` does not.
        assert_eq!(parse_ciphers("ALL:-aRSA:aRSA").unwrap().len(), 6);
        assert_eq!(parse_ciphers("ALL:!aRSA:aRSA").unwrap().len(), 3);
        // `+` moves to the end: server preference order follows.
        let v = names(&parse_ciphers("ALL:+AES256").unwrap());
        assert!(v[4].contains("AES_256") && v[5].contains("AES_256"), "{v:?}");
        assert_eq!(parse_ciphers("MEDIUM").unwrap().len(), 0);
        assert_eq!(parse_ciphers("HIGH:@STRENGTH").unwrap().len(), 6);
    }

    #[test]
    fn unsupported_names_fail_clearly() {
        let e = parse_ciphers("AES128-SHA256").unwrap_err().to_string();
        assert!(e.starts_with("Failed to configure ciphers: 'AES128-SHA256' is not supported by rustls"), "{e}");
        let e = parse_ciphers("NOTHING").unwrap_err().to_string();
        assert!(e.contains("not a cipher or class name"), "{e}");
        let e = parse_ciphers("TLS_AES_128_GCM_SHA256").unwrap_err().to_string();
        assert!(e.contains("tls-ciphersuites"), "{e}");
        assert!(parse_ciphers("HIGH:!AES128-SHA256:-DHE-RSA-AES256-SHA").is_ok(), "removing what we lack is fine");
        let e = parse_ciphersuites("TLS_AES_128_CCM_SHA256").unwrap_err().to_string();
        assert!(e.starts_with("Failed to configure ciphersuites: 'TLS_AES_128_CCM_SHA256' is not supported"), "{e}");
        assert_eq!(parse_ciphersuites("TLS_CHACHA20_POLY1305_SHA256:TLS_AES_256_GCM_SHA384").unwrap().len(), 2);
    }

    #[test]
    fn policy_needs_a_suite_for_each_enabled_version() {
        let e = policy("", "MEDIUM", "").unwrap_err().to_string();
        assert_eq!(e, "Failed to configure ciphers: no cipher match for 'MEDIUM'");
        // TLS 1.2 off: an empty TLS 1.2 selection does not matter.
        let p = policy("TLSv1.3", "MEDIUM", "").unwrap();
        assert_eq!(p.versions.len(), 1);
        assert_eq!(p.provider.cipher_suites.len(), 3);
        let p = policy("TLSv1.2", "ECDHE-RSA-AES256-GCM-SHA384", "TLS_AES_128_GCM_SHA256").unwrap();
        assert_eq!(p.provider.cipher_suites.len(), 1);
    }
}
