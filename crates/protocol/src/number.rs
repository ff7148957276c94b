//! Number parsing and formatting with Valkey's exact acceptance rules and output forms.

/// Parses a signed 64-bit integer the way Valkey's `string2ll` does: optional `-`, no `+`,
/// no leading zeros, no blanks, at most 20 characters.
pub fn parse_i64(s: &[u8]) -> Option<i64> {
    if s.is_empty() || s.len() > 20 {
        return None;
    }
    if s == b"0" {
        return Some(0);
    }
    let (neg, digits) = match s[0] {
        b'-' => (true, &s[1..]),
        _ => (false, s),
    };
    match digits.first() {
        Some(b'1'..=b'9') => {}
        _ => return None,
    }
    let mut v: u64 = 0;
    for &c in digits {
        if !c.is_ascii_digit() {
            return None;
        }
        v = v.checked_mul(10)?.checked_add(u64::from(c - b'0'))?;
    }
    if neg {
        if v > i64::MAX as u64 + 1 {
            return None;
        }
        Some((v as i64).wrapping_neg())
    } else {
        i64::try_from(v).ok()
    }
}

/// Parses a non-negative integer that fits an `i64` (Valkey's `string2ull` via `string2ll`).
pub fn parse_u64(s: &[u8]) -> Option<u64> {
    parse_i64(s).and_then(|v| u64::try_from(v).ok())
}

/// Parses a double the way Valkey's `string2d` does: the whole string must be the number, no
/// leading blank, `nan` refused, overflow to infinity or underflow to zero refused (while an
/// explicit `inf`/`-inf` is accepted).
pub fn parse_double(s: &[u8]) -> Option<f64> {
    let text = std::str::from_utf8(s).ok()?;
    if text.is_empty() || text.as_bytes()[0].is_ascii_whitespace() {
        return None;
    }
    let v: f64 = text.parse().ok()?;
    if v.is_nan() {
        return None;
    }
    let lower = text.to_ascii_lowercase();
    if v.is_infinite() && !lower.contains("inf") {
        return None; // ERANGE overflow
    }
    if v == 0.0 && mantissa_has_nonzero_digit(&lower) {
        return None; // ERANGE underflow
    }
    Some(v)
}

/// Parses a number as Valkey's `string2ld` (C `strtold`) does: everything [`parse_double`]
/// takes, plus hexadecimal floats such as `0x7FFFFFFFFFFFFF` or `0x1.8p1`. Blocking
/// commands read their timeout this way, so a hex timeout is a number (and may be out of
/// range) rather than a syntax error.
pub fn parse_long_double(s: &[u8]) -> Option<f64> {
    parse_double(s).or_else(|| parse_hex_float(s))
}

/// `[+-]0x<hex digits>[.<hex digits>][p[+-]<decimal exponent>]`; None past the f64 range.
fn parse_hex_float(s: &[u8]) -> Option<f64> {
    let (neg, rest) = match s.first()? {
        b'-' => (true, &s[1..]),
        b'+' => (false, &s[1..]),
        _ => (false, s),
    };
    let rest = rest.strip_prefix(b"0x").or_else(|| rest.strip_prefix(b"0X"))?;
    let (mantissa, exp) = match rest.iter().position(|&c| c == b'p' || c == b'P') {
        Some(i) => (&rest[..i], Some(&rest[i + 1..])),
        None => (rest, None),
    };
    let (int_part, frac_part) = match mantissa.iter().position(|&c| c == b'.') {
        Some(i) => (&mantissa[..i], &mantissa[i + 1..]),
        None => (mantissa, &[][..]),
    };
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    let digit = |c: u8| char::from(c).to_digit(16).map(f64::from);
    let mut v = 0.0;
    for &c in int_part {
        v = v * 16.0 + digit(c)?;
    }
    let mut scale = 1.0 / 16.0;
    for &c in frac_part {
        v += digit(c)? * scale;
        scale /= 16.0;
    }
    if let Some(e) = exp {
        let e: i32 = std::str::from_utf8(e).ok()?.parse().ok()?;
        v *= 2f64.powi(e);
    }
    // strtold reports ERANGE for a value past the type's range; string2ld refuses it.
    v.is_finite().then_some(if neg { -v } else { v })
}

fn mantissa_has_nonzero_digit(lower: &str) -> bool {
    let mantissa = lower.split('e').next().unwrap_or("");
    mantissa.bytes().any(|c| (b'1'..=b'9').contains(&c))
}

/// Formats a double as Valkey's `d2string`: `inf`, `-inf`, `nan`, `0`/`-0`, integral values
/// as integers, everything else in the shortest form that reads back to the same double,
/// with the exponent notation rules of Valkey's `fpconv_dtoa`.
pub fn format_double(v: f64, out: &mut Vec<u8>) {
    if v.is_nan() {
        out.extend_from_slice(b"nan");
    } else if v.is_infinite() {
        out.extend_from_slice(if v < 0.0 { b"-inf" } else { b"inf" });
    } else if v == 0.0 {
        out.extend_from_slice(if v.is_sign_negative() { b"-0" } else { b"0" });
    } else if v >= (i64::MIN / 2) as f64 && v <= (i64::MAX / 2) as f64 && (v as i64) as f64 == v {
        out.extend_from_slice(itoa::Buffer::new().format(v as i64).as_bytes());
    } else {
        emit_shortest(v, out);
    }
}

/// Formats a double as Valkey's bare `fpconv_dtoa`, without `d2string`'s integer shortcut:
/// DEBUG DIGEST hashes sorted-set scores in this form, so `1e17` must read `1e+17` there
/// even though ZSCORE replies `100000000000000000`.
pub fn fpconv_dtoa(v: f64, out: &mut Vec<u8>) {
    if v.is_sign_negative() && !v.is_nan() {
        out.push(b'-');
    }
    if v == 0.0 {
        out.push(b'0');
    } else if v.is_nan() {
        out.extend_from_slice(b"nan");
    } else if v.is_infinite() {
        out.extend_from_slice(b"inf");
    } else {
        emit_shortest(v.abs(), out);
    }
}

