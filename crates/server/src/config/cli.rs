//! The command line, read exactly as Valkey's `main()` reads it:
//!
//! ```text
//! hotkv [config-file] [--directive value...] [-]
//! ```
//!
//! An optional first argument not starting with `-` is the configuration file (`.toml` for
//! hotkv.toml, anything else `.conf`); `-` as the first or last argument reads more `.conf`
//! text from stdin; every `--name value...` becomes a `.conf` line appended after the file and
//! stdin, so the command line wins and its errors read like file errors (`--port abc` fails "at
//! line 2" of the text the options form, as in Valkey). A directive's values run until the next
//! argument starting with `--`, and an option without a value takes the next argument even if
//! it starts with `--` (only `--save` without a value means `--save ""`).

use std::io::Read;
use std::path::{Path, PathBuf};

use super::load::Loader;
use super::value::repr;
use super::{FatalConfigError, LoadedConfig, VERSION, conf, toml};

/// What the command line asks for.
#[derive(Debug, Clone, PartialEq)]
pub enum Invocation {
    /// Run the server with this configuration.
    Serve(LoadedConfig),
    /// Print [`version_text`] and exit 0 (`-v`, `--version`).
    Version,
    /// Print [`usage_text`] and exit 1, as Valkey does (`-h`, `--help`).
    Help,
    /// `--check-tls <config> [options]`: check the TLS files this configuration names, print
    /// one line per problem and exit.
    CheckTls(LoadedConfig),
}

/// Parses the arguments after the program name. `stdin` is read only when an argument asks
/// for it.
pub fn parse_args(args: &[String], stdin: &mut dyn Read) -> Result<Invocation, FatalConfigError> {
    match args.first().map(String::as_str) {
        Some("-v" | "--version") => return Ok(Invocation::Version),
        Some("-h" | "--help") => return Ok(Invocation::Help),
        Some("--check-tls") => {
            return match args.get(1) {
                Some(file) if !file.starts_with('-') => match parse_args(&args[1..], stdin)? {
                    Invocation::Serve(loaded) => Ok(Invocation::CheckTls(loaded)),
                    other => Ok(other),
                },
                _ => Err(FatalConfigError::Usage(
                    "--check-tls needs a configuration file: hotkv --check-tls <config>".into(),
                )),
            };
        }
        _ => {}
    }
    let file = args.first().filter(|a| !a.starts_with('-')).map(PathBuf::from);
    let rest = &args[usize::from(file.is_some())..];
    let (options, from_stdin) = options_text(rest, file.is_none());

    let mut loader = Loader::new();
    let mut text = Vec::new();
    if let Some(path) = &file {
        if is_toml(path) {
            toml::apply_file(&mut loader, path)?;
        } else {
            text = conf::read_file(path)?;
        }
    }
    if from_stdin {
        stdin
            .read_to_end(&mut text)
            .map_err(|e| FatalConfigError::Open { path: "-".into(), reason: super::os_reason(&e) })?;
    }
    text.push(b'\n');
    text.extend_from_slice(options.as_bytes());
    conf::apply_text(&mut loader, &text)?;
    let file = file.map(|p| std::path::absolute(&p).unwrap_or(p));
    Ok(Invocation::Serve(loader.finish(file)?))
}

/// Turns the option arguments into `.conf` lines (Valkey builds the same string), and says
/// whether stdin was asked for. `first_is_option` is true when no file came first, so a `-`
/// at the start of `args` is Valkey's `argv[1]`.
fn options_text(args: &[String], first_is_option: bool) -> (String, bool) {
    let mut options = String::new();
    let mut from_stdin = false;
    let mut value_given = true;
    let last = args.len().saturating_sub(1);
    for (j, a) in args.iter().enumerate() {
        let next_is_option = args.get(j + 1).is_some_and(|n| n.starts_with("--"));
        if a == "-" && ((j == 0 && first_is_option) || j == last) {
            from_stdin = true;
        } else if value_given && a.starts_with("--") {
            if !options.is_empty() {
                options.push('\n');
            }
            options.push_str(&a[2..]);
            options.push(' ');
            // "--port 6380" as one argument already carries its value.
            let words = hotkv_protocol::split_args(a.as_bytes()).map_or(0, |w| w.len());
            value_given = words != 1;
            if words == 1 && a.eq_ignore_ascii_case("--save") && (j == last || next_is_option) {
                // An empty `--save` (from generated command lines) means `save ""`.
                options.push_str("\"\"");
                value_given = true;
            } else if words == 1 && a.eq_ignore_ascii_case("--sentinel") && next_is_option {
                value_given = true;
            }
        } else {
            options.push_str(&repr(a));
            options.push(' ');
            value_given = true;
        }
    }
    (options, from_stdin)
}

fn is_toml(path: &Path) -> bool {
    path.extension().is_some_and(|e| e.eq_ignore_ascii_case("toml"))
}

/// What `--version` prints.
pub fn version_text() -> String {
    format!("hotkv server v={VERSION}")
}

