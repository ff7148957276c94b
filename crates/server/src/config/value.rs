//! Directive value types: how a `.conf` argument list, a toml value or a CONFIG SET string
//! becomes a typed value, and how a value is written back for CONFIG GET.
//!
//! Parsing follows Valkey's `config.c` type by type (`numericParseString`, `memtoull`,
//! `enumConfigSet`, the special setters), including its error texts, because those texts reach
//! users both in the FATAL CONFIG FILE ERROR block and after `CONFIG SET failed (...) - `.
//! The directives with a syntax of their own (`save`, `client-output-buffer-limit`, ...) live
//! in [`super::special`].

use super::special;
use super::table::Directive;

/// The type and range of a directive.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    /// `yes` / `no`.
    Bool,
    /// An integer within bounds (`max` is unsigned so `UINT_MAX`-style bounds print as Valkey's).
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: u64,
    },
    /// A memory amount (`1gb`, `100mb`, `512k`, plain bytes), within bounds.
    Memory {
        /// Smallest accepted value in bytes.
        min: i64,
        /// Largest accepted value in bytes.
        max: u64,
    },
    /// A memory amount or a percentage of maxmemory (`maxmemory-clients 10%`); a percentage is
    /// stored negated, as Valkey stores it.
    MemoryPercent {
        /// Largest accepted value in bytes.
        max: u64,
    },
    /// An octal number (`unixsocketperm 700`).
    Octal {
        /// Largest accepted value.
        max: u64,
    },
    /// One of a fixed set of words, case-insensitive. `"yes|relative"` makes `relative` another
    /// spelling of `yes` (CONFIG GET shows the first).
    Enum(&'static [&'static str]),
    /// A set of flags from a fixed list given as several words (`shutdown-on-sigterm nosave
    /// now`); the first word names the empty set.
    Flags(&'static [&'static str]),
    /// Free text, where the empty string is a value of its own.
    Str(Check),
    /// Free text where the empty string means "not set" (Valkey's `EMPTY_STRING_IS_NULL`):
    /// CONFIG REWRITE then drops the directive instead of writing `""`.
    OptStr(Check),
    /// `bind`: up to 16 addresses, `""` for none.
    Bind,
    /// `save`: `<seconds> <changes>` pairs, `""` for none.
    Save,
    /// `client-output-buffer-limit`: `<class> <hard> <soft> <soft-seconds>` groups.
    BufferLimits,
    /// `oom-score-adj-values`: three integers.
    OomValues,
    /// `notify-keyspace-events`: a string of event class letters.
    Events,
    /// `replicaof`: `<host> <port>` or `no one`.
    ReplicaOf,
    /// `latency-tracking-info-percentiles`: numbers between 0 and 100.
    Percentiles,
    /// A directive repeated once per item, each occurrence kept whole (`user`, `loadmodule`,
    /// `rename-command`); only files and the command line set it.
    Lines {
        /// Fewest arguments after the name.
        min: usize,
        /// Most arguments after the name.
        max: usize,
    },
}

impl Ty {
    /// Takes several arguments (Valkey's `MULTI_ARG_CONFIG`): a single `.conf` argument is split
    /// again, and a CONFIG SET value is split on spaces.
    pub fn multi_arg(self) -> bool {
        matches!(
            self,
            Ty::Flags(_) | Ty::Bind | Ty::Save | Ty::BufferLimits | Ty::OomValues | Ty::ReplicaOf | Ty::Percentiles
        )
    }

    /// The value a directive of this type holds before anything sets it; `client-output-buffer-
    /// limit` updates only the classes it names, so its default is parsed over this.
    pub fn empty(self) -> Value {
        match self {
            Ty::Bool => Value::Bool(false),
            Ty::Int { .. } | Ty::Memory { .. } | Ty::MemoryPercent { .. } | Ty::Octal { .. } => Value::Int(0),
            Ty::Enum(words) | Ty::Flags(words) => Value::Word(canonical(words[0])),
            Ty::Str(_) | Ty::OptStr(_) | Ty::Events => Value::Str(String::new()),
            Ty::Bind | Ty::ReplicaOf => Value::List(Vec::new()),
            Ty::Save => Value::Ints(Vec::new()),
            Ty::BufferLimits => Value::Ints(vec![0; 9]),
            Ty::OomValues => Value::Ints(vec![0; 3]),
            Ty::Percentiles => Value::Floats(Vec::new()),
            Ty::Lines { .. } => Value::Lines(Vec::new()),
        }
    }
}

