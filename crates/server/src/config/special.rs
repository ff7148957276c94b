//! The directives with a syntax of their own, each parsed as Valkey's dedicated setter in
//! `config.c` does (`setConfigSaveOption`, `updateClientOutputBufferLimit`, ...), and the
//! extra checks of text directives (`isValidDBfilename`, `isValidAnnouncedHostname`, ...).

use super::value::{Check, Value, canonical, enum_error, parse_memory};

/// Valkey's `CONFIG_BINDADDR_MAX`.
const BIND_MAX: usize = 16;

/// `bind`: a single empty argument means no address at all.
pub(crate) fn parse_bind(args: &[String]) -> Result<Value, String> {
    if args.len() > BIND_MAX {
        return Err("Too many bind addresses specified.".into());
    }
    if args.len() == 1 && args[0].is_empty() {
        return Ok(Value::List(Vec::new()));
    }
    Ok(Value::List(args.to_vec()))
}

/// `save`: pairs of seconds (at least 1) and changes (at least 0); `""` alone means none.
/// Appending repeated `save` lines in a file is the loader's business.
pub(crate) fn parse_save(args: &[String]) -> Result<Value, String> {
    let args = if args.len() == 1 && args[0].is_empty() { &[][..] } else { args };
    if !args.len().is_multiple_of(2) {
        return Err("Invalid save parameters".into());
    }
    let mut out = Vec::with_capacity(args.len());
    for (i, a) in args.iter().enumerate() {
        let min = if i % 2 == 0 { 1 } else { 0 };
        match strtoll(a, 10) {
            Some((n, _)) if n >= min => out.push(n),
            _ => return Err("Invalid save parameters".into()),
        }
    }
    Ok(Value::Ints(out))
}

/// Client classes of `client-output-buffer-limit`, in the order the value stores them.
const CLASSES: [&str; 3] = ["normal", "replica", "pubsub"];

/// `client-output-buffer-limit`: groups of `<class> <hard> <soft> <soft-seconds>`; classes not
/// named keep their current limits, and one bad group refuses the whole line.
pub(crate) fn parse_buffer_limits(args: &[String], base: &Value) -> Result<Value, String> {
    if !args.len().is_multiple_of(4) {
        return Err("Wrong number of arguments in buffer limit configuration.".into());
    }
    let mut out = base.as_ints().to_vec();
    out.resize(9, 0);
    for group in args.chunks(4) {
        let class = match group[0].to_ascii_lowercase().as_str() {
            "normal" => 0,
            "slave" | "replica" => 1,
            "pubsub" => 2,
            _ => return Err("Invalid client class specified in buffer limit configuration.".into()),
        };
        let hard = parse_memory(&group[1]).and_then(|n| i64::try_from(n).ok());
        let soft = parse_memory(&group[2]).and_then(|n| i64::try_from(n).ok());
        let secs = strtoll(&group[3], 10).map(|(n, _)| n).filter(|n| *n >= 0);
        let (Some(hard), Some(soft), Some(secs)) = (hard, soft, secs) else {
            return Err("Error in hard, soft or soft_seconds setting in buffer limit configuration.".into());
        };
        out[class * 3..class * 3 + 3].copy_from_slice(&[hard, soft, secs]);
    }
    Ok(Value::Ints(out))
}

/// Writes limits as `normal <h> <s> <secs> <replica> ...`: CONFIG GET says `slave` and bytes,
/// CONFIG REWRITE says `replica` and units.
pub(crate) fn format_buffer_limits(n: &[i64], replica: &str, mem: impl Fn(i64) -> String) -> String {
    let mut parts = Vec::with_capacity(3);
    for (i, class) in CLASSES.iter().enumerate() {
        let class = if i == 1 { replica } else { class };
        let [h, s, t] = [n[i * 3], n[i * 3 + 1], n[i * 3 + 2]];
        parts.push(format!("{class} {} {} {t}", mem(h), mem(s)));
    }
    parts.join(" ")
}

/// `oom-score-adj-values`: exactly three values between -2000 and 2000.
pub(crate) fn parse_oom_values(args: &[String]) -> Result<Value, String> {
    if args.len() != 3 {
        return Err("wrong number of arguments".into());
    }
    let mut out = Vec::with_capacity(3);
    for a in args {
        match strtoll(a, 10) {
            Some((n, _)) if (-2000..=2000).contains(&n) => out.push(n),
            _ => return Err("Invalid oom-score-adj-values, elements must be between -2000 and 2000.".into()),
        }
    }
    Ok(Value::Ints(out))
}