/// What `--help` prints.
pub fn usage_text() -> String {
    [
        "Usage: hotkv [/path/to/hotkv.conf|/path/to/hotkv.toml] [options] [-]",
        "       hotkv - (read config from stdin)",
        "       hotkv -v or --version",
        "       hotkv -h or --help",
        "       hotkv --check-tls /path/to/hotkv.conf [options] (check its TLS files and exit)",
        "",
        "Examples:",
        "       hotkv (run the server with default conf)",
        "       echo 'maxmemory 128mb' | hotkv -",
        "       hotkv /etc/hotkv/6379.conf",
        "       hotkv /etc/hotkv/hotkv.toml --loglevel verbose",
        "       hotkv --port 7777",
        "       hotkv --port 7777 --replicaof 127.0.0.1 8888",
        "       hotkv /etc/myhotkv.conf --loglevel verbose -",
        "",
    ]
    .join("\n")
}

#[cfg(test)]
mod tests {
    use super::super::table;
    use super::super::test_util::TempDir;
    use super::*;

    fn run(args: &[&str], stdin: &str) -> Result<Invocation, FatalConfigError> {
        let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
        parse_args(&args, &mut stdin.as_bytes())
    }

    fn serve(args: &[&str], stdin: &str) -> LoadedConfig {
        match run(args, stdin) {
            Ok(Invocation::Serve(c)) => c,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn version_help_and_no_arguments() {
        assert_eq!(run(&["-v"], ""), Ok(Invocation::Version));
        assert_eq!(run(&["--help"], ""), Ok(Invocation::Help));
        let c = serve(&[], "");
        assert_eq!(c.settings, super::super::Settings::defaults());
        assert_eq!(c.config_file, None);
        assert!(version_text().contains(VERSION));
        assert!(usage_text().starts_with("Usage: hotkv"));
    }

    #[test]
    fn options_override_the_file_and_stdin() {
        let dir = TempDir::new("cli");
        let f = dir.file("a.conf", "port 7000\nloglevel warning\nsave 900 1\n");
        let c = serve(&[f.to_str().unwrap(), "--port", "7001", "--save", "60", "5", "-"], "timeout 7\nport 9\n");
        assert_eq!(c.settings.int(table::PORT), 7001);
        assert_eq!(c.settings.int(table::TIMEOUT), 7);
        assert_eq!(c.settings.str(table::LOGLEVEL), "warning");
        // Valkey's quirk, kept: later `save` lines append, wherever they come from.
        assert_eq!(c.settings.ints(table::SAVE), [900, 1, 60, 5]);
        assert_eq!(c.config_file.as_deref(), Some(f.as_path()));
        let c = serve(&[f.to_str().unwrap(), "--save"], "");
        assert!(c.settings.ints(table::SAVE).is_empty());
        let c = serve(&[f.to_str().unwrap(), "--save", "--port", "1"], "");
        assert!(c.settings.ints(table::SAVE).is_empty());
        assert_eq!(c.settings.int(table::PORT), 1);
    }

    #[test]
    fn values_run_to_the_next_option() {
        let c = serve(&["--bind", "10.0.0.1", "127.0.0.1", "--replicaof", "h", "6380", "--requirepass", "--x"], "");
        assert_eq!(c.settings.list(table::BIND), ["10.0.0.1", "127.0.0.1"]);
        assert_eq!(c.settings.list(table::REPLICAOF), ["h", "6380"]);
        assert_eq!(c.settings.str(table::REQUIREPASS), "--x");
        let c = serve(&["--port 6380", "--requirepass", "a \"b\""], "");
        assert_eq!(c.settings.int(table::PORT), 6380);
        assert_eq!(c.settings.str(table::REQUIREPASS), "a \"b\"");
        // "-" reads stdin only as the first or last argument; elsewhere it is a value.
        let c = serve(&["--requirepass", "-", "--port", "1"], "port 2\n");
        assert_eq!(c.settings.str(table::REQUIREPASS), "-");
        assert_eq!(c.settings.int(table::PORT), 1);
        let c = serve(&["-"], "maxmemory 128mb\n");
        assert_eq!(c.settings.int(table::MAXMEMORY), 128 << 20);
    }

    #[test]
    fn errors_read_like_valkeys() {
        let e = run(&["--port", "abc"], "").unwrap_err();
        assert_eq!(
            e,
            FatalConfigError::Line {
                line: 2,
                text: "port \"abc\"".into(),
                reason: "argument couldn't be parsed into an integer".into()
            }
        );
        let e = run(&["--invalid"], "").unwrap_err();
        assert!(e.to_string().ends_with("Bad directive or wrong number of arguments"));
        let e = run(&["/nonexistent/hotkv.conf"], "").unwrap_err();
        assert!(e.to_string().starts_with("Fatal error, can't open config file '/nonexistent/hotkv.conf'"));
    }

    #[test]
    fn toml_files_take_options_too() {
        let dir = TempDir::new("cli-toml");
        let f = dir.file("hotkv.toml", "[network]\nport = 7000\n[general]\nloglevel = \"debug\"\n");
        let c = serve(&[f.to_str().unwrap(), "--port", "7002"], "");
        assert_eq!(c.settings.int(table::PORT), 7002);
        assert_eq!(c.settings.str(table::LOGLEVEL), "debug");
        let f = dir.file("bad.toml", "[network]\nprot = 1\n");
        let e = run(&[f.to_str().unwrap()], "").unwrap_err();
        assert!(e.to_string().contains("unknown key 'prot' in section [network]"));
    }
}
