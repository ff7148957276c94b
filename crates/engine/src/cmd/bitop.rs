//! BITOP: AND, OR, XOR or NOT of whole strings into a destination key.
//!
//! Shorter inputs count as zero-padded to the longest; the result replaces the destination
//! (a raw string, without TTL), and an empty result deletes it. The result is folded in one
//! source at a time over 64-bit words, so only the first source is ever copied.

use hotkv_protocol::{Args, ReplyBuf};

use super::Spec;
use super::bitops::{row, word};
use crate::command::{KeySpec, flags, key_flags as kf};
use crate::ctx::{Ctx, Ttl};
use crate::entry::NewValue;
use crate::error::{CmdResult, CommandError};
use crate::object::Object;

/// BITOP's row.
pub static COMMANDS: &[Spec] = &[row(
    "bitop",
    -4,
    flags::WRITE | flags::DENYOOM,
    &[KeySpec::single(2, kf::OW | kf::UPDATE), KeySpec::range(3, -1, 1, kf::RO | kf::ACCESS)],
    "2.6.0",
    "Performs bitwise operations on multiple strings, and stores the result.",
    "O(N)",
    bitop,
)];

/// BITOP's operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum BitOp {
    And,
    Or,
    Xor,
    Not,
}

fn bitop(ctx: &mut Ctx<'_>, args: Args<'_>, out: &mut ReplyBuf) -> CmdResult {
    let name = args.get(1);
    let op = [(b"and".as_slice(), BitOp::And), (b"or", BitOp::Or), (b"xor", BitOp::Xor), (b"not", BitOp::Not)]
        .into_iter()
        .find(|(n, _)| name.eq_ignore_ascii_case(n))
        .map(|(_, op)| op)
        .ok_or(CommandError::Syntax)?;
    if op == BitOp::Not && args.len() != 4 {
        return Err(CommandError::err("BITOP NOT must be called with a single source key."));
    }
    // The result is folded in one source at a time, so no source is copied but the first;
    // a later WRONGTYPE source fails the command before the destination is touched.
    let mut res = Vec::new();
    for (i, key) in args.iter().skip(3).enumerate() {
        match ctx.read(key)? {
            Some(k) => combine(op, &mut res, k.str()?, i == 0),
            None => combine(op, &mut res, &[], i == 0),
        }
    }
    let dest = args.get(2);
    let len = res.len();
    if len > 0 {
        res.shrink_to_fit();
        // Like Valkey, the result is a new raw string; SET semantics drop any TTL.
        ctx.set(dest, NewValue::Object(Object::Str(res)), Ttl::Clear)?;
        ctx.events.notify('$', "set", dest, ctx.db);
    } else if ctx.delete(dest)? {
        ctx.events.notify('g', "del", dest, ctx.db);
    }
    out.int(len as i64);
    Ok(())
}

/// Folds one source into the result. Shorter strings count as zero-padded to the longest.
fn combine(op: BitOp, res: &mut Vec<u8>, src: &[u8], first: bool) {
    if first {
        res.extend_from_slice(src);
        if op == BitOp::Not {
            map_words(res, |w| !w);
        }
        return;
    }
    if src.len() > res.len() {
        res.resize(src.len(), 0);
    }
    match op {
        BitOp::And => {
            zip_words(res, src, |a, b| a & b);
            res[src.len()..].fill(0);
        }
        BitOp::Or => zip_words(res, src, |a, b| a | b),
        BitOp::Xor => zip_words(res, src, |a, b| a ^ b),
        // NOT takes exactly one source, which is always the first.
        BitOp::Not => {}
    }
}

/// `dst[i] = f(dst[i], src[i])` over the common prefix, eight bytes at a time.
fn zip_words(dst: &mut [u8], src: &[u8], f: impl Fn(u64, u64) -> u64) {
    let n = dst.len().min(src.len());
    let (dst, src) = (&mut dst[..n], &src[..n]);
    let mut d = dst.chunks_exact_mut(8);
    let mut s = src.chunks_exact(8);
    for (a, b) in (&mut d).zip(&mut s) {
        a.copy_from_slice(&f(word(a), word(b)).to_ne_bytes());
    }
    for (a, b) in d.into_remainder().iter_mut().zip(s.remainder()) {
        *a = f(u64::from(*a), u64::from(*b)) as u8;
    }
}

/// `dst[i] = f(dst[i])`, eight bytes at a time.
fn map_words(dst: &mut [u8], f: impl Fn(u64) -> u64) {
    let mut d = dst.chunks_exact_mut(8);
    for a in &mut d {
        a.copy_from_slice(&f(word(a)).to_ne_bytes());
    }
    for a in d.into_remainder() {
        *a = f(u64::from(*a)) as u8;
    }
}

#[cfg(test)]
mod tests {
    use crate::cmd::bitops::tests::{get, set};
    use crate::testkit::TestKit;

