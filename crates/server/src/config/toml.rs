//! hotkv.toml: the same directives as `.conf`, grouped in sections (`[network] port = 6379`,
//! `[tls] cert_file = "..."`), each key the table's toml path.
//!
//! A value may be a string, an integer, a boolean (`cluster = true` means `yes`) or, for
//! directives that take several values, an array or a space-separated string
//! (`bind = "10.0.0.1 127.0.0.1"` or `bind = ["10.0.0.1", "127.0.0.1"]`). The file-only
//! directives take an array with one entry per occurrence, each an array of arguments or a
//! string split like a `.conf` line (`rename_command = [["FLUSHALL", ""]]`). Unknown sections
//! and keys are fatal errors naming the file, the line and the key.

use std::path::Path;

use toml_edit::{Item, Value as TomlValue};

use super::load::Loader;
use super::table::{self, DirId, TABLE};
use super::value::{Ty, Value, format_memory};
use super::{FatalConfigError, LoadedConfig, Settings};

/// Loads a hotkv.toml file over the defaults; the file becomes the one CONFIG REWRITE writes.
pub fn load_file(path: &Path) -> Result<LoadedConfig, FatalConfigError> {
    let mut loader = Loader::new();
    apply_file(&mut loader, path)?;
    loader.finish(Some(std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf())))
}

/// Loads hotkv.toml text over the defaults; `file` only names the source in errors.
pub fn load_str(text: &str, file: &Path) -> Result<LoadedConfig, FatalConfigError> {
    let mut loader = Loader::new();
    apply_str(&mut loader, text, file)?;
    loader.finish(None)
}

/// Reads a hotkv.toml file into `loader`.
pub fn apply_file(loader: &mut Loader, path: &Path) -> Result<(), FatalConfigError> {
    let bytes = super::conf::read_file(path)?;
    let text = String::from_utf8(bytes).map_err(|_| FatalConfigError::Toml {
        file: path.to_path_buf(),
        line: 0,
        text: String::new(),
        reason: "the file is not UTF-8".into(),
    })?;
    apply_str(loader, &text, path)
}

/// Applies hotkv.toml text to `loader`.
pub fn apply_str(loader: &mut Loader, text: &str, file: &Path) -> Result<(), FatalConfigError> {
    let fail = |span: Option<std::ops::Range<usize>>, reason: String| {
        let (line, shown) = span.map_or((0, String::new()), |s| line_at(text, s.start));
        FatalConfigError::Toml { file: file.to_path_buf(), line, text: shown, reason }
    };
    let doc = toml_edit::Document::parse(text).map_err(|e| fail(e.span(), e.message().trim_end().to_string()))?;
    let root = doc.as_table();
    for (section, item) in root.iter() {
        let key_span = root.key(section).and_then(|k| k.span());
        if !TABLE.iter().any(|d| d.section() == section) {
            let reason = match item.is_table_like() {
                true => format!("unknown section [{section}]"),
                false => format!("key '{section}' is outside a section"),
            };
            return Err(fail(key_span, reason));
        }
        let Some(entries) = item.as_table_like() else {
            return Err(fail(key_span, format!("'{section}' must be a section ([{section}])")));
        };
        for (key, item) in entries.iter() {
            let span = entries.get_key_value(key).and_then(|(k, _)| k.span());
            let Some(id) = table::find_toml(&format!("{section}.{key}")) else {
                return Err(fail(span, format!("unknown key '{key}' in section [{section}]")));
            };
            apply_item(loader, id, item).map_err(|reason| fail(span, reason))?;
        }
    }
    Ok(())
}

fn apply_item(loader: &mut Loader, id: DirId, item: &Item) -> Result<(), String> {
    let d = &TABLE[id];
    let Some(v) = item.as_value() else {
        return Err(format!("{} must be a value, not a table", d.toml));
    };
    if let Ty::Lines { .. } = d.ty {
        for entry in occurrences(v)? {
            if id == table::MODULE_CONFIG {
                let (name, values) = entry.split_first().ok_or("Module config specified without value")?;
                loader.apply_module_config(name, values)?;
            } else {
                loader.apply(id, entry)?;
            }
        }
        return Ok(());
    }
    let args = match v {
        // One string holds all the values of a multi-value directive, as in `.conf` files.
        TomlValue::String(s) if d.ty.multi_arg() && !s.value().is_empty() => split(s.value())?,
        TomlValue::Array(a) if d.ty.multi_arg() => flatten(a)?,
        TomlValue::Array(a) if a.len() == 1 => flatten(a)?,
        TomlValue::Array(_) => return Err("wrong number of arguments".into()),
        scalar => vec![scalar_text(scalar)?],
    };
    loader.apply(id, args)
}

/// One entry per occurrence of a file-only directive.
fn occurrences(v: &TomlValue) -> Result<Vec<Vec<String>>, String> {
    let one = |v: &TomlValue| match v {
        TomlValue::Array(a) => flatten(a),
        TomlValue::String(s) => split(s.value()),
        _ => Err("expected an array of arguments or a string".to_string()),
    };
    match v {
        TomlValue::Array(a) => a.iter().map(one).collect(),
        v => Ok(vec![one(v)?]),
    }
}

