//! The one place a loaded directive becomes a value: the `.conf` parser, the toml loader and
//! the command line all go through [`Loader`], then [`Loader::finish`] runs the checks Valkey
//! runs once everything is read.

use super::table::{self, APPEND, DirId, FILE_ONLY, NO_EFFECT, TABLE};
use super::value::{self, Ty, Value};
use super::{FatalConfigError, LoadedConfig, Settings};

/// Valkey reads these old names and ignores them (its `deprecated_configs[]`), with exactly one
/// argument.
const DEPRECATED: [&str; 3] = ["list-max-ziplist-entries", "list-max-ziplist-value", "lua-replicate-commands"];

/// Accumulates directives over one startup load (files, includes, stdin, command line).
#[derive(Debug, Clone)]
pub struct Loader {
    settings: Settings,
    /// APPEND rows already set during this load: the first occurrence replaces the default,
    /// later ones append (Valkey's `save_loaded`, shared by every file and the command line).
    seen: Vec<bool>,
}

impl Default for Loader {
    fn default() -> Self {
        Loader::new()
    }
}

impl Loader {
    /// Starts from the defaults.
    pub fn new() -> Loader {
        Loader { settings: Settings::defaults(), seen: vec![false; TABLE.len()] }
    }

    /// The values so far.
    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    /// Applies one `.conf` line already split into arguments (`argv[0]` is the directive),
    /// following Valkey's `loadServerConfigFromString` step by step; `include` is the caller's.
    /// The error is Valkey's reason text.
    pub fn apply_line(&mut self, argv: &[String]) -> Result<(), String> {
        let name = argv[0].to_ascii_lowercase();
        let argc = argv.len();
        if let Some(id) = table::find(&name).filter(|id| !TABLE[*id].has(FILE_ONLY)) {
            let ty = TABLE[id].ty;
            if !ty.multi_arg() && argc != 2 {
                return Err("wrong number of arguments".into());
            }
            // `bind "a b"` and `--save "900 1"` put several values in one argument.
            let args =
                if ty.multi_arg() && argc == 2 && !argv[1].is_empty() { split(&argv[1])? } else { argv[1..].to_vec() };
            return self.apply(id, args);
        }
        if argc == 2 && DEPRECATED.contains(&name.as_str()) {
            return Ok(());
        }
        if let Some(id) = table::find(&name).filter(|id| TABLE[*id].has(FILE_ONLY)) {
            return self.apply(id, argv[1..].to_vec());
        }
        if name.contains('.') {
            return self.apply_module_config(&argv[0], &argv[1..]);
        }
        if name == "sentinel" {
            // A bare `sentinel` is how Valkey's own main() spots sentinel mode; the loader skips it.
            return if argc == 1 { Ok(()) } else { Err("sentinel directive while not in sentinel mode".into()) };
        }
        Err("Bad directive or wrong number of arguments".into())
    }

    /// Sets directive `id` from its arguments (already split for multi-argument types).
    pub fn apply(&mut self, id: DirId, args: Vec<String>) -> Result<(), String> {
        let d = &TABLE[id];
        if let Ty::Lines { min, max } = d.ty
            && (args.len() < min || args.len() > max)
        {
            return Err("Bad directive or wrong number of arguments".into());
        }
        let base = self.settings.get(id);
        let mut v = value::parse(d, &args, base)?;
        if d.has(APPEND) && self.seen[id] {
            v = append(base, v, &args);
        }
        self.seen[id] = true;
        self.settings.set(id, v);
        Ok(())
    }

    /// Stores `<module>.<name> value...`, the values joined by spaces; the last one of a name
    /// wins, as in Valkey's `module_configs_queue`.
    pub fn apply_module_config(&mut self, name: &str, values: &[String]) -> Result<(), String> {
        if values.is_empty() {
            return Err("Module config specified without value".into());
        }
        let mut lines = self.settings.lines(table::MODULE_CONFIG).to_vec();
        lines.retain(|l| l[0] != name);
        lines.push(vec![name.to_string(), values.join(" ")]);
        self.settings.set(table::MODULE_CONFIG, Value::Lines(lines));
        Ok(())
    }

    /// Runs the checks Valkey runs after reading everything and lists the directives set to a
    /// value hotkv does not act on yet.
    pub fn finish(self, config_file: Option<std::path::PathBuf>) -> Result<LoadedConfig, FatalConfigError> {
        let mut settings = self.settings;
        let mut warnings = Vec::new();
        if let Some(reason) = bus_protection_error(&settings) {
            return Err(FatalConfigError::Unsafe { reason });
        }
        check_loaded(&mut settings, &mut warnings).map_err(|reason| FatalConfigError::Config { reason })?;
        let no_effect = (0..TABLE.len())
            .filter(|id| TABLE[*id].has(NO_EFFECT) && !settings.is_default(*id))
            .map(|id| TABLE[id].name)
            .collect();
        Ok(LoadedConfig { settings, config_file, no_effect, warnings })
    }
}

