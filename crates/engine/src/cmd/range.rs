//! String commands that work on part of a value or its length: APPEND, STRLEN, GETRANGE
//! (and its old name SUBSTR), SETRANGE, LCS.

use hotkv_protocol::{Args, ReplyBuf};

use super::string::{RO_ACCESS, row};
use super::{Spec, int_arg};
use crate::command::{KeySpec, flags, key_flags as kf};
use crate::ctx::{Ctx, KeyMut, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;

/// Range command rows.
pub static COMMANDS: &[Spec] = &[
    row(
        "append",
        3,
        flags::WRITE | flags::DENYOOM | flags::FAST,
        &[KeySpec::single(1, kf::RW | kf::INSERT)],
        "2.0.0",
        "Appends a string to the value of a key. Creates the key if it doesn't exist.",
        "O(1). The amortized time complexity is O(1) assuming the appended value is small and the already present \
         value is of any size, since the dynamic string library used by the server will double the free space \
         available on every reallocation.",
        append,
    ),
    row(
        "strlen",
        2,
        flags::READONLY | flags::FAST,
        &[KeySpec::single(1, kf::RO)],
        "2.2.0",
        "Returns the length of a string value.",
        "O(1)",
        strlen,
    ),
    row(
        "getrange",
        4,
        flags::READONLY,
        RO_ACCESS,
        "2.4.0",
        "Returns a substring of the string stored at a key.",
        GETRANGE_COMPLEXITY,
        getrange,
    ),
    row(
        "substr",
        4,
        flags::READONLY,
        RO_ACCESS,
        "1.0.0",
        "Returns a substring from a string value.",
        GETRANGE_COMPLEXITY,
        getrange,
    ),
    row(
        "setrange",
        4,
        flags::WRITE | flags::DENYOOM,
        &[KeySpec::single(1, kf::RW | kf::UPDATE)],
        "2.2.0",
        "Overwrites a part of a string value with another by an offset. Creates the key if it doesn't exist.",
        "O(1), not counting the time taken to copy the new string in place. Usually, this string is very small so \
         the amortized complexity is O(1). Otherwise, complexity is O(M) with M being the length of the value \
         argument.",
        setrange,
    ),
    row(
        "lcs",
        -3,
        flags::READONLY,
        &[KeySpec::range(1, 1, 1, kf::RO | kf::ACCESS)],
        "7.0.0",
        "Finds the longest common substring.",
        "O(N*M) where N and M are the lengths of s1 and s2, respectively",
        lcs,
    ),
];

const GETRANGE_COMPLEXITY: &str = "O(N) where N is the length of the returned string. The complexity is ultimately \
    determined by the returned length, but because creating a substring from an existing string is very cheap, it \
    can be considered O(1) for small strings.";

/// sds's preallocation cap: below it a growing string doubles, above it gains 1 MiB.
const MAX_PREALLOC: usize = 1024 * 1024;

fn append(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, tail) = (args.get(1), args.get(2));
    let max = ctx.cfg.proto_max_bulk_len;
    let len = match ctx.write(key)? {
        Some(mut k) => {
            let old = k.str()?.len();
            check_length(old as u64, tail.len() as u64, max)?;
            let len = old + tail.len();
            edit(&mut k, len, |v| v.extend_from_slice(tail));
            ctx.modified(key);
            len
        }
        None => {
            ctx.set(key, NewValue::Bytes(tail), Ttl::Clear)?;
            tail.len()
        }
    };
    ctx.events.notify('$', "append", key, ctx.db);
    out.int(len as i64);
    Ok(())
}

fn strlen(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let len = match ctx.read(args.get(1))? {
        Some(k) => k.str()?.len(),
        None => 0,
    };
    out.int(len as i64);
    Ok(())
}

fn getrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (start, end) = (int_arg(args.get(2))?, int_arg(args.get(3))?);
    let Some(k) = ctx.read(args.get(1))? else {
        out.bulk(b"");
        return Ok(());
    };
    let s = k.str()?;
    match clamp_range(start, end, s.len()) {
        Some((from, to)) => out.bulk(&s[from..=to]),
        None => out.bulk(b""),
    }
    Ok(())
}

