//! The live TLS configuration: startup load, CONFIG SET reloads, automatic reloads, INFO data.
//!
//! The state in force sits in an `ArcSwapOption`: the accept path does one atomic load and never
//! waits for a reload. All reload work (reading, hashing, parsing, building) is blocking and runs
//! on the caller's blocking thread (`spawn_blocking`, see [`TlsManager::apply_async`]) or in the
//! background task, never on the command path.
//!
//! Ordering (spec P1, Valkey #3549): a build is a [`Pending`] that is committed afterwards.
//! Every CONFIG SET takes a generation number before it reads any file; its build is committed
//! only if no later CONFIG SET has been committed. An automatic reload rebuilds the settings in
//! force and is committed only if nothing was committed since it started and no CONFIG SET is in
//! flight — so an automatic reload built from old paths or older file contents can never
//! replace what a CONFIG SET installed.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use arc_swap::{ArcSwap, ArcSwapOption};
use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::error::TlsError;
use crate::info::{CertSummary, ExpiryWatch, ReloadRecord, TlsCounters, TlsInfo, log_in_use};
use crate::material::Material;
use crate::session::TlsSession;
use crate::settings::{ClientAuth, TlsSettings};
use crate::state::{BuildCtx, LoadMode, TlsState};
use crate::verify::PeerNames;

/// Owns the TLS state in force and everything that replaces it.
#[derive(Debug)]
pub struct TlsManager {
    current: ArcSwapOption<TlsState>,
    counters: Arc<TlsCounters>,
    names: Arc<ArcSwap<PeerNames>>,
    inner: Mutex<Inner>,
    /// Last CONFIG SET generation handed out.
    config_gen: std::sync::atomic::AtomicU64,
    /// CONFIG SET builds started and not yet committed or dropped.
    config_inflight: Arc<AtomicUsize>,
    /// Single flight for automatic reloads (spec P9).
    reload_busy: AtomicBool,
    /// 0 unknown, 1 files match what is loaded, 2 they differ.
    files_match: AtomicU8,
    /// Wakes the background task when the reload interval changes.
    wake: Notify,
    /// Called after every commit with the state then in force (see [`TlsManager::on_commit`]).
    /// The mutex also orders the calls, so the last call always sees the last state.
    listeners: Listeners,
}

/// A function told about every configuration swapped in.
type Listener = Box<dyn Fn(Option<&TlsState>) + Send + Sync>;

/// The listeners, in the order they registered.
#[derive(Default)]
struct Listeners(Mutex<Vec<Listener>>);

impl std::fmt::Debug for Listeners {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listeners({})", self.0.lock().len())
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// The settings in force (also when TLS is not in use).
    settings: TlsSettings,
    committed_config_gen: u64,
    generation: u64,
    watch: ExpiryWatch,
    last_reload: Option<ReloadRecord>,
    /// The last automatic-reload failure logged, so a broken file is reported once (P4).
    last_auto_failure: Option<String>,
}

/// A configuration built and not yet committed.
#[derive(Debug)]
pub struct Pending {
    kind: PendingKind,
    settings: TlsSettings,
    state: Option<TlsState>,
    _inflight: Option<InflightGuard>,
}

#[derive(Clone, Copy, Debug)]
enum PendingKind {
    ConfigSet { config_gen: u64 },
    Auto { config_gen: u64, base_generation: u64 },
}

/// What [`TlsManager::commit`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CommitOutcome {
    /// Swapped in; the new generation.
    Applied(u64),
    /// Discarded: something newer was committed or is on its way.
    Superseded,
}

/// What an automatic reload check found.
#[derive(Debug)]
pub enum ReloadOutcome {
    /// No TLS state, or the reload interval is 0 when called from the background task.
    Off,
    /// Another reload check is running.
    Busy,
    /// The files hash to what is loaded.
    Unchanged,
    /// A new state is in force; its generation.
    Reloaded(u64),
    /// A newer CONFIG SET won; this build was dropped.
    Superseded,
    /// The new files could not be loaded; the current state stays.
    Failed(TlsError),
}

impl TlsManager {
    /// A manager with no TLS state.
    pub fn new() -> TlsManager {
        TlsManager {
            current: ArcSwapOption::empty(),
            counters: Arc::new(TlsCounters::default()),
            names: Arc::new(ArcSwap::from_pointee(PeerNames::default())),
            inner: Mutex::new(Inner::default()),
            config_gen: Default::default(),
            config_inflight: Arc::new(AtomicUsize::new(0)),
            reload_busy: AtomicBool::new(false),
            files_match: AtomicU8::new(0),
            wake: Notify::new(),
            listeners: Listeners::default(),
        }
    }

