//! The sparse encoding: a run-length code over the 16384 registers, edited in place exactly as
//! Redis's `hllSparseSet` edits it, so the bytes after every add match Redis's.
//!
//! ```text
//! 00xxxxxx           ZERO   xxxxxx + 1 (1..=64) registers at 0
//! 01xxxxxx yyyyyyyy  XZERO  14-bit length + 1 (1..=16384) registers at 0
//! 1vvvvvxx           VAL    xx + 1 (1..=4) registers at vvvvv + 1 (1..=32)
//! ```

use std::fmt::Write as _;

use super::{HEADER_LEN, HllError};

/// Raises register `index` of a sparse sketch, splitting the opcode that covers it
/// (Redis's `hllSparseSet`), or promotes the sketch to dense when the value does not fit a
/// VAL opcode or the result would exceed `sparse_max` bytes.
pub(super) fn set(v: &mut Vec<u8>, index: usize, count: u8, sparse_max: usize) -> Result<bool, HllError> {
    if count > SPARSE_VAL_MAX {
        return super::promote(v, index, count);
    }
    reserve(v, sparse_max);
    // Step 1: find the opcode covering `index`, its first register and the opcode before it.
    let (mut p, mut first, mut prev, mut found) = (HEADER_LEN, 0, None, None);
    while p < v.len() {
        let op = read_op(v, p);
        if index < first + op.run {
            found = Some(op);
            break;
        }
        prev = Some(p);
        p += op.len;
        first += op.run;
    }
    let Some(op) = found else { return Err(HllError::Corrupt) };
    // Step 2: the cases that need no split.
    if op.value > 0 {
        if op.value >= count {
            return Ok(false);
        }
        if op.run == 1 {
            v[p] = val_op(count, 1);
            return Ok(finish(v, prev));
        }
    } else if op.len == 1 && op.run == 1 {
        v[p] = val_op(count, 1);
        return Ok(finish(v, prev));
    }
    // Step 3: split the opcode into up to three (worst case XZERO-VAL-XZERO, 5 bytes).
    let last = first + op.run - 1;
    let mut seq = [0u8; 5];
    let mut n = 0;
    let push_run = |seq: &mut [u8; 5], n: &mut usize, run: usize| {
        if op.value > 0 {
            seq[*n] = val_op(op.value, run);
            *n += 1;
        } else if run > ZERO_MAX_LEN {
            seq[*n..*n + 2].copy_from_slice(&xzero_op(run));
            *n += 2;
        } else {
            seq[*n] = (run - 1) as u8;
            *n += 1;
        }
    };
    if index != first {
        push_run(&mut seq, &mut n, index - first);
    }
    seq[n] = val_op(count, 1);
    n += 1;
    if index != last {
        push_run(&mut seq, &mut n, last - index);
    }
    if n > op.len && v.len() + n - op.len > sparse_max {
        return super::promote(v, index, count);
    }
    let old_end = (p + op.len).min(v.len());
    v.splice(p..old_end, seq[..n].iter().copied());
    Ok(finish(v, prev))
}

/// Step 4 of `hllSparseSet`: merges adjacent VAL opcodes of equal value (scanning at most
/// five opcodes from the one before the change), then marks the cache stale.
fn finish(v: &mut Vec<u8>, prev: Option<usize>) -> bool {
    let mut p = prev.unwrap_or(HEADER_LEN);
    let mut scan = 5;
    while p < v.len() && scan > 0 {
        scan -= 1;
        let op = read_op(v, p);
        if op.value == 0 {
            p += op.len;
            continue;
        }
        if p + 1 < v.len() && v[p + 1] & VAL_BIT != 0 {
            let next = read_op(v, p + 1);
            if next.value == op.value && op.run + next.run <= VAL_MAX_LEN {
                v[p + 1] = val_op(op.value, op.run + next.run);
                v.remove(p);
                // Try to merge the merged opcode with the one after it too.
                continue;
            }
        }
        p += 1;
    }
    super::invalidate(v);
    true
}