    #[test]
    fn bitop_pads_shorter_inputs_with_zeros() {
        let mut t = TestKit::default();
        set(&mut t, "a", b"\x01\x02\xff\xff");
        set(&mut t, "b", b"\x01\x02\xff");
        assert_eq!(t.run(&["BITOP", "AND", "r1", "a", "b"]), ":4\r\n");
        assert_eq!(get(&mut t, "r1"), b"\x01\x02\xff\x00");
        assert_eq!(t.run(&["BITOP", "or", "r2", "a", "b"]), ":4\r\n");
        assert_eq!(get(&mut t, "r2"), b"\x01\x02\xff\xff");
        assert_eq!(t.run(&["BITOP", "xor", "r3", "a", "b"]), ":4\r\n");
        assert_eq!(get(&mut t, "r3"), b"\x00\x00\x00\xff");
        assert_eq!(t.run(&["BITOP", "AND", "r4", "b", "a"]), ":4\r\n", "shorter first");
        assert_eq!(get(&mut t, "r4"), b"\x01\x02\xff\x00");
        assert_eq!(t.run(&["BITOP", "AND", "r5", "nokey", "a"]), ":4\r\n");
        assert_eq!(get(&mut t, "r5"), b"\x00\x00\x00\x00");
        assert_eq!(t.run(&["BITOP", "OR", "r6", "nokey", "b", "nokey2"]), ":3\r\n");
        assert_eq!(get(&mut t, "r6"), b"\x01\x02\xff");
        assert_eq!(t.run(&["OBJECT", "ENCODING", "r6"]), "$3\r\nraw\r\n");
        set(&mut t, "z", &[0; 32]);
        assert_eq!(t.run(&["BITOP", "OR", "x", "z", "nokey"]), ":32\r\n");
        t.run(&["SET", "i1", "1"]);
        t.run(&["SET", "i2", "2"]);
        assert_eq!(t.run(&["BITOP", "XOR", "d", "i1", "i2", "i1"]), ":1\r\n");
        assert_eq!(t.run(&["GET", "d"]), "$1\r\n2\r\n");
    }

    #[test]
    fn bitop_not_and_long_inputs_match_a_byte_model() {
        let mut t = TestKit::default();
        set(&mut t, "s", b"\xaa\x00\xff\x55");
        assert_eq!(t.run(&["BITOP", "NOT", "s", "s"]), ":4\r\n", "destination may be the source");
        assert_eq!(get(&mut t, "s"), b"\x55\xff\x00\xaa");
        let a: Vec<u8> = (0..1000u32).map(|i| (i * 7 + 3) as u8).collect();
        let b: Vec<u8> = (0..613u32).map(|i| (i * 13 + 1) as u8).collect();
        let c: Vec<u8> = (0..37u32).map(|i| (i * 31) as u8).collect();
        set(&mut t, "a", &a);
        set(&mut t, "b", &b);
        set(&mut t, "c", &c);
        let at = |v: &[u8], i: usize| v.get(i).copied().unwrap_or(0);
        let model =
            |f: fn(u8, u8) -> u8| -> Vec<u8> { (0..1000).map(|i| f(f(at(&a, i), at(&b, i)), at(&c, i))).collect() };
        for (op, f) in [("AND", (|x, y| x & y) as fn(u8, u8) -> u8), ("OR", |x, y| x | y), ("XOR", |x, y| x ^ y)] {
            assert_eq!(t.run(&["BITOP", op, "r", "a", "b", "c"]), ":1000\r\n");
            assert_eq!(get(&mut t, "r"), model(f), "{op}");
        }
        t.run(&["BITOP", "NOT", "r", "b"]);
        assert_eq!(get(&mut t, "r"), b.iter().map(|x| !x).collect::<Vec<_>>());
    }

    #[test]
    fn bitop_empty_result_deletes_the_destination() {
        let mut t = TestKit::default();
        t.run(&["SET", "dest", "old", "EX", "100"]);
        set(&mut t, "e", b"");
        t.events.take();
        assert_eq!(t.run(&["BITOP", "NOT", "dest", "e"]), ":0\r\n");
        assert_eq!(t.events.take(), ["g:del:dest@0"]);
        assert_eq!(t.run(&["EXISTS", "dest"]), ":0\r\n");
        t.events.take();
        assert_eq!(t.run(&["BITOP", "AND", "dest", "nokey", "nokey2"]), ":0\r\n");
        assert!(!t.events.take().iter().any(|e| e.contains(":del:")), "nothing to delete, no event");
        t.run(&["SET", "dest", "old", "EX", "100"]);
        t.run(&["SET", "a", "x"]);
        assert_eq!(t.run(&["BITOP", "OR", "dest", "a"]), ":1\r\n");
        assert_eq!(t.run(&["TTL", "dest"]), ":-1\r\n", "the result replaces the key and its TTL");
    }

    #[test]
    fn bitop_errors() {
        let mut t = TestKit::default();
        assert_eq!(t.run(&["BITOP", "NAND", "d", "a"]), "-ERR syntax error\r\n");
        assert_eq!(
            t.run(&["BITOP", "NOT", "d", "a", "b"]),
            "-ERR BITOP NOT must be called with a single source key.\r\n"
        );
        assert_eq!(t.run(&["BITOP", "AND", "d"]), "-ERR wrong number of arguments for 'bitop' command\r\n");
    }
}
