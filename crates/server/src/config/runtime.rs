//! CONFIG GET, SET and REWRITE as pure functions over [`Settings`]; the command handlers only
//! turn their results into replies and run the hooks.
//!
//! Semantics and error texts follow Valkey 8's `configGetCommand` and `configSetCommand`.

use std::collections::HashSet;
use std::fmt;
use std::path::Path;

use super::Settings;
use super::glob::string_match;
use super::load;
use super::table::{self, DirId, FILE_ONLY, HIDDEN, Hook, MUTABLE, PROTECTED, TABLE, VOLATILE};
use super::value::{self, Ty};

/// CONFIG GET: every directive matching one of `patterns`, with its value.
///
/// A pattern without `*`, `?` or `[` is looked up by name or alias and reported under the name
/// as the client typed it; a glob pattern matches names and aliases (case-insensitively) and
/// reports each under the name it matched, so `*of` gives both `replicaof` and `slaveof`, as
/// in Valkey 8. Hidden directives answer only to their exact name; file-only ones never. No
/// name is reported twice. The order is the table's, by pattern.
pub fn get(settings: &Settings, patterns: &[&[u8]]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut seen = HashSet::new();
    let mut add = |name: &str, id: DirId, out: &mut Vec<(String, String)>| {
        if seen.insert(name.to_ascii_lowercase()) {
            out.push((name.to_string(), settings.display(id)));
        }
    };
    for pattern in patterns {
        if !pattern.iter().any(|c| matches!(c, b'*' | b'?' | b'[')) {
            let name = String::from_utf8_lossy(pattern);
            if let Some(id) = table::find(&name).filter(|id| !TABLE[*id].has(FILE_ONLY)) {
                add(&name, id, &mut out);
            }
            continue;
        }
        for (id, d) in TABLE.iter().enumerate() {
            if d.has(HIDDEN | FILE_ONLY) {
                continue;
            }
            for name in std::iter::once(&d.name).chain(d.aliases) {
                if string_match(pattern, name.as_bytes(), true) {
                    add(name, id, &mut out);
                }
            }
        }
    }
    out
}

/// A refused CONFIG SET; `Display` is the error reply's text (without the leading `-`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SetError {
    /// No such directive (the name as given).
    Unknown(String),
    /// The directive exists but the change was refused.
    Failed {
        /// The directive as given for immutable, protected and duplicate errors, its canonical
        /// name for bad values and failed hooks (Valkey reports them so).
        name: String,
        /// Valkey's reason.
        reason: String,
    },
}

impl SetError {
    /// The error to reply when a hook failed after [`set`] (the caller restores the old
    /// settings first): `name` is the [`HookRun::name`] of the failing hook.
    pub fn hook_failed(name: &str, reason: &str) -> SetError {
        SetError::Failed { name: name.to_string(), reason: reason.to_string() }
    }
}

impl fmt::Display for SetError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SetError::Unknown(name) => write!(f, "ERR Unknown option or number of arguments for CONFIG SET - '{name}'"),
            SetError::Failed { name, reason } => {
                write!(f, "ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}")
            }
        }
    }
}

impl std::error::Error for SetError {}

/// A hook a CONFIG SET needs, with the directive that asked for it first (named in the error
/// if the hook fails).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HookRun {
    /// The hook.
    pub hook: Hook,
    /// Canonical name of the first changed directive with this hook.
    pub name: &'static str,
}

/// The result of a successful [`set_as`].
#[derive(Debug, Clone, PartialEq)]
pub struct SetOutcome {
    /// All values after the change.
    pub settings: Settings,
    /// Each distinct hook to run, in the order the directives were given.
    pub hooks: Vec<HookRun>,
}

/// CONFIG SET from a client that is not local (protected directives need
/// `enable-protected-configs yes`). All or nothing: on error nothing changed. On success the
/// caller runs the hooks in order and, if one fails, puts `settings` back and replies
/// [`SetError::hook_failed`].
pub fn set(settings: &Settings, pairs: &[(&[u8], &[u8])]) -> Result<(Settings, Vec<Hook>), SetError> {
    let out = set_as(settings, pairs, false)?;
    Ok((out.settings, out.hooks.into_iter().map(|h| h.hook).collect()))
}

/// CONFIG SET, saying whether the client is local (`enable-protected-configs local` allows
/// protected directives to local clients only).
pub fn set_as(settings: &Settings, pairs: &[(&[u8], &[u8])], local_client: bool) -> Result<SetOutcome, SetError> {
    let ids = resolve(settings, pairs, local_client)?;
    let mut new = settings.clone();
    let mut hooks: Vec<HookRun> = Vec::new();
    for (&id, (_, raw)) in ids.iter().zip(pairs) {
        let d = &TABLE[id];
        let text = String::from_utf8_lossy(raw);
        // Valkey splits a multi-argument value on single spaces, and "" into no argument.
        let args: Vec<String> = match (d.ty.multi_arg(), text.is_empty()) {
            (true, true) => Vec::new(),
            (true, false) => text.split(' ').map(str::to_string).collect(),
            (false, _) => vec![text.into_owned()],
        };
        let old = new.get(id).clone();
        let v = value::parse(d, &args, &old).map_err(|reason| SetError::Failed { name: d.name.to_string(), reason })?;
        let changed = v != old || d.has(VOLATILE) || always_applied(id, d.ty);
        new.set(id, v);
        if let (true, Some(hook)) = (changed, d.apply)
            && !hooks.iter().any(|h| h.hook == hook)
        {
            hooks.push(HookRun { hook, name: d.name });
        }
    }
    load::normalize(&mut new);
    if let Some((name, reason)) = load::bus_protection_set_error(settings, &new) {
        return Err(SetError::Failed { name: name.into(), reason: reason.into() });
    }
    Ok(SetOutcome { settings: new, hooks })
}

