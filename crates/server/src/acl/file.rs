//! Users from files: the `aclfile` (ACL LOAD / ACL SAVE, and at startup) and the `user` lines
//! of the configuration, with Valkey 8.0's error texts (`ACLLoadFromFile`,
//! `ACLLoadConfiguredUsers`, `ACLSaveToFile`).

use std::io::Write as _;
use std::path::{Path, PathBuf};

use super::rules::{Env, RuleError, User, has_spaces, merge_selectors};
use super::{Acl, UserCell};
use crate::config::Settings;
use crate::config::table as t;
use crate::server::Server;

/// Parses an ACL file's text into users. Every line is checked; on any error nothing is
/// returned but the errors, one sentence each, as ACL LOAD replies them.
pub fn parse(text: &[u8], filename: &str, env: &Env<'_>) -> Result<Vec<User>, String> {
    let mut errors = String::new();
    let mut users: Vec<User> = Vec::new();
    for (i, line) in text.split(|&c| c == b'\n').enumerate() {
        let linenum = i + 1;
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        // Valkey splits on single spaces, without quotes: a doubled space is an empty rule.
        let argv: Vec<Vec<u8>> = line.split(|&c| c == b' ').map(<[u8]>::to_vec).collect();
        if argv[0] != b"user" || argv.len() < 2 {
            errors.push_str(&format!("{filename}:{linenum} should start with user keyword followed by the username. "));
            continue;
        }
        let name = String::from_utf8_lossy(&argv[1]).into_owned();
        if has_spaces(&argv[1]) {
            errors.push_str(&format!("'{filename}:{linenum}: username '{name}' contains invalid characters. "));
            continue;
        }
        if users.iter().any(|u| u.name == name) {
            errors.push_str(&format!("WARNING: Duplicate user '{name}' found on line {linenum}. "));
            continue;
        }
        let mut user = User::new(&name, env);
        let merged = match merge_selectors(&argv[2..]) {
            Ok(m) => m,
            Err(_) => {
                errors.push_str(&format!("{filename}:{linenum}: Unmatched parenthesis in selector definition."));
                Vec::new()
            }
        };
        let mut syntax_error = false;
        for op in merged {
            let op = trim_end(&op);
            match user.apply(op, env) {
                Ok(()) => {}
                Err(RuleError::UnknownName) => errors.push_str(&format!(
                    "{filename}:{linenum}: Error in applying operation '{}': {}. ",
                    String::from_utf8_lossy(op),
                    RuleError::UnknownName
                )),
                Err(e) if !syntax_error => {
                    errors.push_str(&format!("{filename}:{linenum}: {e}. "));
                    syntax_error = true;
                }
                Err(_) => {}
            }
        }
        users.push(user);
    }
    if !errors.is_empty() {
        errors.push_str("WARNING: ACL errors detected, no change to the previously active ACL rules was performed");
        return Err(errors);
    }
    if !users.iter().any(|u| u.name == "default") {
        users.push(User::default_user(env));
    }
    Ok(users)
}

/// Reads and parses the ACL file `name` (as configured, relative to `dir`); errors name it as
/// configured.
pub fn read(settings: &Settings, name: &str, env: &Env<'_>) -> Result<Vec<User>, String> {
    let text = std::fs::read(resolve(settings, name))
        .map_err(|e| format!("Error loading ACLs, opening file '{name}': {}", crate::config::os_reason(&e)))?;
    parse(&text, name, env)
}

/// Where the ACL file is: a relative `aclfile` is inside `dir`, where Valkey, which changes
/// into `dir` while reading its configuration, finds it.
pub fn resolve(settings: &Settings, name: &str) -> PathBuf {
    let p = Path::new(name);
    if p.is_absolute() { p.to_path_buf() } else { Path::new(settings.str(t::DIR)).join(p) }
}

/// The text ACL SAVE writes: one `user` line per user, by name.
pub fn render(acl: &Acl) -> String {
    acl.users().iter().map(|c| format!("user {} {}\n", c.name(), c.rules().describe())).collect()
}

/// Writes the ACL file through a temporary file renamed over it, so a crash leaves either
/// the old file or the new one.
pub fn save(acl: &Acl, path: &Path) -> std::io::Result<()> {
    let text = render(acl);
    let tmp = format!("{}.tmp-{}-{}", path.display(), std::process::id(), crate::server::unix_ms());
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).open(&tmp)?;
        f.write_all(text.as_bytes())?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result
}

/// Loads the users of the configuration (`user` lines) or of the `aclfile`, at startup;
/// an error names the problem as Valkey logs it before exiting.
pub fn load_at_startup(srv: &Server) -> Result<(), String> {
    let settings = srv.settings.load();
    let env = srv.acl.env(&srv.registry, &settings);
    let lines = settings.lines(t::USER);
    let aclfile = settings.str(t::ACLFILE);
    if !aclfile.is_empty() && !lines.is_empty() {
        return Err("Configuring Valkey with users defined in valkey.conf and at the same setting an ACL file path \
                    is invalid. This setup is very likely to lead to configuration errors and security holes, please \
                    define either an ACL file or declare users directly in your valkey.conf, but not both."
            .into());
    }
    if !lines.is_empty() {
        let users = configured_users(lines, &srv.acl.default_user(), &env)?;
        srv.acl.replace_all(users);
    }
    if !aclfile.is_empty() {
        let users = read(&settings, aclfile, &env)
            .map_err(|e| format!("Aborting Valkey startup because of ACL errors: {e}"))?;
        srv.acl.replace_all(users);
    }
    Ok(())
}

/// The users of `user` lines, after `default` (which they may redefine from a reset).
fn configured_users(lines: &[Vec<String>], default: &UserCell, env: &Env<'_>) -> Result<Vec<User>, String> {
    let mut users = vec![(*default.rules()).clone()];
    let mut seen: Vec<&str> = Vec::new();
    for line in lines {
        let Some(name) = line.first() else { continue };
        if seen.contains(&name.as_str()) {
            return Err(format!("Error in user declaration '{name}': {}", RuleError::Duplicate));
        }
        seen.push(name);
        if has_spaces(name.as_bytes()) {
            return Err("Spaces not allowed in ACL usernames".into());
        }
        let ops: Vec<Vec<u8>> = line[1..].iter().map(|s| s.as_bytes().to_vec()).collect();
        let merged = merge_selectors(&ops)
            .map_err(|at| format!("Unmatched parenthesis in acl selector starting at '{}'.", line[1 + at]))?;
        let mut user = match users.iter().position(|u| u.name == *name) {
            Some(i) => {
                let mut d = users.remove(i);
                let _ = d.apply(b"reset", env);
                d
            }
            None => User::new(name, env),
        };
        for op in &merged {
            user.apply(op, env).map_err(|e| {
                format!("Error loading ACL rule '{}' for the user named '{name}': {e}", String::from_utf8_lossy(op))
            })?;
        }
        if !user.enabled() {
            tracing::info!(
                "The user '{name}' is disabled (there is no 'on' modifier in the user description). Make sure this \
                 is not a configuration error."
            );
        }
        users.push(user);
    }
    Ok(users)
}

fn trim_end(op: &[u8]) -> &[u8] {
    let mut end = op.len();
    while end > 0 && matches!(op[end - 1], b'\t' | b'\r' | b'\n') {
        end -= 1;
    }
    let mut start = 0;
    while start < end && matches!(op[start], b'\t' | b'\r' | b'\n') {
        start += 1;
    }
    &op[start..end]
}