/// Extra validation of a text directive, with Valkey's error texts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Anything.
    Any,
    /// Not empty: `<name> can't be empty` (`dir`, `cluster-config-file`).
    NonEmpty,
    /// A file name without directories (`dbfilename`, `appendfilename`).
    FileName,
    /// A directory name without parents (`appenddirname`).
    DirName,
    /// Empty or an IPv4 address.
    Ipv4,
    /// Empty or an IPv6 address.
    Ipv6,
    /// A host name for cluster announcements.
    Hostname,
    /// A human node name for cluster announcements.
    NodeName,
    /// A `proc-title-template`.
    ProcTitle,
    /// Space-separated `TLSv1`, `TLSv1.1`, `TLSv1.2`, `TLSv1.3`.
    TlsProtocols,
    /// Space-separated names (`tls-expected-peer-name`, Redis semantics).
    PeerNames,
}

/// A typed directive value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// For [`Ty::Bool`].
    Bool(bool),
    /// For the integer and memory types.
    Int(i64),
    /// For [`Ty::Enum`] and [`Ty::Flags`]: the canonical text (`nosave now` for flags).
    Word(&'static str),
    /// For the text types and [`Ty::Events`] (canonical letters).
    Str(String),
    /// For [`Ty::Bind`] (addresses) and [`Ty::ReplicaOf`] (host and port, or nothing).
    List(Vec<String>),
    /// For [`Ty::Save`] (pairs), [`Ty::BufferLimits`] (hard, soft, seconds for normal, replica
    /// and pubsub clients) and [`Ty::OomValues`].
    Ints(Vec<i64>),
    /// For [`Ty::Percentiles`].
    Floats(Vec<f64>),
    /// For [`Ty::Lines`]: the arguments of each occurrence.
    Lines(Vec<Vec<String>>),
}

impl Value {
    /// The boolean, or false for another kind.
    pub fn as_bool(&self) -> bool {
        matches!(self, Value::Bool(true))
    }

    /// The integer, or 0 for another kind.
    pub fn as_int(&self) -> i64 {
        match self {
            Value::Int(n) => *n,
            _ => 0,
        }
    }

    /// The text of a word or string value.
    pub fn as_str(&self) -> &str {
        match self {
            Value::Word(w) => w,
            Value::Str(s) => s,
            _ => "",
        }
    }

    /// The words of a list value.
    pub fn as_list(&self) -> &[String] {
        match self {
            Value::List(v) => v,
            _ => &[],
        }
    }

    /// The numbers of an integer-list value.
    pub fn as_ints(&self) -> &[i64] {
        match self {
            Value::Ints(v) => v,
            _ => &[],
        }
    }

    /// The numbers of a float-list value.
    pub fn as_floats(&self) -> &[f64] {
        match self {
            Value::Floats(v) => v,
            _ => &[],
        }
    }

    /// The occurrences of a [`Ty::Lines`] value.
    pub fn as_lines(&self) -> &[Vec<String>] {
        match self {
            Value::Lines(v) => v,
            _ => &[],
        }
    }
}

/// Parses the value of directive `d` from its arguments (already split for multi-argument
/// types). `base` is the current value: `client-output-buffer-limit` changes only the classes
/// it names. Errors are Valkey's wording.
pub fn parse(d: &Directive, args: &[String], base: &Value) -> Result<Value, String> {
    match d.ty {
        Ty::Bind => special::parse_bind(args),
        Ty::Save => special::parse_save(args),
        Ty::BufferLimits => special::parse_buffer_limits(args, base),
        Ty::OomValues => special::parse_oom_values(args),
        Ty::ReplicaOf => special::parse_replicaof(args),
        Ty::Percentiles => special::parse_percentiles(args),
        Ty::Flags(words) => special::parse_flags(words, args),
        Ty::Lines { .. } => Ok(Value::Lines(vec![args.to_vec()])),
        ty => {
            let [arg] = args else {
                return Err("wrong number of arguments".into());
            };
            parse_one(d, ty, arg)
        }
    }
}

fn parse_one(d: &Directive, ty: Ty, arg: &str) -> Result<Value, String> {
    match ty {
        Ty::Bool => match arg.to_ascii_lowercase().as_str() {
            "yes" => Ok(Value::Bool(true)),
            "no" => Ok(Value::Bool(false)),
            _ => Err("argument must be 'yes' or 'no'".into()),
        },
        Ty::Int { min, max } => {
            let n = hotkv_protocol::parse_i64(arg.as_bytes())
                .ok_or_else(|| "argument couldn't be parsed into an integer".to_string())?;
            check_bounds(n, min, max)
        }
        Ty::Memory { min, max } => {
            let n = parse_memory(arg).ok_or_else(|| "argument must be a memory value".to_string())?;
            check_bounds(memory_as_i64(n, max)?, min, max)
        }
        Ty::MemoryPercent { max } => parse_memory_percent(arg, max),
        Ty::Octal { max } => {
            let n = special::strtoll(arg, 8)
                .filter(|(_, overflow)| !overflow)
                .ok_or_else(|| "argument couldn't be parsed as an octal number".to_string())?
                .0;
            if n < 0 || n as u64 > max {
                return Err(format!("argument must be between 0 and {max:o} inclusive"));
            }
            Ok(Value::Int(n))
        }
        Ty::Enum(words) => words
            .iter()
            .find(|w| w.split('|').any(|x| x.eq_ignore_ascii_case(arg)))
            .map(|w| Value::Word(canonical(w)))
            .ok_or_else(|| enum_error(words)),
        Ty::Str(check) | Ty::OptStr(check) => {
            special::check_text(d.name, check, arg)?;
            Ok(Value::Str(arg.to_string()))
        }
        Ty::Events => special::parse_events(arg),
        _ => unreachable!("multi-argument types are parsed by `parse`"),
    }
}

