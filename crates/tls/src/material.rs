//! Reading the configured files once, fingerprinting them, and parsing their PEM.
//!
//! Every file is read into memory exactly once per build and everything is built from those
//! bytes: a renewal job that replaces the certificate and the key one after the other can then
//! never give us a certificate from one moment and a key from another that we did not notice
//! (the fingerprint covers what was actually parsed). The fingerprint is the SHA-256 of the
//! whole content of every file, so adding a CA to a bundle, changing an intermediate, or editing
//! a file inside the CA directory is a change; touching a file is not.

use std::fs;
use std::path::{Path, PathBuf};

use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use sha2::{Digest, Sha256};

use crate::error::{FileProblem, FileRole, TlsError};
use crate::settings::TlsSettings;

/// One file's path and bytes.
#[derive(Clone, Debug)]
pub(crate) struct FileBytes {
    pub(crate) path: PathBuf,
    pub(crate) bytes: Vec<u8>,
}

/// SHA-256 of the content of every file a configuration uses, in a fixed order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Fingerprint(Vec<(PathBuf, [u8; 32])>);

impl Fingerprint {
    /// Each file and the SHA-256 of its content.
    pub fn entries(&self) -> &[(PathBuf, [u8; 32])] {
        &self.0
    }

    /// One SHA-256 over every entry.
    pub fn digest(&self) -> [u8; 32] {
        let mut h = Sha256::new();
        for (p, d) in &self.0 {
            h.update(p.as_os_str().as_encoded_bytes());
            h.update([0]);
            h.update(d);
        }
        h.finalize().into()
    }
}

/// Everything a configuration names, read once.
#[derive(Clone, Debug)]
pub(crate) struct Material {
    pub(crate) cert: FileBytes,
    pub(crate) key: FileBytes,
    /// The separate outbound pair, when both files are set.
    pub(crate) client: Option<(FileBytes, FileBytes)>,
    pub(crate) ca_file: Option<FileBytes>,
    /// Regular files of the CA directory, sorted by name.
    pub(crate) ca_dir: Vec<FileBytes>,
    pub(crate) dh: Option<FileBytes>,
    pub(crate) fingerprint: Fingerprint,
}

impl Material {
    /// Reads every configured file. The caller has checked the required directives.
    pub(crate) fn read(s: &TlsSettings) -> Result<Material, TlsError> {
        let (Some(cert), Some(key)) = (&s.cert_file, &s.key_file) else {
            return Err(if s.cert_file.is_none() { TlsError::NoCertFile } else { TlsError::NoKeyFile });
        };
        let cert = read_file(FileRole::Cert, cert)?;
        let key = read_file(FileRole::Key, key)?;
        let client = match (&s.client_cert_file, &s.client_key_file) {
            (Some(c), Some(k)) => Some((read_file(FileRole::ClientCert, c)?, read_file(FileRole::ClientKey, k)?)),
            _ => None,
        };
        let ca_file = s.ca_cert_file.as_deref().map(|p| read_file(FileRole::CaFile, p)).transpose()?;
        let ca_dir = match &s.ca_cert_dir {
            Some(d) => read_dir(d)?,
            None => Vec::new(),
        };
        let dh = s.dh_params_file.as_deref().map(|p| read_file(FileRole::DhParams, p)).transpose()?;

        // Paths are part of the fingerprint: renaming a file in the CA directory is a change too.
        let client_files = client.iter().flat_map(|(c, k)| [c, k]);
        let files =
            [&cert, &key].into_iter().chain(client_files).chain(ca_file.iter()).chain(ca_dir.iter()).chain(dh.iter());
        let fp = files.map(|f| (f.path.clone(), sha256(&f.bytes))).collect();
        Ok(Material { cert, key, client, ca_file, ca_dir, dh, fingerprint: Fingerprint(fp) })
    }
}

/// Reads a whole file, mapping failures to the system's words.
pub(crate) fn read_file(role: FileRole, path: &Path) -> Result<FileBytes, TlsError> {
    match fs::read(path) {
        Ok(bytes) => Ok(FileBytes { path: path.to_path_buf(), bytes }),
        Err(e) => Err(TlsError::file(role, path, FileProblem::from_io(&e))),
    }
}