    /// The startup load (blocking). When TLS is in use, failure is fatal for the caller; it is
    /// logged as `Failed to initialize SSL context: <reason> [file]`. Success logs
    /// `SSL context initialized (cert=…, key=…)` and the certificates in use. An expired or
    /// not-yet-valid certificate is loaded and reported at error level (see `state.rs`).
    pub fn init(&self, settings: TlsSettings) -> Result<(), TlsError> {
        let in_use = settings.in_use();
        let pending = self.prepare(settings, LoadMode::Startup).inspect_err(|e| {
            tracing::error!("Failed to initialize SSL context: {e}");
        })?;
        self.commit(pending);
        if let Some(state) = self.state() {
            let s = state.settings();
            tracing::info!(
                "SSL context initialized (cert={}, key={})",
                path_text(&s.cert_file),
                path_text(&s.key_file)
            );
            self.after_load(&state);
        } else if !in_use {
            tracing::debug!("TLS not in use: settings stored");
        }
        Ok(())
    }

    /// CONFIG SET of any tls-* directive (blocking): rebuilds everything from the files, even
    /// when the paths are unchanged (upstream's VOLATILE file directives). On failure nothing
    /// changes and the error's [`TlsError::config_set_reply`] is the reply. Callers should
    /// serialise CONFIG SETs (the server does); concurrent ones still never let an older build
    /// replace a newer one.
    pub fn apply(&self, settings: TlsSettings) -> Result<(), TlsError> {
        let pending = match self.prepare(settings, LoadMode::Reload) {
            Ok(p) => p,
            Err(e) => {
                tracing::warn!("Unable to update TLS configuration: {e}");
                self.record(Err(e.to_string()));
                return Err(e);
            }
        };
        let loaded = pending.state.is_some();
        if let (CommitOutcome::Applied(_), true) = (self.commit(pending), loaded)
            && let Some(state) = self.state()
        {
            let s = state.settings();
            tracing::info!(
                "TLS configuration reloaded (cert={}, key={})",
                path_text(&s.cert_file),
                path_text(&s.key_file)
            );
            self.after_load(&state);
            self.record(Ok(()));
        }
        Ok(())
    }

    /// [`TlsManager::apply`] on tokio's blocking pool, so CONFIG SET waits for the build without
    /// holding a runtime thread.
    pub async fn apply_async(self: &Arc<Self>, settings: TlsSettings) -> Result<(), TlsError> {
        let me = self.clone();
        match tokio::task::spawn_blocking(move || me.apply(settings)).await {
            Ok(r) => r,
            Err(e) => Err(TlsError::Config(format!("TLS reload task failed: {e}"))),
        }
    }

    /// Builds a CONFIG SET configuration without committing it (blocking). The build counts as
    /// in flight until the returned [`Pending`] is committed or dropped.
    pub fn prepare_apply(&self, settings: TlsSettings) -> Result<Pending, TlsError> {
        self.prepare(settings, LoadMode::Reload)
    }

    fn prepare(&self, settings: TlsSettings, mode: LoadMode) -> Result<Pending, TlsError> {
        // The generation is taken before any file is read: a later generation has read later.
        let config_gen = self.config_gen.fetch_add(1, Ordering::SeqCst) + 1;
        self.config_inflight.fetch_add(1, Ordering::SeqCst);
        let guard = InflightGuard(self.config_inflight.clone());
        PeerNames::parse(&settings.expected_peer_names)?;
        let state = if settings.in_use() {
            settings.check_required()?;
            let material = Material::read(&settings)?;
            let previous = self.current.load_full();
            let ctx = self.ctx(previous.as_deref(), mode);
            Some(TlsState::build(&settings, &material, &ctx)?)
        } else {
            None
        };
        Ok(Pending { kind: PendingKind::ConfigSet { config_gen }, settings, state, _inflight: Some(guard) })
    }