/// The first spelling of an enum word (`yes` for `yes|relative`).
pub(crate) fn canonical(word: &'static str) -> &'static str {
    word.split('|').next().unwrap_or(word)
}

/// Valkey's `argument(s) must be one of the following: a, b, c` (every spelling listed).
pub(crate) fn enum_error(words: &[&str]) -> String {
    let all: Vec<&str> = words.iter().flat_map(|w| w.split('|')).collect();
    format!("argument(s) must be one of the following: {}", all.join(", "))
}

fn check_bounds(n: i64, min: i64, max: u64) -> Result<Value, String> {
    if n < min || (n >= 0 && n as u64 > max) {
        return Err(format!("argument must be between {min} and {max} inclusive"));
    }
    Ok(Value::Int(n))
}

/// Values are kept as `i64`; a memory amount beyond that (possible only for the `ULLONG_MAX`
/// directives) is reported as out of range rather than wrapped.
fn memory_as_i64(n: u64, max: u64) -> Result<i64, String> {
    i64::try_from(n).map_err(|_| format!("argument must be between 0 and {max} inclusive"))
}

fn parse_memory_percent(arg: &str, max: u64) -> Result<Value, String> {
    if let Some(n) = parse_memory(arg) {
        return check_bounds(memory_as_i64(n, max)?, 0, max);
    }
    let percent = arg
        .strip_suffix('%')
        .filter(|p| !p.is_empty())
        .and_then(|p| hotkv_protocol::parse_i64(p.as_bytes()))
        .filter(|p| *p >= 0);
    match percent {
        Some(p) if p > 100 => Err("percentage argument must be less or equal to 100".into()),
        Some(p) => Ok(Value::Int(-p)),
        None => Err("argument must be a memory or percent value".into()),
    }
}

/// Parses a memory amount as Valkey's `memtoull`: digits with an optional unit, `b`, `k`/`kb`
/// (1000/1024), `m`/`mb`, `g`/`gb`, case-insensitive. Like `memtoull`, no digits counts as 0
/// (`maxmemory ""` is 0) and a sign is refused.
pub fn parse_memory(s: &str) -> Option<u64> {
    let digits_end = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(digits_end);
    let mul: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    if num.len() >= 128 {
        return None;
    }
    // strtoull saturates on overflow and memtoull does not look at errno.
    let n = if num.is_empty() { 0 } else { num.parse::<u64>().unwrap_or(u64::MAX) };
    Some(n.wrapping_mul(mul))
}

/// Writes a byte count the way CONFIG REWRITE does (`rewriteConfigFormatMemory`): in `gb`,
/// `mb` or `kb` when it divides evenly.
pub fn format_memory(bytes: i64) -> String {
    const KB: i64 = 1024;
    for (unit, size) in [("gb", KB * KB * KB), ("mb", KB * KB), ("kb", KB)] {
        if bytes != 0 && bytes % size == 0 {
            return format!("{}{unit}", bytes / size);
        }
    }
    bytes.to_string()
}

/// The text CONFIG GET shows for a value.
pub fn format(ty: Ty, v: &Value) -> String {
    match (ty, v) {
        (Ty::MemoryPercent { .. }, Value::Int(n)) if *n < 0 => format!("{}%", -n),
        (Ty::Octal { .. }, Value::Int(n)) => format!("{n:o}"),
        (Ty::BufferLimits, Value::Ints(n)) => special::format_buffer_limits(n, "slave", |b| b.to_string()),
        (_, Value::Bool(b)) => if *b { "yes" } else { "no" }.to_string(),
        (_, Value::Int(n)) => n.to_string(),
        (_, Value::Word(w)) => w.to_string(),
        (_, Value::Str(s)) => s.clone(),
        (_, Value::List(l)) => l.join(" "),
        (_, Value::Ints(l)) => l.iter().map(i64::to_string).collect::<Vec<_>>().join(" "),
        (_, Value::Floats(l)) => l.iter().map(|f| special::format_percentile(*f)).collect::<Vec<_>>().join(" "),
        (_, Value::Lines(l)) => l.iter().map(|a| a.join(" ")).collect::<Vec<_>>().join("\n"),
    }
}

/// Quotes `s` the way Valkey's `sdscatrepr` does, so the `.conf` parser reads it back. Non-ASCII
/// characters stay as they are (Valkey escapes their bytes; both read back the same).
pub fn repr(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            ' '..='~' => out.push(c),
            c if !c.is_ascii() => out.push(c),
            c => out.push_str(&format!("\\x{:02x}", c as u32)),
        }
    }
    out.push('"');
    out
}

