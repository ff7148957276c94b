//! One immutable TLS snapshot: every rustls configuration built from one read of the files.
//!
//! Following spec §4.1, a reload builds a whole new [`TlsState`] (client-port configurations
//! for the three `tls-auth-clients` modes, the bus server configuration, the outbound client
//! configuration) and swaps it in. Connections hold the `Arc<ServerConfig>` they started with,
//! so open connections keep their material and new ones get the new one, with no locking on the
//! accept path. Building the configurations is cheap; reading and parsing the files is the cost,
//! and that runs off the command path (see `manager.rs`).

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;
use rustls::client::{ResolvesClientCert, Resumption};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{
    ClientHello, NoServerSessionStorage, ResolvesServerCert, StoresServerSessions, WebPkiClientVerifier,
};
use rustls::sign::CertifiedKey;
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, DistinguishedName, Error, InconsistentKeys, RootCertStore,
    ServerConfig, SignatureScheme,
};

use crate::ciphers::{self, CipherPolicy};
use crate::error::{FileProblem, FileRole, TlsError};
use crate::inspect::{CertInfo, format_time};
use crate::material::{self, Fingerprint, Material};
use crate::settings::{ClientAuth, TlsSettings};
use crate::verify::{BusClientVerifier, PeerNames, PeerServerVerifier};

/// An immutable snapshot of the TLS configuration in force.
#[derive(Debug)]
pub struct TlsState {
    pub(crate) settings: TlsSettings,
    client_port: [Arc<ServerConfig>; 3],
    bus_server: Option<Arc<ServerConfig>>,
    outbound: Option<Arc<ClientConfig>>,
    certs: LoadedCerts,
    pub(crate) fingerprint: Fingerprint,
    caches: Caches,
    /// Commit order, 1 for the first state; assigned by the manager when it swaps this in.
    pub(crate) generation: u64,
    /// The CONFIG SET generation whose settings this state was built from (see `manager.rs`).
    pub(crate) config_gen: u64,
}

/// The certificates a state loaded, for logs, INFO and `--check-tls`.
#[derive(Clone, Debug)]
pub struct LoadedCerts {
    /// The leaf of `tls-cert-file`.
    pub server: CertInfo,
    /// The leaf of `tls-client-cert-file`, when the separate pair is used.
    pub client: Option<CertInfo>,
    /// The CA certificates trusted (expired and not-yet-valid ones are left out).
    pub cas: Vec<CertInfo>,
    /// CA certificates left out of the trust store, with the reason.
    pub dropped_cas: Vec<String>,
    /// The trusted CA whose subject is the issuer of the server chain's last certificate.
    pub issuer: Option<CertInfo>,
}

impl LoadedCerts {
    /// The CA that expires first: upstream's `tls_ca_cert_*` INFO fields describe it.
    pub fn earliest_ca(&self) -> Option<&CertInfo> {
        self.cas.iter().min_by_key(|c| c.not_after)
    }
}

/// Whether a build is the first (startup) or replaces a configuration in force.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LoadMode {
    Startup,
    Reload,
}

/// What a build needs besides the settings and the files.
pub(crate) struct BuildCtx<'a> {
    pub(crate) names: &'a Arc<ArcSwap<PeerNames>>,
    /// The state in force, whose session caches may be kept.
    pub(crate) previous: Option<&'a TlsState>,
    pub(crate) mode: LoadMode,
    pub(crate) now: i64,
}

impl TlsState {
    /// The client-port configuration for a `tls-auth-clients` mode. The server reads the mode
    /// at accept time, so changing it needs no rebuild (upstream has no apply step for it).
    pub fn server_config(&self, mode: ClientAuth) -> &Arc<ServerConfig> {
        &self.client_port[mode.index()]
    }

    /// The cluster bus listener's configuration: client certificates are mandatory and must
    /// carry an expected peer name when one is configured. `None` without a CA.
    pub fn bus_server_config(&self) -> Option<&Arc<ServerConfig>> {
        self.bus_server.as_ref()
    }