/// GETRANGE's index rules: negative indexes count from the end, both ends are clamped into
/// the string, and an empty or inverted range (or two negative indexes in the wrong order)
/// selects nothing.
fn clamp_range(start: i64, end: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    if (start < 0 && end < 0 && start > end) || len == 0 {
        return None;
    }
    let start = if start < 0 { start + len } else { start }.max(0);
    let end = if end < 0 { end + len } else { end }.clamp(0, len - 1);
    (start <= end).then_some((start as usize, end as usize))
}

fn setrange(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let (key, patch) = (args.get(1), args.get(3));
    let offset = int_arg(args.get(2))?;
    let Ok(offset) = usize::try_from(offset) else {
        return Err(CommandError::err("offset is out of range"));
    };
    let max = ctx.cfg.proto_max_bulk_len;
    let end = offset.saturating_add(patch.len());
    let len = match ctx.write(key)? {
        Some(mut k) => {
            let old = k.str()?.len();
            // Writing nothing changes nothing, even past the end.
            if patch.is_empty() {
                out.int(old as i64);
                return Ok(());
            }
            check_length(offset as u64, patch.len() as u64, max)?;
            let len = old.max(end);
            // Like Valkey, an edited string becomes "raw" (an object with room to grow), even
            // when the patch fits: OBJECT ENCODING must say so.
            edit(&mut k, len, |v| {
                v.resize(len, 0);
                v[offset..end].copy_from_slice(patch);
            });
            ctx.modified(key);
            len
        }
        None => {
            if patch.is_empty() {
                out.int(0);
                return Ok(());
            }
            check_length(offset as u64, patch.len() as u64, max)?;
            let mut v = vec![0; end];
            v[offset..].copy_from_slice(patch);
            ctx.set(key, NewValue::Object(Object::Str(v)), Ttl::Clear)?;
            end
        }
    };
    ctx.events.notify('$', "setrange", key, ctx.db);
    out.int(len as i64);
    Ok(())
}

/// Valkey's `checkStringLength`: `size + added` must stay within `proto-max-bulk-len`.
fn check_length(size: u64, added: u64, max: u64) -> Result<(), CommandError> {
    match size.checked_add(added) {
        Some(total) if total <= max => Ok(()),
        _ => Err(CommandError::StringTooLong),
    }
}

/// Applies `change` to the string at `k` as a growable buffer that will be `new_len` bytes
/// long. An inline string becomes an `Object::Str` first (Valkey's "raw" encoding); buffers
/// grow the way sds does, doubling below 1 MiB, so repeated APPENDs stay amortized O(1).
fn edit(k: &mut KeyMut<'_>, new_len: usize, change: impl FnOnce(&mut Vec<u8>)) {
    if let Some(Object::Str(v)) = k.entry_mut().object_mut() {
        if v.capacity() < new_len {
            v.reserve_exact(prealloc(new_len) - v.len());
        }
        change(v);
        return;
    }
    let old = k.str().unwrap_or_default();
    let mut v = Vec::with_capacity(prealloc(new_len));
    v.extend_from_slice(old);
    change(&mut v);
    k.set_value(NewValue::Object(Object::Str(v)));
}

/// The capacity sds gives a string growing to `len`.
pub(super) fn prealloc(len: usize) -> usize {
    if len < MAX_PREALLOC { len * 2 } else { len + MAX_PREALLOC }
}

/// LCS's options.
#[derive(Debug, Clone, Copy, Default)]
struct LcsArgs {
    len: bool,
    idx: bool,
    with_match_len: bool,
    min_match_len: u64,
}

impl LcsArgs {
    fn parse(args: &Args<'_>) -> Result<LcsArgs, CommandError> {
        let mut a = LcsArgs::default();
        let mut i = 3;
        while i < args.len() {
            let opt = args.get(i);
            if opt.eq_ignore_ascii_case(b"idx") {
                a.idx = true;
            } else if opt.eq_ignore_ascii_case(b"len") {
                a.len = true;
            } else if opt.eq_ignore_ascii_case(b"withmatchlen") {
                a.with_match_len = true;
            } else if opt.eq_ignore_ascii_case(b"minmatchlen") && i + 1 < args.len() {
                a.min_match_len = int_arg(args.get(i + 1))?.max(0) as u64;
                i += 1;
            } else {
                return Err(CommandError::Syntax);
            }
            i += 1;
        }
        if a.len && a.idx {
            return Err(CommandError::err("If you want both the length and indexes, please just use IDX."));
        }
        Ok(a)
    }
}

/// One matching run: inclusive ranges in the first and the second string.
struct Match {
    a: (u32, u32),
    b: (u32, u32),
}