/// Writes `v` (finite, non-zero) using the shortest round-trip digits and `fpconv_dtoa`'s
/// layout: plain integer, plain decimal, or `d.ddde±XX`.
fn emit_shortest(v: f64, out: &mut Vec<u8>) {
    // `{:e}` gives the shortest round-trip digits as `d.ddde<exp>`.
    let sci = format!("{:e}", v.abs());
    let (mant, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let digits: Vec<u8> = mant.bytes().filter(u8::is_ascii_digit).collect();
    let ndigits = digits.len() as i32;
    // fpconv's K: the value is digits * 10^K.
    let k = exp - (ndigits - 1);
    let neg = v < 0.0;
    if neg {
        out.push(b'-');
    }
    let abs_exp = (k + ndigits - 1).abs();
    if k >= 0 && abs_exp < ndigits + 7 {
        out.extend_from_slice(&digits);
        out.extend(std::iter::repeat_n(b'0', k as usize));
        return;
    }
    if k < 0 && (k > -7 || abs_exp < 4) {
        let offset = ndigits + k;
        if offset <= 0 {
            out.extend_from_slice(b"0.");
            out.extend(std::iter::repeat_n(b'0', (-offset) as usize));
            out.extend_from_slice(&digits);
        } else {
            out.extend_from_slice(&digits[..offset as usize]);
            out.push(b'.');
            out.extend_from_slice(&digits[offset as usize..]);
        }
        return;
    }
    let nd = ndigits.min(18 - i32::from(neg)) as usize;
    out.push(digits[0]);
    if nd > 1 {
        out.push(b'.');
        out.extend_from_slice(&digits[1..nd]);
    }
    out.push(b'e');
    out.push(if k + ndigits - 1 < 0 { b'-' } else { b'+' });
    out.extend_from_slice(itoa::Buffer::new().format(abs_exp).as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fmt(v: f64) -> String {
        let mut out = Vec::new();
        format_double(v, &mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn long_doubles_take_hex_like_strtold() {
        assert_eq!(parse_long_double(b"1.5"), Some(1.5));
        assert_eq!(parse_long_double(b"0x10"), Some(16.0));
        assert_eq!(parse_long_double(b"-0X1.8p1"), Some(-3.0));
        assert_eq!(parse_long_double(b"0x7FFFFFFFFFFFFF"), Some(36028797018963967.0));
        assert_eq!(parse_long_double(b"0x"), None);
        assert_eq!(parse_long_double(b"0x1g"), None);
        assert_eq!(parse_long_double(b"0x1p99999"), None, "out of range");
        assert_eq!(parse_double(b"0x10"), None, "string2d stays decimal");
    }

    #[test]
    fn fpconv_dtoa_has_no_integer_shortcut() {
        let f = |v: f64| {
            let mut out = Vec::new();
            fpconv_dtoa(v, &mut out);
            String::from_utf8(out).unwrap()
        };
        assert_eq!(f(1e17), "1e+17");
        assert_eq!(fmt(1e17), "100000000000000000");
        assert_eq!(f(10000000.0), "10000000");
        assert_eq!(f(-2.5), "-2.5");
        assert_eq!(f(0.1), "0.1");
        assert_eq!(f(0.0), "0");
        assert_eq!(f(-0.0), "-0");
        assert_eq!(f(f64::INFINITY), "inf");
        assert_eq!(f(f64::NEG_INFINITY), "-inf");
        assert_eq!(f(1.5e-9), "1.5e-9");
    }

    #[test]
    fn parses_integers_like_string2ll() {
        assert_eq!(parse_i64(b"0"), Some(0));
        assert_eq!(parse_i64(b"-9223372036854775808"), Some(i64::MIN));
        assert_eq!(parse_i64(b"9223372036854775807"), Some(i64::MAX));
        assert_eq!(parse_i64(b"9223372036854775808"), None);
        for bad in [&b""[..], b"-", b"+1", b"01", b"-0", b" 1", b"1 ", b"1a", b"00"] {
            assert_eq!(parse_i64(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }

    #[test]
    fn parses_doubles_like_string2d() {
        assert_eq!(parse_double(b"1.5"), Some(1.5));
        assert_eq!(parse_double(b"-inf"), Some(f64::NEG_INFINITY));
        assert_eq!(parse_double(b"1e5"), Some(1e5));
        assert_eq!(parse_double(b"nan"), None);
        assert_eq!(parse_double(b"1e400"), None);
        assert_eq!(parse_double(b"1e-400"), None);
        assert_eq!(parse_double(b" 1"), None);
        assert_eq!(parse_double(b"1 "), None);
        assert_eq!(parse_double(b""), None);
    }

    #[test]
    fn formats_like_d2string() {
        assert_eq!(fmt(1.0), "1");
        assert_eq!(fmt(-0.0), "-0");
        assert_eq!(fmt(1.5), "1.5");
        assert_eq!(fmt(0.1), "0.1");
        assert_eq!(fmt(3.0e-7), "3e-7");
        assert_eq!(fmt(1.0e20), "1e+20");
        assert_eq!(fmt(1.0e15 + 0.5), "1000000000000000.5");
        assert_eq!(fmt(1.5e30), "1.5e+30");
        assert_eq!(fmt(f64::INFINITY), "inf");
        assert_eq!(fmt(0.000123), "0.000123");
        assert_eq!(fmt(1.0 / 3.0), "0.3333333333333333");
    }
}