/// Splits one argument holding several values, as Valkey re-splits a lone multi-arg value.
fn split(arg: &str) -> Result<Vec<String>, String> {
    let parts = hotkv_protocol::split_args(arg.as_bytes()).map_err(|e| e.to_string())?;
    Ok(parts.into_iter().map(|p| String::from_utf8_lossy(&p).into_owned()).collect())
}

/// A repeated APPEND directive adds to what the earlier lines set; `save ""` still clears.
fn append(old: &Value, new: Value, args: &[String]) -> Value {
    match (old, new) {
        (Value::Ints(_), Value::Ints(n)) if args.len() == 1 && args[0].is_empty() => Value::Ints(n),
        (Value::Ints(o), Value::Ints(n)) => Value::Ints([o.clone(), n].concat()),
        (Value::Lines(o), Value::Lines(n)) => Value::Lines([o.clone(), n].concat()),
        (_, n) => n,
    }
}

/// The table of databases is allocated whole at startup: a count whose table alone would not
/// fit in this machine's memory is refused here, with a reason, rather than left to abort the
/// process when the allocation fails (Valkey's `databases 2147483647` does that).
fn databases_fit(databases: u64) -> Result<(), String> {
    let most = hotkv_engine::keyspace::MAX_DATABASES as u64;
    if databases > most {
        return Err(format!("databases {databases} is more than the {most} databases hotkv can address"));
    }
    let needed = databases.saturating_mul(hotkv_engine::keyspace::DB_HANDLE_BYTES as u64);
    let (pages, page) = (sysconf(libc::_SC_PHYS_PAGES), sysconf(libc::_SC_PAGESIZE));
    let memory = pages.saturating_mul(page);
    if memory > 0 && needed > memory / 2 {
        return Err(format!(
            "databases {databases} needs {needed} bytes for its table alone, more than half of this machine's \
             memory ({memory} bytes)"
        ));
    }
    Ok(())
}

/// A `sysconf` value, 0 when the system does not know it.
fn sysconf(name: libc::c_int) -> u64 {
    #[allow(unsafe_code)]
    // SAFETY: sysconf takes a constant and returns a number; it touches no memory of ours.
    let v = unsafe { libc::sysconf(name) };
    u64::try_from(v).unwrap_or(0)
}

/// The whole-configuration checks of `loadServerConfigFromString` and Valkey's startup, plus
/// the Redis bus-protection rule; they may adjust values the way Valkey does (with a warning).
fn check_loaded(s: &mut Settings, warnings: &mut Vec<String>) -> Result<(), String> {
    let cluster = s.bool(table::CLUSTER_ENABLED);
    if cluster && !s.list(table::REPLICAOF).is_empty() {
        return Err("replicaof directive not allowed in cluster mode".into());
    }
    if cluster && s.int(table::DATABASES) > 1 {
        warnings.push(format!(
            "WARNING: Changing databases number from {} to 1 since we are in cluster mode",
            s.int(table::DATABASES)
        ));
        s.set(table::DATABASES, Value::Int(1));
    }
    normalize(s);
    databases_fit(s.int(table::DATABASES) as u64)?;
    if !s.lines(table::MODULE_CONFIG).is_empty() && s.lines(table::LOADMODULE).is_empty() {
        return Err(
            "Module Configuration detected without loadmodule directive or no ApplyConfig call: aborting".into()
        );
    }
    let oom = s.ints(table::OOM_SCORE_ADJ_VALUES);
    if oom[1] < oom[0] || oom[2] < oom[1] {
        warnings.push(
            "The oom-score-adj-values configuration may not work for non-privileged processes! \
             Please consult the documentation."
                .into(),
        );
    }
    Ok(())
}

/// Valkey accepts any `hz` but runs within 1-500 and shows the clamped value (`updateHZ`); the
/// same happens after CONFIG SET.
pub(crate) fn normalize(s: &mut Settings) {
    let hz = s.int(table::HZ);
    if !(1..=500).contains(&hz) {
        s.set(table::HZ, Value::Int(hz.clamp(1, 500)));
    }
}

/// Redis's `cluster-bus-port-protected-mode`: a cluster node with protection on must run the
/// bus over TLS.
fn bus_protection_error(s: &Settings) -> Option<&'static str> {
    let on =
        s.bool(table::CLUSTER_ENABLED) && s.bool(table::CLUSTER_BUS_PORT_PROTECTED_MODE) && !s.bool(table::TLS_CLUSTER);
    on.then_some(
        "cluster-bus-port-protected-mode is enabled but tls-cluster is disabled: the cluster bus port of this node \
         would take any host that reaches it as a node of the cluster. Set 'tls-cluster yes', so that the other \
         nodes must show a certificate tls-ca-cert-file trusts, or set 'cluster-bus-port-protected-mode no' if \
         only trusted hosts can reach the port (a firewall, say)",
    )
}

