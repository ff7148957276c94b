//! docs/configuration.md, generated from the directive table so the reference cannot drift
//! from the code. A unit test compares the committed file with [`reference_markdown`];
//! `HOTKV_BLESS=1 cargo test -p hotkv-server config::docs` rewrites it.

use std::fmt::Write;

use super::table::{
    APPEND, DENY_LOADING, Directive, FILE_ONLY, HIDDEN, MUTABLE, NO_EFFECT, PROTECTED, SENSITIVE, TABLE,
};
use super::value::Ty;

/// Sections in the order the reference lists them, with a line of introduction each.
const SECTIONS: &[(&str, &str)] = &[
    ("general", "Process, logging and threads."),
    ("network", "Listeners and sockets."),
    ("security", "Passwords, ACL users and dangerous commands."),
    ("clients", "Per-client limits."),
    ("limits", "Request size limits."),
    ("memory", "Memory limit, eviction and memory management."),
    ("persistence", "Working directory, snapshots and the append-only file."),
    ("replication", "Primary/replica replication."),
    ("cluster", "Cluster mode and the cluster bus."),
    ("tls", "TLS for clients, replication and the cluster bus."),
    ("latency", "Slow log and latency monitoring."),
    ("advanced", "Keyspace notifications and encodings of small values."),
    ("modules", "Modules."),
];

/// The whole of docs/configuration.md.
pub fn reference_markdown() -> String {
    let mut out = String::new();
    out.push_str(INTRO);
    for (section, intro) in SECTIONS {
        let rows: Vec<&Directive> = TABLE.iter().filter(|d| d.section() == *section && !d.has(HIDDEN)).collect();
        if rows.is_empty() {
            continue;
        }
        let _ = write!(out, "\n## [{section}]\n\n{intro}\n\n");
        out.push_str("| Directive | toml key | Type and range | Default | CONFIG SET | Description |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for d in rows {
            let _ = writeln!(
                out,
                "| {} | `{}` | {} | {} | {} | {} |",
                names(d),
                d.toml,
                type_text(d.ty),
                default_text(d),
                runtime_text(d),
                description(d)
            );
        }
    }
    out
}

const INTRO: &str = "# Configuration reference

<!-- Generated from crates/server/src/config/table.rs by config::docs::reference_markdown().
     Do not edit: run `HOTKV_BLESS=1 cargo test -p hotkv-server config::docs` after changing the table. -->

hotkv reads Valkey's configuration: a `.conf` file (`hotkv /etc/hotkv/hotkv.conf`), the same
directives as `--name value` options after it, or a `hotkv.toml` file whose sections and keys are
listed below (`[network] port = 6379`). Every Valkey 8.0.1 directive is accepted, so an existing
valkey.conf loads; the ones marked *accepted, no effect yet* are kept (CONFIG GET shows them,
CONFIG REWRITE writes them) but hotkv does not act on them yet, and the server names those set
to a non-default value once in its startup log.

- `.conf` lines are split like Valkey's (quotes, `\\n`-style escapes), `#` starts a comment, names
  are case-insensitive, a later line wins, and `include <path>` reads another file (relative to the
  working directory; `*`, `?` and `[...]` read every matching file, in name order).
- In hotkv.toml a value may be a string, an integer or a boolean (`true` is `yes`); directives
  taking several values accept an array or one space-separated string (`bind = \"10.0.0.1 ::1\"`);
  directives repeated once per item (`user`, `rename-command`, `loadmodule`) take an array of
  entries, each an array of arguments or a string. Unknown sections and keys are errors.
- Options after the file override it: `hotkv hotkv.conf --port 7000 --save \"\"`; `-` reads more
  directives from standard input.
- Sizes accept `b`, `k` (1000), `kb` (1024), `m`, `mb`, `g`, `gb`, in any case.
- `CONFIG SET` changes the directives marked *yes* in the CONFIG SET column, several at once and
  all or nothing; *protected* ones need `enable-protected-configs`. `CONFIG REWRITE` writes the
  current values back into the file the server started with, `.conf` or toml, keeping comments.
";

fn names(d: &Directive) -> String {
    let mut s = format!("`{}`", d.name);
    if !d.aliases.is_empty() {
        let aliases: Vec<String> = d.aliases.iter().map(|a| format!("`{a}`")).collect();
        let _ = write!(s, " (alias {})", aliases.join(", "));
    }
    s
}

