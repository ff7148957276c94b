//! Directive value types: how a `.conf` argument list, a toml value or a CONFIG SET string
//! becomes a typed value, and how a value is written back for CONFIG GET and REWRITE.

/// The type and range of a directive.
#[derive(Debug, Clone, Copy)]
pub enum Ty {
    /// `yes` / `no`.
    Bool,
    /// An integer within bounds.
    Int {
        /// Smallest accepted value.
        min: i64,
        /// Largest accepted value.
        max: i64,
    },
    /// A memory amount (`1gb`, `100mb`, `512k`, plain bytes), within bounds.
    Memory {
        /// Smallest accepted value in bytes.
        min: i64,
        /// Largest accepted value in bytes.
        max: i64,
    },
    /// One of a fixed set of words (case-insensitive).
    Enum(&'static [&'static str]),
    /// A set of flags from a fixed list, space separated (`tls-protocols "TLSv1.2 TLSv1.3"`).
    Flags(&'static [&'static str]),
    /// Free text.
    Str,
    /// Several words kept as a list (`bind`, `save`, `client-output-buffer-limit`).
    List,
}

/// A typed directive value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// For [`Ty::Bool`].
    Bool(bool),
    /// For [`Ty::Int`] and [`Ty::Memory`].
    Int(i64),
    /// For [`Ty::Enum`]: the canonical (lower-case) word.
    Word(&'static str),
    /// For [`Ty::Str`] and [`Ty::Flags`].
    Str(String),
    /// For [`Ty::List`].
    List(Vec<String>),
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
}

/// Parses a value of type `ty` from its arguments. Errors are Valkey's wording, used both in
/// the FATAL CONFIG FILE ERROR block and after `CONFIG SET failed (...) - `.
pub fn parse(ty: Ty, args: &[String]) -> Result<Value, String> {
    if let Ty::List = ty {
        return Ok(Value::List(args.iter().flat_map(|a| a.split_whitespace()).map(str::to_string).collect()));
    }
    let [arg] = args else {
        return Err("wrong number of arguments".into());
    };
    match ty {
        Ty::Bool => match arg.to_ascii_lowercase().as_str() {
            "yes" => Ok(Value::Bool(true)),
            "no" => Ok(Value::Bool(false)),
            _ => Err("argument must be 'yes' or 'no'".into()),
        },
        Ty::Int { min, max } => {
            let n: i64 = arg.parse().map_err(|_| "argument couldn't be parsed into an integer".to_string())?;
            check_bounds(n, min, max)
        }
        Ty::Memory { min, max } => {
            let n = parse_memory(arg).ok_or_else(|| "argument must be a memory value".to_string())?;
            check_bounds(n, min, max)
        }
        Ty::Enum(words) => words
            .iter()
            .find(|w| w.eq_ignore_ascii_case(arg))
            .map(|w| Value::Word(w))
            .ok_or_else(|| format!("argument(s) must be one of the following: {}", words.join(", "))),
        Ty::Flags(words) => {
            for w in arg.split_whitespace() {
                if !words.iter().any(|x| x.eq_ignore_ascii_case(w)) {
                    return Err(format!("argument(s) must be one of the following: {}", words.join(", ")));
                }
            }
            Ok(Value::Str(arg.clone()))
        }
        Ty::Str => Ok(Value::Str(arg.clone())),
        Ty::List => unreachable!("handled above"),
    }
}

fn check_bounds(n: i64, min: i64, max: i64) -> Result<Value, String> {
    if n < min || n > max {
        return Err(format!("argument must be between {min} and {max} inclusive"));
    }
    Ok(Value::Int(n))
}

/// Parses a memory amount as Valkey's `memtoull`: a number with an optional unit, `k`/`kb`
/// (1000/1024), `m`/`mb`, `g`/`gb`, case-insensitive.
pub fn parse_memory(s: &str) -> Option<i64> {
    let lower = s.to_ascii_lowercase();
    let digits_end = lower.find(|c: char| !(c.is_ascii_digit() || c == '-')).unwrap_or(lower.len());
    let (num, unit) = lower.split_at(digits_end);
    let mul: i64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    let n: i64 = num.parse().ok()?;
    n.checked_mul(mul)
}

/// The text CONFIG GET shows and REWRITE writes for a value.
pub fn format(ty: Ty, v: &Value) -> String {
    match (ty, v) {
        (_, Value::Bool(b)) => if *b { "yes" } else { "no" }.to_string(),
        (Ty::Memory { .. }, Value::Int(n)) => n.to_string(),
        (_, Value::Int(n)) => n.to_string(),
        (_, Value::Word(w)) => w.to_string(),
        (_, Value::Str(s)) => s.clone(),
        (_, Value::List(l)) => l.join(" "),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one(s: &str) -> Vec<String> {
        vec![s.to_string()]
    }

    #[test]
    fn parses_like_valkey() {
        assert_eq!(parse(Ty::Bool, &one("YES")), Ok(Value::Bool(true)));
        assert_eq!(parse(Ty::Bool, &one("1")), Err("argument must be 'yes' or 'no'".into()));
        assert_eq!(parse(Ty::Int { min: 0, max: 65535 }, &one("70000")),
            Err("argument must be between 0 and 65535 inclusive".into()));
        assert_eq!(parse(Ty::Memory { min: 0, max: i64::MAX }, &one("1gb")), Ok(Value::Int(1 << 30)));
        assert_eq!(parse(Ty::Memory { min: 0, max: i64::MAX }, &one("100m")), Ok(Value::Int(100_000_000)));
        assert_eq!(parse(Ty::Enum(&["a", "b"]), &one("B")), Ok(Value::Word("b")));
        assert_eq!(parse(Ty::List, &["127.0.0.1 ::1".to_string()]),
            Ok(Value::List(vec!["127.0.0.1".into(), "::1".into()])));
    }
}