/// `replicaof <host> <port>`, or `replicaof no one` for none.
pub(crate) fn parse_replicaof(args: &[String]) -> Result<Value, String> {
    let [host, port] = args else {
        return Err("wrong number of arguments".into());
    };
    if host.eq_ignore_ascii_case("no") && port.eq_ignore_ascii_case("one") {
        return Ok(Value::List(Vec::new()));
    }
    match strtoll(port, 10) {
        Some((p, false)) if (0..=65535).contains(&p) => Ok(Value::List(vec![host.clone(), p.to_string()])),
        _ => Err("Invalid primary port".into()),
    }
}

/// `latency-tracking-info-percentiles`: numbers in [0, 100]; `""` alone means none.
pub(crate) fn parse_percentiles(args: &[String]) -> Result<Value, String> {
    if args.len() == 1 && args[0].is_empty() {
        return Ok(Value::Floats(Vec::new()));
    }
    let mut out = Vec::with_capacity(args.len());
    for a in args {
        let f = hotkv_protocol::parse_double(a.as_bytes())
            .ok_or_else(|| "Invalid latency-tracking-info-percentiles parameters".to_string())?;
        if !(0.0..=100.0).contains(&f) {
            return Err("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]".into());
        }
        out.push(f);
    }
    Ok(Value::Floats(out))
}

/// A percentile as Valkey prints it: `%f` without trailing zeros (`99.9`, `50`).
pub(crate) fn format_percentile(f: f64) -> String {
    let s = format!("{f:.6}");
    let s = s.trim_end_matches('0');
    s.strip_suffix('.').unwrap_or(s).to_string()
}

/// A multi-argument flag set (`shutdown-on-sigint`): each word must be known; the value is
/// the canonical spelling, the set words in table order, or the first word for none.
pub(crate) fn parse_flags(words: &'static [&'static str], args: &[String]) -> Result<Value, String> {
    if args.is_empty() {
        return Err(enum_error(words));
    }
    let mut set = vec![false; words.len()];
    for a in args {
        let i = words.iter().position(|w| w.eq_ignore_ascii_case(a)).ok_or_else(|| enum_error(words))?;
        set[i] = true;
    }
    set[0] = false;
    // Valkey's shutdown flags are the only flag-set directives; SAVE and NOSAVE conflict.
    let pos = |w: &str| words.iter().position(|x| *x == w);
    if let (Some(s), Some(n)) = (pos("save"), pos("nosave"))
        && set[s]
        && set[n]
    {
        return Err("shutdown options SAVE and NOSAVE can't be used simultaneously".into());
    }
    let text: Vec<&str> = words.iter().zip(&set).filter(|(_, on)| **on).map(|(w, _)| *w).collect();
    if text.is_empty() {
        return Ok(Value::Word(canonical(words[0])));
    }
    // The canonical texts are few; leaking one small string per distinct set keeps `Value::Word`
    // a plain `&'static str` for every enum-like directive.
    Ok(Value::Word(intern(text.join(" "))))
}

fn intern(s: String) -> &'static str {
    use std::collections::HashSet;
    use std::sync::Mutex;
    static SEEN: Mutex<Option<HashSet<&'static str>>> = Mutex::new(None);
    let mut guard = SEEN.lock().unwrap_or_else(|e| e.into_inner());
    let seen = guard.get_or_insert_with(HashSet::new);
    if let Some(s) = seen.get(s.as_str()) {
        return s;
    }
    let leaked: &'static str = Box::leak(s.into_boxed_str());
    seen.insert(leaked);
    leaked
}

/// Keyspace event classes in the order Valkey prints them, with `A` standing for all of the
/// first ten.
const EVENT_ALL: &str = "g$lshzxetd";

/// `notify-keyspace-events`: letters from `Ag$lshzxeKEtmdn`, kept in Valkey's canonical order
/// so CONFIG GET shows what Valkey shows (`KEA` reads back as `AKE`).
pub(crate) fn parse_events(arg: &str) -> Result<Value, String> {
    let mut on = std::collections::HashSet::new();
    for c in arg.chars() {
        match c {
            'A' => on.extend(EVENT_ALL.chars()),
            'g' | '$' | 'l' | 's' | 'h' | 'z' | 'x' | 'e' | 'K' | 'E' | 't' | 'm' | 'd' | 'n' => {
                on.insert(c);
            }
            _ => return Err("Invalid event class character. Use 'Ag$lshzxeKEtmdn'.".into()),
        }
    }
    let mut out = String::new();
    if EVENT_ALL.chars().all(|c| on.contains(&c)) {
        out.push('A');
        // Valkey prints `A` alone here and so loses `n` (not part of `A`) in CONFIG GET and
        // REWRITE; hotkv keeps it so the value reads back the same.
        if on.contains(&'n') {
            out.push('n');
        }
    } else {
        out.extend("g$lshzxetdn".chars().filter(|c| on.contains(c)));
    }
    out.extend("KEm".chars().filter(|c| on.contains(c)));
    Ok(Value::Str(out))
}