fn lcs(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let not_strings = || CommandError::err("The specified keys must contain string values");
    // Both keys are read before the options are parsed, as in Valkey (it matters for stats).
    let a = ctx.read(args.get(1))?.map(|k| k.str().map(<[u8]>::to_vec));
    let b = ctx.read(args.get(2))?.map(|k| k.str().map(<[u8]>::to_vec));
    let (Ok(a), Ok(b)) = (a.transpose(), b.transpose()) else { return Err(not_strings()) };
    let (a, b) = (a.unwrap_or_default(), b.unwrap_or_default());
    let opts = LcsArgs::parse(&args)?;
    if a.len() >= u32::MAX as usize - 1 || b.len() >= u32::MAX as usize - 1 {
        return Err(CommandError::err("String too long for LCS"));
    }
    let table = LcsTable::build(&a, &b, ctx.cfg.proto_max_bulk_len)?;
    let total = table.at(a.len(), b.len());
    if opts.len {
        out.int(i64::from(total));
        return Ok(());
    }
    let (common, matches) = table.walk(&a, &b, opts.min_match_len);
    if !opts.idx {
        out.bulk(&common);
        return Ok(());
    }
    out.map(2);
    out.bulk(b"matches");
    out.array(matches.len());
    for m in &matches {
        out.array(2 + usize::from(opts.with_match_len));
        for (start, end) in [m.a, m.b] {
            out.array(2);
            out.int(i64::from(start));
            out.int(i64::from(end));
        }
        if opts.with_match_len {
            out.int(i64::from(m.a.1 - m.a.0 + 1));
        }
    }
    out.bulk(b"len");
    out.int(i64::from(total));
    Ok(())
}

/// The dynamic-programming table: `at(i, j)` is the LCS length of `a[..i]` and `b[..j]`.
struct LcsTable {
    cells: Vec<u32>,
    width: usize,
}

impl LcsTable {
    fn build(a: &[u8], b: &[u8], max: u64) -> Result<LcsTable, CommandError> {
        let width = b.len() + 1;
        let cells = (a.len() + 1).checked_mul(width);
        let bytes = cells.and_then(|c| c.checked_mul(std::mem::size_of::<u32>()));
        let (Some(cells), Some(bytes)) = (cells, bytes) else {
            return Err(CommandError::err("Insufficient memory, failed allocating transient memory for LCS"));
        };
        if bytes as u64 > max {
            return Err(CommandError::err("Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"));
        }
        let mut v = Vec::new();
        if v.try_reserve_exact(cells).is_err() {
            return Err(CommandError::err("Insufficient memory, failed allocating transient memory for LCS"));
        }
        v.resize(cells, 0);
        let mut t = LcsTable { cells: v, width };
        for i in 1..=a.len() {
            for j in 1..=b.len() {
                let v = if a[i - 1] == b[j - 1] { t.at(i - 1, j - 1) + 1 } else { t.at(i - 1, j).max(t.at(i, j - 1)) };
                t.cells[i * width + j] = v;
            }
        }
        Ok(t)
    }

    fn at(&self, i: usize, j: usize) -> u32 {
        self.cells[i * self.width + j]
    }

    /// Walks back from the end, collecting the common subsequence and its matching runs
    /// (last run first, as Valkey reports them), keeping runs of at least `min_len`.
    fn walk(&self, a: &[u8], b: &[u8], min_len: u64) -> (Vec<u8>, Vec<Match>) {
        let mut common = vec![0u8; self.at(a.len(), b.len()) as usize];
        let mut idx = common.len();
        let mut matches = Vec::new();
        let mut run: Option<Match> = None;
        let (mut i, mut j) = (a.len(), b.len());
        while i > 0 && j > 0 {
            let mut emit = false;
            if a[i - 1] == b[j - 1] {
                common[idx - 1] = a[i - 1];
                let (ai, bj) = ((i - 1) as u32, (j - 1) as u32);
                match &mut run {
                    None => run = Some(Match { a: (ai, ai), b: (bj, bj) }),
                    // Contiguous with the run so far: extend it backwards.
                    Some(r) if r.a.0 == ai + 1 && r.b.0 == bj + 1 => {
                        r.a.0 = ai;
                        r.b.0 = bj;
                    }
                    Some(_) => emit = true,
                }
                if let Some(r) = &run
                    && (r.a.0 == 0 || r.b.0 == 0)
                {
                    emit = true;
                }
                idx -= 1;
                i -= 1;
                j -= 1;
            } else {
                if self.at(i - 1, j) > self.at(i, j - 1) {
                    i -= 1;
                } else {
                    j -= 1;
                }
                emit = run.is_some();
            }
            if emit
                && let Some(r) = run.take()
                && u64::from(r.a.1 - r.a.0 + 1) >= min_len
            {
                matches.push(r);
            }
        }
        (common, matches)
    }
}