/// Grows a sparse sketch's buffer the way Redis does (greedily, but never beyond
/// `sparse_max`), so repeated adds do not reallocate each time.
fn reserve(v: &mut Vec<u8>, sparse_max: usize) {
    if v.capacity() < sparse_max && v.capacity() - v.len() < 3 {
        let mut want = v.len() + 3;
        want += want.min(300);
        let want = want.min(sparse_max).max(v.len() + 3);
        v.reserve_exact(want - v.len());
    }
}

/// One sparse opcode: its size in bytes, the registers it covers and their value.
#[derive(Debug, Clone, Copy)]
pub(super) struct Op {
    /// Bytes of the opcode.
    pub(super) len: usize,
    /// Registers it covers.
    pub(super) run: usize,
    /// Their value (0 for ZERO and XZERO).
    pub(super) value: u8,
}

/// Decodes the opcode at `p`. A truncated XZERO reads its missing second byte as 0, as C
/// reads the string's NUL terminator.
pub(super) fn read_op(s: &[u8], p: usize) -> Op {
    let b = s[p];
    if b & VAL_BIT != 0 {
        Op { len: 1, run: usize::from(b & 0x3) + 1, value: ((b >> 2) & 0x1f) + 1 }
    } else if b & XZERO_BIT != 0 {
        let lo = s.get(p + 1).copied().unwrap_or(0);
        Op { len: 2, run: ((usize::from(b & 0x3f) << 8) | usize::from(lo)) + 1, value: 0 }
    } else {
        Op { len: 1, run: usize::from(b & 0x3f) + 1, value: 0 }
    }
}

/// Iterator over the opcodes of a sparse body.
pub(super) struct Ops<'a> {
    body: &'a [u8],
    p: usize,
}

impl<'a> Ops<'a> {
    pub(super) fn new(body: &'a [u8]) -> Self {
        Ops { body, p: 0 }
    }
}

impl Iterator for Ops<'_> {
    type Item = Op;

    fn next(&mut self) -> Option<Op> {
        if self.p >= self.body.len() {
            return None;
        }
        let op = read_op(self.body, self.p);
        self.p += op.len;
        Some(op)
    }
}

fn val_op(value: u8, run: usize) -> u8 {
    VAL_BIT | ((value - 1) << 2) | (run - 1) as u8
}

pub(super) fn xzero_op(run: usize) -> [u8; 2] {
    let l = run - 1;
    [XZERO_BIT | (l >> 8) as u8, (l & 0xff) as u8]
}

/// The opcodes of a sparse body as PFDEBUG DECODE prints them.
pub(super) fn decode(body: &[u8]) -> String {
    let mut out = String::new();
    let mut p = 0;
    while p < body.len() {
        let op = read_op(body, p);
        let sep = if out.is_empty() { "" } else { " " };
        // Writing into a String cannot fail.
        let _ = match (op.value, op.len) {
            (0, 1) => write!(out, "{sep}z:{}", op.run),
            (0, _) => write!(out, "{sep}Z:{}", op.run),
            (v, _) => write!(out, "{sep}v:{v},{}", op.run),
        };
        p += op.len;
    }
    out
}

const XZERO_BIT: u8 = 0x40;
const VAL_BIT: u8 = 0x80;
const SPARSE_VAL_MAX: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
pub(super) const XZERO_MAX_LEN: usize = 16384;

#[cfg(test)]
mod tests {
    use crate::hll::*;

