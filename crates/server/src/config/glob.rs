//! Glob matching with Valkey's `stringmatchlen` semantics (`*`, `?`, `[abc]`, `[^a-z]`, `\x`),
//! for CONFIG GET patterns and `include` wildcards.
//!
//! The engine crate is getting its own copy for KEYS/SCAN; this one is local to the config
//! module until both can share it.

/// Whether `string` matches `pattern`; `nocase` folds ASCII case as Valkey's `tolower` does.
pub fn string_match(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer = false;
    match_impl(pattern, string, nocase, &mut skip_longer, 0)
}

/// Valkey's protection against patterns that would recurse without end.
const MAX_NESTING: usize = 1000;

fn match_impl(mut p: &[u8], mut s: &[u8], nocase: bool, skip_longer: &mut bool, nesting: usize) -> bool {
    if nesting > MAX_NESTING {
        return false;
    }
    let fold = |c: u8| if nocase { c.to_ascii_lowercase() } else { c };
    while !p.is_empty() && !s.is_empty() {
        match p[0] {
            b'*' => {
                while p.len() > 1 && p[1] == b'*' {
                    p = &p[1..];
                }
                if p.len() == 1 {
                    return true;
                }
                while !s.is_empty() {
                    if match_impl(&p[1..], s, nocase, skip_longer, nesting + 1) {
                        return true;
                    }
                    if *skip_longer {
                        return false;
                    }
                    s = &s[1..];
                }
                // The rest of the pattern matches nowhere in the rest of the string, so no
                // earlier `*` can help by swallowing more: stop the whole search (Valkey's
                // skipLongerMatches keeps `a*a*a*...b` from going exponential).
                *skip_longer = true;
                return false;
            }
            b'?' => {
                p = &p[1..];
                s = &s[1..];
            }
            b'[' => {
                let (matched, rest) = match_class(&p[1..], s[0], nocase);
                if !matched {
                    return false;
                }
                p = rest;
                s = &s[1..];
            }
            c => {
                let (lit, rest) = if c == b'\\' && p.len() >= 2 { (p[1], &p[2..]) } else { (c, &p[1..]) };
                if fold(lit) != fold(s[0]) {
                    return false;
                }
                p = rest;
                s = &s[1..];
            }
        }
        if s.is_empty() {
            while p.first() == Some(&b'*') {
                p = &p[1..];
            }
            break;
        }
    }
    p.is_empty() && s.is_empty()
}

/// Matches one character against a `[...]` class whose text starts at `p` (after the `[`).
/// Returns whether it matched and the pattern after the class (an unterminated class runs to
/// the end of the pattern, as in Valkey).
fn match_class(mut p: &[u8], c: u8, nocase: bool) -> (bool, &[u8]) {
    let not = p.first() == Some(&b'^');
    if not {
        p = &p[1..];
    }
    let mut matched = false;
    loop {
        if p.first() == Some(&b'\\') && p.len() >= 2 {
            p = &p[1..];
            // Valkey compares an escaped class member case-sensitively even with nocase.
            if p[0] == c {
                matched = true;
            }
        } else if p.first() == Some(&b']') {
            return (matched != not, &p[1..]);
        } else if p.is_empty() {
            return (matched != not, p);
        } else if p.len() >= 3 && p[1] == b'-' {
            let (mut start, mut end, mut ch) = (p[0], p[2], c);
            if start > end {
                std::mem::swap(&mut start, &mut end);
            }
            if nocase {
                start = start.to_ascii_lowercase();
                end = end.to_ascii_lowercase();
                ch = ch.to_ascii_lowercase();
            }
            p = &p[2..];
            if (start..=end).contains(&ch) {
                matched = true;
            }
        } else if (nocase && p[0].eq_ignore_ascii_case(&c)) || p[0] == c {
            matched = true;
        }
        p = &p[1..];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        string_match(p.as_bytes(), s.as_bytes(), true)
    }

    #[test]
    fn stars_and_questions() {
        assert!(m("*", "maxmemory"));
        assert!(m("max*", "maxmemory-policy"));
        assert!(m("*of", "replicaof"));
        assert!(m("*of", "slaveof"));
        assert!(!m("*of", "replicaofx"));
        assert!(m("p?rt", "port"));
        assert!(m("MAX*", "maxmemory"));
        // As in Valkey, nothing matches the empty string, not even `*`.
        assert!(!m("*", ""));
        assert!(!m("a", ""));
        assert!(m("a*b*c", "aXXbYYc"));
        assert!(!m("a*b*c", "aXXbYY"));
        assert!(!string_match(b"MAX*", b"maxmemory", false));
    }

    #[test]
    fn classes_and_escapes() {
        assert!(m("h[ae]llo", "hello"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(m("h[b-a]llo", "hallo"));
        assert!(m("h[A-Z]llo", "hello"));
        assert!(m("a\\*b", "a*b"));
        assert!(!m("a\\*b", "axb"));
        assert!(m("a[\\]]b", "a]b"));
        assert!(m("a[bc", "ab"));
    }

    #[test]
    fn pathological_pattern_terminates() {
        let p = "a*".repeat(40) + "b";
        let s = "a".repeat(60);
        assert!(!m(&p, &s));
    }
}