    /// Swaps a built configuration in, unless something newer won (see the module docs).
    pub fn commit(&self, p: Pending) -> CommitOutcome {
        let mut inner = self.inner.lock();
        match p.kind {
            PendingKind::ConfigSet { config_gen } if config_gen <= inner.committed_config_gen => {
                return CommitOutcome::Superseded;
            }
            PendingKind::Auto { config_gen, base_generation }
                if config_gen != inner.committed_config_gen
                    || base_generation != inner.generation
                    || self.config_inflight.load(Ordering::SeqCst) > 0 =>
            {
                return CommitOutcome::Superseded;
            }
            PendingKind::ConfigSet { config_gen } => inner.committed_config_gen = config_gen,
            PendingKind::Auto { .. } => {}
        }
        inner.generation += 1;
        let generation = inner.generation;
        let mut interval_changed = false;
        // An automatic reload rebuilt the settings in force: they stay the source, so a
        // set_auto_reload_interval or set_expected_peer_names made during its build survives.
        if let PendingKind::ConfigSet { .. } = p.kind {
            interval_changed = inner.settings.auto_reload_interval != p.settings.auto_reload_interval;
            // Validated in prepare(); an empty list is the fallback that cannot fail.
            self.names.store(Arc::new(PeerNames::parse(&p.settings.expected_peer_names).unwrap_or_default()));
            inner.settings = p.settings;
        }
        inner.last_auto_failure = None;
        let state = p.state.map(|mut s| {
            s.generation = generation;
            s.config_gen = inner.committed_config_gen;
            Arc::new(s)
        });
        self.files_match.store(if state.is_some() { 1 } else { 0 }, Ordering::Relaxed);
        self.current.store(state);
        drop(inner);
        if interval_changed {
            self.wake.notify_one();
        }
        self.notify();
        CommitOutcome::Applied(generation)
    }

    /// Calls `f` now with the state in force, then after every commit (the startup load, each
    /// CONFIG SET, each automatic reload) with the state that commit installed, or `None` when
    /// TLS is no longer in use. The server uses it for what must follow the certificate, such
    /// as the summary the cluster bus gossips. `f` runs on the committing thread, so it must be
    /// quick and must not call back into this manager's reload methods.
    pub fn on_commit(&self, f: impl Fn(Option<&TlsState>) + Send + Sync + 'static) {
        let mut listeners = self.listeners.0.lock();
        f(self.current.load().as_deref());
        listeners.push(Box::new(f));
    }

    /// Tells every listener about the state in force. It is read under the listeners' lock:
    /// when two commits race, whichever call runs last reads the state that won.
    fn notify(&self) {
        let listeners = self.listeners.0.lock();
        if listeners.is_empty() {
            return;
        }
        let state = self.current.load_full();
        for f in listeners.iter() {
            f(state.as_deref());
        }
    }

    /// One automatic-reload check (blocking): hash the files; if they changed, rebuild and
    /// commit. Logs `TLS configuration reloaded (cert=…, key=…)` and `TLS materials reloaded
    /// successfully`, or `TLS reload failed, keeping the current certificate: <reason>` once per
    /// distinct failure.
    pub fn reload_if_changed(&self) -> ReloadOutcome {
        if self.reload_busy.swap(true, Ordering::AcqRel) {
            return ReloadOutcome::Busy;
        }
        let outcome = self.auto_reload_once();
        self.reload_busy.store(false, Ordering::Release);
        match &outcome {
            ReloadOutcome::Reloaded(_) => {
                if let Some(state) = self.state() {
                    let s = state.settings();
                    tracing::info!(
                        "TLS configuration reloaded (cert={}, key={})",
                        path_text(&s.cert_file),
                        path_text(&s.key_file)
                    );
                    tracing::info!("TLS materials reloaded successfully");
                    self.after_load(&state);
                }
                self.record(Ok(()));
            }
            ReloadOutcome::Failed(e) => {
                let text = e.to_string();
                let mut inner = self.inner.lock();
                if inner.last_auto_failure.as_deref() != Some(&text) {
                    tracing::warn!("TLS reload failed, keeping the current certificate: {text}");
                    inner.last_auto_failure = Some(text.clone());
                }
                drop(inner);
                self.record(Err(text));
            }
            ReloadOutcome::Superseded => tracing::debug!("TLS reload dropped: a newer configuration is in force"),
            _ => {}
        }
        outcome
    }