    /// The configuration for links this node opens (bus, replication, MIGRATE). `None` without
    /// a CA: a peer cannot be verified.
    pub fn client_config(&self) -> Option<&Arc<ClientConfig>> {
        self.outbound.as_ref()
    }

    /// The certificates in use.
    pub fn certs(&self) -> &LoadedCerts {
        &self.certs
    }

    /// The certificate outbound links present: the client pair's, else the server's.
    pub fn outbound_cert(&self) -> &CertInfo {
        self.certs.client.as_ref().unwrap_or(&self.certs.server)
    }

    /// The settings this state was built from.
    pub fn settings(&self) -> &TlsSettings {
        &self.settings
    }

    /// SHA-256 of every file as it was read for this state.
    pub fn fingerprint(&self) -> &Fingerprint {
        &self.fingerprint
    }

    /// Commit order: 1 for the first state, +1 for each swap.
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// Builds every configuration from one read of the files.
    pub(crate) fn build(s: &TlsSettings, m: &Material, ctx: &BuildCtx<'_>) -> Result<TlsState, TlsError> {
        let policy = ciphers::policy(&s.protocols, &s.ciphers, &s.ciphersuites)?;
        let (server_key, server) =
            load_pair(&policy.provider, FileRole::Cert, &m.cert, FileRole::Key, &m.key, s.key_file_pass.as_deref())?;
        check_validity(FileRole::Cert, &m.cert.path, &server, ctx, |p| &p.certs.server)?;
        let (outbound_key, client) = match &m.client {
            Some((c, k)) => {
                let (key, info) = load_pair(
                    &policy.provider,
                    FileRole::ClientCert,
                    c,
                    FileRole::ClientKey,
                    k,
                    s.client_key_file_pass.as_deref(),
                )?;
                check_validity(FileRole::ClientCert, &c.path, &info, ctx, |p| {
                    p.certs.client.as_ref().unwrap_or(&p.certs.server)
                })?;
                (key, Some(info))
            }
            None => (server_key.clone(), None),
        };
        let (roots, trusted, dropped_cas) = load_roots(s, m, ctx.now)?;
        if let Some(dh) = &m.dh {
            material::check_dh(dh)?;
            tracing::info!("tls-dh-params-file is ignored: DHE is not supported, ECDHE is used");
        }
        let issuer = issuer_of(&server_key.cert, &trusted);
        let cas: Vec<CertInfo> = trusted.into_iter().map(|(info, _)| info).collect();

        let caches = Caches::for_build(s, m, ctx.previous);
        let roots = roots.map(Arc::new);
        let mut client_port = Vec::with_capacity(3);
        for mode in ClientAuth::ALL {
            let verifier = client_verifier(mode, roots.as_ref(), &policy.provider)?;
            client_port.push(server_config(
                &policy,
                s,
                verifier,
                &server_key,
                caches.client_port[mode.index()].clone(),
            )?);
        }
        let client_port: [Arc<ServerConfig>; 3] =
            client_port.try_into().unwrap_or_else(|_| unreachable!("three modes"));
        let (bus_server, outbound) = match &roots {
            Some(roots) => {
                let inner = client_verifier(ClientAuth::Required, Some(roots), &policy.provider)?;
                let bus = Arc::new(BusClientVerifier { inner, names: ctx.names.clone() });
                // No session resumption on server-to-server links, either way: a resumed
                // session skips the verifier, so a tls-expected-peer-name change (which needs
                // no rebuild) would not apply to it. These links are long-lived; resumption
                // would save little.
                let bus = server_config(&policy, s, bus, &server_key, None)?;
                let verifier = PeerServerVerifier {
                    roots: roots.clone(),
                    provider: policy.provider.clone(),
                    names: ctx.names.clone(),
                };
                let mut out = ClientConfig::builder_with_provider(policy.provider.clone())
                    .with_protocol_versions(&policy.versions)
                    .map_err(config_err)?
                    .dangerous()
                    .with_custom_certificate_verifier(Arc::new(verifier))
                    .with_client_cert_resolver(Arc::new(FixedCert(outbound_key)));
                out.resumption = Resumption::disabled();
                (Some(bus), Some(Arc::new(out)))
            }
            None => (None, None),
        };
        Ok(TlsState {
            settings: s.clone(),
            client_port,
            bus_server,
            outbound,
            certs: LoadedCerts { server, client, cas, dropped_cas, issuer },
            fingerprint: m.fingerprint.clone(),
            caches,
            generation: 0,
            config_gen: 0,
        })
    }
}

