//! Quote-aware argument splitting, as Valkey's `sdssplitargs`: used for inline commands and
//! for every line of a `.conf` file, so both accept exactly what Valkey accepts. And its
//! inverse, Valkey's `sdscatrepr`, for whatever shows bytes to a person.

use std::fmt;

/// An unterminated quote, or a closing quote followed by something other than a space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SplitError;

impl fmt::Display for SplitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Unbalanced quotes in configuration line")
    }
}

impl std::error::Error for SplitError {}

/// Valkey's `sdscatrepr`: `s` double-quoted, with `\\`, `\"`, `\n`, `\r`, `\t`, `\a`, `\b`
/// escaped and other unprintable bytes as `\xHH` (MONITOR lines, the Lua debugger, AOF
/// manifest names).
pub fn repr(out: &mut String, s: &[u8]) {
    out.push('"');
    for &c in s {
        match c {
            b'\\' => out.push_str("\\\\"),
            b'"' => out.push_str("\\\""),
            b'\n' => out.push_str("\\n"),
            b'\r' => out.push_str("\\r"),
            b'\t' => out.push_str("\\t"),
            0x07 => out.push_str("\\a"),
            0x08 => out.push_str("\\b"),
            c if c.is_ascii_graphic() || c == b' ' => out.push(c as char),
            c => out.push_str(&format!("\\x{c:02x}")),
        }
    }
    out.push('"');
}

/// Splits `line` into arguments: blanks separate them, `"..."` understands `\n \r \t \b \a`,
/// `\xHH` and `\<any>`, and `'...'` understands only `\'`.
pub fn split_args(line: &[u8]) -> Result<Vec<Vec<u8>>, SplitError> {
    let mut scratch = Vec::new();
    let mut spans = Vec::new();
    split_args_into(line, &mut scratch, &mut spans)?;
    Ok(spans.into_iter().map(|(s, e)| scratch[s..e].to_vec()).collect())
}

/// Like [`split_args`], appending unquoted bytes to `out` and their ranges to `spans`.
pub(crate) fn split_args_into(
    line: &[u8],
    out: &mut Vec<u8>,
    spans: &mut Vec<(usize, usize)>,
) -> Result<(), SplitError> {
    // A NUL ends the line, as it ends the C string Valkey splits.
    let line = match memchr::memchr(0, line) {
        Some(i) => &line[..i],
        None => line,
    };
    let mut i = 0;
    loop {
        while i < line.len() && is_space(line[i]) {
            i += 1;
        }
        if i == line.len() {
            return Ok(());
        }
        let start = out.len();
        let mut in_dq = false;
        let mut in_sq = false;
        loop {
            let c = line.get(i).copied();
            if in_dq {
                match c {
                    None => return Err(SplitError),
                    Some(b'\\')
                        if line.get(i + 1) == Some(&b'x')
                            && line.get(i + 2).is_some_and(u8::is_ascii_hexdigit)
                            && line.get(i + 3).is_some_and(u8::is_ascii_hexdigit) =>
                    {
                        out.push(hex(line[i + 2]) * 16 + hex(line[i + 3]));
                        i += 3;
                    }
                    Some(b'\\') if i + 1 < line.len() => {
                        i += 1;
                        out.push(match line[i] {
                            b'n' => b'\n',
                            b'r' => b'\r',
                            b't' => b'\t',
                            b'b' => 0x08,
                            b'a' => 0x07,
                            other => other,
                        });
                    }
                    Some(b'"') => {
                        if line.get(i + 1).is_some_and(|c| !is_space(*c)) {
                            return Err(SplitError);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => out.push(other),
                }
            } else if in_sq {
                match c {
                    None => return Err(SplitError),
                    Some(b'\\') if line.get(i + 1) == Some(&b'\'') => {
                        i += 1;
                        out.push(b'\'');
                    }
                    Some(b'\'') => {
                        if line.get(i + 1).is_some_and(|c| !is_space(*c)) {
                            return Err(SplitError);
                        }
                        i += 1;
                        break;
                    }
                    Some(other) => out.push(other),
                }
            } else {
                match c {
                    None | Some(b' ' | b'\n' | b'\r' | b'\t') => break,
                    Some(b'"') => in_dq = true,
                    Some(b'\'') => in_sq = true,
                    Some(other) => out.push(other),
                }
            }
            i += 1;
        }
        spans.push((start, out.len()));
    }
}

/// C `isspace` in the "C" locale.
fn is_space(c: u8) -> bool {
    matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c)
}

fn hex(c: u8) -> u8 {
    match c {
        b'0'..=b'9' => c - b'0',
        b'a'..=b'f' => c - b'a' + 10,
        _ => c - b'A' + 10,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn repr_quotes_as_sdscatrepr_and_split_args_reads_it_back() {
        let raw = b"a \"q\" \\ \n\r\t\x07\x08\x00\xff~";
        let mut out = String::new();
        repr(&mut out, raw);
        assert_eq!(out, r#""a \"q\" \\ \n\r\t\a\b\x00\xff~""#);
        assert_eq!(split_args(out.as_bytes()).unwrap(), vec![raw.to_vec()]);
    }

    fn s(line: &str) -> Vec<String> {
        split_args(line.as_bytes()).unwrap().into_iter().map(|v| String::from_utf8(v).unwrap()).collect()
    }

    #[test]
    fn splits_like_sdssplitargs() {
        assert_eq!(s("  set  a   b "), ["set", "a", "b"]);
        assert_eq!(s(r#"save """#), ["save", ""]);
        assert_eq!(s(r#"x "a\x41\n" 'it\'s'"#), ["x", "aA\n", "it's"]);
        assert_eq!(s(r#"x "\q""#), ["x", "q"]);
        assert_eq!(s("a\0b c"), ["a"]);
        assert!(s("").is_empty());
    }

    #[test]
    fn rejects_unbalanced() {
        assert_eq!(split_args(br#""abc"#), Err(SplitError));
        assert_eq!(split_args(br#""abc"d"#), Err(SplitError));
        assert_eq!(split_args(b"'abc"), Err(SplitError));
    }
}