    fn auto_reload_once(&self) -> ReloadOutcome {
        let (settings, config_gen, base_generation) = {
            let inner = self.inner.lock();
            (inner.settings.clone(), inner.committed_config_gen, inner.generation)
        };
        let Some(current) = self.current.load_full() else { return ReloadOutcome::Off };
        if current.generation != base_generation {
            return ReloadOutcome::Superseded; // a commit is being published right now
        }
        let material = match Material::read(&settings) {
            Ok(m) => m,
            Err(e) => {
                self.files_match.store(2, Ordering::Relaxed);
                return ReloadOutcome::Failed(e);
            }
        };
        if material.fingerprint == current.fingerprint {
            self.files_match.store(1, Ordering::Relaxed);
            tracing::debug!("TLS reload skipped: materials unchanged");
            return ReloadOutcome::Unchanged;
        }
        self.files_match.store(2, Ordering::Relaxed);
        tracing::info!("TLS materials changed, reloading in background");
        let ctx = self.ctx(Some(&current), LoadMode::Reload);
        let state = match TlsState::build(&settings, &material, &ctx) {
            Ok(s) => s,
            Err(e) => return ReloadOutcome::Failed(e),
        };
        let pending = Pending {
            kind: PendingKind::Auto { config_gen, base_generation },
            settings,
            state: Some(state),
            _inflight: None,
        };
        match self.commit(pending) {
            CommitOutcome::Applied(g) => ReloadOutcome::Reloaded(g),
            CommitOutcome::Superseded => ReloadOutcome::Superseded,
        }
    }

    /// Builds an automatic reload of the settings in force without committing it, whether or
    /// not the files changed (blocking). For tests and tools that need to interleave builds.
    pub fn prepare_auto_reload(&self) -> Result<Pending, TlsError> {
        let (settings, config_gen, base_generation) = {
            let inner = self.inner.lock();
            (inner.settings.clone(), inner.committed_config_gen, inner.generation)
        };
        let material = Material::read(&settings)?;
        let current = self.current.load_full();
        let state = TlsState::build(&settings, &material, &self.ctx(current.as_deref(), LoadMode::Reload))?;
        Ok(Pending {
            kind: PendingKind::Auto { config_gen, base_generation },
            settings,
            state: Some(state),
            _inflight: None,
        })
    }

    /// Re-hashes the files and records whether they still match what is loaded, without
    /// reloading (blocking). The background task runs it every minute when auto-reload is off.
    pub fn refresh_files_match(&self) -> Option<bool> {
        let current = self.current.load_full()?;
        let settings = self.inner.lock().settings.clone();
        let matches = Material::read(&settings).is_ok_and(|m| m.fingerprint == current.fingerprint);
        self.files_match.store(if matches { 1 } else { 2 }, Ordering::Relaxed);
        Some(matches)
    }

    /// Logs the expiry notices that are due (the background task calls it hourly).
    pub fn check_expiry(&self) {
        if let Some(state) = self.state() {
            self.inner.lock().watch.check(state.certs(), unix_now());
        }
    }

    /// The background task: automatic reloads every `tls-auto-reload-interval` seconds (re-read
    /// after every change), a disk comparison every minute when that is 0, and the expiry check
    /// every hour. The server spawns it once; it runs until its runtime stops or it is aborted.
    pub async fn run_background(self: Arc<Self>) {
        const HOUR: Duration = Duration::from_secs(3600);
        let now = tokio::time::Instant::now();
        let mut next_expiry = now + HOUR;
        let mut next_files = now + self.files_period();
        loop {
            let deadline = next_expiry.min(next_files);
            tokio::select! {
                _ = tokio::time::sleep_until(deadline) => {}
                _ = self.wake.notified() => {
                    next_files = tokio::time::Instant::now() + self.files_period();
                    continue;
                }
            }
            let now = tokio::time::Instant::now();
            if now >= next_files {
                let me = self.clone();
                let auto = self.inner.lock().settings.auto_reload_interval > 0;
                let _ = tokio::task::spawn_blocking(move || {
                    if auto {
                        me.reload_if_changed();
                    } else {
                        me.refresh_files_match();
                    }
                })
                .await;
                next_files = tokio::time::Instant::now() + self.files_period();
            }
            if now >= next_expiry {
                self.check_expiry();
                next_expiry = now + HOUR;
            }
        }
    }

    fn files_period(&self) -> Duration {
        match self.inner.lock().settings.auto_reload_interval {
            0 => Duration::from_secs(60),
            n => Duration::from_secs(n),
        }
    }

    /// The state in force, if TLS is in use. One atomic load; cheap enough for every accept.
    pub fn state(&self) -> Option<Arc<TlsState>> {
        self.current.load_full()
    }

    /// A server session for a new client-port connection, with the configuration in force for
    /// `mode`. `None` when TLS is not loaded.
    pub fn accept(&self, mode: ClientAuth) -> Option<TlsSession> {
        let state = self.current.load();
        let state = state.as_ref()?;
        Some(TlsSession::new(state.server_config(mode).clone(), self.counters.clone()))
    }