/// Parses a certificate chain and its key and checks that they belong together.
fn load_pair(
    provider: &CryptoProvider,
    cert_role: FileRole,
    cert: &material::FileBytes,
    key_role: FileRole,
    key: &material::FileBytes,
    pass: Option<&str>,
) -> Result<(Arc<CertifiedKey>, CertInfo), TlsError> {
    let chain = material::parse_chain(cert_role, cert)?;
    let mut info =
        CertInfo::parse(&chain[0]).map_err(|e| TlsError::file(cert_role, &cert.path, FileProblem::BadAsn1(e)))?;
    info.file = Some(cert.path.clone());
    let der: PrivateKeyDer<'static> = material::parse_key(key_role, key, pass)?;
    match CertifiedKey::from_der(chain, der, provider) {
        Ok(ck) => Ok((Arc::new(ck), info)),
        Err(Error::InconsistentKeys(InconsistentKeys::KeyMismatch)) => {
            Err(TlsError::KeyMismatch { role: key_role, cert: cert.path.clone(), key: key.path.clone() })
        }
        Err(e) => Err(TlsError::file(key_role, &key.path, FileProblem::UnsupportedKey(e.to_string()))),
    }
}

/// Own-certificate validity. At startup an expired or not-yet-valid certificate is loaded and
/// logged at error level by the expiry watch (the rule: refusing to start would turn a
/// clock skew into an outage, and peers refuse the certificate anyway). On a reload, a new
/// certificate outside its validity is refused, so a mistaken CONFIG SET or a renewal job that
/// installs an old file cannot replace a working certificate; the certificate already in use
/// (same serial and issuer) is never refused, so other settings stay changeable.
fn check_validity(
    role: FileRole,
    path: &std::path::Path,
    info: &CertInfo,
    ctx: &BuildCtx<'_>,
    current: impl Fn(&TlsState) -> &CertInfo,
) -> Result<(), TlsError> {
    if ctx.mode == LoadMode::Startup || info.is_valid_at(ctx.now) {
        return Ok(());
    }
    if let Some(prev) = ctx.previous {
        let cur = current(prev);
        if cur.serial == info.serial && cur.issuer == info.issuer {
            return Ok(());
        }
    }
    let problem = if info.not_after < ctx.now {
        FileProblem::Expired { not_after: format_time(info.not_after) }
    } else {
        FileProblem::NotYetValid { not_before: format_time(info.not_before) }
    };
    Err(TlsError::file(role, path, problem))
}