fn bound(n: u64) -> String {
    match n {
        n if n == i32::MAX as u64 => "2^31-1".into(),
        n if n == u32::MAX as u64 => "2^32-1".into(),
        n if n == i64::MAX as u64 => "2^63-1".into(),
        u64::MAX => "2^64-1".into(),
        n => n.to_string(),
    }
}

fn lower(n: i64) -> String {
    if n == i32::MIN as i64 { "-2^31".into() } else { n.to_string() }
}

fn type_text(ty: Ty) -> String {
    match ty {
        Ty::Bool => "yes/no".into(),
        Ty::Int { min, max } => format!("integer {}..{}", lower(min), bound(max)),
        Ty::Memory { min, max } => format!("size {}..{}", lower(min), bound(max)),
        Ty::MemoryPercent { max } => format!("size 0..{} or percentage 0%..100%", bound(max)),
        Ty::Octal { max } => format!("octal 0..{max:o}"),
        Ty::Enum(words) => {
            let words: Vec<String> = words.iter().flat_map(|w| w.split('|')).map(|w| format!("`{w}`")).collect();
            format!("one of {}", words.join(", "))
        }
        Ty::Flags(words) => {
            let words: Vec<String> = words.iter().map(|w| format!("`{w}`")).collect();
            format!("any of {}", words.join(", "))
        }
        Ty::Str(_) | Ty::OptStr(_) => "string".into(),
        Ty::Bind => "up to 16 addresses".into(),
        Ty::Save => "`<seconds> <changes>` pairs".into(),
        Ty::BufferLimits => "`<class> <hard> <soft> <seconds>` groups".into(),
        Ty::OomValues => "3 integers -2000..2000".into(),
        Ty::Events => "event class letters".into(),
        Ty::ReplicaOf => "`<host> <port>` or `no one`".into(),
        Ty::Percentiles => "numbers 0..100".into(),
        Ty::Lines { .. } => "arguments, repeatable".into(),
    }
}

fn default_text(d: &Directive) -> String {
    match d.default {
        "" if matches!(d.ty, Ty::Lines { .. }) => "none".into(),
        "" => "`\"\"`".into(),
        text => format!("`{}`", text.replace('|', "\\|")),
    }
}

fn runtime_text(d: &Directive) -> &'static str {
    match () {
        _ if d.has(FILE_ONLY) => "file only",
        _ if d.has(MUTABLE) && d.has(PROTECTED) => "protected",
        _ if d.has(MUTABLE) => "yes",
        _ => "no",
    }
}

fn description(d: &Directive) -> String {
    let mut s = String::new();
    if d.has(NO_EFFECT) {
        s.push_str("*Accepted, no effect yet.* ");
    }
    s.push_str(&d.doc.replace('|', "\\|"));
    if d.has(SENSITIVE) {
        s.push_str(" Secret: never logged.");
    }
    if d.has(APPEND) {
        s.push_str(" Repeated lines add up.");
    }
    if d.has(DENY_LOADING) {
        s.push_str(" Not settable while a dataset loads.");
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn committed_reference_is_current() {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/configuration.md");
        let want = reference_markdown();
        if std::env::var_os("HOTKV_BLESS").is_some() {
            std::fs::write(&path, &want).unwrap();
            return;
        }
        let have = std::fs::read_to_string(&path).unwrap_or_default();
        assert!(
            have == want,
            "docs/configuration.md is out of date with the directive table; regenerate it with \
             `HOTKV_BLESS=1 cargo test -p hotkv-server config::docs`"
        );
    }

    #[test]
    fn every_visible_directive_is_documented_once() {
        let doc = reference_markdown();
        for d in TABLE.iter().filter(|d| !d.has(HIDDEN)) {
            assert_eq!(doc.matches(&format!("| `{}` ", d.name)).count(), 1, "{}", d.name);
        }
        for d in TABLE.iter().filter(|d| d.has(HIDDEN)) {
            assert!(!doc.contains(&format!("`{}`", d.name)), "{}", d.name);
        }
        assert!(SECTIONS.iter().all(|(s, _)| TABLE.iter().any(|d| d.section() == *s)));
        assert!(TABLE.iter().all(|d| SECTIONS.iter().any(|(s, _)| d.section() == *s)));
    }
}