fn flatten(a: &toml_edit::Array) -> Result<Vec<String>, String> {
    let mut out = Vec::new();
    for v in a.iter() {
        match v {
            TomlValue::Array(inner) => out.extend(flatten(inner)?),
            v => out.push(scalar_text(v)?),
        }
    }
    Ok(out)
}

fn scalar_text(v: &TomlValue) -> Result<String, String> {
    Ok(match v {
        TomlValue::String(s) => s.value().clone(),
        TomlValue::Integer(i) => i.value().to_string(),
        TomlValue::Float(f) => f.value().to_string(),
        TomlValue::Boolean(b) => if *b.value() { "yes" } else { "no" }.to_string(),
        _ => return Err("expected a string, a number or a boolean".into()),
    })
}

fn split(s: &str) -> Result<Vec<String>, String> {
    let parts = hotkv_protocol::split_args(s.as_bytes()).map_err(|e| e.to_string())?;
    Ok(parts.into_iter().map(|p| String::from_utf8_lossy(&p).into_owned()).collect())
}

/// The 1-based line holding byte `offset`, and that line trimmed.
fn line_at(text: &str, offset: usize) -> (usize, String) {
    let offset = offset.min(text.len());
    let start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    (text[..offset].matches('\n').count() + 1, text[start..end].trim().to_string())
}