type Roots = (Option<RootCertStore>, Vec<(CertInfo, CertificateDer<'static>)>, Vec<String>);

/// The trust store from the CA file and directory. Every CA in a bundle is trusted, so a CA
/// rotation is "trust both, move the leaves, drop the old" with reloads only. CA certificates
/// outside their validity are left out with a warning rather than failing the whole load
/// (Valkey 9.1 fails; stale roots in OS bundles make that harsh). Returns each trusted CA's
/// facts with its DER, which [`issuer_of`] checks signatures against.
fn load_roots(s: &TlsSettings, m: &Material, now: i64) -> Result<Roots, TlsError> {
    if m.ca_file.is_none() && s.ca_cert_dir.is_none() {
        return Ok((None, Vec::new(), Vec::new()));
    }
    let (mut store, mut trusted, mut dropped) = (RootCertStore::empty(), Vec::new(), Vec::new());
    for (der, path) in material::parse_cas(m)? {
        let mut info = match CertInfo::parse(&der) {
            Ok(i) => i,
            Err(e) => {
                dropped.push(format!("unparsable CA certificate: {e}"));
                continue;
            }
        };
        info.file = Some(path);
        if !info.is_valid_at(now) {
            let why = if info.not_after < now { "has expired" } else { "is not valid yet" };
            tracing::warn!("TLS CA certificate {why}, not trusted: {info}");
            dropped.push(format!("{} ({why})", info.subject));
            continue;
        }
        if let Err(e) = store.add(der.clone()) {
            dropped.push(format!("{} ({e})", info.subject));
            continue;
        }
        trusted.push((info, der));
    }
    if store.is_empty() {
        let (role, path) = match (&m.ca_file, &s.ca_cert_dir) {
            (Some(f), _) => (FileRole::CaFile, f.path.clone()),
            (None, Some(d)) => (FileRole::CaDir, d.clone()),
            (None, None) => unreachable!("checked above"),
        };
        return Err(TlsError::File { role, path, problem: FileProblem::NoCaCertificates });
    }
    Ok((Some(store), trusted, dropped))
}

/// The trusted CA that signed the top of our chain. A CA rotation often reissues the CA under
/// the same name, and while the bundle holds both, a match by name alone cannot tell which one
/// signed the leaf; so among the CAs with the right name, the one whose key verifies the
/// signature wins. Only when no key verifies it (an algorithm x509-parser cannot check) does
/// the name decide, the latest-expiring CA first.
fn issuer_of(chain: &[CertificateDer<'static>], cas: &[(CertInfo, CertificateDer<'static>)]) -> Option<CertInfo> {
    let (_, top) = x509_parser::parse_x509_certificate(chain.last()?).ok()?;
    let issuer = top.issuer().to_string();
    let named: Vec<&(CertInfo, CertificateDer<'static>)> = cas.iter().filter(|(c, _)| c.subject == issuer).collect();
    let signed = named.iter().find(|(_, der)| {
        x509_parser::parse_x509_certificate(der)
            .is_ok_and(|(_, ca)| top.verify_signature(Some(ca.public_key())).is_ok())
    });
    match signed {
        Some((info, _)) => Some(info.clone()),
        None => named.iter().map(|(c, _)| c).max_by_key(|c| c.not_after).map(|c| (*c).clone()),
    }
}

fn client_verifier(
    mode: ClientAuth,
    roots: Option<&Arc<RootCertStore>>,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    if mode == ClientAuth::NotRequested {
        return Ok(WebPkiClientVerifier::no_client_auth());
    }
    let Some(roots) = roots else {
        // No CA (possible only while tls-auth-clients was `no` at load time and has been
        // switched since): no client certificate can be verified, like OpenSSL with no CA.
        return Ok(Arc::new(NoTrustAnchors { mandatory: mode == ClientAuth::Required }));
    };
    let builder = WebPkiClientVerifier::builder_with_provider(roots.clone(), provider.clone());
    let builder = if mode == ClientAuth::Optional { builder.allow_unauthenticated() } else { builder };
    builder.build().map_err(|e| TlsError::Config(format!("client certificate verifier: {e}")))
}

fn server_config(
    policy: &CipherPolicy,
    s: &TlsSettings,
    verifier: Arc<dyn ClientCertVerifier>,
    key: &Arc<CertifiedKey>,
    cache: Option<Arc<SessionCache>>,
) -> Result<Arc<ServerConfig>, TlsError> {
    let mut cfg = ServerConfig::builder_with_provider(policy.provider.clone())
        .with_protocol_versions(&policy.versions)
        .map_err(config_err)?
        .with_client_cert_verifier(verifier)
        .with_cert_resolver(Arc::new(FixedCert(key.clone())));
    cfg.ignore_client_order = s.prefer_server_ciphers;
    match cache {
        Some(cache) => {
            cfg.session_storage = cache;
            // One ticket per connection: each is an entry in the cache (rustls' default is 2).
            cfg.send_tls13_tickets = 1;
        }
        None => {
            cfg.session_storage = Arc::new(NoServerSessionStorage {});
            cfg.send_tls13_tickets = 0;
        }
    }
    let cfg = Arc::new(cfg);
    // Proves the configuration can start a connection, so TlsSession::new may rely on it.
    rustls::ServerConnection::new(cfg.clone()).map_err(config_err)?;
    Ok(cfg)
}

fn config_err(e: Error) -> TlsError {
    TlsError::Config(format!("invalid TLS configuration: {e}"))
}

/// Session caches of the client port: one per mode, because a session resumed under one
/// `tls-auth-clients` mode must not skip the client check of another. They survive only a
/// reload that read exactly the same files with the same cache settings (a CONFIG SET that
/// changed nothing else). Spec §4.6 would keep them across a leaf-only change; we do not: a
/// resumed session keeps the identity of the certificate it was made with, so after a renewal
/// clients resuming would still see the old serial (and after a rotation for a compromised key,
/// sessions vouched for by it would live on). Any file change drops them, as upstream's new
/// SSL_CTX does; a CA change in particular, so a client admitted under a removed CA cannot come
/// back by resumption. The cost is one full handshake per client after a reload.
#[derive(Clone, Debug)]
struct Caches {
    client_port: [Option<Arc<SessionCache>>; 3],
    key: ([u8; 32], bool, u32, u32),
}

impl Caches {
    fn for_build(s: &TlsSettings, m: &Material, previous: Option<&TlsState>) -> Caches {
        let key = (m.fingerprint.digest(), s.session_caching, s.session_cache_size, s.session_cache_timeout);
        if let Some(prev) = previous.filter(|p| p.caches.key == key) {
            return prev.caches.clone();
        }
        let on = s.session_caching && s.session_cache_timeout > 0;
        let new = || on.then(|| Arc::new(SessionCache::new(s.session_cache_size, s.session_cache_timeout)));
        if on && s.session_cache_size == 0 {
            tracing::info!("tls-session-cache-size 0 (unlimited) keeps at most {} sessions", UNLIMITED_CAP);
        }
        Caches { client_port: [new(), new(), new()], key }
    }
}

/// The one certificate every handshake of a configuration presents.
#[derive(Debug)]
struct FixedCert(Arc<CertifiedKey>);

impl ResolvesServerCert for FixedCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }
}