/// Reads every regular file of a CA directory (following symlinks, as `c_rehash` directories
/// are made of them), skipping dotfiles. Unlike OpenSSL's hashed lookup this needs no
/// `c_rehash`: any file name works (Valkey 9.1 does the same).
pub(crate) fn read_dir(dir: &Path) -> Result<Vec<FileBytes>, TlsError> {
    let io_err = |p: &Path, e: std::io::Error| TlsError::file(FileRole::CaDir, p, FileProblem::from_io(&e));
    let mut paths = Vec::new();
    for entry in fs::read_dir(dir).map_err(|e| io_err(dir, e))? {
        let entry = entry.map_err(|e| io_err(dir, e))?;
        if entry.file_name().as_encoded_bytes().starts_with(b".") {
            continue;
        }
        let path = entry.path();
        // metadata() follows symlinks; a dangling link is skipped like any non-file.
        if fs::metadata(&path).is_ok_and(|m| m.is_file()) {
            paths.push(path);
        }
    }
    paths.sort();
    paths.iter().map(|p| read_file(FileRole::CaDir, p)).collect()
}

/// Parses a PEM certificate chain, leaf first. Each certificate must be DER that x509-parser
/// accepts, so a corrupt body is reported at load time, not at the first handshake.
pub(crate) fn parse_chain(role: FileRole, f: &FileBytes) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let err = |problem| TlsError::file(role, &f.path, problem);
    let mut chain = Vec::new();
    for item in CertificateDer::pem_slice_iter(&f.bytes) {
        let der = item.map_err(|e| err(pem_problem(e)))?;
        if let Err(e) = x509_parser::parse_x509_certificate(&der) {
            return Err(err(FileProblem::BadAsn1(e.to_string())));
        }
        chain.push(der);
    }
    if chain.is_empty() {
        return Err(err(FileProblem::NoStartLine));
    }
    Ok(chain)
}

/// Parses a PEM private key: PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`), SEC1
/// (`EC PRIVATE KEY`), or an encrypted PKCS#8 key (`ENCRYPTED PRIVATE KEY`, what OpenSSL 3
/// writes for `-aes256`) decrypted with `pass`. A passphrase given for a plain key is ignored,
/// as OpenSSL does.
pub(crate) fn parse_key(role: FileRole, f: &FileBytes, pass: Option<&str>) -> Result<PrivateKeyDer<'static>, TlsError> {
    let err = |problem| TlsError::file(role, &f.path, problem);
    if let Some(block) = encrypted_block(&f.bytes).map_err(err)? {
        let Some(pass) = pass else { return Err(err(FileProblem::NoPassphrase)) };
        let (_, doc) = pkcs8::der::SecretDocument::from_pem(block).map_err(|_| err(FileProblem::BadBase64))?;
        let info = pkcs8::EncryptedPrivateKeyInfo::try_from(doc.as_bytes())
            .map_err(|e| err(FileProblem::BadAsn1(e.to_string())))?;
        let plain = info.decrypt(pass.as_bytes()).map_err(|_| err(FileProblem::BadDecrypt))?;
        return Ok(PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(plain.as_bytes().to_vec())));
    }
    if contains(&f.bytes, b"Proc-Type: 4,ENCRYPTED") {
        return Err(err(FileProblem::LegacyEncryption));
    }
    PrivateKeyDer::from_pem_slice(&f.bytes).map_err(|e| err(pem_problem(e)))
}

/// All CA certificates of the file and the directory, each with the file it came from. A file
/// in the directory that holds no certificate is skipped with a warning (directories collect
/// READMEs and CRLs); the CA file itself must parse.
pub(crate) fn parse_cas(m: &Material) -> Result<Vec<(CertificateDer<'static>, PathBuf)>, TlsError> {
    let mut cas = Vec::new();
    if let Some(f) = &m.ca_file {
        cas.extend(parse_chain(FileRole::CaFile, f)?.into_iter().map(|c| (c, f.path.clone())));
    }
    for f in &m.ca_dir {
        match parse_chain(FileRole::CaDir, f) {
            Ok(certs) => cas.extend(certs.into_iter().map(|c| (c, f.path.clone()))),
            Err(e) => tracing::warn!("Ignoring a file of tls-ca-cert-dir that holds no usable certificate: {e}"),
        }
    }
    Ok(cas)
}

/// `tls-dh-params-file` must be a readable `DH PARAMETERS` PEM, as upstream requires; rustls
/// offers no DHE suite, so the parameters themselves are not used.
pub(crate) fn check_dh(f: &FileBytes) -> Result<(), TlsError> {
    if contains(&f.bytes, b"-----BEGIN DH PARAMETERS-----")
        || contains(&f.bytes, b"-----BEGIN X9.42 DH PARAMETERS-----")
    {
        return Ok(());
    }
    Err(TlsError::file(FileRole::DhParams, &f.path, FileProblem::NoStartLine))
}

