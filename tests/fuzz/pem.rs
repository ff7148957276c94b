//! The certificate loading path: PEM files as `tls-cert-file`, `tls-key-file` and
//! `tls-ca-cert-file`, mutated as text (armour, base64, labels) and, to reach the DER and
//! X.509 parsers behind intact armour, as DER re-armoured after mutation.

use std::path::{Path, PathBuf};

use hotkv_test_support::fuzz::{Budget, peak_during, run};
use hotkv_tls::{ClientAuth, TlsManager, TlsSettings};

/// A scratch directory removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("hotkv-fuzz-{name}-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        Scratch(dir)
    }

    fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Loads a configuration whose `role` file is `input` and whose other files are the good
/// seeds; true when it loaded.
fn load(dir: &Scratch, good: &Settings, role: usize, input: &[u8]) -> bool {
    let mutated = dir.write("mutated.pem", input);
    let mut s = good.0.clone();
    match role {
        0 => s.cert_file = Some(mutated),
        1 => s.key_file = Some(mutated),
        _ => s.ca_cert_file = Some(mutated),
    }
    let built = TlsManager::new().prepare_apply(s.clone());
    if let Err(e) = &built {
        assert!(!e.to_string().is_empty());
    }
    // `tls-check` walks the same files on its own path.
    let _ = hotkv_tls::check(&s, &["127.0.0.1"]);
    built.is_ok()
}

struct Settings(TlsSettings);

fn good_settings(corpus: &Path) -> Settings {
    Settings(TlsSettings {
        port: 6380,
        cert_file: Some(corpus.join("node.crt")),
        key_file: Some(corpus.join("node.key")),
        ca_cert_file: Some(corpus.join("ca.crt")),
        auth_clients: ClientAuth::Required,
        cluster: true,
        ..TlsSettings::default()
    })
}

#[test]
fn pem_loading_survives_mutated_files() {
    let corpus = crate::corpus_dir("pem");
    let good = good_settings(&corpus);
    let dir = Scratch::new("pem");
    assert!(TlsManager::new().prepare_apply(good.0.clone()).is_ok(), "the seed configuration loads");
    let mut role = 0;
    run("pem", &crate::seeds("pem"), Budget::from_env(1_500), |input, tally| {
        role = (role + 1) % 3;
        let (ok, peak) = peak_during(|| load(&dir, &good, role, input));
        tally.max_peak = tally.max_peak.max(peak);
        assert!(peak <= 64 * input.len() + (8 << 20), "{peak} bytes for {} input bytes", input.len());
        ok
    });
}

#[test]
fn der_parsing_survives_mutated_certificates_and_keys() {
    let corpus = crate::corpus_dir("pem");
    let good = good_settings(&corpus);
    let dir = Scratch::new("der");
    // Seeds: each PEM block's DER, prefixed by its label so the mutation keeps a label to
    // re-armour with (a mutated label is just another malformed file).
    let mut seeds = Vec::new();
    for file in crate::seeds("pem") {
        for (label, der) in pem_blocks(&file) {
            let mut seed = label.into_bytes();
            seed.push(0);
            seed.extend_from_slice(&der);
            seeds.push(seed);
        }
    }
    run("der", &seeds, Budget::from_env(1_500), |input, tally| {
        let Some(zero) = input.iter().position(|&b| b == 0) else { return false };
        let (label, der) = (String::from_utf8_lossy(&input[..zero]), &input[zero + 1..]);
        let pem = armour(&label, der);
        let role = match label.as_ref() {
            "CERTIFICATE" => der.len() % 2 * 2,
            _ => 1,
        };
        let (ok, peak) = peak_during(|| load(&dir, &good, role, &pem));
        tally.max_peak = tally.max_peak.max(peak);
        assert!(peak <= 64 * pem.len() + (8 << 20), "{peak} bytes for {} bytes of DER", der.len());
        ok
    });
}

/// The (label, DER) of every PEM block in `text`.
fn pem_blocks(text: &[u8]) -> Vec<(String, Vec<u8>)> {
    let text = String::from_utf8_lossy(text);
    let mut out = Vec::new();
    let mut rest = text.as_ref();
    while let Some(b) = rest.find("-----BEGIN ") {
        let after = &rest[b + 11..];
        let Some(l) = after.find("-----") else { break };
        let label = after[..l].to_string();
        let end_marker = format!("-----END {label}-----");
        let body = &after[l + 5..];
        let Some(e) = body.find(&end_marker) else { break };
        let headerless = body[..e].lines().filter(|l| !l.contains(':')).collect::<String>();
        if let Some(der) = base64_decode(&headerless) {
            out.push((label, der));
        }
        rest = &body[e + end_marker.len()..];
    }
    out
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

fn armour(label: &str, der: &[u8]) -> Vec<u8> {
    let mut b64 = String::new();
    for chunk in der.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..4 {
            b64.push(if i <= chunk.len() { B64[(n >> (18 - 6 * i) & 63) as usize] as char } else { '=' });
        }
    }
    let lines: Vec<&str> = b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).unwrap()).collect();
    format!("-----BEGIN {label}-----\n{}\n-----END {label}-----\n", lines.join("\n")).into_bytes()
}

fn base64_decode(text: &str) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let (mut acc, mut bits) = (0u32, 0);
    for c in text.bytes().filter(|c| !c.is_ascii_whitespace() && *c != b'=') {
        acc = acc << 6 | B64.iter().position(|&b| b == c)? as u32;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[test]
fn armour_round_trips() {
    for der in [&b""[..], b"a", b"ab", b"abc", b"abcd", &[0xff; 100]] {
        let pem = armour("CERTIFICATE", der);
        assert_eq!(pem_blocks(&pem), vec![("CERTIFICATE".to_string(), der.to_vec())]);
    }
}