impl ResolvesClientCert for FixedCert {
    fn resolve(&self, _hints: &[&[u8]], _schemes: &[SignatureScheme]) -> Option<Arc<CertifiedKey>> {
        Some(self.0.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

/// A client verifier with no CA: asks for a certificate and rejects any.
#[derive(Debug)]
struct NoTrustAnchors {
    mandatory: bool,
}

impl ClientCertVerifier for NoTrustAnchors {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, Error> {
        Err(Error::InvalidCertificate(CertificateError::UnknownIssuer))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        rustls::crypto::aws_lc_rs::default_provider().signature_verification_algorithms.supported_schemes()
    }
}

// The server-side session cache behind `tls-session-caching`, `tls-session-cache-size` and
// `tls-session-cache-timeout`.
//
// rustls' own `ServerSessionMemoryCache` has a size but no lifetime, and rustls' stateless
// tickets have fixed lifetimes, so neither honours the timeout directive. This cache stores
// each session with its insertion time and treats older ones as absent; stateless tickets stay
// off so that every resumption goes through it. Eviction is oldest-first.

/// Upstream's "0 = unlimited" becomes this cap: a bound is still needed for memory.
pub(crate) const UNLIMITED_CAP: usize = 1_000_000;

/// A bounded session store whose entries expire.
pub(crate) struct SessionCache {
    inner: Mutex<Inner>,
    capacity: usize,
    ttl: Duration,
}

struct Inner {
    map: HashMap<Vec<u8>, (Vec<u8>, Instant)>,
    /// Insertion order; may hold keys already taken (removed lazily).
    order: VecDeque<Vec<u8>>,
}

impl SessionCache {
    /// A cache of `size` sessions (0 = [`UNLIMITED_CAP`]) that live `timeout_secs` seconds.
    pub(crate) fn new(size: u32, timeout_secs: u32) -> SessionCache {
        let capacity = if size == 0 { UNLIMITED_CAP } else { size as usize };
        SessionCache {
            inner: Mutex::new(Inner { map: HashMap::new(), order: VecDeque::new() }),
            capacity,
            ttl: Duration::from_secs(u64::from(timeout_secs)),
        }
    }

    /// Sessions currently held (expired ones included until they are looked up or evicted).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.inner.lock().map.len()
    }

    fn lookup(&self, key: &[u8], remove: bool) -> Option<Vec<u8>> {
        let mut inner = self.inner.lock();
        let fresh = inner.map.get(key).map(|(_, at)| at.elapsed() < self.ttl)?;
        if !fresh || remove {
            return inner.map.remove(key).filter(|_| fresh).map(|(v, _)| v);
        }
        inner.map.get(key).map(|(v, _)| v.clone())
    }
}

impl StoresServerSessions for SessionCache {
    fn put(&self, key: Vec<u8>, value: Vec<u8>) -> bool {
        let mut inner = self.inner.lock();
        while inner.map.len() >= self.capacity {
            let Some(old) = inner.order.pop_front() else { break };
            inner.map.remove(&old);
        }
        if inner.map.insert(key.clone(), (value, Instant::now())).is_none() {
            inner.order.push_back(key);
        }
        // Taken sessions leave their key in `order`; compact before it grows unbounded.
        if inner.order.len() > 2 * self.capacity.min(inner.map.len() + 1024) {
            let Inner { map, order } = &mut *inner;
            order.retain(|k| map.contains_key(k));
        }
        true
    }

    fn get(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, false)
    }

    fn take(&self, key: &[u8]) -> Option<Vec<u8>> {
        self.lookup(key, true)
    }

    fn can_cache(&self) -> bool {
        true
    }
}

impl fmt::Debug for SessionCache {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SessionCache").field("capacity", &self.capacity).field("ttl", &self.ttl).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn evicts_oldest_beyond_capacity() {
        let c = SessionCache::new(2, 300);
        c.put(b"a".to_vec(), b"1".to_vec());
        c.put(b"b".to_vec(), b"2".to_vec());
        c.put(b"c".to_vec(), b"3".to_vec());
        assert_eq!(c.get(b"a"), None);
        assert_eq!(c.get(b"b"), Some(b"2".to_vec()));
        assert_eq!(c.take(b"c"), Some(b"3".to_vec()));
        assert_eq!(c.take(b"c"), None);
        assert_eq!(c.len(), 1);
    }

    #[test]
    fn expired_sessions_are_misses() {
        let c = SessionCache::new(10, 0);
        c.put(b"a".to_vec(), b"1".to_vec());
        assert_eq!(c.get(b"a"), None);
        assert_eq!(c.len(), 0, "an expired entry is dropped when looked up");
    }

    #[test]
    fn zero_size_means_a_large_cap() {
        assert_eq!(SessionCache::new(0, 1).capacity, UNLIMITED_CAP);
    }

    #[test]
    fn taken_keys_do_not_pile_up() {
        let c = SessionCache::new(4, 300);
        for i in 0..10_000u32 {
            c.put(i.to_be_bytes().to_vec(), vec![1]);
            c.take(&i.to_be_bytes());
        }
        assert!(c.inner.lock().order.len() < 3000);
    }
}