/// The checks Valkey runs on text directives (`is_valid_fn`), plus the TLS ones hotkv runs at
/// load time instead of when building the TLS context.
pub(crate) fn check_text(name: &str, check: Check, v: &str) -> Result<(), String> {
    let fail = |msg: &str| Err(msg.to_string());
    match check {
        Check::Any => Ok(()),
        Check::NonEmpty if v.is_empty() => Err(format!("{name} can't be empty")),
        Check::FileName | Check::DirName if v.is_empty() => Err(format!("{name} can't be empty")),
        Check::FileName if v.contains(['/', '\\']) => Err(format!("{name} can't be a path, just a filename")),
        Check::DirName if v.contains(['/', '\\']) => Err(format!("{name} can't be a path, just a dirname")),
        Check::Ipv4 if !v.is_empty() && v.parse::<std::net::Ipv4Addr>().is_err() => fail("Invalid IPv4 address"),
        Check::Ipv6 if !v.is_empty() && v.parse::<std::net::Ipv6Addr>().is_err() => fail("Invalid IPv6 address"),
        Check::Hostname if v.len() >= 256 => fail("Hostnames must be less than 256 characters"),
        Check::Hostname if !v.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.') => {
            fail("Hostnames may only contain alphanumeric characters, hyphens or dots")
        }
        Check::NodeName if v.bytes().any(|c| b"!#$%&()*+;<>?@[]^{|}~".contains(&c)) => {
            fail("Announced human node name contained invalid character")
        }
        Check::ProcTitle if !valid_proc_title(v) => fail("template format is invalid or contains unknown variables"),
        Check::TlsProtocols if !v.is_empty() && !valid_tls_protocols(v) => {
            fail("Invalid tls-protocols specified. Use a combination of 'TLSv1', 'TLSv1.1', 'TLSv1.2' and 'TLSv1.3'.")
        }
        Check::PeerNames if !v.is_empty() && v.trim_matches(' ').is_empty() => {
            fail("tls-expected-peer-name must contain at least one name")
        }
        Check::PeerNames if v.chars().any(|c| c.is_control()) => {
            fail("tls-expected-peer-name must not contain control characters")
        }
        _ => Ok(()),
    }
}

/// Valkey splits on single spaces, so an empty token (two spaces) is refused too.
fn valid_tls_protocols(v: &str) -> bool {
    v.split(' ').all(|t| ["tlsv1", "tlsv1.1", "tlsv1.2", "tlsv1.3"].iter().any(|p| p.eq_ignore_ascii_case(t)))
}

/// As Valkey's `validateProcTitleTemplate`: `{{` is a literal brace, every `{name}` must be a
/// known variable, and the expansion must not be blank. Only `{title}`, `{server-mode}` and
/// `{unixsocket}` can expand to nothing (with an empty title, as Valkey validates it).
fn valid_proc_title(t: &str) -> bool {
    const VARS: [&str; 7] = ["title", "listen-addr", "server-mode", "config-file", "port", "tls-port", "unixsocket"];
    let mut rest = t;
    let mut visible = false;
    while let Some(open) = rest.find('{') {
        visible |= rest[..open].trim_matches(' ').chars().next().is_some();
        let after = &rest[open + 1..];
        if after.is_empty() {
            return false;
        }
        if let Some(tail) = after.strip_prefix('{') {
            visible = true;
            rest = tail;
            continue;
        }
        let Some(close) = after.find('}') else { return false };
        let var = &after[..close];
        if !VARS.contains(&var) {
            return false;
        }
        visible |= !matches!(var, "title" | "server-mode" | "unixsocket");
        rest = &after[close + 1..];
    }
    visible || !rest.trim_matches(' ').is_empty()
}