    #[test]
    fn sparse_opcodes_split_and_merge_like_redis() {
        let mut v = new_sparse();
        let set = |v: &mut Vec<u8>, i, c| set_register(v, i, c, 3000).unwrap();
        assert!(set(&mut v, 0, 1));
        assert_eq!(decode_sparse(&v), "v:1,1 Z:16383");
        assert!(set(&mut v, 1, 1));
        assert_eq!(decode_sparse(&v), "v:1,2 Z:16382", "adjacent equal values merge");
        assert!(!set(&mut v, 1, 1), "not above the current value");
        assert!(set(&mut v, 100, 3));
        assert_eq!(decode_sparse(&v), "v:1,2 Z:98 v:3,1 Z:16283");
        assert!(set(&mut v, 3, 5));
        assert_eq!(decode_sparse(&v), "v:1,2 z:1 v:5,1 Z:96 v:3,1 Z:16283");
        assert!(set(&mut v, 2, 1));
        assert_eq!(decode_sparse(&v), "v:1,3 v:5,1 Z:96 v:3,1 Z:16283");
        assert!(set(&mut v, 1, 2), "splitting a VAL run");
        assert_eq!(decode_sparse(&v), "v:1,1 v:2,1 v:1,1 v:5,1 Z:96 v:3,1 Z:16283");
        assert!(set(&mut v, 16383, 32));
        assert_eq!(decode_sparse(&v), "v:1,1 v:2,1 v:1,1 v:5,1 Z:96 v:3,1 Z:16282 v:32,1");
        assert_eq!(cached(&v), None, "changes mark the cache stale");
        let regs = {
            let mut d = v.clone();
            assert_eq!(to_dense(&mut d), Ok(true));
            dense_registers(&d)
        };
        assert_eq!(&regs[..5], [1, 2, 1, 5, 0]);
        assert_eq!((regs[100], regs[16383]), (3, 32));
        // A value above 32 does not fit a VAL opcode: promotion.
        assert!(set(&mut v, 7, 33));
        assert_eq!(check(&v), Ok(Encoding::Dense));
        let regs = dense_registers(&v);
        assert_eq!((regs[3], regs[7], regs[100], regs[16383]), (5, 33, 3, 32));
    }

    #[test]
    fn zero_runs_use_the_short_opcode_up_to_64() {
        let mut v = new_sparse();
        set_register(&mut v, 64, 1, 3000).unwrap();
        assert_eq!(decode_sparse(&v), "z:64 v:1,1 Z:16319");
        set_register(&mut v, 130, 1, 3000).unwrap();
        assert_eq!(decode_sparse(&v), "z:64 v:1,1 Z:65 v:1,1 Z:16253");
        assert_eq!(v.len(), HEADER_LEN + 7);
        // XZERO of one register: replaced by a single VAL, shrinking the body.
        let mut w = new_sparse();
        set_register(&mut w, 1, 1, 3000).unwrap();
        set_register(&mut w, 2, 1, 3000).unwrap();
        assert_eq!(decode_sparse(&w), "z:1 v:1,2 Z:16381");
        set_register(&mut w, 0, 1, 3000).unwrap();
        assert_eq!(decode_sparse(&w), "v:1,3 Z:16381");
        // Four equal registers fill a VAL opcode; a fifth starts another.
        set_register(&mut w, 3, 1, 3000).unwrap();
        set_register(&mut w, 4, 1, 3000).unwrap();
        assert_eq!(decode_sparse(&w), "v:1,4 v:1,1 Z:16379");
    }

    #[test]
    fn growing_past_the_limit_promotes() {
        let mut v = new_sparse();
        // 18 bytes now; splitting the XZERO in the middle needs 3 more.
        assert_eq!(set_register(&mut v, 5000, 2, 20), Ok(true));
        assert_eq!(check(&v), Ok(Encoding::Dense));
        assert_eq!(dense_registers(&v)[5000], 2);
        let mut v = new_sparse();
        assert_eq!(set_register(&mut v, 5000, 2, 21), Ok(true));
        assert_eq!((check(&v), v.len()), (Ok(Encoding::Sparse), 21), "exactly at the limit stays sparse");
        // A change that does not grow the body never promotes, whatever the limit.
        assert_eq!(set_register(&mut v, 5000, 3, 0), Ok(true));
        assert_eq!(check(&v), Ok(Encoding::Sparse));
    }
}
