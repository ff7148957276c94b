//! Glob-style pattern matching with the exact semantics of Valkey's `stringmatchlen`, used by
//! KEYS, SCAN MATCH, and later CONFIG GET and PUBSUB patterns.
//!
//! The rules, quirks included, are those clients have relied on for years:
//!
//! - `*` matches any run of bytes (but a pattern only matches an empty string when it is
//!   itself empty: `*` against `""` is false; KEYS and SCAN special-case a lone `*`);
//! - `?` matches exactly one byte;
//! - `[abc]`, `[a-z]` (reversed ranges like `[z-a]` work too), `[^...]` negation, `\x` inside
//!   brackets is a literal; an unterminated `[` class runs to the end of the pattern;
//! - `\x` outside brackets matches `x` literally; a trailing `\` matches a backslash;
//! - with `nocase`, ASCII letters compare case-insensitively (bytes above 127 never fold).
//!
//! Range bounds compare as C `char`, which is signed on x86-64 (and unsigned on arm64 Linux,
//! so Valkey itself differs between the two). We follow x86-64: a byte of 0x80 or more is
//! negative there, so `[a-\xff]` is the range -1..=97.
//!
//! Nested `*` recursion is capped at 1000 levels (as Valkey does) and a failed tail match
//! stops all outer `*` from retrying longer prefixes, which keeps pathological patterns like
//! `a*a*a*...b` linear instead of exponential.

/// Whether `string` matches the glob `pattern`.
pub fn matches(pattern: &[u8], string: &[u8], nocase: bool) -> bool {
    let mut skip_longer = false;
    Matcher { pat: pattern, s: string, nocase }.run(0, 0, &mut skip_longer, 0)
}

/// The one cluster slot every key matching `pattern` hashes to, when the pattern pins it down
/// (Valkey's `patternHashSlot`): either it has no wildcard at all, or it starts with a
/// non-empty `{tag}` before any wildcard or escape. KEYS and SCAN then visit only that slot.
pub fn pattern_slot(pattern: &[u8]) -> Option<u16> {
    let mut open: Option<usize> = None;
    // An empty `{}` means the whole key is hashed and later braces no longer form a tag.
    let mut tag_closed_empty = false;
    for (i, &c) in pattern.iter().enumerate() {
        match c {
            b'*' | b'?' | b'[' | b'\\' => return None,
            b'{' if open.is_none() && !tag_closed_empty => open = Some(i),
            b'}' => match open {
                Some(s) if i == s + 1 => {
                    open = None;
                    tag_closed_empty = true;
                }
                Some(s) => return Some(crc_slot(&pattern[s + 1..i])),
                None => {}
            },
            _ => {}
        }
    }
    Some(crc_slot(pattern))
}

fn crc_slot(bytes: &[u8]) -> u16 {
    crc16::State::<crc16::XMODEM>::calculate(bytes) & (crate::slot::SLOTS as u16 - 1)
}

struct Matcher<'a> {
    pat: &'a [u8],
    s: &'a [u8],
    nocase: bool,
}

impl Matcher<'_> {
    /// The pattern byte at `i`, or 0 past the end: Valkey reads the NUL terminator of its
    /// string there, and a few branches depend on that.
    fn p(&self, i: usize) -> u8 {
        self.pat.get(i).copied().unwrap_or(0)
    }

    fn eq(&self, a: u8, b: u8) -> bool {
        if self.nocase { a.eq_ignore_ascii_case(&b) } else { a == b }
    }

    fn run(&self, mut pi: usize, mut si: usize, skip_longer: &mut bool, nesting: u32) -> bool {
        if nesting > 1000 {
            return false;
        }
        let (plen, slen) = (self.pat.len(), self.s.len());
        while pi < plen && si < slen {
            match self.pat[pi] {
                b'*' => {
                    while self.p(pi + 1) == b'*' {
                        pi += 1;
                    }
                    if pi + 1 == plen {
                        return true;
                    }
                    while si < slen {
                        if self.run(pi + 1, si, skip_longer, nesting + 1) {
                            return true;
                        }
                        if *skip_longer {
                            return false;
                        }
                        si += 1;
                    }
                    // The rest of the pattern matches nowhere in the rest of the string, so
                    // no earlier `*` can help by consuming more either.
                    *skip_longer = true;
                    return false;
                }
                b'?' => si += 1,
                b'[' => {
                    let (next, matched) = self.class(pi + 1, self.s[si]);
                    if !matched {
                        return false;
                    }
                    pi = next;
                    si += 1;
                }
                c => {
                    let lit = if c == b'\\' && plen - pi >= 2 {
                        pi += 1;
                        self.pat[pi]
                    } else {
                        c
                    };
                    if !self.eq(lit, self.s[si]) {
                        return false;
                    }
                    si += 1;
                }
            }
            pi += 1;
            if si == slen {
                while self.p(pi) == b'*' && pi < plen {
                    pi += 1;
                }
                break;
            }
        }
        pi == plen && si == slen
    }

    /// Matches `c` against the class whose body starts at `pi` (just after `[`). Returns the
    /// index of the class's last byte (its `]`, or the last pattern byte when unterminated)
    /// and whether `c` is in the class.
    fn class(&self, mut pi: usize, c: u8) -> (usize, bool) {
        let plen = self.pat.len();
        let negate = self.p(pi) == b'^';
        if negate {
            pi += 1;
        }
        let mut matched = false;
        loop {
            let here = self.p(pi);
            if here == b'\\' && plen.saturating_sub(pi) >= 2 {
                pi += 1;
                // Escapes inside a class compare exactly, even with nocase (as Valkey).
                if self.pat[pi] == c {
                    matched = true;
                }
            } else if here == b']' && pi < plen {
                break;
            } else if pi >= plen {
                // Unterminated: step back onto the last byte so the caller's advance ends
                // the pattern exactly.
                pi -= 1;
                break;
            } else if plen - pi >= 3 && self.pat[pi + 1] == b'-' {
                let (mut lo, mut hi) = (signed(self.pat[pi]), signed(self.pat[pi + 2]));
                let mut v = signed(c);
                if lo > hi {
                    std::mem::swap(&mut lo, &mut hi);
                }
                if self.nocase {
                    lo = lower(lo);
                    hi = lower(hi);
                    v = lower(v);
                }
                pi += 2;
                if lo <= v && v <= hi {
                    matched = true;
                }
            } else if self.eq(here, c) {
                matched = true;
            }
            pi += 1;
        }
        (pi, matched != negate)
    }
}