/// Finds every directive before changing anything; the first problem wins, as in Valkey.
fn resolve(settings: &Settings, pairs: &[(&[u8], &[u8])], local_client: bool) -> Result<Vec<DirId>, SetError> {
    let mut ids = Vec::with_capacity(pairs.len());
    for (name, _) in pairs {
        let name = String::from_utf8_lossy(name);
        let refuse = |reason: &str| SetError::Failed { name: name.to_string(), reason: reason.into() };
        let Some(id) = table::find(&name).filter(|id| !TABLE[*id].has(FILE_ONLY)) else {
            return Err(SetError::Unknown(name.into_owned()));
        };
        let d = &TABLE[id];
        if !d.has(MUTABLE) {
            return Err(refuse("can't set immutable config"));
        }
        if d.has(PROTECTED) && !protected_allowed(settings, local_client) {
            return Err(refuse("can't set protected config"));
        }
        if ids.contains(&id) {
            return Err(refuse("duplicate parameter"));
        }
        ids.push(id);
    }
    Ok(ids)
}

/// Valkey's `allowProtectedAction`.
fn protected_allowed(settings: &Settings, local_client: bool) -> bool {
    match settings.str(table::ENABLE_PROTECTED_CONFIGS) {
        "yes" => true,
        "local" => local_client,
        _ => false,
    }
}

/// Valkey's special setters report a change even for the same value, so their hooks always run.
fn always_applied(id: DirId, ty: Ty) -> bool {
    id == table::DIR
        || matches!(ty, Ty::Bind | Ty::Save | Ty::BufferLimits | Ty::Events | Ty::ReplicaOf | Ty::Percentiles)
}