/// SHA-256 of `bytes`.
pub(crate) fn sha256(bytes: &[u8]) -> [u8; 32] {
    Sha256::digest(bytes).into()
}

/// The `ENCRYPTED PRIVATE KEY` block of a PEM file, if it has one (pki-types skips that label).
fn encrypted_block(bytes: &[u8]) -> Result<Option<&str>, FileProblem> {
    const BEGIN: &str = "-----BEGIN ENCRYPTED PRIVATE KEY-----";
    const END: &str = "-----END ENCRYPTED PRIVATE KEY-----";
    let Ok(text) = std::str::from_utf8(bytes) else { return Ok(None) };
    let Some(start) = text.find(BEGIN) else { return Ok(None) };
    let Some(len) = text[start..].find(END) else { return Err(FileProblem::BadEndLine) };
    Ok(Some(&text[start..start + len + END.len()]))
}

fn pem_problem(e: pem::Error) -> FileProblem {
    match e {
        pem::Error::MissingSectionEnd { .. } => FileProblem::BadEndLine,
        pem::Error::Base64Decode(_) => FileProblem::BadBase64,
        pem::Error::Io(e) => FileProblem::from_io(&e),
        pem::Error::SectionTooLarge => FileProblem::BadAsn1("PEM section too large".into()),
        // NoItemsFound, IllegalSectionStart and whatever pki-types adds later.
        _ => FileProblem::NoStartLine,
    }
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    hay.windows(needle.len()).any(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fb(text: &str) -> FileBytes {
        FileBytes { path: "/f".into(), bytes: text.as_bytes().to_vec() }
    }

    #[test]
    fn text_is_no_start_line() {
        let e = parse_chain(FileRole::Cert, &fb("not a certificate\n")).unwrap_err();
        assert_eq!(e.to_string(), "use_certificate_chain_file: no start line (PEM routines) [/f]");
        let e = parse_key(FileRole::Key, &fb("not a key\n"), None).unwrap_err();
        assert_eq!(e.to_string(), "use_private_key_file: no start line (PEM routines) [/f]");
    }

    #[test]
    fn broken_pem_is_reported_by_kind() {
        let e = parse_chain(FileRole::Cert, &fb("-----BEGIN CERTIFICATE-----\nAAAA\n")).unwrap_err();
        assert!(e.to_string().contains("bad end line"), "{e}");
        let e = parse_chain(FileRole::Cert, &fb("-----BEGIN CERTIFICATE-----\n!!!!\n-----END CERTIFICATE-----\n"))
            .unwrap_err();
        assert!(e.to_string().contains("bad base64 decode"), "{e}");
        let e = parse_chain(FileRole::Cert, &fb("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n"))
            .unwrap_err();
        assert!(e.to_string().contains("nested asn1 error"), "{e}");
    }

    #[test]
    fn legacy_encrypted_keys_are_refused_with_a_way_out() {
        let legacy = "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-256-CBC,00\n\nAAAA\n-----END RSA PRIVATE KEY-----\n";
        let e = parse_key(FileRole::Key, &fb(legacy), Some("x")).unwrap_err();
        assert!(e.to_string().contains("openssl pkcs8 -topk8"), "{e}");
    }

    #[test]
    fn encrypted_key_without_end_or_pass() {
        let e = parse_key(FileRole::Key, &fb("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n"), Some("x")).unwrap_err();
        assert!(e.to_string().contains("bad end line"), "{e}");
        let e = parse_key(
            FileRole::ClientKey,
            &fb("-----BEGIN ENCRYPTED PRIVATE KEY-----\nAAAA\n-----END ENCRYPTED PRIVATE KEY-----\n"),
            None,
        )
        .unwrap_err();
        assert!(e.to_string().starts_with("use_private_key_file: bad password read"), "{e}");
    }

    #[test]
    fn dh_params_need_their_pem_label() {
        assert!(check_dh(&fb("-----BEGIN DH PARAMETERS-----\nAA\n-----END DH PARAMETERS-----\n")).is_ok());
        let e = check_dh(&fb("junk")).unwrap_err();
        assert_eq!(e.to_string(), "Failed to load DH params file: no start line (PEM routines) [/f]");
    }
}