/// The CONFIG SET form of the bus-protection rule, judged on the final values of one CONFIG SET:
/// the directive and reason to report, naming whichever of the two the command changed.
pub(crate) fn bus_protection_set_error(old: &Settings, new: &Settings) -> Option<(&'static str, &'static str)> {
    bus_protection_error(new)?;
    if new.bool(table::CLUSTER_BUS_PORT_PROTECTED_MODE) != old.bool(table::CLUSTER_BUS_PORT_PROTECTED_MODE) {
        return Some((
            "cluster-bus-port-protected-mode",
            "can't enable cluster-bus-port-protected-mode while tls-cluster is disabled",
        ));
    }
    Some((
        "tls-cluster",
        "can't disable tls-cluster while cluster-bus-port-protected-mode is enabled: the bus would take any host; \
         set cluster-bus-port-protected-mode no first, or in the same command",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(l: &mut Loader, s: &str) -> Result<(), String> {
        let argv: Vec<String> = s.split(' ').map(str::to_string).collect();
        l.apply_line(&argv)
    }

    #[test]
    fn database_counts_that_cannot_be_allocated_are_refused() {
        assert_eq!(databases_fit(16), Ok(()));
        assert_eq!(databases_fit(262_144), Ok(()));
        assert_eq!(
            databases_fit(262_145).unwrap_err(),
            "databases 262145 is more than the 262144 databases hotkv can address"
        );
        let err = crate::config::conf::load_str("databases 2147483647\n").err().unwrap().to_string();
        assert!(err.contains("databases 2147483647 is more than"), "{err}");
    }

    #[test]
    fn save_appends_after_the_first_line() {
        let mut l = Loader::new();
        line(&mut l, "save 900 1").unwrap();
        line(&mut l, "save 300 10").unwrap();
        assert_eq!(l.settings().ints(table::SAVE), [900, 1, 300, 10]);
        l.apply_line(&["save".into(), "".into()]).unwrap();
        assert!(l.settings().ints(table::SAVE).is_empty());
        line(&mut l, "save 60 5").unwrap();
        assert_eq!(l.settings().ints(table::SAVE), [60, 5]);
    }

    #[test]
    fn names_and_arity() {
        let mut l = Loader::new();
        assert_eq!(line(&mut l, "PORT 7000"), Ok(()));
        assert_eq!(l.settings().int(table::PORT), 7000);
        assert_eq!(line(&mut l, "port 1 2"), Err("wrong number of arguments".into()));
        assert_eq!(line(&mut l, "nosuch 1"), Err("Bad directive or wrong number of arguments".into()));
        assert_eq!(line(&mut l, "list-max-ziplist-entries 5"), Ok(()));
        assert_eq!(line(&mut l, "rename-command a"), Err("Bad directive or wrong number of arguments".into()));
        assert_eq!(line(&mut l, "sentinel"), Ok(()));
        assert!(line(&mut l, "sentinel monitor x").is_err());
        assert_eq!(line(&mut l, "mod.opt"), Err("Module config specified without value".into()));
        line(&mut l, "slaveof 10.0.0.1 6380").unwrap();
        assert_eq!(l.settings().list(table::REPLICAOF), ["10.0.0.1", "6380"]);
        l.apply_line(&["bind".into(), "10.0.0.1 ::1".into()]).unwrap();
        assert_eq!(l.settings().list(table::BIND), ["10.0.0.1", "::1"]);
    }

    #[test]
    fn whole_configuration_checks() {
        let mut l = Loader::new();
        line(&mut l, "cluster-enabled yes").unwrap();
        line(&mut l, "replicaof h 1").unwrap();
        assert!(l.finish(None).unwrap_err().to_string().contains("replicaof directive not allowed in cluster mode"));

        let mut l = Loader::new();
        line(&mut l, "cluster-enabled yes").unwrap();
        line(&mut l, "hz 1000").unwrap();
        let c = l.finish(None).unwrap();
        assert_eq!(c.settings.int(table::DATABASES), 1);
        assert_eq!(c.settings.int(table::HZ), 500);
        assert!(c.no_effect.is_empty(), "cluster mode works: {:?}", c.no_effect);
        assert_eq!(c.warnings.len(), 1);

        let mut l = Loader::new();
        line(&mut l, "cluster-enabled yes").unwrap();
        line(&mut l, "cluster-bus-port-protected-mode yes").unwrap();
        assert!(l.clone().finish(None).unwrap_err().to_string().contains("'cluster-bus-port-protected-mode no'"));
        line(&mut l, "tls-cluster yes").unwrap();
        assert!(l.finish(None).is_ok());

        let mut l = Loader::new();
        line(&mut l, "mymod.opt 1 2").unwrap();
        assert!(l.clone().finish(None).is_err());
        line(&mut l, "loadmodule /x.so").unwrap();
        let c = l.finish(None).unwrap();
        assert_eq!(c.settings.lines(table::MODULE_CONFIG), [vec!["mymod.opt".to_string(), "1 2".to_string()]]);
    }
}