/// The toml value CONFIG REWRITE writes for directive `id`: booleans as booleans, plain
/// numbers as integers, memory with a unit and everything else as the `.conf` text.
pub fn to_toml(s: &Settings, id: DirId) -> TomlValue {
    let d = &TABLE[id];
    match (d.ty, s.get(id)) {
        (Ty::Bool, Value::Bool(b)) => TomlValue::from(*b),
        (Ty::Int { .. }, Value::Int(n)) => TomlValue::from(*n),
        (Ty::Memory { .. } | Ty::MemoryPercent { .. }, Value::Int(n)) if *n >= 0 => match format_memory(*n) {
            text if text.parse::<i64>().is_ok() => TomlValue::from(*n),
            text => TomlValue::from(text),
        },
        (Ty::Lines { .. }, Value::Lines(items)) => {
            let mut outer = toml_edit::Array::new();
            for item in items {
                outer.push(item.iter().map(String::as_str).collect::<toml_edit::Array>());
            }
            TomlValue::Array(outer)
        }
        // `replicaof ""` does not parse; `no one` is how a file says "no primary".
        (Ty::ReplicaOf, Value::List(l)) if l.is_empty() => TomlValue::from("no one"),
        (ty, _) if ty.multi_arg() => {
            let text = super::rewrite::multi_text(s, id);
            TomlValue::from(if text == "\"\"" { String::new() } else { text })
        }
        _ => TomlValue::from(s.display(id)),
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_util::TempDir;
    use super::*;

    fn load(text: &str) -> Result<LoadedConfig, FatalConfigError> {
        load_str(text, Path::new("/etc/hotkv.toml"))
    }

    #[test]
    fn scalars_lists_and_booleans() {
        let c = load(
            "[network]\nbind = \"10.0.0.1 127.0.0.1\"\nport = 0\n[tls]\nport = 7000\nauth_clients = \"yes\"\n\
             cluster = true\n[cluster]\nenabled = true\n[memory]\nmaxmemory = \"1gb\"\n\
             [persistence]\nsave = [[900, 1], [300, 10]]\n[latency]\nlatency_tracking_info_percentiles = [50, 99.5]\n",
        )
        .unwrap();
        let s = &c.settings;
        assert_eq!(s.list(table::BIND), ["10.0.0.1", "127.0.0.1"]);
        assert_eq!(s.int(table::PORT), 0);
        assert_eq!(s.int(table::TLS_PORT), 7000);
        assert!(s.bool(table::TLS_CLUSTER) && s.bool(table::CLUSTER_ENABLED));
        assert_eq!(s.int(table::MAXMEMORY), 1 << 30);
        assert_eq!(s.ints(table::SAVE), [900, 1, 300, 10]);
        assert_eq!(s.display(table::LATENCY_TRACKING_INFO_PERCENTILES), "50 99.5");
        let c = load("network.bind = [\"::1\"]\n[security]\nrename_command = [[\"FLUSHALL\", \"\"], \"CONFIG cfg\"]\n")
            .unwrap();
        assert_eq!(c.settings.list(table::BIND), ["::1"]);
        assert_eq!(c.settings.lines(table::RENAME_COMMAND).len(), 2);
        assert_eq!(c.settings.lines(table::RENAME_COMMAND)[1], ["CONFIG", "cfg"]);
    }

    #[test]
    fn errors_name_file_line_and_key() {
        let e = load("[network]\nport = 6379\n\n[tls]\nnosuch = 1\n").unwrap_err();
        assert_eq!(
            e,
            FatalConfigError::Toml {
                file: "/etc/hotkv.toml".into(),
                line: 5,
                text: "nosuch = 1".into(),
                reason: "unknown key 'nosuch' in section [tls]".into()
            }
        );
        assert!(e.to_string().contains("Reading the configuration file /etc/hotkv.toml, at line 5"));
        let e = load("[nosuch]\nx = 1\n").unwrap_err();
        assert!(e.to_string().ends_with("unknown section [nosuch]"), "{e}");
        let e = load("port = 1\n").unwrap_err();
        assert!(e.to_string().ends_with("key 'port' is outside a section"));
        let e = load("[network]\nport = \"abc\"\n").unwrap_err();
        assert!(e.to_string().ends_with(">>> 'port = \"abc\"'\nargument couldn't be parsed into an integer"));
        let e = load("[network]\nport = [1, 2]\n").unwrap_err();
        assert!(e.to_string().ends_with("wrong number of arguments"));
        let e = load("[network\n").unwrap_err();
        assert!(e.to_string().contains("/etc/hotkv.toml, at line 1"), "{e}");
        let e = load("[tls]\n[tls.extra]\nx = 1\n").unwrap_err();
        assert!(e.to_string().ends_with("unknown key 'extra' in section [tls]"), "{e}");
    }

    #[test]
    fn files_load_and_remember_their_path() {
        let dir = TempDir::new("toml");
        let p = dir.file("hotkv.toml", "[general]\nloglevel = \"warning\"\n");
        let c = load_file(&p).unwrap();
        assert_eq!(c.settings.str(table::LOGLEVEL), "warning");
        assert_eq!(c.config_file.as_deref(), Some(p.as_path()));
        assert!(matches!(load_file(&dir.0.join("none.toml")), Err(FatalConfigError::Open { .. })));
    }

    #[test]
    fn example_files_describe_the_same_node() {
        let conf = super::super::conf::load_str(include_str!("../../../../conf/hotkv.conf")).unwrap();
        let toml = load(include_str!("../../../../conf/hotkv.toml")).unwrap();
        assert_eq!(conf.settings, toml.settings);
        assert!(conf.no_effect.is_empty(), "{:?}", conf.no_effect);
        let s = &conf.settings;
        assert_eq!(s.list(table::BIND), ["127.0.0.1", "-::1"]);
        assert_eq!(s.int(table::PORT), 6379);
        assert!(s.bool(table::PROTECTED_MODE));
        // Apart from bind, the examples show the defaults.
        let mut defaults = Settings::defaults();
        defaults.set(table::BIND, s.get(table::BIND).clone());
        assert_eq!(*s, defaults);
    }

    #[test]
    fn product_doc_example_node_loads_the_same_from_both_formats() {
        // The 7000.conf and hotkv.toml of the "Cluster over TLS" guide, word for word.
        let conf = super::super::conf::load_str(
            "bind 10.0.0.1 127.0.0.1\nport 0\ntls-port 7000\ntls-cert-file /etc/hotkv/tls/node.crt\n\
             tls-key-file /etc/hotkv/tls/node.key\ntls-ca-cert-file /etc/hotkv/tls/ca.crt\ntls-auth-clients yes\n\
             tls-cluster yes\ntls-replication yes\nrequirepass change-me\ncluster-enabled yes\n\
             dir /var/lib/hotkv/7000\n",
        )
        .unwrap();
        let toml = load(
            "[network]\nbind = \"10.0.0.1 127.0.0.1\"\nport = 0\n\n[tls]\nport = 7000\n\
             cert_file = \"/etc/hotkv/tls/node.crt\"\nkey_file = \"/etc/hotkv/tls/node.key\"\n\
             ca_cert_file = \"/etc/hotkv/tls/ca.crt\"\nauth_clients = \"yes\"\ncluster = true\nreplication = true\n\n\
             [security]\nrequirepass = \"change-me\"\n\n[cluster]\nenabled = true\n\n\
             [persistence]\ndir = \"/var/lib/hotkv/7000\"\n",
        )
        .unwrap();
        assert_eq!(conf.settings, toml.settings);
        assert_eq!(conf.settings.str(table::TLS_CA_CERT_FILE), "/etc/hotkv/tls/ca.crt");
        assert_eq!(conf.settings.int(table::DATABASES), 1);
    }

    #[test]
    fn every_value_survives_a_toml_round_trip() {
        let mut s = Settings::defaults();
        for (id, d) in TABLE.iter().enumerate() {
            if matches!(d.ty, Ty::Lines { .. }) {
                continue;
            }
            let doc = format!("[{}]\n{} = {}\n", d.section(), &d.toml[d.section().len() + 1..], to_toml(&s, id));
            let back = load(&doc).unwrap_or_else(|e| panic!("{}: {e}", d.name)).settings;
            assert_eq!(back.get(id), s.get(id), "{}", d.name);
        }
        s.set(table::MAXMEMORY_CLIENTS, Value::Int(-10));
        assert_eq!(to_toml(&s, table::MAXMEMORY_CLIENTS).to_string(), "\"10%\"");
    }
}