/// A byte as x86-64 C code sees a `char`.
fn signed(b: u8) -> i32 {
    i32::from(b as i8)
}

/// glibc's `tolower` in the C locale, on a signed char value: ASCII letters fold, and a
/// negative value other than EOF (-1) comes back as its unsigned byte, which moves high
/// bytes to the top of a nocase range comparison.
fn lower(c: i32) -> i32 {
    match c {
        65..=90 => c + 32,
        -128..=-2 => c + 256,
        _ => c,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(p: &str, s: &str) -> bool {
        matches(p.as_bytes(), s.as_bytes(), false)
    }

    fn mi(p: &str, s: &str) -> bool {
        matches(p.as_bytes(), s.as_bytes(), true)
    }

    #[test]
    fn literals_and_wildcards() {
        assert!(m("", ""));
        assert!(!m("", "a"));
        assert!(!m("a", ""));
        assert!(m("hello", "hello"));
        assert!(!m("hello", "hellO"));
        assert!(!m("hello", "hello!"));
        assert!(m("h?llo", "hallo"));
        assert!(!m("h?llo", "hllo"));
        assert!(m("h*llo", "hllo"));
        assert!(m("h*llo", "heeeello"));
        assert!(m("*", "anything"));
        assert!(m("**", "anything"));
        assert!(m("a*", "a"));
        assert!(m("a**", "a"));
        assert!(m("*a*", "bab"));
        assert!(!m("*a*", "bbb"));
        assert!(m("*?", "a"));
        assert!(!m("*??", "a"));
        assert!(m("foo*", "foo_a"));
        assert!(!m("foo*", "key_x"));
        assert!(m("*.txt", "a.b.txt"));
        assert!(!m("*.txt", "a.txt.gz"));
    }

    #[test]
    fn star_never_matches_the_empty_string() {
        // stringmatchlen only enters its loop with a non-empty string.
        assert!(!m("*", ""));
        assert!(!m("**", ""));
        assert!(!m("?", ""));
    }

    #[test]
    fn classes() {
        assert!(m("h[ae]llo", "hello"));
        assert!(m("h[ae]llo", "hallo"));
        assert!(!m("h[ae]llo", "hillo"));
        assert!(m("h[^e]llo", "hallo"));
        assert!(!m("h[^e]llo", "hello"));
        assert!(m("h[a-b]llo", "hbllo"));
        assert!(!m("h[a-b]llo", "hcllo"));
        assert!(m("[z-a]", "m"), "reversed ranges are swapped");
        assert!(!m("[]]", "]"), "a class ends at the first ], so [] is empty");
        assert!(m("[\\]]", "]"));
        assert!(m("[\\-]", "-"));
        assert!(m("[a-]", "^"), "a-] is the range ]..a");
        assert!(m("[a-c-e]", "-"), "after a range, - is a literal");
        assert!(m("[a-c-e]", "e"));
        assert!(!m("[a-c-e]", "d"));
        assert!(m("[abc", "a"), "unterminated class runs to the end");
        assert!(!m("[abc", "d"));
        assert!(!m("[", "a"));
        assert!(m("[^", "a"), "an empty negated class matches any byte");
        assert!(m("x[^", "xz"));
        assert!(m("[a-c]x", "bx"));
        assert!(m("[\\", "\\"), "a lone backslash in a class is a literal");
    }

    #[test]
    fn escapes() {
        assert!(m("\\*", "*"));
        assert!(!m("\\*", "a"));
        assert!(m("\\?", "?"));
        assert!(m("a\\[b", "a[b"));
        assert!(m("\\", "\\"), "a trailing backslash is literal");
        assert!(m("a\\", "a\\"));
        assert!(m("\\a", "a"));
    }

    #[test]
    fn nocase() {
        assert!(mi("HeLLo", "hello"));
        assert!(mi("h[A-Z]llo", "hello"));
        assert!(mi("h[E]llo", "hello"));
        assert!(!m("h[E]llo", "hello"));
        assert!(mi("H*", "hello"));
        // Escapes in a class compare exactly; escapes outside fold.
        assert!(!mi("h[\\E]llo", "hello"));
        assert!(mi("h\\Ello", "hello"));
        // Ranges are swapped before folding, so [Z-a] is z..a, which is empty.
        assert!(!mi("[Z-a]", "z"));
        assert!(m("[Z-a]", "_"));
        assert!(!matches(b"\xc0", b"\xe0", true), "no folding above ASCII");
    }

    #[test]
    fn signed_char_ranges() {
        // 0xff is -1 as a C char, so [a-\xff] is -1..=97: low bytes, 0xff itself, not 0x80.
        assert!(matches(b"[a-\xff]", b"A", false));
        assert!(matches(b"[a-\xff]", b"\xff", false));
        assert!(!matches(b"[a-\xff]", b"\x80", false));
        assert!(!matches(b"[a-\xff]", b"b", false));
        assert!(matches(b"[\x80-\xff]", b"\x90", false));
        assert!(!matches(b"[\x80-\xff]", b"a", false));
        // With nocase, glibc's tolower turns -128 into 128 but leaves -1 (EOF) alone, so
        // this range becomes the empty 128..=-1.
        assert!(!matches(b"[\x80-\xff]", b"\x90", true));
        assert!(!matches(b"[a-\xfe]", b"\xf0", true));
        assert!(!matches(b"[a-\xfe]", b"\xf0", false), "-16 is outside -2..=97");
    }

    #[test]
    fn binary_bytes() {
        assert!(matches(b"a\0*", b"a\0bc", false));
        assert!(!matches(b"a\0*", b"a", false));
        assert!(matches(b"*\0", b"xyz\0", false));
        assert!(matches(b"[\0]", b"\0", false));
    }

    #[test]
    fn pathological_patterns_finish() {
        let s = "a".repeat(40);
        assert!(!m(&format!("{}b", "a*".repeat(20)), &s));
        let long = "a".repeat(50_000);
        assert!(!m(&"*?".repeat(50_000), &long));
        assert!(m(&"*?".repeat(10), &long));
        // Beyond 1000 nested stars the match gives up, as Valkey does.
        let many = format!("{}a", "?*".repeat(1100));
        assert!(!m(&many, &"a".repeat(1200)));
    }

    proptest::proptest! {
        #[test]
        fn escaped_text_matches_only_itself(s in proptest::collection::vec(proptest::num::u8::ANY, 0..24),
                                            t in proptest::collection::vec(proptest::num::u8::ANY, 0..24)) {
            let escaped: Vec<u8> = s.iter().flat_map(|&c| [b'\\', c]).collect();
            proptest::prop_assert!(matches(&escaped, &s, false));
            proptest::prop_assert_eq!(matches(&escaped, &t, false), s == t);
            let upper = s.to_ascii_uppercase();
            proptest::prop_assert!(matches(&escaped, &upper, true));
        }

        #[test]
        fn stars_and_questions_agree_with_length(s in proptest::collection::vec(proptest::num::u8::ANY, 1..24),
                                                 n in 0usize..30) {
            let q = vec![b'?'; n];
            proptest::prop_assert_eq!(matches(&q, &s, false), n == s.len());
            let mut qs = q.clone();
            qs.push(b'*');
            proptest::prop_assert_eq!(matches(&qs, &s, false), n <= s.len());
            proptest::prop_assert!(matches(b"*", &s, false));
            let head = &s[..s.len() / 2];
            if !head.iter().any(|c| matches!(c, b'*' | b'?' | b'[' | b'\\')) {
                let mut prefix = head.to_vec();
                prefix.push(b'*');
                proptest::prop_assert!(matches(&prefix, &s, false));
            }
        }
    }

    #[test]
    fn pattern_slots() {
        use crate::slot::key_slot;
        assert_eq!(pattern_slot(b"foo"), Some(key_slot(b"foo")));
        assert_eq!(pattern_slot(b"{a}*"), Some(key_slot(b"{a}x")));
        assert_eq!(pattern_slot(b"x{a}?[z]"), Some(key_slot(b"a")));
        assert_eq!(pattern_slot(b"*{a}"), None);
        assert_eq!(pattern_slot(b"{a*}"), None);
        assert_eq!(pattern_slot(b"{a\\}}"), None);
        assert_eq!(pattern_slot(b"f?o"), None);
        assert_eq!(pattern_slot(b"{}{a}"), Some(key_slot(b"{}{a}")));
        assert_eq!(pattern_slot(b"{}{a}*"), None);
        assert_eq!(pattern_slot(b"{{a}"), Some(key_slot(b"{{a}")));
        assert_eq!(pattern_slot(b"{abc"), Some(key_slot(b"{abc")));
        assert_eq!(pattern_slot(b""), Some(0));
    }
}