    /// A server session for an inbound cluster bus connection (mandatory client certificate).
    pub fn accept_bus(&self) -> Option<TlsSession> {
        let state = self.current.load();
        let cfg = state.as_ref()?.bus_server_config()?.clone();
        Some(TlsSession::new(cfg, self.counters.clone()))
    }

    /// The counters (shared with every session).
    pub fn counters(&self) -> &Arc<TlsCounters> {
        &self.counters
    }

    /// The settings in force.
    pub fn settings(&self) -> TlsSettings {
        self.inner.lock().settings.clone()
    }

    /// `tls-expected-peer-name` alone: takes effect at the next handshake, no rebuild.
    pub fn set_expected_peer_names(&self, value: &str) -> Result<(), TlsError> {
        let names = PeerNames::parse(value)?;
        let leading_dot = names.names().iter().filter(|n| n.starts_with('.')).count();
        if leading_dot > 0 {
            tracing::warn!(
                "tls-expected-peer-name has {leading_dot} name(s) with a leading dot: they match any subdomain"
            );
        }
        let mut inner = self.inner.lock();
        inner.settings.expected_peer_names = value.to_owned();
        self.names.store(Arc::new(names));
        Ok(())
    }

    /// `tls-auto-reload-interval` alone: no rebuild, the background task picks it up at once.
    pub fn set_auto_reload_interval(&self, secs: u64) {
        self.inner.lock().settings.auto_reload_interval = secs;
        self.wake.notify_one();
    }

    /// Everything `INFO tls` shows.
    pub fn info(&self) -> TlsInfo {
        let now = unix_now();
        let state = self.state();
        let inner = self.inner.lock();
        let c = &self.counters;
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        TlsInfo {
            enabled: state.is_some(),
            server_cert: state.as_ref().map(|s| CertSummary::of(&s.certs().server, now)),
            client_cert: state.as_ref().and_then(|s| s.certs().client.as_ref().map(|c| CertSummary::of(c, now))),
            ca_cert: state.as_ref().and_then(|s| s.certs().earliest_ca().map(|c| CertSummary::of(c, now))),
            files_match_loaded: match self.files_match.load(Ordering::Relaxed) {
                1 => Some(true),
                2 => Some(false),
                _ => None,
            },
            last_reload: inner.last_reload.clone(),
            reloads: load(&c.reloads),
            reload_failures: load(&c.reload_failures),
            handshake_failures: load(&c.handshake_failures),
            outbound_handshake_failures: load(&c.outbound_handshake_failures),
            connections_current: load(&c.connections_current),
            connections_total: load(&c.connections_total),
            generation: state.as_ref().map_or(0, |s| s.generation()),
        }
    }

    fn ctx<'a>(&'a self, previous: Option<&'a TlsState>, mode: LoadMode) -> BuildCtx<'a> {
        BuildCtx { names: &self.names, previous, mode, now: unix_now() }
    }

    fn after_load(&self, state: &TlsState) {
        log_in_use(state.certs());
        for d in &state.certs().dropped_cas {
            tracing::warn!("TLS CA certificate not trusted: {d}");
        }
        let settings = state.settings();
        if (settings.cluster || settings.replication) && !state.outbound_cert().allows_client_auth() {
            tracing::error!(
                "The TLS certificate used for outgoing links has no clientAuth extended key usage: other nodes \
                 will refuse it; issue it with serverAuth and clientAuth, or set tls-client-cert-file"
            );
        }
        if state.certs().server.has_ns_cert_type {
            tracing::info!(
                "The TLS certificate has a Netscape nsCertType extension: rustls ignores it, OpenSSL peers enforce it"
            );
        }
        self.inner.lock().watch.check(state.certs(), unix_now());
    }

    fn record(&self, result: Result<(), String>) {
        let counter = if result.is_ok() { &self.counters.reloads } else { &self.counters.reload_failures };
        TlsCounters::bump(counter);
        self.inner.lock().last_reload = Some(ReloadRecord { at: unix_now(), result });
    }
}

impl Default for TlsManager {
    fn default() -> Self {
        TlsManager::new()
    }
}

/// Decrements the in-flight CONFIG SET count when a build is committed or dropped.
#[derive(Debug)]
struct InflightGuard(Arc<AtomicUsize>);

impl Drop for InflightGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

fn path_text(p: &Option<std::path::PathBuf>) -> String {
    p.as_ref().map_or_else(String::new, |p| p.display().to_string())
}

pub(crate) fn unix_now() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64)
}