/// C's `strtoll` as the special setters use it: the whole text must be consumed (leading
/// blanks and a sign allowed, and an empty text reads as 0, as `strtoll` leaves `endptr` on the
/// terminating NUL). Returns the value, saturated, and whether it overflowed.
pub(crate) fn strtoll(s: &str, radix: u32) -> Option<(i64, bool)> {
    if s.is_empty() {
        return Some((0, false));
    }
    let t = s.trim_start_matches([' ', '\t', '\n', '\r', '\x0b', '\x0c']);
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.chars().all(|c| c.is_digit(radix)) {
        return None;
    }
    match i128::from_str_radix(digits, radix) {
        Ok(v) => {
            let v = if neg { -v } else { v };
            match i64::try_from(v) {
                Ok(n) => Some((n, false)),
                Err(_) => Some((if neg { i64::MIN } else { i64::MAX }, true)),
            }
        }
        Err(_) => Some((if neg { i64::MIN } else { i64::MAX }, true)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn save_and_bind() {
        assert_eq!(parse_save(&s(&[""])), Ok(Value::Ints(vec![])));
        assert_eq!(parse_save(&s(&["900", "1", "300", "10"])), Ok(Value::Ints(vec![900, 1, 300, 10])));
        assert_eq!(parse_save(&s(&["0", "1"])), Err("Invalid save parameters".into()));
        assert_eq!(parse_save(&s(&["900"])), Err("Invalid save parameters".into()));
        assert_eq!(parse_bind(&s(&[""])), Ok(Value::List(vec![])));
        assert!(parse_bind(&vec!["a".to_string(); 17]).is_err());
    }

    #[test]
    fn buffer_limits_update_named_classes_only() {
        let base = Value::Ints(vec![0, 0, 0, 1, 2, 3, 4, 5, 6]);
        let v = parse_buffer_limits(&s(&["slave", "1mb", "2k", "10"]), &base).unwrap();
        assert_eq!(v, Value::Ints(vec![0, 0, 0, 1 << 20, 2000, 10, 4, 5, 6]));
        assert_eq!(
            format_buffer_limits(v.as_ints(), "slave", |b| b.to_string()),
            "normal 0 0 0 slave 1048576 2000 10 pubsub 4 5 6"
        );
        assert!(parse_buffer_limits(&s(&["master", "1", "1", "1"]), &base).unwrap_err().contains("client class"));
        assert!(parse_buffer_limits(&s(&["normal", "1", "1"]), &base).unwrap_err().contains("Wrong number"));
        assert!(parse_buffer_limits(&s(&["normal", "1", "1", "-1"]), &base).unwrap_err().contains("soft_seconds"));
    }

    #[test]
    fn events_flags_replicaof_percentiles() {
        assert_eq!(parse_events("KEA"), Ok(Value::Str("AKE".into())));
        assert_eq!(parse_events("Ex$"), Ok(Value::Str("$xE".into())));
        assert_eq!(parse_events("nAm"), Ok(Value::Str("Anm".into())));
        assert!(parse_events("Q").is_err());
        const SIG: &[&str] = &["default", "save", "nosave", "now", "force"];
        assert_eq!(parse_flags(SIG, &s(&["now", "NOSAVE"])), Ok(Value::Word("nosave now")));
        assert_eq!(parse_flags(SIG, &s(&["default"])), Ok(Value::Word("default")));
        assert!(parse_flags(SIG, &s(&["save", "nosave"])).unwrap_err().contains("simultaneously"));
        assert_eq!(parse_replicaof(&s(&["No", "One"])), Ok(Value::List(vec![])));
        assert_eq!(parse_replicaof(&s(&["h", "x"])), Err("Invalid primary port".into()));
        assert_eq!(parse_percentiles(&s(&["50", "99.9"])), Ok(Value::Floats(vec![50.0, 99.9])));
        assert_eq!(format_percentile(99.9), "99.9");
        assert_eq!(format_percentile(50.0), "50");
        assert!(parse_percentiles(&s(&["101"])).is_err());
    }

    #[test]
    fn text_checks() {
        assert!(check_text("x", Check::ProcTitle, "{title} {listen-addr} {server-mode}").is_ok());
        assert!(check_text("x", Check::ProcTitle, "{title}").is_err());
        assert!(check_text("x", Check::ProcTitle, "{nope}").is_err());
        assert!(check_text("x", Check::ProcTitle, "hotkv {{").is_ok());
        assert!(check_text("x", Check::Hostname, "a_b").is_err());
        assert!(check_text("x", Check::Ipv4, "").is_ok());
        assert!(check_text("x", Check::Ipv4, "::1").is_err());
        assert!(check_text("x", Check::TlsProtocols, "TLSv1.2 tlsv1.3").is_ok());
        assert!(check_text("x", Check::TlsProtocols, "TLSv1.2  TLSv1.3").is_err());
        assert!(check_text("x", Check::PeerNames, "   ").is_err());
        assert_eq!(strtoll(" -12", 10), Some((-12, false)));
        assert_eq!(strtoll("", 10), Some((0, false)));
        assert_eq!(strtoll("+", 10), None);
        assert_eq!(strtoll("1x", 10), None);
    }
}