#[cfg(test)]
mod tests {
    use hotkv_protocol::Protocol;

    use super::clamp_range;
    use crate::testkit::TestKit;

    #[test]
    fn append_creates_and_grows() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["APPEND", "k", "hello"]), ":5\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "k"]), "$6\r\nembstr\r\n", "a new key is stored as given");
        assert_eq!(t.run(&["APPEND", "k", " world"]), ":11\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$11\r\nhello world\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "k"]), "$3\r\nraw\r\n");
        for _ in 0..100 {
            t.run(&["APPEND", "k", "!"]);
        }
        assert_eq!(t.run(&["STRLEN", "k"]), ":111\r\n");
        assert_eq!(t.run(&["APPEND", "k", ""]), ":111\r\n");
        let events = t.events.take();
        assert_eq!(events.iter().filter(|e| *e == "$:append:k@0").count(), 103);
    }

    #[test]
    fn append_turns_int_into_raw_and_keeps_ttl() {
        let mut t = TestKit::default();
        t.run(&["SET", "foo", "1", "EX", "100"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "foo"]), "$3\r\nint\r\n");
        t.run(&["APPEND", "foo", "2"]);
        assert_eq!(t.run(&["GET", "foo"]), "$2\r\n12\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "foo"]), "$3\r\nraw\r\n");
        assert_eq!(t.run(&["TTL", "foo"]), ":100\r\n");
        t.run(&["SET", "bar", "12"]);
        assert_eq!(t.run(&["OBJECT", "ENCODING", "bar"]), "$3\r\nint\r\n");
    }

    #[test]
    fn append_respects_proto_max_bulk_len() {
        let mut t = TestKit::default();
        t.cfg.proto_max_bulk_len = 10;
        t.run(&["SET", "k", "12345"]);
        assert_eq!(t.run(&["APPEND", "k", "67890"]), ":10\r\n");
        assert_eq!(t.run(&["APPEND", "k", "x"]), "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n");
        assert_eq!(t.run(&["STRLEN", "k"]), ":10\r\n");
    }

    #[test]
    fn strlen() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["STRLEN", "k"]), ":0\r\n");
        t.run(&["SET", "k", "12345"]);
        assert_eq!(t.run(&["STRLEN", "k"]), ":5\r\n");
        t.run(&["SET", "k", ""]);
        assert_eq!(t.run(&["STRLEN", "k"]), ":0\r\n");
    }

    #[test]
    fn getrange() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["GETRANGE", "k", "0", "-1"]), "$0\r\n\r\n");
        t.run(&["SET", "k", "Hello World"]);
        let g = |t: &mut TestKit, a: &str, b: &str| t.run(&["GETRANGE", "k", a, b]);
        assert_eq!(g(&mut t, "0", "3"), "$4\r\nHell\r\n");
        assert_eq!(g(&mut t, "0", "-1"), "$11\r\nHello World\r\n");
        assert_eq!(g(&mut t, "-5", "-1"), "$5\r\nWorld\r\n");
        assert_eq!(g(&mut t, "-1", "-5"), "$0\r\n\r\n");
        assert_eq!(g(&mut t, "5", "3"), "$0\r\n\r\n");
        assert_eq!(g(&mut t, "-100", "2"), "$3\r\nHel\r\n");
        assert_eq!(g(&mut t, "0", "4294967297"), "$11\r\nHello World\r\n");
        assert_eq!(g(&mut t, "100", "200"), "$0\r\n\r\n");
        assert_eq!(g(&mut t, "-9223372036854775808", "9223372036854775807"), "$11\r\nHello World\r\n");
        assert_eq!(g(&mut t, "10", "-100"), "$0\r\n\r\n");
        assert_eq!(g(&mut t, "0", "-100"), "$1\r\nH\r\n", "a too negative end clamps to 0");
        assert_eq!(g(&mut t, "a", "1"), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["SUBSTR", "k", "6", "-1"]), "$5\r\nWorld\r\n");
        t.run(&["SET", "e", ""]);
        assert_eq!(t.run(&["GETRANGE", "e", "0", "-1"]), "$0\r\n\r\n");
        t.run(&["SET", "n", "12345"]);
        assert_eq!(t.run(&["GETRANGE", "n", "1", "2"]), "$2\r\n23\r\n");
    }

    #[test]
    fn clamp_range_edges() {
        assert_eq!(clamp_range(0, 0, 0), None);
        assert_eq!(clamp_range(0, -1, 1), Some((0, 0)));
        assert_eq!(clamp_range(i64::MIN, i64::MIN, 5), Some((0, 0)));
        assert_eq!(clamp_range(i64::MAX, i64::MAX, 5), None);
        assert_eq!(clamp_range(-2, i64::MAX, 5), Some((3, 4)));
    }

    #[test]
    fn setrange_patches_and_pads() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SETRANGE", "k", "0", ""]), ":0\r\n");
        assert_eq!(t.run(&["EXISTS", "k"]), ":0\r\n", "nothing is created for an empty patch");
        assert_eq!(t.run(&["SETRANGE", "k", "3", "abc"]), ":6\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$6\r\n\0\0\0abc\r\n");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "k"]), "$3\r\nraw\r\n");
        t.run(&["SET", "k", "Hello World", "EX", "100"]);
        assert_eq!(t.run(&["SETRANGE", "k", "6", "Redis"]), ":11\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$11\r\nHello Redis\r\n");
        assert_eq!(t.run(&["SETRANGE", "k", "6", "Valkey!"]), ":13\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$13\r\nHello Valkey!\r\n");
        assert_eq!(t.run(&["SETRANGE", "k", "15", "?"]), ":16\r\n");
        assert_eq!(t.run(&["GET", "k"]), "$16\r\nHello Valkey!\0\0?\r\n");
        assert_eq!(t.run(&["SETRANGE", "k", "0", "J"]), ":16\r\n");
        assert_eq!(t.run(&["GETRANGE", "k", "0", "4"]), "$5\r\nJello\r\n");
        assert_eq!(t.run(&["SETRANGE", "k", "100", ""]), ":16\r\n");
        assert_eq!(t.run(&["TTL", "k"]), ":100\r\n");
        t.run(&["SET", "s", "short"]);
        assert_eq!(t.run(&["SETRANGE", "s", "1", "HO"]), ":5\r\n", "in place within an inline value");
        assert_eq!(t.run(&["GET", "s"]), "$5\r\nsHOrt\r\n");
        assert_eq!(t.events.take().iter().filter(|e| e.starts_with("$:setrange")).count(), 6, "not for empty patches");
    }

    #[test]
    fn setrange_errors() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["SETRANGE", "k", "-1", "x"]), "-ERR offset is out of range\r\n");
        assert_eq!(t.run(&["SETRANGE", "k", "x", "x"]), "-ERR value is not an integer or out of range\r\n");
        let too_big = "-ERR string exceeds maximum allowed size (proto-max-bulk-len)\r\n";
        assert_eq!(t.run(&["SETRANGE", "k", "9223372036854775807", "A"]), too_big);
        assert_eq!(t.run(&["SETRANGE", "k", "536870912", "A"]), too_big);
        t.cfg.proto_max_bulk_len = 8;
        assert_eq!(t.run(&["SETRANGE", "k", "7", "A"]), ":8\r\n");
        assert_eq!(t.run(&["SETRANGE", "k", "8", "A"]), too_big);
        assert_eq!(t.run(&["SETRANGE", "k", "100", ""]), ":8\r\n", "empty patches skip the check");
    }

    const RNA1: &str = "CACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTTCGTCCGGGTGTG";
    const RNA2: &str = "ATTAAAGGTTTATACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";
    const RNA_LCS: &str = "ACCTTCCCAGGTAACAAACCAACCAACTTTCGATCTCTTGTAGATCTGTTCTCTAAACGAACTTTAAAATCTGTGTGGCTGTCACTCGGCTGCATGCTTAGTGCACTCACGCAGTATAATTAATAACTAATTACTGTCGTTGACAGGACACGAGTAACTCGTCTATCTTCTGCAGGCTGCTTACGGTTTCGTCCGTGTTGCAGCCGATCATCAGCACATCTAGGTTT";

    fn range_pair(a: (u32, u32), b: (u32, u32)) -> String {
        format!("*2\r\n:{}\r\n:{}\r\n*2\r\n:{}\r\n:{}\r\n", a.0, a.1, b.0, b.1)
    }

    #[test]
    fn lcs_string_len_and_idx() {
        let mut t = TestKit::default();
        t.run(&["SET", "virus1{t}", RNA1]);
        t.run(&["SET", "virus2{t}", RNA2]);
        assert_eq!(t.run(&["LCS", "virus1{t}", "virus2{t}"]), format!("${}\r\n{RNA_LCS}\r\n", RNA_LCS.len()));
        assert_eq!(t.run(&["LCS", "virus1{t}", "virus2{t}", "LEN"]), format!(":{}\r\n", RNA_LCS.len()));
        let runs = [
            ((238, 238), (239, 239)),
            ((236, 236), (238, 238)),
            ((229, 230), (236, 237)),
            ((224, 224), (235, 235)),
            ((1, 222), (13, 234)),
        ];
        let mut want = String::from("*4\r\n$7\r\nmatches\r\n*5\r\n");
        for (a, b) in runs {
            want += &format!("*2\r\n{}", range_pair(a, b));
        }
        want += &format!("$3\r\nlen\r\n:{}\r\n", RNA_LCS.len());
        assert_eq!(t.run(&["LCS", "virus1{t}", "virus2{t}", "IDX"]), want);
        let with_len = t.run(&["LCS", "virus1{t}", "virus2{t}", "IDX", "WITHMATCHLEN", "MINMATCHLEN", "5"]);
        assert_eq!(
            with_len,
            format!(
                "*4\r\n$7\r\nmatches\r\n*1\r\n*3\r\n{}:222\r\n$3\r\nlen\r\n:227\r\n",
                range_pair((1, 222), (13, 234))
            )
        );
        let all = t.run(&["LCS", "virus1{t}", "virus2{t}", "IDX", "WITHMATCHLEN"]);
        assert!(all.contains(&format!("*3\r\n{}:2\r\n", range_pair((229, 230), (236, 237)))));
    }

    #[test]
    fn lcs_small_and_resp3() {
        let mut t = TestKit::default();
        t.run(&["MSET", "a", "ohmytext", "b", "mynewtext"]);
        assert_eq!(t.run(&["LCS", "a", "b"]), "$6\r\nmytext\r\n");
        assert_eq!(t.run(&["LCS", "a", "b", "len"]), ":6\r\n");
        assert_eq!(t.run(&["LCS", "a", "nope"]), "$0\r\n\r\n");
        assert_eq!(t.run(&["LCS", "nope", "nope2", "LEN"]), ":0\r\n");
        t.proto = Protocol::Resp3;
        assert_eq!(
            t.run(&["LCS", "a", "b", "IDX", "MINMATCHLEN", "4"]),
            format!("%2\r\n$7\r\nmatches\r\n*1\r\n*2\r\n{}$3\r\nlen\r\n:6\r\n", range_pair((4, 7), (5, 8)))
        );
        assert_eq!(t.run(&["LCS", "a", "nope", "IDX"]), "%2\r\n$7\r\nmatches\r\n*0\r\n$3\r\nlen\r\n:0\r\n");
    }

    #[test]
    fn lcs_errors() {
        let mut t = TestKit::default();
        t.run(&["MSET", "a", "abc", "b", "abd"]);
        assert_eq!(
            t.run(&["LCS", "a", "b", "LEN", "IDX"]),
            "-ERR If you want both the length and indexes, please just use IDX.\r\n"
        );
        assert_eq!(t.run(&["LCS", "a", "b", "FOO"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["LCS", "a", "b", "MINMATCHLEN"]), "-ERR syntax error\r\n");
        assert_eq!(t.run(&["LCS", "a", "b", "MINMATCHLEN", "x"]), "-ERR value is not an integer or out of range\r\n");
        assert_eq!(t.run(&["LCS", "a", "b", "IDX", "MINMATCHLEN", "-3"]).matches("*2\r\n*2").count(), 1);
        t.cfg.proto_max_bulk_len = 15;
        assert_eq!(
            t.run(&["LCS", "a", "b"]),
            "-ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len\r\n"
        );
        assert_eq!(t.run(&["LCS", "a"]), "-ERR wrong number of arguments for 'lcs' command\r\n");
    }
}