/// An argument as it must appear in a `.conf` line: bare when the parser reads it back
/// unchanged, quoted otherwise.
pub fn conf_arg(s: &str) -> String {
    let plain = !s.is_empty() && s.bytes().all(|b| b.is_ascii_graphic() && b != b'"' && b != b'\'' && b != b'\\');
    if plain { s.to_string() } else { repr(s) }
}

#[cfg(test)]
mod tests {
    use super::super::table::{self, TABLE};
    use super::*;

    fn one(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    fn p(name: &str, arg: &str) -> Result<Value, String> {
        let d = &TABLE[table::find(name).unwrap()];
        parse(d, &one(arg), &d.ty.empty())
    }

    #[test]
    fn scalars_parse_like_valkey() {
        assert_eq!(p("daemonize", "YES"), Ok(Value::Bool(true)));
        assert_eq!(p("daemonize", "1"), Err("argument must be 'yes' or 'no'".into()));
        assert_eq!(p("port", "70000"), Err("argument must be between 0 and 65535 inclusive".into()));
        assert_eq!(p("port", "abc"), Err("argument couldn't be parsed into an integer".into()));
        assert_eq!(p("port", "+1"), Err("argument couldn't be parsed into an integer".into()));
        assert_eq!(p("maxclients", "-1"), Err("argument must be between 1 and 4294967295 inclusive".into()));
        assert_eq!(p("list-max-listpack-size", "-2"), Ok(Value::Int(-2)));
        assert_eq!(p("maxmemory", "1gb"), Ok(Value::Int(1 << 30)));
        assert_eq!(p("maxmemory", "100M"), Ok(Value::Int(100_000_000)));
        assert_eq!(p("maxmemory", ""), Ok(Value::Int(0)));
        assert_eq!(p("maxmemory", "-1"), Err("argument must be a memory value".into()));
        assert_eq!(p("maxmemory", "1tb"), Err("argument must be a memory value".into()));
        assert_eq!(
            p("proto-max-bulk-len", "1000"),
            Err("argument must be between 1048576 and 9223372036854775807 inclusive".into())
        );
    }

    #[test]
    fn percent_octal_enum_and_text() {
        assert_eq!(p("maxmemory-clients", "10%"), Ok(Value::Int(-10)));
        assert_eq!(p("maxmemory-clients", "200%"), Err("percentage argument must be less or equal to 100".into()));
        assert_eq!(p("maxmemory-clients", "x"), Err("argument must be a memory or percent value".into()));
        assert_eq!(p("unixsocketperm", "700"), Ok(Value::Int(0o700)));
        assert_eq!(p("unixsocketperm", "1000"), Err("argument must be between 0 and 777 inclusive".into()));
        assert_eq!(p("unixsocketperm", "9"), Err("argument couldn't be parsed as an octal number".into()));
        assert_eq!(p("oom-score-adj", "RELATIVE"), Ok(Value::Word("yes")));
        assert_eq!(
            p("oom-score-adj", "x"),
            Err("argument(s) must be one of the following: no, yes, relative, absolute".into())
        );
        assert_eq!(p("dbfilename", "a/b"), Err("dbfilename can't be a path, just a filename".into()));
        assert_eq!(p("cluster-config-file", ""), Err("cluster-config-file can't be empty".into()));
    }

    #[test]
    fn formats_for_get_and_rewrite() {
        let d = &TABLE[table::find("maxmemory-clients").unwrap()];
        assert_eq!(format(d.ty, &Value::Int(-10)), "10%");
        assert_eq!(format_memory(512 * 1024 * 1024), "512mb");
        assert_eq!(format_memory(1000), "1000");
        assert_eq!(format_memory(0), "0");
        assert_eq!(repr("a \"b\"\n\x01"), r#""a \"b\"\n\x01""#);
        assert_eq!(repr("é"), "\"é\"");
        assert_eq!(conf_arg("plain"), "plain");
        assert_eq!(conf_arg(""), "\"\"");
        assert_eq!(conf_arg("two words"), "\"two words\"");
    }
}