/// CONFIG REWRITE: writes `settings` into the configuration file at `path`, keeping its
/// comments and layout (`.toml` files stay toml). See [`super::rewrite`].
pub fn rewrite(settings: &Settings, path: &Path) -> std::io::Result<()> {
    super::rewrite::rewrite_file(settings, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(s: &Settings, pats: &[&str]) -> Vec<(String, String)> {
        let pats: Vec<&[u8]> = pats.iter().map(|p| p.as_bytes()).collect();
        get(s, &pats)
    }

    fn names(v: &[(String, String)]) -> Vec<&str> {
        v.iter().map(|(n, _)| n.as_str()).collect()
    }

    fn s(cur: &Settings, pairs: &[(&str, &str)]) -> Result<SetOutcome, SetError> {
        let pairs: Vec<(&[u8], &[u8])> = pairs.iter().map(|(a, b)| (a.as_bytes(), b.as_bytes())).collect();
        set_as(cur, &pairs, false)
    }

    #[test]
    fn get_exact_glob_alias_hidden() {
        let d = Settings::defaults();
        assert_eq!(g(&d, &["port"]), [("port".to_string(), "6379".to_string())]);
        assert_eq!(g(&d, &["PORT", "port"]), [("PORT".to_string(), "6379".to_string())]);
        assert!(g(&d, &["nosuch", "user", "rename-command"]).is_empty());
        let r = g(&d, &["maxmemory", "maxmemory*", "bind", "*of"]);
        let n = names(&r);
        assert!(n.contains(&"slaveof") && n.contains(&"replicaof") && n.contains(&"bind"));
        assert!(n.contains(&"maxmemory-clients") && n.contains(&"maxmemory-samples"));
        assert_eq!(n.iter().filter(|x| **x == "maxmemory").count(), 1);
        let all = g(&d, &["*"]);
        assert!(!names(&all).contains(&"key-load-delay"));
        assert!(names(&all).contains(&"hash-max-ziplist-entries"));
        assert_eq!(g(&d, &["key-load-delay"]).len(), 1);
        assert_eq!(
            names(&g(&d, &["tls-*-file"])),
            [
                "tls-cert-file",
                "tls-key-file",
                "tls-client-cert-file",
                "tls-client-key-file",
                "tls-dh-params-file",
                "tls-ca-cert-file"
            ]
        );
    }

    #[test]
    fn set_changes_and_collects_hooks_once() {
        let d = Settings::defaults();
        let out =
            s(&d, &[("maxmemory", "10mb"), ("port", "7000"), ("bind", "127.0.0.1 ::1"), ("timeout", "3")]).unwrap();
        assert_eq!(out.settings.int(table::MAXMEMORY), 10 << 20);
        assert_eq!(out.settings.list(table::BIND), ["127.0.0.1", "::1"]);
        let hooks: Vec<Hook> = out.hooks.iter().map(|h| h.hook).collect();
        assert_eq!(hooks, [Hook::Maxmemory, Hook::Listeners, Hook::Clients]);
        assert_eq!(out.hooks[1].name, "port");
        // Same value: no hook, except for volatile and special directives.
        let out = s(&d, &[("maxmemory", "0"), ("tls-cert-file", ""), ("save", "")]).unwrap();
        assert_eq!(out.hooks.iter().map(|h| h.hook).collect::<Vec<_>>(), [Hook::Tls]);
        assert!(out.settings.ints(table::SAVE).is_empty());
        let out = s(&d, &[("hz", "1000"), ("slave-read-only", "no")]).unwrap();
        assert_eq!(out.settings.int(table::HZ), 500);
        assert!(!out.settings.bool(table::REPLICA_READ_ONLY));
        let out = s(&d, &[("client-output-buffer-limit", "pubsub 1mb 1mb 5")]).unwrap();
        assert_eq!(
            out.settings.display(table::CLIENT_OUTPUT_BUFFER_LIMIT),
            "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 1048576 5"
        );
    }

    #[test]
    fn set_errors_are_valkeys_and_change_nothing() {
        let d = Settings::defaults();
        let e = s(&d, &[("maxmemory", "1mb"), ("nosuch", "1")]).unwrap_err();
        assert_eq!(e.to_string(), "ERR Unknown option or number of arguments for CONFIG SET - 'nosuch'");
        let e = s(&d, &[("Daemonize", "yes")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ERR CONFIG SET failed (possibly related to argument 'Daemonize') - can't set immutable config"
        );
        let e = s(&d, &[("maxmemory", "1"), ("MAXMEMORY", "2")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "ERR CONFIG SET failed (possibly related to argument 'MAXMEMORY') - duplicate parameter"
        );
        let e = s(&d, &[("hash-max-listpack-entries", "1"), ("hash-max-ziplist-entries", "2")]).unwrap_err();
        assert!(e.to_string().contains("duplicate parameter"));
        let e = s(&d, &[("maxmemory", "10000001"), ("maxmemory-clients", "200%"), ("client-query-buffer-limit", "x")])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "ERR CONFIG SET failed (possibly related to argument 'maxmemory-clients') - \
            percentage argument must be less or equal to 100"
        );
        let e = s(&d, &[("slave-priority", "x")]).unwrap_err();
        assert!(e.to_string().contains("argument 'replica-priority'"));
        let e = s(&d, &[("dir", "/tmp")]).unwrap_err();
        assert!(e.to_string().ends_with("can't set protected config"));
        assert!(s(&d, &[("user", "x")]).is_err());
        let e = SetError::hook_failed("port", "Unable to listen on this port. Check server logs.");
        assert_eq!(
            e.to_string(),
            "ERR CONFIG SET failed (possibly related to argument 'port') - \
            Unable to listen on this port. Check server logs."
        );
    }

    #[test]
    fn protected_configs_follow_enable_protected_configs() {
        let mut d = Settings::defaults();
        d.set(table::ENABLE_PROTECTED_CONFIGS, value::Value::Word("local"));
        assert!(s(&d, &[("dir", "/tmp")]).is_err());
        let pairs: [(&[u8], &[u8]); 1] = [(b"dir", b"/tmp")];
        let out = set_as(&d, &pairs, true).unwrap();
        assert_eq!(out.hooks[0].hook, Hook::WorkingDir);
    }

    #[test]
    fn bus_protection_is_judged_on_the_final_values() {
        let mut d = Settings::defaults();
        d.set(table::CLUSTER_ENABLED, value::Value::Bool(true));
        let e = s(&d, &[("cluster-bus-port-protected-mode", "yes")]).unwrap_err();
        assert!(e.to_string().contains("can't enable cluster-bus-port-protected-mode while tls-cluster is disabled"));
        let both = s(&d, &[("cluster-bus-port-protected-mode", "yes"), ("tls-cluster", "yes")]).unwrap();
        let e = s(&both.settings, &[("tls-cluster", "no")]).unwrap_err();
        assert!(e.to_string().contains("argument 'tls-cluster') - can't disable tls-cluster"));
    }

    #[test]
    fn every_visible_value_sets_back_to_itself() {
        // Valkey's "CONFIG sanity" test: CONFIG SET of what CONFIG GET shows changes nothing.
        let mut d = Settings::defaults();
        d.set(table::ENABLE_PROTECTED_CONFIGS, value::Value::Word("yes"));
        for (name, v) in g(&d, &["*"]) {
            let id = table::find(&name).unwrap();
            if !TABLE[id].has(MUTABLE) {
                continue;
            }
            let out = s(&d, &[(&name, &v)]).unwrap_or_else(|e| panic!("{name} {v:?}: {e}"));
            assert_eq!(out.settings.get(id), d.get(id), "{name}");
        }
    }
}
